//! Forwarding one request to an upstream group: the body read first when
//! it is small enough to replay, a member picked (or the queue waited in),
//! a pooled or fresh connection, the exchange in the upstream's protocol,
//! and after a failure what the retry policy (`retry.rs`) allows.

use std::io;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use hayate_core::client_body::{BodyLength, ClientBody};
use hayate_core::error::{Error, ErrorKind};
use hayate_core::h1::chunked::passable_trailers;
use hayate_core::{Response, UpstreamTimes};

use crate::fastcgi::FastCgi;
use crate::group::{Outstanding, Protocol, UpstreamGroup};
use crate::h1_client::Http1;
use crate::protocol::{Outgoing, UpstreamProtocol};
use crate::queue::Busy;
use crate::retry::{self, Attempt, Failure, Next};
use crate::ProxyRequest;

/// How recently a pooled connection must have answered to carry a request
/// that must not be applied twice. Upstreams close idle connections after
/// seconds (Node 5 s, nginx 75 s, and hayate leaves a second before their
/// `Keep-Alive: timeout`), so one that answered within the last second is
/// not being closed as it is reused; an older one is left for repeatable
/// requests and a fresh connection is opened instead.
const UNREPEATABLE_REUSE_WITHIN: Duration = Duration::from_secs(1);

/// The first and the longest pause of a request that found no descriptor
/// to connect with, between its tries while the queue holds it (doubling
/// in between): the back-off of a connect to a full Unix listen queue
/// (`upconn.rs`). A try costs one socket(2) that fails at once, and a
/// request that a pooled connection frees is woken without waiting for it.
const FIRST_SHORTAGE_PAUSE: Duration = Duration::from_millis(1);
const MAX_SHORTAGE_PAUSE: Duration = Duration::from_millis(50);

impl UpstreamGroup {
    /// Forwards a request and returns the response to write (errors
    /// included: 502, 503, 504, or the client's 400/408/413).
    pub async fn forward<B: ClientBody>(&self, req: &ProxyRequest<'_>, body: &mut B) -> Response {
        if self.settings.grpc_web && self.protocol == Protocol::Http2 {
            if let Some(call) = crate::grpc_web::WebCall::of(req) {
                return self.forward_grpc_web(&call, req, body).await;
            }
        }
        let response = match self.speaking().await {
            Protocol::Http1 => self.forward_as::<Http1, B>(req, body).await,
            Protocol::FastCgi => self.forward_as::<FastCgi, B>(req, body).await,
            Protocol::Http2 => self.forward_h2(req, body).await,
        };
        // A gRPC client reads hayate's own failures only in gRPC's terms.
        match crate::grpc::is_grpc(req) {
            true => crate::grpc::rescue(response),
            false => response,
        }
    }

    /// A browser's gRPC-Web call, translated to gRPC and its answer back
    /// (`grpc_web.rs`); the group speaks HTTP/2 (checked at load).
    async fn forward_grpc_web<B: ClientBody>(
        &self,
        call: &crate::grpc_web::WebCall,
        req: &ProxyRequest<'_>,
        body: &mut B,
    ) -> Response {
        let grpc_type = call.grpc_type();
        let grpc_req = call.grpc_request(req, &grpc_type);
        let mut grpc_body = call.request_body(body);
        let answer = self.forward_h2(&grpc_req, &mut grpc_body).await;
        call.response(answer)
    }

    /// [`UpstreamGroup::forward`] in the upstream's protocol `P`.
    async fn forward_as<P: UpstreamProtocol, B: ClientBody>(
        &self,
        req: &ProxyRequest<'_>,
        body: &mut B,
    ) -> Response {
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
                    Err(e) => return Error::client_body(e).into_response(),
                }
            }
            BodyLength::Known(_) => (None, Bytes::new(), length, None),
            BodyLength::Chunked => match read_up_to(body, chunked_limit::<P>(&self.settings)).await
            {
                Ok((b, true)) => match body.trailers().and_then(|t| passable_trailers(&t)) {
                    Some(t) => (Some(b), Bytes::new(), length, Some(t)),
                    None => {
                        let n = b.len() as u64;
                        (Some(b), Bytes::new(), BodyLength::Known(n), None)
                    }
                },
                Ok((b, false)) => (None, b, length, None),
                Err(e) => return Error::client_body(e).into_response(),
            },
        };
        let is_head = req.method.eq_ignore_ascii_case(b"HEAD");
        // Once per request: a replay or a retry on another member sends the
        // same head (the same X-Request-Id).
        let mut request = match P::prepare(req, length, buffered.as_ref(), &self.settings) {
            Ok(r) => r,
            Err(e) => return e.into_response(),
        };
        let repeatable = req.repeatable();
        let mut tried: Vec<usize> = Vec::new();
        let mut fresh_only = false;
        // Set at the request's first wait in the queue: all its waits end by
        // then, however often it is woken.
        let mut queue_deadline: Option<Instant> = None;
        // The last connect that found hayate short of descriptors (or
        // buffers, memory, ports), and whether the request waits before it
        // tries again; how long such a wait lasts at most.
        let mut shortage: Option<io::Error> = None;
        let mut wait_first = false;
        let mut pause = FIRST_SHORTAGE_PAUSE;
        loop {
            let mut now = hayate_core::loop_time::instant();
            // FIFO: a new request does not pass those already waiting.
            let picked = if wait_first || (queue_deadline.is_none() && self.waiting_any.get() > 0) {
                Err(Busy::Full)
            } else {
                self.pick(now, &tried, key)
            };
            let i = match picked {
                Ok(i) => i,
                Err(Busy::Exhausted) => {
                    let e = io::Error::other("every member failed this request");
                    return Error::new(ErrorKind::UpstreamFailed, e).into_response();
                }
                Err(Busy::Full) => {
                    wait_first = false;
                    let newcomer = queue_deadline.is_none();
                    let deadline = *queue_deadline.get_or_insert(now + self.settings.queue_timeout);
                    let retry = self.short.get().then(|| {
                        let p = pause;
                        pause = (pause * 2).min(MAX_SHORTAGE_PAUSE);
                        p
                    });
                    match self
                        .wait_in_queue(deadline, newcomer, tried.is_empty(), retry)
                        .await
                    {
                        Ok(()) => continue,
                        // 503 with Retry-After either way; told apart in
                        // the log, where a shortage is counted, not blamed.
                        Err(e) => match shortage.take() {
                            Some(cause) => {
                                return Error::new(ErrorKind::LocalShortage, cause)
                                    .context(format!(
                                        "upstream connect: no descriptor freed within the \
                                         queue's bounds ({:?}, {} waiting)",
                                        self.settings.queue_timeout,
                                        self.waiting.get()
                                    ))
                                    .into_response();
                            }
                            None => return e.into_response(),
                        },
                    }
                }
            };
            // The answering attempt's times count from here, after the queue.
            let attempt_started = now;
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
            // A request that must not be applied twice could not be replayed
            // if a reused connection died under it: it takes only one that
            // answered just now, which its upstream is not closing.
            let used_within = (!repeatable).then_some(UNREPEATABLE_REUSE_WITHIN);
            let reused_conn = if fresh_only {
                None
            } else {
                member.checkout(now, guard.instance_id(), used_within)
            };
            let reused = reused_conn.is_some();
            let conn = match reused_conn {
                Some(c) => c,
                None => {
                    if self.protocol.bounds_connections() {
                        // Each kept FastCGI connection holds a php-fpm
                        // child: the pool gives one up before a new one
                        // would pass the member's limit.
                        member.make_room(self.settings.max_conns);
                    }
                    let target = member.target(guard.instance());
                    let preamble = self.settings.proxy_protocol.then(|| req.proxy_header());
                    // A full listen queue is waited on as long as the
                    // request may wait in hayate's own queue.
                    let backlog_until = queue_deadline.unwrap_or(now + self.settings.queue_timeout);
                    match crate::upconn::connect(
                        &target,
                        self.settings.connect_timeout,
                        Some(backlog_until),
                        self.settings.tls.as_ref(),
                        preamble.as_deref(),
                    )
                    .await
                    .map_err(Failure::connecting)
                    {
                        Ok(c) => {
                            self.short.set(false);
                            // Connecting waited: the attempt starts now.
                            now = hayate_core::loop_time::instant();
                            c
                        }
                        Err(Failure::Local(e)) => {
                            // hayate's own shortage, not the member's: no
                            // failure counted (issue 43: 3 of them ejected
                            // a healthy member), the request waits in the
                            // queue for a pooled connection or a descriptor,
                            // and one idle connection gives its descriptor.
                            guard.withdraw();
                            self.short.set(true);
                            self.release_oldest_idle();
                            hayate_core::error::note_shortage(|| {
                                format!("upstream {}: connect: {e}", member.label)
                            });
                            shortage = Some(e);
                            wait_first = true;
                            continue;
                        }
                        Err(Failure::Full(e)) => {
                            guard.withdraw();
                            return Error::new(ErrorKind::UpstreamBusy, e)
                                .context(format!(
                                    "upstream {}: waited {:?} for it to accept",
                                    member.label, self.settings.queue_timeout
                                ))
                                .into_response();
                        }
                        Err(failure) => {
                            match self.connect_failed(i, &mut tried, failure.into_cause()) {
                                Some(answer) => return answer,
                                None => continue,
                            }
                        }
                    }
                }
            };
            request.for_member(&self.settings, &member.addr);
            let out = Outgoing {
                head: request.head(),
                buffered: buffered.as_ref(),
                prefix: &prefix,
                trailers: trailers.as_ref(),
                length,
                is_head,
                upgrade: request.upgrade(),
                started: now,
            };
            let failure = match request.exchange(conn, &out, body, &self.settings).await {
                Ok(answer) => {
                    member.succeeded();
                    let sticky_id = member.sticky_id;
                    // The loop's clock, read as the head arrived (no clock
                    // read of its own).
                    let head_took = hayate_core::loop_time::instant() - attempt_started;
                    self.count_response(i, head_took);
                    let mut response = request.response(answer, guard, &self.settings);
                    if self.settings.upstream_times {
                        let micros = |d: Duration| u32::try_from(d.as_micros()).unwrap_or(u32::MAX);
                        response.set_upstream_times(UpstreamTimes {
                            connect_us: micros(now - attempt_started),
                            head_us: micros(head_took),
                            made_request_id: request.made_request_id(),
                            attempt_started,
                            member: u16::try_from(i).unwrap_or(u16::MAX),
                            queued_us: queue_deadline.map_or(0, |deadline| {
                                let queued = deadline - self.settings.queue_timeout;
                                micros(attempt_started.saturating_duration_since(queued))
                            }),
                        });
                    }
                    match &self.settings.balance {
                        crate::Balance::Sticky(name) => {
                            let sent = key.and_then(crate::sticky::parse_id);
                            crate::sticky::stick(&mut response, name, sticky_id, sent, req.scheme);
                        }
                        _ if self.members.len() > 1 => {
                            crate::sticky::warn_on_lost_session(req.target, response.status.code())
                        }
                        _ => {}
                    }
                    return response;
                }
                Err(Failure::Client(e)) => return Error::client_body(e).into_response(),
                Err(failure) => failure,
            };
            let attempt = Attempt {
                reused,
                body_buffered: buffered.is_some(),
                repeatable,
                other_member: tried.len() + 1 < self.members.len(),
            };
            match retry::after(&failure, attempt) {
                Next::Replay => {
                    // The pool race: the upstream closed an idle connection
                    // as we reused it. Replay once, on a fresh connection.
                    log::debug!(
                        "upstream {}: reused connection failed ({failure:?}); replaying",
                        member.label
                    );
                    fresh_only = true;
                }
                Next::OtherMember => {
                    // A fresh connection died before answering (the instance
                    // crashed): the request goes to another member.
                    log::warn!(
                        "upstream {}: {failure:?}; retrying on another member",
                        member.label
                    );
                    member.failed(&self.settings);
                    tried.push(i);
                    fresh_only = false;
                }
                Next::GiveUp => {
                    member.failed(&self.settings);
                    return Error::upstream(failure.into_cause())
                        .context(format!("upstream {}", member.label))
                        .into_response();
                }
                Next::Wait => {
                    // As for a connect above: nobody's failure.
                    self.short.set(true);
                    shortage = Some(failure.into_cause());
                    wait_first = true;
                }
            }
        }
    }
}

impl UpstreamGroup {
    /// After member `i` could not be connected to (nothing was sent, so
    /// another member may take the request): counts its failure, and
    /// returns the answer when no member is left to try (`None`: try
    /// another). The error line is for a request that fails, not a retry.
    pub(crate) fn connect_failed(
        &self,
        i: usize,
        tried: &mut Vec<usize>,
        e: io::Error,
    ) -> Option<Response> {
        let member = &self.members[i];
        member.failed(&self.settings);
        tried.push(i);
        if let Some(negotiated) = &self.negotiated {
            negotiated.forget();
        }
        if tried.len() < self.members.len() {
            log::warn!(
                "upstream {}: connect failed: {e}; trying another member",
                member.label
            );
            return None;
        }
        let e = Error::upstream(e).context(format!("upstream {}: connect failed", member.label));
        Some(e.into_response())
    }
}

/// How much of a chunked body is read before forwarding: what can be
/// replayed, or all of it (bounded by the client's `max_body_size`) for a
/// protocol that must announce its length (FastCGI; nginx spools such
/// bodies to disk, hayate holds them in memory).
fn chunked_limit<P: UpstreamProtocol>(settings: &crate::ProxySettings) -> u64 {
    if P::NEEDS_LENGTH {
        u64::MAX
    } else {
        settings.replay_buffer
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

pub(crate) async fn read_all<B: ClientBody>(body: &mut B, len: u64) -> io::Result<Bytes> {
    let mut out = BytesMut::with_capacity(len as usize);
    while let Some(chunk) = body.next_chunk().await? {
        out.extend_from_slice(&chunk);
    }
    Ok(out.freeze())
}
