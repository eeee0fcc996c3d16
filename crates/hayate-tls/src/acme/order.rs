//! One certificate's order: the name's lock when boxes share a store, the
//! challenge answered (and published to the other boxes), the certificate
//! finalized and stored.

use std::future::Future;
use std::time::{Duration, SystemTime};

use instant_acme::{
    Account, AuthorizationStatus, ChallengeType, Identifier, NewOrder, OrderStatus, RetryPolicy,
};

use super::dns01::Presented;
use super::{Acme, ChallengeKind, Dns01Outcome};
use crate::acme_store::{AcmeStore, ChallengeAnswer, Lock, StoredCertificate};
use crate::certificate::Certificate;
use crate::sources::renewal_due;

/// How long one order may take, polls included.
const ORDER_TIMEOUT: Duration = Duration::from_secs(90);
/// How long a name's order lock lasts unless extended: past an order's
/// longest (two polls of ORDER_TIMEOUT and a few requests), so a box that
/// dies mid-order blocks the others for 10 minutes at most. Extended every
/// third of it while the order goes on.
pub(super) const LOCK_TTL: Duration = Duration::from_secs(600);

/// How a due certificate was come by.
pub(super) enum Obtained {
    /// Ordered by this box.
    Ordered(Certificate),
    /// Stored by another box.
    FromStore(Certificate),
    /// Another box holds the name's lock: its certificate is awaited.
    Waiting,
}

impl Acme {
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
    pub(super) async fn obtain(
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
    pub(super) async fn take_stored(&self, name: &str) -> bool {
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
        // DNS-01 records put in DNS, removed once the CA has looked.
        let mut presented = Vec::new();
        while let Some(authz) = authorizations.next().await {
            let mut authz = authz.map_err(|e| format!("authorization: {e}"))?;
            match authz.status {
                AuthorizationStatus::Pending => {}
                AuthorizationStatus::Valid => continue,
                other => return Err(format!("authorization is {other:?}")),
            }
            let challenge_kind = self.settings.challenge_for(name);
            let kind = match challenge_kind {
                ChallengeKind::Http01 => ChallengeType::Http01,
                ChallengeKind::TlsAlpn01 => ChallengeType::TlsAlpn01,
                ChallengeKind::Dns01 => ChallengeType::Dns01,
            };
            let mut challenge = authz
                .challenge(kind.clone())
                .ok_or_else(|| format!("the ACME server offers no {kind:?} challenge"))?;
            let key_authorization = challenge.key_authorization();
            let answer = match challenge_kind {
                ChallengeKind::Http01 => Some(ChallengeAnswer::Http01 {
                    token: challenge.token.clone(),
                    key_authorization: key_authorization.as_str().to_string(),
                }),
                ChallengeKind::TlsAlpn01 => Some(ChallengeAnswer::TlsAlpn01 {
                    name: name.to_ascii_lowercase(),
                    digest: key_authorization.digest().as_ref().to_vec(),
                }),
                // Set in DNS by this box: nothing for the others to answer.
                ChallengeKind::Dns01 => None,
            };
            published = match answer {
                Some(answer) => {
                    self.challenges.answer(&answer)?;
                    answered.push(answer);
                    // Every box answers before the CA is told to look: a
                    // failed validation counts against the CA's limits
                    // (Let's Encrypt: 5 per name per hour).
                    self.storage
                        .publish_challenge(answered.last().expect("pushed"), ORDER_TIMEOUT * 2)
                        .await
                        .map_err(|e| format!("sharing the challenge with the other boxes: {e}"))
                }
                None => {
                    let value = key_authorization.dns_value();
                    self.present_dns01(name, &value, &mut presented).await
                }
            };
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
            Err(e) => Err(e),
        };
        if let Some(dns) = &self.settings.dns01 {
            for record in &presented {
                if let Err(e) = dns.cleanup(record).await {
                    log::warn!("ACME: DNS-01: removing the TXT record {}: {e}", record.fqdn);
                }
            }
        }
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

impl Acme {
    /// Puts `name`'s DNS-01 record `value` in DNS (noted in `presented`
    /// for its removal) and waits until it is seen; the outcome counted.
    async fn present_dns01(
        &self,
        name: &str,
        value: &str,
        presented: &mut Vec<Presented>,
    ) -> Result<(), String> {
        let dns = self
            .settings
            .dns01
            .as_ref()
            .ok_or("acme_challenge = dns-01 without a way to set records")?;
        let result = async {
            let record = dns.present(name, value).await?;
            presented.push(record);
            let record = presented.last().expect("pushed");
            log::info!(
                "ACME: DNS-01: set the TXT record {}; waiting to see it",
                record.fqdn
            );
            dns.wait_until_seen(record).await
        }
        .await;
        let outcome = result
            .as_ref()
            .map_or_else(|e| e.outcome, |()| Dns01Outcome::Ok);
        self.metrics.acme_dns01(outcome);
        result.map_err(|e| format!("DNS-01: {e}"))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acme::Challenges;
    use crate::acme_store::Pending;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use tokio::sync::mpsc;

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
}
