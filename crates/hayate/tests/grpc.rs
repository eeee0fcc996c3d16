//! gRPC through hayate with a real gRPC stack on both sides (issue 38):
//! a grpc-js client calls a grpc-js server (tests/grpc-app, installed from
//! its lockfile with `npm ci`) through hayate, over TLS (ALPN h2) and over
//! h2c, with every call kind: unary, server streaming with messages timed
//! so that a buffering proxy fails, bidirectional streaming where each
//! message waits for the answer to the previous one, an error status with
//! trailing metadata (binary too), the client's deadline and hayate's own
//! (`proxy_timeout`, answered as DEADLINE_EXCEEDED), a 4 MiB message each
//! way, and a member that is down (UNAVAILABLE, not UNKNOWN). The server
//! sees the calls that hayate or the client gave up on cancelled, a server
//! stream the client cancelled between two messages included, and the
//! access log records each call's grpc-status.

// Tests block on purpose (they are clients, not the server).
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use hayate_testkit::node::NodeProcess;
use hayate_testkit::ports::ClosedPort;
use hayate_testkit::{eventually, Hayate};

const BIN: &str = env!("CARGO_BIN_EXE_hayate");

/// The gRPC app's sources, in the repository.
const SOURCES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/grpc-app");

/// The app with its node_modules, installed on first use.
fn app() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("grpc-app");
        hayate_testkit::node::install(Path::new(SOURCES), dir)
    })
}

/// hayate's routes to the gRPC server `member` (the Probe service; gRPC
/// paths match no file, so the site's default route proxies them) and to a
/// member that is down (the Down service), with a 1 s proxy_timeout and
/// room for a 4 MiB message.
fn routes(member: &str, down_port: u16) -> Vec<String> {
    vec![
        "--proxy".into(),
        format!("/hayate.test.Down/=h2c://127.0.0.1:{down_port}"),
        "--proxy".into(),
        member.into(),
        "--proxy-timeout".into(),
        "1s".into(),
        // A 4 MiB message and its framing (the default is 1 MiB).
        "--max-body-size".into(),
        "8MiB".into(),
    ]
}

/// Runs the client's cases against hayate and checks every one passed;
/// then that the server saw the calls given up on cancelled: the stream
/// the client cancelled, the call past the client's deadline, then the one
/// past hayate's.
fn every_call_kind(h: &Hayate, server: &NodeProcess, ca: Option<&Path>) {
    let target = h.addr.to_string();
    let mut args = vec!["grpc.js", "client", &target];
    let ca = ca.map(|p| p.display().to_string());
    args.extend(ca.as_deref());
    let expected = [
        "unary",
        "server_stream",
        "cancel_mid_stream",
        "bidi_stream",
        "error_with_trailers",
        "deadline_exceeded",
        "hayate_deadline",
        "four_mib",
        "upstream_down",
    ];
    client_cases(h, &args, &expected);
    let mut seen = Vec::new();
    eventually("the server saw the calls given up on cancelled", || {
        seen.extend(server.printed());
        let hung = seen.iter().filter(|l| *l == "cancelled hang").count();
        // How long after it began the stream was seen cancelled (its
        // second message was due 10 s later).
        let stream = seen
            .iter()
            .find_map(|l| l.strip_prefix("cancelled count ")?.parse::<u64>().ok());
        (hung == 2 && stream.is_some_and(|ms| ms < 2000))
            .then_some(())
            .ok_or_else(|| format!("{seen:?}"))
    });
    // The access log says how each call ended, though HTTP says 200: OK,
    // INVALID_ARGUMENT, DEADLINE_EXCEEDED (hayate's), UNAVAILABLE.
    let mut log = Vec::new();
    eventually("grpc-status in the access log", || {
        log.extend(h.stdout_lines(std::time::Duration::from_millis(100)));
        let calls = |path: &str, status: &str| {
            log.iter()
                .filter(|l| l.contains(path) && l.contains(" 200 "))
                .filter(|l| l.ends_with(&format!(" grpc-status={status}")))
                .count()
        };
        let echo = "/hayate.test.Probe/Echo";
        let seen = (
            calls(echo, "0"),
            calls(echo, "3"),
            calls(echo, "4"),
            calls("/hayate.test.Down/Echo", "14"),
        );
        (seen.0 >= 2 && seen.1 == 1 && seen.2 >= 1 && seen.3 == 1)
            .then_some(())
            .ok_or_else(|| format!("{seen:?} in {log:#?}"))
    });
}

#[test]
fn grpc_calls_of_every_kind_through_hayate_over_tls() {
    let server = NodeProcess::start(app(), &["grpc.js", "server"]);
    let port = server.listening_port();
    let closed = ClosedPort::new();
    let down = closed.port();
    let routes = routes(&format!("h2c://127.0.0.1:{port}"), down);
    let args: Vec<&str> = routes.iter().map(String::as_str).collect();
    let (h, state, _site) = hayate_testkit::tls::start_with_local_ca(BIN, &args);
    let ca = hayate_testkit::tls::local_ca(state.path());
    every_call_kind(&h, &server, Some(&ca));
    only_errors_about(&h, down);
}

#[test]
fn grpc_calls_of_every_kind_through_hayate_over_h2c() {
    let server = NodeProcess::start(app(), &["grpc.js", "server"]);
    let port = server.listening_port();
    let site = hayate_testkit::site();
    let mut args = vec![site.path().to_str().expect("path").to_string()];
    let closed = ClosedPort::new();
    let down = closed.port();
    args.extend(routes(&format!("h2c://127.0.0.1:{port}"), down));
    args.extend(["--admin".into(), "127.0.0.1:0".into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let h = Hayate::start(BIN, &args);
    every_call_kind(&h, &server, None);
    only_errors_about(&h, down);
    // /metrics counts the calls by the status they ended with, per route:
    // the client's cases (OK, INVALID_ARGUMENT, the two DEADLINE_EXCEEDED,
    // the server stream it CANCELLED) and the member that is down.
    let admin = h.admin_addr();
    let sample = |route: &str, code: &str| {
        format!("hayate_grpc_calls_total{{site=\"*\",route=\"{route}\",grpc_code=\"{code}\"}} ")
    };
    eventually("gRPC calls on /metrics by grpc-status", || {
        let metrics = hayate_testkit::Client::connect(admin)
            .get("/metrics", &[])
            .text();
        let count = |route: &str, code: &str| -> u64 {
            let line = sample(route, code);
            metrics
                .lines()
                .find_map(|l| l.strip_prefix(line.as_str())?.parse().ok())
                .unwrap_or(0)
        };
        let seen = (
            count("/", "OK"),
            count("/", "INVALID_ARGUMENT"),
            count("/hayate.test.Down/", "UNAVAILABLE"),
            count("/hayate.test.Down/", "OK"),
        );
        (seen.0 >= 4 && seen.1 == 1 && seen.2 == 1 && seen.3 == 0)
            .then_some(())
            .ok_or_else(|| format!("{seen:?} in {metrics}"))
    });
}

#[test]
fn grpc_calls_of_every_kind_to_a_server_on_a_unix_socket() {
    let dir = tempfile::tempdir().expect("dir");
    let socket = dir.path().join("grpc.sock");
    let on = format!("unix:{}", socket.display());
    let server = NodeProcess::start(app(), &["grpc.js", "server", &on]);
    server.line_after("listening ");
    let site = hayate_testkit::site();
    let mut args = vec![site.path().to_str().expect("path").to_string()];
    let closed = ClosedPort::new();
    let down = closed.port();
    args.extend(routes(&format!("unix+h2c:{}", socket.display()), down));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let h = Hayate::start(BIN, &args);
    every_call_kind(&h, &server, None);
    only_errors_about(&h, down);
}

/// A browser's gRPC-Web calls (`grpc_web = true`), made by hand as its
/// library makes them over HTTP/1.1, reach the grpc-js server as gRPC and
/// come back with the status in the body: binary and base64 text, a
/// server stream whose messages arrive as they are sent, an error status
/// with its metadata, a member that is down, a body that is not base64.
#[test]
fn grpc_web_calls_from_a_browser_client() {
    let server = NodeProcess::start(app(), &["grpc.js", "server"]);
    let port = server.listening_port();
    let site = hayate_testkit::site();
    let mut args = vec![site.path().to_str().expect("path").to_string()];
    let closed = ClosedPort::new();
    args.extend(routes(&format!("h2c://127.0.0.1:{port}"), closed.port()));
    args.push("--grpc-web".into());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let h = Hayate::start(BIN, &args);
    let base = format!("http://{}", h.addr);
    let expected = [
        "web_unary",
        "web_text_unary",
        "web_server_stream",
        "web_error_status",
        "web_upstream_down",
        "web_bad_text",
    ];
    client_cases(&h, &["grpc-web-client.js", &base], &expected);
}

/// `grpc_web` on a route whose upstream speaks HTTP/1.1 is refused at
/// start, saying what it needs.
#[test]
fn grpc_web_needs_an_http2_upstream() {
    let site = hayate_testkit::site();
    let stderr = refused_start(&[
        site.path().to_str().expect("path"),
        "--proxy",
        "http://127.0.0.1:9",
        "--grpc-web",
        "--listen",
        "127.0.0.1:0",
    ]);
    assert!(
        stderr.contains("grpc_web") && stderr.contains("h2c://"),
        "{stderr}"
    );
}

/// `proxy_health_check = "grpc"` probes HTTP/2 members with gRPC's health
/// protocol (grpc-js serving grpc.health.v1): a server answering
/// NOT_SERVING is taken out, one answering SERVING stays in, and a check
/// of a service the server does not know (NOT_FOUND) takes it out of that
/// route only.
#[test]
fn grpc_health_checks_take_out_members_not_serving() {
    let sick = NodeProcess::start(app(), &["grpc.js", "server", "-", "NOT_SERVING"]);
    let well = NodeProcess::start(app(), &["grpc.js", "server"]);
    let (sick, well) = (sick.listening_port(), well.listening_port());
    let dir = tempfile::tempdir().expect("dir");
    let config = format!(
        "listen = [\"127.0.0.1:0\"]\nproxy_health_interval = \"100ms\"\n\
         [[site]]\n\
         [[site.route]]\nprefix = \"/hayate.test.Probe/\"\n\
         proxy = [\"h2c://127.0.0.1:{sick}\", \"h2c://127.0.0.1:{well}\"]\n\
         proxy_health_check = \"grpc\"\n\
         [[site.route]]\nprefix = \"/hayate.test.Other/\"\n\
         proxy = [\"h2c://127.0.0.1:{well}\"]\n\
         proxy_health_check = \"grpc:hayate.test.Other\"\n"
    );
    let h = Hayate::start_config(BIN, &dir.path().join("hayate.toml"), &config);
    let failed = |port: u16, why: &str| {
        format!("upstream h2c://127.0.0.1:{port} failed its health check: {why}")
    };
    eventually("the probes' verdicts in the log", || {
        let log = h.stderr();
        (log.contains(&failed(sick, "answered NOT_SERVING"))
            && log.contains(&failed(well, "grpc-status 5")))
        .then_some(())
        .ok_or(log)
    });
    // The serving member is never judged not serving (a probe that timed
    // out on a loaded machine would be another matter: not asserted).
    let log = h.stderr();
    assert!(
        !log.contains(&failed(well, "answered")),
        "the serving member fails only the check of a service it does not know:\n{log}"
    );
}

/// `proxy_health_check = "grpc"` needs HTTP/2 members: refused at start
/// for HTTP/1.1 ones, naming the route.
#[test]
fn grpc_health_checks_need_http2_members() {
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("hayate.toml");
    std::fs::write(
        &file,
        "listen = [\"127.0.0.1:0\"]\n[[site]]\n[[site.route]]\nprefix = \"/api/\"\n\
         proxy = [\"http://127.0.0.1:9\"]\nproxy_health_check = \"grpc\"\n",
    )
    .expect("write");
    let stderr = refused_start(&["--config", file.to_str().expect("path")]);
    assert!(
        stderr.contains("\"/api/\"") && stderr.contains("needs HTTP/2 members"),
        "{stderr}"
    );
}

/// gRPC from an HTTP/3 client (aioquic, `tests/h3_client.py`): a unary
/// call with its trailers, and a bidirectional call whose messages each
/// wait for the answer to the one before (the client's body flows up while
/// the answer flows down); /metrics counts them by status.
#[test]
fn grpc_calls_from_an_http3_client() {
    let server = NodeProcess::start(app(), &["grpc.js", "server"]);
    let port = server.listening_port();
    let member = format!("h2c://127.0.0.1:{port}");
    let args = [
        "--http3",
        "true",
        "--proxy",
        &member,
        "--admin",
        "127.0.0.1:0",
    ];
    let (h, state, _site) = hayate_testkit::tls::start_with_local_ca(BIN, &args);
    let ca = hayate_testkit::tls::local_ca(state.path());
    let client = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/h3_client.py");
    let call = tempfile::NamedTempFile::new().expect("temp file");
    // Msg { text: "hi" } in its gRPC frame.
    std::fs::write(call.path(), [0, 0, 0, 0, 4, 0x0a, 2, b'h', b'i']).expect("write");
    let h3 = |args: &[&str]| {
        let out = Command::new("python3")
            .arg(client)
            .arg("--ca")
            .arg(&ca)
            .args(args)
            .output()
            .expect("python3");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_str::<serde_json::Value>(stdout.trim()).expect("a JSON line")
    };
    let port = h.addr.port().to_string();
    let unary = h3(&[
        "127.0.0.1",
        &port,
        "POST",
        "/hayate.test.Probe/Echo",
        "--header",
        "content-type: application/grpc",
        "--header",
        "te: trailers",
        "--body-file",
        call.path().to_str().expect("path"),
    ]);
    assert_eq!(unary["status"], 200, "{unary:#}");
    assert!(
        unary["body"]
            .as_str()
            .is_some_and(|b| b.contains("echo:hi")),
        "{unary:#}"
    );
    let trailer = |answer: &serde_json::Value, name: &str| {
        answer["trailers"]
            .as_array()
            .and_then(|t| t.iter().find(|f| f[0] == name))
            .map(|f| f[1].clone())
    };
    assert_eq!(
        trailer(&unary, "grpc-status"),
        Some("0".into()),
        "{unary:#}"
    );
    let chat = h3(&[
        "--grpc-chat",
        "/hayate.test.Probe/Chat",
        "a,b,c",
        "127.0.0.1",
        &port,
    ]);
    assert_eq!(
        chat["chat"],
        serde_json::json!(["echo:a", "echo:b", "echo:c"]),
        "{chat:#}"
    );
    assert_eq!(trailer(&chat, "grpc-status"), Some("0".into()), "{chat:#}");
    let admin = h.admin_addr();
    eventually("both calls on /metrics", || {
        let metrics = hayate_testkit::Client::connect(admin)
            .get("/metrics", &[])
            .text();
        let ok = "hayate_grpc_calls_total{site=\"*\",route=\"/\",grpc_code=\"OK\"} 2";
        metrics.contains(ok).then_some(()).ok_or(metrics)
    });
}

/// Runs a Node client of the app (`args`: its script and arguments), which
/// prints one JSON line per case (`case`, `ok`, `detail`), and checks that
/// it ran the `expected` cases in order and every one passed.
fn client_cases(h: &Hayate, args: &[&str], expected: &[&str]) {
    let out = Command::new("node")
        .args(args)
        .current_dir(app())
        .output()
        .expect("node");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "client failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cases: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let names: Vec<&str> = cases.iter().filter_map(|c| c["case"].as_str()).collect();
    assert_eq!(names, expected, "{stdout}");
    let failed: Vec<&serde_json::Value> = cases.iter().filter(|c| c["ok"] != true).collect();
    assert!(
        failed.is_empty(),
        "failed cases: {failed:#?}\nhayate's log:\n{}",
        h.stderr()
    );
}

/// hayate started with `args`, which it must refuse: what it wrote to
/// stderr.
fn refused_start(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).output().expect("hayate");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{stderr}");
    stderr
}

/// hayate's log holds no error but the down member's failed connect and
/// the call that hit the route's proxy_timeout (a 504, as gRPC's
/// DEADLINE_EXCEEDED); the call whose own deadline passed is no error.
fn only_errors_about(h: &Hayate, down: u16) {
    let log = h.stderr();
    let member = format!("127.0.0.1:{down}");
    let expected = |l: &str| l.contains(&member) || l.contains("no response head in time");
    let unexpected: Vec<&str> = log
        .lines()
        .filter(|l| (l.contains(" ERROR ") && !expected(l)) || l.contains("panicked"))
        .collect();
    assert!(
        unexpected.is_empty(),
        "unexpected errors:\n{}",
        unexpected.join("\n")
    );
    let timeouts = log.matches("no response head in time").count();
    assert_eq!(timeouts, 1, "the proxy_timeout's call only:\n{log}");
}
