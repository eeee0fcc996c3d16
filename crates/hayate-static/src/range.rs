//! The Range header (RFC 9110 §14.2), with guards against abusive sets.
//!
//! A set that is too long, overlaps or asks for more bytes than the file has
//! is answered with the whole file (200) rather than amplified: this is the
//! defence against the "many overlapping ranges" denial of service
//! (CVE-2011-3192 against Apache).

use hayate_core::field::{parse_length, trim_ows as trim};
use hayate_core::Chunk;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;

/// A multipart/byteranges body (RFC 9110 §14.6) for `ranges` of a
/// representation of `total` bytes and type `content_type`: each part's
/// head and its bytes (`part` gives them), then the closing boundary. Also
/// returns the Content-Type that names the boundary. Static files and the
/// response cache both answer with it.
pub fn multipart(
    ranges: Vec<Range<u64>>,
    content_type: &str,
    total: u64,
    mut part: impl FnMut(Range<u64>) -> Chunk,
) -> (String, Vec<Chunk>) {
    let boundary = boundary();
    let mut parts = Vec::with_capacity(ranges.len() * 2 + 1);
    for range in ranges {
        let part_head = format!(
            "\r\n--{boundary}\r\nContent-Type: {content_type}\r\nContent-Range: bytes {}-{}/{total}\r\n\r\n",
            range.start,
            range.end - 1,
        );
        parts.push(Chunk::Bytes(Bytes::from(part_head)));
        parts.push(part(range));
    }
    parts.push(Chunk::Bytes(Bytes::from(format!("\r\n--{boundary}--\r\n"))));
    (format!("multipart/byteranges; boundary={boundary}"), parts)
}

/// A multipart boundary unique within the process.
fn boundary() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0x5eed_1e55_f00d);
    let n = COUNTER.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed);
    format!("hayate-{n:016x}")
}

/// The Content-Range of one range of a `total`-byte representation.
pub fn content_range(range: &Range<u64>, total: u64) -> String {
    format!("bytes {}-{}/{total}", range.start, range.end - 1)
}

/// Most ranges honoured in one request; more gets the whole file.
pub const MAX_RANGES: usize = 16;

/// What to do with a Range header, for a representation of `len` bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RangeDecision {
    /// No usable Range: send the whole representation (200).
    Full,
    /// One range (206 with Content-Range).
    Single(Range<u64>),
    /// Several ranges, in request order (206 multipart/byteranges).
    Multi(Vec<Range<u64>>),
    /// No range overlaps the representation (416, `Content-Range: bytes */len`).
    Unsatisfiable,
}

/// Decides how to answer `header` for a representation of `len` bytes.
pub fn decide(header: &[u8], len: u64) -> RangeDecision {
    let Some(specs) = parse(header) else {
        return RangeDecision::Full;
    };
    if specs.len() > MAX_RANGES {
        return RangeDecision::Full;
    }
    let mut ranges: Vec<Range<u64>> = Vec::with_capacity(specs.len());
    for spec in specs {
        let r = match spec {
            Spec::From(start, end) => {
                if start >= len {
                    continue;
                }
                start..end.map_or(len, |e| e.saturating_add(1).min(len))
            }
            Spec::Suffix(n) => {
                if n == 0 {
                    continue;
                }
                len.saturating_sub(n)..len
            }
        };
        if !r.is_empty() {
            ranges.push(r);
        }
    }
    match ranges.len() {
        0 => RangeDecision::Unsatisfiable,
        1 => RangeDecision::Single(ranges.remove(0)),
        _ => {
            let total: u64 = ranges.iter().map(|r| r.end - r.start).sum();
            let mut sorted = ranges.clone();
            sorted.sort_by_key(|r| r.start);
            let overlapping = sorted.windows(2).any(|w| w[1].start < w[0].end);
            if overlapping || total > len {
                RangeDecision::Full
            } else {
                RangeDecision::Multi(ranges)
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Spec {
    /// `first-[last]`
    From(u64, Option<u64>),
    /// `-suffix`
    Suffix(u64),
}

/// Parses `bytes=...`; `None` for another unit or bad syntax (then the header
/// is ignored, as RFC 9110 allows).
fn parse(header: &[u8]) -> Option<Vec<Spec>> {
    let header = trim(header);
    if header.len() < 6 || !header[..6].eq_ignore_ascii_case(b"bytes=") {
        return None;
    }
    let mut specs = Vec::new();
    for part in header[6..].split(|&b| b == b',') {
        let part = trim(part);
        if part.is_empty() {
            continue;
        }
        let dash = part.iter().position(|&b| b == b'-')?;
        let (first, last) = (trim(&part[..dash]), trim(&part[dash + 1..]));
        let spec = if first.is_empty() {
            Spec::Suffix(parse_length(last)?)
        } else {
            let start = parse_length(first)?;
            let end = if last.is_empty() {
                None
            } else {
                Some(parse_length(last)?)
            };
            if end.is_some_and(|e| e < start) {
                return None;
            }
            Spec::From(start, end)
        };
        specs.push(spec);
        if specs.len() > MAX_RANGES {
            break;
        }
    }
    if specs.is_empty() {
        None
    } else {
        Some(specs)
    }
}

#[cfg(test)]
mod tests {
    use super::RangeDecision::*;
    use super::*;

    #[test]
    fn table() {
        let cases: &[(&str, u64, RangeDecision)] = &[
            ("bytes=0-9", 100, Single(0..10)),
            ("bytes=90-", 100, Single(90..100)),
            ("bytes=-10", 100, Single(90..100)),
            ("bytes=-1000", 100, Single(0..100)),
            ("bytes=95-200", 100, Single(95..100)),
            ("BYTES = 0-0", 100, Full),
            ("Bytes=0-0", 100, Single(0..1)),
            ("bytes=100-", 100, Unsatisfiable),
            ("bytes=-0", 100, Unsatisfiable),
            ("bytes=0-1,5-6", 100, Multi(vec![0..2, 5..7])),
            ("bytes=5-6, 0-1", 100, Multi(vec![5..7, 0..2])),
            ("bytes=0-5,3-8", 100, Full),
            ("bytes=0-99,-1", 100, Full),
            ("bytes=0-1,200-300", 100, Single(0..2)),
            ("bytes=5-1", 100, Full),
            ("bytes=x-1", 100, Full),
            ("items=0-1", 100, Full),
            ("bytes=", 100, Full),
            ("bytes=99999999999999999999-", 100, Full),
            ("bytes=0-", 0, Unsatisfiable),
            ("bytes=-5", 0, Unsatisfiable),
        ];
        for (header, len, want) in cases {
            assert_eq!(
                &decide(header.as_bytes(), *len),
                want,
                "Range: {header} (len {len})"
            );
        }
    }

    #[test]
    fn too_many_ranges_get_the_whole_file() {
        let many: Vec<String> = (0..=MAX_RANGES as u64)
            .map(|i| format!("{}-{}", i * 10, i * 10 + 1))
            .collect();
        let header = format!("bytes={}", many.join(","));
        assert_eq!(decide(header.as_bytes(), 10_000), Full);
        let ok: Vec<String> = (0..MAX_RANGES as u64)
            .map(|i| format!("{}-{}", i * 10, i * 10 + 1))
            .collect();
        assert!(
            matches!(decide(format!("bytes={}", ok.join(",")).as_bytes(), 10_000), Multi(v) if v.len() == MAX_RANGES)
        );
    }
}
