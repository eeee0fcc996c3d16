//! HTTP/2 connections that stop answering or reading are closed within
//! their deadlines (issue 35): raw-frame clients over h2c with prior
//! knowledge, each holding one state an attacker can choose. Every test
//! waits for the event that proves the close (a read that returns 0 or an
//! error, a write that fails), bounded by a failure timeout, and then checks
//! how long it took. And the answer to an invalid preface on a port shared
//! with HTTP/1.1.

// Tests block on purpose (they are clients, not the server).
#![allow(clippy::disallowed_methods)]

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use hayate_testkit::h2_frames::*;
use hayate_testkit::{eventually, site, Hayate};

const BIN: &str = env!("CARGO_BIN_EXE_hayate");

/// How long a test waits for a close that should come much sooner: a
/// failure bound, never what orders events.
const FAILURE_BOUND: Duration = Duration::from_secs(30);

/// Reads everything until the server closes (a read returns 0 or fails):
/// the bytes and when the close was seen.
fn read_until_closed(mut tcp: TcpStream) -> (Vec<u8>, Instant) {
    tcp.set_read_timeout(Some(FAILURE_BOUND))
        .expect("read timeout");
    let mut got = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        match tcp.read(&mut buf) {
            Ok(0) => return (got, Instant::now()),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                panic!(
                    "still open after {FAILURE_BOUND:?}; read so far: {:?}",
                    summary(&got)
                )
            }
            Err(_) => return (got, Instant::now()),
        }
    }
}

fn connect(addr: SocketAddr, opening: &[u8]) -> (TcpStream, Instant) {
    let mut tcp = TcpStream::connect(addr).expect("connect");
    let at = Instant::now();
    tcp.write_all(opening).expect("opening");
    (tcp, at)
}

/// A client that opened the connection and then never answers (neither
/// the server's SETTINGS nor its closing GOAWAY's PING) is closed at the
/// header timeout (it never sent a request: a new HTTP/1.1 connection gets
/// no longer, and the keep-alive time here is far longer) plus
/// `http2_goaway_timeout`, not kept: without that bound it was held for
/// good, and such connections at the connection limit kept every other
/// client out. Both a client that sent its SETTINGS and one that sent only
/// the preface's magic.
#[test]
fn a_client_that_never_answers_the_goaway_ping_is_dropped() {
    let root = site();
    let h = Hayate::start(
        BIN,
        &[
            root.path().to_str().expect("path"),
            "--keepalive-timeout",
            "60s",
            "--header-timeout",
            "1s",
            "--http2-goaway-timeout",
            "1s",
        ],
    );
    let with_settings = [PREFACE, &frame(SETTINGS, 0, 0, &[])].concat();
    let clients: Vec<_> = [with_settings, PREFACE.to_vec()]
        .into_iter()
        .map(|opening| {
            let addr = h.addr;
            std::thread::spawn(move || {
                let (tcp, at) = connect(addr, &opening);
                let (got, closed) = read_until_closed(tcp);
                (frames(&got), closed - at)
            })
        })
        .collect();
    for client in clients {
        let (got, after) = client.join().expect("client");
        // It was told: GOAWAY (NO_ERROR) and the PING it never answered.
        let goaway = got.iter().find(|f| f.0 == GOAWAY).expect("a GOAWAY");
        assert_eq!(goaway_code(&goaway.2), 0, "{got:?}");
        assert!(got.iter().any(|f| f.0 == PING && f.1 == 0), "{got:?}");
        // 1 s idle, 1 s for the answer, and the sweep's and a busy
        // machine's lateness.
        assert!(
            after >= Duration::from_millis(1900) && after < Duration::from_secs(6),
            "closed after {after:?}"
        );
    }
    h.assert_no_errors();
}

/// hayate serving `root` with an admin socket and `args`; the socket.
fn start_with_admin(root: &std::path::Path, args: &[&str]) -> (Hayate, std::path::PathBuf) {
    let admin = root.join("admin.sock");
    let admin_arg = format!("unix:{}", admin.display());
    let mut all = vec![root.to_str().expect("path"), "--admin", &admin_arg];
    all.extend_from_slice(args);
    (Hayate::start(BIN, &all), admin)
}

/// The open client connections hayate counts.
fn connections_open(admin: &std::path::Path) -> String {
    let metrics = hayate_testkit::unix_get(admin, "/metrics");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("hayate_connections_open "))
        .unwrap_or("?")
        .to_string()
}

/// Waits until hayate has no client connection open: what a client that
/// does not read cannot see on its socket. A failure after
/// [`FAILURE_BOUND`].
fn until_no_connection(admin: &std::path::Path) -> Instant {
    let bound = Instant::now() + FAILURE_BOUND;
    loop {
        let open = connections_open(admin);
        if open == "0" {
            return Instant::now();
        }
        assert!(
            Instant::now() < bound,
            "{open} connection(s) still open after {FAILURE_BOUND:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A download whose client stops reading its socket is closed after
/// `send_timeout` with no write making progress (issue 35: an HTTP/2
/// download paused for 90 s was kept, where HTTP/1.1 is cut at the send
/// timeout). The client opens its windows wide so that the server's writes,
/// not flow control, are what stall.
#[test]
fn a_download_the_client_stops_reading_is_closed_after_the_send_timeout() {
    let root = site();
    const LARGE: usize = 64 << 20;
    std::fs::write(root.path().join("large.bin"), vec![7u8; LARGE]).expect("write");
    let (h, admin) = start_with_admin(root.path(), &["--send-timeout", "1s"]);
    let opening = [wide_open(), get("/large.bin")].concat();
    let (mut tcp, _) = connect(h.addr, &opening);
    // The response has begun: its HEADERS and some DATA came.
    tcp.set_read_timeout(Some(FAILURE_BOUND)).expect("timeout");
    let mut got = Vec::new();
    let mut buf = [0u8; 64 * 1024];
    while !frames(&got).iter().any(|f| f.0 == DATA) {
        let n = tcp.read(&mut buf).expect("read");
        assert!(n > 0, "closed before the body: {:?}", summary(&got));
        got.extend_from_slice(&buf[..n]);
    }
    let stopped_reading = Instant::now();
    let closed = until_no_connection(&admin);
    let after = closed - stopped_reading;
    assert!(after >= Duration::from_secs(1), "closed after {after:?}");
    // What was sent before the stall arrives, then the end: not the whole
    // body.
    let (rest, _) = read_until_closed(tcp);
    got.extend_from_slice(&rest);
    let body: usize = frames(&got)
        .iter()
        .filter(|f| f.0 == DATA)
        .map(|f| f.2.len())
        .sum();
    assert!(body < LARGE, "the whole body was sent ({body} bytes)");
    h.assert_no_errors();
}

/// A client that reads its socket but never opens its stream's window
/// again (no WINDOW_UPDATE: it stopped reading the response) gets its
/// stream reset (CANCEL) once the window stayed shut for `send_timeout`.
#[test]
fn a_stream_whose_window_stays_shut_is_reset_after_the_send_timeout() {
    let root = site();
    let h = Hayate::start(
        BIN,
        &[root.path().to_str().expect("path"), "--send-timeout", "1s"],
    );
    let opening = [PREFACE, &frame(SETTINGS, 0, 0, &[]), &get("/big.bin")].concat();
    let (mut tcp, asked) = connect(h.addr, &opening);
    tcp.set_read_timeout(Some(FAILURE_BOUND)).expect("timeout");
    let mut got = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    let reset = loop {
        if let Some(f) = frames(&got).into_iter().find(|f| f.0 == RST_STREAM) {
            break f;
        }
        let n = match tcp.read(&mut buf) {
            Ok(n) => n,
            Err(e) => panic!("no RST_STREAM ({e}); got {:?}", summary(&got)),
        };
        assert!(n > 0, "closed without RST_STREAM: {:?}", summary(&got));
        got.extend_from_slice(&buf[..n]);
    };
    let after = asked.elapsed();
    const CANCEL: u32 = 0x8;
    assert_eq!(
        u32::from_be_bytes(reset.2[..4].try_into().expect("code")),
        CANCEL
    );
    assert!(after >= Duration::from_secs(1), "reset after {after:?}");
    // Exactly the initial window was sent (RFC 9113 §6.9.2: 65,535).
    let body: usize = frames(&got)
        .iter()
        .filter(|f| f.0 == DATA)
        .map(|f| f.2.len())
        .sum();
    assert_eq!(body, 65_535);
    h.assert_no_errors();
}

/// Floods `kind` frames that each ask for an ACK, never reading: the
/// write that finally fails (the server closed, and reset what the client
/// still sent) and when.
fn flood(addr: SocketAddr, kind: u8, payload: &[u8]) -> Duration {
    let (mut tcp, at) = connect(addr, &[PREFACE, &frame(SETTINGS, 0, 0, &[])].concat());
    tcp.set_write_timeout(Some(FAILURE_BOUND)).expect("timeout");
    let batch: Vec<u8> = (0..256).flat_map(|_| frame(kind, 0, 0, payload)).collect();
    loop {
        match tcp.write_all(&batch) {
            Ok(()) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                panic!("writes blocked for {FAILURE_BOUND:?}: the server neither reads nor closes")
            }
            Err(_) => return at.elapsed(),
        }
    }
}

/// A client that floods PINGs, or SETTINGS, and never reads the ACKs is
/// ended (GOAWAY ENHANCE_YOUR_CALM, when there is room for it) as soon as
/// the server's writes stall with such frames still coming, long before
/// the send timeout (60 s here, the default).
#[test]
fn ping_and_settings_floods_without_reading_are_ended() {
    let root = site();
    let h = Hayate::start(BIN, &[root.path().to_str().expect("path")]);
    let pings = flood(h.addr, PING, &[0; 8]);
    // The guard's log line follows the close the client saw: waited for.
    // Only the first flood's line is: the logger folds a line identical to
    // the one before within the same second into a later "repeated" count,
    // and both floods' lines are the same ("from 127.0.0.1").
    eventually("the PING flood ended by the guard", || {
        let log = h.stderr();
        match log.contains("ENHANCE_YOUR_CALM") {
            true => Ok(()),
            false => Err(format!("no guard line in:\n{log}")),
        }
    });
    let settings = flood(h.addr, SETTINGS, &[]);
    for (what, after) in [("PING", pings), ("SETTINGS", settings)] {
        assert!(
            after < Duration::from_secs(20),
            "{what} flood ended after {after:?}"
        );
    }
    h.assert_no_errors();
}

/// On a plain port that serves HTTP/1.1 and h2c, bytes that begin like the
/// HTTP/2 preface but are not one get HTTP/2's connection error (RFC 9113
/// §3.4: GOAWAY PROTOCOL_ERROR) and the close, not an HTTP/1.1 answer.
#[test]
fn an_invalid_preface_on_a_shared_port_gets_goaway_protocol_error() {
    let root = site();
    let h = Hayate::start(BIN, &[root.path().to_str().expect("path")]);
    let (tcp, _) = connect(h.addr, b"PRI * HTTP/2.0\r\n\r\nXY\r\n\r\n");
    let (got, _) = read_until_closed(tcp);
    assert!(
        !got.starts_with(b"HTTP/1"),
        "{}",
        String::from_utf8_lossy(&got)
    );
    let got = frames(&got);
    let goaway = got.iter().find(|f| f.0 == GOAWAY).expect("a GOAWAY");
    const PROTOCOL_ERROR: u32 = 0x1;
    assert_eq!(goaway_code(&goaway.2), PROTOCOL_ERROR, "{got:?}");
    // HTTP/1.1 on the same port is untouched.
    assert_eq!(h.client().get("/hello.txt", &[]).status, 200);
    h.assert_no_errors();
}
