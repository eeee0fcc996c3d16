//! The TLS client of `https://` upstream members: TLS 1.3 and 1.2, ALPN
//! `http/1.1`, certificates verified against the system's CA store (or
//! `proxy_tls_ca`), and rustls's session cache, so the pool's new
//! connections to a member resume instead of paying a full handshake.

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

/// The TLS client configuration for https upstreams. `ca`: trust these
/// PEM certificates instead of the system's. `verify = false` accepts any
/// certificate (still checking the handshake's signatures), and says so in
/// the error log. `client_cert`: the certificate chain and key files
/// (PEM) presented to upstreams that ask for one.
pub fn upstream_client_config(
    ca: Option<&Path>,
    verify: bool,
    client_cert: Option<(&Path, &Path)>,
) -> Result<ClientConfig, String> {
    let provider = Arc::new(crate::provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| format!("TLS configuration: {e}"))?;
    let builder = if verify {
        builder.with_root_certificates(trusted_roots(ca)?)
    } else {
        log::warn!(
            "proxy_tls_verify = false: https upstreams' certificates are not verified; \
             anyone between hayate and them can read and change the traffic"
        );
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
    };
    let mut config = match client_cert {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain = CertificateDer::pem_file_iter(cert)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| format!("proxy_tls_cert {}: {e}", cert.display()))?;
            if chain.is_empty() {
                return Err(format!(
                    "proxy_tls_cert {}: no PEM certificate in it",
                    cert.display()
                ));
            }
            let key_der = PrivateKeyDer::from_pem_file(key)
                .map_err(|e| format!("proxy_tls_key {}: {e}", key.display()))?;
            builder.with_client_auth_cert(chain, key_der).map_err(|e| {
                format!(
                    "proxy_tls_cert {} with proxy_tls_key {}: {e}",
                    cert.display(),
                    key.display()
                )
            })?
        }
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

fn trusted_roots(ca: Option<&Path>) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    match ca {
        Some(path) => {
            let certs = CertificateDer::pem_file_iter(path)
                .map_err(|e| format!("{}: {e}", path.display()))?;
            for cert in certs {
                let cert = cert.map_err(|e| format!("{}: {e}", path.display()))?;
                roots
                    .add(cert)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
            }
            if roots.is_empty() {
                return Err(format!("{}: no PEM certificate in it", path.display()));
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            for e in &found.errors {
                log::warn!("system CA certificates: {e}");
            }
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(
                    "no system CA certificates found (install ca-certificates, or set proxy_tls_ca)"
                        .into(),
                );
            }
        }
    }
    Ok(roots)
}

/// `proxy_tls_verify = false`: any certificate, any name. The handshake's
/// signatures are still checked, so the session is at least with the
/// holder of the certificate's key.
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
