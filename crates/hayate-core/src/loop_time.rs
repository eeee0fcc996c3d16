//! The time as of a worker's event loop's last wake-up, as nginx keeps
//! it (`ngx_time_update` after each `epoll_wait`).
//!
//! A proxied request read the clock six times (its head's read, the
//! response's Date and deadlines after the upstream answered, the
//! attempt's start, the pooled connection's check-in), each a vDSO
//! `clock_gettime`: 1 % of its CPU time under load (`perf`, case P). A
//! worker's event loop marks the time stale as it wakes up ([`woke`]);
//! the first read after that reads the clocks, and every other read until
//! the loop sleeps again takes the time from there. Under load one wake-up
//! serves tens of requests, so a request costs a fraction of a read.
//!
//! How stale it can be: by the work of one wake-up (a fraction of a
//! millisecond under load), or, when the loop never sleeps (its queue
//! never empties), by one tick of the worker's deadline sweeper, which
//! marks it too (`deadline::SWEEP`, 100 ms). Deadlines and Date are
//! coarser than either. On a thread whose loop never calls [`woke`]
//! (tests), every read is a clock read.

use std::cell::Cell;
use std::time::{Instant, SystemTime};

/// This thread's loop time.
#[derive(Clone, Copy)]
enum Kept {
    /// Not kept: this thread's loop never called [`woke`].
    No,
    /// Not read since the loop last woke up.
    Stale,
    /// Read since the loop last woke up.
    Read(Instant, SystemTime),
}

thread_local! {
    static KEPT: Cell<Kept> = const { Cell::new(Kept::No) };
}

/// Marks that this thread's event loop woke up: the next read of the time
/// reads the clocks.
pub fn woke() {
    KEPT.with(|k| k.set(Kept::Stale));
}

/// The monotonic and the wall time, as of this thread's event loop's last
/// wake-up.
pub fn now() -> (Instant, SystemTime) {
    KEPT.with(|k| match k.get() {
        Kept::Read(instant, wall) => (instant, wall),
        Kept::No => (Instant::now(), SystemTime::now()),
        Kept::Stale => {
            let (instant, wall) = (Instant::now(), SystemTime::now());
            k.set(Kept::Read(instant, wall));
            (instant, wall)
        }
    })
}

/// The monotonic time, as of this thread's event loop's last wake-up.
pub fn instant() -> Instant {
    now().0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tick() {
        let t = Instant::now();
        while Instant::now() == t {}
    }

    #[test]
    fn one_clock_read_per_wake_up() {
        // Not kept on this thread: each read is the clock's.
        let a = instant();
        tick();
        assert!(instant() > a);
        std::thread::spawn(|| {
            woke();
            let first = now();
            tick();
            assert_eq!(now(), first, "the wake-up's time, not the clock's");
            assert_eq!(instant(), first.0);
            woke();
            tick();
            let second = now();
            assert!(second.0 > first.0, "read again after the next wake-up");
            tick();
            assert_eq!(now(), second);
        })
        .join()
        .expect("join");
        // Another thread's loop is not this one's.
        assert!(matches!(KEPT.with(Cell::get), Kept::No));
    }
}
