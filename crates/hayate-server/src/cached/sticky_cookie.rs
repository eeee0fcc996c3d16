//! hayate's sticky-session cookie (`proxy_balance = "sticky"`, the app's
//! default) is hayate's business, not the client's: the cache neither
//! bypasses for it nor refuses to store an answer for setting it.

use hayate_cache::policy::ResponseFacts;
use hayate_core::Fields;
use hayate_proxy::ProxyRequest;

use super::RouteCache;

/// A response whose only Set-Cookie is hayate's sticky cookie is stored
/// as if it set none: the cookie goes to this client, never into the
/// store (which keeps no Set-Cookie), and does not make the URL
/// uncacheable for the clients that come after.
pub(super) fn forget_own_cookie(rc: &RouteCache, head: &Fields, facts: &mut ResponseFacts) {
    let Some(own) = rc.own_cookie.as_deref() else {
        return;
    };
    let only_own = head
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(b"set-cookie"))
        .all(|(_, v)| {
            v.strip_prefix(own.as_bytes())
                .is_some_and(|rest| rest.starts_with(b"="))
        });
    if only_own {
        facts.set_cookie = false;
    }
}

/// Whether the bypass field `field` is a Cookie that holds only hayate's
/// cookie: such a request uses the cache (else, under `hayate run`, every
/// client would bypass it from its second request on).
pub(super) fn only_own_cookie(rc: &RouteCache, req: &ProxyRequest<'_>, field: &[u8]) -> bool {
    match rc.own_cookie.as_deref() {
        Some(own) if field == b"cookie" && !own.is_empty() => only_cookie(req, own),
        _ => false,
    }
}

/// Whether every cookie the request carries is `name`'s.
fn only_cookie(req: &ProxyRequest<'_>, name: &str) -> bool {
    req.values(b"cookie")
        .flat_map(|v| v.split(|&b| b == b';'))
        .map(|pair| pair.trim_ascii())
        .filter(|pair| !pair.is_empty())
        .all(|pair| {
            pair.strip_prefix(name.as_bytes())
                .is_some_and(|rest| rest.starts_with(b"="))
        })
}
