//! Live configuration reload (SIGHUP, `hayate reload`): re-read the config
//! file, validate all of it, and on success have every worker build a new
//! generation from it and swap it in (`worker.rs`); on any error the running
//! configuration stays and the caller gets the errors.
//!
//! What carries over: requests in flight finish on the generation they
//! started with; open connections and tunnels are never touched; upstream
//! groups whose settings did not change keep their pooled connections
//! (`Router::build`); the response cache and the compressed variants are
//! kept; TLS certificates and session-ticket keys stay (certificate files
//! are watched on their own).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hayate_config::values::{Listen, ListenAddr, Scheme};
use hayate_config::{Config, ConfigErrors};
use hayate_core::app::AppTable;
use hayate_core::metrics::Metrics;
use tokio::sync::{mpsc, watch};

use crate::access_log::Sink;
use crate::cached::CacheSlot;
use crate::handoff::{listen_key, HandoffSet, Inherited};
use crate::listen::{self, BoundListener};
use crate::request_metrics::RequestMetrics;
use crate::router::{self, Router};
use crate::worker::{Blueprint, Built};

/// Reads the configuration again, as it was first read (the same file,
/// flags and environment).
pub type Reread<'a> = Box<dyn Fn() -> Result<Config, ConfigErrors> + 'a>;

/// How long workers may take to build a generation (opening roots, mostly)
/// before a reload reports them as not done.
const BUILD_TIMEOUT: Duration = Duration::from_secs(10);

/// Options that a reload cannot change in a running process, with why.
const NEEDS_RESTART: &[(&str, &str)] = &[
    ("workers", "workers are started at start"),
    ("admin", "the admin listener is bound at start"),
    ("control", "the control socket is bound at start"),
    ("tls", "the TLS setup is built at start"),
    ("tls_names", "the TLS setup is built at start"),
    ("state_dir", "the TLS setup is built at start"),
    ("acme_directory", "the TLS setup is built at start"),
    ("acme_email", "the TLS setup is built at start"),
    ("acme_ca_root", "the TLS setup is built at start"),
    ("acme_challenge", "the TLS setup is built at start"),
    ("acme_dns_server", "the TLS setup is built at start"),
    ("acme_dns_tsig_key", "the TLS setup is built at start"),
    ("acme_dns_zone", "the TLS setup is built at start"),
    ("acme_dns_hook", "the TLS setup is built at start"),
    ("acme_dns_hook_timeout", "the TLS setup is built at start"),
    ("acme_dns_resolver", "the TLS setup is built at start"),
    (
        "acme_dns_propagation_timeout",
        "the TLS setup is built at start",
    ),
    ("tls_on_demand", "the TLS setup is built at start"),
    ("tls_on_demand_ask", "the TLS setup is built at start"),
    ("tls_on_demand_timeout", "the TLS setup is built at start"),
    ("tls_on_demand_rate", "the TLS setup is built at start"),
    (
        "tls_on_demand_refusal_ttl",
        "the TLS setup is built at start",
    ),
    ("tls_handshake_timeout", "the TLS setup is built at start"),
    (
        "http3",
        "the QUIC endpoints and their TLS are set up at start",
    ),
    (
        "http3_early_data",
        "the QUIC endpoints and their TLS are set up at start",
    ),
    ("http3_gso", "the QUIC endpoints are set up at start"),
    (
        "http3_retry_above",
        "the QUIC endpoints are set up at start",
    ),
    ("error_log", "the error log is opened at start"),
    ("log_level", "the error log is set up at start"),
    ("cache_size", "the response cache is sized at start"),
    ("shared", "the shared tier is set up at start"),
    ("shared_timeout", "the shared tier is set up at start"),
    ("shared_key", "the TLS setup is built at start"),
    ("shared_max_object", "the shared tier is set up at start"),
    ("cache_max_object", "the response cache is set up at start"),
    (
        "cache_lock_timeout",
        "the response cache is set up at start",
    ),
    (
        "cache_lock_waiters",
        "the response cache is set up at start",
    ),
    (
        "cache_hit_for_miss",
        "the response cache is set up at start",
    ),
    (
        "compress_cache_size",
        "the compressed-variant store is set up at start",
    ),
    (
        "compress_max_file",
        "the compressed-variant store is set up at start",
    ),
    (
        "compress_queue",
        "the compressed-variant store is set up at start",
    ),
    ("app_listen", "the supervisor is set up at start"),
    ("app_protocol", "the supervisor is set up at start"),
    ("app_reload_parallel", "the supervisor is set up at start"),
    ("app_max_memory", "the supervisor is set up at start"),
    ("app_max_requests", "the supervisor is set up at start"),
    ("app_start_timeout", "the supervisor is set up at start"),
    ("app_ready_path", "the supervisor is set up at start"),
    ("app_log", "the supervisor is set up at start"),
    ("app_log_size", "the supervisor is set up at start"),
    ("app_log_keep", "the supervisor is set up at start"),
];

/// What a reload does to the listeners.
struct ListenChange {
    /// New listeners' sockets, per worker.
    added: Vec<Vec<BoundListener>>,
    /// Running listeners the new configuration does not name (resolved).
    removed: Vec<Listen>,
    /// The new configuration's listeners, resolved, in its order.
    resolved: Vec<Listen>,
}

/// The reload side of a running server.
pub struct Reloader<'a> {
    reread: Option<Reread<'a>>,
    start_new_apps: crate::StartNewApps<'a>,
    /// The configuration as read (before its listeners were resolved).
    as_read: Config,
    running: Arc<Blueprint>,
    publish: watch::Sender<Arc<Blueprint>>,
    built: mpsc::UnboundedReceiver<Built>,
    workers: usize,
    app: AppTable,
    variants: Arc<hayate_compress::VariantStore>,
    cache: CacheSlot,
    request_metrics: Option<Arc<RequestMetrics>>,
    metrics: Metrics,
    handoff: Arc<Mutex<HandoffSet>>,
    unix_paths: Arc<Mutex<Vec<PathBuf>>>,
    tls: Option<Arc<hayate_tls::TlsServer>>,
    shared_tier: Option<hayate_shared::SharedTier>,
}

/// What a [`Reloader`] works with, besides the running blueprint.
pub struct ReloadParts<'a> {
    /// See [`Reread`]; `None` when there is no file to read again.
    pub reread: Option<Reread<'a>>,
    /// See [`crate::StartNewApps`].
    pub start_new_apps: crate::StartNewApps<'a>,
    /// The configuration as read at start.
    pub as_read: Config,
    /// Where blueprints are published to the workers.
    pub publish: watch::Sender<Arc<Blueprint>>,
    /// Where the workers report.
    pub built: mpsc::UnboundedReceiver<Built>,
    /// How many workers report.
    pub workers: usize,
    /// The supervised app's slots.
    pub app: AppTable,
    /// Compressed variants of files.
    pub variants: Arc<hayate_compress::VariantStore>,
    /// The response cache.
    pub cache: CacheSlot,
    /// Request counters.
    pub request_metrics: Option<Arc<RequestMetrics>>,
    /// The metrics registry (a cache made by a reload registers there).
    pub metrics: Metrics,
    /// The sockets an upgrade would hand over (a reload adds and removes
    /// listeners there too).
    pub handoff: Arc<Mutex<HandoffSet>>,
    /// Unix socket files of the listeners, removed when hayate exits.
    pub unix_paths: Arc<Mutex<Vec<PathBuf>>>,
    /// The TLS side, when HTTPS is set up (an https listener can be added
    /// only then).
    pub tls: Option<Arc<hayate_tls::TlsServer>>,
    /// The shared tier, when several hayates share purges (a cache made by
    /// a reload announces to it).
    pub shared_tier: Option<hayate_shared::SharedTier>,
}

impl<'a> Reloader<'a> {
    /// The shared tier's state in one line, when there is one (`hayate
    /// status`).
    pub fn shared_tier_summary(&self) -> Option<String> {
        self.shared_tier.as_ref().map(|t| t.summary())
    }

    /// The certificates served and how each was obtained, for `hayate
    /// status`; `None` when no listener speaks TLS.
    pub fn certificate_summary(&self) -> Option<String> {
        crate::status_json::certificate_lines(&self.metrics)
    }

    /// A reloader for the server running `parts.publish`'s blueprint.
    pub fn new(parts: ReloadParts<'a>) -> Reloader<'a> {
        let running = parts.publish.borrow().clone();
        Reloader {
            reread: parts.reread,
            start_new_apps: parts.start_new_apps,
            as_read: parts.as_read,
            running,
            publish: parts.publish,
            built: parts.built,
            workers: parts.workers,
            app: parts.app,
            variants: parts.variants,
            cache: parts.cache,
            request_metrics: parts.request_metrics,
            metrics: parts.metrics,
            handoff: parts.handoff,
            unix_paths: parts.unix_paths,
            tls: parts.tls,
            shared_tier: parts.shared_tier,
        }
    }

    /// Opens the access log and the error log files again (SIGUSR1).
    pub fn reopen_logs(&self) -> std::io::Result<()> {
        if let Some(sink) = &self.running.log_sink {
            sink.reopen()?;
        }
        match hayate_core::log::file() {
            Some(file) => file.reopen(),
            None => Ok(()),
        }
    }

    /// The log files of the running configuration, by what they hold
    /// (`access`, `error`, `app`: every app's), for `hayate logs`.
    pub fn log_files(&self) -> Vec<(&'static str, std::path::PathBuf)> {
        let g = &self.running.config.global;
        let mut files = Vec::new();
        if let Some(path) = self.running.log_sink.as_ref().and_then(|s| s.path()) {
            files.push(("access", path.to_path_buf()));
        }
        if let Some(path) = &g.error_log {
            files.push(("error", path.clone()));
        }
        // Each app's own log (`log` in an [[app]]), else the shared one;
        // their lines name the app's instances (`api[0]`).
        let config = &self.running.config;
        let logs = config.apps.iter().filter_map(|a| a.options(g).log);
        for path in g.app_log.iter().cloned().chain(logs) {
            if !files.iter().any(|(_, p)| *p == path) {
                files.push(("app", path));
            }
        }
        files
    }

    /// The running configuration.
    pub fn config(&self) -> &Arc<Config> {
        &self.running.config
    }

    /// Reloads: `Ok` with what changed, or `Err` with every reason the new
    /// configuration was refused (the running one stays).
    pub async fn reload(&mut self) -> Result<String, String> {
        let Some(reread) = &self.reread else {
            return Ok("no config file: nothing to re-read\n".into());
        };
        let mut next = reread().map_err(|e| format!("{e}\n"))?;
        let running = self.running.config.clone();
        let mut notes = Vec::new();
        // What cannot change keeps its running value; the note says so.
        for (key, why) in NEEDS_RESTART {
            if self.as_read.global.changed_keys(&next.global).contains(key) {
                notes.push(format!("{key}: not changed until a restart ({why})"));
            }
        }
        let as_read = next.clone();
        next.global.workers = running.global.workers;
        next.global.admin = running.global.admin.clone();
        next.global.control = running.global.control.clone();
        // HTTP/3's endpoints and TLS are as hayate started: a reload that
        // turned it on must not advertise it (Alt-Svc) on a port with no
        // QUIC endpoint.
        next.global.http3 = running.global.http3;
        next.global.http3_early_data = running.global.http3_early_data;
        next.global.http3_gso = running.global.http3_gso;
        next.global.http3_retry_above = running.global.http3_retry_above;
        // Certificate files and local-CA names: loaded (all or none) now,
        // served once the reload cannot fail any more.
        // Client CAs and CRLs are read again on every reload that has
        // them: a reload is how a replaced CRL file is taken.
        let client_certs = next.sites.iter().any(|s| {
            s.tls.client_certs(&next.global).auth != hayate_config::values::ClientAuth::Off
        });
        let keys = [
            "tls_cert",
            "tls_key",
            "tls_names",
            "tls_client_auth",
            "tls_client_ca",
            "tls_client_crl",
        ];
        let certificates_changed = client_certs
            || keys
                .iter()
                .any(|k| running.global.changed_keys(&next.global).contains(k))
            || next
                .sites
                .iter()
                .map(|s| format!("{:?} {:?}", s.hosts, s.tls))
                .ne(running
                    .sites
                    .iter()
                    .map(|s| format!("{:?} {:?}", s.hosts, s.tls)));
        let certificates = match (&self.tls, certificates_changed) {
            (Some(tls), true) => Some(
                tls.load_certificates(&next)
                    .map_err(|e| format!("HTTPS: {e}\n"))?,
            ),
            _ => None,
        };
        let cache = match self.cache.load_full() {
            Some(cache) => Some(cache),
            None => router::response_cache(&next).inspect(|c| {
                if let Some(tier) = &self.shared_tier {
                    crate::announce_to(c, tier);
                }
                let c = c.clone();
                self.metrics.register_fn(move |out| c.render_metrics(out));
            }),
        };
        let log_changed = running
            .global
            .changed_keys(&next.global)
            .iter()
            .any(|k| k.starts_with("access_log") && *k != "access_log_format");
        let log_sink = match log_changed {
            false => self.running.log_sink.clone(),
            true => Sink::from_config(&next.global).map_err(|e| format!("{e}\n"))?,
        };
        // Apps new in the file start now, their routes needing them (their
        // requests wait in queue until an instance is ready). A reload
        // refused after this point leaves them running with no route until
        // the next reload takes the file.
        notes.extend((self.start_new_apps)(&next).lines().map(String::from));
        // Everything a worker will open, opened once here first: a root that
        // does not exist fails the reload, not a worker.
        Router::build(&next, &self.app, cache.as_ref(), &self.variants, None, None)
            .map_err(|e| format!("{e}\n"))?;

        // Listeners last: once bound, nothing else can refuse the reload.
        let change = self.change_listeners(&as_read.global.listen)?;
        next.global.listen = change.resolved;
        if let (Some(tls), Some(certificates)) = (&self.tls, certificates) {
            tls.use_certificates(certificates);
            notes.push("HTTPS: certificates loaded again".into());
        }

        let plan = Arc::new(Blueprint {
            number: self.running.number + 1,
            config: Arc::new(next),
            cache: cache.clone(),
            log_sink,
            route_slots: self.request_metrics.as_ref().map(|m| m.slots(&as_read)),
            listen_keys: as_read
                .global
                .listen
                .iter()
                .map(|l| listen_key(l).into())
                .collect(),
            added: change.added.into_iter().map(Mutex::new).collect(),
        });
        self.publish.send_replace(plan.clone());
        self.cache.store(cache);
        let failures = self.wait_for_workers(plan.number).await;
        // Every worker has let go of the removed listeners (their accept
        // loops end at the swap): the last copies close here.
        self.forget_listeners(&change.removed);
        self.running = plan;
        self.as_read = as_read;
        let mut answer = String::new();
        let changes = hayate_config::changes(&running, &self.running.config);
        if changes.is_empty() {
            answer.push_str("configuration unchanged\n");
        }
        for line in changes.iter().chain(&notes) {
            answer.push_str(line);
            answer.push('\n');
        }
        if failures.is_empty() {
            Ok(answer)
        } else {
            Err(answer + &failures.join(""))
        }
    }

    /// Binds the listeners of `wanted` (as configured) that do not run yet,
    /// for every worker, and says which running ones go. Nothing is kept
    /// bound when one fails (the reload is refused).
    fn change_listeners(&mut self, wanted: &[Listen]) -> Result<ListenChange, String> {
        let running: Vec<(String, Listen)> = self
            .as_read
            .global
            .listen
            .iter()
            .map(listen_key)
            .zip(self.running.config.global.listen.iter().cloned())
            .collect();
        let wanted_keys: Vec<String> = wanted.iter().map(listen_key).collect();
        let new: Vec<Listen> = wanted
            .iter()
            .filter(|l| running.iter().all(|(k, _)| *k != listen_key(l)))
            .cloned()
            .collect();
        if let Some(l) = new
            .iter()
            .find(|l| l.scheme == Scheme::Https && self.tls.is_none())
        {
            return Err(format!(
                "listen {}: hayate started without HTTPS; an https listener needs `hayate upgrade` or a restart\n",
                listen_key(l)
            ));
        }
        let bound = {
            let mut handoff = self.handoff.lock().unwrap_or_else(|e| e.into_inner());
            // HTTP/3 as hayate started (its QUIC TLS is built at start).
            let http3 = self.tls.as_ref().is_some_and(|t| t.http3().is_some());
            let bound = listen::bind_all(
                &new,
                self.workers,
                http3,
                &mut Inherited::default(),
                &mut handoff,
            );
            if bound.is_err() {
                for l in &new {
                    handoff.remove_listener(l);
                }
            }
            bound.map_err(|e| format!("{e}\n"))?
        };
        let resolved = wanted_keys
            .iter()
            .map(|key| {
                running
                    .iter()
                    .find(|(k, _)| k == key)
                    .map(|(_, l)| l.clone())
                    .or_else(|| {
                        let i = new.iter().position(|l| listen_key(l) == *key)?;
                        bound.addresses.get(i).cloned()
                    })
                    .expect("every wanted listener runs or was just bound")
            })
            .collect();
        self.unix_paths
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(bound.unix_paths);
        let removed = running
            .into_iter()
            .filter(|(k, _)| !wanted_keys.contains(k))
            .map(|(_, l)| l)
            .collect();
        Ok(ListenChange {
            added: bound.per_worker,
            removed,
            resolved,
        })
    }

    /// Closes the copies this process keeps of removed listeners, and their
    /// socket files.
    fn forget_listeners(&self, removed: &[Listen]) {
        let mut handoff = self.handoff.lock().unwrap_or_else(|e| e.into_inner());
        let mut unix_paths = self.unix_paths.lock().unwrap_or_else(|e| e.into_inner());
        for l in removed {
            handoff.remove_listener(l);
            if let ListenAddr::Unix(path) = &l.addr {
                let _ = std::fs::remove_file(path);
                unix_paths.retain(|p| p != path);
            }
        }
    }

    /// Waits until every worker has built generation `number`; returns the
    /// failures.
    async fn wait_for_workers(&mut self, number: u64) -> Vec<String> {
        let mut failures = Vec::new();
        let mut waiting = self.workers;
        let deadline = tokio::time::Instant::now() + BUILD_TIMEOUT;
        while waiting > 0 {
            match tokio::time::timeout_at(deadline, self.built.recv()).await {
                Ok(Some((_, n, _))) if n != number => {} // an older reload's report
                Ok(Some((worker, _, result))) => {
                    waiting -= 1;
                    if let Err(e) = result {
                        failures.push(format!("worker {worker}: {e}\n"));
                    }
                }
                Ok(None) => break,
                Err(_) => {
                    failures.push(format!(
                        "{waiting} workers did not build the new configuration in {BUILD_TIMEOUT:?}\n"
                    ));
                    break;
                }
            }
        }
        failures
    }
}
