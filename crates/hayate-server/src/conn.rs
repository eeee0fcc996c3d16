//! One client connection: read a head, answer it, repeat while the
//! connection is kept alive (the sending half, heads, bodies and flushes,
//! is `conn/send.rs`). Pipelined requests are answered in order, and
//! their responses leave in as few writes as possible (the write buffer is
//! flushed only when no complete request is waiting).
//!
//! Every wait has a bound: the first byte of a request (keep-alive timeout),
//! the rest of its head (header timeout → 408), each read of a body (body
//! timeout), each write (send timeout).

use std::future::Future;
use std::io::{self};
use std::pin::{pin, Pin};
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use hayate_core::boxed::pinned;
use hayate_core::error::Error;
use hayate_core::{Body, Response, Status};

use crate::client_io::{self, Clock, Room};
use crate::conn_body::{BodyState, ConnBody};
use crate::pipeline::{self, Answer};
use crate::policy::ForwardedClient;
use crate::worker::Worker;
use hayate_core::client_body::ClientBody;
use hayate_core::deadline::{Deadline, Expired};
use hayate_core::h1::request::{self, Parsed, Refusal, Request, Spare};
use hayate_core::h1::response::{self, HeadContext};
use hayate_core::transport::{Peer, Scheme, Transport};

mod send;

/// Buffered pipelined responses that force a write.
const WRITE_BUFFER_FLUSH: usize = 64 * 1024;
/// First read buffer of a connection: most request heads fit (wrk's are 40
/// bytes, browsers' 0.5-1.5 KiB). Idle connections hold none (`buffers.rs`).
const FIRST_READ: usize = 2 * 1024;
/// Read buffer growth step.
const READ_CHUNK: usize = 8 * 1024;
/// How reads between requests make room.
const HEAD_ROOM: Room = Room {
    first: FIRST_READ,
    min_spare: 512,
    grow: READ_CHUNK,
};
/// How long, and how much, a closing connection drains before it is
/// dropped (so the kernel does not reset it under the last response).
const LINGER_TIME: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 1 << 20;
/// How long, at shutdown, a connection that has sent nothing yet waits for
/// its first request (`first_request_at_shutdown`). A request trails its
/// connection's handshake by the client's own step, not a round trip (the
/// client sends once its connect returns); one second is a bound chosen far
/// above that, not a measurement, and is all that a socket a browser
/// preconnected and holds unused adds to a drain.
const FIRST_REQUEST_AT_SHUTDOWN: Duration = Duration::from_secs(1);

/// Why the connection loop ended.
#[derive(Debug)]
enum End {
    /// Closed cleanly (EOF, idle timeout, shutdown, Connection: close).
    Done,
    /// Closed after an error response; drain before dropping.
    Linger,
    /// The client opened with HTTP/2's preface (h2c with prior knowledge).
    Http2,
}

/// A client connection and its buffers (reused across requests).
pub struct Conn {
    transport: Transport,
    peer: Peer,
    /// What the listener's clients speak.
    scheme: Scheme,
    worker: Rc<Worker>,
    /// This connection's slot in the worker's deadlines.
    deadline: Deadline,
    rbuf: BytesMut,
    wbuf: Vec<u8>,
    spare: Spare,
    /// When the last read returned: the time of every request it carried.
    clock: Clock,
    /// The connection waited for something other than a client read since
    /// `clock` was read (a handler, a write, a streamed body): the clock
    /// catches up before it is used again.
    clock_stale: bool,
    served: u64,
    /// The client a trusted proxy named for the request in progress
    /// (identify); `None`: the peer is the client. Boxed: an idle
    /// connection keeps 8 bytes for it, not 72.
    forwarded: Option<Box<ForwardedClient>>,
}

enum Read {
    Data,
    Eof,
    Timeout,
    Shutdown,
}

impl Conn {
    /// Wraps an accepted socket.
    pub fn new(transport: Transport, peer: Peer, scheme: Scheme, worker: Rc<Worker>) -> Conn {
        let deadline = worker.deadlines.slot();
        Conn {
            transport,
            peer,
            scheme,
            worker,
            deadline,
            rbuf: BytesMut::new(),
            wbuf: Vec::new(),
            spare: Spare::default(),
            clock: Clock::current(),
            clock_stale: false,
            served: 0,
            forwarded: None,
        }
    }

    /// Serves the connection until it closes; its buffers go back to the
    /// worker's pool.
    pub async fn run(&mut self) {
        match self.serve().await {
            Ok(End::Done) => {}
            // Boxed, like every rare wait: the task's future is as large as
            // its largest state, and idle connections hold all of it.
            Ok(End::Linger) => Box::pin(self.linger()).await,
            Ok(End::Http2) => {
                let pre = Bytes::copy_from_slice(&self.rbuf);
                // HTTP/1's buffers are not needed for the connection's life.
                self.rbuf.clear();
                self.wbuf.clear();
                let pool = &self.worker.buffers;
                pool.lend(&mut self.rbuf, &mut self.wbuf, &mut self.spare);
                let io = crate::h2_conn::Prefixed {
                    pre,
                    io: &mut self.transport,
                };
                let (peer, worker) = (self.peer.clone(), self.worker.clone());
                Box::pin(crate::h2_conn::serve(io, peer, self.scheme, None, worker)).await;
            }
            Err(e) => log::debug!("connection from {} ended: {e}", self.peer),
        }
        // The next connection takes them (one per request when clients
        // close after each).
        self.rbuf.clear();
        self.wbuf.clear();
        let pool = &self.worker.buffers;
        pool.lend(&mut self.rbuf, &mut self.wbuf, &mut self.spare);
    }

    async fn serve(&mut self) -> io::Result<End> {
        loop {
            let req = match self.next_request().await? {
                Ok(req) => req,
                Err(end) => return Ok(end),
            };
            if let Some(end) = self.exchange(req).await? {
                return Ok(end);
            }
        }
    }

    /// Answers one request. `Some` ends the connection, how it says.
    ///
    /// A future of its own, apart from [`Conn::next_request`]'s: the task
    /// of every connection, idle ones included, is as large as the largest
    /// state of its future, and the two never coexist. Every rare wait in
    /// here (an upstream, a large or streamed body, a body to drain) is
    /// boxed for the same reason; a file or cached answer waits for none.
    /// An async block rather than an async fn, whose future would hold a
    /// second copy of the request.
    #[allow(clippy::manual_async_fn)] // on purpose, see above
    fn exchange(&mut self, mut req: Request) -> impl Future<Output = io::Result<Option<End>>> + '_ {
        async move {
            let started = self.clock.now;
            // This request's generation to its end, even across a reload.
            let w = self.worker.generation();
            // Identify: who the client is, once for the whole exchange.
            // The previous request's answer, if any, lends its memory.
            self.forwarded = w
                .router
                .client_of(&req.head, &self.peer, self.forwarded.take());
            let mut body = BodyState::new(
                req.framing,
                req.expect_continue,
                w.head_limits.max_body_size,
                w.timeouts.body,
            );
            let mut waited = false;
            // What holds the response (the answer, the response, what is
            // left to send) lives in this block and is moved whole into
            // what waits on it: the future keeps none of it across a wait.
            let (upgraded, keep_alive, cx, rest, route) = {
                let client = pipeline::Client::new(&self.peer, self.forwarded.as_deref());
                if let Some(tracer) = &w.tracer {
                    req.head.trace = Some(tracer.start(&req.head));
                }
                let answer = match pipeline::rewrite(&mut req.head, &w.router, started, client) {
                    Some(answered) => Answer::Now(answered, None),
                    None => pipeline::answer(&req.head, &w.router, started, client),
                };
                let (resp, route) = match answer {
                    Answer::Now(resp, route) => (resp, route),
                    // Boxed: the proxy's state stays out of the connection's.
                    Answer::Upstream(to) => {
                        pinned(|| self.ask_upstream(&req, to, &mut body, &mut waited)).await
                    }
                };
                // A handler that waited (an upstream, the request body) may
                // have taken longer than any timeout: the response's Date and
                // the keep-alive deadline count from now.
                self.clock_stale |= waited;
                self.catch_up_clock();
                self.served += 1;
                if self.served == 1 {
                    // Kept alive from now on: its idle waits may be cut
                    // to make room at the descriptor budget (a new one
                    // that has sent nothing yet is never).
                    self.deadline.mark_reusable();
                }
                if let Some(m) = &w.metrics {
                    m.record(
                        route,
                        req.head.version,
                        resp.status.code(),
                        started.elapsed(),
                    );
                }

                // A body nobody read is drained after the response; one the
                // client has not sent yet (it waits for 100-continue) or that
                // failed half-read ends the connection instead.
                let http10 = req.http10();
                let close_delimited = http10 && resp.body.known_len().is_none();
                let body_ok = body.done || (!body.touched && !body.awaiting_continue());
                // A connection that switched protocols never reads HTTP again:
                // whatever the client sends after the tunnel ends belongs to
                // the other protocol.
                let upgraded = matches!(resp.body, Body::Upgrade(_));
                let keep_alive = !upgraded
                    && req.keep_alive
                    && !resp.close
                    && body_ok
                    && !body.failed
                    && !close_delimited
                    && !self.worker.stopping.get()
                    // At the descriptor budget this connection would be
                    // cut once idle: `Connection: close` says so first,
                    // or a client that sent its next request at once
                    // meets the close (1,935 of case B's 4,000 clients at
                    // `ulimit -n 4096` read one).
                    && !self.worker.deadlines.cutting_idle();
                let cx = HeadContext {
                    head_request: req.head.method() == b"HEAD",
                    http10,
                    keep_alive,
                };
                let rest = self.start_response(resp, cx, &req, started, route);
                (upgraded, keep_alive, cx, rest, route)
            };
            if let Some(finishing) =
                rest.map(|rest| pinned(|| self.finish_response(rest, cx, &req, started, route)))
            {
                finishing.await?;
            }
            self.spare.reclaim(req);
            if upgraded {
                return Ok(Some(End::Done));
            }
            if !keep_alive {
                self.flush().await?;
                return Ok(Some(if body.done { End::Done } else { End::Linger }));
            }
            if !body.done && !Box::pin(self.drain_body(&mut body)).await? {
                self.flush().await?;
                return Ok(Some(End::Linger));
            }
            Ok(None)
        }
    }

    /// The answer of the request's route's upstream (boxed by the caller:
    /// the proxy's state stays out of the connection's), noting in `waited`
    /// whether it had to wait. It takes the upstream's half of the
    /// [`Answer`] only: the whole (192 bytes, a response's room) was kept
    /// twice in this future, as argument and as local.
    async fn ask_upstream(
        &mut self,
        req: &Request,
        to: pipeline::ToUpstream<'_>,
        body: &mut BodyState,
        waited: &mut bool,
    ) -> (Response, Option<usize>) {
        let route = Some(to.route_index());
        // Responses to earlier pipelined requests wait in the write buffer
        // for their batch to end; an upstream may take seconds, so they
        // leave now, as far as the client takes them without waiting (a
        // failed write shows again at the next one).
        if !self.wbuf.is_empty() {
            let _ = self.flush_now();
        }
        let client = pipeline::Client::new(&self.peer, self.forwarded.as_deref());
        let mut view = ConnBody {
            state: body,
            transport: &mut self.transport,
            rbuf: &mut self.rbuf,
            wbuf: &mut self.wbuf,
            deadline: &self.deadline,
            clock: &mut self.clock,
            send_timeout: self.worker.with_generation(|g| g.timeouts.send),
            takes_interim: !req.http10(),
        };
        let handled = pin!(pipeline::upstream(&req.head, to, &mut view, client));
        (noting_waits(handled, waited).await, route)
    }

    /// Reads until a complete head is buffered. `Ok(Err(_))` says how the
    /// connection ends instead: quietly (EOF, idle timeout, shutdown, with
    /// nothing left to write), or after a refusal, answered here.
    async fn next_request(&mut self) -> io::Result<Result<Request, End>> {
        // Limits and timeouts of the generation current when the wait began.
        let w = self.worker.generation();
        let mut head_deadline: Option<Instant> = None;
        // Whether this call read: a request whose head a read completed is
        // the first of that read's bytes; one that was already buffered
        // (pipelined, or read while draining a body) may have arrived after
        // the event loop last reported anything (hayate_core::epoch).
        let mut read = false;
        loop {
            // Pipelined responses leave together, up to a bound.
            if self.wbuf.len() >= WRITE_BUFFER_FLUSH {
                self.flush().await?;
            }
            if self.served == 0 && w.http2 && self.rbuf.starts_with(crate::h2_conn::PREFACE_LINE) {
                return Ok(Err(End::Http2));
            }
            if !self.rbuf.is_empty() {
                let parsed =
                    request::parse(&mut self.rbuf, &w.head_limits, &mut self.spare, self.scheme);
                match parsed {
                    Parsed::Request(r) => {
                        if !read {
                            hayate_core::epoch::pipelined();
                        }
                        // A request that was already buffered is answered now:
                        // if the last response's writing waited, the clock
                        // catches up first (its time stamps Date, deadlines,
                        // the cache's freshness).
                        self.catch_up_clock();
                        return Ok(Ok(r));
                    }
                    Parsed::Refused(r) => {
                        Box::pin(self.refuse(r)).await?;
                        return Ok(Err(End::Linger));
                    }
                    Parsed::Partial => {}
                }
            }
            // Nothing complete is waiting: send what the pipeline produced.
            if !self.flush_now()? {
                self.flush().await?;
            }
            // Deadlines count from the end of the last response.
            self.catch_up_clock();
            let idle = self.rbuf.is_empty();
            if !idle && head_deadline.is_none() {
                head_deadline = Some(self.clock.now + w.timeouts.header);
            }
            let deadline = match head_deadline {
                Some(d) => d,
                None if self.served == 0 => self.clock.now + w.timeouts.header,
                None => self.clock.now + w.timeouts.keepalive,
            };
            match self.read_more(deadline, idle).await? {
                Read::Data => {
                    read = true;
                    if head_deadline.is_none() && !self.rbuf.is_empty() {
                        head_deadline = Some(self.clock.now + w.timeouts.header);
                    }
                }
                Read::Eof | Read::Shutdown => return Ok(Err(End::Done)),
                Read::Timeout if idle => return Ok(Err(End::Done)),
                Read::Timeout => {
                    let refusal = Refusal {
                        status: Status::REQUEST_TIMEOUT,
                        reason: "request head timed out",
                    };
                    Box::pin(self.refuse(refusal)).await?;
                    return Ok(Err(End::Linger));
                }
            }
        }
    }

    /// Reads more bytes into the read buffer. An idle connection (nothing
    /// buffered, its last response written) waits without buffers: they go
    /// to the worker's pool until the client sends (`buffers.rs`).
    async fn read_more(&mut self, deadline: Instant, idle: bool) -> io::Result<Read> {
        if idle && self.worker.stopping.get() {
            return Ok(match self.served {
                0 => self.first_request_at_shutdown(deadline).await?,
                _ => self.last_look(),
            });
        }
        let read = if idle {
            client_io::read_lending(
                &mut self.transport,
                (&mut self.rbuf, &mut self.wbuf, &mut self.spare),
                &self.worker.buffers,
                &self.deadline,
                deadline,
                HEAD_ROOM,
                &mut self.clock,
            )
            .await
        } else {
            client_io::read(
                &mut self.transport,
                &mut self.rbuf,
                &self.deadline,
                deadline,
                false,
                HEAD_ROOM,
                &mut self.clock,
            )
            .await
        };
        match read {
            // A connection that has sent nothing yet, cut by the shutdown
            // while it waited: its client has just connected.
            Err(Expired) if idle && self.served == 0 && self.worker.stopping.get() => {
                self.first_request_at_shutdown(deadline).await
            }
            // Shutdown, the keep-alive timeout, or room made at the
            // descriptor budget: a request that has already arrived is
            // answered rather than dropped unanswered.
            Err(Expired) if idle => Ok(self.last_look()),
            Err(Expired) => Ok(Read::Timeout),
            Ok(Ok(0)) => Ok(Read::Eof),
            Ok(Ok(_)) => {
                self.clock_stale = false;
                Ok(Read::Data)
            }
            Ok(Err(e)) => Err(e),
        }
    }

    /// Reads the clock again if the connection waited since it last did.
    fn catch_up_clock(&mut self) {
        if self.clock_stale {
            self.clock.refresh();
            self.clock_stale = false;
        }
    }

    /// Shutdown came to a connection that has sent nothing yet: it waits a
    /// moment more for its first request (bounded by the header timeout's
    /// `deadline`), which shutdown no longer cuts short. Its client connected
    /// before the listener closed (or the upgrade's new hayate took it
    /// over), and its request is on its way: the connect returned to the
    /// client once the handshake completed, and the request follows at the
    /// client's pace. Closing such a connection at once lost that request,
    /// with no retry (browsers retry only on a connection they reused): the
    /// one request in 26,795 an upgrade under load lost (issue 33). A kept
    /// connection is different: its client knows it may close at any time.
    async fn first_request_at_shutdown(&mut self, deadline: Instant) -> io::Result<Read> {
        let until = deadline.min(Instant::now() + FIRST_REQUEST_AT_SHUTDOWN);
        let read = client_io::read(
            &mut self.transport,
            &mut self.rbuf,
            &self.deadline,
            until,
            false,
            HEAD_ROOM,
            &mut self.clock,
        )
        .await;
        match read {
            Ok(Ok(0)) => Ok(Read::Eof),
            Ok(Ok(_)) => {
                self.clock_stale = false;
                Ok(Read::Data)
            }
            Ok(Err(e)) => Err(e),
            Err(Expired) => Ok(Read::Shutdown),
        }
    }

    /// An idle connection's last look before it closes (shutdown, the
    /// keep-alive timeout, room made at the budget): a request that has
    /// already arrived (the client sent it as the listener closed, or on a
    /// connection accepted just before) is answered rather than dropped
    /// unanswered.
    fn last_look(&mut self) -> Read {
        self.rbuf.reserve(HEAD_ROOM.first);
        match self.transport.try_read_buf(&mut self.rbuf) {
            Ok(n) if n > 0 => {
                self.clock.refresh();
                Read::Data
            }
            _ => Read::Shutdown,
        }
    }

    /// Answers an invalid request and marks the connection for closing.
    async fn refuse(&mut self, refusal: Refusal) -> io::Result<()> {
        let resp = Error::from(refusal)
            .context(format!("request from {}", self.peer))
            .into_response();
        let cx = HeadContext {
            head_request: false,
            http10: false,
            keep_alive: false,
        };
        response::write_head(&mut self.wbuf, &resp, cx, self.clock.wall);
        if let Body::Bytes(b) = &resp.body {
            self.wbuf.extend_from_slice(b);
        }
        self.flush().await
    }

    /// Reads and discards a request body nobody consumed. False when the
    /// connection cannot be reused (bad framing, too large, timeout, EOF).
    async fn drain_body(&mut self, state: &mut BodyState) -> io::Result<bool> {
        // The client may wait for the response before sending the rest.
        self.flush().await?;
        let mut view = ConnBody {
            state,
            transport: &mut self.transport,
            rbuf: &mut self.rbuf,
            wbuf: &mut self.wbuf,
            deadline: &self.deadline,
            clock: &mut self.clock,
            send_timeout: self.worker.with_generation(|g| g.timeouts.send),
            takes_interim: false,
        };
        loop {
            match view.next_chunk().await {
                Ok(Some(_)) => {}
                Ok(None) => return Ok(true),
                Err(e) => {
                    log::info!("request body from {} not drained: {e}", self.peer);
                    return Ok(false);
                }
            }
        }
    }

    /// Half-closes and drains the socket briefly, so the last response is not
    /// destroyed by a reset when unread request bytes remain.
    async fn linger(&mut self) {
        let _ = self.flush().await;
        if self.transport.shutdown_write().await.is_err() {
            return;
        }
        let deadline = Instant::now() + LINGER_TIME;
        let mut drained = 0;
        while drained < LINGER_BYTES {
            self.rbuf.clear();
            match self.read_more(deadline, false).await {
                Ok(Read::Data) => drained += self.rbuf.len(),
                _ => break,
            }
        }
    }
}

/// Runs `fut`, noting in `waited` whether it ever had to wait. It takes the
/// future pinned where the caller made it: a request's handler future is
/// kilobytes, and every move of it is a copy of all of them.
/// Whether the client closed its connection: `Ready(true)` at EOF or an
/// error, `Ready(false)` once bytes came (read into `rbuf`: the watch then
/// ends), `Pending` while nothing did.
fn client_left(transport: &mut Transport, rbuf: &mut BytesMut, cx: &mut Context<'_>) -> Poll<bool> {
    loop {
        match transport.poll_read_ready(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Err(_)) => return Poll::Ready(true),
            Poll::Ready(Ok(())) => {}
        }
        rbuf.reserve(4096);
        match transport.try_read_buf(rbuf) {
            Ok(0) => return Poll::Ready(true),
            Ok(_) => return Poll::Ready(false),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(_) => return Poll::Ready(true),
        }
    }
}

async fn noting_waits<F: Future>(mut fut: Pin<&mut F>, waited: &mut bool) -> F::Output {
    std::future::poll_fn(|cx| {
        let poll = fut.as_mut().poll(cx);
        *waited |= poll.is_pending();
        poll
    })
    .await
}
