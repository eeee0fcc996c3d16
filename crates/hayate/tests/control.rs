//! Control commands know whom they talk to: every hayate has a control
//! socket, two hayates started in one directory each have their own (also
//! when started at once, and across `hayate upgrade`), `status`, `reload`
//! and `stop` name the hayate they address and reach one started elsewhere
//! or one of several only when told (`--pid`, `--control`), and `hayate
//! list` shows them all.

// Tests block on purpose (they are clients, not the server).
#![allow(clippy::disallowed_methods)]

use std::path::Path;

use hayate_testkit::{eventually, run_to_end, site, Hayate};

const BIN: &str = env!("CARGO_BIN_EXE_hayate");

/// A runtime directory of the test's own: no other hayate's socket is in
/// it, and its hayates' are nowhere else.
struct Runtime(tempfile::TempDir);

impl Runtime {
    fn new() -> Runtime {
        Runtime(tempfile::tempdir().expect("tempdir"))
    }

    fn env(&self) -> [(&str, &str); 1] {
        [("XDG_RUNTIME_DIR", self.0.path().to_str().expect("utf-8"))]
    }

    /// `hayate ARGS` run in `dir`: whether it succeeded, and what it said.
    fn hayate_in(&self, dir: &Path, args: &[&str]) -> (bool, String) {
        run_to_end(
            std::process::Command::new(BIN)
                .args(args)
                .env_remove("HAYATE_CONTROL")
                .envs(self.env())
                .current_dir(dir),
        )
    }

    /// A hayate serving `dir`, started in `dir` with the default control
    /// socket.
    fn start(&self, dir: &Path, args: &[&str]) -> Hayate {
        Hayate::start_in(BIN, args, &self.env(), Some(dir))
    }
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

#[test]
fn hayates_of_one_directory_each_have_a_control_socket_and_are_picked_by_pid() {
    let rt = Runtime::new();
    let dir = site();
    let elsewhere = tempfile::tempdir().expect("tempdir");
    // Four plain `hayate` started at once in one directory: each claims a
    // socket of the directory's while the others do.
    let mut hayates: Vec<Hayate> = std::thread::scope(|s| {
        let started: Vec<_> = (0..4)
            .map(|_| s.spawn(|| rt.start(dir.path(), &["--workers", "1"])))
            .collect();
        started
            .into_iter()
            .map(|h| h.join().expect("started"))
            .collect()
    });
    let pids: Vec<u32> = hayates.iter().map(Hayate::pid).collect();

    // Each answers for itself, by pid, from any directory.
    for h in &hayates {
        let pid = h.pid().to_string();
        let (ok, said) = rt.hayate_in(elsewhere.path(), &["status", "--pid", &pid]);
        assert!(ok, "{said}");
        assert!(
            said.starts_with(&format!("hayate pid {pid}, started in ")),
            "{said}"
        );
        let port = format!("http://127.0.0.1:{}\n", h.addr.port());
        assert!(said.contains(&format!("listening on {port}")), "{said}");
    }
    // Without a pid, none is picked: not of the four, nor from elsewhere.
    let (ok, said) = rt.hayate_in(dir.path(), &["stop"]);
    assert!(!ok && said.contains("4 hayates were started in"), "{said}");
    for pid in &pids {
        assert!(said.contains(&format!("--pid {pid} ")), "{pid}: {said}");
    }
    let (ok, said) = rt.hayate_in(elsewhere.path(), &["reload"]);
    assert!(!ok && said.contains("no hayate was started in"), "{said}");
    assert!(pids.iter().all(|p| alive(*p)), "a guess stopped one");

    // `hayate list` shows each: pid, directory, listener.
    let (ok, list) = rt.hayate_in(elsewhere.path(), &["list"]);
    assert!(ok, "{list}");
    let dir_name = std::fs::canonicalize(dir.path()).expect("canonical");
    for h in &hayates {
        let row = list
            .lines()
            .find(|l| l.starts_with(&format!("{} ", h.pid())))
            .unwrap_or_else(|| panic!("{} not listed:\n{list}", h.pid()));
        assert!(row.contains(&dir_name.display().to_string()), "{row}");
        assert!(
            row.contains(&format!("http://127.0.0.1:{}", h.addr.port())),
            "{row}"
        );
    }

    // `stop --pid` stops that one, and leaves the others' sockets alone.
    for h in hayates.drain(..3) {
        let mut h = h;
        let (ok, said) = rt.hayate_in(dir.path(), &["stop", "--pid", &h.pid().to_string()]);
        assert!(ok && said.contains("stopping"), "{said}");
        assert!(h.wait().success(), "{}", h.stderr());
    }
    let last = &hayates[0];
    // One left in the directory: found without being told.
    let (ok, said) = rt.hayate_in(dir.path(), &["status"]);
    assert!(ok, "{said}");
    assert!(
        said.starts_with(&format!("hayate pid {}, ", last.pid())),
        "{said}"
    );
    let (ok, list) = rt.hayate_in(dir.path(), &["list"]);
    assert!(ok && list.lines().count() == 2, "{list}");
    last.assert_no_errors();
}

#[test]
fn an_upgraded_hayate_keeps_its_socket_and_a_third_one_gets_another() {
    let rt = Runtime::new();
    let dir = site();
    let config = dir.path().join("hayate.toml");
    std::fs::write(&config, "listen = \"127.0.0.1:0\"\nroot = \".\"\n").expect("write");
    let first = rt.start(dir.path(), &[]);
    let mut second = rt.start(dir.path(), &["--config", "hayate.toml"]);
    let pid = second.pid().to_string();
    // The config file is named, as an absolute path.
    let (ok, said) = rt.hayate_in(dir.path(), &["status", "--pid", &pid]);
    let abs = std::fs::canonicalize(&config).expect("canonical");
    assert!(ok, "{said}");
    assert!(
        said.lines()
            .next()
            .unwrap_or_default()
            .ends_with(&format!("config {}", abs.display())),
        "{said}"
    );
    let (ok, said) = rt.hayate_in(dir.path(), &["upgrade", "--pid", &pid]);
    assert!(ok, "{said}");
    assert!(second.wait().success(), "{}", second.stderr());
    let new_pid: u32 = said
        .split("upgraded: pid ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("the new pid in {said:?}"));
    // The new process answers for itself, on the socket it was handed.
    let (ok, said) = rt.hayate_in(dir.path(), &["status", "--pid", &new_pid.to_string()]);
    assert!(ok, "{said}");
    assert!(
        said.starts_with(&format!("hayate pid {new_pid}, ")),
        "{said}"
    );
    // A third hayate of the directory takes neither socket.
    let third = rt.start(dir.path(), &[]);
    let (ok, list) = rt.hayate_in(dir.path(), &["list"]);
    assert!(ok, "{list}");
    for pid in [first.pid(), new_pid, third.pid()] {
        assert!(
            list.lines().any(|l| l.starts_with(&format!("{pid} "))),
            "{pid}:\n{list}"
        );
    }
    let sockets: Vec<&str> = list
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().last())
        .collect();
    assert_eq!(sockets.len(), 3, "{list}");
    assert!(
        sockets
            .iter()
            .all(|s| sockets.iter().filter(|o| *o == s).count() == 1),
        "{list}"
    );
    let (ok, said) = rt.hayate_in(dir.path(), &["stop", "--pid", &new_pid.to_string()]);
    assert!(ok, "{said}");
    eventually("the upgraded hayate stops", || {
        (!alive(new_pid)).then_some(()).ok_or("running".to_string())
    });
    first.assert_no_errors();
    third.assert_no_errors();
}

#[test]
fn a_reload_that_adds_a_listener_is_seen_by_status_and_list() {
    let rt = Runtime::new();
    let dir = site();
    let config = dir.path().join("hayate.toml");
    std::fs::write(&config, "listen = \"127.0.0.1:0\"\nroot = \".\"\n").expect("write");
    let h = rt.start(dir.path(), &["--config", "hayate.toml"]);
    let sock = dir.path().join("extra.sock");
    std::fs::write(
        &config,
        format!(
            "listen = [\"127.0.0.1:0\", \"unix:{}\"]\nroot = \".\"\n",
            sock.display()
        ),
    )
    .expect("write");
    let (ok, said) = rt.hayate_in(dir.path(), &["reload"]);
    // What acts says whom on stderr (its stdout is the server's answer).
    assert!(
        ok && said.contains(&format!("\nreload: hayate pid {}, ", h.pid())),
        "{said}"
    );
    let (ok, said) = rt.hayate_in(dir.path(), &["status"]);
    assert!(ok, "{said}");
    assert!(
        said.contains(&format!("listening on http://unix:{}\n", sock.display())),
        "{said}"
    );
    h.assert_no_errors();
}
