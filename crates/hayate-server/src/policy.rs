//! Site policy: what a site says beyond "serve these files, proxy the
//! rest" (DESIGN.md, "Site policy: request phases"). Each policy is a small
//! type behind the trait of its phase, one module each; a route's policies
//! are compiled at config load into its own ordered list ([`RoutePolicies`])
//! and run at fixed points of `pipeline.rs`:
//!
//! ```text
//! head read ─▶ identify (client.rs: trusted proxies → one client address)
//!           ─▶ route
//!           ─▶ access   (allow_deny.rs, basic_auth.rs)
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

use std::net::IpAddr;
use std::time::Instant;

use hayate_config::values::AuthFile;
use hayate_config::RouteOptions;
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
    /// The request is answered with this (403, 401, 429, ...).
    Refuse(Response),
}

/// A policy of the access phase: who may come in.
pub trait AccessPolicy {
    /// Decides for one request, without waiting.
    fn check(&self, request: &AccessRequest<'_>) -> Access;
}

/// The policies' counters, for `/metrics`.
pub fn render_metrics(out: &mut String) {
    use hayate_core::metrics::{family, sample, Kind};
    let name = "hayate_basic_auth_failures_total";
    let help = "Requests refused by basic_auth for missing or wrong credentials";
    family(out, name, help, Kind::Counter);
    let failures = basic_auth::FAILURES.load(std::sync::atomic::Ordering::Relaxed);
    sample(out, name, &[], failures);
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
}

impl RoutePolicies {
    /// The policies a route's options ask for; `None` when there are none,
    /// so the route pays nothing for this layer. Fails (with the option's
    /// key, and the file and line at fault) when a policy's file cannot be
    /// read or is refused.
    pub fn build(options: &RouteOptions) -> Result<Option<RoutePolicies>, PolicyError> {
        let mut access: Vec<Box<dyn AccessPolicy>> = Vec::new();
        if let Some(rule) = allow_deny::AllowDeny::from_options(options) {
            access.push(Box::new(rule));
        }
        if let Some(AuthFile::File(path)) = &options.basic_auth {
            let auth = basic_auth::BasicAuth::load(path, &options.basic_auth_realm).map_err(
                |message| PolicyError {
                    key: "basic_auth",
                    message,
                },
            )?;
            access.push(Box::new(auth));
        }
        Ok((!access.is_empty()).then_some(RoutePolicies { access }))
    }

    /// The access phase: the first refusal answers the request.
    pub fn access(&self, request: &AccessRequest<'_>) -> Option<Response> {
        self.access.iter().find_map(|p| match p.check(request) {
            Access::Pass => None,
            Access::Refuse(r) => Some(r),
        })
    }
}
