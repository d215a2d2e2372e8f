//! One repair symbol of a sliding-window RLC code (RFC 8681, GF(2^8),
//! dense) over windows of 10, 50 and 200 source symbols of 1000 bytes,
//! beside `ReedSolomon` computing one repair of a block of the same `k`:
//! the same multiply-add over the same bytes, plus, for the sliding code,
//! generating the coefficients from the Repair_Key (TinyMT32) on every
//! repair, where the block code reads a precomputed matrix row.
//!
//! Criterion ids are `sliding_{k}_repair/{implementation}`, with
//! `implementation` one of
//! - `sliding`: `sliding::Encoder::repair_into` on the detected backend,
//!   DT = 15 (every coefficient non-zero);
//! - `sliding_dt7`: the same with DT = 7 (about half the coefficients
//!   zero, so about half the symbols read);
//! - `rs`: `ReedSolomon::new(k, 1)` encoding its one repair.
//!
//! The ratio of `sliding` to `rs` is what generating coefficients per
//! repair costs. `scripts/perf.sh sliding` runs it and writes the table
//! in `docs/results/perf.md`.

#![expect(
    missing_docs,
    reason = "criterion_group! generates an undocumented function"
)]

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use groupwire_codec::ReedSolomon;
use groupwire_codec::sliding::Encoder;

mod common;

const LEN: usize = 1000;

fn bench_repair(c: &mut Criterion, k: usize) {
    let sources = common::block(k, LEN);
    let mut g = c.benchmark_group(format!("sliding_{k}_repair"));
    g.throughput(Throughput::Bytes((k * LEN) as u64));
    let mut enc = Encoder::new(LEN, k).expect("valid window");
    for s in &sources {
        enc.push_symbol(s).expect("LEN bytes");
    }
    let mut out = vec![0u8; LEN];
    for (name, dt) in [("sliding", 15), ("sliding_dt7", 7)] {
        let mut key = 0u16;
        g.bench_function(name, |b| {
            b.iter(|| {
                key = key.wrapping_add(1);
                let id = enc
                    .repair_into(black_box(key), dt, &mut out)
                    .expect("non-empty");
                black_box((id, &out));
            });
        });
    }
    let rs = ReedSolomon::new(k, 1).expect("k + 1 <= 255");
    let mut repair = [vec![0u8; LEN]];
    g.bench_function("rs", |b| {
        b.iter(|| rs.encode(black_box(&sources), &mut repair).expect("valid"));
    });
    g.finish();
}

fn sliding(c: &mut Criterion) {
    for k in [10, 50, 200] {
        bench_repair(c, k);
    }
}

criterion_group! {
    name = benches;
    config = common::criterion();
    targets = sliding
}
criterion_main!(benches);
