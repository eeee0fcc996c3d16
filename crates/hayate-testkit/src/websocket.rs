//! WebSocket upgrades seen from the upstream side: a one-connection
//! upgrade echo server ([`upgrade_echo_server`]), and the assertion that
//! the head it read is an HTTP/1.1 WebSocket upgrade
//! ([`assert_websocket_upgrade`]; what a WebSocket over HTTP/2 or HTTP/3
//! becomes upstream).

use std::io::{Read, Write};

use crate::{read_through_blank_line, WAIT};

/// A minimal upgrade server on 127.0.0.1 for one connection: it reads the
/// request head, answers 101, then echoes bytes until the client closes.
/// Returns its port, and the head it read (lower case) once it is done.
pub fn upgrade_echo_server() -> (u16, std::thread::JoinHandle<String>) {
    let upstream = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = upstream.local_addr().expect("addr").port();
    let done = std::thread::spawn(move || {
        let (mut s, _) = upstream.accept().expect("accept");
        s.set_read_timeout(Some(WAIT)).expect("timeout");
        let mut head = Vec::new();
        read_through_blank_line(&mut s, &mut head).expect("head");
        s.write_all(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
            .expect("101");
        let mut buf = [0u8; 4096];
        while let Ok(n) = s.read(&mut buf) {
            if n == 0 || s.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        String::from_utf8_lossy(&head).to_ascii_lowercase()
    });
    (port, done)
}

/// Asserts that `head` (as [`upgrade_echo_server`] read it) is an HTTP/1.1
/// WebSocket upgrade of `path`: what a WebSocket over HTTP/2 or HTTP/3
/// (extended CONNECT) becomes upstream.
pub fn assert_websocket_upgrade(head: &str, path: &str) {
    assert!(
        head.starts_with(&format!("get {path} http/1.1\r\n")),
        "{head}"
    );
    for field in [
        "upgrade: websocket",
        "connection: upgrade",
        "sec-websocket-key: ",
        "sec-websocket-version: 13",
    ] {
        assert!(head.contains(field), "{field} in {head}");
    }
}
