//! A local certificate authority, like Caddy's `tls internal`: created once
//! in the state directory (`ca.crt`, and `ca.key` readable by the owner
//! only), it issues short-lived certificates for the site names so that
//! development and intranet sites get HTTPS with one flag. A user trusts
//! `ca.crt` once (its path is printed at start).

use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use crate::certificate::Certificate;

/// How long a certificate from the local CA is valid. Caddy uses 12 hours;
/// a week leaves a stopped laptop's server valid when it wakes, and the
/// watcher renews at two thirds of it.
pub const LEAF_LIFETIME: Duration = Duration::from_secs(7 * 24 * 3600);
/// How long the CA itself is valid (Caddy's root: 10 years).
const CA_LIFETIME: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// The local CA: its certificate and key, loaded or created.
pub struct LocalCa {
    issuer: Issuer<'static, KeyPair>,
    cert_path: PathBuf,
}

impl std::fmt::Debug for LocalCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalCa")
            .field("cert_path", &self.cert_path)
            .finish_non_exhaustive()
    }
}

impl LocalCa {
    /// Loads the CA from `dir`, or creates it there (the directory too,
    /// mode 0700).
    pub fn open_or_create(dir: &Path) -> Result<LocalCa, String> {
        let cert_path = dir.join("ca.crt");
        let key_path = dir.join("ca.key");
        let say = |what: &Path, e: &dyn std::fmt::Display| format!("{}: {e}", what.display());
        if cert_path.exists() && key_path.exists() {
            let key_pem = fs::read_to_string(&key_path).map_err(|e| say(&key_path, &e))?;
            let key = KeyPair::from_pem(&key_pem).map_err(|e| say(&key_path, &e))?;
            let cert_pem = fs::read_to_string(&cert_path).map_err(|e| say(&cert_path, &e))?;
            let issuer =
                Issuer::from_ca_cert_pem(&cert_pem, key).map_err(|e| say(&cert_path, &e))?;
            return Ok(LocalCa { issuer, cert_path });
        }
        fs::create_dir_all(dir).map_err(|e| say(dir, &e))?;
        let _ = fs::set_permissions(dir, fs::Permissions::from_mode(0o700));
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
            .map_err(|e| format!("creating the local CA's key: {e}"))?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "hayate local CA");
        dn.push(DnType::OrganizationName, "hayate");
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let now = time::OffsetDateTime::now_utc();
        params.not_before = now - time::Duration::hours(1);
        params.not_after = now + CA_LIFETIME;
        let cert = params
            .self_signed(&key)
            .map_err(|e| format!("creating the local CA: {e}"))?;
        write_private(&key_path, key.serialize_pem().as_bytes()).map_err(|e| say(&key_path, &e))?;
        fs::write(&cert_path, cert.pem()).map_err(|e| say(&cert_path, &e))?;
        log::info!("created a local CA at {}", cert_path.display());
        Ok(LocalCa {
            issuer: Issuer::new(params, key),
            cert_path,
        })
    }

    /// The CA certificate's file, for users to trust.
    pub fn cert_path(&self) -> &Path {
        &self.cert_path
    }

    /// Issues a certificate for `names` (DNS names or IP addresses), with a
    /// new P-256 key, valid for [`LEAF_LIFETIME`].
    pub fn issue(&self, names: &[String]) -> Result<Certificate, String> {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
            .map_err(|e| format!("creating a key: {e}"))?;
        let mut params = CertificateParams::default();
        params.subject_alt_names = names
            .iter()
            .map(|n| match n.parse() {
                Ok(ip) => Ok(SanType::IpAddress(ip)),
                Err(_) => n
                    .clone()
                    .try_into()
                    .map(SanType::DnsName)
                    .map_err(|e| format!("{n:?}: {e}")),
            })
            .collect::<Result<_, _>>()?;
        let mut dn = DistinguishedName::new();
        dn.push(
            DnType::CommonName,
            names.first().cloned().unwrap_or_default(),
        );
        params.distinguished_name = dn;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let now = time::OffsetDateTime::now_utc();
        params.not_before = now - time::Duration::minutes(5);
        params.not_after = now + LEAF_LIFETIME;
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(|e| format!("issuing a certificate for {names:?}: {e}"))?;
        let chain = vec![CertificateDer::from(cert.der().to_vec())];
        let key_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        Certificate::from_der(chain, key_der, "internal".into())
    }
}

/// Creates (or replaces) a file readable by the owner only, with `data`.
pub fn write_private(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(data)?;
    f.sync_all()?;
    fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ca_is_created_once_and_reused_and_its_key_is_private() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = LocalCa::open_or_create(&dir.path().join("state")).expect("create");
        let pem = fs::read(ca.cert_path()).expect("ca.crt");
        let key_mode = fs::metadata(dir.path().join("state/ca.key"))
            .expect("ca.key")
            .permissions()
            .mode();
        assert_eq!(key_mode & 0o777, 0o600);
        let leaf = ca
            .issue(&["localhost".into(), "127.0.0.1".into()])
            .expect("issue");
        assert_eq!(leaf.names, vec!["localhost"]);
        assert_eq!(
            leaf.ips,
            vec!["127.0.0.1".parse::<std::net::IpAddr>().unwrap()]
        );
        // Opened again: the same CA, which still issues.
        let again = LocalCa::open_or_create(&dir.path().join("state")).expect("open");
        assert_eq!(fs::read(again.cert_path()).expect("ca.crt"), pem);
        again.issue(&["example.test".into()]).expect("issue");
    }
}
