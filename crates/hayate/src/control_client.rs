//! The control client: `hayate status|reload|upgrade|stop|logs|purge` find
//! the running hayate's control socket and send it one command line.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Arg, ArgMatches, Command};

pub fn control_command(name: &'static str, about: &'static str) -> Command {
    Command::new(name).about(about).arg(
        Arg::new("control")
            .long("control")
            .value_name("PATH")
            .env("HAYATE_CONTROL")
            .help("Control socket [default: the one of the hayate run started in this directory]"),
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

/// The control socket a command talks to: `--control`, else the one of the
/// hayate started in this directory, else the only one answering in
/// [`control_dir`] (with several, the error lists them).
pub fn find_control(given: Option<&String>) -> anyhow::Result<PathBuf> {
    if let Some(path) = given {
        return Ok(PathBuf::from(path));
    }
    let here = default_control_path(Path::new("."));
    if std::os::unix::net::UnixStream::connect(&here).is_ok() {
        return Ok(here);
    }
    let live: Vec<PathBuf> = std::fs::read_dir(control_dir())
        .into_iter()
        .flatten()
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "sock"))
        .filter(|p| std::os::unix::net::UnixStream::connect(p).is_ok())
        .collect();
    match live.as_slice() {
        [only] => Ok(only.clone()),
        [] => anyhow::bail!(
            "no hayate run answers on {} (start it here, or pass --control)",
            here.display()
        ),
        several => {
            let list: Vec<String> = several
                .iter()
                .map(|p| {
                    let about =
                        std::fs::read_to_string(p.with_extension("pid")).unwrap_or_default();
                    let mut lines = about.lines();
                    let (pid, dir) = (lines.next().unwrap_or("?"), lines.next().unwrap_or("?"));
                    format!("  --control {}  (pid {pid}, started in {dir})", p.display())
                })
                .collect();
            anyhow::bail!(
                "{} hayates answer; run this in the directory of one, or pick one:\n{}",
                several.len(),
                list.join("\n")
            )
        }
    }
}

/// `hayate status|reload|upgrade|stop|purge`: one command on the control
/// socket; its answer printed, and exit 1 when it failed.
pub fn control(name: &str, m: &ArgMatches) -> anyhow::Result<()> {
    let path = find_control(m.get_one::<String>("control"))?;
    let line = match (
        m.try_get_one::<String>("url"),
        m.try_get_one::<String>("tag"),
    ) {
        (Ok(Some(url)), _) => format!("{name} url {url}\n"),
        (_, Ok(Some(tag))) => format!("{name} tag {tag}\n"),
        _ => format!("{name}\n"),
    };
    // The line the server will parse: refuse here what it would refuse.
    anyhow::ensure!(
        hayate_server::control::ControlCommand::parse(&line).is_some(),
        "a URL or tag must be one word, without spaces"
    );
    match ask(&path, &line) {
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

/// Sends one command line on the control socket at `path`: `Ok` with the
/// answer, or `Err` with what the server said went wrong.
pub fn ask(path: &Path, line: &str) -> anyhow::Result<String> {
    use std::io::{Read, Write};
    let mut s = std::os::unix::net::UnixStream::connect(path).with_context(|| {
        format!(
            "no hayate run answers on {} (start it here, or pass --control)",
            path.display()
        )
    })?;
    s.write_all(line.as_bytes())?;
    let mut answer = String::new();
    s.read_to_string(&mut answer)?;
    let (ok, text) = hayate_server::control::parse_answer(&answer);
    anyhow::ensure!(ok, "{text}");
    Ok(text.to_string())
}
