//! Binding listeners. TCP addresses get one SO_REUSEPORT socket per worker,
//! so the kernel spreads connections over workers with no shared accept
//! queue; a probe bind without SO_REUSEPORT first makes "address in use"
//! (another hayate included) an error instead of a silent share. Unix
//! sockets are bound once and shared by the workers. Each worker registers
//! its sockets as [`Listener`](hayate_core::transport::Listener)s.
//!
//! With `http3`, each https TCP listener gets a UDP socket per worker on
//! the same address and port, also with SO_REUSEPORT (the QUIC endpoints of
//! `h3_conn`): the kernel hashes a client's 4-tuple to one worker, which
//! then sees every datagram of that connection (decision 0018). An upgrade
//! hands them over like the TCP ones: the new hayate serves on the same
//! sockets, so the port never has more sockets than workers.

use std::io;
use std::net::SocketAddr;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hayate_config::values::{Listen, ListenAddr};
use hayate_core::transport::Scheme;
use socket2::{Domain, Protocol, Socket, Type};

use crate::handoff::{listen_key, HandoffSet, Inherited};

/// Pending connections per listener. nginx's default of 511 shows up as
/// queueing (p99 2.54 s vs 1.61 s at 4096 in the waiting-handler case of
/// SEEDS.md); the kernel caps it at net.core.somaxconn.
const BACKLOG: i32 = 4096;

/// A bound, listening, non-blocking socket (TCP or Unix), to be
/// registered with a worker's runtime, and the scheme its clients speak.
#[derive(Debug)]
pub struct BoundListener {
    /// The listener as configured (`handoff::listen_key`): a reload that
    /// removes it stops its accept loops.
    pub key: Arc<str>,
    /// The socket.
    pub socket: Socket,
    /// What its clients speak.
    pub scheme: Scheme,
    /// Its connections start with a PROXY protocol header.
    pub proxy_protocol: bool,
    /// It speaks HTTP/2 only (`h2c`).
    pub http2_only: bool,
    /// This worker's UDP socket on the same address, for HTTP/3 (https
    /// TCP listeners with `http3` on).
    pub quic: Option<std::net::UdpSocket>,
}

/// The sockets for every worker and what they are bound to.
#[derive(Debug)]
pub struct Listeners {
    /// `per_worker[i]` is worker i's listeners.
    pub per_worker: Vec<Vec<BoundListener>>,
    /// The bound addresses (ports resolved), in config order.
    pub addresses: Vec<Listen>,
    /// Unix socket files to remove on exit.
    pub unix_paths: Vec<PathBuf>,
}

/// Binds every address for `workers` workers, taking the sockets a
/// replaced hayate handed over where there are some (`handoff.rs`), and
/// keeps a duplicate of each in `handoff` for a later upgrade.
pub fn bind_all(
    addrs: &[Listen],
    workers: usize,
    http3: bool,
    inherited: &mut Inherited,
    handoff: &mut HandoffSet,
) -> io::Result<Listeners> {
    let mut per_worker: Vec<Vec<BoundListener>> = (0..workers).map(|_| Vec::new()).collect();
    let mut addresses = Vec::new();
    let mut unix_paths = Vec::new();
    for listen in addrs {
        let Listen {
            addr,
            scheme,
            proxy_protocol,
            http2_only,
        } = listen;
        let (scheme, proxy_protocol, http2_only) = (*scheme, *proxy_protocol, *http2_only);
        let key: Arc<str> = listen_key(listen).into();
        if let Some(sockets) = inherited.take_listener(listen) {
            let bound = inherited_address(&sockets[0], addr)?;
            for socket in &sockets {
                handoff.add_listener(listen, socket)?;
            }
            share(&mut per_worker, sockets, &key, listen)?;
            if let ListenAddr::Unix(path) = addr {
                unix_paths.push(path.clone());
            }
            let udp = inherited.take_quic(listen).unwrap_or_default();
            let quic = http3 && !proxy_protocol;
            if let (true, Scheme::Https, ListenAddr::Tcp(a)) = (quic, scheme, &bound) {
                // The replaced hayate's UDP sockets, or new ones beside
                // them (it ran without http3, or fewer workers): no probe,
                // it still holds them.
                add_quic(&mut per_worker, &key, *a, udp, listen, handoff)?;
            }
            addresses.push(Listen {
                addr: bound,
                ..listen.clone()
            });
            continue;
        }
        match addr {
            ListenAddr::Tcp(a) => {
                let bound = probe(*a).map_err(|e| with_context(e, &format!("listen {a}")))?;
                for slot in per_worker.iter_mut() {
                    let l = reuseport_listener(bound)
                        .map_err(|e| with_context(e, &format!("listen {bound}")))?;
                    handoff.add_listener(listen, &l)?;
                    slot.push(BoundListener {
                        key: key.clone(),
                        socket: l,
                        scheme,
                        proxy_protocol,
                        http2_only,
                        quic: None,
                    });
                }
                if http3 && scheme == Scheme::Https && !proxy_protocol {
                    probe_udp(bound).map_err(|e| with_context(e, &format!("http3 on {bound}")))?;
                    add_quic(&mut per_worker, &key, bound, Vec::new(), listen, handoff)
                        .map_err(|e| with_context(e, &format!("http3 on {bound}")))?;
                }
                addresses.push(Listen {
                    addr: ListenAddr::Tcp(bound),
                    scheme,
                    proxy_protocol,
                    http2_only,
                });
            }
            ListenAddr::Unix(path) => {
                let l = unix_listener(path)
                    .map_err(|e| with_context(e, &format!("listen unix:{}", path.display())))?;
                handoff.add_listener(listen, &l)?;
                for slot in per_worker.iter_mut() {
                    slot.push(BoundListener {
                        key: key.clone(),
                        socket: l.try_clone()?,
                        scheme,
                        proxy_protocol,
                        http2_only,
                        quic: None,
                    });
                }
                unix_paths.push(path.clone());
                addresses.push(Listen {
                    addr: addr.clone(),
                    scheme,
                    proxy_protocol,
                    http2_only,
                });
            }
        }
    }
    Ok(Listeners {
        per_worker,
        addresses,
        unix_paths,
    })
}

/// Gives inherited sockets to the workers: each socket to one worker, and
/// every worker at least one (a worker count that changed across an
/// upgrade shares a socket, or gives a worker two). No inherited socket is
/// closed: its accept queue may hold connections.
fn share(
    per_worker: &mut [Vec<BoundListener>],
    sockets: Vec<Socket>,
    key: &Arc<str>,
    listen: &Listen,
) -> io::Result<()> {
    let (scheme, proxy_protocol, http2_only) =
        (listen.scheme, listen.proxy_protocol, listen.http2_only);
    let workers = per_worker.len();
    let count = sockets.len();
    for w in 0..workers.saturating_sub(count) {
        let socket = sockets[w % count].try_clone()?;
        per_worker[count + w].push(BoundListener {
            key: key.clone(),
            socket,
            scheme,
            proxy_protocol,
            http2_only,
            quic: None,
        });
    }
    for (i, socket) in sockets.into_iter().enumerate() {
        socket.set_nonblocking(true)?;
        per_worker[i % workers].push(BoundListener {
            key: key.clone(),
            socket,
            scheme,
            proxy_protocol,
            http2_only,
            quic: None,
        });
    }
    Ok(())
}

/// The address an inherited socket is bound to (a `:0` port resolved).
fn inherited_address(socket: &Socket, configured: &ListenAddr) -> io::Result<ListenAddr> {
    Ok(match configured {
        ListenAddr::Tcp(_) => ListenAddr::Tcp(
            socket
                .local_addr()?
                .as_socket()
                .ok_or_else(|| io::Error::other("an inherited TCP listener is not inet"))?,
        ),
        ListenAddr::Unix(_) => configured.clone(),
    })
}

fn with_context(e: io::Error, what: &str) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

fn socket_for(addr: SocketAddr) -> io::Result<Socket> {
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    s.set_reuse_address(true)?;
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
    }
    Ok(s)
}

/// Binds without SO_REUSEPORT to learn whether the address is free, and
/// which port 0 resolves to.
fn probe(addr: SocketAddr) -> io::Result<SocketAddr> {
    let s = socket_for(addr)?;
    s.bind(&addr.into())?;
    s.local_addr()?
        .as_socket()
        .ok_or_else(|| io::Error::other("not an inet address"))
}

/// Gives every worker's listener `key` (each entry a worker was given for
/// it) its own UDP socket on `addr`, for HTTP/3: one of `inherited` (an
/// upgrade's) while there are some, else a new SO_REUSEPORT one; a
/// duplicate of each is kept in `handoff`. Two endpoints never share a
/// socket: each would read the other's connections' datagrams. Inherited
/// sockets left over (this hayate has fewer workers) are closed. A
/// PROXY-protocol listener gets none: QUIC has no PROXY header to name the
/// client.
fn add_quic(
    per_worker: &mut [Vec<BoundListener>],
    key: &Arc<str>,
    addr: SocketAddr,
    inherited: Vec<std::net::UdpSocket>,
    listen: &Listen,
    handoff: &mut HandoffSet,
) -> io::Result<()> {
    let mut inherited = inherited.into_iter();
    for slot in per_worker.iter_mut() {
        for l in slot
            .iter_mut()
            .filter(|l| &l.key == key && l.quic.is_none())
        {
            let udp = match inherited.next() {
                Some(udp) => udp,
                None => reuseport_udp(addr)?,
            };
            udp.set_nonblocking(true)?;
            handoff.add_quic(listen, &udp)?;
            l.quic = Some(udp);
        }
    }
    Ok(())
}

/// Binds UDP without SO_REUSEPORT to learn whether `addr` is free for
/// HTTP/3 (a port free for TCP may be taken for UDP).
fn probe_udp(addr: SocketAddr) -> io::Result<()> {
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
    }
    s.bind(&addr.into())
}

fn reuseport_udp(addr: SocketAddr) -> io::Result<std::net::UdpSocket> {
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
    }
    s.set_reuse_port(true)?;
    s.set_nonblocking(true)?;
    s.bind(&addr.into())?;
    Ok(s.into())
}

fn reuseport_listener(addr: SocketAddr) -> io::Result<Socket> {
    let s = socket_for(addr)?;
    s.set_reuse_port(true)?;
    s.set_nonblocking(true)?;
    s.bind(&addr.into())?;
    s.listen(BACKLOG)?;
    Ok(s)
}

/// Binds a Unix socket at `path` (non-blocking, listening), replacing a
/// socket file left over from a crash but nothing else.
pub fn unix_listener(path: &Path) -> io::Result<Socket> {
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "a file that is not a socket is in the way",
            ));
        }
        // A socket file nobody answers on is left over from a crash.
        match UnixStream::connect(path) {
            Ok(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    "another process listens on it",
                ))
            }
            Err(_) => std::fs::remove_file(path)?,
        }
    }
    let s = Socket::new(Domain::UNIX, Type::STREAM, None)?;
    s.bind(&socket2::SockAddr::unix(path)?)?;
    s.listen(BACKLOG)?;
    s.set_nonblocking(true)?;
    Ok(s)
}
