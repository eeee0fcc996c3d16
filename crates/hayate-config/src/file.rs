//! The config file loader. It walks the TOML document itself (instead of
//! serde) so that every error names its line and key, and any key the
//! option table does not know is an error.

use std::path::{Path, PathBuf};

use std::cell::RefCell;
use std::collections::HashMap;

use toml::de::{DeTable, DeValue};
use toml::Spanned;

use crate::app::AppRef;
use crate::rules::{parse_rule, Rule};
use crate::table::{GlobalLayer, RouteLayer, GLOBAL_OPTIONS, ROUTE_OPTIONS};
use crate::values::{AcmeChallenge, ClientAuth, OptValue, ProxySpec, TlsMode};
use crate::{Config, ConfigError, ConfigErrors, Overrides, Route, Site, SiteTls};

/// Parses and validates `text`, the contents of the config file at `path`,
/// then applies `overrides` (environment and CLI).
///
/// Every error of the file is reported at once, in file order: a value
/// that does not parse or a key that is not known is noted and the walk
/// goes on; an error of structure (a route without a prefix, say) ends it.
pub fn load_file(path: &Path, text: &str, overrides: &Overrides) -> Result<Config, ConfigErrors> {
    let mut cx = Cx {
        path,
        text,
        groups: HashMap::new(),
        noted: RefCell::new(Vec::new()),
    };
    let walked = walk(&mut cx, overrides);
    let mut errors = cx.noted.into_inner();
    match walked {
        Ok(config) if errors.is_empty() => return Ok(config),
        Ok(_) => {}
        Err(e) => errors.push(e),
    }
    errors.sort_by_key(|e| e.line);
    errors.dedup();
    Err(ConfigErrors(errors))
}

fn walk(cx: &mut Cx<'_>, overrides: &Overrides) -> Result<Config, ConfigError> {
    let (path, text) = (cx.path, cx.text);
    let doc = DeTable::parse(text).map_err(|e| syntax_error(path, text, &e))?;

    let mut global = GlobalLayer::default();
    let mut top_route = RouteLayer::default();
    let mut site_tables = Vec::new();
    let mut top_rules = Vec::new();
    let mut apps = Vec::new();
    let mut single_app = false;
    for (key, value) in doc.get_ref() {
        let k = key.get_ref().as_ref();
        if k == "app" {
            single_app = matches!(value.get_ref(), DeValue::Table(_));
            apps = cx.apps(key, value, &mut global)?;
            continue;
        }
        if k == "site" {
            site_tables = cx.tables(key, value)?;
            continue;
        }
        if k == "rule" {
            top_rules = cx.rules(key, value)?;
            continue;
        }
        if k == "upstream" {
            for table in cx.tables(key, value)? {
                let (name, members) = cx.upstream(&table)?;
                if cx.groups.insert(name.clone(), members).is_some() {
                    return Err(cx.err(
                        table.span().start,
                        "name",
                        format!("two [[upstream]] groups named {name:?}"),
                    ));
                }
            }
            continue;
        }
        let set = global.set_toml(k, value.get_ref()).and_then(|known| {
            if known {
                Ok(true)
            } else {
                top_route.set_toml(k, value.get_ref())
            }
        });
        match set {
            Ok(true) => {}
            Ok(false) => cx.note(cx.unknown(key, &["site", "upstream", "app", "rule"])),
            Err(msg) => cx.note(cx.err(value.span().start, k, msg)),
        }
    }
    if single_app && top_route.app.is_none() {
        // Files first (where a root is set), the app for the rest.
        top_route.app = Some(AppRef::Only);
    }
    cx.anchor(&mut top_route);
    global.override_with(&overrides.global);
    if overrides
        .route
        .cache
        .as_ref()
        .is_some_and(|c| !c.by_prefix.is_empty())
    {
        return Err(ConfigError {
            file: Some(path.into()),
            line: None,
            key: Some("--cache".into()),
            message: "PREFIX=SPEC is for use without a config file: give that prefix its own \
                      [[site.route]] with cache = ..."
                .into(),
        });
    }
    if let Some((prefix, _)) = overrides.roots.first() {
        return Err(ConfigError {
            file: Some(path.into()),
            line: None,
            key: Some("--root".into()),
            message: format!(
                "PREFIX=DIR is for use without a config file: give {prefix:?} its own \
                 [[site.route]] with root and strip_prefix = true"
            ),
        });
    }
    top_route.override_with(&overrides.route);

    let top_opened = opened_offsets(doc.get_ref(), &[]);
    let mut sites = Vec::new();
    for site in &site_tables {
        sites.push(cx.site(site, &top_route, &top_opened, &global)?);
    }
    if sites.is_empty() {
        // A file with no [[site]]: one site serving the top-level root at "/".
        let site_span = Spanned::new(0..0, DeTable::new());
        sites.push(cx.site(&site_span, &top_route, &top_opened, &global)?);
    }
    // Top-level rules run first, for every site.
    for site in &mut sites {
        site.rules.splice(0..0, top_rules.iter().cloned());
    }
    let global = global.resolve();
    crate::check_tls(&global, &sites).map_err(|(key, message)| ConfigError {
        file: Some(path.into()),
        line: top_level_line(cx.text, key),
        key: Some(key.into()),
        message,
    })?;
    cx.serve_apps(&mut apps, &sites)?;
    Ok(Config {
        global,
        sites,
        apps,
    })
}

/// The line (1-based) where the top-level `key = ...` of `text` is, if it
/// is set there (a check of options together names the key's line).
fn top_level_line(text: &str, key: &str) -> Option<usize> {
    let mut top = true;
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_start();
        if line.starts_with('[') {
            top = false;
        }
        let sets = |rest: &str| rest.trim_start().starts_with('=');
        if top && line.strip_prefix(key).is_some_and(sets) {
            return Some(i + 1);
        }
    }
    None
}

struct Cx<'a> {
    path: &'a Path,
    text: &'a str,
    /// `[[upstream]]` groups by name: their members (with weights).
    groups: HashMap<String, Vec<String>>,
    /// Errors found so far that did not stop the walk.
    noted: RefCell<Vec<ConfigError>>,
}

/// A TOML syntax error: the parser's reason, and the line with a caret
/// under the spot.
fn syntax_error(path: &Path, text: &str, e: &toml::de::Error) -> ConfigError {
    let at = e.span().map_or(0, |s| s.start.min(text.len()));
    let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[at..].find('\n').map_or(text.len(), |i| at + i);
    let line = text[..at].matches('\n').count() + 1;
    let column = text[line_start..at].chars().count();
    let number = line.to_string();
    let margin = " ".repeat(number.len());
    ConfigError {
        file: Some(path.into()),
        line: Some(line),
        key: None,
        message: format!(
            "{}\n {margin} |\n {number} | {}\n {margin} | {}^",
            e.message().trim().replace('\n', "; "),
            &text[line_start..line_end],
            " ".repeat(column),
        ),
    }
}

impl Cx<'_> {
    /// Notes an error and lets the walk go on, to report it with the rest.
    fn note(&self, error: ConfigError) {
        self.noted.borrow_mut().push(error);
    }

    /// An `[[upstream]]` table: `name` and `members` (each `URL [weight=N]`).
    fn upstream(&self, table: &Spanned<DeTable<'_>>) -> Result<(String, Vec<String>), ConfigError> {
        let mut name = None;
        let mut members = Vec::new();
        for (key, value) in table.get_ref() {
            let k = key.get_ref().as_ref();
            match (k, value.get_ref()) {
                ("name", DeValue::String(n)) => name = Some(n.to_string()),
                ("members", v) => {
                    let list: Vec<String> = match v {
                        DeValue::String(s) => vec![s.to_string()],
                        DeValue::Array(items) => items
                            .iter()
                            .map(|i| match i.get_ref() {
                                DeValue::String(s) => Ok(s.to_string()),
                                _ => Err(self.err(
                                    i.span().start,
                                    k,
                                    "expected \"URL [weight=N]\" strings".into(),
                                )),
                            })
                            .collect::<Result<_, _>>()?,
                        _ => {
                            return Err(self.err(
                                value.span().start,
                                k,
                                "expected a list of members".into(),
                            ))
                        }
                    };
                    for m in list {
                        match ProxySpec::parse_str(&m) {
                            Ok(spec) if spec.group.is_none() && spec.prefix.is_none() => {
                                members.extend(spec.members)
                            }
                            Ok(_) => {
                                return Err(self.err(
                                    value.span().start,
                                    k,
                                    format!("{m:?} is not an address"),
                                ))
                            }
                            Err(e) => return Err(self.err(value.span().start, k, e)),
                        }
                    }
                }
                ("name", _) => {
                    return Err(self.err(value.span().start, k, "expected a group name".into()))
                }
                _ => return Err(self.unknown(key, &["name", "members"])),
            }
        }
        let Some(name) = name else {
            return Err(self.err(
                table.span().start,
                "name",
                "every [[upstream]] needs a name".into(),
            ));
        };
        if members.is_empty() {
            return Err(self.err(
                table.span().start,
                "members",
                format!("upstream {name:?} has no members"),
            ));
        }
        Ok((name, members))
    }

    /// Replaces references to `[[upstream]]` groups by their members.
    fn resolve_groups(&self, layer: &mut RouteLayer, offset: usize) -> Result<(), ConfigError> {
        for spec in layer.proxy.iter_mut().flatten() {
            if let Some(name) = spec.group.take() {
                match self.groups.get(&name) {
                    Some(members) => spec.members = members.clone(),
                    None => {
                        return Err(self.err(
                            offset,
                            "proxy",
                            format!("no [[upstream]] named {name:?}"),
                        ))
                    }
                }
            }
        }
        Ok(())
    }

    /// Relative roots in a file are relative to the file's directory; old
    /// spellings of options become the new ones, layer by layer.
    fn anchor(&self, layer: &mut RouteLayer) {
        layer.take_old_spellings();
        let dir = self.path.parent().unwrap_or(Path::new(""));
        if let Some(root) = &mut layer.root {
            if root.is_relative() {
                *root = dir.join(&*root);
            }
        }
        for (_, page) in layer.error_pages.iter_mut().flat_map(|p| &mut p.0) {
            if page.is_relative() {
                *page = dir.join(&*page);
            }
        }
    }

    fn line_of(&self, offset: usize) -> usize {
        self.text[..offset.min(self.text.len())]
            .bytes()
            .filter(|&b| b == b'\n')
            .count()
            + 1
    }

    fn err(&self, offset: usize, key: &str, message: String) -> ConfigError {
        ConfigError {
            file: Some(self.path.into()),
            line: Some(self.line_of(offset)),
            key: Some(key.to_string()),
            message,
        }
    }

    fn unknown(&self, key: &Spanned<std::borrow::Cow<'_, str>>, extra: &[&str]) -> ConfigError {
        let k = key.get_ref().as_ref();
        if GLOBAL_OPTIONS.iter().any(|o| o.key == k) {
            // Unknown only where it stands: it was once answered "did you
            // mean" the key itself.
            let message = "a server-wide option: set it at the top of the file, before any table";
            return self.err(key.span().start, k, message.into());
        }
        let candidates = GLOBAL_OPTIONS
            .iter()
            .chain(ROUTE_OPTIONS)
            .map(|o| o.key)
            .chain(extra.iter().copied());
        self.unknown_among(key, candidates)
    }

    fn unknown_among<'c>(
        &self,
        key: &Spanned<std::borrow::Cow<'_, str>>,
        candidates: impl Iterator<Item = &'c str>,
    ) -> ConfigError {
        let k = key.get_ref().as_ref();
        let hint = candidates
            .map(|c| (edit_distance(k, c), c))
            .min()
            .filter(|(d, _)| *d <= 2)
            .map(|(_, c)| format!(" (did you mean {c:?}?)"))
            .unwrap_or_default();
        self.err(key.span().start, k, format!("unknown key{hint}"))
    }

    /// An array of tables, `[[site]]` or `[[site.route]]`.
    fn tables<'t>(
        &self,
        key: &Spanned<std::borrow::Cow<'_, str>>,
        value: &'t Spanned<DeValue<'t>>,
    ) -> Result<Vec<Spanned<DeTable<'t>>>, ConfigError> {
        let k = key.get_ref().as_ref();
        let DeValue::Array(items) = value.get_ref() else {
            return Err(self.err(key.span().start, k, format!("expected [[{k}]] tables")));
        };
        items
            .iter()
            .map(|item| match item.get_ref() {
                DeValue::Table(t) => Ok(Spanned::new(item.span(), t.clone())),
                _ => Err(self.err(item.span().start, k, format!("expected [[{k}]] tables"))),
            })
            .collect()
    }

    fn site(
        &self,
        site: &Spanned<DeTable<'_>>,
        top_route: &RouteLayer,
        top_opened: &[(&'static str, usize)],
        global: &GlobalLayer,
    ) -> Result<Site, ConfigError> {
        let site_opened = opened_offsets(site.get_ref(), top_opened);
        let mut hosts = Vec::new();
        let mut layer = RouteLayer::default();
        let mut route_tables = Vec::new();
        let mut tls = SiteTls::default();
        let mut rules = Vec::new();
        let (mut certs, mut keys) = (Vec::new(), Vec::new());
        let mut client_auth_at = site.span().start;
        let mut hosts_at = site.span().start;
        let mut challenge_at = site.span().start;
        for (key, value) in site.get_ref() {
            let k = key.get_ref().as_ref();
            let at = value.span().start;
            match k {
                "hosts" => {
                    hosts = self.hosts(value)?;
                    hosts_at = at;
                }
                "route" => route_tables = self.tables(key, value)?,
                "rule" => rules = self.rules(key, value)?,
                "tls" => {
                    let mode =
                        TlsMode::parse_toml(value.get_ref()).map_err(|m| self.err(at, k, m))?;
                    tls.mode = Some(mode);
                }
                "tls_cert" => {
                    certs = Vec::<PathBuf>::parse_toml(value.get_ref())
                        .map_err(|m| self.err(at, k, m))?;
                }
                "tls_key" => {
                    keys = Vec::<PathBuf>::parse_toml(value.get_ref())
                        .map_err(|m| self.err(at, k, m))?;
                }
                "acme_challenge" => {
                    let challenge = AcmeChallenge::parse_toml(value.get_ref())
                        .map_err(|m| self.err(at, k, m))?;
                    tls.acme_challenge = Some(challenge);
                    challenge_at = at;
                }
                "tls_client_auth" => {
                    let auth =
                        ClientAuth::parse_toml(value.get_ref()).map_err(|m| self.err(at, k, m))?;
                    tls.client_auth = Some(auth);
                    client_auth_at = at;
                }
                "tls_client_ca" => {
                    let ca =
                        PathBuf::parse_toml(value.get_ref()).map_err(|m| self.err(at, k, m))?;
                    tls.client_ca = Some(ca);
                }
                "tls_client_crl" => {
                    let crl = Vec::<PathBuf>::parse_toml(value.get_ref())
                        .map_err(|m| self.err(at, k, m))?;
                    tls.client_crl = Some(crl);
                }
                _ => match layer.set_toml(k, value.get_ref()) {
                    Ok(true) => {}
                    Ok(false) => {
                        let site_keys = [
                            "hosts",
                            "route",
                            "rule",
                            "tls",
                            "tls_cert",
                            "tls_key",
                            "acme_challenge",
                            "tls_client_auth",
                            "tls_client_ca",
                            "tls_client_crl",
                        ];
                        self.note(self.unknown(key, &site_keys));
                    }
                    Err(msg) => self.note(self.err(at, k, msg)),
                },
            }
        }
        if certs.len() != keys.len() {
            let message = format!(
                "{} tls_cert and {} tls_key: give one key per certificate, in the same order",
                certs.len(),
                keys.len()
            );
            return Err(self.err(site.span().start, "tls_key", message));
        }
        tls.certs = certs.into_iter().zip(keys).collect();
        let client_auth = tls.client_auth.or(global.tls_client_auth);
        let client_ca = tls.client_ca.as_ref().or(global.tls_client_ca.as_ref());
        if let (Some(auth @ (ClientAuth::Optional | ClientAuth::Require)), None) =
            (client_auth, client_ca)
        {
            let message = format!(
                "tls_client_auth = \"{}\" needs tls_client_ca: the CA certificates (PEM) client certificates must chain to",
                auth.as_str()
            );
            return Err(self.err(client_auth_at, "tls_client_ca", message));
        }
        // The names this site's ACME certificates are for (as hayate-tls
        // picks them): a wildcard among them needs DNS-01.
        let acme = match tls.mode {
            Some(mode) => mode == TlsMode::Acme,
            None => {
                global.tls == Some(TlsMode::Acme)
                    && global.tls_names.is_none()
                    && tls.certs.is_empty()
            }
        };
        // Wildcards are ordered over DNS-01 whatever acme_challenge says,
        // which needs a way to put records in DNS; so does a site's own
        // acme_challenge = "dns-01".
        let dns = global.acme_dns_server.is_some() || global.acme_dns_hook.is_some();
        if let (true, false, Some(name)) = (acme, dns, hosts.iter().find(|h| h.starts_with("*."))) {
            let message = format!("{name:?} is a wildcard: ACME issues wildcards over DNS-01 only, which needs acme_dns_server (RFC 2136 updates) or acme_dns_hook");
            return Err(self.err(hosts_at, "hosts", message));
        }
        if let (Some(AcmeChallenge::Dns01), false) = (tls.acme_challenge, dns) {
            let message = "acme_challenge = \"dns-01\" needs acme_dns_server (RFC 2136 updates) or acme_dns_hook (a program that sets the record)".to_string();
            return Err(self.err(challenge_at, "acme_challenge", message));
        }
        self.anchor(&mut layer);
        layer.merge_from(top_route);

        let mut routes = Vec::new();
        for table in &route_tables {
            let mut route_layer = RouteLayer::default();
            let mut prefix = None;
            for (key, value) in table.get_ref() {
                let k = key.get_ref().as_ref();
                if k == "prefix" {
                    match value.get_ref() {
                        DeValue::String(p) if p.starts_with('/') => prefix = Some(p.to_string()),
                        _ => {
                            return Err(self.err(
                                value.span().start,
                                k,
                                "expected a path starting with /".into(),
                            ))
                        }
                    }
                    continue;
                }
                match route_layer.set_toml(k, value.get_ref()) {
                    Ok(true) => {}
                    Ok(false) => self.note(self.unknown(key, &["prefix"])),
                    Err(msg) => self.note(self.err(value.span().start, k, msg)),
                }
            }
            let Some(prefix) = prefix else {
                return Err(self.err(
                    table.span().start,
                    "prefix",
                    "every [[site.route]] needs a prefix".into(),
                ));
            };
            if routes
                .iter()
                .any(|r: &(String, RouteLayer, usize, Vec<(&str, usize)>)| r.0 == prefix)
            {
                return Err(self.err(
                    table.span().start,
                    "prefix",
                    format!("duplicate route prefix {prefix:?}"),
                ));
            }
            self.anchor(&mut route_layer);
            route_layer.merge_from(&layer);
            let opened_at = opened_offsets(table.get_ref(), &site_opened);
            routes.push((prefix, route_layer, table.span().start, opened_at));
        }
        if !routes.iter().any(|r| r.0 == "/")
            && (layer.root.is_some()
                || layer.proxy.is_some()
                || layer.fastcgi.is_some()
                || layer.app.as_ref().is_some_and(AppRef::is_on))
        {
            routes.push((
                "/".to_string(),
                layer.clone(),
                site.span().start,
                site_opened.clone(),
            ));
        }
        if routes.is_empty() {
            return Err(self.err(
                site.span().start,
                "root",
                "this site serves nothing: set root (or add [[site.route]] tables)".into(),
            ));
        }
        let mut out = Vec::new();
        for (prefix, mut layer, offset, opened_at) in routes {
            self.resolve_groups(&mut layer, offset)?;
            if layer.root.is_none()
                && layer.proxy.is_none()
                && layer.fastcgi.is_none()
                && !layer.app.as_ref().is_some_and(AppRef::is_on)
            {
                return Err(self.err(
                    offset,
                    "root",
                    format!("route {prefix:?} has neither root nor proxy"),
                ));
            }
            if layer.proxy.iter().flatten().any(|s| s.prefix.is_some())
                || layer.fastcgi.iter().flatten().any(|s| s.prefix.is_some())
            {
                let key = if layer.fastcgi.is_some() {
                    "fastcgi"
                } else {
                    "proxy"
                };
                return Err(self.err(
                    offset,
                    key,
                    "PREFIX= is for the command line; in a file use a [[site.route]] with a prefix"
                        .into(),
                ));
            }
            if let Some(message) = crate::fastcgi_conflict(&layer) {
                return Err(self.err(offset, "fastcgi", format!("route {prefix:?}: {message}")));
            }
            if let Some(message) = crate::proxy_protocol_mix(&layer) {
                return Err(self.err(offset, "proxy", format!("route {prefix:?}: {message}")));
            }
            out.push(Route {
                prefix,
                options: layer.resolve(),
                lines: opened_at
                    .iter()
                    .map(|&(key, offset)| (key, self.line_of(offset)))
                    .collect(),
            });
        }
        out.sort_by_key(|r| std::cmp::Reverse(r.prefix.len()));
        let unrouted = (!out.iter().any(|r| r.prefix == "/")).then(|| layer.resolve());
        Ok(Site {
            hosts,
            routes: out,
            tls,
            rules,
            unrouted,
        })
    }

    /// `[[rule]]` or `[[site.rule]]` tables, in order.
    fn rules(
        &self,
        key: &Spanned<std::borrow::Cow<'_, str>>,
        value: &Spanned<DeValue<'_>>,
    ) -> Result<Vec<Rule>, ConfigError> {
        let mut rules = Vec::new();
        for table in self.tables(key, value)? {
            let at = table.span().start;
            match parse_rule(table.get_ref(), at, self.line_of(at)) {
                Ok(rule) => rules.push(rule),
                Err((offset, key, message)) => self.note(self.err(offset, key, message)),
            }
        }
        Ok(rules)
    }

    fn hosts(&self, value: &Spanned<DeValue<'_>>) -> Result<Vec<String>, ConfigError> {
        let names: Vec<String> = match value.get_ref() {
            DeValue::String(s) => vec![s.to_string()],
            DeValue::Array(items) => items
                .iter()
                .map(|i| match i.get_ref() {
                    DeValue::String(s) => Ok(s.to_string()),
                    _ => Err(self.err(i.span().start, "hosts", "expected host names".into())),
                })
                .collect::<Result<_, _>>()?,
            _ => {
                return Err(self.err(
                    value.span().start,
                    "hosts",
                    "expected a host name or a list".into(),
                ))
            }
        };
        names
            .into_iter()
            .map(|h| {
                let h = h.to_ascii_lowercase();
                let bare = h.strip_prefix("*.").unwrap_or(&h);
                let valid = !bare.is_empty()
                    && bare
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
                if valid {
                    Ok(h)
                } else {
                    Err(self.err(
                        value.span().start,
                        "hosts",
                        format!("invalid host name {h:?}"),
                    ))
                }
            })
            .collect()
    }
}

/// Where `root` is set in a table, as a byte offset.
/// Where `table` sets each of [`crate::OPENED_KEYS`], else where `parent`
/// (its site, or the top level) did.
fn opened_offsets(
    table: &DeTable<'_>,
    parent: &[(&'static str, usize)],
) -> Vec<(&'static str, usize)> {
    crate::OPENED_KEYS
        .iter()
        .filter_map(|&key| {
            let own = table
                .iter()
                .find(|(k, _)| k.get_ref().as_ref() == key)
                .map(|(_, v)| v.span().start);
            let inherited = || parent.iter().find(|(k, _)| *k == key).map(|(_, o)| *o);
            Some((key, own.or_else(inherited)?))
        })
        .collect()
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

mod apps;
#[cfg(test)]
mod tests;
