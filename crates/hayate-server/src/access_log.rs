//! The access log: one line per response, in NCSA combined or JSON format,
//! buffered per worker and written in whole lines (a write per 32 KiB or per
//! second), so logging costs a memcpy per request, not a syscall.
//!
//! Values from the request are escaped (`\xHH` for quotes, backslashes and
//! control bytes, as nginx does), so a client cannot forge log lines.

use std::cell::RefCell;
use std::io::{self, Write};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use hayate_config::values::{AccessLog as Target, LogFormat};
use hayate_config::GlobalOptions;
use hayate_core::logfile::RotatingLog;

use hayate_core::request::RequestHead;
use hayate_core::transport::TlsInfo;

/// Buffered bytes that trigger a write.
const FLUSH_AT: usize = 32 * 1024;

/// Where lines go; files are opened once and shared by the workers
/// (O_APPEND keeps whole-buffer writes from interleaving).
#[derive(Debug, Clone)]
pub enum Sink {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
    /// An append-only file, rotated at a size when asked to, opened again
    /// by [`Sink::reopen`].
    File(Arc<RotatingLog>),
}

impl Sink {
    /// Opens the sink a config names; `None` when logging is off. A file
    /// rotates at `rotate_at` bytes or `max_age`, keeping `keep` old files.
    pub fn open(
        target: &Target,
        rotate_at: Option<u64>,
        max_age: Option<Duration>,
        keep: u32,
    ) -> io::Result<Option<Sink>> {
        Ok(match target {
            Target::Off => None,
            Target::Stdout => Some(Sink::Stdout),
            Target::Stderr => Some(Sink::Stderr),
            Target::File(path) => Some(Sink::File(Arc::new(
                RotatingLog::open(path, rotate_at.unwrap_or(u64::MAX), keep as usize)
                    .map_err(|e| {
                        io::Error::new(e.kind(), format!("access log {}: {e}", path.display()))
                    })?
                    .with_max_age(max_age),
            ))),
        })
    }

    /// The sink the global options name (`access_log`, `access_log_size`,
    /// `access_log_age`, `access_log_keep`).
    pub fn from_config(g: &GlobalOptions) -> io::Result<Option<Sink>> {
        Sink::open(
            &g.access_log,
            g.access_log_size.map(|s| s.0),
            g.access_log_age.map(|d| d.0),
            g.access_log_keep,
        )
    }

    /// The file it writes to, if it is one.
    pub fn path(&self) -> Option<&Path> {
        match self {
            Sink::File(log) => Some(log.path()),
            _ => None,
        }
    }

    /// Opens a file sink again at its path (SIGUSR1, logrotate's
    /// `postrotate`): lines written from now on, buffered ones included,
    /// go to the file now at that path. On failure the old file stays.
    pub fn reopen(&self) -> io::Result<()> {
        if let Sink::File(log) = self {
            log.reopen()?;
        }
        Ok(())
    }

    fn write_all(&self, data: &[u8]) -> io::Result<()> {
        match self {
            Sink::Stdout => io::stdout().lock().write_all(data),
            Sink::Stderr => io::stderr().lock().write_all(data),
            Sink::File(log) => log.write_all(data),
        }
    }
}

/// A worker's access log.
#[derive(Debug)]
pub struct AccessLog {
    format: LogFormat,
    sink: Sink,
    buf: RefCell<Vec<u8>>,
}

/// What the log records of one exchange besides the request.
#[derive(Debug, Clone, Copy)]
pub struct Entry<'a> {
    /// Client address (`-` for Unix sockets).
    pub peer: &'a str,
    /// Response status.
    pub status: u16,
    /// Body bytes sent.
    pub bytes: u64,
    /// Time from a complete head to the response written.
    pub duration: Duration,
    /// What the response cache did, on routes that cache.
    pub cache: Option<&'static str>,
    /// The TLS version and cipher suite, over HTTPS (JSON format).
    pub tls: Option<TlsInfo>,
    /// A gRPC call's `grpc-status`, from the answer's trailers (or its
    /// head, trailers-only): the HTTP status of a call is 200 whatever
    /// became of it.
    pub grpc_status: Option<u16>,
}

impl AccessLog {
    /// A log writing to `sink`.
    pub fn new(format: LogFormat, sink: Sink) -> AccessLog {
        AccessLog {
            format,
            sink,
            buf: RefCell::new(Vec::with_capacity(FLUSH_AT + 1024)),
        }
    }

    /// Records one exchange.
    pub fn record(&self, req: &RequestHead, e: &Entry<'_>) {
        let mut buf = self.buf.borrow_mut();
        match self.format {
            LogFormat::Combined => combined(&mut buf, req, e),
            LogFormat::Json => json(&mut buf, req, e),
        }
        if buf.len() >= FLUSH_AT {
            let data = std::mem::take(&mut *buf);
            drop(buf);
            self.write(data);
        }
    }

    /// Writes what is buffered.
    pub fn flush(&self) {
        let data = std::mem::take(&mut *self.buf.borrow_mut());
        if !data.is_empty() {
            self.write(data);
        }
    }

    fn write(&self, mut data: Vec<u8>) {
        if let Err(e) = self.sink.write_all(&data) {
            log::error!("access log write failed: {e}");
        }
        data.clear();
        let mut buf = self.buf.borrow_mut();
        if buf.is_empty() && buf.capacity() < data.capacity() {
            *buf = data; // keep the allocation
        }
    }
}

fn combined(out: &mut Vec<u8>, req: &RequestHead, e: &Entry<'_>) {
    let mut time = String::with_capacity(32);
    hayate_core::date::clf_now(&mut time);
    out.extend_from_slice(e.peer.as_bytes());
    out.extend_from_slice(b" - - [");
    out.extend_from_slice(time.as_bytes());
    out.extend_from_slice(b"] \"");
    escape(out, req.method());
    out.push(b' ');
    escape(out, req.original_target());
    out.push(b' ');
    out.extend_from_slice(req.version.as_str().as_bytes());
    out.extend_from_slice(b"\" ");
    out.extend_from_slice(itoa::Buffer::new().format(e.status).as_bytes());
    out.push(b' ');
    out.extend_from_slice(itoa::Buffer::new().format(e.bytes).as_bytes());
    out.extend_from_slice(b" \"");
    escape(out, req.header(b"referer").unwrap_or(b"-"));
    out.extend_from_slice(b"\" \"");
    escape(out, req.header(b"user-agent").unwrap_or(b"-"));
    out.push(b'"');
    if let Some(c) = e.cache {
        out.extend_from_slice(b" cache=");
        out.extend_from_slice(c.as_bytes());
    }
    if let Some(g) = e.grpc_status {
        out.extend_from_slice(b" grpc-status=");
        out.extend_from_slice(itoa::Buffer::new().format(g).as_bytes());
    }
    out.push(b'\n');
}

fn json(out: &mut Vec<u8>, req: &RequestHead, e: &Entry<'_>) {
    let mut time = String::with_capacity(32);
    hayate_core::date::iso_now(&mut time);
    out.extend_from_slice(b"{\"time\":\"");
    out.extend_from_slice(time.as_bytes());
    out.extend_from_slice(b"\",\"remote\":\"");
    json_escape(out, e.peer.as_bytes());
    out.extend_from_slice(b"\",\"method\":\"");
    json_escape(out, req.method());
    out.extend_from_slice(b"\",\"uri\":\"");
    json_escape(out, req.original_target());
    out.extend_from_slice(b"\",\"protocol\":\"");
    out.extend_from_slice(req.version.as_str().as_bytes());
    out.extend_from_slice(b"\",\"host\":\"");
    json_escape(out, req.host().unwrap_or_default());
    out.extend_from_slice(b"\",\"status\":");
    out.extend_from_slice(itoa::Buffer::new().format(e.status).as_bytes());
    out.extend_from_slice(b",\"bytes\":");
    out.extend_from_slice(itoa::Buffer::new().format(e.bytes).as_bytes());
    out.extend_from_slice(b",\"duration_us\":");
    out.extend_from_slice(
        itoa::Buffer::new()
            .format(e.duration.as_micros() as u64)
            .as_bytes(),
    );
    out.extend_from_slice(b",\"referer\":\"");
    json_escape(out, req.header(b"referer").unwrap_or_default());
    out.extend_from_slice(b"\",\"user_agent\":\"");
    json_escape(out, req.header(b"user-agent").unwrap_or_default());
    out.push(b'"');
    if let Some(c) = e.cache {
        out.extend_from_slice(b",\"cache\":\"");
        out.extend_from_slice(c.as_bytes());
        out.push(b'"');
    }
    if let Some(tls) = e.tls {
        out.extend_from_slice(b",\"tls\":\"");
        out.extend_from_slice(tls.version.as_bytes());
        out.extend_from_slice(b"\",\"cipher\":\"");
        out.extend_from_slice(tls.cipher.as_bytes());
        out.push(b'"');
    }
    if let Some(g) = e.grpc_status {
        out.extend_from_slice(b",\"grpc_status\":");
        out.extend_from_slice(itoa::Buffer::new().format(g).as_bytes());
    }
    out.extend_from_slice(b"}\n");
}

fn escape(out: &mut Vec<u8>, s: &[u8]) {
    for &b in s {
        if b == b'"' || b == b'\\' || !(0x20..0x7f).contains(&b) {
            out.extend_from_slice(format!("\\x{b:02X}").as_bytes());
        } else {
            out.push(b);
        }
    }
}

fn json_escape(out: &mut Vec<u8>, s: &[u8]) {
    for &b in s {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            // Non-ASCII bytes may not be UTF-8: escape them as code points.
            b if !(0x20..0x7f).contains(&b) => {
                out.extend_from_slice(format!("\\u{:04x}", b).as_bytes())
            }
            b => out.push(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hayate_core::h1::request::{parse, HeadLimits, Parsed};

    fn request(raw: &str) -> RequestHead {
        let limits = HeadLimits {
            max_request_line: 1000,
            max_header_bytes: 1000,
            max_headers: 10,
            max_body_size: 0,
        };
        match parse(
            &mut bytes::BytesMut::from(raw.as_bytes()),
            &limits,
            &mut Default::default(),
            hayate_core::transport::Scheme::Http,
        ) {
            Parsed::Request(r) => r.head,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn lines_escape_client_values() {
        let req = request(
            "GET /a?\"x\" HTTP/1.1\r\nHost: h\r\nUser-Agent: evil\"\\ agent\r\nReferer: r\r\n\r\n",
        );
        let e = Entry {
            peer: "127.0.0.1",
            status: 200,
            bytes: 12,
            duration: Duration::from_micros(7),
            cache: None,
            tls: None,
            grpc_status: None,
        };
        let mut out = Vec::new();
        combined(&mut out, &req, &e);
        let line = String::from_utf8(out).expect("ascii");
        assert!(line.starts_with("127.0.0.1 - - ["), "{line}");
        assert!(
            line.ends_with(
                "] \"GET /a?\\x22x\\x22 HTTP/1.1\" 200 12 \"r\" \"evil\\x22\\x5C agent\"\n"
            ),
            "{line}"
        );
        let mut out = Vec::new();
        combined(
            &mut out,
            &req,
            &Entry {
                cache: Some("HIT"),
                tls: None,
                grpc_status: Some(14),
                ..e
            },
        );
        assert!(out.ends_with(b"agent\" cache=HIT grpc-status=14\n"));
        let mut out = Vec::new();
        json(
            &mut out,
            &req,
            &Entry {
                cache: Some("MISS"),
                tls: Some(TlsInfo {
                    version: "TLSv1.3",
                    cipher: "TLS13_AES_128_GCM_SHA256",
                }),
                grpc_status: Some(0),
                ..e
            },
        );
        assert!(out.ends_with(
            b",\"cache\":\"MISS\",\"tls\":\"TLSv1.3\",\"cipher\":\"TLS13_AES_128_GCM_SHA256\",\"grpc_status\":0}\n"
        ));
        let mut out = Vec::new();
        json(&mut out, &req, &e);
        let line = String::from_utf8(out).expect("ascii");
        assert!(line.contains("\"uri\":\"/a?\\\"x\\\"\""), "{line}");
        assert!(
            line.contains("\"user_agent\":\"evil\\\"\\\\ agent\""),
            "{line}"
        );
        assert!(
            line.contains("\"status\":200,\"bytes\":12,\"duration_us\":7"),
            "{line}"
        );
    }
}
