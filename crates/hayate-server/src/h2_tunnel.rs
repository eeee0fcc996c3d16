//! WebSocket over HTTP/2 (RFC 8441): a stream opened with the extended
//! CONNECT (`:protocol websocket`) is sent to the upstream as an HTTP/1.1
//! upgrade, and once the upstream switches (101) the stream becomes the
//! client's side of the tunnel: its DATA frames both ways are the bytes.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use h2::{RecvStream, SendStream};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The `:protocol` of a WebSocket stream.
pub const WEBSOCKET: &str = "websocket";

/// The fields that make a WebSocket's extended CONNECT (HTTP/2's RFC
/// 8441, HTTP/3's RFC 9220) the HTTP/1.1 upgrade an upstream expects:
/// `Connection: upgrade`, `Upgrade: websocket`, and a key (the client
/// sent none; the upstream requires one).
pub fn websocket_upgrade_fields(head: &mut hayate_core::request::RequestHead) {
    head.push_field(b"connection", b"upgrade");
    head.push_field(b"upgrade", WEBSOCKET.as_bytes());
    head.push_field(b"sec-websocket-key", websocket_key().as_bytes());
}

/// A `Sec-WebSocket-Key` for the HTTP/1.1 upgrade (RFC 6455 §4.1: a
/// nonce of 16 random bytes, base64). HTTP/2 clients send none; the
/// upstream requires one. `RandomState` is seeded from the OS per
/// instance: a nonce needs no more.
pub fn websocket_key() -> String {
    let mut raw = [0u8; 16];
    for half in raw.chunks_mut(8) {
        let mut h = RandomState::new().build_hasher();
        h.write_u8(0);
        half.copy_from_slice(&h.finish().to_le_bytes());
    }
    base64(&raw)
}

fn base64(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let n =
            chunk.iter().fold(0u32, |acc, &b| acc << 8 | u32::from(b)) << (8 * (3 - chunk.len()));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A stream as a byte pipe: DATA in (its window given back as read), DATA
/// out (within the window the client grants), END_STREAM on shutdown.
pub struct StreamPipe {
    send: SendStream<Bytes>,
    recv: RecvStream,
    pending: Bytes,
}

impl StreamPipe {
    pub fn new(send: SendStream<Bytes>, recv: RecvStream) -> StreamPipe {
        StreamPipe {
            send,
            recv,
            pending: Bytes::new(),
        }
    }
}

fn broken(e: h2::Error) -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, e)
}

impl AsyncRead for StreamPipe {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.pending.is_empty() {
            match ready!(self.recv.poll_data(cx)) {
                Some(Ok(data)) => {
                    let _ = self.recv.flow_control().release_capacity(data.len());
                    self.pending = data;
                }
                Some(Err(e)) => return Poll::Ready(Err(broken(e))),
                None => return Poll::Ready(Ok(())),
            }
        }
        let n = self.pending.len().min(buf.remaining());
        let piece = self.pending.split_to(n);
        buf.put_slice(&piece);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for StreamPipe {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        self.send.reserve_capacity(buf.len());
        let granted = match ready!(self.send.poll_capacity(cx)) {
            Some(Ok(n)) => n.min(buf.len()),
            Some(Err(e)) => return Poll::Ready(Err(broken(e))),
            None => return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
        };
        let data = Bytes::copy_from_slice(&buf[..granted]);
        self.send.send_data(data, false).map_err(broken)?;
        Poll::Ready(Ok(granted))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.send.send_data(Bytes::new(), true).map_err(broken))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_16_bytes_of_base64_and_differ() {
        assert_eq!(base64(b"the sample nonce"), "dGhlIHNhbXBsZSBub25jZQ==");
        let (a, b) = (websocket_key(), websocket_key());
        assert_eq!(a.len(), 24);
        assert_ne!(a, b);
    }
}
