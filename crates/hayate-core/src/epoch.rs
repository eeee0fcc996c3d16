//! The worker's input epoch: a per-thread counter advanced every time a
//! connection reads new bytes from a client, and whether the event loop
//! reported those bytes.
//!
//! It lets caches that must answer a request with data no older than the
//! request check their invalidation source once per epoch instead of once
//! per request. Two kinds of check:
//! - a read of the source (a syscall) made at or after a request's epoch
//!   follows the read that returned the request's bytes, so it sees every
//!   change completed before they were read. Pipelined requests that arrive
//!   in one read share one check.
//! - the event loop's readiness of the source (no syscall) shows what the
//!   last `epoll_wait` reported. That covers a request only when the read
//!   that completed it had to wait for the event loop to report the socket
//!   readable ([`advance_reported`]) and it is the first request those
//!   bytes complete: its first byte was in the socket when that
//!   `epoll_wait` ran, so a change completed before the client sent it had
//!   made the source ready by then. Input read without waiting (the socket
//!   kept its readiness after a read that filled the buffer, or after an
//!   idle connection waited for readability before reading) and a request
//!   taken from bytes already buffered ([`pipelined`]) may have arrived
//!   after the last `epoll_wait`: such an epoch is unreported, and the next
//!   check must read.

use std::cell::Cell;

thread_local! {
    static EPOCH: Cell<u64> = const { Cell::new(0) };
    /// The latest epoch with input the event loop did not report.
    static UNREPORTED: Cell<u64> = const { Cell::new(0) };
}

/// Marks that new input arrived on this thread, read without waiting for
/// the event loop (or not known to have waited): unreported.
pub fn advance() {
    let e = EPOCH.with(|e| {
        e.set(e.get() + 1);
        e.get()
    });
    UNREPORTED.with(|u| u.set(e));
}

/// Marks that new input arrived on this thread, read after the event loop
/// reported the socket readable (the read had found nothing and waited).
pub fn advance_reported() {
    EPOCH.with(|e| e.set(e.get() + 1));
}

/// Marks that a request taken from bytes already buffered (pipelined behind
/// the previous one, or read while draining a body) is about to be handled:
/// its bytes may have arrived after the last `epoll_wait`. Starts an
/// unreported epoch unless the current one is; every such request up to the
/// next read shares it.
pub fn pipelined() {
    if UNREPORTED.with(Cell::get) != current() {
        advance();
    }
}

/// The current epoch of this thread.
pub fn current() -> u64 {
    EPOCH.with(Cell::get)
}

/// Whether every input after `epoch` was reported by the event loop (a
/// check that reads the source at `epoch` can be followed by checks that
/// trust its readiness).
pub fn reported_since(epoch: u64) -> bool {
    UNREPORTED.with(Cell::get) <= epoch
}

#[cfg(test)]
mod tests {
    #[test]
    fn advances() {
        let a = super::current();
        super::advance();
        assert_ne!(super::current(), a);
    }

    #[test]
    fn unreported_input_stays_unreported_until_a_check_after_it() {
        super::advance();
        let checked = super::current();
        assert!(super::reported_since(checked));
        super::advance_reported();
        assert!(super::reported_since(checked), "a reported read");
        super::advance();
        assert!(!super::reported_since(checked), "a read that did not wait");
        let checked = super::current();
        super::advance_reported();
        super::pipelined();
        let e = super::current();
        assert!(!super::reported_since(checked), "a pipelined request");
        super::pipelined();
        assert_eq!(super::current(), e, "one epoch for the rest of a read");
    }
}
