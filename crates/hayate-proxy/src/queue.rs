//! The group's queue: a request that finds every member at its
//! `max_conns` (or a supervised app with no ready instance) waits here, in
//! FIFO order, bounded in depth and time; overflow and timeout answer 503
//! with Retry-After, distinct from the 502 of a failing upstream.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::io;

use hayate_core::app::AppSlots;
use hayate_core::error::{Error, ErrorKind};

use crate::UpstreamGroup;

/// Requests waiting in a group's queue on this worker; for a supervised
/// app also counted in a total shared by every worker (`hayate status`).
#[derive(Debug, Default)]
pub(crate) struct QueueGauge {
    local: Cell<usize>,
    /// The total over every worker, for a supervised app.
    pub(crate) shared: Option<Arc<AtomicUsize>>,
}

impl QueueGauge {
    pub(crate) fn get(&self) -> usize {
        self.local.get()
    }

    pub(crate) fn set(&self, n: usize) {
        let old = self.local.replace(n);
        if let Some(total) = &self.shared {
            if n > old {
                total.fetch_add(n - old, Ordering::Relaxed);
            } else {
                total.fetch_sub(old - n, Ordering::Relaxed);
            }
        }
    }
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
    /// Waits for a member to finish a request (or an app instance to
    /// become ready): FIFO, bounded in depth, and in time by `deadline`, set
    /// once per request. Overflow and timeout answer 503 with Retry-After
    /// (distinct from the 502 of a failing upstream). `newcomer`: the
    /// request's first wait; `any_member`: it has tried no member yet;
    /// `retry`: the wait also ends after this long (hayate was short of
    /// descriptors, and what frees one may not wake the queue).
    pub(crate) async fn wait_in_queue(
        &self,
        deadline: Instant,
        newcomer: bool,
        any_member: bool,
        retry: Option<Duration>,
    ) -> Result<(), Error> {
        let busy = |why: String| Error::new(ErrorKind::UpstreamBusy, io::Error::other(why));
        if self.app.as_ref().is_some_and(AppSlots::is_stopped) {
            return Err(Error::new(
                ErrorKind::AppStopped,
                io::Error::other("the app is stopped (hayate stop APP)"),
            ));
        }
        if self.app.as_ref().is_some_and(AppSlots::is_down) {
            return Err(Error::new(
                ErrorKind::AppDown,
                io::Error::other("the app is down: every instance is in a crash loop"),
            ));
        }
        // A request already in line is not refused for the queue's depth.
        // That depth bounds waits for members at their limit; a request
        // waiting for a descriptor (hayate short of them now, or no member
        // limit set, so that nothing else waits) may take as many places
        // as the budget holds clients. Read per wait, the shortage flag
        // alone let 1,024 bound them whenever one connect had just
        // succeeded (272,876 503s in case B at `ulimit -n 4096`).
        let depth = if retry.is_some() || self.settings.max_conns == 0 {
            self.settings.queue_depth.max(self.settings.shortage_depth)
        } else {
            self.settings.queue_depth
        };
        if newcomer && self.waiting.get() >= depth {
            return Err(busy(format!(
                "upstream group full and its queue too ({} waiting)",
                self.waiting.get()
            )));
        }
        if !newcomer && !any_member && self.waiting_any.get() > 0 && self.has_room() {
            // Woken for room only on members this request already failed
            // on: the wakeup goes on to a request that can take any member
            // (those never pass one on, so this ends).
            self.freed.notify_one();
        }
        let _queued = Queued::new(self, any_member);
        let ready = async {
            match &self.app {
                Some(app) => app.ready.notified().await,
                None => std::future::pending().await,
            }
        };
        let pause = async {
            match retry {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        let woken = tokio::time::timeout_at(deadline.into(), async {
            tokio::select! {
                _ = self.freed.notified() => {}
                _ = ready => {}
                _ = pause => {}
            }
        })
        .await;
        match woken {
            Ok(()) => Ok(()),
            Err(_) => Err(busy(format!(
                "request waited {:?} for an upstream",
                self.settings.queue_timeout
            ))),
        }
    }
}

/// Counts a request as waiting in its group's queue until dropped (also
/// when the request is abandoned mid-wait).
struct Queued<'g> {
    group: &'g UpstreamGroup,
    any_member: bool,
}

impl<'g> Queued<'g> {
    fn new(group: &'g UpstreamGroup, any_member: bool) -> Queued<'g> {
        group.waiting.set(group.waiting.get() + 1);
        if any_member {
            group.waiting_any.set(group.waiting_any.get() + 1);
        }
        Queued { group, any_member }
    }
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        let g = self.group;
        g.waiting.set(g.waiting.get().saturating_sub(1));
        if self.any_member {
            g.waiting_any.set(g.waiting_any.get().saturating_sub(1));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_counts_are_mirrored_into_the_shared_total() {
        let total = Arc::new(AtomicUsize::new(5));
        let q = QueueGauge {
            local: Cell::new(0),
            shared: Some(total.clone()),
        };
        q.set(2);
        q.set(3);
        assert_eq!((q.get(), total.load(Ordering::Relaxed)), (3, 8));
        q.set(0);
        assert_eq!(
            total.load(Ordering::Relaxed),
            5,
            "other workers' count stays"
        );
    }
}
