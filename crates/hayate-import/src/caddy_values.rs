//! Caddyfile values in hayate's spelling: placeholders in templates, site
//! addresses, upstream and FastCGI addresses, sizes and durations.

/// A Caddy template (`https://{host}{uri}`) in hayate's variables. A
/// placeholder hayate has no value for is an error naming it.
pub fn template(s: &str) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    loop {
        let Some(open) = rest.find(['{', '$']) else {
            out.push_str(rest);
            return Ok(out);
        };
        out.push_str(&rest[..open]);
        if rest[open..].starts_with('$') {
            // A literal dollar sign in hayate's templates.
            out.push_str("$$");
            rest = &rest[open + 1..];
            continue;
        }
        let Some(len) = rest[open..].find('}') else {
            out.push_str(&rest[open..]);
            return Ok(out);
        };
        let name = &rest[open + 1..open + len];
        rest = &rest[open + len + 1..];
        out.push_str(&placeholder(name)?);
    }
}

/// One placeholder's hayate variable (`$host`), by its short or long name.
fn placeholder(name: &str) -> Result<String, String> {
    let var = match name {
        "host" | "http.request.host" => "$host",
        "uri" | "http.request.uri" => "$request_uri",
        "path" | "http.request.uri.path" => "$path",
        "query" | "http.request.uri.query" => "$query",
        "scheme" | "http.request.scheme" => "$scheme",
        "remote_host" | "client_ip" | "http.request.remote.host" | "http.vars.client_ip" => {
            "$client_ip"
        }
        _ => {
            // Regex captures: {re.NAME.N}, {re.N}, {http.regexp.NAME.N}.
            let capture = name
                .strip_prefix("re.")
                .or_else(|| name.strip_prefix("http.regexp."))
                .and_then(|r| r.rsplit('.').next())
                .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
            return match capture {
                Some(n) => Ok(format!("${{{n}}}")),
                None => Err(format!(
                    "the placeholder {{{name}}} has no hayate equivalent"
                )),
            };
        }
    };
    Ok(var.into())
}

/// A site address, as Caddy reads one: `[scheme://]host[:port][/path]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address {
    /// `http`, `https`, or "" (unsaid).
    pub scheme: String,
    /// The name ("" for any host).
    pub host: String,
    /// The port (None: the scheme's, or 443 for a name).
    pub port: Option<u16>,
    /// A path after the host ("" for none).
    pub path: String,
}

impl Address {
    /// Parses one address.
    pub fn parse(s: &str) -> Result<Address, String> {
        let (scheme, rest) = match s.split_once("://") {
            Some((scheme, rest)) => (scheme.to_ascii_lowercase(), rest),
            None => (String::new(), s),
        };
        if !matches!(scheme.as_str(), "" | "http" | "https") {
            return Err(format!("{s}: scheme {scheme} (http or https)"));
        }
        let (hostport, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
            match v6.split_once(']') {
                Some((h, p)) => (format!("[{h}]"), p.strip_prefix(':')),
                None => return Err(format!("{s}: unclosed [")),
            }
        } else {
            match hostport.rsplit_once(':') {
                Some((h, p)) => (h.to_string(), Some(p)),
                None => (hostport.to_string(), None),
            }
        };
        let port = match port {
            Some(p) => Some(p.parse::<u16>().map_err(|_| format!("{s}: port {p:?}"))?),
            None => None,
        };
        Ok(Address {
            scheme,
            host: host.to_ascii_lowercase(),
            port,
            path: path.into(),
        })
    }

    /// Whether Caddy serves it over HTTPS: said so, port 443, or a host
    /// name without `http://` and not on the HTTP port.
    pub fn is_https(&self, http_port: u16) -> bool {
        match self.scheme.as_str() {
            "https" => true,
            "http" => false,
            _ => self.port == Some(443) || (!self.host.is_empty() && self.port != Some(http_port)),
        }
    }

    /// Whether Caddy's certificates for it come from its local CA:
    /// localhost, `*.localhost`, `.local` names and IP addresses.
    pub fn is_internal(&self) -> bool {
        let h = self.host.trim_start_matches('[').trim_end_matches(']');
        h == "localhost"
            || h.ends_with(".localhost")
            || h.ends_with(".local")
            || h.ends_with(".internal")
            || h.parse::<std::net::IpAddr>().is_ok()
    }
}

/// A `reverse_proxy` upstream (`localhost:3000`, `:3000`, `http://a:80`,
/// `https://a`, `h2c://a:50051`, `unix//run/app.sock`) as a hayate member.
pub fn upstream(s: &str) -> Result<String, String> {
    if let Some(path) = s.strip_prefix("unix/") {
        return Ok(format!("unix:{path}"));
    }
    if s.contains('{') {
        return Err(format!("{s}: an upstream from a placeholder"));
    }
    let (scheme, rest) = match s.split_once("://") {
        Some((scheme @ ("http" | "https" | "h2c"), rest)) => (scheme, rest),
        Some((scheme, _)) => return Err(format!("{s}: scheme {scheme}")),
        None => ("http", s),
    };
    let rest = rest.trim_end_matches('/');
    if rest.contains('/') {
        return Err(format!("{s}: an upstream address takes no path"));
    }
    let rest = if rest.starts_with(':') {
        format!("localhost{rest}")
    } else {
        rest.to_string()
    };
    Ok(crate::values::member(&rest, scheme))
}

/// A `php_fastcgi` address (`unix//run/php/php-fpm.sock`,
/// `127.0.0.1:9000`) as hayate's `fastcgi` spelling.
pub fn fastcgi(s: &str) -> Result<String, String> {
    if let Some(path) = s.strip_prefix("unix/") {
        return Ok(format!("unix:{path}"));
    }
    let rest = s.strip_prefix("fastcgi://").unwrap_or(s);
    if rest.contains(['/', '{']) {
        return Err(format!("{s}: a FastCGI address is HOST:PORT or unix//PATH"));
    }
    match rest.rsplit_once(':') {
        Some((h, p)) if p.parse::<u16>().is_ok() => Ok(format!(
            "{}:{p}",
            if h.is_empty() { "localhost" } else { h }
        )),
        // php_fastcgi's default port.
        _ => Ok(format!("{rest}:9000")),
    }
}

/// A size as Caddy reads one (go-humanize: `10MB` is 10,000,000 bytes,
/// `10MiB` 10,485,760) in bytes; hayate takes a bare number as bytes.
pub fn size(s: &str) -> Result<String, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let n: f64 = t[..split]
        .parse()
        .map_err(|_| format!("{s:?} is not a size"))?;
    let factor: f64 = match t[split..].trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "ki" | "kib" => 1024.0,
        "m" | "mb" => 1e6,
        "mi" | "mib" => 1024.0 * 1024.0,
        "g" | "gb" => 1e9,
        "gi" | "gib" => 1024.0 * 1024.0 * 1024.0,
        u => return Err(format!("{s:?}: unknown size unit {u:?}")),
    };
    Ok(format!("{}", (n * factor).round() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_addresses_and_sizes() {
        assert_eq!(
            template("https://{host}{uri}").unwrap(),
            "https://$host$request_uri"
        );
        assert_eq!(
            template("/p/{re.slug.1}?{http.request.uri.query}&x=$5").unwrap(),
            "/p/${1}?$query&x=$$5"
        );
        assert!(template("{cookie.a}").unwrap_err().contains("{cookie.a}"));
        let a = Address::parse("https://Example.com:8443/app").unwrap();
        assert_eq!(
            (a.host.as_str(), a.port, a.path.as_str()),
            ("example.com", Some(8443), "/app")
        );
        assert!(Address::parse("example.com").unwrap().is_https(80));
        assert!(!Address::parse(":8080").unwrap().is_https(80));
        assert!(!Address::parse("example.com:80").unwrap().is_https(80));
        assert!(Address::parse("localhost").unwrap().is_internal());
        assert!(Address::parse("[::1]:8443").unwrap().is_internal());
        assert_eq!(upstream("localhost:3000").unwrap(), "http://localhost:3000");
        assert_eq!(upstream(":3000").unwrap(), "http://localhost:3000");
        assert_eq!(
            upstream("https://api.example.com").unwrap(),
            "https://api.example.com:443"
        );
        assert_eq!(
            upstream("h2c://127.0.0.1:50051").unwrap(),
            "h2c://127.0.0.1:50051"
        );
        assert_eq!(
            upstream("unix//run/app.sock").unwrap(),
            "unix:/run/app.sock"
        );
        assert!(upstream("srv+http://x").is_err());
        assert_eq!(
            fastcgi("unix//run/php/php-fpm.sock").unwrap(),
            "unix:/run/php/php-fpm.sock"
        );
        assert_eq!(fastcgi("127.0.0.1:9000").unwrap(), "127.0.0.1:9000");
        assert_eq!(fastcgi("php").unwrap(), "php:9000");
        assert_eq!(size("10MB").unwrap(), "10000000");
        assert_eq!(size("1MiB").unwrap(), "1048576");
        assert!(size("ten").is_err());
    }
}
