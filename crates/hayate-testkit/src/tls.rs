//! A real rustls client for tests of hayate's HTTPS: trusts one CA file,
//! offers ALPN, keeps sessions for resumption, and connects [`Client`]s.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rustls::client::ResolvesClientCert;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

use crate::{site, try_tcp_connect, Client, Hayate, Response, Stream};

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

    /// The same trust and ALPN, presenting the client certificate chain in
    /// the PEM file `cert` (leaf first) with the key in `key`, when a
    /// server asks for one (mutual TLS).
    pub fn with_client_cert(&self, cert: &Path, key: &Path) -> TlsClient {
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
            .expect("client certificate file")
            .map(|c| c.expect("client certificate"))
            .collect();
        let key = PrivateKeyDer::from_pem_file(key).expect("client key");
        let provider = rustls::crypto::aws_lc_rs::default_provider();
        let signer = provider
            .key_provider
            .load_private_key(key)
            .expect("a usable client key");
        let mut config = (*self.config).clone();
        config.client_auth_cert_resolver =
            Arc::new(OneClientCert(Arc::new(CertifiedKey::new(chain, signer))));
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
        let mut sock = try_tcp_connect(addr).map_err(|e| format!("connect: {e}"))?;
        while conn.is_handshaking() {
            conn.complete_io(&mut sock).map_err(|e| e.to_string())?;
        }
        Ok(Client {
            stream: Stream::Tls(Box::new(StreamOwned::new(conn, sock))),
            buf: Vec::new(),
        })
    }
}

impl Client {
    /// Sends `raw` (one request) and reads its response, or says what ended
    /// the exchange first: a write or read error (a TLS alert names
    /// itself), or the connection closing.
    pub fn exchange(&mut self, raw: &[u8]) -> Result<Response, String> {
        self.stream
            .write_all(raw)
            .map_err(|e| format!("sending: {e}"))?;
        let mut chunk = [0u8; 65536];
        let n = self
            .stream
            .read(&mut chunk)
            .map_err(|e| format!("reading: {e}"))?;
        if n == 0 {
            return Err("closed before a response".into());
        }
        self.buf.extend_from_slice(&chunk[..n]);
        self.try_read_response(raw.starts_with(b"HEAD "))
            .ok_or_else(|| "closed in the response".into())
    }
}

/// Presents one certificate to every server that asks.
#[derive(Debug)]
struct OneClientCert(Arc<CertifiedKey>);

impl ResolvesClientCert for OneClientCert {
    fn resolve(&self, _: &[&[u8]], _: &[rustls::SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }

    fn has_certs(&self) -> bool {
        true
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
