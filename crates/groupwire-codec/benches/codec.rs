//! Reed-Solomon encode and decode of 1400-byte symbols: groupwire-codec
//! against `reed-solomon-simd` (Leopard-RS, GF(2^16), O(n log n)) and
//! `reed-solomon-erasure` (GF(2^8), klauspost-style, `simd-accel` C
//! kernels) in the same run.
//!
//! Criterion ids are `rs_{k}_{m}_{op}/{implementation}`, `op` one of
//! `encode` or `decode_{lost}` (`lost` source symbols lost, rebuilt from
//! the other `k - lost` sources and the first `lost` repairs), and
//! `implementation` one of
//! - `groupwire`: the detected backend, decoding through a `Decoder`
//!   (decode matrix cached after the first iteration);
//! - `groupwire_avx2`: the same on the AVX2 split-nibble backend;
//! - `groupwire_uncached` (decodes only): `ReedSolomon::decode`, which
//!   computes the decode matrix on every call;
//! - `groupwire_scalar` (`rs_20_8_encode` only): the portable backend;
//! - `rs_simd`, `rs_erasure`: the two other crates.
//!
//! `scripts/perf.sh codec` runs this and writes the table in
//! docs/results/perf.md.

#![expect(
    missing_docs,
    reason = "criterion_group! generates an undocumented function"
)]

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use groupwire_codec::{Backend, Decoder, ReedSolomon};

mod common;

const LEN: usize = 1400;

fn ours(k: usize, m: usize, backend: Option<Backend>) -> ReedSolomon {
    let rs = ReedSolomon::new(k, m).expect("valid code");
    match backend {
        Some(b) => rs.with_backend(b).expect("backend available"),
        None => rs,
    }
}

fn bench_encode(c: &mut Criterion, k: usize, m: usize) {
    let sources = common::block(k, LEN);
    let mut g = c.benchmark_group(format!("rs_{k}_{m}_encode"));
    g.throughput(Throughput::Bytes((k * LEN) as u64));
    let mut variants = vec![("groupwire", None)];
    if Backend::Avx2.is_available() {
        variants.push(("groupwire_avx2", Some(Backend::Avx2)));
    }
    if (k, m) == (20, 8) {
        variants.push(("groupwire_scalar", Some(Backend::Scalar)));
    }
    for (name, backend) in variants {
        let rs = ours(k, m, backend);
        let mut repairs = vec![vec![0u8; LEN]; m];
        g.bench_function(name, |b| {
            b.iter(|| rs.encode(black_box(&sources), &mut repairs).expect("valid"));
        });
    }
    let mut enc = reed_solomon_simd::ReedSolomonEncoder::new(k, m, LEN).expect("supported");
    g.bench_function("rs_simd", |b| {
        b.iter(|| {
            for s in &sources {
                enc.add_original_shard(black_box(s)).expect("valid");
            }
            let out = enc.encode().expect("valid");
            black_box(out.recovery(0));
        });
    });
    let rse = reed_solomon_erasure::galois_8::ReedSolomon::new(k, m).expect("valid");
    let mut parity = vec![vec![0u8; LEN]; m];
    g.bench_function("rs_erasure", |b| {
        b.iter(|| {
            rse.encode_sep(black_box(&sources), &mut parity)
                .expect("valid")
        });
    });
    g.finish();
}

fn bench_decode(c: &mut Criterion, k: usize, m: usize, lost: usize) {
    let sources = common::block(k, LEN);
    let mut repairs = vec![vec![0u8; LEN]; m];
    ours(k, m, None)
        .encode(&sources, &mut repairs)
        .expect("valid");
    // Sources 0..lost are lost; sources lost..k and repairs 0..lost arrive.
    let received: Vec<(usize, &[u8])> = (lost..k)
        .map(|i| (i, &sources[i][..]))
        .chain((0..lost).map(|j| (k + j, &repairs[j][..])))
        .collect();
    let mut g = c.benchmark_group(format!("rs_{k}_{m}_decode_{lost}"));
    g.throughput(Throughput::Bytes((k * LEN) as u64));
    let mut variants = vec![("groupwire", None)];
    if Backend::Avx2.is_available() {
        variants.push(("groupwire_avx2", Some(Backend::Avx2)));
    }
    for (name, backend) in variants {
        let mut decoder = Decoder::new(ours(k, m, backend));
        let mut missing: Vec<(usize, Vec<u8>)> = (0..lost).map(|i| (i, vec![0u8; LEN])).collect();
        decoder.decode(&received, &mut missing).expect("decodable");
        assert!(
            missing.iter().all(|(i, s)| *s == sources[*i]),
            "{name} decodes"
        );
        g.bench_function(name, |b| {
            b.iter(|| {
                decoder
                    .decode(black_box(&received), &mut missing)
                    .expect("decodable")
            });
        });
    }
    if lost >= 2 {
        let rs = ours(k, m, None);
        let mut missing: Vec<(usize, Vec<u8>)> = (0..lost).map(|i| (i, vec![0u8; LEN])).collect();
        g.bench_function("groupwire_uncached", |b| {
            b.iter(|| {
                rs.decode(black_box(&received), &mut missing)
                    .expect("decodable")
            });
        });
    }
    let mut dec = reed_solomon_simd::ReedSolomonDecoder::new(k, m, LEN).expect("supported");
    let mut enc = reed_solomon_simd::ReedSolomonEncoder::new(k, m, LEN).expect("supported");
    for s in &sources {
        enc.add_original_shard(s).expect("valid");
    }
    let simd_recovery: Vec<Vec<u8>> = enc
        .encode()
        .expect("valid")
        .recovery_iter()
        .map(<[u8]>::to_vec)
        .collect();
    g.bench_function("rs_simd", |b| {
        b.iter(|| {
            for (i, s) in sources.iter().enumerate().skip(lost) {
                dec.add_original_shard(i, black_box(s)).expect("valid");
            }
            for (j, r) in simd_recovery.iter().enumerate().take(lost) {
                dec.add_recovery_shard(j, black_box(r)).expect("valid");
            }
            let out = dec.decode().expect("decodable");
            black_box(out.restored_original(0));
        });
    });
    let rse = reed_solomon_erasure::galois_8::ReedSolomon::new(k, m).expect("valid");
    let mut shards: Vec<Vec<u8>> = sources.iter().chain(&repairs).cloned().collect();
    let mut slots: Vec<(&mut [u8], bool)> = shards
        .iter_mut()
        .enumerate()
        .map(|(i, s)| (&mut s[..], (lost..k + lost).contains(&i)))
        .collect();
    g.bench_function("rs_erasure", |b| {
        b.iter(|| {
            rse.reconstruct_data(black_box(&mut slots))
                .expect("decodable")
        });
    });
    g.finish();
}

fn codec(c: &mut Criterion) {
    bench_encode(c, 20, 8);
    for lost in [0, 1, 2, 8] {
        bench_decode(c, 20, 8, lost);
    }
    bench_encode(c, 20, 60);
    bench_encode(c, 170, 85);
    bench_decode(c, 170, 85, 38);
}

criterion_group! {
    name = benches;
    config = common::criterion();
    targets = codec
}
criterion_main!(benches);
