//! The error log: a `log` backend writing `TIME LEVEL message` lines to
//! stderr (or the `error_log` file), filtered by level. Access logging is
//! separate (hayate-server).
//!
//! A message repeated back to back is written once per second with a count
//! of the copies held back, so a flood (every request failing the same way
//! at a descriptor limit wrote 90,000 lines in 10 s in the bench lab) cannot
//! drown the log or the disk.

use std::io::Write;
use std::sync::{Arc, Mutex};

use crate::logfile::RotatingLog;
use std::time::{SystemTime, UNIX_EPOCH};

struct StderrLogger {
    repeats: Mutex<Repeats>,
}

/// Collapses back-to-back copies of one message.
#[derive(Debug, Default)]
struct Repeats {
    last: String,
    second: u64,
    held: u64,
}

impl Repeats {
    /// Decides what to write for `message` (level and text) arriving at
    /// `second`: nothing (a held copy), or the lines to write.
    fn admit(&mut self, message: &str, second: u64) -> Vec<String> {
        let mut out = Vec::new();
        if message == self.last {
            if second == self.second {
                self.held += 1;
                return out;
            }
        } else {
            self.last = message.to_string();
        }
        if self.held > 0 {
            out.push(format!(
                "WARN last message repeated {} more times",
                self.held
            ));
            self.held = 0;
        }
        self.second = second;
        out.push(message.to_string());
        out
    }
}

impl log::Log for StderrLogger {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        // Libraries' own debug lines (rustls logs every handshake's
        // choices) would drown hayate's: theirs show from warn up only.
        let library = !metadata.target().starts_with("hayate");
        if library && metadata.level() > log::Level::Warn {
            return false;
        }
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &log::Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let message = format!("{} {}", record.level().as_str(), record.args());
        let second = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let lines = match self.repeats.lock() {
            Ok(mut r) => r.admit(&message, second),
            Err(_) => vec![message],
        };
        let mut text = String::with_capacity(128);
        for l in lines {
            crate::date::iso_now(&mut text);
            text.push(' ');
            text.push_str(&l);
            text.push('\n');
        }
        if !text.is_empty() {
            // One write keeps lines whole when workers log at once.
            let file = FILE.lock().ok().and_then(|f| f.clone());
            match file {
                Some(file) => {
                    if let Err(e) = file.write_all(text.as_bytes()) {
                        let _ = writeln!(
                            std::io::stderr(),
                            "error log {}: {e}",
                            file.path().display()
                        );
                        let _ = std::io::stderr().lock().write_all(text.as_bytes());
                    }
                }
                None => {
                    let _ = std::io::stderr().lock().write_all(text.as_bytes());
                }
            }
        }
    }

    fn flush(&self) {}
}

static LOGGER: StderrLogger = StderrLogger {
    repeats: Mutex::new(Repeats {
        last: String::new(),
        second: 0,
        held: 0,
    }),
};

/// The `error_log` file, when hayate's log goes to one.
static FILE: Mutex<Option<Arc<RotatingLog>>> = Mutex::new(None);

/// Sends the log to `file` from now on (`None`: stderr).
pub fn to_file(file: Option<Arc<RotatingLog>>) {
    if let Ok(mut f) = FILE.lock() {
        *f = file;
    }
}

/// The error log's file, when it goes to one.
pub fn file() -> Option<Arc<RotatingLog>> {
    FILE.lock().ok().and_then(|f| f.clone())
}

/// Installs the stderr logger at `level`. Calling it again only changes the level.
pub fn init(level: log::LevelFilter) {
    let _ = log::set_logger(&LOGGER);
    log::set_max_level(level);
}

#[cfg(test)]
mod tests {
    use super::Repeats;

    #[test]
    fn floods_collapse_to_one_line_per_second_with_a_count() {
        let mut r = Repeats::default();
        assert_eq!(r.admit("ERROR boom", 10), vec!["ERROR boom"]);
        for _ in 0..1000 {
            assert!(r.admit("ERROR boom", 10).is_empty());
        }
        assert_eq!(
            r.admit("ERROR boom", 11),
            vec!["WARN last message repeated 1000 more times", "ERROR boom"]
        );
        assert!(r.admit("ERROR boom", 11).is_empty());
        assert_eq!(
            r.admit("INFO other", 11),
            vec!["WARN last message repeated 1 more times", "INFO other"]
        );
        assert_eq!(r.admit("INFO other", 12), vec!["INFO other"]);
    }
}
