//! Compression of responses produced elsewhere (the proxy): a stage that
//! takes a [`Response`] whose body is streamed and, when the route's
//! policy and the client allow it, returns it with the body compressed as
//! it is sent (fast levels, chunked), its metadata adjusted.
//!
//! Left alone: HEAD, bodies already encoded (`Content-Encoding`), media
//! types off the allow-list (`text/event-stream` always), bodies announced
//! shorter than the minimum, ranges (a `Range` request or a 206),
//! `Cache-Control: no-transform`, and bodies that are not streamed.
//!
//! A response that a client with another Accept-Encoding would get
//! compressed carries `Vary: Accept-Encoding`, whether or not it is
//! compressed (including 206 and 304); a compressed one carries a weak
//! ETag (the upstream's strong tag names the identity bytes; weak tags
//! still match its If-None-Match), no `Accept-Ranges`, and no length.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use hayate_core::field::{name_is, split_list};
use hayate_core::{Body, BodySource, Coding, Fields, Response, Status, StreamBody};

use crate::encode::Encoder;
use crate::policy::Policy;
use crate::AcceptEncoding;

/// What the stage has compressed in this process: bodies streamed to their
/// end, their bytes in and out (for `/metrics`). Counted once per body, at
/// its end: three relaxed adds per compressed response.
#[derive(Debug, Default)]
pub struct StreamStats {
    bodies: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
}

/// The process's [`StreamStats`].
pub static STREAM_STATS: StreamStats = StreamStats {
    bodies: AtomicU64::new(0),
    bytes_in: AtomicU64::new(0),
    bytes_out: AtomicU64::new(0),
};

impl StreamStats {
    /// (bodies, bytes in, bytes out) so far.
    pub fn get(&self) -> (u64, u64, u64) {
        (
            self.bodies.load(Ordering::Relaxed),
            self.bytes_in.load(Ordering::Relaxed),
            self.bytes_out.load(Ordering::Relaxed),
        )
    }

    fn add(&self, bytes_in: u64, bytes_out: u64) {
        self.bodies.fetch_add(1, Ordering::Relaxed);
        self.bytes_in.fetch_add(bytes_in, Ordering::Relaxed);
        self.bytes_out.fetch_add(bytes_out, Ordering::Relaxed);
    }
}

/// What the stage needs to know about the request.
#[derive(Debug, Clone, Copy)]
pub struct RequestFacts<'a> {
    /// The request method.
    pub method: &'a [u8],
    /// The client's Accept-Encoding.
    pub accept: &'a AcceptEncoding,
    /// The request carried a Range header.
    pub range: bool,
}

/// Output gathered before it is handed to the writer even though more
/// input is ready: big enough for a good ratio, small enough to stream.
const HIGH_WATER: usize = 32 * 1024;

/// Compresses `resp` for the client if the policy allows (see the module
/// doc); otherwise returns it unchanged but for `Vary`.
pub fn compress_response(mut resp: Response, req: &RequestFacts<'_>, policy: &Policy) -> Response {
    if policy.codings.is_empty()
        || resp.status.code() < 200
        || matches!(resp.status, Status::NO_CONTENT)
        || matches!(resp.body, Body::Upgrade(_))
    {
        return resp;
    }
    let seen = Seen::of(&resp);
    if seen.encoded || seen.no_transform {
        return resp;
    }
    let not_modified = resp.status == Status::NOT_MODIFIED;
    match seen.content_type {
        Some(ct) if policy.compressible(ct) => {}
        // A 304 usually carries no Content-Type; it stands for a 200 that
        // may have been compressed.
        None if not_modified => {}
        _ => return resp,
    }
    if !not_modified && resp.body.known_len().is_some_and(|n| n < policy.min_size) {
        return resp;
    }
    // From here the response varies with Accept-Encoding.
    let vary = !seen.varies;
    let coding = if req.method == b"HEAD"
        || req.range
        || not_modified
        || resp.status == Status::PARTIAL_CONTENT
        || !matches!(resp.body, Body::Stream(_))
    {
        None
    } else {
        req.accept.choose(policy.codings.iter().copied())
    };
    let Some(coding) = coding else {
        if vary {
            resp.header("Vary", b"Accept-Encoding");
        }
        if not_modified {
            rewrite(&mut resp, None, false);
        }
        return resp;
    };
    let encoder = match Encoder::new(coding, policy.dynamic_levels.get(coding), true) {
        Ok(e) => e,
        Err(e) => {
            log::warn!("cannot start a {} encoder: {e}", coding.as_str());
            return resp;
        }
    };
    let Body::Stream(inner) = std::mem::take(&mut resp.body) else {
        unreachable!("checked above")
    };
    rewrite(&mut resp, Some(coding), vary);
    resp.body = Body::Stream(StreamBody {
        len: None,
        source: Box::new(CompressingBody {
            inner: inner.source,
            encoder: Some(encoder),
            unflushed: false,
            bytes_in: 0,
            bytes_out: 0,
        }),
    });
    resp
}

/// The fields of a response the stage decides by, read in one pass: five
/// lookups, a scan of the fields each, cost 423 more of a proxied
/// request's 21,731 instructions (bench/instructions/run).
struct Seen<'r> {
    /// A `Content-Encoding` field is present.
    encoded: bool,
    /// `Cache-Control` holds `no-transform`.
    no_transform: bool,
    /// The first `Content-Type`.
    content_type: Option<&'r [u8]>,
    /// `Vary` already names `Accept-Encoding` or `*`.
    varies: bool,
}

impl<'r> Seen<'r> {
    fn of(resp: &'r Response) -> Seen<'r> {
        let mut seen = Seen {
            encoded: false,
            no_transform: false,
            content_type: None,
            varies: false,
        };
        for (name, value) in resp.all_fields() {
            if name_is(name, b"content-encoding") {
                seen.encoded = true;
            } else if name_is(name, b"cache-control") {
                seen.no_transform |= has_token(value, b"no-transform");
            } else if name_is(name, b"content-type") {
                seen.content_type = seen.content_type.or(Some(value));
            } else if name_is(name, b"vary") {
                seen.varies |= has_token(value, b"accept-encoding") || has_token(value, b"*");
            }
        }
        seen
    }
}

/// Whether a comma-separated list value holds `token` (`token=...` too).
fn has_token(value: &[u8], token: &[u8]) -> bool {
    split_list(value).any(|t| {
        let t = t.split(|&c| c == b'=').next().unwrap_or_default();
        t.eq_ignore_ascii_case(token)
    })
}

/// Makes the response's fields its own, with the ETag made weak and, for a
/// compressed body, `Accept-Ranges` dropped and `Content-Encoding` (and
/// `Vary`) added.
fn rewrite(resp: &mut Response, coding: Option<Coding>, vary: bool) {
    let mut out = Fields::new();
    let mut weak = Vec::new();
    for (name, value) in resp.all_fields() {
        if coding.is_some() && name_is(name, b"accept-ranges") {
            continue;
        }
        if name_is(name, b"etag") && value.first() == Some(&b'"') {
            weak.clear();
            weak.extend_from_slice(b"W/");
            weak.extend_from_slice(value);
            out.push(name, &weak);
        } else {
            out.push(name, value);
        }
    }
    if let Some(c) = coding {
        out.push(b"Content-Encoding", c.as_str().as_bytes());
    }
    if vary {
        out.push(b"Vary", b"Accept-Encoding");
    }
    resp.shared = None;
    resp.fields = out;
}

/// A body compressed while it streams: input is gathered while the source
/// has more ready, and flushed as soon as it has none, so a slow or
/// streaming upstream's bytes reach the client without waiting.
struct CompressingBody {
    inner: Box<dyn BodySource>,
    /// `None` once finished.
    encoder: Option<Encoder>,
    /// Input written since the last flush.
    unflushed: bool,
    /// Bytes read from `inner` and sent, for [`STREAM_STATS`].
    bytes_in: u64,
    bytes_out: u64,
}

impl CompressingBody {
    fn output(&mut self, out: Vec<u8>) -> Bytes {
        self.bytes_out += out.len() as u64;
        Bytes::from(out)
    }
}

impl BodySource for CompressingBody {
    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Option<Bytes>>> {
        loop {
            let Some(encoder) = self.encoder.as_mut() else {
                return Poll::Ready(Ok(None));
            };
            match self.inner.poll_chunk(cx) {
                Poll::Ready(Ok(Some(chunk))) => {
                    encoder.write(&chunk)?;
                    self.bytes_in += chunk.len() as u64;
                    self.unflushed = true;
                    if encoder.output_len() >= HIGH_WATER {
                        let out = encoder.take_output();
                        return Poll::Ready(Ok(Some(self.output(out))));
                    }
                }
                Poll::Ready(Ok(None)) => {
                    let Some(mut encoder) = self.encoder.take() else {
                        return Poll::Ready(Ok(None));
                    };
                    let mut out = encoder.take_output();
                    out.extend_from_slice(&encoder.finish()?);
                    let out = (!out.is_empty()).then(|| self.output(out));
                    STREAM_STATS.add(self.bytes_in, self.bytes_out);
                    return Poll::Ready(Ok(out));
                }
                Poll::Ready(Err(e)) => {
                    self.encoder = None;
                    return Poll::Ready(Err(e));
                }
                Poll::Pending => {
                    if self.unflushed {
                        self.unflushed = false;
                        encoder.flush()?;
                        let out = encoder.take_output();
                        if !out.is_empty() {
                            return Poll::Ready(Ok(Some(self.output(out))));
                        }
                    }
                    return Poll::Pending;
                }
            }
        }
    }

    fn trailers(&mut self) -> Option<Bytes> {
        self.inner.trailers()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode::{decompress, Levels};
    use crate::policy::{TypeList, DEFAULT_TYPES};
    use std::collections::VecDeque;
    use std::future::poll_fn;

    fn policy() -> Policy {
        Policy {
            codings: Coding::COMPRESSED.to_vec(),
            static_levels: Levels::STATIC,
            dynamic_levels: Levels::DYNAMIC,
            min_size: 256,
            types: TypeList::new([DEFAULT_TYPES]),
        }
    }

    /// A source yielding scripted chunks, with a Pending between each.
    struct Script {
        chunks: VecDeque<Bytes>,
        pending_next: bool,
    }

    impl BodySource for Script {
        fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Option<Bytes>>> {
            if self.pending_next {
                self.pending_next = false;
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            self.pending_next = true;
            Poll::Ready(Ok(self.chunks.pop_front()))
        }
    }

    fn response(head: &str, chunks: &[&[u8]], len: Option<u64>) -> Response {
        let mut r = Response::new(Status::OK);
        r.fields = Fields::parse_wire(head.as_bytes());
        r.body = Body::Stream(StreamBody {
            len,
            source: Box::new(Script {
                chunks: chunks.iter().map(|c| Bytes::copy_from_slice(c)).collect(),
                pending_next: false,
            }),
        });
        r
    }

    /// Drains the body; returns every chunk.
    fn drain(resp: &mut Response) -> Vec<Bytes> {
        let Body::Stream(s) = &mut resp.body else {
            return match &resp.body {
                Body::Bytes(b) => vec![b.clone()],
                _ => vec![],
            };
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut out = Vec::new();
            while let Some(c) = poll_fn(|cx| s.source.poll_chunk(cx)).await.unwrap() {
                assert!(!c.is_empty(), "no empty chunks");
                out.push(c);
            }
            out
        })
    }

    fn compress(head: &str, accept: &str, chunks: &[&[u8]]) -> Response {
        let ae = AcceptEncoding::parse([accept.as_bytes()]);
        let req = RequestFacts {
            method: b"GET",
            accept: &ae,
            range: false,
        };
        compress_response(response(head, chunks, None), &req, &policy())
    }

    fn head_of(r: &Response) -> String {
        String::from_utf8_lossy(r.fields.wire()).into_owned()
    }

    #[test]
    fn streamed_body_round_trips_per_coding_and_flushes_per_pause() {
        let part = b"<p>hayate streams this paragraph of html</p>\n".repeat(20);
        let before = STREAM_STATS.get();
        let mut sent = 0;
        for (accept, coding) in [
            ("br", Coding::Br),
            ("zstd", Coding::Zstd),
            ("gzip", Coding::Gzip),
        ] {
            let mut r = compress(
                "Content-Type: text/html\r\nETag: \"v1\"\r\nAccept-Ranges: bytes\r\n",
                accept,
                &[&part, &part, &part],
            );
            let h = head_of(&r);
            assert!(
                h.contains(&format!("Content-Encoding: {}\r\n", coding.as_str())),
                "{h}"
            );
            assert!(h.contains("Vary: Accept-Encoding\r\n") && h.contains("ETag: W/\"v1\"\r\n"));
            assert!(!h.contains("Accept-Ranges"), "{h}");
            assert_eq!(r.body.known_len(), None, "chunked");
            let chunks = drain(&mut r);
            // A pause after every input chunk: every one got flushed out.
            assert!(chunks.len() >= 3, "{coding:?}: {} chunks", chunks.len());
            let all: Vec<u8> = chunks.concat();
            assert_eq!(decompress(coding, &all).unwrap(), part.repeat(3));
            sent += all.len() as u64;
        }
        // Other tests of this process may count too: at least these.
        let (bodies, bytes_in, bytes_out) = STREAM_STATS.get();
        assert!(bodies >= before.0 + 3);
        assert!(bytes_in >= before.1 + 9 * part.len() as u64);
        assert!(bytes_out >= before.2 + sent && sent < 9 * part.len() as u64);
    }

    #[test]
    fn left_alone() {
        let body = b"x".repeat(1000);
        let cases = [
            ("Content-Type: text/event-stream\r\n", "gzip"),
            ("Content-Type: image/png\r\n", "gzip"),
            (
                "Content-Type: text/html\r\nContent-Encoding: gzip\r\n",
                "gzip",
            ),
            (
                "Content-Type: text/html\r\nCache-Control: public, no-transform\r\n",
                "gzip",
            ),
            ("Content-Type: text/html\r\n", "identity"),
            ("Content-Type: text/html\r\n", ""),
        ];
        for (head, accept) in cases {
            let mut r = compress(head, accept, &[&body]);
            let h = head_of(&r);
            assert!(!h.contains("Content-Encoding: br"), "{head}");
            assert!(!h.contains("W/"), "{head}");
            assert_eq!(drain(&mut r).concat(), body, "{head}");
        }
        // Identity for a compressible type still varies.
        let r = compress("Content-Type: text/html\r\n", "", &[&body]);
        assert!(head_of(&r).contains("Vary: Accept-Encoding"));
        let r = compress("Content-Type: image/png\r\n", "gzip", &[&body]);
        assert!(!head_of(&r).contains("Vary"));
    }

    #[test]
    fn small_ranges_head_and_304() {
        let ae = AcceptEncoding::parse([&b"gzip"[..]]);
        let get = RequestFacts {
            method: b"GET",
            accept: &ae,
            range: false,
        };
        let small = response("Content-Type: text/html\r\n", &[b"hi"], Some(2));
        let r = compress_response(small, &get, &policy());
        assert_eq!(head_of(&r), "Content-Type: text/html\r\n");

        let ranged = RequestFacts { range: true, ..get };
        let r = compress_response(
            response("Content-Type: text/html\r\n", &[&[b'a'; 999]], Some(999)),
            &ranged,
            &policy(),
        );
        assert_eq!(
            head_of(&r),
            "Content-Type: text/html\r\nVary: Accept-Encoding\r\n"
        );

        let head = RequestFacts {
            method: b"HEAD",
            ..get
        };
        let r = compress_response(
            response("Content-Type: text/html\r\n", &[], Some(999)),
            &head,
            &policy(),
        );
        assert_eq!(r.body.known_len(), Some(999));

        let mut nm = Response::new(Status::NOT_MODIFIED);
        nm.header("ETag", b"\"v1\"");
        let r = compress_response(nm, &get, &policy());
        assert_eq!(head_of(&r), "ETag: W/\"v1\"\r\nVary: Accept-Encoding\r\n");

        let mut partial = response(
            "Content-Type: text/html\r\nVary: accept-encoding\r\n",
            &[&[b'a'; 999]],
            Some(999),
        );
        partial.status = Status::PARTIAL_CONTENT;
        let r = compress_response(partial, &get, &policy());
        assert_eq!(
            head_of(&r),
            "Content-Type: text/html\r\nVary: accept-encoding\r\n"
        );
    }

    #[test]
    fn upstream_error_mid_body_is_passed_on() {
        struct Fails(bool);
        impl BodySource for Fails {
            fn poll_chunk(&mut self, _: &mut Context<'_>) -> Poll<io::Result<Option<Bytes>>> {
                if std::mem::replace(&mut self.0, true) {
                    return Poll::Ready(Err(io::Error::other("upstream reset")));
                }
                Poll::Ready(Ok(Some(Bytes::from_static(&[b'a'; 600]))))
            }
        }
        let mut r = Response::new(Status::OK);
        r.header("Content-Type", b"text/plain");
        r.body = Body::Stream(StreamBody {
            len: Some(2000),
            source: Box::new(Fails(false)),
        });
        let ae = AcceptEncoding::parse([&b"gzip"[..]]);
        let req = RequestFacts {
            method: b"GET",
            accept: &ae,
            range: false,
        };
        let mut r = compress_response(r, &req, &policy());
        let Body::Stream(s) = &mut r.body else {
            panic!("stream")
        };
        struct Noop;
        impl std::task::Wake for Noop {
            fn wake(self: std::sync::Arc<Self>) {}
        }
        let waker = std::task::Waker::from(std::sync::Arc::new(Noop));
        let mut cx = Context::from_waker(&waker);
        assert!(matches!(s.source.poll_chunk(&mut cx), Poll::Ready(Err(_))));
        assert!(matches!(
            s.source.poll_chunk(&mut cx),
            Poll::Ready(Ok(None))
        ));
    }
}
