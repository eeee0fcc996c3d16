//! The cache's inotify queue, and when it is read.
//!
//! The cache applies queued events before a lookup, at most once per input
//! epoch (hayate_core::epoch: once per socket read, not per pipelined
//! request). The kernel queues an event inside the syscall that changed the
//! file, so a read of the queue after a request's bytes were read sees
//! every change completed before they arrived. That read is a syscall, and
//! on a keep-alive connection it would be one per request.
//!
//! In a worker the descriptor is registered with the event loop, and its
//! readiness, set by the same `epoll_wait` calls that report client sockets,
//! stands in for the read when the epoch says every input since the queue
//! was last read to its end came after waiting for the event loop: the
//! `epoll_wait` that reported a request's first byte also reported any event
//! queued before it. The common keep-alive request (one request per read,
//! after the connection waited for it) costs no syscall here. Otherwise
//! (a read that found the socket still readable, a pipelined request, a task
//! without coop budget, where tokio answers Pending whatever the readiness,
//! no event loop at all in tests and validation) the queue is read: one
//! `read` returning EAGAIN when nothing changed.

use std::cell::Cell;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::task::{Context, Poll, Waker};

use nix::sys::inotify::{Inotify, InotifyEvent};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// An inotify instance for [`AsyncFd`], which then owns it.
struct LoopInotify(Inotify);

impl AsRawFd for LoopInotify {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

/// The inotify instance: in the worker's event loop when there is one, or
/// plain.
enum Events {
    Loop(AsyncFd<LoopInotify>),
    Plain(Inotify),
}

/// A cache's inotify instance and when its queue was last read to the end.
pub(super) struct Queue {
    events: Events,
    /// The input epoch of the last read that reached EAGAIN.
    read_epoch: Cell<u64>,
}

impl Queue {
    /// Wraps a non-blocking instance, registered with the current event
    /// loop if there is one.
    pub fn new(inotify: Inotify) -> Queue {
        let events = if tokio::runtime::Handle::try_current().is_err() {
            Events::Plain(inotify)
        } else {
            // The safe constructor is deprecated for types that do not own
            // their descriptor; LoopInotify owns it, so it stays open and the
            // same for the AsyncFd's whole life.
            #[allow(deprecated)]
            match AsyncFd::try_with_interest(LoopInotify(inotify), Interest::READABLE) {
                Ok(fd) => Events::Loop(fd),
                Err(e) => Events::Plain(e.into_parts().0 .0),
            }
        };
        Queue {
            events,
            read_epoch: Cell::new(0),
        }
    }

    pub fn inotify(&self) -> &Inotify {
        match &self.events {
            Events::Loop(fd) => &fd.get_ref().0,
            Events::Plain(i) => i,
        }
    }

    /// Hands every queued event to `apply`, batch by batch, unless the
    /// event loop's readiness may answer for input epoch `epoch` and says
    /// that nothing waits.
    pub fn drain(&self, epoch: u64, mut apply: impl FnMut(Vec<InotifyEvent>)) -> nix::Result<()> {
        let mut ready = None;
        // Asking tokio for readiness spends coop budget, and without budget
        // it answers Pending whatever the readiness: then read instead.
        if let (Events::Loop(fd), true) = (&self.events, tokio::task::coop::has_budget_remaining())
        {
            let reported = hayate_core::epoch::reported_since(self.read_epoch.get());
            let mut cx = Context::from_waker(Waker::noop());
            match fd.poll_read_ready(&mut cx) {
                Poll::Pending if reported => return Ok(()),
                Poll::Pending => {}
                Poll::Ready(Ok(guard)) => ready = Some(guard),
                Poll::Ready(Err(_)) => {}
            }
        }
        loop {
            match self.queued() {
                Ok(true) => {}
                Ok(false) => {
                    if let Some(mut guard) = ready {
                        guard.clear_ready();
                    }
                    self.read_epoch.set(epoch);
                    return Ok(());
                }
                Err(e) => {
                    self.read_epoch.set(epoch);
                    return Err(e);
                }
            }
            match self.inotify().read_events() {
                Ok(events) => apply(events),
                Err(nix::errno::Errno::EAGAIN) => {
                    if let Some(mut guard) = ready {
                        guard.clear_ready();
                    }
                    self.read_epoch.set(epoch);
                    return Ok(());
                }
                Err(e) => {
                    self.read_epoch.set(epoch);
                    return Err(e);
                }
            }
        }
    }

    /// Whether events are queued, asked with a read into one byte: inotify
    /// answers EAGAIN when none is, EINVAL when one is (it does not fit).
    /// nix's `read_events` zeroes a 4 KiB buffer for every read, found or
    /// not: about 520 instructions per pipelined request, which checks
    /// once per 16 (bench/instructions/run); this costs the same syscall.
    fn queued(&self) -> nix::Result<bool> {
        use std::os::fd::{AsFd, AsRawFd};
        let fd = self.inotify().as_fd().as_raw_fd();
        match nix::unistd::read(fd, &mut [0u8; 1]) {
            Err(nix::errno::Errno::EAGAIN) => Ok(false),
            Err(nix::errno::Errno::EINVAL) | Ok(_) => Ok(true),
            Err(e) => Err(e),
        }
    }

    /// Whether the descriptor is registered with an event loop.
    #[cfg(test)]
    pub fn in_event_loop(&self) -> bool {
        matches!(self.events, Events::Loop(_))
    }

    /// Waits until the event loop reports the descriptor readable (the
    /// readiness stays set).
    #[cfg(test)]
    pub async fn reported(&self) {
        if let Events::Loop(fd) = &self.events {
            drop(fd.readable().await.expect("inotify readiness"));
        }
    }
}
