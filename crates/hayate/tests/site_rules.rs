//! Site rules end to end (issue "Site policy, part 2"): redirects,
//! rewrites and responds from `[[site.rule]]`, each condition and
//! variable, rule order, loops and oversized results, over HTTP/1.1 and
//! HTTP/2 (curl with prior knowledge), whatever the path's encoding.

// Tests block on purpose (they are clients, not the server).
#![allow(clippy::disallowed_methods)]

use std::path::Path;
use std::process::Command;

use hayate_testkit::origin::{Echo, Origin, OriginOptions};
use hayate_testkit::{eventually, Client, Hayate, Response};

const BIN: &str = env!("CARGO_BIN_EXE_hayate");

/// A config file in `dir` made of `text`, started.
fn start(dir: &Path, text: &str) -> Hayate {
    Hayate::start_config(BIN, &dir.join("hayate.toml"), text)
}

/// A site: files under `dir/www` (an SPA under /app/), `/api/` proxied to
/// `origin`, and `rules` (TOML `[[site.rule]]` tables) in front.
fn site(dir: &Path, origin: &Origin, rules: &str) -> String {
    let www = dir.join("www");
    std::fs::create_dir_all(www.join("app")).expect("mkdir");
    std::fs::write(www.join("index.html"), "home\n").expect("write");
    std::fs::write(www.join("app/index.html"), "spa\n").expect("write");
    std::fs::write(www.join("app/logo.txt"), "logo\n").expect("write");
    format!(
        "listen = [\"127.0.0.1:0\"]\naccess_log = \"{log}\"\nhttp2 = true\n\
         [[site]]\nroot = \"{www}\"\n\
         [[site.route]]\nprefix = \"/api/\"\nproxy = [\"{origin}\"]\n{rules}",
        log = dir.join("access.log").display(),
        www = www.display(),
        origin = origin.url(),
    )
}

/// `GET path` with Host `host` over HTTP/1.1.
fn get_host(c: &mut Client, host: &str, path: &str) -> Response {
    c.send(format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes());
    c.read_response(false)
}

/// curl over h2c with prior knowledge: status, Location, body.
fn h2(h: &Hayate, path: &str) -> (u16, String, String) {
    let url = format!("http://127.0.0.1:{}{path}", h.addr.port());
    let out = Command::new("curl")
        .args(["-sS", "--path-as-is", "--http2-prior-knowledge", "-D", "-"])
        .arg(&url)
        .output()
        .expect("curl (installed by scripts/test)");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok());
    let location = head
        .lines()
        .find_map(|l| l.strip_prefix("location: "))
        .unwrap_or_default();
    (
        status.expect("a status"),
        location.to_string(),
        body.to_string(),
    )
}

#[test]
fn redirects_rewrites_and_responds_over_http1_and_http2() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = Origin::start(OriginOptions::default());
    let rules = r#"
[[site.rule]]
match = "^/blog/(\\d+)/?$"
redirect = "/posts/$1"
status = 301
[[site.rule]]
prefix = "/old"
redirect_prefix = "/new"
[[site.rule]]
host = "www.example.com"
redirect = "https://example.com$request_uri"
status = 308
[[site.rule]]
match = "^/gone"
respond = 410
[[site.rule]]
match = "^/teapot$"
respond = "short and stout\n"
status = 418
[[site.rule]]
match = "^/p/(?P<slug>[a-z0-9-]+)$"
rewrite = "/api/echo?p=$slug"
[[site.rule]]
match = "^/first$"
respond = "first\n"
[[site.rule]]
match = "^/first$"
respond = "second\n"
[[site.rule]]
match = "^/drop-query$"
redirect = "/landing?"
"#;
    let h = start(dir.path(), &site(dir.path(), &o, rules));
    let mut c = h.client();

    let r = c.get("/blog/42/?utm=x", &[]);
    assert_eq!(
        (r.status, r.header("location")),
        (301, Some("/posts/42?utm=x"))
    );
    // A prefix redirect keeps the rest and the query; not /older.
    let r = c.get("/old/a/b?q=1", &[]);
    assert_eq!(
        (r.status, r.header("location")),
        (302, Some("/new/a/b?q=1"))
    );
    assert_eq!(c.get("/older", &[]).status, 404);
    let r = get_host(&mut c, "WWW.example.com:8080", "/x/y?z=1");
    assert_eq!(
        (r.status, r.header("location")),
        (308, Some("https://example.com/x/y?z=1"))
    );
    assert_eq!(c.get("/gone/for/good", &[]).status, 410);
    let r = c.get("/teapot", &[]);
    assert_eq!((r.status, r.text().as_str()), (418, "short and stout\n"));
    // The first rule that matches acts.
    assert_eq!(c.get("/first", &[]).text(), "first\n");
    // A `?` with nothing after it drops the query, and no `?` is left.
    let r = c.get("/drop-query?utm=x", &[]);
    assert_eq!((r.status, r.header("location")), (302, Some("/landing")));

    // A rewrite continues on another route: the upstream gets the new
    // target; the access log keeps what the client asked for.
    let r = c.get("/p/hello-world", &[]);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(Echo::parse(&r.text()).target, "/api/echo?p=hello-world");
    // Paths no rule matches are served as always.
    assert_eq!(c.get("/app/logo.txt", &[]).text(), "logo\n");

    // The same over HTTP/2.
    assert_eq!(h2(&h, "/blog/7").0, 301);
    assert_eq!(h2(&h, "/blog/7").1, "/posts/7");
    let (status, _, body) = h2(&h, "/p/abc");
    assert_eq!(status, 200, "{body}");
    assert_eq!(Echo::parse(&body).target, "/api/echo?p=abc");

    let log = dir.path().join("access.log");
    eventually("the rewritten request's log line", || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        match text.contains("\"GET /p/hello-world HTTP/1.1\" 200") {
            true => Ok(()),
            false => Err(text),
        }
    });
    h.assert_no_errors();
}

#[test]
fn every_condition_and_variable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = Origin::start(OriginOptions::default());
    let rules = r#"
[[site.rule]]
method = ["POST", "PUT"]
match = "^/form$"
respond = "posted\n"
[[site.rule]]
header = { "User-Agent" = "(?i)badbot" }
respond = 403
[[site.rule]]
prefix = "/keyed/"
header = { "X-Key" = "!^secret$" }
respond = 401
[[site.rule]]
query = "(^|&)debug=1(&|$)"
respond = "no debugging here\n"
status = 403
[[site.rule]]
scheme = "http"
match = "^/vars$"
rewrite = "/api/echo?host=$host&scheme=$scheme&ip=$client_ip&q=$query&path=$path&uri=$request_uri"
[[site.rule]]
prefix = "/app/"
file = "missing"
rewrite = "/app/index.html"
last = true
"#;
    let h = start(dir.path(), &site(dir.path(), &o, rules));
    let mut c = h.client();

    assert_eq!(c.post("/form", &[], b"x").text(), "posted\n");
    assert_eq!(c.get("/form", &[]).status, 404);
    assert_eq!(
        c.get("/", &[("User-Agent", "Mozilla BadBot/1")]).status,
        403
    );
    assert_eq!(c.get("/", &[("User-Agent", "Mozilla")]).status, 200);
    // A negated header condition holds for a missing field too.
    assert_eq!(c.get("/keyed/x", &[]).status, 401);
    assert_eq!(c.get("/keyed/x", &[("X-Key", "guess")]).status, 401);
    assert_eq!(c.get("/keyed/x", &[("X-Key", "secret")]).status, 404);
    assert_eq!(c.get("/?a=1&debug=1", &[]).status, 403);
    assert_eq!(c.get("/?debug=10", &[]).status, 200);

    let r = c.get("/vars?a=b", &[]);
    assert_eq!(r.status, 200, "{}", r.text());
    let target = Echo::parse(&r.text()).target;
    assert_eq!(
        target,
        "/api/echo?host=test&scheme=http&ip=127.0.0.1&q=a=b&path=/vars&uri=/vars?a=b"
    );

    // `file`: an existing file is served, anything else under /app/ is
    // the single-page app's index.
    assert_eq!(c.get("/app/logo.txt", &[]).text(), "logo\n");
    assert_eq!(c.get("/app/settings/profile", &[]).text(), "spa\n");
    h.assert_no_errors();
}

#[test]
fn no_encoding_walks_around_a_rule_and_captures_cannot_inject() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = Origin::start(OriginOptions::default());
    let rules = r#"
[[site.rule]]
match = "^/admin"
respond = 403
[[site.rule]]
match = "^/q/(.*)$"
rewrite = "/api/echo?v=$1"
[[site.rule]]
match = "(?s)^/to/(.*)$"
redirect = "/there/$1"
"#;
    let h = start(dir.path(), &site(dir.path(), &o, rules));
    let mut c = h.client();
    for path in [
        "/admin",
        "/%61dmin/",
        "//admin",
        "/x/../admin",
        "/%2e/admin",
        "/x%2F..%2Fadmin",
    ] {
        assert_eq!(c.get(path, &[]).status, 403, "{path}");
        assert_eq!(h2(&h, path).0, 403, "{path} over HTTP/2");
    }
    // A capture goes into a query value escaped: no parameter added.
    let r = c.get("/q/a%26admin=1%23x", &[]);
    assert_eq!(
        Echo::parse(&r.text()).target,
        "/api/echo?v=a%26admin%3D1%23x"
    );
    // Into a Location, no CR/LF or anything else that would split it.
    let r = c.get("/to/a%0d%0aSet-Cookie:%20x=1", &[]);
    assert_eq!(r.status, 302);
    assert_eq!(
        r.header("location"),
        Some("/there/a%0D%0ASet-Cookie:%20x=1")
    );
    assert_eq!(r.header("set-cookie"), None);
    h.assert_no_errors();
}

#[test]
fn a_looping_rewrite_and_an_oversized_one_are_500_with_the_rule_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = Origin::start(OriginOptions::default());
    let rules = r#"
[[site.rule]]
match = "^/loop/(.*)$"
rewrite = "/loop/$1"
[[site.rule]]
match = "^/big/(.*)$"
redirect = "/x/$1$1$1$1$1$1$1$1$1$1$1$1"
"#;
    let h = start(dir.path(), &site(dir.path(), &o, rules));
    let mut c = h.client();
    assert_eq!(c.get("/loop/a", &[]).status, 500);
    let long = "a".repeat(1000);
    assert_eq!(c.get(&format!("/big/{long}"), &[]).status, 500);
    // The server goes on.
    assert_eq!(c.get("/", &[]).text(), "home\n");
    let err = h.stderr();
    assert!(
        err.contains("the rule at line 10 failed: the rules rewrote this request 10 times"),
        "{err}"
    );
    assert!(
        err.contains("the rule at line 13 failed: it built a URL longer than 8192 bytes"),
        "{err}"
    );
}

#[test]
fn check_names_the_line_of_a_bad_rule() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("hayate.toml");
    std::fs::write(
        &file,
        "root = \".\"\n[[site]]\nroot = \".\"\n\n[[site.rule]]\nmatch = \"^/(a\"\nrespond = 404\n\
         [[site.rule]]\nmatch = \"^/(a)\"\nredirect = \"/$2\"\n",
    )
    .expect("write");
    let out = Command::new(BIN)
        .args(["check", file.to_str().expect("utf-8")])
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("hayate.toml:6: match: bad regex"), "{err}");
    assert!(
        err.contains("hayate.toml:10: redirect: $2: the match regex has 1 capture group(s)"),
        "{err}"
    );
}

#[test]
fn max_body_size_per_route_lets_uploads_in_where_they_belong() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = Origin::start(OriginOptions::default());
    let text = format!(
        "listen = [\"127.0.0.1:0\"]\nhttp2 = true\nmax_body_size = \"1KiB\"\n\
         [[site]]\nproxy = [\"{origin}\"]\n\
         [[site.route]]\nprefix = \"/upload/\"\nproxy = [\"{origin}\"]\nmax_body_size = \"64KiB\"\n",
        origin = o.url()
    );
    let h = start(dir.path(), &text);
    let body = vec![b'x'; 4096];
    let mut c = h.client();
    let r = c.post("/upload/file", &[], &body);
    assert_eq!(r.status, 200);
    assert_eq!(Echo::parse(&r.text()).body_len, 4096);
    let mut c = h.client();
    assert_eq!(c.post("/api/form", &[], &body).status, 413);
    // Chunked, and over HTTP/2, alike.
    let chunked = |path: &str, http2: bool| {
        let url = format!("http://127.0.0.1:{}{path}", h.addr.port());
        let version = if http2 {
            "--http2-prior-knowledge"
        } else {
            "--http1.1"
        };
        let out = Command::new("curl")
            .args(["-sS", "-o", "/dev/null", "-w", "%{http_code}", version])
            .args(["-H", "Transfer-Encoding: chunked", "--data-binary", "@-"])
            .arg(&url)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                use std::io::Write;
                child
                    .stdin
                    .take()
                    .expect("stdin")
                    .write_all(&vec![b'y'; 4096])?;
                child.wait_with_output()
            })
            .expect("curl");
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    assert_eq!(chunked("/upload/a", false), "200");
    assert_eq!(chunked("/api/a", false), "413");
    assert_eq!(chunked("/upload/a", true), "200");
    assert_eq!(chunked("/api/a", true), "413");
}

/// `body_timeout` per route: a route that waits less for a paused body
/// answers 408 by its own limit while the rest of the site keeps the
/// longer one (here 30 s: a test past its read timeout if the route's were
/// not applied).
#[test]
fn body_timeout_per_route_gives_up_on_a_paused_body_sooner() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = Origin::start(OriginOptions::default());
    let text = format!(
        "listen = [\"127.0.0.1:0\"]\nbody_timeout = \"30s\"\n\
         [[site]]\nproxy = [\"{origin}\"]\n\
         [[site.route]]\nprefix = \"/form/\"\nproxy = [\"{origin}\"]\nbody_timeout = \"300ms\"\n",
        origin = o.url()
    );
    let h = start(dir.path(), &text);
    // A body on the rest of the site, paused from before the short route's
    // request begins...
    let mut api = h.client();
    api.send(b"POST /api/a HTTP/1.1\r\nHost: t\r\nContent-Length: 6\r\n\r\nabc");
    let mut form = h.client();
    form.send(b"POST /form/a HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\nabc");
    let r = form.read_response(false);
    assert_eq!(r.status, 408, "{}", r.text());
    assert_eq!(o.requests(), 0, "nothing sent upstream");
    // ...has paused longer than the short route's limit once that route
    // gave up, and is still taken: the origin answers once it is whole.
    api.send(b"def");
    assert_eq!(api.read_response(false).status, 200);
}

#[test]
fn proxy_timeout_per_route_lets_a_slow_endpoint_take_longer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = Origin::start(OriginOptions::default());
    let text = format!(
        "listen = [\"127.0.0.1:0\"]\nproxy_timeout = \"300ms\"\n\
         [[site]]\nproxy = [\"{origin}\"]\n\
         [[site.route]]\nprefix = \"/slow\"\nproxy = [\"{origin}\"]\nproxy_timeout = \"10s\"\n",
        origin = o.url()
    );
    let h = start(dir.path(), &text);
    let mut c = h.client();
    assert_eq!(c.get("/script?ms=1000&body=late", &[]).status, 504);
    let mut c = h.client();
    let r = c.get("/slow?ms=1000", &[]);
    assert_eq!((r.status, r.text().as_str()), (200, "slow\n"));
}
