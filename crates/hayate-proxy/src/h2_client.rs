//! Forwarding one request to a group whose members speak HTTP/2 (`h2c://`,
//! or `https://` with ALPN `h2`): a stream on a pooled connection
//! (`h2_pool.rs`), the request's fields as the HTTP/1 path builds them
//! (`request_head.rs`: forwarding fields, request id, Host policy) plus
//! `te: trailers`, and both bodies streamed at once: the client's body goes
//! up while the answer comes down, so a gRPC bidirectional call flows
//! message by message. Trailers pass both ways.
//!
//! Retries follow RFC 9113 §8.7: a request is sent again, on another
//! connection, only when the upstream said it did not process it
//! (REFUSED_STREAM, or a stream above a GOAWAY's last-stream-id) and its
//! body is at hand to resend, or when no stream could be opened at all.

use std::cell::RefCell;
use std::future::poll_fn;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use h2::client::ResponseFuture;
use h2::{RecvStream, SendStream};
use hayate_core::client_body::{BodyLength, ClientBody};
use hayate_core::error::{Error, ErrorKind};
use hayate_core::response::{BodySource, StreamBody};
use hayate_core::{Body, Fields, Response, Status};

use crate::group::{Outstanding, UpstreamGroup};
use crate::h2_body::{trailer_map, RecvBody};
use crate::h2_pool::{h2_io, H2Conn, Lease, StreamSlot};
use crate::hop_by_hop::{connection_listed, is_hop_by_hop};
use crate::queue::Busy;
use crate::request_head::RequestHead;
use crate::retry::Failure;
use crate::ProxyRequest;

/// Times a request the upstream did not process (refused, above a
/// GOAWAY's last stream, or no stream opened on a connection going away)
/// is sent again, each time on a connection not known to be going away.
/// A server that closes its connections every few streams refuses each
/// one's later streams, and a request may lose that race more than once:
/// against a server closing every connection after 10 streams, 4 clients in
/// lock-step lost none of 40 requests (tests/h2_upstream.rs); after every
/// 3rd stream with 8 clients, a request refused 8 times in a row still
/// occurred (so a member that refuses 8 times in a row is shedding load,
/// and the request is answered, UNAVAILABLE to gRPC, not looped on).
const MAX_REPLAYS: u32 = 8;

/// What keeps an answer's stream counted until its body ends: the stream's
/// slot on its connection, the request's count on its member, and the
/// task sending the client's body up (cancelled if the answer is dropped:
/// the client left, or the answer ended first).
struct Held {
    _slot: StreamSlot,
    _outstanding: Outstanding,
    _pump: Option<Pump>,
}

/// The task sending a request body upstream, aborted when dropped.
struct Pump(tokio::task::AbortHandle);

/// Where a spawned pump leaves the client's failure (a body over its
/// limit, a client gone), so the request fails as the client's, not the
/// upstream's (the pump resets the stream, which fails the answer too).
type ClientFailure = Rc<RefCell<Option<io::Error>>>;

impl Drop for Pump {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl UpstreamGroup {
    /// [`UpstreamGroup::forward`] to HTTP/2 members.
    pub(crate) async fn forward_h2<B: ClientBody>(
        &self,
        req: &ProxyRequest<'_>,
        body: &mut B,
    ) -> Response {
        let length = body.length();
        // A small body of known length is read first, so a refused stream
        // can be sent again; a body of unknown length (gRPC's) streams, or
        // a bidirectional call could never begin.
        let buffered = match length {
            BodyLength::None => Some(Bytes::new()),
            BodyLength::Known(n) if n <= self.settings.replay_buffer => {
                match crate::forward::read_all(body, n).await {
                    Ok(b) => Some(b),
                    Err(e) => return Error::client_body(e).into_response(),
                }
            }
            _ => None,
        };
        let listed = connection_listed(req.headers.iter().copied());
        let mut head = RequestHead::new(req, length, &self.settings, &listed, None);
        let trailers_asked = req
            .values(b"te")
            .flat_map(hayate_core::field::split_list)
            .any(|t| t.eq_ignore_ascii_case(b"trailers"));
        // gRPC's deadline, when shorter than the route's: its passing is
        // the caller's limit, not the member's failure.
        let deadline = crate::grpc::timeout(req).filter(|t| *t < self.settings.header_timeout);
        let wait = deadline.unwrap_or(self.settings.header_timeout);
        let is_head = req.method.eq_ignore_ascii_case(b"HEAD");
        let key = self.balance_key(&req.headers, req.client_ip);
        let mut tried: Vec<usize> = Vec::new();
        let mut replays = 0;
        loop {
            let now = hayate_core::loop_time::instant();
            let i = match self.pick(now, &tried, key) {
                Ok(i) => i,
                Err(Busy::Exhausted | Busy::Full) => {
                    let e = io::Error::other("every member failed this request");
                    return Error::new(ErrorKind::UpstreamFailed, e).into_response();
                }
            };
            let member = self.members[i].clone();
            let Some(instance) = member.current() else {
                tried.push(i);
                continue;
            };
            let guard = Outstanding::new(member.clone(), instance);
            let conn = match self.connection(&guard).await {
                Ok(c) => c,
                Err(e) => match self.connect_failed(i, &mut tried, e) {
                    Some(answer) => return answer,
                    None => continue,
                },
            };
            let request = match outgoing(
                req,
                head.for_member(&self.settings, &member.addr),
                &member.addr,
                length,
                trailers_asked,
            ) {
                Ok(r) => r,
                Err(e) => {
                    return Error::new(ErrorKind::BadRequest, e)
                        .context("request not valid for HTTP/2")
                        .into_response()
                }
            };
            let max_interim = self.settings.max_interim;
            let sent = exchange(&conn, request, buffered.as_ref(), body, wait, max_interim).await;
            let failure = match sent {
                Ok((answer, slot, pump)) => {
                    member.succeeded();
                    let held = Held {
                        _slot: slot,
                        _outstanding: guard,
                        _pump: pump,
                    };
                    return response(answer, held, is_head, self.settings.via);
                }
                Err(Failure::Client(e)) => return Error::client_body(e).into_response(),
                Err(f) => f,
            };
            match failure {
                // Refused unprocessed, or no stream opened: safe to send again.
                Failure::NotSent(e) if replays < MAX_REPLAYS => {
                    log::debug!("upstream {}: {e}; sending again", member.label);
                    replays += 1;
                }
                Failure::NoAnswer(e)
                    if deadline.is_some() && e.kind() == io::ErrorKind::TimedOut =>
                {
                    // The caller's limit: no error of hayate's or the
                    // member's to log (the client gives up at the same time).
                    log::debug!(
                        "upstream {}: the call's grpc-timeout passed: {e}",
                        member.label
                    );
                    return Response::error(Status::GATEWAY_TIMEOUT);
                }
                f => {
                    member.failed(&self.settings);
                    return Error::upstream(f.into_cause())
                        .context(format!("upstream {}", member.label))
                        .into_response();
                }
            }
        }
    }

    /// A connection to the guarded member: a pooled one with room, one
    /// being opened, or a new one.
    async fn connection(&self, guard: &Outstanding) -> io::Result<H2Conn> {
        let member = guard.member();
        let instance = guard.instance_id();
        loop {
            match member.h2.lease(instance, self.settings.h2_max_conns) {
                Lease::Conn(c) => return Ok(c),
                Lease::Wait => member.h2.wait_for_opening().await,
                Lease::Open => {
                    let target = member.target(guard.instance());
                    let timeout = self.settings.connect_timeout;
                    let tls = self.h2_tls();
                    return member
                        .h2
                        .open(member, &target, instance, timeout, tls)
                        .await;
                }
            }
        }
    }
}

/// The request as h2 sends it, from the HTTP/1 head built for it (the
/// proxy's forwarding rules live there once): its Host becomes the
/// authority, framing and connection fields go, `te: trailers` stays when
/// the client asked for trailers (gRPC servers require it).
fn outgoing(
    req: &ProxyRequest<'_>,
    head: &[u8],
    member: &crate::UpstreamAddr,
    length: BodyLength,
    trailers_asked: bool,
) -> Result<http::Request<()>, io::Error> {
    let invalid = |e: String| io::Error::new(io::ErrorKind::InvalidData, e);
    let mut fields = [httparse::EMPTY_HEADER; 128];
    let mut parsed = httparse::Request::new(&mut fields);
    parsed
        .parse(head)
        .map_err(|e| invalid(format!("upstream head: {e}")))?;
    let tls = matches!(member, crate::UpstreamAddr::Tcp { tls: true, .. });
    let mut authority = None;
    let mut builder = http::Request::builder().method(req.method);
    for f in parsed.headers.iter() {
        let name = f.name.as_bytes();
        if hayate_core::field::name_is(name, b"host") {
            authority = Some(f.value);
        } else if !is_hop_by_hop(name) {
            builder = builder.header(name, f.value);
        }
    }
    if trailers_asked {
        builder = builder.header("te", "trailers");
    }
    if let BodyLength::Known(n) = length {
        builder = builder.header("content-length", n);
    }
    let fallback = match member {
        crate::UpstreamAddr::Tcp { authority, .. } => authority.as_bytes(),
        crate::UpstreamAddr::Unix(_) | crate::UpstreamAddr::UnixH2c(_) => b"localhost",
    };
    let authority = authority.filter(|a| !a.is_empty()).unwrap_or(fallback);
    let uri = http::Uri::builder()
        .scheme(if tls { "https" } else { "http" })
        .authority(authority)
        .path_and_query(req.target)
        .build()
        .map_err(|e| invalid(format!("request target: {e}")))?;
    builder
        .uri(uri)
        .body(())
        .map_err(|e| invalid(e.to_string()))
}

/// Opens the request's stream on `conn`, sends its body (at once when
/// `buffered`, else streamed while the answer is awaited) and waits up to
/// `wait` for the answer's head.
async fn exchange<B: ClientBody>(
    conn: &H2Conn,
    request: http::Request<()>,
    buffered: Option<&Bytes>,
    body: &mut B,
    wait: Duration,
    max_interim: usize,
) -> Result<(http::Response<RecvStream>, StreamSlot, Option<Pump>), Failure> {
    let (send, slot) = conn.stream();
    let refused = |e: h2::Error| {
        // No stream opened (GOAWAY received, connection gone): nothing was
        // sent, and the connection takes no more streams.
        conn.close();
        Failure::NotSent(h2_io(e))
    };
    let mut send = send.ready().await.map_err(refused)?;
    let end = buffered.is_some_and(Bytes::is_empty);
    let (answer, out) = send.send_request(request, end).map_err(refused)?;
    let failed = ClientFailure::default();
    let pump = match (buffered, end) {
        (_, true) => None,
        (Some(b), false) => Some(spawn_pump(Chunks::Buffered(Some(b.clone())), out, &failed)),
        (None, false) => match body.detach() {
            Some(source) => Some(spawn_pump(Chunks::Detached(source), out, &failed)),
            // An HTTP/1 client's body cannot leave its connection: it is
            // sent while the answer is awaited, and whole before it.
            None => {
                // The body is borrowed by its pump meanwhile: interim
                // answers are passed on once it is sent.
                let mut early = Vec::new();
                let keep = |status, fields| early.push((status, fields));
                let (pumped, head) = tokio::join!(
                    pump(ClientChunks(body), out),
                    answer_head(answer, wait, max_interim, keep)
                );
                if let Err(Failure::Client(e)) = pumped {
                    return Err(Failure::Client(e));
                }
                for (status, fields) in early {
                    body.interim(status, &fields);
                }
                return head.map(|h| (h, slot, None)).map_err(|e| classify(conn, e));
            }
        },
    };
    let pass = |status, fields: Fields| body.interim(status, &fields);
    match answer_head(answer, wait, max_interim, pass).await {
        Ok(head) => Ok((head, slot, pump)),
        Err(e) => match failed.take() {
            Some(client) => Err(Failure::Client(client)),
            None => Err(classify(conn, e)),
        },
    }
}

/// The answer's head, within `wait`; the interim answers before it (1xx:
/// 103 Early Hints) go to `interim` as they come, up to `max_interim` of
/// them (more are dropped, as the HTTP/1 path does), 100 Continue never
/// (the client's own connection answered its Expect).
async fn answer_head(
    mut answer: ResponseFuture,
    wait: Duration,
    max_interim: usize,
    mut interim: impl FnMut(Status, Fields),
) -> Result<http::Response<RecvStream>, AnswerError> {
    let mut passed = 0;
    let head = poll_fn(|cx| {
        while let Poll::Ready(Some(early)) = answer.poll_informational(cx) {
            let early = early?;
            let status = Status::any(early.status().as_u16());
            match status {
                Some(s) if s != Status::CONTINUE && passed < max_interim => {
                    passed += 1;
                    interim(s, end_to_end(early.headers()).0);
                }
                _ => {}
            }
        }
        Pin::new(&mut answer).poll(cx)
    });
    match tokio::time::timeout(wait, head).await {
        Ok(Ok(head)) => Ok(head),
        Ok(Err(e)) => Err(AnswerError::H2(e)),
        Err(_) => Err(AnswerError::TimedOut),
    }
}

/// An answer's end-to-end fields (HTTP/2 has no connection fields, but an
/// upstream may still send `keep-alive` or `proxy-connection`), and
/// whether it has a Date.
fn end_to_end(headers: &http::HeaderMap) -> (Fields, bool) {
    let fields: Vec<httparse::Header<'_>> = headers
        .iter()
        .map(|(n, v)| httparse::Header {
            name: n.as_str(),
            value: v.as_bytes(),
        })
        .collect();
    let mut out = Fields::new();
    let has_date = crate::h1_client::copy_end_to_end(&mut out, &fields).has_date;
    (out, has_date)
}

enum AnswerError {
    H2(h2::Error),
    TimedOut,
}

/// How far a stream that got no answer went (RFC 9113 §8.7): refused
/// unprocessed (REFUSED_STREAM, or above a GOAWAY's last-stream-id) may
/// go again; anything else may have been acted on.
fn classify(conn: &H2Conn, e: AnswerError) -> Failure {
    let e = match e {
        AnswerError::TimedOut => {
            return Failure::NoAnswer(io::Error::new(
                io::ErrorKind::TimedOut,
                "no response head in time",
            ))
        }
        AnswerError::H2(e) => e,
    };
    let going_away = e.is_go_away() && e.is_remote();
    if going_away || e.is_io() {
        conn.close();
    }
    let refused = e.is_remote() && e.reason() == Some(h2::Reason::REFUSED_STREAM);
    if refused || going_away {
        Failure::NotSent(h2_io(e))
    } else {
        Failure::NoAnswer(h2_io(e))
    }
}

/// A request body's pieces, wherever they come from.
enum Chunks {
    /// Read whole before the request (replayable).
    Buffered(Option<Bytes>),
    /// An HTTP/2 client's stream, handed over ([`ClientBody::detach`]).
    Detached(Box<dyn BodySource>),
}

/// An HTTP/1 client's body, read in place.
struct ClientChunks<'b, B>(&'b mut B);

/// The pieces of a body, then its trailers.
trait NextChunk {
    async fn next(&mut self) -> io::Result<Option<Bytes>>;
    fn trailers(&mut self) -> Option<Bytes>;
}

impl NextChunk for Chunks {
    async fn next(&mut self) -> io::Result<Option<Bytes>> {
        match self {
            Chunks::Buffered(b) => Ok(b.take()),
            Chunks::Detached(source) => poll_fn(|cx| source.poll_chunk(cx)).await,
        }
    }

    fn trailers(&mut self) -> Option<Bytes> {
        match self {
            Chunks::Buffered(_) => None,
            Chunks::Detached(source) => source.trailers(),
        }
    }
}

impl<B: ClientBody> NextChunk for ClientChunks<'_, B> {
    async fn next(&mut self) -> io::Result<Option<Bytes>> {
        self.0.next_chunk().await
    }

    fn trailers(&mut self) -> Option<Bytes> {
        self.0.trailers()
    }
}

fn spawn_pump(chunks: Chunks, out: SendStream<Bytes>, failed: &ClientFailure) -> Pump {
    let failed = failed.clone();
    let task = tokio::task::spawn_local(async move {
        match pump(chunks, out).await {
            Ok(()) => {}
            Err(Failure::Client(e)) => *failed.borrow_mut() = Some(e),
            Err(f) => log::debug!("request body to HTTP/2 upstream ended: {f:?}"),
        }
    });
    Pump(task.abort_handle())
}

/// Sends a body up as it comes, within the upstream's flow-control window,
/// then its trailers (or the end of the stream). A client body that fails
/// resets the stream (CANCEL): the upstream sees the call end unfinished.
async fn pump(mut chunks: impl NextChunk, mut out: SendStream<Bytes>) -> Result<(), Failure> {
    let upstream = |e| Failure::Upstream(h2_io(e));
    loop {
        match chunks.next().await {
            Ok(Some(data)) => send_data(&mut out, data).await.map_err(upstream)?,
            Ok(None) => {
                return match chunks.trailers() {
                    Some(t) => out.send_trailers(trailer_map(&t)),
                    None => out.send_data(Bytes::new(), true),
                }
                .map_err(upstream);
            }
            Err(e) => {
                out.send_reset(h2::Reason::CANCEL);
                return Err(Failure::Client(e));
            }
        }
    }
}

/// Sends `data` as the upstream's window allows.
async fn send_data(out: &mut SendStream<Bytes>, mut data: Bytes) -> Result<(), h2::Error> {
    while !data.is_empty() {
        out.reserve_capacity(data.len());
        let granted = match poll_fn(|cx| out.poll_capacity(cx)).await {
            Some(granted) => granted?,
            None => return Err(h2::Error::from(h2::Reason::CANCEL)),
        };
        let piece = data.split_to(granted.min(data.len()));
        out.send_data(piece, false)?;
    }
    Ok(())
}

/// The response for the client: the upstream's status and end-to-end
/// fields, its body streamed with its trailers. An answer that ended with
/// its head (a gRPC trailers-only response) has no body.
fn response(answer: http::Response<RecvStream>, held: Held, is_head: bool, via: bool) -> Response {
    let (parts, recv) = answer.into_parts();
    let status = Status::any(parts.status.as_u16()).unwrap_or(Status::BAD_GATEWAY);
    let mut r = Response::new(status);
    (r.fields, r.has_date) = end_to_end(&parts.headers);
    if via {
        r.fields.push(b"Via", b"2 hayate");
    }
    let len = parts
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if recv.is_end_stream() {
        if is_head {
            // A HEAD answer announces the GET's length, when it gave one.
            r.unknown_framing = len.is_none();
            r.body = Body::Stream(StreamBody {
                len,
                source: Box::new(RecvBody::new(recv, 0, 0, held)),
            });
        }
        return r;
    }
    r.body = Body::Stream(StreamBody {
        len,
        source: Box::new(RecvBody::new(recv, 0, u64::MAX, held)),
    });
    r
}
