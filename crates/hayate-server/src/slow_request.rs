//! `slow_request`: a request slower than the setting (its head read to its
//! response written) is written to the error log at WARN with where its
//! time went, so the one slow request among many can be found without an
//! access log to search.

use hayate_core::request::RequestHead;

use crate::access_log::{request_id, Entry};

/// Logs `e`, which took `slow_request` or longer.
pub(crate) fn report(req: &RequestHead, e: &Entry<'_>) {
    let ms = |us: u64| us as f64 / 1000.0;
    let upstream = match e.upstream {
        Some(u) => format!(
            "upstream connect {:.1} ms, upstream head {:.1} ms",
            ms(u.connect_us.into()),
            ms(u.head_us.into())
        ),
        None => "no upstream".into(),
    };
    let route = match e.route {
        Some((site, prefix)) => format!("{site}{}", String::from_utf8_lossy(prefix)),
        None => "-".into(),
    };
    let id = request_id(req, e, &mut [0; 16])
        .map_or_else(|| "-".into(), |id| String::from_utf8_lossy(id).into_owned());
    log::warn!(
        "slow request: {:.1} ms total ({upstream}); {} {} from {}, route {route}, status {}, request id {id}",
        ms(u64::try_from(e.duration.as_micros()).unwrap_or(u64::MAX)),
        String::from_utf8_lossy(req.method()).escape_debug(),
        String::from_utf8_lossy(req.original_target()).escape_debug(),
        e.peer,
        e.status,
    );
}
