//! The access log: one line per response, in a preset format (NCSA
//! combined or common, JSON, Elastic Common Schema) or a template of
//! `$variables` (`format.rs`), buffered per worker and written in whole
//! lines (a write per 32 KiB or per second), so logging costs a memcpy per
//! request, not a syscall.
//!
//! Values from the request are escaped (`\xHH` for quotes, backslashes and
//! control bytes, as nginx does; JSON escapes in JSON lines), so a client
//! cannot forge log lines.

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
use hayate_core::UpstreamTimes;

mod format;
pub use format::request_id;

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

/// Records an exchange of generation `g`: its access log line, the error
/// log's line when it was slower than `slow_request`, and its span when it
/// is traced. The route's name is looked up only when one of them writes
/// it.
pub(crate) fn record<'a>(
    g: &'a crate::worker::Generation,
    req: &RequestHead,
    served: Served,
    mut entry: Entry<'a>,
) {
    let slow = g.slow_request.filter(|limit| entry.duration >= *limit);
    let traced = req.trace.as_deref().filter(|t| t.sampled);
    let named = slow.is_some()
        || traced.is_some()
        || g.access_log.as_ref().is_some_and(AccessLog::names_route);
    if named {
        entry.route = served.route.and_then(|i| g.router.route_name(i));
    }
    if let Some(log) = &g.access_log {
        log.record(req, &entry);
    }
    if slow.is_some() {
        crate::slow_request::report(req, &entry);
    }
    if let (Some(trace), Some(tracer)) = (traced, &g.tracer) {
        let member = served
            .route
            .zip(entry.upstream)
            .and_then(|(route, u)| g.router.upstream_member(route, u.member));
        tracer.finish(req, trace, &entry, member);
    }
}

/// A worker's access log.
#[derive(Debug)]
pub struct AccessLog {
    format: LogFormat,
    sink: Sink,
    buf: RefCell<Vec<u8>>,
}

/// What a response tells the access log and `slow_request`, kept as its
/// body is sent (the response itself is gone by then).
#[derive(Debug, Clone, Copy, Default)]
pub struct Served {
    /// What the response cache did, on routes that cache.
    pub cache: Option<&'static str>,
    /// How the upstream answered, for a proxied response.
    pub upstream: Option<UpstreamTimes>,
    /// The route that answered (its index), if one did.
    pub route: Option<usize>,
}

impl Served {
    /// What `resp`, answered by route `route`, tells.
    pub fn of(resp: &hayate_core::Response, route: Option<usize>) -> Served {
        Served {
            cache: resp.cache_status.copied(),
            upstream: resp.upstream_times(),
            route,
        }
    }
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
    /// The TLS version and cipher suite, over HTTPS.
    pub tls: Option<TlsInfo>,
    /// How the upstream answered, for a proxied response.
    pub upstream: Option<UpstreamTimes>,
    /// The route that answered: its site's first host and its prefix.
    pub route: Option<(&'a str, &'a [u8])>,
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

    /// Whether lines name the route (worth looking its name up).
    pub fn names_route(&self) -> bool {
        match &self.format {
            LogFormat::Ecs => true,
            LogFormat::Template(t) => t.uses(hayate_config::values::LogVariable::Route),
            LogFormat::Combined | LogFormat::Common | LogFormat::Json => false,
        }
    }

    /// Records one exchange.
    pub fn record(&self, req: &RequestHead, e: &Entry<'_>) {
        let mut buf = self.buf.borrow_mut();
        format::line(&mut buf, &self.format, req, e);
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
