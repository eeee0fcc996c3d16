//! Python programs that tests run (WSGI servers under `hayate run`, Deno
//! as PyPI ships it): their packages are pinned in a requirements file in
//! the repository and installed with pip into a virtual environment under
//! the target dir, again only when that file changes.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Makes a virtual environment at `dir` and installs `requirements` into
/// it with `pip --no-deps` (the file lists every package, pinned) unless it
/// was installed from the same file; returns `dir` (its programs are in
/// `dir/bin`).
pub fn install(requirements: &Path, dir: PathBuf) -> PathBuf {
    let wanted = std::fs::read(requirements).expect("requirements file");
    let stamp = dir.join(".installed-from-requirements");
    if std::fs::read(&stamp).ok().as_deref() == Some(&wanted[..]) {
        return dir;
    }
    run(
        Command::new("python3").arg("-m").arg("venv").arg(&dir),
        "python3 -m venv (Debian: apt-get install python3-venv)",
    );
    run(
        Command::new(dir.join("bin/pip"))
            .args([
                "install",
                "-q",
                "--disable-pip-version-check",
                "--no-deps",
                "-r",
            ])
            .arg(requirements),
        "pip install (the first run installs from PyPI, which must be reachable then)",
    );
    std::fs::write(&stamp, &wanted).expect("stamp");
    dir
}

fn run(cmd: &mut Command, what: &str) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
