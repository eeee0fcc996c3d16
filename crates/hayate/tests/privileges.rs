//! `user`, `group` and `app_user`: hayate binds its sockets, then runs as
//! the user it was given (every thread), and its app runs as that user too.
//! Started as root (as CI and a service are), the switch is checked in
//! /proc; started as anyone else, asking for another user is refused with
//! the reason.

// Tests block on purpose (they are clients, not the server).
#![allow(clippy::disallowed_methods)]

use std::os::unix::fs::PermissionsExt;

use hayate_testkit::{site, Hayate};

const BIN: &str = env!("CARGO_BIN_EXE_hayate");

fn is_root() -> bool {
    nix::unistd::Uid::effective().is_root()
}

/// The real, effective, saved and filesystem uids of a process or thread
/// (`/proc/PID/status`'s `Uid:` line).
fn uids(status_path: &str) -> Vec<u32> {
    let status = std::fs::read_to_string(status_path).expect("proc status");
    let line = status
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .expect("Uid line");
    line.split_whitespace()
        .skip(1)
        .map(|n| n.parse().expect("uid"))
        .collect()
}

/// A site `nobody` may read (temporary directories are owner-only).
fn readable_site() -> tempfile::TempDir {
    let dir = site();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    dir
}

fn nobody() -> u32 {
    nix::unistd::User::from_name("nobody")
        .expect("user db")
        .expect("a nobody user")
        .uid
        .as_raw()
}

#[test]
fn hayate_runs_as_its_user_once_its_sockets_are_bound() {
    let dir = readable_site();
    let root = dir.path().to_str().expect("utf-8");
    if !is_root() {
        let out = std::process::Command::new(BIN)
            .args([root, "--listen", "127.0.0.1:0", "--user", "nobody"])
            .output()
            .expect("run hayate");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{stderr}");
        assert!(stderr.contains("needs hayate to start as root"), "{stderr}");
        return;
    }
    let h = Hayate::start(BIN, &[root, "--user", "nobody", "--workers", "2"]);
    assert_eq!(h.client().get("/hello.txt", &[]).text(), "hello world\n");
    let uid = nobody();
    let tasks = std::fs::read_dir(format!("/proc/{}/task", h.pid())).expect("tasks");
    let mut threads = 0;
    for task in tasks {
        let path = task.expect("task").path().join("status");
        assert_eq!(uids(path.to_str().expect("utf-8")), [uid; 4], "{path:?}");
        threads += 1;
    }
    assert!(threads >= 3, "the main thread and two workers: {threads}");
    assert!(h.stderr().contains("running as nobody"), "{}", h.stderr());
}

#[test]
fn the_app_runs_as_hayates_user_and_an_unknown_user_is_refused() {
    let out = std::process::Command::new(BIN)
        .args(["--listen", "127.0.0.1:0", "--user", "no-such-user-here"])
        .output()
        .expect("run hayate");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("user: no user named \"no-such-user-here\""),
        "{stderr}"
    );
    if !is_root() {
        return;
    }
    let app = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(app.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::write(
        app.path().join("app.js"),
        "require('http').createServer((q, s) => s.end(`uid ${process.getuid()} home ${process.env.HOME}`))\
         .listen(process.env.PORT);",
    )
    .expect("write");
    let h = Hayate::start_in(
        BIN,
        &[
            "run",
            "--listen",
            "127.0.0.1:0",
            "--workers",
            "1",
            "--instances",
            "1",
            "--user",
            "nobody",
            "--",
            "node",
            "app.js",
        ],
        &[],
        Some(app.path()),
    );
    let answer = h.client().get("/", &[]).text();
    assert!(
        answer.starts_with(&format!("uid {} home ", nobody())),
        "{answer}"
    );
    assert_eq!(uids(&format!("/proc/{}/status", h.pid())), [nobody(); 4]);
}
