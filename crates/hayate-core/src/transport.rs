//! Every connected socket, a client's or an upstream's: [`Transport`], and
//! the [`Listener`] that accepts clients, with the [`Scheme`] it serves.
//!
//! Protocol code (the HTTP/1 connection loop, the proxy's upstream client)
//! talks to a `Transport` and never to a socket type, so a layer such as
//! TLS is one more variant here, not a change in every caller. What such a
//! layer changes is spelled out by the operations themselves:
//! - [`Transport::has_buffered_input`]: input already read from the socket
//!   and held by the layer (decrypted TLS records) — the kernel's readiness
//!   does not show it, so waiting for readability alone could wait forever;
//! - [`Transport::try_sendfile`]: zero-copy only where the bytes go to the
//!   socket unchanged; elsewhere it reports `Unsupported` and the caller
//!   copies the file through its buffers;
//! - [`Transport::shutdown_write`]: the end of output (a TLS close_notify
//!   before the socket's FIN).
//!
//! The connection loop uses the readiness-based operations (try first, wait
//! only on WouldBlock); tunnels and the proxy go through tokio's poll path
//! ([`AsyncRead`], [`AsyncWrite`]).

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};

mod tls;
pub use tls::{TlsInfo, TlsStream};

/// A connected socket.
#[derive(Debug)]
pub enum Transport {
    /// TCP (Nagle off).
    Tcp(TcpStream),
    /// Unix domain socket.
    Unix(UnixStream),
    /// A TLS session over TCP (boxed: rustls's state is about a kilobyte,
    /// and every connection's future holds a `Transport`).
    Tls(Box<TlsStream>),
}

/// Runs `$e` on the socket itself (for TLS, the TCP socket under it).
macro_rules! each_socket {
    ($self:ident, $s:ident => $e:expr) => {
        match $self {
            Transport::Tcp($s) => $e,
            Transport::Unix($s) => $e,
            Transport::Tls(t) => {
                let $s = t.get_ref().0;
                $e
            }
        }
    };
}

/// Runs `$e` on the byte stream: the socket, or the TLS session.
macro_rules! each {
    ($self:ident, $s:ident => $e:expr) => {
        match $self {
            Transport::Tcp($s) => $e,
            Transport::Unix($s) => $e,
            Transport::Tls($s) => $e,
        }
    };
}

impl Transport {
    /// Wraps a connected TCP socket, with Nagle's algorithm off: hayate
    /// writes whole responses and request heads, never byte by byte.
    pub fn tcp(s: TcpStream) -> io::Result<Transport> {
        s.set_nodelay(true)?;
        Ok(Transport::Tcp(s))
    }

    /// Writes what the socket takes now. A short write clears readiness
    /// (see [`Transport::try_sendfile`]).
    pub fn try_write(&mut self, data: &[u8]) -> io::Result<usize> {
        if let Transport::Tls(s) = self {
            return tls::try_write(s, data);
        }
        self.try_io_short(data.len(), |fd| send(fd, data))
    }

    /// Writes out what the transport holds of earlier writes (TLS records
    /// the socket did not take). `WouldBlock` while some remain; what
    /// `try_write` returned counts as sent only once this is `Ok`.
    pub fn try_flush(&mut self) -> io::Result<()> {
        match self {
            Transport::Tls(s) => tls::try_flush(s),
            _ => Ok(()),
        }
    }

    /// Reads what is there now into `buf`, without waiting (`WouldBlock`
    /// when nothing is): the socket's bytes, or over TLS what they decrypt
    /// to.
    ///
    /// A short read (fewer bytes than `buf` had room for) drained the
    /// socket: readiness is cleared, as tokio's own `poll_read` does, so the
    /// next read or liveness probe waits for epoll instead of making a
    /// syscall that returns EAGAIN. Kept set, it cost one such `recvfrom`
    /// per proxied request: the pool's probe of the connection the last
    /// response was read from (`looks_alive` at checkout).
    pub fn try_read_buf(&mut self, buf: &mut bytes::BytesMut) -> io::Result<usize> {
        let room = buf.capacity() - buf.len();
        let mut done = 0;
        // Tokio clears readiness when the closure says WouldBlock.
        macro_rules! read_short {
            ($s:expr) => {
                $s.try_io(Interest::READABLE, || {
                    let n = $s.try_read_buf(buf)?;
                    done = n;
                    if n > 0 && n < room {
                        return Err(io::ErrorKind::WouldBlock.into());
                    }
                    Ok(n)
                })
            };
        }
        let result = match self {
            Transport::Tcp(s) => read_short!(s),
            Transport::Unix(s) => read_short!(s),
            Transport::Tls(s) => return tls::try_read_buf(s, buf),
        };
        match result {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && done > 0 => Ok(done),
            other => other,
        }
    }

    /// Writes what the socket takes now, from several buffers.
    pub fn try_write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        if let Transport::Tls(s) = self {
            return tls::try_write_vectored(s, bufs);
        }
        let total = bufs.iter().map(|b| b.len()).sum();
        self.try_io_short(total, |fd| send_vectored(fd, bufs, total))
    }

    /// Sends up to `count` bytes of `file` from `offset` with sendfile(2),
    /// without waiting; advances `offset`. `Unsupported` where the transport
    /// must transform what it sends (the caller copies instead).
    ///
    /// A short send clears readiness (see [`Transport::try_io_short`]).
    pub fn try_sendfile(
        &mut self,
        file: &File,
        offset: &mut i64,
        count: usize,
    ) -> io::Result<usize> {
        if let Transport::Tls(_) = self {
            // The bytes must be encrypted on the way (kTLS could take them
            // zero-copy; not measured worth it yet).
            return Err(io::ErrorKind::Unsupported.into());
        }
        self.try_io_short(count, |fd| {
            nix::sys::sendfile::sendfile(fd, file.as_fd(), Some(&mut *offset), count)
        })
    }

    /// Runs a non-blocking write-like operation of `want` bytes. A short
    /// result means the socket buffer is full: readiness is cleared so the
    /// next attempt waits for epoll instead of a syscall that would return
    /// EAGAIN (what nginx does after a short write).
    fn try_io_short(
        &self,
        want: usize,
        mut op: impl FnMut(BorrowedFd<'_>) -> nix::Result<usize>,
    ) -> io::Result<usize> {
        let mut done = 0;
        let mut attempt = |fd: BorrowedFd<'_>| {
            let n = op(fd).map_err(io::Error::from)?;
            done = n;
            if n > 0 && n < want {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            Ok(n)
        };
        let result = each_socket!(self, s => s.try_io(Interest::WRITABLE, || attempt(s.as_fd())));
        match result {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && done > 0 => Ok(done),
            other => other,
        }
    }

    /// Sets TCP_CORK (nothing on other transports). Errors are ignored:
    /// corking only shapes segments.
    pub fn set_cork(&self, cork: bool) {
        let tcp = match self {
            Transport::Tcp(s) => s,
            Transport::Tls(t) => t.get_ref().0,
            Transport::Unix(_) => return,
        };
        let _ = socket2::SockRef::from(tcp).set_cork(cork);
    }

    /// Whether input was read from the socket and is held here, unread:
    /// decrypted TLS records (never for TCP and Unix sockets, whose unread
    /// input the kernel holds and epoll reports).
    pub fn has_buffered_input(&self) -> bool {
        match self {
            Transport::Tls(s) => tls::has_buffered_input(s),
            _ => false,
        }
    }

    /// The application protocol agreed by ALPN, on a TLS transport.
    pub fn alpn(&self) -> Option<&[u8]> {
        match self {
            Transport::Tls(s) => s.get_ref().1.alpn_protocol(),
            _ => None,
        }
    }

    /// The TLS version and cipher suite, on a TLS transport.
    pub fn tls_info(&self) -> Option<TlsInfo> {
        match self {
            Transport::Tls(s) => tls::info(s),
            _ => None,
        }
    }

    /// Whether an idle connection still looks usable: no EOF and no stray
    /// bytes waiting (at most one non-blocking read; none while epoll has
    /// not reported it readable).
    pub fn looks_alive(&mut self) -> bool {
        let mut probe = [0u8; 1];
        let r = match self {
            Transport::Tcp(s) => s.try_read(&mut probe),
            Transport::Unix(s) => s.try_read(&mut probe),
            Transport::Tls(s) => return tls::looks_alive(s),
        };
        matches!(r, Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }

    /// Waits until a read would return something (input held by the
    /// transport counts).
    pub async fn readable(&self) -> io::Result<()> {
        if self.has_buffered_input() {
            return Ok(());
        }
        each_socket!(self, s => s.readable().await)
    }

    /// Polls for readability without reading: a connection waits this way
    /// while it holds no buffer, and takes one only when input is there.
    /// Ready until a read finds the socket empty (tokio clears readiness
    /// then, and after a short read), so it costs no syscall.
    pub fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.has_buffered_input() {
            return Poll::Ready(Ok(()));
        }
        each_socket!(self, s => s.poll_read_ready(cx))
    }

    /// Waits until the socket is writable.
    pub async fn writable(&self) -> io::Result<()> {
        each_socket!(self, s => s.writable().await)
    }

    /// Ends the output side (the peer reads EOF after what was sent, and
    /// over TLS a close_notify first); input can still be read.
    pub async fn shutdown_write(&mut self) -> io::Result<()> {
        if let Transport::Tls(s) = self {
            tls::close_notify(s);
        }
        each_socket!(self, s => shutdown_output(s))
    }
}

/// Writes to a socket with send(2), not write(2).
///
/// The socket calls go straight to the socket layer; write(2) and writev(2)
/// pass through the VFS first (`vfs_writev`, `rw_verify_area`, the file's
/// position lock, the file-permission hook, an indirect call to the socket's
/// `write_iter`). In case P that detour was 0.9 µs of the 19.2 µs of CPU a
/// proxied request cost, for its two writes (`perf`, against a C relay that
/// forwards with send(2): bench/ceiling/relay.c, decision 0005).
/// MSG_NOSIGNAL: a peer that closed gives EPIPE here, never SIGPIPE.
pub(crate) fn send(fd: BorrowedFd<'_>, data: &[u8]) -> nix::Result<usize> {
    use nix::sys::socket::MsgFlags;
    nix::sys::socket::send(fd.as_raw_fd(), data, MsgFlags::MSG_NOSIGNAL)
}

/// [`send`] from several buffers (`total` bytes in all): a head and a
/// body, or a request head and an empty body.
///
/// sendmsg(2) reads a `msghdr` and imports an iovec array before the
/// socket sees a byte: 0.2 µs per call in case P, where send(2) with
/// one buffer costs 0.06 µs. Empty buffers are skipped, and buffers
/// that add up to less than [`JOIN_BELOW`] are copied into one and sent
/// with send(2): copying a 1 KiB answer and its head costs less than
/// the difference. Larger writes keep sendmsg(2): their copy would not.
pub(crate) fn send_vectored(
    fd: BorrowedFd<'_>,
    bufs: &[io::IoSlice<'_>],
    total: usize,
) -> nix::Result<usize> {
    use nix::sys::socket::{MsgFlags, UnixAddr};
    let mut nonempty = bufs.iter().filter(|b| !b.is_empty());
    match (nonempty.next(), nonempty.next()) {
        (None, _) => send(fd, &[]),
        (Some(one), None) => send(fd, one),
        _ => {
            if total < JOIN_BELOW {
                return JOINED.with_borrow_mut(|joined| {
                    joined.clear();
                    for b in bufs {
                        joined.extend_from_slice(b);
                    }
                    send(fd, joined)
                });
            }
            nix::sys::socket::sendmsg::<UnixAddr>(
                fd.as_raw_fd(),
                bufs,
                &[],
                MsgFlags::MSG_NOSIGNAL,
                None,
            )
        }
    }
}

/// Below this many bytes, [`send_vectored`] joins its buffers and sends
/// them with one send(2).
const JOIN_BELOW: usize = 4096;

thread_local! {
    /// Where [`send_vectored`] joins buffers: one per thread, kept, so a
    /// join neither allocates nor zeroes.
    static JOINED: std::cell::RefCell<Vec<u8>> =
        std::cell::RefCell::new(Vec::with_capacity(JOIN_BELOW));
}

fn shutdown_output(socket: &impl AsFd) -> io::Result<()> {
    socket2::SockRef::from(socket).shutdown(std::net::Shutdown::Write)
}

impl AsRawFd for Transport {
    /// The socket's descriptor (for socket options and identity in tests).
    fn as_raw_fd(&self) -> RawFd {
        each_socket!(self, s => s.as_raw_fd())
    }
}

/// Reads go through tokio's poll path, which clears readiness after a short
/// read: the next read then waits for epoll instead of paying a syscall to
/// learn that nothing is there (one `read` returning EAGAIN saved per
/// keep-alive request).
impl AsyncRead for Transport {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let read = each!(this, s => Pin::new(s).poll_read(cx, buf));
        if let Transport::Tls(s) = this {
            tls::answer_now(s);
        }
        read
    }
}

/// Writes through tokio's poll path: tunnels (upgraded connections), where
/// tokio's copy loops drive the socket, and the proxy's upstream writes.
impl AsyncWrite for Transport {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        each!(this, s => Pin::new(s).poll_write(cx, buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        each!(this, s => Pin::new(s).poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        each!(this, s => Pin::new(s).poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        each!(this, s => Pin::new(s).poll_shutdown(cx))
    }
}

/// What a listener's clients speak beneath HTTP: the `scheme` of their
/// requests' URIs, and what `X-Forwarded-Proto` tells an upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// Cleartext.
    Http,
    /// TLS.
    Https,
}

impl Scheme {
    /// `http` or `https`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
}

/// Who is on the other end of an accepted connection: its address as logs
/// and `X-Forwarded-For` name it (an IP address, or `unix`), and for TCP
/// the two ports, which the CGI environment names (REMOTE_PORT,
/// SERVER_PORT).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// The client's IP address as text, or `unix`.
    pub addr: String,
    /// The same address, IPv4-mapped IPv6 ones as IPv4 (`None` on a Unix
    /// socket): what address lists (trusted proxies, allow/deny) compare.
    pub ip: Option<std::net::IpAddr>,
    /// The client's port (TCP).
    pub port: Option<u16>,
    /// The port it connected to (TCP).
    pub local_port: Option<u16>,
    /// The client certificate its TLS handshake verified (mutual TLS):
    /// shared by the connection's requests.
    pub client_cert: Option<std::sync::Arc<crate::client_cert::ClientCert>>,
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.addr)
    }
}

/// A listening socket registered with the current runtime, and the scheme
/// its clients speak.
#[derive(Debug)]
pub struct Listener {
    socket: ListenSocket,
    scheme: Scheme,
    /// The TCP port, read once: every connection's [`Peer::local_port`].
    port: Option<u16>,
}

#[derive(Debug)]
enum ListenSocket {
    Tcp(TcpListener),
    Unix(UnixListener),
}

impl Listener {
    /// Registers a bound, listening, non-blocking socket (TCP or Unix, told
    /// by its address family) with the current runtime.
    pub fn new(socket: socket2::Socket, scheme: Scheme) -> io::Result<Listener> {
        let local = socket.local_addr()?;
        let port = local.as_socket().map(|a| a.port());
        let socket = if local.is_unix() {
            ListenSocket::Unix(UnixListener::from_std(socket.into())?)
        } else {
            ListenSocket::Tcp(TcpListener::from_std(socket.into())?)
        };
        Ok(Listener {
            socket,
            scheme,
            port,
        })
    }

    /// The scheme this listener's clients speak.
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// Accepts the next connection.
    pub async fn accept(&self) -> io::Result<(Transport, Peer)> {
        match &self.socket {
            ListenSocket::Tcp(l) => {
                let (s, addr) = l.accept().await?;
                let ip = addr.ip().to_canonical();
                let peer = Peer {
                    addr: ip.to_string(),
                    ip: Some(ip),
                    port: Some(addr.port()),
                    local_port: self.port,
                    client_cert: None,
                };
                Ok((Transport::tcp(s)?, peer))
            }
            ListenSocket::Unix(l) => {
                let (s, _) = l.accept().await?;
                let peer = Peer {
                    addr: "unix".to_string(),
                    ip: None,
                    port: None,
                    local_port: None,
                    client_cert: None,
                };
                Ok((Transport::Unix(s), peer))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    fn read_ready_now(t: &Transport) -> bool {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        t.poll_read_ready(&mut cx).is_ready()
    }

    #[tokio::test]
    async fn a_short_read_leaves_the_socket_waiting_for_epoll() {
        let (ours, mut peer) = tokio::net::UnixStream::pair().expect("pair");
        let mut t = Transport::Unix(ours);
        peer.write_all(b"hello").await.expect("write");
        t.readable().await.expect("readable");
        let mut buf = bytes::BytesMut::with_capacity(64);
        assert_eq!(t.try_read_buf(&mut buf).expect("read"), 5);
        // Drained: the next look costs no syscall (it would find EAGAIN).
        assert!(!read_ready_now(&t), "readiness kept after a short read");
        assert_eq!(
            t.try_read_buf(&mut buf).expect_err("nothing there").kind(),
            io::ErrorKind::WouldBlock
        );
        assert!(t.looks_alive());
        // What comes next is seen as it would be anyway.
        peer.write_all(b"!").await.expect("write");
        t.readable().await.expect("readable again");
        assert_eq!(t.try_read_buf(&mut buf).expect("read"), 1);
        assert_eq!(&buf[..], b"hello!");
        // The peer's close too.
        drop(peer);
        t.readable().await.expect("readable at EOF");
        assert!(!t.looks_alive());
    }

    #[tokio::test]
    async fn a_read_that_fills_the_buffer_keeps_readiness() {
        let (ours, mut peer) = tokio::net::UnixStream::pair().expect("pair");
        let mut t = Transport::Unix(ours);
        peer.write_all(&[7u8; 100]).await.expect("write");
        t.readable().await.expect("readable");
        let mut buf = bytes::BytesMut::with_capacity(64);
        let room = buf.capacity();
        assert_eq!(t.try_read_buf(&mut buf).expect("read"), room);
        // More may be there: the next read tries the socket.
        assert!(read_ready_now(&t));
        buf.reserve(64);
        assert_eq!(t.try_read_buf(&mut buf).expect("read the rest"), 100 - room);
    }

    /// What a peer reads after `bufs` went out with one `try_write_vectored`.
    async fn sent_whole(bufs: &[&[u8]]) -> Vec<u8> {
        use tokio::io::AsyncReadExt;
        let (ours, mut peer) = tokio::net::UnixStream::pair().expect("pair");
        let mut t = Transport::Unix(ours);
        let slices: Vec<io::IoSlice<'_>> = bufs.iter().map(|b| io::IoSlice::new(b)).collect();
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        assert_eq!(t.try_write_vectored(&slices).expect("write"), total);
        drop(t);
        let mut got = Vec::new();
        peer.read_to_end(&mut got).await.expect("read");
        got
    }

    #[tokio::test]
    async fn vectored_writes_arrive_whole_and_in_order() {
        // Joined into one send(2): a head and a small body.
        assert_eq!(sent_whole(&[b"head ", b"body"]).await, b"head body");
        // Empty buffers skipped: a request head and no body.
        assert_eq!(sent_whole(&[b"", b"only", b""]).await, b"only");
        assert_eq!(sent_whole(&[b"", b""]).await, b"");
        // Just under and at the join limit (sendmsg(2) from there on).
        let big = vec![b'x'; JOIN_BELOW - 3];
        let mut want = big.clone();
        want.extend_from_slice(b"ab");
        assert_eq!(sent_whole(&[&big, b"a", b"b"]).await, want);
        want.push(b'c');
        assert_eq!(sent_whole(&[&big, b"a", b"bc"]).await, want);
        // A join after a larger one starts from nothing.
        assert_eq!(sent_whole(&[b"1", b"2"]).await, b"12");
    }

    /// Whether SIGPIPE waits, blocked, for this thread (its `SigPnd` mask).
    fn sigpipe_pending_here() -> bool {
        let status = std::fs::read_to_string("/proc/thread-self/status").expect("status");
        let mask = status
            .lines()
            .find_map(|l| l.strip_prefix("SigPnd:"))
            .expect("SigPnd line");
        let mask = u64::from_str_radix(mask.trim(), 16).expect("hex mask");
        mask & (1 << (nix::sys::signal::Signal::SIGPIPE as u64 - 1)) != 0
    }

    #[tokio::test]
    async fn a_write_to_a_closed_peer_is_an_error_not_a_signal() {
        use nix::sys::signal::{SigSet, Signal};
        // Blocked, a SIGPIPE the writes raise stays pending where this
        // thread can see it (ignored, as Rust's runtime sets it, it would
        // vanish and the check would prove nothing).
        let mut pipe = SigSet::empty();
        pipe.add(Signal::SIGPIPE);
        pipe.thread_block().expect("block SIGPIPE");
        let (ours, peer) = tokio::net::UnixStream::pair().expect("pair");
        let mut t = Transport::Unix(ours);
        drop(peer);
        let e = t.try_write(b"lost").expect_err("the peer is gone");
        assert_eq!(e.kind(), io::ErrorKind::BrokenPipe);
        let parts = [io::IoSlice::new(b"a"), io::IoSlice::new(b"b")];
        let e = t.try_write_vectored(&parts).expect_err("the peer is gone");
        assert_eq!(e.kind(), io::ErrorKind::BrokenPipe);
        let big = vec![0u8; JOIN_BELOW];
        let parts = [io::IoSlice::new(&big), io::IoSlice::new(b"b")];
        let e = t.try_write_vectored(&parts).expect_err("the peer is gone");
        assert_eq!(e.kind(), io::ErrorKind::BrokenPipe);
        let raised = sigpipe_pending_here();
        // Unblocked, a pending SIGPIPE is discarded (its disposition is
        // SIG_IGN in a Rust program).
        pipe.thread_unblock().expect("unblock SIGPIPE");
        assert!(!raised, "a write to a closed peer raised SIGPIPE");
    }
}
