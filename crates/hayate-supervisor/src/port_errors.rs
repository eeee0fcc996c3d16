//! What to do when an instance exits at start because of its port: the
//! last lines it printed are kept (`OutputTail`), and when they hold a
//! port error its exit is reported with the fix, not only its exit code.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::Listen;

/// Lines of an instance's output kept for [`hint`]: a Node stack trace
/// with the error runs 10-15 lines, the error line itself among the first.
const KEPT_LINES: usize = 40;

/// The last lines an instance printed (stdout and stderr together), and
/// how many of its two streams have ended.
#[derive(Debug, Clone, Default)]
pub(crate) struct OutputTail(Arc<Mutex<VecDeque<String>>>, Arc<AtomicUsize>);

impl OutputTail {
    /// Keeps `line`, forgetting the oldest past [`KEPT_LINES`].
    pub fn push(&self, line: &str) {
        if let Ok(mut lines) = self.0.lock() {
            if lines.len() == KEPT_LINES {
                lines.pop_front();
            }
            lines.push_back(line.to_string());
        }
    }

    /// One of the instance's streams ended (it exited, or closed it).
    pub fn close(&self) {
        self.1.fetch_add(1, Ordering::AcqRel);
    }

    /// Whether both streams ended: every line the instance wrote is here.
    pub fn complete(&self) -> bool {
        self.1.load(Ordering::Acquire) >= 2
    }

    fn lines(&self) -> Vec<String> {
        self.0
            .lock()
            .map(|l| l.iter().cloned().collect())
            .unwrap_or_default()
    }
}

/// The port errors of the common servers, and what each means here.
enum PortError {
    /// The port is taken: the app listens on a port of its own.
    InUse,
    /// The app wants a TCP port number and got a socket path.
    NotANumber,
}

fn classify(line: &str) -> Option<PortError> {
    const IN_USE: [&str; 2] = ["EADDRINUSE", "address already in use"];
    const NOT_A_NUMBER: [&str; 6] = [
        "PORT must be a number",      // Next.js 12
        "options.port should be",     // Node's ERR_SOCKET_BAD_PORT, Fastify
        "ERR_SOCKET_BAD_PORT",        // Node
        "Invalid port",               // Go's net.Listen, many CLIs
        "is not a valid port",        // uvicorn and others
        "invalid value for '--port'", // clap, click
    ];
    let lower = line.to_ascii_lowercase();
    let has = |needle: &str| lower.contains(&needle.to_ascii_lowercase());
    if IN_USE.iter().any(|n| has(n)) {
        Some(PortError::InUse)
    } else if NOT_A_NUMBER.iter().any(|n| has(n)) {
        Some(PortError::NotANumber)
    } else {
        None
    }
}

/// What to do, when `tail` (an instance that exited before it was ready)
/// shows a port error; `port` is what PORT held.
pub(crate) fn hint(tail: &OutputTail, listen: &Listen, port: &str) -> Option<String> {
    let lines = tail.lines();
    let (line, error) = lines
        .iter()
        .find_map(|l| classify(l).map(|e| (l.trim(), e)))?;
    let fix = match (error, listen) {
        (PortError::NotANumber, Listen::Unix(_)) => format!(
            "it wants a TCP port number in PORT and got a socket path ({port}): \
             run it with --app-listen tcp (the default; app_listen = \"tcp\" in a file)"
        ),
        (PortError::NotANumber, _) => format!(
            "PORT holds the port {port}: make the app read it as a number \
             (e.g. Number(process.env.PORT))"
        ),
        (PortError::InUse, _) => format!(
            "another process holds the address it listens on: make the app listen on \
             the port hayate gives it in PORT ({port}), not a fixed one, e.g. \
             `server.listen(process.env.PORT)`, `next start` (reads PORT), `--port $PORT`"
        ),
    };
    Some(format!("its port: `{line}`: {fix}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tail(lines: &[&str]) -> OutputTail {
        let t = OutputTail::default();
        for l in lines {
            t.push(l);
        }
        t
    }

    #[test]
    fn port_errors_of_real_servers_get_their_fix() {
        let unix = Listen::Unix("/tmp/x".into());
        let fastify = tail(&[
            "/app/node_modules/fastify/lib/server.js:41",
            "RangeError [ERR_SOCKET_BAD_PORT]: options.port should be >= 0 and < 65536. Received type string ('/tmp/x/app-0-1.sock').",
        ]);
        let said = hint(&fastify, &unix, "/tmp/x/app-0-1.sock").expect("hint");
        assert!(said.contains("--app-listen tcp"), "{said}");
        let in_use = tail(&["Error: listen EADDRINUSE: address already in use :::3000"]);
        let said = hint(&in_use, &Listen::Tcp, "41234").expect("hint");
        assert!(said.contains("PORT (41234)"), "{said}");
        assert!(hint(&tail(&["SyntaxError: Unexpected token"]), &Listen::Tcp, "1").is_none());
    }

    #[test]
    fn the_tail_keeps_the_last_lines() {
        let t = OutputTail::default();
        for i in 0..KEPT_LINES + 5 {
            t.push(&i.to_string());
        }
        let lines = t.lines();
        assert_eq!(lines.len(), KEPT_LINES);
        assert_eq!(lines[0], "5");
    }
}
