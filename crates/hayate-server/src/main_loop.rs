//! The main thread once the workers serve: control commands (`hayate
//! status|reload|upgrade|stop|purge`), signals (TERM and INT stop, HUP
//! reloads, USR1 reopens the logs) and a worker's failure, until hayate
//! stops; then the drain, bounded by the grace period. With one worker, the
//! worker serves on this thread's event loop too (`crate::run`), and what
//! runs here without waiting (a reload reading and checking the
//! configuration, a purge) holds its requests for as long as it takes; an
//! upgrade's wait for the new process runs on a blocking thread.

use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use hayate_core::shutdown::Shutdown;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::mpsc;

use crate::cached::{self, CacheSlot};
use crate::control::{self, ControlCommand};
use crate::handoff::HandoffSet;
use crate::reload::Reloader;
use crate::status_json::ServerInfo;
use crate::StatusFn;

/// The signals hayate handles, registered before its sockets are bound (a
/// signal's default action would end it).
pub struct Signals {
    term: Signal,
    int: Signal,
    hup: Signal,
    usr1: Signal,
}

impl Signals {
    /// Registers the handlers (inside a runtime).
    pub fn register() -> io::Result<Signals> {
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
            usr1: signal(SignalKind::user_defined1())?,
        })
    }
}

/// What the loop works with.
pub struct MainLoop<'a> {
    /// The control socket, when there is one.
    pub control: Option<&'a tokio::net::UnixListener>,
    /// The control socket's path and what its pid file says, rewritten
    /// when a reload changes the listeners.
    pub pid_file: Option<(PathBuf, control::PidFile)>,
    /// The signals it handles.
    pub signals: Signals,
    /// What `status` answers.
    pub status: Option<StatusFn>,
    /// Called once a reload applied the configuration (the apps' roll).
    pub on_reload: &'a dyn Fn(&hayate_config::Config, Option<&str>) -> String,
    /// The supervised apps' names.
    pub app_names: &'a dyn Fn() -> Vec<String>,
    /// `start|stop|restart APP` on an app of [`Self::app_names`].
    pub on_app: &'a dyn Fn(control::AppAction, &str) -> String,
    /// Called on SIGUSR1 once the access log is reopened (the app log).
    pub on_reopen_logs: &'a dyn Fn() -> io::Result<()>,
    /// Applies configuration reloads.
    pub reloader: Reloader<'a>,
    /// The response cache, for purges.
    pub cache: CacheSlot,
    /// The sockets an upgrade hands over; closed when hayate stops, so the
    /// listeners close with the workers' accept loops.
    pub handoff: Arc<Mutex<HandoffSet>>,
    /// The binary an upgrade starts.
    pub executable: PathBuf,
    /// What the status page shows of the server (when it last reloaded).
    pub info: Arc<ServerInfo>,
    /// Tells the workers to stop.
    pub shutdown: Shutdown,
    /// Where a worker reports that it ended.
    pub workers_done: mpsc::UnboundedReceiver<crate::worker::Ended>,
}

/// How the loop ended.
pub struct Ending {
    /// A new hayate took the sockets over (its files are its own now).
    pub handed_over: bool,
    /// A worker's failure, if that ended it.
    pub result: io::Result<()>,
}

impl MainLoop<'_> {
    /// Runs until hayate stops, then drains.
    pub async fn run(mut self) -> Ending {
        let mut ending = Ending {
            handed_over: false,
            result: Ok(()),
        };
        loop {
            let accept_control = async {
                match self.control {
                    Some(l) => l.accept().await.map(|(s, _)| s),
                    None => std::future::pending().await,
                }
            };
            let s = &mut self.signals;
            tokio::select! {
                conn = accept_control => {
                    let Ok(conn) = conn else { continue };
                    let Ok((command, pending)) = control::read_command(conn).await else { continue };
                    let answer = self.answer(&command, &mut ending).await;
                    if let Err(e) = pending.answer(answer).await {
                        log::debug!("control answer: {e}");
                    }
                    match command {
                        ControlCommand::Stop => log::info!("control: stop requested; shutting down"),
                        ControlCommand::Upgrade if ending.handed_over => {
                            log::info!("upgraded: the new hayate serves; this one drains and exits")
                        }
                        _ => continue,
                    }
                }
                _ = s.term.recv() => log::info!("SIGTERM: shutting down"),
                _ = s.int.recv() => log::info!("SIGINT: shutting down"),
                _ = s.hup.recv() => {
                    log::info!("SIGHUP: reloading");
                    if reload(&mut self.reloader, self.on_reload, None).await.is_ok() {
                        self.reloaded();
                    }
                    continue;
                }
                _ = s.usr1.recv() => {
                    match self.reloader.reopen_logs().and_then(|()| (self.on_reopen_logs)()) {
                        Ok(()) => log::info!("SIGUSR1: logs reopened"),
                        Err(e) => log::error!("SIGUSR1: reopening the logs failed, writing on to the old files: {e}"),
                    }
                    continue;
                }
                Some((i, r)) = self.workers_done.recv() => {
                    let e = r.err().unwrap_or_else(|| io::Error::other("worker exited"));
                    log::error!("worker {i} stopped: {e}; shutting down");
                    ending.result = Err(e);
                }
            }
            break;
        }
        self.drain().await;
        ending
    }

    /// What a control command answers (acting on it first).
    async fn answer(
        &mut self,
        command: &ControlCommand,
        ending: &mut Ending,
    ) -> Result<String, String> {
        match command {
            ControlCommand::Status => {
                let mut answer = self.status.as_ref().map(|s| s()).unwrap_or_default();
                answer.extend(self.reloader.shared_tier_summary());
                answer.extend(self.reloader.certificate_summary());
                Ok(answer)
            }
            ControlCommand::Reload(Some(app)) | ControlCommand::App(_, app)
                if !(self.app_names)().contains(app) =>
            {
                Err(format!(
                    "no app named {app:?} runs (apps: {})\n",
                    match (self.app_names)().as_slice() {
                        [] => "none".to_string(),
                        names => names.join(", "),
                    }
                ))
            }
            ControlCommand::App(action, app) => {
                log::info!("control: {} {app}", action.as_str());
                Ok((self.on_app)(*action, app))
            }
            ControlCommand::Reload(app) => {
                log::info!(
                    "control: reloading {}",
                    app.as_deref().unwrap_or("everything")
                );
                let answer = reload(&mut self.reloader, self.on_reload, app.as_deref()).await;
                if answer.is_ok() {
                    self.reloaded();
                }
                answer
            }
            ControlCommand::Stop => Ok("stopping\n".to_string()),
            ControlCommand::Upgrade => {
                log::info!("control: upgrading to {}", self.executable.display());
                let answer = upgrade(&self.handoff, &self.executable).await;
                ending.handed_over = answer.is_ok();
                answer
            }
            ControlCommand::Logs => Ok(self
                .reloader
                .log_files()
                .iter()
                .map(|(what, path)| format!("{what} {}\n", path.display()))
                .collect()),
            ControlCommand::PurgeUrl(url) => {
                Ok(cached::purge(self.cache.load().as_deref(), Some(url), None))
            }
            ControlCommand::PurgeTag(tag) => {
                Ok(cached::purge(self.cache.load().as_deref(), None, Some(tag)))
            }
        }
    }

    /// After a reload that applied: the status page's time, and the pid
    /// file's listeners.
    fn reloaded(&mut self) {
        self.info.reloaded();
        let listen = &self.reloader.config().global.listen;
        if let Some((path, about)) = &mut self.pid_file {
            let now: Vec<String> = listen.iter().map(crate::handoff::listen_key).collect();
            if about.listen != now {
                about.listen = now;
                if let Err(e) = about.write(path) {
                    log::warn!("{e}");
                }
            }
        }
    }

    /// Stops the workers and waits for them, up to the grace period (and a
    /// second to spare), or a second signal.
    async fn drain(&mut self) {
        // The listeners close with the workers' accept loops: new
        // connections are refused (or go to the hayate that took over).
        self.handoff
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        self.shutdown.trigger();
        let grace = self.reloader.config().global.grace_period.0;
        let done = &mut self.workers_done;
        let all_done = async { while done.recv().await.is_some() {} };
        let s = &mut self.signals;
        tokio::select! {
            _ = all_done => {}
            _ = s.term.recv() => log::warn!("second signal: exiting now"),
            _ = s.int.recv() => log::warn!("second signal: exiting now"),
            _ = tokio::time::sleep(grace + std::time::Duration::from_secs(1)) => log::warn!("workers did not stop in time"),
        }
    }
}

/// How long a new hayate may take to serve (its app's start included) before
/// an upgrade gives up on it.
const UPGRADE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// `hayate upgrade`: starts the binary at `executable` with this process's
/// arguments and its sockets; `Ok` once it serves (this one then drains and
/// exits), `Err` with why not (this one keeps serving).
async fn upgrade(
    handoff: &Arc<Mutex<HandoffSet>>,
    executable: &std::path::Path,
) -> Result<String, String> {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let (handoff, executable) = (handoff.clone(), executable.to_path_buf());
    let started = tokio::task::spawn_blocking(move || {
        let handoff = handoff.lock().unwrap_or_else(|e| e.into_inner());
        handoff.start_successor(&executable, &args, UPGRADE_TIMEOUT)
    })
    .await
    .map_err(|e| format!("upgrade: {e}\n"))?;
    match started {
        Ok(pid) => Ok(format!(
            "upgraded: pid {pid} serves now; pid {} drains and exits\n",
            std::process::id()
        )),
        Err(e) => {
            log::error!("upgrade failed, this hayate keeps serving: {e}");
            Err(format!(
                "upgrade failed; this hayate (pid {}) keeps serving: {e}\n",
                std::process::id()
            ))
        }
    }
}

/// Reloads the configuration, then the app (`on_reload`: its instances roll
/// whether or not the configuration changed, a reload being also how new
/// app code is deployed); logs the outcome and returns it for `hayate
/// reload`.
async fn reload(
    reloader: &mut Reloader<'_>,
    on_reload: &dyn Fn(&hayate_config::Config, Option<&str>) -> String,
    app: Option<&str>,
) -> Result<String, String> {
    match reloader.reload().await {
        Ok(mut report) => {
            report.push_str(&on_reload(reloader.config(), app));
            for line in report.lines() {
                log::info!("reload: {line}");
            }
            Ok(report)
        }
        Err(errors) => {
            for line in errors.lines() {
                log::error!("reload refused, the running configuration stays: {line}");
            }
            Err(format!(
                "reload refused; the running configuration stays\n{errors}"
            ))
        }
    }
}
