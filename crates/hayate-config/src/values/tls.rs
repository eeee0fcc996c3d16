//! The value types of HTTPS: where certificates come from, the ACME
//! challenge, whether clients present certificates.

use super::OptValue;

/// Where HTTPS certificates come from besides `tls_cert`/`tls_key` files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsMode {
    /// Issued by a local CA that hayate creates in its state directory, for
    /// the site names, localhost and the listeners' addresses.
    Internal,
    /// Obtained from an ACME directory (Let's Encrypt by default) for the
    /// site names.
    Acme,
}

impl OptValue for TlsMode {
    fn parse_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "internal" => Ok(TlsMode::Internal),
            "acme" => Ok(TlsMode::Acme),
            _ => Err(format!("expected internal or acme, got {s:?}")),
        }
    }
}

/// Whether an https site asks its clients for a certificate (mutual TLS).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClientAuth {
    /// No certificate asked for.
    #[default]
    Off,
    /// Asked for; a client may send none, but one it sends must verify.
    Optional,
    /// A verified certificate or no connection (a TLS alert).
    Require,
}

impl ClientAuth {
    /// `off`, `optional` or `require`, as the config says it.
    pub fn as_str(self) -> &'static str {
        match self {
            ClientAuth::Off => "off",
            ClientAuth::Optional => "optional",
            ClientAuth::Require => "require",
        }
    }
}

impl OptValue for ClientAuth {
    fn parse_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "off" => Ok(ClientAuth::Off),
            "optional" => Ok(ClientAuth::Optional),
            "require" => Ok(ClientAuth::Require),
            _ => Err(format!("expected off, optional or require, got {s:?}")),
        }
    }
}

/// The ACME challenge hayate answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcmeChallenge {
    /// HTTP-01 when there is a plain-HTTP TCP listener, else TLS-ALPN-01.
    Auto,
    /// HTTP-01: a file on the plain-HTTP listener (port 80 for a public CA).
    Http01,
    /// TLS-ALPN-01: a certificate on the TLS listener (port 443).
    TlsAlpn01,
}

impl OptValue for AcmeChallenge {
    fn parse_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "auto" => Ok(AcmeChallenge::Auto),
            "http-01" => Ok(AcmeChallenge::Http01),
            "tls-alpn-01" => Ok(AcmeChallenge::TlsAlpn01),
            _ => Err(format!("expected auto, http-01 or tls-alpn-01, got {s:?}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_auth_is_off_optional_or_require() {
        assert_eq!(ClientAuth::parse_str("require"), Ok(ClientAuth::Require));
        assert_eq!(ClientAuth::parse_str(" optional"), Ok(ClientAuth::Optional));
        assert_eq!(ClientAuth::default(), ClientAuth::Off);
        for auth in [ClientAuth::Off, ClientAuth::Optional, ClientAuth::Require] {
            assert_eq!(ClientAuth::parse_str(auth.as_str()), Ok(auth));
        }
        let e = ClientAuth::parse_str("on").expect_err("not a mode");
        assert!(e.contains("off, optional or require"), "{e}");
    }
}
