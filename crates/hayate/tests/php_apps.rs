//! `hayate php` as packaged PHP apps need it (issue 33), with a real
//! php-fpm: PHP never running as root unless asked for by name.

// Tests block on purpose (they are clients, not the server).
#![allow(clippy::disallowed_methods)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use hayate_testkit::Hayate;

const BIN: &str = env!("CARGO_BIN_EXE_hayate");

fn is_root() -> bool {
    nix::unistd::Uid::effective().is_root()
}

fn uid_of(name: &str) -> u32 {
    nix::unistd::User::from_name(name)
        .expect("user db")
        .unwrap_or_else(|| panic!("a user named {name}"))
        .uid
        .as_raw()
}

/// Writes `files` under `dir`, every directory and file readable by all
/// (PHP runs as another user than the test's).
fn write_tree(dir: &Path, files: &[(&str, &str)]) {
    for (path, text) in files {
        let p = dir.join(path);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, text).expect("write");
    }
    open_up(dir);
}

fn open_up(dir: &Path) {
    for a in dir
        .ancestors()
        .take_while(|a| a.starts_with(std::env::temp_dir()))
    {
        if a != std::env::temp_dir() {
            std::fs::set_permissions(a, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        }
    }
    for entry in walk(dir) {
        let mode = if entry.is_dir() { 0o755 } else { 0o644 };
        std::fs::set_permissions(&entry, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).expect("read_dir") {
        let p = e.expect("entry").path();
        if p.is_dir() && !p.is_symlink() {
            out.extend(walk(&p));
        }
        out.push(p);
    }
    out
}

const WHO: &str =
    "<?php echo 'euid=', posix_geteuid(), ' uid=', posix_getuid(), ' egid=', posix_getegid();\n";

#[test]
fn php_never_runs_as_root_unless_asked_for_by_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let site = dir.path().join("site");
    write_tree(&site, &[("who.php", WHO)]);
    let site = site.to_str().expect("utf-8");
    let who = |args: &[&str]| {
        let mut all = vec!["php", site, "--workers", "1"];
        all.extend_from_slice(args);
        let h = Hayate::start(BIN, &all);
        let r = h.client().get("/who.php", &[]);
        assert_eq!(r.status, 200, "{args:?}: {}\n{}", r.text(), h.stderr());
        (r.text(), h.stderr())
    };
    if !is_root() {
        // Not root: PHP runs as the one who started hayate.
        let me = nix::unistd::geteuid().as_raw();
        assert!(who(&[]).0.starts_with(&format!("euid={me} uid={me}")));
        return;
    }
    let www = uid_of("www-data");
    let nobody = uid_of("nobody");
    for (args, uid) in [
        (&[][..], www),
        (&["--user", "www-data"][..], www),
        (&["--app-user", "www-data"][..], www),
        (&["--app-user", "nobody"][..], nobody),
    ] {
        let (text, log) = who(args);
        assert!(
            text.starts_with(&format!("euid={uid} uid={uid} ")),
            "{args:?}: {text}\n{log}"
        );
        assert!(!log.contains("PHP runs as root"), "{args:?}: {log}");
    }
    // Root by name: it runs so, with a warning.
    let (text, log) = who(&["--app-user", "root"]);
    assert!(text.starts_with("euid=0 uid=0 "), "{text}");
    assert!(
        log.contains("WARN") && log.contains("PHP runs as root"),
        "{log}"
    );
}
