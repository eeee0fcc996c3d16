//! The descriptor budget (issue 43): how many client connections hayate
//! holds at once, from its open-file limit less a reserve for everything
//! else, and the count of open ones that every worker's accept loop checks.
//!
//! A client connection past the budget would be accepted only to fail:
//! its upstream connection or file open would find no descriptor. So at
//! the budget workers stop accepting and the connection waits in the
//! kernel's listen backlog (4096, `listen.rs`) until one closes; idle
//! keep-alive connections are closed to make room for it.
//!
//! The count is one atomic shared by the workers (it was already, for
//! `max_connections`); a close wakes paused accept loops only when there
//! are some, so the accept path costs no more than before.

use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Notify;

/// The open-file limit under which startup warns: what it allows is then
/// likely to be reached (the bench lab's case B holds 10,000 clients).
pub const LOW_LIMIT: u64 = 4096;

/// What the open-file limit allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// The soft RLIMIT_NOFILE, once raised to the hard one.
    pub limit: u64,
    /// Descriptors kept from client connections.
    pub reserve: u64,
    /// Client connections held at once: `limit - reserve`.
    pub clients: usize,
}

impl Budget {
    /// The budget under `limit` for `workers` workers.
    ///
    /// The reserve has two parts. What hayate holds besides connections:
    /// measured idle with two listeners, a static root, a proxy route, the
    /// admin listener and a file access log, 19 descriptors with one worker,
    /// 32 with two, 50 with four (listeners, event loops, inotify); doubled,
    /// 32 + 20 per worker, for what comes and goes beside them (a reload's
    /// new generation, admin and control connections, health probes, a log
    /// being reopened). And a quarter of the limit for what a client's
    /// request opens: an upstream connection, a large file. A quarter, not
    /// a half: a proxied request needs two descriptors only while its
    /// upstream connection is its own, and one that finds none waits in the
    /// proxy's queue for a pooled one, so more clients may be held than
    /// could be served at once. With case B's limit of 20,000 and one
    /// worker that leaves 14,948 clients (it holds 10,000); with 256, 140.
    pub fn new(limit: u64, workers: usize) -> Budget {
        let fixed = 32 + 20 * workers as u64;
        let reserve = (fixed + limit / 4).min(limit.saturating_sub(1));
        let clients = usize::try_from(limit - reserve).unwrap_or(usize::MAX);
        Budget {
            limit,
            reserve,
            clients,
        }
    }
}

impl Budget {
    /// What a low limit allows, for the startup warning and `hayate
    /// check`; `None` when the limit is not low.
    pub fn low_limit_note(&self, max_connections: u32) -> Option<String> {
        if self.limit >= LOW_LIMIT {
            return None;
        }
        let cap = match max_connections as usize {
            max if max < self.clients => format!("max_connections {max} refuses clients past it"),
            max => format!("max_connections {max} is above that"),
        };
        Some(format!(
            "open-file limit {}: hayate holds at most {} client connections at once ({cap}; \
             {} descriptors are kept for upstream connections, files, listeners and logs); \
             more clients wait in the listen backlog. Raise the limit (ulimit -n, \
             LimitNOFILE=) to serve more",
            self.limit, self.clients, self.reserve
        ))
    }
}

/// The open-file limit hayate runs under when started from this process's
/// environment: the hard limit, to which it raises the soft one.
pub fn limit_at_start() -> u64 {
    use nix::sys::resource::{getrlimit, Resource};
    getrlimit(Resource::RLIMIT_NOFILE).map_or(u64::MAX, |(_, hard)| hard)
}

/// The client connections the budget holds under the limit in force now.
pub fn clients_now(workers: usize) -> usize {
    Budget::new(current_limit(), workers).clients
}

/// The open-file limit in force now (the soft one; after start, raised to
/// the hard one).
pub fn current_limit() -> u64 {
    use nix::sys::resource::{getrlimit, Resource};
    getrlimit(Resource::RLIMIT_NOFILE).map_or(u64::MAX, |(soft, _)| soft)
}

/// Descriptors one worker's open-file cache of one root may hold (a file
/// larger than `file_cache_max_file` is served from one it keeps open):
/// an eighth of the reserve's quarter for what requests open, shared by
/// the workers, between 4 and the cache's bound of 8,192 entries. At 256
/// and one worker, 8; at case B's 20,000, 625. Without it the cache of a
/// site with many large files could hold them all (8,192 per worker).
pub fn file_cache_descriptors(limit: u64, workers: usize) -> usize {
    let share = limit / 32 / workers.max(1) as u64;
    usize::try_from(share).unwrap_or(usize::MAX).clamp(4, 8192)
}

/// Open client connections across workers, against the budget.
#[derive(Debug)]
pub struct Connections {
    open: AtomicUsize,
    budget: usize,
    /// Accept loops waiting for a connection to close.
    paused: AtomicUsize,
    closed: Notify,
}

impl Connections {
    /// None open yet, at most `budget`.
    pub fn new(budget: usize) -> Connections {
        Connections {
            open: AtomicUsize::new(0),
            budget,
            paused: AtomicUsize::new(0),
            closed: Notify::new(),
        }
    }

    /// Open connections now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// Whether the budget is reached: accept no more for now.
    pub fn full(&self) -> bool {
        self.open.load(Ordering::SeqCst) >= self.budget
    }

    /// Counts an accepted connection; returns how many were open before.
    pub fn opened(&self) -> usize {
        self.open.fetch_add(1, Ordering::SeqCst)
    }

    /// Counts a connection's close, waking paused accept loops.
    pub fn closed(&self) {
        self.open.fetch_sub(1, Ordering::SeqCst);
        // SeqCst on both sides (here and in `room`): either the paused
        // loop sees the lower count, or this sees the loop paused.
        if self.paused.load(Ordering::SeqCst) > 0 {
            self.closed.notify_waiters();
        }
    }

    /// Waits until the open connections are below the budget.
    pub async fn room(&self) {
        while self.full() {
            let closed = self.closed.notified();
            tokio::pin!(closed);
            closed.as_mut().enable();
            self.paused.fetch_add(1, Ordering::SeqCst);
            let _unpause = Unpause(&self.paused);
            if !self.full() {
                return;
            }
            closed.await;
        }
    }
}

/// Counts an accept loop as paused until dropped (also when its wait is
/// abandoned: shutdown, a reload).
struct Unpause<'a>(&'a AtomicUsize);

impl Drop for Unpause<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn the_budget_keeps_a_reserve_and_a_quarter() {
        let b = Budget::new(256, 1);
        assert_eq!((b.reserve, b.clients), (52 + 64, 140));
        let case_b = Budget::new(20_000, 1);
        assert_eq!(case_b.clients, 14_948);
        assert!(Budget::new(1 << 20, 2).clients > 700_000);
        // A limit below the fixed part still lets one client in.
        assert_eq!(Budget::new(40, 4).clients, 1);
        assert_eq!(file_cache_descriptors(256, 1), 8);
        assert_eq!(file_cache_descriptors(20_000, 1), 625);
        assert_eq!(file_cache_descriptors(1 << 20, 2), 8192);
        assert_eq!(file_cache_descriptors(64, 8), 4);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_full_budget_waits_for_a_close() {
        let c = Arc::new(Connections::new(2));
        c.opened();
        c.room().await;
        c.opened();
        assert!(c.full());
        let waiting = tokio::spawn({
            let c = c.clone();
            async move { c.room().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "paused at the budget");
        assert_eq!(c.paused.load(Ordering::SeqCst), 1);
        c.closed();
        tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
            .await
            .expect("woken by the close")
            .expect("join");
        assert_eq!(c.paused.load(Ordering::SeqCst), 0);
        assert_eq!(c.open(), 1);
    }
}
