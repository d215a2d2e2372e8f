//! What the codec benchmarks share, and the property tests' filler
//! (`tests/properties.rs` includes this file too).
#![allow(
    dead_code,
    reason = "each benchmark and the tests use their own part of this module"
)]

use std::time::Duration;

use criterion::Criterion;

/// `k` symbols of `len` pseudo-random bytes (xorshift64 from a fixed
/// seed): the same data in every run, and no zero runs a code could skip.
pub(crate) fn block(k: usize, len: usize) -> Vec<Vec<u8>> {
    xorshift_block(0x2545_F491_4F6C_DD1D, k, len)
}

/// `k` symbols of `len` bytes from xorshift64 started at `state` (not
/// zero): deterministic filler.
pub(crate) fn xorshift_block(mut state: u64, k: usize, len: usize) -> Vec<Vec<u8>> {
    (0..k)
        .map(|_| {
            (0..len)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state as u8
                })
                .collect()
        })
        .collect()
}

/// The benchmarks' criterion settings: short warm-up and measurement,
/// enough samples for a stable median.
pub(crate) fn criterion() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(40)
}
