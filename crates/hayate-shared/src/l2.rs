//! The shared cache tier (L2): responses one box stored, kept in Redis for
//! the others. A box's local miss asks Redis (once per fill, by its
//! leader) before the origin; every response a box stores locally is
//! written here in the background.
//!
//! Redis keys (binary, under `hayate:l2:`):
//! - `e:` + primary key (host NUL target): the response, or, when its
//!   responses vary, the names of the fields that pick the variant;
//! - `v:` + primary key + NUL + the variant's Vary names and values: one
//!   variant's response;
//! - `p:` + path (no query): the set of the keys above stored for that
//!   path, on every host and query, so a purge by URL and an invalidation
//!   find them;
//! - `t:` + tag: the set of the keys of responses tagged so.
//!
//! Every key expires when its response can no longer answer: its freshness
//! left plus its stale windows. A set, and a primary key naming Vary
//! fields, lives as long as its longest-lived member (a set may name keys
//! already expired; deleting those is harmless).
//!
//! Never a request's bottleneck: every call is bounded by the tier's
//! timeout and goes through the [`Breaker`]; writes go through a bounded
//! queue to one task (full: dropped and counted); a lookup that fails or
//! times out is a miss.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hayate_cache::store::{self, Stored};
use hayate_cache::tier::{Found, SecondTier};
use hayate_cache::{CacheEvent, VaryKey};
use hayate_core::metrics::{family, sample, Kind, MetricsSource};
use redis::aio::ConnectionManager;
use tokio::sync::{mpsc, oneshot};

use crate::breaker::{Breaker, BreakerState};
use crate::record::{self, Value};

/// Writes waiting for the writer task: beyond this, while Redis is slow,
/// new ones are dropped (the response is still served and stored locally).
const WRITE_QUEUE: usize = 1024;

/// The longest a response stays in Redis, whatever its freshness: a
/// `max-age` of years would otherwise hold memory every box shares.
const MAX_TTL: Duration = Duration::from_secs(7 * 86_400);

/// Counters of the L2 tier, for `/metrics` and `hayate status`.
#[derive(Debug, Default)]
pub struct L2Stats {
    hits: AtomicU64,
    misses: AtomicU64,
    writes: AtomicU64,
    errors: AtomicU64,
    skipped: AtomicU64,
    too_large: AtomicU64,
    unreadable: AtomicU64,
    dropped: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// Which members of a set (Redis keys) an event removes.
type Removes = Box<dyn Fn(&[u8]) -> bool + Send>;

/// One response to write.
struct Write {
    key: Box<[u8]>,
    stored: Arc<Stored>,
    stale_window: Duration,
}

/// What the writer task does, in the order it was asked: a purge's
/// deletions come after every write this box queued before it, so none of
/// those lands after them and outlives the purge.
enum Job {
    Write(Write),
    /// Delete what the event removes, then say so.
    Forget(CacheEvent, oneshot::Sender<()>),
}

/// The L2 tier: looked up by the cache's fills, written by its stores.
pub struct L2 {
    conn: ConnectionManager,
    /// The runtime the tier started on, where every Redis call runs: the
    /// connection's driver and its reconnections live there, not on
    /// whichever worker asked first (which may be busy serving).
    runtime: tokio::runtime::Handle,
    timeout: Duration,
    max_object: u64,
    breaker: Breaker,
    stats: L2Stats,
    writes: mpsc::Sender<Job>,
}

impl std::fmt::Debug for L2 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("L2")
            .field("timeout", &self.timeout)
            .field("breaker", &self.breaker.state(Instant::now()))
            .finish_non_exhaustive()
    }
}

impl L2 {
    /// The tier over `client`, with its writer task on the current
    /// runtime. The connection is made on first use, and again after
    /// Redis went away.
    pub(crate) fn start(
        client: redis::Client,
        timeout: Duration,
        max_object: u64,
    ) -> Result<Arc<L2>, String> {
        let conn = crate::connection(client, timeout)?;
        let (writes, rx) = mpsc::channel(WRITE_QUEUE);
        let l2 = Arc::new(L2 {
            conn,
            runtime: tokio::runtime::Handle::current(),
            timeout,
            max_object,
            breaker: Breaker::default(),
            stats: L2Stats::default(),
            writes,
        });
        tokio::spawn(write_all(Arc::downgrade(&l2), rx));
        Ok(l2)
    }

    /// Runs `call` against Redis if the breaker allows, within the
    /// timeout; `None` when skipped, failed or late (counted).
    async fn call<T>(
        &self,
        call: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> Option<T> {
        if !self.breaker.allow(Instant::now()) {
            bump(&self.stats.skipped);
            return None;
        }
        self.call_anyway(call).await
    }

    /// [`L2::call`] even while the breaker is open, for what must be tried
    /// whenever it can be and never delays a request (a purge's deletes):
    /// its outcome still tells the breaker.
    async fn call_anyway<T>(
        &self,
        call: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> Option<T> {
        match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(t)) => {
                self.breaker.success();
                Some(t)
            }
            Ok(Err(e)) => {
                log::debug!("shared tier: Redis: {e}");
                bump(&self.stats.errors);
                self.breaker.failure(Instant::now());
                None
            }
            Err(_) => {
                log::debug!("shared tier: Redis did not answer in {:?}", self.timeout);
                bump(&self.stats.errors);
                self.breaker.failure(Instant::now());
                None
            }
        }
    }

    /// The value under `key` and the milliseconds left before it expires,
    /// read together.
    async fn get(&self, key: &[u8]) -> Option<Option<(Value, u64)>> {
        // Asked before the call is handed to the tier's runtime: with the
        // breaker open a lookup costs nothing, not a cross-thread wake-up
        // and a reconnection attempt (measured: 20 % fewer misses per
        // second with Redis down, before).
        if !self.breaker.allow(Instant::now()) {
            bump(&self.stats.skipped);
            return None;
        }
        let mut conn = self.conn.clone();
        let mut pipe = redis::pipe();
        pipe.atomic().cmd("GET").arg(key).cmd("PTTL").arg(key);
        // Left to end by itself when the caller stops waiting (the
        // connection's own response timeout is the same bound).
        let read = self
            .runtime
            .spawn(async move { pipe.query_async::<(Option<Vec<u8>>, i64)>(&mut conn).await });
        let read = async move {
            read.await
                .map_err(|e| redis::RedisError::from(std::io::Error::other(e)))?
        };
        let (value, left) = self.call_anyway(read).await?;
        let Some(value) = value else {
            return Some(None);
        };
        match (record::decode(&value), u64::try_from(left)) {
            (Some(v), Ok(left)) => Some(Some((v, left))),
            // Set without a TTL: not written by hayate either.
            (Some(_), Err(_)) | (None, _) => {
                log::warn!(
                    "shared tier: {} holds a value hayate cannot read; ignored",
                    String::from_utf8_lossy(key)
                );
                bump(&self.stats.unreadable);
                Some(None)
            }
        }
    }

    /// The response for `key` and a request whose Vary key for a list of
    /// names `vary` gives; `None`: not there, unreadable, or Redis
    /// unavailable.
    async fn find(&self, key: &[u8], vary: &dyn Fn(&[Vec<u8>]) -> VaryKey) -> Option<Stored> {
        let found = match self.get(&entry_key(key)).await? {
            Some((Value::Response(r), left)) if r.is_variant(&VaryKey::default()) => {
                Some((r, left))
            }
            Some((Value::Variants(names), _)) => {
                let wanted = vary(&names);
                match self.get(&variant_key(key, &wanted)).await? {
                    Some((Value::Response(r), left)) if r.is_variant(&wanted) => Some((r, left)),
                    _ => None,
                }
            }
            _ => None,
        };
        match found {
            Some((r, left)) => {
                bump(&self.stats.hits);
                Some(r.into_stored(left, Instant::now()))
            }
            None => {
                bump(&self.stats.misses);
                None
            }
        }
    }

    /// Writes one response and indexes it by path and tags.
    async fn write(&self, w: Write) {
        let now = Instant::now();
        let s = &w.stored;
        let age_ms = s
            .initial_age
            .saturating_mul(1000)
            .saturating_add(now.saturating_duration_since(s.stored_at).as_millis() as u64);
        let left = (s.lifetime.as_millis() as u64).saturating_sub(age_ms);
        let ttl_ms = left
            .saturating_add(w.stale_window.as_millis() as u64)
            .min(MAX_TTL.as_millis() as u64);
        if ttl_ms == 0 {
            return; // nothing another box could serve
        }
        let entry = entry_key(&w.key);
        // In one transaction: a write cut short leaves no key without a TTL.
        let mut pipe = redis::pipe();
        pipe.atomic();
        let target = if s.vary == VaryKey::default() {
            entry.clone()
        } else {
            // The names stay as long as the longest-lived variant needs them.
            let names = record::encode_variants(s.vary.names().collect::<Vec<_>>().into_iter());
            pipe.cmd("SET")
                .arg(&entry)
                .arg(names)
                .arg("KEEPTTL")
                .ignore();
            lengthen(&mut pipe, &entry, ttl_ms);
            variant_key(&w.key, &s.vary)
        };
        set(
            &mut pipe,
            &target,
            &record::encode_response(s, age_ms, ttl_ms),
            ttl_ms,
        );
        let path = path_key(&w.key);
        index(&mut pipe, &path, &[&entry, &target], ttl_ms);
        for tag in s.tags.iter() {
            index(&mut pipe, &tag_key(tag), &[&target], ttl_ms);
        }
        let mut conn = self.conn.clone();
        if self
            .call(async move { pipe.query_async::<()>(&mut conn).await })
            .await
            .is_some()
        {
            bump(&self.stats.writes);
        }
    }

    /// Deletes the L2 copies `event` removes once the writes this box
    /// queued before it are done, and returns then: every box calls it
    /// before it applies an event (again, on the box where it started),
    /// so that no box refills from a copy the event meant to remove.
    pub(crate) async fn forget_after_writes(&self, event: &CacheEvent) {
        let (done, deleted) = oneshot::channel();
        if self
            .writes
            .send(Job::Forget(event.clone(), done))
            .await
            .is_ok()
        {
            let _ = deleted.await;
        }
    }

    /// Deletes the L2 copies `event` removes.
    async fn forget(&self, event: &CacheEvent) {
        let (set, keep) = removed_by(event);
        let mut conn = self.conn.clone();
        let Some(members) = self
            .call_anyway(async {
                redis::cmd("SMEMBERS")
                    .arg(&set)
                    .query_async::<Vec<Vec<u8>>>(&mut conn)
                    .await
            })
            .await
        else {
            return;
        };
        let gone: Vec<&Vec<u8>> = members.iter().filter(|m| keep(m)).collect();
        // In one transaction: no reader sees the keys gone but still in
        // their sets.
        let mut pipe = redis::pipe();
        pipe.atomic();
        if let CacheEvent::Invalidate { host, target } = event {
            pipe.cmd("DEL")
                .arg(entry_key(&store::key(host, target)))
                .ignore();
        }
        if !gone.is_empty() {
            pipe.cmd("DEL").arg(&gone).ignore();
            pipe.cmd("SREM").arg(&set).arg(&gone).ignore();
        }
        if pipe.is_empty() {
            return;
        }
        let mut conn = self.conn.clone();
        self.call_anyway(async move { pipe.query_async::<()>(&mut conn).await })
            .await;
    }

    /// The breaker's state now.
    pub fn breaker(&self) -> BreakerState {
        self.breaker.state(Instant::now())
    }

    /// One line for `hayate status`.
    pub fn summary(&self) -> String {
        let s = &self.stats;
        let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
        format!(
            "L2 breaker {}, {} hits, {} misses, {} writes, {} errors",
            self.breaker().as_str(),
            n(&s.hits),
            n(&s.misses),
            n(&s.writes),
            n(&s.errors)
        )
    }
}

impl SecondTier for L2 {
    fn lookup<'a>(&'a self, key: &'a [u8], vary: &'a dyn Fn(&[Vec<u8>]) -> VaryKey) -> Found<'a> {
        Box::pin(self.find(key, vary))
    }

    fn keep(&self, key: &[u8], stored: &Arc<Stored>, stale_window: Duration) {
        if stored.body.len() as u64 > self.max_object {
            bump(&self.stats.too_large);
            return;
        }
        // Redis skipped: not even queued and encoded.
        if self.breaker.state(Instant::now()) == BreakerState::Open {
            bump(&self.stats.skipped);
            return;
        }
        let write = Write {
            key: key.into(),
            stored: stored.clone(),
            stale_window,
        };
        if self.writes.try_send(Job::Write(write)).is_err() {
            bump(&self.stats.dropped);
        }
    }
}

/// The writer task: one job at a time, each call bounded; ends with the
/// tier.
async fn write_all(l2: std::sync::Weak<L2>, mut rx: mpsc::Receiver<Job>) {
    while let Some(job) = rx.recv().await {
        let Some(l2) = l2.upgrade() else { return };
        match job {
            Job::Write(w) => l2.write(w).await,
            Job::Forget(event, done) => {
                l2.forget(&event).await;
                let _ = done.send(());
            }
        }
    }
}

/// The set of keys an event looks in, and which of its members it removes.
fn removed_by(event: &CacheEvent) -> (Vec<u8>, Removes) {
    match event {
        CacheEvent::PurgeUrl(url) => {
            let (host, path) = hayate_cache::events::purged_host_and_path(url);
            let host = host.to_ascii_lowercase().into_bytes();
            let prefixes = [entry_key(&host), variant_key_prefix(&host)];
            let every_host = host.is_empty();
            let on_host = move |m: &[u8]| {
                every_host
                    || prefixes
                        .iter()
                        .any(|p| m.starts_with(p) && m.get(p.len()) == Some(&0))
            };
            (set_key(b"p:", path.as_bytes()), Box::new(on_host))
        }
        CacheEvent::PurgeTag(tag) => (tag_key(tag.as_bytes()), Box::new(|_: &[u8]| true)),
        CacheEvent::Invalidate { host, target } => {
            let key = store::key(host, target);
            let entry = entry_key(&key);
            let mut variants = variant_key_prefix(&key);
            variants.push(0);
            (
                path_key(&key),
                Box::new(move |m: &[u8]| m == entry || m.starts_with(&variants)),
            )
        }
    }
}

/// `SET key value PX ttl`.
fn set(pipe: &mut redis::Pipeline, key: &[u8], value: &[u8], ttl_ms: u64) {
    pipe.cmd("SET")
        .arg(key)
        .arg(value)
        .arg("PX")
        .arg(ttl_ms)
        .ignore();
}

/// Adds `members` to the set `set`, which then lives at least `ttl_ms`.
fn index(pipe: &mut redis::Pipeline, set: &[u8], members: &[&Vec<u8>], ttl_ms: u64) {
    pipe.cmd("SADD").arg(set).arg(members).ignore();
    lengthen(pipe, set, ttl_ms);
}

/// Makes `key` live at least `ttl_ms` more: `NX` gives a key without a TTL
/// one, `GT` only ever lengthens it (Redis 7).
fn lengthen(pipe: &mut redis::Pipeline, key: &[u8], ttl_ms: u64) {
    for option in ["NX", "GT"] {
        pipe.cmd("PEXPIRE")
            .arg(key)
            .arg(ttl_ms)
            .arg(option)
            .ignore();
    }
}

const PREFIX: &[u8] = b"hayate:l2:";

fn set_key(kind: &[u8], name: &[u8]) -> Vec<u8> {
    [PREFIX, kind, name].concat()
}

/// The key of a primary key's response (or its variants' names).
fn entry_key(key: &[u8]) -> Vec<u8> {
    set_key(b"e:", key)
}

/// The start of every variant key of a primary key (a NUL follows).
fn variant_key_prefix(key: &[u8]) -> Vec<u8> {
    set_key(b"v:", key)
}

/// The key of one variant.
fn variant_key(key: &[u8], vary: &VaryKey) -> Vec<u8> {
    let mut k = variant_key_prefix(key);
    k.push(0);
    k.extend_from_slice(&record::variant_suffix(vary));
    k
}

/// The set of the keys stored for a primary key's path.
fn path_key(key: &[u8]) -> Vec<u8> {
    let target = key
        .iter()
        .position(|&b| b == 0)
        .map_or(key, |nul| &key[nul + 1..]);
    let path = target.split(|&b| b == b'?').next().unwrap_or_default();
    set_key(b"p:", path)
}

/// The set of the keys of responses tagged `tag`.
fn tag_key(tag: &[u8]) -> Vec<u8> {
    set_key(b"t:", tag)
}

impl MetricsSource for L2 {
    fn render(&self, out: &mut String) {
        let s = &self.stats;
        let counters = [
            (
                "hits",
                "Local misses answered by the shared tier (L2)",
                &s.hits,
            ),
            (
                "misses",
                "Local misses the shared tier (L2) could not answer",
                &s.misses,
            ),
            (
                "writes",
                "Responses written to the shared tier (L2)",
                &s.writes,
            ),
            (
                "errors",
                "L2 calls that failed or took longer than shared_timeout",
                &s.errors,
            ),
            (
                "skipped",
                "L2 calls skipped while the circuit breaker was open",
                &s.skipped,
            ),
            (
                "too_large",
                "Responses not written to L2: larger than shared_max_object",
                &s.too_large,
            ),
            (
                "unreadable",
                "L2 values ignored: not a response this hayate can read",
                &s.unreadable,
            ),
            (
                "write_dropped",
                "L2 writes dropped: the queue to Redis was full",
                &s.dropped,
            ),
        ];
        for (name, help, value) in counters {
            let name = format!("hayate_shared_l2_{name}_total");
            family(out, &name, help, Kind::Counter);
            sample(out, &name, &[], value.load(Ordering::Relaxed));
        }
        let name = "hayate_shared_l2_breaker";
        family(
            out,
            name,
            "The L2 circuit breaker: 0 closed, 1 open (Redis skipped), 2 half-open (probing)",
            Kind::Gauge,
        );
        sample(out, name, &[], self.breaker().gauge());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_an_event_removes() {
        let en = {
            let names = vec![b"accept-language".to_vec()];
            VaryKey::new(&names, |_: &[u8]| vec![&b"en"[..]])
        };
        let k = |host: &[u8], target: &[u8]| store::key(host, target);
        let of = |event: CacheEvent, keys: &[Vec<u8>]| {
            let (set, removes) = removed_by(&event);
            let gone: Vec<bool> = keys.iter().map(|m| removes(m)).collect();
            (String::from_utf8_lossy(&set).into_owned(), gone)
        };
        let keys = [
            entry_key(&k(b"a.test", b"/p?x=1")),
            variant_key(&k(b"a.test", b"/p?x=1"), &en),
            entry_key(&k(b"a.test", b"/p?x=10")),
            entry_key(&k(b"a.testx", b"/p")),
            variant_key(&k(b"b.test", b"/p"), &en),
        ];
        let url = |u: &str| CacheEvent::PurgeUrl(u.into());
        assert_eq!(
            of(url("http://A.test/p?y"), &keys),
            (
                "hayate:l2:p:/p".into(),
                vec![true, true, true, false, false]
            )
        );
        assert_eq!(
            of(url("/p"), &keys),
            ("hayate:l2:p:/p".into(), vec![true; 5])
        );
        let invalidate = CacheEvent::Invalidate {
            host: b"a.test".to_vec(),
            target: b"/p?x=1".to_vec(),
        };
        assert_eq!(
            of(invalidate, &keys),
            (
                "hayate:l2:p:/p".into(),
                vec![true, true, false, false, false]
            )
        );
        assert_eq!(
            of(CacheEvent::PurgeTag("t".into()), &keys),
            ("hayate:l2:t:t".into(), vec![true; 5])
        );
    }

    #[test]
    fn keys_of_a_url() {
        let key = store::key(b"A.test", b"/p/q?x=1");
        assert_eq!(entry_key(&key), b"hayate:l2:e:a.test\0/p/q?x=1");
        assert_eq!(path_key(&key), b"hayate:l2:p:/p/q");
        let names = vec![b"accept-language".to_vec()];
        let en = VaryKey::new(&names, |_: &[u8]| vec![&b"en"[..]]);
        let fr = VaryKey::new(&names, |_: &[u8]| vec![&b"fr"[..]]);
        let (ken, kfr) = (variant_key(&key, &en), variant_key(&key, &fr));
        assert_ne!(ken, kfr);
        let mut prefix = variant_key_prefix(&key);
        prefix.push(0);
        assert!(ken.starts_with(&prefix) && kfr.starts_with(&prefix));
    }
}
