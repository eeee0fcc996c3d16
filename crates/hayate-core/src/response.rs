//! The response a handler hands to the protocol writer: a status, header
//! [`Fields`] (those shared with other responses, built once per cached
//! file or stored response, then this response's own) and a body.
//! The writer adds the status line, `Date`, `Server`, the framing
//! (`Content-Length`) and `Connection`, so handlers never set those.

use std::fs::File;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite};

use bytes::Bytes;

use crate::{Fields, Status};

/// A response ready to be written.
#[derive(Debug)]
pub struct Response {
    /// The status.
    pub status: Status,
    /// Fields shared with other responses (a cached file's, a stored
    /// response's), sent before [`Response::fields`].
    pub shared: Option<Arc<Fields>>,
    /// The fields of this response only.
    pub fields: Fields,
    /// The body; for HEAD requests its length is announced but it is not sent.
    pub body: Body,
    /// Close the connection after this response.
    pub close: bool,
    /// What the response cache did (`HIT`, `MISS`, …), for the access log;
    /// `None` where no cache is configured. A thin pointer to the name: 8
    /// bytes where `Option<&str>` takes 16, and a response is moved whole
    /// from its handler to its writer (at 184 bytes those moves became
    /// memcpy calls, 87 instructions of a static request:
    /// bench/instructions/run).
    pub cache_status: Option<&'static &'static str>,
    /// The fields carry a Date: an origin's (kept as received, RFC 9110
    /// §6.6.1) or a stored response's. The writer then adds none of its own.
    pub has_date: bool,
    /// A HEAD answer whose GET framing is not known (a proxied upstream
    /// announced neither a length nor chunked): the writer announces none
    /// either, rather than a length of 0 or a chunked body the GET may not
    /// have (RFC 9110 §9.3.2 lets a HEAD answer omit them).
    pub unknown_framing: bool,
    /// The writer sends no `Server: hayate` (a header rule removed it or
    /// set its own).
    pub no_server: bool,
    /// hayate made this answer itself (an error of its own, not an
    /// upstream's or a file's): error pages replace its body.
    pub generated: bool,
    /// What rides along with some responses only, behind one thin
    /// pointer (8 bytes: every response pays that, only these an
    /// allocation): what must live until the response is sent (a
    /// conn_limit's slot) and how the upstream answered (for the access
    /// log). `None` for the rest.
    pub attached: Option<Attached>,
}

/// What a [`Response`] carries beside what it sends. Boxed: at 184 bytes
/// a response's moves from its handler to its writer became memcpy calls
/// (about 90 instructions a request, bench/instructions/run), so what only
/// some responses need lives here, not in the response.
#[derive(Default)]
pub struct Attached(Box<Attachments>);

#[derive(Default)]
struct Attachments {
    /// Kept alive until the response is sent, and no longer: the
    /// protocol's writer drops the response once its body is written, or
    /// when the client is gone.
    held: Option<Box<dyn std::any::Any + Send>>,
    /// How the upstream answered a proxied response, when something reads
    /// it (the access log, `slow_request`).
    upstream: Option<UpstreamTimes>,
}

impl Attached {
    /// How the upstream answered, if it was recorded.
    pub fn upstream_times(&self) -> Option<UpstreamTimes> {
        self.0.upstream
    }
}

impl std::fmt::Debug for Attached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Attached")
            .field("held", &self.0.held.is_some())
            .field("upstream", &self.0.upstream)
            .finish()
    }
}

/// The upstream exchange behind a proxied response: times from the start
/// of the attempt that answered (after any wait in the queue), as nginx's
/// `$upstream_connect_time` and `$upstream_header_time`, read from the
/// event loop's clock (`loop_time`: no clock read of their own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpstreamTimes {
    /// Until the connection was ready (0 for a pooled one).
    pub connect_us: u32,
    /// Until the response head was read.
    pub head_us: u32,
    /// The X-Request-Id hayate made for the request (64 bits, written as
    /// 16 hex digits); 0 when it passed on the client's own.
    pub made_request_id: u64,
    /// When the attempt that answered began (a trace's upstream events are
    /// placed from it).
    pub attempt_started: std::time::Instant,
    /// The member that answered: its index in its group (a trace names
    /// it).
    pub member: u16,
    /// How long the request waited in its group's queue (for a member under
    /// `max_conns`) before this attempt, from its first wait; 0 when it
    /// never waited.
    pub queued_us: u32,
}

/// A response body.
#[derive(Debug, Default)]
pub enum Body {
    /// No body (`Content-Length: 0`, or none for 1xx/204/304).
    #[default]
    Empty,
    /// Bytes in memory.
    Bytes(Bytes),
    /// A range of an open file, sent with zero-copy where the socket allows.
    File(FileRange),
    /// A sequence of parts (multipart/byteranges).
    Parts(Vec<Chunk>),
    /// Produced while it is written (a proxied response), with its length
    /// when known; otherwise sent chunked (or close-delimited to HTTP/1.0).
    Stream(StreamBody),
    /// After a `101 Switching Protocols` head, the connection becomes a
    /// two-way byte tunnel (WebSocket and other upgrades).
    Upgrade(Box<dyn Tunnel>),
}

/// Both directions of a byte stream.
pub trait Duplex: AsyncRead + AsyncWrite + Unpin {}

impl<T: AsyncRead + AsyncWrite + Unpin> Duplex for T {}

/// The far side of an upgraded connection.
pub trait Tunnel {
    /// Relays bytes both ways until either side closes. `early` holds bytes
    /// the client sent after its request head, already read.
    fn run<'a>(
        self: Box<Self>,
        client: &'a mut dyn Duplex,
        early: Bytes,
    ) -> Pin<Box<dyn Future<Output = io::Result<()>> + 'a>>;
}

impl std::fmt::Debug for dyn Tunnel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tunnel")
    }
}

/// A body produced while it is written.
pub struct StreamBody {
    /// The length, when the producer knows it.
    pub len: Option<u64>,
    /// The producer.
    pub source: Box<dyn BodySource>,
}

impl std::fmt::Debug for StreamBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamBody")
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

/// A producer of body chunks, polled by the connection writer (which
/// applies back-pressure by polling only when the client took the last
/// chunk).
pub trait BodySource {
    /// The next chunk; `None` at the end of the body.
    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Option<Bytes>>>;

    /// Trailer fields (`Name: value\r\n` lines) after the last chunk.
    fn trailers(&mut self) -> Option<Bytes> {
        None
    }
}

/// A range of an open file.
#[derive(Debug, Clone)]
pub struct FileRange {
    /// The open file, shared with the file cache.
    pub file: Arc<File>,
    /// First byte.
    pub offset: u64,
    /// Number of bytes.
    pub len: u64,
}

impl FileRange {
    /// The range read `size` bytes at a time, for writers that frame each
    /// piece (HTTP/2 and HTTP/3: no sendfile under their framing). A read
    /// that fails or finds the file shorter than the range ends it with an
    /// error.
    pub fn pieces(&self, size: usize) -> impl Iterator<Item = std::io::Result<Bytes>> + '_ {
        let end = self.offset + self.len;
        let mut offset = self.offset;
        std::iter::from_fn(move || {
            if offset >= end {
                return None;
            }
            let want = usize::try_from(end - offset)
                .unwrap_or(usize::MAX)
                .min(size);
            let mut buf = vec![0; want];
            let read = std::os::unix::fs::FileExt::read_at(&*self.file, &mut buf, offset);
            Some(match read {
                Ok(n) if n > 0 => {
                    buf.truncate(n);
                    offset += n as u64;
                    Ok(buf.into())
                }
                // The last piece: nothing after an error.
                Ok(_) => {
                    offset = end;
                    Err(std::io::ErrorKind::UnexpectedEof.into())
                }
                Err(e) => {
                    offset = end;
                    Err(e)
                }
            })
        })
    }
}

/// One part of a [`Body::Parts`] body.
#[derive(Debug)]
pub enum Chunk {
    /// Bytes in memory.
    Bytes(Bytes),
    /// A range of a file.
    File(FileRange),
}

impl Chunk {
    /// Length in bytes.
    pub fn len(&self) -> u64 {
        match self {
            Chunk::Bytes(b) => b.len() as u64,
            Chunk::File(f) => f.len,
        }
    }

    /// Whether the chunk is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Body {
    /// The body length, which becomes `Content-Length`; `None` for a
    /// stream of unknown length.
    pub fn known_len(&self) -> Option<u64> {
        match self {
            Body::Empty => Some(0),
            Body::Bytes(b) => Some(b.len() as u64),
            Body::File(f) => Some(f.len),
            Body::Parts(parts) => Some(parts.iter().map(Chunk::len).sum()),
            Body::Stream(s) => s.len,
            Body::Upgrade(_) => Some(0),
        }
    }

    /// The body length; 0 for a stream of unknown length.
    pub fn len(&self) -> u64 {
        self.known_len().unwrap_or(0)
    }

    /// Whether the body is known to be empty.
    pub fn is_empty(&self) -> bool {
        self.known_len() == Some(0)
    }
}

impl Response {
    /// A response with no headers and an empty body.
    pub fn new(status: Status) -> Response {
        Response {
            status,
            shared: None,
            fields: Fields::new(),
            body: Body::Empty,
            close: false,
            cache_status: None,
            has_date: false,
            unknown_framing: false,
            no_server: false,
            generated: false,
            attached: None,
        }
    }

    /// Keeps `what` alive until this response is sent (see
    /// [`Response::attached`]); a second thing held joins the first. In
    /// place: a response moved through a builder is a memcpy of its 176
    /// bytes.
    pub fn hold(&mut self, what: impl std::any::Any + Send) {
        let attached = &mut self.attached.get_or_insert_with(Attached::default).0;
        attached.held = Some(match attached.held.take() {
            None => Box::new(what),
            Some(first) => Box::new((first, what)),
        });
    }

    /// Records how the upstream answered, for the access log.
    pub fn set_upstream_times(&mut self, times: UpstreamTimes) {
        self.attached
            .get_or_insert_with(Attached::default)
            .0
            .upstream = Some(times);
    }

    /// How the upstream answered, if it was recorded.
    pub fn upstream_times(&self) -> Option<UpstreamTimes> {
        self.attached.as_ref().and_then(Attached::upstream_times)
    }

    /// A short plain-text error page, `404 Not Found\n`.
    pub fn error(status: Status) -> Response {
        let mut r = Response::new(status);
        r.generated = true;
        r.header("Content-Type", b"text/plain; charset=utf-8");
        r.body = Body::Bytes(Bytes::from(format!(
            "{} {}\n",
            status.code(),
            status.reason()
        )));
        r
    }

    /// Appends a field of this response. `value` must not contain CR or
    /// LF; callers pass values they built or validated (this is checked in
    /// debug builds).
    pub fn header(&mut self, name: &str, value: &[u8]) -> &mut Response {
        self.fields.push(name.as_bytes(), value);
        self
    }

    /// Every field, shared ones first.
    pub fn all_fields(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        let shared = self.shared.as_deref().into_iter().flat_map(Fields::iter);
        shared.chain(self.fields.iter())
    }

    /// The first value of field `name`, shared fields first.
    pub fn field(&self, name: &[u8]) -> Option<&[u8]> {
        self.all_fields()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }

    /// Removes every value of field `name` (shared ones too: the shared
    /// fields become this response's own, less those).
    pub fn remove_field(&mut self, name: &[u8]) {
        if let Some(shared) = self.shared.take_if(|s| s.contains(name)) {
            let mut own = Fields::clone(&shared);
            own.extend(&self.fields);
            self.fields = own;
        }
        self.fields.retain(|n, _| !n.eq_ignore_ascii_case(name));
    }

    /// Builder form of [`Response::header`].
    pub fn with_header(mut self, name: &str, value: &[u8]) -> Response {
        self.header(name, value);
        self
    }
}

#[cfg(test)]
mod holding_tests {
    use super::*;

    #[test]
    fn a_response_holds_what_it_is_given_until_dropped_and_stays_small() {
        let held = Arc::new(());
        let mut r = Response::new(Status::OK);
        r.hold(held.clone());
        r.hold(held.clone());
        assert_eq!(Arc::strong_count(&held), 3);
        drop(r);
        assert_eq!(Arc::strong_count(&held), 1);
        // One pointer's room for what only some responses carry, and a
        // response small enough that its moves stay inline.
        assert_eq!(std::mem::size_of::<Option<Attached>>(), 8);
        assert_eq!(std::mem::size_of::<Response>(), 176);
        let mut r = Response::new(Status::OK);
        let times = UpstreamTimes {
            connect_us: 0,
            head_us: 7,
            made_request_id: 1,
            attempt_started: std::time::Instant::now(),
            member: 0,
            queued_us: 0,
        };
        r.set_upstream_times(times);
        r.hold(held.clone());
        assert_eq!(r.upstream_times(), Some(times));
        assert_eq!(Arc::strong_count(&held), 2);
    }
}

#[cfg(test)]
mod file_range_tests {
    use super::*;

    #[test]
    fn a_range_comes_in_pieces_and_a_short_file_is_an_error() {
        let path = std::env::temp_dir().join(format!("hayate-pieces-{}", std::process::id()));
        std::fs::write(&path, b"0123456789").expect("write");
        let file = Arc::new(File::open(&path).expect("open"));
        let _ = std::fs::remove_file(&path);
        let range = FileRange {
            file: file.clone(),
            offset: 2,
            len: 7,
        };
        let pieces: Vec<Bytes> = range.pieces(3).map(|p| p.expect("read")).collect();
        assert_eq!(pieces, [&b"234"[..], b"567", b"8"]);
        // The file is shorter than the range says: the last piece fails.
        let past = FileRange {
            file,
            offset: 8,
            len: 4,
        };
        let pieces: Vec<_> = past.pieces(3).collect();
        assert_eq!(pieces[0].as_ref().expect("read")[..], b"89"[..]);
        assert!(pieces[1].is_err());
        assert_eq!(pieces.len(), 2);
    }
}
