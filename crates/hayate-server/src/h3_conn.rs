//! HTTP/3 (RFC 9114) on the UDP side of an https listener: quinn runs QUIC
//! (RFC 9000: packets, loss recovery, congestion and flow control, TLS 1.3
//! through rustls), `h3` the HTTP/3 framing and QPACK; this maps each
//! request stream to hayate's request model and back through the same
//! pipeline as HTTP/1.1 and HTTP/2 (`pipeline.rs`), as `h2_conn` does.
//!
//! Each worker has its own endpoint on its own SO_REUSEPORT socket
//! (`listen.rs`), so a connection lives on the worker the kernel hashed its
//! 4-tuple to. Connection migration is off: a client whose address changes
//! mid-connection (a NAT rebinding, Wi-Fi to mobile) may hash to another
//! worker, whose endpoint does not know the connection; it is answered
//! with a stateless reset there, or its packets dropped here, and the
//! client opens a new connection (decision 0018).
//!
//! Limits, mirroring HTTP/2's (decision 0008): 128 concurrent request
//! streams, a 64 KiB field section, 1 MiB stream / 2 MiB connection
//! receive windows, the keep-alive timeout as QUIC's idle timeout, the TLS
//! handshake timeout for the QUIC handshake, connections counted against
//! `max_connections` with TCP's, and a Retry (address validation, RFC 9000
//! §8.1.2) for every new client once a worker has more than
//! `http3_retry_above` handshakes in progress. 0-RTT is off unless
//! `http3_early_data = "safe"`: then a request whose head arrives before
//! the handshake is done came in early data, which an attacker may have
//! replayed (`early.rs`). Shutdown sends GOAWAY and lets the requests in
//! flight finish.

use std::cell::Cell;
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hayate_core::boxed::pinned;
use hayate_core::transport::Peer;
use quinn::{IdleTimeout, VarInt};
use tokio_rustls::rustls::pki_types::CertificateDer;

use hayate_config::values::EarlyData;
use hayate_tls::{Http3Tls, TlsMetrics};

use crate::worker::{ConnGuard, Generation, Shared, Worker};
use early::Handshake;

/// HTTP/3's counters, for `/metrics`.
pub fn render_metrics(out: &mut String) {
    floods::render_metrics(out);
    udp::render_metrics(out);
}

mod early;
mod floods;
mod request;
mod reset_key;
mod send;
mod tunnel;
mod udp;

/// Request streams a client may have open at once (HTTP/2's 128: RFC 9113
/// §6.5.2 advises at least 100; RFC 9114 §6.1 the same for HTTP/3).
const MAX_STREAMS: u32 = 128;
/// Unidirectional streams a client may open: HTTP/3 needs three (control,
/// QPACK encoder and decoder, RFC 9114 §6.2); the rest is room for the
/// reserved stream types a client may send as grease (§6.2.3).
const MAX_UNI_STREAMS: u32 = 8;
/// Largest field section accepted (HTTP/2's header list limit; h3 answers
/// a larger one with 431).
const MAX_FIELD_SECTION: u64 = 64 * 1024;
/// Receive windows of a stream and of a connection (HTTP/2's; quinn's
/// connection default is unlimited).
const STREAM_WINDOW: u32 = 1024 * 1024;
const CONNECTION_WINDOW: u32 = 2 * 1024 * 1024;
/// Response bytes a connection buffers before its streams wait for the
/// client's acknowledgements (quinn's default is 8 stream windows, 10 MiB).
const SEND_WINDOW: u64 = 2 * 1024 * 1024;

/// The QUIC endpoint of one worker on `udp`, serving HTTP/3 with `tls` and
/// the limits of the generation `g`.
pub fn endpoint(
    udp: std::net::UdpSocket,
    tls: Arc<Http3Tls>,
    g: &Generation,
) -> io::Result<quinn::Endpoint> {
    let server = server_config(&tls, g)?;
    let runtime = Arc::new(quinn::TokioRuntime);
    let socket = udp::socket(udp, g.config.global.http3_gso, runtime.as_ref())?;
    quinn::Endpoint::new_with_abstract_socket(
        reset_key::endpoint_config(),
        Some(server),
        socket,
        runtime,
    )
}

/// What an endpoint hands its new connections: `tls`, and the transport
/// limits of the generation `g`.
fn server_config(tls: &Http3Tls, g: &Generation) -> io::Result<quinn::ServerConfig> {
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(tls.config.clone())
        .map_err(|e| io::Error::other(format!("HTTP/3 TLS configuration: {e}")))?;
    let mut transport = quinn::TransportConfig::default();
    let idle = IdleTimeout::try_from(g.timeouts.keepalive)
        .map_err(|_| io::Error::other("keepalive_timeout is too long for QUIC's idle timeout"))?;
    transport
        .max_concurrent_bidi_streams(VarInt::from_u32(MAX_STREAMS))
        .max_concurrent_uni_streams(VarInt::from_u32(MAX_UNI_STREAMS))
        .stream_receive_window(VarInt::from_u32(STREAM_WINDOW))
        .receive_window(VarInt::from_u32(CONNECTION_WINDOW))
        .send_window(SEND_WINDOW)
        .max_idle_timeout(Some(idle));
    let mut server = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    server.transport_config(Arc::new(transport));
    server.migration(false);
    Ok(server)
}

/// Accepts QUIC connections on `endpoint` until shutdown, or until a reload
/// removes the listener configured as `key`; then takes no new ones and
/// waits for those open to close.
pub async fn serve_endpoint(
    endpoint: quinn::Endpoint,
    key: Arc<str>,
    worker: Rc<Worker>,
    shared: Shared,
) {
    let mut shutdown = worker.shutdown.clone();
    let handshaking = Rc::new(Cell::new(0usize));
    // Handshakes in progress past which new clients must first prove their
    // address with a Retry (`http3_retry_above`, 64 by default): below it
    // a handshake costs one round trip less; above it spoofed Initials
    // cost hayate no handshake state (each holds a QUIC connection and a
    // TLS handshake for up to the handshake timeout: 64 of them held 7 MB
    // of RSS, debug build, decision 0018).
    let retry_above = worker.with_generation(|g| g.config.global.http3_retry_above) as usize;
    let tls_metrics = shared.tls.as_ref().map(|t| t.metrics());
    let local_port = endpoint.local_addr().ok().map(|a| a.port());
    // The TLS settings new connections get: a reload may change them
    // (client certificates), and the endpoint then takes the new ones.
    let mut tls = shared.tls.as_ref().and_then(|t| t.http3());
    loop {
        let incoming = tokio::select! {
            i = endpoint.accept() => match i {
                Some(i) => i,
                None => break,
            },
            _ = shutdown.wait() => break,
            _ = worker.reloaded.notified() => {
                if worker.serves_listener(&key) {
                    tls = take_reloaded_tls(&endpoint, tls, &shared, &worker);
                    continue;
                }
                log::info!("listener {key} removed by a reload: no longer accepting HTTP/3 on it");
                break;
            }
        };
        if handshaking.get() >= retry_above && !incoming.remote_address_validated() {
            // The client answers with its Initial again, carrying the
            // token: only then does it cost a handshake.
            if incoming.retry().is_ok() {
                floods::retried();
            }
            continue;
        }
        let max = worker.generation().config.global.max_connections as usize;
        if shared.connections.opened() >= max {
            shared.connections.closed();
            let from = incoming.remote_address();
            log::warn!("HTTP/3 connection from {from} refused: max_connections ({max}) reached");
            floods::refused_full();
            incoming.refuse();
            continue;
        }
        let guard = ConnGuard::new(&worker, &shared.connections);
        Handshake::begin(&handshaking);
        let serving = serve_connection(
            incoming,
            local_port,
            handshaking.clone(),
            (tls.clone(), tls_metrics.clone()),
            worker.clone(),
            guard,
        );
        tokio::task::spawn_local(serving);
    }
    // New clients are refused from now on; the connections open finish
    // their requests (each sends GOAWAY on shutdown).
    endpoint.set_server_config(None);
    endpoint.wait_idle().await;
}

/// After a reload: the TLS settings now current, given to `endpoint` for
/// its next connections when they changed (the open ones keep theirs).
fn take_reloaded_tls(
    endpoint: &quinn::Endpoint,
    was: Option<Arc<Http3Tls>>,
    shared: &Shared,
    worker: &Worker,
) -> Option<Arc<Http3Tls>> {
    let now = shared.tls.as_ref().and_then(|t| t.http3());
    let (Some(was), Some(now)) = (was, now) else {
        return None;
    };
    if Arc::ptr_eq(&was, &now) {
        return Some(was);
    }
    match worker.with_generation(|g| server_config(&now, g)) {
        Ok(server) => {
            endpoint.set_server_config(Some(server));
            Some(now)
        }
        Err(e) => {
            log::error!("HTTP/3: the reloaded TLS settings are not used: {e}");
            Some(was)
        }
    }
}

/// What a request stream's task needs of its connection.
struct Connection {
    peer: Peer,
    worker: Rc<Worker>,
    quic: quinn::Connection,
    /// Whether the handshake is done: until then, what arrives is 0-RTT
    /// data (only with `http3_early_data = "safe"`; always true otherwise).
    established: Rc<Cell<bool>>,
    tls_metrics: Option<Arc<TlsMetrics>>,
    /// Streams the client cancelled lately (`floods.rs`).
    resets: floods::ResetBudget,
    /// Requests being served, and a wake-up when one ends: at shutdown the
    /// connection closes once they are done, not when the client closes
    /// it (its CONNECTION_CLOSE may never come: after an upgrade, the new
    /// hayate may read it off the shared socket).
    requests: Cell<usize>,
    request_ended: tokio::sync::Notify,
}

impl Connection {
    /// Notes a stream the client cancelled (RESET_STREAM, STOP_SENDING)
    /// before its response was done; past the budget, closes the
    /// connection.
    fn cancelled_by_client(&self) {
        if self.resets.over() {
            log::info!(
                "HTTP/3 from {}: more than {} streams cancelled in a second: connection closed (H3_EXCESSIVE_LOAD)",
                self.peer,
                floods::RESETS_PER_SECOND
            );
            let code = VarInt::from_u32(floods::H3_EXCESSIVE_LOAD);
            self.quic.close(code, b"too many streams reset");
        }
    }
}

/// A request stream being served, counted by its connection until it ends,
/// however it ends (answered, or its task dropped at shutdown).
struct InFlight(Rc<Connection>);

impl InFlight {
    fn new(conn: Rc<Connection>) -> InFlight {
        conn.requests.set(conn.requests.get() + 1);
        InFlight(conn)
    }
}

impl std::ops::Deref for InFlight {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        &self.0
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.requests.set(self.0.requests.get() - 1);
        self.0.request_ended.notify_one();
    }
}

/// Serves one QUIC connection: the handshake within the TLS handshake
/// timeout, then its request streams, each in a task of its own, until the
/// client closes it, it idles out, or shutdown (GOAWAY, then the requests
/// in flight finish). `guard` counts it until then.
async fn serve_connection(
    incoming: quinn::Incoming,
    local_port: Option<u16>,
    handshaking: Rc<Cell<usize>>,
    (tls, tls_metrics): (Option<Arc<Http3Tls>>, Option<Arc<TlsMetrics>>),
    worker: Rc<Worker>,
    guard: ConnGuard,
) {
    let from = incoming.remote_address();
    let (timeout, mut early_data) = worker.with_generation(|g| {
        let global = &g.config.global;
        (global.tls_handshake_timeout.0, global.http3_early_data)
    });
    // Early data would come before the client's certificate is seen: a
    // configuration that verifies clients takes none (`http3.rs`).
    if tls.as_ref().is_some_and(|t| t.verifies_clients()) {
        early_data = EarlyData::Off;
    }
    let handshake = Handshake {
        from,
        timeout,
        handshaking,
        metrics: tls_metrics.clone(),
        shutdown: worker.shutdown.clone(),
    };
    // Boxed, as the h3 setup below: their futures are large, and a
    // connection's task holds its largest state for the connection's life
    // (an idle connection held 8.8 KB of task when they were inline).
    let (quic, established) = match early_data {
        EarlyData::Off => match pinned(|| handshake.complete(incoming)).await {
            Some(quic) => (quic, Rc::new(Cell::new(true))),
            None => return,
        },
        EarlyData::Safe => match handshake.early(incoming) {
            Some(accepted) => accepted,
            None => return,
        },
    };
    let mut builder = h3::server::builder();
    // No grease: h3 ends the first response with a frame of a reserved
    // type (RFC 9114 §7.2.8), and aioquic 1.2 then never reports that
    // stream's end (its last event is the DATA before it): the request
    // hangs until the client times out.
    // Extended CONNECT (SETTINGS_ENABLE_CONNECT_PROTOCOL) for WebSocket
    // over HTTP/3 (RFC 9220, `h3_conn/tunnel.rs`).
    builder
        .max_field_section_size(MAX_FIELD_SECTION)
        .send_grease(false)
        .enable_extended_connect(true);
    let built = builder.build::<_, Bytes>(h3_quinn::Connection::new(quic.clone()));
    let mut h3 = match pinned(|| tokio::time::timeout(timeout, built)).await {
        Ok(Ok(h3)) => h3,
        Ok(Err(e)) => {
            log::debug!("HTTP/3 from {from}: {e}");
            return;
        }
        Err(_) => {
            log::debug!("HTTP/3 from {from}: no control stream in {timeout:?}");
            return;
        }
    };
    let mut peer = peer_of(from, local_port);
    peer.client_cert = tls.as_ref().and_then(|t| {
        let identity = quic.peer_identity()?;
        let chain = identity.downcast_ref::<Vec<CertificateDer<'static>>>()?;
        t.client_cert(chain)
    });
    let connection = Rc::new(Connection {
        peer,
        worker: worker.clone(),
        quic: quic.clone(),
        established,
        tls_metrics,
        resets: floods::ResetBudget::default(),
        requests: Cell::new(0),
        request_ended: tokio::sync::Notify::new(),
    });
    let mut shutdown = worker.shutdown.clone();
    let mut closing = false;
    loop {
        let next = tokio::select! {
            // A poll function, not `accept()`'s 880-byte future: this
            // wait is the task's state for the connection's idle life.
            accepted = std::future::poll_fn(|cx| h3.poll_accept(cx)) => Some(accepted),
            _ = shutdown.wait(), if !closing => None,
            _ = connection.request_ended.notified(), if closing => {
                match connection.requests.get() {
                    0 => break,
                    _ => continue,
                }
            }
        };
        match next {
            Some(Ok(Some(resolver))) => {
                // Built in its box: spawning the future (4.6 KB) itself
                // copied all of it into the task, and the wrapper that
                // counted it once more; with the box and a drop guard, a
                // static request took 9.1 µs of CPU instead of 10.7
                // (h3load, 10 connections of 10 streams).
                let counted = InFlight::new(connection.clone());
                tokio::task::spawn_local(pinned(|| request::serve(resolver, counted)));
            }
            // GOAWAY received, and every request answered: the last
            // GOAWAY out (`accept` would send it), then the end.
            Some(Ok(None)) => {
                if let Err(e) = pinned(|| h3.shutdown(0)).await {
                    log::debug!("HTTP/3 from {from}: GOAWAY not sent: {e}");
                }
                break;
            }
            Some(Err(e)) => {
                if floods::closed_for_empty_frames(&e) {
                    log::info!("HTTP/3 from {from}: {e}: connection closed");
                } else if !e.is_h3_no_error() {
                    log::debug!("HTTP/3 from {from}: {e}");
                }
                break;
            }
            None => {
                closing = true;
                // GOAWAY naming the last request accepted: the client
                // retries later ones on a new connection (RFC 9114 §5.2).
                if let Err(e) = pinned(|| h3.shutdown(0)).await {
                    log::debug!("HTTP/3 from {from}: GOAWAY not sent: {e}");
                    break;
                }
                if connection.requests.get() == 0 {
                    break;
                }
            }
        }
    }
    // Closing at once would drop response bytes the client has not
    // acknowledged yet (a QUIC close abandons streams): the client closes
    // once it has them, or the GOAWAY timeout ends the wait.
    let linger = worker.with_generation(|g| g.timeouts.goaway);
    let _ = pinned(|| tokio::time::timeout(linger, quic.closed())).await;
    quic.close(VarInt::from_u32(H3_NO_ERROR), b"");
    udp::count_sent(&quic.stats().udp_tx);
    drop(guard);
}

/// The application error code of a connection closed cleanly (RFC 9114
/// §8.1).
const H3_NO_ERROR: u32 = 0x100;

/// The peer of a connection from `addr`, as TCP's are named.
fn peer_of(addr: SocketAddr, local_port: Option<u16>) -> Peer {
    let ip = addr.ip().to_canonical();
    Peer {
        addr: ip.to_string(),
        ip: Some(ip),
        port: Some(addr.port()),
        local_port,
        // Set once the handshake verified one (`serve_connection`).
        client_cert: None,
    }
}

/// How long a request stream may take to send its head once opened (the
/// header timeout of the generation it started in).
fn header_timeout(worker: &Worker) -> Duration {
    worker.with_generation(|g| g.timeouts.header)
}
