//! The route table: sites chosen by Host, routes by path prefix. Built once
//! per worker from the config (each worker owns its static roots and their
//! file caches).

use std::collections::HashMap;
use std::io;
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use hayate_compress::{Policy, VariantStore};

use hayate_cache::{ResponseCache, RoutePolicy};
use hayate_config::app::AppRef;
use hayate_config::values::{ListenAddr, Scheme, UpstreamProxyProtocol};
use hayate_config::{Config, RouteOptions};
use hayate_core::app::AppTable;
use hayate_core::client_body::{BodyLength, ClientBody};
use hayate_core::error::Error;
use hayate_core::field::strip_port;
use hayate_proxy::{Balance, HostPolicy, ProxySettings, UpstreamGroup};
use hayate_static::scripts::ScriptRoot;
use hayate_static::{CacheLimits, StaticOptions, StaticRoot};
use hayate_tls::acme::Challenges;

use crate::cached::RouteCache;
use crate::policy::client_cert::ExpectedCert;
use crate::policy::rewrite::{Rewritten, RuleRequest, SiteRules};
use crate::policy::{ForwardedClient, RouteName, RoutePolicies, TrustedProxies};
use hayate_core::request::RequestHead;
use hayate_core::transport::Peer;

/// A route: a path prefix, its files and its upstream group. With both,
/// a file that exists is served and everything else goes to the group
/// (nginx's `try_files $uri $uri/ @app`).
pub struct Route {
    /// Prefix of the normalized path.
    pub prefix: Vec<u8>,
    /// Remove the prefix before handing the path to the handler.
    pub strip_prefix: bool,
    /// Files under a root.
    pub files: Option<StaticRoot>,
    /// The upstream group.
    pub upstream: Option<Rc<UpstreamGroup>>,
    /// For a FastCGI route: the scripts its upstream runs (the upstream
    /// is then a FastCGI group).
    pub scripts: Option<ScriptRoot>,
    /// For a FastCGI route: the front controller's path under the root
    /// (`/index.php`), run for paths that match no file.
    pub front_controller: Option<Vec<u8>>,
    /// The front controller runs with the request's path as its PATH_INFO
    /// (`fastcgi_index_path_info`).
    pub front_path_info: bool,
    /// The response cache in front of the upstream group.
    pub cache: Option<RouteCache>,
    /// Position in config order (sites, then routes): the same in every
    /// worker; labels its metrics.
    pub index: usize,
    /// What the route compresses; `None`: nothing.
    pub compression: Option<Rc<Policy>>,
    /// The Strict-Transport-Security value its HTTPS responses carry.
    pub hsts: Option<Vec<u8>>,
    /// The Alt-Svc value its responses over HTTPS on TCP carry: where
    /// HTTP/3 is served (`http3`).
    pub alt_svc: Option<Rc<[u8]>>,
    /// Its site policies (allow/deny, authentication); `None`: it has none
    /// and pays nothing for them.
    pub policies: Option<Box<RoutePolicies>>,
    /// The client certificate its site's handshakes verify; `None`: its
    /// site asks for none (see `policy::client_cert`).
    pub client_cert: Option<ExpectedCert>,
    /// Reached only by X-Accel-Redirect or a rule's rewrite (`internal`).
    pub internal: bool,
    /// Its upstream's answers are looked at for X-Accel-Redirect (its site
    /// has an internal route) or X-Sendfile (`x_sendfile`).
    pub follows_internal_redirects: bool,
    /// Where X-Sendfile may name files (`x_sendfile`).
    pub sendfile: Option<StaticRoot>,
    /// Its `max_body_size`, when below the largest of any route (which
    /// the connection's reading enforces for all of them).
    pub max_body_size: Option<u64>,
    /// Its `body_timeout`, when below the longest of any route (the
    /// connection's).
    pub body_timeout: Option<std::time::Duration>,
    /// What its upstream group is made from, for a reload to find the
    /// group again (see [`Router::build`]).
    upstream_key: String,
}

/// The Strict-Transport-Security max-age of `security_headers`.
const SECURITY_HSTS: std::time::Duration = std::time::Duration::from_secs(365 * 86_400);

/// The Strict-Transport-Security value `options` ask for: `hsts`, or the
/// security_headers preset's a year (RFC 6797's example, and what
/// hstspreload.org asks at least).
impl Route {
    /// Puts the route's own body limits on `body` where they are below the
    /// connection's (its size limit, its longest pause); a declared length
    /// over the size is refused before anything is sent on.
    pub fn limit_body<B: ClientBody>(&self, body: &mut B) -> Result<(), Error> {
        if let Some(max) = self.max_body_size {
            if matches!(body.length(), BodyLength::Known(n) if n > max) {
                return Err(Error::client_body(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "request body over the route's max_body_size",
                )));
            }
            body.limit(max);
        }
        if let Some(pause) = self.body_timeout {
            body.pause_limit(pause);
        }
        Ok(())
    }
}

fn hsts_value(options: &RouteOptions) -> Option<Vec<u8>> {
    options
        .hsts
        .map(|d| d.0)
        .or(options.security_headers.then_some(SECURITY_HSTS))
        .map(|d| format!("max-age={}", d.as_secs()).into_bytes())
}

struct Site {
    hosts: Vec<String>,
    /// Longest prefix first.
    routes: Vec<Route>,
    /// Its rules (`[[site.rule]]`); `None`: it has none.
    rules: Option<SiteRules>,
    /// What answers a request none of its routes takes: a 404 with the
    /// site's own response policies and HSTS.
    unrouted: Unrouted,
}

/// A site's answer to a request none of its routes takes.
#[derive(Default)]
pub struct Unrouted {
    /// The Strict-Transport-Security value of its HTTPS answers.
    pub hsts: Option<Vec<u8>>,
    /// The Alt-Svc value of its HTTPS answers over TCP (`http3`).
    pub alt_svc: Option<Rc<[u8]>>,
    /// Its response phase (error pages, header rules, CORS headers).
    pub policies: Option<Box<RoutePolicies>>,
}

/// Sites and their routes.
pub struct Router {
    sites: Vec<Site>,
    default_site: usize,
    /// The port plain-HTTP requests are redirected to, when hayate serves
    /// HTTPS and redirects (`https_redirect`).
    https_port: Option<u16>,
    /// Answers to ACME's HTTP-01 challenges, when certificates come from
    /// ACME.
    acme: Option<Arc<Challenges>>,
    /// The peers trusted to name the client (`trusted_proxies`).
    trusted_proxies: TrustedProxies,
    /// Some site has rules: the rewrite phase runs.
    has_rules: bool,
}

impl Router {
    /// Builds the table, opening every static root; their compressed
    /// variants come from `variants`. Routes count their requests in
    /// `route_slots` (per route, in config order) when given.
    ///
    /// On a reload, `previous` is the running configuration and its router:
    /// a route whose upstream is made the same way (members, host policy,
    /// and no global `proxy_*` option changed) keeps the running group, so
    /// its kept-alive connections, ejections and in-flight counts carry
    /// over instead of starting cold.
    pub fn build(
        config: &Config,
        apps: &AppTable,
        cache: Option<&Arc<ResponseCache>>,
        variants: &Arc<VariantStore>,
        route_slots: Option<&[usize]>,
        previous: Option<(&Config, &Router)>,
    ) -> io::Result<Router> {
        let reusable = reusable_groups(config, previous);
        let g = &config.global;
        let alt_svc = http3_alt_svc(config);
        let limits = CacheLimits {
            budget: g.file_cache_size.0,
            max_file: g.file_cache_max_file.0,
            max_open: crate::budget::file_cache_descriptors(
                crate::budget::current_limit(),
                g.workers.get(),
            ),
            revalidate: g.file_cache_revalidate.0,
        };
        let proxy = ProxySettings {
            connect_timeout: g.proxy_connect_timeout.0,
            // per route, below
            header_timeout: std::time::Duration::ZERO,
            io_timeout: std::time::Duration::ZERO,
            idle_timeout: g.proxy_keepalive.0,
            max_idle: g.proxy_idle as usize,
            replay_buffer: g.proxy_replay_buffer.0,
            max_conns: g.proxy_max_conns,
            queue_depth: g.proxy_queue as usize,
            shortage_depth: crate::budget::clients_now(g.workers.get()),
            queue_timeout: g.proxy_queue_timeout.0,
            max_fails: g.proxy_max_fails,
            fail_timeout: g.proxy_fail_timeout.0,
            balance: balance(g.proxy_balance.as_ref(), Balance::LeastOutstanding),
            // per route, below
            health_check: None,
            health_interval: g.proxy_health_interval.0,
            // per route, below
            host: HostPolicy::Pass,
            via: g.proxy_via,
            max_interim: g.proxy_interim as usize,
            tls: upstream_tls(config)?,
            tunnel_idle_timeout: g.proxy_tunnel_timeout.0,
            // per route, below
            proxy_protocol: false,
            upstream_times: g.access_log != hayate_config::values::AccessLog::Off
                || g.slow_request.is_some()
                || g.otel_endpoint.is_some(),
            // set from max_conns by UpstreamGroup::speaking_http2
            h2_max_conns: 0,
            // per route, below
            grpc_web: false,
        };
        let largest_body = config
            .sites
            .iter()
            .flat_map(|s| &s.routes)
            .map(|r| r.options.max_body_size.0)
            .max()
            .unwrap_or(0);
        let longest_pause = longest_body_timeout(config);
        let mut sites = Vec::new();
        for site in &config.sites {
            let mut routes = Vec::new();
            let client_cert = ExpectedCert::of(&site.tls.client_certs(g));
            let has_internal = site.routes.iter().any(|r| r.options.internal);
            for r in &site.routes {
                let compression = crate::compression::policy(&r.options).map(Rc::new);
                let files = match &r.options.root {
                    Some(root) => {
                        let mut opts = static_options(root, &r.options, &limits);
                        opts.variants = compression.clone().map(|policy| {
                            Rc::new(crate::compression::FileVariants {
                                policy,
                                store: variants.clone(),
                            }) as Rc<dyn hayate_static::VariantSource>
                        });
                        Some(StaticRoot::new(opts)?)
                    }
                    None => None,
                };
                let policies = RoutePolicies::build(&RouteName::of(site, r), &r.options, g, &proxy)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?
                    .map(Box::new);
                let proxy = ProxySettings {
                    header_timeout: r.options.proxy_timeout.0,
                    io_timeout: r.options.proxy_timeout.0,
                    host: match r.options.proxy_host.as_str() {
                        "pass" => HostPolicy::Pass,
                        "upstream" => HostPolicy::Upstream,
                        name => HostPolicy::Fixed(name.to_string()),
                    },
                    proxy_protocol: r.options.proxy_protocol == UpstreamProxyProtocol::V2,
                    grpc_web: r.options.grpc_web,
                    health_check: r.options.proxy_health_check.clone().filter(|c| c != "off"),
                    tls: match route_client_cert(&r.prefix, &r.options, config)? {
                        Some(own) => Some(own),
                        None => proxy.tls.clone(),
                    },
                    ..proxy.clone()
                };
                // php-fpm as the supervised app (`hayate php`) runs the
                // route's scripts as a `fastcgi` upstream would.
                let app = match &r.options.app {
                    AppRef::Off => None,
                    named => Some(apps.find(named.name()).ok_or_else(|| {
                        io::Error::new(
                            io::ErrorKind::InvalidInput,
                            match named.name() {
                                Some(name) => format!(
                                    "route {:?} sends to the app {name:?}, which does not run",
                                    r.prefix
                                ),
                                None => format!(
                                    "route {:?} sends to the app, but no app runs (use hayate run)",
                                    r.prefix
                                ),
                            },
                        )
                    })?),
                };
                let app = app.as_ref();
                let app_fastcgi = app.is_some_and(|a| a.fastcgi);
                let runs_scripts = r.options.fastcgi.is_some() || app_fastcgi;
                let scripts = match (runs_scripts, &r.options.root) {
                    (true, Some(root)) => Some(ScriptRoot::new(
                        root,
                        &r.options.fastcgi_extensions,
                        r.options.dotfiles,
                        r.options.symlinks,
                    )?),
                    _ => None,
                };
                let upstream_key = format!(
                    "{:?} {:?} {:?} {:?} {} {:?} {:?} {:?} {:?} {} {:?}",
                    r.options.proxy,
                    r.options.app,
                    r.options.proxy_host,
                    r.options.fastcgi,
                    app_fastcgi,
                    r.options.proxy_timeout,
                    r.options.proxy_protocol,
                    r.options.proxy_tls_cert,
                    r.options.proxy_tls_key,
                    r.options.grpc_web,
                    r.options.proxy_health_check,
                );
                let upstream = match (&r.options.proxy, app) {
                    _ if reusable.contains_key(&upstream_key) => {
                        reusable.get(&upstream_key).cloned()
                    }
                    // FastCGI and apps speak no HTTP/2.
                    _ if r.options.grpc_web
                        && r.options.proxy.is_none()
                        && (r.options.fastcgi.is_some() || app.is_some()) =>
                    {
                        return Err(grpc_web_needs_http2())
                    }
                    _ if r.options.fastcgi.is_some() => {
                        let specs = r.options.fastcgi.as_deref().unwrap_or_default();
                        Some(Rc::new(fastcgi_group(specs, &proxy, config)?))
                    }
                    (Some(specs), _) => {
                        Some(Rc::new(upstream_group(specs, &proxy, g.proxy_http2)?))
                    }
                    (None, Some(app)) if app_fastcgi => {
                        if scripts.is_none() {
                            return Err(io::Error::new(
                                io::ErrorKind::InvalidInput,
                                format!(
                                    "route {:?}: a FastCGI app needs root (its scripts are files under it)",
                                    r.prefix
                                ),
                            ));
                        }
                        let settings = fastcgi_settings(&proxy, config);
                        Some(Rc::new(
                            UpstreamGroup::for_app(&app.slots, settings).speaking_fastcgi(),
                        ))
                    }
                    (None, Some(app)) => {
                        // Unless told otherwise, a client stays on one
                        // instance: socket.io's polling handshake and
                        // in-memory sessions fail when the default two
                        // instances take turns (issue 33).
                        let sticky = Balance::Sticky(hayate_proxy::DEFAULT_STICKY_COOKIE.into());
                        let settings = ProxySettings {
                            balance: balance(g.proxy_balance.as_ref(), sticky),
                            ..proxy
                        };
                        Some(Rc::new(UpstreamGroup::for_app(&app.slots, settings)))
                    }
                    (None, None) => None,
                };
                if let Some(group) = &upstream {
                    check_health_probe(&r.prefix, group)?;
                }
                let spec = &r.options.cache;
                let cache = cache.filter(|_| spec.enabled && upstream.is_some());
                let position =
                    sites.iter().map(|s: &Site| s.routes.len()).sum::<usize>() + routes.len();
                let own_cookie: Option<Box<str>> = upstream
                    .as_ref()
                    .and_then(|g| g.sticky_cookie())
                    .map(Into::into);
                routes.push(Route {
                    client_cert: client_cert.clone(),
                    index: route_slots.map_or(position, |slots| slots[position]),
                    upstream_key,
                    prefix: r.prefix.as_bytes().to_vec(),
                    strip_prefix: r.options.strip_prefix,
                    files,
                    upstream,
                    front_controller: scripts
                        .as_ref()
                        .filter(|_| !r.options.fastcgi_index.is_empty())
                        .map(|_| {
                            format!("/{}", r.options.fastcgi_index.trim_start_matches('/'))
                                .into_bytes()
                        }),
                    front_path_info: r.options.fastcgi_index_path_info,
                    scripts,
                    cache: cache.map(|shared| RouteCache {
                        shared: shared.clone(),
                        policy: RoutePolicy {
                            default_ttl: spec.ttl,
                            store_set_cookie: spec.set_cookie,
                            stale_while_revalidate: spec.stale_while_revalidate,
                            stale_if_error: spec.stale_if_error,
                        },
                        key_headers: field_names(&r.options.cache_key_headers.0),
                        bypass_headers: field_names(
                            r.options.cache_bypass_headers.0.iter().filter(|n| {
                                !(spec.with_cookie && *n == "cookie"
                                    || spec.with_authorization && *n == "authorization")
                            }),
                        ),
                        compression: compression.clone(),
                        own_cookie: own_cookie.clone(),
                    }),
                    compression,
                    alt_svc: alt_svc.clone(),
                    hsts: hsts_value(&r.options),
                    policies,
                    internal: r.options.internal,
                    max_body_size: Some(r.options.max_body_size.0).filter(|&m| m < largest_body),
                    body_timeout: Some(r.options.body_timeout.0).filter(|&t| t < longest_pause),
                    follows_internal_redirects: has_internal || r.options.x_sendfile.is_some(),
                    sendfile: match &r.options.x_sendfile {
                        // Files named one by one: no index, listing or fallback.
                        Some(dir) => Some(StaticRoot::new(StaticOptions {
                            index: String::new(),
                            listing: false,
                            fallback: None,
                            ..static_options(dir, &r.options, &limits)
                        })?),
                        None => None,
                    },
                });
            }
            let unrouted = match &site.unrouted {
                Some(options) => Unrouted {
                    hsts: hsts_value(options),
                    alt_svc: alt_svc.clone(),
                    policies: RoutePolicies::unrouted(options)
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?
                        .map(Box::new),
                },
                None => Unrouted::default(),
            };
            sites.push(Site {
                hosts: site.hosts.clone(),
                routes,
                rules: SiteRules::new(&site.rules),
                unrouted,
            });
        }
        let default_site = sites.iter().position(|s| s.hosts.is_empty()).unwrap_or(0);
        let https_port = g.listen.iter().find_map(|l| match (l.scheme, &l.addr) {
            (Scheme::Https, ListenAddr::Tcp(a)) if g.https_redirect => Some(a.port()),
            _ => None,
        });
        let trusted = [&g.trusted_proxies, &g.proxy_trusted];
        Ok(Router {
            has_rules: sites.iter().any(|s| s.rules.is_some()),
            sites,
            default_site,
            https_port,
            acme: None,
            trusted_proxies: TrustedProxies::new(
                trusted.into_iter().flatten().flatten().copied().collect(),
            ),
        })
    }

    /// Answers ACME's HTTP-01 challenges from `challenges`.
    pub fn with_acme_challenges(mut self, challenges: Option<Arc<Challenges>>) -> Router {
        self.acme = challenges;
        self
    }

    /// The key authorization for an HTTP-01 challenge's `token`, while
    /// an order waits for it.
    pub fn acme_challenge(&self, token: &[u8]) -> Option<String> {
        self.acme.as_ref()?.http01(token)
    }

    /// Identify: the client a request from `peer` comes from, when a
    /// trusted proxy names it (`None`: the peer is the client).
    #[inline(always)]
    pub fn client_of(
        &self,
        head: &RequestHead,
        peer: &Peer,
        reuse: Option<Box<ForwardedClient>>,
    ) -> Option<Box<ForwardedClient>> {
        // Inlined test first: without trusted proxies (most sites) the call
        // cost every request 22 instructions (bench/instructions/run).
        if self.trusted_proxies.is_empty() {
            return None;
        }
        self.trusted_proxies.client_of(head, peer, reuse)
    }

    /// Whether `ip` is a trusted proxy's (a PROXY protocol header is read
    /// from it).
    pub fn trusts(&self, ip: std::net::IpAddr) -> bool {
        self.trusted_proxies.trusts(ip)
    }

    /// Where plain-HTTP requests are redirected: the first https
    /// listener's port, when there is one and `https_redirect` is on.
    pub fn https_port(&self) -> Option<u16> {
        self.https_port
    }

    /// The site (its first host, `*` for any) and prefix of the route of
    /// `index` ([`Route::index`]), for the logs.
    pub fn route_name(&self, index: usize) -> Option<(&str, &[u8])> {
        self.sites.iter().find_map(|site| {
            let route = site.routes.iter().find(|r| r.index == index)?;
            Some((
                site.hosts.first().map_or("*", String::as_str),
                &route.prefix[..],
            ))
        })
    }

    /// Every upstream group and its route's index (for the worker's
    /// health-check and sweeper tasks, and the groups' figures).
    pub fn upstream_groups(&self) -> impl Iterator<Item = (usize, &Rc<UpstreamGroup>)> {
        self.sites
            .iter()
            .flat_map(|s| &s.routes)
            .filter_map(|r| Some((r.index, r.upstream.as_ref()?)))
    }

    /// The label of member `member` of route `route`'s upstream group.
    pub fn upstream_member(&self, route: usize, member: u16) -> Option<&str> {
        let (_, group) = self.upstream_groups().find(|(i, _)| *i == route)?;
        group.member_label(member.into())
    }

    /// Finds the route for `host` (as sent, maybe with a port) and the
    /// normalized `path`.
    pub fn route(&self, host: Option<&[u8]>, path: &[u8]) -> Option<&Route> {
        self.site(host)?
            .routes
            .iter()
            .find(|r| prefix_matches(&r.prefix, path))
    }

    /// What answers a request to `host` that no route takes.
    pub fn unrouted(&self, host: Option<&[u8]>) -> Option<&Unrouted> {
        self.site(host).map(|s| &s.unrouted)
    }

    #[inline(always)]
    fn site(&self, host: Option<&[u8]>) -> Option<&Site> {
        let site = host
            .and_then(|h| self.site_for(h))
            .unwrap_or(self.default_site);
        self.sites.get(site)
    }

    /// Whether some site has rules (the rewrite phase has work).
    #[inline(always)]
    pub fn has_rules(&self) -> bool {
        self.has_rules
    }

    /// The rewrite phase: the rules of `head`'s site, for the client at
    /// `client_ip`.
    pub fn rewrite(&self, head: &RequestHead, client_ip: &str, now: Instant) -> Rewritten {
        let Some(rules) = self.site(head.host()).and_then(|s| s.rules.as_ref()) else {
            return Rewritten::Unchanged;
        };
        // The `file` condition: under the root of the route the path goes to.
        let file_exists = |path: &[u8]| {
            let Some(route) = self.route(head.host(), path) else {
                return false;
            };
            let files = route.files.as_ref();
            files.is_some_and(|f| f.exists(&handler_path(route, path), now))
        };
        rules.apply(&RuleRequest {
            head,
            client_ip,
            file_exists: &file_exists,
        })
    }

    #[inline]
    fn site_for(&self, host: &[u8]) -> Option<usize> {
        let name = strip_port(host);
        self.sites.iter().position(|s| {
            s.hosts.iter().any(|h| match h.strip_prefix("*.") {
                Some(suffix) => {
                    name.len() > suffix.len() + 1
                        && name[name.len() - suffix.len()..].eq_ignore_ascii_case(suffix.as_bytes())
                        && name[name.len() - suffix.len() - 1] == b'.'
                }
                None => name.eq_ignore_ascii_case(h.as_bytes()),
            })
        })
    }
}

/// The running router's upstream groups by what they are made from, when
/// `config` changes no global `proxy_*` or `fastcgi_*` option (nor the
/// app's protocol) of the running one.
fn reusable_groups(
    config: &Config,
    previous: Option<(&Config, &Router)>,
) -> HashMap<String, Rc<UpstreamGroup>> {
    let Some((running, router)) = previous else {
        return HashMap::new();
    };
    let proxy_changed = running
        .global
        .changed_keys(&config.global)
        .iter()
        .any(|k| k.starts_with("proxy_") || k.starts_with("fastcgi_") || *k == "app_protocol");
    if proxy_changed {
        return HashMap::new();
    }
    router
        .sites
        .iter()
        .flat_map(|s| &s.routes)
        .filter_map(|r| Some((r.upstream_key.clone(), r.upstream.clone()?)))
        .collect()
}

/// The longest `body_timeout` of any route: what a connection waits
/// between two reads of a body before its route is known to wait less.
pub fn longest_body_timeout(config: &Config) -> std::time::Duration {
    config
        .sites
        .iter()
        .flat_map(|s| &s.routes)
        .map(|r| r.options.body_timeout.0)
        .max()
        .unwrap_or_default()
}

/// The response cache shared by every worker, when a route caches.
pub fn response_cache(config: &Config) -> Option<Arc<ResponseCache>> {
    let g = &config.global;
    let used = config
        .sites
        .iter()
        .flat_map(|s| &s.routes)
        .any(|r| r.options.cache.enabled);
    used.then(|| {
        Arc::new(ResponseCache::new(hayate_cache::CacheLimits {
            budget: g.cache_size.0,
            max_object: g.cache_max_object.0,
            lock_timeout: g.cache_lock_timeout.0,
            max_waiters: g.cache_lock_waiters as usize,
            hit_for_miss: g.cache_hit_for_miss.0,
        }))
    })
}

/// Segment-aware prefix match: `/assets` matches `/assets` and `/assets/x`
/// but not `/assetsx`; `/assets/` matches what starts with it.
fn prefix_matches(prefix: &[u8], path: &[u8]) -> bool {
    path.starts_with(prefix)
        && (prefix.ends_with(b"/") || path.len() == prefix.len() || path[prefix.len()] == b'/')
}

/// The path a handler sees: without the prefix when the route strips it.
#[inline(always)]
pub fn handler_path<'p>(route: &Route, path: &'p [u8]) -> std::borrow::Cow<'p, [u8]> {
    if !route.strip_prefix || route.prefix == b"/" {
        return path.into();
    }
    let rest = &path[route.prefix.len().min(path.len())..];
    if rest.first() == Some(&b'/') {
        rest.into()
    } else {
        let mut p = Vec::with_capacity(rest.len() + 1);
        p.push(b'/');
        p.extend_from_slice(rest);
        p.into()
    }
}

fn static_options(root: &Path, o: &RouteOptions, limits: &CacheLimits) -> StaticOptions {
    StaticOptions {
        root: root.to_path_buf(),
        index: o.index.clone(),
        listing: o.listing,
        fallback: o.fallback.clone(),
        dotfiles: o.dotfiles,
        symlinks: o.symlinks,
        cache_control: o.cache_control.clone(),
        immutable: o.immutable,
        precompressed: o.precompressed,
        cache: limits.clone(),
        encodings: o.compress_encodings.0.clone(),
        variants: None,
    }
}

/// Header field names (lowercased by the config) as the cache compares
/// them.
fn field_names<'a>(names: impl IntoIterator<Item = &'a String>) -> std::rc::Rc<[Vec<u8>]> {
    names.into_iter().map(|n| n.as_bytes().to_vec()).collect()
}
/// How long a client may remember that HTTP/3 is served (RFC 7838 §3.1,
/// `ma`): a day, Caddy's and Cloudflare's value; the default without it.
const ALT_SVC_MAX_AGE: u32 = 86_400;

/// The Alt-Svc value naming the UDP ports HTTP/3 is served on (every
/// https TCP listener's port, with `http3` on; not one taking the PROXY
/// protocol, which has no QUIC side), or `None`.
fn http3_alt_svc(config: &Config) -> Option<Rc<[u8]>> {
    use hayate_config::values::{ListenAddr, Scheme};
    if !config.global.http3 {
        return None;
    }
    let mut ports: Vec<u16> = Vec::new();
    for l in &config.global.listen {
        if let (Scheme::Https, false, ListenAddr::Tcp(a)) = (l.scheme, l.proxy_protocol, &l.addr) {
            if !ports.contains(&a.port()) {
                ports.push(a.port());
            }
        }
    }
    let value = ports
        .iter()
        .map(|p| format!("h3=\":{p}\"; ma={ALT_SVC_MAX_AGE}"))
        .collect::<Vec<_>>()
        .join(", ");
    (!ports.is_empty()).then(|| value.into_bytes().into())
}

#[cfg(test)]
mod tests;
mod upstreams;

use upstreams::{
    balance, check_health_probe, fastcgi_group, fastcgi_settings, grpc_web_needs_http2,
    route_client_cert, upstream_group, upstream_tls,
};
