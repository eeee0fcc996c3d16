//! The training run of the profile-guided release build (`pgo/build`,
//! decision 0013) against this build's binary: every phase must be served
//! and checked, so a change to the command line or to an answer that the
//! training relies on shows here, not as a silently worse profile.

use std::path::Path;
use std::process::Command;

use hayate_testkit::run_to_end;

const BIN: &str = env!("CARGO_BIN_EXE_hayate");

/// Runs `node pgo/train.mjs HAYATE --seconds 0.2 --h3load H3LOAD` (bench/h3load,
/// installed by `scripts/test`): whether it succeeded, and its output. The
/// script bounds itself (every answer within 10 s, every start within 30 s),
/// so it ends whatever hayate does.
fn train(hayate: &str) -> (bool, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../pgo/train.mjs");
    let h3load = hayate_testkit::pebble::go_binary("h3load", ". in bench/h3load");
    run_to_end(
        Command::new("node")
            .arg(&script)
            .args([hayate, "--seconds", "0.2", "--h3load"])
            .arg(h3load),
    )
}

#[test]
fn the_training_run_serves_every_phase() {
    let (ok, out) = train(BIN);
    assert!(ok, "training failed: {out}");
    for phase in [
        "static 1 KiB",
        "static mixed",
        "proxied GET",
        "proxied mixed",
        "https/1.1",
        "https/2",
        "http/3 static",
        "http/3 proxied",
        "h2c",
        "proxied unix",
        "fastcgi",
        "site rules, X-Accel-Redirect",
        "cache hit",
    ] {
        assert!(
            out.contains(&format!("pgo/train: {phase}: ")),
            "no phase {phase}: {out}"
        );
    }
    assert!(out.contains("pgo/train: done\n"), "{out}");
}

#[test]
fn a_binary_that_does_not_serve_fails_the_training() {
    // `true` exits at once: the training must say so, not take a profile.
    let (ok, out) = train("true");
    assert!(!ok);
    assert!(out.contains("pgo/train: front exited"), "{out}");
}
