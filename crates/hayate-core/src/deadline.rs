//! Deadlines without a timer per wait.
//!
//! Every read of a keep-alive connection needs a deadline (idle, header,
//! body timeouts), and every proxied request waits for its response head
//! under one, but arming and cancelling a tokio timer for each costs a
//! wheel insertion and removal, and the worker's park then walks the wheel:
//! 612 of a proxied request's 22,112 instructions for the response head's
//! wait alone (bench/instructions/run). Instead each worker keeps one slab
//! of deadlines and one sweeper tick ([`SWEEP`]); arming is a couple of
//! writes into a slot, and the sweeper wakes the waits whose deadline
//! passed. Shutdown uses the same slots: it expires every connection that
//! is waiting idle.
//!
//! A worker [`install`](Deadlines::install)s its registry on its thread;
//! [`within`] waits on it there, and on a tokio timer on any other thread.
//!
//! Deadlines fire up to one sweep interval late; the timeouts they enforce
//! are seconds long, and the tests that use short ones allow for it.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::{pin, Pin};
use std::rc::Rc;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

/// How often deadlines are checked.
pub const SWEEP: Duration = Duration::from_millis(100);

#[derive(Debug, Default)]
struct Slot {
    deadline: Option<Instant>,
    idle: bool,
    /// A kept-alive connection's: it has served a request, so its idle
    /// waits may be cut at the descriptor budget.
    reusable: bool,
    /// Cut as soon as it goes idle while the worker is at the budget (an
    /// HTTP/2 connection's, whose GOAWAY tells its client which requests
    /// to send again; an HTTP/1.1 client learns of a close only by
    /// meeting it, so its answers say `Connection: close` instead).
    cut_when_idle: bool,
    expired: bool,
    waker: Option<Waker>,
}

/// A worker's deadlines.
#[derive(Debug, Default)]
pub struct Deadlines {
    slots: RefCell<Vec<Slot>>,
    free: RefCell<Vec<usize>>,
    /// Set while the worker is at the descriptor budget: a kept-alive
    /// HTTP/2 connection that goes idle closes at once, making room.
    cutting: Cell<bool>,
}

/// Why a guarded wait ended early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expired;

/// A slot: a connection's, or one wait's ([`within`]); freed on drop.
#[derive(Debug)]
pub struct Deadline {
    registry: Rc<Deadlines>,
    key: usize,
}

impl Deadlines {
    /// A slot for a new connection or wait.
    pub fn slot(self: &Rc<Self>) -> Deadline {
        let key = match self.free.borrow_mut().pop() {
            Some(k) => k,
            None => {
                let mut slots = self.slots.borrow_mut();
                slots.push(Slot::default());
                slots.len() - 1
            }
        };
        Deadline {
            registry: self.clone(),
            key,
        }
    }

    /// Expires every armed slot whose deadline is at or before `now`.
    pub fn sweep(&self, now: Instant) {
        self.expire(|s| s.deadline.is_some_and(|d| d <= now));
    }

    /// Expires every connection waiting idle (shutdown).
    pub fn expire_idle(&self) {
        self.expire(|s| s.deadline.is_some() && s.idle);
    }

    /// Expires some of the kept-alive connections waiting idle (never one
    /// that has sent nothing yet, whose client would lose its first
    /// request), the longest idle
    /// first (their keep-alive deadlines are the soonest): an eighth of
    /// them, 1 to 32, as nginx's `ngx_drain_connections` when it runs out
    /// of connections. At the descriptor budget a client waiting in the
    /// listen backlog needs a slot more than one that is not using its own
    /// (which may reconnect: an idle keep-alive connection may close at
    /// any time). Only those whose deadline is at or before `due_by`: the
    /// caller's way to spare a connection idle for a moment only, whose
    /// client is likely sending its next request as it closes (a load
    /// generator or a proxy reusing its connections at once). Returns how
    /// many.
    pub fn expire_longest_idle(&self, due_by: Instant) -> usize {
        let mut idle: Vec<(Instant, usize)> = self
            .slots
            .borrow()
            .iter()
            .enumerate()
            .filter(|(_, s)| s.idle && s.reusable && !s.expired)
            .filter_map(|(key, s)| Some((s.deadline.filter(|&d| d <= due_by)?, key)))
            .collect();
        if idle.is_empty() {
            return 0;
        }
        let n = (idle.len() / 8).clamp(1, 32);
        idle.select_nth_unstable(n - 1);
        let chosen: Vec<usize> = idle[..n].iter().map(|&(_, key)| key).collect();
        self.expire_keys(&chosen);
        n
    }

    /// While `on`, a kept-alive connection that goes idle is expired at
    /// once (see [`Deadlines::expire_longest_idle`]): set while the worker
    /// waits at the descriptor budget, for the connections that finish
    /// their requests meanwhile.
    pub fn cut_idle(&self, on: bool) {
        self.cutting.set(on);
    }

    /// Whether kept-alive connections are being cut to make room: an
    /// answer then says it is the connection's last.
    pub fn cutting_idle(&self) -> bool {
        self.cutting.get()
    }

    fn expire_keys(&self, keys: &[usize]) {
        let mut wake = Vec::new();
        {
            let mut slots = self.slots.borrow_mut();
            for &key in keys {
                slots[key].expired = true;
                wake.extend(slots[key].waker.take());
            }
        }
        for w in wake {
            w.wake();
        }
    }

    fn expire(&self, due: impl Fn(&Slot) -> bool) {
        let mut wake = Vec::new();
        for slot in self.slots.borrow_mut().iter_mut() {
            if !slot.expired && due(slot) {
                slot.expired = true;
                wake.extend(slot.waker.take());
            }
        }
        // Wake outside the borrow: a woken task may run arm/disarm.
        for w in wake {
            w.wake();
        }
    }

    /// Makes this registry the one [`within`] uses on this thread (a
    /// worker's, for as long as it runs).
    pub fn install(self: &Rc<Self>) {
        THIS_THREAD.with(|t| *t.borrow_mut() = Some(self.clone()));
    }

    /// Runs the sweeper until the worker ends.
    pub async fn run_sweeper(self: Rc<Self>) {
        let mut tick = tokio::time::interval(SWEEP);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            // Also renews the loop time while the loop never sleeps.
            crate::loop_time::woke();
            self.sweep(crate::loop_time::instant());
        }
    }
}

impl Deadline {
    /// Marks the slot's connection as kept alive ([`Deadlines::expire_longest_idle`]).
    pub fn mark_reusable(&self) {
        self.registry.slots.borrow_mut()[self.key].reusable = true;
    }

    /// Marks the slot's connection as kept alive, and to be cut as soon as
    /// it goes idle at the descriptor budget ([`Deadlines::cut_idle`]).
    pub fn mark_reusable_cut_when_idle(&self) {
        let mut slots = self.registry.slots.borrow_mut();
        slots[self.key].reusable = true;
        slots[self.key].cut_when_idle = true;
    }

    /// Waits for `fut` until `deadline`; `idle` marks a wait that shutdown
    /// may cut short. The slot is armed when the wait is first polled and
    /// disarmed when it ends.
    ///
    /// A plain function returning a `poll_fn` (`fut` is `Unpin`, polled in
    /// place): every connection's task holds this future while it waits
    /// for the client, and an async fn would hold `fut` twice.
    pub fn run<'a, F: Future + Unpin + 'a>(
        &'a self,
        deadline: Instant,
        idle: bool,
        mut fut: F,
    ) -> impl Future<Output = Result<F::Output, Expired>> + 'a {
        let mut armed = false;
        std::future::poll_fn(move |cx| {
            if !armed {
                armed = true;
                let mut slots = self.registry.slots.borrow_mut();
                let s = &mut slots[self.key];
                s.deadline = Some(deadline);
                s.idle = idle;
                s.expired = idle && s.cut_when_idle && self.registry.cutting.get();
            }
            let polled = Pin::new(&mut fut).poll(cx);
            let mut slots = self.registry.slots.borrow_mut();
            let s = &mut slots[self.key];
            let out = match polled {
                Poll::Ready(v) => Ok(v),
                Poll::Pending if s.expired => Err(Expired),
                Poll::Pending => {
                    match &s.waker {
                        Some(w) if w.will_wake(cx.waker()) => {}
                        _ => s.waker = Some(cx.waker().clone()),
                    }
                    return Poll::Pending;
                }
            };
            s.deadline = None;
            s.expired = false;
            Poll::Ready(out)
        })
    }
}

impl Deadline {
    /// The slot as a deadline of its own, with no future to guard: for a
    /// connection whose deadline moves with its state (an HTTP/2
    /// connection's stalled writes), which polls it each time it is about
    /// to wait. Arms the slot for `until` (again only if `until` changed)
    /// and is ready once a sweep passed it; the task is woken then.
    pub fn poll_at(&self, until: Instant, cx: &mut std::task::Context<'_>) -> Poll<()> {
        let mut slots = self.registry.slots.borrow_mut();
        let s = &mut slots[self.key];
        if s.deadline != Some(until) {
            s.deadline = Some(until);
            s.idle = false;
            s.expired = false;
        }
        if s.expired {
            return Poll::Ready(());
        }
        match &s.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => s.waker = Some(cx.waker().clone()),
        }
        Poll::Pending
    }

    /// Disarms what [`Deadline::poll_at`] armed (nothing to do when it
    /// is not armed, the common case: one borrow and a compare).
    pub fn disarm(&self) {
        let mut slots = self.registry.slots.borrow_mut();
        let s = &mut slots[self.key];
        if s.deadline.is_some() {
            *s = Slot::default();
        }
    }
}

thread_local! {
    /// The registry a worker installed on its thread.
    static THIS_THREAD: RefCell<Option<Rc<Deadlines>>> = const { RefCell::new(None) };
}

/// Waits for `fut` until `until` (not an idle wait: shutdown lets it
/// finish): on the slots of the worker running this thread, or on a tokio
/// timer where no worker installed any (tests, other runtimes).
pub async fn within<F: Future>(until: Instant, fut: F) -> Result<F::Output, Expired> {
    let mut fut = pin!(fut);
    match THIS_THREAD.with(|t| t.borrow().clone()) {
        Some(registry) => {
            let slot = registry.slot();
            slot.run(until, false, fut.as_mut()).await
        }
        None => tokio::time::timeout_at(until.into(), fut)
            .await
            .map_err(|_| Expired),
    }
}

impl Drop for Deadline {
    fn drop(&mut self) {
        if let Some(s) = self.registry.slots.borrow_mut().get_mut(self.key) {
            *s = Slot::default();
        }
        self.registry.free.borrow_mut().push(self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn expires_on_sweep_and_on_shutdown() {
        let reg = Rc::new(Deadlines::default());
        let a = reg.slot();
        let now = Instant::now();
        // Ready futures win whatever the deadline.
        assert_eq!(a.run(now, false, std::future::ready(7)).await, Ok(7));
        // A pending future ends when a sweep passes its deadline.
        let local = tokio::task::LocalSet::new();
        let r = reg.clone();
        let out = local
            .run_until(async move {
                let waiter = tokio::task::spawn_local(async move {
                    a.run(
                        now + Duration::from_millis(5),
                        false,
                        std::future::pending::<()>(),
                    )
                    .await
                });
                tokio::task::yield_now().await;
                r.sweep(now);
                tokio::task::yield_now().await;
                assert!(!waiter.is_finished(), "not due yet");
                r.sweep(now + Duration::from_millis(5));
                waiter.await.expect("join")
            })
            .await;
        assert_eq!(out, Err(Expired));
        // Shutdown expires idle waits only.
        let b = reg.slot();
        let c = reg.slot();
        let far = now + Duration::from_secs(60);
        let r = reg.clone();
        local
            .run_until(async move {
                let idle = tokio::task::spawn_local(async move {
                    b.run(far, true, std::future::pending::<()>()).await
                });
                let busy = tokio::task::spawn_local(async move {
                    c.run(far, false, std::future::pending::<()>()).await
                });
                tokio::task::yield_now().await;
                r.expire_idle();
                assert_eq!(idle.await.expect("join"), Err(Expired));
                tokio::task::yield_now().await;
                assert!(!busy.is_finished());
                busy.abort();
                let _ = busy.await;
            })
            .await;
        // a's slot was reused by b: two slots in all, both free again.
        assert_eq!((reg.slots.borrow().len(), reg.free.borrow().len()), (2, 2));
    }

    /// A waker that records being woken.
    struct Flag(std::sync::atomic::AtomicBool);

    impl std::task::Wake for Flag {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    #[test]
    fn a_polled_deadline_moves_expires_on_sweep_and_disarms() {
        let reg = Rc::new(Deadlines::default());
        let slot = reg.slot();
        let flag = std::sync::Arc::new(Flag(Default::default()));
        let waker = Waker::from(flag.clone());
        let mut cx = std::task::Context::from_waker(&waker);
        let woken = || flag.0.swap(false, std::sync::atomic::Ordering::SeqCst);
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        assert!(slot.poll_at(ms(5), &mut cx).is_pending());
        reg.sweep(t0);
        assert!(!woken(), "not due yet");
        // Moved later before it was due: the old instant no longer counts.
        assert!(slot.poll_at(ms(50), &mut cx).is_pending());
        reg.sweep(ms(5));
        assert!(!woken());
        assert!(slot.poll_at(ms(50), &mut cx).is_pending());
        reg.sweep(ms(50));
        assert!(woken(), "the sweep wakes the task");
        assert!(slot.poll_at(ms(50), &mut cx).is_ready());
        // Disarmed, a sweep passes it by.
        slot.disarm();
        reg.sweep(ms(60_000));
        assert!(!woken());
        let slots = reg.slots.borrow();
        assert!(slots[slot.key].deadline.is_none() && !slots[slot.key].expired);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn at_the_budget_the_longest_idle_connection_is_closed_first() {
        let reg = Rc::new(Deadlines::default());
        let now = Instant::now();
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async move {
                // Kept-alive idle waits ending in 3, 1 and 2 s, a busy one
                // (a request's head being read) and a new connection's
                // first wait, both ending sooner.
                let waits: Vec<_> = [(3, true, true), (1, true, true), (2, true, true)]
                    .into_iter()
                    .chain([(0, false, true), (0, true, false)])
                    .map(|(s, idle, kept)| {
                        let slot = reg.slot();
                        if kept {
                            slot.mark_reusable();
                        }
                        tokio::task::spawn_local(async move {
                            let until = now + Duration::from_secs(s);
                            slot.run(until, idle, std::future::pending::<()>()).await
                        })
                    })
                    .collect();
                tokio::task::yield_now().await;
                // None due by 0.5 s: the ones idle for a moment only are spared.
                assert_eq!(reg.expire_longest_idle(now + Duration::from_millis(500)), 0);
                let due_by = now + Duration::from_secs(60);
                assert_eq!(
                    reg.expire_longest_idle(due_by),
                    1,
                    "an eighth of 3, at least 1"
                );
                tokio::task::yield_now().await;
                let ended: Vec<bool> = waits.iter().map(|w| w.is_finished()).collect();
                assert_eq!(ended, [false, true, false, false, false]);
                // At the budget, a kept-alive HTTP/2 connection going idle
                // is cut at once; an HTTP/1.1 one (its answers said
                // `Connection: close` meanwhile) and a new one are not.
                reg.cut_idle(true);
                let going_idle = |kept: Option<bool>| {
                    let slot = reg.slot();
                    match kept {
                        Some(true) => slot.mark_reusable_cut_when_idle(),
                        Some(false) => slot.mark_reusable(),
                        None => {}
                    }
                    tokio::task::spawn_local(async move {
                        let until = now + Duration::from_secs(60);
                        slot.run(until, true, std::future::pending::<()>()).await
                    })
                };
                let (h2, h1, new) = (
                    going_idle(Some(true)),
                    going_idle(Some(false)),
                    going_idle(None),
                );
                tokio::task::yield_now().await;
                assert!(h2.is_finished() && !h1.is_finished() && !new.is_finished());
                h1.abort();
                new.abort();
                for w in waits {
                    w.abort();
                }
            })
            .await;
        assert_eq!(Deadlines::default().expire_longest_idle(Instant::now()), 0);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn within_waits_on_the_installed_registry_else_on_a_timer() {
        let past = Instant::now() - Duration::from_millis(1);
        // No registry on this thread: a tokio timer, already due.
        assert_eq!(
            within(past, std::future::pending::<()>()).await,
            Err(Expired)
        );
        let reg = Rc::new(Deadlines::default());
        reg.install();
        let local = tokio::task::LocalSet::new();
        let r = reg.clone();
        let out = local
            .run_until(async move {
                let waiter = tokio::task::spawn_local(within(past, std::future::pending::<()>()));
                tokio::task::yield_now().await;
                // Due, but only a sweep ends it: no timer was armed.
                assert!(!waiter.is_finished(), "a sweep ends it, not a timer");
                assert_eq!(r.slots.borrow().len(), 1, "it took a slot");
                r.sweep(Instant::now());
                waiter.await.expect("join")
            })
            .await;
        assert_eq!(out, Err(Expired));
        // Ready futures need no sweep; the slot is free again.
        assert_eq!(within(past, std::future::ready(3)).await, Ok(3));
        assert_eq!(reg.free.borrow().len(), 1);
        THIS_THREAD.with(|t| t.borrow_mut().take());
    }
}
