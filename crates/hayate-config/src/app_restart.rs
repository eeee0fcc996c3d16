//! When an app restarts besides `hayate reload`: on a change of its files
//! (`watch`, `ignore`, an optional `build` step first) and on a schedule
//! (`restart_cron`, `restart_every`). The values of those `[app]` keys,
//! checked at load; the supervisor acts on them.

use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Local};

/// The shortest `restart_every`: a restart takes at least an instance's
/// start (a Node app: ~100 ms), so anything shorter would restart without
/// end; a second is still far below any real use (hours).
pub const MIN_RESTART_EVERY: Duration = Duration::from_secs(1);

/// What an app's files are watched for (`watch`, `ignore` in `[app]`, or
/// `hayate run --watch`: the app's directory).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WatchRules {
    /// What to watch, relative to the app's directory: directories (watched
    /// with everything under them), files, or file-name patterns with `*`
    /// and `?` (`*.js`: such a file anywhere under the app's directory).
    /// Empty: the whole app directory.
    pub paths: Vec<String>,
    /// What changes never restart the app: names or patterns matched
    /// against each part of a changed path (`dist`, `*.log`), or paths from
    /// the app's directory (`public/uploads`); `.git` and `node_modules`
    /// are always ignored.
    pub ignore: Vec<String>,
}

/// The names always ignored: a version control's churn and installed
/// packages (a `node_modules` holds ~10^4-10^5 directories, past the
/// 8,192 inotify watches some kernels allow a user).
pub const ALWAYS_IGNORED: &[&str] = &[".git", "node_modules"];

/// Checks one `watch` or `ignore` entry: a relative path or pattern that
/// stays under the app's directory.
pub fn check_watch_entry(entry: &str) -> Result<(), String> {
    if entry.is_empty() || entry.contains('\0') {
        return Err("expected a non-empty path or pattern".into());
    }
    if entry.starts_with('/') || entry.split('/').any(|part| part == "..") {
        return Err(format!(
            "{entry:?}: watch and ignore take paths relative to the app's directory, without .."
        ));
    }
    Ok(())
}

/// When an app is restarted (a rolling reload) on a schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestartSchedule {
    /// `restart_cron`: at the times a cron pattern names, in the server's
    /// local time zone (`TZ`, else /etc/localtime).
    Cron(Box<CronPattern>),
    /// `restart_every`: this long after the app started, then after each
    /// such restart.
    Every(Duration),
}

impl RestartSchedule {
    /// The next restart after `now`: `None` when a pattern has no future
    /// time (February 30th).
    pub fn next_after(&self, now: DateTime<Local>) -> Option<DateTime<Local>> {
        match self {
            RestartSchedule::Cron(c) => c.cron.find_next_occurrence(&now, false).ok(),
            RestartSchedule::Every(d) => Some(now + chrono::Duration::from_std(*d).ok()?),
        }
    }

    /// How it reads in logs and status: `restart_cron "0 4 * * *"`.
    pub fn describe(&self) -> String {
        match self {
            RestartSchedule::Cron(c) => format!("restart_cron {:?}", c.text),
            RestartSchedule::Every(d) => format!("restart_every {d:?}"),
        }
    }
}

/// A parsed cron pattern, with its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronPattern {
    /// As written.
    pub text: String,
    cron: croner::Cron,
}

impl CronPattern {
    /// Parses five fields (minute hour day-of-month month day-of-week), or
    /// six with seconds first; names (`MON`, `JAN`) and `@daily`-style
    /// nicknames as cron takes them.
    pub fn parse(text: &str) -> Result<CronPattern, String> {
        let fields = text.split_whitespace().count();
        if !text.trim_start().starts_with('@') && !(5..=6).contains(&fields) {
            return Err(format!(
                "{text:?}: expected 5 fields (minute hour day month weekday, as in \"0 4 * * *\") or 6 with seconds first, got {fields}"
            ));
        }
        let cron = croner::Cron::from_str(text).map_err(|e| format!("{text:?}: {e}"))?;
        // A pattern no date matches (February 30th) would never restart.
        if cron.find_next_occurrence(&Local::now(), false).is_err() {
            return Err(format!("{text:?}: no date matches it"));
        }
        Ok(CronPattern {
            text: text.to_string(),
            cron,
        })
    }
}

/// Parses a `restart_every` duration (at least [`MIN_RESTART_EVERY`]).
pub fn parse_restart_every(d: Duration) -> Result<Duration, String> {
    if d < MIN_RESTART_EVERY {
        return Err(format!(
            "{d:?} is shorter than {MIN_RESTART_EVERY:?}: the app would restart without end"
        ));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Timelike};

    #[test]
    fn cron_patterns_give_the_next_time() {
        let c = CronPattern::parse("0 4 * * *").expect("valid");
        let now = Local.with_ymd_and_hms(2026, 11, 27, 5, 0, 0).unwrap();
        let next = RestartSchedule::Cron(Box::new(c))
            .next_after(now)
            .expect("next");
        assert_eq!((next.hour(), next.minute()), (4, 0));
        assert!(next > now && next - now <= chrono::Duration::hours(23));
        let secs = Box::new(CronPattern::parse("*/2 * * * * *").expect("six fields"));
        assert!(
            RestartSchedule::Cron(secs).next_after(now).expect("next") - now
                <= chrono::Duration::seconds(2)
        );
        assert!(CronPattern::parse("@daily").is_ok());
    }

    #[test]
    fn bad_cron_patterns_say_why() {
        for bad in ["0 4 * *", "61 * * * *", "a b c d e", "", "0 0 30 2 *"] {
            assert!(CronPattern::parse(bad).is_err(), "{bad:?}");
        }
        assert!(CronPattern::parse("0 4 * *")
            .unwrap_err()
            .contains("expected 5 fields"));
    }

    #[test]
    fn restart_every_has_a_floor() {
        assert!(parse_restart_every(Duration::from_millis(500)).is_err());
        assert_eq!(
            parse_restart_every(Duration::from_secs(3600)),
            Ok(Duration::from_secs(3600))
        );
        let now = Local::now();
        let next = RestartSchedule::Every(Duration::from_secs(60)).next_after(now);
        assert_eq!(next, Some(now + chrono::Duration::seconds(60)));
    }

    #[test]
    fn watch_entries_stay_in_the_app() {
        assert!(check_watch_entry("src").is_ok() && check_watch_entry("*.js").is_ok());
        assert!(check_watch_entry("../x").is_err() && check_watch_entry("/etc").is_err());
        assert!(check_watch_entry("").is_err());
    }
}
