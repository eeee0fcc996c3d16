//! A response head. Server role ([`write_head`]): status line, Date,
//! Server, the response's fields, Content-Length and Connection, into the
//! connection's write buffer (one write for head and small body). Client
//! role ([`parse_head`]): an upstream's head, its framing checked.

use std::io;
use std::mem::MaybeUninit;
use std::time::SystemTime;

use crate::field::{list_contains, name_is, parse_length, split_list, trim_ows as trim};
use crate::h1::body::Framing;
use crate::{Response, Status};

/// The exchange-level facts the head needs.
#[derive(Debug, Clone, Copy)]
pub struct HeadContext {
    /// The request was HEAD: announce the length, send no body.
    pub head_request: bool,
    /// The request was HTTP/1.0.
    pub http10: bool,
    /// The connection stays open after this response.
    pub keep_alive: bool,
}

/// Appends the head of `resp` to `out`. Returns whether a body follows.
pub fn write_head(out: &mut Vec<u8>, resp: &Response, cx: HeadContext, now: SystemTime) -> bool {
    resp.status.append_status_line(out);
    if !resp.has_date {
        crate::date::append_date_line(out, now);
    }
    if !resp.no_server {
        out.extend_from_slice(b"Server: hayate\r\n");
    }
    if let Some(shared) = &resp.shared {
        out.extend_from_slice(shared.wire());
    }
    out.extend_from_slice(resp.fields.wire());
    let body_allowed = !resp.status.forbids_body();
    if body_allowed && !resp.unknown_framing {
        match resp.body.known_len() {
            Some(len) => {
                out.extend_from_slice(b"Content-Length: ");
                out.extend_from_slice(itoa::Buffer::new().format(len).as_bytes());
                out.extend_from_slice(b"\r\n");
            }
            // HTTP/1.0 gets a close-delimited body instead.
            None if !cx.http10 => out.extend_from_slice(b"Transfer-Encoding: chunked\r\n"),
            None => {}
        }
    }
    if resp.status == Status::SWITCHING_PROTOCOLS {
        // The handler's own `Connection: upgrade` stands.
    } else if !cx.keep_alive {
        out.extend_from_slice(b"Connection: close\r\n");
    } else if cx.http10 {
        out.extend_from_slice(b"Connection: keep-alive\r\n");
    }
    out.extend_from_slice(b"\r\n");
    body_allowed && !cx.head_request
}

/// Appends an interim (1xx) response passed on from an upstream (103
/// Early Hints, 102 Processing): its status line and fields, no Date or
/// Server (RFC 9110 §6.6.1 asks Date of final responses only).
pub fn write_interim(out: &mut Vec<u8>, status: Status, fields: &crate::Fields) {
    status.append_status_line(out);
    out.extend_from_slice(fields.wire());
    out.extend_from_slice(b"\r\n");
}

/// The interim `100 Continue` response.
pub const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// The response sent, without reading the request, to a connection over the
/// limit.
pub const OVER_CAPACITY: &[u8] =
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n\
Content-Length: 24\r\nRetry-After: 1\r\nConnection: close\r\n\r\n503 Service Unavailable\n";

/// A response head as read (client role): status, fields, and what they
/// say about the body and the connection.
#[derive(Debug)]
pub struct ParsedHead<'b> {
    /// Bytes of the head in the buffer.
    pub len: usize,
    /// The status (1xx included: the caller skips interim answers).
    pub status: Status,
    /// The fields as received.
    pub fields: &'b [httparse::Header<'b>],
    /// How the body is delimited.
    pub framing: Framing,
    /// The Content-Length, also on a HEAD answer (which has no body).
    pub content_length: Option<u64>,
    /// Transfer-Encoding ends in chunked, also on a HEAD answer.
    pub chunked: bool,
    /// The peer closes after this response (HTTP/1.0, `Connection:
    /// close`, or a close-delimited body).
    pub close: bool,
}

/// Parses a response head from the front of `buf` into `slots` (their
/// number bounds the fields); `Ok(None)` while incomplete. `head_request`:
/// the request was HEAD, so no body follows whatever the fields say.
/// Ambiguous framing (conflicting Content-Length values, a bad number) is
/// an error: the connection's next bytes could not be trusted.
pub fn parse_head<'b>(
    buf: &'b [u8],
    slots: &'b mut [MaybeUninit<httparse::Header<'b>>],
    head_request: bool,
) -> io::Result<Option<ParsedHead<'b>>> {
    let bad = |what: &str| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("bad response head: {what}"),
        )
    };
    let mut resp = httparse::Response::new(&mut []);
    let len = match httparse::ParserConfig::default()
        .parse_response_with_uninit_headers(&mut resp, buf, slots)
    {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(bad(&e.to_string())),
    };
    let code = resp.code.unwrap_or(0);
    let status = Status::any(code).ok_or_else(|| bad("status code"))?;
    let mut content_length: Option<u64> = None;
    let mut chunked = false;
    let mut other_coding = false;
    let mut close = resp.version != Some(1);
    for h in resp.headers.iter() {
        let name = h.name.as_bytes();
        if name_is(name, b"content-length") {
            match (parse_length(trim(h.value)), content_length) {
                (Some(v), None) => content_length = Some(v),
                (Some(v), Some(old)) if v == old => {}
                _ => return Err(bad("Content-Length")),
            }
        } else if name_is(name, b"transfer-encoding") {
            let last = split_list(h.value).last().unwrap_or_default();
            chunked = last.eq_ignore_ascii_case(b"chunked");
            other_coding = !chunked;
        } else if name_is(name, b"connection") {
            close |= list_contains(h.value, b"close");
        }
    }
    let framing = if head_request || code < 200 || code == 204 || code == 304 {
        Framing::Empty
    } else if chunked {
        Framing::Chunked
    } else if other_coding {
        Framing::UntilClose
    } else {
        match content_length {
            Some(0) => Framing::Empty,
            Some(n) => Framing::Length(n),
            None => Framing::UntilClose,
        }
    };
    Ok(Some(ParsedHead {
        len,
        status,
        fields: resp.headers,
        framing,
        content_length,
        chunked,
        close: close || framing == Framing::UntilClose,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Body;
    use bytes::Bytes;

    #[test]
    fn heads() {
        let mut r = Response::new(Status::OK);
        r.header("Content-Type", b"text/plain");
        r.body = Body::Bytes(Bytes::from_static(b"hi"));
        let mut out = Vec::new();
        let body = write_head(
            &mut out,
            &r,
            HeadContext {
                head_request: false,
                http10: true,
                keep_alive: true,
            },
            SystemTime::now(),
        );
        let s = String::from_utf8(out).expect("ascii");
        assert!(body);
        assert!(s.starts_with("HTTP/1.1 200 OK\r\nDate: "), "{s}");
        assert!(s.ends_with("Server: hayate\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\n"), "{s}");

        let r = Response::new(Status::NOT_MODIFIED);
        let mut out = Vec::new();
        let body = write_head(
            &mut out,
            &r,
            HeadContext {
                head_request: false,
                http10: false,
                keep_alive: false,
            },
            SystemTime::now(),
        );
        let s = String::from_utf8(out).expect("ascii");
        assert!(
            !body && !s.contains("Content-Length") && s.ends_with("Connection: close\r\n\r\n"),
            "{s}"
        );
        assert_eq!(
            OVER_CAPACITY.len()
                - OVER_CAPACITY
                    .windows(4)
                    .position(|w| w == b"\r\n\r\n")
                    .expect("end")
                - 4,
            24
        );
    }

    #[test]
    fn response_heads_and_their_framing() {
        let parse = |raw: &'static str, head: bool| {
            let mut slots = [const { MaybeUninit::uninit() }; 16];
            parse_head(raw.as_bytes(), &mut slots, head)
                .map(|p| p.map(|p| (p.status.code(), p.framing, p.close)))
        };
        let ok = |raw, head| parse(raw, head).expect("valid").expect("complete");
        assert_eq!(
            ok("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", false),
            (200, Framing::Length(5), false)
        );
        assert_eq!(
            ok(
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
                false
            ),
            (200, Framing::Chunked, false)
        );
        assert_eq!(
            ok("HTTP/1.0 200 OK\r\n\r\n", false),
            (200, Framing::UntilClose, true)
        );
        assert_eq!(
            ok("HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", true),
            (200, Framing::Empty, false)
        );
        assert_eq!(ok("HTTP/1.1 100 Continue\r\n\r\n", false).1, Framing::Empty);
        assert_eq!(
            ok(
                "HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n",
                false
            ),
            (204, Framing::Empty, true)
        );
        assert!(parse("HTTP/1.1 200 OK\r\n", false)
            .expect("valid")
            .is_none());
        assert!(parse(
            "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            false
        )
        .is_err());
        assert!(parse("HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\n", false).is_err());
        assert!(parse("HTTX 200\r\n\r\n", false).is_err());
    }
}
