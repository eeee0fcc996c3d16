//! Real Node applications from npm under `hayate run` with its defaults
//! (issue 33): Fastify, Express and Koa take the port hayate gives them
//! and listen on loopback only; `next build && next start` serves its page;
//! socket.io with two instances exchanges messages with a real
//! socket.io-client over polling and over WebSocket; an app that fails on
//! its port says what to do; an app found listening beyond loopback is
//! warned about.
//!
//! The apps live in tests/apps/ (one package.json, its lockfile
//! committed). They are installed once, with `npm ci`, into
//! target/tmp/node-apps (again only when the lockfile changes); the Next.js
//! app is built there once (again only when its source changes).

// Tests block on purpose (they are clients, not the server).
#![allow(clippy::disallowed_methods)]

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use hayate_testkit::{eventually, Hayate};

const BIN: &str = env!("CARGO_BIN_EXE_hayate");

/// The apps' sources, in the repository.
const SOURCES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/apps");

/// The apps with their node_modules, installed on first use.
fn apps() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("node-apps");
        hayate_testkit::node::install(Path::new(SOURCES), dir)
    })
}

/// The Next.js app, built (`next build`) once per change of its source.
fn next_app() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = apps().join("next-app");
        let source = std::fs::read(dir.join("pages/index.js")).expect("page");
        let stamp = dir.join(".next/built-from");
        if std::fs::read(&stamp).ok().as_deref() == Some(&source[..]) {
            return dir;
        }
        let out = Command::new("node")
            .args(["../node_modules/next/dist/bin/next", "build"])
            .env("NEXT_TELEMETRY_DISABLED", "1")
            .current_dir(&dir)
            .output()
            .expect("node");
        assert!(
            out.status.success(),
            "next build: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::write(&stamp, &source).expect("stamp");
        dir
    })
}

/// `hayate run` of `command` in `dir` on an ephemeral port, with `extra`
/// options and otherwise its defaults.
fn run(dir: &Path, extra: &[&str], command: &[&str]) -> Hayate {
    let mut args = vec!["run", "--listen", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    args.push("--");
    args.extend_from_slice(command);
    Hayate::start_in(BIN, &args, &[], Some(dir))
}

fn wait_ready(h: &Hayate, instances: usize) {
    eventually("instances ready", || {
        let log = h.stderr();
        let ready = log.lines().filter(|l| l.contains(" ready (pid ")).count();
        (ready >= instances)
            .then_some(())
            .ok_or_else(|| format!("{ready} of {instances} ready; log:\n{log}"))
    });
}

/// An address of this machine beyond loopback (the one its default route
/// leaves from: a UDP connect sends nothing), if it has one.
fn outside_address() -> Option<IpAddr> {
    let probe = UdpSocket::bind("0.0.0.0:0").ok()?;
    probe.connect("203.0.113.1:9").ok()?;
    let ip = probe.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

/// The warning hayate logs for an instance listening beyond loopback.
const EXPOSED: &str = "reachable from other interfaces";

/// `script` (answering `NAME instance I port P`) under `hayate run` with
/// two instances: both serve, PORT is a number, and the instances cannot
/// be reached from another interface.
fn serves_on_loopback_only(script: &str, name: &str) {
    let h = run(
        apps(),
        &["--workers", "1", "--instances", "2"],
        &["node", script],
    );
    wait_ready(&h, 2);
    let mut c = h.client();
    let mut ports = HashSet::new();
    for _ in 0..4 {
        let r = c.get("/", &[]);
        let text = r.text();
        assert_eq!(r.status, 200, "{text}\n{}", h.stderr());
        let words: Vec<&str> = text.split(' ').collect();
        assert_eq!(words.first(), Some(&name), "{text}");
        let port: u16 = words[4]
            .parse()
            .unwrap_or_else(|_| panic!("PORT is a number: {text}"));
        ports.insert(port);
    }
    assert_eq!(ports.len(), 2, "both instances serve: {ports:?}");
    if let Some(ip) = outside_address() {
        for port in &ports {
            let outside = SocketAddr::new(ip, *port);
            assert!(
                TcpStream::connect_timeout(&outside, Duration::from_secs(1)).is_err(),
                "{name} is reachable at {outside}, around hayate"
            );
        }
    }
    assert!(!h.stderr().contains(EXPOSED), "{}", h.stderr());
    h.assert_no_errors();
}

#[test]
fn fastify_bound_to_every_interface_takes_the_port_and_stays_on_loopback() {
    serves_on_loopback_only("fastify.js", "fastify");
}

#[test]
fn express_takes_the_port_and_stays_on_loopback() {
    serves_on_loopback_only("express.js", "express");
}

#[test]
fn koa_takes_the_port_and_stays_on_loopback() {
    serves_on_loopback_only("koa.js", "koa");
}

#[test]
fn next_build_and_next_start_serve_the_page() {
    let dir = next_app();
    let h = run(
        dir,
        &["--workers", "1", "--instances", "2"],
        &["node", "../node_modules/next/dist/bin/next", "start"],
    );
    wait_ready(&h, 2);
    let mut c = h.client();
    let mut seen = HashSet::new();
    for _ in 0..4 {
        let r = c.get("/", &[]);
        let page = r.text();
        assert_eq!(r.status, 200, "{page}");
        let at = page.find("next page from instance").expect("the page");
        seen.insert(page[at..at + 40].to_string());
    }
    assert_eq!(seen.len(), 2, "both instances render: {seen:?}");
    assert!(!h.stderr().contains(EXPOSED), "{}", h.stderr());
    h.assert_no_errors();
}

#[test]
fn an_app_listening_beyond_loopback_is_warned_about_with_the_fix() {
    // A server the Node preload does not reach (as a Python or Go one):
    // Express on every interface.
    let h = run(
        apps(),
        &["--workers", "1", "--instances", "1"],
        &["env", "-u", "NODE_OPTIONS", "node", "express.js"],
    );
    wait_ready(&h, 1);
    eventually("the warning", || {
        let log = h.stderr();
        log.lines()
            .find(|l| l.contains(EXPOSED))
            .map(str::to_string)
            .ok_or(log)
    });
    let log = h.stderr();
    let warning = log.lines().find(|l| l.contains(EXPOSED)).expect("warning");
    assert!(warning.contains("WARN"), "{warning}");
    assert!(warning.contains("listens on [::]:") || warning.contains("listens on 0.0.0.0:"));
    assert!(
        warning.contains("127.0.0.1 (the HOST variable"),
        "{warning}"
    );
}

/// What `hayate run ARGS` says of an app that fails at start on its port:
/// hayate exits with it when the app fails within a second, else logs it
/// at each failed start (a slow machine starts Node in more than that).
fn port_failure(args: &[&str]) -> String {
    let logs = tempfile::tempdir().expect("tempdir");
    let log = logs.path().join("stderr");
    let mut hayate = Command::new(BIN)
        .args(["run", "--listen", "127.0.0.1:0", "--workers", "1"])
        .args(args)
        .current_dir(apps())
        .env("HAYATE_CONTROL", logs.path().join("control.sock"))
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("hayate run");
    let said = eventually("the port error's fix", || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        text.lines()
            .find(|l| l.contains("because of its port"))
            .map(str::to_string)
            .ok_or(text)
    });
    let _ = hayate.kill();
    let _ = hayate.wait();
    said
}

#[test]
fn an_app_that_wants_a_port_number_on_a_unix_socket_is_told_the_flag() {
    let said = port_failure(&["--app-listen", "unix", "--", "node", "fastify.js"]);
    assert!(said.contains("wants a TCP port number"), "{said}");
    assert!(said.contains("--app-listen tcp"), "{said}");
}

#[test]
fn an_app_on_a_fixed_port_in_use_is_told_to_use_port() {
    let taken = TcpListener::bind("127.0.0.1:0").expect("bind");
    let fixed = format!("PORT={}", taken.local_addr().expect("addr").port());
    let said = port_failure(&["--", "env", &fixed, "node", "express.js"]);
    assert!(said.contains("EADDRINUSE"), "{said}");
    assert!(said.contains("not a fixed one"), "{said}");
}

/// The socket.io client's run against `url`: its answers, then the
/// transport it ended on.
fn socketio_client(url: &str, transports: &str, messages: usize) -> Vec<String> {
    let out = Command::new("node")
        .args(["socketio-client.js", url, transports, &messages.to_string()])
        .current_dir(apps())
        .output()
        .expect("node");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "socket.io client over {transports}: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout.lines().map(str::to_string).collect()
}

#[test]
fn socketio_with_the_default_two_instances_works_over_polling_and_websocket() {
    // Two workers: two instances by default.
    let h = run(apps(), &["--workers", "2"], &["node", "socketio-server.js"]);
    wait_ready(&h, 2);
    let url = format!("http://{}", h.addr);
    for (transports, ends_on) in [
        ("polling", "polling"),
        ("websocket", "websocket"),
        ("both", "websocket"),
    ] {
        let lines = socketio_client(&url, transports, 5);
        let (last, answers) = lines.split_last().expect("output");
        assert_eq!(last, &format!("transport {ends_on}"), "{lines:?}");
        assert_eq!(answers.len(), 5, "{lines:?}");
        let instances: HashSet<&str> = answers
            .iter()
            .map(|a| a.split(' ').nth(1).unwrap_or(""))
            .collect();
        assert_eq!(instances.len(), 1, "one session, one instance: {answers:?}");
        for (i, a) in answers.iter().enumerate() {
            assert!(a.ends_with(&format!("heard message {i}")), "{a}");
        }
    }
    h.assert_no_errors();
}

#[test]
fn socketio_on_instances_that_take_turns_fails_and_the_log_names_sticky() {
    let h = run(
        apps(),
        &[
            "--workers",
            "1",
            "--instances",
            "2",
            "--proxy-balance",
            "round_robin",
        ],
        &["node", "socketio-server.js"],
    );
    wait_ready(&h, 2);
    let out = Command::new("node")
        .args([
            "socketio-client.js",
            &format!("http://{}", h.addr),
            "polling",
            "2",
        ])
        .current_dir(apps())
        .output()
        .expect("node");
    assert!(
        !out.status.success(),
        "the handshake's instance is not the next one's"
    );
    eventually("the warning", || {
        let log = h.stderr();
        log.contains("set proxy_balance = \"sticky\"")
            .then_some(())
            .ok_or(log)
    });
}
