//! allow/deny: address lists per site or route (nginx's `allow`/`deny`,
//! Caddy's `remote_ip` matcher). Deny wins; then, when there is an allow
//! list, only its addresses come in. Compared with the client identify
//! decided, never a forwarded field read here.

use hayate_config::RouteOptions;
use hayate_core::net::IpNet;
use hayate_core::{Response, Status};

use super::{Access, AccessPolicy, AccessRequest};

/// A route's address lists.
pub struct AllowDeny {
    allow: Vec<IpNet>,
    deny: Vec<IpNet>,
}

impl AllowDeny {
    /// The lists a route's options give; `None` when both are empty.
    pub fn from_options(options: &RouteOptions) -> Option<AllowDeny> {
        let allow = options.allow.clone().unwrap_or_default();
        let deny = options.deny.clone().unwrap_or_default();
        (!allow.is_empty() || !deny.is_empty()).then_some(AllowDeny { allow, deny })
    }
}

impl AccessPolicy for AllowDeny {
    fn check(&self, request: &AccessRequest<'_>) -> Access {
        let listed = |list: &[IpNet]| {
            request
                .client_ip
                .is_some_and(|ip| list.iter().any(|n| n.contains(ip)))
        };
        // A client with no address (a Unix socket's, unnamed) is in no list:
        // never denied by one, never allowed by one either.
        if listed(&self.deny) || (!self.allow.is_empty() && !listed(&self.allow)) {
            Access::Refuse(Response::error(Status::FORBIDDEN))
        } else {
            Access::Pass
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hayate_config::values::OptValue;
    use hayate_core::request::{RequestHead, Version};
    use hayate_core::transport::Scheme;
    use std::time::Instant;

    fn rule(allow: &[&str], deny: &[&str]) -> AllowDeny {
        let nets = |l: &[&str]| {
            l.iter()
                .map(|s| IpNet::parse_str(s).expect("cidr"))
                .collect()
        };
        AllowDeny {
            allow: nets(allow),
            deny: nets(deny),
        }
    }

    fn status(rule: &AllowDeny, ip: Option<&str>) -> u16 {
        let head = RequestHead::new(b"GET", b"/", Version::Http11, Scheme::Http);
        let request = AccessRequest {
            head: &head,
            client_ip: ip.map(|i| i.parse().expect("ip")),
            now: Instant::now(),
        };
        match rule.check(&request) {
            Access::Pass | Access::Delay(_) => 200,
            Access::Refuse(r) => r.status.code(),
        }
    }

    #[test]
    fn deny_wins_then_an_allow_list_admits_only_its_own() {
        let office = rule(&["192.0.2.0/24", "2001:db8::/32"], &["192.0.2.66"]);
        assert_eq!(status(&office, Some("192.0.2.10")), 200);
        assert_eq!(status(&office, Some("2001:db8:1::9")), 200);
        assert_eq!(status(&office, Some("192.0.2.66")), 403);
        assert_eq!(status(&office, Some("198.51.100.1")), 403);
        assert_eq!(status(&office, Some("2001:db9::1")), 403);
        assert_eq!(status(&office, None), 403);

        let blocklist = rule(&[], &["203.0.113.0/24"]);
        assert_eq!(status(&blocklist, Some("203.0.113.200")), 403);
        assert_eq!(status(&blocklist, Some("198.51.100.1")), 200);
        assert_eq!(status(&blocklist, None), 200);
    }
}
