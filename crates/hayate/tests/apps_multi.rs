//! Several apps in one config (`[[app]]`): two Node apps served on their
//! own prefixes and a worker process with no route, started together; one
//! reloaded alone under load with no failed request while the others keep
//! their processes; an app whose command does not exist leaves the others
//! serving; bad configs refused with file:line. Node apps use only its
//! standard library.

// Tests block on purpose (they are clients, not the server).
#![allow(clippy::disallowed_methods)]

use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hayate_testkit::{alive, eventually_true as eventually, run_to_end, Client, Hayate};

const BIN: &str = env!("CARGO_BIN_EXE_hayate");

/// A served app: answers `NAME pid P version V greeting G`; NAME and the
/// version come from its environment and `version-NAME.txt`.
const SERVED: &str = r#"
const http = require('http');
const fs = require('fs');
const name = process.env.APP_NAME;
const version = fs.readFileSync(`version-${name}.txt`, 'utf8').trim();
http.createServer((req, res) => {
  res.end(`${name} pid ${process.pid} version ${version} greeting ${process.env.GREETING}`);
}).listen(process.env.PORT, () => console.log(`${name} listening`));
"#;

/// A worker: appends `tick PID PORT` to ticks.txt every TICK_MS (1 s unless
/// told), PORT being what it was told (nothing, for a worker).
const WORKER: &str = r#"
const fs = require('fs');
const tick = () => fs.appendFileSync('ticks.txt', `tick ${process.pid} ${process.env.PORT}\n`);
tick();
setInterval(tick, Number(process.env.TICK_MS || 1000));
"#;

/// The config: `api` at /api/ (its GREETING from an env_file), `web` at
/// /web/, `queue` a worker ticking every 100 ms; files under public/ at /.
/// `api_command` is api's command (a missing one for the failure test).
fn config(api_command: &str) -> String {
    format!(
        r#"listen = "127.0.0.1:0"
workers = 1
admin = "127.0.0.1:0"
proxy_queue_timeout = "20ms"

[[app]]
name = "api"
command = {api_command}
instances = 2
env_file = "api.env"
env = {{ APP_NAME = "api" }}
log = "api.log"

[[app]]
name = "web"
command = ["node", "served.js"]
instances = 1
env = {{ APP_NAME = "web", GREETING = "hello" }}

[[app]]
name = "queue"
command = ["node", "worker.js"]
instances = 1
env = {{ TICK_MS = "100" }}

[[site]]
root = "public"

[[site.route]]
prefix = "/api/"
app = "api"

[[site.route]]
prefix = "/web/"
app = "web"
"#
    )
}

fn apps_dir(api_command: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let write =
        |name: &str, text: &str| std::fs::write(dir.path().join(name), text).expect("write");
    write("served.js", SERVED);
    write("worker.js", WORKER);
    write("version-api.txt", "v1");
    write("version-web.txt", "v1");
    write("api.env", "# the api's secrets\nGREETING=\"hi there\"\n");
    write("hayate.toml", &config(api_command));
    std::fs::create_dir(dir.path().join("public")).expect("mkdir");
    write("public/hello.txt", "static\n");
    dir
}

/// `hayate --config hayate.toml` in `dir`; `hayate run --config
/// hayate.toml` with `run`, the same.
fn start(dir: &Path, run: bool) -> Hayate {
    let args: &[&str] = match run {
        true => &["run", "--config", "hayate.toml"],
        false => &["--config", "hayate.toml"],
    };
    Hayate::start_in(BIN, args, &[], Some(dir))
}

fn ready_count(log: &str, app: &str) -> usize {
    let tag = format!("{app}[");
    log.lines()
        .filter(|l| l.contains(" ready (pid ") && l.contains(&tag))
        .count()
}

/// `(status, name, pid, version, greeting)` of a served app's answer.
fn answer(c: &mut Client, path: &str) -> (u16, String, i32, String, String) {
    let r = c.get(path, &[]);
    let text = r.text();
    let words: Vec<&str> = text.splitn(7, ' ').collect();
    match words.as_slice() {
        [name, "pid", pid, "version", version, "greeting", greeting] => (
            r.status,
            name.to_string(),
            pid.parse().expect("pid"),
            version.to_string(),
            greeting.to_string(),
        ),
        _ => (r.status, text, 0, String::new(), String::new()),
    }
}

fn pids(c: &mut Client, path: &str, n: usize) -> HashSet<i32> {
    let mut pids = HashSet::new();
    for _ in 0..100 {
        pids.insert(answer(c, path).2);
        if pids.len() == n {
            return pids;
        }
    }
    panic!("only {pids:?} answered on {path}");
}

fn hayate_in(dir: &Path, args: &[&str]) -> (bool, String) {
    run_to_end(std::process::Command::new(BIN).args(args).current_dir(dir))
}

fn ticks(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("ticks.txt"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn two_served_apps_and_a_worker_run_from_one_config() {
    let dir = apps_dir(r#"["node", "served.js"]"#);
    let h = start(dir.path(), false);
    eventually("api's two instances", || {
        ready_count(&h.stderr(), "api") >= 2
    });
    let mut c = h.client();
    let (status, name, _, _, greeting) = answer(&mut c, "/api/users");
    assert_eq!((status, name.as_str()), (200, "api"));
    assert_eq!(greeting, "hi there", "GREETING from its env_file");
    let (status, name, _, _, greeting) = answer(&mut c, "/web/");
    assert_eq!(
        (status, name.as_str(), greeting.as_str()),
        (200, "web", "hello")
    );
    assert_eq!(c.get("/hello.txt", &[]).text(), "static\n");
    assert_eq!(c.get("/other", &[]).status, 404, "/ serves files only");

    // The worker ticks, with no PORT: it listens nowhere.
    eventually("three ticks", || ticks(dir.path()).len() >= 3);
    assert!(
        ticks(dir.path()).iter().all(|l| l.ends_with(" undefined")),
        "{:?}",
        ticks(dir.path())
    );

    // api's output goes to its own log, the others' to hayate's;
    // `hayate logs` reads api's with the rest.
    let api_log = || std::fs::read_to_string(dir.path().join("api.log")).unwrap_or_default();
    eventually("api's line in api.log", || {
        api_log().contains("stdout: api listening")
    });
    assert!(
        api_log().contains(" pid ") && api_log().contains(" api["),
        "{}",
        api_log()
    );
    eventually("web's line in hayate's log", || {
        h.stderr().contains("stdout: web listening")
    });
    assert!(
        !h.stderr().contains("stdout: api listening"),
        "{}",
        h.stderr()
    );
    let (ok, logs) = hayate_in(dir.path(), &["logs", "-n", "5"]);
    assert!(ok && logs.contains("stdout: api listening"), "{logs}");

    let (ok, status) = hayate_in(dir.path(), &["status"]);
    assert!(ok, "{status}");
    for line in [
        "app api: served at /api/",
        "app web: served at /web/",
        "app queue: worker",
    ] {
        assert!(status.contains(line), "{line:?} in {status}");
    }

    let admin = h.admin_addr();
    let metrics = Client::connect(admin).get("/metrics", &[]).text();
    for app in ["api", "web", "queue"] {
        let sample =
            format!("hayate_app_instance_state{{app=\"{app}\",instance=\"0\",state=\"ready\"}} 1");
        assert!(metrics.contains(&sample), "{sample} in {metrics}");
    }
    assert_eq!(
        metrics.matches("# TYPE hayate_app_instance_pid ").count(),
        1,
        "one family for every app"
    );
    let page = Client::connect(admin).get("/status.json", &[]).text();
    let json: serde_json::Value = serde_json::from_str(&page).expect("json");
    let names: Vec<&str> = json["apps"]
        .as_array()
        .expect("apps")
        .iter()
        .map(|a| a["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, ["api", "web", "queue"], "{page}");
    h.assert_no_errors();
}

#[test]
fn reloading_one_app_under_load_fails_no_request_and_leaves_the_others() {
    let dir = apps_dir(r#"["node", "served.js"]"#);
    let h = start(dir.path(), false);
    eventually("api's two instances", || {
        ready_count(&h.stderr(), "api") >= 2
    });
    eventually("a tick", || !ticks(dir.path()).is_empty());
    let mut c = h.client();
    let api_before = pids(&mut c, "/api/", 2);
    let web_before = pids(&mut c, "/web/", 1);
    let worker_pid = |dir: &Path| {
        let ticks = ticks(dir);
        let last = ticks.last().cloned().unwrap_or_default();
        last.split(' ').nth(1).unwrap_or_default().to_string()
    };
    let worker_before = worker_pid(dir.path());

    let addr = h.addr;
    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicU32::new(0));
    let loaders: Vec<_> = ["/api/", "/web/"]
        .into_iter()
        .map(|path| {
            let (stop, answered) = (stop.clone(), answered.clone());
            std::thread::spawn(move || {
                let mut c = Client::connect(addr);
                let mut failures = Vec::new();
                let deadline = Instant::now() + Duration::from_secs(8);
                while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                    let (status, ..) = answer(&mut c, path);
                    if status != 200 {
                        failures.push((path, status));
                    }
                    answered.fetch_add(1, Ordering::SeqCst);
                }
                failures
            })
        })
        .collect();
    let wait_answers = |more: u32| {
        let from = answered.load(Ordering::SeqCst);
        eventually("more answers", || {
            answered.load(Ordering::SeqCst) >= from + more
        });
    };
    wait_answers(10);
    std::fs::write(dir.path().join("version-api.txt"), "v2").expect("write");
    std::fs::write(dir.path().join("version-web.txt"), "v2").expect("write");
    // A per-app option changed in the file waits for a restart, and says so.
    let toml = std::fs::read_to_string(dir.path().join("hayate.toml")).expect("read");
    let toml = toml.replace("instances = 2\n", "instances = 2\nmax_requests = 1000000\n");
    std::fs::write(dir.path().join("hayate.toml"), toml).expect("write");
    let (ok, report) = hayate_in(dir.path(), &["reload", "api"]);
    assert!(ok, "{report}");
    assert!(
        report.contains("api: app_* options changed: not until a restart"),
        "{report}"
    );
    assert!(report.contains("api: reloading its instances"), "{report}");
    assert!(!report.contains("web: reloading"), "{report}");
    eventually("api's new instances", || {
        ready_count(&h.stderr(), "api") >= 4
    });
    eventually("api's old instances gone", || {
        !api_before.iter().any(|&p| alive(p))
    });
    wait_answers(10);
    stop.store(true, Ordering::Relaxed);
    let failures: Vec<_> = loaders
        .into_iter()
        .flat_map(|t| t.join().expect("join"))
        .collect();
    assert!(
        failures.is_empty(),
        "requests failed during the reload: {failures:?}"
    );

    let mut c = h.client();
    for _ in 0..10 {
        assert_eq!(
            answer(&mut c, "/api/").3,
            "v2",
            "api's new generation answers"
        );
    }
    assert_eq!(pids(&mut c, "/web/", 1), web_before, "web kept its process");
    assert_eq!(answer(&mut c, "/web/").3, "v1", "web was not reloaded");
    assert_eq!(
        worker_pid(dir.path()),
        worker_before,
        "the worker kept its process"
    );

    let (ok, answer) = hayate_in(dir.path(), &["reload", "nope"]);
    assert!(
        !ok && answer.contains("no app named \"nope\" runs (apps: api, web, queue)"),
        "{answer}"
    );
    h.assert_no_errors();
}

#[test]
fn a_reload_starts_an_app_new_in_the_file_and_stops_one_gone_from_it() {
    let dir = apps_dir(r#"["node", "served.js"]"#);
    let h = start(dir.path(), false);
    eventually("api's two instances", || {
        ready_count(&h.stderr(), "api") >= 2
    });
    eventually("a tick", || !ticks(dir.path()).is_empty());
    let mut c = h.client();
    let api_before = pids(&mut c, "/api/", 2);
    let web_before = pids(&mut c, "/web/", 1);
    let queue_pid = || {
        let ticks = ticks(dir.path());
        let last = ticks.last().cloned().unwrap_or_default();
        last.split(' ').nth(1).unwrap_or_default().to_string()
    };

    let queue_before = queue_pid();
    // web leaves the file, admin comes in, at /admin/.
    let toml = std::fs::read_to_string(dir.path().join("hayate.toml")).expect("read");
    let toml = toml
        .replace("name = \"web\"", "name = \"admin\"")
        .replace("APP_NAME = \"web\"", "APP_NAME = \"admin\"")
        .replace(
            "prefix = \"/web/\"\napp = \"web\"",
            "prefix = \"/admin/\"\napp = \"admin\"",
        );
    std::fs::write(dir.path().join("version-admin.txt"), "v1").expect("write");
    std::fs::write(dir.path().join("hayate.toml"), toml).expect("write");

    // api under load all along: the reload touches it not.
    let addr = h.addr;
    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicU32::new(0));
    let loader = {
        let (stop, answered) = (stop.clone(), answered.clone());
        std::thread::spawn(move || {
            let mut c = Client::connect(addr);
            let mut failures = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(8);
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                let (status, name, ..) = answer(&mut c, "/api/");
                if (status, name.as_str()) != (200, "api") {
                    failures.push((status, name));
                }
                answered.fetch_add(1, Ordering::SeqCst);
            }
            failures
        })
    };
    let wait_answers = |more: u32| {
        let from = answered.load(Ordering::SeqCst);
        eventually("more answers", || {
            answered.load(Ordering::SeqCst) >= from + more
        });
    };
    wait_answers(10);
    // Naming queue: only queue's instances roll, besides what the file's
    // change of apps does.
    let (ok, report) = hayate_in(dir.path(), &["reload", "queue"]);
    assert!(ok, "{report}");
    for line in [
        "admin: new in the file; starting its instances",
        "web: gone from the file; draining and stopping its instances",
        "queue: reloading its instances",
    ] {
        assert!(report.contains(line), "{line:?} in {report}");
    }
    assert!(!report.contains("api: reloading"), "{report}");

    // admin answers on its route once ready (this config's queue waits
    // 20 ms for an instance); web's route is gone, its process drained
    // and stopped.
    eventually("admin ready", || ready_count(&h.stderr(), "admin") >= 1);
    let (status, name, ..) = answer(&mut c, "/admin/");
    assert_eq!((status, name.as_str()), (200, "admin"));
    assert_eq!(c.get("/web/", &[]).status, 404, "web's route left with it");
    eventually("web's instance stopped", || {
        !web_before.iter().any(|&p| alive(p))
    });
    wait_answers(10);
    stop.store(true, Ordering::Relaxed);
    let failures = loader.join().expect("join");
    assert!(failures.is_empty(), "api's requests failed: {failures:?}");
    assert_eq!(
        pids(&mut c, "/api/", 2),
        api_before,
        "api kept its processes"
    );
    eventually("queue's new instance ticks", || queue_pid() != queue_before);

    // The new app is one like the others: by name, in status and metrics.
    let (ok, status) = hayate_in(dir.path(), &["status"]);
    assert!(
        ok && status.contains("app admin: served at /admin/"),
        "{status}"
    );
    assert!(!status.contains("app web"), "{status}");
    let metrics = Client::connect(h.admin_addr()).get("/metrics", &[]).text();
    assert!(metrics.contains("app=\"admin\""), "{metrics}");
    assert!(!metrics.contains("app=\"web\""), "{metrics}");
    let (ok, report) = hayate_in(dir.path(), &["reload", "admin"]);
    assert!(
        ok && report.contains("admin: reloading its instances"),
        "{report}"
    );
    let (ok, report) = hayate_in(dir.path(), &["stop", "web"]);
    assert!(
        !ok && report.contains("no app named \"web\" runs"),
        "{report}"
    );
    h.assert_no_errors();
}

#[test]
fn a_reload_replaces_an_app_whose_role_changed() {
    let dir = apps_dir(r#"["node", "served.js"]"#);
    let h = start(dir.path(), false);
    eventually("web ready", || ready_count(&h.stderr(), "web") >= 1);
    let mut c = h.client();
    let web_served = pids(&mut c, "/web/", 1);
    let api_before = pids(&mut c, "/api/", 2);
    let toml = std::fs::read_to_string(dir.path().join("hayate.toml")).expect("read");
    let served = |toml: &str| {
        std::fs::write(dir.path().join("hayate.toml"), toml).expect("write");
        let (ok, report) = hayate_in(dir.path(), &["reload", "queue"]);
        assert!(ok, "{report}");
        report
    };

    // web's route leaves the file: web is a worker now, its served
    // instance drained and stopped.
    let report = served(&toml.replace("[[site.route]]\nprefix = \"/web/\"\napp = \"web\"\n", ""));
    for line in [
        "web: now a worker (was served); starting its instances",
        "web: its role changed; draining and stopping its instances",
    ] {
        assert!(report.contains(line), "{line:?} in {report}");
    }
    eventually("web's served instance stopped", || {
        !web_served.iter().any(|&p| alive(p))
    });
    assert_eq!(c.get("/web/", &[]).status, 404);
    let (_, status) = hayate_in(dir.path(), &["status"]);
    assert!(status.contains("app web: worker"), "{status}");

    // And back: served again once its new instance is ready.
    let report = served(&toml);
    assert!(
        report.contains("web: now served (was a worker)"),
        "{report}"
    );
    eventually("web served again", || answer(&mut c, "/web/").0 == 200);
    assert!(!pids(&mut c, "/web/", 1).is_subset(&web_served));
    assert_eq!(
        pids(&mut c, "/api/", 2),
        api_before,
        "api kept its processes"
    );
    let (_, status) = hayate_in(dir.path(), &["status"]);
    assert!(status.contains("app web: served at /web/"), "{status}");
    h.assert_no_errors();
}

#[test]
fn an_app_whose_command_does_not_exist_leaves_the_others_serving() {
    let dir = apps_dir(r#"["no-such-command-here"]"#);
    let h = start(dir.path(), true);
    eventually("web ready", || ready_count(&h.stderr(), "web") >= 1);
    let mut c = h.client();
    assert_eq!(answer(&mut c, "/web/").0, 200);
    eventually("a tick", || !ticks(dir.path()).is_empty());
    eventually("api's crash loop", || {
        let log = h.stderr();
        log.contains("api[0] crash loop") && log.contains("api[1] crash loop")
    });
    let r = c.get("/api/", &[]);
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(r.text().contains("the app is down"), "{}", r.text());
    assert!(
        h.stderr()
            .contains("app api did not start: failed to start: no-such-command-here"),
        "{}",
        h.stderr()
    );
    let (ok, status) = hayate_in(dir.path(), &["status"]);
    assert!(
        ok && status.contains("crash-loop") && status.contains("no-such-command-here"),
        "{status}"
    );
    assert_eq!(answer(&mut c, "/web/").0, 200, "web still serves");
}

#[test]
fn config_errors_name_file_and_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let check = |text: &str| {
        std::fs::write(dir.path().join("bad.toml"), text).expect("write");
        let (ok, out) = hayate_in(dir.path(), &["check", "bad.toml"]);
        assert!(!ok, "{out}");
        out
    };
    let two = "root = \".\"\n[[app]]\nname = \"a\"\ncommand = \"x\"\n[[app]]\nname = \"b\"\ncommand = \"y\"\n";
    let out = check(&format!("{two}[[app]]\nname = \"a\"\ncommand = \"z\"\n"));
    assert!(
        out.contains("bad.toml:8: name: two [[app]] tables named \"a\""),
        "{out}"
    );
    let out = check(&format!(
        "{two}[[site]]\nroot = \".\"\n[[site.route]]\nprefix = \"/x/\"\napp = \"c\"\n"
    ));
    assert!(
        out.contains("bad.toml:12: app: route \"/x/\": no [[app]] named \"c\" (declared: a, b)"),
        "{out}"
    );
    let out = check(&format!("{two}[[site]]\nroot = \".\"\napp = true\n"));
    assert!(
        out.contains("bad.toml:10: app: route \"/\": app = true sends to the only app, but 2"),
        "{out}"
    );
    let out = check("root = \".\"\n[[app]]\nname = \"a\"\ncommand = \"x\"\nenv_file = \"a.env\"\n");
    assert!(
        out.contains("bad.toml:2: env_file: [[app]] a: env_file"),
        "{out}"
    );
    std::fs::write(dir.path().join("a.env"), "OK=1\nnot a pair\n").expect("write");
    let out = check("root = \".\"\n[[app]]\nname = \"a\"\ncommand = \"x\"\nenv_file = \"a.env\"\n");
    assert!(out.contains("a.env:2: expected KEY=VALUE"), "{out}");
}
