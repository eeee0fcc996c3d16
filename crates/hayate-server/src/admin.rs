//! The admin listener: `GET /` (the live status page, `status_page.rs`),
//! `GET /status.json` (its data, `status_json.rs`; also `/status` asked
//! with `Accept: application/json`), `GET /metrics` (Prometheus text
//! format) and `GET /status` (the `hayate status` table). Off unless `admin` is set,
//! and bound only to the address given (a bare port means 127.0.0.1; a Unix
//! socket is owner-only). It runs on the main thread's runtime, away from
//! the workers; each connection answers one request and closes.

use std::io;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::{Bytes, BytesMut};
use hayate_config::app::AdminAddr;
use hayate_core::h1::request::{self, HeadLimits, Parsed, Spare};
use hayate_core::h1::response::{self, HeadContext};
use hayate_core::metrics::Metrics;
use hayate_core::request::RequestHead;
use hayate_core::transport::{Listener, Scheme, Transport};
use hayate_core::{Body, Response, Status};
use socket2::Socket;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Semaphore;

use hayate_cache::ResponseCache;

use crate::cached::CacheSlot;
use crate::status_json::{self, ServerInfo};
use crate::status_page::StatusPage;
use crate::StatusFn;

const TEXT: &str = "text/plain; charset=utf-8";

/// Admin connections served at once; more are closed at accept.
const MAX_CONNECTIONS: usize = 16;
/// Limits of an admin request: a small head (8 KiB), no body.
const LIMITS: HeadLimits = HeadLimits {
    max_request_line: 4 * 1024,
    max_header_bytes: 8 * 1024,
    max_headers: 64,
    max_body_size: 0,
};
/// Time to send the request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// Time to take the answer: a client that never reads a response larger
/// than its socket holds (/metrics of many routes) would keep its slot, and
/// 16 of them every slot (decision 0014).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// Binds the admin address (inside a runtime), or takes the socket a
/// replaced hayate handed over; returns the listening socket and where it
/// answers, for the log.
pub fn bind(addr: &AdminAddr, inherited: Option<Socket>) -> io::Result<(Socket, String)> {
    let socket = match (inherited, addr) {
        (Some(socket), _) => socket,
        (None, AdminAddr::Tcp(a)) => std::net::TcpListener::bind(a)
            .map_err(|e| io::Error::new(e.kind(), format!("admin listener {a}: {e}")))?
            .into(),
        (None, AdminAddr::Unix(path)) => crate::control::bind(path)?.into_std()?.into(),
    };
    socket.set_nonblocking(true)?;
    let url = match addr {
        AdminAddr::Tcp(_) => match socket.local_addr()?.as_socket() {
            Some(a) => format!("http://{a}/"),
            None => return Err(io::Error::other("the admin socket is not a TCP one")),
        },
        AdminAddr::Unix(path) => format!("unix:{}", path.display()),
    };
    Ok((socket, url))
}

/// What the admin endpoints read.
pub struct Sources {
    /// The registry `/metrics` renders and `/status.json` reads back.
    pub metrics: Metrics,
    /// The supervisor's table, when an app runs.
    pub status: Option<StatusFn>,
    /// The response cache, for purges.
    pub cache: CacheSlot,
    /// Version, uptime, workers, config file, last reload.
    pub info: Arc<ServerInfo>,
}

/// Answers admin requests until the runtime stops.
pub async fn serve(listener: Listener, sources: Sources) {
    let sources = Arc::new((sources, StatusPage::build()));
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let conn = match listener.accept().await {
            Ok((conn, _peer)) => conn,
            Err(e) => {
                log::warn!("admin accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            continue; // dropped: closed
        };
        let sources = sources.clone();
        tokio::spawn(async move {
            let (s, page) = &*sources;
            let cache = s.cache.load_full();
            let ctx = Context {
                metrics: &s.metrics,
                status: s.status.as_deref(),
                cache: cache.as_deref(),
                info: &s.info,
                page,
            };
            if let Err(e) = answer(conn, &ctx).await {
                log::debug!("admin connection: {e}");
            }
            drop(permit);
        });
    }
}

/// What the admin endpoints read and act on.
#[derive(Clone, Copy)]
struct Context<'a> {
    metrics: &'a Metrics,
    status: Option<&'a (dyn Fn() -> String + Send + Sync)>,
    cache: Option<&'a ResponseCache>,
    info: &'a ServerInfo,
    page: &'a StatusPage,
}

/// Reads one request with the HTTP/1 codec and answers it.
async fn answer(mut s: Transport, ctx: &Context<'_>) -> io::Result<()> {
    let mut buf = BytesMut::with_capacity(1024);
    let read = tokio::time::timeout(HEAD_TIMEOUT, async {
        loop {
            match request::parse(&mut buf, &LIMITS, &mut Spare::default(), Scheme::Http) {
                Parsed::Request(req) => return Ok(Ok(req)),
                Parsed::Refused(refusal) => return Ok(Err(refusal.status)),
                Parsed::Partial => {}
            }
            if s.read_buf(&mut buf).await? == 0 {
                return Err(io::Error::other("closed before a complete head"));
            }
        }
    })
    .await;
    let (resp, head_request) = match read {
        Ok(Ok(Ok(req))) => (route(&req.head, ctx), req.head.method() == b"HEAD"),
        Ok(Ok(Err(status))) => (text(status, "bad request\n".into()), false),
        Ok(Err(e)) => return Err(e),
        Err(_) => (
            text(Status::REQUEST_TIMEOUT, "request head timed out\n".into()),
            false,
        ),
    };
    let out = serialize(resp, head_request);
    let written = tokio::time::timeout(ANSWER_TIMEOUT, async {
        s.write_all(&out).await?;
        s.shutdown().await
    })
    .await;
    written.unwrap_or_else(|_| {
        Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "the client did not take the answer",
        ))
    })
}

/// The answer in HTTP/1 (the connection closes after it).
fn serialize(resp: Response, head_request: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(512);
    let cx = HeadContext {
        head_request,
        http10: false,
        keep_alive: false,
    };
    if response::write_head(&mut out, &resp, cx, SystemTime::now()) {
        if let Body::Bytes(body) = &resp.body {
            out.extend_from_slice(body);
        }
    }
    out
}

/// A plain-text answer that no cache keeps.
fn text(status: Status, body: String) -> Response {
    text_as(status, TEXT, body)
}

fn text_as(status: Status, content_type: &str, body: String) -> Response {
    let mut r = Response::new(status);
    r.header("Content-Type", content_type.as_bytes());
    r.header("Cache-Control", b"no-store");
    r.body = Body::Bytes(Bytes::from(body));
    r
}

fn route(req: &RequestHead, ctx: &Context<'_>) -> Response {
    let (method, path, query) = (req.method(), req.path(), req.query().unwrap_or_default());
    if method == b"POST" && path == b"/purge" {
        let param = |name: &[u8]| {
            query.split(|&b| b == b'&').find_map(|kv| {
                let v = kv.strip_prefix(name)?.strip_prefix(b"=")?;
                String::from_utf8(hayate_core::path::decode(v).ok()?).ok()
            })
        };
        return match (param(b"url"), param(b"tag")) {
            (Some(url), _) => text(
                Status::OK,
                crate::cached::purge(ctx.cache, Some(&url), None),
            ),
            (None, Some(tag)) => text(
                Status::OK,
                crate::cached::purge(ctx.cache, None, Some(&tag)),
            ),
            (None, None) => text(
                Status::BAD_REQUEST,
                "POST /purge?url=URL or /purge?tag=TAG\n".into(),
            ),
        };
    }
    if method != b"GET" && method != b"HEAD" {
        let mut r = text(
            Status::METHOD_NOT_ALLOWED,
            "GET or HEAD (POST /purge)\n".into(),
        );
        r.header("Allow", b"GET, HEAD, POST");
        return r;
    }
    let wants_json = req
        .headers_named(b"accept")
        .any(|v| contains(v, b"application/json"));
    match path {
        b"/" => ctx.page.response(req),
        b"/status.json" => json(ctx),
        b"/status" if wants_json => json(ctx),
        b"/metrics" => text_as(
            Status::OK,
            "text/plain; version=0.0.4; charset=utf-8",
            ctx.metrics.render(),
        ),
        b"/status" => text(
            Status::OK,
            ctx.status
                .map_or_else(|| "no app runs\n".to_string(), |s| s()),
        ),
        _ => text(
            Status::NOT_FOUND,
            "not found: GET /, /status.json, /metrics or /status, POST /purge\n".into(),
        ),
    }
}

fn json(ctx: &Context<'_>) -> Response {
    let mut r = text_as(
        Status::OK,
        "application/json",
        status_json::render(ctx.metrics, ctx.info),
    );
    r.header("X-Content-Type-Options", b"nosniff");
    r
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route_raw(raw: &[u8], ctx: &Context<'_>) -> (u16, String) {
        let mut buf = BytesMut::from(raw);
        let Parsed::Request(req) =
            request::parse(&mut buf, &LIMITS, &mut Spare::default(), Scheme::Http)
        else {
            panic!("parse {raw:?}")
        };
        let r = route(&req.head, ctx);
        let body = match &r.body {
            Body::Bytes(b) => String::from_utf8_lossy(b).into_owned(),
            _ => String::new(),
        };
        (r.status.code(), body)
    }

    #[test]
    fn routes_metrics_status_and_refusals() {
        let m = Metrics::default();
        m.register_fn(|out| out.push_str("x 1\n"));
        let status = || "table\n".to_string();
        let info = ServerInfo::new(2, None);
        let page = StatusPage::build();
        let ctx = Context {
            metrics: &m,
            status: Some(&status),
            cache: None,
            info: &info,
            page: &page,
        };
        assert_eq!(
            route_raw(b"GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n", &ctx).1,
            "x 1\n"
        );
        assert_eq!(
            route_raw(b"GET /status?x HTTP/1.1\r\nHost: a\r\n\r\n", &ctx).1,
            "table\n"
        );
        let no_app = Context {
            status: None,
            ..ctx
        };
        assert_eq!(
            route_raw(b"GET /status HTTP/1.1\r\nHost: a\r\n\r\n", &no_app).1,
            "no app runs\n"
        );
        assert_eq!(
            route_raw(b"POST /metrics HTTP/1.1\r\nHost: a\r\n\r\n", &ctx).0,
            405
        );
        assert_eq!(
            route_raw(b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n", &ctx).0,
            404
        );
        let (code, page) = route_raw(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", &ctx);
        assert_eq!(code, 200);
        assert!(page.starts_with("<!doctype html>"), "{page}");
        let json = |raw: &[u8]| {
            let (code, body) = route_raw(raw, &ctx);
            assert_eq!(code, 200);
            serde_json::from_str::<serde_json::Value>(&body).expect("json")["workers"].clone()
        };
        assert_eq!(json(b"GET /status.json HTTP/1.1\r\nHost: a\r\n\r\n"), 2);
        assert_eq!(
            json(b"GET /status HTTP/1.1\r\nHost: a\r\nAccept: text/html, Application/JSON\r\n\r\n"),
            2
        );
        assert_eq!(
            route_raw(b"POST /purge HTTP/1.1\r\nHost: a\r\n\r\n", &ctx).0,
            400
        );
        assert!(
            route_raw(b"POST /purge?tag=a HTTP/1.1\r\nHost: a\r\n\r\n", &ctx)
                .1
                .contains("no route caches")
        );
        assert_eq!(
            route_raw(b"POST /purge?url=%zz HTTP/1.1\r\nHost: a\r\n\r\n", &ctx).0,
            400
        );
    }
}
