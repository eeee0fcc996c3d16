//! The reverse proxy end to end: hayate in front of the testkit's
//! [`Origin`], over real sockets. Forwarded heads (hop-by-hop fields,
//! forwarding fields, request ids), bodies both ways, upstream keep-alive
//! and the pool race, try_files, failures (502, 504), balancing around a
//! dead member, Unix sockets, smuggling attempts, HEAD/204/304, body limits.

// Tests block on purpose (they are clients, not the server).
#![allow(clippy::disallowed_methods)]

use std::net::TcpListener;
use std::time::{Duration, Instant};

use hayate_testkit::{
    big_bytes, checksum, read_through_blank_line, site, Checksum, Client, Echo, Hayate, Origin,
    OriginOptions, Pattern, Response,
};

const BIN: &str = env!("CARGO_BIN_EXE_hayate");

/// An origin with default options.
fn origin() -> Origin {
    Origin::start(OriginOptions::default())
}

/// hayate proxying everything to `upstream`, with more `args`.
fn proxy(upstream: &str, args: &[&str]) -> Hayate {
    let mut all = vec!["--proxy", upstream];
    all.extend_from_slice(args);
    Hayate::start(BIN, &all)
}

/// A URL where nothing listens.
fn dead_url() -> String {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr");
    drop(l);
    format!("http://{addr}")
}

/// Sends a request with a Content-Length body (one write) and reads the
/// response.
fn post(c: &mut Client, path: &str, extra: &[(&str, &str)], body: &[u8]) -> Response {
    c.post(path, extra, body)
}

/// Sends a request with a chunked body in `chunk`-sized pieces (one write,
/// so no Nagle delay).
fn post_chunked(c: &mut Client, path: &str, body: &[u8], chunk: usize) -> Response {
    post_chunked_with_trailers(c, path, body, chunk, "")
}

/// Like [`post_chunked`], with a trailer section (`Name: value\r\n` lines).
fn post_chunked_with_trailers(
    c: &mut Client,
    path: &str,
    body: &[u8],
    chunk: usize,
    trailers: &str,
) -> Response {
    send_chunked(c, "POST", path, body, chunk, trailers)
}

/// A `method` request with a chunked body, sent `chunk` bytes a chunk, and
/// a trailer section (`Name: value\r\n` lines).
fn send_chunked(
    c: &mut Client,
    method: &str,
    path: &str,
    body: &[u8],
    chunk: usize,
    trailers: &str,
) -> Response {
    let head =
        format!("{method} {path} HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n");
    let mut out = head.into_bytes();
    for piece in body.chunks(chunk) {
        out.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
        out.extend_from_slice(piece);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n");
    out.extend_from_slice(trailers.as_bytes());
    out.extend_from_slice(b"\r\n");
    c.send(&out);
    c.read_response(false)
}

fn echo(r: &Response) -> Echo {
    assert_eq!(r.status, 200, "echo failed: {}", r.text());
    Echo::parse(&r.text())
}

/// A memory figure of process `pid` in KiB: `VmRSS` (resident now) or
/// `VmHWM` (the peak of resident memory since it started).
fn mem_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect(field)
}

/// Asserts the error log has ERROR lines and that each names `upstream`.
fn assert_errors_name(h: &Hayate, upstream: &str) {
    let log = h.stderr();
    let errors: Vec<&str> = log.lines().filter(|l| l.contains(" ERROR ")).collect();
    assert!(!errors.is_empty(), "expected an ERROR line; log:\n{log}");
    assert!(
        errors.iter().all(|l| l.contains(upstream)),
        "every ERROR line must name {upstream}:\n{log}"
    );
    assert!(!log.contains("panicked"), "{log}");
}

#[test]
fn get_and_post_reach_the_origin_and_the_response_comes_back() {
    let o = origin();
    let h = proxy(&o.url(), &[]);
    let mut c = h.client();

    let r = c.get("/echo?a=1&b=%20", &[("Accept", "*/*")]);
    assert_eq!(r.header("x-connection"), Some("1"));
    assert_eq!(r.header("content-type"), Some("text/plain"));
    assert_eq!(
        r.header("server"),
        Some("hayate"),
        "the origin's Server is replaced"
    );
    let e = echo(&r);
    assert_eq!(
        (e.method.as_str(), e.target.as_str()),
        ("GET", "/echo?a=1&b=%20")
    );
    assert_eq!(e.header("host"), Some("test"));
    assert_eq!(e.header("accept"), Some("*/*"));
    assert_eq!(e.body_len, 0);
    assert_eq!(e.header("content-length"), None);

    let body = b"hello, origin";
    let e = echo(&post(
        &mut c,
        "/echo/form",
        &[("Content-Type", "text/x")],
        body,
    ));
    assert_eq!(
        (e.method.as_str(), e.target.as_str()),
        ("POST", "/echo/form")
    );
    assert_eq!(e.header("content-length"), Some("13"));
    assert_eq!(e.header("content-type"), Some("text/x"));
    assert_eq!(
        (e.body_len, e.checksum.as_str()),
        (13, checksum(body).as_str())
    );

    let body = big_bytes(10_000);
    let e = echo(&post_chunked(&mut c, "/echo", &body, 3000));
    // A chunked body within the replay buffer is buffered and sent sized.
    assert_eq!(e.header("transfer-encoding"), None);
    assert_eq!(e.header("content-length"), Some("10000"));
    assert_eq!((e.body_len, e.checksum), (10_000, checksum(&body)));
    // A larger one streams, chunked.
    let body = big_bytes(200_000);
    let e = echo(&post_chunked(&mut c, "/echo", &body, 30_000));
    assert_eq!(e.header("transfer-encoding"), Some("chunked"));
    assert_eq!((e.body_len, e.checksum), (200_000, checksum(&body)));

    for method in ["PUT", "DELETE", "PATCH", "OPTIONS"] {
        let e = echo(&c.request(method, "/echo/m", &[]));
        assert_eq!(e.method, method);
    }

    // Statuses pass through, with the origin's body.
    for code in [201u16, 404, 418, 500, 503] {
        let r = c.get(&format!("/status?code={code}"), &[]);
        assert_eq!((r.status, r.text()), (code, format!("status {code}\n")));
    }
    assert_eq!(o.requests(), 13);
    h.assert_no_errors();
}

#[test]
fn hop_by_hop_fields_are_dropped_both_ways() {
    let o = origin();
    let h = proxy(&o.url(), &[]);
    let mut c = h.client();
    let r = c.get(
        "/echo?hop=1",
        &[
            ("Connection", "keep-alive, X-Secret"),
            ("X-Secret", "1"),
            ("Keep-Alive", "1"),
            ("TE", "trailers"),
            ("Proxy-Connection", "keep-alive"),
            ("Trailer", "X-T"),
            ("X-Kept", "yes"),
        ],
    );
    let e = echo(&r);
    for gone in [
        "connection",
        "x-secret",
        "keep-alive",
        "te",
        "proxy-connection",
        "trailer",
    ] {
        assert_eq!(e.header(gone), None, "{gone} reached the origin: {e:?}");
    }
    assert_eq!(e.header("x-kept"), Some("yes"));
    // Response side: the origin's Connection-listed and hop-by-hop fields.
    assert_eq!(r.header("x-origin-hop"), None, "{:?}", r.headers);
    assert_eq!(r.header("proxy-connection"), None, "{:?}", r.headers);
    assert_eq!(r.header("connection"), None, "{:?}", r.headers);
    assert_eq!(r.header("x-origin"), Some("kept"));
    h.assert_no_errors();
}

#[test]
fn forwarding_fields_and_request_ids() {
    let o = origin();
    let h = proxy(&o.url(), &[]);
    let mut c = h.client();
    let spoofed = [
        ("X-Forwarded-For", "6.6.6.6"),
        ("X-Forwarded-Proto", "https"),
        ("X-Forwarded-Host", "evil"),
        ("Forwarded", "for=6.6.6.6"),
        ("X-Request-Id", "abc-123"),
    ];
    let e = echo(&c.get("/echo", &spoofed));
    assert_eq!(e.header("x-forwarded-for"), Some("127.0.0.1"), "{e:?}");
    assert_eq!(e.header("x-forwarded-proto"), Some("http"));
    assert_eq!(e.header("x-forwarded-host"), Some("test"));
    assert_eq!(
        e.header("forwarded"),
        Some("for=127.0.0.1;proto=http;host=\"test\"")
    );
    assert_eq!(e.header("x-request-id"), Some("abc-123"));
    for (name, _) in spoofed {
        let n = e
            .headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .count();
        assert_eq!(n, 1, "{name} must appear once: {e:?}");
    }

    let is_generated = |id: &str| id.len() == 16 && id.bytes().all(|b| b.is_ascii_hexdigit());
    let mut ids = Vec::new();
    for extra in [&[][..], &[("X-Request-Id", "has space")][..], &[][..]] {
        let e = echo(&c.get("/echo", extra));
        let id = e.header("x-request-id").expect("an id").to_string();
        assert!(is_generated(&id), "generated id expected, got {id:?}");
        ids.push(id);
    }
    let unique: std::collections::HashSet<&String> = ids.iter().collect();
    assert_eq!(unique.len(), 3, "ids are unique: {ids:?}");
    h.assert_no_errors();
}

#[test]

fn an_empty_request_id_is_replaced() {
    let o = origin();
    let h = proxy(&o.url(), &[]);
    let mut c = h.client();
    c.send(b"GET /echo HTTP/1.1\r\nHost: test\r\nX-Request-Id: \r\n\r\n");
    let e = echo(&c.read_response(false));
    let id = e.header("x-request-id").unwrap_or_default();
    assert!(
        id.len() == 16 && id.bytes().all(|b| b.is_ascii_hexdigit()),
        "generated id expected, got {id:?}"
    );
    h.assert_no_errors();
}

#[test]
fn upstream_connections_are_reused() {
    let o = origin();
    let h = proxy(&o.url(), &["--workers", "1"]);
    let mut c = h.client();
    for i in 1..=20 {
        let r = c.get("/echo", &[]);
        assert_eq!(r.status, 200);
        assert_eq!(r.header("x-connection"), Some("1"), "request {i}");
        assert_eq!(r.header("x-request-count"), Some(i.to_string().as_str()));
    }
    // Several client connections, interleaved, share the pooled one.
    let mut clients: Vec<Client> = (0..4).map(|_| h.client()).collect();
    for round in 0..5 {
        for (k, c) in clients.iter_mut().enumerate() {
            let r = if round % 2 == 0 {
                c.get("/bytes?n=5000&chunked=1", &[])
            } else {
                post(c, "/echo", &[], b"x")
            };
            assert_eq!(r.status, 200, "client {k} round {round}");
        }
    }
    // A response that closes its connection is not pooled.
    let r = c.get("/close", &[]);
    assert_eq!((r.status, r.header("connection")), (200, None));
    let r = c.get("/echo", &[]);
    assert_eq!(r.header("x-connection"), Some("2"));
    assert_eq!(
        o.connections(),
        2,
        "one upstream connection, then one after /close"
    );
    h.assert_no_errors();
}

#[test]
fn try_files_serves_existing_files_and_proxies_the_rest() {
    let o = origin();
    let dir = site();
    let root = dir.path().to_str().expect("utf8");
    let h = Hayate::start(BIN, &[root, "--proxy", &o.url()]);
    let mut c = h.client();
    let r = c.get("/hello.txt", &[]);
    assert_eq!((r.status, r.text().as_str()), (200, "hello world\n"));
    assert_eq!(c.request("HEAD", "/hello.txt", &[]).status, 200);
    assert_eq!(c.get("/", &[]).text(), "<!doctype html><h1>home</h1>\n");
    assert_eq!(o.requests(), 0, "files never reach the origin");

    let e = echo(&c.get("/missing/page?x=1", &[]));
    assert_eq!(
        (e.method.as_str(), e.target.as_str()),
        ("GET", "/missing/page?x=1")
    );
    let e = echo(&post(&mut c, "/hello.txt", &[], b"form"));
    assert_eq!(
        (e.method.as_str(), e.target.as_str(), e.body_len),
        ("POST", "/hello.txt", 4)
    );
    assert_eq!(
        echo(&c.request("DELETE", "/hello.txt", &[])).method,
        "DELETE"
    );
    assert_eq!(o.requests(), 3);
    h.assert_no_errors();
    drop(h);

    // A prefix route: only /api and below go to the origin.
    let api = format!("/api={}", o.url());
    let h = Hayate::start(BIN, &[root, "--proxy", &api]);
    let mut c = h.client();
    let e = echo(&c.get("/api/users?id=7", &[]));
    assert_eq!(e.target, "/api/users?id=7");
    assert_eq!(echo(&c.get("/api", &[])).target, "/api");
    assert_eq!(o.requests(), 5);
    assert_eq!(c.get("/hello.txt", &[]).text(), "hello world\n");
    assert_eq!(c.get("/missing", &[]).status, 404);
    assert_eq!(c.get("/apix", &[]).status, 404);
    assert_eq!(o.requests(), 5, "only /api reaches the origin");
    h.assert_no_errors();
}

#[test]
fn refused_upstream_gives_502_and_the_connection_survives() {
    let dead = dead_url();
    let dir = site();
    let root = dir.path().to_str().expect("utf8");
    let h = Hayate::start(BIN, &[root, "--proxy", &dead]);
    let mut c = h.client();
    for _ in 0..3 {
        let r = c.get("/app", &[]);
        assert_eq!(r.status, 502);
        assert!(r.body.len() < 256, "short body: {}", r.text());
        assert_eq!(
            r.header("connection"),
            None,
            "502 keeps the client connection"
        );
    }
    assert_eq!(
        c.get("/hello.txt", &[]).status,
        200,
        "same connection still serves"
    );
    assert_eq!(post(&mut c, "/app", &[], b"abc").status, 502);
    assert_eq!(c.get("/hello.txt", &[]).status, 200);
    assert_errors_name(&h, &dead);
}

#[test]
fn a_dead_member_is_skipped() {
    let o = origin();
    let dead = dead_url();
    let group = format!("{dead},{}", o.url());
    let h = proxy(&group, &["--workers", "1"]);
    let mut clients: Vec<Client> = (0..3).map(|_| h.client()).collect();
    for i in 0..30 {
        let c = &mut clients[i % 3];
        let r = if i % 2 == 0 {
            c.get("/echo", &[])
        } else {
            post(c, "/echo", &[], b"body")
        };
        assert_eq!(r.status, 200, "request {i}: {}", r.text());
    }
    assert_eq!(o.requests(), 30);
    // Every request succeeded: the skipped member is a warning, not an error.
    h.assert_no_errors();
    let log = h.stderr();
    assert!(
        log.contains(&format!("WARN upstream {dead}: connect failed")),
        "{log}"
    );
    assert!(
        log.contains("ejected"),
        "the dead member is ejected:\n{log}"
    );
}

#[test]
fn requests_are_spread_over_members() {
    let (a, b) = (origin(), origin());
    let group = format!("{},{}", a.url(), b.url());
    let h = proxy(&group, &["--workers", "1"]);
    let mut clients: Vec<Client> = (0..4).map(|_| h.client()).collect();
    // Four concurrent slow requests: least-outstanding gives each two.
    for c in &mut clients {
        c.send(b"GET /slow?ms=300 HTTP/1.1\r\nHost: test\r\n\r\n");
    }
    for c in &mut clients {
        assert_eq!(c.read_response(false).status, 200);
    }
    assert_eq!((a.requests(), b.requests()), (2, 2));
    h.assert_no_errors();
}

#[test]
fn slow_origin_gives_504() {
    let o = origin();
    let h = proxy(&o.url(), &["--proxy-timeout", "300ms"]);
    let mut c = h.client();
    let t = Instant::now();
    let r = c.get("/slow?ms=2000", &[]);
    assert_eq!(r.status, 504, "{}", r.text());
    assert!(
        t.elapsed() < Duration::from_millis(1500),
        "{:?}",
        t.elapsed()
    );
    assert!(r.body.len() < 256);
    // A fast request afterwards (the stalled connection is not reused).
    let mut c = h.client();
    assert_eq!(c.get("/echo", &[]).status, 200);
    assert_errors_name(&h, &o.url());
    // A body that stalls mid-way: the head went out, so the client sees the
    // connection cut before the end.
    let mut c = h.client();
    c.send(b"GET /bytes?n=400000&stall_ms=2000 HTTP/1.1\r\nHost: test\r\n\r\n");
    let t = Instant::now();
    let raw = c.read_to_close();
    assert!(
        t.elapsed() < Duration::from_millis(1500),
        "{:?}",
        t.elapsed()
    );
    assert!(raw.starts_with(b"HTTP/1.1 200"));
    assert!(raw.len() < 400_000, "the body is cut short");
    let log = h.stderr();
    assert!(log.contains("stalled"), "the stall is logged:\n{log}");
    assert!(!log.contains("panicked"), "{log}");
}

#[test]

fn mid_body_failures_name_the_upstream() {
    let o = origin();
    let h = proxy(&o.url(), &["--proxy-timeout", "300ms"]);
    let mut c = h.client();
    c.send(b"GET /bytes?n=400000&stall_ms=2000 HTTP/1.1\r\nHost: test\r\n\r\n");
    assert!(c.read_to_close().len() < 400_000, "the body is cut short");
    assert_errors_name(&h, &o.url());
}

#[test]
fn a_response_cut_midway_is_logged_with_the_bytes_sent() {
    let o = origin();
    let h = proxy(&o.url(), &["--proxy-timeout", "300ms"]);
    let mut c = h.client();
    c.send(b"GET /bytes?n=400000&stall_ms=2000 HTTP/1.1\r\nHost: test\r\n\r\n");
    let raw = c.read_to_close();
    let head_end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a head")
        + 4;
    let received = raw.len() - head_end;
    assert!(received < 400_000, "the body is cut short");
    let lines = h.stdout_lines(Duration::from_secs(2));
    let line = lines
        .iter()
        .find(|l| l.contains("GET /bytes?n=400000"))
        .unwrap_or_else(|| panic!("no access log line for the cut response: {lines:?}"));
    // `peer - - [time] "request line" status bytes "referer" "agent"`
    let fields: Vec<&str> = line
        .split('"')
        .nth(2)
        .expect("status and bytes")
        .split_whitespace()
        .collect();
    let bytes: usize = fields[1].parse().expect("a byte count");
    assert_eq!(fields[0], "200", "{line}");
    assert!(
        bytes > 0 && bytes <= received,
        "{bytes} bytes logged, {received} received: {line}"
    );
}

/// Sends `n` requests on one client connection, the i-th after sleeping
/// `spacing(i)`, alternately GETs and small POSTs (Content-Length), and
/// asserts that each got a 200 from the origin.
fn spaced_requests(h: &Hayate, spacing: impl Fn(usize) -> Duration, n: usize) -> Vec<Response> {
    let mut c = h.client();
    let mut out = Vec::new();
    for i in 0..n {
        std::thread::sleep(spacing(i));
        let r = if i % 2 == 0 {
            c.get("/echo", &[])
        } else {
            // Keyed: a POST that met the race is replayed only so.
            let key = i.to_string();
            let keyed = [("Idempotency-Key", key.as_str())];
            post(&mut c, "/echo", &keyed, format!("body {i}").as_bytes())
        };
        assert_eq!(r.status, 200, "request {i}: {}", r.text());
        if i % 2 == 1 {
            assert_eq!(echo(&r).body_len, format!("body {i}").len());
        }
        out.push(r);
    }
    out
}

#[test]
fn pool_race_with_an_origin_that_closes_idle_connections_silently() {
    let o = Origin::start(OriginOptions {
        idle_close: Some(Duration::from_millis(100)),
        ..Default::default()
    });
    let h = proxy(&o.url(), &["--workers", "1"]);
    // The idle gap sweeps 100..106 ms in 0.15 ms steps: the origin's read
    // timeout fires somewhere in there (timer granularity), so some requests
    // meet a connection the origin is closing at that very moment.
    spaced_requests(&h, |i| Duration::from_micros(100_000 + 150 * i as u64), 40);
    assert!(o.connections() > 3, "the origin did close idle connections");
    h.assert_no_errors();
}

#[test]
fn pool_race_spares_small_chunked_puts() {
    let o = Origin::start(OriginOptions {
        idle_close: Some(Duration::from_millis(100)),
        ..Default::default()
    });
    let h = proxy(&o.url(), &["--workers", "1"]);
    // As above, with 10-byte chunked bodies: a chunked body that ends
    // within the replay buffer is buffered, so a reused connection that
    // fails is replayed on a fresh one instead of answering 502 (PUT is
    // idempotent: a POST is not replayed once it was written, see
    // proxy_policies.rs).
    let mut c = h.client();
    for i in 0..40u64 {
        std::thread::sleep(Duration::from_micros(100_000 + 150 * i));
        let r = send_chunked(&mut c, "PUT", "/echo", b"small body", 4, "");
        assert_eq!(r.status, 200, "request {i}: {}", r.text());
        assert_eq!(echo(&r).body_len, 10);
    }
    h.assert_no_errors();
}

#[test]
fn pooled_connections_expire_after_proxy_keepalive() {
    let o = origin();
    let h = proxy(&o.url(), &["--workers", "1", "--proxy-keepalive", "300ms"]);
    let quick = spaced_requests(&h, |_| Duration::from_millis(20), 4);
    let counts: Vec<&str> = quick
        .iter()
        .filter_map(|r| r.header("x-request-count"))
        .collect();
    assert_eq!(counts, ["1", "2", "3", "4"]);
    for r in spaced_requests(&h, |_| Duration::from_millis(450), 3) {
        assert_eq!(r.header("x-request-count"), Some("1"), "{:?}", r.headers);
    }
    assert_eq!(o.connections(), 4);
    h.assert_no_errors();
}

#[test]
fn keep_alive_hint_makes_hayate_expire_idle_connections_first() {
    let o = Origin::start(OriginOptions {
        idle_close: Some(Duration::from_secs(1)),
        keep_alive_hint: Some(1),
        ..Default::default()
    });
    let h = proxy(&o.url(), &["--workers", "1"]);
    // Close together: reused.
    let quick = spaced_requests(&h, |_| Duration::from_millis(50), 4);
    let counts: Vec<&str> = quick
        .iter()
        .filter_map(|r| r.header("x-request-count"))
        .collect();
    assert_eq!(counts, ["1", "2", "3", "4"]);
    // 700 ms apart: past hayate's own expiry (half the hint), still before
    // the origin closes; each goes out on a fresh connection.
    let spaced = spaced_requests(&h, |_| Duration::from_millis(700), 4);
    for r in &spaced {
        assert_eq!(r.header("x-request-count"), Some("1"), "{:?}", r.headers);
    }
    assert_eq!(o.connections(), 5);
    h.assert_no_errors();
}

/// Trailer fields that must never reach the origin (framing, routing,
/// authentication), sent along with two that must.
const TRAILERS: &str = "X-Checksum: 42\r\nx-other:  a b \r\nContent-Length: 99\r\n\
                        Host: evil\r\nAuthorization: Bearer stolen\r\n\
                        Transfer-Encoding: gzip\r\nSet-Cookie: a=b\r\n";

/// Asserts that the origin got exactly the passable fields of [`TRAILERS`].
fn assert_passable_trailers(e: &Echo, what: &str) {
    assert_eq!(
        e.trailers,
        [
            ("X-Checksum".to_string(), "42".to_string()),
            ("x-other".to_string(), "a b".to_string())
        ],
        "{what}"
    );
}

#[test]
fn trailers_of_a_chunked_request_reach_the_origin() {
    let o = origin();
    let h = proxy(&o.url(), &[]);
    let mut c = h.client();
    // Within the replay buffer (buffered, and sent chunked for the sake of
    // its trailers) and past it (streamed).
    for n in [10_000, 200_000] {
        let body = big_bytes(n);
        let e = echo(&post_chunked_with_trailers(
            &mut c, "/echo", &body, 3000, TRAILERS,
        ));
        assert_eq!(e.header("transfer-encoding"), Some("chunked"), "{n}");
        assert_eq!(e.header("content-length"), None, "{n}");
        assert_eq!((e.body_len, &e.checksum), (n, &checksum(&body)));
        assert_passable_trailers(&e, &format!("{n} bytes"));
    }
    // An empty body with trailers.
    let e = echo(&post_chunked_with_trailers(
        &mut c, "/echo", b"", 1, TRAILERS,
    ));
    assert_eq!(e.body_len, 0);
    assert_passable_trailers(&e, "empty body");
    // Nothing passable: a small body goes sized, as without trailers.
    let e = echo(&post_chunked_with_trailers(
        &mut c,
        "/echo",
        b"abc",
        2,
        "Host: evil\r\nContent-Length: 1\r\n",
    ));
    assert_eq!(
        (e.header("content-length"), e.body_len, e.trailers.len()),
        (Some("3"), 3, 0)
    );
    // The connection is intact afterwards.
    assert_eq!(echo(&c.get("/echo", &[])).trailers.len(), 0);
    h.assert_no_errors();
}

#[test]
fn a_replayed_chunked_request_keeps_its_trailers() {
    // A scripted upstream: the first connection answers a GET, then takes
    // the chunked PUT whole and closes without answering (the pool race);
    // the replay arrives on a second connection.
    let upstream = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", upstream.local_addr().expect("addr"));
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
    std::thread::spawn(move || {
        let (mut s, _) = upstream.accept().expect("accept");
        let mut get = Vec::new();
        read_through_blank_line(&mut s, &mut get).expect("read");
        std::io::Write::write_all(&mut s, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            .expect("write");
        let mut post = Vec::new();
        read_through_blank_line(&mut s, &mut post).expect("read"); // the head
        read_through_blank_line(&mut s, &mut post).expect("read"); // the body, to the trailers' end
        drop(s);
        tx.send(post).expect("send");
        let (mut s, _) = upstream.accept().expect("accept the replay");
        let mut post = Vec::new();
        read_through_blank_line(&mut s, &mut post).expect("read");
        read_through_blank_line(&mut s, &mut post).expect("read");
        std::io::Write::write_all(
            &mut s,
            b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nreplayed",
        )
        .expect("write");
        tx.send(post).expect("send");
    });
    let h = proxy(&url, &["--workers", "1"]);
    let mut c = h.client();
    assert_eq!(c.get("/first", &[]).text(), "ok");
    let r = send_chunked(&mut c, "PUT", "/echo", b"hello", 5, TRAILERS);
    assert_eq!((r.status, r.text().as_str()), (200, "replayed"));
    let mut request_ids = Vec::new();
    for attempt in ["first", "replay"] {
        let raw = String::from_utf8(rx.recv_timeout(Duration::from_secs(5)).expect(attempt))
            .expect("ascii");
        assert!(
            raw.contains("\r\nTransfer-Encoding: chunked\r\n"),
            "{attempt}: {raw}"
        );
        assert!(
            raw.ends_with("\r\n\r\n5\r\nhello\r\n0\r\nX-Checksum: 42\r\nx-other: a b\r\n\r\n"),
            "{attempt}: {raw}"
        );
        let id = raw
            .lines()
            .find_map(|l| l.strip_prefix("X-Request-Id: "))
            .unwrap_or_else(|| panic!("{attempt} has no X-Request-Id: {raw}"));
        request_ids.push(id.to_string());
    }
    assert_eq!(
        request_ids[0], request_ids[1],
        "the replay is the same request"
    );
    h.assert_no_errors();
}

/// Sends `GET path` and checks that the body is `n` bytes of the
/// [`Pattern`], piece by piece as it arrives.
fn download_pattern(c: &mut Client, path: &str, n: usize) {
    c.send(format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").as_bytes());
    let mut pattern = Pattern::default();
    let (mut len, mut same) = (0, true);
    let r = c.read_response_with(false, &mut |piece| {
        len += piece.len();
        same &= pattern.matches(piece);
    });
    assert_eq!((r.status, len), (200, n), "{path}");
    assert!(same, "{path}: body differs");
}

/// POSTs `n` bytes of the [`Pattern`] to `/echo`, made as they are sent
/// (chunked in 256 KiB chunks, or with a Content-Length), and checks the
/// length and checksum the origin saw.
fn upload_pattern(c: &mut Client, n: usize, chunked: bool) {
    let framing = match chunked {
        true => "Transfer-Encoding: chunked".to_string(),
        false => format!("Content-Length: {n}"),
    };
    c.send(format!("POST /echo HTTP/1.1\r\nHost: test\r\n{framing}\r\n\r\n").as_bytes());
    let (mut pattern, mut sum) = (Pattern::default(), Checksum::default());
    let mut piece = vec![0u8; 256 * 1024];
    let mut left = n;
    while left > 0 {
        let k = left.min(piece.len());
        pattern.fill(&mut piece[..k]);
        sum.update(&piece[..k]);
        if chunked {
            c.send(format!("{k:x}\r\n").as_bytes());
            c.send(&piece[..k]);
            c.send(b"\r\n");
        } else {
            c.send(&piece[..k]);
        }
        left -= k;
    }
    if chunked {
        c.send(b"0\r\n\r\n");
    }
    let e = echo(&c.read_response(false));
    assert_eq!(
        (e.body_len, e.checksum.as_str()),
        (n, sum.hex().as_str()),
        "chunked: {chunked}"
    );
}

/// The bar: 100 MiB each way, Content-Length and chunked, with
/// hayate's memory growing by less than 8 MiB (its peak, VmHWM, against
/// its resident size before). The test side streams too: bodies are made
/// and checked piece by piece, never held whole.
#[test]
fn large_bodies_stream_both_ways_in_bounded_memory() {
    const N: usize = 100 << 20;
    let o = origin();
    let h = proxy(&o.url(), &["--workers", "1", "--max-body-size", "128MiB"]);
    let mut c = h.client();
    assert_eq!(c.get("/echo", &[]).status, 200);
    let baseline = mem_kib(h.pid(), "VmRSS");
    let started = Instant::now();
    download_pattern(&mut c, &format!("/bytes?n={N}"), N);
    download_pattern(&mut c, &format!("/bytes?n={N}&chunked=1"), N);
    let downloads = started.elapsed();
    upload_pattern(&mut c, N, true);
    upload_pattern(&mut c, N, false);
    eprintln!(
        "4 x {} MiB: downloads {downloads:?}, uploads {:?}; hayate RSS {baseline} KiB before, \
         {} KiB after, peak {} KiB",
        N >> 20,
        started.elapsed() - downloads,
        mem_kib(h.pid(), "VmRSS"),
        mem_kib(h.pid(), "VmHWM"),
    );
    let grown = mem_kib(h.pid(), "VmHWM").saturating_sub(baseline);
    assert!(grown < 8 * 1024, "hayate's peak RSS grew by {grown} KiB");
    h.assert_no_errors();
}

#[test]
fn unix_socket_upstream() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = Origin::start(OriginOptions {
        unix: Some(dir.path().join("app.sock")),
        ..Default::default()
    });
    assert!(o.url().starts_with("unix:/"));
    let h = proxy(&o.url(), &["--workers", "1"]);
    let mut c = h.client();
    let e = echo(&c.get("/echo?u=1", &[]));
    assert_eq!(e.target, "/echo?u=1");
    assert_eq!(e.header("x-forwarded-for"), Some("127.0.0.1"));
    let e = echo(&post(&mut c, "/echo", &[], b"over unix"));
    assert_eq!(e.body_len, 9);
    let r = c.get("/bytes?n=100000&chunked=1", &[]);
    assert_eq!(r.body, big_bytes(100_000));
    assert_eq!(o.connections(), 1);
    h.assert_no_errors();
}

#[test]
fn a_unix_upstream_with_a_full_listen_queue_is_waited_for() {
    // A busy app: its listen queue holds one connection and it accepts
    // nothing for 300 ms. A non-blocking connect then fails with EAGAIN at
    // once; that must mean "wait", not a 502 and an ejected member, and the
    // wait may outlast the connect timeout (100 ms here): it is the
    // request's place in the queue (proxy_queue_timeout), as for a member
    // at its proxy_max_conns.
    use std::io::{Read, Write};
    const N: usize = 12;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("busy.sock");
    let listener = hayate_testkit::unix_listener(&path, 1);
    let app = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        let mut served = 0;
        while served < N {
            let (mut s, _) = listener.accept().expect("accept");
            std::thread::spawn(move || {
                if read_through_blank_line(&mut s, &mut Vec::new()).is_err() {
                    return;
                }
                let mut buf = [0u8; 1024];
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
                // keep the connection until hayate is done with it
                let _ = s.read(&mut buf);
            });
            served += 1;
        }
    });
    let h = proxy(
        &format!("unix:{}", path.display()),
        &["--workers", "1", "--proxy-connect-timeout", "100ms"],
    );
    let clients: Vec<_> = (0..N)
        .map(|_| {
            let mut c = h.client();
            std::thread::spawn(move || c.get("/", &[]))
        })
        .collect();
    for c in clients {
        let r = c.join().expect("client");
        assert_eq!((r.status, r.body.as_slice()), (200, &b"ok"[..]));
    }
    app.join().expect("app");
    h.assert_no_errors();
}

#[test]
fn a_unix_upstream_full_past_the_queue_timeout_is_busy_not_failed() {
    // The test fills the app's listen queue itself with connects it never
    // lets the app accept, so every connect hayate makes finds it full.
    use nix::sys::socket::{connect, socket, AddressFamily, SockFlag, SockType, UnixAddr};
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("full.sock");
    let listener = hayate_testkit::unix_listener(&path, 1);
    let addr = UnixAddr::new(&path).expect("address");
    let mut fillers = Vec::new();
    loop {
        let fd = socket(
            AddressFamily::Unix,
            SockType::Stream,
            SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
            None,
        )
        .expect("socket");
        match connect(std::os::fd::AsRawFd::as_raw_fd(&fd), &addr) {
            Ok(()) => fillers.push(fd),
            Err(nix::errno::Errno::EAGAIN) => break,
            Err(e) => panic!("filling the listen queue: {e}"),
        }
    }
    let h = proxy(
        &format!("unix:{}", path.display()),
        &[
            "--workers",
            "1",
            "--proxy-queue-timeout",
            "150ms",
            "--proxy-max-fails",
            "1",
        ],
    );
    let mut c = h.client();
    for _ in 0..2 {
        let r = c.get("/", &[]);
        assert_eq!(r.status, 503, "busy, not failed: {}", r.text());
        assert!(r.header("retry-after").is_some(), "503 says when to retry");
    }
    let log = h.stderr();
    assert!(log.contains("listen queue stayed full"), "{log}");
    assert!(
        !log.contains("ejected"),
        "a full queue is not a failure: {log}"
    );
    // The app catches up: the queued connects are taken and the next
    // request is answered.
    drop(fillers);
    let app = std::thread::spawn(move || loop {
        let Ok((mut s, _)) = listener.accept() else {
            return;
        };
        std::thread::spawn(move || {
            if read_through_blank_line(&mut s, &mut Vec::new()).is_ok() {
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
                let _ = s.read(&mut [0u8; 64]);
            }
        });
    });
    let r = c.get("/", &[]);
    assert_eq!((r.status, r.body.as_slice()), (200, &b"ok"[..]));
    drop(app);
}

#[test]
fn smuggling_attempts_never_reach_the_origin() {
    let o = origin();
    let h = proxy(&o.url(), &[]);
    let attempts = [
        "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /echo HTTP/1.1\r\nHost: a\r\n\r\n",
        "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n",
        "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
        "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 6\r\n\r\nhello!",
        "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n0\r\n\r\n",
    ];
    for raw in attempts {
        let mut c = h.client();
        c.send(raw.as_bytes());
        let r = c.read_response(false);
        assert!(matches!(r.status, 400 | 501), "{} for {raw:?}", r.status);
        assert!(c.is_closed(), "connection closed after {raw:?}");
    }
    assert_eq!(o.requests(), 0, "nothing reached the origin");
    assert_eq!(h.client().get("/echo", &[]).status, 200);
    h.assert_no_errors();
}

#[test]
fn head_204_and_304_have_no_body() {
    let o = origin();
    let h = proxy(&o.url(), &[]);
    let mut c = h.client();
    let r = c.request("HEAD", "/bytes?n=1000", &[]);
    assert_eq!((r.status, r.header("content-length")), (200, Some("1000")));
    let r = c.request("HEAD", "/bytes?n=1000&chunked=1", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("transfer-encoding"), Some("chunked"));
    for code in [204u16, 304] {
        let r = c.get(&format!("/status?code={code}"), &[]);
        assert_eq!(r.status, code);
        assert_eq!(
            r.header("transfer-encoding"),
            None,
            "{code}: {:?}",
            r.headers
        );
        if code == 204 {
            assert_eq!(r.header("content-length"), None, "{:?}", r.headers);
        }
    }
    // Any stray body bytes would corrupt this response.
    let r = c.get("/bytes?n=10", &[]);
    assert_eq!((r.status, r.body), (200, big_bytes(10)));
    // And nothing is left unread on the connection.
    c.stream()
        .set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    let mut probe = [0u8; 1];
    let left = std::io::Read::read(&mut c.stream(), &mut probe);
    assert!(
        left.is_err(),
        "unexpected bytes after the responses: {left:?}"
    );
    h.assert_no_errors();
}

#[test]
fn chunked_body_over_the_limit_gets_413_and_nothing_breaks() {
    let o = origin();
    let h = proxy(&o.url(), &["--workers", "1", "--max-body-size", "4KiB"]);
    let mut c = h.client();
    assert_eq!(c.get("/echo", &[]).status, 200);
    let mut c = h.client();
    c.send(b"POST /echo HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n");
    for _ in 0..4 {
        c.send(format!("800\r\n{}\r\n", "a".repeat(0x800)).as_bytes());
    }
    c.send(b"0\r\n\r\n");
    let r = c.read_response(false);
    assert_eq!(r.status, 413);
    assert!(c.is_closed());
    // Content-Length over the limit: refused before the origin is asked.
    let before = o.requests();
    let mut c = h.client();
    c.send(b"POST /echo HTTP/1.1\r\nHost: test\r\nContent-Length: 5000\r\n\r\n");
    assert_eq!(c.read_response(false).status, 413);
    assert_eq!(o.requests(), before);
    // Still healthy, on fresh upstream connections as needed.
    let mut c = h.client();
    for _ in 0..3 {
        assert_eq!(post(&mut c, "/echo", &[], b"small").status, 200);
        assert_eq!(c.get("/echo", &[]).status, 200);
    }
    h.assert_no_errors();
}

#[test]
fn a_client_leaving_mid_download_does_not_poison_the_pool() {
    let o = origin();
    let h = proxy(&o.url(), &["--workers", "1"]);
    let mut c = h.client();
    assert_eq!(c.get("/echo", &[]).status, 200);
    for chunked in ["0", "1"] {
        let mut quitter = h.client();
        quitter.send(
            format!("GET /bytes?n=8000000&chunked={chunked} HTTP/1.1\r\nHost: test\r\n\r\n")
                .as_bytes(),
        );
        let mut some = [0u8; 4096];
        let n = std::io::Read::read(&mut quitter.stream(), &mut some).expect("read");
        assert!(n > 0 && some.starts_with(b"HTTP/1.1 200"));
        drop(quitter);
        // The next requests get their own, intact responses.
        for _ in 0..3 {
            let r = c.get("/bytes?n=3000", &[]);
            assert_eq!((r.status, r.body.len()), (200, 3000));
            assert!(r.body == big_bytes(3000));
            assert_eq!(echo(&c.get("/echo", &[])).method, "GET");
        }
    }
    assert!(
        o.connections() <= 3,
        "{} upstream connections",
        o.connections()
    );
    h.assert_no_errors();
}

#[test]
fn expect_100_continue_pipelining_and_http10_through_the_proxy() {
    let o = origin();
    let h = proxy(&o.url(), &[]);
    // Expect: 100-continue: hayate asks for the body, the origin gets it
    // without the Expect field.
    for (framing, body) in [
        ("Content-Length: 5", &b"hello"[..]),
        (
            "Transfer-Encoding: chunked",
            &b"5\r\nhello\r\n0\r\n\r\n"[..],
        ),
    ] {
        let mut c = h.client();
        c.send(
            format!(
                "POST /echo HTTP/1.1\r\nHost: test\r\n{framing}\r\nExpect: 100-continue\r\n\r\n"
            )
            .as_bytes(),
        );
        assert_eq!(c.read_response(false).status, 100, "{framing}");
        c.send(body);
        let e = echo(&c.read_response(false));
        assert_eq!((e.body_len, e.header("expect")), (5, None), "{framing}");
    }
    // Pipelined requests, answered in order.
    let mut c = h.client();
    c.send(
        b"GET /echo?n=1 HTTP/1.1\r\nHost: test\r\n\r\n\
          POST /echo?n=2 HTTP/1.1\r\nHost: test\r\nContent-Length: 3\r\n\r\nabc\
          GET /bytes?n=70000&chunked=1 HTTP/1.1\r\nHost: test\r\n\r\n\
          GET /status?code=204 HTTP/1.1\r\nHost: test\r\n\r\n\
          GET /echo?n=5 HTTP/1.1\r\nHost: test\r\n\r\n",
    );
    assert_eq!(echo(&c.read_response(false)).target, "/echo?n=1");
    assert_eq!(echo(&c.read_response(false)).body_len, 3);
    assert_eq!(c.read_response(false).body, big_bytes(70_000));
    assert_eq!(c.read_response(false).status, 204);
    assert_eq!(echo(&c.read_response(false)).target, "/echo?n=5");
    // An HTTP/1.0 client gets a chunked upstream body close-delimited.
    let mut c = h.client();
    c.send(b"GET /bytes?n=5000&chunked=1 HTTP/1.0\r\nHost: test\r\n\r\n");
    let r = c.read_response(false);
    assert_eq!((r.status, r.header("transfer-encoding")), (200, None));
    assert!(r.body == big_bytes(5000));
    h.assert_no_errors();
}

/// RFC 9110 §9.3.2: a HEAD answer through the proxy announces the GET's
/// framing as the upstream did, and invents none: an upstream that sends
/// neither Content-Length nor Transfer-Encoding on a HEAD (Go's net/http
/// when the handler writes nothing) gets neither added.
#[test]
fn head_framing_is_the_upstreams() {
    use std::io::Write;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let mut buf = Vec::new();
            // Every request on the connection, until hayate closes it.
            while hayate_testkit::read_through_blank_line(&mut conn, &mut buf).is_ok() {
                buf.clear();
                let head = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n";
                if conn.write_all(head).is_err() {
                    break;
                }
            }
        }
    });
    for args in [&[][..], &["--cache", "on"][..]] {
        let mut all = vec!["--proxy", url.as_str()];
        all.extend_from_slice(args);
        let h = Hayate::start(BIN, &all);
        let mut c = h.client();
        for _ in 0..2 {
            let r = c.request("HEAD", "/x", &[]);
            assert_eq!(r.status, 200);
            assert_eq!(r.header("content-length"), None, "{args:?} {:?}", r.headers);
            assert_eq!(
                r.header("transfer-encoding"),
                None,
                "{args:?} {:?}",
                r.headers
            );
        }
        h.assert_no_errors();
    }
    // A length or chunked from the upstream is kept
    // (head_204_and_304_have_no_body).
}

/// The dotfile rule hides files under a static root, not URLs: a path with
/// a dot segment that no file answers reaches the app, and so does one
/// naming a hidden file (never served from the root); a static-only route
/// answers 404.
#[test]
fn dot_segment_paths_reach_the_app() {
    let o = origin();
    let dir = site();
    std::fs::write(dir.path().join(".env"), "SECRET=1\n").expect("write");
    let root = dir.path().to_str().expect("utf8");
    let h = Hayate::start(BIN, &[root, "--proxy", &o.url()]);
    let mut c = h.client();
    for path in [
        "/api/.foo",
        "/.well-known/openid-configuration",
        "/.env",
        "/a/.b/c",
    ] {
        let r = c.get(path, &[]);
        assert_eq!(r.status, 200, "{path}: {r:?}");
        assert_eq!(echo(&r).target, path);
        assert!(!r.text().contains("SECRET"), "{path}");
    }
    assert_eq!(o.requests(), 4);
    h.assert_no_errors();
    drop(h);
    let h = Hayate::start(BIN, &[root]);
    let mut c = h.client();
    assert_eq!(c.get("/.env", &[]).status, 404);
    assert_eq!(c.get("/api/.foo", &[]).status, 404);
}

/// `/script?` with `params`, percent-encoded.
fn script(params: &[(&str, &str)]) -> String {
    let enc = |s: &str| {
        s.bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect::<String>()
    };
    let q: Vec<String> = params
        .iter()
        .map(|(k, v)| format!("{k}={}", enc(v)))
        .collect();
    format!("/script?{}", q.join("&"))
}

const PRELOAD: &str = "</style.css>; rel=preload; as=style";

#[test]
fn interim_responses_reach_http11_clients_before_the_final_one() {
    let o = origin();
    let h = proxy(&o.url(), &[]);
    let link = format!("Link: {PRELOAD}");
    let path = script(&[("early", &link), ("p102", "1"), ("body", "final")]);
    // The final answer is held at the origin: the interim ones must come
    // while it is.
    let held = o.hold(&path);
    let mut c = h.client();
    c.send(format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").as_bytes());
    let r = c.read_response(false);
    assert_eq!(r.status, 102, "{r:?}");
    let r = c.read_response(false);
    assert_eq!(r.status, 103, "{r:?}");
    assert_eq!(r.header("link"), Some(PRELOAD));
    drop(held);
    let r = c.read_response(false);
    assert_eq!((r.status, r.text()), (200, "final".to_string()), "{r:?}");
    assert_eq!(
        r.header("link"),
        None,
        "hints are not copied to the final head"
    );
    assert_eq!(o.holds_expired(), 0, "the 103 did not come before the 200");

    // HTTP/1.0 knows no interim responses: none is sent.
    let mut c = h.client();
    c.send(format!("GET {path} HTTP/1.0\r\nHost: test\r\n\r\n").as_bytes());
    let raw = String::from_utf8_lossy(&c.read_to_close()).into_owned();
    assert!(raw.starts_with("HTTP/1.1 200 OK\r\n"), "{raw}");
    assert!(!raw.contains(" 103 ") && !raw.contains(" 102 "), "{raw}");

    // An upstream that sends 1xx after 1xx has only the first 16 passed on.
    let path = script(&[("early", &link), ("early_n", "40")]);
    let mut c = h.client();
    c.send(format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").as_bytes());
    let mut interim = 0;
    let r = loop {
        let r = c.read_response(false);
        if r.status >= 200 {
            break r;
        }
        interim += 1;
    };
    assert_eq!((r.status, interim), (200, 16));
    h.assert_no_errors();

    // proxy_interim = 0: none at all.
    let h = proxy(&o.url(), &["--proxy-interim", "0"]);
    let r = h.client().get(&path, &[]);
    assert_eq!(r.status, 200, "{r:?}");
}

/// A response waiting in the write buffer for its pipelined batch to end
/// leaves when the next request goes to an upstream, not when that
/// upstream answers (which may take seconds).
#[test]
fn a_pipelined_response_is_not_held_back_by_the_next_requests_upstream() {
    let o = origin();
    let dir = site();
    let root = dir.path().to_str().expect("utf8");
    let h = Hayate::start(BIN, &[root, "--proxy", &o.url()]);
    let second = script(&[("body", "second")]);
    let held = o.hold(&second);
    let mut c = h.client();
    let first = "GET /hello.txt HTTP/1.1\r\nHost: test\r\n\r\n";
    c.send(format!("{first}GET {second} HTTP/1.1\r\nHost: test\r\n\r\n").as_bytes());
    // Read while the origin still holds the second answer.
    let r = c.read_response(false);
    assert_eq!(
        (r.status, r.text()),
        (200, "hello world\n".to_string()),
        "{r:?}"
    );
    drop(held);
    let r = c.read_response(false);
    assert_eq!((r.status, r.text()), (200, "second".to_string()), "{r:?}");
    assert_eq!(
        o.holds_expired(),
        0,
        "the first answer came before the hold ran out"
    );
    h.assert_no_errors();
}

#[test]
fn a_pipelined_requests_103_follows_the_earlier_response_whole() {
    let o = origin();
    let dir = site();
    let root = dir.path().to_str().expect("utf8");
    let h = Hayate::start(BIN, &[root, "--proxy", &o.url()]);
    let second = script(&[("early", &format!("Link: {PRELOAD}")), ("body", "second")]);
    let held = o.hold(&second);
    let mut c = h.client();
    // One write: the first response (a small file, whole in hayate's
    // write buffer, where pipelined responses wait to leave together) is
    // not sent yet when the second request goes upstream and its 103
    // comes back.
    let first = "GET /hello.txt HTTP/1.1\r\nHost: test\r\n\r\n";
    c.send(format!("{first}GET {second} HTTP/1.1\r\nHost: test\r\n\r\n").as_bytes());
    let r = c.read_response(false);
    assert_eq!(
        (r.status, r.text()),
        (200, "hello world\n".to_string()),
        "{r:?}"
    );
    let r = c.read_response(false);
    assert_eq!(r.status, 103, "{r:?}");
    drop(held);
    let r = c.read_response(false);
    assert_eq!((r.status, r.text()), (200, "second".to_string()), "{r:?}");
    assert_eq!(o.holds_expired(), 0);
    h.assert_no_errors();
}

/// A client that leaves while its request waits for the upstream cancels
/// it: the upstream connection closes at once (the app stops working for
/// nobody), and the access log says 499, as nginx's does.
#[test]
fn a_client_that_leaves_cancels_its_upstream_request() {
    let upstream = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", upstream.local_addr().expect("addr"));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let (mut s, _) = upstream.accept().expect("accept");
        let mut head = Vec::new();
        read_through_blank_line(&mut s, &mut head).expect("head");
        tx.send("request arrived").expect("send");
        // Never answers; what ends this read is hayate closing.
        s.set_read_timeout(Some(hayate_testkit::WAIT))
            .expect("timeout");
        let mut rest = [0u8; 64];
        let said = match std::io::Read::read(&mut s, &mut rest) {
            Ok(0) => "closed",
            Ok(_) => "more bytes",
            Err(_) => "still open",
        };
        tx.send(said).expect("send");
    });
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("access.log");
    let h = proxy(&url, &["--access-log", log.to_str().expect("utf-8")]);
    let mut c = h.client();
    c.send(b"GET /slow HTTP/1.1\r\nHost: test\r\n\r\n");
    let wait = hayate_testkit::WAIT;
    assert_eq!(rx.recv_timeout(wait), Ok("request arrived"));
    drop(c);
    assert_eq!(rx.recv_timeout(wait), Ok("closed"));
    hayate_testkit::eventually("a 499 in the access log", || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        text.contains("\"GET /slow HTTP/1.1\" 499 ")
            .then_some(())
            .ok_or(text)
    });
}

/// A WebSocket tunnel whose client keeps sending but stops reading what
/// the upstream sends back is closed once hayate's writes to it wait
/// `send_timeout` (decision 0014): it held the client's connection and the
/// upstream's for good. Waits for the client's write to fail (hayate closed
/// and reset what it still sent), bounded by a failure timeout.
#[test]
fn a_tunnel_whose_client_stops_reading_is_closed_after_the_send_timeout() {
    use std::io::Write;
    let (port, echo) = hayate_testkit::upgrade_echo_server();
    let upstream = format!("http://127.0.0.1:{port}");
    let h = Hayate::start(BIN, &["--proxy", &upstream, "--send-timeout", "1s"]);
    let mut c = h.client();
    c.send(b"GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n");
    assert_eq!(c.read_response(true).status, 101);
    // The echo comes back; the client never reads it.
    let mut sock = c.stream().try_clone().expect("clone");
    let bound = Duration::from_secs(30);
    sock.set_write_timeout(Some(bound)).expect("timeout");
    let started = Instant::now();
    let chunk = [b'x'; 64 * 1024];
    let ended = loop {
        match sock.write_all(&chunk) {
            Ok(()) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                panic!("writes blocked for {bound:?}: the tunnel was neither read nor closed")
            }
            Err(_) => break started.elapsed(),
        }
    };
    assert!(
        ended >= Duration::from_secs(1) && ended < Duration::from_secs(20),
        "ended after {ended:?}"
    );
    // The upstream's side ended with it.
    let head = echo.join().expect("echo server");
    assert!(head.contains("upgrade: websocket"), "{head}");
    h.assert_no_errors();
}

/// A WebSocket tunnel quiet both ways is closed after
/// `proxy_tunnel_timeout`, while one whose bytes keep flowing stays open
/// past it. Waits for the close (EOF), bounded by a failure timeout.
#[test]
fn a_tunnel_quiet_both_ways_is_closed_after_the_tunnel_timeout() {
    use std::io::{Read, Write};
    let (port, echo) = hayate_testkit::upgrade_echo_server();
    let upstream = format!("http://127.0.0.1:{port}");
    let h = Hayate::start(BIN, &["--proxy", &upstream, "--proxy-tunnel-timeout", "1s"]);
    let mut c = h.client();
    c.send(b"GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n");
    assert_eq!(c.read_response(true).status, 101);
    let mut sock = c.stream().try_clone().expect("clone");
    sock.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    // Bytes every 200 ms for 2 s, twice the timeout, and still open (the
    // sleep paces the traffic; it decides no ordering).
    let mut buf = [0u8; 16];
    for _ in 0..10 {
        sock.write_all(b"ping").expect("write");
        sock.read_exact(&mut buf[..4]).expect("the echo");
        assert_eq!(&buf[..4], b"ping");
        std::thread::sleep(Duration::from_millis(200));
    }
    // Then quiet: closed by hayate, not by the 30 s read timeout.
    let started = Instant::now();
    match sock.read(&mut buf) {
        Ok(0) => {}
        other => panic!("expected the tunnel closed, got {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    echo.join().expect("echo server");
    h.assert_no_errors();
}
