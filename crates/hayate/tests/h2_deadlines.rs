//! HTTP/2 connections that stop answering or reading are closed within
//! their deadlines (issue 35): raw-frame clients over h2c with prior
//! knowledge, each holding one state an attacker can choose. Every test
//! waits for the event that proves the close (a read that returns 0 or an
//! error, a write that fails), bounded by a failure timeout, and then checks
//! how long it took.

// Tests block on purpose (they are clients, not the server).
#![allow(clippy::disallowed_methods)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use hayate_testkit::{site, Hayate};

const BIN: &str = env!("CARGO_BIN_EXE_hayate");

/// The client's connection preface (RFC 9113 §3.4).
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Frame types (RFC 9113 §6).
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
/// How long a test waits for a close that should come much sooner: a
/// failure bound, never what orders events.
const FAILURE_BOUND: Duration = Duration::from_secs(30);

/// A frame's bytes: 9-byte header, then `payload`.
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).expect("small frame");
    let mut out = len.to_be_bytes()[1..].to_vec();
    out.extend_from_slice(&[kind, flags]);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// The (type, flags, payload) of each whole frame in what a server sent
/// after its preface.
fn frames(mut bytes: &[u8]) -> Vec<(u8, u8, Vec<u8>)> {
    let mut out = Vec::new();
    while bytes.len() >= 9 {
        let len = u32::from_be_bytes([0, bytes[0], bytes[1], bytes[2]]) as usize;
        if bytes.len() < 9 + len {
            break;
        }
        out.push((bytes[3], bytes[4], bytes[9..9 + len].to_vec()));
        bytes = &bytes[9 + len..];
    }
    out
}

/// The error code of a GOAWAY frame's payload.
fn goaway_code(payload: &[u8]) -> u32 {
    u32::from_be_bytes(payload[4..8].try_into().expect("GOAWAY payload"))
}

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
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                panic!(
                    "still open after {FAILURE_BOUND:?}; read so far: {:?}",
                    frames(&got)
                )
            }
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                panic!(
                    "still open after {FAILURE_BOUND:?}; read so far: {:?}",
                    frames(&got)
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
/// keep-alive timeout plus `http2_goaway_timeout`, not kept: without that
/// bound it was held for good, and such connections at the connection limit
/// kept every other client out. Both a client that sent its SETTINGS and one
/// that sent only the preface's magic.
#[test]
fn a_client_that_never_answers_the_goaway_ping_is_dropped() {
    let root = site();
    let h = Hayate::start(
        BIN,
        &[
            root.path().to_str().expect("path"),
            "--keepalive-timeout",
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
