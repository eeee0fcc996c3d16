//! Resource exhaustion (issue 35): connections held in every state an
//! attacker can choose on a plain port, HTTP/1.1 and h2c, up to the
//! connection limit. They must all be closed within their deadlines, and a
//! fresh client served within a second after. Each state has its own test
//! elsewhere (`h2_deadlines.rs`, `lifecycle.rs`, `protocol.rs`); this one
//! holds them all at once, at the limit, where one unbounded wait is enough
//! to lock every other client out. The states before any HTTP (a TLS
//! handshake, a PROXY protocol header) have a test of their own here.

// Tests block on purpose (they are clients, not the server).
#![allow(clippy::disallowed_methods)]

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hayate_testkit::h2_frames::{frame, get, wide_open, PREFACE, SETTINGS};
use hayate_testkit::{site, unix_get, Hayate};

const BIN: &str = env!("CARGO_BIN_EXE_hayate");
/// Connections hayate takes: one per held state.
const LIMIT: usize = 8;
/// A failure bound for waits that should end much sooner.
const FAILURE_BOUND: Duration = Duration::from_secs(30);

/// The open client connections hayate counts.
fn connections_open(admin: &Path) -> String {
    let metrics = unix_get(admin, "/metrics");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("hayate_connections_open "))
        .unwrap_or("?")
        .to_string()
}

/// Polls until hayate counts `n` open connections: when it happened.
fn until_open(admin: &Path, n: usize) -> Instant {
    let bound = Instant::now() + FAILURE_BOUND;
    loop {
        let open = connections_open(admin);
        if open == n.to_string() {
            return Instant::now();
        }
        assert!(
            Instant::now() < bound,
            "{open} connection(s) open after {FAILURE_BOUND:?}, waiting for {n}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn connect(addr: SocketAddr, opening: &[u8]) -> TcpStream {
    let mut tcp = TcpStream::connect(addr).expect("connect");
    tcp.write_all(opening).expect("opening");
    tcp
}

const GET_LARGE: &[u8] = b"GET /large.bin HTTP/1.1\r\nHost: a\r\n\r\n";

#[test]
fn every_held_state_at_the_limit_is_closed_in_time_and_a_fresh_client_is_served() {
    let root = site();
    std::fs::write(root.path().join("large.bin"), vec![7u8; 64 << 20]).expect("write");
    let admin = root.path().join("admin.sock");
    let admin_arg = format!("unix:{}", admin.display());
    let limit = LIMIT.to_string();
    let h = Hayate::start(
        BIN,
        &[
            root.path().to_str().expect("path"),
            "--admin",
            &admin_arg,
            "--max-connections",
            &limit,
            "--header-timeout",
            "4s",
            "--keepalive-timeout",
            "4s",
            "--send-timeout",
            "4s",
            "--http2-goaway-timeout",
            "1s",
        ],
    );
    let addr = h.addr;
    let mut held = vec![
        // HTTP/1.1: silent; half a head; a download never read; the same,
        // its writing side shut (half-closed).
        TcpStream::connect(addr).expect("connect"),
        connect(addr, b"GET /hello.txt HTTP/1.1\r\nHost: a\r\n"),
        connect(addr, GET_LARGE),
        {
            let s = connect(addr, GET_LARGE);
            s.shutdown(Shutdown::Write).expect("half-close");
            s
        },
        // h2c: silent after the preface; after SETTINGS; a download with
        // the windows wide open, never read.
        connect(addr, PREFACE),
        connect(addr, &[PREFACE, &frame(SETTINGS, 0, 0, &[])].concat()),
        connect(addr, &[wide_open(), get("/large.bin")].concat()),
    ];
    // HTTP/1.1: a download read one byte a second.
    let stop = Arc::new(AtomicBool::new(false));
    let slow = {
        let mut s = connect(addr, GET_LARGE);
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut byte = [0u8; 1];
            while !stop.load(Ordering::Relaxed) {
                match s.read(&mut byte) {
                    Ok(1) => std::thread::sleep(Duration::from_secs(1)),
                    _ => break,
                }
            }
        })
    };
    let full = until_open(&admin, LIMIT);
    // At the limit: a new connection is refused with 503 at accept.
    let mut refused = TcpStream::connect(addr).expect("connect");
    refused
        .set_read_timeout(Some(FAILURE_BOUND))
        .expect("timeout");
    let mut answer = String::new();
    let _ = refused.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer:?}");
    // Every state ends within its deadline: 4 s and the answer (1 s), the
    // 408's linger (2 s), sweeps, a loaded machine.
    let none = until_open(&admin, 0);
    let took = none - full;
    assert!(took < Duration::from_secs(12), "all closed after {took:?}");
    // And a fresh client is served at once.
    let asked = Instant::now();
    let r = h.client().get("/hello.txt", &[]);
    assert_eq!(r.status, 200);
    assert!(
        asked.elapsed() < Duration::from_secs(1),
        "{:?}",
        asked.elapsed()
    );
    stop.store(true, Ordering::Relaxed);
    held.clear();
    let _ = slow.join();
    h.assert_no_errors();
}

/// The states before any HTTP at the limit: a TLS connection silent before
/// its ClientHello, one that sent half a ClientHello record, a PROXY
/// protocol header never finished, and one never begun (on a listener that
/// reads it from a trusted peer). Each is bounded: the TLS ones by
/// `tls_handshake_timeout`, the PROXY ones by `header_timeout`; then a
/// fresh client is served.
#[test]
fn handshakes_and_proxy_headers_held_at_the_limit_are_closed_in_time() {
    let admin_dir = tempfile::tempdir().expect("tempdir");
    let admin = admin_dir.path().join("admin.sock");
    let admin_arg = format!("unix:{}", admin.display());
    let (h, _state, _root) = hayate_testkit::tls::start_with_local_ca(
        BIN,
        &[
            "--listen",
            "127.0.0.1:0 proxy_protocol",
            "--trusted-proxies",
            "127.0.0.1",
            "--admin",
            &admin_arg,
            "--max-connections",
            "4",
            "--header-timeout",
            "3s",
            "--tls-handshake-timeout",
            "3s",
            "--https-redirect",
            "false",
        ],
    );
    let tls_addr = h.addr;
    let (_, proxied_addr) = h.next_address();
    // A TLS record header announcing a 512-byte handshake, then 5 of them.
    let half_hello = [0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03];
    let mut held = vec![
        TcpStream::connect(tls_addr).expect("connect"),
        connect(tls_addr, &half_hello),
        connect(proxied_addr, b"PROXY TCP4 203.0.113.7 "),
        TcpStream::connect(proxied_addr).expect("connect"),
    ];
    let full = until_open(&admin, 4);
    // Every state ends within its timeout (3 s), sweeps and a loaded
    // machine's lateness.
    let none = until_open(&admin, 0);
    let took = none - full;
    assert!(took < Duration::from_secs(10), "all closed after {took:?}");
    for s in &mut held {
        s.set_read_timeout(Some(FAILURE_BOUND)).expect("timeout");
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
    }
    // A fresh client of the PROXY listener is served.
    let mut c = TcpStream::connect(proxied_addr).expect("connect");
    c.write_all(b"PROXY TCP4 203.0.113.7 127.0.0.1 4711 80\r\nGET /hello.txt HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        .expect("write");
    c.set_read_timeout(Some(FAILURE_BOUND)).expect("timeout");
    let mut answer = String::new();
    let _ = c.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");
    h.assert_no_errors();
}
