//! An upstream group as one worker sees it: its members, their balancing
//! and health state, and their pools of idle keep-alive connections.

use std::borrow::Cow;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::{Duration, Instant};

use std::sync::atomic::Ordering;
use std::sync::Arc;

use hayate_core::app::{AppAddr, AppInstance, AppSlot, AppSlots};
use tokio::sync::Notify;

use crate::pool::Idle;
use crate::queue::{Busy, QueueGauge};
use crate::UpstreamAddr;
use tokio_rustls::rustls::ClientConfig;

/// Proxy settings of a group.
#[derive(Debug, Clone)]
pub struct ProxySettings {
    /// Connecting to a member.
    pub connect_timeout: Duration,
    /// From the end of the request to the whole response head.
    pub header_timeout: Duration,
    /// Longest pause while reading or writing a body.
    pub io_timeout: Duration,
    /// Idle time of a pooled connection when the upstream sends no
    /// `Keep-Alive: timeout=N` hint (Node closes after 5 s).
    pub idle_timeout: Duration,
    /// Idle connections kept per member and worker.
    pub max_idle: usize,
    /// Request bodies up to this size are buffered so a request can be
    /// replayed on a fresh connection.
    pub replay_buffer: u64,
    /// Consecutive failures that eject a member; 0 never ejects.
    pub max_fails: u32,
    /// How long an ejected member is skipped before it is tried again.
    pub fail_timeout: Duration,
    /// Requests in flight per member and worker; 0 means no limit.
    pub max_conns: u32,
    /// Requests that may wait for a member at its limit (per worker).
    pub queue_depth: usize,
    /// Requests that may wait while hayate is short of descriptors for
    /// upstream connections: as many as the descriptor budget holds client
    /// connections (each may be waiting), when that is more than
    /// `queue_depth`. Its 1,024 refused 19,498 of case B's 4,000 clients
    /// at `ulimit -n 4096` (3,020 held, ~1,000 descriptors left for
    /// upstream connections, the rest waiting for one).
    pub shortage_depth: usize,
    /// Longest wait in that queue, counted from a request's first wait.
    pub queue_timeout: Duration,
    /// How requests are spread over members.
    pub balance: Balance,
    /// Active health checks: `GET path` every `health_interval`.
    pub health_check: Option<String>,
    /// Time between health probes.
    pub health_interval: Duration,
    /// The Host sent upstream.
    pub host: HostPolicy,
    /// Add `Via: 1.1 hayate` both ways.
    pub via: bool,
    /// Most interim (1xx) responses passed on to the client per attempt;
    /// more are read and dropped (0: none passed on).
    pub max_interim: usize,
    /// TLS to `https://` members (trust, ALPN, session resumption); set
    /// when the group has such members.
    pub tls: Option<Arc<ClientConfig>>,
    /// An upgraded connection (WebSocket) with no byte either way for this
    /// long is closed.
    pub tunnel_idle_timeout: Duration,
    /// Each connection starts with a PROXY protocol v2 header naming the
    /// client (`proxy_protocol = "v2"`). Such a connection speaks for one
    /// client, so it is never pooled: `max_idle` is 0 in such a group.
    pub proxy_protocol: bool,
    /// Record on each proxied response how the upstream answered (connect
    /// and head times, the request id made): set when the access log or
    /// `slow_request` reads them, as they cost a small allocation each.
    pub upstream_times: bool,
    /// HTTP/2 connections per member and worker (`max_conns` of an HTTP/2
    /// group, `h2_pool.rs`); 0: as many as streams need.
    pub h2_max_conns: u32,
    /// Browsers' gRPC-Web calls are translated to gRPC (`grpc_web.rs`);
    /// only for a group that speaks HTTP/2.
    pub grpc_web: bool,
}

/// How a group spreads requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Balance {
    /// Fewest requests in flight, rotating among ties.
    LeastOutstanding,
    /// In turn.
    RoundRobin,
    /// Rendezvous hash of a request header (lower-case name).
    HashHeader(String),
    /// Rendezvous hash of a cookie.
    HashCookie(String),
    /// Rendezvous hash of the client address.
    HashIp,
    /// hayate's own cookie (this name) names the member (`sticky.rs`);
    /// without one, fewest outstanding.
    Sticky(String),
}

/// The Host field of upstream requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPolicy {
    /// The client's Host.
    Pass,
    /// The member's `host:port` (or `localhost` for Unix sockets).
    Upstream,
    /// A fixed name.
    Fixed(String),
}

impl Default for ProxySettings {
    fn default() -> Self {
        ProxySettings {
            connect_timeout: Duration::from_secs(5),
            header_timeout: Duration::from_secs(60),
            io_timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(4),
            // Enough for the steady state of a busy app: each connection
            // closed and reopened costs a connect, a TIME_WAIT and the app's
            // accept (nginx's `keepalive 64` churns at 100 clients).
            max_idle: 1024,
            replay_buffer: 64 * 1024,
            max_fails: 3,
            fail_timeout: Duration::from_secs(10),
            max_conns: 0,
            queue_depth: 1024,
            shortage_depth: 1024,
            queue_timeout: Duration::from_secs(10),
            balance: Balance::LeastOutstanding,
            health_check: None,
            health_interval: Duration::from_secs(5),
            host: HostPolicy::Pass,
            via: false,
            // A page sends one or two 103s (RFC 8297: one per set of hints
            // it learns); 16 leaves room for that and a long job's 102s,
            // while an upstream looping on 1xx cannot make the client's
            // connection carry its chatter (each costs the client a head
            // to parse, and the connection up to 64 KiB of write buffer
            // when the client reads slowly).
            max_interim: 16,
            tls: None,
            tunnel_idle_timeout: Duration::from_secs(3600),
            proxy_protocol: false,
            upstream_times: false,
            h2_max_conns: 0,
            grpc_web: false,
        }
    }
}

/// One member of a group.
#[derive(Debug)]
pub(crate) struct Member {
    pub addr: UpstreamAddr,
    pub label: String,
    /// Requests sent and not yet answered in full.
    pub outstanding: Cell<u32>,
    fails: Cell<u32>,
    down_until: Cell<Option<Instant>>,
    /// For a supervised slot: the instance that was ejected. Its
    /// replacement is a new process and takes requests once ready.
    down_instance: Cell<Option<u64>>,
    /// Idle keep-alive connections, oldest first (`pool.rs`).
    pub(crate) idle: RefCell<VecDeque<Idle>>,
    /// HTTP/2 connections, shared by streams (`h2_pool.rs`).
    pub(crate) h2: crate::h2_pool::H2Pool,
    /// The group's queue, woken when this member finishes a request.
    pub freed: Rc<Notify>,
    /// The last active health check failed.
    pub(crate) probe_down: Cell<bool>,
    /// For a supervised app: the slot whose current instance serves.
    slot: Option<Arc<AppSlot>>,
    /// Relative share of requests (1 by default).
    weight: u32,
    /// Smooth weighted round robin state (nginx's algorithm).
    rr_current: Cell<i64>,
    /// Its id in the sticky cookie (`sticky.rs`), from its label.
    pub(crate) sticky_id: u64,
    /// Its response heads' latencies, counted while figures are published
    /// (`figures.rs`).
    pub(crate) response_times: crate::figures::ResponseTimes,
}

/// The protocol a group's members speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Protocol {
    /// HTTP/1.1 (`h1_client.rs`).
    Http1,
    /// FastCGI, responder role (`fastcgi.rs`).
    FastCgi,
    /// HTTP/2 (`h2_client.rs`).
    Http2,
}

impl Protocol {
    /// Whether a member's connections, kept ones included, stay within
    /// `max_conns`: a FastCGI application (php-fpm) gives each connection
    /// a worker process for as long as it stays open, so an idle kept
    /// connection holds a process another request may wait for.
    pub(crate) fn bounds_connections(self) -> bool {
        self == Protocol::FastCgi
    }
}

/// A group of upstream members (per worker).
#[derive(Debug)]
pub struct UpstreamGroup {
    pub(crate) members: Vec<Rc<Member>>,
    pub(crate) settings: ProxySettings,
    /// What the members speak.
    pub(crate) protocol: Protocol,
    /// Under `proxy_http2 = auto`: what the members chose by ALPN
    /// (`negotiated.rs`), which `protocol` (HTTP/1.1) gives way to.
    pub(crate) negotiated: Option<crate::negotiated::Negotiated>,
    next: Cell<usize>,
    /// Requests waiting for a member under its `max_conns` (FIFO).
    pub(crate) waiting: QueueGauge,
    /// Of those, the ones that have tried no member yet (any member will
    /// do for them): a new request queues behind them rather than pass.
    pub(crate) waiting_any: Cell<usize>,
    pub(crate) freed: Rc<Notify>,
    /// A connect found hayate short of descriptors (or buffers, memory,
    /// ports) and none has succeeded since: queue waits also end after a
    /// pause, to try again, since what frees one may be outside the group
    /// (a client closing, another group's pool).
    pub(crate) short: Cell<bool>,
    /// For a supervised app: its slots (raised when an instance becomes
    /// ready; down when every slot is in a crash loop).
    pub(crate) app: Option<AppSlots>,
    /// Where the members' figures are published for `/metrics`
    /// (`figures.rs`); unset without an admin listener.
    pub(crate) figures: std::cell::OnceCell<crate::FiguresSlot>,
}

impl UpstreamGroup {
    /// The route's health probe (`proxy_health_check`), if any.
    pub fn health_check(&self) -> Option<&str> {
        self.settings.health_check.as_deref()
    }

    /// Whether the members speak HTTP/2.
    pub fn speaks_http2(&self) -> bool {
        self.protocol == Protocol::Http2
    }

    /// The label of member `i` (its address, `app[N]` for a supervised
    /// app's slot), as /metrics names it.
    pub fn member_label(&self, i: usize) -> Option<&str> {
        self.members.get(i).map(|m| m.label.as_str())
    }

    /// A group of `addrs`.
    pub fn new(addrs: &[UpstreamAddr], mut settings: ProxySettings) -> UpstreamGroup {
        if settings.proxy_protocol {
            // A connection whose PROXY header named one client cannot
            // carry another's request, and pooling per client would keep
            // a connection per client; closed after its one exchange, as
            // HAProxy's send-proxy connections are private to their client.
            settings.max_idle = 0;
        }
        let freed = Rc::new(Notify::new());
        let members = addrs
            .iter()
            .map(|a| {
                Rc::new(Member {
                    label: a.to_string(),
                    addr: a.clone(),
                    outstanding: Cell::new(0),
                    fails: Cell::new(0),
                    down_until: Cell::new(None),
                    down_instance: Cell::new(None),
                    idle: RefCell::new(VecDeque::new()),
                    h2: Default::default(),
                    freed: freed.clone(),
                    probe_down: Cell::new(false),
                    slot: None,
                    weight: 1,
                    rr_current: Cell::new(0),
                    sticky_id: crate::sticky::member_id(&a.to_string()),
                    response_times: Default::default(),
                })
            })
            .collect();
        UpstreamGroup {
            members,
            settings,
            protocol: Protocol::Http1,
            negotiated: None,
            next: Cell::new(0),
            waiting: QueueGauge::default(),
            waiting_any: Cell::new(0),
            freed,
            short: Cell::new(false),
            app: None,
            figures: std::cell::OnceCell::new(),
        }
    }

    /// The group with members that are FastCGI responders (php-fpm).
    /// `max_conns` then bounds each member's connections on this worker,
    /// kept ones included (0: one), so that the pools of every worker
    /// together never hold more of the application's worker processes
    /// than it has; requests past it wait in the group's queue.
    pub fn speaking_fastcgi(mut self) -> UpstreamGroup {
        let s = &mut self.settings;
        s.max_conns = s.max_conns.max(1);
        s.max_idle = s.max_idle.min(s.max_conns as usize);
        // Active probes are HTTP GETs, which a FastCGI member does not
        // answer: its members are judged by their answers (passive
        // ejection) only.
        s.health_check = None;
        self.protocol = Protocol::FastCgi;
        self
    }

    /// Sets the members' weights (in member order; missing ones stay 1).
    /// Least-outstanding compares outstanding/weight; round robin spreads
    /// requests in proportion; hashing ignores weights.
    pub fn set_weights(&mut self, weights: &[u32]) {
        for (m, &w) in self.members.iter_mut().zip(weights) {
            if let Some(m) = Rc::get_mut(m) {
                m.weight = w.max(1);
            }
        }
    }

    /// The group of a supervised app: one member per slot, connected to
    /// whichever instance the slot holds.
    pub fn for_app(app: &AppSlots, settings: ProxySettings) -> UpstreamGroup {
        let addrs: Vec<UpstreamAddr> = (0..app.slots.len())
            .map(|i| UpstreamAddr::Unix(format!("app[{i}]").into()))
            .collect();
        let mut group = UpstreamGroup::new(&addrs, settings);
        for (i, (m, slot)) in group.members.iter_mut().zip(&app.slots).enumerate() {
            if let Some(m) = Rc::get_mut(m) {
                m.slot = Some(slot.clone());
                m.label = format!("app[{i}]");
                m.sticky_id = crate::sticky::member_id(&m.label);
            }
        }
        group.waiting.shared = Some(app.queued.clone());
        group.app = Some(app.clone());
        group
    }

    /// Picks the healthy member with the fewest outstanding requests,
    /// rotating among ties; `exclude` skips members that already failed this
    /// request. With every member ejected, the one whose ejection ends first
    /// is tried (a group never refuses only because of past failures).
    pub(crate) fn pick(
        &self,
        now: Instant,
        exclude: &[usize],
        key: Option<&[u8]>,
    ) -> Result<usize, Busy> {
        let n = self.members.len();
        let start = self.next.get();
        self.next.set(start.wrapping_add(1));
        let limit = self.settings.max_conns;
        let candidates = (0..n)
            .map(|i| (start + i) % n)
            .filter(|i| !exclude.contains(i));
        if candidates.clone().next().is_none() {
            return Err(Busy::Exhausted);
        }
        let open = candidates.clone().filter(|&i| {
            self.members[i].is_present()
                && (limit == 0 || self.members[i].outstanding.get() < limit)
        });
        let healthy = open.clone().filter(|&i| self.members[i].is_up(now));
        let sticky = match (&self.settings.balance, key) {
            (Balance::Sticky(_), Some(key)) => crate::sticky::parse_id(key)
                .and_then(|id| healthy.clone().find(|&i| self.members[i].sticky_id == id)),
            _ => None,
        };
        let chosen = match (&self.settings.balance, key) {
            (Balance::Sticky(_), _) if sticky.is_some() => sticky,
            (Balance::RoundRobin, _) => self.smooth_weighted(healthy),
            // Rendezvous hashing: a key keeps its member while that member
            // is up, and only the keys of a member that goes away move.
            (Balance::HashHeader(_) | Balance::HashCookie(_) | Balance::HashIp, Some(key)) => {
                healthy.max_by_key(|&i| rendezvous(key, &self.members[i].label))
            }
            // Fewest outstanding per unit of weight (a/wa < b/wb).
            _ => healthy.min_by(|&a, &b| {
                let (ma, mb) = (&self.members[a], &self.members[b]);
                (u64::from(ma.outstanding.get()) * u64::from(mb.weight))
                    .cmp(&(u64::from(mb.outstanding.get()) * u64::from(ma.weight)))
            }),
        };
        chosen
            .or_else(|| open.min_by_key(|&i| self.members[i].down_until.get()))
            .ok_or(Busy::Full)
    }

    /// Whether some member could take a request now: present and under its
    /// limit (health aside, as in [`UpstreamGroup::pick`]).
    pub(crate) fn has_room(&self) -> bool {
        let limit = self.settings.max_conns;
        self.members
            .iter()
            .any(|m| m.is_present() && (limit == 0 || m.outstanding.get() < limit))
    }

    /// nginx's smooth weighted round robin over `candidates`: each gains its
    /// weight, the richest is chosen and pays the total. With equal weights
    /// it is plain rotation.
    fn smooth_weighted(&self, candidates: impl Iterator<Item = usize>) -> Option<usize> {
        let mut total = 0i64;
        let mut best: Option<usize> = None;
        for i in candidates {
            let m = &self.members[i];
            m.rr_current.set(m.rr_current.get() + i64::from(m.weight));
            total += i64::from(m.weight);
            if best.is_none_or(|b| m.rr_current.get() > self.members[b].rr_current.get()) {
                best = Some(i);
            }
        }
        if let Some(b) = best {
            let m = &self.members[b];
            m.rr_current.set(m.rr_current.get() - total);
        }
        best
    }

    /// The name of hayate's own cookie, when the group is sticky: the
    /// cache does not count it as the client's (`cached.rs`).
    pub fn sticky_cookie(&self) -> Option<&str> {
        match &self.settings.balance {
            Balance::Sticky(name) => Some(name),
            _ => None,
        }
    }

    /// The request's balancing key, when the policy hashes one.
    pub(crate) fn balance_key<'r>(
        &self,
        headers: &[(&'r [u8], &'r [u8])],
        client_ip: &'r str,
    ) -> Option<&'r [u8]> {
        match &self.settings.balance {
            Balance::HashIp => Some(client_ip.as_bytes()),
            Balance::HashHeader(name) => headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
                .map(|(_, v)| *v),
            Balance::HashCookie(name) | Balance::Sticky(name) => {
                crate::sticky::cookie(headers, name)
            }
            _ => None,
        }
    }
}

/// FNV-1a of key and member, finished with a 64-bit mix: stable across
/// workers and restarts, which consistent hashing needs.
fn rendezvous(key: &[u8], member: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in key.iter().chain(b"\0").chain(member.as_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^ (h >> 33)
}

impl Member {
    /// What takes this member's requests now, read once per attempt:
    /// `Some(None)` for a plain member, `Some(Some(i))` for a supervised
    /// slot holding instance `i`, `None` for a slot without a ready one.
    pub fn current(&self) -> Option<Option<Arc<AppInstance>>> {
        match &self.slot {
            None => Some(None),
            Some(slot) => slot.current().map(Some),
        }
    }

    /// Where to connect for `instance` (as read by [`Member::current`]):
    /// the instance's socket, or the member's own address. Built only when
    /// a connection is opened; a pooled one needs no address.
    pub fn target(&self, instance: Option<&AppInstance>) -> Cow<'_, UpstreamAddr> {
        match instance {
            None => Cow::Borrowed(&self.addr),
            Some(i) => Cow::Owned(match &i.addr {
                AppAddr::Unix(path) => UpstreamAddr::Unix(path.clone()),
                AppAddr::Tcp(addr) => UpstreamAddr::Tcp {
                    addr: *addr,
                    authority: addr.to_string(),
                    tls: false,
                    h2c: false,
                },
                // A worker's instance is never a member's; were it one,
                // the member's own address stands.
                AppAddr::None => return Cow::Borrowed(&self.addr),
            }),
        }
    }

    /// Whether the member may take requests: not ejected by failures, not
    /// failing its health check.
    pub fn is_up(&self, now: Instant) -> bool {
        if self.probe_down.get() {
            return false;
        }
        match self.down_until.get() {
            None => true,
            Some(t) if t <= now => true,
            // Ejected; but a supervised slot whose instance was replaced
            // since (restarted after a crash) is up as soon as it is ready:
            // the failures were the old process's.
            Some(_) => match &self.slot {
                Some(slot) => {
                    let replaced = slot
                        .current()
                        .is_some_and(|i| Some(i.id) != self.down_instance.get());
                    if replaced {
                        self.succeeded();
                    }
                    replaced
                }
                None => false,
            },
        }
    }

    /// Whether the member can be connected to at all: a supervised slot
    /// without a ready instance cannot (its requests wait in the queue).
    pub fn is_present(&self) -> bool {
        self.slot.as_ref().is_none_or(|s| s.current().is_some())
    }

    /// Records a success: the member is healthy.
    pub fn succeeded(&self) {
        self.fails.set(0);
        self.down_until.set(None);
    }

    /// Records a failure; ejects the member after `max_fails` in a row.
    pub fn failed(&self, settings: &ProxySettings) {
        let fails = self.fails.get() + 1;
        self.fails.set(fails);
        if settings.max_fails > 0 && fails >= settings.max_fails {
            if self.down_until.get().is_none() {
                log::warn!(
                    "upstream {} ejected for {:?} after {fails} failures",
                    self.label,
                    settings.fail_timeout
                );
            }
            self.down_until
                .set(Some(Instant::now() + settings.fail_timeout));
            self.down_instance
                .set(self.slot.as_ref().and_then(|s| Some(s.current()?.id)));
            self.idle.borrow_mut().clear();
            self.h2.clear();
        }
    }
}

/// Counts a request as outstanding on its member (and on its app instance,
/// so a replaced instance is drained before it is stopped) until dropped;
/// then wakes the queue, unless [withdrawn](Outstanding::withdraw).
#[derive(Debug)]
pub(crate) struct Outstanding(Rc<Member>, Option<Arc<AppInstance>>, bool);

impl Outstanding {
    pub(crate) fn new(member: Rc<Member>, instance: Option<Arc<AppInstance>>) -> Outstanding {
        member.outstanding.set(member.outstanding.get() + 1);
        if let Some(i) = &instance {
            i.inflight.fetch_add(1, Ordering::AcqRel);
            i.served.fetch_add(1, Ordering::Relaxed);
        }
        Outstanding(member, instance, true)
    }

    /// Ends the count without waking the queue: the attempt freed nothing
    /// (its connect found no descriptor), and a wake-up would send the
    /// next request, or this one, straight into the same failure.
    pub(crate) fn withdraw(mut self) {
        self.2 = false;
    }

    /// The member the request went to.
    pub(crate) fn member(&self) -> &Member {
        &self.0
    }

    /// The app instance's id (0 for a plain member).
    pub(crate) fn instance_id(&self) -> u64 {
        self.1.as_ref().map_or(0, |i| i.id)
    }

    /// The app instance the request went to, if the member is supervised.
    pub(crate) fn instance(&self) -> Option<&AppInstance> {
        self.1.as_deref()
    }
}

impl Drop for Outstanding {
    fn drop(&mut self) {
        self.0
            .outstanding
            .set(self.0.outstanding.get().saturating_sub(1));
        if let Some(i) = &self.1 {
            i.inflight.fetch_sub(1, Ordering::AcqRel);
        }
        // The first queued request (if any) may go now.
        if self.2 {
            self.0.freed.notify_one();
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
