//! `hayate import caddy`: the corpus under tests/import/caddy (Caddyfiles
//! of the apps the nginx corpus has, each naming its source at its top)
//! imports with the expected report and passes `hayate check`; and a
//! Caddyfile using what sites use (matchers, redirects, rewrites, headers,
//! basic_auth, handle_path to an upstream, allow lists, env variables) is
//! imported and served by hayate, which answers as Caddy would.

use std::path::{Path, PathBuf};
use std::process::Command;

use hayate_testkit::origin::{Echo, Origin, OriginOptions};
use hayate_testkit::{Client, Hayate};

const BIN: &str = env!("CARGO_BIN_EXE_hayate");

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/import/caddy")
}

/// The corpus copied into a temp dir, its absolute paths (roots,
/// certificates) moved under it so that `hayate check` finds them.
fn staged() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(dir.path().join("snippets")).expect("mkdir");
    let base = dir.path().display().to_string();
    for sub in ["", "snippets"] {
        for entry in std::fs::read_dir(corpus().join(sub)).expect("read dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("read");
            let text = text
                .replace(" /var/www/", &format!(" {base}/var/www/"))
                .replace(" /srv/", &format!(" {base}/srv/"))
                .replace(" /var/log/", &format!(" {base}/var/log/"))
                // hayate check resolves an auth service's name: the
                // guide's container names become this machine.
                .replace(" authelia:9091", " 127.0.0.1:9091");
            let to = dir.path().join(sub).join(path.file_name().expect("name"));
            std::fs::write(to, text).expect("write");
        }
    }
    for d in [
        "var/www/wordpress",
        "var/www/laravel/public",
        "var/www/nextcloud",
        "srv/app/dist",
        "var/log/caddy",
    ] {
        std::fs::create_dir_all(dir.path().join(d)).expect("mkdir");
    }
    dir
}

/// Runs `hayate import caddy NAME -o NAME.toml --check` in `dir`: the exit
/// code, the config written, and the report's lines cut after what became
/// of each directive (`file:line: directive: kind`; the reasons are prose).
fn import(dir: &Path, name: &str) -> (i32, String, Vec<String>) {
    let out = format!("{name}.toml");
    let result = Command::new(BIN)
        .current_dir(dir)
        .args(["import", "caddy", name, "-o", &out, "--check"])
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
fn wordpress_site() {
    let dir = staged();
    let (code, toml, report) = import(dir.path(), "wordpress.Caddyfile");
    assert_eq!(
        report,
        [
            "wordpress.Caddyfile:17: file_server: carried with a difference",
            "wordpress.Caddyfile:24: log: carried with a difference",
        ]
    );
    assert_eq!(code, 0, "{toml}");
    for want in [
        "listen = [\"https://0.0.0.0:443\", \"0.0.0.0:80\"]",
        "http3 = true",
        "hosts = [\"example.com\", \"www.example.com\"]",
        "tls = \"acme\"",
        "fastcgi = \"unix:/run/php/php8.2-fpm.sock\"",
        "compress_encodings = [\"zstd\", \"gzip\"]",
        "response_headers = { \"X-Content-Type-Options\" = \"nosniff\", \"Referrer-Policy\" = \"strict-origin-when-cross-origin\", \"-Server\" = \"\" }",
        "match = \"(?i)^(?:/xmlrpc\\\\.php|.*\\\\.sql|/wp\\\\-content/uploads/.*\\\\.php)$\"\nrewrite = \"/index.php\"",
        "access_log_format = \"json\"",
        "access_log_size = \"52428800\"",
        "access_log_keep = 10",
    ] {
        assert!(toml.contains(want), "{want} in\n{toml}");
    }
}

#[test]
fn laravel_site() {
    let dir = staged();
    let (code, toml, report) = import(dir.path(), "laravel.Caddyfile");
    assert_eq!(report, ["laravel.Caddyfile:15: env: not carried"]);
    assert_eq!(code, 2, "{toml}");
    for want in [
        "acme_email = \"ops@example.com\"",
        "max_body_size = \"64000000\"",
        "fastcgi = \"unix:/run/php/php8.2-fpm.sock\"",
    ] {
        assert!(toml.contains(want), "{want} in\n{toml}");
    }
}

#[test]
fn node_app_with_a_single_page_front() {
    let dir = staged();
    let (code, toml, report) = import(dir.path(), "node-spa.Caddyfile");
    assert_eq!(
        report,
        ["node-spa.Caddyfile:23: file_server: carried with a difference"]
    );
    assert_eq!(code, 0, "{toml}");
    for want in [
        "proxy_balance = \"least_conn\"",
        "[[site.route]]              # node-spa.Caddyfile:8\nprefix = \"/api/\"\n\
         proxy = [\"http://localhost:3000\", \"http://localhost:3001\"]\n\
         proxy_health_check = \"/healthz\"\n\
         request_headers = { \"X-Real-IP\" = \"$client_ip\" }",
        "prefix = \"/socket.io/\"",
        "root = \"",
        "fallback = \"index.html\"",
    ] {
        assert!(toml.contains(want), "{want} in\n{toml}");
    }
}

#[test]
fn authelia_forward_auth() {
    let dir = staged();
    let (code, toml, report) = import(dir.path(), "authelia.Caddyfile");
    assert_eq!(
        report,
        ["authelia.Caddyfile:13: forward_auth: carried with a difference"]
    );
    assert_eq!(code, 0, "{toml}");
    for want in [
        "log_level = \"debug\"",
        "forward_auth = \"http://127.0.0.1:9091/api/authz/forward-auth\"",
        "forward_auth_copy = [\"Remote-User\", \"Remote-Groups\", \"Remote-Email\", \"Remote-Name\"]",
        "proxy = [\"http://nextcloud:80\"]",
    ] {
        assert!(toml.contains(want), "{want} in\n{toml}");
    }
}

#[test]
fn nextcloud_with_snippets_from_files_and_an_allow_list() {
    let dir = staged();
    let (code, toml, report) = import(dir.path(), "nextcloud.Caddyfile");
    assert_eq!(
        report,
        [
            "nextcloud.Caddyfile:28: env: not carried",
            "nextcloud.Caddyfile:30: file_server: carried with a difference",
            "nextcloud.Caddyfile:33: site: carried with a difference",
        ]
    );
    assert_eq!(code, 2, "{toml}");
    for want in [
        // The snippet's headers, from snippets/security.caddy.
        "\"Strict-Transport-Security\" = \"max-age=31536000; includeSubDomains\"",
        "\"-X-Powered-By\" = \"\"",
        "match = \"(?i)^(?:/\\\\.well\\\\-known/carddav)$\"\nredirect = \"/remote.php/dav?\"\nstatus = 301",
        "prefix = \"/settings/admin/\"\nallow = [\"192.168.0.0/16\"]",
        "fastcgi = \"127.0.0.1:9000\"",
        "listen = [\"https://0.0.0.0:443\", \"0.0.0.0:8081\", \"0.0.0.0:80\"]",
        // Content on plain HTTP (port 8081): not everything is redirected.
        "https_redirect = false",
    ] {
        assert!(toml.contains(want), "{want} in\n{toml}");
    }
}

/// A site using most of what the importer carries, imported and served:
/// each answer as Caddy gives it.
#[test]
fn an_imported_site_answers_as_caddy_would() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("www");
    std::fs::create_dir_all(root.join("admin")).expect("mkdir");
    std::fs::write(root.join("page.html"), "<p>page</p>\n").expect("write");
    std::fs::write(root.join("admin/index.html"), "admin\n").expect("write");
    let origin = Origin::start(OriginOptions::default());
    let origin_port = origin.addr.expect("tcp").port();
    // The bcrypt hash of "secret" as Caddy's hash-password writes it.
    let hash = "$2a$04$VSkGCvqpbeINgrlPnjE/guxMhBw4EuTNWZ.4GJIBwHWeR8LELfgDS";
    let caddyfile = format!(
        ":{{$IMPORT_TEST_PORT:8080}} {{\n\
         \troot * {root}\n\
         \t@old path_regexp old ^/old/(\\d+)$\n\
         \tredir @old /new/{{re.old.1}} permanent\n\
         \tredir /moved https://example.com{{uri}}\n\
         \trewrite /pretty /page.html\n\
         \theader X-Imported yes\n\
         \tbasic_auth /admin/* {{\n\t\talice {hash}\n\t}}\n\
         \thandle_path /api/* {{\n\t\treverse_proxy 127.0.0.1:{origin_port}\n\t}}\n\
         \t@blocked remote_ip 192.0.2.0/24\n\
         \trespond @blocked 403\n\
         \trespond /health \"ok\" 200\n\
         \tfile_server\n}}\n",
        root = root.display(),
    );
    std::fs::write(dir.path().join("Caddyfile"), caddyfile).expect("write");
    let out = Command::new(BIN)
        .current_dir(dir.path())
        .env("IMPORT_TEST_PORT", "0")
        .args([
            "import",
            "caddy",
            "Caddyfile",
            "-o",
            "hayate.toml",
            "--check",
        ])
        .output()
        .expect("run hayate import");
    let report = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(0), "{report}");
    let toml = std::fs::read_to_string(dir.path().join("hayate.toml")).expect("written");
    // The users, beside the config, readable by their owner only.
    let htpasswd = dir.path().join("default.htpasswd");
    assert_eq!(
        std::fs::read_to_string(&htpasswd).expect("htpasswd"),
        format!("alice:{hash}\n")
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&htpasswd)
        .expect("meta")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let toml = toml.replace("\"0.0.0.0:0\"", "\"127.0.0.1:0\"");
    let hayate = Hayate::start_config(BIN, &dir.path().join("hayate.toml"), &toml);
    let mut c = Client::connect(hayate.addr);

    let r = c.get("/old/42?x=1", &[]);
    // Caddy's redir drops the query its target does not name.
    assert_eq!(
        (r.status, r.header("location")),
        (301, Some("/new/42")),
        "{toml}"
    );
    let r = c.get("/moved?a=b", &[]);
    assert_eq!(r.status, 302);
    assert_eq!(r.header("location"), Some("https://example.com/moved?a=b"));
    let r = c.get("/pretty", &[]);
    assert_eq!((r.status, r.text()), (200, "<p>page</p>\n".into()));
    assert_eq!(r.header("x-imported"), Some("yes"));
    let r = c.get("/health", &[]);
    assert_eq!((r.status, r.text()), (200, "ok".into()));
    let r = c.get("/admin/", &[]);
    assert_eq!(r.status, 401);
    assert!(r
        .header("www-authenticate")
        .is_some_and(|v| v.starts_with("Basic")));
    // alice:secret
    let r = c.get("/admin/", &[("Authorization", "Basic YWxpY2U6c2VjcmV0")]);
    assert_eq!((r.status, r.text()), (200, "admin\n".into()));
    // handle_path: the upstream sees the path without /api.
    let r = c.get("/api/echo?q=1", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(Echo::parse(&r.text()).target, "/echo?q=1");
    // 127.0.0.1 is not in the refused block.
    let r = c.get("/page.html", &[]);
    assert_eq!(r.status, 200);
}

#[test]
fn a_parse_error_names_file_line_and_column_and_exits_1() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("Caddyfile"),
        "example.com {\n\treverse_proxy localhost:3000\n\trespond \"unclosed\n}\n",
    )
    .expect("write");
    let out = Command::new(BIN)
        .current_dir(dir.path())
        .args(["import", "caddy", "Caddyfile"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("Caddyfile:3:10: unclosed \""), "{stderr}");
}

#[test]
fn the_docs_page_is_the_table() {
    let out = Command::new(BIN)
        .args(["import", "--table-markdown", "caddy"])
        .output()
        .expect("run");
    assert!(out.status.success());
    let page = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/import-caddy.md");
    let written = std::fs::read_to_string(&page).unwrap_or_default();
    assert!(
        written == String::from_utf8_lossy(&out.stdout),
        "docs/import-caddy.md differs from the table: cargo run -q -p hayate -- import --table-markdown caddy > docs/import-caddy.md"
    );
}
