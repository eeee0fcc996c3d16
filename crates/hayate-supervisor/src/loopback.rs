//! Instances on TCP stay on loopback: they are told `HOST`/`HOSTNAME`
//! 127.0.0.1 (Nuxt, Remix and Next's standalone server read them), Node
//! apps get a preload that holds their listen on `PORT` to 127.0.0.1
//! (Express, Koa, NestJS, Hono and `next start` listen on every interface
//! when given only a port, and read no host variable), and once an instance
//! is ready its port is looked up in /proc/net/tcp{,6}: a listener beyond
//! loopback (a Python or Go app bound to 0.0.0.0) is reachable around
//! hayate, and is logged as a warning with the fix.

use std::ffi::OsString;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};

use hayate_core::identity::Identity;

/// The host instances are told to listen on.
pub(crate) const HOST: &str = "127.0.0.1";

/// Loaded into every Node process of an instance (`NODE_OPTIONS=--require`):
/// a listen on the port in `PORT` that names no host, or a wildcard one
/// (`0.0.0.0`, `::`: container boilerplate), binds `HOST` instead
/// (127.0.0.1, unless the app's own env sets another: the way to opt out).
/// Any other listen (a Unix socket, another port, a given address) is left
/// as the app asked. It runs before the app's own code, CommonJS or ESM.
const NODE_PRELOAD: &str = r#"'use strict';
// Written by hayate (hayate run): holds this app's listen on PORT to
// loopback, so that only hayate reaches it. See hayate's README, "Apps".
const net = require('net');
const port = Number(process.env.PORT);
const host = process.env.HOST || '127.0.0.1';
const wildcard = (h) => h === undefined || h === null || h === '' ||
  h === '0.0.0.0' || h === '::' || h === '::0' || h === '[::]';
const isPort = (p) => (typeof p === 'number' || (typeof p === 'string' && p.trim() !== ''))
  && Number(p) === port;
const listen = net.Server.prototype.listen;
if (Number.isInteger(port) && port > 0) {
  net.Server.prototype.listen = function (...args) {
    const first = args[0];
    if (first !== null && typeof first === 'object' && !Array.isArray(first)) {
      if (first.path === undefined && first.handle === undefined && first.fd === undefined
          && isPort(first.port) && wildcard(first.host)) {
        args[0] = { ...first, host };
      }
    } else if (isPort(first)) {
      if (typeof args[1] === 'string' || args[1] === undefined || args[1] === null) {
        if (wildcard(args[1])) args[1] = host;
      } else {
        args.splice(1, 0, host);
      }
    }
    return listen.apply(this, args);
  };
}
"#;

/// The preload's file name in the runtime directory.
pub(crate) const NODE_PRELOAD_FILE: &str = "node-loopback.cjs";

/// Makes `dir` (given to the instances' user, `run_as`) and writes the
/// Node preload into it.
pub(crate) fn write_node_preload(dir: &Path, run_as: Option<&Identity>) -> io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    if let Some(who) = run_as {
        std::os::unix::fs::chown(dir, Some(who.uid), Some(who.gid))?;
    }
    let path = dir.join(NODE_PRELOAD_FILE);
    std::fs::write(&path, NODE_PRELOAD)?;
    Ok(path)
}

/// `NODE_OPTIONS` with the preload first, then what the app's own
/// environment (`existing`) had.
pub(crate) fn node_options(preload: &Path, existing: Option<OsString>) -> OsString {
    let mut out = OsString::from("--require \"");
    out.push(preload.as_os_str());
    out.push("\"");
    if let Some(more) = existing.filter(|e| !e.is_empty()) {
        out.push(" ");
        out.push(more);
    }
    out
}

/// The addresses beyond loopback that something listens on at TCP `port`,
/// from /proc/net/tcp and /proc/net/tcp6 (the instance's port is its own:
/// whatever listens there is the instance, or a process it started).
pub(crate) fn exposed_listeners(port: u16) -> Vec<SocketAddr> {
    let mut found = Vec::new();
    for (file, v6) in [("/proc/net/tcp", false), ("/proc/net/tcp6", true)] {
        if let Ok(table) = std::fs::read_to_string(file) {
            found.extend(
                listeners(&table, v6)
                    .filter(|a| a.port() == port && !a.ip().is_loopback())
                    .filter(|a| !is_mapped_loopback(a.ip())),
            );
        }
    }
    found
}

/// The LISTEN sockets (state 0A) of a /proc/net/tcp{,6} table.
fn listeners(table: &str, v6: bool) -> impl Iterator<Item = SocketAddr> + '_ {
    table.lines().skip(1).filter_map(move |line| {
        let mut fields = line.split_whitespace();
        let local = fields.nth(1)?;
        let state = fields.nth(1)?;
        if state != "0A" {
            return None;
        }
        let (ip, port) = local.split_once(':')?;
        let port = u16::from_str_radix(port, 16).ok()?;
        Some(SocketAddr::new(parse_ip(ip, v6)?, port))
    })
}

/// An address as /proc prints it: 32-bit words in hex, each in the host's
/// byte order.
fn parse_ip(hex: &str, v6: bool) -> Option<IpAddr> {
    let words: Vec<u32> = (0..hex.len() / 8)
        .map(|i| u32::from_str_radix(hex.get(i * 8..i * 8 + 8)?, 16).ok())
        .collect::<Option<_>>()?;
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    match (v6, bytes.len()) {
        (false, 4) => Some(IpAddr::V4(Ipv4Addr::new(
            bytes[0], bytes[1], bytes[2], bytes[3],
        ))),
        (true, 16) => Some(IpAddr::V6(Ipv6Addr::from(
            <[u8; 16]>::try_from(bytes).ok()?,
        ))),
        _ => None,
    }
}

fn is_mapped_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()),
        IpAddr::V4(_) => false,
    }
}

/// The warning for an instance found listening at `exposed`.
pub(crate) fn exposure_warning(tag: &str, pid: u32, exposed: &[SocketAddr]) -> String {
    let list: Vec<String> = exposed.iter().map(|a| a.to_string()).collect();
    format!(
        "{tag} (pid {pid}) listens on {}: reachable from other interfaces, around \
         hayate; make it listen on {HOST} (the HOST variable hayate sets), e.g. \
         `server.listen(process.env.PORT, process.env.HOST)`, `--bind $HOST:$PORT`, \
         `--host $HOST`",
        list.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    // Lines as Linux prints them (x86-64, little-endian words).
    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0
   1: 00000000:1F91 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2 1 0 100 0 0 10 0
   2: 0100007F:1F92 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000     0        0 3 1 0 100 0 0 10 0
";
    const TCP6: &str = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:1F93 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4 1 0 100 0 0 10 0
   1: 00000000000000000000000001000000:1F94 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 5 1 0 100 0 0 10 0
";

    #[test]
    #[cfg(target_endian = "little")]
    fn proc_tables_are_read() {
        let v4: Vec<SocketAddr> = listeners(TCP, false).collect();
        assert_eq!(
            v4,
            vec![
                "127.0.0.1:8080".parse().expect("addr"),
                "0.0.0.0:8081".parse().expect("addr"),
            ],
            "the established connection is no listener"
        );
        let v6: Vec<SocketAddr> = listeners(TCP6, true).collect();
        assert_eq!(
            v6,
            vec![
                "[::]:8083".parse().expect("addr"),
                "[::1]:8084".parse().expect("addr"),
            ]
        );
    }

    #[test]
    fn node_options_keep_the_apps_own() {
        let p = Path::new("/run/x/node-loopback.cjs");
        assert_eq!(
            node_options(p, None),
            OsString::from("--require \"/run/x/node-loopback.cjs\"")
        );
        assert_eq!(
            node_options(p, Some("--max-old-space-size=512".into())),
            OsString::from("--require \"/run/x/node-loopback.cjs\" --max-old-space-size=512")
        );
    }

    #[test]
    fn a_wildcard_listener_is_exposed_and_loopback_is_not() {
        let wild = std::net::TcpListener::bind("0.0.0.0:0").expect("bind");
        let port = wild.local_addr().expect("addr").port();
        assert_eq!(
            exposed_listeners(port),
            vec![SocketAddr::from(([0, 0, 0, 0], port))]
        );
        let local = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        assert!(exposed_listeners(local.local_addr().expect("addr").port()).is_empty());
    }
}
