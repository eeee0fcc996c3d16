//! Let's Encrypt's test ACME server, pebble, with its DNS companion
//! (pebble-challtestsrv, which answers 127.0.0.1 for every name), for tests
//! of hayate's ACME client: a real ACME server validating real challenges
//! against hayate's listeners.
//!
//! Installed by `.ci/run` with `go install
//! github.com/letsencrypt/pebble/v2/cmd/pebble@v2.10.1` (and
//! `.../cmd/pebble-challtestsrv@v2.10.1`); found on PATH or in Go's bin
//! directory.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::tls::TlsClient;
use crate::WAIT;

/// A running pebble and its DNS server, stopped when dropped.
pub struct Pebble {
    /// The ACME directory URL.
    pub directory: String,
    /// The CA of pebble's own HTTPS (for `acme_ca_root`).
    pub api_ca: PathBuf,
    management: SocketAddr,
    children: Vec<Child>,
    dir: tempfile::TempDir,
}

/// A free port on 127.0.0.1 (bound and released: a test gives it to a
/// server that must listen on a port known in advance).
pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// A tool installed with `go install MODULE` (`.ci/run` does): found on
/// PATH or in Go's bin directory.
pub fn go_binary(name: &str, module: &str) -> PathBuf {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    if let Some(gopath) = std::env::var_os("GOPATH") {
        dirs.push(PathBuf::from(gopath).join("bin"));
    }
    if let Some(home) = std::env::var_os("HOME") {
        dirs.push(PathBuf::from(home).join("go/bin"));
    }
    dirs.into_iter()
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{name} not found: go install {module}"))
}

fn binary(name: &str) -> PathBuf {
    go_binary(
        name,
        &format!("github.com/letsencrypt/pebble/v2/cmd/{name}@v2.10.1"),
    )
}

impl Pebble {
    /// Starts pebble validating HTTP-01 on `http_port` and TLS-ALPN-01 on
    /// `tls_port` of 127.0.0.1, issuing certificates valid for
    /// `validity_secs`; waits until its directory answers.
    pub fn start(http_port: u16, tls_port: u16, validity_secs: u64) -> Pebble {
        Pebble::start_using(http_port, tls_port, validity_secs, None)
    }

    /// Starts pebble resolving every name (DNS-01's TXT records included)
    /// at the DNS server `dns` (a real authoritative server of the test's
    /// zone) instead of its companion's.
    pub fn start_with_dns(dns: SocketAddr, validity_secs: u64) -> Pebble {
        Pebble::start_using(free_port(), free_port(), validity_secs, Some(dns))
    }

    /// Like [`Pebble::start_with_dns`], validating TLS-ALPN-01 on
    /// `tls_port` (names resolve to 127.0.0.1 in the test's zone), for a
    /// hayate that answers DNS-01 for some names and TLS-ALPN-01 for others.
    pub fn start_with_dns_and_tls(dns: SocketAddr, tls_port: u16, validity_secs: u64) -> Pebble {
        Pebble::start_using(free_port(), tls_port, validity_secs, Some(dns))
    }

    fn start_using(
        http_port: u16,
        tls_port: u16,
        validity_secs: u64,
        dns: Option<SocketAddr>,
    ) -> Pebble {
        let dir = tempfile::tempdir().expect("tempdir");
        // pebble's own HTTPS certificate, from a CA made here.
        let ca_key = rcgen::KeyPair::generate().expect("key");
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca_cert = ca_params.self_signed(&ca_key).expect("CA");
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let key = rcgen::KeyPair::generate().expect("key");
        let params = rcgen::CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()])
            .expect("params");
        let cert = params.signed_by(&key, &issuer).expect("cert");
        let api_ca = dir.path().join("api-ca.pem");
        std::fs::write(&api_ca, ca_cert.pem()).expect("write");
        std::fs::write(dir.path().join("cert.pem"), cert.pem()).expect("write");
        std::fs::write(dir.path().join("key.pem"), key.serialize_pem()).expect("write");

        let (api, management) = (free_port(), free_port());
        let config = format!(
            r#"{{"pebble": {{
  "listenAddress": "127.0.0.1:{api}",
  "managementListenAddress": "127.0.0.1:{management}",
  "certificate": "{cert}",
  "privateKey": "{key}",
  "httpPort": {http_port},
  "tlsPort": {tls_port},
  "ocspResponderURL": "",
  "externalAccountBindingRequired": false,
  "retryAfter": {{"authz": 1, "order": 1}},
  "keyAlgorithm": "ecdsa",
  "profiles": {{"default": {{"description": "test", "validityPeriod": {validity_secs}}}}}
}}}}"#,
            cert = dir.path().join("cert.pem").display(),
            key = dir.path().join("key.pem").display(),
        );
        let config_path = dir.path().join("pebble.json");
        std::fs::write(&config_path, config).expect("write");

        let mut children = Vec::new();
        let dns = match dns {
            Some(dns) => dns.to_string(),
            None => {
                let port = free_port();
                let dns_server = Command::new(binary("pebble-challtestsrv"))
                    .args(["-defaultIPv4", "127.0.0.1", "-defaultIPv6", ""])
                    .args(["-dnsserver", &format!("127.0.0.1:{port}")])
                    .args(["-management", &format!("127.0.0.1:{}", free_port())])
                    .args(["-http01", "", "-https01", "", "-tlsalpn01", "", "-doh", ""])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("start pebble-challtestsrv");
                children.push(dns_server);
                format!("127.0.0.1:{port}")
            }
        };
        let mut pebble = Command::new(binary("pebble"))
            .arg("-config")
            .arg(&config_path)
            .args(["-dnsserver", &dns])
            // No random sleeps before validation, no random nonce rejections.
            .env("PEBBLE_VA_NOSLEEP", "1")
            .env("PEBBLE_WFE_NONCEREJECT", "0")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start pebble");
        let stdout = pebble.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.contains("ACME directory available") {
                    let _ = tx.send(());
                }
            }
        });
        children.push(pebble);
        let p = Pebble {
            directory: format!("https://127.0.0.1:{api}/dir"),
            api_ca,
            management: format!("127.0.0.1:{management}").parse().expect("addr"),
            children,
            dir,
        };
        rx.recv_timeout(WAIT).expect("pebble did not start");
        // pebble logs its addresses before it binds them: wait until both
        // accept.
        for port in [api, management] {
            crate::eventually("pebble listening", || {
                std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())
            });
        }
        p
    }

    /// Writes the root that pebble signs certificates with (it makes a new
    /// one each start) to a file, for clients to trust.
    pub fn issuer_root(&self) -> PathBuf {
        let client = TlsClient::with_alpn(&self.api_ca, &[]);
        // Accepting TCP is not yet serving TLS: under load pebble has reset
        // a first handshake on its management port.
        let r = crate::eventually("pebble's management port answering over TLS", || {
            let mut c = client.try_connect(self.management, "127.0.0.1")?;
            Ok(c.get("/roots/0", &[]))
        });
        assert_eq!(r.status, 200, "pebble's root: {}", r.text());
        let path = self.dir.path().join("issuer-root.pem");
        std::fs::write(&path, &r.body).expect("write");
        path
    }

    /// Makes pebble's renewal information (ARI) for the certificate in
    /// `cert_pem` (its first PEM block) suggest a window that has begun:
    /// what a CA says of certificates it is about to revoke.
    pub fn ask_renewal_now(&self, cert_pem: &str) {
        let aria =
            r#"{"suggestedWindow":{"start":"2020-01-01T00:00:00Z","end":"2020-01-02T00:00:00Z"}}"#;
        let escape = |s: &str| {
            s.replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n")
        };
        let body = format!(
            r#"{{"Certificate":"{}","ARIResponse":"{}"}}"#,
            escape(cert_pem),
            escape(aria)
        );
        let client = TlsClient::with_alpn(&self.api_ca, &[]);
        let mut c = client.connect(self.management, "127.0.0.1");
        let head = format!(
            "POST /set-renewal-info/ HTTP/1.1\r\nHost: pebble\r\nUser-Agent: hayate-testkit\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        c.send(head.as_bytes()).send(body.as_bytes());
        let r = c.read_response(false);
        assert_eq!(r.status, 200, "pebble's set-renewal-info: {}", r.text());
    }

    /// The directory pebble's files are in.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Pebble {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
