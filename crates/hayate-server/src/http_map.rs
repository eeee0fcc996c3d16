//! hayate's neutral heads to and from the `http` crate's types, for the
//! protocols whose libraries speak them (HTTP/2 through `h2`, HTTP/3
//! through `h3`): the response head they send, the fields neither may
//! carry, trailers both ways, and the field values both refuse.

use std::cell::RefCell;
use std::time::SystemTime;

use hayate_core::request::{RequestHead, Version};
use hayate_core::transport::Scheme;
use hayate_core::Response;

/// The neutral head of a request whose pseudo-headers the protocol's crate
/// checked (RFC 9113 §8.3, RFC 9114 §4.3.1): `method` (the request's, or
/// what it stands for), its target and authority, `first` fields of the
/// caller's own, then the request's fields.
pub fn request_head(
    parts: &http::request::Parts,
    method: &[u8],
    version: Version,
    scheme: Scheme,
    first: impl FnOnce(&mut RequestHead),
) -> RequestHead {
    let target = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .as_bytes();
    let mut head = RequestHead::new(method, target, version, scheme);
    first(&mut head);
    if let Some(authority) = parts.uri.authority() {
        head.set_authority(authority.as_str().as_bytes());
    }
    for (name, value) in &parts.headers {
        head.push_field(name.as_str().as_bytes(), value.as_bytes());
    }
    head
}

/// The fields of a response head as HTTP/2 and HTTP/3 send them: Date and
/// Server unless the response carries its own, its fields less the
/// connection-specific ones, and Content-Length when its body has a known
/// length and a body is allowed.
pub struct HeadFields<'r> {
    response: &'r Response,
    date: Option<http::HeaderValue>,
    length: Option<([u8; 20], usize)>,
}

impl<'r> HeadFields<'r> {
    pub fn new(response: &'r Response, body_allowed: bool) -> HeadFields<'r> {
        let date = match response.has_date {
            true => None,
            false => date_value(SystemTime::now()),
        };
        let length = match (body_allowed, response.body.known_len()) {
            (true, Some(len)) => {
                let mut buffer = itoa::Buffer::new();
                let text = buffer.format(len).as_bytes();
                let mut digits = [0u8; 20];
                digits[..text.len()].copy_from_slice(text);
                Some((digits, text.len()))
            }
            _ => None,
        };
        HeadFields {
            response,
            date,
            length,
        }
    }

    fn server(&self) -> Option<&'static [u8]> {
        (!self.response.no_server).then_some(b"hayate")
    }

    fn own(&self) -> impl Iterator<Item = (&'r [u8], &'r [u8])> {
        let response: &'r Response = self.response;
        response
            .all_fields()
            .filter(|(name, _)| !connection_specific(name))
    }

    fn length(&self) -> Option<&[u8]> {
        self.length.as_ref().map(|(digits, n)| &digits[..*n])
    }

    /// Every field, as name and value.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        let date = self.date.as_ref().map(|d| (&b"date"[..], d.as_bytes()));
        let server = self.server().map(|s| (&b"server"[..], s));
        let length = self.length().map(|n| (&b"content-length"[..], n));
        date.into_iter()
            .chain(server)
            .chain(self.own())
            .chain(length)
    }

    /// The first of the response's own fields that `http`'s types refuse
    /// (a name not a token, a value with a control character), which
    /// neither HTTP/2 nor HTTP/3 may send (RFC 9113 §8.2.1, RFC 9114 §4.2).
    pub fn invalid(&self) -> Option<&'r [u8]> {
        self.own()
            .find(|(name, value)| {
                name.is_empty()
                    || !name.iter().all(|&b| hayate_core::field::is_tchar(b))
                    || value.iter().any(|&b| (b < b' ' && b != b'\t') || b == 0x7f)
            })
            .map(|(name, _)| name)
    }
}

/// The head of `response` as `http`'s builder, with the fields of
/// [`HeadFields`]. Date is shared for the second and Server is static (a
/// copy each before).
pub fn response_head(response: &Response, body_allowed: bool) -> http::response::Builder {
    let fields = HeadFields::new(response, body_allowed);
    let mut head = http::Response::builder().status(response.status.code());
    if let Some(date) = &fields.date {
        head = head.header(http::header::DATE, date.clone());
    }
    if fields.server().is_some() {
        head = head.header(
            http::header::SERVER,
            http::HeaderValue::from_static("hayate"),
        );
    }
    for (name, value) in fields.own() {
        head = head.header(name, value);
    }
    if let Some(length) = fields.length() {
        head = head.header(http::header::CONTENT_LENGTH, length);
    }
    head
}

/// The Date value for `now`, made once a second per thread: a clone is a
/// reference count.
fn date_value(now: SystemTime) -> Option<http::HeaderValue> {
    thread_local! {
        static DATE: RefCell<Option<(u64, http::HeaderValue)>> = const { RefCell::new(None) };
    }
    let second = now
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    DATE.with_borrow_mut(|cached| {
        if let Some((_, value)) = cached.as_ref().filter(|(at, _)| *at == second) {
            return Some(value.clone());
        }
        let mut line = Vec::with_capacity(40);
        hayate_core::date::append_date_line(&mut line, now);
        let value = line
            .strip_prefix(b"Date: ")
            .and_then(|d| d.strip_suffix(b"\r\n"))
            .and_then(|d| http::HeaderValue::from_bytes(d).ok())?;
        *cached = Some((second, value.clone()));
        Some(value)
    })
}

/// Fields that only mean something to an HTTP/1 connection, never sent
/// in HTTP/2 or HTTP/3 (RFC 9113 §8.2.2, RFC 9114 §4.2; h2 refuses a
/// response carrying them).
pub fn connection_specific(name: &[u8]) -> bool {
    const NAMES: [&[u8]; 6] = [
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"transfer-encoding",
        b"upgrade",
        b"te",
    ];
    NAMES.iter().any(|n| n.eq_ignore_ascii_case(name))
}

// Trailers between hayate's lines and the http crate's map: the proxy's
// HTTP/2 client converts them the same way.
pub use hayate_proxy::{field_lines, trailer_map};

/// The name of a field whose value begins or ends with whitespace: RFC
/// 9113 §8.2.1 and RFC 9114 §4.2 make such a request malformed. Neither
/// protocol has optional whitespace around values to trim (HTTP/1's parser
/// trims it), and a value passed on padded would reach an HTTP/1 upstream,
/// or a cache key, as a different value than a peer that trims it sees.
pub fn padded_field(headers: &http::HeaderMap) -> Option<&http::HeaderName> {
    headers
        .iter()
        .find(|(_, v)| matches!(v.as_bytes(), [b' ' | b'\t', ..] | [.., b' ' | b'\t']))
        .map(|(name, _)| name)
}

/// The 400 of a malformed request (a `padded_field`; RFC 9113 §8.1.1 and
/// RFC 9114 §4.1.2 allow a response before the request ends), logged like
/// HTTP/1's refusals.
pub fn malformed(
    name: &http::HeaderName,
    peer: &hayate_core::transport::Peer,
    protocol: &str,
) -> Response {
    let why = format!("{name} value begins or ends with whitespace (RFC 9110 §5.5)");
    let cause = std::io::Error::new(std::io::ErrorKind::InvalidData, why);
    hayate_core::error::Error::new(
        hayate_core::error::ErrorKind::Refused(hayate_core::Status::BAD_REQUEST),
        cause,
    )
    .context(format!("{protocol} request from {peer}"))
    .into_response()
}

/// What went out of a response, for the access log and /metrics.
#[derive(Debug, Default)]
pub(crate) struct Sent {
    /// Body bytes written.
    pub bytes: u64,
    /// A gRPC call's `grpc-status`, from the head (trailers-only) or the
    /// trailers.
    pub grpc_status: Option<u16>,
}

impl Sent {
    /// Notes the `grpc-status` of a response head (a trailers-only answer).
    pub(crate) fn note_grpc_head(&mut self, fields: &hayate_core::Fields) {
        self.grpc_status = fields.get(b"grpc-status").and_then(grpc_status);
    }

    /// Notes the `grpc-status` of a trailer section (`Name: value\r\n`).
    pub(crate) fn note_grpc_trailers(&mut self, lines: &[u8]) {
        let found = hayate_core::field::header_lines(lines)
            .find(|(name, _)| name.eq_ignore_ascii_case(b"grpc-status"));
        self.grpc_status = found.and_then(|(_, value)| grpc_status(value));
    }
}

/// A `grpc-status` value (0-16 in gRPC's list; any number kept).
fn grpc_status(value: &[u8]) -> Option<u16> {
    std::str::from_utf8(value).ok()?.trim().parse().ok()
}
