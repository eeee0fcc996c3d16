//! One HTTP/2 connection (over TLS by ALPN `h2`, or h2c with prior
//! knowledge on a plain listener): the `h2` crate does the framing, HPACK,
//! flow control and stream states; this maps each stream to hayate's
//! request model and back, through the same pipeline as HTTP/1
//! (`pipeline.rs`): a stream's head becomes a [`RequestHead`], its DATA
//! frames the [`ClientBody`] a handler reads, and the [`Response`] goes
//! out as HEADERS, DATA within the peer's flow-control window, and
//! trailers; an upstream's interim responses (103 Early Hints) go out
//! ahead of it as 1xx HEADERS.
//!
//! Limits, each from `h2_*` settings: concurrent streams per connection
//! (128, RFC 9113 §6.5.2 advises at least 100), the header list (64 KiB,
//! not h2's 16 MiB default), windows sized for throughput (1 MiB per stream,
//! 2 MiB per connection: a 64 KiB window caps a stream at 64 KiB per round
//! trip), and the rapid-reset defences h2 has (CVE-2023-44487: at most 20
//! streams reset before hayate accepts them, and 1,024 reset for errors,
//! then GOAWAY). A reset stream drops its task, so its upstream request is
//! cancelled with it. An idle connection is closed after the keep-alive
//! timeout; shutdown sends GOAWAY and lets open streams finish. Either way
//! the GOAWAY's PING then has `http2_goaway_timeout` (after the last
//! stream) to be answered before the connection is dropped. Writes have
//! the send timeout: a connection whose writes stall that long is dropped,
//! at once if the client keeps sending PINGs or SETTINGS meanwhile
//! (`stall.rs`), and a stream whose window stays shut that long is reset
//! (`send.rs`).

use std::cell::{Cell, RefCell};
use std::future::poll_fn;
use std::io;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use h2::server::SendResponse;
use h2::RecvStream;
use hayate_core::bounded_writes::BoundedWrites;
use hayate_core::boxed::pinned;
use hayate_core::client_body::{BodyLength, ClientBody};
use hayate_core::request::{RequestHead, Version};
use hayate_core::response::{BodySource, Tunnel};
use hayate_core::transport::{Peer, Scheme, TlsInfo};
use hayate_core::{Body, Fields, Status};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::access_log::{self, Served};
use crate::http_map::{self, connection_specific, malformed, padded_field};
use crate::pipeline::{self, Answer};
use crate::worker::{Generation, Worker};

mod held_writes;
use held_writes::{Held, HeldWrites};
mod release;
use release::{Idle, Release, QUIET_AFTER};
mod send;
use send::send;
mod stall;
use stall::{Stall, Stalled};

/// Streams a client may have open at once.
const MAX_STREAMS: u32 = 128;
/// Largest header list accepted, as HPACK-decoded (nginx: 32 KiB for
/// HTTP/2's large_client_header_buffers; hayate's HTTP/1 limit is 32 KiB
/// of head too, the list is counted with 32 bytes per field more).
const MAX_HEADER_LIST: u32 = 64 * 1024;
/// Flow-control window of each stream and of the connection.
const STREAM_WINDOW: u32 = 1024 * 1024;
const CONNECTION_WINDOW: u32 = 2 * 1024 * 1024;
/// Streams the client may reset before hayate has accepted them (h2's
/// default, kept explicit: the rapid-reset bound).
const MAX_PENDING_RESETS: usize = 20;
/// Streams hayate may reset for protocol errors before the connection is
/// closed.
const MAX_ERROR_RESETS: usize = 1024;

/// The first line of the protocol's opening bytes (RFC 9113 §3.4), which a
/// plain-HTTP listener recognises. Bytes that begin with it are HTTP/2's,
/// a valid preface or not: no HTTP/1 request has the version HTTP/2.0, and
/// the PRI method is reserved for the preface (RFC 7540 §11.6). So h2
/// reads them, and answers an invalid preface with GOAWAY, not HTTP/1 with
/// a 400; and a preface split across reads is no longer taken for an
/// HTTP/1 head once its first 18 bytes (`PRI * HTTP/2.0\r\n\r\n`) came.
pub const PREFACE_LINE: &[u8] = b"PRI * HTTP/2.0";

/// Serves an HTTP/2 connection until it closes. `tls`: what its TLS
/// session negotiated, for the access log.
///
/// Every byte of this future is a byte of every idle connection (10,000
/// idle connections are to fit in 128 MiB): it is an `async move` block,
/// whose arguments are not also copied into locals as an `async fn`'s are,
/// and it keeps only the timeout it still needs.
#[allow(clippy::manual_async_fn)] // on purpose: see above (120 bytes).
pub fn serve<T>(
    io: T,
    peer: Peer,
    scheme: Scheme,
    tls: Option<TlsInfo>,
    worker: Rc<Worker>,
) -> impl std::future::Future<Output = ()>
where
    T: AsyncRead + AsyncWrite + Unpin,
{
    async move {
        let timeouts = worker.generation().timeouts;
        let keepalive = timeouts.keepalive;
        let goaway_timeout = timeouts.goaway;
        // Boxed: h2's handshake future is as large as the connection (1.2 KB)
        // and, inline, would sit beside it in every connection's future.
        let stall = Stall::new(worker.deadlines.slot());
        let handshake = handshake(io, &peer, timeouts.header, stall);
        let Some((mut conn, held)) = Box::pin(handshake).await else {
            return;
        };
        let send_timeout = timeouts.send;
        let peer = Rc::new(peer);
        let open = Rc::new(Cell::new(0usize));
        let idle = Rc::new(tokio::sync::Notify::new());
        let mut shutdown = worker.shutdown.clone();
        let mut closing = false;
        // Whether the connection gave its memory back since its last stream.
        let mut quiet = false;
        // Whether a request came yet: until one does, the client has the
        // header timeout to send it, as a new HTTP/1.1 connection has (not
        // the keep-alive time a connection that answered earns).
        let mut asked = false;
        let header_timeout = timeouts.header;
        let idle_deadline = worker.deadlines.slot();
        let mut release = Release::default();
        loop {
            // One timer for the idle phases and the closing one: a branch
            // of its own would add its timer to every connection's future.
            let idle_wait = async {
                if open.get() > 0 {
                    idle.notified().await;
                }
                if closing {
                    // h2 sent GOAWAY and a PING, and closes the connection
                    // only once the PING is answered (the round trip RFC
                    // 9113 §6.8 allows for streams in flight), which a
                    // client that stopped reading never does. The last
                    // stream's frames are written in this time too.
                    tokio::time::sleep(goaway_timeout).await;
                    Idle::Unanswered
                } else if !asked {
                    tokio::time::sleep(header_timeout).await;
                    Idle::Expired
                } else {
                    // On the worker's deadlines, as an idle HTTP/1.1
                    // connection waits: at the descriptor budget they cut
                    // the longest idle ones short to make room (issue 43).
                    let phase = if quiet {
                        keepalive.saturating_sub(QUIET_AFTER)
                    } else {
                        QUIET_AFTER.min(keepalive)
                    };
                    let until = Instant::now() + phase;
                    let _ = idle_deadline
                        .run(until, true, std::future::pending::<()>())
                        .await;
                    if Instant::now() < until {
                        Idle::Cut
                    } else if quiet {
                        Idle::Expired
                    } else {
                        Idle::Quiet
                    }
                }
            };
            tokio::select! {
                next = poll_fn(|cx| next_stream(&mut conn, &held, &open, &mut release, send_timeout, &peer, cx)) => match next {
                    Some(Ok((request, respond))) => {
                        let stream = Stream {
                            peer: peer.clone(),
                            scheme,
                            tls,
                            worker: worker.clone(),
                            open: open.clone(),
                            idle: idle.clone(),
                        };
                        open.set(open.get() + 1);
                        quiet = false;
                        if !asked {
                            // Kept alive from now on: its idle waits may
                            // be cut at the budget (a new connection that
                            // has asked nothing yet never is).
                            asked = true;
                            idle_deadline.mark_reusable_cut_when_idle();
                        }
                        tokio::task::spawn_local(stream.serve(request, respond));
                    }
                    Some(Err(e)) => {
                        log::debug!("HTTP/2 from {peer}: {e}");
                        break;
                    }
                    None => break,
                },
                _ = shutdown.wait(), if !closing => {
                    closing = true;
                    conn.graceful_shutdown();
                }
                why = idle_wait => match why {
                    Idle::Quiet => {
                        release.quiet(&mut conn, Instant::now());
                        quiet = true;
                    }
                    Idle::Expired => {
                        closing = true;
                        conn.graceful_shutdown();
                    }
                    Idle::Cut => {
                        // No stream is open: GOAWAY and close at once, as
                        // an idle HTTP/1.1 connection closes, without the
                        // PING round trip a graceful close waits for.
                        closing = true;
                        conn.abrupt_shutdown(h2::Reason::NO_ERROR);
                    }
                    Idle::Unanswered => {
                        log::debug!("HTTP/2 from {peer}: GOAWAY's PING not answered in {goaway_timeout:?}, dropped");
                        break;
                    }
                },
            }
        }
    }
}

/// h2's server handshake within the header timeout: the connection, and the
/// writes it holds (`held_writes`).
async fn handshake<T>(
    io: T,
    peer: &Peer,
    timeout: Duration,
    stall: Stall,
) -> Option<(
    h2::server::Connection<HeldWrites<T>, Bytes>,
    Rc<RefCell<Held<T>>>,
)>
where
    T: AsyncRead + AsyncWrite + Unpin,
{
    let mut builder = h2::server::Builder::new();
    builder
        .max_concurrent_streams(MAX_STREAMS)
        .max_header_list_size(MAX_HEADER_LIST)
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_pending_accept_reset_streams(MAX_PENDING_RESETS)
        .max_local_error_reset_streams(Some(MAX_ERROR_RESETS))
        // WebSocket over HTTP/2 (RFC 8441): streams opened by CONNECT with
        // :protocol, for routes whose upstream switches protocols.
        .enable_connect_protocol();
    let (io, held) = HeldWrites::new(io, stall);
    match tokio::time::timeout(timeout, builder.handshake(io)).await {
        Ok(Ok(conn)) => Some((conn, held)),
        Ok(Err(e)) => {
            log::debug!("HTTP/2 from {peer}: handshake failed: {e}");
            if e.is_go_away() && e.reason() == Some(h2::Reason::PROTOCOL_ERROR) {
                refuse_preface(&mut held.borrow_mut());
            }
            None
        }
        Err(_) => {
            log::debug!("HTTP/2 from {peer}: no preface in time");
            None
        }
    }
}

/// Answers an invalid client preface as RFC 9113 §3.4 asks, with a
/// connection error: GOAWAY (last stream 0, PROTOCOL_ERROR) after the
/// SETTINGS h2 already queued, where h2 closes without a word. Nothing is
/// waited for: these are the connection's first bytes, which the transport
/// takes at once, and what the client sent is read as far as it has
/// arrived, so that closing does not reset the connection under the
/// GOAWAY.
fn refuse_preface<T: AsyncRead + AsyncWrite + Unpin>(held: &mut Held<T>) {
    const GOAWAY: [u8; 17] = [0, 0, 8, 0x7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x1];
    let mut cx = Context::from_waker(std::task::Waker::noop());
    held.push(&GOAWAY);
    if let Poll::Ready(Ok(())) = held.write_out(&mut cx) {
        held.drain_arrived(&mut cx);
        let _ = held.shutdown(&mut cx);
    }
}

/// A stream the client opened: its request and the handle to answer it.
type NewStream = (http::Request<RecvStream>, SendResponse<Bytes>);

/// The connection's next stream. When there is none yet the connection is
/// about to wait, so what h2 wrote is written out now, all of it together
/// (`held_writes`), and writes that stalled are judged (`stall`): an error
/// ends the connection.
fn next_stream<T: AsyncRead + AsyncWrite + Unpin>(
    conn: &mut h2::server::Connection<HeldWrites<T>, Bytes>,
    held: &RefCell<Held<T>>,
    open: &Cell<usize>,
    release: &mut Release,
    send_timeout: Duration,
    peer: &Peer,
    cx: &mut Context<'_>,
) -> Poll<Option<io::Result<NewStream>>> {
    let next = conn.poll_accept(cx);
    if next.is_pending() {
        let mut writes = held.borrow_mut();
        if let Poll::Ready(Err(e)) = writes.write_out(cx) {
            return Poll::Ready(Some(Err(e)));
        }
        let judged = writes
            .stall
            .judge(conn.control_frames_received(), send_timeout, cx);
        drop(writes);
        match judged {
            Ok(()) => {}
            Err(Stalled::SendTimeout) => {
                let e = io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("the client took no bytes for {send_timeout:?} (send_timeout)"),
                );
                return Poll::Ready(Some(Err(e)));
            }
            Err(Stalled::Flood) => {
                // The GOAWAY goes out only if the transport has room left;
                // the connection ends either way.
                conn.abrupt_shutdown(h2::Reason::ENHANCE_YOUR_CALM);
                let _ = conn.poll_accept(cx);
                let _ = held.borrow_mut().write_out(cx);
                log::info!(
                    "HTTP/2 from {peer}: PING/SETTINGS flood (more than {} while it read none of the answers), ended with ENHANCE_YOUR_CALM",
                    stall::MAX_CONTROL_FRAMES_WHILE_STALLED
                );
                return Poll::Ready(None);
            }
        }
        if open.get() == 0 {
            release.now_idle(conn, Instant::now());
        }
    }
    next.map(|n| n.map(|r| r.map_err(io::Error::other)))
}

/// A connection whose first bytes were already read (an h2c preface seen by
/// the HTTP/1 loop): they are read again first.
pub struct Prefixed<T> {
    /// Bytes read before.
    pub pre: Bytes,
    /// The connection.
    pub io: T,
}

impl<T: AsyncRead + Unpin> AsyncRead for Prefixed<T> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        if !self.pre.is_empty() {
            let n = self.pre.len().min(buf.remaining());
            let piece = self.pre.split_to(n);
            buf.put_slice(&piece);
            if self.pre.is_empty() {
                // An empty view would still keep the HTTP/1 read buffer.
                self.pre = Bytes::new();
            }
            return std::task::Poll::Ready(Ok(()));
        }
        std::pin::Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Prefixed<T> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<io::Result<usize>> {
        std::pin::Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> std::task::Poll<io::Result<usize>> {
        std::pin::Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// What a stream's task needs of its connection.
struct Stream {
    peer: Rc<Peer>,
    scheme: Scheme,
    tls: Option<TlsInfo>,
    worker: Rc<Worker>,
    open: Rc<Cell<usize>>,
    idle: Rc<tokio::sync::Notify>,
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.open.set(self.open.get() - 1);
        if self.open.get() == 0 {
            self.idle.notify_waiters();
        }
    }
}

impl Stream {
    async fn serve(self, request: http::Request<RecvStream>, respond: SendResponse<Bytes>) {
        let started = Instant::now();
        let (parts, body) = request.into_parts();
        let websocket = parts.method == http::Method::CONNECT
            && parts
                .extensions
                .get::<h2::ext::Protocol>()
                .is_some_and(|p| p.as_str() == crate::h2_tunnel::WEBSOCKET);
        let mut head = request_head(&parts, self.scheme, websocket);
        // This stream's generation to its end, even across a reload.
        let w = self.worker.generation();
        if let Some(tracer) = &w.tracer {
            head.trace = Some(tracer.start(&head));
        }
        // Identify: who the client is, once for the whole stream.
        let forwarded = w.router.client_of(&head, &self.peer, None);
        let client = pipeline::Client::new(&self.peer, forwarded.as_deref());
        let mut body = StreamBody::new(body, &parts.headers, websocket, &w);
        // Shared by the upstream's interim responses and the watch for a
        // reset, which never run at once (one task polls both).
        let respond = RefCell::new(respond);
        let answer = match padded_field(&parts.headers) {
            Some(name) => Answer::Now(malformed(name, &self.peer, "HTTP/2"), None),
            None => match pipeline::rewrite(&mut head, &w.router, started, client) {
                Some(answered) => Answer::Now(answered, None),
                None => pipeline::answer(&head, &w.router, started, client),
            },
        };
        let (response, route) = match answer {
            Answer::Now(response, route) => (response, route),
            Answer::Upstream(to) => {
                let route = Some(to.route_index());
                let mut exchange = Exchange {
                    body: &mut body,
                    respond: &respond,
                };
                let asked = pinned(|| pipeline::upstream(&head, to, &mut exchange, client));
                // A client that resets the stream cancels the upstream
                // request with it: dropping the exchange closes its
                // connection (which is not pooled half-read).
                let reset = std::future::poll_fn(|cx| respond.borrow_mut().poll_reset(cx));
                tokio::select! {
                    response = asked => (response, route),
                    reason = reset => {
                        let why = reason.map_or_else(|e| e.to_string(), |r| format!("{r:?}"));
                        log::debug!("HTTP/2 stream from {} reset ({why}): upstream request cancelled", self.peer);
                        return;
                    }
                }
            }
        };
        let respond = respond.into_inner();
        let status = response.status;
        let served = Served::of(&response, route);
        if let Some(m) = &w.metrics {
            m.record(route, Version::Http2, status.code(), started.elapsed());
        }
        let head_request = head.method() == b"HEAD";
        let mut sent = crate::http_map::Sent::default();
        let mut response = response;
        if websocket {
            match std::mem::take(&mut response.body) {
                Body::Upgrade(tunnel) => {
                    if let Some(recv) = body.into_recv() {
                        self.tunnel(respond, tunnel, recv).await;
                    }
                    return self.log(&head, client.addr(), (status, None), served, 0, started);
                }
                other => response.body = other,
            }
        }
        let send_timeout = w.timeouts.send;
        if let Err(e) = send(respond, response, head_request, send_timeout, &mut sent).await {
            log::debug!("HTTP/2 stream from {}: {e}", self.peer);
        }
        // What the client still sends of a body nobody read is read (within
        // the body limits) so that its stream ends as it closes it, not by
        // a reset racing its last frames (HTTP/1 drains the same way).
        body.drain().await;
        if let (Some(m), Some(code)) = (&w.metrics, sent.grpc_status) {
            m.record_grpc(route, code);
        }
        let outcome = (status, sent.grpc_status);
        self.log(&head, client.addr(), outcome, served, sent.bytes, started);
    }

    /// A WebSocket the upstream accepted: RFC 8441 §5 makes the switch a
    /// 2xx on the stream, which then carries the WebSocket's bytes.
    async fn tunnel(
        &self,
        mut respond: SendResponse<Bytes>,
        tunnel: Box<dyn Tunnel>,
        recv: RecvStream,
    ) {
        let accepted = http::Response::builder()
            .status(200)
            .body(())
            .expect("a bare status");
        match respond.send_response(accepted, false) {
            Ok(send) => {
                let pipe = crate::h2_tunnel::StreamPipe::new(send, recv);
                // A window the client keeps shut ends the tunnel after the
                // send timeout; a quiet tunnel stays (decision 0014).
                let send_timeout = self.worker.with_generation(|g| g.timeouts.send);
                let mut pipe = BoundedWrites::new(pipe, send_timeout);
                if let Err(e) = tunnel.run(&mut pipe, Bytes::new()).await {
                    log::debug!("WebSocket over HTTP/2 from {}: {e}", self.peer);
                }
            }
            Err(e) => log::debug!("HTTP/2 stream from {}: {e}", self.peer),
        }
    }

    /// Records the exchange in the access log and `slow_request`'s check,
    /// if either is on.
    fn log(
        &self,
        head: &RequestHead,
        client: &str,
        (status, grpc_status): (Status, Option<u16>),
        served: Served,
        sent: u64,
        started: Instant,
    ) {
        self.worker.with_generation(|g| {
            if g.records_exchanges {
                let entry = access_log::Entry {
                    peer: client,
                    status: status.code(),
                    bytes: sent,
                    duration: started.elapsed(),
                    cache: served.cache,
                    tls: self.tls,
                    upstream: served.upstream,
                    route: None,
                    grpc_status,
                };
                access_log::record(g, head, served, entry);
            }
        });
    }
}

/// The neutral head of an HTTP/2 request: pseudo-headers become method,
/// target and authority; h2 has already refused connection-specific fields
/// and malformed pseudo-headers (RFC 9113 §8.2.2, §8.3). A WebSocket's
/// extended CONNECT becomes the HTTP/1.1 upgrade request an upstream
/// expects (RFC 8441 §5: GET, `Upgrade: websocket`, and a key).
fn request_head(parts: &http::request::Parts, scheme: Scheme, websocket: bool) -> RequestHead {
    let method = match websocket {
        true => &b"GET"[..],
        false => parts.method.as_str().as_bytes(),
    };
    http_map::request_head(parts, method, Version::Http2, scheme, |head| {
        if websocket {
            crate::h2_tunnel::websocket_upgrade_fields(head);
        }
    })
}

/// A stream's request body as handlers read it: DATA frames, within the
/// body size limit and timeout, their window given back as they are read
/// (so a slow upstream slows the client: back-pressure).
struct StreamBody {
    /// `None` once [detached](ClientBody::detach) for an HTTP/2 upstream.
    recv: Option<RecvStream>,
    length: BodyLength,
    read: u64,
    max: u64,
    timeout: Duration,
    trailers: Option<Bytes>,
}

impl StreamBody {
    /// The body of a stream with `headers`; a `tunnel`'s stream (a
    /// WebSocket) has none: its DATA is the tunnel's, read once it opens.
    fn new(
        recv: RecvStream,
        headers: &http::HeaderMap,
        tunnel: bool,
        w: &Generation,
    ) -> StreamBody {
        let declared = headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse().ok());
        let length = match declared {
            _ if tunnel => BodyLength::None,
            Some(n) => BodyLength::Known(n),
            None if recv.is_end_stream() => BodyLength::None,
            None => BodyLength::Chunked,
        };
        StreamBody {
            recv: Some(recv),
            length,
            read: 0,
            max: w.head_limits.max_body_size,
            timeout: w.timeouts.body,
            trailers: None,
        }
    }
}

impl ClientBody for StreamBody {
    fn length(&self) -> BodyLength {
        self.length
    }

    async fn next_chunk(&mut self) -> io::Result<Option<Bytes>> {
        let Some(recv) = self
            .recv
            .as_mut()
            .filter(|_| self.length != BodyLength::None)
        else {
            return Ok(None);
        };
        if let BodyLength::Known(n) = self.length {
            if n > self.max {
                return Err(too_large());
            }
        }
        let next = tokio::time::timeout(self.timeout, recv.data()).await;
        let Ok(next) = next else {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "request body timed out",
            ));
        };
        match next {
            Some(Ok(data)) => {
                self.read += data.len() as u64;
                if self.read > self.max {
                    return Err(too_large());
                }
                let _ = recv.flow_control().release_capacity(data.len());
                Ok(Some(data))
            }
            Some(Err(e)) => Err(io::Error::new(io::ErrorKind::ConnectionAborted, e)),
            None => {
                if let Ok(Some(trailers)) = recv.trailers().await {
                    self.trailers = Some(http_map::field_lines(&trailers));
                }
                Ok(None)
            }
        }
    }

    fn trailers(&mut self) -> Option<Bytes> {
        self.trailers.take()
    }

    fn detach(&mut self) -> Option<Box<dyn BodySource>> {
        if self.length == BodyLength::None {
            return None;
        }
        let recv = self.recv.take()?;
        Some(Box::new(hayate_proxy::RecvBody::new(
            recv,
            self.read,
            self.max,
            (),
        )))
    }
}

impl StreamBody {
    /// The stream's receiving half, for a tunnel.
    fn into_recv(self) -> Option<RecvStream> {
        self.recv
    }

    /// Reads and drops the rest of the body, within its limits.
    async fn drain(&mut self) {
        if self.recv.as_ref().is_none_or(|r| r.is_end_stream()) {
            return;
        }
        while let Ok(Some(_)) = self.next_chunk().await {}
    }
}

/// A stream's side of an upstream exchange: its request body, and its
/// response half for the interim responses the upstream sends ahead of
/// its final one (HEADERS with a 1xx status, RFC 9113 §8.1).
struct Exchange<'s> {
    body: &'s mut StreamBody,
    respond: &'s RefCell<SendResponse<Bytes>>,
}

impl ClientBody for Exchange<'_> {
    fn length(&self) -> BodyLength {
        self.body.length()
    }

    async fn next_chunk(&mut self) -> io::Result<Option<Bytes>> {
        self.body.next_chunk().await
    }

    fn trailers(&mut self) -> Option<Bytes> {
        self.body.trailers()
    }

    fn detach(&mut self) -> Option<Box<dyn BodySource>> {
        self.body.detach()
    }

    async fn gone(&mut self) {
        self.body.gone().await
    }

    fn limit(&mut self, max: u64) {
        self.body.max = self.body.max.min(max);
    }

    fn pause_limit(&mut self, pause: std::time::Duration) {
        self.body.timeout = self.body.timeout.min(pause);
    }

    fn interim(&mut self, status: Status, fields: &Fields) {
        let mut head = http::Response::builder().status(status.code());
        for (name, value) in fields.iter() {
            if !connection_specific(name) {
                head = head.header(name, value);
            }
        }
        let sent = head.body(()).map_err(|e| e.to_string()).and_then(|h| {
            let mut respond = self.respond.borrow_mut();
            respond.send_informational(h).map_err(|e| e.to_string())
        });
        if let Err(e) = sent {
            log::debug!("interim {} not sent on HTTP/2: {e}", status.code());
        }
    }
}

fn too_large() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, "request body too large")
}
