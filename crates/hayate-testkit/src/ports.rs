//! Ports for tests that need a peer which is down.

use std::net::{Ipv4Addr, SocketAddr};

use socket2::{Domain, Socket, Type};

/// A TCP port on 127.0.0.1 that refuses connections for as long as this
/// value lives: its socket is bound but never listens, so a connect gets a
/// reset (`Connection refused`), and no test running in parallel can take
/// the port meanwhile (a port merely found free could be taken, and then a
/// test saw another server's reset instead of a refusal).
pub struct ClosedPort {
    _socket: Socket,
    addr: SocketAddr,
}

impl ClosedPort {
    /// Binds a port of the kernel's choosing.
    pub fn new() -> ClosedPort {
        let socket = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
        let any_port = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        socket.bind(&any_port.into()).expect("bind");
        let addr = socket
            .local_addr()
            .expect("local_addr")
            .as_socket()
            .expect("an IP address");
        ClosedPort {
            _socket: socket,
            addr,
        }
    }

    /// The port's number.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Default for ClosedPort {
    fn default() -> Self {
        ClosedPort::new()
    }
}
