//! Client certificates past the handshake: a request must be for a site
//! whose `tls_client_auth` is what its connection's handshake verified.
//! The handshake chose its site by SNI (`hayate_tls`'s client_auth); a
//! client that then names another site in Host (or a browser reusing an
//! HTTP/2 connection for another name its certificate covers) would reach
//! a site that requires a certificate without one, or carry to a site a
//! certificate another CA verified. Such a request gets 421 Misdirected
//! Request (RFC 9110 §15.5.20; nginx answers it in the same case), which a
//! browser takes as "open a connection for this name".

use std::sync::Arc;

use hayate_config::values::ClientAuth;
use hayate_core::client_cert::ClientCert;

/// What a site with client certificates expects of a request's
/// connection.
#[derive(Debug, Clone)]
pub struct ExpectedCert {
    /// `require`: a certificate must have been verified.
    pub required: bool,
    /// The CA file that verified it (`tls_client_ca`).
    pub trust: Arc<str>,
}

impl ExpectedCert {
    /// What a site with these settings expects; `None` when it asks for no
    /// certificate.
    pub fn of(site: &hayate_config::ClientCerts) -> Option<ExpectedCert> {
        let trust = site.ca.as_ref()?.display().to_string().into();
        match site.auth {
            ClientAuth::Off => None,
            auth => Some(ExpectedCert {
                required: auth == ClientAuth::Require,
                trust,
            }),
        }
    }
}

/// Whether a request over a connection with `cert` may be served by a site
/// expecting `expected`: a site without client certificates takes
/// connections that presented none; one with them, a certificate its own
/// CA verified (or none, when optional).
#[inline]
pub fn admits(expected: Option<&ExpectedCert>, cert: Option<&ClientCert>) -> bool {
    match (expected, cert) {
        (None, None) => true,
        (None, Some(_)) => false,
        (Some(e), None) => !e.required,
        (Some(e), Some(c)) => c.trust.as_deref() == Some(&*e.trust),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert(trust: &str) -> ClientCert {
        ClientCert {
            subject: "CN=a".into(),
            issuer: "CN=ca".into(),
            sans: String::new(),
            serial: "01".into(),
            fingerprint: "00".into(),
            not_after: String::new(),
            trust: Some(trust.into()),
        }
    }

    #[test]
    fn a_request_must_be_for_a_site_expecting_what_its_handshake_verified() {
        let require = ExpectedCert {
            required: true,
            trust: "/ca.pem".into(),
        };
        let optional = ExpectedCert {
            required: false,
            ..require.clone()
        };
        assert!(admits(None, None));
        assert!(!admits(None, Some(&cert("/ca.pem"))));
        assert!(!admits(Some(&require), None));
        assert!(admits(Some(&optional), None));
        assert!(admits(Some(&require), Some(&cert("/ca.pem"))));
        assert!(!admits(Some(&require), Some(&cert("/other.pem"))));
        assert!(!admits(Some(&optional), Some(&cert("/other.pem"))));
    }
}
