//! The control socket: a Unix socket (owner-only permissions) on which
//! `hayate status`, `hayate reload`, `hayate stop` and `hayate purge` send
//! one command line and read the answer until the server closes.
//!
//! The main loop serves one control client at a time, between signals and
//! worker reports: a client has [`CLIENT_TIMEOUT`] to send its command and
//! again to take the answer, so one that connects and says nothing, or
//! never reads, cannot hold the loop (and every later reload and stop).

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixListener;

/// Time a control client has to send its command line, and to read the
/// answer: `hayate status` and the others send at once and read at once.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);

/// A command received on the control socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControlCommand {
    /// Report the state.
    Status,
    /// Rolling reload of the app.
    Reload,
    /// Graceful shutdown.
    Stop,
    /// Hand the sockets to the binary now at hayate's path, then drain and
    /// exit.
    Upgrade,
    /// Name the log files (`hayate logs` reads them).
    Logs,
    /// Remove a URL (every variant and query) from the response cache.
    PurgeUrl(String),
    /// Remove every cached response tagged so (Surrogate-Key).
    PurgeTag(String),
}

impl ControlCommand {
    /// Parses a command line: `status`, `reload`, `stop`, `purge url URL`,
    /// `purge tag TAG`.
    pub fn parse(line: &str) -> Option<ControlCommand> {
        let mut words = line.split_whitespace();
        let command = match (words.next()?, words.next(), words.next()) {
            ("status", None, _) => ControlCommand::Status,
            ("reload", None, _) => ControlCommand::Reload,
            ("stop", None, _) => ControlCommand::Stop,
            ("upgrade", None, _) => ControlCommand::Upgrade,
            ("logs", None, _) => ControlCommand::Logs,
            ("purge", Some("url"), Some(u)) => ControlCommand::PurgeUrl(u.to_string()),
            ("purge", Some("tag"), Some(t)) => ControlCommand::PurgeTag(t.to_string()),
            _ => return None,
        };
        words.next().is_none().then_some(command)
    }
}

/// Binds the control socket, replacing a stale one, readable and writable
/// by the owner only.
pub fn bind(path: &Path) -> io::Result<UnixListener> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    if std::os::unix::net::UnixStream::connect(path).is_ok() {
        return Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!(
                "control socket {}: another hayate answers on it",
                path.display()
            ),
        ));
    }
    let _ = std::fs::remove_file(path);
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// Writes the pid file beside the control socket (`NAME.pid` for
/// `NAME.sock`): the process id, then the directory hayate was started in,
/// for tools that want a pid and for `hayate status` to name the hayates it
/// finds.
pub fn write_pid_file(socket: &Path) -> io::Result<()> {
    let cwd = std::env::current_dir().unwrap_or_default();
    let path = socket.with_extension("pid");
    std::fs::write(
        &path,
        format!("{}\n{}\n", std::process::id(), cwd.display()),
    )
    .map_err(|e| io::Error::new(e.kind(), format!("pid file {}: {e}", path.display())))
}

/// A control connection whose command was read: [`Pending::answer`]
/// writes the answer and closes it.
pub struct Pending {
    write: tokio::net::unix::OwnedWriteHalf,
}

/// The first line of every answer: whether the command did what it was
/// asked (`hayate reload` exits 1 on `error`).
const OK: &str = "ok\n";
const ERROR: &str = "error\n";

/// Reads one command from a control connection. An unknown one is answered
/// here, with the list of commands.
pub async fn read_command(stream: tokio::net::UnixStream) -> io::Result<(ControlCommand, Pending)> {
    let (read, write) = stream.into_split();
    let mut line = String::new();
    // Bounded: a client cannot make hayate buffer without end.
    let mut reader = tokio::io::AsyncReadExt::take(BufReader::new(read), 1024);
    within_client_timeout(reader.read_line(&mut line)).await?;
    let pending = Pending { write };
    match ControlCommand::parse(&line) {
        Some(c) => Ok((c, pending)),
        None => {
            let other = line.trim();
            pending
                .answer(Err(format!(
                    "unknown command {other:?} (status, reload, upgrade, stop, logs, purge url URL, purge tag TAG)\n"
                )))
                .await?;
            Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "unknown control command",
            ))
        }
    }
}

impl Pending {
    /// Writes the answer: `ok` or `error`, then the text.
    pub async fn answer(mut self, answer: Result<String, String>) -> io::Result<()> {
        let (status, text) = match &answer {
            Ok(text) => (OK, text),
            Err(text) => (ERROR, text),
        };
        within_client_timeout(async {
            self.write.write_all(status.as_bytes()).await?;
            self.write.write_all(text.as_bytes()).await?;
            self.write.shutdown().await
        })
        .await
    }
}

/// A control client's read or write, within [`CLIENT_TIMEOUT`].
async fn within_client_timeout<T>(
    io: impl std::future::Future<Output = io::Result<T>>,
) -> io::Result<T> {
    match tokio::time::timeout(CLIENT_TIMEOUT, io).await {
        Ok(done) => done,
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("control client silent for {CLIENT_TIMEOUT:?}"),
        )),
    }
}

/// Splits an answer read by a control client into whether it succeeded and
/// its text.
pub fn parse_answer(answer: &str) -> (bool, &str) {
    match (answer.strip_prefix(OK), answer.strip_prefix(ERROR)) {
        (Some(text), _) => (true, text),
        (_, Some(text)) => (false, text),
        _ => (false, answer),
    }
}

#[cfg(test)]
mod tests {
    use super::ControlCommand::{self, *};

    #[test]
    fn command_lines() {
        assert_eq!(ControlCommand::parse("status\n"), Some(Status));
        assert_eq!(ControlCommand::parse(" stop "), Some(Stop));
        assert_eq!(
            ControlCommand::parse("purge url http://h/a?b"),
            Some(PurgeUrl("http://h/a?b".into()))
        );
        assert_eq!(
            ControlCommand::parse("purge tag t1\n"),
            Some(PurgeTag("t1".into()))
        );
        for bad in [
            "",
            "purge",
            "purge url",
            "purge tag a b",
            "status now",
            "halt",
        ] {
            assert_eq!(ControlCommand::parse(bad), None, "{bad:?}");
        }
    }
}
