//! The option table. Each option is declared once, in [`options!`] below,
//! with its type, default, value name and help; from that come the CLI flag
//! (`--header-timeout`), the config file key (`header_timeout`), the env var
//! (`HAYATE_HEADER_TIMEOUT`), `--help` and docs/config.md.
//!
//! Options live at two scopes: global (listeners, workers, limits, logs) and
//! route (how a route serves files). Route options set at the top level of
//! the file, on the CLI or in the environment are defaults for every route;
//! a site's and a route's own values override them, merged once at load.

use std::num::NonZeroU32;
use std::path::PathBuf;

use crate::app::{AdminAddr, AppListen, AppProtocol, AppRef};
use crate::values::*;

/// The description of one option, for help and docs.
#[derive(Debug, Clone, Copy)]
pub struct OptDef {
    /// The config file key, `snake_case`.
    pub key: &'static str,
    /// Placeholder in help, `DURATION`.
    pub value_name: &'static str,
    /// The default in its string form; `None` when unset by default.
    pub default: Option<&'static str>,
    /// One-line help.
    pub help: &'static str,
    /// Whether the option can be given more than once (lists).
    pub repeated: bool,
    /// Whether the flag may be given without a value (booleans).
    pub flag: bool,
}

impl OptDef {
    /// The long CLI flag without dashes, `header-timeout`.
    pub fn flag_name(&self) -> String {
        self.key.replace('_', "-")
    }

    /// The environment variable, `HAYATE_HEADER_TIMEOUT`.
    pub fn env_name(&self) -> String {
        format!("HAYATE_{}", self.key.to_ascii_uppercase())
    }
}

macro_rules! options {
    (
        $(#[$layer_doc:meta])* layer $layer:ident;
        $(#[$resolved_doc:meta])* resolved $resolved:ident;
        table $table:ident;
        $( $field:ident : $ty:ty = $default:tt, $value_name:literal, $help:literal; )*
    ) => {
        $(#[$layer_doc])*
        #[derive(Debug, Clone, Default)]
        pub struct $layer {
            $( #[doc = $help] pub $field: Option<$ty>, )*
        }

        $(#[$resolved_doc])*
        #[derive(Debug, Clone)]
        pub struct $resolved {
            $( #[doc = $help] pub $field: resolved_type!($ty, $default), )*
        }

        impl $resolved {
            /// The keys whose values differ from `other`'s, in table order
            /// (what a reload reports as changed). Compared by their debug
            /// form: every option's value prints all of itself, and a reload
            /// is rare enough for the formatting not to matter.
            pub fn changed_keys(&self, other: &$resolved) -> Vec<&'static str> {
                let mut changed = Vec::new();
                $( if format!("{:?}", self.$field) != format!("{:?}", other.$field) {
                    changed.push(stringify!($field));
                } )*
                changed
            }
        }

        /// The table of these options, in declaration order.
        pub const $table: &[OptDef] = &[
            $( OptDef {
                key: stringify!($field),
                value_name: $value_name,
                default: default_str!($default),
                help: $help,
                repeated: <$ty as OptValue>::REPEATED,
                flag: <$ty as OptValue>::FLAG,
            }, )*
        ];

        impl $layer {
            /// Sets `key` from its string forms (several for a repeated CLI
            /// flag). `Ok(false)` when the key is not one of these options.
            pub fn set_strs(&mut self, key: &str, values: &[String]) -> Result<bool, String> {
                match key {
                    $( stringify!($field) => {
                        self.$field = Some(<$ty as OptValue>::parse_many(values)?);
                        Ok(true)
                    } )*
                    _ => Ok(false),
                }
            }

            /// Sets `key` from a TOML value. `Ok(false)` when the key is not one
            /// of these options.
            pub fn set_toml(&mut self, key: &str, value: &toml::de::DeValue<'_>) -> Result<bool, String> {
                match key {
                    $( stringify!($field) => {
                        self.$field = Some(<$ty as OptValue>::parse_toml(value)?);
                        Ok(true)
                    } )*
                    _ => Ok(false),
                }
            }

            /// Fills every unset option from `parent` (nginx's merge of a
            /// location with its server).
            pub fn inherit(&mut self, parent: &$layer) {
                $( if self.$field.is_none() { self.$field = parent.$field.clone(); } )*
            }

            /// Overrides with every option `other` sets.
            pub fn override_with(&mut self, other: &$layer) {
                $( if other.$field.is_some() { self.$field = other.$field.clone(); } )*
            }

            /// Applies defaults.
            pub fn resolve(&self) -> $resolved {
                $resolved {
                    $( $field: resolve_field!(self.$field, $ty, $default), )*
                }
            }
        }
    };
}

macro_rules! resolved_type {
    ($ty:ty, unset) => { Option<$ty> };
    ($ty:ty, $default:literal) => { $ty };
}

macro_rules! default_str {
    (unset) => {
        None
    };
    ($default:literal) => {
        Some($default)
    };
}

macro_rules! resolve_field {
    ($value:expr, $ty:ty, unset) => {
        $value.clone()
    };
    ($value:expr, $ty:ty, $default:literal) => {
        match &$value {
            Some(v) => v.clone(),
            None => default_of::<$ty>($default),
        }
    };
}

/// Parses a default from the table; every default is checked by a unit test.
fn default_of<T: OptValue>(text: &'static str) -> T {
    match T::parse_str(text) {
        Ok(v) => v,
        Err(e) => panic!("bad default {text:?} in the option table: {e}"),
    }
}

options! {
    /// Global options from one source (file, env or CLI), all optional.
    layer GlobalLayer;
    /// Global options with defaults applied.
    resolved GlobalOptions;
    table GLOBAL_OPTIONS;
    listen: Vec<Listen> = "127.0.0.1:8080", "ADDR",
        "Address to listen on: HOST:PORT, [V6]:PORT, localhost:PORT (127.0.0.1), PORT (every interface, 0.0.0.0) or unix:PATH, plain HTTP; https://HOST:PORT for HTTPS; repeat for more; ADDR proxy_protocol: every connection starts with a PROXY protocol header (v1 or v2, before TLS) from a trusted_proxies peer, and the client it names is the client; ADDR h2c: plain HTTP/2 only, with prior knowledge (gRPC and other h2c clients; no HTTP/1.1)";
    http2: bool = "true", "BOOL",
        "Serve HTTP/2: over TLS when the client offers it (ALPN h2), and h2c with prior knowledge on plain listeners";
    http3: bool = "false", "BOOL",
        "Serve HTTP/3 (QUIC, RFC 9114) on the UDP port of every https:// listener, with the same certificates, and advertise it on their TCP responses (Alt-Svc: h3=\":PORT\"; ma=86400); TLS 1.3 only, no connection migration";
    http3_early_data: EarlyData = "off", "off|safe",
        "0-RTT (early data) on HTTP/3, which an attacker can replay: off (the default) offers none; safe accepts it, serves GET, HEAD and OPTIONS sent in it (marked Early-Data: 1 upstream, RFC 8470) and answers anything else sent early with 425 Too Early (the client sends it again after the handshake)";
    http3_gso: bool = "true", "BOOL",
        "Send HTTP/3 datagrams in batches with UDP segmentation offload (GSO) where the kernel has it; false sends them one by one (for NICs or tunnels that mishandle GSO)";
    http3_retry_above: u32 = "64", "N",
        "Handshakes in progress on one worker past which a new HTTP/3 client must first prove its address with a QUIC Retry (a round trip more; spoofed Initial floods then cost no handshake state); 0 asks every client";
    tls: TlsMode = unset, "internal|acme",
        "Automatic HTTPS certificates for the site names (tls_names): acme obtains and renews them from acme_directory; internal issues them (and for localhost and the listeners' addresses) from a local CA kept in state_dir, whose path is printed";
    tls_names: Vec<String> = unset, "NAME",
        "Names automatic certificates are for (default: every site's hosts; a wildcard *.example.com is ordered over dns-01, which needs acme_dns_server or acme_dns_hook)";
    acme_directory: String = "https://acme-v02.api.letsencrypt.org/directory", "URL",
        "ACME directory for tls = acme (Let's Encrypt staging: https://acme-staging-v02.api.letsencrypt.org/directory)";
    acme_email: String = unset, "EMAIL",
        "Contact address of the ACME account (expiry notices)";
    acme_ca_root: PathBuf = unset, "FILE",
        "CA certificate (PEM) that a private ACME server's HTTPS is verified against";
    acme_challenge: AcmeChallenge = "auto", "auto|http-01|tls-alpn-01|dns-01",
        "ACME challenge: http-01 is answered on the plain-HTTP listener (port 80), tls-alpn-01 on the https one (443), dns-01 by a TXT record put in DNS over RFC 2136 (acme_dns_server) or by acme_dns_hook; auto: http-01 when there is a plain-HTTP TCP listener. Wildcard names (*.example.com) are ordered over dns-01 whatever this says; a [[site]] may set its own for its hosts";
    acme_dns_server: DnsAddr = unset, "IP:PORT",
        "dns-01: the primary DNS server of the names' zone, which takes RFC 2136 dynamic updates (port 53 unless given)";
    acme_dns_tsig_key: TsigKey = unset, "NAME:ALG:SECRET|FILE",
        "dns-01: the TSIG key that signs the updates to acme_dns_server: NAME:hmac-sha256:BASE64SECRET, or the path of a key file as tsig-keygen writes it (starting with / or ., so the secret can stay out of the config); the secret is never logged";
    acme_dns_zone: String = unset, "ZONE",
        "dns-01: the zone the TXT records go in (default: found by asking acme_dns_server for the SOA of _acme-challenge.NAME)";
    acme_dns_hook: Vec<String> = unset, "COMMAND",
        "dns-01: a program (and its first arguments) that puts the TXT record in DNS, called as COMMAND present FQDN VALUE and COMMAND cleanup FQDN VALUE (lego's exec provider; FQDN ends with a dot); exit 0 for done, its stderr is in the error otherwise";
    acme_dns_hook_timeout: Dur = "60s", "DURATION",
        "dns-01: how long one acme_dns_hook call may run before it is killed";
    acme_dns_resolver: DnsAddr = unset, "IP:PORT",
        "dns-01: the server asked whether the TXT record is there before the CA is told to look (default: acme_dns_server; needed with acme_dns_hook)";
    acme_dns_propagation_timeout: Dur = "2m", "DURATION",
        "dns-01: how long to wait for the TXT record to be seen (asked every second or so) before the order fails and is retried later";
    tls_on_demand: bool = "false", "BOOL",
        "On-demand TLS: a handshake for a name no certificate has asks tls_on_demand_ask whether to serve it and, if allowed, obtains its certificate from acme_directory (over acme_challenge) while the handshake waits, then serves and renews it like any other; refused names get a TLS alert. Needs tls_on_demand_ask";
    tls_on_demand_ask: String = unset, "URL",
        "On-demand TLS: asked GET URL?domain=NAME (plain http://HOST:PORT/PATH, the app beside hayate) before a certificate is obtained for NAME; a 2xx answer allows it, anything else refuses";
    tls_on_demand_timeout: Dur = "8s", "DURATION",
        "On-demand TLS: how long a handshake waits for the ask and the certificate (less than tls_handshake_timeout); past it the handshake gets an alert, and the order goes on for the next one";
    tls_on_demand_rate: u32 = "10", "N",
        "On-demand TLS: certificates ordered per minute at most, for all names together (a burst of as many); a handshake past it gets an alert (Let's Encrypt allows 300 new orders per 3 hours)";
    tls_on_demand_refusal_ttl: Dur = "10m", "DURATION",
        "On-demand TLS: how long a name that was refused, or whose order failed, is refused again without asking (at most 10,000 names kept)";
    tls_cert: Vec<PathBuf> = unset, "FILE",
        "Certificate chain (PEM, leaf first) for https:// listeners; repeat with tls_key for each certificate; SNI picks among them by their names; changed files are reloaded";
    tls_key: Vec<PathBuf> = unset, "FILE",
        "Private key (PEM) of the tls_cert in the same position; should be readable by the owner only";
    tls_client_auth: ClientAuth = "off", "off|optional|require",
        "Client certificates (mutual TLS) on https listeners, per site in a [[site]]: require refuses a handshake without a certificate that tls_client_ca verifies (a TLS alert); optional asks for one, and one that is sent must verify; the verified certificate reaches upstreams as X-Client-Cert-* fields and FastCGI as SSL_CLIENT_* params";
    tls_client_ca: PathBuf = unset, "FILE",
        "CA certificates (PEM bundle) that client certificates must chain to, for tls_client_auth (also per site)";
    tls_client_crl: Vec<PathBuf> = unset, "FILE",
        "Certificate revocation lists (PEM or DER) of the tls_client_ca: a revoked client certificate is refused (also per site; read at start and reload)";
    tls_handshake_timeout: Dur = "10s", "DURATION",
        "Time for a client to complete the TLS handshake (and to send its first byte); then it is closed";
    https_redirect: bool = "true", "BOOL",
        "With an https:// listener, requests on plain-HTTP TCP listeners get 308 to https (path and query kept; ACME challenges excepted)";
    state_dir: PathBuf = unset, "DIR",
        "Where hayate keeps its local CA and certificates (default: $XDG_DATA_HOME/hayate, ~/.local/share/hayate, or /var/lib/hayate for root)";
    workers: Workers = "auto", "N|auto",
        "Worker threads, each with its own event loop and listener (auto = one per core)";
    grace_period: Dur = "10s", "DURATION",
        "On SIGTERM/SIGINT, how long in-flight requests may run before exit";
    max_connections: u32 = "16384", "N",
        "Open client connections across all workers; more are refused with 503. A low open-file limit lowers it: past what the limit allows (the limit less a reserve for upstream connections, files and logs; said at startup), clients wait in the listen backlog and idle keep-alive connections are closed to make room";
    header_timeout: Dur = "10s", "DURATION",
        "Time to receive a request's whole head once it has begun (408 after); a new connection that sends nothing is closed after it, without a response";
    keepalive_timeout: Dur = "75s", "DURATION",
        "How long an idle keep-alive connection is kept open";
    send_timeout: Dur = "60s", "DURATION",
        "Longest pause of a client that does not read its response before it is closed";
    http2_goaway_timeout: Dur = "2s", "DURATION",
        "How long an HTTP/2 connection being closed (idle past keepalive_timeout, or at shutdown once its streams are done) waits for the client to answer the GOAWAY's PING before it is dropped";
    max_request_line: Size = "8KiB", "SIZE",
        "Longest request line (method, target, version); longer gets 414";
    max_header_bytes: Size = "32KiB", "SIZE",
        "Largest request head (request line and headers); larger gets 431";
    max_headers: u32 = "100", "N",
        "Most request header fields; more gets 431";
    access_log: AccessLog = "stdout", "off|stdout|stderr|PATH",
        "Where the access log goes";
    access_log_format: LogFormat = "combined", "combined|common|json|ecs|TEMPLATE",
        "Access log line format: a preset (combined: NCSA combined as nginx writes it, which GoAccess and other tools read; common; json; ecs: Elastic Common Schema) or a template of $variables, nginx's names where nginx has one: $client_ip ($remote_addr), $remote_user, $time_local, $time_iso8601, $request, $request_method, $request_uri, $host, $status, $body_bytes_sent, $http_NAME (a request field: $http_referer, $http_user_agent), $request_id, $trace_id (the W3C trace id when otel_endpoint is set, else -), $route, $protocol, $tls_version, $cache, $request_time, $upstream_connect_time, $upstream_header_time (seconds with ms; - where no upstream answered); values are escaped (\\xHH), so no value can forge a line";
    access_log_size: Size = unset, "SIZE",
        "Rotate a file access log at this size (access.log becomes access.log.1; off unless set; SIGUSR1 reopens it after an outside rotation)";
    access_log_age: Dur = unset, "DURATION",
        "Also rotate a file access log once it is this old (1d: one file a day; off unless set)";
    access_log_keep: u32 = "5", "N",
        "Rotated access log files kept";
    error_log: PathBuf = unset, "FILE",
        "Where hayate's own log goes (default: stderr, which systemd's journal takes); reopened on SIGUSR1";
    slow_request: Dur = unset, "DURATION",
        "Log requests slower than this (head read to response written) to the error log at WARN, with their upstream connect and head times, route, status and request id (off unless set)";
    otel_endpoint: OtelEndpoint = unset, "URL",
        "OpenTelemetry collector to export a span per request to (OTLP, http://HOST:PORT or https://; http/protobuf posts to /v1/traces unless the URL has a path); tracing is off unless set. W3C traceparent is read from requests and sent to upstreams (FastCGI: HTTP_TRACEPARENT) with hayate's span as the parent";
    otel_ca: PathBuf = unset, "FILE",
        "CA certificates (PEM) an https:// otel_endpoint is verified against, instead of the system's";
    otel_tls_cert: PathBuf = unset, "FILE",
        "Client certificate chain (PEM, leaf first) presented to an https:// otel_endpoint that asks for one (mutual TLS, OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE); with otel_tls_key";
    otel_tls_key: PathBuf = unset, "FILE",
        "Private key (PEM) of otel_tls_cert";
    otel_headers: OtelHeaders = unset, "NAME=VALUE[,...]",
        "Header fields sent with every export, as OTEL_EXPORTER_OTLP_HEADERS writes them (api-key=SECRET,x-tenant=a; values percent-encoded): a hosted collector's credentials. Never logged";
    otel_protocol: OtelProtocol = "http/protobuf", "grpc|http/protobuf",
        "How spans reach otel_endpoint: http/protobuf (OTLP/HTTP, port 4318; the OpenTelemetry SDKs' default) or grpc (OTLP/gRPC, HTTP/2: h2c, or h2 over https://; port 4317)";
    otel_sample: SampleRatio = "1", "RATIO",
        "Share of traces exported, 0 to 1, decided by the trace id (so every hop decides alike); a request whose traceparent says not sampled is not exported, one that says sampled still is only within this share";
    otel_service_name: String = "hayate", "NAME",
        "service.name of the exported spans";
    otel_queue: u32 = "2048", "N",
        "Spans waiting for export at most, per worker thread (about 650 bytes each); while the collector is slow or down, more are dropped (hayate_otel_spans_dropped_total), never waited for";
    otel_timeout: Dur = "10s", "DURATION",
        "Time for the collector to take one batch of spans (connect and answer); then the batch is dropped";
    log_level: LogLevel = "info", "LEVEL",
        "Error log level: off, error, warn, info or debug";
    file_cache_size: Size = "64MiB", "SIZE",
        "Memory for the bodies of hot small files, per static root";
    file_cache_max_file: Size = "256KiB", "SIZE",
        "Largest file kept in memory; larger files are sent with sendfile";
    file_cache_revalidate: Dur = "5s", "DURATION",
        "Fallback re-check of cached files for file systems without change events";
    proxy_connect_timeout: Dur = "5s", "DURATION",
        "Time to connect to an upstream member; then the next member is tried (504 when none is left)";
    proxy_tunnel_timeout: Dur = "1h", "DURATION",
        "An upgraded connection (WebSocket) quiet both ways this long is closed (HAProxy's timeout tunnel; apps that ping, as socket.io does every 25 s, never meet it)";
    proxy_keepalive: Dur = "4s", "DURATION",
        "Idle time of pooled upstream connections when the upstream sends no Keep-Alive hint";
    proxy_idle: u32 = "1024", "N",
        "Idle keep-alive connections kept per upstream member and worker; more are closed";
    proxy_replay_buffer: Size = "64KiB", "SIZE",
        "Request bodies up to this size are buffered so a failed reused connection can be retried";
    proxy_max_conns: u32 = "0", "N",
        "Requests in flight per upstream member and worker (0: no limit); more wait in the queue";
    proxy_queue: u32 = "1024", "N",
        "Requests that may wait (per group and worker) when every member is at its limit; more get 503";
    proxy_queue_timeout: Dur = "10s", "DURATION",
        "Longest wait in that queue before 503 with Retry-After; also how long a Unix member whose listen queue is full is waited for (a busy app, not a failed one)";
    proxy_max_fails: u32 = "3", "N",
        "Failures in a row (connect refused or timed out, connection lost before the answer) that take a member out; 0: never";
    proxy_fail_timeout: Dur = "10s", "DURATION",
        "How long a member taken out gets no requests; then requests try it again (one more failure takes it out again)";
    proxy_balance: BalanceSpec = unset, "POLICY",
        "least_conn, round_robin, sticky[:COOKIE] (hayate's own cookie sends a client back to the member that served it), hash:ip, hash:header:NAME or hash:cookie:NAME (consistent); default: sticky for hayate run's instances (socket.io needs it), least_conn otherwise";
    proxy_health_interval: Dur = "5s", "DURATION",
        "Time between health probes (each waits for its answer up to proxy_connect_timeout)";
    trusted_proxies: Vec<IpNet> = unset, "CIDR",
        "Peers (a CDN, a load balancer) trusted to say who the client is: from them, the client is the right-most X-Forwarded-For (else Forwarded: for=) address that is not itself trusted, and X-Forwarded-Proto/-Host are kept; from anyone else these fields are ignored and replaced (default: none)";
    proxy_trusted: Vec<IpNet> = unset, "CIDR",
        "Former name of trusted_proxies (both lists are trusted)";
    proxy_tls_ca: PathBuf = unset, "FILE",
        "CA certificates (PEM) that https:// upstreams are verified against, instead of the system's";
    proxy_tls_verify: bool = "true", "BOOL",
        "Verify https:// upstreams' certificates and names; false accepts any (logged at start: for a test setup only)";
    proxy_via: bool = "false", "BOOL",
        "Add Via: 1.1 hayate to proxied requests and responses";
    proxy_http2: UpstreamHttp2 = "off", "off|on|auto",
        "What https:// upstreams speak: off, HTTP/1.1; on, HTTP/2 (ALPN h2, multiplexed: streams share a connection up to the member's SETTINGS_MAX_CONCURRENT_STREAMS, proxy_max_conns then bounds connections); auto, what the members choose when offered both by ALPN, learned at the route's first connection (kept for its requests) and again after a connect fails (a route mixing https:// and http:// members speaks HTTP/1.1). h2c://HOST:PORT members always speak HTTP/2 in plain text (gRPC servers)";
    proxy_interim: u32 = "16", "N",
        "Interim responses (103 Early Hints, 102 Processing) passed on to the client per request, ahead of the final one; more are dropped; 0: none";
    fastcgi_max_conns: u32 = "5", "N",
        "Connections to each FastCGI member (php-fpm) across all workers, kept ones included; each holds a php-fpm child, so keep it at most pm.max_children (Debian's default pool: 5); more requests wait in the queue";
    admin: AdminAddr = unset, "ADDR",
        "Admin listener (GET /metrics for Prometheus, GET /status): HOST:PORT, PORT (on 127.0.0.1) or unix:PATH; off unless set";
    app_listen: AppListen = unset, "tcp|tcp:BASE|unix",
        "hayate run: instances listen on a free 127.0.0.1 port, on BASE+i (BASE+N+i for a replacement), or on a Unix socket, given in PORT; on TCP they get HOST=HOSTNAME=127.0.0.1, Node apps are held to loopback, and an instance found listening beyond loopback is warned about (default: tcp; unix for hayate php)";
    app_protocol: AppProtocol = "http", "http|fastcgi",
        "hayate run: what the instances speak; fastcgi (php-fpm, as hayate php runs it) runs the scripts under the routes' roots as fastcgi does";
    app_reload_parallel: NonZeroU32 = "1", "N",
        "hayate run: instances replaced at once in a rolling reload (each new one is ready before its old one stops)";
    app_max_memory: Size = unset, "SIZE",
        "hayate run: replace an instance whose RSS passes this (new one first, then drain)";
    app_max_requests: u32 = unset, "N",
        "hayate run: replace an instance after this many requests";
    app_start_timeout: Dur = "30s", "DURATION",
        "hayate run: time for a new instance to accept on its socket";
    app_ready_path: String = unset, "PATH",
        "hayate run: an instance gets traffic once GET PATH answers 2xx (default: once its socket accepts)";
    app_log: PathBuf = unset, "FILE",
        "hayate run: write the instances' output here (rotated) instead of hayate's log";
    app_log_size: Size = "10MiB", "SIZE",
        "hayate run: size at which the app log is rotated";
    app_log_keep: u32 = "5", "N",
        "hayate run: rotated app log files kept";
    app_watch_debounce: Dur = "300ms", "DURATION",
        "hayate run: with watch (or --watch), how long the app's files must stay unchanged after a change before the app restarts (an editor's save or a git checkout writes many files within ~100 ms: one restart for them all)";
    app_watch_max_dirs: u32 = "10000", "N",
        "hayate run: most directories watched for one app (one inotify watch each, out of the user's fs.inotify.max_user_watches); past it the rest are not watched, and the log says so";
    app_build_timeout: Dur = "300s", "DURATION",
        "hayate run: longest run of an app's build step before it is stopped and counted as failed (the running instances keep serving)";
    control: PathBuf = unset, "PATH",
        "Control socket for hayate status, reload, upgrade, stop, logs and purge (default: one per user and directory in $XDG_RUNTIME_DIR/hayate, /run/hayate for root, else the temp dir; a further hayate started in the same directory gets its own)";
    user: String = unset, "USER",
        "Once its sockets are bound (ports below 1024 need root), hayate runs as this user (name or uid), and so does its app";
    group: String = unset, "GROUP",
        "The group hayate runs as with user (default: the user's own group)";
    shared: String = unset, "redis://HOST:PORT[/DB]",
        "Redis (or Valkey) that several hayates share: responses one box fetched serve the others (L2), a purge or an invalidation on one box reaches every box's cache, and with tls = acme one box orders each certificate and every box serves it (off unless set)";
    shared_timeout: Dur = "50ms", "DURATION",
        "Longest wait for any Redis call: a local cache miss waits at most this for the shared tier, and a Redis slower or down delays nothing else";
    shared_max_object: Size = "1MiB", "SIZE",
        "Largest response body written to the shared cache tier (L2); larger ones stay in each box's own cache";
    shared_key: String = unset, "HEX",
        "With shared and tls = acme: 64 hex digits (openssl rand -hex 32), the same on every box, that encrypt the ACME keys kept in Redis; give it as HAYATE_SHARED_KEY rather than on the command line";
    app_user: String = unset, "USER",
        "The user the app runs as, when hayate itself stays root (not with user: the app then runs as that user)";
    cache_size: Size = "256MiB", "SIZE",
        "Memory for the response cache, shared by every route and worker";
    cache_max_object: Size = "8MiB", "SIZE",
        "Largest response body the cache stores";
    cache_lock_timeout: Dur = "5s", "DURATION",
        "Longest a request waits for another's fetch of the same URL before going to the upstream itself";
    cache_lock_waiters: u32 = "10000", "N",
        "Most requests waiting for one fetch; more go to the upstream";
    cache_hit_for_miss: Dur = "5s", "DURATION",
        "How long a URL whose response was not storable skips waiting for other fetches";
    compress_cache_size: Size = "64MiB", "SIZE",
        "Memory for compressed variants of files, shared by every worker (least recently used go first)";
    compress_max_file: Size = "8MiB", "SIZE",
        "Largest file compressed in the background; larger ones are served as they are (or from a sibling)";
    rate_limit_max_keys: u32 = "100000", "N",
        "Most clients (keys) each rate_limit remembers; past it the least recently limited are forgotten (about 40 bytes each)";
    conn_limit_max_keys: u32 = "100000", "N",
        "Most clients (keys) each conn_limit counts at once (one per client with a request in flight, about 40 bytes each); a new client past it gets 503 with Retry-After";
    compress_queue: u32 = "1024", "N",
        "Files that may wait for the background compressor; more are served uncompressed and retried later";
}

options! {
    /// Route options from one source (file, env or CLI), all optional.
    layer RouteLayer;
    /// Route options with defaults applied.
    resolved RouteOptions;
    table ROUTE_OPTIONS;
    root: PathBuf = unset, "[PREFIX=]DIR",
        "Directory served (by default the request path is looked up under it); on the command line also PREFIX=DIR, repeatable: PREFIX's files and scripts come from DIR (a route of its own with the prefix stripped, as nginx's alias; a missing file there is a 404; in a file: a [[site.route]] with prefix, root and strip_prefix = true)";
    proxy: Vec<ProxySpec> = unset, "[PREFIX=]URL[,URL]",
        "Upstream group (http://HOST:PORT, https://HOST[:PORT] or unix:PATH; HTTP/2 in plain text, as gRPC servers speak it: h2c://HOST:PORT or unix+h2c:PATH); without PREFIX it gets what matches no file";
    fastcgi: Vec<FastCgiSpec> = unset, "[PREFIX=]unix:PATH|HOST:PORT[,ADDR]",
        "FastCGI application (php-fpm) running this route's scripts under root: files first, then scripts, then the front controller (fastcgi_index)";
    fastcgi_index: String = "index.php", "FILE",
        "FastCGI front controller under root: runs for paths that match no file, with the original URI (nginx try_files $uri $uri/ /index.php); empty: 404 instead";
    fastcgi_index_path_info: bool = "false", "BOOL",
        "The front controller's PATH_INFO is the request's path (nginx's try_files ... /index.php$request_uri, as Nextcloud's config has it); false: none (try_files ... /index.php?$args, as WordPress's)";
    fastcgi_extensions: Vec<String> = ".php", "SUFFIX",
        "File name endings run by the FastCGI application; any other file is only ever served as a file (repeat for more)";
    app: AppRef = "false", "true|NAME",
        "Send what matches no file to a supervised app: true, the only one (hayate run's, or the file's [app]); NAME, the [[app]] of that name (an app no route names is a worker: supervised, never proxied to)";
    proxy_timeout: Dur = "60s", "DURATION",
        "Time for an upstream's response head, and longest pause in a proxied body (504); per site or route (a slow report endpoint may wait longer than the rest)";
    proxy_host: String = "pass", "pass|upstream|HOST",
        "Host sent to this route's upstream: the client's, the member's host:port, or a fixed name";
    proxy_health_check: String = unset, "PATH|grpc[:SERVICE]|off",
        "Probe every member of this route's upstream every proxy_health_interval: PATH, with GET PATH (over HTTP/2 to HTTP/2 members), a member is used only while it answers 2xx; grpc, with gRPC's health protocol (grpc.health.v1.Health/Check, the server as a whole or SERVICE), a member is used only while it answers SERVING (HTTP/2 members only); off: none, members judged by their answers alone";
    proxy_tls_cert: PathBuf = unset, "FILE",
        "Client certificate chain (PEM, leaf first) this route presents to https:// upstreams that ask for one (mutual TLS); with proxy_tls_key";
    proxy_tls_key: PathBuf = unset, "FILE",
        "Private key (PEM) of proxy_tls_cert";
    proxy_protocol: UpstreamProxyProtocol = "off", "off|v2",
        "v2: each connection to this route's upstream starts with a PROXY protocol v2 header naming the client (for upstreams that read it: HAProxy, nginx's listen ... proxy_protocol, another hayate); such a connection carries one client's request and is closed after it, never pooled";
    grpc_web: bool = "false", "BOOL",
        "Translate browsers' gRPC-Web calls (application/grpc-web, and base64 application/grpc-web-text, over any HTTP version) to gRPC for this route's HTTP/2 upstream (h2c://, unix+h2c: or https:// with proxy_http2 = on) and back, the status as the body's last frame: a browser app calls a gRPC server with no Envoy between";
    strip_prefix: bool = "false", "BOOL",
        "Remove the route's prefix from the path before looking it up under root, and before sending the request to the route's upstream (nginx's proxy_pass with a URI, Caddy's handle_path)";
    index: String = "index.html", "FILE",
        "File served for a directory request";
    listing: bool = "false", "BOOL",
        "List directories without an index file (HTML, or JSON when asked for)";
    fallback: String = unset, "FILE",
        "SPA fallback: a file under root answered with 200 for paths that match no file";
    dotfiles: bool = "false", "BOOL",
        "Serve files and directories whose name starts with a dot (.well-known always is)";
    symlinks: Symlinks = "owner", "owner|never|always",
        "Symbolic links that lead outside root: owner follows one when the link and what it leads to have the same owner (every link on the path; nginx's disable_symlinks if_not_owner), so a packaged app's links into /usr/share work and an uploaded link to a system file does not; never refuses them; always follows them. A file or script refused is a 403, with a warning naming it";
    symlinks_outside_root: bool = unset, "BOOL",
        "Old spelling of symlinks: true is always, false is never (where both are set, symlinks wins)";
    allow: Vec<IpNet> = unset, "CIDR",
        "Only clients in these blocks (IPv4 or IPv6, or single addresses) are served; everyone else gets 403 (deny wins over allow)";
    deny: Vec<IpNet> = unset, "CIDR",
        "Clients in these blocks get 403";
    basic_auth: AuthFile = unset, "FILE|off",
        "An htpasswd file (bcrypt, SHA-crypt or argon2id hashes, as htpasswd -B makes): requests need a user and password from it, else 401; reloaded when it changes; off: none on this route";
    basic_auth_realm: String = "restricted", "TEXT",
        "The realm basic_auth names in WWW-Authenticate (browsers show it)";
    forward_auth: String = unset, "URL|off",
        "An auth service (Authelia, Authentik, oauth2-proxy: http://HOST:PORT/PATH or https://...) asked about each request first: a 2xx lets it through, any other answer (401, 403, a redirect to a login page) goes back to the client as it came; the service down or slow refuses (503)";
    forward_auth_headers: FieldNames = "cookie,authorization,accept", "LIST",
        "Request header fields sent to forward_auth (with X-Forwarded-Method/-Uri/-Host/-Proto/-For and X-Original-URL)";
    forward_auth_copy: FieldNames = "", "LIST",
        "Header fields of forward_auth's 2xx answer copied into the request sent on (Remote-User, Remote-Groups, ...): a 2xx without one of them is refused (503); a client's own copies of these names are always removed";
    forward_auth_timeout: Dur = "5s", "DURATION",
        "Longest wait for forward_auth's answer (connect included); then the request is refused with 503";
    rate_limit: RateSpec = unset, "N/s|N/m [burst=B] [delay]|off",
        "Requests per client (see rate_limit_key) and second or minute, with burst more taken at once (with delay: made to wait their turn, as nginx's limit_req without nodelay); more get 429 with Retry-After; counted for the whole box, every worker together";
    rate_limit_key: RateKey = "ip", "ip|header:NAME|cookie:NAME|route",
        "What rate_limit counts by: the client's address (IPv6 by rate_limit_ipv6_prefix), a header's or a cookie's value (requests without it: by address), or the route as a whole";
    rate_limit_ipv6_prefix: u8 = "64", "BITS",
        "IPv6 clients are counted by this prefix (a host usually holds a whole /64, and could otherwise spray its addresses)";
    response_headers: HeaderRules = unset, "NAME: VALUE",
        "Header fields of this route's responses, every status (hayate's own errors too): Name = \"v\" sets, +Name adds a value, ?Name sets where the response has none, -Name removes (Server too); values may name $client_ip, $host, $scheme, $request_uri, $query and $path; a route's rules come after its site's (they add up, unlike nginx's add_header)";
    request_headers: HeaderRules = unset, "NAME: VALUE",
        "Header fields of the requests sent to this route's upstream, as response_headers (X-Real-IP = \"$client_ip\")";
    security_headers: bool = "false", "BOOL",
        "Adds X-Content-Type-Options: nosniff, Referrer-Policy: strict-origin-when-cross-origin, X-Frame-Options: SAMEORIGIN and, over HTTPS, Strict-Transport-Security (1 year) to responses that set none of their own";
    cors: CorsOrigins = unset, "ORIGIN[,ORIGIN]|*|off",
        "Origins whose pages may call this route (https://app.example.com, or * for any): their preflights (OPTIONS with Access-Control-Request-Method) are answered by hayate, before any auth, and answers to them carry Access-Control-Allow-Origin; other origins get neither";
    cors_methods: String = "GET, HEAD, POST, PUT, PATCH, DELETE", "LIST",
        "Methods a cors preflight allows";
    cors_headers: String = unset, "LIST",
        "Request header fields a cors preflight allows (default: the ones it asks for)";
    cors_expose: String = unset, "LIST",
        "Response header fields cors pages may read beyond the basic ones (Access-Control-Expose-Headers)";
    cors_credentials: bool = "false", "BOOL",
        "cors requests may carry cookies and Authorization (never with cors = *: the origin is then named)";
    cors_max_age: Dur = "10m", "DURATION",
        "How long browsers keep a cors preflight's answer (Chrome keeps at most 2h)";
    body_timeout: Dur = "60s", "DURATION",
        "Longest pause between two reads of a request body (408 after); per site or route (an upload endpoint for slow mobile clients may wait longer than the rest)";
    max_body_size: Size = "1MiB", "SIZE",
        "Largest request body accepted; larger gets 413 (per site or route: large uploads only where they belong)";
    internal: bool = "false", "BOOL",
        "Only for X-Accel-Redirect from an upstream (and a site rule's rewrite): a client asking for this route directly gets 404 (nginx's internal). Its files are served with full static semantics (ranges, conditionals, compression); an upstream route is asked with GET";
    x_sendfile: PathBuf = unset, "DIR",
        "The directory under which this route's upstream may name a file with X-Sendfile: /abs/path (anything else is a 500 with a log line); X-Accel-Redirect needs no setting (it names an internal route)";
    error_pages: ErrorPages = unset, "STATUS=FILE",
        "Pages answered instead of hayate's own error text on this route (404 = \"errors/404.html\", \"5xx\" = \"errors/50x.html\"; a status wins over its class): read at start and on reload (at most 1 MiB each, relative to the config file), status and fields kept, Content-Type from the file's name; clients that prefer JSON get a small JSON error instead of an HTML page";
    intercept_errors: bool = "false", "BOOL",
        "error_pages also replace the upstream's own 4xx and 5xx answers (their bodies are never sent on)";
    rate_limit_scope: RateScope = "box", "box|fleet",
        "Where rate_limit counts: on each box, or (fleet, with shared = redis://...) in Redis for every box sharing it, one round trip of at most shared_timeout per request; Redis slow or down: each box's own limit applies (never no limit)";
    conn_limit: u32 = unset, "N|0",
        "Requests in flight at once per client (counted by rate_limit_key, as rate_limit), for the whole box: a request holds its slot until its response is sent, a long download or a WebSocket included; more get 429 with Retry-After (nginx's limit_conn, which answers 503); 0: none";
    hsts: Dur = unset, "DURATION",
        "Strict-Transport-Security max-age on HTTPS responses of this route (off unless set; 365d is usual once HTTPS works)";
    cache_control: String = unset, "VALUE",
        "Cache-Control header for files of this route";
    immutable: bool = "false", "BOOL",
        "Mark files with a content hash in their name (app.3f9a1c2e.js) public, 1 year, immutable";
    precompressed: bool = "true", "BOOL",
        "Serve .br, .zst and .gz siblings to clients that accept them";
    cache: CacheSpec = "off", "[PREFIX=]off|on|TTL[,OPTS]",
        "Response cache for proxied responses: on (RFC 9111), or a TTL (5s) that also caches responses without freshness; OPTS: set-cookie, cookie, authorization, stale-while-revalidate=DUR, stale-if-error=DUR; on the command line, PREFIX=SPEC (repeatable, e.g. /api=5s) caches only that prefix's requests";
    cache_key_headers: FieldNames = "", "LIST",
        "Request header fields added to the response cache's key, each value cached apart as if the response said Vary: NAME (e.g. X-API-Key: one client's answer is never another's)";
    cache_bypass_headers: FieldNames = "authorization,cookie", "LIST",
        "Requests carrying any of these header fields do not use the response cache (the cache's cookie and authorization options take theirs off the list)";
    compress: bool = "true", "BOOL",
        "Compress for clients that accept it: files once, in the background; proxied bodies as they stream";
    compress_encodings: Codings = "br,zstd,gzip", "LIST",
        "Codings offered (generated and siblings), most preferred first";
    compress_min_size: Size = "1KiB", "SIZE",
        "Smaller files and proxied bodies (by Content-Length) are sent as they are";
    compress_types: MediaTypes = "text/*,application/json,application/*+json,application/javascript,application/x-javascript,application/ecmascript,application/xml,application/*+xml,application/wasm,application/x-ndjson,image/svg+xml,image/x-icon,image/bmp,font/ttf,font/otf,application/vnd.ms-fontobject", "TYPES",
        "Media types compressed (type/* and type/*+suffix patterns); text/event-stream never is";
    compress_static_levels: CodingLevels = "br:11,zstd:19,gzip:9", "LEVELS",
        "Levels of the compress-once variants of files (CPU paid once per file)";
    compress_dynamic_levels: CodingLevels = "br:4,zstd:3,gzip:5", "LEVELS",
        "Levels of proxied bodies compressed while they stream (CPU paid per response)";
}

impl RouteLayer {
    /// Fills every unset option from `parent`, as `inherit`, but header
    /// rules add up: the parent's first, then this layer's.
    pub fn merge_from(&mut self, parent: &RouteLayer) {
        let lists = [
            (&mut self.response_headers, &parent.response_headers),
            (&mut self.request_headers, &parent.request_headers),
        ];
        for (own, theirs) in lists {
            if let (Some(own), Some(theirs)) = (own.as_mut(), theirs) {
                *own = own.after(theirs);
            }
        }
        self.inherit(parent);
    }

    /// Takes the old spelling `symlinks_outside_root` into `symlinks` (where
    /// this layer does not set `symlinks` itself), so a layer that says
    /// either overrides its parent's either.
    pub fn take_old_spellings(&mut self) {
        if let Some(outside) = self.symlinks_outside_root.take() {
            self.symlinks.get_or_insert(match outside {
                true => Symlinks::Always,
                false => Symlinks::Never,
            });
        }
    }
}
