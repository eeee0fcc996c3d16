//! The app supervisor: runs N instances of a command, each told its own Unix
//! socket (Node's `server.listen(process.env.PORT)` takes a path) or
//! loopback TCP port in `PORT` and its slot in `HAYATE_INSTANCE`; marks an
//! instance ready once its socket accepts; restarts crashed instances with
//! exponential backoff and jitter, and stops restarting a crash loop;
//! reloads `reload_parallel` slots at a time (start the new instance, wait
//! until ready, switch, drain the old one at the proxy, stop it), keeping
//! the old instance when the new one fails. The same reload also comes
//! from the app's own triggers: a change of its files (`file_watch.rs`, a
//! build first: `build.rs`) and a schedule (`schedule.rs`). `hayate stop
//! APP` stops its instances until `hayate start APP` (`slot.rs` holds a
//! slot's life).
//!
//! It runs on its own thread with its own runtime and meets the proxy only
//! through [`AppSlots`] (hayate-core): the proxy reads each slot's current
//! instance and counts requests in flight on it.
//!
//! Each instance runs in its own process group; stopping sends SIGTERM to
//! the group, then SIGKILL after the stop timeout, so no orphan survives.

mod build;
mod file_watch;
mod instance;
mod loopback;
mod port_errors;
mod schedule;
mod slot;
mod status;
pub use file_watch::{WatchSpec, ALWAYS_IGNORED};
pub use hayate_core::logfile::RotatingLog;
pub use schedule::RestartTimes;
pub use status::{AllApps, AppStatus, InstanceFigures};
pub mod php;

use std::io;
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use hayate_core::app::AppSlots;
use hayate_core::identity::Identity;
use tokio::sync::{watch, Semaphore};

use slot::SlotTask;

/// What to run.
#[derive(Debug, Clone)]
pub struct AppSpec {
    /// The app's name, in logs (`api[0]`), status and metrics (`app`).
    pub name: String,
    /// Program and arguments.
    pub command: Vec<String>,
    /// Working directory, re-resolved at every start (symlinked releases).
    pub cwd: PathBuf,
    /// Number of instances.
    pub instances: usize,
    /// How instances listen.
    pub listen: Listen,
    /// hayate's files for the instances (`loopback.rs`); the caller removes it.
    pub runtime_dir: PathBuf,
    /// Instances replaced at once in a rolling reload.
    pub reload_parallel: NonZeroU32,
    /// Time for a new instance to accept on its socket (and pass the probe).
    pub start_timeout: Duration,
    /// An HTTP path that must answer 2xx before an instance gets traffic.
    pub ready_path: Option<String>,
    /// Time between SIGTERM and SIGKILL, and the longest drain.
    pub stop_timeout: Duration,
    /// Extra environment.
    pub env: Vec<(String, String)>,
    /// Replace an instance whose RSS passes this many bytes.
    pub max_memory: Option<u64>,
    /// Replace an instance after this many requests.
    pub max_requests: Option<u64>,
    /// Where instances' output goes: a rotated file, or hayate's log.
    pub log: Option<Arc<RotatingLog>>,
    /// The user instances run as (`app_user`, or hayate's `user`); `None`:
    /// hayate's own.
    pub run_as: Option<Identity>,
    /// Restart on changes of its files (`watch`, `--watch`), after a build.
    pub watch: Option<WatchSpec>,
    /// Restart on a schedule (`restart_cron`, `restart_every`).
    pub schedule: Option<RestartTimes>,
}

/// How an instance is told to listen (the value of `PORT`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    /// A Unix socket in this directory.
    Unix(PathBuf),
    /// A free 127.0.0.1 port, found when the instance starts.
    Tcp,
    /// 127.0.0.1 port BASE+i for slot i; its replacement takes BASE+N+i,
    /// the next one BASE+i again.
    TcpBase(u16),
    /// Nowhere: a worker process, told no `PORT`, started once it stays up.
    None,
}

impl AppSpec {
    /// How logs name slot `index` of this app: `api[0]`.
    pub fn tag(&self, index: usize) -> String {
        format!("{}[{index}]", self.name)
    }
}

/// How often instances are checked against their limits.
const LIMIT_CHECK: Duration = Duration::from_millis(500);

/// The window in which [`CRASH_LIMIT`] exits mean a crash loop.
pub const CRASH_WINDOW: Duration = Duration::from_secs(30);

/// Exits within [`CRASH_WINDOW`] that stop restarts.
pub const CRASH_LIMIT: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Control {
    /// Counts rolling reloads asked for.
    reload: u64,
    /// hayate stops: every instance stops, the supervisor ends.
    stop: bool,
    /// `hayate stop APP`: no instance runs until `hayate start APP`.
    app_stopped: bool,
}

/// A slot's lifecycle, for `hayate status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildState {
    /// Started, not yet accepting.
    Starting,
    /// Taking requests.
    Ready,
    /// Waiting before a restart.
    Backoff,
    /// Crash loop: not restarting until a reload.
    Halted,
    /// Stopped with hayate.
    Stopped,
}

impl ChildState {
    /// The name shown in status.
    pub fn as_str(self) -> &'static str {
        match self {
            ChildState::Starting => "starting",
            ChildState::Ready => "ready",
            ChildState::Backoff => "backoff",
            ChildState::Halted => "crash-loop",
            ChildState::Stopped => "stopped",
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct SlotStatus {
    state: ChildState,
    pid: Option<u32>,
    since: Instant,
    restarts: u32,
    /// Why its last instance ended (or failed to start).
    last_exit: Option<String>,
    /// How its first start went, once it is known: `hayate run` waits for
    /// it before it says it serves.
    first_start: Option<Result<(), String>>,
}

/// Every slot's status, and a signal for who waits on a change of it.
#[derive(Debug)]
pub(crate) struct Board {
    pub(crate) slots: std::sync::Mutex<Vec<SlotStatus>>,
    changed: std::sync::Condvar,
}

pub(crate) type StatusBoard = Arc<Board>;

/// A running supervisor. Dropping it stops every instance (SIGTERM, then
/// SIGKILL after the stop timeout) and waits.
pub struct Supervisor {
    status: AppStatus,
    control: Arc<watch::Sender<Control>>,
    /// What the next instances start as (a reload may change the command).
    spec: Arc<ArcSwap<AppSpec>>,
    thread: Option<JoinHandle<()>>,
}

impl Supervisor {
    /// Starts the instances (in the background; they become ready on their
    /// own).
    pub fn start(spec: AppSpec) -> io::Result<Supervisor> {
        if spec.command.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "no command to run",
            ));
        }
        loopback::write_node_preload(&spec.runtime_dir, spec.run_as.as_ref())?;
        match &spec.listen {
            Listen::Unix(dir) => {
                std::fs::create_dir_all(dir)?;
                // The instances make their sockets in it, as their user.
                if let Some(who) = &spec.run_as {
                    std::os::unix::fs::chown(dir, Some(who.uid), Some(who.gid))?;
                }
            }
            Listen::TcpBase(base) if usize::from(*base) + 2 * spec.instances > 65536 => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "tcp:{base} with {} instances needs ports up to {}: pick a lower base",
                        spec.instances,
                        usize::from(*base) + 2 * spec.instances - 1
                    ),
                ));
            }
            _ => {}
        }
        let app = AppSlots::new(spec.instances.max(1));
        let (control, rx) = watch::channel(Control {
            reload: 0,
            stop: false,
            app_stopped: false,
        });
        let control = Arc::new(control);
        let slots = app.clone();
        let initial = SlotStatus {
            state: ChildState::Starting,
            pid: None,
            since: Instant::now(),
            restarts: 0,
            last_exit: None,
            first_start: None,
        };
        let board: StatusBoard = Arc::new(Board {
            slots: std::sync::Mutex::new(vec![initial; app.slots.len()]),
            changed: std::sync::Condvar::new(),
        });
        let tasks_board = board.clone();
        let name: Arc<str> = spec.name.as_str().into();
        let notes = Arc::new(Mutex::new(status::Notes::default()));
        let restarter = Restarter {
            name: name.clone(),
            control: control.clone(),
            notes: notes.clone(),
        };
        let (watching, schedule) = (spec.watch.clone(), spec.schedule.clone());
        let spec = Arc::new(ArcSwap::from_pointee(spec));
        let spec_slot = spec.clone();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let thread = std::thread::Builder::new()
            .name("hayate-supervisor".into())
            .spawn(move || {
                rt.block_on(async move {
                    let spec = spec_slot;
                    // They end with the slots' tasks (hayate stops).
                    let mut side_tasks = Vec::new();
                    if let Some(w) = watching {
                        side_tasks.push(tokio::spawn(file_watch::run(
                            w,
                            spec.clone(),
                            restarter.clone(),
                        )));
                    }
                    if let Some(times) = schedule {
                        side_tasks.push(tokio::spawn(schedule::run(times, restarter)));
                    }
                    let roll = Arc::new(Semaphore::new(spec.load().reload_parallel.get() as usize));
                    let ids = Arc::new(AtomicU64::new(1));
                    let tasks: Vec<_> = slots
                        .slots
                        .iter()
                        .enumerate()
                        .map(|(i, slot)| {
                            let slot = SlotTask {
                                index: i,
                                spec: spec.clone(),
                                slot: slot.clone(),
                                ready: slots.ready.clone(),
                                halted: slots.halted.clone(),
                                control: rx.clone(),
                                roll: roll.clone(),
                                ids: ids.clone(),
                                board: tasks_board.clone(),
                                alternate: AtomicBool::new(false),
                            };
                            tokio::spawn(slot.run())
                        })
                        .collect();
                    for t in tasks {
                        let _ = t.await;
                    }
                    for t in side_tasks {
                        t.abort();
                    }
                })
            })?;
        Ok(Supervisor {
            status: AppStatus {
                name,
                board,
                app,
                notes,
            },
            control,
            spec,
            thread: Some(thread),
        })
    }

    /// The slots, for the proxy.
    pub fn slots(&self) -> AppSlots {
        self.status.app.clone()
    }

    /// A handle on the status board (for `hayate status`, `/status` and
    /// `/metrics`), usable from any thread.
    pub fn status(&self) -> AppStatus {
        self.status.clone()
    }

    /// Waits until the app is up or cannot start: `Ok` once an instance is
    /// ready, or once `grace` has passed with no verdict (a slow app goes
    /// on starting while hayate serves, its requests queued); `Err` with the
    /// reason when every slot's first start failed before that (a command
    /// not found, an app that exits at once), so `hayate run` exits with it
    /// instead of serving an app that is not there.
    pub fn wait_started(&self, grace: Duration) -> Result<(), String> {
        let board = &self.status.board;
        let deadline = Instant::now() + grace;
        let mut slots = board.slots.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if slots.iter().any(|s| matches!(s.first_start, Some(Ok(())))) {
                return Ok(());
            }
            if slots.iter().all(|s| matches!(s.first_start, Some(Err(_)))) {
                let why = slots.iter().find_map(|s| s.first_start.clone()?.err());
                return Err(why.unwrap_or_default());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(());
            }
            slots = board
                .changed
                .wait_timeout(slots, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Starts new instances with `command`, `cwd` and `env` from now on (a
    /// reload that changed the `[app]` section; the rolling reload that
    /// follows replaces the running ones). Returns whether anything changed.
    pub fn set_command(
        &self,
        command: Vec<String>,
        cwd: PathBuf,
        env: Vec<(String, String)>,
    ) -> bool {
        let current = self.spec.load();
        if current.command == command && current.cwd == cwd && current.env == env {
            return false;
        }
        let mut next = AppSpec::clone(&current);
        next.command = command;
        next.cwd = cwd;
        next.env = env;
        self.spec.store(Arc::new(next));
        true
    }

    /// Starts a rolling reload (SIGHUP, `hayate reload`).
    pub fn reload(&self) {
        self.control.send_modify(|c| c.reload += 1);
    }

    /// `hayate stop APP`: its routes answer 503 at once, its instances
    /// are drained and stopped, and none starts until [`Self::start_app`].
    /// False if it was stopped already.
    pub fn stop_app(&self) -> bool {
        let slots = &self.status.app;
        if slots.stopped.swap(true, Ordering::AcqRel) {
            return false;
        }
        // No request goes to its instances from now on (their slot tasks
        // drain and stop them); those waiting for one learn that none
        // will come.
        for slot in &slots.slots {
            slot.replace(None);
        }
        slots.ready.notify_waiters();
        self.control.send_modify(|c| c.app_stopped = true);
        log::info!("{}: stopping (hayate stop {0})", self.status.name);
        true
    }

    /// `hayate start APP`: starts what [`Self::stop_app`] stopped. False
    /// if it was not stopped.
    pub fn start_app(&self) -> bool {
        if !self.status.app.stopped.swap(false, Ordering::AcqRel) {
            return false;
        }
        self.control.send_modify(|c| c.app_stopped = false);
        log::info!("{}: starting (hayate start {0})", self.status.name);
        true
    }

    /// Whether `hayate stop APP` holds it stopped.
    pub fn is_stopped(&self) -> bool {
        self.status.app.is_stopped()
    }

    /// `hayate restart APP`: a rolling reload of its instances without
    /// re-reading the config (a stopped app starts).
    pub fn restart(&self) {
        if !self.start_app() {
            self.restarter()
                .restart(&format!("hayate restart {}", self.status.name));
        }
    }

    fn restarter(&self) -> Restarter {
        Restarter {
            name: self.status.name.clone(),
            control: self.control.clone(),
            notes: self.status.notes.clone(),
        }
    }
}

/// What asks for an app's restarts on its own (file changes, schedule),
/// from the supervisor's tasks.
#[derive(Clone)]
pub(crate) struct Restarter {
    name: Arc<str>,
    control: Arc<watch::Sender<Control>>,
    notes: Arc<Mutex<status::Notes>>,
}

impl Restarter {
    /// Whether `hayate stop APP` holds the app stopped.
    fn is_stopped(&self) -> bool {
        self.control.borrow().app_stopped
    }

    /// A rolling reload, logged with `why`; none while the app is stopped.
    fn restart(&self, why: &str) {
        if self.is_stopped() {
            log::info!(
                "{}: {why}; not restarted: the app is stopped (hayate start {0})",
                self.name
            );
            return;
        }
        log::info!("{}: restarting its instances: {why}", self.name);
        self.control.send_modify(|c| c.reload += 1);
    }

    /// Changes what `hayate status` says of the app's restarts.
    fn notes(&self, change: impl FnOnce(&mut status::Notes)) {
        if let Ok(mut notes) = self.notes.lock() {
            change(&mut notes);
        }
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        self.control.send_modify(|c| c.stop = true);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
