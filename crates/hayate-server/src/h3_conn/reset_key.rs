//! The key QUIC stateless resets are signed with (RFC 9000 §10.3), one for
//! every worker of the process. A client whose address changes (NAT
//! rebinding) may reach another worker's endpoint through SO_REUSEPORT's
//! hash of its new 4-tuple; that endpoint does not know the connection
//! and answers with a stateless reset, whose token the client checks
//! against the one the connection's own endpoint gave it. With a key per
//! endpoint (quinn's default) the tokens differ, the client ignores the
//! reset, and waits out its idle timeout (30 s and more) before it opens
//! a new connection; with one key the reset is valid and it reconnects at
//! once. The key lives as long as the process: a `hayate upgrade`'s new
//! process has its own, so the old process's connections that reach it
//! time out as before.

use std::sync::{Arc, OnceLock};

use quinn::crypto::{CryptoError, HmacKey};
use ring::hmac;

/// An HMAC-SHA256 key, as quinn's own default (a 64-byte random one).
struct ResetKey(hmac::Key);

impl HmacKey for ResetKey {
    fn sign(&self, data: &[u8], signature_out: &mut [u8]) {
        let tag = hmac::sign(&self.0, data);
        signature_out.copy_from_slice(tag.as_ref());
    }

    fn signature_len(&self) -> usize {
        hmac::HMAC_SHA256.digest_algorithm().output_len()
    }

    fn verify(&self, data: &[u8], signature: &[u8]) -> Result<(), CryptoError> {
        hmac::verify(&self.0, data, signature).map_err(|_| CryptoError)
    }
}

/// The process's reset key, made at first use.
fn reset_key() -> Arc<dyn HmacKey> {
    static KEY: OnceLock<Arc<ResetKey>> = OnceLock::new();
    KEY.get_or_init(|| {
        let rng = ring::rand::SystemRandom::new();
        let key = hmac::Key::generate(hmac::HMAC_SHA256, &rng).expect("the system's random source");
        Arc::new(ResetKey(key))
    })
    .clone()
}

/// An endpoint's configuration: quinn's defaults with the process's reset
/// key.
pub(super) fn endpoint_config() -> quinn::EndpointConfig {
    quinn::EndpointConfig::new(reset_key())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_endpoint_signs_resets_alike() {
        let (a, b) = (reset_key(), reset_key());
        let cid = [7u8; 8];
        let mut tag_a = vec![0; a.signature_len()];
        let mut tag_b = vec![0; b.signature_len()];
        a.sign(&cid, &mut tag_a);
        b.sign(&cid, &mut tag_b);
        assert_eq!(
            tag_a, tag_b,
            "a token one endpoint gave, another endpoint's reset carries"
        );
        assert!(b.verify(&cid, &tag_a).is_ok());
        assert!(
            b.verify(&[8u8; 8], &tag_a).is_err(),
            "another connection's token"
        );
    }
}
