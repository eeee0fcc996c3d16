//! `hayate php` as packaged PHP apps need it (issue 33), with a real
//! php-fpm: trees of symlinks out of the root followed when link and
//! target have one owner, and refused (403, a warning naming the file and
//! the option, never the front controller) when not; PHP never running as
//! root unless asked for by name; `--root PREFIX=DIR` serving a prefix's
//! files and scripts from another directory (Debian's WordPress).

// Tests block on purpose (they are clients, not the server).
#![allow(clippy::disallowed_methods)]

use std::os::unix::fs::{lchown, symlink, PermissionsExt};
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

/// A packaged app: its root links into shared trees, as phpMyAdmin's does
/// into /usr/share/javascript and /etc.
fn packaged_app(base: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let root = base.join("app");
    let shared = base.join("share");
    write_tree(
        &root,
        &[
            (
                "index.php",
                "<?php echo 'front controller for ', $_SERVER['REQUEST_URI'];\n",
            ),
            ("own.css", "own"),
        ],
    );
    write_tree(
        &shared,
        &[
            ("javascript/jquery/jquery.js", "jquery"),
            ("themes/style.css", "body{}"),
            ("tool.php", "<?php echo 'tool ran';\n"),
            ("secret.txt", "root's secret"),
            ("secret.php", "<?php echo 'secret ran';\n"),
        ],
    );
    // Links of one owner (the test's) to files of that owner.
    symlink(shared.join("javascript/jquery"), root.join("jquery")).expect("symlink");
    symlink(shared.join("themes/style.css"), root.join("style.css")).expect("symlink");
    symlink(shared.join("tool.php"), root.join("tool.php")).expect("symlink");
    (root, shared)
}

#[test]
fn symlinks_out_of_the_root_are_followed_when_link_and_target_share_an_owner() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (root, shared) = packaged_app(dir.path());
    let root_arg = root.to_str().expect("utf-8");
    let start = |args: &[&str]| {
        let mut all = vec!["php", root_arg, "--workers", "1"];
        all.extend_from_slice(args);
        Hayate::start(BIN, &all)
    };
    let h = start(&[]);
    let mut c = h.client();
    let r = c.get("/jquery/jquery.js", &[]);
    assert_eq!((r.status, r.text().as_str()), (200, "jquery"));
    assert!(r.header("etag").is_some(), "served as a file");
    assert_eq!(c.get("/style.css", &[]).text(), "body{}");
    assert_eq!(c.get("/tool.php", &[]).text(), "tool ran");
    assert_eq!(
        c.get("/nothing/here", &[]).text(),
        "front controller for /nothing/here"
    );
    h.assert_no_errors();
    drop(h);

    if is_root() {
        // What a web user uploads: its own links to files of root's.
        let nobody = uid_of("nobody");
        symlink(shared.join("secret.txt"), root.join("passwd.css")).expect("symlink");
        symlink(shared.join("secret.php"), root.join("evil.php")).expect("symlink");
        symlink(shared.join("themes"), root.join("uploaded")).expect("symlink");
        for link in ["passwd.css", "evil.php", "uploaded"] {
            lchown(root.join(link), Some(nobody), None).expect("lchown");
        }
        let h = start(&[]);
        let mut c = h.client();
        for (path, refused) in [
            ("/passwd.css", root.join("passwd.css")),
            ("/evil.php", root.join("evil.php")),
            ("/uploaded/style.css", root.join("uploaded/style.css")),
        ] {
            let r = c.get(path, &[]);
            assert_eq!(r.status, 403, "{path}: {}", r.text());
            assert!(!r.text().contains("front controller"), "{path}");
            assert!(!r.text().contains("secret"), "{path}");
            warned(&h, &refused.display().to_string(), "symlinks = \"always\"");
        }
        // The packaged links still work beside them.
        assert_eq!(c.get("/jquery/jquery.js", &[]).text(), "jquery");
        drop(h);
        // `always` follows them all; so does the old spelling's `true`.
        for args in [
            &["--symlinks", "always"][..],
            &["--symlinks-outside-root"][..],
        ] {
            let h = start(args);
            let mut c = h.client();
            assert_eq!(
                c.get("/passwd.css", &[]).text(),
                "root's secret",
                "{args:?}"
            );
            assert_eq!(c.get("/evil.php", &[]).text(), "secret ran", "{args:?}");
        }
    }

    // `never` refuses even a packaged app's links, and says so.
    for args in [
        &["--symlinks", "never"][..],
        &["--symlinks-outside-root=false"][..],
    ] {
        let h = start(args);
        let mut c = h.client();
        for path in ["/jquery/jquery.js", "/style.css", "/tool.php"] {
            let r = c.get(path, &[]);
            assert_eq!(r.status, 403, "{args:?} {path}: {}", r.text());
        }
        assert_eq!(c.get("/own.css", &[]).text(), "own");
        warned(&h, "style.css", "symlinks = \"never\"");
    }
}

/// Waits for a warning that a file was refused, naming `file` and `text`
/// (the setting, what to change).
fn warned(h: &Hayate, file: &str, text: &str) {
    hayate_testkit::eventually("the warning", || {
        let log = h.stderr();
        log.lines()
            .any(|l| {
                l.contains(" WARN ")
                    && l.contains("refused")
                    && l.contains(file)
                    && l.contains(text)
            })
            .then_some(())
            .ok_or(log)
    });
}

#[test]
fn root_prefix_dir_serves_a_prefix_and_its_scripts_from_another_directory() {
    // Debian's WordPress: /usr/share/wordpress, with wp-content in
    // /var/lib/wordpress/wp-content.
    let dir = tempfile::tempdir().expect("tempdir");
    let main = dir.path().join("wordpress");
    let content = dir.path().join("wp-content");
    write_tree(
        &main,
        &[(
            "index.php",
            "<?php echo 'front for ', $_SERVER['REQUEST_URI'];\n",
        )],
    );
    write_tree(
        &content,
        &[
            ("index.php", "<?php // Silence is golden.\n"),
            ("themes/t/style.css", "theme css"),
            (
                "plugins/p/ajax.php",
                "<?php echo 'plugin ', $_SERVER['SCRIPT_FILENAME'], ' as ', $_SERVER['SCRIPT_NAME'];\n",
            ),
        ],
    );
    let prefix = format!("/wp-content/={}", content.display());
    let cli = Hayate::start(
        BIN,
        &[
            "php",
            main.to_str().expect("utf-8"),
            "--root",
            &prefix,
            "--workers",
            "1",
        ],
    );
    // The same in a config file: a route with its prefix, root and
    // strip_prefix (and no front controller of its own).
    let file = dir.path().join("wordpress.toml");
    std::fs::write(
        &file,
        format!(
            "listen = \"127.0.0.1:0\"\nworkers = 1\n[[site]]\nroot = \"{}\"\n\
             [[site.route]]\nprefix = \"/wp-content/\"\nroot = \"{}\"\n\
             strip_prefix = true\nfastcgi_index = \"\"\n",
            main.display(),
            content.display()
        ),
    )
    .expect("write");
    let from_file = Hayate::start_in(
        BIN,
        &["php", "--config", file.to_str().expect("utf-8")],
        &[],
        Some(dir.path()),
    );
    for h in [cli, from_file] {
        wordpress_layout(&h, &content);
    }
}

/// What a WordPress with its wp-content in `content` needs of `h`.
fn wordpress_layout(h: &Hayate, content: &Path) {
    let mut c = h.client();
    let r = c.get("/wp-content/themes/t/style.css", &[]);
    assert_eq!((r.status, r.text().as_str()), (200, "theme css"));
    let canonical = std::fs::canonicalize(content).expect("canonical");
    assert_eq!(
        c.get("/wp-content/plugins/p/ajax.php", &[]).text(),
        format!(
            "plugin {}/plugins/p/ajax.php as /wp-content/plugins/p/ajax.php",
            canonical.display()
        )
    );
    // A missing file under the prefix is a 404, not a front controller.
    let r = c.get("/wp-content/uploads/missing.png", &[]);
    assert_eq!(r.status, 404, "{}", r.text());
    // The rest is the main root's, front controller included.
    assert_eq!(c.get("/2024/hello/", &[]).text(), "front for /2024/hello/");
    assert_eq!(c.get("/wp-contentx", &[]).text(), "front for /wp-contentx");
    h.assert_no_errors();
}
