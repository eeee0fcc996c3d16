//! A request stream's response out: HEADERS, then the body as DATA frames
//! written as QUIC's flow control lets them go (a write waits while the
//! client's stream or connection window is shut), then trailers.
//!
//! Files are read [`FILE_CHUNK`] at a time, and a proxied body goes out as
//! it arrives: nothing is buffered whole. Each write waits at most the send
//! timeout, as HTTP/1 and HTTP/2 wait for a client that does not read; the
//! stream is then reset.

use std::time::Duration;

use bytes::Bytes;
use h3::error::{Code, StreamError};
use h3::server::RequestStream;
use hayate_core::response::FileRange;
use hayate_core::{Body, Chunk, Response};

use crate::http_map::{trailer_map, HeadFields, Sent};

/// A request stream's sending half.
pub(super) type Send = RequestStream<h3_quinn::SendStream<Bytes>, Bytes>;

/// Bytes of a file read per DATA frame, and the most of any body written
/// in one: the send timeout bounds each write.
const FILE_CHUNK: usize = 64 * 1024;

/// Why a response stopped before its end.
#[derive(Debug)]
pub(super) enum Stopped {
    /// The stream or connection failed (the client reset it, or left).
    Stream(StreamError),
    /// The client took no bytes for the send timeout.
    SendTimeout(Duration),
}

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stopped::Stream(e) => write!(f, "{e}"),
            Stopped::SendTimeout(t) => {
                write!(f, "the client took no bytes for {t:?} (send_timeout)")
            }
        }
    }
}

impl From<StreamError> for Stopped {
    fn from(e: StreamError) -> Stopped {
        Stopped::Stream(e)
    }
}

/// Sends a response: HEADERS (with Date, Server and the length when known),
/// then the body, then trailers, and ends the stream. `sent` counts the
/// body bytes written and notes a gRPC call's status.
pub(super) async fn send(
    out: &mut Send,
    response: Response,
    head_request: bool,
    send_timeout: Duration,
    sent: &mut Sent,
) -> Result<(), Stopped> {
    sent.note_grpc_head(&response.fields);
    let body_allowed = !response.status.forbids_body();
    let fields = HeadFields::new(&response, body_allowed);
    let status = http::StatusCode::from_u16(response.status.code());
    match (fields.invalid(), status) {
        (None, Ok(status)) => out.send_response_fields(status, || fields.iter()).await?,
        (invalid, _) => {
            match invalid {
                Some(name) => log::error!(
                    "response head not valid for HTTP/3: field {:?}",
                    String::from_utf8_lossy(name)
                ),
                None => log::error!(
                    "response head not valid for HTTP/3: status {}",
                    response.status.code()
                ),
            }
            out.send_response_fields(http::StatusCode::BAD_GATEWAY, std::iter::empty)
                .await?;
            return Ok(out.finish().await?);
        }
    }
    if !body_allowed || head_request {
        return Ok(out.finish().await?);
    }
    let mut writer = Writer {
        out,
        send_timeout,
        sent,
    };
    match response.body {
        Body::Empty | Body::Upgrade(_) => {}
        Body::Bytes(b) => writer.bytes(b).await?,
        Body::File(f) => writer.file(&f).await?,
        Body::Parts(parts) => {
            for part in parts {
                match part {
                    Chunk::Bytes(b) => writer.bytes(b).await?,
                    Chunk::File(f) => writer.file(&f).await?,
                }
            }
        }
        Body::Stream(mut stream) => loop {
            match std::future::poll_fn(|cx| stream.source.poll_chunk(cx)).await {
                Ok(Some(data)) => writer.bytes(data).await?,
                Ok(None) => {
                    if let Some(trailers) = stream.source.trailers() {
                        writer.sent.note_grpc_trailers(&trailers);
                        writer.out.send_trailers(trailer_map(&trailers)).await?;
                    }
                    break;
                }
                Err(e) => {
                    let sent = writer.sent.bytes;
                    log::error!("response body from upstream failed after {sent} bytes: {e}");
                    writer.out.stop_stream(Code::H3_INTERNAL_ERROR);
                    return Ok(());
                }
            }
        },
    }
    Ok(writer.out.finish().await?)
}

/// Writes a body's pieces on a stream.
struct Writer<'a> {
    out: &'a mut Send,
    send_timeout: Duration,
    sent: &'a mut Sent,
}

impl Writer<'_> {
    /// Sends `data`, at most [`FILE_CHUNK`] per write, each within the
    /// send timeout.
    async fn bytes(&mut self, mut data: Bytes) -> Result<(), Stopped> {
        while !data.is_empty() {
            let piece = data.split_to(data.len().min(FILE_CHUNK));
            let len = piece.len() as u64;
            match tokio::time::timeout(self.send_timeout, self.out.send_data(piece)).await {
                Ok(written) => written?,
                Err(_) => {
                    self.out.stop_stream(Code::H3_REQUEST_CANCELLED);
                    return Err(Stopped::SendTimeout(self.send_timeout));
                }
            }
            self.sent.bytes += len;
        }
        Ok(())
    }

    /// Sends a range of a file, read a chunk at a time as the client takes
    /// them.
    async fn file(&mut self, f: &FileRange) -> Result<(), Stopped> {
        for piece in f.pieces(FILE_CHUNK) {
            let Ok(piece) = piece else {
                log::error!("file read failed while sending it over HTTP/3");
                self.out.stop_stream(Code::H3_INTERNAL_ERROR);
                return Ok(());
            };
            self.bytes(piece).await?;
        }
        Ok(())
    }
}
