//! An upgraded upstream connection (WebSocket): relayed byte for byte with
//! the client until either side closes, or until neither has sent a byte
//! for `tunnel_idle_timeout` (an hour by default, HAProxy's usual `timeout
//! tunnel`: long enough for any app that pings, socket.io every 25 s, and
//! never forever). Reloads never cut it: it belongs to its connection task,
//! not to a route table generation. An upstream that stops taking bytes
//! is cut after `proxy_timeout`; a client that stops, by its connection's
//! send timeout (decision 0014).

use std::cell::Cell;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hayate_core::bounded_writes::BoundedWrites;
use hayate_core::transport::Transport;
use hayate_core::{Duplex, Tunnel};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::time::Instant;

use crate::group::Outstanding;

/// The upstream's side of an upgraded connection.
pub(crate) struct UpstreamTunnel {
    pub(crate) conn: Transport,
    /// Upstream bytes read past the 101 head.
    pub(crate) rest: Bytes,
    /// Longest wait for the upstream to take more (`proxy_timeout`).
    pub(crate) write_limit: Duration,
    /// Longest quiet both ways (`tunnel_idle_timeout`).
    pub(crate) idle_limit: Duration,
    pub(crate) _guard: Outstanding,
}

impl Tunnel for UpstreamTunnel {
    fn run<'a>(
        self: Box<Self>,
        client: &'a mut dyn Duplex,
        early: Bytes,
    ) -> Pin<Box<dyn Future<Output = io::Result<()>> + 'a>> {
        Box::pin(async move {
            let UpstreamTunnel {
                conn,
                rest,
                write_limit,
                idle_limit,
                _guard,
            } = *self;
            let mut conn = BoundedWrites::new(conn, write_limit);
            if !rest.is_empty() {
                client.write_all(&rest).await?;
            }
            if !early.is_empty() {
                conn.write_all(&early).await?;
            }
            let last = Rc::new(Cell::new(Instant::now()));
            let mut client = Heard::new(client, last.clone());
            let mut conn = Heard::new(&mut conn, last.clone());
            let relay = tokio::io::copy_bidirectional(&mut client, &mut conn);
            let quiet = async {
                loop {
                    let until = last.get() + idle_limit;
                    if Instant::now() >= until {
                        return;
                    }
                    tokio::time::sleep_until(until).await;
                }
            };
            tokio::select! {
                relayed = relay => relayed.map(drop),
                () = quiet => Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("tunnel quiet both ways for {idle_limit:?}"),
                )),
            }
        })
    }
}

/// A side of the tunnel that notes when it last read a byte.
struct Heard<T> {
    inner: T,
    last: Rc<Cell<Instant>>,
}

impl<T> Heard<T> {
    fn new(inner: T, last: Rc<Cell<Instant>>) -> Heard<T> {
        Heard { inner, last }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Heard<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.last.set(Instant::now());
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Heard<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, data)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
