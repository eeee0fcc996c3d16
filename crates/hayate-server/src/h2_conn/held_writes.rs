//! The HTTP/2 connection's writes, held until it has nothing more to do for
//! now, then written together.
//!
//! h2 flushes its frame buffer whenever a DATA frame of 256 bytes or more is
//! queued behind another frame (it chains such payloads instead of copying
//! them, and a chained frame must be written before the next one is
//! buffered), and at the end of every pass of its connection. With ten
//! streams answered from one read, that was ten `writev`s, ten TLS records
//! and ten trips through the TCP stack where one would do: measured with
//! `h2load -c10 -m10` on a 1 KiB file, 11 `writev` per `recvfrom`.
//!
//! [`HeldWrites`] sits between h2 and the transport. Writes are copied into
//! one buffer (up to [`HOLD`] bytes; a larger write goes straight through,
//! after what is held) and h2's flushes are answered at once; the serving
//! loop writes the buffer out with [`Held::write_out`] whenever h2 has no new
//! stream for it, which is the moment the connection would wait. Shutdown
//! writes out what is held first. The buffer is released once written, so
//! an idle connection holds none.
//!
//! Every write to the transport passes here, so here the connection's
//! [`Stall`] learns when writes stop and start making progress.

use std::cell::RefCell;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{ready, Context, Poll};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::stall::Stall;

/// Bytes held before they are written without waiting for the connection
/// to go quiet: one TLS record's plaintext (2^14, RFC 8446 §5.1), so a
/// batch of small responses becomes one record.
pub const HOLD: usize = 16 * 1024;

/// The transport as h2 sees it.
pub struct HeldWrites<T> {
    shared: Rc<RefCell<Held<T>>>,
}

/// The transport and what is held for it, shared by h2's side
/// ([`HeldWrites`]) and the serving loop.
pub struct Held<T> {
    io: T,
    out: BytesMut,
    /// Whether writes are making progress.
    pub stall: Stall,
}

impl<T> HeldWrites<T> {
    /// Wraps `io`; the second half is the serving loop's handle.
    pub fn new(io: T, stall: Stall) -> (HeldWrites<T>, Rc<RefCell<Held<T>>>) {
        let shared = Rc::new(RefCell::new(Held {
            io,
            out: BytesMut::new(),
            stall,
        }));
        (
            HeldWrites {
                shared: shared.clone(),
            },
            shared,
        )
    }
}

impl<T: AsyncWrite + Unpin> Held<T> {
    /// Writes out what is held, then flushes the transport (a TLS stream
    /// writes its records there).
    pub fn write_out(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.out.is_empty() {
            let polled = Pin::new(&mut self.io).poll_write(cx, &self.out);
            let n = ready!(noted(&mut self.stall, polled))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.out.advance(n);
        }
        if self.out.capacity() > 0 {
            self.out = BytesMut::new();
        }
        let flushed = Pin::new(&mut self.io).poll_flush(cx);
        noted(&mut self.stall, flushed)
    }

    /// Holds `bytes` after what h2 wrote (a frame hayate writes itself).
    pub fn push(&mut self, bytes: &[u8]) {
        self.out.extend_from_slice(bytes);
    }

    /// Shuts the transport's writing down (a TLS close_notify, a FIN).
    pub fn shutdown(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

impl<T: AsyncRead + Unpin> Held<T> {
    /// Reads and drops what has arrived, up to 64 KiB, without waiting.
    pub fn drain_arrived(&mut self, cx: &mut Context<'_>) {
        let mut sink = [0u8; 4096];
        for _ in 0..16 {
            let mut buf = ReadBuf::new(&mut sink);
            match Pin::new(&mut self.io).poll_read(cx, &mut buf) {
                Poll::Ready(Ok(())) if !buf.filled().is_empty() => {}
                _ => return,
            }
        }
    }
}

/// A write of the transport, told to the stall: whether it went through.
fn noted<R>(stall: &mut Stall, polled: Poll<R>) -> Poll<R> {
    match polled {
        Poll::Pending => stall.blocked(),
        Poll::Ready(_) => stall.progressed(),
    }
    polled
}

impl<T: AsyncRead + Unpin> AsyncRead for HeldWrites<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.shared.borrow_mut().io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for HeldWrites<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[io::IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let held = &mut *self.shared.borrow_mut();
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if held.out.len() + total > HOLD {
            ready!(held.write_out(cx))?;
            if total >= HOLD {
                let polled = Pin::new(&mut held.io).poll_write_vectored(cx, bufs);
                return noted(&mut held.stall, polled);
            }
        }
        if held.out.capacity() == 0 {
            // The whole batch at once: grown by doubling from nothing, a
            // 16 KiB batch of 1 KiB frames was five reallocs and copies
            // (1.1 % of hayate's CPU on case GR's server stream, perf).
            held.out.reserve(HOLD);
        }
        for b in bufs {
            held.out.extend_from_slice(b);
        }
        Poll::Ready(Ok(total))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    /// Held: the serving loop writes when the connection goes quiet.
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let held = &mut *self.shared.borrow_mut();
        ready!(held.write_out(cx))?;
        Pin::new(&mut held.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hayate_core::deadline::Deadlines;
    use std::future::poll_fn;
    use tokio::io::AsyncWriteExt;

    fn held(io: Writes) -> (HeldWrites<Writes>, Rc<RefCell<Held<Writes>>>) {
        HeldWrites::new(io, Stall::new(Rc::new(Deadlines::default()).slot()))
    }

    /// A transport that records each write it is given.
    #[derive(Default)]
    struct Writes(Vec<Vec<u8>>);

    impl AsyncWrite for Writes {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.0.push(buf.to_vec());
            Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn small_writes_and_flushes_become_one_write_out() {
        let (mut h2_side, held) = held(Writes::default());
        for i in 0..10u8 {
            h2_side.write_all(&[i; 1033]).await.unwrap();
            h2_side.flush().await.unwrap();
        }
        assert!(
            held.borrow().io.0.is_empty(),
            "nothing written before write_out"
        );
        poll_fn(|cx| held.borrow_mut().write_out(cx)).await.unwrap();
        let held = held.borrow();
        assert_eq!(held.io.0.len(), 1);
        assert_eq!(held.io.0[0].len(), 10_330);
        assert_eq!(held.out.capacity(), 0, "an idle connection holds no buffer");
    }

    #[tokio::test]
    async fn a_large_write_goes_through_after_what_is_held() {
        let (mut h2_side, held) = held(Writes::default());
        h2_side.write_all(b"head").await.unwrap();
        h2_side.write_all(&vec![7; HOLD]).await.unwrap();
        h2_side.shutdown().await.unwrap();
        let held = held.borrow();
        let sizes: Vec<usize> = held.io.0.iter().map(Vec::len).collect();
        assert_eq!(sizes, [4, HOLD], "in order, the large one not copied");
    }
}
