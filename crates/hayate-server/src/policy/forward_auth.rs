//! forward_auth: an auth service decides (nginx's `auth_request`, Caddy's
//! `forward_auth`, Traefik's ForwardAuth; Authelia, Authentik,
//! oauth2-proxy answer it).
//!
//! Each request first becomes a `GET` to the service's URL, carrying the
//! named fields of the original (`forward_auth_headers`: its cookies and
//! credentials) and where it was going: `X-Forwarded-Method`, `-Uri`,
//! `-Host`, `-Proto`, `-For` (the client identify decided) and
//! `X-Original-URL`. A 2xx lets it through, with the fields
//! `forward_auth_copy` names taken from that answer (every one of them must
//! be there, or the 2xx is a failure; a client's own copies of those names
//! are removed whatever the answer: nobody sends `Remote-User: admin` past
//! this). Any other answer, a 401, a 403 or a
//! redirect to the login page, goes back to the client as the service sent
//! it. The service down, slow past `forward_auth_timeout`, or failing (5xx)
//! refuses the request with 503: this gate fails closed.
//!
//! The subrequest goes through an upstream group of its own, so it uses
//! kept-alive connections, the retry rules and the passive ejection of any
//! proxied request.

use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use hayate_core::client_body::NoBody;
use hayate_core::{Body, Response, Status};
use hayate_proxy::{HostPolicy, ProxyRequest, ProxySettings, UpstreamAddr, UpstreamGroup};

use crate::pipeline::Client;
use hayate_core::request::RequestHead;

/// Largest answer body of a 2xx read to keep its connection (auth
/// services answer a few bytes); a longer one is dropped with its
/// connection.
const MAX_ALLOW_BODY: usize = 16 * 1024;

/// A route's auth service.
pub struct ForwardAuth {
    group: UpstreamGroup,
    /// The service's path and query.
    target: Vec<u8>,
    /// Fields of the request sent to it (lower case).
    send: Rc<[Vec<u8>]>,
    /// Fields of its 2xx answer copied into the request (lower case).
    copy: Rc<[Vec<u8>]>,
}

/// What the service decided.
pub enum Verdict {
    /// Through, with these fields added to the request sent on.
    Allow(Vec<(Vec<u8>, Vec<u8>)>),
    /// This answer goes to the client instead.
    Refuse(Response),
}

impl ForwardAuth {
    /// The service at `url` (`http://HOST:PORT/PATH`, `https://...`),
    /// reached with `settings` within `timeout`.
    pub fn new(
        url: &str,
        send: &[String],
        copy: &[String],
        timeout: Duration,
        settings: &ProxySettings,
    ) -> Result<ForwardAuth, String> {
        let rest = url
            .strip_prefix("http://")
            .or_else(|| url.strip_prefix("https://"))
            .ok_or_else(|| format!("expected http://HOST:PORT/PATH, got {url:?}"))?;
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let member = UpstreamAddr::parse(&url[..url.len() - path.len()])?;
        let target = if path.is_empty() { "/" } else { path };
        if target.bytes().any(|b| b.is_ascii_control() || b == b' ') {
            return Err(format!(
                "{url:?}: the path has spaces or control characters"
            ));
        }
        if authority.is_empty() {
            return Err(format!("{url:?}: no host"));
        }
        let settings = ProxySettings {
            connect_timeout: timeout,
            header_timeout: timeout,
            io_timeout: timeout,
            host: HostPolicy::Upstream,
            // Nothing but a verdict is taken from the service.
            max_interim: 0,
            ..settings.clone()
        };
        let names = |l: &[String]| l.iter().map(|n| n.as_bytes().to_vec()).collect();
        Ok(ForwardAuth {
            group: UpstreamGroup::new(&[member], settings),
            target: target.as_bytes().to_vec(),
            send: names(send),
            copy: names(copy),
        })
    }

    /// Whether a request field is one the service's answer provides, which
    /// a client must never send on itself.
    pub fn is_copied(&self, name: &[u8]) -> bool {
        self.copy.iter().any(|c| c.eq_ignore_ascii_case(name))
    }

    /// Asks the service about `req` from `client`.
    pub async fn ask(&self, req: &RequestHead, client: Client<'_>) -> Verdict {
        let original_url = [
            req.scheme.as_str().as_bytes(),
            b"://",
            req.host().unwrap_or_default(),
            req.original_target(),
        ]
        .concat();
        let mut headers: Vec<(&[u8], &[u8])> = req
            .fields()
            .filter(|(n, _)| self.send.iter().any(|s| s.eq_ignore_ascii_case(n)))
            .collect();
        headers.push((b"X-Forwarded-Method", req.method()));
        headers.push((b"X-Forwarded-Uri", req.original_target()));
        headers.push((b"X-Original-URL", &original_url));
        headers.push((b"X-Original-Method", req.method()));
        let subrequest = ProxyRequest {
            method: b"GET",
            target: &self.target,
            headers: headers.into_iter().collect(),
            client_ip: client.addr(),
            forwarded_chain: client.forwarded_chain(),
            host: req.host(),
            scheme: req.scheme,
            cgi: None,
            // The auth service is asked on hayate's own connections.
            ports: hayate_proxy::ClientPorts::default(),
            // The service may decide by the client's certificate.
            client_cert: client.peer.client_cert.as_deref(),
        };
        let mut answer = self.group.forward(&subrequest, &mut NoBody).await;
        let status = answer.status;
        if status.code() >= 500 {
            // hayate's own 502/503/504 for a service down, slow or busy,
            // or the service's own failure: refused either way.
            log::warn!(
                "forward_auth: {} answered {} for {} {}: refused with 503",
                String::from_utf8_lossy(&self.target),
                status.code(),
                String::from_utf8_lossy(req.method()),
                String::from_utf8_lossy(req.target())
            );
            return Verdict::Refuse(Response::error(Status::SERVICE_UNAVAILABLE));
        }
        if !status.is_success() {
            return Verdict::Refuse(answer);
        }
        let copied: Vec<(Vec<u8>, Vec<u8>)> = answer
            .all_fields()
            .filter(|(n, _)| self.is_copied(n))
            .map(|(n, v)| (n.to_vec(), v.to_vec()))
            .collect();
        // A yes that does not say who is not a yes: the app behind would
        // take the request for an anonymous one it was told was checked.
        if let Some(missing) = self
            .copy
            .iter()
            .find(|c| !copied.iter().any(|(n, _)| n.eq_ignore_ascii_case(c)))
        {
            log::warn!(
                "forward_auth: {} answered {} without {}: refused with 503",
                String::from_utf8_lossy(&self.target),
                status.code(),
                String::from_utf8_lossy(missing)
            );
            return Verdict::Refuse(Response::error(Status::SERVICE_UNAVAILABLE));
        }
        // Read to its end, so the connection goes back to the pool.
        drain(&mut answer.body).await;
        Verdict::Allow(copied)
    }
}

/// Reads a small streamed body to its end (dropped past
/// [`MAX_ALLOW_BODY`]).
async fn drain(body: &mut Body) {
    let Body::Stream(stream) = body else { return };
    let mut read = 0;
    while read <= MAX_ALLOW_BODY {
        let chunk: std::io::Result<Option<Bytes>> =
            std::future::poll_fn(|cx| stream.source.poll_chunk(cx)).await;
        match chunk {
            Ok(Some(c)) => read += c.len(),
            _ => return,
        }
    }
}
