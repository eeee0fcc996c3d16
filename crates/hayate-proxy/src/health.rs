//! Active health checks: each worker probes its group's members every
//! `health_interval`, with `GET path` (HTTP/1.1, or HTTP/2 to HTTP/2
//! members) or gRPC's health protocol (`h2_probe.rs`); a member that fails
//! is taken out of balancing (and its idle connections closed) until a
//! probe passes.

mod h2_probe;

use std::io;
use std::rc::Weak;
use std::time::Duration;

use crate::group::Protocol;
use crate::{UpstreamAddr, UpstreamGroup};

/// What a probe asks (`proxy_health_check`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HealthProbe {
    /// `GET path`, answered 2xx.
    Get(String),
    /// gRPC's health check of a service (`""`: the server as a whole),
    /// answered SERVING; HTTP/2 members only.
    Grpc(String),
}

impl HealthProbe {
    /// `PATH`, `grpc` or `grpc:SERVICE`.
    pub fn parse(value: &str) -> Result<HealthProbe, String> {
        match value.strip_prefix("grpc") {
            Some("") => Ok(HealthProbe::Grpc(String::new())),
            Some(rest) if rest.len() > 1 && rest.starts_with(':') => {
                Ok(HealthProbe::Grpc(rest[1..].to_string()))
            }
            _ if value.starts_with('/') => Ok(HealthProbe::Get(value.to_string())),
            _ => Err("expected a PATH (starting with /), grpc or grpc:SERVICE".into()),
        }
    }
}

type Tls<'a> = Option<&'a std::sync::Arc<tokio_rustls::rustls::ClientConfig>>;

impl UpstreamGroup {
    /// Runs active health checks while the group is in use (spawned per
    /// worker and group when `health_check` is set; it holds the group
    /// weakly, so a group a reload dropped stops being probed).
    pub async fn run_health_checks(group: Weak<Self>) {
        let Some((check, interval)) = group.upgrade().and_then(|g| {
            let check = HealthProbe::parse(g.settings.health_check.as_deref()?).ok()?;
            Some((check, g.settings.health_interval))
        }) else {
            return;
        };
        let mut tick = tokio::time::interval(interval);
        loop {
            tick.tick().await;
            let Some(this) = group.upgrade() else { return };
            for m in &this.members {
                // A supervised slot is probed at its current instance (its
                // `addr` only names it); without one there is nothing to probe.
                let Some(instance) = m.current() else {
                    continue;
                };
                let target = m.target(instance.as_deref());
                drop(instance);
                // Within the connect timeout, not the interval: probes run
                // one after another, so a slow one only delays the next
                // round, while one cut at a short interval (100 ms) failed a
                // healthy app that a loaded machine made wait.
                // To a member that reads a PROXY header first, a probe is
                // hayate's own connection: LOCAL (HAProxy's check-send-proxy).
                let local = hayate_core::proxy_header::v2_header(None, 0);
                let tls = this.settings.tls.as_ref();
                let limit = this.settings.connect_timeout;
                let ok = within(limit, async {
                    match this.chosen() {
                        Protocol::Http2 => {
                            let tls = this.h2_tls();
                            h2_probe::probe(&target, tls, &m.label, &check, limit).await
                        }
                        _ => {
                            let preamble = this.settings.proxy_protocol.then_some(&local[..]);
                            probe(&target, tls, preamble, &check, limit).await
                        }
                    }
                })
                .await;
                match (ok, m.probe_down.get()) {
                    // hayate's own shortage says nothing of the member.
                    (Err(e), _) if hayate_core::error::is_local_shortage(&e) => {
                        hayate_core::error::note_shortage(|| {
                            format!("upstream {}: health check: {e}", m.label)
                        });
                    }
                    (Ok(()), true) => {
                        log::info!("upstream {} is healthy again", m.label);
                        m.probe_down.set(false);
                        m.succeeded();
                    }
                    (Err(e), false) => {
                        log::warn!("upstream {} failed its health check: {e}", m.label);
                        m.probe_down.set(true);
                        m.idle.borrow_mut().clear();
                    }
                    _ => {}
                }
            }
        }
    }
}

/// An HTTP/1.1 health probe: `GET path` on a fresh connection, 2xx.
async fn probe(
    addr: &UpstreamAddr,
    tls: Tls<'_>,
    preamble: Option<&[u8]>,
    check: &HealthProbe,
    limit: Duration,
) -> io::Result<()> {
    let HealthProbe::Get(path) = check else {
        // Refused at load (the route's check needs HTTP/2 members).
        return Err(io::Error::other("gRPC's health protocol needs HTTP/2"));
    };
    let mut conn = crate::upconn::connect(addr, limit, None, tls, preamble).await?;
    let status = hayate_core::h1::probe::get(&mut conn, path, "hayate-health", limit).await?;
    match status.is_success() {
        true => Ok(()),
        false => Err(io::Error::other(format!("answered {}", status.code()))),
    }
}

/// `probe`, or a timeout error after `limit`.
async fn within(
    limit: Duration,
    probe: impl std::future::Future<Output = io::Result<()>>,
) -> io::Result<()> {
    match tokio::time::timeout(limit, probe).await {
        Ok(r) => r,
        Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "no answer in time")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_by_their_setting() {
        let get = HealthProbe::Get("/healthz".into());
        assert_eq!(HealthProbe::parse("/healthz"), Ok(get));
        assert_eq!(
            HealthProbe::parse("grpc"),
            Ok(HealthProbe::Grpc(String::new()))
        );
        assert_eq!(
            HealthProbe::parse("grpc:hayate.test.Probe"),
            Ok(HealthProbe::Grpc("hayate.test.Probe".into()))
        );
        for bad in ["healthz", "grpc:", "grpcx", ""] {
            assert!(HealthProbe::parse(bad).is_err(), "{bad:?}");
        }
    }
}
