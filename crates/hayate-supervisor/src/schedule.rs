//! Scheduled restarts (`restart_cron`, `restart_every`): a task of the
//! app's supervisor that sleeps until the next time, then asks for a
//! rolling reload, as `hayate reload APP` does; `hayate status` shows the
//! next time.
//!
//! Times are the server's local time zone's. The wait is on the monotonic
//! clock, computed afresh from the wall clock after each restart: a time
//! zone change or a clock set by hand takes effect at the next restart.

use std::fmt;
use std::sync::Arc;

use chrono::{DateTime, Local};

use crate::Restarter;

/// When an app restarts on its own.
#[derive(Clone)]
pub struct RestartTimes {
    /// How it is shown: `restart_cron "0 4 * * *"`.
    pub what: String,
    /// The next time after the one given; `None`: never again.
    pub next: Arc<dyn Fn(DateTime<Local>) -> Option<DateTime<Local>> + Send + Sync>,
}

impl fmt::Debug for RestartTimes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.what)
    }
}

/// Restarts the app at each of `times`, until the supervisor stops.
pub(crate) async fn run(times: RestartTimes, restarter: Restarter) {
    loop {
        let now = Local::now();
        let Some(next) = (times.next)(now) else {
            log::warn!(
                "{}: {} names no future time: no more scheduled restarts",
                restarter.name,
                times.what
            );
            restarter.notes(|n| n.next_restart = None);
            return;
        };
        let shown = format!("{} ({})", next.format("%Y-%m-%d %H:%M:%S %:z"), times.what);
        restarter.notes(|n| n.next_restart = Some(shown));
        tokio::time::sleep((next - now).to_std().unwrap_or_default()).await;
        restarter.restart(&format!("scheduled by {}", times.what));
    }
}
