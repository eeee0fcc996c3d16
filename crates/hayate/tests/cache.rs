//! The response cache end to end: hayate with `--cache` in front of the
//! testkit's scripted origin (`/script?...` answers with the status and
//! headers a test asks for, and counts the requests per target), checking
//! status, headers, Age, Cache-Status and how many requests reached the
//! origin.

// Tests block on purpose (they are clients, not the server).
#![allow(clippy::disallowed_methods)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime};

use hayate_testkit::{
    big_bytes, unix_request, Client, Hayate, Origin, OriginOptions, Response, WAIT,
};

const BIN: &str = env!("CARGO_BIN_EXE_hayate");

fn origin() -> Origin {
    Origin::start(OriginOptions::default())
}

/// A control socket path of this test's own.
fn control_path() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::SeqCst);
    let p = std::env::temp_dir().join(format!("hayate-cache-test-{}-{n}.sock", std::process::id()));
    p.display().to_string()
}

/// hayate caching (`spec`) in front of `origin`, with more `args`.
fn cached(origin: &Origin, spec: &str, args: &[&str]) -> Hayate {
    let url = origin.url();
    let control = control_path();
    let mut all = vec!["--proxy", url.as_str(), "--cache", spec];
    if !args.contains(&"--control") {
        all.extend(["--control", control.as_str()]);
    }
    all.extend_from_slice(args);
    Hayate::start(BIN, &all)
}

/// Runs `hayate purge ARGS --control SOCK` and returns its output.
fn purge(sock: &str, args: &[&str]) -> String {
    let out = std::process::Command::new(BIN)
        .arg("purge")
        .args(args)
        .args(["--control", sock])
        .output()
        .expect("hayate purge");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `/script?` with `params`, percent-encoded.
fn script(params: &[(&str, &str)]) -> String {
    let enc = |s: &str| {
        s.bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect::<String>()
    };
    let q: Vec<String> = params
        .iter()
        .map(|(k, v)| format!("{k}={}", enc(v)))
        .collect();
    format!("/script?{}", q.join("&"))
}

fn cache_status(r: &Response) -> String {
    r.header("cache-status").unwrap_or_default().to_string()
}

fn age(r: &Response) -> Option<u64> {
    r.header("age").and_then(|a| a.parse().ok())
}

/// Whether `r` came from the store, fresh: a hit with time to live left.
fn fresh_hit(r: &Response) -> bool {
    let cs = cache_status(r);
    let ttl = cs
        .split("; ")
        .find_map(|p| p.strip_prefix("ttl="))
        .and_then(|t| t.parse::<i64>().ok());
    cs.contains("; hit") && !cs.contains("fwd=") && ttl.is_some_and(|t| t > 0)
}

/// Requests `path` until the stored response is no longer fresh (its
/// `max-age` is the test's clock: ages count in whole seconds), and
/// returns the first answer that is not a fresh hit. The fresh hits before
/// it never reach the origin.
fn until_stale(c: &mut Client, path: &str) -> Response {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let r = c.get(path, &[]);
        if !fresh_hit(&r) {
            return r;
        }
        assert!(Instant::now() < deadline, "never stale: {r:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn fresh_responses_are_served_from_the_cache_with_age_and_cache_status() {
    let o = origin();
    let h = cached(&o, "on", &[]);
    let path = script(&[("h", "Cache-Control: max-age=60"), ("t", "fresh")]);
    let mut c = h.client();
    let first = c.get(&path, &[]);
    assert_eq!(first.status, 200);
    assert_eq!(first.text(), "count 1\n");
    let cs = cache_status(&first);
    assert!(
        cs.starts_with("hayate; fwd=uri-miss; fwd-status=200"),
        "{cs}"
    );
    assert!(cs.contains("; stored"), "{cs}");
    for _ in 0..3 {
        let hit = c.get(&path, &[]);
        assert_eq!((hit.status, hit.text()), (200, "count 1\n".to_string()));
        let cs = cache_status(&hit);
        assert!(cs.starts_with("hayate; hit; ttl="), "{cs}");
        assert!(age(&hit).is_some_and(|a| a <= 1), "{:?}", hit.headers);
        assert_eq!(hit.header("content-type"), Some("text/plain"));
        assert_eq!(hit.count("date"), 1);
    }
    assert_eq!(o.count(&path), 1);
    h.assert_no_errors();
}

/// A row of [`what_is_stored`]: a name, the origin's script (status,
/// headers), whether a second request is answered from the cache.
type StoreRow = (&'static str, &'static [(&'static str, &'static str)], bool);

#[test]
fn what_is_stored() {
    let rows: &[StoreRow] = &[
        ("max-age", &[("h", "Cache-Control: max-age=60")], true),
        ("s-maxage", &[("h", "Cache-Control: s-maxage=60")], true),
        (
            "expires",
            &[("h", "Expires: Thu, 01 Jan 2099 00:00:00 GMT")],
            true,
        ),
        (
            "public-heuristic",
            &[
                ("h", "Cache-Control: public"),
                ("h", "Last-Modified: Mon, 01 Jan 2024 00:00:00 GMT"),
            ],
            true,
        ),
        (
            "404-max-age",
            &[("status", "404"), ("h", "Cache-Control: max-age=60")],
            true,
        ),
        (
            "no-store",
            &[("h", "Cache-Control: max-age=60, no-store")],
            false,
        ),
        (
            "private",
            &[("h", "Cache-Control: private, max-age=60")],
            false,
        ),
        (
            "set-cookie",
            &[("h", "Cache-Control: max-age=60"), ("h", "Set-Cookie: s=1")],
            false,
        ),
        (
            "vary-star",
            &[("h", "Cache-Control: max-age=60"), ("h", "Vary: *")],
            false,
        ),
        ("no-freshness", &[], false),
        (
            "expired",
            &[("h", "Expires: Thu, 01 Jan 1970 00:00:00 GMT")],
            false,
        ),
        (
            "500",
            &[("status", "500"), ("h", "Cache-Control: no-cache")],
            false,
        ),
        (
            "206",
            &[("status", "206"), ("h", "Cache-Control: max-age=60")],
            false,
        ),
        (
            "event-stream",
            &[
                ("h", "Cache-Control: max-age=60"),
                ("h", "Content-Type: text/event-stream"),
            ],
            false,
        ),
    ];
    let o = origin();
    let h = cached(&o, "on", &[]);
    let mut c = h.client();
    for (name, params, stored) in rows {
        let mut p = params.to_vec();
        p.push(("t", name));
        let path = script(&p);
        let first = c.get(&path, &[]);
        let second = c.get(&path, &[]);
        let want = if *stored { 1 } else { 2 };
        assert_eq!(
            o.count(&path),
            want,
            "{name}: {:?} / {:?}",
            first.headers,
            second.headers
        );
        let cs = cache_status(&second);
        assert_eq!(cs.contains("; hit"), *stored, "{name}: {cs}");
        if *stored {
            assert_eq!(first.body, second.body, "{name}");
        }
    }
    h.assert_no_errors();
}

#[test]
fn a_ttl_micro_caches_responses_without_freshness() {
    let o = origin();
    let h = cached(&o, "5s", &[]);
    let mut c = h.client();
    let path = script(&[("t", "micro")]);
    c.get(&path, &[]);
    let hit = c.get(&path, &[]);
    assert!(cache_status(&hit).contains("hit; ttl="), "{hit:?}");
    assert_eq!(o.count(&path), 1);
    // Explicit freshness wins, and no-store still means no.
    let nostore = script(&[("h", "Cache-Control: no-store"), ("t", "micro")]);
    c.get(&nostore, &[]);
    c.get(&nostore, &[]);
    assert_eq!(o.count(&nostore), 2);
}

/// `cache_key_headers`: an API key sent in its own header keys the cache
/// (one client's answer is never another's); `cache_bypass_headers`: a
/// request carrying one of them never uses the cache.
#[test]
fn key_headers_keep_clients_apart_and_bypass_headers_bypass() {
    let o = origin();
    let h = cached(
        &o,
        "5s",
        &[
            "--cache-key-headers",
            "X-API-Key",
            "--cache-bypass-headers",
            "authorization,cookie,x-token",
        ],
    );
    let mut c = h.client();
    let path = script(&[("t", "keyed")]);
    let get = |c: &mut Client, key: Option<&str>| {
        let extra: Vec<(&str, &str)> = key.map(|k| ("X-API-Key", k)).into_iter().collect();
        c.get(&path, &extra).text()
    };
    assert_eq!(get(&mut c, Some("alice")), "count 1\n");
    assert_eq!(get(&mut c, Some("bob")), "count 2\n");
    assert_eq!(get(&mut c, None), "count 3\n");
    assert_eq!(get(&mut c, Some("alice")), "count 1\n");
    assert_eq!(get(&mut c, Some("bob")), "count 2\n");
    assert_eq!(get(&mut c, None), "count 3\n");
    assert_eq!(o.count(&path), 3);
    for (name, detail) in [
        ("X-Token", "detail=bypass-header"),
        ("Cookie", "detail=cookie"),
    ] {
        let r = c.get(&path, &[(name, "t=1"), ("X-API-Key", "alice")]);
        assert!(cache_status(&r).contains(detail), "{name}: {r:?}");
    }
    assert_eq!(o.count(&path), 5);
    h.assert_no_errors();
}

/// `--cache PREFIX=TTL` micro-caches one prefix without a config file;
/// the rest of the site is not cached. With a config file it is refused.
#[test]
fn cache_by_prefix_on_the_command_line() {
    let o = origin();
    let url = o.url();
    let h = Hayate::start(BIN, &["--proxy", &url, "--cache", "/script=5s"]);
    let mut c = h.client();
    let cached_path = script(&[("t", "prefix")]);
    for _ in 0..3 {
        assert_eq!(c.get(&cached_path, &[]).text(), "count 1\n");
    }
    for _ in 0..2 {
        let r = c.get("/echo?x=1", &[]);
        assert_eq!(r.status, 200);
        assert_eq!(r.header("cache-status"), None, "{r:?}");
    }
    assert_eq!((o.count(&cached_path), o.count("/echo?x=1")), (1, 2));
    h.assert_no_errors();

    let dir = hayate_testkit::site();
    let file = dir.path().join("h.toml");
    std::fs::write(&file, format!("proxy = \"{url}\"\n")).expect("write");
    let out = std::process::Command::new(BIN)
        .args([
            "--config",
            file.to_str().expect("utf8"),
            "--cache",
            "/script=5s",
        ])
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("without a config file"), "{err}");
}

#[test]
fn credentials_and_cookies_are_never_shared() {
    let o = origin();
    let h = cached(&o, "on", &[]);
    let mut c = h.client();
    let path = script(&[("h", "Cache-Control: max-age=60"), ("t", "auth")]);
    // A request with Authorization bypasses; its answer is not stored.
    let authed = c.get(&path, &[("Authorization", "Bearer secret")]);
    assert!(cache_status(&authed).contains("fwd=request; detail=authorization"));
    let anon = c.get(&path, &[]);
    assert_eq!(anon.text(), "count 2\n", "the authorized answer was shared");
    let with_cookie = c.get(&path, &[("Cookie", "session=1")]);
    assert!(cache_status(&with_cookie).contains("detail=cookie"));
    assert_eq!(with_cookie.text(), "count 3\n");
    assert_eq!(c.get(&path, &[]).text(), "count 2\n");

    // With set-cookie allowed, the response is stored without its cookie:
    // the client that caused the fetch gets it, no one else does.
    let h2 = cached(&o, "on,set-cookie", &[]);
    let mut c2 = h2.client();
    let path = script(&[
        ("h", "Cache-Control: max-age=60"),
        ("h", "Set-Cookie: id=alice"),
        ("t", "cookie"),
    ]);
    let first = c2.get(&path, &[]);
    assert_eq!(first.header("set-cookie"), Some("id=alice"));
    let second = c2.get(&path, &[]);
    assert!(cache_status(&second).contains("hit"));
    assert_eq!(second.header("set-cookie"), None, "{:?}", second.headers);
    assert_eq!(o.count(&path), 1);

    // Authorization may be cached when the route allows and the response
    // says public.
    let h3 = cached(&o, "on,authorization", &[]);
    let mut c3 = h3.client();
    let public = script(&[("h", "Cache-Control: public, max-age=60"), ("t", "pub")]);
    let private = script(&[("h", "Cache-Control: max-age=60"), ("t", "pub")]);
    for p in [&public, &private] {
        c3.get(p, &[("Authorization", "Bearer a")]);
        c3.get(p, &[("Authorization", "Bearer b")]);
    }
    assert_eq!((o.count(&public), o.count(&private)), (1, 2));
}

#[test]
fn vary_keeps_variants_apart() {
    let o = origin();
    let h = cached(&o, "on", &[]);
    let mut c = h.client();
    let path = script(&[
        ("h", "Cache-Control: max-age=60"),
        ("h", "Vary: Accept-Language"),
    ]);
    let en = c.get(&path, &[("Accept-Language", "en")]);
    let fr = c.get(&path, &[("Accept-Language", "fr")]);
    let en2 = c.get(&path, &[("Accept-Language", "EN")]);
    let none = c.get(&path, &[]);
    assert_eq!(en.text(), "count 1\n");
    assert_eq!(fr.text(), "count 2\n");
    assert_eq!(
        en2.text(),
        "count 1\n",
        "case-folded value shares the variant"
    );
    assert_eq!(none.text(), "count 3\n");
    // Accept-Encoding lists that mean the same share a variant.
    let ae = script(&[
        ("h", "Cache-Control: max-age=60"),
        ("h", "Vary: Accept-Encoding"),
    ]);
    c.get(&ae, &[("Accept-Encoding", "gzip, deflate, br")]);
    let same = c.get(&ae, &[("Accept-Encoding", "br,gzip")]);
    assert!(cache_status(&same).contains("hit"), "{same:?}");
    assert_eq!(o.count(&ae), 1);
}

#[test]
fn request_cache_control() {
    let o = origin();
    let h = cached(&o, "on", &[]);
    let mut c = h.client();
    let path = script(&[("h", "Cache-Control: max-age=60"), ("etag", "v1")]);
    c.get(&path, &[]);
    // no-cache: revalidated with the origin (304), served from the store.
    let r = c.get(&path, &[("Cache-Control", "no-cache")]);
    assert_eq!((r.status, r.text()), (200, "count 1\n".to_string()));
    assert!(
        cache_status(&r).contains("fwd=stale; fwd-status=304"),
        "{r:?}"
    );
    assert_eq!(o.count(&path), 2);
    let r = c.get(&path, &[("Pragma", "no-cache")]);
    assert!(cache_status(&r).contains("fwd-status=304"));
    // min-fresh beyond the lifetime also goes to the origin.
    c.get(&path, &[("Cache-Control", "min-fresh=120")]);
    assert_eq!(o.count(&path), 4);
    let hit = c.get(&path, &[("Cache-Control", "max-stale=5, min-fresh=1")]);
    assert!(cache_status(&hit).contains("; hit"));
    // only-if-cached: a stored answer, or 504.
    let r = c.get(&path, &[("Cache-Control", "only-if-cached")]);
    assert_eq!(r.status, 200);
    let missing = script(&[("t", "absent")]);
    let r = c.get(&missing, &[("Cache-Control", "only-if-cached")]);
    assert_eq!(r.status, 504);
    assert_eq!(o.count(&missing), 0);
    // A client's own validator is answered by the cache.
    let r = c.get(&path, &[("If-None-Match", "\"v1\"")]);
    assert_eq!(r.status, 304);
    assert_eq!(r.header("etag"), Some("\"v1\""));
    assert!(age(&r).is_some());
    assert_eq!(o.count(&path), 4);
    h.assert_no_errors();
}

#[test]
fn stale_responses_are_revalidated_and_updated() {
    let o = origin();
    let h = cached(&o, "on", &[]);
    let mut c = h.client();
    let path = script(&[
        ("h", "Cache-Control: max-age=1"),
        ("etag", "e"),
        ("h", "X-Version: 7"),
    ]);
    assert_eq!(c.get(&path, &[]).text(), "count 1\n");
    let r = until_stale(&mut c, &path);
    // The origin answered 304: the stored body, refreshed headers.
    assert_eq!(r.text(), "count 1\n");
    assert!(
        cache_status(&r).contains("fwd=stale; fwd-status=304"),
        "{r:?}"
    );
    assert_eq!(r.header("x-version"), Some("7"));
    let r = c.get(&path, &[]);
    assert!(cache_status(&r).contains("; hit"), "{r:?}");
    assert_eq!(o.count(&path), 2);
}

/// `t` seconds from now as an HTTP-date (negative: in the past).
fn http_date(t: i64) -> String {
    let now = SystemTime::now();
    let d = Duration::from_secs(t.unsigned_abs());
    httpdate::fmt_http_date(if t < 0 { now - d } else { now + d })
}

/// The Cache-Status `ttl`.
fn ttl(r: &Response) -> Option<i64> {
    cache_status(r)
        .split("; ")
        .find_map(|p| p.strip_prefix("ttl="))
        .and_then(|t| t.parse().ok())
}

/// RFC 9110 §6.6.1 and RFC 9111 §4.2.3 across a clock offset: clients get
/// the origin's Date on the miss and on every hit, and the age counts from
/// it. An origin whose clock is 100 s behind makes a max-age=60 response
/// stale on arrival; one 1000 s ahead never makes a response younger than
/// zero, and its Expires counts from its own Date (30 s, not 1030).
#[test]
fn the_origins_date_is_kept_and_ages_responses_across_a_clock_offset() {
    let o = origin();
    let h = cached(&o, "on", &[]);
    let mut c = h.client();

    let behind = http_date(-100);
    let path = script(&[
        ("h", &format!("Date: {behind}")),
        ("h", "Cache-Control: max-age=60"),
    ]);
    let r = c.get(&path, &[]);
    assert_eq!((r.header("date"), r.count("date")), (Some(&behind[..]), 1));
    assert!(age(&r).is_some_and(|a| (100..=102).contains(&a)), "{r:?}");
    assert!(ttl(&r).is_some_and(|t| t <= -40), "{r:?}");
    let r = c.get(&path, &[]);
    assert!(
        cache_status(&r).contains("fwd=stale"),
        "stale on arrival: {r:?}"
    );
    assert_eq!(o.count(&path), 2);

    let ahead = http_date(1000);
    let path = script(&[
        ("h", &format!("Date: {ahead}")),
        ("h", &format!("Expires: {}", http_date(1030))),
    ]);
    let miss = c.get(&path, &[]);
    assert_eq!(miss.header("date"), Some(&ahead[..]));
    assert_eq!(age(&miss), None, "apparent age is zero: {miss:?}");
    assert!(
        ttl(&miss).is_some_and(|t| (29..=30).contains(&t)),
        "{miss:?}"
    );
    for _ in 0..2 {
        let hit = c.get(&path, &[]);
        assert!(fresh_hit(&hit), "{hit:?}");
        assert_eq!(
            (hit.header("date"), hit.count("date")),
            (Some(&ahead[..]), 1)
        );
        assert!(age(&hit).is_some_and(|a| a <= 1), "{hit:?}");
        assert!(ttl(&hit).is_some_and(|t| (28..=30).contains(&t)), "{hit:?}");
    }
    assert_eq!(o.count(&path), 1);

    // An origin that sends no Date: the time hayate received the response,
    // the same on the miss and on later hits.
    let path = script(&[("h", "Cache-Control: max-age=60"), ("t", "no-date")]);
    let miss = c.get(&path, &[]);
    let hit = c.get(&path, &[]);
    assert!(fresh_hit(&hit), "{hit:?}");
    assert!(miss.header("date").is_some());
    assert_eq!(
        (hit.header("date"), hit.count("date")),
        (miss.header("date"), 1)
    );

    // Through the proxy without a cache, and with a list Age from an
    // inner cache: the Date stays, the first Age member counts.
    let path = script(&[
        ("h", &format!("Date: {behind}")),
        ("h", "Age: 7200, 0"),
        ("h", "Cache-Control: max-age=60"),
    ]);
    let r = c.get(&path, &[]);
    assert_eq!(r.header("date"), Some(&behind[..]));
    assert!(age(&r).is_some_and(|a| (7200..=7202).contains(&a)), "{r:?}");
    assert_eq!(r.count("age"), 1);
    h.assert_no_errors();
}

/// §4.3.4: a 304 that revalidates a stored response brings its own Date,
/// which the refreshed response takes (and its age counts from).
#[test]
fn a_304_refreshes_the_stored_date() {
    let o = origin();
    let h = cached(&o, "on", &[]);
    let mut c = h.client();
    let old = http_date(-100);
    let new = http_date(0);
    let path = script(&[
        ("h", &format!("Date: {old}")),
        ("h", "Cache-Control: max-age=60"),
        ("etag", "d"),
        ("h304", &format!("Date: {new}")),
    ]);
    let r = c.get(&path, &[]);
    assert_eq!(r.header("date"), Some(&old[..]));
    // Stale on arrival: the next request revalidates, the 304 is recent.
    let r = c.get(&path, &[]);
    assert!(
        cache_status(&r).contains("fwd=stale; fwd-status=304"),
        "{r:?}"
    );
    assert_eq!((r.header("date"), r.count("date")), (Some(&new[..]), 1));
    assert!(age(&r).is_some_and(|a| a <= 1), "{r:?}");
    let hit = c.get(&path, &[]);
    assert!(fresh_hit(&hit), "{hit:?}");
    assert_eq!(hit.header("date"), Some(&new[..]));
    assert_eq!(o.count(&path), 2);
    h.assert_no_errors();
}

/// RFC 9213: CDN-Cache-Control and Hayate-Cache-Control decide in place of
/// Cache-Control; CDN-Cache-Control is forwarded, Hayate-Cache-Control
/// (for hayate alone) never reaches a client; an invalid one is ignored.
#[test]
fn targeted_cache_control_takes_precedence() {
    let o = origin();
    let h = cached(&o, "on", &[]);
    let mut c = h.client();
    let cdn = script(&[
        ("h", "Cache-Control: no-store"),
        ("h", "CDN-Cache-Control: max-age=60"),
    ]);
    let own = script(&[
        ("h", "Cache-Control: private, no-cache"),
        ("h", "Hayate-Cache-Control: max-age=60"),
        ("h", "CDN-Cache-Control: no-store"),
    ]);
    let invalid = script(&[
        ("h", "Cache-Control: no-store"),
        ("h", "Hayate-Cache-Control: Max-Age=60"),
    ]);
    for path in [&cdn, &own] {
        for i in 0..3 {
            let r = c.get(path, &[]);
            assert_eq!(r.text(), "count 1\n", "{path} {i}: {r:?}");
            assert!(i == 0 || fresh_hit(&r), "{r:?}");
            assert_eq!(r.header("hayate-cache-control"), None, "{r:?}");
            assert!(r.header("cache-control").is_some(), "forwarded: {r:?}");
            assert!(r.header("cdn-cache-control").is_some(), "forwarded: {r:?}");
        }
    }
    // Not stored, then hit-for-miss (a bypass): never shown either way.
    for detail in ["detail=no-store", "detail=hit-for-miss"] {
        let r = c.get(&invalid, &[]);
        assert!(cache_status(&r).contains(detail), "{r:?}");
        assert_eq!(r.header("hayate-cache-control"), None, "{r:?}");
    }
    assert_eq!((o.count(&cdn), o.count(&own), o.count(&invalid)), (1, 1, 2));
    h.assert_no_errors();
}

/// RFC 9213 §2.1: a targeted field whose max-age is a String (quoted),
/// not an Integer, is invalid and ignored whole, so Cache-Control decides:
/// `no-store` wins (cache-tests' cdn-max-age-quoted). It was obeyed, and
/// the response stored for 10,000 s.
#[test]
fn a_targeted_field_with_a_quoted_max_age_is_ignored_whole() {
    let o = origin();
    let h = cached(&o, "on", &[]);
    let mut c = h.client();
    for targeted in [
        "CDN-Cache-Control: max-age=\"10000\"",
        "Hayate-Cache-Control: s-maxage=1.5",
    ] {
        let path = script(&[("h", "Cache-Control: no-store"), ("h", targeted)]);
        for _ in 0..2 {
            let r = c.get(&path, &[]);
            assert!(!fresh_hit(&r), "{targeted}: {r:?}");
            assert!(!cache_status(&r).contains("stored"), "{targeted}: {r:?}");
        }
        assert_eq!(o.count(&path), 2, "{targeted}: both reached the origin");
    }
    h.assert_no_errors();
}

/// §5.2.2.3: must-understand with no-store is stored for a status code
/// whose caching rules hayate implements, never for one it does not.
#[test]
fn must_understand_stores_only_understood_status_codes() {
    let o = origin();
    let h = cached(&o, "on", &[]);
    let mut c = h.client();
    let mu = ("h", "Cache-Control: must-understand, no-store, max-age=60");
    let known = script(&[mu, ("status", "404")]);
    let unknown = script(&[mu, ("status", "299")]);
    for detail in ["detail=must-understand", "detail=hit-for-miss"] {
        assert_eq!(c.get(&known, &[]).status, 404);
        let r = c.get(&unknown, &[]);
        assert_eq!(r.status, 299);
        assert!(cache_status(&r).contains(detail), "{r:?}");
    }
    assert_eq!((o.count(&known), o.count(&unknown)), (1, 2));
    h.assert_no_errors();
}

#[test]
fn a_failed_revalidation_keeps_the_stored_response() {
    let o = origin();
    let h = cached(&o, "on", &[]);
    let mut c = h.client();
    let path = script(&[
        ("h", "Cache-Control: max-age=1"),
        ("etag", "e1"),
        ("fail_at", "2"),
    ]);
    assert_eq!(c.get(&path, &[]).text(), "count 1\n");
    // The revalidation meets a 503: passed on (no stale-if-error here)...
    let r = until_stale(&mut c, &path);
    assert_eq!(r.status, 503);
    assert!(cache_status(&r).contains("fwd-status=503"), "{r:?}");
    // ...but the stored response stays: the next request revalidates it
    // (304) instead of fetching it whole, and is not hit-for-miss.
    let r = c.get(&path, &[]);
    assert_eq!((r.status, r.text()), (200, "count 1\n".to_string()));
    assert!(
        cache_status(&r).contains("fwd=stale; fwd-status=304"),
        "{r:?}"
    );
    assert_eq!(o.count(&path), 3);
}

#[test]
fn unsafe_methods_invalidate() {
    let o = origin();
    let h = cached(&o, "on", &[]);
    let mut c = h.client();
    let a = script(&[("h", "Cache-Control: max-age=60"), ("t", "a")]);
    let b = script(&[("h", "Cache-Control: max-age=60"), ("t", "b")]);
    c.get(&a, &[]);
    c.get(&b, &[]);
    let r = c.request("DELETE", &b, &[]);
    assert_eq!(r.status, 200);
    assert!(cache_status(&r).contains("fwd=method"));
    let r = c.request("POST", &a, &[("Content-Length", "0")]);
    assert_eq!(r.status, 200);
    assert_eq!(c.get(&a, &[]).text(), "count 3\n");
    assert_eq!(c.get(&b, &[]).text(), "count 3\n");
    // A failed unsafe request to the same URL invalidates nothing (the
    // origin answers its second request, the PUT, with a 503).
    let fail = script(&[
        ("h", "Cache-Control: max-age=60"),
        ("t", "f"),
        ("fail_at", "2"),
    ]);
    c.get(&fail, &[]);
    let r = c.request("PUT", &fail, &[("Content-Length", "0")]);
    assert_eq!(r.status, 503);
    assert!(cache_status(&c.get(&fail, &[])).contains("hit"));
    assert_eq!(o.count(&fail), 2);
}

#[test]
fn a_fill_on_its_way_during_an_invalidation_or_a_purge_is_not_stored() {
    let o = origin();
    let sock = control_path();
    let h = cached(&o, "on", &["--control", &sock]);
    // The origin holds its answers to these until the URL has been
    // invalidated (by a POST elsewhere whose Location names it) or purged.
    // The answer on its way predates that, so it reaches its client but is
    // not kept.
    let target = |tag: &str| {
        script(&[("h", "Cache-Control: max-age=60")]).replace("/script", &format!("/script/{tag}"))
    };
    let fill = |path: String| {
        let addr = h.addr;
        std::thread::spawn(move || {
            let r = Client::connect(addr).get(&path, &[]);
            assert_eq!(r.status, 200);
        })
    };
    let invalidated = target("posted");
    let held = o.hold(&invalidated);
    let filling = fill(invalidated.clone());
    assert!(o.wait_for(&invalidated, 1, WAIT), "the fill never left");
    let post = script(&[("h", &format!("Location: {invalidated}"))]);
    let r = h
        .client()
        .request("POST", &post, &[("Content-Length", "0")]);
    assert_eq!(r.status, 200);
    drop(held);
    filling.join().expect("fill");

    let purged = target("purged");
    let held = o.hold(&purged);
    let filling = fill(purged.clone());
    assert!(o.wait_for(&purged, 1, WAIT), "the fill never left");
    assert_eq!(purge(&sock, &["/script/purged"]), "purged 0\n");
    drop(held);
    filling.join().expect("fill");

    let mut c = h.client();
    for path in [&invalidated, &purged] {
        let r = c.get(path, &[]);
        assert!(
            cache_status(&r).contains("; fwd=uri-miss"),
            "{path}: {}",
            cache_status(&r)
        );
        assert_eq!(o.count(path), 2, "{path}");
        // This one was requested after: stored.
        assert!(cache_status(&c.get(path, &[])).contains("; hit"));
    }
}

#[test]
fn location_targets_are_invalidated_too() {
    let o = origin();
    let h = cached(&o, "on", &[]);
    let mut c = h.client();
    let target = script(&[("h", "Cache-Control: max-age=60"), ("t", "loc")]);
    c.get(&target, &[]);
    let post = script(&[("h", &format!("Location: {target}"))]);
    let r = c.request("POST", &post, &[("Content-Length", "0")]);
    assert_eq!(r.header("location"), Some(target.as_str()));
    assert_eq!(c.get(&target, &[]).text(), "count 2\n");
}

#[test]
fn head_is_answered_from_a_stored_get() {
    let o = origin();
    let h = cached(&o, "on", &[]);
    let mut c = h.client();
    let path = script(&[("h", "Cache-Control: max-age=60")]);
    let get = c.get(&path, &[]);
    let head = c.request("HEAD", &path, &[]);
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
    assert_eq!(
        head.header("content-length"),
        Some(get.body.len().to_string().as_str())
    );
    assert!(cache_status(&head).contains("hit"));
    // A HEAD miss goes through and stores nothing.
    let other = script(&[("h", "Cache-Control: max-age=60"), ("t", "head")]);
    c.request("HEAD", &other, &[]);
    assert_eq!(c.get(&other, &[]).text(), "count 2\n");
    // A Range gets its 206 from the stored response, never the whole of it.
    let r = c.get(&path, &[("Range", "bytes=0-1")]);
    assert_eq!((r.status, r.text()), (206, "co".to_string()), "{r:?}");
    assert!(fresh_hit(&r), "{r:?}");
}

#[test]
fn concurrent_misses_make_one_origin_request() {
    let o = origin();
    let h = cached(&o, "on", &[]);
    let path = script(&[("h", "Cache-Control: max-age=60"), ("ms", "300")]);
    let addr = h.addr;
    let clients: Vec<_> = (0..100)
        .map(|_| {
            let path = path.clone();
            std::thread::spawn(move || Client::connect(addr).get(&path, &[]))
        })
        .collect();
    let answers: Vec<Response> = clients
        .into_iter()
        .map(|t| t.join().expect("client"))
        .collect();
    assert!(answers
        .iter()
        .all(|r| r.status == 200 && r.text() == "count 1\n"));
    assert_eq!(o.count(&path), 1);
    let collapsed = answers
        .iter()
        .filter(|r| cache_status(r).contains("collapsed") || cache_status(r).contains("hit"))
        .count();
    assert!(collapsed >= 90, "{collapsed} of 100 were coalesced");
    h.assert_no_errors();
}

#[test]
fn waiters_get_the_body_as_it_arrives() {
    // The origin sends half of a storable body, pauses, then the rest. Every
    // request that waits on the fill (and the one that leads it) must see
    // its first bytes before the pause ends, not the whole body after it.
    const N: usize = 200_000;
    const STALL: Duration = Duration::from_millis(800);
    let o = origin();
    let h = cached(&o, "5s", &[]);
    let path = format!("/bytes?n={N}&stall_ms={}", STALL.as_millis());
    let addr = h.addr;
    let clients: Vec<_> = (0..10)
        .map(|_| {
            let path = path.clone();
            std::thread::spawn(move || {
                let mut c = Client::connect(addr);
                c.send(format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").as_bytes());
                let mut first: Option<Instant> = None;
                let mut body = Vec::with_capacity(N);
                let mut r = c.read_response_with(false, &mut |piece| {
                    first.get_or_insert_with(Instant::now);
                    body.extend_from_slice(piece);
                });
                let last = Instant::now();
                r.body = body;
                (r, first.expect("a body"), last)
            })
        })
        .collect();
    let expected = big_bytes(N);
    let mut collapsed = 0;
    for t in clients {
        let (r, first, last) = t.join().expect("client");
        assert_eq!(r.status, 200);
        assert!(r.body == expected, "body differs");
        // Streamed: the first half came a pause before the end.
        assert!(
            last.duration_since(first) >= STALL / 2,
            "first bytes only {:?} before the end: not streamed ({})",
            last.duration_since(first),
            cache_status(&r)
        );
        if cache_status(&r).contains("collapsed") {
            collapsed += 1;
        }
    }
    assert_eq!(o.count(&path), 1, "one origin request");
    assert!(collapsed >= 5, "{collapsed} of 10 waited on the fill");
    // Stored whole once it arrived.
    let r = Client::connect(addr).get(&path, &[]);
    assert!(cache_status(&r).contains("hit"), "{r:?}");
    assert!(r.body == expected);
    h.assert_no_errors();
}

#[test]
fn a_fill_whose_upstream_body_fails_cuts_its_readers_and_stores_nothing() {
    const N: usize = 200_000;
    let o = origin();
    let h = cached(&o, "5s", &["--proxy-timeout", "300ms"]);
    let path = format!("/bytes?n={N}&stall_ms=2000");
    let addr = h.addr;
    let clients: Vec<_> = (0..5)
        .map(|_| {
            let path = path.clone();
            std::thread::spawn(move || {
                let mut c = Client::connect(addr);
                c.send(format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").as_bytes());
                c.read_to_close().len()
            })
        })
        .collect();
    for t in clients {
        assert!(
            t.join().expect("client") < N,
            "a cut body must not look whole"
        );
    }
    assert_eq!(o.count(&path), 1);
    // Nothing was stored: the next request goes to the origin again.
    let mut c = Client::connect(addr);
    c.send(format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").as_bytes());
    let _ = c.read_to_close();
    assert_eq!(o.count(&path), 2);
}

#[test]
fn an_uncacheable_answer_releases_the_waiters() {
    let o = origin();
    // A lock timeout far beyond the test: waiters must be woken by the
    // answer, not by the timeout.
    let h = cached(&o, "on", &["--cache-lock-timeout", "60s"]);
    let path = script(&[("h", "Cache-Control: no-store"), ("ms", "300")]);
    let addr = h.addr;
    let started = Instant::now();
    let clients: Vec<_> = (0..20)
        .map(|_| {
            let path = path.clone();
            std::thread::spawn(move || Client::connect(addr).get(&path, &[]).status)
        })
        .collect();
    for t in clients {
        assert_eq!(t.join().expect("client"), 200);
    }
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "waiters were not released"
    );
    assert_eq!(o.count(&path), 20);
    // Now marked hit-for-miss: requests pass straight through.
    let r = Client::connect(addr).get(&path, &[]);
    assert!(cache_status(&r).contains("hit-for-miss"), "{r:?}");
}

#[test]
fn stale_while_revalidate_serves_stale_and_refreshes_once() {
    let o = origin();
    let h = cached(&o, "on", &[]);
    let mut c = h.client();
    let path = script(&[("h", "Cache-Control: max-age=1, stale-while-revalidate=30")]);
    c.get(&path, &[]);
    // The origin holds the refresh, so stale hits arrive while it runs.
    let held = o.hold(&path);
    let stale = until_stale(&mut c, &path);
    assert_eq!(stale.text(), "count 1\n");
    assert!(
        cache_status(&stale).contains("detail=stale-while-revalidate"),
        "{stale:?}"
    );
    assert!(o.wait_for(&path, 2, WAIT), "no refresh");
    // Stale hits meanwhile start no other one.
    for _ in 0..3 {
        let r = c.get(&path, &[]);
        assert_eq!(r.text(), "count 1\n");
        assert!(
            cache_status(&r).contains("detail=stale-while-revalidate"),
            "{r:?}"
        );
    }
    drop(held);
    // The refresh lands in the background.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let r = c.get(&path, &[]);
        if r.text() == "count 2\n" {
            assert!(cache_status(&r).contains("; hit"), "{r:?}");
            break;
        }
        assert!(Instant::now() < deadline, "never refreshed: {r:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(o.count(&path), 2);
}

#[test]
fn stale_if_error_serves_stale_when_the_origin_fails() {
    let o = origin();
    let h = cached(&o, "on", &[]);
    let mut c = h.client();
    let path = script(&[("h", "Cache-Control: max-age=1, stale-if-error=60")]);
    let strict = script(&[(
        "h",
        "Cache-Control: max-age=1, stale-if-error=60, must-revalidate",
    )]);
    c.get(&path, &[]);
    c.get(&strict, &[]);
    drop(o);
    let r = until_stale(&mut c, &path);
    assert_eq!((r.status, r.text()), (200, "count 1\n".to_string()));
    assert!(
        cache_status(&r).contains("fwd=stale; fwd-status=502"),
        "{r:?}"
    );
    assert!(cache_status(&r).contains("detail=stale-if-error"), "{r:?}");
    assert_eq!(
        until_stale(&mut c, &strict).status,
        502,
        "must-revalidate forbids stale"
    );
}

/// What a [`failing_origin`] does after its first answer.
#[derive(Debug, Clone, Copy)]
enum Failing {
    /// Reads the first byte of a request, then closes with the rest unread
    /// (the kernel answers with a reset).
    Reset,
    /// Reads the request and never answers.
    Silent,
}

/// An origin on a raw socket whose first request gets a response fresh for
/// one second with `stale-if-error=60`, and whose later requests fail as
/// `how` says. Its address, `http://127.0.0.1:PORT`.
fn failing_origin(how: Failing) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for (n, conn) in listener.incoming().enumerate() {
            let Ok(mut conn) = conn else { return };
            let mut buf = [0u8; 4096];
            if n == 0 {
                let _ = conn.read(&mut buf);
                let _ = conn.write_all(
                    b"HTTP/1.1 200 OK\r\nCache-Control: max-age=1, stale-if-error=60\r\n\
                      Content-Length: 6\r\nConnection: close\r\n\r\nfresh\n",
                );
                continue;
            }
            match how {
                Failing::Reset => {
                    let _ = conn.read(&mut buf[..1]);
                    drop(conn);
                }
                Failing::Silent => {
                    let _ = conn.read(&mut buf);
                    held.push(conn);
                }
            }
        }
    });
    url
}

/// RFC 5861 stale-if-error when the origin cannot answer at all: a
/// connection refused (its process gone), reset before the response, or
/// no response within `proxy_timeout` all count as errors.
#[test]
fn stale_if_error_also_when_the_origin_is_unreachable() {
    for (how, fwd_status) in [(Failing::Reset, 502), (Failing::Silent, 504)] {
        let url = failing_origin(how);
        let control = control_path();
        let h = Hayate::start(
            BIN,
            &[
                "--proxy",
                &url,
                "--cache",
                "on",
                "--proxy-timeout",
                "300ms",
                "--control",
                &control,
            ],
        );
        let mut c = h.client();
        assert_eq!(c.get("/x", &[]).text(), "fresh\n");
        let r = until_stale(&mut c, "/x");
        assert_eq!(
            (r.status, r.text()),
            (200, "fresh\n".to_string()),
            "{how:?}"
        );
        let cs = cache_status(&r);
        assert!(
            cs.contains(&format!("fwd=stale; fwd-status={fwd_status}")),
            "{how:?}: {cs}"
        );
        assert!(cs.contains("detail=stale-if-error"), "{how:?}: {cs}");
    }
}

/// RFC 9110 §14 from the store: a Range request for a fresh stored 200 is
/// answered 206 (one range, or multipart/byteranges), 416 when no range
/// fits, and in whole when If-Range does not match strongly; a Range
/// request that misses goes to the origin as it is.
#[test]
fn ranges_are_answered_from_the_store() {
    let o = origin();
    let h = cached(&o, "on", &[]);
    let mut c = h.client();
    let lm = http_date(-3600);
    let path = script(&[
        ("h", "Cache-Control: max-age=60"),
        ("h", &format!("Last-Modified: {lm}")),
        ("etag", "r"),
        ("body", "0123456789abcdef"),
    ]);
    // A Range on a miss is forwarded, and nothing is stored by it.
    let r = c.get(&path, &[("Range", "bytes=2-5")]);
    assert!(
        cache_status(&r).contains("fwd=request; detail=range"),
        "{r:?}"
    );
    assert_eq!(c.get(&path, &[]).text(), "0123456789abcdef");
    assert_eq!(o.count(&path), 2);

    let r = c.get(&path, &[("Range", "bytes=2-5")]);
    assert_eq!((r.status, r.text()), (206, "2345".to_string()), "{r:?}");
    assert_eq!(r.header("content-range"), Some("bytes 2-5/16"));
    assert!(fresh_hit(&r) && age(&r).is_some(), "{r:?}");
    assert_eq!(r.header("etag"), Some("\"r\""));

    let r = c.get(&path, &[("Range", "bytes=-3")]);
    assert_eq!((r.status, r.text()), (206, "def".to_string()));

    let r = c.get(&path, &[("Range", "bytes=0-1, 10-11")]);
    assert_eq!(r.status, 206);
    let ct = r.header("content-type").unwrap_or_default();
    assert!(ct.starts_with("multipart/byteranges; boundary="), "{ct}");
    let text = r.text();
    for part in [
        "Content-Type: text/plain\r\nContent-Range: bytes 0-1/16\r\n\r\n01\r\n",
        "Content-Type: text/plain\r\nContent-Range: bytes 10-11/16\r\n\r\nab\r\n",
    ] {
        assert!(text.contains(part), "{text:?}");
    }

    let r = c.get(&path, &[("Range", "bytes=100-200")]);
    assert_eq!(r.status, 416);
    assert_eq!(r.header("content-range"), Some("bytes */16"));

    // If-Range: a strong match (entity-tag, or a Last-Modified that is a
    // strong validator) gets the range; anything else the whole response.
    for (if_range, want) in [
        ("\"r\"", 206),
        (lm.as_str(), 206),
        ("\"other\"", 200),
        ("W/\"r\"", 200),
        ("Thu, 01 Jan 2015 00:00:00 GMT", 200),
    ] {
        let r = c.get(&path, &[("Range", "bytes=2-5"), ("If-Range", if_range)]);
        assert_eq!(r.status, want, "If-Range {if_range}: {r:?}");
        assert!(fresh_hit(&r), "{r:?}");
    }
    // The client's own validator still wins: 304.
    let r = c.get(&path, &[("Range", "bytes=2-5"), ("If-None-Match", "\"r\"")]);
    assert_eq!(r.status, 304);
    assert_eq!(o.count(&path), 2);
    h.assert_no_errors();
}

#[test]
fn bodies_beyond_the_object_cap_pass_through_whole() {
    let o = origin();
    let h = cached(&o, "on", &["--cache-max-object", "16KiB"]);
    let mut c = h.client();
    for chunked in ["0", "1"] {
        let path = script(&[
            ("h", "Cache-Control: max-age=60"),
            ("n", "300000"),
            ("chunked", chunked),
        ]);
        for i in 0..2 {
            let r = c.get(&path, &[]);
            assert!(r.body == big_bytes(300_000), "chunked={chunked}");
            let cs = cache_status(&r);
            // A chunked body's size is known only at its end: the first
            // streams as a miss, unstored, and marks the URL hit-for-miss.
            let streamed = chunked == "1" && i == 0 && !cs.contains("stored");
            assert!(
                cs.contains("detail=too-large") || cs.contains("hit-for-miss") || streamed,
                "{cs}"
            );
        }
        assert_eq!(o.count(&path), 2);
    }
    let small = script(&[
        ("h", "Cache-Control: max-age=60"),
        ("n", "10000"),
        ("chunked", "1"),
    ]);
    assert_eq!(c.get(&small, &[]).body, big_bytes(10_000));
    let hit = c.get(&small, &[]);
    assert_eq!(hit.body, big_bytes(10_000));
    assert_eq!(hit.header("content-length"), Some("10000"));
    h.assert_no_errors();
}

#[test]
fn access_log_records_the_cache_status() {
    let o = origin();
    let h = cached(&o, "on", &[]);
    let mut c = h.client();
    let path = script(&[("h", "Cache-Control: max-age=60")]);
    c.get(&path, &[]);
    c.get(&path, &[]);
    drop(c);
    let lines = h.stdout_lines(Duration::from_secs(3));
    let words: Vec<&str> = lines
        .iter()
        .filter_map(|l| l.rsplit_once(" cache=").map(|(_, w)| w))
        .collect();
    assert_eq!(words, ["MISS", "HIT"], "{lines:?}");
}

#[test]
fn purge_by_url_and_by_tag() {
    let o = origin();
    let sock = control_path();
    let h = cached(&o, "on", &["--control", &sock]);
    let mut c = h.client();
    let a1 = script(&[
        ("h", "Cache-Control: max-age=60"),
        ("h", "Surrogate-Key: red"),
    ])
    .replace("/script", "/script/a");
    let a2 = format!("{a1}&v=2");
    let b = script(&[
        ("h", "Cache-Control: max-age=60"),
        ("h", "Surrogate-Key: blue red"),
    ])
    .replace("/script", "/script/b");
    let d = script(&[
        ("h", "Cache-Control: max-age=60"),
        ("h", "Surrogate-Key: green"),
    ])
    .replace("/script", "/script/d");
    let hit = |c: &mut Client, p: &str| cache_status(&c.get(p, &[])).contains("; hit");
    for p in [&a1, &a2, &b, &d] {
        c.get(p, &[]);
        assert!(hit(&mut c, p));
    }
    // By URL: the path with every query string, for any host.
    assert_eq!(purge(&sock, &["/script/a"]), "purged 2\n");
    assert!(!hit(&mut c, &a1) && !hit(&mut c, &a2));
    assert!(hit(&mut c, &b));
    // By tag: every response naming it.
    assert_eq!(purge(&sock, &["--tag", "red"]), "purged 3\n");
    assert!(!hit(&mut c, &b) && !hit(&mut c, &a1));
    assert!(hit(&mut c, &d));
    assert_eq!(purge(&sock, &["http://test/script/d"]), "purged 1\n");
    assert!(!hit(&mut c, &d));
    assert_eq!(purge(&sock, &["http://elsewhere/script/d"]), "purged 0\n");
    h.assert_no_errors();
}

#[test]
fn metrics_and_purge_on_the_admin_listener() {
    let o = origin();
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("admin.sock");
    let h = cached(
        &o,
        "on",
        &["--admin", &format!("unix:{}", socket.display())],
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while !socket.exists() {
        assert!(Instant::now() < deadline, "{}", h.stderr());
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut c = h.client();
    let path = script(&[
        ("h", "Cache-Control: max-age=60"),
        ("h", "Surrogate-Key: k1"),
    ]);
    c.get(&path, &[]);
    c.get(&path, &[]);
    c.get(&path, &[]);
    let metrics = unix_request(&socket, "GET", "/metrics");
    for line in [
        "hayate_cache_hits_total 2",
        "hayate_cache_misses_total 1",
        "hayate_cache_stores_total 1",
        "hayate_cache_entries 1",
        "# TYPE hayate_cache_bytes gauge",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
    }
    let answer = unix_request(&socket, "POST", "/purge?tag=k1");
    assert!(answer.ends_with("purged 1\n"), "{answer}");
    assert_eq!(c.get(&path, &[]).text(), "count 2\n");
    let answer = unix_request(&socket, "POST", "/purge?url=%2Fscript");
    assert!(answer.ends_with("purged 1\n"), "{answer}");
    assert!(unix_request(&socket, "POST", "/purge").starts_with("HTTP/1.1 400"));
}

#[test]
fn compressed_variants_are_stored_so_hits_cost_no_compression() {
    use hayate_compress::encode::decompress;
    use hayate_core::Coding;
    let o = origin();
    let h = cached(&o, "5s", &[]);
    let mut c = h.client();
    let path = "/text?n=20000";
    let want = hayate_testkit::text_bytes(20_000);
    let decode = |r: &Response| {
        let coding = r.header("content-encoding").map_or(Coding::Identity, |t| {
            Coding::from_token(t.as_bytes()).expect("coding")
        });
        decompress(coding, &r.body).expect("decodes")
    };
    // Accept-Encoding is normalized to the set of codings accepted: lists
    // naming the same set share a stored variant.
    for (ae, coding, status) in [
        ("br", Some("br"), "fwd=uri-miss"),
        ("br;q=0.9", Some("br"), "; hit"),
        ("gzip, deflate, br", Some("br"), "fwd=uri-miss"),
        ("br, gzip", Some("br"), "; hit"),
        ("gzip", Some("gzip"), "fwd=uri-miss"),
        ("gzip;q=1", Some("gzip"), "; hit"),
        ("identity", None, "fwd=uri-miss"),
    ] {
        let r = c.get(path, &[("Accept-Encoding", ae)]);
        assert_eq!(
            r.header("content-encoding"),
            coding,
            "{ae}: {:?}",
            r.headers
        );
        assert!(
            cache_status(&r).contains(status),
            "{ae}: {}",
            cache_status(&r)
        );
        assert_eq!(r.header("vary"), Some("Accept-Encoding"), "{ae}");
        assert_eq!(decode(&r), want, "{ae}");
    }
    assert_eq!(o.count(path), 4);
}

const PRELOAD: &str = "</style.css>; rel=preload; as=style";

#[test]
fn early_hints_pass_on_a_miss_and_are_never_stored() {
    let o = origin();
    let h = cached(&o, "on", &[]);
    let path = script(&[
        ("h", "Cache-Control: max-age=60"),
        ("early", &format!("Link: {PRELOAD}")),
        ("body", "page"),
    ]);
    let mut c = h.client();
    c.send(format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").as_bytes());
    let r = c.read_response(false);
    assert_eq!((r.status, r.header("link")), (103, Some(PRELOAD)), "{r:?}");
    let r = c.read_response(false);
    assert_eq!(r.status, 200, "{r:?}");
    assert!(cache_status(&r).contains("stored"), "{r:?}");
    // The hit is the stored response alone: no 103 first, no trace of it.
    c.send(format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").as_bytes());
    let r = c.read_response(false);
    assert_eq!((r.status, r.text()), (200, "page".to_string()), "{r:?}");
    assert!(fresh_hit(&r), "{r:?}");
    assert_eq!(r.header("link"), None, "{r:?}");
    assert_eq!(o.count(&path), 1);
    h.assert_no_errors();
}

/// The first `n` bytes of a response on `c`, read as they come.
fn read_head_and(c: &mut Client, n: usize) -> Vec<u8> {
    let mut raw = Vec::new();
    while !raw.ends_with(b"\r\n\r\n") {
        raw.extend(c.read_bytes(1));
    }
    raw.extend(c.read_bytes(n));
    raw
}

#[test]
fn a_waiter_reads_a_chunked_fill_as_it_arrives_without_its_interim_responses() {
    const N: usize = 100_000;
    let o = origin();
    let h = cached(&o, "on", &[]);
    let path = script(&[
        ("h", "Cache-Control: max-age=60"),
        ("early", &format!("Link: {PRELOAD}")),
        ("n", &N.to_string()),
        ("chunked", "1"),
    ]);
    // The origin sends the head and the first 64 KiB, then waits for the
    // test.
    let held = o.hold_body(&path);
    let get = format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n");
    let mut leader = h.client();
    leader.send(get.as_bytes());
    let leading = std::thread::spawn(move || {
        let hint = leader.read_response(false);
        (hint, leader.read_response(false))
    });
    // The fill is registered before its request goes upstream: from here
    // on, a request for the key waits on it.
    assert!(o.wait_for(&path, 1, WAIT));
    let mut waiter = h.client();
    waiter.send(get.as_bytes());
    let mut held = Some(held);
    let mut body = Vec::new();
    let r = waiter.read_response_with(false, &mut |piece| {
        // The first bytes came while the rest is held: let it go.
        drop(held.take());
        body.extend_from_slice(piece);
    });
    assert_eq!(r.status, 200, "a waiter gets no interim response: {r:?}");
    assert!(cache_status(&r).contains("collapsed"), "{r:?}");
    assert_eq!(r.header("transfer-encoding"), Some("chunked"));
    assert!(body == big_bytes(N), "body differs");
    assert_eq!(o.holds_expired(), 0, "the waiter waited for the whole body");
    let (hint, r) = leading.join().expect("leader");
    assert_eq!(hint.status, 103);
    assert!(r.status == 200 && r.body == big_bytes(N), "{}", r.status);
    assert_eq!(o.count(&path), 1);
    // Stored whole at its end.
    let r = h.client().get(&path, &[]);
    assert!(
        fresh_hit(&r) && r.body == big_bytes(N),
        "{}",
        cache_status(&r)
    );
    h.assert_no_errors();
}

#[test]
fn a_chunked_fill_that_fails_midway_cuts_its_waiters() {
    const N: usize = 100_000;
    let o = origin();
    let h = cached(&o, "on", &[]);
    let path = script(&[
        ("h", "Cache-Control: max-age=60"),
        ("n", &N.to_string()),
        ("chunked", "1"),
        ("cut", "1"),
    ]);
    let held = o.hold_body(&path);
    let get = format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n");
    let mut leader = h.client();
    leader.send(get.as_bytes());
    assert!(o.wait_for(&path, 1, WAIT));
    let mut waiter = h.client();
    waiter.send(get.as_bytes());
    // The head and the first chunk's size line and byte, then the origin
    // lets go and cuts the body.
    let mut raw = read_head_and(&mut waiter, 8);
    drop(held);
    raw.extend(waiter.read_to_close());
    let leader_raw = leader.read_to_close();
    for (who, raw) in [("waiter", &raw), ("leader", &leader_raw)] {
        let text = String::from_utf8_lossy(raw);
        assert!(text.starts_with("HTTP/1.1 200 "), "{who}: {text:.300}");
        assert!(
            text.contains("Transfer-Encoding: chunked\r\n"),
            "{who}: {text:.300}"
        );
        assert!(
            !raw.ends_with(b"0\r\n\r\n"),
            "{who}: a cut body must not end"
        );
        assert!(raw.len() < N, "{who}: {} bytes", raw.len());
    }
    assert!(
        String::from_utf8_lossy(&raw).contains("collapsed"),
        "the waiter waited on the fill"
    );
    assert_eq!(o.holds_expired(), 0);
    // Nothing was stored.
    let _ = h.client().send(get.as_bytes()).read_to_close();
    assert_eq!(o.count(&path), 2);
}

#[test]
fn a_chunked_fill_past_the_object_cap_still_streams_whole_to_its_waiters() {
    const N: usize = 300_000;
    let o = origin();
    // The origin's first piece (64 KiB) fits: the waiter surely joins
    // before the rest, let go by the test, passes the cap.
    let h = cached(&o, "on", &["--cache-max-object", "100KiB"]);
    let path = script(&[
        ("h", "Cache-Control: max-age=60"),
        ("n", &N.to_string()),
        ("chunked", "1"),
    ]);
    let held = o.hold_body(&path);
    let get = format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n");
    let mut leader = h.client();
    leader.send(get.as_bytes());
    let leading = std::thread::spawn(move || leader.read_response(false));
    assert!(o.wait_for(&path, 1, WAIT));
    let mut waiter = h.client();
    waiter.send(get.as_bytes());
    let mut held = Some(held);
    let mut body = Vec::new();
    let r = waiter.read_response_with(false, &mut |piece| {
        drop(held.take());
        body.extend_from_slice(piece);
    });
    // The fill outgrew the cap after the waiter joined: it is not stored,
    // but both readers get all of it.
    assert!(
        cache_status(&r).contains("collapsed"),
        "{}",
        cache_status(&r)
    );
    assert!(body == big_bytes(N), "the waiter's body differs");
    let r = leading.join().expect("leader");
    assert!(r.body == big_bytes(N), "the leader's body differs");
    assert_eq!(o.holds_expired(), 0);
    let r = h.client().get(&path, &[]);
    assert!(
        cache_status(&r).contains("hit-for-miss"),
        "{}",
        cache_status(&r)
    );
    assert_eq!(o.count(&path), 2);
    h.assert_no_errors();
}
