//! Requests per route, by status class, and their latency (time until the
//! response head is ready), and gRPC calls by the status they ended with,
//! for `GET /metrics` on the admin listener.
//!
//! Each worker counts into its own [`WorkerMetrics`]: only that worker's
//! thread writes it, so a count is a relaxed load and store (no locked
//! read-modify-write, no lock, no shared cache line between workers); a
//! scrape, on another thread, sums every worker's block. Counting is on only
//! when the admin listener is configured.
//!
//! A route counts into a slot named by its site and prefix
//! (`Route::index`). Slots outlive reloads: a route that a reload keeps
//! keeps its slot and its counts (Prometheus counters only go up), and a new
//! route gets a new slot. A worker's block of counters is made for the slots
//! of its generation; the blocks of replaced generations stay in the sums.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hayate_config::Config;
use hayate_core::metrics::{
    family, latency_bucket, latency_histogram, sample, Kind, MetricsSource, LATENCY_BUCKETS_US,
};
use hayate_core::request::Version;

const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

const REQUESTS: &str = "hayate_http_requests_total";
const BY_PROTOCOL: &str = "hayate_http_requests_by_protocol_total";
/// The protocols counted apart, in [`Version`] order.
const PROTOCOLS: [(Version, &str); 4] = [
    (Version::Http10, "HTTP/1.0"),
    (Version::Http11, "HTTP/1.1"),
    (Version::Http2, "HTTP/2"),
    (Version::Http3, "HTTP/3"),
];
const DURATION: &str = "hayate_http_request_duration_seconds";
const GRPC: &str = "hayate_grpc_calls_total";
/// gRPC's status codes by number (its `statuscodes.md`), as
/// `grpc_code` labels them (the names go-grpc-prometheus and
/// OpenTelemetry's `rpc.grpc.status_code` readers know). A code past
/// them counts as UNKNOWN, as gRPC clients read one.
const GRPC_CODES: [&str; 17] = [
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
];

#[derive(Default)]
struct RouteCounters {
    classes: [AtomicU64; 5],
    /// Per bucket, not cumulative; the last one is +Inf.
    buckets: [AtomicU64; LATENCY_BUCKETS_US.len() + 1],
    sum_us: AtomicU64,
    /// gRPC calls by the `grpc-status` they ended with.
    grpc: [AtomicU64; GRPC_CODES.len()],
}

/// Adds to a counter that only this thread writes.
fn bump(c: &AtomicU64, by: u64) {
    c.store(
        c.load(Ordering::Relaxed).wrapping_add(by),
        Ordering::Relaxed,
    );
}

/// One worker's counters: one block per route, and one for requests that
/// matched no route (unsafe paths, unknown prefixes).
pub struct WorkerMetrics {
    routes: Box<[RouteCounters]>,
    protocols: [AtomicU64; PROTOCOLS.len()],
}

impl WorkerMetrics {
    /// Counts an answered request of `route` (its index; `None`: no route
    /// matched), as the pipeline reported it.
    pub fn record(&self, route: Option<usize>, version: Version, status: u16, elapsed: Duration) {
        if let Some(i) = PROTOCOLS.iter().position(|(v, _)| *v == version) {
            bump(&self.protocols[i], 1);
        }
        let Some(c) = self.routes.get(route.unwrap_or(UNROUTED)) else {
            return;
        };
        let class = usize::from(status / 100).clamp(1, 5) - 1;
        bump(&c.classes[class], 1);
        let us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        bump(&c.buckets[latency_bucket(us)], 1);
        bump(&c.sum_us, us);
    }
}

impl WorkerMetrics {
    /// Counts a gRPC call of `route` that ended with `grpc-status` `code`
    /// (in its trailers, or the head of a trailers-only answer).
    pub fn record_grpc(&self, route: Option<usize>, code: u16) {
        if let Some(c) = self.routes.get(route.unwrap_or(UNROUTED)) {
            let i = match usize::from(code) {
                i if i < GRPC_CODES.len() => i,
                _ => 2,
            };
            bump(&c.grpc[i], 1);
        }
    }
}

/// The slot of requests that matched no route.
const UNROUTED: usize = 0;

/// One route's counts, summed over the workers.
#[derive(Default)]
struct RouteTotals {
    classes: [u64; 5],
    /// Per bucket, not cumulative.
    buckets: [u64; LATENCY_BUCKETS_US.len() + 1],
    sum_us: u64,
    grpc: [u64; GRPC_CODES.len()],
}

/// Every worker's counters and the routes' labels: the metrics source.
pub struct RequestMetrics {
    /// (site, route prefix) per slot; the first is the unrouted one.
    labels: Mutex<Vec<(String, String)>>,
    workers: Mutex<Vec<Arc<WorkerMetrics>>>,
}

impl RequestMetrics {
    /// Counters with no route yet: [`RequestMetrics::slots`] adds them.
    pub fn new() -> Arc<RequestMetrics> {
        Arc::new(RequestMetrics {
            labels: Mutex::new(vec![("-".into(), "-".into())]),
            workers: Mutex::new(Vec::new()),
        })
    }

    /// The slot of every route of `config`, in the routers' order (sites,
    /// then routes): the slot a route of the same site and prefix had, or a
    /// new one.
    pub fn slots(&self, config: &Config) -> Arc<[usize]> {
        let mut labels = self.labels.lock().unwrap_or_else(|e| e.into_inner());
        let mut slots = Vec::new();
        for site in &config.sites {
            let name = site.hosts.first().map_or("*", String::as_str);
            for route in &site.routes {
                let label = (name.to_string(), route.prefix.clone());
                let slot = match labels.iter().position(|l| *l == label) {
                    Some(slot) => slot,
                    None => {
                        labels.push(label);
                        labels.len() - 1
                    }
                };
                slots.push(slot);
            }
        }
        slots.into()
    }

    /// A worker's counters for the slots known now, summed into every
    /// scrape from now on.
    pub fn worker(&self) -> Arc<WorkerMetrics> {
        let slots = self.labels.lock().map_or(1, |l| l.len());
        let w = Arc::new(WorkerMetrics {
            routes: (0..slots).map(|_| RouteCounters::default()).collect(),
            protocols: Default::default(),
        });
        if let Ok(mut workers) = self.workers.lock() {
            workers.push(w.clone());
        }
        w
    }

    /// The (site, route prefix) of every slot.
    pub(crate) fn labels(&self) -> Vec<(String, String)> {
        self.labels.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// Per slot: every worker's counts summed.
    fn totals(&self, slots: usize) -> Vec<RouteTotals> {
        let workers = self.workers.lock().map(|w| w.clone()).unwrap_or_default();
        let add = |totals: &mut [u64], counters: &[AtomicU64]| {
            for (t, v) in totals.iter_mut().zip(counters) {
                *t += v.load(Ordering::Relaxed);
            }
        };
        (0..slots)
            .map(|i| {
                let mut t = RouteTotals::default();
                for w in &workers {
                    let Some(c) = w.routes.get(i) else { continue };
                    add(&mut t.classes, &c.classes);
                    add(&mut t.buckets, &c.buckets);
                    add(&mut t.grpc, &c.grpc);
                    t.sum_us = t.sum_us.wrapping_add(c.sum_us.load(Ordering::Relaxed));
                }
                t
            })
            .collect()
    }
}

impl MetricsSource for RequestMetrics {
    fn render(&self, out: &mut String) {
        family(
            out,
            BY_PROTOCOL,
            "Requests answered, by protocol",
            Kind::Counter,
        );
        let workers = self.workers.lock().map(|w| w.clone()).unwrap_or_default();
        for (i, (_, name)) in PROTOCOLS.iter().enumerate() {
            let n: u64 = workers
                .iter()
                .map(|w| w.protocols[i].load(Ordering::Relaxed))
                .sum();
            sample(out, BY_PROTOCOL, &[("protocol", name)], n);
        }
        let labels = self.labels();
        let totals = self.totals(labels.len());
        family(
            out,
            REQUESTS,
            "Requests answered, by site, route prefix and status class",
            Kind::Counter,
        );
        for ((site, route), t) in labels.iter().zip(&totals) {
            for (class, n) in CLASSES.iter().zip(&t.classes) {
                sample(
                    out,
                    REQUESTS,
                    &[("site", site), ("route", route), ("code", class)],
                    n,
                );
            }
        }
        family(
            out,
            DURATION,
            "Time from the complete request head to the response head, by site and route prefix",
            Kind::Histogram,
        );
        for ((site, route), t) in labels.iter().zip(&totals) {
            let labels = [("site", site.as_str()), ("route", route.as_str())];
            latency_histogram(out, DURATION, &labels, &t.buckets, t.sum_us);
        }
        family(
            out,
            GRPC,
            "gRPC calls by site, route prefix and the grpc-status they ended with (routes that carried gRPC)",
            Kind::Counter,
        );
        for ((site, route), t) in labels.iter().zip(&totals) {
            if t.grpc.iter().all(|n| *n == 0) {
                continue;
            }
            for (code, n) in GRPC_CODES.iter().zip(&t.grpc) {
                let labels = [
                    ("site", site.as_str()),
                    ("route", route),
                    ("grpc_code", code),
                ];
                sample(out, GRPC, &labels, *n);
            }
        }
    }
}
