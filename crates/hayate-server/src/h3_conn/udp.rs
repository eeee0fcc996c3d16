//! The UDP socket under a worker's QUIC endpoint, with the `http3_gso`
//! switch: quinn-udp sends a burst of datagrams to one client as a single
//! `sendmsg` with UDP segmentation offload (GSO) where the kernel has it;
//! some NICs, tunnels and virtual switches mishandle such batches, so with
//! `http3_gso = false` quinn is told the socket takes one datagram per
//! send (each burst then costs a system call per datagram).

use std::fmt;
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use hayate_core::metrics::{family, sample, Kind};
use quinn::udp::{RecvMeta, Transmit};
use quinn::{AsyncUdpSocket, Runtime, UdpPoller, UdpStats};

/// Datagrams sent by connections that have ended, and the system calls
/// that sent them: fewer calls than datagrams is GSO at work.
static DATAGRAMS_SENT: AtomicU64 = AtomicU64::new(0);
static SENDS: AtomicU64 = AtomicU64::new(0);

/// Counts what an ended connection sent.
pub(super) fn count_sent(tx: &UdpStats) {
    DATAGRAMS_SENT.fetch_add(tx.datagrams, Ordering::Relaxed);
    SENDS.fetch_add(tx.ios, Ordering::Relaxed);
}

/// The counters, for `/metrics`.
pub(super) fn render_metrics(out: &mut String) {
    let name = "hayate_http3_datagrams_sent_total";
    let help = "UDP datagrams sent by HTTP/3 connections (counted when they end)";
    family(out, name, help, Kind::Counter);
    sample(out, name, &[], DATAGRAMS_SENT.load(Ordering::Relaxed));
    let name = "hayate_http3_udp_sends_total";
    let help =
        "System calls that sent them: fewer than the datagrams when GSO batches them (http3_gso)";
    family(out, name, help, Kind::Counter);
    sample(out, name, &[], SENDS.load(Ordering::Relaxed));
}

/// `udp` as quinn's socket, batching sends with GSO when `gso` (and the
/// kernel can).
pub(super) fn socket(
    udp: std::net::UdpSocket,
    gso: bool,
    runtime: &dyn Runtime,
) -> io::Result<Arc<dyn AsyncUdpSocket>> {
    let socket = runtime.wrap_udp_socket(udp)?;
    Ok(match gso {
        true => socket,
        false => Arc::new(WithoutGso(socket)),
    })
}

/// A socket that says it sends one datagram per call, so that quinn never
/// hands it a segmented batch; everything else is the inner socket's.
struct WithoutGso(Arc<dyn AsyncUdpSocket>);

impl fmt::Debug for WithoutGso {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("WithoutGso").field(&self.0).finish()
    }
}

impl AsyncUdpSocket for WithoutGso {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        self.0.clone().create_io_poller()
    }

    fn try_send(&self, transmit: &Transmit<'_>) -> io::Result<()> {
        self.0.try_send(transmit)
    }

    fn poll_recv(
        &self,
        cx: &mut Context<'_>,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        self.0.poll_recv(cx, bufs, meta)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.0.local_addr()
    }

    fn max_transmit_segments(&self) -> usize {
        1
    }

    /// GRO (receiving) stays: it is the kernel's work on the way in and
    /// never reaches the wire.
    fn max_receive_segments(&self) -> usize {
        self.0.max_receive_segments()
    }

    fn may_fragment(&self) -> bool {
        self.0.may_fragment()
    }
}
