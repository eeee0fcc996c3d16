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

    /// Freezes it (SIGSTOP): connections stay open and nothing answers,
    /// the way a Redis that is stuck or far too slow looks.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Lets a paused one go on (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, sig: &str) {
        let child = self.child.as_ref().expect("redis-server running");
        let status = Command::new("kill")
            .args([sig, &child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill {sig}");
    }

    /// Runs one command and returns its reply: `Int(n)`, `Text(s)` for a
    /// status or a bulk string, `Nil`, or `List` of replies.
    pub fn command(&self, args: &[&[u8]]) -> Reply {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).expect("connect to redis-server");
        let mut req = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            req.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            req.extend_from_slice(a);
            req.extend_from_slice(b"\r\n");
        }
        s.write_all(&req).expect("send to redis-server");
        read_reply(&mut std::io::BufReader::new(s))
    }

    /// The keys matching a glob `pattern` (KEYS: fine on a test's few keys).
    pub fn keys(&self, pattern: &str) -> Vec<Vec<u8>> {
        match self.command(&[b"KEYS", pattern.as_bytes()]) {
            Reply::List(keys) => keys
                .into_iter()
                .map(|k| match k {
                    Reply::Text(k) => k,
                    other => panic!("KEYS gave {other:?}"),
                })
                .collect(),
            other => panic!("KEYS gave {other:?}"),
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

/// A Redis reply.
#[derive(Debug, PartialEq, Eq)]
pub enum Reply {
    /// An integer.
    Int(i64),
    /// A status or a bulk string.
    Text(Vec<u8>),
    /// No value.
    Nil,
    /// An array.
    List(Vec<Reply>),
}

fn read_reply(r: &mut impl std::io::BufRead) -> Reply {
    let mut line = Vec::new();
    r.read_until(b'\n', &mut line)
        .expect("reply from redis-server");
    let text = String::from_utf8_lossy(&line[1..line.len().saturating_sub(2).max(1)]).into_owned();
    let n = || text.parse::<i64>().expect("a number");
    match line.first() {
        Some(b'+') => Reply::Text(text.into_bytes()),
        Some(b':') => Reply::Int(n()),
        Some(b'$') if n() < 0 => Reply::Nil,
        Some(b'$') => {
            let mut data = vec![0; n() as usize + 2];
            r.read_exact(&mut data).expect("bulk string");
            data.truncate(data.len() - 2);
            Reply::Text(data)
        }
        Some(b'*') if n() < 0 => Reply::Nil,
        Some(b'*') => Reply::List((0..n()).map(|_| read_reply(r)).collect()),
        _ => panic!("redis-server said {text:?}"),
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
    }
}
