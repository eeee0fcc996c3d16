//! Error pages (`error_pages`, `intercept_errors`), in the response phase:
//! the body of an error hayate made itself (403, 404, 413, 429, 502, 503,
//! 504, ...) replaced by the route's page for its status, the status and
//! the fields that matter to it (`WWW-Authenticate`, `Retry-After`,
//! `Allow`) kept. With `intercept_errors` an upstream's own 4xx and 5xx
//! answers are replaced too, as a fresh response: nothing of the upstream's
//! body (nor its framing or coding fields) goes on.
//!
//! Pages are read when the route is built (at start and on reload), so
//! answering one never touches the disk and never fails.

use bytes::Bytes;

use hayate_config::values::{ErrorPages, StatusMatch};
use hayate_core::{Body, Response};

use super::{ResponsePolicy, ResponseRequest};

/// Largest page: an error page is a page, not a download.
const MAX_PAGE: u64 = 1024 * 1024;

/// Fields of an error answer that say how to get past it; kept when an
/// upstream's answer is replaced.
const KEPT: [&[u8]; 4] = [
    b"www-authenticate",
    b"retry-after",
    b"allow",
    b"content-language",
];

/// A route's error pages, in memory.
pub struct ErrorPagesPolicy {
    /// Statuses first, then classes (a status wins over its class).
    pages: Vec<(StatusMatch, Page)>,
    intercept: bool,
}

struct Page {
    body: Bytes,
    content_type: &'static [u8],
}

impl ErrorPagesPolicy {
    /// Reads the route's pages; `None` when it has none. Fails naming the
    /// file that cannot be read or is too large.
    pub fn load(pages: Option<&ErrorPages>, intercept: bool) -> Result<Option<Self>, String> {
        let Some(pages) = pages.filter(|p| !p.0.is_empty()) else {
            return Ok(None);
        };
        let mut loaded = Vec::new();
        for (status, path) in &pages.0 {
            let size = std::fs::metadata(path)
                .map_err(|e| format!("{}: {e}", path.display()))?
                .len();
            if size > MAX_PAGE {
                return Err(format!(
                    "{}: {size} bytes; an error page is at most 1 MiB",
                    path.display()
                ));
            }
            let body = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
            let ext = path
                .extension()
                .and_then(|e| e.to_str())
                .unwrap_or_default();
            let content_type: &'static [u8] = match ext.to_ascii_lowercase().as_str() {
                "html" | "htm" => b"text/html; charset=utf-8",
                "json" => b"application/json",
                "xml" => b"application/xml",
                _ => b"text/plain; charset=utf-8",
            };
            loaded.push((
                *status,
                Page {
                    body: body.into(),
                    content_type,
                },
            ));
        }
        loaded.sort_by_key(|(m, _)| matches!(m, StatusMatch::Class(_)));
        Ok(Some(ErrorPagesPolicy {
            pages: loaded,
            intercept,
        }))
    }

    fn page_for(&self, status: u16) -> Option<&Page> {
        self.pages
            .iter()
            .find(|(m, _)| m.holds(status))
            .map(|(_, p)| p)
    }
}

impl ResponsePolicy for ErrorPagesPolicy {
    fn respond(&self, response: &mut Response, request: &ResponseRequest<'_>) {
        let status = response.status.code();
        if status < 400 || !(response.generated || self.intercept) {
            return;
        }
        let json = crate::pipeline::wants_json(request.head.header(b"accept"));
        let (body, content_type) = match self.page_for(status) {
            Some(page) if !json || page.content_type == b"application/json" => {
                (page.body.clone(), page.content_type)
            }
            _ if json => {
                let text = format!(
                    "{{\"status\":{status},\"error\":\"{}\"}}\n",
                    response.status.reason()
                );
                (Bytes::from(text), &b"application/json"[..])
            }
            _ => return,
        };
        if !response.generated {
            // An upstream's answer: a fresh one, with only what says how
            // to get past the error.
            let mut fresh = Response::new(response.status);
            for (name, value) in response.all_fields() {
                if KEPT.iter().any(|k| name.eq_ignore_ascii_case(k)) {
                    fresh.header(std::str::from_utf8(name).unwrap_or("x-invalid"), value);
                }
            }
            fresh.cache_status = response.cache_status;
            fresh.close = response.close;
            *response = fresh;
        }
        response.remove_field(b"content-type");
        response.header("Content-Type", content_type);
        response.body = Body::Bytes(body);
        response.generated = true;
    }
}
