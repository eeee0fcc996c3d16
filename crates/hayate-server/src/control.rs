//! The control socket: a Unix socket (owner-only permissions) on which
//! `hayate status`, `hayate reload`, `hayate stop` and `hayate purge` send
//! one command line and read the answer until the server closes; where it
//! is bound (one per hayate, claimed race-free), and the pid file beside it
//! that says whose it is.
//!
//! The main loop serves one control client at a time, between signals and
//! worker reports: a client has [`CLIENT_TIMEOUT`] to send its command and
//! again to take the answer, so one that connects and says nothing, or
//! never reads, cannot hold the loop (and every later reload and stop).

use std::io;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
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
    /// Re-read the configuration, then a rolling reload of every app, or
    /// of the one named (`reload APP`).
    Reload(Option<String>),
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
    /// `start APP`, `stop APP`, `restart APP`: one app, by name.
    App(AppAction, String),
}

/// What `hayate start|stop|restart APP` does to the app.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppAction {
    /// Start an app that `stop APP` stopped.
    Start,
    /// Stop its instances (drained first) and keep them stopped; its routes
    /// answer 503 meanwhile.
    Stop,
    /// Replace its instances, rolling, without re-reading the config.
    Restart,
}

impl AppAction {
    /// The command's word.
    pub fn as_str(self) -> &'static str {
        match self {
            AppAction::Start => "start",
            AppAction::Stop => "stop",
            AppAction::Restart => "restart",
        }
    }
}

impl ControlCommand {
    /// Parses a command line: `status`, `reload [APP]`, `stop [APP]`, `start
    /// APP`, `restart APP`, `purge url URL`, `purge tag TAG`.
    pub fn parse(line: &str) -> Option<ControlCommand> {
        let mut words = line.split_whitespace();
        let command = match (words.next()?, words.next(), words.next()) {
            ("status", None, _) => ControlCommand::Status,
            ("reload", None, _) => ControlCommand::Reload(None),
            ("reload", Some(app), None) => ControlCommand::Reload(Some(app.to_string())),
            ("stop", None, _) => ControlCommand::Stop,
            ("start", Some(app), None) => ControlCommand::App(AppAction::Start, app.to_string()),
            ("stop", Some(app), None) => ControlCommand::App(AppAction::Stop, app.to_string()),
            ("restart", Some(app), None) => {
                ControlCommand::App(AppAction::Restart, app.to_string())
            }
            ("upgrade", None, _) => ControlCommand::Upgrade,
            ("logs", None, _) => ControlCommand::Logs,
            ("purge", Some("url"), Some(u)) => ControlCommand::PurgeUrl(u.to_string()),
            ("purge", Some("tag"), Some(t)) => ControlCommand::PurgeTag(t.to_string()),
            _ => return None,
        };
        words.next().is_none().then_some(command)
    }
}

/// Where the control socket goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControlPlace {
    /// Given (`--control PATH`, `control` in the file): this path, or an
    /// error when another hayate answers on it.
    Given(PathBuf),
    /// The default of the directory hayate was started in (`HASH.sock`):
    /// when another hayate answers there, the first free `HASH-N.sock`
    /// beside it, so two hayates of one directory each have their own.
    Default(PathBuf),
}

/// How many sockets one directory's hayates may have (`HASH.sock` and
/// `HASH-2.sock` to `HASH-64.sock`): far more than anyone starts by hand,
/// few enough to search.
const PER_DIRECTORY: usize = 64;

/// The sockets of a directory's default family, in the order they are
/// taken: `HASH.sock`, then `HASH-2.sock`, `HASH-3.sock`…
pub fn family(first: &Path) -> impl Iterator<Item = PathBuf> + '_ {
    let stem = first
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    std::iter::once(first.to_path_buf())
        .chain((2..=PER_DIRECTORY).map(move |n| first.with_file_name(format!("{stem}-{n}.sock"))))
}

/// Whether `path` is a member of the family of `first` ([`family`]).
pub fn in_family(first: &Path, path: &Path) -> bool {
    let (Some(stem), Some(name)) = (first.file_stem(), path.file_name()) else {
        return false;
    };
    let (stem, name) = (stem.to_string_lossy(), name.to_string_lossy());
    path.parent() == first.parent()
        && name
            .strip_prefix(&*stem)
            .and_then(|rest| rest.strip_suffix(".sock"))
            .is_some_and(|n| {
                n.is_empty()
                    || n.strip_prefix('-')
                        .is_some_and(|n| n.parse::<usize>().is_ok())
            })
}

/// Whether a hayate answers on the socket at `path`.
pub fn answers(path: &Path) -> bool {
    std::os::unix::net::UnixStream::connect(path).is_ok()
}

/// Binds the control socket at `place`; returns it and its path.
///
/// Race-free without a lock held for the process' life: every hayate
/// claims a socket path while it holds an exclusive flock(2) on the
/// family's lock file (`HASH.lock`, or `PATH.lock` beside a given path),
/// and only for as long as it takes to see whether a hayate answers there,
/// remove a stale file and bind. So two hayates never both take a path for
/// stale and remove each other's socket, and a path whose socket answers is
/// never taken over. A socket answers from its bind to its owner's exit
/// (hayate removes the file while still listening), and `hayate upgrade`
/// hands the same listening socket to the new process, which never
/// claims: nothing needs to pass a lock from one process to the next.
pub fn bind_control(place: &ControlPlace) -> io::Result<(UnixListener, PathBuf)> {
    let (first, default) = match place {
        ControlPlace::Given(p) => (p, false),
        ControlPlace::Default(p) => (p, true),
    };
    let _claim = claim(first)?;
    if !default {
        return Ok((bind_free(first)?, first.clone()));
    }
    let free = family(first).find(|p| !answers(p)).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::AddrInUse,
            format!(
                "{PER_DIRECTORY} hayates answer on the control sockets of this directory ({}); \
                 give this one --control PATH",
                first.display()
            ),
        )
    })?;
    Ok((bind_free(&free)?, free))
}

/// Binds a Unix socket at `path` (the admin listener's), refusing a path
/// another hayate answers on; see [`bind_control`] for why it is race-free.
pub fn bind(path: &Path) -> io::Result<UnixListener> {
    let _claim = claim(path)?;
    bind_free(path)
}

/// Holds the lock under which a socket path of `first`'s family is
/// claimed; released when dropped. The lock file stays: removing it would
/// let two hayates lock two different files of one name.
fn claim(first: &Path) -> io::Result<nix::fcntl::Flock<std::fs::File>> {
    if let Some(dir) = first.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let lock = first.with_extension("lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&lock)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", lock.display())))?;
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| io::Error::other(format!("locking {}: {e}", lock.display())))
}

/// Binds at `path` (under the family's claim), replacing a stale socket
/// file, readable and writable by the owner only.
fn bind_free(path: &Path) -> io::Result<UnixListener> {
    if answers(path) {
        return Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!("{}: another hayate answers on it", path.display()),
        ));
    }
    let _ = std::fs::remove_file(path);
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// What the pid file beside a control socket (`NAME.pid` for `NAME.sock`)
/// says of its hayate: for tools that want a pid (its first line), and for
/// `hayate list` and the control commands to say which hayate they
/// address. Lines: the pid; the directory it was started in; `config
/// FILE` when it has one; `listen ADDR` per listener.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PidFile {
    /// The process id.
    pub pid: u32,
    /// The directory hayate was started in.
    pub dir: PathBuf,
    /// The config file, if any.
    pub config: Option<PathBuf>,
    /// Its listeners, as `http://ADDR`, `https://ADDR`, `http://unix:PATH`.
    pub listen: Vec<String>,
}

impl PidFile {
    /// This process's: `config` made absolute, as it is read from any
    /// directory.
    pub fn of_this_process(
        config: Option<&Path>,
        listen: &[hayate_config::values::Listen],
    ) -> Self {
        PidFile {
            pid: std::process::id(),
            dir: std::env::current_dir().unwrap_or_default(),
            config: config.map(|c| std::path::absolute(c).unwrap_or_else(|_| c.to_path_buf())),
            listen: listen.iter().map(crate::handoff::listen_key).collect(),
        }
    }

    /// The file's text.
    pub fn render(&self) -> String {
        let mut text = format!("{}\n{}\n", self.pid, self.dir.display());
        if let Some(config) = &self.config {
            text.push_str(&format!("config {}\n", config.display()));
        }
        for l in &self.listen {
            text.push_str(&format!("listen {l}\n"));
        }
        text
    }

    /// Parses a pid file's text (`None` without a pid).
    pub fn parse(text: &str) -> Option<PidFile> {
        let mut lines = text.lines();
        let mut file = PidFile {
            pid: lines.next()?.trim().parse().ok()?,
            dir: PathBuf::from(lines.next().unwrap_or_default()),
            ..PidFile::default()
        };
        for line in lines {
            match line.split_once(' ') {
                Some(("config", path)) => file.config = Some(PathBuf::from(path)),
                Some(("listen", addr)) => file.listen.push(addr.to_string()),
                _ => {}
            }
        }
        Some(file)
    }

    /// Reads the pid file of the control socket at `socket`.
    pub fn read(socket: &Path) -> Option<PidFile> {
        PidFile::parse(&std::fs::read_to_string(socket.with_extension("pid")).ok()?)
    }

    /// Writes it beside the control socket at `socket`, whole: written to a
    /// temporary file, then renamed over the old one, so a reader never sees
    /// half of it.
    pub fn write(&self, socket: &Path) -> io::Result<()> {
        let path = socket.with_extension("pid");
        let tmp = socket.with_extension(format!("pid.{}", std::process::id()));
        std::fs::write(&tmp, self.render())
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(|e| io::Error::new(e.kind(), format!("pid file {}: {e}", path.display())))
    }
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
                    "unknown command {other:?} (status, reload [APP], upgrade, stop [APP], start APP, restart APP, logs, purge url URL, purge tag TAG)\n"
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
    use super::{family, in_family, AppAction, PidFile};
    use std::path::{Path, PathBuf};

    #[test]
    fn reload_takes_an_optional_app_name() {
        assert_eq!(
            ControlCommand::parse("reload\n"),
            Some(ControlCommand::Reload(None))
        );
        assert_eq!(
            ControlCommand::parse("reload api\n"),
            Some(ControlCommand::Reload(Some("api".into())))
        );
        assert_eq!(ControlCommand::parse("reload api web\n"), None);
        assert_eq!(
            ControlCommand::parse("stop api\n"),
            Some(App(AppAction::Stop, "api".into()))
        );
        assert_eq!(
            ControlCommand::parse("restart web\n"),
            Some(App(AppAction::Restart, "web".into()))
        );
        assert_eq!(ControlCommand::parse("start\n"), None, "start names an app");
    }

    #[test]
    fn a_directorys_family_of_sockets() {
        let first = Path::new("/run/h/ab12.sock");
        let members: Vec<PathBuf> = family(first).take(3).collect();
        assert_eq!(
            members,
            [
                "/run/h/ab12.sock",
                "/run/h/ab12-2.sock",
                "/run/h/ab12-3.sock"
            ]
            .map(PathBuf::from)
        );
        for p in family(first) {
            assert!(in_family(first, &p), "{}", p.display());
        }
        for other in [
            "/run/h/ab123.sock",
            "/run/h/ab12-x.sock",
            "/run/h/ab12-2.pid",
            "/run/x/ab12-2.sock",
            "/run/h/ab12.lock",
        ] {
            assert!(!in_family(first, Path::new(other)), "{other}");
        }
    }

    #[test]
    fn pid_files_round_trip_and_older_ones_parse() {
        let file = PidFile {
            pid: 42,
            dir: "/srv/site".into(),
            config: Some("/etc/hayate/hayate.toml".into()),
            listen: vec![
                "http://127.0.0.1:8080".into(),
                "http://unix:/run/a b.sock".into(),
            ],
        };
        assert_eq!(PidFile::parse(&file.render()), Some(file));
        // What hayates before the config and listen lines wrote.
        let old = PidFile::parse("7\n/srv\n").expect("parses");
        assert_eq!(
            (old.pid, old.dir.as_path(), old.config),
            (7, Path::new("/srv"), None)
        );
        assert_eq!(PidFile::parse("x\n"), None);
    }

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
