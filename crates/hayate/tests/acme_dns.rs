//! DNS-01 end to end: a wildcard certificate from pebble, which checks the
//! `_acme-challenge` TXT record at a real BIND serving `example.test`; the
//! record set by an RFC 2136 update signed with TSIG, or by a hook script
//! calling `nsupdate`; removed after. A wrong key and a DNS server that is
//! down fail the order with a clear error and a counted outcome, while
//! hayate serves its other names.

// Tests block on purpose (they are clients, not the server).
#![allow(clippy::disallowed_methods)]

use std::path::Path;

use hayate_testkit::bind::{self, Bind};
use hayate_testkit::pebble::{free_port, Pebble};
use hayate_testkit::redis::Redis;
use hayate_testkit::tls::{served_certificate, TlsClient};
use hayate_testkit::{eventually, Hayate};

const BIN: &str = env!("CARGO_BIN_EXE_hayate");
const RECORD: &str = "_acme-challenge.example.test";

/// hayate serving `*.example.test` over https on `tls_port` with
/// certificates from `pebble` over DNS-01, configured by `dns` (TOML lines),
/// and `other.test` from its local CA.
fn hayate(dir: &Path, tls_port: u16, pebble: &Pebble, dns: &str) -> Hayate {
    hayate_with(dir, tls_port, pebble, dns, &[])
}

fn hayate_with(
    dir: &Path,
    tls_port: u16,
    pebble: &Pebble,
    dns: &str,
    envs: &[(&str, &str)],
) -> Hayate {
    let config = format!(
        r#"listen = "https://127.0.0.1:{tls_port}"
admin = "unix:{admin}"
state_dir = "{state}"
acme_directory = "{directory}"
acme_ca_root = "{api_ca}"
acme_challenge = "dns-01"
{dns}

[[site]]
hosts = ["*.example.test"]
tls = "acme"
root = "{root}"

[[site]]
hosts = ["other.test"]
tls = "internal"
root = "{root}"
"#,
        admin = dir.join("admin.sock").display(),
        state = dir.join("state").display(),
        directory = pebble.directory,
        api_ca = pebble.api_ca.display(),
        root = dir.join("root").display(),
    );
    std::fs::create_dir_all(dir.join("root")).expect("root");
    std::fs::write(dir.join("root/hello.txt"), "hello world\n").expect("write");
    std::fs::write(dir.join("hayate.toml"), config).expect("write");
    Hayate::start_in(BIN, &["--config", "hayate.toml"], envs, Some(dir))
}

fn metrics(dir: &Path) -> String {
    hayate_testkit::unix_get(&dir.join("admin.sock"), "/metrics")
}

/// Waits for the wildcard certificate, checks it serves two names (the
/// client verifies it against pebble's root, names included), and that the
/// TXT record is gone after.
fn serves_the_wildcard(h: &Hayate, pebble: &Pebble, bind: &Bind, tls_port: u16) {
    let client = TlsClient::trusting(&pebble.issuer_root()).without_resumption();
    let addr = format!("127.0.0.1:{tls_port}").parse().expect("addr");
    let issued = eventually("a wildcard certificate from pebble", || {
        client
            .try_connect(addr, "a.example.test")
            .map(|c| served_certificate(&c))
            .map_err(|e| format!("{e}; hayate's log:\n{}", h.stderr()))
    });
    for name in ["a.example.test", "b.example.test"] {
        let mut c = client.connect(addr, name);
        assert_eq!(served_certificate(&c), issued, "one certificate for {name}");
        let r = c.get("/hello.txt", &[]);
        assert_eq!((r.status, r.text().as_str()), (200, "hello world\n"));
    }
    let (_, cert) = x509_parser::parse_x509_certificate(&issued).expect("x509");
    let san = cert
        .subject_alternative_name()
        .expect("SAN")
        .expect("a SAN extension");
    assert_eq!(
        format!("{:?}", san.value.general_names),
        "[DNSName(\"*.example.test\")]"
    );
    eventually("the TXT record removed", || match bind.dig("TXT", RECORD) {
        out if out.trim().is_empty() => Ok(()),
        out => Err(out),
    });
}

#[test]
fn a_wildcard_certificate_over_rfc2136() {
    let bind = Bind::start();
    let pebble = Pebble::start_with_dns(bind.addr, 90 * 24 * 3600);
    let dir = tempfile::tempdir().expect("dir");
    let tls_port = free_port();
    let dns = format!(
        "acme_dns_server = \"{}\"\nacme_dns_tsig_key = \"{}:hmac-sha256:{}\"",
        bind.addr,
        bind::KEY_NAME,
        bind::KEY_SECRET
    );
    let h = hayate(dir.path(), tls_port, &pebble, &dns);
    serves_the_wildcard(&h, &pebble, &bind, tls_port);
    let m = metrics(dir.path());
    assert!(
        m.contains("hayate_acme_dns01_total{outcome=\"ok\"} 1"),
        "{m}"
    );
    assert!(
        m.contains("hayate_acme_orders_total{result=\"issued\"} 1"),
        "{m}"
    );
    assert!(
        m.contains("source=\"acme dns-01 ("),
        "how it was obtained: {m}"
    );
    assert!(
        !h.stderr().contains(bind::KEY_SECRET),
        "the secret is never logged"
    );
}

/// A hook script calling `nsupdate` with BIND's key (lego's exec
/// contract: present|cleanup FQDN VALUE), noting each call in `hook.log`
/// beside it.
fn hook_script(dir: &Path, bind: &Bind) -> std::path::PathBuf {
    let hook = dir.join("hook.sh");
    // lego's exec contract: present|cleanup FQDN VALUE.
    let script = format!(
        r#"#!/bin/sh
set -e
case "$1" in
  present) op="add $2 60" ;;
  cleanup) op="delete $2" ;;
  *) echo "unknown step $1" >&2; exit 2 ;;
esac
printf 'server 127.0.0.1 {port}\nupdate %s TXT "%s"\nsend\n' "$op" "$3" | nsupdate -k {key}
echo "$1 $2" >> {log}
"#,
        port = bind.addr.port(),
        key = bind.key_file.display(),
        log = dir.join("hook.log").display(),
    );
    std::fs::write(&hook, script).expect("write");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    hook
}

#[test]
fn a_wildcard_certificate_through_a_hook() {
    let bind = Bind::start();
    let pebble = Pebble::start_with_dns(bind.addr, 90 * 24 * 3600);
    let dir = tempfile::tempdir().expect("dir");
    let hook = hook_script(dir.path(), &bind);
    let tls_port = free_port();
    let dns = format!(
        "acme_dns_hook = [\"{}\"]\nacme_dns_resolver = \"{}\"\nacme_dns_propagation_timeout = \"5s\"",
        hook.display(),
        bind.addr
    );
    let h = hayate(dir.path(), tls_port, &pebble, &dns);
    serves_the_wildcard(&h, &pebble, &bind, tls_port);
    let calls = hook_calls_through_cleanup(&dir.path().join("hook.log"));
    assert_eq!(
        calls,
        format!("present {RECORD}.\ncleanup {RECORD}.\n"),
        "present, then cleanup"
    );
}

/// The hook's calls noted in `log`, once it has been called to clean up:
/// the record is removed after the certificate is issued, so the
/// certificate can be served before that call (CI saw it).
fn hook_calls_through_cleanup(log: &Path) -> String {
    eventually("the hook's cleanup call", || {
        let calls = std::fs::read_to_string(log).map_err(|e| e.to_string())?;
        match calls.contains("cleanup") {
            true => Ok(calls),
            false => Err(format!("the hook's calls so far: {calls:?}")),
        }
    })
}

/// An order that fails at the DNS step: the error is logged with `why`,
/// counted as `outcome`, nothing is issued, and the other site is served.
fn fails_clearly(dns: &str, outcome: &str, why: &str) {
    let dir = tempfile::tempdir().expect("dir");
    let bind = Bind::start();
    let pebble = Pebble::start_with_dns(bind.addr, 90 * 24 * 3600);
    let tls_port = free_port();
    let dns = dns.replace("BIND", &bind.addr.to_string());
    let h = hayate(dir.path(), tls_port, &pebble, &dns);
    // The DNS-01 step is counted first, then the order's failure.
    eventually("the DNS-01 failure counted", || {
        let m = metrics(dir.path());
        let line = format!("hayate_acme_dns01_total{{outcome=\"{outcome}\"}} 1");
        if m.contains(&line) && m.contains("hayate_acme_orders_total{result=\"failed\"} 1") {
            Ok(())
        } else {
            Err(format!("{m}\n{}", h.stderr()))
        }
    });
    let log = eventually("the failure logged, with its retry", || {
        let log = h.stderr();
        match log.contains("next attempt in 10s") {
            true => Ok(log),
            false => Err(log),
        }
    });
    assert!(log.contains(why), "{log}");
    let m = metrics(dir.path());
    assert!(
        m.contains("hayate_acme_orders_total{result=\"failed\"} 1"),
        "{m}"
    );
    assert!(
        m.contains("hayate_acme_orders_total{result=\"issued\"} 0"),
        "{m}"
    );
    // The other site is served (its certificate from the local CA).
    let ca = hayate_testkit::tls::local_ca(&dir.path().join("state"));
    let client = TlsClient::trusting(&ca);
    let addr = format!("127.0.0.1:{tls_port}").parse().expect("addr");
    let r = client.connect(addr, "other.test").get("/hello.txt", &[]);
    assert_eq!(r.status, 200);
    assert!(bind.dig("TXT", RECORD).trim().is_empty(), "no record left");
}

#[test]
fn a_wildcard_takes_dns01_while_another_name_takes_tls_alpn01() {
    // acme_challenge is left to auto (TLS-ALPN-01: no plain listener);
    // the wildcard goes over DNS-01 all the same.
    let bind = Bind::start();
    // Held (bound, never listening) while pebble starts: a port merely
    // found free could be taken by a parallel test before hayate binds it.
    let held = hayate_testkit::ports::ClosedPort::new();
    let tls_port = held.port();
    let pebble = Pebble::start_with_dns_and_tls(bind.addr, tls_port, 90 * 24 * 3600);
    drop(held);
    let dir = tempfile::tempdir().expect("dir");
    let d = dir.path();
    let config = format!(
        r#"listen = "https://127.0.0.1:{tls_port}"
admin = "unix:{admin}"
state_dir = "{state}"
acme_directory = "{directory}"
acme_ca_root = "{api_ca}"
acme_dns_server = "{server}"
acme_dns_tsig_key = "{key}:hmac-sha256:{secret}"
tls = "acme"
root = "{root}"

[[site]]
hosts = ["*.example.test"]

[[site]]
hosts = ["example.test"]
"#,
        admin = d.join("admin.sock").display(),
        state = d.join("state").display(),
        directory = pebble.directory,
        api_ca = pebble.api_ca.display(),
        server = bind.addr,
        key = bind::KEY_NAME,
        secret = bind::KEY_SECRET,
        root = d.join("root").display(),
    );
    std::fs::create_dir_all(d.join("root")).expect("root");
    std::fs::write(d.join("root/hello.txt"), "hello world\n").expect("write");
    std::fs::write(d.join("hayate.toml"), config).expect("write");
    let h = Hayate::start_in(BIN, &["--config", "hayate.toml"], &[], Some(d));
    let client = TlsClient::trusting(&pebble.issuer_root()).without_resumption();
    let addr = format!("127.0.0.1:{tls_port}").parse().expect("addr");
    for name in ["a.example.test", "example.test"] {
        let mut c = eventually("a certificate from pebble", || {
            client
                .try_connect(addr, name)
                .map_err(|e| format!("{name}: {e}; hayate's log:\n{}", h.stderr()))
        });
        assert_eq!(c.get("/hello.txt", &[]).status, 200, "{name}");
    }
    let m = metrics(d);
    for line in [
        "hayate_acme_dns01_total{outcome=\"ok\"} 1",
        "hayate_acme_orders_total{result=\"issued\"} 2",
        "source=\"acme dns-01 (",
        "source=\"acme tls-alpn-01 (",
    ] {
        assert!(m.contains(line), "{line} in {m}");
    }
}

#[test]
fn a_wrong_tsig_key_is_refused_clearly() {
    // The right name, another secret.
    let dns = format!(
        "acme_dns_server = \"BIND\"\nacme_dns_tsig_key = \"{}:hmac-sha256:aGVsbG8gd29ybGQgaGVsbG8gd29ybGQ=\"",
        bind::KEY_NAME
    );
    fails_clearly(&dns, "refused", "TSIG BADSIG");
}

#[test]
fn an_unknown_tsig_key_is_refused_clearly() {
    let dns = "acme_dns_server = \"BIND\"\nacme_dns_tsig_key = \"nobody:hmac-sha256:aGVsbG8=\"";
    fails_clearly(dns, "refused", "TSIG BADKEY");
}

#[test]
fn a_dns_server_that_is_down_fails_clearly() {
    let down = hayate_testkit::ports::ClosedPort::new();
    let dns = format!(
        "acme_dns_server = \"{}\"\nacme_dns_tsig_key = \"{}:hmac-sha256:{}\"",
        down.addr(),
        bind::KEY_NAME,
        bind::KEY_SECRET
    );
    fails_clearly(
        &dns,
        "unreachable",
        &format!("DNS server {}: Connection refused", down.addr()),
    );
}

#[test]
fn a_record_never_seen_times_out_clearly() {
    // A hook that says done and sets nothing: the record never appears.
    let dns = "acme_dns_hook = [\"true\"]\nacme_dns_resolver = \"BIND\"\nacme_dns_propagation_timeout = \"1s\"";
    fails_clearly(dns, "propagation_timeout", "was not seen at 127.0.0.1");
}

#[test]
fn boxes_sharing_acme_solve_dns01_once() {
    let bind = Bind::start();
    let pebble = Pebble::start_with_dns(bind.addr, 90 * 24 * 3600);
    let redis = Redis::start();
    let key = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    let hooks = tempfile::tempdir().expect("dir");
    let hook = hook_script(hooks.path(), &bind);
    let dns = format!(
        "acme_dns_hook = [\"{}\"]\nacme_dns_resolver = \"{}\"\nshared = \"{}\"",
        hook.display(),
        bind.addr,
        redis.url()
    );
    let (dir_a, dir_b) = (
        tempfile::tempdir().expect("a"),
        tempfile::tempdir().expect("b"),
    );
    let (port_a, port_b) = (free_port(), free_port());
    let envs = [("HAYATE_SHARED_KEY", key)];
    let a = hayate_with(dir_a.path(), port_a, &pebble, &dns, &envs);
    let b = hayate_with(dir_b.path(), port_b, &pebble, &dns, &envs);
    let client = TlsClient::trusting(&pebble.issuer_root()).without_resumption();
    let served = |h: &Hayate, port: u16| {
        let addr = format!("127.0.0.1:{port}").parse().expect("addr");
        eventually("the wildcard certificate", || {
            client
                .try_connect(addr, "a.example.test")
                .map(|c| served_certificate(&c))
                .map_err(|e| format!("{e}; its log:\n{}", h.stderr()))
        })
    };
    assert_eq!(
        served(&a, port_a),
        served(&b, port_b),
        "one certificate for both"
    );
    let calls = hook_calls_through_cleanup(&hooks.path().join("hook.log"));
    assert_eq!(
        calls,
        format!("present {RECORD}.\ncleanup {RECORD}.\n"),
        "one box set the record"
    );
}
