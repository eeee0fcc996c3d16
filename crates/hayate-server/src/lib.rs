//! hayate's server: listeners, workers, the HTTP/1.1 connection loop,
//! routing and the request pipeline (`pipeline.rs`), combining the feature
//! crates.
//!
//! The engine is our own codec over httparse rather than hyper
//! (`hayate_core::h1`): the connection writes a head and a small body in
//! one syscall, batches pipelined responses, sends large files with
//! sendfile(2), and the codec enforces the framing rules itself. The
//! measurements behind that choice are in docs/decisions/0001-http-engine.md.

pub mod access_log;
pub mod admin;
mod buffers;
pub mod cached;
mod client_io;
pub mod compression;
mod conn;
mod conn_body;
pub mod control;
mod deadline;
mod h2_conn;
mod h2_tunnel;
pub mod listen;
pub mod pipeline;
pub mod request_metrics;
pub mod router;
pub mod status_json;
mod status_page;
pub mod upstream_metrics;
mod worker;

use std::io;
use std::path::PathBuf;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use hayate_config::values::Listen;
use hayate_config::Config;
use hayate_core::app::AppSlots;
use hayate_core::metrics::{family, sample, Kind, Metrics};
use hayate_core::shutdown::Shutdown;
use tokio::signal::unix::{signal, SignalKind};

use crate::access_log::Sink;
use crate::control::ControlCommand;
use crate::worker::Shared;

/// Called with the bound addresses once every worker is accepting.
pub type OnListening<'a> = Box<dyn FnOnce(&[Listen]) + 'a>;

/// What `status` answers (control socket, admin `/status`); any thread.
pub type StatusFn = Arc<dyn Fn() -> String + Send + Sync>;

/// What the binary hooks into a running server.
pub struct Hooks<'a> {
    /// See [`OnListening`].
    pub on_listening: OnListening<'a>,
    /// Called on SIGHUP (rolling reload of a supervised app).
    pub on_reload: Box<dyn Fn() + 'a>,
    /// The control socket, if any.
    pub control: Option<PathBuf>,
    /// The `--config` file, if any (shown by the admin status page).
    pub config_file: Option<PathBuf>,
    /// What `status` answers.
    pub status: Option<StatusFn>,
    /// The metrics registry served on the admin listener. The server adds
    /// its own sources (requests per route, connections); subsystems add
    /// theirs with [`Metrics::register`].
    pub metrics: Metrics,
}

/// Runs the server until SIGTERM or SIGINT, then shuts down gracefully.
/// `app` is the supervised app's slots, for routes that send to it.
pub fn run(mut config: Config, app: Option<AppSlots>, hooks: Hooks<'_>) -> io::Result<()> {
    raise_fd_limit();
    // Open everything once here, so a bad root or log path fails before
    // any socket is bound.
    let cache = router::response_cache(&config);
    let variants = compression::store(&config.global);
    router::Router::build(&config, app.as_ref(), cache.as_ref(), &variants)?;
    let log_sink = Sink::open(&config.global.access_log)?;
    // Certificates are loaded before any socket is bound, like roots.
    let tls = hayate_tls::TlsServer::from_config(&config)
        .map_err(|e| io::Error::other(format!("HTTPS: {e}")))?
        .map(Arc::new);
    if let Some(tls) = &tls {
        hooks.metrics.register(tls.metrics());
        if let Some(ca) = tls.ca_path() {
            log::info!(
                "HTTPS certificates from the local CA {} (trust it, e.g. curl --cacert {})",
                ca.display(),
                ca.display()
            );
        }
    }
    let workers = config.global.workers.get();
    let listeners = listen::bind_all(&config.global.listen, workers)?;
    // Ports resolved (port 0), for what names them (the HTTPS redirect).
    config.global.listen = listeners.addresses.clone();

    let signals = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    // The admin listener is bound before any worker starts, like the others.
    let admin = match &config.global.admin {
        Some(addr) => Some(signals.block_on(async { admin::bind(addr) })?),
        None => None,
    };
    let request_metrics = admin
        .is_some()
        .then(|| request_metrics::RequestMetrics::new(&config));
    if let Some(m) = &request_metrics {
        hooks.metrics.register(m.clone());
    }
    let upstream_metrics = admin
        .is_some()
        .then(|| upstream_metrics::UpstreamMetrics::new(&config));
    if let Some(m) = &upstream_metrics {
        hooks.metrics.register(m.clone());
    }
    if let Some(c) = &cache {
        let c = c.clone();
        hooks.metrics.register_fn(move |out| c.render_metrics(out));
    }
    if admin.is_some() {
        let v = variants.clone();
        hooks
            .metrics
            .register_fn(move |out| compression::render_metrics(&v, out));
    }
    let info = Arc::new(status_json::ServerInfo::new(
        workers,
        hooks.config_file.clone(),
    ));
    let (mut term, mut int, mut hup) = signals.block_on(async {
        Ok::<_, io::Error>((
            signal(SignalKind::terminate())?,
            signal(SignalKind::interrupt())?,
            signal(SignalKind::hangup())?,
        ))
    })?;

    let shutdown = Shutdown::new();
    let shared = Shared {
        config: Arc::new(config),
        connections: Arc::new(AtomicUsize::new(0)),
        log_sink,
        app,
        cache,
        request_metrics,
        upstream_metrics,
        variants,
        tls,
    };
    let open = shared.connections.clone();
    hooks.metrics.register_fn(move |out| {
        let name = "hayate_connections_open";
        family(out, name, "Open client connections", Kind::Gauge);
        sample(
            out,
            name,
            &[],
            open.load(std::sync::atomic::Ordering::Relaxed),
        );
    });
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel::<(usize, io::Result<()>)>();
    let mut handles = Vec::new();
    for (i, ls) in listeners.per_worker.into_iter().enumerate() {
        let shared = shared.clone();
        let watch = shutdown.watch();
        let done = done_tx.clone();
        handles.push(
            std::thread::Builder::new()
                .name(format!("hayate-w{i}"))
                .spawn(move || {
                    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        worker::run(i, shared, ls, watch)
                    }))
                    .unwrap_or_else(|_| Err(io::Error::other("worker panicked")));
                    let _ = done.send((i, result));
                })?,
        );
    }
    drop(done_tx);
    (hooks.on_listening)(&listeners.addresses);
    if let Some((listener, url)) = admin {
        log::info!(
            "admin listener on {url} (status page at /, GET /status.json, /metrics, /status, POST /purge)"
        );
        signals.spawn(admin::serve(
            listener,
            admin::Sources {
                metrics: hooks.metrics.clone(),
                status: hooks.status.clone(),
                cache: shared.cache.clone(),
                info: info.clone(),
            },
        ));
    }

    let control = match &hooks.control {
        Some(path) => Some((
            signals.block_on(async { control::bind(path) })?,
            path.clone(),
        )),
        None => None,
    };
    let accept_control = || async {
        match &control {
            Some((l, _)) => l.accept().await.map(|(s, _)| s),
            None => std::future::pending().await,
        }
    };
    let mut exit: io::Result<()> = Ok(());
    signals.block_on(async {
        loop {
            tokio::select! {
                conn = accept_control() => {
                    let Ok(conn) = conn else { continue };
                    let status = |c: &ControlCommand| match (c, &hooks.status) {
                        (ControlCommand::Status, Some(status)) => status(),
                        (ControlCommand::Reload, _) => "reloading\n".to_string(),
                        (ControlCommand::Stop, _) => "stopping\n".to_string(),
                        (ControlCommand::Status, None) => String::new(),
                        (ControlCommand::PurgeUrl(url), _) => cached::purge(shared.cache.as_deref(), Some(url), None),
                        (ControlCommand::PurgeTag(tag), _) => cached::purge(shared.cache.as_deref(), None, Some(tag)),
                    };
                    match control::serve_one(conn, status).await {
                        Ok(ControlCommand::Reload) => {
                            log::info!("control: reloading");
                            info.reloaded();
                            (hooks.on_reload)();
                            continue;
                        }
                        Ok(ControlCommand::Stop) => log::info!("control: stop requested; shutting down"),
                        _ => continue,
                    }
                }
                _ = term.recv() => log::info!("SIGTERM: shutting down"),
                _ = int.recv() => log::info!("SIGINT: shutting down"),
                _ = hup.recv() => {
                    log::info!("SIGHUP: reloading");
                    info.reloaded();
                    (hooks.on_reload)();
                    continue;
                }
                Some((i, r)) = done_rx.recv() => {
                    let e = r.err().unwrap_or_else(|| io::Error::other("worker exited"));
                    log::error!("worker {i} stopped: {e}; shutting down");
                    exit = Err(e);
                }
            }
            break;
        }
        shutdown.trigger();
        let grace = shared.config.global.grace_period.0;
        let all_done = async { while done_rx.recv().await.is_some() {} };
        tokio::select! {
            _ = all_done => {}
            _ = term.recv() => log::warn!("second signal: exiting now"),
            _ = int.recv() => log::warn!("second signal: exiting now"),
            _ = tokio::time::sleep(grace + std::time::Duration::from_secs(1)) => log::warn!("workers did not stop in time"),
        }
    });
    let c = shared.variants.stats();
    if c.variants > 0 {
        log::info!(
            "compression: {} file variants built once, {:.1} ms CPU, {} -> {} bytes",
            c.variants,
            c.cpu.as_secs_f64() * 1e3,
            c.bytes_in,
            c.bytes_out
        );
    }
    if let Some((_, path)) = &control {
        let _ = std::fs::remove_file(path);
    }
    for path in &listeners.unix_paths {
        let _ = std::fs::remove_file(path);
    }
    exit
}

/// Raises the soft open-file limit to the hard limit: each connection is a
/// descriptor, and the usual soft limit (1024) is below max_connections.
fn raise_fd_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        if soft < hard {
            let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
        }
    }
}
