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

use std::cell::RefCell;
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
    expired: bool,
    waker: Option<Waker>,
}

/// A worker's deadlines.
#[derive(Debug, Default)]
pub struct Deadlines {
    slots: RefCell<Vec<Slot>>,
    free: RefCell<Vec<usize>>,
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
                s.expired = false;
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
