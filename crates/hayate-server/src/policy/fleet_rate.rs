//! A rate limit for the whole fleet (`rate_limit_scope = "fleet"`): the
//! boxes sharing a Redis (`shared`) count a client's requests together
//! there (`hayate_shared::fleet_limit`: GCRA in one round trip). Redis
//! slow, down or its breaker open: the box's own limiter of the same
//! route and rate counts instead, so a fleet limit fails open to the
//! box's limit, never to none.
//!
//! It waits (for Redis), so it runs in the access phase's waiting part,
//! after the policies that do not wait (allow/deny, basic_auth) passed
//! and before forward_auth: a request they refuse costs Redis nothing.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use hayate_config::values::{RateKey, RateSpec};
use hayate_shared::FleetLimits;

use super::rate_limit::RateLimit;
use super::{Access, AccessPolicy, AccessRequest, RouteName};

/// The fleet's counts, once the shared tier started (`lib.rs`).
static FLEET: OnceLock<Arc<FleetLimits>> = OnceLock::new();

/// Makes fleet-wide limits count in `limits` (once, at start).
pub fn install(limits: Arc<FleetLimits>) {
    let _ = FLEET.set(limits);
}

/// A route's fleet-wide rate limit.
pub struct FleetRate {
    /// The box's limit of the same rate, key and route: what counts while
    /// Redis does not, and what makes the key and the 429.
    local: RateLimit,
    /// The Redis keys' prefix: `hayate:rl:` and a digest of the route and
    /// its limit (a changed limit starts new counts, as on the box).
    prefix: Vec<u8>,
    interval: Duration,
    tolerance: Duration,
    /// The burst waits its turn (`delay`); otherwise it is let in at once.
    delay: bool,
}

impl FleetRate {
    /// The limit `spec` counted by `key` on `route` for the fleet.
    pub fn new(
        route: &RouteName,
        spec: RateSpec,
        key: RateKey,
        ipv6_prefix: u8,
        max_keys: u32,
    ) -> Result<FleetRate, String> {
        let identity = format!("{}{} {spec:?} {key:?}", route.site, route.prefix);
        let local = RateLimit::new(route, spec, key, ipv6_prefix, max_keys)?;
        let mut prefix = b"hayate:rl:".to_vec();
        prefix.extend_from_slice(&hex(&sha256(&[identity.as_bytes()])[..8]));
        prefix.push(b':');
        Ok(FleetRate {
            local,
            prefix,
            interval: spec.interval(),
            tolerance: spec.interval() * spec.burst,
            delay: spec.delay,
        })
    }

    /// Counts `request` for the fleet, or on the box when Redis cannot.
    pub async fn check(&self, request: &AccessRequest<'_>) -> Access {
        let Some(fleet) = FLEET.get() else {
            return self.local.check(request);
        };
        // The key's bytes, digested: the same on every box, whatever a
        // header's length, and no client value in Redis's key space.
        let mut parts: Vec<Vec<u8>> = Vec::new();
        self.local
            .key()
            .write(request, &mut |bytes| parts.push(bytes.to_vec()));
        let parts: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
        let mut key = self.prefix.clone();
        key.extend_from_slice(&hex(&sha256(&parts)[..16]));
        match fleet.take(key, self.interval, self.tolerance).await {
            // Redis says when the request's turn at the rate comes: waited
            // for in delay mode only.
            Some(Ok(_)) if !self.delay => Access::Pass,
            Some(taken) => self.local.decide(taken),
            None => self.local.check(request),
        }
    }
}

/// SHA-256 of `parts`, each prefixed by its length (no two lists of parts
/// meet).
fn sha256(parts: &[&[u8]]) -> Vec<u8> {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for part in parts {
        ctx.update(&(part.len() as u64).to_be_bytes());
        ctx.update(part);
    }
    ctx.finish().as_ref().to_vec()
}

fn hex(bytes: &[u8]) -> Vec<u8> {
    bytes
        .iter()
        .flat_map(|b| {
            let digit = |n: u8| b"0123456789abcdef"[usize::from(n)];
            [digit(b >> 4), digit(b & 15)]
        })
        .collect()
}
