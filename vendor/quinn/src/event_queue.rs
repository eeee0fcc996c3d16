//! hayate: the queue of events from the endpoint to one connection.
//!
//! quinn used tokio's unbounded channel, whose first block of 32 slots is
//! allocated with the channel: 32 events of 216 bytes, 7 KB for every
//! connection for its whole life, idle or not, where a busy connection has a
//! few events waiting at a time. This queue holds what is waiting and no
//! more: it grows with a burst, and gives the room back when it empties after
//! one that took more than `KEPT` slots. Boxing each event instead (256 bytes
//! of slots) cost an allocation per datagram, 3 % of a static HTTP/3
//! request's CPU.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

/// Slots kept when the queue empties: a burst of datagrams that came in one
/// read of the socket (quinn-udp's GRO batches) fits.
const KEPT: usize = 8;

struct State<T> {
    items: VecDeque<T>,
    waker: Option<Waker>,
    sender_alive: bool,
    receiver_alive: bool,
}

/// The endpoint's end. One per connection; when it is dropped, the
/// connection's end sees the queue's end once it has taken what is left.
pub(crate) struct Sender<T>(Arc<Mutex<State<T>>>);

/// The connection's end.
pub(crate) struct Receiver<T>(Arc<Mutex<State<T>>>);

pub(crate) fn queue<T>() -> (Sender<T>, Receiver<T>) {
    let state = Arc::new(Mutex::new(State {
        items: VecDeque::new(),
        waker: None,
        sender_alive: true,
        receiver_alive: true,
    }));
    (Sender(state.clone()), Receiver(state))
}

impl<T> std::fmt::Debug for Sender<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sender").finish_non_exhaustive()
    }
}

impl<T> std::fmt::Debug for Receiver<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receiver").finish_non_exhaustive()
    }
}

impl<T> Sender<T> {
    /// Queues `item`; it comes back when the connection's end is gone.
    pub(crate) fn send(&self, item: T) -> Result<(), T> {
        let waker = {
            let mut state = self.0.lock().unwrap();
            if !state.receiver_alive {
                return Err(item);
            }
            state.items.push_back(item);
            state.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
        Ok(())
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let waker = {
            let mut state = self.0.lock().unwrap();
            state.sender_alive = false;
            state.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

impl<T> Receiver<T> {
    /// The next event, `None` once the sender is gone and nothing is left.
    pub(crate) fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let mut state = self.0.lock().unwrap();
        if let Some(item) = state.items.pop_front() {
            if state.items.is_empty() && state.items.capacity() > KEPT {
                state.items.shrink_to(KEPT);
            }
            return Poll::Ready(Some(item));
        }
        if !state.sender_alive {
            return Poll::Ready(None);
        }
        match &mut state.waker {
            Some(waker) if waker.will_wake(cx.waker()) => {}
            waker => *waker = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let items = {
            let mut state = self.0.lock().unwrap();
            state.receiver_alive = false;
            state.waker = None;
            std::mem::take(&mut state.items)
        };
        // Dropped outside the lock: an event may own a socket.
        drop(items);
    }
}
