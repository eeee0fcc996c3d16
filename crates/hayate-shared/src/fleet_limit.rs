//! Fleet-wide rate limits (`rate_limit_scope = "fleet"`): every box
//! sharing the Redis counts a client's requests in one place.
//!
//! - One round trip per request: a Lua script (EVALSHA; EVAL once when
//!   Redis does not know it yet) runs GCRA on one key per client, the
//!   algorithm of each box's own limiter (`policy/rate_limit.rs`): the key
//!   holds the time, on Redis's clock (`TIME`, so the boxes' clocks never
//!   matter), when the client's bucket is empty again; it expires then.
//!   Why GCRA rather than a window counter: docs/decisions/0015.
//! - Never a request's bottleneck: each call waits at most the tier's
//!   timeout (`shared_timeout`, 50 ms by default) behind a circuit
//!   breaker of its own; a call skipped, failed or late answers `None`,
//!   and the caller counts on the box instead (fail open to the box's
//!   limit, never to no limit), counted and logged here.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hayate_core::metrics::{family, sample, Kind, MetricsSource};
use redis::aio::ConnectionManager;

use crate::breaker::{Breaker, BreakerState};

/// GCRA in Redis. KEYS[1]: the client's key; ARGV: one request's share of
/// the rate and the burst's room, in microseconds. Answers {1, wait} (in,
/// after `wait` µs: 0 but in delay mode) or {0, wait} (refused; it could
/// come in after `wait` µs).
const GCRA: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2])
local empty_at = tonumber(redis.call('GET', KEYS[1])) or now
if empty_at < now then empty_at = now end
local ahead = empty_at + interval - now
if ahead > tolerance + interval then
  return {0, ahead - tolerance - interval}
end
redis.call('SET', KEYS[1], empty_at + interval, 'PX', math.ceil(ahead / 1000) + 1)
return {1, empty_at - now}
";

/// The fleet's counts, as every box asks them.
pub struct FleetLimits {
    conn: ConnectionManager,
    /// The runtime the tier started on, where every Redis call runs (as
    /// the L2 tier's: its connection's driver lives there).
    runtime: tokio::runtime::Handle,
    timeout: Duration,
    breaker: Breaker,
    /// The script's SHA-1, for EVALSHA.
    sha: String,
    /// Requests Redis counted.
    counted: AtomicU64,
    /// Requests counted on the box instead (Redis skipped, failed, late).
    fallbacks: AtomicU64,
    /// Whether the last request fell back (for the log's transitions).
    falling_back: AtomicBool,
}

impl std::fmt::Debug for FleetLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FleetLimits({:?})", self.breaker.state(Instant::now()))
    }
}

impl FleetLimits {
    /// The fleet's counts over `client`, each call bounded by `timeout`.
    pub(crate) fn start(
        client: redis::Client,
        timeout: Duration,
    ) -> Result<Arc<FleetLimits>, String> {
        let conn = crate::connection(client, timeout)?;
        let digest = aws_lc_rs::digest::digest(
            &aws_lc_rs::digest::SHA1_FOR_LEGACY_USE_ONLY,
            GCRA.as_bytes(),
        );
        let sha = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        Ok(Arc::new(FleetLimits {
            conn,
            runtime: tokio::runtime::Handle::current(),
            timeout,
            breaker: Breaker::named("fleet rate limits", crate::breaker::COOL_DOWN),
            sha,
            counted: AtomicU64::new(0),
            fallbacks: AtomicU64::new(0),
            falling_back: AtomicBool::new(false),
        }))
    }

    /// Counts one request of `key` against a rate of one per `interval`
    /// with `tolerance` of burst: `Some(Ok(wait))` when it may come in
    /// after `wait`, `Some(Err(wait))` when it may not (for `wait`);
    /// `None` when Redis was not asked or did not answer within the
    /// timeout: the caller counts it on the box.
    pub async fn take(
        &self,
        key: Vec<u8>,
        interval: Duration,
        tolerance: Duration,
    ) -> Option<Result<Duration, Duration>> {
        if !self.breaker.allow(Instant::now()) {
            return self.fell_back("the breaker is open");
        }
        let micros = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let (interval, tolerance) = (micros(interval), micros(tolerance));
        let (mut conn, sha) = (self.conn.clone(), self.sha.clone());
        // Left to end by itself when the caller stops waiting (the
        // connection's own response timeout is the same bound).
        let call = self.runtime.spawn(async move {
            let mut evalsha = redis::cmd("EVALSHA");
            evalsha
                .arg(sha)
                .arg(1)
                .arg(&key)
                .arg(interval)
                .arg(tolerance);
            match evalsha.query_async::<(u8, u64)>(&mut conn).await {
                Err(e)
                    if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
                {
                    let mut eval = redis::cmd("EVAL");
                    eval.arg(GCRA).arg(1).arg(&key).arg(interval).arg(tolerance);
                    eval.query_async::<(u8, u64)>(&mut conn).await
                }
                answered => answered,
            }
        });
        match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(Ok((admitted, wait)))) => {
                self.breaker.success();
                self.counted.fetch_add(1, Ordering::Relaxed);
                if self.falling_back.swap(false, Ordering::Relaxed) {
                    log::info!("fleet rate limits: Redis answers again; counted for the fleet");
                }
                let wait = Duration::from_micros(wait);
                Some(if admitted == 1 { Ok(wait) } else { Err(wait) })
            }
            Ok(Ok(Err(e))) => {
                self.breaker.failure(Instant::now());
                self.fell_back(&format!("Redis: {e}"))
            }
            Ok(Err(e)) => {
                self.breaker.failure(Instant::now());
                self.fell_back(&format!("the call failed: {e}"))
            }
            Err(_) => {
                self.breaker.failure(Instant::now());
                self.fell_back(&format!("Redis did not answer in {:?}", self.timeout))
            }
        }
    }

    /// Notes a request counted on the box; the first of a run is logged.
    fn fell_back(&self, why: &str) -> Option<Result<Duration, Duration>> {
        self.fallbacks.fetch_add(1, Ordering::Relaxed);
        if !self.falling_back.swap(true, Ordering::Relaxed) {
            log::warn!(
                "fleet rate limits: {why}; each box counts its own clients until Redis answers"
            );
        }
        None
    }

    /// The breaker's state now.
    pub fn state(&self) -> BreakerState {
        self.breaker.state(Instant::now())
    }

    /// Its state in a few words, for `hayate status`.
    pub fn summary(&self) -> String {
        format!(
            "fleet rate limits: breaker {}, {} counted in Redis, {} on the box",
            self.state().as_str(),
            self.counted.load(Ordering::Relaxed),
            self.fallbacks.load(Ordering::Relaxed)
        )
    }
}

impl MetricsSource for FleetLimits {
    fn render(&self, out: &mut String) {
        let counted = "hayate_fleet_rate_limit_counted_total";
        let help = "Requests a fleet-wide rate_limit counted in Redis";
        family(out, counted, help, Kind::Counter);
        sample(out, counted, &[], self.counted.load(Ordering::Relaxed));
        let fallbacks = "hayate_fleet_rate_limit_fallbacks_total";
        let help = "Requests of a fleet-wide rate_limit counted on this box instead (Redis down, slow or its breaker open)";
        family(out, fallbacks, help, Kind::Counter);
        sample(out, fallbacks, &[], self.fallbacks.load(Ordering::Relaxed));
        let breaker = "hayate_fleet_rate_limit_breaker";
        let help = "The fleet rate limits' circuit breaker: 0 closed, 1 open, 2 half-open";
        family(out, breaker, help, Kind::Gauge);
        sample(out, breaker, &[], self.state().gauge());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hayate_testkit::redis::Redis;

    #[test]
    fn the_script_counts_a_burst_its_waits_and_its_refusal_and_survives_a_script_flush() {
        let redis = Redis::start();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let client = redis::Client::open(redis.url()).expect("client");
            let fleet = FleetLimits::start(client, Duration::from_secs(2)).expect("fleet");
            let ms = Duration::from_millis;
            // 10/s with a burst of 3: four in (each a turn later than the
            // last), the fifth refused for about a turn.
            let mut taken = Vec::new();
            for _ in 0..5 {
                taken.push(fleet.take(b"k".to_vec(), ms(100), ms(300)).await);
            }
            let turns: Vec<_> = taken
                .iter()
                .map(|t| match t.expect("Redis answered") {
                    Ok(wait) => (true, (wait.as_millis() + 50) / 100),
                    Err(wait) => (false, (wait.as_millis() + 50) / 100),
                })
                .collect();
            assert_eq!(
                turns,
                [(true, 0), (true, 1), (true, 2), (true, 3), (false, 1)]
            );
            // Another key has its own bucket; the key expires once empty.
            assert_eq!(
                fleet.take(b"other".to_vec(), ms(100), ms(300)).await,
                Some(Ok(Duration::ZERO))
            );
            let pttl = redis.command(&[b"PTTL", b"k"]);
            assert!(
                matches!(pttl, hayate_testkit::redis::Reply::Int(n) if (300..=410).contains(&n)),
                "{pttl:?}"
            );
            // Redis forgot the script (a restart, SCRIPT FLUSH): EVAL once.
            redis.command(&[b"SCRIPT", b"FLUSH"]);
            let again = fleet.take(b"third".to_vec(), ms(100), ms(300)).await;
            assert_eq!(again, Some(Ok(Duration::ZERO)));
            assert_eq!(fleet.fallbacks.load(Ordering::Relaxed), 0);
            assert_eq!(fleet.counted.load(Ordering::Relaxed), 7);
        });
    }
}
