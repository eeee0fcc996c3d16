//! hayate: the buffers of connections without streams, kept per thread for
//! the next connection that needs them.
//!
//! `Codec::release_idle` gives a connection's read buffer, write buffer and
//! HPACK decoder buffer back whenever it has no open stream, so an idle
//! connection holds none of them (28 KiB it kept for its life before). A
//! busy connection runs out of streams between every burst of them (about
//! once per 8 requests under `h2load -c10 -m10`); freeing and allocating
//! the buffers each time cost 0.3-0.5 µs per request there. Taken from and
//! given back to this pool they cost a `Vec` push and pop.

use bytes::BytesMut;
use std::cell::RefCell;

/// The buffers a connection gives back.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Class {
    /// Frames read (tokio-util's initial 8 KiB).
    Read = 0,
    /// Frames written: 16 KiB, the minimum MAX_FRAME_SIZE, so a HEADERS frame
    /// that big always fits.
    Write = 1,
    /// Huffman-decoded header strings (4 KiB).
    Hpack = 2,
}

impl Class {
    /// The capacity a buffer of this class has.
    pub(crate) const fn capacity(self) -> usize {
        match self {
            Class::Read => 8 * 1024,
            Class::Write => 16 * 1024,
            Class::Hpack => 4 * 1024,
        }
    }
}

/// Buffers kept per class per thread: at most 64 × 28 KiB, 1.8 MiB, a
/// thread. Beyond that many connections going idle at once, buffers are
/// freed.
const KEPT: usize = 64;

/// A buffer that grew past this many times its class's capacity (a large
/// frame) is freed rather than kept.
const GREW: usize = 4;

thread_local! {
    static POOL: RefCell<[Vec<BytesMut>; 3]> =
        const { RefCell::new([Vec::new(), Vec::new(), Vec::new()]) };
}

/// An empty buffer with at least the class's capacity: a kept one, or a new
/// one.
pub(crate) fn take(class: Class) -> BytesMut {
    let kept = POOL
        .try_with(|pool| pool.borrow_mut()[class as usize].pop())
        .ok()
        .flatten();
    let mut buf = kept.unwrap_or_default();
    // A kept buffer whose front went to frames still alive takes its whole
    // allocation back if they are gone, or is replaced by a new one.
    buf.reserve(class.capacity());
    buf
}

/// Takes a connection's empty buffer to keep (one holding bytes is an
/// error of the caller's and is dropped).
pub(crate) fn give(class: Class, buf: BytesMut) {
    if !buf.is_empty() || buf.capacity() == 0 || buf.capacity() > GREW * class.capacity() {
        return;
    }
    let _ = POOL.try_with(|pool| {
        let mut pool = pool.borrow_mut();
        let kept = &mut pool[class as usize];
        if kept.len() < KEPT {
            kept.push(buf);
        }
    });
}
