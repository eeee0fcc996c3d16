//! Process lifecycle: graceful shutdown on SIGTERM/SIGINT (in-flight
//! transfers finish, new connections are refused, idle ones close, the grace
//! period bounds it all), worker threads (one worker: the main thread), and
//! the access log.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use hayate_testkit::{big_bytes, site, Hayate, WAIT};

const BIN: &str = env!("CARGO_BIN_EXE_hayate");

fn start(args: &[&str]) -> (Hayate, tempfile::TempDir) {
    let dir = site();
    let mut all = vec![dir.path().to_str().expect("utf8 path")];
    all.extend_from_slice(args);
    (Hayate::start(BIN, &all), dir)
}

/// Sends `signal` (TERM, INT) without waiting for the exit.
fn signal(h: &Hayate, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &h.pid().to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{signal} failed");
}

/// Whether a new TCP connection to `addr` is refused now.
fn refused(addr: SocketAddr) -> bool {
    TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_err()
}

/// Polls `cond` every 10 ms until it holds or `limit` passes.
fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::park_timeout(Duration::from_millis(10));
    }
}

#[test]
fn sigterm_and_sigint_with_no_traffic_exit_0_at_once() {
    for sig in ["TERM", "INT"] {
        let (mut h, _dir) = start(&[]);
        assert_eq!(h.client().get("/hello.txt", &[]).status, 200);
        let t0 = Instant::now();
        signal(&h, sig);
        let status = h.wait();
        assert!(status.success(), "SIG{sig}: {status:?}");
        assert!(
            t0.elapsed() < Duration::from_secs(2),
            "SIG{sig}: exit took {:?}",
            t0.elapsed()
        );
        assert!(refused(h.addr), "still accepting after exit");
        h.assert_no_errors();
    }
}

/// Reads an HTTP/1.1 response head from `s`; returns (head, bytes of the
/// body that came with it).
fn read_head(s: &mut TcpStream) -> (String, Vec<u8>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            return (head, buf[end + 4..].to_vec());
        }
        let n = s.read(&mut chunk).expect("read head");
        assert!(n > 0, "closed before the head");
        buf.extend_from_slice(&chunk[..n]);
    }
}

#[test]
fn sigterm_lets_an_inflight_download_finish_and_refuses_new_connections() {
    inflight_download_finishes(&[]);
}

#[test]
fn one_worker_on_the_main_thread_drains_the_same_way() {
    // The control loop that handles the signal and the worker that
    // finishes the download share one thread.
    inflight_download_finishes(&["--workers", "1"]);
}

/// SIGTERM while a download is read slowly: new connections are refused,
/// the download finishes whole, then hayate exits 0.
fn inflight_download_finishes(extra: &[&str]) {
    const LEN: usize = 16 << 20;
    let dir = site();
    let want = big_bytes(LEN);
    std::fs::write(dir.path().join("big16.bin"), &want).expect("write");
    let root = dir.path().to_str().expect("utf8");
    let mut args = vec![root, "--file-cache-max-file", "64KiB"];
    args.extend_from_slice(extra);
    let mut h = Hayate::start(BIN, &args);

    let (started_tx, started_rx) = mpsc::channel::<()>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let addr = h.addr;
    let reader = std::thread::spawn(move || {
        let mut s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(WAIT)).expect("timeout");
        s.write_all(b"GET /big16.bin HTTP/1.1\r\nHost: a\r\n\r\n")
            .expect("send");
        let (head, mut body) = read_head(&mut s);
        assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
        assert!(head.contains(&format!("Content-Length: {LEN}")), "{head}");
        let mut chunk = vec![0u8; 64 * 1024];
        // A slow reader: a little, then a pause while the server shuts down.
        while body.len() < 512 * 1024 {
            let n = s.read(&mut chunk).expect("read");
            assert!(n > 0, "closed early");
            body.extend_from_slice(&chunk[..n]);
        }
        started_tx.send(()).expect("started");
        go_rx.recv().expect("go");
        while body.len() < LEN {
            let n = s.read(&mut chunk).expect("read");
            assert!(n > 0, "closed mid-body after {} bytes", body.len());
            body.extend_from_slice(&chunk[..n]);
        }
        // The connection is not kept alive during shutdown.
        let n = s.read(&mut chunk).expect("read after body");
        (body, n)
    });

    started_rx.recv_timeout(WAIT).expect("download started");
    signal(&h, "TERM");
    assert!(
        eventually(Duration::from_secs(3), || refused(addr)),
        "new connections still accepted after SIGTERM"
    );
    assert!(h.is_running(), "exited with a download in flight");
    go_tx.send(()).expect("go");
    let (body, after) = reader.join().expect("reader thread");
    assert_eq!(body.len(), LEN);
    assert!(body == want, "downloaded bytes differ from the file");
    assert_eq!(after, 0, "connection not closed after the last response");
    let status = h.wait();
    assert!(status.success(), "{status:?}");
    h.assert_no_errors();
}

#[test]
fn grace_period_bounds_shutdown_when_a_client_never_reads() {
    let dir = site();
    std::fs::write(dir.path().join("zeros.bin"), vec![0u8; 32 << 20]).expect("write");
    let root = dir.path().to_str().expect("utf8");
    let mut h = Hayate::start(
        BIN,
        &[
            root,
            "--grace-period",
            "300ms",
            "--file-cache-max-file",
            "64KiB",
        ],
    );
    let mut stuck = TcpStream::connect(h.addr).expect("connect");
    stuck.set_read_timeout(Some(WAIT)).expect("timeout");
    stuck
        .write_all(b"GET /zeros.bin HTTP/1.1\r\nHost: a\r\n\r\n")
        .expect("send");
    // The response has begun; from now on the client reads nothing.
    let (head, _) = read_head(&mut stuck);
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    let t0 = Instant::now();
    signal(&h, "TERM");
    let status = h.wait();
    let took = t0.elapsed();
    assert!(status.success(), "{status:?}");
    assert!(
        took < Duration::from_secs(3),
        "exit took {took:?} with a 300ms grace period"
    );
    assert!(
        took >= Duration::from_millis(250),
        "exit after {took:?}: the transfer was not given its grace period"
    );
    drop(stuck);
    h.assert_no_errors();
}

#[test]
fn idle_connections_are_closed_at_shutdown() {
    let (mut h, _dir) = start(&[]);
    // One that has been served and idles in keep-alive, one that never
    // sent a byte.
    let mut served = h.client();
    assert_eq!(served.get("/hello.txt", &[]).status, 200);
    let mut silent = h.client();
    assert_eq!(h.client().get("/hello.txt", &[]).status, 200);
    let t0 = Instant::now();
    signal(&h, "TERM");
    assert!(served.is_closed(), "keep-alive connection left open");
    assert!(silent.is_closed(), "silent connection left open");
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    assert!(h.wait().success());
    h.assert_no_errors();
}

#[test]
fn a_connection_accepted_before_shutdown_has_its_first_request_answered() {
    // Regression (issue 33, the request an upgrade under load lost): a
    // connection accepted just before the drain began, whose request had not
    // arrived yet, was closed with the idle ones, and its client (who had
    // just connected) lost the request.
    for workers in ["1", "2"] {
        let (mut h, _dir) = start(&["--workers", workers]);
        let mut fresh = h.client();
        // Accepted: with one listener per worker, a connection made after
        // it and answered on every worker proves it left the accept queues.
        // (SO_REUSEPORT spreads connections; one answered per worker is
        // enough with at most a few tries each.)
        for _ in 0..16 {
            assert_eq!(h.client().get("/hello.txt", &[]).status, 200);
        }
        let t0 = Instant::now();
        signal(&h, "TERM");
        assert!(
            eventually(WAIT, || refused(h.addr)),
            "the listeners did not close"
        );
        // The drain has begun; now the request arrives.
        let r = fresh.get("/hello.txt", &[]);
        assert_eq!((r.status, r.text().as_str()), (200, "hello world\n"));
        assert_eq!(r.header("connection"), Some("close"), "{:?}", r.headers);
        assert!(fresh.is_closed());
        assert!(h.wait().success());
        assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
        h.assert_no_errors();
    }
}

#[test]
fn workers_are_named_threads() {
    let (h, _dir) = start(&["--workers", "3"]);
    let task_dir = format!("/proc/{}/task", h.pid());
    let names = || -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&task_dir)
            .expect("task dir")
            .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("comm")).ok())
            .map(|n| n.trim().to_string())
            .filter(|n| n.starts_with("hayate-w"))
            .collect();
        names.sort();
        names
    };
    let want = ["hayate-w0", "hayate-w1", "hayate-w2"];
    assert!(
        eventually(Duration::from_secs(3), || names() == want),
        "worker threads: {:?}",
        names()
    );
    // Every worker serves: enough connections land on each (SO_REUSEPORT).
    for _ in 0..20 {
        assert_eq!(h.client().get("/hello.txt", &[]).status, 200);
    }
    h.assert_no_errors();
}

#[test]
fn one_worker_serves_on_the_main_thread() {
    // A process of one thread: the kernel then reads its file table
    // without a reference count on every socket call (decision 0005).
    let (mut h, _dir) = start(&["--workers", "1"]);
    let mut idle = h.client();
    assert_eq!(idle.get("/hello.txt", &[]).status, 200);
    let threads = std::fs::read_dir(format!("/proc/{}/task", h.pid()))
        .expect("task dir")
        .count();
    assert_eq!(threads, 1, "threads of a one-worker hayate");
    // The control loop shares the thread and still stops it gracefully.
    signal(&h, "TERM");
    assert!(idle.is_closed(), "keep-alive connection left open");
    assert!(h.wait().success());
    h.assert_no_errors();
}

/// Makes the requests the access log tests expect; returns the 404 body
/// length.
fn log_traffic(h: &Hayate) -> usize {
    let mut c = h.client();
    assert_eq!(c.get("/hello.txt", &[]).status, 200);
    let missing = c.get("/missing.txt", &[]);
    assert_eq!(missing.status, 404);
    assert_eq!(c.request("HEAD", "/hello.txt", &[]).status, 200);
    assert_eq!(
        c.get("/hello.txt?x=1", &[("Range", "bytes=0-4")]).status,
        206
    );
    let r = c.get(
        "/docs/guide.html",
        &[("User-Agent", "agent/1.0"), ("Referer", "http://ref.test/")],
    );
    assert_eq!(r.status, 200);
    missing.body.len()
}

#[test]
fn combined_access_log_has_one_line_per_request() {
    let logs = tempfile::tempdir().expect("tempdir");
    let log = logs.path().join("access.log");
    let (mut h, _dir) = start(&[
        "--access-log",
        log.to_str().expect("utf8"),
        "--workers",
        "1",
    ]);
    let not_found_len = log_traffic(&h);
    assert!(h.stop().success());
    let text = std::fs::read_to_string(&log).expect("access log");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 5, "{text}");
    let want = [
        "\"GET /hello.txt HTTP/1.1\" 200 12 \"-\" \"-\"".to_string(),
        format!("\"GET /missing.txt HTTP/1.1\" 404 {not_found_len} "),
        "\"HEAD /hello.txt HTTP/1.1\" 200 0 ".to_string(),
        "\"GET /hello.txt?x=1 HTTP/1.1\" 206 5 ".to_string(),
        "\"GET /docs/guide.html HTTP/1.1\" 200 13 \"http://ref.test/\" \"agent/1.0\"".to_string(),
    ];
    for (line, want) in lines.iter().zip(&want) {
        assert!(line.starts_with("127.0.0.1 - - ["), "{line}");
        assert!(line.contains(want.as_str()), "want {want:?} in {line:?}");
    }
    h.assert_no_errors();
}

#[test]
fn sigusr1_after_a_move_of_the_access_log_writes_to_a_new_file_and_loses_no_line() {
    let logs = tempfile::tempdir().expect("tempdir");
    let (log, moved) = (
        logs.path().join("access.log"),
        logs.path().join("access.log.1"),
    );
    let (mut h, _dir) = start(&[
        "--access-log",
        log.to_str().expect("utf8"),
        "--workers",
        "2",
    ]);
    let mut c = h.client();
    for i in 0..20 {
        assert_eq!(c.get(&format!("/hello.txt?before={i}"), &[]).status, 200);
    }
    // logrotate: move the file, then tell hayate.
    std::fs::rename(&log, &moved).expect("mv");
    signal(&h, "USR1");
    hayate_testkit::eventually("the reopen", || {
        h.stderr()
            .contains("SIGUSR1: logs reopened")
            .then_some(())
            .ok_or(h.stderr())
    });
    for i in 0..20 {
        assert_eq!(c.get(&format!("/hello.txt?after={i}"), &[]).status, 200);
    }
    drop(c);
    assert!(h.stop().success(), "USR1 does not end hayate");
    let old = std::fs::read_to_string(&moved).unwrap_or_default();
    let new = std::fs::read_to_string(&log).expect("a new access.log");
    for i in 0..20 {
        // Lines buffered before the signal may be written after it, to
        // the new file; none is lost, and none written twice.
        let before = format!("?before={i} ");
        assert_eq!(
            old.matches(&before).count() + new.matches(&before).count(),
            1,
            "{before}"
        );
        assert_eq!(new.matches(&format!("?after={i} ")).count(), 1, "{new}");
    }
    h.assert_no_errors();
}

#[test]
fn json_access_log_lines_are_objects_with_the_fields() {
    let logs = tempfile::tempdir().expect("tempdir");
    let log = logs.path().join("access.json");
    let (mut h, _dir) = start(&[
        "--access-log",
        log.to_str().expect("utf8"),
        "--access-log-format",
        "json",
        "--workers",
        "1",
    ]);
    let not_found_len = log_traffic(&h);
    assert!(h.stop().success());
    let text = std::fs::read_to_string(&log).expect("access log");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 5, "{text}");
    let want: [&[String]; 5] = [
        &[
            "\"method\":\"GET\"".into(),
            "\"uri\":\"/hello.txt\"".into(),
            "\"status\":200,".into(),
            "\"bytes\":12,".into(),
        ],
        &[
            "\"uri\":\"/missing.txt\"".into(),
            "\"status\":404,".into(),
            format!("\"bytes\":{not_found_len},"),
        ],
        &[
            "\"method\":\"HEAD\"".into(),
            "\"status\":200,".into(),
            "\"bytes\":0,".into(),
        ],
        &[
            "\"uri\":\"/hello.txt?x=1\"".into(),
            "\"status\":206,".into(),
            "\"bytes\":5,".into(),
        ],
        &[
            "\"uri\":\"/docs/guide.html\"".into(),
            "\"user_agent\":\"agent/1.0\"".into(),
            "\"referer\":\"http://ref.test/\"".into(),
        ],
    ];
    for (line, fields) in lines.iter().zip(want) {
        assert!(line.starts_with('{') && line.ends_with('}'), "{line}");
        assert_eq!(
            line.matches('"').count() % 2,
            0,
            "unbalanced quotes: {line}"
        );
        for field in [
            "\"time\":\"",
            "\"remote\":\"127.0.0.1\"",
            "\"protocol\":\"HTTP/1.1\"",
            "\"host\":\"test\"",
            "\"duration_us\":",
        ]
        .iter()
        .copied()
        .chain(fields.iter().map(String::as_str))
        {
            assert!(line.contains(field), "want {field} in {line}");
        }
    }
    h.assert_no_errors();
}

#[test]
fn access_log_goes_to_stdout_by_default_and_off_writes_nothing() {
    let (mut h, _dir) = start(&[]);
    log_traffic(&h);
    assert!(h.stop().success());
    let lines = h.stdout_lines(Duration::from_millis(500));
    assert_eq!(lines.len(), 5, "{lines:?}");
    assert!(
        lines[0].contains("\"GET /hello.txt HTTP/1.1\" 200 12"),
        "{lines:?}"
    );
    h.assert_no_errors();

    let (mut h, _dir) = start(&["--access-log", "off"]);
    log_traffic(&h);
    assert!(h.stop().success());
    let lines = h.stdout_lines(Duration::from_millis(500));
    assert!(lines.is_empty(), "{lines:?}");
    h.assert_no_errors();
}

#[test]
fn hayate_logs_prints_and_follows_the_log_files_across_rotations() {
    use std::io::BufRead;
    let logs = tempfile::tempdir().expect("tempdir");
    let (access, errors) = (
        logs.path().join("access.log"),
        logs.path().join("error.log"),
    );
    let control = logs.path().join("control.sock");
    let (mut h, _dir) = start(&[
        "--access-log",
        access.to_str().expect("utf8"),
        // Small: the followed requests below rotate it several times.
        "--access-log-size",
        "2KiB",
        "--access-log-keep",
        "2",
        "--error-log",
        errors.to_str().expect("utf8"),
        "--control",
        control.to_str().expect("utf8"),
        "--workers",
        "1",
    ]);
    let mut c = h.client();
    for i in 0..3 {
        assert_eq!(c.get(&format!("/hello.txt?first={i}"), &[]).status, 200);
    }
    // A request that breaks the rules: a line in the error log.
    let refused = h
        .client()
        .send(b"GET /x HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n")
        .read_response(false);
    assert_eq!(refused.status, 400);
    hayate_testkit::eventually("the error log line", || {
        let text = std::fs::read_to_string(&errors).unwrap_or_default();
        text.contains("400").then_some(()).ok_or(text)
    });
    // The access log is written in whole buffers, at least once a second.
    hayate_testkit::eventually("the first lines written", || {
        let text = std::fs::read_to_string(&access).unwrap_or_default();
        text.contains("?first=2 ").then_some(()).ok_or(text)
    });
    let out = std::process::Command::new(BIN)
        .args(["logs", "-n", "2", "--control"])
        .arg(&control)
        .output()
        .expect("hayate logs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    let access_lines: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("[access] "))
        .collect();
    assert_eq!(access_lines.len(), 2, "the last two: {text}");
    assert!(access_lines[1].contains("?first=2 "), "{text}");
    assert!(text.lines().any(|l| l.starts_with("[error] ")), "{text}");

    let mut follow = std::process::Command::new(BIN)
        .args(["logs", "-f", "-n", "0", "--control"])
        .arg(&control)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("hayate logs -f");
    // Read on a thread of its own: every wait for a line is bounded.
    let (tx, lines) = mpsc::channel();
    let stdout = follow.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // Enough requests for several rotations of a 2 KiB file.
    for i in 0..60 {
        assert_eq!(c.get(&format!("/hello.txt?then={i}"), &[]).status, 200);
    }
    let mut seen = std::collections::BTreeSet::new();
    while let Ok(line) = lines.recv_timeout(WAIT) {
        if let Some(n) = line
            .split("?then=")
            .nth(1)
            .and_then(|r| r.split(' ').next())
        {
            seen.insert(n.parse::<u32>().expect("n"));
        }
        if seen.len() == 60 {
            break;
        }
    }
    let _ = follow.kill();
    let _ = follow.wait();
    assert_eq!(seen.len(), 60, "every followed line, across rotations");
    assert!(logs.path().join("access.log.1").exists(), "it rotated");
    assert!(h.stop().success());
}

/// A control client that connects and says nothing (or never reads its
/// answer) holds the main loop only for the control socket's client timeout:
/// the next command is answered after it. It held the loop for good, and
/// with it every later `hayate status`, `reload` and `stop`.
#[test]
fn a_silent_control_client_does_not_hold_the_main_loop() {
    use std::os::unix::net::UnixStream;
    let dir = tempfile::tempdir().expect("tempdir");
    let control = dir.path().join("control.sock");
    let (mut h, _site) = start(&["--control", control.to_str().expect("utf8")]);
    // Accepted first: the listen queue is first in, first out.
    let silent = UnixStream::connect(&control).expect("connect");
    let mut next = UnixStream::connect(&control).expect("connect");
    next.write_all(b"status\n").expect("command");
    next.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let mut answer = String::new();
    match next.read_to_string(&mut answer) {
        Ok(_) => {}
        Err(e) => panic!("no answer within 30 s behind a silent client: {e}"),
    }
    assert!(answer.starts_with("ok\n"), "{answer}");
    drop(silent);
    assert!(h.stop().success());
}
