//! The request body as a handler reads it. The connection implements it
//! (decoding Content-Length or chunked framing, sending `100 Continue` on
//! the first read, enforcing the body size limit and timeout); handlers such
//! as the proxy consume it without knowing the connection. It is also the
//! handler's way back to the client before the response: whether the
//! client left, and interim (1xx) responses passed on.

use std::io;

use bytes::Bytes;

use crate::response::BodySource;
use crate::{Fields, Status};

/// How the client delimited its body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyLength {
    /// No body.
    None,
    /// Exactly this many bytes.
    Known(u64),
    /// Chunked: unknown until the last chunk.
    Chunked,
}

/// A request body read chunk by chunk.
#[allow(async_fn_in_trait)] // implemented and used on one worker thread; no Send bound needed
pub trait ClientBody {
    /// How the body is delimited.
    fn length(&self) -> BodyLength;

    /// The next piece of the body; `None` once it has been read whole.
    /// Errors: the client went away, sent bad framing (InvalidData), exceeded
    /// the size limit (InvalidInput) or the body timeout (TimedOut).
    async fn next_chunk(&mut self) -> io::Result<Option<Bytes>>;

    /// The trailer section of a chunked body, as the client sent it
    /// (`Name: value\r\n` lines, unfiltered: a proxy passes them through
    /// [`passable_trailers`](crate::h1::chunked::passable_trailers)). Meaningful
    /// once [`next_chunk`](ClientBody::next_chunk) returned `None`; taken by
    /// the first call. `None` when there were none.
    fn trailers(&mut self) -> Option<Bytes> {
        None
    }

    /// Resolves when the client is seen to have left (its connection
    /// closed) while its request waits for an answer; never where that
    /// cannot be seen. For a handler that waits long after the body was
    /// read (a FastCGI script), so the work of a client that left stops.
    async fn gone(&mut self) {
        std::future::pending::<()>().await
    }

    /// An interim response (1xx, never 100 or 101) that the upstream sent
    /// ahead of its final one, such as 103 Early Hints, for the client to
    /// see now. The connection sends it after whatever it already owes the
    /// client (earlier pipelined responses), or drops it when the client
    /// cannot take one (HTTP/1.0, RFC 9110 §15.2) or the request has no
    /// client to send it to (a background refresh). Never stored.
    fn interim(&mut self, _status: Status, _fields: &Fields) {}

    /// The rest of the body as a source that outlives this borrow, for a
    /// handler that must keep reading it after it has answered: an HTTP/2
    /// upstream's stream, whose response may begin while the client is
    /// still sending (gRPC's bidirectional streams send a message only once
    /// the answer to the previous one came). `None` where the body cannot
    /// leave the connection (HTTP/1, whose next request follows it on the
    /// same bytes); the handler then reads it with
    /// [`next_chunk`](ClientBody::next_chunk). The source keeps the size
    /// limit, and yields the trailers at the end.
    fn detach(&mut self) -> Option<Box<dyn BodySource>> {
        None
    }

    /// Lowers the size limit to `max` bytes (a route's `max_body_size`,
    /// below the connection's): past it, reading fails as over the limit.
    fn limit(&mut self, _max: u64) {}

    /// Lowers the longest pause between two reads to `pause` (a route's
    /// `body_timeout`, below the connection's): past it, reading fails as
    /// timed out.
    fn pause_limit(&mut self, _pause: std::time::Duration) {}
}

/// A body that is empty (tests, internal requests).
#[derive(Debug, Default)]
pub struct NoBody;

impl ClientBody for NoBody {
    fn length(&self) -> BodyLength {
        BodyLength::None
    }

    async fn next_chunk(&mut self) -> io::Result<Option<Bytes>> {
        Ok(None)
    }
}
