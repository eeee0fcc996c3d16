//! The rustls side of the HTTP/3 (QUIC) listeners: the TCP listeners'
//! certificates, chosen by the same resolver (files watched, local CA,
//! ACME), TLS 1.3 only (RFC 9001 §4.2), ALPN `h3` (RFC 9114 §3.1).
//!
//! Client certificates: a QUIC handshake's configuration is fixed before
//! its ClientHello is read (quinn has no lazy acceptor, where TCP picks
//! a site's configuration by SNI: `client_auth.rs`), so HTTP/3 verifies
//! them only when every site asks the same (`hayate check` refuses
//! `http3` otherwise). Such a configuration has its own ticket keys and
//! session cache, made anew at each reload (as TCP's per-site ones): no
//! session from before a CA or CRL changed resumes, and it takes no 0-RTT
//! (early data would come before the certificate is seen). A reload
//! replaces it; the endpoints take it for their next connections.

use std::sync::Arc;

use hayate_config::values::{ClientAuth, EarlyData};
use hayate_config::{ClientCerts, Config};
use hayate_core::client_cert::ClientCert;
use rustls::pki_types::CertificateDer;
use rustls::server::{ServerSessionMemoryCache, WebPkiClientVerifier};
use rustls::ServerConfig;

use crate::client_auth::{describe, global_setting, verifier};

/// HTTP/3's TLS configuration and the client certificates it verifies.
#[derive(Debug)]
pub struct Http3Tls {
    /// What quinn's endpoints hand their connections.
    pub config: Arc<ServerConfig>,
    auth: ClientAuth,
    /// Names what verified a client's certificate (as TCP's handshakes
    /// do: the CA file's path).
    trust: Option<Arc<str>>,
}

impl Http3Tls {
    /// The configuration for `config`'s sites, with the certificates and
    /// (without client certificates) the session-ticket keys of `tcp`.
    /// 0-RTT is off unless `early` is `safe`: early data is replayable;
    /// `max_early_data_size` 0 means the tickets offer none and quinn
    /// refuses any (quinn takes only 0 or `u32::MAX`, the amount being
    /// QUIC flow control's business, RFC 9001 §4.6.1).
    pub(crate) fn build(
        config: &Config,
        tcp: &ServerConfig,
        early: EarlyData,
    ) -> Result<Http3Tls, String> {
        let setting = one_setting(config)?;
        let provider = Arc::new(crate::provider::provider());
        let builder = ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| format!("HTTP/3 TLS configuration: {e}"))?;
        let (builder, trust) = match (setting.auth, &setting.ca) {
            (ClientAuth::Off, _) | (_, None) => (
                builder.with_client_cert_verifier(WebPkiClientVerifier::no_client_auth()),
                None,
            ),
            (auth, Some(ca)) => (
                builder.with_client_cert_verifier(verifier(auth, ca, &setting.crl)?),
                Some(ca.display().to_string().into()),
            ),
        };
        let mut server = builder.with_cert_resolver(tcp.cert_resolver.clone());
        server.ignore_client_order = true;
        server.alpn_protocols = vec![b"h3".to_vec()];
        match (trust.is_some(), early) {
            (true, _) => {
                server.ticketer = rustls::crypto::aws_lc_rs::Ticketer::new()
                    .map_err(|e| format!("TLS session tickets: {e}"))?;
                server.session_storage = ServerSessionMemoryCache::new(crate::SESSION_CACHE);
                server.max_early_data_size = 0;
            }
            (false, EarlyData::Off) => {
                server.ticketer = tcp.ticketer.clone();
                server.max_early_data_size = 0;
            }
            // rustls accepts early data only on stateful resumption: each
            // ticket is a key of this process's session cache, taken out
            // when used, so a replayed ClientHello finds no session and its
            // early data is refused (RFC 8446 §8.1's single-use tickets).
            // The price: a ticket is good for QUIC only, once, and only
            // until a restart.
            (false, EarlyData::Safe) => {
                server.session_storage = ServerSessionMemoryCache::new(crate::SESSION_CACHE);
                server.max_early_data_size = u32::MAX;
            }
        }
        Ok(Http3Tls {
            config: Arc::new(server),
            auth: if trust.is_some() {
                setting.auth
            } else {
                ClientAuth::Off
            },
            trust,
        })
    }

    /// Whether handshakes ask for a client certificate.
    pub fn verifies_clients(&self) -> bool {
        self.auth != ClientAuth::Off
    }

    /// The client certificate a connection's handshake verified (its
    /// chain as quinn gives it, leaf first), described for upstreams.
    pub fn client_cert(&self, chain: &[CertificateDer<'_>]) -> Option<Arc<ClientCert>> {
        if !self.verifies_clients() {
            return None;
        }
        let leaf = chain.first()?;
        describe(leaf, self.trust.clone()).map(Arc::new)
    }
}

/// The one client-certificate setting of every site (the global one
/// without sites), or why HTTP/3 cannot serve them.
fn one_setting(config: &Config) -> Result<ClientCerts, String> {
    let g = &config.global;
    let mut settings = config.sites.iter().map(|s| s.tls.client_certs(g));
    let Some(first) = settings.next() else {
        return Ok(global_setting(g));
    };
    match settings.all(|s| s == first) {
        true => Ok(first),
        false => Err(SITES_DIFFER.into()),
    }
}

/// Why `http3` is refused with sites that verify client certificates
/// differently.
pub const SITES_DIFFER: &str = "HTTP/3 verifies client certificates only when every site asks the same (tls_client_auth, tls_client_ca, tls_client_crl): a QUIC handshake's settings are chosen before the client names its site";
