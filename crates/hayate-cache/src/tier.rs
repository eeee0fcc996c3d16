//! A second cache tier behind the store: several boxes share responses
//! through it (hayate-shared keeps them in Redis). The store asks it only
//! on a local miss, once per fill (the fill's leader), and hands it every
//! response it keeps; a local hit never reaches it.
//!
//! The tier owns its I/O and its failures: a lookup answers within the
//! tier's own bound (`None` when it cannot), a write never waits.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::store::Stored;
use crate::vary::VaryKey;
use crate::ResponseCache;

/// What a lookup in the second tier resolves to.
pub type Found<'a> = Pin<Box<dyn Future<Output = Option<Stored>> + 'a>>;

/// A second tier of responses shared beyond this process.
pub trait SecondTier: Send + Sync {
    /// The stored response for primary key `key` and this request: `vary`
    /// gives the request's Vary key for the field names a stored response
    /// varies on. `None` when the tier holds none, or cannot say in time.
    fn lookup<'a>(&'a self, key: &'a [u8], vary: &'a dyn Fn(&[Vec<u8>]) -> VaryKey) -> Found<'a>;

    /// Keeps a copy of a response this box stored, in the background:
    /// `stale_window` is how long after its freshness it may still answer
    /// (stale-while-revalidate, stale-if-error).
    fn keep(&self, key: &[u8], stored: &Arc<Stored>, stale_window: Duration);
}

/// A cache's second tier, once a shared tier sets it.
#[derive(Default)]
pub struct TierSlot(OnceLock<Arc<dyn SecondTier>>);

impl std::fmt::Debug for TierSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.get().is_some() {
            "second tier"
        } else {
            "none"
        })
    }
}

impl ResponseCache {
    /// Shares stored responses through `tier` from now on (once).
    pub fn share_through(&self, tier: Arc<dyn SecondTier>) {
        let _ = self.second.0.set(tier);
    }

    /// The second tier, when one is set.
    pub fn second_tier(&self) -> Option<&dyn SecondTier> {
        self.second.0.get().map(|t| &**t)
    }

    /// Stores `stored` under `key` ([`crate::Store::insert_shared`]) and,
    /// when it is kept, hands a copy to the second tier. Whether it was
    /// kept.
    pub fn keep(
        &self,
        key: &[u8],
        stored: &Arc<Stored>,
        requested_at: Instant,
        stale_window: Duration,
    ) -> bool {
        let kept = self.store.insert_shared(key, stored.clone(), requested_at);
        if kept {
            if let Some(tier) = self.second.0.get() {
                tier.keep(key, stored, stale_window);
            }
        }
        kept
    }
}
