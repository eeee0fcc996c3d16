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
//!   else TLS-ALPN-01 (`acme_challenge` chooses).
//! - Renewal at two thirds of a certificate's life, or earlier when the CA's
//!   renewal information (ARI, RFC 9773) suggests a window that has begun
//!   (a CA revoking certificates asks this way). A failure is logged with
//!   the ACME server's reason, counted on /metrics, and retried with backoff
//!   (10 s doubling to an hour); serving goes on with the certificate there
//!   is, and a name without one fails its handshakes only.

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use instant_acme::{
    Account, AccountCredentials, AuthorizationStatus, CertificateIdentifier, ChallengeType,
    Identifier, NewAccount, NewOrder, OrderStatus, RetryPolicy,
};
use tokio::sync::mpsc;

use crate::acme_store::{AcmeStore, ChallengeAnswer, DirectoryStore, Lock, StoredCertificate};
use crate::certificate::Certificate;
use crate::metrics::TlsMetrics;
use crate::sources::{renewal_due, renewal_time};
use crate::store::{CertStore, Layer};

mod challenges;

pub use challenges::Challenges;

/// The ALPN protocol of TLS-ALPN-01 validation (RFC 8737 §6.2).
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";
/// First wait after a failed order; doubled after each failure.
const FIRST_RETRY: Duration = Duration::from_secs(10);
/// Longest wait between attempts (and between renewal checks).
const MAX_WAIT: Duration = Duration::from_secs(3600);
/// How long one order may take, polls included.
const ORDER_TIMEOUT: Duration = Duration::from_secs(90);
/// How long a name's order lock lasts unless extended: past an order's
/// longest (two polls of ORDER_TIMEOUT and a few requests), so a box that
/// dies mid-order blocks the others for 10 minutes at most. Extended every
/// third of it while the order goes on.
const LOCK_TTL: Duration = Duration::from_secs(600);
/// First wait of a box whose name another box is ordering, before it looks
/// for the certificate again (the other box's notice usually comes first);
/// doubled each time up to MAX_LOOK.
const FIRST_LOOK: Duration = Duration::from_secs(2);
/// Longest wait between looks.
const MAX_LOOK: Duration = Duration::from_secs(60);
/// How long a box waits for the account another box registers.
const ACCOUNT_WAIT: Duration = Duration::from_secs(30);

/// What ACME Renewal Information (RFC 9773) advised for a certificate.
struct Advice {
    /// The start of the suggested renewal window.
    renew_from: Option<SystemTime>,
    /// When to ask again (the CA's Retry-After).
    ask_again: SystemTime,
}

/// How the ACME server checks that hayate answers for a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChallengeKind {
    /// A file on the plain-HTTP listener (port 80 for a public CA).
    Http01,
    /// A certificate on the TLS listener (port 443 for a public CA).
    TlsAlpn01,
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
    /// The challenge to answer.
    pub challenge: ChallengeKind,
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
}

/// How a due certificate was come by.
enum Obtained {
    /// Ordered by this box.
    Ordered(Certificate),
    /// Stored by another box.
    FromStore(Certificate),
    /// Another box holds the name's lock: its certificate is awaited.
    Waiting,
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
        }
    }

    /// Serves the certificates of the state directory that are still valid
    /// (before any network traffic: a restart serves at once, with a shared
    /// store down too).
    pub(crate) fn load_stored(&self) {
        let now = SystemTime::now();
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        for name in &self.settings.names {
            let (cert, key) = self.local.cert_paths(name);
            if !cert.exists() {
                continue;
            }
            match Certificate::from_files(&cert, &key) {
                Ok(c) if c.not_after > now => {
                    current.insert(name.clone(), c);
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

    async fn run(self) {
        let mut stored_elsewhere = self.storage.watch(self.challenges.clone());
        let mut account: Option<Account> = None;
        // When to try a name again after a failure, and the wait after it.
        let mut retry: HashMap<String, (SystemTime, Duration)> = HashMap::new();
        // When to look again for a name another box holds, and the next look's wait.
        let mut looks: HashMap<String, (SystemTime, Duration)> = HashMap::new();
        let mut advice: HashMap<String, Advice> = HashMap::new();
        let mut ari = true;
        loop {
            let now = SystemTime::now();
            let mut wake = now + MAX_WAIT;
            for name in &self.settings.names {
                let held = self.held(name);
                let mut due = held.as_ref().is_none_or(|c| renewal_due(c, now));
                if let (Some(c), false, true) = (&held, due, ari) {
                    if advice.get(name).is_none_or(|a| a.ask_again <= now) {
                        match self.renewal_info(&mut account, c).await {
                            Ok(a) => drop(advice.insert(name.clone(), a)),
                            Err(None) => ari = false,
                            Err(Some(e)) => {
                                log::warn!("ACME: renewal information for {name}: {e}");
                                let later = Advice {
                                    renew_from: None,
                                    ask_again: now + MAX_WAIT,
                                };
                                advice.insert(name.clone(), later);
                            }
                        }
                    }
                    if let Some(a) = advice.get(name) {
                        due = a.renew_from.is_some_and(|from| from <= now);
                        if due {
                            log::info!(
                                "ACME: the CA's renewal information says to renew {name} now"
                            );
                        }
                        wake = wake.min(a.ask_again);
                        wake = a.renew_from.map_or(wake, |from| wake.min(from));
                    }
                }
                if let Some(c) = held.as_ref().filter(|_| !due) {
                    wake = wake.min(renewal_time(c));
                    continue;
                }
                let later = [&retry, &looks].into_iter().filter_map(|m| m.get(name));
                if let Some(at) = later.map(|(at, _)| *at).filter(|at| *at > now).max() {
                    wake = wake.min(at);
                    continue;
                }
                let what = if held.is_some() {
                    "renewed"
                } else {
                    "obtained"
                };
                let delay = retry.get(name).map_or(FIRST_RETRY, |(_, d)| *d);
                match self.obtain(&mut account, name, held.as_ref(), delay).await {
                    Ok(Obtained::Ordered(c)) => {
                        log::info!(
                            "ACME: {what} a certificate for {name} (valid until {})",
                            httpdate::fmt_http_date(c.not_after)
                        );
                        self.metrics.acme_outcome(true);
                        retry.remove(name);
                        looks.remove(name);
                        advice.remove(name);
                        wake = wake.min(renewal_time(&c));
                        self.hold(name, c);
                    }
                    Ok(Obtained::FromStore(c)) => {
                        log::info!(
                            "ACME: serving the certificate for {name} that another box stored (valid until {})",
                            httpdate::fmt_http_date(c.not_after)
                        );
                        retry.remove(name);
                        looks.remove(name);
                        advice.remove(name);
                        wake = wake.min(renewal_time(&c));
                        self.hold(name, c);
                    }
                    Ok(Obtained::Waiting) => {
                        let pause = looks.get(name).map_or(FIRST_LOOK, |(_, d)| *d);
                        log::info!(
                            "ACME: another box holds the lock on {name} (ordering, or waiting out a failed order); next look in {}s",
                            pause.as_secs()
                        );
                        let at = SystemTime::now() + pause;
                        looks.insert(name.clone(), (at, (pause * 2).min(MAX_LOOK)));
                        wake = wake.min(at);
                    }
                    Err(e) => {
                        looks.remove(name);
                        log::error!(
                            "ACME: no certificate for {name}: {e}; next attempt in {}s",
                            delay.as_secs()
                        );
                        self.metrics.acme_outcome(false);
                        let at = SystemTime::now() + delay;
                        retry.insert(name.clone(), (at, (delay * 2).min(MAX_WAIT)));
                        wake = wake.min(at);
                    }
                }
            }
            let pause = wake
                .duration_since(SystemTime::now())
                .unwrap_or(Duration::ZERO);
            tokio::select! {
                () = tokio::time::sleep(pause.min(MAX_WAIT)) => {}
                Some(notice) = stored_by_another(&mut stored_elsewhere) => {
                    // A name, or every name after a (re)subscription: what
                    // was stored meanwhile was not announced to this box.
                    let names = self.settings.names.iter();
                    for name in names.filter(|n| notice.is_empty() || **n == notice) {
                        if self.take_stored(name).await {
                            retry.remove(name);
                            looks.remove(name);
                            advice.remove(name);
                        } else if notice.is_empty() && self.held(name).is_none() {
                            // The store is back and nothing is served for
                            // the name: try now, not after the backoff its
                            // unreachable store caused (a CA's failures
                            // hold the name's lock for theirs).
                            retry.remove(name);
                            looks.remove(name);
                        }
                    }
                }
            }
        }
    }

    /// A due certificate for `name`: another box's, when the shared store
    /// has a fresher one than `held`, else ordered by this box when it gets
    /// the name's lock. With the shared store unreachable nothing is
    /// ordered: boxes ordering alone would each get a certificate for the
    /// name (Let's Encrypt allows 5 per week for one set of names), and
    /// each still serves what it has, renewed with a third of its life
    /// left (30 days for Let's Encrypt's). A failed order keeps the lock
    /// for `backoff`, this box's wait before it tries again, so the others
    /// do not fail the same way meanwhile (Let's Encrypt allows 5 failed
    /// validations per name and hour).
    async fn obtain(
        &self,
        account: &mut Option<Account>,
        name: &str,
        held: Option<&Certificate>,
        backoff: Duration,
    ) -> Result<Obtained, String> {
        if !self.storage.is_shared() {
            return self.order(account, name).await.map(Obtained::Ordered);
        }
        if let Some(c) = self.fresher_in_store(name, held).await? {
            return Ok(Obtained::FromStore(c));
        }
        let what = format!("cert:{name}");
        let Some(lock) = self.storage.lock(&what, LOCK_TTL).await? else {
            return Ok(Obtained::Waiting);
        };
        let result = async {
            // Another box may have stored one between the look and the lock.
            if let Some(c) = self.fresher_in_store(name, held).await? {
                return Ok(Obtained::FromStore(c));
            }
            log::info!("ACME: this box orders the certificate for {name}");
            let order = self.order(account, name);
            holding(&*self.storage, &lock, order)
                .await
                .map(Obtained::Ordered)
        }
        .await;
        let released = match &result {
            Err(_) => self.storage.extend(&lock, backoff).await.map(drop),
            Ok(_) => self.storage.unlock(&lock).await,
        };
        if let Err(e) = released {
            log::warn!("ACME: releasing the lock on {name} (it expires by itself): {e}");
        }
        result
    }

    /// The shared store's certificate for `name` when it is usable, not due
    /// for renewal, and newer than `held`; copied to the state directory.
    async fn fresher_in_store(
        &self,
        name: &str,
        held: Option<&Certificate>,
    ) -> Result<Option<Certificate>, String> {
        let Some(stored) = self.storage.load_certificate(name).await? else {
            return Ok(None);
        };
        let c = match Certificate::from_pem(&stored, format!("shared store ({name})")) {
            Ok(c) => c,
            Err(e) => {
                log::warn!("ACME: the shared certificate for {name} is unusable: {e}");
                return Ok(None);
            }
        };
        let fresher = held.is_none_or(|h| c.not_after > h.not_after);
        if !fresher || renewal_due(&c, SystemTime::now()) {
            return Ok(None);
        }
        if let Err(e) = self.local.write_certificate(name, &stored) {
            log::warn!("ACME: {e}");
        }
        self.metrics.acme_taken_from_another_box();
        Ok(Some(c))
    }

    /// Serves the certificate another box just stored for `name`, if it is
    /// fresher than the one held; whether it was.
    async fn take_stored(&self, name: &str) -> bool {
        let held = self.held(name);
        match self.fresher_in_store(name, held.as_ref()).await {
            Ok(Some(c)) => {
                log::info!(
                    "ACME: serving the certificate for {name} that another box stored (valid until {})",
                    httpdate::fmt_http_date(c.not_after)
                );
                self.hold(name, c);
                true
            }
            Ok(None) => false,
            Err(e) => {
                log::warn!("ACME: reading the certificate another box stored for {name}: {e}");
                false
            }
        }
    }

    /// What the CA advises for `cert` (RFC 9773). `Err(None)`: the CA
    /// offers no renewal information.
    async fn renewal_info(
        &self,
        account: &mut Option<Account>,
        cert: &Certificate,
    ) -> Result<Advice, Option<String>> {
        let account = self.account_ready(account).await.map_err(Some)?;
        let id = CertificateIdentifier::try_from(&cert.key.cert[0])
            .map_err(|e| Some(format!("certificate identifier: {e}")))?;
        match account.renewal_info(&id).await {
            Ok((info, ask_after)) => Ok(Advice {
                renew_from: Some(SystemTime::from(info.suggested_window.start)),
                ask_again: SystemTime::now()
                    + ask_after.clamp(Duration::from_secs(60), MAX_WAIT * 24),
            }),
            Err(instant_acme::Error::Unsupported(_)) => Err(None),
            Err(e) => Err(Some(e.to_string())),
        }
    }

    /// The account, loaded or registered on first use.
    async fn account_ready<'a>(
        &self,
        account: &'a mut Option<Account>,
    ) -> Result<&'a Account, String> {
        if account.is_none() {
            *account = Some(self.account().await?);
        }
        Ok(account.as_ref().expect("set above"))
    }

    fn held(&self, name: &str) -> Option<Certificate> {
        let current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        current.get(name).cloned()
    }

    fn hold(&self, name: &str, cert: Certificate) {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        current.insert(name.to_string(), cert);
        let certs: Vec<Certificate> = current.values().cloned().collect();
        drop(current);
        self.store.replace(Layer::Acme, certs);
    }

    /// The account: loaded from the store, or registered (and stored) on
    /// first use. With a shared store, a box that ran alone before shares
    /// its account, and only the holder of the `account` lock registers.
    async fn account(&self) -> Result<Account, String> {
        if let Some(text) = self.storage.load_account().await? {
            if self.storage.is_shared() {
                if let Err(e) = self.local.write_account(&text) {
                    log::warn!("ACME: {e}");
                }
            }
            return self.account_from(&text).await;
        }
        if !self.storage.is_shared() {
            return self.register().await;
        }
        if let Some(text) = self.local.load_account().await? {
            self.storage.save_account(&text).await?;
            return self.account_from(&text).await;
        }
        let Some(lock) = self.storage.lock("account", LOCK_TTL).await? else {
            return self.account_registered_elsewhere().await;
        };
        let result = match self.storage.load_account().await {
            Ok(Some(text)) => self.account_from(&text).await,
            Ok(None) => self.register().await,
            Err(e) => Err(e),
        };
        if let Err(e) = self.storage.unlock(&lock).await {
            log::warn!("ACME: releasing the account lock (it expires by itself): {e}");
        }
        result
    }

    /// The account another box is registering, once it is stored: looked
    /// for after 100 ms, then at doubling intervals, for up to ACCOUNT_WAIT
    /// (a registration is one or two requests to the CA).
    async fn account_registered_elsewhere(&self) -> Result<Account, String> {
        let until = tokio::time::Instant::now() + ACCOUNT_WAIT;
        let mut pause = Duration::from_millis(100);
        while tokio::time::Instant::now() < until {
            tokio::time::sleep(pause).await;
            if let Some(text) = self.storage.load_account().await? {
                return self.account_from(&text).await;
            }
            pause = (pause * 2).min(Duration::from_secs(5));
        }
        Err("another box is registering the ACME account, and has not stored it yet".into())
    }

    fn builder(&self) -> Result<instant_acme::AccountBuilder, String> {
        match &self.settings.ca_root {
            Some(root) => Account::builder_with_root(root),
            None => Account::builder(),
        }
        .map_err(|e| e.to_string())
    }

    async fn account_from(&self, credentials: &str) -> Result<Account, String> {
        let credentials: AccountCredentials =
            serde_json::from_str(credentials).map_err(|e| format!("the ACME account: {e}"))?;
        self.builder()?
            .from_credentials(credentials)
            .await
            .map_err(|e| format!("loading the ACME account: {e}"))
    }

    /// Registers an account and stores it (in the state directory too).
    async fn register(&self) -> Result<Account, String> {
        let contact = self.settings.email.as_ref().map(|e| format!("mailto:{e}"));
        let contacts: Vec<&str> = contact.iter().map(String::as_str).collect();
        let (account, credentials) = self
            .builder()?
            .create(
                &NewAccount {
                    contact: &contacts,
                    terms_of_service_agreed: true,
                    only_return_existing: false,
                },
                self.settings.directory.clone(),
                None,
            )
            .await
            .map_err(|e| format!("registering an account at {}: {e}", self.settings.directory))?;
        let text = serde_json::to_string(&credentials).map_err(|e| e.to_string())?;
        self.local.write_account(&text)?;
        if self.storage.is_shared() {
            self.storage.save_account(&text).await?;
        }
        log::info!("ACME: registered an account at {}", self.settings.directory);
        Ok(account)
    }

    /// Orders a certificate for `name`, answers its challenge, and stores
    /// the result.
    async fn order(
        &self,
        account: &mut Option<Account>,
        name: &str,
    ) -> Result<Certificate, String> {
        let account = self.account_ready(account).await?;
        let identifiers = [Identifier::Dns(name.to_string())];
        let mut order = account
            .new_order(&NewOrder::new(&identifiers))
            .await
            .map_err(|e| format!("new order: {e}"))?;
        let mut answered = Vec::new();
        let mut authorizations = order.authorizations();
        let mut published = Ok(());
        while let Some(authz) = authorizations.next().await {
            let mut authz = authz.map_err(|e| format!("authorization: {e}"))?;
            match authz.status {
                AuthorizationStatus::Pending => {}
                AuthorizationStatus::Valid => continue,
                other => return Err(format!("authorization is {other:?}")),
            }
            let kind = match self.settings.challenge {
                ChallengeKind::Http01 => ChallengeType::Http01,
                ChallengeKind::TlsAlpn01 => ChallengeType::TlsAlpn01,
            };
            let mut challenge = authz
                .challenge(kind.clone())
                .ok_or_else(|| format!("the ACME server offers no {kind:?} challenge"))?;
            let key_authorization = challenge.key_authorization();
            let answer = match self.settings.challenge {
                ChallengeKind::Http01 => ChallengeAnswer::Http01 {
                    token: challenge.token.clone(),
                    key_authorization: key_authorization.as_str().to_string(),
                },
                ChallengeKind::TlsAlpn01 => ChallengeAnswer::TlsAlpn01 {
                    name: name.to_ascii_lowercase(),
                    digest: key_authorization.digest().as_ref().to_vec(),
                },
            };
            self.challenges.answer(&answer)?;
            answered.push(answer);
            // Every box answers before the CA is told to look: a failed
            // validation counts against the CA's limits (Let's Encrypt:
            // 5 per name per hour).
            published = self
                .storage
                .publish_challenge(answered.last().expect("pushed"), ORDER_TIMEOUT * 2)
                .await;
            if published.is_err() {
                break;
            }
            challenge
                .set_ready()
                .await
                .map_err(|e| format!("challenge: {e}"))?;
        }
        let retries = RetryPolicy::new().timeout(ORDER_TIMEOUT);
        let status = match published {
            Ok(()) => order
                .poll_ready(&retries)
                .await
                .map_err(|e| format!("validation: {e}")),
            Err(e) => Err(format!("sharing the challenge with the other boxes: {e}")),
        };
        for answer in &answered {
            self.challenges.forget(answer);
            if let Err(e) = self.storage.withdraw_challenge(answer).await {
                log::debug!("ACME: withdrawing a challenge (it expires by itself): {e}");
            }
        }
        match status? {
            OrderStatus::Ready => {}
            other => return Err(format!("the order is {other:?} after validation")),
        }
        let key_pem = order
            .finalize()
            .await
            .map_err(|e| format!("finalize: {e}"))?;
        let chain_pem = order
            .poll_certificate(&retries)
            .await
            .map_err(|e| format!("certificate: {e}"))?;
        let stored = StoredCertificate { chain_pem, key_pem };
        self.local.write_certificate(name, &stored)?;
        let source = self.local.cert_paths(name).0.display().to_string();
        let cert = Certificate::from_pem(&stored, source)?;
        if self.storage.is_shared() {
            // The other boxes order after the lock is released: a
            // certificate they cannot see is one they order again.
            self.storage
                .save_certificate(name, &stored)
                .await
                .map_err(|e| format!("sharing the certificate: {e}"))?;
        }
        Ok(cert)
    }
}

/// Runs `work` holding `lock`, extended every third of LOCK_TTL for as
/// long as the work lasts.
async fn holding<T>(storage: &dyn AcmeStore, lock: &Lock, work: impl Future<Output = T>) -> T {
    tokio::pin!(work);
    loop {
        tokio::select! {
            result = &mut work => return result,
            () = tokio::time::sleep(LOCK_TTL / 3) => {
                let what = &lock.what;
                match storage.extend(lock, LOCK_TTL).await {
                    Ok(true) => {}
                    Ok(false) => log::warn!("ACME: the lock on {what} was lost while held"),
                    Err(e) => log::warn!("ACME: extending the lock on {what}: {e}"),
                }
            }
        }
    }
}

/// The name of the next certificate another box stored, when there is a
/// shared store; never resolves without one.
async fn stored_by_another(rx: &mut Option<mpsc::UnboundedReceiver<String>>) -> Option<String> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
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
    use crate::acme_store::Pending;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A store that counts the extensions of its locks (and holds nothing).
    #[derive(Default)]
    struct CountingStore {
        extended: AtomicUsize,
    }

    impl AcmeStore for CountingStore {
        fn is_shared(&self) -> bool {
            true
        }
        fn load_account(&self) -> Pending<'_, Option<String>> {
            Box::pin(async { Ok(None) })
        }
        fn save_account<'a>(&'a self, _: &'a str) -> Pending<'a, ()> {
            Box::pin(async { Ok(()) })
        }
        fn load_certificate<'a>(&'a self, _: &'a str) -> Pending<'a, Option<StoredCertificate>> {
            Box::pin(async { Ok(None) })
        }
        fn save_certificate<'a>(&'a self, _: &'a str, _: &'a StoredCertificate) -> Pending<'a, ()> {
            Box::pin(async { Ok(()) })
        }
        fn lock<'a>(&'a self, _: &'a str, _: Duration) -> Pending<'a, Option<Lock>> {
            Box::pin(async { Ok(None) })
        }
        fn extend<'a>(&'a self, _: &'a Lock, ttl: Duration) -> Pending<'a, bool> {
            assert_eq!(ttl, LOCK_TTL);
            self.extended.fetch_add(1, Ordering::Relaxed);
            Box::pin(async { Ok(true) })
        }
        fn unlock<'a>(&'a self, _: &'a Lock) -> Pending<'a, ()> {
            Box::pin(async { Ok(()) })
        }
        fn publish_challenge<'a>(&'a self, _: &'a ChallengeAnswer, _: Duration) -> Pending<'a, ()> {
            Box::pin(async { Ok(()) })
        }
        fn withdraw_challenge<'a>(&'a self, _: &'a ChallengeAnswer) -> Pending<'a, ()> {
            Box::pin(async { Ok(()) })
        }
        fn watch(&self, _: Arc<Challenges>) -> Option<mpsc::UnboundedReceiver<String>> {
            None
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_lock_is_extended_while_its_order_lasts() {
        let store = CountingStore::default();
        let lock = Lock {
            what: "cert:a.test".into(),
            token: "t".into(),
        };
        // An order of 7/6 of the lock's life: extended at 1/3, 2/3 and 3/3.
        let long_order = async {
            tokio::time::sleep(LOCK_TTL + LOCK_TTL / 6).await;
            "issued"
        };
        assert_eq!(holding(&store, &lock, long_order).await, "issued");
        assert_eq!(store.extended.load(Ordering::Relaxed), 3);
        // A quick one is not extended.
        assert_eq!(holding(&store, &lock, async { 1 }).await, 1);
        assert_eq!(store.extended.load(Ordering::Relaxed), 3);
    }

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
