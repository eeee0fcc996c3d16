//! Client certificates (mutual TLS): each site's `tls_client_auth`,
//! `tls_client_ca` and `tls_client_crl` become a rustls verifier
//! (rustls's `WebPkiClientVerifier`: chain to the CA, validity, CRLs), and
//! the server configurations of the https listeners one per distinct
//! setting ([`Handshakes`]), chosen by the ClientHello's SNI.
//!
//! Why per SNI and how (decision 0020): a verifier belongs to a rustls
//! `ServerConfig`, and the CertificateRequest goes out before any request
//! names its Host, so a listener serving sites with different settings
//! must pick the configuration once it has read the ClientHello
//! (tokio-rustls's `LazyConfigAcceptor`). When every site has the same
//! setting (the common case: no client certificates anywhere) there is one
//! configuration and the handshake is the plain one, as before.
//!
//! Resumption: a configuration that verifies clients has its own ticket
//! keys and session cache, made anew each time it is built (start, reload),
//! so a session from another site or from before a CA or CRL changed does
//! not resume into it; rustls also refuses to resume under another SNI
//! (RFC 6066 §3), and a resumed session brings the certificate it was
//! verified with.
//!
//! After the handshake, the verified certificate is described once for
//! the connection ([`ClientCert`]), for upstreams.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;

use hayate_config::values::ClientAuth;
use hayate_config::{ClientCerts, Config};
use hayate_core::client_cert::ClientCert;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, CertificateRevocationListDer};
use rustls::server::danger::ClientCertVerifier;
use rustls::server::{ServerSessionMemoryCache, WebPkiClientVerifier};
use rustls::{CertificateError, RootCertStore, ServerConfig};

/// The server configurations of the https listeners: the default one and
/// one for each site whose client-certificate setting differs from it.
#[derive(Debug)]
pub(crate) struct Handshakes {
    /// Without client certificates: for ACME's TLS-ALPN-01 validation,
    /// which presents none whatever the site asks.
    base: Handshake,
    /// For a name that is no site's, and for sites with the default
    /// site's setting.
    default: Handshake,
    /// Sites with another setting: their host patterns, in site order,
    /// and their configuration.
    sites: Vec<(Vec<String>, Handshake)>,
}

/// A server configuration and the client-certificate setting it verifies.
#[derive(Debug, Clone)]
pub(crate) struct Handshake {
    pub(crate) config: Arc<ServerConfig>,
    pub(crate) auth: ClientAuth,
    /// Names what verified a client's certificate: the CA file's path (two
    /// sites with the same file trust the same clients).
    pub(crate) trust: Option<Arc<str>>,
}

impl Handshakes {
    /// The configurations for `config`'s sites, each a copy of `base`
    /// (certificates, ALPN, ticket keys) with its verifier. Fails naming
    /// the CA or CRL file that cannot be used.
    pub(crate) fn build(config: &Config, base: &Arc<ServerConfig>) -> Result<Handshakes, String> {
        let g = &config.global;
        let default_site = config
            .sites
            .iter()
            .position(|s| s.hosts.is_empty())
            .unwrap_or(0);
        let setting = |i: usize| {
            config
                .sites
                .get(i)
                .map_or_else(|| global_setting(g), |s| s.tls.client_certs(g))
        };
        let default_setting = setting(default_site);
        let mut built: Vec<(ClientCerts, Handshake)> = Vec::new();
        let mut handshake_for = |s: &ClientCerts| -> Result<Handshake, String> {
            if let Some((_, h)) = built.iter().find(|(b, _)| b == s) {
                return Ok(h.clone());
            }
            let h = Handshake::new(s, base)?;
            built.push((s.clone(), h.clone()));
            Ok(h)
        };
        let default = handshake_for(&default_setting)?;
        let mut sites = Vec::new();
        for (i, site) in config.sites.iter().enumerate() {
            let s = setting(i);
            if s != default_setting && !site.hosts.is_empty() {
                sites.push((site.hosts.clone(), handshake_for(&s)?));
            }
        }
        let base = Handshake {
            config: base.clone(),
            auth: ClientAuth::Off,
            trust: None,
        };
        Ok(Handshakes {
            base,
            default,
            sites,
        })
    }

    /// The one configuration of every handshake, when no site asks for
    /// client certificates: the ClientHello need not be read first.
    pub(crate) fn single(&self) -> Option<&Handshake> {
        let none = self.sites.is_empty() && self.default.auth == ClientAuth::Off;
        none.then_some(&self.default)
    }

    /// The configuration for `hello`: the first site whose hosts match its
    /// SNI (as requests' Host is routed), else the default.
    pub(crate) fn for_hello(&self, hello: &rustls::server::ClientHello<'_>) -> &Handshake {
        let mut alpn = hello.alpn().into_iter().flatten();
        if alpn.any(|p| p == crate::acme::ACME_TLS_ALPN) {
            return &self.base;
        }
        let Some(name) = hello.server_name() else {
            return &self.default;
        };
        self.sites
            .iter()
            .find(|(hosts, _)| hosts.iter().any(|h| host_matches(h, name)))
            .map_or(&self.default, |(_, h)| h)
    }
}

/// Loads every site's client CA and CRL files as a start would:
/// `Err((key, path, why))` for the first that cannot be used (for
/// `hayate check`).
pub fn check(config: &Config) -> Result<(), (&'static str, std::path::PathBuf, String)> {
    for site in &config.sites {
        let s = site.tls.client_certs(&config.global);
        let (ClientAuth::Optional | ClientAuth::Require, Some(ca)) = (s.auth, &s.ca) else {
            continue;
        };
        if let Err(why) = verifier(s.auth, ca, &s.crl) {
            let bad_crl = s
                .crl
                .iter()
                .find(|c| why.contains(&c.display().to_string()));
            return Err(match bad_crl {
                Some(crl) if why.starts_with("tls_client_crl") => {
                    ("tls_client_crl", crl.clone(), why)
                }
                _ => ("tls_client_ca", ca.clone(), why),
            });
        }
    }
    Ok(())
}

/// The global setting, for a configuration without sites.
pub(crate) fn global_setting(g: &hayate_config::GlobalOptions) -> ClientCerts {
    hayate_config::SiteTls::default().client_certs(g)
}

/// Whether `name` (from SNI) is `host`, or under `*.suffix`.
fn host_matches(host: &str, name: &str) -> bool {
    match host.strip_prefix("*.") {
        Some(suffix) => name
            .strip_suffix(suffix)
            .and_then(|n| n.strip_suffix('.'))
            .is_some_and(|label| !label.is_empty()),
        None => host.eq_ignore_ascii_case(name),
    }
}

impl Handshake {
    fn new(setting: &ClientCerts, base: &Arc<ServerConfig>) -> Result<Handshake, String> {
        let ca = match (setting.auth, &setting.ca) {
            (ClientAuth::Off, _) => {
                return Ok(Handshake {
                    config: base.clone(),
                    auth: ClientAuth::Off,
                    trust: None,
                })
            }
            (_, Some(ca)) => ca,
            (_, None) => return Err("tls_client_auth needs tls_client_ca".into()),
        };
        // The base's settings (`server_config`) with this verifier, which
        // only the builder sets.
        let provider = Arc::new(crate::provider());
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(crate::VERSIONS)
            .map_err(|e| format!("TLS configuration: {e}"))?
            .with_client_cert_verifier(verifier(setting.auth, ca, &setting.crl)?)
            .with_cert_resolver(base.cert_resolver.clone());
        config.ignore_client_order = base.ignore_client_order;
        config.alpn_protocols = base.alpn_protocols.clone();
        config.max_early_data_size = base.max_early_data_size;
        config.ticketer = rustls::crypto::aws_lc_rs::Ticketer::new()
            .map_err(|e| format!("TLS session tickets: {e}"))?;
        config.session_storage = ServerSessionMemoryCache::new(crate::SESSION_CACHE);
        Ok(Handshake {
            config: Arc::new(config),
            auth: setting.auth,
            trust: Some(ca.display().to_string().into()),
        })
    }
}

/// The verifier of `auth` against the CA bundle `ca` and the revocation
/// lists `crls`. Like nginx's `ssl_crl`, a certificate whose issuer has no
/// list among them is refused once any list is given (its status is
/// unknown); a list past its next update is still used.
pub(crate) fn verifier(
    auth: ClientAuth,
    ca: &Path,
    crls: &[std::path::PathBuf],
) -> Result<Arc<dyn ClientCertVerifier>, String> {
    let at = |e: &dyn std::fmt::Display| format!("tls_client_ca {}: {e}", ca.display());
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).map_err(|e| at(&e))? {
        roots.add(cert.map_err(|e| at(&e))?).map_err(|e| at(&e))?;
    }
    if roots.is_empty() {
        return Err(at(&"no PEM certificate in it"));
    }
    let mut lists = Vec::new();
    for path in crls {
        let at = |e: &dyn std::fmt::Display| format!("tls_client_crl {}: {e}", path.display());
        let bytes = std::fs::read(path).map_err(|e| at(&e))?;
        if bytes.starts_with(b"-----") {
            let before = lists.len();
            for crl in CertificateRevocationListDer::pem_slice_iter(&bytes) {
                lists.push(crl.map_err(|e| at(&e))?);
            }
            if lists.len() == before {
                return Err(at(&"no PEM CRL (X509 CRL) in it"));
            }
        } else {
            lists.push(CertificateRevocationListDer::from(bytes));
        }
    }
    let provider = Arc::new(crate::provider());
    let mut builder =
        WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider).with_crls(lists);
    if auth == ClientAuth::Optional {
        builder = builder.allow_unauthenticated();
    }
    builder.build().map_err(|e| {
        let files = crls.iter().map(|p| p.display().to_string());
        let files: Vec<String> = std::iter::once(ca.display().to_string())
            .chain(files)
            .collect();
        format!("tls_client_ca/tls_client_crl {}: {e}", files.join(", "))
    })
}

/// Why a handshake with client certificates failed, for metrics and logs
/// (from rustls's error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CertFailure {
    /// `require`, and the client sent none.
    Missing,
    /// Past its validity (or not yet valid).
    Expired,
    /// Not issued by the site's CA.
    UnknownCa,
    /// Listed in a revocation list.
    Revoked,
    /// Another reason (a bad signature, a wrong key usage, ...).
    Invalid,
}

impl CertFailure {
    pub(crate) const ALL: [CertFailure; 5] = [
        CertFailure::Missing,
        CertFailure::Expired,
        CertFailure::UnknownCa,
        CertFailure::Revoked,
        CertFailure::Invalid,
    ];

    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            CertFailure::Missing => "missing",
            CertFailure::Expired => "expired",
            CertFailure::UnknownCa => "unknown_ca",
            CertFailure::Revoked => "revoked",
            CertFailure::Invalid => "invalid",
        }
    }

    /// The client-certificate failure in an error of the handshake, if it
    /// is one.
    pub(crate) fn of(e: &std::io::Error) -> Option<CertFailure> {
        let e = e.get_ref()?.downcast_ref::<rustls::Error>()?;
        Some(match e {
            rustls::Error::NoCertificatesPresented => CertFailure::Missing,
            rustls::Error::InvalidCertificate(c) => match c {
                CertificateError::Expired
                | CertificateError::ExpiredContext { .. }
                | CertificateError::NotValidYet
                | CertificateError::NotValidYetContext { .. } => CertFailure::Expired,
                CertificateError::UnknownIssuer => CertFailure::UnknownCa,
                CertificateError::Revoked => CertFailure::Revoked,
                _ => CertFailure::Invalid,
            },
            _ => return None,
        })
    }
}

/// Describes the certificate a client presented (already verified), for
/// upstreams; `None` when it cannot be parsed (rustls verified it, so
/// this does not happen).
pub(crate) fn describe(der: &[u8], trust: Option<Arc<str>>) -> Option<ClientCert> {
    use x509_parser::extensions::GeneralName;
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let mut sans = String::new();
    if let Ok(Some(ext)) = cert.subject_alternative_name() {
        for name in &ext.value.general_names {
            let (kind, value) = match name {
                GeneralName::DNSName(n) => ("DNS", n.to_string()),
                GeneralName::RFC822Name(n) => ("email", n.to_string()),
                GeneralName::URI(n) => ("URI", n.to_string()),
                GeneralName::IPAddress(b) => ("IP", ip_text(b)),
                _ => continue,
            };
            if !sans.is_empty() {
                sans.push_str(", ");
            }
            let _ = write!(sans, "{kind}:{value}");
        }
    }
    let fingerprint = ring::digest::digest(&ring::digest::SHA256, der);
    let not_after = std::time::UNIX_EPOCH
        + std::time::Duration::from_secs(cert.validity().not_after.timestamp().max(0) as u64);
    Some(ClientCert {
        subject: printable(&rfc4514(cert.subject())),
        issuer: printable(&rfc4514(cert.issuer())),
        sans: printable(&sans),
        serial: cert
            .raw_serial_as_string()
            .replace(':', "")
            .to_ascii_uppercase(),
        fingerprint: hex(fingerprint.as_ref()),
        not_after: httpdate::fmt_http_date(not_after),
        trust,
    })
}

/// A DN the way OpenSSL's RFC 2253 option prints it: the most specific
/// attribute first, no spaces (`CN=alice,O=Example`), as nginx's
/// `$ssl_client_s_dn` does.
fn rfc4514(name: &x509_parser::x509::X509Name<'_>) -> String {
    let registry = x509_parser::objects::oid_registry();
    let mut parts: Vec<String> = Vec::new();
    for rdn in name.iter() {
        let attrs: Vec<String> = rdn
            .iter()
            .map(|a| {
                let oid = a.attr_type().to_id_string();
                let key = match short_name(&oid) {
                    Some(k) => k.to_string(),
                    None => registry
                        .get(a.attr_type())
                        .map_or(oid, |e| e.sn().to_string()),
                };
                let value = a.as_str().unwrap_or("?");
                format!("{key}={}", escape_dn_value(value))
            })
            .collect();
        parts.push(attrs.join("+"));
    }
    parts.reverse();
    parts.join(",")
}

/// The short names RFC 4514 §3 and OpenSSL print for DN attributes.
fn short_name(oid: &str) -> Option<&'static str> {
    Some(match oid {
        "2.5.4.3" => "CN",
        "2.5.4.5" => "serialNumber",
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.9" => "STREET",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "0.9.2342.19200300.100.1.1" => "UID",
        "0.9.2342.19200300.100.1.25" => "DC",
        "1.2.840.113549.1.9.1" => "emailAddress",
        _ => return None,
    })
}

/// RFC 4514 §2.4's escapes of an attribute value.
fn escape_dn_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for (i, c) in v.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i + 1 == v.chars().count() && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// `s` with every byte outside printable ASCII as `\xHH`: a header value
/// can carry it as is.
fn printable(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if (0x20..0x7f).contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "\\x{b:02X}");
        }
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

fn ip_text(b: &[u8]) -> String {
    match b.len() {
        4 => std::net::Ipv4Addr::from(<[u8; 4]>::try_from(b).unwrap_or_default()).to_string(),
        16 => std::net::Ipv6Addr::from(<[u8; 16]>::try_from(b).unwrap_or_default()).to_string(),
        _ => hex(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sni_matches_hosts_and_wildcards_like_the_router() {
        assert!(host_matches("a.test", "a.test"));
        assert!(host_matches("A.test", "a.TEST"));
        assert!(host_matches("*.a.test", "x.a.test"));
        assert!(!host_matches("*.a.test", "a.test"));
        assert!(!host_matches("*.a.test", "xa.test"));
        assert!(!host_matches("a.test", "b.test"));
    }

    #[test]
    fn a_certificate_is_described_with_printable_values() {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("key");
        let mut params = rcgen::CertificateParams::new(vec!["device.test".into()]).expect("p");
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "Example, Inc");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "alice\u{e9}");
        params.subject_alt_names.push(rcgen::SanType::Rfc822Name(
            "alice@example.test".try_into().expect("email"),
        ));
        params.serial_number = Some(rcgen::SerialNumber::from_slice(&[0x0a, 0xbc]));
        let cert = params.self_signed(&key).expect("cert");
        let c = describe(cert.der(), None).expect("parsed");
        assert_eq!(c.subject, "CN=alice\\xC3\\xA9,O=Example\\, Inc");
        assert_eq!(c.subject, c.issuer);
        assert_eq!(c.sans, "DNS:device.test, email:alice@example.test");
        assert_eq!(c.serial, "0ABC");
        assert_eq!(c.fingerprint.len(), 64);
    }
}
