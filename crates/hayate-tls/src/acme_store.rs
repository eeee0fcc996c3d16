//! Where ACME keeps what it obtains, behind one seam ([`AcmeStore`]): the
//! account, each name's certificate and key, a per-name lock so that one
//! box orders while the others wait, and the challenge answers of an order
//! in progress. [`DirectoryStore`] keeps them in the state directory for a
//! box alone; a shared store (Redis, in `hayate-shared`) lets several boxes
//! use one account and one certificate per name. This crate never talks to
//! the shared store's server itself.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::acme::Challenges;
use crate::local_ca::write_private;

/// What a store's call becomes: a future that owns nothing of the caller's
/// but the borrowed store.
pub type Pending<'a, T> = Pin<Box<dyn Future<Output = Result<T, String>> + Send + 'a>>;

/// A certificate chain (leaf first) and its private key, both PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct StoredCertificate {
    /// The chain.
    pub chain_pem: String,
    /// The private key.
    pub key_pem: String,
}

impl std::fmt::Debug for StoredCertificate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("StoredCertificate")
            .field("chain_pem", &self.chain_pem.len())
            .finish_non_exhaustive()
    }
}

/// The answer to one challenge, as every box must be able to give it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChallengeAnswer {
    /// HTTP-01: `/.well-known/acme-challenge/TOKEN` answers the key
    /// authorization.
    Http01 {
        /// The token in the path.
        token: String,
        /// The body to answer.
        key_authorization: String,
    },
    /// TLS-ALPN-01: a handshake for `name` offering only `acme-tls/1` gets
    /// a self-signed certificate carrying `digest` (each box makes its own
    /// from the name and the digest).
    TlsAlpn01 {
        /// The name validated, lower case.
        name: String,
        /// SHA-256 of the key authorization.
        digest: Vec<u8>,
    },
}

/// A lock held on one thing (an account registration, a name's order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lock {
    /// What is locked.
    pub what: String,
    /// The holder's unique value: only it releases or extends the lock.
    pub token: String,
}

/// Storage for ACME's state, local or shared by several boxes.
pub trait AcmeStore: Send + Sync {
    /// Whether other boxes see what this store holds (then ACME takes its
    /// locks and re-reads certificates others stored).
    fn is_shared(&self) -> bool;

    /// The account's credentials (instant-acme's JSON), if registered.
    fn load_account(&self) -> Pending<'_, Option<String>>;

    /// Keeps the account's credentials.
    fn save_account<'a>(&'a self, credentials: &'a str) -> Pending<'a, ()>;

    /// The certificate stored for `name`, if any.
    fn load_certificate<'a>(&'a self, name: &'a str) -> Pending<'a, Option<StoredCertificate>>;

    /// Stores `cert` for `name` (and tells the other boxes).
    fn save_certificate<'a>(
        &'a self,
        name: &'a str,
        cert: &'a StoredCertificate,
    ) -> Pending<'a, ()>;

    /// Takes the lock on `what` for `ttl`; `None` while someone else holds
    /// it.
    fn lock<'a>(&'a self, what: &'a str, ttl: Duration) -> Pending<'a, Option<Lock>>;

    /// Extends a held lock to `ttl` from now; `false` if it was lost (it
    /// expired and someone else took it).
    fn extend<'a>(&'a self, lock: &'a Lock, ttl: Duration) -> Pending<'a, bool>;

    /// Releases a held lock (a lock someone else took since is left alone).
    fn unlock<'a>(&'a self, lock: &'a Lock) -> Pending<'a, ()>;

    /// Makes `answer` visible to every box for `ttl` (this box's own
    /// [`Challenges`] already hold it); returns once the other boxes have
    /// it, or after a bounded wait.
    fn publish_challenge<'a>(
        &'a self,
        answer: &'a ChallengeAnswer,
        ttl: Duration,
    ) -> Pending<'a, ()>;

    /// Takes `answer` back once its order is validated.
    fn withdraw_challenge<'a>(&'a self, answer: &'a ChallengeAnswer) -> Pending<'a, ()>;

    /// Starts listening to the other boxes, on the caller's runtime: their
    /// challenge answers go into `challenges`, and the names of the
    /// certificates they store come out of the returned channel (an empty
    /// name after each (re)connection: any may have been stored unheard).
    /// `None` for a store no other box uses.
    fn watch(&self, challenges: Arc<Challenges>) -> Option<mpsc::UnboundedReceiver<String>>;
}

/// The state directory of one ACME directory URL: `account.json` and
/// `certs/NAME.crt` + `certs/NAME.key` (keys and account mode 0600). One
/// box alone: its locks are always free (one ACME thread per process
/// orders) and its challenges are only its own.
#[derive(Debug, Clone)]
pub struct DirectoryStore {
    dir: PathBuf,
}

impl DirectoryStore {
    /// The store in `dir`.
    pub fn new(dir: &Path) -> DirectoryStore {
        DirectoryStore {
            dir: dir.to_path_buf(),
        }
    }

    /// The names of the certificates stored here (those ordered on demand
    /// included).
    pub fn stored_names(&self) -> Vec<String> {
        let dir = self.dir.join("certs");
        let entries = std::fs::read_dir(dir).into_iter().flatten().flatten();
        entries
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                name.strip_suffix(".crt").map(str::to_string)
            })
            .collect()
    }

    /// Where `name`'s chain and key are.
    pub fn cert_paths(&self, name: &str) -> (PathBuf, PathBuf) {
        let dir = self.dir.join("certs");
        (
            dir.join(format!("{name}.crt")),
            dir.join(format!("{name}.key")),
        )
    }

    fn account_path(&self) -> PathBuf {
        self.dir.join("account.json")
    }

    /// Writes `credentials` (blocking: small, and only on registration).
    pub fn write_account(&self, credentials: &str) -> Result<(), String> {
        let path = self.account_path();
        std::fs::create_dir_all(&self.dir)
            .and_then(|()| write_private(&path, credentials.as_bytes()))
            .map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Writes `name`'s chain and key.
    pub fn write_certificate(&self, name: &str, cert: &StoredCertificate) -> Result<(), String> {
        let (cert_path, key_path) = self.cert_paths(name);
        cert_path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| write_private(&key_path, cert.key_pem.as_bytes()))
            .and_then(|()| std::fs::write(&cert_path, cert.chain_pem.as_bytes()))
            .map_err(|e| format!("storing the certificate for {name}: {e}"))
    }

    fn read_certificate(&self, name: &str) -> Result<Option<StoredCertificate>, String> {
        let (cert_path, key_path) = self.cert_paths(name);
        if !cert_path.exists() {
            return Ok(None);
        }
        let read =
            |p: &Path| std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()));
        Ok(Some(StoredCertificate {
            chain_pem: read(&cert_path)?,
            key_pem: read(&key_path)?,
        }))
    }
}

impl AcmeStore for DirectoryStore {
    fn is_shared(&self) -> bool {
        false
    }

    fn load_account(&self) -> Pending<'_, Option<String>> {
        let path = self.account_path();
        Box::pin(async move {
            match std::fs::read_to_string(&path) {
                Ok(text) => Ok(Some(text)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(format!("{}: {e}", path.display())),
            }
        })
    }

    fn save_account<'a>(&'a self, credentials: &'a str) -> Pending<'a, ()> {
        Box::pin(async move { self.write_account(credentials) })
    }

    fn load_certificate<'a>(&'a self, name: &'a str) -> Pending<'a, Option<StoredCertificate>> {
        Box::pin(async move { self.read_certificate(name) })
    }

    fn save_certificate<'a>(
        &'a self,
        name: &'a str,
        cert: &'a StoredCertificate,
    ) -> Pending<'a, ()> {
        Box::pin(async move { self.write_certificate(name, cert) })
    }

    fn lock<'a>(&'a self, what: &'a str, _ttl: Duration) -> Pending<'a, Option<Lock>> {
        let lock = Lock {
            what: what.to_string(),
            token: String::new(),
        };
        Box::pin(async move { Ok(Some(lock)) })
    }

    fn extend<'a>(&'a self, _lock: &'a Lock, _ttl: Duration) -> Pending<'a, bool> {
        Box::pin(async { Ok(true) })
    }

    fn unlock<'a>(&'a self, _lock: &'a Lock) -> Pending<'a, ()> {
        Box::pin(async { Ok(()) })
    }

    fn publish_challenge<'a>(
        &'a self,
        _answer: &'a ChallengeAnswer,
        _ttl: Duration,
    ) -> Pending<'a, ()> {
        Box::pin(async { Ok(()) })
    }

    fn withdraw_challenge<'a>(&'a self, _answer: &'a ChallengeAnswer) -> Pending<'a, ()> {
        Box::pin(async { Ok(()) })
    }

    fn watch(&self, _challenges: Arc<Challenges>) -> Option<mpsc::UnboundedReceiver<String>> {
        None
    }
}
