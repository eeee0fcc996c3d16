//! The circuit breaker in front of a use of Redis (the L2 tier's lookups,
//! the fleet's rate limits: one each): after [`TRIPS`] calls in a
//! row fail (error or timeout), Redis is skipped for [`COOL_DOWN`], then
//! one call goes through as a probe; its success closes the breaker, its
//! failure opens it for another cool-down. Requests never queue behind a
//! Redis that is down: while open, a lookup is a miss at once.
//!
//! Lock-free (atomics): every worker asks it on every L2 call.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Failures in a row that open the breaker: one slow answer is noise, five
/// at 50 ms each are a quarter-second of requests that waited in vain.
pub const TRIPS: u32 = 5;

/// How long an open breaker skips Redis before one probe: short enough
/// that a restarted Redis is used again within a second.
pub const COOL_DOWN: Duration = Duration::from_secs(1);

/// The breaker's state, as metrics and `hayate status` show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    /// Calls go through.
    Closed,
    /// Calls are skipped until the cool-down ends.
    Open,
    /// The cool-down ended: one probe is (or may be) on its way.
    HalfOpen,
}

impl BreakerState {
    /// The word for logs and status.
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half-open",
        }
    }

    /// The gauge value: 0 closed, 1 open, 2 half-open.
    pub fn gauge(self) -> u8 {
        match self {
            BreakerState::Closed => 0,
            BreakerState::Open => 1,
            BreakerState::HalfOpen => 2,
        }
    }
}

/// A circuit breaker (see the module doc).
#[derive(Debug)]
pub struct Breaker {
    /// What it guards, for its log lines ("L2 lookups").
    name: &'static str,
    born: Instant,
    /// Failures in a row.
    failures: AtomicU32,
    /// Milliseconds from `born` until which calls are skipped; 0: closed.
    open_until: AtomicU64,
    /// A probe is on its way (half-open lets only one through).
    probing: AtomicBool,
    cool_down: Duration,
}

impl Default for Breaker {
    fn default() -> Self {
        Breaker::named("L2 lookups", COOL_DOWN)
    }
}

impl Breaker {
    /// A closed breaker for `name` that stays open `cool_down` when it
    /// trips.
    pub fn named(name: &'static str, cool_down: Duration) -> Breaker {
        Breaker {
            name,
            born: Instant::now(),
            failures: AtomicU32::new(0),
            open_until: AtomicU64::new(0),
            probing: AtomicBool::new(false),
            cool_down,
        }
    }

    fn ms(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.born).as_millis() as u64
    }

    /// Whether a call may go to Redis at `now`. A `true` must be followed
    /// by [`Breaker::success`] or [`Breaker::failure`].
    pub fn allow(&self, now: Instant) -> bool {
        let until = self.open_until.load(Ordering::Acquire);
        if until == 0 {
            return true;
        }
        if self.ms(now) < until {
            return false;
        }
        // Half-open: the first caller probes, the others are skipped.
        !self.probing.swap(true, Ordering::AcqRel)
    }

    /// The call answered: the breaker closes.
    pub fn success(&self) {
        self.failures.store(0, Ordering::Relaxed);
        if self.open_until.swap(0, Ordering::AcqRel) != 0 {
            log::info!("shared tier: Redis answers again; {} resume", self.name);
        }
        self.probing.store(false, Ordering::Release);
    }

    /// The call failed or timed out: the breaker opens after [`TRIPS`] in
    /// a row, and again at once after a failed probe.
    pub fn failure(&self, now: Instant) {
        let failures = self.failures.fetch_add(1, Ordering::AcqRel) + 1;
        let probed = self.probing.load(Ordering::Acquire);
        if failures >= TRIPS || probed {
            let until = self.ms(now) + self.cool_down.as_millis() as u64;
            if self.open_until.swap(until.max(1), Ordering::AcqRel) == 0 {
                log::warn!(
                    "shared tier: {failures} Redis calls failed in a row; {} skip Redis for {:?} at a time until it answers",
                    self.name,
                    self.cool_down
                );
            }
            self.probing.store(false, Ordering::Release);
        }
    }

    /// The state at `now`.
    pub fn state(&self, now: Instant) -> BreakerState {
        match self.open_until.load(Ordering::Acquire) {
            0 => BreakerState::Closed,
            until if self.ms(now) < until => BreakerState::Open,
            _ => BreakerState::HalfOpen,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trips_after_failures_in_a_row_and_one_probe_closes_it() {
        let b = Breaker::named("test", Duration::from_secs(1));
        let t0 = b.born;
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        for _ in 0..TRIPS - 1 {
            assert!(b.allow(t0));
            b.failure(t0);
        }
        // A success in between starts the count again.
        b.success();
        for _ in 0..TRIPS - 1 {
            b.failure(t0);
        }
        assert_eq!(b.state(t0), BreakerState::Closed);
        b.failure(at(10));
        assert_eq!(b.state(at(10)), BreakerState::Open);
        assert!(!b.allow(at(500)), "open: skipped");
        assert_eq!(b.state(at(1010)), BreakerState::HalfOpen);
        assert!(b.allow(at(1010)), "the probe");
        assert!(!b.allow(at(1011)), "only one probe at a time");
        // A failed probe opens it again at once.
        b.failure(at(1020));
        assert_eq!(b.state(at(1500)), BreakerState::Open);
        assert!(!b.allow(at(1500)));
        assert!(b.allow(at(2020)));
        b.success();
        assert_eq!(b.state(at(2020)), BreakerState::Closed);
        assert!(b.allow(at(2021)) && b.allow(at(2021)));
    }
}
