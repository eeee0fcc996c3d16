//! What a client may not flood an HTTP/3 connection or endpoint with, and
//! the counters that say what happened (`/metrics`).
//!
//! - Streams the client cancels (RESET_STREAM or STOP_SENDING before its
//!   response is done): HTTP/3's "rapid reset" (CVE-2023-44487 over
//!   QUIC). Each cancelled stream may have cost hayate a request through
//!   the pipeline, and the stream limit does not bound them: a cancelled
//!   stream frees its slot. At most [`RESETS_PER_SECOND`] in a second;
//!   past it the connection is closed with H3_EXCESSIVE_LOAD.
//! - Frames without payload (empty DATA, unknown or reserved types): h3
//!   skips them inside its decoder, out of hayate's sight, so the budget
//!   is in the patched h3 (`vendor/h3`, `MAX_EMPTY_FRAMES`: 100 per
//!   stream); past it h3 closes the connection with H3_EXCESSIVE_LOAD,
//!   counted here.
//! - Initial packets: past `http3_retry_above` handshakes in progress on
//!   a worker, new clients get a Retry first (`h3_conn::serve_endpoint`),
//!   counted here.
//! - Datagrams that are not QUIC, or of no connection: quinn drops them
//!   before any state is made (a stateless reset at most, never more
//!   bytes than came in: RFC 9000 §10.3).

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hayate_core::metrics::{family, sample, Kind};

/// Streams a client may cancel per second on one connection: every stream
/// it may have open (128) once a second. A browser navigating away cancels
/// the streams it has open, a few dozen at most; the rapid-reset attacks
/// of 2023 sent tens of thousands per second on each connection.
pub(super) const RESETS_PER_SECOND: u32 = 128;

/// The application error code of a connection closed for a flood (RFC
/// 9114 §8.1: "the peer is exhibiting a behavior that might be generating
/// excessive load").
pub(super) const H3_EXCESSIVE_LOAD: u32 = 0x107;

static CLOSED_FOR_RESETS: AtomicU64 = AtomicU64::new(0);
static CLOSED_FOR_EMPTY_FRAMES: AtomicU64 = AtomicU64::new(0);
static RETRIES: AtomicU64 = AtomicU64::new(0);
static REFUSED_FULL: AtomicU64 = AtomicU64::new(0);

/// The streams one connection's client cancelled in the current second.
#[derive(Default)]
pub(super) struct ResetBudget {
    window: Cell<Option<Instant>>,
    spent: Cell<u32>,
}

impl ResetBudget {
    /// Counts a stream the client cancelled; true when that was one too
    /// many, and the connection must close.
    pub fn over(&self) -> bool {
        let now = Instant::now();
        let fresh = self
            .window
            .get()
            .is_none_or(|start| now.duration_since(start) >= Duration::from_secs(1));
        if fresh {
            self.window.set(Some(now));
            self.spent.set(0);
        }
        self.spent.set(self.spent.get() + 1);
        let over = self.spent.get() == RESETS_PER_SECOND + 1;
        if over {
            CLOSED_FOR_RESETS.fetch_add(1, Ordering::Relaxed);
        }
        over
    }
}

/// Whether h3 closed a connection with `e` for a flood of frames without
/// payload (counted once per connection: its accept loop sees it once).
pub(super) fn closed_for_empty_frames(e: &h3::error::ConnectionError) -> bool {
    use h3::error::{Code, ConnectionError, LocalError};
    let flood = matches!(
        e,
        ConnectionError::Local {
            error: LocalError::Application {
                code: Code::H3_EXCESSIVE_LOAD,
                ..
            },
            ..
        }
    );
    if flood {
        CLOSED_FOR_EMPTY_FRAMES.fetch_add(1, Ordering::Relaxed);
    }
    flood
}

/// Counts a Retry sent to a client not yet validated.
pub(super) fn retried() {
    RETRIES.fetch_add(1, Ordering::Relaxed);
}

/// Counts a connection refused at `max_connections`.
pub(super) fn refused_full() {
    REFUSED_FULL.fetch_add(1, Ordering::Relaxed);
}

/// The counters, for `/metrics`.
pub(super) fn render_metrics(out: &mut String) {
    let name = "hayate_http3_connections_closed_total";
    let help = "HTTP/3 connections closed by hayate for a flood: reset_flood (more than 128 streams cancelled by the client in a second), empty_frames (more than 100 frames without payload on a stream)";
    family(out, name, help, Kind::Counter);
    let n = CLOSED_FOR_RESETS.load(Ordering::Relaxed);
    sample(out, name, &[("reason", "reset_flood")], n);
    let n = CLOSED_FOR_EMPTY_FRAMES.load(Ordering::Relaxed);
    sample(out, name, &[("reason", "empty_frames")], n);
    let name = "hayate_http3_retries_total";
    let help = "QUIC Retry packets sent: new clients asked to prove their address while more than http3_retry_above handshakes were in progress on a worker";
    family(out, name, help, Kind::Counter);
    sample(out, name, &[], RETRIES.load(Ordering::Relaxed));
    let name = "hayate_http3_refused_total";
    let help = "HTTP/3 connections refused at max_connections";
    family(out, name, help, Kind::Counter);
    sample(out, name, &[], REFUSED_FULL.load(Ordering::Relaxed));
}
