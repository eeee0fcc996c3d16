//! Resource exhaustion (issue 35): connections held in every state an
//! attacker can choose on a plain port, HTTP/1.1 and h2c, up to the
//! connection limit. They must all be closed within their deadlines, and a
//! fresh client served within a second after. Each state has its own test
//! elsewhere (`h2_deadlines.rs`, `lifecycle.rs`, `protocol.rs`); this one
//! holds them all at once, at the limit, where one unbounded wait is enough
//! to lock every other client out. TLS handshakes held open are in
//! `memory.rs`.

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
