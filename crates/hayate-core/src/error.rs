//! Failures on a request's way to its answer, and the one place where they
//! become responses and log lines ([`Error::into_response`]).
//!
//! A layer keeps its own detail (the proxy's `Failure` says how far a
//! request got, which decides a retry) and hands an [`Error`] here when it
//! gives up: its kind decides the status, who is to blame decides the log
//! level, and message text is never matched on.
//!
//! A shortage of hayate's own (descriptors, socket buffers, memory: see
//! [`is_local_shortage`]) is told by the error's number, never its text; it
//! blames nobody else and is logged at most once a second, with a count
//! ([`note_shortage`]), however many requests it touches.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

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
    /// The client closed its connection before the answer came: the
    /// upstream's work was cancelled. Logged as 499 (nginx's "client
    /// closed request"); nobody is there to receive it.
    ClientGone,
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
    /// The supervised app was stopped by `hayate stop APP` and stays so
    /// until `hayate start APP`: 503 at once, with a body that says so.
    AppStopped,
    /// A file hayate may not read (permissions): 403.
    Forbidden,
    /// hayate's own failure (an I/O error on a file it could open): 500.
    Internal,
    /// hayate ran short of a resource of its host (descriptors, socket
    /// buffers, memory, local ports) and could not wait longer for one:
    /// 503 with Retry-After, never blamed on an upstream, logged by
    /// [`note_shortage`].
    LocalShortage,
}

impl ErrorKind {
    /// Who is to blame.
    pub fn side(self) -> Side {
        match self {
            ErrorKind::Refused(_)
            | ErrorKind::BadRequest
            | ErrorKind::ClientTimeout
            | ErrorKind::BodyTooLarge
            | ErrorKind::ClientGone => Side::Client,
            ErrorKind::UpstreamFailed
            | ErrorKind::UpstreamTimeout
            | ErrorKind::UpstreamBusy
            | ErrorKind::AppDown
            | ErrorKind::AppStopped => Side::Upstream,
            ErrorKind::Forbidden | ErrorKind::Internal | ErrorKind::LocalShortage => Side::Internal,
        }
    }

    /// The status answered.
    pub fn status(self) -> Status {
        match self {
            ErrorKind::Refused(status) => status,
            ErrorKind::BadRequest => Status::BAD_REQUEST,
            ErrorKind::ClientTimeout => Status::REQUEST_TIMEOUT,
            ErrorKind::BodyTooLarge => Status::CONTENT_TOO_LARGE,
            ErrorKind::ClientGone => Status::CLIENT_CLOSED_REQUEST,
            ErrorKind::UpstreamFailed => Status::BAD_GATEWAY,
            ErrorKind::UpstreamTimeout => Status::GATEWAY_TIMEOUT,
            ErrorKind::UpstreamBusy
            | ErrorKind::AppDown
            | ErrorKind::AppStopped
            | ErrorKind::LocalShortage => Status::SERVICE_UNAVAILABLE,
            ErrorKind::Forbidden => Status::FORBIDDEN,
            ErrorKind::Internal => Status::INTERNAL_SERVER_ERROR,
        }
    }

    /// Whether the client may try again soon (Retry-After).
    pub fn retry_later(self) -> bool {
        matches!(self, ErrorKind::UpstreamBusy | ErrorKind::LocalShortage)
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
            io::ErrorKind::ConnectionAborted => ErrorKind::ClientGone,
            _ => ErrorKind::BadRequest,
        };
        Error::new(kind, cause)
    }

    /// A failure reading a file: permissions are a 403, no descriptor (or
    /// memory) left a 503 with Retry-After, anything else a 500.
    pub fn file(cause: io::Error) -> Error {
        let kind = match cause.kind() {
            io::ErrorKind::PermissionDenied => ErrorKind::Forbidden,
            _ if is_local_shortage(&cause) => ErrorKind::LocalShortage,
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
            // Asked for by the operator: not a failure.
            _ if self.kind == ErrorKind::AppStopped => {
                log::info!("{}: {}", status.code(), self.message())
            }
            (Side::Client, _) => log::info!("{}: {}", status.code(), self.message()),
            (Side::Upstream, true) => log::warn!("{}: {}", status.code(), self.message()),
            (Side::Upstream, false) => log::error!("{}", self.message()),
            (Side::Internal, _) if self.kind == ErrorKind::Forbidden => {
                log::info!("{}: {}", status.code(), self.message())
            }
            (Side::Internal, _) if self.kind == ErrorKind::LocalShortage => {
                note_shortage(|| format!("{}: {}", status.code(), self.message()))
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
        if self.kind == ErrorKind::AppStopped {
            r.body = crate::Body::Bytes(bytes::Bytes::from_static(
                b"503 Service Unavailable: the app is stopped (hayate start APP starts it)\n",
            ));
        }
        if self.kind.retry_later() {
            r.header("Retry-After", b"1");
        }
        r.close = self.kind.side() == Side::Client;
        r
    }
}

/// Whether `cause` says that hayate's host is short of something hayate
/// needs, rather than that a peer or a file failed: no descriptor left in
/// the process (EMFILE) or the system (ENFILE), no socket buffer (ENOBUFS),
/// no memory (ENOMEM), or no local port for a connect (EADDRNOTAVAIL: a
/// connect binds none of its own, so it means the ephemeral ports are all
/// in use). Such a failure passes when something else closes; it is waited
/// out or answered 503, and counts against no upstream.
pub fn is_local_shortage(cause: &io::Error) -> bool {
    use nix::libc;
    matches!(
        cause.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM | libc::EADDRNOTAVAIL)
    )
}

/// Counts a local shortage (`what` says where, with its cause) and logs it
/// at warn at most once a [`SHORTAGE_REPORT_EVERY`], with how many there
/// were since the last such line: under a shortage every request meets it,
/// and a line per request would flood the log and cost the CPU the
/// requests wait for (issue 43 measured 288,773 failed requests in 5 s,
/// a line each).
pub fn note_shortage(what: impl FnOnce() -> String) {
    static REPORT: ShortageReport = ShortageReport::new();
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let epoch = *EPOCH.get_or_init(Instant::now);
    let now = crate::loop_time::instant().saturating_duration_since(epoch);
    SHORTAGES.fetch_add(1, Ordering::Relaxed);
    if let Some(n) = REPORT.note(now) {
        log::warn!(
            "short of local resources: {} ({n} such failures since the last report; \
             requests wait for a descriptor or get 503, no upstream is blamed)",
            what()
        );
    }
}

/// Local shortages since the process started, every thread's.
static SHORTAGES: AtomicU64 = AtomicU64::new(0);

/// How many local shortages [`note_shortage`] has counted so far: what
/// holds descriptors only to save work later (idle pooled connections)
/// lets them go when this moved.
pub fn shortages() -> u64 {
    SHORTAGES.load(Ordering::Relaxed)
}

/// How often a local shortage is logged at most.
pub const SHORTAGE_REPORT_EVERY: Duration = Duration::from_secs(1);

/// The count behind [`note_shortage`], shared by every thread.
struct ShortageReport {
    /// Shortages since the last report.
    seen: AtomicU64,
    /// When the last report was made, in milliseconds since the process's
    /// first shortage; `u64::MAX` before any.
    reported_at: AtomicU64,
}

impl ShortageReport {
    const fn new() -> ShortageReport {
        ShortageReport {
            seen: AtomicU64::new(0),
            reported_at: AtomicU64::new(u64::MAX),
        }
    }

    /// Counts one shortage at `now`; returns the count to report, when a
    /// report is due (the first one at once, then at most one a period).
    fn note(&self, now: Duration) -> Option<u64> {
        self.seen.fetch_add(1, Ordering::Relaxed);
        let now = u64::try_from(now.as_millis()).unwrap_or(u64::MAX - 1);
        let last = self.reported_at.load(Ordering::Relaxed);
        let every = SHORTAGE_REPORT_EVERY.as_millis() as u64;
        if last != u64::MAX && now < last.saturating_add(every) {
            return None;
        }
        // One thread reports; the others' counts go into its line or the next.
        self.reported_at
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .ok()?;
        Some(self.seen.swap(0, Ordering::Relaxed))
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
                Error::file(io::Error::from_raw_os_error(nix::libc::EMFILE)),
                503,
                false,
            ),
            (
                Error::new(
                    ErrorKind::LocalShortage,
                    io::Error::from_raw_os_error(nix::libc::ENOBUFS),
                ),
                503,
                false,
            ),
            (
                Error::new(ErrorKind::AppStopped, io(io::ErrorKind::Other)),
                503,
                false,
            ),
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
            // A stopped app stays so until an operator starts it: a client
            // told to retry in a second would only spin.
            let later = code == 503 && kind != ErrorKind::AppStopped;
            assert_eq!(retry_after, later, "{kind:?}");
        }
    }

    #[test]
    fn the_log_line_names_the_place() {
        let e = Error::upstream(io(io::ErrorKind::ConnectionRefused)).context("upstream a:1");
        assert_eq!(e.message(), "upstream a:1: x");
    }

    #[test]
    fn local_shortages_are_told_by_their_number() {
        use nix::libc;
        for n in [libc::EMFILE, libc::ENFILE, libc::ENOBUFS, libc::ENOMEM] {
            assert!(is_local_shortage(&io::Error::from_raw_os_error(n)), "{n}");
        }
        for n in [
            libc::ECONNREFUSED,
            libc::ENOENT,
            libc::EACCES,
            libc::ECONNRESET,
        ] {
            assert!(!is_local_shortage(&io::Error::from_raw_os_error(n)), "{n}");
        }
        // Text is not API: a message that names the error is not one.
        assert!(!is_local_shortage(&io::Error::other(
            "Too many open files (os error 24)"
        )));
    }

    #[test]
    fn shortages_are_reported_at_most_once_a_second_with_their_count() {
        let r = ShortageReport::new();
        let ms = Duration::from_millis;
        assert_eq!(r.note(ms(5_000)), Some(1), "the first at once");
        assert_eq!(r.note(ms(5_001)), None);
        assert_eq!(r.note(ms(5_999)), None);
        assert_eq!(r.note(ms(6_000)), Some(3), "then a second later, counted");
        assert_eq!(r.note(ms(6_500)), None);
        assert_eq!(r.note(ms(9_000)), Some(2));
    }
}
