//! A client connection's socket: TCP or Unix, with the readiness-based
//! operations the connection loop uses (try first, wait only on WouldBlock)
//! and zero-copy file sending.

use std::fs::File;
use std::io;
use std::os::fd::AsFd;

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, Interest, ReadBuf};
use tokio::net::{TcpStream, UnixStream};

/// An accepted client socket.
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
    /// Writes what the socket takes now.
    pub fn try_write(&self, data: &[u8]) -> io::Result<usize> {
        each!(self, s => s.try_write(data))
    }

    /// Writes what the socket takes now, from several buffers.
    pub fn try_write_vectored(&self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        each!(self, s => s.try_write_vectored(bufs))
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
    pub fn try_sendfile(&self, file: &File, offset: &mut i64, count: usize) -> io::Result<usize> {
        let mut send = |fd: std::os::fd::BorrowedFd<'_>| {
            nix::sys::sendfile::sendfile(fd, file.as_fd(), Some(offset), count)
                .map_err(io::Error::from)
        };
        match self {
            Stream::Tcp(s) => s.try_io(Interest::WRITABLE, || send(s.as_fd())),
            Stream::Unix(s) => s.try_io(Interest::WRITABLE, || send(s.as_fd())),
        }
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
