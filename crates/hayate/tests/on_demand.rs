//! On-demand TLS end to end, against pebble: a name no certificate has
//! gets one at its first handshake once the ask URL (a real HTTP server
//! here) allows it; a refused name gets a TLS alert and is not asked about
//! again for a while; a run of new names is held to `tls_on_demand_rate`.

// Tests block on purpose (they are clients, not the server).
#![allow(clippy::disallowed_methods)]

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use hayate_testkit::pebble::{free_port, Pebble};
use hayate_testkit::tls::{served_certificate, TlsClient};
use hayate_testkit::{eventually, site, Hayate};

const BIN: &str = env!("CARGO_BIN_EXE_hayate");

/// The app's ask endpoint: allows `allowed.test` and names under
/// `ok.test`, refuses the rest; notes each name asked about.
struct AskServer {
    url: String,
    asked: Arc<Mutex<Vec<String>>>,
}

impl AskServer {
    fn start() -> AskServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}/allowed", listener.local_addr().expect("addr"));
        let asked = Arc::new(Mutex::new(Vec::new()));
        let noted = asked.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().map_while(Result::ok) {
                let mut line = String::new();
                let mut reader = BufReader::new(&stream);
                if reader.read_line(&mut line).is_err() {
                    continue;
                }
                let domain = line
                    .split_once("?domain=")
                    .and_then(|(_, rest)| rest.split_once(' '))
                    .map(|(d, _)| d.to_string())
                    .unwrap_or_default();
                let allowed = domain == "allowed.test" || domain.ends_with(".ok.test");
                let status = if allowed { "200 OK" } else { "403 Forbidden" };
                noted.lock().expect("lock").push(domain);
                let answer =
                    format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
                let _ = (&stream).write_all(answer.as_bytes());
            }
        });
        AskServer { url, asked }
    }

    fn asked(&self, name: &str) -> usize {
        self.asked
            .lock()
            .expect("lock")
            .iter()
            .filter(|n| *n == name)
            .count()
    }
}

fn hayate(
    root: &Path,
    state: &Path,
    tls_port: u16,
    pebble: &Pebble,
    ask: &str,
    rate: &str,
) -> Hayate {
    let https = format!("https://127.0.0.1:{tls_port}");
    let admin = format!("unix:{}", state.join("admin.sock").display());
    Hayate::start(
        BIN,
        &[
            root.to_str().expect("path"),
            "--listen",
            &https,
            "--tls-on-demand",
            "--tls-on-demand-ask",
            ask,
            "--tls-on-demand-rate",
            rate,
            "--acme-directory",
            &pebble.directory,
            "--acme-ca-root",
            pebble.api_ca.to_str().expect("path"),
            "--acme-challenge",
            "tls-alpn-01",
            "--state-dir",
            state.to_str().expect("path"),
            "--admin",
            &admin,
        ],
    )
}

/// What both tests use: a site, a state directory, pebble validating
/// TLS-ALPN-01 on hayate's https port, the ask server, a client trusting
/// pebble's certificates.
struct Setup {
    root: tempfile::TempDir,
    state: tempfile::TempDir,
    tls_port: u16,
    pebble: Pebble,
    ask: AskServer,
    client: TlsClient,
    addr: std::net::SocketAddr,
}

impl Setup {
    fn new() -> Setup {
        let tls_port = free_port();
        let pebble = Pebble::start(free_port(), tls_port, 90 * 24 * 3600);
        let client = TlsClient::trusting(&pebble.issuer_root()).without_resumption();
        Setup {
            root: site(),
            state: tempfile::tempdir().expect("state"),
            tls_port,
            pebble,
            ask: AskServer::start(),
            client,
            addr: format!("127.0.0.1:{tls_port}").parse().expect("addr"),
        }
    }
}

fn wait_listening(addr: std::net::SocketAddr) {
    eventually("hayate listening", || {
        std::net::TcpStream::connect(addr)
            .map(drop)
            .map_err(|e| e.to_string())
    });
}

fn metrics(state: &Path) -> String {
    hayate_testkit::unix_get(&state.join("admin.sock"), "/metrics")
}

#[test]
fn an_allowed_name_gets_a_certificate_at_its_first_handshake() {
    let t = Setup::new();
    let (root, state, tls_port, pebble, ask, client, addr) = (
        &t.root, &t.state, t.tls_port, &t.pebble, &t.ask, &t.client, t.addr,
    );
    let h = hayate(root.path(), state.path(), tls_port, pebble, &ask.url, "10");
    wait_listening(addr);

    let started = Instant::now();
    let mut c = client
        .try_connect(addr, "allowed.test")
        .unwrap_or_else(|e| panic!("{e}; hayate's log:\n{}", h.stderr()));
    let first = started.elapsed();
    let r = c.get("/hello.txt", &[]);
    assert_eq!((r.status, r.text().as_str()), (200, "hello world\n"));
    eprintln!("first on-demand handshake: {} ms", first.as_millis());
    let issued = served_certificate(&c);
    // Later handshakes: the same certificate, no new ask.
    let c = client.connect(addr, "allowed.test");
    assert_eq!(served_certificate(&c), issued);
    assert_eq!(ask.asked("allowed.test"), 1);

    // Refused: a TLS alert, remembered (not asked again).
    for _ in 0..2 {
        let e = client
            .try_connect(addr, "evil.test")
            .err()
            .expect("refused");
        assert!(e.contains("alert"), "{e}");
    }
    assert_eq!(ask.asked("evil.test"), 1, "the refusal is remembered");
    // The refused handshake is counted once its alert is out: the client
    // may read it first.
    let m = eventually("the refused handshakes counted", || {
        let m = metrics(state.path());
        match m.contains("hayate_tls_handshakes_total{result=\"failed\",reason=\"on_demand\"} 2") {
            true => Ok(m),
            false => Err(m),
        }
    });
    assert!(
        m.contains("hayate_tls_on_demand_total{outcome=\"issued\"} 1"),
        "{m}"
    );
    assert!(
        m.contains("hayate_tls_on_demand_total{outcome=\"refused\"} 2"),
        "{m}"
    );
    assert!(
        m.contains("hayate_acme_orders_total{result=\"issued\"} 1"),
        "{m}"
    );
    assert!(
        m.contains("source=\"acme tls-alpn-01 on demand ("),
        "how it was obtained: {m}"
    );
    // Stored: a restart serves it without asking or ordering.
    drop(h);
    let h = hayate(root.path(), state.path(), tls_port, pebble, &ask.url, "10");
    wait_listening(addr);
    let c = client
        .try_connect(addr, "allowed.test")
        .unwrap_or_else(|e| panic!("{e}; hayate's log:\n{}", h.stderr()));
    assert_eq!(served_certificate(&c), issued, "the stored certificate");
    assert_eq!(ask.asked("allowed.test"), 1);
}

#[test]
fn new_names_are_held_to_the_rate() {
    let t = Setup::new();
    let (state, ask, client, addr) = (&t.state, &t.ask, &t.client, t.addr);
    let h = hayate(
        t.root.path(),
        state.path(),
        t.tls_port,
        &t.pebble,
        &ask.url,
        "2",
    );
    wait_listening(addr);
    let mut served = 0;
    for i in 0..30 {
        let name = format!("r{i}-{}.ok.test", std::process::id());
        match client.try_connect(addr, &name) {
            Ok(_) => served += 1,
            Err(e) => assert!(e.contains("alert"), "{e}"),
        }
    }
    assert_eq!(
        served,
        2,
        "a burst of tls_on_demand_rate; log:\n{}",
        h.stderr()
    );
    let m = metrics(state.path());
    assert!(
        m.contains("hayate_tls_on_demand_total{outcome=\"issued\"} 2"),
        "{m}"
    );
    assert!(
        m.contains("hayate_tls_on_demand_total{outcome=\"rate_limited\"} 28"),
        "{m}"
    );
    assert!(
        m.contains("hayate_acme_orders_total{result=\"issued\"} 2"),
        "{m}"
    );

    // A scan: 1,000 more new names, each asked about and refused an order;
    // memory stays bounded (the refusal memory holds names the app
    // refused only, the bucket is one number).
    let before = rss_kib(h.pid());
    let started = Instant::now();
    for i in 0..1000 {
        let name = format!("scan{i}.ok.test");
        let e = client.try_connect(addr, &name).err().expect("rate limited");
        assert!(e.contains("alert"), "{e}");
    }
    let (after, took) = (rss_kib(h.pid()), started.elapsed());
    eprintln!(
        "1,000 handshakes for new names: {} ms, RSS {before} -> {after} KiB",
        took.as_millis()
    );
    assert!(after < before + 8 * 1024, "RSS {before} -> {after} KiB");
    let m = metrics(state.path());
    assert!(
        m.contains("hayate_tls_on_demand_total{outcome=\"rate_limited\"} 1028"),
        "{m}"
    );
    assert!(
        m.contains("hayate_acme_orders_total{result=\"issued\"} 2"),
        "{m}"
    );
}

/// The resident set of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .expect("VmRSS");
    line.trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .expect("KiB")
}

#[test]
fn concurrent_handshakes_for_a_new_name_order_it_once() {
    let t = Setup::new();
    let h = hayate(
        t.root.path(),
        t.state.path(),
        t.tls_port,
        &t.pebble,
        &t.ask.url,
        "10",
    );
    wait_listening(t.addr);
    let certs: Vec<Vec<u8>> = std::thread::scope(|s| {
        let tries: Vec<_> = (0..5)
            .map(|_| {
                s.spawn(|| {
                    t.client
                        .try_connect(t.addr, "same.ok.test")
                        .map(|c| served_certificate(&c))
                })
            })
            .collect();
        tries
            .into_iter()
            .map(|t| t.join().expect("thread"))
            .map(|r| r.unwrap_or_else(|e| panic!("{e}; log:\n{}", h.stderr())))
            .collect()
    });
    assert!(certs.iter().all(|c| *c == certs[0]), "one certificate");
    let m = metrics(t.state.path());
    assert!(
        m.contains("hayate_acme_orders_total{result=\"issued\"} 1"),
        "ordered once: {m}"
    );
}
