//! The supervised app: the `[app]` section of the config file and the value
//! types of the `app_*` and `admin` options.
//!
//! `[app]` holds what only a file can say well (`command`, `cwd`, `env`,
//! `instances`) plus every `app_*` option of the table under its short
//! name (`max_memory` is `app_max_memory`): one option, one definition,
//! whatever the source. `hayate run` flags override the section.
//!
//! `[[app]]` tables declare several apps, each with a `name`; their
//! `app_*` options are their own ([`AppSection::own`]), over the global
//! ones. An app is served where a route names it (`app = "api"`); an app
//! no route names is a worker process: supervised, never proxied to.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::num::NonZeroU32;
use std::path::PathBuf;

use crate::app_restart::{RestartSchedule, WatchRules};
use crate::table::{GlobalLayer, GlobalOptions};
use crate::values::{Dur, ListenAddr, OptValue, Size};

/// The name of the app of a single `[app]` section (and of `hayate run`'s).
pub const DEFAULT_APP_NAME: &str = "app";

/// An `[app]` section or one `[[app]]` table: what to run.
#[derive(Debug, Clone, Default)]
pub struct AppSection {
    /// Unique among the apps, `[a-z0-9_-]+` (`app` for a single `[app]`):
    /// what routes, `hayate reload APP`, status and metrics call it.
    pub name: String,
    /// Program and arguments (`command = ["node", "server.js"]`, or a
    /// string split at spaces).
    pub command: Vec<String>,
    /// Working directory, relative to the config file's directory.
    pub cwd: Option<PathBuf>,
    /// Extra environment of the instances, in file order.
    pub env: Vec<(String, String)>,
    /// Number of instances (`hayate run --instances` overrides it).
    pub instances: Option<Instances>,
    /// A file of `KEY=VALUE` lines read at every start of the app (before
    /// `env`, which wins), relative to the config file.
    pub env_file: Option<PathBuf>,
    /// Its own `app_*` options (`[[app]]` only; a single `[app]` sets the
    /// global ones).
    pub own: GlobalLayer,
    /// Whether a route names it; an app no route names is a worker.
    pub served: bool,
    /// The line of the file where it is declared, for errors.
    pub line: Option<usize>,
    /// `watch` and `ignore`: restart on a change of its files (`None`: only
    /// under `hayate run --watch`, then its whole directory).
    pub watch: Option<WatchRules>,
    /// `ignore` without `watch`: what `--watch` skips.
    pub ignore: Vec<String>,
    /// `build`: a command run before a restart for a change of its files; a
    /// failure keeps the running instances.
    pub build: Vec<String>,
    /// `restart_cron` or `restart_every`.
    pub schedule: Option<RestartSchedule>,
}

/// The `app_*` options of one app: its own, else the global ones.
#[derive(Debug, Clone)]
pub struct AppOptions {
    /// `app_listen`.
    pub listen: Option<AppListen>,
    /// `app_protocol`.
    pub protocol: AppProtocol,
    /// `app_reload_parallel`.
    pub reload_parallel: NonZeroU32,
    /// `app_max_memory`.
    pub max_memory: Option<Size>,
    /// `app_max_requests`.
    pub max_requests: Option<u32>,
    /// `app_start_timeout`.
    pub start_timeout: Dur,
    /// `app_ready_path`.
    pub ready_path: Option<String>,
    /// `app_log`.
    pub log: Option<PathBuf>,
    /// `app_log_size`.
    pub log_size: Size,
    /// `app_log_keep`.
    pub log_keep: u32,
    /// `app_watch_debounce`.
    pub watch_debounce: Dur,
    /// `app_watch_max_dirs`.
    pub watch_max_dirs: u32,
    /// `app_build_timeout`.
    pub build_timeout: Dur,
}

impl AppSection {
    /// Its options: each of its own, else the global one.
    pub fn options(&self, global: &GlobalOptions) -> AppOptions {
        let own = &self.own;
        AppOptions {
            listen: own.app_listen.or(global.app_listen),
            protocol: own.app_protocol.unwrap_or(global.app_protocol),
            reload_parallel: own
                .app_reload_parallel
                .unwrap_or(global.app_reload_parallel),
            max_memory: own.app_max_memory.or(global.app_max_memory),
            max_requests: own.app_max_requests.or(global.app_max_requests),
            start_timeout: own.app_start_timeout.unwrap_or(global.app_start_timeout),
            ready_path: own.app_ready_path.clone().or(global.app_ready_path.clone()),
            log: own.app_log.clone().or(global.app_log.clone()),
            log_size: own.app_log_size.unwrap_or(global.app_log_size),
            log_keep: own.app_log_keep.unwrap_or(global.app_log_keep),
            watch_debounce: own.app_watch_debounce.unwrap_or(global.app_watch_debounce),
            watch_max_dirs: own.app_watch_max_dirs.unwrap_or(global.app_watch_max_dirs),
            build_timeout: own.app_build_timeout.unwrap_or(global.app_build_timeout),
        }
    }
}

/// The `app_*` options an `[[app]]` table may set for itself; the others
/// (`app_user`) are for every app.
pub const PER_APP_OPTIONS: &[&str] = &[
    "app_listen",
    "app_protocol",
    "app_reload_parallel",
    "app_max_memory",
    "app_max_requests",
    "app_start_timeout",
    "app_ready_path",
    "app_log",
    "app_log_size",
    "app_log_keep",
    "app_watch_debounce",
    "app_watch_max_dirs",
    "app_build_timeout",
];

/// Checks an app's name: what a route, `hayate reload APP` and a metric
/// label can carry without quoting.
pub fn valid_app_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

/// Which app a route sends what matches no file to (the route option
/// `app`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppRef {
    /// None: the route serves by its other options.
    Off,
    /// `app = true`: the only app (`hayate run`'s, or the one `[app]`).
    Only,
    /// `app = "NAME"`: the `[[app]]` of that name.
    Named(String),
}

impl AppRef {
    /// Whether the route sends to an app.
    pub fn is_on(&self) -> bool {
        *self != AppRef::Off
    }

    /// The name it gives, if any.
    pub fn name(&self) -> Option<&str> {
        match self {
            AppRef::Named(n) => Some(n),
            _ => None,
        }
    }
}

impl OptValue for AppRef {
    const FLAG: bool = true;
    fn parse_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        match t.to_ascii_lowercase().as_str() {
            "true" | "on" | "yes" | "1" => return Ok(AppRef::Only),
            "false" | "off" | "no" | "0" => return Ok(AppRef::Off),
            _ => {}
        }
        if valid_app_name(t) {
            Ok(AppRef::Named(t.to_string()))
        } else {
            Err(format!(
                "expected true, false or an app's name ([a-z0-9_-], up to 64), got {s:?}"
            ))
        }
    }
}

/// Parses an `env_file`: `KEY=VALUE` lines; blank lines and `#` comments
/// are skipped, `export ` before a key is allowed, and a value in matching
/// single or double quotes loses them (what `docker --env-file` and
/// dotenv files hold). An error names its line (1-based).
pub fn parse_env_file(text: &str) -> Result<Vec<(String, String)>, (usize, String)> {
    let mut vars = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        let Some((name, value)) = line.split_once('=') else {
            return Err((i + 1, format!("expected KEY=VALUE, got {line:?}")));
        };
        let name = name.trim();
        if !valid_env_name(name) {
            return Err((i + 1, format!("{name:?} is not a valid variable name")));
        }
        let value = value.trim();
        let unquoted = ['"', '\'']
            .iter()
            .find_map(|q| value.strip_prefix(*q)?.strip_suffix(*q))
            .unwrap_or(value);
        if unquoted.contains('\0') {
            return Err((i + 1, format!("{name}: a NUL byte in the value")));
        }
        vars.push((name.to_string(), unquoted.to_string()));
    }
    Ok(vars)
}

/// How many instances of the app run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Instances {
    /// One per worker thread.
    Auto,
    /// Exactly this many.
    Count(u32),
}

/// Most instances of an app.
pub const MAX_INSTANCES: u32 = 256;

impl Instances {
    /// The resolved count, given the number of workers.
    pub fn get(self, workers: usize) -> usize {
        match self {
            Instances::Auto => workers.clamp(1, MAX_INSTANCES as usize),
            Instances::Count(n) => n as usize,
        }
    }
}

impl OptValue for Instances {
    fn parse_str(s: &str) -> Result<Self, String> {
        if s.trim().eq_ignore_ascii_case("auto") {
            return Ok(Instances::Auto);
        }
        match s.trim().parse::<u32>() {
            Ok(n) if (1..=MAX_INSTANCES).contains(&n) => Ok(Instances::Count(n)),
            _ => Err(format!(
                "expected auto or a number from 1 to {MAX_INSTANCES}, got {s:?}"
            )),
        }
    }
}

/// How an app instance is told to listen, through `PORT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppListen {
    /// A Unix socket path of hayate's choosing.
    Unix,
    /// A free 127.0.0.1 TCP port of hayate's choosing.
    Tcp,
    /// 127.0.0.1 port BASE+i for instance i, BASE+N+i for its replacement
    /// (the two alternate, as old and new overlap during a reload).
    TcpBase(u16),
}

impl OptValue for AppListen {
    fn parse_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        match t {
            "unix" => return Ok(AppListen::Unix),
            "tcp" => return Ok(AppListen::Tcp),
            _ => {}
        }
        match t.strip_prefix("tcp:").map(str::parse::<u16>) {
            Some(Ok(base)) if base >= 1024 => Ok(AppListen::TcpBase(base)),
            _ => Err(format!(
                "expected unix, tcp or tcp:BASE (a port from 1024), got {s:?}"
            )),
        }
    }
}

/// What the supervised app's instances speak on their socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppProtocol {
    /// HTTP/1.1 (Node, Python, Go... apps).
    Http,
    /// FastCGI (php-fpm): the routes' roots hold the scripts it runs,
    /// with the same rules as `fastcgi`.
    FastCgi,
}

impl OptValue for AppProtocol {
    fn parse_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "http" => Ok(AppProtocol::Http),
            "fastcgi" => Ok(AppProtocol::FastCgi),
            _ => Err(format!("expected http or fastcgi, got {s:?}")),
        }
    }
}

/// The admin listener's address: `HOST:PORT`, a bare `PORT` (on
/// 127.0.0.1, never every interface) or `unix:PATH`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdminAddr {
    /// TCP.
    Tcp(SocketAddr),
    /// A Unix socket, owner-only.
    Unix(PathBuf),
}

impl OptValue for AdminAddr {
    /// As a listen address, but a bare port is on 127.0.0.1.
    fn parse_str(s: &str) -> Result<Self, String> {
        if let Ok(port) = s.trim().parse::<u16>() {
            return Ok(AdminAddr::Tcp(SocketAddr::new(
                IpAddr::V4(Ipv4Addr::LOCALHOST),
                port,
            )));
        }
        Ok(match ListenAddr::parse_str(s)? {
            ListenAddr::Tcp(a) => AdminAddr::Tcp(a),
            ListenAddr::Unix(p) => AdminAddr::Unix(p),
        })
    }
}

impl std::fmt::Display for AdminAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AdminAddr::Tcp(a) => write!(f, "{a}"),
            AdminAddr::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

/// The keys of `[app]` besides the `app_*` options: key, value, the
/// `hayate run` flag / env var that overrides it, help.
pub const APP_SECTION_KEYS: &[(&str, &str, &str, &str)] = &[
    (
        "command",
        "[\"PROGRAM\", \"ARG\"...]",
        "`hayate run -- CMD`",
        "The app's command (required); a string is split at spaces",
    ),
    (
        "cwd",
        "DIR",
        "",
        "Working directory of the instances, relative to the config file (default: its directory)",
    ),
    (
        "env",
        "{ NAME = \"VALUE\" }",
        "",
        "Extra environment variables of the instances",
    ),
    (
        "name",
        "NAME",
        "",
        "The app's name, [a-z0-9_-] (default for a single [app]: app); routes send to it with app = \"NAME\", hayate reload NAME rolls it alone",
    ),
    (
        "env_file",
        "FILE",
        "",
        "KEY=VALUE lines (# comments, export and quotes allowed) added to the environment at every start, before env; relative to the config file",
    ),
    (
        "watch",
        "[\"DIR\", \"FILE\", \"*.js\"...]",
        "`hayate run --watch` (the whole app directory)",
        "Restart the app (a rolling reload, no failed request) when these change: directories (everything under them), files, or name patterns (*.js anywhere under the app's directory); relative to the app's cwd; .git and node_modules never count",
    ),
    (
        "ignore",
        "[\"NAME\", \"*.log\", \"DIR/SUB\"...]",
        "",
        "Changes that never restart the app: a name or pattern matching any part of the changed path, or a path from the app's cwd",
    ),
    (
        "build",
        "[\"PROGRAM\", \"ARG\"...]",
        "",
        "Run in the app's cwd before a restart for a file change (app_build_timeout at most); if it fails, its output is logged and the running instances keep serving",
    ),
    (
        "restart_cron",
        "\"MIN HOUR DAY MONTH WEEKDAY\"",
        "",
        "Restart the app (rolling) at these times, in the server's local time zone (TZ, else /etc/localtime); 5 cron fields or 6 with seconds first; hayate status shows the next one",
    ),
    (
        "restart_every",
        "DURATION",
        "",
        "Restart the app (rolling) this long after it started, then again after each such restart (at least 1s; not with restart_cron)",
    ),
    (
        "instances",
        "N|auto",
        "`hayate run --instances N|auto` (env `HAYATE_INSTANCES`)",
        "Instances of the app (auto: one per worker)",
    ),
];

/// Splits a command string at spaces; quotes are refused (a list says
/// exactly what the arguments are, with no shell rules to guess).
pub fn split_command(s: &str) -> Result<Vec<String>, String> {
    if s.contains(['"', '\'', '\\']) {
        return Err(
            "quotes in a command string: give the command as a list, [\"node\", \"my app.js\"]"
                .into(),
        );
    }
    let words: Vec<String> = s.split_whitespace().map(str::to_string).collect();
    if words.is_empty() {
        return Err("empty command".into());
    }
    Ok(words)
}

/// Checks an environment variable name.
pub fn valid_env_name(name: &str) -> bool {
    !name.is_empty()
        && !name.as_bytes()[0].is_ascii_digit()
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instances() {
        assert_eq!(Instances::parse_str("auto"), Ok(Instances::Auto));
        assert_eq!(Instances::parse_str("4"), Ok(Instances::Count(4)));
        assert!(Instances::parse_str("0").is_err());
        assert!(Instances::parse_str("257").is_err());
        assert_eq!(Instances::Auto.get(3), 3);
    }

    #[test]
    fn app_listen() {
        assert_eq!(AppListen::parse_str("unix"), Ok(AppListen::Unix));
        assert_eq!(AppListen::parse_str("tcp"), Ok(AppListen::Tcp));
        assert_eq!(
            AppListen::parse_str("tcp:4000"),
            Ok(AppListen::TcpBase(4000))
        );
        assert!(AppListen::parse_str("tcp:80").is_err());
        assert!(AppListen::parse_str("udp").is_err());
    }

    #[test]
    fn app_refs_and_names() {
        assert_eq!(AppRef::parse_str("true"), Ok(AppRef::Only));
        assert_eq!(AppRef::parse_str("false"), Ok(AppRef::Off));
        assert_eq!(AppRef::parse_str("api"), Ok(AppRef::Named("api".into())));
        assert!(AppRef::parse_str("API").is_err());
        assert!(AppRef::parse_str("a b").is_err());
        assert!(valid_app_name("queue-worker_2") && !valid_app_name("") && !valid_app_name("a.b"));
    }

    #[test]
    fn env_files() {
        let text = "# comment\n\nA=1\nexport B = \"two words\"\nC='x'\nD=\n";
        assert_eq!(
            parse_env_file(text),
            Ok(vec![
                ("A".into(), "1".into()),
                ("B".into(), "two words".into()),
                ("C".into(), "x".into()),
                ("D".into(), String::new()),
            ])
        );
        assert_eq!(parse_env_file("A=1\nnot a pair\n").map_err(|e| e.0), Err(2));
        assert_eq!(parse_env_file("1X=1\n").map_err(|e| e.0), Err(1));
    }

    #[test]
    fn admin_addresses_default_to_loopback() {
        assert_eq!(
            AdminAddr::parse_str("9100"),
            Ok(AdminAddr::Tcp("127.0.0.1:9100".parse().expect("addr")))
        );
        assert_eq!(
            AdminAddr::parse_str("localhost:9100"),
            Ok(AdminAddr::Tcp("127.0.0.1:9100".parse().expect("addr")))
        );
        assert_eq!(
            AdminAddr::parse_str("unix:/run/a.sock"),
            Ok(AdminAddr::Unix("/run/a.sock".into()))
        );
        assert!(AdminAddr::parse_str("unix:").is_err());
        assert!(AdminAddr::parse_str("everywhere").is_err());
    }

    #[test]
    fn command_strings() {
        assert_eq!(
            split_command("node  server.js"),
            Ok(vec!["node".into(), "server.js".into()])
        );
        assert!(split_command("node 'a b.js'").is_err());
        assert!(split_command("  ").is_err());
        assert!(valid_env_name("NODE_ENV") && !valid_env_name("1X") && !valid_env_name("A=B"));
    }
}
