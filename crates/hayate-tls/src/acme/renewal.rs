//! The ACME thread's loop: which names are due (two thirds of a
//! certificate's life, or the CA's renewal information), the backoff after
//! failures, the looks at names another box orders, and the notices of
//! certificates other boxes stored.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use instant_acme::{Account, CertificateIdentifier};
use tokio::sync::mpsc;

use super::order::Obtained;
use super::Acme;
use crate::certificate::Certificate;
use crate::on_demand::OnDemandOrder;
use crate::sources::{renewal_due, renewal_time};

/// First wait after a failed order; doubled after each failure.
const FIRST_RETRY: Duration = Duration::from_secs(10);
/// Longest wait between attempts (and between renewal checks).
const MAX_WAIT: Duration = Duration::from_secs(3600);
/// First wait of a box whose name another box is ordering, before it looks
/// for the certificate again (the other box's notice usually comes first);
/// doubled each time up to MAX_LOOK.
const FIRST_LOOK: Duration = Duration::from_secs(2);
/// Longest wait between looks.
const MAX_LOOK: Duration = Duration::from_secs(60);

/// What ACME Renewal Information (RFC 9773) advised for a certificate.
struct Advice {
    /// The start of the suggested renewal window.
    renew_from: Option<SystemTime>,
    /// When to ask again (the CA's Retry-After).
    ask_again: SystemTime,
}

impl Acme {
    /// Obtains and renews, for the process's life.
    pub(super) async fn run(self) {
        let mut stored_elsewhere = self.storage.watch(self.challenges.clone());
        let mut account: Option<Account> = None;
        // When to try a name again after a failure, and the wait after it.
        let mut retry: HashMap<String, (SystemTime, Duration)> = HashMap::new();
        // When to look again for a name another box holds, and the next look's wait.
        let mut looks: HashMap<String, (SystemTime, Duration)> = HashMap::new();
        let mut advice: HashMap<String, Advice> = HashMap::new();
        let mut ari = true;
        // The configured names, those stored from on-demand orders, and
        // those ordered on demand from now on.
        let mut names = self.settings.names.clone();
        names.extend(
            self.current_names()
                .into_iter()
                .filter(|n| !self.settings.names.contains(n)),
        );
        let mut on_demand = self
            .on_demand
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        loop {
            let now = SystemTime::now();
            let mut wake = now + MAX_WAIT;
            for name in &names {
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
                    for name in names.iter().filter(|n| notice.is_empty() || **n == notice) {
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
                Some(order) = on_demand_order(&mut on_demand) => {
                    let result = self.order_on_demand(&mut account, &order.name).await;
                    if result.is_ok() && !names.contains(&order.name) {
                        names.push(order.name.clone());
                    }
                    let _ = order.reply.send(result);
                }
            }
        }
    }

    /// A certificate for a name asked for on demand: the one held when it
    /// is not due (another handshake's order got it), else ordered now.
    async fn order_on_demand(
        &self,
        account: &mut Option<Account>,
        name: &str,
    ) -> Result<(), String> {
        let held = self.held(name);
        if held
            .as_ref()
            .is_some_and(|c| !renewal_due(c, SystemTime::now()))
        {
            return Ok(());
        }
        match self.obtain(account, name, held.as_ref(), FIRST_RETRY).await {
            Ok(Obtained::Ordered(c)) => {
                log::info!(
                    "ACME: obtained a certificate for {name} on demand (valid until {})",
                    httpdate::fmt_http_date(c.not_after)
                );
                self.metrics.acme_outcome(true);
                self.hold(name, c);
                Ok(())
            }
            Ok(Obtained::FromStore(c)) => {
                self.hold(name, c);
                Ok(())
            }
            Ok(Obtained::Waiting) => Err("another box is ordering it".into()),
            Err(e) => {
                log::error!("ACME: no certificate for {name} on demand: {e}");
                self.metrics.acme_outcome(false);
                Err(e)
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
}

/// The next name to order on demand; never resolves without on-demand
/// TLS.
async fn on_demand_order(
    rx: &mut Option<mpsc::UnboundedReceiver<OnDemandOrder>>,
) -> Option<OnDemandOrder> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
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
