//! hayate's neutral heads to and from the `http` crate's types, for the
//! protocols whose libraries speak them (HTTP/2 through `h2`, HTTP/3
//! through `h3`): the response head they send, the fields neither may
//! carry, trailers both ways, and the field values both refuse.

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

/// The head of `response` as `http`'s builder: its status, Date and
/// Server unless it carries its own, its fields less the connection-specific
/// ones, and Content-Length when its body has a known length and
/// `body_allowed`.
pub fn response_head(response: &Response, body_allowed: bool) -> http::response::Builder {
    let mut head = http::Response::builder().status(response.status.code());
    if !response.has_date {
        let mut date = Vec::with_capacity(40);
        hayate_core::date::append_date_line(&mut date, SystemTime::now());
        if let Some(value) = date
            .strip_prefix(b"Date: ")
            .and_then(|d| d.strip_suffix(b"\r\n"))
        {
            head = head.header(http::header::DATE, value);
        }
    }
    if !response.no_server {
        head = head.header(http::header::SERVER, "hayate");
    }
    for (name, value) in response.all_fields() {
        if !connection_specific(name) {
            head = head.header(name, value);
        }
    }
    if let (true, Some(len)) = (body_allowed, response.body.known_len()) {
        head = head.header(http::header::CONTENT_LENGTH, len);
    }
    head
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
