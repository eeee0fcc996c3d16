//! The admin status page in a real headless Chromium: `hayate run` with a
//! Node app and `--admin`, traffic, and the page's tables updating live to
//! the numbers `/metrics` shows (requests, status classes, a compressed
//! body, the upstream member, the instance and why it was restarted);
//! values from the config appear as text, never as markup. With several
//! `[[app]]`s, every app's instances by name, and one a reload adds.

// Tests block on purpose (they are clients, not the server).
#![allow(clippy::disallowed_methods)]

use std::net::SocketAddr;

use hayate_core::metrics::{parse, Sample};
use hayate_testkit::browser::Browser;
use hayate_testkit::{eventually_async, Client, Hayate};
use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_hayate");

/// Answers 404 for `/nope`, 4 KiB of text for `/big`, 200 otherwise.
const APP: &str = r#"
require('http').createServer((req, res) => {
  if (req.url === '/big') { res.setHeader('Content-Type', 'text/plain'); res.end('x'.repeat(4096)); return; }
  res.statusCode = req.url === '/nope' ? 404 : 200;
  res.end('app ' + req.url);
}).listen(process.env.PORT);
"#;

/// A route prefix and a config file name with markup in them: the page
/// must show them as text.
const MARKUP_PREFIX: &str = "/<b>bold</b>/";
const CONFIG: &str = "site<i>&amp;.toml";

/// Reads the page after its next render in which the route `/` shows at
/// least `arguments[0]` requests and, unless `arguments[1]` is null, an app
/// instance shows that last exit (the page fires `status-update` after each
/// render): the header facts and the tables' cell texts, or `null` after 5 s.
const READ_PAGE: &str = r##"
const [want, exit, done] = arguments;
const cells = (tr) => [...tr.cells].map((c) => c.textContent);
function read() {
  const routes = [...document.querySelectorAll("#routes tbody tr")];
  const root = routes.find((tr) => tr.dataset.route === "/");
  if (!root || Number(root.cells[3].textContent.replace(/,/g, "")) < want) return false;
  const app = [...document.querySelectorAll("#app tbody tr")].map(cells);
  if (exit !== null && !app.some((r) => r[8] === exit && r[1] === "ready")) return false;
  done({
    live: document.getElementById("live").textContent,
    config: document.getElementById("config").textContent,
    routes: routes.map((tr) => ({ route: tr.dataset.route, cells: cells(tr),
      spark: tr.querySelector("polyline").getAttribute("points") })),
    app,
    upstreams: [...document.querySelectorAll("#upstreams tbody tr")].map(cells),
    compression: [...document.querySelectorAll("#compression dd")].map((d) => d.textContent),
    markup: document.querySelectorAll("#routes tbody b, #routes tbody i, #config i").length,
  });
  return true;
}
if (!read()) {
  const wait = () => { if (read()) document.removeEventListener("status-update", wait); };
  document.addEventListener("status-update", wait);
  setTimeout(() => done(null), 5000);
}
"##;

fn app_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("app.js"), APP).expect("write");
    std::fs::create_dir(dir.path().join("public")).expect("mkdir");
    std::fs::write(dir.path().join("public/hello.txt"), "static\n").expect("write");
    let config = format!(
        "listen = \"127.0.0.1:0\"\nroot = \"public\"\n\
         [[site]]\nroot = \"public\"\n\
         [[site.route]]\nprefix = \"{MARKUP_PREFIX}\"\nroot = \"public\"\n\
         [[site.route]]\nprefix = \"/limited/\"\nroot = \"public\"\nstrip_prefix = true\n\
         rate_limit = \"1/m\"\n"
    );
    std::fs::write(dir.path().join(CONFIG), config).expect("write");
    dir
}

/// The admin listener's address, from its log line.
async fn admin_address(h: &Hayate) -> SocketAddr {
    eventually_async("the admin listener's log line", || {
        let log = h.stderr();
        let (_, rest) = log
            .split_once("admin listener on http://")
            .ok_or_else(|| log.clone())?;
        let addr = rest.split('/').next().unwrap_or_default();
        addr.parse().map_err(|e| format!("{addr}: {e}"))
    })
    .await
}

fn scrape(admin: SocketAddr) -> Vec<Sample> {
    let r = Client::connect(admin).get("/metrics", &[]);
    assert_eq!(r.status, 200);
    parse(&r.text())
}

fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> u64 {
    let found = samples
        .iter()
        .find(|s| s.name == name && labels.iter().all(|(k, v)| s.label(k) == Some(*v)));
    found
        .unwrap_or_else(|| panic!("{name} {labels:?} in /metrics"))
        .value as u64
}

/// The route `/` as /metrics counts it: (requests, 2xx, 4xx).
fn root_counts(samples: &[Sample]) -> (u64, u64, u64) {
    let n = |class| {
        value(
            samples,
            "hayate_http_requests_total",
            &[("route", "/"), ("code", class)],
        )
    };
    let all = ["1xx", "2xx", "3xx", "4xx", "5xx"].map(n).iter().sum();
    (all, n("2xx"), n("4xx"))
}

async fn read_page(browser: &Browser, want: u64, exit: Option<&str>) -> Value {
    let page = browser
        .client
        .execute_async(READ_PAGE, vec![json!(want), json!(exit)])
        .await
        .expect("script");
    assert!(
        !page.is_null(),
        "the page never showed {want} requests on / (and last exit {exit:?})"
    );
    page
}

fn cell(page: &Value, route: &str, column: usize) -> String {
    let row = page["routes"]
        .as_array()
        .expect("routes")
        .iter()
        .find(|r| r["route"] == route)
        .unwrap_or_else(|| panic!("no row for {route}: {page}"));
    row["cells"][column]
        .as_str()
        .expect("text")
        .replace(',', "")
}

#[tokio::test]
async fn the_status_page_updates_live_and_agrees_with_metrics() {
    let dir = app_dir();
    let args = [
        "run",
        "--config",
        CONFIG,
        "--workers",
        "1",
        "--instances",
        "1",
        "--admin",
        "127.0.0.1:0",
        "--",
        "node",
        "app.js",
    ];
    let h = Hayate::start_in(BIN, &args, &[], Some(dir.path()));
    let admin = admin_address(&h).await;
    let mut c = h.client();
    eventually_async("the app answers", || match c.get("/hello", &[]).status {
        200 => Ok(()),
        s => Err(format!("status {s}")),
    })
    .await;

    // The page itself: compressed, locked down.
    let r = Client::connect(admin).get("/", &[("Accept-Encoding", "gzip")]);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    let csp = r.header("content-security-policy").expect("CSP");
    assert!(csp.starts_with("default-src 'none';"), "{csp}");
    assert!(r.body.len() < 8 * 1024, "{} bytes", r.body.len());

    let browser = Browser::start(1024, 768).await;
    browser
        .client
        .goto(&format!("http://{admin}/"))
        .await
        .expect("load the page");

    // First render: what /metrics counts now (the CSP let the page's own
    // script run and fetch /status.json).
    let (first, _, _) = root_counts(&scrape(admin));
    let page = read_page(&browser, first, None).await;
    assert!(page["live"].as_str().unwrap().starts_with("live"), "{page}");
    assert_eq!(cell(&page, "/", 3), first.to_string(), "{page}");

    // More traffic, and the same page shows it without a reload.
    assert_eq!(c.get("/limited/hello.txt", &[]).status, 200);
    assert_eq!(c.get("/limited/hello.txt", &[]).status, 429);
    for path in ["/a", "/b", "/nope", "/hello.txt", "/nope"] {
        c.get(path, &[]);
    }
    let big = c.get("/big", &[("Accept-Encoding", "gzip")]);
    assert_eq!(big.header("content-encoding"), Some("gzip"));
    let metrics = scrape(admin);
    let (requests, ok, not_found) = root_counts(&metrics);
    assert_eq!(requests, first + 6);
    let page = read_page(&browser, requests, None).await;
    assert_eq!(cell(&page, "/", 3), requests.to_string(), "{page}");
    assert_eq!(cell(&page, "/", 4), ok.to_string(), "2xx: {page}");
    let compressed = value(&metrics, "hayate_compression_streamed_bodies_total", &[]);
    assert_eq!(compressed, 1);
    assert_eq!(
        page["compression"][0], "1",
        "proxied bodies compressed: {page}"
    );
    assert_eq!(cell(&page, "/", 6), not_found.to_string(), "4xx: {page}");
    assert_eq!(not_found, 2);
    // Refusals by the route's limits, beside its status classes.
    assert_eq!(cell(&page, "/limited/", 8), "1", "rate-limited: {page}");
    assert_eq!(cell(&page, "/limited/", 9), "0", "conn-limited: {page}");
    assert_eq!(cell(&page, "/", 8), "0", "{page}");
    let rate: f64 = cell(&page, "/", 2).parse().expect("req/s, a number");
    assert!(rate > 0.0, "{page}");
    let root = page["routes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["route"] == "/");
    let spark = root.expect("row of /")["spark"]
        .as_str()
        .expect("sparkline");
    assert!(!spark.is_empty(), "a sparkline point per update: {page}");

    // The app instance as /metrics has it, its state in words.
    let pid = value(&metrics, "hayate_app_instance_pid", &[("instance", "0")]);
    let instance = page["app"][0].as_array().expect("one instance row");
    assert_eq!(instance[1], "ready", "{page}");
    assert_eq!(instance[2], pid.to_string(), "{page}");

    // The app's slot as an upstream member of the route /, as /metrics has it.
    let up = value(
        &metrics,
        "hayate_upstream_member_state",
        &[("route", "/"), ("member", "app[0]"), ("state", "up")],
    );
    assert_eq!(up, 1);
    let member = page["upstreams"]
        .as_array()
        .expect("upstream rows")
        .iter()
        .find(|r| r[1] == "/" && r[2] == "app[0]")
        .unwrap_or_else(|| panic!("app[0] of / in {page}"));
    assert_eq!(member[3], "up", "{page}");

    // Markup from the config is shown as text.
    assert_eq!(cell(&page, MARKUP_PREFIX, 1), MARKUP_PREFIX, "{page}");
    assert_eq!(page["config"], CONFIG);
    assert_eq!(page["markup"], 0, "no element made from data: {page}");

    // An instance killed: restarted, and the page says why it ended.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill the instance");
    let reason = eventually_async("a new instance after the kill", || {
        let m = scrape(admin);
        let ready = [("instance", "0"), ("state", "ready")];
        let replaced = value(&m, "hayate_app_instance_state", &ready) == 1
            && value(&m, "hayate_app_instance_pid", &[("instance", "0")]) != pid;
        let exit = m
            .iter()
            .find(|s| s.name == "hayate_app_instance_last_exit")
            .and_then(|s| s.label("reason"))
            .map(str::to_string);
        match (replaced, exit) {
            (true, Some(reason)) => Ok(reason),
            (_, exit) => Err(format!("ready again: {replaced}, last exit {exit:?}")),
        }
    })
    .await;
    assert_eq!(reason, "killed by signal 9");
    let page = read_page(&browser, requests, Some(&reason)).await;
    let instance = page["app"][0].as_array().expect("one instance row");
    assert_eq!(instance[4], "1", "one restart: {page}");

    browser.close().await;
    h.assert_no_errors();
}

/// Reads the app table after the render in which every instance of
/// `arguments[0]` (labels such as `api[1]`) shows `ready`: each row's
/// cells and the queue facts, or `null` after 5 s.
const READ_APPS: &str = r##"
const [want, done] = arguments;
function read() {
  const rows = [...document.querySelectorAll("#app tbody tr")].map((tr) => [...tr.cells].map((c) => c.textContent));
  if (!want.every((w) => rows.some((r) => r[0] === w && r[1] === "ready"))) return false;
  done({ rows, queue: document.getElementById("queue").textContent });
  return true;
}
if (!read()) {
  const wait = () => { if (read()) document.removeEventListener("status-update", wait); };
  document.addEventListener("status-update", wait);
  setTimeout(() => done(null), 5000);
}
"##;

async fn read_apps(browser: &Browser, want: &[&str]) -> Value {
    let page = browser
        .client
        .execute_async(READ_APPS, vec![json!(want)])
        .await
        .expect("script");
    assert!(!page.is_null(), "the page never showed {want:?} ready");
    page
}

/// Two `[[app]]`s; `extra` is appended (a third app and its route).
fn two_apps(extra: &str) -> String {
    format!(
        "listen = \"127.0.0.1:0\"\nworkers = 1\nadmin = \"127.0.0.1:0\"\napp_listen = \"unix\"\n\
         [[app]]\nname = \"api\"\ncommand = [\"node\", \"app.js\"]\ninstances = 2\n\
         [[app]]\nname = \"web\"\ncommand = [\"node\", \"app.js\"]\ninstances = 1\n{extra}\
         [[site]]\nroot = \"public\"\n\
         [[site.route]]\nprefix = \"/api/\"\napp = \"api\"\n\
         [[site.route]]\nprefix = \"/web/\"\napp = \"web\"\n"
    )
}

#[tokio::test]
async fn the_status_page_shows_every_app_and_one_a_reload_adds() {
    let dir = app_dir();
    std::fs::write(dir.path().join("hayate.toml"), two_apps("")).expect("write");
    let args = ["run", "--config", "hayate.toml"];
    let h = Hayate::start_in(BIN, &args, &[], Some(dir.path()));
    let admin = admin_address(&h).await;
    let browser = Browser::start(1024, 768).await;
    browser
        .client
        .goto(&format!("http://{admin}/"))
        .await
        .expect("load the page");
    let page = read_apps(&browser, &["api[0]", "api[1]", "web[0]"]).await;
    let labels: Vec<&str> = page["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| r[0].as_str().expect("label"))
        .collect();
    assert_eq!(labels, ["api[0]", "api[1]", "web[0]"], "{page}");
    assert_eq!(page["queue"], "api 0, web 0", "{page}");

    let admin_app = "[[app]]\nname = \"admin\"\ncommand = [\"node\", \"app.js\"]\ninstances = 1\n\
                     [[site]]\nhosts = [\"admin.test\"]\nroot = \"public\"\napp = \"admin\"\n";
    std::fs::write(dir.path().join("hayate.toml"), two_apps(admin_app)).expect("write");
    let (ok, report) = hayate_testkit::run_to_end(
        std::process::Command::new(BIN)
            .args(["reload", "web"])
            .current_dir(dir.path()),
    );
    assert!(ok && report.contains("admin: new in the file"), "{report}");
    let page = read_apps(&browser, &["api[0]", "api[1]", "web[0]", "admin[0]"]).await;
    assert_eq!(page["queue"], "api 0, web 0, admin 0", "{page}");
    browser.close().await;
    h.assert_no_errors();
}
