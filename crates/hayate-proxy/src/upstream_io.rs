//! Reading and writing an upstream connection under the proxy's timeouts,
//! whatever the protocol: a request written with a note of whether any
//! byte of it left ([`Sending`], which decides whether it may be sent
//! again), and a response body read with a stall timer ([`StallRead`]).

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
