//! Value types of options and their parsers. Every type parses from a string
//! (CLI, env) and from a TOML value (config file) with the same rules.
//!
//! The parsers' table tests are in `values/tests.rs`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::time::Duration;

pub use hayate_core::net::IpNet;
pub use hayate_core::transport::Scheme;

use toml::de::DeValue;

mod error_pages;
mod files;
mod headers;
mod log_format;
mod otel;
mod policy;
mod tls;
mod upstream;
pub use error_pages::{ErrorPages, StatusMatch};
pub use files::Symlinks;
pub use headers::{CorsOrigins, HeaderOp, HeaderRule, HeaderRules};
pub use log_format::{LogFormat, LogPiece, LogTemplate, LogVariable};
pub use otel::{OtelEndpoint, OtelHeaders, OtelProtocol, SampleRatio};
pub use policy::{AuthFile, RateKey, RateScope, RateSpec};
pub use tls::{AcmeChallenge, ClientAuth, DnsAddr, EarlyData, TlsMode, TsigKey};
pub use upstream::{
    speaks_h2c, BalanceSpec, FastCgiSpec, ProxySpec, UpstreamHttp2, UpstreamProxyProtocol,
};

/// A type an option can hold.
pub trait OptValue: Sized + Clone {
    /// Parses the string form (CLI flag, env var, TOML string).
    fn parse_str(s: &str) -> Result<Self, String>;

    /// Parses a TOML value; by default integers and booleans go through their
    /// string form.
    fn parse_toml(v: &DeValue<'_>) -> Result<Self, String> {
        match v {
            DeValue::String(s) => Self::parse_str(s),
            DeValue::Integer(i) => Self::parse_str(i.as_str()),
            DeValue::Boolean(b) => Self::parse_str(if *b { "true" } else { "false" }),
            other => Err(format!("expected a string, got {}", other.type_str())),
        }
    }

    /// Parses repeated CLI values; only lists keep more than the last one.
    fn parse_many(values: &[String]) -> Result<Self, String> {
        Self::parse_str(values.last().map(String::as_str).unwrap_or_default())
    }

    /// Whether the CLI flag takes repeated values (lists).
    const REPEATED: bool = false;
    /// Whether the CLI flag may be given without a value (booleans).
    const FLAG: bool = false;
}

impl OptValue for bool {
    const FLAG: bool = true;
    fn parse_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "true" | "on" | "yes" | "1" => Ok(true),
            "false" | "off" | "no" | "0" => Ok(false),
            _ => Err(format!("expected true or false, got {s:?}")),
        }
    }
}

impl OptValue for u32 {
    fn parse_str(s: &str) -> Result<Self, String> {
        s.trim()
            .parse()
            .map_err(|_| format!("expected a whole number, got {s:?}"))
    }
}

impl OptValue for u8 {
    fn parse_str(s: &str) -> Result<Self, String> {
        s.trim()
            .parse()
            .map_err(|_| format!("expected a whole number from 0 to 255, got {s:?}"))
    }
}

impl OptValue for NonZeroU32 {
    fn parse_str(s: &str) -> Result<Self, String> {
        s.trim()
            .parse()
            .map_err(|_| format!("expected a whole number from 1, got {s:?}"))
    }
}

impl OptValue for String {
    fn parse_str(s: &str) -> Result<Self, String> {
        if s.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
            return Err("must not contain CR, LF or NUL".into());
        }
        Ok(s.to_string())
    }
}

impl OptValue for PathBuf {
    fn parse_str(s: &str) -> Result<Self, String> {
        if s.is_empty() {
            return Err("expected a path, got an empty string".into());
        }
        Ok(PathBuf::from(s))
    }
}

impl<T: OptValue> OptValue for Vec<T> {
    const REPEATED: bool = true;
    fn parse_str(s: &str) -> Result<Self, String> {
        Ok(vec![T::parse_str(s)?])
    }
    fn parse_many(values: &[String]) -> Result<Self, String> {
        values.iter().map(|v| T::parse_str(v)).collect()
    }
    fn parse_toml(v: &DeValue<'_>) -> Result<Self, String> {
        match v {
            DeValue::Array(items) => items.iter().map(|i| T::parse_toml(i.get_ref())).collect(),
            single => Ok(vec![T::parse_toml(single)?]),
        }
    }
}

/// A duration: `10s`, `500ms`, `2m`, `1h`, `365d`; a bare number means
/// seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dur(pub Duration);

impl OptValue for Dur {
    fn parse_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        let n: u64 = num
            .parse()
            .map_err(|_| format!("expected a duration like 10s or 500ms, got {s:?}"))?;
        let d = match unit.trim() {
            "" | "s" => Duration::from_secs(n),
            "ms" => Duration::from_millis(n),
            "m" => Duration::from_secs(n.saturating_mul(60)),
            "h" => Duration::from_secs(n.saturating_mul(3600)),
            "d" => Duration::from_secs(n.saturating_mul(24 * 3600)),
            _ => {
                return Err(format!(
                    "unknown duration unit in {s:?} (use ms, s, m, h or d)"
                ))
            }
        };
        Ok(Dur(d))
    }
}

/// A byte size: `8KiB`, `1MiB`, `64M`, `512k`; a bare number means bytes.
/// K/M/G and KiB/MiB/GiB are all powers of 1024.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size(pub u64);

impl OptValue for Size {
    fn parse_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        let n: u64 = num
            .parse()
            .map_err(|_| format!("expected a size like 8KiB or 1MiB, got {s:?}"))?;
        let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "k" | "kb" | "kib" => 1 << 10,
            "m" | "mb" | "mib" => 1 << 20,
            "g" | "gb" | "gib" => 1 << 30,
            _ => return Err(format!("unknown size unit in {s:?} (use KiB, MiB or GiB)")),
        };
        n.checked_mul(mult)
            .map(Size)
            .ok_or_else(|| format!("size {s:?} is too large"))
    }
}

/// Number of worker threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workers {
    /// One per available core.
    Auto,
    /// Exactly this many.
    Count(u32),
}

impl Workers {
    /// The resolved count.
    pub fn get(self) -> usize {
        match self {
            Workers::Auto => std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            Workers::Count(n) => n as usize,
        }
    }
}

impl OptValue for Workers {
    fn parse_str(s: &str) -> Result<Self, String> {
        if s.trim().eq_ignore_ascii_case("auto") {
            return Ok(Workers::Auto);
        }
        match s.trim().parse::<u32>() {
            Ok(n) if (1..=1024).contains(&n) => Ok(Workers::Count(n)),
            _ => Err(format!(
                "expected auto or a number from 1 to 1024, got {s:?}"
            )),
        }
    }
}

/// An address to listen on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenAddr {
    /// TCP, `127.0.0.1:8080` or `[::1]:8080`; `localhost:P` means 127.0.0.1.
    Tcp(SocketAddr),
    /// A Unix socket path, written `unix:/run/hayate.sock`.
    Unix(PathBuf),
}

impl std::fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ListenAddr::Tcp(a) => write!(f, "{a}"),
            ListenAddr::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

impl OptValue for ListenAddr {
    fn parse_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        if let Some(path) = t.strip_prefix("unix:") {
            if path.is_empty() {
                return Err("unix: needs a socket path, as in unix:/run/hayate.sock".into());
            }
            return Ok(ListenAddr::Unix(PathBuf::from(path)));
        }
        if let Some(port) = t.strip_prefix("localhost:") {
            let port: u16 = port.parse().map_err(|_| format!("bad port in {s:?}"))?;
            return Ok(ListenAddr::Tcp(SocketAddr::new(
                IpAddr::V4(Ipv4Addr::LOCALHOST),
                port,
            )));
        }
        if let Ok(port) = t.parse::<u16>() {
            return Ok(ListenAddr::Tcp(SocketAddr::new(
                IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                port,
            )));
        }
        t.parse::<SocketAddr>()
            .map(ListenAddr::Tcp)
            .map_err(|_| format!("expected HOST:PORT, [V6]:PORT, PORT or unix:PATH, got {s:?}"))
    }
}

/// A listener: its address, and whether its clients speak TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listen {
    /// Where.
    pub addr: ListenAddr,
    /// `https://` listeners terminate TLS; a bare address is plain HTTP.
    pub scheme: Scheme,
    /// Every connection starts with a PROXY protocol header (v1 or v2)
    /// from a load balancer in `trusted_proxies` (` proxy_protocol` after
    /// the address).
    pub proxy_protocol: bool,
    /// A plain listener that speaks HTTP/2 only, with prior knowledge
    /// (` h2c` after the address): no HTTP/1.1, so whatever a client sends
    /// first is read as the HTTP/2 preface (a shared port answers bytes
    /// that do not begin like one as HTTP/1.1).
    pub http2_only: bool,
}

impl std::fmt::Display for Listen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.scheme {
            Scheme::Https => write!(f, "https://{}", self.addr)?,
            Scheme::Http => write!(f, "{}", self.addr)?,
        }
        if self.proxy_protocol {
            f.write_str(" proxy_protocol")?;
        }
        if self.http2_only {
            f.write_str(" h2c")?;
        }
        Ok(())
    }
}

impl OptValue for Listen {
    fn parse_str(s: &str) -> Result<Self, String> {
        let mut words = s.split_whitespace();
        let t = words.next().unwrap_or_default();
        let (mut proxy_protocol, mut http2_only) = (false, false);
        for option in words {
            match option {
                "proxy_protocol" => proxy_protocol = true,
                "h2c" => http2_only = true,
                _ => {
                    return Err(format!(
                        "{s:?}: unknown listener option {option:?} (proxy_protocol and h2c are)"
                    ))
                }
            }
        }
        let (scheme, rest) = if let Some(rest) = t.strip_prefix("https://") {
            (Scheme::Https, rest)
        } else if let Some(rest) = t.strip_prefix("http://") {
            (Scheme::Http, rest)
        } else {
            (Scheme::Http, t)
        };
        let addr = ListenAddr::parse_str(rest.strip_suffix('/').unwrap_or(rest))?;
        if scheme == Scheme::Https && matches!(addr, ListenAddr::Unix(_)) {
            return Err(format!(
                "{s:?}: TLS on a Unix socket is not supported; use https://HOST:PORT"
            ));
        }
        if proxy_protocol && matches!(addr, ListenAddr::Unix(_)) {
            return Err(format!(
                "{s:?}: proxy_protocol is read on TCP listeners only"
            ));
        }
        if http2_only && scheme == Scheme::Https {
            return Err(format!(
                "{s:?}: h2c is for plain listeners (over TLS, ALPN chooses HTTP/2)"
            ));
        }
        Ok(Listen {
            addr,
            scheme,
            proxy_protocol,
            http2_only,
        })
    }
}

/// A route's response cache: `off`, `on` (RFC 9111 only), or a TTL that
/// also micro-caches responses carrying no freshness information; then
/// comma-separated extras: `set-cookie` (store responses with Set-Cookie,
/// the cookie stripped), `cookie` and `authorization` (use the cache for
/// requests carrying them), `stale-while-revalidate=DUR`,
/// `stale-if-error=DUR`. In a file also a table:
/// `cache = { ttl = "5s", stale_if_error = "1m", set_cookie = true }`.
/// On the command line also `PREFIX=SPEC` (`--cache /api=5s`, repeatable):
/// a route of that prefix caches as SPEC.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CacheSpec {
    /// The cache is on.
    pub enabled: bool,
    /// Freshness given to storable responses that carry none.
    pub ttl: Option<Duration>,
    /// Store responses carrying Set-Cookie (the cookie is never stored).
    pub set_cookie: bool,
    /// Requests carrying Cookie use the cache.
    pub with_cookie: bool,
    /// Requests carrying Authorization use the cache (RFC 9111 §3.5 rules).
    pub with_authorization: bool,
    /// Default stale-while-revalidate window.
    pub stale_while_revalidate: Duration,
    /// Default stale-if-error window.
    pub stale_if_error: Duration,
    /// Command-line `--cache PREFIX=SPEC` values, by prefix (only without
    /// a config file: a file gives such a route its own table).
    pub by_prefix: Vec<(String, CacheSpec)>,
}

impl CacheSpec {
    fn set(&mut self, key: &str, value: Option<&str>) -> Result<(), String> {
        let flag = |v: Option<&str>| v.map_or(Ok(true), bool::parse_str);
        let dur = |v: Option<&str>| match v {
            Some(v) => Dur::parse_str(v).map(|d| d.0),
            None => Err(format!("{key} needs a duration, e.g. {key}=10s")),
        };
        match key.replace('-', "_").as_str() {
            "set_cookie" => self.set_cookie = flag(value)?,
            "cookie" | "with_cookie" => self.with_cookie = flag(value)?,
            "authorization" | "with_authorization" => self.with_authorization = flag(value)?,
            "stale_while_revalidate" => self.stale_while_revalidate = dur(value)?,
            "stale_if_error" => self.stale_if_error = dur(value)?,
            "ttl" => {
                self.enabled = true;
                self.ttl = Some(dur(value)?);
            }
            "enabled" => self.enabled = flag(value)?,
            _ => {
                return Err(format!(
                    "unknown cache setting {key:?} (ttl, enabled, set_cookie, with_cookie, \
                     with_authorization, stale_while_revalidate, stale_if_error)"
                ))
            }
        }
        Ok(())
    }
}

impl OptValue for CacheSpec {
    const REPEATED: bool = true;

    /// The last value without a prefix, and every `PREFIX=SPEC` (a later
    /// one for the same prefix replacing an earlier one).
    fn parse_many(values: &[String]) -> Result<Self, String> {
        let mut by_prefix: Vec<(String, CacheSpec)> = Vec::new();
        let mut spec = None;
        for v in values {
            match v.trim().strip_prefix('/') {
                Some(_) => {
                    let (prefix, value) = v
                        .trim()
                        .split_once('=')
                        .ok_or_else(|| format!("expected PREFIX=SPEC like /api=5s, got {v:?}"))?;
                    let value = CacheSpec::parse_str(value)?;
                    by_prefix.retain(|(p, _)| p != prefix);
                    by_prefix.push((prefix.to_string(), value));
                }
                None => spec = Some(CacheSpec::parse_str(v)?),
            }
        }
        let mut spec = spec.unwrap_or_default();
        spec.by_prefix = by_prefix;
        Ok(spec)
    }

    fn parse_str(s: &str) -> Result<Self, String> {
        if s.trim().starts_with('/') {
            return Err(format!(
                "{s:?}: PREFIX=SPEC is for the command line (--cache /api=5s); \
                 in a file, give that prefix its own [[site.route]] with cache = ..."
            ));
        }
        let mut items = s.split(',').map(str::trim);
        let mut spec = CacheSpec::default();
        match items.next().unwrap_or_default() {
            "off" | "false" => {}
            "on" | "true" => spec.enabled = true,
            ttl => {
                let d = Dur::parse_str(ttl)
                    .map_err(|_| format!("expected off, on or a TTL like 5s, got {ttl:?}"))?;
                spec.enabled = true;
                spec.ttl = Some(d.0);
            }
        }
        for item in items.filter(|i| !i.is_empty()) {
            let (k, v) = match item.split_once('=') {
                Some((k, v)) => (k.trim(), Some(v.trim())),
                None => (item, None),
            };
            spec.set(k, v)?;
        }
        Ok(spec)
    }

    fn parse_toml(v: &DeValue<'_>) -> Result<Self, String> {
        match v {
            DeValue::Table(t) => {
                let mut spec = CacheSpec {
                    enabled: true,
                    ..CacheSpec::default()
                };
                for (k, v) in t.iter() {
                    let text = match v.get_ref() {
                        DeValue::String(s) => s.to_string(),
                        DeValue::Boolean(b) => b.to_string(),
                        DeValue::Integer(i) => i.as_str().to_string(),
                        other => {
                            return Err(format!(
                                "cache.{}: unexpected {}",
                                k.get_ref(),
                                other.type_str()
                            ))
                        }
                    };
                    spec.set(k.get_ref(), Some(&text))
                        .map_err(|e| format!("cache.{}: {e}", k.get_ref()))?;
                }
                Ok(spec)
            }
            DeValue::Boolean(b) => Self::parse_str(if *b { "on" } else { "off" }),
            other => match other {
                DeValue::String(s) => Self::parse_str(s),
                _ => Err(format!(
                    "expected off, on, a TTL or a table, got {}",
                    other.type_str()
                )),
            },
        }
    }
}

impl OptValue for IpNet {
    fn parse_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        let (addr, bits) = match t.split_once('/') {
            Some((a, b)) => (a, Some(b)),
            None => (t, None),
        };
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| format!("expected an IP address or CIDR block, got {s:?}"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let bits = match bits {
            Some(b) => b
                .parse::<u8>()
                .ok()
                .filter(|b| *b <= max)
                .ok_or_else(|| format!("bad prefix length in {s:?}"))?,
            None => max,
        };
        Ok(IpNet { addr, bits })
    }
}

/// Where the access log goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AccessLog {
    /// Not written.
    Off,
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
    /// Appended to a file.
    File(PathBuf),
}

impl OptValue for AccessLog {
    fn parse_str(s: &str) -> Result<Self, String> {
        Ok(match s.trim() {
            "off" | "false" => AccessLog::Off,
            "stdout" | "-" => AccessLog::Stdout,
            "stderr" => AccessLog::Stderr,
            "" => return Err("expected off, stdout, stderr or a file path".into()),
            path => AccessLog::File(PathBuf::from(path)),
        })
    }
}

/// Error log level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogLevel {
    /// Nothing.
    Off,
    /// Errors only.
    Error,
    /// Errors and warnings.
    Warn,
    /// Also start-up and shutdown notes.
    Info,
    /// Also per-connection events.
    Debug,
}

impl OptValue for LogLevel {
    fn parse_str(s: &str) -> Result<Self, String> {
        Ok(match s.trim().to_ascii_lowercase().as_str() {
            "off" => LogLevel::Off,
            "error" => LogLevel::Error,
            "warn" => LogLevel::Warn,
            "info" => LogLevel::Info,
            "debug" => LogLevel::Debug,
            _ => {
                return Err(format!(
                    "expected off, error, warn, info or debug, got {s:?}"
                ))
            }
        })
    }
}

/// Content codings, most preferred first: `br,zstd,gzip` (also a TOML
/// array). Identity is implied and cannot be listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Codings(pub Vec<hayate_core::Coding>);

impl OptValue for Codings {
    fn parse_str(s: &str) -> Result<Self, String> {
        let mut out = Vec::new();
        for token in s.split([',', ' ']).filter(|t| !t.is_empty()) {
            match hayate_core::Coding::from_token(token.as_bytes()) {
                Some(hayate_core::Coding::Identity) | None => {
                    return Err(format!("unknown coding {token:?} (use br, zstd or gzip)"))
                }
                Some(c) if out.contains(&c) => return Err(format!("{token} is listed twice")),
                Some(c) => out.push(c),
            }
        }
        Ok(Codings(out))
    }

    fn parse_toml(v: &DeValue<'_>) -> Result<Self, String> {
        match v {
            DeValue::Array(items) => {
                let mut parts = Vec::new();
                for i in items {
                    match i.get_ref() {
                        DeValue::String(s) => parts.push(s.to_string()),
                        other => {
                            return Err(format!("expected a string, got {}", other.type_str()))
                        }
                    }
                }
                Self::parse_str(&parts.join(","))
            }
            single => Self::parse_str(&String::parse_toml(single)?),
        }
    }
}

/// A compression level per coding: `br:11,zstd:19,gzip:9`; codings left
/// out keep their default. Ranges: br 0-11, zstd 1-22, gzip 1-9.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodingLevels(pub Vec<(hayate_core::Coding, i32)>);

impl OptValue for CodingLevels {
    fn parse_str(s: &str) -> Result<Self, String> {
        let mut out = Vec::new();
        for part in s.split([',', ' ']).filter(|t| !t.is_empty()) {
            let (name, level) = part
                .split_once(':')
                .ok_or_else(|| format!("expected CODING:LEVEL like br:11, got {part:?}"))?;
            let coding = match hayate_core::Coding::from_token(name.as_bytes()) {
                Some(c) if c != hayate_core::Coding::Identity => c,
                _ => return Err(format!("unknown coding {name:?} (use br, zstd or gzip)")),
            };
            let range = match coding {
                hayate_core::Coding::Br => 0..=11,
                hayate_core::Coding::Zstd => 1..=22,
                _ => 1..=9,
            };
            let level: i32 = level
                .trim()
                .parse()
                .ok()
                .filter(|l| range.contains(l))
                .ok_or_else(|| {
                    format!(
                        "{name} level must be {}-{}, got {level:?}",
                        range.start(),
                        range.end()
                    )
                })?;
            out.push((coding, level));
        }
        Ok(CodingLevels(out))
    }
}

/// Header field names, comma-separated (`X-API-Key, X-Tenant`), kept
/// lowercased; empty for none. In a file also an array.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FieldNames(pub Vec<String>);

impl OptValue for FieldNames {
    fn parse_str(s: &str) -> Result<Self, String> {
        let mut out = Vec::new();
        for name in s.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            if !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
            {
                return Err(format!(
                    "expected header field names like X-API-Key, got {name:?}"
                ));
            }
            let name = name.to_ascii_lowercase();
            if !out.contains(&name) {
                out.push(name);
            }
        }
        Ok(FieldNames(out))
    }

    fn parse_toml(v: &DeValue<'_>) -> Result<Self, String> {
        match v {
            DeValue::Array(items) => {
                let mut all = FieldNames::default();
                for i in items {
                    for n in Self::parse_toml(i.get_ref())?.0 {
                        if !all.0.contains(&n) {
                            all.0.push(n);
                        }
                    }
                }
                Ok(all)
            }
            single => Self::parse_str(&String::parse_toml(single)?),
        }
    }
}

/// Media types, comma-separated: `text/*,application/json`; `type/*` and
/// `type/*+suffix` are patterns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MediaTypes(pub Vec<String>);

impl OptValue for MediaTypes {
    fn parse_str(s: &str) -> Result<Self, String> {
        let mut out = Vec::new();
        for t in s.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let valid = t.split_once('/').is_some_and(|(a, b)| {
                !a.is_empty()
                    && !b.is_empty()
                    && t.bytes()
                        .all(|c| c.is_ascii_alphanumeric() || b"/*+-.!#$&^_".contains(&c))
            });
            if !valid {
                return Err(format!(
                    "expected a media type like text/html or text/*, got {t:?}"
                ));
            }
            out.push(t.to_ascii_lowercase());
        }
        Ok(MediaTypes(out))
    }

    fn parse_toml(v: &DeValue<'_>) -> Result<Self, String> {
        match v {
            DeValue::Array(items) => {
                let mut all = Vec::new();
                for i in items {
                    all.extend(Self::parse_toml(i.get_ref())?.0);
                }
                Ok(MediaTypes(all))
            }
            single => Self::parse_str(&String::parse_toml(single)?),
        }
    }
}

#[cfg(test)]
mod tests;
