//! Fleet-wide rate limits with a real redis-server: two hayates sharing it
//! let in the limit across both boxes together (at 5 × the limit, within
//! ±10 %); with Redis killed each box applies the limit on its own (never
//! no limit), and says so in its log and on /metrics.

// Tests block on purpose (they are clients, not the server).
#![allow(clippy::disallowed_methods)]

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use hayate_testkit::redis::Redis;
use hayate_testkit::{eventually, run_to_end, unix_get, Client, Hayate};

const BIN: &str = env!("CARGO_BIN_EXE_hayate");

/// The limit under test: 50 requests a second (with a burst of 5: GCRA
/// without one refuses a request that comes a little early, and requests
/// that come on a 4 ms grid let in only 45 a second).
const LIMIT: f64 = 50.0;

/// A box serving `dir/www` with a fleet-wide limit, sharing `redis`, its
/// admin socket in `dir/name.sock`.
fn box_of(dir: &Path, name: &str, redis: &Redis) -> Hayate {
    let www = dir.join("www");
    std::fs::create_dir_all(&www).expect("mkdir");
    std::fs::write(www.join("index.html"), "hi\n").expect("write");
    let text = format!(
        "listen = [\"127.0.0.1:0\"]\nadmin = \"unix:{admin}\"\nshared = \"{redis}\"\n\
         # A debug build on a busy machine: Redis's answers may be late by\n\
         # more than the default 50 ms, and this test is not about that.\n\
         shared_timeout = \"1s\"\n\
         [[site]]\nroot = \"{www}\"\nrate_limit = \"{LIMIT}/s burst=5\"\nrate_limit_scope = \"fleet\"\n",
        admin = dir.join(format!("{name}.sock")).display(),
        redis = redis.url(),
        www = www.display(),
    );
    Hayate::start_config(BIN, &dir.join(format!("{name}.toml")), &text)
}

/// Sends `per_second` requests a second for `run` over `threads`
/// connections spread over `boxes`; how many were let in (200) and
/// refused (429), and how long it took (`run`, or longer if the machine
/// was too slow to keep up).
fn offer(
    boxes: &[SocketAddr],
    per_second: f64,
    threads: usize,
    run: Duration,
) -> (u32, u32, Duration) {
    let period = Duration::from_secs_f64(threads as f64 / per_second);
    let start = Instant::now();
    let clients: Vec<_> = (0..threads)
        .map(|i| {
            let addr = boxes[i % boxes.len()];
            // Each thread's requests start at its own offset in the period.
            let offset = period.mul_f64(i as f64 / threads as f64);
            std::thread::spawn(move || {
                let mut c = Client::connect(addr);
                let (mut admitted, mut refused) = (0, 0);
                let mut next = start + offset;
                while next < start + run {
                    std::thread::sleep(next.saturating_duration_since(Instant::now()));
                    match c.get("/index.html", &[]).status {
                        200 => admitted += 1,
                        429 => refused += 1,
                        other => panic!("status {other}"),
                    }
                    next += period;
                }
                (admitted, refused)
            })
        })
        .collect();
    let (admitted, refused) = clients
        .into_iter()
        .map(|t| t.join().expect("client"))
        .fold((0, 0), |(a, r), (a2, r2)| (a + a2, r + r2));
    (admitted, refused, start.elapsed())
}

#[test]
fn two_boxes_let_in_the_limit_together_and_each_its_own_once_redis_is_gone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut redis = Redis::start();
    let one = box_of(dir.path(), "one", &redis);
    let two = box_of(dir.path(), "two", &redis);
    let boxes = [one.addr, two.addr];

    // 5 × the limit for 2.5 s, half to each box.
    let run = Duration::from_millis(2500);
    let (admitted, refused, took) = offer(&boxes, 5.0 * LIMIT, 10, run);
    let expected = LIMIT * took.as_secs_f64();
    let ratio = f64::from(admitted) / expected;
    eprintln!("fleet: {admitted} let in, {refused} refused, {ratio:.3} of the limit");
    assert!(
        (0.9..=1.1).contains(&ratio),
        "{admitted} let in ({refused} refused) where the limit is {expected}: {ratio:.3}"
    );
    // It was 5 × the limit that was offered (4 × at least, on a busy machine).
    let offered = f64::from(admitted + refused);
    assert!(
        offered >= 4.0 * expected,
        "{admitted} in, {refused} refused"
    );
    let counted = metric(dir.path(), "one", "hayate_fleet_rate_limit_counted_total")
        + metric(dir.path(), "two", "hayate_fleet_rate_limit_counted_total");
    assert_eq!(
        counted,
        u64::from(admitted + refused),
        "every request counted in Redis"
    );
    // A key per client, under hayate's prefix, expiring.
    let keys = redis.keys("hayate:rl:*");
    assert_eq!(keys.len(), 1, "{keys:?}");

    // Redis frozen: a request waits for it no longer than shared_timeout.
    redis.pause();
    let asked = Instant::now();
    let status = Client::connect(one.addr).get("/index.html", &[]).status;
    let waited = asked.elapsed();
    assert!(status == 200 || status == 429, "{status}");
    assert!(waited < Duration::from_millis(1500), "{waited:?}");

    // Redis gone: each box counts on its own, the same limit.
    redis.kill();
    let (admitted, refused, took) = offer(&boxes[..1], 5.0 * LIMIT, 5, Duration::from_secs(1));
    eprintln!("one box, Redis gone: {admitted} let in, {refused} refused in {took:?}");
    let expected = LIMIT * took.as_secs_f64();
    let ratio = f64::from(admitted) / expected;
    assert!(
        (0.8..=1.2).contains(&ratio),
        "{admitted} let in ({refused} refused) by one box at its own limit of {LIMIT}/s"
    );
    let said = one.stderr();
    assert!(
        said.contains("fleet rate limits:") && said.contains("each box counts its own clients"),
        "{said}"
    );
    assert!(metric(dir.path(), "one", "hayate_fleet_rate_limit_fallbacks_total") > 0);
    one.assert_no_errors();
    two.assert_no_errors();
}

#[test]
fn check_refuses_a_fleet_limit_without_a_shared_redis() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("hayate.toml");
    std::fs::write(
        &file,
        "listen = [\"127.0.0.1:0\"]\n[[site]]\nroot = \".\"\nrate_limit = \"5/s\"\nrate_limit_scope = \"fleet\"\n",
    )
    .expect("write");
    let (ok, said) = run_to_end(std::process::Command::new(BIN).arg("check").arg(&file));
    assert!(!ok, "{said}");
    assert!(
        said.contains("hayate.toml:")
            && said.contains("rate_limit_scope")
            && said.contains("shared"),
        "{said}"
    );
}

/// The value of `name` (no labels) on box `which`'s /metrics.
fn metric(dir: &Path, which: &str, name: &str) -> u64 {
    let socket = dir.join(format!("{which}.sock"));
    eventually("the admin socket answers", || {
        let text = unix_get(&socket, "/metrics");
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| format!("no {name} in {text}"))
    })
}
