//! The request body as handlers read it ([`ClientBody`]), decoded from the
//! connection's read buffer and socket.
//!
//! The decoding state ([`BodyState`]) lives with the connection across the
//! handler and the drain that follows the response; a [`ConnBody`] borrows
//! it together with the socket for as long as someone reads.

use std::io;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use hayate_core::client_body::{BodyLength, ClientBody};
use hayate_core::h1::body::{BodyDecoder, Decoded};

use crate::client_io::{self, Clock, Room};
use hayate_core::deadline::Deadline;
use hayate_core::h1::request::Framing;
use hayate_core::h1::response::{self, CONTINUE};
use hayate_core::transport::Transport;
use hayate_core::{Fields, Status};

/// Body reads make room for 16 KiB at a time.
const BODY_ROOM: Room = Room {
    first: 16 * 1024,
    min_spare: 4096,
    grow: 16 * 1024,
};

/// How far a request body has been read.
#[derive(Debug)]
pub struct BodyState {
    /// The HTTP/1 body decoder (it keeps a chunked body's trailers for the
    /// handler; the proxy passes them on).
    decoder: BodyDecoder,
    max: u64,
    timeout: Duration,
    /// `100 Continue` is owed before the first read.
    continue_pending: bool,
    /// Some bytes were consumed.
    pub touched: bool,
    /// The body was read whole.
    pub done: bool,
    /// Reading failed: the connection cannot be reused.
    pub failed: bool,
}

impl BodyState {
    /// The state of a new request's body.
    pub fn new(framing: Framing, expect_continue: bool, max: u64, timeout: Duration) -> BodyState {
        BodyState {
            decoder: BodyDecoder::new(framing),
            max,
            timeout,
            continue_pending: expect_continue && framing != Framing::Empty,
            touched: false,
            done: framing == Framing::Empty,
            failed: false,
        }
    }

    /// Whether the client still waits for `100 Continue` (nobody read).
    pub fn awaiting_continue(&self) -> bool {
        self.continue_pending
    }
}

/// A readable view of the body: the state plus the socket.
pub struct ConnBody<'c> {
    /// The decoding state.
    pub state: &'c mut BodyState,
    /// The client socket.
    pub transport: &'c mut Transport,
    /// The connection's read buffer (may hold body bytes already).
    pub rbuf: &'c mut BytesMut,
    /// The connection's write buffer: what the client is still owed of
    /// earlier pipelined responses, which anything sent now must follow.
    pub wbuf: &'c mut Vec<u8>,
    /// The connection's deadline slot.
    pub deadline: &'c Deadline,
    /// The connection's clock, refreshed by every read.
    pub clock: &'c mut Clock,
    /// How long a write may wait for the client (`100 Continue`).
    pub send_timeout: Duration,
    /// The client takes interim responses (HTTP/1.1, not 1.0).
    pub takes_interim: bool,
}

impl ConnBody<'_> {
    /// Reads more of the body into the read buffer, within the body
    /// timeout.
    async fn fill(&mut self) -> io::Result<()> {
        let until = Instant::now() + self.state.timeout;
        let read = client_io::read(
            self.transport,
            self.rbuf,
            self.deadline,
            until,
            false,
            BODY_ROOM,
            self.clock,
        );
        match read.await {
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "request body timed out",
            )),
            Ok(Ok(0)) => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "client closed mid-body",
            )),
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(e),
        }
    }

    /// Sends the `100 Continue` the client waits for, within the send
    /// timeout, after what the client is still owed of earlier responses.
    async fn send_continue(&mut self) -> io::Result<()> {
        self.wbuf.extend_from_slice(CONTINUE);
        let sent = client_io::write_all(self.transport, self.wbuf, self.send_timeout).await;
        self.wbuf.clear();
        sent
    }

    async fn next(&mut self) -> io::Result<Option<Bytes>> {
        if self.state.done {
            return Ok(None);
        }
        if self.state.continue_pending {
            self.state.continue_pending = false;
            self.send_continue().await?;
        }
        self.state.touched = true;
        loop {
            match self.state.decoder.decode(self.rbuf)? {
                Decoded::Data(data) => {
                    // A Content-Length over the limit was refused with the
                    // head; a chunked body is counted as it arrives.
                    if self.state.decoder.decoded() > self.state.max {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidInput,
                            "request body over max_body_size",
                        ));
                    }
                    self.state.done = self.state.decoder.is_done();
                    return Ok(Some(data));
                }
                Decoded::End => {
                    self.state.done = true;
                    return Ok(None);
                }
                Decoded::NeedMore => self.fill().await?,
            }
        }
    }
}

impl ClientBody for ConnBody<'_> {
    fn limit(&mut self, max: u64) {
        self.state.max = self.state.max.min(max);
    }

    fn pause_limit(&mut self, pause: Duration) {
        self.state.timeout = self.state.timeout.min(pause);
    }

    fn length(&self) -> BodyLength {
        match self.state.decoder.framing() {
            Framing::Empty => BodyLength::None,
            Framing::Length(n) => BodyLength::Known(n),
            // A request body is never close-delimited (RFC 9112 §6.3).
            Framing::Chunked | Framing::UntilClose => BodyLength::Chunked,
        }
    }

    async fn next_chunk(&mut self) -> io::Result<Option<Bytes>> {
        let r = self.next().await;
        if r.is_err() {
            self.state.failed = true;
        }
        r
    }

    /// On a plain socket with the body read whole: EOF or an error is a
    /// client that left (nginx reads it the same way); bytes that come are
    /// a pipelined request, kept in the read buffer for the connection
    /// loop, and the watch ends. Over TLS, or mid-body, never.
    async fn gone(&mut self) {
        if !self.state.done || matches!(self.transport, Transport::Tls(_)) {
            return std::future::pending().await;
        }
        loop {
            if self.transport.readable().await.is_err() {
                return;
            }
            self.rbuf.reserve(4096);
            match self.transport.try_read_buf(self.rbuf) {
                Ok(0) => return,
                Ok(_) => return std::future::pending().await,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => return,
            }
        }
    }

    /// Joins the write buffer, behind earlier pipelined responses (so it
    /// never overtakes one, nor splits one's framing: those are whole in
    /// the buffer before the next request is read), and goes out now as
    /// far as the client takes it without waiting; the rest leaves with
    /// the final response. A client that cannot take it (HTTP/1.0) gets
    /// none.
    fn interim(&mut self, status: Status, fields: &Fields) {
        if !self.takes_interim {
            return;
        }
        response::write_interim(self.wbuf, status, fields);
        if let Err(e) = client_io::write_now(self.transport, self.wbuf) {
            // The final response's write sees it too and ends the
            // connection.
            log::debug!("interim response not sent: {e}");
        }
    }

    fn trailers(&mut self) -> Option<Bytes> {
        if !self.state.done || self.state.decoder.framing() != Framing::Chunked {
            return None;
        }
        let raw = self.state.decoder.take_trailers();
        (!raw.is_empty()).then(|| Bytes::from(raw))
    }
}
