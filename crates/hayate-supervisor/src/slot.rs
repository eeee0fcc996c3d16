//! One slot of an app: its task starts an instance, watches it, restarts
//! it after an exit (with backoff, until a crash loop halts it), replaces
//! it on a reload or past a limit (new one ready first), and stops it
//! when the app or hayate stops.

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use hayate_core::app::AppSlot;
use tokio::sync::{watch, Notify, Semaphore};

use crate::instance::Running;
use crate::{
    AppSpec, ChildState, Control, SlotStatus, StatusBoard, CRASH_LIMIT, CRASH_WINDOW, LIMIT_CHECK,
};

/// One slot's life: start, watch, restart, reload, stop.
pub(crate) struct SlotTask {
    pub(crate) index: usize,
    pub(crate) spec: Arc<ArcSwap<AppSpec>>,
    pub(crate) slot: Arc<AppSlot>,
    pub(crate) ready: Arc<Notify>,
    /// Slots in a crash loop (all of them: the app is down).
    pub(crate) halted: Arc<AtomicUsize>,
    pub(crate) control: watch::Receiver<Control>,
    /// Reloads roll one slot at a time.
    pub(crate) roll: Arc<Semaphore>,
    pub(crate) ids: Arc<AtomicU64>,
    pub(crate) board: StatusBoard,
    /// Under `tcp:BASE`: the next start takes the slot's second port.
    pub(crate) alternate: AtomicBool,
}

impl SlotTask {
    fn tag(&self) -> String {
        self.spec.load().tag(self.index)
    }

    async fn start(&self) -> io::Result<Running> {
        let alternate = self.alternate.load(Ordering::Relaxed);
        let control = self.control.clone();
        let stopping = move || control.borrow().stop;
        let spec = self.spec.load_full();
        let r = Running::start(self.index, &spec, &self.ids, alternate, stopping).await;
        if r.is_ok() {
            self.alternate.store(!alternate, Ordering::Relaxed);
        }
        r
    }

    pub(crate) async fn run(mut self) {
        let mut reloads_seen = self.control.borrow().reload;
        let mut exits: VecDeque<Instant> = VecDeque::new();
        let mut current: Option<Running> = None;
        let mut limits = tokio::time::interval(LIMIT_CHECK);
        limits.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            if self.control.borrow().stop {
                break;
            }
            if self.control.borrow().app_stopped {
                if let Some(run) = current.take() {
                    self.slot.replace(None);
                    let limit = self.spec.load().stop_timeout;
                    if !run.drain(limit).await {
                        log::warn!("{} still busy after {limit:?}; stopping it", self.tag());
                    }
                    run.stop(limit).await;
                }
                self.set_state(ChildState::Stopped, None, false);
                if !self.wait_for_start().await {
                    break;
                }
                exits.clear();
                reloads_seen = self.control.borrow().reload;
                continue;
            }
            let Some(run) = current.as_mut() else {
                match self.start().await {
                    Ok(r) => {
                        self.publish(&r);
                        current = Some(r);
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => break,
                    Err(e) => {
                        self.set_state(ChildState::Backoff, None, true);
                        self.note_exit(format!("failed to start: {e}"));
                        log::error!("{} failed to start: {e}", self.tag());
                        if !self.after_exit(&mut exits).await {
                            break;
                        }
                    }
                }
                continue;
            };
            tokio::select! {
                status = run.wait() => {
                    self.slot.replace(None);
                    self.set_state(ChildState::Backoff, None, true);
                    log::warn!("{} (pid {}) exited: {status}", self.tag(), run.pid());
                    self.note_exit(status.to_string());
                    if let Some(old) = current.take() {
                        old.kill_group();
                        old.cleanup();
                    }
                    if !self.after_exit(&mut exits).await {
                        break;
                    }
                }
                _ = limits.tick() => {
                    if let Some(reason) = self.over_limit(run) {
                        log::info!("{} (pid {}) {reason}: replacing it", self.tag(), run.pid());
                        self.note_exit(format!("replaced: {reason}"));
                        if let Some(old) = current.take() {
                            current = Some(self.roll_over(old).await);
                        }
                    }
                }
                changed = self.control.changed() => {
                    if changed.is_err() || self.control.borrow().stop {
                        break;
                    }
                    let reload = self.control.borrow().reload;
                    if reload != reloads_seen {
                        reloads_seen = reload;
                        if let Some(old) = current.take() {
                            current = Some(self.roll_over(old).await);
                        }
                    }
                }
            }
        }
        if let Some(run) = current.take() {
            self.slot.replace(None);
            run.stop(self.spec.load().stop_timeout).await;
        }
        self.set_state(ChildState::Stopped, None, false);
    }

    /// Waits, the app stopped, for `hayate start APP`: true then, false
    /// when hayate stops first.
    async fn wait_for_start(&mut self) -> bool {
        loop {
            if self.control.changed().await.is_err() || self.control.borrow().stop {
                return false;
            }
            if !self.control.borrow().app_stopped {
                return true;
            }
        }
    }

    /// Why `run` must be recycled, if it must: memory (RSS read from
    /// /proc at every check) or requests served.
    fn over_limit(&self, run: &Running) -> Option<String> {
        if let Some(max) = self.spec.load().max_memory {
            let rss = run.rss_bytes().unwrap_or(0);
            if rss > max {
                return Some(format!(
                    "uses {} MiB, over its {} MiB limit",
                    rss >> 20,
                    max >> 20
                ));
            }
        }
        if let Some(max) = self.spec.load().max_requests {
            let served = run.instance.served.load(Ordering::Relaxed);
            if served >= max {
                return Some(format!("served {served} requests, its limit"));
            }
        }
        None
    }

    fn set_state(&self, state: ChildState, pid: Option<u32>, restarted: bool) {
        self.update(|s| {
            if s.state != state || s.pid != pid {
                s.since = Instant::now();
            }
            s.state = state;
            s.pid = pid;
            s.restarts += u32::from(restarted);
            if state == ChildState::Ready && s.first_start.is_none() {
                s.first_start = Some(Ok(()));
            }
        });
    }

    /// Records why the slot's instance ended (or did not start).
    fn note_exit(&self, why: String) {
        self.update(|s| {
            if s.first_start.is_none() {
                s.first_start = Some(Err(why.clone()));
            }
            s.last_exit = Some(why);
        });
    }

    fn update(&self, change: impl FnOnce(&mut SlotStatus)) {
        if let Ok(mut board) = self.board.slots.lock() {
            change(&mut board[self.index]);
        }
        self.board.changed.notify_all();
    }

    fn publish(&self, r: &Running) {
        self.set_state(ChildState::Ready, Some(r.pid()), false);
        // Started while `hayate stop APP` came: no traffic for it (the
        // loop stops it next).
        if !self.control.borrow().app_stopped {
            self.slot.replace(Some(r.instance.clone()));
        }
        self.ready.notify_waiters();
        log::info!(
            "{} ready (pid {}) on {}",
            self.tag(),
            r.pid(),
            r.instance.addr
        );
    }

    /// Replaces `old` with a new instance: start, wait ready, switch, drain,
    /// stop. If the new one fails, `old` keeps serving.
    async fn roll_over(&self, old: Running) -> Running {
        let _turn = self.roll.acquire().await;
        match self.start().await {
            Ok(new) => {
                self.publish(&new);
                let drained = old.drain(self.spec.load().stop_timeout).await;
                if !drained {
                    log::warn!(
                        "{} old instance still busy after {:?}; stopping it",
                        self.tag(),
                        self.spec.load().stop_timeout
                    );
                }
                old.stop(self.spec.load().stop_timeout).await;
                new
            }
            // hayate stops: the old instance is stopped with the others.
            Err(e) if e.kind() == io::ErrorKind::Interrupted => old,
            Err(e) => {
                log::error!(
                    "{} reload failed: {e}; the running instance keeps serving",
                    self.tag()
                );
                old
            }
        }
    }

    /// After an exit: wait the backoff, or give up on a crash loop (then
    /// only a reload or stop continues). False when stopping.
    async fn after_exit(&mut self, exits: &mut VecDeque<Instant>) -> bool {
        let now = Instant::now();
        exits.push_back(now);
        while exits
            .front()
            .is_some_and(|t| now.duration_since(*t) > CRASH_WINDOW)
        {
            exits.pop_front();
        }
        if exits.len() >= CRASH_LIMIT {
            self.set_state(ChildState::Halted, None, false);
            // Requests waiting for this app re-check whether it is down.
            self.halted.fetch_add(1, Ordering::AcqRel);
            self.ready.notify_waiters();
            log::error!(
                "{} crash loop: {} exits within {:?}; not restarting it until a reload",
                self.tag(),
                exits.len(),
                CRASH_WINDOW
            );
            let seen = self.control.borrow().reload;
            loop {
                if self.control.changed().await.is_err() || self.control.borrow().stop {
                    return false;
                }
                if self.control.borrow().reload != seen || self.control.borrow().app_stopped {
                    exits.clear();
                    self.halted.fetch_sub(1, Ordering::AcqRel);
                    return true;
                }
            }
        }
        let delay = backoff(exits.len());
        tokio::select! {
            _ = tokio::time::sleep(delay) => true,
            changed = self.control.changed() => changed.is_ok() && !self.control.borrow().stop,
        }
    }
}

/// 100 ms doubling per recent exit, capped at 5 s, with ±20 % jitter so a
/// fleet does not restart in lockstep.
fn backoff(recent_exits: usize) -> Duration {
    let base = 100u64
        .saturating_mul(1 << recent_exits.saturating_sub(1).min(6))
        .min(5_000);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let jitter = u64::from(nanos % 400) as i64 - 200; // -200..200 per mille
    Duration::from_millis((base as i64 + base as i64 * jitter / 1000).max(10) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        let ms = |n| backoff(n).as_millis();
        assert!((80..=120).contains(&ms(1)), "{}", ms(1));
        assert!((160..=240).contains(&ms(2)), "{}", ms(2));
        assert!(ms(20) <= 6_000 && ms(20) >= 4_000, "{}", ms(20));
    }
}
