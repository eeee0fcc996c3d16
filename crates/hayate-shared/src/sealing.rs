//! Secrets at rest in Redis (ACME's account key and certificate keys):
//! AES-256-GCM with the `shared_key` every box is given, a random nonce
//! per value, and the Redis key the value is stored under as associated
//! data, so a value copied under another key does not open.
//!
//! A sealed value: `v1`, the 12-byte nonce, then the ciphertext and its
//! 16-byte tag.

use aws_lc_rs::aead::{Aad, Nonce, RandomizedNonceKey, AES_256_GCM, NONCE_LEN};

const VERSION: &[u8] = b"v1";

/// The key that seals and opens the secrets of every box.
pub struct SealingKey(RandomizedNonceKey);

impl std::fmt::Debug for SealingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SealingKey(..)")
    }
}

impl SealingKey {
    /// The key from its 64 hex digits (`openssl rand -hex 32` makes one).
    pub fn from_hex(hex: &str) -> Result<SealingKey, String> {
        let bad =
            || "shared_key must be 64 hex digits (openssl rand -hex 32 makes one)".to_string();
        let bytes = from_hex(hex.trim())
            .filter(|b| b.len() == 32)
            .ok_or_else(bad)?;
        RandomizedNonceKey::new(&AES_256_GCM, &bytes)
            .map(SealingKey)
            .map_err(|_| bad())
    }

    /// `plain` sealed, bound to `key_name`.
    pub fn seal(&self, key_name: &str, plain: &[u8]) -> Result<Vec<u8>, String> {
        let mut body = plain.to_vec();
        let nonce = self
            .0
            .seal_in_place_append_tag(Aad::from(key_name.as_bytes()), &mut body)
            .map_err(|_| "sealing failed".to_string())?;
        let mut out = Vec::with_capacity(VERSION.len() + NONCE_LEN + body.len());
        out.extend_from_slice(VERSION);
        out.extend_from_slice(nonce.as_ref());
        out.extend_from_slice(&body);
        Ok(out)
    }

    /// What `sealed` holds, if this key sealed it for `key_name`.
    pub fn open(&self, key_name: &str, sealed: &[u8]) -> Result<Vec<u8>, String> {
        let refused = || format!("{key_name}: cannot open (another shared_key, or damaged)");
        let rest = sealed.strip_prefix(VERSION).ok_or_else(refused)?;
        if rest.len() < NONCE_LEN {
            return Err(refused());
        }
        let (nonce, body) = rest.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| refused())?;
        let mut body = body.to_vec();
        let plain = self
            .0
            .open_in_place(nonce, Aad::from(key_name.as_bytes()), &mut body)
            .map_err(|_| refused())?;
        Ok(plain.to_vec())
    }
}

/// `bytes` as lower-case hex digits.
pub fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes of an even number of hex digits; `None` for anything else.
pub fn from_hex(hex: &str) -> Option<Vec<u8>> {
    // Not from_str_radix's rules alone: it takes a sign ("+1").
    if !hex.len().is_multiple_of(2) || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..hex.len() / 2)
        .map(|i| u8::from_str_radix(&hex[i * 2..i * 2 + 2], 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

    #[test]
    fn sealed_values_open_with_the_key_and_the_name_only() {
        let key = SealingKey::from_hex(KEY).expect("key");
        let secret = b"-----BEGIN PRIVATE KEY-----\nabc\n";
        let sealed = key.seal("hayate:acme:x:cert:a.test", secret).expect("seal");
        assert!(!sealed.windows(secret.len()).any(|w| w == secret));
        // A fresh nonce each time.
        assert_ne!(
            sealed,
            key.seal("hayate:acme:x:cert:a.test", secret).expect("seal")
        );
        let opened = key
            .open("hayate:acme:x:cert:a.test", &sealed)
            .expect("open");
        assert_eq!(opened, secret);
        // Another name, another key, a flipped bit: refused.
        assert!(key.open("hayate:acme:x:cert:b.test", &sealed).is_err());
        let other = SealingKey::from_hex(&KEY.replace('0', "f")).expect("key");
        assert!(other.open("hayate:acme:x:cert:a.test", &sealed).is_err());
        let mut damaged = sealed.clone();
        *damaged.last_mut().expect("bytes") ^= 1;
        assert!(key.open("hayate:acme:x:cert:a.test", &damaged).is_err());
        assert!(key.open("hayate:acme:x:cert:a.test", b"v1").is_err());
        assert!(key.open("hayate:acme:x:cert:a.test", secret).is_err());
    }

    #[test]
    fn hex_round_trips() {
        let bytes: Vec<u8> = (0..=255).collect();
        assert_eq!(from_hex(&to_hex(&bytes)), Some(bytes));
        assert_eq!(from_hex("0A1b"), Some(vec![10, 27]));
        for bad in ["0", "0g", "+1", "é0"] {
            assert_eq!(from_hex(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_key_is_64_hex_digits() {
        assert!(SealingKey::from_hex(KEY).is_ok());
        assert!(SealingKey::from_hex(&format!(" {KEY}\n")).is_ok());
        for bad in [
            "",
            "00",
            &KEY[1..],
            &format!("{KEY}00"),
            &KEY.replace('a', "g"),
        ] {
            let e = SealingKey::from_hex(bad).expect_err(bad);
            assert!(e.contains("shared_key"), "{e}");
        }
    }
}
