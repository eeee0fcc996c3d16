//! Step 3's files: a static answer for a request, from the fields a file
//! answer reads (conditionals, ranges, the codings and types accepted).

use std::time::Instant;

use hayate_compress::AcceptEncoding;
use hayate_core::field::name_is;
use hayate_core::request::RequestHead;
use hayate_core::{Coding, Response};
use hayate_static::{Preconditions, StaticRequest, StaticRoot};

/// Inlined: once `serve` was inlined into `answer`, this stopped being
/// and cost a file 92 instructions more (bench/instructions/run).
/// `method` is the request's, or GET for an X-Accel-Redirect (`accel`).
#[inline(always)]
pub(crate) fn serve_file(
    files: &StaticRoot,
    req: &RequestHead,
    method: &[u8],
    path: &[u8],
    now: Instant,
) -> Option<Response> {
    let accept = AcceptEncoding::parse(req.headers_named(b"accept-encoding"));
    let choose = |available: &[Coding]| accept.choose(available.iter().copied());
    // The first value of each field a file answer reads, in one pass over
    // the fields: seven lookups, a scan each, cost 345 more of a static
    // request's 7,534 instructions (bench/instructions/run).
    let mut preconditions = Preconditions::default();
    let (mut range, mut accept_types) = (None, None);
    for (name, value) in req.fields() {
        let slot = if name_is(name, b"if-match") {
            &mut preconditions.if_match
        } else if name_is(name, b"if-none-match") {
            &mut preconditions.if_none_match
        } else if name_is(name, b"if-modified-since") {
            &mut preconditions.if_modified_since
        } else if name_is(name, b"if-unmodified-since") {
            &mut preconditions.if_unmodified_since
        } else if name_is(name, b"if-range") {
            &mut preconditions.if_range
        } else if name_is(name, b"range") {
            &mut range
        } else if name_is(name, b"accept") {
            &mut accept_types
        } else {
            continue;
        };
        slot.get_or_insert(value);
    }
    files.try_serve(&StaticRequest {
        method,
        path,
        raw_path: req.path(),
        query: req.query(),
        preconditions,
        range,
        choose_coding: &choose,
        wants_json: wants_json(accept_types),
        now,
    })
}

/// Whether the client prefers JSON (directory listings, error answers), by
/// its Accept.
#[inline]
pub(crate) fn wants_json(accept: Option<&[u8]>) -> bool {
    accept.is_some_and(|a| {
        let a = String::from_utf8_lossy(a);
        a.contains("application/json") && !a.contains("text/html")
    })
}
