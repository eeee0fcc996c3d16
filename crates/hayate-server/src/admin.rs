//! The admin listener: `GET /metrics` (Prometheus text format) and
//! `GET /status` (the `hayate status` table). Off unless `admin` is set,
//! and bound only to the address given (a bare port means 127.0.0.1; a Unix
//! socket is owner-only). It runs on the main thread's runtime, away from
//! the workers; each connection answers one request and closes.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use hayate_config::app::AdminAddr;
use hayate_core::metrics::Metrics;
use hayate_core::transport::{Listener, Scheme, Transport};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Semaphore;

use hayate_cache::ResponseCache;

use crate::StatusFn;

const TEXT: &str = "text/plain; charset=utf-8";

/// Admin connections served at once; more are closed at accept.
const MAX_CONNECTIONS: usize = 16;
/// Longest request head, and the time to send it.
const MAX_HEAD: usize = 8 * 1024;
const HEAD_TIMEOUT: Duration = Duration::from_secs(5);

/// Binds the admin address (inside a runtime); returns the listener and
/// where it answers, for the log.
pub fn bind(addr: &AdminAddr) -> io::Result<(Listener, String)> {
    match addr {
        AdminAddr::Tcp(a) => {
            let std = std::net::TcpListener::bind(a)
                .map_err(|e| io::Error::new(e.kind(), format!("admin listener {a}: {e}")))?;
            std.set_nonblocking(true)?;
            let url = format!("http://{}/", std.local_addr()?);
            Ok((Listener::new(std.into(), Scheme::Http)?, url))
        }
        AdminAddr::Unix(path) => {
            let l = crate::control::bind(path)?.into_std()?;
            let url = format!("unix:{}", path.display());
            Ok((Listener::new(l.into(), Scheme::Http)?, url))
        }
    }
}

/// Answers admin requests until the runtime stops.
pub async fn serve(
    listener: Listener,
    metrics: Metrics,
    status: Option<StatusFn>,
    cache: Option<Arc<ResponseCache>>,
) {
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
        let (metrics, status, cache) = (metrics.clone(), status.clone(), cache.clone());
        tokio::spawn(async move {
            let ctx = Context {
                metrics: &metrics,
                status: status.as_deref(),
                cache: cache.as_deref(),
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
}

async fn answer(mut s: Transport, ctx: &Context<'_>) -> io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let read = tokio::time::timeout(HEAD_TIMEOUT, async {
        let mut buf = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            if head.len() > MAX_HEAD {
                return Err(io::Error::other("head too large"));
            }
            let n = s.read(&mut buf).await?;
            if n == 0 {
                return Err(io::Error::other("closed before a complete head"));
            }
            head.extend_from_slice(&buf[..n]);
        }
        Ok(())
    })
    .await;
    let (code, content_type, body) = match read {
        Ok(Ok(())) => route(&head, ctx),
        Ok(Err(_)) | Err(_) => (400, "text/plain; charset=utf-8", "bad request\n".into()),
    };
    let head_only = head.starts_with(b"HEAD ");
    let reason = match code {
        200 => "OK",
        404 => "Not Found",
        405 => "Method Not Allowed",
        _ => "Bad Request",
    };
    let mut out = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Cache-Control: no-store\r\nConnection: close\r\n",
        body.len()
    );
    if code == 405 {
        out.push_str("Allow: GET, HEAD, POST\r\n");
    }
    out.push_str("\r\n");
    if !head_only {
        out.push_str(&body);
    }
    s.write_all(out.as_bytes()).await?;
    s.shutdown().await
}

fn route(head: &[u8], ctx: &Context<'_>) -> (u16, &'static str, String) {
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let mut parts = line.split(|&b| b == b' ');
    let (Some(method), Some(target)) = (parts.next(), parts.next()) else {
        return (400, "text/plain; charset=utf-8", "bad request\n".into());
    };
    let mut split = target.splitn(2, |&b| b == b'?');
    let path = split.next().unwrap_or_default();
    let query = split.next().unwrap_or_default();
    if method == b"POST" && path == b"/purge" {
        let param = |name: &[u8]| {
            query.split(|&b| b == b'&').find_map(|kv| {
                let v = kv.strip_prefix(name)?.strip_prefix(b"=")?;
                String::from_utf8(hayate_core::path::decode(v).ok()?).ok()
            })
        };
        return match (param(b"url"), param(b"tag")) {
            (Some(url), _) => (200, TEXT, crate::cached::purge(ctx.cache, Some(&url), None)),
            (None, Some(tag)) => (200, TEXT, crate::cached::purge(ctx.cache, None, Some(&tag))),
            (None, None) => (400, TEXT, "POST /purge?url=URL or /purge?tag=TAG\n".into()),
        };
    }
    if method != b"GET" && method != b"HEAD" {
        return (
            405,
            "text/plain; charset=utf-8",
            "GET or HEAD (POST /purge)\n".into(),
        );
    }
    match path {
        b"/metrics" => (
            200,
            "text/plain; version=0.0.4; charset=utf-8",
            ctx.metrics.render(),
        ),
        b"/status" => (
            200,
            "text/plain; charset=utf-8",
            ctx.status
                .map_or_else(|| "no app runs\n".to_string(), |s| s()),
        ),
        _ => (
            404,
            "text/plain; charset=utf-8",
            "not found: GET /metrics or /status, POST /purge\n".into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_metrics_status_and_refusals() {
        let m = Metrics::default();
        m.register_fn(|out| out.push_str("x 1\n"));
        let status = || "table\n".to_string();
        let ctx = Context {
            metrics: &m,
            status: Some(&status),
            cache: None,
        };
        assert_eq!(route(b"GET /metrics HTTP/1.1\r\n\r\n", &ctx).2, "x 1\n");
        assert_eq!(route(b"GET /status?x HTTP/1.1\r\n\r\n", &ctx).2, "table\n");
        let no_app = Context {
            status: None,
            ..ctx
        };
        assert_eq!(
            route(b"GET /status HTTP/1.1\r\n\r\n", &no_app).2,
            "no app runs\n"
        );
        assert_eq!(route(b"POST /metrics HTTP/1.1\r\n\r\n", &ctx).0, 405);
        assert_eq!(route(b"GET / HTTP/1.1\r\n\r\n", &ctx).0, 404);
        assert_eq!(route(b"\r\n\r\n", &ctx).0, 400);
        assert_eq!(route(b"POST /purge HTTP/1.1\r\n\r\n", &ctx).0, 400);
        assert!(route(b"POST /purge?tag=a HTTP/1.1\r\n\r\n", &ctx)
            .2
            .contains("no route caches"));
        assert_eq!(route(b"POST /purge?url=%zz HTTP/1.1\r\n\r\n", &ctx).0, 400);
    }
}
