//! `hayate import nginx`: the corpus under tests/import/nginx (real configs,
//! each naming its source at its top) imports with the expected report and
//! passes `hayate check`; and differential tests run real nginx (Debian's
//! package) with a config and hayate with its import against the same
//! files, php-fpm and origins, send both the same requests, and compare
//! status, Location, Content-Type and the body's hash.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use hayate_supervisor::php::PhpPool;
use hayate_testkit::origin::{checksum, Origin, OriginOptions};
use hayate_testkit::php::PhpFpm;
use hayate_testkit::tls::{Pki, TlsClient};
use hayate_testkit::{eventually, Client, Hayate, Response};

const BIN: &str = env!("CARGO_BIN_EXE_hayate");
/// Debian's nginx (installed by scripts/test).
const NGINX: &str = "/usr/sbin/nginx";

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/import/nginx")
}

/// The corpus copied into a temp dir, its absolute paths (document roots,
/// certificates) moved under it so that `hayate check` finds them.
fn staged() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    copy_dir(&corpus(), dir.path());
    let base = dir.path().display().to_string();
    for entry in std::fs::read_dir(dir.path()).expect("read dir") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "conf") {
            let text = std::fs::read_to_string(&path).expect("read");
            let text = text
                .replace(" /var/www/", &format!(" {base}/var/www/"))
                .replace(" /srv/", &format!(" {base}/srv/"))
                .replace(" /path/to/", &format!(" {base}/path/to/"))
                .replace(" /home/", &format!(" {base}/home/"));
            std::fs::write(&path, text).expect("write");
        }
    }
    for d in [
        "var/www/html",
        "var/www/wordpress",
        "var/www/ghost/system/nginx-root",
        "var/www/project/public",
        "srv/example.com/public",
        "path/to",
        "home/mastodon/live/public",
        "srv/app/public",
        "srv/app/.next/static",
        "var/www/nextcloud",
    ] {
        std::fs::create_dir_all(dir.path().join(d)).expect("mkdir");
    }
    // The error page Mastodon's config names: hayate reads it at start.
    std::fs::write(
        dir.path().join("home/mastodon/live/public/500.html"),
        "<h1>500</h1>\n",
    )
    .expect("write");
    dir
}

fn copy_dir(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            std::fs::create_dir_all(&target).expect("mkdir");
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

/// Runs `hayate import nginx NAME -o NAME.toml --check` in `dir`: the exit
/// code, the config written, and the report's lines cut after what became
/// of each directive (`file:line: directive: kind`; the reasons are prose).
fn import(dir: &Path, name: &str) -> (i32, String, Vec<String>) {
    let out = format!("{name}.toml");
    let result = Command::new(BIN)
        .current_dir(dir)
        .args(["import", "nginx", name, "-o", &out, "--check"])
        .output()
        .expect("run hayate import");
    let stderr = String::from_utf8_lossy(&result.stderr).to_string();
    let report = stderr
        .lines()
        .map(|l| l.splitn(4, ": ").take(3).collect::<Vec<_>>().join(": "))
        .collect();
    let toml = std::fs::read_to_string(dir.join(&out)).unwrap_or_else(|_| stderr.clone());
    (result.status.code().unwrap_or(-1), toml, report)
}

#[test]
fn debian_default_site() {
    let dir = staged();
    // The page Debian's package puts there: the index nginx would serve.
    let page = dir.path().join("var/www/html/index.nginx-debian.html");
    std::fs::write(page, "<h1>Welcome to nginx!</h1>\n").expect("write");
    let (code, toml, report) = import(dir.path(), "debian-default.conf");
    assert_eq!(
        report,
        [
            // Dotfiles: nginx serves them, hayate hides them.
            "debian-default.conf:22: server: carried with a difference",
            "debian-default.conf:45: index: carried with a difference",
        ]
    );
    assert_eq!(code, 0, "{toml}");
    assert!(
        toml.contains("listen = [\"0.0.0.0:80\", \"[::]:80\"]"),
        "{toml}"
    );
    assert!(
        toml.contains("index = \"index.nginx-debian.html\""),
        "{toml}"
    );
    // server_name _ with default_server: the site without hosts.
    assert!(!toml.contains("hosts ="), "{toml}");
}

/// Debian's default site with what its comments offer for PHP turned on
/// (the php-fpm location, index.php, the .ht location), as its users do.
#[test]
fn debian_default_site_with_php() {
    let dir = staged();
    let text = std::fs::read_to_string(dir.path().join("debian-default.conf")).expect("read");
    let text = text
        .replace(
            "index index.html index.htm index.nginx-debian.html;",
            "index index.php index.html index.htm index.nginx-debian.html;",
        )
        .replace("\t#location ~ \\.php$ {", "\tlocation ~ \\.php$ {")
        .replace("\t#\tinclude snippets/fastcgi-php.conf;", "\t\tinclude snippets/fastcgi-php.conf;")
        .replace(
            "\t#\tfastcgi_pass unix:/run/php/php7.4-fpm.sock;\n\t#\t# With php-cgi (or other tcp sockets):\n\t#\tfastcgi_pass 127.0.0.1:9000;\n\t#}",
            "\t\tfastcgi_pass unix:/run/php/php7.4-fpm.sock;\n\t#\t# With php-cgi (or other tcp sockets):\n\t#\tfastcgi_pass 127.0.0.1:9000;\n\t}",
        )
        .replace("\t#location ~ /\\.ht {\n\t#\tdeny all;\n\t#}", "\tlocation ~ /\\.ht {\n\t\tdeny all;\n\t}");
    std::fs::write(dir.path().join("debian-php.conf"), text).expect("write");
    let (code, toml, report) = import(dir.path(), "debian-php.conf");
    assert_eq!(
        report,
        [
            "debian-php.conf:45: index: carried with a difference",
            // fastcgi.conf's REMOTE_USER, through snippets/fastcgi-php.conf
            "fastcgi.conf:22: fastcgi_param: carried with a difference",
        ]
    );
    assert_eq!(code, 0, "{toml}");
    // The snippet and fastcgi.conf understood: nothing of them is copied.
    assert!(
        toml.contains("fastcgi = \"unix:/run/php/php7.4-fpm.sock\""),
        "{toml}"
    );
    assert!(!toml.contains("fastcgi_index"), "{toml}");
    assert!(
        toml.contains("match = \"/\\\\.ht\"\nrespond = 403"),
        "{toml}"
    );
}

#[test]
fn wordpress_site() {
    let dir = staged();
    let (code, toml, report) = import(dir.path(), "wordpress.conf");
    assert_eq!(
        report,
        [
            "wordpress.conf:12: server: carried with a difference",
            "wordpress.conf:21: log_not_found: not needed",
            "wordpress.conf:22: access_log: not carried",
            "wordpress.conf:27: log_not_found: not needed",
            "wordpress.conf:28: access_log: not carried",
            "wordpress.conf:47: expires: not carried",
            "wordpress.conf:48: log_not_found: not needed",
            "fastcgi_params:21: fastcgi_param: carried with a difference",
        ]
    );
    assert_eq!(code, 2, "{toml}");
    // The php upstream is the site's FastCGI application, both members.
    assert!(
        toml.contains("fastcgi = \"unix:/tmp/php-cgi.socket,127.0.0.1:9000\""),
        "{toml}"
    );
    assert!(!toml.contains("[[upstream]]"), "{toml}");
    assert!(toml.contains("match = \"(?i)\\\\.(js|css|png|jpg|jpeg|gif|ico)$\"\nfile = \"missing\"\nrespond = 404"), "{toml}");
}

#[test]
fn laravel_site() {
    let dir = staged();
    let (code, toml, report) = import(dir.path(), "laravel.conf");
    assert_eq!(
        report,
        [
            "laravel.conf:9: add_header: carried with a difference",
            "laravel.conf:10: add_header: carried with a difference",
            "laravel.conf:14: charset: not needed",
            "laravel.conf:20: access_log: not carried",
            "laravel.conf:20: log_not_found: not needed",
            "laravel.conf:21: access_log: not carried",
            "laravel.conf:21: log_not_found: not needed",
            "laravel.conf:23: error_page: not carried",
            // index.php only, where hayate runs every script
            "laravel.conf:25: location: carried with a difference",
            "laravel.conf:32: location: carried with a difference",
            "fastcgi_params:21: fastcgi_param: carried with a difference",
        ]
    );
    assert_eq!(code, 2, "{toml}");
    assert!(
        toml.contains("fastcgi = \"unix:/var/run/php/php8.2-fpm.sock\""),
        "{toml}"
    );
    assert!(
        toml.contains("response_headers = { \"X-Frame-Options\" = \"SAMEORIGIN\", \"X-Content-Type-Options\" = \"nosniff\", \"-X-Powered-By\" = \"\" }"),
        "{toml}"
    );
}

#[test]
fn node_app_behind_an_upstream_with_websockets() {
    let dir = staged();
    let (code, toml, report) = import(dir.path(), "node-socketio.conf");
    assert_eq!(
        report,
        [
            "node-socketio.conf:17: proxy_http_version: not needed",
            "node-socketio.conf:25: hash: carried with a difference",
        ]
    );
    assert_eq!(code, 0, "{toml}");
    assert!(toml.contains("proxy_balance = \"hash:ip\""), "{toml}");
    assert!(
        toml.contains(
            "members = [\"http://app01:3000\", \"http://app02:3000\", \"http://app03:3000\"]"
        ),
        "{toml}"
    );
    assert!(toml.contains("proxy = \"nodes\""), "{toml}");
    // Upgrade, Connection, X-Forwarded-For and Host are hayate's defaults.
    assert!(!toml.contains("request_headers"), "{toml}");
}

#[test]
fn mozilla_intermediate_tls() {
    let dir = staged();
    let (code, toml, report) = import(dir.path(), "mozilla-intermediate.conf");
    let not_needed =
        |line: u32, d: &str| format!("mozilla-intermediate.conf:{line}: {d}: not needed");
    let mut expected = vec![
        not_needed(4, "server"),
        "mozilla-intermediate.conf:13: server: carried with a difference".to_string(),
    ];
    for (line, d) in [
        (16, "http2"),
        (20, "ssl_session_timeout"),
        (21, "ssl_session_cache"),
        (22, "ssl_session_tickets"),
        (25, "ssl_dhparam"),
        (29, "ssl_ecdh_curve"),
        (30, "ssl_ciphers"),
        (31, "ssl_prefer_server_ciphers"),
        (37, "ssl_stapling"),
        (38, "ssl_stapling_verify"),
        (41, "ssl_trusted_certificate"),
        (44, "resolver"),
    ] {
        expected.push(not_needed(line, d));
    }
    assert_eq!(report, expected);
    assert_eq!(code, 0, "{toml}");
    assert!(
        toml.contains(
            "listen = [\"0.0.0.0:80\", \"[::]:80\", \"https://0.0.0.0:443\", \"https://[::]:443\"]"
        ),
        "{toml}"
    );
    assert!(toml.contains("tls_key = ["), "{toml}");
    // HSTS is hayate's own: on HTTPS responses only.
    assert!(toml.contains("hsts = \"63072000s\""), "{toml}");
}

#[test]
fn symfony_site() {
    let dir = staged();
    let (code, toml, report) = import(dir.path(), "symfony.conf");
    assert_eq!(
        report,
        [
            "symfony.conf:4: server: carried with a difference",
            "symfony.conf:54: error_log: not carried",
            "symfony.conf:55: access_log: not carried",
            "fastcgi_params:21: fastcgi_param: carried with a difference",
        ]
    );
    assert_eq!(code, 2, "{toml}");
    // internal: clients asking for the front controller get 404, and so do
    // they for any other script; the front controller still runs.
    let internal = toml
        .find("match = \"^/index\\\\.php(/|$)\"\nrespond = 404")
        .expect(&toml);
    let others = toml
        .find("match = \"\\\\.php$\"\nrespond = 404")
        .expect(&toml);
    assert!(internal < others, "{toml}");
}

/// Ghost-CLI's two server blocks (port 80 and 443, the same name, both
/// proxying to Ghost) and its ssl-params snippet.
#[test]
fn ghost_site_on_both_ports() {
    let dir = staged();
    let (code, toml, report) = import(dir.path(), "ghost.conf");
    let snippet =
        |line: u32, d: &str, kind: &str| format!("snippets/ssl-params.conf:{line}: {d}: {kind}");
    let mut expected = vec![
        // dotfiles, for each server block
        "ghost.conf:6: server: carried with a difference".to_string(),
        "ghost.conf:29: server: carried with a difference".to_string(),
        // one site for both: the 443 block's headers now on port 80 too
        "ghost.conf:29: server: carried with a difference".to_string(),
        snippet(3, "ssl_protocols", "carried with a difference"),
    ];
    for (line, d) in [
        (4, "ssl_prefer_server_ciphers"),
        (5, "ssl_ciphers"),
        (6, "ssl_ecdh_curve"),
        (7, "ssl_session_cache"),
        (8, "ssl_session_tickets"),
        (9, "ssl_stapling"),
        (10, "ssl_stapling_verify"),
        (11, "resolver"),
        (12, "resolver_timeout"),
    ] {
        expected.push(snippet(line, d, "not needed"));
    }
    for line in [13, 14, 15] {
        expected.push(snippet(line, "add_header", "carried with a difference"));
    }
    expected.push(snippet(17, "ssl_dhparam", "not needed"));
    assert_eq!(report, expected);
    assert_eq!(code, 0, "{toml}");
    assert_eq!(toml.matches("[[site]]").count(), 1, "{toml}");
    // Both ports serve Ghost, as under nginx: no redirect to HTTPS.
    assert!(toml.contains("https_redirect = false"), "{toml}");
    assert!(
        toml.contains("proxy = [\"http://127.0.0.1:2368\"]"),
        "{toml}"
    );
    assert!(toml.contains("max_body_size = \"50MiB\""), "{toml}");
    assert_eq!(toml.matches("[[site.rule]]").count(), 1, "{toml}");
}

#[test]
fn a_parse_error_names_file_line_and_column_and_exits_1() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("site.conf"), "server {\n    listen 80\n}\n").expect("write");
    let out = Command::new(BIN)
        .current_dir(dir.path())
        .args(["import", "nginx", "site.conf"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.trim(),
        "hayate import: site.conf:3:1: directive \"listen\" is not terminated by \";\""
    );
    // Imported, written, and refused by check: exit 1, check's reason.
    std::fs::write(
        dir.path().join("site.conf"),
        "server {\n    listen 8080;\n    root /nonexistent/www;\n}\n",
    )
    .expect("write");
    let out = Command::new(BIN)
        .current_dir(dir.path())
        .args(["import", "nginx", "site.conf", "-o", "out.toml", "--check"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("fails hayate check: out.toml:") && stderr.contains("/nonexistent/www"),
        "{stderr}"
    );
    assert!(dir.path().join("out.toml").is_file());
    let out = Command::new(BIN)
        .args(["import", "nginx", "/nonexistent/nginx.conf"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn mastodon_instance() {
    let dir = staged();
    let (code, toml, report) = import(dir.path(), "mastodon.conf");
    assert_eq!(
        report,
        [
            "mastodon.conf:8: map: not supported",
            "mastodon.conf:21: proxy_cache_path: not needed",
            "mastodon.conf:23: server: carried with a difference",
            "mastodon.conf:32: server: carried with a difference",
            "mastodon.conf:32: server: carried with a difference",
            "mastodon.conf:38: ssl_session_cache: not needed",
            "mastodon.conf:42: keepalive_timeout: not needed",
            "mastodon.conf:43: sendfile: not needed",
            "mastodon.conf:49: gzip_vary: not needed",
            "mastodon.conf:50: gzip_proxied: not needed",
            "mastodon.conf:51: gzip_comp_level: not needed",
            "mastodon.conf:52: gzip_types: not needed",
            "mastodon.conf:55: add_header: carried with a difference",
            // Cache-Control on the regex location of assets: no route.
            "mastodon.conf:60: add_header: not carried",
            "mastodon.conf:61: try_files: not carried",
            "mastodon.conf:64: location: carried with a difference",
            "mastodon.conf:64: location: carried with a difference",
            "mastodon.conf:70: proxy_buffering: not needed",
            "mastodon.conf:71: proxy_http_version: not needed",
            "mastodon.conf:85: proxy_pass_header: not supported",
            "mastodon.conf:87: proxy_http_version: not needed",
            "mastodon.conf:90: proxy_cache: carried with a difference",
            "mastodon.conf:91: proxy_cache_valid: carried with a difference",
            "mastodon.conf:92: proxy_cache_valid: carried with a difference",
            "mastodon.conf:93: proxy_cache_use_stale: not needed",
            "mastodon.conf:94: add_header: not carried",
            "mastodon.conf:97: error_page: carried with a difference",
        ]
    );
    assert_eq!(code, 2, "{toml}");
    for want in [
        "max_body_size = \"80MiB\"",
        "prefix = \"/api/v1/streaming\"\nrequest_headers = { \"X-Real-IP\" = \"$client_ip\" }\nproxy = \"streaming\"",
        "response_headers = { \"Cache-Control\" = \"public, max-age=2419200, immutable\" }",
        // The plain server's redirect keeps to plain HTTP (on the TLS
        // listener it would loop), and leaves ACME's webroot files alone.
        "match = \"!^(?:/\\\\.well\\\\-known/acme\\\\-challenge/)\"\nredirect = \"https://$host$request_uri\"\nstatus = 301\nscheme = \"http\"",
        // Files of public/ first, then Puma, through the cache.
        "prefix = \"/\"\nrequest_headers = { \"X-Real-IP\" = \"$client_ip\" }\nproxy = \"backend\"\ncache = \"86400s\"",
    ] {
        assert!(toml.contains(want), "{want} in\n{toml}");
    }
}

#[test]
fn nextjs_app() {
    let dir = staged();
    let (code, toml, report) = import(dir.path(), "nextjs.conf");
    assert_eq!(
        report,
        [
            "nextjs.conf:8: keepalive: not needed",
            "nextjs.conf:11: server: carried with a difference",
            "nextjs.conf:18: gzip_types: not needed",
            "nextjs.conf:22: expires: carried with a difference",
            "nextjs.conf:23: access_log: not carried",
            "nextjs.conf:32: proxy_http_version: not needed",
            "nextjs.conf:38: proxy_cache_bypass: not supported",
        ]
    );
    assert_eq!(code, 2, "{toml}");
    // The build's files from disk under their own prefix, the rest: files
    // of public/ first, then the app.
    assert!(
        toml.contains("prefix = \"/_next/static/\"\nroot = \""),
        "{toml}"
    );
    assert!(
        toml.contains("strip_prefix = true\ncache_control = \"max-age=31536000\""),
        "{toml}"
    );
    assert!(
        toml.contains("prefix = \"/\"\nproxy = \"nextjs\""),
        "{toml}"
    );
}

#[test]
fn nextcloud_in_the_web_root() {
    let dir = staged();
    let (code, toml, report) = import(dir.path(), "nextcloud.conf");
    assert!(
        report.contains(&"nextcloud.conf:11: server: not needed".to_string()),
        "{report:?}"
    );
    // The DAV well-knowns and the refused directories are rules; the PHP
    // location is the site's FastCGI; what PHP needs from its pool is said.
    for want in [
        "nextcloud.conf:48: if: not supported",
        "nextcloud.conf:76: fastcgi_param: not carried",
        "nextcloud.conf:77: fastcgi_param: not carried",
    ] {
        assert!(report.contains(&want.to_string()), "{want} in {report:?}");
    }
    assert_eq!(code, 2, "{toml}");
    for want in [
        "fastcgi = \"unix:/run/php/php8.2-fpm.sock\"",
        // try_files $uri $uri/ /index.php$request_uri: the front
        // controller with the path as PATH_INFO (and `location = /`, with
        // only an `if`, is no route in the way of `location /`).
        "prefix = \"/\"\nfastcgi_index_path_info = true",
        "max_body_size = \"512MiB\"",
        "redirect = \"/remote.php/dav/\"\nstatus = 301",
        "\"X-Frame-Options\" = \"SAMEORIGIN\"",
    ] {
        assert!(toml.contains(want), "{want} in\n{toml}");
    }
}

#[test]
fn discourse_behind_the_hosts_nginx() {
    let dir = staged();
    let (code, toml, report) = import(dir.path(), "discourse.conf");
    assert_eq!(
        report,
        [
            "discourse.conf:7: server: not needed",
            "discourse.conf:21: ssl_session_tickets: not needed",
            "discourse.conf:22: http2_idle_timeout: not needed",
            "discourse.conf:28: proxy_http_version: not needed",
        ]
    );
    assert_eq!(code, 0, "{toml}");
    assert!(
        toml.contains("proxy = [\"unix:/var/discourse/shared/standalone/nginx.http.sock\"]"),
        "{toml}"
    );
    assert!(toml.contains("max_body_size = \"100MiB\""), "{toml}");
}

/// nginx's auth_request to an internal location proxying to Authelia
/// becomes forward_auth to Authelia itself (its endpoint for proxies that
/// ask it directly), the user and groups copied to the app.
#[test]
fn authelia_auth_request_becomes_forward_auth() {
    let dir = staged();
    let (code, toml, report) = import(dir.path(), "authelia.conf");
    assert_eq!(
        report,
        [
            "authelia.conf:11: location: not needed",
            "authelia.conf:24: auth_request: carried with a difference",
            "authelia.conf:30: error_page: not carried",
        ]
    );
    assert_eq!(code, 2, "{toml}");
    assert!(
        toml.contains(
            "forward_auth = \"http://127.0.0.1:9091/api/authz/forward-auth\"\n\
             forward_auth_copy = [\"Remote-User\", \"Remote-Groups\"]"
        ),
        "{toml}"
    );
    // Nothing of the auth location is served.
    assert!(!toml.contains("/internal/authelia"), "{toml}");
}

#[test]
fn the_docs_page_is_the_table() {
    let out = Command::new(BIN)
        .args(["import", "--table-markdown"])
        .output()
        .expect("run");
    assert!(out.status.success());
    let page = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/import-nginx.md");
    let written = std::fs::read_to_string(&page).unwrap_or_default();
    assert!(
        written == String::from_utf8_lossy(&out.stdout),
        "docs/import-nginx.md differs from the table: cargo run -q -p hayate -- import --table-markdown > docs/import-nginx.md"
    );
}

/// A port on 127.0.0.1 held for the test (bound with SO_REUSEPORT, never
/// listening) that nginx listens on with `reuseport`: no test running in
/// parallel can take it between its choice and nginx's start.
fn reserved_port() -> (socket2::Socket, u16) {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
    socket.set_reuse_port(true).expect("SO_REUSEPORT");
    let any: SocketAddr = "127.0.0.1:0".parse().expect("addr");
    socket.bind(&any.into()).expect("bind");
    let port = socket
        .local_addr()
        .expect("addr")
        .as_socket()
        .expect("ip")
        .port();
    (socket, port)
}

/// nginx run unprivileged in the foreground with `dir` as its prefix and
/// `dir/nginx.conf`; stopped when dropped.
struct Nginx {
    child: Child,
    addr: SocketAddr,
    stderr: PathBuf,
}

impl Nginx {
    fn start(dir: &Path, port: u16) -> Nginx {
        let prefix = format!("{}/", dir.display());
        let globals = format!(
            "daemon off; master_process off; pid {}/nginx.pid; error_log stderr;",
            dir.display()
        );
        let stderr = dir.join("nginx.stderr");
        let child = Command::new(NGINX)
            .args([
                "-e",
                "stderr",
                "-p",
                &prefix,
                "-c",
                "nginx.conf",
                "-g",
                &globals,
            ])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).expect("stderr file"))
            .spawn()
            .expect("start nginx (apt-get install nginx)");
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
        let mut nginx = Nginx {
            child,
            addr,
            stderr,
        };
        eventually("nginx listens", || {
            if let Ok(Some(status)) = nginx.child.try_wait() {
                panic!("nginx exited ({status}): {}", nginx.log());
            }
            TcpStream::connect(addr).map_err(|e| e.to_string())
        });
        nginx
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What every test's http block starts with: nginx's temp files under
/// `dir` (Debian's build names /var/lib/nginx, which an unprivileged nginx
/// cannot write), media types and the default one as Debian's nginx.conf
/// sets them, no access log.
fn http_settings(dir: &Path) -> String {
    let d = dir.display();
    std::fs::create_dir_all(dir.join("tmp")).expect("mkdir");
    format!(
        "\n    include /etc/nginx/mime.types;\n    default_type application/octet-stream;\n    \
         access_log off;\n    \
         client_body_temp_path {d}/tmp/body;\n    proxy_temp_path {d}/tmp/proxy;\n    \
         fastcgi_temp_path {d}/tmp/fastcgi;\n    uwsgi_temp_path {d}/tmp/uwsgi;\n    \
         scgi_temp_path {d}/tmp/scgi;\n"
    )
}

/// A whole nginx config around a corpus file that is a whole http block.
fn around_http_block(dir: &Path, http_block: &str) -> String {
    let settings = http_settings(dir);
    http_block.replacen("http {", &format!("events {{}}\nhttp {{{settings}"), 1)
}

/// Imports `dir/nginx.conf` and starts hayate with the result on ports of
/// its own (each of `nginx_listens`, `127.0.0.1:PORT`, becomes port 0 with
/// its scheme kept: `hayate.addr` is the first, `next_address` the
/// others); the import's report with it.
fn hayate_from_import(dir: &Path, nginx_listens: &[&str]) -> (Hayate, String) {
    let out = Command::new(BIN)
        .current_dir(dir)
        .args(["import", "nginx", "nginx.conf", "--check"])
        .output()
        .expect("run hayate import");
    let code = out.status.code();
    assert!(
        matches!(code, Some(0 | 2)),
        "import failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut toml = String::from_utf8_lossy(&out.stdout).to_string();
    for listen in nginx_listens {
        toml = toml.replace(&format!("{listen}\""), "127.0.0.1:0\"");
    }
    let report = String::from_utf8_lossy(&out.stderr).to_string();
    (
        Hayate::start_config(BIN, &dir.join("hayate.toml"), &toml),
        report,
    )
}

/// One request, sent the same way to each server.
struct Request {
    method: &'static str,
    path: &'static str,
    host: &'static str,
    body: &'static [u8],
}

/// Requests without a body to `host`, each `(method, path)`.
fn requests(host: &'static str, list: &[(&'static str, &'static str)]) -> Vec<Request> {
    list.iter()
        .map(|&(method, path)| Request {
            method,
            path,
            host,
            body: b"",
        })
        .collect()
}

/// Requests to `host`, each `(method, path, body)`.
fn requests_with_bodies(
    host: &'static str,
    list: &[(&'static str, &'static str, &'static [u8])],
) -> Vec<Request> {
    list.iter()
        .map(|&(method, path, body)| Request {
            method,
            path,
            host,
            body,
        })
        .collect()
}

/// Where requests go: a plain listener, or a TLS one (HTTP/1.1, the
/// request's host as the server name).
#[derive(Clone, Copy)]
enum Via<'a> {
    Plain(SocketAddr),
    Tls(SocketAddr, &'a TlsClient),
}

impl From<SocketAddr> for Via<'_> {
    fn from(addr: SocketAddr) -> Self {
        Via::Plain(addr)
    }
}

fn send<'a>(via: impl Into<Via<'a>>, r: &Request) -> Response {
    let mut client = match via.into() {
        Via::Plain(addr) => Client::connect(addr),
        Via::Tls(addr, tls) => tls.connect(addr, r.host),
    };
    let mut raw = format!(
        "{} {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n",
        r.method, r.path, r.host
    );
    if !r.body.is_empty() {
        raw.push_str(&format!(
            "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n",
            r.body.len()
        ));
    }
    raw.push_str("\r\n");
    let mut raw = raw.into_bytes();
    raw.extend_from_slice(r.body);
    client.send(&raw);
    client.read_response(r.method == "HEAD")
}

/// Header fields compared on answers: cache and security headers, and
/// those a PHP app's own may be hidden by (X-Powered-By).
const COMPARED_FIELDS: &[&str] = &[
    "cache-control",
    "expires",
    "x-frame-options",
    "x-content-type-options",
    "x-powered-by",
    "strict-transport-security",
    "www-authenticate",
];

/// What a client can tell apart: status, where a redirect leads (nginx
/// writes it absolute, hayate relative: the same place for the client),
/// and for answers that are not errors or redirects the media type, the
/// cache and security fields and the body (the others' bodies are each
/// server's own text; hayate names charset=utf-8 on text types, nginx only
/// with its charset directive: docs/import-nginx.md says both, and the
/// JavaScript type below).
fn seen(r: &Response, host: &str, scheme: &str) -> String {
    let location = r.header("location").map(|l| {
        match l
            .strip_prefix(scheme)
            .and_then(|rest| rest.strip_prefix("://"))
            .and_then(|rest| rest.split_once('/'))
        {
            Some((authority, path)) if authority.split(':').next() == Some(host) => {
                format!("/{path}")
            }
            _ => l.to_string(),
        }
    });
    if r.status >= 300 {
        let auth = r.header("www-authenticate");
        return format!(
            "{} location={location:?} www-authenticate={auth:?} (the server's own page)",
            r.status
        );
    }
    // JavaScript: nginx 1.22's mime.types says application/javascript,
    // hayate RFC 9239's text/javascript (docs/import-nginx.md says so).
    let media_type = r
        .header("content-type")
        .map(|t| t.split(';').next().unwrap_or(t).trim())
        .map(|t| match t {
            "application/javascript" => "text/javascript",
            t => t,
        });
    let fields: Vec<String> = COMPARED_FIELDS
        .iter()
        .filter_map(|f| r.header(f).map(|v| format!("{f}: {v}")))
        .collect();
    format!(
        "{} type={:?} fields={fields:?} body={}",
        r.status,
        media_type,
        checksum(&r.body)
    )
}

/// Sends every request to both and returns the differences, one line each.
fn differences<'a>(
    nginx: impl Into<Via<'a>>,
    hayate: impl Into<Via<'a>>,
    requests: &[Request],
) -> Vec<String> {
    let (nginx, hayate) = (nginx.into(), hayate.into());
    let scheme = match nginx {
        Via::Plain(_) => "http",
        Via::Tls(..) => "https",
    };
    let mut out = Vec::new();
    for r in requests {
        let (a, b) = (send(nginx, r), send(hayate, r));
        let (seen_a, seen_b) = (seen(&a, r.host, scheme), seen(&b, r.host, scheme));
        if seen_a != seen_b {
            let start = |body: &[u8]| {
                String::from_utf8_lossy(body)
                    .chars()
                    .take(200)
                    .collect::<String>()
            };
            out.push(format!(
                "{} {}: nginx {seen_a} / hayate {seen_b}\n  nginx body: {}\n  hayate body: {}",
                r.method,
                r.path,
                start(&a.body),
                start(&b.body),
            ));
        }
    }
    out
}

/// Writes `files` (path, text) under `root`.
fn write_files(root: &Path, files: &[(&str, &str)]) {
    for (path, text) in files {
        let p = root.join(path);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, text).expect("write");
    }
}

/// The php-fpm that nginx and hayate share. hayate keeps up to
/// fastcgi_max_conns (5) connections, each holding a child; nginx opens one
/// per request: with 2 children nginx's requests waited for hayate's idle
/// ones to close (5 s each).
fn shared_php_fpm() -> PhpFpm {
    PhpFpm::start(&PhpPool {
        children: 8,
        max_requests: 0,
        terminate_after_secs: 0,
    })
}

/// nginx.conf in `dir` for the server file `site` (written as site.conf,
/// with the fastcgi_params it includes beside it).
fn write_nginx_with_site(dir: &Path, site: &str) {
    std::fs::write(dir.join("site.conf"), site).expect("write");
    std::fs::copy(corpus().join("fastcgi_params"), dir.join("fastcgi_params")).expect("copy");
    let main = format!(
        "events {{}}\nhttp {{{}    include site.conf;\n}}\n",
        http_settings(dir)
    );
    std::fs::write(dir.join("nginx.conf"), main).expect("write");
}

/// Asserts that the differences `found` are exactly those starting with
/// `reported` (the requests the import's report accounts for), and that
/// the report holds each of `report_lines`.
fn assert_only_reported(
    found: &[String],
    reported: &[&str],
    report: &str,
    report_lines: &[&str],
    nginx: &Nginx,
) {
    for line in report_lines {
        assert!(
            report.contains(line),
            "{line:?} not in the report:\n{report}"
        );
    }
    let unexpected: Vec<&str> = found
        .iter()
        .map(String::as_str)
        .filter(|d| !reported.iter().any(|r| d.starts_with(r)))
        .collect();
    assert!(
        unexpected.is_empty(),
        "differences:\n{}\nnginx log:\n{}",
        unexpected.join("\n"),
        nginx.log()
    );
    assert_eq!(found.len(), reported.len(), "{found:#?}");
}

/// A WordPress stand-in under `www`: its front controller and a script
/// saying what PHP was given, a file of each kind, a dotfile.
fn write_wordpress(www: &Path) {
    write_files(
        www,
        &[
            (
                "index.php",
                "<?php header('Content-Type: text/plain'); echo 'front ', $_SERVER['REQUEST_URI'], \
                 ' script=', $_SERVER['SCRIPT_NAME'], ' query=', $_SERVER['QUERY_STRING'], \"\\n\";",
            ),
            (
                "hello.php",
                "<?php echo 'hello ', $_SERVER['REQUEST_METHOD'], ' x=', $_GET['x'] ?? '', \
                 ' a=', $_POST['a'] ?? '', \"\\n\";",
            ),
            ("style.css", "body { color: black; }\n"),
            ("robots.txt", "User-agent: *\n"),
            ("wp-content/uploads/pic.png", "\u{89}PNG not really\n"),
            (".htaccess", "Deny from all\n"),
        ],
    );
}

/// The corpus's WordPress server block with its root at `www`, its php
/// upstream at `fpm` and `listen` (`ADDR [PARAMS]`) as its listener.
fn wordpress_server_block(fpm: &PhpFpm, www: &Path, listen: &str) -> String {
    std::fs::read_to_string(corpus().join("wordpress.conf"))
        .expect("corpus")
        .replace(
            "server unix:/tmp/php-cgi.socket;\n        server 127.0.0.1:9000;",
            &format!("server unix:{};", fpm.socket().display()),
        )
        .replace(
            "root /var/www/wordpress;",
            &format!("root {};", www.display()),
        )
        .replace(
            "server_name domain.tld;",
            &format!("listen {listen};\n        server_name domain.tld;"),
        )
}

const GET: &str = "GET";

/// The WordPress site of the corpus, with its root and php upstream
/// pointed at the test's, served by nginx and by hayate from its import.
#[test]
fn wordpress_site_behaves_as_under_nginx() {
    let dir = tempfile::tempdir().expect("tempdir");
    let www = dir.path().join("www");
    write_wordpress(&www);
    let fpm = shared_php_fpm();
    let (_held, port) = reserved_port();
    let listen = format!("127.0.0.1:{port}");
    let site = wordpress_server_block(&fpm, &www, &format!("{listen} reuseport"));
    write_nginx_with_site(dir.path(), &site);
    let nginx = Nginx::start(dir.path(), port);
    let (hayate, report) = hayate_from_import(dir.path(), &[&listen]);

    let requests = requests_with_bodies(
        "domain.tld",
        &[
            (GET, "/", b""),
            (GET, "/?p=12", b""),
            (GET, "/2024/05/a-post/", b""),
            (GET, "/2024/05/a-post/?replytocom=3", b""),
            (GET, "/hello.php?x=1", b""),
            ("POST", "/hello.php", b"a=b"),
            (GET, "/style.css", b""),
            ("HEAD", "/style.css", b""),
            (GET, "/robots.txt", b""),
            (GET, "/wp-content/uploads/pic.png", b""),
            (GET, "/wp-content/uploads/missing.png", b""),
            (GET, "/favicon.ico", b""),
            (GET, "/missing.php", b""),
            (GET, "/wp-content", b""),
            (GET, "/.htaccess", b""),
        ],
    );
    let found = differences(nginx.addr, hayate.addr, &requests);
    // Each difference left is one the import reports (site.conf is
    // wordpress.conf with the php upstream one line shorter): :47, expires
    // in a regex location (no Cache-Control, no Expires); :11, the dotfile
    // hayate hides.
    assert_only_reported(
        &found,
        &[
            "GET /style.css: ",
            "HEAD /style.css: ",
            "GET /wp-content/uploads/pic.png: ",
            "GET /.htaccess: ",
        ],
        &report,
        &[
            "site.conf:47: expires: not carried",
            "site.conf:11: server: carried with a difference: nginx serves files whose name starts with a dot",
        ],
        &nginx,
    );
    hayate.assert_no_errors();
}

/// The Node app of the corpus (Socket.IO's config): its upstream pointed
/// at the test's origins, served by nginx and by hayate from its import.
#[test]
fn node_proxy_site_behaves_as_under_nginx() {
    let dir = tempfile::tempdir().expect("tempdir");
    let origins: Vec<Origin> = (0..3)
        .map(|_| Origin::start(OriginOptions::default()))
        .collect();
    let (_held, port) = reserved_port();
    let listen = format!("127.0.0.1:{port}");
    let mut site = std::fs::read_to_string(corpus().join("node-socketio.conf"))
        .expect("corpus")
        .replace("listen 3000;", &format!("listen {listen} reuseport;"));
    for (i, origin) in origins.iter().enumerate() {
        let member = origin.url().trim_start_matches("http://").to_string();
        site = site.replace(
            &format!("server app0{}:3000;", i + 1),
            &format!("server {member};"),
        );
    }
    std::fs::write(
        dir.path().join("nginx.conf"),
        around_http_block(dir.path(), &site),
    )
    .expect("write");
    let nginx = Nginx::start(dir.path(), port);
    let (hayate, _) = hayate_from_import(dir.path(), &[&listen]);

    let requests = requests(
        "io.yourhost.com",
        &[
            (GET, "/text?n=5000"),
            (GET, "/bytes?n=100000"),
            ("HEAD", "/text?n=10"),
            (GET, "/status?code=404"),
            (GET, "/status?code=503"),
            (GET, "/status?code=204"),
        ],
    );
    let found = differences(nginx.addr, hayate.addr, &requests);
    assert!(found.is_empty(), "differences:\n{}", found.join("\n"));

    // What the app is told: the Host the client sent and the client's
    // address in X-Forwarded-For, as the config asks nginx to send.
    for addr in [nginx.addr, hayate.addr] {
        let echo = Request {
            method: GET,
            path: "/echo?a=1",
            host: "io.yourhost.com",
            body: b"",
        };
        let r = send(addr, &echo);
        let echo = hayate_testkit::origin::Echo::parse(&String::from_utf8_lossy(&r.body));
        assert_eq!(echo.target, "/echo?a=1");
        assert_eq!(echo.header("host"), Some("io.yourhost.com"), "{addr}");
        assert_eq!(echo.header("x-forwarded-for"), Some("127.0.0.1"), "{addr}");
    }
    hayate.assert_no_errors();
}

/// A WebSocket upgrade through the Node site's config reaches the app and
/// carries bytes both ways, through nginx and through hayate alike.
#[test]
fn websocket_upgrade_through_both() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (nginx_app, nginx_done) = hayate_testkit::upgrade_echo_server();
    let (hayate_app, hayate_done) = hayate_testkit::upgrade_echo_server();
    let (_held, port) = reserved_port();
    let listen = format!("127.0.0.1:{port}");
    let site = |app: u16| {
        let block = std::fs::read_to_string(corpus().join("node-socketio.conf"))
            .expect("corpus")
            .replace("listen 3000;", &format!("listen {listen} reuseport;"))
            .replace(
                "    server app01:3000;\n    server app02:3000;\n    server app03:3000;",
                &format!("    server 127.0.0.1:{app};"),
            );
        around_http_block(dir.path(), &block)
    };
    std::fs::write(dir.path().join("nginx.conf"), site(nginx_app)).expect("write");
    let nginx = Nginx::start(dir.path(), port);
    std::fs::write(dir.path().join("nginx.conf"), site(hayate_app)).expect("write");
    let (hayate, _) = hayate_from_import(dir.path(), &[&listen]);
    for (addr, done) in [(nginx.addr, nginx_done), (hayate.addr, hayate_done)] {
        let mut s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(hayate_testkit::WAIT))
            .expect("timeout");
        s.write_all(
            b"GET /socket.io/?EIO=4&transport=websocket HTTP/1.1\r\nHost: io.yourhost.com\r\n\
              Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\
              Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
        )
        .expect("write");
        let mut head = Vec::new();
        hayate_testkit::read_through_blank_line(&mut s, &mut head).expect("head");
        let head = String::from_utf8_lossy(&head).to_string();
        assert!(head.starts_with("HTTP/1.1 101"), "{addr}: {head}");
        s.write_all(b"ping").expect("write");
        let mut back = [0u8; 4];
        s.read_exact(&mut back).expect("echo");
        assert_eq!(&back, b"ping", "{addr}");
        drop(s);
        let upstream_head = done.join().expect("upgrade server");
        assert!(
            upstream_head.contains("upgrade: websocket"),
            "{addr}: {upstream_head}"
        );
    }
    hayate.assert_no_errors();
}

/// Laravel's site of the corpus, its root and php-fpm the test's, served by
/// nginx and by hayate from its import.
#[test]
fn laravel_site_behaves_as_under_nginx() {
    let dir = tempfile::tempdir().expect("tempdir");
    let public = dir.path().join("public");
    write_files(
        &public,
        &[
            (
                "index.php",
                "<?php if (str_contains($_SERVER['REQUEST_URI'], 'notfound')) { http_response_code(404); }\n\
                 header('Content-Type: text/plain'); echo 'laravel ', $_SERVER['REQUEST_METHOD'], ' ', \
                 $_SERVER['REQUEST_URI'], ' script=', $_SERVER['SCRIPT_NAME'], ' query=', \
                 $_SERVER['QUERY_STRING'], ' email=', $_POST['email'] ?? '', \"\\n\";",
            ),
            ("other.php", "<?php echo 'other';\n"),
            ("css/app.css", "body { margin: 0; }\n"),
            ("robots.txt", "User-agent: *\nDisallow:\n"),
            (".env", "APP_KEY=base64:secret\n"),
            (".well-known/security.txt", "Contact: mailto:security@example.com\n"),
        ],
    );
    let fpm = shared_php_fpm();
    let (_held, port) = reserved_port();
    let listen = format!("127.0.0.1:{port}");
    let site = std::fs::read_to_string(corpus().join("laravel.conf"))
        .expect("corpus")
        .replace(
            "listen 80;\n    listen [::]:80;",
            &format!("listen {listen} reuseport;\n"),
        )
        .replace(
            "root /srv/example.com/public;",
            &format!("root {};", public.display()),
        )
        .replace(
            "fastcgi_pass unix:/var/run/php/php8.2-fpm.sock;",
            &format!("fastcgi_pass unix:{};", fpm.socket().display()),
        );
    write_nginx_with_site(dir.path(), &site);
    let nginx = Nginx::start(dir.path(), port);
    let (hayate, report) = hayate_from_import(dir.path(), &[&listen]);

    let requests = requests_with_bodies(
        "example.com",
        &[
            (GET, "/", b""),
            (GET, "/users/5", b""),
            (GET, "/users?page=2&sort=name", b""),
            ("POST", "/login", b"email=a%40example.com"),
            (GET, "/index.php", b""),
            (GET, "/notfound", b""),
            (GET, "/css/app.css", b""),
            ("HEAD", "/css/app.css", b""),
            (GET, "/robots.txt", b""),
            (GET, "/favicon.ico", b""),
            (GET, "/css", b""),
            (GET, "/.well-known/security.txt", b""),
            (GET, "/other.php", b""),
            (GET, "/.env", b""),
        ],
    );
    let found = differences(nginx.addr, hayate.addr, &requests);
    // Each difference left is one the import reports (site.conf keeps
    // laravel.conf's lines): :25, nginx runs index.php only and serves
    // other.php as a file; :32, the dotfile hayate hides (404 for 403).
    assert_only_reported(
        &found,
        &["GET /other.php: ", "GET /.env: "],
        &report,
        &[
            "site.conf:25: location: carried with a difference: hayate runs every .php file",
            "site.conf:32: location: carried with a difference: hayate hides dotfiles",
        ],
        &nginx,
    );
    hayate.assert_no_errors();
}

/// Symfony's site of the corpus: its front controller reached only through
/// try_files (internal), every other script refused.
#[test]
fn symfony_site_behaves_as_under_nginx() {
    let dir = tempfile::tempdir().expect("tempdir");
    let public = dir.path().join("public");
    write_files(
        &public,
        &[
            (
                "index.php",
                "<?php header('Content-Type: text/plain'); echo 'symfony ', \
                 $_SERVER['REQUEST_URI'], ' script=', $_SERVER['SCRIPT_NAME'], \"\\n\";",
            ),
            ("config.php", "<?php echo 'secret';\n"),
            ("bundles/app/app.js", "console.log(1);\n"),
        ],
    );
    let fpm = shared_php_fpm();
    let (_held, port) = reserved_port();
    let listen = format!("127.0.0.1:{port}");
    let site = std::fs::read_to_string(corpus().join("symfony.conf"))
        .expect("corpus")
        .replace(
            "    server_name domain.tld www.domain.tld;",
            &format!("    listen {listen} reuseport; server_name domain.tld www.domain.tld;"),
        )
        .replace(
            "root /var/www/project/public;",
            &format!("root {};", public.display()),
        )
        .replace(
            "fastcgi_pass unix:/var/run/php/php7.4-fpm.sock;",
            &format!("fastcgi_pass unix:{};", fpm.socket().display()),
        )
        .replace("error_log /var/log/nginx/project_error.log;", "")
        .replace("access_log /var/log/nginx/project_access.log;", "");
    write_nginx_with_site(dir.path(), &site);
    let nginx = Nginx::start(dir.path(), port);
    let (hayate, report) = hayate_from_import(dir.path(), &[&listen]);

    let requests = requests(
        "domain.tld",
        &[
            (GET, "/"),
            (GET, "/blog/hello-world"),
            (GET, "/search?q=nginx"),
            (GET, "/index.php"),
            (GET, "/index.php/blog"),
            (GET, "/config.php"),
            (GET, "/bundles/app/app.js"),
            (GET, "/bundles/app/missing.js"),
            ("HEAD", "/"),
        ],
    );
    let found = differences(nginx.addr, hayate.addr, &requests);
    assert_only_reported(&found, &[], &report, &[], &nginx);
    hayate.assert_no_errors();
}

/// The Next.js corpus file: the build's static files from disk under
/// their own prefix (a year's expiry), public/ files first, the rest to
/// the app, served by nginx and by hayate from its import. The one
/// difference is the reported one: `expires` becomes Cache-Control alone
/// (hayate writes no Expires field; every HTTP/1.1 cache reads max-age).
#[test]
fn nextjs_site_behaves_as_under_nginx() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = dir.path().join("app");
    write_files(
        &app,
        &[
            (
                "public/logo.svg",
                "<svg xmlns=\"http://www.w3.org/2000/svg\"/>\n",
            ),
            ("public/robots.txt", "User-agent: *\n"),
            (".next/static/chunks/main-3f2a.js", "console.log(1);\n"),
            (".next/static/css/app-9c1d.css", "body{margin:0}\n"),
        ],
    );
    let origin = Origin::start(OriginOptions::default());
    let (_held, port) = reserved_port();
    let listen = format!("127.0.0.1:{port}");
    let member = origin.url().trim_start_matches("http://").to_string();
    let site = std::fs::read_to_string(corpus().join("nextjs.conf"))
        .expect("corpus")
        .replace("listen 80;", &format!("listen {listen} reuseport;"))
        .replace("/srv/app", &app.display().to_string())
        .replace("server 127.0.0.1:3000;", &format!("server {member};"));
    write_nginx_with_site(dir.path(), &site);
    let nginx = Nginx::start(dir.path(), port);
    let (hayate, report) = hayate_from_import(dir.path(), &[&listen]);

    let requests = requests(
        "app.example.com",
        &[
            (GET, "/_next/static/chunks/main-3f2a.js"),
            (GET, "/_next/static/css/app-9c1d.css"),
            (GET, "/_next/static/chunks/missing.js"),
            (GET, "/logo.svg"),
            (GET, "/robots.txt"),
            ("HEAD", "/robots.txt"),
            (GET, "/text?n=5000"),
            (GET, "/status?code=404"),
            ("HEAD", "/text?n=10"),
        ],
    );
    let found = differences(nginx.addr, hayate.addr, &requests);
    assert_only_reported(
        &found,
        &[
            "GET /_next/static/chunks/main-3f2a.js:",
            "GET /_next/static/css/app-9c1d.css:",
        ],
        &report,
        &["expires: carried with a difference"],
        &nginx,
    );
    // The difference is the Expires field alone: both say max-age.
    for addr in [nginx.addr, hayate.addr] {
        let r = send(addr, &requests[0]);
        assert_eq!(r.status, 200);
        assert_eq!(
            r.header("cache-control"),
            Some("max-age=31536000"),
            "{addr}"
        );
    }
    hayate.assert_no_errors();
}

/// A static site with what people protect and move by hand: basic auth,
/// an address allow list, redirects and rewrites, an alias, a custom
/// header (written for this test: the published configs above use none
/// of these).
#[test]
fn policies_and_rules_behave_as_under_nginx() {
    let dir = tempfile::tempdir().expect("tempdir");
    let www = dir.path().join("www");
    let shared = dir.path().join("shared-assets");
    write_files(
        &www,
        &[
            ("index.html", "<h1>home</h1>\n"),
            ("admin/index.html", "<h1>admin</h1>\n"),
            ("private/report.txt", "numbers\n"),
            ("new/page.html", "<p>new</p>\n"),
            ("docs/v2/intro.html", "<p>v2</p>\n"),
        ],
    );
    write_files(
        &shared,
        &[("logo.svg", "<svg xmlns=\"http://www.w3.org/2000/svg\"/>\n")],
    );
    // htpasswd -B (bcrypt), as both nginx and hayate read it.
    let htpasswd = dir.path().join("htpasswd");
    let made = Command::new("htpasswd")
        .args(["-bcB", htpasswd.to_str().expect("utf-8"), "admin", "s3cret"])
        .output()
        .expect("htpasswd (apache2-utils)");
    assert!(made.status.success(), "{made:?}");
    let (_held, port) = reserved_port();
    let listen = format!("127.0.0.1:{port}");
    let site = format!(
        "server {{\n    listen {listen} reuseport;\n    server_name static.example;\n    \
         root {www};\n    add_header X-Frame-Options DENY always;\n\n    \
         location /admin/ {{\n        auth_basic \"Staff only\";\n        \
         auth_basic_user_file {htpasswd};\n    }}\n\n    \
         location /private/ {{\n        allow 10.0.0.0/8;\n        deny all;\n    }}\n\n    \
         location /assets/ {{\n        alias {shared}/;\n    }}\n\n    \
         location = /old-page {{\n        return 301 /new/page.html;\n    }}\n\n    \
         rewrite ^/docs/latest/(.*)$ /docs/v2/$1 last;\n    \
         rewrite ^/blog/(\\d+)$ /new/page.html?id=$1 permanent;\n}}\n",
        www = www.display(),
        htpasswd = htpasswd.display(),
        shared = shared.display(),
    );
    std::fs::write(dir.path().join("site.conf"), site).expect("write");
    let main = format!(
        "events {{}}\nhttp {{{}    include site.conf;\n}}\n",
        http_settings(dir.path())
    );
    std::fs::write(dir.path().join("nginx.conf"), main).expect("write");
    let nginx = Nginx::start(dir.path(), port);
    let (hayate, report) = hayate_from_import(dir.path(), &[&listen]);

    let requests = requests(
        "static.example",
        &[
            (GET, "/"),
            (GET, "/admin/"),
            (GET, "/private/report.txt"),
            (GET, "/assets/logo.svg"),
            (GET, "/assets/missing.svg"),
            (GET, "/old-page"),
            (GET, "/docs/latest/intro.html"),
            (GET, "/blog/42"),
            (GET, "/new/page.html?id=42"),
        ],
    );
    let found = differences(nginx.addr, hayate.addr, &requests);
    // The same login, both ways.
    let login = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, "admin:s3cret");
    for addr in [nginx.addr, hayate.addr] {
        let mut client = Client::connect(addr);
        client.send(
            format!(
                "GET /admin/ HTTP/1.1\r\nHost: static.example\r\nAuthorization: Basic {login}\r\n\
                 Connection: close\r\n\r\n"
            )
            .as_bytes(),
        );
        let r = client.read_response(false);
        assert_eq!(
            (r.status, r.body.as_slice()),
            (200, &b"<h1>admin</h1>\n"[..]),
            "{addr}"
        );
    }
    // The one difference is in the report: the challenge's charset.
    assert_only_reported(
        &found,
        &["GET /admin/: "],
        &report,
        &["site.conf:8: auth_basic: carried with a difference: hayate's WWW-Authenticate also names charset"],
        &nginx,
    );
    hayate.assert_no_errors();
}

/// A corpus server file made to run here: its `listen 80` lines on
/// `plain`, its `listen 443` ones on `tls` (with `reuseport`: the test
/// holds the ports), their IPv6 twins dropped.
fn on_test_ports(conf: &str, plain: &str, tls: &str) -> String {
    let mut out = String::new();
    for line in conf.lines() {
        let trimmed = line.trim_start();
        match trimmed.strip_prefix("listen ") {
            Some(rest) if rest.starts_with("[::]") => continue,
            Some(rest) => {
                let (port, params) = rest.split_at(rest.find([' ', ';']).unwrap_or(rest.len()));
                let addr = if port == "443" { tls } else { plain };
                let params = params.trim_end_matches(';');
                let indent = &line[..line.len() - trimmed.len()];
                out.push_str(&format!("{indent}listen {addr}{params} reuseport;\n"));
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

/// Two ports held for nginx (plain and TLS) and their `127.0.0.1:PORT`.
fn two_ports() -> ([socket2::Socket; 2], [String; 2]) {
    let ((a, pa), (b, pb)) = (reserved_port(), reserved_port());
    (
        [a, b],
        [format!("127.0.0.1:{pa}"), format!("127.0.0.1:{pb}")],
    )
}

/// Debian's default site: files under /var/www/html, `try_files $uri
/// $uri/ =404`. The differences are the reported ones: hayate takes one
/// index file (index.html) and hides dotfiles.
#[test]
fn debian_default_site_behaves_as_under_nginx() {
    let dir = tempfile::tempdir().expect("tempdir");
    let html = dir.path().join("html");
    write_files(
        &html,
        &[
            ("index.html", "<h1>It works</h1>\n"),
            ("docs/index.html", "<h1>Docs</h1>\n"),
            ("docs/guide.html", "<p>guide</p>\n"),
            ("style.css", "body{color:#333}\n"),
            ("data/report.json", "{\"ok\":true}\n"),
            ("plain/readme.txt", "no index here\n"),
            ("old/index.htm", "<p>an index.htm</p>\n"),
            (".env", "SECRET=1\n"),
            ("a b.txt", "a space\n"),
        ],
    );
    let (_held, port) = reserved_port();
    let listen = format!("127.0.0.1:{port}");
    let site = std::fs::read_to_string(corpus().join("debian-default.conf"))
        .expect("corpus")
        .replace("/var/www/html", &html.display().to_string());
    write_nginx_with_site(dir.path(), &on_test_ports(&site, &listen, "-"));
    let nginx = Nginx::start(dir.path(), port);
    let (hayate, report) = hayate_from_import(dir.path(), &[&listen]);

    let requests = requests(
        "localhost",
        &[
            (GET, "/"),
            (GET, "/index.html"),
            ("HEAD", "/index.html"),
            (GET, "/docs"),
            (GET, "/docs/"),
            (GET, "/docs/guide.html"),
            (GET, "/docs/guide.html?v=2"),
            (GET, "/style.css"),
            (GET, "/data/report.json"),
            (GET, "/a%20b.txt"),
            (GET, "/missing.html"),
            (GET, "/docs/missing/"),
            (GET, "/plain/readme.txt"),
            (GET, "/old/"),
            (GET, "/.env"),
            (GET, "/docs/../style.css"),
            (GET, "/%2e%2e/%2e%2e/etc/passwd"),
            ("POST", "/index.html"),
        ],
    );
    let found = differences(nginx.addr, hayate.addr, &requests);
    assert_only_reported(
        &found,
        &["GET /old/:", "GET /.env:"],
        &report,
        &[
            "index: carried with a difference: hayate takes one index file",
            "server: carried with a difference: nginx serves files whose name starts with a dot",
        ],
        &nginx,
    );
    hayate.assert_no_errors();
}

/// The certificate a TLS test's servers share (for `names`, from a CA of
/// the test's own) written where `conf` names its certificate and key,
/// and a client trusting that CA.
fn with_certificate(pki: &Pki, names: &[&str], conf: &str, cert: &str, key: &str) -> String {
    let (cert_file, key_file, _) = pki.issue(names, "site");
    conf.replace(cert, &cert_file).replace(key, &key_file)
}

/// Ghost as Ghost-CLI sets it up: the same proxy on port 80 and on 443
/// (TLS settings from its ssl-params snippet), acme.sh's .well-known files
/// from a root of their own. Over TLS nginx and hayate answer alike; over
/// plain HTTP too, but for the reported one: the snippet's security
/// headers, set by nginx on 443 only, go on every listener in hayate's
/// one site.
#[test]
fn ghost_site_behaves_as_under_nginx() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("nginx-root");
    write_files(
        &root,
        &[(".well-known/acme-challenge/token1", "token1.key\n")],
    );
    let origin = Origin::start(OriginOptions::default());
    let member = origin.url().trim_start_matches("http://").to_string();
    let pki = Pki::new();
    let site = std::fs::read_to_string(corpus().join("ghost.conf"))
        .expect("corpus")
        .replace(
            "/var/www/ghost/system/nginx-root",
            &root.display().to_string(),
        )
        .replace("127.0.0.1:2368", &member);
    // Generating DH parameters takes seconds; hayate reports the line as
    // not needed (ECDHE only), so nginx goes without it here.
    let params = std::fs::read_to_string(corpus().join("snippets/ssl-params.conf"))
        .expect("snippet")
        .replace("ssl_dhparam /etc/nginx/snippets/dhparam.pem;", "");
    std::fs::create_dir_all(dir.path().join("snippets")).expect("mkdir");
    std::fs::write(dir.path().join("snippets/ssl-params.conf"), params).expect("write");
    let both = start_over_tls(
        dir.path(),
        &site,
        pki,
        &["blog.example.com"],
        (
            "/etc/letsencrypt/blog.example.com/fullchain.cer",
            "/etc/letsencrypt/blog.example.com/blog.example.com.key",
        ),
    );
    let OverTls {
        ref nginx,
        ref hayate,
        ref report,
        nginx_tls,
        hayate_tls,
        ref client,
        ..
    } = both;

    let requests = requests(
        "blog.example.com",
        &[
            (GET, "/text?n=5000"),
            (GET, "/bytes?n=100000"),
            ("HEAD", "/text?n=10"),
            (GET, "/status?code=404"),
            (GET, "/status?code=301"),
            (GET, "/.well-known/acme-challenge/token1"),
            (GET, "/.well-known/acme-challenge/missing"),
            (GET, "/blog/.well-known"),
        ],
    );
    let over_tls = both.differences_over_tls(&requests);
    assert!(over_tls.is_empty(), "differences:\n{}", over_tls.join("\n"));
    let plain = differences(nginx.addr, hayate.addr, &requests);
    assert_only_reported(
        &plain,
        &[
            "GET /text?n=5000:",
            "GET /bytes?n=100000:",
            "HEAD /text?n=10:",
            "GET /.well-known/acme-challenge/token1:",
        ],
        report,
        &["server: carried with a difference: hayate has one site per name: its response_headers now apply on every listener"],
        nginx,
    );
    // Each plain difference is those three fields and nothing else.
    let ssl_params = "\"x-frame-options: SAMEORIGIN\", \"x-content-type-options: nosniff\", \
                      \"strict-transport-security: max-age=63072000; includeSubDomains; preload\"";
    for d in &plain {
        let line = d.lines().next().unwrap_or_default();
        let (nginx_seen, hayate_seen) = line.split_once(" / hayate ").expect("a difference");
        let nginx_seen = nginx_seen.split_once(": nginx ").expect("nginx's").1;
        assert_eq!(hayate_seen.replace(ssl_params, ""), nginx_seen, "{d}");
    }

    // What Ghost is told, as the config asks: the Host sent, the client's
    // address, and the scheme it came over.
    for (via, scheme) in [
        (Via::Plain(nginx.addr), "http"),
        (Via::Plain(hayate.addr), "http"),
        (Via::Tls(nginx_tls, client), "https"),
        (Via::Tls(hayate_tls, client), "https"),
    ] {
        let echo = Request {
            method: GET,
            path: "/echo?a=1",
            host: "blog.example.com",
            body: b"",
        };
        let r = send(via, &echo);
        let echo = hayate_testkit::origin::Echo::parse(&String::from_utf8_lossy(&r.body));
        assert_eq!(echo.header("host"), Some("blog.example.com"));
        assert_eq!(
            echo.header("x-forwarded-for"),
            Some("127.0.0.1"),
            "{scheme}"
        );
        assert_eq!(echo.header("x-real-ip"), Some("127.0.0.1"), "{scheme}");
        assert_eq!(echo.header("x-forwarded-proto"), Some(scheme));
    }
    hayate.assert_no_errors();
}

/// nginx and hayate from its import, each on a plain and a TLS port: the
/// server file `site` (its paths set) with a certificate from `pki` for
/// `names` written where it names `cert` and `key`.
struct OverTls {
    _held: [socket2::Socket; 2],
    nginx: Nginx,
    hayate: Hayate,
    /// The import's report.
    report: String,
    nginx_tls: SocketAddr,
    hayate_tls: SocketAddr,
    /// A client trusting `pki`'s CA.
    client: TlsClient,
}

fn start_over_tls(
    dir: &Path,
    site: &str,
    pki: Pki,
    names: &[&str],
    (cert, key): (&str, &str),
) -> OverTls {
    let (held, [plain, tls]) = two_ports();
    let site = with_certificate(&pki, names, &on_test_ports(site, &plain, &tls), cert, key);
    write_nginx_with_site(dir, &site);
    let nginx = Nginx::start(dir, port_of(&plain));
    let (hayate, report) = hayate_from_import(dir, &[&plain, &tls]);
    let (_, hayate_tls) = hayate.next_address();
    OverTls {
        _held: held,
        nginx,
        hayate,
        report,
        nginx_tls: tls.parse().expect("addr"),
        hayate_tls,
        client: TlsClient::trusting(&pki.ca()),
    }
}

impl OverTls {
    /// Sends every request to both over TLS: the differences, one line each.
    fn differences_over_tls(&self, requests: &[Request]) -> Vec<String> {
        let via = |addr| Via::Tls(addr, &self.client);
        differences(via(self.nginx_tls), via(self.hayate_tls), requests)
    }

    /// A plain-HTTP request for `path` goes to HTTPS with its path and
    /// query: nginx's `return 301 https://$host$request_uri` (port 443),
    /// hayate's https_redirect (308, which keeps the method, to its TLS
    /// listener's port): the difference the import reports.
    fn assert_plain_goes_to_https(&self, host: &'static str, path: &'static str) {
        let to_https = Request {
            method: GET,
            path,
            host,
            body: b"",
        };
        let nginx_said = send(self.nginx.addr, &to_https);
        assert_eq!(nginx_said.status, 301);
        let want = format!("https://{host}{path}");
        assert_eq!(nginx_said.header("location"), Some(want.as_str()));
        let hayate_said = send(self.hayate.addr, &to_https);
        assert_eq!(hayate_said.status, 308);
        let want = format!("https://{host}:{}{path}", self.hayate_tls.port());
        assert_eq!(hayate_said.header("location"), Some(want.as_str()));
    }
}

/// The port of `127.0.0.1:PORT`.
fn port_of(addr: &str) -> u16 {
    addr.rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("a port")
}

/// The Mozilla SSL Configuration Generator's intermediate config: plain
/// HTTP sent to HTTPS, nginx's own root served over TLS with HSTS on every
/// status. Over TLS the two answer alike; on port 80 hayate's redirect is
/// the reported one: 308 (the method kept) to the HTTPS listener, where
/// nginx sends 301.
#[test]
fn mozilla_intermediate_behaves_as_under_nginx() {
    let dir = tempfile::tempdir().expect("tempdir");
    // nginx's compiled-in root under its prefix, as Debian installs it
    // (hayate's import names Debian's: /usr/share/nginx/html).
    let debian_root = Path::new("/usr/share/nginx/html");
    copy_dir(debian_root, &{
        let html = dir.path().join("html");
        std::fs::create_dir_all(&html).expect("mkdir");
        html
    });
    let pki = Pki::new();
    let ca = pki.ca().display().to_string();
    let site = std::fs::read_to_string(corpus().join("mozilla-intermediate.conf"))
        .expect("corpus")
        // Debian 12's nginx (1.22) predates the http2 directive (1.25.1):
        // its listen parameter says the same.
        .replace("http2 on;", "")
        .replace("listen 443 ssl;", "listen 443 ssl http2;")
        // Generating DH parameters takes seconds; hayate reports the line
        // as not needed (ECDHE only).
        .replace("ssl_dhparam /path/to/dhparam;", "")
        .replace("/path/to/root_CA_cert_plus_intermediates", &ca);
    let both = start_over_tls(
        dir.path(),
        &site,
        pki,
        &["example.org"],
        (
            "/path/to/signed_cert_plus_intermediates",
            "/path/to/private_key",
        ),
    );
    let (hayate, report, nginx_tls, hayate_tls, client) = (
        &both.hayate,
        &both.report,
        both.nginx_tls,
        both.hayate_tls,
        &both.client,
    );

    let requests = requests(
        "example.org",
        &[
            (GET, "/"),
            (GET, "/index.html"),
            ("HEAD", "/index.html"),
            (GET, "/index.html?x=1"),
            (GET, "/missing"),
            (GET, "/50x.html"),
        ],
    );
    let over_tls = both.differences_over_tls(&requests);
    assert!(over_tls.is_empty(), "differences:\n{}", over_tls.join("\n"));
    // HSTS on every status, as `always` asks.
    for addr in [nginx_tls, hayate_tls] {
        let r = send(Via::Tls(addr, client), &requests[4]);
        assert_eq!(r.status, 404);
        assert_eq!(
            r.header("strict-transport-security"),
            Some("max-age=63072000")
        );
    }

    // Port 80: both send the client to HTTPS with the path and query.
    both.assert_plain_goes_to_https("example.org", "/a/b?c=d");
    assert!(
        report.contains("site.conf:4: server: not needed: this server only redirects to HTTPS")
            && report.contains("with 308"),
        "{report}"
    );
    hayate.assert_no_errors();
}

/// Discourse behind the host's nginx: TLS ended there, everything passed to
/// the container's Unix socket. Over TLS nginx and hayate answer alike and
/// tell Discourse the same; plain HTTP goes to HTTPS (hayate's 308 is the
/// reported difference, as in the Mozilla config's test).
#[test]
fn discourse_behaves_as_under_nginx() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("nginx.http.sock");
    let origin = Origin::start(OriginOptions {
        unix: Some(socket.clone()),
        ..Default::default()
    });
    let pki = Pki::new();
    let site = std::fs::read_to_string(corpus().join("discourse.conf"))
        .expect("corpus")
        .replace(
            "/var/discourse/shared/standalone/nginx.http.sock",
            &socket.display().to_string(),
        );
    let both = start_over_tls(
        dir.path(),
        &site,
        pki,
        &["forum.example.com"],
        (
            "/var/discourse/shared/standalone/ssl/forum.example.com.cer",
            "/var/discourse/shared/standalone/ssl/forum.example.com.key",
        ),
    );
    let (hayate, report, nginx_tls, hayate_tls, client) = (
        &both.hayate,
        &both.report,
        both.nginx_tls,
        both.hayate_tls,
        &both.client,
    );

    let requests = requests_with_bodies(
        "forum.example.com",
        &[
            (GET, "/text?n=5000", b""),
            (GET, "/bytes?n=300000", b""),
            ("HEAD", "/text?n=10", b""),
            (GET, "/status?code=404", b""),
            (GET, "/status?code=302", b""),
            ("POST", "/text?n=20", b"title=hello&raw=world"),
        ],
    );
    let over_tls = both.differences_over_tls(&requests);
    assert!(over_tls.is_empty(), "differences:\n{}", over_tls.join("\n"));
    for addr in [nginx_tls, hayate_tls] {
        let echo = Request {
            method: GET,
            path: "/echo?a=1",
            host: "forum.example.com",
            body: b"",
        };
        let r = send(Via::Tls(addr, client), &echo);
        let echo = hayate_testkit::origin::Echo::parse(&String::from_utf8_lossy(&r.body));
        assert_eq!(echo.target, "/echo?a=1");
        assert_eq!(echo.header("host"), Some("forum.example.com"), "{addr}");
        assert_eq!(echo.header("x-forwarded-for"), Some("127.0.0.1"), "{addr}");
        assert_eq!(echo.header("x-forwarded-proto"), Some("https"), "{addr}");
        assert_eq!(echo.header("x-real-ip"), Some("127.0.0.1"), "{addr}");
    }
    assert!(origin.requests() >= 14, "every request reached the socket");

    both.assert_plain_goes_to_https("forum.example.com", "/t/welcome/1");
    assert!(
        report.contains("site.conf:7: server: not needed: this server only redirects to HTTPS"),
        "{report}"
    );
    hayate.assert_no_errors();
}

/// Mastodon: public/ files first, then Puma through a cache; the streaming
/// API to its own server; media under /system/ with a month's
/// Cache-Control; one error page; plain HTTP only redirects (but for
/// ACME's webroot files). Over TLS the answers are nginx's but for the
/// reported ones; on port 80 the redirect keeps to plain HTTP.
#[test]
fn mastodon_behaves_as_under_nginx() {
    let dir = tempfile::tempdir().expect("tempdir");
    let public = dir.path().join("public");
    write_files(
        &public,
        &[
            ("500.html", "<h1>Mastodon is having trouble</h1>\n"),
            ("robots.txt", "User-agent: *\n"),
            ("favicon.ico", "icon"),
            ("system/media/original/1.png", "png bytes"),
            ("packs/js/app.js", "console.log('app');\n"),
            (".well-known/acme-challenge/tok", "tok.key\n"),
        ],
    );
    let puma = Origin::start(OriginOptions::default());
    let streaming = Origin::start(OriginOptions::default());
    let member = |o: &Origin| o.url().trim_start_matches("http://").to_string();
    let pki = Pki::new();
    let conf = std::fs::read_to_string(corpus().join("mastodon.conf"))
        .expect("corpus")
        .replace("/home/mastodon/live/public", &public.display().to_string())
        .replace(
            "/var/cache/nginx",
            &dir.path().join("cache").display().to_string(),
        )
        .replace("127.0.0.1:3000", &member(&puma))
        .replace("127.0.0.1:4000", &member(&streaming));
    // The corpus file is a set of http-level directives: nginx.conf
    // includes it in its http block.
    let both = start_over_tls(
        dir.path(),
        &conf,
        pki,
        &["social.example.com"],
        (
            "/etc/letsencrypt/live/social.example.com/fullchain.pem",
            "/etc/letsencrypt/live/social.example.com/privkey.pem",
        ),
    );
    let OverTls {
        ref nginx,
        ref hayate,
        ref report,
        nginx_tls,
        hayate_tls,
        ref client,
        ..
    } = both;

    let asked = requests(
        "social.example.com",
        &[
            (GET, "/robots.txt"),
            ("HEAD", "/robots.txt"),
            (GET, "/favicon.ico"),
            (GET, "/system/media/original/1.png"),
            (GET, "/system/media/original/2.png"),
            (GET, "/packs/js/app.js"),
            (GET, "/packs/js/missing.js"),
            (GET, "/text?n=3000"),
            (GET, "/bytes?n=70000"),
            (GET, "/status?code=500"),
            (GET, "/status?code=404"),
        ],
    );
    let over_tls = both.differences_over_tls(&asked);
    // The assets' month of Cache-Control is on a regex location.
    assert_only_reported(
        &over_tls,
        &["GET /packs/js/app.js:"],
        report,
        &["site.conf:58: add_header: not carried"],
        nginx,
    );
    // What Puma and the streaming server are told.
    for addr in [nginx_tls, hayate_tls] {
        for (path, origin) in [("/@alice", &puma), ("/api/v1/streaming", &streaming)] {
            let before = origin.count(path);
            let r = send(
                Via::Tls(addr, client),
                &Request {
                    method: GET,
                    path,
                    host: "social.example.com",
                    body: b"",
                },
            );
            assert_eq!(origin.count(path), before + 1, "{path} from {addr}");
            let echo = hayate_testkit::origin::Echo::parse(&String::from_utf8_lossy(&r.body));
            assert_eq!(echo.header("host"), Some("social.example.com"));
            assert_eq!(echo.header("x-real-ip"), Some("127.0.0.1"));
            assert_eq!(echo.header("x-forwarded-for"), Some("127.0.0.1"));
            assert_eq!(echo.header("x-forwarded-proto"), Some("https"));
        }
    }

    // Port 80: a 301 to HTTPS from both (a rule that keeps to plain HTTP
    // in hayate's one site), and the webroot's challenge file served.
    let plain_requests = requests(
        "social.example.com",
        &[
            (GET, "/@alice?x=1"),
            (GET, "/.well-known/acme-challenge/tok"),
        ],
    );
    let on_80 = differences(nginx.addr, hayate.addr, &plain_requests);
    assert_only_reported(&on_80, &[], report, &[], nginx);
    hayate.assert_no_errors();
}

/// Nextcloud in the web root, with real php-fpm: index.php as the front
/// controller with PATH_INFO, the DAV well-knowns, the internal
/// directories refused, assets with six months of expiry, HSTS and the
/// security headers on every status; plain HTTP sent to HTTPS. Over TLS
/// the answers are nginx's but for the reported ones.
#[test]
fn nextcloud_behaves_as_under_nginx() {
    let dir = tempfile::tempdir().expect("tempdir");
    let www = dir.path().join("nextcloud");
    // Each script says what Nextcloud reads of its request.
    let script = "<?php header('Content-Type: text/plain'); echo $_SERVER['SCRIPT_NAME'], \
                  ' path_info=', $_SERVER['PATH_INFO'] ?? '-', ' uri=', $_SERVER['REQUEST_URI'], \
                  ' query=', $_SERVER['QUERY_STRING'], ' https=', $_SERVER['HTTPS'] ?? '-', \
                  ' method=', $_SERVER['REQUEST_METHOD'], ' body=', file_get_contents('php://input'), \"\\n\";";
    write_files(
        &www,
        &[
            ("index.php", script),
            ("remote.php", script),
            ("status.php", script),
            ("ocs/v2.php", script),
            ("robots.txt", "User-agent: *\nDisallow: /\n"),
            ("core/css/server.css", "body{margin:0}\n"),
            ("core/js/main.js", "console.log('nc');\n"),
            (
                "core/img/logo.svg",
                "<svg xmlns=\"http://www.w3.org/2000/svg\"/>\n",
            ),
            ("config/config.php", "<?php $CONFIG = ['secret' => 'x'];\n"),
            ("data/alice/files/a.txt", "alice's file\n"),
            ("lib/base.php", "<?php // internal\n"),
            ("3rdparty/autoload.php", "<?php // internal\n"),
            (".htaccess", "Deny from all\n"),
            ("occ", "#!/usr/bin/env php\n"),
            ("console.php", "<?php // internal\n"),
        ],
    );
    let fpm = shared_php_fpm();
    let pki = Pki::new();
    let conf = std::fs::read_to_string(corpus().join("nextcloud.conf"))
        .expect("corpus")
        .replace("/var/www/nextcloud", &www.display().to_string())
        .replace(
            "server unix:/run/php/php8.2-fpm.sock;",
            &format!("server unix:{};", fpm.socket().display()),
        );
    let both = start_over_tls(
        dir.path(),
        &conf,
        pki,
        &["cloud.example.com"],
        (
            "/etc/ssl/nginx/cloud.example.com.crt",
            "/etc/ssl/nginx/cloud.example.com.key",
        ),
    );
    let (nginx, hayate, report) = (&both.nginx, &both.hayate, &both.report);

    let asked = requests_with_bodies(
        "cloud.example.com",
        &[
            (GET, "/", b""),
            (GET, "/index.php", b""),
            (GET, "/index.php/apps/files/?dir=/", b""),
            (GET, "/apps/files/", b""),
            (GET, "/login?redirect_url=/apps/files", b""),
            (GET, "/status.php", b""),
            (GET, "/ocs/v2.php/cloud/capabilities?format=json", b""),
            ("PROPFIND", "/remote.php/dav/files/alice/", b""),
            ("PUT", "/remote.php/dav/files/alice/new.txt", b"new file"),
            (GET, "/robots.txt", b""),
            (GET, "/core/css/server.css", b""),
            (GET, "/core/js/main.js?v=3", b""),
            (GET, "/core/img/logo.svg", b""),
            (GET, "/core/css/missing.css", b""),
            (GET, "/.well-known/carddav", b""),
            (GET, "/.well-known/caldav", b""),
            (GET, "/.well-known/webfinger?resource=acct:alice", b""),
            (GET, "/config/config.php", b""),
            (GET, "/data/alice/files/a.txt", b""),
            (GET, "/lib/base.php", b""),
            (GET, "/3rdparty/autoload.php", b""),
            (GET, "/build", b""),
            (GET, "/.htaccess", b""),
            (GET, "/occ", b""),
            (GET, "/console.php", b""),
            (GET, "/missing.php", b""),
        ],
    );
    let over_tls = both.differences_over_tls(&asked);
    // The assets' six months of expiry are on a regex location.
    assert_only_reported(
        &over_tls,
        &[
            "GET /core/css/server.css:",
            "GET /core/js/main.js?v=3:",
            "GET /core/img/logo.svg:",
        ],
        report,
        &["site.conf:84: expires: not carried"],
        nginx,
    );
    hayate.assert_no_errors();
}

/// The issue's one command on Debian's own tree: /etc/nginx as the package
/// installs it (nginx.conf, mime.types, snippets, conf.d) copied, with
/// WordPress and a Node app in sites-enabled instead of the default site;
/// `hayate import nginx .../nginx.conf -o hayate.toml`, then `hayate
/// --config hayate.toml` answers both sites as nginx does with that tree.
/// The copy names its own directory where Debian's names /etc/nginx and
/// /var/log/nginx, and leaves the pid file and the process count to the
/// test.
#[test]
fn debians_nginx_conf_with_wordpress_and_a_node_app_in_one_command() {
    let dir = tempfile::tempdir().expect("tempdir");
    let etc = dir.path().join("etc/nginx");
    std::fs::create_dir_all(&etc).expect("mkdir");
    copy_dir(Path::new("/etc/nginx"), &etc);
    let logs = dir.path().join("log");
    std::fs::create_dir_all(&logs).expect("mkdir");
    let main = std::fs::read_to_string(etc.join("nginx.conf"))
        .expect("Debian's nginx.conf")
        .replace("/etc/nginx/", &format!("{}/", etc.display()))
        .replace("/var/log/nginx/", &format!("{}/", logs.display()))
        .replace("pid /run/nginx.pid;", "")
        // One process (the test's nginx runs without a master): with
        // `auto`, reuseport opens a socket per worker, and the second's
        // connections would wait for a worker that never starts.
        .replace("worker_processes auto;", "worker_processes 1;");
    // Its temp files under the test's directory (Debian's build names
    // /var/lib/nginx, which an unprivileged nginx cannot write).
    let temp = http_settings(dir.path());
    let temp: String = temp
        .lines()
        .filter(|l| l.contains("_temp_path"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(
        etc.join("nginx.conf"),
        main.replacen("http {", &format!("http {{\n{temp}"), 1),
    )
    .expect("write");

    let www = dir.path().join("www");
    write_wordpress(&www);
    let fpm = shared_php_fpm();
    let origin = Origin::start(OriginOptions::default());
    let (_held, port) = reserved_port();
    let listen = format!("127.0.0.1:{port}");
    let sites = etc.join("sites-enabled");
    std::fs::remove_dir_all(&sites).expect("rm sites-enabled");
    std::fs::create_dir_all(&sites).expect("mkdir");
    std::fs::write(
        sites.join("wordpress"),
        wordpress_server_block(&fpm, &www, &format!("{listen} reuseport")),
    )
    .expect("write");
    // Socket.IO's config is a whole http block: its server and upstream.
    let node = std::fs::read_to_string(corpus().join("node-socketio.conf")).expect("corpus");
    let (_, inside) = node.split_once("http {").expect("an http block");
    let inside = &inside[..inside.rfind('}').expect("its end")];
    let member = origin.url().trim_start_matches("http://").to_string();
    let node = inside
        .replace("listen 3000;", &format!("listen {listen};"))
        .replace("server app01:3000;", &format!("server {member};"))
        .replace("server app02:3000;\n", "")
        .replace("server app03:3000;\n", "");
    std::fs::write(sites.join("node-app"), node).expect("write");
    let nginx = Nginx::start(&etc, port);

    let out = Command::new(BIN)
        .current_dir(dir.path())
        .arg("import")
        .arg("nginx")
        .arg(etc.join("nginx.conf"))
        .args(["-o", "hayate.toml"])
        .output()
        .expect("run hayate import");
    let report = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(matches!(out.status.code(), Some(0 | 2)), "{report}");
    for line in [
        // Both sites came through the include of sites-enabled/*.
        "sites-enabled/wordpress:",
        "nginx.conf:",
    ] {
        assert!(report.contains(line), "{line} in\n{report}");
    }
    let toml = std::fs::read_to_string(dir.path().join("hayate.toml"))
        .expect("the config written")
        .replace(&format!("\"{listen}\""), "\"127.0.0.1:0\"");
    let hayate = Hayate::start_config(BIN, &dir.path().join("hayate.toml"), &toml);

    let wordpress = requests_with_bodies(
        "domain.tld",
        &[
            (GET, "/", b""),
            (GET, "/2024/05/a-post/?replytocom=3", b""),
            (GET, "/hello.php?x=1", b""),
            ("POST", "/hello.php", b"a=b"),
            (GET, "/robots.txt", b""),
            (GET, "/favicon.ico", b""),
            (GET, "/missing.php", b""),
        ],
    );
    let found = differences(nginx.addr, hayate.addr, &wordpress);
    assert_only_reported(&found, &[], &report, &[], &nginx);
    let node_app = requests(
        "io.yourhost.com",
        &[
            (GET, "/text?n=5000"),
            (GET, "/bytes?n=100000"),
            ("HEAD", "/text?n=10"),
            (GET, "/status?code=404"),
        ],
    );
    let found = differences(nginx.addr, hayate.addr, &node_app);
    assert_only_reported(&found, &[], &report, &[], &nginx);
    assert!(origin.requests() >= 8, "the Node app answered both");
    hayate.assert_no_errors();
}
