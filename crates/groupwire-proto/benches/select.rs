//! Cost of the strategy selector and adaptive controller (issue 16:
//! "selection decisions are O(channels) per control interval and cost
//! under 1% of a core at 100 channels"): one control interval of 100
//! channels' `AdaptiveController::on_interval`, 20 peers with issue 16's
//! five channels each (telepointer, state, 25 Mbit/s camera, edits,
//! dataset), each peer's path a noisy estimate of 40 ms, 2% loss in
//! bursts of 1.5. At a 100 ms interval, 1% of a core is 1 ms per
//! iteration.

#![expect(
    missing_docs,
    reason = "criterion_group! generates an undocumented function"
)]

use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use groupwire_proto::session::{
    AdaptiveController, ControllerConfig, PathEstimate, Policy, Qos, Traffic,
};
use groupwire_proto::{Bitrate, Instant};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const PEERS: usize = 20;
const INTERVAL: Duration = Duration::from_millis(100);
/// Distinct noisy estimates per peer, cycled.
const ESTIMATES: usize = 64;

fn channels() -> Vec<(Qos, Traffic)> {
    let video = Qos::stream()
        .rate(Bitrate::mbps(25))
        .max_residual_loss(0.001)
        .max_delay(Duration::from_millis(50));
    vec![
        (
            Qos::awareness().mer_band(0.05, 0.06),
            Traffic::new(30.0, 100),
        ),
        (Qos::low_latency().max_loss(0.001), Traffic::new(100.0, 200)),
        (
            video,
            Traffic::from_qos(&video, 1200).expect("the camera has a rate"),
        ),
        (Qos::reliable_ordered(), Traffic::new(10.0, 500)),
        (Qos::bulk(), Traffic::new(5000.0, 1460)),
    ]
}

fn bench(c: &mut Criterion) {
    let mut rng = ChaCha8Rng::seed_from_u64(16);
    let mut n = move || 1.0 + 0.4 * (rng.random::<f64>() - 0.5);
    let paths: Vec<Vec<PathEstimate>> = (0..PEERS)
        .map(|_| {
            (0..ESTIMATES)
                .map(|_| {
                    PathEstimate::known(
                        Duration::from_millis(40).mul_f64(n()),
                        0.02 * n(),
                        1.5 * n(),
                        Some(Bitrate::mbps(200)),
                    )
                })
                .collect()
        })
        .collect();
    for policy in [Policy::Model, Policy::Heuristic] {
        let mut ctl: Vec<(usize, Traffic, AdaptiveController)> = (0..PEERS)
            .flat_map(|peer| {
                channels().into_iter().map(move |(qos, t)| {
                    (
                        peer,
                        t,
                        AdaptiveController::new(ControllerConfig::default(), policy, qos),
                    )
                })
            })
            .collect();
        assert_eq!(ctl.len(), 100);
        let mut tick = 0u64;
        c.bench_function(
            &format!("select/{policy:?}/100 channels, one interval"),
            |b| {
                b.iter(|| {
                    tick += 1;
                    let now = Instant::ZERO.saturating_add(INTERVAL.saturating_mul(tick as u32));
                    let mut switched = 0;
                    for (peer, t, c) in &mut ctl {
                        let path = &paths[*peer][tick as usize % ESTIMATES];
                        if c.on_interval(now, path, t, None).is_some() {
                            switched += 1;
                        }
                    }
                    switched
                })
            },
        );
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
