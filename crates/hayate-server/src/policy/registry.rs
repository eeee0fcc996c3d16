//! The box's limiters, each once for what it is for (a route, its limit,
//! its key): every worker's copy of a route finds the same one, a reload's
//! new routes find the counts of the old ones while the limit is
//! unchanged, and `/metrics` and the status page read them all. A limiter
//! lives while a route (of any worker or generation) holds it.

use std::sync::{Arc, Mutex, Weak};

/// Limiters of one kind, by identity.
pub struct Registry<T>(Mutex<Vec<(String, Weak<T>)>>);

impl<T> Registry<T> {
    /// An empty registry (for a `static`).
    pub const fn new() -> Registry<T> {
        Registry(Mutex::new(Vec::new()))
    }

    /// The limiter alive for `identity`, or the one `make` makes, kept.
    pub fn shared(&self, identity: String, make: impl FnOnce() -> T) -> Arc<T> {
        let mut all = self.0.lock().unwrap_or_else(|e| e.into_inner());
        all.retain(|(_, weak)| weak.strong_count() > 0);
        if let Some(alive) = all
            .iter()
            .find(|(id, _)| *id == identity)
            .and_then(|(_, weak)| weak.upgrade())
        {
            return alive;
        }
        let made = Arc::new(make());
        all.push((identity, Arc::downgrade(&made)));
        made
    }

    /// Every limiter alive, in the order they were made.
    pub fn alive(&self) -> Vec<Arc<T>> {
        let all = self.0.lock().unwrap_or_else(|e| e.into_inner());
        all.iter().filter_map(|(_, weak)| weak.upgrade()).collect()
    }
}
