//! Erasure recovery, determinism, backend agreement and input validation.

use groupwire_codec::{Backend, CodecError, Decoder, ReedSolomon};
use proptest::prelude::*;

#[path = "../benches/common/mod.rs"]
mod common;

/// Deterministic filler so failures reproduce from the case alone.
fn block(k: usize, len: usize, seed: u64) -> Vec<Vec<u8>> {
    common::xorshift_block(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1, k, len)
}

fn encode(rs: &ReedSolomon, sources: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let len = sources[0].len();
    let mut repairs = vec![vec![0u8; len]; rs.repair_count()];
    rs.encode(sources, &mut repairs).expect("valid block");
    repairs
}

/// Drops the symbols in `lost`, decodes with `decoder` and checks the lost
/// sources come back.
fn check_pattern(decoder: &mut Decoder, sources: &[Vec<u8>], repairs: &[Vec<u8>], lost: &[usize]) {
    let k = sources.len();
    let received: Vec<(usize, &[u8])> = sources
        .iter()
        .chain(repairs)
        .enumerate()
        .filter(|(i, _)| !lost.contains(i))
        .map(|(i, s)| (i, &s[..]))
        .collect();
    let len = sources[0].len();
    let mut missing: Vec<(usize, Vec<u8>)> = lost
        .iter()
        .filter(|&&i| i < k)
        .map(|&i| (i, vec![0xA5; len]))
        .collect();
    decoder
        .decode(&received, &mut missing)
        .expect("at most m losses decode");
    for (i, got) in &missing {
        assert_eq!(
            got,
            &sources[*i],
            "source {i}, lost {lost:?}, backend {:?}",
            decoder.code().backend()
        );
    }
    // The uncached path agrees.
    let mut again: Vec<(usize, Vec<u8>)> =
        missing.iter().map(|(i, _)| (*i, vec![0; len])).collect();
    decoder
        .code()
        .decode(&received, &mut again)
        .expect("same input");
    assert_eq!(again, missing);
}

/// Every subset of `0..n` with at most `max` elements.
fn subsets(n: usize, max: usize) -> Vec<Vec<usize>> {
    (0u32..1 << n)
        .filter(|s| s.count_ones() as usize <= max)
        .map(|s| (0..n).filter(|i| s >> i & 1 != 0).collect())
        .collect()
}

fn backends() -> Vec<Backend> {
    Backend::ALL
        .into_iter()
        .filter(|b| b.is_available())
        .collect()
}

#[test]
fn recovers_every_pattern_of_at_most_m_losses_small_codes() {
    for (k, m) in [
        (1, 1),
        (2, 1),
        (1, 5),
        (3, 2),
        (3, 3),
        (5, 3),
        (4, 6),
        (8, 4),
        (10, 3),
    ] {
        for backend in backends() {
            let rs = ReedSolomon::new(k, m)
                .expect("valid")
                .with_backend(backend)
                .expect("available");
            for len in [0, 1, 31, 77] {
                let sources = block(k, len, (k * 1000 + m * 10 + len) as u64);
                let repairs = encode(&rs, &sources);
                let mut decoder = Decoder::with_cache_capacity(rs.clone(), 4);
                for lost in subsets(k + m, m) {
                    check_pattern(&mut decoder, &sources, &repairs, &lost);
                }
            }
        }
    }
}

#[test]
fn more_than_m_losses_is_an_error() {
    let rs = ReedSolomon::new(5, 3).expect("valid");
    let sources = block(5, 16, 1);
    let repairs = encode(&rs, &sources);
    let received: Vec<(usize, &[u8])> = vec![
        (1, &sources[1][..]),
        (5, &repairs[0][..]),
        (7, &repairs[2][..]),
        (3, &sources[3][..]),
    ];
    let mut out = [(0usize, vec![0u8; 16])];
    assert_eq!(
        rs.decode(&received, &mut out),
        Err(CodecError::NotEnoughSymbols { needed: 5, got: 4 })
    );
}

#[test]
fn decode_matrices_are_cached_and_bounded() {
    let rs = ReedSolomon::new(20, 8).expect("valid");
    let sources = block(20, 100, 3);
    let repairs = encode(&rs, &sources);
    let mut decoder = Decoder::with_cache_capacity(rs, 2);
    check_pattern(&mut decoder, &sources, &repairs, &[0, 1]);
    check_pattern(&mut decoder, &sources, &repairs, &[0, 1]);
    check_pattern(&mut decoder, &sources, &repairs, &[4]); // one loss: no matrix
    let s = decoder.cache_stats();
    assert_eq!((s.hits, s.misses, s.entries), (1, 1, 1));
    check_pattern(&mut decoder, &sources, &repairs, &[2, 3]);
    check_pattern(&mut decoder, &sources, &repairs, &[5, 6, 7, 20]);
    check_pattern(&mut decoder, &sources, &repairs, &[0, 1]);
    let s = decoder.cache_stats();
    assert_eq!((s.hits, s.misses, s.entries), (1, 4, 2));
}

#[test]
fn backends_compute_the_same_bytes() {
    for (k, m) in [(1, 1), (7, 5), (20, 8), (170, 85)] {
        for len in [0, 1, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 129, 1400] {
            let sources = block(k, len, len as u64);
            let scalar = ReedSolomon::new(k, m)
                .expect("valid")
                .with_backend(Backend::Scalar)
                .expect("always");
            let want = encode(&scalar, &sources);
            for backend in backends() {
                let rs = scalar.clone().with_backend(backend).expect("available");
                assert_eq!(
                    encode(&rs, &sources),
                    want,
                    "k={k} m={m} len={len} {backend:?}"
                );
                // Decode with min(m, k) lost sources through each backend too.
                let lost: Vec<usize> = (0..m.min(k)).collect();
                let mut decoder = Decoder::new(rs);
                check_pattern(&mut decoder, &sources, &want, &lost);
            }
        }
    }
}

/// The edges the vector kernels must never see: a block sent with no
/// repairs, and zero-length symbols (found by
/// `garbage_indexes_and_lengths_give_errors_not_panics`; its seed is in
/// `properties.proptest-regressions`).
#[test]
fn zero_repairs_and_empty_symbols_are_no_ops_on_every_backend() {
    for backend in backends() {
        for (k, m) in [(1, 0), (2, 0), (4, 2), (20, 8)] {
            let rs = ReedSolomon::new(k, m)
                .expect("valid")
                .with_backend(backend)
                .expect("available");
            let sources = block(k, 100, 3);
            let mut none: Vec<Vec<u8>> = Vec::new();
            assert_eq!(
                rs.encode(&sources, &mut none),
                Ok(()),
                "{backend:?} ({k}, {m})"
            );
            let empty = vec![Vec::<u8>::new(); k];
            let mut repairs = vec![Vec::<u8>::new(); m];
            assert_eq!(
                rs.encode(&empty, &mut repairs),
                Ok(()),
                "{backend:?} ({k}, {m})"
            );
            if m > 0 {
                // Lose the first source, rebuild it from a zero-length repair.
                let received: Vec<(usize, &[u8])> = (1..=k).map(|i| (i, &[][..])).collect();
                let mut missing = [(0, Vec::<u8>::new())];
                assert_eq!(rs.decode(&received, &mut missing), Ok(()), "{backend:?}");
            }
        }
    }
}

#[test]
fn rejects_bad_parameters_and_buffers() {
    assert!(matches!(
        ReedSolomon::new(0, 1),
        Err(CodecError::InvalidParameters { .. })
    ));
    assert!(matches!(
        ReedSolomon::new(200, 56),
        Err(CodecError::InvalidParameters { .. })
    ));
    assert!(matches!(
        ReedSolomon::new(1, usize::MAX),
        Err(CodecError::InvalidParameters { .. })
    ));
    assert!(ReedSolomon::new(255, 0).is_ok());
    let rs = ReedSolomon::new(3, 2).expect("valid");
    let s = block(3, 8, 9);
    assert_eq!(
        rs.encode(&s[..2], &mut [[0u8; 8]]),
        Err(CodecError::SourceCount {
            expected: 3,
            got: 2
        })
    );
    assert_eq!(
        rs.encode(&s, &mut [[0u8; 8]; 3]),
        Err(CodecError::RepairCount { max: 2, got: 3 })
    );
    assert_eq!(
        rs.encode(&s, &mut [[0u8; 7]]),
        Err(CodecError::LengthMismatch {
            index: 3,
            expected: 8,
            got: 7
        })
    );
    // Fewer repairs than m is fine: a prefix of the full set.
    let mut one = [[0u8; 8]];
    rs.encode(&s, &mut one).expect("prefix");
    assert_eq!(one[0].to_vec(), encode(&rs, &s)[0]);
    let r = |i: usize| (i, &s[i % 3][..]);
    let mut out = [(0usize, [0u8; 8])];
    assert_eq!(
        rs.decode(&[r(1), r(9)], &mut out),
        Err(CodecError::IndexOutOfRange { index: 9, limit: 5 })
    );
    assert_eq!(
        rs.decode(&[r(1), r(1)], &mut out),
        Err(CodecError::DuplicateIndex { index: 1 })
    );
    assert_eq!(
        rs.decode(&[r(0), r(1)], &mut out),
        Err(CodecError::NotMissing { index: 0 })
    );
    let mut out3 = [(3usize, [0u8; 8])];
    assert_eq!(
        rs.decode(&[r(1), r(2)], &mut out3),
        Err(CodecError::IndexOutOfRange { index: 3, limit: 3 })
    );
    let mut dup = [(0usize, [0u8; 8]), (0, [0u8; 8])];
    assert_eq!(
        rs.decode(&[r(1), r(2), r(3)], &mut dup),
        Err(CodecError::DuplicateIndex { index: 0 })
    );
}

/// Codes too big for every pattern: random patterns of at most m losses.
fn code_and_losses() -> impl Strategy<Value = (usize, usize, Vec<usize>, usize, u64)> {
    prop_oneof![
        Just((20usize, 8usize)),
        Just((20, 60)),
        Just((170, 85)),
        Just((1, 254)),
        Just((254, 1)),
        Just((64, 64)),
        (1usize..60, 1usize..40),
    ]
    .prop_flat_map(|(k, m)| {
        let n = k + m;
        (
            Just(k),
            Just(m),
            proptest::sample::subsequence((0..n).collect::<Vec<_>>(), 0..=m),
            prop_oneof![Just(1400usize), 0usize..200],
            any::<u64>(),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn recovers_sampled_patterns_of_at_most_m_losses((k, m, lost, len, seed) in code_and_losses()) {
        let rs = ReedSolomon::new(k, m).expect("valid");
        let sources = block(k, len, seed);
        let repairs = encode(&rs, &sources);
        prop_assert_eq!(&encode(&rs, &sources), &repairs, "encode is deterministic");
        let mut decoder = Decoder::new(rs);
        check_pattern(&mut decoder, &sources, &repairs, &lost);
    }

    #[test]
    fn garbage_indexes_and_lengths_give_errors_not_panics(
        k in 1usize..12,
        m in 0usize..12,
        received in proptest::collection::vec((any::<usize>().prop_map(|i| i % 40), 0usize..6), 0..30),
        missing in proptest::collection::vec((any::<usize>().prop_map(|i| i % 40), 0usize..6), 0..8),
    ) {
        let rs = ReedSolomon::new(k, m).expect("valid");
        let data = [7u8; 8];
        let rx: Vec<(usize, &[u8])> = received.iter().map(|&(i, l)| (i, &data[..l])).collect();
        let mut out: Vec<(usize, Vec<u8>)> = missing.iter().map(|&(i, l)| (i, vec![0; l])).collect();
        let mut decoder = Decoder::new(rs.clone());
        let a = decoder.decode(&rx, &mut out);
        let b = rs.decode(&rx, &mut out);
        prop_assert_eq!(a, b);
        let srcs: Vec<&[u8]> = received.iter().map(|&(_, l)| &data[..l]).collect();
        let mut reps: Vec<Vec<u8>> = missing.iter().map(|&(_, l)| vec![0; l]).collect();
        let _ = rs.encode(&srcs, &mut reps);
    }
}
