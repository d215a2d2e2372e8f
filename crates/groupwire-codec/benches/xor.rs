//! XOR parity of 1400-byte packets against a plain copy of the same bytes
//! (the memory-bandwidth floor), in one criterion run.
//!
//! Criterion ids are `xor_{n}/encode`, `xor_{n}/rebuild` and `xor_{n}/copy`
//! for groups of `n` packets: encode makes the parity of `n` packets,
//! rebuild makes one lost packet from the parity and the other `n - 1`,
//! copy copies `n` packets' bytes with `copy_from_slice`. Each touches `n`
//! packets' worth of input. `scripts/perf.sh xor` runs this and writes the
//! table in docs/results/perf.md.

#![expect(
    missing_docs,
    reason = "criterion_group! generates an undocumented function"
)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use groupwire_codec::xor::xor_into;

const LEN: usize = 1400;

fn bench(c: &mut Criterion) {
    for n in [2usize, 3, 8] {
        let packets: Vec<Vec<u8>> = (0..n)
            .map(|i| (0..LEN).map(|j| (i * 131 + j * 7) as u8).collect())
            .collect();
        let mut parity = vec![0u8; LEN];
        let mut g = c.benchmark_group(format!("xor_{n}"));
        g.throughput(Throughput::Bytes((n * LEN) as u64));
        g.measurement_time(Duration::from_secs(2));
        g.bench_function("encode", |b| {
            b.iter(|| {
                parity.copy_from_slice(&packets[0]);
                for p in &packets[1..] {
                    xor_into(&mut parity, black_box(p));
                }
                black_box(&parity);
            });
        });
        g.bench_function("rebuild", |b| {
            b.iter(|| {
                // Packet 0 lost: parity, then the other n - 1.
                let mut out = [0u8; LEN];
                out.copy_from_slice(black_box(&parity));
                for p in &packets[1..] {
                    xor_into(&mut out, black_box(p));
                }
                black_box(out);
            });
        });
        g.bench_function("copy", |b| {
            b.iter(|| {
                for p in &packets {
                    parity.copy_from_slice(black_box(p));
                    black_box(&parity);
                }
            });
        });
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
