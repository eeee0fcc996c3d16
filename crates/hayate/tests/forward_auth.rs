//! forward_auth end to end: a small auth service that answers as
//! Authelia's verify endpoint does (2xx with Remote-User for a good session
//! cookie, a redirect to its login page without one, 401 for a bad one),
//! in front of an app and files, over HTTP/1.1 and HTTP/2; and the service
//! failing in every way it can (5xx, silent past the timeout, not
//! listening, a yes without the user): every time refused, never let
//! through.

// Tests block on purpose (they are clients and a service, not the server).
#![allow(clippy::disallowed_methods)]

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};

use hayate_testkit::origin::{Echo, Origin, OriginOptions};
use hayate_testkit::Hayate;

const BIN: &str = env!("CARGO_BIN_EXE_hayate");

/// The auth service: its URL, and the heads of the requests it got.
struct AuthService {
    url: String,
    seen: Arc<Mutex<Vec<String>>>,
}

impl AuthService {
    fn start() -> AuthService {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}/api/verify", listener.local_addr().expect("addr"));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { return };
                let log = log.clone();
                std::thread::spawn(move || serve(conn, &log));
            }
        });
        AuthService { url, seen }
    }

    /// The last request head the service got.
    fn last(&self) -> String {
        self.seen
            .lock()
            .expect("lock")
            .last()
            .cloned()
            .unwrap_or_default()
    }
}

/// Answers one keep-alive connection's requests by their session cookie.
fn serve(conn: TcpStream, seen: &Mutex<Vec<String>>) {
    let mut reader = BufReader::new(conn.try_clone().expect("clone"));
    let mut out = conn;
    loop {
        let mut head = String::new();
        loop {
            let mut line = String::new();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            if line == "\r\n" {
                break;
            }
            head.push_str(&line);
        }
        seen.lock().expect("lock").push(head.clone());
        let cookie = head
            .lines()
            .find_map(|l| {
                l.strip_prefix("cookie: ")
                    .or_else(|| l.strip_prefix("Cookie: "))
            })
            .unwrap_or("");
        let original = head
            .lines()
            .find_map(|l| l.strip_prefix("X-Original-URL: "))
            .unwrap_or("");
        let answer = if cookie.contains("session=alice") {
            "HTTP/1.1 200 OK\r\nRemote-User: alice\r\nRemote-Groups: admins\r\nContent-Length: 2\r\n\r\nok".to_string()
        } else if cookie.contains("session=anonymous") {
            "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n".to_string()
        } else if cookie.contains("session=broken") {
            "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 4\r\n\r\noops".to_string()
        } else if cookie.contains("session=silent") {
            // Never answers; hayate gives up at forward_auth_timeout and
            // closes, which ends this read.
            let mut rest = String::new();
            let _ = reader.read_line(&mut rest);
            return;
        } else if cookie.contains("session=expired") {
            "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"auth\"\r\nContent-Length: 7\r\n\r\nexpired".to_string()
        } else {
            let body = "to the login page";
            format!(
                "HTTP/1.1 302 Found\r\nLocation: https://auth.example/?rd={original}\r\n\
                 Set-Cookie: auth_flow=1; Path=/\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
        };
        if out.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}

/// hayate with `/app/` (files, then the app) behind `auth_url`.
fn start(dir: &Path, app: &Origin, auth_url: &str, extra: &str) -> Hayate {
    let www = dir.join("www");
    std::fs::create_dir_all(www.join("app")).expect("mkdir");
    std::fs::write(www.join("app/file.txt"), "a file\n").expect("write");
    std::fs::write(www.join("open.txt"), "open\n").expect("write");
    let text = format!(
        "listen = [\"127.0.0.1:0\"]\n[[site]]\nroot = \"{www}\"\n\
         [[site.route]]\nprefix = \"/app/\"\nroot = \"{www}\"\nproxy = [\"{app}\"]\n\
         forward_auth = \"{auth_url}\"\nforward_auth_copy = [\"Remote-User\", \"Remote-Groups\"]\n{extra}",
        www = www.display(),
        app = app.url(),
    );
    let file = dir.join("hayate.toml");
    std::fs::write(&file, text).expect("write");
    Hayate::start_in(
        BIN,
        &["--config", file.to_str().expect("utf-8")],
        &[],
        Some(dir),
    )
}

/// curl over h2c: status and body.
fn curl_h2(h: &Hayate, path: &str, headers: &[&str]) -> (u16, String) {
    let url = format!("http://127.0.0.1:{}{path}", h.addr.port());
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "--http2-prior-knowledge", "-w", "\n%{http_code}"]);
    for h in headers {
        cmd.args(["-H", h]);
    }
    let out = cmd.arg(&url).output().expect("curl (installed by .ci/run)");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, code) = text.rsplit_once('\n').expect("status");
    (code.parse().expect("status"), body.to_string())
}

#[test]
fn the_auth_service_decides_and_its_user_reaches_the_app() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = Origin::start(OriginOptions::default());
    let auth = AuthService::start();
    let h = start(dir.path(), &app, &auth.url, "");
    let mut c = h.client();

    // Logged in: through, with the service's user, never the client's.
    let alice = [("Cookie", "session=alice"), ("Remote-User", "root")];
    let r = c.get("/app/echo?x=1", &alice);
    assert_eq!(r.status, 200, "{}", r.text());
    let e = Echo::parse(&r.text());
    assert_eq!(e.header("remote-user"), Some("alice"));
    assert_eq!(e.header("remote-groups"), Some("admins"));
    assert_eq!(
        e.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case("remote-user"))
            .count(),
        1
    );
    // What the service was told.
    let asked = auth.last();
    for want in [
        "GET /api/verify HTTP/1.1\r\n",
        "X-Forwarded-Method: GET\r\n",
        "X-Forwarded-Uri: /app/echo?x=1\r\n",
        "X-Original-URL: http://test/app/echo?x=1\r\n",
        "X-Forwarded-For: 127.0.0.1\r\n",
        "X-Forwarded-Host: test\r\n",
    ] {
        assert!(asked.contains(want), "{want:?} in\n{asked}");
    }
    assert!(
        asked.to_ascii_lowercase().contains("cookie: session=alice"),
        "{asked}"
    );
    // A POST: the service is asked with GET, the body reaches the app.
    let r = c.post("/app/echo", &alice, b"payload");
    assert_eq!(Echo::parse(&r.text()).body_len, 7);
    assert!(auth.last().contains("X-Forwarded-Method: POST\r\n"));
    // Files of the route are behind it too.
    let r = c.get("/app/file.txt", &alice);
    assert_eq!((r.status, r.text().as_str()), (200, "a file\n"));

    // Not logged in: the service's redirect, as it sent it; nothing reached
    // the app, files included.
    let served = app.requests();
    let spoof = [("Remote-User", "root")];
    for path in ["/app/echo", "/app/file.txt", "/%61pp/echo"] {
        let r = c.get(path, &spoof);
        assert_eq!(r.status, 302, "{path}");
        assert!(r
            .header("location")
            .is_some_and(|l| l.starts_with("https://auth.example/?rd=http://test/")));
        assert_eq!(r.header("set-cookie"), Some("auth_flow=1; Path=/"));
        assert_eq!(r.text(), "to the login page");
    }
    let r = c.get("/app/echo", &[("Cookie", "session=expired")]);
    assert_eq!((r.status, r.text().as_str()), (401, "expired"));
    assert_eq!(r.header("www-authenticate"), Some("Basic realm=\"auth\""));
    assert_eq!(app.requests(), served, "nothing reached the app");
    // The rest of the site asks nobody.
    let before = auth.seen.lock().expect("lock").len();
    assert_eq!(c.get("/open.txt", &[]).status, 200);
    assert_eq!(auth.seen.lock().expect("lock").len(), before);

    // HTTP/2 meets the same gate.
    assert_eq!(curl_h2(&h, "/app/echo", &[]).0, 302);
    let (status, body) = curl_h2(
        &h,
        "/app/echo",
        &["Cookie: session=alice", "Remote-User: root"],
    );
    assert_eq!(status, 200);
    assert_eq!(Echo::parse(&body).header("remote-user"), Some("alice"));
    h.assert_no_errors();
}

#[test]
fn an_auth_service_that_fails_refuses_every_request() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = Origin::start(OriginOptions::default());
    let auth = AuthService::start();
    let h = start(
        dir.path(),
        &app,
        &auth.url,
        "forward_auth_timeout = \"300ms\"\n",
    );
    let mut c = h.client();
    for session in ["broken", "silent", "anonymous"] {
        let cookie = format!("session={session}");
        let r = h
            .client()
            .get("/app/echo", &[("Cookie", &cookie), ("Remote-User", "root")]);
        assert_eq!(r.status, 503, "{session}: {}", r.text());
    }
    assert_eq!(
        c.get("/app/file.txt", &[("Cookie", "session=broken")])
            .status,
        503
    );
    assert_eq!(app.requests(), 0, "nothing reached the app");
    let log = h.stderr();
    assert!(
        log.contains("forward_auth") && log.contains("without remote-user"),
        "{log}"
    );

    // A service that is not there at all.
    let closed = TcpListener::bind("127.0.0.1:0").expect("bind");
    let gone = format!("http://{}/verify", closed.local_addr().expect("addr"));
    drop(closed);
    let h = start(dir.path(), &app, &gone, "");
    for _ in 0..5 {
        let r = h.client().get("/app/echo", &[("Cookie", "session=alice")]);
        assert_eq!(r.status, 503);
    }
    assert_eq!(curl_h2(&h, "/app/echo", &["Cookie: session=alice"]).0, 503);
    assert_eq!(app.requests(), 0, "nothing reached the app");
}
