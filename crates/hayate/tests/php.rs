//! PHP behind hayate: a real php-fpm ([`PhpFpm`], the pool `hayate php`
//! generates) on a Unix socket, hayate in front with `--fastcgi`. GET,
//! POST and uploads, query strings and PATH_INFO, the front controller,
//! headers, cookies, redirects and statuses set by PHP, a streamed
//! response, timeouts (504), php-fpm stopped (502) and back, the pool's
//! bounds and php-fpm recycling its children, what never runs (scripts
//! that do not exist, uploads, traversal, httpoxy), and the cache and
//! compression on PHP responses.

// Tests block on purpose (they are clients, not the server).
#![allow(clippy::disallowed_methods)]

use std::collections::HashSet;
use std::path::Path;

use hayate_supervisor::php::PhpPool;
use hayate_testkit::php::PhpFpm;
use hayate_testkit::{eventually, Client, Hayate, Response};

const BIN: &str = env!("CARGO_BIN_EXE_hayate");

/// The PHP app the tests serve.
const APP: &[(&str, &str)] = &[
    (
        "index.php",
        r#"<?php
header('Content-Type: text/plain');
echo "front uri=", $_SERVER['REQUEST_URI'], " script=", $_SERVER['SCRIPT_NAME'],
    " info=", $_SERVER['PATH_INFO'] ?? '', " query=", $_SERVER['QUERY_STRING'], "\n";
"#,
    ),
    (
        "env.php",
        r#"<?php
header('Content-Type: text/plain');
foreach ($_SERVER as $k => $v) if (is_string($v)) echo "$k=$v\n";
foreach ($_GET as $k => $v) echo "GET:$k=$v\n";
foreach ($_POST as $k => $v) if (is_string($v)) echo "POST:$k=$v\n";
foreach ($_FILES as $k => $f) {
    $want = str_repeat('0123456789', (int) ($_POST['tens'] ?? 0));
    echo "FILE:$k=", $f['name'], ":", $f['size'], ":",
        file_get_contents($f['tmp_name']) === $want ? 'intact' : 'corrupt', "\n";
}
$input = file_get_contents('php://input');
echo "INPUT=", strlen($input), ":",
    $input === str_repeat('0123456789', (int) ($_GET['tens'] ?? 0)) ? 'intact' : 'other', "\n";
"#,
    ),
    (
        "headers.php",
        r#"<?php
setcookie('a', '1');
setcookie('b', '2', ['httponly' => true]);
header('X-From-Php: yes');
http_response_code(201);
echo "created";
"#,
    ),
    ("redirect.php", "<?php header('Location: /landing');\n"),
    (
        "moved.php",
        "<?php header('Location: https://example.com/new', true, 301);\n",
    ),
    (
        "teapot.php",
        "<?php header('Status: 418 I am a teapot'); echo 'short and stout';\n",
    ),
    (
        "gate.php",
        r#"<?php
// Prints "first", then waits (bounded) for the test to create the gate
// file, then prints the rest: a response streams if the client sees
// "first" while the script still waits.
header('Content-Type: text/plain');
echo "first\n";
flush();
for ($i = 0; $i < 200 && !file_exists($_GET['gate']); $i++) usleep(25000);
if (!file_exists($_GET['gate'])) { echo "GATE TIMEOUT\n"; exit; }
for ($i = 0; $i < 64; $i++) { echo str_repeat(chr(65 + $i % 26), 65536); flush(); }
"#,
    ),
    (
        "pid.php",
        r#"<?php
if (isset($_GET['started'])) touch($_GET['started']);
for ($i = 0; isset($_GET['gate']) && $i < 200 && !file_exists($_GET['gate']); $i++) usleep(25000);
echo getmypid();
"#,
    ),
    (
        "stderr.php",
        "<?php error_log('boom from php'); echo 'logged';\n",
    ),
    (
        "pieces.php",
        // Each flush() is a FastCGI STDOUT record of its own, and they come
        // back to back: hayate reads several at once with the head.
        r#"<?php
header('Content-Type: text/plain');
for ($i = 0; $i < 40; $i++) { echo str_repeat(chr(97 + $i % 26), 100 + $i); flush(); }
"#,
    ),
    (
        "page.php",
        r#"<?php
header('Content-Type: text/html; charset=utf-8');
echo '<p>', uniqid('', true), '</p>', str_repeat('<p>lorem ipsum dolor sit amet</p>', 200);
"#,
    ),
    ("blog/index.php", "<?php echo 'blog index';\n"),
    ("assets/app.css", "body { color: red }\n"),
    ("uploads/evil.jpg", "<?php echo 'pwned'; ?>\n"),
    (".hidden/x.php", "<?php echo 'hidden ran';\n"),
    ("UPPER.PHP", "<?php echo 'upper ran';\n"),
];

/// The app in a temp dir.
fn app() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for (path, text) in APP {
        let p = dir.path().join(path);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, text).expect("write");
    }
    dir
}

/// A php-fpm pool of `children`, recycling each after `max_requests`
/// (0: never).
fn php_fpm(children: u32, max_requests: u32) -> PhpFpm {
    PhpFpm::start(&PhpPool {
        children,
        max_requests,
        terminate_after_secs: 0,
    })
}

/// hayate serving `root` with its scripts run by `fpm`, and more `args`.
fn hayate(root: &Path, fpm: &PhpFpm, args: &[&str]) -> Hayate {
    let root = root.to_str().expect("utf-8");
    let address = fpm.address();
    let mut all = vec![root, "--fastcgi", &address];
    all.extend_from_slice(args);
    Hayate::start(BIN, &all)
}

/// The app, a php-fpm of two children and hayate with more `args` in
/// front of them.
fn serve(args: &[&str]) -> (tempfile::TempDir, PhpFpm, Hayate) {
    let dir = app();
    let fpm = php_fpm(2, 0);
    let h = hayate(dir.path(), &fpm, args);
    (dir, fpm, h)
}

/// `KEY=VALUE` lines of env.php's answer.
fn var<'a>(r: &'a Response, key: &str) -> Option<&'a str> {
    let text = std::str::from_utf8(&r.body).expect("utf-8");
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
}

#[test]
fn get_post_upload_query_strings_path_info_and_the_front_controller() {
    let (dir, _fpm, h) = serve(&[]);
    let mut c = h.client();

    let r = c.get(
        "/env.php?a=1&b=two",
        &[("Cookie", "x=1"), ("Cookie", "y=2")],
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let root = std::fs::canonicalize(dir.path()).expect("root");
    let root = root.to_str().expect("utf-8");
    for (k, v) in [
        ("GET:a", "1"),
        ("GET:b", "two"),
        ("QUERY_STRING", "a=1&b=two"),
        ("REQUEST_URI", "/env.php?a=1&b=two"),
        ("REQUEST_METHOD", "GET"),
        ("SCRIPT_NAME", "/env.php"),
        ("SCRIPT_FILENAME", &format!("{root}/env.php")),
        ("DOCUMENT_ROOT", root),
        ("SERVER_PROTOCOL", "HTTP/1.1"),
        ("SERVER_NAME", "test"),
        ("SERVER_PORT", &h.addr.port().to_string()),
        ("REMOTE_ADDR", "127.0.0.1"),
        ("GATEWAY_INTERFACE", "CGI/1.1"),
        ("SERVER_SOFTWARE", "hayate"),
        ("HTTP_HOST", "test"),
        ("HTTP_COOKIE", "x=1; y=2"),
    ] {
        assert_eq!(var(&r, k), Some(v), "{k} in\n{}", r.text());
    }
    assert_eq!(var(&r, "HTTPS"), None);
    let remote_port = c.stream().local_addr().expect("addr").port().to_string();
    assert_eq!(var(&r, "REMOTE_PORT"), Some(remote_port.as_str()));

    // A form.
    let r = c.post(
        "/env.php",
        &[("Content-Type", "application/x-www-form-urlencoded")],
        b"name=hayate&lang=rust",
    );
    assert_eq!(var(&r, "POST:name"), Some("hayate"));
    assert_eq!(var(&r, "POST:lang"), Some("rust"));
    assert_eq!(var(&r, "CONTENT_LENGTH"), Some("21"));

    // A raw body larger than the replay buffer: streamed to FCGI_STDIN.
    let body = "0123456789".repeat(50_000);
    let r = c.post("/env.php?tens=50000", &[], body.as_bytes());
    assert_eq!(var(&r, "INPUT"), Some("500000:intact"));

    // An upload (multipart), streamed too.
    let file = "0123456789".repeat(30_000);
    let mut multipart = String::new();
    multipart.push_str("--XyZ\r\nContent-Disposition: form-data; name=\"tens\"\r\n\r\n30000\r\n");
    multipart.push_str(
        "--XyZ\r\nContent-Disposition: form-data; name=\"doc\"; filename=\"digits.txt\"\r\n\
         Content-Type: text/plain\r\n\r\n",
    );
    multipart.push_str(&file);
    multipart.push_str("\r\n--XyZ--\r\n");
    let r = c.post(
        "/env.php",
        &[("Content-Type", "multipart/form-data; boundary=XyZ")],
        multipart.as_bytes(),
    );
    assert_eq!(
        var(&r, "FILE:doc"),
        Some("digits.txt:300000:intact"),
        "{}",
        r.text()
    );

    // PATH_INFO, the front controller and a directory's index script.
    let r = c.get("/index.php/users/7?tab=x", &[]);
    assert_eq!(
        r.text(),
        "front uri=/index.php/users/7?tab=x script=/index.php info=/users/7 query=tab=x\n"
    );
    let r = c.get("/articles/2024/hello?draft=1", &[]);
    assert_eq!(
        r.text(),
        "front uri=/articles/2024/hello?draft=1 script=/index.php info= query=draft=1\n"
    );
    let r = c.post("/contact", &[], b"x");
    assert_eq!(
        r.text(),
        "front uri=/contact script=/index.php info= query=\n"
    );
    assert_eq!(c.get("/blog/", &[]).text(), "blog index");
    assert_eq!(
        c.get("/", &[]).text(),
        "front uri=/ script=/index.php info= query=\n"
    );

    // Files first: served by hayate, not PHP.
    let r = c.get("/assets/app.css", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "body { color: red }\n");
    assert!(r.header("etag").is_some(), "a file, with its validators");

    // HEAD: no body, and the connection serves the next request.
    let r = c.request("HEAD", "/headers.php", &[]);
    assert_eq!(r.status, 201);
    assert!(r.body.is_empty());
    assert_eq!(c.get("/blog/", &[]).text(), "blog index");
    h.assert_no_errors();
}

#[test]
fn headers_cookies_redirects_and_statuses_set_by_php() {
    let (_dir, _fpm, h) = serve(&[]);
    let mut c = h.client();
    let r = c.get("/headers.php", &[]);
    assert_eq!(r.status, 201);
    assert_eq!(r.text(), "created");
    assert_eq!(
        r.header("content-length"),
        Some("7"),
        "an answer whole with its head goes with its length"
    );
    assert_eq!(r.header("x-from-php"), Some("yes"));
    let cookies: Vec<&str> = r
        .headers
        .iter()
        .filter(|(n, _)| n == "set-cookie")
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(cookies, ["a=1", "b=2; HttpOnly"]);
    assert_eq!(r.count("server"), 1, "hayate's Server only");
    assert_eq!(r.count("date"), 1);

    let r = c.get("/redirect.php", &[]);
    assert_eq!(r.status, 302, "Location alone is a redirect");
    assert_eq!(r.header("location"), Some("/landing"));
    let r = c.get("/moved.php", &[]);
    assert_eq!(r.status, 301);
    assert_eq!(r.header("location"), Some("https://example.com/new"));
    let r = c.get("/teapot.php", &[]);
    assert_eq!(r.status, 418);
    assert_eq!(r.text(), "short and stout");
    h.assert_no_errors();
}

#[test]
fn an_answer_in_many_records_arrives_whole_and_in_order() {
    // The body's first record is kept where it was read, and the records
    // read with it are gathered after it (`take_head` and the exchange in
    // crates/hayate-proxy/src/fastcgi.rs): a piece lost, doubled or out of
    // order shows here.
    let (_dir, _fpm, h) = serve(&[]);
    let want: Vec<u8> = (0..40)
        .flat_map(|i: usize| std::iter::repeat_n(b'a' + (i % 26) as u8, 100 + i))
        .collect();
    let mut c = h.client();
    for _ in 0..5 {
        let r = c.get("/pieces.php", &[]);
        assert_eq!(r.status, 200);
        assert_eq!(r.body.len(), want.len());
        assert!(r.body == want, "the pieces came back changed");
    }
    h.assert_no_errors();
}

#[test]
fn a_large_response_streams_as_php_flushes_it() {
    let (dir, _fpm, h) = serve(&[]);
    let gate = dir.path().join("gate-open");
    let mut c = h.client();
    c.send(
        format!(
            "GET /gate.php?gate={} HTTP/1.1\r\nHost: test\r\n\r\n",
            gate.display()
        )
        .as_bytes(),
    );
    let mut body = Vec::new();
    let r = c.read_response_with(false, &mut |piece| {
        // The script waits for the gate after "first": it opens once
        // "first" got through hayate while the script still ran.
        if body.is_empty() && !piece.is_empty() {
            std::fs::write(&gate, "").expect("open the gate");
        }
        body.extend_from_slice(piece);
    });
    assert_eq!(r.status, 200);
    assert!(body.starts_with(b"first\n"));
    assert!(
        !String::from_utf8_lossy(&body[..body.len().min(64)]).contains("GATE TIMEOUT"),
        "the first bytes did not arrive while the script ran"
    );
    assert_eq!(body.len(), 6 + 64 * 65536);
    for (i, block) in body[6..].chunks(65536).enumerate() {
        assert!(block.iter().all(|&b| b == 65 + (i % 26) as u8), "block {i}");
    }
    assert_eq!(r.header("transfer-encoding"), Some("chunked"));
    h.assert_no_errors();
}

#[test]
fn a_script_past_the_timeout_is_504_and_php_fpm_stopped_is_502_until_it_is_back() {
    let dir = app();
    let mut fpm = php_fpm(2, 0);
    let h = hayate(dir.path(), &fpm, &["--proxy-timeout", "1s"]);
    let gate = dir.path().join("never");
    let mut c = h.client();
    let r = c.get(&format!("/pid.php?gate={}", gate.display()), &[]);
    assert_eq!(r.status, 504);
    std::fs::write(&gate, "").expect("release the script");

    fpm.stop();
    let r = h.client().get("/pid.php", &[]);
    assert_eq!(r.status, 502);
    fpm.start_again();
    eventually("PHP answers once php-fpm is back", || {
        let r = h.client().get("/pid.php", &[]);
        (r.status == 200)
            .then_some(())
            .ok_or(format!("{}", r.status))
    });
}

#[test]
fn kept_connections_are_reused_bounded_by_fastcgi_max_conns_and_survive_recycled_children() {
    let dir = app();
    let fpm = php_fpm(4, 0);
    let h = hayate(
        dir.path(),
        &fpm,
        &["--workers", "1", "--fastcgi-max-conns", "2"],
    );
    // One after the other: one kept connection, so one php-fpm child.
    let pids: HashSet<String> = (0..5)
        .map(|_| h.client().get("/pid.php", &[]).text())
        .collect();
    assert_eq!(pids.len(), 1, "{pids:?}");

    // Six at once, held until all six were sent: no more than two
    // connections, so no more than two of php-fpm's four children.
    let gate = dir.path().join("six");
    let path = format!("/pid.php?gate={}", gate.display());
    let clients: Vec<Client> = (0..6)
        .map(|_| {
            let mut c = h.client();
            c.send(format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").as_bytes());
            c
        })
        .collect();
    std::fs::write(&gate, "").expect("gate");
    let pids: HashSet<String> = clients
        .into_iter()
        .map(|mut c| {
            let r = c.read_response(false);
            assert_eq!(r.status, 200);
            r.text()
        })
        .collect();
    assert!(pids.len() <= 2, "{pids:?}");

    // php-fpm replacing each child after two requests closes the kept
    // connection: the next request goes on a fresh one, never a 502.
    let dir = app();
    let fpm = php_fpm(1, 2);
    let h = hayate(dir.path(), &fpm, &["--workers", "1"]);
    let mut c = h.client();
    let pids: HashSet<String> = (0..8)
        .map(|_| {
            let r = c.get("/pid.php", &[]);
            assert_eq!(r.status, 200, "{}", r.text());
            r.text()
        })
        .collect();
    assert!(pids.len() >= 4, "children were recycled: {pids:?}");
    h.assert_no_errors();
}

#[test]
fn only_existing_scripts_under_the_root_run() {
    let (_dir, _fpm, h) = serve(&[]);
    let mut c = h.client();
    // An upload named like an image: served as a file, never run.
    let r = c.get("/uploads/evil.jpg", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "<?php echo 'pwned'; ?>\n");
    // ... nor run through a fake script path after it.
    for path in [
        "/uploads/evil.jpg/x.php",
        "/uploads/evil.jpg/index.php",
        "/missing.php",
        "/missing.php/info",
        "/.hidden/x.php",
        "/blog/nothing.php",
    ] {
        let r = c.get(path, &[]);
        assert_eq!(r.status, 404, "{path}");
        assert_eq!(
            r.text(),
            "404 Not Found\n",
            "{path}: hayate's 404, not php-fpm's"
        );
    }
    // Traversal out of the root is refused before anything runs.
    for path in [
        "/../../etc/passwd",
        "/%2e%2e/%2e%2e/etc/passwd",
        "/blog/..%2f..%2f..%2fetc/passwd",
    ] {
        let r = c.get(path, &[]);
        assert!(r.status == 400 || r.status == 404, "{path}: {}", r.status);
        assert!(!r.text().contains("root:"), "{path}");
    }
    // A script's source is never served, whatever its case.
    for path in ["/index.php", "/UPPER.PHP"] {
        let r = c.get(path, &[]);
        assert!(!r.text().contains("<?php"), "{path}: {}", r.text());
    }
    // httpoxy: Proxy never becomes HTTP_PROXY; a name with an underscore
    // cannot pass for another's variable.
    let r = c.get(
        "/env.php",
        &[("Proxy", "http://evil:1"), ("X_Forwarded_For", "6.6.6.6")],
    );
    assert_eq!(var(&r, "HTTP_PROXY"), None);
    assert_eq!(var(&r, "HTTP_X_FORWARDED_FOR"), None);
    h.assert_no_errors();
}

#[test]
fn php_errors_reach_the_error_log_with_the_request_id() {
    let (_dir, _fpm, h) = serve(&[]);
    let r = h
        .client()
        .get("/stderr.php", &[("X-Request-Id", "req-4711")]);
    assert_eq!(r.text(), "logged");
    eventually("the PHP message in hayate's log", || {
        let log = h.stderr();
        log.lines()
            .any(|l| l.contains("[request req-4711]") && l.contains("boom from php"))
            .then_some(())
            .ok_or(log)
    });
}

#[test]
fn the_response_cache_and_compression_apply_to_php_responses() {
    let (_dir, _fpm, h) = serve(&["--cache", "30s"]);
    let mut c = h.client();
    let first = c.get("/page.php", &[]);
    let second = c.get("/page.php", &[]);
    assert_eq!(first.status, 200);
    assert_eq!(
        first.text(),
        second.text(),
        "the second came from the cache"
    );
    let status = second.header("cache-status").unwrap_or_default();
    assert!(status.contains("; hit"), "{status}");
    let r = c.get("/page.php?other", &[("Accept-Encoding", "gzip")]);
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert!(r.body.len() < 2000, "compressed: {} bytes", r.body.len());
    h.assert_no_errors();
}

#[test]
fn chunked_bodies_are_counted_before_php_gets_them() {
    // CGI needs CONTENT_LENGTH first: a chunked body is read whole, past
    // the replay buffer, up to max_body_size.
    let (_dir, _fpm, h) = serve(&["--proxy-replay-buffer", "1KiB", "--max-body-size", "8KiB"]);
    let chunked = |tens: usize, piece: usize| {
        let body = "0123456789".repeat(tens);
        let mut raw = format!(
            "POST /env.php?tens={tens} HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n"
        );
        for part in body.as_bytes().chunks(piece) {
            raw.push_str(&format!(
                "{:x}\r\n{}\r\n",
                part.len(),
                String::from_utf8_lossy(part)
            ));
        }
        raw.push_str("0\r\n\r\n");
        let mut c = h.client();
        c.send(raw.as_bytes());
        c.read_response(false)
    };
    let r = chunked(1, 10);
    assert_eq!(var(&r, "INPUT"), Some("10:intact"));
    let r = chunked(400, 1000);
    assert_eq!(var(&r, "CONTENT_LENGTH"), Some("4000"));
    assert_eq!(var(&r, "INPUT"), Some("4000:intact"));
    assert_eq!(chunked(1000, 1000).status, 413, "over max_body_size");
}

#[test]
fn a_client_that_leaves_frees_its_php_fpm_connection_at_once() {
    // One connection in all, and a short queue: a connection held for a
    // client that left would leave the next request to a 503. (PHP itself
    // notices only when it writes: each abandoned script keeps its child,
    // hence three.)
    let dir = app();
    let fpm = php_fpm(3, 0);
    let h = hayate(
        dir.path(),
        &fpm,
        &[
            "--workers",
            "1",
            "--fastcgi-max-conns",
            "1",
            "--proxy-queue-timeout",
            "1s",
        ],
    );
    // While the script is silent (no head yet), and while it streams (after
    // "first"): each time the client leaves, the script's gate stays shut.
    let started = dir.path().join("started");
    let never = dir.path().join("never");
    let silent = format!(
        "/pid.php?gate={}&started={}",
        never.display(),
        started.display()
    );
    let streaming = format!("/gate.php?gate={}", never.display());
    for (path, wait_for) in [
        (&silent, "the script starts"),
        (&streaming, "the first bytes"),
    ] {
        let mut c = h.client();
        c.send(format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").as_bytes());
        if path == &silent {
            eventually(wait_for, || {
                started.exists().then_some(()).ok_or("not yet".to_string())
            });
        } else {
            assert_eq!(c.read_bytes(1), b"H", "{wait_for}");
        }
        drop(c);
        let r = h.client().get("/blog/", &[]);
        assert_eq!((r.status, r.text().as_str()), (200, "blog index"), "{path}");
    }
    h.assert_no_errors();
}

/// A small multi-file app: a front controller that routes through an
/// included file and renders a template, a form, static assets.
const MULTI_FILE_APP: &[(&str, &str)] = &[
    (
        "index.php",
        r#"<?php
require __DIR__ . '/../lib/routes.php';
$path = parse_url($_SERVER['REQUEST_URI'], PHP_URL_PATH);
[$status, $title, $body] = route($_SERVER['REQUEST_METHOD'], $path, $_POST);
http_response_code($status);
require __DIR__ . '/../templates/page.php';
"#,
    ),
    ("master.php", "<?php echo posix_getppid();\n"),
    ("assets/site.css", "h1 { font-size: 2em }\n"),
];

/// Outside the document root: never reachable by URL.
const MULTI_FILE_LIB: &[(&str, &str)] = &[
    (
        "lib/routes.php",
        r#"<?php
function route(string $method, string $path, array $form): array {
    if ($path === '/') return [200, 'Home', 'Welcome'];
    if ($path === '/about') return [200, 'About', 'We serve PHP'];
    if ($path === '/contact' && $method === 'POST')
        return [201, 'Thanks', 'Thanks, ' . htmlspecialchars($form['name'] ?? '')];
    return [404, 'Not here', 'No page at ' . htmlspecialchars($path)];
}
"#,
    ),
    (
        "templates/page.php",
        "<h1><?= $title ?></h1><p><?= $body ?></p>\n",
    ),
];

#[test]
fn hayate_php_serves_a_multi_file_app_and_supervises_php_fpm() {
    let dir = tempfile::tempdir().expect("tempdir");
    let public = dir.path().join("public");
    for (path, text) in MULTI_FILE_APP {
        let p = public.join(path);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, text).expect("write");
    }
    for (path, text) in MULTI_FILE_LIB {
        let p = dir.path().join(path);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, text).expect("write");
    }
    let h = Hayate::start(BIN, &["php", public.to_str().expect("utf-8")]);
    let mut c = h.client();
    assert_eq!(c.get("/", &[]).text(), "<h1>Home</h1><p>Welcome</p>\n");
    assert_eq!(
        c.get("/about", &[]).text(),
        "<h1>About</h1><p>We serve PHP</p>\n"
    );
    let r = c.post(
        "/contact",
        &[("Content-Type", "application/x-www-form-urlencoded")],
        b"name=Ada",
    );
    assert_eq!(
        (r.status, r.text().as_str()),
        (201, "<h1>Thanks</h1><p>Thanks, Ada</p>\n")
    );
    let r = c.get("/nowhere", &[]);
    assert_eq!(r.status, 404);
    assert!(r.text().contains("No page at /nowhere"));
    let r = c.get("/assets/site.css", &[]);
    assert_eq!(r.text(), "h1 { font-size: 2em }\n");
    assert!(r.header("etag").is_some(), "served by hayate as a file");
    // What is outside the root is not reachable.
    assert_eq!(c.get("/../lib/routes.php", &[]).status, 400);

    // php-fpm crashes: the supervisor starts another.
    let master = |h: &Hayate| {
        let r = h.client().get("/master.php", &[]);
        (r.status == 200)
            .then(|| r.text())
            .ok_or(format!("{} {}", r.status, r.text()))
    };
    let first = master(&h).expect("php-fpm's master pid");
    let pid = nix::unistd::Pid::from_raw(first.parse().expect("pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).expect("kill php-fpm");
    let second = eventually("a new php-fpm answers", || {
        master(&h).and_then(|p| (p != first).then_some(p).ok_or("the old one".into()))
    });
    // The crashed master's workers (its process group) went with it.
    eventually(
        "no worker of the crashed php-fpm is left",
        || match nix::sys::signal::killpg(pid, None) {
            Err(nix::errno::Errno::ESRCH) => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
    // SIGHUP replaces it gracefully.
    h.signal(nix::sys::signal::Signal::SIGHUP);
    eventually("the reloaded php-fpm answers", || {
        master(&h).and_then(|p| (p != second).then_some(p).ok_or("the old one".into()))
    });
    assert_eq!(h.client().get("/about", &[]).status, 200);
}

#[test]
fn requests_past_the_queue_get_503_with_retry_after() {
    let (dir, _fpm, h) = serve(&[
        "--workers",
        "1",
        "--fastcgi-max-conns",
        "1",
        "--proxy-queue",
        "1",
    ]);
    let (gate, started) = (dir.path().join("gate"), dir.path().join("started"));
    let mut holder = h.client();
    holder.send(
        format!(
            "GET /pid.php?gate={}&started={} HTTP/1.1\r\nHost: test\r\n\r\n",
            gate.display(),
            started.display()
        )
        .as_bytes(),
    );
    eventually("the first request runs", || {
        started.exists().then_some(()).ok_or("not yet".to_string())
    });
    // The one connection is taken: one request waits, the other is refused.
    let mut waiting: Vec<Client> = (0..2)
        .map(|_| {
            let mut c = h.client();
            c.send(b"GET /pid.php HTTP/1.1\r\nHost: test\r\n\r\n");
            c
        })
        .collect();
    let refused = eventually("one of them is refused", || {
        for (i, c) in waiting.iter_mut().enumerate() {
            c.stream().set_nonblocking(true).expect("nonblocking");
            let peek = c.stream().peek(&mut [0u8; 1]);
            c.stream().set_nonblocking(false).expect("blocking");
            if matches!(peek, Ok(n) if n > 0) {
                return Ok(i);
            }
        }
        Err("no answer yet".to_string())
    });
    let r = waiting[refused].read_response(false);
    assert_eq!(r.status, 503);
    assert!(r.header("retry-after").is_some());
    std::fs::write(&gate, "").expect("gate");
    assert_eq!(holder.read_response(false).status, 200);
    assert_eq!(waiting[1 - refused].read_response(false).status, 200);
}

#[test]
fn php_requests_are_logged_and_counted_per_route() {
    let logs = tempfile::tempdir().expect("tempdir");
    let access = logs.path().join("access.log");
    let admin = format!("unix:{}", logs.path().join("admin.sock").display());
    let (_dir, _fpm, mut h) = serve(&[
        "--workers",
        "1",
        "--access-log",
        access.to_str().expect("utf-8"),
        "--admin",
        &admin,
    ]);
    let mut c = h.client();
    assert_eq!(c.get("/headers.php", &[]).status, 201);
    assert_eq!(c.get("/missing.php", &[]).status, 404);
    let socket = logs.path().join("admin.sock");
    let want = [
        "hayate_http_requests_total{site=\"*\",route=\"/\",code=\"2xx\"} 1\n",
        "hayate_http_requests_total{site=\"*\",route=\"/\",code=\"4xx\"} 1\n",
    ];
    eventually("both requests counted under their route", || {
        if !socket.exists() {
            return Err("no admin socket yet".to_string());
        }
        let metrics = hayate_testkit::unix_get(&socket, "/metrics");
        want.iter()
            .all(|line| metrics.contains(line))
            .then_some(())
            .ok_or(metrics)
    });
    assert!(h.stop().success());
    let log = std::fs::read_to_string(&access).expect("access log");
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 2, "{log}");
    assert!(
        lines[0].contains("\"GET /headers.php HTTP/1.1\" 201 7 "),
        "{log}"
    );
    assert!(
        lines[1].contains("\"GET /missing.php HTTP/1.1\" 404 "),
        "{log}"
    );
}

/// HTTP/2 carries the host in `:authority`, not in a Host field: PHP must
/// still see HTTP_HOST (WordPress builds every URL from it), and the
/// protocol, scheme and port as nginx's fastcgi_params give them. The
/// client is curl over TLS with ALPN h2, as a browser reaches WordPress.
#[test]
fn fastcgi_params_over_https_and_http2_name_the_host_scheme_and_protocol() {
    let dir = app();
    let fpm = php_fpm(2, 0);
    let state = tempfile::tempdir().expect("state");
    let h = hayate(
        dir.path(),
        &fpm,
        &[
            "--listen",
            "https://127.0.0.1:0",
            "--tls",
            "internal",
            "--state-dir",
            state.path().to_str().expect("utf-8"),
        ],
    );
    let ca = hayate_testkit::tls::local_ca(state.path());
    let port = h.addr.port().to_string();
    for (version, flag) in [("HTTP/2.0", "--http2"), ("HTTP/1.1", "--http1.1")] {
        let url = format!("https://localhost:{port}/env.php");
        let out = std::process::Command::new("curl")
            .args(["-sS", flag, "--cacert", ca.to_str().expect("utf-8"), &url])
            .output()
            .expect("curl (installed by .ci/run)");
        assert!(out.status.success(), "{out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        let var = |k: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(k)?.strip_prefix('='))
        };
        for (k, v) in [
            ("SERVER_PROTOCOL", version),
            ("HTTP_HOST", &*format!("localhost:{port}")),
            ("SERVER_NAME", "localhost"),
            ("SERVER_PORT", &*port),
            ("HTTPS", "on"),
            ("REQUEST_SCHEME", "https"),
        ] {
            assert_eq!(var(k), Some(v), "{k} over {version} in\n{text}");
        }
    }
    h.assert_no_errors();
}
