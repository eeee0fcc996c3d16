//! HTTP/2 upstreams for ordinary web apps (issue 38): a Node `http2`
//! server (tests/grpc-app/http2-server.js) behind hayate, as an `h2c://`
//! member and as an `https://` member with `proxy_http2 = on` (ALPN h2),
//! or `auto` (ALPN h2 or http/1.1: the member chooses);
//! GETs and POSTs with bodies larger than the replay buffer; concurrent
//! requests sharing one connection (multiplexed, where the HTTP/1 pool
//! holds one connection per request in flight); and a server that closes
//! its connections with GOAWAY every few streams, with no request failing.

// Tests block on purpose (they are clients, not the server).
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use hayate_testkit::node::NodeProcess;
use hayate_testkit::{big_bytes, Client, Hayate};

const BIN: &str = env!("CARGO_BIN_EXE_hayate");

/// The app's sources (the http2 server needs no package, but shares the
/// directory and its installation with the gRPC app).
const SOURCES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/grpc-app");

fn app() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("h2-upstream-app");
        hayate_testkit::node::install(Path::new(SOURCES), dir)
    })
}

/// The server, with more `args`, and its port.
fn server(args: &[&str]) -> (NodeProcess, u16) {
    let mut all = vec!["http2-server.js"];
    all.extend_from_slice(args);
    let server = NodeProcess::start(app(), &all);
    let port = server.listening_port();
    (server, port)
}

/// What the server says it served (`GET /stats` through hayate).
fn stats(h: &Hayate) -> serde_json::Value {
    let r = h.client().get("/stats", &[]);
    assert_eq!(r.status, 200, "{}", r.text());
    serde_json::from_slice(&r.body).expect("JSON")
}

/// A GET, and POSTs below and above the replay buffer (64 KiB: read first,
/// or streamed), answered by the HTTP/2 member.
fn get_and_post(h: &Hayate) {
    let mut c = h.client();
    let r = c.get("/hello", &[]);
    assert_eq!((r.status, r.text().as_str()), (200, "hello over h2\n"));
    assert_eq!(r.header("x-session"), Some("1"));
    for len in [10, 1024 * 1024] {
        let body = big_bytes(len);
        let r = c.post("/echo", &[], &body);
        assert_eq!(r.status, 200);
        assert!(r.body == body, "{len} bytes back as sent");
    }
    let r = c.request("HEAD", "/hello", &[]);
    assert_eq!(r.status, 200);
    assert!(r.body.is_empty());
}

#[test]
fn get_and_post_to_a_node_http2_server_over_h2c() {
    let (_server, port) = server(&[]);
    let member = format!("h2c://127.0.0.1:{port}");
    let h = Hayate::start(BIN, &["--proxy", &member, "--max-body-size", "4MiB"]);
    get_and_post(&h);
    h.assert_no_errors();
}

#[test]
fn get_and_post_to_a_node_http2_server_over_tls_with_proxy_http2_on() {
    let (h, _server, _pki) = tls_member_behind("on", &[]);
    get_and_post(&h);
    h.assert_no_errors();
}

/// hayate (one worker) in front of the Node server started with
/// `server_args` over TLS, under `proxy_http2 = mode`; the server and its
/// certificates too.
fn tls_member_behind(
    mode: &str,
    server_args: &[&str],
) -> (Hayate, NodeProcess, hayate_testkit::tls::Pki) {
    let pki = hayate_testkit::tls::Pki::new();
    let (cert, key, _) = pki.issue(&["127.0.0.1"], "upstream");
    let mut args = vec!["--tls", &key, &cert];
    args.extend_from_slice(server_args);
    let (server, port) = server(&args);
    let member = format!("https://127.0.0.1:{port}");
    let ca = pki.ca().display().to_string();
    let h = Hayate::start(
        BIN,
        &[
            "--proxy",
            &member,
            "--proxy-tls-ca",
            &ca,
            "--proxy-http2",
            mode,
            "--workers",
            "1",
            "--max-body-size",
            "4MiB",
        ],
    );
    (h, server, pki)
}

#[test]
fn proxy_http2_auto_speaks_http2_to_a_member_that_offers_it_on_the_connection_it_learned_on() {
    let (h, _server, _pki) = tls_member_behind("auto", &["--allow-http1"]);
    // Over HTTP/2 from the first request, on connection 1: the one the
    // protocol was learned on, adopted by the HTTP/2 pool.
    get_and_post(&h);
    assert_eq!(stats(&h)["sessions"], 1);
    h.assert_no_errors();
}

#[test]
fn proxy_http2_auto_speaks_http1_to_a_member_without_http2() {
    let (h, _server, _pki) = tls_member_behind("auto", &["--http1-only"]);
    let mut c = h.client();
    let r = c.get("/hello", &[]);
    assert_eq!(
        (r.status, r.text().as_str()),
        (200, "hello over http/1.1\n")
    );
    let body = big_bytes(1024 * 1024);
    let r = c.post("/echo", &[], &body);
    assert_eq!(r.status, 200);
    assert!(r.body == body, "the body back as sent");
    // One connection: the one the protocol was learned on, pooled.
    assert_eq!(stats(&h)["sessions"], 1);
    h.assert_no_errors();
}

#[test]
fn an_http2_upstreams_early_hints_reach_the_client_before_its_answer() {
    let (_server, port) = server(&[]);
    let member = format!("h2c://127.0.0.1:{port}");
    let h = Hayate::start(BIN, &["--proxy", &member]);
    let mut c = h.client();
    c.send(b"GET /early HTTP/1.1\r\nHost: test\r\n\r\n");
    // The 103 comes while the server holds the final answer.
    let hint = c.read_response(false);
    assert_eq!(hint.status, 103, "{hint:?}");
    assert_eq!(
        hint.header("link"),
        Some("</style.css>; rel=preload; as=style")
    );
    assert_eq!(h.client().get("/release", &[]).status, 200);
    let r = c.read_response(false);
    assert_eq!((r.status, r.text().as_str()), (200, "final\n"), "{r:?}");
    assert_eq!(r.header("link"), None, "hints stay off the final head");
    h.assert_no_errors();
}

#[test]
fn concurrent_requests_share_one_connection() {
    let (_server, port) = server(&[]);
    let member = format!("h2c://127.0.0.1:{port}");
    let h = Hayate::start(BIN, &["--proxy", &member, "--workers", "1"]);
    // 40 requests at once, each answered after 200 ms: an HTTP/1 pool
    // opens 40 connections for them.
    let addr = h.addr;
    std::thread::scope(|s| {
        let all: Vec<_> = (0..40)
            .map(|_| s.spawn(move || Client::connect(addr).get("/slow", &[]).status))
            .collect();
        for t in all {
            assert_eq!(t.join().expect("thread"), 200);
        }
    });
    let seen = stats(&h);
    assert_eq!(seen["sessions"], 1, "one connection: {seen}");
    assert_eq!(seen["streams"], 41, "{seen}");
    h.assert_no_errors();
}

#[test]
fn a_server_closing_connections_with_goaway_fails_no_request() {
    let (_server, port) = server(&["--goaway-after", "10"]);
    let member = format!("h2c://127.0.0.1:{port}");
    let h = Hayate::start(BIN, &["--proxy", &member, "--workers", "1"]);
    // Requests from 4 clients while every connection is closed after its
    // 10th stream (grpc-go's max_connection_age, much faster): new streams
    // go on a new connection, and the ones the server refused above its
    // GOAWAY's last stream are sent again.
    let addr = h.addr;
    std::thread::scope(|s| {
        let all: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(move || {
                    let mut c = Client::connect(addr);
                    (0..10)
                        .map(|_| c.get("/hello", &[]).status)
                        .collect::<Vec<u16>>()
                })
            })
            .collect();
        for t in all {
            let statuses = t.join().expect("thread");
            assert_eq!(statuses, vec![200; 10], "{}", h.stderr());
        }
    });
    let seen = stats(&h);
    let sessions = seen["sessions"].as_u64().expect("sessions");
    assert!(sessions >= 4, "40 streams, 10 per connection: {seen}");
    h.assert_no_errors();
}
