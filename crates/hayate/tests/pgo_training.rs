//! The training run of the profile-guided release build (`pgo/build`,
//! decision 0013) against this build's binary: every phase must be served
//! and checked, so a change to the command line or to an answer that the
//! training relies on shows here, not as a silently worse profile.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_hayate");

/// Runs `node pgo/train.mjs HAYATE --seconds 0.2`, bounded by a minute.
fn train(hayate: &str) -> Output {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../pgo/train.mjs");
    let child = Command::new("node")
        .arg(&script)
        .args([hayate, "--seconds", "0.2"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn node");
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(out) => out.expect("wait for node"),
        Err(_) => {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            panic!("pgo/train.mjs did not end within a minute");
        }
    }
}

#[test]
fn the_training_run_serves_every_phase() {
    let out = train(BIN);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "training failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for phase in [
        "static 1 KiB",
        "static mixed",
        "proxied GET",
        "proxied mixed",
        "https/1.1",
        "https/2",
        "h2c",
        "proxied unix",
        "fastcgi",
        "cache hit",
    ] {
        assert!(
            stdout.contains(&format!("pgo/train: {phase}: ")),
            "no phase {phase}: {stdout}"
        );
    }
    assert!(stdout.ends_with("pgo/train: done\n"), "{stdout}");
}

#[test]
fn a_binary_that_does_not_serve_fails_the_training() {
    // `true` exits at once: the training must say so, not take a profile.
    let out = train("true");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("pgo/train: front exited"), "{stderr}");
}
