//! hayate's server: listeners, workers, the HTTP/1.1 connection loop,
//! routing and the request pipeline (`pipeline.rs`), combining the feature
//! crates.
//!
//! The engine is our own codec over httparse rather than hyper
//! (`hayate_core::h1`): the connection writes a head and a small body in
//! one syscall, batches pipelined responses, sends large files with
//! sendfile(2), and the codec enforces the framing rules itself. The
//! measurements behind that choice are in docs/decisions/0001-http-engine.md.

mod accel;
pub mod access_log;
pub mod admin;
pub mod budget;
mod buffers;
pub mod cached;
mod cached_range;
mod client_io;
pub mod compression;
mod conn;
mod conn_body;
pub mod control;
mod h2_conn;
mod h2_tunnel;
mod h3_conn;
pub mod handoff;
mod http_map;
pub mod listen;
mod main_loop;
mod otel;
pub mod pipeline;
pub mod policy;
mod proxy_protocol;
pub mod reload;
pub mod request_metrics;
pub mod router;
mod slow_request;
pub mod status_json;
mod status_page;
pub mod upstream_metrics;
mod worker;

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use hayate_config::app::AdminAddr;
use hayate_config::values::Listen;
use hayate_config::Config;
use hayate_core::app::AppTable;
use hayate_core::identity::Identity;
use hayate_core::metrics::{family, sample, Kind, Metrics};
use hayate_core::shutdown::Shutdown;
use hayate_core::transport::{Listener, Scheme};

use crate::access_log::Sink;
use crate::cached::CacheSlot;
use crate::handoff::HandoffSet;
use crate::main_loop::MainLoop;
use crate::reload::{ReloadParts, Reloader};
use crate::worker::{Blueprint, EventLoop, Shared};

/// Called with the bound addresses once every worker is accepting.
pub type OnListening<'a> = Box<dyn FnOnce(&[Listen]) + 'a>;

/// What `status` answers (control socket, admin `/status`); any thread.
pub type StatusFn = Arc<dyn Fn() -> String + Send + Sync>;

/// Called once a reload applied the configuration, with the app a
/// `reload APP` named (`None`: every app); returns what it did.
pub type OnReload<'a> = Box<dyn Fn(&Config, Option<&str>) -> String + 'a>;

/// Called by a reload before the new configuration's routers are built:
/// starts the apps it declares that do not run yet (their routes need
/// them); returns what it did.
pub type StartNewApps<'a> = Box<dyn Fn(&Config) -> String + 'a>;

/// `hayate start|stop|restart APP`: acts on the app, returns what it did.
pub type OnApp<'a> = Box<dyn Fn(control::AppAction, &str) -> String + 'a>;

/// What the binary hooks into a running server.
pub struct Hooks<'a> {
    /// See [`OnListening`].
    pub on_listening: OnListening<'a>,
    /// Called on SIGHUP and `hayate reload [APP]` once the new
    /// configuration is in place (the apps' commands and rolling reloads);
    /// returns what it did, for the reload's report.
    pub on_reload: OnReload<'a>,
    /// See [`StartNewApps`].
    pub start_new_apps: StartNewApps<'a>,
    /// The names of the supervised apps, now (`hayate reload APP` must
    /// name one; a reload may add or remove apps).
    pub app_names: Box<dyn Fn() -> Vec<String> + 'a>,
    /// `hayate start|stop|restart APP`, for an app of `app_names`; returns
    /// what it did.
    pub on_app: OnApp<'a>,
    /// Reads the configuration again for a reload; `None`: there is no
    /// file to re-read.
    pub reread: Option<reload::Reread<'a>>,
    /// Sockets handed over by the hayate this one replaces (`hayate
    /// upgrade`), if any.
    pub inherited: handoff::Inherited,
    /// Called on SIGUSR1 after the access log is reopened (the app log).
    pub on_reopen_logs: Box<dyn Fn() -> io::Result<()> + 'a>,
    /// The `--config` file, if any (shown by the admin status page).
    pub config_file: Option<PathBuf>,
    /// Where the control socket goes, if there is one.
    pub control: Option<control::ControlPlace>,
    /// What `status` answers.
    pub status: Option<StatusFn>,
    /// The metrics registry served on the admin listener. The server adds
    /// its own sources (requests per route, connections); subsystems add
    /// theirs with [`Metrics::register`].
    pub metrics: Metrics,
}

/// Runs the server until SIGTERM or SIGINT, then shuts down gracefully.
/// `app` holds the supervised apps' slots, for routes that send to them.
pub fn run(mut config: Config, app: AppTable, mut hooks: Hooks<'_>) -> io::Result<()> {
    let budget = budget::Budget::new(raise_fd_limit(), config.global.workers.get());
    warn_of_a_low_limit(&budget, config.global.max_connections);
    // What an upgrade starts: this binary's path as it was at start (a new
    // build installed there since is what runs), with the same arguments.
    let executable = std::env::current_exe()?;
    let mut inherited = std::mem::take(&mut hooks.inherited);
    let mut handoff = HandoffSet::default();
    let as_read = config.clone();
    // Open everything once here, so a bad root or log path fails before
    // any socket is bound.
    let cache = router::response_cache(&config);
    let variants = compression::store(&config.global);
    router::Router::build(&config, &app, cache.as_ref(), &variants, None, None)?;
    let log_sink = Sink::from_config(&config.global)?;
    // Certificates are loaded before any socket is bound, like roots.
    let tls = hayate_tls::TlsServer::from_config(&config, shared_acme_store(&config)?)
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
    // Resolved before anything is bound: an unknown user fails the start.
    let run_as = match &config.global.user {
        Some(user) => Some(
            Identity::resolve(user, config.global.group.as_deref())
                .map_err(|e| io::Error::new(e.kind(), format!("user: {e}")))?,
        ),
        None => None,
    };
    let workers = config.global.workers.get();
    let listeners = listen::bind_all(
        &config.global.listen,
        workers,
        config.global.http3,
        &mut inherited,
        &mut handoff,
    )?;
    // Ports resolved (port 0), for what names them (the HTTPS redirect).
    config.global.listen = listeners.addresses.clone();

    // The main thread's event loop. With one worker, the worker serves on
    // it too (below): a process of one thread has a file table of one user,
    // which the kernel reads without taking a reference on every socket
    // call, as in an nginx worker (0.6 µs of a proxied request's 18;
    // decision 0005).
    let event_loop = EventLoop::new()?;
    // The admin listener is bound before any worker starts, like the others.
    let admin = match &config.global.admin {
        Some(addr) => {
            let inherited = inherited.take_admin();
            let (socket, url) = event_loop.block_on(async { admin::bind(addr, inherited) })?;
            handoff.set_admin(&socket, matches!(addr, AdminAddr::Tcp(_)))?;
            let listener = event_loop.block_on(async { Listener::new(socket, Scheme::Http) })?;
            Some((listener, url))
        }
        None => None,
    };
    let request_metrics = admin.is_some().then(request_metrics::RequestMetrics::new);
    if let Some(m) = &request_metrics {
        hooks.metrics.register(m.clone());
    }
    let upstream_metrics = request_metrics
        .clone()
        .map(upstream_metrics::UpstreamMetrics::new);
    if let Some(m) = &upstream_metrics {
        hooks.metrics.register(m.clone());
    }
    if admin.is_some() {
        let v = variants.clone();
        hooks
            .metrics
            .register_fn(move |out| compression::render_metrics(&v, out));
        hooks.metrics.register_fn(policy::render_metrics);
        hooks.metrics.register_fn(proxy_protocol::render_metrics);
        if config.global.http3 {
            hooks.metrics.register_fn(h3_conn::render_metrics);
        }
        hooks.metrics.register_fn(otel::render_metrics);
    }
    let info = Arc::new(status_json::ServerInfo::new(
        workers,
        hooks.config_file.clone(),
    ));
    if let Some(c) = &cache {
        let c = c.clone();
        hooks.metrics.register_fn(move |out| c.render_metrics(out));
    }
    let cache_slot: CacheSlot = Arc::new(arc_swap::ArcSwapOption::new(cache.clone()));
    let shared_tier = match &config.global.shared {
        Some(url) => {
            let tier =
                event_loop.block_on(async { start_shared_tier(url, &config, &cache_slot) })?;
            hooks.metrics.register(tier.metrics());
            hooks.metrics.register(tier.l2());
            hooks.metrics.register(tier.fleet_limits());
            policy::fleet_rate::install(tier.fleet_limits());
            if let Some(c) = &cache {
                announce_to(c, &tier);
            }
            Some(tier)
        }
        None => None,
    };
    // Handled from now on (their default actions would end hayate).
    let signals_seen = event_loop.block_on(async { main_loop::Signals::register() })?;

    let control = match &hooks.control {
        Some(place) => {
            let (listener, path) = match inherited.take_control() {
                Some(l) => {
                    // Where the hayate this one replaces had bound it (a
                    // directory's second hayate has `HASH-2.sock`).
                    let path = match l.local_addr()?.as_pathname() {
                        Some(p) => p.to_path_buf(),
                        None => {
                            return Err(io::Error::other(
                                "the control socket handed over has no path",
                            ))
                        }
                    };
                    l.set_nonblocking(true)?;
                    let l = event_loop.block_on(async { tokio::net::UnixListener::from_std(l) })?;
                    (l, path)
                }
                None => event_loop.block_on(async { control::bind_control(place) })?,
            };
            handoff.set_control(&listener)?;
            let about = control::PidFile::of_this_process(
                hooks.config_file.as_deref(),
                &listeners.addresses,
            );
            about.write(&path)?;
            Some((listener, path, about))
        }
        None => None,
    };
    // Every socket is bound: from here on hayate runs as `user`, if set.
    if let Some(identity) = &run_as {
        identity.switch_to()?;
        log::info!(
            "running as {} (uid {}, gid {})",
            identity.name,
            identity.uid,
            identity.gid
        );
    }

    // The exporter starts here, so a bad otel_ca is refused before anything
    // is served; the workers' generations take the same one.
    otel::Tracer::of(&config.global)?;
    let shutdown = Shutdown::new();
    let (publish, blueprint) = tokio::sync::watch::channel(Arc::new(Blueprint {
        number: 0,
        route_slots: request_metrics.as_ref().map(|m| m.slots(&config)),
        listen_keys: as_read
            .global
            .listen
            .iter()
            .map(|l| handoff::listen_key(l).into())
            .collect(),
        added: Vec::new(),
        config: Arc::new(config),
        cache: cache.clone(),
        log_sink,
    }));
    let (built_tx, built_rx) = tokio::sync::mpsc::unbounded_channel();
    let shared = Shared {
        blueprint,
        built: built_tx,
        connections: Arc::new(budget::Connections::new(budget.clients)),
        app,
        request_metrics,
        upstream_metrics,
        variants,
        tls,
    };
    let open = shared.connections.clone();
    hooks.metrics.register_fn(move |out| {
        let name = "hayate_connections_open";
        family(out, name, "Open client connections", Kind::Gauge);
        sample(out, name, &[], open.open());
        let name = "hayate_connections_budget";
        let help = "Client connections held at once: what the open-file limit allows";
        family(out, name, help, Kind::Gauge);
        sample(out, name, &[], budget.clients);
    });
    let (done_tx, done_rx) = tokio::sync::mpsc::unbounded_channel::<worker::Ended>();
    let mut on_main_thread = None;
    for (i, ls) in listeners.per_worker.into_iter().enumerate() {
        let shared = shared.clone();
        let watch = shutdown.watch();
        let done = done_tx.clone();
        if workers == 1 {
            on_main_thread = Some((ls, shared, watch, done));
            continue;
        }
        std::thread::Builder::new()
            .name(format!("hayate-w{i}"))
            .spawn(move || match EventLoop::new() {
                Ok(event_loop) => {
                    event_loop.block_on(worker::serve_and_report(i, shared, ls, watch, done))
                }
                Err(e) => {
                    let _ = done.send((i, Err(e)));
                }
            })?;
    }
    drop(done_tx);
    (hooks.on_listening)(&listeners.addresses);
    if let Some((listener, url)) = admin {
        log::info!(
            "admin listener on {url} (status page at /, GET /status.json, /metrics, /status, POST /purge)"
        );
        event_loop.handle().spawn(admin::serve(
            listener,
            admin::Sources {
                metrics: hooks.metrics.clone(),
                status: hooks.status.clone(),
                cache: cache_slot.clone(),
                info: info.clone(),
            },
        ));
    }
    // Serving: a hayate this one replaces may stop now.
    inherited.say_ready();

    let handoff = Arc::new(std::sync::Mutex::new(handoff));
    let unix_paths = Arc::new(std::sync::Mutex::new(listeners.unix_paths));
    let reloader = Reloader::new(ReloadParts {
        reread: hooks.reread,
        start_new_apps: hooks.start_new_apps,
        as_read,
        publish,
        built: built_rx,
        workers,
        app: shared.app.clone(),
        variants: shared.variants.clone(),
        cache: cache_slot.clone(),
        request_metrics: shared.request_metrics.clone(),
        metrics: hooks.metrics.clone(),
        handoff: handoff.clone(),
        unix_paths: unix_paths.clone(),
        tls: shared.tls.clone(),
        shared_tier,
    });
    let ending = event_loop.block_on(async {
        if let Some((ls, shared, watch, done)) = on_main_thread {
            tokio::task::spawn_local(worker::serve_and_report(0, shared, ls, watch, done));
        }
        MainLoop {
            control: control.as_ref().map(|(l, _, _)| l),
            pid_file: control
                .as_ref()
                .map(|(_, path, about)| (path.clone(), about.clone())),
            signals: signals_seen,
            status: hooks.status.clone(),
            on_reload: &hooks.on_reload,
            app_names: &*hooks.app_names,
            on_app: &hooks.on_app,
            on_reopen_logs: &hooks.on_reopen_logs,
            reloader,
            cache: cache_slot,
            handoff,
            executable,
            info,
            shutdown,
            workers_done: done_rx,
        }
        .run()
        .await
    });
    otel::finish_at_exit();
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
    // Socket files handed over belong to the new hayate now.
    if !ending.handed_over {
        if let Some((_, path, _)) = &control {
            let _ = std::fs::remove_file(path);
            let _ = std::fs::remove_file(path.with_extension("pid"));
        }
        for path in unix_paths.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            let _ = std::fs::remove_file(path);
        }
    }
    ending.result
}

/// Where ACME keeps its state with the other boxes: Redis, when `shared`
/// is set and some certificates come from ACME.
fn shared_acme_store(
    config: &Config,
) -> io::Result<Option<Arc<dyn hayate_tls::acme_store::AcmeStore>>> {
    let g = &config.global;
    let Some(url) = g
        .shared
        .as_deref()
        .filter(|_| hayate_tls::uses_acme(config))
    else {
        return Ok(None);
    };
    let key = g.shared_key.as_deref().ok_or_else(|| {
        io::Error::other(
            "shared with tls = acme needs shared_key (or HAYATE_SHARED_KEY): 64 hex digits, \
             the same on every box (openssl rand -hex 32 makes one); it encrypts the private keys kept in Redis",
        )
    })?;
    let directory = hayate_tls::acme::directory_id(&g.acme_directory);
    let store = hayate_shared::RedisAcmeStore::new(url, g.shared_timeout.0, &directory, key)
        .map_err(io::Error::other)?;
    Ok(Some(Arc::new(store)))
}

/// Starts the shared tier on the current runtime: purges and invalidations
/// (other boxes', and this box's again once Redis's copies are gone) are
/// applied to whichever cache runs then.
fn start_shared_tier(
    url: &str,
    config: &Config,
    cache: &CacheSlot,
) -> io::Result<hayate_shared::SharedTier> {
    let cache = cache.clone();
    let settings = hayate_shared::SharedSettings {
        url: url.to_string(),
        timeout: config.global.shared_timeout.0,
        max_object: config.global.shared_max_object.0,
    };
    hayate_shared::SharedTier::start(settings, move |event| {
        if let Some(cache) = cache.load_full() {
            let removed = cache.apply(event);
            log::debug!("shared tier: {event:?} removed {removed}");
        }
    })
    .map_err(io::Error::other)
}

/// Makes `cache` announce this box's purges and invalidations to the
/// others, and share its responses through the L2 tier.
pub(crate) fn announce_to(cache: &hayate_cache::ResponseCache, tier: &hayate_shared::SharedTier) {
    cache.share_through(tier.l2());
    let tier = tier.clone();
    cache.announce_to(Box::new(move |event| tier.announce(event)));
}

/// Raises the soft open-file limit to the hard limit (each connection is a
/// descriptor, and the usual soft limit, 1024, is below max_connections);
/// returns the soft limit then in force.
fn raise_fd_limit() -> u64 {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => hard,
            Err(_) => soft,
        },
        Ok((soft, _)) => soft,
        // Unknown: no budget of ours below the kernel's own refusals.
        Err(_) => u64::MAX,
    }
}

/// Says, at startup, what a low open-file limit allows.
fn warn_of_a_low_limit(budget: &budget::Budget, max_connections: u32) {
    if let Some(note) = budget.low_limit_note(max_connections) {
        log::warn!("{note}");
    }
}
