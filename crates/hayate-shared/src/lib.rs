//! The shared tier: several hayates behind DNS or a load balancer share
//! what one of them learns through Redis (or Valkey). This part carries the
//! response cache's purges and invalidations: a `hayate purge` or a POST on
//! one box reaches every box's cache.
//!
//! Redis is never on a request's path and never takes the site down: a box
//! applies its own purges at once and hands the announcement to a publisher
//! task through a bounded queue (full: dropped and counted, never waited
//! on); every Redis call has a short timeout (`shared_timeout`); the
//! subscriber reconnects with a backoff doubling from 100 ms to 5 s; and
//! `/metrics` says whether the tier is up.
//!
//! Messages are binary-safe Redis values: `v1`, the sender's id, the kind
//! and its fields, separated by newlines (no field can hold one: URLs,
//! tags and request targets are single lines).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use hayate_cache::CacheEvent;
use hayate_core::metrics::{family, sample, Kind, MetricsSource};
use tokio::sync::mpsc;

/// The channel every box publishes to and subscribes on.
const CHANNEL: &str = "hayate:cache-events";

/// Announcements waiting for the publisher: a burst of invalidations
/// beyond this while Redis is slow is dropped (counted), not queued
/// without bound.
const QUEUE: usize = 1024;

/// The subscriber's first wait before reconnecting; doubles up to
/// [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Where the tier is and how to talk to it.
#[derive(Debug, Clone)]
pub struct SharedSettings {
    /// `redis://host:port[/db]` (or `rediss://`, `redis+unix://`).
    pub url: String,
    /// The bound on every Redis call.
    pub timeout: Duration,
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
}

impl SharedTier {
    /// Starts the publisher and the subscriber on the current runtime
    /// (they run while it runs); `apply` gets every other box's event.
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
        tokio::spawn(publish(
            client.clone(),
            settings.timeout,
            id.clone(),
            rx,
            stats.clone(),
        ));
        tokio::spawn(subscribe(
            client,
            settings.timeout,
            id.clone(),
            Box::new(apply),
            stats.clone(),
        ));
        Ok(SharedTier { id, queue, stats })
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

    /// This box's id in the messages.
    pub fn id(&self) -> &str {
        &self.id
    }
}

/// Publishes queued events, each bounded by `timeout`.
async fn publish(
    client: redis::Client,
    timeout: Duration,
    id: Arc<str>,
    mut rx: mpsc::Receiver<CacheEvent>,
    stats: Arc<SharedStats>,
) {
    let config = redis::aio::ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout))
        .set_number_of_retries(1)
        .set_max_delay(MAX_BACKOFF);
    let mut conn: Option<redis::aio::ConnectionManager> = None;
    while let Some(event) = rx.recv().await {
        if conn.is_none() {
            let connecting = client.get_connection_manager_with_config(config.clone());
            match tokio::time::timeout(timeout, connecting).await {
                Ok(Ok(c)) => conn = Some(c),
                Ok(Err(e)) => log::warn!("shared tier: cannot publish (Redis: {e})"),
                Err(_) => {
                    log::warn!("shared tier: cannot publish (Redis did not answer in {timeout:?})")
                }
            }
        }
        let Some(c) = conn.as_mut() else {
            stats.failures.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let message = encode(&id, &event);
        let sent = tokio::time::timeout(
            timeout,
            redis::cmd("PUBLISH")
                .arg(CHANNEL)
                .arg(message)
                .query_async::<i64>(c),
        )
        .await;
        match sent {
            Ok(Ok(_)) => {
                stats.published.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Err(e)) => {
                stats.failures.fetch_add(1, Ordering::Relaxed);
                log::warn!("shared tier: publishing failed: {e}");
            }
            Err(_) => {
                stats.failures.fetch_add(1, Ordering::Relaxed);
                log::warn!("shared tier: publishing took longer than {timeout:?}");
            }
        }
    }
}

/// Subscribes to the channel and applies other boxes' events, reconnecting
/// with a backoff whenever the subscription ends.
async fn subscribe(
    client: redis::Client,
    timeout: Duration,
    id: Arc<str>,
    apply: Box<dyn Fn(&CacheEvent) + Send + Sync>,
    stats: Arc<SharedStats>,
) {
    let mut backoff = FIRST_BACKOFF;
    loop {
        let subscribed = async {
            let mut pubsub = client.get_async_pubsub().await?;
            pubsub.subscribe(CHANNEL).await?;
            Ok::<_, redis::RedisError>(pubsub)
        };
        match tokio::time::timeout(timeout.max(Duration::from_secs(1)), subscribed).await {
            Ok(Ok(pubsub)) => {
                backoff = FIRST_BACKOFF;
                stats.up.store(true, Ordering::Relaxed);
                log::info!("shared tier: subscribed to {CHANNEL}");
                let mut messages = pubsub.into_on_message();
                while let Some(msg) = messages.next().await {
                    let payload: Vec<u8> = msg.get_payload_bytes().to_vec();
                    match decode(&payload) {
                        Some((from, _)) if from == *id => {}
                        Some((_, event)) => {
                            stats.received.fetch_add(1, Ordering::Relaxed);
                            apply(&event);
                        }
                        None => log::warn!("shared tier: a message hayate cannot read"),
                    }
                }
                stats.up.store(false, Ordering::Relaxed);
                log::warn!("shared tier: the subscription ended; reconnecting");
            }
            Ok(Err(e)) => {
                log::warn!("shared tier: cannot subscribe (Redis: {e}); retrying in {backoff:?}")
            }
            Err(_) => log::warn!("shared tier: Redis did not answer; retrying in {backoff:?}"),
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// A message: `v1`, the sender, the kind, its fields; one per line.
fn encode(id: &str, event: &CacheEvent) -> Vec<u8> {
    let mut m = format!("v1\n{id}\n").into_bytes();
    match event {
        CacheEvent::PurgeUrl(url) => m.extend_from_slice(format!("url\n{url}").as_bytes()),
        CacheEvent::PurgeTag(tag) => m.extend_from_slice(format!("tag\n{tag}").as_bytes()),
        CacheEvent::Invalidate { host, target } => {
            m.extend_from_slice(b"invalidate\n");
            m.extend_from_slice(host);
            m.push(b'\n');
            m.extend_from_slice(target);
        }
    }
    m
}

/// The sender and the event of a message; `None` for what is not one.
fn decode(message: &[u8]) -> Option<(String, CacheEvent)> {
    let mut fields = message.split(|&b| b == b'\n');
    if fields.next()? != b"v1" {
        return None;
    }
    let from = String::from_utf8(fields.next()?.to_vec()).ok()?;
    let text = |f: &[u8]| String::from_utf8(f.to_vec()).ok();
    let event = match fields.next()? {
        b"url" => CacheEvent::PurgeUrl(text(fields.next()?)?),
        b"tag" => CacheEvent::PurgeTag(text(fields.next()?)?),
        b"invalidate" => CacheEvent::Invalidate {
            host: fields.next()?.to_vec(),
            target: fields.next()?.to_vec(),
        },
        _ => return None,
    };
    fields.next().is_none().then_some((from, event))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_junk_is_refused() {
        let events = [
            CacheEvent::PurgeUrl("http://a.test/x".into()),
            CacheEvent::PurgeTag("product-7".into()),
            CacheEvent::Invalidate {
                host: b"a.test".to_vec(),
                target: b"/cart?id=1".to_vec(),
            },
        ];
        for e in events {
            let (from, back) = decode(&encode("box-1", &e)).expect("decodes");
            assert_eq!((from.as_str(), back), ("box-1", e));
        }
        for junk in [
            &b""[..],
            b"v2\nx\nurl\n/",
            b"v1\nx\nurl",
            b"v1\nx\nmove\n/",
            b"v1\nx\ntag\nt\nextra",
        ] {
            assert_eq!(decode(junk), None, "{junk:?}");
        }
    }
}
