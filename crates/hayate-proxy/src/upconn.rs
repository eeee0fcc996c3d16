//! A connection to an upstream member, TCP or Unix.

use std::io;
use std::path::Path;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};

use crate::UpstreamAddr;

/// An open connection to an upstream.
#[derive(Debug)]
pub(crate) enum UpConn {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl UpConn {
    /// Connects within `timeout`.
    pub async fn connect(addr: &UpstreamAddr, timeout: Duration) -> io::Result<UpConn> {
        let connect = async {
            Ok::<_, io::Error>(match addr {
                UpstreamAddr::Tcp { addr, .. } => {
                    let s = TcpStream::connect(addr).await?;
                    s.set_nodelay(true)?;
                    UpConn::Tcp(s)
                }
                UpstreamAddr::Unix(path) => UpConn::Unix(connect_unix(path).await?),
            })
        };
        match tokio::time::timeout(timeout, connect).await {
            Ok(r) => r,
            Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "connect timed out")),
        }
    }

    /// Waits until the connection has something to read (or an error or
    /// EOF to report).
    pub async fn readable(&self) -> io::Result<()> {
        match self {
            UpConn::Tcp(s) => s.readable().await,
            UpConn::Unix(s) => s.readable().await,
        }
    }

    /// Whether an idle connection still looks usable: no EOF and no stray
    /// bytes waiting (one non-blocking read, no wait).
    pub fn looks_alive(&self) -> bool {
        let mut probe = [0u8; 1];
        let r = match self {
            UpConn::Tcp(s) => s.try_read(&mut probe),
            UpConn::Unix(s) => s.try_read(&mut probe),
        };
        matches!(r, Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }
}

/// Connects to a Unix socket, waiting while its listen queue is full.
///
/// A non-blocking connect to a listener whose backlog is full fails at once
/// with EAGAIN (TCP would drop the SYN and retry a second later). That is a
/// busy app, not a dead one: a burst of 1,000 requests to a Node app (backlog
/// 511) must wait for it to accept, not get 502s and eject it. The caller's
/// connect timeout bounds the wait.
async fn connect_unix(path: &Path) -> io::Result<UnixStream> {
    let mut pause = Duration::from_millis(1);
    loop {
        match UnixStream::connect(path).await {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            r => return r,
        }
    }
}

impl AsyncRead for UpConn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpConn::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            UpConn::Unix(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for UpConn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            UpConn::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            UpConn::Unix(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            UpConn::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            UpConn::Unix(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpConn::Tcp(s) => Pin::new(s).poll_flush(cx),
            UpConn::Unix(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpConn::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            UpConn::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}
