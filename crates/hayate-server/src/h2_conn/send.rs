//! A stream's response out: HEADERS, then the body as DATA within the
//! client's flow-control window, then trailers.
//!
//! A window the client keeps shut is waited for at most the send timeout,
//! as HTTP/1 waits for a socket the client does not read (`conn/send.rs`;
//! nginx's `send_timeout` covers an HTTP/2 stream's exhausted window the
//! same way): a client that stopped reading one download never returns
//! WINDOW_UPDATEs, and without the bound its stream, the response it holds
//! and the connection under it were kept for good. The wait is on the
//! worker's deadline slots, armed only when the window is found shut.

use std::future::poll_fn;
use std::io;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use h2::server::SendResponse;
use h2::SendStream;
use hayate_core::deadline::within;
use hayate_core::response::{BodySource, FileRange};
use hayate_core::{Body, Chunk, Response, Status};

use crate::http_map::{response_head, trailer_map, Sent};

/// Bytes of a file read per DATA write.
const FILE_CHUNK: usize = 64 * 1024;

/// Sends a response: HEADERS (with Date, Server and the length when known),
/// then the body within the client's window, then trailers. `sent` counts
/// the body bytes written.
pub(super) async fn send(
    mut respond: SendResponse<Bytes>,
    response: Response,
    head_request: bool,
    send_timeout: Duration,
    sent: &mut Sent,
) -> Result<(), h2::Error> {
    sent.note_grpc_head(&response.fields);
    let sent_bytes = &mut sent.bytes;
    let body_allowed = !response.status.forbids_body();
    let head = response_head(&response, body_allowed);
    let head = match head.body(()) {
        Ok(h) => h,
        Err(e) => {
            log::error!("response head not valid for HTTP/2: {e}");
            let fallback = http::Response::builder()
                .status(Status::BAD_GATEWAY.code())
                .body(())
                .expect("a bare status");
            respond.send_response(fallback, true)?;
            return Ok(());
        }
    };
    let no_body = !body_allowed || head_request || matches!(response.body, Body::Empty);
    let mut out = respond.send_response(head, no_body)?;
    if no_body {
        return Ok(());
    }
    // What a streamed body's source gave past the last frame: its end, a
    // failure, or a piece the frame had no room for.
    let mut after = None;
    match response.body {
        Body::Empty | Body::Upgrade(_) => {}
        Body::Bytes(b) => send_bytes(&mut out, b, send_timeout, sent_bytes).await?,
        Body::File(f) => send_file(&mut out, &f, send_timeout, sent_bytes).await?,
        Body::Parts(parts) => {
            for part in parts {
                match part {
                    Chunk::Bytes(b) => send_bytes(&mut out, b, send_timeout, sent_bytes).await?,
                    Chunk::File(f) => send_file(&mut out, &f, send_timeout, sent_bytes).await?,
                }
            }
        }
        Body::Stream(mut stream) => loop {
            // A client that resets the stream while the upstream is quiet
            // (a gRPC server stream between messages) ends it now: the
            // source is dropped, and the upstream's stream cancelled.
            let mut pieces = Gathered {
                source: &mut *stream.source,
                after: &mut after,
            };
            let next = poll_fn(|cx| match out.poll_reset(cx) {
                Poll::Ready(reset) => Poll::Ready(Err(reset)),
                Poll::Pending => pieces.poll_next(cx).map(Ok),
            });
            let next = match next.await {
                Ok(next) => next,
                Err(reset) => {
                    let why = reset.map_or_else(|e| e.to_string(), |r| format!("{r:?}"));
                    log::debug!("HTTP/2 stream reset by the client ({why}) during a streamed body");
                    return Ok(());
                }
            };
            match next {
                Ok(Some(data)) => send_bytes(&mut out, data, send_timeout, sent_bytes).await?,
                Ok(None) => {
                    if let Some(trailers) = stream.source.trailers() {
                        sent.note_grpc_trailers(&trailers);
                        return out.send_trailers(trailer_map(&trailers));
                    }
                    break;
                }
                Err(e) => {
                    // An upstream's reset reaches the client with its code
                    // (CANCEL stays CANCEL for a gRPC client); any other
                    // failure is hayate's INTERNAL_ERROR.
                    let reset = e
                        .get_ref()
                        .and_then(|inner| inner.downcast_ref::<h2::Error>())
                        .filter(|h2| h2.is_reset() && h2.is_remote())
                        .and_then(h2::Error::reason);
                    match reset {
                        Some(reason) => log::info!(
                            "response body from upstream reset ({reason:?}) after {sent_bytes} bytes"
                        ),
                        None => log::error!(
                            "response body from upstream failed after {sent_bytes} bytes: {e}"
                        ),
                    }
                    out.send_reset(reset.unwrap_or(h2::Reason::INTERNAL_ERROR));
                    return Ok(());
                }
            }
        },
    }
    out.send_data(Bytes::new(), true)
}

/// Most bytes of a streamed body gathered into one DATA frame: h2's
/// largest frame by default (RFC 9113 §4.2, SETTINGS_MAX_FRAME_SIZE).
const GATHER: usize = 16 * 1024;

/// A streamed body's pieces, those that are ready together sent as one:
/// an upstream's gRPC messages that arrived in one read become one DATA
/// frame for the client, not one each (h2's work is per frame on both
/// connections). Nothing is waited for: a piece alone goes out alone.
struct Gathered<'s> {
    source: &'s mut dyn BodySource,
    /// For the next call: the end or the failure the source reported while
    /// pieces were being gathered, or a piece the frame had no room for.
    after: &'s mut Option<io::Result<Option<Bytes>>>,
}

impl Gathered<'_> {
    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Option<Bytes>>> {
        let first = match self.after.take() {
            // A piece the last frame had no room for starts this one.
            Some(Ok(Some(held))) => held,
            Some(other) => return Poll::Ready(other),
            None => match std::task::ready!(self.source.poll_chunk(cx)) {
                Ok(Some(first)) => first,
                other => return Poll::Ready(other),
            },
        };
        if first.len() >= GATHER {
            return Poll::Ready(Ok(Some(first)));
        }
        // Never past GATHER: the buffer is allocated once at its size
        // (grown past it, it was reallocated and copied, and its fresh
        // pages faulted in: ~5 % of a gRPC stream's CPU, perf), and a
        // frame past the client's largest would be cut in two anyway.
        let mut gathered = BytesMut::new();
        loop {
            match self.source.poll_chunk(cx) {
                Poll::Ready(Ok(Some(more))) => {
                    let len = first.len().max(gathered.len());
                    if len + more.len() > GATHER {
                        *self.after = Some(Ok(Some(more)));
                        break;
                    }
                    if gathered.is_empty() {
                        gathered.reserve(GATHER);
                        gathered.extend_from_slice(&first);
                    }
                    gathered.extend_from_slice(&more);
                }
                Poll::Ready(other) => {
                    *self.after = Some(other);
                    break;
                }
                Poll::Pending => break,
            }
        }
        Poll::Ready(Ok(Some(match gathered.is_empty() {
            true => first,
            false => gathered.freeze(),
        })))
    }
}

/// Sends `data` as the client's window allows: never more buffered than
/// the window it granted.
async fn send_bytes(
    out: &mut SendStream<Bytes>,
    mut data: Bytes,
    send_timeout: Duration,
    sent: &mut u64,
) -> Result<(), h2::Error> {
    while !data.is_empty() {
        out.reserve_capacity(data.len());
        let granted = match window(out, send_timeout).await {
            Some(granted) => granted?,
            None => return Err(h2::Error::from(h2::Reason::CANCEL)),
        };
        let piece = data.split_to(granted.min(data.len()));
        *sent += piece.len() as u64;
        out.send_data(piece, false)?;
    }
    Ok(())
}

/// The room h2 grants `out` (`poll_capacity`), waiting at most
/// `send_timeout` once the client's window is found shut; then the stream
/// is reset (CANCEL) and `None` ends the response.
async fn window(
    out: &mut SendStream<Bytes>,
    send_timeout: Duration,
) -> Option<Result<usize, h2::Error>> {
    // Polled once without a deadline: the window is open most of the time.
    if let Poll::Ready(granted) = poll_fn(|cx| Poll::Ready(out.poll_capacity(cx))).await {
        return granted;
    }
    let until = hayate_core::loop_time::instant() + send_timeout;
    match within(until, poll_fn(|cx| out.poll_capacity(cx))).await {
        Ok(granted) => granted,
        Err(_) => {
            log::debug!(
                "HTTP/2 stream reset: its window stayed shut for {send_timeout:?} (send_timeout)"
            );
            out.send_reset(h2::Reason::CANCEL);
            None
        }
    }
}

/// Sends a range of a file, read a chunk at a time as the window opens.
async fn send_file(
    out: &mut SendStream<Bytes>,
    f: &FileRange,
    send_timeout: Duration,
    sent: &mut u64,
) -> Result<(), h2::Error> {
    for piece in f.pieces(FILE_CHUNK) {
        let Ok(piece) = piece else {
            log::error!("file read failed while sending it over HTTP/2");
            out.send_reset(h2::Reason::INTERNAL_ERROR);
            return Ok(());
        };
        send_bytes(out, piece, send_timeout, sent).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    /// A body whose pieces are all ready, then its end.
    struct Ready(VecDeque<Bytes>);

    impl BodySource for Ready {
        fn poll_chunk(&mut self, _: &mut Context<'_>) -> Poll<io::Result<Option<Bytes>>> {
            Poll::Ready(Ok(self.0.pop_front()))
        }
    }

    /// The frames `Gathered` makes of `pieces`, all ready at once.
    fn frames(pieces: &[usize]) -> Vec<usize> {
        let all = pieces.iter().enumerate();
        let mut source = Ready(all.map(|(i, &n)| Bytes::from(vec![i as u8; n])).collect());
        let mut after = None;
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut out = Vec::new();
        let mut bytes = Vec::new();
        loop {
            let mut gathered = Gathered {
                source: &mut source,
                after: &mut after,
            };
            match gathered.poll_next(&mut cx) {
                Poll::Ready(Ok(Some(frame))) => {
                    out.push(frame.len());
                    bytes.extend_from_slice(&frame);
                }
                Poll::Ready(Ok(None)) => break,
                other => panic!("{other:?}"),
            }
        }
        let want: Vec<u8> = pieces
            .iter()
            .enumerate()
            .flat_map(|(i, &n)| std::iter::repeat_n(i as u8, n))
            .collect();
        assert_eq!(bytes, want, "every byte, in order");
        out
    }

    #[test]
    fn ready_pieces_fill_frames_up_to_gather_and_never_past_it() {
        // gRPC's 1 KiB messages: sixteen to a frame.
        assert_eq!(frames(&[1024; 40]), [16 * 1024, 16 * 1024, 8 * 1024]);
        // A piece that would overflow a frame starts the next one.
        assert_eq!(frames(&[10_000, 10_000, 10_000]), [10_000, 10_000, 10_000]);
        assert_eq!(frames(&[6_000, 6_000, 6_000]), [12_000, 6_000]);
        // A piece as large as a frame goes alone, as it came.
        assert_eq!(frames(&[100, GATHER, 100]), [100, GATHER, 100]);
        assert_eq!(frames(&[]), Vec::<usize>::new());
    }
}
