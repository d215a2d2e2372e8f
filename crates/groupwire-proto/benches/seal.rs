//! The tunnel's per-packet sealing cost (`--key-file`), per cipher, with
//! the keyless tunnel's integrity check (CRC-32 over the same bytes) as
//! the baseline in the same run. One iteration seals a 1400-byte packet
//! and opens it on the other side, as the two tunnel hops do.
//!
//! `cargo bench -p groupwire-proto --bench seal`

#![expect(
    missing_docs,
    reason = "criterion_group! generates an undocumented function"
)]

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use groupwire_proto::tunnel::seal::{Cipher, Opener, Sealer};

const PSK: &[u8] = b"a tunnel bench key, 32 bytes....";
const LEN: usize = 1400;

fn bench(c: &mut Criterion) {
    let plain = vec![0x5au8; LEN];
    let mut g = c.benchmark_group("tunnel packet, 1400 bytes, sealed and opened");
    g.throughput(Throughput::Bytes(LEN as u64));
    g.bench_function("keyless: CRC-32 (baseline)", |b| {
        b.iter(|| {
            let copy = plain.clone();
            std::hint::black_box(crc32fast::hash(&copy))
        });
    });
    for cipher in [Cipher::Aes256Gcm, Cipher::ChaCha20Poly1305] {
        let mut sealer = Sealer::new(PSK, 1, cipher);
        let mut opener = Opener::new(PSK, 2);
        g.bench_function(cipher.to_string(), |b| {
            b.iter(|| {
                let sealed = sealer.seal(&plain).expect("sealed");
                std::hint::black_box(opener.open(&sealed, true).expect("opened"))
            });
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
