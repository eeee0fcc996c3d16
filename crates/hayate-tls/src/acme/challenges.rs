//! The answers to the challenges of orders in progress, given by every box
//! that holds them: HTTP-01 key authorizations by token (the pipeline asks
//! for `/.well-known/acme-challenge/TOKEN`), TLS-ALPN-01 validation
//! certificates by name (the TLS listener's certificate choice asks when a
//! client offers only `acme-tls/1`).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::sign::CertifiedKey;

use crate::acme_store::ChallengeAnswer;

/// Answers to the challenges of orders in progress: HTTP-01 tokens and
/// TLS-ALPN-01 certificates. Shared by the ACME thread (writes) and the
/// workers (reads, on requests for challenges only).
#[derive(Debug, Default)]
pub struct Challenges {
    http: RwLock<HashMap<String, String>>,
    tls_alpn: RwLock<HashMap<String, Arc<CertifiedKey>>>,
}

impl Challenges {
    /// The key authorization for an HTTP-01 `token`.
    pub fn http01(&self, token: &[u8]) -> Option<String> {
        let token = std::str::from_utf8(token).ok()?;
        self.http.read().ok()?.get(token).cloned()
    }

    /// The validation certificate for `name` (TLS-ALPN-01).
    pub(crate) fn tls_alpn01(&self, name: &str) -> Option<Arc<CertifiedKey>> {
        let name = name.to_ascii_lowercase();
        self.tls_alpn.read().ok()?.get(&name).cloned()
    }

    /// Answers `answer` from now on (this box's order, or another box's).
    pub fn answer(&self, answer: &ChallengeAnswer) -> Result<(), String> {
        match answer {
            ChallengeAnswer::Http01 {
                token,
                key_authorization,
            } => {
                let mut http = self.http.write().map_err(|e| e.to_string())?;
                http.insert(token.clone(), key_authorization.clone());
            }
            ChallengeAnswer::TlsAlpn01 { name, digest } => {
                let cert = validation_certificate(name, digest)?;
                let mut certs = self.tls_alpn.write().map_err(|e| e.to_string())?;
                certs.insert(name.to_ascii_lowercase(), cert);
            }
        }
        Ok(())
    }

    /// Stops answering `answer`.
    pub fn forget(&self, answer: &ChallengeAnswer) {
        match answer {
            ChallengeAnswer::Http01 { token, .. } => {
                if let Ok(mut m) = self.http.write() {
                    m.remove(token);
                }
            }
            ChallengeAnswer::TlsAlpn01 { name, .. } => {
                if let Ok(mut m) = self.tls_alpn.write() {
                    m.remove(&name.to_ascii_lowercase());
                }
            }
        }
    }
}

/// The self-signed certificate that proves control of `name` in
/// TLS-ALPN-01: the name, and the key authorization's digest in the
/// acmeIdentifier extension (RFC 8737 §3).
fn validation_certificate(name: &str, digest: &[u8]) -> Result<Arc<CertifiedKey>, String> {
    let key = rcgen::KeyPair::generate().map_err(|e| e.to_string())?;
    let mut params =
        rcgen::CertificateParams::new(vec![name.to_string()]).map_err(|e| e.to_string())?;
    params.custom_extensions = vec![rcgen::CustomExtension::new_acme_identifier(digest)];
    let cert = params.self_signed(&key).map_err(|e| e.to_string())?;
    let chain = vec![CertificateDer::from(cert.der().to_vec())];
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    // Not `CertifiedKey::from_der`: its key check parses the certificate
    // with webpki, which refuses the critical acmeIdentifier extension.
    let provider = crate::provider();
    let signing_key = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| e.to_string())?;
    Ok(Arc::new(CertifiedKey::new(chain, signing_key)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_validation_certificate_carries_the_name() {
        let key = validation_certificate("a.test", &[7; 32]).expect("certificate");
        let (_, parsed) = x509_parser::parse_x509_certificate(&key.cert[0]).expect("parse");
        let oid = x509_parser::oid_registry::Oid::from(&[1, 3, 6, 1, 5, 5, 7, 1, 31]).expect("oid");
        assert!(parsed
            .extensions()
            .iter()
            .any(|e| e.oid == oid && e.critical));
    }
}
