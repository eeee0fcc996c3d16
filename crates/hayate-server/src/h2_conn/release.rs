//! When an idle HTTP/2 connection gives h2's memory back: its buffers and
//! stream tables (vendor/h2's `release_idle_buffers` and
//! `release_idle_streams`; decision 0008).

use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite};

/// How often a busy connection may free h2's memory, and how long one
/// without streams waits before freeing it if it has just done so
/// ([`Release`]).
pub(super) const QUIET_AFTER: Duration = Duration::from_secs(1);

/// What an idle connection's timer says.
pub(super) enum Idle {
    /// No stream for [`QUIET_AFTER`]: its memory can go.
    Quiet,
    /// No stream for the keep-alive timeout: the connection closes.
    Expired,
}

/// When a connection gives h2's memory back (vendor/h2).
///
/// Its buffers (28 KiB) go to a per-thread pool whenever it runs out of
/// streams: what it gives back is what the next connection takes, and a
/// pool's push and pop cost nothing measurable. Its stream tables (about
/// 1 KiB per stream it ever had open at once) are freed at most once per
/// [`QUIET_AFTER`]: a busy connection runs out of streams between every
/// burst of them (about once per 8 requests under `h2load -c10 -m10`), and
/// freeing and growing them again each time cost 0.3 µs per request there.
/// A connection still without streams [`QUIET_AFTER`] on frees them then.
#[derive(Default)]
pub(super) struct Release {
    /// When the stream tables were last freed.
    streams_freed: Option<Instant>,
}

impl Release {
    /// The connection has no open stream and is about to wait.
    pub(super) fn now_idle<T: AsyncRead + AsyncWrite + Unpin>(
        &mut self,
        conn: &mut h2::server::Connection<T, Bytes>,
    ) {
        if !conn.release_idle_buffers() {
            return;
        }
        let now = Instant::now();
        if self.streams_freed.is_none_or(|t| now - t >= QUIET_AFTER) {
            conn.release_idle_streams();
            self.streams_freed = Some(now);
        }
    }

    /// The connection has had no stream for [`QUIET_AFTER`].
    pub(super) fn quiet<T: AsyncRead + AsyncWrite + Unpin>(
        &mut self,
        conn: &mut h2::server::Connection<T, Bytes>,
    ) {
        if conn.release_idle_buffers() && conn.release_idle_streams() {
            self.streams_freed = Some(Instant::now());
        }
    }
}
