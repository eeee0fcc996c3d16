//! The shared tier (L2) between a local miss and the origin: the fill's
//! leader asks it once for everyone waiting on the fill, so N coalesced
//! misses cost one lookup; a local hit never gets here. What it finds
//! answers under the same rules as a local entry (fresh, or stale within
//! the windows the response and the route allow), is stored locally and
//! says so in Cache-Status (`hayate; hit; detail=shared`). A copy too
//! stale to answer is still worth a conditional request to the origin.

use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hayate_cache::fill::Leader;
use hayate_cache::store::Key;
use hayate_cache::{CacheOutcome, CacheStatus, Outcome, RoutePolicy, Stored, Use, VaryKey};
use hayate_core::Response;
use hayate_proxy::{ProxyRequest, UpstreamGroup};

use super::{fields, from_store, refresh_in_background, request_directives, RouteCache};

/// The Cache-Status `detail` of a response the shared tier supplied.
const DETAIL: &str = "shared";

/// What the shared tier did for a local miss.
pub(super) enum Consulted {
    /// It answered.
    Answered(Response),
    /// It did not: the fill goes on to the origin, revalidating the
    /// tier's stale copy when there is one (and whether stale-if-error
    /// lets that copy answer an origin failure).
    Fetch(Leader, Option<(Arc<Stored>, bool)>),
}

/// Asks the shared tier for `req` on a local miss (`key`: its primary key).
pub(super) async fn consult(
    rc: &RouteCache,
    group: &Rc<UpstreamGroup>,
    req: &ProxyRequest<'_>,
    key: &Key,
    leader: Leader,
) -> Consulted {
    let Some(tier) = rc.shared.second_tier() else {
        return Consulted::Fetch(leader, None);
    };
    // A purge or an invalidation from now on keeps what is found out of
    // the local store.
    let requested_at = Instant::now();
    let vary = |names: &[Vec<u8>]| VaryKey::new(names, |n| fields(req, n));
    let Some(stored) = tier.lookup(key, &vary).await else {
        return Consulted::Fetch(leader, None);
    };
    // A copy stored by a box whose route keys on fewer fields
    // (`cache_key_headers`) than this one's would answer one key's request
    // with another's: not for this route.
    let keyed = |k: &Vec<u8>| stored.vary.names().any(|n| n == &k[..]);
    if !rc.key_headers.iter().all(keyed) {
        return Consulted::Fetch(leader, None);
    }
    let stored = Arc::new(stored);
    let now = Instant::now();
    let fresh = stored.freshness(
        now,
        rc.policy.stale_while_revalidate.as_secs(),
        rc.policy.stale_if_error.as_secs(),
    );
    let decision = fresh.decide(&request_directives(req));
    let outcome = match decision {
        Use::Revalidate { stale_if_error } => {
            return Consulted::Fetch(leader, Some((stored, stale_if_error)))
        }
        Use::Fresh if fresh.ttl() > 0 => CacheOutcome::Hit,
        Use::Fresh | Use::StaleWhileRevalidate => CacheOutcome::Stale,
    };
    let kept = rc
        .shared
        .store
        .insert_shared(key, stored.clone(), requested_at);
    leader.finish(if kept {
        Outcome::Stored
    } else {
        Outcome::Released
    });
    if matches!(decision, Use::StaleWhileRevalidate) {
        // The fill above is over: this refresh leads a new one.
        refresh_in_background(rc, group, req, key, &stored);
    }
    let status = CacheStatus {
        ttl: Some(fresh.ttl()),
        detail: Some(DETAIL),
        ..CacheStatus::new(outcome)
    };
    Consulted::Answered(from_store(req, &stored, stored.age(now), status))
}

/// How long after its freshness a stored response may still answer on
/// some box (stale-while-revalidate, stale-if-error: the response's own,
/// else the route's): the shared tier keeps it that much longer.
pub(super) fn stale_window(policy: &RoutePolicy, stored: &Stored) -> Duration {
    let swr = stored
        .cc
        .stale_while_revalidate
        .unwrap_or(policy.stale_while_revalidate.as_secs());
    let sie = stored
        .cc
        .stale_if_error
        .unwrap_or(policy.stale_if_error.as_secs());
    Duration::from_secs(swr.max(sie))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use hayate_cache::ResponseDirectives;
    use hayate_core::{Fields, Status};

    #[test]
    fn the_stale_window_is_the_longer_of_the_responses_or_the_routes() {
        let stored = |swr, sie| Stored {
            status: Status::OK,
            head: Arc::new(Fields::new()),
            body: Bytes::new(),
            vary: VaryKey::default(),
            etag: None,
            last_modified: None,
            cc: ResponseDirectives {
                stale_while_revalidate: swr,
                stale_if_error: sie,
                ..ResponseDirectives::default()
            },
            lifetime: Duration::from_secs(60),
            initial_age: 0,
            stored_at: Instant::now(),
            tags: Box::new([]),
            own_control: None,
        };
        let route = |swr, sie| RoutePolicy {
            stale_while_revalidate: Duration::from_secs(swr),
            stale_if_error: Duration::from_secs(sie),
            ..RoutePolicy::default()
        };
        let secs = |p: &RoutePolicy, s: &Stored| stale_window(p, s).as_secs();
        assert_eq!(secs(&route(0, 0), &stored(None, None)), 0);
        assert_eq!(secs(&route(5, 30), &stored(None, None)), 30);
        // The response's own windows replace the route's.
        assert_eq!(secs(&route(5, 30), &stored(Some(10), Some(0))), 10);
        assert_eq!(secs(&route(0, 0), &stored(None, Some(86_400))), 86_400);
    }
}
