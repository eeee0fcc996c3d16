//! HTTP/1.1, client role: a request written on an upstream [`Transport`]
//! (its head, then its body buffered or streamed, sized or chunked, with
//! trailers), the response head read and checked (framing, Keep-Alive,
//! hop-by-hop fields dropped), and the response body streamed back through
//! [`UpstreamBody`], which returns the connection to its member's pool once
//! the body was read whole.

use std::io::{self, IoSlice};
use std::mem::MaybeUninit;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use hayate_core::client_body::{BodyLength, ClientBody};
use hayate_core::deadline::within;
use hayate_core::error::Error;
use hayate_core::field::{name_is, parse_length, split_list, trim_ows as trim};
use hayate_core::h1::body::{BodyDecoder, Decoded, Framing};
use hayate_core::h1::chunked::{chunk_size_line, passable_trailers};
use hayate_core::h1::response;
use hayate_core::transport::Transport;
use hayate_core::{Body, BodySource, Fields, Response, Status, StreamBody};
use tokio::io::AsyncReadExt;

use crate::group::{Outstanding, ProxySettings};
use crate::hop_by_hop::{connection_listed, is_hop_by_hop, requested_upgrade};
use crate::protocol::{Outgoing, UpstreamProtocol};
use crate::request_head::RequestHead;
use crate::retry::Failure;
use crate::tunnel::UpstreamTunnel;
use crate::upstream_io::{read_buffer, recycle, Sending, StallRead};
use crate::{ProxyRequest, UpstreamAddr};
use smallvec::SmallVec;

/// Most response header fields accepted from an upstream.
const MAX_RESPONSE_HEADERS: usize = 128;
/// Largest response head accepted from an upstream.
const MAX_RESPONSE_HEAD: usize = 64 * 1024;

/// A request prepared for an HTTP/1.1 upstream: its head, built once.
pub(crate) struct Http1 {
    head: RequestHead,
    upgrade: bool,
}

/// A response head as [`parse_response`] read it: an interim response to
/// pass on or drop, or the final one.
enum Parsed {
    /// A 1xx other than 101: its status and end-to-end fields.
    Interim(Status, Fields),
    /// The final response (or a 101).
    Final(Head),
}

/// What an exchange read: the response head, the connection it came on,
/// and the bytes read past the head.
pub(crate) struct Answer {
    conn: Transport,
    head: Head,
    rest: BytesMut,
}

/// A response head as read from the upstream: its end-to-end fields, and
/// what the connection does next.
pub(crate) struct Head {
    status: Status,
    fields: Fields,
    /// `fields` hold the upstream's Date.
    has_date: bool,
    framing: Framing,
    /// A 101: the connection becomes a tunnel.
    tunnel: bool,
    /// How long the connection may idle in the pool; `None`: do not reuse.
    keep: Option<Duration>,
    /// The request was HEAD.
    is_head: bool,
    /// Content-Length announced on a HEAD response.
    head_len: Option<u64>,
    /// A HEAD response announced chunked.
    head_chunked: bool,
}

impl UpstreamProtocol for Http1 {
    type Answer = Answer;

    fn prepare(
        req: &ProxyRequest<'_>,
        length: BodyLength,
        _buffered: Option<&Bytes>,
        settings: &ProxySettings,
    ) -> Result<Http1, Error> {
        let listed = connection_listed(req.headers.iter().copied());
        let upgrade_to = requested_upgrade(&req.headers, &listed);
        Ok(Http1 {
            head: RequestHead::new(req, length, settings, &listed, upgrade_to),
            upgrade: upgrade_to.is_some(),
        })
    }

    fn for_member(&mut self, settings: &ProxySettings, member: &UpstreamAddr) {
        self.head.for_member(settings, member);
    }

    fn head(&self) -> &[u8] {
        self.head.bytes()
    }

    fn upgrade(&self) -> bool {
        self.upgrade
    }

    fn made_request_id(&self) -> u64 {
        self.head.made_request_id()
    }

    async fn exchange<B: ClientBody>(
        &self,
        mut conn: Transport,
        out: &Outgoing<'_>,
        body: &mut B,
        settings: &ProxySettings,
    ) -> Result<Answer, Failure> {
        let Outgoing {
            head,
            buffered,
            prefix,
            trailers,
            length,
            is_head,
            upgrade,
            started,
        } = *out;
        let mut sending = Sending::new(&mut conn, settings.io_timeout);
        match buffered {
            Some(b) if length == BodyLength::Chunked => {
                // A buffered chunked body with trailers: one chunk, then the
                // last chunk and the trailer section.
                // An empty body has no data chunk (empty slices are skipped).
                let trailers = trailers.map_or(&b""[..], |t| &t[..]);
                let mut line = [0u8; 18];
                let (line, end): (&[u8], &[u8]) = if b.is_empty() {
                    (b"", b"")
                } else {
                    (chunk_size_line(b.len(), &mut line), b"\r\n")
                };
                sending
                    .send(&mut [
                        IoSlice::new(head),
                        IoSlice::new(line),
                        IoSlice::new(b),
                        IoSlice::new(end),
                        IoSlice::new(b"0\r\n"),
                        IoSlice::new(trailers),
                        IoSlice::new(b"\r\n"),
                    ])
                    .await?;
            }
            Some(b) => {
                sending
                    .send(&mut [IoSlice::new(head), IoSlice::new(b)])
                    .await?
            }
            None => {
                // The body's chunks come as the client sends them.
                sending.waited = true;
                sending.send(&mut [IoSlice::new(head)]).await?;
                let chunked = length == BodyLength::Chunked;
                let mut first = (!prefix.is_empty()).then(|| prefix.clone());
                loop {
                    let chunk = match first.take() {
                        Some(p) => Some(p),
                        None => body.next_chunk().await.map_err(Failure::Client)?,
                    };
                    let Some(chunk) = chunk else { break };
                    if chunked {
                        // One write per chunk: size line, data, CRLF.
                        let mut line = [0u8; 18];
                        let line = chunk_size_line(chunk.len(), &mut line);
                        sending
                            .send(&mut [
                                IoSlice::new(line),
                                IoSlice::new(&chunk),
                                IoSlice::new(b"\r\n"),
                            ])
                            .await?;
                    } else {
                        sending.send(&mut [IoSlice::new(&chunk)]).await?;
                    }
                }
                if chunked {
                    // The last chunk and the client's trailers, filtered. (A
                    // body streamed with a Content-Length had one from the
                    // client too, hence no trailers to lose.)
                    let mut last = b"0\r\n".to_vec();
                    if let Some(t) = body.trailers().and_then(|t| passable_trailers(&t)) {
                        last.extend_from_slice(&t);
                    }
                    last.extend_from_slice(b"\r\n");
                    sending.send(&mut [IoSlice::new(&last)]).await?;
                }
            }
        }
        // The response head, within `header_timeout` of the request's end:
        // the attempt's start when sending did not wait (one clock read
        // less per proxied request, bench/instructions/run).
        let sent = if sending.waited {
            Instant::now()
        } else {
            started
        };
        let deadline = sent + settings.header_timeout;
        // The buffer is allocated once the answer starts to arrive: a request
        // waiting on a slow app holds no read buffer (thousands of them cost
        // their sockets and little else). Readiness comes from epoll, no
        // syscall.
        // A client that leaves meanwhile cancels the request: the upstream
        // connection closes (it is not pooled mid-request), so the app sees
        // it and stops working for nobody, as nginx does (499). The client
        // is watched only once the answer is late: watching its socket at
        // once cost 410 instructions per proxied request (2.2 %, the
        // readiness future's setup and drop; bench/instructions/run), and
        // nearly every answer comes sooner.
        let unwatched = deadline.min(sent + CLIENT_WATCH_AFTER);
        let answered = match within(unwatched, conn.readable()).await {
            Err(_) if unwatched < deadline => tokio::select! {
                biased;
                ready = within(deadline, conn.readable()) => ready,
                () = body.gone() => return Err(Failure::Client(client_left())),
            },
            answered => answered,
        };
        match answered {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(Failure::NoAnswer(e)),
            Err(_) => return Err(Failure::Upstream(header_timed_out())),
        }
        let mut buf = read_buffer();
        let mut interim = 0;
        loop {
            // What `readable` reported is read without a timer (the head
            // usually comes whole); only a read that finds nothing waits
            // under the deadline. Saves building a timeout per proxied
            // request: 129 of 21,850 instructions (bench/instructions/run).
            let read = match conn.try_read_buf(&mut buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    within(deadline, conn.read_buf(&mut buf)).await
                }
                now => Ok(now),
            };
            let n = match read {
                Ok(Ok(n)) => n,
                Ok(Err(e)) if buf.is_empty() => return Err(Failure::NoAnswer(e)),
                Ok(Err(e)) => return Err(Failure::Upstream(e)),
                Err(_) => return Err(Failure::Upstream(header_timed_out())),
            };
            if n == 0 {
                let e = io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "upstream closed the connection",
                );
                return Err(if buf.is_empty() {
                    Failure::NoAnswer(e)
                } else {
                    Failure::Upstream(e)
                });
            }
            while let Some((head, len)) =
                parse_response(&buf, is_head, upgrade, settings).map_err(Failure::Upstream)?
            {
                buf.advance(len);
                match head {
                    // The client's 100 Continue is the connection's to
                    // send (it answered the client's Expect itself).
                    Parsed::Interim(Status::CONTINUE, _) => {}
                    Parsed::Interim(status, fields) => {
                        // More are dropped (`ProxySettings::max_interim`).
                        if interim < settings.max_interim {
                            interim += 1;
                            body.interim(status, &fields);
                        }
                    }
                    Parsed::Final(head) => {
                        return Ok(Answer {
                            conn,
                            head,
                            rest: buf,
                        })
                    }
                }
            }
            if buf.len() > MAX_RESPONSE_HEAD {
                return Err(Failure::Upstream(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "response head too large",
                )));
            }
        }
    }

    fn response(&self, answer: Answer, guard: Outstanding, settings: &ProxySettings) -> Response {
        let Answer { conn, head, rest } = answer;
        let mut r = Response::new(head.status);
        r.fields = head.fields;
        r.has_date = head.has_date;
        if head.tunnel {
            r.body = Body::Upgrade(Box::new(UpstreamTunnel {
                conn,
                rest: rest.freeze(),
                write_limit: settings.io_timeout,
                idle_limit: settings.tunnel_idle_timeout,
                _guard: guard,
            }));
            return r;
        }
        let source = UpstreamBody {
            conn: Some(conn),
            buf: rest,
            decoder: BodyDecoder::new(head.framing),
            keep: head.keep,
            max_idle: settings.max_idle,
            stall: StallRead::new(settings.io_timeout),
            guard: Some(guard),
        };
        r.body = match head.framing {
            Framing::Empty => {
                let mut source = source;
                source.finish();
                if head.is_head {
                    // A HEAD response announces the GET body's framing as
                    // the upstream did: its length, chunked, or neither.
                    r.unknown_framing = head.head_len.is_none() && !head.head_chunked;
                    Body::Stream(StreamBody {
                        len: head.head_len,
                        source: Box::new(source),
                    })
                } else {
                    Body::Empty
                }
            }
            Framing::Length(n) => Body::Stream(StreamBody {
                len: Some(n),
                source: Box::new(source),
            }),
            Framing::Chunked | Framing::UntilClose => Body::Stream(StreamBody {
                len: None,
                source: Box::new(source),
            }),
        };
        r
    }
}

/// How long a request waits for its upstream's answer before the client's
/// connection is watched for its leaving (see `exchange`).
const CLIENT_WATCH_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// The failure of a request whose client closed its connection while it
/// waited for the upstream's answer.
fn client_left() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionAborted,
        "the client left before the upstream answered",
    )
}

fn header_timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "no response head in time")
}

/// Parses one response head from `buf` (the codec checks its framing),
/// then applies the proxy's rules: a 101 only to a request that asked to
/// switch, the pool time from the upstream's Keep-Alive hint, end-to-end
/// fields only, Via. `Ok(None)` when incomplete; the head and its length
/// in `buf` otherwise.
fn parse_response(
    buf: &[u8],
    is_head: bool,
    upgrade: bool,
    settings: &ProxySettings,
) -> io::Result<Option<(Parsed, usize)>> {
    // Uninitialized: 128 initialized slots were 4 KiB written per response
    // head, 349 of a proxied request's 22,226 instructions
    // (bench/instructions/run).
    let mut slots = [const { MaybeUninit::uninit() }; MAX_RESPONSE_HEADERS];
    let Some(parsed) = response::parse_head(buf, &mut slots, is_head)
        .map_err(|e| io::Error::new(e.kind(), format!("upstream: {e}")))?
    else {
        return Ok(None);
    };
    let (status, len) = (parsed.status, parsed.len);
    if status.code() == 101 {
        if !upgrade {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "bad response from upstream: 101 to a request that asked for no upgrade",
            ));
        }
        let protocol = parsed
            .fields
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case("upgrade"))
            .map(|h| h.value);
        let mut fields = Fields::new();
        fields.push(b"Connection", b"upgrade");
        fields.push(b"Upgrade", protocol.unwrap_or(b"websocket"));
        let has_date = copy_end_to_end(&mut fields, parsed.fields).has_date;
        let head = Head {
            status,
            fields,
            has_date,
            framing: Framing::Empty,
            tunnel: true,
            keep: None,
            is_head: false,
            head_len: None,
            head_chunked: false,
        };
        return Ok(Some((Parsed::Final(head), len)));
    }
    if status.code() < 200 {
        let mut fields = Fields::new();
        copy_end_to_end(&mut fields, parsed.fields);
        return Ok(Some((Parsed::Interim(status, fields), len)));
    }
    let mut fields = Fields::with_capacity(len);
    let EndToEnd {
        has_date,
        keep_alive,
    } = copy_end_to_end(&mut fields, parsed.fields);
    let mut keep = settings.idle_timeout;
    if let Some(t) = keep_alive.and_then(keep_alive_timeout) {
        // Leave well before the upstream closes its end.
        keep = keep.min(t.saturating_sub(Duration::from_secs(1)).max(t / 2));
    }
    if settings.via {
        fields.push(b"Via", b"1.1 hayate");
    }
    Ok(Some((
        Parsed::Final(Head {
            status,
            fields,
            has_date,
            framing: parsed.framing,
            tunnel: false,
            keep: (!parsed.close).then_some(keep),
            is_head,
            head_len: if is_head { parsed.content_length } else { None },
            head_chunked: is_head && parsed.chunked,
        }),
        len,
    )))
}

/// Copies the end-to-end fields of an upstream response head onto `out`:
/// neither hop-by-hop nor named by its Connection fields, and not Server
/// (hayate sets its own). The upstream's first Date is kept when it is a
/// valid HTTP-date (RFC 9110 §6.6.1: a recipient adds Date only when none
/// was received; the cache's age calculation needs the origin's); an
/// invalid one is replaced by hayate's (which §6.6.1 allows). Returns
/// whether a Date was kept, and the Keep-Alive hint seen on the way (one
/// pass over the fields, not two).
pub(crate) fn copy_end_to_end<'a>(
    out: &mut Fields,
    fields: &[httparse::Header<'a>],
) -> EndToEnd<'a> {
    // One pass. Connection fields are hop-by-hop themselves: the names
    // they list are gathered on the way and their fields dropped after,
    // which is rare (they hold `keep-alive` or `close`, skipped anyway). A
    // pass to gather them first, then a pass to copy, cost 283 of a
    // proxied request's 21,807 instructions (bench/instructions/run).
    let mut listed: SmallVec<[&[u8]; 4]> = SmallVec::new();
    let mut has_date = false;
    let mut keep_alive = None;
    for h in fields {
        let name = h.name.as_bytes();
        if is_hop_by_hop(name) {
            if name_is(name, b"keep-alive") {
                keep_alive.get_or_insert(h.value);
            } else if name_is(name, b"connection") {
                // `keep-alive` or `close` alone lists no other field.
                let plain = |t: &[u8]| is_hop_by_hop(t) || name_is(t, b"close");
                if !plain(trim(h.value)) {
                    listed.extend(split_list(h.value).filter(|t| !plain(t)));
                }
            }
            continue;
        }
        if name_is(name, b"server") {
            continue;
        }
        if name_is(name, b"date") {
            if has_date || hayate_core::date::parse(h.value).is_none() {
                continue;
            }
            has_date = true;
        }
        out.push(name, h.value);
    }
    if !listed.is_empty() {
        let named = |name: &[u8]| listed.iter().any(|l| l.eq_ignore_ascii_case(name));
        out.retain(|name, _| !named(name));
        has_date &= !named(b"date");
    }
    EndToEnd {
        has_date,
        keep_alive,
    }
}

/// What [`copy_end_to_end`] saw on the way.
pub(crate) struct EndToEnd<'a> {
    /// A valid Date was copied.
    pub has_date: bool,
    /// The first Keep-Alive field's value (hop-by-hop: not copied).
    pub keep_alive: Option<&'a [u8]>,
}

/// `timeout=N` from a Keep-Alive field.
fn keep_alive_timeout(v: &[u8]) -> Option<Duration> {
    split_list(v).find_map(|p| {
        let rest = p.strip_prefix(b"timeout=")?;
        parse_length(trim(rest)).map(Duration::from_secs)
    })
}

/// The upstream's response body, streamed to the client; the connection
/// returns to the pool once the body has been read whole.
struct UpstreamBody {
    conn: Option<Transport>,
    buf: BytesMut,
    decoder: BodyDecoder,
    keep: Option<Duration>,
    max_idle: usize,
    stall: StallRead,
    guard: Option<Outstanding>,
}

impl UpstreamBody {
    /// The body is complete: pool the connection if it may be reused.
    fn finish(&mut self) {
        if let (Some(conn), Some(keep), Some(guard)) =
            (self.conn.take(), self.keep, self.guard.as_ref())
        {
            if self.buf.is_empty() {
                guard
                    .member()
                    .checkin(conn, keep, self.max_idle, guard.instance_id());
            }
        }
        self.guard = None;
    }
}

impl Drop for UpstreamBody {
    fn drop(&mut self) {
        recycle(std::mem::take(&mut self.buf));
    }
}

impl BodySource for UpstreamBody {
    fn trailers(&mut self) -> Option<Bytes> {
        passable_trailers(&self.decoder.take_trailers())
    }

    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Option<Bytes>>> {
        let r = self.poll_body(cx);
        r.map_err(|e| match &self.guard {
            // Name the upstream: the connection writer logs this error.
            Some(g) => io::Error::new(e.kind(), format!("upstream {}: {e}", g.member().label)),
            None => e,
        })
    }
}

impl UpstreamBody {
    fn poll_body(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Option<Bytes>>> {
        loop {
            match self.decoder.decode(&mut self.buf)? {
                Decoded::Data(data) => return Poll::Ready(Ok(Some(data))),
                Decoded::End => {
                    self.finish();
                    return Poll::Ready(Ok(None));
                }
                Decoded::NeedMore => {}
            }
            let filled = match self.conn.as_mut() {
                Some(conn) => self.stall.poll_read(conn, &mut self.buf, cx),
                None => Poll::Ready(Ok(0)),
            };
            match filled {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(0)) => {
                    self.conn = None;
                    let closed = self.decoder.closed().map_err(|_| {
                        io::Error::new(io::ErrorKind::UnexpectedEof, "upstream closed mid-body")
                    });
                    return Poll::Ready(closed.map(|()| None));
                }
                Poll::Ready(Ok(_)) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keep_alive_timeouts() {
        assert_eq!(
            keep_alive_timeout(b"max=100, timeout=5"),
            Some(Duration::from_secs(5))
        );
        assert_eq!(
            keep_alive_timeout(b" timeout=7 ,"),
            Some(Duration::from_secs(7))
        );
        assert_eq!(keep_alive_timeout(b"timeout=+5"), None);
        assert_eq!(keep_alive_timeout(b"max=5"), None);
    }

    #[test]
    fn response_heads() {
        let s = ProxySettings::default();
        let parse = |raw: &str, head: bool| parse_response(raw.as_bytes(), head, false, &s);
        let Ok(Some((Parsed::Final(h), _))) = parse(
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: X-Hop\r\nX-Hop: 1\r\nKeep-Alive: timeout=5\r\nDate: x\r\nServer: node\r\nX-App: y\r\n\r\n",
            false,
        ) else {
            panic!("parse")
        };
        assert_eq!(h.framing, Framing::Length(5));
        assert_eq!(h.keep, Some(Duration::from_secs(4)));
        // An invalid Date is dropped (hayate's replaces it).
        assert_eq!(h.fields.wire(), b"X-App: y\r\n");
        assert!(!h.has_date);
        // A valid one is the origin's and stays (the first of two).
        let Ok(Some((Parsed::Final(h), _))) = parse(
            "HTTP/1.1 200 OK\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\nContent-Length: 0\r\n\
             Date: Mon, 07 Nov 1994 08:49:37 GMT\r\nServer: node\r\n\r\n",
            false,
        ) else {
            panic!("parse")
        };
        assert_eq!(h.fields.wire(), b"Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n");
        assert!(h.has_date);
        // What Connection names goes, before or after it, Date too (then
        // hayate's is sent); its own tokens and other fields stay.
        let Ok(Some((Parsed::Final(h), _))) = parse(
            "HTTP/1.1 200 OK\r\nX-Hop: 1\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\n\
             X-App: y\r\nConnection: close, x-hop\r\nConnection: Date, keep-alive\r\n\
             X-HOP: 2\r\nContent-Length: 0\r\n\r\n",
            false,
        ) else {
            panic!("parse")
        };
        assert_eq!(h.fields.wire(), b"X-App: y\r\n");
        assert!(!h.has_date);
        assert_eq!(h.keep, None, "close");
        let Ok(Some((Parsed::Final(h), _))) = parse(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            false,
        ) else {
            panic!("parse")
        };
        assert_eq!(h.framing, Framing::Chunked);
        let Ok(Some((Parsed::Final(h), _))) = parse("HTTP/1.0 200 OK\r\n\r\n", false) else {
            panic!("parse")
        };
        assert_eq!((h.framing, h.keep), (Framing::UntilClose, None));
        let Ok(Some((Parsed::Final(h), _))) =
            parse("HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", true)
        else {
            panic!("parse")
        };
        assert_eq!((h.framing, h.head_len), (Framing::Empty, Some(9)));
        assert!(matches!(
            parse("HTTP/1.1 100 Continue\r\n\r\n", false),
            Ok(Some((Parsed::Interim(Status::CONTINUE, _), 25)))
        ));
        // An interim response keeps its end-to-end fields only.
        let Ok(Some((Parsed::Interim(status, fields), _))) = parse(
            "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\nConnection: X-Hop\r\nX-Hop: 1\r\n\r\n",
            false,
        ) else {
            panic!("parse")
        };
        assert_eq!(status, Status::EARLY_HINTS);
        assert_eq!(fields.wire(), b"Link: </a.css>; rel=preload\r\n");
        assert!(parse(
            "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            false
        )
        .is_err());
        assert!(parse("HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", false).is_err());
        assert!(
            parse("HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\nhello", false).is_err(),
            "a signed length is refused"
        );
        assert!(matches!(parse("HTTP/1.1 200 OK\r\n", false), Ok(None)));
        let Ok(Some((Parsed::Final(h), _))) =
            parse("HTTP/1.1 299 Whatever\r\nContent-Length: 0\r\n\r\n", false)
        else {
            panic!("parse")
        };
        assert_eq!((h.status.code(), h.framing), (299, Framing::Empty));
    }

    #[test]
    fn a_101_keeps_only_end_to_end_fields() {
        let s = ProxySettings::default();
        let raw = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade, X-Hop\r\nX-Hop: 1\r\nSec-WebSocket-Accept: abc\r\nDate: x\r\nServer: node\r\n\r\n";
        let Ok(Some((Parsed::Final(h), _))) = parse_response(raw.as_bytes(), false, true, &s)
        else {
            panic!("parse")
        };
        assert!(h.tunnel);
        assert_eq!(
            String::from_utf8_lossy(h.fields.wire()),
            "Connection: upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Accept: abc\r\n"
        );
        assert!(parse_response(raw.as_bytes(), false, false, &s).is_err());
    }
}
