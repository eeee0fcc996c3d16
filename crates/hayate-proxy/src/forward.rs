//! Forwarding one request: the upstream request head, the body (buffered
//! when small enough to replay, streamed otherwise), the response head, and
//! the response body streamed back through [`UpstreamBody`].

use hayate_core::field::{parse_length, split_list, trim_ows as trim};
use std::cell::Cell;
use std::future::Future;
use std::io::{self, IoSlice};
use std::ops::Range;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use hayate_core::app::AppInstance;
use hayate_core::chunked::{chunk_size_line, passable_trailers};
use hayate_core::client_body::{BodyLength, ClientBody};
use hayate_core::stream::Stream;
use hayate_core::{Body, BodySource, Duplex, Response, Status, StreamBody, Tunnel};
use smallvec::SmallVec;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Sleep;

use crate::group::{Busy, HostPolicy, Member, ProxySettings, UpstreamGroup};
use crate::UpstreamAddr;

/// Most response header fields accepted from an upstream.
const MAX_RESPONSE_HEADERS: usize = 128;
/// Largest response head accepted from an upstream.
const MAX_RESPONSE_HEAD: usize = 64 * 1024;

/// A request's header fields (inline: most requests carry fewer than 16).
pub type RequestFields<'a> = SmallVec<[(&'a [u8], &'a [u8]); 16]>;

/// The request as the proxy needs it.
#[derive(Debug)]
pub struct ProxyRequest<'a> {
    /// Method.
    pub method: &'a [u8],
    /// Path and query as the client sent them.
    pub target: &'a [u8],
    /// Header fields as received.
    pub headers: RequestFields<'a>,
    /// The client's address, for X-Forwarded-For (`unix` for Unix sockets).
    pub client_ip: &'a str,
    /// The Host the client asked for.
    pub host: Option<&'a [u8]>,
}

impl<'a> ProxyRequest<'a> {
    /// The first value of the field `name`.
    pub fn field(&self, name: &[u8]) -> Option<&'a [u8]> {
        self.values(name).next()
    }

    /// Every value of the field `name`.
    pub fn values<'r>(&'r self, name: &'r [u8]) -> impl Iterator<Item = &'a [u8]> + 'r {
        self.headers
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| *v)
    }
}

/// Methods a proxy may repeat (RFC 9110 §9.2.2).
fn idempotent(method: &[u8]) -> bool {
    matches!(
        method,
        b"GET" | b"HEAD" | b"OPTIONS" | b"TRACE" | b"PUT" | b"DELETE"
    )
}

/// Hop-by-hop fields (RFC 9110 §7.6.1), never forwarded in either
/// direction, plus the framing and identity fields hayate sets itself.
fn is_hop_by_hop(name: &[u8]) -> bool {
    const NAMES: [&[u8]; 9] = [
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"content-length",
        b"expect",
    ];
    NAMES.iter().any(|n| n.eq_ignore_ascii_case(name))
}

/// Names listed in Connection fields, which are hop-by-hop too (inline:
/// rarely more than `keep-alive` or `close`).
fn connection_listed<'h>(
    headers: impl Iterator<Item = (&'h [u8], &'h [u8])>,
) -> SmallVec<[&'h [u8]; 4]> {
    headers
        .filter(|(n, _)| n.eq_ignore_ascii_case(b"connection"))
        .flat_map(|(_, v)| split_list(v))
        .collect()
}

/// The protocol a client asks to switch to (`Upgrade` with `Connection:
/// upgrade`), e.g. `websocket`; `listed` is what its Connection fields name.
fn requested_upgrade<'h>(headers: &[(&'h [u8], &'h [u8])], listed: &[&[u8]]) -> Option<&'h [u8]> {
    if !listed.iter().any(|t| t.eq_ignore_ascii_case(b"upgrade")) {
        return None;
    }
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(b"upgrade"))
        .map(|(_, v)| *v)
}

/// What one attempt sends upstream.
#[derive(Clone, Copy)]
struct Outgoing<'a> {
    head: &'a [u8],
    /// The whole body, when it was small enough to buffer (replayable).
    buffered: Option<&'a Bytes>,
    /// Otherwise, what was read of it before streaming the rest.
    prefix: &'a Bytes,
    /// The trailer section of a buffered chunked body (kept for a replay);
    /// a streamed body's trailers are read from the client at its end.
    trailers: Option<&'a Bytes>,
    /// The framing sent upstream.
    length: BodyLength,
    is_head: bool,
    upgrade: bool,
}

/// What went wrong, and whose fault it was.
#[derive(Debug)]
enum Failure {
    /// The client's body failed (bad framing, too large, timeout, gone).
    Client(io::Error),
    /// The upstream failed before a response byte arrived: replayable on a
    /// fresh connection when the body was buffered.
    BeforeResponse(io::Error),
    /// The upstream failed after it began to answer, or sent garbage.
    Upstream(io::Error),
}

/// How the upstream delimits its response body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// 101: the connection becomes a tunnel.
    Tunnel,
    Empty,
    Length(u64),
    Chunked,
    UntilClose,
}

struct Head {
    status: Status,
    headers: Vec<u8>,
    framing: Framing,
    /// How long the connection may idle in the pool; `None`: do not reuse.
    keep: Option<Duration>,
    /// The request was HEAD.
    is_head: bool,
    /// Content-Length announced on a HEAD response.
    head_len: Option<u64>,
}

impl UpstreamGroup {
    /// Forwards a request and returns the response to write (errors
    /// included: 502, 503, 504, or the client's 400/408/413).
    pub async fn forward<B: ClientBody>(&self, req: &ProxyRequest<'_>, body: &mut B) -> Response {
        let length = body.length();
        let key = self.balance_key(&req.headers, req.client_ip);
        // Small bodies are read first, so the request can be replayed. A
        // chunked body that ends within the buffer goes upstream with a
        // Content-Length, unless it has trailers to pass on: then it stays
        // chunked (a Content-Length body has no trailer section; a client's
        // Content-Length body has none either, so no trailer is lost).
        // Larger bodies stream, their first part included.
        let (buffered, prefix, length, trailers) = match length {
            BodyLength::None => (Some(Bytes::new()), Bytes::new(), length, None),
            BodyLength::Known(n) if n <= self.settings.replay_buffer => {
                match read_all(body, n).await {
                    Ok(b) => (Some(b), Bytes::new(), length, None),
                    Err(e) => return client_error(&e),
                }
            }
            BodyLength::Known(_) => (None, Bytes::new(), length, None),
            BodyLength::Chunked => match read_up_to(body, self.settings.replay_buffer).await {
                Ok((b, true)) => match body.trailers().and_then(|t| passable_trailers(&t)) {
                    Some(t) => (Some(b), Bytes::new(), length, Some(t)),
                    None => {
                        let n = b.len() as u64;
                        (Some(b), Bytes::new(), BodyLength::Known(n), None)
                    }
                },
                Ok((b, false)) => (None, b, length, None),
                Err(e) => return client_error(&e),
            },
        };
        let is_head = req.method.eq_ignore_ascii_case(b"HEAD");
        // Once per request: a replay or a retry on another member sends the
        // same head (the same X-Request-Id).
        let listed = connection_listed(req.headers.iter().copied());
        let upgrade_to = requested_upgrade(&req.headers, &listed);
        let upgrade = upgrade_to.is_some();
        let mut head = RequestHead::new(req, length, &self.settings, &listed, upgrade_to);
        let mut tried: Vec<usize> = Vec::new();
        let mut fresh_only = false;
        // Set at the request's first wait in the queue: all its waits end by
        // then, however often it is woken.
        let mut queue_deadline: Option<Instant> = None;
        loop {
            let now = Instant::now();
            // FIFO: a new request does not pass those already waiting.
            let picked = if queue_deadline.is_none() && self.waiting_any.get() > 0 {
                Err(Busy::Full)
            } else {
                self.pick(now, &tried, key)
            };
            let i = match picked {
                Ok(i) => i,
                Err(Busy::Exhausted) => return Response::error(Status::BAD_GATEWAY),
                Err(Busy::Full) => {
                    let newcomer = queue_deadline.is_none();
                    let deadline = *queue_deadline.get_or_insert(now + self.settings.queue_timeout);
                    match self
                        .wait_in_queue(deadline, newcomer, tried.is_empty())
                        .await
                    {
                        Ok(()) => continue,
                        Err(r) => return r,
                    }
                }
            };
            let member = self.members[i].clone();
            // Read once: its id picks a pooled connection, its address is
            // built only to connect.
            let Some(instance) = member.current() else {
                // The slot lost its instance since the pick: try again.
                tried.push(i);
                continue;
            };
            // Counted before connecting: a replaced app instance is not
            // stopped while a request is on its way to it.
            let guard = Outstanding::new(member.clone(), instance);
            let reused_conn = if fresh_only {
                None
            } else {
                member.checkout(now, guard.instance_id())
            };
            let reused = reused_conn.is_some();
            let conn = match reused_conn {
                Some(c) => c,
                None => {
                    let target = member.target(guard.instance());
                    match crate::upconn::connect(&target, self.settings.connect_timeout).await {
                        Ok(c) => c,
                        Err(e) => {
                            // Nothing was sent: another member may take it. The
                            // error line is for a request that fails, not a retry.
                            member.failed(&self.settings);
                            tried.push(i);
                            if tried.len() < self.members.len() {
                                log::warn!(
                                    "upstream {}: connect failed: {e}; trying another member",
                                    member.label
                                );
                                continue;
                            }
                            log::error!("upstream {}: connect failed: {e}", member.label);
                            return upstream_error(&e);
                        }
                    }
                }
            };
            match self
                .exchange(
                    conn,
                    &Outgoing {
                        head: head.for_member(&self.settings, &member.addr),
                        buffered: buffered.as_ref(),
                        prefix: &prefix,
                        trailers: trailers.as_ref(),
                        length,
                        is_head,
                        upgrade,
                    },
                    body,
                )
                .await
            {
                Ok((conn, parsed, rest)) => {
                    member.succeeded();
                    return self.response(conn, parsed, rest, guard);
                }
                Err(Failure::Client(e)) => return client_error(&e),
                Err(Failure::BeforeResponse(e)) if reused && buffered.is_some() && !fresh_only => {
                    // The pool race: the upstream closed an idle connection
                    // as we reused it. Replay once, on a fresh connection.
                    log::debug!(
                        "upstream {}: reused connection failed ({e}); replaying",
                        member.label
                    );
                    fresh_only = true;
                }
                Err(Failure::BeforeResponse(e))
                    if idempotent(req.method)
                        && buffered.is_some()
                        && tried.len() + 1 < self.members.len() =>
                {
                    // A fresh connection died before answering (the instance
                    // crashed): an idempotent request may go to another member.
                    log::warn!("upstream {}: {e}; retrying on another member", member.label);
                    member.failed(&self.settings);
                    tried.push(i);
                    fresh_only = false;
                }
                Err(Failure::BeforeResponse(e) | Failure::Upstream(e)) => {
                    log::error!("upstream {}: {e}", member.label);
                    member.failed(&self.settings);
                    return upstream_error(&e);
                }
            }
        }
    }

    /// Waits for a member to finish a request (or an app instance to
    /// become ready): FIFO, bounded in depth, and in time by `deadline`, set
    /// once per request. Overflow and timeout answer 503 with Retry-After
    /// (distinct from the 502 of a failing upstream). `newcomer`: the
    /// request's first wait; `any_member`: it has tried no member yet.
    async fn wait_in_queue(
        &self,
        deadline: Instant,
        newcomer: bool,
        any_member: bool,
    ) -> Result<(), Response> {
        let busy = || {
            let mut r = Response::error(Status::SERVICE_UNAVAILABLE);
            r.header("Retry-After", b"1");
            r
        };
        // A request already in line is not refused for the queue's depth.
        if newcomer && self.waiting.get() >= self.settings.queue_depth {
            log::warn!(
                "upstream group full and its queue too ({} waiting): 503",
                self.waiting.get()
            );
            return Err(busy());
        }
        if !newcomer && !any_member && self.waiting_any.get() > 0 && self.has_room() {
            // Woken for room only on members this request already failed
            // on: the wakeup goes on to a request that can take any member
            // (those never pass one on, so this ends).
            self.freed.notify_one();
        }
        let _queued = Queued::new(self, any_member);
        let ready = async {
            match &self.app_ready {
                Some(n) => n.notified().await,
                None => std::future::pending().await,
            }
        };
        let woken = tokio::time::timeout_at(deadline.into(), async {
            tokio::select! {
                _ = self.freed.notified() => {}
                _ = ready => {}
            }
        })
        .await;
        match woken {
            Ok(()) => Ok(()),
            Err(_) => {
                log::warn!(
                    "request waited {:?} for an upstream: 503",
                    self.settings.queue_timeout
                );
                Err(busy())
            }
        }
    }

    /// Sends the request and reads the response head.
    async fn exchange<B: ClientBody>(
        &self,
        mut conn: Stream,
        out: &Outgoing<'_>,
        body: &mut B,
    ) -> Result<(Stream, Head, BytesMut), Failure> {
        let Outgoing {
            head,
            buffered,
            prefix,
            trailers,
            length,
            is_head,
            upgrade,
        } = *out;
        let io_timeout = self.settings.io_timeout;
        let up = Failure::BeforeResponse;
        match buffered {
            Some(b) if length == BodyLength::Chunked => {
                // A buffered chunked body with trailers: one chunk, then the
                // last chunk and the trailer section.
                // An empty body has no data chunk (empty slices are skipped).
                let trailers = trailers.map_or(&b""[..], |t| &t[..]);
                let mut line = [0u8; 18];
                let (line, end): (&[u8], &[u8]) = if b.is_empty() {
                    (b"", b"")
                } else {
                    (chunk_size_line(b.len(), &mut line), b"\r\n")
                };
                let mut parts = [
                    IoSlice::new(head),
                    IoSlice::new(line),
                    IoSlice::new(b),
                    IoSlice::new(end),
                    IoSlice::new(b"0\r\n"),
                    IoSlice::new(trailers),
                    IoSlice::new(b"\r\n"),
                ];
                timed(io_timeout, write_all_vectored(&mut conn, &mut parts))
                    .await
                    .map_err(up)?;
            }
            Some(b) => {
                timed(
                    io_timeout,
                    write_all_vectored(&mut conn, &mut [IoSlice::new(head), IoSlice::new(b)]),
                )
                .await
                .map_err(up)?;
            }
            None => {
                timed(io_timeout, conn.write_all(head)).await.map_err(up)?;
                let chunked = length == BodyLength::Chunked;
                let mut first = (!prefix.is_empty()).then(|| prefix.clone());
                loop {
                    let chunk = match first.take() {
                        Some(p) => Some(p),
                        None => body.next_chunk().await.map_err(Failure::Client)?,
                    };
                    let Some(chunk) = chunk else { break };
                    if chunked {
                        // One write per chunk: size line, data, CRLF.
                        let mut line = [0u8; 18];
                        let line = chunk_size_line(chunk.len(), &mut line);
                        let mut parts = [
                            IoSlice::new(line),
                            IoSlice::new(&chunk),
                            IoSlice::new(b"\r\n"),
                        ];
                        timed(io_timeout, write_all_vectored(&mut conn, &mut parts))
                            .await
                            .map_err(up)?;
                    } else {
                        timed(io_timeout, conn.write_all(&chunk))
                            .await
                            .map_err(up)?;
                    }
                }
                if chunked {
                    // The last chunk and the client's trailers, filtered. (A
                    // body streamed with a Content-Length had one from the
                    // client too, hence no trailers to lose.)
                    let mut last = b"0\r\n".to_vec();
                    if let Some(t) = body.trailers().and_then(|t| passable_trailers(&t)) {
                        last.extend_from_slice(&t);
                    }
                    last.extend_from_slice(b"\r\n");
                    timed(io_timeout, conn.write_all(&last)).await.map_err(up)?;
                }
            }
        }
        // The response head.
        let deadline = Instant::now() + self.settings.header_timeout;
        // The buffer is allocated once the answer starts to arrive: a request
        // waiting on a slow app holds no read buffer (thousands of them cost
        // their sockets and little else). Readiness comes from epoll, no
        // syscall.
        match tokio::time::timeout_at(deadline.into(), conn.readable()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(Failure::BeforeResponse(e)),
            Err(_) => return Err(Failure::Upstream(header_timed_out())),
        }
        let mut buf = BytesMut::with_capacity(8 * 1024);
        loop {
            let n = match tokio::time::timeout_at(deadline.into(), conn.read_buf(&mut buf)).await {
                Ok(Ok(n)) => n,
                Ok(Err(e)) if buf.is_empty() => return Err(Failure::BeforeResponse(e)),
                Ok(Err(e)) => return Err(Failure::Upstream(e)),
                Err(_) => return Err(Failure::Upstream(header_timed_out())),
            };
            if n == 0 {
                let e = io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "upstream closed the connection",
                );
                return Err(if buf.is_empty() {
                    Failure::BeforeResponse(e)
                } else {
                    Failure::Upstream(e)
                });
            }
            while let Some((head, len)) =
                parse_response(&buf, is_head, upgrade, &self.settings).map_err(Failure::Upstream)?
            {
                buf.advance(len);
                match head {
                    // Interim responses (100 Continue, 103) are consumed.
                    None => continue,
                    Some(h) => return Ok((conn, h, buf)),
                }
            }
            if buf.len() > MAX_RESPONSE_HEAD {
                return Err(Failure::Upstream(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "response head too large",
                )));
            }
        }
    }

    fn response(&self, conn: Stream, head: Head, rest: BytesMut, guard: Outstanding) -> Response {
        let mut r = Response::new(head.status);
        r.head = head.headers;
        if head.framing == Framing::Tunnel {
            r.body = Body::Upgrade(Box::new(UpstreamTunnel {
                conn,
                rest: rest.freeze(),
                _guard: guard,
            }));
            return r;
        }
        let source = UpstreamBody {
            conn: Some(conn),
            buf: rest,
            framing: head.framing,
            remaining: match head.framing {
                Framing::Length(n) => n,
                _ => 0,
            },
            decoder: Chunked::keeping_trailers(),
            keep: head.keep,
            max_idle: self.settings.max_idle,
            io_timeout: self.settings.io_timeout,
            timer: None,
            timer_armed: false,
            guard: Some(guard),
        };
        r.body = match head.framing {
            Framing::Tunnel => unreachable!("handled above"),
            Framing::Empty => {
                let mut source = source;
                source.finish();
                if head.is_head {
                    // A HEAD response announces the GET body's framing:
                    // its length, or chunked when the upstream gave none.
                    Body::Stream(StreamBody {
                        len: head.head_len,
                        source: Box::new(source),
                    })
                } else {
                    Body::Empty
                }
            }
            Framing::Length(n) => Body::Stream(StreamBody {
                len: Some(n),
                source: Box::new(source),
            }),
            Framing::Chunked | Framing::UntilClose => Body::Stream(StreamBody {
                len: None,
                source: Box::new(source),
            }),
        };
        r
    }
}

/// Counts a request as waiting in its group's queue until dropped (also
/// when the request is abandoned mid-wait).
struct Queued<'g> {
    group: &'g UpstreamGroup,
    any_member: bool,
}

impl<'g> Queued<'g> {
    fn new(group: &'g UpstreamGroup, any_member: bool) -> Queued<'g> {
        group.waiting.set(group.waiting.get() + 1);
        if any_member {
            group.waiting_any.set(group.waiting_any.get() + 1);
        }
        Queued { group, any_member }
    }
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        let g = self.group;
        g.waiting.set(g.waiting.get().saturating_sub(1));
        if self.any_member {
            g.waiting_any.set(g.waiting_any.get().saturating_sub(1));
        }
    }
}

/// Counts a request as outstanding on its member (and on its app instance,
/// so a replaced instance is drained before it is stopped) until dropped.
#[derive(Debug)]
struct Outstanding(Rc<Member>, Option<Arc<AppInstance>>);

impl Outstanding {
    fn new(member: Rc<Member>, instance: Option<Arc<AppInstance>>) -> Outstanding {
        member.outstanding.set(member.outstanding.get() + 1);
        if let Some(i) = &instance {
            i.inflight.fetch_add(1, Ordering::AcqRel);
            i.served.fetch_add(1, Ordering::Relaxed);
        }
        Outstanding(member, instance)
    }

    fn instance_id(&self) -> u64 {
        self.1.as_ref().map_or(0, |i| i.id)
    }

    fn instance(&self) -> Option<&AppInstance> {
        self.1.as_deref()
    }
}

impl Drop for Outstanding {
    fn drop(&mut self) {
        self.0
            .outstanding
            .set(self.0.outstanding.get().saturating_sub(1));
        if let Some(i) = &self.1 {
            i.inflight.fetch_sub(1, Ordering::AcqRel);
        }
        // The first queued request (if any) may go now.
        self.0.freed.notify_one();
    }
}

fn header_timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "no response head in time")
}

/// Writes every byte of `parts` with as few (vectored) writes as the
/// socket takes.
async fn write_all_vectored(conn: &mut Stream, mut parts: &mut [IoSlice<'_>]) -> io::Result<()> {
    IoSlice::advance_slices(&mut parts, 0);
    while !parts.is_empty() {
        let n = conn.write_vectored(parts).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        IoSlice::advance_slices(&mut parts, n);
    }
    Ok(())
}

async fn timed<T>(
    limit: Duration,
    fut: impl std::future::Future<Output = io::Result<T>>,
) -> io::Result<T> {
    match tokio::time::timeout(limit, fut).await {
        Ok(r) => r,
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "upstream I/O timed out",
        )),
    }
}

/// Reads a body of unknown length until it ends (`true`) or passes `limit`
/// bytes (`false`, with what was read).
async fn read_up_to<B: ClientBody>(body: &mut B, limit: u64) -> io::Result<(Bytes, bool)> {
    let mut out = BytesMut::new();
    while (out.len() as u64) <= limit {
        match body.next_chunk().await? {
            Some(chunk) => out.extend_from_slice(&chunk),
            None => return Ok((out.freeze(), true)),
        }
    }
    Ok((out.freeze(), false))
}

async fn read_all<B: ClientBody>(body: &mut B, len: u64) -> io::Result<Bytes> {
    let mut out = BytesMut::with_capacity(len as usize);
    while let Some(chunk) = body.next_chunk().await? {
        out.extend_from_slice(&chunk);
    }
    Ok(out.freeze())
}

fn client_error(e: &io::Error) -> Response {
    let status = match e.kind() {
        io::ErrorKind::TimedOut => Status::REQUEST_TIMEOUT,
        io::ErrorKind::InvalidInput => Status::CONTENT_TOO_LARGE,
        _ => Status::BAD_REQUEST,
    };
    let mut r = Response::error(status);
    r.close = true;
    r
}

fn upstream_error(e: &io::Error) -> Response {
    match e.kind() {
        io::ErrorKind::TimedOut => Response::error(Status::GATEWAY_TIMEOUT),
        _ => Response::error(Status::BAD_GATEWAY),
    }
}

/// The upstream request head, built once per request so that every attempt
/// sends the same one; only the Host that [`HostPolicy::Upstream`] takes
/// from the member may differ between attempts.
struct RequestHead {
    bytes: Vec<u8>,
    /// Where the Host value sits in `bytes`.
    host: Range<usize>,
}

impl RequestHead {
    /// Builds the head; `listed` is what the request's Connection fields
    /// name, `upgrade` the protocol it asks to switch to.
    fn new(
        req: &ProxyRequest<'_>,
        length: BodyLength,
        settings: &ProxySettings,
        listed: &[&[u8]],
        upgrade: Option<&[u8]>,
    ) -> RequestHead {
        let (bytes, host) = build_request_head(req, length, settings, listed, upgrade);
        RequestHead { bytes, host }
    }

    /// The head to send to `member`.
    fn for_member(&mut self, settings: &ProxySettings, member: &UpstreamAddr) -> &[u8] {
        if settings.host == HostPolicy::Upstream {
            let host: &[u8] = match member {
                UpstreamAddr::Tcp { authority, .. } => authority.as_bytes(),
                UpstreamAddr::Unix(_) => b"localhost",
            };
            if self.bytes.get(self.host.clone()) != Some(host) {
                self.bytes.splice(self.host.clone(), host.iter().copied());
                self.host.end = self.host.start + host.len();
            }
        }
        &self.bytes
    }
}

/// Builds the upstream request head, and where its Host value sits (left
/// empty under [`HostPolicy::Upstream`], which [`RequestHead::for_member`]
/// fills in).
fn build_request_head(
    req: &ProxyRequest<'_>,
    length: BodyLength,
    settings: &ProxySettings,
    listed: &[&[u8]],
    upgrade: Option<&[u8]>,
) -> (Vec<u8>, Range<usize>) {
    let mut h = Vec::with_capacity(512);
    h.extend_from_slice(req.method);
    h.push(b' ');
    h.extend_from_slice(req.target);
    h.extend_from_slice(b" HTTP/1.1\r\n");
    let client_host = req.host.unwrap_or_default();
    h.extend_from_slice(b"Host: ");
    let host_start = h.len();
    match &settings.host {
        HostPolicy::Pass => h.extend_from_slice(client_host),
        HostPolicy::Upstream => {}
        HostPolicy::Fixed(name) => h.extend_from_slice(name.as_bytes()),
    }
    let host_range = host_start..h.len();
    h.extend_from_slice(b"\r\n");
    // Forwarding fields from a trusted proxy are extended; from anyone else
    // they are replaced, so a client cannot spoof its address.
    let trusted = !settings.trusted.is_empty()
        && req
            .client_ip
            .parse()
            .is_ok_and(|ip| settings.trusted.iter().any(|n| n.contains(ip)));
    let incoming = |name: &[u8]| -> Option<&[u8]> {
        trusted
            .then(|| {
                req.headers
                    .iter()
                    .find(|(n, _)| n.eq_ignore_ascii_case(name))
                    .map(|(_, v)| *v)
            })
            .flatten()
    };
    let mut request_id = None;
    for &(name, value) in &req.headers {
        if is_hop_by_hop(name)
            || name.eq_ignore_ascii_case(b"host")
            || listed.iter().any(|l| l.eq_ignore_ascii_case(name))
            || name.eq_ignore_ascii_case(b"x-forwarded-for")
            || name.eq_ignore_ascii_case(b"x-forwarded-proto")
            || name.eq_ignore_ascii_case(b"x-forwarded-host")
            || name.eq_ignore_ascii_case(b"forwarded")
        {
            continue;
        }
        if name.eq_ignore_ascii_case(b"x-request-id") {
            if !value.is_empty() && value.len() <= 128 && value.iter().all(|b| b.is_ascii_graphic())
            {
                request_id = Some(value);
            }
            continue;
        }
        h.extend_from_slice(name);
        h.extend_from_slice(b": ");
        h.extend_from_slice(value);
        h.extend_from_slice(b"\r\n");
    }
    let ip = req.client_ip;
    h.extend_from_slice(b"X-Forwarded-For: ");
    if let Some(chain) = incoming(b"x-forwarded-for") {
        h.extend_from_slice(chain);
        h.extend_from_slice(b", ");
    }
    h.extend_from_slice(ip.as_bytes());
    h.extend_from_slice(b"\r\nX-Forwarded-Proto: ");
    h.extend_from_slice(incoming(b"x-forwarded-proto").unwrap_or(b"http"));
    h.extend_from_slice(b"\r\n");
    let host = incoming(b"x-forwarded-host").unwrap_or(client_host);
    if !host.is_empty() {
        h.extend_from_slice(b"X-Forwarded-Host: ");
        h.extend_from_slice(host);
        h.extend_from_slice(b"\r\n");
    }
    h.extend_from_slice(b"Forwarded: ");
    if let Some(chain) = incoming(b"forwarded") {
        h.extend_from_slice(chain);
        h.extend_from_slice(b", ");
    }
    h.extend_from_slice(b"for=");
    if ip.contains(':') {
        // RFC 7239 §6: an IPv6 node is quoted and bracketed.
        h.extend_from_slice(b"\"[");
        h.extend_from_slice(ip.as_bytes());
        h.extend_from_slice(b"]\"");
    } else {
        h.extend_from_slice(ip.as_bytes());
    }
    h.extend_from_slice(b";proto=http");
    if !client_host.is_empty()
        && client_host
            .iter()
            .all(|b| b.is_ascii_graphic() && *b != b'"')
    {
        h.extend_from_slice(b";host=\"");
        h.extend_from_slice(client_host);
        h.push(b'"');
    }
    if settings.via {
        h.extend_from_slice(b"\r\nVia: 1.1 hayate");
    }
    h.extend_from_slice(b"\r\nX-Request-Id: ");
    match request_id {
        Some(id) => h.extend_from_slice(id),
        None => h.extend_from_slice(&new_request_id()),
    }
    h.extend_from_slice(b"\r\n");
    if let Some(protocol) = upgrade {
        h.extend_from_slice(b"Connection: upgrade\r\nUpgrade: ");
        h.extend_from_slice(protocol);
        h.extend_from_slice(b"\r\n");
    }
    match length {
        BodyLength::None => {}
        BodyLength::Known(n) => {
            h.extend_from_slice(b"Content-Length: ");
            h.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
            h.extend_from_slice(b"\r\n");
        }
        BodyLength::Chunked => h.extend_from_slice(b"Transfer-Encoding: chunked\r\n"),
    }
    h.extend_from_slice(b"\r\n");
    (h, host_range)
}

thread_local! {
    static REQUEST_IDS: Cell<u64> = Cell::new({
        use std::hash::{BuildHasher, Hasher};
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u64(std::process::id().into());
        hasher.finish()
    });
}

/// A request id unique within the process (64 random-seeded bits), as 16
/// lower-case hex digits.
fn new_request_id() -> [u8; 16] {
    let n = REQUEST_IDS.with(|c| {
        let v = c.get().wrapping_add(0x9e37_79b9_7f4a_7c15);
        c.set(v);
        v
    });
    let mut out = [0u8; 16];
    for (i, d) in out.iter_mut().enumerate() {
        *d = b"0123456789abcdef"[((n >> (60 - 4 * i)) & 0xf) as usize];
    }
    out
}

/// Parses one response head from `buf`: `Ok(None)` when incomplete,
/// `Ok(Some((None, len)))` for an interim 1xx to skip.
#[allow(clippy::type_complexity)]
fn parse_response(
    buf: &[u8],
    is_head: bool,
    upgrade: bool,
    settings: &ProxySettings,
) -> io::Result<Option<(Option<Head>, usize)>> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_RESPONSE_HEADERS];
    let mut resp = httparse::Response::new(&mut fields);
    let bad = |what: &str| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("bad response from upstream: {what}"),
        )
    };
    let len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(bad(&e.to_string())),
    };
    let code = resp.code.unwrap_or(0);
    let status = Status::any(code).ok_or_else(|| bad("status code"))?;
    if code == 101 {
        if !upgrade {
            return Err(bad("101 to a request that asked for no upgrade"));
        }
        let protocol = resp
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case("upgrade"))
            .map(|h| h.value);
        let mut headers = b"Connection: upgrade\r\nUpgrade: ".to_vec();
        headers.extend_from_slice(protocol.unwrap_or(b"websocket"));
        headers.extend_from_slice(b"\r\n");
        copy_end_to_end(&mut headers, resp.headers);
        let head = Head {
            status,
            headers,
            framing: Framing::Tunnel,
            keep: None,
            is_head: false,
            head_len: None,
        };
        return Ok(Some((Some(head), len)));
    }
    if (100..200).contains(&code) {
        return Ok(Some((None, len)));
    }
    let mut headers = Vec::with_capacity(len);
    let mut content_length: Option<u64> = None;
    let mut chunked = false;
    let mut other_coding = false;
    let mut close = resp.version != Some(1);
    let mut keep = settings.idle_timeout;
    for h in resp.headers.iter() {
        let name = h.name.as_bytes();
        if name.eq_ignore_ascii_case(b"content-length") {
            let v = parse_length(trim(h.value));
            match (v, content_length) {
                (Some(v), None) => content_length = Some(v),
                (Some(v), Some(old)) if v == old => {}
                _ => return Err(bad("Content-Length")),
            }
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            let last = split_list(h.value).last().unwrap_or_default();
            chunked = last.eq_ignore_ascii_case(b"chunked");
            other_coding = !chunked;
        } else if name.eq_ignore_ascii_case(b"connection") {
            close |= split_list(h.value).any(|t| t.eq_ignore_ascii_case(b"close"));
        } else if name.eq_ignore_ascii_case(b"keep-alive") {
            if let Some(t) = keep_alive_timeout(h.value) {
                // Leave well before the upstream closes its end.
                keep = keep.min(t.saturating_sub(Duration::from_secs(1)).max(t / 2));
            }
        }
    }
    copy_end_to_end(&mut headers, resp.headers);
    let framing = if is_head || code == 204 || code == 304 {
        Framing::Empty
    } else if chunked {
        Framing::Chunked
    } else if other_coding {
        Framing::UntilClose
    } else if let Some(n) = content_length {
        if n == 0 {
            Framing::Empty
        } else {
            Framing::Length(n)
        }
    } else {
        Framing::UntilClose
    };
    if settings.via {
        headers.extend_from_slice(b"Via: 1.1 hayate\r\n");
    }
    let keep = (!close && framing != Framing::UntilClose).then_some(keep);
    let head_len = if is_head { content_length } else { None };
    Ok(Some((
        Some(Head {
            status,
            headers,
            framing,
            keep,
            is_head,
            head_len,
        }),
        len,
    )))
}

/// Copies the end-to-end fields of an upstream response head onto `out`:
/// neither hop-by-hop nor named by its Connection fields, and not Date or
/// Server (hayate sets its own).
fn copy_end_to_end(out: &mut Vec<u8>, fields: &[httparse::Header<'_>]) {
    let listed = connection_listed(fields.iter().map(|h| (h.name.as_bytes(), h.value)));
    for h in fields {
        let name = h.name.as_bytes();
        if is_hop_by_hop(name)
            || name.eq_ignore_ascii_case(b"date")
            || name.eq_ignore_ascii_case(b"server")
            || listed.iter().any(|l| l.eq_ignore_ascii_case(name))
        {
            continue;
        }
        out.extend_from_slice(name);
        out.extend_from_slice(b": ");
        out.extend_from_slice(h.value);
        out.extend_from_slice(b"\r\n");
    }
}

/// `timeout=N` from a Keep-Alive field.
fn keep_alive_timeout(v: &[u8]) -> Option<Duration> {
    split_list(v).find_map(|p| {
        let rest = p.strip_prefix(b"timeout=")?;
        parse_length(trim(rest)).map(Duration::from_secs)
    })
}

/// The upstream's response body, streamed to the client; the connection
/// returns to the pool once the body has been read whole.
struct UpstreamBody {
    conn: Option<Stream>,
    buf: BytesMut,
    framing: Framing,
    remaining: u64,
    decoder: Chunked,
    keep: Option<Duration>,
    max_idle: usize,
    io_timeout: Duration,
    /// The stall timer: allocated at the first read that waits, then reset.
    timer: Option<Pin<Box<Sleep>>>,
    /// Whether `timer` runs for the current wait.
    timer_armed: bool,
    guard: Option<Outstanding>,
}

impl UpstreamBody {
    /// The body is complete: pool the connection if it may be reused.
    fn finish(&mut self) {
        if let (Some(conn), Some(keep), Some(guard)) =
            (self.conn.take(), self.keep, self.guard.as_ref())
        {
            if self.buf.is_empty() {
                guard
                    .0
                    .checkin(conn, keep, self.max_idle, guard.instance_id());
            }
        }
        self.guard = None;
    }

    /// Reads more from the upstream; `Ok(0)` at EOF.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let Some(conn) = self.conn.as_mut() else {
            return Poll::Ready(Ok(0));
        };
        if self.buf.capacity() - self.buf.len() < 4096 {
            self.buf.reserve(16 * 1024);
        }
        match tokio_util::io::poll_read_buf(Pin::new(conn), cx, &mut self.buf) {
            Poll::Ready(r) => {
                self.timer_armed = false;
                Poll::Ready(r)
            }
            Poll::Pending => {
                let limit = self.io_timeout;
                let timer = match &mut self.timer {
                    Some(t) if self.timer_armed => t,
                    Some(t) => {
                        t.as_mut().reset(tokio::time::Instant::now() + limit);
                        t
                    }
                    None => self.timer.insert(Box::pin(tokio::time::sleep(limit))),
                };
                self.timer_armed = true;
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "upstream body stalled",
                    ))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

impl BodySource for UpstreamBody {
    fn trailers(&mut self) -> Option<Bytes> {
        passable_trailers(&self.decoder.take_trailers())
    }

    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Option<Bytes>>> {
        let r = self.poll_body(cx);
        r.map_err(|e| match &self.guard {
            // Name the upstream: the connection writer logs this error.
            Some(g) => io::Error::new(e.kind(), format!("upstream {}: {e}", g.0.label)),
            None => e,
        })
    }
}

impl UpstreamBody {
    fn poll_body(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Option<Bytes>>> {
        loop {
            match self.framing {
                Framing::Empty | Framing::Tunnel => return Poll::Ready(Ok(None)),
                Framing::Length(_) => {
                    if self.remaining == 0 {
                        self.finish();
                        return Poll::Ready(Ok(None));
                    }
                    if !self.buf.is_empty() {
                        let take = (self.buf.len() as u64).min(self.remaining) as usize;
                        self.remaining -= take as u64;
                        return Poll::Ready(Ok(Some(self.buf.split_to(take).freeze())));
                    }
                }
                Framing::Chunked => {
                    if !self.buf.is_empty() {
                        let mut data = BytesMut::new();
                        let consumed = self
                            .decoder
                            .decode(&self.buf, |d| data.extend_from_slice(d))
                            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                        self.buf.advance(consumed);
                        if self.decoder.is_done() {
                            if !data.is_empty() {
                                // Deliver the data; the next poll ends the body.
                                self.framing = Framing::Length(0);
                                self.remaining = 0;
                                return Poll::Ready(Ok(Some(data.freeze())));
                            }
                            self.finish();
                            return Poll::Ready(Ok(None));
                        }
                        if !data.is_empty() {
                            return Poll::Ready(Ok(Some(data.freeze())));
                        }
                    }
                }
                Framing::UntilClose => {
                    if !self.buf.is_empty() {
                        return Poll::Ready(Ok(Some(self.buf.split().freeze())));
                    }
                }
            }
            match self.poll_fill(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(0)) => {
                    self.conn = None;
                    return Poll::Ready(match self.framing {
                        Framing::UntilClose => Ok(None),
                        _ => Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "upstream closed mid-body",
                        )),
                    });
                }
                Poll::Ready(Ok(_)) => {}
            }
        }
    }
}

type Chunked = hayate_core::chunked::ChunkedDecoder;

/// An upgraded upstream connection (WebSocket): relayed byte for byte with
/// the client until either side closes. Reloads never cut it: it belongs to
/// its connection task, not to a route table generation.
struct UpstreamTunnel {
    conn: Stream,
    /// Upstream bytes read past the 101 head.
    rest: Bytes,
    _guard: Outstanding,
}

impl Tunnel for UpstreamTunnel {
    fn run<'a>(
        self: Box<Self>,
        client: &'a mut dyn Duplex,
        early: Bytes,
    ) -> Pin<Box<dyn Future<Output = io::Result<()>> + 'a>> {
        Box::pin(async move {
            let UpstreamTunnel {
                mut conn,
                rest,
                _guard,
            } = *self;
            if !rest.is_empty() {
                client.write_all(&rest).await?;
            }
            if !early.is_empty() {
                conn.write_all(&early).await?;
            }
            tokio::io::copy_bidirectional(client, &mut conn)
                .await
                .map(|_| ())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The head sent to `member`.
    fn build_request_head(
        req: &ProxyRequest<'_>,
        length: BodyLength,
        settings: &ProxySettings,
        member: &UpstreamAddr,
    ) -> Vec<u8> {
        let listed = connection_listed(req.headers.iter().copied());
        let upgrade = requested_upgrade(&req.headers, &listed);
        RequestHead::new(req, length, settings, &listed, upgrade)
            .for_member(settings, member)
            .to_vec()
    }

    fn req<'a>(headers: Vec<(&'a [u8], &'a [u8])>) -> ProxyRequest<'a> {
        ProxyRequest {
            method: b"POST",
            target: b"/a?b",
            headers: headers.into(),
            client_ip: "10.0.0.1",
            host: Some(b"example.com"),
        }
    }

    #[test]
    fn request_head_drops_hop_by_hop_and_sets_forwarding() {
        let r = req(vec![
            (b"Host", b"example.com"),
            (b"Connection", b"keep-alive, X-Secret"),
            (b"X-Secret", b"1"),
            (b"Keep-Alive", b"timeout=5"),
            (b"TE", b"trailers"),
            (b"X-Forwarded-For", b"6.6.6.6"),
            (b"Forwarded", b"for=6.6.6.6"),
            (b"Accept", b"*/*"),
            (b"X-Request-Id", b"abc-123"),
        ]);
        let s = ProxySettings::default();
        let member = UpstreamAddr::parse("127.0.0.1:9").expect("addr");
        let head = String::from_utf8(build_request_head(&r, BodyLength::Known(3), &s, &member))
            .expect("ascii");
        assert!(
            head.starts_with("POST /a?b HTTP/1.1\r\nHost: example.com\r\n"),
            "{head}"
        );
        for gone in ["X-Secret", "Keep-Alive", "TE:", "6.6.6.6", "Connection"] {
            assert!(
                !head.contains(gone),
                "{gone} must not be forwarded:\n{head}"
            );
        }
        for kept in [
            "Accept: */*\r\n",
            "X-Forwarded-For: 10.0.0.1\r\n",
            "X-Forwarded-Proto: http\r\n",
            "X-Forwarded-Host: example.com\r\n",
            "Forwarded: for=10.0.0.1;proto=http;host=\"example.com\"\r\n",
            "X-Request-Id: abc-123\r\n",
            "Content-Length: 3\r\n\r\n",
        ] {
            assert!(head.contains(kept), "missing {kept:?}:\n{head}");
        }
        let chunked = String::from_utf8(build_request_head(
            &req(vec![]),
            BodyLength::Chunked,
            &s,
            &member,
        ))
        .expect("ascii");
        assert!(
            chunked.ends_with("Transfer-Encoding: chunked\r\n\r\n")
                && chunked.contains("X-Request-Id: ")
        );
    }

    #[test]
    fn trusted_proxies_host_policy_and_via() {
        let member = UpstreamAddr::parse("127.0.0.1:9").expect("addr");
        let headers: Vec<(&[u8], &[u8])> = vec![
            (b"X-Forwarded-For", b"1.1.1.1"),
            (b"X-Forwarded-Proto", b"https"),
            (b"Forwarded", b"for=1.1.1.1;proto=https"),
        ];
        let trusting = ProxySettings {
            trusted: vec![hayate_core::net::IpNet {
                addr: "10.0.0.0".parse().expect("ip"),
                bits: 8,
            }],
            host: HostPolicy::Upstream,
            via: true,
            ..Default::default()
        };
        let head = String::from_utf8(build_request_head(
            &req(headers.clone()),
            BodyLength::None,
            &trusting,
            &member,
        ))
        .expect("ascii");
        for want in [
            "Host: 127.0.0.1:9\r\n",
            "X-Forwarded-For: 1.1.1.1, 10.0.0.1\r\n",
            "X-Forwarded-Proto: https\r\n",
            "Forwarded: for=1.1.1.1;proto=https, for=10.0.0.1;proto=http",
            "Via: 1.1 hayate\r\n",
        ] {
            assert!(head.contains(want), "missing {want:?}:\n{head}");
        }
        let strict = ProxySettings {
            host: HostPolicy::Fixed("app.internal".into()),
            ..Default::default()
        };
        let head = String::from_utf8(build_request_head(
            &req(headers),
            BodyLength::None,
            &strict,
            &member,
        ))
        .expect("ascii");
        assert!(
            head.contains("Host: app.internal\r\n")
                && head.contains("X-Forwarded-For: 10.0.0.1\r\n"),
            "{head}"
        );
        assert!(
            !head.contains("1.1.1.1") && !head.contains("https") && !head.contains("Via"),
            "{head}"
        );
    }

    #[test]
    fn every_attempt_sends_the_same_head_but_for_the_upstream_host() {
        let r = req(vec![(b"Accept", b"*/*")]);
        let s = ProxySettings {
            host: HostPolicy::Upstream,
            ..Default::default()
        };
        let listed = connection_listed(r.headers.iter().copied());
        let mut head = RequestHead::new(&r, BodyLength::None, &s, &listed, None);
        let a = UpstreamAddr::parse("127.0.0.1:9").expect("addr");
        let b = UpstreamAddr::parse("unix:/run/app.sock").expect("addr");
        let first = String::from_utf8(head.for_member(&s, &a).to_vec()).expect("ascii");
        let second = String::from_utf8(head.for_member(&s, &b).to_vec()).expect("ascii");
        let third = String::from_utf8(head.for_member(&s, &a).to_vec()).expect("ascii");
        assert!(first.contains("\r\nHost: 127.0.0.1:9\r\n"), "{first}");
        assert!(second.contains("\r\nHost: localhost\r\n"), "{second}");
        assert_eq!(first.replace("127.0.0.1:9", "localhost"), second);
        assert_eq!(first, third);
    }

    #[test]
    fn request_ids_are_16_hex_digits_and_differ() {
        let a = new_request_id();
        let b = new_request_id();
        assert_ne!(a, b);
        for id in [a, b] {
            assert!(id
                .iter()
                .all(|d| d.is_ascii_hexdigit() && !d.is_ascii_uppercase()));
        }
    }

    #[test]
    fn keep_alive_timeouts() {
        assert_eq!(
            keep_alive_timeout(b"max=100, timeout=5"),
            Some(Duration::from_secs(5))
        );
        assert_eq!(
            keep_alive_timeout(b" timeout=7 ,"),
            Some(Duration::from_secs(7))
        );
        assert_eq!(keep_alive_timeout(b"timeout=+5"), None);
        assert_eq!(keep_alive_timeout(b"max=5"), None);
    }

    #[test]
    fn response_heads() {
        let s = ProxySettings::default();
        let parse = |raw: &str, head: bool| parse_response(raw.as_bytes(), head, false, &s);
        let Ok(Some((Some(h), _))) = parse(
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: X-Hop\r\nX-Hop: 1\r\nKeep-Alive: timeout=5\r\nDate: x\r\nServer: node\r\nX-App: y\r\n\r\n",
            false,
        ) else {
            panic!("parse")
        };
        assert_eq!(h.framing, Framing::Length(5));
        assert_eq!(h.keep, Some(Duration::from_secs(4)));
        assert_eq!(String::from_utf8(h.headers).expect("ascii"), "X-App: y\r\n");
        let Ok(Some((Some(h), _))) = parse(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            false,
        ) else {
            panic!("parse")
        };
        assert_eq!(h.framing, Framing::Chunked);
        let Ok(Some((Some(h), _))) = parse("HTTP/1.0 200 OK\r\n\r\n", false) else {
            panic!("parse")
        };
        assert_eq!((h.framing, h.keep), (Framing::UntilClose, None));
        let Ok(Some((Some(h), _))) = parse("HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", true)
        else {
            panic!("parse")
        };
        assert_eq!((h.framing, h.head_len), (Framing::Empty, Some(9)));
        assert!(matches!(
            parse("HTTP/1.1 100 Continue\r\n\r\n", false),
            Ok(Some((None, 25)))
        ));
        assert!(parse(
            "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            false
        )
        .is_err());
        assert!(parse("HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", false).is_err());
        assert!(
            parse("HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\nhello", false).is_err(),
            "a signed length is refused"
        );
        assert!(matches!(parse("HTTP/1.1 200 OK\r\n", false), Ok(None)));
        let Ok(Some((Some(h), _))) =
            parse("HTTP/1.1 299 Whatever\r\nContent-Length: 0\r\n\r\n", false)
        else {
            panic!("parse")
        };
        assert_eq!((h.status.code(), h.framing), (299, Framing::Empty));
    }

    #[test]
    fn a_101_keeps_only_end_to_end_fields() {
        let s = ProxySettings::default();
        let raw = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade, X-Hop\r\nX-Hop: 1\r\nSec-WebSocket-Accept: abc\r\nDate: x\r\nServer: node\r\n\r\n";
        let Ok(Some((Some(h), _))) = parse_response(raw.as_bytes(), false, true, &s) else {
            panic!("parse")
        };
        assert_eq!(h.framing, Framing::Tunnel);
        assert_eq!(
            String::from_utf8(h.headers).expect("ascii"),
            "Connection: upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Accept: abc\r\n"
        );
        assert!(parse_response(raw.as_bytes(), false, false, &s).is_err());
    }
}
