//! The one table of nginx directives: how each maps to hayate. The
//! translator dispatches through it, and `hayate import --table-markdown`
//! prints it as the "Coming from nginx" page, so the page and the importer
//! cannot disagree.

use crate::hayate_toml::Value;
use crate::nginx_apply::*;
use crate::nginx_locations as tr;
use crate::nginx_parse::Directive;
use crate::nginx_translate::{Target, Translation};
use crate::nginx_upstreams::*;
use crate::values;

/// How a directive maps.
#[derive(Debug, Clone, Copy)]
pub enum How {
    /// Carried over as it behaves in nginx.
    Translated,
    /// Carried over, with this difference (always reported).
    Differs(&'static str),
    /// hayate does this by default, or better: nothing to carry (reported).
    NotNeeded(&'static str),
    /// No hayate equivalent, and why (reported).
    Unsupported(&'static str),
}

/// Carries one directive over: `Ok(None)` as the row says, `Ok(Some(t))`
/// with the difference `t`, `Err(t)` not carried because `t`.
pub type Apply = fn(&mut Translation, &Directive) -> Result<Option<String>, String>;

/// One directive.
pub struct Row {
    /// The nginx directive.
    pub directive: &'static str,
    /// How it maps.
    pub how: How,
    /// What it becomes in hayate (the docs page's middle column).
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

use How::{Differs, Translated};

const TLS_BY_RUSTLS: &str =
    "hayate's TLS (rustls) chooses TLS 1.2 and 1.3, modern ciphers and session resumption itself";
const OCSP: &str = "hayate staples no OCSP responses: browsers do not ask for them, and \
     Let's Encrypt ended its OCSP service in 2025";
const BUFFERS: &str = "hayate sizes its buffers itself and streams bodies both ways";
const WORKERS: &str = "hayate runs one worker thread per core (workers = \"auto\")";

/// Every directive the importer knows, most used first.
pub static ROWS: &[Row] = &[
    maps("server", Translated, "`[[site]]`", |_, _| Ok(None)),
    maps("listen", Translated, "`listen` (global; `https://` for `ssl`, `ADDR proxy_protocol`, `unix:PATH`); `default_server`: the site without `hosts`", listen),
    maps("server_name", Translated, "`hosts` (`.example.com`: both `example.com` and `*.example.com`; `_`: none, the default site)", server_name),
    maps("location", Translated, "prefix and `^~`: `[[site.route]]`; `=` and regex locations that answer alone (`return`, `rewrite`, `deny all`): `[[site.rule]]` (exact first, then regexes in order, before routing, as nginx checks them); `\\.php$` with `fastcgi_pass`: the site's `fastcgi`", |_, _| Ok(None)),
    maps("root", Translated, "`root`", |t, d| set_str(t, "root", d.arg(0))),
    maps("alias", Translated, "`root` with `strip_prefix = true`", |t, d| {
        set_str(t, "root", d.arg(0))?;
        t.keys().set("strip_prefix", Value::Bool(true));
        Ok(None)
    }),
    maps("index", Translated, "`index` (the first name; `index.php` is `fastcgi_index`)", index),
    maps("try_files", Translated, "the route's own order: the file, the directory, then `fallback` (a file), the FastCGI front controller (`fastcgi_index`; `/index.php$request_uri` with the path as PATH_INFO: `fastcgi_index_path_info`), the upstream (a named location's `proxy_pass`), or 404", tr::try_files),
    maps("return", Translated, "`[[site.rule]]` with `redirect` and `status`, or `respond`", return_),
    maps("rewrite", Translated, "`[[site.rule]]` with `match` and `rewrite` (`break`: `last = true`) or `redirect` (`redirect`: 302, `permanent`: 301)", rewrite),
    maps("proxy_pass", Translated, "`proxy` (a URL, or an `[[upstream]]` group's name); a URI part `/` is `strip_prefix = true`", proxy_pass),
    maps("upstream", Translated, "`[[upstream]]` with `members` (`weight=N`); `max_fails`, `fail_timeout`: `proxy_max_fails`, `proxy_fail_timeout` (global); `backup` and `down`: see the report", |_, _| Ok(None)),
    maps("least_conn", Translated, "`proxy_balance = \"least_conn\"` (hayate's default; global)", |t, _| balance(t, "least_conn")),
    maps("ip_hash", Differs("hayate hashes the whole address, nginx the first three octets of IPv4 ones"), "`proxy_balance = \"hash:ip\"` (global)", |t, _| balance(t, "hash:ip")),
    maps("hash", Translated, "`proxy_balance = \"hash:ip\"`, `\"hash:header:NAME\"` or `\"hash:cookie:NAME\"` (consistent; global)", hash),
    maps("random", Differs("hayate balances by least connections instead"), "`proxy_balance = \"least_conn\"`", |t, _| balance(t, "least_conn")),
    not_needed("keepalive", "hayate keeps idle upstream connections per member and worker (proxy_idle, proxy_keepalive)"),
    not_needed("keepalive_requests", "hayate reuses upstream connections as long as they live"),
    not_needed("keepalive_timeout", "hayate closes idle clients after keepalive_timeout (75s) and upstream connections below their Keep-Alive hint"),
    maps("proxy_set_header", Translated, "`request_headers` (`Host`: `proxy_host`); X-Forwarded-*, X-Real-IP from `$remote_addr` and WebSocket's Upgrade/Connection are hayate's defaults", proxy_set_header),
    not_needed("proxy_http_version", "hayate speaks HTTP/1.1 with keep-alive to upstreams"),
    maps("proxy_read_timeout", Translated, "`proxy_timeout`", |t, d| set_duration(t, "proxy_timeout", d)),
    maps("proxy_send_timeout", Differs("one proxy_timeout covers the upstream's head and every pause in a body, both ways"), "`proxy_timeout`", |t, d| set_duration(t, "proxy_timeout", d)),
    maps("proxy_connect_timeout", Translated, "`proxy_connect_timeout` (global)", global_duration),
    not_needed("proxy_buffering", "hayate streams proxied bodies with back-pressure; a response it caches is still streamed"),
    not_needed("proxy_redirect", "hayate passes Location as the upstream writes it; with proxy_host = \"pass\" (the default) upstreams write the client's host"),
    maps("proxy_cache", Differs("hayate's cache follows RFC 9111 (Cache-Control, Vary); the zone's size is cache_size"), "`cache = \"on\"`", |t, d| {
        if d.arg(0) == "off" { return Ok(None) }
        only_options(t)?; t.keys().set("cache", Value::Str("on".into())); Ok(None)
    }),
    maps("proxy_cache_valid", Differs("a TTL caches every response without freshness information for that long, not only these statuses"), "`cache = \"TTL\"`", |t, d| {
        only_options(t)?;
        let ttl = d.args.last().ok_or("no time")?;
        t.keys().set("cache", Value::Str(values::duration(ttl)?)); Ok(None)
    }),
    not_needed("proxy_cache_path", "hayate's cache lives in memory (cache_size), shared by all workers"),
    not_needed("proxy_cache_key", "hayate keys by method, host, path and query (and Vary)"),
    not_needed("proxy_cache_lock", "hayate always coalesces concurrent misses"),
    not_needed("proxy_cache_use_stale", "hayate serves stale-while-revalidate and stale-if-error when the response allows it"),
    maps("proxy_intercept_errors", Translated, "`intercept_errors`", |t, d| set_bool(t, "intercept_errors", d)),
    maps("grpc_pass", Translated, "`proxy = [\"h2c://HOST:PORT\"]`", grpc_pass),
    maps("fastcgi_pass", Translated, "the site's `fastcgi` (`unix:PATH` or `HOST:PORT`)", fastcgi_pass),
    maps("fastcgi_param", Translated, "understood: hayate sends the CGI/1.1 parameters itself (SCRIPT_FILENAME, PATH_INFO, REQUEST_URI, HTTPS, ...); others are reported", fastcgi_param),
    maps("fastcgi_index", Translated, "`fastcgi_index` (index.php, hayate's default, is not written)", |t, d| {
        // nginx's fastcgi_index names the script for a URI ending in /.
        let name = d.arg(0).trim_start_matches('/');
        if name != "index.php" { t.keys().set("fastcgi_index", Value::Str(name.into())) }
        Ok(None)
    }),
    maps("fastcgi_split_path_info", Translated, "understood: hayate splits PATH_INFO after the script's name", |_, _| Ok(None)),
    maps("fastcgi_intercept_errors", Translated, "`intercept_errors`", |t, d| {
        if let Some(Target::Php(s)) = t.target { t.target = Some(Target::Site(s)) }
        set_bool(t, "intercept_errors", d)
    }),
    maps("fastcgi_hide_header", Translated, "`response_headers` with `-NAME` (removed)", |t, d| {
        t.keys().insert("response_headers", format!("-{}", d.arg(0)), String::new()); Ok(None)
    }),
    maps("proxy_hide_header", Translated, "`response_headers` with `-NAME` (removed)", |t, d| {
        only_options(t)?; t.keys().insert("response_headers", format!("-{}", d.arg(0)), String::new()); Ok(None)
    }),
    not_needed("fastcgi_buffers", BUFFERS), not_needed("fastcgi_buffer_size", BUFFERS),
    not_needed("fastcgi_read_timeout", "hayate waits proxy_timeout (60s) for php-fpm's answer"),
    maps("set", Translated, "understood where Debian's fastcgi-php.conf uses it; elsewhere reported", |t, _| {
        if t.in_php() { Ok(None) } else { Err("hayate has no variables of its own".into()) }
    }),
    maps("ssl_certificate", Translated, "`tls_cert`", |t, d| tls_file(t, "tls_cert", d)),
    maps("ssl_certificate_key", Translated, "`tls_key`", |t, d| tls_file(t, "tls_key", d)),
    maps("ssl_client_certificate", Translated, "`tls_client_ca`", |t, d| tls_file(t, "tls_client_ca", d)),
    maps("ssl_verify_client", Translated, "`tls_client_auth` (`on`: `require`, `optional`)", |t, d| {
        let mode = match d.arg(0) { "on" => "require", "optional" | "optional_no_ca" => "optional", _ => "off" };
        site_key(t, "tls_client_auth", Value::Str(mode.into()))
    }),
    maps("ssl_protocols", Translated, "hayate offers TLS 1.2 and 1.3 only (older versions are reported)", |_, d| {
        let old: Vec<&str> = d.args.iter().map(String::as_str).filter(|p| matches!(*p, "SSLv2" | "SSLv3" | "TLSv1" | "TLSv1.1")).collect();
        if old.is_empty() { Ok(None) } else { Ok(Some(format!("hayate never offers {}", old.join(", ")))) }
    }),
    not_needed("ssl_ciphers", TLS_BY_RUSTLS), not_needed("ssl_prefer_server_ciphers", TLS_BY_RUSTLS),
    not_needed("ssl_session_cache", TLS_BY_RUSTLS), not_needed("ssl_session_timeout", TLS_BY_RUSTLS),
    not_needed("ssl_session_tickets", TLS_BY_RUSTLS), not_needed("ssl_dhparam", "hayate uses ECDHE key exchange only: no DH parameters"),
    not_needed("ssl_ecdh_curve", TLS_BY_RUSTLS), not_needed("ssl_stapling", OCSP),
    not_needed("ssl_stapling_verify", OCSP), not_needed("ssl_trusted_certificate", OCSP),
    not_needed("ssl_buffer_size", BUFFERS),
    not_needed("http2", "hayate serves HTTP/2 on every listener by default (http2 = true)"),
    maps("add_header", Translated, "`response_headers` (hayate sets them on every status, as `always` does, and a route's add to its site's, where nginx's inner add_header replaces the outer ones)", add_header),
    maps("more_set_headers", Translated, "`response_headers`", more_set_headers),
    maps("error_page", Translated, "`error_pages` (a file under the root; `= CODE` and named locations are reported)", error_page),
    maps("client_max_body_size", Translated, "`max_body_size` (`0`: the largest hayate takes)", client_max_body_size),
    maps("allow", Translated, "`allow` (hayate: deny wins, then an allow list admits only its own; nginx takes the first that matches)", |t, d| access(t, "allow", d)),
    maps("deny", Translated, "`deny`; `deny all` alone in a regex or exact location: a rule answering 403", |t, d| access(t, "deny", d)),
    maps("auth_basic", Differs("hayate's WWW-Authenticate also names charset=\"UTF-8\" (RFC 7617), so non-ASCII passwords work"), "`basic_auth_realm` (`off`: `basic_auth = \"off\"`)", |t, d| {
        only_options(t)?;
        if d.arg(0) == "off" { t.keys().set("basic_auth", Value::Str("off".into())) }
        else { t.keys().set("basic_auth_realm", Value::Str(d.arg(0).into())) }
        Ok(None)
    }),
    maps("auth_basic_user_file", Differs("hayate takes bcrypt, SHA-crypt and argon2id hashes only: MD5 ($apr1$), SHA-1 and plain ones are refused at load (htpasswd -B makes bcrypt)"), "`basic_auth`", |t, d| set_str(t, "basic_auth", d.arg(0)).map(|_| None)),
    maps("auth_request", Differs("hayate asks the auth service directly (the URL its location proxies to), with the fields forward_auth_headers names; the service's 401 or redirect goes back as it came"), "`forward_auth` (the auth location's `proxy_pass` URL)", auth_request),
    not_needed("http2_idle_timeout", "an idle HTTP/2 connection is closed after keepalive_timeout (75s), as nginx 1.19.7 and later do"),
    maps("auth_request_set", Translated, "`forward_auth_copy` (the `$upstream_http_NAME` a `proxy_set_header` passes on)", auth_request_set),
    maps("limit_req_zone", Translated, "a `rate_limit` for the locations that use it (key `$binary_remote_addr`: `ip`)", limit_req_zone),
    maps("limit_req", Differs("hayate answers 429 with Retry-After past the limit (nginx: 503 unless limit_req_status)"), "`rate_limit = \"N/s burst=B [delay]\"`", limit_req),
    not_needed("limit_req_status", "hayate answers 429"),
    maps("limit_conn_zone", Translated, "a `conn_limit` for the locations that use it", limit_conn_zone),
    maps("limit_conn", Differs("hayate answers 429 with Retry-After past the limit (nginx: 503)"), "`conn_limit`", limit_conn),
    maps("set_real_ip_from", Translated, "`trusted_proxies` (global)", |t, d| {
        t.config.top.push("trusted_proxies", d.arg(0).into()); Ok(None)
    }),
    maps("real_ip_header", Translated, "X-Forwarded-For (and Forwarded) from `trusted_proxies` is hayate's default; `proxy_protocol`: the listener's", |_, d| match d.arg(0) {
        "X-Forwarded-For" | "x-forwarded-for" | "proxy_protocol" => Ok(None),
        other => Err(format!("hayate reads the client from X-Forwarded-For or Forwarded, not {other}")),
    }),
    maps("real_ip_recursive", Translated, "hayate always takes the right-most address that is not a trusted proxy", |_, d| {
        if d.arg(0) == "on" { Ok(None) } else { Ok(Some("hayate skips every trusted address, as real_ip_recursive on".into())) }
    }),
    maps("gzip", Translated, "`compress` (hayate compresses by default: br, zstd, gzip)", |t, d| set_bool(t, "compress", d)),
    maps("brotli", Translated, "`compress`", |t, d| set_bool(t, "compress", d)),
    not_needed("gzip_types", "hayate compresses text, JSON, JavaScript, XML, SVG and fonts (compress_types)"),
    not_needed("gzip_vary", "hayate sends Vary: Accept-Encoding on every negotiated response"),
    not_needed("gzip_proxied", "hayate compresses proxied responses too"),
    not_needed("gzip_comp_level", "hayate compresses files once at the highest level and streams at fast levels"),
    not_needed("gzip_min_length", "hayate skips bodies under compress_min_size (1 KiB)"),
    not_needed("gzip_buffers", BUFFERS), not_needed("gzip_http_version", "hayate negotiates by Accept-Encoding alone"),
    not_needed("gzip_disable", "the browsers gzip_disable names are long gone"),
    not_needed("gzip_static", "hayate serves .br, .zst and .gz siblings by default (precompressed)"),
    not_needed("brotli_types", "hayate compresses text, JSON, JavaScript, XML, SVG and fonts"),
    not_needed("brotli_comp_level", "hayate picks the levels"), not_needed("brotli_static", "hayate serves .br siblings by default"),
    maps("expires", Differs("hayate sets Cache-Control only, no Expires field"), "`cache_control` (`max`: `immutable`-like one year)", expires),
    maps("internal", Translated, "`internal = true`; in the PHP location, a rule answering its scripts 404 to clients (the front controller still runs them)", internal),
    maps("access_log", Translated, "`access_log` (global: hayate has one access log)", access_log),
    maps("log_format", Differs("hayate's templates name nginx's common variables; this one is reported"), "`access_log_format`", |_, _| Err("a named format: write its template as access_log_format".into())),
    maps("error_log", Translated, "`error_log` and `log_level` (global)", error_log),
    maps("autoindex", Translated, "`listing`", |t, d| set_bool(t, "listing", d)),
    not_needed("log_not_found", "hayate logs every request in the access log, not missing files in the error log"),
    not_needed("sendfile", "hayate sends large files with sendfile and keeps small ones in memory"),
    not_needed("tcp_nopush", "hayate writes each response head and small body in one write"),
    not_needed("tcp_nodelay", "hayate sets TCP_NODELAY"),
    not_needed("types_hash_max_size", "hayate has no hash tables to size"),
    not_needed("server_names_hash_bucket_size", "hayate has no hash tables to size"),
    not_needed("server_tokens", "hayate's Server field names no version (response_headers -Server removes it)"),
    not_needed("types", "hayate knows media types by extension itself"),
    not_needed("default_type", "hayate answers application/octet-stream for unknown extensions"),
    not_needed("charset", "hayate sends charset=utf-8 with text types"),
    not_needed("worker_processes", WORKERS), not_needed("worker_connections", "hayate's max_connections (16384) bounds clients"),
    not_needed("worker_rlimit_nofile", "hayate raises its open-file limit and sizes max_connections to it"),
    not_needed("events", WORKERS), not_needed("multi_accept", WORKERS), not_needed("use", WORKERS),
    not_needed("pid", "hayate is found through its control socket (hayate status)"),
    not_needed("user", "hayate drops privileges with user = NAME once its ports are bound (set it by hand)"),
    not_needed("include", "includes are read in place"),
    not_needed("load_module", "hayate has no dynamic modules: what a module's directives did is reported where they are used"),
    not_needed("client_body_buffer_size", BUFFERS), not_needed("client_header_buffer_size", BUFFERS),
    not_needed("large_client_header_buffers", "hayate takes heads up to max_header_bytes (32 KiB)"),
    not_needed("proxy_buffers", BUFFERS), not_needed("proxy_buffer_size", BUFFERS), not_needed("proxy_busy_buffers_size", BUFFERS),
    not_needed("output_buffers", BUFFERS), not_needed("open_file_cache", "hayate keeps hot files and their metadata in memory, invalidated by file-system events"),
    not_needed("client_body_timeout", "hayate's body_timeout (60s) bounds pauses in a request body"),
    not_needed("client_header_timeout", "hayate's header_timeout (10s) bounds a request head"),
    not_needed("send_timeout", "hayate's send_timeout (60s) bounds a client that does not read"),
    not_needed("reset_timedout_connection", "hayate closes timed-out connections at once"),
    not_needed("resolver", "hayate resolves upstream names with the system's resolver"),
    not_needed("resolver_timeout", "hayate resolves upstream names with the system's resolver"),
    not_needed("fastcgi_keep_conn", "hayate keeps FastCGI connections (fastcgi_max_conns)"),
    not_needed("ssl_early_data", "hayate offers no 0-RTT (replay-safe by design)"),
    unsupported("if", "hayate has no if: a [[site.rule]]'s conditions (host, method, header, query, file) cover the common uses; write one by hand"),
    unsupported("map", "hayate has no variables to map"),
    unsupported("geo", "hayate has no variables; allow and deny take CIDR blocks"),
    unsupported("sub_filter", "hayate does not rewrite bodies"),
    unsupported("ssi", "hayate does not process server-side includes"),
    unsupported("perl", "hayate runs no embedded code"),
    unsupported("lua", "hayate runs no embedded code"),
    unsupported("stream", "hayate serves HTTP only"),
    unsupported("mail", "hayate serves HTTP only"),
    unsupported("limit_except", "hayate's rules match methods (method = [...]) but cannot then pass on"),
    unsupported("satisfy", "hayate requires every check that is set"),
];

/// The row of `directive`.
pub fn row(directive: &str) -> Option<&'static Row> {
    ROWS.iter().find(|r| r.directive == directive)
}
