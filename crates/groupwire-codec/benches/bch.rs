//! BCH(127, k) encode and decode throughput, in coded bits per second on
//! one core, for the paper's three codes (Miyoshi et al.: t = 5, 10, 15)
//! with 0, t/2 and t bit errors per codeword.
//!
//! Criterion ids are `bch_{t}/encode` and `bch_{t}/decode_{errors}`; each
//! iteration handles 64 codewords (the errors at fixed pseudo-random
//! positions, the same in every run). `scripts/perf.sh bch` runs this and
//! writes the table in docs/results/perf.md.

#![expect(
    missing_docs,
    reason = "criterion_group! generates an undocumented function"
)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use groupwire_codec::{BCH_N, Bch};

const WORDS: usize = 64;

/// A fixed xorshift stream: the same words and error patterns every run.
fn stream() -> impl FnMut() -> u64 {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    }
}

fn bench(c: &mut Criterion) {
    for code in Bch::paper_codes() {
        let t = code.t();
        let mut next = stream();
        let messages: Vec<u128> = (0..WORDS)
            .map(|_| (u128::from(next()) << 64 | u128::from(next())) & ((1 << code.k()) - 1))
            .collect();
        let words: Vec<u128> = messages.iter().map(|&m| code.encode(m)).collect();
        let mut g = c.benchmark_group(format!("bch_{t}"));
        g.throughput(Throughput::Elements((WORDS * BCH_N) as u64));
        g.measurement_time(Duration::from_secs(3));
        g.warm_up_time(Duration::from_secs(1));
        g.bench_function("encode", |b| {
            b.iter(|| {
                for &m in &messages {
                    black_box(code.encode(black_box(m)));
                }
            });
        });
        for errors in [0, t / 2, t] {
            let received: Vec<u128> = words
                .iter()
                .map(|&w| {
                    let mut p = 0u128;
                    while (p.count_ones() as usize) < errors {
                        p |= 1 << (next() % BCH_N as u64);
                    }
                    w ^ p
                })
                .collect();
            g.bench_function(format!("decode_{errors}"), |b| {
                b.iter(|| {
                    for &r in &received {
                        let _ = black_box(code.decode(black_box(r)));
                    }
                });
            });
        }
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
