//! Shared ACME end to end: hayates sharing one real redis-server order
//! their certificates from one real pebble. One box orders a name and every
//! box serves the certificate, a box started later too; a challenge of one
//! box's order is answered by another (pebble validates only at box B's
//! ports); a renewal by one box reaches the others without a restart; with
//! Redis gone each box serves what it has, after a restart too.

// Tests block on purpose (they are clients, not the server).
#![allow(clippy::disallowed_methods)]

use std::net::SocketAddr;
use std::path::Path;

use hayate_testkit::eventually;
use hayate_testkit::pebble::{free_port, Pebble};
use hayate_testkit::ports::ClosedPort;
use hayate_testkit::redis::Redis;
use hayate_testkit::tls::{served_certificate, TlsClient};
use hayate_testkit::{site, Hayate};

const BIN: &str = env!("CARGO_BIN_EXE_hayate");
const NAME: &str = "site.test";
const KEY: &str = "5f1e9c0a7b3d2e8f4a6c1b9d0e7f3a2c8b5d4e1f6a9c0b7d2e3f8a1c4b6d9e0f";

/// What the boxes share: one Redis, one pebble that validates at box B's
/// ports only, one site root; and a client trusting pebble's certificates.
struct Fleet {
    root: tempfile::TempDir,
    redis: Redis,
    pebble: Pebble,
    /// Box A's plain-HTTP and HTTPS ports; pebble never validates there.
    a_ports: (u16, u16),
    /// Box B's: where pebble validates.
    b_ports: (u16, u16),
    /// B's ports, held from the moment pebble is told them until B
    /// starts (bound, never listening: pebble finds nothing there, as
    /// before B): a port merely found free could be taken by a parallel
    /// test while pebble and Redis start (CI: "Address already in use" at
    /// B's start).
    b_held: std::cell::RefCell<Option<(ClosedPort, ClosedPort)>>,
    client: TlsClient,
}

impl Fleet {
    /// Pebble issuing certificates valid for `validity_secs`.
    fn start(validity_secs: u64) -> Fleet {
        let (held_http, held_tls) = (ClosedPort::new(), ClosedPort::new());
        let b_ports = (held_http.port(), held_tls.port());
        let pebble = Pebble::start(b_ports.0, b_ports.1, validity_secs);
        let client = TlsClient::trusting(&pebble.issuer_root()).without_resumption();
        Fleet {
            root: site(),
            redis: Redis::start(),
            pebble,
            a_ports: (free_port(), free_port()),
            b_ports,
            b_held: std::cell::RefCell::new(Some((held_http, held_tls))),
            client,
        }
    }

    /// One box: plain HTTP and HTTPS on `ports`, a certificate for `name`,
    /// its state (and admin socket) in `state`.
    fn hayate(
        &self,
        state: &Path,
        (http_port, tls_port): (u16, u16),
        name: &str,
        challenge: &str,
    ) -> Hayate {
        if (http_port, tls_port) == self.b_ports {
            // Let go of B's ports just as B takes them.
            self.b_held.borrow_mut().take();
        }
        let https = format!("https://127.0.0.1:{tls_port}");
        let http = format!("127.0.0.1:{http_port}");
        let admin = format!("unix:{}", state.join("admin.sock").display());
        let shared = self.redis.url();
        Hayate::start_in(
            BIN,
            &[
                self.root.path().to_str().expect("path"),
                "--listen",
                &https,
                "--listen",
                &http,
                "--tls",
                "acme",
                "--tls-names",
                name,
                "--acme-directory",
                &self.pebble.directory,
                "--acme-ca-root",
                self.pebble.api_ca.to_str().expect("path"),
                "--acme-challenge",
                challenge,
                "--state-dir",
                state.to_str().expect("path"),
                "--admin",
                &admin,
                "--shared",
                &shared,
            ],
            &[("HAYATE_SHARED_KEY", KEY)],
            None,
        )
    }

    /// The certificate `h` serves for `name` on `port`, once it has one.
    fn served(&self, h: &Hayate, port: u16, name: &str) -> Vec<u8> {
        served_by(&self.client, h, port, name)
    }
}

/// The certificate `h` serves for `name` on `port`, once `client` trusts
/// one.
fn served_by(client: &TlsClient, h: &Hayate, port: u16, name: &str) -> Vec<u8> {
    eventually(&format!("a certificate for {name} on port {port}"), || {
        client
            .try_connect(tls_addr(port), name)
            .map(|c| served_certificate(&c))
            .map_err(|e| format!("{e}; its log:\n{}", h.stderr()))
    })
}

fn tls_addr(port: u16) -> SocketAddr {
    format!("127.0.0.1:{port}").parse().expect("addr")
}

/// Stores a self-signed certificate for NAME in Redis as a box would (it
/// outlives pebble's, so it is the fresher); it, and a client trusting it
/// (its PEM written in `dir`).
fn store_a_certificate(fleet: &Fleet, dir: &Path) -> (Vec<u8>, TlsClient) {
    use hayate_tls::acme_store::{AcmeStore, StoredCertificate};
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = rcgen::CertificateParams::new(vec![NAME.to_string()])
        .expect("params")
        .self_signed(&key)
        .expect("cert");
    let pem = dir.join("newer.pem");
    std::fs::write(&pem, cert.pem()).expect("write");
    let directory = hayate_tls::acme::directory_id(&fleet.pebble.directory);
    let store = hayate_shared::RedisAcmeStore::new(
        &fleet.redis.url(),
        std::time::Duration::from_secs(1),
        &directory,
        KEY,
    )
    .expect("store");
    let stored = StoredCertificate {
        chain_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    };
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(store.save_certificate(NAME, &stored))
        .expect("stored");
    let client = TlsClient::trusting(&pem).without_resumption();
    (cert.der().to_vec(), client)
}

/// How many certificates `state`'s box ordered.
fn issued(state: &Path) -> usize {
    let m = hayate_testkit::unix_get(&state.join("admin.sock"), "/metrics");
    let line = m
        .lines()
        .find(|l| l.starts_with("hayate_acme_orders_total{result=\"issued\"}"))
        .unwrap_or_else(|| panic!("no order count in {m}"));
    line.rsplit(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .expect("a count")
}

#[test]
fn one_box_orders_a_name_every_box_serves_it_and_redis_down_keeps_them_serving() {
    let mut fleet = Fleet::start(90 * 24 * 3600);
    let (a_ports, b_ports) = (fleet.a_ports, fleet.b_ports);
    let (state_a, state_b) = (
        tempfile::tempdir().expect("a"),
        tempfile::tempdir().expect("b"),
    );
    let a = fleet.hayate(state_a.path(), a_ports, NAME, "http-01");
    let b = fleet.hayate(state_b.path(), b_ports, NAME, "http-01");
    let client = fleet.client.clone();
    let at_a = fleet.served(&a, a_ports.1, NAME);
    let at_b = fleet.served(&b, b_ports.1, NAME);
    assert_eq!(at_a, at_b, "one certificate for both boxes");
    assert_eq!(
        issued(state_a.path()) + issued(state_b.path()),
        1,
        "one order; A:\n{}\nB:\n{}",
        a.stderr(),
        b.stderr()
    );
    let orders = [&a, &b]
        .iter()
        .filter(|h| {
            h.stderr()
                .contains("this box orders the certificate for site.test")
        })
        .count();
    assert_eq!(orders, 1);
    let r = client
        .connect(tls_addr(a_ports.1), NAME)
        .get("/hello.txt", &[]);
    assert_eq!((r.status, r.text().as_str()), (200, "hello world\n"));

    // A box started later serves it from Redis, ordering nothing.
    let c_ports = (free_port(), free_port());
    let state_c = tempfile::tempdir().expect("c");
    let c = fleet.hayate(state_c.path(), c_ports, NAME, "http-01");
    assert_eq!(fleet.served(&c, c_ports.1, NAME), at_a);
    assert_eq!(issued(state_c.path()), 0);
    let m = hayate_testkit::unix_get(&state_c.path().join("admin.sock"), "/metrics");
    assert!(m.contains("hayate_acme_shared_certificates_total 1"), "{m}");
    let raw = hayate_testkit::unix_get(&state_c.path().join("admin.sock"), "/status.json");
    let (_, body) = raw.split_once("\r\n\r\n").expect("a response");
    let status: serde_json::Value = serde_json::from_str(body).expect("JSON");
    assert_eq!(status["tls"]["acme"]["from_other_boxes"], 1, "{status}");
    assert!(
        c.stderr()
            .contains("serving the certificate for site.test that another box stored"),
        "{}",
        c.stderr()
    );

    // Another box stores a new certificate: the running boxes serve it
    // without a restart, and a box that was stopped meanwhile (its own copy
    // still valid) takes it as it starts.
    drop(c);
    let (newer, newer_client) = store_a_certificate(&fleet, state_c.path());
    for (h, port) in [(&a, a_ports.1), (&b, b_ports.1)] {
        assert_eq!(served_by(&newer_client, h, port, NAME), newer);
    }
    let c = fleet.hayate(state_c.path(), c_ports, NAME, "http-01");
    assert_eq!(served_by(&newer_client, &c, c_ports.1, NAME), newer);
    drop(c);

    // Redis gone: every box serves on, and one restarted meanwhile serves
    // its copy in the state directory.
    fleet.redis.kill();
    let c = fleet.hayate(state_c.path(), c_ports, NAME, "http-01");
    let at_c = newer_client
        .try_connect(tls_addr(c_ports.1), NAME)
        .map(|s| served_certificate(&s))
        .unwrap_or_else(|e| panic!("{e}: {}", c.stderr()));
    assert_eq!(at_c, newer, "from the state directory, at once");
    let client = newer_client;
    for (h, port) in [(&a, a_ports.1), (&b, b_ports.1)] {
        let r = client.connect(tls_addr(port), NAME).get("/hello.txt", &[]);
        assert_eq!(r.status, 200, "{}", h.stderr());
    }
}

/// Box A orders `site.test`, box B `other.test`; pebble validates only at
/// B's ports, so A's certificate proves that B answered A's challenge.
fn a_challenge_is_answered_by_another_box(challenge: &str) {
    let fleet = Fleet::start(90 * 24 * 3600);
    let b_ports = fleet.b_ports;
    let (state_a, state_b) = (
        tempfile::tempdir().expect("a"),
        tempfile::tempdir().expect("b"),
    );
    let b = fleet.hayate(state_b.path(), b_ports, "other.test", challenge);
    eventually("B following the other boxes", || {
        let log = b.stderr();
        log.contains("ACME: following the other boxes")
            .then_some(())
            .ok_or(log)
    });
    // A's ports are chosen as it starts: while B started, a parallel test
    // took ports chosen before (CI: "Address already in use"). Pebble
    // validates at B's ports only, so A's may be any.
    let a_ports = (free_port(), free_port());
    let a = fleet.hayate(state_a.path(), a_ports, NAME, challenge);
    fleet.served(&a, a_ports.1, NAME);
    fleet.served(&b, b_ports.1, "other.test");
    assert_eq!(issued(state_a.path()), 1, "{}", a.stderr());
}

#[test]
fn an_http_01_challenge_of_one_box_is_answered_by_another() {
    a_challenge_is_answered_by_another_box("http-01");
}

#[test]
fn a_tls_alpn_01_challenge_of_one_box_is_answered_by_another() {
    a_challenge_is_answered_by_another_box("tls-alpn-01");
}

#[test]
fn a_certificate_renewed_by_one_box_is_served_by_every_box_without_a_restart() {
    // Renewed at two thirds: every 4 s.
    let fleet = Fleet::start(6);
    let (a_ports, b_ports) = (fleet.a_ports, fleet.b_ports);
    let (state_a, state_b) = (
        tempfile::tempdir().expect("a"),
        tempfile::tempdir().expect("b"),
    );
    let a = fleet.hayate(state_a.path(), a_ports, NAME, "http-01");
    let b = fleet.hayate(state_b.path(), b_ports, NAME, "http-01");
    let client = &fleet.client;
    let first = fleet.served(&a, a_ports.1, NAME);
    eventually("both boxes serving one renewed certificate", || {
        let at = |port| {
            client
                .try_connect(tls_addr(port), NAME)
                .map(|c| served_certificate(&c))
        };
        let (at_a, at_b) = (at(a_ports.1)?, at(b_ports.1)?);
        match at_a != first && at_a == at_b {
            true => Ok(()),
            false => Err(format!("A:\n{}\nB:\n{}", a.stderr(), b.stderr())),
        }
    });
}

#[test]
fn sharing_acme_without_a_good_shared_key_is_refused_at_start() {
    let state = tempfile::tempdir().expect("state");
    let run = |key: Option<&str>| {
        let mut cmd = std::process::Command::new(BIN);
        cmd.args(["--listen", "https://127.0.0.1:0", "--tls", "acme"])
            .args(["--tls-names", NAME, "--shared", "redis://127.0.0.1:1"])
            .arg("--state-dir")
            .arg(state.path())
            .env_remove("HAYATE_SHARED_KEY");
        if let Some(key) = key {
            cmd.env("HAYATE_SHARED_KEY", key);
        }
        hayate_testkit::run_to_end(&mut cmd)
    };
    let (ok, out) = run(None);
    assert!(!ok && out.contains("needs shared_key"), "{out}");
    let (ok, out) = run(Some("my password"));
    assert!(
        !ok && out.contains("shared_key must be 64 hex digits"),
        "{out}"
    );
}

#[test]
fn a_failed_order_holds_the_lock_so_the_other_boxes_do_not_fail_the_same_way() {
    let fleet = Fleet::start(90 * 24 * 3600);
    // Neither box listens where pebble validates: every validation fails.
    let (state_a, state_b) = (
        tempfile::tempdir().expect("a"),
        tempfile::tempdir().expect("b"),
    );
    let a = fleet.hayate(state_a.path(), fleet.a_ports, NAME, "http-01");
    let b_ports = (free_port(), free_port());
    let b = fleet.hayate(state_b.path(), b_ports, NAME, "http-01");
    let (failed, other) = eventually("one box's order failed", || {
        for (h, other) in [(&a, &b), (&b, &a)] {
            if h.stderr().contains("ACME: no certificate for site.test") {
                return Ok((h, other));
            }
        }
        Err(format!("A:\n{}\nB:\n{}", a.stderr(), b.stderr()))
    });
    assert!(
        failed.stderr().contains("validation"),
        "{}",
        failed.stderr()
    );
    // The other box looks again after the failure, and still waits.
    let looks = |h: &Hayate| {
        h.stderr()
            .matches("another box holds the lock on site.test")
            .count()
    };
    let before = looks(other);
    eventually("the other box's next look", || {
        (looks(other) > before).then_some(()).ok_or(other.stderr())
    });
    let log = other.stderr();
    assert!(!log.contains("this box orders"), "{log}");
    assert!(!log.contains("no certificate for site.test"), "{log}");
}

#[test]
fn a_box_started_while_redis_is_down_orders_as_soon_as_redis_is_back() {
    let mut fleet = Fleet::start(90 * 24 * 3600);
    fleet.redis.kill();
    let state = tempfile::tempdir().expect("b");
    let b = fleet.hayate(state.path(), fleet.b_ports, NAME, "http-01");
    // Nothing ordered while the shared store is unreachable.
    eventually("the order refused while Redis is down", || {
        let log = b.stderr();
        log.contains("ACME: no certificate for site.test")
            .then_some(())
            .ok_or(log)
    });
    assert_eq!(issued(state.path()), 0);
    // Back: the box orders at once, not after its 10 s backoff.
    fleet.redis.restart();
    fleet.served(&b, fleet.b_ports.1, NAME);
    assert_eq!(issued(state.path()), 1);
}
