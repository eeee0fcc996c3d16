//! gRPC-Web (`grpc_web = true` on a route): browsers cannot read HTTP
//! trailers or speak HTTP/2 framing, so their gRPC library sends
//! `application/grpc-web` (or base64 `application/grpc-web-text`) over any
//! HTTP version, and expects the call's status as a last frame of the body
//! (flag 0x80, the trailers as `name: value\r\n` lines) instead of in
//! trailers. A route that translates lets a browser app call a plain gRPC
//! server with no Envoy between (gRPC's PROTOCOL-WEB.md):
//!
//! - request: the content type becomes `application/grpc` (its `+proto`
//!   or `+json` kept), `te: trailers` is sent, a text body is decoded as it
//!   comes;
//! - response: the content type becomes the web one the client used (text
//!   when it sent text or accepts only that), the messages pass as they
//!   come (base64 per piece in text mode, padding included: the protocol
//!   lets a server flush padded pieces, so a server stream's messages
//!   reach the browser one by one), and the trailers become the last frame.
//!   A trailers-only answer (the status in the head) stays one.

use std::io;
use std::task::{Context, Poll};

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use bytes::{BufMut, Bytes, BytesMut};
use hayate_core::client_body::{BodyLength, ClientBody};
use hayate_core::response::{BodySource, StreamBody};
use hayate_core::{Body, Fields, Response, Status};

use crate::ProxyRequest;

/// The flag byte of a gRPC-Web frame that carries the trailers.
const TRAILERS_FLAG: u8 = 0x80;

/// How a gRPC-Web call's bodies are encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Encoding {
    /// `application/grpc-web[+FORMAT]`: gRPC's frames as they are.
    Binary,
    /// `application/grpc-web-text[+FORMAT]`: the same frames in base64.
    Text,
}

/// A gRPC-Web call as its request head says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WebCall {
    /// How the request's body is encoded.
    request: Encoding,
    /// How the response's body is to be encoded.
    response: Encoding,
    /// The message format after the `+` (`proto`, `json`), if named.
    format: Option<Vec<u8>>,
}

impl WebCall {
    /// The call `req` makes, when it is gRPC-Web.
    pub(crate) fn of(req: &ProxyRequest<'_>) -> Option<WebCall> {
        let (request, format) = parse_type(req.field(b"content-type")?)?;
        // Text answers for a text request, or a client that accepts only
        // text (XHR-based clients say so in Accept).
        let text_accepted = req
            .values(b"accept")
            .any(|v| parse_type(v).is_some_and(|(e, _)| e == Encoding::Text));
        let response = match request {
            Encoding::Text => Encoding::Text,
            Encoding::Binary if text_accepted => Encoding::Text,
            Encoding::Binary => Encoding::Binary,
        };
        Some(WebCall {
            request,
            response,
            format,
        })
    }

    /// The request's content type for the gRPC server, kept by the caller
    /// for [`WebCall::grpc_request`] to borrow.
    pub(crate) fn grpc_type(&self) -> Vec<u8> {
        self.content_type(b"application/grpc")
    }

    /// The response's content type for the browser.
    fn web_type(&self) -> Vec<u8> {
        self.content_type(match self.response {
            Encoding::Binary => b"application/grpc-web",
            Encoding::Text => b"application/grpc-web-text",
        })
    }

    fn content_type(&self, base: &[u8]) -> Vec<u8> {
        let mut t = base.to_vec();
        if let Some(format) = &self.format {
            t.push(b'+');
            t.extend_from_slice(format);
        }
        t
    }

    /// The request as the gRPC server takes it: its content type, and
    /// `te: trailers` (gRPC servers refuse a call without it).
    pub(crate) fn grpc_request<'a>(
        &self,
        req: &ProxyRequest<'a>,
        grpc_type: &'a [u8],
    ) -> ProxyRequest<'a> {
        // Replaced below; a decoded text body's length is not the sent one.
        let replaced = |n: &[u8]| {
            n.eq_ignore_ascii_case(b"content-type")
                || n.eq_ignore_ascii_case(b"te")
                || (self.request == Encoding::Text && n.eq_ignore_ascii_case(b"content-length"))
        };
        let mut headers: Vec<(&[u8], &[u8])> = req
            .headers
            .iter()
            .filter(|(n, _)| !replaced(n))
            .copied()
            .collect();
        headers.push((b"content-type", grpc_type));
        headers.push((b"te", b"trailers"));
        ProxyRequest {
            headers,
            ..req.clone()
        }
    }

    /// The client's body as the gRPC server takes it.
    pub(crate) fn request_body<'b, B: ClientBody>(&self, body: &'b mut B) -> WebBody<'b, B> {
        WebBody {
            inner: body,
            text: (self.request == Encoding::Text).then(Base64Decoder::default),
        }
    }

    /// The gRPC server's answer (or hayate's own error) as the browser
    /// reads it.
    pub(crate) fn response(&self, mut r: Response) -> Response {
        if r.generated && !r.status.is_success() {
            return crate::grpc::rescue_as(r, &self.web_type());
        }
        let is_grpc = r.fields.get(b"content-type").is_some_and(|t| {
            let t = t.to_ascii_lowercase();
            t == b"application/grpc"
                || t.starts_with(b"application/grpc+")
                || t.starts_with(b"application/grpc;")
        });
        if !is_grpc {
            // Not a gRPC answer (a proxy's error page, a 404 of a server
            // that is not gRPC): the browser's library reports its HTTP
            // status; nothing to translate.
            return r;
        }
        set_field(&mut r.fields, b"content-type", &self.web_type());
        r.fields
            .retain(|n, _| !n.eq_ignore_ascii_case(b"content-length"));
        let text = self.response == Encoding::Text;
        r.body = match std::mem::take(&mut r.body) {
            Body::Stream(s) => Body::Stream(StreamBody {
                len: None,
                source: Box::new(WebResponseBody {
                    inner: s.source,
                    text,
                    ended: false,
                }),
            }),
            // A trailers-only answer: its status is in its head.
            other => other,
        };
        r
    }
}

/// `application/grpc-web[-text][+FORMAT][; params]`'s encoding and format.
fn parse_type(value: &[u8]) -> Option<(Encoding, Option<Vec<u8>>)> {
    let value = value.to_ascii_lowercase();
    let media = value.split(|&b| b == b';').next()?;
    let media = hayate_core::field::trim_ows(media);
    let rest = media.strip_prefix(b"application/grpc-web")?;
    let (encoding, rest) = match rest.strip_prefix(b"-text") {
        Some(rest) => (Encoding::Text, rest),
        None => (Encoding::Binary, rest),
    };
    match rest {
        [] => Some((encoding, None)),
        [b'+', format @ ..]
            if !format.is_empty()
                && format
                    .iter()
                    .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(b)) =>
        {
            Some((encoding, Some(format.to_vec())))
        }
        _ => None,
    }
}

/// Replaces every `name` field with one of `value`.
fn set_field(fields: &mut Fields, name: &[u8], value: &[u8]) {
    fields.retain(|n, _| !n.eq_ignore_ascii_case(name));
    fields.push(name, value);
}

/// A client's gRPC-Web body as gRPC: as it is, or decoded from base64.
pub(crate) struct WebBody<'b, B> {
    inner: &'b mut B,
    /// Set for a text body.
    text: Option<Base64Decoder>,
}

impl<B: ClientBody> ClientBody for WebBody<'_, B> {
    fn length(&self) -> BodyLength {
        match (&self.text, self.inner.length()) {
            // Decoded, a text body's length is known only at its end.
            (Some(_), BodyLength::Known(n)) if n > 0 => BodyLength::Chunked,
            (_, length) => length,
        }
    }

    async fn next_chunk(&mut self) -> io::Result<Option<Bytes>> {
        let Some(decoder) = &mut self.text else {
            return self.inner.next_chunk().await;
        };
        loop {
            match self.inner.next_chunk().await? {
                Some(piece) => {
                    let decoded = decoder.push(&piece)?;
                    if !decoded.is_empty() {
                        return Ok(Some(decoded));
                    }
                }
                None => {
                    decoder.finish()?;
                    return Ok(None);
                }
            }
        }
    }

    fn trailers(&mut self) -> Option<Bytes> {
        self.inner.trailers()
    }

    async fn gone(&mut self) {
        self.inner.gone().await
    }

    fn interim(&mut self, status: Status, fields: &Fields) {
        self.inner.interim(status, fields)
    }

    fn detach(&mut self) -> Option<Box<dyn BodySource>> {
        let source = self.inner.detach()?;
        Some(match self.text.take() {
            Some(decoder) => Box::new(DecodedSource { source, decoder }),
            None => source,
        })
    }

    fn limit(&mut self, max: u64) {
        self.inner.limit(max)
    }
}

/// A detached text body, decoded as it comes.
struct DecodedSource {
    source: Box<dyn BodySource>,
    decoder: Base64Decoder,
}

impl BodySource for DecodedSource {
    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Option<Bytes>>> {
        loop {
            match std::task::ready!(self.source.poll_chunk(cx))? {
                Some(piece) => {
                    let decoded = self.decoder.push(&piece)?;
                    if !decoded.is_empty() {
                        return Poll::Ready(Ok(Some(decoded)));
                    }
                }
                None => {
                    self.decoder.finish()?;
                    return Poll::Ready(Ok(None));
                }
            }
        }
    }

    fn trailers(&mut self) -> Option<Bytes> {
        self.source.trailers()
    }
}

/// Base64 decoded across pieces cut anywhere, padding allowed between
/// pieces of the stream (each piece a client flushed may end padded).
#[derive(Debug, Default)]
struct Base64Decoder {
    /// Characters of a quantum not complete yet (fewer than 4).
    carry: Vec<u8>,
}

impl Base64Decoder {
    /// Decodes what `piece` completes. Line breaks and spaces are skipped
    /// (a body made by a shell's `base64` ends with one; never data).
    fn push(&mut self, piece: &[u8]) -> io::Result<Bytes> {
        self.carry
            .extend(piece.iter().filter(|b| !b.is_ascii_whitespace()));
        let whole = self.carry.len() / 4 * 4;
        let mut out = Vec::with_capacity(whole / 4 * 3);
        // Each padded quantum ends a run the decoder takes whole.
        let mut run = 0;
        for q in (0..whole).step_by(4) {
            if self.carry[q + 3] == b'=' {
                decode_into(&self.carry[run..q + 4], &mut out)?;
                run = q + 4;
            }
        }
        decode_into(&self.carry[run..whole], &mut out)?;
        self.carry.drain(..whole);
        Ok(out.into())
    }

    /// The end of the body: nothing may be left over.
    fn finish(&self) -> io::Result<()> {
        match self.carry.is_empty() {
            true => Ok(()),
            false => Err(not_base64("the body ends inside a base64 quantum")),
        }
    }
}

fn decode_into(run: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
    if run.is_empty() {
        return Ok(());
    }
    STANDARD
        .decode_vec(run, out)
        .map_err(|e| not_base64(&e.to_string()))
}

/// A text body that is not base64: the client's error (400).
fn not_base64(why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("gRPC-Web text body is not base64: {why}"),
    )
}

/// The gRPC server's answer body as gRPC-Web: its messages as they come,
/// then its trailers as the last frame.
struct WebResponseBody {
    inner: Box<dyn BodySource>,
    /// Base64 each piece (`application/grpc-web-text`).
    text: bool,
    ended: bool,
}

impl BodySource for WebResponseBody {
    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Option<Bytes>>> {
        if self.ended {
            return Poll::Ready(Ok(None));
        }
        let piece = match std::task::ready!(self.inner.poll_chunk(cx))? {
            Some(data) => data,
            None => {
                self.ended = true;
                match self.inner.trailers() {
                    Some(lines) => trailer_frame(&lines),
                    // A server that ended its answer with no status: the
                    // browser's library reports the missing status.
                    None => return Poll::Ready(Ok(None)),
                }
            }
        };
        Poll::Ready(Ok(Some(match self.text {
            true => STANDARD.encode(&piece).into(),
            false => piece,
        })))
    }

    fn trailers(&mut self) -> Option<Bytes> {
        None
    }
}

/// The trailer frame: flag, length (big-endian), `name: value\r\n` lines
/// with lower-case names (HTTP/2 gave them so; the protocol asks for it).
fn trailer_frame(lines: &[u8]) -> Bytes {
    let lower: Vec<u8> = lines
        .split_inclusive(|&b| b == b'\n')
        .flat_map(|line| {
            let colon = line.iter().position(|&b| b == b':').unwrap_or(0);
            let (name, rest) = line.split_at(colon);
            name.to_ascii_lowercase()
                .into_iter()
                .chain(rest.iter().copied())
        })
        .collect();
    let mut frame = BytesMut::with_capacity(5 + lower.len());
    frame.put_u8(TRAILERS_FLAG);
    frame.put_u32(lower.len() as u32);
    frame.put_slice(&lower);
    frame.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn web_content_types_and_their_answers() {
        assert_eq!(
            parse_type(b"application/grpc-web"),
            Some((Encoding::Binary, None))
        );
        assert_eq!(
            parse_type(b"Application/gRPC-Web-Text+proto; charset=utf-8"),
            Some((Encoding::Text, Some(b"proto".to_vec())))
        );
        for not_web in [
            &b"application/grpc"[..],
            b"application/grpc+proto",
            b"application/grpc-webx",
            b"application/grpc-web+",
            b"text/plain",
        ] {
            assert_eq!(parse_type(not_web), None, "{not_web:?}");
        }
        let call = WebCall {
            request: Encoding::Binary,
            response: Encoding::Text,
            format: Some(b"proto".to_vec()),
        };
        assert_eq!(call.grpc_type(), b"application/grpc+proto");
        assert_eq!(call.web_type(), b"application/grpc-web-text+proto");
    }

    #[test]
    fn base64_across_pieces_and_padding_between_them() {
        let mut d = Base64Decoder::default();
        // "hello" (aGVsbG8=) then "!!" (ISE=), as two flushed pieces cut
        // in odd places.
        let mut out = Vec::new();
        for piece in [&b"aGV"[..], b"sbG8=IS", b"E=\r\n"] {
            out.extend_from_slice(&d.push(piece).unwrap());
        }
        d.finish().unwrap();
        assert_eq!(out, b"hello!!");
        let mut d = Base64Decoder::default();
        assert!(d.push(b"a*==").is_err(), "not base64");
        let mut d = Base64Decoder::default();
        d.push(b"aGVsb").unwrap();
        assert!(d.finish().is_err(), "cut inside a quantum");
    }

    #[test]
    fn trailers_become_the_last_frame_with_lower_case_names() {
        let frame = trailer_frame(b"Grpc-Status: 0\r\ngrpc-message: ok\r\n");
        assert_eq!(frame[0], 0x80);
        assert_eq!(
            u32::from_be_bytes(frame[1..5].try_into().unwrap()) as usize,
            frame.len() - 5
        );
        assert_eq!(&frame[5..], b"grpc-status: 0\r\ngrpc-message: ok\r\n");
    }
}
