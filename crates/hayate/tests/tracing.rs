//! OpenTelemetry traces end to end (issue 41, part 1), with a real
//! collector (Jaeger, `hayate_testkit::jaeger`) and a Node app traced by
//! OpenTelemetry's own SDK (tests/otel-app, installed from its lockfile): a
//! request through hayate to the app is one trace in which hayate's SERVER
//! span is the parent of the app's, over OTLP/HTTP and OTLP/gRPC; a
//! client's traceparent is continued (HTTP/1.1 and HTTP/2), a malformed one
//! starts a new trace, an unsampled one is passed on but not exported; an
//! h2c upstream and a PHP script (HTTP_TRACEPARENT) get hayate's span as
//! their parent; a request's wait in the upstream queue is on its span; the
//! access log's `$trace_id` is the trace's; the spans still batched when
//! hayate stops are sent; an https collector is verified against otel_ca
//! (both protocols); a reload turns tracing on and moves it to another
//! collector and protocol; a collector that is down, or one that never
//! answers, leaves requests unaffected and its spans counted as dropped.

// Tests block on purpose (they are clients, not the server).
#![allow(clippy::disallowed_methods)]

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use hayate_supervisor::php::PhpPool;
use hayate_testkit::jaeger::Jaeger;
use hayate_testkit::node::NodeProcess;
use hayate_testkit::origin::{Origin, OriginOptions};
use hayate_testkit::php::PhpFpm;
use hayate_testkit::{eventually, Hayate};

const BIN: &str = env!("CARGO_BIN_EXE_hayate");

/// The traced app's sources, in the repository.
const SOURCES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/otel-app");

/// A client's traceparent (W3C Trace Context's example).
const CLIENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

/// The app with its node_modules, installed on first use.
fn app_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("otel-app");
        hayate_testkit::node::install(Path::new(SOURCES), dir)
    })
}

/// The traced app, exporting to `jaeger` over OTLP/HTTP.
fn traced_app(jaeger: &Jaeger) -> (NodeProcess, u16) {
    app(jaeger, &[])
}

/// The app with more `args`.
fn app(jaeger: &Jaeger, args: &[&str]) -> (NodeProcess, u16) {
    let url = format!("http://{}/v1/traces", jaeger.otlp_http);
    let mut all = vec!["app.js", &url];
    all.extend_from_slice(args);
    let app = NodeProcess::start(app_dir(), &all);
    let port = app.listening_port();
    (app, port)
}

/// hayate proxying to 127.0.0.1:`port`, exporting to `endpoint` over
/// `protocol`, with the access log's lines `$trace_id $status`.
fn hayate(port: u16, endpoint: &str, protocol: &str, extra: &[&str]) -> Hayate {
    let proxy = format!("http://127.0.0.1:{port}");
    let mut args = vec![
        "--workers",
        "1",
        "--proxy",
        &proxy,
        "--otel-endpoint",
        endpoint,
        "--otel-protocol",
        protocol,
        "--access-log-format",
        "$trace_id $status",
    ];
    args.extend_from_slice(extra);
    Hayate::start(BIN, &args)
}

/// The traceparent the app received, as it answered it: (trace id, parent
/// span id, flags).
fn received_traceparent(body: &str) -> (String, String, String) {
    let v: serde_json::Value = serde_json::from_str(body).expect("the app's JSON");
    let tp = v["traceparent"]
        .as_str()
        .expect("a traceparent reached the app");
    let parts: Vec<&str> = tp.split('-').collect();
    assert_eq!(parts.len(), 4, "{tp}");
    assert_eq!(parts[0], "00", "{tp}");
    (parts[1].into(), parts[2].into(), parts[3].into())
}

/// The span of `service` in Jaeger's `trace`.
fn span_of<'a>(trace: &'a serde_json::Value, service: &str) -> Option<&'a serde_json::Value> {
    let process = trace["processes"]
        .as_object()?
        .iter()
        .find(|(_, p)| p["serviceName"] == service)?
        .0;
    trace["spans"]
        .as_array()?
        .iter()
        .find(|s| s["processID"] == process.as_str())
}

/// A span's tag `key`.
fn tag<'a>(span: &'a serde_json::Value, key: &str) -> &'a serde_json::Value {
    span["tags"]
        .as_array()
        .and_then(|tags| tags.iter().find(|t| t["key"] == key))
        .map_or(&serde_json::Value::Null, |t| &t["value"])
}

/// The span id a span is CHILD_OF.
fn parent_of(span: &serde_json::Value) -> Option<&str> {
    span["references"]
        .as_array()?
        .iter()
        .find(|r| r["refType"] == "CHILD_OF")?["spanID"]
        .as_str()
}

/// Waits until Jaeger has both spans of `trace_id`, hayate's and the
/// app's, and returns the trace.
fn both_spans(jaeger: &Jaeger, trace_id: &str) -> serde_json::Value {
    eventually("hayate's and the app's spans in Jaeger", || {
        let trace = jaeger
            .trace(trace_id)
            .ok_or_else(|| "no trace yet".to_string())?;
        match (span_of(&trace, "hayate"), span_of(&trace, "node-app")) {
            (Some(_), Some(_)) => Ok(trace),
            _ => Err(format!("{trace:#}")),
        }
    })
}

#[test]
fn a_request_through_hayate_to_a_traced_app_is_one_trace_with_hayate_as_the_parent() {
    let jaeger = Jaeger::start();
    let (_app, port) = traced_app(&jaeger);
    let endpoint = format!("http://{}", jaeger.otlp_http);
    let h = hayate(port, &endpoint, "http/protobuf", &[]);
    let r = h.client().get("/orders/7?secret=1", &[]);
    assert_eq!(r.status, 200);
    let (trace_id, hayate_span, flags) = received_traceparent(&r.text());
    assert_eq!(flags, "01");
    let trace = both_spans(&jaeger, &trace_id);
    let ours = span_of(&trace, "hayate").expect("hayate's span");
    let app = span_of(&trace, "node-app").expect("the app's span");
    assert_eq!(ours["spanID"], hayate_span.as_str(), "{trace:#}");
    assert_eq!(parent_of(app), Some(hayate_span.as_str()), "{trace:#}");
    // A new trace: hayate's span is the root.
    assert_eq!(parent_of(ours), None, "{trace:#}");
    assert_eq!(tag(ours, "span.kind"), "server");
    assert_eq!(tag(ours, "http.request.method"), "GET");
    assert_eq!(tag(ours, "url.path"), "/orders/7");
    assert_eq!(tag(ours, "http.response.status_code"), 200);
    assert_eq!(tag(ours, "network.protocol.version"), "1.1");
    assert_eq!(tag(ours, "client.address"), "127.0.0.1");
    // The testkit client's Host.
    assert_eq!(tag(ours, "server.address"), "test");
    assert!(
        tag(ours, "http.response.body.size").as_i64() > Some(0),
        "{ours:#}"
    );
    let member = tag(ours, "hayate.upstream.member")
        .as_str()
        .unwrap_or_default();
    assert!(member.ends_with(&format!("127.0.0.1:{port}")), "{ours:#}");
    assert!(
        tag(ours, "hayate.upstream.header_time").is_f64(),
        "{ours:#}"
    );
    let events: Vec<&str> = ours["logs"]
        .as_array()
        .map(|logs| {
            logs.iter()
                .filter_map(|l| l["fields"].as_array()?.iter().find(|f| f["key"] == "event"))
                .filter_map(|f| f["value"].as_str())
                .collect()
        })
        .unwrap_or_default();
    // Span events, in Jaeger's words logs.
    assert_eq!(
        events,
        [
            "upstream attempt",
            "upstream connected",
            "upstream response head"
        ],
        "{ours:#}"
    );
    // The resource names the box and the process (Jaeger: the process's
    // tags), and hayate's version.
    let process = &trace["processes"][ours["processID"].as_str().unwrap_or_default()];
    let process_tag = |key: &str| {
        process["tags"]
            .as_array()
            .and_then(|tags| tags.iter().find(|t| t["key"] == key))
            .map_or(serde_json::Value::Null, |t| t["value"].clone())
    };
    assert_eq!(process_tag("service.version"), env!("CARGO_PKG_VERSION"));
    assert_eq!(process_tag("process.pid"), h.pid(), "{process:#}");
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").expect("hostname");
    assert_eq!(process_tag("host.name"), host.trim(), "{process:#}");
    assert_eq!(
        process_tag("service.instance.id"),
        format!("{}:{}", host.trim(), h.pid()),
        "{process:#}"
    );
    // The app's span lies within hayate's.
    let (start, app_start) = (ours["startTime"].as_u64(), app["startTime"].as_u64());
    assert!(start <= app_start, "{trace:#}");
    // $trace_id is the trace's.
    let lines = eventually("the access log line", || {
        let lines = h.stdout_lines(Duration::from_millis(100));
        (!lines.is_empty())
            .then_some(lines)
            .ok_or_else(|| "no line".to_string())
    });
    assert_eq!(lines, [format!("{trace_id} 200")]);
    h.assert_no_errors();
}

#[test]
fn a_clients_traceparent_is_continued_over_http1_and_http2_exported_over_otlp_grpc() {
    let jaeger = Jaeger::start();
    let (_app, port) = traced_app(&jaeger);
    let endpoint = format!("http://{}", jaeger.otlp_grpc);
    let h = hayate(port, &endpoint, "grpc", &[]);
    let tp = format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01");
    let state = "vendor=opaque";
    let r = h
        .client()
        .get("/", &[("traceparent", &tp), ("tracestate", state)]);
    let (trace_id, hayate_span, _) = received_traceparent(&r.text());
    assert_eq!(trace_id, CLIENT_TRACE);
    assert_ne!(hayate_span, CLIENT_SPAN, "hayate's span, not the client's");
    let trace = both_spans(&jaeger, CLIENT_TRACE);
    let ours = span_of(&trace, "hayate").expect("hayate's span");
    assert_eq!(ours["spanID"], hayate_span.as_str());
    assert_eq!(parent_of(ours), Some(CLIENT_SPAN), "{trace:#}");
    let app = span_of(&trace, "node-app").expect("the app's span");
    assert_eq!(parent_of(app), Some(hayate_span.as_str()), "{trace:#}");
    assert_eq!(tag(ours, "network.protocol.version"), "1.1");
    // Over HTTP/2 (curl, h2c with prior knowledge) alike.
    let over_h2 = "0af7651916cd43dd8448eb211c80319c";
    let tp = format!("traceparent: 00-{over_h2}-{CLIENT_SPAN}-01");
    let status = hayate_testkit::curl::status(h.addr.port(), "/", true, &[&tp]);
    assert_eq!(status, 200);
    let trace = both_spans(&jaeger, over_h2);
    let ours = span_of(&trace, "hayate").expect("hayate's span");
    assert_eq!(tag(ours, "network.protocol.version"), "2", "{ours:#}");
    assert_eq!(parent_of(ours), Some(CLIENT_SPAN), "{trace:#}");
    h.assert_no_errors();
}

#[test]
fn a_malformed_traceparent_starts_a_new_trace_and_an_unsampled_one_is_not_exported() {
    let jaeger = Jaeger::start();
    let (_app, port) = traced_app(&jaeger);
    let endpoint = format!("http://{}", jaeger.otlp_http);
    let h = hayate(port, &endpoint, "http/protobuf", &[]);
    // Upper-case hex is not valid (W3C Trace Context §3.2.2.3).
    let upper = format!("00-{}-{CLIENT_SPAN}-01", CLIENT_TRACE.to_uppercase());
    let r = h.client().get("/", &[("traceparent", &upper)]);
    let (fresh, _, flags) = received_traceparent(&r.text());
    assert_ne!(fresh, CLIENT_TRACE);
    assert_eq!(flags, "01");
    // Not sampled: passed on as it is (a new span, the flag kept), not
    // exported.
    let unsampled_trace = "0af7651916cd43dd8448eb211c80319c";
    let tp = format!("00-{unsampled_trace}-b7ad6b7169203331-00");
    let r = h.client().get("/", &[("traceparent", &tp)]);
    let (trace_id, span, flags) = received_traceparent(&r.text());
    assert_eq!((trace_id.as_str(), flags.as_str()), (unsampled_trace, "00"));
    assert_ne!(span, "b7ad6b7169203331");
    // A sampled request after it: once its spans are in, the unsampled
    // one's would have been (one queue, in order).
    let r = h.client().get("/", &[]);
    let (after, _, _) = received_traceparent(&r.text());
    both_spans(&jaeger, &after);
    both_spans(&jaeger, &fresh);
    assert!(
        jaeger.trace(unsampled_trace).is_none(),
        "an unsampled trace was exported"
    );
    h.assert_no_errors();
}

#[test]
fn an_h2c_upstream_gets_hayates_span_as_its_parent() {
    let jaeger = Jaeger::start();
    let (_app, port) = app(&jaeger, &["--h2c"]);
    let endpoint = format!("http://{}", jaeger.otlp_http);
    let proxy = format!("h2c://127.0.0.1:{port}");
    let h = Hayate::start(
        BIN,
        &[
            "--workers",
            "1",
            "--proxy",
            &proxy,
            "--otel-endpoint",
            &endpoint,
        ],
    );
    let tp = format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01");
    let r = h.client().get("/", &[("traceparent", &tp)]);
    assert_eq!(r.status, 200);
    let (trace_id, hayate_span, _) = received_traceparent(&r.text());
    assert_eq!(trace_id, CLIENT_TRACE);
    let ours = eventually("hayate's span in Jaeger", || {
        let trace = jaeger
            .trace(CLIENT_TRACE)
            .ok_or_else(|| "no trace yet".to_string())?;
        span_of(&trace, "hayate")
            .cloned()
            .ok_or_else(|| format!("{trace:#}"))
    });
    assert_eq!(ours["spanID"], hayate_span.as_str());
    h.assert_no_errors();
}

#[test]
fn a_php_script_gets_hayates_span_as_its_parent_in_http_traceparent() {
    let jaeger = Jaeger::start();
    let fpm = PhpFpm::start(&PhpPool {
        children: 1,
        max_requests: 0,
        terminate_after_secs: 0,
    });
    let root = tempfile::tempdir().expect("tempdir");
    let script = "<?php echo $_SERVER['HTTP_TRACEPARENT'] ?? 'none';\n";
    std::fs::write(root.path().join("tp.php"), script).expect("write");
    let endpoint = format!("http://{}", jaeger.otlp_http);
    let address = fpm.address();
    let h = Hayate::start(
        BIN,
        &[
            root.path().to_str().expect("utf-8"),
            "--fastcgi",
            &address,
            "--workers",
            "1",
            "--otel-endpoint",
            &endpoint,
        ],
    );
    let tp = format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01");
    let r = h.client().get("/tp.php", &[("traceparent", &tp)]);
    assert_eq!(r.status, 200);
    let sent = r.text();
    let parts: Vec<&str> = sent.split('-').collect();
    assert_eq!(parts.len(), 4, "{sent}");
    assert_eq!((parts[0], parts[1], parts[3]), ("00", CLIENT_TRACE, "01"));
    assert_ne!(parts[2], CLIENT_SPAN, "hayate's span, not the client's");
    let ours = eventually("hayate's span in Jaeger", || {
        let trace = jaeger
            .trace(CLIENT_TRACE)
            .ok_or_else(|| "no trace yet".to_string())?;
        span_of(&trace, "hayate")
            .cloned()
            .ok_or_else(|| format!("{trace:#}"))
    });
    assert_eq!(ours["spanID"], parts[2]);
    assert_eq!(parent_of(&ours), Some(CLIENT_SPAN));
    h.assert_no_errors();
}

#[test]
fn the_spans_of_the_last_second_are_sent_when_hayate_stops() {
    let jaeger = Jaeger::start();
    let origin = Origin::start(OriginOptions::default());
    let endpoint = format!("http://{}", jaeger.otlp_http);
    let proxy = origin.url();
    let mut h = Hayate::start(BIN, &["--proxy", &proxy, "--otel-endpoint", &endpoint]);
    let tp = format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01");
    assert_eq!(h.client().get("/", &[("traceparent", &tp)]).status, 200);
    // Stopped at once: the span still waits in the exporter's batch.
    assert!(h.stop().success());
    let trace = eventually("hayate's span in Jaeger", || {
        jaeger
            .trace(CLIENT_TRACE)
            .ok_or_else(|| "no trace".to_string())
    });
    assert!(span_of(&trace, "hayate").is_some(), "{trace:#}");
}

#[test]
fn a_reload_turns_tracing_on_and_moves_it_to_another_collector() {
    let (first, second) = (Jaeger::start(), Jaeger::start());
    let origin = Origin::start(OriginOptions::default());
    let dir = tempfile::tempdir().expect("tempdir");
    let control = dir.path().join("control.sock");
    let config = |otel: &str| {
        format!(
            "listen = [\"127.0.0.1:0\"]\nworkers = 2\ncontrol = \"{}\"\n{otel}\nproxy = [\"{}\"]\n",
            control.display(),
            origin.url()
        )
    };
    let file = dir.path().join("hayate.toml");
    let h = Hayate::start_config(BIN, &file, &config(""));
    let reload = |otel: String| {
        std::fs::write(&file, config(&otel)).expect("write");
        let (ok, said) = hayate_testkit::run_to_end(
            std::process::Command::new(BIN)
                .args(["reload", "--control"])
                .arg(&control),
        );
        assert!(ok, "{said}");
    };
    let traced_request = |trace: &str| {
        let tp = format!("00-{trace}-{CLIENT_SPAN}-01");
        assert_eq!(h.client().get("/", &[("traceparent", &tp)]).status, 200);
    };
    // Off: nothing is exported.
    let untraced = "11111111111111111111111111111111";
    traced_request(untraced);
    reload(format!("otel_endpoint = \"http://{}\"", first.otlp_http));
    traced_request(CLIENT_TRACE);
    eventually("the span in the first Jaeger", || {
        first.trace(CLIENT_TRACE).ok_or_else(|| "none".to_string())
    });
    assert!(first.trace(untraced).is_none(), "traced while off");
    let moved = "0af7651916cd43dd8448eb211c80319c";
    let otel = format!(
        "otel_endpoint = \"http://{}\"\notel_protocol = \"grpc\"",
        second.otlp_grpc
    );
    reload(otel);
    traced_request(moved);
    eventually("the span in the second Jaeger", || {
        second.trace(moved).ok_or_else(|| "none".to_string())
    });
    assert!(first.trace(moved).is_none());
    h.assert_no_errors();
}

/// A request whose answer was another request's fill of the cache (it
/// waited for it: coalesced) has that wait on its span, as events.
#[test]
fn a_request_that_waited_for_another_ones_cache_fill_has_the_wait_on_its_span() {
    let jaeger = Jaeger::start();
    let o = Origin::start(OriginOptions::default());
    let endpoint = format!("http://{}", jaeger.otlp_http);
    let dir = tempfile::tempdir().expect("tempdir");
    let admin = dir.path().join("admin.sock");
    let admin_arg = format!("unix:{}", admin.display());
    let proxy = o.url();
    let h = Hayate::start(
        BIN,
        &[
            "--workers",
            "1",
            "--proxy",
            &proxy,
            "--cache",
            "on",
            "--otel-endpoint",
            &endpoint,
            "--admin",
            &admin_arg,
        ],
    );
    let path = "/script?h=Cache-Control%3Amax-age%3D60&body=filled";
    let addr = h.addr;
    // The first request's fill is held at the origin; the second waits
    // for it (counted as coalesced), then both get its answer.
    let held = o.hold(path);
    let leader = std::thread::spawn(move || hayate_testkit::Client::connect(addr).get(path, &[]));
    assert!(o.wait_for(path, 1, Duration::from_secs(5)));
    let tp = format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01");
    let follower = std::thread::spawn(move || {
        hayate_testkit::Client::connect(addr).get(path, &[("traceparent", &tp)])
    });
    eventually("the second request waiting on the fill", || {
        let m = hayate_testkit::unix_get(&admin, "/metrics");
        match m.contains("hayate_cache_coalesced_total 1") {
            true => Ok(()),
            false => Err(m),
        }
    });
    drop(held);
    for r in [leader, follower].map(|t| t.join().expect("join")) {
        assert_eq!((r.status, r.text().as_str()), (200, "filled"));
    }
    assert_eq!(o.count(path), 1, "one fetch for both");
    let ours = eventually("the waiting request's span", || {
        let trace = jaeger
            .trace(CLIENT_TRACE)
            .ok_or_else(|| "no trace yet".to_string())?;
        span_of(&trace, "hayate")
            .cloned()
            .ok_or_else(|| format!("{trace:#}"))
    });
    let events: Vec<&str> = ours["logs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|log| log["fields"][0]["value"].as_str())
        .collect();
    assert_eq!(events, ["cache fill wait", "cache fill ready"], "{ours:#}");
    h.assert_no_errors();
}

#[test]
fn a_request_that_waited_for_a_member_has_its_queue_wait_on_its_span() {
    let jaeger = Jaeger::start();
    let o = Origin::start(OriginOptions::default());
    let endpoint = format!("http://{}", jaeger.otlp_http);
    let proxy = o.url();
    let h = Hayate::start(
        BIN,
        &[
            "--workers",
            "1",
            "--proxy",
            &proxy,
            "--proxy-max-conns",
            "1",
            "--proxy-queue",
            "1",
            "--otel-endpoint",
            &endpoint,
        ],
    );
    let addr = h.addr;
    let get = move |path: &'static str| hayate_testkit::Client::connect(addr).get(path, &[]);
    // The one connection is taken by a request the origin holds.
    let held = o.hold("/echo/first");
    let first = std::thread::spawn(move || get("/echo/first").status);
    assert!(o.wait_for("/echo/first", 1, Duration::from_secs(5)));
    // Of two more, one waits in the one-place queue: the other's 503 says
    // it is there.
    let (tx, rx) = std::sync::mpsc::channel();
    for _ in 0..2 {
        let tx = tx.clone();
        std::thread::spawn(move || tx.send(get("/echo")));
    }
    let refused = rx.recv_timeout(Duration::from_secs(5)).expect("the 503");
    assert_eq!(refused.status, 503);
    drop(held);
    let queued = rx.recv_timeout(Duration::from_secs(5)).expect("the answer");
    assert_eq!(queued.status, 200);
    assert_eq!(first.join().expect("join"), 200);
    let echo = hayate_testkit::origin::Echo::parse(&queued.text());
    let tp = echo.header("traceparent").expect("a traceparent upstream");
    let trace_id = tp.split('-').nth(1).expect("a trace id").to_string();
    let ours = eventually("the queued request's span", || {
        let trace = jaeger
            .trace(&trace_id)
            .ok_or_else(|| "no trace yet".to_string())?;
        span_of(&trace, "hayate")
            .cloned()
            .ok_or_else(|| format!("{trace:#}"))
    });
    assert!(
        tag(&ours, "hayate.upstream.queue_time").as_f64() > Some(0.0),
        "{ours:#}"
    );
    let first_event = ours["logs"][0]["fields"][0]["value"].as_str();
    assert_eq!(first_event, Some("upstream queue"), "{ours:#}");
}

#[test]
fn spans_reach_an_https_collector_verified_against_otel_ca_over_both_protocols() {
    // A CA file that is not there is refused before anything is served
    // (`timeout`: a hayate that started anyway would serve on).
    let (ok, said) = hayate_testkit::run_to_end(std::process::Command::new("timeout").args([
        "10",
        BIN,
        "--listen",
        "127.0.0.1:0",
        "--proxy",
        "http://127.0.0.1:9",
        "--otel-endpoint",
        "https://localhost:4318",
        "--otel-ca",
        "/nonexistent/ca.pem",
    ]));
    assert!(
        !ok && said.contains("otel_ca: /nonexistent/ca.pem"),
        "{said}"
    );
    assert!(!said.contains("serving"), "{said}");
    let pki = hayate_testkit::tls::Pki::new();
    let (cert, key, _) = pki.issue(&["localhost"], "collector");
    let jaeger = Jaeger::start_tls(&cert, &key);
    let origin = Origin::start(OriginOptions::default());
    let ca = pki.ca();
    let ca = ca.to_str().expect("utf-8");
    let proxy = origin.url();
    for (protocol, port, trace) in otlp_protocols(&jaeger) {
        traced_over_tls(&jaeger, &proxy, protocol, port, trace, &["--otel-ca", ca]);
    }
}

/// Each OTLP protocol with the collector's port for it and a trace id of
/// its own (one collector takes both).
fn otlp_protocols(jaeger: &Jaeger) -> [(&'static str, u16, &'static str); 2] {
    [
        ("http/protobuf", jaeger.otlp_http.port(), CLIENT_TRACE),
        (
            "grpc",
            jaeger.otlp_grpc.port(),
            "0af7651916cd43dd8448eb211c80319c",
        ),
    ]
}

/// Starts hayate in front of `proxy` exporting over `protocol` to the
/// https collector on `port` (with `extra` arguments), sends a request
/// continuing `trace`, and waits for hayate's span of it at the collector.
fn traced_over_tls(
    jaeger: &Jaeger,
    proxy: &str,
    protocol: &str,
    port: u16,
    trace: &str,
    extra: &[&str],
) -> Hayate {
    let endpoint = format!("https://localhost:{port}");
    let mut args = vec![
        "--proxy",
        proxy,
        "--otel-endpoint",
        &endpoint,
        "--otel-protocol",
        protocol,
    ];
    args.extend_from_slice(extra);
    let h = Hayate::start(BIN, &args);
    let tp = format!("00-{trace}-{CLIENT_SPAN}-01");
    assert_eq!(h.client().get("/", &[("traceparent", &tp)]).status, 200);
    let found = eventually(&format!("the span over {protocol} and TLS"), || {
        jaeger
            .trace(trace)
            .ok_or_else(|| "no trace yet".to_string())
    });
    assert!(span_of(&found, "hayate").is_some(), "{found:#}");
    h.assert_no_errors();
    h
}

/// A collector that requires a client certificate takes spans from a
/// hayate presenting `otel_tls_cert`, over both protocols; without one,
/// the exports fail and are counted as dropped.
#[test]
fn a_collector_requiring_client_certificates_takes_spans_with_otel_tls_cert() {
    let pki = hayate_testkit::tls::Pki::new();
    let (cert, key, _) = pki.issue(&["localhost"], "collector");
    let (client_cert, client_key, _) = pki.issue(&["hayate"], "hayate-client");
    let ca = pki.ca();
    let ca = ca.to_str().expect("utf-8");
    let jaeger = Jaeger::start_mtls(&cert, &key, ca);
    let origin = Origin::start(OriginOptions::default());
    let proxy = origin.url();
    for (protocol, port, trace) in otlp_protocols(&jaeger) {
        let with_certificate = [
            "--otel-ca",
            ca,
            "--otel-tls-cert",
            &client_cert,
            "--otel-tls-key",
            &client_key,
        ];
        drop(traced_over_tls(
            &jaeger,
            &proxy,
            protocol,
            port,
            trace,
            &with_certificate,
        ));
        // Without the certificate, the collector refuses the handshake.
        let dir = tempfile::tempdir().expect("tempdir");
        let admin = dir.path().join("admin.sock");
        let admin_arg = format!("unix:{}", admin.display());
        let endpoint = format!("https://localhost:{port}");
        let args = [
            "--proxy",
            &proxy,
            "--otel-endpoint",
            &endpoint,
            "--otel-protocol",
            protocol,
            "--otel-ca",
            ca,
            "--admin",
            &admin_arg,
        ];
        let h = Hayate::start(BIN, &args);
        assert_eq!(h.client().get("/", &[]).status, 200);
        eventually("the span dropped", || match span_counters(&admin) {
            (0, 1) => Ok(()),
            other => Err(format!("{other:?}")),
        });
    }
}

/// `/metrics`' `hayate_otel_spans_*_total` counters: (exported, dropped).
fn span_counters(admin: &Path) -> (u64, u64) {
    let text = hayate_testkit::unix_get(admin, "/metrics");
    let value = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("{name} in\n{text}"))
    };
    (
        value("hayate_otel_spans_exported_total"),
        value("hayate_otel_spans_dropped_total"),
    )
}

/// 20 requests to `h`, each answered at once: none waits for the collector.
fn twenty_requests_answered_at_once(h: &Hayate) {
    let started = Instant::now();
    let mut client = h.client();
    for _ in 0..20 {
        assert_eq!(client.get("/", &[]).status, 200);
    }
    // The collector's timeout is 5 s: waiting on it would show.
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

/// The TCP port an origin listens on.
fn origin_port(origin: &Origin) -> u16 {
    origin
        .url()
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("port")
}

#[test]
fn a_collector_that_is_down_or_never_answers_costs_requests_nothing_and_drops_are_counted() {
    let origin = Origin::start(OriginOptions::default());
    let port = origin_port(&origin);
    let dir = tempfile::tempdir().expect("tempdir");
    let closed = hayate_testkit::ports::ClosedPort::new();
    let down = format!("http://{}", closed.addr());
    let admin = dir.path().join("down.sock");
    let admin_arg = format!("unix:{}", admin.display());
    let extra = ["--admin", &admin_arg, "--otel-timeout", "5s"];
    let h = hayate(port, &down, "http/protobuf", &extra);
    twenty_requests_answered_at_once(&h);
    eventually("20 spans dropped", || match span_counters(&admin) {
        (0, 20) => Ok(()),
        other => Err(format!("{other:?}")),
    });
    drop(h);

    // A listener that takes connections and never answers: once the first
    // batch is stuck on it (its connection accepted), a queue of 4 fills
    // and the rest are dropped as they end, while requests go on as before.
    let silent = TcpListener::bind("127.0.0.1:0").expect("bind");
    silent.set_nonblocking(true).expect("nonblocking");
    let silent_url = format!("http://{}", silent.local_addr().expect("addr"));
    let admin = dir.path().join("silent.sock");
    let admin_arg = format!("unix:{}", admin.display());
    let extra = [
        "--admin",
        &admin_arg,
        "--otel-timeout",
        "5s",
        "--otel-queue",
        "4",
    ];
    let h = hayate(port, &silent_url, "grpc", &extra);
    assert_eq!(h.client().get("/", &[]).status, 200);
    let _stuck = eventually("the exporter connecting", || {
        silent.accept().map_err(|e| e.to_string())
    });
    twenty_requests_answered_at_once(&h);
    eventually("spans past the queue dropped", || {
        match span_counters(&admin) {
            (0, 16) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
}

/// `otel_headers` (a hosted collector's credentials) go with every export,
/// percent-decoded, and are never written to the log; a collector's
/// partial success (spans it refused) counts those spans as dropped.
#[test]
fn otel_headers_go_with_every_export_and_refused_spans_are_counted() {
    let origin = Origin::start(OriginOptions::default());
    let port = origin_port(&origin);
    let collector = TcpListener::bind("127.0.0.1:0").expect("bind");
    let endpoint = format!("http://{}", collector.local_addr().expect("addr"));
    let dir = tempfile::tempdir().expect("tempdir");
    let admin = dir.path().join("admin.sock");
    let admin_arg = format!("unix:{}", admin.display());
    let extra = [
        "--otel-headers",
        "api-key=s3cr%3Dt,x-tenant=blue",
        "--log-level",
        "debug",
        "--admin",
        &admin_arg,
    ];
    let h = hayate(port, &endpoint, "http/protobuf", &extra);
    assert_eq!(h.client().get("/", &[]).status, 200);
    let (mut conn, _) = collector.accept().expect("the export's connection");
    let mut head = Vec::new();
    hayate_testkit::read_through_blank_line(&mut conn, &mut head).expect("the export's head");
    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
    assert!(head.starts_with("post /v1/traces http/1.1\r\n"), "{head}");
    assert!(head.contains("\r\napi-key: s3cr=t\r\n"), "{head}");
    assert!(head.contains("\r\nx-tenant: blue\r\n"), "{head}");
    // The body read before answering: closing with unread bytes would
    // reset the connection under hayate's write of it (a broken pipe,
    // not the partial success this test is about).
    read_body_of(&mut conn, &head);
    // ExportTraceServiceResponse { partial_success { rejected_spans: 1,
    // error_message: "quota" } }, chunked as a collector may send it.
    conn.write_all(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\n\
          Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n\
          b\r\n\x0a\x09\x08\x01\x12\x05quota\r\n0\r\n\r\n",
    )
    .expect("answer");
    drop(conn);
    eventually(
        "the refused span counted as dropped",
        || match span_counters(&admin) {
            (0, 1) => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
    let log = h.stderr();
    assert!(log.contains("refused 1 of 1 spans: quota"), "{log}");
    assert!(!log.contains("s3cr"), "a secret in the log:\n{log}");
}

/// The body of an export POST taken on `conn` (its head read first).
fn export_body(conn: &mut std::net::TcpStream) -> Vec<u8> {
    let mut head = Vec::new();
    hayate_testkit::read_through_blank_line(conn, &mut head).expect("the export's head");
    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
    read_body_of(conn, &head)
}

/// The body that follows `head` (lower-cased) on `conn`, by its Content-Length.
fn read_body_of(conn: &mut std::net::TcpStream, head: &str) -> Vec<u8> {
    let len: usize = head
        .split("\r\ncontent-length: ")
        .nth(1)
        .and_then(|rest| rest.split("\r\n").next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a Content-Length in {head}"));
    let mut body = vec![0; len];
    conn.read_exact(&mut body).expect("the export's body");
    body
}

/// A collector that answers 429 with `Retry-After: 1` gets the same batch
/// again, not before a second has passed, and it then counts as exported.
#[test]
fn a_throttling_collector_gets_the_same_batch_again_after_its_retry_after() {
    let origin = Origin::start(OriginOptions::default());
    let port = origin_port(&origin);
    let collector = TcpListener::bind("127.0.0.1:0").expect("bind");
    collector.set_nonblocking(true).expect("nonblocking");
    let endpoint = format!("http://{}", collector.local_addr().expect("addr"));
    let dir = tempfile::tempdir().expect("tempdir");
    let admin = dir.path().join("admin.sock");
    let admin_arg = format!("unix:{}", admin.display());
    let h = hayate(port, &endpoint, "http/protobuf", &["--admin", &admin_arg]);
    assert_eq!(h.client().get("/", &[]).status, 200);
    let accept = || {
        let (conn, _) = eventually("the exporter connecting", || {
            collector.accept().map_err(|e| e.to_string())
        });
        conn.set_nonblocking(false).expect("blocking");
        conn
    };
    let mut first = accept();
    let batch = export_body(&mut first);
    first
        .write_all(b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 1\r\nContent-Length: 0\r\n\r\n")
        .expect("answer");
    let throttled = std::time::Instant::now();
    drop(first);
    let mut again = accept();
    let waited = throttled.elapsed();
    assert_eq!(export_body(&mut again), batch, "the same batch");
    assert!(
        waited >= std::time::Duration::from_millis(900),
        "sent again after {waited:?}, before Retry-After's second"
    );
    again
        .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        .expect("answer");
    drop(again);
    eventually("the batch counted as exported", || {
        match span_counters(&admin) {
            (1, 0) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
}
