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
mod tests {
    use super::*;
    use hayate_core::Fields;

    const T0: u64 = 1_700_000_000;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn facts(head: &str) -> ResponseFacts {
        ResponseFacts::from_fields(Fields::parse_wire(head.as_bytes()).iter())
    }

    fn store(status: u16, head: &str) -> Result<u64, NotStored> {
        storable(
            status,
            &facts(head),
            &RequestDirectives::default(),
            false,
            &RoutePolicy::default(),
            at(T0),
        )
        .map(|d| d.as_secs())
    }

    #[test]
    fn storability_table() {
        use NotStored::*;
        let date = httpdate::fmt_http_date(at(T0));
        let expires = httpdate::fmt_http_date(at(T0 + 30));
        let lm = httpdate::fmt_http_date(at(T0 - 1000));
        let table: Vec<(u16, String, Result<u64, NotStored>)> = vec![
            (200, "Cache-Control: max-age=60\r\n".into(), Ok(60)),
            (
                200,
                "Cache-Control: max-age=60, s-maxage=5\r\n".into(),
                Ok(5),
            ),
            (
                200,
                format!("Date: {date}\r\nExpires: {expires}\r\n"),
                Ok(30),
            ),
            (200, "Expires: garbage\r\nETag: \"a\"\r\n".into(), Ok(0)),
            (200, "Expires: garbage\r\n".into(), Err(NoFreshness)),
            (200, format!("Last-Modified: {lm}\r\n"), Ok(100)),
            (200, "".into(), Err(NoFreshness)),
            (200, "ETag: \"x\"\r\n".into(), Ok(0)),
            (302, "ETag: \"x\"\r\n".into(), Ok(0)),
            (302, format!("Last-Modified: {lm}\r\n"), Ok(0)),
            (404, format!("Last-Modified: {lm}\r\n"), Ok(100)),
            (206, "Cache-Control: max-age=60\r\n".into(), Err(Status)),
            (304, "Cache-Control: max-age=60\r\n".into(), Err(Status)),
            (
                200,
                "Cache-Control: max-age=60, no-store\r\n".into(),
                Err(NoStore),
            ),
            (
                200,
                "Cache-Control: private, max-age=60\r\n".into(),
                Err(Private),
            ),
            (
                200,
                "Cache-Control: max-age=60\r\nSet-Cookie: a=b\r\n".into(),
                Err(SetCookie),
            ),
            (
                200,
                "Cache-Control: max-age=60\r\nVary: Accept, *\r\n".into(),
                Err(VaryStar),
            ),
            (
                200,
                "Cache-Control: no-cache, max-age=60\r\n".into(),
                Err(NoFreshness),
            ),
            (
                200,
                "Cache-Control: no-cache\r\nETag: \"v\"\r\n".into(),
                Ok(0),
            ),
            (
                200,
                "Content-Type: text/event-stream\r\nCache-Control: max-age=9\r\n".into(),
                Err(EventStream),
            ),
        ];
        for (status, head, want) in table {
            assert_eq!(store(status, &head), want, "{status} {head:?}");
        }
    }

    /// §5.2.2.3 must-understand: stored only for status codes whose rules
    /// hayate implements, and then no-store is ignored.
    #[test]
    fn must_understand_table() {
        let mu = "Cache-Control: must-understand, no-store, max-age=60\r\n";
        let table = [
            (200, mu, Ok(60)),
            (404, mu, Ok(60)),
            (308, mu, Ok(60)),
            (299, mu, Err(NotStored::MustUnderstand)),
            (418, mu, Err(NotStored::MustUnderstand)),
            (599, mu, Err(NotStored::MustUnderstand)),
            (206, mu, Err(NotStored::Status)),
            (
                200,
                "Cache-Control: must-understand, max-age=60\r\n",
                Ok(60),
            ),
            (299, "Cache-Control: max-age=60\r\n", Ok(60)),
            (
                299,
                "Cache-Control: no-store, max-age=60\r\n",
                Err(NotStored::NoStore),
            ),
            (
                200,
                "Cache-Control: must-understand, no-store, private\r\n",
                Err(NotStored::Private),
            ),
        ];
        for (status, head, want) in table {
            assert_eq!(store(status, head), want, "{status} {head:?}");
        }
    }

    /// RFC 9213: the first valid targeted field (Hayate-Cache-Control,
    /// then CDN-Cache-Control) replaces Cache-Control and Expires.
    #[test]
    fn targeted_fields_take_precedence() {
        let expires = format!(
            "Date: {}\r\nExpires: {}\r\n",
            httpdate::fmt_http_date(at(T0)),
            httpdate::fmt_http_date(at(T0 + 90))
        );
        let table: Vec<(String, Result<u64, NotStored>)> = vec![
            ("Cache-Control: no-store\r\nCDN-Cache-Control: max-age=30\r\n".into(), Ok(30)),
            ("Cache-Control: max-age=60\r\nCDN-Cache-Control: no-store\r\n".into(), Err(NotStored::NoStore)),
            ("Cache-Control: private\r\nCDN-Cache-Control: max-age=30\r\n".into(), Ok(30)),
            (
                "Cache-Control: max-age=60\r\nHayate-Cache-Control: max-age=5\r\nCDN-Cache-Control: max-age=30\r\n".into(),
                Ok(5),
            ),
            (
                "CDN-Cache-Control: max-age=30\r\nhayate-cache-control: no-store\r\n".into(),
                Err(NotStored::NoStore),
            ),
            // Not a valid Dictionary: skipped, the next one decides.
            (
                "Cache-Control: max-age=60\r\nHayate-Cache-Control: Max-Age=5\r\nCDN-Cache-Control: max-age=30\r\n".into(),
                Ok(30),
            ),
            ("Cache-Control: max-age=60\r\nCDN-Cache-Control: max-age=30,\r\n".into(), Ok(60)),
            ("Cache-Control: max-age=60\r\nCDN-Cache-Control:\r\n".into(), Ok(60)),
            // Two lines are one list.
            (
                "CDN-Cache-Control: no-cache\r\nCDN-Cache-Control: max-age=30\r\n".into(),
                Err(NotStored::NoFreshness),
            ),
            // Expires is ignored too.
            (expires.clone(), Ok(90)),
            (format!("{expires}CDN-Cache-Control: must-revalidate\r\n"), Err(NotStored::NoFreshness)),
            (format!("{expires}CDN-Cache-Control: s-maxage=9\r\n"), Ok(9)),
        ];
        for (head, want) in table {
            assert_eq!(store(200, &head), want, "{head:?}");
        }
    }

    #[test]
    fn authorization_needs_explicit_permission() {
        let run = |head: &str| {
            storable(
                200,
                &facts(head),
                &RequestDirectives::default(),
                true,
                &RoutePolicy::default(),
                at(T0),
            )
            .map(|d| d.as_secs())
        };
        assert_eq!(
            run("Cache-Control: max-age=60\r\n"),
            Err(NotStored::Authorization)
        );
        assert_eq!(run("Cache-Control: public, max-age=60\r\n"), Ok(60));
        assert_eq!(run("Cache-Control: s-maxage=60\r\n"), Ok(60));
        assert_eq!(
            run("Cache-Control: must-revalidate, max-age=60\r\n"),
            Ok(60)
        );
    }

    #[test]
    fn micro_cache_ttl_only_without_freshness() {
        let route = RoutePolicy {
            default_ttl: Some(Duration::from_secs(5)),
            ..RoutePolicy::default()
        };
        let run = |status, head: &str| {
            storable(
                status,
                &facts(head),
                &RequestDirectives::default(),
                false,
                &route,
                at(T0),
            )
            .map(|d| d.as_secs())
        };
        assert_eq!(run(200, ""), Ok(5));
        assert_eq!(run(200, "Cache-Control: max-age=60\r\n"), Ok(60));
        assert_eq!(
            run(200, "Cache-Control: max-age=0\r\nETag: \"e\"\r\n"),
            Ok(0)
        );
        assert_eq!(run(500, ""), Err(NotStored::NoFreshness));
        assert_eq!(
            run(200, "Cache-Control: no-store\r\n"),
            Err(NotStored::NoStore)
        );
        let nostore = RequestDirectives::parse([&b"no-store"[..]], false);
        assert_eq!(
            storable(200, &facts(""), &nostore, false, &route, at(T0)),
            Err(NotStored::RequestNoStore)
        );
    }

    #[test]
    fn facts_from_head() {
        let f = facts(
            "Vary: Accept-Encoding, accept-encoding\r\nVary: X-A\r\nAge: 7\r\nSurrogate-Key: a b\r\n\
             ETag: W/\"1\"\r\nSet-Cookie: x=1\r\nContent-Type: text/event-stream; charset=utf-8\r\n",
        );
        assert_eq!(
            f.vary,
            Some(vec![b"accept-encoding".to_vec(), b"x-a".to_vec()])
        );
        assert_eq!(f.age, 7);
        assert_eq!(f.tags, vec![b"a".to_vec(), b"b".to_vec()]);
        assert_eq!(f.etag.as_deref(), Some(&b"W/\"1\""[..]));
        assert!(f.set_cookie && f.event_stream);
    }

    #[test]
    fn age_field_uses_the_first_member_and_ignores_an_invalid_one() {
        let table = [
            ("Age: 7\r\n", 7),
            ("Age: 7200, 0\r\n", 7200),
            ("Age: 7200\r\nAge: 0\r\n", 7200),
            ("Age: 0\r\nAge: 7200\r\n", 0),
            ("Age: x7200\r\n", 0),
            ("Age: junk, 7200\r\n", 0),
            ("Age: junk\r\nAge: 9\r\n", 0),
            ("Age: -5\r\n", 0),
            ("Age: 12s\r\n", 0),
            ("Age: 1.5\r\n", 0),
            ("Age: , 9\r\n", 0),
            ("Age:  42 \r\n", 42),
            ("Age: 99999999999999999999\r\n", 1 << 31),
            ("", 0),
        ];
        for (head, want) in table {
            assert_eq!(facts(head).age, want, "{head:?}");
        }
    }

    /// §4.2.3 with times as seconds from T0: `(Date, Age field, request
    /// time, response time, corrected_initial_age)`.
    #[test]
    fn initial_age_table() {
        let date = |d: i64| {
            format!(
                "Date: {}\r\n",
                httpdate::fmt_http_date(at((T0 as i64 + d) as u64))
            )
        };
        let table: Vec<(String, &str, i64, i64, u64)> = vec![
            // apparent_age (10) beats corrected_age_value (3 + delay 2).
            (date(-10), "Age: 3\r\n", -2, 0, 10),
            // corrected_age_value: Age plus the response delay.
            (date(0), "Age: 3\r\n", -2, 0, 5),
            (String::new(), "Age: 3\r\n", -2, 0, 5),
            (String::new(), "", -4, 0, 4),
            // The origin's clock ahead: apparent_age is never negative.
            (date(100), "", 0, 0, 0),
            (date(100), "Age: 30\r\n", -1, 0, 31),
            // The origin's clock behind by a day.
            (date(-86_400), "", 0, 0, 86_400),
            // An invalid Date is none; an invalid Age is ignored.
            ("Date: soon\r\n".into(), "Age: x\r\n", 0, 0, 0),
            (date(0), "Age: 7200, 0\r\n", 0, 0, 7200),
            (String::new(), "", 0, 0, 0),
        ];
        for (d, a, req, resp, want) in table {
            let f = facts(&format!("{d}{a}"));
            let t = |o: i64| at((T0 as i64 + o) as u64);
            assert_eq!(
                initial_age(&f, t(req), t(resp)),
                want,
                "{d:?} {a:?} {req} {resp}"
            );
        }
    }

    /// Expires in each HTTP-date format, relative to the origin's Date
    /// (§4.2.1: expires - date, so a clock offset between origin and
    /// cache changes nothing), and invalid values as already expired
    /// (§5.3).
    #[test]
    fn expires_table() {
        let imf = |d: i64| httpdate::fmt_http_date(at((T0 as i64 + d) as u64));
        // T0 + 30 in the two obsolete formats.
        let rfc850 = "Tuesday, 14-Nov-23 22:13:50 GMT";
        let asctime = "Tue Nov 14 22:13:50 2023";
        let d0 = format!("Date: {}\r\n", imf(0));
        let table: Vec<(String, Result<u64, NotStored>)> = vec![
            (format!("{d0}Expires: {}\r\n", imf(30)), Ok(30)),
            (format!("{d0}Expires: {rfc850}\r\n"), Ok(30)),
            (format!("{d0}Expires: {asctime}\r\n"), Ok(30)),
            // Origin clock 100 s ahead of or behind ours.
            (
                format!("Date: {}\r\nExpires: {}\r\n", imf(100), imf(130)),
                Ok(30),
            ),
            (
                format!("Date: {}\r\nExpires: {}\r\n", imf(-100), imf(-70)),
                Ok(30),
            ),
            // Without Date, the response time stands in.
            (format!("Expires: {}\r\n", imf(30)), Ok(30)),
            // Expires before Date, and invalid values: already expired.
            (
                format!("{d0}Expires: {}\r\nETag: \"e\"\r\n", imf(-5)),
                Ok(0),
            ),
            (
                format!("{d0}Expires: {}\r\n", imf(-5)),
                Err(NotStored::NoFreshness),
            ),
            ("Expires: 0\r\nETag: \"e\"\r\n".into(), Ok(0)),
            ("Expires: 0\r\n".into(), Err(NotStored::NoFreshness)),
            (
                format!("{d0}Expires: Tue, 14 Nov 2023 22:13:50 UTC\r\n"),
                Err(NotStored::NoFreshness),
            ),
            // The first Expires counts; max-age and s-maxage override it.
            (
                format!("{d0}Expires: {}\r\nExpires: {}\r\n", imf(30), imf(90)),
                Ok(30),
            ),
            (
                format!("{d0}Expires: 0\r\nCache-Control: max-age=5\r\n"),
                Ok(5),
            ),
            (
                format!("{d0}Expires: {}\r\nCache-Control: s-maxage=7\r\n", imf(30)),
                Ok(7),
            ),
        ];
        for (head, want) in table {
            assert_eq!(store(200, &head), want, "{head:?}");
        }
    }

    fn fresh(lifetime: u64, age: u64, cc: &str) -> Freshness {
        Freshness {
            lifetime,
            age,
            cc: ResponseDirectives::parse([cc.as_bytes()]),
            swr_default: 0,
            sie_default: 0,
        }
    }

    #[test]
    fn decisions() {
        let none = RequestDirectives::default();
        let rq = |v: &str| RequestDirectives::parse([v.as_bytes()], false);
        let reval = Use::Revalidate {
            stale_if_error: false,
        };
        let table = [
            (fresh(60, 10, ""), none, Use::Fresh),
            (fresh(60, 60, ""), none, reval),
            (fresh(60, 10, "no-cache"), none, reval),
            (fresh(60, 10, ""), rq("no-cache"), reval),
            (fresh(60, 10, ""), rq("max-age=5"), reval),
            (fresh(60, 10, ""), rq("max-age=10"), Use::Fresh),
            (fresh(60, 10, ""), rq("min-fresh=55"), reval),
            (fresh(60, 10, ""), rq("min-fresh=50"), Use::Fresh),
            (fresh(60, 70, ""), rq("max-stale"), Use::Fresh),
            (fresh(60, 70, ""), rq("max-stale=10"), Use::Fresh),
            (fresh(60, 70, ""), rq("max-stale=9"), reval),
            (fresh(60, 70, "must-revalidate"), rq("max-stale"), reval),
            (fresh(60, 70, "s-maxage=60"), rq("max-stale"), reval),
            (
                fresh(60, 70, "stale-while-revalidate=10"),
                none,
                Use::StaleWhileRevalidate,
            ),
            (fresh(60, 71, "stale-while-revalidate=10"), none, reval),
            (
                fresh(60, 70, "stale-if-error=10"),
                none,
                Use::Revalidate {
                    stale_if_error: true,
                },
            ),
            (
                fresh(60, 80, "stale-if-error=10, must-revalidate"),
                none,
                reval,
            ),
            (fresh(0, 0, ""), none, reval),
        ];
        for (i, (f, r, want)) in table.into_iter().enumerate() {
            assert_eq!(f.decide(&r), want, "row {i}: {f:?} {r:?}");
        }
        let mut route_default = fresh(60, 65, "");
        route_default.swr_default = 10;
        assert_eq!(route_default.decide(&none), Use::StaleWhileRevalidate);
        assert_eq!(fresh(60, 65, "").ttl(), -5);
    }
}
