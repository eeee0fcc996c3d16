//! A connection's socket, TCP or Unix: a client's (the connection loop
//! uses the readiness-based operations: try first, wait only on WouldBlock,
//! and zero-copy file sending) or an upstream's (the proxy goes through
//! tokio's poll path).

use std::fs::File;
use std::io;
use std::os::fd::AsFd;

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::{TcpStream, UnixStream};

/// A connected socket.
#[derive(Debug)]
pub enum Stream {
    /// TCP.
    Tcp(TcpStream),
    /// Unix domain socket.
    Unix(UnixStream),
}

macro_rules! each {
    ($self:ident, $s:ident => $e:expr) => {
        match $self {
            Stream::Tcp($s) => $e,
            Stream::Unix($s) => $e,
        }
    };
}

impl Stream {
    /// Writes what the socket takes now. A short write clears readiness
    /// (see [`Stream::try_sendfile`]).
    pub fn try_write(&self, data: &[u8]) -> io::Result<usize> {
        self.try_io_short(data.len(), |fd| nix::unistd::write(fd, data))
    }

    /// Writes what the socket takes now, from several buffers.
    pub fn try_write_vectored(&self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        let total = bufs.iter().map(|b| b.len()).sum();
        self.try_io_short(total, |fd| nix::sys::uio::writev(fd, bufs))
    }

    /// Runs a non-blocking write-like operation of `want` bytes. A short
    /// result means the socket buffer is full: readiness is cleared so the
    /// next attempt waits for epoll instead of a syscall that would return
    /// EAGAIN (what nginx does after a short write).
    fn try_io_short(
        &self,
        want: usize,
        mut op: impl FnMut(std::os::fd::BorrowedFd<'_>) -> nix::Result<usize>,
    ) -> io::Result<usize> {
        let mut done = 0;
        let mut attempt = |fd: std::os::fd::BorrowedFd<'_>| {
            let n = op(fd).map_err(io::Error::from)?;
            done = n;
            if n > 0 && n < want {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            Ok(n)
        };
        let result = match self {
            Stream::Tcp(s) => s.try_io(Interest::WRITABLE, || attempt(s.as_fd())),
            Stream::Unix(s) => s.try_io(Interest::WRITABLE, || attempt(s.as_fd())),
        };
        match result {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && done > 0 => Ok(done),
            other => other,
        }
    }

    /// Sets TCP_CORK (no-op on Unix sockets). Errors are ignored: corking
    /// only shapes segments.
    pub fn set_cork(&self, cork: bool) {
        if let Stream::Tcp(s) = self {
            let _ = socket2::SockRef::from(s).set_cork(cork);
        }
    }

    /// Whether an idle socket still looks usable: no EOF and no stray bytes
    /// waiting (at most one non-blocking read; none while epoll has not
    /// reported it readable).
    pub fn looks_alive(&self) -> bool {
        let mut probe = [0u8; 1];
        let r = each!(self, s => s.try_read(&mut probe));
        matches!(r, Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }

    /// Waits until the socket is readable.
    pub async fn readable(&self) -> io::Result<()> {
        each!(self, s => s.readable().await)
    }

    /// Waits until the socket is writable.
    pub async fn writable(&self) -> io::Result<()> {
        each!(self, s => s.writable().await)
    }

    /// Sends up to `count` bytes of `file` from `offset` with sendfile(2),
    /// without waiting; advances `offset`.
    ///
    /// A short send clears readiness (see [`Stream::try_io_short`]).
    pub fn try_sendfile(&self, file: &File, offset: &mut i64, count: usize) -> io::Result<usize> {
        self.try_io_short(count, |fd| {
            nix::sys::sendfile::sendfile(fd, file.as_fd(), Some(&mut *offset), count)
        })
    }
}

/// Reads go through tokio's poll path, which clears readiness after a short
/// read: the next read then waits for epoll instead of paying a syscall to
/// learn that nothing is there (one `read` returning EAGAIN saved per
/// keep-alive request).
impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Unix(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

/// Writes through tokio's poll path; used by tunnels (upgraded connections),
/// where tokio's copy loops drive the socket.
impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Unix(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Unix(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_flush(cx),
            Stream::Unix(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}
