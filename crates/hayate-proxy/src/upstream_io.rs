//! Reading and writing an upstream connection under the proxy's timeouts,
//! whatever the protocol: a request written with a note of whether any
//! byte of it left ([`Sending`], which decides whether it may be sent
//! again), a response body read with a stall timer ([`StallRead`]), and
//! the buffers responses are read into ([`read_buffer`], [`recycle`]).

use std::cell::RefCell;
use std::future::Future;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::BytesMut;
use hayate_core::transport::Transport;
use tokio::io::AsyncWriteExt;
use tokio::time::Sleep;

use crate::retry::Failure;
use crate::spares::{self, Spares};

/// Capacity of a buffer a response is read into: most heads and a few KiB
/// of body in one read.
const READ_BUFFER: usize = 8 * 1024;

/// Read buffers a worker's thread keeps for its next responses: 256 KiB
/// at most. A buffer of 8 KiB is past the allocator's per-thread cache
/// (1,032 bytes in glibc): allocating and freeing one per proxied request
/// cost 450 of its 21,800 instructions (bench/instructions/run).
const KEPT_READ_BUFFERS: usize = 32;

thread_local! {
    static SPARE_READ_BUFFERS: Spares<BytesMut> = const { RefCell::new(Vec::new()) };
}

/// An empty buffer to read a response into: one a response before this
/// gave back, or a new one.
pub(crate) fn read_buffer() -> BytesMut {
    spares::take(&SPARE_READ_BUFFERS).unwrap_or_else(|| BytesMut::with_capacity(READ_BUFFER))
}

/// Keeps `buf` for a later response when nothing else holds any of it
/// (a body chunk split from it and still being written does) and it did not
/// grow past twice its size (a large head); frees it otherwise.
pub(crate) fn recycle(mut buf: BytesMut) {
    buf.clear();
    if buf.try_reclaim(READ_BUFFER) && buf.capacity() <= 2 * READ_BUFFER {
        spares::keep(&SPARE_READ_BUFFERS, buf, KEPT_READ_BUFFERS);
    }
}

/// Writes a request on an upstream connection, noting whether any byte of
/// it left (see [`Failure`]).
pub(crate) struct Sending<'c> {
    pub conn: &'c mut Transport,
    /// Some byte of the request reached the connection.
    pub wrote: bool,
    /// Sending had to wait (the upstream's socket was full, or the body
    /// streams from the client).
    pub waited: bool,
    /// Longest wait for the upstream to take more.
    pub limit: Duration,
}

impl<'c> Sending<'c> {
    /// Nothing sent yet on `conn`; each wait for it to take more is bounded
    /// by `limit`.
    pub(crate) fn new(conn: &'c mut Transport, limit: Duration) -> Sending<'c> {
        Sending {
            conn,
            wrote: false,
            waited: false,
            limit,
        }
    }

    /// Writes every byte of `parts`, with as few (vectored) writes as the
    /// socket takes.
    pub async fn send(&mut self, mut parts: &mut [IoSlice<'_>]) -> Result<(), Failure> {
        IoSlice::advance_slices(&mut parts, 0);
        while !parts.is_empty() {
            // Tried first without a timer: a pooled connection's socket
            // takes a request head whole, and the timeout would read the
            // clock and build its timer for nothing (1 of the 16 clock
            // reads of a proxied request, `bench/instructions/run`). Only a
            // write that would block waits, bounded by `limit`.
            let written = match self.conn.try_write_vectored(parts) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.waited = true;
                    tokio::time::timeout(self.limit, self.conn.write_vectored(parts)).await
                }
                now => Ok(now),
            };
            let error = match written {
                Ok(Ok(0)) => io::ErrorKind::WriteZero.into(),
                Ok(Ok(n)) => {
                    self.wrote = true;
                    IoSlice::advance_slices(&mut parts, n);
                    continue;
                }
                Ok(Err(e)) => e,
                Err(_) => io::Error::new(io::ErrorKind::TimedOut, "upstream I/O timed out"),
            };
            return Err(if self.wrote {
                Failure::NoAnswer(error)
            } else {
                Failure::NotSent(error)
            });
        }
        Ok(())
    }
}

/// Reads a response body from an upstream, failing when it stalls longer
/// than its limit (the timer is allocated at the first read that waits,
/// then reset, not rebuilt per read).
pub(crate) struct StallRead {
    limit: Duration,
    timer: Option<Pin<Box<Sleep>>>,
    /// Whether `timer` runs for the current wait.
    armed: bool,
}

impl StallRead {
    /// A reader that waits at most `limit` for each read.
    pub(crate) fn new(limit: Duration) -> StallRead {
        StallRead {
            limit,
            timer: None,
            armed: false,
        }
    }

    /// Reads more of `conn` into `buf`; `Ok(0)` at EOF.
    pub(crate) fn poll_read(
        &mut self,
        conn: &mut Transport,
        buf: &mut BytesMut,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<usize>> {
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(16 * 1024);
        }
        match tokio_util::io::poll_read_buf(Pin::new(conn), cx, buf) {
            Poll::Ready(r) => {
                self.armed = false;
                Poll::Ready(r)
            }
            Poll::Pending => {
                let limit = self.limit;
                let timer = match &mut self.timer {
                    Some(t) if self.armed => t,
                    Some(t) => {
                        t.as_mut().reset(tokio::time::Instant::now() + limit);
                        t
                    }
                    None => self.timer.insert(Box::pin(tokio::time::sleep(limit))),
                };
                self.armed = true;
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "upstream body stalled",
                    ))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spare() -> usize {
        spares::count(&SPARE_READ_BUFFERS)
    }

    #[test]
    fn read_buffers_are_reused_only_when_nothing_else_holds_them() {
        let mut buf = read_buffer();
        let at = buf.as_ptr();
        buf.extend_from_slice(b"HTTP/1.1 200 OK\r\n\r\nbody");
        // Reading a head consumes its bytes from the front.
        bytes::Buf::advance(&mut buf, 19);
        recycle(buf);
        assert_eq!(spare(), 1);
        let again = read_buffer();
        assert_eq!(
            (again.as_ptr(), again.len()),
            (at, 0),
            "the same buffer, empty"
        );
        assert!(again.capacity() >= READ_BUFFER);

        // A chunk split from it is still held: freed, not kept.
        let mut held = again;
        held.extend_from_slice(b"chunk");
        let chunk = held.split_to(5).freeze();
        recycle(held);
        assert_eq!(spare(), 0);
        assert_eq!(&chunk[..], b"chunk");

        // One grown past twice its size is not kept either.
        let mut big = read_buffer();
        big.reserve(4 * READ_BUFFER);
        recycle(big);
        assert_eq!(spare(), 0);

        // At most KEPT_READ_BUFFERS are kept.
        let many: Vec<BytesMut> = (0..KEPT_READ_BUFFERS + 3).map(|_| read_buffer()).collect();
        many.into_iter().for_each(recycle);
        assert_eq!(spare(), KEPT_READ_BUFFERS);
    }
}
