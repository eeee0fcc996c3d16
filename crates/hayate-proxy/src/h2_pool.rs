//! Each member's HTTP/2 connections (per worker), multiplexed: a request
//! takes a stream on the least busy connection that has room under the
//! member's SETTINGS_MAX_CONCURRENT_STREAMS, and a new connection is opened
//! only when every one is full (and while fewer than `max_conns` are open;
//! past that, h2 queues the stream until one ends). Unlike the HTTP/1 pool
//! (`pool.rs`) nothing is checked out: a connection stays in the pool while
//! its streams run, counted by [`StreamSlot`]s (decision 0019).
//!
//! A connection leaves the pool when its task ends (the upstream closed it,
//! or its PING went unanswered), when it refuses a new stream (after a
//! GOAWAY: its open streams finish, new ones go elsewhere), when it sat
//! without a stream for the group's idle time, or when its member is
//! ejected.

use std::cell::{Cell, RefCell};
use std::io;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use h2::client::{Connection, SendRequest};
use hayate_core::transport::Transport;
use tokio::sync::Notify;
use tokio_rustls::rustls::ClientConfig;

use crate::group::{Member, Protocol, UpstreamGroup};

/// Streams a connection being opened is counted on for the requests that
/// wait for it: RFC 9113 §6.5.2 advises servers to allow at least 100
/// (Node's http2 and grpc-go allow 100 or more, grpc-js unlimited), and
/// h2 assumes 100 until the server's SETTINGS say otherwise. So a burst of
/// 1,000 requests opens 10 connections, not 1,000.
const STREAMS_PER_OPENING: usize = 100;

/// How often a connection's liveness is checked with a PING, and how long
/// its answer may take: a member that vanished without a FIN or RST
/// (a host down, a dropped NAT entry) is found within 30 s, not when TCP
/// gives up minutes later. An answer takes one round trip; 20 s covers a
/// loaded upstream's event loop.
const PING_EVERY: Duration = Duration::from_secs(10);
const PING_ANSWER_WITHIN: Duration = Duration::from_secs(20);

/// Flow-control windows offered to upstreams: as the client side's
/// (`h2_conn.rs`), 1 MiB per stream, 2 MiB per connection; a 64 KiB window
/// (HTTP/2's default) caps a stream at 64 KiB per round trip, too little
/// for gRPC's 4 MiB messages.
const STREAM_WINDOW: u32 = 1024 * 1024;
const CONNECTION_WINDOW: u32 = 2 * 1024 * 1024;

/// Largest response header list accepted from an upstream (as from
/// clients, `h2_conn.rs`: 64 KiB).
const MAX_HEADER_LIST: u32 = 64 * 1024;

/// A member's HTTP/2 connections.
#[derive(Debug, Default)]
pub(crate) struct H2Pool {
    conns: RefCell<Vec<H2Conn>>,
    /// Connections being opened (their connect and handshake under way).
    opening: Cell<usize>,
    /// Requests waiting for those connections.
    waiting: Cell<usize>,
    /// Woken when an opening ends, in success or failure.
    opened: Notify,
}

/// One connection: a handle to open streams on it, and its state.
#[derive(Debug, Clone)]
pub(crate) struct H2Conn {
    send: SendRequest<Bytes>,
    state: Rc<ConnState>,
}

#[derive(Debug)]
struct ConnState {
    /// Streams open on it.
    streams: Cell<usize>,
    /// When its last stream ended.
    idle_since: Cell<Instant>,
    /// Its task ended or it refused a stream: no new streams.
    closed: Cell<bool>,
    /// The app instance it leads to (supervised members), 0 otherwise.
    instance: u64,
}

/// What a request gets from the pool.
pub(crate) enum Lease {
    /// A connection to open its stream on.
    Conn(H2Conn),
    /// Wait for a connection being opened ([`H2Pool::wait_for_opening`]).
    Wait,
    /// Open a new connection ([`H2Pool::open`]).
    Open,
}

impl H2Pool {
    /// The connection for a new stream to `instance`: the least busy with
    /// room; else a connection being opened; else a new one, or, with
    /// `max_conns` (non-zero) open already, the least busy (h2 holds the
    /// stream until one of its streams ends).
    pub(crate) fn lease(&self, instance: u64, max_conns: u32) -> Lease {
        let mut conns = self.conns.borrow_mut();
        // A replaced app instance is draining: its connections go.
        conns.retain(|c| !c.state.closed.get() && c.state.instance == instance);
        let least = conns.iter().min_by_key(|c| c.state.streams.get());
        if let Some(c) = least.filter(|c| c.has_room()) {
            return Lease::Conn(c.clone());
        }
        if self.waiting.get() < self.opening.get() * STREAMS_PER_OPENING {
            return Lease::Wait;
        }
        let at_limit = max_conns != 0 && conns.len() + self.opening.get() >= max_conns as usize;
        match (at_limit, least) {
            (false, _) => Lease::Open,
            (true, Some(c)) => Lease::Conn(c.clone()),
            (true, None) => Lease::Wait,
        }
    }

    /// Waits until a connection being opened is ready or failed.
    pub(crate) async fn wait_for_opening(&self) {
        // Registered before the count: notify_waiters wakes it.
        let opened = self.opened.notified();
        self.waiting.set(self.waiting.get() + 1);
        let _counted = Counted(&self.waiting);
        opened.await;
    }

    /// Opens a connection to `member`'s `target` and adds it to the pool;
    /// waiting requests are woken when it is ready or failed.
    pub(crate) async fn open(
        &self,
        member: &Member,
        target: &crate::UpstreamAddr,
        instance: u64,
        connect_timeout: Duration,
        tls: Option<&Arc<ClientConfig>>,
    ) -> io::Result<H2Conn> {
        self.opening.set(self.opening.get() + 1);
        let _opening = Opening(self);
        let transport = crate::upconn::connect(target, connect_timeout, None, tls, None).await?;
        self.add(transport, member, instance, connect_timeout).await
    }

    /// Makes `transport`, a member's connection whose TLS chose `h2` (the
    /// one `proxy_http2 = auto` learned on), one of the pool's.
    pub(crate) async fn adopt(
        &self,
        transport: Transport,
        member: &Member,
        instance: u64,
        limit: Duration,
    ) -> io::Result<H2Conn> {
        self.opening.set(self.opening.get() + 1);
        let _opening = Opening(self);
        self.add(transport, member, instance, limit).await
    }

    /// The HTTP/2 handshake on `transport`, then the connection is driven
    /// and pooled.
    async fn add(
        &self,
        transport: Transport,
        member: &Member,
        instance: u64,
        limit: Duration,
    ) -> io::Result<H2Conn> {
        let (send, connection) = handshake(transport, &member.label, limit).await?;
        let state = Rc::new(ConnState {
            streams: Cell::new(0),
            idle_since: Cell::new(hayate_core::loop_time::instant()),
            closed: Cell::new(false),
            instance,
        });
        tokio::task::spawn_local(drive(connection, state.clone(), member.label.clone()));
        let conn = H2Conn { send, state };
        self.conns.borrow_mut().push(conn.clone());
        Ok(conn)
    }

    /// Lets go of the connections without a stream for `idle` or more, and
    /// the closed ones (their task ends once their last stream does).
    pub(crate) fn sweep(&self, now: Instant, idle: Duration) {
        self.conns.borrow_mut().retain(|c| {
            let s = &c.state;
            !s.closed.get()
                && (s.streams.get() > 0 || now.saturating_duration_since(s.idle_since.get()) < idle)
        });
    }

    /// Lets go of every connection (the member was ejected); their open
    /// streams finish.
    pub(crate) fn clear(&self) {
        self.conns.borrow_mut().clear();
    }

    /// Connections in the pool.
    pub(crate) fn len(&self) -> usize {
        self.conns.borrow().len()
    }
}

impl H2Conn {
    /// Whether a new stream fits under the server's concurrency limit.
    fn has_room(&self) -> bool {
        self.state.streams.get() < self.send.current_max_send_streams()
    }

    /// A handle to open one stream, counted on the connection from now
    /// until the returned slot is dropped.
    pub(crate) fn stream(&self) -> (SendRequest<Bytes>, StreamSlot) {
        let s = &self.state;
        s.streams.set(s.streams.get() + 1);
        (self.send.clone(), StreamSlot(self.state.clone()))
    }

    /// The connection refused a new stream (GOAWAY received, or it
    /// failed): no more streams go on it.
    pub(crate) fn close(&self) {
        self.state.closed.set(true);
    }
}

/// A stream counted on its connection until dropped (when the response's
/// body ends, or the request fails).
#[derive(Debug)]
pub(crate) struct StreamSlot(Rc<ConnState>);

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let s = &self.0;
        s.streams.set(s.streams.get().saturating_sub(1));
        if s.streams.get() == 0 {
            s.idle_since.set(hayate_core::loop_time::instant());
        }
    }
}

/// Decrements a count when dropped (a waiter that was cancelled too).
struct Counted<'a>(&'a Cell<usize>);

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.set(self.0.get().saturating_sub(1));
    }
}

/// An opening under way; when it ends (or the request opening it is
/// dropped), the requests waiting for it look again.
struct Opening<'a>(&'a H2Pool);

impl Drop for Opening<'_> {
    fn drop(&mut self) {
        self.0.opening.set(self.0.opening.get().saturating_sub(1));
        self.0.opened.notify_waiters();
    }
}

/// Runs a connection until it ends: the upstream closed it, it failed, the
/// pool and every stream let go of it, or a PING went unanswered.
async fn drive(mut connection: Connection<Transport, Bytes>, state: Rc<ConnState>, label: String) {
    let pings = connection.ping_pong();
    let keepalive = async move {
        let Some(mut pings) = pings else {
            return std::future::pending().await;
        };
        loop {
            tokio::time::sleep(PING_EVERY).await;
            let ping = pings.ping(h2::Ping::opaque());
            match tokio::time::timeout(PING_ANSWER_WITHIN, ping).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return e.to_string(),
                Err(_) => return format!("no PING answer within {PING_ANSWER_WITHIN:?}"),
            }
        }
    };
    tokio::select! {
        ended = &mut connection => {
            if let Err(e) = ended {
                log::debug!("upstream {label}: HTTP/2 connection ended: {e}");
            }
        }
        why = keepalive => {
            log::warn!("upstream {label}: HTTP/2 connection dropped: {why}");
        }
    }
    state.closed.set(true);
}

/// An h2 error as an I/O error (the proxy's failures carry those).
pub(crate) fn h2_io(e: h2::Error) -> io::Error {
    if e.is_io() {
        if let Some(io) = e.into_io() {
            return io;
        }
        return io::Error::other("HTTP/2 I/O error");
    }
    io::Error::new(io::ErrorKind::ConnectionAborted, e)
}

/// The HTTP/2 handshake on a member's new connection (the pool's, or a
/// health probe's), within `limit`; a TLS member must have chosen `h2`.
pub(crate) async fn handshake(
    transport: Transport,
    label: &str,
    limit: Duration,
) -> io::Result<(SendRequest<Bytes>, Connection<Transport, Bytes>)> {
    if matches!(transport, Transport::Tls(_)) && transport.alpn() != Some(b"h2") {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{label}: TLS without ALPN h2 (proxy_http2 = on needs an HTTP/2 member)"),
        ));
    }
    let handshake = h2::client::Builder::new()
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_header_list_size(MAX_HEADER_LIST)
        .enable_push(false)
        .handshake::<_, Bytes>(transport);
    tokio::time::timeout(limit, handshake)
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "HTTP/2 handshake timed out"))?
        .map_err(h2_io)
}

impl UpstreamGroup {
    /// The group with members that speak HTTP/2 (`h2c://` members, or
    /// `https://` ones under `proxy_http2 = on`): requests share
    /// connections, so `max_conns` bounds each member's connections on
    /// this worker rather than its requests (h2 queues a stream past the
    /// server's limit), and `https://` members are offered ALPN `h2` only.
    pub fn speaking_http2(mut self) -> UpstreamGroup {
        let s = &mut self.settings;
        s.h2_max_conns = std::mem::take(&mut s.max_conns);
        if let Some(tls) = &s.tls {
            let mut config = ClientConfig::clone(tls);
            config.alpn_protocols = vec![b"h2".to_vec()];
            s.tls = Some(Arc::new(config));
        }
        self.protocol = Protocol::Http2;
        self
    }

    /// Connections in the members' HTTP/2 pools (for tests and figures).
    pub fn http2_connections(&self) -> usize {
        self.members.iter().map(|m| m.h2.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group::tests::group;

    /// An h2c server allowing `max_streams` streams per connection, that
    /// never answers (streams stay open); its address.
    async fn server(max_streams: u32) -> crate::UpstreamAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::task::spawn_local(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                tokio::task::spawn_local(async move {
                    let mut conn = h2::server::Builder::new()
                        .max_concurrent_streams(max_streams)
                        .handshake::<_, Bytes>(tcp)
                        .await
                        .expect("handshake");
                    let mut held = Vec::new();
                    while let Some(Ok(stream)) = conn.accept().await {
                        held.push(stream);
                    }
                });
            }
        });
        crate::UpstreamAddr::parse(&format!("h2c://{addr}")).expect("addr")
    }

    #[test]
    fn an_http2_group_bounds_connections_not_requests_and_is_probed_over_http2() {
        let addrs = [crate::UpstreamAddr::parse("h2c://127.0.0.1:1").expect("addr")];
        let settings = crate::ProxySettings {
            max_conns: 4,
            health_check: Some("/healthz".into()),
            ..Default::default()
        };
        let g = UpstreamGroup::new(&addrs, settings).speaking_http2();
        assert_eq!((g.settings.max_conns, g.settings.h2_max_conns), (0, 4));
        assert_eq!(g.settings.health_check.as_deref(), Some("/healthz"));
        assert_eq!(g.protocol, Protocol::Http2);
    }

    #[test]
    fn streams_share_a_connection_until_it_is_full_then_a_new_one_opens() {
        let local = tokio::task::LocalSet::new();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        local.block_on(&rt, async {
            let target = server(2).await;
            let g = group(1);
            let m = &g.members[0];
            let pool = &m.h2;
            let timeout = Duration::from_secs(5);
            assert!(matches!(pool.lease(0, 0), Lease::Open), "empty: open one");
            let first = pool.open(m, &target, 0, timeout, None).await.expect("open");
            // The server's SETTINGS (2 streams) arrive with its first frames.
            let (send, _slot) = first.stream();
            let mut send = send.ready().await.expect("ready");
            let request = || http::Request::get("http://x/").body(()).expect("request");
            let (_answer, _stream) = send.send_request(request(), true).expect("stream");
            for _ in 0..50 {
                if first.send.current_max_send_streams() == 2 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            assert_eq!(first.send.current_max_send_streams(), 2);
            let Lease::Conn(again) = pool.lease(0, 0) else {
                panic!("one stream of 2: the same connection")
            };
            let _second_slot = again.stream();
            assert!(
                matches!(pool.lease(0, 0), Lease::Open),
                "full: open another"
            );
            assert!(
                matches!(pool.lease(0, 1), Lease::Conn(_)),
                "at max_conns: the least busy, where h2 queues the stream"
            );
            // A connection being opened takes the requests that come meanwhile.
            pool.opening.set(1);
            assert!(matches!(pool.lease(0, 0), Lease::Wait));
            pool.opening.set(0);
            // One that refused a stream (GOAWAY) takes no more.
            first.close();
            assert!(matches!(pool.lease(0, 0), Lease::Open));
            assert_eq!(pool.len(), 0);
            // A replaced app instance's connections go (as HTTP/1's do).
            let _old = pool.open(m, &target, 7, timeout, None).await.expect("open");
            assert!(matches!(pool.lease(0, 0), Lease::Open));
            assert_eq!(pool.len(), 0);
        });
    }
}
