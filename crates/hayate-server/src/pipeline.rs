//! The request path, top-down (DESIGN.md, "The request path"):
//!
//! 1. The request head has been read and validated by the connection
//!    (limits, framing: see `request.rs`); here the path is normalized and
//!    refused with 400 if it is unsafe.
//! 2. Route by Host and path prefix.
//! 3. Cache lookup — not yet (the response cache issue).
//! 4. Origin: a static root (upstream groups come with the proxy issue).
//! 5. Response headers common to every response are added by the writer
//!    (`respond.rs`); compression will slot in here.
//!
//! Errors become responses here and in the connection's refusal path only.

use std::time::Instant;

use hayate_compress::AcceptEncoding;
use hayate_core::{Coding, Response, Status};
use hayate_static::{Preconditions, StaticRequest};

use crate::request::Request;
use crate::router::{handler_path, Handler, Router};

/// Answers one request.
pub fn handle(req: &Request, router: &Router, now: Instant) -> Response {
    // 1. Normalize the path.
    if req.target() == b"*" {
        return Response::error(Status::METHOD_NOT_ALLOWED).with_header("Allow", b"GET, HEAD");
    }
    let path = match hayate_core::path::normalize(req.path()) {
        Ok(p) => p,
        Err(e) => {
            log::debug!(
                "400 for {:?}: {}",
                String::from_utf8_lossy(req.path()),
                e.as_str()
            );
            return Response::error(Status::BAD_REQUEST);
        }
    };

    // 2. Route.
    let Some(route) = router.route(req.host(), &path) else {
        return Response::error(Status::NOT_FOUND);
    };

    // 4. Origin.
    match &route.handler {
        Handler::Static(root) => {
            let accept = AcceptEncoding::parse(req.headers_named(b"accept-encoding"));
            let choose = |available: &[Coding]| accept.choose(available.iter().copied());
            let path = handler_path(route, &path);
            root.serve(&StaticRequest {
                method: req.method(),
                path: &path,
                raw_path: req.path(),
                query: req.query(),
                preconditions: Preconditions {
                    if_match: req.header(b"if-match"),
                    if_none_match: req.header(b"if-none-match"),
                    if_modified_since: req.header(b"if-modified-since"),
                    if_unmodified_since: req.header(b"if-unmodified-since"),
                    if_range: req.header(b"if-range"),
                },
                range: req.header(b"range"),
                choose_coding: &choose,
                wants_json: wants_json(req),
                now,
            })
        }
    }
}

/// Whether the client prefers JSON (directory listings).
fn wants_json(req: &Request) -> bool {
    req.header(b"accept").is_some_and(|a| {
        let a = String::from_utf8_lossy(a);
        a.contains("application/json") && !a.contains("text/html")
    })
}
