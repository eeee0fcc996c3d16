//! The shared tier with a real redis-server: two hayates caching in front
//! of one origin; a purge or an invalidation on one reaches the other; with
//! Redis killed both keep serving, and once it is back they share again.

// Tests block on purpose (they are clients, not the server).
#![allow(clippy::disallowed_methods)]

use std::path::Path;

use hayate_testkit::redis::Redis;
use hayate_testkit::{eventually, Hayate, Origin, OriginOptions};

const BIN: &str = env!("CARGO_BIN_EXE_hayate");

/// A caching hayate in front of `origin`, sharing through `redis`, with a
/// control socket at `control`.
fn cached(origin: &Origin, redis: &Redis, control: &Path) -> Hayate {
    let (url, shared) = (origin.url(), redis.url());
    Hayate::start(
        BIN,
        &[
            "--proxy",
            &url,
            "--cache",
            "60s",
            "--shared",
            &shared,
            "--control",
            control.to_str().expect("utf-8"),
        ],
    )
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

    // Each box caches /page: two origin requests, then hits.
    for h in [&a, &b] {
        h.client().get("/page", &[]);
        h.client().get("/page", &[]);
    }
    assert_eq!(origin.count("/page"), 2);

    // A purge at A empties B too: B's next request goes to the origin.
    assert_eq!(purge(&control_a, "/page"), "purged 1\n");
    eventually("B's copy purged", || {
        b.client().get("/page", &[]);
        (origin.count("/page") == 3)
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
        (origin.count("/again") == 2)
            .then_some(())
            .ok_or(format!("{} origin requests", origin.count("/again")))
    });
}
