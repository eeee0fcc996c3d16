//! Debian's packaged PHP apps under `hayate php`, end to end over HTTPS
//! (issue 33), each with a real MariaDB and php-fpm, driven as a browser
//! would, over HTTP/2 (what browsers use, where the host is `:authority`,
//! not a header) and HTTP/1.1, curl as the client:
//! - WordPress, with the README's command: the installer, a login, the
//!   permalink settings form, a post over the REST API, its pretty
//!   permalink, a media upload and its file, a theme's stylesheet through
//!   Debian's symlinks;
//! - phpMyAdmin: its scripts and styles through Debian's symlinks into
//!   /usr/share/javascript (once answered `200 text/html` by index.php), a
//!   cookie login, the server's page.
//!
//! Needs root, as the README's `sudo hayate php` does: PHP then runs as
//! www-data, which owns what the apps write, and each app's config goes
//! where Debian's package reads it (a file of the test's own under /etc,
//! removed after). scripts/test installs the packages.

// Tests block on purpose (they are clients, not the server).
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use hayate_testkit::{eventually, Hayate};

const BIN: &str = env!("CARGO_BIN_EXE_hayate");
const WORDPRESS: &str = "/usr/share/wordpress";
const CONTENT: &str = "/var/lib/wordpress/wp-content";
const PASSWORD: &str = "Correct-Horse-9";

/// A MariaDB server of the test's own: a fresh data directory, a Unix
/// socket, no network; stopped by its pid on drop.
struct MariaDb {
    child: Child,
    dir: tempfile::TempDir,
}

impl MariaDb {
    fn start() -> MariaDb {
        let dir = tempfile::tempdir().expect("tempdir");
        // PHP (www-data) reaches the socket through the directory.
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .expect("chmod");
        let data = dir.path().join("data");
        // Temporary tables in a directory of the test's own: in the shared
        // /tmp the install's `#sql-temptable-*` file once vanished
        // mid-bootstrap while the other test's install ran ("Could not
        // remove temporary table ... error: 2", in CI).
        let tmp = dir.path().join("tmp");
        std::fs::create_dir(&tmp).expect("mkdir tmp");
        let install = Command::new("mariadb-install-db")
            .args(["--no-defaults", "--user=root", "--skip-test-db"])
            .arg(format!("--datadir={}", data.display()))
            .args(["--auth-root-authentication-method=socket"])
            .arg(format!("--tmpdir={}", tmp.display()))
            .output()
            .expect("mariadb-install-db (mariadb-server, installed by scripts/test)");
        assert!(install.status.success(), "{install:?}");
        let child = Command::new("mariadbd")
            .args(["--no-defaults", "--user=root", "--skip-networking"])
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--socket={}", dir.path().join("sock").display()))
            .arg(format!("--pid-file={}", dir.path().join("pid").display()))
            .arg(format!("--tmpdir={}", tmp.display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("mariadbd");
        let db = MariaDb { child, dir };
        eventually("MariaDB accepting on its socket", || {
            db.sql("SELECT 1").map(drop)
        });
        db
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("sock")
    }

    fn sql(&self, statements: &str) -> Result<String, String> {
        let out = Command::new("mariadb")
            .arg(format!("--socket={}", self.socket().display()))
            .args(["-u", "root", "-N", "-e", statements])
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

impl Drop for MariaDb {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A file that exists while the test runs.
struct Removed(PathBuf);

impl Removed {
    /// Writes `text` at `path` (readable by all: PHP runs as www-data).
    fn write(path: impl Into<PathBuf>, text: &str) -> Removed {
        let path = path.into();
        std::fs::write(&path, text).expect("write an app's config (as root)");
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .expect("chmod");
        Removed(path)
    }
}

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// What curl got.
struct Reply {
    status: u16,
    location: String,
    content_type: String,
    body: Vec<u8>,
}

impl Reply {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// curl as the site's browser: its host name resolved to hayate, the local
/// CA trusted, cookies kept.
struct Browser {
    host: String,
    port: u16,
    ca: PathBuf,
    jar: PathBuf,
    scratch: tempfile::TempDir,
}

impl Browser {
    fn url(&self, path: &str) -> String {
        format!("https://{}:{}{path}", self.host, self.port)
    }

    /// `args` then the URL of `path`, over HTTP/2 or HTTP/1.1.
    fn ask(&self, http2: bool, path: &str, args: &[&str]) -> Reply {
        let body = self.scratch.path().join("body");
        let out = Command::new("curl")
            .args(["-sS", if http2 { "--http2" } else { "--http1.1" }])
            .arg("--resolve")
            .arg(format!("{}:{}:127.0.0.1", self.host, self.port))
            .arg("--cacert")
            .arg(&self.ca)
            .arg("-c")
            .arg(&self.jar)
            .arg("-b")
            .arg(&self.jar)
            .arg("-o")
            .arg(&body)
            .args([
                "-w",
                "%{http_code}\n%{redirect_url}\n%{content_type}\n%{http_version}",
            ])
            .args(args)
            .arg(self.url(path))
            .output()
            .expect("curl (installed by scripts/test)");
        assert!(out.status.success(), "curl {path}: {out:?}");
        let written = String::from_utf8_lossy(&out.stdout).into_owned();
        let mut lines = written.lines();
        let mut next = || lines.next().unwrap_or_default().to_string();
        let (status, location, content_type, version) = (next(), next(), next(), next());
        assert_eq!(version, if http2 { "2" } else { "1.1" }, "{path}");
        Reply {
            status: status.parse().expect("status"),
            location,
            content_type,
            body: std::fs::read(&body).unwrap_or_default(),
        }
    }

    fn get(&self, path: &str) -> Reply {
        self.ask(true, path, &[])
    }

    /// POSTs `fields`, form-encoded.
    fn post_form(&self, path: &str, fields: &[(&str, &str)]) -> Reply {
        let encoded: Vec<String> = fields.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let mut args = vec!["-X", "POST"];
        for field in &encoded {
            args.extend(["--data-urlencode", field]);
        }
        self.ask(true, path, &args)
    }
}

/// `hayate php DIR` over HTTPS with a certificate for `host` from a
/// local CA of its own, and a browser for it.
fn serve_php(dir: &str, host: &str, args: &[&str]) -> (Hayate, Browser, tempfile::TempDir) {
    let state = tempfile::tempdir().expect("state");
    let mut all = vec![
        "php",
        dir,
        "--listen",
        "https://127.0.0.1:0",
        "--tls",
        "internal",
        "--tls-names",
        host,
        "--state-dir",
        state.path().to_str().expect("utf-8"),
        "--workers",
        "1",
    ];
    all.extend_from_slice(args);
    let h = Hayate::start(BIN, &all);
    let scratch = tempfile::tempdir().expect("scratch");
    let b = Browser {
        host: host.to_string(),
        port: h.addr.port(),
        ca: hayate_testkit::tls::local_ca(state.path()),
        jar: scratch.path().join("cookies"),
        scratch,
    };
    (h, b, state)
}

/// Root's check and the packages' (installed by scripts/test); false:
/// skipped, not root.
fn can_run(package_files: &[&str]) -> bool {
    if !nix::unistd::Uid::effective().is_root() {
        eprintln!("skipped: Debian's packaged apps under `sudo hayate php` need root (as the README's command)");
        return false;
    }
    for f in package_files {
        assert!(
            Path::new(f).exists(),
            "{f} (its package is installed by scripts/test)"
        );
    }
    true
}

/// A minimal valid PNG (one red pixel).
fn png() -> Vec<u8> {
    let chunk = |kind: &[u8], data: &[u8]| {
        let mut c = (data.len() as u32).to_be_bytes().to_vec();
        let mut crc_input = kind.to_vec();
        crc_input.extend_from_slice(data);
        c.extend_from_slice(&crc_input);
        c.extend_from_slice(&crc32(&crc_input).to_be_bytes());
        c
    };
    // zlib of one scanline: filter 0, RGB ff 00 00 (stored block).
    let raw = [0u8, 0xff, 0, 0];
    let mut zlib = vec![0x78, 0x01, 0x01, 4, 0, !4u8, 0xff];
    zlib.extend_from_slice(&raw);
    zlib.extend_from_slice(&adler32(&raw).to_be_bytes());
    let mut ihdr = 1u32.to_be_bytes().to_vec();
    ihdr.extend_from_slice(&1u32.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);
    [
        b"\x89PNG\r\n\x1a\n".to_vec(),
        chunk(b"IHDR", &ihdr),
        chunk(b"IDAT", &zlib),
        chunk(b"IEND", &[]),
    ]
    .concat()
}

fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

fn adler32(bytes: &[u8]) -> u32 {
    let (mut a, mut b) = (1u32, 0u32);
    for &x in bytes {
        a = (a + u32::from(x)) % 65_521;
        b = (b + a) % 65_521;
    }
    (b << 16) | a
}

/// The value of `name="..." value="..."` in a page's form.
fn form_value(page: &str, name: &str) -> String {
    let at = page
        .find(&format!("name=\"{name}\" value=\""))
        .unwrap_or_else(|| panic!("no {name} in the page"));
    let rest = &page[at + name.len() + 15..];
    rest[..rest.find('"').expect("closing quote")].to_string()
}

/// A JSON string field's value, as WordPress's REST API writes it
/// (`\/` escapes unescaped).
fn json_field(json: &str, name: &str) -> String {
    let key = format!("\"{name}\":\"");
    let at = json
        .find(&key)
        .unwrap_or_else(|| panic!("no {name} in {json}"));
    let rest = &json[at + key.len()..];
    rest[..rest.find('"').expect("closing quote")].replace("\\/", "/")
}

#[test]
fn debians_wordpress_installs_logs_in_posts_and_uploads_over_https_and_http2() {
    let theme = format!("{CONTENT}/themes/twentytwentythree");
    if !can_run(&["/usr/share/wordpress/wp-settings.php", &theme]) {
        return;
    }
    let db = MariaDb::start();
    db.sql(
        "CREATE DATABASE wp; CREATE USER 'wp'@'localhost' IDENTIFIED BY 'pw'; \
         GRANT ALL ON wp.* TO 'wp'@'localhost';",
    )
    .expect("database");
    // A host name of this run's own: Debian's WordPress picks its config
    // by the request's host.
    let host = format!("wp-e2e-{}.test", std::process::id());
    let _config = Removed::write(
        format!("/etc/wordpress/config-{host}.php"),
        &format!(
            "<?php\ndefine('DB_NAME', 'wp');\ndefine('DB_USER', 'wp');\n\
             define('DB_PASSWORD', 'pw');\ndefine('DB_HOST', 'localhost:{}');\n\
             define('WP_CONTENT_DIR', '{CONTENT}');\n",
            db.socket().display()
        ),
    );
    let root = format!("/wp-content/={CONTENT}");
    let (h, b, _state) = serve_php(WORDPRESS, &host, &["--root", &root]);

    // Not installed yet: to the installer, on this host and port.
    let r = b.get("/");
    assert_eq!(r.status, 302, "{}", r.text());
    assert_eq!(r.location, b.url("/wp-admin/install.php"));
    let r = b.post_form(
        "/wp-admin/install.php?step=2",
        &[
            ("weblog_title", "hayate e2e"),
            ("user_name", "admin"),
            ("admin_password", PASSWORD),
            ("admin_password2", PASSWORD),
            ("pw_weak", "1"),
            ("admin_email", "admin@example.com"),
            ("blog_public", "0"),
            ("language", ""),
        ],
    );
    assert!(
        r.status == 200 && r.text().contains("<h1>Success!</h1>"),
        "{}",
        r.text()
    );

    // Log in (a browser has the test cookie already).
    std::fs::write(
        &b.jar,
        format!("{host}\tFALSE\t/\tTRUE\t0\twordpress_test_cookie\tWP%20Cookie%20check\n"),
    )
    .expect("jar");
    let admin = b.url("/wp-admin/");
    let r = b.post_form(
        "/wp-login.php",
        &[
            ("log", "admin"),
            ("pwd", PASSWORD),
            ("wp-submit", "Log In"),
            ("redirect_to", &admin),
            ("testcookie", "1"),
        ],
    );
    assert_eq!(
        (r.status, r.location.as_str()),
        (302, admin.as_str()),
        "{}",
        r.text()
    );
    let r = b.get("/wp-admin/");
    assert!(
        r.status == 200 && r.text().contains("Dashboard"),
        "{}",
        r.status
    );

    // Pretty permalinks, through the settings form and its nonce.
    let page = b.get("/wp-admin/options-permalink.php").text();
    let nonce = form_value(&page, "_wpnonce");
    let r = b.post_form(
        "/wp-admin/options-permalink.php",
        &[
            ("_wpnonce", &nonce),
            ("_wp_http_referer", "/wp-admin/options-permalink.php"),
            ("selection", "/%postname%/"),
            ("permalink_structure", "/%postname%/"),
            ("submit", "Save Changes"),
        ],
    );
    assert_eq!(r.status, 302, "{}", r.text());
    assert!(
        r.location.contains("settings-updated=true"),
        "{}",
        r.location
    );

    // A post over the REST API, at its pretty URL (the front controller).
    let rest_nonce = b.get("/wp-admin/admin-ajax.php?action=rest-nonce").text();
    let nonce_field = format!("X-WP-Nonce: {rest_nonce}");
    let r = b.ask(
        true,
        "/wp-json/wp/v2/posts",
        &[
            "-X",
            "POST",
            "-H",
            &nonce_field,
            "-H",
            "Content-Type: application/json",
            "--data",
            r#"{"title":"From hayate","content":"Served over HTTP/2","status":"publish"}"#,
        ],
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let link = json_field(&r.text(), "link");
    assert_eq!(link, b.url("/from-hayate/"));
    for http2 in [true, false] {
        let r = b.ask(http2, "/from-hayate/", &[]);
        assert_eq!(r.status, 200, "http2 {http2}");
        let text = r.text();
        assert!(text.contains("<title>From hayate"), "{text}");
        assert!(text.contains("Served over HTTP/2"), "{text}");
    }

    // A media upload: WordPress writes it under wp-content (www-data's), and
    // hayate serves it from there as a file.
    let image = png();
    let file = scratch_file(&b, "upload.png", &image);
    let name = format!("hayate-e2e-{}.png", std::process::id());
    let disposition = format!("Content-Disposition: attachment; filename={name}");
    let data = format!("@{}", file.display());
    let r = b.ask(
        true,
        "/wp-json/wp/v2/media",
        &[
            "-X",
            "POST",
            "-H",
            &nonce_field,
            "-H",
            &disposition,
            "-H",
            "Content-Type: image/png",
            "--data-binary",
            &data,
        ],
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let source = json_field(&r.text(), "source_url");
    let path = source
        .strip_prefix(&b.url(""))
        .expect("on this site")
        .to_string();
    let _uploaded = Removed(Path::new(CONTENT).join(path.trim_start_matches("/wp-content/")));
    for http2 in [true, false] {
        let r = b.ask(http2, &path, &[]);
        assert_eq!((r.status, r.content_type.as_str()), (200, "image/png"));
        assert_eq!(r.body, image);
    }

    // The theme's stylesheet: Debian links it from wp-content into
    // /usr/share/wordpress (root's link to root's files).
    let r = b.get("/wp-content/themes/twentytwentythree/style.css");
    assert_eq!(r.status, 200);
    assert!(r.content_type.starts_with("text/css"), "{}", r.content_type);
    h.assert_no_errors();
}

/// Writes `bytes` into the browser's scratch directory.
fn scratch_file(b: &Browser, name: &str, bytes: &[u8]) -> PathBuf {
    let path = b.scratch.path().join(name);
    std::fs::write(&path, bytes).expect("write");
    path
}

#[test]
fn debians_phpmyadmin_serves_its_linked_scripts_and_styles_and_logs_in() {
    const PMA: &str = "/usr/share/phpmyadmin";
    if !can_run(&["/usr/share/phpmyadmin/index.php", "/etc/phpmyadmin/conf.d"]) {
        return;
    }
    let db = MariaDb::start();
    db.sql(
        "CREATE USER 'pma'@'localhost' IDENTIFIED BY 'pw'; GRANT ALL ON *.* TO 'pma'@'localhost';",
    )
    .expect("user");
    // phpMyAdmin reads every file of conf.d after its own config: this one
    // points its first server at the test's MariaDB.
    let _config = Removed::write(
        format!(
            "/etc/phpmyadmin/conf.d/hayate-e2e-{}.php",
            std::process::id()
        ),
        &format!(
            "<?php\n$cfg['Servers'][1]['host'] = 'localhost';\n\
             $cfg['Servers'][1]['connect_type'] = 'socket';\n\
             $cfg['Servers'][1]['socket'] = '{}';\n",
            db.socket().display()
        ),
    );
    let (h, b, _state) = serve_php(PMA, "localhost", &[]);

    let login = b.get("/");
    assert_eq!(login.status, 200, "{}", login.text());
    let page = login.text();
    // What the login page links, served as files with their own types:
    // jQuery and CodeMirror are Debian's links into /usr/share/javascript.
    for (path, kind) in [
        ("/js/vendor/jquery/jquery.min.js", "text/javascript"),
        ("/js/vendor/codemirror/lib/codemirror.css", "text/css"),
        ("/themes/pmahomme/css/theme.css", "text/css"),
    ] {
        assert!(
            page.contains(&path[1..]),
            "{path} is not linked by the page"
        );
        for http2 in [true, false] {
            let r = b.ask(http2, &format!("{path}?v=1"), &[]);
            assert_eq!(r.status, 200, "{path}");
            assert!(
                r.content_type.starts_with(kind),
                "{path}: {}",
                r.content_type
            );
        }
    }
    let token = form_value(&page, "token");
    let r = b.post_form(
        "/index.php",
        &[
            ("pma_username", "pma"),
            ("pma_password", "pw"),
            ("server", "1"),
            ("token", &token),
            ("route", "/"),
        ],
    );
    assert_eq!(r.status, 302, "{}", r.text());
    let home = b.get("/index.php?route=/").text();
    assert!(
        home.contains("MariaDB") && home.contains("logout"),
        "{home}"
    );
    h.assert_no_errors();
}
