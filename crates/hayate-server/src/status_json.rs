//! The `GET /status.json` document (docs/status-json.md): one snapshot of
//! what `/metrics` counts, grouped for people and scripts, plus what the
//! server knows of itself (version, uptime, workers, config file).
//!
//! It is built from one scrape of the same [`Metrics`] registry that
//! `/metrics` renders, read back with [`metrics::parse`], so every number in
//! it is a number `/metrics` shows; nothing here reads a subsystem directly.
//! Latency percentiles are estimated from the histogram buckets the way
//! Prometheus' `histogram_quantile` does (linear within a bucket).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use hayate_core::metrics::{self, Metrics, Sample};
use serde::Serialize;

/// What the server knows of itself; shared by the admin listener and the
/// signal loop (which stamps reloads).
#[derive(Debug)]
pub struct ServerInfo {
    /// hayate's version.
    pub version: &'static str,
    /// When the server started.
    pub started: SystemTime,
    /// Worker threads.
    pub workers: usize,
    /// The `--config` file, if any.
    pub config_file: Option<PathBuf>,
    /// Unix seconds of the last reload (SIGHUP, `hayate reload`); 0: none.
    reloaded_at: AtomicU64,
}

impl ServerInfo {
    /// A server started now.
    pub fn new(workers: usize, config_file: Option<PathBuf>) -> ServerInfo {
        ServerInfo {
            version: env!("CARGO_PKG_VERSION"),
            started: SystemTime::now(),
            workers,
            config_file,
            reloaded_at: AtomicU64::new(0),
        }
    }

    /// Stamps a reload.
    pub fn reloaded(&self) {
        self.reloaded_at
            .store(unix_secs(SystemTime::now()), Ordering::Relaxed);
    }
}

fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The document; field by field in docs/status-json.md.
#[derive(Debug, Serialize)]
pub struct Status {
    version: &'static str,
    /// Unix seconds when this snapshot was taken.
    now: u64,
    started_at: u64,
    uptime_seconds: u64,
    workers: usize,
    config_file: Option<String>,
    reloaded_at: Option<u64>,
    connections_open: Option<u64>,
    requests_by_protocol: BTreeMap<String, u64>,
    routes: Vec<Route>,
    upstreams: Vec<UpstreamMember>,
    /// The first app (the only one of `hayate run`), as before several.
    app: Option<App>,
    /// Every app, in the order they were declared.
    apps: Vec<App>,
    cache: Option<Cache>,
    compression: Option<Compression>,
    tls: Option<Tls>,
    shared: Option<Shared>,
}

#[derive(Debug, Serialize)]
struct Route {
    site: String,
    route: String,
    requests: u64,
    status: BTreeMap<String, u64>,
    latency_seconds: Latency,
    /// Requests refused by the route's rate_limit (429).
    rate_limited: u64,
    /// Requests refused by the route's conn_limit (429, or 503 when full).
    conn_limited: u64,
}

#[derive(Debug, Serialize)]
struct UpstreamMember {
    site: String,
    route: String,
    member: String,
    state: Option<String>,
    in_flight: u64,
    idle_connections: u64,
}

#[derive(Debug, Default, Serialize)]
struct Latency {
    p50: Option<f64>,
    p90: Option<f64>,
    p99: Option<f64>,
    mean: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
struct App {
    name: String,
    queue_depth: u64,
    instances: Vec<Instance>,
}

#[derive(Debug, Clone, Default, Serialize)]
struct Instance {
    instance: u64,
    state: Option<String>,
    pid: Option<u64>,
    uptime_seconds: Option<u64>,
    restarts: Option<u64>,
    rss_bytes: Option<u64>,
    in_flight: Option<u64>,
    requests: Option<u64>,
    last_exit: Option<String>,
}

#[derive(Debug, Serialize)]
struct Cache {
    hits: u64,
    misses: u64,
    stale: u64,
    hit_ratio: Option<f64>,
    bypasses: u64,
    stores: u64,
    revalidations: u64,
    evictions: u64,
    coalesced: u64,
    bytes: u64,
    entries: u64,
}

#[derive(Debug, Serialize)]
struct Shared {
    subscribed: bool,
    breaker: &'static str,
    l2: BTreeMap<&'static str, u64>,
    events: BTreeMap<&'static str, u64>,
}

#[derive(Debug, Serialize)]
struct Compression {
    variants: u64,
    input_bytes: u64,
    output_bytes: u64,
    saved_bytes: u64,
    held_bytes: u64,
    streamed: Streamed,
}

#[derive(Debug, Serialize)]
struct Streamed {
    bodies: u64,
    input_bytes: u64,
    output_bytes: u64,
    saved_bytes: u64,
}

#[derive(Debug, Serialize)]
struct Tls {
    handshakes: BTreeMap<String, u64>,
    certificates: Vec<Certificate>,
    acme: Acme,
}

#[derive(Debug, Serialize)]
struct Certificate {
    name: String,
    source: String,
    issuer: Option<String>,
    expires_in_days: f64,
}

#[derive(Debug, Serialize)]
struct Acme {
    issued: u64,
    failed: u64,
    /// Certificates another box ordered, served here (shared ACME).
    from_other_boxes: u64,
    last_result: Option<String>,
    last_at: Option<u64>,
}

/// Takes a snapshot: one scrape of `metrics`, read back and grouped.
pub fn snapshot(metrics: &Metrics, info: &ServerInfo) -> Status {
    build(&metrics::parse(&metrics.render()), info, SystemTime::now())
}

/// The document as JSON text.
pub fn render(metrics: &Metrics, info: &ServerInfo) -> String {
    // Serializing these plain structs cannot fail (string keys, no maps
    // with other keys, floats only from counts).
    serde_json::to_string(&snapshot(metrics, info)).unwrap_or_default()
}

/// The certificates served, one line each (name, how it was obtained,
/// issuer, days left), for `hayate status`; `None` without TLS.
pub fn certificate_lines(metrics: &Metrics) -> Option<String> {
    let samples = metrics::parse(&metrics.render());
    let tls = tls(&Scrape { samples: &samples })?;
    if tls.certificates.is_empty() {
        return None;
    }
    let mut out = String::from("certificates:\n");
    for c in &tls.certificates {
        let issuer = c.issuer.as_deref().unwrap_or("-");
        out.push_str(&format!(
            "  {}  {}  issuer {issuer}  expires in {} days\n",
            c.name, c.source, c.expires_in_days
        ));
    }
    Some(out)
}

/// Counts are whole numbers in the scrape; as integers in the JSON.
fn count(v: f64) -> u64 {
    if v.is_finite() && v > 0.0 {
        v as u64
    } else {
        0
    }
}

/// The samples of one scrape, looked up by name.
struct Scrape<'a> {
    samples: &'a [Sample],
}

impl<'a> Scrape<'a> {
    fn named(&self, name: &'a str) -> impl Iterator<Item = &'a Sample> + 'a {
        self.samples.iter().filter(move |s| s.name == name)
    }

    fn value(&self, name: &'a str) -> Option<f64> {
        self.named(name).next().map(|s| s.value)
    }

    fn has_prefix(&self, prefix: &str) -> bool {
        self.samples.iter().any(|s| s.name.starts_with(prefix))
    }
}

fn build(samples: &[Sample], info: &ServerInfo, now: SystemTime) -> Status {
    let scrape = Scrape { samples };
    let reloaded = info.reloaded_at.load(Ordering::Relaxed);
    let apps = apps(&scrape);
    Status {
        version: info.version,
        now: unix_secs(now),
        started_at: unix_secs(info.started),
        uptime_seconds: now.duration_since(info.started).map_or(0, |d| d.as_secs()),
        workers: info.workers,
        config_file: info.config_file.as_ref().map(|p| p.display().to_string()),
        reloaded_at: (reloaded != 0).then_some(reloaded),
        connections_open: scrape.value("hayate_connections_open").map(count),
        requests_by_protocol: scrape
            .named("hayate_http_requests_by_protocol_total")
            .filter_map(|s| Some((s.label("protocol")?.to_string(), count(s.value))))
            .collect(),
        routes: routes(&scrape),
        upstreams: upstreams(&scrape),
        app: apps.first().cloned(),
        apps,
        cache: cache(&scrape),
        compression: compression(&scrape),
        tls: tls(&scrape),
        shared: shared(&scrape),
    }
}

/// Per route, in scrape order (config order, the unrouted `-` last).
fn routes(scrape: &Scrape<'_>) -> Vec<Route> {
    let mut routes: Vec<Route> = Vec::new();
    let find = |routes: &mut Vec<Route>, s: &Sample| -> Option<usize> {
        let (site, route) = (s.label("site")?, s.label("route")?);
        let i = routes
            .iter()
            .position(|r| r.site == site && r.route == route)
            .unwrap_or_else(|| {
                routes.push(Route {
                    site: site.to_string(),
                    route: route.to_string(),
                    requests: 0,
                    status: BTreeMap::new(),
                    latency_seconds: Latency::default(),
                    rate_limited: 0,
                    conn_limited: 0,
                });
                routes.len() - 1
            });
        Some(i)
    };
    for s in scrape.named("hayate_http_requests_total") {
        let (Some(i), Some(class)) = (find(&mut routes, s), s.label("code")) else {
            continue;
        };
        routes[i].status.insert(class.to_string(), count(s.value));
        routes[i].requests += count(s.value);
    }
    // A limit replaced by a reload counts on while requests of the old
    // generation use it: its figures add to the new one's.
    for s in scrape.named("hayate_rate_limited_total") {
        if let Some(i) = find(&mut routes, s) {
            routes[i].rate_limited += count(s.value);
        }
    }
    for s in scrape.named("hayate_conn_limited_total") {
        if let Some(i) = find(&mut routes, s) {
            routes[i].conn_limited += count(s.value);
        }
    }
    // Per route: (upper bound, cumulative count) in scrape order, and sum.
    let mut buckets: Vec<(Vec<(f64, f64)>, f64)> = Vec::new();
    for s in scrape.named("hayate_http_request_duration_seconds_bucket") {
        let (Some(i), Some(le)) = (find(&mut routes, s), s.label("le")) else {
            continue;
        };
        buckets.resize_with(routes.len(), Default::default);
        let le = if le == "+Inf" {
            f64::INFINITY
        } else {
            le.parse().unwrap_or(f64::INFINITY)
        };
        buckets[i].0.push((le, s.value));
    }
    for s in scrape.named("hayate_http_request_duration_seconds_sum") {
        if let Some(i) = find(&mut routes, s) {
            buckets.resize_with(routes.len(), Default::default);
            buckets[i].1 = s.value;
        }
    }
    for (route, (b, sum)) in routes.iter_mut().zip(&buckets) {
        let total = b.last().map_or(0.0, |&(_, n)| n);
        route.latency_seconds = Latency {
            p50: quantile(0.5, b),
            p90: quantile(0.9, b),
            p99: quantile(0.99, b),
            mean: (total > 0.0).then(|| sum / total),
        };
    }
    routes
}

/// The `q` quantile of a cumulative histogram (ascending upper bounds, the
/// last +Inf), interpolated linearly inside its bucket as Prometheus'
/// `histogram_quantile` does; in the +Inf bucket, the highest finite bound.
/// `None` without observations.
fn quantile(q: f64, buckets: &[(f64, f64)]) -> Option<f64> {
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let mut below = (0.0, 0.0); // (bound, cumulative count) of the bucket before
    for &(le, n) in buckets {
        if n >= rank {
            if le.is_infinite() {
                return Some(below.0);
            }
            let in_bucket = n - below.1;
            let fraction = if in_bucket > 0.0 {
                (rank - below.1) / in_bucket
            } else {
                1.0
            };
            return Some(below.0 + (le - below.0) * fraction);
        }
        below = (le, n);
    }
    Some(below.0)
}

/// Each route's members, in scrape order (routes, then members in order).
fn upstreams(scrape: &Scrape<'_>) -> Vec<UpstreamMember> {
    let mut members: Vec<UpstreamMember> = Vec::new();
    let names = [
        "hayate_upstream_member_state",
        "hayate_upstream_member_in_flight",
        "hayate_upstream_member_idle_connections",
    ];
    for s in scrape
        .samples
        .iter()
        .filter(|s| names.contains(&s.name.as_str()))
    {
        let (Some(site), Some(route), Some(member)) =
            (s.label("site"), s.label("route"), s.label("member"))
        else {
            continue;
        };
        let found = members
            .iter()
            .position(|m| m.site == site && m.route == route && m.member == member);
        let i = found.unwrap_or_else(|| {
            members.push(UpstreamMember {
                site: site.to_string(),
                route: route.to_string(),
                member: member.to_string(),
                state: None,
                in_flight: 0,
                idle_connections: 0,
            });
            members.len() - 1
        });
        let m = &mut members[i];
        match s.name.as_str() {
            "hayate_upstream_member_state" if s.value == 1.0 => {
                m.state = s.label("state").map(str::to_string)
            }
            "hayate_upstream_member_in_flight" => m.in_flight = count(s.value),
            "hayate_upstream_member_idle_connections" => m.idle_connections = count(s.value),
            _ => {}
        }
    }
    members
}

/// The apps, grouped by their `app` label, in the order their first
/// sample comes (the order they were declared).
fn apps(scrape: &Scrape<'_>) -> Vec<App> {
    let mut names: Vec<&str> = Vec::new();
    for s in scrape
        .samples
        .iter()
        .filter(|s| s.name.starts_with("hayate_app_"))
    {
        if let Some(name) = s.label("app") {
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }
    names.into_iter().map(|name| app(scrape, name)).collect()
}

fn app(scrape: &Scrape<'_>, name: &str) -> App {
    let mut instances: BTreeMap<u64, Instance> = BTreeMap::new();
    for s in scrape
        .samples
        .iter()
        .filter(|s| s.name.starts_with("hayate_app_instance_") && s.label("app") == Some(name))
    {
        let Some(i) = s.label("instance").and_then(|i| i.parse().ok()) else {
            continue;
        };
        let f = instances.entry(i).or_insert_with(|| Instance {
            instance: i,
            ..Instance::default()
        });
        let v = Some(count(s.value));
        match &s.name["hayate_app_instance_".len()..] {
            "state" if s.value == 1.0 => f.state = s.label("state").map(str::to_string),
            "pid" => f.pid = v,
            "uptime_seconds" => f.uptime_seconds = v,
            "restarts_total" => f.restarts = v,
            "memory_rss_bytes" => f.rss_bytes = v,
            "in_flight" => f.in_flight = v,
            "requests_total" => f.requests = v,
            "last_exit" => f.last_exit = s.label("reason").map(str::to_string),
            _ => {}
        }
    }
    let queue_depth = scrape
        .named("hayate_app_queue_depth")
        .find(|s| s.label("app") == Some(name))
        .map_or(0, |s| count(s.value));
    App {
        name: name.to_string(),
        queue_depth,
        instances: instances.into_values().collect(),
    }
}

fn cache(scrape: &Scrape<'_>) -> Option<Cache> {
    scrape.value("hayate_cache_hits_total")?;
    let c = |name: &str| {
        scrape
            .samples
            .iter()
            .find(|s| s.name == format!("hayate_cache_{name}"))
            .map_or(0, |s| count(s.value))
    };
    let (hits, misses, stale) = (c("hits_total"), c("misses_total"), c("stale_total"));
    let served = hits + stale + misses;
    Some(Cache {
        hits,
        misses,
        stale,
        hit_ratio: (served > 0).then(|| (hits + stale) as f64 / served as f64),
        bypasses: c("bypasses_total"),
        stores: c("stores_total"),
        revalidations: c("revalidations_total"),
        evictions: c("evictions_total"),
        coalesced: c("coalesced_total"),
        bytes: c("bytes"),
        entries: c("entries"),
    })
}

/// The shared tier (Redis): the subscription, the L2 breaker and counters.
fn shared(scrape: &Scrape<'_>) -> Option<Shared> {
    let up = scrape.value("hayate_shared_up")?;
    let c = |name: &str| scrape.value(name).map_or(0, count);
    let l2 = [
        "hits",
        "misses",
        "writes",
        "errors",
        "skipped",
        "too_large",
        "unreadable",
        "write_dropped",
    ]
    .map(|n| (n, c(&format!("hayate_shared_l2_{n}_total"))));
    let events = ["published", "received", "dropped", "failures"]
        .map(|n| (n, c(&format!("hayate_shared_{n}_total"))));
    Some(Shared {
        subscribed: up == 1.0,
        breaker: match c("hayate_shared_l2_breaker") {
            0 => "closed",
            1 => "open",
            _ => "half-open",
        },
        l2: l2.into_iter().collect(),
        events: events.into_iter().collect(),
    })
}

fn compression(scrape: &Scrape<'_>) -> Option<Compression> {
    let variants = count(scrape.value("hayate_compression_variants_total")?);
    let c = |name| scrape.value(name).map_or(0, count);
    let input_bytes = c("hayate_compression_variant_input_bytes_total");
    let output_bytes = c("hayate_compression_variant_output_bytes_total");
    Some(Compression {
        variants,
        input_bytes,
        output_bytes,
        saved_bytes: input_bytes.saturating_sub(output_bytes),
        held_bytes: c("hayate_compression_variant_bytes"),
        streamed: {
            let input_bytes = c("hayate_compression_streamed_input_bytes_total");
            let output_bytes = c("hayate_compression_streamed_output_bytes_total");
            Streamed {
                bodies: c("hayate_compression_streamed_bodies_total"),
                input_bytes,
                output_bytes,
                saved_bytes: input_bytes.saturating_sub(output_bytes),
            }
        },
    })
}

fn tls(scrape: &Scrape<'_>) -> Option<Tls> {
    if !scrape.has_prefix("hayate_tls_") {
        return None;
    }
    let mut handshakes = BTreeMap::new();
    for s in scrape.named("hayate_tls_handshakes_total") {
        if let Some(result) = s.label("result") {
            *handshakes.entry(result.to_string()).or_insert(0) += count(s.value);
        }
    }
    let issuers: BTreeMap<&str, &str> = scrape
        .named("hayate_tls_certificate_issuer")
        .filter_map(|s| Some((s.label("name")?, s.label("issuer")?)))
        .collect();
    let certificates = scrape
        .named("hayate_tls_certificate_expiry_seconds")
        .filter_map(|s| {
            let name = s.label("name")?;
            Some(Certificate {
                name: name.to_string(),
                source: s.label("source")?.to_string(),
                issuer: issuers.get(name).map(|i| i.to_string()),
                expires_in_days: (s.value / 86_400.0 * 10.0).floor() / 10.0,
            })
        })
        .collect();
    let orders = |result| {
        scrape
            .named("hayate_acme_orders_total")
            .find(|s| s.label("result") == Some(result))
            .map_or(0, |s| count(s.value))
    };
    let last = scrape
        .named("hayate_acme_last_order_timestamp_seconds")
        .next();
    Some(Tls {
        handshakes,
        certificates,
        acme: Acme {
            issued: orders("issued"),
            failed: orders("failed"),
            from_other_boxes: scrape
                .named("hayate_acme_shared_certificates_total")
                .next()
                .map_or(0, |s| count(s.value)),
            last_result: last.and_then(|s| s.label("result")).map(str::to_string),
            last_at: last.map(|s| count(s.value)),
        },
    })
}

#[cfg(test)]
mod tests;
