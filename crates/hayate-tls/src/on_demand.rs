//! On-demand TLS: a certificate obtained at the first handshake for a name
//! no certificate has, after the app said the name is its own
//! (`tls_on_demand_ask`, `GET URL?domain=NAME`, 2xx = yes). The handshake
//! waits (bounded by `tls_on_demand_timeout`) while the ACME thread orders
//! it; then it is served, stored and renewed like the configured names.
//!
//! What keeps a scan of random names from exhausting the CA's limits or
//! memory: a name refused (or whose order failed) is refused again without
//! asking for `tls_on_demand_refusal_ttl`, at most REMEMBERED names kept; at
//! most ASKING asks at once; and orders are taken from a bucket of
//! `tls_on_demand_rate` per minute for all names (the ACME thread orders one
//! at a time, and a name it holds is served, not ordered again).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

/// Names remembered as refused at most: about 100 bytes each, 1 MB. When
/// full, expired entries go; if none has, new names are refused unasked
/// until some expire (a flood of random names is refused anyway).
const REMEMBERED: usize = 10_000;
/// Asks in flight at most: the app is asked about new names only.
const ASKING: usize = 16;
/// Longest answer head read from the ask URL.
const ASK_ANSWER: usize = 4096;

/// A name the ACME thread is asked to obtain, and where to say how it went.
pub(crate) struct OnDemandOrder {
    pub(crate) name: String,
    pub(crate) reply: oneshot::Sender<Result<(), String>>,
}

/// Why a handshake got no certificate on demand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnDemandOutcome {
    /// Obtained (or another handshake's order had just obtained it).
    Issued,
    /// The ask URL said no (or was remembered saying no).
    Refused,
    /// Past `tls_on_demand_rate`, or too many asks at once.
    RateLimited,
    /// The ask or the order failed, or took longer than
    /// `tls_on_demand_timeout`.
    Failed,
}

impl OnDemandOutcome {
    /// Every outcome, in the metric's order.
    pub const ALL: [OnDemandOutcome; 4] = [
        OnDemandOutcome::Issued,
        OnDemandOutcome::Refused,
        OnDemandOutcome::RateLimited,
        OnDemandOutcome::Failed,
    ];

    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            OnDemandOutcome::Issued => "issued",
            OnDemandOutcome::Refused => "refused",
            OnDemandOutcome::RateLimited => "rate_limited",
            OnDemandOutcome::Failed => "failed",
        }
    }
}

/// The settings of on-demand TLS.
#[derive(Debug, Clone)]
pub struct OnDemandSettings {
    /// `HOST:PORT` and path (with its query, if any) of the ask URL.
    pub ask_host: String,
    /// The path part of the ask URL.
    pub ask_path: String,
    /// How long a handshake waits.
    pub timeout: Duration,
    /// Orders per minute, for all names.
    pub per_minute: u32,
    /// How long a refused or failed name is remembered.
    pub refusal_ttl: Duration,
}

impl OnDemandSettings {
    /// The settings of `tls_on_demand_ask` and the others (the config
    /// check made sure the URL is http://).
    pub fn new(
        ask: &str,
        timeout: Duration,
        per_minute: u32,
        refusal_ttl: Duration,
    ) -> Result<OnDemandSettings, String> {
        let rest = ask
            .strip_prefix("http://")
            .ok_or_else(|| format!("tls_on_demand_ask: expected http://..., got {ask:?}"))?;
        let (host, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let host = if host.contains(':') {
            host.to_string()
        } else {
            format!("{host}:80")
        };
        Ok(OnDemandSettings {
            ask_host: host,
            ask_path: path.to_string(),
            timeout,
            per_minute: per_minute.max(1),
            refusal_ttl,
        })
    }
}

/// On-demand issuance, shared by every worker's handshakes.
#[derive(Debug)]
pub(crate) struct OnDemand {
    settings: OnDemandSettings,
    orders: mpsc::UnboundedSender<OnDemandOrder>,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// Names refused, or whose order failed, and until when.
    refused: HashMap<String, Instant>,
    /// Orders left in the bucket, and when it was last filled.
    tokens: f64,
    filled: Instant,
    /// Asks in flight.
    asking: usize,
}

impl OnDemand {
    pub(crate) fn new(
        settings: OnDemandSettings,
        orders: mpsc::UnboundedSender<OnDemandOrder>,
    ) -> OnDemand {
        let tokens = f64::from(settings.per_minute);
        OnDemand {
            settings,
            orders,
            state: Mutex::new(State {
                refused: HashMap::new(),
                tokens,
                filled: Instant::now(),
                asking: 0,
            }),
        }
    }

    /// A certificate for `name`, asked for and ordered within the timeout.
    pub(crate) async fn obtain(&self, name: &str) -> (OnDemandOutcome, String) {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        if !is_host_name(&name) {
            return (
                OnDemandOutcome::Refused,
                format!("{name:?} is not a host name"),
            );
        }
        match tokio::time::timeout(self.settings.timeout, self.ask_and_order(&name)).await {
            Ok(result) => result,
            Err(_) => (
                OnDemandOutcome::Failed,
                format!(
                    "no certificate for {name} within tls_on_demand_timeout ({}s); its order goes on",
                    self.settings.timeout.as_secs()
                ),
            ),
        }
    }

    async fn ask_and_order(&self, name: &str) -> (OnDemandOutcome, String) {
        {
            let mut s = self.state();
            let now = Instant::now();
            if s.refused.get(name).is_some_and(|until| *until > now) {
                return (
                    OnDemandOutcome::Refused,
                    format!("{name} was refused recently"),
                );
            }
            if s.asking >= ASKING {
                return (OnDemandOutcome::RateLimited, "too many asks at once".into());
            }
            s.asking += 1;
        }
        let allowed = self.ask(name).await;
        self.state().asking -= 1;
        match allowed {
            Ok(true) => {}
            Ok(false) => {
                self.remember(name);
                return (OnDemandOutcome::Refused, "the ask URL refused it".into());
            }
            Err(e) => {
                return (
                    OnDemandOutcome::Failed,
                    format!("asking {}: {e}", self.settings.ask_host),
                )
            }
        }
        if !self.take_token() {
            return (
                OnDemandOutcome::RateLimited,
                format!(
                    "past tls_on_demand_rate ({} a minute)",
                    self.settings.per_minute
                ),
            );
        }
        let (reply, answer) = oneshot::channel();
        let order = OnDemandOrder {
            name: name.to_string(),
            reply,
        };
        if self.orders.send(order).is_err() {
            return (OnDemandOutcome::Failed, "the ACME thread is gone".into());
        }
        match answer.await {
            Ok(Ok(())) => (OnDemandOutcome::Issued, String::new()),
            Ok(Err(e)) => {
                self.remember(name);
                (OnDemandOutcome::Failed, e)
            }
            Err(_) => (OnDemandOutcome::Failed, "the ACME thread is gone".into()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Refuses `name` unasked for the refusal TTL (room made by dropping
    /// expired names; none expired and full: not remembered).
    fn remember(&self, name: &str) {
        let mut s = self.state();
        let now = Instant::now();
        if s.refused.len() >= REMEMBERED {
            s.refused.retain(|_, until| *until > now);
        }
        if s.refused.len() < REMEMBERED {
            s.refused
                .insert(name.to_string(), now + self.settings.refusal_ttl);
        }
    }

    /// Takes one order from the bucket, refilled at `per_minute`.
    fn take_token(&self) -> bool {
        let mut s = self.state();
        let now = Instant::now();
        let per_second = f64::from(self.settings.per_minute) / 60.0;
        let elapsed = now.duration_since(s.filled).as_secs_f64();
        s.tokens = (s.tokens + elapsed * per_second).min(f64::from(self.settings.per_minute));
        s.filled = now;
        if s.tokens >= 1.0 {
            s.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// `GET PATH?domain=NAME` at the ask URL: whether it answered 2xx.
    async fn ask(&self, name: &str) -> Result<bool, String> {
        let path = &self.settings.ask_path;
        let sep = if path.contains('?') { '&' } else { '?' };
        let host = &self.settings.ask_host;
        let request = format!(
            "GET {path}{sep}domain={name} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: hayate\r\nConnection: close\r\n\r\n"
        );
        let mut tcp = tokio::net::TcpStream::connect(host.as_str())
            .await
            .map_err(|e| e.to_string())?;
        tcp.write_all(request.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut head = vec![0; ASK_ANSWER];
        let mut n = 0;
        while n < 12 {
            let read = tcp.read(&mut head[n..]).await.map_err(|e| e.to_string())?;
            if read == 0 {
                break;
            }
            n += read;
        }
        let line = String::from_utf8_lossy(&head[..n]);
        let status = line
            .strip_prefix("HTTP/1.")
            .and_then(|r| r.get(2..5))
            .and_then(|s| s.parse::<u16>().ok())
            .ok_or_else(|| {
                format!(
                    "not an HTTP answer: {:?}",
                    line.lines().next().unwrap_or("")
                )
            })?;
        Ok((200..300).contains(&status))
    }
}

/// Whether `name` can be a certificate's DNS name: letters, digits,
/// hyphens and dots, a dot inside, at most 253 bytes, no empty label.
fn is_host_name(name: &str) -> bool {
    name.len() <= 253
        && name.contains('.')
        && name.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
        && name.parse::<std::net::IpAddr>().is_err()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_host_names_are_ordered() {
        assert!(is_host_name("shop.example.com"));
        for bad in [
            "localhost",
            "a..b",
            "-a.b",
            "1.2.3.4",
            "a_b.c",
            "*.example.com",
        ] {
            assert!(!is_host_name(bad), "{bad}");
        }
    }

    #[test]
    fn the_bucket_allows_a_burst_of_the_rate_then_refills() {
        let settings = OnDemandSettings::new(
            "http://127.0.0.1:1/ok",
            Duration::from_secs(1),
            3,
            Duration::from_secs(60),
        )
        .expect("settings");
        assert_eq!(
            (settings.ask_host.as_str(), settings.ask_path.as_str()),
            ("127.0.0.1:1", "/ok")
        );
        let (tx, _rx) = mpsc::unbounded_channel();
        let d = OnDemand::new(settings, tx);
        assert!(d.take_token() && d.take_token() && d.take_token());
        assert!(!d.take_token(), "3 a minute");
        d.state().filled -= Duration::from_secs(20);
        assert!(d.take_token(), "one more after 20 s");
        assert!(!d.take_token());
    }

    #[test]
    fn refusals_are_remembered_within_bounds() {
        let settings = OnDemandSettings::new(
            "http://h",
            Duration::from_secs(1),
            3,
            Duration::from_secs(60),
        )
        .expect("settings");
        assert_eq!(settings.ask_host, "h:80");
        let (tx, _rx) = mpsc::unbounded_channel();
        let d = OnDemand::new(settings, tx);
        for i in 0..REMEMBERED + 50 {
            d.remember(&format!("n{i}.test"));
        }
        assert_eq!(d.state().refused.len(), REMEMBERED);
    }
}
