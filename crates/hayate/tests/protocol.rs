//! HTTP/1.1 engine behaviour over real sockets: framing, limits, keep-alive,
//! pipelining, timeouts. Each table row is raw request bytes -> status, and
//! whether the server must close the connection afterwards.

// Tests block on purpose (they are clients, not the server).
#![allow(clippy::disallowed_methods)]

use std::io::Write;
use std::time::{Duration, SystemTime};

use hayate_testkit::origin::{Origin, OriginOptions};
use hayate_testkit::{site, Client, Hayate};

const BIN: &str = env!("CARGO_BIN_EXE_hayate");

fn start(args: &[&str]) -> (Hayate, tempfile::TempDir) {
    let dir = site();
    let mut all = vec![dir.path().to_str().expect("utf8 path")];
    all.extend_from_slice(args);
    (Hayate::start(BIN, &all), dir)
}

#[test]
fn bad_requests_get_precise_statuses_and_the_server_stays_up() {
    let (h, _dir) = start(&[
        "--max-request-line",
        "200",
        "--max-header-bytes",
        "1KiB",
        "--max-headers",
        "20",
    ]);
    let long_uri = format!("GET /{} HTTP/1.1\r\nHost: a\r\n\r\n", "a".repeat(300));
    let big_header = format!(
        "GET / HTTP/1.1\r\nHost: a\r\nX-Big: {}\r\n\r\n",
        "b".repeat(1100)
    );
    let many_headers = format!(
        "GET / HTTP/1.1\r\nHost: a\r\n{}\r\n",
        "X-A: 1\r\n".repeat(25)
    );
    // (request, status, connection closed after)
    let table: Vec<(String, u16, bool)> = vec![
        (
            "GET /hello.txt HTTP/1.1\r\nHost: a\r\n\r\n".into(),
            200,
            false,
        ),
        (long_uri, 414, true),
        (big_header, 431, true),
        (many_headers, 431, true),
        ("GET / HTTP/1.1\r\n\r\n".into(), 400, true),
        (
            "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n".into(),
            400,
            true,
        ),
        ("GET / HTTP/1.1\r\nHost: bad host\r\n\r\n".into(), 400, true),
        (
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"
                .into(),
            400,
            true,
        ),
        (
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n".into(),
            400,
            true,
        ),
        (
            "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\n".into(),
            400,
            true,
        ),
        (
            "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n".into(),
            501,
            true,
        ),
        (
            "GET / HTTP/1.1\r\nHost: a\r\nX-Fold: a\r\n  b\r\n\r\n".into(),
            400,
            true,
        ),
        (
            "GET / HTTP/1.1\r\nHost: a\r\nX-Space : b\r\n\r\n".into(),
            400,
            true,
        ),
        (
            "GET / HTTP/1.1\r\nHost: a\r\nX-Nul: a\0b\r\n\r\n".into(),
            400,
            true,
        ),
        (
            "GET / HTTP/1.1\r\nHost: a\r\nX-Cr: a\rb\r\n\r\n".into(),
            400,
            true,
        ),
        ("GET / HTTP/3.0\r\nHost: a\r\n\r\n".into(), 505, true),
        (
            "GET / HTTP/1.1\r\nHost: a\r\nExpect: something\r\n\r\n".into(),
            417,
            true,
        ),
        (
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2000000\r\n\r\n".into(),
            413,
            true,
        ),
        ("GET /%zz HTTP/1.1\r\nHost: a\r\n\r\n".into(), 400, false),
        (
            "GET /../etc/passwd HTTP/1.1\r\nHost: a\r\n\r\n".into(),
            400,
            false,
        ),
        ("GET nothing HTTP/1.1\r\nHost: a\r\n\r\n".into(), 400, true),
        ("BREW / HTTP/1.1\r\nHost: a\r\n\r\n".into(), 405, false),
    ];
    for (raw, status, closes) in &table {
        let mut c = h.client();
        c.send(raw.as_bytes());
        let r = c.read_response(false);
        assert_eq!(r.status, *status, "for {raw:?}");
        if *closes {
            assert_eq!(r.header("connection"), Some("close"), "for {raw:?}");
            assert!(c.is_closed(), "connection must close after {raw:?}");
        } else {
            let again = c.get("/hello.txt", &[]);
            assert_eq!(again.status, 200, "connection reusable after {raw:?}");
        }
    }
    assert_eq!(
        h.client().get("/hello.txt", &[]).status,
        200,
        "server still up"
    );
    h.assert_no_errors();
}

#[test]
fn keep_alive_pipelining_and_http10() {
    let (h, _dir) = start(&[]);
    let mut c = h.client();
    for _ in 0..3 {
        let r = c.get("/hello.txt", &[]);
        assert_eq!((r.status, r.text().as_str()), (200, "hello world\n"));
        assert_eq!(r.header("connection"), None);
    }
    // Ten pipelined requests in one write, answered in order.
    let mut batch = String::new();
    for i in 0..10 {
        let path = if i % 2 == 0 {
            "/hello.txt"
        } else {
            "/docs/guide.html"
        };
        batch.push_str(&format!("GET {path} HTTP/1.1\r\nHost: a\r\n\r\n"));
    }
    c.send(batch.as_bytes());
    for i in 0..10 {
        let r = c.read_response(false);
        let want = if i % 2 == 0 {
            "hello world\n"
        } else {
            "<p>guide</p>\n"
        };
        assert_eq!(r.text(), want, "pipelined response {i}");
    }
    // Connection: close is honoured.
    let r = c.get("/hello.txt", &[("Connection", "close")]);
    assert_eq!((r.status, r.header("connection")), (200, Some("close")));
    assert!(c.is_closed());
    // HTTP/1.0 closes by default, keeps alive on request.
    let mut c = h.client();
    c.send(b"GET /hello.txt HTTP/1.0\r\n\r\n");
    let r = c.read_response(false);
    assert_eq!(r.status, 200);
    assert!(c.is_closed());
    let mut c = h.client();
    c.send(b"GET /hello.txt HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    assert_eq!(
        c.read_response(false).header("connection"),
        Some("keep-alive")
    );
    c.send(b"GET /hello.txt HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    assert_eq!(c.read_response(false).status, 200);
    h.assert_no_errors();
}

/// Pipelined responses that the client does not read for a while: the
/// server's writes stop part-way (the socket buffers fill) and resume, and
/// every byte still arrives once, in order.
#[test]
fn pipelined_responses_to_a_client_that_reads_late_arrive_whole_and_in_order() {
    let dir = site();
    // Bodies small enough to be buffered with their heads, odd-sized so that
    // a write ends mid-response.
    let bodies: Vec<Vec<u8>> = [7001usize, 11003]
        .iter()
        .enumerate()
        .map(|(k, &len)| (0..len).map(|i| ((i * (k + 3)) % 251) as u8).collect())
        .collect();
    for (k, b) in bodies.iter().enumerate() {
        std::fs::write(dir.path().join(format!("{k}.bin")), b).expect("write");
    }
    let h = Hayate::start(BIN, &[dir.path().to_str().expect("utf8 path")]);
    let mut c = h.client();
    // About 13.5 MB of answers: more than the loopback socket buffers hold.
    let n = 1500;
    let mut batch = String::new();
    for i in 0..n {
        batch.push_str(&format!("GET /{}.bin HTTP/1.1\r\nHost: a\r\n\r\n", i % 2));
    }
    c.send(batch.as_bytes());
    std::thread::sleep(Duration::from_millis(300));
    for i in 0..n {
        let r = c.read_response(false);
        assert_eq!(r.status, 200, "response {i}");
        assert!(r.body == bodies[i % 2], "response {i}: wrong body");
    }
    h.assert_no_errors();
}

#[test]
fn request_bodies_are_drained_and_expect_continue_is_answered() {
    let (h, _dir) = start(&[]);
    let mut c = h.client();
    // A GET with a Content-Length body: answered, body skipped, connection reused.
    c.send(b"GET /hello.txt HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nabcde");
    assert_eq!(c.read_response(false).status, 200);
    // Chunked body, sent in pieces, with a trailer.
    c.send(b"GET /hello.txt HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nab");
    assert_eq!(c.read_response(false).status, 200);
    c.send(b"c\r\n0\r\nX-T: 1\r\n\r\n");
    assert_eq!(c.get("/docs/guide.html", &[]).text(), "<p>guide</p>\n");
    // A bad chunk size after the response ends the connection.
    c.send(b"GET /hello.txt HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n");
    assert_eq!(c.read_response(false).status, 200);
    assert!(c.is_closed());
    // Expect: 100-continue on a handler that takes no body: final answer, then close.
    let mut c = h.client();
    c.send(
        b"POST /hello.txt HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n",
    );
    let r = c.read_response(false);
    assert_eq!((r.status, r.header("allow")), (405, Some("GET, HEAD")));
    assert_eq!(r.header("connection"), Some("close"));
    // Expect: 100-continue without a body is just a request.
    let mut c = h.client();
    c.send(b"GET /hello.txt HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\n\r\n");
    assert_eq!(c.read_response(false).status, 200);
    h.assert_no_errors();
}

#[test]
fn slow_header_gets_408_and_idle_connection_is_closed() {
    let (h, _dir) = start(&["--header-timeout", "300ms", "--keepalive-timeout", "300ms"]);
    let mut c = h.client();
    c.send(b"GET /hello.txt HTTP/1.1\r\nHost: a\r\n");
    let r = c.read_response(false);
    assert_eq!(r.status, 408);
    assert!(c.is_closed());
    let mut idle = h.client();
    assert_eq!(idle.get("/hello.txt", &[]).status, 200);
    assert!(
        idle.is_closed(),
        "idle keep-alive connection closed after the timeout"
    );
    h.assert_no_errors();
}

/// What `header_timeout` says it does: a connection that never sends a
/// byte is closed after it (not after the longer keep-alive timeout).
#[test]
fn a_connection_that_sends_nothing_is_closed_after_the_header_timeout() {
    let (h, _dir) = start(&["--header-timeout", "300ms", "--keepalive-timeout", "60s"]);
    let mut silent = h.client();
    let started = std::time::Instant::now();
    assert!(silent.is_closed());
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    h.assert_no_errors();
}

#[test]
fn a_slow_exchange_keeps_the_clock_current() {
    // The origin answers after 1.5 s, longer than the keep-alive timeout:
    // the response's Date and the idle wait that follows are counted from
    // when the response went out, not from when the request came in.
    let o = Origin::start(OriginOptions::default());
    let h = Hayate::start(BIN, &["--proxy", &o.url(), "--keepalive-timeout", "1s"]);
    let mut c = h.client();
    let before = SystemTime::now();
    let r = c.get("/script?ms=1500", &[]);
    assert_eq!(r.status, 200, "{}", r.text());
    let date = httpdate::parse_http_date(r.header("date").expect("Date")).expect("HTTP date");
    assert!(
        date >= before + Duration::from_millis(400),
        "Date {:?} is from before the origin answered (request sent at {before:?})",
        r.header("date")
    );
    std::thread::sleep(Duration::from_millis(300));
    c.send(b"GET /echo HTTP/1.1\r\nHost: a\r\n\r\n");
    let r = c.try_read_response(false);
    assert_eq!(
        r.map(|r| r.status),
        Some(200),
        "the connection was closed before its keep-alive timeout"
    );
    h.assert_no_errors();
}

#[test]
fn connections_over_the_limit_are_refused_without_a_crash() {
    let (h, _dir) = start(&["--max-connections", "8", "--workers", "1"]);
    let mut held: Vec<Client> = (0..8).map(|_| h.client()).collect();
    // Make sure all eight are accepted before the flood.
    for c in held.iter_mut() {
        assert_eq!(c.get("/hello.txt", &[]).status, 200);
    }
    let mut refused = 0;
    for _ in 0..50 {
        let mut c = h.client();
        c.send(b"GET /hello.txt HTTP/1.1\r\nHost: a\r\n\r\n");
        if let Some(r) = c.try_read_response(false) {
            assert_eq!(r.status, 503);
            assert_eq!(r.header("retry-after"), Some("1"));
            refused += 1;
        }
    }
    assert!(refused > 0, "no connection was refused");
    drop(held);
    // Capacity comes back once connections close.
    let mut ok = false;
    for _ in 0..100 {
        if h.client().get("/hello.txt", &[]).status == 200 {
            ok = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(ok, "server did not recover after the flood");
}

#[test]
fn partial_request_then_close_is_harmless() {
    let (h, _dir) = start(&[]);
    let mut c = h.client();
    c.send(b"GET /hello.txt HT");
    c.stream()
        .shutdown(std::net::Shutdown::Write)
        .expect("shutdown");
    assert!(c.is_closed());
    let mut s = std::net::TcpStream::connect(h.addr).expect("connect");
    s.write_all(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
        .expect("tls hello");
    drop(s);
    assert_eq!(h.client().get("/hello.txt", &[]).status, 200);
    h.assert_no_errors();
}
