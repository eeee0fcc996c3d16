//! The value types of site policy: `basic_auth`'s file, `rate_limit`'s rate
//! and what it is counted by.

use std::path::PathBuf;
use std::time::Duration;

use super::OptValue;

/// The credentials file of `basic_auth`, or `off` (a route that turns off
/// what its site set).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthFile {
    /// No authentication.
    Off,
    /// An htpasswd file.
    File(PathBuf),
}

impl OptValue for AuthFile {
    fn parse_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "" => Err("expected an htpasswd file or off".into()),
            "off" => Ok(AuthFile::Off),
            path => Ok(AuthFile::File(PathBuf::from(path))),
        }
    }
}

/// `rate_limit`: `N/s` or `N/m` (nginx's `10r/s` too), then optionally
/// `burst=B` (requests allowed ahead of the rate, default 0) and `delay`
/// (the burst waits its turn instead of going through at once: nginx's
/// `limit_req` without `nodelay`), or `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateSpec {
    /// Requests per `per`; 0: no limit (`off`).
    pub requests: u32,
    /// The period the count is for.
    pub per: Duration,
    /// Requests taken at once beyond the rate.
    pub burst: u32,
    /// The burst is delayed to the rate rather than let through at once.
    pub delay: bool,
}

impl RateSpec {
    /// The time one request's share of the rate lasts (1/rate).
    pub fn interval(&self) -> Duration {
        self.per / self.requests.max(1)
    }
}

impl OptValue for RateSpec {
    fn parse_str(s: &str) -> Result<Self, String> {
        let bad = || format!("expected a rate like 10/s, 600/m or \"10/s burst=20\", got {s:?}");
        let mut words = s.split_whitespace();
        let rate = words.next().ok_or_else(bad)?;
        if rate == "off" && words.next().is_none() {
            return Ok(RateSpec {
                requests: 0,
                per: Duration::from_secs(1),
                burst: 0,
                delay: false,
            });
        }
        let (count, unit) = rate.split_once('/').ok_or_else(bad)?;
        let requests: u32 = count
            .trim_end_matches('r')
            .parse()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(bad)?;
        let per = match unit {
            "s" => Duration::from_secs(1),
            "m" => Duration::from_secs(60),
            "h" => Duration::from_secs(3600),
            _ => return Err(bad()),
        };
        let (mut burst, mut delay) = (0, false);
        for word in words {
            match (word, word.split_once('=')) {
                (_, Some(("burst", n))) => burst = n.parse().map_err(|_| bad())?,
                ("delay", _) => delay = true,
                ("nodelay", _) => delay = false,
                _ => return Err(format!("{}: unknown {word:?}", bad())),
            }
        }
        Ok(RateSpec {
            requests,
            per,
            burst,
            delay,
        })
    }
}

/// What a rate limit counts by (`rate_limit_key`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RateKey {
    /// The client's address (IPv6 by its prefix, `rate_limit_ipv6_prefix`).
    Ip,
    /// A request header's value (lower-case name); requests without it
    /// count by address.
    Header(String),
    /// A cookie's value; requests without it count by address.
    Cookie(String),
    /// One count for the whole route.
    Route,
}

impl OptValue for RateKey {
    fn parse_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        let named = |name: &str| {
            let ok = !name.is_empty() && name.bytes().all(|b| b.is_ascii_graphic() && b != b':');
            ok.then(|| name.to_string())
                .ok_or_else(|| format!("no name in {s:?}"))
        };
        match t.split_once(':') {
            None if t == "ip" => Ok(RateKey::Ip),
            None if t == "route" => Ok(RateKey::Route),
            Some(("header", name)) => Ok(RateKey::Header(named(name)?.to_ascii_lowercase())),
            Some(("cookie", name)) => Ok(RateKey::Cookie(named(name)?)),
            _ => Err(format!(
                "expected ip, route, header:NAME or cookie:NAME, got {s:?}"
            )),
        }
    }
}

/// Where a rate limit counts (`rate_limit_scope`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateScope {
    /// Each box counts its own clients (every worker together).
    Box,
    /// Every box sharing the Redis of `shared` counts together.
    Fleet,
}

impl OptValue for RateScope {
    fn parse_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "box" => Ok(RateScope::Box),
            "fleet" => Ok(RateScope::Fleet),
            _ => Err(format!("expected box or fleet, got {s:?}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_and_keys() {
        let r = RateSpec::parse_str("10/s burst=20").expect("rate");
        assert_eq!((r.requests, r.burst), (10, 20));
        assert_eq!(r.interval(), Duration::from_millis(100));
        let r = RateSpec::parse_str("30r/m").expect("nginx form");
        assert_eq!(r.interval(), Duration::from_secs(2));
        assert_eq!(RateSpec::parse_str("off").expect("off").requests, 0);
        let r = RateSpec::parse_str("10/s burst=5 delay").expect("delay");
        assert!(r.delay && r.burst == 5);
        assert!(
            !RateSpec::parse_str("10/s burst=5 nodelay")
                .expect("nodelay")
                .delay
        );
        for bad in [
            "",
            "10",
            "0/s",
            "10/day",
            "10/s burst=x",
            "10/s later",
            "-1/s",
        ] {
            assert!(RateSpec::parse_str(bad).is_err(), "{bad:?}");
        }
        assert_eq!(RateKey::parse_str("ip"), Ok(RateKey::Ip));
        assert_eq!(
            RateKey::parse_str("header:X-API-Key"),
            Ok(RateKey::Header("x-api-key".into()))
        );
        assert_eq!(
            RateKey::parse_str("cookie:session"),
            Ok(RateKey::Cookie("session".into()))
        );
        for bad in ["header:", "cookie", "host", "header:a b"] {
            assert!(RateKey::parse_str(bad).is_err(), "{bad:?}");
        }
        assert_eq!(RateScope::parse_str("fleet"), Ok(RateScope::Fleet));
        assert_eq!(RateScope::parse_str(" box "), Ok(RateScope::Box));
        assert!(RateScope::parse_str("cluster").is_err());
    }
}
