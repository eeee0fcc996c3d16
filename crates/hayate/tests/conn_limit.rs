//! conn_limit end to end (issue "Site policy, part 1"): requests in
//! flight per client, over HTTP/1.1 and HTTP/2 (curl, raw frames), held
//! by real slow requests (an origin that holds its answers until
//! released), a long download holding its slot until its body is sent,
//! and slots given back when the client leaves however it leaves.

// Tests block on purpose (they are clients, not the server).
#![allow(clippy::disallowed_methods)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use hayate_testkit::h2_frames::{frame, get, wide_open, RST_STREAM};
use hayate_testkit::origin::{Origin, OriginOptions};
use hayate_testkit::{eventually, Hayate};

const BIN: &str = env!("CARGO_BIN_EXE_hayate");

/// A config file in `dir` made of `text`, started.
fn start(dir: &Path, text: &str) -> Hayate {
    Hayate::start_config(BIN, &dir.join("hayate.toml"), text)
}

/// Two workers, everything proxied to `origin` with at most `limit`
/// requests in flight per client (and `/rated/` at most one a minute);
/// the admin socket at `dir/admin.sock`.
fn limited(dir: &Path, origin: &Origin, limit: u32) -> Hayate {
    let text = format!(
        "listen = [\"127.0.0.1:0\"]\nworkers = 2\ntrusted_proxies = [\"127.0.0.1\"]\n\
         admin = \"unix:{admin}\"\n\
         [[site]]\nproxy = [\"{origin}\"]\nconn_limit = {limit}\n\
         [[site.route]]\nprefix = \"/rated/\"\nproxy = [\"{origin}\"]\nrate_limit = \"1/m\"\n",
        admin = dir.join("admin.sock").display(),
        origin = origin.url()
    );
    start(dir, &text)
}

/// Route `prefix`'s `field` in the status document.
fn status_of_route(dir: &Path, prefix: &str, field: &str) -> u64 {
    let text = hayate_testkit::unix_get(&dir.join("admin.sock"), "/status.json");
    let body = &text[text.find("\r\n\r\n").expect("head") + 4..];
    let doc: serde_json::Value = serde_json::from_str(body).expect("json");
    let route = doc["routes"]
        .as_array()
        .expect("routes")
        .iter()
        .find(|r| r["route"] == prefix)
        .unwrap_or_else(|| panic!("no {prefix} in {doc}"));
    route[field].as_u64().expect("a count")
}

/// curl's status and Retry-After for `path` on `h` (HTTP/2 with prior
/// knowledge, or HTTP/1.1), as client `xff` (X-Forwarded-For).
fn curl(h: &Hayate, path: &str, http2: bool, xff: &str) -> (u16, String) {
    let url = format!("http://127.0.0.1:{}{path}", h.addr.port());
    let version = if http2 {
        "--http2-prior-knowledge"
    } else {
        "--http1.1"
    };
    let out = Command::new("curl")
        .args(["-sS", "-o", "/dev/null", "-D", "-", "-w", "%{http_code}"])
        .args([version, "-H", &format!("X-Forwarded-For: {xff}"), &url])
        .output()
        .expect("curl (installed by .ci/run)");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let status = text[text.len() - 3..].parse().expect("status");
    let retry = text
        .lines()
        .find_map(|l| {
            l.strip_prefix("retry-after: ")
                .or(l.strip_prefix("Retry-After: "))
        })
        .unwrap_or("")
        .trim()
        .to_string();
    (status, retry)
}

/// A GET of `path` as client `xff` sent on a connection of its own, its
/// answer not read yet.
fn send_get(h: &Hayate, path: &str, xff: &str) -> TcpStream {
    let mut s = TcpStream::connect(h.addr).expect("connect");
    let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: {xff}\r\n\r\n");
    s.write_all(req.as_bytes()).expect("send");
    s
}

/// The status line's code of what `s` receives.
fn status_of(s: &mut TcpStream) -> u16 {
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut head = [0u8; 12];
    s.read_exact(&mut head).expect("status line");
    String::from_utf8_lossy(&head[9..12]).parse().expect("code")
}

#[test]
fn a_client_has_n_requests_in_flight_over_http1_and_http2_and_others_are_not_counted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = Origin::start(OriginOptions::default());
    let h = limited(dir.path(), &o, 2);
    let held = o.hold("/slow");
    // Two slow requests of one client, one over each protocol's client.
    let mut first = send_get(&h, "/slow", "203.0.113.7");
    let mut second = send_get(&h, "/slow", "203.0.113.7");
    assert!(
        o.wait_for("/slow", 2, Duration::from_secs(10)),
        "both reached the origin"
    );
    // A third, over either protocol, is refused; the client is told when.
    assert_eq!(curl(&h, "/echo", false, "203.0.113.7"), (429, "1".into()));
    assert_eq!(curl(&h, "/echo", true, "203.0.113.7"), (429, "1".into()));
    // Another client behind the same proxy has its own count.
    assert_eq!(curl(&h, "/echo", true, "203.0.113.8").0, 200);
    drop(held);
    assert_eq!(status_of(&mut first), 200);
    assert_eq!(status_of(&mut second), 200);
    // Both slots came back: two more fit at once.
    let held = o.hold("/slow");
    let _third = send_get(&h, "/slow", "203.0.113.7");
    let _fourth = send_get(&h, "/slow", "203.0.113.7");
    assert!(o.wait_for("/slow", 4, Duration::from_secs(10)));
    assert_eq!(curl(&h, "/echo", false, "203.0.113.7").0, 429);
    drop(held);
    assert_eq!(o.holds_expired(), 0);
    // The refusals by route, on the status page's document as on /metrics.
    assert_eq!(curl(&h, "/rated/echo", false, "203.0.113.9").0, 200);
    assert_eq!(curl(&h, "/rated/echo", true, "203.0.113.9").0, 429);
    assert_eq!(status_of_route(dir.path(), "/", "conn_limited"), 3);
    assert_eq!(status_of_route(dir.path(), "/rated/", "rate_limited"), 1);
    assert_eq!(status_of_route(dir.path(), "/rated/", "conn_limited"), 0);
    h.assert_no_errors();
}

#[test]
fn a_long_download_holds_its_slot_until_its_body_is_sent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let www = dir.path().join("www");
    std::fs::create_dir_all(&www).expect("mkdir");
    // More than loopback's socket buffers take at once (a few MiB): the
    // download stays under way while its client does not read.
    let big = hayate_testkit::big_bytes(64 << 20);
    std::fs::write(www.join("big.bin"), &big).expect("write");
    std::fs::write(www.join("small.txt"), "small\n").expect("write");
    let text = format!(
        "listen = [\"127.0.0.1:0\"]\n[[site]]\nroot = \"{}\"\nconn_limit = 1\n",
        www.display()
    );
    let h = start(dir.path(), &text);
    let mut download = send_get(&h, "/big.bin", "ignored");
    assert_eq!(status_of(&mut download), 200);
    // Its head came, its body is being sent: the client's one slot is
    // taken, for a file as for anything else.
    assert_eq!(curl(&h, "/small.txt", false, "ignored").0, 429);
    // Read to the end: the slot comes back once the last byte is sent.
    let mut rest = Vec::new();
    let mut buf = vec![0u8; 1 << 20];
    while rest.len() + 9 < big.len() {
        let n = download.read(&mut buf).expect("read");
        assert!(n > 0, "closed after {} bytes", rest.len());
        rest.extend_from_slice(&buf[..n]);
    }
    eventually("the slot given back", || {
        match curl(&h, "/small.txt", false, "ignored").0 {
            200 => Ok(()),
            s => Err(format!("{s}")),
        }
    });
    h.assert_no_errors();
}

#[test]
fn a_client_that_leaves_gives_its_slot_back_over_http1_and_http2() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = Origin::start(OriginOptions::default());
    let h = limited(dir.path(), &o, 1);
    let _held = o.hold("/slow");
    let free_again = |what: &str| {
        eventually(what, || match curl(&h, "/echo", false, "127.0.0.1").0 {
            200 => Ok(()),
            s => Err(format!("still {s}")),
        })
    };

    // A slow request held, and its client's slot taken; `nth` slow
    // request to reach the origin.
    let held_slow = |client: TcpStream, nth: u64, http2: bool| {
        assert!(o.wait_for("/slow", nth, Duration::from_secs(10)));
        assert_eq!(curl(&h, "/echo", http2, "127.0.0.1").0, 429);
        client
    };
    let h2_slow = || {
        let mut s = TcpStream::connect(h.addr).expect("connect");
        s.write_all(&wide_open()).expect("preface");
        s.write_all(&get("/slow")).expect("headers");
        s
    };

    // HTTP/1.1: the client closes while its request waits for the origin
    // (hayate watches for that once an answer is late).
    drop(held_slow(send_get(&h, "/slow", "127.0.0.1"), 1, false));
    free_again("the HTTP/1.1 client's slot given back");

    // HTTP/2: the client resets the stream, its connection open.
    let mut s = held_slow(h2_slow(), 2, true);
    let cancel = 0x8u32.to_be_bytes();
    s.write_all(&frame(RST_STREAM, 0, 1, &cancel))
        .expect("reset");
    free_again("the reset stream's slot given back");

    // HTTP/2: the client's connection closes under a stream.
    drop(held_slow(h2_slow(), 3, false));
    free_again("the closed connection's slot given back");
    h.assert_no_errors();
}

#[test]
fn a_reload_keeps_the_slots_of_requests_in_flight_while_the_limit_is_unchanged() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = Origin::start(OriginOptions::default());
    let control = dir.path().join("control.sock");
    let text = |extra: &str| {
        format!(
            "listen = [\"127.0.0.1:0\"]\ncontrol = \"{}\"\n[[site]]\nproxy = [\"{}\"]\nconn_limit = 1\n{extra}",
            control.display(),
            o.url()
        )
    };
    let h = start(dir.path(), &text(""));
    let held = o.hold("/slow");
    let mut slow = send_get(&h, "/slow", "ignored");
    assert!(o.wait_for("/slow", 1, Duration::from_secs(10)));
    // Another rule changes; the limit does not.
    std::fs::write(
        dir.path().join("hayate.toml"),
        text("deny = [\"192.0.2.0/24\"]"),
    )
    .expect("write");
    let (ok, said) = hayate_testkit::run_to_end(
        Command::new(BIN)
            .args(["reload", "--control"])
            .arg(&control),
    );
    assert!(ok, "{said}");
    // The request begun before the reload still holds the client's slot.
    assert_eq!(curl(&h, "/echo", false, "ignored").0, 429);
    drop(held);
    assert_eq!(status_of(&mut slow), 200);
    eventually("the slot given back across the reload", || {
        match curl(&h, "/echo", false, "ignored").0 {
            200 => Ok(()),
            s => Err(format!("{s}")),
        }
    });
    h.assert_no_errors();
}
