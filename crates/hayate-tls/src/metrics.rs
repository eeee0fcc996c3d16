//! What HTTPS counts: handshakes by outcome, and when each certificate
//! expires (a gauge, so an alert can fire weeks before it does).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use hayate_core::metrics::{family, sample, Kind, MetricsSource};

use crate::acme::Dns01Outcome;
use crate::client_auth::CertFailure;
use crate::on_demand::OnDemandOutcome;
use crate::store::CertStore;

/// Why a handshake did not complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// Not finished within `tls_handshake_timeout`.
    Timeout,
    /// The client spoke plain HTTP (answered 400).
    PlainHttp,
    /// The first bytes were neither TLS nor HTTP.
    NotTls,
    /// The client closed or reset the connection.
    Closed,
    /// rustls refused the handshake (bad records, no common version,
    /// cipher or protocol, a client alert...).
    Protocol,
    /// The site requires a client certificate and the client sent none,
    /// or one that did not verify (`hayate_tls_client_cert_failures_total`
    /// says why).
    ClientCert,
    /// On-demand TLS got no certificate for the name
    /// (`hayate_tls_on_demand_total` says why).
    OnDemand,
}

impl Failure {
    const ALL: [Failure; 7] = [
        Failure::Timeout,
        Failure::PlainHttp,
        Failure::NotTls,
        Failure::Closed,
        Failure::Protocol,
        Failure::ClientCert,
        Failure::OnDemand,
    ];

    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Failure::Timeout => "timeout",
            Failure::PlainHttp => "plain_http",
            Failure::NotTls => "not_tls",
            Failure::Closed => "closed",
            Failure::Protocol => "protocol",
            Failure::ClientCert => "client_cert",
            Failure::OnDemand => "on_demand",
        }
    }
}

/// Handshake counters, shared by every worker.
#[derive(Debug, Default)]
pub struct TlsMetrics {
    full: AtomicU64,
    resumed: AtomicU64,
    failed: [AtomicU64; 7],
    /// Handshakes refused for their client certificate, by
    /// [`CertFailure`].
    client_cert_failed: [AtomicU64; 5],
    acme_issued: AtomicU64,
    acme_failed: AtomicU64,
    /// Certificates another box ordered, taken from the shared store.
    acme_shared: AtomicU64,
    /// The last ACME order: Unix seconds when it ended, times two, plus 1
    /// if it failed (one atomic, so outcome and time are read together);
    /// 0 before any.
    acme_last: AtomicU64,
    /// DNS-01 attempts, by [`Dns01Outcome`].
    acme_dns01: [AtomicU64; 5],
    /// On-demand handshakes for names without a certificate, by
    /// [`OnDemandOutcome`].
    on_demand: [AtomicU64; 4],
    /// QUIC (HTTP/3) handshakes: completed, then failed by [`Failure`]
    /// (quinn does not say whether one resumed a session).
    quic_completed: AtomicU64,
    quic_failed: [AtomicU64; 7],
    /// Requests that arrived in 0-RTT data (`http3_early_data = "safe"`):
    /// served, and answered 425 Too Early.
    early_served: AtomicU64,
    early_refused: AtomicU64,
    store: Option<Arc<CertStore>>,
}

impl TlsMetrics {
    pub(crate) fn new(store: Arc<CertStore>) -> TlsMetrics {
        TlsMetrics {
            store: Some(store),
            ..TlsMetrics::default()
        }
    }

    /// Counts a completed handshake.
    pub fn completed(&self, resumed: bool) {
        let c = if resumed { &self.resumed } else { &self.full };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a failed one.
    pub fn failed(&self, why: Failure) {
        self.failed[why as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a QUIC handshake that completed.
    pub fn quic_completed(&self) {
        self.quic_completed.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a QUIC handshake that failed.
    pub fn quic_failed(&self, why: Failure) {
        self.quic_failed[why as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a request that arrived in 0-RTT data: served (a safe
    /// method), or answered 425.
    pub fn early_request(&self, served: bool) {
        let c = match served {
            true => &self.early_served,
            false => &self.early_refused,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a handshake refused for its client certificate.
    pub(crate) fn client_cert_failed(&self, why: CertFailure) {
        self.client_cert_failed[why as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts an ACME order that gave a certificate, or failed.
    pub fn acme_outcome(&self, issued: bool) {
        let c = if issued {
            &self.acme_issued
        } else {
            &self.acme_failed
        };
        c.fetch_add(1, Ordering::Relaxed);
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        self.acme_last
            .store(now * 2 + u64::from(!issued), Ordering::Relaxed);
    }

    /// Counts an on-demand handshake by its outcome.
    pub fn on_demand(&self, outcome: OnDemandOutcome) {
        self.on_demand[outcome as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a DNS-01 attempt by its outcome.
    pub fn acme_dns01(&self, outcome: Dns01Outcome) {
        self.acme_dns01[outcome as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a certificate another box ordered, served here.
    pub fn acme_taken_from_another_box(&self) {
        self.acme_shared.fetch_add(1, Ordering::Relaxed);
    }

    /// Completed handshakes: (full, resumed).
    pub fn completed_counts(&self) -> (u64, u64) {
        (
            self.full.load(Ordering::Relaxed),
            self.resumed.load(Ordering::Relaxed),
        )
    }
}

/// The samples of `name` for failed handshakes, by each reason of `whys`.
fn failures(out: &mut String, name: &str, counts: &[AtomicU64; 7], whys: &[Failure]) {
    for &why in whys {
        let n = counts[why as usize].load(Ordering::Relaxed);
        sample(
            out,
            name,
            &[("result", "failed"), ("reason", why.as_str())],
            n,
        );
    }
}

impl MetricsSource for TlsMetrics {
    fn render(&self, out: &mut String) {
        let name = "hayate_tls_handshakes_total";
        family(out, name, "TLS handshakes by outcome", Kind::Counter);
        let (full, resumed) = self.completed_counts();
        sample(out, name, &[("result", "full")], full);
        sample(out, name, &[("result", "resumed")], resumed);
        failures(out, name, &self.failed, &Failure::ALL);
        let name = "hayate_tls_quic_handshakes_total";
        family(
            out,
            name,
            "QUIC (HTTP/3) handshakes by outcome (TLS 1.3)",
            Kind::Counter,
        );
        let completed = self.quic_completed.load(Ordering::Relaxed);
        sample(out, name, &[("result", "completed")], completed);
        let quic = [Failure::Timeout, Failure::Closed, Failure::Protocol];
        failures(out, name, &self.quic_failed, &quic);
        let name = "hayate_tls_early_data_requests_total";
        family(
            out,
            name,
            "Requests that arrived in 0-RTT data (http3_early_data = safe): served (GET, HEAD, OPTIONS), or too_early (answered 425)",
            Kind::Counter,
        );
        let served = self.early_served.load(Ordering::Relaxed);
        sample(out, name, &[("result", "served")], served);
        let refused = self.early_refused.load(Ordering::Relaxed);
        sample(out, name, &[("result", "too_early")], refused);
        let name = "hayate_tls_client_cert_failures_total";
        family(
            out,
            name,
            "Handshakes refused for their client certificate (tls_client_auth), by reason",
            Kind::Counter,
        );
        for why in CertFailure::ALL {
            let n = self.client_cert_failed[why as usize].load(Ordering::Relaxed);
            sample(out, name, &[("reason", why.as_str())], n);
        }
        let name = "hayate_acme_orders_total";
        family(
            out,
            name,
            "ACME orders (issuance and renewal) by outcome",
            Kind::Counter,
        );
        let issued = self.acme_issued.load(Ordering::Relaxed);
        sample(out, name, &[("result", "issued")], issued);
        let failed = self.acme_failed.load(Ordering::Relaxed);
        sample(out, name, &[("result", "failed")], failed);
        let name = "hayate_acme_dns01_total";
        family(
            out,
            name,
            "DNS-01 attempts: ok (the TXT record set and seen), unreachable, refused (TSIG key, zone), hook_failed, propagation_timeout",
            Kind::Counter,
        );
        for outcome in Dns01Outcome::ALL {
            let n = self.acme_dns01[outcome as usize].load(Ordering::Relaxed);
            sample(out, name, &[("outcome", outcome.as_str())], n);
        }
        let name = "hayate_tls_on_demand_total";
        family(
            out,
            name,
            "On-demand TLS: handshakes for a name without a certificate, by outcome (issued, refused by the ask URL, rate_limited, failed)",
            Kind::Counter,
        );
        for outcome in OnDemandOutcome::ALL {
            let n = self.on_demand[outcome as usize].load(Ordering::Relaxed);
            sample(out, name, &[("outcome", outcome.as_str())], n);
        }
        let name = "hayate_acme_shared_certificates_total";
        family(
            out,
            name,
            "Certificates another box ordered, served here (shared ACME)",
            Kind::Counter,
        );
        sample(out, name, &[], self.acme_shared.load(Ordering::Relaxed));
        let name = "hayate_acme_last_order_timestamp_seconds";
        family(
            out,
            name,
            "When the last ACME order ended (Unix time), labelled with its outcome",
            Kind::Gauge,
        );
        let last = self.acme_last.load(Ordering::Relaxed);
        if last != 0 {
            let result = if last & 1 == 0 { "issued" } else { "failed" };
            sample(out, name, &[("result", result)], last / 2);
        }
        let Some(store) = &self.store else { return };
        let name = "hayate_tls_certificate_expiry_seconds";
        family(
            out,
            name,
            "Seconds until the certificate served for each name expires (negative: expired)",
            Kind::Gauge,
        );
        let now = SystemTime::now();
        let certificates = store.certificates();
        for c in &certificates {
            let left = match c.not_after.duration_since(now) {
                Ok(d) => d.as_secs() as i64,
                Err(e) => -(e.duration().as_secs() as i64),
            };
            let ips = c.ips.iter().map(|ip| ip.to_string());
            for served in c.names.iter().cloned().chain(ips) {
                sample(out, name, &[("name", &served), ("source", &c.source)], left);
            }
        }
        let name = "hayate_tls_certificate_issuer";
        family(
            out,
            name,
            "Who issued the certificate served for each name (1, the issuer as a label)",
            Kind::Gauge,
        );
        for c in &certificates {
            let ips = c.ips.iter().map(|ip| ip.to_string());
            for served in c.names.iter().cloned().chain(ips) {
                let labels = [("name", served.as_str()), ("issuer", c.issuer.as_str())];
                sample(out, name, &labels, 1);
            }
        }
    }
}
