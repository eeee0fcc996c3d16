//! WebSocket over HTTP/3 (RFC 9220): a request stream opened with the
//! extended CONNECT (`:protocol websocket`, offered by SETTINGS) goes to
//! the upstream as HTTP/1.1's upgrade, as HTTP/2's does (`h2_tunnel.rs`),
//! and once the upstream switched the stream carries the WebSocket's
//! bytes in its DATA frames both ways ([`StreamPipe`]).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes};
use h3::error::StreamError;
use h3::server::RequestStream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

type Send = RequestStream<h3_quinn::SendStream<Bytes>, Bytes>;
type Recv = RequestStream<h3_quinn::RecvStream, Bytes>;

/// What a write in flight gives back: the stream, and how it went.
type Sending = Pin<Box<dyn Future<Output = (Send, Result<(), StreamError>)>>>;

/// A request stream as a byte pipe: DATA in (QUIC gives the window back as
/// it is read), DATA out (one write in flight at a time: h3 sends within
/// the window the client grants), FIN on shutdown.
pub(super) struct StreamPipe {
    /// `None` while a write holds it.
    send: Option<Send>,
    sending: Option<Sending>,
    recv: Recv,
    pending: Bytes,
}

impl StreamPipe {
    pub(super) fn new(send: Send, recv: Recv) -> StreamPipe {
        StreamPipe {
            send: Some(send),
            sending: None,
            recv,
            pending: Bytes::new(),
        }
    }

    /// Completes the write in flight, if any.
    fn poll_sent(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Some(sending) = self.sending.as_mut() {
            let (send, sent) = ready!(sending.as_mut().poll(cx));
            self.sending = None;
            self.send = Some(send);
            sent.map_err(broken)?;
        }
        Poll::Ready(Ok(()))
    }
}

fn broken(e: StreamError) -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, e.to_string())
}

impl AsyncRead for StreamPipe {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.pending.is_empty() {
            match ready!(self.recv.poll_recv_data(cx)) {
                Ok(Some(mut data)) => self.pending = data.copy_to_bytes(data.remaining()),
                Ok(None) => return Poll::Ready(Ok(())),
                Err(e) => return Poll::Ready(Err(broken(e))),
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
        ready!(self.poll_sent(cx))?;
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let Some(mut send) = self.send.take() else {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        };
        let data = Bytes::copy_from_slice(buf);
        self.sending = Some(Box::pin(async move {
            let sent = send.send_data(data).await;
            (send, sent)
        }));
        // Taken: it leaves with the next poll (here, or at the next write
        // or flush), whose failure that call reports.
        let _ = self.poll_sent(cx)?;
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_sent(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_sent(cx))?;
        let Some(mut send) = self.send.take() else {
            return Poll::Ready(Ok(()));
        };
        self.sending = Some(Box::pin(async move {
            let finished = send.finish().await;
            (send, finished)
        }));
        self.poll_sent(cx)
    }
}
