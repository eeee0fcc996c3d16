//! HTTP/2 end to end with the `h2` crate as the client (the HTTP/2 of
//! hyper and reqwest): over TLS by ALPN and h2c with prior knowledge, files
//! (ranges, conditional requests, a large file within flow control), many
//! streams on one connection, the proxy with bodies both ways and the
//! cache, an upstream's 103 Early Hints, a reset stream cancelling its upstream request, the rapid-reset
//! defence, and h2spec's conformance suite.

// Tests block on purpose (they are clients, not the server).
#![allow(clippy::disallowed_methods)]

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use hayate_testkit::{
    big_bytes, checksum, eventually_async, site, Echo, Hayate, Origin, OriginOptions, WAIT,
};
use tokio::net::TcpStream;

const BIN: &str = env!("CARGO_BIN_EXE_hayate");

/// hayate on an https listener with the local CA, more `args`; its state
/// directory (the CA is `local-ca/ca.crt` in it) and site.
fn start(args: &[&str]) -> (Hayate, tempfile::TempDir, tempfile::TempDir) {
    hayate_testkit::tls::start_with_local_ca(BIN, args)
}

type Sender = h2::client::SendRequest<Bytes>;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// An HTTP/2 connection over TLS (ALPN h2) trusting `ca`.
async fn connect_tls(addr: SocketAddr, ca: &Path) -> Sender {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::pem::PemObject::pem_file_iter(ca).expect("CA") {
        let cert: rustls::pki_types::CertificateDer<'static> = cert.expect("CA cert");
        roots.add(cert).expect("trust");
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
    let tls = connector.connect(name, tcp).await.expect("handshake");
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    handshake(tls).await
}

async fn handshake<T>(io: T) -> Sender
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + 'static,
{
    let (sender, conn) = h2::client::handshake(io).await.expect("h2 handshake");
    tokio::task::spawn_local(async move {
        let _ = conn.await;
    });
    sender
}

/// A response: status, fields, body (collected, its window released).
struct Got {
    status: u16,
    headers: http::HeaderMap,
    body: Vec<u8>,
}

async fn request(
    sender: &mut Sender,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Vec<u8>>,
) -> Got {
    let mut req = http::Request::builder()
        .method(method)
        .uri(format!("https://localhost{path}"));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(()).expect("request");
    let ready = sender.clone().ready().await.expect("ready");
    *sender = ready;
    let (response, mut send) = sender.send_request(req, body.is_none()).expect("send");
    if let Some(body) = body {
        // Sent in pieces as the window allows.
        let mut rest = Bytes::from(body);
        while !rest.is_empty() {
            send.reserve_capacity(rest.len());
            let n = std::future::poll_fn(|cx| send.poll_capacity(cx))
                .await
                .expect("capacity")
                .expect("capacity");
            send.send_data(rest.split_to(n.min(rest.len())), false)
                .expect("data");
        }
        send.send_data(Bytes::new(), true).expect("end");
    }
    let response = tokio::time::timeout(WAIT, response)
        .await
        .expect("in time")
        .expect("response");
    let (parts, mut recv) = response.into_parts();
    let mut body = Vec::new();
    while let Some(chunk) = recv.data().await {
        let chunk = chunk.expect("body");
        let _ = recv.flow_control().release_capacity(chunk.len());
        body.extend_from_slice(&chunk);
    }
    Got {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body,
    }
}

fn on_local<F: std::future::Future>(f: F) -> F::Output {
    let rt = runtime();
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, f)
}

#[test]
fn files_over_h2_with_ranges_conditions_and_many_streams() {
    let (h, state, root) = start(&[]);
    let big = big_bytes(12 << 20);
    std::fs::write(root.path().join("large.bin"), &big).expect("write");
    let ca = state.path().join("local-ca/ca.crt");
    on_local(async {
        let mut s = connect_tls(h.addr, &ca).await;
        let r = request(&mut s, "GET", "/hello.txt", &[], None).await;
        assert_eq!((r.status, &r.body[..]), (200, &b"hello world\n"[..]));
        assert_eq!(r.headers["content-length"], "12");
        assert_eq!(r.headers["server"], "hayate");
        let etag = r.headers["etag"].to_str().expect("etag").to_string();
        let r = request(
            &mut s,
            "GET",
            "/hello.txt",
            &[("if-none-match", &etag)],
            None,
        )
        .await;
        assert_eq!((r.status, r.body.len()), (304, 0));
        let r = request(&mut s, "GET", "/hello.txt", &[("range", "bytes=0-4")], None).await;
        assert_eq!((r.status, &r.body[..]), (206, &b"hello"[..]));
        let r = request(&mut s, "HEAD", "/hello.txt", &[], None).await;
        assert_eq!((r.status, r.body.len()), (200, 0));
        assert_eq!(r.headers["content-length"], "12");
        assert_eq!(
            request(&mut s, "GET", "/missing", &[], None).await.status,
            404
        );
        // Larger than every window: sent as the client reads.
        let r = request(&mut s, "GET", "/large.bin", &[], None).await;
        assert_eq!(r.status, 200);
        assert!(r.body == big, "{} bytes", r.body.len());
        // 100 streams at once on the one connection.
        let mut all = Vec::new();
        for _ in 0..100 {
            let mut s = s.clone();
            all.push(tokio::task::spawn_local(async move {
                request(&mut s, "GET", "/docs/guide.html", &[], None).await
            }));
        }
        for t in all {
            let r = t.await.expect("stream");
            assert_eq!((r.status, &r.body[..]), (200, &b"<p>guide</p>\n"[..]));
        }
    });
}

#[test]
fn h2c_with_prior_knowledge_on_a_plain_listener() {
    let root = site();
    let admin = root.path().join("admin.sock");
    let admin_arg = format!("unix:{}", admin.display());
    let h = Hayate::start(
        BIN,
        &[root.path().to_str().expect("path"), "--admin", &admin_arg],
    );
    on_local(async {
        let tcp = TcpStream::connect(h.addr).await.expect("connect");
        let mut s = handshake(tcp).await;
        let r = request(&mut s, "GET", "/hello.txt", &[], None).await;
        assert_eq!((r.status, &r.body[..]), (200, &b"hello world\n"[..]));
    });
    // HTTP/1.1 on the same listener is untouched.
    assert_eq!(h.client().get("/hello.txt", &[]).status, 200);
    // Each counted under its protocol.
    let metrics = hayate_testkit::unix_get(&admin, "/metrics");
    for line in [
        "hayate_http_requests_by_protocol_total{protocol=\"HTTP/2\"} 1",
        "hayate_http_requests_by_protocol_total{protocol=\"HTTP/1.1\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} in {metrics}");
    }
    h.assert_no_errors();
}

/// RFC 9113 §8.2.1: a field value that begins or ends with whitespace makes
/// the request malformed; it is answered 400 (it was passed on, padded, to
/// the handler and upstream), and the connection serves on.
#[test]
fn whitespace_around_a_field_value_is_a_malformed_request() {
    let origin = Origin::start(OriginOptions::default());
    let url = origin.url();
    let root = site();
    let h = Hayate::start(
        BIN,
        &[
            root.path().to_str().expect("path"),
            "--proxy",
            &format!("/api={url}"),
        ],
    );
    on_local(async {
        let tcp = TcpStream::connect(h.addr).await.expect("connect");
        let mut s = handshake(tcp).await;
        for value in [" leading", "trailing ", "\ttab", "tab\t"] {
            let r = request(&mut s, "GET", "/api/echo", &[("x-padded", value)], None).await;
            assert_eq!(r.status, 400, "{value:?}");
            let r = request(&mut s, "GET", "/hello.txt", &[("x-padded", value)], None).await;
            assert_eq!(r.status, 400, "{value:?}");
        }
        // Inner whitespace is a value like any other; the connection is fine.
        let r = request(&mut s, "GET", "/hello.txt", &[("x-inner", "a b")], None).await;
        assert_eq!((r.status, &r.body[..]), (200, &b"hello world\n"[..]));
        let r = request(&mut s, "GET", "/api/echo", &[("x-inner", "a b")], None).await;
        assert_eq!(r.status, 200);
    });
    assert_eq!(
        origin.requests(),
        1,
        "no malformed request reached the upstream"
    );
    h.assert_no_errors();
}

/// An idle connection first gives h2's memory back (a second without
/// streams, `Release` in `h2_conn/release.rs`) and is closed with GOAWAY only at the
/// keep-alive timeout, not when it gave its memory back.
#[test]
fn an_idle_connection_closes_with_goaway_at_the_keepalive_timeout() {
    let root = site();
    let h = Hayate::start(
        BIN,
        &[
            root.path().to_str().expect("path"),
            "--keepalive-timeout",
            "3s",
        ],
    );
    on_local(async {
        let tcp = TcpStream::connect(h.addr).await.expect("connect");
        let (mut s, conn) = h2::client::handshake(tcp).await.expect("h2 handshake");
        let ended = tokio::task::spawn_local(async move {
            let result = conn.await;
            (result, std::time::Instant::now())
        });
        let r = request(&mut s, "GET", "/hello.txt", &[], None).await;
        assert_eq!((r.status, &r.body[..]), (200, &b"hello world\n"[..]));
        let idle_since = std::time::Instant::now();
        let (result, at) = tokio::time::timeout(std::time::Duration::from_secs(30), ended)
            .await
            .expect("closed within 30 s")
            .expect("connection task");
        // A graceful GOAWAY (NO_ERROR) ends the client's connection cleanly.
        assert!(result.is_ok(), "{result:?}");
        // Not at the memory release, a second in: at the timeout (a loaded
        // machine can only make it later).
        let idle = at - idle_since;
        assert!(
            idle >= std::time::Duration::from_millis(2500),
            "closed after {idle:?}"
        );
    });
}

#[test]
fn the_proxy_and_the_cache_over_h2() {
    let origin = Origin::start(OriginOptions::default());
    let url = origin.url();
    let (h, state, _root) = start(&["--proxy", &url, "--cache", "5s", "--max-body-size", "8MiB"]);
    let ca = state.path().join("local-ca/ca.crt");
    on_local(async {
        let mut s = connect_tls(h.addr, &ca).await;
        // A request body larger than the stream window, streamed upstream.
        let body = big_bytes(3 << 20);
        let sum = checksum(&body);
        let r = request(
            &mut s,
            "POST",
            "/echo",
            &[("content-type", "application/octet-stream")],
            Some(body),
        )
        .await;
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        let echo = Echo::parse(&String::from_utf8_lossy(&r.body));
        assert_eq!(echo.body_len, 3 << 20);
        assert_eq!(echo.checksum, sum);
        assert_eq!(echo.header("x-forwarded-proto"), Some("https"));
        // A streamed response of unknown length.
        let r = request(&mut s, "GET", "/bytes?n=3000000&chunked=1", &[], None).await;
        assert_eq!(r.status, 200);
        assert!(r.body == big_bytes(3_000_000));
        // The cache answers the second time.
        let first = request(&mut s, "GET", "/script/c?body=cached", &[], None).await;
        let second = request(&mut s, "GET", "/script/c?body=cached", &[], None).await;
        assert_eq!((first.status, second.status), (200, 200));
        assert_eq!(second.body, first.body);
        assert_eq!(origin.count("/script/c?body=cached"), 1);
    });
}

#[test]
fn early_hints_reach_an_h2_client_before_the_final_response() {
    let origin = Origin::start(OriginOptions::default());
    let url = origin.url();
    let (h, state, _root) = start(&["--proxy", &url]);
    let ca = state.path().join("local-ca/ca.crt");
    let target = "/script?early=Link:%3C/style.css%3E;%20rel=preload&body=final";
    let held = origin.hold(target);
    on_local(async {
        let mut s = connect_tls(h.addr, &ca).await;
        let req = http::Request::get(format!("https://localhost{target}"))
            .body(())
            .expect("req");
        let (mut response, _send) = s.send_request(req, true).expect("send");
        // The 103 comes while the final answer is held at the origin.
        let hint = tokio::time::timeout(
            WAIT,
            std::future::poll_fn(|cx| response.poll_informational(cx)),
        )
        .await
        .expect("in time")
        .expect("an interim response")
        .expect("ok");
        assert_eq!(hint.status(), 103);
        assert_eq!(
            hint.headers().get("link").map(|v| v.as_bytes()),
            Some(&b"</style.css>; rel=preload"[..])
        );
        drop(held);
        let r = tokio::time::timeout(WAIT, response)
            .await
            .expect("in time")
            .expect("response");
        assert_eq!(r.status(), 200);
    });
    assert_eq!(origin.holds_expired(), 0);
    h.assert_no_errors();
}

/// Waits until `target` has reached `origin`, letting this thread's tasks
/// (the client connection) run meanwhile.
async fn arrived(origin: &Origin, target: &str) {
    eventually_async("the request at the origin", || {
        match origin.wait_for(target, 1, std::time::Duration::ZERO) {
            true => Ok(()),
            false => Err(target.to_string()),
        }
    })
    .await
}

#[test]
fn a_reset_stream_cancels_its_upstream_request() {
    let origin = Origin::start(OriginOptions::default());
    let url = origin.url();
    let (h, state, _root) = start(&["--proxy", &url, "--log-level", "debug"]);
    let ca = state.path().join("local-ca/ca.crt");
    let held = origin.hold("/echo?held=1");
    on_local(async {
        let mut s = connect_tls(h.addr, &ca).await;
        let req = http::Request::get("https://localhost/echo?held=1")
            .body(())
            .expect("req");
        let (response, mut send) = s.send_request(req, true).expect("send");
        arrived(&origin, "/echo?held=1").await;
        send.send_reset(h2::Reason::CANCEL);
        drop(response);
        // hayate says when it has dropped the upstream exchange; only then
        // may the origin answer (else the answer could race the reset).
        eventually_async("the cancellation logged", || {
            let log = h.stderr();
            match log.contains("upstream request cancelled") {
                true => Ok(()),
                false => Err(log),
            }
        })
        .await;
        // The origin's connection for it was closed, not pooled: the next
        // request opens another.
        drop(held);
        let r = request(&mut s, "GET", "/echo", &[], None).await;
        assert_eq!(r.status, 200);
        assert_eq!(
            origin.connections(),
            2,
            "the cancelled request's connection was not reused"
        );
    });
}

#[test]
fn rapid_resets_end_the_connection() {
    let (h, state, _root) = start(&[]);
    let ca = state.path().join("local-ca/ca.crt");
    on_local(async {
        let s = connect_tls(h.addr, &ca).await;
        let mut closed = false;
        for _ in 0..5000 {
            let Ok(mut ready) = s.clone().ready().await else {
                closed = true;
                break;
            };
            let req = http::Request::get("https://localhost/hello.txt")
                .body(())
                .expect("req");
            match ready.send_request(req, false) {
                Ok((_, mut send)) => send.send_reset(h2::Reason::CANCEL),
                Err(_) => {
                    closed = true;
                    break;
                }
            }
            tokio::task::yield_now().await;
        }
        assert!(
            closed,
            "5,000 streams opened and reset without the connection ending"
        );
    });
    // Others are still served.
    on_local(async {
        let mut s = connect_tls(h.addr, &ca).await;
        assert_eq!(
            request(&mut s, "GET", "/hello.txt", &[], None).await.status,
            200
        );
    });
}

/// h2spec, the HTTP/2 conformance suite, against the TLS listener. Its
/// requests ask for a 1 MiB file: larger than the client's 64 KiB stream
/// window, so a response cannot end before the client's frames that follow
/// its request are read (case 6.9.1/3 sends WINDOW_UPDATEs that overflow
/// the stream's window after HEADERS, and a stream already answered whole
/// has no window left to overflow: with a small file it failed once in CI).
#[test]
fn h2spec_passes() {
    let (h, _state, _root) = start(&["--access-log", "off"]);
    let bin = hayate_testkit::pebble::go_binary(
        "h2spec",
        "github.com/summerwind/h2spec/cmd/h2spec@v2.2.1+incompatible",
    );
    let out = std::process::Command::new(bin)
        .args(["-t", "-k", "-h", "127.0.0.1", "-o", "5", "-P", "/big.bin"])
        .args(["-p", &h.addr.port().to_string()])
        .output()
        .expect("run h2spec");
    let text = String::from_utf8_lossy(&out.stdout);
    let summary = text
        .lines()
        .rev()
        .find(|l| l.contains("tests,"))
        .unwrap_or_default();
    assert!(
        out.status.success() && summary.contains(" 0 failed") && summary.contains(" 0 skipped"),
        "{text}"
    );
}

/// h2spec over h2c on a listener that speaks only HTTP/2 (`ADDR h2c`):
/// every case, 3.5/2's invalid preface included (a port shared with
/// HTTP/1.1 answers bytes that do not begin like a preface as HTTP/1.1);
/// and an HTTP/1.1 request there gets HTTP/2's connection error, not an
/// answer.
#[test]
fn h2spec_passes_over_h2c_on_an_http2_only_listener() {
    use std::io::{Read, Write};
    let root = hayate_testkit::site();
    std::fs::write(root.path().join("big.bin"), vec![b'x'; 1 << 20]).expect("write");
    let path = root.path().to_str().expect("utf-8");
    let h = Hayate::start(
        BIN,
        &[path, "--listen", "127.0.0.1:0 h2c", "--access-log", "off"],
    );
    let bin = hayate_testkit::pebble::go_binary(
        "h2spec",
        "github.com/summerwind/h2spec/cmd/h2spec@v2.2.1+incompatible",
    );
    let out = std::process::Command::new(bin)
        .args(["-h", "127.0.0.1", "-o", "5", "-P", "/big.bin"])
        .args(["-p", &h.addr.port().to_string()])
        .output()
        .expect("run h2spec");
    let text = String::from_utf8_lossy(&out.stdout);
    let summary = text
        .lines()
        .rev()
        .find(|l| l.contains("tests,"))
        .unwrap_or_default();
    assert!(
        out.status.success() && summary.contains(" 0 failed") && summary.contains(" 0 skipped"),
        "{text}"
    );
    let mut tcp = std::net::TcpStream::connect(h.addr).expect("connect");
    tcp.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .expect("timeout");
    tcp.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: a\r\n\r\n")
        .expect("write");
    let mut got = Vec::new();
    let _ = tcp.read_to_end(&mut got);
    assert!(
        !got.starts_with(b"HTTP/1.1"),
        "{:?}",
        String::from_utf8_lossy(&got)
    );
    // A SETTINGS frame (type 4) then GOAWAY (type 7) with PROTOCOL_ERROR.
    assert!(got.windows(4).any(|w| w == [0, 0, 0, 1]), "{got:?}");
}

#[test]
fn websocket_over_h2_becomes_an_upgrade_upstream() {
    let (port, seen) = hayate_testkit::upgrade_echo_server();
    let url = format!("http://127.0.0.1:{port}");
    let (h, state, _root) = start(&["--proxy", &url]);
    let ca = state.path().join("local-ca/ca.crt");
    on_local(async {
        let s = connect_tls(h.addr, &ca).await;
        let mut s = s.ready().await.expect("ready");
        let req = http::Request::builder()
            .method(http::Method::CONNECT)
            .uri("https://localhost/ws")
            .extension(h2::ext::Protocol::from_static("websocket"))
            .header("sec-websocket-version", "13")
            .body(())
            .expect("request");
        let (response, mut send) = s.send_request(req, false).expect("extended CONNECT");
        let response = response.await.expect("response");
        assert_eq!(response.status(), 200);
        let mut recv = response.into_body();
        for msg in [&b"frame-1"[..], &[7u8; 100_000][..]] {
            send.reserve_capacity(msg.len());
            let mut rest = Bytes::copy_from_slice(msg);
            while !rest.is_empty() {
                let n = std::future::poll_fn(|cx| send.poll_capacity(cx))
                    .await
                    .expect("capacity")
                    .expect("capacity");
                send.send_data(rest.split_to(n.min(rest.len())), false)
                    .expect("data");
            }
            let mut echoed = Vec::new();
            while echoed.len() < msg.len() {
                let chunk = recv.data().await.expect("echo").expect("echo");
                let _ = recv.flow_control().release_capacity(chunk.len());
                echoed.extend_from_slice(&chunk);
            }
            assert_eq!(echoed, msg);
        }
        send.send_data(Bytes::new(), true).expect("end");
    });
    let head = seen.join().expect("upstream");
    hayate_testkit::assert_websocket_upgrade(&head, "/ws");
}

/// A WebSocket over HTTP/2 whose client stops reading (it never gives its
/// window back) is ended once hayate's writes to it wait `send_timeout`
/// (decision 0014): the stream is reset, the upstream's connection closed.
/// Before, the tunnel held both for good.
#[test]
fn a_websocket_over_h2_whose_client_stops_reading_is_reset_after_the_send_timeout() {
    let (port, seen) = hayate_testkit::upgrade_echo_server();
    let url = format!("http://127.0.0.1:{port}");
    let (h, state, _root) = start(&["--proxy", &url, "--send-timeout", "1s"]);
    let ca = state.path().join("local-ca/ca.crt");
    on_local(async {
        let s = connect_tls(h.addr, &ca).await;
        let mut s = s.ready().await.expect("ready");
        let req = http::Request::builder()
            .method(http::Method::CONNECT)
            .uri("https://localhost/ws")
            .extension(h2::ext::Protocol::from_static("websocket"))
            .header("sec-websocket-version", "13")
            .body(())
            .expect("request");
        let (response, mut send) = s.send_request(req, false).expect("extended CONNECT");
        let response = response.await.expect("response");
        assert_eq!(response.status(), 200);
        // Kept, never read: the echo fills the client's 64 KiB window.
        let _recv = response.into_body();
        let started = std::time::Instant::now();
        let mut rest = Bytes::from(vec![7u8; 200_000]);
        send.reserve_capacity(rest.len());
        while !rest.is_empty() {
            let Some(Ok(n)) = std::future::poll_fn(|cx| send.poll_capacity(cx)).await else {
                break;
            };
            if send
                .send_data(rest.split_to(n.min(rest.len())), false)
                .is_err()
            {
                break;
            }
        }
        let bound = std::time::Duration::from_secs(30);
        let reset = tokio::time::timeout(bound, std::future::poll_fn(|cx| send.poll_reset(cx)))
            .await
            .expect("reset within the failure bound");
        assert_eq!(reset.expect("a reset"), h2::Reason::CANCEL);
        let after = started.elapsed();
        assert!(
            after >= std::time::Duration::from_secs(1),
            "reset after {after:?}"
        );
    });
    // The upstream's connection ended with it.
    let head = seen.join().expect("upstream");
    assert!(head.contains("upgrade: websocket"), "{head}");
    h.assert_no_errors();
}
