//! Client socket operations shared by the connection loop (`conn.rs`) and
//! the request body it lends to handlers (`conn_body.rs`), so both read and
//! write the same way: one bounded read into the connection's read buffer,
//! which advances the input epoch and the connection's clock, and whole
//! writes bounded by the send timeout.

use std::future::Future;
use std::io;
use std::pin::pin;
use std::time::{Duration, Instant, SystemTime};

use bytes::BytesMut;
use hayate_core::transport::Transport;
use tokio::io::AsyncReadExt;
use tokio::time::timeout_at;

use crate::deadline::{Deadline, Expired};

/// A connection's idea of the time: when its last read returned, or when
/// it last caught up after a wait (the time of every request it carried;
/// two clock reads per socket read instead of per request).
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    /// Monotonic time, for deadlines.
    pub now: Instant,
    /// Wall time, for Date.
    pub wall: SystemTime,
}

impl Clock {
    /// The time now.
    pub fn current() -> Clock {
        Clock {
            now: Instant::now(),
            wall: SystemTime::now(),
        }
    }

    /// Reads both clocks again.
    pub fn refresh(&mut self) {
        *self = Clock::current();
    }
}

/// How a read makes room in the read buffer.
#[derive(Debug, Clone, Copy)]
pub struct Room {
    /// Capacity given to an empty (released) buffer.
    pub first: usize,
    /// Below this much free space, the buffer grows...
    pub min_spare: usize,
    /// ...by this much.
    pub grow: usize,
}

/// Reads once from the client into `rbuf`, waiting until `until` at most
/// (`idle`: a wait between requests, which shutdown may cut short). New
/// bytes advance the input epoch (reported when the read waited for the
/// event loop) and refresh `clock`. The count read is 0 at EOF.
pub async fn read(
    transport: &mut Transport,
    rbuf: &mut BytesMut,
    deadline: &Deadline,
    until: Instant,
    idle: bool,
    room: Room,
    clock: &mut Clock,
) -> Result<io::Result<usize>, Expired> {
    if rbuf.capacity() == 0 {
        rbuf.reserve(room.first);
    } else if rbuf.capacity() - rbuf.len() < room.min_spare {
        rbuf.reserve(room.grow);
    }
    // Whether the read waited for the event loop: it returned Pending with
    // coop budget left, so the socket's readiness was not set (or a read
    // had just found nothing and cleared it), and the bytes came after an
    // `epoll_wait` reported them (see hayate_core::epoch). A Pending for
    // want of budget does not count: the readiness it kept may be older
    // than the bytes.
    let mut reported = false;
    let mut read = pin!(transport.read_buf(rbuf));
    let noting = std::future::poll_fn(|cx| {
        let budget = tokio::task::coop::has_budget_remaining();
        let r = read.as_mut().poll(cx);
        reported |= r.is_pending() && budget;
        r
    });
    let n = deadline.run(until, idle, noting).await?;
    if let Ok(1..) = n {
        if reported {
            hayate_core::epoch::advance_reported();
        } else {
            hayate_core::epoch::advance();
        }
        clock.refresh();
    }
    Ok(n)
}

/// Writes all of `data` with non-blocking writes, waiting for the client to
/// take more at most `send` each time (the send timeout).
pub async fn write_all(transport: &mut Transport, data: &[u8], send: Duration) -> io::Result<()> {
    let mut done = 0;
    while done < data.len() {
        match transport.try_write(&data[done..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => writable(transport, send).await?,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Waits until the client can take more bytes, at most `send`.
pub async fn writable(transport: &Transport, send: Duration) -> io::Result<()> {
    let deadline = Instant::now() + send;
    match timeout_at(deadline.into(), transport.writable()).await {
        Ok(r) => r,
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "client did not read its response in time",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deadline::Deadlines;
    use hayate_core::epoch;
    use std::rc::Rc;
    use tokio::io::AsyncWriteExt;

    /// Whether [`read`] counted as reported by the event loop: after it,
    /// the input since the epoch before it is reported or not.
    async fn reads_reported(t: &mut Transport, rbuf: &mut BytesMut, room: Room) -> bool {
        let deadlines = Rc::new(Deadlines::default());
        let slot = deadlines.slot();
        let before = epoch::current();
        let until = Instant::now() + Duration::from_secs(10);
        let mut clock = Clock::current();
        let n = read(t, rbuf, &slot, until, false, room, &mut clock).await;
        assert!(matches!(n, Ok(Ok(1..))), "{n:?}");
        epoch::reported_since(before)
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_read_is_reported_only_when_it_waited_for_the_event_loop() {
        let (a, mut b) = tokio::net::UnixStream::pair().expect("pair");
        let mut t = Transport::Unix(a);
        let room = Room {
            first: 1024,
            min_spare: 1024,
            grow: 1024,
        };
        let mut rbuf = BytesMut::new();
        b.write_all(&[b'x'; 8192]).await.expect("write");
        // A new socket's readiness is unknown until epoll reports it.
        assert!(reads_reported(&mut t, &mut rbuf, room).await);
        assert_eq!(rbuf.len(), rbuf.capacity(), "the read filled the buffer");
        // A full read keeps the readiness: the next read goes straight to
        // the socket, and its bytes may be newer than the last epoll_wait.
        assert!(!reads_reported(&mut t, &mut rbuf, room).await);
        // Without coop budget the read is Pending first, then reads on the
        // readiness it kept: still not reported.
        assert_eq!(rbuf.len(), rbuf.capacity());
        while tokio::task::coop::has_budget_remaining() {
            tokio::task::coop::consume_budget().await;
        }
        assert!(!reads_reported(&mut t, &mut rbuf, room).await);
        // Drain what is left: a short read clears the readiness.
        let mut big = BytesMut::with_capacity(64 * 1024);
        while rbuf.len() + big.len() < 8192 {
            reads_reported(&mut t, &mut big, room).await;
        }
        // New bytes after a short read come through epoll.
        b.write_all(b"GET / HTTP/1.1\r\n\r\n").await.expect("write");
        assert!(reads_reported(&mut t, &mut rbuf, room).await);
    }
}
