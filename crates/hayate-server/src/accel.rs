//! X-Accel-Redirect and X-Sendfile: an app (a proxied one, or a FastCGI
//! script) decides who may have a file and answers with where it is;
//! hayate drops the app's body and serves the file itself, with full static
//! semantics (ranges, conditionals, compression, sendfile), keeping the
//! app's `Content-Disposition`, `Cache-Control`, `Expires`, `Set-Cookie`
//! and `Content-Language`.
//!
//! - `X-Accel-Redirect: /protected/file.pdf` names a URI that must route to
//!   an `internal` route of the same site: its files, or its upstream
//!   (asked with GET: an internal redirect). Anything else — a route a
//!   client could reach, no route, a path that does not normalize — is a
//!   500 with a log line: the app asked for something it should not.
//! - `X-Sendfile: /abs/path` names a file under the route's `x_sendfile`
//!   directory, served from there (a path outside it, `..`, or a symlink
//!   out of it under the route's `symlinks` setting: 500 or 403, never the
//!   file).
//!
//! The path an app names is normalized like a request's, so `..` never
//! climbs out of a root; an internal route's answer is not looked at for a
//! further redirect.

use std::time::Instant;

use hayate_core::client_body::NoBody;
use hayate_core::request::RequestHead;
use hayate_core::{Response, Status};

use crate::pipeline::{serve_file, Client};
use crate::router::{handler_path, Route, Router};

/// Fields of the app's answer that describe the download, kept on the
/// file's answer (nginx keeps the same for X-Accel-Redirect).
const KEPT: [&[u8]; 5] = [
    b"content-disposition",
    b"cache-control",
    b"expires",
    b"set-cookie",
    b"content-language",
];

/// What an upstream's answer asks of the server.
pub enum Redirect {
    /// `X-Accel-Redirect`: a URI of an internal route.
    Accel(Vec<u8>),
    /// `X-Sendfile`: an absolute path.
    Sendfile(Vec<u8>),
}

/// The internal redirect `response` asks for, if any.
pub fn asked(response: &Response) -> Option<Redirect> {
    for (name, value) in response.all_fields() {
        if name.eq_ignore_ascii_case(b"x-accel-redirect") {
            return Some(Redirect::Accel(value.to_vec()));
        }
        if name.eq_ignore_ascii_case(b"x-sendfile") {
            return Some(Redirect::Sendfile(value.to_vec()));
        }
    }
    None
}

/// Follows `redirect`, which `app`, the answer of `route`'s upstream to
/// `req`, asked for: the file's answer (or the internal route upstream's),
/// with the app's download fields.
pub async fn follow(
    req: &RequestHead,
    router: &Router,
    route: &Route,
    app: Response,
    redirect: Redirect,
    client: Client<'_>,
) -> Response {
    let now = Instant::now();
    // GET whatever the app answered (a download after a POST), HEAD kept.
    let method: &[u8] = if req.method() == b"HEAD" {
        b"HEAD"
    } else {
        b"GET"
    };
    let mut served = match &redirect {
        Redirect::Accel(uri) => {
            let path = uri.split(|&b| b == b'?').next().unwrap_or_default();
            let Ok(path) = hayate_core::path::normalize(path) else {
                return refused("X-Accel-Redirect", uri, "not a path that normalizes");
            };
            let target = router.route(req.host(), &path);
            let Some(target) = target.filter(|t| t.internal) else {
                return refused(
                    "X-Accel-Redirect",
                    uri,
                    "no internal route of the site has it",
                );
            };
            if let Some(files) = &target.files {
                let path = handler_path(target, &path);
                serve_file(files, req, method, &path, now)
                    .unwrap_or_else(|| Response::error(Status::NOT_FOUND))
            } else if let Some(group) = &target.upstream {
                let mut proxied = crate::pipeline::proxied(req, uri, client);
                proxied.method = method;
                group.forward(&proxied, &mut NoBody).await
            } else {
                Response::error(Status::NOT_FOUND)
            }
        }
        Redirect::Sendfile(file) => {
            let Some(files) = &route.sendfile else {
                return refused("X-Sendfile", file, "the route sets no x_sendfile directory");
            };
            let root = files.root().as_os_str().as_encoded_bytes();
            let root = root.strip_suffix(b"/").unwrap_or(root);
            let Some(rest) = file.strip_prefix(root).filter(|r| r.starts_with(b"/")) else {
                return refused(
                    "X-Sendfile",
                    file,
                    "not under the route's x_sendfile directory",
                );
            };
            // The name as a path under the root: escaped, then normalized
            // as a request's would be, so `..` cannot climb out.
            let encoded = hayate_core::path::encode(rest);
            let Ok(path) = hayate_core::path::normalize(encoded.as_bytes()) else {
                return refused("X-Sendfile", file, "not a path that normalizes");
            };
            serve_file(files, req, method, &path, now)
                .unwrap_or_else(|| Response::error(Status::NOT_FOUND))
        }
    };
    for (name, value) in app.all_fields() {
        if KEPT.iter().any(|k| name.eq_ignore_ascii_case(k)) {
            if name.eq_ignore_ascii_case(b"cache-control") {
                served.remove_field(b"cache-control");
            }
            served.header(std::str::from_utf8(name).unwrap_or("x-invalid"), value);
        }
    }
    served
}

/// 500 for an internal redirect the app should not have asked for.
fn refused(field: &str, value: &[u8], why: &str) -> Response {
    log::error!(
        "500: the upstream's {field}: {:?} refused: {why}",
        String::from_utf8_lossy(value)
    );
    Response::error(Status::INTERNAL_SERVER_ERROR)
}
