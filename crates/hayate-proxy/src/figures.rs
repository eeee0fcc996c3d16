//! What a worker's copy of an upstream group shows the admin listener: each
//! member's health state, requests in flight and idle pooled connections.
//!
//! A group's state lives in `Cell`s of its worker, so nothing is shared on
//! the request path: the worker's pool sweeper copies the figures, once a
//! second, into a [`FiguresSlot`] that `/metrics` reads from its own thread
//! (figures at most a second old, no atomics per request).

use std::sync::{Arc, Mutex};
use std::time::Instant;

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
}

/// Where one worker's copy of a group publishes its members' figures.
pub type FiguresSlot = Arc<Mutex<Vec<MemberFigures>>>;

impl UpstreamGroup {
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
    }
}
