//! Header rules, the security preset and CORS end to end (issue "Site
//! policy, part 2"), over HTTP/1.1 and HTTP/2, on files, proxied answers
//! and hayate's own errors.

// Tests block on purpose (they are clients, not the server).
#![allow(clippy::disallowed_methods)]

use std::path::Path;
use std::process::Command;

use hayate_testkit::origin::{Echo, Origin, OriginOptions};
use hayate_testkit::{run_to_end, Hayate};

const BIN: &str = env!("CARGO_BIN_EXE_hayate");

/// A config file in `dir` made of `text`, started.
fn start(dir: &Path, text: &str) -> Hayate {
    Hayate::start_config(BIN, &dir.join("hayate.toml"), text)
}

/// Files under `dir/www`, `/api/` proxied to `origin`; `site` and `api`
/// are more lines of the site and of the `/api/` route.
fn config(dir: &Path, origin: &Origin, site: &str, api: &str) -> String {
    let www = dir.join("www");
    std::fs::create_dir_all(&www).expect("mkdir");
    std::fs::write(www.join("index.html"), "home\n").expect("write");
    format!(
        "listen = [\"127.0.0.1:0\"]\nhttp2 = true\n\
         [[site]]\nroot = \"{www}\"\ncache_control = \"max-age=60\"\n{site}\n\
         [[site.route]]\nprefix = \"/api/\"\nproxy = [\"{origin}\"]\n{api}\n",
        www = www.display(),
        origin = origin.url(),
    )
}

/// curl's response head (lower-case names) for `path` over h2c with prior
/// knowledge or HTTP/1.1, with `args` added.
fn curl_head(port: u16, path: &str, http2: bool, args: &[&str]) -> String {
    let url = format!("http://127.0.0.1:{port}{path}");
    let version = if http2 {
        "--http2-prior-knowledge"
    } else {
        "--http1.1"
    };
    let out = Command::new("curl")
        .args(["-sS", "--path-as-is", "-o", "/dev/null", "-D", "-", version])
        .args(args)
        .arg(&url)
        .output()
        .expect("curl (installed by scripts/test)");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).to_ascii_lowercase()
}

#[test]
fn response_rules_add_up_from_site_to_route_and_reach_every_answer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = Origin::start(OriginOptions::default());
    let site = r#"response_headers = { "X-Frame-Options" = "DENY", "-Server" = "", "?Cache-Control" = "no-store", "X-Client" = "$client_ip $scheme $path" }"#;
    let api =
        r#"response_headers = { "+Link" = "</a.css>; rel=preload", "-X-Frame-Options" = "" }"#;
    let h = start(dir.path(), &config(dir.path(), &o, site, api));
    let mut c = h.client();

    // A file: the site's rules; its own Cache-Control stays.
    let r = c.get("/", &[]);
    assert_eq!(r.header("x-frame-options"), Some("DENY"));
    assert_eq!(r.header("server"), None);
    assert_eq!(r.header("cache-control"), Some("max-age=60"));
    assert_eq!(r.header("x-client"), Some("127.0.0.1 http /"));
    // hayate's own 404 carries them too, and the default fills in.
    let r = c.get("/missing%0d%0aSet-Cookie:%20x=1", &[]);
    assert_eq!(r.status, 404);
    assert_eq!(r.header("x-frame-options"), Some("DENY"));
    assert_eq!(r.header("cache-control"), Some("no-store"));
    // `$path` is the path as sent: no CR/LF comes out of it.
    assert_eq!(
        r.header("x-client"),
        Some("127.0.0.1 http /missing%0d%0aSet-Cookie:%20x=1")
    );
    assert_eq!(r.header("set-cookie"), None);
    // The route's rules come after the site's: one added, one undone.
    let r = c.get("/api/echo", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("link"), Some("</a.css>; rel=preload"));
    assert_eq!(r.header("x-frame-options"), None);
    assert_eq!(r.header("server"), None);

    // HTTP/2 alike.
    let head = curl_head(h.addr.port(), "/", true, &[]);
    assert!(head.contains("x-frame-options: deny"), "{head}");
    assert!(!head.contains("server:"), "{head}");
    h.assert_no_errors();
}

#[test]
fn request_rules_shape_what_the_upstream_gets() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = Origin::start(OriginOptions::default());
    let api = r#"request_headers = { "X-Real-IP" = "$client_ip", "-Cookie" = "", "?X-Tenant" = "default", "X-Original" = "$request_uri" }"#;
    let h = start(dir.path(), &config(dir.path(), &o, "", api));
    let mut c = h.client();
    let r = c.get(
        "/api/echo?a=1",
        &[("Cookie", "session=1"), ("X-Real-IP", "6.6.6.6")],
    );
    let e = Echo::parse(&r.text());
    assert_eq!(e.header("x-real-ip"), Some("127.0.0.1"));
    assert_eq!(e.header("cookie"), None);
    assert_eq!(e.header("x-tenant"), Some("default"));
    assert_eq!(e.header("x-original"), Some("/api/echo?a=1"));
    let r = c.get("/api/echo", &[("X-Tenant", "acme")]);
    assert_eq!(Echo::parse(&r.text()).header("x-tenant"), Some("acme"));
    h.assert_no_errors();
}

#[test]
fn the_security_preset_fills_what_responses_lack() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = Origin::start(OriginOptions::default());
    // Files first, the origin for the rest.
    let site = format!("security_headers = true\nproxy = [\"{}\"]", o.url());
    let h = start(dir.path(), &config(dir.path(), &o, &site, ""));
    let mut c = h.client();
    let r = c.get("/", &[]);
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(
        r.header("referrer-policy"),
        Some("strict-origin-when-cross-origin")
    );
    assert_eq!(r.header("x-frame-options"), Some("SAMEORIGIN"));
    // Never Strict-Transport-Security over plain HTTP (RFC 6797 §7.2).
    assert_eq!(r.header("strict-transport-security"), None);
    // An app's own value wins.
    let r = c.get("/script?h=X-Frame-Options:DENY", &[]);
    assert_eq!(r.header("x-frame-options"), Some("DENY"));
    assert_eq!(r.count("x-frame-options"), 1);
    h.assert_no_errors();
}

#[test]
fn cors_preflights_are_answered_before_auth_and_only_listed_origins_are_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = Origin::start(OriginOptions::default());
    let htpasswd = dir.path().join("htpasswd");
    let mut cmd = Command::new("htpasswd");
    cmd.args(["-c", "-b", "-B"])
        .arg(&htpasswd)
        .args(["ann", "pw"]);
    let (ok, out) = run_to_end(&mut cmd);
    assert!(
        ok,
        "htpasswd (apache2-utils, installed by scripts/test): {out}"
    );
    let api = format!(
        "cors = [\"https://app.example\"]\ncors_credentials = true\ncors_expose = \"X-Total\"\n\
         basic_auth = \"{}\"\n",
        htpasswd.display()
    );
    let h = start(dir.path(), &config(dir.path(), &o, "", &api));
    let mut c = h.client();
    let preflight = |c: &mut hayate_testkit::Client, origin: &str| {
        c.request(
            "OPTIONS",
            "/api/items",
            &[
                ("Origin", origin),
                ("Access-Control-Request-Method", "PUT"),
                ("Access-Control-Request-Headers", "content-type, x-csrf"),
            ],
        )
    };
    // A browser's preflight carries no credentials: answered by hayate.
    let r = preflight(&mut c, "https://app.example");
    assert_eq!(r.status, 204);
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("https://app.example")
    );
    assert_eq!(r.header("access-control-allow-credentials"), Some("true"));
    assert_eq!(
        r.header("access-control-allow-headers"),
        Some("content-type, x-csrf")
    );
    assert!(r
        .header("access-control-allow-methods")
        .is_some_and(|m| m.contains("PUT")));
    assert_eq!(r.header("access-control-max-age"), Some("600"));
    // Another origin: refused, and named nowhere.
    let r = preflight(&mut c, "https://evil.example");
    assert_eq!(r.status, 403);
    assert_eq!(r.header("access-control-allow-origin"), None);

    // The call itself still needs the password; its 401 is readable by
    // the page (so it can ask for a login), and a 200 names the origin.
    let origin = [("Origin", "https://app.example")];
    let r = c.get("/api/echo", &origin);
    assert_eq!(r.status, 401);
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("https://app.example")
    );
    let auth = ("Authorization", "Basic YW5uOnB3");
    let r = c.get("/api/echo", &[origin[0], auth]);
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("https://app.example")
    );
    assert_eq!(r.header("access-control-expose-headers"), Some("X-Total"));
    assert!(r.header("vary").is_some_and(|v| v.contains("Origin")));
    let r = c.get("/api/echo", &[("Origin", "https://evil.example"), auth]);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("access-control-allow-origin"), None);

    // Over HTTP/2 the same preflight.
    let head = curl_head(
        h.addr.port(),
        "/api/items",
        true,
        &[
            "-X",
            "OPTIONS",
            "-H",
            "Origin: https://app.example",
            "-H",
            "Access-Control-Request-Method: GET",
        ],
    );
    assert!(head.starts_with("http/2 204"), "{head}");
    assert!(
        head.contains("access-control-allow-origin: https://app.example"),
        "{head}"
    );
    h.assert_no_errors();
}

#[test]
fn error_pages_replace_hayates_own_errors_and_with_intercept_the_upstreams() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = Origin::start(OriginOptions::default());
    let errors = dir.path().join("errors");
    std::fs::create_dir_all(&errors).expect("mkdir");
    std::fs::write(errors.join("404.html"), "<h1>lost</h1>\n").expect("write");
    std::fs::write(errors.join("4xx.html"), "<h1>no</h1>\n").expect("write");
    std::fs::write(errors.join("5xx.html"), "<h1>down</h1>\n").expect("write");
    let pages = "error_pages = { 404 = \"errors/404.html\", \"4xx\" = \"errors/4xx.html\", \"5xx\" = \"errors/5xx.html\" }";
    let www = dir.path().join("www");
    std::fs::create_dir_all(&www).expect("mkdir");
    let text = format!(
        "listen = [\"127.0.0.1:0\"]\nhttp2 = true\n{pages}\n\
         [[site]]\nroot = \"{www}\"\n\
         [[site.route]]\nprefix = \"/office/\"\nroot = \"{www}\"\nallow = [\"192.0.2.0/24\"]\n\
         [[site.route]]\nprefix = \"/down/\"\nproxy = [\"http://127.0.0.1:1\"]\n\
         [[site.route]]\nprefix = \"/script\"\nproxy = [\"{origin}\"]\n\
         [[site.route]]\nprefix = \"/status\"\nproxy = [\"{origin}\"]\nintercept_errors = true\n",
        www = www.display(),
        origin = o.url(),
    );
    let h = start(dir.path(), &text);
    let mut c = h.client();

    let r = c.get("/nothing-here", &[]);
    assert_eq!((r.status, r.text().as_str()), (404, "<h1>lost</h1>\n"));
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    let r = c.get("/office/x", &[]);
    assert_eq!((r.status, r.text().as_str()), (403, "<h1>no</h1>\n"));
    let r = c.get("/down/x", &[]);
    assert_eq!((r.status, r.text().as_str()), (502, "<h1>down</h1>\n"));
    // A client that wants JSON gets JSON.
    let r = c.get("/nothing-here", &[("Accept", "application/json")]);
    assert_eq!(r.status, 404);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.text(), "{\"status\":404,\"error\":\"Not Found\"}\n");

    // An upstream's own error is its own, unless intercepted.
    let r = c.get("/script?status=503&body=upstream-text", &[]);
    assert_eq!((r.status, r.text().as_str()), (503, "upstream-text"));
    let r = c.get("/status?code=500", &[]);
    assert_eq!((r.status, r.text().as_str()), (500, "<h1>down</h1>\n"));
    let r = c.get("/status?code=401", &[]);
    assert_eq!((r.status, r.text().as_str()), (401, "<h1>no</h1>\n"));
    assert_eq!(c.get("/status?code=200", &[]).status, 200);

    // HTTP/2 alike.
    let head = curl_head(h.addr.port(), "/nothing-here", true, &[]);
    assert!(head.starts_with("http/2 404"), "{head}");
    assert!(head.contains("content-type: text/html"), "{head}");
}

#[test]
fn a_request_no_route_takes_gets_the_sites_error_page_and_header_rules() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = Origin::start(OriginOptions::default());
    std::fs::write(dir.path().join("404.html"), "<h1>not here</h1>\n").expect("write");
    // A site of one route, /api/: the rest of its paths match no route.
    let text = format!(
        "listen = [\"127.0.0.1:0\"]\nhttp2 = true\n\
         [[site]]\nerror_pages = {{ 404 = \"404.html\" }}\n\
         response_headers = {{ \"X-Frame-Options\" = \"DENY\" }}\n\
         [[site.route]]\nprefix = \"/api/\"\nproxy = [\"{origin}\"]\n",
        origin = o.url(),
    );
    let h = start(dir.path(), &text);
    let r = h.client().get("/elsewhere", &[]);
    assert_eq!((r.status, r.text().as_str()), (404, "<h1>not here</h1>\n"));
    assert_eq!(r.header("x-frame-options"), Some("DENY"));
    let head = curl_head(h.addr.port(), "/elsewhere", true, &[]);
    assert!(head.starts_with("http/2 404"), "{head}");
    assert!(head.contains("x-frame-options: deny"), "{head}");
    // The route's own answers carry the site's rules as before.
    let r = h.client().get("/api/x", &[]);
    assert_eq!((r.status, r.header("x-frame-options")), (200, Some("DENY")));
}

#[test]
fn a_missing_error_page_is_named_at_start_and_by_check() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("hayate.toml");
    std::fs::write(
        &file,
        "root = \".\"\nerror_pages = { 404 = \"errors/nope.html\" }\n",
    )
    .expect("write");
    let out = Command::new(BIN)
        .args(["check", file.to_str().expect("utf-8")])
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("error_pages") && err.contains("nope.html"),
        "{err}"
    );
}

#[test]
fn error_pages_keep_the_fields_that_say_how_to_get_past_the_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = Origin::start(OriginOptions::default());
    std::fs::write(dir.path().join("4xx.html"), "<p>4xx page</p>\n").expect("write");
    std::fs::write(dir.path().join("5xx.html"), "<p>5xx page</p>\n").expect("write");
    let htpasswd = dir.path().join("htpasswd");
    let mut cmd = Command::new("htpasswd");
    cmd.args(["-c", "-b", "-B"])
        .arg(&htpasswd)
        .args(["ann", "pw"]);
    let (ok, out) = run_to_end(&mut cmd);
    assert!(
        ok,
        "htpasswd (apache2-utils, installed by scripts/test): {out}"
    );
    let text = format!(
        "listen = [\"127.0.0.1:0\"]\nproxy_timeout = \"300ms\"\n\
         error_pages = {{ \"4xx\" = \"4xx.html\", \"5xx\" = \"5xx.html\" }}\n\
         [[site]]\nproxy = [\"{origin}\"]\n\
         [[site.route]]\nprefix = \"/auth/\"\nproxy = [\"{origin}\"]\nbasic_auth = \"{auth}\"\n\
         [[site.route]]\nprefix = \"/limited/\"\nproxy = [\"{origin}\"]\nrate_limit = \"1/m\"\n\
         [[site.route]]\nprefix = \"/small/\"\nproxy = [\"{origin}\"]\nmax_body_size = \"10\"\n",
        origin = o.url(),
        auth = htpasswd.display()
    );
    let h = start(dir.path(), &text);
    let page = |r: &hayate_testkit::Response, status: u16, text: &str| {
        assert_eq!((r.status, r.text().as_str()), (status, text));
        assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    };
    let mut c = h.client();
    let r = c.get("/auth/x", &[]);
    page(&r, 401, "<p>4xx page</p>\n");
    assert!(r
        .header("www-authenticate")
        .is_some_and(|v| v.starts_with("Basic")));
    assert_eq!(c.get("/limited/x", &[]).status, 200);
    let r = c.get("/limited/x", &[]);
    page(&r, 429, "<p>4xx page</p>\n");
    assert!(r.header("retry-after").is_some());
    let mut c = h.client();
    page(
        &c.post("/small/x", &[], &[b'x'; 100]),
        413,
        "<p>4xx page</p>\n",
    );
    let mut c = h.client();
    page(&c.get("/script?ms=1000", &[]), 504, "<p>5xx page</p>\n");
}
