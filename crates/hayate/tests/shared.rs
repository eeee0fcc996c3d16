//! The shared tier with a real redis-server: two hayates caching in front
//! of one origin; a response fetched through one is a hit at the other
//! (L2), Vary variants each under their own key; a purge or an
//! invalidation on one reaches the other and Redis; with Redis killed or
//! frozen both keep serving without waiting on it, and once it is back they
//! share again.

// Tests block on purpose (they are clients, not the server).
#![allow(clippy::disallowed_methods)]

use std::path::Path;
use std::time::{Duration, Instant};

use hayate_testkit::redis::{Redis, Reply};
use hayate_testkit::{eventually, Hayate, Origin, OriginOptions, Response};

const BIN: &str = env!("CARGO_BIN_EXE_hayate");

/// A caching hayate in front of `origin`, sharing through `redis`, with a
/// control socket at `control`.
fn cached(origin: &Origin, redis: &Redis, control: &Path) -> Hayate {
    cached_with(origin, redis, control, &[])
}

/// [`cached`] with more options.
fn cached_with(origin: &Origin, redis: &Redis, control: &Path, more: &[&str]) -> Hayate {
    let (url, shared) = (origin.url(), redis.url());
    let mut args = vec![
        "--proxy",
        &url,
        "--cache",
        "60s",
        "--shared",
        &shared,
        "--control",
        control.to_str().expect("utf-8"),
    ];
    args.extend_from_slice(more);
    Hayate::start(BIN, &args)
}

/// Waits until Redis holds `n` response keys (entries or variants) for
/// `path` (the test client's Host is `test`): the background write landed.
fn in_redis(redis: &Redis, path: &str, n: usize) {
    eventually("the response written to Redis", || {
        let keys = responses_in_redis(redis, path);
        (keys.len() >= n).then_some(()).ok_or(format!("{keys:?}"))
    });
}

fn responses_in_redis(redis: &Redis, path: &str) -> Vec<Vec<u8>> {
    let mut keys = redis.keys(&format!("hayate:l2:[ev]:test\0{path}"));
    keys.extend(redis.keys(&format!("hayate:l2:v:test\0{path}\0*")));
    keys
}

fn cache_status(r: &Response) -> String {
    r.header("cache-status").unwrap_or_default().to_string()
}

fn from_shared_tier(r: &Response) -> bool {
    let s = cache_status(r);
    s.contains("; hit") && s.contains("detail=shared")
}

fn status_of(control: &Path) -> String {
    let out = std::process::Command::new(BIN)
        .args(["status", "--control"])
        .arg(control)
        .output()
        .expect("hayate status");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Waits until `h` says it subscribed `n` times (once per (re)connection).
fn subscribed(h: &Hayate, n: usize) {
    eventually("the shared tier's subscription", || {
        let log = h.stderr();
        let count = log.matches("shared tier: subscribed").count();
        (count >= n).then_some(()).ok_or(log)
    });
}

fn purge(control: &Path, url: &str) -> String {
    let out = std::process::Command::new(BIN)
        .args(["purge", url, "--control"])
        .arg(control)
        .output()
        .expect("hayate purge");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn purges_and_invalidations_reach_every_box_and_redis_down_takes_nothing_down() {
    let mut redis = Redis::start();
    let origin = Origin::start(OriginOptions::default());
    let dir = tempfile::tempdir().expect("tempdir");
    let (control_a, control_b) = (dir.path().join("a.sock"), dir.path().join("b.sock"));
    let a = cached(&origin, &redis, &control_a);
    let b = cached(&origin, &redis, &control_b);
    subscribed(&a, 1);
    subscribed(&b, 1);

    // A fetches /page; once it is in Redis, B's miss is answered from
    // there, and then from B's own store.
    a.client().get("/page", &[]);
    in_redis(&redis, "/page", 1);
    let shared = b.client().get("/page", &[]);
    assert_eq!(shared.status, 200);
    assert!(from_shared_tier(&shared), "{}", cache_status(&shared));
    let local = b.client().get("/page", &[]);
    assert!(
        cache_status(&local).contains("; hit"),
        "{}",
        cache_status(&local)
    );
    assert!(!from_shared_tier(&local), "{}", cache_status(&local));
    assert_eq!(origin.count("/page"), 1);

    // A purge at A empties Redis and B too: B's next request goes to the
    // origin.
    assert_eq!(purge(&control_a, "/page"), "purged 1\n");
    eventually("the purge reached Redis", || {
        let keys = responses_in_redis(&redis, "/page");
        keys.is_empty().then_some(()).ok_or(format!("{keys:?}"))
    });
    eventually("B's copy purged", || {
        b.client().get("/page", &[]);
        (origin.count("/page") == 2)
            .then_some(())
            .ok_or(format!("{} origin requests", origin.count("/page")))
    });

    // A POST through B invalidates A's copy (RFC 9111 §4.4).
    a.client().get("/page", &[]);
    let before = origin.count("/page");
    let posted = b
        .client()
        .request("POST", "/page", &[("content-length", "0")]);
    assert_eq!(posted.status, 200);
    eventually("A's copy invalidated", || {
        a.client().get("/page", &[]);
        (origin.count("/page") > before + 1)
            .then_some(())
            .ok_or(format!("{} origin requests", origin.count("/page")))
    });

    // Redis gone: both keep serving, from their caches too, and purge
    // locally.
    redis.kill();
    for h in [&a, &b] {
        assert_eq!(h.client().get("/page", &[]).status, 200);
    }
    assert!(purge(&control_a, "/page").starts_with("purged "));
    assert_eq!(a.client().get("/other", &[]).status, 200);

    // Back: both resubscribe and share again.
    redis.restart();
    subscribed(&a, 2);
    subscribed(&b, 2);
    b.client().get("/again", &[]);
    b.client().get("/again", &[]);
    assert_eq!(origin.count("/again"), 1);
    purge(&control_a, "/again");
    eventually("B's copy purged after Redis came back", || {
        b.client().get("/again", &[]);
        (origin.count("/again") == 2).then_some(()).ok_or(format!(
            "{} origin requests\nA: {}\nB: {}",
            origin.count("/again"),
            a.stderr(),
            b.stderr()
        ))
    });
}

#[test]
fn vary_variants_are_shared_each_under_its_own_key() {
    let redis = Redis::start();
    let origin = Origin::start(OriginOptions::default());
    let dir = tempfile::tempdir().expect("tempdir");
    let a = cached(&origin, &redis, &dir.path().join("a.sock"));
    let b = cached(&origin, &redis, &dir.path().join("b.sock"));
    let path = "/script?h=Vary%3A%20Accept-Language";
    let lang = |l| [("accept-language", l)];
    assert_eq!(a.client().get(path, &lang("en")).text(), "count 1\n");
    assert_eq!(a.client().get(path, &lang("fr")).text(), "count 2\n");
    // The entry naming the Vary fields, and one key per variant.
    in_redis(&redis, path, 3);
    // Every key expires (the names with the longest-lived variant).
    for key in responses_in_redis(&redis, path) {
        let ttl = redis.command(&[b"PTTL", &key]);
        assert!(
            matches!(ttl, Reply::Int(ms) if ms > 50_000 && ms <= 60_000),
            "{ttl:?}"
        );
    }
    for (l, body) in [("en", "count 1\n"), ("fr", "count 2\n")] {
        let r = b.client().get(path, &lang(l));
        assert!(from_shared_tier(&r), "{l}: {}", cache_status(&r));
        assert_eq!(r.text(), body, "{l}");
    }
    // A variant no box fetched yet goes to the origin.
    let de = b.client().get(path, &lang("de"));
    assert_eq!(de.text(), "count 3\n");
    assert!(!from_shared_tier(&de), "{}", cache_status(&de));
    assert_eq!(origin.count(path), 3);

    // A box that keys on a request field (cache_key_headers) never takes a
    // copy stored without it: one key's answer is not another's.
    let keyed = cached_with(
        &origin,
        &redis,
        &dir.path().join("k.sock"),
        &["--cache-key-headers", "x-api-key"],
    );
    let r = keyed
        .client()
        .get(path, &[("accept-language", "en"), ("x-api-key", "k1")]);
    assert!(!from_shared_tier(&r), "{}", cache_status(&r));
    assert_eq!(origin.count(path), 4);
}

#[test]
fn an_oversize_response_is_not_shared_and_a_corrupt_value_is_ignored() {
    let redis = Redis::start();
    let origin = Origin::start(OriginOptions::default());
    let dir = tempfile::tempdir().expect("tempdir");
    let small = ["--shared-max-object", "1KiB"];
    let a = cached_with(&origin, &redis, &dir.path().join("a.sock"), &small);
    let b = cached_with(&origin, &redis, &dir.path().join("b.sock"), &small);

    // The large one is stored at A but not written; the small one after it
    // is (writes are in order: once it is there, the large one was passed).
    assert_eq!(a.client().get("/text?n=5000", &[]).body.len(), 5000);
    a.client().get("/text?n=100", &[]);
    in_redis(&redis, "/text?n=100", 1);
    assert!(responses_in_redis(&redis, "/text?n=5000").is_empty());
    let big = b.client().get("/text?n=5000", &[]);
    assert_eq!(big.body.len(), 5000);
    assert!(!from_shared_tier(&big), "{}", cache_status(&big));
    assert_eq!(origin.count("/text?n=5000"), 2);

    // A value hayate cannot read is a miss: the origin answers.
    for (path, junk) in [
        ("/junk1", &b"HYL2\x01\x01garbage"[..]),
        ("/junk2", b"not hayate's"),
    ] {
        let key = format!("hayate:l2:e:test\0{path}");
        let set = redis.command(&[b"SET", key.as_bytes(), junk]);
        assert_eq!(set, Reply::Text(b"OK".to_vec()));
        let r = b.client().get(path, &[]);
        assert_eq!(r.status, 200);
        assert!(!from_shared_tier(&r), "{}", cache_status(&r));
        assert_eq!(origin.count(path), 1);
    }
    eventually("the unreadable value logged", || {
        let log = b.stderr();
        (log.matches("a value hayate cannot read").count() >= 2)
            .then_some(())
            .ok_or(log)
    });
}

#[test]
fn a_frozen_redis_delays_no_request_beyond_the_timeout_and_the_breaker_shows_it() {
    let redis = Redis::start();
    let origin = Origin::start(OriginOptions::default());
    let dir = tempfile::tempdir().expect("tempdir");
    let (control_a, control_b) = (dir.path().join("a.sock"), dir.path().join("b.sock"));
    let timeout = ["--shared-timeout", "100ms"];
    let a = cached_with(&origin, &redis, &control_a, &timeout);
    let b = cached_with(&origin, &redis, &control_b, &timeout);
    a.client().get("/warm", &[]);
    in_redis(&redis, "/warm", 1);
    assert!(status_of(&control_a).contains("L2 breaker closed"));

    // Frozen: connections open, no answers. A local hit never asks Redis;
    // a miss waits for it at most the timeout, then none at all once the
    // breaker opens.
    redis.pause();
    let bound = Duration::from_millis(100 + 900); // the timeout, plus a loaded machine
    let timed = |h: &Hayate, path: &str| {
        let start = Instant::now();
        let r = h.client().get(path, &[]);
        assert_eq!(r.status, 200, "{path}");
        let took = start.elapsed();
        assert!(took < bound, "{path} took {took:?}");
        r
    };
    assert!(cache_status(&timed(&a, "/warm")).contains("; hit"));
    assert!(!from_shared_tier(&timed(&b, "/warm")));
    for i in 0..8 {
        timed(&a, &format!("/miss{i}"));
    }
    let frozen = status_of(&control_a);
    assert!(!frozen.contains("L2 breaker closed"), "{frozen}");
    assert!(frozen.contains("errors"), "{frozen}");

    // Thawed: a probe closes the breaker, and the boxes share again.
    redis.resume();
    let mut i = 0;
    eventually("the breaker closed again", || {
        i += 1;
        timed(&a, &format!("/probe{i}"));
        let s = status_of(&control_a);
        s.contains("L2 breaker closed").then_some(()).ok_or(s)
    });
    // (A fresh URL per try: a miss that found nothing is stored at B.)
    let mut n = 0;
    eventually("B answers from the shared tier again", || {
        n += 1;
        let path = format!("/after{n}");
        a.client().get(&path, &[]);
        in_redis(&redis, &path, 1);
        let r = b.client().get(&path, &[]);
        from_shared_tier(&r).then_some(()).ok_or(format!(
            "{}\n{}",
            cache_status(&r),
            status_of(&control_b)
        ))
    });
}

#[test]
fn a_tag_purge_empties_redis_and_ages_carry_across_boxes() {
    let redis = Redis::start();
    let origin = Origin::start(OriginOptions::default());
    let dir = tempfile::tempdir().expect("tempdir");
    let control_a = dir.path().join("a.sock");
    let a = cached(&origin, &redis, &control_a);
    let b = cached(&origin, &redis, &dir.path().join("b.sock"));
    // 30 s old when it left the origin (an inner cache's Age).
    let path = "/script?h=Surrogate-Key%3A%20t1%20t2&h=Age%3A%2030";
    let age = |r: &Response| -> u64 { r.header("age").and_then(|a| a.parse().ok()).unwrap_or(0) };
    let first = a.client().get(path, &[]);
    assert!(age(&first) >= 30, "{:?}", first.headers);
    in_redis(&redis, path, 1);
    let shared = b.client().get(path, &[]);
    assert!(from_shared_tier(&shared), "{}", cache_status(&shared));
    // Never younger than at A (RFC 9111 §4.2.3), whatever B's clock says.
    assert!(age(&shared) >= age(&first), "{:?}", shared.headers);
    assert!(age(&shared) < 60, "{:?}", shared.headers);

    let out = std::process::Command::new(BIN)
        .args(["purge", "--tag", "t2", "--control"])
        .arg(&control_a)
        .output()
        .expect("hayate purge --tag");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "purged 1\n");
    eventually("the tag purge reached Redis", || {
        let keys = responses_in_redis(&redis, path);
        keys.is_empty().then_some(()).ok_or(format!("{keys:?}"))
    });
    assert!(redis.keys("hayate:l2:t:t2").is_empty());
    eventually("B's copy purged", || {
        b.client().get(path, &[]);
        (origin.count(path) == 2)
            .then_some(())
            .ok_or(format!("{} origin requests", origin.count(path)))
    });
}

#[test]
fn coalesced_misses_ask_redis_once_and_local_hits_never() {
    let redis = Redis::start();
    let origin = Origin::start(OriginOptions::default());
    let dir = tempfile::tempdir().expect("tempdir");
    let admin = dir.path().join("admin.sock");
    let admin_arg = format!("unix:{}", admin.display());
    let a = cached_with(
        &origin,
        &redis,
        &dir.path().join("a.sock"),
        &["--admin", &admin_arg],
    );
    let metric = |name: &str| -> u64 {
        let text = hayate_testkit::unix_get(&admin, "/metrics");
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    eventually("the admin listener", || {
        admin.exists().then_some(()).ok_or(a.stderr())
    });
    let held = origin.hold("/busy");
    let clients: Vec<_> = (0..5)
        .map(|_| {
            let mut c = a.client();
            std::thread::spawn(move || c.get("/busy", &[]).status)
        })
        .collect();
    // The leader asked Redis, then the origin; the others wait on it.
    assert!(origin.wait_for("/busy", 1, Duration::from_secs(5)));
    eventually("four requests waiting on the fill", || {
        let n = metric("hayate_cache_coalesced_total");
        (n == 4).then_some(()).ok_or(format!("{n}"))
    });
    drop(held);
    for c in clients {
        assert_eq!(c.join().expect("client"), 200);
    }
    assert_eq!(origin.count("/busy"), 1);
    // Local hits never ask Redis.
    for _ in 0..3 {
        let hit = a.client().get("/busy", &[]);
        assert!(
            cache_status(&hit).contains("; hit"),
            "{}",
            cache_status(&hit)
        );
    }
    assert_eq!(metric("hayate_shared_l2_misses_total"), 1);
    assert_eq!(metric("hayate_shared_l2_hits_total"), 0);
    assert_eq!(metric("hayate_shared_l2_breaker"), 0);
    eventually("the fill written to Redis", || {
        let n = metric("hayate_shared_l2_writes_total");
        (n == 1).then_some(()).ok_or(format!("{n}"))
    });
    let status = hayate_testkit::unix_get(&admin, "/status.json");
    let body = &status[status.find("\r\n\r\n").expect("a head") + 4..];
    let doc: serde_json::Value = serde_json::from_str(body).expect("JSON");
    assert_eq!(doc["shared"]["breaker"], "closed", "{doc}");
    assert_eq!(doc["shared"]["l2"]["misses"], 1, "{doc}");
    assert_eq!(doc["shared"]["l2"]["writes"], 1, "{doc}");
}

#[test]
fn copies_from_redis_answer_stale_or_revalidate_under_the_usual_rules() {
    let redis = Redis::start();
    let origin = Origin::start(OriginOptions::default());
    let dir = tempfile::tempdir().expect("tempdir");
    let a = cached(&origin, &redis, &dir.path().join("a.sock"));
    let b = cached(&origin, &redis, &dir.path().join("b.sock"));

    // Stale on arrival (Age 5 > max-age 1) but within stale-while-revalidate:
    // B answers with the copy from Redis and refreshes it in the background.
    let swr =
        "/script?h=Cache-Control%3A%20max-age%3D1%2C%20stale-while-revalidate%3D60&h=Age%3A%205";
    a.client().get(swr, &[]);
    in_redis(&redis, swr, 1);
    let stale = b.client().get(swr, &[]);
    let status = cache_status(&stale);
    assert!(from_shared_tier(&stale), "{status}");
    assert!(status.contains("ttl=-"), "{status}");
    assert_eq!(stale.text(), "count 1\n");
    assert!(
        origin.wait_for(swr, 2, Duration::from_secs(5)),
        "the refresh"
    );

    // A request that will not take a stored answer unvalidated (no-cache):
    // the copy from Redis is revalidated with its ETag, and the origin's 304
    // confirms it.
    let tagged = "/script?h=Cache-Control%3A%20max-age%3D60&etag=v7";
    a.client().get(tagged, &[]);
    in_redis(&redis, tagged, 1);
    let r = b.client().get(tagged, &[("cache-control", "no-cache")]);
    let status = cache_status(&r);
    assert!(
        status.contains("fwd=stale") && status.contains("fwd-status=304"),
        "{status}"
    );
    assert_eq!(r.text(), "count 1\n");
    assert_eq!(origin.count(tagged), 2);
}
