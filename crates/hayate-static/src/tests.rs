//! Handler tests without sockets: a temporary root, requests in, responses
//! checked field by field.

use super::*;
use std::time::Duration;

mod freshness;
mod variants;

struct Fixture {
    dir: tempfile::TempDir,
    root: StaticRoot,
}

fn options(root: &Path) -> StaticOptions {
    StaticOptions {
        root: root.to_path_buf(),
        index: "index.html".into(),
        listing: false,
        fallback: None,
        dotfiles: false,
        symlinks: Symlinks::Owner,
        cache_control: None,
        immutable: false,
        precompressed: true,
        cache: CacheLimits {
            budget: 1 << 20,
            max_file: 64,
            max_open: 64,
            revalidate: Duration::from_secs(3600),
        },
        encodings: Coding::COMPRESSED.to_vec(),
        variants: None,
    }
}

fn fixture(tweak: impl FnOnce(&mut StaticOptions)) -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path();
    std::fs::write(p.join("hello.txt"), "hello world\n").expect("write");
    std::fs::write(p.join("index.html"), "<h1>home</h1>").expect("write");
    std::fs::create_dir(p.join("docs")).expect("mkdir");
    std::fs::write(p.join("docs/guide.html"), "guide").expect("write");
    std::fs::write(p.join(".env"), "SECRET=1").expect("write");
    std::fs::create_dir(p.join(".well-known")).expect("mkdir");
    std::fs::write(p.join(".well-known/security.txt"), "contact").expect("write");
    std::fs::write(p.join("big.bin"), vec![7u8; 1000]).expect("write");
    let mut opts = options(p);
    tweak(&mut opts);
    let root = StaticRoot::new(opts).expect("root");
    Fixture { dir, root }
}

#[derive(Default)]
struct Req<'a> {
    method: &'a str,
    path: &'a str,
    query: Option<&'a str>,
    pre: Preconditions<'a>,
    range: Option<&'a str>,
    accept: Option<Coding>,
    json: bool,
}

fn serve(f: &Fixture, r: Req<'_>) -> Response {
    // Each request stands for new input from a client.
    hayate_core::epoch::advance();
    let accept = r.accept;
    let choose = move |available: &[Coding]| available.iter().copied().find(|c| Some(*c) == accept);
    f.root.serve(&StaticRequest {
        method: if r.method.is_empty() {
            b"GET"
        } else {
            r.method.as_bytes()
        },
        path: r.path.as_bytes(),
        raw_path: r.path.as_bytes(),
        query: r.query.map(str::as_bytes),
        preconditions: r.pre,
        range: r.range.map(str::as_bytes),
        choose_coding: &choose,
        wants_json: r.json,
        now: Instant::now(),
    })
}

fn get(f: &Fixture, path: &str) -> Response {
    serve(
        f,
        Req {
            path,
            ..Default::default()
        },
    )
}

fn header(r: &Response, name: &str) -> Option<String> {
    r.field(name.as_bytes())
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

fn body(r: &Response) -> Vec<u8> {
    let read_range = |f: &FileRange| {
        use std::os::unix::fs::FileExt;
        let mut buf = vec![0; f.len as usize];
        f.file.read_exact_at(&mut buf, f.offset).expect("read");
        buf
    };
    match &r.body {
        Body::Empty => Vec::new(),
        Body::Bytes(b) => b.to_vec(),
        Body::File(f) => read_range(f),
        Body::Parts(parts) => parts
            .iter()
            .flat_map(|c| match c {
                Chunk::Bytes(b) => b.to_vec(),
                Chunk::File(f) => read_range(f),
            })
            .collect(),
        Body::Stream(_) | Body::Upgrade(_) => panic!("static files never stream"),
    }
}

#[test]
fn serves_a_file_with_validators() {
    let f = fixture(|_| {});
    let r = get(&f, "/hello.txt");
    assert_eq!(r.status, Status::OK);
    assert_eq!(body(&r), b"hello world\n");
    assert_eq!(
        header(&r, "Content-Type").as_deref(),
        Some("text/plain; charset=utf-8")
    );
    assert!(header(&r, "ETag").is_some_and(|e| e.starts_with('"') && e.ends_with('"')));
    assert!(header(&r, "Last-Modified").is_some());
    assert_eq!(header(&r, "Accept-Ranges").as_deref(), Some("bytes"));
    assert_eq!(header(&r, "Vary"), None, "no variants, no Vary");
}

#[test]
fn methods_other_than_get_and_head_get_405_with_allow() {
    let f = fixture(|_| {});
    for m in ["POST", "PUT", "DELETE", "OPTIONS", "PATCH"] {
        let r = serve(
            &f,
            Req {
                method: m,
                path: "/hello.txt",
                ..Default::default()
            },
        );
        assert_eq!(r.status, Status::METHOD_NOT_ALLOWED, "{m}");
        assert_eq!(header(&r, "Allow").as_deref(), Some("GET, HEAD"));
    }
    let r = serve(
        &f,
        Req {
            method: "HEAD",
            path: "/hello.txt",
            ..Default::default()
        },
    );
    assert_eq!(r.status, Status::OK);
    assert_eq!(
        r.body.len(),
        12,
        "HEAD announces the length; the writer drops the body"
    );
}

#[test]
fn index_redirect_and_missing() {
    let f = fixture(|_| {});
    assert_eq!(body(&get(&f, "/")), b"<h1>home</h1>");
    let r = serve(
        &f,
        Req {
            path: "/docs",
            query: Some("a=1&b"),
            ..Default::default()
        },
    );
    assert_eq!(r.status, Status::MOVED_PERMANENTLY);
    assert_eq!(header(&r, "Location").as_deref(), Some("/docs/?a=1&b"));
    assert_eq!(
        get(&f, "/docs/").status,
        Status::NOT_FOUND,
        "no index, no listing"
    );
    assert_eq!(get(&f, "/nope.txt").status, Status::NOT_FOUND);
    assert_eq!(get(&f, "/hello.txt/x").status, Status::NOT_FOUND);
}

#[test]
fn listing_html_and_json() {
    let f = fixture(|o| o.listing = true);
    std::fs::write(f.dir.path().join("docs/<b>.txt"), "x").expect("write");
    let html = get(&f, "/docs/");
    assert_eq!(html.status, Status::OK);
    let text = String::from_utf8(body(&html)).expect("utf8");
    assert!(
        text.contains("guide.html") && text.contains("&lt;b&gt;.txt"),
        "{text}"
    );
    let json = serve(
        &f,
        Req {
            path: "/docs/",
            json: true,
            ..Default::default()
        },
    );
    assert_eq!(
        header(&json, "Content-Type").as_deref(),
        Some("application/json")
    );
    assert!(String::from_utf8(body(&json))
        .expect("utf8")
        .contains("\"name\":\"guide.html\""));
    let root = String::from_utf8(body(&get(&f, "/.well-known/"))).expect("utf8");
    assert!(root.contains("security.txt"));
}

#[test]
fn dotfiles_hidden_but_well_known_served() {
    let f = fixture(|_| {});
    assert_eq!(get(&f, "/.env").status, Status::NOT_FOUND);
    assert_eq!(get(&f, "/.well-known/security.txt").status, Status::OK);
    let f = fixture(|o| o.dotfiles = true);
    assert_eq!(get(&f, "/.env").status, Status::OK);
}

#[test]
fn symlinks_out_of_root_follow_the_setting() {
    use std::os::unix::fs::symlink;
    let outside = tempfile::tempdir().expect("tempdir");
    std::fs::write(outside.path().join("secret.txt"), "secret").expect("write");
    let with = |symlinks: Symlinks| {
        let f = fixture(|o| o.symlinks = symlinks);
        let d = f.dir.path();
        symlink(outside.path().join("secret.txt"), d.join("link.txt")).expect("symlink");
        symlink(outside.path(), d.join("linkdir")).expect("symlink");
        symlink(d.join("hello.txt"), d.join("inside.txt")).expect("symlink");
        // A sibling is a path of its own: a link out of the root is judged.
        // (Written after the file: an older sibling is stale.)
        std::fs::write(outside.path().join("other.gz"), "GZ").expect("write");
        symlink(outside.path().join("other.gz"), d.join("hello.txt.gz")).expect("symlink");
        f
    };
    let gzip = |f: &Fixture| {
        let r = serve(
            f,
            Req {
                path: "/hello.txt",
                accept: Some(Coding::Gzip),
                ..Default::default()
            },
        );
        header(&r, "Content-Encoding")
    };
    // The test's files all have one owner: `owner` follows, as `always`.
    for setting in [Symlinks::Owner, Symlinks::Always] {
        let f = with(setting);
        assert_eq!(body(&get(&f, "/link.txt")), b"secret", "{setting:?}");
        assert_eq!(body(&get(&f, "/linkdir/secret.txt")), b"secret");
        assert_eq!(gzip(&f).as_deref(), Some("gzip"), "{setting:?}");
    }
    let f = with(Symlinks::Never);
    assert_eq!(get(&f, "/link.txt").status, Status::FORBIDDEN);
    assert_eq!(get(&f, "/linkdir/secret.txt").status, Status::FORBIDDEN);
    assert_eq!(get(&f, "/linkdir/").status, Status::FORBIDDEN);
    assert_eq!(gzip(&f), None, "the sibling behind a refused link");
    let inside = get(&f, "/inside.txt");
    assert_eq!(inside.status, Status::OK, "links within the root are fine");
    // Refused is not missing: a route with an app does not get the path.
    let req = StaticRequest {
        method: b"GET",
        path: b"/link.txt",
        raw_path: b"/link.txt",
        query: None,
        preconditions: Preconditions::default(),
        range: None,
        choose_coding: &|_| None,
        wants_json: false,
        now: Instant::now(),
    };
    let refused = f.root.try_serve(&req).map(|r| r.status);
    assert_eq!(refused, Some(Status::FORBIDDEN));
    if nix::unistd::Uid::effective().is_root() {
        // A link of another user's (nobody's) to a file of root's.
        let nobody = nix::unistd::User::from_name("nobody")
            .expect("user db")
            .expect("nobody")
            .uid
            .as_raw();
        let f = with(Symlinks::Owner);
        std::os::unix::fs::lchown(f.dir.path().join("link.txt"), Some(nobody), None)
            .expect("lchown");
        std::os::unix::fs::lchown(f.dir.path().join("hello.txt.gz"), Some(nobody), None)
            .expect("lchown");
        assert_eq!(get(&f, "/link.txt").status, Status::FORBIDDEN);
        assert_eq!(gzip(&f), None);
    }
}

#[test]
fn spa_fallback_answers_200() {
    let f = fixture(|o| o.fallback = Some("index.html".into()));
    let r = get(&f, "/app/route/42");
    assert_eq!(r.status, Status::OK);
    assert_eq!(body(&r), b"<h1>home</h1>");
    assert_eq!(
        get(&f, "/.env").status,
        Status::NOT_FOUND,
        "hidden files stay hidden"
    );
}

#[test]
fn preconditions() {
    let f = fixture(|_| {});
    let etag = header(&get(&f, "/hello.txt"), "ETag").expect("etag");
    let lm = header(&get(&f, "/hello.txt"), "Last-Modified").expect("lm");
    let with = |pre: Preconditions<'_>| {
        serve(
            &f,
            Req {
                path: "/hello.txt",
                pre,
                ..Default::default()
            },
        )
    };
    let r = with(Preconditions {
        if_none_match: Some(etag.as_bytes()),
        ..Default::default()
    });
    assert_eq!(r.status, Status::NOT_MODIFIED);
    assert_eq!(header(&r, "ETag").as_deref(), Some(etag.as_str()));
    assert!(r.body.is_empty());
    assert_eq!(
        with(Preconditions {
            if_modified_since: Some(lm.as_bytes()),
            ..Default::default()
        })
        .status,
        Status::NOT_MODIFIED
    );
    assert_eq!(
        with(Preconditions {
            if_match: Some(b"\"other\""),
            ..Default::default()
        })
        .status,
        Status::PRECONDITION_FAILED
    );
    assert_eq!(
        with(Preconditions {
            if_match: Some(etag.as_bytes()),
            ..Default::default()
        })
        .status,
        Status::OK
    );
}

#[test]
fn ranges_single_multi_unsatisfiable_and_if_range() {
    let f = fixture(|_| {});
    let r = serve(
        &f,
        Req {
            path: "/hello.txt",
            range: Some("bytes=0-4"),
            ..Default::default()
        },
    );
    assert_eq!(r.status, Status::PARTIAL_CONTENT);
    assert_eq!(header(&r, "Content-Range").as_deref(), Some("bytes 0-4/12"));
    assert_eq!(body(&r), b"hello");
    let r = serve(
        &f,
        Req {
            path: "/hello.txt",
            range: Some("bytes=0-1,6-7"),
            ..Default::default()
        },
    );
    assert_eq!(r.status, Status::PARTIAL_CONTENT);
    let ct = header(&r, "Content-Type").expect("ct");
    let boundary = ct
        .strip_prefix("multipart/byteranges; boundary=")
        .expect("multipart");
    let text = String::from_utf8(body(&r)).expect("utf8");
    assert_eq!(
        text,
        format!(
            "\r\n--{boundary}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Range: bytes 0-1/12\r\n\r\nhe\
             \r\n--{boundary}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Range: bytes 6-7/12\r\n\r\nwo\
             \r\n--{boundary}--\r\n"
        )
    );
    assert_eq!(r.body.len() as usize, text.len());
    let r = serve(
        &f,
        Req {
            path: "/hello.txt",
            range: Some("bytes=50-"),
            ..Default::default()
        },
    );
    assert_eq!(r.status, Status::RANGE_NOT_SATISFIABLE);
    assert_eq!(header(&r, "Content-Range").as_deref(), Some("bytes */12"));
    let r = serve(
        &f,
        Req {
            path: "/hello.txt",
            range: Some("bytes=0-5,2-8"),
            ..Default::default()
        },
    );
    assert_eq!(
        (r.status, r.body.len()),
        (Status::OK, 12),
        "overlap gets the whole file"
    );
    let stale = Preconditions {
        if_range: Some(b"\"old\""),
        ..Default::default()
    };
    let r = serve(
        &f,
        Req {
            path: "/hello.txt",
            range: Some("bytes=0-4"),
            pre: stale,
            ..Default::default()
        },
    );
    assert_eq!(r.status, Status::OK, "If-Range mismatch ignores Range");
    let r = serve(
        &f,
        Req {
            method: "HEAD",
            path: "/hello.txt",
            range: Some("bytes=0-4"),
            ..Default::default()
        },
    );
    assert_eq!(r.status, Status::OK, "Range applies to GET only");
    // Large files come from the descriptor, ranges too.
    let r = serve(
        &f,
        Req {
            path: "/big.bin",
            range: Some("bytes=990-"),
            ..Default::default()
        },
    );
    assert!(matches!(r.body, Body::File(_)));
    assert_eq!(body(&r), vec![7u8; 10]);
}

#[test]
fn precompressed_siblings_are_negotiated_with_vary_and_own_etag() {
    let f = fixture(|_| {});
    std::fs::write(f.dir.path().join("hello.txt.gz"), "GZ").expect("write");
    std::fs::write(f.dir.path().join("hello.txt.br"), "BR").expect("write");
    let plain = get(&f, "/hello.txt");
    assert_eq!(body(&plain), b"hello world\n");
    assert_eq!(header(&plain, "Vary").as_deref(), Some("Accept-Encoding"));
    assert_eq!(header(&plain, "Content-Encoding"), None);
    let gz = serve(
        &f,
        Req {
            path: "/hello.txt",
            accept: Some(Coding::Gzip),
            ..Default::default()
        },
    );
    assert_eq!(body(&gz), b"GZ");
    assert_eq!(header(&gz, "Content-Encoding").as_deref(), Some("gzip"));
    assert_eq!(
        header(&gz, "Content-Type").as_deref(),
        Some("text/plain; charset=utf-8")
    );
    assert_ne!(header(&gz, "ETag"), header(&plain, "ETag"));
    let br = serve(
        &f,
        Req {
            path: "/hello.txt",
            accept: Some(Coding::Br),
            ..Default::default()
        },
    );
    assert_eq!(body(&br), b"BR");
    let etag = header(&gz, "ETag").expect("etag");
    let pre = Preconditions {
        if_none_match: Some(etag.as_bytes()),
        ..Default::default()
    };
    let r = serve(
        &f,
        Req {
            path: "/hello.txt",
            accept: Some(Coding::Gzip),
            pre,
            ..Default::default()
        },
    );
    assert_eq!(r.status, Status::NOT_MODIFIED);
    assert_eq!(header(&r, "Vary").as_deref(), Some("Accept-Encoding"));
    let r = serve(
        &f,
        Req {
            path: "/hello.txt",
            accept: Some(Coding::Gzip),
            range: Some("bytes=0-0"),
            ..Default::default()
        },
    );
    assert_eq!(
        (r.status, body(&r)),
        (Status::PARTIAL_CONTENT, b"G".to_vec())
    );
    assert_eq!(header(&r, "Vary").as_deref(), Some("Accept-Encoding"));
}

#[test]
fn stale_sibling_is_ignored() {
    let f = fixture(|_| {});
    let gz = f.dir.path().join("hello.txt.gz");
    std::fs::write(&gz, "OLD").expect("write");
    let old = std::time::SystemTime::now() - Duration::from_secs(3600);
    File::options()
        .write(true)
        .open(&gz)
        .expect("open")
        .set_modified(old)
        .expect("mtime");
    let r = serve(
        &f,
        Req {
            path: "/hello.txt",
            accept: Some(Coding::Gzip),
            ..Default::default()
        },
    );
    assert_eq!(body(&r), b"hello world\n");
}

#[test]
fn changed_replaced_and_deleted_files_are_fresh() {
    let f = fixture(|_| {});
    let p = f.dir.path().join("hello.txt");
    assert_eq!(body(&get(&f, "/hello.txt")), b"hello world\n");
    assert_eq!(f.root.cache.len(), 1);
    // Changed in place, same length (mtime granularity must not matter).
    std::fs::write(&p, "HELLO WORLD\n").expect("write");
    assert_eq!(body(&get(&f, "/hello.txt")), b"HELLO WORLD\n");
    // Replaced atomically by rename.
    let tmp = f.dir.path().join("tmp");
    std::fs::write(&tmp, "replaced").expect("write");
    std::fs::rename(&tmp, &p).expect("rename");
    assert_eq!(body(&get(&f, "/hello.txt")), b"replaced");
    // A sibling appears.
    std::fs::write(f.dir.path().join("hello.txt.gz"), "GZ").expect("write");
    let r = serve(
        &f,
        Req {
            path: "/hello.txt",
            accept: Some(Coding::Gzip),
            ..Default::default()
        },
    );
    assert_eq!(body(&r), b"GZ");
    // Deleted.
    std::fs::remove_file(&p).expect("rm");
    assert_eq!(get(&f, "/hello.txt").status, Status::NOT_FOUND);
    // Index of a directory replaced.
    assert_eq!(body(&get(&f, "/")), b"<h1>home</h1>");
    std::fs::write(f.dir.path().join("index.html"), "v2").expect("write");
    assert_eq!(body(&get(&f, "/")), b"v2");
    // A directory renamed away.
    assert_eq!(get(&f, "/docs/guide.html").status, Status::OK);
    std::fs::rename(f.dir.path().join("docs"), f.dir.path().join("moved")).expect("rename");
    assert_eq!(get(&f, "/docs/guide.html").status, Status::NOT_FOUND);
    assert_eq!(get(&f, "/moved/guide.html").status, Status::OK);
}

#[test]
fn remembered_misses_end_when_the_file_appears() {
    let f = fixture(|_| {});
    let now = Instant::now();
    // A missing file, a missing file in a missing directory, a directory
    // that appears later, and a rename into place.
    for path in ["/new.txt", "/a/b/c.txt", "/docs/late.txt"] {
        assert_eq!(get(&f, path).status, Status::NOT_FOUND);
        assert!(
            f.root.cache.known(path.as_bytes(), now) == Some(Known::Missing),
            "{path}"
        );
    }
    std::fs::write(f.dir.path().join("new.txt"), "new").expect("write");
    assert_eq!(body(&get(&f, "/new.txt")), b"new");
    std::fs::create_dir_all(f.dir.path().join("a/b")).expect("mkdir");
    std::fs::write(f.dir.path().join("a/b/c.txt"), "deep").expect("write");
    assert_eq!(body(&get(&f, "/a/b/c.txt")), b"deep");
    let tmp = f.dir.path().join("tmp-late");
    std::fs::write(&tmp, "late").expect("write");
    std::fs::rename(&tmp, f.dir.path().join("docs/late.txt")).expect("rename");
    assert_eq!(body(&get(&f, "/docs/late.txt")), b"late");
    // Unrelated paths stay remembered.
    assert_eq!(get(&f, "/still-missing").status, Status::NOT_FOUND);
    std::fs::write(f.dir.path().join("other.txt"), "x").expect("write");
    get(&f, "/other.txt");
    assert!(f.root.cache.known(b"/still-missing", now) == Some(Known::Missing));
}

#[test]
fn directories_without_an_index_are_remembered_until_that_changes() {
    // try_files in front of an app: `/` and `/docs/` have no index and go
    // upstream, without a look at the disk per request.
    let f = fixture(|_| {});
    std::fs::remove_file(f.dir.path().join("index.html")).expect("rm");
    let now = Instant::now();
    for path in ["/", "/docs/"] {
        hayate_core::epoch::advance();
        assert!(f.root.try_serve(&plain(path, now)).is_none(), "{path}");
        assert_eq!(
            f.root.cache.known(path.as_bytes(), now),
            Some(Known::Dir),
            "{path}"
        );
        let index = format!("{path}index.html");
        assert!(
            f.root.cache.known(index.as_bytes(), now) == Some(Known::Missing),
            "{index}"
        );
    }
    // A path longer than the stack buffer for the index's name, too.
    let long = format!("/{}/{}/", "a".repeat(200), "b".repeat(100));
    std::fs::create_dir_all(f.dir.path().join(&long[1..])).expect("mkdir");
    hayate_core::epoch::advance();
    assert!(f.root.try_serve(&plain(&long, now)).is_none());
    let index = format!("{long}index.html");
    assert_eq!(
        f.root.cache.known(index.as_bytes(), now),
        Some(Known::Missing)
    );
    std::fs::write(f.dir.path().join(&index[1..]), "deep home").expect("write");
    assert_eq!(body(&get(&f, &long)), b"deep home");
    // An index appears: served at once.
    std::fs::write(f.dir.path().join("docs/index.html"), "docs home").expect("write");
    assert_eq!(body(&get(&f, "/docs/")), b"docs home");
    // The directory becomes a file: no longer a directory.
    std::fs::remove_dir_all(f.dir.path().join("docs")).expect("rm");
    std::fs::write(f.dir.path().join("docs"), "a file").expect("write");
    assert_eq!(body(&get(&f, "/docs")), b"a file");
    hayate_core::epoch::advance();
    assert_eq!(
        f.root.cache.known(b"/docs/", now),
        None,
        "the directory's entry went with it"
    );
    assert_eq!(
        f.root.cache.known(b"/", now),
        Some(Known::Dir),
        "unrelated entries stay"
    );
}

fn plain(path: &str, now: Instant) -> StaticRequest<'_> {
    StaticRequest {
        method: b"GET",
        path: path.as_bytes(),
        raw_path: path.as_bytes(),
        query: None,
        preconditions: Preconditions::default(),
        range: None,
        choose_coding: &|_| None,
        wants_json: false,
        now,
    }
}

#[test]
fn a_directory_reached_through_a_symlink_keeps_its_own_events() {
    let f = fixture(|_| {});
    std::os::unix::fs::symlink(f.dir.path().join("docs"), f.dir.path().join("alias"))
        .expect("symlink");
    assert_eq!(body(&get(&f, "/docs/guide.html")), b"guide");
    // A miss through the alias watches the same directory by another name.
    assert_eq!(get(&f, "/alias/missing.txt").status, Status::NOT_FOUND);
    std::fs::write(f.dir.path().join("docs/guide.html"), "guide v2").expect("write");
    assert_eq!(body(&get(&f, "/docs/guide.html")), b"guide v2");
}

#[test]
fn cache_control_and_immutable_hashed_assets() {
    let f = fixture(|o| {
        o.cache_control = Some("public, max-age=60".into());
        o.immutable = true;
    });
    std::fs::write(f.dir.path().join("app.3f9a1c2e.js"), "js").expect("write");
    assert_eq!(
        header(&get(&f, "/hello.txt"), "Cache-Control").as_deref(),
        Some("public, max-age=60")
    );
    assert_eq!(
        header(&get(&f, "/app.3f9a1c2e.js"), "Cache-Control").as_deref(),
        Some("public, max-age=31536000, immutable")
    );
}

#[test]
fn hashed_names() {
    for (name, want) in [
        ("app.3f9a1c2e.js", true),
        ("index-BdY5xB1c.js", true),
        ("main.abcdefgh.css", false),
        ("app.js", false),
        ("2024-report.pdf", false),
        ("chunk-0123456789.mjs", true),
        ("noext", false),
    ] {
        assert_eq!(looks_hashed(name.as_bytes()), want, "{name}");
    }
}

#[test]
fn the_cache_holds_no_more_descriptors_than_its_bound() {
    let f = fixture(|o| o.cache.max_open = 2);
    assert_eq!(body(&get(&f, "/hello.txt")), b"hello world\n");
    for i in 0..5u8 {
        let name = f.dir.path().join(format!("big{i}.bin"));
        std::fs::write(name, vec![i; 1000]).expect("write");
    }
    for i in 0..5u8 {
        let r = get(&f, &format!("/big{i}.bin"));
        assert!(matches!(r.body, Body::File(_)), "served from a descriptor");
        assert_eq!(body(&r), vec![i; 1000]);
        assert!(f.root.cache.held_files() <= 2, "after big{i}.bin");
    }
    // Files kept in memory hold none, and stay: the large ones made room.
    assert_eq!((f.root.cache.held_files(), f.root.cache.len()), (2, 3));
}
