//! Automatic certificates (ACME, RFC 8555), with instant-acme as the
//! protocol client: one certificate per name, obtained and renewed by one
//! thread of its own, so a name is never ordered twice at once however many
//! workers serve it.
//!
//! - Stored in the state directory, per ACME directory: the account
//!   (`account.json`) and each name's chain and key (`certs/NAME.crt`,
//!   `certs/NAME.key`), keys and account mode 0600. Stored certificates are
//!   served from the start, so a restart orders nothing.
//! - Shared by several boxes when given a shared [`AcmeStore`] (Redis):
//!   one account, a name ordered by the box holding its lock while the
//!   others wait for the certificate, challenge answers given by every box,
//!   and a certificate another box stored served at once. The state
//!   directory is written too, and read at start before any network.
//! - Challenges: HTTP-01, answered on the plain-HTTP listener from
//!   [`Challenges`] (the pipeline asks it for
//!   `/.well-known/acme-challenge/TOKEN`), or TLS-ALPN-01 (RFC 8737),
//!   answered by the TLS listener's certificate choice when a client offers
//!   only `acme-tls/1`. HTTP-01 when hayate has a plain-HTTP TCP listener,
//!   else TLS-ALPN-01 (`acme_challenge` chooses). DNS-01, the only one for
//!   wildcard names, by a TXT record in DNS (see `dns01`).
//! - Names ordered on demand (`crate::on_demand`): sent by handshakes over
//!   a channel, ordered by the same thread one at a time, then renewed with
//!   the configured names.
//! - Renewal at two thirds of a certificate's life, or earlier when the CA's
//!   renewal information (ARI, RFC 9773) suggests a window that has begun
//!   (a CA revoking certificates asks this way). A failure is logged with
//!   the ACME server's reason, counted on /metrics, and retried with backoff
//!   (10 s doubling to an hour); serving goes on with the certificate there
//!   is, and a name without one fails its handshakes only.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use tokio::sync::mpsc;

use crate::acme_store::{AcmeStore, DirectoryStore};
use crate::certificate::Certificate;
use crate::metrics::TlsMetrics;
use crate::on_demand::OnDemandOrder;
use crate::store::{CertStore, Layer};

mod account;
mod challenges;
mod dns01;
mod order;
mod renewal;
mod rfc2136;

pub use challenges::Challenges;
pub use dns01::{Dns01Outcome, Dns01Settings, DnsProvider};

/// The ALPN protocol of TLS-ALPN-01 validation (RFC 8737 §6.2).
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

/// How the ACME server checks that hayate answers for a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChallengeKind {
    /// A file on the plain-HTTP listener (port 80 for a public CA).
    Http01,
    /// A certificate on the TLS listener (port 443 for a public CA).
    TlsAlpn01,
    /// A TXT record in DNS (the only one for wildcard names).
    Dns01,
}

/// What ACME needs to know.
#[derive(Debug, Clone)]
pub struct AcmeSettings {
    /// The directory URL.
    pub directory: String,
    /// A contact address for the account.
    pub email: Option<String>,
    /// The CA that signs the ACME server's own HTTPS certificate, when it
    /// is not a public one (a private ACME server, pebble in tests).
    pub ca_root: Option<PathBuf>,
    /// Where this directory's account and certificates are kept.
    pub dir: PathBuf,
    /// The names to get certificates for.
    pub names: Vec<String>,
    /// The challenge to answer, unless `challenge_of` names another.
    pub challenge: ChallengeKind,
    /// Names answered with another challenge: wildcards (DNS-01) and the
    /// hosts of sites with their own `acme_challenge`.
    pub challenge_of: Vec<(String, ChallengeKind)>,
    /// How DNS-01 records are set, whenever a way is configured.
    pub dns01: Option<Dns01Settings>,
    /// Whether names are also ordered on demand (their stored
    /// certificates served at start too).
    pub on_demand: bool,
}

impl AcmeSettings {
    /// The challenge `name` is ordered with.
    pub fn challenge_for(&self, name: &str) -> ChallengeKind {
        self.challenge_of
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map_or(self.challenge, |&(_, kind)| kind)
    }
}

/// The ACME side of the TLS server.
pub(crate) struct Acme {
    settings: AcmeSettings,
    challenges: Arc<Challenges>,
    store: Arc<CertStore>,
    metrics: Arc<TlsMetrics>,
    /// The state directory: always written, so that a box restarted while
    /// a shared store is down serves what it had.
    local: DirectoryStore,
    /// Where the account and certificates live: `local`, or a store shared
    /// with other boxes.
    storage: Arc<dyn AcmeStore>,
    /// The certificates obtained so far, by name.
    current: Mutex<HashMap<String, Certificate>>,
    /// Names to order on demand (taken by the ACME thread when it starts).
    on_demand: Mutex<Option<mpsc::UnboundedReceiver<OnDemandOrder>>>,
}

impl Acme {
    /// ACME for `settings`, keeping state in `shared` when given (several
    /// boxes), else in the state directory alone.
    pub(crate) fn new(
        settings: AcmeSettings,
        challenges: Arc<Challenges>,
        store: Arc<CertStore>,
        metrics: Arc<TlsMetrics>,
        shared: Option<Arc<dyn AcmeStore>>,
    ) -> Acme {
        let local = DirectoryStore::new(&settings.dir);
        let storage = shared.unwrap_or_else(|| Arc::new(local.clone()));
        Acme {
            settings,
            challenges,
            store,
            metrics,
            local,
            storage,
            current: Mutex::new(HashMap::new()),
            on_demand: Mutex::new(None),
        }
    }

    /// Where handshakes send the names to order on demand.
    pub(crate) fn on_demand_orders(&self) -> mpsc::UnboundedSender<OnDemandOrder> {
        let (tx, rx) = mpsc::unbounded_channel();
        *self.on_demand.lock().unwrap_or_else(|e| e.into_inner()) = Some(rx);
        tx
    }

    /// Serves the certificates of the state directory that are still valid
    /// (before any network traffic: a restart serves at once, with a shared
    /// store down too).
    pub(crate) fn load_stored(&self) {
        let now = SystemTime::now();
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        let mut names = self.settings.names.clone();
        if self.settings.on_demand {
            names.extend(self.local.stored_names());
        }
        for name in &names {
            let (cert, key) = self.local.cert_paths(name);
            if !cert.exists() {
                continue;
            }
            match Certificate::from_files(&cert, &key) {
                Ok(c) if c.not_after > now => {
                    current.insert(name.clone(), self.described(name, c));
                }
                Ok(_) => log::info!("ACME: the stored certificate for {name} has expired"),
                Err(e) => log::warn!("ACME: the stored certificate for {name} is unusable: {e}"),
            }
        }
        let certs: Vec<Certificate> = current.values().cloned().collect();
        drop(current);
        self.store.replace(Layer::Acme, certs);
    }

    /// Obtains and renews on a thread of its own, for the process's life.
    pub(crate) fn spawn(self) {
        let spawned = std::thread::Builder::new()
            .name("hayate-acme".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build();
                match runtime {
                    Ok(rt) => rt.block_on(self.run()),
                    Err(e) => log::error!("ACME: cannot start: {e}"),
                }
            });
        if let Err(e) = spawned {
            log::error!("ACME: cannot start: {e}");
        }
    }

    /// `cert` with its source saying how it is obtained, for the status
    /// page and /metrics: `acme dns-01 (PATH)`, `acme tls-alpn-01 on
    /// demand (PATH)` (the challenge it is renewed with).
    fn described(&self, name: &str, mut cert: Certificate) -> Certificate {
        let how = match self.settings.challenge_for(name) {
            ChallengeKind::Http01 => "http-01",
            ChallengeKind::TlsAlpn01 => "tls-alpn-01",
            ChallengeKind::Dns01 => "dns-01",
        };
        let demand = match self.settings.names.iter().any(|n| n == name) {
            true => "",
            false => " on demand",
        };
        cert.source = format!("acme {how}{demand} ({})", cert.source);
        cert
    }

    fn current_names(&self) -> Vec<String> {
        let current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        current.keys().cloned().collect()
    }

    fn held(&self, name: &str) -> Option<Certificate> {
        let current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        current.get(name).cloned()
    }

    fn hold(&self, name: &str, cert: Certificate) {
        let cert = self.described(name, cert);
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        current.insert(name.to_string(), cert);
        let certs: Vec<Certificate> = current.values().cloned().collect();
        drop(current);
        self.store.replace(Layer::Acme, certs);
    }
}

/// The directory under the state directory for one ACME directory URL: its
/// host and path, made a file name (`acme/acme-v02.api.letsencrypt.org-directory`).
pub(crate) fn state_subdir(state_dir: &Path, directory: &str) -> PathBuf {
    state_dir.join("acme").join(directory_id(directory))
}

/// One ACME directory URL as a name safe in a path or a key: its host and
/// path, with what is not a letter, a digit or a dot made `-`
/// (`acme-v02.api.letsencrypt.org-directory`). Accounts and certificates
/// of different directories are kept apart under it.
pub fn directory_id(directory: &str) -> String {
    let rest = directory
        .split_once("://")
        .map_or(directory, |(_, rest)| rest);
    let safe: String = rest
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    safe.trim_matches('-').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_directory_has_its_own_state() {
        let base = Path::new("/s");
        assert_eq!(
            state_subdir(base, "https://acme-v02.api.letsencrypt.org/directory"),
            Path::new("/s/acme/acme-v02.api.letsencrypt.org-directory")
        );
        assert_eq!(
            state_subdir(base, "https://127.0.0.1:14000/dir"),
            Path::new("/s/acme/127.0.0.1-14000-dir")
        );
    }
}
