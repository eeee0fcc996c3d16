//! Proxy features beyond forwarding: balancing policies, active health
//! checks, the request queue, header policies, path normalization, and
//! WebSocket-style upgrades.

// Tests block on purpose (they are clients and origins, not the server).
#![allow(clippy::disallowed_methods)]

use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hayate_testkit::origin::{Echo, Origin, OriginOptions};
use hayate_testkit::{read_through_blank_line, Hayate, WAIT};

const BIN: &str = env!("CARGO_BIN_EXE_hayate");

fn origins(n: usize) -> Vec<Origin> {
    (0..n)
        .map(|_| Origin::start(OriginOptions::default()))
        .collect()
}

fn group(origins: &[Origin]) -> String {
    origins
        .iter()
        .map(Origin::url)
        .collect::<Vec<_>>()
        .join(",")
}

/// hayate with one worker, spreading over `members` in turn.
fn round_robin(members: &str, extra: &[&str]) -> Hayate {
    let mut args = vec![
        "--proxy",
        members,
        "--proxy-balance",
        "round_robin",
        "--workers",
        "1",
    ];
    args.extend_from_slice(extra);
    Hayate::start(BIN, &args)
}

/// hayate spreading over `members` with sticky sessions.
fn sticky(members: &str, extra: &[&str]) -> Hayate {
    let mut args = vec!["--proxy", members, "--proxy-balance", "sticky"];
    args.extend_from_slice(extra);
    Hayate::start(BIN, &args)
}

/// What a [`Member`] does with a request (besides `GET /fail`, which it
/// always drops without an answer).
const DIES: u8 = 0; // reads the head, closes without an answer
const ANSWERS: u8 = 1; // 200 "member", keep-alive
const ANSWERS_ONCE: u8 = 2; // answers a connection's first request, dies at its second
const INTERIM_FIRST: u8 = 3; // 100 Continue and 103 Early Hints, then the answer
const SICK: u8 = 4; // 500, and closes

/// A hand-written upstream member whose behaviour the test switches, and
/// which counts the connections it accepts and the request lines it saw
/// (a partial head's too).
struct Member {
    url: String,
    mode: Arc<AtomicU8>,
    accepted: Arc<AtomicUsize>,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Member {
    fn start(mode: u8) -> Member {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let m = Member {
            url: format!("http://{}", l.local_addr().expect("addr")),
            mode: Arc::new(AtomicU8::new(mode)),
            accepted: Arc::new(AtomicUsize::new(0)),
            lines: Arc::new(Mutex::new(Vec::new())),
        };
        let (mode, accepted, lines) = (m.mode.clone(), m.accepted.clone(), m.lines.clone());
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(s) = s else { break };
                accepted.fetch_add(1, Ordering::SeqCst);
                let (mode, lines) = (mode.clone(), lines.clone());
                std::thread::spawn(move || Member::serve(s, &mode, &lines));
            }
        });
        m
    }

    /// One connection, until it closes or the mode says to drop it.
    fn serve(mut s: std::net::TcpStream, mode: &AtomicU8, lines: &Mutex<Vec<String>>) {
        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
        for n in 0.. {
            let mut head = Vec::new();
            let complete = read_through_blank_line(&mut s, &mut head).is_ok();
            let text = String::from_utf8_lossy(&head).to_string();
            if !text.is_empty() {
                let line = text.lines().next().unwrap_or_default().to_string();
                lines.lock().expect("lock").push(line);
            }
            let mode = mode.load(Ordering::SeqCst);
            let dies = match mode {
                DIES => true,
                ANSWERS_ONCE => n > 0,
                _ => text.starts_with("GET /fail "),
            };
            if !complete || dies {
                return; // dropped: closed before any answer byte
            }
            if mode == SICK {
                let _ = s.write_all(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
                return;
            }
            // The body, if any, is read before answering.
            let length = text
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            let mut body = vec![0u8; length];
            let interim: &[u8] = if mode == INTERIM_FIRST {
                b"HTTP/1.1 100 Continue\r\n\r\n\
                  HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"
            } else {
                b""
            };
            if s.read_exact(&mut body).is_err()
                || s.write_all(interim).is_err()
                || s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nmember")
                    .is_err()
            {
                return;
            }
        }
    }

    fn set(&self, mode: u8) {
        self.mode.store(mode, Ordering::SeqCst);
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    fn lines(&self) -> Vec<String> {
        self.lines.lock().expect("lock").clone()
    }
}

#[test]
fn round_robin_alternates_and_hashing_sticks() {
    let o = origins(2);
    let h = round_robin(&group(&o), &[]);
    let mut c = h.client();
    for _ in 0..6 {
        assert_eq!(c.get("/echo", &[]).status, 200);
    }
    assert_eq!(
        (o[0].requests(), o[1].requests()),
        (3, 3),
        "round robin alternates"
    );
    h.assert_no_errors();

    let o = origins(3);
    let h = Hayate::start(
        BIN,
        &[
            "--proxy",
            &group(&o),
            "--proxy-balance",
            "hash:header:X-User",
        ],
    );
    let mut c = h.client();
    for user in ["alice", "bob", "carol", "dave"] {
        let before: Vec<u64> = o.iter().map(Origin::requests).collect();
        for _ in 0..5 {
            assert_eq!(c.get("/echo", &[("X-User", user)]).status, 200);
        }
        let gained: Vec<u64> = o
            .iter()
            .zip(&before)
            .map(|(o, b)| o.requests() - b)
            .collect();
        assert!(
            gained.contains(&5),
            "all of {user}'s requests went to one member: {gained:?}"
        );
    }
    h.assert_no_errors();
}

#[test]
fn sticky_sets_its_cookie_keeps_a_client_on_its_member_and_moves_it_when_that_one_dies() {
    let mut o = origins(3);
    let h = sticky(&group(&o), &["--workers", "1"]);
    let mut c = h.client();
    let set = c.get("/echo", &[]).header("set-cookie").map(str::to_string);
    let set = set.expect("the first answer sets the cookie");
    assert!(set.starts_with("hayate_sticky="), "{set}");
    assert!(set.ends_with("; Path=/; HttpOnly; SameSite=Lax"), "{set}");
    let cookie = set.split(';').next().expect("pair").to_string();
    for origin in &o {
        let port = origin.url().rsplit(':').next().expect("port").to_string();
        assert!(!cookie.contains(&port), "the id names no address: {cookie}");
    }
    let before: Vec<u64> = o.iter().map(Origin::requests).collect();
    for _ in 0..6 {
        let r = c.get("/echo", &[("Cookie", &cookie)]);
        assert_eq!(r.status, 200);
        assert_eq!(r.header("set-cookie"), None, "already carried");
    }
    let gained: Vec<u64> = o
        .iter()
        .zip(&before)
        .map(|(o, b)| o.requests() - b)
        .collect();
    let home = gained.iter().position(|&g| g == 6);
    let home = home.unwrap_or_else(|| panic!("one member took them all: {gained:?}"));

    // A cookie naming no member: the normal choice, and a cookie of its own.
    let r = c.get("/echo", &[("Cookie", "hayate_sticky=0123456789abcdef")]);
    assert_eq!(r.status, 200);
    assert!(
        r.header("set-cookie")
            .is_some_and(|v| v.starts_with("hayate_sticky=")),
        "re-set"
    );

    // Its member gone: the client lands on another one and is told so.
    drop(o.remove(home));
    hayate_testkit::eventually("the client moved to a live member", || {
        let r = c.get("/echo", &[("Cookie", &cookie)]);
        let moved = r
            .header("set-cookie")
            .map(|v| v.split(';').next().unwrap_or("").to_string());
        match (r.status, moved) {
            (200, Some(new)) if new != cookie => Ok(()),
            (status, moved) => Err(format!("{status} {moved:?}")),
        }
    });
}

#[test]
fn the_sticky_cookie_neither_bypasses_the_cache_nor_keeps_a_response_out_of_it() {
    let o = origins(2);
    let h = sticky(&group(&o), &["--cache", "5s"]);
    let mut c = h.client();
    let status = |r: &hayate_testkit::Response| r.header("cache-status").unwrap_or("").to_string();
    let first = c.get("/script?body=page", &[]);
    assert!(status(&first).contains("stored"), "{}", status(&first));
    let set = first
        .header("set-cookie")
        .expect("the client gets its cookie");
    let cookie = set.split(';').next().expect("pair").to_string();
    // Its next request, with the cookie, and another client's without:
    // hits, and the stored copy sets no cookie.
    for extra in [&[("Cookie", cookie.as_str())][..], &[]] {
        let r = c.get("/script?body=page", extra);
        assert!(status(&r).contains("hit"), "{}", status(&r));
        assert_eq!(r.header("set-cookie"), None);
    }
    // A cookie of the client's own bypasses the cache, as without sticky.
    let theirs = format!("{cookie}; session=abc");
    let r = c.get("/script?body=page", &[("Cookie", &theirs)]);
    assert!(status(&r).contains("detail=cookie"), "{}", status(&r));
    h.assert_no_errors();
}

#[test]
fn the_sticky_cookie_is_secure_over_https() {
    let o = origins(2);
    let state = tempfile::tempdir().expect("state");
    let state_dir = state.path().to_str().expect("path");
    let h = sticky(
        &group(&o),
        &[
            "--listen",
            "https://127.0.0.1:0",
            "--tls",
            "internal",
            "--state-dir",
            state_dir,
        ],
    );
    let ca = state.path().join("local-ca/ca.crt");
    let mut c = hayate_testkit::tls::TlsClient::trusting(&ca).connect(h.addr, "localhost");
    let r = c.get("/echo", &[]);
    let set = r.header("set-cookie").expect("set-cookie");
    assert!(set.ends_with("; HttpOnly; SameSite=Lax; Secure"), "{set}");
}

#[test]
fn failing_health_checks_take_a_member_out() {
    let good = Origin::start(OriginOptions::default());
    let sick = Member::start(SICK);
    let members = format!("{},{}", good.url(), sick.url);
    let h = Hayate::start(
        BIN,
        &[
            "--proxy",
            &members,
            "--proxy-health-check",
            "/echo/health",
            "--proxy-health-interval",
            "100ms",
        ],
    );
    // Wait (bounded) until the sick member has been probed and marked down.
    for _ in 0..50 {
        if h.stderr().contains("failed its health check") {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        h.stderr()
            .contains(&format!("upstream {} failed its health check", sick.url)),
        "{}",
        h.stderr()
    );
    let mut c = h.client();
    for _ in 0..10 {
        assert_eq!(
            c.get("/echo", &[]).status,
            200,
            "only the healthy member serves"
        );
    }
    let requests: Vec<String> = sick.lines();
    assert!(
        requests.iter().all(|l| l.starts_with("GET /echo/health ")),
        "only probes reached the sick member: {requests:?}"
    );
    assert!(good.requests() >= 10);
}

#[test]
fn a_full_group_queues_then_answers_503_with_retry_after() {
    let o = Origin::start(OriginOptions::default());
    let h = Hayate::start(
        BIN,
        &[
            "--proxy",
            &o.url(),
            "--workers",
            "1",
            "--proxy-max-conns",
            "1",
            "--proxy-queue",
            "1",
            "--proxy-queue-timeout",
            "5s",
        ],
    );
    let addr = h.addr;
    let get = move |path: &'static str| {
        let r = hayate_testkit::Client::connect(addr).get(path, &[]);
        (r.status, r.header("retry-after").map(str::to_string))
    };
    // The group's one connection is taken by a request the origin holds.
    let held = o.hold("/echo/first");
    let first = std::thread::spawn(move || get("/echo/first").0);
    assert!(
        o.wait_for("/echo/first", 1, WAIT),
        "never reached the origin"
    );
    // Two more: whichever comes first waits in the one-place queue, the
    // other finds it full and is refused at once, while the first request
    // is still held.
    let (tx, rx) = std::sync::mpsc::channel();
    for _ in 0..2 {
        let tx = tx.clone();
        std::thread::spawn(move || tx.send(get("/echo")));
    }
    let refused = rx
        .recv_timeout(WAIT)
        .expect("an answer while the queue is full");
    assert_eq!(refused, (503, Some("1".to_string())), "queue full");
    drop(held);
    let queued = rx.recv_timeout(WAIT).expect("the queued request's answer");
    assert_eq!(queued.0, 200, "the queued request went through");
    assert_eq!(first.join().expect("join"), 200);
    assert_eq!(h.client().get("/echo", &[]).status, 200);
}

#[test]
fn a_queued_request_has_one_deadline_however_often_it_is_woken() {
    let o = Origin::start(OriginOptions::default());
    let flaky = Member::start(ANSWERS);
    let members = format!("{},{}", o.url(), flaky.url);
    let h = round_robin(
        &members,
        &["--proxy-max-conns", "1", "--proxy-queue-timeout", "400ms"],
    );
    let addr = h.addr;
    // The origin (first in turn) is busy with a request it holds.
    let held = o.hold("/slow");
    let slow = std::thread::spawn(move || {
        hayate_testkit::Client::connect(addr)
            .get("/slow", &[])
            .status
    });
    assert!(o.wait_for("/slow", 1, WAIT), "never reached the origin");
    // This one fails on the flaky member, may then only go to the busy
    // origin, and waits in the queue.
    let waiting = std::thread::spawn(move || {
        let started = Instant::now();
        let r = hayate_testkit::Client::connect(addr).get("/fail", &[]);
        let retry_after = r.header("retry-after").map(str::to_string);
        (r.status, retry_after, started.elapsed())
    });
    let deadline = Instant::now() + WAIT;
    while !flaky.lines().iter().any(|l| l.starts_with("GET /fail ")) {
        assert!(Instant::now() < deadline, "/fail never reached the member");
        std::thread::sleep(Duration::from_millis(10));
    }
    // Meanwhile requests come and go on the flaky member, each one waking
    // the queue when it ends, until the waiting request is answered (or for
    // 1.5 s, well past its 400 ms queue timeout).
    let mut c = h.client();
    let until = Instant::now() + Duration::from_millis(1500);
    while !waiting.is_finished() && Instant::now() < until {
        assert_eq!(c.get("/quick", &[]).text(), "member");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (status, retry_after, waited) = waiting.join().expect("join");
    assert_eq!(status, 503, "queue timeout");
    assert_eq!(retry_after.as_deref(), Some("1"));
    assert!(
        waited < Duration::from_millis(1200),
        "waited {waited:?}: each wakeup must not restart the queue timeout"
    );
    drop(held);
    assert_eq!(slow.join().expect("join"), 200);
    h.assert_no_errors();
}

#[test]
fn host_via_and_normalized_paths() {
    let o = Origin::start(OriginOptions::default());
    let h = Hayate::start(
        BIN,
        &[
            "--proxy",
            &o.url(),
            "--proxy-host",
            "app.internal",
            "--proxy-via",
        ],
    );
    let mut c = h.client();
    let r = c.get("/a/../echo/./x?q=1", &[]);
    assert_eq!(r.header("via"), Some("1.1 hayate"));
    let e = Echo::parse(&r.text());
    assert_eq!(
        e.target, "/echo/x?q=1",
        "dot segments resolved before forwarding"
    );
    assert_eq!(e.header("host"), Some("app.internal"));
    assert_eq!(e.header("via"), Some("1.1 hayate"));
    let e = Echo::parse(&c.get("/echo/plain%20name?x", &[]).text());
    assert_eq!(
        e.target, "/echo/plain%20name?x",
        "plain targets pass unchanged"
    );
    h.assert_no_errors();
}

#[test]
fn the_host_sent_upstream_is_set_per_route() {
    let o = Origin::start(OriginOptions::default());
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("hayate.toml");
    std::fs::write(
        &file,
        format!(
            "[[site]]\nproxy = [\"{0}\"]\n\
             [[site.route]]\nprefix = \"/api/\"\nproxy = [\"{0}\"]\nproxy_host = \"api.internal\"\n\
             [[site.route]]\nprefix = \"/raw/\"\nproxy = [\"{0}\"]\nproxy_host = \"upstream\"\n",
            o.url()
        ),
    )
    .expect("write");
    let h = Hayate::start(BIN, &["--config", file.to_str().expect("utf-8")]);
    let mut c = h.client();
    let host = |c: &mut hayate_testkit::Client, path: &str| {
        let r = c.get(path, &[]); // Host: test
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        Echo::parse(&r.text()).header("host").map(str::to_string)
    };
    assert_eq!(host(&mut c, "/api/echo").as_deref(), Some("api.internal"));
    let member = o.url().trim_start_matches("http://").to_string();
    assert_eq!(host(&mut c, "/raw/echo"), Some(member));
    assert_eq!(
        host(&mut c, "/echo").as_deref(),
        Some("test"),
        "passed by default"
    );
    h.assert_no_errors();
}

#[test]
fn trusted_peers_extend_forwarded_for() {
    let o = Origin::start(OriginOptions::default());
    let spoof = [("X-Forwarded-For", "6.6.6.6")];
    let h = Hayate::start(BIN, &["--proxy", &o.url()]);
    let e = Echo::parse(&h.client().get("/echo", &spoof).text());
    assert_eq!(
        e.header("x-forwarded-for"),
        Some("127.0.0.1"),
        "untrusted: replaced"
    );
    let h = Hayate::start(
        BIN,
        &["--proxy", &o.url(), "--proxy-trusted", "127.0.0.0/8"],
    );
    let e = Echo::parse(&h.client().get("/echo", &spoof).text());
    assert_eq!(
        e.header("x-forwarded-for"),
        Some("6.6.6.6, 127.0.0.1"),
        "trusted: extended"
    );
    h.assert_no_errors();
}

#[test]
fn websocket_upgrade_becomes_a_tunnel() {
    // A minimal upgrade server: answers 101, then echoes bytes.
    let upstream = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = upstream.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        let (mut s, _) = upstream.accept().expect("accept");
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let mut head = Vec::new();
        read_through_blank_line(&mut s, &mut head).expect("head");
        let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
        assert!(
            head.contains("upgrade: websocket") && head.contains("connection: upgrade"),
            "{head}"
        );
        s.write_all(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
            .expect("101");
        let mut buf = [0u8; 1024];
        while let Ok(n) = s.read(&mut buf) {
            if n == 0 || s.write_all(&buf[..n]).is_err() {
                break;
            }
        }
    });
    let h = Hayate::start(BIN, &["--proxy", &format!("http://127.0.0.1:{port}")]);
    let mut s = std::net::TcpStream::connect(h.addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    s.write_all(
        b"GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\nhello",
    )
    .expect("send");
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !got.ends_with(b"hello") {
        let n = s.read(&mut buf).expect("read");
        assert!(n > 0, "closed early: {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got).into_owned();
    assert!(
        text.starts_with("HTTP/1.1 101 Switching Protocols\r\n"),
        "{text}"
    );
    assert!(
        text.to_ascii_lowercase().contains("upgrade: websocket"),
        "{text}"
    );
    for msg in [&b"frame-1"[..], b"frame-2"] {
        s.write_all(msg).expect("send");
        let mut echo = vec![0u8; msg.len()];
        s.read_exact(&mut echo).expect("echo");
        assert_eq!(echo, msg);
    }
    drop(s);
    h.assert_no_errors();
}

/// Reads from `s` until it closes (EOF or a reset) or its read timeout
/// passes; returns what arrived, and whether it closed.
fn read_until_closed(s: &mut std::net::TcpStream) -> (Vec<u8>, bool) {
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return (got, true),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return (got, true),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return (got, false)
            }
            Err(e) => panic!("read: {e}; got {:?}", String::from_utf8_lossy(&got)),
        }
    }
}

#[test]
fn a_connection_whose_tunnel_ended_never_reads_http_again() {
    // An upgrade server that answers 101 and then resets the connection
    // (SO_LINGER 0): the tunnel ends with an error, not a clean close.
    let upstream = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = upstream.local_addr().expect("addr").port();
    let (relayed_tx, relayed_rx) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        let (mut s, _) = upstream.accept().expect("accept");
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            s.read_exact(&mut byte).expect("head");
            head.push(byte[0]);
        }
        s.write_all(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
            .expect("101");
        let reset = nix::libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        nix::sys::socket::setsockopt(&s, nix::sys::socket::sockopt::Linger, &reset)
            .expect("SO_LINGER");
        // Reset (by dropping `s`) once the client has the 101.
        let _ = relayed_rx.recv_timeout(WAIT);
    });
    // At debug level hayate logs the end of a tunnel, which the test waits for.
    let h = Hayate::start(
        BIN,
        &[
            "--proxy",
            &format!("http://127.0.0.1:{port}"),
            "--log-level",
            "debug",
        ],
    );
    let mut s = std::net::TcpStream::connect(h.addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(3)))
        .expect("timeout");
    s.write_all(
        b"GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
    )
    .expect("send");
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !got.ends_with(b"\r\n\r\n") {
        let n = s.read(&mut buf).expect("read");
        assert!(n > 0, "closed early: {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    assert!(
        got.starts_with(b"HTTP/1.1 101 "),
        "{:?}",
        String::from_utf8_lossy(&got)
    );
    // Reset the upstream side and wait until hayate has ended the tunnel,
    // then send what would be an HTTP request were the connection read as
    // HTTP again (on the wire it would be WebSocket frames).
    relayed_tx.send(()).expect("the upstream waits");
    let deadline = Instant::now() + WAIT;
    let tunnel_ended = |log: &str| {
        log.lines()
            .any(|l| l.contains(" tunnel from ") && l.contains(" ended: "))
    };
    while !tunnel_ended(&h.stderr()) {
        assert!(
            Instant::now() < deadline,
            "the tunnel never ended: {}",
            h.stderr()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    let (after, closed) = read_until_closed(&mut s);
    let after = String::from_utf8_lossy(&after);
    assert!(
        !after.contains("HTTP/1.1 "),
        "the client got an HTTP response after the tunnel: {after:?}"
    );
    assert!(closed, "the connection stays open after its tunnel ended");
    h.assert_no_errors();
}

#[test]
fn unique_request_ids() {
    let o = Origin::start(OriginOptions::default());
    let h = Hayate::start(BIN, &["--proxy", &o.url()]);
    let mut c = h.client();
    let ids: HashSet<String> = (0..20)
        .map(|_| {
            Echo::parse(&c.get("/echo", &[]).text())
                .header("x-request-id")
                .expect("id")
                .to_string()
        })
        .collect();
    assert_eq!(ids.len(), 20);
}

#[test]
fn trailers_of_a_chunked_response_are_passed_on() {
    let upstream = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = upstream.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        let (mut s, _) = upstream.accept().expect("accept");
        read_through_blank_line(&mut s, &mut Vec::new()).expect("head");
        s.write_all(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Checksum\r\nConnection: close\r\n\r\n\
              5\r\nhello\r\n0\r\nX-Checksum: 42\r\nContent-Length: 99\r\n\r\n",
        )
        .expect("response");
    });
    let h = Hayate::start(BIN, &["--proxy", &format!("http://127.0.0.1:{port}")]);
    let mut s = std::net::TcpStream::connect(h.addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    s.write_all(b"GET / HTTP/1.1\r\nHost: a\r\nTE: trailers\r\nConnection: close\r\n\r\n")
        .expect("send");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read");
    let text = String::from_utf8_lossy(&raw);
    assert!(
        text.contains("\r\n\r\n5\r\nhello\r\n0\r\nX-Checksum: 42\r\n\r\n"),
        "{text}"
    );
    assert!(
        !text.contains("Content-Length: 99"),
        "framing fields are not trailers: {text}"
    );
    h.assert_no_errors();
}

#[test]
fn an_ejected_member_gets_no_requests_until_its_fail_timeout_then_is_tried_again() {
    const FAIL_TIMEOUT: Duration = Duration::from_millis(1500);
    let good = Origin::start(OriginOptions::default());
    let flaky = Member::start(DIES);
    let members = format!("{},{}", good.url(), flaky.url);
    let h = round_robin(
        &members,
        &["--proxy-max-fails", "2", "--proxy-fail-timeout", "1500ms"],
    );
    let mut c = h.client();
    // GETs are idempotent: a member dying before its answer costs a retry
    // on the other one, never an error. Two failures take it out.
    let t0 = Instant::now();
    // When the request that failed on it a second time was sent: it was
    // ejected after that.
    let mut ejected = None;
    for i in 0..12 {
        let sent = Instant::now();
        let r = c.get(&format!("/echo/{i}"), &[]);
        assert_eq!(r.status, 200, "request {i}: {}", r.text());
        if flaky.accepted() == 2 {
            ejected.get_or_insert(sent);
        }
    }
    assert!(
        t0.elapsed() < FAIL_TIMEOUT,
        "the test needs the requests inside the fail timeout"
    );
    assert_eq!(flaky.accepted(), 2, "taken out after 2 failures in a row");
    assert_eq!(good.requests(), 12);
    assert!(h.stderr().contains("ejected"), "{}", h.stderr());

    // Healthy again: not tried before the fail timeout has passed (every
    // request meanwhile goes to the good member), then it gets its turns.
    flaky.set(ANSWERS);
    let ejected = ejected.expect("ejected");
    loop {
        let r = c.get("/again", &[]);
        assert_eq!(r.status, 200, "{}", r.text());
        if r.body == b"member" {
            assert!(
                ejected.elapsed() >= FAIL_TIMEOUT,
                "tried again {:?} after its ejection",
                ejected.elapsed()
            );
            break;
        }
        assert!(ejected.elapsed() < FAIL_TIMEOUT + WAIT, "never tried again");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut answered_by_flaky = 0;
    for i in 0..10 {
        let r = c.get(&format!("/again/{i}"), &[]);
        assert_eq!(r.status, 200, "request {i}: {}", r.text());
        if r.body == b"member" {
            answered_by_flaky += 1;
        }
    }
    assert_eq!(answered_by_flaky, 5, "round robin again over both members");
    h.assert_no_errors();
}

#[test]
fn a_member_failing_on_a_fresh_connection_does_not_get_a_post_replayed_elsewhere() {
    let good = Origin::start(OriginOptions::default());
    let flaky = Member::start(DIES);
    let members = format!("{},{}", good.url(), flaky.url);
    let h = round_robin(&members, &["--proxy-max-fails", "0"]);
    let mut statuses = Vec::new();
    for i in 0..6 {
        // A new client each time: a 502 may close the connection.
        let mut c = h.client();
        let body = format!("order {i}");
        c.send(
            format!(
                "POST /echo/order HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        );
        statuses.push(c.read_response(false).status);
    }
    // The POSTs the dying member saw were not sent again to the good one:
    // it may have acted on them.
    let failed = statuses.iter().filter(|&&s| s == 502).count();
    assert_eq!(failed, 3, "{statuses:?}");
    assert_eq!(flaky.lines().len(), 3, "{:?}", flaky.lines());
    assert_eq!(good.requests(), 3, "each POST reached one member once");
    assert!(
        statuses.iter().all(|&s| s == 200 || s == 502),
        "{statuses:?}"
    );
    // The 502s are logged naming the member (identical lines back to back
    // are folded into a count).
    let log = h.stderr();
    let errors: Vec<&str> = log.lines().filter(|l| l.contains(" ERROR ")).collect();
    assert!(!errors.is_empty(), "{log}");
    assert!(errors.iter().all(|l| l.contains(&flaky.url)), "{log}");
}

#[test]
fn a_streamed_body_is_not_replayed_when_a_reused_connection_fails() {
    let m = Member::start(ANSWERS_ONCE);
    let h = Hayate::start(
        BIN,
        &[
            "--proxy",
            &m.url,
            "--workers",
            "1",
            "--proxy-replay-buffer",
            "1KiB",
        ],
    );
    let put = |len: usize| {
        let mut c = h.client();
        assert_eq!(c.get("/warm", &[]).status, 200, "pools a connection");
        let mut raw =
            format!("PUT /up HTTP/1.1\r\nHost: t\r\nContent-Length: {len}\r\n\r\n").into_bytes();
        raw.extend(std::iter::repeat_n(b'x', len));
        c.send(&raw);
        c.read_response(false).status
    };
    // Small enough for the replay buffer: the pool race is repaired on a
    // fresh connection (PUT is idempotent).
    assert_eq!(put(100), 200);
    assert_eq!(m.accepted(), 2, "one replay on a fresh connection");
    // Larger: streamed upstream as it arrives, so it cannot be sent again.
    assert_eq!(put(8 * 1024), 502);
    assert_eq!(m.accepted(), 3, "no replay of a streamed body");
    let lines = m.lines();
    assert_eq!(
        lines.iter().filter(|l| l.starts_with("PUT /up ")).count(),
        3,
        "small PUT twice (lost, replayed), large once: {lines:?}"
    );
}

#[test]
fn an_upstream_that_never_answers_the_handshake_gives_504_after_the_connect_timeout() {
    // An https:// member that takes the TCP connection and never answers
    // the ClientHello: the connect timeout (which covers TLS) ends the
    // wait, and the member counts a failure.
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let held = Arc::new(Mutex::new(Vec::new()));
    let keep = held.clone();
    std::thread::spawn(move || {
        for s in listener.incoming().flatten() {
            keep.lock().expect("lock").push(s);
        }
    });
    let h = Hayate::start(
        BIN,
        &[
            "--proxy",
            &format!("https://{addr}"),
            "--workers",
            "1",
            "--proxy-connect-timeout",
            "300ms",
        ],
    );
    let mut c = h.client();
    let t0 = Instant::now();
    let r = c.get("/", &[]);
    assert_eq!(r.status, 504, "{}", r.text());
    assert!(t0.elapsed() >= Duration::from_millis(300));
    let log = h.stderr();
    assert!(log.contains("connect timed out"), "{log}");
    // The client connection is still usable.
    assert_eq!(c.get("/", &[]).status, 504);
}

#[test]
fn a_loopback_upstream_whose_accept_queue_stays_full_is_busy_not_failed() {
    // A TCP listener on this host whose accept queue is full and which
    // never accepts: the kernel drops further SYNs. No route or host can be
    // missing on the way to it, so it is a busy app: waited for as long as
    // the request may wait in the queue, then 503, no failure counted.
    use socket2::{Domain, Socket, Type};
    use std::net::{SocketAddr, TcpStream};
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
    let any: SocketAddr = "127.0.0.1:0".parse().expect("addr");
    socket.bind(&any.into()).expect("bind");
    socket.listen(0).expect("listen");
    let listener: TcpListener = socket.into();
    let addr: SocketAddr = listener.local_addr().expect("addr");
    // Fill the accept queue (a backlog of 0 still holds one) until a
    // handshake does not complete.
    let mut fillers = Vec::new();
    loop {
        match TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
            Ok(s) => {
                fillers.push(s);
                assert!(fillers.len() < 16, "the queue never filled");
            }
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => break,
            Err(e) => panic!("connect: {e}"),
        }
    }
    let h = Hayate::start(
        BIN,
        &[
            "--proxy",
            &format!("http://{addr}"),
            "--workers",
            "1",
            "--proxy-connect-timeout",
            "100ms",
            "--proxy-queue-timeout",
            "300ms",
            "--proxy-max-fails",
            "1",
        ],
    );
    let mut c = h.client();
    for _ in 0..2 {
        let t0 = Instant::now();
        let r = c.get("/", &[]);
        assert_eq!(r.status, 503, "busy, not failed: {}", r.text());
        assert!(r.header("retry-after").is_some(), "503 says when to retry");
        assert!(
            t0.elapsed() >= Duration::from_millis(300),
            "waited past the connect timeout"
        );
    }
    let log = h.stderr();
    assert!(log.contains("listen queue stayed full"), "{log}");
    assert!(
        !log.contains("ejected"),
        "a full queue is not a failure: {log}"
    );
    drop(listener);
}

#[test]
fn interim_responses_from_the_upstream_pass_on_but_its_100_continue() {
    let m = Member::start(INTERIM_FIRST);
    let h = Hayate::start(BIN, &["--proxy", &m.url, "--workers", "1"]);
    let mut c = h.client();
    for _ in 0..2 {
        // The 100 answers an Expect hayate handles itself: dropped.
        let r = c.get("/", &[]);
        assert_eq!(r.status, 103, "{r:?}");
        assert_eq!(r.header("link"), Some("</a.css>; rel=preload"));
        let r = c.read_response(false);
        assert_eq!((r.status, r.body.as_slice()), (200, &b"member"[..]));
        assert_eq!(r.header("link"), None, "the 103's fields stay in the 103");
    }
    assert_eq!(
        m.accepted(),
        1,
        "the connection is reused after interim answers"
    );
    // Nothing else is waiting on the client connection: the next answers
    // are ours.
    c.send(b"GET /last HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    let rest = String::from_utf8_lossy(&c.read_to_close()).to_string();
    assert!(rest.starts_with("HTTP/1.1 103 Early Hints\r\n"), "{rest}");
    assert_eq!(rest.matches("HTTP/1.1 200 OK\r\n").count(), 1, "{rest}");
    assert_eq!(rest.matches("HTTP/1.1").count(), 2, "{rest}");
    h.assert_no_errors();
}

/// Sends `method /up` with a 2-byte body on a client whose first request
/// pooled an upstream connection; the status.
fn after_a_warm_up(h: &Hayate, method: &str, extra: &str) -> u16 {
    let mut c = h.client();
    assert_eq!(c.get("/warm", &[]).status, 200, "pools a connection");
    c.send(
        format!("{method} /up HTTP/1.1\r\nHost: t\r\n{extra}Content-Length: 2\r\n\r\nhi")
            .as_bytes(),
    );
    c.read_response(false).status
}

#[test]
fn after_the_pool_race_only_a_request_that_may_repeat_is_replayed() {
    // The member answers a connection's first request and dies at the
    // second after reading it: the request was written whole, and the app
    // may have acted on it.
    let m = Member::start(ANSWERS_ONCE);
    let h = Hayate::start(BIN, &["--proxy", &m.url, "--workers", "1"]);
    assert_eq!(after_a_warm_up(&h, "PUT", ""), 200, "idempotent: replayed");
    assert_eq!(after_a_warm_up(&h, "POST", ""), 502, "not replayed");
    assert_eq!(
        after_a_warm_up(&h, "POST", "Idempotency-Key: order-7\r\n"),
        200,
        "a keyed POST is replayed: the app can tell a repeat"
    );
    let sent = |line: &str| m.lines().iter().filter(|l| l.starts_with(line)).count();
    assert_eq!(sent("PUT /up "), 2, "{:?}", m.lines());
    assert_eq!(
        sent("POST /up "),
        3,
        "the plain POST once, the keyed one twice"
    );
}

#[test]
fn a_post_takes_a_fresh_connection_rather_than_one_idle_for_over_a_second() {
    let m = Member::start(ANSWERS_ONCE);
    let h = Hayate::start(BIN, &["--proxy", &m.url, "--workers", "1"]);
    let mut c = h.client();
    assert_eq!(c.get("/warm", &[]).status, 200, "pools a connection");
    // The rule under test is a duration: a connection idle this long may be
    // one its upstream is closing, which a POST must not meet.
    std::thread::sleep(Duration::from_millis(1100));
    c.send(b"POST /up HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nhi");
    assert_eq!(c.read_response(false).status, 200);
    assert_eq!(m.accepted(), 2, "the POST went on a new connection");
    let posts = m
        .lines()
        .iter()
        .filter(|l| l.starts_with("POST /up "))
        .count();
    assert_eq!(posts, 1);
}

#[test]
fn idle_pooled_connections_are_closed_when_they_expire_without_another_request() {
    // Three requests at once open three upstream connections; each then
    // waits for hayate to close it, and says so.
    let upstream = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", upstream.local_addr().expect("addr"));
    let all_in = Arc::new(std::sync::Barrier::new(3));
    let (closed_tx, closed) = std::sync::mpsc::channel::<bool>();
    std::thread::spawn(move || {
        for s in upstream.incoming().take(3) {
            let Ok(mut s) = s else { return };
            let (all_in, closed_tx) = (all_in.clone(), closed_tx.clone());
            std::thread::spawn(move || {
                let mut head = Vec::new();
                read_through_blank_line(&mut s, &mut head).expect("a request");
                all_in.wait();
                s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                    .expect("answer");
                s.set_read_timeout(Some(Duration::from_secs(5)))
                    .expect("timeout");
                let mut byte = [0u8; 1];
                let _ = closed_tx.send(matches!(s.read(&mut byte), Ok(0)));
            });
        }
    });
    let h = Hayate::start(
        BIN,
        &[
            "--proxy",
            &url,
            "--workers",
            "1",
            "--proxy-keepalive",
            "200ms",
        ],
    );
    let clients: Vec<_> = (0..3)
        .map(|_| {
            let mut c = h.client();
            std::thread::spawn(move || c.get("/burst", &[]).status)
        })
        .collect();
    for c in clients {
        assert_eq!(c.join().expect("client"), 200);
    }
    for i in 0..3 {
        let eof = closed.recv_timeout(Duration::from_secs(6)).expect("closed");
        assert!(eof, "connection {i} was closed by hayate, not left open");
    }
    h.assert_no_errors();
}
