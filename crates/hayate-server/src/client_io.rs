//! Client socket operations shared by the connection loop (`conn.rs`) and
//! the request body it lends to handlers (`conn_body.rs`), so both read and
//! write the same way: one bounded read into the connection's read buffer,
//! which advances the input epoch and the connection's clock, and whole
//! writes bounded by the send timeout.

use std::future::Future;
use std::io;
use std::pin::pin;
use std::task::Poll;
use std::time::{Duration, Instant, SystemTime};

use bytes::BytesMut;
use hayate_core::transport::Transport;
use tokio::io::AsyncReadExt;
use tokio::time::timeout_at;

use crate::buffers::BufferPool;
use hayate_core::deadline::{Deadline, Expired};
use hayate_core::h1::request::Spare;

/// A connection's idea of the time: when its last read returned, or when
/// it last caught up after a wait (the time of every request it carried),
/// as of the wake-up of the worker's event loop that ran it
/// (`hayate_core::loop_time`: the clocks are read once per wake-up, not per
/// read or request).
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    /// Monotonic time, for deadlines.
    pub now: Instant,
    /// Wall time, for Date.
    pub wall: SystemTime,
}

impl Clock {
    /// The time now, as of the worker's event loop's last wake-up
    /// (`hayate_core::loop_time`).
    pub fn current() -> Clock {
        let (now, wall) = hayate_core::loop_time::now();
        Clock { now, wall }
    }

    /// Takes the time again.
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
pub fn read<'a>(
    transport: &'a mut Transport,
    rbuf: &'a mut BytesMut,
    deadline: &'a Deadline,
    until: Instant,
    idle: bool,
    room: Room,
    clock: &'a mut Clock,
) -> impl Future<Output = Result<io::Result<usize>, Expired>> + 'a {
    make_room(rbuf, room);
    let mut reported = false;
    let read = std::future::poll_fn(move |cx| {
        let budget = tokio::task::coop::has_budget_remaining();
        match pin!(transport.read_buf(&mut *rbuf)).poll(cx) {
            Poll::Ready(n) => Poll::Ready(after_read(n, reported, clock)),
            Poll::Pending => {
                reported |= budget;
                Poll::Pending
            }
        }
    });
    deadline.run(until, idle, read)
}

/// Like [`read`], for a connection with nothing buffered (between
/// requests): while the client sends nothing, its buffers are lent to the
/// worker's `pool`; once the socket is readable it takes a set and reads.
/// The syscalls are [`read`]'s: the readiness poll is the one `read_buf`
/// makes first, and the read is done only when it says ready. Both are
/// plain functions returning the deadline's future: it is part of every
/// idle connection's task, and an async fn would add a copy of its
/// arguments.
pub fn read_lending<'a>(
    transport: &'a mut Transport,
    bufs: (&'a mut BytesMut, &'a mut Vec<u8>, &'a mut Spare),
    pool: &'a BufferPool,
    deadline: &'a Deadline,
    until: Instant,
    room: Room,
    clock: &'a mut Clock,
) -> impl Future<Output = Result<io::Result<usize>, Expired>> + 'a {
    let (rbuf, wbuf, spare) = bufs;
    let mut reported = false;
    let read = std::future::poll_fn(move |cx| {
        let budget = tokio::task::coop::has_budget_remaining();
        match transport.poll_read_ready(cx) {
            Poll::Pending => {
                reported |= budget;
                pool.lend(rbuf, wbuf, spare);
                return Poll::Pending;
            }
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Ready(Ok(())) => {}
        }
        pool.take_into(rbuf, wbuf, spare);
        make_room(rbuf, room);
        match pin!(transport.read_buf(&mut *rbuf)).poll(cx) {
            Poll::Ready(n) => Poll::Ready(after_read(n, reported, clock)),
            // Readiness was stale (the last read filled the buffer): the
            // read found nothing, and the wait goes on without buffers.
            Poll::Pending => {
                reported |= budget;
                pool.lend(rbuf, wbuf, spare);
                Poll::Pending
            }
        }
    });
    deadline.run(until, true, read)
}

/// Gives `rbuf` room for a read. Space already consumed at its front is
/// taken back first (no allocation; a copy only of what is left unparsed,
/// when that is less than what was consumed), so a buffer used request
/// after request keeps its first size (2 KiB for heads) instead of growing
/// by `grow` the first time its front is used up.
fn make_room(rbuf: &mut BytesMut, room: Room) {
    if rbuf.capacity() - rbuf.len() >= room.min_spare || rbuf.try_reclaim(room.min_spare) {
        return;
    }
    if rbuf.capacity() == 0 {
        rbuf.reserve(room.first);
    } else {
        rbuf.reserve(room.grow);
    }
}

/// New bytes advance the input epoch and refresh the clock. `reported`:
/// the read waited for the event loop — it returned Pending with coop
/// budget left, so the socket's readiness was not set (or a read had just
/// found nothing and cleared it), and the bytes came after an `epoll_wait`
/// reported them (see hayate_core::epoch). A Pending for want of budget
/// does not count: the readiness it kept may be older than the bytes.
fn after_read(n: io::Result<usize>, reported: bool, clock: &mut Clock) -> io::Result<usize> {
    if let Ok(1..) = n {
        if reported {
            hayate_core::epoch::advance_reported();
        } else {
            hayate_core::epoch::advance();
        }
        clock.refresh();
    }
    n
}

/// Writes what the client takes of `out` without waiting, removing it
/// from `out`. True when all of it is written (TLS records included).
pub fn write_now(transport: &mut Transport, out: &mut Vec<u8>) -> io::Result<bool> {
    while !out.is_empty() {
        match transport.try_write(out) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) if n == out.len() => out.clear(),
            Ok(n) => drop(out.drain(..n)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) => return Err(e),
        }
    }
    // What the transport still holds (TLS records) is not sent yet.
    match transport.try_flush() {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
        Err(e) => Err(e),
    }
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
    loop {
        match transport.try_flush() {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => writable(transport, send).await?,
            done => return done,
        }
    }
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
    use hayate_core::deadline::Deadlines;
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

    const ROOM: Room = Room {
        first: 2048,
        min_spare: 512,
        grow: 8192,
    };

    #[test]
    fn room_is_taken_back_before_the_buffer_grows() {
        let mut rbuf = BytesMut::new();
        make_room(&mut rbuf, ROOM);
        let cap = rbuf.capacity();
        assert!(cap >= 2048);
        // Requests parsed one after another, up to near the end.
        rbuf.extend_from_slice(&vec![b'x'; cap - 100]);
        bytes::Buf::advance(&mut rbuf, cap - 100);
        assert!(rbuf.capacity() < ROOM.min_spare);
        make_room(&mut rbuf, ROOM);
        assert_eq!(rbuf.capacity(), cap, "reclaimed, not grown");
        // A partial head at the end moves to the front.
        rbuf.extend_from_slice(&vec![b'y'; cap - 50]);
        bytes::Buf::advance(&mut rbuf, cap - 100);
        make_room(&mut rbuf, ROOM);
        assert_eq!((rbuf.capacity(), &rbuf[..]), (cap, &[b'y'; 50][..]));
        // A buffer full of unparsed bytes grows.
        rbuf.extend_from_slice(&vec![b'z'; cap - 50]);
        make_room(&mut rbuf, ROOM);
        assert!(rbuf.capacity() >= cap + ROOM.grow);
    }
}
