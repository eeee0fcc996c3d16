//! A request head. Server role ([`parse`]): parsing and validating a
//! request head into the protocol-neutral [`RequestHead`], with the HTTP/1
//! facts beside it (body framing, keep-alive, `Expect: 100-continue`).
//! Client role ([`write_request_line`], [`write_field`],
//! [`write_framing`]): writing one.
//!
//! httparse does the tokenizing (and already refuses obs-fold, whitespace
//! before the colon, NUL, bare CR and bare LF inside fields); this module
//! adds the limits and the framing rules of RFC 9112 that keep hayate safe
//! from request smuggling: a request is refused, and the connection closed,
//! when its body length is ambiguous.

use crate::field::{name_is, parse_length, trim_ows as trim};
use std::mem::MaybeUninit;
use std::ops::Range;

use crate::request::{FieldRanges, Parts, RequestHead, Version};
use crate::transport::Scheme;
use crate::Status;
use bytes::{Buf, BytesMut};

/// Upper bound of the `max_headers` setting.
pub const MAX_HEADERS: usize = 512;

/// Limits applied while reading a head.
#[derive(Debug, Clone, Copy)]
pub struct HeadLimits {
    /// Longest request line.
    pub max_request_line: usize,
    /// Largest head.
    pub max_header_bytes: usize,
    /// Most header fields.
    pub max_headers: usize,
    /// Largest body.
    pub max_body_size: u64,
}

pub use crate::h1::body::Framing;

/// Buffers a connection lends to each request it parses and takes back
/// after the response, so parsing allocates nothing in the steady state.
#[derive(Debug, Default)]
pub struct Spare {
    head: Vec<u8>,
    fields: FieldRanges,
}

impl Spare {
    /// Takes a finished request's buffers back.
    #[inline]
    pub fn reclaim(&mut self, req: Request) {
        let (mut head, mut fields) = req.head.into_buffers();
        head.clear();
        fields.clear();
        self.head = head;
        self.fields = fields;
    }
}

/// A parsed HTTP/1 request: the neutral head, and what HTTP/1 says about
/// the connection and the body.
#[derive(Debug)]
pub struct Request {
    /// The head, as the request path reads it.
    pub head: RequestHead,
    /// Body framing.
    pub framing: Framing,
    /// Keep the connection open after this request (version and Connection).
    pub keep_alive: bool,
    /// The client sent `Expect: 100-continue`.
    pub expect_continue: bool,
}

/// A refusal: the status to answer and whether the connection must close.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    /// The status to answer.
    pub status: Status,
    /// A short reason, for the error log.
    pub reason: &'static str,
}

impl From<Refusal> for crate::error::Error {
    fn from(r: Refusal) -> crate::error::Error {
        let cause = std::io::Error::new(std::io::ErrorKind::InvalidData, r.reason);
        crate::error::Error::new(crate::error::ErrorKind::Refused(r.status), cause)
    }
}

impl Refusal {
    fn new(status: Status, reason: &'static str) -> Refusal {
        Refusal { status, reason }
    }
}

/// The result of trying to parse a head out of the read buffer.
#[derive(Debug)]
pub enum Parsed {
    /// A complete, valid head (removed from the buffer).
    Request(Request),
    /// More bytes are needed.
    Partial,
    /// The head is invalid; answer and close.
    Refused(Refusal),
}

/// Parses one request head from the front of `buf`; `scheme` is what the
/// connection's listener speaks.
pub fn parse(buf: &mut BytesMut, limits: &HeadLimits, spare: &mut Spare, scheme: Scheme) -> Parsed {
    // Leading empty lines before a request are ignored (RFC 9112 §2.2).
    while buf.first() == Some(&b'\r') || buf.first() == Some(&b'\n') {
        if buf.starts_with(b"\r\n") || buf.starts_with(b"\n") {
            let n = if buf[0] == b'\r' { 2 } else { 1 };
            buf.advance(n);
        } else {
            break;
        }
    }
    if buf.is_empty() {
        return Parsed::Partial;
    }
    match memchr_nl(buf) {
        Some(end) if end > limits.max_request_line => {
            return Parsed::Refused(Refusal::new(Status::URI_TOO_LONG, "request line too long"))
        }
        None if buf.len() > limits.max_request_line => {
            return Parsed::Refused(Refusal::new(Status::URI_TOO_LONG, "request line too long"))
        }
        _ => {}
    }

    // Uninitialized header slots cost nothing to create (hyper does the same).
    let mut slots: [MaybeUninit<httparse::Header<'_>>; MAX_HEADERS] =
        [const { MaybeUninit::uninit() }; MAX_HEADERS];
    let slots = &mut slots[..limits.max_headers.clamp(1, MAX_HEADERS)];
    let mut req = httparse::Request::new(&mut []);
    let base = buf.as_ptr() as usize;
    let offset = |s: &[u8]| {
        let start = s.as_ptr() as usize - base;
        start..start + s.len()
    };
    let result = req.parse_with_uninit_headers(buf, slots);
    let outcome = match result {
        Ok(httparse::Status::Partial) => {
            if buf.len() >= limits.max_header_bytes {
                Err(Refusal::new(
                    Status::REQUEST_HEADER_FIELDS_TOO_LARGE,
                    "request head too large",
                ))
            } else {
                Ok(None)
            }
        }
        Ok(httparse::Status::Complete(len)) if len > limits.max_header_bytes => Err(Refusal::new(
            Status::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "request head too large",
        )),
        Ok(httparse::Status::Complete(len)) => {
            let method = offset(req.method.unwrap_or_default().as_bytes());
            let target = offset(req.path.unwrap_or_default().as_bytes());
            let minor_version = req.version.unwrap_or(1);
            let mut fields = std::mem::take(&mut spare.fields);
            fields.extend(
                req.headers
                    .iter()
                    .map(|h| (offset(h.name.as_bytes()), offset(h.value))),
            );
            Ok(Some((len, method, target, minor_version, fields)))
        }
        Err(httparse::Error::TooManyHeaders) => Err(Refusal::new(
            Status::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "too many header fields",
        )),
        // A well-formed request line with another version: 505; junk: 400.
        Err(httparse::Error::Version) if names_a_version(buf) => Err(Refusal::new(
            Status::HTTP_VERSION_NOT_SUPPORTED,
            "unsupported HTTP version",
        )),
        Err(_) => Err(Refusal::new(Status::BAD_REQUEST, "malformed request head")),
    };
    match outcome {
        Ok(None) => Parsed::Partial,
        Err(r) => Parsed::Refused(r),
        Ok(Some((len, method, target, minor_version, fields))) => {
            let mut head = std::mem::take(&mut spare.head);
            head.extend_from_slice(&buf[..len]);
            buf.advance(len);
            let version = if minor_version == 0 {
                Version::Http10
            } else {
                Version::Http11
            };
            let parts = Parts {
                method,
                target,
                authority: None,
                version,
                scheme,
            };
            match Request::validate(head, parts, fields, limits) {
                Ok(r) => Parsed::Request(r),
                Err(r) => Parsed::Refused(r),
            }
        }
    }
}

/// Whether the request line is `METHOD TARGET HTTP/x.y`.
fn names_a_version(buf: &[u8]) -> bool {
    let line = &buf[..memchr_nl(buf).unwrap_or(buf.len())];
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let parts: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
    matches!(parts.as_slice(), [m, t, v] if !m.is_empty() && !t.is_empty()
        && v.len() == 8 && v.starts_with(b"HTTP/") && v[5].is_ascii_digit() && v[6] == b'.' && v[7].is_ascii_digit())
}

fn memchr_nl(buf: &[u8]) -> Option<usize> {
    buf.iter().position(|&b| b == b'\n')
}

impl Request {
    fn validate(
        buf: Vec<u8>,
        mut parts: Parts,
        fields: FieldRanges,
        limits: &HeadLimits,
    ) -> Result<Request, Refusal> {
        let bad = |reason| Refusal::new(Status::BAD_REQUEST, reason);
        let http10 = parts.version == Version::Http10;
        let mut expect_continue = false;
        let mut content_length: Option<u64> = None;
        let mut transfer_encoding = false;
        let mut host: Option<Range<usize>> = None;
        let mut hosts = 0;
        let mut connection_close = false;
        let mut connection_keep_alive = false;
        for (name, value) in &fields {
            let name = &buf[name.clone()];
            let v = &buf[value.clone()];
            if name_is(name, b"content-length") {
                for part in v.split(|&b| b == b',') {
                    let n = parse_length(trim(part)).ok_or(bad("invalid Content-Length"))?;
                    if content_length.is_some_and(|old| old != n) {
                        return Err(bad("conflicting Content-Length values"));
                    }
                    content_length = Some(n);
                }
            } else if name_is(name, b"transfer-encoding") {
                if transfer_encoding {
                    // Several fields are one list; only a single "chunked" is valid.
                    return Err(bad("repeated Transfer-Encoding"));
                }
                transfer_encoding = true;
                let codings: Vec<&[u8]> = v.split(|&b| b == b',').map(trim).collect();
                let is_chunked = |c: &&[u8]| c.eq_ignore_ascii_case(b"chunked");
                match codings.split_last() {
                    Some((last, rest)) if is_chunked(last) && !rest.iter().any(is_chunked) => {
                        if !rest.is_empty() {
                            return Err(Refusal::new(
                                Status::NOT_IMPLEMENTED,
                                "unsupported transfer coding",
                            ));
                        }
                    }
                    // Chunked applied twice, or not last (RFC 9112 §6.3).
                    _ => return Err(bad("Transfer-Encoding does not end in a single chunked")),
                }
            } else if name_is(name, b"host") {
                hosts += 1;
                if !valid_host(v) {
                    return Err(bad("invalid Host"));
                }
                host.get_or_insert(value.clone());
            } else if name_is(name, b"connection") {
                for token in v.split(|&b| b == b',').map(trim) {
                    connection_close |= token.eq_ignore_ascii_case(b"close");
                    connection_keep_alive |= token.eq_ignore_ascii_case(b"keep-alive");
                }
            } else if name_is(name, b"expect") {
                if trim(v).eq_ignore_ascii_case(b"100-continue") {
                    expect_continue = true;
                } else {
                    return Err(Refusal::new(
                        Status::EXPECTATION_FAILED,
                        "unsupported expectation",
                    ));
                }
            }
        }
        if transfer_encoding && content_length.is_some() {
            return Err(bad("both Content-Length and Transfer-Encoding"));
        }
        if transfer_encoding && http10 {
            return Err(bad("Transfer-Encoding in an HTTP/1.0 request"));
        }
        if hosts > 1 {
            return Err(bad("more than one Host"));
        }
        if hosts == 0 && !http10 {
            return Err(bad("missing Host"));
        }
        parts.authority = host;
        // The target: origin-form, absolute-form (its authority wins over Host), or `*`.
        let target = &buf[parts.target.clone()];
        if target.first() == Some(&b'/') {
        } else if target == b"*" {
            if &buf[parts.method.clone()] != b"OPTIONS" {
                return Err(bad("asterisk-form outside OPTIONS"));
            }
        } else if let Some((authority, path_start)) = split_absolute(target) {
            if !valid_host(authority) || authority.is_empty() {
                return Err(bad("invalid authority in request target"));
            }
            let t = parts.target.start;
            let at = t + authority_offset(target);
            parts.authority = Some(at..at + authority.len());
            parts.target = t + path_start..parts.target.end;
        } else {
            return Err(bad("invalid request target"));
        }
        let framing = match (transfer_encoding, content_length) {
            (true, _) => Framing::Chunked,
            (false, Some(0)) | (false, None) => Framing::Empty,
            (false, Some(n)) => Framing::Length(n),
        };
        if let Framing::Length(n) = framing {
            if n > limits.max_body_size {
                return Err(Refusal::new(
                    Status::CONTENT_TOO_LARGE,
                    "request body too large",
                ));
            }
        }
        let keep_alive = if http10 {
            connection_keep_alive && !connection_close
        } else {
            !connection_close
        };
        Ok(Request {
            head: RequestHead::from_buffer(buf, parts, fields),
            framing,
            keep_alive,
            expect_continue,
        })
    }

    /// Whether the request came in HTTP/1.0.
    pub fn http10(&self) -> bool {
        self.head.version == Version::Http10
    }
}

/// `http://authority/path` or `https://...`: the authority and where the
/// path starts in the target.
fn split_absolute(target: &[u8]) -> Option<(&[u8], usize)> {
    let lower_starts =
        |p: &[u8]| target.len() >= p.len() && target[..p.len()].eq_ignore_ascii_case(p);
    let scheme_len = if lower_starts(b"http://") {
        7
    } else if lower_starts(b"https://") {
        8
    } else {
        return None;
    };
    let rest = &target[scheme_len..];
    let end = rest
        .iter()
        .position(|&b| b == b'/' || b == b'?')
        .unwrap_or(rest.len());
    let authority = &rest[..end];
    // userinfo is not allowed in http(s) URIs sent to a server.
    if authority.contains(&b'@') {
        return None;
    }
    Some((authority, scheme_len + end))
}

fn authority_offset(target: &[u8]) -> usize {
    if target[..5].eq_ignore_ascii_case(b"https") {
        8
    } else {
        7
    }
}

/// Bytes allowed in an RFC 3986 reg-name (unreserved, sub-delims, `%`),
/// as a table: this check runs on every request.
const REG_NAME: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        t[i] = b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'-' | b'.'
                    | b'_'
                    | b'~'
                    | b'!'
                    | b'$'
                    | b'&'
                    | b'\''
                    | b'('
                    | b')'
                    | b'*'
                    | b'+'
                    | b','
                    | b';'
                    | b'='
                    | b'%'
            );
        i += 1;
    }
    t
};

/// RFC 3986 host (reg-name, IPv4 or IP-literal) with an optional port.
fn valid_host(v: &[u8]) -> bool {
    let v = trim(v);
    if v.is_empty() {
        return true; // allowed when the target has no authority (RFC 9112 §3.2)
    }
    let (host, port) = if v.first() == Some(&b'[') {
        let Some(close) = v.iter().position(|&b| b == b']') else {
            return false;
        };
        let inner = &v[1..close];
        if inner.is_empty()
            || !inner
                .iter()
                .all(|b| b.is_ascii_hexdigit() || b":.".contains(b))
        {
            return false;
        }
        (&v[..=close], &v[close + 1..])
    } else {
        match v.iter().rposition(|&b| b == b':') {
            Some(c) => (&v[..c], &v[c..]),
            None => (v, &v[v.len()..]),
        }
    };
    let port_ok = port.is_empty()
        || (port[0] == b':' && port[1..].len() <= 5 && port[1..].iter().all(u8::is_ascii_digit));
    let host_ok = host.first() == Some(&b'[')
        || (!host.is_empty() && host.iter().all(|&b| REG_NAME[b as usize]));
    port_ok && host_ok
}

/// Writes `METHOD target HTTP/1.1\r\n` (client role).
pub fn write_request_line(out: &mut Vec<u8>, method: &[u8], target: &[u8]) {
    out.extend_from_slice(method);
    out.push(b' ');
    out.extend_from_slice(target);
    out.extend_from_slice(b" HTTP/1.1\r\n");
}

/// Writes one field, `Name: value\r\n`. Neither may hold CR or LF:
/// callers pass what a parser validated or they built (debug builds
/// check).
pub fn write_field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    debug_assert!(
        !name.iter().chain(value).any(|&b| b == b'\r' || b == b'\n'),
        "header injection"
    );
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Writes the field that frames a request body (none for no body), and
/// the blank line that ends the head.
pub fn write_framing(out: &mut Vec<u8>, length: crate::client_body::BodyLength) {
    use crate::client_body::BodyLength;
    match length {
        BodyLength::None => {}
        BodyLength::Known(n) => write_field(
            out,
            b"Content-Length",
            itoa::Buffer::new().format(n).as_bytes(),
        ),
        BodyLength::Chunked => write_field(out, b"Transfer-Encoding", b"chunked"),
    }
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: HeadLimits = HeadLimits {
        max_request_line: 64,
        max_header_bytes: 256,
        max_headers: 8,
        max_body_size: 1000,
    };

    fn parse_str(raw: &str) -> Parsed {
        let mut buf = BytesMut::from(raw.as_bytes());
        parse(&mut buf, &LIMITS, &mut Spare::default(), Scheme::Http)
    }

    fn status(raw: &str) -> Option<u16> {
        match parse_str(raw) {
            Parsed::Request(_) => Some(200),
            Parsed::Partial => None,
            Parsed::Refused(r) => Some(r.status.code()),
        }
    }

    /// Request in, verdict out: 200 means accepted, None means incomplete.
    #[test]
    fn table() {
        let long_line = format!("GET /{} HTTP/1.1\r\nHost: a\r\n\r\n", "a".repeat(80));
        let big_head = format!(
            "GET / HTTP/1.1\r\nHost: a\r\nX: {}\r\n\r\n",
            "b".repeat(300)
        );
        let many = format!("GET / HTTP/1.1\r\nHost: a\r\n{}\r\n", "X: 1\r\n".repeat(10));
        let cases: Vec<(&str, Option<u16>)> = vec![
            ("GET / HTTP/1.1\r\nHost: a\r\n\r\n", Some(200)),
            ("GET / HTTP/1.1\r\nHost: a\r\n", None),
            ("\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", Some(200)),
            ("GET / HTTP/1.0\r\n\r\n", Some(200)),
            ("GET / HTTP/1.1\r\n\r\n", Some(400)),
            ("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", Some(400)),
            ("GET / HTTP/1.1\r\nHost: a b\r\n\r\n", Some(400)),
            ("GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", Some(400)),
            ("GET / HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n", Some(200)),
            ("GET / HTTP/1.1\r\nHost: a:99999999\r\n\r\n", Some(400)),
            ("GET / HTTP/2.0\r\nHost: a\r\n\r\n", Some(505)),
            ("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", Some(400)),
            ("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", Some(400)),
            ("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n", Some(200)),
            ("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\n", Some(200)),
            ("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 6\r\n\r\n", Some(400)),
            ("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n", Some(400)),
            ("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\n", Some(400)),
            ("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 0x5\r\n\r\n", Some(400)),
            ("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\n", Some(400)),
            ("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1001\r\n\r\n", Some(413)),
            ("GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", Some(400)),
            ("GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", Some(501)),
            ("GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked\r\n\r\n", Some(400)),
            ("GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", Some(400)),
            ("GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n", Some(200)),
            ("GET / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", Some(400)),
            ("GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n", Some(400)),
            ("GET / HTTP/1.1\r\nHost: a\r\nX : b\r\n\r\n", Some(400)),
            ("GET / HTTP/1.1\r\nHost: a\r\nX: a\0b\r\n\r\n", Some(400)),
            ("GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n", Some(400)),
            ("GET / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\n\r\n", Some(200)),
            ("GET / HTTP/1.1\r\nHost: a\r\nExpect: teapot\r\n\r\n", Some(417)),
            ("GET http://example.com/x HTTP/1.1\r\nHost: other\r\n\r\n", Some(200)),
            ("GET http://us@er/x HTTP/1.1\r\nHost: a\r\n\r\n", Some(400)),
            ("GET x HTTP/1.1\r\nHost: a\r\n\r\n", Some(400)),
            ("GET * HTTP/1.1\r\nHost: a\r\n\r\n", Some(400)),
            ("OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n", Some(200)),
            ("G E T / HTTP/1.1\r\nHost: a\r\n\r\n", Some(400)),
            ("GET /a b HTTP/1.1\r\nHost: a\r\n\r\n", Some(400)),
            (long_line.as_str(), Some(414)),
            (big_head.as_str(), Some(431)),
            (many.as_str(), Some(431)),
        ];
        for (raw, want) in cases {
            assert_eq!(status(raw), want, "{raw:?}");
        }
    }

    #[test]
    fn fields_and_framing() {
        let Parsed::Request(r) = parse_str(
            "POST http://Example.com:8080/a/b?x=1 HTTP/1.1\r\nHost: ignored\r\nContent-Length: 3\r\nConnection: close\r\n\r\n",
        ) else {
            panic!("parse failed")
        };
        assert_eq!(r.head.method(), b"POST");
        assert_eq!(r.head.path(), b"/a/b");
        assert_eq!(r.head.query(), Some(&b"x=1"[..]));
        assert_eq!(r.head.host(), Some(&b"Example.com:8080"[..]));
        assert_eq!(r.framing, Framing::Length(3));
        assert!(!r.keep_alive);
        let Parsed::Request(r) = parse_str("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        else {
            panic!()
        };
        assert!(r.keep_alive);
        let Parsed::Request(r) = parse_str("GET / HTTP/1.0\r\n\r\n") else {
            panic!()
        };
        assert!(!r.keep_alive);
    }

    #[test]
    fn pipelined_heads_parse_one_at_a_time() {
        let mut buf = BytesMut::from(
            &b"GET /1 HTTP/1.1\r\nHost: a\r\n\r\nGET /2 HTTP/1.1\r\nHost: a\r\n\r\nGET /3"[..],
        );
        for want in [&b"/1"[..], b"/2"] {
            let Parsed::Request(r) = parse(&mut buf, &LIMITS, &mut Spare::default(), Scheme::Http)
            else {
                panic!()
            };
            assert_eq!(r.head.path(), want);
        }
        assert!(matches!(
            parse(&mut buf, &LIMITS, &mut Spare::default(), Scheme::Http),
            Parsed::Partial
        ));
        assert_eq!(&buf[..], b"GET /3");
    }
}
