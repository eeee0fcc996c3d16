//! The QUIC handshake of a connection, and 0-RTT's safe mode
//! (`http3_early_data = "safe"`, RFC 8470).
//!
//! Early data can be replayed: whoever captured a client's first flight
//! can send it again, and its requests arrive again. So with 0-RTT on, a
//! request whose head arrives before the handshake is done is served only
//! if its method is safe (GET, HEAD, OPTIONS: RFC 9110 §9.2.1), marked
//! `Early-Data: 1` for the upstream (which may answer 425 itself), and any
//! other is answered 425 Too Early: the client sends it again once the
//! handshake is done (RFC 8470 §5.2). "Done" is the server's view: rustls
//! has the client's Finished, which a replay can never send (it has no
//! keys), so every request of a replayed flight counts as early.

use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use hayate_core::request::RequestHead;
use hayate_core::response::Response;
use hayate_core::shutdown::ShutdownWatch;
use hayate_core::Status;
use hayate_tls::{Failure, TlsMetrics};

use super::Connection;

/// One connection's handshake: counted in progress on its worker (for the
/// Retry threshold: from the accept loop's [`Handshake::begin`], before its
/// task first runs, so that a burst of Initials taken in one go is
/// counted whole) and in the TLS metrics, bounded by the handshake timeout,
/// and abandoned at shutdown (a flood of half-open handshakes would
/// otherwise hold the drain for the handshake timeout).
pub(super) struct Handshake {
    pub from: SocketAddr,
    pub timeout: Duration,
    pub handshaking: Rc<Cell<usize>>,
    pub metrics: Option<Arc<TlsMetrics>>,
    pub shutdown: ShutdownWatch,
}

impl Handshake {
    /// Counts a handshake in progress on `handshaking`, until the
    /// [`Handshake`] made with it ends.
    pub fn begin(handshaking: &Cell<usize>) {
        handshaking.set(handshaking.get() + 1);
    }

    fn end(&self) {
        self.handshaking.set(self.handshaking.get() - 1);
    }

    /// Completes the handshake before any request is read (0-RTT off).
    pub async fn complete(self, incoming: quinn::Incoming) -> Option<quinn::Connection> {
        let connecting = tokio::time::timeout(self.timeout, async { incoming.accept()?.await });
        let mut shutdown = self.shutdown.clone();
        let connected = tokio::select! {
            connected = connecting => connected,
            // Dropping the handshake closes its connection.
            _ = shutdown.wait() => Ok(Err(quinn::ConnectionError::LocallyClosed)),
        };
        self.end();
        match connected {
            Ok(Ok(quic)) => {
                self.counted(None);
                Some(quic)
            }
            Ok(Err(e)) => {
                self.counted(Some(&e));
                None
            }
            Err(_) => {
                self.timed_out();
                None
            }
        }
    }

    /// Takes the connection at once, so that requests sent in 0-RTT data
    /// are read; the handshake completes (or fails, or times out and the
    /// connection is closed) in a task of its own. With whether it is done
    /// yet, for [`admit`] (`false` until then).
    pub fn early(self, incoming: quinn::Incoming) -> Option<(quinn::Connection, Rc<Cell<bool>>)> {
        let connecting = match incoming.accept() {
            Ok(c) => c,
            Err(e) => {
                self.end();
                self.counted(Some(&e));
                return None;
            }
        };
        // quinn: "for incoming connections, conversion to 0.5-RTT will
        // always fully succeed".
        let Ok((quic, done)) = connecting.into_0rtt() else {
            self.end();
            return None;
        };
        let watched = quic.clone();
        tokio::task::spawn_local(async move {
            let mut shutdown = self.shutdown.clone();
            let done = tokio::select! {
                done = tokio::time::timeout(self.timeout, done) => done,
                _ = shutdown.wait() => {
                    watched.close(quinn::VarInt::from_u32(0), b"shutting down");
                    Ok(false)
                }
            };
            self.end();
            match done {
                // The server's value is true once the handshake completed,
                // false when the connection failed first.
                Ok(true) => self.counted(None),
                Ok(false) => self.counted(watched.close_reason().as_ref()),
                Err(_) => {
                    self.timed_out();
                    watched.close(quinn::VarInt::from_u32(0), b"handshake timeout");
                }
            }
        });
        Some((quic, Rc::new(Cell::new(false))))
    }

    fn counted(&self, error: Option<&quinn::ConnectionError>) {
        let Some(e) = error else {
            if let Some(m) = &self.metrics {
                m.quic_completed();
            }
            return;
        };
        let why = match e {
            quinn::ConnectionError::TransportError(_) => Failure::Protocol,
            quinn::ConnectionError::TimedOut => Failure::Timeout,
            _ => Failure::Closed,
        };
        log::debug!("HTTP/3 from {}: handshake failed: {e}", self.from);
        if let Some(m) = &self.metrics {
            m.quic_failed(why);
        }
    }

    fn timed_out(&self) {
        log::debug!(
            "HTTP/3 from {}: handshake not done in {:?}",
            self.from,
            self.timeout
        );
        if let Some(m) = &self.metrics {
            m.quic_failed(Failure::Timeout);
        }
    }
}

/// Whether `quic`'s handshake is done, remembered in `done` once it is.
/// rustls exports keying material only from its traffic state, after the
/// client's Finished (RFC 8446 §7.5 lets it earlier; rustls does not):
/// a synchronous answer, where the handshake task's flag may not have been
/// set yet when a 1-RTT request is read.
fn handshake_done(quic: &quinn::Connection, done: &Cell<bool>) -> bool {
    if !done.get() {
        let mut probe = [0u8; 1];
        let exported = quic.export_keying_material(&mut probe, b"hayate handshake done", b"");
        done.set(exported.is_ok());
    }
    done.get()
}

/// What to do with a request whose head `head` has just arrived on
/// `conn`: `None` to serve it (marked `Early-Data: 1` if it came in early
/// data), or the 425 to answer.
pub(super) fn admit(head: &mut RequestHead, conn: &Connection) -> Option<Response> {
    if handshake_done(&conn.quic, &conn.established) {
        return None;
    }
    let safe = matches!(head.method(), b"GET" | b"HEAD" | b"OPTIONS");
    if let Some(m) = &conn.tls_metrics {
        m.early_request(safe);
    }
    if safe {
        head.push_field(b"early-data", b"1");
        return None;
    }
    log::debug!(
        "HTTP/3 from {}: {} sent in 0-RTT data: 425",
        conn.peer,
        String::from_utf8_lossy(head.method())
    );
    Some(Response::error(Status::TOO_EARLY))
}
