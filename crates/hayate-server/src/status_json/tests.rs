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
        // Two limiters of one route (a reload changed the limit while a
        // request of the old generation held the old one): added up.
        sample(out, "hayate_rate_limited_total", &labels, 5);
        sample(out, "hayate_rate_limited_total", &labels, 2);
        sample(out, "hayate_conn_limited_total", &labels, 3);
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
    assert_eq!(
        (&route["rate_limited"], &route["conn_limited"]),
        (&json!(7), &json!(3))
    );
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
        let app = ("app", "api");
        let i = |n| ("instance", n);
        for state in ["starting", "ready", "backoff"] {
            let v = u8::from(state == "ready");
            sample(
                out,
                "hayate_app_instance_state",
                &[app, i("0"), ("state", state)],
                v,
            );
            let v = u8::from(state == "backoff");
            sample(
                out,
                "hayate_app_instance_state",
                &[app, i("1"), ("state", state)],
                v,
            );
        }
        // A second app's slot stays out of the first's instances.
        let worker = [("app", "jobs"), i("0"), ("state", "ready")];
        sample(out, "hayate_app_instance_state", &worker, 1);
        sample(out, "hayate_app_instance_pid", &[app, i("0")], 4242);
        sample(out, "hayate_app_instance_uptime_seconds", &[app, i("0")], 7);
        sample(out, "hayate_app_instance_restarts_total", &[app, i("1")], 2);
        sample(
            out,
            "hayate_app_instance_memory_rss_bytes",
            &[app, i("0")],
            1 << 20,
        );
        sample(out, "hayate_app_instance_in_flight", &[app, i("0")], 1);
        sample(
            out,
            "hayate_app_instance_requests_total",
            &[app, i("0")],
            12,
        );
        let reason = ("reason", "exit code 1 <b>");
        sample(
            out,
            "hayate_app_instance_last_exit",
            &[app, i("1"), reason],
            1,
        );
        sample(out, "hayate_app_queue_depth", &[app], 5);
        sample(out, "hayate_app_queue_depth", &[("app", "jobs")], 0);
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
    assert_eq!(app["name"], "api");
    assert_eq!(app["queue_depth"], 5);
    assert_eq!(app["instances"].as_array().map(Vec::len), Some(2));
    assert_eq!(v["apps"][1]["name"], "jobs");
    assert_eq!(v["apps"][1]["instances"][0]["state"], "ready");
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
