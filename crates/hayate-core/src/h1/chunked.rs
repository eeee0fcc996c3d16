//! The chunked transfer-coding decoder (RFC 9112 §7.1), used for request
//! bodies from clients and response bodies from upstreams.
//!
//! The decoder is strict where leniency enables smuggling: chunk sizes are
//! hex digits only (no sign, no `0x`, at most 16 digits), every line ends in
//! CRLF (a bare LF or CR is an error), and extensions and trailers are
//! bounded in size.
//!
//! A proxy passes trailers on through [`passable_trailers`], which drops the
//! fields that must not appear in a trailer section.

use bytes::Bytes;

use crate::field::{header_lines, hex_digit, is_tchar};

/// Longest chunk extension accepted, in bytes.
const MAX_EXTENSION: usize = 4096;
/// Largest trailer section accepted, in bytes.
const MAX_TRAILERS: usize = 16 * 1024;

/// Why a chunked body was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkError {
    /// A chunk size that is not 1-16 hex digits.
    BadSize,
    /// A line not ended by CRLF, or data not followed by CRLF.
    BadLineEnding,
    /// An extension or trailer section over its bound.
    TooLong,
}

impl std::fmt::Display for ChunkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ChunkError::BadSize => "bad chunk size",
            ChunkError::BadLineEnding => "chunk line not ended by CRLF",
            ChunkError::TooLong => "chunk extension or trailers too long",
        })
    }
}

impl std::error::Error for ChunkError {}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Size { digits: u8 },
    Extension { len: usize },
    SizeLf,
    Data,
    DataCr,
    DataLf,
    TrailerLineStart,
    TrailerLine,
    TrailerLf { empty: bool },
    Done,
}

/// An incremental chunked decoder.
#[derive(Debug, Clone)]
pub struct ChunkedDecoder {
    state: State,
    /// Size of the current chunk, then bytes of it still to come.
    remaining: u64,
    trailer_bytes: usize,
    /// The trailer section, `Name: value\r\n` lines, when kept.
    trailers: Option<Vec<u8>>,
}

impl Default for ChunkedDecoder {
    fn default() -> Self {
        ChunkedDecoder {
            state: State::Size { digits: 0 },
            remaining: 0,
            trailer_bytes: 0,
            trailers: None,
        }
    }
}

impl ChunkedDecoder {
    /// A decoder that keeps the trailer fields (a proxy passes them on).
    pub fn keeping_trailers() -> ChunkedDecoder {
        ChunkedDecoder {
            trailers: Some(Vec::new()),
            ..ChunkedDecoder::default()
        }
    }

    /// The trailer fields read, as `Name: value\r\n` lines (empty if none).
    pub fn take_trailers(&mut self) -> Vec<u8> {
        self.trailers
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Whether the last chunk and the trailers have been read.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Decodes from `input`, calling `on_data` with each piece of body data.
    /// Returns how many bytes of `input` were consumed; stops at the end of
    /// the body.
    pub fn decode<'a>(
        &mut self,
        input: &'a [u8],
        mut on_data: impl FnMut(&'a [u8]),
    ) -> Result<usize, ChunkError> {
        let mut i = 0;
        while i < input.len() && self.state != State::Done {
            let b = input[i];
            match self.state {
                State::Size { digits } => match hex_digit(b) {
                    Some(d) => {
                        if digits >= 16 {
                            return Err(ChunkError::BadSize);
                        }
                        self.remaining = self.remaining << 4 | u64::from(d);
                        self.state = State::Size { digits: digits + 1 };
                    }
                    None if digits == 0 => return Err(ChunkError::BadSize),
                    None if b == b'\r' => self.state = State::SizeLf,
                    None if b == b';' || b == b' ' || b == b'\t' => {
                        self.state = State::Extension { len: 0 }
                    }
                    None => return Err(ChunkError::BadSize),
                },
                State::Extension { len } => match b {
                    b'\r' => self.state = State::SizeLf,
                    b'\n' => return Err(ChunkError::BadLineEnding),
                    _ if len >= MAX_EXTENSION => return Err(ChunkError::TooLong),
                    _ => self.state = State::Extension { len: len + 1 },
                },
                State::SizeLf => {
                    if b != b'\n' {
                        return Err(ChunkError::BadLineEnding);
                    }
                    self.state = if self.remaining == 0 {
                        State::TrailerLineStart
                    } else {
                        State::Data
                    };
                }
                State::Data => {
                    let take = (input.len() - i)
                        .min(usize::try_from(self.remaining).unwrap_or(usize::MAX));
                    on_data(&input[i..i + take]);
                    self.remaining -= take as u64;
                    i += take;
                    if self.remaining == 0 {
                        self.state = State::DataCr;
                    }
                    continue;
                }
                State::DataCr => {
                    if b != b'\r' {
                        return Err(ChunkError::BadLineEnding);
                    }
                    self.state = State::DataLf;
                }
                State::DataLf => {
                    if b != b'\n' {
                        return Err(ChunkError::BadLineEnding);
                    }
                    self.state = State::Size { digits: 0 };
                }
                State::TrailerLineStart | State::TrailerLine => {
                    self.trailer_bytes += 1;
                    if self.trailer_bytes > MAX_TRAILERS {
                        return Err(ChunkError::TooLong);
                    }
                    match b {
                        b'\r' => {
                            self.state = State::TrailerLf {
                                empty: self.state == State::TrailerLineStart,
                            }
                        }
                        b'\n' => return Err(ChunkError::BadLineEnding),
                        _ => {
                            if let Some(t) = self.trailers.as_mut() {
                                t.push(b);
                            }
                            self.state = State::TrailerLine
                        }
                    }
                }
                State::TrailerLf { empty } => {
                    if b != b'\n' {
                        return Err(ChunkError::BadLineEnding);
                    }
                    if let (false, Some(t)) = (empty, self.trailers.as_mut()) {
                        t.extend_from_slice(b"\r\n");
                    }
                    self.state = if empty {
                        State::Done
                    } else {
                        State::TrailerLineStart
                    };
                }
                State::Done => break,
            }
            i += 1;
        }
        Ok(i)
    }
}

/// `{len:x}\r\n` in `buf`, without allocating.
pub fn chunk_size_line(len: usize, buf: &mut [u8; 18]) -> &[u8] {
    let digits = (usize::BITS - len.leading_zeros()).div_ceil(4).max(1) as usize;
    for i in 0..digits {
        buf[digits - 1 - i] = b"0123456789abcdef"[(len >> (4 * i)) & 0xf];
    }
    buf[digits] = b'\r';
    buf[digits + 1] = b'\n';
    &buf[..digits + 2]
}

/// Whether a trailer field is never passed on: framing, routing,
/// authentication and content fields (RFC 9110 §6.5.1), and hop-by-hop
/// fields (RFC 9110 §7.6.1). The same list serves requests and responses.
fn forbidden_trailer(name: &[u8]) -> bool {
    const NAMES: [&[u8]; 21] = [
        // Framing and content.
        b"content-length",
        b"transfer-encoding",
        b"content-encoding",
        b"content-type",
        b"content-range",
        b"trailer",
        // Routing, request modifiers and control data.
        b"host",
        b"cache-control",
        b"expect",
        b"te",
        b"max-forwards",
        // Authentication and cookies.
        b"authorization",
        b"proxy-authorization",
        b"www-authenticate",
        b"proxy-authenticate",
        b"cookie",
        b"set-cookie",
        // Hop-by-hop.
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"upgrade",
    ];
    NAMES.iter().any(|n| n.eq_ignore_ascii_case(name))
}

/// The trailer lines of `raw` (`Name: value\r\n`, as
/// [`ChunkedDecoder::take_trailers`] gives them) that a proxy may pass on:
/// well-formed fields other than framing, routing, authentication, content
/// and hop-by-hop ones. `None` when nothing is left.
pub fn passable_trailers(raw: &[u8]) -> Option<Bytes> {
    let mut kept = Vec::with_capacity(raw.len());
    for (name, value) in header_lines(raw) {
        let well_formed = !name.is_empty()
            && name.iter().all(|&b| is_tchar(b))
            && value.iter().all(|&b| b == b'\t' || b >= b' ')
            && !value.contains(&0x7f);
        if well_formed && !forbidden_trailer(name) {
            kept.extend_from_slice(name);
            kept.extend_from_slice(b": ");
            kept.extend_from_slice(value);
            kept.extend_from_slice(b"\r\n");
        }
    }
    (!kept.is_empty()).then(|| Bytes::from(kept))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_size_lines() {
        let mut buf = [0u8; 18];
        for (n, want) in [
            (0usize, "0\r\n"),
            (1, "1\r\n"),
            (15, "f\r\n"),
            (16, "10\r\n"),
            (0x2_0000, "20000\r\n"),
            (usize::MAX, "ffffffffffffffff\r\n"),
        ] {
            assert_eq!(chunk_size_line(n, &mut buf), want.as_bytes(), "{n}");
        }
    }

    fn decode_all(input: &[u8], step: usize) -> Result<(Vec<u8>, usize, bool), ChunkError> {
        let mut d = ChunkedDecoder::default();
        let mut out = Vec::new();
        let mut consumed = 0;
        while consumed < input.len() && !d.is_done() {
            let end = (consumed + step).min(input.len());
            let n = d.decode(&input[consumed..end], |data| out.extend_from_slice(data))?;
            consumed += n;
            if n == 0 {
                break;
            }
        }
        Ok((out, consumed, d.is_done()))
    }

    #[test]
    fn decodes_in_any_split() {
        let body = b"5\r\nhello\r\n6;name=val\r\n world\r\n0\r\nX-Trailer: 1\r\n\r\nNEXT";
        for step in [1, 2, 3, 7, 100] {
            let (out, consumed, done) = decode_all(body, step).expect("valid");
            assert_eq!(out, b"hello world");
            assert!(done);
            assert_eq!(&body[consumed..], b"NEXT", "step {step}");
        }
    }

    #[test]
    fn refuses_smuggling_shapes() {
        let cases: &[(&[u8], ChunkError)] = &[
            (b"-5\r\n", ChunkError::BadSize),
            (b"0x5\r\n", ChunkError::BadSize),
            (b"\r\n", ChunkError::BadSize),
            (b"5\nhello\r\n", ChunkError::BadSize),
            (b"5\r\nhelloXX", ChunkError::BadLineEnding),
            (b"5\r\nhello\n0\r\n\r\n", ChunkError::BadLineEnding),
            (b"11111111111111111\r\n", ChunkError::BadSize),
            (b"0\r\nX: 1\n\r\n", ChunkError::BadLineEnding),
            (b"5;a\nb\r\n", ChunkError::BadLineEnding),
        ];
        for (input, want) in cases {
            assert_eq!(
                decode_all(input, 100).map(|_| ()),
                Err(*want),
                "{:?}",
                String::from_utf8_lossy(input)
            );
        }
        let long_ext = format!("1;{}\r\n", "a".repeat(MAX_EXTENSION + 1));
        assert_eq!(
            decode_all(long_ext.as_bytes(), 100).map(|_| ()),
            Err(ChunkError::TooLong)
        );
    }

    #[test]
    fn trailer_sections_are_bounded() {
        // The bound counts every byte of the section but the LFs: here
        // `X-Pad: ` (7), the value, the line's CR and the last line's CR.
        let section =
            |value_len: usize| format!("1\r\na\r\n0\r\nX-Pad: {}\r\n\r\n", "v".repeat(value_len));
        let at_limit = section(MAX_TRAILERS - 9);
        let mut d = ChunkedDecoder::keeping_trailers();
        let used = d.decode(at_limit.as_bytes(), |_| {}).expect("at the limit");
        assert_eq!(used, at_limit.len());
        assert!(d.is_done());
        // Kept as `X-Pad: v…v\r\n`: as many bytes as were counted.
        assert_eq!(d.take_trailers().len(), MAX_TRAILERS);
        for step in [1, 100, usize::MAX] {
            assert_eq!(
                decode_all(section(MAX_TRAILERS - 8).as_bytes(), step).map(|_| ()),
                Err(ChunkError::TooLong),
                "step {step}"
            );
        }
        let mut kept = ChunkedDecoder::keeping_trailers();
        assert_eq!(
            kept.decode(section(MAX_TRAILERS - 8).as_bytes(), |_| {}),
            Err(ChunkError::TooLong)
        );
        // Many short lines add up the same way (5 counted bytes each).
        let many = format!("0\r\n{}\r\n", "X: 1\r\n".repeat(MAX_TRAILERS / 5 + 1));
        assert_eq!(
            decode_all(many.as_bytes(), 100).map(|_| ()),
            Err(ChunkError::TooLong)
        );
    }

    #[test]
    fn trailers_are_kept_on_request() {
        let body = b"3\r\nabc\r\n0\r\nX-Checksum: 42\r\nX-Other: a b\r\n\r\n";
        let mut d = ChunkedDecoder::keeping_trailers();
        let mut out = Vec::new();
        for piece in body.chunks(4) {
            d.decode(piece, |c| out.extend_from_slice(c))
                .expect("valid");
        }
        assert!(d.is_done());
        assert_eq!(out, b"abc");
        assert_eq!(d.take_trailers(), b"X-Checksum: 42\r\nX-Other: a b\r\n");
        let mut plain = ChunkedDecoder::default();
        plain.decode(body, |_| {}).expect("valid");
        assert!(plain.take_trailers().is_empty());
    }

    #[test]
    fn only_passable_trailers_are_kept() {
        let raw = b"X-Checksum: 42\r\nContent-Length: 9\r\nhost: evil\r\n\
                    Authorization: Bearer x\r\nX Bad: 1\r\n: empty\r\nno colon\r\n\
                    X-Ctl: a\x01b\r\nTransfer-Encoding: chunked\r\nX-Other:   a b  \r\n";
        let kept = passable_trailers(raw).expect("some kept");
        assert_eq!(&kept[..], b"X-Checksum: 42\r\nX-Other: a b\r\n");
        assert_eq!(passable_trailers(b"Set-Cookie: a=b\r\n"), None);
        assert_eq!(passable_trailers(b""), None);
    }

    #[test]
    fn big_sizes_do_not_overflow() {
        let (out, _, done) = decode_all(b"ffffffffffffffff\r\nab", 100).expect("valid so far");
        assert_eq!(out, b"ab");
        assert!(!done);
    }
}
