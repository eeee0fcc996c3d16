//! FastCGI 1.0, client side of the responder role (php-fpm): a request is
//! FCGI_BEGIN_REQUEST with FCGI_KEEP_CONN, its CGI environment in
//! FCGI_PARAMS (`fastcgi/params.rs`), then its body in FCGI_STDIN records
//! as the client sends it (each write waits for the application to take
//! the last: back-pressure). The answer is FCGI_STDOUT, a CGI response head
//! (`fastcgi/cgi_head.rs`) then the body, streamed to the client record by
//! record; FCGI_STDERR lines go to the error log with the request's id; at
//! FCGI_END_REQUEST the connection returns to its member's pool.
//!
//! Forwarding is the HTTP proxy's (`forward.rs`): members, queue, pool and
//! retry rules are shared; only the bytes on the connection differ. One
//! request at a time per connection (multiplexing off, as php-fpm does).
//! A client that leaves mid-response makes the body drop: FCGI_ABORT_REQUEST
//! is sent if the socket takes it, and the connection is closed.

mod cgi_head;
mod params;
mod record;

use std::io::{self, IoSlice};
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use hayate_core::client_body::{BodyLength, ClientBody};
use hayate_core::error::{Error, ErrorKind};
use hayate_core::transport::Transport;
use hayate_core::{Body, BodySource, Response, Status, StreamBody};
use tokio::io::AsyncReadExt;

use crate::group::{Outstanding, ProxySettings};
use crate::protocol::{Outgoing, UpstreamProtocol};
use crate::request_head::{next_request_id, request_id_hex, valid_request_id};
use crate::retry::Failure;
use crate::upstream_io::{Sending, StallRead};
use crate::{ProxyRequest, UpstreamAddr};
use cgi_head::CgiHead;
use record::{next_record, Record, MAX_CONTENT};

/// Largest CGI response head accepted (as for an HTTP upstream).
const MAX_HEAD: usize = 64 * 1024;

/// A request prepared for a FastCGI responder.
pub(crate) struct FastCgi {
    /// FCGI_BEGIN_REQUEST and the FCGI_PARAMS records, the same for every
    /// attempt and member.
    start: Vec<u8>,
    /// The id the error log names the request by (X-Request-Id).
    request_id: RequestId,
    /// That id, when hayate made it (0: the client's own).
    made_id: u64,
}

/// What an exchange read: the CGI head, the connection, the body bytes
/// that came with the head and the records read past them.
pub(crate) struct Answer {
    conn: Transport,
    head: CgiHead,
    /// The body read so far (all of it, when `ended`).
    first: Bytes,
    rest: BytesMut,
    /// The records were read to FCGI_END_REQUEST: `Some(complete)`.
    ended: Option<bool>,
    /// No body goes to the client (HEAD, 204, 304).
    no_body: bool,
}

impl UpstreamProtocol for FastCgi {
    type Answer = Answer;

    const NEEDS_LENGTH: bool = true;

    fn prepare(
        req: &ProxyRequest<'_>,
        length: BodyLength,
        buffered: Option<&Bytes>,
        _settings: &ProxySettings,
    ) -> Result<FastCgi, Error> {
        let Some(script) = &req.cgi else {
            let e = io::Error::other("a FastCGI request without a script");
            return Err(Error::new(ErrorKind::Internal, e));
        };
        let content_length = match (length, buffered) {
            (BodyLength::None, _) => None,
            (_, Some(b)) => Some(b.len() as u64),
            (BodyLength::Known(n), None) => Some(n),
            // CGI needs CONTENT_LENGTH before the body: forwarding reads
            // a chunked body whole first (NEEDS_LENGTH), so this is a body
            // it could not.
            (BodyLength::Chunked, None) => {
                let e = io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "a chunked body of unknown length cannot go to FastCGI",
                );
                return Err(Error::new(ErrorKind::Refused(Status::LENGTH_REQUIRED), e));
            }
        };
        let request_id = match req.field(b"x-request-id").filter(|v| valid_request_id(v)) {
            Some(id) => RequestId::Given(String::from_utf8_lossy(id).into()),
            None => RequestId::Made(next_request_id()),
        };
        let made_id = match request_id {
            RequestId::Made(n) => n,
            RequestId::Given(_) => 0,
        };
        let params = match &request_id {
            RequestId::Made(n) => {
                params::request_params(req, script, content_length, &request_id_hex(*n))
            }
            RequestId::Given(id) => {
                params::request_params(req, script, content_length, id.as_bytes())
            }
        };
        Ok(FastCgi {
            start: record::request_start(&params),
            request_id,
            made_id,
        })
    }

    fn for_member(&mut self, _settings: &ProxySettings, _member: &UpstreamAddr) {}

    fn head(&self) -> &[u8] {
        &self.start
    }

    fn upgrade(&self) -> bool {
        false
    }

    fn made_request_id(&self) -> u64 {
        self.made_id
    }

    async fn exchange<B: ClientBody>(
        &self,
        mut conn: Transport,
        out: &Outgoing<'_>,
        body: &mut B,
        settings: &ProxySettings,
    ) -> Result<Answer, Failure> {
        let mut sending = Sending::new(&mut conn, settings.io_timeout);
        let end_of_stdin = record::stdin_header(0);
        match out.buffered {
            Some(b) => {
                // The whole request in one vectored write.
                let headers: Vec<_> = b
                    .chunks(MAX_CONTENT)
                    .map(|c| record::stdin_header(c.len()))
                    .collect();
                let mut parts = Vec::with_capacity(2 + 2 * headers.len());
                parts.push(IoSlice::new(out.head));
                for (h, c) in headers.iter().zip(b.chunks(MAX_CONTENT)) {
                    parts.push(IoSlice::new(h));
                    parts.push(IoSlice::new(c));
                }
                parts.push(IoSlice::new(&end_of_stdin));
                sending.send(&mut parts).await?;
            }
            None => {
                sending.waited = true;
                sending.send(&mut [IoSlice::new(out.head)]).await?;
                let mut first = (!out.prefix.is_empty()).then(|| out.prefix.clone());
                loop {
                    let chunk = match first.take() {
                        Some(p) => Some(p),
                        None => body.next_chunk().await.map_err(Failure::Client)?,
                    };
                    let Some(chunk) = chunk else { break };
                    for part in chunk.chunks(MAX_CONTENT) {
                        let header = record::stdin_header(part.len());
                        sending
                            .send(&mut [IoSlice::new(&header), IoSlice::new(part)])
                            .await?;
                    }
                }
                sending.send(&mut [IoSlice::new(&end_of_stdin)]).await?;
            }
        }
        let sent = if sending.waited {
            Instant::now()
        } else {
            out.started
        };
        let deadline = sent + settings.header_timeout;
        let mut buf = BytesMut::with_capacity(8 * 1024);
        let mut stdout = BytesMut::new();
        let mut answered = false;
        let on_stderr = |text: &[u8]| log_stderr(&self.request_id, text);
        let (head, first) = loop {
            if let Some(found) =
                take_head(&mut buf, &mut stdout, settings, on_stderr).map_err(Failure::Upstream)?
            {
                break found;
            }
            tokio::select! {
                more = read_more(&mut conn, &mut buf, deadline, &mut answered) => more?,
                () = body.gone() => {
                    // The script's client left: php-fpm is asked to stop it,
                    // and the connection (not pooled mid-request) closes.
                    let _ = conn.try_write_vectored(&[IoSlice::new(&record::abort_request())]);
                    return Err(Failure::Client(io::Error::new(
                        io::ErrorKind::ConnectionAborted,
                        "the client left before the FastCGI application answered",
                    )));
                }
            }
        };
        let no_body = out.is_head || head.status.forbids_body();
        let mut answer = Answer {
            conn,
            head,
            first: if no_body { Bytes::new() } else { first },
            rest: buf,
            ended: None,
            no_body,
        };
        // The records already read: a small answer often came whole with
        // its head, and then leaves in one write with its length. Without a
        // body for the client, the records are read to their end now, so the
        // connection can serve the next request. The body's bytes stay
        // where they were read while they are one piece; more pieces are
        // gathered in `more`.
        let mut more = BytesMut::new();
        loop {
            match next_record(&mut answer.rest).map_err(Failure::Upstream)? {
                Some(Record::End { complete, .. }) => {
                    answer.ended = Some(complete);
                    break;
                }
                Some(Record::Stderr(text)) => log_stderr(&self.request_id, &text),
                Some(Record::Stdout(data)) if !no_body => {
                    if answer.first.is_empty() && more.is_empty() {
                        answer.first = data;
                    } else {
                        if more.is_empty() {
                            more.extend_from_slice(&answer.first);
                        }
                        more.extend_from_slice(&data);
                    }
                }
                Some(Record::Stdout(_)) => {}
                None if no_body => {
                    read_more(&mut answer.conn, &mut answer.rest, deadline, &mut answered).await?
                }
                None => break,
            }
        }
        if !more.is_empty() {
            answer.first = more.freeze();
        }
        Ok(answer)
    }

    fn response(&self, answer: Answer, guard: Outstanding, settings: &ProxySettings) -> Response {
        let Answer {
            conn,
            head,
            first,
            rest,
            ended,
            no_body,
        } = answer;
        let whole = ended.is_some() && !no_body;
        if whole && head.len.is_some_and(|n| n != first.len() as u64) {
            let e = bad("the FastCGI body disagrees with its Content-Length");
            return Error::upstream(e)
                .context(format!("upstream {}", guard.member().label))
                .into_response();
        }
        let mut r = Response::new(head.status);
        r.fields = head.fields;
        r.has_date = head.has_date;
        let mut source = FcgiBody {
            conn: Some(conn),
            buf: rest,
            first: None,
            left: head.len,
            stall: StallRead::new(settings.io_timeout),
            keep: settings.idle_timeout,
            max_idle: settings.max_idle,
            guard: Some(guard),
            request_id: self.request_id.clone(),
        };
        if let Some(complete) = ended {
            source.end(complete);
        }
        // A whole body goes with its length (one write, no chunks), still
        // as a stream: compression and the cache take proxied bodies so.
        let len = if whole {
            Some(first.len() as u64)
        } else {
            head.len
        };
        source.first = (!first.is_empty()).then_some(first);
        r.body = Body::Stream(StreamBody {
            len,
            source: Box::new(source),
        });
        r
    }
}

/// Takes the records in `buf` until the CGI head is whole in `stdout`:
/// then the head and the body bytes that came after it. FCGI_STDERR goes
/// to `on_stderr`; an end of the request before the head is an error.
fn take_head(
    buf: &mut BytesMut,
    stdout: &mut BytesMut,
    settings: &ProxySettings,
    mut on_stderr: impl FnMut(&[u8]),
) -> io::Result<Option<(CgiHead, Bytes)>> {
    while let Some(record) = next_record(buf)? {
        match record {
            Record::Stdout(data) => {
                // A script's output usually comes in one record with its
                // head: parsed where it is, the body after it a slice of
                // the record (copying it was an allocation of the answer's
                // size and its bytes again, per request).
                if stdout.is_empty() {
                    if let Some((head, used)) = cgi_head::parse(&data, settings)? {
                        return Ok(Some((head, data.slice(used..))));
                    }
                }
                stdout.extend_from_slice(&data);
                if let Some((head, used)) = cgi_head::parse(stdout, settings)? {
                    stdout.advance(used);
                    return Ok(Some((head, stdout.split().freeze())));
                }
                if stdout.len() > MAX_HEAD {
                    return Err(bad("CGI response head too large"));
                }
            }
            Record::Stderr(text) => on_stderr(&text),
            Record::End { .. } => {
                return Err(bad(
                    "the FastCGI application ended the request without a response head",
                ))
            }
        }
    }
    Ok(None)
}

/// Reads what a FastCGI application answered, `data` arriving in pieces
/// of `piece` bytes, as an exchange does: the records, the CGI head, then
/// the body to FCGI_END_REQUEST. Returns the status and the body's length
/// when the answer is whole and valid. For the fuzz target
/// (`fuzz/fuzz_targets/fastcgi_answer.rs`): the parsers of what a FastCGI
/// application sends, run on untrusted bytes.
#[doc(hidden)]
pub fn read_fastcgi_answer(data: &[u8], piece: usize) -> Option<(u16, usize)> {
    let settings = ProxySettings::default();
    let (mut buf, mut stdout) = (BytesMut::new(), BytesMut::new());
    let mut pieces = data.chunks(piece.max(1));
    let (head, first) = loop {
        if let Some(found) = take_head(&mut buf, &mut stdout, &settings, |_| {}).ok()? {
            break found;
        }
        buf.extend_from_slice(pieces.next()?);
    };
    let mut body = first.len();
    loop {
        match next_record(&mut buf).ok()? {
            Some(Record::Stdout(d)) => body += d.len(),
            Some(Record::Stderr(_)) => {}
            Some(Record::End { .. }) => break,
            None => buf.extend_from_slice(pieces.next()?),
        }
    }
    if head.len.is_some_and(|n| n != body as u64) {
        return None;
    }
    Some((head.status.code(), body))
}

/// Reads more records into `buf` before `deadline`. A connection that
/// closes or fails before its first byte is [`Failure::NoAnswer`] (a kept
/// one php-fpm closed as it was reused may be replayed); after, or on
/// timeout, [`Failure::Upstream`].
async fn read_more(
    conn: &mut Transport,
    buf: &mut BytesMut,
    deadline: Instant,
    answered: &mut bool,
) -> Result<(), Failure> {
    let failed = |e, answered: bool| {
        if answered {
            Failure::Upstream(e)
        } else {
            Failure::NoAnswer(e)
        }
    };
    match hayate_core::deadline::within(deadline, conn.read_buf(buf)).await {
        Ok(Ok(0)) => {
            let e = io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the FastCGI application closed the connection",
            );
            Err(failed(e, *answered))
        }
        Ok(Ok(_)) => {
            *answered = true;
            Ok(())
        }
        Ok(Err(e)) => Err(failed(e, *answered)),
        Err(_) => Err(Failure::Upstream(io::Error::new(
            io::ErrorKind::TimedOut,
            "no response head in time",
        ))),
    }
}

/// A request's X-Request-Id: the client's (rare), or the number hayate
/// made, written out only when a log line names it (the made one went into
/// the params as hex; kept as text it cost two allocations a request).
#[derive(Debug, Clone)]
enum RequestId {
    Given(Rc<str>),
    Made(u64),
}

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RequestId::Given(id) => f.write_str(id),
            RequestId::Made(n) => f.write_str(&String::from_utf8_lossy(&request_id_hex(*n))),
        }
    }
}

/// Logs what the application wrote to FCGI_STDERR, one line per line,
/// named by the request's id.
fn log_stderr(request_id: &RequestId, text: &[u8]) {
    for line in text.split(|&b| b == b'\n') {
        let line = String::from_utf8_lossy(line);
        let line = line.trim_end();
        if !line.is_empty() {
            log::warn!("FastCGI stderr [request {request_id}]: {line}");
        }
    }
}

fn bad(message: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

/// The response body from FCGI_STDOUT, streamed as records arrive; the
/// connection returns to the pool at FCGI_END_REQUEST.
struct FcgiBody {
    /// `None` once the request ended.
    conn: Option<Transport>,
    buf: BytesMut,
    /// Body bytes that came with the head.
    first: Option<Bytes>,
    /// What remains of a Content-Length the application announced.
    left: Option<u64>,
    stall: StallRead,
    /// How long the connection may idle in the pool.
    keep: Duration,
    max_idle: usize,
    guard: Option<Outstanding>,
    request_id: RequestId,
}

impl FcgiBody {
    /// The request ended: the connection goes back to the pool when the
    /// application completed it and sent nothing past its end.
    fn end(&mut self, complete: bool) {
        if let (Some(conn), Some(guard)) = (self.conn.take(), self.guard.take()) {
            if complete && self.buf.is_empty() {
                guard
                    .member()
                    .checkin(conn, self.keep, self.max_idle, guard.instance_id());
            }
        }
    }

    /// `data` checked against the announced length.
    fn counted(&mut self, data: Bytes) -> io::Result<Bytes> {
        if let Some(left) = &mut self.left {
            let n = data.len() as u64;
            if n > *left {
                return Err(bad("the FastCGI body is longer than its Content-Length"));
            }
            *left -= n;
        }
        Ok(data)
    }

    fn poll_body(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Option<Bytes>>> {
        if let Some(first) = self.first.take() {
            return Poll::Ready(self.counted(first).map(Some));
        }
        loop {
            if self.conn.is_none() {
                return Poll::Ready(Ok(None));
            }
            match next_record(&mut self.buf) {
                Err(e) => {
                    self.conn = None;
                    return Poll::Ready(Err(e));
                }
                Ok(Some(Record::Stdout(data))) if data.is_empty() => continue,
                Ok(Some(Record::Stdout(data))) => return Poll::Ready(self.counted(data).map(Some)),
                Ok(Some(Record::Stderr(text))) => {
                    log_stderr(&self.request_id, &text);
                    continue;
                }
                Ok(Some(Record::End { complete, .. })) => {
                    self.end(complete);
                    if self.left.is_some_and(|l| l > 0) {
                        return Poll::Ready(Err(bad(
                            "the FastCGI body is shorter than its Content-Length",
                        )));
                    }
                    return Poll::Ready(Ok(None));
                }
                Ok(None) => {}
            }
            let Some(conn) = self.conn.as_mut() else {
                continue;
            };
            match self.stall.poll_read(conn, &mut self.buf, cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(0)) => {
                    self.conn = None;
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the FastCGI application closed mid-response",
                    )));
                }
                Poll::Ready(Ok(_)) => {}
            }
        }
    }
}

impl BodySource for FcgiBody {
    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Option<Bytes>>> {
        let r = self.poll_body(cx);
        r.map_err(|e| match &self.guard {
            // Name the upstream: the connection writer logs this error.
            Some(g) => io::Error::new(e.kind(), format!("upstream {}: {e}", g.member().label)),
            None => e,
        })
    }
}

impl Drop for FcgiBody {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.as_mut() {
            // The client left mid-response. The abort is a courtesy (php-fpm
            // stops a script when its output fails, or at its end): the
            // connection closes in any case, never pooled mid-request.
            let abort = record::abort_request();
            let _ = conn.try_write_vectored(&[IoSlice::new(&abort)]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record of `kind` for request 1, with `padding` bytes.
    fn record(kind: u8, content: &[u8], padding: u8) -> Vec<u8> {
        let mut r = vec![1, kind, 0, 1];
        r.extend_from_slice(&(content.len() as u16).to_be_bytes());
        r.extend_from_slice(&[padding, 0]);
        r.extend_from_slice(content);
        r.extend(std::iter::repeat_n(0, padding.into()));
        r
    }

    const STDOUT: u8 = 6;
    const STDERR: u8 = 7;
    const END: u8 = 3;

    #[test]
    fn an_answer_is_read_whatever_its_pieces() {
        let mut wire = record(STDERR, b"PHP Notice: x\n", 2);
        wire.extend(record(STDOUT, b"Status: 404 Not Found\r\nContent-Le", 0));
        wire.extend(record(STDOUT, b"ngth: 5\r\n\r\nab", 3));
        wire.extend(record(STDOUT, b"cde", 0));
        wire.extend(record(STDOUT, b"", 0));
        wire.extend(record(END, &[0; 8], 0));
        for piece in 1..=wire.len() {
            assert_eq!(read_fastcgi_answer(&wire, piece), Some((404, 5)), "{piece}");
        }
        // The body disagrees with its Content-Length.
        let short = [
            record(STDOUT, b"Content-Length: 9\r\n\r\nabc", 0),
            record(END, &[0; 8], 0),
        ]
        .concat();
        assert_eq!(read_fastcgi_answer(&short, 4), None);
        // The request ends before a head.
        let headless = [record(STDOUT, b"X: y\r\n", 0), record(END, &[0; 8], 0)].concat();
        assert_eq!(read_fastcgi_answer(&headless, 4), None);
        // A head past the limit.
        let huge = record(STDOUT, &vec![b'a'; 65_535], 0).repeat(2);
        assert_eq!(read_fastcgi_answer(&huge, 1 << 20), None);
    }
}
