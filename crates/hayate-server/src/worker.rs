//! A worker: one thread, one current-thread runtime, its own listeners, its
//! own route table and file caches. Nothing on the request path is shared
//! with other workers except the connection counter.

use std::cell::{Cell, RefCell};
use std::io;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hayate_config::Config;
use hayate_core::app::AppTable;
use hayate_core::boxed::pinned;
use hayate_core::shutdown::ShutdownWatch;
use hayate_proxy::UpstreamGroup;
use tokio::sync::{mpsc, watch, Notify};

use crate::access_log::{AccessLog, Sink};
use crate::buffers::BufferPool;
use crate::conn::Conn;
use crate::listen::BoundListener;
use crate::request_metrics::{RequestMetrics, WorkerMetrics};
use crate::router::Router;
use hayate_core::deadline::Deadlines;
use hayate_core::h1::request::HeadLimits;
use hayate_core::h1::response::OVER_CAPACITY;
use hayate_core::transport::{Listener, Peer, Scheme, Transport};

/// Timeouts of a connection.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// Rest of a head once begun.
    pub header: Duration,
    /// Idle keep-alive.
    pub keepalive: Duration,
    /// Between reads of a body.
    pub body: Duration,
    /// Between writes of a response.
    pub send: Duration,
    /// An HTTP/2 connection's wait for the answer to its closing GOAWAY.
    pub goaway: Duration,
}

/// What one configuration gives a worker: its routes, limits, timeouts and
/// access log. A reload builds a new one and swaps it in whole; a request
/// keeps the generation it started with to its end (an `Rc`), so requests
/// in flight finish on the routes they were answered by.
pub struct Generation {
    /// The configuration it was built from.
    pub config: Arc<Config>,
    /// Routes and handlers.
    pub router: Router,
    /// Request head limits.
    pub head_limits: HeadLimits,
    /// Connection timeouts.
    pub timeouts: Timeouts,
    /// The access log, if on.
    pub access_log: Option<AccessLog>,
    /// Requests at least this slow go to the error log (`slow_request`).
    pub slow_request: Option<Duration>,
    /// An exchange's record is made: the access log, `slow_request` or
    /// tracing is on (one test on the hot path for all).
    pub records_exchanges: bool,
    /// Each request's span is made and exported (`otel_endpoint`).
    pub tracer: Option<crate::otel::Tracer>,
    /// This worker's request counters, when the admin listener is on.
    pub metrics: Option<Arc<WorkerMetrics>>,
    /// Whether HTTP/2 is served (h2c on plain listeners).
    pub http2: bool,
    /// The listeners it serves, as configured (`handoff::listen_key`).
    listen_keys: Arc<[Arc<str>]>,
}

/// A worker's state, shared by its connections (same thread only).
pub struct Worker {
    generation: RefCell<Rc<Generation>>,
    /// Shutdown signal.
    pub shutdown: ShutdownWatch,
    /// Set once shutdown begins: connections finish their request and close.
    pub stopping: Cell<bool>,
    /// Read deadlines of every connection.
    pub deadlines: Rc<Deadlines>,
    /// Buffers of the connections between requests.
    pub buffers: BufferPool,
    active: Cell<usize>,
    idle: Notify,
    /// Raised when a generation is installed: accept loops check whether
    /// their listener is still configured.
    pub(crate) reloaded: Notify,
}

/// What every worker builds its generation from: the configuration and the
/// parts of it that are shared across workers. A reload publishes a new
/// one; every worker builds from it and reports back.
pub struct Blueprint {
    /// Counts reloads: 0 at start.
    pub number: u64,
    /// The configuration.
    pub config: Arc<Config>,
    /// The response cache, when a route caches (carried over by reloads).
    pub cache: Option<Arc<hayate_cache::ResponseCache>>,
    /// The access log sink.
    pub log_sink: Option<Sink>,
    /// The metrics slot of every route, in config order (sites, then
    /// routes), when the admin listener is on.
    pub route_slots: Option<Arc<[usize]>>,
    /// The listeners served, as configured: an accept loop whose listener
    /// is not among them ends (a reload removed it).
    pub listen_keys: Arc<[Arc<str>]>,
    /// Listeners a reload added, one set per worker, taken by the worker.
    pub added: Vec<std::sync::Mutex<Vec<BoundListener>>>,
}

/// A worker's answer to a blueprint: built and swapped in, or why not.
pub type Built = (usize, u64, Result<(), String>);

/// What every worker shares.
#[derive(Clone)]
pub struct Shared {
    /// The current blueprint; reloads publish new ones.
    pub blueprint: watch::Receiver<Arc<Blueprint>>,
    /// Where workers report each generation they built.
    pub built: mpsc::UnboundedSender<Built>,
    /// Open client connections across workers, against the descriptor
    /// budget.
    pub connections: Arc<crate::budget::Connections>,
    /// The supervised app's slots, if one runs.
    pub app: AppTable,
    /// Request counters of every worker, when the admin listener is on.
    pub request_metrics: Option<Arc<RequestMetrics>>,
    /// Where each worker's upstream groups publish their members'
    /// figures, when the admin listener is on.
    pub upstream_metrics: Option<Arc<crate::upstream_metrics::UpstreamMetrics>>,
    /// Compressed variants of files, built once for every worker.
    pub variants: Arc<hayate_compress::VariantStore>,
    /// The TLS side of the https listeners, when there are some.
    pub tls: Option<Arc<hayate_tls::TlsServer>>,
}

impl Generation {
    /// Builds a worker's generation from `plan`; upstream groups whose
    /// settings did not change are taken from `previous`, with their pooled
    /// connections, health and in-flight counts.
    fn build(
        plan: &Blueprint,
        shared: &Shared,
        previous: Option<&Generation>,
    ) -> io::Result<Generation> {
        let g = &plan.config.global;
        let router = Router::build(
            &plan.config,
            &shared.app,
            plan.cache.as_ref(),
            &shared.variants,
            plan.route_slots.as_deref(),
            previous.map(|p| (&*p.config, &p.router)),
        )?
        .with_acme_challenges(shared.tls.as_ref().and_then(|t| t.challenges()));
        Ok(Generation {
            config: plan.config.clone(),
            router,
            head_limits: HeadLimits {
                max_request_line: usize::try_from(g.max_request_line.0).unwrap_or(usize::MAX),
                max_header_bytes: usize::try_from(g.max_header_bytes.0).unwrap_or(usize::MAX),
                max_headers: g.max_headers as usize,
                // The largest any route takes; a route with less lowers it
                // for its own requests (`Route::max_body_size`).
                max_body_size: plan
                    .config
                    .sites
                    .iter()
                    .flat_map(|s| &s.routes)
                    .map(|r| r.options.max_body_size.0)
                    .max()
                    .unwrap_or(0),
            },
            timeouts: Timeouts {
                header: g.header_timeout.0,
                keepalive: g.keepalive_timeout.0,
                // The longest any route waits; a route that waits less
                // lowers it for its own requests (`Route::body_timeout`).
                body: crate::router::longest_body_timeout(&plan.config),
                send: g.send_timeout.0,
                goaway: g.http2_goaway_timeout.0,
            },
            access_log: plan
                .log_sink
                .clone()
                .map(|sink| AccessLog::new(g.access_log_format.clone(), sink)),
            slow_request: g.slow_request.map(|d| d.0),
            records_exchanges: plan.log_sink.is_some()
                || g.slow_request.is_some()
                || g.otel_endpoint.is_some(),
            tracer: crate::otel::Tracer::of(g)?,
            metrics: shared.request_metrics.as_ref().map(|m| m.worker()),
            http2: g.http2,
            listen_keys: plan.listen_keys.clone(),
        })
    }
}

impl Worker {
    /// The current generation, for one request (or one wait) to keep.
    pub fn generation(&self) -> Rc<Generation> {
        self.generation.borrow().clone()
    }

    /// Reads the current generation without keeping it: for a value read
    /// and used at once (the closure cannot wait, so a reload cannot swap
    /// the generation under it), at the cost of a borrow flag rather than
    /// a reference count.
    pub fn with_generation<R>(&self, read: impl FnOnce(&Generation) -> R) -> R {
        read(&self.generation.borrow())
    }

    /// Whether the current generation still serves the listener
    /// configured as `key` (a reload may have removed it).
    pub(crate) fn serves_listener(&self, key: &Arc<str>) -> bool {
        self.with_generation(|g| g.listen_keys.contains(key))
    }

    /// Swaps in `next` and starts its upstream groups' background tasks
    /// (a group carried over keeps the ones it has). What is still buffered
    /// in the old generation's access log is written now.
    fn install(&self, next: Generation, shared: &Shared) {
        let running: Vec<*const UpstreamGroup> = self
            .generation()
            .router
            .upstream_groups()
            .map(|(_, group)| Rc::as_ptr(group))
            .collect();
        for (route, group) in next.router.upstream_groups() {
            if !running.contains(&Rc::as_ptr(group)) {
                start_group_tasks(route, group, shared);
            }
        }
        let old = self.generation.replace(Rc::new(next));
        if let Some(log) = &old.access_log {
            log.flush();
        }
        self.reloaded.notify_waiters();
    }
}

/// The health checks and pool sweeper of an upstream group, for as long as
/// a generation uses the group (they hold it weakly), and where it publishes
/// its members' figures for `/metrics`.
fn start_group_tasks(route: usize, group: &Rc<UpstreamGroup>, shared: &Shared) {
    if let Some(m) = &shared.upstream_metrics {
        group.publish_figures_to(m.slot(route));
    }
    tokio::task::spawn_local(UpstreamGroup::run_health_checks(Rc::downgrade(group)));
    tokio::task::spawn_local(UpstreamGroup::run_pool_sweeper(Rc::downgrade(group)));
}

/// How a worker ended, reported to the main loop: its index, and why when
/// it failed (a panic included).
pub type Ended = (usize, io::Result<()>);

/// Serves as worker `index` (see [`serve`]) in a task of its own on the
/// current thread's [`EventLoop`], then reports how it ended on `done`: a
/// panic ends the task, not the thread, so the report is sent either way,
/// whether the worker has a thread of its own or shares the main one.
pub async fn serve_and_report(
    index: usize,
    shared: Shared,
    listeners: Vec<BoundListener>,
    shutdown: ShutdownWatch,
    done: mpsc::UnboundedSender<Ended>,
) {
    let serving = tokio::task::spawn_local(serve(index, shared, listeners, shutdown));
    let result = serving
        .await
        .unwrap_or_else(|_| Err(io::Error::other("worker panicked")));
    let _ = done.send((index, result));
}

/// Serves as worker `index` on the current thread's [`EventLoop`] until
/// shutdown and drain.
pub async fn serve(
    index: usize,
    shared: Shared,
    listeners: Vec<BoundListener>,
    shutdown: ShutdownWatch,
) -> io::Result<()> {
    let mut blueprints = shared.blueprint.clone();
    let first = Generation::build(&blueprints.borrow_and_update(), &shared, None)?;
    for (route, group) in first.router.upstream_groups() {
        start_group_tasks(route, group, &shared);
    }
    let worker = Rc::new(Worker {
        generation: RefCell::new(Rc::new(first)),
        shutdown: shutdown.clone(),
        stopping: Cell::new(false),
        deadlines: Rc::default(),
        buffers: BufferPool::default(),
        active: Cell::new(0),
        idle: Notify::new(),
        reloaded: Notify::new(),
    });
    start_accepting(listeners, &worker, &shared)?;
    let flusher = worker.clone();
    tokio::task::spawn_local(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            if let Some(log) = &flusher.generation().access_log {
                log.flush();
            }
        }
    });
    worker.deadlines.install();
    tokio::task::spawn_local(worker.deadlines.clone().run_sweeper());
    tokio::task::spawn_local(follow_reloads(
        index,
        worker.clone(),
        shared.clone(),
        blueprints,
    ));
    // Waited for in a task of its own: this future is polled every time
    // the event loop runs its tasks, and a shutdown watch's poll (a
    // registration under a lock) costs more than a join handle's (a
    // state check): 156 instructions per proxied request and 73 per
    // static one when each wakes the loop (bench/instructions/run).
    let mut stop = shutdown.clone();
    let _ = tokio::task::spawn_local(async move { stop.wait().await }).await;
    worker.stopping.set(true);
    worker.deadlines.expire_idle();
    // Listeners close as their accept loops see the signal; idle kept-alive
    // connections close at once, one that has sent nothing yet after its
    // first request or a second (`conn.rs`, FIRST_REQUEST_AT_SHUTDOWN);
    // in-flight ones finish or are cut at the grace period.
    let grace = worker.generation().config.global.grace_period.0;
    let drained = tokio::time::timeout(grace, async {
        while worker.active.get() > 0 {
            worker.idle.notified().await;
        }
    })
    .await;
    if drained.is_err() {
        log::warn!(
            "worker {index}: {} connections cut at the grace period",
            worker.active.get()
        );
    }
    if let Some(log) = &worker.generation().access_log {
        log.flush();
    }
    Ok(())
}

/// A worker's event loop: one thread's runtime, on which [`serve`] and the
/// tasks it spawns with `spawn_local` run. With one worker, the main
/// thread's control loop runs on it too (`crate::run`).
///
/// On tokio's `LocalRuntime` where the build has it (`--cfg tokio_unstable`,
/// set in `.cargo/config.toml`; decision 0012): its scheduler queues a task
/// that I/O wakes directly. A `LocalSet` on a current-thread runtime queues
/// it, then wakes the set's own task, which the runtime then polls to poll
/// the connection's: 646 more instructions per proxied request, 324 per
/// static file (bench/instructions/run). A build without the flag (a
/// `RUSTFLAGS` of its own replaces the config's: cargo-fuzz's) runs on the
/// `LocalSet`, which serves the same.
pub struct EventLoop {
    #[cfg(tokio_unstable)]
    runtime: tokio::runtime::LocalRuntime,
    #[cfg(not(tokio_unstable))]
    runtime: tokio::runtime::Runtime,
    #[cfg(not(tokio_unstable))]
    local: tokio::task::LocalSet,
}

impl EventLoop {
    /// Builds the current thread's event loop; the time is read once per
    /// wake-up (`hayate_core::loop_time`).
    pub fn new() -> io::Result<EventLoop> {
        let mut builder = tokio::runtime::Builder::new_current_thread();
        builder
            .enable_all()
            .on_thread_unpark(hayate_core::loop_time::woke);
        hayate_core::loop_time::woke();
        Ok(EventLoop {
            #[cfg(tokio_unstable)]
            runtime: builder.build_local(Default::default())?,
            #[cfg(not(tokio_unstable))]
            runtime: builder.build()?,
            #[cfg(not(tokio_unstable))]
            local: tokio::task::LocalSet::new(),
        })
    }

    /// Runs `future`, and the tasks spawned meanwhile, until it ends.
    pub fn block_on<F: std::future::Future>(&self, future: F) -> F::Output {
        #[cfg(tokio_unstable)]
        {
            self.runtime.block_on(future)
        }
        #[cfg(not(tokio_unstable))]
        {
            self.local.block_on(&self.runtime, future)
        }
    }

    /// Where tasks that may move between threads are spawned.
    pub fn handle(&self) -> &tokio::runtime::Handle {
        self.runtime.handle()
    }
}

/// Builds a generation from every blueprint a reload publishes, swaps it in
/// and reports how that went.
async fn follow_reloads(
    index: usize,
    worker: Rc<Worker>,
    shared: Shared,
    mut blueprints: watch::Receiver<Arc<Blueprint>>,
) {
    while blueprints.changed().await.is_ok() {
        let plan = blueprints.borrow_and_update().clone();
        let added = plan
            .added
            .get(index)
            .map(|a| std::mem::take(&mut *a.lock().unwrap_or_else(|e| e.into_inner())))
            .unwrap_or_default();
        let result = Generation::build(&plan, &shared, Some(&worker.generation()))
            .map(|next| worker.install(next, &shared))
            .and_then(|()| start_accepting(added, &worker, &shared))
            .map_err(|e| e.to_string());
        let _ = shared.built.send((index, plan.number, result));
    }
}

/// Registers `listeners` with this worker's runtime and accepts on them.
fn start_accepting(
    listeners: Vec<BoundListener>,
    worker: &Rc<Worker>,
    shared: &Shared,
) -> io::Result<()> {
    for mut l in listeners {
        if let Some(udp) = l.quic.take() {
            let Some(tls) = shared.tls.as_ref().and_then(|t| t.http3()) else {
                return Err(io::Error::other(
                    "http3 needs an https:// listener's TLS setup",
                ));
            };
            let endpoint = crate::h3_conn::endpoint(udp, tls, &worker.generation())?;
            let serving = crate::h3_conn::serve_endpoint(
                endpoint,
                l.key.clone(),
                worker.clone(),
                shared.clone(),
            );
            tokio::task::spawn_local(serving);
        }
        let listener = Listener::new(l.socket, l.scheme)?;
        let speaks = Speaks {
            proxy_protocol: l.proxy_protocol,
            http2_only: l.http2_only,
        };
        let accepting = accept_loop(listener, l.key, speaks, worker.clone(), shared.clone());
        tokio::task::spawn_local(accepting);
    }
    Ok(())
}

/// What a listener's clients send first, besides its scheme.
#[derive(Clone, Copy)]
struct Speaks {
    /// A PROXY protocol header (`proxy_protocol`).
    proxy_protocol: bool,
    /// HTTP/2 only, with prior knowledge (`h2c`).
    http2_only: bool,
}

/// Accepts connections until shutdown, or until a reload removes the
/// listener configured as `key` (the socket closes with the last worker's
/// loop).
async fn accept_loop(
    listener: Listener,
    key: Arc<str>,
    speaks: Speaks,
    worker: Rc<Worker>,
    shared: Shared,
) {
    let mut shutdown = worker.shutdown.clone();
    let scheme = listener.scheme();
    loop {
        let full = shared.connections.full();
        // At the descriptor budget: the next client waits in the listen
        // backlog, and kept-alive connections make room: those idle for a
        // while now, HTTP/2 ones once they go idle, HTTP/1.1 ones by
        // answering `Connection: close`. None idle long enough: look again
        // shortly.
        worker.deadlines.cut_idle(full);
        let look_again = full && make_room(&worker) == 0;
        let accepted = tokio::select! {
            // Shutdown first: a connection accepted once the worker has
            // begun to stop may come after its drain counted none left, and
            // the worker's event loop then ends with its task unpolled,
            // closing it unanswered (1 request in about 15 runs of the
            // upgrade test, 6 upgrades each, was lost this way).
            biased;
            _ = shutdown.wait() => return,
            a = listener.accept(), if !full => a,
            _ = shared.connections.room(), if full => continue,
            _ = tokio::time::sleep(LOOK_AGAIN), if look_again => continue,
            _ = worker.reloaded.notified() => {
                if worker.serves_listener(&key) {
                    continue;
                }
                log::info!("listener {key} removed by a reload: no longer accepting on it");
                return;
            }
        };
        let (mut transport, peer) = match accepted {
            Ok(a) => a,
            Err(e) if hayate_core::error::is_local_shortage(&e) => {
                // No descriptor for the connection, which stays in the
                // backlog (accept(2) takes it only with one): back off
                // while something closes, and make room as at the budget.
                hayate_core::error::note_shortage(|| format!("accept: {e}"));
                make_room(&worker);
                tokio::time::sleep(ACCEPT_SHORTAGE_PAUSE).await;
                continue;
            }
            Err(e) => {
                // Back off instead of spinning on an error that stays.
                log::error!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let max = worker.generation().config.global.max_connections as usize;
        if shared.connections.opened() >= max {
            shared.connections.closed();
            log::warn!("connection from {peer} refused: max_connections ({max}) reached");
            if scheme == Scheme::Http {
                let _ = transport.try_write(OVER_CAPACITY);
            }
            continue;
        }
        let guard = ConnGuard {
            worker: worker.clone(),
            connections: shared.connections.clone(),
        };
        worker.active.set(worker.active.get() + 1);
        match (scheme, &shared.tls, transport) {
            (_, tls, Transport::Tcp(tcp)) if speaks.proxy_protocol => {
                let tls = tls.clone().filter(|_| scheme == Scheme::Https);
                let worker = worker.clone();
                // The header is read before anything else (TLS included),
                // within the header timeout, from trusted peers only.
                tokio::task::spawn_local(async move {
                    let w = worker.generation();
                    let trusted = peer.ip.is_some_and(|ip| w.router.trusts(ip));
                    let timeout = w.timeouts.header;
                    drop(w);
                    let read =
                        pinned(|| crate::proxy_protocol::accept(&tcp, peer, trusted, timeout));
                    if let Some(peer) = read.await {
                        match tls {
                            Some(tls) => serve_tls(tls, tcp, peer, scheme, worker).await,
                            None if speaks.http2_only => {
                                let serving =
                                    crate::h2_conn::serve(tcp, peer, scheme, None, worker);
                                pinned(|| serving).await
                            }
                            None => {
                                Conn::new(Transport::Tcp(tcp), peer, scheme, worker)
                                    .run()
                                    .await
                            }
                        }
                    }
                    drop(guard);
                });
            }
            (Scheme::Https, Some(tls), Transport::Tcp(tcp)) => {
                let tls = tls.clone();
                let worker = worker.clone();
                // The handshake counts against the connection limits (the
                // guard is held from accept).
                tokio::task::spawn_local(async move {
                    serve_tls(tls, tcp, peer, scheme, worker).await;
                    drop(guard);
                });
            }
            (_, _, transport) if speaks.http2_only => {
                // No HTTP/1.1 here: the first bytes are the preface or a
                // connection error (RFC 9113 §3.4).
                let worker = worker.clone();
                tokio::task::spawn_local(async move {
                    let serving = crate::h2_conn::serve(transport, peer, scheme, None, worker);
                    pinned(|| serving).await;
                    drop(guard);
                });
            }
            (_, _, transport) => {
                // Made here and moved in whole: the task's future holds one
                // `Conn`, not its parts and then a copy of it (every byte of
                // that future is a byte of every idle connection).
                let mut conn = Conn::new(transport, peer, scheme, worker.clone());
                tokio::task::spawn_local(async move {
                    conn.run().await;
                    drop(conn);
                    drop(guard);
                });
            }
        }
    }
}

/// An accepted connection on an https listener: the handshake, then
/// HTTP/2 or HTTP/1.1 as ALPN chose. Each stage is boxed: the task holds
/// only the one it is in, so an HTTP/2 connection does not also carry an
/// HTTP/1 connection's room (its task went from 892 to 384 bytes, massif).
async fn serve_tls(
    tls: Arc<hayate_tls::TlsServer>,
    tcp: tokio::net::TcpStream,
    peer: Peer,
    scheme: Scheme,
    worker: Rc<Worker>,
) {
    let (t, client_cert) = match pinned(|| tls.handshake(tcp)).await {
        Ok(accepted) => accepted,
        Err(_) => return,
    };
    let peer = Peer {
        client_cert,
        ..peer
    };
    if t.alpn() == Some(b"h2") {
        let tls = t.tls_info();
        pinned(|| crate::h2_conn::serve(t, peer, scheme, tls, worker)).await;
    } else {
        pinned(|| async move { Conn::new(t, peer, scheme, worker).run().await }).await;
    }
}

/// How long accepting pauses when accept(2) finds no descriptor: the loop
/// does not spin on the error (50 tries a second at most, each a syscall
/// and a wake-up), and a client in the backlog waits at most 20 ms more
/// once a descriptor frees.
const ACCEPT_SHORTAGE_PAUSE: Duration = Duration::from_millis(20);

/// A kept-alive connection idle for less than this is not cut to make room
/// at the descriptor budget: its client is likely sending its next request
/// as it closes (wrk's 4,000 clients at `ulimit -n 4096` met 1,935 such
/// closes), and browsers come back within a second or two of a page or
/// not for long.
const SPARED_IDLE: Duration = Duration::from_secs(1);

/// How soon a worker at the budget that found no connection idle for
/// [`SPARED_IDLE`] looks again (the deadlines' sweep interval).
const LOOK_AGAIN: Duration = hayate_core::deadline::SWEEP;

/// Cuts some of the worker's kept-alive connections idle for at least
/// [`SPARED_IDLE`] (their keep-alive deadline that far behind the one a
/// connection going idle now would get), longest idle first; how many.
fn make_room(worker: &Worker) -> usize {
    let keepalive = worker.generation().timeouts.keepalive;
    let due_by = Instant::now() + keepalive.saturating_sub(SPARED_IDLE);
    worker.deadlines.expire_longest_idle(due_by)
}

/// Counts a connection until it is dropped.
pub(crate) struct ConnGuard {
    worker: Rc<Worker>,
    connections: Arc<crate::budget::Connections>,
}

impl ConnGuard {
    /// Counts a connection `connections.opened()` already counted across
    /// workers as one of `worker`'s too, which its drain waits for.
    pub(crate) fn new(
        worker: &Rc<Worker>,
        connections: &Arc<crate::budget::Connections>,
    ) -> ConnGuard {
        worker.active.set(worker.active.get() + 1);
        ConnGuard {
            worker: worker.clone(),
            connections: connections.clone(),
        }
    }
}

impl Drop for ConnGuard {
    fn drop(&mut self) {
        self.connections.closed();
        let n = self.worker.active.get() - 1;
        self.worker.active.set(n);
        if n == 0 {
            self.worker.idle.notify_waiters();
        }
    }
}
