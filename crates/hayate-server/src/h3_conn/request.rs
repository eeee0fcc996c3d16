//! One HTTP/3 request stream: its head (within the header timeout) becomes
//! a [`RequestHead`], its DATA frames the [`ClientBody`] handlers read, and
//! it goes through the pipeline as an HTTP/2 stream does; the response goes
//! out through `send`.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::poll_fn;
use std::io;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};
use h3::error::StreamError;
use h3::server::{RequestResolver, RequestStream};
use hayate_core::boxed::pinned;
use hayate_core::client_body::{BodyLength, ClientBody};
use hayate_core::request::{RequestHead, Version};
use hayate_core::response::BodySource;
use hayate_core::transport::Peer;
use hayate_core::transport::Scheme;
use hayate_core::transport::TlsInfo;
use hayate_core::{Body, Fields, Status};
use tokio::sync::Notify;

use super::{early, header_timeout, send, Connection, InFlight};
use crate::access_log::{self, Served};
use crate::http_map::{self, connection_specific, field_lines, malformed, padded_field, Sent};
use crate::pipeline::{self, Answer};
use crate::worker::Generation;

/// What the access log says of HTTP/3's TLS: always 1.3 (RFC 9001 §4.2);
/// quinn does not say which cipher suite the handshake chose, so none is
/// logged.
const TLS_INFO: TlsInfo = TlsInfo {
    version: "TLSv1.3",
    cipher: "",
};

type Resolver = RequestResolver<h3_quinn::Connection, Bytes>;
type Recv = RequestStream<h3_quinn::RecvStream, Bytes>;
type Send = RequestStream<h3_quinn::SendStream<Bytes>, Bytes>;

/// Serves the request on a stream the client opened.
pub(super) async fn serve(resolver: Resolver, conn: InFlight) {
    let timeout = header_timeout(&conn.worker);
    let (request, stream) = match tokio::time::timeout(timeout, resolver.resolve_request()).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            log::debug!("HTTP/3 request from {}: {e}", conn.peer);
            if matches!(e, StreamError::RemoteTerminate { .. }) {
                conn.cancelled_by_client();
            }
            return;
        }
        Err(_) => {
            log::debug!("HTTP/3 request from {}: no head in {timeout:?}", conn.peer);
            return;
        }
    };
    let started = Instant::now();
    let (mut out, recv) = stream.split();
    let (parts, ()) = request.into_parts();
    let websocket = parts.method == http::Method::CONNECT
        && parts.extensions.get::<h3::ext::Protocol>() == Some(&h3::ext::Protocol::WEBSOCKET);
    let mut head = request_head(&parts, websocket);
    // This stream's generation to its end, even across a reload.
    let w = conn.worker.generation();
    if let Some(tracer) = &w.tracer {
        head.trace = Some(tracer.start(&head));
    }
    // Identify: who the client is, once for the whole stream.
    let forwarded = w.router.client_of(&head, &conn.peer, None);
    let client = pipeline::Client::new(&conn.peer, forwarded.as_deref());
    let mut body = StreamBody::new(recv, &parts.headers, websocket, &w);
    let too_early = early::admit(&mut head, &conn);
    let answer = match (padded_field(&parts.headers), too_early) {
        (Some(name), _) => Answer::Now(malformed(name, &conn.peer, "HTTP/3"), None),
        (None, Some(too_early)) => Answer::Now(too_early, None),
        (None, None) => match pipeline::rewrite(&mut head, &w.router, started, client) {
            Some(answered) => Answer::Now(answered, None),
            None => pipeline::answer(&head, &w.router, started, client),
        },
    };
    let (response, route) = match answer {
        Answer::Now(response, route) => (response, route),
        Answer::Upstream(to) => {
            let route = Some(to.route_index());
            let interim = Interim::default();
            let mut exchange = Exchange {
                body: &mut body,
                interim: &interim,
            };
            let asked = pinned(|| async {
                let response = pipeline::upstream(&head, to, &mut exchange, client).await;
                interim.done.set(true);
                interim.wake.notify_one();
                response
            });
            // The upstream's 1xx go out as they come, each whole, and all
            // before the final response.
            let (response, ()) = tokio::join!(asked, interim.send(&mut out, &conn.peer));
            (response, route)
        }
    };
    let status = response.status;
    let served = Served::of(&response, route);
    if let Some(m) = &w.metrics {
        m.record(route, Version::Http3, status.code(), started.elapsed());
    }
    let mut response = response;
    let mut sent = Sent::default();
    match std::mem::take(&mut response.body) {
        // The upstream switched: the stream is the WebSocket's now.
        Body::Upgrade(tunnel) if websocket => {
            let early = body.first.take().unwrap_or_default();
            if let Some(recv) = body.recv.take() {
                pinned(|| websocket_tunnel(out, recv, tunnel, early, &conn)).await;
            }
        }
        other => {
            response.body = other;
            let head_request = head.method() == b"HEAD";
            let sending = send::send(&mut out, response, head_request, w.timeouts.send, &mut sent);
            if let Err(e) = pinned(|| sending).await {
                log::debug!("HTTP/3 stream from {}: {e}", conn.peer);
                if matches!(
                    e,
                    send::Stopped::Stream(StreamError::RemoteTerminate { .. })
                ) {
                    conn.cancelled_by_client();
                }
            }
            // A body nobody read is read to its end (within its limits), so
            // that the client's stream ends as it closes it, as HTTP/2's
            // does.
            body.drain().await;
        }
    }
    if let (Some(m), Some(code)) = (&w.metrics, sent.grpc_status) {
        m.record_grpc(route, code);
    }
    if w.records_exchanges {
        let entry = access_log::Entry {
            peer: client.addr(),
            status: status.code(),
            bytes: sent.bytes,
            duration: started.elapsed(),
            cache: served.cache,
            tls: Some(TLS_INFO),
            upstream: served.upstream,
            route: None,
            grpc_status: sent.grpc_status,
        };
        access_log::record(&w, &head, served, entry);
    }
}

/// A WebSocket the upstream accepted: RFC 9220 (as RFC 8441 §5) makes the
/// switch a 2xx on the stream, which then carries the WebSocket's bytes;
/// `early`: what the client sent before that answer.
async fn websocket_tunnel(
    mut out: Send,
    recv: Recv,
    tunnel: Box<dyn hayate_core::response::Tunnel>,
    early: Bytes,
    conn: &Connection,
) {
    let accepted = http::Response::builder()
        .status(200)
        .body(())
        .expect("a bare status");
    if let Err(e) = out.send_response(accepted).await {
        log::debug!("WebSocket over HTTP/3 from {}: {e}", conn.peer);
        return;
    }
    let pipe = super::tunnel::StreamPipe::new(out, recv);
    // A window the client keeps shut ends the tunnel after the send
    // timeout; a quiet tunnel stays (decision 0014).
    let send_timeout = conn.worker.with_generation(|g| g.timeouts.send);
    let mut pipe = hayate_core::bounded_writes::BoundedWrites::new(pipe, send_timeout);
    if let Err(e) = tunnel.run(&mut pipe, early).await {
        log::debug!("WebSocket over HTTP/3 from {}: {e}", conn.peer);
    }
}

/// The neutral head of an HTTP/3 request: pseudo-headers become method,
/// target and authority; h3 has already refused malformed pseudo-headers
/// (RFC 9114 §4.3.1). A WebSocket's extended CONNECT becomes the HTTP/1.1
/// upgrade an upstream expects, as over HTTP/2.
fn request_head(parts: &http::request::Parts, websocket: bool) -> RequestHead {
    let method = match websocket {
        true => &b"GET"[..],
        false => parts.method.as_str().as_bytes(),
    };
    http_map::request_head(parts, method, Version::Http3, Scheme::Https, |head| {
        if websocket {
            crate::h2_tunnel::websocket_upgrade_fields(head);
        }
    })
}

/// A stream's request body as handlers read it: DATA frames, within the
/// body size limit and timeout. QUIC gives the window back as they are
/// read, so a slow upstream slows the client (back-pressure).
struct StreamBody {
    /// `None` once handed over ([`ClientBody::detach`]).
    recv: Option<Recv>,
    length: BodyLength,
    /// A chunk read ahead to learn whether a body follows the head.
    first: Option<Bytes>,
    ended: bool,
    read: u64,
    max: u64,
    timeout: Duration,
    trailers: Option<Bytes>,
}

impl StreamBody {
    /// The body of a stream with `headers`. HTTP/3 has no END_STREAM flag
    /// on HEADERS: whether a body follows is what the stream already holds
    /// (a client sends a bodiless request's FIN with its head).
    fn new(
        mut recv: Recv,
        headers: &http::HeaderMap,
        websocket: bool,
        w: &Generation,
    ) -> StreamBody {
        let declared = headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse().ok());
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let (ahead, first) = match recv.poll_recv_data(&mut cx) {
            Poll::Ready(Ok(None)) => (Ahead::Ended, None),
            Poll::Ready(Ok(Some(mut data))) => {
                let chunk = data.copy_to_bytes(data.remaining());
                (Ahead::Data, Some(chunk))
            }
            Poll::Ready(Err(_)) | Poll::Pending => (Ahead::Unknown, None),
        };
        let length = match (declared, ahead) {
            // A WebSocket's bytes are the tunnel's, not a request body.
            _ if websocket => BodyLength::None,
            (Some(n), _) => BodyLength::Known(n),
            (None, Ahead::Ended) => BodyLength::None,
            (None, _) => BodyLength::Chunked,
        };
        StreamBody {
            recv: Some(recv),
            length,
            read: first.as_ref().map_or(0, |f| f.len() as u64),
            first,
            ended: ahead == Ahead::Ended,
            max: w.head_limits.max_body_size,
            timeout: w.timeouts.body,
            trailers: None,
        }
    }

    /// Reads and drops the rest of the body, within its limits.
    async fn drain(&mut self) {
        while let Ok(Some(_)) = self.next_chunk().await {}
    }
}

/// What a stream held of its body when its head was read.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ahead {
    Ended,
    Data,
    Unknown,
}

impl ClientBody for StreamBody {
    fn length(&self) -> BodyLength {
        self.length
    }

    async fn next_chunk(&mut self) -> io::Result<Option<Bytes>> {
        let over = |n: u64| n > self.max;
        if let BodyLength::Known(n) = self.length {
            if over(n) {
                return Err(too_large());
            }
        }
        if over(self.read) {
            return Err(too_large());
        }
        if let Some(first) = self.first.take() {
            return Ok(Some(first));
        }
        let Some(recv) = self.recv.as_mut().filter(|_| !self.ended) else {
            return Ok(None);
        };
        let next = tokio::time::timeout(
            self.timeout,
            poll_fn(|cx| {
                recv.poll_recv_data(cx)
                    .map(|r| r.map(|d| d.map(|mut d| d.copy_to_bytes(d.remaining()))))
            }),
        )
        .await;
        let Ok(next) = next else {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "request body timed out",
            ));
        };
        match next {
            Ok(Some(data)) => {
                self.read += data.len() as u64;
                if self.read > self.max {
                    return Err(too_large());
                }
                Ok(Some(data))
            }
            Ok(None) => {
                self.ended = true;
                if let Ok(Some(trailers)) = recv.recv_trailers().await {
                    self.trailers = Some(field_lines(&trailers));
                }
                Ok(None)
            }
            Err(e) => Err(io::Error::new(io::ErrorKind::ConnectionAborted, e)),
        }
    }

    fn trailers(&mut self) -> Option<Bytes> {
        self.trailers.take()
    }

    fn limit(&mut self, max: u64) {
        self.max = self.max.min(max);
    }

    fn pause_limit(&mut self, pause: Duration) {
        self.timeout = self.timeout.min(pause);
    }

    /// The rest of the body as a source of its own, for an HTTP/2
    /// upstream that answers while the client still sends (a gRPC
    /// bidirectional call): as HTTP/2's stream body, no idle timeout of
    /// its own (a call may be quiet for minutes; the client's reset or the
    /// stream's end ends it), the size limit kept.
    fn detach(&mut self) -> Option<Box<dyn BodySource>> {
        if let BodyLength::Known(n) = self.length {
            if n > self.max {
                return None;
            }
        }
        let recv = self.recv.take()?;
        Some(Box::new(DetachedBody {
            recv,
            first: self.first.take(),
            data_done: self.ended,
            read: self.read,
            max: self.max,
            trailers: None,
        }))
    }
}

/// A stream's body handed over to an upstream exchange.
struct DetachedBody {
    recv: Recv,
    first: Option<Bytes>,
    data_done: bool,
    read: u64,
    max: u64,
    trailers: Option<Bytes>,
}

impl BodySource for DetachedBody {
    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Option<Bytes>>> {
        if let Some(first) = self.first.take() {
            return Poll::Ready(Ok(Some(first)));
        }
        if !self.data_done {
            let aborted = |e| io::Error::new(io::ErrorKind::ConnectionAborted, e);
            match std::task::ready!(self.recv.poll_recv_data(cx)) {
                Ok(Some(mut data)) => {
                    let data = data.copy_to_bytes(data.remaining());
                    self.read += data.len() as u64;
                    if self.read > self.max {
                        return Poll::Ready(Err(too_large()));
                    }
                    return Poll::Ready(Ok(Some(data)));
                }
                Ok(None) => self.data_done = true,
                Err(e) => return Poll::Ready(Err(aborted(e))),
            }
        }
        if let Ok(Some(trailers)) = std::task::ready!(self.recv.poll_recv_trailers(cx)) {
            self.trailers = Some(field_lines(&trailers));
        }
        Poll::Ready(Ok(None))
    }

    fn trailers(&mut self) -> Option<Bytes> {
        self.trailers.take()
    }
}

/// An upstream's interim responses (103 Early Hints) waiting to go out
/// ahead of its final one (RFC 9114 §4.1: HEADERS frames with a 1xx
/// status before the final HEADERS).
#[derive(Default)]
struct Interim {
    queued: RefCell<VecDeque<http::Response<()>>>,
    wake: Notify,
    /// The final response is there: send what is queued and stop.
    done: Cell<bool>,
}

impl Interim {
    async fn send(&self, out: &mut send::Send, peer: &Peer) {
        loop {
            loop {
                let next = self.queued.borrow_mut().pop_front();
                let Some(head) = next else { break };
                if let Err(e) = out.send_response(head).await {
                    log::debug!("interim response to {peer} not sent on HTTP/3: {e}");
                }
            }
            if self.done.get() {
                return;
            }
            self.wake.notified().await;
        }
    }
}

/// A stream's side of an upstream exchange: its request body, and where
/// the upstream's interim responses wait.
struct Exchange<'s> {
    body: &'s mut StreamBody,
    interim: &'s Interim,
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

    async fn gone(&mut self) {
        self.body.gone().await
    }

    fn limit(&mut self, max: u64) {
        self.body.limit(max);
    }

    fn pause_limit(&mut self, pause: Duration) {
        self.body.pause_limit(pause);
    }

    fn detach(&mut self) -> Option<Box<dyn BodySource>> {
        self.body.detach()
    }

    fn interim(&mut self, status: Status, fields: &Fields) {
        let mut head = http::Response::builder().status(status.code());
        for (name, value) in fields.iter() {
            if !connection_specific(name) {
                head = head.header(name, value);
            }
        }
        match head.body(()) {
            Ok(head) => {
                self.interim.queued.borrow_mut().push_back(head);
                self.interim.wake.notify_one();
            }
            Err(e) => log::debug!("interim {} not valid for HTTP/3: {e}", status.code()),
        }
    }
}

fn too_large() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, "request body too large")
}
