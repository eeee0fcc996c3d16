//! Bodies carried by HTTP/2 streams, as hayate's model takes them: a
//! received stream's DATA then trailers as a [`BodySource`] (an upstream's
//! response, or a client's request body handed to an upstream), and
//! trailer sections between HTTP/2's field maps and hayate's
//! `Name: value\r\n` lines. Shared by the server's HTTP/2 connections and
//! the HTTP/2 upstream client.

use std::io;
use std::task::{Context, Poll};

use bytes::Bytes;
use h2::RecvStream;
use hayate_core::response::BodySource;

use crate::hop_by_hop::is_hop_by_hop;

/// A received stream's body: DATA as it comes (its window given back as
/// it is taken, so a slow reader slows the sender), then its trailers.
/// Bounded to `max` bytes; no idle timeout of its own (a streaming call may
/// be quiet for minutes: a client's reset or the stream's end ends it).
/// `keep` lives as long as the body (what counts the stream as open).
pub struct RecvBody<K = ()> {
    recv: RecvStream,
    read: u64,
    max: u64,
    trailers: Option<Bytes>,
    data_done: bool,
    _keep: K,
}

impl<K> RecvBody<K> {
    /// The body of `recv`, of which `read` bytes were read already, bounded
    /// to `max` bytes in all.
    pub fn new(recv: RecvStream, read: u64, max: u64, keep: K) -> RecvBody<K> {
        RecvBody {
            recv,
            read,
            max,
            trailers: None,
            data_done: false,
            _keep: keep,
        }
    }
}

impl<K> BodySource for RecvBody<K> {
    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Option<Bytes>>> {
        if !self.data_done {
            match std::task::ready!(self.recv.poll_data(cx)) {
                Some(Ok(data)) => {
                    self.read += data.len() as u64;
                    if self.read > self.max {
                        return Poll::Ready(Err(io::Error::new(
                            io::ErrorKind::InvalidInput,
                            "body too large",
                        )));
                    }
                    let _ = self.recv.flow_control().release_capacity(data.len());
                    return Poll::Ready(Ok(Some(data)));
                }
                Some(Err(e)) => return Poll::Ready(Err(stream_error(e))),
                None => self.data_done = true,
            }
        }
        match std::task::ready!(self.recv.poll_trailers(cx)) {
            Ok(Some(trailers)) => self.trailers = Some(field_lines(&trailers)),
            Ok(None) => {}
            Err(e) => return Poll::Ready(Err(stream_error(e))),
        }
        Poll::Ready(Ok(None))
    }

    fn trailers(&mut self) -> Option<Bytes> {
        self.trailers.take()
    }
}

/// A stream's failure as an I/O error: a reset (by the peer, or by h2
/// for a protocol error) or its connection's failure.
fn stream_error(e: h2::Error) -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionAborted, e)
}

/// Fields as HTTP/1 lines (`Name: value\r\n`), the form trailers take in
/// hayate's model.
pub fn field_lines(fields: &http::HeaderMap) -> Bytes {
    let mut out = Vec::new();
    for (name, value) in fields {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.into()
}

/// A trailer section's `Name: value\r\n` lines as HTTP/2 fields, without
/// those that only mean something to one connection (RFC 9113 §8.2.2),
/// which h2 refuses to send; a line that is not a valid field is dropped.
pub fn trailer_map(lines: &[u8]) -> http::HeaderMap {
    let mut map = http::HeaderMap::new();
    for line in lines.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let name = http::HeaderName::from_bytes(&line[..colon]);
        let value = http::HeaderValue::from_bytes(hayate_core::field::trim_ows(&line[colon + 1..]));
        if let (Ok(name), Ok(value)) = (name, value) {
            if !is_hop_by_hop(name.as_str().as_bytes()) {
                map.append(name, value);
            }
        }
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trailers_go_both_ways_without_connection_fields() {
        let map = trailer_map(b"grpc-status: 0\r\ngrpc-message: ok%20done\r\nTE: trailers\r\nbroken\r\nx-bin: AAE=\r\n");
        assert_eq!(map.len(), 3);
        assert_eq!(map["grpc-status"], "0");
        assert!(map.get("te").is_none(), "connection-specific");
        assert_eq!(
            &field_lines(&map)[..],
            b"grpc-status: 0\r\ngrpc-message: ok%20done\r\nx-bin: AAE=\r\n"
        );
    }
}
