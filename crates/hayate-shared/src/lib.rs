//! The shared tier: several hayates behind DNS or a load balancer share
//! what one of them learns through Redis (or Valkey). One module per thing
//! shared:
//! - `events`: the response cache's purges and invalidations, so a
//!   `hayate purge` or a POST on one box reaches every box's cache.
//! - [`acme_store`]: ACME's account, certificates, locks and challenge
//!   answers, so one box orders a name's certificate and every box serves
//!   it (private keys sealed by `sealing`).
//! - `l2`: the shared cache tier, responses one box fetched served by the
//!   others (`record`: their binary form; `breaker`: the circuit breaker
//!   that keeps a failing Redis off the request path).
//! - [`fleet_limit`]: rate limits counted for every box together.
//!
//! Redis never takes the site down: the calls on a request's path are the
//! L2 lookup of a local miss (once per fill) and a fleet-wide rate
//! limit's count, each bounded by `shared_timeout` behind a circuit
//! breaker (the limit then counts on the box); a box applies its own purges
//! at once and hands writes and announcements to background tasks through
//! bounded queues (full: dropped and counted, never waited on); the
//! subscriber reconnects with a backoff doubling from 100 ms to 5 s; and
//! `/metrics`, `/status.json` and `hayate status` show the tier's state.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hayate_cache::CacheEvent;
use hayate_core::metrics::{family, sample, Kind, MetricsSource};
use tokio::sync::mpsc;

pub mod acme_store;
mod breaker;
mod events;
pub mod fleet_limit;
mod l2;
pub mod record;
mod sealing;

pub use acme_store::RedisAcmeStore;
pub use breaker::BreakerState;
pub use fleet_limit::FleetLimits;
pub use l2::L2;

/// Announcements waiting for the publisher: a burst of invalidations
/// beyond this while Redis is slow is dropped (counted), not queued
/// without bound.
const QUEUE: usize = 1024;

/// The longest wait between reconnection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Where the tier is and how to talk to it.
#[derive(Debug, Clone)]
pub struct SharedSettings {
    /// `redis://host:port[/db]` (or `rediss://`, `redis+unix://`).
    pub url: String,
    /// The bound on every Redis call.
    pub timeout: Duration,
    /// The largest response body written to the L2 tier.
    pub max_object: u64,
}

/// The tier's counters, for `/metrics`.
#[derive(Debug, Default)]
pub struct SharedStats {
    up: AtomicBool,
    published: AtomicU64,
    received: AtomicU64,
    dropped: AtomicU64,
    failures: AtomicU64,
}

/// A running shared tier: announce this box's cache events with
/// [`SharedTier::announce`]; other boxes' events reach `apply`.
#[derive(Debug, Clone)]
pub struct SharedTier {
    id: Arc<str>,
    queue: mpsc::Sender<CacheEvent>,
    stats: Arc<SharedStats>,
    l2: Arc<L2>,
    fleet: Arc<FleetLimits>,
}

impl SharedTier {
    /// Starts the publisher and the subscriber on the current runtime
    /// (they run while it runs); `apply` gets every other box's event, and
    /// this box's own again once their L2 copies are deleted (what a fill
    /// read from Redis in between is dropped).
    /// Fails only on a URL the client cannot use; an unreachable Redis is
    /// retried in the background.
    pub fn start(
        settings: SharedSettings,
        apply: impl Fn(&CacheEvent) + Send + Sync + 'static,
    ) -> Result<SharedTier, String> {
        let client = redis::Client::open(settings.url.as_str())
            .map_err(|e| format!("shared {}: {e}", settings.url))?;
        let id: Arc<str> = format!("{}-{}", std::process::id(), random_suffix()).into();
        let stats = Arc::new(SharedStats::default());
        let (queue, rx) = mpsc::channel(QUEUE);
        let l2 = L2::start(client.clone(), settings.timeout, settings.max_object)?;
        let fleet = FleetLimits::start(client.clone(), settings.timeout)?;
        let apply: events::Apply = Arc::new(apply);
        tokio::spawn(events::publish(
            client.clone(),
            settings.timeout,
            id.clone(),
            rx,
            stats.clone(),
            (l2.clone(), apply.clone()),
        ));
        tokio::spawn(events::subscribe(
            client,
            settings.timeout,
            id.clone(),
            stats.clone(),
            (l2.clone(), apply),
        ));
        Ok(SharedTier {
            id,
            queue,
            stats,
            l2,
            fleet,
        })
    }

    /// Announces an event of this box to the others (any thread; never
    /// waits).
    pub fn announce(&self, event: &CacheEvent) {
        if self.queue.try_send(event.clone()).is_err() {
            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The tier's metrics source.
    pub fn metrics(&self) -> Arc<SharedStats> {
        self.stats.clone()
    }

    /// The shared cache tier (L2), for the response cache and `/metrics`.
    pub fn l2(&self) -> Arc<L2> {
        self.l2.clone()
    }

    /// The fleet-wide rate limits' counts.
    pub fn fleet_limits(&self) -> Arc<FleetLimits> {
        self.fleet.clone()
    }

    /// The tier's state in one line, for `hayate status`.
    pub fn summary(&self) -> String {
        let up = match self.stats.up.load(Ordering::Relaxed) {
            true => "subscribed",
            false => "not subscribed (Redis unreachable)",
        };
        format!(
            "shared tier: {up}; {}; {}\n",
            self.l2.summary(),
            self.fleet.summary()
        )
    }

    /// This box's id in the messages.
    pub fn id(&self) -> &str {
        &self.id
    }
}

/// A connection to Redis for calls on a request's path (the L2 tier's,
/// the fleet's rate limits: one each, so neither queues behind the
/// other): made on first use and again after Redis went away, every call
/// bounded by `timeout`.
fn connection(
    client: redis::Client,
    timeout: Duration,
) -> Result<redis::aio::ConnectionManager, String> {
    let config = redis::aio::ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout))
        .set_number_of_retries(1)
        .set_max_delay(MAX_BACKOFF);
    redis::aio::ConnectionManager::new_lazy_with_config(client, config)
        .map_err(|e| format!("shared tier: {e}"))
}

/// A per-process suffix for the box id: two processes with one pid (two
/// hosts, or containers) do not take each other's messages for their own.
fn random_suffix() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

impl MetricsSource for SharedStats {
    fn render(&self, out: &mut String) {
        let name = "hayate_shared_up";
        family(
            out,
            name,
            "Whether this box is subscribed to the shared tier (Redis)",
            Kind::Gauge,
        );
        sample(out, name, &[], u8::from(self.up.load(Ordering::Relaxed)));
        let counters = [
            (
                "hayate_shared_published_total",
                "Cache events this box announced to the others",
                &self.published,
            ),
            (
                "hayate_shared_received_total",
                "Cache events from other boxes applied here",
                &self.received,
            ),
            (
                "hayate_shared_dropped_total",
                "Cache events not announced: the queue to Redis was full",
                &self.dropped,
            ),
            (
                "hayate_shared_failures_total",
                "Announcements that Redis did not take (down, slow, refused)",
                &self.failures,
            ),
        ];
        for (name, help, value) in counters {
            family(out, name, help, Kind::Counter);
            sample(out, name, &[], value.load(Ordering::Relaxed));
        }
    }
}
