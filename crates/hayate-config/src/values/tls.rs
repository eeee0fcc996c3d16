//! The value types of HTTPS: where certificates come from, the ACME
//! challenge, whether clients present certificates.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

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

/// Whether HTTP/3 accepts 0-RTT (early data, RFC 9001 §4.6), which an
/// attacker can replay: off, or for safe methods only (RFC 8470).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EarlyData {
    /// Session tickets offer no early data; a client that sends some has
    /// it refused and sends its requests again after the handshake.
    #[default]
    Off,
    /// Early data accepted: GET, HEAD and OPTIONS sent in it are served
    /// and marked `Early-Data: 1` upstream; anything else gets 425.
    Safe,
}

impl OptValue for EarlyData {
    fn parse_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "off" => Ok(EarlyData::Off),
            "safe" => Ok(EarlyData::Safe),
            _ => Err(format!("expected off or safe, got {s:?}")),
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
    /// DNS-01: a TXT record at `_acme-challenge.NAME`, put there over
    /// RFC 2136 or by a hook; the only one for wildcard names.
    Dns01,
}

impl OptValue for AcmeChallenge {
    fn parse_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "auto" => Ok(AcmeChallenge::Auto),
            "http-01" => Ok(AcmeChallenge::Http01),
            "tls-alpn-01" => Ok(AcmeChallenge::TlsAlpn01),
            "dns-01" => Ok(AcmeChallenge::Dns01),
            _ => Err(format!(
                "expected auto, http-01, tls-alpn-01 or dns-01, got {s:?}"
            )),
        }
    }
}

/// A DNS server's address: `IP:PORT`, or `IP` for port 53.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DnsAddr(pub SocketAddr);

impl OptValue for DnsAddr {
    fn parse_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if let Ok(a) = s.parse::<SocketAddr>() {
            return Ok(DnsAddr(a));
        }
        let ip = s.trim_start_matches('[').trim_end_matches(']');
        match ip.parse::<IpAddr>() {
            Ok(ip) => Ok(DnsAddr(SocketAddr::new(ip, 53))),
            Err(_) => Err(format!(
                "expected a DNS server's address, IP or IP:PORT ([V6]:PORT), got {s:?}"
            )),
        }
    }
}

/// A TSIG key (RFC 8945) for DNS updates: given in the config as
/// `NAME:ALGORITHM:BASE64SECRET`, or read from a key file as
/// `tsig-keygen` writes it (a path: starts with `/` or `.`). The secret is
/// never printed (`Debug` hides it).
#[derive(Clone, PartialEq, Eq)]
pub enum TsigKey {
    /// Given in the config.
    Inline {
        /// The key's name, as the DNS server knows it.
        name: String,
        /// `hmac-sha256`, `hmac-sha384`, `hmac-sha512` or `hmac-sha1`.
        algorithm: String,
        /// The shared secret, decoded.
        secret: Vec<u8>,
    },
    /// A BIND key file (`key "NAME" { algorithm ALG; secret "B64"; };`),
    /// read when certificates are set up.
    File(PathBuf),
}

impl std::fmt::Debug for TsigKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TsigKey::Inline {
                name, algorithm, ..
            } => write!(f, "TsigKey({name}:{algorithm}:<secret>)"),
            TsigKey::File(p) => write!(f, "TsigKey(file {})", p.display()),
        }
    }
}

/// The TSIG algorithms hayate signs with (RFC 8945 §6; MD5 refused).
pub const TSIG_ALGORITHMS: [&str; 4] = ["hmac-sha256", "hmac-sha384", "hmac-sha512", "hmac-sha1"];

impl OptValue for TsigKey {
    fn parse_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if s.starts_with('/') || s.starts_with('.') {
            return Ok(TsigKey::File(PathBuf::from(s)));
        }
        let mut parts = s.splitn(3, ':');
        let (Some(name), Some(algorithm), Some(secret)) =
            (parts.next(), parts.next(), parts.next())
        else {
            return Err(
                "expected NAME:ALGORITHM:BASE64SECRET (hmac-sha256) or the path of a tsig-keygen key file"
                    .into(),
            );
        };
        TsigKey::from_parts(name, algorithm, secret)
    }
}

impl TsigKey {
    /// A key from its name, algorithm and base64 secret, checked.
    pub fn from_parts(name: &str, algorithm: &str, secret: &str) -> Result<TsigKey, String> {
        let algorithm = algorithm.to_ascii_lowercase();
        if !TSIG_ALGORITHMS.contains(&algorithm.as_str()) {
            return Err(format!(
                "TSIG algorithm {algorithm:?} is not one of {}",
                TSIG_ALGORITHMS.join(", ")
            ));
        }
        if name.is_empty() {
            return Err("the TSIG key has no name".into());
        }
        let secret = base64_decode(secret.trim())
            .ok_or("the TSIG secret is not base64 (as tsig-keygen writes it)")?;
        Ok(TsigKey::Inline {
            name: name.to_string(),
            algorithm,
            secret,
        })
    }

    /// The key of a file as `tsig-keygen` writes it:
    /// `key "NAME" { algorithm ALG; secret "B64"; };`.
    pub fn from_bind_file(text: &str) -> Result<TsigKey, String> {
        let word_after = |what: &str| -> Option<String> {
            let rest = &text[text.find(what)? + what.len()..];
            let rest = rest.trim_start();
            let end = rest.find(|c: char| c == ';' || c == '{' || c.is_whitespace())?;
            Some(rest[..end].trim_matches('"').to_string())
        };
        let name = word_after("key ").ok_or("no `key \"NAME\"` in the key file")?;
        let algorithm = word_after("algorithm ").ok_or("no `algorithm` in the key file")?;
        let secret = word_after("secret ").ok_or("no `secret` in the key file")?;
        TsigKey::from_parts(&name, &algorithm, &secret)
    }
}

/// Standard base64 (RFC 4648 §4, padding optional); `None` if not.
fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let s = s.trim_end_matches('=').as_bytes();
    if s.is_empty() || s.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    for chunk in s.chunks(4) {
        let mut n = 0u32;
        for (i, c) in chunk.iter().enumerate() {
            n |= value(*c)? << (18 - 6 * i);
        }
        let bytes = n.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    Some(out)
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

    #[test]
    fn a_tsig_key_is_name_algorithm_secret_or_a_key_file() {
        let key = TsigKey::parse_str("acme:hmac-sha256:aGVsbG8gd29ybGQ=").expect("inline");
        assert_eq!(
            key,
            TsigKey::Inline {
                name: "acme".into(),
                algorithm: "hmac-sha256".into(),
                secret: b"hello world".to_vec(),
            }
        );
        assert!(
            !format!("{key:?}").contains("aGVs"),
            "the secret is never printed"
        );
        let file = r#"key "acme-key" {
	algorithm hmac-sha256;
	secret "aGk=";
};"#;
        match TsigKey::from_bind_file(file).expect("file") {
            TsigKey::Inline { name, secret, .. } => {
                assert_eq!((name.as_str(), secret.as_slice()), ("acme-key", &b"hi"[..]))
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            TsigKey::parse_str("/etc/bind/acme.key"),
            Ok(TsigKey::File("/etc/bind/acme.key".into()))
        );
        let e = TsigKey::parse_str("acme:hmac-md5:aGk=").expect_err("md5");
        assert!(e.contains("hmac-md5"), "{e}");
        let e = TsigKey::parse_str("acme:hmac-sha256:not base64!").expect_err("b64");
        assert!(e.contains("base64"), "{e}");
        assert!(TsigKey::parse_str("acme").is_err());
    }

    #[test]
    fn a_dns_server_is_an_address_with_port_53_by_default() {
        assert_eq!(
            DnsAddr::parse_str("127.0.0.1:5353").map(|a| a.0.port()),
            Ok(5353)
        );
        assert_eq!(DnsAddr::parse_str("::1").map(|a| a.0.port()), Ok(53));
        let e = DnsAddr::parse_str("ns1.example.com").expect_err("a name");
        assert!(e.contains("IP:PORT"), "{e}");
    }
}
