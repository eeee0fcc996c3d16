//! The value types that name upstreams: `--proxy` members, `--fastcgi`
//! addresses, and how a group balances over its members.

use super::OptValue;

/// One `--proxy [PREFIX=]URL[,URL...]`: upstream members (`http://host:port`
/// or `unix:/path`), optionally for a path prefix (CLI and environment only;
/// in a file, a `[[site.route]]` has its own prefix).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxySpec {
    /// The path prefix, starting with `/`.
    pub prefix: Option<String>,
    /// Member addresses as written, each optionally followed by ` weight=N`.
    pub members: Vec<String>,
    /// A named `[[upstream]]` group instead of addresses (config file).
    pub group: Option<String>,
}

impl ProxySpec {
    /// Splits `http://a:1 weight=3` into the address and its weight (1 by
    /// default).
    pub fn member_weight(member: &str) -> (&str, u32) {
        let mut parts = member.split_whitespace();
        let url = parts.next().unwrap_or_default();
        let weight = parts
            .find_map(|p| p.strip_prefix("weight=")?.parse().ok())
            .unwrap_or(1);
        (url, weight)
    }
}

/// `[PREFIX=]A[,B...]`: the prefix (when it starts with `/`) and the
/// non-empty members.
fn prefix_and_members(s: &str) -> (Option<String>, Vec<String>) {
    let t = s.trim();
    let (prefix, list) = match t.split_once('=') {
        Some((p, rest)) if p.starts_with('/') => (Some(p.to_string()), rest),
        _ => (None, t),
    };
    let members = list
        .split(',')
        .map(|m| m.trim().to_string())
        .filter(|m| !m.is_empty())
        .collect();
    (prefix, members)
}

/// Whether a member is written as plain-text HTTP/2 (`h2c://HOST:PORT`
/// or `unix+h2c:PATH`).
pub fn speaks_h2c(member: &str) -> bool {
    member.starts_with("h2c://") || member.starts_with("unix+h2c:")
}

impl OptValue for ProxySpec {
    fn parse_str(s: &str) -> Result<Self, String> {
        let (prefix, members) = prefix_and_members(s);
        if members.is_empty() {
            return Err(format!("expected [PREFIX=]URL[,URL...], got {s:?}"));
        }
        if let [name] = members.as_slice() {
            if name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
                && !name.contains(':')
            {
                if name.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(format!(
                        "upstream {name:?}: expected http://HOST:PORT, unix:PATH or a group name"
                    ));
                }
                return Ok(ProxySpec {
                    prefix,
                    members: Vec::new(),
                    group: Some(name.clone()),
                });
            }
        }
        for m in &members {
            let mut words = m.split_whitespace();
            let m = words.next().unwrap_or_default();
            if let Some(extra) = words.next() {
                let weight_ok = extra
                    .strip_prefix("weight=")
                    .and_then(|w| w.parse::<u32>().ok())
                    .is_some_and(|w| (1..=1000).contains(&w));
                if !weight_ok || words.next().is_some() {
                    return Err(format!(
                        "upstream {m:?}: after the address only weight=N (1-1000) may follow"
                    ));
                }
            }
            let valid = match m
                .strip_prefix("unix:")
                .or_else(|| m.strip_prefix("unix+h2c:"))
            {
                Some(path) => !path.is_empty(),
                None => {
                    let (tls, rest) = match m.strip_prefix("https://") {
                        Some(rest) => (true, rest),
                        None => (
                            false,
                            m.strip_prefix("http://")
                                .or_else(|| m.strip_prefix("h2c://"))
                                .unwrap_or(m),
                        ),
                    };
                    let authority = rest.trim_end_matches('/');
                    let with_port = authority
                        .rsplit_once(':')
                        .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok());
                    // https:// defaults to port 443.
                    let default_port = tls && !authority.contains(':');
                    !authority.is_empty() && !authority.contains('/') && (with_port || default_port)
                }
            };
            if !valid {
                return Err(format!(
                    "upstream {m:?}: expected http://HOST:PORT, https://HOST[:PORT], h2c://HOST:PORT, unix:PATH or unix+h2c:PATH"
                ));
            }
        }
        // One group speaks one protocol (its pool and forwarding differ).
        let h2c = members.iter().filter(|m| speaks_h2c(m)).count();
        if h2c != 0 && h2c != members.len() {
            return Err(format!(
                "{s:?}: h2c:// (HTTP/2) and other members cannot share a group: put them in separate routes"
            ));
        }
        Ok(ProxySpec {
            prefix,
            members,
            group: None,
        })
    }
}

/// A FastCGI application's addresses, with the path prefix its route
/// takes on the command line: `[PREFIX=]unix:PATH|HOST:PORT[,ADDR]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FastCgiSpec {
    /// The path prefix, starting with `/`.
    pub prefix: Option<String>,
    /// Member addresses as written (`unix:PATH` or `HOST:PORT`).
    pub members: Vec<String>,
}

impl OptValue for FastCgiSpec {
    fn parse_str(s: &str) -> Result<Self, String> {
        let (prefix, members) = prefix_and_members(s);
        if members.is_empty() {
            return Err(format!(
                "expected [PREFIX=]unix:PATH or HOST:PORT, got {s:?}"
            ));
        }
        for m in &members {
            let valid = match m.strip_prefix("unix:") {
                Some(path) => !path.is_empty(),
                None => m.rsplit_once(':').is_some_and(|(h, p)| {
                    !h.is_empty() && !h.contains('/') && p.parse::<u16>().is_ok()
                }),
            };
            if !valid {
                return Err(format!(
                    "FastCGI address {m:?}: expected unix:PATH or HOST:PORT (php-fpm's listen)"
                ));
            }
        }
        Ok(FastCgiSpec { prefix, members })
    }
}

/// How a group spreads requests over its members.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BalanceSpec {
    /// Fewest requests in flight (default).
    LeastConn,
    /// In turn.
    RoundRobin,
    /// Consistent hash of a request header.
    HashHeader(String),
    /// Consistent hash of a cookie.
    HashCookie(String),
    /// Consistent hash of the client address.
    HashIp,
    /// hayate's own cookie (this name) sends a client back to the member
    /// that first served it.
    Sticky(String),
}

impl OptValue for BalanceSpec {
    fn parse_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        let valid_name = |n: &str| {
            !n.is_empty()
                && n.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        };
        Ok(match t {
            "least_conn" => BalanceSpec::LeastConn,
            "round_robin" => BalanceSpec::RoundRobin,
            "hash:ip" => BalanceSpec::HashIp,
            "sticky" => BalanceSpec::Sticky("hayate_sticky".into()),
            _ => match (
                t.strip_prefix("hash:header:"),
                t.strip_prefix("hash:cookie:"),
                t.strip_prefix("sticky:"),
            ) {
                (Some(h), _, _) if valid_name(h) => {
                    BalanceSpec::HashHeader(h.to_ascii_lowercase())
                }
                (_, Some(c), _) if valid_name(c) => BalanceSpec::HashCookie(c.to_string()),
                (_, _, Some(c)) if valid_name(c) => BalanceSpec::Sticky(c.to_string()),
                _ => {
                    return Err(format!(
                        "expected least_conn, round_robin, sticky, sticky:COOKIE, hash:ip, hash:header:NAME or hash:cookie:NAME, got {s:?}"
                    ))
                }
            },
        })
    }
}

/// What an upstream connection starts with (`proxy_protocol`, per route).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamProxyProtocol {
    /// Nothing: the request's bytes.
    Off,
    /// A PROXY protocol v2 header naming the client.
    V2,
}

impl OptValue for UpstreamProxyProtocol {
    fn parse_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "off" => Ok(UpstreamProxyProtocol::Off),
            "v2" => Ok(UpstreamProxyProtocol::V2),
            _ => Err(format!("expected off or v2, got {s:?}")),
        }
    }
}

/// What `https://` upstreams speak (`proxy_http2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamHttp2 {
    /// HTTP/1.1, as before HTTP/2 upstreams existed (the default: an
    /// https member that does not offer h2 keeps working unchanged).
    Off,
    /// HTTP/2, negotiated by ALPN `h2` (a member that refuses it fails its
    /// connects, with the reason logged).
    On,
    /// Whichever the members choose by ALPN (`h2` or `http/1.1` offered),
    /// learned at a route's first connection and again after a failed one.
    Auto,
}

impl OptValue for UpstreamHttp2 {
    fn parse_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "off" => Ok(UpstreamHttp2::Off),
            "on" => Ok(UpstreamHttp2::On),
            "auto" => Ok(UpstreamHttp2::Auto),
            _ => Err(format!("expected off, on or auto, got {s:?}")),
        }
    }
}
