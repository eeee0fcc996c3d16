//! The sending half of a connection: a response's head and body into the
//! write buffer or straight to the socket (small bodies copied, files by
//! sendfile, streams relayed with back-pressure, chunked when their length
//! is unknown), the access log line, and the flushes.

use std::future::Future;
use std::io::{self, IoSlice};
use std::pin::pin;
use std::task::Poll;
use std::time::Instant;

use hayate_core::bounded_writes::BoundedWrites;
use hayate_core::boxed::pinned;
use hayate_core::h1::chunked::chunk_size_line;
use hayate_core::h1::request::Request;
use hayate_core::h1::response::{self, HeadContext};
use hayate_core::response::FileRange;
use hayate_core::transport::Transport;
use hayate_core::{Attached, Body, Chunk, Response, Status, StreamBody};

use super::{client_left, noting_waits, Conn};
use crate::access_log::{self, Served};
use crate::client_io;
use crate::pipeline;
use crate::worker::Generation;

/// Bodies up to this size are copied into the write buffer with the head.
const COPY_BODY_MAX: usize = 16 * 1024;
/// Most bytes per sendfile(2) call (nginx's sendfile_max_chunk): bounds
/// how long one large response holds the worker, and measured faster on
/// loopback than one call per file.
const SENDFILE_CHUNK: usize = 2 << 20;
/// Bytes per read of a file copied to a transport without zero-copy: 64 KiB
/// is what sendfile's page-cache path moves per call on loopback too.
const COPY_FILE_CHUNK: usize = 64 * 1024;
/// Bytes of a streamed body written in one go before the connection lets
/// the worker's other tasks run. A body already whole in memory (a cache
/// fill that a hundred clients wait on) was written to each client in
/// turn, all of it, before the next client got its first byte: 1 MiB to
/// 100 clients put the last one's first byte 28-56 ms after the first's
/// (`bench/cache/coalesce.py --body-bytes 1048576`). 64 KiB, a copy of
/// some 15 µs on loopback, bounds that to about 100 × 64 KiB.
const STREAM_FAIR_SHARE: u64 = 64 * 1024;

impl Conn {
    /// Puts the response's head into the write buffer, with its body when
    /// there is none or it is small (copied, the common case), and logs such
    /// a response. A plain function: the async rest ([`Conn::finish_response`],
    /// most of a kilobyte of future) is built only for the response it hands
    /// back, whose head is already buffered.
    pub(super) fn start_response(
        &mut self,
        resp: Response,
        cx: HeadContext,
        req: &Request,
        started: Instant,
        route: Option<usize>,
    ) -> Option<Response> {
        let with_body = response::write_head(&mut self.wbuf, &resp, cx, self.clock.wall);
        let sent = match &resp.body {
            Body::Upgrade(_) => return Some(resp),
            _ if !with_body => 0,
            Body::Empty => 0,
            Body::Bytes(b) if b.len() <= COPY_BODY_MAX => {
                self.wbuf.extend_from_slice(b);
                b.len() as u64
            }
            _ => return Some(resp),
        };
        self.log_access(req, resp.status, Served::of(&resp, route), sent, started);
        None
    }

    /// Sends what [`Conn::start_response`] handed back: a large, file or
    /// streamed body, or a protocol switch.
    ///
    /// Its caller boxes it, so its size decides the allocator's path: a
    /// plain function returning an `async move` block holds its arguments
    /// once, where an async fn holds them twice (as arguments and as
    /// locals), and files are sent from a box of their own. That keeps it
    /// under glibc's per-thread cache limit (1,032 bytes): from 1,360
    /// bytes to 976, it saved 351 of a proxied request's 21,143
    /// instructions in `malloc` and `free` (bench/instructions/run).
    #[allow(clippy::manual_async_fn)] // on purpose, see above
    pub(super) fn finish_response<'a>(
        &'a mut self,
        resp: Response,
        cx: HeadContext,
        req: &'a Request,
        started: Instant,
        route: Option<usize>,
    ) -> impl Future<Output = io::Result<()>> + 'a {
        async move {
            // Named here, or the block would take only the fields it uses
            // (edition 2021's disjoint captures) and what the response
            // holds (a conn_limit slot) would go before its body is sent.
            let attached = resp.attached;
            let status = resp.status;
            // What the log takes of the response is read from it once sent,
            // not copied beside it: this future holds the response anyway,
            // and a larger one may cross glibc's limit (above).
            let served = |cache: Option<&&'static str>, attached: &Option<Attached>| Served {
                cache: cache.copied(),
                upstream: attached.as_ref().and_then(Attached::upstream_times),
                route,
            };
            if let Body::Upgrade(tunnel) = resp.body {
                let flushed = self.flush().await;
                let served = served(resp.cache_status, &attached);
                self.log_access(req, status, served, 0, started);
                flushed?;
                // Bytes the client sent after its head belong to the new protocol.
                let early = self.rbuf.split().freeze();
                // A quiet tunnel stays; one whose client stops reading
                // does not hold the connection (decision 0014).
                let send = self.worker.with_generation(|g| g.timeouts.send);
                let mut client = BoundedWrites::new(&mut self.transport, send);
                if let Err(e) = tunnel.run(&mut client, early).await {
                    log::debug!("tunnel from {} ended: {e}", self.peer);
                }
                return Ok(());
            }
            let mut sent = 0;
            let written = self.write_body(resp.body, cx.http10, &mut sent).await;
            // A body that failed midway is logged too, with what was sent.
            let served = served(resp.cache_status, &attached);
            self.log_access(req, status, served, sent, started);
            written
        }
    }

    /// Writes (or buffers) a response body, adding to `sent` the bytes of
    /// each piece written whole (of each chunk, for a stream).
    pub(super) async fn write_body(
        &mut self,
        body: Body,
        http10: bool,
        sent: &mut u64,
    ) -> io::Result<()> {
        match body {
            Body::Empty => {}
            Body::Bytes(b) => self.write_bytes(&b, sent).await?,
            // Boxed: a file's sending is as large as all the rest, and
            // costs one allocation against a sendfile(2) per piece.
            Body::File(f) => {
                pinned(|| self.send_file(&f)).await?;
                *sent += f.len;
            }
            Body::Parts(parts) => {
                for part in parts {
                    match part {
                        Chunk::Bytes(b) => self.write_bytes(&b, sent).await?,
                        Chunk::File(f) => {
                            pinned(|| self.send_file(&f)).await?;
                            *sent += f.len;
                        }
                    }
                }
            }
            Body::Stream(stream) => self.send_stream(stream, http10, sent).await?,
            Body::Upgrade(_) => unreachable!("upgrades are answered before any body"),
        }
        Ok(())
    }

    /// Writes body bytes: small ones join the write buffer, larger ones go
    /// out with it.
    pub(super) async fn write_bytes(&mut self, b: &[u8], sent: &mut u64) -> io::Result<()> {
        if b.len() <= COPY_BODY_MAX {
            self.wbuf.extend_from_slice(b);
        } else {
            self.write_with_buffer(b).await?;
        }
        *sent += b.len() as u64;
        Ok(())
    }

    /// Records one exchange in the access log and `slow_request`'s check,
    /// if either is on. Only the check is inlined into the writers: with
    /// the record's making beside it, this stopped being inlined and cost
    /// every request 22 instructions more with the log off
    /// (bench/instructions/run).
    #[inline(always)]
    pub(super) fn log_access(
        &self,
        req: &Request,
        status: Status,
        served: Served,
        bytes: u64,
        started: Instant,
    ) {
        self.worker.with_generation(|g| {
            if g.records_exchanges {
                self.record_access(g, req, status, served, bytes, started);
            }
        });
    }

    /// The record of one exchange.
    #[inline(never)]
    fn record_access(
        &self,
        g: &Generation,
        req: &Request,
        status: Status,
        served: Served,
        bytes: u64,
        started: Instant,
    ) {
        let client = pipeline::Client::new(&self.peer, self.forwarded.as_deref());
        access_log::record(
            g,
            &req.head,
            served,
            access_log::Entry {
                peer: client.addr(),
                status: status.code(),
                bytes,
                duration: started.elapsed(),
                cache: served.cache,
                tls: self.transport.tls_info(),
                upstream: served.upstream,
                route: None,
                // gRPC rides on HTTP/2 only.
                grpc_status: None,
            },
        );
    }

    /// Relays a streamed body chunk by chunk, in chunked coding when its
    /// length is unknown (close-delimited for HTTP/1.0). Each chunk is
    /// written before the next is asked for: back-pressure reaches the
    /// producer. An error mid-body ends the connection, so the client sees
    /// an incomplete response rather than a wrong one. `sent` counts the
    /// body bytes written, also when it fails.
    pub(super) async fn send_stream(
        &mut self,
        mut body: StreamBody,
        http10: bool,
        sent: &mut u64,
    ) -> io::Result<()> {
        let chunked = body.len.is_none() && !http10;
        // While the producer waits, a client that closes is seen (a plain
        // socket only; read ahead stops at the first bytes, a pipelined
        // request, kept for the connection loop): the body is dropped, and
        // with it the upstream's work (a FastCGI script is aborted).
        let mut watch = !matches!(self.transport, Transport::Tls(_));
        let mut since_yield = 0u64;
        loop {
            if since_yield >= STREAM_FAIR_SHARE {
                tokio::task::yield_now().await;
                since_yield = 0;
            }
            let mut waited = false;
            let (transport, rbuf) = (&mut self.transport, &mut self.rbuf);
            let next = noting_waits(
                pin!(std::future::poll_fn(|cx| {
                    let chunk = body.source.poll_chunk(cx);
                    if chunk.is_pending() && watch {
                        match client_left(transport, rbuf, cx) {
                            Poll::Ready(true) => {
                                return Poll::Ready(Err(io::Error::new(
                                    io::ErrorKind::ConnectionAborted,
                                    "the client left mid-response",
                                )))
                            }
                            Poll::Ready(false) => watch = false,
                            Poll::Pending => {}
                        }
                    }
                    chunk
                })),
                &mut waited,
            )
            .await;
            self.clock_stale |= waited;
            if waited {
                since_yield = 0;
            }
            match next {
                Ok(Some(data)) if data.is_empty() => {}
                Ok(Some(data)) => {
                    since_yield += data.len() as u64;
                    if chunked {
                        let mut line = [0u8; 18];
                        self.wbuf
                            .extend_from_slice(chunk_size_line(data.len(), &mut line));
                    }
                    self.write_with_buffer(&data).await?;
                    *sent += data.len() as u64;
                    if chunked {
                        self.wbuf.extend_from_slice(b"\r\n");
                    }
                }
                Ok(None) => {
                    if chunked {
                        self.wbuf.extend_from_slice(b"0\r\n");
                        if let Some(trailers) = body.source.trailers() {
                            self.wbuf.extend_from_slice(&trailers);
                        }
                        self.wbuf.extend_from_slice(b"\r\n");
                    }
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::ConnectionAborted => {
                    log::debug!("{e} after {sent} bytes ({})", self.peer);
                    return Err(e);
                }
                Err(e) => {
                    log::error!("response body from upstream failed after {sent} bytes: {e}");
                    return Err(e);
                }
            }
        }
    }

    /// Writes the buffered bytes, then `data`, with vectored writes.
    pub(super) async fn write_with_buffer(&mut self, data: &[u8]) -> io::Result<()> {
        let mut head_done = 0;
        let mut data_done = 0;
        while head_done < self.wbuf.len() || data_done < data.len() {
            let bufs = [
                IoSlice::new(&self.wbuf[head_done..]),
                IoSlice::new(&data[data_done..]),
            ];
            match self.transport.try_write_vectored(&bufs) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(mut n) => {
                    let h = n.min(self.wbuf.len() - head_done);
                    head_done += h;
                    n -= h;
                    data_done += n;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.wait_writable().await?,
                Err(e) => return Err(e),
            }
        }
        self.wbuf.clear();
        Ok(())
    }

    /// Sends a file range with sendfile(2), after the buffered head.
    pub(super) async fn send_file(&mut self, f: &FileRange) -> io::Result<()> {
        // Corked, the head joins the first segment of file data and every
        // segment leaves full-sized (nginx's tcp_nopush).
        self.transport.set_cork(true);
        let sent = self.send_file_corked(f).await;
        self.transport.set_cork(false);
        sent
    }

    pub(super) async fn send_file_corked(&mut self, f: &FileRange) -> io::Result<()> {
        self.flush().await?;
        let mut offset =
            i64::try_from(f.offset).map_err(|_| io::Error::other("file offset too large"))?;
        let end =
            offset + i64::try_from(f.len).map_err(|_| io::Error::other("file range too large"))?;
        while offset < end {
            let count = usize::try_from(end - offset)
                .unwrap_or(usize::MAX)
                .min(SENDFILE_CHUNK);
            match self.transport.try_sendfile(&f.file, &mut offset, count) {
                // The file shrank under us: the promised length cannot be met.
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "file truncated while sending",
                    ))
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.wait_writable().await?,
                Err(e) if e.kind() == io::ErrorKind::Unsupported => {
                    return self.copy_file(f, offset, end).await
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Sends bytes `offset..end` of a file through the write buffer, for a
    /// transport that cannot take them with zero-copy.
    pub(super) async fn copy_file(
        &mut self,
        f: &FileRange,
        mut offset: i64,
        end: i64,
    ) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        let mut buf = vec![0; COPY_FILE_CHUNK];
        while offset < end {
            let want = usize::try_from(end - offset)
                .unwrap_or(usize::MAX)
                .min(buf.len());
            let n = f.file.read_at(&mut buf[..want], offset as u64)?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "file truncated while sending",
                ));
            }
            self.write_with_buffer(&buf[..n]).await?;
            offset += n as i64;
        }
        Ok(())
    }

    /// Writes what the client takes of the write buffer without waiting.
    /// True when all of it is written (the common case, with no future to
    /// build and move as [`Conn::flush`] has).
    pub(super) fn flush_now(&mut self) -> io::Result<bool> {
        client_io::write_now(&mut self.transport, &mut self.wbuf)
    }

    /// Writes the whole write buffer.
    pub(super) async fn flush(&mut self) -> io::Result<()> {
        if self.flush_now()? {
            return Ok(());
        }
        // The client reads slowly: the wait (a timer, hundreds of bytes of
        // future) is boxed, so it does not enlarge every connection's task.
        Box::pin(async {
            while !self.flush_now()? {
                self.wait_writable().await?;
            }
            Ok(())
        })
        .await
    }

    /// Waits until the client can take more bytes, within the send timeout.
    pub(super) async fn wait_writable(&mut self) -> io::Result<()> {
        self.clock_stale = true;
        let send = self.worker.with_generation(|g| g.timeouts.send);
        client_io::writable(&self.transport, send).await
    }
}
