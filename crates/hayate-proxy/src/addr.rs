//! Upstream addresses: `http://host:port`, `https://host:port`,
//! `h2c://host:port` (HTTP/2 with prior knowledge) or `unix:/path`.

use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

/// Where an upstream member listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpstreamAddr {
    /// TCP; the authority is kept for the Host header when rewriting.
    Tcp {
        /// Resolved address.
        addr: SocketAddr,
        /// `host:port` as written.
        authority: String,
        /// `https://`: TLS to the member, verified against its host name
        /// (or its IP address).
        tls: bool,
        /// `h2c://`: plain-text HTTP/2 with prior knowledge (RFC 9113
        /// §3.3), as gRPC servers speak.
        h2c: bool,
    },
    /// A Unix socket.
    Unix(PathBuf),
    /// A Unix socket speaking plain-text HTTP/2 (`unix+h2c:PATH`, as
    /// Caddy writes it): a gRPC server on a socket.
    UnixH2c(PathBuf),
}

impl UpstreamAddr {
    /// Parses `http://host:port[/]`, `https://host:port[/]`,
    /// `h2c://host:port[/]`, `host:port`, `unix:/path` or `unix+h2c:/path`
    /// (the port defaults
    /// to 80, or 443 for https). Host names
    /// are resolved once, here.
    pub fn parse(s: &str) -> Result<UpstreamAddr, String> {
        let t = s.trim();
        if let Some(path) = t.strip_prefix("unix:") {
            if path.is_empty() {
                return Err("unix: needs a socket path".into());
            }
            return Ok(UpstreamAddr::Unix(PathBuf::from(path)));
        }
        if let Some(path) = t.strip_prefix("unix+h2c:") {
            if path.is_empty() {
                return Err("unix+h2c: needs a socket path".into());
            }
            return Ok(UpstreamAddr::UnixH2c(PathBuf::from(path)));
        }
        let (tls, h2c, rest) = match (t.strip_prefix("https://"), t.strip_prefix("h2c://")) {
            (Some(rest), _) => (true, false, rest),
            (_, Some(rest)) => (false, true, rest),
            _ => (false, false, t.strip_prefix("http://").unwrap_or(t)),
        };
        let authority = rest.trim_end_matches('/');
        if authority.is_empty() || authority.contains('/') {
            return Err(format!(
                "expected http://HOST:PORT, https://HOST:PORT, h2c://HOST:PORT or unix:PATH, got {s:?}"
            ));
        }
        let with_port = if authority
            .rsplit_once(':')
            .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
        {
            authority.to_string()
        } else {
            format!("{authority}:{}", if tls { 443 } else { 80 })
        };
        let addr = with_port
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .ok_or_else(|| format!("cannot resolve upstream {authority:?}"))?;
        Ok(UpstreamAddr::Tcp {
            addr,
            authority: authority.to_string(),
            tls,
            h2c,
        })
    }

    /// Whether the member speaks HTTP/2 in plain text (`h2c://`).
    pub fn is_h2c(&self) -> bool {
        matches!(
            self,
            UpstreamAddr::Tcp { h2c: true, .. } | UpstreamAddr::UnixH2c(_)
        )
    }

    /// The name a TLS member's certificate must carry: the host written in
    /// its URL (SNI is sent for a name, not for an IP address).
    pub fn tls_name(&self) -> Option<&str> {
        match self {
            UpstreamAddr::Tcp {
                authority,
                tls: true,
                ..
            } => Some(host_of(authority)),
            _ => None,
        }
    }
}

/// `host` of `host:port` (`[v6]:port` gives `v6`).
fn host_of(authority: &str) -> &str {
    let host = match authority.rsplit_once(':') {
        Some((h, p)) if p.parse::<u16>().is_ok() => h,
        _ => authority,
    };
    host.trim_start_matches('[').trim_end_matches(']')
}

impl fmt::Display for UpstreamAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UpstreamAddr::Tcp { addr, tls, h2c, .. } => {
                let scheme = match (tls, h2c) {
                    (true, _) => "https",
                    (_, true) => "h2c",
                    _ => "http",
                };
                write!(f, "{scheme}://{addr}")
            }
            UpstreamAddr::Unix(p) => write!(f, "unix:{}", p.display()),
            UpstreamAddr::UnixH2c(p) => write!(f, "unix+h2c:{}", p.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses() {
        assert_eq!(
            UpstreamAddr::parse("http://127.0.0.1:3000/"),
            Ok(UpstreamAddr::Tcp {
                addr: "127.0.0.1:3000".parse().expect("addr"),
                authority: "127.0.0.1:3000".into(),
                tls: false,
                h2c: false,
            })
        );
        let h2c = UpstreamAddr::parse("h2c://127.0.0.1:50051").expect("h2c");
        assert!(h2c.is_h2c());
        assert_eq!(h2c.to_string(), "h2c://127.0.0.1:50051");
        assert_eq!(h2c.tls_name(), None);
        let socket = UpstreamAddr::parse("unix+h2c:/run/grpc.sock").expect("unix+h2c");
        assert!(socket.is_h2c());
        assert_eq!(socket.to_string(), "unix+h2c:/run/grpc.sock");
        assert!(UpstreamAddr::parse("unix+h2c:").is_err());
        let secure = UpstreamAddr::parse("https://localhost").expect("https");
        assert!(matches!(secure, UpstreamAddr::Tcp { addr, tls: true, .. } if addr.port() == 443));
        assert_eq!(secure.tls_name(), Some("localhost"));
        let v6 = UpstreamAddr::parse("https://[::1]:8443").expect("v6");
        assert_eq!(v6.tls_name(), Some("::1"));
        assert!(matches!(
            UpstreamAddr::parse("localhost:3000"),
            Ok(UpstreamAddr::Tcp { .. })
        ));
        assert_eq!(
            UpstreamAddr::parse("unix:/run/app.sock"),
            Ok(UpstreamAddr::Unix("/run/app.sock".into()))
        );
        assert!(UpstreamAddr::parse("unix:").is_err());
        assert!(UpstreamAddr::parse("http://a:1/path").is_err());
        assert_eq!(
            UpstreamAddr::parse("http://127.0.0.1:3000").map(|a| a.to_string()),
            Ok("http://127.0.0.1:3000".into())
        );
    }
}
