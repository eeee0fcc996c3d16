//! The control socket: a Unix socket (owner-only permissions) on which
//! `hayate status`, `hayate reload`, `hayate stop` and `hayate purge` send
//! one command line and read the answer until the server closes.

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixListener;

/// A command received on the control socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControlCommand {
    /// Report the state.
    Status,
    /// Rolling reload of the app.
    Reload,
    /// Graceful shutdown.
    Stop,
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

/// Reads one command from a control connection and writes `answer(command)`.
/// Returns the command so the caller can act after answering.
pub async fn serve_one(
    stream: tokio::net::UnixStream,
    answer: impl Fn(&ControlCommand) -> String,
) -> io::Result<ControlCommand> {
    let (read, mut write) = stream.into_split();
    let mut line = String::new();
    // Bounded: a client cannot make hayate buffer without end.
    let mut reader = tokio::io::AsyncReadExt::take(BufReader::new(read), 1024);
    reader.read_line(&mut line).await?;
    let command = match ControlCommand::parse(&line) {
        Some(c) => c,
        None => {
            let other = line.trim();
            write
                .write_all(
                    format!("unknown command {other:?} (status, reload, stop, purge url URL, purge tag TAG)\n")
                        .as_bytes(),
                )
                .await?;
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "unknown control command",
            ));
        }
    };
    write.write_all(answer(&command).as_bytes()).await?;
    write.shutdown().await?;
    Ok(command)
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
