//! HTTPS end to end: hayate's TLS listeners with a real rustls client (and
//! curl where it is installed): certificates from files and from the local
//! CA, SNI, ALPN, resumption, a certificate replaced while serving, plain
//! HTTP and garbage on the TLS port, the redirect from plain HTTP, HSTS,
//! large files (no sendfile under TLS), and the proxy telling the app the
//! request came over HTTPS.

// Tests block on purpose (they are clients, not the server).
#![allow(clippy::disallowed_methods)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;

use hayate_testkit::tls::Pki;
use hayate_testkit::tls::{served_certificate, start_with_local_ca, TlsClient};
use hayate_testkit::{big_bytes, eventually, site, Echo, Hayate, Origin, OriginOptions, WAIT};

const BIN: &str = env!("CARGO_BIN_EXE_hayate");

/// Writes a file whole, by rename, as deployment tools do.
fn write_replacing(path: &Path, data: &[u8]) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, data).expect("write");
    std::fs::rename(&tmp, path).expect("rename");
}

fn https(args: &[&str]) -> Hayate {
    Hayate::start(BIN, args)
}

#[test]
fn the_local_ca_serves_https_that_clients_trust() {
    let root = site();
    let state = tempfile::tempdir().expect("state");
    let state_dir = state.path().display().to_string();
    let log = state.path().join("access.json");
    let mut h = https(&[
        root.path().to_str().expect("path"),
        "--listen",
        "https://127.0.0.1:0",
        "--tls",
        "internal",
        "--state-dir",
        &state_dir,
        "--access-log",
        log.to_str().expect("path"),
        "--access-log-format",
        "json",
    ]);
    let ca = state.path().join("local-ca/ca.crt");
    assert!(
        h.stderr().contains(&ca.display().to_string()),
        "the CA's path is printed: {}",
        h.stderr()
    );
    let client = TlsClient::trusting(&ca);
    for name in ["localhost", "127.0.0.1"] {
        let mut c = client.connect(h.addr, name);
        assert_eq!(
            c.tls().expect("tls").alpn_protocol(),
            Some(&b"http/1.1"[..])
        );
        let r = c.get("/hello.txt", &[]);
        assert_eq!((r.status, r.text().as_str()), (200, "hello world\n"));
        // Kept alive: a second request on the same session.
        assert_eq!(c.get("/index.html", &[]).status, 200);
    }
    // curl, where installed, trusts the printed CA too.
    let url = format!("https://localhost:{}/hello.txt", h.addr.port());
    if let Ok(out) = std::process::Command::new("curl")
        .args(["-sS", "--cacert", ca.to_str().expect("path"), &url])
        .output()
    {
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "hello world\n",
            "{out:?}"
        );
    }
    // The access log names the protocol version and cipher.
    assert!(h.stop().success());
    let lines = std::fs::read_to_string(&log).expect("access log");
    assert!(lines.lines().count() >= 4, "{lines}");
    for line in lines.lines() {
        assert!(
            line.contains("\"tls\":\"TLSv1.3\",\"cipher\":\"TLS13_"),
            "{line}"
        );
    }
}

#[test]
fn sni_chooses_among_certificates_exact_then_wildcard_then_the_first() {
    let root = site();
    let pki = Pki::new();
    let (a_cert, a_key, a_der) = pki.issue(&["a.test"], "a");
    let (b_cert, b_key, b_der) = pki.issue(&["*.b.test"], "b");
    let (x_cert, x_key, x_der) = pki.issue(&["x.b.test"], "x");
    let h = https(&[
        root.path().to_str().expect("path"),
        "--listen",
        "https://127.0.0.1:0",
        "--tls-cert",
        &a_cert,
        "--tls-key",
        &a_key,
        "--tls-cert",
        &b_cert,
        "--tls-key",
        &b_key,
        "--tls-cert",
        &x_cert,
        "--tls-key",
        &x_key,
    ]);
    let client = TlsClient::trusting(&pki.ca()).without_resumption();
    let served = |name: &str| served_certificate(&client.connect(h.addr, name));
    assert_eq!(served("a.test"), a_der);
    assert_eq!(served("x.b.test"), x_der);
    assert_eq!(served("y.b.test"), b_der);
    // A name no certificate has gets the first one, which the client
    // refuses by itself.
    let err = client
        .try_connect(h.addr, "other.test")
        .err()
        .expect("refused");
    assert!(
        err.contains("NotValidForName") || err.contains("not valid"),
        "{err}"
    );
    let mut c = client.connect(h.addr, "y.b.test");
    assert_eq!(c.get("/hello.txt", &[]).status, 200);
}

/// What `hayate status` says of the hayate on `control`.
fn status_of(control: &str) -> String {
    let (ok, status) = hayate_testkit::run_to_end(
        std::process::Command::new(BIN)
            .arg("status")
            .env("HAYATE_CONTROL", control),
    );
    assert!(ok, "{status}");
    status
}

/// `hayate status` lists the certificates served and how each was
/// obtained (files here, the local CA below), as the status page does.
#[test]
fn hayate_status_lists_the_certificates_and_how_each_was_obtained() {
    let root = site();
    let pki = Pki::new();
    let (cert, key, _) = pki.issue(&["a.test"], "a");
    let dir = tempfile::tempdir().expect("dir");
    let control = dir.path().join("control.sock");
    let control = control.to_str().expect("path");
    let files = https(&[
        root.path().to_str().expect("path"),
        "--listen",
        "https://127.0.0.1:0",
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
        "--control",
        control,
    ]);
    let status = status_of(control);
    let line = status
        .lines()
        .find(|l| l.trim_start().starts_with("a.test "))
        .unwrap_or_else(|| panic!("no line for a.test in:\n{status}"));
    assert!(
        line.contains(cert.as_str()) && line.contains("expires in"),
        "{line}"
    );
    drop(files);
    let (_h, _state, _root) = start_with_local_ca(BIN, &["--control", control]);
    let status = status_of(control);
    assert!(
        status.contains("certificates:") && status.contains("local CA"),
        "{status}"
    );
}

#[test]
fn sessions_resume_and_handshakes_are_counted() {
    let root = site();
    let pki = Pki::new();
    let (cert, key, _) = pki.issue(&["localhost"], "site");
    let admin = tempfile::tempdir().expect("admin dir");
    let admin_sock = admin.path().join("admin.sock");
    let admin_arg = format!("unix:{}", admin_sock.display());
    let h = https(&[
        root.path().to_str().expect("path"),
        "--listen",
        "https://127.0.0.1:0",
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
        "--admin",
        &admin_arg,
    ]);
    let client = TlsClient::trusting(&pki.ca());
    let mut first = client.connect(h.addr, "localhost");
    assert_eq!(first.get("/hello.txt", &[]).status, 200);
    assert_eq!(
        first.tls().expect("tls").handshake_kind(),
        Some(rustls::HandshakeKind::Full)
    );
    drop(first);
    let mut second = client.connect(h.addr, "localhost");
    assert_eq!(second.get("/hello.txt", &[]).status, 200);
    assert_eq!(
        second.tls().expect("tls").handshake_kind(),
        Some(rustls::HandshakeKind::Resumed)
    );
    let metrics = hayate_testkit::unix_get(&admin_sock, "/metrics");
    assert!(
        metrics.contains("hayate_tls_handshakes_total{result=\"full\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("hayate_tls_handshakes_total{result=\"resumed\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("hayate_tls_certificate_expiry_seconds{name=\"localhost\""),
        "{metrics}"
    );
}

#[test]
fn a_replaced_certificate_file_is_served_without_a_restart_and_a_bad_one_is_not() {
    let root = site();
    let pki = Pki::new();
    let (cert, key, old_der) = pki.issue(&["localhost"], "site");
    let h = https(&[
        root.path().to_str().expect("path"),
        "--listen",
        "https://127.0.0.1:0",
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
    ]);
    let client = TlsClient::trusting(&pki.ca());
    let mut kept = client.connect(h.addr, "localhost");
    assert_eq!(served_certificate(&kept), old_der);

    // A client requesting throughout sees no failure.
    let addr = h.addr;
    let busy_client = client.clone();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop_busy = stop.clone();
    let busy = std::thread::spawn(move || {
        let mut served = 0;
        while !stop_busy.load(std::sync::atomic::Ordering::Relaxed) {
            let mut c = match busy_client.try_connect(addr, "localhost") {
                Ok(c) => c,
                Err(e) => return Err(format!("handshake {served}: {e}")),
            };
            c.send(b"GET /hello.txt HTTP/1.1\r\nHost: x\r\n\r\n");
            if c.try_read_response(false).is_none() {
                return Err(format!(
                    "no response {served} {:?}",
                    c.tls().unwrap().handshake_kind()
                ));
            }
            served += 1;
        }
        Ok::<_, String>(served)
    });

    let (_, _, new_der) = pki.issue(&["localhost"], "site");
    assert_ne!(new_der, old_der);
    let fresh = client.without_resumption();
    eventually("the new certificate served", || {
        match served_certificate(&fresh.connect(h.addr, "localhost")) == new_der {
            true => Ok(()),
            false => Err(h.stderr()),
        }
    });
    // The connection made before the change still works.
    assert_eq!(kept.get("/hello.txt", &[]).status, 200);

    // A broken file keeps the certificate served until now.
    write_replacing(Path::new(&cert), b"-----BEGIN CERTIFICATE-----\nbroken\n");
    eventually("the broken file's error logged", || {
        let log = h.stderr();
        match log.contains("keeping the certificate served until now") {
            true => Ok(()),
            false => Err(log),
        }
    });
    assert_eq!(
        served_certificate(&fresh.connect(h.addr, "localhost")),
        new_der
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let r = busy.join().expect("busy client");
    assert!(r.is_ok(), "{r:?} {}", h.stderr());
}

/// hayate with the local CA on an https listener, a handshake timeout of
/// `timeout`, and more `args`; its state directory and site.
fn with_local_ca(timeout: &str, args: &[&str]) -> (Hayate, tempfile::TempDir, tempfile::TempDir) {
    let mut all = vec!["--tls-handshake-timeout", timeout];
    all.extend_from_slice(args);
    start_with_local_ca(BIN, &all)
}

fn raw(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(WAIT)).expect("timeout");
    s
}

fn read_to_close(s: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out
}

#[test]
fn plain_http_garbage_and_stalled_handshakes_on_the_tls_port_end_cleanly() {
    let (h, state, _root) = with_local_ca("300ms", &[]);
    // Plain HTTP: a 400 that says why.
    let mut s = raw(h.addr);
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .expect("send");
    let answer = String::from_utf8_lossy(&read_to_close(&mut s)).into_owned();
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    assert!(
        answer.contains("plain HTTP sent to an HTTPS port"),
        "{answer}"
    );
    // Neither TLS nor HTTP: closed.
    let mut s = raw(h.addr);
    s.write_all(&[0u8; 64]).expect("send");
    assert!(read_to_close(&mut s).is_empty());
    // A truncated ClientHello, and a client that sends nothing: closed at
    // the handshake timeout.
    let mut truncated = raw(h.addr);
    truncated
        .write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01])
        .expect("send");
    let mut silent: Vec<TcpStream> = (0..50).map(|_| raw(h.addr)).collect();
    // Meanwhile, a real client is served.
    let client = TlsClient::trusting(&state.path().join("local-ca/ca.crt"));
    assert_eq!(
        client
            .connect(h.addr, "localhost")
            .get("/hello.txt", &[])
            .status,
        200
    );
    assert!(read_to_close(&mut truncated).is_empty());
    for s in &mut silent {
        assert!(read_to_close(s).is_empty());
    }
    // An oversized record: an alert, then close.
    let mut s = raw(h.addr);
    let mut record = vec![0x16, 0x03, 0x01, 0xff, 0xff];
    record.extend_from_slice(&[0u8; 1024]);
    let _ = s.write_all(&record);
    let reply = read_to_close(&mut s);
    assert!(
        reply.is_empty() || reply[0] == 0x15,
        "an alert or nothing: {reply:?}"
    );
    // A client offering only a protocol hayate does not speak.
    let h3_only = TlsClient::with_alpn(&state.path().join("local-ca/ca.crt"), &["h3"]);
    let err = h3_only
        .try_connect(h.addr, "localhost")
        .err()
        .expect("refused");
    assert!(err.contains("NoApplicationProtocol"), "{err}");
    // Still serving.
    assert_eq!(
        client
            .connect(h.addr, "localhost")
            .get("/hello.txt", &[])
            .status,
        200
    );
}

/// A TLS 1.2 client that asks to renegotiate (openssl s_client's `R`) gets
/// the no_renegotiation alert: hayate never renegotiates (rustls has no
/// renegotiation), the connection is not torn down by the attempt, and
/// other clients are served meanwhile.
/// The suite a rustls client offering `provider`'s suites, in their order,
/// over `version` only, negotiates with hayate.
fn negotiated_suite(
    addr: SocketAddr,
    ca: &Path,
    provider: rustls::crypto::CryptoProvider,
    version: &'static rustls::SupportedProtocolVersion,
) -> rustls::CipherSuite {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_file_iter(ca).expect("CA file") {
        roots.add(cert.expect("CA certificate")).expect("trust");
    }
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(provider))
        .with_protocol_versions(&[version])
        .expect("version")
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
    let mut conn =
        rustls::ClientConnection::new(std::sync::Arc::new(config), name).expect("client");
    let mut sock = raw(addr);
    while conn.is_handshaking() {
        conn.complete_io(&mut sock).expect("handshake");
    }
    conn.negotiated_cipher_suite().expect("a suite").suite()
}

/// hayate chooses the cipher suite by its own order, strongest first, not
/// by the client's (issue 35: a TLS scanner flags TLS 1.2 without a server
/// preference order). A client that lists ChaCha20 first and AES-256-GCM
/// last still gets AES-256-GCM, over TLS 1.2 and, as rustls applies the
/// order to both, TLS 1.3.
#[test]
fn cipher_suites_follow_the_servers_order_not_the_clients() {
    use rustls::CipherSuite;
    let (h, state, _root) = with_local_ca("5s", &[]);
    let ca = hayate_testkit::tls::local_ca(state.path());
    let reversed = || {
        let mut p = rustls::crypto::aws_lc_rs::default_provider();
        p.cipher_suites.reverse();
        let first = p.cipher_suites[0].suite();
        assert!(format!("{first:?}").contains("CHACHA20"), "{first:?}");
        p
    };
    let tls12 = negotiated_suite(h.addr, &ca, reversed(), &rustls::version::TLS12);
    assert_eq!(tls12, CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384);
    let tls13 = negotiated_suite(h.addr, &ca, reversed(), &rustls::version::TLS13);
    assert_eq!(tls13, CipherSuite::TLS13_AES_256_GCM_SHA384);
    h.assert_no_errors();
}

#[test]
fn a_renegotiation_attempt_gets_the_no_renegotiation_alert() {
    use std::io::BufRead;
    use std::process::{Command, Stdio};
    let (h, state, _root) = with_local_ca("5s", &[]);
    let mut s_client = Command::new("openssl")
        .args([
            "s_client",
            "-tls1_2",
            "-msg",
            "-servername",
            "localhost",
            "-connect",
        ])
        .arg(h.addr.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("openssl s_client (.ci/run installs openssl)");
    let lines = std::sync::mpsc::channel();
    let out = s_client.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            if lines.0.send(line).is_err() {
                break;
            }
        }
    });
    let wait_for = |what: &str| {
        let deadline = std::time::Instant::now() + WAIT;
        let mut seen = Vec::new();
        while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
            match lines.1.recv_timeout(left) {
                Ok(line) if line.contains(what) => return,
                Ok(line) => seen.push(line),
                Err(_) => break,
            }
        }
        panic!("s_client never printed {what:?}:\n{}", seen.join("\n"));
    };
    // The handshake is done once s_client has printed its session.
    wait_for("Verify return code");
    let mut stdin = s_client.stdin.take().expect("stdin");
    stdin.write_all(b"R\n").expect("ask to renegotiate");
    wait_for("no_renegotiation");
    // Others are served while that connection is still open.
    let ca = hayate_testkit::tls::local_ca(state.path());
    let r = TlsClient::trusting(&ca)
        .connect(h.addr, "localhost")
        .get("/", &[]);
    assert_eq!(r.status, 200);
    let _ = s_client.kill();
    let _ = s_client.wait();
    h.assert_no_errors();
}

#[test]
fn plain_http_is_redirected_to_https_but_acme_challenges_and_hsts_are_right() {
    let (h, state, _root) = with_local_ca("10s", &["--listen", "127.0.0.1:0", "--hsts", "365d"]);
    let (scheme, plain) = h.next_address();
    assert_eq!(scheme, "http");
    let mut c = hayate_testkit::Client::connect(plain);
    let r = c.request("POST", "/docs/guide.html?x=1", &[("Content-Length", "0")]);
    assert_eq!(r.status, 308);
    assert_eq!(
        r.header("location"),
        Some(format!("https://test:{}/docs/guide.html?x=1", h.addr.port()).as_str())
    );
    assert!(
        r.header("strict-transport-security").is_none(),
        "never over HTTP"
    );
    // ACME's HTTP-01 path stays plain.
    let r = c.get("/.well-known/acme-challenge/token", &[]);
    assert_eq!(r.status, 404);
    // A Host that is not a name is refused, not echoed into Location.
    let r = c.get("/", &[]);
    assert_eq!(r.status, 308);
    let mut bad = hayate_testkit::Client::connect(plain);
    bad.send(b"GET / HTTP/1.1\r\nHost: a\"b\r\n\r\n");
    assert_eq!(bad.read_response(false).status, 400);

    let client = TlsClient::trusting(&state.path().join("local-ca/ca.crt"));
    let r = client.connect(h.addr, "localhost").get("/hello.txt", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("strict-transport-security"),
        Some("max-age=31536000")
    );
}

#[test]
fn large_files_and_ranges_go_out_whole_over_tls() {
    let root = site();
    // Past the file cache (sendfile over plain TCP), and past 125 writes
    // of 64 KiB in one task turn (tokio's cooperative budget is 128: a TLS
    // write path that spent it stalled here).
    let big = big_bytes(12 << 20);
    std::fs::write(root.path().join("large.bin"), &big).expect("write");
    let state = tempfile::tempdir().expect("state");
    let state_dir = state.path().display().to_string();
    let h = https(&[
        root.path().to_str().expect("path"),
        "--listen",
        "https://127.0.0.1:0",
        "--tls",
        "internal",
        "--state-dir",
        &state_dir,
    ]);
    let client = TlsClient::trusting(&state.path().join("local-ca/ca.crt"));
    let mut c = client.connect(h.addr, "localhost");
    let r = c.get("/large.bin", &[]);
    assert_eq!(r.status, 200);
    assert!(
        r.body == big,
        "the body arrived whole ({} bytes)",
        r.body.len()
    );
    let r = c.get(
        "/large.bin",
        &[("Range", "bytes=1000000-1999999,3000000-3000009")],
    );
    assert_eq!(r.status, 206);
    let text = String::from_utf8_lossy(&r.body);
    assert!(text.contains("Content-Range: bytes 3000000-3000009/12582912"));
    let r = c.get("/large.bin", &[("Range", "bytes=4000000-")]);
    assert_eq!(r.status, 206);
    assert!(r.body == big[4_000_000..]);
    // A client that reads as fast as hayate writes (curl, in C) never
    // fills the socket: hayate's writes must still let its event loop run.
    let fetched = state.path().join("large.bin");
    let out = std::process::Command::new("curl")
        .args(["-sS", "--max-time", "10", "--http1.1", "-o"])
        .arg(&fetched)
        .arg("--cacert")
        .arg(state.path().join("local-ca/ca.crt"))
        .arg(format!("https://localhost:{}/large.bin", h.addr.port()))
        .output()
        .expect("curl (installed by .ci/run)");
    let got = std::fs::read(&fetched).unwrap_or_default();
    assert!(got == big, "curl got {} bytes: {out:?}", got.len());
}

#[test]
fn the_app_is_told_the_request_came_over_https() {
    let origin = Origin::start(OriginOptions::default());
    let url = origin.url();
    let (h, state, _root) = with_local_ca("10s", &["--proxy", &url]);
    let client = TlsClient::trusting(&state.path().join("local-ca/ca.crt"));
    let mut c = client.connect(h.addr, "localhost");
    let r = c.get("/echo", &[("X-Forwarded-Proto", "http")]);
    assert_eq!(r.status, 200);
    let echo = Echo::parse(&r.text());
    assert_eq!(echo.header("x-forwarded-proto"), Some("https"));
    let forwarded = echo.header("forwarded").expect("Forwarded");
    assert!(forwarded.contains("proto=https"), "{forwarded}");
}

#[test]
fn bad_tls_settings_stop_the_start_with_the_reason() {
    let root = site();
    let pki = Pki::new();
    let (cert, _key, _) = pki.issue(&["localhost"], "one");
    let (_, other_key, _) = pki.issue(&["localhost"], "two");
    let root_arg = root.path().to_str().expect("path");
    let fails = |args: &[&str]| {
        let out = std::process::Command::new(BIN)
            .arg(root_arg)
            .args(args)
            .output()
            .expect("run hayate");
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let e = fails(&["--listen", "https://127.0.0.1:0"]);
    assert!(e.contains("needs certificates"), "{e}");
    let e = fails(&["--listen", "https://127.0.0.1:0", "--tls-cert", &cert]);
    assert!(e.contains("1 tls_cert and 0 tls_key"), "{e}");
    let e = fails(&[
        "--listen",
        "https://127.0.0.1:0",
        "--tls-cert",
        &cert,
        "--tls-key",
        &other_key,
    ]);
    assert!(e.contains("does not belong to the certificate"), "{e}");
    // A key others can read is warned about.
    let (cert, key, _) = pki.issue(&["localhost"], "loose");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let h = https(&[
        root_arg,
        "--listen",
        "https://127.0.0.1:0",
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
    ]);
    assert!(
        h.stderr()
            .contains("readable by group or others (mode 644)"),
        "{}",
        h.stderr()
    );
    assert!(!e.contains("PRIVATE KEY"), "no key material in errors: {e}");
    let e = fails(&["--listen", "https://unix:/tmp/x.sock", "--tls", "internal"]);
    assert!(e.contains("TLS on a Unix socket"), "{e}");
}

/// An HTTPS upstream: a second hayate serving `root` with a certificate
/// for localhost and 127.0.0.1 from `pki`, its metrics on `admin`.
fn https_upstream(pki: &Pki, root: &Path, admin: &Path) -> Hayate {
    let (cert, key, _) = pki.issue(&["localhost", "127.0.0.1"], "upstream");
    let admin_arg = format!("unix:{}", admin.display());
    https(&[
        root.to_str().expect("path"),
        "--listen",
        "https://127.0.0.1:0",
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
        "--admin",
        &admin_arg,
    ])
}

#[test]
fn https_upstreams_are_verified_and_pooled() {
    let root = site();
    let pki = Pki::new();
    let dir = tempfile::tempdir().expect("dir");
    let admin = dir.path().join("admin.sock");
    let upstream = https_upstream(&pki, root.path(), &admin);
    let ca = pki.ca().display().to_string();
    for member in [
        format!("https://127.0.0.1:{}", upstream.addr.port()),
        format!("https://localhost:{}", upstream.addr.port()),
    ] {
        let front = Hayate::start(
            BIN,
            &["--proxy", &member, "--proxy-tls-ca", &ca, "--workers", "1"],
        );
        let mut c = front.client();
        for _ in 0..5 {
            let r = c.get("/hello.txt", &[]);
            assert_eq!((r.status, r.text().as_str()), (200, "hello world\n"));
        }
    }
    // One connection per front, kept alive for the five requests; the
    // second front's handshake is a full one too (its own session cache).
    let metrics = hayate_testkit::unix_get(&admin, "/metrics");
    assert!(
        metrics.contains("hayate_tls_handshakes_total{result=\"full\"} 2"),
        "{metrics}"
    );

    // Without the CA, the member is not trusted: 502, and the log says why.
    let front = Hayate::start(
        BIN,
        &[
            "--proxy",
            &format!("https://localhost:{}", upstream.addr.port()),
        ],
    );
    let r = front.client().get("/hello.txt", &[]);
    assert_eq!(r.status, 502);
    assert!(front.stderr().contains("certificate"), "{}", front.stderr());

    // A name the certificate does not have is refused too.
    let (other_cert, other_key, _) = pki.issue(&["elsewhere.test"], "elsewhere");
    let elsewhere = https(&[
        root.path().to_str().expect("path"),
        "--listen",
        "https://127.0.0.1:0",
        "--tls-cert",
        &other_cert,
        "--tls-key",
        &other_key,
    ]);
    let member = format!("https://127.0.0.1:{}", elsewhere.addr.port());
    let front = Hayate::start(BIN, &["--proxy", &member, "--proxy-tls-ca", &ca]);
    assert_eq!(front.client().get("/hello.txt", &[]).status, 502);
    // ...unless verification is turned off, which is logged.
    let front = Hayate::start(BIN, &["--proxy", &member, "--proxy-tls-verify=false"]);
    assert_eq!(front.client().get("/hello.txt", &[]).status, 200);
    assert!(
        front.stderr().contains("not verified"),
        "{}",
        front.stderr()
    );
}

#[test]
fn a_websocket_upgrade_over_tls_becomes_a_tunnel() {
    let (port, _seen) = hayate_testkit::upgrade_echo_server();
    let (h, state, _root) = with_local_ca("10s", &["--proxy", &format!("http://127.0.0.1:{port}")]);
    let client = TlsClient::trusting(&state.path().join("local-ca/ca.crt"));
    let mut c = client.connect(h.addr, "localhost");
    c.send(b"GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n");
    let r = c.read_response(true);
    assert_eq!(r.status, 101);
    for msg in [&b"frame-1"[..], &[7u8; 40_000][..]] {
        c.send(msg);
        assert_eq!(c.read_bytes(msg.len()), msg);
    }
    h.assert_no_errors();
}

#[test]
fn sites_in_the_config_file_bring_their_own_certificates() {
    let root = site();
    let pki = Pki::new();
    let (a_cert, a_key, a_der) = pki.issue(&["a.test"], "a");
    let state = tempfile::tempdir().expect("state");
    let file = state.path().join("hayate.toml");
    std::fs::write(
        &file,
        format!(
            "listen = [\"https://127.0.0.1:0\"]\nstate_dir = \"{state}\"\nroot = \"{root}\"\n\
             [[site]]\nhosts = [\"a.test\"]\ntls_cert = \"{a_cert}\"\ntls_key = \"{a_key}\"\n\
             [[site]]\nhosts = [\"b.test\"]\ntls = \"internal\"\n",
            state = state.path().display(),
            root = root.path().display(),
        ),
    )
    .expect("write");
    let h = Hayate::start(BIN, &["--config", file.to_str().expect("path")]);
    let a = TlsClient::trusting(&pki.ca()).without_resumption();
    assert_eq!(served_certificate(&a.connect(h.addr, "a.test")), a_der);
    let b = TlsClient::trusting(&state.path().join("local-ca/ca.crt"));
    let mut c = b.connect(h.addr, "b.test");
    assert_eq!(c.get("/hello.txt", &[]).status, 200);
    // The local CA covers b.test (and localhost), not a.test.
    assert!(b.try_connect(h.addr, "a.test").is_err());

    // A site's certificate without its key is refused at load, with where.
    std::fs::write(
        &file,
        format!("listen = [\"https://127.0.0.1:0\"]\n[[site]]\nhosts = [\"a.test\"]\ntls_cert = \"{a_cert}\"\n"),
    )
    .expect("write");
    let out = std::process::Command::new(BIN)
        .args(["check", file.to_str().expect("path")])
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("hayate.toml:2:") && err.contains("1 tls_cert and 0 tls_key"),
        "{err}"
    );
}

#[test]
fn a_reload_takes_new_certificate_files_and_refuses_a_broken_one() {
    let root = site();
    let pki = Pki::new();
    let (a_cert, a_key, a_der) = pki.issue(&["a.test"], "a");
    let (b_cert, b_key, b_der) = pki.issue(&["a.test"], "b");
    let state = tempfile::tempdir().expect("state");
    let (file, control) = (
        state.path().join("hayate.toml"),
        state.path().join("c.sock"),
    );
    let config = |cert: &str, key: &str| {
        format!(
            "listen = [\"https://127.0.0.1:0\"]\ncontrol = \"{control}\"\nroot = \"{root}\"\n\
             tls_cert = \"{cert}\"\ntls_key = \"{key}\"\n",
            control = control.display(),
            root = root.path().display(),
        )
    };
    std::fs::write(&file, config(&a_cert, &a_key)).expect("write");
    let h = Hayate::start(BIN, &["--config", file.to_str().expect("path")]);
    let client = TlsClient::trusting(&pki.ca()).without_resumption();
    let mut kept = client.connect(h.addr, "a.test");
    assert_eq!(served_certificate(&kept), a_der);
    let reload = || {
        hayate_testkit::run_to_end(
            std::process::Command::new(BIN)
                .args(["reload", "--control"])
                .arg(&control),
        )
    };

    std::fs::write(&file, config(&b_cert, &b_key)).expect("write");
    let (ok, said) = reload();
    assert!(ok && said.contains("certificates loaded again"), "{said}");
    assert_eq!(served_certificate(&client.connect(h.addr, "a.test")), b_der);
    assert_eq!(
        kept.get("/hello.txt", &[]).status,
        200,
        "open connections stay"
    );

    // A key that is not the certificate's: refused, the last ones stay.
    std::fs::write(&file, config(&a_cert, &b_key)).expect("write");
    let (ok, said) = reload();
    assert!(!ok && said.contains("HTTPS:"), "{said}");
    assert_eq!(served_certificate(&client.connect(h.addr, "a.test")), b_der);
}
