//! PROXY protocol on listeners (v1 and v2, plain and TLS): the client a
//! trusted load balancer names is who the app and the access log see; an
//! untrusted peer, a malformed, oversized or unfinished header closes the
//! connection, and nothing of it reaches the app. And to upstreams
//! (`proxy_protocol = "v2"` on a route): every connection starts with a v2
//! header naming its one client, read by a raw listener and by another
//! hayate's `proxy_protocol` listener.

// Tests block on purpose (they are clients, not the server).
#![allow(clippy::disallowed_methods)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;

use hayate_testkit::origin::{Echo, Origin, OriginOptions};
use hayate_testkit::{eventually, Hayate, WAIT};

const BIN: &str = env!("CARGO_BIN_EXE_hayate");

/// hayate proxying to `origin` on one plain and one TLS listener that read
/// PROXY headers, trusting `trusted`; the state dir holds its local CA.
fn start(dir: &Path, origin: &Origin, trusted: &str, extra: &str) -> (Hayate, SocketAddr) {
    let text = format!(
        "trusted_proxies = [\"{trusted}\"]\ntls = \"internal\"\nstate_dir = \"{state}\"\n\
         https_redirect = false\naccess_log = \"{log}\"\n{extra}\n\
         listen = [\"127.0.0.1:0 proxy_protocol\", \"https://127.0.0.1:0 proxy_protocol\"]\n\
         proxy = [\"{origin}\"]\n",
        state = dir.join("state").display(),
        log = dir.join("access.log").display(),
        origin = origin.url(),
    );
    let file = dir.join("hayate.toml");
    std::fs::write(&file, text).expect("write");
    let h = Hayate::start_in(
        BIN,
        &["--config", file.to_str().expect("utf-8")],
        &[],
        Some(dir),
    );
    let (_, tls) = h.next_address();
    (h, tls)
}

/// A connection that sent `header` and then `request`; everything read
/// back until the server closes or answers with `Connection: close`.
fn exchange(addr: SocketAddr, header: &[u8], request: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(WAIT)).expect("timeout");
    s.write_all(header).expect("header");
    let _ = s.write_all(request);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).to_string()
}

const GET: &[u8] = b"GET /echo HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n";

fn v2_tcp4(src: [u8; 4], port: u16) -> Vec<u8> {
    let mut h = b"\r\n\r\n\0\r\nQUIT\n\x21\x11\x00\x0c".to_vec();
    h.extend_from_slice(&src);
    h.extend_from_slice(&[127, 0, 0, 1]);
    h.extend_from_slice(&port.to_be_bytes());
    h.extend_from_slice(&80u16.to_be_bytes());
    h
}

#[test]
fn the_client_a_trusted_balancer_names_is_the_client() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = Origin::start(OriginOptions::default());
    let (h, _) = start(dir.path(), &o, "127.0.0.1", "");

    let v1 = exchange(h.addr, b"PROXY TCP4 203.0.113.9 127.0.0.1 5555 80\r\n", GET);
    let body = v1.split_once("\r\n\r\n").expect("answer").1;
    assert_eq!(
        Echo::parse(body).header("x-forwarded-for"),
        Some("203.0.113.9"),
        "{v1}"
    );

    let v6 = b"PROXY TCP6 2001:db8::42 ::1 5555 80\r\n";
    let answer = exchange(h.addr, v6, GET);
    let body = answer.split_once("\r\n\r\n").expect("answer").1;
    assert_eq!(
        Echo::parse(body).header("x-forwarded-for"),
        Some("2001:db8::42")
    );

    let answer = exchange(h.addr, &v2_tcp4([198, 51, 100, 23], 4000), GET);
    let body = answer.split_once("\r\n\r\n").expect("answer").1;
    assert_eq!(
        Echo::parse(body).header("x-forwarded-for"),
        Some("198.51.100.23")
    );

    // A health check's LOCAL header: the balancer itself.
    let local = b"\r\n\r\n\0\r\nQUIT\n\x20\x00\x00\x00";
    let answer = exchange(h.addr, local, GET);
    let body = answer.split_once("\r\n\r\n").expect("answer").1;
    assert_eq!(
        Echo::parse(body).header("x-forwarded-for"),
        Some("127.0.0.1")
    );

    let log = dir.path().join("access.log");
    eventually("the access log names the clients", || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let all = ["203.0.113.9 ", "2001:db8::42 ", "198.51.100.23 "];
        all.iter()
            .all(|c| text.lines().any(|l| l.starts_with(c)))
            .then_some(())
            .ok_or(text)
    });
    h.assert_no_errors();
}

#[test]
fn the_header_comes_before_the_tls_handshake() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = Origin::start(OriginOptions::default());
    let (h, tls_addr) = start(dir.path(), &o, "127.0.0.1", "");
    let ca = hayate_testkit::tls::local_ca(&dir.path().join("state"));

    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::pem::PemObject::pem_file_iter(&ca).expect("CA") {
        roots.add(cert.expect("CA cert")).expect("trust");
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
    let conn = rustls::ClientConnection::new(Arc::new(config), name).expect("client");
    let mut tcp = TcpStream::connect(tls_addr).expect("connect");
    tcp.set_read_timeout(Some(WAIT)).expect("timeout");
    tcp.write_all(b"PROXY TCP4 203.0.113.77 127.0.0.1 6000 443\r\n")
        .expect("header");
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    tls.write_all(b"GET /echo HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .expect("request");
    let mut out = Vec::new();
    let _ = tls.read_to_end(&mut out);
    let answer = String::from_utf8_lossy(&out);
    let body = answer.split_once("\r\n\r\n").expect("answer").1;
    let e = Echo::parse(body);
    assert_eq!(
        e.header("x-forwarded-for"),
        Some("203.0.113.77"),
        "{answer}"
    );
    assert_eq!(e.header("x-forwarded-proto"), Some("https"));
    h.assert_no_errors();
}

#[test]
fn bad_headers_and_untrusted_peers_are_closed_unanswered() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = Origin::start(OriginOptions::default());
    let (h, tls_addr) = start(dir.path(), &o, "127.0.0.1", "header_timeout = \"1s\"");
    let mut oversized = b"\r\n\r\n\0\r\nQUIT\n\x21\x11\x10\x00".to_vec();
    oversized.extend(vec![0u8; 4096]);
    for (what, header) in [
        ("no header", GET),
        ("garbage", b"HELLO THERE\r\n"),
        ("a bad address", b"PROXY TCP4 999.0.0.1 127.0.0.1 1 80\r\n"),
        (
            "a v1 line too long",
            &[&b"PROXY UNKNOWN "[..], &[b'x'; 200], b"\r\n"].concat(),
        ),
        ("an oversized v2 header", &oversized),
    ] {
        for addr in [h.addr, tls_addr] {
            assert_eq!(exchange(addr, header, GET), "", "{what} on {addr}");
        }
    }
    // Half a header, then silence: closed at the header timeout.
    let mut s = TcpStream::connect(h.addr).expect("connect");
    s.set_read_timeout(Some(WAIT)).expect("timeout");
    s.write_all(b"PROXY TCP4 203.0.113.9").expect("write");
    let mut buf = [0u8; 16];
    match s.read(&mut buf) {
        // Closed with the unread bytes: a reset, or an end.
        Ok(0) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        other => panic!("expected the connection closed, got {other:?}"),
    }
    assert_eq!(o.requests(), 0, "nothing reached the app");

    // A balancer nobody said to trust.
    let dir = tempfile::tempdir().expect("tempdir");
    let (h, tls_addr) = start(dir.path(), &o, "10.0.0.0/8", "");
    for addr in [h.addr, tls_addr] {
        let header = b"PROXY TCP4 203.0.113.9 127.0.0.1 5555 80\r\n";
        assert_eq!(exchange(addr, header, GET), "");
    }
    assert_eq!(o.requests(), 0, "nothing reached the app");
    assert!(
        h.stderr().contains("not in trusted_proxies"),
        "{}",
        h.stderr()
    );
}

/// An upstream that reads a PROXY header, then answers each request on
/// the connection with `ok`: per connection (in order of arrival), the
/// header's client and destination port, and the requests it carried
/// (known once the connection closed).
struct RawUpstream {
    addr: SocketAddr,
    seen: Arc<std::sync::Mutex<Vec<Seen>>>,
}

/// One upstream connection: its header's client and destination port, and
/// the requests it carried.
type Seen = (Option<SocketAddr>, u16, usize);

impl RawUpstream {
    fn start() -> RawUpstream {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let record = seen.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { return };
                let record = record.clone();
                std::thread::spawn(move || {
                    conn.set_read_timeout(Some(WAIT)).expect("timeout");
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    let (source, dst_port, rest) = loop {
                        let n = conn.read(&mut chunk).unwrap_or(0);
                        assert!(n > 0, "closed before a PROXY header: {buf:?}");
                        buf.extend_from_slice(&chunk[..n]);
                        use hayate_core::proxy_header::{parse, ProxyHeader};
                        match parse(&buf) {
                            ProxyHeader::Incomplete => continue,
                            ProxyHeader::Invalid(why) => panic!("{why}: {buf:?}"),
                            ProxyHeader::Complete { len, source } => {
                                // The destination port: the header's last 2
                                // address bytes (IPv4: 16 + 10).
                                let port = match buf[13] {
                                    0x11 => u16::from_be_bytes([buf[26], buf[27]]),
                                    _ => 0,
                                };
                                break (source, port, buf[len..].to_vec());
                            }
                        }
                    };
                    let at = {
                        let mut seen = record.lock().expect("lock");
                        seen.push((source, dst_port, 0));
                        seen.len() - 1
                    };
                    let mut pending = rest;
                    loop {
                        while let Some(end) = find(&pending, b"\r\n\r\n") {
                            pending.drain(..end + 4);
                            record.lock().expect("lock")[at].2 += 1;
                            let _ =
                                conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
                        }
                        match conn.read(&mut chunk) {
                            Ok(n) if n > 0 => pending.extend_from_slice(&chunk[..n]),
                            _ => return,
                        }
                    }
                });
            }
        });
        RawUpstream { addr, seen }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[test]
fn to_an_upstream_every_connection_starts_with_a_v2_header_naming_its_one_client() {
    let dir = tempfile::tempdir().expect("tempdir");
    let up = RawUpstream::start();
    let text = format!(
        "listen = [\"127.0.0.1:0\"]\ntrusted_proxies = [\"127.0.0.1\"]\n\
         [[site]]\nproxy = [\"http://{}\"]\nproxy_protocol = \"v2\"\n",
        up.addr
    );
    let h = Hayate::start_config(BIN, &dir.path().join("hayate.toml"), &text);
    // A client of its own, two requests on its connection: each goes on a
    // connection of its own, whose header names the client's address and
    // port and the port it connected to.
    let mut c = h.client();
    let port = c.stream().local_addr().expect("addr").port();
    assert_eq!(c.get("/a", &[]).status, 200);
    assert_eq!(c.get("/b", &[]).status, 200);
    // A client behind a trusted proxy: its address, its port unknown (0).
    let named = [("X-Forwarded-For", "203.0.113.7")];
    assert_eq!(h.client().get("/c", &named).status, 200);
    let seen = eventually("each upstream connection closed after its request", || {
        let seen = up.seen.lock().expect("lock").clone();
        (seen.len() == 3 && seen.iter().all(|s| s.2 == 1))
            .then_some(seen.clone())
            .ok_or(format!("{seen:?}"))
    });
    let client = Some(SocketAddr::from(([127, 0, 0, 1], port)));
    assert_eq!(seen[0], (client, h.addr.port(), 1));
    assert_eq!(seen[1], (client, h.addr.port(), 1));
    let named = Some(SocketAddr::from(([203, 0, 113, 7], 0)));
    assert_eq!(seen[2], (named, h.addr.port(), 1));
    h.assert_no_errors();
}

#[test]
fn another_hayates_proxy_protocol_listener_takes_what_an_upstream_route_sends() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = Origin::start(OriginOptions::default());
    let inner_dir = dir.path().join("inner");
    std::fs::create_dir(&inner_dir).expect("mkdir");
    let (inner, _) = start(&inner_dir, &o, "127.0.0.1", "");
    let outer = |v2: bool| {
        let text = format!(
            "listen = [\"127.0.0.1:0\"]\ntrusted_proxies = [\"127.0.0.1\"]\n\
             [[site]]\nproxy = [\"http://{}\"]\nproxy_protocol = \"{}\"\n",
            inner.addr,
            if v2 { "v2" } else { "off" }
        );
        let file = dir.path().join(format!("outer-{v2}.toml"));
        Hayate::start_config(BIN, &file, &text)
    };
    let with = outer(true);
    let named = [("X-Forwarded-For", "203.0.113.7")];
    let r = with.client().get("/echo", &named);
    assert_eq!(r.status, 200, "{}", r.text());
    let echo = Echo::parse(&r.text());
    assert_eq!(echo.header("x-forwarded-for"), Some("203.0.113.7"));
    // Without the header, the inner hayate closes the connection.
    let without = outer(false);
    assert_eq!(without.client().get("/echo", &named).status, 502);
    with.assert_no_errors();
    inner.assert_no_errors();
}

#[test]
fn check_refuses_proxy_protocol_where_it_cannot_be_sent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("hayate.toml");
    let check = |text: &str| {
        std::fs::write(&file, text).expect("write");
        hayate_testkit::run_to_end(std::process::Command::new(BIN).arg("check").arg(&file))
    };
    let root = dir.path().display();
    let (ok, said) = check(&format!(
        "[[site]]\nroot = \"{root}\"\nfastcgi = [\"127.0.0.1:9000\"]\nproxy_protocol = \"v2\"\n"
    ));
    assert!(
        !ok && said.contains("hayate.toml:") && said.contains("php-fpm"),
        "{said}"
    );
    let (ok, said) = check("[[site]]\nproxy = [\"http://127.0.0.1:9\"]\nproxy_protocol = \"v1\"\n");
    assert!(
        !ok && said.contains("hayate.toml:3: proxy_protocol"),
        "{said}"
    );
}
