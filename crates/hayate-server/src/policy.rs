//! Site policy: what a site says beyond "serve these files, proxy the
//! rest" (DESIGN.md, "Site policy: request phases"). Each policy is a small
//! type behind the trait of its phase, one module each; a route's policies
//! are compiled at config load into its own ordered list ([`RoutePolicies`])
//! and run at fixed points of `pipeline.rs`:
//!
//! ```text
//! head read ─▶ identify (client.rs: trusted proxies → one client address)
//!           ─▶ route
//!           ─▶ access   (rate_limit.rs, allow_deny.rs, basic_auth.rs: without
//!                        waiting; then conn_limit.rs takes a slot the
//!                        response holds until it is sent; then what waits:
//!                        a fleet rate limit's count in Redis, forward_auth.rs)
//!           ─▶ handler  (files | cache → upstream | FastCGI | app)
//! ```
//!
//! A route with no policies has no list (`Route::policies` is `None`): the
//! pipeline's one check per phase is all it pays. Policies match the
//! normalized path the route was chosen by, so no encoding of the path
//! (`%2e`, `//`, `..`) reaches a handler past them. Nothing here knows which
//! protocol a request came by.

pub mod allow_deny;
pub mod basic_auth;
pub mod client;
pub mod client_cert;
pub mod conn_limit;
pub mod cors;
pub mod error_pages;
pub mod fleet_rate;
pub mod forward_auth;
pub mod headers;
pub mod limit_key;
mod prehashed;
pub mod rate_limit;
mod registry;
pub mod rewrite;

use std::net::IpAddr;
use std::time::Instant;

use hayate_config::values::{AuthFile, RateScope};
use hayate_config::{GlobalOptions, RouteOptions};
use hayate_core::request::RequestHead;
use hayate_core::Response;

pub use client::{ForwardedClient, TrustedProxies};

/// What an access policy sees of a request.
pub struct AccessRequest<'a> {
    /// The request's head.
    pub head: &'a RequestHead,
    /// The client's address, as identify decided it (`None`: a Unix
    /// socket's peer that no trusted proxy named).
    pub client_ip: Option<IpAddr>,
    /// The request's time.
    pub now: Instant,
}

/// An access policy's decision.
pub enum Access {
    /// The next policy (or the handler) decides.
    Pass,
    /// In, after this wait (a rate limit's burst in `delay` mode).
    Delay(std::time::Duration),
    /// The request is answered with this (403, 401, 429, ...).
    Refuse(Response),
}

/// What the access phase decided without waiting.
pub enum Admission {
    /// In, after this wait (zero: at once), holding this slot among its
    /// client's requests in flight (conn_limit) until its response is sent.
    After(std::time::Duration, Option<conn_limit::ConnSlot>),
    /// Answered with this.
    Refused(Response),
}

/// A policy of the access phase: who may come in.
pub trait AccessPolicy {
    /// Decides for one request, without waiting.
    fn check(&self, request: &AccessRequest<'_>) -> Access;
}

/// What a response policy sees of the request it answers.
pub struct ResponseRequest<'a> {
    /// The request's head.
    pub head: &'a RequestHead,
    /// The client's address as text, as identify decided it.
    pub client_ip: &'a str,
}

/// A policy of the response phase: what every answer of the route carries
/// (header rules, CORS), whoever made it (a file, the cache, an upstream,
/// an error of hayate's own).
pub trait ResponsePolicy {
    /// Adds to, or takes from, the response's head.
    fn respond(&self, response: &mut Response, request: &ResponseRequest<'_>);
}

/// A route as metrics name it: its site's first host (`*` for none) and
/// its prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteName {
    /// The site.
    pub site: String,
    /// The route's prefix.
    pub prefix: String,
}

impl RouteName {
    /// The name of `route` of `site`.
    pub fn of(site: &hayate_config::Site, route: &hayate_config::Route) -> RouteName {
        RouteName {
            site: site.hosts.first().map_or("*", String::as_str).to_string(),
            prefix: route.prefix.clone(),
        }
    }
}

/// The policies' counters, for `/metrics`.
pub fn render_metrics(out: &mut String) {
    rate_limit::render_metrics(out);
    conn_limit::render_metrics(out);
    use hayate_core::metrics::{family, sample, Kind};
    let name = "hayate_basic_auth_failures_total";
    let help = "Requests refused by basic_auth for missing or wrong credentials";
    family(out, name, help, Kind::Counter);
    let failures = basic_auth::FAILURES.load(std::sync::atomic::Ordering::Relaxed);
    sample(out, name, &[], failures);
}

/// One metric family with a sample per limiter of `all`, labelled by the
/// route it limits: `figure` gives the route and the value.
fn per_route<T>(
    out: &mut String,
    (name, help, kind): (&str, &str, hayate_core::metrics::Kind),
    all: &[std::sync::Arc<T>],
    figure: impl Fn(&T) -> (&RouteName, u64),
) {
    use hayate_core::metrics::{family, sample};
    family(out, name, help, kind);
    for limiter in all {
        let (route, value) = figure(limiter);
        let labels = [
            ("site", route.site.as_str()),
            ("route", route.prefix.as_str()),
        ];
        sample(out, name, &labels, value);
    }
}

/// A policy that cannot be built from its options.
#[derive(Debug)]
pub struct PolicyError {
    /// The option at fault.
    pub key: &'static str,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for PolicyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.key, self.message)
    }
}

/// A route's policies, in the order they run.
pub struct RoutePolicies {
    access: Vec<Box<dyn AccessPolicy>>,
    /// Taken once the others let a request in: a request they refuse
    /// holds no slot.
    conn_limit: Option<conn_limit::ConnLimit>,
    /// A rate limit counted for the fleet, in Redis: it waits, so it runs
    /// after the others, before forward_auth.
    fleet_rate: Option<fleet_rate::FleetRate>,
    /// The access policy that waits (for an auth service), after the others.
    forward_auth: Option<forward_auth::ForwardAuth>,
    /// The response phase's.
    response: Vec<Box<dyn ResponsePolicy>>,
    /// The fields set on requests sent upstream (`request_headers`).
    request_headers: Option<headers::HeaderPolicy>,
}

/// The response phase's policies `options` ask for, in order.
fn response_policies(options: &RouteOptions) -> Result<Vec<Box<dyn ResponsePolicy>>, PolicyError> {
    let mut response: Vec<Box<dyn ResponsePolicy>> = Vec::new();
    // Error pages first: the header rules and CORS then apply to the page
    // as to any answer.
    let pages =
        error_pages::ErrorPagesPolicy::load(options.error_pages.as_ref(), options.intercept_errors)
            .map_err(|message| PolicyError {
                key: "error_pages",
                message,
            })?;
    if let Some(pages) = pages {
        response.push(Box::new(pages));
    }
    if let Some(cors) = cors::Cors::from_options(options) {
        response.push(Box::new(cors));
    }
    // Header rules last: what the user wrote has the last word.
    let rules = options.response_headers.as_ref();
    if let Some(h) = headers::HeaderPolicy::for_responses(rules, options.security_headers) {
        response.push(Box::new(h));
    }
    Ok(response)
}

impl RoutePolicies {
    /// The policies a route's options ask for; `None` when there are none,
    /// so the route pays nothing for this layer. Fails (with the option's
    /// key, and the file and line at fault) when a policy's file cannot be
    /// read or is refused.
    pub fn build(
        route: &RouteName,
        options: &RouteOptions,
        global: &GlobalOptions,
        proxy: &hayate_proxy::ProxySettings,
    ) -> Result<Option<RoutePolicies>, PolicyError> {
        let at = |key: &'static str| move |message: String| PolicyError { key, message };
        let mut access: Vec<Box<dyn AccessPolicy>> = Vec::new();
        let mut fleet_rate = None;
        // CORS preflights first: browsers send them without credentials.
        if let Some(cors) = cors::Cors::from_options(options) {
            access.push(Box::new(cors));
        }
        // Then, as nginx's preaccess phase: a limit counts refused attempts
        // too, so it bounds password guessing and the auth service's load.
        if let Some(spec) = options.rate_limit.filter(|s| s.requests > 0) {
            let (key, bits) = (
                options.rate_limit_key.clone(),
                options.rate_limit_ipv6_prefix,
            );
            let max_keys = global.rate_limit_max_keys;
            match options.rate_limit_scope {
                RateScope::Box => {
                    let limit = rate_limit::RateLimit::new(route, spec, key, bits, max_keys)
                        .map_err(at("rate_limit_ipv6_prefix"))?;
                    access.push(Box::new(limit));
                }
                RateScope::Fleet if global.shared.is_none() => {
                    return Err(PolicyError {
                        key: "rate_limit_scope",
                        message: "fleet counts in Redis: it needs shared = \"redis://HOST:PORT\""
                            .into(),
                    })
                }
                RateScope::Fleet => {
                    let limit = fleet_rate::FleetRate::new(route, spec, key, bits, max_keys)
                        .map_err(at("rate_limit_ipv6_prefix"))?;
                    fleet_rate = Some(limit);
                }
            }
        }
        if let Some(rule) = allow_deny::AllowDeny::from_options(options) {
            access.push(Box::new(rule));
        }
        if let Some(AuthFile::File(path)) = &options.basic_auth {
            let auth = basic_auth::BasicAuth::load(path, &options.basic_auth_realm)
                .map_err(at("basic_auth"))?;
            access.push(Box::new(auth));
        }
        let forward_auth = match options.forward_auth.as_deref() {
            None | Some("off") => None,
            Some(url) => Some(
                forward_auth::ForwardAuth::new(
                    url,
                    &options.forward_auth_headers.0,
                    &options.forward_auth_copy.0,
                    options.forward_auth_timeout.0,
                    proxy,
                )
                .map_err(at("forward_auth"))?,
            ),
        };
        let conn_limit = match options.conn_limit.filter(|n| *n > 0) {
            None => None,
            Some(n) => Some(
                conn_limit::ConnLimit::new(
                    route,
                    n,
                    options.rate_limit_key.clone(),
                    options.rate_limit_ipv6_prefix,
                    global.conn_limit_max_keys,
                )
                .map_err(at("rate_limit_ipv6_prefix"))?,
            ),
        };
        let response = response_policies(options)?;
        let request_headers = headers::HeaderPolicy::for_requests(options.request_headers.as_ref());
        if access.is_empty()
            && forward_auth.is_none()
            && conn_limit.is_none()
            && fleet_rate.is_none()
            && response.is_empty()
            && request_headers.is_none()
        {
            return Ok(None);
        }
        Ok(Some(RoutePolicies {
            access,
            conn_limit,
            fleet_rate,
            forward_auth,
            response,
            request_headers,
        }))
    }

    /// The response phase alone of a site's own options, for the 404 of a
    /// request none of its routes takes (`Site::unrouted`); `None` when it
    /// has none.
    pub fn unrouted(options: &RouteOptions) -> Result<Option<RoutePolicies>, PolicyError> {
        let response = response_policies(options)?;
        Ok((!response.is_empty()).then(|| RoutePolicies {
            access: Vec::new(),
            conn_limit: None,
            fleet_rate: None,
            forward_auth: None,
            response,
            request_headers: None,
        }))
    }

    /// Whether a route's policies can be built (`hayate check`): their
    /// files load, their values hold.
    pub fn check(
        route: &RouteName,
        options: &RouteOptions,
        global: &GlobalOptions,
    ) -> Result<(), PolicyError> {
        let proxy = hayate_proxy::ProxySettings::default();
        RoutePolicies::build(route, options, global, &proxy).map(drop)
    }

    /// Whether the access phase waits once the others passed (for an auth
    /// service, or for Redis's count of a fleet-wide rate limit).
    pub fn waits(&self) -> bool {
        self.forward_auth.is_some() || self.fleet_rate.is_some()
    }

    /// The rate limit counted for the fleet, asked once the others passed.
    pub fn fleet_rate(&self) -> Option<&fleet_rate::FleetRate> {
        self.fleet_rate.as_ref()
    }

    /// The auth service the access phase asks once the others passed.
    pub fn forward_auth(&self) -> Option<&forward_auth::ForwardAuth> {
        self.forward_auth.as_ref()
    }

    /// The response phase: each response policy, in order.
    pub fn respond(&self, response: &mut Response, request: &ResponseRequest<'_>) {
        for policy in &self.response {
            policy.respond(response, request);
        }
    }

    /// The rules for requests sent upstream (`request_headers`).
    pub fn request_headers(&self) -> Option<&headers::HeaderPolicy> {
        self.request_headers.as_ref()
    }

    /// The access phase without waiting: the first refusal answers the
    /// request; otherwise it comes in after the longest wait any policy
    /// asked (`Duration::ZERO`: at once), with its conn_limit slot.
    pub fn access(&self, request: &AccessRequest<'_>) -> Admission {
        let mut wait = std::time::Duration::ZERO;
        for policy in &self.access {
            match policy.check(request) {
                Access::Pass => {}
                Access::Delay(d) => wait = wait.max(d),
                Access::Refuse(r) => return Admission::Refused(r),
            }
        }
        let slot = match self.conn_limit.as_ref().map(|c| c.admit(request)) {
            None => None,
            Some(Ok(slot)) => Some(slot),
            Some(Err(status)) => return Admission::Refused(conn_limit::refusal(status)),
        };
        Admission::After(wait, slot)
    }
}
