//! HTTPS for hayate: the TLS client of `https://` upstreams
//! ([`upstream_client_config`]), and for its listeners the certificates ([`Certificate`], from
//! files or a [`local_ca`]), the choice among them by SNI ([`CertStore`]),
//! the rustls server configuration, and the handshake that turns an
//! accepted TCP connection into a [`Transport::Tls`] for the HTTP
//! connection loop, which then reads and writes it like any socket.
//!
//! What the configuration chooses, and why:
//! - TLS 1.3 and 1.2 only, rustls's cipher suites (AEAD only: AES-GCM and
//!   ChaCha20-Poly1305), ECDSA and RSA keys, no renegotiation (rustls has
//!   none), 0-RTT off (replayable requests);
//! - ALPN `http/1.1`; a client offering only protocols hayate does not
//!   speak gets rustls's `no_application_protocol` alert;
//! - resumption by tickets (keys rotated every 6 hours by rustls, one
//!   ticketer for every worker, so a ticket from one worker resumes on any)
//!   and a session cache for TLS 1.2 clients without ticket support;
//! - a handshake timeout, counted from accept: the first byte must come and
//!   the handshake finish within it. Plain HTTP sent to the port gets a
//!   400 that says so, anything else that is not TLS is closed.

mod certificate;
pub mod local_ca;
mod metrics;
mod sources;
mod store;
mod upstream;

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hayate_config::values::{ListenAddr, Scheme, TlsMode};
use hayate_config::Config;
use hayate_core::transport::{TlsStream, Transport};
use rustls::server::ServerSessionMemoryCache;
use rustls::ServerConfig;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

pub use certificate::Certificate;
pub use metrics::{Failure, TlsMetrics};
pub use store::CertStore;
pub use upstream::upstream_client_config;

use sources::Sources;

/// TLS sessions kept for TLS 1.2 resumption by session id: at a few hundred
/// bytes each, 10,000 are a few MB (nginx's usual `shared:SSL:10m` holds
/// about 40,000). TLS 1.3 clients resume by ticket and take no entry.
const SESSION_CACHE: usize = 10_000;

/// A record's first byte for a handshake (RFC 8446 §5.1, content type 22).
const HANDSHAKE_RECORD: u8 = 0x16;

/// The TLS side of every `https://` listener.
#[derive(Debug)]
pub struct TlsServer {
    config: Arc<ServerConfig>,
    store: Arc<CertStore>,
    metrics: Arc<TlsMetrics>,
    handshake_timeout: Duration,
    ca_path: Option<PathBuf>,
}

impl TlsServer {
    /// The TLS server for `config`'s https listeners, with its certificates
    /// loaded (and watched from now on); `None` when no listener is https.
    pub fn from_config(config: &Config) -> Result<Option<TlsServer>, String> {
        let g = &config.global;
        if !g.listen.iter().any(|l| l.scheme == Scheme::Https) {
            return Ok(None);
        }
        let pairs: Vec<(PathBuf, PathBuf)> = g
            .tls_cert
            .iter()
            .flatten()
            .cloned()
            .zip(g.tls_key.iter().flatten().cloned())
            .collect();
        let state_dir = g.state_dir.clone().unwrap_or_else(default_state_dir);
        let ca_dir = state_dir.join("local-ca");
        let internal = g
            .tls
            .map(|TlsMode::Internal| (ca_dir.as_path(), local_names(config)));
        let sources = Sources::load(&pairs, internal)?;
        let store = Arc::new(CertStore::default());
        store.replace(sources.certificates());
        let ca_path = sources.ca_path();
        sources.watch(store.clone());
        Ok(Some(TlsServer {
            config: Arc::new(server_config(store.clone())?),
            metrics: Arc::new(TlsMetrics::new(store.clone())),
            store,
            handshake_timeout: g.tls_handshake_timeout.0,
            ca_path,
        }))
    }

    /// The local CA's certificate, when certificates come from one.
    pub fn ca_path(&self) -> Option<&Path> {
        self.ca_path.as_deref()
    }

    /// The certificates served now.
    pub fn certificates(&self) -> Vec<Certificate> {
        self.store.certificates()
    }

    /// The handshake counters (for /metrics).
    pub fn metrics(&self) -> Arc<TlsMetrics> {
        self.metrics.clone()
    }

    /// Completes the handshake of an accepted connection within the
    /// handshake timeout. Plain HTTP is answered with a 400 first.
    pub async fn handshake(&self, tcp: TcpStream) -> Result<Transport, Failure> {
        let result = tokio::time::timeout(self.handshake_timeout, self.handshake_now(tcp)).await;
        let result = result.unwrap_or(Err(Failure::Timeout));
        match &result {
            Ok(Transport::Tls(s)) => {
                let resumed =
                    s.get_ref().1.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
                self.metrics.completed(resumed);
            }
            Ok(_) => {}
            Err(why) => self.metrics.failed(*why),
        }
        result
    }

    async fn handshake_now(&self, mut tcp: TcpStream) -> Result<Transport, Failure> {
        let mut first = [0u8; 1];
        match tcp.peek(&mut first).await {
            Ok(0) | Err(_) => return Err(Failure::Closed),
            Ok(_) => {}
        }
        if first[0] != HANDSHAKE_RECORD {
            if first[0].is_ascii_uppercase() {
                refuse_plain_http(&mut tcp).await;
                return Err(Failure::PlainHttp);
            }
            return Err(Failure::NotTls);
        }
        let acceptor = tokio_rustls::TlsAcceptor::from(self.config.clone());
        match acceptor.accept(tcp).await {
            Ok(s) => Ok(Transport::Tls(Box::new(TlsStream::Server(s)))),
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                log::debug!("TLS handshake refused: {e}");
                Err(Failure::Protocol)
            }
            Err(e) => {
                log::debug!("TLS handshake ended: {e}");
                Err(Failure::Closed)
            }
        }
    }
}

/// The rustls configuration of every https listener.
fn server_config(store: Arc<CertStore>) -> Result<ServerConfig, String> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| format!("TLS configuration: {e}"))?
        .with_no_client_auth()
        .with_cert_resolver(store);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config.ticketer = rustls::crypto::aws_lc_rs::Ticketer::new()
        .map_err(|e| format!("TLS session tickets: {e}"))?;
    config.session_storage = ServerSessionMemoryCache::new(SESSION_CACHE);
    config.max_early_data_size = 0;
    Ok(config)
}

/// Says "plain HTTP sent to an HTTPS port" the way nginx does (400), then
/// closes after reading what the client sent, so that its kernel does not
/// reset the connection under the answer. Bounded by the handshake timeout
/// of the caller.
async fn refuse_plain_http(tcp: &mut TcpStream) {
    const BODY: &str = "plain HTTP sent to an HTTPS port: use https://\n";
    let answer = format!(
        "HTTP/1.1 400 Bad Request\r\nServer: hayate\r\nContent-Type: text/plain; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{BODY}",
        BODY.len()
    );
    if tcp.write_all(answer.as_bytes()).await.is_err() {
        return;
    }
    let _ = tcp.shutdown().await;
    let mut sink = [0u8; 4096];
    let mut drained = 0;
    while drained < 64 * 1024 {
        match tokio::io::AsyncReadExt::read(tcp, &mut sink).await {
            Ok(0) | Err(_) => break,
            Ok(n) => drained += n,
        }
    }
}

/// The names a local certificate is for: every site's host names,
/// `localhost`, and the https listeners' addresses (loopback for a
/// wildcard address).
fn local_names(config: &Config) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    let mut add = |n: String| {
        if !names.contains(&n) {
            names.push(n);
        }
    };
    for site in &config.sites {
        for host in &site.hosts {
            add(host.clone());
        }
    }
    add("localhost".into());
    for l in &config.global.listen {
        if let (Scheme::Https, ListenAddr::Tcp(a)) = (l.scheme, &l.addr) {
            let ips: Vec<IpAddr> = if a.ip().is_unspecified() {
                vec!["127.0.0.1".parse().expect("ip"), "::1".parse().expect("ip")]
            } else {
                vec![a.ip()]
            };
            for ip in ips {
                add(ip.to_string());
            }
        }
    }
    names
}

/// Where hayate keeps state when `state_dir` is not set: the XDG data
/// directory, `/var/lib/hayate` for root, or under the temp directory.
pub fn default_state_dir() -> PathBuf {
    if let Some(x) = std::env::var_os("XDG_DATA_HOME").filter(|x| !x.is_empty()) {
        return PathBuf::from(x).join("hayate");
    }
    if nix::unistd::geteuid().is_root() {
        return PathBuf::from("/var/lib/hayate");
    }
    match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        Some(home) => PathBuf::from(home).join(".local/share/hayate"),
        None => std::env::temp_dir().join(format!("hayate-{}", nix::unistd::geteuid())),
    }
}
