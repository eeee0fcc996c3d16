//! The app supervisor: runs N instances of a command, each told its own Unix
//! socket in `PORT` (Node's `server.listen(process.env.PORT)` takes a path)
//! and its slot in `HAYATE_INSTANCE`; marks an instance ready once its
//! socket accepts; restarts crashed instances with exponential backoff and
//! jitter, and stops restarting a crash loop; reloads slot by slot (start
//! the new instance, wait until ready, switch, drain the old one at the
//! proxy, stop it), keeping the old instance when the new one fails.
//!
//! It runs on its own thread with its own runtime and meets the proxy only
//! through [`AppSlots`] (hayate-core): the proxy reads each slot's current
//! instance and counts requests in flight on it.
//!
//! Each instance runs in its own process group; stopping sends SIGTERM to
//! the group, then SIGKILL after the stop timeout, so no orphan survives.

mod instance;
mod logfile;

pub use logfile::RotatingLog;

use std::collections::VecDeque;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hayate_core::app::{AppSlot, AppSlots};
use tokio::sync::{watch, Notify, Semaphore};

use instance::Running;

/// What to run.
#[derive(Debug, Clone)]
pub struct AppSpec {
    /// Program and arguments.
    pub command: Vec<String>,
    /// Working directory, re-resolved at every start (symlinked releases).
    pub cwd: PathBuf,
    /// Number of instances.
    pub instances: usize,
    /// Where the instances' sockets go.
    pub socket_dir: PathBuf,
    /// Time for a new instance to accept on its socket (and pass the probe).
    pub start_timeout: Duration,
    /// An HTTP path that must answer 2xx before an instance gets traffic.
    pub ready_path: Option<String>,
    /// Time between SIGTERM and SIGKILL, and the longest drain.
    pub stop_timeout: Duration,
    /// Extra environment.
    pub env: Vec<(String, String)>,
    /// Exits within [`CRASH_WINDOW`] that stop restarts.
    pub crash_limit: usize,
    /// Replace an instance whose RSS passes this many bytes.
    pub max_memory: Option<u64>,
    /// Replace an instance after this many requests.
    pub max_requests: Option<u64>,
    /// Where instances' output goes: a rotated file, or hayate's log.
    pub log: Option<Arc<RotatingLog>>,
}

/// How often instances are checked against their limits.
const LIMIT_CHECK: Duration = Duration::from_millis(500);

/// The window in which `crash_limit` exits mean a crash loop.
pub const CRASH_WINDOW: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Control {
    reload: u64,
    stop: bool,
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
struct SlotStatus {
    state: ChildState,
    pid: Option<u32>,
    since: Instant,
    restarts: u32,
}

type StatusBoard = Arc<std::sync::Mutex<Vec<SlotStatus>>>;

/// A running supervisor.
pub struct Supervisor {
    board: StatusBoard,
    app: AppSlots,
    control: watch::Sender<Control>,
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
        std::fs::create_dir_all(&spec.socket_dir)?;
        let app = AppSlots::new(spec.instances.max(1));
        let (control, rx) = watch::channel(Control {
            reload: 0,
            stop: false,
        });
        let slots = app.clone();
        let initial = SlotStatus {
            state: ChildState::Starting,
            pid: None,
            since: Instant::now(),
            restarts: 0,
        };
        let board: StatusBoard = Arc::new(std::sync::Mutex::new(vec![initial; app.slots.len()]));
        let tasks_board = board.clone();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let thread = std::thread::Builder::new()
            .name("hayate-supervisor".into())
            .spawn(move || {
                rt.block_on(async move {
                    let spec = Arc::new(spec);
                    let roll = Arc::new(Semaphore::new(1));
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
                                control: rx.clone(),
                                roll: roll.clone(),
                                ids: ids.clone(),
                                board: tasks_board.clone(),
                            };
                            tokio::spawn(slot.run())
                        })
                        .collect();
                    for t in tasks {
                        let _ = t.await;
                    }
                })
            })?;
        Ok(Supervisor {
            board,
            app,
            control,
            thread: Some(thread),
        })
    }

    /// The slots, for the proxy.
    pub fn slots(&self) -> AppSlots {
        self.app.clone()
    }

    /// A status table: instance, state, pid, uptime, restarts, RSS and
    /// requests in flight.
    pub fn status_text(&self) -> String {
        let board = self.board.lock().map(|b| b.clone()).unwrap_or_default();
        let mut out =
            String::from("instance  state       pid      uptime    restarts  rss_mib  in_flight\n");
        for (i, s) in board.iter().enumerate() {
            let rss = s
                .pid
                .and_then(instance::rss_of)
                .map_or("-".to_string(), |b| (b >> 20).to_string());
            let inflight = self.app.slots[i].current().map_or(0, |c| c.inflight());
            out.push_str(&format!(
                "{:<9} {:<11} {:<8} {:<9} {:<9} {:<8} {}\n",
                i,
                s.state.as_str(),
                s.pid.map_or("-".into(), |p| p.to_string()),
                format!("{}s", s.since.elapsed().as_secs()),
                s.restarts,
                rss,
                inflight
            ));
        }
        out
    }

    /// Starts a rolling reload (SIGHUP, `hayate reload`).
    pub fn reload(&self) {
        self.control.send_modify(|c| c.reload += 1);
    }

    /// Stops every instance (SIGTERM, then SIGKILL) and waits.
    pub fn stop(mut self) {
        self.control.send_modify(|c| c.stop = true);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
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

/// One slot's life: start, watch, restart, reload, stop.
struct SlotTask {
    index: usize,
    spec: Arc<AppSpec>,
    slot: Arc<AppSlot>,
    ready: Arc<Notify>,
    control: watch::Receiver<Control>,
    /// Reloads roll one slot at a time.
    roll: Arc<Semaphore>,
    ids: Arc<AtomicU64>,
    board: StatusBoard,
}

impl SlotTask {
    async fn run(mut self) {
        let mut reloads_seen = self.control.borrow().reload;
        let mut exits: VecDeque<Instant> = VecDeque::new();
        let mut current: Option<Running> = None;
        let mut limits = tokio::time::interval(LIMIT_CHECK);
        limits.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            if self.control.borrow().stop {
                break;
            }
            let Some(run) = current.as_mut() else {
                match Running::start(self.index, &self.spec, &self.ids).await {
                    Ok(r) => {
                        self.publish(&r);
                        current = Some(r);
                    }
                    Err(e) => {
                        self.set_state(ChildState::Backoff, None, true);
                        log::error!("app[{}] failed to start: {e}", self.index);
                        if !self.after_exit(&mut exits).await {
                            break;
                        }
                    }
                }
                continue;
            };
            tokio::select! {
                status = run.wait() => {
                    self.slot.replace(None);
                    self.set_state(ChildState::Backoff, None, true);
                    log::warn!("app[{}] (pid {}) exited: {status}", self.index, run.pid());
                    if let Some(old) = current.take() {
                        old.cleanup();
                    }
                    if !self.after_exit(&mut exits).await {
                        break;
                    }
                }
                _ = limits.tick() => {
                    if let Some(reason) = self.over_limit(run) {
                        log::info!("app[{}] (pid {}) {reason}: replacing it", self.index, run.pid());
                        if let Some(old) = current.take() {
                            current = Some(self.roll_over(old).await);
                        }
                    }
                }
                changed = self.control.changed() => {
                    if changed.is_err() || self.control.borrow().stop {
                        break;
                    }
                    let reload = self.control.borrow().reload;
                    if reload != reloads_seen {
                        reloads_seen = reload;
                        if let Some(old) = current.take() {
                            current = Some(self.roll_over(old).await);
                        }
                    }
                }
            }
        }
        if let Some(run) = current.take() {
            self.slot.replace(None);
            run.stop(self.spec.stop_timeout).await;
        }
        self.set_state(ChildState::Stopped, None, false);
    }

    /// Why `run` must be recycled, if it must: memory (RSS read from
    /// /proc at every check) or requests served.
    fn over_limit(&self, run: &Running) -> Option<String> {
        if let Some(max) = self.spec.max_memory {
            let rss = run.rss_bytes().unwrap_or(0);
            if rss > max {
                return Some(format!(
                    "uses {} MiB, over its {} MiB limit",
                    rss >> 20,
                    max >> 20
                ));
            }
        }
        if let Some(max) = self.spec.max_requests {
            let served = run
                .instance
                .served
                .load(std::sync::atomic::Ordering::Relaxed);
            if served >= max {
                return Some(format!("served {served} requests, its limit"));
            }
        }
        None
    }

    fn set_state(&self, state: ChildState, pid: Option<u32>, restarted: bool) {
        if let Ok(mut board) = self.board.lock() {
            let s = &mut board[self.index];
            if s.state != state || s.pid != pid {
                s.since = Instant::now();
            }
            s.state = state;
            s.pid = pid;
            s.restarts += u32::from(restarted);
        }
    }

    fn publish(&self, r: &Running) {
        self.set_state(ChildState::Ready, Some(r.pid()), false);
        self.slot.replace(Some(r.instance.clone()));
        self.ready.notify_waiters();
        log::info!(
            "app[{}] ready (pid {}) on {}",
            self.index,
            r.pid(),
            r.instance.path.display()
        );
    }

    /// Replaces `old` with a new instance: start, wait ready, switch, drain,
    /// stop. If the new one fails, `old` keeps serving.
    async fn roll_over(&self, old: Running) -> Running {
        let _turn = self.roll.acquire().await;
        match Running::start(self.index, &self.spec, &self.ids).await {
            Ok(new) => {
                self.publish(&new);
                let drained = old.drain(self.spec.stop_timeout).await;
                if !drained {
                    log::warn!(
                        "app[{}] old instance still busy after {:?}; stopping it",
                        self.index,
                        self.spec.stop_timeout
                    );
                }
                old.stop(self.spec.stop_timeout).await;
                new
            }
            Err(e) => {
                log::error!(
                    "app[{}] reload failed: {e}; the running instance keeps serving",
                    self.index
                );
                old
            }
        }
    }

    /// After an exit: wait the backoff, or give up on a crash loop (then
    /// only a reload or stop continues). False when stopping.
    async fn after_exit(&mut self, exits: &mut VecDeque<Instant>) -> bool {
        let now = Instant::now();
        exits.push_back(now);
        while exits
            .front()
            .is_some_and(|t| now.duration_since(*t) > CRASH_WINDOW)
        {
            exits.pop_front();
        }
        if exits.len() >= self.spec.crash_limit {
            self.set_state(ChildState::Halted, None, false);
            log::error!(
                "app[{}] crash loop: {} exits within {:?}; not restarting it until a reload",
                self.index,
                exits.len(),
                CRASH_WINDOW
            );
            let seen = self.control.borrow().reload;
            loop {
                if self.control.changed().await.is_err() || self.control.borrow().stop {
                    return false;
                }
                if self.control.borrow().reload != seen {
                    exits.clear();
                    return true;
                }
            }
        }
        let delay = backoff(exits.len());
        tokio::select! {
            _ = tokio::time::sleep(delay) => true,
            changed = self.control.changed() => changed.is_ok() && !self.control.borrow().stop,
        }
    }
}

/// 100 ms doubling per recent exit, capped at 5 s, with ±20 % jitter so a
/// fleet does not restart in lockstep.
fn backoff(recent_exits: usize) -> Duration {
    let base = 100u64
        .saturating_mul(1 << recent_exits.saturating_sub(1).min(6))
        .min(5_000);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let jitter = u64::from(nanos % 400) as i64 - 200; // -200..200 per mille
    Duration::from_millis((base as i64 + base as i64 * jitter / 1000).max(10) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        let ms = |n| backoff(n).as_millis();
        assert!((80..=120).contains(&ms(1)), "{}", ms(1));
        assert!((160..=240).contains(&ms(2)), "{}", ms(2));
        assert!(ms(20) <= 6_000 && ms(20) >= 4_000, "{}", ms(20));
    }
}
