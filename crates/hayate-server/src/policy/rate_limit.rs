//! rate_limit: requests per client and second or minute, with a burst
//! (nginx's `limit_req ... burst=B nodelay`, Traefik's RateLimit). Past it,
//! 429 with `Retry-After` and the IETF `RateLimit-Policy`/`RateLimit`
//! fields (draft-ietf-httpapi-ratelimit-headers).
//!
//! - GCRA (the generic cell rate algorithm, what nginx's leaky bucket
//!   computes): one number per key, the time its bucket is empty again.
//!   A request is let in when that time is at most `burst` intervals ahead
//!   of now, and pushes it one interval further.
//! - One [`Limiter`] per route and box, shared by every worker (10/s is 10/s
//!   for the box, not per worker) behind sharded locks held for a map
//!   lookup, and kept across reloads while the route's limit is unchanged
//!   ([`Limiter::shared`]).
//! - Bounded memory whatever the keys: at most `rate_limit_max_keys` per
//!   limiter. A full shard first forgets the keys whose bucket is empty
//!   (they count as new ones anyway), then the quarter nearest to empty: a
//!   client spraying addresses (IPv6 is counted per /64 so one host cannot
//!   do it from its own prefix) evicts mostly its own keys, and pays for
//!   the sweep one insertion in a quarter of a shard.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hayate_config::values::{RateKey, RateSpec};
use hayate_core::{Response, Status};

use super::limit_key::LimitKey;
use super::prehashed::{self, PrehashedMap};
use super::registry::Registry;
use super::{per_route, Access, AccessPolicy, AccessRequest, RouteName};

/// Shards of a limiter's keys: workers (one per core) rarely meet on one.
const SHARDS: usize = 16;

/// Every limiter alive, by what it is for.
static LIMITERS: Registry<Limiter> = Registry::new();

/// The counts of one route's limit, shared by every worker.
pub struct Limiter {
    /// The site and prefix it limits, for /metrics.
    route: RouteName,
    /// One request's share of the rate, in nanoseconds.
    interval: u64,
    /// How far ahead of now a bucket may be: `burst` intervals.
    tolerance: u64,
    /// A request admitted ahead of the rate waits its turn (`delay`).
    delay: bool,
    /// Keys kept per shard.
    max_per_shard: usize,
    /// The origin of the times kept (nanoseconds since it).
    epoch: Instant,
    /// The keys' hash, seeded per process: nobody can aim keys at one
    /// shard or one bucket.
    hasher: foldhash::fast::RandomState,
    shards: Box<[Mutex<PrehashedMap<u64, u64>>]>,
    /// Requests refused since it was made.
    limited: AtomicU64,
    /// The latest time any worker counted at (nanoseconds since `epoch`).
    latest: AtomicU64,
}

impl Limiter {
    /// The limiter of `route` with `spec`, shared with every other worker
    /// and with the running configuration's when it is the same.
    pub fn shared(route: &RouteName, spec: RateSpec, max_keys: u32, key: &RateKey) -> Arc<Limiter> {
        let identity = format!("{}{} {spec:?} {key:?} {max_keys}", route.site, route.prefix);
        LIMITERS.shared(identity, || {
            let interval = u64::try_from(spec.interval().as_nanos()).unwrap_or(u64::MAX);
            Limiter {
                route: route.clone(),
                interval,
                tolerance: interval.saturating_mul(u64::from(spec.burst)),
                delay: spec.delay,
                max_per_shard: (max_keys as usize).div_ceil(SHARDS).max(1),
                epoch: Instant::now(),
                hasher: foldhash::fast::RandomState::default(),
                shards: (0..SHARDS).map(|_| Mutex::new(prehashed::map())).collect(),
                limited: AtomicU64::new(0),
                latest: AtomicU64::new(0),
            }
        })
    }

    /// Counts one request of `key` at `now`: `Ok(wait)` when it may come
    /// in, after `wait` (zero but in `delay` mode, where a request of the
    /// burst waits for its turn at the rate); `Err(wait)` when it may not,
    /// with how long until it could.
    fn take(&self, key: u64, now: Instant) -> Result<Duration, Duration> {
        let now =
            u64::try_from(now.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX);
        // Workers read the clock once per event-loop turn, so one worker's
        // `now` may lag another's by a turn: never let it go back, or a
        // request exactly at the edge of the burst is refused on one worker
        // and let in on the other.
        let now = self.latest.fetch_max(now, Ordering::Relaxed).max(now);
        let shard = &self.shards[prehashed::shard_of(key, SHARDS)];
        let mut buckets = shard.lock().unwrap_or_else(|e| e.into_inner());
        let empty_at = buckets.get(&key).copied().unwrap_or(now).max(now);
        let next = empty_at.saturating_add(self.interval);
        let ahead = next - now;
        let allowed = self.tolerance.saturating_add(self.interval);
        if ahead > allowed {
            self.limited.fetch_add(1, Ordering::Relaxed);
            return Err(Duration::from_nanos(ahead - allowed));
        }
        if buckets.len() >= self.max_per_shard && !buckets.contains_key(&key) {
            make_room(&mut buckets, now, self.max_per_shard);
        }
        buckets.insert(key, next);
        // Its turn comes when the bucket it found was empty: `empty_at`.
        let wait = if self.delay { empty_at - now } else { 0 };
        Ok(Duration::from_nanos(wait))
    }

    /// Keys remembered now, every shard.
    fn keys(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).len())
            .sum()
    }
}

/// Frees room in a full shard: the keys whose bucket is empty by `now`
/// go, then, if that was not a quarter, the quarter nearest to empty.
fn make_room(buckets: &mut PrehashedMap<u64, u64>, now: u64, max: usize) {
    buckets.retain(|_, empty_at| *empty_at > now);
    let keep = max - max / 4;
    if buckets.len() > keep {
        let mut times: Vec<u64> = buckets.values().copied().collect();
        let cut = buckets.len() - keep;
        let (_, nth, _) = times.select_nth_unstable(cut - 1);
        let threshold = *nth;
        buckets.retain(|_, empty_at| *empty_at > threshold);
    }
}

/// A route's rate limit: what it counts by, and the shared counts.
pub struct RateLimit {
    limiter: Arc<Limiter>,
    key: LimitKey,
    /// The `RateLimit-Policy` value: `"default";q=N;w=SECONDS`.
    policy: Vec<u8>,
}

impl RateLimit {
    /// The limit `spec` counted by `key` on `route`.
    pub fn new(
        route: &RouteName,
        spec: RateSpec,
        key: RateKey,
        ipv6_prefix: u8,
        max_keys: u32,
    ) -> Result<RateLimit, String> {
        let limiter = Limiter::shared(route, spec, max_keys, &key);
        let key = LimitKey::new(key, ipv6_prefix)?;
        let policy = format!(
            "\"default\";q={};w={}",
            u64::from(spec.requests) + u64::from(spec.burst),
            spec.per.as_secs().max(1)
        );
        Ok(RateLimit {
            limiter,
            key,
            policy: policy.into_bytes(),
        })
    }

    /// The 429 for a request that may come back after `wait`.
    fn refusal(&self, wait: Duration) -> Response {
        // Whole seconds, rounded up: a client retrying at once after a
        // shorter wait would only be refused again.
        let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        let seconds = itoa::Buffer::new().format(seconds.max(1)).to_string();
        let mut r = Response::error(Status::TOO_MANY_REQUESTS);
        r.header("Retry-After", seconds.as_bytes());
        r.header("RateLimit-Policy", &self.policy);
        let state = format!("\"default\";r=0;t={seconds}");
        r.header("RateLimit", state.as_bytes());
        r
    }

    /// What it counts by.
    pub(super) fn key(&self) -> &LimitKey {
        &self.key
    }

    /// What a count (`Limiter::take`'s, or the fleet's) says of a request.
    pub(super) fn decide(&self, taken: Result<Duration, Duration>) -> Access {
        match taken {
            Ok(wait) if wait.is_zero() => Access::Pass,
            Ok(wait) => Access::Delay(wait),
            Err(wait) => Access::Refuse(self.refusal(wait)),
        }
    }
}

impl AccessPolicy for RateLimit {
    fn check(&self, request: &AccessRequest<'_>) -> Access {
        let key = self.key.hash(request, &self.limiter.hasher);
        self.decide(self.limiter.take(key, request.now))
    }
}

/// The limiters' counters, for `/metrics`.
pub fn render_metrics(out: &mut String) {
    use hayate_core::metrics::Kind;
    let alive = LIMITERS.alive();
    let (name, help) = (
        "hayate_rate_limited_total",
        "Requests refused by rate_limit (429)",
    );
    per_route(out, (name, help, Kind::Counter), &alive, |l| {
        (&l.route, l.limited.load(Ordering::Relaxed))
    });
    let name = "hayate_rate_limit_keys";
    let help = "Clients (keys) a rate_limit remembers now (at most rate_limit_max_keys)";
    per_route(out, (name, help, Kind::Gauge), &alive, |l| {
        (&l.route, l.keys() as u64)
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use hayate_core::request::{RequestHead, Version};
    use hayate_core::transport::Scheme;

    fn route(prefix: &str) -> RouteName {
        RouteName {
            site: "test".into(),
            prefix: prefix.into(),
        }
    }

    fn spec(text: &str) -> RateSpec {
        hayate_config::values::OptValue::parse_str(text).expect("rate")
    }

    fn ask(limit: &RateLimit, ip: &str, fields: &[(&str, &str)], now: Instant) -> u16 {
        let mut head = RequestHead::new(b"GET", b"/", Version::Http11, Scheme::Http);
        for (n, v) in fields {
            head.push_field(n.as_bytes(), v.as_bytes());
        }
        let request = AccessRequest {
            head: &head,
            client_ip: Some(ip.parse().expect("ip")),
            now,
        };
        match limit.check(&request) {
            Access::Pass | Access::Delay(_) => 200,
            Access::Refuse(r) => {
                assert!(r.field(b"retry-after").is_some());
                r.status.code()
            }
        }
    }

    #[test]
    fn five_times_the_rate_for_five_seconds_lets_in_the_rate() {
        // 20/s with a burst of 5, asked 100 times a second for 5 s.
        let limit = RateLimit::new(&route("/a"), spec("20/s burst=5"), RateKey::Ip, 64, 100)
            .expect("limit");
        let t0 = Instant::now();
        let accepted = (0..500)
            .filter(|i| {
                let now = t0 + Duration::from_millis(10 * i);
                ask(&limit, "192.0.2.1", &[], now) == 200
            })
            .count();
        // The burst, then 20 a second: 5 + 20 * 5 (the first also counts).
        assert!((100..=106).contains(&accepted), "{accepted}");
        // Another client has its own bucket.
        assert_eq!(
            ask(&limit, "192.0.2.2", &[], t0 + Duration::from_secs(5)),
            200
        );
    }

    #[test]
    fn a_refusal_says_when_to_come_back() {
        let limit = RateLimit::new(&route("/b"), spec("1/m"), RateKey::Ip, 64, 100).expect("limit");
        let t0 = Instant::now();
        assert_eq!(ask(&limit, "192.0.2.1", &[], t0), 200);
        let mut head = RequestHead::new(b"GET", b"/", Version::Http11, Scheme::Http);
        head.push_field(b"x", b"y");
        let request = AccessRequest {
            head: &head,
            client_ip: Some("192.0.2.1".parse().expect("ip")),
            now: t0 + Duration::from_secs(15),
        };
        let Access::Refuse(r) = limit.check(&request) else {
            panic!("limited")
        };
        assert_eq!(r.status.code(), 429);
        assert_eq!(r.field(b"retry-after"), Some(&b"45"[..]));
        assert_eq!(
            r.field(b"ratelimit-policy"),
            Some(&b"\"default\";q=1;w=60"[..])
        );
        assert_eq!(r.field(b"ratelimit"), Some(&b"\"default\";r=0;t=45"[..]));
    }

    #[test]
    fn ipv6_clients_count_by_their_prefix_and_keys_by_what_is_named() {
        let t0 = Instant::now();
        let by_ip = RateLimit::new(&route("/c"), spec("1/m"), RateKey::Ip, 64, 100).expect("limit");
        assert_eq!(ask(&by_ip, "2001:db8:1:2::1", &[], t0), 200);
        assert_eq!(ask(&by_ip, "2001:db8:1:2::ffff", &[], t0), 429, "same /64");
        assert_eq!(ask(&by_ip, "2001:db8:1:3::1", &[], t0), 200, "another /64");

        let key = RateKey::Header("x-api-key".into());
        let by_header = RateLimit::new(&route("/d"), spec("1/m"), key, 64, 100).expect("limit");
        assert_eq!(ask(&by_header, "192.0.2.1", &[("X-API-Key", "a")], t0), 200);
        assert_eq!(ask(&by_header, "192.0.2.2", &[("X-API-Key", "a")], t0), 429);
        assert_eq!(ask(&by_header, "192.0.2.1", &[("X-API-Key", "b")], t0), 200);
        assert_eq!(ask(&by_header, "192.0.2.1", &[], t0), 200, "by address");
        assert_eq!(ask(&by_header, "192.0.2.1", &[], t0), 429);

        let key = RateKey::Cookie("sid".into());
        let by_cookie = RateLimit::new(&route("/e"), spec("1/m"), key, 64, 100).expect("limit");
        let sid = [("Cookie", "theme=dark; sid=42")];
        assert_eq!(ask(&by_cookie, "192.0.2.1", &sid, t0), 200);
        assert_eq!(
            ask(&by_cookie, "192.0.2.9", &[("Cookie", "sid=42")], t0),
            429
        );

        let by_route =
            RateLimit::new(&route("/f"), spec("1/m"), RateKey::Route, 64, 100).expect("limit");
        assert_eq!(ask(&by_route, "192.0.2.1", &[], t0), 200);
        assert_eq!(ask(&by_route, "192.0.2.2", &[], t0), 429);
    }

    #[test]
    fn a_million_keys_stay_within_the_cap() {
        let limit =
            RateLimit::new(&route("/g"), spec("1/m"), RateKey::Ip, 64, 10_000).expect("limit");
        let t0 = Instant::now();
        for key in 0..1_000_000u64 {
            assert_eq!(limit.limiter.take(key, t0), Ok(Duration::ZERO));
        }
        let keys = limit.limiter.keys();
        assert!(keys <= 10_000, "{keys}");
        // A client just seen is still remembered.
        assert!(limit.limiter.take(999_999, t0).is_err());
    }

    #[test]
    fn in_delay_mode_the_burst_waits_its_turn_at_the_rate() {
        let limit = RateLimit::new(
            &route("/i"),
            spec("10/s burst=3 delay"),
            RateKey::Ip,
            64,
            100,
        )
        .expect("limit");
        let t0 = Instant::now();
        let key = 7;
        let waits: Vec<_> = (0..5).map(|_| limit.limiter.take(key, t0)).collect();
        let ms = Duration::from_millis;
        assert_eq!(
            waits,
            [
                Ok(ms(0)),
                Ok(ms(100)),
                Ok(ms(200)),
                Ok(ms(300)),
                Err(ms(100))
            ]
        );
        // Later, the queue has drained by the time passed.
        assert_eq!(limit.limiter.take(key, t0 + ms(250)), Ok(ms(150)));
    }

    #[test]
    fn workers_and_reloads_share_one_limiter_per_route_and_limit() {
        let (a, b) = (route("/h"), route("/h"));
        let one = Limiter::shared(&a, spec("5/s"), 100, &RateKey::Ip);
        let same = Limiter::shared(&b, spec("5/s"), 100, &RateKey::Ip);
        assert!(Arc::ptr_eq(&one, &same));
        let changed = Limiter::shared(&a, spec("6/s"), 100, &RateKey::Ip);
        assert!(!Arc::ptr_eq(&one, &changed));
        let mut out = String::new();
        render_metrics(&mut out);
        assert!(
            out.contains("hayate_rate_limited_total{site=\"test\",route=\"/h\"} 0"),
            "{out}"
        );
    }
}
