//! An HTTP/2 connection whose writes make no progress.
//!
//! Closed after the send timeout, as an HTTP/1 connection is
//! (`conn/send.rs`), whatever the blocked bytes are: DATA of a download the
//! client stopped reading, or the ACKs of its PINGs and SETTINGS. And
//! closed at once when, while its writes are stalled, the client kept
//! sending frames that must be answered (PING, SETTINGS): h2 itself only
//! slows such a flood (it stops reading once it cannot write), which leaves
//! the connection held until the send timeout (CVE-2019-9512, -9515; nginx
//! closes after 10,000 queued frames, Go's server after 10,000 queued
//! control frames).
//!
//! The stall is seen where bytes leave (`held_writes`: a write the
//! transport did not take) and judged by the serving loop each time the
//! connection is about to wait, on the worker's deadline slots
//! (`hayate_core::deadline`): no timer is armed per frame or per stall,
//! and a connection whose writes flow pays a compare per wait.

use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use hayate_core::deadline::Deadline;

/// PING and SETTINGS frames a client may send while hayate's writes to it
/// are stalled. Once they are, h2 reads on only until its write buffer and
/// the held writes (16 KiB each) are full: about 1,900 PING ACKs (17 bytes)
/// or 3,600 SETTINGS ACKs (9 bytes), all read in the pass that found the
/// transport full. A client that reads what it asks for never comes near
/// it: it sends a few such frames per round trip.
pub(super) const MAX_CONTROL_FRAMES_WHILE_STALLED: u64 = 1000;

/// Why a stalled connection is closed.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Stalled {
    /// No write made progress for the send timeout.
    SendTimeout,
    /// The client kept asking for answers it does not read.
    Flood,
}

/// A connection's write stall: when it began, and the client's count of
/// frames to answer when the connection last waited with its writes
/// flowing. Owned by the held writes (`Held`), which see every write.
#[derive(Debug)]
pub(super) struct Stall {
    /// When a write last could not proceed; `None` once one has.
    since: Option<Instant>,
    /// h2's count of received PING and SETTINGS frames when the connection
    /// last waited with nothing stalled.
    frames_at: u64,
    /// The connection's slot in the worker's deadlines, armed while
    /// stalled.
    deadline: Deadline,
}

impl Stall {
    pub(super) fn new(deadline: Deadline) -> Stall {
        Stall {
            since: None,
            frames_at: 0,
            deadline,
        }
    }

    /// A write found the transport full.
    pub(super) fn blocked(&mut self) {
        if self.since.is_none() {
            self.since = Some(hayate_core::loop_time::instant());
        }
    }

    /// A write went through.
    pub(super) fn progressed(&mut self) {
        self.since = None;
    }

    /// Judges the connection as it is about to wait; `frames_received` is
    /// h2's count so far. `Err` says why it is to be closed; while stalled
    /// within its time, the task is woken when the send timeout passes.
    pub(super) fn judge(
        &mut self,
        frames_received: u64,
        send_timeout: Duration,
        cx: &mut Context<'_>,
    ) -> Result<(), Stalled> {
        let Some(since) = self.since else {
            self.frames_at = frames_received;
            self.deadline.disarm();
            return Ok(());
        };
        if frames_received - self.frames_at > MAX_CONTROL_FRAMES_WHILE_STALLED {
            return Err(Stalled::Flood);
        }
        match self.deadline.poll_at(since + send_timeout, cx) {
            Poll::Ready(()) => Err(Stalled::SendTimeout),
            Poll::Pending => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hayate_core::deadline::Deadlines;
    use std::rc::Rc;
    use std::task::Waker;

    fn judged(stall: &mut Stall, frames: u64) -> Result<(), Stalled> {
        stall.judge(
            frames,
            Duration::from_secs(5),
            &mut Context::from_waker(Waker::noop()),
        )
    }

    #[test]
    fn flowing_writes_are_never_judged_stalled_however_many_frames() {
        let reg = Rc::new(Deadlines::default());
        let mut stall = Stall::new(reg.slot());
        assert_eq!(judged(&mut stall, 1_000_000), Ok(()));
        stall.blocked();
        stall.progressed();
        assert_eq!(judged(&mut stall, 5_000_000), Ok(()));
        reg.sweep(Instant::now() + Duration::from_secs(3600));
        assert_eq!(judged(&mut stall, 5_000_000), Ok(()));
    }

    #[test]
    fn a_stall_ends_at_the_send_timeout_or_at_a_flood() {
        let reg = Rc::new(Deadlines::default());
        let mut stall = Stall::new(reg.slot());
        assert_eq!(judged(&mut stall, 10), Ok(()));
        stall.blocked();
        // Counted from the last wait with writes flowing (10 frames then).
        let limit = 10 + MAX_CONTROL_FRAMES_WHILE_STALLED;
        assert_eq!(judged(&mut stall, limit), Ok(()));
        assert_eq!(judged(&mut stall, limit + 1), Err(Stalled::Flood));
        // The send timeout, from when the stall began; a sweep ends it.
        let mut stall = Stall::new(reg.slot());
        let began = hayate_core::loop_time::instant();
        stall.blocked();
        assert_eq!(judged(&mut stall, 0), Ok(()));
        reg.sweep(began + Duration::from_secs(4));
        assert_eq!(judged(&mut stall, 0), Ok(()));
        reg.sweep(Instant::now() + Duration::from_secs(5));
        assert_eq!(judged(&mut stall, 0), Err(Stalled::SendTimeout));
    }
}
