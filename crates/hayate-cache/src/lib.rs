//! The response cache: an RFC 9111 shared cache for proxied responses.
//!
//! - [`directives`]: Cache-Control of requests and responses.
//! - [`targeted`]: Hayate-Cache-Control and CDN-Cache-Control (RFC 9213).
//! - [`policy`]: storability, freshness, age, and how a stored response may
//!   answer (pure functions, table-tested).
//! - [`vary`]: the secondary key from a response's Vary.
//! - [`store`]: the memory store shared by all workers (byte budget,
//!   S3-FIFO eviction, purge by URL and tag).
//! - [`fill`]: request coalescing (one fetch per key, waiters woken by an
//!   event).
//! - [`serve`]: stored entries to responses and back (Age, 304s, updates).
//! - [`status`]: Cache-Status (RFC 9211) and the access-log word.
//! - [`tier`]: the second tier several boxes share (a Redis L2).
//!
//! The request flow that ties them to the proxy lives in hayate-server
//! (`cached.rs`); this crate does no I/O and depends only on hayate-core.

pub mod directives;
pub mod events;
pub mod fill;
pub mod growing;
pub mod policy;
pub mod serve;
pub mod status;
pub mod store;
pub mod targeted;
pub mod tier;
pub mod vary;

use std::sync::Arc;
use std::time::Duration;

pub use directives::{RequestDirectives, ResponseDirectives};
pub use events::CacheEvent;
pub use fill::{Fills, Outcome, Role, Streaming, Waited};
pub use policy::{NotStored, ResponseFacts, RoutePolicy, Use};
pub use status::{CacheOutcome, CacheStatus};
pub use store::{Lookup, Stats, Store, Stored};
pub use tier::SecondTier;
pub use vary::VaryKey;

/// Process-wide cache settings.
#[derive(Debug, Clone, Copy)]
pub struct CacheLimits {
    /// Byte budget of the store.
    pub budget: u64,
    /// Largest body stored.
    pub max_object: u64,
    /// Longest a request waits for another's fetch of the same key.
    pub lock_timeout: Duration,
    /// Most requests waiting for one fetch.
    pub max_waiters: usize,
    /// How long a URL found uncacheable skips coalescing (hit-for-miss).
    pub hit_for_miss: Duration,
}

impl Default for CacheLimits {
    fn default() -> Self {
        CacheLimits {
            budget: 256 << 20,
            max_object: 8 << 20,
            lock_timeout: Duration::from_secs(5),
            max_waiters: 10_000,
            hit_for_miss: Duration::from_secs(5),
        }
    }
}

/// The store and the fills in progress, shared by every worker and route.
#[derive(Debug)]
pub struct ResponseCache {
    /// Stored responses.
    pub store: Store,
    /// Fetches in progress.
    pub fills: Arc<Fills>,
    /// The settings it was built with.
    pub limits: CacheLimits,
    /// Where purges and invalidations are announced to other boxes.
    announce: events::AnnounceSlot,
    /// Where stored responses are shared with other boxes, when they are.
    second: tier::TierSlot,
}

impl ResponseCache {
    /// An empty cache.
    pub fn new(limits: CacheLimits) -> ResponseCache {
        ResponseCache {
            store: Store::new(limits.budget, limits.max_object),
            fills: Arc::new(Fills::new(limits.max_waiters)),
            limits,
            announce: events::AnnounceSlot::default(),
            second: tier::TierSlot::default(),
        }
    }

    /// The counters.
    pub fn stats(&self) -> &Stats {
        &self.store.stats
    }

    /// Prometheus text for the cache's counters and size.
    pub fn render_metrics(&self, out: &mut String) {
        use hayate_core::metrics::{family, sample, Kind};
        use std::sync::atomic::Ordering::Relaxed;
        let s = self.stats();
        let counters = [
            ("hits", "Responses served from the cache", &s.hits),
            ("misses", "Lookups that went to the origin", &s.misses),
            ("stale", "Stale responses served", &s.stale),
            (
                "bypasses",
                "Requests that did not use the cache",
                &s.bypasses,
            ),
            ("stores", "Responses stored", &s.stores),
            (
                "revalidations",
                "Stored responses refreshed by a 304",
                &s.revalidations,
            ),
            (
                "evictions",
                "Entries evicted to stay within the budget",
                &s.evictions,
            ),
            (
                "coalesced",
                "Requests that waited for another's fetch",
                &s.coalesced,
            ),
        ];
        for (name, help, c) in counters {
            let name = format!("hayate_cache_{name}_total");
            family(out, &name, &format!("{help}."), Kind::Counter);
            sample(out, &name, &[], c.load(Relaxed));
        }
        let gauges = [
            (
                "hayate_cache_bytes",
                "Bytes held by the response cache.",
                self.store.bytes(),
            ),
            (
                "hayate_cache_entries",
                "URLs held by the response cache.",
                self.store.len() as u64,
            ),
        ];
        for (name, help, value) in gauges {
            family(out, name, help, Kind::Gauge);
            sample(out, name, &[], value);
        }
    }
}
