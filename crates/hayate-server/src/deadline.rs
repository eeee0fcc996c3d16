//! Connection deadlines without a timer per read.
//!
//! Every read of a keep-alive connection needs a deadline (idle, header,
//! body timeouts), but arming and cancelling a tokio timer for each costs a
//! wheel insertion and removal per request. Instead each worker keeps one
//! slab of deadlines and one sweeper tick ([`SWEEP`]); arming is a couple of
//! writes into the connection's slot, and the sweeper wakes the connections
//! whose deadline passed. Shutdown uses the same slots: it expires every
//! connection that is waiting idle.
//!
//! Deadlines fire up to one sweep interval late; the timeouts they enforce
//! are seconds long, and the tests that use short ones allow for it.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
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

/// A connection's slot; freed on drop.
#[derive(Debug)]
pub struct Deadline {
    registry: Rc<Deadlines>,
    key: usize,
}

impl Deadlines {
    /// A slot for a new connection.
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

    /// Runs the sweeper until the worker ends.
    pub async fn run_sweeper(self: Rc<Self>) {
        let mut tick = tokio::time::interval(SWEEP);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.sweep(Instant::now());
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
}
