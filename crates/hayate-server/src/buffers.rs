//! The buffers a connection reads and writes with, lent by its worker.
//!
//! A connection needs a read buffer, a write buffer and the vectors a parsed
//! head lives in ([`Spare`]) from the moment a request's bytes arrive until
//! its response is written. Between requests it holds none: when it would
//! wait for the client with nothing buffered, it gives its set to the
//! worker's [`BufferPool`], and takes a set back once the socket is readable
//! (`client_io::read_lending`). A worker runs its connections one at a time,
//! so the sets in use are those of connections in the middle of a request
//! (waiting on an upstream, on a slow client's body, on a full socket
//! buffer): an idle keep-alive connection costs its task, its socket's
//! registration and its deadline slot, and no buffer — neither one it owns
//! nor one it freed and the allocator kept resident.

use std::cell::{Cell, RefCell};

use bytes::BytesMut;

use hayate_core::h1::request::Spare;

/// Most bytes of buffer capacity a pool keeps; sets beyond it are freed.
/// A set is 3-4 KiB after small requests (a 2 KiB read buffer, a write
/// buffer of a head and a small body, a head's copy): a hundred of them.
const POOL_BYTES: usize = 512 * 1024;

/// A connection's buffers, moved as one between it and the pool.
#[derive(Debug, Default)]
pub struct Buffers {
    /// Bytes read from the client, not yet parsed or consumed.
    pub rbuf: BytesMut,
    /// Response bytes not yet written.
    pub wbuf: Vec<u8>,
    /// What the next parsed head is copied into.
    pub spare: Spare,
}

impl Buffers {
    /// Capacity of the two byte buffers (the head vectors are small).
    fn bytes(&self) -> usize {
        self.rbuf.capacity() + self.wbuf.capacity()
    }
}

/// A worker's free buffer sets (same thread only).
#[derive(Debug, Default)]
pub struct BufferPool {
    free: RefCell<Vec<Buffers>>,
    /// Capacity held in `free`.
    held: Cell<usize>,
}

impl BufferPool {
    /// Takes `rbuf`, `wbuf` and `spare` of a connection about to wait with
    /// nothing buffered (both byte buffers empty); they are left without
    /// capacity. Nothing happens when they have none (lent already).
    pub fn lend(&self, rbuf: &mut BytesMut, wbuf: &mut Vec<u8>, spare: &mut Spare) {
        debug_assert!(rbuf.is_empty() && wbuf.is_empty());
        if rbuf.capacity() == 0 && wbuf.capacity() == 0 {
            return;
        }
        // A read buffer parsed to its end reports only the capacity past
        // what was consumed: take the rest back (no copy, no allocation)
        // so that it is counted, and reused, whole.
        let _ = rbuf.try_reclaim(rbuf.capacity() + 1);
        let set = Buffers {
            rbuf: std::mem::take(rbuf),
            wbuf: std::mem::take(wbuf),
            spare: std::mem::take(spare),
        };
        let bytes = set.bytes();
        if self.held.get() + bytes <= POOL_BYTES {
            self.held.set(self.held.get() + bytes);
            self.free.borrow_mut().push(set);
        }
    }

    /// Gives a connection that holds no buffers (lent, or never allocated)
    /// a set: the last one lent, or none (its buffers grow on first use).
    /// One that holds some keeps them.
    pub fn take_into(&self, rbuf: &mut BytesMut, wbuf: &mut Vec<u8>, spare: &mut Spare) {
        if rbuf.capacity() != 0 || wbuf.capacity() != 0 {
            return;
        }
        if let Some(set) = self.free.borrow_mut().pop() {
            self.held.set(self.held.get() - set.bytes());
            *rbuf = set.rbuf;
            *wbuf = set.wbuf;
            *spare = set.spare;
        }
    }

    /// Sets waiting in the pool.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.free.borrow().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lends_and_takes_back_the_same_allocation() {
        let pool = BufferPool::default();
        let mut set = Buffers::default();
        // Never allocated: nothing to lend, nothing taken from an empty pool.
        pool.lend(&mut set.rbuf, &mut set.wbuf, &mut set.spare);
        assert_eq!(pool.len(), 0);
        pool.take_into(&mut set.rbuf, &mut set.wbuf, &mut set.spare);
        assert_eq!(set.rbuf.capacity(), 0);

        set.rbuf.reserve(2048);
        set.wbuf.reserve(1024);
        let (r, w) = (set.rbuf.as_ptr(), set.wbuf.as_ptr());
        pool.lend(&mut set.rbuf, &mut set.wbuf, &mut set.spare);
        assert_eq!((set.rbuf.capacity(), set.wbuf.capacity()), (0, 0));
        assert_eq!(pool.len(), 1);
        // Lending again (a spurious wake-up) is a no-op.
        pool.lend(&mut set.rbuf, &mut set.wbuf, &mut set.spare);
        assert_eq!(pool.len(), 1);

        let mut other = Buffers::default();
        pool.take_into(&mut other.rbuf, &mut other.wbuf, &mut other.spare);
        assert_eq!((other.rbuf.as_ptr(), other.wbuf.as_ptr()), (r, w));
        assert_eq!((pool.len(), pool.held.get()), (0, 0));

        // A connection that holds buffers keeps them.
        let mut third = Buffers::default();
        third.wbuf.reserve(64);
        pool.lend(&mut third.rbuf, &mut third.wbuf, &mut third.spare);
        assert_eq!(pool.len(), 1);
        pool.take_into(&mut other.rbuf, &mut other.wbuf, &mut other.spare);
        assert_eq!((other.rbuf.as_ptr(), pool.len()), (r, 1));
    }

    #[test]
    fn a_read_buffer_parsed_to_its_end_is_lent_whole() {
        let pool = BufferPool::default();
        let mut set = Buffers::default();
        set.rbuf.reserve(2048);
        let cap = set.rbuf.capacity();
        set.rbuf.extend_from_slice(&vec![b'x'; cap]);
        bytes::Buf::advance(&mut set.rbuf, cap);
        assert_eq!(set.rbuf.capacity(), 0);
        set.wbuf.reserve(100);
        let wcap = set.wbuf.capacity();
        pool.lend(&mut set.rbuf, &mut set.wbuf, &mut set.spare);
        assert_eq!(pool.len(), 1);
        assert_eq!(pool.held.get(), cap + wcap);
    }

    #[test]
    fn keeps_at_most_its_byte_budget() {
        let pool = BufferPool::default();
        let sets = POOL_BYTES / (64 * 1024) + 3;
        for _ in 0..sets {
            let mut set = Buffers::default();
            set.rbuf.reserve(64 * 1024);
            pool.lend(&mut set.rbuf, &mut set.wbuf, &mut set.spare);
        }
        assert!(pool.held.get() <= POOL_BYTES);
        assert!(pool.len() < sets, "{} sets kept", pool.len());
    }
}
