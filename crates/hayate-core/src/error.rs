//! Failures on a request's way to its answer, and the one place where they
//! become responses and log lines ([`Error::into_response`]).
//!
//! A layer keeps its own detail (the proxy's `Failure` says how far a
//! request got, which decides a retry) and hands an [`Error`] here when it
//! gives up: its kind decides the status, who is to blame decides the log
//! level, and message text is never matched on.

use std::io;

use crate::{Response, Status};

/// Who a failure is to blame on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// hayate itself or its host (a file's permissions, a disk error):
    /// logged at error, the connection kept.
    Internal,
    /// The client (bad input, too slow, too large): logged at info.
    Client,
    /// An upstream (down, too slow, broken answer, all busy): logged at
    /// error, or warn when it is only busy.
    Upstream,
}

/// What went wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The request head broke a limit or a rule of its protocol, with the
    /// status its codec chose (400, 408, 413, 414, 417, 431, 501, 505):
    /// connection closed.
    Refused(Status),
    /// The request or its body is malformed: 400, connection closed.
    BadRequest,
    /// The client did not send its body in time: 408, connection closed.
    ClientTimeout,
    /// The request body is larger than allowed: 413, connection closed.
    BodyTooLarge,
    /// No upstream could be reached, or its answer was broken: 502.
    UpstreamFailed,
    /// The upstream did not connect or answer in time: 504.
    UpstreamTimeout,
    /// Every upstream is at its limit and the queue is full or was waited
    /// in too long: 503 with Retry-After (distinct from a failing one).
    UpstreamBusy,
    /// The supervised app is down: every instance crashed in a loop and
    /// hayate stopped restarting them until a reload. 503 at once, with a
    /// body that says so, instead of a queue wait that cannot end well.
    AppDown,
    /// A file hayate may not read (permissions): 403.
    Forbidden,
    /// hayate's own failure (an I/O error on a file it could open): 500.
    Internal,
}

impl ErrorKind {
    /// Who is to blame.
    pub fn side(self) -> Side {
        match self {
            ErrorKind::Refused(_)
            | ErrorKind::BadRequest
            | ErrorKind::ClientTimeout
            | ErrorKind::BodyTooLarge => Side::Client,
            ErrorKind::UpstreamFailed
            | ErrorKind::UpstreamTimeout
            | ErrorKind::UpstreamBusy
            | ErrorKind::AppDown => Side::Upstream,
            ErrorKind::Forbidden | ErrorKind::Internal => Side::Internal,
        }
    }

    /// The status answered.
    pub fn status(self) -> Status {
        match self {
            ErrorKind::Refused(status) => status,
            ErrorKind::BadRequest => Status::BAD_REQUEST,
            ErrorKind::ClientTimeout => Status::REQUEST_TIMEOUT,
            ErrorKind::BodyTooLarge => Status::CONTENT_TOO_LARGE,
            ErrorKind::UpstreamFailed => Status::BAD_GATEWAY,
            ErrorKind::UpstreamTimeout => Status::GATEWAY_TIMEOUT,
            ErrorKind::UpstreamBusy | ErrorKind::AppDown => Status::SERVICE_UNAVAILABLE,
            ErrorKind::Forbidden => Status::FORBIDDEN,
            ErrorKind::Internal => Status::INTERNAL_SERVER_ERROR,
        }
    }

    /// Whether the client may try again soon (Retry-After).
    pub fn retry_later(self) -> bool {
        self == ErrorKind::UpstreamBusy
    }
}

/// A failure that ends a request with an error response.
#[derive(Debug)]
pub struct Error {
    /// What went wrong.
    pub kind: ErrorKind,
    /// The underlying cause.
    pub cause: io::Error,
    /// Where, for the log (`upstream 127.0.0.1:3000`).
    pub context: Option<String>,
}

impl Error {
    /// An error of `kind` caused by `cause`.
    pub fn new(kind: ErrorKind, cause: io::Error) -> Error {
        Error {
            kind,
            cause,
            context: None,
        }
    }

    /// A failure reading the client's request body (see
    /// [`ClientBody`](crate::client_body::ClientBody) for what each I/O
    /// error kind means there).
    pub fn client_body(cause: io::Error) -> Error {
        let kind = match cause.kind() {
            io::ErrorKind::TimedOut => ErrorKind::ClientTimeout,
            io::ErrorKind::InvalidInput => ErrorKind::BodyTooLarge,
            _ => ErrorKind::BadRequest,
        };
        Error::new(kind, cause)
    }

    /// A failure reading a file: permissions are a 403, anything else a 500.
    pub fn file(cause: io::Error) -> Error {
        let kind = match cause.kind() {
            io::ErrorKind::PermissionDenied => ErrorKind::Forbidden,
            _ => ErrorKind::Internal,
        };
        Error::new(kind, cause)
    }

    /// An upstream's failure: a timeout is a 504, anything else a 502.
    pub fn upstream(cause: io::Error) -> Error {
        let kind = match cause.kind() {
            io::ErrorKind::TimedOut => ErrorKind::UpstreamTimeout,
            _ => ErrorKind::UpstreamFailed,
        };
        Error::new(kind, cause)
    }

    /// Says where the failure happened, for the log line.
    pub fn context(mut self, context: impl Into<String>) -> Error {
        self.context = Some(context.into());
        self
    }

    /// The log line.
    pub fn message(&self) -> String {
        match &self.context {
            Some(c) => format!("{c}: {}", self.cause),
            None => self.cause.to_string(),
        }
    }

    /// The response, logged once: the client's failures at info, a busy
    /// upstream at warn, a failing one and hayate's own at error (a file
    /// hayate may not read at info: it is the site's layout). A client
    /// failure closes the connection (its request's framing can no longer
    /// be trusted).
    pub fn into_response(self) -> Response {
        let status = self.kind.status();
        match (self.kind.side(), self.kind.retry_later()) {
            (Side::Client, _) => log::info!("{}: {}", status.code(), self.message()),
            (Side::Upstream, true) => log::warn!("{}: {}", status.code(), self.message()),
            (Side::Upstream, false) => log::error!("{}", self.message()),
            (Side::Internal, _) if self.kind == ErrorKind::Forbidden => {
                log::info!("{}: {}", status.code(), self.message())
            }
            (Side::Internal, _) => log::error!("{}", self.message()),
        }
        let mut r = Response::error(status);
        if self.kind == ErrorKind::AppDown {
            r.body = crate::Body::Bytes(bytes::Bytes::from_static(
                b"503 Service Unavailable: the app is down (its instances crashed in a loop \
                  and are not restarted until hayate reload)\n",
            ));
        }
        if self.kind.retry_later() {
            r.header("Retry-After", b"1");
        }
        r.close = self.kind.side() == Side::Client;
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io(kind: io::ErrorKind) -> io::Error {
        io::Error::new(kind, "x")
    }

    #[test]
    fn kinds_map_to_statuses_and_connection_policy() {
        let cases = [
            (Error::client_body(io(io::ErrorKind::TimedOut)), 408, true),
            (
                Error::client_body(io(io::ErrorKind::InvalidInput)),
                413,
                true,
            ),
            (
                Error::client_body(io(io::ErrorKind::InvalidData)),
                400,
                true,
            ),
            (Error::upstream(io(io::ErrorKind::TimedOut)), 504, false),
            (
                Error::upstream(io(io::ErrorKind::ConnectionReset)),
                502,
                false,
            ),
            (
                Error::new(ErrorKind::UpstreamBusy, io(io::ErrorKind::Other)),
                503,
                false,
            ),
            (Error::file(io(io::ErrorKind::PermissionDenied)), 403, false),
            (Error::file(io(io::ErrorKind::Other)), 500, false),
            (
                Error::new(
                    ErrorKind::Refused(Status::REQUEST_HEADER_FIELDS_TOO_LARGE),
                    io(io::ErrorKind::InvalidData),
                ),
                431,
                true,
            ),
        ];
        for (error, code, close) in cases {
            let kind = error.kind;
            let r = error.into_response();
            assert_eq!((r.status.code(), r.close), (code, close), "{kind:?}");
            let retry_after = r.field(b"retry-after") == Some(&b"1"[..]);
            assert_eq!(retry_after, code == 503, "{kind:?}");
        }
    }

    #[test]
    fn the_log_line_names_the_place() {
        let e = Error::upstream(io(io::ErrorKind::ConnectionRefused)).context("upstream a:1");
        assert_eq!(e.message(), "upstream a:1: x");
    }
}
