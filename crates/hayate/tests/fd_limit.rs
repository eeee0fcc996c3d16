//! At the open-file limit (issue 43): hayate started with a small
//! RLIMIT_NOFILE and more clients than its descriptors allow. A request
//! that finds no descriptor waits (in the proxy's queue, or in the kernel's
//! accept backlog) instead of failing, a local shortage is never blamed on
//! the upstream, and what cannot wait gets 503 with Retry-After, never a
//! 502, 404 or 500.

// Tests block on purpose (they are clients, not the server).
#![allow(clippy::disallowed_methods)]

use std::sync::mpsc;

use hayate_testkit::{eventually, Client, Hayate, Origin, OriginOptions, WAIT};

const BIN: &str = env!("CARGO_BIN_EXE_hayate");

/// The open-file limit the tests give hayate: a few hundred loopback
/// connections reach it.
const LIMIT: u64 = 256;

/// An answer as a client thread saw it: status and Retry-After.
type Seen = (u16, Option<String>);

/// Sends `GET path` on each of `clients` from a thread of its own; each
/// reports its answer on the returned channel, with its connection, which
/// stays open as long as the receiver keeps it.
fn request_from_each(clients: Vec<Client>, path: &str) -> mpsc::Receiver<(Seen, Client)> {
    let (tx, rx) = mpsc::channel();
    let raw = format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n");
    for mut c in clients {
        let (tx, raw) = (tx.clone(), raw.clone());
        std::thread::spawn(move || {
            c.send(raw.as_bytes());
            let r = c.read_response(false);
            let _ = tx.send(((r.status, r.header("retry-after").map(str::to_string)), c));
        });
    }
    rx
}

/// The next `n` answers, and their connections, kept open.
fn answers(rx: &mpsc::Receiver<(Seen, Client)>, n: usize) -> (Vec<Seen>, Vec<Client>) {
    let mut out = (Vec::with_capacity(n), Vec::with_capacity(n));
    while out.0.len() < n {
        match rx.recv_timeout(WAIT) {
            Ok((seen, c)) => {
                out.0.push(seen);
                out.1.push(c);
            }
            Err(_) => panic!("{} of {n} answers came", out.0.len()),
        }
    }
    out
}

/// An origin, and hayate proxying to it on one worker at [`LIMIT`].
fn proxy_at_the_limit() -> (Origin, Hayate) {
    let origin = Origin::start(OriginOptions::default());
    let upstream = origin.url();
    let args = [
        "--proxy",
        &upstream,
        "--workers",
        "1",
        "--access-log",
        "off",
    ];
    let h = Hayate::start_with_fd_limit(BIN, &args, LIMIT);
    (origin, h)
}

#[test]
fn an_upstream_connect_without_a_descriptor_waits_and_blames_no_member() {
    let (origin, h) = proxy_at_the_limit();
    // 130 clients, within the descriptor budget (140 at this limit), each
    // served once, so that every one is accepted before the proxied
    // requests begin: with hayate's own ~20 descriptors, about 105 are left
    // for upstream connections, and 130 requests held at the origin need
    // one each.
    const CLIENTS: usize = 130;
    let clients: Vec<Client> = (0..CLIENTS)
        .map(|_| {
            let mut c = h.client();
            assert_eq!(c.get("/warm", &[]).status, 200);
            c
        })
        .collect();
    let held = origin.hold("/held");
    let rx = request_from_each(clients, "/held");
    // Waits for the shortage; an answer first is a failure (a 502).
    let early = eventually("hayate to run short of descriptors", || {
        if let Ok((seen, _)) = rx.try_recv() {
            return Ok(Some(seen));
        }
        match h.stderr().contains("short of local resources") {
            true => Ok(None),
            false => Err("no shortage logged yet".to_string()),
        }
    });
    assert_eq!(early, None, "answered before the origin let its answers go");
    let reached = origin.count("/held");
    assert!(
        reached < CLIENTS as u64,
        "{reached} requests reached the origin: no shortage"
    );
    drop(held);
    let (got, _open) = answers(&rx, CLIENTS);
    let not_ok: Vec<&Seen> = got.iter().filter(|(s, _)| *s != 200).collect();
    assert!(not_ok.is_empty(), "answers other than 200: {not_ok:?}");
    assert_eq!(origin.holds_expired(), 0);
    let log = h.stderr();
    assert!(
        !log.contains("ejected"),
        "the member was blamed for hayate's shortage:\n{log}"
    );
    // Counted, not a line per request.
    let lines = log.matches("short of local resources").count();
    assert!(lines <= 2, "{lines} shortage lines for one burst:\n{log}");
    h.assert_no_errors();
}

#[test]
fn more_clients_than_the_budget_wait_in_the_backlog_and_are_all_answered() {
    let (origin, h) = proxy_at_the_limit();
    assert!(
        h.stderr()
            .contains("open-file limit 256: hayate holds at most 140 client connections"),
        "startup says what the limit allows:\n{}",
        h.stderr()
    );
    // Twice the budget, connected at once, each kept open after its answer
    // (the testkit client keeps the connection alive).
    const CLIENTS: usize = 280;
    let clients: Vec<Client> = (0..CLIENTS).map(|_| h.client()).collect();
    let rx = request_from_each(clients, "/p");
    let (got, open) = answers(&rx, CLIENTS);
    let not_ok: Vec<&Seen> = got.iter().filter(|(s, _)| *s != 200).collect();
    assert!(not_ok.is_empty(), "answers other than 200: {not_ok:?}");
    assert_eq!(origin.count("/p"), CLIENTS as u64);
    let log = h.stderr();
    assert!(!log.contains("ejected"), "a member was blamed:\n{log}");
    h.assert_no_errors();
    // With the budget held by idle connections, a newcomer is served too:
    // an idle one makes room for it.
    assert_eq!(h.client().get("/new", &[]).status, 200);
    drop(open);
}

#[test]
fn answers_given_at_the_budget_say_the_connection_closes() {
    // A client that sends its next request as soon as an answer comes (a
    // load generator, a proxy reusing its connections) must not meet a
    // close cut into its connection at the budget: the answer says
    // `Connection: close` first, and the client reconnects.
    let (_origin, h) = proxy_at_the_limit();
    // All but one place of the budget (140 at this limit), each answered
    // once and kept.
    let others: Vec<Client> = (0..139)
        .map(|_| {
            let mut c = h.client();
            assert_eq!(c.get("/warm", &[]).status, 200);
            c
        })
        .collect();
    // The last place: the worker is at the budget from its accept on.
    let mut last = h.client();
    let r = last.get("/last", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("connection"),
        Some("close"),
        "an answer at the budget says the connection closes"
    );
    assert!(last.is_closed(), "and it does");
    // Its place goes to a newcomer.
    assert_eq!(h.client().get("/new", &[]).status, 200);
    h.assert_no_errors();
    drop(others);
}

/// An HTTP/2 connection (prior knowledge) that asked `GET path` and read
/// its whole answer, kept open and idle.
fn idle_http2_after_one_request(h: &Hayate, path: &str) -> std::net::TcpStream {
    use hayate_testkit::h2_frames::{self, DATA, HEADERS};
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(h.addr).expect("connect");
    s.set_read_timeout(Some(WAIT)).expect("timeout");
    s.write_all(&[h2_frames::wide_open(), h2_frames::get(path)].concat())
        .expect("send");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    // Until the answer's last frame (END_STREAM on HEADERS or DATA).
    while !h2_frames::frames(&got)
        .iter()
        .any(|(kind, flags, _)| (*kind == HEADERS || *kind == DATA) && flags & 0x1 != 0)
    {
        let n = s.read(&mut buf).expect("the answer");
        assert!(
            n > 0,
            "closed before the answer: {:?}",
            h2_frames::summary(&got)
        );
        got.extend_from_slice(&buf[..n]);
    }
    s
}

#[test]
fn idle_http2_connections_make_room_at_the_budget() {
    let (origin, h) = proxy_at_the_limit();
    // The whole budget (140 at this limit) held by idle HTTP/2
    // connections, each after one answered request.
    let idle: Vec<_> = (0..140)
        .map(|_| idle_http2_after_one_request(&h, "/p"))
        .collect();
    assert_eq!(origin.count("/p"), 140);
    // A newcomer is served: an idle HTTP/2 connection is cut for it (GOAWAY
    // and close), as an idle HTTP/1.1 one is, not held until its
    // keep-alive timeout.
    assert_eq!(h.client().get("/new", &[]).status, 200);
    h.assert_no_errors();
    drop(idle);
}

#[test]
fn file_opens_without_a_descriptor_answer_503_with_retry_after_then_200() {
    let origin = Origin::start(OriginOptions::default());
    let root = tempfile::tempdir().expect("root");
    std::fs::write(root.path().join("warm.txt"), "warm").expect("write");
    const FILES: usize = 8;
    for i in 0..FILES {
        let name = root.path().join(format!("f{i}.txt"));
        std::fs::write(name, format!("file {i}")).expect("write");
    }
    let api = format!("/api={}", origin.url());
    let h = Hayate::start_with_fd_limit(
        BIN,
        &[
            root.path().to_str().expect("utf-8 path"),
            "--proxy",
            &api,
            "--workers",
            "1",
            "--access-log",
            "off",
        ],
        LIMIT,
    );
    // 125 clients whose proxied requests the origin holds and 8 that ask
    // for files: 133, within the budget (140), each served once so that all
    // are accepted before the descriptors run out; the held requests need
    // more upstream connections than the ~100 descriptors left.
    const HOLDERS: usize = 125;
    let warmed = |n: usize| -> Vec<Client> {
        (0..n)
            .map(|_| {
                let mut c = h.client();
                assert_eq!(c.get("/warm.txt", &[]).status, 200);
                c
            })
            .collect()
    };
    let holders = warmed(HOLDERS);
    let mut readers = warmed(FILES);
    let held = origin.hold("/api/held");
    let rx = request_from_each(holders, "/api/held");
    eventually("hayate to run short of descriptors", || {
        match h.stderr().contains("short of local resources") {
            true => Ok(()),
            false => Err("no shortage logged yet".to_string()),
        }
    });
    // A burst of requests for files not opened yet, with no descriptor
    // left to open them.
    let burst = |readers: &mut [Client]| -> Vec<(u16, Option<String>, Vec<u8>)> {
        for (i, c) in readers.iter_mut().enumerate() {
            c.send(format!("GET /f{i}.txt HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
        }
        readers
            .iter_mut()
            .map(|c| {
                let r = c.read_response(false);
                let retry_after = r.header("retry-after").map(str::to_string);
                (r.status, retry_after, r.body)
            })
            .collect()
    };
    let short = burst(&mut readers);
    assert!(
        short
            .iter()
            .all(|(status, retry, _)| (*status, retry.as_deref()) == (503, Some("1"))),
        "at the limit: {:?}",
        short.iter().map(|(s, r, _)| (s, r)).collect::<Vec<_>>()
    );
    drop(held);
    let (got, _open) = answers(&rx, HOLDERS);
    assert!(got.iter().all(|(s, _)| *s == 200), "{got:?}");
    // Descriptors back (the pools let their idle connections go at their
    // next sweep, within the Retry-After): the same burst is served, on
    // the same connections.
    eventually("the files to be served", || {
        let got = burst(&mut readers);
        for (i, (status, retry, body)) in got.into_iter().enumerate() {
            match status {
                200 => assert_eq!(body, format!("file {i}").into_bytes()),
                503 => {
                    assert_eq!(retry.as_deref(), Some("1"));
                    return Err(format!("/f{i}.txt: 503"));
                }
                other => panic!("/f{i}.txt: {other}"),
            }
        }
        Ok(())
    });
    h.assert_no_errors();
}

#[test]
fn check_says_what_a_low_limit_allows() {
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("hayate.toml");
    let root = dir.path().to_str().expect("utf-8 path");
    std::fs::write(&file, format!("workers = 1\nroot = \"{root}\"\n")).expect("write");
    let file = file.to_str().expect("utf-8 path");
    let check = |limit: u64| {
        let script = "ulimit -n \"$1\" && shift && exec \"$@\"";
        hayate_testkit::run_to_end(std::process::Command::new("sh").args([
            "-c",
            script,
            "sh",
            &limit.to_string(),
            BIN,
            "check",
            file,
        ]))
    };
    let (ok, text) = check(LIMIT);
    assert!(ok, "{text}");
    assert!(
        text.contains("note: open-file limit 256: hayate holds at most 140 client connections"),
        "{text}"
    );
    let (ok, text) = check(4096);
    assert!(
        ok && !text.contains("note:"),
        "a limit that is not low: {text}"
    );
}
