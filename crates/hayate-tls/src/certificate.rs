//! One certificate with its key, ready for rustls, and what hayate needs to
//! know of it: the names it is for and when it expires.

use std::net::IpAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

use crate::acme_store::StoredCertificate;

/// A certificate chain and its key, and the names the leaf is for.
#[derive(Debug, Clone)]
pub struct Certificate {
    /// What rustls sends and signs with.
    pub key: Arc<CertifiedKey>,
    /// DNS names of the leaf, lower case; wildcards as `*.example.com`.
    pub names: Vec<String>,
    /// IP addresses of the leaf.
    pub ips: Vec<IpAddr>,
    /// Start of validity.
    pub not_before: SystemTime,
    /// End of validity.
    pub not_after: SystemTime,
    /// Where it came from, for logs: the certificate file, or `internal`.
    pub source: String,
    /// The leaf's issuer, as an RFC 4514 name (`CN=..., O=...`).
    pub issuer: String,
}

impl Certificate {
    /// Loads a PEM certificate chain (leaf first) and its PEM private key.
    /// Errors name the file and the problem; the key's bytes never appear
    /// in them.
    pub fn from_files(cert: &Path, key: &Path) -> Result<Certificate, String> {
        let chain = CertificateDer::pem_file_iter(cert)
            .map_err(|e| format!("{}: {e}", cert.display()))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("{}: {e}", cert.display()))?;
        if chain.is_empty() {
            return Err(format!("{}: no PEM certificate in it", cert.display()));
        }
        warn_if_readable_by_others(key);
        let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| match e {
            rustls::pki_types::pem::Error::NoItemsFound => {
                format!("{}: no PEM private key in it", key.display())
            }
            e => format!("{}: {e}", key.display()),
        })?;
        Certificate::from_der(chain, key_der, cert.display().to_string())
            .map_err(|e| format!("{} with {}: {e}", cert.display(), key.display()))
    }

    /// Loads a certificate kept by ACME's store: its PEM chain and key.
    /// Errors start with `source`; the key's bytes never appear in them.
    pub fn from_pem(stored: &StoredCertificate, source: String) -> Result<Certificate, String> {
        let chain = CertificateDer::pem_slice_iter(stored.chain_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("{source}: {e}"))?;
        if chain.is_empty() {
            return Err(format!("{source}: no PEM certificate in it"));
        }
        let key = PrivateKeyDer::from_pem_slice(stored.key_pem.as_bytes())
            .map_err(|e| format!("{source}: the private key: {e}"))?;
        Certificate::from_der(chain, key, source.clone()).map_err(|e| format!("{source}: {e}"))
    }

    /// Builds from DER: checks that the key is the leaf's and reads the
    /// leaf's names and validity.
    pub fn from_der(
        chain: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
        source: String,
    ) -> Result<Certificate, String> {
        let provider = crate::provider();
        let certified = CertifiedKey::from_der(chain, key, &provider).map_err(|e| match e {
            rustls::Error::InconsistentKeys(_) => {
                "the private key does not belong to the certificate".to_string()
            }
            e => e.to_string(),
        })?;
        let leaf = certified.cert[0].clone();
        let (_, parsed) = x509_parser::parse_x509_certificate(&leaf)
            .map_err(|e| format!("the certificate does not parse: {e}"))?;
        let mut names = Vec::new();
        let mut ips = Vec::new();
        if let Ok(Some(san)) = parsed.subject_alternative_name() {
            for name in &san.value.general_names {
                match name {
                    x509_parser::extensions::GeneralName::DNSName(n) => {
                        names.push(n.to_ascii_lowercase())
                    }
                    x509_parser::extensions::GeneralName::IPAddress(b) => {
                        if let Some(ip) = ip_from_bytes(b) {
                            ips.push(ip);
                        }
                    }
                    _ => {}
                }
            }
        }
        if names.is_empty() && ips.is_empty() {
            // Pre-SAN certificates: the subject's common name.
            if let Some(cn) = parsed.subject().iter_common_name().next() {
                if let Ok(cn) = cn.as_str() {
                    names.push(cn.to_ascii_lowercase());
                }
            }
        }
        let validity = parsed.validity();
        Ok(Certificate {
            key: Arc::new(certified),
            names,
            ips,
            not_before: to_system_time(validity.not_before.timestamp()),
            not_after: to_system_time(validity.not_after.timestamp()),
            source,
            issuer: parsed.issuer().to_string(),
        })
    }
}

fn ip_from_bytes(b: &[u8]) -> Option<IpAddr> {
    match b.len() {
        4 => Some(IpAddr::from(<[u8; 4]>::try_from(b).ok()?)),
        16 => Some(IpAddr::from(<[u8; 16]>::try_from(b).ok()?)),
        _ => None,
    }
}

fn to_system_time(unix: i64) -> SystemTime {
    match u64::try_from(unix) {
        Ok(s) => SystemTime::UNIX_EPOCH + Duration::from_secs(s),
        Err(_) => SystemTime::UNIX_EPOCH,
    }
}

/// A private key others can read is a key others may have: say so (nginx
/// and Caddy do not; ssh refuses such keys outright).
fn warn_if_readable_by_others(key: &Path) {
    if let Ok(meta) = std::fs::metadata(key) {
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            log::warn!(
                "TLS key {} is readable by group or others (mode {mode:03o}); run chmod 600 on it",
                key.display()
            );
        }
    }
}
