//! A test origin for the reverse proxy: a small HTTP/1.1 server on
//! `127.0.0.1:0` or a Unix socket, one thread per connection, keep-alive,
//! Content-Length and chunked request bodies.
//!
//! Every response carries `X-Connection: N` (the connection's number, from
//! 1, in accept order) and `X-Request-Count: K` (requests seen on that
//! connection). Routes:
//!
//! - `/echo` (and any unknown path): 200 with a text body describing the
//!   request as the origin saw it (head, body length and checksum, the
//!   trailer fields of a chunked body), parsed back by [`Echo::parse`];
//!   `?hop=1` adds hop-by-hop response fields the proxy must drop. Request
//!   bodies are checksummed as they arrive, never held whole.
//! - `/slow?ms=N`: sleeps N ms (at most 10 s), then answers `slow\n`.
//! - `/bytes?n=N[&chunked=1][&stall_ms=M]`: N bytes of
//!   [`big_bytes`](crate::big_bytes), made as they are sent, with
//!   Content-Length or chunked; with `stall_ms`, pauses after half of them.
//! - `/close`: answers with `Connection: close`, then closes.
//! - `/status?code=N`: answers status N (no body for 204 and 304).
//! - `/script[/ANY]?...` (for cache tests): `status=N`, `h=Name:Value` (repeatable,
//!   percent-encoded), `etag=V` (sends `ETag: "V"` and answers 304 to a
//!   matching If-None-Match), `h304=Name:Value` (sent on a 304 in place of
//!   the `h` fields of that name), `ms=N` (delay), `body=TEXT`, `chunked=1`,
//!   `n=N` (N bytes of [`big_bytes`](crate::big_bytes) as the body),
//!   `fail_at=K` (the K-th request for this target answers a bare 503),
//!   `early=Name:Value` (repeatable: a `103 Early Hints` with these fields
//!   goes first, as soon as the request has arrived, even while its answer
//!   is held), `early_n=K` (that 103 K times), `p102=1` (a `102
//!   Processing` first), `cut=1` (the connection closes after the body's
//!   first 64 KiB piece: a body that fails midway). The default body is
//!   `count K\n`, K being how many requests this target has received
//!   ([`Origin::count`]).
//! - `/text?n=N[&chunked=1][&stall_ms=M]`: N bytes of [`text_bytes`]
//!   (compressible), framed like `/bytes`; `&type=event|png` changes the
//!   Content-Type, `&nt=1` adds `Cache-Control: no-transform`, `&ce=1`
//!   labels the body `Content-Encoding: gzip` (as if already encoded).
//! - `?etag=1` on any path adds `ETag: "v1"`.
//!
//! For ordering, without sleeping: [`Origin::wait_for`] waits until a
//! target's K-th request has arrived, and [`Origin::hold`] keeps a target's
//! answers back until the test lets them go (so something can happen while
//! a request is known to be at the origin, unanswered); [`Origin::hold_body`]
//! keeps back all but the first 64 KiB piece of a body.
//! [`Origin::holds_expired`] says whether a hold ended by its 10 s bound
//! rather than by the test.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::{text_bytes, Pattern};

/// How the origin behaves.
#[derive(Debug, Clone, Default)]
pub struct OriginOptions {
    /// Listen on this Unix socket instead of `127.0.0.1:0`.
    pub unix: Option<PathBuf>,
    /// Close a keep-alive connection idle this long, without announcing it
    /// (Node's `keepAliveTimeout`): the cause of the pool race.
    pub idle_close: Option<Duration>,
    /// Send `Keep-Alive: timeout=N` on every response.
    pub keep_alive_hint: Option<u64>,
}

/// A running origin; stopped when dropped (listener closed, open
/// connections shut down).
pub struct Origin {
    /// The TCP address (`None` on a Unix socket).
    pub addr: Option<SocketAddr>,
    url: String,
    shared: Arc<Shared>,
}

struct Shared {
    opts: OriginOptions,
    stop: AtomicBool,
    requests: AtomicU64,
    connections: AtomicU64,
    /// Requests per target (path and query).
    per_target: Mutex<std::collections::HashMap<String, u64>>,
    /// Notified whenever `per_target` grows.
    arrived: Condvar,
    /// Targets whose answers are held back, once per [`Held`].
    held: Mutex<Vec<String>>,
    /// Notified whenever `held` shrinks.
    released: Condvar,
    /// Waits on a hold that ended by their time bound.
    holds_expired: AtomicU64,
    /// Clones of every connection, to shut them down on drop (a shutdown
    /// ends a connection whichever handle does it).
    open: Mutex<Vec<Box<dyn Stream>>>,
}

/// A TCP or Unix connection.
trait Stream: Read + Write + Send {
    fn clone_box(&self) -> io::Result<Box<dyn Stream>>;
    fn set_timeout(&self, t: Option<Duration>);
    fn close(&self);
}

macro_rules! stream {
    ($t:ty) => {
        impl Stream for $t {
            fn clone_box(&self) -> io::Result<Box<dyn Stream>> {
                Ok(Box::new(self.try_clone()?))
            }
            fn set_timeout(&self, t: Option<Duration>) {
                let _ = self.set_read_timeout(t);
            }
            fn close(&self) {
                let _ = self.shutdown(Shutdown::Both);
            }
        }
    };
}
stream!(TcpStream);
stream!(UnixStream);

type Accept = Box<dyn Fn() -> io::Result<Box<dyn Stream>> + Send>;

impl Origin {
    /// Binds and starts accepting in a background thread.
    pub fn start(opts: OriginOptions) -> Origin {
        let (accept, addr, url): (Accept, _, _) = match &opts.unix {
            Some(path) => {
                let l = UnixListener::bind(path).expect("bind unix");
                let url = format!("unix:{}", path.display());
                let accept = move || Ok(Box::new(l.accept()?.0) as Box<dyn Stream>);
                (Box::new(accept), None, url)
            }
            None => {
                let l = TcpListener::bind("127.0.0.1:0").expect("bind");
                let a = l.local_addr().expect("local addr");
                let accept = move || {
                    let c = l.accept()?.0;
                    c.set_nodelay(true)?; // like Node: no Nagle delay
                    Ok(Box::new(c) as Box<dyn Stream>)
                };
                (Box::new(accept), Some(a), format!("http://{a}"))
            }
        };
        let shared = Arc::new(Shared {
            opts,
            stop: AtomicBool::new(false),
            requests: AtomicU64::new(0),
            connections: AtomicU64::new(0),
            per_target: Mutex::new(Default::default()),
            arrived: Condvar::new(),
            held: Mutex::new(Vec::new()),
            released: Condvar::new(),
            holds_expired: AtomicU64::new(0),
            open: Mutex::new(Vec::new()),
        });
        let s = shared.clone();
        std::thread::spawn(move || loop {
            let conn = accept();
            if s.stop.load(Ordering::SeqCst) {
                return; // drops the listener
            }
            let Ok(conn) = conn else {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            };
            let id = s.connections.fetch_add(1, Ordering::SeqCst) + 1;
            if let Ok(clone) = conn.clone_box() {
                s.open.lock().expect("lock").push(clone);
            }
            let s = s.clone();
            std::thread::spawn(move || serve(conn, id, &s));
        });
        Origin { addr, url, shared }
    }

    /// The upstream as `--proxy` takes it: `http://127.0.0.1:PORT` or
    /// `unix:/path`.
    pub fn url(&self) -> String {
        self.url.clone()
    }

    /// Requests received so far (counted once their head is read).
    pub fn requests(&self) -> u64 {
        self.shared.requests.load(Ordering::SeqCst)
    }

    /// Requests received for `target` (path and query, as sent).
    pub fn count(&self, target: &str) -> u64 {
        let counts = self.shared.per_target.lock().expect("lock");
        counts.get(target).copied().unwrap_or(0)
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.shared.connections.load(Ordering::SeqCst)
    }

    /// Waits until `n` requests for `target` have arrived (as
    /// [`Origin::count`] counts them), at most `timeout`; whether they did.
    /// Woken by each arrival, so it returns as soon as the request is there.
    pub fn wait_for(&self, target: &str, n: u64, timeout: Duration) -> bool {
        let counts = self.shared.per_target.lock().expect("lock");
        let (counts, _) = self
            .shared
            .arrived
            .wait_timeout_while(counts, timeout, |c| c.get(target).copied().unwrap_or(0) < n)
            .expect("lock");
        counts.get(target).copied().unwrap_or(0) >= n
    }

    /// Holds back the answers to `target` until the returned [`Held`] is
    /// dropped: its requests are counted on arrival (see
    /// [`Origin::wait_for`]), then wait, at most 10 s, before the origin
    /// answers them as usual.
    pub fn hold(&self, target: &str) -> Held<'_> {
        let mut held = self.shared.held.lock().expect("lock");
        held.push(target.to_string());
        Held {
            origin: self,
            target: target.to_string(),
        }
    }
}

impl Origin {
    /// Holds back the rest of a body for `target` once its first 64 KiB
    /// piece (or the whole body, if smaller) is sent, until the returned
    /// [`Held`] is dropped (at most 10 s): a body known to be half sent.
    pub fn hold_body(&self, target: &str) -> Held<'_> {
        self.hold(&body_hold(target))
    }

    /// How many held answers or bodies were let go by the 10 s bound
    /// rather than by their [`Held`]: a test that releases a hold on an
    /// event checks that none was.
    pub fn holds_expired(&self) -> u64 {
        self.shared.holds_expired.load(Ordering::SeqCst)
    }
}

/// The name [`Origin::hold_body`] holds for `target`.
fn body_hold(target: &str) -> String {
    format!("{target} body")
}

/// Answers held back by [`Origin::hold`]; dropping it lets them go.
#[must_use = "the answers are let go when this is dropped"]
pub struct Held<'a> {
    origin: &'a Origin,
    target: String,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        let shared = &self.origin.shared;
        let mut held = shared.held.lock().expect("lock");
        if let Some(i) = held.iter().position(|t| *t == self.target) {
            held.remove(i);
        }
        shared.released.notify_all();
    }
}

impl Shared {
    /// Waits while `target` is held (at most 10 s).
    fn wait_while_held(&self, target: &str) {
        let held = self.held.lock().expect("lock");
        let ten_s = Duration::from_secs(10);
        let (_held, waited) = self
            .released
            .wait_timeout_while(held, ten_s, |h| h.iter().any(|t| t == target))
            .expect("lock");
        if waited.timed_out() {
            self.holds_expired.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag and drops the listener.
        if let Some(a) = &self.addr {
            drop(TcpStream::connect_timeout(a, Duration::from_secs(1)));
        } else if let Some(p) = &self.shared.opts.unix {
            drop(UnixStream::connect(p));
            let _ = std::fs::remove_file(p);
        }
        for c in self.shared.open.lock().expect("lock").iter() {
            c.close();
        }
    }
}

/// The value of `?key=N` in `target`.
fn query(target: &str, key: &str) -> Option<u64> {
    let q = target.split_once('?')?.1;
    let v = q
        .split('&')
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='));
    v?.parse().ok()
}

/// Every `key=value` of the query, percent-decoded.
fn query_all(target: &str) -> Vec<(String, String)> {
    let Some((_, q)) = target.split_once('?') else {
        return Vec::new();
    };
    let decode = |s: &str| {
        let b = s.as_bytes();
        let mut out = Vec::with_capacity(b.len());
        let mut i = 0;
        while i < b.len() {
            match (b[i], b.get(i + 1..i + 3)) {
                (b'%', Some(h)) => {
                    match u8::from_str_radix(std::str::from_utf8(h).unwrap_or("x"), 16) {
                        Ok(v) => {
                            out.push(v);
                            i += 3;
                            continue;
                        }
                        Err(_) => out.push(b'%'),
                    }
                }
                (b'+', _) => out.push(b' '),
                (c, _) => out.push(c),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    };
    q.split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (decode(k), decode(v)))
        .collect()
}

/// Serves one connection until it closes, fails, or idles out.
fn serve(conn: Box<dyn Stream>, id: u64, shared: &Shared) {
    let Ok(mut out) = conn.clone_box() else {
        return;
    };
    let mut r = BufReader::new(conn);
    let mut count = 0;
    loop {
        // Wait for the next request, at most `idle_close`.
        r.get_ref().set_timeout(shared.opts.idle_close);
        match r.fill_buf() {
            Ok(b) if !b.is_empty() => {}
            _ => break, // EOF, error, or idle for too long: close silently
        }
        r.get_ref().set_timeout(Some(Duration::from_secs(10)));
        let Ok(req) = read_request(&mut r) else {
            break;
        };
        count += 1;
        shared.requests.fetch_add(1, Ordering::SeqCst);
        let seen = {
            let mut counts = shared.per_target.lock().expect("lock");
            let c = counts.entry(req.target.clone()).or_insert(0);
            *c += 1;
            *c
        };
        shared.arrived.notify_all();
        if interim(&mut out, &req).is_err() {
            break;
        }
        shared.wait_while_held(&req.target);
        let close = req.target.starts_with("/close") || req.header("connection") == Some("close");
        let info = (id, count, close, seen);
        if respond(&mut out, &req, info, shared).is_err() || close {
            break;
        }
    }
    out.close();
}

/// The interim responses `/script` asks for (`p102`, `early`), sent as
/// soon as the request has arrived.
fn interim(out: &mut Box<dyn Stream>, req: &Echo) -> io::Result<()> {
    if !req.target.starts_with("/script") {
        return Ok(());
    }
    let params = query_all(&req.target);
    if params.iter().any(|(n, v)| n == "p102" && v == "1") {
        out.write_all(b"HTTP/1.1 102 Processing\r\n\r\n")?;
    }
    let early: String = params
        .iter()
        .filter(|(n, _)| n == "early")
        .filter_map(|(_, v)| v.split_once(':'))
        .map(|(n, v)| format!("{}: {}\r\n", n.trim(), v.trim()))
        .collect();
    if early.is_empty() {
        return Ok(());
    }
    let times = params
        .iter()
        .find(|(n, _)| n == "early_n")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(1);
    for _ in 0..times {
        out.write_all(format!("HTTP/1.1 103 Early Hints\r\n{early}\r\n").as_bytes())?;
    }
    Ok(())
}

fn read_line(r: &mut impl BufRead) -> io::Result<String> {
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(line.trim_end_matches(['\r', '\n']).to_string())
}

/// Reads a request: its head, its body (counted and checksummed into the
/// [`Echo`], not kept) and a chunked body's trailer fields.
fn read_request(r: &mut impl BufRead) -> io::Result<Echo> {
    let bad = || io::Error::from(io::ErrorKind::InvalidData);
    let line = read_line(r)?;
    let mut parts = line.split(' ');
    let (Some(method), Some(target)) = (parts.next(), parts.next()) else {
        return Err(bad());
    };
    let mut req = Echo {
        method: method.to_string(),
        target: target.to_string(),
        ..Echo::default()
    };
    loop {
        let line = read_line(r)?;
        if line.is_empty() {
            break;
        }
        let (n, v) = line.split_once(':').ok_or_else(bad)?;
        req.headers.push((n.to_string(), v.trim().to_string()));
    }
    let mut sum = Checksum::default();
    let mut piece = vec![0u8; 64 * 1024];
    let mut take = |r: &mut dyn BufRead, mut n: usize, sum: &mut Checksum| -> io::Result<()> {
        while n > 0 {
            let k = n.min(piece.len());
            r.read_exact(&mut piece[..k])?;
            sum.update(&piece[..k]);
            n -= k;
        }
        Ok(())
    };
    if req
        .header("transfer-encoding")
        .is_some_and(|t| t.contains("chunked"))
    {
        loop {
            let size = read_line(r)?;
            let size = size.split(';').next().unwrap_or("").trim();
            let size = usize::from_str_radix(size, 16).map_err(|_| bad())?;
            if size == 0 {
                loop {
                    let line = read_line(r)?;
                    if line.is_empty() {
                        break;
                    }
                    let (n, v) = line.split_once(':').ok_or_else(bad)?;
                    req.trailers.push((n.to_string(), v.trim().to_string()));
                }
                break;
            }
            take(r, size, &mut sum)?;
            read_line(r)?;
        }
    } else if let Some(len) = req.header("content-length") {
        let len: usize = len.parse().map_err(|_| bad())?;
        take(r, len, &mut sum)?;
    }
    req.body_len = sum.len;
    req.checksum = sum.hex();
    Ok(req)
}

/// A response body: bytes at hand, or `n` bytes of [`Pattern`] made as
/// they are written (so a 100 MiB download costs no 100 MiB buffer).
enum Payload {
    Data(Vec<u8>),
    Pattern(usize),
}

impl From<Vec<u8>> for Payload {
    fn from(v: Vec<u8>) -> Payload {
        Payload::Data(v)
    }
}

impl Payload {
    fn len(&self) -> usize {
        match self {
            Payload::Data(d) => d.len(),
            Payload::Pattern(n) => *n,
        }
    }
}

/// Writes the response to `req`; `(id, count, close)`: the connection's
/// number, its request count, and whether it closes after this response.
fn respond(
    out: &mut Box<dyn Stream>,
    req: &Echo,
    (id, count, close, seen): (u64, u64, bool, u64),
    shared: &Shared,
) -> io::Result<()> {
    let opts = &shared.opts;
    let mut cut = false;
    let path = req.target.split('?').next().unwrap_or("");
    let head_only = req.method == "HEAD";
    let mut status = 200;
    let mut extra = String::new();
    let mut chunked = false;
    let mut stall = None;
    let mut content_type = "text/plain";
    if query(&req.target, "etag") == Some(1) {
        extra.push_str("ETag: \"v1\"\r\n");
    }
    let body: Payload = match path {
        "/slow" => {
            let ms = query(&req.target, "ms").unwrap_or(0).min(10_000);
            std::thread::sleep(Duration::from_millis(ms));
            b"slow\n".to_vec().into()
        }
        "/text" => {
            chunked = query(&req.target, "chunked") == Some(1);
            stall = query(&req.target, "stall_ms").map(Duration::from_millis);
            if query(&req.target, "nt") == Some(1) {
                extra.push_str("Cache-Control: no-transform\r\n");
            }
            if query(&req.target, "ce") == Some(1) {
                extra.push_str("Content-Encoding: gzip\r\n");
            }
            let q = req.target.split_once('?').map_or("", |(_, q)| q);
            if q.split('&').any(|kv| kv == "type=event") {
                content_type = "text/event-stream";
            } else if q.split('&').any(|kv| kv == "type=png") {
                content_type = "image/png";
            }
            text_bytes(query(&req.target, "n").unwrap_or(0) as usize).into()
        }
        "/bytes" => {
            chunked = query(&req.target, "chunked") == Some(1);
            stall = query(&req.target, "stall_ms").map(Duration::from_millis);
            Payload::Pattern(query(&req.target, "n").unwrap_or(0) as usize)
        }
        "/status" => {
            status = query(&req.target, "code").unwrap_or(200);
            format!("status {status}\n").into_bytes().into()
        }
        "/close" => b"closing\n".to_vec().into(),
        p if p.starts_with("/script") => {
            let mut params = query_all(&req.target);
            let fail_at = params.iter().find(|(n, _)| n == "fail_at");
            // The K-th request fails, bare: a 503 without the script's headers.
            let fail = fail_at.and_then(|(_, v)| v.parse::<u64>().ok()) == Some(seen);
            if fail {
                params.clear();
            }
            let get = |k: &str| params.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
            if let Some(ms) = get("ms").and_then(|v| v.parse::<u64>().ok()) {
                std::thread::sleep(Duration::from_millis(ms.min(10_000)));
            }
            status = get("status").and_then(|v| v.parse().ok()).unwrap_or(200);
            chunked = get("chunked").as_deref() == Some("1");
            cut = get("cut").as_deref() == Some("1");
            if fail {
                status = 503;
            }
            let mut tag = None;
            if let Some(t) = get("etag") {
                let t = format!("\"{t}\"");
                if req.header("if-none-match").is_some_and(|v| v.contains(&t)) {
                    status = 304;
                }
                tag = Some(t);
            }
            let fields = |key: &str| {
                params
                    .iter()
                    .filter(|(n, _)| n == key)
                    .filter_map(|(_, v)| v.split_once(':'))
                    .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
                    .collect::<Vec<_>>()
            };
            // On a 304, `h304` fields replace the `h` fields of their name.
            let only_304 = if status == 304 {
                fields("h304")
            } else {
                Vec::new()
            };
            let h = fields("h");
            let kept = h
                .iter()
                .filter(|(n, _)| !only_304.iter().any(|(m, _)| m.eq_ignore_ascii_case(n)));
            for (name, value) in kept.chain(&only_304) {
                extra.push_str(&format!("{name}: {value}\r\n"));
            }
            if let Some(tag) = tag {
                extra.push_str(&format!("ETag: {tag}\r\n"));
            }
            match (get("body"), get("n").and_then(|n| n.parse().ok())) {
                (Some(b), _) => b.into_bytes().into(),
                (None, Some(n)) => Payload::Pattern(n),
                (None, None) => format!("count {seen}\n").into_bytes().into(),
            }
        }
        _ => {
            if query(&req.target, "hop") == Some(1) {
                extra.push_str("Connection: X-Origin-Hop\r\nX-Origin-Hop: 1\r\n");
                extra.push_str("Proxy-Connection: keep-alive\r\nX-Origin: kept\r\n");
            }
            let mut text = format!("method {}\ntarget {}\n", req.method, req.target);
            for (n, v) in &req.headers {
                text.push_str(&format!("header {n}: {v}\n"));
            }
            text.push_str(&format!(
                "body-length {}\nbody-checksum {}\n",
                req.body_len, req.checksum
            ));
            for (n, v) in &req.trailers {
                text.push_str(&format!("trailer {n}: {v}\n"));
            }
            text.into_bytes().into()
        }
    };
    let no_body = status == 204 || status == 304;
    let framing = match (no_body, chunked) {
        (true, _) => String::new(),
        (false, true) => "Transfer-Encoding: chunked\r\n".into(),
        (false, false) => format!("Content-Length: {}\r\n", body.len()),
    };
    let hint = opts
        .keep_alive_hint
        .map(|t| format!("Keep-Alive: timeout={t}\r\n"));
    let head = format!(
        "HTTP/1.1 {status} X\r\nX-Connection: {id}\r\nX-Request-Count: {count}\r\n\
         Content-Type: {content_type}\r\nServer: origin\r\n{extra}{}{}{framing}\r\n",
        if close { "Connection: close\r\n" } else { "" },
        hint.unwrap_or_default(),
    );
    out.write_all(head.as_bytes())?;
    if head_only || no_body {
        return Ok(());
    }
    let len = body.len();
    let mut pattern = Pattern::default();
    let mut scratch = Vec::new();
    let (mut sent, mut i) = (0, 0);
    while sent < len {
        let n = (len - sent).min(64 * 1024);
        if let Some(pause) = stall.filter(|_| i == len / (128 * 1024)) {
            std::thread::sleep(pause); // once, about half-way
        }
        let piece = match &body {
            Payload::Data(d) => &d[sent..sent + n],
            Payload::Pattern(_) => {
                scratch.resize(n, 0);
                pattern.fill(&mut scratch);
                &scratch[..]
            }
        };
        match chunked {
            true => out.write_all(
                &[format!("{:x}\r\n", piece.len()).as_bytes(), piece, b"\r\n"].concat(),
            )?,
            false => out.write_all(piece)?,
        }
        sent += n;
        i += 1;
        if i == 1 {
            shared.wait_while_held(&body_hold(&req.target));
            if cut {
                return Err(io::Error::other("cut mid-body, as asked"));
            }
        }
    }
    if chunked {
        out.write_all(b"0\r\n\r\n")?;
    }
    Ok(())
}

/// FNV-1a (64 bits, hex) of `data`: the `body-checksum` of [`Echo`].
pub fn checksum(data: &[u8]) -> String {
    let mut sum = Checksum::default();
    sum.update(data);
    sum.hex()
}

/// [`checksum`] computed piece by piece, with the length seen.
#[derive(Debug, Clone)]
pub struct Checksum {
    h: u64,
    /// Bytes seen so far.
    pub len: usize,
}

impl Default for Checksum {
    fn default() -> Checksum {
        Checksum {
            h: 0xcbf2_9ce4_8422_2325,
            len: 0,
        }
    }
}

impl Checksum {
    /// Adds the next piece.
    pub fn update(&mut self, data: &[u8]) {
        let mut h = self.h;
        for &b in data {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        self.h = h;
        self.len += data.len();
    }

    /// The checksum so far, as [`checksum`] writes it.
    pub fn hex(&self) -> String {
        format!("{:016x}", self.h)
    }
}

/// What `/echo` reports the origin saw.
#[derive(Debug, Clone, Default)]
pub struct Echo {
    /// Request method.
    pub method: String,
    /// Request target.
    pub target: String,
    /// Header fields in order, names as sent.
    pub headers: Vec<(String, String)>,
    /// Body length in bytes.
    pub body_len: usize,
    /// [`checksum`] of the body.
    pub checksum: String,
    /// Trailer fields of a chunked body, in order, names as sent.
    pub trailers: Vec<(String, String)>,
}

impl Echo {
    /// Parses an `/echo` response body.
    pub fn parse(text: &str) -> Echo {
        let mut e = Echo::default();
        for line in text.lines() {
            let (key, rest) = line.split_once(' ').unwrap_or((line, ""));
            match key {
                "method" => e.method = rest.to_string(),
                "target" => e.target = rest.to_string(),
                "header" => {
                    let (n, v) = rest.split_once(':').unwrap_or((rest, ""));
                    e.headers.push((n.to_string(), v.trim().to_string()));
                }
                "body-length" => e.body_len = rest.parse().expect("body length"),
                "body-checksum" => e.checksum = rest.to_string(),
                "trailer" => {
                    let (n, v) = rest.split_once(':').unwrap_or((rest, ""));
                    e.trailers.push((n.to_string(), v.trim().to_string()));
                }
                _ => {}
            }
        }
        e
    }

    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The first value of trailer field `name` (case-insensitive).
    pub fn trailer(&self, name: &str) -> Option<&str> {
        self.trailers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}
