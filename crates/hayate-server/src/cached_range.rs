//! Range requests answered from a stored response (RFC 9110 §14, RFC 9111
//! §3.4's converse): a fresh stored 200 answers `Range` with 206 (one
//! range, or multipart/byteranges), 416 when no range fits, or the whole
//! response when `If-Range` no longer matches or the set is abusive — with
//! the static files' range code, so both answer alike.
//!
//! Only complete stored responses get here: a Range request that misses is
//! forwarded as it is (the cache stores no partial content).

use std::time::Duration;

use hayate_cache::Stored;
use hayate_core::field::{etag_matches, trim_ows, Comparison};
use hayate_core::{Body, Chunk, Fields, Response, Status};
use hayate_static::range::{self, RangeDecision};

/// The answer to `range` (a GET's Range value) from `stored`, or `None`
/// when the whole stored response answers (not a 200, an If-Range that
/// does not match, a Range hayate ignores). Age and Cache-Status are the
/// caller's.
pub fn answer(stored: &Stored, range: &[u8], if_range: Option<&[u8]>) -> Option<Response> {
    if stored.status != Status::OK || !if_range.is_none_or(|v| if_range_matches(stored, v)) {
        return None;
    }
    let total = stored.body.len() as u64;
    let slice = |r: &std::ops::Range<u64>| stored.body.slice(r.start as usize..r.end as usize);
    let mut resp = Response::new(Status::PARTIAL_CONTENT);
    resp.has_date = true;
    match range::decide(range, total) {
        RangeDecision::Full => return None,
        RangeDecision::Single(r) => {
            resp.shared = Some(stored.head.clone());
            resp.header("Content-Range", range::content_range(&r, total).as_bytes());
            resp.body = Body::Bytes(slice(&r));
        }
        RangeDecision::Multi(ranges) => {
            let content_type = stored.head.get(b"content-type").unwrap_or_default();
            let content_type = String::from_utf8_lossy(content_type);
            let (multipart_type, parts) =
                range::multipart(ranges, &content_type, total, |r| Chunk::Bytes(slice(&r)));
            let mut head = Fields::with_capacity(stored.head.wire().len());
            for (name, value) in stored.head.iter() {
                if !name.eq_ignore_ascii_case(b"content-type") {
                    head.push(name, value);
                }
            }
            head.push(b"Content-Type", multipart_type.as_bytes());
            resp.fields = head;
            resp.body = Body::Parts(parts);
        }
        RangeDecision::Unsatisfiable => {
            let mut resp = Response::error(Status::RANGE_NOT_SATISFIABLE);
            resp.header("Content-Range", format!("bytes */{total}").as_bytes());
            return Some(resp);
        }
    }
    Some(resp)
}

/// RFC 9110 §13.1.5: an entity-tag matches the stored one by strong
/// comparison; a date matches a Last-Modified equal to it that is a strong
/// validator (at least a second before the stored Date, §8.8.2.2).
fn if_range_matches(stored: &Stored, value: &[u8]) -> bool {
    let value = trim_ows(value);
    if value.first() == Some(&b'"') || value.starts_with(b"W/") {
        return stored
            .etag
            .as_ref()
            .is_some_and(|e| etag_matches(value, e, Comparison::Strong));
    }
    let parse = hayate_core::date::parse;
    let (Some(date), Some(lm), Some(stored_date)) = (
        parse(value),
        stored.last_modified.as_deref().and_then(parse),
        stored.head.get(b"date").and_then(parse),
    ) else {
        return false;
    };
    date == lm && lm + Duration::from_secs(1) <= stored_date
}
