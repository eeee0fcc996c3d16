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
//! - ALPN `h2` (preferred) and `http/1.1`; a client offering only
//!   protocols hayate does not speak gets rustls's `no_application_protocol`
//!   alert;
//! - resumption by tickets (keys rotated every 6 hours by rustls, one
//!   ticketer for every worker, so a ticket from one worker resumes on any)
//!   and a session cache for TLS 1.2 clients without ticket support;
//! - a handshake timeout, counted from accept: the first byte must come and
//!   the handshake finish within it. Plain HTTP sent to the port gets a
//!   400 that says so, anything else that is not TLS is closed.

pub mod acme;
pub mod acme_store;
mod certificate;
pub mod client_auth;
mod http3;
pub mod local_ca;
mod metrics;
mod on_demand;
mod provider;
mod sources;
mod store;
mod upstream;

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hayate_config::values::{AcmeChallenge, ClientAuth, EarlyData, ListenAddr, Scheme, TlsMode};
use hayate_config::Config;
use hayate_core::client_cert::ClientCert;
use hayate_core::transport::{TlsStream, Transport};
use rustls::server::{ClientHello, ResolvesServerCert, ServerSessionMemoryCache};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

pub use certificate::Certificate;
pub use client_auth::CertFailure;
pub use http3::Http3Tls;
pub use metrics::{Failure, TlsMetrics};
pub use on_demand::{OnDemandOutcome, OnDemandSettings};
pub use provider::provider;
pub use store::CertStore;
pub use upstream::upstream_client_config;

use acme_store::AcmeStore;

use acme::{
    Acme, AcmeSettings, ChallengeKind, Challenges, Dns01Settings, DnsProvider, ACME_TLS_ALPN,
};
use client_auth::Handshakes;
use sources::Sources;
use store::Layer;

/// TLS sessions kept for TLS 1.2 resumption by session id: at a few hundred
/// bytes each, 10,000 are a few MB (nginx's usual `shared:SSL:10m` holds
/// about 40,000). TLS 1.3 clients resume by ticket and take no entry.
pub(crate) const SESSION_CACHE: usize = 10_000;

/// A record's first byte for a handshake (RFC 8446 §5.1, content type 22).
const HANDSHAKE_RECORD: u8 = 0x16;

/// Certificates (and client-certificate settings) loaded for a reload,
/// not served yet.
pub struct LoadedCertificates(Sources, Handshakes, Option<Http3Tls>);

/// The TLS side of every `https://` listener.
#[derive(Debug)]
pub struct TlsServer {
    /// Certificates, ALPN, tickets: what every site's configuration is a
    /// copy of.
    base: Arc<ServerConfig>,
    /// The configurations by SNI (client certificates differ by site),
    /// replaced by a reload.
    handshakes: arc_swap::ArcSwap<Handshakes>,
    /// The rustls side of the HTTP/3 listeners, when `http3` is on,
    /// replaced by a reload (client certificates may change).
    http3: Option<arc_swap::ArcSwap<Http3Tls>>,
    /// Whether HTTP/3 takes 0-RTT (kept from the start, as `http3` is).
    http3_early: EarlyData,
    store: Arc<CertStore>,
    metrics: Arc<TlsMetrics>,
    handshake_timeout: Duration,
    ca_path: Option<PathBuf>,
    challenges: Option<Arc<Challenges>>,
    /// On-demand TLS, when `tls_on_demand` is on.
    on_demand: Option<Arc<on_demand::OnDemand>>,
    /// The configuration of a handshake refused a certificate on demand:
    /// it has none, so rustls ends the handshake with an alert.
    refusing: Arc<ServerConfig>,
    /// Counts the certificate sources loaded: a reload's new ones end the
    /// old ones' watch.
    sources_generation: Arc<AtomicU64>,
}

impl TlsServer {
    /// The TLS server for `config`'s https listeners, with its certificates
    /// loaded (and watched from now on); `None` when no listener is https.
    /// `shared_acme`, when given, is where ACME keeps its account and
    /// certificates with the other boxes (see [`acme_store`]).
    pub fn from_config(
        config: &Config,
        shared_acme: Option<Arc<dyn AcmeStore>>,
    ) -> Result<Option<TlsServer>, String> {
        let g = &config.global;
        if !g.listen.iter().any(|l| l.scheme == Scheme::Https) {
            return Ok(None);
        }
        // One provider for every rustls user in the process (instant-acme's
        // HTTP client asks for the process default).
        let _ = provider::provider().install_default();
        let state_dir = g.state_dir.clone().unwrap_or_else(default_state_dir);
        let sources = configured_sources(config, &state_dir)?;
        let store = Arc::new(CertStore::default());
        store.replace(Layer::Configured, sources.certificates());
        let metrics = Arc::new(TlsMetrics::new(store.clone()));
        let mut on_demand = None;
        let acme = if uses(config, TlsMode::Acme) || g.tls_on_demand {
            let challenges = Arc::new(Challenges::default());
            let settings = acme_settings(config, &state_dir)?;
            let acme = Acme::new(
                settings,
                challenges.clone(),
                store.clone(),
                metrics.clone(),
                shared_acme,
            );
            acme.load_stored();
            if g.tls_on_demand {
                let ask = g.tls_on_demand_ask.as_deref().unwrap_or_default();
                let settings = OnDemandSettings::new(
                    ask,
                    g.tls_on_demand_timeout.0,
                    g.tls_on_demand_rate,
                    g.tls_on_demand_refusal_ttl.0,
                )?;
                let orders = acme.on_demand_orders();
                on_demand = Some(Arc::new(on_demand::OnDemand::new(settings, orders)));
            }
            Some((acme, challenges))
        } else {
            None
        };
        let challenges = acme.as_ref().map(|(_, c)| c.clone());
        let resolver = Arc::new(Resolver {
            store: store.clone(),
            challenges: challenges.clone(),
        });
        let base = Arc::new(server_config(
            resolver.clone(),
            g.http2,
            challenges.is_some(),
        )?);
        let http3 = match g.http3 {
            true => Some(arc_swap::ArcSwap::from_pointee(Http3Tls::build(
                config,
                &base,
                g.http3_early_data,
            )?)),
            false => None,
        };
        let handshakes = Handshakes::build(config, &base)?;
        let server = TlsServer {
            base,
            handshakes: arc_swap::ArcSwap::from_pointee(handshakes),
            http3,
            http3_early: g.http3_early_data,
            metrics,
            handshake_timeout: g.tls_handshake_timeout.0,
            ca_path: sources.ca_path(),
            store: store.clone(),
            challenges,
            on_demand,
            refusing: Arc::new(refusing_config()?),
            sources_generation: Arc::new(AtomicU64::new(0)),
        };
        sources.watch(store, server.sources_generation.clone(), 0);
        if let Some((acme, _)) = acme {
            acme.spawn();
        }
        Ok(Some(server))
    }

    /// Loads the certificate files (and local-CA names) of `config`, a
    /// reloaded configuration: all of them, or an error naming the one that
    /// failed. Nothing changes until [`TlsServer::use_certificates`].
    pub fn load_certificates(&self, config: &Config) -> Result<LoadedCertificates, String> {
        let state_dir = config
            .global
            .state_dir
            .clone()
            .unwrap_or_else(default_state_dir);
        let sources = configured_sources(config, &state_dir)?;
        let http3 = match &self.http3 {
            Some(_) => Some(Http3Tls::build(config, &self.base, self.http3_early)?),
            None => None,
        };
        Ok(LoadedCertificates(
            sources,
            Handshakes::build(config, &self.base)?,
            http3,
        ))
    }

    /// Serves `loaded` from now on, watching their files instead of the old
    /// ones, and verifies client certificates as it says. Other TLS
    /// settings and the session-ticket keys of sites without client
    /// certificates stay, and so do certificates from ACME (their names
    /// are set at start).
    pub fn use_certificates(&self, loaded: LoadedCertificates) {
        let LoadedCertificates(sources, handshakes, http3) = loaded;
        self.handshakes.store(Arc::new(handshakes));
        if let (Some(current), Some(new)) = (&self.http3, http3) {
            current.store(Arc::new(new));
        }
        self.store
            .replace(Layer::Configured, sources.certificates());
        let generation = self.sources_generation.fetch_add(1, Ordering::AcqRel) + 1;
        sources.watch(
            self.store.clone(),
            self.sources_generation.clone(),
            generation,
        );
    }

    /// The answers to ACME's HTTP-01 challenges, when certificates come
    /// from ACME.
    pub fn challenges(&self) -> Option<Arc<Challenges>> {
        self.challenges.clone()
    }

    /// The local CA's certificate, when certificates come from one.
    pub fn ca_path(&self) -> Option<&Path> {
        self.ca_path.as_deref()
    }

    /// The certificates served now.
    pub fn certificates(&self) -> Vec<Certificate> {
        self.store.certificates()
    }

    /// The TLS side of the HTTP/3 (QUIC) listeners, when `http3` is on
    /// (`http3.rs`): the current one, which a reload may replace.
    pub fn http3(&self) -> Option<Arc<Http3Tls>> {
        self.http3.as_ref().map(|h| h.load_full())
    }

    /// The handshake counters (for /metrics).
    pub fn metrics(&self) -> Arc<TlsMetrics> {
        self.metrics.clone()
    }

    /// Completes the handshake of an accepted connection within the
    /// handshake timeout. Plain HTTP is answered with a 400 first. With the
    /// connection, the client certificate it verified, when its site asks
    /// for one and the client sent one.
    pub async fn handshake(
        &self,
        tcp: TcpStream,
    ) -> Result<(Transport, Option<Arc<ClientCert>>), Failure> {
        let result = tokio::time::timeout(self.handshake_timeout, self.handshake_now(tcp)).await;
        let result = result.unwrap_or(Err(Failure::Timeout));
        if let Ok((Transport::Tls(s), _)) = &result {
            if s.get_ref().1.alpn_protocol() == Some(ACME_TLS_ALPN) {
                // An ACME server checked its TLS-ALPN-01 challenge; it
                // speaks no HTTP on this connection (RFC 8737 §3).
                return Err(Failure::Closed);
            }
        }
        match &result {
            Ok((Transport::Tls(s), _)) => {
                let resumed =
                    s.get_ref().1.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
                self.metrics.completed(resumed);
            }
            Ok(_) => {}
            Err(why) => self.metrics.failed(*why),
        }
        result
    }

    async fn handshake_now(
        &self,
        mut tcp: TcpStream,
    ) -> Result<(Transport, Option<Arc<ClientCert>>), Failure> {
        match first_record(&tcp).await? {
            HANDSHAKE_RECORD => {}
            b if b.is_ascii_uppercase() => {
                Box::pin(refuse_plain_http(&mut tcp)).await;
                return Err(Failure::PlainHttp);
            }
            _ => return Err(Failure::NotTls),
        }
        let handshakes = self.handshakes.load();
        // Both boxed: until here, a connection's task holds only this
        // function's small state (rustls's is kilobytes).
        let (accepted, chosen) = match (handshakes.single(), &self.on_demand) {
            (Some(h), None) => {
                let acceptor = tokio_rustls::TlsAcceptor::from(h.config.clone());
                (Box::pin(acceptor.accept(tcp)).await, h)
            }
            _ => {
                // Sites differ in client certificates, or names may get
                // certificates on demand: the ClientHello's SNI picks the
                // configuration, or is ordered first.
                let hello =
                    tokio_rustls::LazyConfigAcceptor::new(rustls::server::Acceptor::default(), tcp);
                let start = Box::pin(hello).await.map_err(|e| handshake_error(&e))?;
                if let Some(on_demand) = &self.on_demand {
                    if let Some(name) = self.wants_on_demand(&start.client_hello()) {
                        let (outcome, why) = Box::pin(on_demand.obtain(&name)).await;
                        self.metrics.on_demand(outcome);
                        if outcome != OnDemandOutcome::Issued {
                            log::info!("TLS: no certificate on demand for {name}: {why}");
                            let _ = Box::pin(start.into_stream(self.refusing.clone())).await;
                            return Err(Failure::OnDemand);
                        }
                    }
                }
                let h = handshakes.for_hello(&start.client_hello());
                (Box::pin(start.into_stream(h.config.clone())).await, h)
            }
        };
        let s = match accepted {
            Ok(s) => s,
            Err(e) => {
                if let Some(why) = client_auth::CertFailure::of(&e) {
                    log::info!("TLS handshake refused: client certificate: {e}");
                    self.metrics.client_cert_failed(why);
                    return Err(Failure::ClientCert);
                }
                return Err(handshake_error(&e));
            }
        };
        let cert = match chosen.auth {
            ClientAuth::Off => None,
            _ => match s.get_ref().1.peer_certificates().and_then(|c| c.first()) {
                Some(der) => client_auth::describe(der, chosen.trust.clone()).map(Arc::new),
                // A session resumed from before `require` (rustls keeps
                // a resumed session's certificate; a configuration's
                // tickets are its own, so this is a safety net).
                None if chosen.auth == ClientAuth::Require => {
                    self.metrics
                        .client_cert_failed(client_auth::CertFailure::Missing);
                    return Err(Failure::ClientCert);
                }
                None => None,
            },
        };
        Ok((Transport::Tls(Box::new(TlsStream::Server(s))), cert))
    }
}

impl TlsServer {
    /// The name of `hello` to order on demand: one no certificate has, in
    /// a handshake that is not an ACME server's TLS-ALPN-01 check.
    fn wants_on_demand(&self, hello: &ClientHello<'_>) -> Option<String> {
        let mut alpn = hello.alpn().into_iter().flatten();
        if alpn.any(|p| p == ACME_TLS_ALPN) {
            return None;
        }
        let name = hello.server_name()?;
        (!self.store.has(name)).then(|| name.to_ascii_lowercase())
    }
}

/// A configuration without certificates: rustls answers its handshakes
/// with an alert (a name refused on demand).
fn refusing_config() -> Result<ServerConfig, String> {
    #[derive(Debug)]
    struct NoCertificate;
    impl ResolvesServerCert for NoCertificate {
        fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
            None
        }
    }
    let provider = Arc::new(provider::provider());
    Ok(ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(VERSIONS)
        .map_err(|e| format!("TLS configuration: {e}"))?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(NoCertificate)))
}

/// The failure a handshake's I/O error stands for.
fn handshake_error(e: &std::io::Error) -> Failure {
    if e.kind() == std::io::ErrorKind::InvalidData {
        log::debug!("TLS handshake refused: {e}");
        Failure::Protocol
    } else {
        log::debug!("TLS handshake ended: {e}");
        Failure::Closed
    }
}

/// Chooses the certificate of a handshake: the store's by SNI, or for an
/// ACME server validating TLS-ALPN-01, the challenge's.
#[derive(Debug)]
struct Resolver {
    store: Arc<CertStore>,
    challenges: Option<Arc<Challenges>>,
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        if let Some(challenges) = &self.challenges {
            let mut alpn = hello.alpn().into_iter().flatten();
            if alpn.any(|p| p == ACME_TLS_ALPN) {
                return challenges.tls_alpn01(hello.server_name()?);
            }
        }
        self.store.select(hello.server_name())
    }
}

/// Waits, holding no TLS state, until the client's first record (its
/// ClientHello) is there whole, or shows it is not TLS; returns its first
/// byte. Only then is rustls's state made (boxed, like the plain-HTTP
/// refusal and its drain buffer): measured here, 2,000 connections stalled
/// mid-ClientHello cost 14,868 B of RSS each when it was made at once (its
/// read buffer, handshake state and a task sized for them), 1,843 B this way
/// (`crates/hayate/tests/memory.rs`).
async fn first_record(tcp: &TcpStream) -> Result<u8, Failure> {
    use std::os::fd::AsRawFd;
    thread_local! {
        /// Where a worker peeks: a record is at most 5 + 16,384 + 2,048
        /// bytes (RFC 8446 §5.2).
        static PEEK: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0; 5 + 18_432]);
    }
    loop {
        tcp.readable().await.map_err(|_| Failure::Closed)?;
        let peeked = tcp.try_io(tokio::io::Interest::READABLE, || {
            PEEK.with_borrow_mut(|buf| {
                let flags = nix::sys::socket::MsgFlags::MSG_PEEK;
                let n = nix::sys::socket::recv(tcp.as_raw_fd(), buf, flags)?;
                let whole = n >= 5 && n >= 5 + usize::from(u16::from_be_bytes([buf[3], buf[4]]));
                match n {
                    0 => Ok(None),
                    _ if buf[0] != HANDSHAKE_RECORD || whole || n == buf.len() => Ok(Some(buf[0])),
                    // Part of the record: wait for more (the WouldBlock
                    // clears the readiness, so the wait is for new bytes).
                    _ => Err(std::io::ErrorKind::WouldBlock.into()),
                }
            })
        });
        match peeked {
            Ok(Some(first)) => return Ok(first),
            Ok(None) => return Err(Failure::Closed),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(_) => return Err(Failure::Closed),
        }
    }
}

/// The TLS versions served.
pub(crate) const VERSIONS: &[&rustls::SupportedProtocolVersion] =
    &[&rustls::version::TLS13, &rustls::version::TLS12];

/// The rustls configuration of every https listener: ALPN `h2` first when
/// `http2`, then `http/1.1`; with `acme`, ACME's TLS-ALPN-01 protocol too.
fn server_config(resolver: Arc<Resolver>, http2: bool, acme: bool) -> Result<ServerConfig, String> {
    let provider = Arc::new(provider::provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(VERSIONS)
        .map_err(|e| format!("TLS configuration: {e}"))?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    // The suite is hayate's choice, in the provider's order, strongest
    // first (AES-256-GCM, AES-128-GCM, ChaCha20-Poly1305; every TLS 1.2
    // suite ECDHE and AEAD): a client's order, which scanners flag when
    // followed, does not pick a weaker one. rustls applies it to TLS 1.3
    // too, where a client without AES instructions (rare now: x86 has had
    // them since 2010, most ARMv8 phones have them) would have preferred
    // ChaCha20: it pays in CPU, not in security.
    config.ignore_client_order = true;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    if http2 {
        config.alpn_protocols.insert(0, b"h2".to_vec());
    }
    if acme {
        config.alpn_protocols.push(ACME_TLS_ALPN.to_vec());
    }
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

/// Whether some certificates come from `mode` (globally or for a site).
/// The certificate files of `config` (global pairs, then the sites'), and
/// the local CA's certificates when `tls = internal`, loaded and checked.
fn configured_sources(config: &Config, state_dir: &Path) -> Result<Sources, String> {
    let g = &config.global;
    let global_pairs = g.tls_cert.iter().flatten().cloned();
    let global_pairs = global_pairs.zip(g.tls_key.iter().flatten().cloned());
    let site_pairs = config
        .sites
        .iter()
        .flat_map(|s| s.tls.certs.iter().cloned());
    let pairs: Vec<(PathBuf, PathBuf)> = global_pairs.chain(site_pairs).collect();
    let ca_dir = state_dir.join("local-ca");
    let internal = uses(config, TlsMode::Internal).then(|| (ca_dir.as_path(), local_names(config)));
    Sources::load(&pairs, internal)
}

/// Whether some certificates come from ACME (with an https listener),
/// on demand included.
pub fn uses_acme(config: &Config) -> bool {
    let https = config
        .global
        .listen
        .iter()
        .any(|l| l.scheme == Scheme::Https);
    https && (uses(config, TlsMode::Acme) || config.global.tls_on_demand)
}

fn uses(config: &Config, mode: TlsMode) -> bool {
    config.global.tls == Some(mode) || config.sites.iter().any(|s| s.tls.mode == Some(mode))
}

/// The names `mode`'s certificates are for: the hosts of the sites that
/// choose it in their `[[site]]`, and with the global `tls` set to it,
/// `tls_names` or else the hosts of every site that chooses nothing.
fn site_names(config: &Config, mode: TlsMode) -> Vec<String> {
    let g = &config.global;
    let global = g.tls == Some(mode);
    let mut names: Vec<String> = Vec::new();
    let mut add = |n: &String| {
        let n = n.to_ascii_lowercase();
        if !names.contains(&n) {
            names.push(n);
        }
    };
    if let (true, Some(given)) = (global, &g.tls_names) {
        given.iter().for_each(&mut add);
    }
    for site in &config.sites {
        let chosen = match site.tls.mode {
            Some(m) => m == mode,
            None => global && g.tls_names.is_none() && site.tls.certs.is_empty(),
        };
        if chosen {
            site.hosts.iter().for_each(&mut add);
        }
    }
    names
}

/// ACME's settings: the names (addresses and localhost skipped: no CA
/// validates them; wildcards only with a way to set DNS records, which
/// the config check enforces), the challenge of each, where state is kept.
fn acme_settings(config: &Config, state_dir: &Path) -> Result<AcmeSettings, String> {
    let g = &config.global;
    let dns = g.acme_dns_server.is_some() || g.acme_dns_hook.is_some();
    let mut names = site_names(config, TlsMode::Acme);
    names.retain(|n| {
        let usable = (dns || !n.starts_with("*.")) && n.parse::<IpAddr>().is_err() && n != "localhost";
        if !usable {
            log::warn!("ACME: no certificate for {n:?}: wildcards need DNS-01, and addresses and localhost cannot be validated");
        }
        usable
    });
    if names.is_empty() && !g.tls_on_demand {
        return Err(
            "tls = acme needs the names to get certificates for: hosts in [[site]], or tls_names"
                .into(),
        );
    }
    let plain_tcp = g
        .listen
        .iter()
        .any(|l| l.scheme == Scheme::Http && matches!(l.addr, ListenAddr::Tcp(_)));
    let kind = |challenge: AcmeChallenge| match challenge {
        AcmeChallenge::Http01 => ChallengeKind::Http01,
        AcmeChallenge::TlsAlpn01 => ChallengeKind::TlsAlpn01,
        AcmeChallenge::Dns01 => ChallengeKind::Dns01,
        AcmeChallenge::Auto if plain_tcp => ChallengeKind::Http01,
        AcmeChallenge::Auto => ChallengeKind::TlsAlpn01,
    };
    let challenge = kind(g.acme_challenge);
    // A site's own acme_challenge for its hosts; wildcards over DNS-01,
    // the only challenge a CA accepts for them (RFC 8555 §7.1.3).
    let mut challenge_of: Vec<(String, ChallengeKind)> = Vec::new();
    for site in &config.sites {
        let Some(own) = site.tls.acme_challenge else {
            continue;
        };
        for host in &site.hosts {
            let host = host.to_ascii_lowercase();
            if names.contains(&host) && kind(own) != challenge {
                challenge_of.push((host, kind(own)));
            }
        }
    }
    for name in names.iter().filter(|n| n.starts_with("*.")) {
        challenge_of.retain(|(n, _)| n != name);
        if challenge != ChallengeKind::Dns01 {
            challenge_of.push((name.clone(), ChallengeKind::Dns01));
        }
    }
    Ok(AcmeSettings {
        directory: g.acme_directory.clone(),
        email: g.acme_email.clone(),
        ca_root: g.acme_ca_root.clone(),
        dir: acme::state_subdir(state_dir, &g.acme_directory),
        names,
        challenge,
        challenge_of,
        dns01: if dns { Some(dns01_settings(g)?) } else { None },
        on_demand: g.tls_on_demand,
    })
}

/// How DNS-01 records are set and seen (the config check made sure there
/// is a way: a primary server or a hook, and somewhere to look).
fn dns01_settings(g: &hayate_config::GlobalOptions) -> Result<Dns01Settings, String> {
    let (provider, primary) = match (&g.acme_dns_server, &g.acme_dns_hook) {
        (Some(server), _) => (
            DnsProvider::update(server.0, g.acme_dns_tsig_key.as_ref())?,
            Some(server.0),
        ),
        (None, Some(command)) => (
            DnsProvider::Hook {
                command: command.clone(),
                timeout: g.acme_dns_hook_timeout.0,
            },
            None,
        ),
        (None, None) => {
            return Err("acme_challenge = dns-01 needs acme_dns_server or acme_dns_hook".into())
        }
    };
    let resolver = g
        .acme_dns_resolver
        .map(|r| r.0)
        .or(primary)
        .ok_or("acme_dns_hook needs acme_dns_resolver: where to see the record")?;
    Ok(Dns01Settings {
        provider,
        zone: g.acme_dns_zone.clone(),
        resolver,
        propagation_timeout: g.acme_dns_propagation_timeout.0,
    })
}

/// The names a local certificate is for: the site names, `localhost`, and
/// the https listeners' addresses (loopback for a wildcard address).
fn local_names(config: &Config) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    let mut add = |n: String| {
        if !names.contains(&n) {
            names.push(n);
        }
    };
    for name in site_names(config, TlsMode::Internal) {
        add(name);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_name_has_its_challenge_wildcards_dns01_and_a_sites_own() {
        let text = r#"listen = ["http://127.0.0.1:8080", "https://127.0.0.1:8443"]
tls = "acme"
acme_dns_hook = ["/usr/local/bin/dns"]
acme_dns_resolver = "192.0.2.53"
root = "/srv"

[[site]]
hosts = ["*.example.com", "example.com"]

[[site]]
hosts = ["Admin.Example.org"]
acme_challenge = "tls-alpn-01"
"#;
        let config =
            hayate_config::load_file("c.toml".as_ref(), text, &Default::default()).expect("valid");
        let s = acme_settings(&config, Path::new("/var/lib/hayate")).expect("settings");
        // auto with a plain-HTTP listener: HTTP-01 unless said otherwise.
        assert_eq!(s.challenge_for("example.com"), ChallengeKind::Http01);
        assert_eq!(s.challenge_for("*.example.com"), ChallengeKind::Dns01);
        assert_eq!(
            s.challenge_for("admin.example.org"),
            ChallengeKind::TlsAlpn01
        );
        assert!(s.dns01.is_some());
    }
}
