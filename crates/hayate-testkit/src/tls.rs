//! A real rustls client for tests of hayate's HTTPS: trusts one CA file,
//! offers ALPN, keeps sessions for resumption, and connects [`Client`]s.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

use crate::{site, tcp_connect, Client, Hayate, Stream};

/// A TLS client configuration: whom it trusts, what it offers.
#[derive(Clone)]
pub struct TlsClient {
    config: Arc<ClientConfig>,
}

impl TlsClient {
    /// Trusts the PEM certificates in `ca`, offers `http/1.1`, and resumes
    /// sessions (the same `TlsClient` keeps them between connections).
    pub fn trusting(ca: &Path) -> TlsClient {
        TlsClient::with_alpn(ca, &["http/1.1"])
    }

    /// Like [`TlsClient::trusting`], offering `alpn` (none if empty).
    pub fn with_alpn(ca: &Path, alpn: &[&str]) -> TlsClient {
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(ca).expect("CA file") {
            roots
                .add(cert.expect("CA certificate"))
                .expect("trust the CA");
        }
        // aws-lc-rs, named: hayate links ring too (decision 0007), so
        // rustls has no process default to pick by itself.
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = alpn.iter().map(|p| p.as_bytes().to_vec()).collect();
        TlsClient {
            config: Arc::new(config),
        }
    }

    /// The same trust and ALPN, without resumption: every handshake is a
    /// full one and shows the server's current certificate.
    pub fn without_resumption(&self) -> TlsClient {
        let mut config = (*self.config).clone();
        config.resumption = rustls::client::Resumption::disabled();
        TlsClient {
            config: Arc::new(config),
        }
    }

    /// Connects to `addr`, asking for `name` (an IP address sends no SNI),
    /// and completes the handshake.
    pub fn connect(&self, addr: SocketAddr, name: &str) -> Client {
        self.try_connect(addr, name)
            .unwrap_or_else(|e| panic!("TLS handshake with {addr} as {name}: {e}"))
    }

    /// [`TlsClient::connect`], returning the handshake's error.
    pub fn try_connect(&self, addr: SocketAddr, name: &str) -> Result<Client, String> {
        let server_name = ServerName::try_from(name.to_string()).map_err(|e| e.to_string())?;
        let mut conn =
            ClientConnection::new(self.config.clone(), server_name).map_err(|e| e.to_string())?;
        let mut sock = tcp_connect(addr);
        while conn.is_handshaking() {
            conn.complete_io(&mut sock).map_err(|e| e.to_string())?;
        }
        Ok(Client {
            stream: Stream::Tls(Box::new(StreamOwned::new(conn, sock))),
            buf: Vec::new(),
        })
    }
}

/// The DER of the certificate the server sent for `client`'s session.
pub fn served_certificate(client: &Client) -> Vec<u8> {
    let conn: &ClientConnection = client.tls().expect("a TLS connection");
    conn.peer_certificates().expect("certificates")[0].to_vec()
}

/// Starts `bin` serving the testkit's [`site`] on an https listener on
/// 127.0.0.1, with certificates from its local CA (`--tls internal`) kept
/// in a state directory of its own, and more `args`. Returns hayate, the
/// state directory (the CA is [`local_ca`] in it) and the site.
pub fn start_with_local_ca(
    bin: &str,
    args: &[&str],
) -> (Hayate, tempfile::TempDir, tempfile::TempDir) {
    let root = site();
    let state = tempfile::tempdir().expect("state");
    let mut all = vec![
        root.path().to_str().expect("path"),
        "--listen",
        "https://127.0.0.1:0",
        "--tls",
        "internal",
        "--state-dir",
        state.path().to_str().expect("path"),
    ];
    all.extend_from_slice(args);
    (Hayate::start(bin, &all), state, root)
}

/// The local CA's certificate in a state directory.
pub fn local_ca(state: &Path) -> std::path::PathBuf {
    state.join("local-ca/ca.crt")
}

/// A test CA and the certificates it issues, as PEM files in a directory.
pub struct Pki {
    dir: tempfile::TempDir,
    issuer: Issuer<'static, KeyPair>,
}

impl Pki {
    /// A new CA, its certificate written as `ca.crt`.
    pub fn new() -> Pki {
        let dir = tempfile::tempdir().expect("tempdir");
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).expect("CA");
        std::fs::write(dir.path().join("ca.crt"), cert.pem()).expect("write CA");
        Pki {
            dir,
            issuer: Issuer::new(params, key),
        }
    }

    /// The CA's certificate file.
    pub fn ca(&self) -> PathBuf {
        self.dir.path().join("ca.crt")
    }

    /// Issues a certificate for `names` into `stem.crt` and `stem.key`
    /// (mode 0600); returns the two paths and the certificate's DER.
    pub fn issue(&self, names: &[&str], stem: &str) -> (String, String, Vec<u8>) {
        let key = KeyPair::generate().expect("key");
        let params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .expect("params");
        let cert = params.signed_by(&key, &self.issuer).expect("issue");
        let cert_path = self.dir.path().join(format!("{stem}.crt"));
        let key_path = self.dir.path().join(format!("{stem}.key"));
        write_replacing(&cert_path, cert.pem().as_bytes());
        write_replacing(&key_path, key.serialize_pem().as_bytes());
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        (
            cert_path.display().to_string(),
            key_path.display().to_string(),
            cert.der().to_vec(),
        )
    }
}

impl Default for Pki {
    fn default() -> Pki {
        Pki::new()
    }
}

/// Writes a file whole, by rename, as deployment tools do.
fn write_replacing(path: &Path, data: &[u8]) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, data).expect("write");
    std::fs::rename(&tmp, path).expect("rename");
}
