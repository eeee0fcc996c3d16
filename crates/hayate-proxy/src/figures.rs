//! What a worker's copy of an upstream group shows the admin listener: each
//! member's health state, requests in flight and idle pooled connections.
//!
//! A group's state lives in `Cell`s of its worker, so nothing is shared on
//! the request path: the worker's pool sweeper copies the figures, once a
//! second, into a [`FiguresSlot`] that `/metrics` reads from its own thread
//! (figures at most a second old, no atomics per request).
//!
//! Each member also counts how long its response heads took (the
//! `hayate_upstream_response_seconds` histogram), only in groups that
//! publish figures: without an admin listener a response costs no count.

use std::cell::Cell;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hayate_core::metrics::{latency_bucket, LATENCY_BUCKETS_US};

use crate::UpstreamGroup;

/// A member's health as one worker sees it (ejection and health checks are
/// per worker).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum MemberState {
    /// Takes requests.
    Up,
    /// Skipped after `proxy_max_fails` failures in a row, until
    /// `proxy_fail_timeout` passes.
    Ejected,
    /// Its last active health check failed.
    ProbedDown,
}

impl MemberState {
    /// Every state, in order of worsening.
    pub const ALL: [MemberState; 3] = [
        MemberState::Up,
        MemberState::Ejected,
        MemberState::ProbedDown,
    ];

    /// The name in metrics and on the status page.
    pub fn as_str(self) -> &'static str {
        match self {
            MemberState::Up => "up",
            MemberState::Ejected => "ejected",
            MemberState::ProbedDown => "probed-down",
        }
    }
}

/// One member's figures in one worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberFigures {
    /// The member's address (`app[i]` for a supervised slot).
    pub label: String,
    /// Health.
    pub state: MemberState,
    /// Requests sent and not yet answered in full.
    pub in_flight: u32,
    /// Idle keep-alive connections pooled.
    pub idle: usize,
    /// Response heads by latency bucket (not cumulative; the last is
    /// +Inf), since this worker's group began.
    pub response_counts: [u64; LATENCY_BUCKETS_US.len() + 1],
    /// Their latencies' sum, in microseconds.
    pub response_sum_us: u64,
}

/// One member's response head latencies in one worker: its thread alone
/// writes them.
#[derive(Debug, Default)]
pub(crate) struct ResponseTimes {
    counts: [Cell<u64>; LATENCY_BUCKETS_US.len() + 1],
    sum_us: Cell<u64>,
}

impl ResponseTimes {
    fn counts(&self) -> [u64; LATENCY_BUCKETS_US.len() + 1] {
        std::array::from_fn(|i| self.counts[i].get())
    }
}

/// Where one worker's copy of a group publishes its members' figures.
pub type FiguresSlot = Arc<Mutex<Vec<MemberFigures>>>;

impl UpstreamGroup {
    /// Counts a response head of member `i` that took `took`, when the
    /// group publishes figures.
    pub(crate) fn count_response(&self, i: usize, took: Duration) {
        if self.figures.get().is_none() {
            return;
        }
        let times = &self.members[i].response_times;
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let c = &times.counts[latency_bucket(us)];
        c.set(c.get() + 1);
        times.sum_us.set(times.sum_us.get().wrapping_add(us));
    }

    /// Publishes this group's figures into `slot` from now on (at once, and
    /// at every pool sweep).
    pub fn publish_figures_to(&self, slot: FiguresSlot) {
        if self.figures.set(slot).is_ok() {
            self.publish_figures(Instant::now());
        }
    }

    /// Copies the members' figures into the slot, if there is one.
    pub(crate) fn publish_figures(&self, now: Instant) {
        let Some(slot) = self.figures.get() else {
            return;
        };
        let figures = self
            .members
            .iter()
            .map(|m| MemberFigures {
                label: m.label.clone(),
                state: if m.probe_down.get() {
                    MemberState::ProbedDown
                } else if m.is_up(now) {
                    MemberState::Up
                } else {
                    MemberState::Ejected
                },
                in_flight: m.outstanding.get(),
                idle: m.idle.borrow().len(),
                response_counts: m.response_times.counts(),
                response_sum_us: m.response_times.sum_us.get(),
            })
            .collect();
        if let Ok(mut s) = slot.lock() {
            *s = figures;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group::tests::group;

    #[test]
    fn a_sweep_publishes_state_in_flight_and_idle() {
        let g = group(2);
        let slot = FiguresSlot::default();
        g.publish_figures_to(slot.clone());
        let at_once = slot.lock().unwrap().clone();
        assert_eq!(at_once.len(), 2);
        assert!(at_once.iter().all(|m| m.state == MemberState::Up));
        for _ in 0..g.settings.max_fails {
            g.members[0].failed(&g.settings);
        }
        g.members[1].probe_down.set(true);
        g.members[1].outstanding.set(3);
        g.publish_figures(Instant::now());
        let after = slot.lock().unwrap().clone();
        assert_eq!(after[0].state, MemberState::Ejected);
        assert_eq!(after[1].state, MemberState::ProbedDown);
        assert_eq!(after[1].in_flight, 3);
        assert_eq!(after[0].label, g.members[0].label);
        // Counted only once figures are published, as here.
        g.count_response(1, Duration::from_millis(3));
        g.count_response(1, Duration::from_secs(60));
        g.publish_figures(Instant::now());
        let after = slot.lock().unwrap().clone();
        let mut expected = [0; LATENCY_BUCKETS_US.len() + 1];
        expected[3] = 1; // 3 ms: the 5 ms bucket
        expected[LATENCY_BUCKETS_US.len()] = 1;
        assert_eq!(after[1].response_counts, expected);
        assert_eq!(after[1].response_sum_us, 60_003_000);
        assert_eq!(after[0].response_counts, [0; LATENCY_BUCKETS_US.len() + 1]);
    }
}
