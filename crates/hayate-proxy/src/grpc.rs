//! gRPC's view of a proxied call: which requests are gRPC, their deadline
//! (`grpc-timeout`), and hayate's own failures said the way gRPC clients
//! read them. A gRPC client turns a bare 502 into UNKNOWN ("Received HTTP
//! status code 502"); answered HTTP 200 with `grpc-status` 14 UNAVAILABLE
//! (which clients may retry) or 4 DEADLINE_EXCEEDED, it reports what
//! happened (gRPC's "HTTP to gRPC Status Code Mapping" and PROTOCOL-HTTP2).

use std::time::Duration;

use hayate_core::{Response, Status};

use crate::ProxyRequest;

/// gRPC status codes hayate answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GrpcStatus {
    /// 4: the call's deadline (or the route's `proxy_timeout`) passed.
    DeadlineExceeded,
    /// 8: the request was larger than allowed.
    ResourceExhausted,
    /// 13: the request was malformed.
    Internal,
    /// 14: no member could take the call (down, refused, reset, busy).
    Unavailable,
}

impl GrpcStatus {
    /// The code, as `grpc-status` carries it.
    pub(crate) fn code(self) -> &'static str {
        match self {
            GrpcStatus::DeadlineExceeded => "4",
            GrpcStatus::ResourceExhausted => "8",
            GrpcStatus::Internal => "13",
            GrpcStatus::Unavailable => "14",
        }
    }

    /// The gRPC status of an error answer hayate made itself, from its
    /// HTTP status: 504 is a timeout, 413 a size limit, other 4xx a bad
    /// request, the rest (502, 503, ...) an upstream out of reach.
    pub(crate) fn of_http(status: Status) -> GrpcStatus {
        match status.code() {
            504 | 408 => GrpcStatus::DeadlineExceeded,
            413 => GrpcStatus::ResourceExhausted,
            400..=499 => GrpcStatus::Internal,
            _ => GrpcStatus::Unavailable,
        }
    }
}

/// Whether the request is a gRPC call (`application/grpc`,
/// `application/grpc+proto`, `application/grpc+json`, ...); not gRPC-Web
/// (`application/grpc-web`), whose errors are its own.
pub(crate) fn is_grpc(req: &ProxyRequest<'_>) -> bool {
    req.field(b"content-type").is_some_and(|v| {
        let v = v.to_ascii_lowercase();
        v == b"application/grpc"
            || v.starts_with(b"application/grpc+")
            || v.starts_with(b"application/grpc;")
    })
}

/// The call's deadline from `grpc-timeout` (`1-8 digits` then one of
/// `H M S m u n`); `None` when absent or malformed (then the route's
/// `proxy_timeout` alone bounds the wait).
pub(crate) fn timeout(req: &ProxyRequest<'_>) -> Option<Duration> {
    let v = req.field(b"grpc-timeout")?;
    let (digits, unit) = v.split_at(v.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit {
        b"H" => Duration::from_secs(n * 3600),
        b"M" => Duration::from_secs(n * 60),
        b"S" => Duration::from_secs(n),
        b"m" => Duration::from_millis(n),
        b"u" => Duration::from_micros(n),
        b"n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// The gRPC form of an error answer hayate made itself (`generated`): HTTP
/// 200, no body, and `grpc-status` with a `grpc-message` in its headers (a
/// trailers-only response); any other answer is returned as it is.
pub(crate) fn rescue(response: Response) -> Response {
    rescue_as(response, b"application/grpc")
}

/// [`rescue`] with the content type of the call's protocol (gRPC-Web's
/// for a browser's call).
pub(crate) fn rescue_as(response: Response, content_type: &[u8]) -> Response {
    if !response.generated || response.status.is_success() {
        return response;
    }
    let http = response.status;
    let status = GrpcStatus::of_http(http);
    let mut r = Response::new(Status::OK);
    r.generated = true;
    r.close = response.close;
    r.header("content-type", content_type);
    r.header("grpc-status", status.code().as_bytes());
    // Percent-encoded by the spec; the text is plain ASCII without '%'.
    let message = format!(
        "hayate: upstream answered no call ({} {})",
        http.code(),
        http.reason()
    );
    r.header("grpc-message", message.replace(' ', "%20").as_bytes());
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req<'a>(headers: Vec<(&'a [u8], &'a [u8])>) -> ProxyRequest<'a> {
        crate::request::tests::req(b"POST", headers)
    }

    #[test]
    fn grpc_requests_by_content_type() {
        for (ct, grpc) in [
            (&b"application/grpc"[..], true),
            (b"application/grpc+proto", true),
            (b"Application/GRPC+json", true),
            (b"application/grpc-web", false),
            (b"application/grpc-web-text", false),
            (b"application/json", false),
        ] {
            assert_eq!(is_grpc(&req(vec![(b"content-type", ct)])), grpc, "{ct:?}");
        }
        assert!(!is_grpc(&req(vec![])));
    }

    #[test]
    fn grpc_timeouts_in_every_unit_and_malformed_ones_ignored() {
        let t = |v: &'static [u8]| timeout(&req(vec![(b"grpc-timeout", v)]));
        assert_eq!(t(b"1H"), Some(Duration::from_secs(3600)));
        assert_eq!(t(b"2M"), Some(Duration::from_secs(120)));
        assert_eq!(t(b"3S"), Some(Duration::from_secs(3)));
        assert_eq!(t(b"250m"), Some(Duration::from_millis(250)));
        assert_eq!(t(b"7u"), Some(Duration::from_micros(7)));
        assert_eq!(t(b"9n"), Some(Duration::from_nanos(9)));
        for bad in [
            &b""[..],
            b"S",
            b"10",
            b"10x",
            b"123456789S",
            b"-1S",
            b"1.5S",
        ] {
            assert_eq!(t(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn hayates_own_failures_become_trailers_only_grpc_answers() {
        let cases = [
            (Status::BAD_GATEWAY, "14"),
            (Status::SERVICE_UNAVAILABLE, "14"),
            (Status::GATEWAY_TIMEOUT, "4"),
            (Status::CONTENT_TOO_LARGE, "8"),
            (Status::BAD_REQUEST, "13"),
        ];
        for (http, code) in cases {
            let r = rescue(Response::error(http));
            assert_eq!(r.status, Status::OK);
            assert_eq!(
                r.fields.get(b"grpc-status"),
                Some(code.as_bytes()),
                "{http:?}"
            );
            assert!(r.fields.get(b"grpc-message").is_some());
            assert!(r.body.is_empty(), "trailers-only: no body");
        }
        // An upstream's own answer passes as it is.
        let mut upstream = Response::new(Status::SERVICE_UNAVAILABLE);
        upstream.generated = false;
        assert_eq!(rescue(upstream).status, Status::SERVICE_UNAVAILABLE);
    }
}
