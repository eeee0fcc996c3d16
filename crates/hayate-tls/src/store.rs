//! The certificates a TLS listener chooses from by the client's SNI name:
//! an exact name first, then a wildcard one level up (`*.example.com` for
//! `a.example.com`, as RFC 6125 §6.4.3 allows no more), then the default —
//! the first certificate — for clients that send no name (an IP address
//! is never sent as SNI) or a name no certificate has. A client that asked
//! for a name it does not get fails its own verification, as with nginx.
//!
//! The table is replaced whole when certificates change (a file reloaded, a
//! certificate renewed): handshakes in flight keep the one they picked, the
//! next ones see the new table, and no lock is taken on the handshake path.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use crate::certificate::Certificate;

/// The certificates by name, swappable while serving.
#[derive(Debug, Default)]
pub struct CertStore {
    table: ArcSwap<Table>,
    /// What the table is built from: the configured certificates (files,
    /// the local CA), then those obtained by ACME. Written only when a
    /// certificate changes, never on the handshake path.
    layers: Mutex<[Vec<Certificate>; 2]>,
}

/// Which certificates a change replaces.
#[derive(Debug, Clone, Copy)]
pub enum Layer {
    /// From files or the local CA.
    Configured = 0,
    /// Obtained by ACME.
    Acme = 1,
}

#[derive(Debug, Default)]
struct Table {
    exact: HashMap<String, Arc<CertifiedKey>>,
    /// `example.com` for a certificate of `*.example.com`.
    wildcard: HashMap<String, Arc<CertifiedKey>>,
    default: Option<Arc<CertifiedKey>>,
    certificates: Vec<Certificate>,
}

impl CertStore {
    /// Serves `certs` from now on in place of `layer`'s. The first
    /// certificate overall is the default; where two have the same name,
    /// the earlier one is chosen (configured before ACME's).
    pub fn replace(&self, layer: Layer, certs: Vec<Certificate>) {
        let all: Vec<Certificate> = {
            let mut layers = self.layers.lock().unwrap_or_else(|e| e.into_inner());
            layers[layer as usize] = certs;
            layers.iter().flatten().cloned().collect()
        };
        self.build(all);
    }

    fn build(&self, certs: Vec<Certificate>) {
        let mut table = Table {
            default: certs.first().map(|c| c.key.clone()),
            ..Table::default()
        };
        for c in &certs {
            for name in &c.names {
                let (map, key) = match name.strip_prefix("*.") {
                    Some(parent) => (&mut table.wildcard, parent),
                    None => (&mut table.exact, name.as_str()),
                };
                map.entry(key.to_string()).or_insert_with(|| c.key.clone());
            }
        }
        table.certificates = certs;
        self.table.store(Arc::new(table));
    }

    /// The certificate for a client that asked for `sni`.
    pub fn select(&self, sni: Option<&str>) -> Option<Arc<CertifiedKey>> {
        let table = self.table.load();
        if let Some(name) = sni {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            if let Some(k) = table.exact.get(&name) {
                return Some(k.clone());
            }
            if let Some((_, parent)) = name.split_once('.') {
                if let Some(k) = table.wildcard.get(parent) {
                    return Some(k.clone());
                }
            }
        }
        table.default.clone()
    }

    /// Whether a certificate has `name` (exactly, or a wildcard one level
    /// up), not the default's fallback.
    pub fn has(&self, name: &str) -> bool {
        let table = self.table.load();
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        table.exact.contains_key(&name)
            || name
                .split_once('.')
                .is_some_and(|(_, parent)| table.wildcard.contains_key(parent))
    }

    /// The certificates served now.
    pub fn certificates(&self) -> Vec<Certificate> {
        self.table.load().certificates.clone()
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.select(hello.server_name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::local_ca::LocalCa;

    #[test]
    fn exact_then_wildcard_then_default() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = LocalCa::open_or_create(dir.path()).expect("ca");
        let first = ca.issue(&["a.example".into()]).expect("issue");
        let wild = ca.issue(&["*.b.example".into()]).expect("issue");
        let exact = ca.issue(&["x.b.example".into()]).expect("issue");
        let store = CertStore::default();
        store.replace(Layer::Configured, vec![first.clone(), wild.clone()]);
        store.replace(Layer::Acme, vec![exact.clone()]);
        let pick = |sni| store.select(sni).map(|k| k.cert[0].clone());
        assert_eq!(pick(Some("a.example")), Some(first.key.cert[0].clone()));
        assert_eq!(pick(Some("A.EXAMPLE.")), Some(first.key.cert[0].clone()));
        assert_eq!(pick(Some("x.b.example")), Some(exact.key.cert[0].clone()));
        assert_eq!(pick(Some("y.b.example")), Some(wild.key.cert[0].clone()));
        // A wildcard covers one label only.
        assert_eq!(pick(Some("z.y.b.example")), Some(first.key.cert[0].clone()));
        assert_eq!(pick(Some("b.example")), Some(first.key.cert[0].clone()));
        assert_eq!(pick(None), Some(first.key.cert[0].clone()));
        store.replace(Layer::Configured, Vec::new());
        assert_eq!(pick(None), Some(exact.key.cert[0].clone()));
        store.replace(Layer::Acme, Vec::new());
        assert!(store.select(None).is_none());
    }
}
