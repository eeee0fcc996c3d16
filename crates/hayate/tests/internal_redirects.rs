//! X-Accel-Redirect and X-Sendfile end to end (issue "Site policy, part
//! 2"): a real Node app and a real php-fpm decide who may have a file and
//! hand it back; hayate serves it with full static semantics, and refuses
//! whatever would leave the internal root.

// Tests block on purpose (they are clients, not the server).
#![allow(clippy::disallowed_methods)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use hayate_supervisor::php::PhpPool;
use hayate_testkit::php::PhpFpm;
use hayate_testkit::Hayate;

const BIN: &str = env!("CARGO_BIN_EXE_hayate");

/// The app: it answers every download with where the file is.
const NODE_APP: &str = r#"
const http = require('http');
const sendable = process.argv[2];
http.createServer((req, res) => {
  const u = new URL(req.url, 'http://app');
  const f = u.searchParams.get('f') || '';
  const hand = (field, value) => {
    res.setHeader(field, value);
    res.setHeader('Content-Type', 'text/html');
    res.setHeader('Content-Disposition', 'attachment; filename="x"');
    res.setHeader('Cache-Control', 'private, max-age=5');
    res.end('the app body must never be sent');
  };
  if (u.pathname === '/download') return hand('X-Accel-Redirect', '/protected/' + f);
  if (u.pathname === '/raw') return hand('X-Accel-Redirect', f);
  if (u.pathname === '/sendfile') return hand('X-Sendfile', sendable + '/' + f);
  if (u.pathname.startsWith('/internal-api/')) return res.end(`inner ${req.method} ${req.url}`);
  res.end('app');
}).listen(0, '127.0.0.1', function () { console.log(this.address().port); });
"#;

/// The Node app, started; its port read from its first line.
struct NodeApp(Child, u16);

impl NodeApp {
    fn start(dir: &Path) -> NodeApp {
        let script = dir.join("app.js");
        std::fs::write(&script, NODE_APP).expect("write app");
        let mut child = Command::new("node")
            .arg(&script)
            .arg(dir.join("sendable"))
            .stdout(Stdio::piped())
            .spawn()
            .expect("node");
        let mut line = String::new();
        let out = child.stdout.take().expect("stdout");
        BufReader::new(out).read_line(&mut line).expect("port");
        let port = line.trim().parse().expect("a port");
        NodeApp(child, port)
    }
}

impl Drop for NodeApp {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Files: `private/` (internal), `public/`, `sendable/`.
fn files(dir: &Path) {
    for sub in ["private", "public", "sendable"] {
        std::fs::create_dir_all(dir.join(sub)).expect("mkdir");
    }
    std::fs::write(dir.join("private/report.pdf"), "%PDF-1.4 report").expect("write");
    std::fs::write(dir.join("public/a.txt"), "public\n").expect("write");
    std::fs::write(dir.join("sendable/doc.txt"), "sendable doc\n").expect("write");
    std::os::unix::fs::symlink("/etc/hostname", dir.join("private/host.txt")).expect("symlink");
}

/// A config file in `dir` made of `text`, started.
fn start(dir: &Path, text: &str) -> Hayate {
    Hayate::start_config(BIN, &dir.join("hayate.toml"), text)
}

#[test]
fn a_node_app_hands_files_back_and_nothing_leaves_the_internal_root() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    files(d);
    let app = NodeApp::start(d);
    let node = format!("http://127.0.0.1:{}", app.1);
    let text = format!(
        "listen = [\"127.0.0.1:0\"]\nhttp2 = true\n\
         [[site]]\nproxy = [\"{node}\"]\nx_sendfile = \"{d}/sendable\"\n\
         [[site.route]]\nprefix = \"/protected/\"\nroot = \"{d}/private\"\nstrip_prefix = true\ninternal = true\nsymlinks = \"never\"\n\
         [[site.route]]\nprefix = \"/files/\"\nroot = \"{d}/public\"\nstrip_prefix = true\n\
         [[site.route]]\nprefix = \"/internal-api/\"\nproxy = [\"{node}\"]\ninternal = true\n",
        d = d.display()
    );
    let h = start(d, &text);
    let mut c = h.client();

    let r = c.get("/download?f=report.pdf", &[]);
    assert_eq!((r.status, r.text().as_str()), (200, "%PDF-1.4 report"));
    assert_eq!(r.header("content-type"), Some("application/pdf"));
    assert_eq!(
        r.header("content-disposition"),
        Some("attachment; filename=\"x\"")
    );
    assert_eq!(r.header("cache-control"), Some("private, max-age=5"));
    assert_eq!(r.header("x-accel-redirect"), None);
    assert!(r.header("etag").is_some());
    // Ranges and conditionals, as for any file.
    let r = c.get("/download?f=report.pdf", &[("Range", "bytes=0-3")]);
    assert_eq!((r.status, r.text().as_str()), (206, "%PDF"));
    let etag = c
        .get("/download?f=report.pdf", &[])
        .header("etag")
        .map(str::to_string);
    let r = c.get(
        "/download?f=report.pdf",
        &[("If-None-Match", etag.as_deref().unwrap_or("x"))],
    );
    assert_eq!(r.status, 304);
    let r = c.request("HEAD", "/download?f=report.pdf", &[]);
    assert_eq!((r.status, r.body.len()), (200, 0));
    // A POST that the app answers with a file gets the file.
    let r = c.post("/download?f=report.pdf", &[], b"form=1");
    assert_eq!((r.status, r.text().as_str()), (200, "%PDF-1.4 report"));

    // The internal route is not there for clients, nor is a client's own
    // X-Accel-Redirect anything but a field.
    assert_eq!(c.get("/protected/report.pdf", &[]).status, 404);
    let r = c.get("/", &[("X-Accel-Redirect", "/protected/report.pdf")]);
    assert_eq!(r.text(), "app");

    // What the app may not ask for: out of the root, a route clients
    // reach, a symlink out of the root, a missing file.
    for (path, status) in [
        ("/raw?f=/protected/../../etc/passwd", 500),
        ("/raw?f=/files/a.txt", 500),
        ("/raw?f=/nowhere", 500),
        ("/download?f=host.txt", 403),
        ("/download?f=missing.pdf", 404),
    ] {
        let r = c.get(path, &[]);
        assert_eq!(r.status, status, "{path}: {}", r.text());
        assert!(!r.text().contains("app body"), "{path}");
    }

    // An internal route with an upstream: asked with GET.
    let r = c.get("/raw?f=/internal-api/report", &[]);
    assert_eq!(r.text(), "inner GET /internal-api/report");

    // X-Sendfile under x_sendfile only.
    let r = c.get("/sendfile?f=doc.txt", &[]);
    assert_eq!((r.status, r.text().as_str()), (200, "sendable doc\n"));
    for f in ["../private/report.pdf", "..%2fprivate/report.pdf"] {
        let r = c.get(&format!("/sendfile?f={f}"), &[]);
        assert!(r.status == 500 || r.status == 404, "{f}: {}", r.status);
        assert!(!r.text().contains("report"), "{f}");
    }
    let err = h.stderr();
    assert!(
        err.contains("X-Accel-Redirect: \"/files/a.txt\" refused: no internal route"),
        "{err}"
    );
}

#[test]
fn php_hands_a_file_back_with_x_accel_redirect() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    files(d);
    let www = d.join("www");
    std::fs::create_dir_all(&www).expect("mkdir");
    std::fs::write(
        www.join("get.php"),
        "<?php\nif (($_GET['key'] ?? '') !== 'ok') { http_response_code(403); echo 'no'; exit; }\n\
         header('X-Accel-Redirect: /protected/report.pdf');\n\
         header('Content-Disposition: attachment; filename=\"report.pdf\"');\n",
    )
    .expect("write");
    let fpm = PhpFpm::start(&PhpPool {
        children: 1,
        max_requests: 0,
        terminate_after_secs: 0,
    });
    let text = format!(
        "listen = [\"127.0.0.1:0\"]\n\
         [[site]]\nroot = \"{www}\"\nfastcgi = [\"{fpm}\"]\n\
         [[site.route]]\nprefix = \"/protected/\"\nroot = \"{d}/private\"\nstrip_prefix = true\ninternal = true\n",
        www = www.display(),
        fpm = fpm.address(),
        d = d.display()
    );
    let h = start(d, &text);
    let mut c = h.client();
    let r = c.get("/get.php?key=ok", &[]);
    assert_eq!(
        (r.status, r.text().as_str()),
        (200, "%PDF-1.4 report"),
        "{}",
        h.stderr()
    );
    assert_eq!(
        r.header("content-disposition"),
        Some("attachment; filename=\"report.pdf\"")
    );
    assert_eq!(c.get("/get.php?key=bad", &[]).status, 403);
    assert_eq!(c.get("/protected/report.pdf", &[]).status, 404);
}
