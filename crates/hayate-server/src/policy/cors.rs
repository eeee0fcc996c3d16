//! CORS (`cors`, `cors_*`): preflights answered by hayate in the access
//! phase, first (a browser sends them without credentials, so they must not
//! meet basic auth or an auth service), and the `Access-Control-*` fields
//! added in the response phase to answers for an allowed origin. An origin
//! not on the list gets no CORS field at all, and its preflight a 403: the
//! browser then refuses the call.

use std::time::Duration;

use hayate_config::RouteOptions;
use hayate_core::request::RequestHead;
use hayate_core::{Response, Status};

use super::{Access, AccessPolicy, AccessRequest, ResponsePolicy, ResponseRequest};

/// A route's CORS settings.
#[derive(Clone)]
pub struct Cors {
    /// Allowed origins, lower-case; empty with `any`.
    origins: Vec<String>,
    /// `cors = "*"`.
    any: bool,
    methods: Vec<u8>,
    /// `None`: what the preflight asks for.
    headers: Option<Vec<u8>>,
    expose: Option<Vec<u8>>,
    credentials: bool,
    max_age: Vec<u8>,
}

impl Cors {
    /// The route's CORS settings, when `cors` names origins.
    pub fn from_options(o: &RouteOptions) -> Option<Cors> {
        let origins = o.cors.as_ref().filter(|c| !c.0.is_empty())?;
        let any = origins.0.iter().any(|x| x == "*");
        let list = |s: &Option<String>| {
            s.as_ref()
                .filter(|s| !s.trim().is_empty())
                .map(|s| s.trim().as_bytes().to_vec())
        };
        Some(Cors {
            origins: origins.0.iter().filter(|x| *x != "*").cloned().collect(),
            any,
            methods: o.cors_methods.trim().as_bytes().to_vec(),
            headers: list(&o.cors_headers),
            expose: list(&o.cors_expose),
            credentials: o.cors_credentials,
            max_age: o
                .cors_max_age
                .0
                .as_secs()
                .min(Duration::from_secs(86_400).as_secs())
                .to_string()
                .into_bytes(),
        })
    }

    /// The request's Origin, when it is allowed.
    fn allowed<'r>(&self, head: &'r RequestHead) -> Option<&'r [u8]> {
        let origin = head.header(b"origin")?;
        let listed = self
            .origins
            .iter()
            .any(|o| o.as_bytes().eq_ignore_ascii_case(origin));
        (self.any || listed).then_some(origin)
    }

    /// The Access-Control-Allow-Origin (and -Credentials, Vary) of an
    /// answer to `origin`. With credentials the origin is named even for
    /// `*`: browsers refuse `*` on a credentialed request.
    fn allow_origin(&self, response: &mut Response, origin: &[u8]) {
        if self.any && !self.credentials {
            response.header("Access-Control-Allow-Origin", b"*");
        } else {
            response.header("Access-Control-Allow-Origin", origin);
            response.header("Vary", b"Origin");
        }
        if self.credentials {
            response.header("Access-Control-Allow-Credentials", b"true");
        }
    }
}

/// Whether a request is a CORS preflight (Fetch standard §4.8).
fn is_preflight(head: &RequestHead) -> bool {
    head.method() == b"OPTIONS"
        && head.header(b"origin").is_some()
        && head.header(b"access-control-request-method").is_some()
}

impl AccessPolicy for Cors {
    fn check(&self, request: &AccessRequest<'_>) -> Access {
        let head = request.head;
        if !is_preflight(head) {
            return Access::Pass;
        }
        let Some(origin) = self.allowed(head) else {
            return Access::Refuse(Response::error(Status::FORBIDDEN));
        };
        let mut r = Response::new(Status::NO_CONTENT);
        self.allow_origin(&mut r, origin);
        r.header("Access-Control-Allow-Methods", &self.methods);
        let asked = head.header(b"access-control-request-headers");
        // Echoed only when it is a plain list of field names.
        let plain = |v: &&[u8]| {
            v.iter()
                .all(|&b| b.is_ascii_alphanumeric() || b" ,!#$%&'*+-.^_`|~".contains(&b))
        };
        if let Some(allowed) = self.headers.as_deref().or(asked.filter(plain)) {
            if !allowed.is_empty() {
                r.header("Access-Control-Allow-Headers", allowed);
            }
        }
        r.header("Access-Control-Max-Age", &self.max_age);
        r.header(
            "Vary",
            b"Access-Control-Request-Method, Access-Control-Request-Headers",
        );
        Access::Refuse(r)
    }
}

impl ResponsePolicy for Cors {
    fn respond(&self, response: &mut Response, request: &ResponseRequest<'_>) {
        // The preflight's answer has its fields; an app that answers CORS
        // itself is left alone.
        if is_preflight(request.head) || response.field(b"access-control-allow-origin").is_some() {
            return;
        }
        let Some(origin) = self.allowed(request.head) else {
            return;
        };
        self.allow_origin(response, origin);
        if let Some(expose) = &self.expose {
            response.header("Access-Control-Expose-Headers", expose);
        }
    }
}
