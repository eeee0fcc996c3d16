//! The memory store, shared by every worker: responses by primary key (host
//! and target), each key holding its Vary variants.
//!
//! Built on `quick_cache` (sharded, S3-FIFO eviction weighted by bytes),
//! so readers on different workers rarely meet on a lock and one-hit
//! wonders are evicted before popular responses. A key's variants are an
//! immutable list swapped whole on change, under the key's shard lock: a
//! reader holding an `Arc` keeps a consistent copy, and two workers storing
//! variants of one key at once both keep theirs.
//!
//! A purge or an invalidation must not be undone by a fill that was already
//! on its way: every store names when its request went upstream, and a
//! response requested before the last purge, or before its URL was
//! invalidated, is not kept (it is still served to the clients that asked).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hayate_core::{Fields, Status};
use quick_cache::sync::{Cache, EntryAction, EntryResult};
use quick_cache::{DefaultHashBuilder, Lifecycle, OptionsBuilder, Weighter};
use smallvec::SmallVec;

use crate::directives::ResponseDirectives;
use crate::policy::Freshness;
use crate::vary::VaryKey;

/// Most variants kept per URL; the oldest goes first.
const MAX_VARIANTS: usize = 8;
/// What an entry costs beyond its bytes (key, lists, bookkeeping).
const ENTRY_OVERHEAD: u64 = 256;

/// A primary cache key: the Host and the request target, `host\0target`.
pub type Key = Box<[u8]>;

/// Builds the primary key of a request.
pub fn key(host: &[u8], target: &[u8]) -> Key {
    key_inline(host, target).as_slice().into()
}

/// [`key`] without an allocation for the usual short URL, for lookups
/// (every hit makes one).
pub fn key_inline(host: &[u8], target: &[u8]) -> SmallVec<[u8; 128]> {
    let mut k = SmallVec::with_capacity(host.len() + 1 + target.len());
    k.extend(host.iter().map(u8::to_ascii_lowercase));
    k.push(0);
    k.extend_from_slice(target);
    k
}

/// One stored response.
#[derive(Debug)]
pub struct Stored {
    /// The status.
    pub status: Status,
    /// Fields served with it (no Age, no Set-Cookie, no framing).
    pub head: Arc<Fields>,
    /// The whole body.
    pub body: Bytes,
    /// The request's values of the Vary fields it was stored for.
    pub vary: VaryKey,
    /// ETag, raw.
    pub etag: Option<Bytes>,
    /// Last-Modified, raw.
    pub last_modified: Option<Bytes>,
    /// Cache-Control of the response.
    pub cc: ResponseDirectives,
    /// Freshness lifetime.
    pub lifetime: Duration,
    /// The age it had when stored (corrected_initial_age).
    pub initial_age: u64,
    /// When it was stored (resident time counts from here).
    pub stored_at: Instant,
    /// Surrogate-Key tags.
    pub tags: Box<[Box<[u8]>]>,
    /// The Hayate-Cache-Control value it came with: never served, kept
    /// so that a 304 without one leaves the policy as it was.
    pub own_control: Option<Bytes>,
}

impl Stored {
    /// Bytes it holds, for the budget.
    pub fn weight(&self) -> u64 {
        (self.head.wire().len() + self.body.len() + self.vary.weight()) as u64 + ENTRY_OVERHEAD
    }

    /// Seconds of freshness left at `age` (negative when stale), for
    /// Cache-Status.
    pub fn ttl(&self, age: u64) -> i64 {
        self.lifetime.as_secs() as i64 - age as i64
    }

    /// The same entry with `body` (a fill streamed to its readers keeps
    /// its head, freshness and resident time from when its head arrived).
    pub fn with_body(&self, body: Bytes) -> Stored {
        Stored {
            status: self.status,
            head: self.head.clone(),
            body,
            vary: self.vary.clone(),
            etag: self.etag.clone(),
            last_modified: self.last_modified.clone(),
            cc: self.cc,
            lifetime: self.lifetime,
            initial_age: self.initial_age,
            stored_at: self.stored_at,
            tags: self.tags.clone(),
            own_control: self.own_control.clone(),
        }
    }

    /// Current age in seconds (§4.2.3: corrected_initial_age + resident).
    pub fn age(&self, now: Instant) -> u64 {
        self.initial_age + now.saturating_duration_since(self.stored_at).as_secs()
    }

    /// Its freshness state now.
    pub fn freshness(&self, now: Instant, swr_default: u64, sie_default: u64) -> Freshness {
        Freshness {
            lifetime: self.lifetime.as_secs(),
            age: self.age(now),
            cc: self.cc,
            swr_default,
            sie_default,
        }
    }
}

/// What a key holds: its variants (newest first), or a hit-for-miss mark.
#[derive(Debug, Clone, Default)]
pub struct Entry {
    variants: Vec<Arc<Stored>>,
    /// Responses for this URL were found uncacheable: until then, requests
    /// go straight to the origin without waiting on each other.
    pass_until: Option<Instant>,
    /// When an unsafe request invalidated the URL: responses requested
    /// before then are not stored.
    invalidated_at: Option<Instant>,
    weight: u64,
}

impl Entry {
    /// This entry with `stored` in place of the variant with its Vary
    /// values.
    fn with(&self, stored: Arc<Stored>) -> Entry {
        let mut variants = Vec::with_capacity((self.variants.len() + 1).min(MAX_VARIANTS));
        variants.extend(
            self.variants
                .iter()
                .filter(|s| s.vary != stored.vary)
                .take(MAX_VARIANTS - 1)
                .cloned(),
        );
        variants.insert(0, stored);
        Entry {
            weight: variants.iter().map(|s| s.weight()).sum(),
            variants,
            pass_until: None,
            invalidated_at: self.invalidated_at,
        }
    }
}

/// Counters of the cache, for /metrics and tests.
#[derive(Debug, Default)]
pub struct Stats {
    /// Served from the cache without contacting the origin.
    pub hits: AtomicU64,
    /// Looked up and not usable as is (miss, stale, revalidation).
    pub misses: AtomicU64,
    /// Served stale (stale-while-revalidate, stale-if-error).
    pub stale: AtomicU64,
    /// Not looked up (method, credentials, range, hit-for-miss).
    pub bypasses: AtomicU64,
    /// Responses stored.
    pub stores: AtomicU64,
    /// Stored responses refreshed by a 304.
    pub revalidations: AtomicU64,
    /// Entries evicted to stay within the budget.
    pub evictions: AtomicU64,
    /// Requests that waited for another's fetch (coalesced).
    pub coalesced: AtomicU64,
}

impl Stats {
    /// Adds one to a counter.
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

#[derive(Clone)]
struct ByWeight;

impl Weighter<Key, Arc<Entry>> for ByWeight {
    fn weight(&self, key: &Key, val: &Arc<Entry>) -> u64 {
        // The entry itself costs memory too: a hit-for-miss mark has no
        // variants but must not be free, or a flood of uncacheable URLs
        // outgrows the budget.
        key.len() as u64 + ENTRY_OVERHEAD + val.weight
    }
}

#[derive(Clone)]
struct CountEvictions(Arc<Stats>);

impl Lifecycle<Key, Arc<Entry>> for CountEvictions {
    type RequestState = ();

    fn on_evict(&self, _: &mut (), _: Key, _: Arc<Entry>) {
        Stats::bump(&self.0.evictions);
    }
}

/// The shared store.
pub struct Store {
    map: Cache<Key, Arc<Entry>, ByWeight, DefaultHashBuilder, CountEvictions>,
    /// Counters, shared with whoever reports them.
    pub stats: Arc<Stats>,
    /// The largest response body stored.
    pub max_object: u64,
    /// The origin of `purged_at`.
    born: Instant,
    /// Nanoseconds from `born` to the start of the last purge, plus one
    /// (0: never purged), so a request at the purge's nanosecond is purged.
    purged_at: AtomicU64,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("entries", &self.map.len())
            .field("bytes", &self.map.weight())
            .finish_non_exhaustive()
    }
}

impl Store {
    /// A store holding at most `budget` bytes, objects up to `max_object`.
    pub fn new(budget: u64, max_object: u64) -> Store {
        let stats = Arc::new(Stats::default());
        let options = OptionsBuilder::new()
            .estimated_items_capacity((budget / 16_384).clamp(64, 1 << 20) as usize)
            .weight_capacity(budget.max(1))
            .build()
            .expect("cache options");
        let map = Cache::with_options(
            options,
            ByWeight,
            DefaultHashBuilder::default(),
            CountEvictions(stats.clone()),
        );
        Store {
            map,
            stats,
            max_object,
            born: Instant::now(),
            purged_at: AtomicU64::new(0),
        }
    }

    /// Whether a purge started at or after `requested_at`.
    fn purged_since(&self, requested_at: Instant) -> bool {
        let purged = self.purged_at.load(Ordering::SeqCst);
        purged > requested_at.saturating_duration_since(self.born).as_nanos() as u64
    }

    /// Records a purge starting now; called before its entries are removed.
    fn start_purge(&self) {
        let now = Instant::now()
            .saturating_duration_since(self.born)
            .as_nanos() as u64;
        self.purged_at.fetch_max(now + 1, Ordering::SeqCst);
    }

    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.map.weight()
    }

    /// URLs held.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the store is empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The newest variant of `key` whose Vary values match the request, and
    /// whether the URL is marked hit-for-miss.
    pub fn lookup<'h, V: AsRef<[&'h [u8]]>>(
        &self,
        key: &[u8],
        request_field: impl Fn(&[u8]) -> V,
        now: Instant,
    ) -> Lookup {
        let Some(entry) = self.map.get(key) else {
            return Lookup::Miss;
        };
        if let Some(s) = entry
            .variants
            .iter()
            .find(|s| s.vary.matches(&request_field))
        {
            return Lookup::Found(s.clone());
        }
        if entry.pass_until.is_some_and(|t| t > now) {
            return Lookup::Pass;
        }
        Lookup::Miss
    }

    /// Stores a response under `key`, replacing the variant with the same
    /// Vary values. `requested_at`: when its request went upstream. Refused
    /// (false) above the object size cap, and when the URL was purged or
    /// invalidated since `requested_at`.
    pub fn insert(&self, key: &[u8], stored: Stored, requested_at: Instant) -> bool {
        self.insert_shared(key, Arc::new(stored), requested_at)
    }

    /// [`Store::insert`] of a response the caller keeps a handle on.
    pub fn insert_shared(&self, key: &[u8], stored: Arc<Stored>, requested_at: Instant) -> bool {
        if stored.body.len() as u64 > self.max_object || self.purged_since(requested_at) {
            return false;
        }
        // Read, change and write under the shard's lock: a purge or an
        // invalidation in between cannot be undone by this write.
        let kept = self.update(key, |entry| {
            if entry.invalidated_at.is_some_and(|t| t >= requested_at) {
                return false;
            }
            *entry = Arc::new(entry.with(stored));
            true
        });
        // A purge that began before the write but had passed this key's
        // shard already: take the write back (its removal comes after
        // `start_purge`, so a purge not seen here still removes it).
        if kept && self.purged_since(requested_at) {
            self.map.remove(key);
            return false;
        }
        if kept {
            Stats::bump(&self.stats.stores);
        }
        kept
    }

    /// Marks `key` hit-for-miss for `ttl`: its responses are uncacheable,
    /// so requests skip waiting on each other.
    pub fn mark_pass(&self, key: &[u8], until: Instant) {
        self.update(key, |entry| Arc::make_mut(entry).pass_until = Some(until));
    }

    /// Changes `key`'s entry (an empty one when there is none) under its
    /// shard's lock, and returns what `change` returns. A change that makes
    /// the entry heavier (another variant, a larger body) goes back in
    /// through a placeholder guard, whose insert evicts to keep the budget:
    /// quick_cache recounts the weight of an entry changed in place but
    /// evicts nothing for it.
    fn update<T: Default>(&self, key: &[u8], change: impl FnOnce(&mut Arc<Entry>) -> T) -> T {
        // `change` runs once: on the entry found, or on the new one.
        let mut change = Some(change);
        let mut grown = None;
        let owned: Key = key.into();
        match self.map.entry(&owned, None, |_, entry| {
            let Some(change) = change.take() else {
                return EntryAction::Retain(T::default());
            };
            let mut next = entry.clone();
            let t = change(&mut next);
            if next.weight > entry.weight {
                grown = Some((next, t));
                EntryAction::ReplaceWithGuard
            } else {
                *entry = next;
                EntryAction::Retain(t)
            }
        }) {
            EntryResult::Retained(t) => t,
            EntryResult::Replaced(guard, _old) => match grown.take() {
                Some((next, t)) => {
                    let _ = guard.insert(next);
                    t
                }
                None => T::default(),
            },
            EntryResult::Vacant(guard) => {
                let mut entry = Arc::new(Entry::default());
                let t = change.take().map(|f| f(&mut entry)).unwrap_or_default();
                let _ = guard.insert(entry);
                t
            }
            // Never asked for (no Remove, no timeout).
            EntryResult::Removed(..) | EntryResult::Timeout => T::default(),
        }
    }

    /// Removes every variant of `key`; whether there was one. Used when the
    /// stored response is wrong for everyone (a 304 made it unstorable).
    pub fn remove(&self, key: &[u8]) -> bool {
        self.map
            .remove(key)
            .is_some_and(|(_, e)| !e.variants.is_empty())
    }

    /// Invalidates `key` after an unsafe request (RFC 9111 §4.4): every
    /// variant goes, and responses requested before now are not stored
    /// (a fill already on its way holds the old state). Whether a variant
    /// was there.
    pub fn invalidate(&self, key: &[u8]) -> bool {
        let now = Instant::now();
        self.update(key, |entry| {
            let had = !entry.variants.is_empty();
            *entry = Arc::new(Entry {
                invalidated_at: Some(now),
                ..Entry::default()
            });
            had
        })
    }

    /// Removes every URL whose host and path (query ignored) match, for
    /// purge by URL: all variants and all query strings. Returns how many.
    pub fn purge_url(&self, host: &[u8], path: &[u8]) -> usize {
        self.start_purge();
        let removed = std::cell::Cell::new(0);
        let host = host.to_ascii_lowercase();
        self.map.retain(|k, e| {
            let Some(nul) = k.iter().position(|&b| b == 0) else {
                return true;
            };
            let target = &k[nul + 1..];
            let kpath = target.split(|&b| b == b'?').next().unwrap_or_default();
            let hit = (host.is_empty() || k[..nul] == host[..]) && kpath == path;
            if hit && !e.variants.is_empty() {
                removed.set(removed.get() + 1);
            }
            !hit
        });
        removed.get()
    }

    /// Removes every stored response tagged `tag`; returns how many.
    pub fn purge_tag(&self, tag: &[u8]) -> usize {
        self.start_purge();
        let removed = std::cell::Cell::new(0);
        self.map.retain(|_, e| {
            let hit = e
                .variants
                .iter()
                .any(|s| s.tags.iter().any(|t| &t[..] == tag));
            removed.set(removed.get() + usize::from(hit));
            !hit
        });
        removed.get()
    }
}

/// The result of a lookup.
#[derive(Debug)]
pub enum Lookup {
    /// A stored response for this request's variant.
    Found(Arc<Stored>),
    /// Nothing stored; the URL was recently found uncacheable.
    Pass,
    /// Nothing stored.
    Miss,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(body: &str, vary: VaryKey) -> Stored {
        Stored {
            status: Status::OK,
            head: Arc::new(Fields::parse_wire(b"Content-Type: text/plain\r\n")),
            body: Bytes::copy_from_slice(body.as_bytes()),
            vary,
            etag: None,
            last_modified: None,
            cc: ResponseDirectives::default(),
            lifetime: Duration::from_secs(60),
            initial_age: 0,
            stored_at: Instant::now(),
            tags: vec![b"t1".to_vec().into_boxed_slice()].into_boxed_slice(),
            own_control: None,
        }
    }

    fn body(l: Lookup) -> Option<String> {
        match l {
            Lookup::Found(s) => Some(String::from_utf8_lossy(&s.body).into_owned()),
            _ => None,
        }
    }

    #[test]
    fn variants_by_vary_values() {
        let store = Store::new(1 << 20, 1 << 16);
        let k = key(b"Example.COM", b"/a?x=1");
        assert_eq!(&k[..], b"example.com\0/a?x=1");
        let names = vec![b"accept-language".to_vec()];
        let en = VaryKey::new(&names, |_: &[u8]| vec![&b"en"[..]]);
        let fr = VaryKey::new(&names, |_: &[u8]| vec![&b"fr"[..]]);
        assert!(store.insert(&k, stored("en", en), Instant::now()));
        assert!(store.insert(&k, stored("fr", fr), Instant::now()));
        let now = Instant::now();
        let ask = |lang: &'static [u8]| body(store.lookup(&k, move |_| vec![lang], now));
        assert_eq!(ask(b"en").as_deref(), Some("en"));
        assert_eq!(ask(b"fr").as_deref(), Some("fr"));
        assert_eq!(ask(b"de"), None);
        assert_eq!(store.len(), 1);

        assert_eq!(store.purge_tag(b"t2"), 0);
        assert_eq!(store.purge_tag(b"t1"), 1);
        assert_eq!(ask(b"en"), None);
    }

    #[test]
    fn purge_url_takes_every_query_and_variant() {
        let store = Store::new(1 << 20, 1 << 16);
        for t in [&b"/p"[..], b"/p?a=1", b"/p/q", b"/other"] {
            store.insert(
                &key(b"h", t),
                stored("x", VaryKey::default()),
                Instant::now(),
            );
        }
        assert_eq!(store.purge_url(b"h", b"/p"), 2);
        assert_eq!(store.len(), 2);
        assert_eq!(store.purge_url(b"", b"/other"), 1);
    }

    #[test]
    fn pass_marks_expire_and_stores_clear_them() {
        let store = Store::new(1 << 20, 1 << 16);
        let k = key(b"h", b"/x");
        let now = Instant::now();
        store.mark_pass(&k, now + Duration::from_secs(5));
        assert!(matches!(
            store.lookup(&k, |_| Vec::<&[u8]>::new(), now),
            Lookup::Pass
        ));
        assert!(matches!(
            store.lookup(&k, |_| Vec::<&[u8]>::new(), now + Duration::from_secs(6)),
            Lookup::Miss
        ));
        store.insert(&k, stored("x", VaryKey::default()), Instant::now());
        assert!(matches!(
            store.lookup(&k, |_| Vec::<&[u8]>::new(), now),
            Lookup::Found(_)
        ));
    }

    #[test]
    fn budget_holds_under_a_flood_of_keys() {
        let budget = 256 * 1024;
        let store = Store::new(budget, 64 * 1024);
        let body = "x".repeat(1000);
        for i in 0..5_000 {
            store.insert(
                &key(b"h", format!("/k{i}").as_bytes()),
                stored(&body, VaryKey::default()),
                Instant::now(),
            );
        }
        assert!(store.bytes() <= budget, "{} > {budget}", store.bytes());
        assert!(store.stats.evictions.load(Ordering::Relaxed) > 4_000);
        assert!(!store.insert(
            &key(b"h", b"/big"),
            stored(&"y".repeat(70_000), VaryKey::default()),
            Instant::now()
        ));
    }

    #[test]
    fn a_new_variant_of_a_stored_key_keeps_the_budget() {
        // Every key stored once fits (100 × ~1.6 KB with the overhead); a second variant of
        // each grows keys already there, which must evict like a new key.
        let budget = 256 * 1024;
        let store = Store::new(budget, 64 * 1024);
        let body = "x".repeat(1000);
        let names = vec![b"accept-language".to_vec()];
        for lang in ["en", "fr"] {
            for i in 0..100 {
                let vary = VaryKey::new(&names, |_: &[u8]| vec![lang.as_bytes()]);
                let k = key(b"h", format!("/k{i}").as_bytes());
                store.insert(&k, stored(&body, vary), Instant::now());
            }
            assert!(
                store.bytes() <= budget,
                "{lang}: {} > {budget}",
                store.bytes()
            );
        }
        assert!(store.stats.evictions.load(Ordering::Relaxed) > 0);
    }

    #[test]
    fn hit_for_miss_marks_count_against_the_budget() {
        let budget = 256 * 1024;
        let store = Store::new(budget, 64 * 1024);
        let until = Instant::now() + Duration::from_secs(60);
        for i in 0..20_000 {
            store.mark_pass(&key(b"h", format!("/uncacheable/{i}").as_bytes()), until);
        }
        assert!(store.bytes() <= budget, "{} > {budget}", store.bytes());
        let most = (budget / ENTRY_OVERHEAD) as usize;
        assert!(
            store.len() <= most,
            "{} marks kept, at most {most}",
            store.len()
        );
    }

    #[test]
    fn a_fill_requested_before_a_purge_is_not_stored() {
        let store = Store::new(1 << 20, 1 << 16);
        let k = key(b"h", b"/p");
        let before = Instant::now();
        store.insert(&k, stored("old", VaryKey::default()), before);
        assert_eq!(store.purge_url(b"h", b"/p"), 1);
        assert!(
            !store.insert(&k, stored("old too", VaryKey::default()), before),
            "requested before the purge"
        );
        assert!(body(store.lookup(&k, |_| Vec::<&[u8]>::new(), Instant::now())).is_none());
        assert!(store.purge_tag(b"none") == 0);
        assert!(!store.insert(&k, stored("x", VaryKey::default()), before));
        assert!(store.insert(&k, stored("new", VaryKey::default()), Instant::now()));
        assert_eq!(
            body(store.lookup(&k, |_| Vec::<&[u8]>::new(), Instant::now())).as_deref(),
            Some("new")
        );
    }

    #[test]
    fn a_fill_requested_before_an_invalidation_is_not_stored() {
        let store = Store::new(1 << 20, 1 << 16);
        let (k, other) = (key(b"h", b"/p"), key(b"h", b"/q"));
        let before = Instant::now();
        assert!(store.insert(&k, stored("old", VaryKey::default()), before));
        assert!(store.invalidate(&k));
        assert!(!store.invalidate(&k), "nothing left");
        let none = |k: &Key| store.lookup(k, |_| Vec::<&[u8]>::new(), Instant::now());
        assert!(matches!(none(&k), Lookup::Miss));
        assert!(!store.insert(&k, stored("stale", VaryKey::default()), before));
        assert!(matches!(none(&k), Lookup::Miss));
        // Other URLs are not affected, later fills are stored.
        assert!(store.insert(&other, stored("q", VaryKey::default()), before));
        assert!(store.insert(&k, stored("fresh", VaryKey::default()), Instant::now()));
        assert_eq!(body(none(&k)).as_deref(), Some("fresh"));
    }

    #[test]
    fn concurrent_variants_of_one_key_are_all_kept() {
        let store = Arc::new(Store::new(1 << 24, 1 << 16));
        let k = key(b"h", b"/v");
        let names = vec![b"accept-language".to_vec()];
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let (store, k, names) = (store.clone(), k.clone(), names.clone());
                std::thread::spawn(move || {
                    for round in 0..200 {
                        let lang = format!("l{t}");
                        let vary = VaryKey::new(&names, |_: &[u8]| vec![lang.as_bytes()]);
                        store.insert(&k, stored(&format!("{round}"), vary), Instant::now());
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("thread");
        }
        for t in 0..4 {
            let lang = format!("l{t}");
            let found = body(store.lookup(&k, |_| vec![lang.as_bytes()], Instant::now()));
            assert_eq!(found.as_deref(), Some("199"), "variant {lang}");
        }
    }
}
