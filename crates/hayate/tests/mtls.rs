//! Client certificates (mutual TLS) end to end: sites with
//! `tls_client_auth = "require"` and `"optional"` beside one without, on
//! one https listener, with certificates made by rcgen here (a CA for the
//! server, one for clients, another CA, an expired and a revoked client
//! certificate and the CRL that revokes it). A real rustls client over
//! HTTP/1.1 and curl over HTTP/2 present them; a testkit origin reports the
//! `X-Client-Cert-*` fields it receives.

// Tests block on purpose (they are clients, not the server).
#![allow(clippy::disallowed_methods)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use hayate_testkit::tls::TlsClient;
use hayate_testkit::{eventually, Echo, Hayate, Origin, OriginOptions};
use rcgen::{
    BasicConstraints, CertificateParams, CertificateRevocationListParams, DistinguishedName,
    DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyIdMethod, KeyPair, KeyUsagePurpose,
    RevokedCertParams, SanType, SerialNumber,
};

const BIN: &str = env!("CARGO_BIN_EXE_hayate");

/// A CA writing what it issues as PEM files into a directory.
struct Ca {
    issuer: Issuer<'static, KeyPair>,
    cert: PathBuf,
}

impl Ca {
    fn new(dir: &Path, stem: &str) -> Ca {
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.distinguished_name.push(DnType::CommonName, stem);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key).expect("CA");
        let path = dir.join(format!("{stem}.crt"));
        std::fs::write(&path, cert.pem()).expect("write CA");
        Ca {
            issuer: Issuer::new(params, key),
            cert: path,
        }
    }

    /// Issues `params` into `stem.crt` and `stem.key`; returns the paths
    /// and the certificate's DER.
    fn issue(
        &self,
        dir: &Path,
        stem: &str,
        params: CertificateParams,
    ) -> (PathBuf, PathBuf, Vec<u8>) {
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &self.issuer).expect("issue");
        let (c, k) = (
            dir.join(format!("{stem}.crt")),
            dir.join(format!("{stem}.key")),
        );
        std::fs::write(&c, cert.pem()).expect("write");
        std::fs::write(&k, key.serialize_pem()).expect("write");
        (c, k, cert.der().to_vec())
    }

    /// A client certificate for `name` with `serial`, valid from
    /// yesterday for `days` (negative: expired).
    fn client(
        &self,
        dir: &Path,
        stem: &str,
        name: &str,
        serial: u64,
        days: i64,
    ) -> (PathBuf, PathBuf, Vec<u8>) {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        // In issuing order, the most significant first (RFC 4514 prints
        // it last).
        params.distinguished_name = DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::OrganizationName, "Example");
        params.distinguished_name.push(DnType::CommonName, name);
        params.subject_alt_names.push(SanType::Rfc822Name(
            format!("{name}@example.test").try_into().expect("email"),
        ));
        params.serial_number = Some(SerialNumber::from(serial));
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let now = time::OffsetDateTime::now_utc();
        params.not_before = now - time::Duration::days(2);
        params.not_after = now + time::Duration::days(days);
        self.issue(dir, stem, params)
    }

    /// A CRL revoking `serials`, into `stem.crl` (PEM).
    fn crl(&self, dir: &Path, stem: &str, serials: &[u64]) -> PathBuf {
        let now = time::OffsetDateTime::now_utc();
        let crl = CertificateRevocationListParams {
            this_update: now - time::Duration::hours(1),
            next_update: now + time::Duration::days(7),
            crl_number: SerialNumber::from(1),
            issuing_distribution_point: None,
            revoked_certs: serials
                .iter()
                .map(|s| RevokedCertParams {
                    serial_number: SerialNumber::from(*s),
                    revocation_time: now - time::Duration::hours(1),
                    reason_code: None,
                    invalidity_date: None,
                })
                .collect(),
            key_identifier_method: KeyIdMethod::Sha256,
        }
        .signed_by(&self.issuer)
        .expect("CRL");
        let path = dir.join(format!("{stem}.crl"));
        std::fs::write(&path, crl.pem().expect("pem")).expect("write CRL");
        path
    }
}

/// hayate with three sites on one https listener, all proxying to one
/// origin: `api.test` (also `localhost`, for another hayate to proxy to)
/// requires a client certificate (with a CRL),
/// `opt.test` asks for one, `www.test` (the default site) does not.
struct Setup {
    dir: tempfile::TempDir,
    h: Hayate,
    _origin: Origin,
    server_ca: PathBuf,
    clients: Ca,
    admin: PathBuf,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let server_ca = Ca::new(d, "server-ca");
    let names = ["api.test", "localhost", "opt.test", "www.test"]
        .map(String::from)
        .to_vec();
    let (cert, key, _) =
        server_ca.issue(d, "server", CertificateParams::new(names).expect("params"));
    let clients = Ca::new(d, "client-ca");
    let crl = clients.crl(d, "client-ca", &[66]);
    let origin = Origin::start(OriginOptions::default());
    let admin = d.join("admin.sock");
    let config = format!(
        r#"listen = ["https://127.0.0.1:0"]
tls_cert = [{cert:?}]
tls_key = [{key:?}]
admin = "unix:{admin}"
control = "{control}"
proxy = ["{url}"]

[[site]]
hosts = ["api.test", "localhost"]
tls_client_auth = "require"
tls_client_ca = {ca:?}
tls_client_crl = [{crl:?}]

[[site]]
hosts = ["opt.test"]
tls_client_auth = "optional"
tls_client_ca = {ca:?}

[[site]]
"#,
        url = origin.url(),
        admin = admin.display(),
        control = d.join("control.sock").display(),
        ca = clients.cert,
    );
    let h = Hayate::start_config(BIN, &d.join("hayate.toml"), &config);
    Setup {
        server_ca: server_ca.cert,
        h,
        _origin: origin,
        clients,
        admin,
        dir,
    }
}

impl Setup {
    fn addr(&self) -> SocketAddr {
        self.h.addr
    }

    fn client(&self) -> TlsClient {
        TlsClient::trusting(&self.server_ca).without_resumption()
    }

    /// A client presenting `stem.crt` from the test's directory.
    fn client_with(&self, stem: &str) -> TlsClient {
        let d = self.dir.path();
        self.client().with_client_cert(
            &d.join(format!("{stem}.crt")),
            &d.join(format!("{stem}.key")),
        )
    }
}

/// `GET /echo` for `host` over a new connection with SNI `sni`, with
/// `extra` header lines: what the origin saw, or why there was no answer.
fn echo(
    tls: &TlsClient,
    addr: SocketAddr,
    sni: &str,
    host: &str,
    extra: &str,
) -> Result<(u16, Echo), String> {
    let mut c = tls.try_connect(addr, sni)?;
    let raw = format!("GET /echo HTTP/1.1\r\nHost: {host}\r\n{extra}\r\n");
    let r = c.exchange(raw.as_bytes())?;
    Ok((r.status, Echo::parse(&r.text())))
}

fn sha256_hex(der: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, der)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[test]
fn a_required_certificate_reaches_the_upstream_and_client_sent_copies_do_not() {
    let s = setup();
    let (_, _, der) = s.clients.client(s.dir.path(), "alice", "alice", 0x1234, 30);
    let alice = s.client_with("alice");
    let fake = "X-Client-Cert-Subject: CN=mallory\r\nx-client-cert-verify: SUCCESS\r\n";
    let (status, seen) = echo(&alice, s.addr(), "api.test", "api.test", fake).expect("served");
    assert_eq!(status, 200);
    assert_eq!(seen.header("X-Client-Cert-Verify"), Some("SUCCESS"));
    assert_eq!(
        seen.header("X-Client-Cert-Subject"),
        Some("CN=alice,O=Example")
    );
    assert_eq!(seen.header("X-Client-Cert-Issuer"), Some("CN=client-ca"));
    assert_eq!(
        seen.header("X-Client-Cert-SAN"),
        Some("email:alice@example.test")
    );
    assert_eq!(seen.header("X-Client-Cert-Serial"), Some("1234"));
    assert_eq!(
        seen.header("X-Client-Cert-Fingerprint"),
        Some(sha256_hex(&der).as_str())
    );
    assert!(seen
        .header("X-Client-Cert-Not-After")
        .is_some_and(|d| d.ends_with(" GMT")));
    let cert_fields = |e: &Echo| {
        e.headers
            .iter()
            .filter(|(n, _)| n.to_ascii_lowercase().starts_with("x-client-cert-"))
            .count()
    };
    assert_eq!(cert_fields(&seen), 7, "{:?}", seen.headers);

    // A site without client certificates passes no such field on, whatever
    // the client claims.
    let (status, seen) = echo(&s.client(), s.addr(), "www.test", "www.test", fake).expect("served");
    assert_eq!(status, 200);
    assert_eq!(cert_fields(&seen), 0, "{:?}", seen.headers);
    s.h.assert_no_errors();
}

#[test]
fn required_refuses_no_certificate_another_ca_expired_and_revoked_with_an_alert() {
    let s = setup();
    let d = s.dir.path();
    s.clients.client(d, "expired", "old", 7, -1);
    s.clients.client(d, "revoked", "gone", 66, 30);
    let other = Ca::new(d, "other-ca");
    other.client(d, "stranger", "stranger", 9, 30);
    for (who, tls, alert) in [
        ("no certificate", s.client(), "CertificateRequired"),
        ("another CA", s.client_with("stranger"), "UnknownCA"),
        ("expired", s.client_with("expired"), "CertificateExpired"),
        ("revoked", s.client_with("revoked"), "CertificateRevoked"),
    ] {
        let refused = echo(&tls, s.addr(), "api.test", "api.test", "");
        let why = refused.expect_err(who);
        assert!(why.contains(alert), "{who}: {why}");
    }
    // The alert goes out before the worker counts the failure: the last
    // handshake's count is waited for.
    eventually("each refusal counted by its reason", || {
        let metrics = hayate_testkit::unix_get(&s.admin, "/metrics");
        let counted = ["missing", "unknown_ca", "expired", "revoked"]
            .iter()
            .all(|reason| {
                metrics.contains(&format!(
                    "hayate_tls_client_cert_failures_total{{reason=\"{reason}\"}} 1"
                ))
            })
            && metrics.contains(
                "hayate_tls_handshakes_total{result=\"failed\",reason=\"client_cert\"} 4",
            );
        counted.then_some(()).ok_or(metrics)
    });
}

#[test]
fn optional_serves_clients_without_a_certificate_and_names_those_with_one() {
    let s = setup();
    s.clients.client(s.dir.path(), "bob", "bob", 0xb0b, 30);
    let fake = "X-Client-Cert-Subject: CN=mallory\r\n";
    let (status, seen) = echo(&s.client(), s.addr(), "opt.test", "opt.test", fake).expect("served");
    assert_eq!(status, 200);
    assert_eq!(
        seen.header("X-Client-Cert-Subject"),
        None,
        "{:?}",
        seen.headers
    );
    assert_eq!(seen.header("X-Client-Cert-Verify"), None);
    let (status, seen) = echo(
        &s.client_with("bob"),
        s.addr(),
        "opt.test",
        "opt.test",
        fake,
    )
    .expect("served");
    assert_eq!(status, 200);
    assert_eq!(
        seen.header("X-Client-Cert-Subject"),
        Some("CN=bob,O=Example")
    );
    // One that is sent must verify, optional or not.
    let other = Ca::new(s.dir.path(), "other-ca");
    other.client(s.dir.path(), "stranger", "stranger", 9, 30);
    let refused = echo(
        &s.client_with("stranger"),
        s.addr(),
        "opt.test",
        "opt.test",
        "",
    );
    assert!(refused.expect_err("stranger").contains("UnknownCA"));
}

#[test]
fn a_host_for_a_site_that_verifies_otherwise_than_the_handshake_is_misdirected() {
    let s = setup();
    s.clients.client(s.dir.path(), "alice", "alice", 0x1234, 30);
    // No certificate asked by www.test's handshake: api.test requires one.
    let (status, _) = echo(&s.client(), s.addr(), "www.test", "api.test", "").expect("answer");
    assert_eq!(status, 421);
    // A certificate verified for api.test is not carried to www.test.
    let (status, _) = echo(
        &s.client_with("alice"),
        s.addr(),
        "api.test",
        "www.test",
        "",
    )
    .expect("answer");
    assert_eq!(status, 421);
    // Nor is none from www.test a reason to refuse at opt.test (optional).
    let (status, _) = echo(&s.client(), s.addr(), "www.test", "opt.test", "").expect("answer");
    assert_eq!(status, 200);
}

#[test]
fn over_http2_with_curl_the_certificate_reaches_the_upstream() {
    let s = setup();
    let d = s.dir.path();
    s.clients.client(d, "carol", "carol", 0xca201, 30);
    let url = "https://api.test:{port}/echo".replace("{port}", &s.addr().port().to_string());
    let resolve = format!("api.test:{}:127.0.0.1", s.addr().port());
    let curl = |cert: bool| {
        let mut cmd = std::process::Command::new("curl");
        cmd.args([
            "-sS",
            "--http2",
            "--max-time",
            "10",
            "-w",
            "\n%{http_version} %{http_code}",
        ])
        .args(["--resolve", &resolve, "--cacert"])
        .arg(&s.server_ca)
        .args(["-H", "X-Client-Cert-Serial: 0"]);
        if cert {
            cmd.arg("--cert").arg(d.join("carol.crt"));
            cmd.arg("--key").arg(d.join("carol.key"));
        }
        cmd.arg(&url).output().expect("curl (installed by .ci/run)")
    };
    let out = curl(true);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.ends_with("\n2 200"), "{out:?}");
    let seen = Echo::parse(&text);
    assert_eq!(
        seen.header("X-Client-Cert-Subject"),
        Some("CN=carol,O=Example")
    );
    assert_eq!(seen.header("X-Client-Cert-Serial"), Some("0CA201"));
    assert_eq!(
        seen.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case("x-client-cert-serial"))
            .count(),
        1
    );
    // Without a certificate: no HTTP/2 at all, the handshake is refused.
    let out = curl(false);
    assert!(!out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).ends_with("000"),
        "{out:?}"
    );
}

#[test]
fn a_route_presents_its_client_certificate_to_an_https_upstream_that_requires_one() {
    // The upstream: the setup's hayate, whose `localhost` site requires
    // client certificates from `client-ca`, in front of the echo origin.
    let s = setup();
    let d = s.dir.path();
    s.clients.client(d, "front", "front", 0xf0, 30);
    let member = format!("https://localhost:{}", s.addr().port());
    let ca = s.server_ca.to_str().expect("path");
    let front_args = |cert: bool| {
        let mut args = vec![
            "--proxy".to_string(),
            member.clone(),
            "--proxy-tls-ca".into(),
            ca.into(),
        ];
        args.extend(["--proxy-host".into(), "upstream".into()]);
        if cert {
            args.push("--proxy-tls-cert".into());
            args.push(d.join("front.crt").display().to_string());
            args.push("--proxy-tls-key".into());
            args.push(d.join("front.key").display().to_string());
        }
        args
    };
    let with = front_args(true);
    let with: Vec<&str> = with.iter().map(String::as_str).collect();
    let front = Hayate::start(BIN, &with);
    let r = front.client().get("/echo", &[]);
    assert_eq!(r.status, 200, "{}", front.stderr());
    let seen = Echo::parse(&r.text());
    assert_eq!(
        seen.header("X-Client-Cert-Subject"),
        Some("CN=front,O=Example")
    );

    let without = front_args(false);
    let without: Vec<&str> = without.iter().map(String::as_str).collect();
    let front = Hayate::start(BIN, &without);
    assert_eq!(front.client().get("/echo", &[]).status, 502);
}

#[test]
fn a_reload_reads_the_crl_again_and_sessions_from_before_do_not_resume() {
    let s = setup();
    let d = s.dir.path();
    s.clients.client(d, "alice", "alice", 0x1234, 30);
    // With resumption: the second connection offers the first's ticket.
    let alice = TlsClient::trusting(&s.server_ca)
        .with_client_cert(&d.join("alice.crt"), &d.join("alice.key"));
    let (status, _) = echo(&alice, s.addr(), "api.test", "api.test", "").expect("served");
    assert_eq!(status, 200);
    let mut again = alice.connect(s.addr(), "api.test");
    let r = again.exchange(b"GET /echo HTTP/1.1\r\nHost: api.test\r\n\r\n");
    assert_eq!(r.expect("served").status, 200);
    let kind = again.tls().expect("tls").handshake_kind();
    assert_eq!(kind, Some(rustls::HandshakeKind::Resumed));

    s.clients.crl(d, "client-ca", &[66, 0x1234]);
    let (ok, said) = hayate_testkit::run_to_end(
        std::process::Command::new(BIN)
            .args(["reload", "--control"])
            .arg(d.join("control.sock")),
    );
    assert!(ok && said.contains("certificates loaded again"), "{said}");
    let refused = echo(&alice, s.addr(), "api.test", "api.test", "");
    let why = refused.expect_err("revoked since");
    assert!(why.contains("CertificateRevoked"), "{why}");
}

#[test]
fn hayate_check_names_the_line_of_an_unusable_ca_crl_or_upstream_client_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let ca = Ca::new(d, "client-ca");
    ca.client(d, "front", "front", 1, 30);
    let other = Ca::new(d, "other-ca");
    other.client(d, "other", "other", 2, 30);
    let file = d.join("hayate.toml");
    let check = |text: String| {
        std::fs::write(&file, text).expect("write");
        hayate_testkit::run_to_end(std::process::Command::new(BIN).arg("check").arg(&file))
    };
    let site = |ca: &Path, crl: &Path| {
        format!(
            "root = {root:?}\n[[site]]\nhosts = [\"a.test\"]\ntls_client_auth = \"require\"\n\
             tls_client_ca = {ca:?}\ntls_client_crl = [{crl:?}]\n",
            root = d,
        )
    };
    let crl = ca.crl(d, "client-ca", &[]);
    let (ok, said) = check(site(&ca.cert, &crl));
    assert!(ok, "{said}");
    let (ok, said) = check(site(&d.join("missing.pem"), &crl));
    assert!(
        !ok && said.contains("hayate.toml:5: tls_client_ca: "),
        "{said}"
    );
    let (ok, said) = check(site(&ca.cert, &ca.cert));
    assert!(
        !ok && said.contains("hayate.toml:6: tls_client_crl: "),
        "{said}"
    );
    assert!(said.contains("no PEM CRL"), "{said}");

    let route = |cert: &str, key: &str| {
        format!(
            "root = {d:?}\nproxy_tls_ca = {ca:?}\n[[site]]\n[[site.route]]\nprefix = \"/api/\"\n\
             proxy = [\"https://127.0.0.1:1\"]\n{cert}\n{key}\n",
            ca = ca.cert,
        )
    };
    let cert = format!("proxy_tls_cert = {:?}", d.join("front.crt"));
    let (ok, said) = check(route(&cert, ""));
    assert!(
        !ok && said.contains("hayate.toml:7: proxy_tls_cert: "),
        "{said}"
    );
    assert!(said.contains("needs proxy_tls_key"), "{said}");
    let wrong_key = format!("proxy_tls_key = {:?}", d.join("other.key"));
    let (ok, said) = check(route(&cert, &wrong_key));
    assert!(
        !ok && said.contains("hayate.toml:7: proxy_tls_cert: "),
        "{said}"
    );
    let key = format!("proxy_tls_key = {:?}", d.join("front.key"));
    let (ok, said) = check(route(&cert, &key));
    assert!(ok, "{said}");
}
