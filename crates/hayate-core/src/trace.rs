//! A request's place in a distributed trace (W3C Trace Context, level 1):
//! the `traceparent` a client sent, read by the specification's rules (one
//! that breaks them is ignored and a new trace begins), the span hayate
//! makes for the request, and the `traceparent` sent on to upstreams with
//! that span as the parent.
//!
//! Only ids and flags live here; what a span records and how it is
//! exported belongs to the server (`hayate_server::otel`).

use std::cell::{Cell, RefCell};
use std::hash::{BuildHasher, Hasher};
use std::time::SystemTime;

use crate::request::RequestHead;

/// The length of a version-00 `traceparent`:
/// `00-` 32 hex `-` 16 hex `-` 2 hex.
pub const TRACEPARENT_LEN: usize = 55;

/// The trace of one request, made when tracing is on (boxed in the request
/// head: 8 bytes there when off).
#[derive(Debug, Clone)]
pub struct RequestTrace {
    /// The trace: the client's, or a new random one.
    pub trace_id: [u8; 16],
    /// hayate's span for this request.
    pub span_id: [u8; 8],
    /// The client's span, when its `traceparent` was valid.
    pub parent_span_id: Option<[u8; 8]>,
    /// Whether the span is exported (and the flag sent upstream).
    pub sampled: bool,
    /// The `traceparent` value sent upstream: this trace, hayate's span.
    pub traceparent: [u8; TRACEPARENT_LEN],
    /// When the span began (its head was read).
    pub start: SystemTime,
    /// What a handler noted as it happened, to become the span's events
    /// (the cache: a wait for another request's fill); few, and only for
    /// requests that meet such a wait.
    pub events: RefCell<Vec<(SystemTime, &'static str)>>,
}

/// A valid incoming `traceparent`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    /// Its trace id (not all zero).
    pub trace_id: [u8; 16],
    /// Its span id, the parent of hayate's (not all zero).
    pub span_id: [u8; 8],
    /// Its flags; bit 0 is "sampled".
    pub flags: u8,
}

impl TraceParent {
    /// Parses a `traceparent` value (W3C Trace Context §3.2): version 00 is
    /// exactly 55 characters; a later version may be longer, with `-`
    /// after the first 55, and is read as 00; version ff, upper-case hex,
    /// and all-zero ids are invalid.
    pub fn parse(value: &[u8]) -> Option<TraceParent> {
        let value = value.trim_ascii();
        if value.len() < TRACEPARENT_LEN {
            return None;
        }
        let version = hex_byte(&value[0..2])?;
        if version == 0xff
            || (version == 0 && value.len() != TRACEPARENT_LEN)
            || (value.len() > TRACEPARENT_LEN && value[TRACEPARENT_LEN] != b'-')
        {
            return None;
        }
        if value[2] != b'-' || value[35] != b'-' || value[52] != b'-' {
            return None;
        }
        let mut trace_id = [0u8; 16];
        for (i, b) in trace_id.iter_mut().enumerate() {
            *b = hex_byte(&value[3 + 2 * i..5 + 2 * i])?;
        }
        let mut span_id = [0u8; 8];
        for (i, b) in span_id.iter_mut().enumerate() {
            *b = hex_byte(&value[36 + 2 * i..38 + 2 * i])?;
        }
        let flags = hex_byte(&value[53..55])?;
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        Some(TraceParent {
            trace_id,
            span_id,
            flags,
        })
    }
}

impl RequestTrace {
    /// The trace of `head`: continues a valid `traceparent` (one field;
    /// several are invalid, §3.2), else begins a new trace. A new trace is
    /// sampled when its id falls under `sample_below` (see
    /// [`sample_threshold`]); a continued one only when the client's flag
    /// also says sampled, so a client can turn export off for its trace
    /// but never raise it past the configured share.
    pub fn start(head: &RequestHead, sample_below: u64) -> RequestTrace {
        let mut fields = head.headers_named(b"traceparent");
        let parent = match (fields.next(), fields.next()) {
            (Some(one), None) => TraceParent::parse(one),
            _ => None,
        };
        let trace_id = match parent {
            Some(p) => p.trace_id,
            None => random_trace_id(),
        };
        let parent_sampled = parent.is_none_or(|p| p.flags & 1 == 1);
        let sampled = parent_sampled && ratio_key(&trace_id) < sample_below;
        let span_id = random_span_id();
        RequestTrace {
            trace_id,
            span_id,
            parent_span_id: parent.map(|p| p.span_id),
            sampled,
            traceparent: traceparent(&trace_id, &span_id, sampled),
            start: SystemTime::now(),
            events: RefCell::default(),
        }
    }

    /// Notes `what` as happening now, an event of the span.
    pub fn note(&self, what: &'static str) {
        if self.sampled {
            self.events.borrow_mut().push((SystemTime::now(), what));
        }
    }

    /// The trace id as 32 lower-case hex digits (`$trace_id`).
    pub fn trace_id_hex(&self) -> &[u8] {
        &self.traceparent[3..35]
    }
}

/// The threshold [`RequestTrace::start`] compares a trace's key with for a
/// share `ratio` (0 to 1) of traces, as OpenTelemetry's TraceIdRatioBased
/// sampler: the trace id's last 8 bytes, halved, below `ratio` × 2^63.
pub fn sample_threshold(ratio: f64) -> u64 {
    if ratio >= 1.0 {
        u64::MAX
    } else {
        (ratio.max(0.0) * (1u64 << 63) as f64) as u64
    }
}

fn ratio_key(trace_id: &[u8; 16]) -> u64 {
    let mut low = [0u8; 8];
    low.copy_from_slice(&trace_id[8..]);
    u64::from_be_bytes(low) >> 1
}

/// `00-TRACE-SPAN-FLAGS`.
fn traceparent(trace_id: &[u8; 16], span_id: &[u8; 8], sampled: bool) -> [u8; TRACEPARENT_LEN] {
    let mut out = [b'-'; TRACEPARENT_LEN];
    out[0..2].copy_from_slice(b"00");
    write_hex(&mut out[3..35], trace_id);
    write_hex(&mut out[36..52], span_id);
    out[53..55].copy_from_slice(if sampled { b"01" } else { b"00" });
    out
}

fn write_hex(out: &mut [u8], bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (i, b) in bytes.iter().enumerate() {
        out[2 * i] = DIGITS[usize::from(b >> 4)];
        out[2 * i + 1] = DIGITS[usize::from(b & 0xf)];
    }
}

/// Two lower-case hex digits (the specification allows no upper case).
fn hex_byte(two: &[u8]) -> Option<u8> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    Some(digit(two[0])? << 4 | digit(two[1])?)
}

thread_local! {
    /// splitmix64's state, seeded per thread from the process's random
    /// hasher keys (ids need to be unique and unguessable enough to not
    /// collide, not secret: W3C Trace Context §6).
    static ID_STATE: Cell<u64> = Cell::new({
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(u64::from(std::process::id()));
        h.finish()
    });
}

fn next_random() -> u64 {
    ID_STATE.with(|s| {
        let v = s.get().wrapping_add(0x9e37_79b9_7f4a_7c15);
        s.set(v);
        let mut z = v;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    })
}

fn random_trace_id() -> [u8; 16] {
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&next_random().to_be_bytes());
    id[8..].copy_from_slice(&next_random().to_be_bytes());
    if id == [0; 16] {
        id[15] = 1;
    }
    id
}

fn random_span_id() -> [u8; 8] {
    match next_random() {
        0 => 1u64.to_be_bytes(),
        n => n.to_be_bytes(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::{RequestHead, Version};
    use crate::transport::Scheme;

    const VALID: &[u8] = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn head(traceparents: &[&[u8]]) -> RequestHead {
        let mut h = RequestHead::new(b"GET", b"/", Version::Http11, Scheme::Http);
        for t in traceparents {
            h.push_field(b"traceparent", t);
        }
        h
    }

    #[test]
    fn a_valid_traceparent_is_read() {
        let p = TraceParent::parse(VALID).unwrap();
        assert_eq!(p.trace_id[0], 0x4b);
        assert_eq!(p.span_id[7], 0xb7);
        assert_eq!(p.flags, 1);
        // A later version may carry more after a dash.
        assert!(TraceParent::parse(&[&b"01"[..], &VALID[2..], b"-what"].concat()).is_some());
    }

    #[test]
    fn malformed_traceparents_are_ignored() {
        let upper = VALID.to_ascii_uppercase();
        let bad: &[&[u8]] = &[
            b"",
            &VALID[..54],
            &[VALID, b"-x"].concat(), // version 00 is exactly 55
            &upper,
            b"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            b"00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            b"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            b"00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
        ];
        for b in bad {
            assert_eq!(
                TraceParent::parse(b),
                None,
                "{}",
                String::from_utf8_lossy(b)
            );
        }
    }

    #[test]
    fn a_request_continues_its_clients_trace_under_a_new_span() {
        let t = RequestTrace::start(&head(&[VALID]), u64::MAX);
        assert_eq!(t.trace_id_hex(), b"4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(
            t.parent_span_id,
            Some(TraceParent::parse(VALID).unwrap().span_id)
        );
        assert!(t.sampled);
        let sent = TraceParent::parse(&t.traceparent).unwrap();
        assert_eq!(sent.trace_id, t.trace_id);
        assert_eq!(sent.span_id, t.span_id);
        assert_ne!(&t.traceparent[36..52], &VALID[36..52]);
        assert_eq!(sent.flags, 1);
    }

    #[test]
    fn a_new_trace_begins_without_a_valid_traceparent() {
        for fields in [&[][..], &[&b"00-bad"[..]], &[VALID, VALID]] {
            let t = RequestTrace::start(&head(fields), u64::MAX);
            assert_eq!(t.parent_span_id, None);
            assert_ne!(t.trace_id_hex(), b"4bf92f3577b34da6a3ce929d0e0e4736");
            assert!(t.sampled);
        }
        let a = RequestTrace::start(&head(&[]), u64::MAX);
        let b = RequestTrace::start(&head(&[]), u64::MAX);
        assert_ne!(a.trace_id, b.trace_id);
    }

    #[test]
    fn an_unsampled_parent_stays_unsampled_and_a_sampled_one_within_the_ratio() {
        let unsampled = [&VALID[..53], b"00"].concat();
        let t = RequestTrace::start(&head(&[&unsampled]), u64::MAX);
        assert!(!t.sampled);
        assert_eq!(&t.traceparent[53..], b"00");
        // A sampled flag cannot lift a trace the ratio leaves out.
        let t = RequestTrace::start(&head(&[VALID]), sample_threshold(0.0));
        assert!(!t.sampled);
    }

    #[test]
    fn the_ratio_samples_about_its_share_of_new_traces() {
        let below = sample_threshold(0.25);
        let sampled = (0..4000)
            .filter(|_| RequestTrace::start(&head(&[]), below).sampled)
            .count();
        assert!((800..1200).contains(&sampled), "{sampled} of 4000 at 0.25");
        assert_eq!(sample_threshold(1.0), u64::MAX);
        assert_eq!(sample_threshold(0.0), 0);
    }
}
