//! RFC 9111 as a shared cache: whether a response may be stored (§3),
//! how long it stays fresh (§4.2.1-2), its age (§4.2.3), and whether a
//! stored response may answer a request (§4, §4.2.4, §5.2.1, RFC 5861).
//!
//! Pure functions over parsed header facts; no I/O, no clock reads (the
//! caller passes `now`), so every rule is a table test.

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use hayate_core::field::trim_ows as trim;

use crate::directives::{RequestDirectives, ResponseDirectives};

/// What the route allows beyond RFC 9111's defaults.
#[derive(Debug, Clone, Copy, Default)]
pub struct RoutePolicy {
    /// Freshness for storable responses that carry none (micro-cache);
    /// `None`: RFC heuristics only.
    pub default_ttl: Option<Duration>,
    /// Store responses that carry Set-Cookie (the cookie itself is never
    /// stored).
    pub store_set_cookie: bool,
    /// Route default for stale-while-revalidate, when the response says none.
    pub stale_while_revalidate: Duration,
    /// Route default for stale-if-error, when the response says none.
    pub stale_if_error: Duration,
}

/// The header facts of a response that the cache decides on.
#[derive(Debug, Clone, Default)]
pub struct ResponseFacts {
    /// Cache-Control.
    pub cc: ResponseDirectives,
    /// Expires (an invalid value counts as already expired).
    pub expires: Option<Option<SystemTime>>,
    /// Date, if the origin sent one.
    pub date: Option<SystemTime>,
    /// Last-Modified, raw and parsed.
    pub last_modified: Option<(Bytes, Option<SystemTime>)>,
    /// Age sent by the origin or an inner cache (0 without a valid one).
    pub age: u64,
    /// ETag, raw.
    pub etag: Option<Bytes>,
    /// Vary field names, lowercased; `None` for `Vary: *`.
    pub vary: Option<Vec<Vec<u8>>>,
    /// Whether Set-Cookie is present.
    pub set_cookie: bool,
    /// Surrogate-Key tags, for purge by tag.
    pub tags: Vec<Vec<u8>>,
    /// The media type is text/event-stream (never stored: it never ends).
    pub event_stream: bool,
    /// X-Accel-Redirect or X-Sendfile: an answer for the server to follow,
    /// per request (never stored: the app decides each time who may have
    /// the file).
    pub internal_redirect: bool,
}

impl ResponseFacts {
    /// Reads the facts from a response's fields.
    pub fn from_fields<'h>(
        fields: impl IntoIterator<Item = (&'h [u8], &'h [u8])>,
    ) -> ResponseFacts {
        let mut f = ResponseFacts::default();
        let mut cc = Vec::new();
        let mut vary: Option<Vec<Vec<u8>>> = Some(Vec::new());
        let mut age_seen = false;
        let (mut own, mut cdn) = (Vec::new(), Vec::new());
        for (name, value) in fields {
            let lower = name.to_ascii_lowercase();
            match lower.as_slice() {
                b"cache-control" => cc.push(value),
                b"hayate-cache-control" => own.push(value),
                b"cdn-cache-control" => cdn.push(value),
                b"expires" => {
                    f.expires
                        .get_or_insert_with(|| hayate_core::date::parse(value));
                }
                b"date" => f.date = f.date.or(hayate_core::date::parse(value)),
                b"last-modified" => {
                    f.last_modified.get_or_insert_with(|| {
                        (
                            Bytes::copy_from_slice(value),
                            hayate_core::date::parse(value),
                        )
                    });
                }
                b"age" if !age_seen => {
                    age_seen = true;
                    f.age = age_value(value).unwrap_or(0);
                }
                b"etag" => {
                    f.etag.get_or_insert_with(|| Bytes::copy_from_slice(value));
                }
                b"vary" => {
                    for n in value.split(|&b| b == b',').map(trim) {
                        if n == b"*" {
                            vary = None;
                        } else if let Some(v) = vary.as_mut().filter(|_| !n.is_empty()) {
                            let n = n.to_ascii_lowercase();
                            if !v.contains(&n) {
                                v.push(n);
                            }
                        }
                    }
                }
                b"set-cookie" => f.set_cookie = true,
                b"x-accel-redirect" | b"x-sendfile" => f.internal_redirect = true,
                b"surrogate-key" | b"cache-tag" => f.tags.extend(
                    value
                        .split(|&b| b == b' ' || b == b',')
                        .filter(|t| !t.is_empty())
                        .map(<[u8]>::to_vec),
                ),
                b"content-type" => {
                    f.event_stream = trim(value.split(|&b| b == b';').next().unwrap_or_default())
                        .eq_ignore_ascii_case(b"text/event-stream")
                }
                _ => {}
            }
        }
        // RFC 9213 §2.1: a valid targeted field replaces Cache-Control and
        // Expires.
        f.cc = match crate::targeted::select([&own, &cdn]) {
            Some(value) => {
                f.expires = None;
                ResponseDirectives::parse([&value[..]])
            }
            None => ResponseDirectives::parse(cc),
        };
        f.vary = vary;
        f
    }

    /// Whether the response names any explicit freshness.
    fn explicit_lifetime(&self, response_time: SystemTime) -> Option<Duration> {
        if let Some(s) = self.cc.s_maxage {
            return Some(Duration::from_secs(s));
        }
        if let Some(m) = self.cc.max_age {
            return Some(Duration::from_secs(m));
        }
        let expires = self.expires?;
        let date = self.date.unwrap_or(response_time);
        Some(
            expires
                .and_then(|e| e.duration_since(date).ok())
                .unwrap_or(Duration::ZERO),
        )
    }
}

/// The value of an Age field (RFC 9111 §5.1): the first member of a list
/// (`Age: 7200, 0`: a cache SHOULD use the first and discard the others;
/// a second Age line is discarded by the caller the same way), `None`
/// when that member is not a non-negative integer, which the cache then
/// ignores. Values past 2^31 are 2^31 (§1.2.2).
pub fn age_value(raw: &[u8]) -> Option<u64> {
    crate::directives::delta_seconds(trim(raw.split(|&b| b == b',').next().unwrap_or_default()))
}

/// Status codes that are heuristically cacheable (RFC 9110 §15.1).
fn heuristically_cacheable(status: u16) -> bool {
    matches!(
        status,
        200 | 203 | 204 | 206 | 300 | 301 | 308 | 404 | 405 | 410 | 414 | 501
    )
}

/// Status codes whose caching rules hayate implements, for
/// `must-understand` (§5.2.2.3): the final ones RFC 9110 defines, but 206
/// (no partial content is stored) and 304 (it updates, never is stored).
fn understood(status: u16) -> bool {
    matches!(
        status,
        200..=205 | 300..=305 | 307 | 308 | 400..=417 | 421 | 422 | 426 | 500..=505
    )
}

/// Why a response is not stored (the Cache-Status `detail`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotStored {
    /// The status is not final or not storable here (206, 304, 1xx).
    Status,
    /// `no-store` in the response.
    NoStore,
    /// `must-understand` with a status code whose caching rules hayate
    /// does not implement.
    MustUnderstand,
    /// `no-store` in the request.
    RequestNoStore,
    /// `private`.
    Private,
    /// The request carried Authorization and the response did not allow
    /// sharing it (§3.5).
    Authorization,
    /// Set-Cookie, and the route does not store such responses.
    SetCookie,
    /// `Vary: *`.
    VaryStar,
    /// No freshness, no heuristic, no validator: useless to store.
    NoFreshness,
    /// text/event-stream.
    EventStream,
    /// Larger than the object size cap.
    TooLarge,
    /// X-Accel-Redirect or X-Sendfile.
    InternalRedirect,
}

impl NotStored {
    /// The reason as Cache-Status `detail` and log text.
    pub fn as_str(self) -> &'static str {
        match self {
            NotStored::Status => "status",
            NotStored::NoStore => "no-store",
            NotStored::MustUnderstand => "must-understand",
            NotStored::RequestNoStore => "request-no-store",
            NotStored::Private => "private",
            NotStored::Authorization => "authorization",
            NotStored::SetCookie => "set-cookie",
            NotStored::VaryStar => "vary-star",
            NotStored::NoFreshness => "no-freshness",
            NotStored::EventStream => "event-stream",
            NotStored::TooLarge => "too-large",
            NotStored::InternalRedirect => "internal-redirect",
        }
    }

    /// Whether the reason lies in the response alone, so that other
    /// requests for the URL would get the same answer (hit-for-miss).
    pub fn applies_to_everyone(self) -> bool {
        !matches!(self, NotStored::Authorization | NotStored::RequestNoStore)
    }
}

/// Decides whether a response to a GET may be stored (§3) and for how long
/// it is fresh (§4.2.1-2). `Ok(lifetime)`, possibly zero when validators
/// make a stored copy useful for revalidation.
pub fn storable(
    status: u16,
    facts: &ResponseFacts,
    req: &RequestDirectives,
    authorization: bool,
    route: &RoutePolicy,
    response_time: SystemTime,
) -> Result<Duration, NotStored> {
    if !(200..600).contains(&status) || status == 206 || status == 304 {
        return Err(NotStored::Status);
    }
    if facts.cc.must_understand {
        // Understood: no-store, which such responses also carry for
        // caches that do not know the directive, is ignored.
        if !understood(status) {
            return Err(NotStored::MustUnderstand);
        }
    } else if facts.cc.no_store {
        return Err(NotStored::NoStore);
    }
    if req.no_store {
        return Err(NotStored::RequestNoStore);
    }
    if facts.cc.private {
        return Err(NotStored::Private);
    }
    if authorization
        && !(facts.cc.public || facts.cc.s_maxage.is_some() || facts.cc.must_revalidate)
    {
        return Err(NotStored::Authorization);
    }
    if facts.set_cookie && !route.store_set_cookie {
        return Err(NotStored::SetCookie);
    }
    if facts.vary.is_none() {
        return Err(NotStored::VaryStar);
    }
    if facts.event_stream {
        return Err(NotStored::EventStream);
    }
    if facts.internal_redirect {
        return Err(NotStored::InternalRedirect);
    }
    let lifetime = match facts.explicit_lifetime(response_time) {
        Some(l) => l,
        None if heuristically_cacheable(status) || facts.cc.public => route
            .default_ttl
            .unwrap_or_else(|| heuristic(facts, response_time)),
        None => Duration::ZERO,
    };
    let validators = facts.etag.is_some() || facts.last_modified.is_some();
    if (lifetime.is_zero() || facts.cc.no_cache) && !validators {
        return Err(NotStored::NoFreshness);
    }
    Ok(lifetime)
}

/// §4.2.2: 10 % of the time since Last-Modified, at most a day.
fn heuristic(facts: &ResponseFacts, response_time: SystemTime) -> Duration {
    let Some((_, Some(lm))) = facts.last_modified else {
        return Duration::ZERO;
    };
    let date = facts.date.unwrap_or(response_time);
    date.duration_since(lm)
        .map_or(Duration::ZERO, |d| d / 10)
        .min(Duration::from_secs(86_400))
}

/// The age a response had when it was received (§4.2.3:
/// corrected_initial_age), in seconds.
pub fn initial_age(
    facts: &ResponseFacts,
    request_time: SystemTime,
    response_time: SystemTime,
) -> u64 {
    let apparent = facts
        .date
        .and_then(|d| response_time.duration_since(d).ok())
        .map_or(0, |d| d.as_secs());
    let delay = response_time
        .duration_since(request_time)
        .map_or(0, |d| d.as_secs());
    apparent.max(facts.age.saturating_add(delay))
}

/// How a stored response may answer a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Use {
    /// Fresh (or stale within the client's max-stale): serve it.
    Fresh,
    /// Stale within stale-while-revalidate: serve it and refresh it in the
    /// background.
    StaleWhileRevalidate,
    /// Ask the origin first (conditionally when the copy has validators);
    /// `stale_if_error` says whether the copy may answer if the origin fails.
    Revalidate {
        /// The stale copy may answer when the origin fails.
        stale_if_error: bool,
    },
}

/// The freshness state of a stored response, in whole seconds.
#[derive(Debug, Clone, Copy)]
pub struct Freshness {
    /// Freshness lifetime.
    pub lifetime: u64,
    /// Current age.
    pub age: u64,
    /// The response's directives.
    pub cc: ResponseDirectives,
    /// Route defaults for the stale extensions, in seconds.
    pub swr_default: u64,
    /// Route default for stale-if-error, in seconds.
    pub sie_default: u64,
}

impl Freshness {
    /// Seconds of freshness left (negative: stale for that long), the
    /// Cache-Status `ttl`.
    pub fn ttl(&self) -> i64 {
        self.lifetime as i64 - self.age as i64
    }

    /// §4, §4.2.4, §5.2.1, RFC 5861: how this copy may answer `req`.
    pub fn decide(&self, req: &RequestDirectives) -> Use {
        let fresh = self.age < self.lifetime;
        let staleness = self.age.saturating_sub(self.lifetime);
        let no_stale = self.cc.forbids_stale();
        let sie = self.cc.stale_if_error.unwrap_or(self.sie_default);
        let revalidate = Use::Revalidate {
            stale_if_error: !no_stale && !self.cc.no_cache && staleness <= sie && sie > 0,
        };
        if self.cc.no_cache || req.no_cache {
            return Use::Revalidate {
                stale_if_error: false,
            };
        }
        if req.max_age.is_some_and(|m| self.age > m) {
            return revalidate;
        }
        if let Some(min) = req.min_fresh {
            if self.ttl() < min as i64 {
                return revalidate;
            }
        }
        if fresh {
            return Use::Fresh;
        }
        if no_stale {
            return Use::Revalidate {
                stale_if_error: false,
            };
        }
        match req.max_stale {
            Some(None) => return Use::Fresh,
            Some(Some(n)) if staleness <= n => return Use::Fresh,
            _ => {}
        }
        let swr = self.cc.stale_while_revalidate.unwrap_or(self.swr_default);
        if swr > 0 && staleness <= swr {
            return Use::StaleWhileRevalidate;
        }
        revalidate
    }
}

#[cfg(test)]
mod tests;
