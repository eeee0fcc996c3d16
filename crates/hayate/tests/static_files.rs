//! Static files over real sockets, through the binary: headers on the wire,
//! HEAD, conditional requests, ranges (single, multipart, unsatisfiable,
//! abusive), large files sent with sendfile, methods, redirects, path
//! confinement, dotfiles, symlinks, listings, the SPA fallback,
//! Cache-Control, precompressed siblings, freshness after changes on disk,
//! and routing from a config file.

use std::path::{Path, PathBuf};

use hayate_testkit::{big_bytes, site, Client, Hayate, Response};

const BIN: &str = env!("CARGO_BIN_EXE_hayate");

/// `hello.txt`'s contents in the testkit's site.
const HELLO: &str = "hello world\n";

fn start(args: &[&str]) -> (Hayate, tempfile::TempDir) {
    let dir = site();
    let h = start_on(dir.path(), args);
    (h, dir)
}

fn start_on(root: &Path, args: &[&str]) -> Hayate {
    let mut all = vec![root.to_str().expect("utf8 path")];
    all.extend_from_slice(args);
    Hayate::start(BIN, &all)
}

fn write(path: impl AsRef<Path>, data: impl AsRef<[u8]>) {
    std::fs::write(path, data).expect("write fixture");
}

/// Sends a request with its own Host header (the client's `get` sends
/// `Host: test`).
fn get_host(c: &mut Client, host: &str, path: &str) -> Response {
    c.send(format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes());
    c.read_response(false)
}

/// Splits a multipart/byteranges body into (Content-Range, data) parts.
fn multipart(r: &Response) -> Vec<(String, Vec<u8>)> {
    let ct = r.header("content-type").expect("content-type");
    let boundary = ct
        .split("boundary=")
        .nth(1)
        .unwrap_or_else(|| panic!("no boundary in {ct:?}"))
        .trim_matches('"');
    let delim = format!("\r\n--{boundary}");
    let delim = delim.as_bytes();
    let body = &r.body;
    // Positions of every delimiter.
    let mut marks = Vec::new();
    let mut i = 0;
    while i + delim.len() <= body.len() {
        if &body[i..i + delim.len()] == delim {
            marks.push(i);
            i += delim.len();
        } else {
            i += 1;
        }
    }
    assert_eq!(marks.first(), Some(&0), "body starts with a delimiter");
    let last = *marks.last().expect("a closing delimiter");
    assert_eq!(
        &body[last + delim.len()..],
        b"--\r\n",
        "body ends with the close delimiter"
    );
    let mut parts = Vec::new();
    for w in marks.windows(2) {
        let part = &body[w[0] + delim.len()..w[1]];
        let part = part.strip_prefix(b"\r\n").expect("CRLF after delimiter");
        let end = part
            .windows(4)
            .position(|x| x == b"\r\n\r\n")
            .expect("part head end");
        let head = String::from_utf8_lossy(&part[..end]).into_owned();
        let range = head
            .split("\r\n")
            .find_map(|l| {
                l.split_once(':')
                    .filter(|(n, _)| n.eq_ignore_ascii_case("content-range"))
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_else(|| panic!("part without Content-Range: {head:?}"));
        parts.push((range, part[end + 4..].to_vec()));
    }
    parts
}

#[test]
fn get_writes_every_header_and_head_sends_none_of_the_body() {
    let (h, _dir) = start(&[]);
    let mut c = h.client();
    let r = c.get("/hello.txt", &[]);
    assert_eq!((r.status, r.text().as_str()), (200, HELLO));
    assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
    assert_eq!(r.header("content-length"), Some("12"));
    assert_eq!(r.header("accept-ranges"), Some("bytes"));
    assert_eq!(r.header("server"), Some("hayate"));
    let etag = r.header("etag").expect("etag");
    assert!(
        etag.starts_with('"') && etag.ends_with('"') && etag.len() > 2,
        "strong etag: {etag}"
    );
    for name in ["date", "last-modified"] {
        let v = r.header(name).unwrap_or_else(|| panic!("{name} missing"));
        assert!(v.ends_with(" GMT") && v.len() == 29, "{name}: {v}");
        assert_eq!(r.count(name), 1, "{name} once");
    }
    // No Vary without precompressed siblings, no Cache-Control by default.
    assert_eq!(r.header("vary"), None);
    assert_eq!(r.header("cache-control"), None);

    let cases = [
        ("/index.html", "text/html; charset=utf-8"),
        ("/docs/guide.html", "text/html; charset=utf-8"),
        ("/big.bin", "application/octet-stream"),
        ("/.well-known/security.txt", "text/plain; charset=utf-8"),
    ];
    for (path, ct) in cases {
        let r = c.get(path, &[]);
        assert_eq!(
            (r.status, r.header("content-type")),
            (200, Some(ct)),
            "{path}"
        );
    }

    // HEAD: same head, no body; the connection stays in step.
    let get = c.get("/hello.txt", &[]);
    let head = c.request("HEAD", "/hello.txt", &[]);
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
    for name in [
        "content-type",
        "content-length",
        "etag",
        "last-modified",
        "accept-ranges",
    ] {
        assert_eq!(head.header(name), get.header(name), "HEAD {name}");
    }
    let r = c.get("/docs/guide.html", &[]);
    assert_eq!(
        (r.status, r.text().as_str()),
        (200, "<p>guide</p>\n"),
        "next response after HEAD is intact"
    );
    // HEAD of a large (sendfile) file and of an error.
    let head = c.request("HEAD", "/big.bin", &[]);
    assert_eq!(head.header("content-length"), Some("1048576"));
    let head = c.request("HEAD", "/missing", &[]);
    assert_eq!(head.status, 404);
    assert_eq!(c.get("/hello.txt", &[]).text(), HELLO);
    h.assert_no_errors();
}

#[test]
fn conditional_requests() {
    let (h, _dir) = start(&[]);
    let mut c = h.client();
    let r = c.get("/hello.txt", &[]);
    let etag = r.header("etag").expect("etag").to_string();
    let lm = r
        .header("last-modified")
        .expect("last-modified")
        .to_string();
    let weak = format!("W/{etag}");
    let list = format!("\"nope\", {etag}");
    let weak_list = format!("\"a\" , W/\"b\",{weak}");
    const PAST: &str = "Sun, 06 Nov 1994 08:49:37 GMT";
    const FUTURE: &str = "Fri, 01 Jan 2100 00:00:00 GMT";
    let table: Vec<(Vec<(&str, &str)>, u16)> = vec![
        (vec![("If-None-Match", &etag)], 304),
        (vec![("If-None-Match", &weak)], 304),
        (vec![("If-None-Match", &list)], 304),
        (vec![("If-None-Match", &weak_list)], 304),
        (vec![("If-None-Match", "*")], 304),
        (vec![("If-None-Match", "\"nope\"")], 200),
        (vec![("If-Modified-Since", &lm)], 304),
        (vec![("If-Modified-Since", FUTURE)], 304),
        (vec![("If-Modified-Since", PAST)], 200),
        (vec![("If-Modified-Since", "not a date")], 200),
        // If-None-Match wins over If-Modified-Since.
        (
            vec![("If-None-Match", "\"nope\""), ("If-Modified-Since", &lm)],
            200,
        ),
        (vec![("If-Match", &etag)], 200),
        (vec![("If-Match", &list)], 200),
        (vec![("If-Match", "*")], 200),
        (vec![("If-Match", "\"nope\"")], 412),
        (vec![("If-Match", &weak)], 412),
        (vec![("If-Unmodified-Since", &lm)], 200),
        (vec![("If-Unmodified-Since", FUTURE)], 200),
        (vec![("If-Unmodified-Since", PAST)], 412),
        // 412 before 304.
        (
            vec![("If-Match", "\"nope\""), ("If-None-Match", &etag)],
            412,
        ),
    ];
    for (headers, status) in &table {
        let r = c.get("/hello.txt", headers);
        assert_eq!(r.status, *status, "for {headers:?}");
        match status {
            304 => {
                assert_eq!(r.header("etag"), Some(etag.as_str()), "{headers:?}");
                assert_eq!(r.header("last-modified"), Some(lm.as_str()));
                assert_eq!(r.header("content-length"), None);
                assert!(r.body.is_empty());
            }
            200 => assert_eq!(r.text(), HELLO),
            _ => {}
        }
    }
    // HEAD is conditional too, and the connection is still in step.
    let r = c.request("HEAD", "/hello.txt", &[("If-None-Match", &etag)]);
    assert_eq!(r.status, 304);
    assert_eq!(c.get("/hello.txt", &[]).text(), HELLO);
    h.assert_no_errors();
}

#[test]
fn single_multipart_and_unsatisfiable_ranges() {
    let (h, _dir) = start(&[]);
    let mut c = h.client();
    // (Range, Content-Range, body)
    let singles = [
        ("bytes=0-4", "bytes 0-4/12", "hello"),
        ("bytes=6-", "bytes 6-11/12", "world\n"),
        ("bytes=-3", "bytes 9-11/12", "ld\n"),
        ("bytes=10-999", "bytes 10-11/12", "d\n"),
        ("bytes=-100", "bytes 0-11/12", HELLO),
        // An unsatisfiable part is dropped when another is satisfiable.
        ("bytes=0-0,50-60", "bytes 0-0/12", "h"),
    ];
    for (range, cr, body) in singles {
        let r = c.get("/hello.txt", &[("Range", range)]);
        assert_eq!(r.status, 206, "{range}");
        assert_eq!(r.header("content-range"), Some(cr), "{range}");
        assert_eq!(r.text(), body, "{range}");
        assert_eq!(
            r.header("content-length"),
            Some(body.len().to_string().as_str())
        );
        assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
    }

    let r = c.get("/hello.txt", &[("Range", "bytes=0-1, 6-10")]);
    assert_eq!(r.status, 206);
    assert!(r
        .header("content-type")
        .is_some_and(|t| t.starts_with("multipart/byteranges; boundary=")));
    assert_eq!(r.header("content-range"), None);
    assert_eq!(
        r.header("content-length"),
        Some(r.body.len().to_string().as_str())
    );
    let parts = multipart(&r);
    assert_eq!(
        parts,
        vec![
            ("bytes 0-1/12".to_string(), b"he".to_vec()),
            ("bytes 6-10/12".to_string(), b"world".to_vec()),
        ]
    );

    for range in ["bytes=12-", "bytes=100-200", "bytes=-0", "bytes=20-30,40-"] {
        let r = c.get("/hello.txt", &[("Range", range)]);
        assert_eq!(r.status, 416, "{range}");
        assert_eq!(r.header("content-range"), Some("bytes */12"), "{range}");
    }

    // Abusive or invalid sets get the whole file.
    let twenty: Vec<String> = (0..20).map(|i| format!("{i}-{i}")).collect();
    let twenty = format!("bytes={}", twenty.join(","));
    for range in [
        twenty.as_str(),
        "bytes=0-5,3-8",
        "bytes=0-11,0-11",
        "bytes=0-,-12",
        "bytes=5-1",
        "items=0-1",
        "bytes=x-y",
    ] {
        let r = c.get("/hello.txt", &[("Range", range)]);
        assert_eq!((r.status, r.text().as_str()), (200, HELLO), "{range}");
        assert_eq!(r.header("content-range"), None);
    }

    // HEAD ignores Range.
    let r = c.request("HEAD", "/hello.txt", &[("Range", "bytes=0-1")]);
    assert_eq!((r.status, r.header("content-length")), (200, Some("12")));
    assert_eq!(c.get("/hello.txt", &[]).text(), HELLO);
    h.assert_no_errors();
}

#[test]
fn if_range_decides_between_part_and_whole() {
    let (h, _dir) = start(&[]);
    let mut c = h.client();
    let r = c.get("/hello.txt", &[]);
    let etag = r.header("etag").expect("etag").to_string();
    let lm = r.header("last-modified").expect("lm").to_string();
    let weak = format!("W/{etag}");
    let table: [(&str, u16); 5] = [
        (&etag, 206),
        (&lm, 206),
        ("\"old\"", 200),
        (&weak, 200),
        ("Sun, 06 Nov 1994 08:49:37 GMT", 200),
    ];
    for (if_range, status) in table {
        let r = c.get(
            "/hello.txt",
            &[("Range", "bytes=0-4"), ("If-Range", if_range)],
        );
        assert_eq!(r.status, status, "If-Range: {if_range}");
        let want = if status == 206 { "hello" } else { HELLO };
        assert_eq!(r.text(), want, "If-Range: {if_range}");
    }
    h.assert_no_errors();
}

#[test]
fn large_file_goes_out_with_sendfile_byte_for_byte() {
    let (h, _dir) = start(&["--file-cache-max-file", "64KiB"]);
    let want = big_bytes(1 << 20);
    let mut c = h.client();
    for _ in 0..2 {
        // Twice: the second answer comes from the open-file cache.
        let r = c.get("/big.bin", &[]);
        assert_eq!(r.status, 200);
        assert_eq!(r.header("content-length"), Some("1048576"));
        assert!(r.body == want, "big.bin differs from the file");
    }
    let r = c.get("/big.bin", &[("Range", "bytes=500000-600000")]);
    assert_eq!(r.status, 206);
    assert_eq!(
        r.header("content-range"),
        Some("bytes 500000-600000/1048576")
    );
    assert!(
        r.body == want[500_000..=600_000],
        "range of big.bin differs"
    );
    let r = c.get("/big.bin", &[("Range", "bytes=-10")]);
    assert!(r.body == want[want.len() - 10..]);
    // Multipart ranges from a file body.
    let r = c.get(
        "/big.bin",
        &[("Range", "bytes=10-19,100000-299999,1048570-")],
    );
    assert_eq!(r.status, 206);
    let parts = multipart(&r);
    assert_eq!(parts.len(), 3);
    assert_eq!(parts[0].0, "bytes 10-19/1048576");
    assert!(parts[0].1 == want[10..20]);
    assert_eq!(parts[1].0, "bytes 100000-299999/1048576");
    assert!(parts[1].1 == want[100_000..300_000]);
    assert_eq!(parts[2].0, "bytes 1048570-1048575/1048576");
    assert!(parts[2].1 == want[1_048_570..]);
    // The connection is still in step after all that.
    assert_eq!(c.get("/hello.txt", &[]).text(), HELLO);
    h.assert_no_errors();
}

#[test]
fn other_methods_get_405_with_allow() {
    let (h, _dir) = start(&[]);
    let mut c = h.client();
    for method in ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"] {
        for path in ["/hello.txt", "/", "/missing"] {
            let r = c.request(method, path, &[("Content-Length", "0")]);
            assert_eq!(r.status, 405, "{method} {path}");
            assert_eq!(r.header("allow"), Some("GET, HEAD"), "{method} {path}");
        }
    }
    assert_eq!(c.get("/hello.txt", &[]).status, 200);
    h.assert_no_errors();
}

#[test]
fn index_redirects_and_missing_files() {
    let (h, _dir) = start(&[]);
    let mut c = h.client();
    let r = c.get("/", &[]);
    assert_eq!(
        (r.status, r.text().as_str()),
        (200, "<!doctype html><h1>home</h1>\n")
    );
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    // (request, Location)
    let redirects = [
        ("/docs", "/docs/"),
        ("/docs?x=1&y=%20", "/docs/?x=1&y=%20"),
        ("/.well-known", "/.well-known/"),
    ];
    for (target, location) in redirects {
        let r = c.get(target, &[]);
        assert_eq!(r.status, 301, "{target}");
        assert_eq!(r.header("location"), Some(location), "{target}");
    }
    for target in ["/missing.txt", "/docs/", "/docs/missing/", "/hello.txt/x"] {
        let r = c.get(target, &[]);
        assert_eq!(r.status, 404, "{target}");
    }
    // A query string does not get in the way of a file.
    assert_eq!(c.get("/docs/guide.html?v=2", &[]).status, 200);
    h.assert_no_errors();
}

/// A root `www` with a file `secret.txt` next to it, outside the root.
fn confined() -> (tempfile::TempDir, PathBuf) {
    let base = tempfile::tempdir().expect("tempdir");
    let root = base.path().join("www");
    std::fs::create_dir_all(root.join("docs")).expect("mkdir");
    write(root.join("index.html"), "inside");
    write(root.join("docs/a.txt"), "inside a");
    write(base.path().join("secret.txt"), "OUTSIDE-SECRET");
    std::fs::create_dir(base.path().join("outdir")).expect("mkdir");
    write(base.path().join("outdir/o.txt"), "OUTSIDE-DIR");
    (base, root)
}

#[test]
fn path_traversal_never_leaves_the_root() {
    let (_base, root) = confined();
    let attempts = [
        "/../secret.txt",
        "/%2e%2e/secret.txt",
        "/%2E%2E/secret.txt",
        "/..%2fsecret.txt",
        "/..%2Fsecret.txt",
        "/%2e%2e%2fsecret.txt",
        "/.%2e/secret.txt",
        "//../secret.txt",
        "/docs/../../secret.txt",
        "/docs/..%2f..%2fsecret.txt",
        "/docs/%2e%2e/%2e%2e/secret.txt",
        "/./../secret.txt",
        "/secret.txt%00",
        "/%00/../secret.txt",
        "/index.html%00.txt",
        "/..\\secret.txt",
        "/docs\\..\\..\\secret.txt",
        "/%5c..%5csecret.txt",
        "/..%5csecret.txt",
        "/%252e%252e/secret.txt",
        "/.../secret.txt",
        "/....//secret.txt",
    ];
    for args in [&[][..], &["--symlinks-outside-root", "--dotfiles"][..]] {
        let h = start_on(&root, args);
        for target in attempts {
            let mut c = h.client();
            let r = c.get(target, &[]);
            assert!(
                r.status == 400 || r.status == 404,
                "{target} with {args:?}: status {}",
                r.status
            );
            assert!(
                !r.text().contains("OUTSIDE"),
                "{target} leaked a file outside the root"
            );
        }
        // Still serving.
        assert_eq!(h.client().get("/docs/a.txt", &[]).text(), "inside a");
        h.assert_no_errors();
    }
}

#[test]
fn dotfiles_are_hidden_unless_asked_for() {
    let (h, dir) = start(&[]);
    write(dir.path().join("docs/.hidden"), "hidden");
    std::fs::create_dir(dir.path().join(".git")).expect("mkdir");
    write(dir.path().join(".git/config"), "[core]");
    let mut c = h.client();
    let table = [
        ("/.secret", 404),
        ("/docs/.hidden", 404),
        ("/.git/config", 404),
        ("/.git/", 404),
        ("/%2esecret", 404),
        ("/.well-known/security.txt", 200),
    ];
    for (path, status) in table {
        assert_eq!(c.get(path, &[]).status, status, "{path}");
    }
    drop(h);
    let h = start_on(dir.path(), &["--dotfiles"]);
    let mut c = h.client();
    let r = c.get("/.secret", &[]);
    assert_eq!((r.status, r.text().as_str()), (200, "secret"));
    assert_eq!(c.get("/docs/.hidden", &[]).text(), "hidden");
    assert_eq!(c.get("/.git/config", &[]).text(), "[core]");
    h.assert_no_errors();
}

#[test]
fn symlinks_out_of_the_root_follow_the_symlinks_setting() {
    let (base, root) = confined();
    std::os::unix::fs::symlink(base.path().join("secret.txt"), root.join("link.txt"))
        .expect("symlink");
    std::os::unix::fs::symlink("../outdir", root.join("linkdir")).expect("symlink");
    std::os::unix::fs::symlink("docs/a.txt", root.join("inside-link.txt")).expect("symlink");
    std::os::unix::fs::symlink("nowhere", root.join("broken")).expect("symlink");
    let warned = |h: &Hayate, file: &str, setting: &str| {
        hayate_testkit::eventually("the warning", || {
            let log = h.stderr();
            log.lines()
                .any(|l| {
                    l.contains(" WARN ")
                        && l.contains(&format!("refused file {}", root.join(file).display()))
                        && l.contains(&format!("symlinks = \"{setting}\""))
                })
                .then_some(())
                .ok_or(log)
        })
    };
    // The default, owner: the test's links and files have one owner.
    for args in [
        &[][..],
        &["--symlinks", "always"],
        &["--symlinks-outside-root"],
    ] {
        let h = start_on(&root, args);
        let mut c = h.client();
        assert_eq!(c.get("/link.txt", &[]).text(), "OUTSIDE-SECRET", "{args:?}");
        assert_eq!(c.get("/linkdir/o.txt", &[]).text(), "OUTSIDE-DIR");
        assert_eq!(c.get("/inside-link.txt", &[]).text(), "inside a");
        assert_eq!(c.get("/broken", &[]).status, 404);
        h.assert_no_errors();
    }
    for args in [
        &["--symlinks", "never"][..],
        &["--symlinks-outside-root=false"],
    ] {
        let h = start_on(&root, args);
        let mut c = h.client();
        for (path, status) in [
            ("/link.txt", 403),
            ("/linkdir/o.txt", 403),
            ("/broken", 404),
            ("/inside-link.txt", 200),
        ] {
            let r = c.get(path, &[]);
            assert_eq!(r.status, status, "{path} {args:?}");
            assert!(!r.text().contains("OUTSIDE"), "{path}");
        }
        warned(&h, "link.txt", "never");
        warned(&h, "linkdir/o.txt", "never");
    }
    if nix::unistd::Uid::effective().is_root() {
        // A link of another user's (nobody's) to a file of root's.
        let nobody = nix::unistd::User::from_name("nobody")
            .expect("user db")
            .expect("nobody")
            .uid
            .as_raw();
        std::os::unix::fs::lchown(root.join("link.txt"), Some(nobody), None).expect("lchown");
        let h = start_on(&root, &[]);
        let mut c = h.client();
        let r = c.get("/link.txt", &[]);
        assert_eq!(r.status, 403);
        assert!(!r.text().contains("OUTSIDE"));
        warned(&h, "link.txt", "owner");
        assert_eq!(c.get("/linkdir/o.txt", &[]).text(), "OUTSIDE-DIR");
    }
}

#[test]
fn directory_listings_in_html_and_json() {
    let (h, dir) = start(&["--listing"]);
    write(dir.path().join("docs/.hidden"), "x");
    write(dir.path().join("docs/<b>&.txt"), "x");
    std::fs::create_dir(dir.path().join("docs/sub")).expect("mkdir");
    let mut c = h.client();
    let r = c.get("/docs/", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    let html = r.text();
    assert!(html.contains("guide.html"), "{html}");
    assert!(html.contains("sub/"), "{html}");
    assert!(html.contains("&lt;b&gt;&amp;.txt"), "escaped name: {html}");
    assert!(!html.contains("<b>"), "{html}");
    assert!(!html.contains(".hidden"), "{html}");
    let r = c.get("/docs/", &[("Accept", "application/json")]);
    assert_eq!(r.status, 200);
    assert!(r
        .header("content-type")
        .is_some_and(|t| t.starts_with("application/json")));
    let json = r.text();
    assert!(json.trim_start().starts_with('[') && json.trim_end().ends_with(']'));
    assert!(json.contains("\"name\":\"guide.html\""), "{json}");
    assert!(json.contains("\"type\":\"directory\""), "{json}");
    assert!(!json.contains(".hidden"), "{json}");
    // A directory with an index still serves the index.
    assert_eq!(c.get("/", &[]).text(), "<!doctype html><h1>home</h1>\n");
    drop(h);
    // Listing off (the default): 404.
    let h = start_on(dir.path(), &[]);
    assert_eq!(h.client().get("/docs/", &[]).status, 404);
    assert_eq!(
        h.client()
            .get("/docs/", &[("Accept", "application/json")])
            .status,
        404
    );
    h.assert_no_errors();
}

#[test]
fn spa_fallback_answers_unknown_paths_with_the_index() {
    let (h, _dir) = start(&["--fallback", "index.html"]);
    let mut c = h.client();
    for path in ["/app/route", "/app/route?tab=2", "/deep/a/b/c"] {
        let r = c.get(path, &[]);
        assert_eq!(
            (r.status, r.text().as_str()),
            (200, "<!doctype html><h1>home</h1>\n"),
            "{path}"
        );
        assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    }
    // Real files still win, and dotfiles stay hidden.
    assert_eq!(c.get("/hello.txt", &[]).text(), HELLO);
    assert!(!c.get("/.secret", &[]).text().contains("secret"));
    h.assert_no_errors();
}

#[test]
fn cache_control_and_immutable_hashed_names() {
    let dir = site();
    write(dir.path().join("app.3f9a1c2e.js"), "console.log(1)");
    write(dir.path().join("index-BdY5xB1c.css"), "a{}");
    let h = start_on(
        dir.path(),
        &["--cache-control", "public, max-age=60", "--immutable"],
    );
    let mut c = h.client();
    let table = [
        ("/hello.txt", "public, max-age=60"),
        ("/app.3f9a1c2e.js", "public, max-age=31536000, immutable"),
        ("/index-BdY5xB1c.css", "public, max-age=31536000, immutable"),
        ("/index.html", "public, max-age=60"),
    ];
    for (path, cc) in table {
        let r = c.get(path, &[]);
        assert_eq!(
            (r.status, r.header("cache-control")),
            (200, Some(cc)),
            "{path}"
        );
        assert_eq!(r.count("cache-control"), 1);
        // 304 carries it too.
        let etag = r.header("etag").expect("etag").to_string();
        let r = c.get(path, &[("If-None-Match", &etag)]);
        assert_eq!(
            (r.status, r.header("cache-control")),
            (304, Some(cc)),
            "{path}"
        );
    }
    let r = c.get("/app.3f9a1c2e.js", &[]);
    assert_eq!(
        r.header("content-type"),
        Some("text/javascript; charset=utf-8")
    );
    drop(h);
    // --immutable alone: hashed names only.
    let h = start_on(dir.path(), &["--immutable"]);
    let mut c = h.client();
    assert_eq!(c.get("/hello.txt", &[]).header("cache-control"), None);
    assert_eq!(
        c.get("/app.3f9a1c2e.js", &[]).header("cache-control"),
        Some("public, max-age=31536000, immutable")
    );
    h.assert_no_errors();
}

#[test]
fn precompressed_siblings_are_negotiated() {
    let dir = site();
    // Siblings written after the file (an older sibling is never served).
    write(dir.path().join("x.css"), "body { color: red }\n");
    write(dir.path().join("x.css.gz"), b"GZIP-BYTES\x1f\x8b");
    write(dir.path().join("x.css.br"), b"BROTLI-BYTES!");
    let h = start_on(dir.path(), &[]);
    let mut c = h.client();
    // (Accept-Encoding, Content-Encoding, body)
    let table: [(Option<&str>, Option<&str>, &[u8]); 8] = [
        (Some("gzip"), Some("gzip"), b"GZIP-BYTES\x1f\x8b"),
        (Some("br;q=1, gzip;q=0.5"), Some("br"), b"BROTLI-BYTES!"),
        (
            Some("gzip;q=1, br;q=0.5"),
            Some("gzip"),
            b"GZIP-BYTES\x1f\x8b",
        ),
        (Some("br"), Some("br"), b"BROTLI-BYTES!"),
        (Some("identity"), None, b"body { color: red }\n"),
        (Some("gzip;q=0, br;q=0"), None, b"body { color: red }\n"),
        (Some("zstd"), None, b"body { color: red }\n"),
        (None, None, b"body { color: red }\n"),
    ];
    let mut etags = std::collections::HashSet::new();
    for (ae, ce, body) in table {
        let extra: Vec<(&str, &str)> = ae.map(|v| ("Accept-Encoding", v)).into_iter().collect();
        let r = c.get("/x.css", &extra);
        assert_eq!(r.status, 200, "{ae:?}");
        assert_eq!(r.header("content-encoding"), ce, "{ae:?}");
        assert!(r.body == body, "{ae:?}: {:?}", r.text());
        assert_eq!(r.header("vary"), Some("Accept-Encoding"), "{ae:?}");
        assert_eq!(r.header("content-type"), Some("text/css; charset=utf-8"));
        assert_eq!(
            r.header("content-length"),
            Some(body.len().to_string().as_str())
        );
        etags.insert(r.header("etag").expect("etag").to_string());
    }
    assert_eq!(etags.len(), 3, "one entity tag per coding: {etags:?}");

    // 304 and 206 carry Vary, and ranges apply to the encoded bytes.
    let gz = c.get("/x.css", &[("Accept-Encoding", "gzip")]);
    let gz_tag = gz.header("etag").expect("etag").to_string();
    let r = c.get(
        "/x.css",
        &[("Accept-Encoding", "gzip"), ("If-None-Match", &gz_tag)],
    );
    assert_eq!((r.status, r.header("vary")), (304, Some("Accept-Encoding")));
    // The gzip tag does not validate the identity representation.
    let r = c.get("/x.css", &[("If-None-Match", &gz_tag)]);
    assert_eq!(r.status, 200);
    let r = c.get(
        "/x.css",
        &[("Accept-Encoding", "gzip"), ("Range", "bytes=0-3")],
    );
    assert_eq!(r.status, 206);
    assert_eq!(r.header("vary"), Some("Accept-Encoding"));
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(r.header("content-range"), Some("bytes 0-3/12"));
    assert_eq!(r.body, b"GZIP");
    let r = c.get(
        "/x.css",
        &[("Accept-Encoding", "gzip"), ("Range", "bytes=99-")],
    );
    assert_eq!(r.status, 416);
    assert_eq!(r.header("vary"), Some("Accept-Encoding"));
    // The siblings themselves are plain files.
    let r = c.get("/x.css.gz", &[]);
    assert_eq!((r.status, r.header("content-encoding")), (200, None));
    drop(h);
    // --precompressed=false: identity only, no Vary.
    let h = start_on(dir.path(), &["--precompressed=false"]);
    let r = h.client().get("/x.css", &[("Accept-Encoding", "gzip, br")]);
    assert_eq!(r.body, b"body { color: red }\n");
    assert_eq!(
        (r.header("content-encoding"), r.header("vary")),
        (None, None)
    );
    h.assert_no_errors();
}

#[test]
fn files_changed_on_disk_are_served_fresh_on_the_next_request() {
    // Two workers, two caches: each request on a new connection may land on
    // either.
    let (h, dir) = start(&["--workers", "2"]);
    let p = dir.path();
    let first = expect_body(&h, "/hello.txt", "start", HELLO);
    // Same size, in place. (The entity tag may not change: it is made of
    // mtime and size, and mtime can be equal within a clock tick.)
    write(p.join("hello.txt"), "HELLO WORLD\n");
    expect_body(&h, "/hello.txt", "same-size write", "HELLO WORLD\n");
    // Different size, in place.
    write(p.join("hello.txt"), "a longer body than before\n");
    let resized = expect_body(&h, "/hello.txt", "resize", "a longer body than before\n");
    assert_ne!(resized, first);
    // Replaced by rename.
    write(p.join("hello.tmp"), "renamed in\n");
    std::fs::rename(p.join("hello.tmp"), p.join("hello.txt")).expect("rename");
    let renamed = expect_body(&h, "/hello.txt", "rename", "renamed in\n");
    assert_ne!(renamed, resized);
    // Deleted.
    std::fs::remove_file(p.join("hello.txt")).expect("rm");
    for _ in 0..4 {
        assert_eq!(
            h.client().get("/hello.txt", &[]).status,
            404,
            "after delete"
        );
    }
    // Created again.
    write(p.join("hello.txt"), "back\n");
    expect_body(&h, "/hello.txt", "create", "back\n");
    // A file never asked for, and one in a new directory, after a 404.
    assert_eq!(h.client().get("/fresh/f.txt", &[]).status, 404);
    write(p.join("new.txt"), "new\n");
    std::fs::create_dir(p.join("fresh")).expect("mkdir");
    write(p.join("fresh/f.txt"), "f\n");
    expect_body(&h, "/new.txt", "create", "new\n");
    expect_body(&h, "/fresh/f.txt", "create in a new directory", "f\n");
    // A sibling appearing after the file was cached is served at once.
    write(p.join("fresh/f.txt.gz"), "gz");
    let r = h
        .client()
        .get("/fresh/f.txt", &[("Accept-Encoding", "gzip")]);
    assert_eq!(
        (r.text().as_str(), r.header("content-encoding")),
        ("gz", Some("gzip"))
    );
    // One keep-alive connection sees each change at its next request (its
    // worker learns of it from the event loop, not from a read per request).
    let mut c = h.client();
    for i in 0..5 {
        let body = format!("version {i}{}\n", "!".repeat(i));
        write(p.join("ka.txt"), body.as_bytes());
        assert_eq!(c.get("/ka.txt", &[]).text(), body, "keep-alive, change {i}");
        assert_eq!(c.get("/ka.txt", &[]).text(), body, "keep-alive, again {i}");
    }
    std::fs::remove_file(p.join("ka.txt")).expect("rm");
    assert_eq!(c.get("/ka.txt", &[]).status, 404, "keep-alive, deleted");
    // A large (sendfile) file rewritten in place with other bytes.
    for _ in 0..2 {
        assert_eq!(h.client().get("/big.bin", &[]).body.len(), 1 << 20);
    }
    write(p.join("big.bin"), vec![7u8; 300 * 1024]);
    for _ in 0..4 {
        let r = h.client().get("/big.bin", &[]);
        assert_eq!(r.body.len(), 300 * 1024);
        assert!(r.body.iter().all(|&b| b == 7), "big.bin stale");
    }
    h.assert_no_errors();
}

/// Status and body of `GET path` on `c`.
fn fetch(c: &mut Client, path: &str) -> (u16, String) {
    let r = c.get(path, &[]);
    (r.status, r.text())
}

#[test]
fn a_keep_alive_request_sees_every_change_made_before_it_was_sent() {
    // No wait anywhere: each request goes out on the same connection as
    // soon as the change returned.
    let (h, dir) = start(&["--workers", "1"]);
    let p = dir.path().join("hello.txt");
    let tmp = dir.path().join("hello.tmp");
    let mut c = h.client();
    for _ in 0..2 {
        assert_eq!(fetch(&mut c, "/hello.txt"), (200, HELLO.to_string()));
    }
    for i in 0..20 {
        let ok = |body: String| (200, body);
        // Same size, in place (within one timestamp tick of the last one).
        let same = format!("same size {i:03}\n");
        write(&p, &same);
        assert_eq!(
            fetch(&mut c, "/hello.txt"),
            ok(same.clone()),
            "same size {i}"
        );
        assert_eq!(fetch(&mut c, "/hello.txt"), ok(same), "same size {i}, hit");
        // Another size, in place.
        let resized = format!("resized {}\n", "+".repeat(i + 1));
        write(&p, &resized);
        assert_eq!(fetch(&mut c, "/hello.txt"), ok(resized), "resized {i}");
        // Replaced by rename.
        let renamed = format!("renamed in {i}\n");
        write(&tmp, &renamed);
        std::fs::rename(&tmp, &p).expect("rename");
        assert_eq!(fetch(&mut c, "/hello.txt"), ok(renamed), "renamed {i}");
        // Deleted, then created again.
        std::fs::remove_file(&p).expect("rm");
        assert_eq!(fetch(&mut c, "/hello.txt").0, 404, "deleted {i}");
        assert_eq!(
            fetch(&mut c, "/hello.txt").0,
            404,
            "deleted {i}, remembered"
        );
        let back = format!("back {i}\n");
        write(&p, &back);
        assert_eq!(fetch(&mut c, "/hello.txt"), ok(back), "created {i}");
    }
    h.assert_no_errors();
}

#[test]
fn pipelined_requests_see_every_change_made_before_they_were_sent() {
    let (h, dir) = start(&["--workers", "1"]);
    let p = dir.path();
    let mut c = h.client();
    for path in [
        "/hello.txt",
        "/docs/guide.html",
        "/hello.txt",
        "/docs/guide.html",
    ] {
        assert_eq!(fetch(&mut c, path).0, 200);
    }
    let batch = b"GET /docs/guide.html HTTP/1.1\r\nHost: test\r\n\r\n\
        GET /hello.txt HTTP/1.1\r\nHost: test\r\n\r\n\
        GET /hello.txt HTTP/1.1\r\nHost: test\r\n\r\n";
    for i in 0..20 {
        // The second file is the one that changed: its request is the
        // second of the batch, behind a hit on an unchanged file.
        let hello = format!("hello {}\n", "!".repeat(i));
        write(p.join("hello.txt"), &hello);
        c.send(batch);
        let guide = c.read_response(false).text();
        assert_eq!(
            guide,
            if i == 0 {
                "<p>guide</p>\n".to_string()
            } else {
                format!("guide {}\n", i - 1)
            }
        );
        for n in 0..2 {
            let r = c.read_response(false);
            assert_eq!(
                (r.status, r.text()),
                (200, hello.clone()),
                "batch {i}, request {n}"
            );
        }
        write(p.join("docs/guide.html"), format!("guide {i}\n"));
    }
    // Deleted before a batch.
    std::fs::remove_file(p.join("hello.txt")).expect("rm");
    c.send(batch);
    assert_eq!(c.read_response(false).status, 200);
    assert_eq!(c.read_response(false).status, 404);
    assert_eq!(c.read_response(false).status, 404);
    h.assert_no_errors();
}

#[test]
fn a_file_reached_through_a_symlink_is_rechecked_on_every_request() {
    // inotify watches the link's directory, not the target's: such an
    // entry is re-checked with stat on every hit.
    let (h, dir) = start(&["--workers", "1"]);
    let p = dir.path();
    let target = p.join("docs/guide.html");
    std::os::unix::fs::symlink("docs/guide.html", p.join("link.html")).expect("symlink");
    let mut c = h.client();
    for _ in 0..2 {
        assert_eq!(fetch(&mut c, "/link.html"), (200, "<p>guide</p>\n".into()));
    }
    for i in 0..20 {
        let ok = |body: String| (200, body);
        // Another size, in place (a same-size rewrite within one timestamp
        // tick leaves stat's answer unchanged where timestamps are coarse).
        let resized = format!("<p>{}</p>\n", "g".repeat(i + 7));
        write(&target, &resized);
        assert_eq!(
            fetch(&mut c, "/link.html"),
            ok(resized.clone()),
            "resized {i}"
        );
        assert_eq!(fetch(&mut c, "/link.html"), ok(resized), "resized {i}, hit");
        // Replaced by rename.
        let renamed = format!("renamed {i}\n");
        write(p.join("docs/tmp"), &renamed);
        std::fs::rename(p.join("docs/tmp"), &target).expect("rename");
        assert_eq!(fetch(&mut c, "/link.html"), ok(renamed), "renamed {i}");
        // Deleted (the link dangles), then back.
        std::fs::remove_file(&target).expect("rm");
        assert_eq!(fetch(&mut c, "/link.html").0, 404, "dangling {i}");
        assert_eq!(fetch(&mut c, "/link.html").0, 404, "dangling {i}, again");
        let back = format!("back {i}\n");
        write(&target, &back);
        assert_eq!(fetch(&mut c, "/link.html"), ok(back), "back {i}");
    }
    h.assert_no_errors();
}

/// Asks for `path` on four new connections; each must get `body`, with one
/// entity tag, which is returned.
fn expect_body(h: &Hayate, path: &str, what: &str, body: &str) -> String {
    let mut tag: Option<String> = None;
    for _ in 0..4 {
        let r = h.client().get(path, &[]);
        assert_eq!(
            (r.status, r.text().as_str()),
            (200, body),
            "{path} after {what}"
        );
        let etag = r.header("etag").expect("etag").to_string();
        if let Some(t) = &tag {
            assert_eq!(t, &etag, "workers disagree on the etag of {path}");
        }
        tag = Some(etag);
    }
    tag.expect("etag")
}

#[test]
fn sites_and_routes_from_a_config_file() {
    let base = tempfile::tempdir().expect("tempdir");
    let b = base.path();
    for d in ["a", "assets", "default"] {
        std::fs::create_dir(b.join(d)).expect("mkdir");
    }
    write(b.join("a/index.html"), "site A");
    write(b.join("a/only-a.txt"), "only in A");
    write(b.join("assets/app.js"), "assets file");
    write(b.join("default/index.html"), "default site");
    let config = b.join("hayate.toml");
    write(
        &config,
        format!(
            r#"listen = ["127.0.0.1:0"]
workers = 1

[[site]]
hosts = ["a.test", "www.a.test"]
root = "{a}"
cache_control = "max-age=5"

[[site.route]]
prefix = "/assets/"
root = "{assets}"
strip_prefix = true
immutable = true

[[site]]
root = "{default}"
"#,
            a = b.join("a").display(),
            assets = b.join("assets").display(),
            default = b.join("default").display(),
        ),
    );
    let h = Hayate::start(BIN, &["--config", config.to_str().expect("utf8")]);
    let mut c = h.client();
    // (Host, path, status, body)
    let table = [
        ("a.test", "/", 200, "site A"),
        ("A.Test", "/", 200, "site A"),
        ("a.test:8080", "/", 200, "site A"),
        ("www.a.test", "/only-a.txt", 200, "only in A"),
        ("a.test", "/assets/app.js", 200, "assets file"),
        ("a.test:80", "/assets/app.js", 200, "assets file"),
        ("a.test", "/app.js", 404, ""),
        ("other.test", "/", 200, "default site"),
        ("other.test:8080", "/only-a.txt", 404, ""),
        ("other.test", "/assets/app.js", 404, ""),
        ("127.0.0.1", "/", 200, "default site"),
        ("sub.a.test", "/", 200, "default site"),
    ];
    for (host, path, status, body) in table {
        let r = get_host(&mut c, host, path);
        assert_eq!(r.status, status, "Host: {host} {path}");
        if status == 200 {
            assert_eq!(r.text(), body, "Host: {host} {path}");
        }
    }
    // Route options: the site's Cache-Control, overridden by the route's
    // immutable for hashed names only.
    write(b.join("assets/app.12345678.js"), "hashed");
    let r = get_host(&mut c, "a.test", "/assets/app.12345678.js");
    assert_eq!(
        r.header("cache-control"),
        Some("public, max-age=31536000, immutable")
    );
    let r = get_host(&mut c, "a.test", "/assets/app.js");
    assert_eq!(r.header("cache-control"), Some("max-age=5"));
    let r = get_host(&mut c, "other.test", "/");
    assert_eq!(r.header("cache-control"), None);
    // The default Host of the testkit client goes to the default site.
    assert_eq!(c.get("/", &[]).text(), "default site");
    h.assert_no_errors();
}
