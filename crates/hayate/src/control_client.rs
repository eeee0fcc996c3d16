//! The control client: `hayate status|reload|upgrade|stop|logs|purge` find
//! the running hayate's control socket and send it one command line, saying
//! which hayate they address; `hayate list` shows every running hayate.
//!
//! A command reaches a hayate started in the current directory, or the one
//! it is told (`--control PATH`, `--pid N`): never one started elsewhere by
//! guess, and never one of several.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Arg, ArgMatches, Command};
use hayate_server::control::{self, PidFile};

/// A control command's own arguments: which hayate.
pub fn control_command(name: &'static str, about: &'static str) -> Command {
    Command::new(name)
        .about(about)
        .arg(
            Arg::new("control")
                .long("control")
                .value_name("PATH")
                .env("HAYATE_CONTROL")
                .help(
                    "Control socket of the hayate to address [default: that of the hayate \
                     started in this directory; with several, pick one with --pid]",
                ),
        )
        .arg(
            Arg::new("pid")
                .long("pid")
                .value_name("N")
                .value_parser(clap::value_parser!(u32))
                .conflicts_with("control")
                .help("The hayate of this process id (hayate list shows them)"),
        )
}

/// A control command that names one app: `hayate start APP`.
pub fn app_command(name: &'static str, about: &'static str) -> Command {
    control_command(name, about).arg(
        Arg::new("app")
            .value_name("APP")
            .required(true)
            .help("The app's name in the config file"),
    )
}

/// `hayate list`.
pub fn list_command() -> Command {
    Command::new("list").about(
        "Show every running hayate of this user (root: the services'): pid, the directory it \
         was started in, its config file, its listeners and control socket",
    )
}

/// Where control sockets live: `$XDG_RUNTIME_DIR/hayate` in a user's
/// session, `/run/hayate` for root (a service), else the temp dir's
/// `hayate-UID`.
fn control_dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir).join("hayate"),
        _ if nix::unistd::Uid::effective().is_root() => PathBuf::from("/run/hayate"),
        _ => std::env::temp_dir().join(format!("hayate-{}", nix::unistd::getuid())),
    }
}

/// The control socket of a hayate started in `dir`: one per user and
/// directory, so `hayate status` run in the app's directory finds it.
pub fn default_control_path(dir: &Path) -> PathBuf {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in dir.as_os_str().as_encoded_bytes() {
        h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
    }
    control_dir().join(format!("{h:016x}.sock"))
}

/// A running hayate, as its control socket and pid file say.
pub struct Target {
    /// Its control socket.
    pub socket: PathBuf,
    /// Its pid file (`None` from a hayate that wrote none).
    pub about: Option<PidFile>,
}

impl Target {
    fn of(socket: PathBuf) -> Target {
        let about = PidFile::read(&socket);
        Target { socket, about }
    }

    /// Which hayate this is, in a line: pid, directory, config file.
    pub fn describe(&self) -> String {
        match &self.about {
            Some(a) => format!(
                "hayate pid {}, started in {}, config {}",
                a.pid,
                a.dir.display(),
                a.config
                    .as_ref()
                    .map_or("none".into(), |c| c.display().to_string())
            ),
            None => format!("hayate on {} (no pid file)", self.socket.display()),
        }
    }
}

/// Every hayate answering on a control socket in [`control_dir`].
fn running() -> Vec<Target> {
    let mut targets: Vec<Target> = std::fs::read_dir(control_dir())
        .into_iter()
        .flatten()
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "sock"))
        .filter(|p| control::answers(p))
        .map(Target::of)
        .collect();
    targets.sort_by_key(|t| t.about.as_ref().map(|a| a.pid));
    targets
}

/// One line per hayate, `--pid N (started in DIR, config FILE)`, to pick
/// from.
fn choices(targets: &[Target]) -> String {
    targets
        .iter()
        .map(|t| match &t.about {
            Some(a) => format!(
                "  --pid {}  (started in {}, config {})",
                a.pid,
                a.dir.display(),
                a.config
                    .as_ref()
                    .map_or("none".into(), |c| c.display().to_string())
            ),
            None => format!("  --control {}", t.socket.display()),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The hayate a command addresses: `--control PATH`; else `--pid N`; else
/// the one started in this directory. Several started here, or none here
/// (however many run elsewhere), is an error that lists them.
pub fn find_control(m: &ArgMatches) -> anyhow::Result<Target> {
    if let Some(path) = m.get_one::<String>("control") {
        return Ok(Target::of(PathBuf::from(path)));
    }
    if let Some(&pid) = m.get_one::<u32>("pid") {
        return running()
            .into_iter()
            .find(|t| t.about.as_ref().is_some_and(|a| a.pid == pid))
            .with_context(|| {
                format!(
                    "no hayate with pid {pid} answers in {} (one whose control socket is \
                     elsewhere is reached with --control PATH)",
                    control_dir().display()
                )
            });
    }
    let first = default_control_path(Path::new("."));
    let (mut here, elsewhere): (Vec<Target>, Vec<Target>) = running()
        .into_iter()
        .partition(|t| control::in_family(&first, &t.socket));
    let cwd = std::env::current_dir().unwrap_or_default();
    match here.len() {
        1 => Ok(here.remove(0)),
        0 if elsewhere.is_empty() => {
            anyhow::bail!("no hayate runs (none was started in {})", cwd.display())
        }
        0 => anyhow::bail!(
            "no hayate was started in {}; to address one started elsewhere, say which:\n{}",
            cwd.display(),
            choices(&elsewhere)
        ),
        n => anyhow::bail!(
            "{n} hayates were started in {}; say which:\n{}",
            cwd.display(),
            choices(&here)
        ),
    }
}

/// `hayate status|reload|upgrade|stop|purge`: one command on the control
/// socket, with a line naming the hayate it addresses; its answer
/// printed, and exit 1 when it failed.
pub fn control(name: &str, m: &ArgMatches) -> anyhow::Result<()> {
    let line = match (
        m.try_get_one::<String>("url"),
        m.try_get_one::<String>("tag"),
    ) {
        (Ok(Some(url)), _) => format!("{name} url {url}\n"),
        (_, Ok(Some(tag))) => format!("{name} tag {tag}\n"),
        _ => match m.try_get_one::<String>("app") {
            Ok(Some(app)) => format!("{name} {app}\n"),
            _ => format!("{name}\n"),
        },
    };
    // The line the server will parse: refuse here what it would refuse.
    anyhow::ensure!(
        control::ControlCommand::parse(&line).is_some(),
        "a URL, tag or app name must be one word, without spaces"
    );
    let target = find_control(m)?;
    // Which hayate: for status, part of its report; for a command that
    // acts, said on stderr, so that its stdout stays the server's answer
    // (`purged 3`) for scripts.
    if name == "status" {
        println!("{}", target.describe());
        for l in target.about.iter().flat_map(|a| &a.listen) {
            println!("listening on {l}");
        }
    } else {
        eprintln!("{name}: {}", target.describe());
    }
    match ask(&target.socket, &line) {
        Ok(text) => {
            print!("{text}");
            Ok(())
        }
        Err(e) => {
            eprint!("{e}");
            anyhow::bail!("{name} failed")
        }
    }
}

/// `hayate list`: every hayate answering in [`control_dir`], a line each.
pub fn list() -> anyhow::Result<()> {
    let targets = running();
    if targets.is_empty() {
        println!(
            "no hayate runs (none answers in {})",
            control_dir().display()
        );
        return Ok(());
    }
    let rows: Vec<[String; 5]> = targets
        .iter()
        .map(|t| {
            let a = t.about.clone().unwrap_or_default();
            let pid = t.about.as_ref().map_or("?".into(), |a| a.pid.to_string());
            [
                pid,
                a.dir.display().to_string(),
                a.config.map_or("-".into(), |c| c.display().to_string()),
                a.listen.join(","),
                t.socket.display().to_string(),
            ]
        })
        .collect();
    let header = ["PID", "DIRECTORY", "CONFIG", "LISTEN", "CONTROL"].map(String::from);
    let mut widths = [0; 5];
    for row in std::iter::once(&header).chain(&rows) {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for row in std::iter::once(&header).chain(&rows) {
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, w)| format!("{cell:w$}"))
            .collect();
        println!("{}", cells.join("  ").trim_end());
    }
    Ok(())
}

/// Sends one command line on the control socket at `path`: `Ok` with the
/// answer, or `Err` with what the server said went wrong.
pub fn ask(path: &Path, line: &str) -> anyhow::Result<String> {
    use std::io::{Read, Write};
    let mut s = std::os::unix::net::UnixStream::connect(path)
        .with_context(|| format!("no hayate answers on {}", path.display()))?;
    s.write_all(line.as_bytes())?;
    let mut answer = String::new();
    s.read_to_string(&mut answer)?;
    let (ok, text) = hayate_server::control::parse_answer(&answer);
    anyhow::ensure!(ok, "{text}");
    Ok(text.to_string())
}
