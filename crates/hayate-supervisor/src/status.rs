//! The supervisor's figures for `hayate status`, the status page and
//! `/metrics`: each slot's state and process, read from any thread. Every
//! sample carries the app's name as its `app` label, so several apps'
//! instances stay apart.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use hayate_core::app::AppSlots;
use hayate_core::metrics::{family, sample, Kind, MetricsSource};

use crate::{instance, ChildState, StatusBoard};

/// The supervisor's figures, read from any thread: each slot's state, pid,
/// time in that state, restarts, RSS (read from /proc when asked), requests
/// in flight and served, and the queue of requests waiting for an instance.
#[derive(Clone)]
pub struct AppStatus {
    /// The app's name: the `app` label of its samples.
    pub(crate) name: Arc<str>,
    pub(crate) board: StatusBoard,
    pub(crate) app: AppSlots,
    /// What its restarts on its own look like now.
    pub(crate) notes: Arc<Mutex<Notes>>,
}

/// What `hayate status` says of an app's own restarts, kept by the tasks
/// that make them.
#[derive(Debug, Default)]
pub(crate) struct Notes {
    /// When the next scheduled restart is, and by what.
    pub next_restart: Option<String>,
    /// What is watched for changes.
    pub watching: Option<String>,
}

/// One slot's figures.
#[derive(Debug, Clone)]
pub struct InstanceFigures {
    /// Lifecycle state.
    pub state: ChildState,
    /// Process id while running.
    pub pid: Option<u32>,
    /// Seconds in the current state (uptime when ready).
    pub uptime_secs: u64,
    /// Restarts after exits and failed starts.
    pub restarts: u32,
    /// Resident memory.
    pub rss_bytes: Option<u64>,
    /// Requests in flight on the current instance.
    pub in_flight: u32,
    /// Requests sent to the current instance.
    pub served: u64,
    /// Why the slot's last instance ended, or failed to start.
    pub last_exit: Option<String>,
}

impl AppStatus {
    /// The app's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Every slot's figures, in slot order.
    pub fn instances(&self) -> Vec<InstanceFigures> {
        let board = self
            .board
            .slots
            .lock()
            .map(|b| b.clone())
            .unwrap_or_default();
        board
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let current = self.app.slots[i].current();
                InstanceFigures {
                    state: s.state,
                    pid: s.pid,
                    uptime_secs: s.since.elapsed().as_secs(),
                    restarts: s.restarts,
                    rss_bytes: s.pid.and_then(instance::rss_of),
                    in_flight: current.as_ref().map_or(0, |c| c.inflight()),
                    served: current.map_or(0, |c| c.served.load(Ordering::Relaxed)),
                    last_exit: s.last_exit.clone(),
                }
            })
            .collect()
    }

    /// Requests waiting for an instance, across workers.
    pub fn queue_depth(&self) -> usize {
        self.app.queue_depth()
    }

    /// A status table under a line naming the app and what it is (`app
    /// api: served at /api/`, `app queue: worker`): instance, state, pid,
    /// uptime, restarts, RSS, requests in flight and served; then the queue
    /// depth.
    pub fn text(&self, role: &str) -> String {
        let mut out = format!("app {}: {role}\n", self.name);
        if self.app.is_stopped() {
            out.push_str(&format!(
                "stopped by hayate stop {0}: its routes answer 503 until hayate start {0}\n",
                self.name
            ));
        }
        if let Ok(notes) = self.notes.lock() {
            if let Some(next) = &notes.next_restart {
                out.push_str(&format!("next restart: {next}\n"));
            }
            if let Some(watching) = &notes.watching {
                out.push_str(&format!("watching: {watching}\n"));
            }
        }
        out.push_str(
            "instance  state       pid      uptime    restarts  rss_mib  in_flight  served    last exit\n",
        );
        for (i, s) in self.instances().iter().enumerate() {
            out.push_str(&format!(
                "{:<9} {:<11} {:<8} {:<9} {:<9} {:<8} {:<10} {:<9} {}\n",
                i,
                s.state.as_str(),
                s.pid.map_or("-".into(), |p| p.to_string()),
                format!("{}s", s.uptime_secs),
                s.restarts,
                s.rss_bytes
                    .map_or("-".to_string(), |b| (b >> 20).to_string()),
                s.in_flight,
                s.served,
                s.last_exit.as_deref().unwrap_or("-"),
            ));
        }
        out.push_str(&format!("queued: {}\n", self.queue_depth()));
        out
    }
}

/// The states a slot reports in `hayate_app_instance_state`.
const STATES: [ChildState; 5] = [
    ChildState::Starting,
    ChildState::Ready,
    ChildState::Backoff,
    ChildState::Halted,
    ChildState::Stopped,
];

/// Every app's figures, each family's HELP and TYPE once with every app's
/// samples under them (Prometheus refuses a family declared twice).
#[derive(Clone)]
pub struct AllApps(pub Vec<AppStatus>);

impl MetricsSource for AllApps {
    fn render(&self, out: &mut String) {
        let figures: Vec<(&str, Vec<InstanceFigures>)> =
            self.0.iter().map(|a| (&*a.name, a.instances())).collect();
        // One sample per app and slot: (app, slot, figures).
        let slots = || {
            figures
                .iter()
                .flat_map(|(app, fs)| fs.iter().enumerate().map(move |(i, f)| (*app, i, f)))
        };
        let per_instance =
            |out: &mut String,
             name: &str,
             help: &str,
             kind: Kind,
             value: &dyn Fn(&InstanceFigures) -> Option<u64>| {
                family(out, name, help, kind);
                for (app, i, f) in slots() {
                    if let Some(v) = value(f) {
                        sample(out, name, &[("app", app), ("instance", &i.to_string())], v);
                    }
                }
            };
        family(
            out,
            "hayate_app_instance_state",
            "Lifecycle state of each app instance slot (1 for its current state)",
            Kind::Gauge,
        );
        for (app, i, f) in slots() {
            for state in STATES {
                let v = u8::from(f.state == state);
                let i = i.to_string();
                sample(
                    out,
                    "hayate_app_instance_state",
                    &[("app", app), ("instance", &i), ("state", state.as_str())],
                    v,
                );
            }
        }
        per_instance(
            out,
            "hayate_app_instance_pid",
            "Process id of each running app instance",
            Kind::Gauge,
            &|f| f.pid.map(u64::from),
        );
        per_instance(
            out,
            "hayate_app_instance_uptime_seconds",
            "Seconds each app instance slot has been in its current state",
            Kind::Gauge,
            &|f| Some(f.uptime_secs),
        );
        per_instance(
            out,
            "hayate_app_instance_restarts_total",
            "Restarts of each app instance slot after exits and failed starts",
            Kind::Counter,
            &|f| Some(u64::from(f.restarts)),
        );
        per_instance(
            out,
            "hayate_app_instance_memory_rss_bytes",
            "Resident memory of each running app instance",
            Kind::Gauge,
            &|f| f.rss_bytes,
        );
        per_instance(
            out,
            "hayate_app_instance_in_flight",
            "Requests in flight on each app instance",
            Kind::Gauge,
            &|f| Some(u64::from(f.in_flight)),
        );
        per_instance(
            out,
            "hayate_app_instance_requests_total",
            "Requests sent to each app instance (restarts from 0 with a new instance)",
            Kind::Counter,
            &|f| Some(f.served),
        );
        let name = "hayate_app_instance_last_exit";
        family(
            out,
            name,
            "Why each app instance slot's last instance ended (1, the reason as a label)",
            Kind::Gauge,
        );
        for (app, i, f) in slots() {
            if let Some(reason) = &f.last_exit {
                let i = i.to_string();
                sample(
                    out,
                    name,
                    &[("app", app), ("instance", &i), ("reason", reason)],
                    1,
                );
            }
        }
        family(
            out,
            "hayate_app_queue_depth",
            "Requests waiting for an app instance, across workers",
            Kind::Gauge,
        );
        for status in &self.0 {
            let depth = status.queue_depth();
            sample(
                out,
                "hayate_app_queue_depth",
                &[("app", &status.name)],
                depth,
            );
        }
    }
}
