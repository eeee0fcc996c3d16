//! What removes responses from the cache besides eviction: purges (`hayate
//! purge`, `POST /purge`) and the invalidation a successful unsafe request
//! causes (RFC 9111 §4.4). Both are announced to other boxes when a shared
//! tier listens (`hayate_cache::events`).

use hayate_cache::{CacheEvent, ResponseCache};
use hayate_core::Response;
use hayate_proxy::ProxyRequest;

use super::RouteCache;

/// Purges the cache by URL (`http://host/path`, or a path for every host;
/// all variants and query strings) or by tag; the answer for the control
/// socket and the admin listener.
pub fn purge(cache: Option<&ResponseCache>, url: Option<&str>, tag: Option<&str>) -> String {
    let Some(cache) = cache else {
        return "no route caches responses (use --cache)\n".to_string();
    };
    let event = match (url, tag) {
        (Some(url), _) => CacheEvent::PurgeUrl(url.to_string()),
        (None, Some(tag)) => CacheEvent::PurgeTag(tag.to_string()),
        (None, None) => return "purged 0\n".to_string(),
    };
    let removed = cache.apply_and_announce(&event);
    log::info!("purged {removed} cached URL(s)");
    format!("purged {removed}\n")
}

/// §4.4: a successful unsafe request invalidates the URL, and the URLs in
/// Location and Content-Location when they are on the same host.
pub(super) fn invalidate_after_unsafe(rc: &RouteCache, req: &ProxyRequest<'_>, resp: &Response) {
    if !(200..400).contains(&resp.status.code()) {
        return;
    }
    let host = req.host.unwrap_or_default();
    let invalidate = |target: &[u8]| {
        rc.shared.apply_and_announce(&CacheEvent::Invalidate {
            host: host.to_vec(),
            target: target.to_vec(),
        });
    };
    invalidate(req.target);
    for (name, value) in resp.all_fields() {
        if !(name.eq_ignore_ascii_case(b"location")
            || name.eq_ignore_ascii_case(b"content-location"))
        {
            continue;
        }
        if let Some(target) = same_host_target(value, host) {
            invalidate(target);
        }
    }
}

/// The target of a URL reference when it points at `host`: a path, or an
/// absolute http(s) URL whose authority is `host`.
fn same_host_target<'v>(value: &'v [u8], host: &[u8]) -> Option<&'v [u8]> {
    if value.starts_with(b"/") && !value.starts_with(b"//") {
        return Some(value);
    }
    let rest = value
        .strip_prefix(b"http://")
        .or_else(|| value.strip_prefix(b"https://"))?;
    let end = rest.iter().position(|&b| b == b'/').unwrap_or(rest.len());
    (rest[..end].eq_ignore_ascii_case(host)).then(|| {
        if end == rest.len() {
            &b"/"[..]
        } else {
            &rest[end..]
        }
    })
}

#[cfg(test)]
mod tests {
    use super::same_host_target;

    #[test]
    fn location_targets() {
        assert_eq!(same_host_target(b"/a?b", b"h"), Some(&b"/a?b"[..]));
        assert_eq!(same_host_target(b"http://H/x", b"h"), Some(&b"/x"[..]));
        assert_eq!(same_host_target(b"https://h", b"h"), Some(&b"/"[..]));
        assert_eq!(same_host_target(b"http://other/x", b"h"), None);
        assert_eq!(same_host_target(b"//h/x", b"h"), None);
        assert_eq!(same_host_target(b"x", b"h"), None);
    }
}
