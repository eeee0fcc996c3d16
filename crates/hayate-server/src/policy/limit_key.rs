//! What a limit counts a request under (`rate_limit_key`, shared by
//! rate_limit and conn_limit): the client's address (IPv6 cut to its
//! prefix), a header's or a cookie's value (by address when absent), or
//! the route as a whole.
//!
//! A key is written as tagged bytes ([`LimitKey::write`]): one tag byte
//! for its kind, then its one variable part, so an address and a header
//! value never meet. The box's limiters hash them with a per-process seed
//! (nobody can aim keys at one shard); the fleet's digests them with
//! SHA-256, the same on every box.

use std::net::IpAddr;

use hayate_config::values::RateKey;
use hayate_core::field::name_is;

use super::AccessRequest;

/// What a route's limits count by.
#[derive(Debug, Clone)]
pub struct LimitKey {
    kind: RateKey,
    /// IPv6 clients are counted by this many leading bits.
    ipv6_prefix: u8,
}

impl LimitKey {
    /// Counting by `kind`, IPv6 addresses by their first `ipv6_prefix`
    /// bits (at most 128).
    pub fn new(kind: RateKey, ipv6_prefix: u8) -> Result<LimitKey, String> {
        if ipv6_prefix > 128 {
            return Err(format!(
                "{ipv6_prefix} bits: an IPv6 prefix has 128 at most"
            ));
        }
        Ok(LimitKey { kind, ipv6_prefix })
    }

    /// Feeds `out` the request's key as tagged bytes (see the module doc).
    pub fn write(&self, request: &AccessRequest<'_>, out: &mut impl FnMut(&[u8])) {
        let named = match &self.kind {
            RateKey::Route => return out(b"r"),
            RateKey::Ip => None,
            RateKey::Header(name) => request.head.headers_named(name.as_bytes()).next(),
            RateKey::Cookie(name) => cookie(request, name.as_bytes()),
        };
        match (named, client_prefix(request.client_ip, self.ipv6_prefix)) {
            (Some(value), _) => {
                out(b"v");
                out(value);
            }
            (None, Some(IpAddr::V4(v4))) => {
                out(b"4");
                out(&v4.octets());
            }
            (None, Some(IpAddr::V6(v6))) => {
                out(b"6");
                out(&v6.octets());
            }
            (None, None) => out(b"u"),
        }
    }

    /// The request's key hashed by `hasher` (a limiter's, seeded per
    /// process).
    pub fn hash(&self, request: &AccessRequest<'_>, hasher: &foldhash::fast::RandomState) -> u64 {
        use std::hash::{BuildHasher, Hasher};
        let mut h = hasher.build_hasher();
        self.write(request, &mut |bytes| h.write(bytes));
        h.finish()
    }
}

/// The client's address as counted: IPv6 cut to `bits`; `None` (a Unix
/// socket's peer) is one client.
fn client_prefix(ip: Option<IpAddr>, bits: u8) -> Option<IpAddr> {
    Some(match ip? {
        IpAddr::V6(v6) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(bits)).unwrap_or(0);
            IpAddr::V6((u128::from(v6) & mask).into())
        }
        v4 => v4,
    })
}

/// The value of cookie `name` in the request's Cookie fields.
fn cookie<'a>(request: &AccessRequest<'a>, name: &[u8]) -> Option<&'a [u8]> {
    request
        .head
        .fields()
        .filter(|(n, _)| name_is(n, b"cookie"))
        .flat_map(|(_, v)| v.split(|&b| b == b';'))
        .find_map(|pair| {
            let pair = pair.trim_ascii();
            let value = pair.strip_prefix(name)?.strip_prefix(b"=")?;
            Some(value)
        })
}
