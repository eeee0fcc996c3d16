//! `proxy_http2 = auto`: a group of `https://` members that speaks what
//! they choose when offered both `h2` and `http/1.1` by ALPN, as Caddy's
//! and Go's transports do. The choice is learned once per group and
//! worker, on a connection of its own opened before the request's body is
//! read (a body read for one protocol's path cannot be sent by the
//! other's), and that connection is kept: HTTP/2's pool adopts it, or
//! HTTP/1.1's takes it as an idle connection. Each path then offers only
//! its own protocol, so a member's answer never changes under a pool.
//! A connect that fails forgets the choice: the next request learns it
//! again, so a member redeployed with or without HTTP/2 is followed after
//! one failed connect (nginx offers no such mode; Caddy negotiates per
//! connection, which needs one pool serving both protocols).

use std::cell::Cell;
use std::sync::Arc;

use tokio_rustls::rustls::ClientConfig;

use crate::group::{Protocol, UpstreamGroup};

/// What a group's members chose, and the TLS settings each step offers.
#[derive(Debug)]
pub(crate) struct Negotiated {
    /// HTTP/1.1 or HTTP/2, once learned.
    chosen: Cell<Option<Protocol>>,
    /// Offers `h2` and `http/1.1`: the connection that learns.
    both: Arc<ClientConfig>,
    /// Offers `h2` only: the HTTP/2 pool's new connections.
    pub(crate) h2_only: Arc<ClientConfig>,
}

impl Negotiated {
    /// Forgets the choice (a connect failed: the member may have changed).
    pub(crate) fn forget(&self) {
        self.chosen.set(None);
    }
}

impl UpstreamGroup {
    /// The group negotiating HTTP/2 with its `https://` members. Its
    /// `max_conns` bounds requests per member (HTTP/1.1's meaning) and, once
    /// HTTP/2 is chosen, each member's connections too.
    pub fn negotiating_http2(mut self) -> UpstreamGroup {
        let Some(tls) = self.settings.tls.clone() else {
            return self;
        };
        let offering = |protocols: &[&[u8]]| {
            let mut config = ClientConfig::clone(&tls);
            config.alpn_protocols = protocols.iter().map(|p| p.to_vec()).collect();
            Arc::new(config)
        };
        self.settings.h2_max_conns = self.settings.max_conns;
        self.settings.tls = Some(offering(&[b"http/1.1".as_slice()]));
        self.negotiated = Some(Negotiated {
            chosen: Cell::new(None),
            both: offering(&[b"h2".as_slice(), b"http/1.1".as_slice()]),
            h2_only: offering(&[b"h2".as_slice()]),
        });
        self
    }

    /// What the members speak: the group's protocol, or for a negotiating
    /// group what its members chose (learned now if not yet known).
    pub(crate) async fn speaking(&self) -> Protocol {
        let Some(negotiated) = &self.negotiated else {
            return self.protocol;
        };
        if let Some(chosen) = negotiated.chosen.get() {
            return chosen;
        }
        let chosen = self.learn(negotiated).await;
        if let Some(p) = chosen {
            negotiated.chosen.set(Some(p));
        }
        chosen.unwrap_or(Protocol::Http1)
    }

    /// What the members chose, as last learned (health probes follow it).
    pub(crate) fn chosen(&self) -> Protocol {
        self.negotiated
            .as_ref()
            .and_then(|n| n.chosen.get())
            .unwrap_or(self.protocol)
    }

    /// The TLS settings of the HTTP/2 pool's new connections.
    pub(crate) fn h2_tls(&self) -> Option<&Arc<ClientConfig>> {
        match &self.negotiated {
            Some(n) => Some(&n.h2_only),
            None => self.settings.tls.as_ref(),
        }
    }

    /// Connects to the first member that is up, offering both protocols,
    /// and keeps the connection in the pool of the one it chose. `None`
    /// when no member could be asked: the request takes HTTP/1.1's path,
    /// which reports the failure as usual, and the next one asks again.
    async fn learn(&self, negotiated: &Negotiated) -> Option<Protocol> {
        let now = hayate_core::loop_time::instant();
        let member = self.members.iter().find(|m| m.is_up(now))?;
        let instance = member.current()?;
        let id = instance.as_ref().map_or(0, |i| i.id);
        let target = member.target(instance.as_deref());
        let s = &self.settings;
        let connected = crate::upconn::connect(
            &target,
            s.connect_timeout,
            None,
            Some(&negotiated.both),
            None,
        )
        .await;
        let conn = match connected {
            Ok(conn) => conn,
            Err(e) => {
                log::debug!("upstream {}: learning its protocol: {e}", member.label);
                return None;
            }
        };
        if conn.alpn() == Some(b"h2") {
            if let Err(e) = member.h2.adopt(conn, member, id, s.connect_timeout).await {
                log::debug!("upstream {}: HTTP/2 handshake: {e}", member.label);
                return None;
            }
            return Some(Protocol::Http2);
        }
        member.checkin(conn, s.idle_timeout, s.max_idle, id);
        Some(Protocol::Http1)
    }
}
