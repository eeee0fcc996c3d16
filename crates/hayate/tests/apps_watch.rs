//! An app's own restarts (issue 40, part 2): on a change of its files
//! (`watch`, `ignore`, a `build` step first), on a schedule
//! (`restart_cron`, `restart_every`), and by name (`hayate start|stop|
//! restart APP`). Each is a rolling reload: the tests keep a load on the
//! app and count failed requests. Restarts are seen as events (a new pid
//! answering, a log line), never waited for by a sleep. Node apps use only
//! its standard library.

// Tests block on purpose (they are clients, not the server).
#![allow(clippy::disallowed_methods)]

use std::path::Path;

use hayate_testkit::load::Load;
use hayate_testkit::{alive, eventually_true as eventually, run_to_end, Client, Hayate, Response};

const BIN: &str = env!("CARGO_BIN_EXE_hayate");

/// A served app: answers `NAME pid P version V`, V read at start from
/// the file VERSION_FILE names.
const SERVED: &str = r#"
const http = require('http');
const fs = require('fs');
const version = fs.readFileSync(process.env.VERSION_FILE, 'utf8').trim();
http.createServer((req, res) => {
  res.end(`${process.env.APP_NAME} pid ${process.pid} version ${version}`);
}).listen(process.env.PORT);
"#;

/// A build: copies src/version.txt to dist/version.txt, or fails as a
/// compiler does when the source says `broken`.
const BUILD: &str = r#"
const fs = require('fs');
const source = fs.readFileSync('src/version.txt', 'utf8');
console.log('building from src/version.txt');
if (source.includes('broken')) {
  console.error('error: syntax error in src/version.txt');
  process.exit(1);
}
fs.mkdirSync('dist', { recursive: true });
fs.writeFileSync('dist/version.txt', source);
"#;

/// A directory with the apps' files and `config` as hayate.toml.
fn app_dir(config: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    };
    write("served.js", SERVED);
    write("build.js", BUILD);
    write("src/version.txt", "v1");
    write("dist/version.txt", "v1");
    write("web/version.txt", "v1");
    write("public/hello.txt", "static\n");
    write("hayate.toml", config);
    dir
}

fn start(dir: &Path, extra: &[&str]) -> Hayate {
    let mut args = vec!["run", "--config", "hayate.toml"];
    args.extend_from_slice(extra);
    Hayate::start_in(BIN, &args, &[], Some(dir))
}

fn hayate_in(dir: &Path, args: &[&str]) -> (bool, String) {
    run_to_end(std::process::Command::new(BIN).args(args).current_dir(dir))
}

/// `(status, pid, version)` of an app's answer.
fn answer(c: &mut Client, path: &str) -> (u16, i32, String) {
    let r = c.get(path, &[]);
    let text = r.text();
    match text.split(' ').collect::<Vec<_>>().as_slice() {
        [_, "pid", pid, "version", version] => {
            (r.status, pid.parse().expect("pid"), version.to_string())
        }
        _ => (r.status, 0, text),
    }
}

/// An answer that is not a 200.
fn not_200(path: &str, r: &Response) -> Option<String> {
    (r.status != 200).then(|| format!("{path}: {}", r.status))
}

/// Two apps: `api` at /api/ watching `src` (`*.log` ignored), `web` at
/// /web/ watching nothing; `api_extra` goes into api's table. They listen
/// on Unix sockets: these tests restart instances often (every second on
/// a schedule), and a free TCP port found for a new instance can be taken
/// by another test's process before the instance binds it (the reload
/// then fails, logged, the old instance serving on).
fn two_apps(api_extra: &str) -> String {
    format!(
        r#"listen = "127.0.0.1:0"
workers = 1
app_listen = "unix"

[[app]]
name = "api"
command = ["node", "served.js"]
instances = 2
env = {{ APP_NAME = "api", VERSION_FILE = "src/version.txt" }}
watch = ["src"]
ignore = ["*.log"]
watch_debounce = "100ms"
{api_extra}

[[app]]
name = "web"
command = ["node", "served.js"]
instances = 1
env = {{ APP_NAME = "web", VERSION_FILE = "web/version.txt" }}

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

/// Waits until api's two instances and web's one are ready: an instance
/// still starting when a test writes a file would read the new version.
fn all_ready(h: &Hayate) {
    eventually("every instance ready", || {
        let log = h.stderr();
        ["api[0] ready", "api[1] ready", "web[0] ready"]
            .iter()
            .all(|l| log.contains(l))
    });
}

fn restart_lines(log: &str, app: &str) -> Vec<String> {
    let start = format!("{app}: restarting its instances: ");
    log.lines()
        .filter_map(|l| Some(l[l.find(&start)? + start.len()..].to_string()))
        .collect()
}

#[test]
fn a_file_write_restarts_only_the_watched_app_with_no_failed_request() {
    let dir = app_dir(&two_apps(""));
    let h = start(dir.path(), &[]);
    let mut c = h.client();
    eventually("api watching", || h.stderr().contains("api: watching src"));
    all_ready(&h);
    eventually("both apps answer", || {
        answer(&mut c, "/api/").0 == 200 && answer(&mut c, "/web/").0 == 200
    });
    let web_pid = answer(&mut c, "/web/").1;
    let api_pid = answer(&mut c, "/api/").1;
    let load = Load::start(h.addr, &["/api/", "/web/"], not_200, 10);

    // Ignored: by the app's pattern, and node_modules always; then the
    // change that counts.
    std::fs::write(dir.path().join("src/debug.log"), "noise").expect("write");
    std::fs::create_dir_all(dir.path().join("src/node_modules/x")).expect("mkdir");
    std::fs::write(dir.path().join("src/node_modules/x/index.js"), "1").expect("write");
    std::fs::write(dir.path().join("web/version.txt"), "v2").expect("write");
    std::fs::write(dir.path().join("src/version.txt"), "v2").expect("write");
    eventually("api answers with v2", || answer(&mut c, "/api/").2 == "v2");
    eventually("api's old instances gone", || !alive(api_pid));
    let (_, failures) = load.failures(10);
    assert!(
        failures.is_empty(),
        "failed during the restart: {failures:?}"
    );

    let log = h.stderr();
    assert_eq!(
        restart_lines(&log, "api"),
        ["src/version.txt changed"],
        "one restart, for the file that counts: {log}"
    );
    assert!(restart_lines(&log, "web").is_empty(), "{log}");
    let (status, pid, version) = answer(&mut c, "/web/");
    assert_eq!(
        (status, pid, version.as_str()),
        (200, web_pid, "v1"),
        "web untouched"
    );
    let (ok, status) = hayate_in(dir.path(), &["status"]);
    assert!(ok && status.contains("watching: src in "), "{status}");
    h.assert_no_errors();
}

#[test]
fn a_failing_build_keeps_the_old_instances_serving() {
    let config = two_apps(r#"build = ["node", "build.js"]"#).replace(
        r#"VERSION_FILE = "src/version.txt""#,
        r#"VERSION_FILE = "dist/version.txt""#,
    );
    let dir = app_dir(&config);
    let h = start(dir.path(), &[]);
    let mut c = h.client();
    eventually("api watching", || h.stderr().contains("api: watching src"));
    all_ready(&h);
    eventually("api answers", || answer(&mut c, "/api/").0 == 200);
    let load = Load::start(h.addr, &["/api/"], not_200, 10);
    let before = answer(&mut c, "/api/");

    std::fs::write(dir.path().join("src/version.txt"), "v2 broken").expect("write");
    eventually("the build's failure logged", || {
        h.stderr().contains("api: build `node build.js` failed")
    });
    let log = h.stderr();
    assert!(
        log.contains("the running instances keep serving")
            && log.contains("| error: syntax error in src/version.txt")
            && log.contains("| building from src/version.txt"),
        "the build's output is shown: {log}"
    );
    assert!(restart_lines(&log, "api").is_empty(), "{log}");
    let (status, pid, version) = answer(&mut c, "/api/");
    assert_eq!((status, version.as_str()), (200, "v1"));
    assert!(
        pid == before.1 || alive(before.1),
        "v1's instances still serve"
    );

    // Fixed: built, then restarted; the build's own output (dist/) is not
    // watched and restarts nothing more.
    std::fs::write(dir.path().join("src/version.txt"), "v3").expect("write");
    eventually("api answers with v3", || answer(&mut c, "/api/").2 == "v3");
    let (_, failures) = load.failures(10);
    assert!(
        failures.is_empty(),
        "failed during the restart: {failures:?}"
    );
    let log = h.stderr();
    assert!(log.contains("api: build `node build.js` done in "), "{log}");
    assert_eq!(
        restart_lines(&log, "api"),
        ["src/version.txt changed"],
        "{log}"
    );
}

#[test]
fn a_build_that_hangs_is_stopped_at_its_timeout() {
    let config = two_apps(
        "build = [\"node\", \"-e\", \"setTimeout(() => {}, 60000)\"]\nbuild_timeout = \"300ms\"",
    );
    let dir = app_dir(&config);
    let h = start(dir.path(), &[]);
    let mut c = h.client();
    eventually("api watching", || h.stderr().contains("api: watching src"));
    all_ready(&h);
    std::fs::write(dir.path().join("src/version.txt"), "v2").expect("write");
    eventually("the timeout told", || {
        h.stderr()
            .contains("it ran past app_build_timeout (300ms) and was stopped; the running instances keep serving")
    });
    assert_eq!(answer(&mut c, "/api/").2, "v1");
    assert!(
        restart_lines(&h.stderr(), "api").is_empty(),
        "{}",
        h.stderr()
    );
}

#[test]
fn run_watch_without_a_list_watches_the_app_directory_but_its_static_root() {
    let config = "listen = \"127.0.0.1:0\"\nworkers = 1\napp_watch_debounce = \"100ms\"\n\
                  root = \"public\"\n\
                  [app]\ncommand = [\"node\", \"served.js\"]\ninstances = 1\n\
                  env = { APP_NAME = \"app\", VERSION_FILE = \"src/version.txt\" }\n";
    let dir = app_dir(config);
    let h = start(dir.path(), &["--watch"]);
    let mut c = h.client();
    eventually("watching", || {
        h.stderr().contains("app: watching its directory")
    });
    eventually("app answers", || answer(&mut c, "/").0 == 200);
    // A static file: served fresh, no restart; then one that counts.
    std::fs::write(dir.path().join("public/hello.txt"), "fresh\n").expect("write");
    std::fs::write(dir.path().join("src/version.txt"), "v2").expect("write");
    eventually("app answers with v2", || answer(&mut c, "/").2 == "v2");
    assert_eq!(c.get("/hello.txt", &[]).text(), "fresh\n");
    assert_eq!(
        restart_lines(&h.stderr(), "app"),
        ["src/version.txt changed"],
        "{}",
        h.stderr()
    );
    h.assert_no_errors();
}

#[test]
fn a_watch_past_its_directory_limit_says_so() {
    let config = two_apps("watch_max_dirs = 2");
    let dir = app_dir(&config);
    for sub in ["a", "b", "c"] {
        std::fs::create_dir_all(dir.path().join("src").join(sub)).expect("mkdir");
    }
    let h = start(dir.path(), &[]);
    eventually("the limit told", || {
        h.stderr().contains("are not watched, changes there restart nothing: 2 directories are watched, its app_watch_max_dirs")
    });
}

#[test]
fn scheduled_restarts_replace_instances_with_no_failed_request() {
    let config = two_apps(r#"restart_cron = "*/2 * * * * *""#)
        .replace("instances = 1\n", "instances = 1\nrestart_every = \"1s\"\n");
    let dir = app_dir(&config);
    let h = start(dir.path(), &[]);
    let mut c = h.client();
    eventually("both apps answer", || {
        answer(&mut c, "/api/").0 == 200 && answer(&mut c, "/web/").0 == 200
    });
    let (ok, status) = hayate_in(dir.path(), &["status"]);
    assert!(
        ok && status.contains("(restart_cron \"*/2 * * * * *\")")
            && status.contains("(restart_every 1s)")
            && status.contains("next restart: "),
        "{status}"
    );
    let load = Load::start(h.addr, &["/api/", "/web/"], not_200, 10);
    let (api, web) = (answer(&mut c, "/api/").1, answer(&mut c, "/web/").1);
    eventually("api's new instance (cron)", || {
        answer(&mut c, "/api/").1 != api && !alive(api)
    });
    eventually("web's new instance (every)", || {
        answer(&mut c, "/web/").1 != web && !alive(web)
    });
    let (_, failures) = load.failures(10);
    assert!(
        failures.is_empty(),
        "failed during the restarts: {failures:?}"
    );
    let log = h.stderr();
    assert!(
        log.contains("api: restarting its instances: scheduled by restart_cron \"*/2 * * * * *\"")
            && log.contains("web: restarting its instances: scheduled by restart_every 1s"),
        "{log}"
    );
    h.assert_no_errors();
}

#[test]
fn apps_stop_start_and_restart_by_name() {
    let dir = app_dir(&two_apps(""));
    let h = start(dir.path(), &[]);
    let mut c = h.client();
    eventually("both apps answer", || {
        answer(&mut c, "/api/").0 == 200 && answer(&mut c, "/web/").0 == 200
    });
    let api = answer(&mut c, "/api/").1;
    let web = answer(&mut c, "/web/").1;

    let (ok, out) = hayate_in(dir.path(), &["stop", "api"]);
    assert!(ok && out.contains("api: stopping its instances"), "{out}");
    let r = c.get("/api/", &[]);
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(r.text().contains("the app is stopped"), "{}", r.text());
    eventually("api's instances stopped", || !alive(api));
    assert_eq!(answer(&mut c, "/web/").1, web, "web serves on");
    let (ok, status) = hayate_in(dir.path(), &["status"]);
    assert!(
        ok && status.contains("stopped by hayate stop api"),
        "{status}"
    );
    // Stopped, it stays so: a change of its files restarts nothing.
    std::fs::write(dir.path().join("src/version.txt"), "v2").expect("write");
    eventually("the change noted", || {
        h.stderr().contains("not restarted: the app is stopped")
    });
    assert_eq!(c.get("/api/", &[]).status, 503);
    let (ok, out) = hayate_in(dir.path(), &["stop", "api"]);
    assert!(ok && out.contains("api: stopped already"), "{out}");
    let (ok, out) = hayate_in(dir.path(), &["reload", "api"]);
    assert!(
        ok && out.contains("api: stopped (hayate start api starts it"),
        "{out}"
    );
    assert_eq!(
        c.get("/api/", &[]).status,
        503,
        "a reload does not start it"
    );

    let (ok, out) = hayate_in(dir.path(), &["start", "api"]);
    assert!(ok && out.contains("api: starting"), "{out}");
    eventually("api answers again", || answer(&mut c, "/api/").0 == 200);
    let (_, started, version) = answer(&mut c, "/api/");
    assert_eq!(version, "v2", "a start takes the code as it is now");

    let load = Load::start(h.addr, &["/api/"], not_200, 10);
    let (ok, out) = hayate_in(dir.path(), &["restart", "api"]);
    assert!(ok && out.contains("api: replacing its instances"), "{out}");
    eventually("api's new instances", || !alive(started));
    let (_, failures) = load.failures(10);
    assert!(
        failures.is_empty(),
        "failed during the restart: {failures:?}"
    );
    assert_eq!(answer(&mut c, "/web/").1, web, "web untouched");

    let (ok, out) = hayate_in(dir.path(), &["restart", "nope"]);
    assert!(
        !ok && out.contains("no app named \"nope\" runs (apps: api, web)"),
        "{out}"
    );
    let (ok, out) = hayate_in(dir.path(), &["start"]);
    assert!(!ok && out.contains("<APP>"), "{out}");
    h.assert_no_errors();
}

#[test]
fn bad_watch_and_schedule_settings_name_file_and_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let check = |extra: &str| {
        let text = format!("root = \".\"\n[[app]]\nname = \"a\"\ncommand = \"x\"\n{extra}\n");
        std::fs::write(dir.path().join("bad.toml"), text).expect("write");
        let (ok, out) = hayate_in(dir.path(), &["check", "bad.toml"]);
        assert!(!ok, "{out}");
        out
    };
    let out = check("restart_cron = \"0 4 * *\"");
    assert!(
        out.contains("bad.toml:5: restart_cron: \"0 4 * *\": expected 5 fields"),
        "{out}"
    );
    let out = check("restart_cron = \"0 25 * * *\"");
    assert!(
        out.contains("bad.toml:5: restart_cron: \"0 25 * * *\""),
        "{out}"
    );
    let out = check("restart_every = \"100ms\"");
    assert!(
        out.contains("bad.toml:5: restart_every: 100ms is shorter than 1s"),
        "{out}"
    );
    let out = check("restart_every = \"1h\"\nrestart_cron = \"0 4 * * *\"");
    let both = ["bad.toml:5: restart_every: ", "bad.toml:6: restart_cron: "];
    assert!(
        both.iter()
            .any(|at| out.contains(&format!("{at}restart_cron and restart_every both set"))),
        "{out}"
    );
    let out = check("watch = [\"src\", \"../elsewhere\"]");
    assert!(out.contains("bad.toml:5: watch: \"../elsewhere\""), "{out}");
    let out = check("build = []");
    assert!(
        out.contains("bad.toml:5: build: expected a command"),
        "{out}"
    );
    let out = check("watch_debounce = \"soon\"");
    assert!(out.contains("bad.toml:5: watch_debounce"), "{out}");
}
