//! A request's head as every protocol module hands it to the request path:
//! method, scheme, authority, target (path and query), version and fields.
//! The pipeline, the cache, compression and the access log read these and
//! never how the request arrived.
//!
//! Its storage is one buffer with ranges into it: the HTTP/1 parser lends
//! it the request's own bytes (a copy of ~100-500 bytes costs less than
//! sharing the read buffer through reference counts), and other protocols
//! build it field by field ([`RequestHead::new`], [`RequestHead::push_field`]).

use std::ops::Range;

use crate::field::name_is;
use crate::transport::Scheme;

/// The protocol version a request came in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// HTTP/1.0.
    Http10,
    /// HTTP/1.1.
    Http11,
    /// HTTP/2.
    Http2,
    /// HTTP/3 (over QUIC).
    Http3,
}

impl Version {
    /// `HTTP/1.0`, `HTTP/1.1`, `HTTP/2.0` or `HTTP/3`, as logs write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Version::Http10 => "HTTP/1.0",
            Version::Http11 => "HTTP/1.1",
            Version::Http2 => "HTTP/2.0",
            Version::Http3 => "HTTP/3",
        }
    }
}

/// A field's name and value, as ranges into the head's buffer.
pub type FieldRanges = Vec<(Range<usize>, Range<usize>)>;

/// Where a part of the head sits in its buffer, in 8 bytes rather than a
/// `Range<usize>`'s 16: a head is moved whole from the parser to the
/// pipeline, and at 136 bytes a request's moves became calls of memcpy
/// (+350 instructions of a static request's 7,000: bench/instructions/run).
/// A head is far below 4 GiB (`max_header_bytes`).
#[derive(Debug, Clone, Copy)]
struct Span {
    start: u32,
    end: u32,
}

impl Span {
    fn of(r: Range<usize>) -> Span {
        debug_assert!(r.end <= u32::MAX as usize, "a head of 4 GiB");
        Span {
            start: r.start as u32,
            end: r.end as u32,
        }
    }

    #[inline]
    fn range(self) -> Range<usize> {
        self.start as usize..self.end as usize
    }
}

/// Where `target`'s `?` is, or its length.
fn query_at(target: &[u8]) -> u32 {
    let at = target
        .iter()
        .position(|&b| b == b'?')
        .unwrap_or(target.len());
    at as u32
}

/// A parsed, validated request head.
#[derive(Debug)]
pub struct RequestHead {
    buf: Vec<u8>,
    method: Span,
    target: Span,
    /// Where the target's `?` is (its length when it has none): found once,
    /// as the target is set, not by a scan in each of the several reads of
    /// the path and the query a request makes (33 instructions of a static
    /// request's 7,100 when the scan stopped being inlined).
    query_at: u32,
    /// The target as the client sent it, once a rule rewrote it.
    original_target: Option<Span>,
    authority: Option<Span>,
    fields: FieldRanges,
    /// The version it came in.
    pub version: Version,
    /// What the client's listener speaks.
    pub scheme: Scheme,
    /// The request's trace, when tracing is on (`otel_endpoint`); its box
    /// goes back to the thread's spares as the head is dropped.
    pub trace: Option<Box<crate::trace::RequestTrace>>,
}

impl Drop for RequestHead {
    /// A test when tracing is off: inlined, a head's drop stays what it
    /// was (bench/instructions/run, static and proxied cases).
    #[inline]
    fn drop(&mut self) {
        if let Some(trace) = self.trace.take() {
            crate::trace::keep_spare(trace);
        }
    }
}

/// Where each part of a head sits in a buffer a parser filled.
#[derive(Debug, Clone)]
pub struct Parts {
    /// The method.
    pub method: Range<usize>,
    /// The target: path and query (origin form).
    pub target: Range<usize>,
    /// The authority (Host, or an absolute-form target's).
    pub authority: Option<Range<usize>>,
    /// The version.
    pub version: Version,
    /// The scheme of the client's listener.
    pub scheme: Scheme,
}

impl RequestHead {
    /// A head with no fields yet (HTTP/2, FastCGI, tests).
    pub fn new(method: &[u8], target: &[u8], version: Version, scheme: Scheme) -> RequestHead {
        let mut buf = Vec::with_capacity(256);
        buf.extend_from_slice(method);
        buf.extend_from_slice(target);
        RequestHead {
            method: Span::of(0..method.len()),
            target: Span::of(method.len()..buf.len()),
            query_at: query_at(target),
            original_target: None,
            buf,
            authority: None,
            fields: Vec::new(),
            version,
            scheme,
            trace: None,
        }
    }

    /// A head over `buf`, which a parser filled and checked; `fields` and
    /// `parts` say where everything sits in it.
    pub fn from_buffer(buf: Vec<u8>, parts: Parts, fields: FieldRanges) -> RequestHead {
        RequestHead {
            query_at: query_at(&buf[parts.target.clone()]),
            buf,
            method: Span::of(parts.method),
            target: Span::of(parts.target),
            original_target: None,
            authority: parts.authority.map(Span::of),
            fields,
            version: parts.version,
            scheme: parts.scheme,
            trace: None,
        }
    }

    /// Appends a field. A `host` field sets the authority if none is set.
    pub fn push_field(&mut self, name: &[u8], value: &[u8]) {
        let n = self.append(name);
        let v = self.append(value);
        if self.authority.is_none() && name_is(name, b"host") {
            self.authority = Some(Span::of(v.clone()));
        }
        self.fields.push((n, v));
    }

    /// Sets the authority (HTTP/2's `:authority`).
    pub fn set_authority(&mut self, authority: &[u8]) {
        self.authority = Some(Span::of(self.append(authority)));
    }

    /// Replaces the target (a site rule's rewrite); the one the client
    /// sent stays as [`RequestHead::original_target`].
    pub fn rewrite_target(&mut self, target: &[u8]) {
        let new = Span::of(self.append(target));
        self.query_at = query_at(target);
        let old = std::mem::replace(&mut self.target, new);
        self.original_target.get_or_insert(old);
    }

    /// Whether a site rule rewrote the target.
    #[inline]
    pub fn was_rewritten(&self) -> bool {
        self.original_target.is_some()
    }

    /// The target as the client sent it (for logs, REQUEST_URI, redirects
    /// to HTTPS), whatever a rule rewrote it to.
    pub fn original_target(&self) -> &[u8] {
        match &self.original_target {
            Some(r) if r.start < r.end => &self.buf[r.range()],
            Some(_) => b"/",
            None => self.target(),
        }
    }

    fn append(&mut self, bytes: &[u8]) -> Range<usize> {
        let start = self.buf.len();
        self.buf.extend_from_slice(bytes);
        start..self.buf.len()
    }

    /// Gives the buffers back for the next head (a connection reuses them).
    #[inline]
    pub fn into_buffers(mut self) -> (Vec<u8>, FieldRanges) {
        (
            std::mem::take(&mut self.buf),
            std::mem::take(&mut self.fields),
        )
    }

    /// The method.
    #[inline]
    pub fn method(&self) -> &[u8] {
        &self.buf[self.method.range()]
    }

    /// The target: path and query (an absolute-form target's authority is
    /// [`RequestHead::host`]); `/` for an empty path; `*` for asterisk-form.
    #[inline]
    pub fn target(&self) -> &[u8] {
        let t = &self.buf[self.target.range()];
        if t.is_empty() {
            b"/"
        } else {
            t
        }
    }

    /// The path part of the target.
    #[inline(always)]
    pub fn path(&self) -> &[u8] {
        let t = &self.buf[self.target.range()];
        match t.is_empty() {
            true => b"/",
            false => &t[..self.query_at as usize],
        }
    }

    /// The query, without `?`.
    #[inline(always)]
    pub fn query(&self) -> Option<&[u8]> {
        let t = &self.buf[self.target.range()];
        t.get(self.query_at as usize + 1..)
    }

    /// The host the request is for (its authority), as sent.
    #[inline]
    pub fn host(&self) -> Option<&[u8]> {
        self.authority.map(|r| &self.buf[r.range()])
    }

    /// The first value of field `name` (case-insensitive).
    pub fn header(&self, name: &[u8]) -> Option<&[u8]> {
        self.fields()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }

    /// Every value of field `name`.
    pub fn headers_named<'a>(&'a self, name: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.fields()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }

    /// Every field, in order.
    pub fn fields(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.fields
            .iter()
            .map(|(n, v)| (&self.buf[n.clone()], &self.buf[v.clone()]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_built_field_by_field() {
        let mut h = RequestHead::new(b"GET", b"/a/b?x=1", Version::Http2, Scheme::Https);
        assert_eq!(h.host(), None);
        h.push_field(b"Host", b"example.com");
        h.push_field(b"Accept", b"*/*");
        h.push_field(b"accept", b"text/html");
        assert_eq!(
            (h.method(), h.path(), h.query()),
            (&b"GET"[..], &b"/a/b"[..], Some(&b"x=1"[..]))
        );
        assert_eq!(h.host(), Some(&b"example.com"[..]));
        assert_eq!(h.headers_named(b"ACCEPT").count(), 2);
        assert_eq!(h.header(b"accept"), Some(&b"*/*"[..]));
        h.rewrite_target(b"/index.php?p=a");
        assert_eq!(
            (h.path(), h.query()),
            (&b"/index.php"[..], Some(&b"p=a"[..]))
        );
        assert_eq!(h.original_target(), b"/a/b?x=1");
        h.rewrite_target(b"/c");
        assert_eq!(
            (h.target(), h.original_target()),
            (&b"/c"[..], &b"/a/b?x=1"[..])
        );
        h.set_authority(b"other.example");
        assert_eq!(h.host(), Some(&b"other.example"[..]));
        assert_eq!(h.fields().count(), 3);
        let empty = RequestHead::new(b"OPTIONS", b"", Version::Http11, Scheme::Http);
        assert_eq!(empty.target(), b"/");
    }
}
