//! DNS-01 (RFC 8555 §8.4): the challenge's TXT record at
//! `_acme-challenge.NAME` (a wildcard's base name), put in DNS by an
//! RFC 2136 update to the zone's primary server or by a hook program
//! (lego's exec provider contract), seen at `acme_dns_resolver` (else the
//! primary) before the CA is told to look, and removed after, whether the
//! order succeeded or not. Only the box that orders a name does this: DNS
//! is already shared by every box.

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use hayate_config::values::TsigKey;
use hickory_proto::dnssec::tsig::TSigner;
use hickory_proto::rr::Name;
use tokio::io::AsyncReadExt;

use super::rfc2136;

/// First wait between two looks for the record; doubled up to MAX_LOOK.
const FIRST_LOOK: Duration = Duration::from_millis(250);
/// Longest wait between two looks: a record is usually seen at once on
/// the primary, and within a minute at secondaries (NOTIFY, RFC 1996).
const MAX_LOOK: Duration = Duration::from_secs(2);
/// Most bytes of a hook's stderr kept for its error message.
const HOOK_STDERR: usize = 2048;

/// How DNS-01 records are put in DNS and seen there.
#[derive(Debug, Clone)]
pub struct Dns01Settings {
    /// Who puts the record there.
    pub provider: DnsProvider,
    /// The zone of the records (default: asked of the primary by SOA).
    pub zone: Option<String>,
    /// Where the record is looked for before the CA is told.
    pub resolver: SocketAddr,
    /// How long the record may take to be seen.
    pub propagation_timeout: Duration,
}

/// Who puts the TXT record in DNS.
#[derive(Clone)]
pub enum DnsProvider {
    /// RFC 2136 updates to the zone's primary, signed with the key.
    Update {
        /// The primary server.
        server: SocketAddr,
        /// Its TSIG signer (None: unsigned updates, for a server that
        /// allows them by address).
        key: Option<TSigner>,
    },
    /// A program called `present|cleanup FQDN VALUE`.
    Hook {
        /// The program and its first arguments.
        command: Vec<String>,
        /// How long one call may run.
        timeout: Duration,
    },
}

impl std::fmt::Debug for DnsProvider {
    /// The server and the key's name, never its secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DnsProvider::Update { server, key } => {
                let key = key.as_ref().map(|k| k.signer_name().to_string());
                write!(f, "Update({server}, key {key:?})")
            }
            DnsProvider::Hook { command, timeout } => write!(f, "Hook({command:?}, {timeout:?})"),
        }
    }
}

impl DnsProvider {
    /// The provider for a primary and a key from the config (a key file
    /// is read here, so a bad one fails at start).
    pub fn update(server: SocketAddr, key: Option<&TsigKey>) -> Result<DnsProvider, String> {
        let key = match key {
            Some(TsigKey::File(path)) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| format!("acme_dns_tsig_key {}: {e}", path.display()))?;
                let key = TsigKey::from_bind_file(&text)
                    .map_err(|e| format!("acme_dns_tsig_key {}: {e}", path.display()))?;
                Some(rfc2136::signer(&key)?)
            }
            Some(key) => Some(rfc2136::signer(key)?),
            None => None,
        };
        Ok(DnsProvider::Update { server, key })
    }
}

/// What a DNS-01 attempt came to, for `hayate_acme_dns01_total{outcome}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dns01Outcome {
    /// The record was put there and seen: the CA was told to look.
    Ok,
    /// The DNS server did not answer (down, refused the connection, timed
    /// out).
    Unreachable,
    /// The DNS server refused the update or query (TSIG BADKEY/BADSIG,
    /// REFUSED, NOTAUTH, not the zone's server).
    Refused,
    /// The hook failed (exit status, timeout, could not start).
    HookFailed,
    /// The record was not seen within `acme_dns_propagation_timeout`.
    PropagationTimeout,
}

impl Dns01Outcome {
    /// Every outcome, in the metric's order.
    pub const ALL: [Dns01Outcome; 5] = [
        Dns01Outcome::Ok,
        Dns01Outcome::Unreachable,
        Dns01Outcome::Refused,
        Dns01Outcome::HookFailed,
        Dns01Outcome::PropagationTimeout,
    ];

    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Dns01Outcome::Ok => "ok",
            Dns01Outcome::Unreachable => "unreachable",
            Dns01Outcome::Refused => "refused",
            Dns01Outcome::HookFailed => "hook_failed",
            Dns01Outcome::PropagationTimeout => "propagation_timeout",
        }
    }
}

/// A DNS-01 step that failed, and how.
#[derive(Debug)]
pub(crate) struct Dns01Error {
    pub(crate) outcome: Dns01Outcome,
    message: String,
}

impl Dns01Error {
    pub(super) fn new(outcome: Dns01Outcome, message: String) -> Dns01Error {
        Dns01Error { outcome, message }
    }
}

impl std::fmt::Display for Dns01Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// A TXT record put in DNS, to remove after the order.
pub(crate) struct Presented {
    /// `_acme-challenge.NAME.`
    pub(crate) fqdn: Name,
    value: String,
    /// The zone it was added to (RFC 2136).
    zone: Option<Name>,
}

/// The owner of the TXT record for `name` (`*.example.com` and
/// `example.com` share `_acme-challenge.example.com.`).
pub(crate) fn record_name(name: &str) -> Result<Name, String> {
    let base = name
        .strip_prefix("*.")
        .unwrap_or(name)
        .trim_end_matches('.');
    Name::from_ascii(format!("_acme-challenge.{base}."))
        .map_err(|e| format!("DNS-01 record for {name}: {e}"))
}

impl Dns01Settings {
    /// Puts the TXT record `value` for `name` in DNS.
    pub(crate) async fn present(&self, name: &str, value: &str) -> Result<Presented, Dns01Error> {
        let fqdn = record_name(name).map_err(|e| Dns01Error::new(Dns01Outcome::Refused, e))?;
        let zone = match &self.provider {
            DnsProvider::Update { server, key } => {
                let zone = match &self.zone {
                    Some(z) => {
                        Name::from_ascii(format!("{}.", z.trim_end_matches('.'))).map_err(|e| {
                            Dns01Error::new(Dns01Outcome::Refused, format!("acme_dns_zone: {e}"))
                        })?
                    }
                    None => rfc2136::zone_of(*server, &fqdn).await?,
                };
                rfc2136::update(*server, &zone, &fqdn, value, key.as_ref(), true).await?;
                Some(zone)
            }
            DnsProvider::Hook { command, timeout } => {
                run_hook(command, *timeout, "present", &fqdn, value).await?;
                None
            }
        };
        Ok(Presented {
            fqdn,
            value: value.to_string(),
            zone,
        })
    }

    /// Waits until the resolver has the record, asking at growing
    /// intervals, for up to `propagation_timeout`.
    pub(crate) async fn wait_until_seen(&self, record: &Presented) -> Result<(), Dns01Error> {
        let until = tokio::time::Instant::now() + self.propagation_timeout;
        let mut pause = FIRST_LOOK;
        loop {
            let last = match rfc2136::txt_values(self.resolver, &record.fqdn).await {
                Ok(values) if values.contains(&record.value) => return Ok(()),
                Ok(values) => format!("{} other TXT value(s)", values.len()),
                Err(e) => e.to_string(),
            };
            if tokio::time::Instant::now() + pause > until {
                return Err(Dns01Error::new(
                    Dns01Outcome::PropagationTimeout,
                    format!(
                        "the TXT record {} was not seen at {} within {}s (acme_dns_propagation_timeout; last look: {last})",
                        record.fqdn,
                        self.resolver,
                        self.propagation_timeout.as_secs()
                    ),
                ));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(MAX_LOOK);
        }
    }

    /// Removes a record put there by `present`.
    pub(crate) async fn cleanup(&self, record: &Presented) -> Result<(), Dns01Error> {
        match (&self.provider, &record.zone) {
            (DnsProvider::Update { server, key }, Some(zone)) => {
                let value = &record.value;
                rfc2136::update(*server, zone, &record.fqdn, value, key.as_ref(), false).await
            }
            (DnsProvider::Hook { command, timeout }, _) => {
                run_hook(command, *timeout, "cleanup", &record.fqdn, &record.value).await
            }
            (DnsProvider::Update { .. }, None) => Ok(()),
        }
    }
}

/// Runs the hook `command` with `step FQDN VALUE`; an error carries its
/// exit status and the end of its stderr.
async fn run_hook(
    command: &[String],
    timeout: Duration,
    step: &str,
    fqdn: &Name,
    value: &str,
) -> Result<(), Dns01Error> {
    let failed = |e: String| {
        Dns01Error::new(
            Dns01Outcome::HookFailed,
            format!("acme_dns_hook {step} {fqdn}: {e}"),
        )
    };
    let (program, args) = command
        .split_first()
        .ok_or_else(|| failed("no program".into()))?;
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .args([step, &fqdn.to_ascii(), value])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| failed(format!("cannot start {program}: {e}")))?;
    let mut stderr = child.stderr.take().expect("piped");
    let run = async {
        let mut text = Vec::new();
        let _ = (&mut stderr).take(64 * 1024).read_to_end(&mut text).await;
        (child.wait().await, text)
    };
    let (status, text) = tokio::time::timeout(timeout, run).await.map_err(|_| {
        failed(format!(
            "still running after {}s, killed",
            timeout.as_secs()
        ))
    })?;
    let status = status.map_err(|e| failed(e.to_string()))?;
    if status.success() {
        return Ok(());
    }
    let text = String::from_utf8_lossy(&text);
    let text = text.trim();
    let tail = &text[text.len().saturating_sub(HOOK_STDERR)..];
    let tail = if tail.is_empty() { "no stderr" } else { tail };
    Err(failed(format!("{status}: {tail}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wildcard_and_its_base_share_a_record() {
        let w = record_name("*.example.test").expect("name");
        assert_eq!(w.to_ascii(), "_acme-challenge.example.test.");
        assert_eq!(record_name("example.test").expect("name"), w);
    }

    #[tokio::test]
    async fn a_failing_hook_says_why() {
        let fqdn = record_name("a.test").expect("name");
        let command = vec![
            "sh".into(),
            "-c".into(),
            "echo no such zone >&2; exit 3".into(),
            "hook".into(),
        ];
        let e = run_hook(&command, Duration::from_secs(5), "present", &fqdn, "v")
            .await
            .expect_err("fails");
        assert_eq!(e.outcome, Dns01Outcome::HookFailed);
        assert!(
            e.to_string().contains("no such zone") && e.to_string().contains("3"),
            "{e}"
        );
        let slow = vec!["sh".into(), "-c".into(), "sleep 5".into(), "hook".into()];
        let e = run_hook(&slow, Duration::from_millis(100), "present", &fqdn, "v")
            .await
            .expect_err("times out");
        assert!(e.to_string().contains("killed"), "{e}");
        let args = vec![
            "sh".into(),
            "-c".into(),
            "test \"$1 $2 $3\" = \"present _acme-challenge.a.test. v\"".into(),
            "hook".into(),
        ];
        run_hook(&args, Duration::from_secs(5), "present", &fqdn, "v")
            .await
            .expect("the hook is called with step, FQDN and value");
    }
}
