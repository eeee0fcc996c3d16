//! The readiness-based operations of [`Transport`](super::Transport) over a
//! TLS session (rustls, through tokio-rustls).
//!
//! The connection loop writes with "try now, wait only on WouldBlock"; a TLS
//! session turns that into: encrypt into rustls's output buffer, then write
//! its records to the socket without waiting. Records the socket did not
//! take stay in rustls and must leave before anything else is counted as
//! sent — [`try_flush`] says whether they have, and every write starts with
//! it, so at most one buffer limit of records (rustls's 64 KiB) waits per
//! connection.
//!
//! The poll-based paths of tokio-rustls are driven with a no-op waker:
//! whatever they register is replaced by the real waiter of the caller's
//! next `writable()`/`readable()` wait, which uses the same socket readiness
//! (a Pending clears it, so that wait is for the next epoll event).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// A TLS session over TCP: the server side of a client's connection, or
/// the client side of an upstream's.
pub type TlsStream = tokio_rustls::TlsStream<TcpStream>;

/// What a TLS session negotiated, for logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TlsInfo {
    /// `TLSv1.3` or `TLSv1.2`.
    pub version: &'static str,
    /// The cipher suite's IANA name, `TLS13_AES_128_GCM_SHA256`.
    pub cipher: &'static str,
}

fn without_waiting<T>(op: impl FnOnce(&mut Context<'_>) -> Poll<io::Result<T>>) -> io::Result<T> {
    let mut cx = Context::from_waker(Waker::noop());
    match op(&mut cx) {
        Poll::Ready(r) => r,
        Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
    }
}

/// Writes the records rustls holds to the socket. `WouldBlock` while some
/// remain.
pub(super) fn try_flush(s: &mut TlsStream) -> io::Result<()> {
    if !s.get_ref().1.wants_write() {
        return Ok(());
    }
    without_waiting(|cx| Pin::new(s).poll_flush(cx))
}

/// Encrypts what rustls takes of `data` and writes it out as far as the
/// socket takes it (the rest of its records leave with the next write or
/// flush).
pub(super) fn try_write(s: &mut TlsStream, data: &[u8]) -> io::Result<usize> {
    try_flush(s)?;
    without_waiting(|cx| Pin::new(s).poll_write(cx, data))
}

/// [`try_write`] from several buffers.
pub(super) fn try_write_vectored(s: &mut TlsStream, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
    try_flush(s)?;
    without_waiting(|cx| Pin::new(s).poll_write_vectored(cx, bufs))
}

/// Whether a read would return without the socket: decrypted bytes wait
/// in rustls, or the peer's close_notify was read. (rustls wants to read
/// only when neither holds; during a handshake it holds neither.)
pub(super) fn has_buffered_input(s: &TlsStream) -> bool {
    let state = s.get_ref().1;
    !state.is_handshaking() && !state.wants_read()
}

/// Whether an idle session looks usable: no close_notify, no EOF and no
/// stray application bytes. Records that are not data (a TLS 1.3 session
/// ticket arriving late) are consumed on the way.
pub(super) fn looks_alive(s: &mut TlsStream) -> bool {
    if has_buffered_input(s) {
        return false;
    }
    let mut probe = [0u8; 1];
    let mut buf = ReadBuf::new(&mut probe);
    let read = without_waiting(|cx| Pin::new(&mut *s).poll_read(cx, &mut buf));
    matches!(read, Err(e) if e.kind() == io::ErrorKind::WouldBlock)
}

/// Queues close_notify and writes what the socket takes now; the caller
/// then shuts the socket's output. A peer that reads nothing does not hold
/// the close up: the alert is best-effort, as it is for nginx.
pub(super) fn close_notify(s: &mut TlsStream) {
    match s {
        tokio_rustls::TlsStream::Server(s) => s.get_mut().1.send_close_notify(),
        tokio_rustls::TlsStream::Client(s) => s.get_mut().1.send_close_notify(),
    }
    let _ = try_flush(s);
}

/// The negotiated version and cipher suite.
pub(super) fn info(s: &TlsStream) -> Option<TlsInfo> {
    let state = s.get_ref().1;
    let version = match state.protocol_version()? {
        tokio_rustls::rustls::ProtocolVersion::TLSv1_3 => "TLSv1.3",
        tokio_rustls::rustls::ProtocolVersion::TLSv1_2 => "TLSv1.2",
        _ => "TLS",
    };
    let cipher = state
        .negotiated_cipher_suite()?
        .suite()
        .as_str()
        .unwrap_or("unknown");
    Some(TlsInfo { version, cipher })
}
