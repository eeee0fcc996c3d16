//! Each member's pool of idle keep-alive connections (per worker): the
//! newest is taken first, each leaves before the upstream's own idle
//! timeout, a checkout checks that it still looks open, and a sweep closes
//! the ones nobody took once they expire or their upstream closed them (no
//! socket lingers in CLOSE_WAIT after a burst).

use std::rc::Weak;
use std::time::{Duration, Instant};

use hayate_core::transport::Transport;

use crate::group::{Member, UpstreamGroup};

/// How often each worker sweeps its pools. Between sweeps a connection the
/// upstream closed waits at most this long in CLOSE_WAIT; a sweep of a pool
/// costs no syscall per connection the kernel has not reported readable.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// An idle connection.
#[derive(Debug)]
pub(crate) struct Idle {
    conn: Transport,
    /// When it was checked in: its last response ended then.
    since: Instant,
    expires: Instant,
    /// The app instance it leads to (supervised members), 0 otherwise.
    instance: u64,
}

impl Member {
    /// An idle connection that is still usable, most recent first, to app
    /// instance `instance` (the id of what [`Member::current`] read; 0 for a
    /// plain member). With `used_within`, only a connection whose last
    /// response ended that recently (older ones stay for other requests).
    pub(crate) fn checkout(
        &self,
        now: Instant,
        instance: u64,
        used_within: Option<Duration>,
    ) -> Option<Transport> {
        let mut idle = self.idle.borrow_mut();
        if let (Some(limit), Some(newest)) = (used_within, idle.back()) {
            if now.saturating_duration_since(newest.since) > limit {
                return None;
            }
        }
        while let Some(mut i) = idle.pop_back() {
            // A replaced app instance is draining: its connections go.
            if i.expires > now && i.instance == instance && i.conn.looks_alive() {
                return Some(i.conn);
            }
        }
        None
    }

    /// Closes the oldest idle connections until a new one would leave the
    /// member's connections, idle and in use, within `limit` (the request
    /// about to connect is already counted in `outstanding`).
    pub(crate) fn make_room(&self, limit: u32) {
        let in_use = self.outstanding.get() as usize;
        let mut idle = self.idle.borrow_mut();
        while !idle.is_empty() && idle.len() + in_use > limit as usize {
            idle.pop_front();
        }
    }

    /// Returns a connection to the pool for `keep` (the upstream's hint or
    /// the default idle time).
    pub(crate) fn checkin(&self, conn: Transport, keep: Duration, max_idle: usize, instance: u64) {
        let now = hayate_core::loop_time::instant();
        let mut idle = self.idle.borrow_mut();
        // Oldest first: the expired ones go now rather than at a checkout
        // that may never reach them (checkout takes the most recent).
        while idle
            .front()
            .is_some_and(|i| i.expires <= now || idle.len() >= max_idle)
        {
            idle.pop_front();
        }
        if max_idle == 0 {
            return;
        }
        idle.push_back(Idle {
            conn,
            since: now,
            expires: now + keep,
            instance,
        });
    }

    /// Closes the idle connections that expired or that the upstream
    /// closed (or wrote to unasked).
    pub(crate) fn sweep(&self, now: Instant) {
        self.idle
            .borrow_mut()
            .retain_mut(|i| i.expires > now && i.conn.looks_alive());
    }
}

impl UpstreamGroup {
    /// Closes the group's oldest idle connection, if it has one: short of
    /// descriptors, a request about to connect needs one more than a
    /// connection nobody is using (it would have taken a usable one).
    pub(crate) fn release_oldest_idle(&self) {
        let oldest = self
            .members
            .iter()
            .filter_map(|m| Some((m.idle.borrow().front()?.since, m)))
            .min_by_key(|(since, _)| *since);
        if let Some((_, m)) = oldest {
            m.idle.borrow_mut().pop_front();
        }
    }

    /// Closes the idle connections that expired or that their upstream
    /// closed; every one, when hayate was `short` of descriptors since the
    /// last sweep.
    pub(crate) fn sweep_pools(&self, now: Instant, short: bool) {
        for m in &self.members {
            if short {
                m.idle.borrow_mut().clear();
            }
            m.sweep(now);
            m.h2.sweep(now, self.settings.idle_timeout);
        }
    }

    /// Sweeps the group's pools every [`SWEEP_EVERY`] while the group is in
    /// use (spawned per worker and group; held weakly, like the health
    /// checks). After hayate ran short of descriptors anywhere (a file
    /// open, another group's connect, an accept), the sweep closes every
    /// idle connection: one nobody took meanwhile is a descriptor held for
    /// later while a request needs it now (a 503's Retry-After of 1 s
    /// finds it free).
    pub async fn run_pool_sweeper(group: Weak<Self>) {
        let mut tick = tokio::time::interval(SWEEP_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut shortages = hayate_core::error::shortages();
        loop {
            tick.tick().await;
            let Some(this) = group.upgrade() else { return };
            let now = Instant::now();
            let seen = hayate_core::error::shortages();
            this.sweep_pools(now, seen != shortages);
            shortages = seen;
            this.publish_figures(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use tokio::io::AsyncReadExt;

    use super::*;
    use crate::group::tests::group;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    }

    #[test]
    fn the_pool_keeps_the_newest_up_to_its_cap_and_drops_expired_ones() {
        runtime().block_on(async {
            let g = group(1);
            let m = &g.members[0];
            // the peers stay open so the connections look alive
            let peers = RefCell::new(Vec::new());
            let pair = || {
                let (a, b) = tokio::net::UnixStream::pair().expect("pair");
                peers.borrow_mut().push(b);
                Transport::Unix(a)
            };
            let fd = |c: &Transport| std::os::fd::AsRawFd::as_raw_fd(c);
            let long = Duration::from_secs(60);
            let conns: Vec<Transport> = (0..4).map(|_| pair()).collect();
            let fds: Vec<i32> = conns.iter().map(fd).collect();
            for c in conns {
                m.checkin(c, long, 3, 0);
            }
            assert_eq!(m.idle.borrow().len(), 3, "the cap holds");
            let now = Instant::now();
            let got: Vec<i32> =
                std::iter::from_fn(|| m.checkout(now, 0, None).map(|c| fd(&c))).collect();
            assert_eq!(
                got,
                vec![fds[3], fds[2], fds[1]],
                "newest first, oldest dropped"
            );

            m.checkin(pair(), Duration::ZERO, 3, 0);
            m.checkin(pair(), long, 3, 0);
            assert_eq!(
                m.idle.borrow().len(),
                1,
                "an expired one goes at the next check-in"
            );
            m.checkin(pair(), long, 0, 0);
            assert_eq!(m.idle.borrow().len(), 0, "a cap of 0 keeps none");
        });
    }

    #[test]
    fn after_a_shortage_the_sweep_lets_every_idle_connection_go() {
        runtime().block_on(async {
            let g = group(2);
            let mut peers = Vec::new();
            for m in &g.members {
                let (a, b) = tokio::net::UnixStream::pair().expect("pair");
                peers.push(b);
                m.checkin(Transport::Unix(a), Duration::from_secs(600), 4, 0);
            }
            let idle = || {
                g.members
                    .iter()
                    .map(|m| m.idle.borrow().len())
                    .sum::<usize>()
            };
            g.sweep_pools(Instant::now(), false);
            assert_eq!(idle(), 2, "live and unexpired: kept");
            g.sweep_pools(Instant::now(), true);
            assert_eq!(idle(), 0, "let go after a shortage");
        });
    }

    #[test]
    fn a_request_that_must_not_repeat_takes_only_a_connection_used_just_now() {
        runtime().block_on(async {
            let g = group(1);
            let m = &g.members[0];
            let (a, _peer) = tokio::net::UnixStream::pair().expect("pair");
            m.checkin(Transport::Unix(a), Duration::from_secs(60), 4, 0);
            let later = Instant::now() + Duration::from_millis(1500);
            let second = Some(Duration::from_secs(1));
            assert!(
                m.checkout(later, 0, second).is_none(),
                "idle for 1.5 s: not for a request that must not repeat"
            );
            assert_eq!(m.idle.borrow().len(), 1, "and it stays for others");
            assert!(
                m.checkout(later, 0, None).is_some(),
                "any request else takes it"
            );
            let (b, _peer) = tokio::net::UnixStream::pair().expect("pair");
            m.checkin(Transport::Unix(b), Duration::from_secs(60), 4, 0);
            assert!(m.checkout(Instant::now(), 0, second).is_some());
        });
    }

    #[test]
    fn the_sweep_closes_expired_connections_and_ones_the_upstream_closed() {
        runtime().block_on(async {
            let g = group(1);
            let m = &g.members[0];
            let (expiring, mut expiring_peer) = tokio::net::UnixStream::pair().expect("pair");
            let (closed, closed_peer) = tokio::net::UnixStream::pair().expect("pair");
            let (kept, mut kept_peer) = tokio::net::UnixStream::pair().expect("pair");
            m.checkin(Transport::Unix(expiring), Duration::from_millis(100), 4, 0);
            m.checkin(Transport::Unix(closed), Duration::from_secs(60), 4, 0);
            m.checkin(Transport::Unix(kept), Duration::from_secs(60), 4, 0);
            drop(closed_peer);
            // The sweep sees the close once epoll has reported it.
            tokio::task::yield_now().await;
            m.sweep(Instant::now() + Duration::from_millis(200));
            assert_eq!(
                m.idle.borrow().len(),
                1,
                "only the live, unexpired one stays"
            );
            let mut byte = [0u8; 1];
            assert_eq!(
                expiring_peer.read(&mut byte).await.expect("read"),
                0,
                "the expired connection was closed"
            );
            let still_open =
                tokio::time::timeout(Duration::from_millis(50), kept_peer.read(&mut byte)).await;
            assert!(still_open.is_err(), "the kept one is open");
        });
    }
}
