//! Turning responses into stored entries and stored entries back into
//! responses: what is kept (§3.1: no Age, never Set-Cookie), Age and
//! Cache-Status on every response served from the cache, 304 answers to a
//! client's own validators, and header updates from an origin's 304
//! (§4.3.4).

use std::time::{Duration, Instant, SystemTime};

use std::sync::Arc;

use bytes::Bytes;
use hayate_core::field::{etag_list_matches, Comparison};
use hayate_core::{Body, Fields, Response, Status};

use crate::policy::{initial_age, ResponseFacts};
use crate::store::Stored;
use crate::vary::VaryKey;

/// Fields never stored: recomputed (Age), private to one client
/// (Set-Cookie), about the exchange rather than the representation, or
/// meant for hayate alone (RFC 9213: no one downstream is its target).
fn never_stored(name: &[u8]) -> bool {
    const NAMES: [&[u8]; 5] = [
        b"age",
        b"set-cookie",
        b"set-cookie2",
        b"cache-status",
        crate::targeted::OWN_FIELD,
    ];
    NAMES.iter().any(|n| n.eq_ignore_ascii_case(name))
}

/// Fields a 304 does not update (§3.2: they describe the stored body).
fn kept_on_update(name: &[u8]) -> bool {
    const NAMES: [&[u8]; 4] = [
        b"content-length",
        b"content-encoding",
        b"content-range",
        b"transfer-encoding",
    ];
    NAMES.iter().any(|n| n.eq_ignore_ascii_case(name))
}

/// A response's fields, shared ones then its own, as one list.
pub fn response_fields(resp: &Response) -> Fields {
    resp.all_fields().collect()
}

/// Everything [`stored_from`] needs besides the response.
#[derive(Debug)]
pub struct Admission<'a> {
    /// The response's facts.
    pub facts: &'a ResponseFacts,
    /// The freshness lifetime decided by the policy.
    pub lifetime: Duration,
    /// When the request was sent upstream.
    pub request_time: SystemTime,
    /// When the response head arrived.
    pub response_time: SystemTime,
    /// The same moment on the monotonic clock: resident time counts from
    /// it (§4.2.3).
    pub received: Instant,
    /// The request's Vary values.
    pub vary: VaryKey,
}

/// The entry to store for a response with fields `head`. It keeps the
/// origin's Date, which every hit serves with its Age; a response that
/// came without one is stored with the time it was received (RFC 9110
/// §6.6.1: a recipient that caches a response without Date adds one).
pub fn stored_from(status: Status, head: &Fields, body: Bytes, a: Admission<'_>) -> Stored {
    let own: Vec<&[u8]> = head.get_all(crate::targeted::OWN_FIELD).collect();
    let own_control = (!own.is_empty()).then(|| Bytes::from(own.join(&b", "[..])));
    let mut kept = head.clone();
    kept.retain(|name, _| !never_stored(name));
    if !kept.contains(b"date") {
        kept.push(b"Date", httpdate::fmt_http_date(a.response_time).as_bytes());
    }
    Stored {
        status,
        head: Arc::new(kept),
        body,
        vary: a.vary,
        etag: a.facts.etag.clone(),
        last_modified: a.facts.last_modified.as_ref().map(|(raw, _)| raw.clone()),
        cc: a.facts.cc,
        lifetime: a.lifetime,
        initial_age: initial_age(a.facts, a.request_time, a.response_time),
        stored_at: a.received,
        tags: a
            .facts
            .tags
            .iter()
            .map(|t| t.clone().into_boxed_slice())
            .collect(),
        own_control,
    }
}

/// The fields of a stored response refreshed by an origin's 304
/// (§4.3.4): the 304's fields replace the stored ones of the same name,
/// except those that describe the stored body — and the ETag of a variant
/// hayate compressed, whose own (weakened) tag names other bytes than the
/// origin's. A 304 without Date dates from its arrival, `received`
/// (RFC 9110 §6.6.1), which becomes the refreshed response's Date.
pub fn merged_304_head(old: &Stored, head_304: &Fields, received: SystemTime) -> Fields {
    let encoded = old.head.contains(b"content-encoding");
    let updated: Vec<(&[u8], &[u8])> = head_304
        .iter()
        .filter(|(n, _)| !never_stored(n) && !kept_on_update(n))
        .filter(|(n, _)| !(encoded && n.eq_ignore_ascii_case(b"etag")))
        .collect();
    let mut head = Fields::with_capacity(old.head.wire().len() + head_304.wire().len());
    for (name, value) in old.head.iter() {
        if !updated.iter().any(|(n, _)| n.eq_ignore_ascii_case(name)) {
            head.push(name, value);
        }
    }
    for (name, value) in updated {
        head.push(name, value);
    }
    if !head_304.contains(b"date") {
        head.retain(|n, _| !n.eq_ignore_ascii_case(b"date"));
        head.push(b"Date", httpdate::fmt_http_date(received).as_bytes());
    }
    // Hayate-Cache-Control is not in the stored head: the 304's, or the
    // one the response came with.
    let own = crate::targeted::OWN_FIELD;
    let own_304: Vec<&[u8]> = head_304.get_all(own).collect();
    if !own_304.is_empty() {
        head.push(own, &own_304.join(&b", "[..]));
    } else if let Some(v) = &old.own_control {
        head.push(own, v);
    }
    head
}

/// The conditional headers that revalidate `stored` (§4.3.1).
pub fn validators(stored: &Stored) -> Vec<(&'static [u8], Bytes)> {
    let mut v = Vec::new();
    if let Some(e) = &stored.etag {
        v.push((&b"If-None-Match"[..], e.clone()));
    }
    if let Some(lm) = &stored.last_modified {
        v.push((&b"If-Modified-Since"[..], lm.clone()));
    }
    v
}

/// A response from the cache: the stored one with its Age (the caller adds
/// Cache-Status).
pub fn from_store(stored: &Stored, age: u64) -> Response {
    let mut r = Response::new(stored.status);
    r.shared = Some(stored.head.clone());
    r.has_date = true; // stored_from gave every stored head one
    r.header("Age", itoa::Buffer::new().format(age).as_bytes());
    r.body = Body::Bytes(stored.body.clone());
    r
}

/// The client's own validators, from a GET or HEAD.
#[derive(Debug, Default, Clone, Copy)]
pub struct ClientValidators<'a> {
    /// If-None-Match.
    pub if_none_match: Option<&'a [u8]>,
    /// If-Modified-Since.
    pub if_modified_since: Option<&'a [u8]>,
}

impl ClientValidators<'_> {
    /// Whether the stored response satisfies them, so a 304 answers
    /// (RFC 9110 §13.1.2 weak comparison; §13.1.3 only without
    /// If-None-Match).
    pub fn not_modified(&self, stored: &Stored) -> bool {
        if let Some(inm) = self.if_none_match {
            let Some(etag) = &stored.etag else {
                return false;
            };
            return etag_list_matches(inm, etag, Comparison::Weak);
        }
        let (Some(ims), Some(lm)) = (self.if_modified_since, &stored.last_modified) else {
            return false;
        };
        let parse = hayate_core::date::parse;
        matches!((parse(ims), parse(lm)), (Some(ims), Some(lm)) if lm <= ims)
    }
}

/// A 304 for a client whose validators match `stored` (RFC 9110 §15.4.5:
/// the fields a 200 would carry that guide caches).
pub fn not_modified(stored: &Stored, age: u64) -> Response {
    const KEPT: [&[u8]; 6] = [
        b"etag",
        b"cache-control",
        b"expires",
        b"vary",
        b"content-location",
        b"last-modified",
    ];
    let mut r = Response::new(Status::NOT_MODIFIED);
    for (name, value) in stored.head.iter() {
        if KEPT.iter().any(|k| k.eq_ignore_ascii_case(name)) {
            r.fields.push(name, value);
        }
    }
    r.header("Age", itoa::Buffer::new().format(age).as_bytes());
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admission(facts: &ResponseFacts) -> Admission<'_> {
        let now = SystemTime::now();
        Admission {
            facts,
            lifetime: Duration::from_secs(60),
            request_time: now,
            response_time: now,
            received: Instant::now(),
            vary: VaryKey::default(),
        }
    }

    #[test]
    fn storing_drops_age_and_cookies_and_304_updates_fields() {
        let head = Fields::parse_wire(
            b"ETag: \"v1\"\r\nSet-Cookie: s=1\r\nAge: 9\r\nX-A: old\r\nContent-Type: text/plain\r\n\
              Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n",
        );
        let facts = ResponseFacts::from_fields(head.iter());
        let s = stored_from(
            Status::OK,
            &head,
            Bytes::from_static(b"body"),
            admission(&facts),
        );
        let text = String::from_utf8_lossy(s.head.wire()).into_owned();
        assert_eq!(
            text,
            "ETag: \"v1\"\r\nX-A: old\r\nContent-Type: text/plain\r\n\
             Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n"
        );
        assert!(s.initial_age > 9, "the Date is decades old");

        let h304 = Fields::parse_wire(
            b"X-A: new\r\nContent-Length: 0\r\nAge: 1\r\nCache-Control: max-age=5\r\n\
              Date: Mon, 07 Nov 1994 08:49:37 GMT\r\n",
        );
        let merged = merged_304_head(&s, &h304, SystemTime::now());
        assert_eq!(
            String::from_utf8_lossy(merged.wire()),
            "ETag: \"v1\"\r\nContent-Type: text/plain\r\nX-A: new\r\nCache-Control: max-age=5\r\n\
             Date: Mon, 07 Nov 1994 08:49:37 GMT\r\n"
        );
        // A 304 names the identity bytes; a compressed variant keeps its tag
        // (and a plain one takes the 304's).
        let h304 = Fields::parse_wire(b"ETag: \"v2\"\r\nX-A: newer\r\n");
        assert!(
            String::from_utf8_lossy(merged_304_head(&s, &h304, SystemTime::now()).wire())
                .contains("ETag: \"v2\"")
        );
        let head = Fields::parse_wire(b"ETag: W/\"v1\"\r\nContent-Encoding: br\r\n");
        let facts = ResponseFacts::from_fields(head.iter());
        let br = stored_from(Status::OK, &head, Bytes::new(), admission(&facts));
        let merged = String::from_utf8_lossy(merged_304_head(&br, &h304, SystemTime::now()).wire())
            .into_owned();
        // That 304 had no Date: it dates from its arrival.
        let (kept, date) = merged.split_once("Date: ").expect("a Date");
        assert_eq!(
            kept,
            "ETag: W/\"v1\"\r\nContent-Encoding: br\r\nX-A: newer\r\n"
        );
        assert!(date.ends_with(" GMT\r\n") && date.len() == 31, "{merged}");
    }

    #[test]
    fn hayate_cache_control_is_kept_aside_and_survives_a_304() {
        let head = Fields::parse_wire(
            b"Cache-Control: no-store\r\nHayate-Cache-Control: max-age=60\r\nX-A: 1\r\n",
        );
        let facts = ResponseFacts::from_fields(head.iter());
        assert_eq!(facts.cc.max_age, Some(60));
        let s = stored_from(Status::OK, &head, Bytes::new(), admission(&facts));
        assert!(!s.head.contains(b"hayate-cache-control"), "never served");
        assert_eq!(s.own_control.as_deref(), Some(&b"max-age=60"[..]));
        let now = SystemTime::now();
        let merged = merged_304_head(&s, &Fields::parse_wire(b"X-A: 2\r\n"), now);
        assert_eq!(
            ResponseFacts::from_fields(merged.iter()).cc.max_age,
            Some(60)
        );
        let h304 = Fields::parse_wire(b"Hayate-Cache-Control: max-age=5\r\n");
        let merged = merged_304_head(&s, &h304, now);
        assert_eq!(
            ResponseFacts::from_fields(merged.iter()).cc.max_age,
            Some(5)
        );
    }

    #[test]
    fn a_response_without_date_is_stored_with_the_time_it_arrived() {
        let head = Fields::parse_wire(b"ETag: \"v1\"\r\n");
        let facts = ResponseFacts::from_fields(head.iter());
        let mut a = admission(&facts);
        a.response_time = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777);
        let s = stored_from(Status::OK, &head, Bytes::new(), a);
        assert_eq!(
            String::from_utf8_lossy(s.head.wire()),
            "ETag: \"v1\"\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\n"
        );
        assert!(from_store(&s, 0).has_date);
    }

    #[test]
    fn client_validators() {
        let lm = httpdate::fmt_http_date(SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000));
        let later =
            httpdate::fmt_http_date(SystemTime::UNIX_EPOCH + Duration::from_secs(2_000_000));
        let head = format!("ETag: W/\"v1\"\r\nLast-Modified: {lm}\r\nContent-Type: x\r\n");
        let head = Fields::parse_wire(head.as_bytes());
        let facts = ResponseFacts::from_fields(head.iter());
        let s = stored_from(Status::OK, &head, Bytes::new(), admission(&facts));
        let inm = |v: &'static str| ClientValidators {
            if_none_match: Some(v.as_bytes()),
            if_modified_since: None,
        };
        assert!(inm("\"v1\"").not_modified(&s));
        assert!(inm("\"x\", W/\"v1\"").not_modified(&s));
        assert!(inm("*").not_modified(&s));
        assert!(!inm("\"v2\"").not_modified(&s));
        let ims = |v: String| ClientValidators {
            if_none_match: None,
            if_modified_since: Some(v.leak().as_bytes()),
        };
        assert!(ims(later.clone()).not_modified(&s));
        assert!(ims(lm.clone()).not_modified(&s));
        assert!(!ims(httpdate::fmt_http_date(SystemTime::UNIX_EPOCH)).not_modified(&s));

        let r = not_modified(&s, 3);
        let text = String::from_utf8_lossy(r.fields.wire()).into_owned();
        assert!(
            text.starts_with("ETag: W/\"v1\"\r\nLast-Modified: "),
            "{text}"
        );
        assert!(
            !text.contains("Content-Type") && text.contains("Age: 3\r\n"),
            "{text}"
        );
    }
}
