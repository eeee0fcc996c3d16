//! Automatic certificates end to end, against Let's Encrypt's test server
//! pebble: issuance over HTTP-01 and over TLS-ALPN-01, validated by pebble
//! against hayate's own listeners; reuse after a restart; renewal of a
//! short-lived certificate; an ACME server that is down.

// Tests block on purpose (they are clients, not the server).
#![allow(clippy::disallowed_methods)]

use std::path::Path;

use hayate_testkit::eventually;
use hayate_testkit::pebble::{free_port, Pebble};
use hayate_testkit::ports::ClosedPort;
use hayate_testkit::tls::{served_certificate, TlsClient};
use hayate_testkit::{site, Hayate};

const BIN: &str = env!("CARGO_BIN_EXE_hayate");
const NAME: &str = "site.test";

/// hayate with plain HTTP on `http_port` and HTTPS on `tls_port`, its
/// certificate for NAME from `directory`.
fn hayate(
    root: &Path,
    state: &Path,
    (http_port, tls_port): (u16, u16),
    directory: &str,
    api_ca: &Path,
    challenge: &str,
) -> Hayate {
    let https = format!("https://127.0.0.1:{tls_port}");
    let http = format!("127.0.0.1:{http_port}");
    let admin = format!("unix:{}", state.join("admin.sock").display());
    Hayate::start(
        BIN,
        &[
            root.to_str().expect("path"),
            "--listen",
            &https,
            "--listen",
            &http,
            "--tls",
            "acme",
            "--tls-names",
            NAME,
            "--acme-directory",
            directory,
            "--acme-ca-root",
            api_ca.to_str().expect("path"),
            "--acme-challenge",
            challenge,
            "--state-dir",
            state.to_str().expect("path"),
            "--admin",
            &admin,
        ],
    )
}

fn metrics(state: &Path) -> String {
    hayate_testkit::unix_get(&state.join("admin.sock"), "/metrics")
}

/// Obtains a certificate with `challenge`, then restarts on the same state
/// and serves it at once, ordering nothing.
fn issues_and_reuses(challenge: &str) {
    let root = site();
    let state = tempfile::tempdir().expect("state");
    // Held (bound, never listening) while pebble starts: a port merely
    // found free could be taken by a parallel test before hayate binds it.
    let held = (ClosedPort::new(), ClosedPort::new());
    let ports = (held.0.port(), held.1.port());
    let pebble = Pebble::start(ports.0, ports.1, 90 * 24 * 3600);
    drop(held);
    let mut h = hayate(
        root.path(),
        state.path(),
        ports,
        &pebble.directory,
        &pebble.api_ca,
        challenge,
    );
    let client = TlsClient::trusting(&pebble.issuer_root()).without_resumption();
    let tls_addr = format!("127.0.0.1:{}", ports.1).parse().expect("addr");
    let issued = eventually("a certificate from pebble", || {
        client
            .try_connect(tls_addr, NAME)
            .map(|c| served_certificate(&c))
            .map_err(|e| format!("{e}; hayate's log:\n{}", h.stderr()))
    });
    let mut c = client.connect(tls_addr, NAME);
    let r = c.get("/hello.txt", &[]);
    assert_eq!((r.status, r.text().as_str()), (200, "hello world\n"));
    assert!(metrics(state.path()).contains("hayate_acme_orders_total{result=\"issued\"} 1"));
    // The admin status document: the last order, and who issued what is served.
    let raw = hayate_testkit::unix_get(&state.path().join("admin.sock"), "/status.json");
    let (_, body) = raw.split_once("\r\n\r\n").expect("a response");
    let status: serde_json::Value = serde_json::from_str(body).expect("JSON");
    assert_eq!(status["tls"]["acme"]["last_result"], "issued", "{status}");
    let served = status["tls"]["certificates"]
        .as_array()
        .expect("certificates")
        .iter()
        .find(|c| c["name"] == NAME)
        .unwrap_or_else(|| panic!("{NAME} in {status}"));
    let issuer = served["issuer"].as_str().expect("issuer");
    assert!(issuer.contains("Pebble"), "{issuer}");
    assert!(
        served["expires_in_days"].as_f64().expect("days") > 80.0,
        "{served}"
    );
    // The key is the owner's only.
    use std::os::unix::fs::PermissionsExt;
    let keys: Vec<_> = walk(state.path())
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "key" || e == "json"))
        .collect();
    assert!(keys.len() >= 2, "{keys:?}");
    for k in keys {
        let mode = std::fs::metadata(&k).expect("stat").permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{}", k.display());
    }
    assert!(h.stop().success());

    let h = hayate(
        root.path(),
        state.path(),
        ports,
        &pebble.directory,
        &pebble.api_ca,
        challenge,
    );
    let c = client.connect(tls_addr, NAME);
    assert_eq!(
        served_certificate(&c),
        issued,
        "the stored certificate, at once"
    );
    assert!(metrics(state.path()).contains("hayate_acme_orders_total{result=\"issued\"} 0"));
    drop(h);
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).expect("read_dir").flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn a_certificate_is_obtained_over_http_01_and_reused_after_a_restart() {
    issues_and_reuses("http-01");
}

#[test]
fn a_certificate_is_obtained_over_tls_alpn_01_and_reused_after_a_restart() {
    issues_and_reuses("tls-alpn-01");
}

#[test]
fn a_certificate_is_renewed_early_when_the_ca_says_so() {
    let root = site();
    let state = tempfile::tempdir().expect("state");
    // Held (bound, never listening) while pebble starts: a port merely
    // found free could be taken by a parallel test before hayate binds it.
    let held = (ClosedPort::new(), ClosedPort::new());
    let ports = (held.0.port(), held.1.port());
    let pebble = Pebble::start(ports.0, ports.1, 90 * 24 * 3600);
    drop(held);
    let tls_addr = format!("127.0.0.1:{}", ports.1).parse().expect("addr");
    let client = TlsClient::trusting(&pebble.issuer_root()).without_resumption();
    let start = || {
        hayate(
            root.path(),
            state.path(),
            ports,
            &pebble.directory,
            &pebble.api_ca,
            "http-01",
        )
    };
    let mut h = start();
    let first = eventually("a certificate from pebble", || {
        client
            .try_connect(tls_addr, NAME)
            .map(|c| served_certificate(&c))
    });
    assert!(h.stop().success());
    // The CA's renewal information (RFC 9773) now says: renew.
    let stored = walk(state.path())
        .into_iter()
        .find(|p| p.extension().is_some_and(|e| e == "crt") && p.to_string_lossy().contains(NAME))
        .expect("the stored certificate");
    pebble.ask_renewal_now(&std::fs::read_to_string(stored).expect("read"));
    let h = start();
    // Served at once from the state directory, then renewed.
    let c = client
        .try_connect(tls_addr, NAME)
        .unwrap_or_else(|e| panic!("{e}: {}", h.stderr()));
    assert_eq!(served_certificate(&c), first);
    eventually("the certificate renewed", || {
        let now = served_certificate(&client.try_connect(tls_addr, NAME)?);
        match now != first {
            true => Ok(()),
            false => Err(h.stderr()),
        }
    });
    assert!(
        h.stderr()
            .contains("renewal information says to renew site.test now"),
        "{}",
        h.stderr()
    );
}

#[test]
fn a_short_lived_certificate_is_renewed_while_serving() {
    let root = site();
    let state = tempfile::tempdir().expect("state");
    let held = (ClosedPort::new(), ClosedPort::new());
    let ports = (held.0.port(), held.1.port());
    // Renewed at two thirds: every 4 s.
    let pebble = Pebble::start(ports.0, ports.1, 6);
    drop(held);
    let _h = hayate(
        root.path(),
        state.path(),
        ports,
        &pebble.directory,
        &pebble.api_ca,
        "http-01",
    );
    let client = TlsClient::trusting(&pebble.issuer_root()).without_resumption();
    let tls_addr = format!("127.0.0.1:{}", ports.1).parse().expect("addr");
    let first = eventually("a certificate from pebble", || {
        client
            .try_connect(tls_addr, NAME)
            .map(|c| served_certificate(&c))
    });
    eventually("a renewed certificate", || {
        let now = served_certificate(&client.try_connect(tls_addr, NAME)?);
        if now != first {
            Ok(())
        } else {
            Err("the first certificate is still served".to_string())
        }
    });
}

#[test]
fn an_acme_server_that_is_down_does_not_stop_serving() {
    let root = site();
    let state = tempfile::tempdir().expect("state");
    let ports = (free_port(), free_port());
    let api_ca = any_certificate(&state.path().join("ca.pem"));
    let closed = ClosedPort::new();
    let down = format!("https://{}/dir", closed.addr());
    let h = hayate(root.path(), state.path(), ports, &down, &api_ca, "http-01");
    // Plain HTTP is served (ACME's path excepted, everything redirects).
    let plain = format!("127.0.0.1:{}", ports.0).parse().expect("addr");
    let r = hayate_testkit::Client::connect(plain).get("/hello.txt", &[]);
    assert_eq!(r.status, 308);
    eventually("the failure logged and counted", || {
        let m = metrics(state.path());
        if m.contains("hayate_acme_orders_total{result=\"failed\"} 1") {
            Ok(())
        } else {
            Err(m)
        }
    });
    let log = h.stderr();
    assert!(log.contains("ACME: no certificate for site.test"), "{log}");
    assert!(log.contains("Connect"), "{log}");
    // HTTPS for the name fails its handshake, cleanly.
    let client = TlsClient::with_alpn(&api_ca, &[]);
    let tls_addr = format!("127.0.0.1:{}", ports.1).parse().expect("addr");
    assert!(client.try_connect(tls_addr, NAME).is_err());
    let r = hayate_testkit::Client::connect(plain).get("/hello.txt", &[]);
    assert_eq!(r.status, 308, "still serving");
}

/// A certificate file, to trust where nothing will be trusted anyway.
fn any_certificate(path: &Path) -> std::path::PathBuf {
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = rcgen::CertificateParams::new(vec!["x.test".to_string()])
        .expect("params")
        .self_signed(&key)
        .expect("cert");
    std::fs::write(path, cert.pem()).expect("write");
    path.to_path_buf()
}
