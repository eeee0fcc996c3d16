//! `hayate run`: real Node apps (standard library only) supervised and
//! served: readiness, crashes under load, rolling reloads, failed reloads,
//! crash loops, and no orphans on exit.

// Tests block on purpose (they are clients, not the server).
#![allow(clippy::disallowed_methods)]

use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hayate_testkit::{run_to_end, Client, Hayate};

const BIN: &str = env!("CARGO_BIN_EXE_hayate");

/// A Node app: answers `instance I pid P version V up MS` (MS since it
/// booted); `/ready` answers 503 for its first 300 ms; `/crash` exits; `/slow`
/// sends `x` at once and ends 150 ms later (`xslow`); `/health` counts the
/// probes `/health-checks` reports; a version file saying `broken` makes it
/// exit before listening, one saying `crashy` makes it exit 100 ms after.
const APP: &str = r#"
const http = require('http');
const fs = require('fs');
const version = fs.readFileSync('version.txt', 'utf8').trim();
if (version === 'broken') { console.error('refusing to start'); process.exit(1); }
const bootedAt = Date.now();
let healthChecks = 0;
http.createServer((req, res) => {
  if (req.url === '/health') { healthChecks++; res.end('ok'); return; }
  if (req.url === '/health-checks') { res.end(String(healthChecks)); return; }
  if (req.url === '/crash') { res.end('bye'); setTimeout(() => process.exit(3), 5); return; }
  if (req.url === '/ready') { res.statusCode = Date.now() - bootedAt > 300 ? 200 : 503; res.end(); return; }
  if (req.url === '/chatter') { for (let i = 0; i < 200; i++) console.log('chatter line ' + i); res.end('said'); return; }
  if (req.url === '/env') { res.end(`${process.env.GREETING} ${process.env.PORT}`); return; }
  if (req.url === '/shared-key') { res.end(String(process.env.HAYATE_SHARED_KEY)); return; }
  // The head and a first byte go at once: an instance killed before the
  // end cuts a response already under way, which no retry can hide.
  if (req.url === '/slow') { res.write('x'); setTimeout(() => res.end('slow'), 150); return; }
  if (req.url === '/grow') { global.hog = Buffer.alloc(96 << 20, 1); res.end('grown'); return; }
  res.end(`instance ${process.env.HAYATE_INSTANCE} pid ${process.pid} version ${version} up ${Date.now() - bootedAt}`);
}).listen(process.env.PORT, () => {
  console.log('up', version);
  if (version === 'crashy') setTimeout(() => process.exit(4), 100);
});
"#;

fn app_dir(version: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("app.js"), APP).expect("write");
    std::fs::write(dir.path().join("version.txt"), version).expect("write");
    std::fs::create_dir(dir.path().join("public")).expect("mkdir");
    std::fs::write(dir.path().join("public/hello.txt"), "static\n").expect("write");
    dir
}

fn run(dir: &Path, instances: &str, extra: &[&str]) -> Hayate {
    run_command(dir, instances, extra, &["node", "app.js"])
}

/// `hayate run` of `command` in `dir` (one worker, an ephemeral port).
fn run_command(dir: &Path, instances: &str, extra: &[&str], command: &[&str]) -> Hayate {
    let mut args = vec![
        "run",
        "--listen",
        "127.0.0.1:0",
        "--workers",
        "1",
        "--instances",
        instances,
    ];
    args.extend_from_slice(extra);
    args.push("--");
    args.extend_from_slice(command);
    Hayate::start_in(BIN, &args, &[], Some(dir))
}

struct Answer {
    instance: String,
    pid: i32,
    version: String,
    /// Milliseconds between the app's boot and this answer.
    uptime_ms: u64,
}

fn answer(c: &mut Client) -> (u16, Option<Answer>) {
    let r = c.get("/", &[]);
    let text = r.text();
    let words: Vec<&str> = text.split(' ').collect();
    let parsed = match words.as_slice() {
        ["instance", i, "pid", p, "version", v, "up", u] => Some(Answer {
            instance: i.to_string(),
            pid: p.parse().unwrap_or(0),
            version: v.to_string(),
            uptime_ms: u.parse().expect("uptime"),
        }),
        _ => None,
    };
    (r.status, parsed)
}

/// Waits (bounded) until `pred` holds for the error log.
fn wait_log(h: &Hayate, what: &str, pred: impl Fn(&str) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(8);
    while !pred(&h.stderr()) {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; log:\n{}",
            h.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn ready_count(log: &str) -> usize {
    log.lines().filter(|l| l.contains(" ready (pid ")).count()
}

fn alive(pid: i32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

/// The pids of the `n` running instances, from their answers (bounded).
fn instance_pids(c: &mut Client, n: usize) -> HashSet<i32> {
    let mut pids = HashSet::new();
    for _ in 0..100 {
        pids.insert(answer(c).1.expect("answer").pid);
        if pids.len() == n {
            return pids;
        }
    }
    panic!("only {pids:?} answered");
}

/// Waits (bounded) until none of `pids` runs: a reload is over once the
/// instances it replaced were drained and stopped.
fn wait_gone(pids: &HashSet<i32>) {
    let deadline = Instant::now() + Duration::from_secs(8);
    while pids.iter().any(|&p| alive(p)) {
        assert!(Instant::now() < deadline, "{pids:?} still run");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Requests answered so far by each of a test's load threads.
struct Progress(Vec<AtomicU32>);

impl Progress {
    fn new(threads: usize) -> Arc<Progress> {
        Arc::new(Progress((0..threads).map(|_| AtomicU32::new(0)).collect()))
    }

    fn done(&self, thread: usize) {
        self.0[thread].fetch_add(1, Ordering::SeqCst);
    }

    /// Waits (bounded) until every thread has had `more` requests answered
    /// since this call.
    fn wait(&self, more: u32) {
        let from: Vec<u32> = self.0.iter().map(|n| n.load(Ordering::SeqCst)).collect();
        let deadline = Instant::now() + Duration::from_secs(8);
        while self
            .0
            .iter()
            .zip(&from)
            .any(|(n, f)| n.load(Ordering::SeqCst) < f + more)
        {
            assert!(
                Instant::now() < deadline,
                "a load thread stalled or panicked (see its message)"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

#[test]
fn instances_serve_static_files_come_first_and_a_killed_instance_costs_no_request() {
    let dir = app_dir("v1");
    let h = run(dir.path(), "2", &[]);
    wait_log(&h, "two ready instances", |l| ready_count(l) >= 2);
    let mut c = h.client();
    assert_eq!(
        c.get("/hello.txt", &[]).text(),
        "static\n",
        "public/ is served first"
    );
    assert_eq!(
        c.get("/app.js", &[]).status,
        200,
        "the app answers what public/ lacks"
    );
    let mut seen = HashSet::new();
    let mut victim = None;
    for i in 0..150 {
        let (status, a) = answer(&mut c);
        assert_eq!(status, 200, "request {i} failed");
        let a = a.expect("app answer");
        seen.insert(a.instance.clone());
        if i == 30 {
            // SIGKILL one instance in the middle of the loop.
            nix_kill(a.pid);
            victim = Some(a.pid);
        }
    }
    assert_eq!(seen.len(), 2, "both instances served");
    wait_log(&h, "a restart", |l| ready_count(l) >= 3);
    assert!(!alive(victim.expect("victim")));
    h.assert_no_errors();
}

#[test]
fn rolling_reload_switches_generations_without_failed_requests() {
    let dir = app_dir("v1");
    // A request finding no instance waits at most 20 ms, then fails (503):
    // a moment without an instance would show, not be waited out.
    let h = run(dir.path(), "2", &["--proxy-queue-timeout", "20ms"]);
    wait_log(&h, "two ready instances", |l| ready_count(l) >= 2);
    let old = instance_pids(&mut h.client(), 2);
    let addr = h.addr;
    let stop = Arc::new(AtomicBool::new(false));
    let progress = Progress::new(3);
    let loaders: Vec<_> = (0..3)
        .map(|n| {
            let (stop, progress) = (stop.clone(), progress.clone());
            std::thread::spawn(move || {
                let mut c = Client::connect(addr);
                let mut failures = 0;
                let deadline = Instant::now() + Duration::from_secs(8);
                while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                    if answer(&mut c).0 != 200 {
                        failures += 1;
                    }
                    progress.done(n);
                }
                failures
            })
        })
        .collect();
    // The reload starts under load, and the load goes on until the old
    // instances are stopped, and a little after.
    progress.wait(5);
    std::fs::write(dir.path().join("version.txt"), "v2").expect("write");
    h.signal(nix::sys::signal::Signal::SIGHUP);
    wait_log(&h, "both slots reloaded", |l| ready_count(l) >= 4);
    wait_gone(&old);
    progress.wait(5);
    stop.store(true, Ordering::Relaxed);
    let failures: u32 = loaders.into_iter().map(|t| t.join().expect("join")).sum();
    assert_eq!(failures, 0, "requests failed during the reload");
    let mut c = h.client();
    for _ in 0..20 {
        assert_eq!(
            answer(&mut c).1.expect("answer").version,
            "v2",
            "after the switch only v2 answers"
        );
    }
    h.assert_no_errors();
}

#[test]
fn a_reload_that_fails_keeps_the_old_generation() {
    let dir = app_dir("v1");
    let h = run(dir.path(), "1", &[]);
    wait_log(&h, "a ready instance", |l| ready_count(l) >= 1);
    std::fs::write(dir.path().join("version.txt"), "broken").expect("write");
    h.signal(nix::sys::signal::Signal::SIGHUP);
    wait_log(&h, "the failed reload", |l| l.contains("reload failed"));
    let mut c = h.client();
    for _ in 0..10 {
        let (status, a) = answer(&mut c);
        assert_eq!((status, a.expect("answer").version.as_str()), (200, "v1"));
    }
}

#[test]
fn a_crash_loop_is_stopped_and_reported_and_requests_get_503_at_once() {
    // Ready, then gone 100 ms later, again and again. The queue timeout is
    // longer than the client waits: a request that waited in the queue for
    // an instance that will never come would fail the test.
    let dir = app_dir("crashy");
    let h = run(dir.path(), "1", &["--proxy-queue-timeout", "60s"]);
    wait_log(&h, "the crash loop report", |l| l.contains("crash loop"));
    let r = h.client().get("/", &[]);
    assert_eq!(r.status, 503, "the app is down: 503 without waiting");
    assert!(r.text().contains("the app is down"), "{}", r.text());
    assert_eq!(
        h.client().get("/hello.txt", &[]).status,
        200,
        "static files still served"
    );
    let (ok, status) = hayate_in(dir.path(), &["status"]);
    assert!(ok && status.contains("crash-loop"), "{status}");
    assert!(
        status.contains("exit code 4"),
        "the last exit reason: {status}"
    );
}

#[test]
fn the_app_is_not_given_the_shared_key() {
    let dir = app_dir("v1");
    let key = "5f1e9c0a7b3d2e8f4a6c1b9d0e7f3a2c8b5d4e1f6a9c0b7d2e3f8a1c4b6d9e0f";
    let args = [
        "run",
        "--listen",
        "127.0.0.1:0",
        "--workers",
        "1",
        "--",
        "node",
        "app.js",
    ];
    let h = Hayate::start_in(BIN, &args, &[("HAYATE_SHARED_KEY", key)], Some(dir.path()));
    wait_log(&h, "a ready instance", |l| ready_count(l) >= 1);
    assert_eq!(h.client().get("/shared-key", &[]).text(), "undefined");
}

#[test]
fn an_app_that_cannot_start_fails_run_with_the_reason() {
    let dir = app_dir("broken");
    for (command, reason) in [
        (&["no-such-command-here"][..], "no-such-command-here"),
        (
            &["node", "app.js"][..],
            "exited before it was ready (exit status: 1)",
        ),
    ] {
        let out = std::process::Command::new(BIN)
            .args(["run", "--listen", "127.0.0.1:0", "--instances", "2", "--"])
            .args(command)
            .current_dir(dir.path())
            .output()
            .expect("hayate run");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{stdout}{stderr}");
        assert!(!stdout.contains("serving"), "{stdout}");
        assert!(
            stderr.contains("the app did not start") && stderr.contains(reason),
            "{stderr}"
        );
    }
}

#[test]
fn exit_leaves_no_child_process() {
    let dir = app_dir("v1");
    let mut h = run(dir.path(), "2", &[]);
    wait_log(&h, "two ready instances", |l| ready_count(l) >= 2);
    let mut c = h.client();
    let pids: HashSet<i32> = (0..6)
        .map(|_| answer(&mut c).1.expect("answer").pid)
        .collect();
    assert_eq!(pids.len(), 2);
    drop(c);
    assert!(h.stop().success());
    for pid in pids {
        assert!(!alive(pid), "app pid {pid} outlived hayate");
    }
}

#[test]
fn stopping_while_an_instance_starts_stops_it_at_once() {
    // An app that never listens: its start would wait the whole start
    // timeout (60 s here). Stopping hayate must not.
    let dir = app_dir("v1");
    let mut h = run_command(
        dir.path(),
        "1",
        &["--app-start-timeout", "60s"],
        &[
            "node",
            "-e",
            "console.log('starting'); setInterval(() => {}, 1000)",
        ],
    );
    wait_log(&h, "the app's first line", |l| {
        l.contains("stdout: starting")
    });
    let log = h.stderr();
    let pid: i32 = log
        .split(" pid ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|p| p.parse().ok())
        .expect("the app's pid in the log");
    assert!(alive(pid));
    let t0 = Instant::now();
    assert!(h.stop().success());
    assert!(
        t0.elapsed() < Duration::from_secs(20),
        "stop waited {:?} for the start timeout",
        t0.elapsed()
    );
    assert!(!alive(pid), "app pid {pid} outlived hayate");
    assert!(
        !h.stderr().contains("failed to start"),
        "a stop is not a failed start:\n{}",
        h.stderr()
    );
}

/// Sends requests until the answering pid differs from `pid` (bounded);
/// every request must succeed.
fn until_replaced(c: &mut Client, pid: i32) {
    let deadline = Instant::now() + Duration::from_secs(8);
    loop {
        let (status, a) = answer(c);
        assert_eq!(
            status, 200,
            "a request failed while the instance was recycled"
        );
        let a = a.expect("answer");
        if a.pid != pid {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "instance {pid} was never replaced"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn instances_are_recycled_after_max_requests_and_over_max_memory() {
    let dir = app_dir("v1");
    let h = run(dir.path(), "1", &["--app-max-requests", "20"]);
    wait_log(&h, "a ready instance", |l| ready_count(l) >= 1);
    let mut c = h.client();
    let first = answer(&mut c).1.expect("answer").pid;
    until_replaced(&mut c, first);
    // Replaced first, then drained and stopped: give the stop its moment.
    let deadline = Instant::now() + Duration::from_secs(5);
    while alive(first) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!alive(first), "the recycled instance was stopped");
    assert!(h.stderr().contains("requests, its limit"), "{}", h.stderr());
    drop(h);

    let h = run(dir.path(), "1", &["--app-max-memory", "80MiB"]);
    wait_log(&h, "a ready instance", |l| ready_count(l) >= 1);
    let mut c = h.client();
    let pid = answer(&mut c).1.expect("answer").pid;
    assert_eq!(c.get("/grow", &[]).text(), "grown");
    until_replaced(&mut c, pid);
    assert!(
        h.stderr().contains("over its 80 MiB limit"),
        "{}",
        h.stderr()
    );
    h.assert_no_errors();
}

#[test]
fn app_output_goes_to_a_rotated_file() {
    let dir = app_dir("v1");
    let logs = tempfile::tempdir().expect("tempdir");
    let log = logs.path().join("app.log");
    let h = run(
        dir.path(),
        "1",
        &[
            "--app-log",
            log.to_str().expect("utf8"),
            "--app-log-size",
            "2KiB",
            "--app-log-keep",
            "2",
        ],
    );
    wait_log(&h, "a ready instance", |l| ready_count(l) >= 1);
    let mut c = h.client();
    for _ in 0..3 {
        assert_eq!(c.get("/chatter", &[]).text(), "said");
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("chatter line 199")
        && !std::fs::read_to_string(logs.path().join("app.log.1"))
            .unwrap_or_default()
            .contains("chatter line 199")
    {
        assert!(
            Instant::now() < deadline,
            "app output never reached the log file"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut names: Vec<String> = std::fs::read_dir(logs.path())
        .expect("ls")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into())
        .collect();
    names.sort();
    assert_eq!(
        names,
        vec!["app.log", "app.log.1", "app.log.2"],
        "rotated, at most 2 kept"
    );
    for n in &names {
        let size = std::fs::metadata(logs.path().join(n)).expect("stat").len();
        assert!(size <= 2048, "{n}: {size} bytes");
    }
    let text = std::fs::read_to_string(&log).expect("read");
    assert!(
        text.lines()
            .all(|l| l.contains(" app[0] pid ") && l.contains(" stdout: ")),
        "{text}"
    );
    assert!(
        !h.stderr().contains("chatter line"),
        "app output stays out of hayate's log"
    );
}

#[test]
fn an_http_readiness_probe_gates_traffic() {
    let dir = app_dir("v1");
    let h = run(dir.path(), "1", &["--app-ready-path", "/ready"]);
    // The app answers /ready with 503 for its first 300 ms: hayate must not
    // call it ready before (`hayate run` says it serves once it is).
    let (status, a) = answer(&mut h.client());
    assert_eq!(status, 200);
    let a = a.expect("answer");
    assert_eq!(a.version, "v1");
    // Measured by the app itself, so Node's own start-up time cannot pass
    // for the probe's wait.
    assert!(
        a.uptime_ms >= 300,
        "served {} ms after the app booted, before /ready answered 200",
        a.uptime_ms
    );
    h.assert_no_errors();
}

#[test]
fn active_health_checks_probe_the_instances() {
    let dir = app_dir("v1");
    let h = run(
        dir.path(),
        "2",
        &[
            "--proxy-health-check",
            "/health",
            "--proxy-health-interval",
            "100ms",
        ],
    );
    wait_log(&h, "two ready instances", |l| ready_count(l) >= 2);
    // Probes reach the instances themselves (a slot's member address only
    // names it), so none fails and the app counts them.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut c = h.client();
    loop {
        let r = c.get("/health-checks", &[]);
        assert_eq!(r.status, 200);
        if r.text().parse::<u32>().unwrap_or(0) >= 3 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the instances were not probed; log:\n{}",
            h.stderr()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        !h.stderr().contains("failed its health check"),
        "{}",
        h.stderr()
    );
    for _ in 0..4 {
        let (status, a) = answer(&mut c);
        assert_eq!(status, 200);
        assert_eq!(a.expect("app answer").version, "v1");
    }
    h.assert_no_errors();
}

#[test]
fn status_reload_and_stop_over_the_control_socket() {
    let dir = app_dir("v1");
    let mut h = run(dir.path(), "2", &[]);
    wait_log(&h, "two ready instances", |l| ready_count(l) >= 2);
    let (ok, status) = hayate_in(dir.path(), &["status"]);
    assert!(ok, "{status}");
    let rows: Vec<&str> = status.lines().filter(|l| l.contains(" ready ")).collect();
    assert_eq!(rows.len(), 2, "{status}");
    std::fs::write(dir.path().join("version.txt"), "v2").expect("write");
    let (ok, answer) = hayate_in(dir.path(), &["reload"]);
    assert!(ok && answer.contains("reloading"), "{answer}");
    wait_log(&h, "both slots reloaded", |l| ready_count(l) >= 4);
    assert_eq!(answer_of(&h).version, "v2");
    let (ok, answer) = hayate_in(dir.path(), &["stop"]);
    assert!(ok && answer.contains("stopping"), "{answer}");
    assert!(h.wait().success());
    let (ok, answer) = hayate_in(dir.path(), &["status"]);
    assert!(!ok && answer.contains("no hayate"), "{answer}");
}

fn answer_of(h: &Hayate) -> Answer {
    answer(&mut h.client()).1.expect("answer")
}

fn nix_kill(pid: i32) {
    let status = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
}

/// Runs `hayate ARGS` in `dir` (`check`, and the control client: `status`,
/// `reload`, `stop`), returning success and output.
fn hayate_in(dir: &Path, args: &[&str]) -> (bool, String) {
    run_to_end(std::process::Command::new(BIN).args(args).current_dir(dir))
}

const APP_TOML: &str = r#"listen = "127.0.0.1:0"
workers = 1
root = "public"

[app]
command = ["node", "app.js"]
instances = 2
start_timeout = "10s"

[app.env]
GREETING = "hello"
"#;

#[test]
fn an_app_section_in_the_config_file_runs_the_app_and_flags_override_it() {
    let dir = app_dir("v1");
    std::fs::write(dir.path().join("hayate.toml"), APP_TOML).expect("write");
    let (ok, out) = hayate_in(dir.path(), &["check", "hayate.toml"]);
    assert!(ok, "{out}");
    let h = Hayate::start_in(BIN, &["--config", "hayate.toml"], &[], Some(dir.path()));
    wait_log(&h, "two ready instances", |l| ready_count(l) >= 2);
    let mut c = h.client();
    assert_eq!(c.get("/hello.txt", &[]).text(), "static\n", "root first");
    let env = c.get("/env", &[]).text();
    let port = env.strip_prefix("hello ").map(str::parse::<u16>);
    assert!(matches!(port, Some(Ok(_))), "env and a port number: {env}");
    assert_eq!(answer(&mut c).1.expect("answer").version, "v1");
    let (_, status) = hayate_in(dir.path(), &["status"]);
    assert_eq!(
        status.lines().filter(|l| l.contains(" ready ")).count(),
        2,
        "{status}"
    );
    drop(c);
    drop(h);

    // hayate run: the file is the base, flags win.
    let h = Hayate::start_in(
        BIN,
        &["run", "--config", "hayate.toml", "--instances", "1"],
        &[],
        Some(dir.path()),
    );
    wait_log(&h, "a ready instance", |l| ready_count(l) >= 1);
    let (_, status) = hayate_in(dir.path(), &["status"]);
    let rows = status
        .lines()
        .filter(|l| l.starts_with(char::is_numeric))
        .count();
    assert_eq!(rows, 1, "--instances overrides the file: {status}");
    assert_eq!(
        h.client().get("/env", &[]).text().split(' ').next(),
        Some("hello")
    );
    h.assert_no_errors();
}

#[test]
fn the_demo_config_is_valid() {
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/demo");
    let (ok, out) = hayate_in(&demo, &["check", "hayate.toml"]);
    assert!(ok, "{out}");
}

#[test]
fn check_reports_bad_app_keys_with_file_and_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (text, want) in [
        (
            "[app]\ncommand = [\"node\", \"app.js\"]\nmax_memroy = \"1GiB\"\n",
            "bad.toml:3: max_memroy: unknown key (did you mean \"max_memory\"?)",
        ),
        (
            "[app]\ninstances = 2\n",
            "bad.toml:1: command: [app] needs a command",
        ),
        (
            "[app]\ncommand = \"node app.js\"\nlisten = \"udp\"\n",
            "bad.toml:3: listen: expected unix, tcp or tcp:BASE",
        ),
        (
            "[app]\ncommand = \"node app.js\"\ncwd = \"nowhere\"\n",
            "cwd: [app] directory",
        ),
    ] {
        std::fs::write(dir.path().join("bad.toml"), text).expect("write");
        let (ok, out) = hayate_in(dir.path(), &["check", "bad.toml"]);
        assert!(!ok && out.contains(want), "{text:?}: {out}");
    }
}

/// Four consecutive free loopback ports (for `tcp:BASE`), below the usual
/// ephemeral range so that no client connection takes one meanwhile.
fn free_port_base() -> u16 {
    let seed = std::process::id() as u64
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos() as u64);
    for i in 0..50u64 {
        let base = 20_000 + ((seed + i * 7_919) % 10_000) as u16;
        let held: Vec<_> = (0..4)
            .map_while(|i| std::net::TcpListener::bind(("127.0.0.1", base + i)).ok())
            .collect();
        if held.len() == 4 {
            return base;
        }
    }
    panic!("no four free consecutive ports");
}

#[test]
fn instances_can_listen_on_tcp_ports() {
    let dir = app_dir("v1");
    let h = run(dir.path(), "2", &["--app-listen", "tcp"]);
    wait_log(&h, "two ready instances", |l| ready_count(l) >= 2);
    let mut c = h.client();
    let env = c.get("/env", &[]).text();
    let port: u16 = env
        .split(' ')
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("PORT is a number: {env}"));
    assert!(port > 0);
    let mut seen = HashSet::new();
    for _ in 0..20 {
        let (status, a) = answer(&mut c);
        assert_eq!(status, 200);
        seen.insert(a.expect("answer").instance);
    }
    assert_eq!(seen.len(), 2, "both instances serve over TCP");
    assert!(h.stderr().contains("on 127.0.0.1:"), "{}", h.stderr());
    h.assert_no_errors();
    drop(c);
    drop(h);

    // tcp:BASE: slot i on BASE+i, its replacement on BASE+N+i.
    let base = free_port_base();
    let h = run(dir.path(), "2", &["--app-listen", &format!("tcp:{base}")]);
    wait_log(&h, "two ready instances", |l| ready_count(l) >= 2);
    let ports = |h: &Hayate| -> HashSet<u16> {
        let mut c = h.client();
        (0..20)
            .filter_map(|_| c.get("/env", &[]).text().split(' ').nth(1)?.parse().ok())
            .collect()
    };
    assert_eq!(
        ports(&h),
        [base, base + 1].into_iter().collect(),
        "{}",
        h.stderr()
    );
    let old = instance_pids(&mut h.client(), 2);
    h.signal(nix::sys::signal::Signal::SIGHUP);
    wait_log(&h, "both slots reloaded", |l| ready_count(l) >= 4);
    wait_gone(&old);
    assert_eq!(
        ports(&h),
        [base + 2, base + 3].into_iter().collect(),
        "{}",
        h.stderr()
    );
    h.assert_no_errors();
}

#[test]
fn a_parallel_reload_replaces_both_instances_with_no_failed_request() {
    let dir = app_dir("v1");
    // No waiting out a moment without an instance (see above).
    let h = run(
        dir.path(),
        "2",
        &[
            "--app-reload-parallel",
            "2",
            "--proxy-queue-timeout",
            "20ms",
        ],
    );
    wait_log(&h, "two ready instances", |l| ready_count(l) >= 2);
    let old = instance_pids(&mut h.client(), 2);
    let addr = h.addr;
    let stop = Arc::new(AtomicBool::new(false));
    let progress = Progress::new(3);
    let loaders: Vec<_> = (0..3)
        .map(|n| {
            let (stop, progress) = (stop.clone(), progress.clone());
            std::thread::spawn(move || {
                let mut c = Client::connect(addr);
                let (mut ok, mut failures) = (0, 0);
                let deadline = Instant::now() + Duration::from_secs(8);
                while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                    // One loader keeps slow requests in flight, so draining
                    // matters: their answer is under way, so an instance
                    // stopped before its end cuts it (the read panics).
                    let good = if n == 0 {
                        let r = c.get("/slow", &[]);
                        r.status == 200 && r.text() == "xslow"
                    } else {
                        answer(&mut c).0 == 200
                    };
                    if good {
                        ok += 1;
                    } else {
                        failures += 1;
                    }
                    progress.done(n);
                }
                (ok, failures)
            })
        })
        .collect();
    // As above: the load runs from before the reload until after the old
    // instances are stopped.
    progress.wait(2);
    std::fs::write(dir.path().join("version.txt"), "v2").expect("write");
    h.signal(nix::sys::signal::Signal::SIGHUP);
    wait_log(&h, "both slots reloaded", |l| ready_count(l) >= 4);
    wait_gone(&old);
    progress.wait(2);
    stop.store(true, Ordering::Relaxed);
    let results: Vec<(u32, u32)> = loaders
        .into_iter()
        .map(|t| {
            t.join()
                .expect("a loader's response was cut (see its panic)")
        })
        .collect();
    assert_eq!(
        results.iter().map(|r| r.1).sum::<u32>(),
        0,
        "requests failed during the reload: {results:?}"
    );
    assert!(results.iter().all(|r| r.0 > 0), "{results:?}");
    let mut c = h.client();
    for _ in 0..10 {
        assert_eq!(answer(&mut c).1.expect("answer").version, "v2");
    }
    h.assert_no_errors();
}

#[test]
fn status_shows_requests_waiting_in_the_queue() {
    // An app that never listens: hayate serves once its first second has
    // passed without a verdict, and requests wait for an instance.
    let dir = app_dir("v1");
    let h = run_command(
        dir.path(),
        "1",
        &["--proxy-queue-timeout", "3s", "--app-start-timeout", "60s"],
        &["node", "-e", "setInterval(() => {}, 1000)"],
    );
    let addr = h.addr;
    // No instance ever becomes ready: the request waits in the queue.
    let waiter = std::thread::spawn(move || Client::connect(addr).get("/", &[]).status);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (ok, status) = hayate_in(dir.path(), &["status"]);
        if ok && status.contains("queued: 1") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no queued request shown: {status}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(waiter.join().expect("join"), 503, "the queue timed out");
    let (_, status) = hayate_in(dir.path(), &["status"]);
    assert!(status.contains("queued: 0"), "{status}");
}

/// The admin listener's address, from the error log.
/// One parsed sample: name, labels, value.
type Sample = (String, Vec<(String, String)>, f64);

/// Parses the Prometheus text format strictly enough for a test: every
/// sample's family has HELP and TYPE lines before it, names are valid.
fn parse_metrics(text: &str) -> Vec<Sample> {
    let valid_name = |n: &str| {
        !n.is_empty()
            && !n.starts_with(|c: char| c.is_ascii_digit())
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    };
    let mut helped = HashSet::new();
    let mut typed = std::collections::HashMap::new();
    let mut samples = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().expect("name");
            assert!(
                valid_name(name) && helped.insert(name.to_string()),
                "{line}"
            );
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut words = rest.split(' ');
            let name = words.next().expect("name").to_string();
            let kind = words.next().expect("kind").to_string();
            assert!(helped.contains(&name), "TYPE before HELP: {line}");
            assert!(
                ["counter", "gauge", "histogram"].contains(&kind.as_str()),
                "{line}"
            );
            assert!(
                typed.insert(name, kind).is_none(),
                "family repeated: {line}"
            );
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect("sample line");
        let value: f64 = value.parse().unwrap_or_else(|_| panic!("value in {line}"));
        let (name, labels) = match series.split_once('{') {
            Some((n, l)) => {
                let l = l.strip_suffix('}').expect("closing brace");
                let labels = l
                    .split("\",")
                    .map(|kv| {
                        let (k, v) = kv.split_once("=\"").expect("label");
                        (k.to_string(), v.trim_end_matches('"').to_string())
                    })
                    .collect();
                (n.to_string(), labels)
            }
            None => (series.to_string(), Vec::new()),
        };
        assert!(valid_name(&name), "{line}");
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| {
                name.strip_suffix(s)
                    .filter(|f| typed.get(*f).is_some_and(|k| k == "histogram"))
            })
            .unwrap_or(&name);
        assert!(typed.contains_key(family), "sample without TYPE: {line}");
        samples.push((name, labels, value));
    }
    samples
}

fn value_of(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|(n, l, _)| {
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| l.iter().any(|(lk, lv)| lk == k && lv == v))
        })
        .map(|s| s.2)
}

#[test]
fn metrics_and_status_on_the_admin_listener() {
    let dir = app_dir("v1");
    let h = run(dir.path(), "2", &["--admin", "127.0.0.1:0"]);
    wait_log(&h, "two ready instances", |l| ready_count(l) >= 2);
    let admin = h.admin_addr();
    let scrape = || {
        let r = Client::connect(admin).get("/metrics", &[]);
        assert_eq!(r.status, 200);
        assert!(r
            .header("content-type")
            .is_some_and(|t| t.starts_with("text/plain")));
        parse_metrics(&r.text())
    };
    let route = [("site", "*"), ("route", "/"), ("code", "2xx")];
    let before = scrape();
    let served_before = value_of(&before, "hayate_http_requests_total", &route).expect("series");
    let mut c = h.client();
    for _ in 0..10 {
        assert_eq!(answer(&mut c).0, 200);
    }
    for _ in 0..3 {
        assert_eq!(c.get("/hello.txt", &[]).status, 200);
    }
    assert_eq!(c.get("/%00", &[]).status, 400);
    let after = scrape();
    assert_eq!(
        value_of(&after, "hayate_http_requests_total", &route),
        Some(served_before + 13.0)
    );
    assert_eq!(
        value_of(
            &after,
            "hayate_http_requests_total",
            &[("route", "-"), ("code", "4xx")]
        ),
        Some(1.0),
        "requests that matched no route are counted apart"
    );
    // The histogram: cumulative buckets, +Inf equals _count equals requests.
    let route_labels = [("site", "*"), ("route", "/")];
    let buckets: Vec<f64> = after
        .iter()
        .filter(|(n, l, _)| {
            n == "hayate_http_request_duration_seconds_bucket"
                && l.iter().any(|(k, v)| k == "route" && v == "/")
        })
        .map(|s| s.2)
        .collect();
    assert_eq!(buckets.len(), 15, "14 bounds and +Inf");
    assert!(
        buckets.windows(2).all(|w| w[0] <= w[1]),
        "cumulative: {buckets:?}"
    );
    let count = value_of(
        &after,
        "hayate_http_request_duration_seconds_count",
        &route_labels,
    )
    .expect("count");
    let total: f64 = ["1xx", "2xx", "3xx", "4xx", "5xx"]
        .iter()
        .filter_map(|c| {
            value_of(
                &after,
                "hayate_http_requests_total",
                &[("route", "/"), ("code", c)],
            )
        })
        .sum();
    assert_eq!(buckets.last().copied(), Some(count));
    assert_eq!(count, total);
    assert!(value_of(
        &after,
        "hayate_http_request_duration_seconds_sum",
        &route_labels
    )
    .is_some_and(|s| s >= 0.0));
    // The supervisor's figures.
    for i in ["0", "1"] {
        assert_eq!(
            value_of(
                &after,
                "hayate_app_instance_state",
                &[("instance", i), ("state", "ready")]
            ),
            Some(1.0)
        );
        assert!(value_of(&after, "hayate_app_instance_pid", &[("instance", i)]).is_some());
        assert!(value_of(
            &after,
            "hayate_app_instance_memory_rss_bytes",
            &[("instance", i)]
        )
        .is_some_and(|b| b > 0.0));
    }
    let served: f64 = ["0", "1"]
        .iter()
        .filter_map(|i| {
            value_of(
                &after,
                "hayate_app_instance_requests_total",
                &[("instance", i)],
            )
        })
        .sum();
    assert!(served >= 10.0, "{served}");
    assert_eq!(value_of(&after, "hayate_app_queue_depth", &[]), Some(0.0));
    assert!(value_of(&after, "hayate_connections_open", &[]).is_some_and(|n| n >= 1.0));

    let status = Client::connect(admin).get("/status", &[]);
    assert_eq!(status.status, 200);
    let text = status.text();
    assert_eq!(
        text.lines().filter(|l| l.contains(" ready ")).count(),
        2,
        "{text}"
    );
    assert!(text.contains("queued: 0"), "{text}");
    // `/` is the status page (crates/hayate/tests/status_page.rs); other
    // paths are not found.
    assert_eq!(Client::connect(admin).get("/nowhere", &[]).status, 404);
    h.assert_no_errors();
}

#[test]
fn run_with_a_config_file_without_an_app_section_takes_the_command_line() {
    let dir = app_dir("v1");
    std::fs::write(
        dir.path().join("plain.toml"),
        "listen = \"127.0.0.1:0\"\nworkers = 1\nroot = \"public\"\n",
    )
    .expect("write");
    let h = Hayate::start_in(
        BIN,
        &[
            "run",
            "--config",
            "plain.toml",
            "--instances",
            "1",
            "--",
            "node",
            "app.js",
        ],
        &[],
        Some(dir.path()),
    );
    wait_log(&h, "a ready instance", |l| ready_count(l) >= 1);
    let mut c = h.client();
    assert_eq!(c.get("/hello.txt", &[]).text(), "static\n");
    assert_eq!(answer(&mut c).1.expect("the app answers").version, "v1");
    h.assert_no_errors();
}

#[test]
fn control_commands_reach_a_hayate_started_elsewhere_only_when_told() {
    // A runtime directory of this test's own: other tests' hayates are not
    // in it.
    let runtime = tempfile::tempdir().expect("tempdir");
    let env = [("XDG_RUNTIME_DIR", runtime.path().to_str().expect("utf-8"))];
    let elsewhere = tempfile::tempdir().expect("tempdir");
    let in_dir = |dir: &Path, args: &[&str]| {
        run_to_end(
            std::process::Command::new(BIN)
                .args(args)
                .envs(env)
                .current_dir(dir),
        )
    };
    let first = app_dir("v1");
    let args = [
        "run",
        "--listen",
        "127.0.0.1:0",
        "--workers",
        "1",
        "--instances",
        "1",
        "--",
        "node",
        "app.js",
    ];
    let mut h = Hayate::start_in(BIN, &args, &env, Some(first.path()));
    // The only hayate, but started elsewhere: named, not stopped.
    let (ok, said) = in_dir(elsewhere.path(), &["stop"]);
    assert!(!ok && said.contains("no hayate was started in"), "{said}");
    assert!(said.contains(&format!("--pid {} ", h.pid())), "{said}");
    assert!(h.is_running());
    let pid = h.pid().to_string();
    let (ok, status) = in_dir(elsewhere.path(), &["status", "--pid", &pid]);
    assert!(ok && status.contains(" ready "), "{status}");
    assert!(
        status.starts_with(&format!("hayate pid {pid}, started in ")),
        "{status}"
    );
    let pid_files: Vec<String> = std::fs::read_dir(runtime.path().join("hayate"))
        .expect("control dir")
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "pid"))
        .map(|e| std::fs::read_to_string(e.path()).expect("pid file"))
        .collect();
    assert_eq!(pid_files.len(), 1, "{pid_files:?}");
    assert!(
        pid_files[0].starts_with(&format!("{}\n", h.pid())),
        "{pid_files:?}"
    );

    let second = app_dir("v2");
    let _h2 = Hayate::start_in(BIN, &args, &env, Some(second.path()));
    let (ok, said) = in_dir(elsewhere.path(), &["status"]);
    assert!(!ok && said.contains("no hayate was started in"), "{said}");
    assert_eq!(said.matches("--pid ").count(), 2, "{said}");
    // In its own directory, each finds its own.
    let (ok, status) = in_dir(second.path(), &["status"]);
    assert!(ok && status.contains(" ready "), "{status}");
    assert!(
        status.starts_with(&format!("hayate pid {}, ", _h2.pid())),
        "{status}"
    );
}

#[test]
fn a_reload_takes_the_apps_new_env_from_the_file_and_rolls_the_instances() {
    let dir = app_dir("v1");
    let file = dir.path().join("hayate.toml");
    let control = dir.path().join("control.sock");
    let with_control = |greeting: &str| {
        APP_TOML
            .replace(
                "GREETING = \"hello\"",
                &format!("GREETING = \"{greeting}\""),
            )
            .replace(
                "workers = 1\n",
                &format!("workers = 1\ncontrol = \"{}\"\n", control.display()),
            )
    };
    std::fs::write(&file, with_control("hello")).expect("write");
    let h = Hayate::start_in(BIN, &["--config", "hayate.toml"], &[], Some(dir.path()));
    wait_log(&h, "two ready instances", |l| ready_count(l) >= 2);
    assert!(h.client().get("/env", &[]).text().starts_with("hello "));
    std::fs::write(&file, with_control("bonjour")).expect("write");
    let out = std::process::Command::new(BIN)
        .args(["reload", "--control"])
        .arg(&control)
        .output()
        .expect("hayate reload");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        said.contains("[app]: command, cwd or env changed"),
        "{said}"
    );
    wait_log(&h, "both instances replaced", |l| ready_count(l) >= 4);
    let mut c = h.client();
    for _ in 0..4 {
        assert!(c.get("/env", &[]).text().starts_with("bonjour "));
    }
}
