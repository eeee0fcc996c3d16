//! The fetch behind a cache miss: the upstream asked (conditionally when a
//! stale copy has validators), a storable answer stored while it streams
//! to the client and to the requests waiting on the same fill, and the
//! fill's waiters woken at its end (`hayate_cache::fill`).

use super::*;

/// Fetches `req` for the cache: conditionally when a stale copy with
/// validators exists; stores a storable answer; wakes the waiters.
pub(super) async fn fetch<B: ClientBody>(
    rc: &RouteCache,
    group: &UpstreamGroup,
    req: &ProxyRequest<'_>,
    body: &mut B,
    key: &Key,
    stale: Option<(Arc<Stored>, bool)>,
    leader: Option<hayate_cache::fill::Leader>,
) -> Response {
    let shared = &rc.shared;
    let validators = stale
        .as_ref()
        .map(|(s, _)| serve::validators(s))
        .unwrap_or_default();
    let mut headers: RequestFields<'_> = req
        .headers
        .iter()
        .filter(|(n, _)| !CLIENT_VALIDATORS.iter().any(|v| n.eq_ignore_ascii_case(v)))
        .copied()
        .collect();
    headers.extend(validators.iter().map(|(n, v)| (*n, &v[..])));
    let upstream_req = ProxyRequest { headers, ..*req };
    let request_time = SystemTime::now();
    // What a purge or an invalidation since then is compared with.
    let requested_at = Instant::now();
    let resp = origin(rc, group, &upstream_req, body).await;
    let response_time = SystemTime::now();
    let received = Instant::now();
    let fwd = if stale.is_some() { "stale" } else { "uri-miss" };
    let mut status = CacheStatus {
        fwd: Some(fwd),
        fwd_status: Some(resp.status.code()),
        ..CacheStatus::new(CacheOutcome::Miss)
    };
    let head = serve::response_fields(&resp);
    let mut facts = ResponseFacts::from_fields(head.iter());
    forget_own_cookie(rc, &head, &mut facts);
    let directives = request_directives(req);
    let authorization = req.field(b"authorization").is_some();
    // The response's Vary, and the route's key fields as if it named them.
    let vary_key = |facts: &ResponseFacts| {
        let vary = facts.vary.as_deref().unwrap_or_default();
        if rc.key_headers.is_empty() {
            return VaryKey::new(vary, |n| fields(req, n));
        }
        let mut names = vary.to_vec();
        names.extend(rc.key_headers.iter().filter(|k| !vary.contains(k)).cloned());
        VaryKey::new(&names, |n| fields(req, n))
    };

    // The stale copy confirmed: refresh its headers and serve it.
    if let (Some((old, _)), 304) = (&stale, resp.status.code()) {
        let merged = serve::merged_304_head(old, &head, response_time);
        let mut merged_facts = ResponseFacts::from_fields(merged.iter());
        forget_own_cookie(rc, &merged, &mut merged_facts);
        // The refreshed response is as old as the 304 says (its Date, now
        // in `merged`, and its Age, which is never stored).
        merged_facts.age = facts.age;
        let lifetime = storable(
            old.status.code(),
            &merged_facts,
            &directives,
            authorization,
            &rc.policy,
            response_time,
        );
        let updated = serve::stored_from(
            old.status,
            &merged,
            old.body.clone(),
            Admission {
                facts: &merged_facts,
                lifetime: lifetime.unwrap_or_default(),
                request_time,
                response_time,
                received,
                vary: old.vary.clone(),
            },
        );
        Stats::bump(&shared.stats().revalidations);
        status.outcome = CacheOutcome::Revalidated;
        let age = updated.age(Instant::now());
        status.ttl = Some(updated.ttl(age));
        let updated = Arc::new(updated);
        if lifetime.is_ok() {
            let window = stale_window(&rc.policy, &updated);
            status.stored = shared.keep(key, &updated, requested_at, window);
            finish(leader, Outcome::Stored);
        } else {
            shared.store.remove(key);
        }
        return from_store(req, &updated, age, status);
    }

    // The origin failed: a stale copy may answer (stale-if-error).
    if matches!(resp.status.code(), 500 | 502 | 503 | 504) {
        if let Some((old, true)) = &stale {
            Stats::bump(&shared.stats().stale);
            let now = Instant::now();
            status.outcome = CacheOutcome::Stale;
            status.detail = Some("stale-if-error");
            status.ttl = Some(old.ttl(old.age(now)));
            return from_store(req, old, old.age(now), status);
        }
    }

    let lifetime = match storable(
        resp.status.code(),
        &facts,
        &directives,
        authorization,
        &rc.policy,
        response_time,
    ) {
        Ok(l) => l,
        Err(why) => {
            // A server error is transient: it neither marks the URL
            // uncacheable nor drops a stored response (still useful for a
            // later revalidation or stale-if-error).
            let transient = resp.status.code() >= 500;
            if why.applies_to_everyone() && !transient {
                shared
                    .store
                    .mark_pass(key, Instant::now() + shared.limits.hit_for_miss);
            }
            if stale.is_some() && !transient {
                shared.store.remove(key);
            }
            drop(leader);
            status.detail = Some(why.as_str());
            let mut resp = resp;
            without_own_control(&mut resp.fields);
            return with_status(resp, &status);
        }
    };
    let Response {
        status: code,
        body: resp_body,
        close,
        has_date,
        ..
    } = resp;
    let admission = |vary| Admission {
        facts: &facts,
        lifetime,
        request_time,
        response_time,
        received,
        vary,
    };
    // A streamed body that may fit (of known length that fits, or of
    // unknown length): stream it to this client and every waiter while it
    // arrives, store it at the end.
    let (leader, resp_body) = match (leader, resp_body) {
        (Some(leader), Body::Stream(s)) if s.len.is_none_or(|n| n <= shared.limits.max_object) => {
            let stored = serve::stored_from(code, &head, Bytes::new(), admission(vary_key(&facts)));
            let fetched = Fetched {
                head,
                close,
                requested_at,
            };
            return stream_fill(rc, req, key, stored, leader, s, fetched, status);
        }
        other => other,
    };
    let body = match read_body(resp_body, shared.limits.max_object).await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(partial)) => {
            // Too large to store: pass it on as it streams.
            shared
                .store
                .mark_pass(key, Instant::now() + shared.limits.hit_for_miss);
            drop(leader);
            status.detail = Some("too-large");
            let mut r = Response::new(code);
            r.fields = head;
            without_own_control(&mut r.fields);
            r.has_date = has_date;
            r.body = partial;
            r.close = close;
            return with_status(r, &status);
        }
        Err(e) => {
            let e = Error::upstream(e).context(format!(
                "cache fill of {}: upstream body failed",
                String::from_utf8_lossy(req.target)
            ));
            return with_status(e.into_response(), &status);
        }
    };
    let stored = Arc::new(serve::stored_from(
        code,
        &head,
        body.clone(),
        admission(vary_key(&facts)),
    ));
    status.ttl = Some(stored.ttl(stored.initial_age));
    let window = stale_window(&rc.policy, &stored);
    status.stored = shared.keep(key, &stored, requested_at, window);
    finish(leader, Outcome::Stored);
    let fetched = Fetched {
        head,
        close,
        requested_at,
    };
    fetched.answer(req, &stored, Body::Bytes(body), &status)
}

/// The response a fill fetched, as its own client gets it.
struct Fetched {
    head: Fields,
    close: bool,
    /// When its request went upstream (a purge or an invalidation since
    /// then keeps it out of the store).
    requested_at: Instant,
}

impl Fetched {
    /// The answer to the client whose request fetched `stored`: a 304 from
    /// the store when its validators match, else the response as the
    /// origin sent it (its Set-Cookie included) with the stored Date (the
    /// origin's, or the time it arrived) and the Age the cache computed
    /// (§4.2.3: the origin's Age plus the delay, or more when the Date says
    /// so) in place of the origin's, when either is not zero.
    fn answer(
        self,
        req: &ProxyRequest<'_>,
        stored: &Stored,
        body: Body,
        status: &CacheStatus,
    ) -> Response {
        let age = stored.initial_age;
        if client_validators(req).not_modified(stored) {
            return with_status(serve::not_modified(stored, age), status);
        }
        let mut r = Response::new(stored.status);
        r.fields = self.head;
        without_own_control(&mut r.fields);
        let origin_age = r.fields.contains(b"age");
        if origin_age {
            r.fields.retain(|n, _| !n.eq_ignore_ascii_case(b"age"));
        }
        if origin_age || age > 0 {
            r.header("Age", itoa::Buffer::new().format(age).as_bytes());
        }
        if !r.fields.contains(b"date") {
            if let Some(date) = stored.head.get(b"date") {
                r.fields.push(b"Date", date);
            }
        }
        r.has_date = true;
        r.body = body;
        r.close = self.close;
        with_status(r, status)
    }
}

/// Streams a storable body: a task on this worker reads the upstream into
/// a [`Growing`] body that this client and every waiter read at their own
/// pace (so none waits for the whole body, and the fill goes on if this
/// client leaves); once whole it is stored and the fill ends. A failed
/// upstream body cuts every reader's response (the way a proxied body
/// that fails is cut: no last chunk, the connection closed) and stores
/// nothing. A body of unknown length that outgrows the object cap is not
/// stored either: the URL is marked hit-for-miss, waiters that have not
/// started go to the origin themselves, and those reading get the rest
/// at the slowest one's pace, within the cap's memory
/// ([`Growing::let_go`]).
#[allow(clippy::too_many_arguments)] // one call site, every part distinct
fn stream_fill(
    rc: &RouteCache,
    req: &ProxyRequest<'_>,
    key: &Key,
    stored: Stored,
    leader: hayate_cache::fill::Leader,
    mut upstream: StreamBody,
    fetched: Fetched,
    mut status: CacheStatus,
) -> Response {
    let len = upstream.len;
    let requested_at = fetched.requested_at;
    let stored = Arc::new(stored);
    let growing = Growing::new();
    let Some(reader) = growing.reader() else {
        unreachable!("a new body has its first byte");
    };
    leader.stream(Arc::new(Streaming {
        stored: stored.clone(),
        body: growing.clone(),
        len,
    }));
    status.ttl = Some(stored.ttl(stored.initial_age));
    // Whether a body of unknown length fits is known only at its end.
    status.stored = len.is_some();
    let body = Body::Stream(StreamBody {
        len,
        source: Box::new(reader),
    });
    let answer = fetched.answer(req, &stored, body, &status);
    let shared = rc.shared.clone();
    let key = key.clone();
    let target = String::from_utf8_lossy(req.target).into_owned();
    let max = shared.limits.max_object;
    let window = stale_window(&rc.policy, &stored);
    tokio::task::spawn_local(async move {
        let mut received = 0u64;
        let mut leader = Some(leader);
        let complete = loop {
            match poll_fn(|cx| upstream.source.poll_chunk(cx)).await {
                Ok(Some(chunk)) => {
                    received += chunk.len() as u64;
                    growing.push(chunk);
                    if received > max && leader.is_some() {
                        // Too large to store (only a body of unknown
                        // length gets here).
                        shared
                            .store
                            .mark_pass(&key, Instant::now() + shared.limits.hit_for_miss);
                        drop(leader.take());
                        growing.let_go();
                    }
                    // Once let go, the slowest reader paces the upstream.
                    if leader.is_none() && !growing.room(max).await {
                        // Every reader left a body that will not be stored.
                        break false;
                    }
                }
                Ok(None) => break len.is_none_or(|n| received == n),
                Err(e) => {
                    log::warn!("cache fill of {target}: upstream body failed: {e}");
                    break false;
                }
            }
        };
        growing.finish(complete);
        if let (true, Some(leader)) = (complete, leader) {
            let whole = Arc::new(stored.with_body(growing.concat()));
            shared.keep(&key, &whole, requested_at, window);
            leader.finish(Outcome::Stored);
        }
        // else: the leader dropped here releases whoever still waits.
    });
    answer
}

fn finish(leader: Option<hayate_cache::fill::Leader>, outcome: Outcome) {
    if let Some(l) = leader {
        l.finish(outcome);
    }
}

/// Reads a response body whole, up to `limit` bytes: `Ok(Ok(bytes))`, or
/// `Ok(Err(body))` with the part read put back in front of the rest when
/// it is larger.
async fn read_body(body: Body, limit: u64) -> std::io::Result<Result<Bytes, Body>> {
    let mut stream = match body {
        Body::Empty => return Ok(Ok(Bytes::new())),
        Body::Bytes(b) if b.len() as u64 <= limit => return Ok(Ok(b)),
        Body::Stream(s) if s.len.is_none_or(|n| n <= limit) => s,
        other => return Ok(Err(other)),
    };
    let mut buf = BytesMut::new();
    let mut chunks = Vec::new();
    while let Some(chunk) = poll_fn(|cx| stream.source.poll_chunk(cx)).await? {
        if (buf.len() + chunk.len()) as u64 > limit {
            chunks.push(buf.freeze());
            chunks.push(chunk);
            return Ok(Err(Body::Stream(StreamBody {
                len: stream.len,
                source: Box::new(Prefixed {
                    prefix: chunks.into(),
                    rest: stream.source,
                }),
            })));
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(Ok(buf.freeze()))
}

/// A body whose first chunks were already read.
struct Prefixed {
    prefix: std::collections::VecDeque<Bytes>,
    rest: Box<dyn BodySource>,
}

impl BodySource for Prefixed {
    fn poll_chunk(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<Option<Bytes>>> {
        while let Some(c) = self.prefix.pop_front() {
            if !c.is_empty() {
                return std::task::Poll::Ready(Ok(Some(c)));
            }
        }
        self.rest.poll_chunk(cx)
    }

    fn trailers(&mut self) -> Option<Bytes> {
        self.rest.trailers()
    }
}
