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

mod fetch;
mod invalidate;
mod revalidate;
mod second_tier;
mod sticky_cookie;

use fetch::fetch;
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

/// The response cache as every part of the server finds it: made at
/// start when a route caches, or by the reload that adds the first such
/// route.
pub type CacheSlot = Arc<arc_swap::ArcSwapOption<ResponseCache>>;
