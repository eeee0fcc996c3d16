//! tls-provider: what the rustls server side costs with each crypto provider
//! (decision 0007), measured in memory so that nothing but rustls and the
//! provider runs: no sockets, no kernel, no scheduler.
//!
//! A rustls server and client are configured as hayate configures its
//! listeners (TLS 1.3 and 1.2, ALPN http/1.1, the provider's ticketer, a
//! session cache of 10,000, two TLS 1.3 tickets per handshake, 0-RTT off; an
//! ECDSA P-256 certificate made with rcgen) and talk through two `Vec<u8>`s.
//! Every call into the server connection goes through [`server_step`] and
//! [`server_send`], so `valgrind --tool=callgrind
//! --toggle-collect='*server_step*' --toggle-collect='*server_send*'`
//! counts the server's instructions only (not the client's, not the set-up).
//!
//! usage: tls-provider PROVIDER WORK N
//!   PROVIDER  aws-lc-rs | ring | aws-lc-rs-mlkem (aws-lc-rs with the client
//!             offering only X25519MLKEM768, the hybrid browsers now send) |
//!             aws-lc-rs+ring-aead (aws-lc-rs with ring's cipher suites: a
//!             CryptoProvider is a table, its parts can come from both)
//!   WORK      full     N full handshakes (no resumption)
//!             resumed  N TLS 1.3 resumed handshakes (ticket, psk_dhe_ke), after one full one
//!             bulk     N MiB from server to client in 16 KiB application writes
//!                      (TLS records of 16 KiB), over one connection
//! Prints one line: `RESULT provider=.. work=.. n=.. server_ns=.. suite=.. kx=..`,
//! where server_ns is the wall-clock time spent inside the server's calls.
//! The key exchange is X25519 for aws-lc-rs and ring (what OpenSSL clients,
//! wrk, curl and h2load, send), the cipher suite TLS13_AES_256_GCM_SHA384 (the
//! client's first choice in rustls and OpenSSL alike).

use std::hint::black_box;
use std::io::{Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::Resumption;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::server::ServerSessionMemoryCache;
use rustls::{
    ClientConfig, ClientConnection, DigitallySignedStruct, ServerConfig, ServerConnection,
    SignatureScheme,
};

/// Bytes written by the application per `writer().write_all` in bulk: one
/// full TLS record.
const CHUNK: usize = 16 * 1024;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 4 {
        eprintln!("usage: tls-provider aws-lc-rs|ring|aws-lc-rs-mlkem full|resumed|bulk N");
        std::process::exit(2);
    }
    let provider_name = args[1].as_str();
    let work = args[2].as_str();
    let n: usize = args[3].parse().expect("N must be a number");
    let (server_provider, client_provider, ticketer) = providers(provider_name);
    let (cert, key) = certificate();
    let server = server_config(server_provider, ticketer, cert, key);
    let client_resumes = work == "resumed";
    let client = client_config(client_provider, client_resumes);
    let mut clock = Duration::ZERO;
    let mut last = None;
    match work {
        "full" | "resumed" => {
            if client_resumes {
                last = Some(handshake(&server, &client, &mut clock)); // the full one that brings tickets
                clock = Duration::ZERO;
            }
            for _ in 0..n {
                let (c, s) = handshake(&server, &client, &mut clock);
                let want = if client_resumes {
                    rustls::HandshakeKind::Resumed
                } else {
                    rustls::HandshakeKind::Full
                };
                assert_eq!(s.handshake_kind(), Some(want), "server handshake kind");
                last = Some((c, s));
            }
        }
        "bulk" => {
            let (mut c, mut s) = handshake(&server, &client, &mut clock);
            clock = Duration::ZERO;
            bulk(&mut c, &mut s, n, &mut clock);
            last = Some((c, s));
        }
        _ => panic!("unknown work {work}"),
    }
    let (_, s) = last.expect("at least one connection");
    println!(
        "RESULT provider={provider_name} work={work} n={n} server_ns={} suite={:?} kx={:?} version={:?}",
        clock.as_nanos(),
        s.negotiated_cipher_suite().map(|cs| cs.suite()).expect("suite"),
        s.negotiated_key_exchange_group().map(|g| g.name()),
        s.protocol_version().expect("version"),
    );
}

type Ticketer = Arc<dyn rustls::server::ProducesTickets>;

/// (server provider, client provider, ticketer). The server gets the
/// provider's default groups, as hayate does; the client offers one group.
fn providers(name: &str) -> (CryptoProvider, CryptoProvider, Ticketer) {
    use rustls::crypto::{aws_lc_rs, ring};
    match name {
        "aws-lc-rs" | "aws-lc-rs-mlkem" => {
            let mut client = aws_lc_rs::default_provider();
            client.kx_groups = if name == "aws-lc-rs" {
                vec![aws_lc_rs::kx_group::X25519]
            } else {
                vec![aws_lc_rs::kx_group::X25519MLKEM768]
            };
            (
                aws_lc_rs::default_provider(),
                client,
                aws_lc_rs::Ticketer::new().expect("ticketer"),
            )
        }
        "aws-lc-rs+ring-aead" => {
            let mut server = aws_lc_rs::default_provider();
            server.cipher_suites = ring::default_provider().cipher_suites;
            let mut client = aws_lc_rs::default_provider();
            client.kx_groups = vec![aws_lc_rs::kx_group::X25519];
            (
                server,
                client,
                aws_lc_rs::Ticketer::new().expect("ticketer"),
            )
        }
        "ring" => {
            let mut client = ring::default_provider();
            client.kx_groups = vec![ring::kx_group::X25519];
            (
                ring::default_provider(),
                client,
                ring::Ticketer::new().expect("ticketer"),
            )
        }
        _ => panic!("unknown provider {name}"),
    }
}

/// An ECDSA P-256 certificate for localhost (rcgen's default key algorithm).
fn certificate() -> (CertificateDer<'static>, PrivateKeyDer<'static>) {
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).expect("rcgen");
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(ck.signing_key.serialize_der()));
    (ck.cert.der().clone(), key)
}

/// As hayate-tls's `server_config`, with one certificate instead of the SNI store.
fn server_config(
    provider: CryptoProvider,
    ticketer: Ticketer,
    cert: CertificateDer<'static>,
    key: PrivateKeyDer<'static>,
) -> Arc<ServerConfig> {
    let mut config = ServerConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .expect("certificate");
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config.ticketer = ticketer;
    config.session_storage = ServerSessionMemoryCache::new(10_000);
    config.max_early_data_size = 0;
    Arc::new(config)
}

/// TLS 1.3 only; the server's certificate is not verified (the lab's load
/// clients do not verify either, and the client's cost is not measured).
fn client_config(provider: CryptoProvider, resumes: bool) -> Arc<ClientConfig> {
    let provider = Arc::new(provider);
    let mut config = ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(NoVerify(provider)))
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config.resumption = if resumes {
        Resumption::in_memory_sessions(256)
    } else {
        Resumption::disabled()
    };
    Arc::new(config)
}

/// One connection: the client's flight to the server and back until neither
/// has anything to send (the handshake and the server's tickets).
fn handshake(
    server: &Arc<ServerConfig>,
    client: &Arc<ClientConfig>,
    clock: &mut Duration,
) -> (ClientConnection, ServerConnection) {
    let name = ServerName::try_from("localhost").expect("name");
    let mut c = ClientConnection::new(client.clone(), name).expect("client");
    let mut s = ServerConnection::new(server.clone()).expect("server");
    let mut to_server = Vec::with_capacity(4096);
    let mut to_client = Vec::with_capacity(8192);
    loop {
        to_server.clear();
        while c.wants_write() {
            c.write_tls(&mut to_server).expect("client write_tls");
        }
        let t = Instant::now();
        server_step(&mut s, &to_server, &mut to_client);
        *clock += t.elapsed();
        let sent = !to_server.is_empty() || !to_client.is_empty();
        let mut rd = &to_client[..];
        while !rd.is_empty() {
            c.read_tls(&mut rd).expect("client read_tls");
            c.process_new_packets().expect("client process");
        }
        to_client.clear();
        if !sent && !c.is_handshaking() && !s.is_handshaking() {
            return (c, s);
        }
    }
}

/// Everything the server does with the bytes from the client: read, process,
/// and write its answer into `out`.
#[inline(never)]
fn server_step(s: &mut ServerConnection, input: &[u8], out: &mut Vec<u8>) {
    let mut rd = input;
    while !rd.is_empty() {
        s.read_tls(&mut rd).expect("server read_tls");
        s.process_new_packets().expect("server process");
    }
    while s.wants_write() {
        s.write_tls(out).expect("server write_tls");
    }
}

/// MIB mebibytes from server to client; the client decrypts and drops them.
fn bulk(c: &mut ClientConnection, s: &mut ServerConnection, mib: usize, clock: &mut Duration) {
    let data = vec![0x5au8; CHUNK];
    let mut wire = Vec::with_capacity(CHUNK + 256);
    let mut plain = vec![0u8; CHUNK * 2];
    let mut received = 0usize;
    for _ in 0..mib * (1 << 20) / CHUNK {
        let t = Instant::now();
        server_send(s, &data, &mut wire);
        *clock += t.elapsed();
        let mut rd = &wire[..];
        while !rd.is_empty() {
            c.read_tls(&mut rd).expect("client read_tls");
            c.process_new_packets().expect("client process");
            loop {
                match c.reader().read(&mut plain) {
                    Ok(0) => break,
                    Ok(k) => received += k,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) => panic!("client read: {e}"),
                }
            }
        }
        wire.clear();
    }
    assert_eq!(black_box(received), mib << 20, "bytes received");
}

/// One application write of the server, encrypted into `wire`.
#[inline(never)]
fn server_send(s: &mut ServerConnection, data: &[u8], wire: &mut Vec<u8>) {
    s.writer().write_all(data).expect("server write");
    while s.wants_write() {
        s.write_tls(wire).expect("server write_tls");
    }
}

/// Accepts any server certificate (see [`client_config`]).
#[derive(Debug)]
struct NoVerify(Arc<CryptoProvider>);

impl ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }
    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
