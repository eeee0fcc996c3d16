//! OpenTelemetry tracing (`otel_endpoint`): a span of kind SERVER per
//! request, begun as its head is read (`hayate_core::trace`: the client's
//! `traceparent` continued, or a new trace) and ended as its response is
//! written, with the request's route, status, protocol, client, cache
//! status, bytes and upstream times; exported off the request path by
//! [`export`]'s thread.
//!
//! Tracing off costs a request one test of `Generation::tracer` (`None`).
//! Spans are counted on /metrics: exported, and dropped (queue full,
//! collector slow, down or refusing).
//!
//! OTLP is encoded by hand ([`proto`]) rather than with the OpenTelemetry
//! crates: decision 0022 has the measurements.

mod export;
mod proto;
mod spans;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hayate_config::GlobalOptions;
use hayate_core::request::{RequestHead, Version};
use hayate_core::trace::{sample_threshold, RequestTrace};

use crate::access_log::Entry;
use export::ExportSettings;
use proto::Message;
use spans::Spans;

/// Spans the collector took.
static EXPORTED: AtomicU64 = AtomicU64::new(0);
/// Spans dropped: a worker's buffer was full, or the collector did not
/// take them.
static DROPPED: AtomicU64 = AtomicU64::new(0);

/// The exporter every generation with the same settings shares: a reload
/// that leaves the otel_* options alone keeps it (and its queue).
static EXPORTER: Mutex<Option<(ExportSettings, export::Exporter)>> = Mutex::new(None);

/// The longest an exit waits for the last spans to be sent.
const EXIT_WAIT: Duration = Duration::from_secs(2);

/// A generation's tracer: how it samples and where its spans go.
#[derive(Clone)]
pub struct Tracer {
    sample_below: u64,
    spans: std::sync::Arc<Spans>,
}

impl std::fmt::Debug for Tracer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracer")
            .field("sample_below", &self.sample_below)
            .finish_non_exhaustive()
    }
}

impl Tracer {
    /// The tracer of `g`, when `otel_endpoint` is set.
    pub(crate) fn of(g: &GlobalOptions) -> std::io::Result<Option<Tracer>> {
        let mut exporter = EXPORTER.lock().unwrap_or_else(|e| e.into_inner());
        let Some(endpoint) = &g.otel_endpoint else {
            // Turned off: the exporter ends once the generations that
            // still hold its spans do.
            *exporter = None;
            return Ok(None);
        };
        let settings = ExportSettings {
            endpoint: endpoint.clone(),
            protocol: g.otel_protocol,
            service_name: g.otel_service_name.clone(),
            headers: g.otel_headers.clone().unwrap_or_default(),
            queue: g.otel_queue as usize,
            timeout: g.otel_timeout.0,
            ca: g.otel_ca.clone(),
            client_cert: g.otel_tls_cert.clone().zip(g.otel_tls_key.clone()),
        };
        let spans = match &*exporter {
            Some((s, e)) if *s == settings && e.is_running() => e.spans.clone(),
            _ => {
                let started = export::start(settings.clone())?;
                let spans = started.spans.clone();
                *exporter = Some((settings, started));
                spans
            }
        };
        Ok(Some(Tracer {
            sample_below: sample_threshold(g.otel_sample.0),
            spans,
        }))
    }

    /// The trace of a request whose head was just read.
    #[inline(never)]
    pub(crate) fn start(&self, head: &RequestHead) -> Box<RequestTrace> {
        hayate_core::trace::boxed(head, self.sample_below)
    }

    /// Ends the span of a request whose response was written, and queues it
    /// for export if it is sampled. `member` is the upstream member that
    /// answered, if one did.
    #[inline(never)]
    pub(crate) fn finish(
        &self,
        head: &RequestHead,
        trace: &RequestTrace,
        e: &Entry<'_>,
        member: Option<&str>,
    ) {
        if !trace.sampled {
            return;
        }
        if !self.spans.push(|s| encode_span(s, head, trace, e, member)) {
            DROPPED.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn unix_nanos(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// A `Span` message (trace.proto) with the HTTP semantic conventions'
/// attribute names where they have one, `hayate.*` for the rest.
fn encode_span(
    s: &mut Message,
    head: &RequestHead,
    trace: &RequestTrace,
    e: &Entry<'_>,
    member: Option<&str>,
) {
    let start = unix_nanos(trace.start);
    let end = start + u64::try_from(e.duration.as_nanos()).unwrap_or(0);
    // The route's prefix is its path template (`http.route`); its site,
    // when it has a name, is an attribute of its own.
    let (site, prefix) = e.route.unwrap_or(("*", b""));
    s.bytes(1, &trace.trace_id);
    s.bytes(2, &trace.span_id);
    if let Some(state) = head.header(b"tracestate") {
        s.bytes(3, state);
    }
    if let Some(parent) = &trace.parent_span_id {
        s.bytes(4, parent);
    }
    // The span's name: the method, and the route when it has one.
    match prefix.is_empty() {
        true => s.bytes(5, head.method()),
        false => s.bytes_joined(5, &[head.method(), b" ", prefix]),
    }
    s.uint(6, proto::KIND_SERVER);
    s.fixed64(7, start);
    s.fixed64(8, end);
    s.str_attr(9, "http.request.method", head.method());
    s.str_attr(9, "url.path", head.path());
    let scheme: &[u8] = match head.scheme {
        hayate_core::transport::Scheme::Https => b"https",
        hayate_core::transport::Scheme::Http => b"http",
    };
    s.str_attr(9, "url.scheme", scheme);
    s.int_attr(9, "http.response.status_code", e.status.into());
    let version: &[u8] = match head.version {
        Version::Http10 => b"1.0",
        Version::Http11 => b"1.1",
        Version::Http2 => b"2",
        Version::Http3 => b"3",
    };
    s.str_attr(9, "network.protocol.version", version);
    s.str_attr(9, "client.address", e.peer.as_bytes());
    if let Some(host) = head.host() {
        s.str_attr(9, "server.address", hayate_core::field::strip_port(host));
    }
    if !prefix.is_empty() {
        s.str_attr(9, "http.route", prefix);
    }
    if site != "*" {
        s.str_attr(9, "hayate.site", site.as_bytes());
    }
    s.int_attr(9, "http.response.body.size", e.bytes);
    if let Some(code) = e.grpc_status {
        s.int_attr(9, "rpc.grpc.status_code", code.into());
    }
    if let Some(cache) = e.cache {
        s.str_attr(9, "hayate.cache.status", cache.as_bytes());
    }
    if let Some(member) = member {
        s.str_attr(9, "hayate.upstream.member", member.as_bytes());
    }
    if let Some(u) = e.upstream {
        s.float_attr(
            9,
            "hayate.upstream.connect_time",
            f64::from(u.connect_us) / 1e6,
        );
        s.float_attr(9, "hayate.upstream.header_time", f64::from(u.head_us) / 1e6);
        // The attempt began this long before the span's end (now).
        let ago = u64::try_from(
            Instant::now()
                .saturating_duration_since(u.attempt_started)
                .as_nanos(),
        )
        .unwrap_or(0);
        let attempt = end.saturating_sub(ago).max(start);
        if u.queued_us > 0 {
            s.float_attr(
                9,
                "hayate.upstream.queue_time",
                f64::from(u.queued_us) / 1e6,
            );
            let queued = attempt.saturating_sub(u64::from(u.queued_us) * 1000);
            s.event(11, queued.max(start), b"upstream queue");
        }
        s.event(11, attempt, b"upstream attempt");
        let connected = attempt + u64::from(u.connect_us) * 1000;
        s.event(11, connected, b"upstream connected");
        let head_at = attempt + u64::from(u.head_us) * 1000;
        s.event(11, head_at, b"upstream response head");
    }
    // What handlers noted on the way (the cache's wait for another
    // request's fill).
    for &(at, what) in trace.events.borrow().iter() {
        s.event(11, unix_nanos(at).clamp(start, end), what.as_bytes());
    }
    if e.status >= 500 {
        s.message(15, |status| status.uint(3, proto::STATUS_ERROR));
    }
}

/// At exit: the current exporter sends the spans it holds (those of the
/// last second) and ends; waits for it at most 2 s, or `otel_timeout` if
/// shorter.
pub(crate) fn finish_at_exit() {
    let current = EXPORTER.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some((settings, exporter)) = current {
        exporter.finish(settings.timeout.min(EXIT_WAIT));
    }
}

/// The exporter's counters, for /metrics.
pub(crate) fn render_metrics(out: &mut String) {
    use hayate_core::metrics::{family, sample, Kind};
    let name = "hayate_otel_spans_exported_total";
    family(
        out,
        name,
        "Spans the OpenTelemetry collector took",
        Kind::Counter,
    );
    sample(out, name, &[], EXPORTED.load(Ordering::Relaxed));
    let name = "hayate_otel_spans_dropped_total";
    let help = "Spans not exported: a worker's buffer was full (otel_queue), or the collector was slow, down or refused them";
    family(out, name, help, Kind::Counter);
    sample(out, name, &[], DROPPED.load(Ordering::Relaxed));
}

#[cfg(test)]
mod tests {
    use super::*;
    use hayate_core::transport::Scheme;
    use hayate_core::UpstreamTimes;

    #[test]
    fn a_proxied_requests_span_is_about_650_bytes() {
        let mut head =
            RequestHead::new(b"GET", b"/api/orders/7?x=1", Version::Http11, Scheme::Http);
        head.push_field(b"host", b"shop.example.com:8080");
        let trace = RequestTrace::start(&head, u64::MAX);
        let entry = Entry {
            peer: "203.0.113.7",
            status: 200,
            bytes: 5120,
            duration: Duration::from_millis(12),
            cache: Some("MISS"),
            tls: None,
            upstream: Some(UpstreamTimes {
                connect_us: 300,
                head_us: 9000,
                made_request_id: 1,
                attempt_started: Instant::now(),
                member: 0,
                queued_us: 0,
            }),
            route: Some(("shop.example.com", b"/api/")),
            grpc_status: None,
        };
        let encode = |member| {
            let mut s = Message::default();
            encode_span(&mut s, &head, &trace, &entry, member);
            s.0
        };
        let span = encode(Some("http://10.0.0.5:3000"));
        // The otel_queue help's "about 650 bytes each" (631 here).
        assert!((500..800).contains(&span.len()), "{} bytes", span.len());
        let has = |s: &[u8]| span.windows(s.len()).any(|w| w == s);
        assert!(has(b"GET /api/"), "the name: method and route");
        assert!(
            has(b"shop.example.com") && !has(b":8080"),
            "server.address without port"
        );
        assert!(has(b"/api/orders/7") && !has(b"x=1"), "url.path, no query");
        assert!(has(&trace.trace_id) && has(&trace.span_id));
        assert!(has(b"upstream response head") && has(b"http://10.0.0.5:3000"));
        assert!(!has(b"upstream queue"), "no queue event without a wait");
        assert!(!has(b"cache fill"), "no fill event without a wait");
        trace.note("cache fill wait");
        let span = encode(None);
        let has = |s: &[u8]| span.windows(s.len()).any(|w| w == s);
        assert!(has(b"cache fill wait"), "a noted event is on the span");
    }
}
