//! The admin listener without an app: on a Unix socket when asked (owner
//! only), answering /metrics and /status; requests to a prefix route are
//! counted under that route.

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use hayate_testkit::{site, unix_get, Hayate};

const BIN: &str = env!("CARGO_BIN_EXE_hayate");

#[test]
fn admin_on_a_unix_socket_counts_requests_per_route() {
    let dir = site();
    let sock_dir = tempfile::tempdir().expect("tempdir");
    let socket = sock_dir.path().join("admin.sock");
    let admin = format!("unix:{}", socket.display());
    let h = Hayate::start(
        BIN,
        &[
            dir.path().to_str().expect("utf8"),
            "--admin",
            &admin,
            "--proxy",
            "/api=http://127.0.0.1:9",
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while !h.stderr().contains("admin listener on unix:") {
        assert!(Instant::now() < deadline, "{}", h.stderr());
        std::thread::yield_now();
    }
    let mode = std::fs::metadata(&socket)
        .expect("socket")
        .permissions()
        .mode();
    assert_eq!(mode & 0o077, 0, "owner only: {mode:o}");

    let mut c = h.client();
    assert_eq!(c.get("/index.html", &[]).status, 200);
    assert_eq!(c.get("/missing", &[]).status, 404);
    assert_eq!(
        c.get("/api/x", &[]).status,
        502,
        "nothing listens on port 9"
    );
    let metrics = unix_get(&socket, "/metrics");
    assert!(metrics.starts_with("HTTP/1.1 200 OK\r\n"), "{metrics}");
    for line in [
        "hayate_http_requests_total{site=\"*\",route=\"/\",code=\"2xx\"} 1\n",
        "hayate_http_requests_total{site=\"*\",route=\"/\",code=\"4xx\"} 1\n",
        "hayate_http_requests_total{site=\"*\",route=\"/api\",code=\"5xx\"} 1\n",
        "hayate_http_request_duration_seconds_count{site=\"*\",route=\"/api\"} 1\n",
        "# TYPE hayate_connections_open gauge\n",
    ] {
        assert!(metrics.contains(line), "{line:?} missing:\n{metrics}");
    }
    assert!(!metrics.contains("hayate_app_"), "no app, no app figures");
    let status = unix_get(&socket, "/status");
    assert!(status.ends_with("\r\n\r\nno app runs\n"), "{status}");
}

/// Admin clients that ask for a response larger than their socket holds
/// and never read it give their slot back after the write bound: the 16
/// slots were held for good, and every later admin request was closed at
/// accept (decision 0014). Many sites make /metrics larger than a Unix
/// socket's buffer (about 200 KiB).
#[test]
#[allow(clippy::disallowed_methods)] // a blocking client, on purpose
fn admin_clients_that_never_read_give_their_slot_back() {
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;
    let root = site();
    let dir = tempfile::tempdir().expect("tempdir");
    let admin = dir.path().join("admin.sock");
    let mut config = format!(
        "admin = \"unix:{}\"\nroot = \"{}\"\n",
        admin.display(),
        root.path().display()
    );
    for i in 0..200 {
        config.push_str(&format!(
            "[[site]]\nhosts = [\"s{i}.test\"]\nroot = \"{}\"\n",
            root.path().display()
        ));
    }
    let file = dir.path().join("hayate.toml");
    std::fs::write(&file, config).expect("write");
    let h = Hayate::start(BIN, &["--config", file.to_str().expect("path")]);
    let size = unix_get(&admin, "/metrics").len();
    assert!(size > 256 * 1024, "/metrics is only {size} bytes");
    // Every slot taken by a client that asks and never reads.
    let stuck: Vec<UnixStream> = (0..16)
        .map(|_| {
            let mut s = UnixStream::connect(&admin).expect("connect");
            s.write_all(b"GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n")
                .expect("ask");
            s
        })
        .collect();
    // A new client is served once a slot is free again: closed at accept
    // until then. Polled, within a failure bound.
    let asked = Instant::now();
    let bound = asked + Duration::from_secs(30);
    loop {
        let mut s = UnixStream::connect(&admin).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        let _ = s.write_all(b"GET /status.json HTTP/1.1\r\nHost: a\r\n\r\n");
        let mut got = String::new();
        let _ = s.read_to_string(&mut got);
        if got.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(
            Instant::now() < bound,
            "no admin slot freed within 30 s; last answer {got:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(stuck);
    h.assert_no_errors();
}
