//! Seeded random streams.
//!
//! Every consumer of randomness (a link, a node, a traffic generator) gets
//! its own ChaCha8 stream, derived from the scenario seed and a stream
//! label. ChaCha8 is portable and its output is fixed by its specification,
//! so a seed gives the same numbers on every machine and every version of
//! `rand_chacha` that keeps the algorithm.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// The simulator's RNG type.
pub type SimRng = ChaCha8Rng;

/// A stream for `(seed, label, index)`: independent for different labels or
/// indices, identical for identical arguments.
pub fn stream(seed: u64, label: &str, index: u64) -> SimRng {
    let mut h = splitmix64(seed ^ 0x6772_6f75_7077_6972); // "groupwir"
    for b in label.bytes() {
        h = splitmix64(h ^ u64::from(b));
    }
    h = splitmix64(h ^ index);
    ChaCha8Rng::seed_from_u64(h)
}

/// A seed for `(seed, label, index)`, for components that seed themselves
/// (such as `groupwire-link`'s `LinkConfig::seed`).
pub fn derive_seed(seed: u64, label: &str, index: u64) -> u64 {
    let mut h = splitmix64(seed ^ 0x6c69_6e6b_7365_6564); // "linkseed"
    for b in label.bytes() {
        h = splitmix64(h ^ u64::from(b));
    }
    splitmix64(h ^ index)
}

/// SplitMix64 finalizer (Steele, Lea, Flood 2014): a bijective 64-bit mix.
const fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use rand::Rng;

    use super::*;

    #[test]
    fn streams_are_reproducible_and_distinct() {
        let a: u64 = stream(7, "link", 0).random();
        assert_eq!(a, stream(7, "link", 0).random::<u64>());
        assert_ne!(a, stream(7, "link", 1).random::<u64>());
        assert_ne!(a, stream(7, "node", 0).random::<u64>());
        assert_ne!(a, stream(8, "link", 0).random::<u64>());
    }
}
