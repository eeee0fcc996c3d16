//! Step 3 of the request path: the response cache in front of a route's
//! upstream group (DESIGN.md, "Response cache").
//!
//! [`lookup`] answers a proxied request from the shared store when RFC 9111
//! allows; otherwise [`from_origin`] fetches it — one fetch per key however many requests
//! miss at once (`hayate_cache::fill`), whose leader first asks the shared
//! tier of several boxes when there is one (`second_tier`) — stores what
//! may be stored (handing it to that tier too) and serves it. Every answer carries Cache-Status and tells the access log
//! what the cache did. The policy itself (what may be stored, for how
//! long, what may answer) lives in hayate-cache; this module does the I/O.

use std::future::poll_fn;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use bytes::{Bytes, BytesMut};
use hayate_cache::growing::{Growing, GrowingReader};
use hayate_cache::policy::storable;
use hayate_cache::serve::{self, Admission, ClientValidators};
use hayate_cache::store::{self, Key};
use hayate_cache::vary::FieldValues;
use hayate_cache::{
    CacheOutcome, CacheStatus, Lookup, Outcome, RequestDirectives, ResponseCache, ResponseFacts,
    Role, RoutePolicy, Stats, Stored, Streaming, Use, VaryKey, Waited,
};
use hayate_compress::Policy;
use hayate_core::client_body::ClientBody;
use hayate_core::error::Error;
use hayate_core::trace::RequestTrace;
use hayate_core::{Body, BodySource, Fields, Response, Status, StreamBody};
use hayate_proxy::{ProxyRequest, RequestFields, UpstreamGroup};

mod invalidate;
mod revalidate;
mod second_tier;
mod sticky_cookie;

use invalidate::invalidate_after_unsafe;
pub use invalidate::purge;
use revalidate::refresh_in_background;
use second_tier::{stale_window, Consulted};
use sticky_cookie::{forget_own_cookie, only_own_cookie};

/// A route's cache: the shared store and the route's policy.
#[derive(Debug, Clone)]
pub struct RouteCache {
    /// The store shared by every route and worker.
    pub shared: Arc<ResponseCache>,
    /// What the route allows beyond RFC 9111's defaults.
    pub policy: RoutePolicy,
    /// Request fields whose values are part of the key (a route-imposed
    /// Vary: `cache_key_headers`), lowercased; usually none.
    pub key_headers: Rc<[Vec<u8>]>,
    /// Requests carrying any of these fields bypass the cache
    /// (`cache_bypass_headers` less those the cache options allow),
    /// lowercased.
    pub bypass_headers: Rc<[Vec<u8>]>,
    /// The route's compression of proxied bodies, applied before storing
    /// so the compressed variant is what later hits serve.
    pub compression: Option<Rc<Policy>>,
    /// hayate's sticky-session cookie, when the group is sticky (`sticky_cookie.rs`).
    pub own_cookie: Option<Box<str>>,
}

/// The upstream's answer, compressed for this client when the route
/// compresses (the one place the cache reaches the origin).
async fn origin<B: ClientBody>(
    rc: &RouteCache,
    group: &UpstreamGroup,
    req: &ProxyRequest<'_>,
    body: &mut B,
) -> Response {
    let resp = group.forward(req, body).await;
    match &rc.compression {
        // A 304 answers the cache's own validators: it updates a stored
        // response and is never sent on as it is.
        Some(_) if resp.status == Status::NOT_MODIFIED => resp,
        Some(policy) => crate::compression::compress_proxied(resp, req, policy),
        None => resp,
    }
}

/// Request fields that are the client's own preconditions: never sent on a
/// fetch meant for the cache (the cache answers them itself).
const CLIENT_VALIDATORS: [&[u8]; 2] = [b"if-none-match", b"if-modified-since"];

/// [`ProxyRequest::values`] collected, as the Vary key wants them.
fn fields<'h>(req: &ProxyRequest<'h>, name: &[u8]) -> FieldValues<'h> {
    req.values(name).collect()
}

/// The request's Cache-Control (and Pragma: no-cache) directives.
fn request_directives(req: &ProxyRequest<'_>) -> RequestDirectives {
    RequestDirectives::parse(
        req.values(b"cache-control"),
        req.values(b"pragma")
            .any(|v| v.eq_ignore_ascii_case(b"no-cache")),
    )
}

/// Removes Hayate-Cache-Control from what a client gets: it targets
/// hayate alone (RFC 9213; CDN-Cache-Control goes on, other CDNs in front
/// are its targets too).
fn without_own_control(fields: &mut Fields) {
    let own = hayate_cache::targeted::OWN_FIELD;
    if fields.contains(own) {
        fields.retain(|n, _| !n.eq_ignore_ascii_case(own));
    }
}

fn with_status(mut resp: Response, status: &CacheStatus) -> Response {
    resp.header("Cache-Status", &status.value_bytes());
    resp.cache_status = Some(status.outcome.name());
    resp
}

/// Why the store could not answer a request: what [`from_origin`] does.
#[derive(Debug)]
pub enum Miss {
    /// Forwarded without the cache (an unsafe method, a request the cache
    /// does not serve, a URL that answered uncacheably a moment ago): the
    /// Cache-Status `fwd` and `detail` that say why.
    Bypass(&'static str, &'static str),
    /// Not stored, or stored (`stale`) but in need of revalidation.
    Fetch {
        /// The stored response to revalidate, and whether stale-if-error
        /// lets it answer when the origin fails.
        stale: Option<(Arc<Stored>, bool)>,
    },
}

/// Answers `req` (a request for the route's upstream group) from the store
/// when RFC 9111 allows, without waiting: a hit, a stale answer while one
/// refresh runs in the background, or only-if-cached's 504. Otherwise says
/// why not, for [`from_origin`]. A hit thus never builds the fetch's state
/// (kilobytes, which every await would move).
pub fn lookup(
    rc: &RouteCache,
    group: &Rc<UpstreamGroup>,
    req: &ProxyRequest<'_>,
    now: Instant,
) -> Result<Response, Miss> {
    let stats = rc.shared.stats();
    let method = req.method;
    if method != b"GET" && method != b"HEAD" {
        return Err(Miss::Bypass("method", "unsafe-method"));
    }
    if let Some(reason) = bypass_reason(rc, req) {
        return Err(Miss::Bypass("request", reason));
    }
    // A GET's Range is answered from a fresh stored response, else
    // forwarded as it is; a HEAD ignores Range (RFC 9110 §14.2).
    let range = if method == b"GET" {
        req.field(b"range")
    } else {
        None
    };
    let lookup_key = store::key_inline(req.host.unwrap_or_default(), req.target);
    let directives = request_directives(req);
    let lookup = rc.shared.store.lookup(&lookup_key, |n| fields(req, n), now);
    let stale = match lookup {
        Lookup::Found(stored) => {
            let fresh = stored.freshness(
                now,
                rc.policy.stale_while_revalidate.as_secs(),
                rc.policy.stale_if_error.as_secs(),
            );
            match fresh.decide(&directives) {
                Use::Fresh => {
                    let outcome = if fresh.ttl() > 0 {
                        Stats::bump(&stats.hits);
                        CacheOutcome::Hit
                    } else {
                        Stats::bump(&stats.stale);
                        CacheOutcome::Stale
                    };
                    let status = CacheStatus {
                        ttl: Some(fresh.ttl()),
                        ..CacheStatus::new(outcome)
                    };
                    return Ok(from_store_ranged(
                        req,
                        range,
                        &stored,
                        stored.age(now),
                        status,
                    ));
                }
                Use::StaleWhileRevalidate => {
                    Stats::bump(&stats.stale);
                    refresh_in_background(rc, group, req, &lookup_key[..].into(), &stored);
                    let status = CacheStatus {
                        ttl: Some(fresh.ttl()),
                        detail: Some("stale-while-revalidate"),
                        ..CacheStatus::new(CacheOutcome::Stale)
                    };
                    return Ok(from_store_ranged(
                        req,
                        range,
                        &stored,
                        stored.age(now),
                        status,
                    ));
                }
                Use::Revalidate { .. } if range.is_some() => {
                    return Err(Miss::Bypass("request", "range"))
                }
                Use::Revalidate { stale_if_error } => Some((stored, stale_if_error)),
            }
        }
        Lookup::Pass => return Err(Miss::Bypass("uri-miss", "hit-for-miss")),
        Lookup::Miss if range.is_some() => return Err(Miss::Bypass("request", "range")),
        Lookup::Miss => None,
    };
    if directives.only_if_cached {
        Stats::bump(&stats.misses);
        let status = CacheStatus {
            fwd: Some("miss"),
            detail: Some("only-if-cached"),
            ..CacheStatus::new(CacheOutcome::Miss)
        };
        return Ok(with_status(
            Response::error(Status::GATEWAY_TIMEOUT),
            &status,
        ));
    }
    Err(Miss::Fetch { stale })
}

/// Answers from the origin what [`lookup`] could not: one fetch per key
/// however many requests miss at once, stored when it may be.
pub async fn from_origin<B: ClientBody>(
    rc: &RouteCache,
    group: &Rc<UpstreamGroup>,
    req: &ProxyRequest<'_>,
    body: &mut B,
    (miss, trace): (Miss, Option<&RequestTrace>),
) -> Response {
    let stats = rc.shared.stats();
    let stale = match miss {
        Miss::Bypass(fwd, detail) => {
            Stats::bump(&stats.bypasses);
            let mut resp = origin(rc, group, req, body).await;
            without_own_control(&mut resp.fields);
            if !matches!(req.method, b"GET" | b"HEAD" | b"OPTIONS" | b"TRACE") {
                invalidate_after_unsafe(rc, req, &resp);
            }
            return with_status(resp, &CacheStatus::bypass(fwd, detail));
        }
        Miss::Fetch { stale } => stale,
    };
    Stats::bump(&stats.misses);
    if req.method == b"HEAD" {
        // A HEAD is answered from a stored GET, but never fills the cache.
        let mut resp = origin(rc, group, req, body).await;
        without_own_control(&mut resp.fields);
        let status = CacheStatus {
            fwd: Some("uri-miss"),
            fwd_status: Some(resp.status.code()),
            ..CacheStatus::new(CacheOutcome::Miss)
        };
        return with_status(resp, &status);
    }
    // The key is owned from here on (fills and the store keep it).
    let key = store::key(req.host.unwrap_or_default(), req.target);
    match rc.shared.fills.join(&key) {
        Role::Leader(leader) if stale.is_none() => {
            match second_tier::consult(rc, group, req, &key, leader).await {
                Consulted::Answered(resp) => resp,
                Consulted::Fetch(leader, stale) => {
                    fetch(rc, group, req, body, &key, stale, Some(leader)).await
                }
            }
        }
        Role::Leader(leader) => fetch(rc, group, req, body, &key, stale, Some(leader)).await,
        Role::Follower(follower) => {
            Stats::bump(&stats.coalesced);
            let status = CacheStatus {
                fwd: Some("uri-miss"),
                collapsed: true,
                ..CacheStatus::new(CacheOutcome::Miss)
            };
            // A wait the span shows: this request's answer is another's
            // fill (its upstream times are that request's, not this one's).
            if let Some(trace) = trace {
                trace.note("cache fill wait");
            }
            let waited = follower.wait(rc.shared.limits.lock_timeout).await;
            if let Some(trace) = trace {
                trace.note(match waited {
                    Waited::Stored | Waited::Streaming(..) => "cache fill ready",
                    Waited::Released => "cache fill released: fetching",
                });
            }
            match waited {
                Waited::Stored => {
                    if let Lookup::Found(stored) =
                        rc.shared
                            .store
                            .lookup(&key, |n| fields(req, n), Instant::now())
                    {
                        return from_store(req, &stored, stored.age(Instant::now()), status);
                    }
                }
                Waited::Streaming(fill, reader)
                    if fill.stored.vary.matches(&|n: &[u8]| fields(req, n)) =>
                {
                    return from_streaming(req, &fill, reader, status);
                }
                Waited::Streaming(..) | Waited::Released => {}
            }
            // Released, timed out, or stored for another variant: fetch
            // without waiting again.
            fetch(rc, group, req, body, &key, stale, None).await
        }
        Role::Overflow => fetch(rc, group, req, body, &key, stale, None).await,
    }
}

/// Why a GET or HEAD does not use the cache at all.
fn bypass_reason(rc: &RouteCache, req: &ProxyRequest<'_>) -> Option<&'static str> {
    for name in rc.bypass_headers.iter() {
        if req.field(name).is_some() && !only_own_cookie(rc, req, name) {
            return Some(match &name[..] {
                b"cookie" => "cookie",
                b"authorization" => "authorization",
                _ => "bypass-header",
            });
        }
    }
    // If-Range goes with Range (answered from the store when it can be).
    if [&b"if-match"[..], b"if-unmodified-since"]
        .iter()
        .any(|n| req.field(n).is_some())
    {
        return Some("precondition");
    }
    None
}

/// The request's own validators.
fn client_validators<'r>(req: &ProxyRequest<'r>) -> ClientValidators<'r> {
    ClientValidators {
        if_none_match: req.field(b"if-none-match"),
        if_modified_since: req.field(b"if-modified-since"),
    }
}

/// A stored response for `req`: 304 when the client's validators match.
fn from_store(req: &ProxyRequest<'_>, stored: &Stored, age: u64, status: CacheStatus) -> Response {
    let resp = if client_validators(req).not_modified(stored) {
        serve::not_modified(stored, age)
    } else {
        serve::from_store(stored, age)
    };
    with_status(resp, &status)
}

/// [`from_store`] for a request that may carry a Range: 206 (or 416) from
/// the stored body when the Range applies to it.
fn from_store_ranged(
    req: &ProxyRequest<'_>,
    range: Option<&[u8]>,
    stored: &Stored,
    age: u64,
    status: CacheStatus,
) -> Response {
    let Some(range) = range.filter(|_| !client_validators(req).not_modified(stored)) else {
        return from_store(req, stored, age, status);
    };
    match crate::cached_range::answer(stored, range, req.field(b"if-range")) {
        Some(mut resp) => {
            resp.header("Age", itoa::Buffer::new().format(age).as_bytes());
            with_status(resp, &status)
        }
        None => from_store(req, stored, age, status),
    }
}

/// A response whose body is still arriving, for a request that waited on
/// its fill: the stored head now, the body as it comes.
fn from_streaming(
    req: &ProxyRequest<'_>,
    fill: &Streaming,
    reader: GrowingReader,
    status: CacheStatus,
) -> Response {
    let age = fill.stored.age(Instant::now());
    let mut resp = from_store(req, &fill.stored, age, status);
    if resp.status != Status::NOT_MODIFIED {
        resp.body = Body::Stream(StreamBody {
            len: fill.len,
            source: Box::new(reader),
        });
    }
    resp
}

/// Fetches `req` for the cache: conditionally when a stale copy with
/// validators exists; stores a storable answer; wakes the waiters.
async fn fetch<B: ClientBody>(
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

/// The response cache as every part of the server finds it: made at
/// start when a route caches, or by the reload that adds the first such
/// route.
pub type CacheSlot = Arc<arc_swap::ArcSwapOption<ResponseCache>>;
