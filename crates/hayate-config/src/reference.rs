//! The configuration reference (docs/config.md, `hayate help-config`):
//! rendered from the option table, with the example configs it shows, each
//! checked by a test.

use crate::app;
use crate::table::{OptDef, GLOBAL_OPTIONS, ROUTE_OPTIONS};

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
         that choose nothing. A wildcard host (`*.example.com`) with `tls = \"acme\"` is \
         ordered over DNS-01 (the only challenge a CA accepts for wildcards), whatever \
         `acme_challenge` says for the other names: the TXT record set by an RFC 2136 update \
         to `acme_dns_server` signed with `acme_dns_tsig_key`, or by `acme_dns_hook`. A site \
         may choose its own `acme_challenge` for its hosts. A site also takes its own client certificates \
         (`tls_client_auth`, `tls_client_ca`, `tls_client_crl`), over the global ones: the \
         handshake picks them by SNI, and a request whose Host names a site with other \
         settings than its connection's is answered 421.\n\n",
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
        "## Protecting a site\n\n\
         Who the client is (`trusted_proxies`), who may come in (`allow`, `deny`, \
         `basic_auth`): per site or per route, checked on the normalized path the route \
         was chosen by, the same over HTTP/1.1 and HTTP/2. `allow`/`deny`: deny wins, \
         then an allow list admits only its own (403). `basic_auth`: an htpasswd file \
         of bcrypt (`htpasswd -B`), SHA-crypt or argon2id hashes (MD5, SHA-1 and plain \
         ones are refused at load, naming the line); 401 with `WWW-Authenticate`; a \
         verified login is remembered for 5 minutes under a keyed hash, so a browser \
         pays the hash once, not per request; the file is reloaded when it changes. \
         `rate_limit`: per client (or header, cookie, route), for the whole box (or, with \
         `rate_limit_scope = \"fleet\"` and `shared`, for every box sharing the Redis, each \
         box's own limit applying while Redis does not answer), 429 with `Retry-After` past \
         it. `conn_limit`: requests in flight per client (the same keys), each holding its \
         slot until its response is sent, 429 past it. `forward_auth`: an auth service's 2xx lets a request \
         through (with the fields `forward_auth_copy` names), any other answer goes back \
         to the client, and a service down, slow or failing refuses (503). They run in \
         this order: rate_limit, allow/deny, basic_auth, conn_limit, a fleet-wide \
         rate_limit, forward_auth.\n\n\
         ```toml\n",
    );
    out.push_str(EXAMPLE_POLICY_CONFIG);
    out.push_str("```\n\n");
    out.push_str(RULES_INTRO);
    out.push_str("```toml\n");
    out.push_str(EXAMPLE_RULES_CONFIG);
    out.push_str("```\n\n");
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
    out.push_str(
        "## Several apps: `[[app]]` tables

         One hayate supervises several apps, as a PM2 ecosystem file does: each `[[app]]` \
         table has the keys of `[app]` plus a `name` (unique, `[a-z0-9_-]`). An app is served \
         where a route names it, `app = \"NAME\"` in a `[[site]]` or `[[site.route]]` (a \
         route names one app, so two apps never share a route); `app = true` means the only \
         app, and is refused when there are several. An app no route names is a **worker**: \
         told no `PORT`, started once it has stayed up 300 ms, restarted with backoff, its \
         output logged, never proxied to. The `app_*` options written in an `[[app]]` \
         (`max_memory`, `listen`, `protocol`, `ready_path`, `log`...) are its own; those at the \
         top level are every app's defaults (`app_user` is only there). `hayate --config FILE` \
         (or `hayate run --config FILE`) starts every app; one that cannot start is logged and \
         shown by `hayate status` while the others serve (its routes answer 503 once it is \
         down). `hayate reload NAME` rolls only that app's instances (after re-reading the \
         file); `hayate reload` rolls them all. `hayate status`, `/metrics` (an `app` label) \
         and the status page (`apps` in `/status.json`) show each app by name. A reload \
         adds and removes apps by name: one new in the file starts (its routes serve once \
         it is ready), one gone from it is drained and stopped, the others keep their \
         processes.\n\n```toml\n",
    );
    out.push_str(EXAMPLE_APPS_CONFIG);
    out.push_str("```\n\n");
    out.push_str(
        "## Restarts on their own: file changes, a schedule, by name\n\n\
         Each is the rolling reload of `hayate reload NAME` (new instances ready before the \
         old ones drain and stop: no failed request), of that app only, logged with its \
         reason (`api: restarting its instances: src/routes.js changed`).\n\n\
         - **Watch** (`watch`, or `hayate run --watch` for every app: its whole directory): \
         inotify watches the named directories, files and name patterns under the app's \
         `cwd`; `.git`, `node_modules` and what `ignore` names never count (nor, under \
         `--watch`, the routes' roots inside the app's directory: files are served fresh). \
         A restart waits until the files have stayed unchanged for `watch_debounce`. With a \
         `build`, it runs first (at most `build_timeout`); if it fails, the running \
         instances keep serving and its output is logged; what changes while it runs is \
         taken as its own output. At most `watch_max_dirs` directories are watched, and a \
         limit met (that one, or the kernel's `fs.inotify.max_user_watches`) is logged with \
         the directory it stopped at.\n\
         - **Schedule**: `restart_cron` (cron fields in the server's local time zone: `TZ`, \
         else /etc/localtime) or `restart_every` (counted from the app's start, then from \
         each such restart). `hayate status` shows the next time.\n\
         - **By name**: `hayate restart NAME` (without re-reading the file), `hayate stop \
         NAME` (drained, then stopped, and kept stopped, even across file changes and \
         schedules, until `hayate start NAME`; its routes answer 503 \"the app is stopped\" \
         meanwhile).\n\n```toml\n",
    );
    out.push_str(EXAMPLE_WATCH_CONFIG);
    out.push_str("```\n\n");
    out
}

/// An example of watch, build and a scheduled restart, shown in docs and
/// checked by a test.
pub const EXAMPLE_WATCH_CONFIG: &str = r#"[[app]]
name = "web"
command = ["node", "dist/server.js"]
watch = ["src", "*.json"]             # directories, files, name patterns
ignore = ["*.test.ts"]                # besides .git and node_modules
build = ["npm", "run", "build"]       # first; a failure keeps the old instances
restart_cron = "0 4 * * *"            # every day at 04:00, local time
"#;

/// An example of several apps (a Node API, a Python app, a PHP site, a
/// queue worker), shown in docs and the README and checked by tests (here,
/// and `hayate check` on the README's copy in tests/apps_runtimes.rs).
pub const EXAMPLE_APPS_CONFIG: &str = r#"listen = "0.0.0.0:8080"
app_max_memory = "1GiB"             # every app's default

[[app]]
name = "api"
command = ["node", "server.js"]
cwd = "api"
instances = "auto"
env_file = "api/.env"               # KEY=VALUE lines, read at every start
ready_path = "/healthz"

[[app]]
name = "admin"                      # Python: admin/gunicorn.conf.py binds "unix:" + PORT
command = [".venv/bin/gunicorn", "admin.wsgi"]
cwd = "admin"
listen = "unix"                     # PORT is a socket path
instances = 2

[[app]]
name = "site"                       # php-fpm, its pool listening on ${PORT}
command = ["php-fpm8.2", "--nodaemonize", "--fpm-config", "php-fpm.conf"]
protocol = "fastcgi"
instances = 1

[[app]]
name = "jobs"                       # no route names it: a worker
command = ["node", "worker.js"]
cwd = "api"
instances = 2
max_memory = "256MiB"

[[site]]
hosts = ["example.com"]
root = "site/public"                # files, then site's PHP scripts
app = "site"

[[site.route]]
prefix = "/api/"
app = "api"

[[site.route]]
prefix = "/admin/"
app = "admin"
"#;

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

/// An example of site policy, shown in docs and checked by a test.
pub const EXAMPLE_POLICY_CONFIG: &str = r#"# Behind a CDN or a load balancer: its X-Forwarded-For names the client.
trusted_proxies = ["10.0.0.0/8", "2001:db8:ffff::/48"]

[[site]]
hosts = ["example.com"]
root = "/srv/example/public"
proxy = ["http://127.0.0.1:3000"]
deny = ["198.51.100.0/24"]                   # everywhere on the site

[[site.route]]
prefix = "/admin/"
proxy = ["http://127.0.0.1:3000"]
allow = ["192.0.2.0/24", "2001:db8::/32"]    # the office only
basic_auth = "/etc/hayate/admins.htpasswd"   # htpasswd -B -c FILE USER
basic_auth_realm = "admin"

[[site.route]]
prefix = "/api/"
proxy = ["http://127.0.0.1:3000"]
rate_limit = "10/s burst=20"                 # per client address (IPv6: per /64)
conn_limit = 10                              # requests in flight per client address
"#;

/// What the rules section of the reference says before its example.
const RULES_INTRO: &str = "## Rules: redirects, rewrites, headers\n\n\
Each `[[site.rule]]` (or `[[rule]]` at the top level, for every site, before the \
sites' own) has conditions, all of which must hold, and one action. They run in order \
before the request is routed, on the normalized path (so no `%2e`, `//` or `%2F` walks \
around them); the first rule that holds acts.\n\n\
- Conditions: `match` (a regex on the path, with captures; linear-time, no ReDoS), \
`prefix` (a plain path prefix), `host` (names, `*.example.com`), `method`, `header = { \
Name = \"regex\" }`, `query` (a regex on the raw query), `scheme` (`http`/`https`), `file` \
(`exists` or `missing` under the root of the route the path goes to). A regex written \
`!regex` holds when it does not match (a negated header regex also holds when the field \
is missing).\n\
- Actions: `redirect = \"URL\"` (status 302 unless `status` says 301, 303, 307 or 308: a \
mistaken permanent redirect stays in browsers' caches, so permanence is asked for), \
`redirect_prefix = \"/new/\"` (with `prefix`: the prefix replaced, the rest and the query \
kept), `rewrite = \"/path?query\"` (the request goes on with that target, routed anew, and \
the rules run again from the top, at most 10 times, then 500 naming the rule; `last = \
true` stops them after this one), `respond = 404` or `respond = \"text\"` (with `status`).\n\
- Templates name captures (`$1`..`$9`, `$name`, `${name}`) and variables: `$request_uri` \
(as the client sent it), `$host`, `$scheme`, `$query`, `$client_ip`, `$path`; `$$` is a \
dollar sign. Captures and `$path` are percent-encoded for where they go (a query value \
escapes `&`, `=` and `#` too). A template without `?` keeps the request's query; one with \
`?` says the whole query (write `$query` to keep it; a `?` with nothing after it drops \
the query, and leaves no `?` behind). A URL longer than 8 KiB is a 500.\n\
- The client's own target stays what the access log, a FastCGI script's `REQUEST_URI` \
and `forward_auth` see; the upstream gets the rewritten one.\n\n\
Header rules (`response_headers`, `request_headers`) and `cors` are route options (by \
site or route); a route's header rules come after its site's, which come after the top \
level's.\n\n";

/// An example of rules and header rules, shown in docs and checked by a test.
pub const EXAMPLE_RULES_CONFIG: &str = r#"[[rule]]                                  # every site: no VCS metadata
match = "^/\\.(git|svn|hg)(/|$)"
respond = 404

[[site]]
hosts = ["www.example.com"]
root = "/srv/empty"

[[site.rule]]                             # www to the bare domain
redirect = "https://example.com$request_uri"
status = 301

[[site]]
hosts = ["example.com"]
root = "/srv/example/public"
proxy = ["http://127.0.0.1:3000"]
security_headers = true                   # nosniff, Referrer-Policy, frames, HSTS
response_headers = { "-X-Powered-By" = "", "Permissions-Policy" = "camera=()" }
request_headers = { "X-Real-IP" = "$client_ip" }

[[site.rule]]                             # old blog URLs, for good
match = "^/blog/(\\d+)/?$"
redirect = "/posts/$1"
status = 301

[[site.rule]]                             # a moved section, no regex
prefix = "/docs/v1/"
redirect_prefix = "/docs/v2/"

[[site.rule]]                             # pretty URLs for the app
match = "^/p/(?P<slug>[a-z0-9-]+)$"
rewrite = "/index.php?p=$slug"

[[site.route]]
prefix = "/api/"
proxy = ["http://127.0.0.1:3000"]
cors = ["https://app.example.com"]        # preflights answered by hayate
cors_credentials = true
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
    use super::*;
    use crate::{load_file, Overrides};

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
        let app = cfg.apps.first().cloned().expect("app section");
        assert_eq!(app.command, vec!["node", "server.js"]);
        assert_eq!(cfg.global.app_ready_path.as_deref(), Some("/healthz"));
        assert!(cfg.global.admin.is_some());
        assert!(cfg.sites[0].routes[0].options.app.is_on());
    }

    #[test]
    fn example_apps_config_is_valid() {
        let cfg = load_file(
            "example.toml".as_ref(),
            EXAMPLE_APPS_CONFIG,
            &Overrides::default(),
        )
        .expect("valid");
        let apps: Vec<(&str, bool)> = cfg
            .apps
            .iter()
            .map(|a| (a.name.as_str(), a.served))
            .collect();
        assert_eq!(
            apps,
            [
                ("api", true),
                ("admin", true),
                ("site", true),
                ("jobs", false)
            ]
        );
        let jobs = cfg.apps[3].options(&cfg.global);
        assert_eq!(jobs.max_memory.map(|s| s.0), Some(256 << 20));
        let api = cfg.apps[0].options(&cfg.global);
        assert_eq!(api.max_memory.map(|s| s.0), Some(1 << 30));
        let readme = concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md");
        let readme = std::fs::read_to_string(readme).expect("README.md");
        assert!(
            readme.contains(EXAMPLE_APPS_CONFIG),
            "README's Several apps example differs from EXAMPLE_APPS_CONFIG"
        );
    }

    #[test]
    fn example_watch_config_is_valid() {
        let cfg = load_file(
            "example.toml".as_ref(),
            &format!("root = \".\"\n{EXAMPLE_WATCH_CONFIG}"),
            &Overrides::default(),
        )
        .expect("valid");
        let web = &cfg.apps[0];
        let watch = web.watch.clone().expect("watch");
        assert_eq!(watch.paths, ["src", "*.json"]);
        assert_eq!(watch.ignore, ["*.test.ts"]);
        assert_eq!(web.build, ["npm", "run", "build"]);
        let schedule = web.schedule.as_ref().expect("schedule");
        assert_eq!(schedule.describe(), "restart_cron \"0 4 * * *\"");
        let readme = concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md");
        let readme = std::fs::read_to_string(readme).expect("README.md");
        assert!(
            readme.contains(EXAMPLE_WATCH_CONFIG),
            "README's watch example differs from EXAMPLE_WATCH_CONFIG"
        );
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

    /// The README's example sites for rules load as written.
    #[test]
    fn readme_rules_examples_are_valid() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md");
        let readme = std::fs::read_to_string(path).expect("README.md");
        let start = readme.find("\n## Rules:").expect("the rules section");
        let end = readme[start + 1..]
            .find("\n## ")
            .map_or(readme.len(), |e| start + 1 + e);
        let section = &readme[start..end];
        let blocks: Vec<&str> = section
            .split("```toml\n")
            .skip(1)
            .map(|b| b.split("```").next().unwrap_or_default())
            .collect();
        assert_eq!(blocks.len(), 3, "WordPress, Laravel, single-page app");
        for block in blocks {
            let cfg = load_file("README.toml".as_ref(), block, &Overrides::default())
                .unwrap_or_else(|e| panic!("{e}\n{block}"));
            assert!(!cfg.sites[0].rules.is_empty(), "{block}");
        }
    }

    #[test]
    fn example_rules_config_is_valid() {
        let cfg = load_file(
            "example.toml".as_ref(),
            EXAMPLE_RULES_CONFIG,
            &Overrides::default(),
        )
        .expect("valid");
        // The top-level rule first, in every site.
        assert_eq!(cfg.sites[0].rules.len(), 2);
        assert_eq!(cfg.sites[1].rules.len(), 4);
        let api = &cfg.sites[1].routes[0];
        assert_eq!(api.prefix, "/api/");
        assert_eq!(
            api.options.response_headers.as_ref().map(|h| h.0.len()),
            Some(2)
        );
        assert!(api.options.cors.is_some());
    }

    #[test]
    fn example_policy_config_is_valid() {
        let cfg = load_file(
            "example.toml".as_ref(),
            EXAMPLE_POLICY_CONFIG,
            &Overrides::default(),
        )
        .expect("valid");
        assert_eq!(cfg.global.trusted_proxies.as_ref().map(Vec::len), Some(2));
        let admin = &cfg.sites[0].routes[0];
        assert_eq!(admin.prefix, "/admin/");
        assert_eq!(admin.options.allow.as_ref().map(Vec::len), Some(2));
        assert_eq!(
            admin.options.deny.as_ref().map(Vec::len),
            Some(1),
            "the site's"
        );
        assert_eq!(admin.options.basic_auth_realm, "admin");
        let api = &cfg.sites[0].routes[1];
        assert_eq!(api.options.rate_limit.map(|r| r.burst), Some(20));
        let slash = &cfg.sites[0].routes[2];
        assert!(slash.options.allow.is_none() && slash.options.basic_auth.is_none());
    }
}
