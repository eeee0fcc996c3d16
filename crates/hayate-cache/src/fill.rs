//! Request coalescing: concurrent misses for one key elect one fetcher (the
//! leader); the others wait on an event, woken the moment the leader
//! stores the response or gives up, never by polling.
//!
//! Shared by every worker (tokio's `watch` wakes tasks on any runtime).
//! A leader that is dropped without finishing (its client left, a panic)
//! releases the waiters, so none waits longer than its own timeout.
//!
//! When the response is storable, the leader does not make the waiters
//! wait for the whole body: it publishes a [`Streaming`] fill and every
//! waiter reads the body as it arrives (of known length or not).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use crate::growing::{Growing, GrowingReader};
use crate::store::{Key, Stored};

const SHARDS: usize = 16;

/// How a fill ended, as its waiters see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Still fetching.
    Pending,
    /// The response is in the store: look it up again.
    Stored,
    /// The response is storable and its body arriving: read it from the
    /// fill ([`Waited::Streaming`]).
    Streaming,
    /// The response was not stored: go to the origin yourself.
    Released,
}

/// One fetch in progress.
#[derive(Debug)]
pub struct Fill {
    state: watch::Sender<Outcome>,
    waiters: AtomicUsize,
    streaming: Mutex<Option<Arc<Streaming>>>,
}

/// A storable response whose body is still arriving.
#[derive(Debug)]
pub struct Streaming {
    /// What will be stored, with an empty body: status, head, validators,
    /// freshness and the Vary values it was fetched for.
    pub stored: Arc<Stored>,
    /// The body so far.
    pub body: Arc<Growing>,
    /// Its length, when the upstream announced it (`None`: chunked or
    /// close-delimited).
    pub len: Option<u64>,
}

/// What a waiter learned.
#[derive(Debug)]
pub enum Waited {
    /// The response is in the store: look it up again.
    Stored,
    /// Its body is arriving: read it with the reader (which joined while
    /// the body could still be read from its start).
    Streaming(Arc<Streaming>, GrowingReader),
    /// Not stored (or the wait timed out): go to the origin yourself.
    Released,
}

/// The fills in progress, by key.
#[derive(Debug)]
pub struct Fills {
    shards: Vec<Mutex<HashMap<Key, Arc<Fill>>>>,
    /// Most requests waiting on one fill; more go to the origin.
    pub max_waiters: usize,
}

/// The role of a request that missed.
#[derive(Debug)]
pub enum Role {
    /// Fetch, then call [`Leader::finish`].
    Leader(Leader),
    /// Wait for the leader with [`Follower::wait`].
    Follower(Follower),
    /// Too many already wait: go to the origin without waiting.
    Overflow,
}

/// The elected fetcher of a key; dropping it unfinished releases waiters.
#[derive(Debug)]
pub struct Leader {
    fills: Arc<Fills>,
    key: Key,
    fill: Arc<Fill>,
    done: bool,
}

/// A request waiting for a leader.
#[derive(Debug)]
pub struct Follower {
    fill: Arc<Fill>,
}

impl Fills {
    /// An empty table.
    pub fn new(max_waiters: usize) -> Fills {
        Fills {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            max_waiters,
        }
    }

    fn shard(&self, key: &[u8]) -> &Mutex<HashMap<Key, Arc<Fill>>> {
        // FNV-1a: cheap, and keys are not attacker-chosen collisions of
        // consequence (a shard only bounds lock sharing).
        let h = key.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        &self.shards[(h as usize) % SHARDS]
    }

    /// Joins the fill of `key`, becoming its leader if there is none.
    pub fn join(self: &Arc<Fills>, key: &[u8]) -> Role {
        let mut map = self.shard(key).lock().unwrap_or_else(|e| e.into_inner());
        if let Some(fill) = map.get(key) {
            if fill.waiters.fetch_add(1, Ordering::Relaxed) >= self.max_waiters {
                fill.waiters.fetch_sub(1, Ordering::Relaxed);
                return Role::Overflow;
            }
            return Role::Follower(Follower { fill: fill.clone() });
        }
        let fill = Arc::new(Fill {
            state: watch::Sender::new(Outcome::Pending),
            waiters: AtomicUsize::new(0),
            streaming: Mutex::new(None),
        });
        map.insert(key.into(), fill.clone());
        Role::Leader(Leader {
            fills: self.clone(),
            key: key.into(),
            fill,
            done: false,
        })
    }

    /// Fills in progress.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).len())
            .sum()
    }

    /// Whether no fill is in progress.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Leader {
    /// Lets the waiters (and those that join until [`Leader::finish`]) read
    /// the body as it arrives.
    pub fn stream(&self, streaming: Arc<Streaming>) {
        *self
            .fill
            .streaming
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(streaming);
        self.fill.state.send_replace(Outcome::Streaming);
    }

    /// Ends the fill, waking every waiter with `outcome`.
    pub fn finish(mut self, outcome: Outcome) {
        self.end(outcome);
    }

    fn end(&mut self, outcome: Outcome) {
        if self.done {
            return;
        }
        self.done = true;
        let mut map = self
            .fills
            .shard(&self.key)
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if map
            .get(&self.key)
            .is_some_and(|f| Arc::ptr_eq(f, &self.fill))
        {
            map.remove(&self.key);
        }
        drop(map);
        if outcome != Outcome::Stored {
            // Nobody joins a stream that ended unstored (its body may be
            // let go: Growing::let_go).
            *self
                .fill
                .streaming
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = None;
        }
        self.fill.state.send_replace(outcome);
    }

    /// Requests waiting on this fill.
    pub fn waiters(&self) -> usize {
        self.fill.waiters.load(Ordering::Relaxed)
    }
}

impl Drop for Leader {
    fn drop(&mut self) {
        self.end(Outcome::Released);
    }
}

impl Follower {
    /// Waits for the leader, at most `limit`; `Released` on timeout.
    pub async fn wait(self, limit: Duration) -> Waited {
        let mut rx = self.fill.state.subscribe();
        let outcome =
            match tokio::time::timeout(limit, rx.wait_for(|s| *s != Outcome::Pending)).await {
                Ok(Ok(s)) => *s,
                _ => Outcome::Released,
            };
        match outcome {
            Outcome::Stored => Waited::Stored,
            Outcome::Streaming => {
                // The reader joins under the slot's lock, which a leader
                // that lets the body go empties first: a waiter either
                // reads from the first byte or goes to the origin itself.
                let slot = self
                    .fill
                    .streaming
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                match slot
                    .as_ref()
                    .and_then(|s| Some((s.clone(), s.body.reader()?)))
                {
                    Some((s, reader)) => Waited::Streaming(s, reader),
                    None => Waited::Released,
                }
            }
            Outcome::Pending | Outcome::Released => Waited::Released,
        }
    }
}

/// A follower counts as waiting until it is dropped: after its wait, or
/// unfinished (its client left; a stale-while-revalidate hit that found a
/// refresh already running never waits at all).
impl Drop for Follower {
    fn drop(&mut self) {
        self.fill.waiters.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leader(r: Role) -> Leader {
        match r {
            Role::Leader(l) => l,
            other => panic!("expected leader, got {other:?}"),
        }
    }

    fn follower(r: Role) -> Follower {
        match r {
            Role::Follower(f) => f,
            other => panic!("expected follower, got {other:?}"),
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn one_leader_many_followers_woken_by_finish() {
        let fills = Arc::new(Fills::new(100));
        let l = leader(fills.join(b"k"));
        let waits: Vec<_> = (0..10)
            .map(|_| tokio::spawn(follower(fills.join(b"k")).wait(Duration::from_secs(30))))
            .collect();
        tokio::task::yield_now().await;
        assert_eq!(l.waiters(), 10);
        l.finish(Outcome::Stored);
        for w in waits {
            assert!(matches!(w.await.expect("join"), Waited::Stored));
        }
        assert!(fills.is_empty());
        // The next miss leads a new fill.
        drop(leader(fills.join(b"k")));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn dropped_leader_releases() {
        let fills = Arc::new(Fills::new(100));
        let l = leader(fills.join(b"k"));
        let w = tokio::spawn(follower(fills.join(b"k")).wait(Duration::from_secs(30)));
        tokio::task::yield_now().await;
        drop(l);
        assert!(matches!(w.await.expect("join"), Waited::Released));
    }

    #[test]
    fn followers_dropped_without_waiting_free_their_slots() {
        let fills = Arc::new(Fills::new(2));
        let _l = leader(fills.join(b"k"));
        for _ in 0..10 {
            drop(follower(fills.join(b"k")));
        }
        let _a = follower(fills.join(b"k"));
        let _b = follower(fills.join(b"k"));
        assert!(matches!(fills.join(b"k"), Role::Overflow));
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn waiters_are_bounded_in_number_and_time() {
        let fills = Arc::new(Fills::new(1));
        let _l = leader(fills.join(b"k"));
        let f = follower(fills.join(b"k"));
        assert!(matches!(fills.join(b"k"), Role::Overflow));
        assert!(matches!(
            f.wait(Duration::from_secs(5)).await,
            Waited::Released
        ));
        // The waiter's slot is free again.
        drop(follower(fills.join(b"k")));
    }
}
