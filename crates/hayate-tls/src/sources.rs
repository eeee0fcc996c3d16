//! Where the served certificates come from — certificate files, the local
//! CA — and keeping them current while serving: a watcher thread looks
//! once a second for changed files (by inode, size and modification time
//! through symlinks, so certbot's `live/` links and Kubernetes' secret
//! swaps count too) and for local certificates two thirds through their
//! life. A file that fails to load keeps the certificate it replaces, and
//! the error log says why; it is tried again when it changes again.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::certificate::Certificate;
use crate::local_ca::LocalCa;
use crate::store::{CertStore, Layer};

/// How often the watcher looks. A second: a renewed certificate is served
/// within a second of being written, for one stat(2) per file per second.
const WATCH_INTERVAL: Duration = Duration::from_secs(1);

/// The certificates and where they come from.
#[derive(Debug)]
pub(crate) struct Sources {
    files: Vec<FilePair>,
    internal: Option<Internal>,
}

#[derive(Debug)]
struct FilePair {
    cert: PathBuf,
    key: PathBuf,
    /// The files as last tried.
    stamp: Stamp,
    /// What was last loaded from them.
    loaded: Certificate,
}

#[derive(Debug)]
struct Internal {
    ca: LocalCa,
    names: Vec<String>,
    current: Certificate,
}

/// What identifies a version of the two files.
type Stamp = [Option<(u64, u64, u64, i64, i64)>; 2];

fn stamp(cert: &Path, key: &Path) -> Stamp {
    let one = |p: &Path| {
        std::fs::metadata(p)
            .ok()
            .map(|m| (m.dev(), m.ino(), m.len(), m.mtime(), m.mtime_nsec()))
    };
    [one(cert), one(key)]
}

impl Sources {
    /// Loads every certificate file pair and, with `internal`, the local CA
    /// and a certificate for `names` from it. Any failure here is fatal:
    /// a server does not start without the certificates it was given.
    pub(crate) fn load(
        pairs: &[(PathBuf, PathBuf)],
        internal: Option<(&Path, Vec<String>)>,
    ) -> Result<Sources, String> {
        let mut files = Vec::new();
        for (cert, key) in pairs {
            let stamp = stamp(cert, key);
            let loaded = Certificate::from_files(cert, key)?;
            files.push(FilePair {
                cert: cert.clone(),
                key: key.clone(),
                stamp,
                loaded,
            });
        }
        let internal = match internal {
            Some((dir, names)) => {
                let ca = LocalCa::open_or_create(dir)?;
                let current = ca.issue(&names)?;
                Some(Internal { ca, names, current })
            }
            None => None,
        };
        Ok(Sources { files, internal })
    }

    /// The local CA's certificate file, when there is a local CA.
    pub(crate) fn ca_path(&self) -> Option<PathBuf> {
        self.internal
            .as_ref()
            .map(|i| i.ca.cert_path().to_path_buf())
    }

    /// The certificates in order: files as given, then the local one.
    pub(crate) fn certificates(&self) -> Vec<Certificate> {
        let files = self.files.iter().map(|f| f.loaded.clone());
        files
            .chain(self.internal.iter().map(|i| i.current.clone()))
            .collect()
    }

    /// Reloads changed files and renews local certificates that are due.
    /// True when a certificate changed.
    pub(crate) fn refresh(&mut self, now: SystemTime) -> bool {
        let mut changed = false;
        for f in &mut self.files {
            let now_stamp = stamp(&f.cert, &f.key);
            if now_stamp == f.stamp {
                continue;
            }
            f.stamp = now_stamp;
            match Certificate::from_files(&f.cert, &f.key) {
                Ok(c) => {
                    log::info!("TLS: reloaded {} (names {:?})", f.cert.display(), c.names);
                    f.loaded = c;
                    changed = true;
                }
                Err(e) => log::error!("TLS: keeping the certificate served until now: {e}"),
            }
        }
        if let Some(i) = &mut self.internal {
            if renewal_due(&i.current, now) {
                match i.ca.issue(&i.names) {
                    Ok(c) => {
                        log::info!("TLS: renewed the local certificate for {:?}", i.names);
                        i.current = c;
                        changed = true;
                    }
                    Err(e) => log::error!("TLS: renewing the local certificate failed: {e}"),
                }
            }
        }
        changed
    }

    /// Watches on a thread of its own, putting what changed into `store`,
    /// until `current` no longer says `generation` (a reload replaced these
    /// sources).
    #[allow(clippy::disallowed_methods)] // its own thread, not an event loop
    pub(crate) fn watch(mut self, store: Arc<CertStore>, current: Arc<AtomicU64>, generation: u64) {
        let spawned = std::thread::Builder::new()
            .name("hayate-tls-watch".into())
            .spawn(move || loop {
                std::thread::sleep(WATCH_INTERVAL);
                if current.load(Ordering::Acquire) != generation {
                    return;
                }
                if self.refresh(SystemTime::now()) {
                    store.replace(Layer::Configured, self.certificates());
                }
            });
        if let Err(e) = spawned {
            log::error!("TLS: certificate files will not be watched: {e}");
        }
    }
}

/// Two thirds through its validity (what Let's Encrypt and Caddy advise).
pub(crate) fn renewal_due(c: &Certificate, now: SystemTime) -> bool {
    now >= renewal_time(c)
}

/// When a certificate is due for renewal.
pub(crate) fn renewal_time(c: &Certificate) -> SystemTime {
    let life = c
        .not_after
        .duration_since(c.not_before)
        .unwrap_or(Duration::ZERO);
    c.not_before + life * 2 / 3
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::local_ca::{write_private, LEAF_LIFETIME};

    #[test]
    fn a_changed_file_is_reloaded_and_a_bad_one_keeps_the_old_certificate() {
        let dir = tempfile::tempdir().expect("tempdir");
        let key_pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("key");
        let issue = |name: &str| {
            let mut params = rcgen::CertificateParams::new(vec![name.to_string()]).expect("params");
            params.not_after = time::OffsetDateTime::now_utc() + time::Duration::days(1);
            params.self_signed(&key_pair).expect("cert").pem()
        };
        let cert = dir.path().join("site.crt");
        let key = dir.path().join("site.key");
        std::fs::write(&cert, issue("one.test")).expect("cert");
        write_private(&key, key_pair.serialize_pem().as_bytes()).expect("key");
        let mut sources = Sources::load(&[(cert.clone(), key.clone())], None).expect("load");
        assert_eq!(sources.certificates()[0].names, vec!["one.test"]);
        assert!(!sources.refresh(SystemTime::now()), "nothing changed");

        std::fs::write(&cert, issue("two.test")).expect("cert");
        assert!(sources.refresh(SystemTime::now()));
        assert_eq!(sources.certificates()[0].names, vec!["two.test"]);

        std::fs::write(&cert, "not a certificate\n").expect("cert");
        assert!(!sources.refresh(SystemTime::now()));
        assert_eq!(sources.certificates()[0].names, vec!["two.test"]);
        // A certificate whose key is another's is refused too.
        let other = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("key");
        let params = rcgen::CertificateParams::new(vec!["three.test".to_string()]).expect("p");
        std::fs::write(&cert, params.self_signed(&other).expect("cert").pem()).expect("cert");
        assert!(!sources.refresh(SystemTime::now()));
        assert_eq!(sources.certificates()[0].names, vec!["two.test"]);
    }

    #[test]
    fn local_certificates_are_renewed_two_thirds_through_their_life() {
        let dir = tempfile::tempdir().expect("tempdir");
        let names = vec!["localhost".to_string()];
        let mut sources = Sources::load(&[], Some((dir.path(), names))).expect("load");
        let first = sources.certificates()[0].not_after;
        let now = SystemTime::now();
        assert!(!sources.refresh(now + LEAF_LIFETIME / 2));
        assert!(sources.refresh(now + LEAF_LIFETIME * 7 / 10));
        assert!(sources.certificates()[0].not_after >= first);
    }
}
