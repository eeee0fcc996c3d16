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
    /// Idle and cut short: the worker is at its descriptor budget (or
    /// shutting down) and a client waiting to connect needs the room.
    Cut,
    /// Closing, no stream, and the GOAWAY's PING unanswered for
    /// `http2_goaway_timeout`: the connection is dropped.
    Unanswered,
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

/// What [`Release`] asks of a connection (h2's server connection; a fake
/// in the tests). Each returns whether the connection had no open stream.
pub(super) trait IdleMemory {
    fn release_idle_buffers(&mut self) -> bool;
    fn release_idle_streams(&mut self) -> bool;
}

impl<T: AsyncRead + AsyncWrite + Unpin> IdleMemory for h2::server::Connection<T, Bytes> {
    fn release_idle_buffers(&mut self) -> bool {
        h2::server::Connection::release_idle_buffers(self)
    }
    fn release_idle_streams(&mut self) -> bool {
        h2::server::Connection::release_idle_streams(self)
    }
}

impl Release {
    /// The connection has no open stream and is about to wait.
    pub(super) fn now_idle(&mut self, conn: &mut impl IdleMemory, now: Instant) {
        if !conn.release_idle_buffers() {
            return;
        }
        if self.streams_freed.is_none_or(|t| now - t >= QUIET_AFTER) {
            conn.release_idle_streams();
            self.streams_freed = Some(now);
        }
    }

    /// The connection has had no stream for [`QUIET_AFTER`].
    pub(super) fn quiet(&mut self, conn: &mut impl IdleMemory, now: Instant) {
        if conn.release_idle_buffers() && conn.release_idle_streams() {
            self.streams_freed = Some(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts what was released; `streams` says whether it has open streams.
    #[derive(Default)]
    struct Fake {
        streams: bool,
        buffers_released: u32,
        tables_released: u32,
    }

    impl IdleMemory for Fake {
        fn release_idle_buffers(&mut self) -> bool {
            if !self.streams {
                self.buffers_released += 1;
            }
            !self.streams
        }
        fn release_idle_streams(&mut self) -> bool {
            if !self.streams {
                self.tables_released += 1;
            }
            !self.streams
        }
    }

    #[test]
    fn buffers_go_every_time_tables_at_most_once_per_quiet_period() {
        let (mut r, mut c) = (Release::default(), Fake::default());
        let t0 = Instant::now();
        r.now_idle(&mut c, t0);
        r.now_idle(&mut c, t0 + Duration::from_millis(10));
        r.now_idle(&mut c, t0 + QUIET_AFTER / 2);
        assert_eq!((c.buffers_released, c.tables_released), (3, 1));
        r.now_idle(&mut c, t0 + QUIET_AFTER);
        assert_eq!((c.buffers_released, c.tables_released), (4, 2));
    }

    #[test]
    fn a_quiet_connection_frees_its_tables_even_just_after_a_release() {
        let (mut r, mut c) = (Release::default(), Fake::default());
        let t0 = Instant::now();
        r.now_idle(&mut c, t0);
        r.now_idle(&mut c, t0 + Duration::from_millis(10));
        r.quiet(&mut c, t0 + Duration::from_millis(20));
        assert_eq!(c.tables_released, 2);
        // And that counts as the latest release.
        r.now_idle(&mut c, t0 + Duration::from_millis(30));
        assert_eq!(c.tables_released, 2);
    }

    #[test]
    fn nothing_is_released_while_a_stream_is_open() {
        let mut r = Release::default();
        let mut c = Fake {
            streams: true,
            ..Fake::default()
        };
        let t0 = Instant::now();
        r.now_idle(&mut c, t0);
        r.quiet(&mut c, t0);
        assert_eq!((c.buffers_released, c.tables_released), (0, 0));
        // The first release after the stream closed frees the tables too.
        c.streams = false;
        r.now_idle(&mut c, t0 + Duration::from_millis(1));
        assert_eq!((c.buffers_released, c.tables_released), (1, 1));
    }
}
