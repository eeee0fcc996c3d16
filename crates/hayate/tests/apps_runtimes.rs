//! The same supervision for any runtime (issue 40, part 4): a Python WSGI
//! app under gunicorn, an ASGI one under uvicorn and a Deno app (from PyPI, pinned in
//! tests/python-apps/requirements.txt, installed once into a virtual
//! environment under the target dir), php-fpm as an `[[app]]` speaking
//! FastCGI, and a Node app, in one config. Each is reloaded alone
//! (`hayate reload APP`) while a client loop runs on every route: no
//! request fails, the app's old instances end, the other apps keep their
//! processes.
//!
//! How each gets hayate's socket (`app_listen = "unix"`: a path in PORT):
//! gunicorn reads gunicorn.conf.py from its directory, which binds
//! `unix:$PORT`; uvicorn takes `--uds "$PORT"` through a shell; Deno's `Deno.serve({ path })`; php-fpm's pool file says
//! `listen = ${PORT}` (php-fpm expands it); Node's `listen(PORT)`.

// Tests block on purpose (they are clients, not the server).
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use hayate_supervisor::php::{php_fpm_binary, PhpPool};
use hayate_testkit::load::Load;
use hayate_testkit::{alive, eventually_true as eventually, run_to_end, Hayate, Response};

const BIN: &str = env!("CARGO_BIN_EXE_hayate");

/// The Python packages, pinned.
const REQUIREMENTS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/python-apps/requirements.txt"
);

/// The virtual environment with gunicorn and deno, installed on first use.
fn venv() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("python-apps");
        hayate_testkit::python::install(Path::new(REQUIREMENTS), dir)
    })
}

fn venv_bin(name: &str) -> String {
    venv().join("bin").join(name).display().to_string()
}

/// A WSGI app: answers `py pid P version V`, V read at start.
const WSGI_APP: &str = r#"
import os
VERSION = open("version.txt").read().strip()
def app(environ, start_response):
    body = f"py pid {os.getpid()} version {VERSION}".encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
"#;

/// gunicorn's own config file, read from its working directory: it binds
/// the Unix socket hayate names in PORT.
const GUNICORN_CONF: &str = r#"
import os
bind = "unix:" + os.environ["PORT"]
workers = 2
"#;

/// An ASGI app: answers `asgi pid P version V`.
const ASGI_APP: &str = r#"
import os
VERSION = open("version.txt").read().strip()
async def app(scope, receive, send):
    body = f"asgi pid {os.getpid()} version {VERSION}".encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": body})
"#;

/// A Deno app: answers `deno pid P version V` on the socket in PORT.
const DENO_APP: &str = r#"
const version = Deno.readTextFileSync("version.txt").trim();
Deno.serve({ path: Deno.env.get("PORT"), onListen() {} }, () =>
  new Response(`deno pid ${Deno.pid} version ${version}`));
"#;

/// A Node app: answers `node pid P version V`.
const NODE_APP: &str = r#"
const version = require('fs').readFileSync('version.txt', 'utf8').trim();
require('http').createServer((req, res) => {
  res.end(`node pid ${process.pid} version ${version}`);
}).listen(process.env.PORT);
"#;

/// A PHP page: the PHP worker's pid (php-fpm's master is the instance).
const PHP_PAGE: &str = "<?php echo 'php pid ', getmypid(), ' version v1';\n";

/// The five apps, each in its own directory, and the config serving them
/// at /py/, /asgi/, /deno/, /node/ and / (PHP, with files).
fn ecosystem() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    };
    write("py/app.py", WSGI_APP);
    write("py/gunicorn.conf.py", GUNICORN_CONF);
    write("asgi/main.py", ASGI_APP);
    write("deno/server.ts", DENO_APP);
    write("node/server.js", NODE_APP);
    for app in ["py", "asgi", "deno", "node"] {
        write(&format!("{app}/version.txt"), "v1");
    }
    write("site/index.php", PHP_PAGE);
    let pool = PhpPool {
        children: 2,
        max_requests: 1000,
        terminate_after_secs: 0,
    };
    write("php-fpm.conf", &pool.config());
    let fpm = php_fpm_binary().expect("php-fpm (Debian: apt-get install php-fpm)");
    let as_root = nix::unistd::geteuid().is_root();
    let php_command = PhpPool::command(&fpm, &dir.path().join("php-fpm.conf"), as_root);
    let toml = format!(
        r#"listen = "127.0.0.1:0"
workers = 1
app_listen = "unix"

[[app]]
name = "py"
command = ["{gunicorn}", "app:app"]
cwd = "py"
instances = 2

[[app]]
name = "asgi"
command = ["sh", "-c", "exec {uvicorn} main:app --lifespan off --uds \"$PORT\""]
cwd = "asgi"
instances = 2

[[app]]
name = "deno"
command = ["{deno}", "run", "--allow-env", "--allow-read", "--allow-write", "--allow-net", "server.ts"]
cwd = "deno"
instances = 2
env = {{ DENO_DIR = "deno-cache", DENO_NO_UPDATE_CHECK = "1", NO_COLOR = "1" }}

[[app]]
name = "node"
command = ["node", "server.js"]
cwd = "node"
instances = 2

[[app]]
name = "php"
command = {php_command:?}
protocol = "fastcgi"
instances = 1

[[site]]
root = "site"
app = "php"

[[site.route]]
prefix = "/py/"
app = "py"

[[site.route]]
prefix = "/asgi/"
app = "asgi"

[[site.route]]
prefix = "/deno/"
app = "deno"

[[site.route]]
prefix = "/node/"
app = "node"
"#,
        gunicorn = venv_bin("gunicorn"),
        uvicorn = venv_bin("uvicorn"),
        deno = venv_bin("deno"),
    );
    write("hayate.toml", &toml);
    dir
}

/// The pids the log says became ready for `app`, in order.
fn ready_pids(log: &str, app: &str) -> Vec<i32> {
    let tag = format!("{app}[");
    log.lines()
        .filter(|l| l.contains(&tag))
        .filter_map(|l| l.split(" ready (pid ").nth(1))
        .filter_map(|rest| rest.split(')').next()?.parse().ok())
        .collect()
}

/// An answer that is not a 200 from the app its path names.
fn not_from_its_app(path: &str, r: &Response) -> Option<String> {
    let name = ROUTES
        .iter()
        .find(|(p, _)| *p == path)
        .map_or("", |(_, n)| n);
    let text = r.text();
    (r.status != 200 || !text.starts_with(name)).then(|| format!("{path}: {} {text}", r.status))
}

const APPS: [(&str, usize); 5] = [("py", 2), ("asgi", 2), ("deno", 2), ("node", 2), ("php", 1)];
const ROUTES: [(&str, &str); 5] = [
    ("/py/", "py"),
    ("/asgi/", "asgi"),
    ("/deno/", "deno"),
    ("/node/", "node"),
    ("/index.php", "php"),
];

/// Starts the five apps; returns hayate once every instance is ready.
fn start(dir: &Path) -> Hayate {
    let h = Hayate::start_in(BIN, &["run", "--config", "hayate.toml"], &[], Some(dir));
    for (app, n) in APPS {
        eventually(&format!("{app}'s {n} instances ready"), || {
            ready_pids(&h.stderr(), app).len() >= n
        });
    }
    h
}

/// `hayate reload APP` under load on every route: no failed request, the
/// app's old instances gone and new ones ready, the others untouched;
/// `version` is what the app's new instances answer (PHP's answer is
/// per request: `None`).
fn reload_alone_under_load(app: &str, new_version: Option<&str>) {
    let dir = ecosystem();
    let h = start(dir.path());
    let before: Vec<(&str, Vec<i32>)> = APPS
        .iter()
        .map(|&(a, _)| (a, ready_pids(&h.stderr(), a)))
        .collect();
    if new_version.is_some() {
        std::fs::write(dir.path().join(app).join("version.txt"), "v2").expect("write");
    }
    let paths: Vec<&str> = ROUTES.iter().map(|(p, _)| *p).collect();
    let load = Load::start(h.addr, &paths, not_from_its_app, 20);
    let (ok, report) = run_to_end(
        std::process::Command::new(BIN)
            .args(["reload", app])
            .current_dir(dir.path()),
    );
    assert!(
        ok && report.contains(&format!("{app}: reloading its instances")),
        "{report}"
    );
    let (_, old) = before.iter().find(|(a, _)| *a == app).expect("app");
    eventually(&format!("{app}'s new instances ready"), || {
        ready_pids(&h.stderr(), app).len() >= 2 * old.len()
    });
    eventually(&format!("{app}'s old instances gone"), || {
        !old.iter().any(|&p| alive(p))
    });
    load.more(20);
    let (answered, failures) = load.failures(20);
    assert!(
        failures.is_empty(),
        "requests failed while {app} reloaded: {failures:?}"
    );
    eprintln!("{app} reloaded under load: {answered} requests, none failed");
    for (other, pids) in &before {
        if other != &app {
            assert_eq!(
                &ready_pids(&h.stderr(), other),
                pids,
                "{other} kept its instances"
            );
            assert!(pids.iter().all(|&p| alive(p)), "{other}'s instances run");
        }
    }
    if let Some(version) = new_version {
        let path = ROUTES.iter().find(|(_, a)| *a == app).expect("route").0;
        let mut c = h.client();
        for _ in 0..5 {
            let text = c.get(path, &[]).text();
            assert!(text.ends_with(&format!("version {version}")), "{text}");
        }
    }
    h.assert_no_errors();
}

#[test]
fn a_python_app_under_gunicorn_reloads_alone_with_no_failed_request() {
    reload_alone_under_load("py", Some("v2"));
}

#[test]
fn a_python_asgi_app_under_uvicorn_reloads_alone_with_no_failed_request() {
    reload_alone_under_load("asgi", Some("v2"));
}

#[test]
fn a_deno_app_reloads_alone_with_no_failed_request() {
    reload_alone_under_load("deno", Some("v2"));
}

#[test]
fn php_fpm_as_an_app_reloads_alone_with_no_failed_request() {
    reload_alone_under_load("php", None);
}

#[test]
fn a_node_app_next_to_them_reloads_alone_with_no_failed_request() {
    reload_alone_under_load("node", Some("v2"));
}

/// The README's "Several apps" config: the first TOML block under that
/// heading.
fn readme_apps_example() -> String {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
        .expect("README.md");
    let section = readme
        .split_once("\n## Several apps\n")
        .expect("a Several apps section")
        .1;
    let block = section.split_once("```toml\n").expect("a TOML block").1;
    block.split_once("```").expect("its end").0.to_string()
}

#[test]
fn the_readmes_several_apps_example_passes_hayate_check() {
    let dir = tempfile::tempdir().expect("tempdir");
    // The directories it names (cwd, root) are checked to exist.
    for sub in ["api", "admin", "site/public"] {
        std::fs::create_dir_all(dir.path().join(sub)).expect("mkdir");
    }
    // The env_file it names is read at check (a missing one is an error).
    std::fs::write(dir.path().join("api/.env"), "TOKEN=x\n").expect("write");
    let example = readme_apps_example();
    for app in ["\"api\"", "\"admin\"", "\"site\"", "\"jobs\""] {
        assert!(example.contains(&format!("name = {app}")), "{example}");
    }
    std::fs::write(dir.path().join("hayate.toml"), &example).expect("write");
    let (ok, out) = run_to_end(
        std::process::Command::new(BIN)
            .args(["check", "hayate.toml"])
            .current_dir(dir.path()),
    );
    assert!(ok, "hayate check of the README's example: {out}");
}
