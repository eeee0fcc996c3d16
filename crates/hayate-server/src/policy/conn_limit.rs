//! conn_limit: requests in flight at once per client (nginx's
//! `limit_conn`, Traefik's InFlightReq), counted by the same keys as
//! rate_limit (`rate_limit_key`, IPv6 by `rate_limit_ipv6_prefix`).
//!
//! - A request that comes in takes a [`ConnSlot`]: the access phase hands
//!   it over with the admission, the pipeline puts it in the response
//!   (`Response::holding`), and the protocol's writer drops the response
//!   once its body is sent: a long download, a streamed answer or a
//!   WebSocket holds its slot to its end. Whatever ends a request (the
//!   client gone, an upstream error, an HTTP/2 reset, a reload) drops the
//!   slot with what held it: the count cannot leak.
//! - Past the limit: 429 with `Retry-After: 1` (nginx answers 503 by
//!   default; 429 says the client, not the server, is the one to slow
//!   down, as rate_limit does).
//! - One [`ConnCounter`] per route and box, shared by every worker and
//!   kept across reloads while the limit is unchanged (the slots of
//!   requests begun before a reload count against the new routes too).
//! - Bounded memory: a key lives while its count is above 0 (at most one
//!   per request in flight), and at most `conn_limit_max_keys` of them;
//!   a new client past that gets 503 (the box, not the client, is full).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use hayate_config::values::RateKey;
use hayate_core::{Response, Status};

use super::limit_key::LimitKey;
use super::prehashed::{self, PrehashedMap};
use super::registry::Registry;
use super::{per_route, AccessRequest, RouteName};

/// Shards of a counter's keys: workers (one per core) rarely meet on one.
const SHARDS: usize = 16;

/// Every counter alive, by what it is for.
static COUNTERS: Registry<ConnCounter> = Registry::new();

/// The requests in flight of one route's clients, shared by every worker.
pub struct ConnCounter {
    /// The site and prefix it limits, for /metrics and the status page.
    route: RouteName,
    /// Requests in flight allowed per key.
    limit: u32,
    /// Keys counted per shard.
    max_per_shard: usize,
    /// The keys' hash, seeded per process.
    hasher: foldhash::fast::RandomState,
    /// Requests in flight per key; a key at 0 is removed.
    shards: Box<[Mutex<PrehashedMap<u64, u32>>]>,
    /// Requests refused since it was made.
    limited: AtomicU64,
}

impl ConnCounter {
    /// The counter of `route` with `limit`, shared with every other worker
    /// and with the running configuration's when it is the same.
    fn shared(route: &RouteName, limit: u32, max_keys: u32, key: &RateKey) -> Arc<ConnCounter> {
        let identity = format!("{}{} {limit} {key:?} {max_keys}", route.site, route.prefix);
        COUNTERS.shared(identity, || ConnCounter {
            route: route.clone(),
            limit,
            max_per_shard: (max_keys as usize).div_ceil(SHARDS).max(1),
            hasher: foldhash::fast::RandomState::default(),
            shards: (0..SHARDS).map(|_| Mutex::new(prehashed::map())).collect(),
            limited: AtomicU64::new(0),
        })
    }

    fn shard(&self, key: u64) -> std::sync::MutexGuard<'_, PrehashedMap<u64, u32>> {
        let shard = &self.shards[prehashed::shard_of(key, SHARDS)];
        shard.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes a slot for `key`: `Err` with the status to answer when there
    /// is none (429: the client has `limit` in flight; 503: the counter is
    /// full of other clients).
    fn take(self: &Arc<Self>, key: u64) -> Result<ConnSlot, Status> {
        let mut counts = self.shard(key);
        let full = counts.len() >= self.max_per_shard;
        let refused = match counts.get_mut(&key) {
            Some(n) if *n >= self.limit => Some(Status::TOO_MANY_REQUESTS),
            Some(n) => {
                *n += 1;
                None
            }
            None if full => Some(Status::SERVICE_UNAVAILABLE),
            None => {
                counts.insert(key, 1);
                None
            }
        };
        drop(counts);
        match refused {
            Some(status) => {
                self.limited.fetch_add(1, Ordering::Relaxed);
                Err(status)
            }
            None => Ok(ConnSlot {
                counter: self.clone(),
                key,
            }),
        }
    }

    /// Gives back one slot of `key`; the key goes at 0.
    fn give_back(&self, key: u64) {
        let mut counts = self.shard(key);
        if let Some(n) = counts.get_mut(&key) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&key);
            }
        }
    }

    /// Requests in flight now, every key.
    fn in_flight(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| {
                let counts = s.lock().unwrap_or_else(|e| e.into_inner());
                counts.values().map(|&n| u64::from(n)).sum::<u64>()
            })
            .sum()
    }

    /// Requests refused since it was made.
    pub fn limited(&self) -> u64 {
        self.limited.load(Ordering::Relaxed)
    }

    /// The route it limits.
    pub fn route(&self) -> &RouteName {
        &self.route
    }
}

/// One request's place among its client's requests in flight, given back
/// when dropped (with the response that holds it, once sent).
pub struct ConnSlot {
    counter: Arc<ConnCounter>,
    key: u64,
}

impl Drop for ConnSlot {
    fn drop(&mut self) {
        self.counter.give_back(self.key);
    }
}

/// A route's limit of requests in flight per client.
pub struct ConnLimit {
    counter: Arc<ConnCounter>,
    key: LimitKey,
}

impl ConnLimit {
    /// At most `limit` requests in flight per `key` on `route`.
    pub fn new(
        route: &RouteName,
        limit: u32,
        key: RateKey,
        ipv6_prefix: u8,
        max_keys: u32,
    ) -> Result<ConnLimit, String> {
        let counter = ConnCounter::shared(route, limit, max_keys, &key);
        let key = LimitKey::new(key, ipv6_prefix)?;
        Ok(ConnLimit { counter, key })
    }

    /// A slot for `request`, or the status that refuses it (see
    /// [`refusal`]).
    pub fn admit(&self, request: &AccessRequest<'_>) -> Result<ConnSlot, Status> {
        let key = self.key.hash(request, &self.counter.hasher);
        self.counter.take(key)
    }
}

/// The answer to a request [`ConnLimit::admit`] refused with `status`.
pub fn refusal(status: Status) -> Response {
    // A slot frees when a response ends, which for most is well within a
    // second.
    Response::error(status).with_header("Retry-After", b"1")
}

/// Every counter alive, for `/metrics` and the status page.
pub fn counters() -> Vec<Arc<ConnCounter>> {
    COUNTERS.alive()
}

/// The counters' figures, for `/metrics`.
pub fn render_metrics(out: &mut String) {
    use hayate_core::metrics::Kind;
    let alive = counters();
    let name = "hayate_conn_limited_total";
    let help = "Requests refused by conn_limit (429, or 503 when conn_limit_max_keys clients are in flight)";
    per_route(out, (name, help, Kind::Counter), &alive, |c| {
        (&c.route, c.limited())
    });
    let name = "hayate_conn_limit_in_flight";
    let help = "Requests holding a conn_limit slot now";
    per_route(out, (name, help, Kind::Gauge), &alive, |c| {
        (&c.route, c.in_flight())
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use hayate_core::request::{RequestHead, Version};
    use hayate_core::transport::Scheme;
    use std::time::Instant;

    fn limit(prefix: &str, n: u32, max_keys: u32) -> ConnLimit {
        let route = RouteName {
            site: "test".into(),
            prefix: prefix.into(),
        };
        ConnLimit::new(&route, n, RateKey::Ip, 64, max_keys).expect("limit")
    }

    fn admit(limit: &ConnLimit, ip: &str) -> Result<ConnSlot, u16> {
        let head = RequestHead::new(b"GET", b"/", Version::Http11, Scheme::Http);
        let request = AccessRequest {
            head: &head,
            client_ip: Some(ip.parse().expect("ip")),
            now: Instant::now(),
        };
        limit.admit(&request).map_err(|status| {
            let r = refusal(status);
            assert_eq!(r.field(b"retry-after"), Some(&b"1"[..]));
            r.status.code()
        })
    }

    #[test]
    fn a_client_has_n_in_flight_and_a_slot_frees_when_dropped() {
        let l = limit("/a", 2, 100);
        let one = admit(&l, "192.0.2.1").expect("first");
        let two = admit(&l, "192.0.2.1").expect("second");
        assert_eq!(admit(&l, "192.0.2.1").err(), Some(429));
        // The same /64 is the same client; another is not.
        let v6 = admit(&l, "2001:db8::1").expect("v6");
        let v6b = admit(&l, "2001:db8::2").expect("same /64, second");
        assert_eq!(admit(&l, "2001:db8::3").err(), Some(429));
        drop(v6);
        assert!(admit(&l, "2001:db8::4").is_ok());
        drop(one);
        let three = admit(&l, "192.0.2.1").expect("a slot freed");
        assert_eq!(l.counter.limited(), 2);
        drop((two, three, v6b));
        // Nothing in flight: nothing remembered.
        assert_eq!(l.counter.in_flight(), 0);
        assert_eq!(l.counter.keys_counted(), 0);
    }

    #[test]
    fn a_full_counter_refuses_new_clients_with_503_and_forgets_none_in_flight() {
        let l = limit("/b", 1, 16);
        let held: Vec<ConnSlot> = (0..10_000u32)
            .filter_map(|i| admit(&l, &format!("10.{}.{}.1", i / 256, i % 256)).ok())
            .collect();
        assert!(held.len() <= 16, "{}", held.len());
        assert_eq!(l.counter.keys_counted(), held.len());
        assert_eq!(admit(&l, "192.0.2.99").err(), Some(503));
        drop(held);
        assert_eq!(l.counter.keys_counted(), 0);
        assert!(admit(&l, "192.0.2.99").is_ok());
    }

    #[test]
    fn workers_and_reloads_share_one_counter_per_route_and_limit() {
        let (a, b) = (limit("/c", 1, 100), limit("/c", 1, 100));
        let _slot = admit(&a, "192.0.2.1").expect("first");
        assert_eq!(admit(&b, "192.0.2.1").err(), Some(429), "one count");
        let changed = limit("/c", 2, 100);
        assert!(admit(&changed, "192.0.2.1").is_ok());
        let mut out = String::new();
        render_metrics(&mut out);
        assert!(
            out.contains("hayate_conn_limited_total{site=\"test\",route=\"/c\"} 1"),
            "{out}"
        );
    }

    impl ConnCounter {
        fn keys_counted(&self) -> usize {
            self.shards
                .iter()
                .map(|s| s.lock().expect("lock").len())
                .sum()
        }
    }
}
