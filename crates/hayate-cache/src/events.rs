//! What changes a cache beyond its own fills: purges (by URL or tag) and
//! the invalidations unsafe methods cause. Each is applied here, and
//! announced to other hayates when a shared tier is set up (hayate-shared
//! carries them over Redis), so a purge or a POST on one box reaches every
//! box's cache.

use crate::store;
use crate::ResponseCache;

/// One change to the cache, as it travels between boxes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheEvent {
    /// Every variant and query string of a URL: `http://host/path`, or a
    /// path for every host (`hayate purge URL`).
    PurgeUrl(String),
    /// Every response tagged so by its Surrogate-Key.
    PurgeTag(String),
    /// One request target of one host, after an unsafe method (RFC 9111
    /// §4.4).
    Invalidate {
        /// The Host, without port.
        host: Vec<u8>,
        /// The request target (path and query).
        target: Vec<u8>,
    },
}

/// The host (empty: every host) and the path (query dropped) a purge by
/// URL names: `http://host/path`, or a path.
pub fn purged_host_and_path(url: &str) -> (&str, &str) {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"));
    let (host, path) = match rest {
        Some(r) => r.split_at(r.find('/').unwrap_or(r.len())),
        None => ("", url),
    };
    let path = path
        .split('?')
        .next()
        .filter(|p| !p.is_empty())
        .unwrap_or("/");
    (host, path)
}

/// Where a cache announces the events that started on its box.
pub type Announce = Box<dyn Fn(&CacheEvent) + Send + Sync>;

/// A cache's [`Announce`], once a shared tier sets it.
#[derive(Default)]
pub struct AnnounceSlot(std::sync::OnceLock<Announce>);

impl std::fmt::Debug for AnnounceSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.get().is_some() {
            "announced"
        } else {
            "local"
        })
    }
}

impl ResponseCache {
    /// Applies `event` to this cache; returns how many URLs it removed.
    pub fn apply(&self, event: &CacheEvent) -> usize {
        match event {
            CacheEvent::PurgeUrl(url) => {
                let (host, path) = purged_host_and_path(url);
                self.store.purge_url(host.as_bytes(), path.as_bytes())
            }
            CacheEvent::PurgeTag(tag) => self.store.purge_tag(tag.as_bytes()),
            CacheEvent::Invalidate { host, target } => {
                usize::from(self.store.invalidate(&store::key(host, target)))
            }
        }
    }

    /// Applies an event that started on this box, and announces it to the
    /// others when a shared tier listens.
    pub fn apply_and_announce(&self, event: &CacheEvent) -> usize {
        let removed = self.apply(event);
        if let Some(announce) = self.announce.0.get() {
            announce(event);
        }
        removed
    }

    /// Announces this box's events through `announce` from now on (once).
    pub fn announce_to(&self, announce: Announce) {
        let _ = self.announce.0.set(announce);
    }
}
