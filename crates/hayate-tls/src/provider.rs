//! The one crypto provider of every rustls user in hayate (decision 0007):
//! aws-lc-rs for key exchange (with the post-quantum hybrid X25519MLKEM768,
//! which browsers send a key share for), signatures and session tickets, and ring's
//! cipher suites for the records. A `CryptoProvider` is a table, so its
//! parts can come from both: on CPUs with VAES but no AVX-512 (this
//! machine's class) ring has an AVX2 AES-GCM that aws-lc lacks, and
//! encrypts a MiB in 216.5 µs against aws-lc-rs's 351.0
//! (`bench/tls-provider/run`); handshakes cost aws-lc-rs 3-6 % fewer
//! instructions than ring. Re-measure when either crate is updated.

use rustls::crypto::CryptoProvider;

/// aws-lc-rs's provider with ring's cipher suites (same suites, same order:
/// AES-256-GCM, AES-128-GCM, ChaCha20-Poly1305, then TLS 1.2's ECDHE ones).
pub fn provider() -> CryptoProvider {
    let mut provider = rustls::crypto::aws_lc_rs::default_provider();
    provider.cipher_suites = rustls::crypto::ring::default_provider().cipher_suites;
    provider
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suites_are_rings_in_aws_lc_rs_order_and_kx_is_aws_lc_rs() {
        let mixed = provider();
        let aws = rustls::crypto::aws_lc_rs::default_provider();
        let names =
            |p: &CryptoProvider| -> Vec<_> { p.cipher_suites.iter().map(|s| s.suite()).collect() };
        assert_eq!(names(&mixed), names(&aws));
        // The key exchange groups stay aws-lc-rs's, with the hybrid
        // (ring has none).
        let groups: Vec<_> = mixed.kx_groups.iter().map(|g| g.name()).collect();
        assert!(
            groups.contains(&rustls::NamedGroup::X25519MLKEM768),
            "{groups:?}"
        );
    }
}
