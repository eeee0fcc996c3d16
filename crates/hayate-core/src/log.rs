//! The error log: a `log` backend writing `TIME LEVEL message` lines to
//! stderr, filtered by level. Access logging is separate (hayate-server).

use std::io::Write;

struct StderrLogger;

impl log::Log for StderrLogger {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &log::Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let mut line = String::with_capacity(128);
        crate::date::iso_now(&mut line);
        line.push(' ');
        line.push_str(record.level().as_str());
        line.push(' ');
        line.push_str(&record.args().to_string());
        line.push('\n');
        // One write per line keeps lines whole when workers log at once.
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    fn flush(&self) {}
}

static LOGGER: StderrLogger = StderrLogger;

/// Installs the stderr logger at `level`. Calling it again only changes the level.
pub fn init(level: log::LevelFilter) {
    let _ = log::set_logger(&LOGGER);
    log::set_max_level(level);
}
