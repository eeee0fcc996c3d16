//! HTTP/1 body framing in either direction (RFC 9112 §6.3): a request
//! body the server reads, or a response body the proxy's client reads,
//! decoded from a buffer as bytes arrive. The caller owns the I/O: it
//! reads into the buffer when [`BodyDecoder::decode`] needs more, and
//! tells the decoder when the peer closed.

use std::io;

use bytes::{Buf, Bytes, BytesMut};

use crate::h1::chunked::ChunkedDecoder;

/// How a message body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body.
    Empty,
    /// Exactly this many bytes (Content-Length).
    Length(u64),
    /// Chunked transfer coding, with a trailer section.
    Chunked,
    /// Until the peer closes (a response only).
    UntilClose,
}

/// What [`BodyDecoder::decode`] found in the buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded {
    /// Body bytes.
    Data(Bytes),
    /// More bytes must be read first.
    NeedMore,
    /// The body is complete.
    End,
}

/// Decodes one body. Chunked trailers are kept (bounded to 16 KiB by the
/// chunk decoder) for whoever passes them on.
#[derive(Debug)]
pub struct BodyDecoder {
    framing: Framing,
    /// Bytes left of a Content-Length body.
    remaining: u64,
    chunked: ChunkedDecoder,
    /// Body bytes decoded so far.
    decoded: u64,
    done: bool,
}

impl BodyDecoder {
    /// A decoder for a body framed so.
    pub fn new(framing: Framing) -> BodyDecoder {
        BodyDecoder {
            framing,
            remaining: match framing {
                Framing::Length(n) => n,
                _ => 0,
            },
            chunked: if framing == Framing::Chunked {
                ChunkedDecoder::keeping_trailers()
            } else {
                ChunkedDecoder::default()
            },
            decoded: 0,
            done: matches!(framing, Framing::Empty | Framing::Length(0)),
        }
    }

    /// The body's framing.
    pub fn framing(&self) -> Framing {
        self.framing
    }

    /// Takes what it can from the front of `buf`: body bytes, the end, or
    /// a need for more. Bytes past the body's end stay in `buf` (the next
    /// message's).
    pub fn decode(&mut self, buf: &mut BytesMut) -> io::Result<Decoded> {
        if self.done {
            return Ok(Decoded::End);
        }
        match self.framing {
            Framing::Empty => {
                self.done = true;
                Ok(Decoded::End)
            }
            Framing::Length(_) => {
                if buf.is_empty() {
                    return Ok(Decoded::NeedMore);
                }
                let take = (buf.len() as u64).min(self.remaining) as usize;
                self.remaining -= take as u64;
                self.decoded += take as u64;
                self.done = self.remaining == 0;
                Ok(Decoded::Data(buf.split_to(take).freeze()))
            }
            Framing::Chunked => {
                if buf.is_empty() {
                    return Ok(Decoded::NeedMore);
                }
                let mut data = BytesMut::new();
                let consumed = self
                    .chunked
                    .decode(buf, |d| data.extend_from_slice(d))
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                buf.advance(consumed);
                self.decoded += data.len() as u64;
                self.done = self.chunked.is_done();
                if !data.is_empty() {
                    Ok(Decoded::Data(data.freeze()))
                } else if self.done {
                    Ok(Decoded::End)
                } else {
                    Ok(Decoded::NeedMore)
                }
            }
            Framing::UntilClose => {
                if buf.is_empty() {
                    return Ok(Decoded::NeedMore);
                }
                let data = buf.split().freeze();
                self.decoded += data.len() as u64;
                Ok(Decoded::Data(data))
            }
        }
    }

    /// The peer closed: the end of a close-delimited body, an error for
    /// any other that is not complete.
    pub fn closed(&mut self) -> io::Result<()> {
        if self.done || self.framing == Framing::UntilClose {
            self.done = true;
            return Ok(());
        }
        Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "closed mid-body",
        ))
    }

    /// Whether the whole body was decoded.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Body bytes decoded so far.
    pub fn decoded(&self) -> u64 {
        self.decoded
    }

    /// The trailer section of a chunked body, once it is complete
    /// (`Name: value\r\n` lines as received; empty if none).
    pub fn take_trailers(&mut self) -> Vec<u8> {
        self.chunked.take_trailers()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(framing: Framing, input: &[&[u8]]) -> io::Result<(Vec<u8>, bool, BytesMut)> {
        let mut d = BodyDecoder::new(framing);
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        for piece in input {
            buf.extend_from_slice(piece);
            loop {
                match d.decode(&mut buf)? {
                    Decoded::Data(b) => out.extend_from_slice(&b),
                    Decoded::NeedMore => break,
                    Decoded::End => return Ok((out, true, buf)),
                }
            }
        }
        Ok((out, d.is_done(), buf))
    }

    #[test]
    fn every_framing_in_pieces() {
        let (body, done, rest) = all(Framing::Length(5), &[b"he", b"lloGET /"]).expect("ok");
        assert_eq!(
            (&body[..], done, &rest[..]),
            (&b"hello"[..], true, &b"GET /"[..])
        );
        let (body, done, rest) = all(
            Framing::Chunked,
            &[b"3\r\nab", b"c\r\n2\r\nde\r\n0\r\nX-T: 1\r\n\r\nnext"],
        )
        .expect("ok");
        assert_eq!(
            (&body[..], done, &rest[..]),
            (&b"abcde"[..], true, &b"next"[..])
        );
        let (body, done, _) = all(Framing::UntilClose, &[b"ab", b"cd"]).expect("ok");
        assert_eq!((&body[..], done), (&b"abcd"[..], false));
        let (body, done, _) = all(Framing::Empty, &[b"x"]).expect("ok");
        assert_eq!((&body[..], done), (&b""[..], true));
        assert!(all(Framing::Chunked, &[b"zz\r\n"]).is_err());
    }

    #[test]
    fn trailers_and_closes() {
        let mut d = BodyDecoder::new(Framing::Chunked);
        let mut buf = BytesMut::from(&b"0\r\nX-Sum: 9\r\n\r\n"[..]);
        assert_eq!(d.decode(&mut buf).expect("ok"), Decoded::End);
        assert_eq!(d.take_trailers(), b"X-Sum: 9\r\n");
        let mut until_close = BodyDecoder::new(Framing::UntilClose);
        assert!(until_close.closed().is_ok() && until_close.is_done());
        let mut short = BodyDecoder::new(Framing::Length(3));
        assert_eq!(
            short.closed().map_err(|e| e.kind()),
            Err(io::ErrorKind::UnexpectedEof)
        );
    }
}
