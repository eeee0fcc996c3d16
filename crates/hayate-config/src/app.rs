//! The supervised app: the `[app]` section of the config file and the value
//! types of the `app_*` and `admin` options.
//!
//! `[app]` holds what only a file can say well (`command`, `cwd`, `env`,
//! `instances`) plus every `app_*` option of the table under its short
//! name (`max_memory` is `app_max_memory`): one option, one definition,
//! whatever the source. `hayate run` flags override the section.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use crate::values::{ListenAddr, OptValue};

/// The `[app]` section: what to run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AppSection {
    /// Program and arguments (`command = ["node", "server.js"]`, or a
    /// string split at spaces).
    pub command: Vec<String>,
    /// Working directory, relative to the config file's directory.
    pub cwd: Option<PathBuf>,
    /// Extra environment of the instances, in file order.
    pub env: Vec<(String, String)>,
    /// Number of instances (`hayate run --instances` overrides it).
    pub instances: Option<Instances>,
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
