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
