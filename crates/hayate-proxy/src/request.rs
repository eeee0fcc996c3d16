//! The request as the proxy sees it: what the server hands over, and what
//! makes it safe to send twice.

use hayate_core::client_cert::ClientCert;
use hayate_core::transport::Scheme;

/// A request's header fields. On the heap: inline, 16 of them made the
/// request 672 bytes, copied as it was built and moved into the proxied
/// request's future (152 of its 20,125 instructions in `memcpy`, against
/// a small allocation from the allocator's per-thread cache).
pub type RequestFields<'a> = Vec<(&'a [u8], &'a [u8])>;

/// The request as the proxy needs it.
#[derive(Debug, Clone)]
pub struct ProxyRequest<'a> {
    /// Method.
    pub method: &'a [u8],
    /// Path and query as the client sent them.
    pub target: &'a [u8],
    /// Header fields as received.
    pub headers: RequestFields<'a>,
    /// The client's address (`unix` for Unix sockets): the peer's, or the
    /// one a trusted proxy named.
    pub client_ip: &'a str,
    /// When a trusted proxy named the client: the addresses the request
    /// came through; the incoming X-Forwarded-Proto/-Host and Forwarded are
    /// then kept. `None`: the client is the peer, and those fields are
    /// replaced.
    pub forwarded_chain: Option<ForwardedChain<'a>>,
    /// The Host the client asked for.
    pub host: Option<&'a [u8]>,
    /// What the client's listener speaks (X-Forwarded-Proto, Forwarded).
    pub scheme: Scheme,
    /// For a FastCGI group: the script the server resolved.
    pub cgi: Option<CgiScript<'a>>,
    /// The client's and hayate's ports, for a PROXY protocol header.
    pub ports: ClientPorts,
    /// The client certificate its connection's handshake verified, told
    /// to the upstream (`X-Client-Cert-*` fields, `SSL_CLIENT_*` params).
    pub client_cert: Option<&'a ClientCert>,
}

/// The addresses a request came through, as a trusted proxy named them:
/// the X-Forwarded-For sent upstream is `hops, peer`.
#[derive(Debug, Clone, Copy)]
pub struct ForwardedChain<'a> {
    /// From the client to the last proxy before the peer, `", "` between
    /// them (`"client, proxy"`; the client alone when the peer named it).
    pub hops: &'a str,
    /// The peer's address: the proxy hayate's connection comes from.
    pub peer: &'a str,
}

/// The ports of the client's connection, as a PROXY protocol header names
/// them.
#[derive(Debug, Clone, Copy, Default)]
pub struct ClientPorts {
    /// The client's port, when the client is the peer (a client a trusted
    /// proxy named has none known: 0 is sent).
    pub client: Option<u16>,
    /// The port it connected to.
    pub local: Option<u16>,
}

/// The script a FastCGI request runs, as the server resolved it from the
/// path under its root (nginx's `fastcgi_split_path_info`), with what the
/// CGI environment needs besides the request.
#[derive(Debug, Clone, Copy)]
pub struct CgiScript<'a> {
    /// The root the script lives under, absolute (DOCUMENT_ROOT).
    pub document_root: &'a str,
    /// The target as the client sent it (REQUEST_URI), which a site rule
    /// may have rewritten into the one sent (QUERY_STRING comes from that).
    pub request_uri: &'a [u8],
    /// What the URL has before the path under the root: a route's prefix
    /// when it is stripped (`/wp-content` of a route serving
    /// `/wp-content/` from another directory), else empty.
    pub url_prefix: &'a [u8],
    /// The script's path under the root, from `/`: SCRIPT_NAME after
    /// `url_prefix`, SCRIPT_FILENAME after the root; the server checked
    /// that it names an existing file it may run.
    pub script_name: &'a [u8],
    /// What follows the script in the path (PATH_INFO), maybe empty.
    pub path_info: &'a [u8],
    /// The port the client connected to (SERVER_PORT).
    pub server_port: u16,
    /// The client's port (REMOTE_PORT), for a TCP client.
    pub remote_port: Option<u16>,
    /// The request's protocol, `HTTP/1.1` or `HTTP/2.0` (SERVER_PROTOCOL).
    pub protocol: &'static str,
}

impl<'a> ProxyRequest<'a> {
    /// The PROXY protocol v2 header of a connection made for this request:
    /// its client, or LOCAL for a Unix socket's peer.
    pub fn proxy_header(&self) -> Vec<u8> {
        let client = self.client_ip.parse::<std::net::IpAddr>().ok();
        let client = client.map(|ip| std::net::SocketAddr::new(ip, self.ports.client.unwrap_or(0)));
        hayate_core::proxy_header::v2_header(client, self.ports.local.unwrap_or(0))
    }

    /// The first value of the field `name`.
    pub fn field(&self, name: &[u8]) -> Option<&'a [u8]> {
        self.values(name).next()
    }

    /// Every value of the field `name`.
    pub fn values<'r>(&'r self, name: &'r [u8]) -> impl Iterator<Item = &'a [u8]> + 'r {
        self.headers
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| *v)
    }

    /// Whether the request may be sent again after the upstream may have
    /// acted on it: an idempotent method, or a client that named the
    /// operation with an `Idempotency-Key` (so the app can tell a repeat).
    pub fn repeatable(&self) -> bool {
        idempotent(self.method) || self.field(b"idempotency-key").is_some()
    }
}

/// Methods a proxy may repeat (RFC 9110 §9.2.2).
pub(crate) fn idempotent(method: &[u8]) -> bool {
    matches!(
        method,
        b"GET" | b"HEAD" | b"OPTIONS" | b"TRACE" | b"PUT" | b"DELETE"
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A request from 127.0.0.1 for `/` (tests of what reads requests).
    pub(crate) fn req<'a>(
        method: &'a [u8],
        headers: Vec<(&'a [u8], &'a [u8])>,
    ) -> ProxyRequest<'a> {
        ProxyRequest {
            method,
            target: b"/",
            headers,
            client_ip: "127.0.0.1",
            forwarded_chain: None,
            host: None,
            scheme: Scheme::Http,
            cgi: None,
            ports: Default::default(),
            client_cert: None,
        }
    }

    #[test]
    fn idempotent_methods_and_idempotency_keys_are_repeatable() {
        for m in [&b"GET"[..], b"HEAD", b"PUT", b"DELETE", b"OPTIONS"] {
            assert!(req(m, vec![]).repeatable(), "{m:?}");
        }
        assert!(!req(b"POST", vec![]).repeatable());
        assert!(!req(b"PATCH", vec![(b"X-Key", b"1")]).repeatable());
        assert!(req(b"POST", vec![(b"Idempotency-Key", b"\"8e03\"")]).repeatable());
    }
}
