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
//! Records go to the socket with `try_write`, never through tokio-rustls's
//! poll path: that path spends tokio's cooperative budget (128 operations
//! per task turn) and answers Pending when it is spent although the socket
//! is writable, which this caller would take for a full socket and wait
//! for a readiness that is already there — a large file over TLS stopped
//! after 125 writes of 64 KiB with its worker spinning. `try_write` spends
//! no budget and clears readiness only on a real EAGAIN.
//!
//! The one poll-path call left, the liveness probe's read, is driven with
//! a no-op waker and reads Pending as "nothing there".

use std::io;
use std::os::fd::AsFd;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use tokio::io::{AsyncRead, Interest, ReadBuf};
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

/// The socket as `std::io::Write` for rustls: non-blocking writes.
struct SocketWriter<'a>(&'a TcpStream);

impl io::Write for SocketWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let s = self.0;
        s.try_io(Interest::WRITABLE, || Ok(super::send(s.as_fd(), buf)?))
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        let s = self.0;
        let total = bufs.iter().map(|b| b.len()).sum();
        s.try_io(Interest::WRITABLE, || {
            Ok(super::send_vectored(s.as_fd(), bufs, total)?)
        })
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Runs `$e` with the socket and the session of either side.
macro_rules! with_session {
    ($s:expr, ($tcp:ident, $conn:ident) => $e:expr) => {
        match $s {
            tokio_rustls::TlsStream::Server(s) => {
                let ($tcp, $conn) = s.get_mut();
                $e
            }
            tokio_rustls::TlsStream::Client(s) => {
                let ($tcp, $conn) = s.get_mut();
                $e
            }
        }
    };
}

/// Writes the session's pending records to the socket until none is left
/// or the socket is full (`WouldBlock`).
fn write_records<D>(
    tcp: &TcpStream,
    conn: &mut tokio_rustls::rustls::ConnectionCommon<D>,
) -> io::Result<()> {
    while conn.wants_write() {
        if conn.write_tls(&mut SocketWriter(tcp))? == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
    }
    Ok(())
}

/// Writes the records rustls holds to the socket. `WouldBlock` while some
/// remain.
pub(super) fn try_flush(s: &mut TlsStream) -> io::Result<()> {
    with_session!(s, (tcp, conn) => write_records(tcp, conn))
}

/// Encrypts what rustls takes of `data` and writes it out as far as the
/// socket takes it (the rest of its records leave with the next write or
/// flush).
pub(super) fn try_write(s: &mut TlsStream, data: &[u8]) -> io::Result<usize> {
    with_session!(s, (tcp, conn) => {
        write_records(tcp, conn)?;
        let n = io::Write::write(&mut conn.writer(), data)?;
        sent(n, write_records(tcp, conn))
    })
}

/// [`try_write`] from several buffers.
pub(super) fn try_write_vectored(s: &mut TlsStream, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
    with_session!(s, (tcp, conn) => {
        write_records(tcp, conn)?;
        let n = io::Write::write_vectored(&mut conn.writer(), bufs)?;
        sent(n, write_records(tcp, conn))
    })
}

/// `n` bytes were taken: they count as written even when the socket did not
/// take all their records yet (those leave with the next flush).
fn sent(n: usize, flushed: io::Result<()>) -> io::Result<usize> {
    match flushed {
        Err(e) if e.kind() != io::ErrorKind::WouldBlock => Err(e),
        _ => Ok(n),
    }
}

/// Reads what the session holds or the socket brings now, decrypted,
/// without waiting (`WouldBlock` when nothing is there, or when tokio's
/// cooperative budget is spent: the caller then waits as it would anyway).
pub(super) fn try_read_buf(s: &mut TlsStream, buf: &mut bytes::BytesMut) -> io::Result<usize> {
    use std::future::Future;
    let read = {
        let read = std::pin::pin!(tokio::io::AsyncReadExt::read_buf(&mut *s, buf));
        without_waiting(|cx| read.poll(cx))
    };
    answer_now(s);
    read
}

/// Writes what reading made rustls owe the peer: an alert (the
/// no_renegotiation warning to a TLS 1.2 client asking to renegotiate)
/// or a TLS 1.3 KeyUpdate. tokio-rustls's read leaves them queued until the
/// next write, and a client waiting for the answer to its request would
/// wait for nothing while the connection idles. Best effort: a full
/// socket leaves them for the next write.
pub(super) fn answer_now(s: &mut TlsStream) {
    let owed = with_session!(&mut *s, (_tcp, conn) => conn.wants_write());
    if owed {
        let _ = try_flush(s);
    }
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
    with_session!(&mut *s, (_tcp, conn) => conn.send_close_notify());
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
