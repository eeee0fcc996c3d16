//! Test-only helpers: start the real `hayate` binary on an ephemeral port
//! ([`Hayate`]), talk raw HTTP/1.1 to it ([`Client`]), and build fixture
//! directories. Every wait is bounded so a broken server fails a test
//! instead of hanging it.

// Test helpers block on purpose; they never run inside hayate.
#![allow(clippy::disallowed_methods)]

pub mod bind;
pub mod browser;
pub mod curl;
pub mod h2_frames;
pub mod jaeger;
pub mod load;
pub mod node;
pub mod origin;
pub mod pebble;
pub mod php;
pub mod ports;
pub mod python;
pub mod redis;
mod rss;
pub mod tls;
mod unix;
mod websocket;

pub use origin::{checksum, Checksum, Echo, Held, Origin, OriginOptions};
pub use rss::{growth_per, rss_kib, settled_rss_kib};
pub use unix::{unix_get, unix_listener, unix_request};
pub use websocket::{assert_websocket_upgrade, upgrade_echo_server};

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How long any single wait in a test may take.
pub const WAIT: Duration = Duration::from_secs(10);

/// A running hayate, stopped (SIGTERM, then SIGKILL) when dropped.
pub struct Hayate {
    child: Option<Child>,
    /// The first TCP address it listens on.
    pub addr: SocketAddr,
    stdout_lines: std::sync::mpsc::Receiver<String>,
    stderr_path: PathBuf,
    _logs: tempfile::TempDir,
}

impl Hayate {
    /// Starts `bin` with `args`, adding `--listen 127.0.0.1:0` unless the
    /// args or `envs` name a listener, and waits until it prints its URL.
    pub fn start(bin: &str, args: &[&str]) -> Hayate {
        Hayate::start_in(bin, args, &[], None)
    }

    /// Like [`Hayate::start`], with environment variables and a working dir.
    pub fn start_in(bin: &str, args: &[&str], envs: &[(&str, &str)], cwd: Option<&Path>) -> Hayate {
        Hayate::launch(Command::new(bin), args, envs, cwd)
    }

    /// Writes `text` to the config file `file` and starts `bin` with
    /// `--config file`, in the file's directory (relative paths in it are
    /// its own).
    pub fn start_config(bin: &str, file: &Path, text: &str) -> Hayate {
        std::fs::write(file, text).expect("write the config file");
        let path = file.to_str().expect("a UTF-8 path");
        Hayate::start_in(bin, &["--config", path], &[], file.parent())
    }

    /// Like [`Hayate::start`], in a process whose open-file limit (soft
    /// and hard) is `limit`: the shell's `ulimit -n` before it `exec`s
    /// hayate, so the pid is hayate's (workspace code forbids the unsafe
    /// `pre_exec` that a `setrlimit` in the child would need).
    pub fn start_with_fd_limit(bin: &str, args: &[&str], limit: u64) -> Hayate {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "ulimit -n \"$1\" && shift && exec \"$@\"", "sh"])
            .arg(limit.to_string())
            .arg(bin);
        Hayate::launch(cmd, args, &[], None)
    }

    /// Starts `cmd` (hayate, or what `exec`s it) with `args` appended.
    fn launch(
        mut cmd: Command,
        args: &[&str],
        envs: &[(&str, &str)],
        cwd: Option<&Path>,
    ) -> Hayate {
        let logs = tempfile::tempdir().expect("tempdir");
        let stderr_path = logs.path().join("stderr");
        cmd.args(args);
        let has_listen = args
            .iter()
            .any(|a| a.starts_with("--listen") || *a == "--config" || *a == "-c")
            || envs.iter().any(|(k, _)| *k == "HAYATE_LISTEN");
        if !has_listen {
            cmd.args(["--listen", "127.0.0.1:0"]);
        }
        if !args.iter().any(|a| a.starts_with("--log-level")) {
            cmd.env("HAYATE_LOG_LEVEL", "info");
        }
        for (k, v) in envs {
            cmd.env(k, v);
        }
        if let Some(dir) = cwd {
            cmd.current_dir(dir);
        } else if !args.iter().any(|a| a.starts_with("--control"))
            && !envs.iter().any(|(k, _)| *k == "HAYATE_CONTROL")
            && !config_names_control(args)
        {
            // Hayates started from the same directory (every test of a
            // file runs from the crate's) each get a control socket of their
            // own, and never see another's.
            cmd.env("HAYATE_CONTROL", logs.path().join("control.sock"));
        }
        cmd.stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr_path).expect("stderr file"));
        let mut child = cmd.spawn().expect("spawn hayate");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut h = Hayate {
            child: Some(child),
            addr: "0.0.0.0:0".parse().expect("addr"),
            stdout_lines: rx,
            stderr_path,
            _logs: logs,
        };
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match h.stdout_lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some((_, addr)) = listen_address(&line) {
                        h.addr = addr;
                        return h;
                    }
                    if line.contains("unix:") && !line.contains("http://") && has_listen {
                        // Unix-only listeners: no TCP address to learn.
                        return h;
                    }
                }
                Err(_) => panic!("hayate did not start; stderr:\n{}", h.stderr()),
            }
        }
    }

    /// The next listener hayate announced after the first (`http` or
    /// `https`, and its address): with several listeners, in the order they
    /// were given.
    pub fn next_address(&self) -> (String, SocketAddr) {
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stdout_lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(found) = listen_address(&line) {
                        return found;
                    }
                }
                Err(_) => panic!("no further listener announced; stderr:\n{}", self.stderr()),
            }
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// The admin listener's TCP address, from its log line (waited for,
    /// up to 8 s).
    pub fn admin_addr(&self) -> std::net::SocketAddr {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(8);
        loop {
            let log = self.stderr();
            if let Some((_, rest)) = log.split_once("admin listener on http://") {
                let addr = rest.split('/').next().unwrap_or_default();
                return addr.parse().expect("the admin listener's address");
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no admin listener in the log:\n{log}"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Everything hayate wrote to stderr so far (the error log).
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// Lines hayate printed to stdout since start (access log, when there).
    pub fn stdout_lines(&self, wait: Duration) -> Vec<String> {
        let mut out = Vec::new();
        let deadline = Instant::now() + wait;
        while let Ok(line) = self
            .stdout_lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            out.push(line);
        }
        out
    }

    /// A new client connection.
    pub fn client(&self) -> Client {
        Client::connect(self.addr)
    }

    /// Sends `signal` to the process.
    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(self.pid() as i32);
        nix::sys::signal::kill(pid, signal).expect("kill");
    }

    /// Whether the process still runs.
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_none())
    }

    /// Waits for exit (bounded).
    pub fn wait(&mut self) -> ExitStatus {
        let child = self.child.as_mut().expect("running");
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "hayate did not exit; stderr:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM and wait; returns the exit status.
    pub fn stop(&mut self) -> ExitStatus {
        self.signal(nix::sys::signal::Signal::SIGTERM);
        self.wait()
    }

    /// Asserts that the error log holds no line at ERROR level, nor a panic.
    pub fn assert_no_errors(&self) {
        let log = self.stderr();
        let bad: Vec<&str> = log
            .lines()
            .filter(|l| l.contains(" ERROR ") || l.contains("panicked"))
            .collect();
        assert!(
            bad.is_empty(),
            "unexpected errors in hayate's log:\n{}",
            bad.join("\n")
        );
    }
}

impl Drop for Hayate {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if child.try_wait().ok().flatten().is_none() {
                let pid = nix::unistd::Pid::from_raw(child.id() as i32);
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
                let deadline = Instant::now() + Duration::from_secs(3);
                while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(10));
                }
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// A parsed response.
#[derive(Debug, Clone)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Header fields in order, names lower-cased.
    pub headers: Vec<(String, String)>,
    /// The body (decoded from chunked if needed).
    pub body: Vec<u8>,
}

impl Response {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    /// How many times header `name` appears.
    pub fn count(&self, name: &str) -> usize {
        let name = name.to_ascii_lowercase();
        self.headers.iter().filter(|(n, _)| *n == name).count()
    }

    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// A raw HTTP/1.1 client over one TCP connection.
pub struct Client {
    stream: Stream,
    buf: Vec<u8>,
}

/// A client's connection: plain TCP, or TLS over it ([`tls::TlsClient`]).
enum Stream {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

impl Client {
    /// Connects to `addr`.
    pub fn connect(addr: SocketAddr) -> Client {
        Client {
            stream: Stream::Plain(tcp_connect(addr)),
            buf: Vec::new(),
        }
    }

    /// The TLS session, on a TLS connection.
    pub fn tls(&self) -> Option<&rustls::ClientConnection> {
        match &self.stream {
            Stream::Tls(s) => Some(&s.conn),
            Stream::Plain(_) => None,
        }
    }

    /// Sends raw bytes.
    pub fn send(&mut self, raw: &[u8]) -> &mut Client {
        self.stream.write_all(raw).expect("send");
        self
    }

    /// Sends `GET path` with Host and any extra header lines, and reads the
    /// response.
    pub fn get(&mut self, path: &str, extra: &[(&str, &str)]) -> Response {
        self.request("GET", path, extra)
    }

    /// Sends a request without a body and reads the response.
    pub fn request(&mut self, method: &str, path: &str, extra: &[(&str, &str)]) -> Response {
        let mut raw = format!("{method} {path} HTTP/1.1\r\nHost: test\r\n");
        for (k, v) in extra {
            raw.push_str(&format!("{k}: {v}\r\n"));
        }
        raw.push_str("\r\n");
        self.send(raw.as_bytes());
        self.read_response(method == "HEAD")
    }

    /// Sends `POST path` with a Content-Length body (one write, so no
    /// Nagle delay) and any extra header lines, and reads the response.
    pub fn post(&mut self, path: &str, extra: &[(&str, &str)], body: &[u8]) -> Response {
        let mut raw = format!(
            "POST {path} HTTP/1.1\r\nHost: test\r\nContent-Length: {}\r\n",
            body.len()
        );
        for (k, v) in extra {
            raw.push_str(&format!("{k}: {v}\r\n"));
        }
        raw.push_str("\r\n");
        let mut raw = raw.into_bytes();
        raw.extend_from_slice(body);
        self.send(&raw);
        self.read_response(false)
    }

    /// Reads one response; `head` says the request was HEAD (no body).
    pub fn read_response(&mut self, head: bool) -> Response {
        self.try_read_response(head).expect("a response")
    }

    /// Reads one response, or `None` if the connection closed first.
    pub fn try_read_response(&mut self, head: bool) -> Option<Response> {
        let mut body = Vec::new();
        let mut resp =
            self.try_read_response_with(head, &mut |piece| body.extend_from_slice(piece))?;
        resp.body = body;
        Some(resp)
    }

    /// Reads one response, handing its body to `on_body` piece by piece as
    /// it arrives (de-chunked) instead of collecting it: the returned
    /// [`Response::body`] is empty. For bodies too large to hold.
    pub fn read_response_with(&mut self, head: bool, on_body: &mut dyn FnMut(&[u8])) -> Response {
        self.try_read_response_with(head, on_body)
            .expect("a response")
    }

    fn try_read_response_with(
        &mut self,
        head: bool,
        on_body: &mut dyn FnMut(&[u8]),
    ) -> Option<Response> {
        loop {
            let end = self.buf.windows(4).position(|w| w == b"\r\n\r\n");
            if let Some(end) = end {
                let head_text = String::from_utf8_lossy(&self.buf[..end]).into_owned();
                self.buf.drain(..end + 4);
                let mut lines = head_text.split("\r\n");
                let status_line = lines.next().unwrap_or_default();
                let status: u16 = status_line
                    .split(' ')
                    .nth(1)
                    .and_then(|s| s.parse().ok())
                    .expect("status code");
                let headers: Vec<(String, String)> = lines
                    .filter_map(|l| l.split_once(':'))
                    .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
                    .collect();
                let resp = Response {
                    status,
                    headers,
                    body: Vec::new(),
                };
                if status < 200 {
                    return Some(resp); // interim; the caller reads again
                }
                if head || status == 204 || status == 304 {
                    return Some(resp);
                }
                if resp
                    .header("transfer-encoding")
                    .is_some_and(|t| t.contains("chunked"))
                {
                    self.stream_chunked(on_body);
                } else if let Some(len) = resp
                    .header("content-length")
                    .and_then(|l| l.parse::<usize>().ok())
                {
                    self.stream_exact(len, on_body);
                } else {
                    while self.fill() > 0 {}
                    on_body(&std::mem::take(&mut self.buf));
                }
                return Some(resp);
            }
            if self.fill() == 0 {
                return None;
            }
        }
    }

    /// Reads exactly `n` more bytes (after a protocol switch, say).
    pub fn read_bytes(&mut self, n: usize) -> Vec<u8> {
        while self.buf.len() < n {
            assert!(
                self.fill() > 0,
                "connection closed after {} of {n} bytes",
                self.buf.len()
            );
        }
        self.buf.drain(..n).collect()
    }

    /// Reads until the server closes; returns what arrived.
    pub fn read_to_close(&mut self) -> Vec<u8> {
        while self.fill() > 0 {}
        std::mem::take(&mut self.buf)
    }

    /// True if the server closed the connection (EOF, or reset) with nothing
    /// more to read.
    pub fn is_closed(&mut self) -> bool {
        self.buf.is_empty() && self.fill() == 0
    }

    /// Passes the next `len` body bytes to `on_body`, never holding more
    /// than one read's worth.
    fn stream_exact(&mut self, len: usize, on_body: &mut dyn FnMut(&[u8])) {
        let mut left = len;
        loop {
            let take = left.min(self.buf.len());
            if take > 0 {
                on_body(&self.buf[..take]);
                self.buf.drain(..take);
                left -= take;
            }
            if left == 0 {
                return;
            }
            assert!(
                self.fill() > 0,
                "connection closed mid-body ({} of {len} bytes)",
                len - left
            );
        }
    }

    fn stream_chunked(&mut self, on_body: &mut dyn FnMut(&[u8])) {
        loop {
            let line = self.read_line();
            let size = usize::from_str_radix(line.split(';').next().unwrap_or("").trim(), 16)
                .expect("chunk size");
            if size == 0 {
                while !self.read_line().is_empty() {}
                return;
            }
            self.stream_exact(size, on_body);
            assert_eq!(self.read_line(), "", "chunk not followed by CRLF");
        }
    }

    fn read_line(&mut self) -> String {
        loop {
            if let Some(p) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line = String::from_utf8_lossy(&self.buf[..p]).into_owned();
                self.buf.drain(..p + 2);
                return line;
            }
            assert!(self.fill() > 0, "connection closed mid-line");
        }
    }

    /// Reads what is available; 0 on EOF or reset.
    fn fill(&mut self) -> usize {
        let mut chunk = [0u8; 65536];
        match self.stream.read(&mut chunk) {
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                n
            }
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                panic!("no data from the server within {WAIT:?}")
            }
            Err(_) => 0,
        }
    }

    /// The underlying TCP stream (for shutdown and timeouts).
    pub fn stream(&self) -> &TcpStream {
        match &self.stream {
            Stream::Plain(s) => s,
            Stream::Tls(s) => &s.sock,
        }
    }
}

/// Whether the config file in `args` (`--config FILE`, `-c FILE`) sets
/// `control`: the test then talks to that socket, which HAYATE_CONTROL
/// would override.
fn config_names_control(args: &[&str]) -> bool {
    let file = args
        .windows(2)
        .find(|w| w[0] == "--config" || w[0] == "-c")
        .map(|w| w[1])
        .or_else(|| args.iter().find_map(|a| a.strip_prefix("--config=")));
    file.and_then(|f| std::fs::read_to_string(f).ok())
        .is_some_and(|text| {
            text.lines().any(|l| {
                l.trim_start()
                    .strip_prefix("control")
                    .is_some_and(|rest| rest.trim_start().starts_with('='))
            })
        })
}

/// The scheme and address of a "serving ... on http(s)://ADDR/" line.
fn listen_address(line: &str) -> Option<(String, SocketAddr)> {
    let (before, rest) = line.split_once("://")?;
    let scheme = before.rsplit(' ').next()?.to_string();
    let mut addr: SocketAddr = rest.split('/').next()?.parse().ok()?;
    // Bound to every interface: reached on loopback.
    if addr.ip().is_unspecified() {
        addr.set_ip(match addr {
            SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    Some((scheme, addr))
}

/// Runs `cmd` to its end: whether it succeeded, and its stdout then stderr
/// (the control client's answers and errors, `hayate check`'s report).
pub fn run_to_end(cmd: &mut Command) -> (bool, String) {
    let out = cmd.output().expect("run the command");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// Polls `check` until it succeeds, for up to [`WAIT`]: for what a server
/// does in the background (a certificate reloaded, an ACME order, a log
/// line), seen from outside. Panics with `what` and the last error.
pub fn eventually<T>(what: &str, mut check: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        match check() {
            Ok(v) => return v,
            Err(e) if Instant::now() >= deadline => panic!("{what}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// [`eventually`] for a condition that has no reason to tell.
pub fn eventually_true(what: &str, mut holds: impl FnMut() -> bool) {
    eventually(what, || {
        holds().then_some(()).ok_or_else(|| "not yet".into())
    })
}

/// Whether process `pid` runs (a zombie has exited: it does not).
pub fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

/// [`eventually`] inside an async test: the thread's other tasks (a client
/// connection that must flush) run between checks.
pub async fn eventually_async<T>(what: &str, mut check: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        match check() {
            Ok(v) => return v,
            Err(e) if Instant::now() >= deadline => panic!("{what}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    }
}

/// A TCP connection with every wait bounded by [`WAIT`].
fn tcp_connect(addr: SocketAddr) -> TcpStream {
    try_tcp_connect(addr).expect("connect")
}

/// [`tcp_connect`], returning its error (a server not listening yet is
/// one to wait out, not a panic: `eventually` retries it).
fn try_tcp_connect(addr: SocketAddr) -> std::io::Result<TcpStream> {
    let stream = TcpStream::connect_timeout(&addr, WAIT)?;
    stream.set_read_timeout(Some(WAIT))?;
    stream.set_write_timeout(Some(WAIT))?;
    Ok(stream)
}

/// Reads from `r` onto `buf` through the first empty line (`\r\n\r\n`)
/// among the bytes it reads: a request or response head, or a chunked
/// body through its trailer section. Reads a byte at a time, so nothing
/// past that line is consumed. Fails at EOF or on a read error, leaving
/// what was read in `buf`.
pub fn read_through_blank_line(r: &mut impl Read, buf: &mut Vec<u8>) -> std::io::Result<()> {
    let start = buf.len();
    let mut byte = [0u8; 1];
    while !buf[start..].ends_with(b"\r\n\r\n") {
        r.read_exact(&mut byte)?;
        buf.push(byte[0]);
    }
    Ok(())
}

/// A temporary site: `hello.txt`, `index.html`, `docs/guide.html`,
/// `.secret`, `.well-known/security.txt`, and a 1 MiB `big.bin` with
/// varying bytes.
pub fn site() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path();
    std::fs::write(p.join("hello.txt"), "hello world\n").expect("write");
    std::fs::write(p.join("index.html"), "<!doctype html><h1>home</h1>\n").expect("write");
    std::fs::create_dir(p.join("docs")).expect("mkdir");
    std::fs::write(p.join("docs/guide.html"), "<p>guide</p>\n").expect("write");
    std::fs::write(p.join(".secret"), "secret").expect("write");
    std::fs::create_dir(p.join(".well-known")).expect("mkdir");
    std::fs::write(p.join(".well-known/security.txt"), "Contact: a@b\n").expect("write");
    std::fs::write(p.join("big.bin"), big_bytes(1 << 20)).expect("write");
    dir
}

/// `len` bytes of a fixed, non-repeating-looking pattern ([`Pattern`]).
pub fn big_bytes(len: usize) -> Vec<u8> {
    let mut out = vec![0; len];
    Pattern::default().fill(&mut out);
    out
}

/// The bytes of [`big_bytes`] as a stream: each call continues where the
/// last one stopped, so a test can send or check any length piece by piece
/// without holding it.
#[derive(Debug, Clone)]
pub struct Pattern {
    x: u32,
}

impl Default for Pattern {
    fn default() -> Pattern {
        Pattern { x: 0x1234_5678 }
    }
}

impl Pattern {
    /// Fills `out` with the next `out.len()` bytes.
    pub fn fill(&mut self, out: &mut [u8]) {
        let mut x = self.x;
        for b in out {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            *b = x as u8;
        }
        self.x = x;
    }

    /// Whether `data` is the next `data.len()` bytes (consumed either way).
    pub fn matches(&mut self, data: &[u8]) -> bool {
        let mut x = self.x;
        let mut same = true;
        for &b in data {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            same &= b == x as u8;
        }
        self.x = x;
        same
    }
}

/// `len` bytes of compressible text (numbered lines of prose), the same
/// for the same length.
pub fn text_bytes(len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 80);
    let mut i = 0u32;
    while out.len() < len {
        out.extend_from_slice(
            format!("{i:05} hayate compresses this line once and serves it many times\n")
                .as_bytes(),
        );
        i += 1;
    }
    out.truncate(len);
    out
}
