//! Upstream addresses: `http://host:port` or `unix:/path`.

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
    },
    /// A Unix socket.
    Unix(PathBuf),
}

impl UpstreamAddr {
    /// Parses `http://host:port[/]`, `host:port` or `unix:/path`. Host names
    /// are resolved once, here.
    pub fn parse(s: &str) -> Result<UpstreamAddr, String> {
        let t = s.trim();
        if let Some(path) = t.strip_prefix("unix:") {
            if path.is_empty() {
                return Err("unix: needs a socket path".into());
            }
            return Ok(UpstreamAddr::Unix(PathBuf::from(path)));
        }
        if t.starts_with("https://") {
            return Err(format!("{t:?}: https upstreams are not supported yet"));
        }
        let rest = t.strip_prefix("http://").unwrap_or(t);
        let authority = rest.trim_end_matches('/');
        if authority.is_empty() || authority.contains('/') {
            return Err(format!("expected http://HOST:PORT or unix:PATH, got {s:?}"));
        }
        let with_port = if authority
            .rsplit_once(':')
            .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
        {
            authority.to_string()
        } else {
            format!("{authority}:80")
        };
        let addr = with_port
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .ok_or_else(|| format!("cannot resolve upstream {authority:?}"))?;
        Ok(UpstreamAddr::Tcp {
            addr,
            authority: authority.to_string(),
        })
    }
}

impl fmt::Display for UpstreamAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UpstreamAddr::Tcp { addr, .. } => write!(f, "http://{addr}"),
            UpstreamAddr::Unix(p) => write!(f, "unix:{}", p.display()),
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
                authority: "127.0.0.1:3000".into()
            })
        );
        assert!(matches!(
            UpstreamAddr::parse("localhost:3000"),
            Ok(UpstreamAddr::Tcp { .. })
        ));
        assert_eq!(
            UpstreamAddr::parse("unix:/run/app.sock"),
            Ok(UpstreamAddr::Unix("/run/app.sock".into()))
        );
        assert!(UpstreamAddr::parse("unix:").is_err());
        assert!(UpstreamAddr::parse("https://a:1").is_err());
        assert!(UpstreamAddr::parse("http://a:1/path").is_err());
        assert_eq!(
            UpstreamAddr::parse("http://127.0.0.1:3000").map(|a| a.to_string()),
            Ok("http://127.0.0.1:3000".into())
        );
    }
}
