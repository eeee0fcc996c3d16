//! The walk over a Caddyfile: the global options block becomes hayate's
//! top level, each site block a `[[site]]` (its addresses the hosts and
//! listeners, Caddy's automatic HTTPS as `tls = "acme"` or `"internal"`),
//! and every directive goes through the table (`caddy_table`).
//!
//! Caddy runs a site's directives in a fixed order, not the file's
//! (`redir` before `rewrite` before `handle` before `respond` before
//! `reverse_proxy`...). The walk sorts them the same way first, so the
//! rules it makes (`redir`, `rewrite`, `respond`) land in the order Caddy
//! would try them. Options are scoped the way hayate scopes them: a
//! directive for all requests sets the site's, one for a path prefix
//! (`reverse_proxy /api/* ...`, `handle /api/* { ... }`) a route's.

use crate::caddy_matchers::{self as matchers, Matcher, Named, Scope};
use crate::caddy_parse::{Caddyfile, SiteBlock};
use crate::caddy_table;
use crate::caddy_values::Address;
use crate::hayate_toml::{Config, Keys, Route, Site, Value};
use crate::nginx_parse::Directive;
use crate::nginx_table::How;
use crate::report::{Kind, Note};

/// What a directive's translation says: `Ok(None)` carried as the table
/// says, `Ok(Some(t))` carried with the difference `t`, `Err(t)` not
/// carried because `t`.
pub type Applied = Result<Option<String>, String>;

/// Caddy's directive order (caddyconfig/httpcaddyfile/directives.go,
/// v2.8): a site's directives run in this order whatever the file's.
pub const ORDER: &[&str] = &[
    "tracing",
    "map",
    "vars",
    "fs",
    "root",
    "log_append",
    "skip_log",
    "log_name",
    "header",
    "copy_response_headers",
    "request_body",
    "redir",
    "method",
    "rewrite",
    "uri",
    "try_files",
    "basic_auth",
    "forward_auth",
    "request_header",
    "encode",
    "push",
    "intercept",
    "templates",
    "invoke",
    "handle",
    "handle_path",
    "route",
    "abort",
    "error",
    "copy_response",
    "respond",
    "metrics",
    "reverse_proxy",
    "php_fastcgi",
    "file_server",
    "acme_server",
];

/// Where a directive runs in Caddy's order (unknown ones last; a
/// directive's old spelling where its new one runs).
fn order(name: &str) -> usize {
    let name = match name {
        "basicauth" => "basic_auth",
        "log_skip" => "skip_log",
        other => other,
    };
    ORDER.iter().position(|o| *o == name).unwrap_or(ORDER.len())
}

/// The state of one import.
#[derive(Debug, Default)]
pub struct Caddy {
    /// The config being built.
    pub config: Config,
    /// The report.
    pub notes: Vec<Note>,
    /// Files written beside the config (htpasswd files of `basic_auth`):
    /// name, content.
    pub files: Vec<(String, String)>,
    /// The site being translated.
    pub site: usize,
    /// The route of the `handle` block being translated.
    pub route: Option<usize>,
    /// Inside `handle_path`: paths are seen without the route's prefix.
    pub stripped: bool,
    /// The path prefixes of the `handle` blocks beside the one being
    /// translated.
    pub handle_prefixes: Vec<String>,
    /// Inside a `handle` without a matcher beside others: its rules hold
    /// only outside their prefixes (Caddy's handle blocks exclude each
    /// other).
    pub outside: Vec<String>,
    /// The site's named matchers.
    pub sets: Vec<Named>,
    /// Global options that change how sites are read.
    pub http_port: u16,
    /// The HTTPS port (`https_port`).
    pub https_port: u16,
    /// `auto_https`: off (no certificates, no redirects), or its
    /// disable_redirects/disable_certs forms.
    pub auto_certs: bool,
    /// Plain HTTP is redirected to HTTPS.
    pub auto_redirects: bool,
    /// `local_certs`: every site's certificates from the local CA.
    pub local_certs: bool,
    /// `servers { protocols }` left HTTP/3 out.
    pub no_http3: bool,
    /// Listeners: (https, port).
    pub listeners: Vec<(bool, u16)>,
    /// A plain-HTTP site answers with content of its own (so plain HTTP is
    /// not redirected to HTTPS wholesale).
    pub plain_content: bool,
}

impl Caddy {
    /// Adds a report line.
    pub fn note(&mut self, d: &Directive, kind: Kind, what: impl Into<String>) {
        self.notes.push(Note {
            pos: d.pos.clone(),
            directive: d.name.clone(),
            kind,
            what: what.into(),
        });
    }

    /// The site being translated.
    pub fn site_mut(&mut self) -> &mut Site {
        &mut self.config.sites[self.site]
    }

    /// The options a directive with matcher `m` sets: the site's, the
    /// current `handle` route's, or the route of the matcher's prefix
    /// (made when missing); with the difference to report.
    pub fn keys_for(
        &mut self,
        d: &Directive,
        m: &Matcher,
    ) -> Result<(&mut Keys, Option<&'static str>), String> {
        let scope = matchers::scope(m)?;
        let site = self.site;
        match (self.route, scope) {
            (Some(r), Scope::Site) => Ok((&mut self.config.sites[site].routes[r].keys, None)),
            (Some(_), Scope::Prefix(..)) => Err(
                "a path matcher inside handle: hayate's routes do not nest (one prefix each)"
                    .into(),
            ),
            // The handle for what the others do not take: the route of
            // "/", which hayate picks when no longer prefix matches (the
            // site's own options would reach the other routes too).
            (None, Scope::Site) if !self.outside.is_empty() => {
                let r = self.route_for("/", d);
                Ok((&mut self.config.sites[site].routes[r].keys, None))
            }
            (None, Scope::Site) => Ok((&mut self.config.sites[site].keys, None)),
            (None, Scope::Prefix(prefix, difference)) => {
                let r = self.route_for(&prefix, d);
                Ok((&mut self.config.sites[site].routes[r].keys, difference))
            }
        }
    }

    /// The site's route for `prefix`, made when missing.
    pub fn route_for(&mut self, prefix: &str, d: &Directive) -> usize {
        let site = self.site_mut();
        if let Some(r) = site.routes.iter().position(|r| r.prefix == prefix) {
            return r;
        }
        site.routes.push(Route {
            from: d.pos.to_string(),
            prefix: prefix.into(),
            keys: Keys::default(),
        });
        site.routes.len() - 1
    }

    /// Adds a `[[site.rule]]` acting as `action` for requests matching
    /// `m` (and the current `handle` route's prefix).
    pub fn rule(&mut self, d: &Directive, m: &Matcher, action: Keys) -> Result<(), String> {
        let mut keys = matchers::conditions(m)?;
        if !self.outside.is_empty() {
            if keys.get("match").is_some() {
                return Err(
                    "a path matcher in the handle for everything else: a hayate rule has one \
                     match, which this rule needs for the other handles' prefixes"
                        .into(),
                );
            }
            let alternatives: Vec<String> = self.outside.iter().map(|p| regex::escape(p)).collect();
            keys.set(
                "match",
                Value::Str(format!("!^(?:{})", alternatives.join("|"))),
            );
        }
        if let Some(r) = self.route {
            if self.stripped && keys.get("match").is_some() {
                return Err(
                    "a path matcher inside handle_path sees the path without its prefix; \
                     hayate's rules see the whole path"
                        .into(),
                );
            }
            let prefix = self.site_mut().routes[r].prefix.clone();
            if keys.get("prefix").is_none() && prefix != "/" {
                keys.set("prefix", Value::Str(prefix));
            }
        }
        for (k, v) in action.0 {
            keys.set(&k, v);
        }
        let from = d.pos.to_string();
        self.site_mut().rules.push((from, keys));
        Ok(())
    }

    /// Sets a global option, refusing a second, different value.
    pub fn global(&mut self, key: &str, value: Value) -> Result<(), String> {
        if let Some(old) = self.config.top.get(key) {
            if *old != value {
                return Err(format!(
                    "{key} is global in hayate, and another place set it to {old:?}"
                ));
            }
        }
        self.config.top.set(key, value);
        Ok(())
    }
}

/// Translates a parsed Caddyfile.
pub fn translate(file: &Caddyfile) -> Caddy {
    let mut t = Caddy {
        http_port: 80,
        https_port: 443,
        auto_certs: true,
        auto_redirects: true,
        ..Default::default()
    };
    for d in &file.global {
        apply(&mut t, d, caddy_table::GLOBAL_ROWS, "a global option");
    }
    for block in &file.sites {
        site(&mut t, block);
    }
    finish(&mut t);
    // The report in the order of the file (directives were carried over in
    // Caddy's order), a snippet's lines where it was written.
    t.notes.sort_by(|a, b| {
        (&a.pos.file, a.pos.line, a.pos.col).cmp(&(&b.pos.file, b.pos.line, b.pos.col))
    });
    t
}

/// One site block.
fn site(t: &mut Caddy, block: &SiteBlock) {
    let mut hosts: Vec<String> = Vec::new();
    let (mut https, mut plain) = (false, false);
    let mut internal = true;
    let at = Directive {
        name: "site".into(),
        args: block.addresses.clone(),
        block: None,
        pos: block.pos.clone(),
    };
    for a in &block.addresses {
        let address = match Address::parse(a) {
            Ok(address) => address,
            Err(e) => {
                t.note(&at, Kind::NotCarried, e);
                continue;
            }
        };
        if !address.path.is_empty() && address.path != "/" && address.path != "/*" {
            t.note(
                &at,
                Kind::NotCarried,
                format!("{a}: a path in a site address (hayate's sites are names; use a route)"),
            );
        }
        let is_https = address.is_https(t.http_port);
        let port = address
            .port
            .unwrap_or(if is_https { t.https_port } else { t.http_port });
        if !t.listeners.contains(&(is_https, port)) {
            t.listeners.push((is_https, port));
        }
        https |= is_https;
        plain |= !is_https;
        internal &= address.host.is_empty() || address.is_internal();
        if !address.host.is_empty() && !hosts.contains(&address.host) {
            hosts.push(address.host);
        }
    }
    // hayate picks a site by Host alone: a second block for the same names
    // (http:// and https:// written apart) joins the first.
    let same = t
        .config
        .sites
        .iter()
        .position(|s| !hosts.is_empty() && s.hosts == hosts);
    t.site = match same {
        Some(s) => {
            t.note(
                &at,
                Kind::Differs,
                "hayate picks a site by Host alone: this block joins the earlier one for the same names",
            );
            s
        }
        None => {
            t.config.sites.push(Site {
                from: block.pos.to_string(),
                hosts: hosts.clone(),
                ..Default::default()
            });
            t.config.sites.len() - 1
        }
    };
    if https && t.auto_certs && !hosts.is_empty() {
        let tls = if internal || t.local_certs {
            "internal"
        } else {
            "acme"
        };
        t.site_mut().keys.set("tls", Value::Str(tls.into()));
    }
    t.sets = matchers::named(&block.body);
    t.route = None;
    t.stripped = false;
    directives(t, &block.body);
    if plain && !https {
        let only_redirects = block
            .body
            .iter()
            .all(|d| d.name == "redir" || d.name.starts_with('@') || d.name == "log");
        t.plain_content |= !only_redirects;
    }
}

/// A block's directives (a site's, or a `handle`'s), in Caddy's order.
pub fn directives(t: &mut Caddy, body: &[Directive]) {
    let mut sorted: Vec<&Directive> = body.iter().filter(|d| !d.name.starts_with('@')).collect();
    sorted.sort_by_key(|d| order(&d.name));
    let prefixes: Vec<String> = sorted
        .iter()
        .filter(|d| d.name == "handle" || d.name == "handle_path")
        .filter_map(|d| {
            let (m, _) = matchers::split(d, &t.sets).ok()?;
            match matchers::scope(&m).ok()? {
                Scope::Prefix(p, _) => Some(p),
                Scope::Site => None,
            }
        })
        .collect();
    let outer = std::mem::replace(&mut t.handle_prefixes, prefixes);
    for d in sorted {
        apply(t, d, caddy_table::ROWS, "a directive");
    }
    t.handle_prefixes = outer;
}

/// Carries one directive over through `rows`, reporting what the row or
/// its translation says.
fn apply(t: &mut Caddy, d: &Directive, rows: &[caddy_table::Row], what: &str) {
    let Some(row) = rows.iter().find(|r| r.directive == d.name) else {
        let why = match d.name.as_str() {
            "import" => "left unexpanded".to_string(),
            _ => format!("{what} hayate does not know"),
        };
        t.note(d, Kind::NotSupported, why);
        return;
    };
    match (row.how, row.apply) {
        (How::NotNeeded(why), _) => t.note(d, Kind::NotNeeded, why),
        (How::Unsupported(why), _) => t.note(d, Kind::NotSupported, why),
        (how, Some(apply)) => match apply(t, d) {
            Ok(None) => {
                if let How::Differs(text) = how {
                    t.note(d, Kind::Differs, text);
                }
            }
            Ok(Some(difference)) => t.note(d, Kind::Differs, difference),
            Err(why) => t.note(d, Kind::NotCarried, why),
        },
        (_, None) => {}
    }
}

/// The listeners, and what the sites together decide.
fn finish(t: &mut Caddy) {
    let any_https = t.listeners.iter().any(|(https, _)| *https);
    if any_https && t.auto_redirects && !t.listeners.contains(&(false, t.http_port)) {
        // Caddy answers plain HTTP on its HTTP port with a redirect.
        t.listeners.push((false, t.http_port));
    }
    if t.listeners.is_empty() {
        // Caddy's default: HTTPS on 443 for names, else 80. No site.
        t.listeners.push((false, t.http_port));
    }
    for (https, port) in t.listeners.clone() {
        let listen = if https {
            format!("https://0.0.0.0:{port}")
        } else {
            format!("0.0.0.0:{port}")
        };
        t.config.top.push("listen", listen);
    }
    if any_https && (!t.auto_redirects || t.plain_content) {
        t.config.top.set("https_redirect", Value::Bool(false));
    }
    if any_https && !t.no_http3 {
        // Caddy serves HTTP/3 beside HTTP/1.1 and HTTP/2 by default.
        t.config.top.set("http3", Value::Bool(true));
    }
}
