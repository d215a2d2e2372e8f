//! What the codec benchmarks share.

/// `k` symbols of `len` pseudo-random bytes (xorshift64 from a fixed
/// seed): the same data in every run, and no zero runs a code could skip.
pub(crate) fn block(k: usize, len: usize) -> Vec<Vec<u8>> {
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    (0..k)
        .map(|_| {
            (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect()
        })
        .collect()
}
