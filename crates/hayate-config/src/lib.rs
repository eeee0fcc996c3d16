//! hayate's configuration: one option table ([`table`]) drives CLI flags,
//! environment variables, config file keys, `--help` and docs/config.md.
//!
//! Loading is pure: it reads the config file's text and the CLI/env values
//! and yields a validated [`Config`]; opening listeners and directories is
//! the server's job (STYLE.md: raw, then built).
//!
//! Precedence, lowest first: defaults, config file, environment, CLI.

pub mod app;
pub mod cli;
mod file;
pub mod table;
pub mod values;

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
    /// The `[app]` section, when the file has one.
    pub app: Option<app::AppSection>,
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
}

/// A site's HTTPS settings, beside the global ones.
#[derive(Debug, Clone, Default)]
pub struct SiteTls {
    /// Automatic certificates for the site's hosts (`internal` or `acme`),
    /// whatever the global `tls` says.
    pub mode: Option<values::TlsMode>,
    /// Certificate and key file pairs.
    pub certs: Vec<(PathBuf, PathBuf)>,
}

/// A path prefix and how it is served.
#[derive(Debug, Clone)]
pub struct Route {
    /// Path prefix, starting with `/`.
    pub prefix: String,
    /// Options merged from top level, site and route.
    pub options: RouteOptions,
    /// The config file line that set this route's root, for errors found
    /// when the root is opened (`hayate check`).
    pub root_line: Option<usize>,
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
            root_line: None,
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
            root_line: None,
        });
    }
    let mut slash = base;
    let app = slash.app == Some(true);
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
    if !routes.iter().any(|r| r.prefix == "/") {
        routes.push(Route {
            prefix: "/".into(),
            options: slash.resolve(),
            root_line: None,
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
            root_line: None,
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
        layer.app = r.options.app.then_some(true);
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
        }],
        app: None,
    })
}

/// Why a route's `fastcgi` cannot be served as set, if it cannot: its
/// scripts live under its root, and one route has one kind of upstream.
pub(crate) fn fastcgi_conflict(route: &RouteLayer) -> Option<&'static str> {
    route.fastcgi.as_ref()?;
    if route.root.is_none() {
        Some("fastcgi needs root: the scripts it runs are files under it")
    } else if route.proxy.is_some() || route.app == Some(true) {
        Some("a route sends to one of proxy, app or fastcgi")
    } else {
        None
    }
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
    let https = g.listen.iter().any(|l| l.scheme == values::Scheme::Https);
    let site_tls = sites
        .iter()
        .any(|s| s.tls.mode.is_some() || !s.tls.certs.is_empty());
    if https && certs == 0 && g.tls.is_none() && !site_tls {
        return Err((
            "listen",
            "an https:// listener needs certificates: tls_cert and tls_key, or tls = \"internal\""
                .into(),
        ));
    }
    Ok(())
}

/// Renders the option table as Markdown (docs/config.md).
pub fn markdown_reference() -> String {
    let mut out = String::from(
        "# hayate configuration reference\n\n\
         Generated from the option table (`crates/hayate-config/src/table.rs`) by \
         `hayate help-config`; a test keeps this file equal to its output.\n\n\
         Every option can be given as a CLI flag, an environment variable or a key \
         in the config file (TOML). Precedence, lowest first: default, file, \
         environment, CLI.\n\n",
    );
    out.push_str("## Config file layout\n\n```toml\n");
    out.push_str(EXAMPLE_CONFIG);
    out.push_str("```\n\n");
    out.push_str(
        "A `[[site]]` takes `hosts` (names matched against Host; `*.example.com` for \
         subdomains), route options (defaults for its routes), `[[site.route]]` tables, and \
         its own HTTPS certificates: `tls = \"acme\"` or `\"internal\"` for automatic ones \
         for its hosts, or `tls_cert`/`tls_key` files. The global `tls` covers the sites \
         that choose nothing.\n\n",
    );
    for (title, intro, table) in [
        ("Global options", "Top level of the file only.", GLOBAL_OPTIONS),
        (
            "Route options",
            "At the top level (defaults for every route), in a `[[site]]` (defaults for its routes) \
             or in a `[[site.route]]`.",
            ROUTE_OPTIONS,
        ),
    ] {
        out.push_str(&format!("## {title}\n\n{intro}\n\n| key | flag / env | default | meaning |\n|---|---|---|---|\n"));
        for o in table {
            option_row(&mut out, o.key, o);
        }
        out.push('\n');
    }
    out.push_str(
        "## The `[app]` section\n\n\
         The supervised app, as `hayate run -- CMD` runs it: `hayate --config FILE` with an \
         `[app]` section supervises the app and serves it (files first where a route has a \
         root, the app for the rest: routes default to `app = true`). Besides the keys below, \
         every `app_*` global option is written here by its short name (`max_memory` is \
         `app_max_memory`). Flags and environment variables override the file.\n\n```toml\n",
    );
    out.push_str(EXAMPLE_APP_CONFIG);
    out.push_str("```\n\n| key | flag / env | default | meaning |\n|---|---|---|---|\n");
    for (key, value, flag, help) in app::APP_SECTION_KEYS {
        let flag = if flag.is_empty() { "file only" } else { flag };
        out.push_str(&format!("| `{key} = {value}` | {flag} | | {help} |\n"));
    }
    for o in GLOBAL_OPTIONS {
        if let Some(short) = o.key.strip_prefix("app_") {
            option_row(&mut out, short, o);
        }
    }
    out.push('\n');
    out
}

/// One option's row of a reference table, under the file key `key`.
fn option_row(out: &mut String, key: &str, o: &OptDef) {
    let default = o
        .default
        .map(|d| format!("`{d}`"))
        .unwrap_or_else(|| "unset".into());
    out.push_str(&format!(
        "| `{key}` | `--{} {}` / `{}` | {default} | {} |\n",
        o.flag_name(),
        o.value_name,
        o.env_name(),
        o.help
    ));
}

/// An example `[app]` config, shown in docs and checked by a test.
pub const EXAMPLE_APP_CONFIG: &str = r#"listen = "0.0.0.0:8080"
root = "public"                   # files first, the app for the rest
admin = "127.0.0.1:9100"          # GET /metrics and /status (off unless set)

[app]
command = ["node", "server.js"]   # told its socket (or port) in PORT
instances = "auto"
ready_path = "/healthz"
max_memory = "512MiB"
reload_parallel = 1               # instances replaced at once on reload

[app.env]
NODE_ENV = "production"
"#;

/// A commented example config, shown in docs and checked by a test.
pub const EXAMPLE_CONFIG: &str = r#"# Global options and route defaults at the top level.
listen = ["https://0.0.0.0:443", "0.0.0.0:80", "unix:/tmp/hayate.sock"]
tls_cert = ["/etc/ssl/example.com.pem"]   # SNI picks among them by name;
tls_key = ["/etc/ssl/example.com.key"]    # or tls = "internal" (a local CA)
hsts = "365d"                     # on HTTPS responses; plain HTTP redirects (308)
workers = "auto"
cache_control = "no-cache"

[[site]]
hosts = ["example.com", "www.example.com"]
root = "/srv/example/public"      # a route at "/" for this site
tls = "acme"                      # its certificates from Let's Encrypt

[[site.route]]
prefix = "/assets/"
root = "/srv/example/dist"
strip_prefix = true
immutable = true

[[site]]                          # no hosts: the default site
root = "/srv/default"
fallback = "index.html"           # single-page app
"#;

#[cfg(test)]
mod tests {
    #[test]
    fn changes_name_options_and_routes() {
        use std::path::Path;
        let o = super::Overrides::default();
        let old = super::load_file(
            Path::new("a.toml"),
            "proxy_timeout = \"5s\"\n[[site]]\n[[site.route]]\nprefix = \"/api/\"\nproxy = \"http://127.0.0.1:3000\"\ncache = \"1s\"\n[[site.route]]\nprefix = \"/old/\"\nproxy = \"http://127.0.0.1:3001\"\n",
            &o,
        )
        .unwrap();
        let new = super::load_file(
            Path::new("a.toml"),
            "proxy_timeout = \"9s\"\n[[site]]\n[[site.route]]\nprefix = \"/api/\"\nproxy = \"http://127.0.0.1:3000\"\ncache = \"60s\"\n[[site.route]]\nprefix = \"/new/\"\nproxy = \"http://127.0.0.1:3001\"\n",
            &o,
        )
        .unwrap();
        let lines = super::changes(&old, &new);
        assert_eq!(
            lines,
            [
                "proxy_timeout: changed",
                "route /api/ of site *: cache changed",
                "route /new/ of site *: added",
                "route /old/ of site *: removed",
            ],
            "{lines:#?}"
        );
        assert!(super::changes(&old, &old).is_empty());
    }

    use super::*;

    #[test]
    fn every_default_parses() {
        // resolve() panics on a default that does not parse.
        let g = GlobalLayer::default().resolve();
        assert_eq!(g.listen.len(), 1);
        let r = RouteLayer::default().resolve();
        assert_eq!(r.index, "index.html");
        assert!(r.root.is_none() && r.fallback.is_none() && !r.listing && r.precompressed);
    }

    #[test]
    fn http2_goaway_timeout_defaults_to_two_seconds() {
        use std::time::Duration;
        let g = GlobalLayer::default().resolve();
        assert_eq!(g.http2_goaway_timeout.0, Duration::from_secs(2));
        let cfg = load_file(
            "c.toml".as_ref(),
            "root = \"/srv/a\"\nhttp2_goaway_timeout = \"500ms\"\n",
            &Overrides::default(),
        )
        .expect("valid");
        assert_eq!(
            cfg.global.http2_goaway_timeout.0,
            Duration::from_millis(500)
        );
    }

    #[test]
    fn shared_key_is_64_hex_digits() {
        let load = |text: &str| {
            let text = format!("root = \"/srv/a\"\n{text}");
            load_file("c.toml".as_ref(), &text, &Overrides::default())
        };
        let key = "aB".repeat(32);
        assert_eq!(GlobalLayer::default().resolve().shared_key, None);
        let ok = load(&format!("shared_key = \"{key}\"\n")).expect("valid");
        assert_eq!(ok.global.shared_key.as_deref(), Some(key.as_str()));
        for bad in ["secret", &format!("{key}0"), &"g".repeat(64)] {
            let text = format!("shared_key = \"{bad}\"\n");
            let e = load(&text).expect_err(&text).to_string();
            assert!(
                e.contains("shared_key must be 64 hex digits"),
                "{text}: {e}"
            );
        }
        // A file that shares ACME may leave the key to the environment.
        let acme =
            "shared = \"redis://127.0.0.1:6379\"\ntls = \"acme\"\ntls_names = [\"a.test\"]\n";
        load(acme).expect("valid");
    }

    #[test]
    fn cache_key_and_bypass_headers() {
        let r = RouteLayer::default().resolve();
        assert!(r.cache_key_headers.0.is_empty());
        assert_eq!(r.cache_bypass_headers.0, vec!["authorization", "cookie"]);
        let cfg = load_file(
            "c.toml".as_ref(),
            "[[site]]\nroot = \"/srv/a\"\ncache_key_headers = [\"X-API-Key\"]\n\
             cache_bypass_headers = \"Authorization, Cookie, X-Token\"\n",
            &Overrides::default(),
        )
        .expect("valid");
        let o = &cfg.sites[0].routes[0].options;
        assert_eq!(o.cache_key_headers.0, vec!["x-api-key"]);
        assert_eq!(
            o.cache_bypass_headers.0,
            vec!["authorization", "cookie", "x-token"]
        );
        let bad = load_file(
            "c.toml".as_ref(),
            "cache_key_headers = \"X API\"\n",
            &Overrides::default(),
        );
        assert!(bad.is_err());
    }

    #[test]
    fn compression_defaults_and_per_route_settings() {
        use hayate_core::Coding::*;
        let r = RouteLayer::default().resolve();
        assert!(r.compress);
        assert_eq!(r.compress_encodings.0, vec![Br, Zstd, Gzip]);
        assert_eq!(r.compress_min_size.0, 1024);
        assert!(r.compress_types.0.contains(&"text/*".to_string()));
        assert_eq!(
            r.compress_static_levels.0,
            vec![(Br, 11), (Zstd, 19), (Gzip, 9)]
        );
        assert_eq!(
            r.compress_dynamic_levels.0,
            vec![(Br, 4), (Zstd, 3), (Gzip, 5)]
        );
        let g = GlobalLayer::default().resolve();
        assert_eq!(g.compress_cache_size.0, 64 << 20);
        assert_eq!(g.compress_max_file.0, 8 << 20);
        assert_eq!(g.compress_queue, 1024);
        let cfg = load_file(
            "c.toml".as_ref(),
            r#"
compress_encodings = ["gzip", "br"]
[[site]]
root = "/srv/a"
[[site.route]]
prefix = "/raw/"
root = "/srv/raw"
compress = false
compress_types = ["text/html", "application/json"]
"#,
            &Overrides::default(),
        )
        .expect("valid");
        let routes = &cfg.sites[0].routes;
        assert!(!routes[0].options.compress);
        assert_eq!(routes[0].options.compress_types.0.len(), 2);
        assert!(routes[1].options.compress);
        assert_eq!(routes[1].options.compress_encodings.0, vec![Gzip, Br]);
        let bad = load_file(
            "c.toml".as_ref(),
            "compress_static_levels = \"br:12\"\n",
            &Overrides::default(),
        );
        assert!(bad.is_err());
    }

    #[test]
    fn fastcgi_on_the_command_line() {
        let mut o = Overrides::default();
        o.route
            .set_strs(
                "fastcgi",
                &["unix:/run/php.sock".into(), "/blog=127.0.0.1:9000".into()],
            )
            .expect("valid");
        let cfg = without_file(&o).expect("valid");
        let routes = &cfg.sites[0].routes;
        assert_eq!(routes[0].prefix, "/blog");
        assert_eq!(routes[1].prefix, "/");
        for r in routes {
            assert!(
                r.options.fastcgi.is_some() && r.options.root.is_some(),
                "{}",
                r.prefix
            );
        }
        o.route
            .set_strs("proxy", &["http://127.0.0.1:1".into()])
            .expect("valid");
        let e = without_file(&o).expect_err("two upstreams for /");
        assert_eq!(e.key.as_deref(), Some("--fastcgi"));
    }

    #[test]
    fn keys_flags_and_envs_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for o in GLOBAL_OPTIONS.iter().chain(ROUTE_OPTIONS) {
            assert!(seen.insert(o.key), "duplicate key {}", o.key);
            assert!(
                o.key
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
                "{}",
                o.key
            );
        }
    }

    #[test]
    fn docs_config_md_is_current() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/config.md");
        let on_disk = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            on_disk == markdown_reference(),
            "docs/config.md is out of date: run `cargo run -p hayate -- help-config > docs/config.md`"
        );
    }

    #[test]
    fn example_app_config_is_valid() {
        let cfg = load_file(
            "example.toml".as_ref(),
            EXAMPLE_APP_CONFIG,
            &Overrides::default(),
        )
        .expect("valid");
        let app = cfg.app.expect("app section");
        assert_eq!(app.command, vec!["node", "server.js"]);
        assert_eq!(cfg.global.app_ready_path.as_deref(), Some("/healthz"));
        assert!(cfg.global.admin.is_some());
        assert!(cfg.sites[0].routes[0].options.app);
    }

    #[test]
    fn example_config_is_valid() {
        let cfg = load_file(
            "example.toml".as_ref(),
            EXAMPLE_CONFIG,
            &Overrides::default(),
        )
        .expect("valid");
        assert_eq!(cfg.sites.len(), 2);
        assert_eq!(cfg.sites[0].routes[0].prefix, "/assets/");
        assert!(cfg.sites[0].routes[0].options.immutable);
        assert_eq!(
            cfg.sites[0].routes[0].options.cache_control.as_deref(),
            Some("no-cache")
        );
        assert_eq!(cfg.sites[0].routes[1].prefix, "/");
    }
}
