//! Unix-socket clients and listeners of the tests: requests to hayate's
//! Unix listeners and admin socket, and an app's socket with a chosen
//! listen queue.

use std::io::{Read, Write};
use std::path::Path;

use crate::WAIT;

/// Sends `METHOD path` with `Connection: close` over the Unix socket
/// `sock` (a listener or the admin socket); the raw response, read until
/// the server closes.
pub fn unix_request(sock: &Path, method: &str, path: &str) -> String {
    let mut s = std::os::unix::net::UnixStream::connect(sock).expect("connect unix socket");
    s.set_read_timeout(Some(WAIT)).expect("timeout");
    s.write_all(
        format!("{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .expect("write");
    let mut out = Vec::new();
    s.read_to_end(&mut out).expect("read to close");
    String::from_utf8_lossy(&out).into_owned()
}

/// `GET path` over a Unix socket: see [`unix_request`].
pub fn unix_get(sock: &Path, path: &str) -> String {
    unix_request(sock, "GET", path)
}

/// A Unix stream listener on `path` whose listen queue holds `backlog`
/// connections (std's `bind` always asks for 128): the socket of a busy or
/// stuck app.
pub fn unix_listener(path: &Path, backlog: i32) -> std::os::unix::net::UnixListener {
    use nix::sys::socket::{bind, listen, socket, AddressFamily, Backlog, SockFlag, SockType};
    let fd = socket(
        AddressFamily::Unix,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .expect("socket");
    let addr = nix::sys::socket::UnixAddr::new(path).expect("unix socket path");
    bind(std::os::fd::AsRawFd::as_raw_fd(&fd), &addr).expect("bind");
    listen(&fd, Backlog::new(backlog).expect("backlog")).expect("listen");
    std::os::unix::net::UnixListener::from(fd)
}
