//! Client socket operations shared by the connection loop (`conn.rs`) and
//! the request body it lends to handlers (`conn_body.rs`), so both read and
//! write the same way: one bounded read into the connection's read buffer,
//! which advances the input epoch and the connection's clock, and whole
//! writes bounded by the send timeout.

use std::io;
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
/// bytes advance the input epoch and refresh `clock`. The count read is 0
/// at EOF.
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
    let n = deadline.run(until, idle, transport.read_buf(rbuf)).await?;
    if let Ok(1..) = n {
        hayate_core::epoch::advance();
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
