//! Live configuration reload end to end: `hayate reload` (and SIGHUP)
//! re-reads the config file while clients keep sending requests; a good file
//! takes effect with no failed request, a broken one is refused with its
//! errors and the running configuration stays.

// Tests block on purpose (they are clients, not the server).
#![allow(clippy::disallowed_methods)]

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use hayate_testkit::{eventually, site, Client, Hayate, Origin, OriginOptions, Response};

const BIN: &str = env!("CARGO_BIN_EXE_hayate");

/// A config file: files from `root`, `/api/` proxied to `origin` and cached
/// for `ttl` when the origin says nothing, and `extra` routes.
fn config(root: &Path, control: &Path, origin: &Origin, ttl: &str, extra: &str) -> String {
    format!(
        "listen = \"127.0.0.1:0\"\nworkers = 2\ncontrol = \"{}\"\n\
         [[site]]\nroot = \"{}\"\n\
         [[site.route]]\nprefix = \"/api/\"\nproxy = \"{}\"\ncache = \"{ttl}\"\n{extra}",
        control.display(),
        root.display(),
        origin.url(),
    )
}

/// `hayate reload --control SOCK`: whether it succeeded, and what it said.
fn reload(control: &Path) -> (bool, String) {
    hayate_testkit::run_to_end(
        std::process::Command::new(BIN)
            .args(["reload", "--control"])
            .arg(control),
    )
}

/// The `ttl=` of a response's Cache-Status.
fn cache_ttl(r: &Response) -> Option<i64> {
    r.header("cache-status")?
        .split("; ")
        .find_map(|p| p.strip_prefix("ttl="))?
        .parse()
        .ok()
}

/// Clients sending requests without pause on kept-alive connections until
/// dropped; counts answers and anything that was not a 200.
struct Load {
    stop: Arc<AtomicBool>,
    answered: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    fn start(h: &Hayate, paths: &'static [&'static str]) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let answered = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicU64::new(0));
        let threads = (0..4)
            .map(|i| {
                let (stop, answered, failed) = (stop.clone(), answered.clone(), failed.clone());
                let addr = h.addr;
                std::thread::spawn(move || {
                    let mut c = Client::connect(addr);
                    let mut n = i;
                    while !stop.load(Ordering::Relaxed) {
                        let r = c.get(paths[n % paths.len()], &[]);
                        n += 1;
                        if r.status != 200 {
                            failed.fetch_add(1, Ordering::Relaxed);
                        }
                        answered.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        Load {
            stop,
            answered,
            failed,
            threads,
        }
    }

    /// Waits until `n` more requests were answered.
    fn wait_for_more(&self, n: u64) {
        let from = self.answered.load(Ordering::Relaxed);
        eventually("requests answered under load", || {
            let now = self.answered.load(Ordering::Relaxed);
            (now >= from + n)
                .then_some(())
                .ok_or(format!("{} answered", now - from))
        });
    }

    /// Stops the clients; returns (answered, failed).
    fn finish(self) -> (u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            t.join().expect("client thread");
        }
        (
            self.answered.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
        )
    }
}

#[test]
fn a_reload_adds_a_route_and_changes_a_cache_ttl_with_no_failed_request() {
    let origin = Origin::start(OriginOptions::default());
    let root = site();
    let other = site();
    std::fs::create_dir(other.path().join("new")).expect("mkdir");
    std::fs::write(other.path().join("new/new.txt"), "from the new route\n").expect("write");
    let dir = tempfile::tempdir().expect("tempdir");
    let (file, control) = (dir.path().join("hayate.toml"), dir.path().join("c.sock"));
    std::fs::write(&file, config(root.path(), &control, &origin, "1s", "")).expect("write");
    let h = Hayate::start(BIN, &["--config", file.to_str().expect("utf-8")]);

    let mut c = h.client();
    assert_eq!(c.get("/new/new.txt", &[]).status, 404, "no such route yet");
    c.get("/api/before", &[]);
    let hit = c.get("/api/before", &[]);
    assert!(cache_ttl(&hit).is_some_and(|t| t <= 1), "{hit:?}");

    let load = Load::start(&h, &["/index.html", "/api/x", "/api/y"]);
    load.wait_for_more(200);
    let route = format!(
        "[[site.route]]\nprefix = \"/new/\"\nroot = \"{}\"\n",
        other.path().display()
    );
    std::fs::write(&file, config(root.path(), &control, &origin, "60s", &route)).expect("write");
    let (ok, said) = reload(&control);
    assert!(ok, "{said}");
    assert!(said.contains("route /new/ of site *: added"), "{said}");
    assert!(
        said.contains("route /api/ of site *: cache changed"),
        "{said}"
    );
    load.wait_for_more(200);
    let (answered, failed) = load.finish();
    assert_eq!(failed, 0, "{failed} of {answered} requests failed");

    // The new generation answers: the new route, and the new TTL for what
    // is stored from now on.
    let mut c = h.client();
    assert_eq!(c.get("/new/new.txt", &[]).text(), "from the new route\n");
    c.get("/api/after", &[]);
    let hit = c.get("/api/after", &[]);
    assert!(cache_ttl(&hit).is_some_and(|t| t > 30), "{hit:?}");
    h.assert_no_errors();
}

#[test]
fn a_broken_file_is_refused_with_its_errors_and_the_running_config_stays() {
    let origin = Origin::start(OriginOptions::default());
    let root = site();
    let dir = tempfile::tempdir().expect("tempdir");
    let (file, control) = (dir.path().join("hayate.toml"), dir.path().join("c.sock"));
    std::fs::write(&file, config(root.path(), &control, &origin, "1s", "")).expect("write");
    let h = Hayate::start(BIN, &["--config", file.to_str().expect("utf-8")]);
    let load = Load::start(&h, &["/index.html", "/api/x"]);
    load.wait_for_more(100);

    // A value that does not parse, then a root that does not exist.
    std::fs::write(
        &file,
        config(root.path(), &control, &origin, "1s", "")
            .replace("workers = 2", "workers = \"many\""),
    )
    .expect("write");
    let (ok, said) = reload(&control);
    assert!(!ok, "{said}");
    assert!(said.contains("hayate.toml:2: workers:"), "{said}");
    assert!(said.contains("running configuration stays"), "{said}");
    std::fs::write(
        &file,
        config(
            root.path(),
            &control,
            &origin,
            "1s",
            "[[site.route]]\nprefix = \"/gone/\"\nroot = \"/no/such/dir\"\n",
        ),
    )
    .expect("write");
    let (ok, said) = reload(&control);
    assert!(!ok, "{said}");
    assert!(said.contains("/no/such/dir"), "{said}");

    load.wait_for_more(100);
    let (answered, failed) = load.finish();
    assert_eq!(failed, 0, "{failed} of {answered} requests failed");
    assert_eq!(h.client().get("/index.html", &[]).status, 200);
    assert!(h.stderr().contains("reload refused"), "{}", h.stderr());
}

#[test]
fn sighup_reloads_the_file_too() {
    let origin = Origin::start(OriginOptions::default());
    let root = site();
    let dir = tempfile::tempdir().expect("tempdir");
    let (file, control) = (dir.path().join("hayate.toml"), dir.path().join("c.sock"));
    std::fs::write(&file, config(root.path(), &control, &origin, "1s", "")).expect("write");
    let h = Hayate::start(BIN, &["--config", file.to_str().expect("utf-8")]);
    assert_eq!(h.client().get("/two/index.html", &[]).status, 404);
    let route = format!(
        "[[site.route]]\nprefix = \"/two/\"\nroot = \"{}\"\nstrip_prefix = true\n",
        root.path().display()
    );
    std::fs::write(&file, config(root.path(), &control, &origin, "1s", &route)).expect("write");
    h.signal(nix::sys::signal::Signal::SIGHUP);
    eventually("the route SIGHUP added", || {
        let status = h.client().get("/two/index.html", &[]).status;
        (status == 200)
            .then_some(())
            .ok_or(format!("answered {status}"))
    });
}

#[test]
fn upstream_connections_outlive_a_reload_that_keeps_their_settings() {
    let origin = Origin::start(OriginOptions::default());
    let root = site();
    let dir = tempfile::tempdir().expect("tempdir");
    let (file, control) = (dir.path().join("hayate.toml"), dir.path().join("c.sock"));
    // One worker: one pool, whichever connection a request comes on.
    let one_worker = |extra: &str| {
        config(root.path(), &control, &origin, "1s", extra).replace("workers = 2", "workers = 1")
    };
    std::fs::write(&file, one_worker("")).expect("write");
    let h = Hayate::start(BIN, &["--config", file.to_str().expect("utf-8")]);
    assert_eq!(h.client().get("/api/one", &[]).status, 200);
    assert_eq!(origin.connections(), 1);

    let route = "[[site.route]]\nprefix = \"/elsewhere/\"\nproxy = \"http://127.0.0.1:9\"\n";
    std::fs::write(&file, one_worker(route)).expect("write");
    let (ok, said) = reload(&control);
    assert!(ok, "{said}");
    assert_eq!(h.client().get("/api/two", &[]).status, 200);
    assert_eq!(origin.connections(), 1, "the pooled connection was reused");

    // A changed proxy option makes new groups: a new connection.
    std::fs::write(
        &file,
        format!("proxy_keepalive = \"9s\"\n{}", one_worker(route)),
    )
    .expect("write");
    let (ok, said) = reload(&control);
    assert!(ok && said.contains("proxy_keepalive: changed"), "{said}");
    assert_eq!(h.client().get("/api/three", &[]).status, 200);
    assert_eq!(origin.connections(), 2);
}

#[test]
fn a_reload_adds_and_removes_listeners_and_keeps_open_connections() {
    let origin = Origin::start(OriginOptions::default());
    let root = site();
    let dir = tempfile::tempdir().expect("tempdir");
    let (file, control) = (dir.path().join("hayate.toml"), dir.path().join("c.sock"));
    let (a, b) = (
        hayate_testkit::pebble::free_port(),
        hayate_testkit::pebble::free_port(),
    );
    let listening = |ports: &[u16]| {
        let list: Vec<String> = ports.iter().map(|p| format!("\"127.0.0.1:{p}\"")).collect();
        config(root.path(), &control, &origin, "1s", "").replace(
            "listen = \"127.0.0.1:0\"",
            &format!("listen = [{}]", list.join(", ")),
        )
    };
    std::fs::write(&file, listening(&[a])).expect("write");
    let h = Hayate::start(BIN, &["--config", file.to_str().expect("utf-8")]);
    let addr = |port: u16| -> std::net::SocketAddr { ([127, 0, 0, 1], port).into() };
    let mut kept = Client::connect(addr(a));
    assert_eq!(kept.get("/hello.txt", &[]).status, 200);

    std::fs::write(&file, listening(&[a, b])).expect("write");
    let (ok, said) = reload(&control);
    assert!(ok && said.contains("listen: changed"), "{said}");
    assert_eq!(Client::connect(addr(b)).get("/hello.txt", &[]).status, 200);

    std::fs::write(&file, listening(&[b])).expect("write");
    let (ok, said) = reload(&control);
    assert!(ok, "{said}");
    eventually(
        "the removed listener refuses",
        || match std::net::TcpStream::connect(addr(a)) {
            Err(_) => Ok(()),
            Ok(_) => Err("still accepting".to_string()),
        },
    );
    assert_eq!(
        kept.get("/hello.txt", &[]).status,
        200,
        "open connections stay"
    );
    assert_eq!(Client::connect(addr(b)).get("/hello.txt", &[]).status, 200);

    // A listener that cannot be bound refuses the whole reload.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").port();
    std::fs::write(&file, listening(&[b, port])).expect("write");
    let (ok, said) = reload(&control);
    assert!(
        !ok && said.contains(&format!("listen 127.0.0.1:{port}")),
        "{said}"
    );
    assert_eq!(Client::connect(addr(b)).get("/hello.txt", &[]).status, 200);
    assert!(h.stderr().contains("reload refused"), "{}", h.stderr());
}

#[test]
fn a_reload_swaps_the_rules_with_no_failed_request() {
    let origin = Origin::start(OriginOptions::default());
    let root = site();
    let dir = tempfile::tempdir().expect("tempdir");
    let (file, control) = (dir.path().join("hayate.toml"), dir.path().join("c.sock"));
    let rules = |generation: &str, more: &str| {
        format!(
            "response_headers = {{ \"X-Generation\" = \"{generation}\" }}\n\
             [[site.rule]]\nmatch = \"^/old/(.*)$\"\nrewrite = \"/$1\"\n{more}"
        )
    };
    let text = |extra: &str| config(root.path(), &control, &origin, "1s", extra);
    // The header rule is the /x/ route's; the [[site.rule]] tables after
    // it are the site's.
    let first = format!(
        "[[site.route]]\nprefix = \"/x/\"\nroot = \"{}\"\n{}",
        root.path().display(),
        rules("1", "")
    );
    std::fs::write(&file, text(&first)).expect("write");
    let h = Hayate::start(BIN, &["--config", file.to_str().expect("utf-8")]);
    let mut c = h.client();
    assert_eq!(c.get("/old/index.html", &[]).status, 200);
    assert_eq!(c.get("/gone", &[]).status, 404);

    let load = Load::start(&h, &["/old/index.html", "/index.html"]);
    load.wait_for_more(200);
    let second = format!(
        "[[site.route]]\nprefix = \"/x/\"\nroot = \"{}\"\n{}",
        root.path().display(),
        rules("2", "[[site.rule]]\nmatch = \"^/gone$\"\nrespond = 410\n")
    );
    std::fs::write(&file, text(&second)).expect("write");
    let (ok, said) = reload(&control);
    assert!(ok, "{said}");
    assert!(said.contains("rules of site *: changed"), "{said}");
    load.wait_for_more(200);
    let (answered, failed) = load.finish();
    assert_eq!(failed, 0, "{failed} of {answered} requests failed");

    let mut c = h.client();
    assert_eq!(c.get("/gone", &[]).status, 410);
    let r = c.get("/x/index.html", &[]);
    assert_eq!(r.header("x-generation"), Some("2"));
    h.assert_no_errors();
}
