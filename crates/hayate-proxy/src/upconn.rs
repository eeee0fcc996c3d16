//! Connecting to an upstream member, TCP (with TLS for an `https://`
//! member) or Unix. The connection is a [`Transport`], the same type as a
//! client's.

use std::io;
use std::path::Path;
use std::time::{Duration, Instant};

use std::sync::Arc;

use hayate_core::boxed::pinned;
use hayate_core::transport::{TlsStream, Transport};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpStream, UnixStream};
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::rustls::ClientConfig;

use crate::UpstreamAddr;

/// Connects within `timeout` (the TLS handshake included), with `tls` for
/// an `https://` member; `preamble` (a PROXY protocol header) is written
/// first, before any TLS.
///
/// A member on this host whose listen queue is full is busy, not broken:
/// a Unix socket answers EAGAIN at once, a loopback TCP port drops the SYN
/// (no route or host can be missing on the way to it). Such a member is
/// waited for until `backlog_until` when given (the request's place in the
/// queue, which may outlast `timeout`), else within `timeout`; a queue
/// still full then is an error of kind [`io::ErrorKind::WouldBlock`], which
/// blames no member. Koa on one core behind 10,000 waiting clients (bench
/// case B) let hayate's connects time out at 5 s, and three of them
/// ejected it.
pub(crate) async fn connect(
    addr: &UpstreamAddr,
    timeout: Duration,
    backlog_until: Option<Instant>,
    tls: Option<&Arc<ClientConfig>>,
    preamble: Option<&[u8]>,
) -> io::Result<Transport> {
    let full_until = || backlog_until.unwrap_or_else(|| Instant::now() + timeout);
    let local = match addr {
        UpstreamAddr::Unix(path) | UpstreamAddr::UnixH2c(path) => {
            Some(Local::Unix(connect_unix(path, full_until()).await?))
        }
        UpstreamAddr::Tcp { addr: a, .. } if a.ip().is_loopback() && backlog_until.is_some() => {
            match tokio::time::timeout_at(full_until().into(), TcpStream::connect(a)).await {
                Ok(tcp) => Some(Local::Tcp(tcp?)),
                Err(_) => return Err(queue_stayed_full()),
            }
        }
        UpstreamAddr::Tcp { .. } => None,
    };
    let connect = async {
        Ok::<_, io::Error>(match (addr, local) {
            (_, Some(Local::Unix(mut unix))) => {
                if let Some(bytes) = preamble {
                    unix.write_all(bytes).await?;
                }
                Transport::Unix(unix)
            }
            (UpstreamAddr::Tcp { addr: a, .. }, local) => {
                let mut tcp = match local {
                    Some(Local::Tcp(tcp)) => tcp,
                    _ => TcpStream::connect(a).await?,
                };
                if let Some(bytes) = preamble {
                    tcp.write_all(bytes).await?;
                }
                match addr.tls_name() {
                    // Boxed: rustls's client state is kilobytes, and held
                    // inline it would size every proxied request's future,
                    // plain ones too (84 instructions per plain proxied
                    // request, bench/instructions/run).
                    Some(name) => pinned(|| handshake(tcp, name, tls)).await?,
                    None => Transport::tcp(tcp)?,
                }
            }
            (UpstreamAddr::Unix(_) | UpstreamAddr::UnixH2c(_), _) => {
                unreachable!("a Unix member connected above")
            }
        })
    };
    match tokio::time::timeout(timeout, connect).await {
        Ok(r) => r,
        Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "connect timed out")),
    }
}

/// A connection to a member on this host, made before the rest of the
/// connect (a preamble, TLS) and its timeout.
enum Local {
    Unix(UnixStream),
    Tcp(TcpStream),
}

/// A member's listen queue stayed full as long as the request could wait.
fn queue_stayed_full() -> io::Error {
    io::Error::new(io::ErrorKind::WouldBlock, "its listen queue stayed full")
}

/// The client side of TLS to a member that must prove it is `name`.
async fn handshake(
    tcp: TcpStream,
    name: &str,
    tls: Option<&Arc<ClientConfig>>,
) -> io::Result<Transport> {
    tcp.set_nodelay(true)?;
    let config = tls.ok_or_else(|| io::Error::other("no TLS settings for an https upstream"))?;
    let server_name = ServerName::try_from(name.to_string())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{name:?}: {e}")))?;
    let connector = tokio_rustls::TlsConnector::from(config.clone());
    let stream = connector.connect(server_name, tcp).await?;
    Ok(Transport::Tls(Box::new(TlsStream::Client(stream))))
}

/// Connects to a Unix socket, waiting while its listen queue is full.
///
/// A non-blocking connect to a listener whose backlog is full fails at once
/// with EAGAIN (TCP would drop the SYN and retry a second later). That is a
/// busy app, not a dead one: a burst of 1,000 requests to a Node app (backlog
/// 511) must wait for it to accept, not get 502s and eject it. The wait ends
/// at `until`; 10,000 clients held by Koa for 1.5 s each (bench case B) kept
/// its queue full for longer than the 5 s connect timeout, which answered
/// 4,316 of them with errors and blamed the app.
async fn connect_unix(path: &Path, until: Instant) -> io::Result<UnixStream> {
    let mut pause = Duration::from_millis(1);
    loop {
        match UnixStream::connect(path).await {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let now = Instant::now();
                if now >= until {
                    return Err(queue_stayed_full());
                }
                tokio::time::sleep(pause.min(until - now)).await;
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            r => return r,
        }
    }
}
