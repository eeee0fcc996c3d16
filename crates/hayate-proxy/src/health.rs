//! Active health checks: each worker probes its group's members with `GET
//! path` every `health_interval`; a member that fails is taken out of
//! balancing (and its idle connections closed) until a probe passes.

use std::rc::Weak;
use std::time::Duration;

use crate::{UpstreamAddr, UpstreamGroup};

impl UpstreamGroup {
    /// Runs active health checks while the group is in use (spawned per
    /// worker and group when `health_check` is set; it holds the group
    /// weakly, so a group a reload dropped stops being probed).
    pub async fn run_health_checks(group: Weak<Self>) {
        let Some((path, interval)) = group
            .upgrade()
            .and_then(|g| Some((g.settings.health_check.clone()?, g.settings.health_interval)))
        else {
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
                let ok = probe(
                    &target,
                    this.settings.tls.as_ref(),
                    this.settings.proxy_protocol.then_some(&local[..]),
                    &path,
                    this.settings.connect_timeout,
                )
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

/// A health probe: `GET path` on a fresh connection, 2xx within `limit`.
async fn probe(
    addr: &UpstreamAddr,
    tls: Option<&std::sync::Arc<tokio_rustls::rustls::ClientConfig>>,
    preamble: Option<&[u8]>,
    path: &str,
    limit: Duration,
) -> std::io::Result<()> {
    let attempt = async {
        let mut conn = crate::upconn::connect(addr, limit, None, tls, preamble).await?;
        let status = hayate_core::h1::probe::get(&mut conn, path, "hayate-health", limit).await?;
        if status.is_success() {
            Ok(())
        } else {
            Err(std::io::Error::other(format!("answered {}", status.code())))
        }
    };
    match tokio::time::timeout(limit, attempt).await {
        Ok(r) => r,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "no answer in time",
        )),
    }
}
