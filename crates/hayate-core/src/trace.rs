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

/// Boxes a thread keeps for its next traced requests: a worker's requests
/// in flight, at most. With a hundred requests in flight, a hundred boxes
/// of one size are more than glibc's per-thread cache keeps (7), and the
/// rest took the allocator's slow path both ways; even one at a time,
/// malloc and free cost ~200 instructions a request in a process of
/// several threads (its arena locked), as tracing's exporter makes it.
pub const MAX_SPARE: usize = 256;

thread_local! {
    // The boxes themselves are what is kept: each goes back into a
    // request head as it is.
    #[allow(clippy::vec_box)]
    static SPARE: RefCell<Vec<Box<RequestTrace>>> = const { RefCell::new(Vec::new()) };
}

/// The trace of `head` (see [`RequestTrace::start`]), in one of the
/// thread's spare boxes when it has one.
pub fn boxed(head: &RequestHead, sample_below: u64) -> Box<RequestTrace> {
    let trace = RequestTrace::start(head, sample_below);
    match SPARE.with(|s| s.borrow_mut().pop()) {
        Some(mut spare) => {
            *spare = trace;
            spare
        }
        None => Box::new(trace),
    }
}

/// Keeps `trace`'s box for the thread's next traced request (a request
/// head gives it back as it is dropped). At a thread's exit its spares
/// may be gone already: then the box is freed.
#[inline(never)]
pub fn keep_spare(trace: Box<RequestTrace>) {
    let _ = SPARE.try_with(|s| {
        let mut spare = s.borrow_mut();
        if spare.len() < MAX_SPARE {
            spare.push(trace);
        }
    });
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
    let half = |b: &[u8]| u64::from_be_bytes(b.try_into().unwrap_or_default());
    let mut out = [b'-'; TRACEPARENT_LEN];
    out[0..2].copy_from_slice(b"00");
    out[3..19].copy_from_slice(&hex16(half(&trace_id[..8])));
    out[19..35].copy_from_slice(&hex16(half(&trace_id[8..])));
    out[36..52].copy_from_slice(&hex16(u64::from_be_bytes(*span_id)));
    out[53..55].copy_from_slice(if sampled { b"01" } else { b"00" });
    out
}

/// `v` as 16 lower-case hex digits, computed in one 128-bit register:
/// each nibble spread into a byte of its own, then the ten digits and six
/// letters told apart and moved to their ASCII ranges, all 16 at once.
/// A table lookup per nibble cost a traced request ~250 instructions for
/// its 48 digits (bench/instructions/run --cases traced).
fn hex16(v: u64) -> [u8; 16] {
    let v = u128::from(v);
    let mut x = (v >> 32) << 64 | (v & 0xffff_ffff);
    x = (x & 0x0000_0000_ffff_0000_0000_0000_ffff_0000) << 16
        | (x & 0x0000_0000_0000_ffff_0000_0000_0000_ffff);
    x = (x & 0x0000_ff00_0000_ff00_0000_ff00_0000_ff00) << 8
        | (x & 0x0000_00ff_0000_00ff_0000_00ff_0000_00ff);
    x = (x & 0x00f0_00f0_00f0_00f0_00f0_00f0_00f0_00f0) << 4
        | (x & 0x000f_000f_000f_000f_000f_000f_000f_000f);
    // Byte k holds nibble k (0 the lowest). A nibble of 10 or more
    // carries into bit 4 once 6 is added (never past its byte: 15 + 6).
    const ONES: u128 = 0x0101_0101_0101_0101_0101_0101_0101_0101;
    let letters = ((x + 6 * ONES) >> 4) & ONES;
    // '0' is 0x30; 'a' is 39 past '0' + 10.
    (x + 0x30 * ONES + 39 * letters).to_be_bytes()
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
    fn a_traces_box_is_used_again_by_its_thread() {
        let mut first = head(&[VALID]);
        first.trace = Some(boxed(&first, u64::MAX));
        let at = first.trace.as_deref().map(std::ptr::from_ref);
        drop(first);
        let second = boxed(&head(&[]), u64::MAX);
        assert_eq!(Some(std::ptr::from_ref::<RequestTrace>(&second)), at);
        assert_eq!(second.parent_span_id, None, "a new trace in the old box");
    }

    #[test]
    fn hex_digits_are_the_bytes_lower_case() {
        let mut v = 0x0123_4567_89ab_cdefu64;
        for _ in 0..1000 {
            assert_eq!(hex16(v), *format!("{v:016x}").as_bytes());
            v = v.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(17) ^ 0xff;
        }
        assert_eq!(&hex16(0), b"0000000000000000");
        assert_eq!(&hex16(u64::MAX), b"ffffffffffffffff");
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
