//! Maps whose keys are already hashes seeded per process (a limiter's
//! foldhash of the client's key, basic auth's keyed SipHash tag): hashing
//! them again with std's SipHash-1-3 cost conn_limit ~420 instructions a
//! request, a third of the whole policy (bench/instructions/run,
//! policy-conn), and buys nothing: nobody can aim keys at one bucket
//! without the seed, which hashed them the first time.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A map keyed by a seeded hash (`u64` or `u128`), which is its own hash.
pub type PrehashedMap<K, V> = HashMap<K, V, BuildHasherDefault<Prehashed>>;

/// A new, empty [`PrehashedMap`].
pub fn map<K, V>() -> PrehashedMap<K, V> {
    HashMap::with_hasher(BuildHasherDefault::default())
}

/// The shard of `shards` (a power of two) a seeded hash goes to, by its
/// top bits: the map in the shard takes its bucket from the low ones, which
/// would all be alike in one shard.
pub fn shard_of(key: u64, shards: usize) -> usize {
    debug_assert!(shards.is_power_of_two() && shards > 1);
    (key >> (64 - shards.trailing_zeros())) as usize
}

/// The "hasher" of a key that is a seeded hash: it passes the key on.
#[derive(Default)]
pub struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Not reached by u64 and u128 keys; any other key still spreads.
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.0 = (self.0.rotate_left(29) ^ u64::from_le_bytes(word))
                .wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }

    fn write_u128(&mut self, n: u128) {
        self.0 = (n as u64) ^ ((n >> 64) as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seeded_hash_is_its_own_hash() {
        use std::hash::BuildHasher;
        let build = BuildHasherDefault::<Prehashed>::default();
        assert_eq!(build.hash_one(0xDEAD_BEEF_u64), 0xDEAD_BEEF);
        assert_eq!(build.hash_one((7u128 << 64) | 5), 7 ^ 5);
        let mut m = map();
        m.insert(3u64, "three");
        assert_eq!(m.get(&3), Some(&"three"));
    }

    #[test]
    fn shards_come_from_the_top_bits() {
        assert_eq!(shard_of(u64::MAX, 16), 15);
        assert_eq!(shard_of(0x0FFF_FFFF_FFFF_FFFF, 16), 0);
        assert_eq!(shard_of(1 << 63, 2), 1);
    }
}
