//! hayate's configuration: one option table ([`table`]) drives CLI flags,
//! environment variables, config file keys, `--help` and docs/config.md.
//!
//! Loading is pure: it reads the config file's text and the CLI/env values
//! and yields a validated [`Config`]; opening listeners and directories is
//! the server's job (STYLE.md: raw, then built).
//!
//! Precedence, lowest first: defaults, config file, environment, CLI.

pub mod app;
pub mod app_restart;
pub mod cli;
mod dollar;
mod file;
mod reference;
pub mod rules;
pub mod table;
pub mod values;

pub use reference::{
    markdown_reference, EXAMPLE_APPS_CONFIG, EXAMPLE_APP_CONFIG, EXAMPLE_CONFIG,
    EXAMPLE_POLICY_CONFIG, EXAMPLE_RULES_CONFIG,
};

use std::fmt;
use std::path::PathBuf;

pub use file::load_file;
pub use table::{
    GlobalLayer, GlobalOptions, OptDef, RouteLayer, RouteOptions, GLOBAL_OPTIONS, ROUTE_OPTIONS,
};

/// A validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Global options.
    pub global: GlobalOptions,
    /// Sites in file order; requests whose Host matches no site go to the
    /// first site without `hosts` (or the first site).
    pub sites: Vec<Site>,
    /// The apps: the `[app]` section, or the `[[app]]` tables, in file
    /// order (names unique).
    pub apps: Vec<app::AppSection>,
}

/// A virtual host.
#[derive(Debug, Clone)]
pub struct Site {
    /// Lower-case host names, without port; `*.example.com` matches any
    /// subdomain. Empty means any host.
    pub hosts: Vec<String>,
    /// Routes, longest prefix first.
    pub routes: Vec<Route>,
    /// The site's own HTTPS certificates (`tls`, `tls_cert`, `tls_key` in
    /// its `[[site]]`).
    pub tls: SiteTls,
    /// Its rules (`[[rule]]`, then `[[site.rule]]`), in order.
    pub rules: Vec<rules::Rule>,
    /// The site's own options, for a request none of its routes takes (it
    /// has no `/` route): that 404 gets the site's error pages and header
    /// rules, as nginx's server-level `error_page` and `add_header` reach
    /// every answer of the server. `None` when a `/` route takes all.
    pub unrouted: Option<RouteOptions>,
}

/// A site's HTTPS settings, beside the global ones.
#[derive(Debug, Clone, Default)]
pub struct SiteTls {
    /// Automatic certificates for the site's hosts (`internal` or `acme`),
    /// whatever the global `tls` says.
    pub mode: Option<values::TlsMode>,
    /// Certificate and key file pairs.
    pub certs: Vec<(PathBuf, PathBuf)>,
    /// The ACME challenge for the site's hosts (`None`: the global one's;
    /// wildcards are always ordered over DNS-01).
    pub acme_challenge: Option<values::AcmeChallenge>,
    /// The site's own `tls_client_auth`, `tls_client_ca` and
    /// `tls_client_crl` (each `None`: the global one's); see
    /// [`SiteTls::client_certs`].
    pub client_auth: Option<values::ClientAuth>,
    /// See `client_auth`.
    pub client_ca: Option<PathBuf>,
    /// See `client_auth`.
    pub client_crl: Option<Vec<PathBuf>>,
}

/// How a site verifies client certificates: its own settings over the
/// global ones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCerts {
    /// Off, optional or required.
    pub auth: values::ClientAuth,
    /// The CAs client certificates must chain to (set whenever `auth` is
    /// not off: the load refuses it otherwise).
    pub ca: Option<PathBuf>,
    /// Revocation lists of those CAs.
    pub crl: Vec<PathBuf>,
}

impl SiteTls {
    /// The client-certificate settings of the site, its own over `g`'s.
    pub fn client_certs(&self, g: &GlobalOptions) -> ClientCerts {
        ClientCerts {
            auth: self.client_auth.unwrap_or(g.tls_client_auth),
            ca: self.client_ca.clone().or_else(|| g.tls_client_ca.clone()),
            crl: self
                .client_crl
                .clone()
                .or_else(|| g.tls_client_crl.clone())
                .unwrap_or_default(),
        }
    }
}

/// A path prefix and how it is served.
#[derive(Debug, Clone)]
pub struct Route {
    /// Path prefix, starting with `/`.
    pub prefix: String,
    /// Options merged from top level, site and route.
    pub options: RouteOptions,
    /// The config file lines that set this route's keys whose values are
    /// checked when opened ([`OPENED_KEYS`]: a root, an htpasswd file), for
    /// `hayate check` to name.
    pub lines: Vec<(&'static str, usize)>,
}

/// Route keys naming files or directories that are checked only when
/// opened, whose config file lines a [`Route`] keeps (and `app`, whose
/// name is checked against the declared apps once all routes are known).
pub const OPENED_KEYS: &[&str] = &[
    "root",
    "basic_auth",
    "proxy_tls_cert",
    "proxy_tls_key",
    "app",
];

impl Route {
    /// The config file line that set `key` for this route (maybe in its
    /// site or at the top level), when it came from a file.
    pub fn line_of(&self, key: &str) -> Option<usize> {
        self.lines.iter().find(|(k, _)| *k == key).map(|(_, l)| *l)
    }
}

/// A configuration error, naming where it is: `hayate.toml:7: workers: ...`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The config file, when the error is in one.
    pub file: Option<PathBuf>,
    /// 1-based line in the file.
    pub line: Option<usize>,
    /// The key or flag concerned.
    pub key: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(file) = &self.file {
            write!(f, "{}:", file.display())?;
            if let Some(line) = self.line {
                write!(f, "{line}:")?;
            }
            f.write_str(" ")?;
        }
        if let Some(key) = &self.key {
            write!(f, "{key}: ")?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for ConfigError {}

/// Every error found in a configuration (at least one), in file order; one
/// per line when shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

impl From<ConfigError> for ConfigErrors {
    fn from(e: ConfigError) -> ConfigErrors {
        ConfigErrors(vec![e])
    }
}

/// Options given outside the file (environment and CLI), already parsed.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// Global options.
    pub global: GlobalLayer,
    /// Route defaults.
    pub route: RouteLayer,
    /// `--root PREFIX=DIR`: each prefix served from its directory by a
    /// route of its own, as `/` is served otherwise (its prefix stripped,
    /// as nginx's `alias`).
    pub roots: Vec<(String, PathBuf)>,
}

/// `user`, `group` and `app_user` together: a hayate that dropped to `user`
/// can only start its app as that same user.
fn check_users(g: &GlobalOptions) -> Result<(), (&'static str, String)> {
    match (&g.user, &g.group, &g.app_user) {
        (Some(user), _, Some(app)) if user != app => Err((
            "app_user",
            format!(
                "hayate runs as {user:?} (user), and a process that is not root cannot start \
                 the app as {app:?}: drop app_user (the app runs as {user:?}) or user"
            ),
        )),
        (None, Some(_), _) => Err(("group", "group needs user".into())),
        _ => Ok(()),
    }
}

/// `shared_key`, when given: 64 hex digits. (Whether sharing ACME needs
/// it is checked at start: `hayate check` reads a file without the
/// environment, where the key is best given.)
fn check_shared_key(g: &GlobalOptions) -> Result<(), (&'static str, String)> {
    let hex = |k: &str| k.trim().len() == 64 && k.trim().bytes().all(|b| b.is_ascii_hexdigit());
    match &g.shared_key {
        Some(k) if !hex(k) => Err((
            "shared_key",
            "shared_key must be 64 hex digits (openssl rand -hex 32 makes one)".into(),
        )),
        _ => Ok(()),
    }
}

/// What differs from `old` to `new`, one line each, for a reload's report:
/// global options by key, then routes by site and prefix (added, removed,
/// or the keys that changed).
pub fn changes(old: &Config, new: &Config) -> Vec<String> {
    let mut lines: Vec<String> = old
        .global
        .changed_keys(&new.global)
        .into_iter()
        .map(|k| format!("{k}: changed"))
        .collect();
    let routes = |c: &Config| -> Vec<(String, String, RouteOptions)> {
        c.sites
            .iter()
            .flat_map(|s| {
                let site = if s.hosts.is_empty() {
                    "*".to_string()
                } else {
                    s.hosts.join(" ")
                };
                s.routes
                    .iter()
                    .map(move |r| (site.clone(), r.prefix.clone(), r.options.clone()))
            })
            .collect()
    };
    let (before, after) = (routes(old), routes(new));
    let find = |list: &[(String, String, RouteOptions)], site: &str, prefix: &str| {
        list.iter()
            .find(|(s, p, _)| s == site && p == prefix)
            .map(|(_, _, o)| o.clone())
    };
    for (site, prefix, options) in &after {
        match find(&before, site, prefix) {
            None => lines.push(format!("route {prefix} of site {site}: added")),
            Some(was) => {
                let keys = was.changed_keys(options);
                if !keys.is_empty() {
                    lines.push(format!(
                        "route {prefix} of site {site}: {} changed",
                        keys.join(", ")
                    ));
                }
            }
        }
    }
    for (site, prefix, _) in &before {
        if find(&after, site, prefix).is_none() {
            lines.push(format!("route {prefix} of site {site}: removed"));
        }
    }
    // Rules by what they say (their lines may move with the file).
    let rules = |s: &Site| {
        let said: Vec<String> = s
            .rules
            .iter()
            .map(|r| format!("{:?} {:?}", r.when, r.action))
            .collect();
        (s.hosts.join(" "), said)
    };
    for site in &new.sites {
        let (hosts, said) = rules(site);
        let was = old.sites.iter().map(rules).find(|(h, _)| *h == hosts);
        if was.is_some_and(|(_, w)| w != said) {
            let name = if hosts.is_empty() { "*" } else { &hosts };
            lines.push(format!("rules of site {name}: changed"));
        }
    }
    lines
}

/// Builds the configuration without a file: one site with a route at `/`
/// (files under the root or the current directory, then the proxy if one is
/// given) and one route per `--proxy PREFIX=...`.
pub fn without_file(overrides: &Overrides) -> Result<Config, ConfigError> {
    let mut base = overrides.route.clone();
    let cache_by_prefix = base
        .cache
        .as_mut()
        .map(|c| std::mem::take(&mut c.by_prefix))
        .unwrap_or_default();
    let specs = base.proxy.take().unwrap_or_default();
    if let Some(name) = specs.iter().find_map(|s| s.group.as_ref()) {
        return Err(ConfigError {
            file: None,
            line: None,
            key: Some("--proxy".into()),
            message: format!("{name:?} names an upstream group: groups are declared with [[upstream]] in a config file"),
        });
    }
    let (prefixed, plain): (Vec<_>, Vec<_>) = specs.into_iter().partition(|s| s.prefix.is_some());
    let mut routes = Vec::new();
    for spec in prefixed {
        let mut layer = base.clone();
        layer.root = None;
        let prefix = spec.prefix.clone().unwrap_or_default();
        if routes.iter().any(|r: &Route| r.prefix == prefix) {
            return Err(ConfigError {
                file: None,
                line: None,
                key: Some("--proxy".into()),
                message: format!("two upstream groups for prefix {prefix:?}"),
            });
        }
        layer.proxy = Some(vec![spec]);
        routes.push(Route {
            prefix,
            options: layer.resolve(),
            lines: Vec::new(),
        });
    }
    let fastcgi = base.fastcgi.take().unwrap_or_default();
    let (prefixed_fcgi, plain_fcgi): (Vec<_>, Vec<_>) =
        fastcgi.into_iter().partition(|s| s.prefix.is_some());
    for spec in prefixed_fcgi {
        let prefix = spec.prefix.clone().unwrap_or_default();
        if routes.iter().any(|r: &Route| r.prefix == prefix) {
            return Err(ConfigError {
                file: None,
                line: None,
                key: Some("--fastcgi".into()),
                message: format!("two upstreams for prefix {prefix:?}"),
            });
        }
        // Scripts live under the root: a prefixed FastCGI route keeps it.
        let mut layer = base.clone();
        layer.root.get_or_insert_with(|| PathBuf::from("."));
        layer.fastcgi = Some(vec![spec]);
        routes.push(Route {
            prefix,
            options: layer.resolve(),
            lines: Vec::new(),
        });
    }
    let mut slash = base;
    let app = slash.app.as_ref().is_some_and(app::AppRef::is_on);
    if !plain_fcgi.is_empty() {
        slash.fastcgi = Some(plain_fcgi);
        slash.root.get_or_insert_with(|| PathBuf::from("."));
    }
    if !plain.is_empty() {
        slash.proxy = Some(plain);
    } else if slash.root.is_none() && !app {
        // Only without an app: never serve an app's own directory by accident.
        slash.root = Some(PathBuf::from("."));
    }
    // --root PREFIX=DIR: served as `/` is (files, then the app's scripts
    // under DIR), with the prefix stripped; a missing file there is a 404,
    // not `/`'s front controller looked for under DIR.
    for (prefix, dir) in &overrides.roots {
        if routes.iter().any(|r: &Route| r.prefix == *prefix) {
            return Err(ConfigError {
                file: None,
                line: None,
                key: Some("--root".into()),
                message: format!("prefix {prefix:?} already has a route of its own"),
            });
        }
        let mut layer = slash.clone();
        layer.root = Some(dir.clone());
        layer.strip_prefix = Some(true);
        layer.fastcgi_index = Some(String::new());
        routes.push(Route {
            prefix: prefix.clone(),
            options: layer.resolve(),
            lines: Vec::new(),
        });
    }
    if !routes.iter().any(|r| r.prefix == "/") {
        routes.push(Route {
            prefix: "/".into(),
            options: slash.resolve(),
            lines: Vec::new(),
        });
    }
    // --cache PREFIX=SPEC: that prefix's route caches as SPEC; a prefix
    // without a route of its own gets one, served as `/` is.
    for (prefix, spec) in cache_by_prefix {
        if let Some(r) = routes.iter_mut().find(|r| r.prefix == prefix) {
            r.options.cache = spec;
            continue;
        }
        let mut options = routes
            .iter()
            .find(|r| r.prefix == "/")
            .map(|r| r.options.clone())
            .expect("a route at /");
        options.cache = spec;
        routes.push(Route {
            prefix,
            options,
            lines: Vec::new(),
        });
    }
    routes.sort_by_key(|r| std::cmp::Reverse(r.prefix.len()));
    if let Some(message) = routes.iter().find_map(|r| {
        let mut layer = RouteLayer {
            root: r.options.root.clone(),
            fastcgi: r.options.fastcgi.clone(),
            proxy: r.options.proxy.clone(),
            ..RouteLayer::default()
        };
        layer.app = Some(r.options.app.clone());
        fastcgi_conflict(&layer)
    }) {
        return Err(ConfigError {
            file: None,
            line: None,
            key: Some("--fastcgi".into()),
            message: message.into(),
        });
    }
    let global = overrides.global.resolve();
    check_tls(&global, &[]).map_err(|(key, message)| ConfigError {
        file: None,
        line: None,
        key: Some(format!("--{}", key.replace('_', "-"))),
        message,
    })?;
    Ok(Config {
        global,
        sites: vec![Site {
            hosts: Vec::new(),
            routes,
            tls: SiteTls::default(),
            rules: Vec::new(),
            unrouted: None,
        }],
        apps: Vec::new(),
    })
}

/// Why a route's `proxy` members cannot form one group, if they cannot:
/// a group speaks one protocol, so `h2c://` (HTTP/2) members do not mix
/// with others.
pub(crate) fn proxy_protocol_mix(route: &RouteLayer) -> Option<&'static str> {
    let members: Vec<&str> = route
        .proxy
        .as_ref()?
        .iter()
        .flat_map(|spec| {
            spec.members
                .iter()
                .map(|m| values::ProxySpec::member_weight(m).0)
        })
        .collect();
    let h2c = members.iter().filter(|m| values::speaks_h2c(m)).count();
    (h2c != 0 && h2c != members.len()).then_some(
        "h2c:// (HTTP/2) and other members cannot share a group: put them in separate routes",
    )
}

/// Why a route's `fastcgi` cannot be served as set, if it cannot: its
/// scripts live under its root, and one route has one kind of upstream.
pub(crate) fn fastcgi_conflict(route: &RouteLayer) -> Option<&'static str> {
    route.fastcgi.as_ref()?;
    if route.root.is_none() {
        Some("fastcgi needs root: the scripts it runs are files under it")
    } else if route.proxy.is_some() || route.app.as_ref().is_some_and(app::AppRef::is_on) {
        Some("a route sends to one of proxy, app or fastcgi")
    } else if route.proxy_protocol == Some(values::UpstreamProxyProtocol::V2) {
        Some("proxy_protocol is for HTTP upstreams: php-fpm does not read a PROXY header")
    } else {
        None
    }
}

/// DNS-01's options together: a way to put records in DNS (RFC 2136 or
/// a hook, not both), somewhere to see them, and wildcard `tls_names`
/// only with such a way (a site's wildcard hosts and its own
/// `acme_challenge` are checked with the site).
fn check_dns01(g: &GlobalOptions) -> Result<(), (&'static str, String)> {
    let dns01 = g.acme_challenge == values::AcmeChallenge::Dns01;
    let dns = g.acme_dns_server.is_some() || g.acme_dns_hook.is_some();
    let acme = g.tls == Some(values::TlsMode::Acme);
    let wildcard = g.tls_names.iter().flatten().find(|n| n.starts_with("*."));
    if let (true, false, Some(name)) = (acme, dns, wildcard) {
        return Err((
            "tls_names",
            format!("{name:?} is a wildcard: ACME issues wildcards over DNS-01 only, which needs acme_dns_server (RFC 2136 updates) or acme_dns_hook"),
        ));
    }
    if !dns01 && !dns && g.acme_dns_tsig_key.is_none() {
        return Ok(());
    }
    match (&g.acme_dns_server, &g.acme_dns_hook) {
        (None, None) if dns01 => Err((
            "acme_challenge",
            "acme_challenge = \"dns-01\" needs acme_dns_server (RFC 2136 updates) or acme_dns_hook (a program that sets the record)".into(),
        )),
        (Some(_), Some(_)) => Err((
            "acme_dns_hook",
            "acme_dns_hook and acme_dns_server are two ways to set the record: give one".into(),
        )),
        (None, Some(hook)) if hook.is_empty() => Err((
            "acme_dns_hook",
            "acme_dns_hook needs a program: [\"/path/to/program\", \"args\"...]".into(),
        )),
        (None, Some(_)) if g.acme_dns_resolver.is_none() => Err((
            "acme_dns_resolver",
            "acme_dns_hook needs acme_dns_resolver: the DNS server (IP:PORT) asked whether the record the hook set is there yet".into(),
        )),
        _ if g.acme_dns_tsig_key.is_some() && g.acme_dns_server.is_none() => Err((
            "acme_dns_tsig_key",
            "acme_dns_tsig_key signs updates to acme_dns_server, which is not set".into(),
        )),
        _ => Ok(()),
    }
}

/// The collector's client certificate: with its key, for an https://
/// endpoint (a plain one would never present it).
fn check_otel_client_cert(g: &GlobalOptions) -> Result<(), (&'static str, String)> {
    match (&g.otel_tls_cert, &g.otel_tls_key, &g.otel_endpoint) {
        (None, None, _) => Ok(()),
        (Some(_), None, _) => Err(("otel_tls_cert", "otel_tls_cert needs otel_tls_key".into())),
        (None, Some(_), _) => Err(("otel_tls_key", "otel_tls_key needs otel_tls_cert".into())),
        (_, _, Some(e)) if e.tls => Ok(()),
        _ => Err((
            "otel_tls_cert",
            "otel_tls_cert is presented to an https:// otel_endpoint, and there is none".into(),
        )),
    }
}

/// On-demand TLS's options together: never without its ask URL (a scan of
/// random names would otherwise order a certificate for each), a plain
/// http:// one, and a wait that ends before the handshake's.
fn check_on_demand(g: &GlobalOptions) -> Result<(), (&'static str, String)> {
    if !g.tls_on_demand {
        return Ok(());
    }
    let Some(ask) = &g.tls_on_demand_ask else {
        return Err((
            "tls_on_demand",
            "tls_on_demand needs tls_on_demand_ask: the URL that says which names may get a certificate (without it, anyone could make hayate order certificates for any name)".into(),
        ));
    };
    if !ask.starts_with("http://") || ask.len() == "http://".len() {
        return Err((
            "tls_on_demand_ask",
            format!("expected a plain http://HOST:PORT/PATH URL, got {ask:?}"),
        ));
    }
    if g.tls_on_demand_timeout.0 >= g.tls_handshake_timeout.0 {
        return Err((
            "tls_on_demand_timeout",
            "tls_on_demand_timeout must be less than tls_handshake_timeout, which bounds the whole handshake".into(),
        ));
    }
    if g.tls_on_demand_rate == 0 {
        return Err((
            "tls_on_demand_rate",
            "0 would order nothing: at least 1".into(),
        ));
    }
    Ok(())
}

/// The HTTPS options together: a key for every certificate, and
/// certificates for every https listener. `Err((key, why))`.
fn check_tls(g: &GlobalOptions, sites: &[Site]) -> Result<(), (&'static str, String)> {
    check_users(g)?;
    check_shared_key(g)?;
    let certs = g.tls_cert.as_ref().map_or(0, Vec::len);
    let keys = g.tls_key.as_ref().map_or(0, Vec::len);
    if certs != keys {
        return Err((
            "tls_key",
            format!("{certs} tls_cert and {keys} tls_key: give one key per certificate, in the same order"),
        ));
    }
    // Without sites (the command line), the global setting is the one.
    let global_only = SiteTls::default();
    let settings = match sites {
        [] => vec![global_only.client_certs(g)],
        _ => sites.iter().map(|s| s.tls.client_certs(g)).collect(),
    };
    let all_alike = settings.windows(2).all(|pair| pair[0] == pair[1]);
    if g.http3 && !all_alike {
        // A QUIC handshake's settings are fixed before its ClientHello is
        // read (no choice by SNI, as TCP's): a site that requires
        // certificates must not be reachable around that.
        return Err((
            "http3",
            "HTTP/3 verifies client certificates only when every site asks the same (tls_client_auth, tls_client_ca, tls_client_crl): a QUIC handshake's settings are chosen before the client names its site".into(),
        ));
    }
    for site in settings {
        if site.auth != values::ClientAuth::Off && site.ca.is_none() {
            return Err((
                "tls_client_ca",
                format!(
                    "tls_client_auth = \"{}\" needs tls_client_ca: the CA certificates (PEM) client certificates must chain to",
                    site.auth.as_str()
                ),
            ));
        }
    }
    check_dns01(g)?;
    check_on_demand(g)?;
    check_otel_client_cert(g)?;
    let https = g.listen.iter().any(|l| l.scheme == values::Scheme::Https);
    let site_tls = sites
        .iter()
        .any(|s| s.tls.mode.is_some() || !s.tls.certs.is_empty());
    if https && certs == 0 && g.tls.is_none() && !site_tls && !g.tls_on_demand {
        return Err((
            "listen",
            "an https:// listener needs certificates: tls_cert and tls_key, or tls = \"internal\""
                .into(),
        ));
    }
    let quic = |l: &values::Listen| l.scheme == values::Scheme::Https && !l.proxy_protocol;
    if g.http3 && !g.listen.iter().any(quic) {
        return Err((
            "http3",
            "http3 is served on the UDP port of an https:// listener (one without proxy_protocol), and there is none".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
