//! Site policy end to end (issue "Site policy, part 1"): the client behind
//! a trusted proxy, allow/deny, and basic auth with htpasswd files made by
//! Apache's `htpasswd` (installed by .ci/run), over HTTP/1.1 and HTTP/2
//! (curl, h2c with prior knowledge), whatever the path's encoding.

// Tests block on purpose (they are clients, not the server).
#![allow(clippy::disallowed_methods)]

use std::path::Path;
use std::process::Command;

use hayate_testkit::origin::{Echo, Origin, OriginOptions};
use hayate_testkit::{eventually, run_to_end, Hayate};

const BIN: &str = env!("CARGO_BIN_EXE_hayate");

/// A config file in `dir` made of `text`, started.
fn start(dir: &Path, text: &str) -> Hayate {
    Hayate::start_config(BIN, &dir.join("hayate.toml"), text)
}

/// A site: files under `dir/www` (with `/private/secret.txt`), `/admin/`
/// proxied to `origin` for the office's addresses only, `/private/` behind
/// basic auth from `htpasswd` when given; `extra` global lines first.
fn site(dir: &Path, origin: &Origin, htpasswd: Option<&Path>, extra: &str) -> String {
    let www = dir.join("www");
    std::fs::create_dir_all(www.join("private")).expect("mkdir");
    std::fs::create_dir_all(www.join("admin")).expect("mkdir");
    std::fs::write(www.join("index.html"), "home\n").expect("write");
    std::fs::write(www.join("private/secret.txt"), "secret\n").expect("write");
    std::fs::write(www.join("admin/panel.txt"), "panel\n").expect("write");
    let auth = htpasswd.map_or(String::new(), |p| {
        format!(
            "basic_auth = \"{}\"\nbasic_auth_realm = \"staff\"\n",
            p.display()
        )
    });
    format!(
        "{extra}\nlisten = [\"127.0.0.1:0\"]\naccess_log = \"{log}\"\n\
         [[site]]\nroot = \"{www}\"\n\
         [[site.route]]\nprefix = \"/admin/\"\nroot = \"{www}\"\nproxy = [\"{origin}\"]\n\
         allow = [\"203.0.113.0/24\", \"2001:db8::/32\"]\ndeny = [\"203.0.113.66\"]\n\
         [[site.route]]\nprefix = \"/private/\"\nroot = \"{www}\"\n{auth}",
        log = dir.join("access.log").display(),
        www = www.display(),
        origin = origin.url(),
    )
}

/// curl's status code for `path` on `h`, over h2c with prior knowledge
/// (`http2`) or HTTP/1.1, with `headers`.
fn curl(h: &Hayate, path: &str, http2: bool, headers: &[&str]) -> u16 {
    hayate_testkit::curl::status(h.addr.port(), path, http2, headers)
}

#[test]
fn the_client_behind_a_trusted_proxy_is_what_allow_deny_the_log_and_the_upstream_see() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = Origin::start(OriginOptions::default());
    let text = site(dir.path(), &o, None, "trusted_proxies = [\"127.0.0.0/8\"]");
    let h = start(dir.path(), &text);
    let mut c = h.client();

    // The CDN (127.0.0.1, trusted) says the client is 203.0.113.7, an
    // office address: allowed; the upstream sees that client, and the
    // spoofed left part of the chain is gone.
    let xff = [("X-Forwarded-For", "6.6.6.6, 203.0.113.7")];
    let r = c.get("/admin/echo", &xff);
    assert_eq!(r.status, 200, "{}", r.text());
    let e = Echo::parse(&r.text());
    assert_eq!(e.header("x-forwarded-for"), Some("203.0.113.7, 127.0.0.1"));
    assert_eq!(
        e.header("forwarded"),
        Some("for=203.0.113.7, for=127.0.0.1;proto=http;host=\"test\"")
    );
    // The denied one of the office, and a stranger.
    let r = c.get("/admin/echo", &[("X-Forwarded-For", "203.0.113.66")]);
    assert_eq!(r.status, 403);
    let r = c.get("/admin/echo", &[("X-Forwarded-For", "198.51.100.1")]);
    assert_eq!(r.status, 403);
    // No chain: the client is the proxy itself, not in the allow list.
    assert_eq!(c.get("/admin/echo", &[]).status, 403);
    // The IPv6 office over HTTP/2, through Forwarded.
    let fwd = "Forwarded: for=\"[2001:db8::9]:4711\"";
    assert_eq!(curl(&h, "/admin/panel.txt", true, &[fwd]), 200);
    // Everything else of the site is open.
    assert_eq!(
        c.get("/", &[("X-Forwarded-For", "198.51.100.1")]).status,
        200
    );

    // The access log names the client, not the proxy.
    let log = dir.path().join("access.log");
    eventually("the access log's lines", || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let starts: Vec<&str> = text.lines().filter_map(|l| l.split(' ').next()).collect();
        (starts.len() >= 6).then_some(()).ok_or(text.clone())?;
        for want in ["203.0.113.7", "203.0.113.66", "198.51.100.1", "2001:db8::9"] {
            if !starts.contains(&want) {
                return Err(format!("no line for {want}:\n{text}"));
            }
        }
        Ok(())
    });
    h.assert_no_errors();
}

#[test]
fn forwarded_fields_from_an_untrusted_peer_open_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = Origin::start(OriginOptions::default());
    let h = start(dir.path(), &site(dir.path(), &o, None, ""));
    let mut c = h.client();
    let xff = [("X-Forwarded-For", "203.0.113.7")];
    let r = c.get("/admin/echo", &xff);
    assert_eq!(r.status, 403, "a client naming itself is not believed");
    assert_eq!(
        curl(&h, "/admin/echo", true, &["X-Forwarded-For: 203.0.113.7"]),
        403
    );
    let fwd = "Forwarded: for=203.0.113.7";
    assert_eq!(curl(&h, "/admin/echo", false, &[fwd]), 403);
    assert_eq!(o.count("/admin/echo"), 0, "nothing reached the upstream");
    h.assert_no_errors();
}

#[test]
fn no_path_encoding_walks_around_a_rule() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = Origin::start(OriginOptions::default());
    let h = start(dir.path(), &site(dir.path(), &o, None, ""));
    for path in [
        "/admin/panel.txt",
        "/admin/../admin/panel.txt",
        "/%61dmin/panel.txt",
        "/admin%2Fpanel.txt",
        "/admin%2fpanel.txt",
        "//admin/panel.txt",
        "/x/../admin/panel.txt",
        "/%2e/admin/panel.txt",
        "/admin/./panel.txt",
        "/admin//panel.txt",
    ] {
        for http2 in [false, true] {
            let status = curl(&h, path, http2, &[]);
            assert_eq!(status, 403, "{path} (http2: {http2})");
        }
    }
    assert_eq!(o.requests(), 0, "nothing reached the upstream");
}

/// An htpasswd file made by Apache's htpasswd with `flag` (-B: bcrypt,
/// -m: MD5) holding `user:password`.
fn htpasswd(dir: &Path, flag: &str, user: &str, password: &str) -> std::path::PathBuf {
    let file = dir.join(format!("htpasswd{flag}"));
    let mut cmd = Command::new("htpasswd");
    cmd.args(["-c", "-b", flag])
        .arg(&file)
        .args([user, password]);
    let (ok, out) = run_to_end(&mut cmd);
    assert!(ok, "htpasswd (apache2-utils, installed by .ci/run): {out}");
    file
}

#[test]
fn basic_auth_lets_in_the_users_of_an_htpasswd_file_and_nobody_else() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = Origin::start(OriginOptions::default());
    let file = htpasswd(dir.path(), "-B", "alice", "wonder land");
    let h = start(dir.path(), &site(dir.path(), &o, Some(&file), ""));
    let mut c = h.client();

    let r = c.get("/private/secret.txt", &[]);
    assert_eq!(r.status, 401);
    assert_eq!(
        r.header("www-authenticate"),
        Some("Basic realm=\"staff\", charset=\"UTF-8\"")
    );
    let basic = |credential: &str| {
        use base64::Engine;
        let b64 = base64::engine::general_purpose::STANDARD.encode(credential);
        format!("Basic {b64}")
    };
    let good = basic("alice:wonder land");
    for _ in 0..3 {
        let r = c.get("/private/secret.txt", &[("Authorization", &good)]);
        assert_eq!((r.status, r.text().as_str()), (200, "secret\n"));
    }
    let long = format!("alice:{}", "x".repeat(10_000));
    for bad in [
        basic("alice:wonderland"),
        basic("alice:"),
        basic("bob:wonder land"),
        basic(&long),
        "Basic %%%garbage%%%".to_string(),
        "Digest username=\"alice\"".to_string(),
    ] {
        let r = c.get("/private/secret.txt", &[("Authorization", &bad)]);
        assert_eq!(r.status, 401, "{bad:.40}");
    }
    // HTTP/2 meets the same rule; the rest of the site is open.
    let auth = format!("Authorization: {good}");
    assert_eq!(curl(&h, "/private/secret.txt", true, &[&auth]), 200);
    assert_eq!(curl(&h, "/private/secret.txt", true, &[]), 401);
    assert_eq!(curl(&h, "/%70rivate/secret.txt", true, &[]), 401);
    assert_eq!(c.get("/", &[]).status, 200);

    // A new password in the file is the one that works, at once.
    htpasswd(dir.path(), "-B", "alice", "new password");
    eventually("the new password", || {
        let r = c.get("/private/secret.txt", &[("Authorization", &good)]);
        (r.status == 401)
            .then_some(())
            .ok_or(format!("still {}", r.status))
    });
    let new = basic("alice:new password");
    assert_eq!(
        c.get("/private/secret.txt", &[("Authorization", &new)])
            .status,
        200
    );
    h.assert_no_errors();
}

#[test]
fn check_refuses_a_weak_htpasswd_file_naming_it_and_its_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = Origin::start(OriginOptions::default());
    let weak = htpasswd(dir.path(), "-m", "bob", "secret");
    let file = dir.path().join("hayate.toml");
    std::fs::write(&file, site(dir.path(), &o, Some(&weak), "")).expect("write");
    let (ok, out) = run_to_end(Command::new(BIN).arg("check").arg(&file));
    assert!(!ok, "{out}");
    let line = std::fs::read_to_string(&file)
        .expect("config")
        .lines()
        .position(|l| l.starts_with("basic_auth ="))
        .expect("the key")
        + 1;
    let config_at = format!("{}:{line}: basic_auth:", file.display());
    assert!(out.contains(&config_at), "{out}");
    assert!(
        out.contains("line 1 (user \"bob\"): an MD5 hash is refused"),
        "{out}"
    );
    // And hayate does not start with it.
    let (ok, out) = run_to_end(
        Command::new("timeout")
            .args(["10", BIN, "--config"])
            .arg(&file),
    );
    assert!(!ok && out.contains("an MD5 hash is refused"), "{out}");
}

#[test]
fn rate_limits_count_each_client_behind_the_cdn_once_for_the_whole_box() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = Origin::start(OriginOptions::default());
    let text = format!(
        "trusted_proxies = [\"127.0.0.1\"]\nworkers = 2\nlisten = [\"127.0.0.1:0\"]\n\
         [[site]]\nproxy = [\"{}\"]\nrate_limit = \"1/m burst=2\"\n",
        o.url()
    );
    let h = start(dir.path(), &text);
    // Six connections, spread over both workers: the client's burst (and
    // its one request of the minute) is the box's, not each worker's.
    let client = [("X-Forwarded-For", "203.0.113.7")];
    let statuses: Vec<u16> = (0..6)
        .map(|_| {
            let r = h.client().get("/echo", &client);
            if r.status == 429 {
                assert_eq!(r.header("retry-after"), Some("60"));
                assert_eq!(r.header("ratelimit-policy"), Some("\"default\";q=3;w=60"));
            }
            r.status
        })
        .collect();
    assert_eq!(statuses, [200, 200, 200, 429, 429, 429]);
    // HTTP/2 meets the same count.
    assert_eq!(
        curl(&h, "/echo", true, &["X-Forwarded-For: 203.0.113.7"]),
        429
    );
    // Another client behind the same CDN has its own.
    let other = [("X-Forwarded-For", "203.0.113.8")];
    assert_eq!(h.client().get("/echo", &other).status, 200);
    assert_eq!(o.count("/echo"), 4, "refused requests never reach the app");
    h.assert_no_errors();
}

#[test]
fn a_reload_applies_new_rules_and_keeps_the_counts_of_unchanged_limits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = Origin::start(OriginOptions::default());
    let control = dir.path().join("control.sock");
    let text = |deny: &str| {
        format!(
            "listen = [\"127.0.0.1:0\"]\ncontrol = \"{control}\"\n[[site]]\nproxy = [\"{origin}\"]\n\
             [[site.route]]\nprefix = \"/limited/\"\nproxy = [\"{origin}\"]\nrate_limit = \"1/m\"\n\
             [[site.route]]\nprefix = \"/open/\"\nproxy = [\"{origin}\"]\n{deny}\n",
            control = control.display(),
            origin = o.url(),
        )
    };
    let h = start(dir.path(), &text(""));
    let mut c = h.client();
    assert_eq!(c.get("/limited/echo", &[]).status, 200);
    assert_eq!(c.get("/limited/echo", &[]).status, 429);
    assert_eq!(c.get("/open/echo", &[]).status, 200);

    let file = dir.path().join("hayate.toml");
    std::fs::write(&file, text("deny = [\"127.0.0.0/8\"]")).expect("write");
    let (ok, said) = run_to_end(
        Command::new(BIN)
            .args(["reload", "--control"])
            .arg(&control),
    );
    assert!(ok, "{said}");
    // The new rule holds on the connection opened before the reload too;
    // the unchanged limit still remembers the request of this minute.
    assert_eq!(c.get("/open/echo", &[]).status, 403);
    assert_eq!(h.client().get("/open/echo", &[]).status, 403);
    assert_eq!(h.client().get("/limited/echo", &[]).status, 429);

    // A broken htpasswd file is refused whole; the running rules stay.
    let bad = dir.path().join("bad.htpasswd");
    std::fs::write(&bad, "bob:plain\n").expect("write");
    let auth = format!("basic_auth = \"{}\"", bad.display());
    std::fs::write(&file, text(&auth)).expect("write");
    let (ok, said) = run_to_end(
        Command::new(BIN)
            .args(["reload", "--control"])
            .arg(&control),
    );
    assert!(!ok && said.contains("plain password"), "{said}");
    assert_eq!(h.client().get("/open/echo", &[]).status, 403);
}

#[test]
fn in_delay_mode_a_burst_is_queued_to_the_rate_not_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = Origin::start(OriginOptions::default());
    let text = format!(
        "listen = [\"127.0.0.1:0\"]\n[[site]]\nproxy = [\"{}\"]\nrate_limit = \"1/s burst=2 delay\"\n",
        o.url()
    );
    let h = start(dir.path(), &text);
    let addr = h.addr;
    let started = std::time::Instant::now();
    let clients: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(move || {
                let r = hayate_testkit::Client::connect(addr).get("/echo", &[]);
                (r.status, started.elapsed())
            })
        })
        .collect();
    let mut answers: Vec<(u16, std::time::Duration)> = clients
        .into_iter()
        .map(|t| t.join().expect("client"))
        .collect();
    answers.sort();
    let statuses: Vec<u16> = answers.iter().map(|a| a.0).collect();
    assert_eq!(statuses, [200, 200, 200, 429], "{answers:?}");
    // The third admitted waited two turns of a second: a lower bound only
    // (a slow machine makes it later, never sooner).
    let slowest = answers[..3].iter().map(|a| a.1).max().expect("answers");
    assert!(
        slowest >= std::time::Duration::from_millis(1800),
        "{answers:?}"
    );
    h.assert_no_errors();
}
