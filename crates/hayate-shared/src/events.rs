//! Cache events between boxes: a purge or an invalidation on one box is
//! published on one Redis channel and applied by every other box's cache.
//!
//! Messages are binary-safe Redis values: `v1`, the sender's id, the kind
//! and its fields, separated by newlines (no field can hold one: URLs,
//! tags and request targets are single lines).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use hayate_cache::CacheEvent;
use tokio::sync::mpsc;

use crate::{SharedStats, MAX_BACKOFF};

/// The channel every box publishes to and subscribes on.
const CHANNEL: &str = "hayate:cache-events";

/// Tries to publish one event before it is counted as a failure.
const PUBLISH_ATTEMPTS: u32 = 4;

/// The subscriber's first wait before reconnecting (and the publisher's
/// before trying again); doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);

/// What applies an event to this box's cache.
pub(crate) type Apply = Arc<dyn Fn(&CacheEvent) + Send + Sync>;

/// Deletes the L2 copies of each queued event (this box applied it
/// already), applies it again (a fill may have read one of them from Redis
/// in between), then publishes it; each call bounded by `timeout`.
pub(crate) async fn publish(
    client: redis::Client,
    timeout: Duration,
    id: Arc<str>,
    mut rx: mpsc::Receiver<CacheEvent>,
    stats: Arc<SharedStats>,
    (l2, apply): (Arc<crate::L2>, Apply),
) {
    let config = redis::aio::ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout))
        .set_number_of_retries(1)
        .set_max_delay(MAX_BACKOFF);
    let mut conn: Option<redis::aio::ConnectionManager> = None;
    while let Some(event) = rx.recv().await {
        // The L2 copies go first: a box that gets the event must not
        // refill from one.
        l2.forget_after_writes(&event).await;
        apply(&event);
        let message = encode(&id, &event);
        // A purge lost is a stale copy served on another box: a Redis that
        // is reconnecting (the first call after it came back often is) gets
        // a few more tries, 100 ms, 200 ms and 400 ms apart.
        let mut wait = FIRST_BACKOFF;
        for attempt in 1..=PUBLISH_ATTEMPTS {
            match publish_once(&client, &config, &mut conn, timeout, &message).await {
                Ok(()) => {
                    stats.published.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                Err(e) if attempt == PUBLISH_ATTEMPTS => {
                    stats.failures.fetch_add(1, Ordering::Relaxed);
                    log::warn!("shared tier: publishing failed {attempt} times, the last: {e}");
                }
                Err(e) => {
                    log::debug!("shared tier: publishing failed ({e}); again in {wait:?}");
                    tokio::time::sleep(wait).await;
                    wait *= 2;
                }
            }
        }
    }
}

/// Tries to publish an event once: connects first when there is no
/// connection yet; every step bounded by `timeout`.
async fn publish_once(
    client: &redis::Client,
    config: &redis::aio::ConnectionManagerConfig,
    conn: &mut Option<redis::aio::ConnectionManager>,
    timeout: Duration,
    message: &[u8],
) -> Result<(), String> {
    if conn.is_none() {
        let connecting = client.get_connection_manager_with_config(config.clone());
        *conn = Some(
            tokio::time::timeout(timeout, connecting)
                .await
                .map_err(|_| format!("Redis did not answer in {timeout:?}"))?
                .map_err(|e| format!("Redis: {e}"))?,
        );
    }
    let Some(c) = conn.as_mut() else {
        return Err("no connection".into());
    };
    let mut publish = redis::cmd("PUBLISH");
    publish.arg(CHANNEL).arg(message);
    match tokio::time::timeout(timeout, publish.query_async::<i64>(c)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("took longer than {timeout:?}")),
    }
}

/// Subscribes to the channel and applies other boxes' events, reconnecting
/// with a backoff whenever the subscription ends.
pub(crate) async fn subscribe(
    client: redis::Client,
    timeout: Duration,
    id: Arc<str>,
    stats: Arc<SharedStats>,
    (l2, apply): (Arc<crate::L2>, Apply),
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
                            // Its L2 copies first (this box's writes
                            // queued before it included), so no fill
                            // here reads one once it is applied.
                            l2.forget_after_writes(&event).await;
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
