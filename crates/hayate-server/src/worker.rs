//! A worker: one thread, one current-thread runtime, its own listeners, its
//! own route table and file caches. Nothing on the request path is shared
//! with other workers except the connection counter.

use std::cell::Cell;
use std::io;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hayate_config::Config;
use hayate_core::app::AppSlots;
use hayate_core::shutdown::ShutdownWatch;
use tokio::sync::Notify;

use crate::access_log::{AccessLog, Sink};
use crate::buffers::BufferPool;
use crate::conn::Conn;
use crate::deadline::Deadlines;
use crate::listen::BoundListener;
use crate::request_metrics::{RequestMetrics, WorkerMetrics};
use crate::router::Router;
use hayate_core::h1::request::HeadLimits;
use hayate_core::h1::response::OVER_CAPACITY;
use hayate_core::transport::{Listener, Scheme, Transport};

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
}

/// A worker's state, shared by its connections (same thread only).
pub struct Worker {
    /// Routes and handlers.
    pub router: Router,
    /// Request head limits.
    pub head_limits: HeadLimits,
    /// Connection timeouts.
    pub timeouts: Timeouts,
    /// The access log, if on.
    pub access_log: Option<AccessLog>,
    /// Shutdown signal.
    pub shutdown: ShutdownWatch,
    /// Set once shutdown begins: connections finish their request and close.
    pub stopping: Cell<bool>,
    /// Read deadlines of every connection.
    pub deadlines: Rc<Deadlines>,
    /// This worker's request counters, when the admin listener is on.
    pub metrics: Option<Arc<WorkerMetrics>>,
    /// Buffers of the connections between requests.
    pub buffers: BufferPool,
    /// Whether HTTP/2 is served (h2c on plain listeners).
    pub http2: bool,
    active: Cell<usize>,
    idle: Notify,
}

/// What every worker shares.
#[derive(Clone)]
pub struct Shared {
    /// The configuration.
    pub config: Arc<Config>,
    /// Open client connections across workers.
    pub connections: Arc<AtomicUsize>,
    /// The access log sink.
    pub log_sink: Option<Sink>,
    /// The supervised app's slots, if one runs.
    pub app: Option<AppSlots>,
    /// The response cache, when a route caches.
    pub cache: Option<Arc<hayate_cache::ResponseCache>>,
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

impl Worker {
    fn build(shared: &Shared, shutdown: ShutdownWatch) -> io::Result<Worker> {
        let g = &shared.config.global;
        Ok(Worker {
            router: Router::build(
                &shared.config,
                shared.app.as_ref(),
                shared.cache.as_ref(),
                &shared.variants,
            )?
            .with_acme_challenges(shared.tls.as_ref().and_then(|t| t.challenges())),
            head_limits: HeadLimits {
                max_request_line: usize::try_from(g.max_request_line.0).unwrap_or(usize::MAX),
                max_header_bytes: usize::try_from(g.max_header_bytes.0).unwrap_or(usize::MAX),
                max_headers: g.max_headers as usize,
                max_body_size: g.max_body_size.0,
            },
            timeouts: Timeouts {
                header: g.header_timeout.0,
                keepalive: g.keepalive_timeout.0,
                body: g.body_timeout.0,
                send: g.send_timeout.0,
            },
            access_log: shared
                .log_sink
                .clone()
                .map(|sink| AccessLog::new(g.access_log_format, sink)),
            shutdown,
            stopping: Cell::new(false),
            deadlines: Rc::default(),
            metrics: shared.request_metrics.as_ref().map(|m| m.worker()),
            buffers: BufferPool::default(),
            http2: g.http2,
            active: Cell::new(0),
            idle: Notify::new(),
        })
    }
}

/// Runs a worker on the current thread until shutdown and drain.
pub fn run(
    index: usize,
    shared: Shared,
    listeners: Vec<BoundListener>,
    shutdown: ShutdownWatch,
) -> io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        let worker = Rc::new(Worker::build(&shared, shutdown.clone())?);
        for l in listeners {
            let l = Listener::new(l.socket, l.scheme)?;
            tokio::task::spawn_local(accept_loop(l, worker.clone(), shared.clone()));
        }
        let flusher = worker.clone();
        tokio::task::spawn_local(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                if let Some(log) = &flusher.access_log {
                    log.flush();
                }
            }
        });
        tokio::task::spawn_local(worker.deadlines.clone().run_sweeper());
        for (route, group) in worker.router.upstream_groups() {
            if let Some(m) = &shared.upstream_metrics {
                group.publish_figures_to(m.slot(route));
            }
            tokio::task::spawn_local(group.clone().run_health_checks());
            tokio::task::spawn_local(group.clone().run_pool_sweeper());
        }
        let mut stop = shutdown.clone();
        stop.wait().await;
        worker.stopping.set(true);
        worker.deadlines.expire_idle();
        // Listeners close as their accept loops see the signal; idle
        // connections close at once; in-flight ones finish or are cut at the
        // grace period.
        let grace = shared.config.global.grace_period.0;
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
        if let Some(log) = &worker.access_log {
            log.flush();
        }
        Ok(())
    })
}

async fn accept_loop(listener: Listener, worker: Rc<Worker>, shared: Shared) {
    let mut shutdown = worker.shutdown.clone();
    let max = shared.config.global.max_connections as usize;
    let scheme = listener.scheme();
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shutdown.wait() => return,
        };
        let (mut transport, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                log::error!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        if shared.connections.fetch_add(1, Ordering::Relaxed) >= max {
            shared.connections.fetch_sub(1, Ordering::Relaxed);
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
            (Scheme::Https, Some(tls), Transport::Tcp(tcp)) => {
                let tls = tls.clone();
                let worker = worker.clone();
                // The handshake counts against the connection limits (the
                // guard is held from accept). Boxed: its state is gone once
                // it is done, instead of sizing every connection's task.
                tokio::task::spawn_local(async move {
                    match Box::pin(tls.handshake(tcp)).await {
                        Ok(t) if t.alpn() == Some(b"h2") => {
                            let tls = t.tls_info();
                            Box::pin(crate::h2_conn::serve(t, peer, scheme, tls, worker)).await;
                        }
                        Ok(t) => Conn::new(t, peer, scheme, worker).run().await,
                        Err(_) => {}
                    }
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

/// Counts a connection until it is dropped.
struct ConnGuard {
    worker: Rc<Worker>,
    connections: Arc<AtomicUsize>,
}

impl Drop for ConnGuard {
    fn drop(&mut self) {
        self.connections.fetch_sub(1, Ordering::Relaxed);
        let n = self.worker.active.get() - 1;
        self.worker.active.set(n);
        if n == 0 {
            self.worker.idle.notify_waiters();
        }
    }
}
