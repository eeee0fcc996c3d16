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
    app: Option<App>,
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

#[derive(Debug, Serialize)]
struct App {
    queue_depth: u64,
    instances: Vec<Instance>,
}

#[derive(Debug, Default, Serialize)]
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
        app: app(&scrape),
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

fn app(scrape: &Scrape<'_>) -> Option<App> {
    if !scrape.has_prefix("hayate_app_") {
        return None;
    }
    let mut instances: BTreeMap<u64, Instance> = BTreeMap::new();
    for s in scrape
        .samples
        .iter()
        .filter(|s| s.name.starts_with("hayate_app_instance_"))
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
    Some(App {
        queue_depth: scrape.value("hayate_app_queue_depth").map_or(0, count),
        instances: instances.into_values().collect(),
    })
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
mod tests {
    use super::*;
    use hayate_core::metrics::{family, sample, Kind};
    use serde_json::{json, Value};
    use std::time::Duration;

    fn info() -> ServerInfo {
        ServerInfo::new(4, Some(PathBuf::from("site.toml")))
    }

    fn doc(metrics: &Metrics, info: &ServerInfo, at: Duration) -> Value {
        let samples = metrics::parse(&metrics.render());
        serde_json::to_value(build(&samples, info, info.started + at)).expect("json")
    }

    #[test]
    fn server_fields_and_empty_sections() {
        let info = info();
        let v = doc(&Metrics::default(), &info, Duration::from_secs(90));
        assert_eq!(v["version"], env!("CARGO_PKG_VERSION"));
        assert_eq!(v["uptime_seconds"], 90);
        assert_eq!(v["workers"], 4);
        assert_eq!(v["config_file"], "site.toml");
        assert_eq!(v["reloaded_at"], Value::Null);
        assert_eq!(v["routes"], json!([]));
        assert_eq!(v["upstreams"], json!([]));
        for absent in [
            "app",
            "cache",
            "compression",
            "tls",
            "shared",
            "connections_open",
        ] {
            assert_eq!(v[absent], Value::Null, "{absent}");
        }
        info.reloaded();
        let v = doc(&Metrics::default(), &info, Duration::ZERO);
        assert!(v["reloaded_at"].as_u64().expect("stamped") >= v["started_at"].as_u64().unwrap());
    }

    #[test]
    fn routes_count_classes_and_estimate_percentiles_from_buckets() {
        let m = Metrics::default();
        m.register_fn(|out| {
            family(out, "hayate_http_requests_total", "", Kind::Counter);
            let r = |code| [("site", "*"), ("route", "/api"), ("code", code)];
            sample(out, "hayate_http_requests_total", &r("2xx"), 90);
            sample(out, "hayate_http_requests_total", &r("5xx"), 10);
            let b = "hayate_http_request_duration_seconds_bucket";
            // 50 at or under 1 ms, 40 more under 10 ms, 10 more past 10 s.
            for (le, n) in [("0.001", 50), ("0.01", 90), ("10", 90), ("+Inf", 100)] {
                sample(out, b, &[("site", "*"), ("route", "/api"), ("le", le)], n);
            }
            let labels = [("site", "*"), ("route", "/api")];
            sample(
                out,
                "hayate_http_request_duration_seconds_sum",
                &labels,
                2.5,
            );
            sample(out, "hayate_connections_open", &[], 3);
            let member = [("site", "*"), ("route", "/api"), ("member", "10.0.0.1:80")];
            for (state, v) in [("up", 0), ("ejected", 1), ("probed-down", 0)] {
                let [a, b, c] = member;
                sample(
                    out,
                    "hayate_upstream_member_state",
                    &[a, b, c, ("state", state)],
                    v,
                );
            }
            sample(out, "hayate_upstream_member_in_flight", &member, 4);
            sample(out, "hayate_upstream_member_idle_connections", &member, 9);
        });
        let v = doc(&m, &info(), Duration::ZERO);
        assert_eq!(v["connections_open"], 3);
        assert_eq!(
            v["upstreams"],
            json!([{"site": "*", "route": "/api", "member": "10.0.0.1:80", "state": "ejected",
                    "in_flight": 4, "idle_connections": 9}])
        );
        let route = &v["routes"][0];
        assert_eq!(route["route"], "/api");
        assert_eq!(route["requests"], 100);
        assert_eq!(route["status"], json!({"2xx": 90, "5xx": 10}));
        let lat = &route["latency_seconds"];
        assert_eq!(lat["p50"], 0.001, "the 50th of 100 is the last at 1 ms");
        let p90 = lat["p90"].as_f64().unwrap();
        assert!((p90 - 0.01).abs() < 1e-12, "{p90}");
        assert_eq!(lat["p99"], 10.0, "in +Inf: the highest finite bound");
        assert_eq!(lat["mean"], 0.025);
    }

    #[test]
    fn quantile_interpolates_and_handles_no_observations() {
        assert_eq!(quantile(0.5, &[]), None);
        assert_eq!(quantile(0.5, &[(1.0, 0.0), (f64::INFINITY, 0.0)]), None);
        // 10 in (0, 1], 10 in (1, 2]: the median is the end of the first.
        let b = [(1.0, 10.0), (2.0, 20.0), (f64::INFINITY, 20.0)];
        assert_eq!(quantile(0.5, &b), Some(1.0));
        assert_eq!(quantile(0.75, &b), Some(1.5));
        assert_eq!(quantile(0.25, &b), Some(0.5));
    }

    #[test]
    fn app_instances_cache_compression_and_tls() {
        let m = Metrics::default();
        m.register_fn(|out| {
            let i = |n| ("instance", n);
            for state in ["starting", "ready", "backoff"] {
                let v = u8::from(state == "ready");
                sample(
                    out,
                    "hayate_app_instance_state",
                    &[i("0"), ("state", state)],
                    v,
                );
                let v = u8::from(state == "backoff");
                sample(
                    out,
                    "hayate_app_instance_state",
                    &[i("1"), ("state", state)],
                    v,
                );
            }
            sample(out, "hayate_app_instance_pid", &[i("0")], 4242);
            sample(out, "hayate_app_instance_uptime_seconds", &[i("0")], 7);
            sample(out, "hayate_app_instance_restarts_total", &[i("1")], 2);
            sample(
                out,
                "hayate_app_instance_memory_rss_bytes",
                &[i("0")],
                1 << 20,
            );
            sample(out, "hayate_app_instance_in_flight", &[i("0")], 1);
            sample(out, "hayate_app_instance_requests_total", &[i("0")], 12);
            let reason = ("reason", "exit code 1 <b>");
            sample(out, "hayate_app_instance_last_exit", &[i("1"), reason], 1);
            sample(out, "hayate_app_queue_depth", &[], 5);
            for (name, n) in [("hits", 3), ("misses", 1), ("stale", 0), ("evictions", 4)] {
                sample(out, &format!("hayate_cache_{name}_total"), &[], n);
            }
            sample(out, "hayate_cache_bytes", &[], 2048);
            sample(out, "hayate_cache_entries", &[], 2);
            sample(out, "hayate_compression_variants_total", &[], 2);
            sample(
                out,
                "hayate_compression_variant_input_bytes_total",
                &[],
                1000,
            );
            sample(
                out,
                "hayate_compression_variant_output_bytes_total",
                &[],
                300,
            );
            sample(out, "hayate_compression_variant_bytes", &[], 300);
            sample(out, "hayate_compression_streamed_bodies_total", &[], 4);
            sample(
                out,
                "hayate_compression_streamed_input_bytes_total",
                &[],
                4000,
            );
            sample(
                out,
                "hayate_compression_streamed_output_bytes_total",
                &[],
                1000,
            );
            let h = "hayate_tls_handshakes_total";
            sample(out, h, &[("result", "full")], 5);
            sample(out, h, &[("result", "failed"), ("reason", "timeout")], 1);
            sample(out, h, &[("result", "failed"), ("reason", "closed")], 2);
            let name = ("name", "example.com");
            let exp = "hayate_tls_certificate_expiry_seconds";
            sample(out, exp, &[name, ("source", "acme")], 30 * 86_400 + 3_600);
            let issuer = ("issuer", "CN=Pebble Intermediate CA");
            sample(out, "hayate_tls_certificate_issuer", &[name, issuer], 1);
            sample(out, "hayate_acme_orders_total", &[("result", "issued")], 1);
            sample(out, "hayate_acme_shared_certificates_total", &[], 2);
            let last = "hayate_acme_last_order_timestamp_seconds";
            sample(out, last, &[("result", "issued")], 1_700_000_000u64);
        });
        let v = doc(&m, &info(), Duration::ZERO);
        let app = &v["app"];
        assert_eq!(app["queue_depth"], 5);
        assert_eq!(
            app["instances"][0],
            json!({"instance": 0, "state": "ready", "pid": 4242, "uptime_seconds": 7,
                   "restarts": null, "rss_bytes": 1048576, "in_flight": 1, "requests": 12,
                   "last_exit": null})
        );
        assert_eq!(app["instances"][1]["state"], "backoff");
        assert_eq!(app["instances"][1]["restarts"], 2);
        assert_eq!(app["instances"][1]["last_exit"], "exit code 1 <b>");
        let cache = &v["cache"];
        assert_eq!(cache["hit_ratio"], 0.75);
        assert_eq!(
            (cache["bytes"].clone(), cache["entries"].clone()),
            (json!(2048), json!(2))
        );
        assert_eq!(cache["evictions"], 4);
        assert_eq!(v["compression"]["saved_bytes"], 700);
        assert_eq!(
            v["compression"]["streamed"],
            json!({"bodies": 4, "input_bytes": 4000, "output_bytes": 1000, "saved_bytes": 3000})
        );
        let tls = &v["tls"];
        assert_eq!(tls["handshakes"], json!({"full": 5, "failed": 3}));
        assert_eq!(
            tls["certificates"][0],
            json!({"name": "example.com", "source": "acme",
                   "issuer": "CN=Pebble Intermediate CA", "expires_in_days": 30.0})
        );
        assert_eq!(
            tls["acme"],
            json!({"issued": 1, "failed": 0, "from_other_boxes": 2, "last_result": "issued",
                   "last_at": 1_700_000_000u64})
        );
    }

    #[test]
    fn the_shared_tier_from_its_metrics() {
        let m = Metrics::default();
        m.register_fn(|out| {
            sample(out, "hayate_shared_up", &[], 1);
            sample(out, "hayate_shared_published_total", &[], 3);
            sample(out, "hayate_shared_l2_hits_total", &[], 7);
            sample(out, "hayate_shared_l2_errors_total", &[], 2);
            sample(out, "hayate_shared_l2_breaker", &[], 1);
        });
        let v = doc(&m, &info(), Duration::ZERO);
        let shared = &v["shared"];
        assert_eq!(shared["subscribed"], true);
        assert_eq!(shared["breaker"], "open");
        assert_eq!(shared["l2"]["hits"], 7);
        assert_eq!(shared["l2"]["errors"], 2);
        assert_eq!(shared["l2"]["misses"], 0);
        assert_eq!(shared["events"]["published"], 3);
    }
}
