//! AFEC sender + receiver processing cost per message (issue 3's goal: at
//! least 1 million 40-byte messages per second per core at code set size 3).
//! The baseline in the same run is the same endpoint at code set size 1
//! (plain UDP framing), so the ratio shows what redundancy costs.

#![expect(
    missing_docs,
    reason = "criterion_group! generates an undocumented function"
)]

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use groupwire_proto::afec::{AfecConfig, AfecEndpoint, Mode};
use groupwire_proto::wire::afec::MsgType;
use groupwire_proto::{Instant, Machine};

const TP: MsgType = MsgType::new(*b"TP");
const BATCH: u64 = 1000;

fn pair(mode: Mode) -> (AfecEndpoint, AfecEndpoint, SocketAddr, SocketAddr) {
    let a: SocketAddr = "10.0.0.1:7400".parse().expect("valid");
    let b: SocketAddr = "10.0.0.2:7400".parse().expect("valid");
    let mut tx = AfecEndpoint::new(AfecConfig::new(1).mode(mode)).expect("valid config");
    tx.add_peer(b);
    let rx = AfecEndpoint::new(AfecConfig::new(2).mode(mode)).expect("valid config");
    (tx, rx, a, b)
}

/// Sends `BATCH` messages through sender and receiver, draining both.
fn run_batch(tx: &mut AfecEndpoint, rx: &mut AfecEndpoint, a: SocketAddr, start: u64) -> u64 {
    let payload = Bytes::from_static(&[7u8; 40]);
    let mut delivered = 0;
    for i in 0..BATCH {
        let now = Instant::from_micros((start + i) * 33_000);
        let _ = tx.send(now, TP, payload.clone());
        while let Some(t) = tx.poll_transmit(now) {
            rx.handle_datagram(now, a, &t.payload);
        }
        while let Some(_e) = rx.poll_event() {
            delivered += 1;
        }
    }
    delivered
}

fn afec(c: &mut Criterion) {
    let mut g = c.benchmark_group("afec_tx_rx_40B");
    g.throughput(Throughput::Elements(BATCH));
    g.measurement_time(Duration::from_secs(3));
    for (name, mode) in [
        ("code_set_1_baseline", Mode::Plain),
        ("code_set_3", Mode::Static(3.0)),
    ] {
        g.bench_function(name, |bch| {
            let mut k = 0u64;
            bch.iter_batched_ref(
                || pair(mode),
                |(tx, rx, a, _b)| {
                    k += BATCH;
                    run_batch(tx, rx, *a, k)
                },
                BatchSize::SmallInput,
            );
        });
    }
    g.finish();
}

criterion_group!(benches, afec);
criterion_main!(benches);
