//! An upstream group as one worker sees it: its members, their balancing
//! and health state, and their pools of idle keep-alive connections.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::upconn::UpConn;
use crate::UpstreamAddr;

/// Proxy settings of a group.
#[derive(Debug, Clone)]
pub struct ProxySettings {
    /// Connecting to a member.
    pub connect_timeout: Duration,
    /// From the end of the request to the whole response head.
    pub header_timeout: Duration,
    /// Longest pause while reading or writing a body.
    pub io_timeout: Duration,
    /// Idle time of a pooled connection when the upstream sends no
    /// `Keep-Alive: timeout=N` hint (Node closes after 5 s).
    pub idle_timeout: Duration,
    /// Idle connections kept per member and worker.
    pub max_idle: usize,
    /// Request bodies up to this size are buffered so a request can be
    /// replayed on a fresh connection.
    pub replay_buffer: u64,
    /// Consecutive failures that eject a member.
    pub max_fails: u32,
    /// How long an ejected member is skipped before it is tried again.
    pub fail_timeout: Duration,
    /// Requests in flight per member and worker; 0 means no limit.
    pub max_conns: u32,
    /// Requests that may wait for a member at its limit (per worker).
    pub queue_depth: usize,
    /// Longest wait in that queue.
    pub queue_timeout: Duration,
}

impl Default for ProxySettings {
    fn default() -> Self {
        ProxySettings {
            connect_timeout: Duration::from_secs(5),
            header_timeout: Duration::from_secs(60),
            io_timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(4),
            max_idle: 64,
            replay_buffer: 64 * 1024,
            max_fails: 3,
            fail_timeout: Duration::from_secs(10),
            max_conns: 0,
            queue_depth: 1024,
            queue_timeout: Duration::from_secs(10),
        }
    }
}

/// One member of a group.
#[derive(Debug)]
pub(crate) struct Member {
    pub addr: UpstreamAddr,
    pub label: String,
    /// Requests sent and not yet answered in full.
    pub outstanding: Cell<u32>,
    fails: Cell<u32>,
    down_until: Cell<Option<Instant>>,
    idle: RefCell<Vec<Idle>>,
    /// The group's queue, woken when this member finishes a request.
    pub freed: Rc<Notify>,
}

#[derive(Debug)]
struct Idle {
    conn: UpConn,
    expires: Instant,
}

/// A group of upstream members (per worker).
#[derive(Debug)]
pub struct UpstreamGroup {
    pub(crate) members: Vec<Rc<Member>>,
    pub(crate) settings: ProxySettings,
    next: Cell<usize>,
    /// Requests waiting for a member under its `max_conns` (FIFO).
    pub(crate) waiting: Cell<usize>,
    pub(crate) freed: Rc<Notify>,
}

/// Why no member could take a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Busy {
    /// Every member was tried for this request.
    Exhausted,
    /// Every eligible member is at its limit: wait in the queue.
    Full,
}

impl UpstreamGroup {
    /// A group of `addrs`.
    pub fn new(addrs: &[UpstreamAddr], settings: ProxySettings) -> UpstreamGroup {
        let freed = Rc::new(Notify::new());
        let members = addrs
            .iter()
            .map(|a| {
                Rc::new(Member {
                    label: a.to_string(),
                    addr: a.clone(),
                    outstanding: Cell::new(0),
                    fails: Cell::new(0),
                    down_until: Cell::new(None),
                    idle: RefCell::new(Vec::new()),
                    freed: freed.clone(),
                })
            })
            .collect();
        UpstreamGroup {
            members,
            settings,
            next: Cell::new(0),
            waiting: Cell::new(0),
            freed,
        }
    }

    /// Picks the healthy member with the fewest outstanding requests,
    /// rotating among ties; `exclude` skips members that already failed this
    /// request. With every member ejected, the one whose ejection ends first
    /// is tried (a group never refuses only because of past failures).
    pub(crate) fn pick(&self, now: Instant, exclude: &[usize]) -> Result<usize, Busy> {
        let n = self.members.len();
        let start = self.next.get();
        self.next.set(start.wrapping_add(1));
        let limit = self.settings.max_conns;
        let candidates = (0..n)
            .map(|i| (start + i) % n)
            .filter(|i| !exclude.contains(i));
        if candidates.clone().next().is_none() {
            return Err(Busy::Exhausted);
        }
        let open = candidates
            .clone()
            .filter(|&i| limit == 0 || self.members[i].outstanding.get() < limit);
        let healthy = open
            .clone()
            .filter(|&i| self.members[i].down_until.get().is_none_or(|t| t <= now))
            .min_by_key(|&i| self.members[i].outstanding.get());
        healthy
            .or_else(|| open.min_by_key(|&i| self.members[i].down_until.get()))
            .ok_or(Busy::Full)
    }
}

impl Member {
    /// An idle connection that is still usable, most recent first.
    pub fn checkout(&self, now: Instant) -> Option<UpConn> {
        let mut idle = self.idle.borrow_mut();
        while let Some(i) = idle.pop() {
            if i.expires > now && i.conn.looks_alive() {
                return Some(i.conn);
            }
        }
        None
    }

    /// Returns a connection to the pool for `keep` (the upstream's hint or
    /// the default idle time).
    pub fn checkin(&self, conn: UpConn, keep: Duration, max_idle: usize) {
        let mut idle = self.idle.borrow_mut();
        if idle.len() >= max_idle {
            idle.remove(0);
        }
        idle.push(Idle {
            conn,
            expires: Instant::now() + keep,
        });
    }

    /// Records a success: the member is healthy.
    pub fn succeeded(&self) {
        self.fails.set(0);
        self.down_until.set(None);
    }

    /// Records a failure; ejects the member after `max_fails` in a row.
    pub fn failed(&self, settings: &ProxySettings) {
        let fails = self.fails.get() + 1;
        self.fails.set(fails);
        if fails >= settings.max_fails {
            if self.down_until.get().is_none() {
                log::warn!(
                    "upstream {} ejected for {:?} after {fails} failures",
                    self.label,
                    settings.fail_timeout
                );
            }
            self.down_until
                .set(Some(Instant::now() + settings.fail_timeout));
            self.idle.borrow_mut().clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(n: usize) -> UpstreamGroup {
        let addrs: Vec<UpstreamAddr> = (0..n)
            .map(|i| UpstreamAddr::parse(&format!("127.0.0.1:{}", 1000 + i)).expect("addr"))
            .collect();
        UpstreamGroup::new(
            &addrs,
            ProxySettings {
                max_fails: 2,
                ..Default::default()
            },
        )
    }

    #[test]
    fn least_outstanding_then_rotation() {
        let g = group(3);
        let now = Instant::now();
        g.members[0].outstanding.set(2);
        g.members[1].outstanding.set(1);
        g.members[2].outstanding.set(1);
        let picks: Vec<usize> = (0..4).map(|_| g.pick(now, &[]).expect("member")).collect();
        assert!(picks.iter().all(|&p| p == 1 || p == 2), "{picks:?}");
        assert!(
            picks.contains(&1) && picks.contains(&2),
            "ties rotate: {picks:?}"
        );
        assert_eq!(g.pick(now, &[1, 2]), Ok(0));
        assert_eq!(g.pick(now, &[0, 1, 2]), Err(Busy::Exhausted));
    }

    #[test]
    fn members_at_their_limit_are_full() {
        let addrs = [UpstreamAddr::parse("127.0.0.1:1000").expect("addr")];
        let g = UpstreamGroup::new(
            &addrs,
            ProxySettings {
                max_conns: 2,
                ..Default::default()
            },
        );
        let now = Instant::now();
        g.members[0].outstanding.set(1);
        assert_eq!(g.pick(now, &[]), Ok(0));
        g.members[0].outstanding.set(2);
        assert_eq!(g.pick(now, &[]), Err(Busy::Full));
    }

    #[test]
    fn failures_eject_and_success_restores() {
        let g = group(2);
        let now = Instant::now();
        g.members[0].failed(&g.settings);
        assert!(
            (0..4).any(|_| g.pick(now, &[]) == Ok(0)),
            "one failure does not eject"
        );
        g.members[0].failed(&g.settings);
        assert!(
            (0..4).all(|_| g.pick(now, &[]) == Ok(1)),
            "ejected after max_fails"
        );
        // Every member down: the one back soonest is still tried.
        g.members[1].failed(&g.settings);
        g.members[1].failed(&g.settings);
        assert_eq!(g.pick(now, &[]), Ok(0));
        g.members[0].succeeded();
        assert_eq!(g.pick(now, &[]), Ok(0));
    }
}
