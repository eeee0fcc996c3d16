//! BIND (`named`, Debian's `bind9`), the authoritative DNS server of the
//! DNS-01 tests: the zone `example.test` on a free loopback port, taking
//! RFC 2136 updates of TXT records signed with a TSIG key, its files in a
//! temporary directory, run as the test's user.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use crate::pebble::free_port;

/// The zone BIND serves.
pub const ZONE: &str = "example.test";
/// The name of the TSIG key BIND accepts updates from.
pub const KEY_NAME: &str = "acme-key";
/// Its secret (base64 of 32 bytes, as `tsig-keygen` makes).
pub const KEY_SECRET: &str = "kBg0Q1b3oTn4ZGKx8U5m6l4A1p3QwV2bS7u8yE9cR0Y=";

/// A running `named`, stopped when dropped.
pub struct Bind {
    /// Where it answers, over UDP and TCP.
    pub addr: SocketAddr,
    /// The key file (`tsig-keygen` format) for `nsupdate -k`.
    pub key_file: PathBuf,
    child: Child,
    dir: tempfile::TempDir,
}

impl Bind {
    /// Starts `named` in the foreground and waits until it answers.
    pub fn start() -> Bind {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let port = free_port();
        let key = format!(
            "key \"{KEY_NAME}\" {{\n\talgorithm hmac-sha256;\n\tsecret \"{KEY_SECRET}\";\n}};\n"
        );
        let key_file = d.join("acme.key");
        std::fs::write(&key_file, &key).expect("write");
        let zone = format!(
            "$TTL 60\n@ IN SOA ns.{ZONE}. admin.{ZONE}. 1 60 60 600 60\n@ IN NS ns.{ZONE}.\nns IN A 127.0.0.1\n@ IN A 127.0.0.1\n* IN A 127.0.0.1\n"
        );
        std::fs::write(d.join("zone.db"), zone).expect("write");
        let conf = format!(
            r#"options {{
    directory "{dir}";
    pid-file "{dir}/named.pid";
    session-keyfile "{dir}/session.key";
    managed-keys-directory "{dir}";
    listen-on port {port} {{ 127.0.0.1; }};
    listen-on-v6 {{ none; }};
    recursion no;
    dnssec-validation no;
    notify no;
}};
controls {{ }};
{key}
zone "{ZONE}" {{
    type primary;
    file "{dir}/zone.db";
    update-policy {{ grant {KEY_NAME} zonesub TXT; }};
}};
"#,
            dir = d.display()
        );
        let conf_path = d.join("named.conf");
        std::fs::write(&conf_path, conf).expect("write");
        let child = Command::new(named())
            .args(["-g", "-4", "-c"])
            .arg(&conf_path)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(d.join("named.log")).expect("log"))
            .spawn()
            .expect("start named (apt-get install bind9)");
        let bind = Bind {
            addr: format!("127.0.0.1:{port}").parse().expect("addr"),
            key_file,
            child,
            dir,
        };
        crate::eventually("named answering", || {
            let out = bind.dig("SOA", ZONE);
            if out.contains("admin.example.test.") {
                Ok(())
            } else {
                Err(format!("{out}\n{}", bind.log()))
            }
        });
        bind
    }

    /// `dig +short TYPE NAME` at this server.
    pub fn dig(&self, kind: &str, name: &str) -> String {
        let out = Command::new("dig")
            .args([
                "@127.0.0.1",
                "-p",
                &self.addr.port().to_string(),
                "+short",
                "+tcp",
                kind,
                name,
            ])
            .output()
            .expect("dig (apt-get install bind9-dnsutils)");
        text(&out)
    }

    /// named's log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("named.log")).unwrap_or_default()
    }

    /// Its directory (for files a test adds).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `named`: on PATH, or in /usr/sbin (not on a user's PATH in Debian).
fn named() -> PathBuf {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .chain([PathBuf::from("/usr/sbin")])
        .map(|d| d.join("named"))
        .find(|p| p.is_file())
        .expect("named not found: apt-get install bind9")
}

impl Drop for Bind {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
