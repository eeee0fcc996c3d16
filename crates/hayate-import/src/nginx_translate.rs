//! The walk over an nginx configuration: `http`, `server`, `location` and
//! `upstream` blocks become hayate's top level, sites, routes, rules and
//! groups; every other directive goes through the table
//! (`nginx_table::ROWS`), which says how it maps and does it.
//!
//! nginx picks a location in this order: `=` exact, then the longest
//! prefix (done if it is `^~`), then the regexes in file order, then that
//! longest prefix. hayate runs its rules first, in order, then picks the
//! longest prefix route. So exact and regex locations that answer by
//! themselves (`return`, `rewrite`, `deny all`) become rules, exact ones
//! first; the PHP regex location (`\.php$` with `fastcgi_pass`) becomes
//! the site's `fastcgi`, which runs `.php` scripts under every route;
//! prefix locations become routes (`nginx_locations` does locations).

use crate::hayate_toml::{Config, Keys, Site, Upstream, Value};
use crate::nginx_apply;
use crate::nginx_locations::{self, Match};
use crate::nginx_parse::{Directive, Pos};
use crate::nginx_table::{self, How};
use crate::nginx_upstreams;

pub use crate::report::{Kind, Note};

/// What directives set: the top level, a site, or a route of a site.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The `http` block: global options and route defaults.
    Top,
    /// A `server` block.
    Site(usize),
    /// A prefix `location` of a server.
    Route(usize, usize),
    /// The PHP location of a server (`location ~ \.php$`): only the FastCGI
    /// directives mean something there.
    Php(usize),
    /// An exact or regex location, carried as rules with this condition.
    Rules(usize),
}

/// The state of one import.
#[derive(Debug, Default)]
pub struct Translation {
    /// The config being built.
    pub config: Config,
    /// The report.
    pub notes: Vec<Note>,
    /// Where directives go now.
    pub target: Option<Target>,
    /// Conditions of the rules made for exact and regex locations, with
    /// the phase their rules run in (1: exact, 2: regex), by
    /// `Target::Rules` index.
    pub conditions: Vec<(Keys, usize)>,
    /// `limit_req_zone`s: name -> (rate, key).
    pub req_zones: Vec<(String, String, String)>,
    /// `limit_conn_zone`s: name -> key.
    pub conn_zones: Vec<(String, String)>,
    /// Named locations of the server being translated.
    pub named: Vec<Directive>,
    /// The prefixes of the server's own prefix locations (`/p`, `^~ /p`).
    pub prefixes: Vec<String>,
    /// Locations of the server being translated that an `auth_request`
    /// names: the auth service's, carried as `forward_auth`'s URL.
    pub auth_locations: Vec<Directive>,
    /// `auth_request_set $var $upstream_http_NAME`: (`$var`, the auth
    /// answer's field name).
    pub auth_vars: Vec<(String, String)>,
    /// The first server block answering plain HTTP with content of its own
    /// (not only a redirect to HTTPS).
    pub plain_content: Option<Directive>,
    /// Whether a server block only redirected plain HTTP to HTTPS.
    pub redirect_only: bool,
    /// The server's PHP location runs its front controller alone
    /// (`~ ^/index\.php(/|$)`).
    pub front_controller_only: Option<Directive>,
    /// The rule condition of the PHP location being translated.
    pub php_condition: Option<Keys>,
    /// Named locations a try_files of the server being translated used.
    pub named_used: Vec<String>,
    /// The server being translated needs a FastCGI front controller
    /// (try_files ... /index.php).
    pub wants_fastcgi: Option<Pos>,
    /// Upstream groups `fastcgi_pass` named: their addresses went into
    /// `fastcgi`, not into an HTTP `[[upstream]]`.
    pub fastcgi_groups: Vec<String>,
    /// Rules of the current server, by the order nginx checks them:
    /// server level, exact locations, regex locations.
    pub rule_phases: [Vec<(String, Keys)>; 3],
}

impl Translation {
    /// Adds a report line.
    pub fn note(&mut self, d: &Directive, kind: Kind, what: impl Into<String>) {
        self.notes.push(Note {
            pos: d.pos.clone(),
            directive: d.name.clone(),
            kind,
            what: what.into(),
        });
    }

    fn target(&self) -> Target {
        self.target.unwrap_or(Target::Top)
    }

    /// The options of the current target (a site's for rules and PHP).
    pub fn keys(&mut self) -> &mut Keys {
        match self.target() {
            Target::Top => &mut self.config.top,
            Target::Site(s) | Target::Php(s) => &mut self.config.sites[s].keys,
            Target::Route(s, r) => &mut self.config.sites[s].routes[r].keys,
            Target::Rules(_) => unreachable!("rule targets take rules only"),
        }
    }

    /// The site being translated.
    pub fn site(&mut self) -> Option<&mut Site> {
        match self.target() {
            Target::Top => None,
            Target::Site(s) | Target::Php(s) | Target::Route(s, _) => self.config.sites.get_mut(s),
            Target::Rules(_) => self.config.sites.last_mut(),
        }
    }

    /// Whether directives now go to option keys (not to rules only).
    pub fn takes_options(&self) -> bool {
        matches!(
            self.target(),
            Target::Top | Target::Site(_) | Target::Route(..)
        )
    }

    /// Whether the target is the PHP location.
    pub fn in_php(&self) -> bool {
        matches!(self.target(), Target::Php(_))
    }

    /// Adds a rule whose action is `action`, under the current location's
    /// condition, in the phase nginx would run it.
    pub fn rule(&mut self, d: &Directive, action: Keys) -> Result<(), String> {
        let (phase, mut keys) = match self.target() {
            Target::Top => return Err("at the http level: put it in a server".into()),
            Target::Site(_) => (0, Keys::default()),
            Target::Route(s, r) => {
                let prefix = self.config.sites[s].routes[r].prefix.clone();
                (2, Match::Prefix(prefix, false).condition())
            }
            Target::Php(_) => return Err(NOT_IN_PHP.into()),
            Target::Rules(i) => {
                let (cond, phase) = self.conditions[i].clone();
                (phase, cond)
            }
        };
        for (k, v) in action.0 {
            if k == "match" && keys.get("match").is_some() {
                return Err(
                    "its own regex inside a regex or exact location: a hayate rule has one match"
                        .into(),
                );
            }
            keys.set(&k, v);
        }
        // A prefix condition with its own rewrite regex stays one rule.
        self.rule_phases[phase].push((d.pos.to_string(), keys));
        Ok(())
    }
}

/// The root nginx serves where a server names none (Debian's build:
/// prefix /usr/share/nginx, `root html`).
pub const NGINX_DEFAULT_ROOT: &str = "/usr/share/nginx/html";

/// The key `listen ... default_server` marks its site with until the
/// server block is done (never written out).
pub const DEFAULT_MARK: &str = "__default_server";

/// Directives whose rows are applied without arguments.
const TAKE_NO_ARGUMENTS: &[&str] = &[
    "internal",
    "least_conn",
    "ip_hash",
    "random",
    "server",
    "location",
];

/// What a regex or exact location can carry: rules (and what is refused
/// with its own reason).
const IN_RULES: &[&str] = &[
    "return",
    "rewrite",
    "allow",
    "deny",
    "access_log",
    "error_log",
];

/// What the PHP location can carry: hayate's FastCGI settings.
const IN_PHP: &[&str] = &[
    "internal",
    "fastcgi_pass",
    "fastcgi_param",
    "fastcgi_index",
    "fastcgi_split_path_info",
    "fastcgi_intercept_errors",
    "fastcgi_hide_header",
    "try_files",
    "set",
    "access_log",
    "error_log",
];

/// Why other directives mean nothing in a regex or exact location.
pub const NOT_IN_RULES: &str = "inside a regex or exact location: hayate routes are prefixes, \
     and rules carry only return, rewrite and deny all";

/// Why most directives mean nothing inside the PHP location.
pub const NOT_IN_PHP: &str =
    "inside the PHP location: hayate runs scripts with its own FastCGI settings";

/// Translates parsed nginx directives (the main context).
pub fn translate(main: &[Directive]) -> Translation {
    let mut t = Translation::default();
    // A file of server blocks (a sites-available file) is read as the
    // inside of http, as nginx.conf includes it.
    let bare: Vec<Directive> = main
        .iter()
        .filter(|d| {
            matches!(
                d.name.as_str(),
                "server" | "upstream" | "limit_req_zone" | "limit_conn_zone"
            )
        })
        .cloned()
        .collect();
    if !bare.is_empty() {
        http(&mut t, &bare);
    }
    for d in main {
        t.target = Some(Target::Top);
        match d.name.as_str() {
            "http" => http(&mut t, d.block.as_deref().unwrap_or_default()),
            "server" | "upstream" | "limit_req_zone" | "limit_conn_zone" => {}
            _ => directive(&mut t, d),
        }
    }
    https_redirect(&mut t);
    // The report in reading order: files as nginx reads them (an include
    // where it stands), each by line; upstream blocks and server ends were
    // translated out of that order.
    let mut files = Vec::new();
    reading_order(main, &mut files);
    t.notes.sort_by_key(|n| {
        let file = files.iter().position(|f| *f == n.pos.file);
        (file, n.pos.line)
    });
    let fastcgi_only = std::mem::take(&mut t.fastcgi_groups);
    t.config
        .upstreams
        .retain(|u| !fastcgi_only.contains(&u.name));
    t
}

/// The files of `directives` in the order nginx reads them.
fn reading_order(directives: &[Directive], files: &mut Vec<std::path::PathBuf>) {
    for d in directives {
        if !files.contains(&d.pos.file) {
            files.push(d.pos.file.clone());
        }
        if let Some(block) = &d.block {
            reading_order(block, files);
        }
    }
}

/// hayate redirects plain HTTP to HTTPS for every site once it has an
/// https listener (`https_redirect`, global); nginx only where a server
/// says so. A config that serves content on plain HTTP keeps doing so
/// (https_redirect = false) unless it also has redirecting servers, which
/// the one global setting cannot honour both ways: then it is reported.
fn https_redirect(t: &mut Translation) {
    let tls = match t.config.top.get("listen") {
        Some(Value::List(l)) => l.iter().any(|a| a.starts_with("https://")),
        _ => false,
    };
    let Some(server) = t.plain_content.take() else {
        return;
    };
    if !tls {
        return;
    }
    if t.redirect_only {
        t.note(
            &server,
            Kind::Differs,
            "hayate redirects plain HTTP to HTTPS for every site (https_redirect, global, as \
             the redirecting server block here asks): this server's plain-HTTP answers become \
             redirects",
        );
    } else {
        t.config.top.set("https_redirect", Value::Bool(false));
    }
}

fn http(t: &mut Translation, body: &[Directive]) {
    // Upstreams and zones first: servers name them, wherever they are.
    for d in body {
        match d.name.as_str() {
            "upstream" => upstream(t, d),
            "limit_req_zone" | "limit_conn_zone" => {
                t.target = Some(Target::Top);
                directive(t, d)
            }
            _ => {}
        }
    }
    for d in body {
        t.target = Some(Target::Top);
        match d.name.as_str() {
            "upstream" | "limit_req_zone" | "limit_conn_zone" => {}
            "server" => server(t, d),
            _ => directive(t, d),
        }
    }
}

/// One directive through the table.
pub fn directive(t: &mut Translation, d: &Directive) {
    let Some(row) = nginx_table::row(&d.name) else {
        t.note(d, Kind::NotSupported, "hayate has no equivalent");
        return;
    };
    match row.how {
        How::NotNeeded(why) => t.note(d, Kind::NotNeeded, why),
        How::Unsupported(why) => t.note(d, Kind::NotSupported, why),
        How::Translated | How::Differs(_) => {
            let Some(apply) = row.apply else { return };
            if d.args.is_empty() && !TAKE_NO_ARGUMENTS.contains(&row.directive) {
                // nginx refuses these; so does the importer, by name.
                return t.note(d, Kind::NotCarried, "no arguments");
            }
            let placed = match t.target() {
                Target::Rules(_) => IN_RULES.contains(&row.directive),
                Target::Php(_) => IN_PHP.contains(&row.directive),
                _ => true,
            };
            if !placed {
                let why = match t.target() {
                    Target::Php(_) => NOT_IN_PHP,
                    _ => NOT_IN_RULES,
                };
                return t.note(d, Kind::NotCarried, why);
            }
            match apply(t, d) {
                Ok(None) => {
                    if let How::Differs(text) = row.how {
                        t.note(d, Kind::Differs, text)
                    }
                }
                Ok(Some(text)) => t.note(d, Kind::Differs, text),
                Err(text) => t.note(d, Kind::NotCarried, text),
            }
        }
    }
}

fn upstream(t: &mut Translation, d: &Directive) {
    let mut group = Upstream {
        from: d.pos.to_string(),
        name: d.arg(0).to_string(),
        members: Vec::new(),
    };
    for inner in d.block.as_deref().unwrap_or_default() {
        t.target = Some(Target::Top);
        if inner.name == "server" {
            match nginx_upstreams::upstream_server(t, inner) {
                Ok(Some(member)) => group.members.push(member),
                Ok(None) => {}
                Err(text) => t.note(inner, Kind::NotCarried, text),
            }
        } else {
            directive(t, inner);
        }
    }
    if group.members.is_empty() {
        t.note(d, Kind::NotCarried, "no member left");
        return;
    }
    t.config.upstreams.push(group);
}

/// `server_name`s of a plain-HTTP server that only sends everyone to
/// HTTPS: hayate does that itself (https_redirect).
fn only_redirects_to_https(body: &[Directive]) -> bool {
    let redirect = |d: &Directive| {
        d.name == "return"
            && matches!(d.arg(0), "301" | "302" | "307" | "308")
            && d.arg(1).starts_with("https://")
            && d.arg(1).ends_with("$request_uri")
    };
    let listens_plain = body
        .iter()
        .filter(|d| d.name == "listen")
        .all(|d| !d.args.iter().any(|a| a == "ssl"));
    let mut redirects = false;
    for d in body {
        match d.name.as_str() {
            "listen" | "server_name" => {}
            "return" if redirect(d) => redirects = true,
            "location" if d.args == ["/"] => {
                let inner = d.block.as_deref().unwrap_or_default();
                if inner.len() == 1 && redirect(&inner[0]) {
                    redirects = true
                } else {
                    return false;
                }
            }
            _ => return false,
        }
    }
    listens_plain && redirects
}

fn server(t: &mut Translation, d: &Directive) {
    let body = d.block.as_deref().unwrap_or_default();
    if only_redirects_to_https(body) {
        for inner in body.iter().filter(|i| i.name == "listen") {
            t.target = Some(Target::Top);
            let _ = nginx_apply::listen_address(t, inner);
        }
        t.note(
            d,
            Kind::NotNeeded,
            "this server only redirects to HTTPS, which hayate does for every \
             plain-HTTP listener (https_redirect; with 308, which keeps the method)",
        );
        t.redirect_only = true;
        return;
    }
    // A server with no listen takes nginx's default, *:80.
    let tls: Vec<bool> = body
        .iter()
        .filter(|l| l.name == "listen")
        .map(|l| l.args.iter().any(|a| a == "ssl"))
        .collect();
    let plain = tls.is_empty() || tls.contains(&false);
    let scheme = match (plain, tls.contains(&true)) {
        (true, false) => Some("http"),
        (false, true) => Some("https"),
        _ => None,
    };
    if plain && t.plain_content.is_none() {
        t.plain_content = Some(Directive {
            block: None,
            ..d.clone()
        });
    }
    let index = t.config.sites.len();
    t.config.sites.push(Site {
        from: d.pos.to_string(),
        scheme,
        ..Default::default()
    });
    t.named = body
        .iter()
        .filter(|l| l.name == "location" && l.arg(0).starts_with('@'))
        .cloned()
        .collect();
    t.prefixes = body
        .iter()
        .filter(|l| l.name == "location")
        .filter_map(|l| match Match::parse(l) {
            Ok(Match::Prefix(p, _)) => Some(p),
            _ => None,
        })
        .collect();
    t.auth_locations = nginx_upstreams::auth_locations(body);
    t.auth_vars.clear();
    t.wants_fastcgi = None;
    t.rule_phases = Default::default();
    for inner in body {
        t.target = Some(Target::Site(index));
        if inner.name == "location" {
            nginx_locations::location(t, index, inner, None);
        } else {
            directive(t, inner);
        }
    }
    for named in std::mem::take(&mut t.named) {
        if !t.named_used.contains(&named.args[0]) {
            t.note(&named, Kind::NotCarried, "no try_files names it (error_page and X-Accel-Redirect to a named location are not carried)");
        }
    }
    t.named_used.clear();
    if let Some(php) = t.front_controller_only.take() {
        let refuses_scripts = t.rule_phases[2].iter().any(|(_, r)| {
            matches!(r.get("match"), Some(Value::Str(m)) if m.contains(".php"))
                && r.get("respond").is_some()
                && r.get("file").is_none()
        });
        if !refuses_scripts {
            t.note(
                &php,
                Kind::Differs,
                "hayate runs every .php file under the root through FastCGI (fastcgi_extensions), \
                 where this location runs index.php only (nginx serves other .php files as files)",
            );
        }
    }
    let phases = std::mem::take(&mut t.rule_phases);
    let site = &mut t.config.sites[index];
    if site.keys.get(DEFAULT_MARK).is_some() {
        site.keys.remove(DEFAULT_MARK);
        if !site.hosts.is_empty() {
            t.notes.push(Note {
                pos: d.pos.clone(),
                directive: "listen".into(),
                kind: Kind::Differs,
                what: "default_server: hayate's default site is the \
                       one without hosts; this one answers its own names only"
                    .into(),
            });
        }
    }
    let site = &mut t.config.sites[index];
    site.rules = phases.into_iter().flatten().collect();
    let hides_dotfiles = body
        .iter()
        .any(|l| l.name == "location" && l.args.iter().any(|a| a.contains("/\\.")));
    let has_files =
        site.keys.get("root").is_some() || site.routes.iter().any(|r| r.keys.get("root").is_some());
    if !hides_dotfiles && has_files {
        t.notes.push(Note {
            pos: d.pos.clone(),
            directive: "server".into(),
            kind: Kind::Differs,
            what: "nginx serves files whose name starts with a dot (.env, .git/), hayate hides \
                   them (404; dotfiles = true serves them), .well-known excepted"
                .into(),
        });
    }
    let serves = ["root", "proxy", "fastcgi"];
    if site.routes.is_empty() && !serves.iter().any(|k| site.keys.get(k).is_some()) {
        // nginx serves its compiled-in `root html` (under its prefix).
        site.keys.set("root", Value::Str(NGINX_DEFAULT_ROOT.into()));
        t.notes.push(Note {
            pos: d.pos.clone(),
            directive: "server".into(),
            kind: Kind::Differs,
            what: format!(
                "no root: nginx serves its compiled-in one, which hayate names: {NGINX_DEFAULT_ROOT} (Debian's)"
            ),
        });
    }
    if let Some(pos) = t.wants_fastcgi.take() {
        if site.keys.get("fastcgi").is_none() {
            t.notes.push(Note {
                pos,
                directive: "try_files".into(),
                kind: Kind::NotCarried,
                what: "it ends at a PHP front controller, and this server has no \
                       fastcgi_pass location"
                    .into(),
            });
        }
    }
    merge_same_hosts(t, d, index);
}

/// Adds `scheme` as a condition of `rule` unless the rule came from both
/// blocks, names a scheme of its own, or the block had both.
fn keep_to_scheme(rule: &mut (String, Keys), in_both: bool, scheme: Option<&'static str>) {
    if let (false, Some(scheme), None) = (in_both, scheme, rule.1.get("scheme")) {
        rule.1.set("scheme", Value::Str(scheme.into()));
    }
}

/// nginx can serve the same names from two server blocks on different
/// ports (80 and 443); hayate picks a site by Host alone, so they become
/// one site.
fn merge_same_hosts(t: &mut Translation, d: &Directive, index: usize) {
    let hosts = t.config.sites[index].hosts.clone();
    let Some(first) = t.config.sites[..index]
        .iter()
        .position(|s| s.hosts == hosts)
    else {
        return;
    };
    let later = t.config.sites.remove(index);
    let site = &mut t.config.sites[first];
    let (mut kept, mut widened) = (Vec::new(), Vec::new());
    for (k, v) in later.keys.0 {
        match site.keys.get(&k) {
            Some(old) if *old != v => kept.push(k),
            Some(_) => {}
            None => {
                // Certificates only ever serve the TLS listeners.
                if !k.starts_with("tls_") {
                    widened.push(k.clone());
                }
                site.keys.set(&k, v);
            }
        }
    }
    // A rule of one block only (the plain one's redirect to HTTPS) keeps
    // to that block's scheme: on the other's listeners it would loop.
    let in_both: Vec<bool> = site
        .rules
        .iter()
        .map(|r| later.rules.iter().any(|l| l.1 == r.1))
        .collect();
    for (rule, both) in site.rules.iter_mut().zip(in_both) {
        keep_to_scheme(rule, both, site.scheme);
    }
    for mut rule in later.rules {
        if !site.rules.iter().any(|r| r.1 == rule.1) {
            keep_to_scheme(&mut rule, false, later.scheme);
            site.rules.push(rule);
        }
    }
    if site.scheme != later.scheme {
        site.scheme = None;
    }
    for route in later.routes {
        match site.routes.iter().find(|r| r.prefix == route.prefix) {
            Some(r) if r.keys != route.keys => kept.push(format!("the route {}", route.prefix)),
            Some(_) => {}
            None => site.routes.push(route),
        }
    }
    site.from = format!("{} and {}", site.from, later.from);
    let mut said = Vec::new();
    if !kept.is_empty() {
        said.push(format!(
            "the server block at {} has these names too, and its {} is kept where this one differs",
            site.from.split(" and ").next().unwrap_or_default(),
            kept.join(", ")
        ));
    }
    if !widened.is_empty() {
        said.push(format!(
            "its {} now apply on every listener",
            widened.join(", ")
        ));
    }
    if !said.is_empty() {
        t.note(
            d,
            Kind::Differs,
            format!("hayate has one site per name: {}", said.join("; ")),
        );
    }
}
