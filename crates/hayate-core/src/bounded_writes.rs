//! A byte stream whose writes wait a bounded time: for the relays that
//! copy until either side closes (WebSocket tunnels, over HTTP/1.1 and
//! HTTP/2), where a peer that stops reading would otherwise hold both
//! connections for good (decision 0014). Reads are left alone: a quiet
//! tunnel is a tunnel in use.
//!
//! The timer is allocated at the first write that waits and reset for each
//! later one; a write that goes through costs a flag store.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// `inner`, whose every write (and flush, and shutdown) fails with
/// `TimedOut` once it has waited `limit` for the peer to take bytes.
pub struct BoundedWrites<T> {
    inner: T,
    limit: Duration,
    /// Whether the last write was refused (the timer runs for it).
    waiting: bool,
    timer: Option<Pin<Box<Sleep>>>,
}

impl<T> BoundedWrites<T> {
    /// Bounds each write of `inner` to `limit`.
    pub fn new(inner: T, limit: Duration) -> BoundedWrites<T> {
        BoundedWrites {
            inner,
            limit,
            waiting: false,
            timer: None,
        }
    }

    /// Passes a write's result on; a refused one starts (or goes on
    /// counting) the wait, which fails once `limit` passed.
    fn bound<R>(
        &mut self,
        polled: Poll<io::Result<R>>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<R>> {
        if polled.is_ready() {
            self.waiting = false;
            return polled;
        }
        if !self.waiting {
            self.waiting = true;
            let until = Instant::now() + self.limit;
            match &mut self.timer {
                Some(timer) => timer.as_mut().reset(until),
                None => self.timer = Some(Box::pin(tokio::time::sleep_until(until))),
            }
        }
        let timer = self.timer.as_mut().expect("armed above");
        if timer.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the peer took no bytes for {:?}", self.limit),
            )));
        }
        Poll::Pending
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for BoundedWrites<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for BoundedWrites<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.bound(polled, cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.bound(polled, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        self.bound(polled, cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.bound(polled, cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test(start_paused = true)]
    async fn a_write_the_peer_never_takes_fails_after_the_limit() {
        let (near, mut far) = tokio::io::duplex(64);
        let mut bounded = BoundedWrites::new(near, Duration::from_secs(5));
        let started = Instant::now();
        // The first 64 bytes fit; the rest waits on a peer that does not
        // read, until the limit.
        let e = bounded.write_all(&[1; 200]).await.expect_err("timed out");
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(5));
        // Reads still go through.
        far.write_all(b"hi").await.expect("write");
        let mut got = [0; 2];
        bounded.read_exact(&mut got).await.expect("read");
        assert_eq!(&got, b"hi");
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_reader_is_not_cut_while_each_wait_is_shorter() {
        let (near, mut far) = tokio::io::duplex(64);
        let mut bounded = BoundedWrites::new(near, Duration::from_secs(5));
        let reader = tokio::spawn(async move {
            let mut got = 0;
            let mut buf = [0; 64];
            while got < 640 {
                // Each pause is 4 s, below the limit: 36 s in all.
                tokio::time::sleep(Duration::from_secs(4)).await;
                got += far.read(&mut buf).await.expect("read");
            }
            got
        });
        bounded
            .write_all(&[2; 640])
            .await
            .expect("never 5 s without progress");
        assert_eq!(reader.await.expect("reader"), 640);
    }
}
