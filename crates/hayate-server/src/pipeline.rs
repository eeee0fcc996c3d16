//! The request path, top-down (DESIGN.md, "The request path"):
//!
//! 1. The request head has been read and validated by the connection
//!    (limits, framing: see `request.rs`); here the path is normalized and
//!    refused with 400 if it is unsafe.
//! 2. Route by Host and path prefix.
//! 3. Origin: a file under the route's root if one matches (files come
//!    compressed once from the static root), else
//! 4. the route's upstream group (try_files), through the response cache
//!    when the route caches (`cached.rs`: lookup, coalesced fetch, store);
//!    non-GET methods go straight to the upstream when there is one.
//! 5. Compression of proxied bodies as they stream (inside the cache's
//!    fetch when the route caches, so the compressed variant is what is
//!    stored); response headers common to every response are added by the
//!    writer (`respond.rs`).
//!
//! Errors become responses here and in the connection's refusal path only.

use std::borrow::Cow;
use std::time::Instant;

use hayate_compress::AcceptEncoding;
use hayate_core::client_body::ClientBody;
use hayate_core::{Coding, Response, Status};
use hayate_proxy::ProxyRequest;
use hayate_static::{Preconditions, StaticRequest, StaticRoot};

use crate::request::Request;
use crate::router::{handler_path, Route, Router};

/// Answers one request, and says which route did (its index, for the
/// per-route metrics). `body` is the request body, read only by handlers
/// that need it (the proxy); `peer` is the client address for forwarding.
pub async fn handle<B: ClientBody>(
    req: &Request,
    body: &mut B,
    router: &Router,
    now: Instant,
    peer: &str,
) -> (Response, Option<usize>) {
    // 1. Normalize the path.
    if req.target() == b"*" {
        let r = Response::error(Status::METHOD_NOT_ALLOWED).with_header("Allow", b"GET, HEAD");
        return (r, None);
    }
    let path = match hayate_core::path::normalize(req.path()) {
        Ok(p) => p,
        Err(e) => {
            log::debug!(
                "400 for {:?}: {}",
                String::from_utf8_lossy(req.path()),
                e.as_str()
            );
            return (Response::error(Status::BAD_REQUEST), None);
        }
    };

    // 2. Route.
    let Some(route) = router.route(req.host(), &path) else {
        return (Response::error(Status::NOT_FOUND), None);
    };
    (
        respond(req, body, route, path, now, peer).await,
        Some(route.index),
    )
}

/// Steps 3-5 for the route chosen.
async fn respond<B: ClientBody>(
    req: &Request,
    body: &mut B,
    route: &Route,
    path: Cow<'_, [u8]>,
    now: Instant,
    peer: &str,
) -> Response {
    // 3. A file if one matches (GET and HEAD), else 4. the upstream.
    let reads_files = matches!(req.method(), b"GET" | b"HEAD") || route.upstream.is_none();
    if let Some(files) = route.files.as_ref().filter(|_| reads_files) {
        let handler_path = handler_path(route, &path);
        if let Some(response) = serve_file(files, req, &handler_path, now) {
            return response;
        }
    }
    match &route.upstream {
        Some(group) => {
            // A path that needed normalizing is sent normalized, so the
            // upstream sees the path the route was chosen for (no
            // `/api/../admin` past a prefix route).
            let normalized_target;
            let target = match &path {
                Cow::Borrowed(_) => req.target(),
                Cow::Owned(p) => {
                    let mut t = hayate_core::path::encode(p).into_bytes();
                    if let Some(q) = req.query() {
                        t.push(b'?');
                        t.extend_from_slice(q);
                    }
                    normalized_target = t;
                    &normalized_target
                }
            };
            let proxied = ProxyRequest {
                method: req.method(),
                target,
                headers: req.fields().collect(),
                client_ip: peer,
                host: req.host(),
            };
            match &route.cache {
                Some(cache) => crate::cached::respond(cache, group, &proxied, body, now).await,
                None => {
                    // Boxed, as the cache's ways to the origin are: the
                    // forward's state (over a kilobyte) stays out of the
                    // future every file and cache hit moves.
                    let response = Box::pin(group.forward(&proxied, body)).await;
                    // 5. Compress the proxied body.
                    match &route.compression {
                        Some(policy) => {
                            crate::compression::compress_proxied(response, &proxied, policy)
                        }
                        None => response,
                    }
                }
            }
        }
        None => Response::error(Status::NOT_FOUND),
    }
}

fn serve_file(files: &StaticRoot, req: &Request, path: &[u8], now: Instant) -> Option<Response> {
    let accept = AcceptEncoding::parse(req.headers_named(b"accept-encoding"));
    let choose = |available: &[Coding]| accept.choose(available.iter().copied());
    files.try_serve(&StaticRequest {
        method: req.method(),
        path,
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

/// Whether the client prefers JSON (directory listings).
fn wants_json(req: &Request) -> bool {
    req.header(b"accept").is_some_and(|a| {
        let a = String::from_utf8_lossy(a);
        a.contains("application/json") && !a.contains("text/html")
    })
}
