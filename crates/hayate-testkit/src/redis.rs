//! A real `redis-server` on a loopback port for the shared-tier tests
//! (`.ci/run` installs Debian's redis-server), stopped when dropped.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};

use crate::eventually;
use crate::pebble::free_port;

/// A running redis-server.
pub struct Redis {
    child: Option<Child>,
    /// Its port on 127.0.0.1.
    pub port: u16,
}

impl Redis {
    /// Starts one on a free port, without persistence, and waits until it
    /// answers PING.
    pub fn start() -> Redis {
        let mut redis = Redis {
            child: None,
            port: free_port(),
        };
        redis.spawn();
        redis
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Stops it (SIGKILL: as if it crashed).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    fn spawn(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server (apt-get install redis-server)");
        self.child = Some(child);
        let port = self.port;
        eventually("redis-server answers PING", || {
            let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
            s.write_all(b"PING\r\n").map_err(|e| e.to_string())?;
            let mut answer = [0u8; 7];
            s.read_exact(&mut answer).map_err(|e| e.to_string())?;
            (&answer == b"+PONG\r\n")
                .then_some(())
                .ok_or(format!("{answer:?}"))
        });
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
    }
}
