//! A client connection's socket: TCP or Unix, with the readiness-based
//! operations the connection loop uses (try first, wait only on WouldBlock)
//! and zero-copy file sending.

use std::fs::File;
use std::io;
use std::os::fd::AsFd;

use tokio::io::Interest;
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
    /// Reads what is available into `buf` without waiting.
    pub fn try_read_buf(&self, buf: &mut bytes::BytesMut) -> io::Result<usize> {
        each!(self, s => s.try_read_buf(buf))
    }

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
