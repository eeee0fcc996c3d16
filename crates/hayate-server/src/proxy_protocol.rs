//! Reading the PROXY protocol header on listeners marked `proxy_protocol`
//! (the parsing is `hayate_core::proxy_header`): before anything else of
//! the connection (the TLS handshake on an https listener), and only from
//! a peer in `trusted_proxies`; anyone else's connection is closed unread.
//! The header must arrive whole within `header_timeout`; it is peeked, then
//! exactly its bytes are read, so the connection's own bytes stay in the
//! socket for TLS or HTTP to read.

use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hayate_core::proxy_header::{self, ProxyHeader, MAX_HEADER};
use hayate_core::transport::Peer;
use tokio::net::TcpStream;

/// Connections closed because of their PROXY header since start: from an
/// untrusted peer, malformed, or not in time.
pub static REFUSED: AtomicU64 = AtomicU64::new(0);

/// Reads the header from `tcp`, whose peer is `peer`, trusted or not by
/// `trusted`: the peer the rest of the connection is from (the client the
/// header names, or the peer itself for a LOCAL or UNKNOWN one). `None`:
/// the connection is to be closed (counted and logged here).
pub async fn accept(tcp: &TcpStream, peer: Peer, trusted: bool, timeout: Duration) -> Option<Peer> {
    if !trusted {
        REFUSED.fetch_add(1, Ordering::Relaxed);
        log::warn!("PROXY protocol connection from {peer} refused: not in trusted_proxies");
        return None;
    }
    let read = tokio::time::timeout(timeout, read_header(tcp)).await;
    let source = match read {
        Ok(Ok(source)) => source,
        Ok(Err(why)) => {
            REFUSED.fetch_add(1, Ordering::Relaxed);
            log::info!("PROXY protocol header from {peer} refused: {why}");
            return None;
        }
        Err(_) => {
            REFUSED.fetch_add(1, Ordering::Relaxed);
            log::info!("PROXY protocol header from {peer} not received in {timeout:?}");
            return None;
        }
    };
    Some(match source {
        Some(client) => {
            let ip = client.ip().to_canonical();
            Peer {
                addr: ip.to_string(),
                ip: Some(ip),
                port: Some(client.port()),
                local_port: peer.local_port,
                client_cert: None,
            }
        }
        None => peer,
    })
}

/// Peeks until a whole header is there, then reads exactly it: its
/// source, or why it is refused.
async fn read_header(tcp: &TcpStream) -> Result<Option<std::net::SocketAddr>, &'static str> {
    thread_local! {
        /// Where a worker peeks: a header is at most MAX_HEADER bytes.
        static PEEK: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0; MAX_HEADER]);
    }
    let (len, source) = loop {
        tcp.readable().await.map_err(|_| "connection failed")?;
        let peeked = tcp.try_io(tokio::io::Interest::READABLE, || {
            PEEK.with_borrow_mut(|buf| {
                let flags = nix::sys::socket::MsgFlags::MSG_PEEK;
                let n = nix::sys::socket::recv(tcp.as_raw_fd(), buf, flags)?;
                if n == 0 {
                    return Ok(Err("connection closed"));
                }
                match proxy_header::parse(&buf[..n]) {
                    ProxyHeader::Complete { len, source } => Ok(Ok((len, source))),
                    ProxyHeader::Invalid(why) => Ok(Err(why)),
                    // Part of it: wait for more (the WouldBlock clears the
                    // readiness, so the wait is for new bytes).
                    ProxyHeader::Incomplete => Err(io::ErrorKind::WouldBlock.into()),
                }
            })
        });
        match peeked {
            Ok(Ok(found)) => break found,
            Ok(Err(why)) => return Err(why),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(_) => return Err("connection failed"),
        }
    };
    // The bytes are in the socket's buffer: read exactly the header's.
    let mut header = [0u8; MAX_HEADER];
    let mut read = 0;
    while read < len {
        tcp.readable().await.map_err(|_| "connection failed")?;
        match tcp.try_read(&mut header[read..len]) {
            Ok(0) => return Err("connection closed"),
            Ok(n) => read += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(_) => return Err("connection failed"),
        }
    }
    Ok(source)
}

/// The counter, for `/metrics`.
pub fn render_metrics(out: &mut String) {
    use hayate_core::metrics::{family, sample, Kind};
    let name = "hayate_proxy_protocol_refused_total";
    let help =
        "Connections closed for their PROXY protocol header: untrusted peer, malformed, or late";
    family(out, name, help, Kind::Counter);
    sample(out, name, &[], REFUSED.load(Ordering::Relaxed));
}
