//! The one table of Caddyfile directives and global options: how each maps
//! to hayate. The translator dispatches through it, and `hayate import
//! --table-markdown caddy` prints it as the "Coming from Caddy" page.

use crate::caddy_apply::*;
use crate::caddy_global::*;
use crate::caddy_proxy::*;
use crate::caddy_translate::{Applied, Caddy};
use crate::nginx_parse::Directive;
use crate::nginx_table::How::{self, Differs, Translated};

/// Carries one directive over.
pub type Apply = fn(&mut Caddy, &Directive) -> Applied;

/// One directive.
pub struct Row {
    /// The Caddyfile directive (or global option).
    pub directive: &'static str,
    /// How it maps.
    pub how: How,
    /// What it becomes in hayate.
    pub hayate: &'static str,
    /// What carries it over (None for rows that carry nothing).
    pub apply: Option<Apply>,
}

const fn maps(directive: &'static str, how: How, hayate: &'static str, apply: Apply) -> Row {
    Row {
        directive,
        how,
        hayate,
        apply: Some(apply),
    }
}

const fn not_needed(directive: &'static str, why: &'static str) -> Row {
    Row {
        directive,
        how: How::NotNeeded(why),
        hayate: "",
        apply: None,
    }
}

const fn unsupported(directive: &'static str, why: &'static str) -> Row {
    Row {
        directive,
        how: How::Unsupported(why),
        hayate: "",
        apply: None,
    }
}

/// A site's directives, in Caddy's order.
pub static ROWS: &[Row] = &[
    unsupported("tracing", "hayate traces with OpenTelemetry when otel_endpoint is set (global)"),
    unsupported("map", "hayate has no variables; rules match on path, host, method, header and query"),
    unsupported("vars", "hayate has no variables"),
    unsupported("fs", "hayate serves files from the local file system"),
    maps("root", Translated, "`root` of the site, or of the route a path matcher names", root),
    unsupported("log_append", "hayate's access log has fixed fields or a template (access_log_format)"),
    unsupported("skip_log", "hayate logs every request"),
    unsupported("log_skip", "hayate logs every request"),
    unsupported("log_name", "hayate has one access log"),
    maps("header", Translated, "`response_headers` (`Name`, `+Name`, `?Name`, `-Name`; on every status)", header),
    unsupported("copy_response_headers", "hayate's upstream answers pass through with response_headers applied"),
    maps("request_body", Translated, "`max_body_size`", request_body),
    maps("redir", Translated, "a `[[site.rule]]` with `redirect` and `status` (the matcher as its conditions)", redir),
    unsupported("method", "hayate sends the client's method"),
    maps("rewrite", Translated, "a `[[site.rule]]` with `rewrite`", rewrite),
    maps("uri", Translated, "`strip_prefix = true` on the route of that prefix (other forms are reported)", uri),
    maps("try_files", Translated, "`fallback` (`{path} /index.html`), or nothing with `php_fastcgi` (its front controller)", try_files),
    maps("basic_auth", Differs("the users are written to an htpasswd file beside the config"), "`basic_auth` (an htpasswd file) and `basic_auth_realm`", basic_auth),
    maps("basicauth", Differs("the users are written to an htpasswd file beside the config"), "`basic_auth` (an htpasswd file) and `basic_auth_realm`", basic_auth),
    maps("forward_auth", Differs("hayate sends the auth service the fields forward_auth_headers names (Cookie, Authorization, Accept), not every one"), "`forward_auth` (URL with `uri`) and `forward_auth_copy`", forward_auth),
    maps("request_header", Translated, "`request_headers` (to the upstream)", request_header),
    maps("encode", Translated, "`compress`, `compress_encodings`, `compress_min_size` (hayate compresses by default, files once)", encode),
    unsupported("push", "HTTP/2 server push is gone from browsers; hayate passes 103 Early Hints from upstreams"),
    unsupported("intercept", "hayate's error_pages with intercept_errors replace upstream errors"),
    unsupported("templates", "hayate serves files as they are"),
    unsupported("invoke", "hayate has no named routes"),
    maps("handle", Translated, "a `[[site.route]]` for its path prefix (no matcher: the site's own options)", handle),
    maps("handle_path", Translated, "a `[[site.route]]` with `strip_prefix = true`", handle_path),
    maps("route", Differs("hayate runs a route's settings in its own order, not the block's"), "as handle", handle),
    maps("abort", Differs("hayate answers 403 where Caddy drops the connection"), "`deny`/`allow` for client-address matchers", abort),
    maps("error", Translated, "a `[[site.rule]]` with `respond = STATUS`, or `deny`/`allow` for 403 on client addresses", error),
    unsupported("copy_response", "hayate has no handle_response"),
    maps("respond", Translated, "a `[[site.rule]]` with `respond` (and `status`), or `deny`/`allow` for 403 on client addresses", respond),
    not_needed("metrics", "hayate serves Prometheus metrics on its admin listener (admin = \"127.0.0.1:9090\")"),
    maps("reverse_proxy", Translated, "`proxy` (members), `proxy_host`, `request_headers`, `proxy_health_check`, `proxy_balance`", reverse_proxy),
    maps("php_fastcgi", Translated, "`fastcgi` (files first, then scripts, then index.php)", php_fastcgi),
    maps("file_server", Translated, "files under `root` (`listing` for browse); hayate hides dotfiles unless dotfiles = true, Caddy serves them unless `hide` names them (reported where it does not)", file_server),
    unsupported("acme_server", "hayate is not an ACME server (tls = \"internal\" is its local CA)"),
    maps("tls", Translated, "`tls` (internal), `acme_email`, `tls_cert`/`tls_key`, `tls_client_auth`/`tls_client_ca`, `tls_on_demand`", tls),
    maps("log", Differs("hayate's access log is one for every site"), "`access_log`, `access_log_format`, `access_log_size`/`_keep`/`_age`", log),
    unsupported("bind", "hayate listens on every address of the ports it is given (listen)"),
    unsupported("handle_errors", "hayate's error_pages name a file per status"),
    unsupported("import", "a snippet or file that could not be expanded"),
];

/// The global options block.
pub static GLOBAL_ROWS: &[Row] = &[
    maps("email", Translated, "`acme_email`", email),
    maps("acme_ca", Translated, "`acme_directory`", |t, d| global_str(t, "acme_directory", d)),
    maps("acme_ca_root", Translated, "`acme_ca_root`", |t, d| global_str(t, "acme_ca_root", d)),
    unsupported("acme_dns", "hayate's DNS-01 goes over RFC 2136 (acme_dns_server) or a hook (acme_dns_hook)"),
    maps("local_certs", Translated, "`tls = \"internal\"` for every site", local_certs),
    maps("auto_https", Translated, "no automatic `tls`, `https_redirect = false`", auto_https),
    maps("http_port", Translated, "the port of plain-HTTP `listen` addresses", port),
    maps("https_port", Translated, "the port of `https://` `listen` addresses", port),
    maps("debug", Translated, "`log_level = \"debug\"`", debug),
    maps("grace_period", Translated, "`grace_period`", |t, d| global_duration(t, "grace_period", d)),
    not_needed("shutdown_delay", "hayate stops accepting at once and drains for grace_period"),
    maps("on_demand_tls", Translated, "`tls_on_demand_ask`", on_demand_tls),
    maps("servers", Translated, "`trusted_proxies`, `http3`/`http2`, `header_timeout`, `body_timeout`, `send_timeout`, `keepalive_timeout`, `max_header_bytes`", servers),
    maps("log", Translated, "`error_log`, `log_level`", global_log),
    not_needed("admin", "hayate is controlled over its control socket (hayate reload, status)"),
    not_needed("persist_config", "hayate's config is its file"),
    not_needed("skip_install_trust", "hayate never installs its local CA in the system's trust store"),
    not_needed("key_type", "hayate's certificates use ECDSA P-256 keys"),
    not_needed("renew_interval", "hayate checks renewals itself"),
    not_needed("ocsp_stapling", "hayate staples no OCSP responses"),
    unsupported("order", "hayate runs its settings in a fixed order: rules, then the route"),
    unsupported("storage", "hayate keeps certificates under state_dir, or in Redis with shared"),
    unsupported("cert_issuer", "hayate orders from one ACME directory (acme_directory)"),
    unsupported("pki", "hayate's local CA is its own (tls = \"internal\")"),
];
