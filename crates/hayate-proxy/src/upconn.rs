//! Connecting to an upstream member, TCP or Unix. The connection is a
//! [`Transport`], the same socket type as a client's.

use std::io;
use std::path::Path;
use std::time::Duration;

use hayate_core::transport::Transport;
use tokio::net::{TcpStream, UnixStream};

use crate::UpstreamAddr;

/// Connects within `timeout`.
pub(crate) async fn connect(addr: &UpstreamAddr, timeout: Duration) -> io::Result<Transport> {
    let connect = async {
        Ok::<_, io::Error>(match addr {
            UpstreamAddr::Tcp { addr, .. } => Transport::tcp(TcpStream::connect(addr).await?)?,
            UpstreamAddr::Unix(path) => Transport::Unix(connect_unix(path).await?),
        })
    };
    match tokio::time::timeout(timeout, connect).await {
        Ok(r) => r,
        Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "connect timed out")),
    }
}

/// Connects to a Unix socket, waiting while its listen queue is full.
///
/// A non-blocking connect to a listener whose backlog is full fails at once
/// with EAGAIN (TCP would drop the SYN and retry a second later). That is a
/// busy app, not a dead one: a burst of 1,000 requests to a Node app (backlog
/// 511) must wait for it to accept, not get 502s and eject it. The caller's
/// connect timeout bounds the wait.
async fn connect_unix(path: &Path) -> io::Result<UnixStream> {
    let mut pause = Duration::from_millis(1);
    loop {
        match UnixStream::connect(path).await {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            r => return r,
        }
    }
}
