//! The worker's input epoch: a per-thread counter advanced every time a
//! connection reads new bytes from a client.
//!
//! It lets caches that must never serve stale data check their invalidation
//! source once per read instead of once per request: a request's bytes were
//! read at some epoch, so a check made at or after that epoch saw every
//! change the client made before sending it. Pipelined requests that arrive
//! in one read share one check.

use std::cell::Cell;

thread_local! {
    static EPOCH: Cell<u64> = const { Cell::new(0) };
}

/// Marks that new input arrived on this thread.
pub fn advance() {
    EPOCH.with(|e| e.set(e.get().wrapping_add(1)));
}

/// The current epoch of this thread.
pub fn current() -> u64 {
    EPOCH.with(Cell::get)
}

#[cfg(test)]
mod tests {
    #[test]
    fn advances() {
        let a = super::current();
        super::advance();
        assert_ne!(super::current(), a);
    }
}
