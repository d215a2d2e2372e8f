//! What one choice of the block target controller costs
//! (`control::target::choose_code`, step 4 of its module docs): the
//! tunnel's `--fec target` and every session channel on Block make one
//! every fifth receiver report, 20 a second each, so at 8 channels the
//! choices of one report interval can fall in one turn of the driver.
//! The fits are ones the session's loopback benchmark reached (a clean
//! path, from the prior down), and two lossy channels of the robustness
//! family; the budget's block length is the `k_max`.

#![expect(
    missing_docs,
    reason = "criterion_group! generates an undocumented function"
)]

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use groupwire_proto::control::target::{TwoState, choose_code};

/// A fit of the default (slow then fast) pair: the same chain twice,
/// the second a tenth worse, as a fast fit following a worsening path.
fn fits(model: TwoState) -> [TwoState; 2] {
    let fast = TwoState {
        p: model.p * 1.1,
        ..model
    };
    [model, fast]
}

fn choice(c: &mut Criterion) {
    let cases = [
        // The session's prior, 15% loss in runs of 4, at 26 per block.
        ("prior_k26", TwoState::gilbert(0.044, 0.25), 0.001, 26),
        // A clean path half a second in, at 25 per block.
        ("clean_k25", TwoState::gilbert(0.0178, 0.25), 0.001, 25),
        // A clean path later, the budget's block the longest there is.
        ("clean_k254", TwoState::gilbert(0.0006, 0.25), 0.001, 254),
        // Gilbert 10% in bursts of 4 (the channel), 60 per block.
        (
            "gilbert10_k60",
            TwoState::gilbert(0.027778, 0.25),
            0.001,
            60,
        ),
        // Gilbert-Elliott, loss in both states, 60 per block.
        (
            "ge_k60",
            TwoState {
                p: 0.01,
                r: 0.1,
                loss_good: 0.01,
                loss_bad: 0.6,
            },
            0.001,
            60,
        ),
    ];
    let mut g = c.benchmark_group("target_choice");
    for (name, model, target, k_max) in cases {
        let models = fits(model);
        g.bench_function(name, |b| {
            b.iter(|| choose_code(black_box(&models), target, k_max, 3.0));
        });
    }
    g.finish();
}

criterion_group!(benches, choice);
criterion_main!(benches);
