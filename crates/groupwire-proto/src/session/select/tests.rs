use std::time::Duration;

use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::predict::{all_lost_at, every_nth, run_prob, run_starts};
use super::*;
use crate::Bitrate;
use crate::control::target::{TwoState, block_residual, choose_code, k_within};
use crate::session::MechanismKind;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// 20 ms, no loss, 100 Mbit/s.
fn clean() -> PathEstimate {
    PathEstimate::known(ms(20), 0.0, 1.0, Some(Bitrate::mbps(100)))
}

/// 60 ms, 3% loss in bursts of 2, 100 Mbit/s.
fn lossy() -> PathEstimate {
    PathEstimate::known(ms(60), 0.03, 2.0, Some(Bitrate::mbps(100)))
}

/// 150 ms, 0.01% random loss, 1 Gbit/s: a long fat network (BDP 18.75 MB).
fn long_fat() -> PathEstimate {
    PathEstimate::known(ms(150), 0.0001, 1.0, Some(Bitrate::gbps(1)))
}

/// Small state updates: 100 messages of 200 bytes per second.
const STATE: Traffic = Traffic::new(100.0, 200);

/// A 50 ms-budget stream at 0.1% residual.
fn video() -> Qos {
    Qos::stream().max_residual_loss(0.001).max_delay(ms(50))
}

/// 2 Mbit/s of 1000-byte messages (250 per second).
const VIDEO: Traffic = Traffic::new(250.0, 1000);

#[test]
fn traffic_reads_the_declared_rate() {
    let q = Qos::stream().rate(Bitrate::mbps(8));
    assert_eq!(
        Traffic::from_qos(&q, 1000),
        Some(Traffic::new(1000.0, 1000))
    );
    assert_eq!(Traffic::from_qos(&Qos::stream(), 1000), None);
    assert_eq!(Traffic::from_qos(&q, 0), None);
}

#[test]
fn heuristic_maps_each_preset_as_leigh_et_al_section_5_says() {
    let row3 = Mechanism::Xor(XorLayout::row(3));
    let p = Mechanism::Plain;
    let r = Mechanism::Reliable;
    // (qos, on clean, on lossy, on long fat)
    let table: [(&str, Qos, [Mechanism; 3]); 7] = [
        ("awareness", Qos::awareness(), [p, row3, p]),
        ("low_latency", Qos::low_latency(), [p, p, p]),
        (
            "low_latency 0.1%",
            Qos::low_latency().max_loss(0.001),
            [p, row3, p],
        ),
        ("stream", Qos::stream(), [p, p, p]),
        ("video", video(), [p, row3, p]),
        ("reliable_ordered", Qos::reliable_ordered(), [r, r, r]),
        (
            "bulk",
            Qos::bulk(),
            [r, r, Mechanism::Striped { streams: 3 }],
        ),
    ];
    for (name, qos, want) in table {
        for (path, want) in [clean(), lossy(), long_fat()].iter().zip(want) {
            let s = select(Policy::Heuristic, &qos, path, &STATE, None);
            assert_eq!(s.mechanism, want, "{name} on {path:?}: {}", s.reason);
        }
    }
    // Where bandwidth is reserved, bulk goes by Reliable Blast UDP.
    let reserved = Provision {
        reserved: true,
        ..Provision::DEFAULT
    };
    for path in [clean(), long_fat()] {
        let s = select_with(
            Policy::Heuristic,
            &reserved,
            &Qos::bulk(),
            &path,
            &STATE,
            None,
        );
        assert_eq!(s.mechanism, Mechanism::Blast);
    }
    // A low-latency channel that tolerates no loss is "else TCP".
    let none = Qos::low_latency().max_loss(0.0);
    let s = select(Policy::Heuristic, &none, &lossy(), &STATE, None);
    assert_eq!(s.mechanism, Mechanism::Reliable);
}

#[test]
fn model_picks_plain_on_a_clean_path_and_fec_on_a_lossy_one() {
    let qos = video();
    let s = select(Policy::Model, &qos, &clean(), &VIDEO, None);
    assert_eq!(s.mechanism, Mechanism::Plain, "{}", s.reason);
    assert!(s.meets);

    // 100 ms round trip: TCP's recovery (an RTT) cannot fit 50 ms.
    let lossy = PathEstimate::known(ms(100), 0.02, 1.5, Some(Bitrate::mbps(100)));
    let heavy = select(Policy::Model, &qos, &lossy, &VIDEO, None);
    assert!(heavy.meets, "{heavy:?}");
    assert!(
        matches!(
            heavy.mechanism.kind(),
            MechanismKind::Xor | MechanismKind::Block
        ),
        "{heavy:?}"
    );
    let reliable = predict(&Mechanism::Reliable, &qos, &lossy, &VIDEO);
    assert!(reliable.late > qos.reliability.max_loss(), "{reliable:?}");

    // Less loss: cheaper FEC.
    let light = PathEstimate::known(ms(100), 0.002, 1.0, Some(Bitrate::mbps(100)));
    let cheap = select(Policy::Model, &qos, &light, &VIDEO, None);
    assert!(cheap.meets, "{cheap:?}");
    assert!(
        matches!(
            cheap.mechanism.kind(),
            MechanismKind::Xor | MechanismKind::Block
        ),
        "{cheap:?}"
    );
    assert!(
        cheap.prediction.overhead < heavy.prediction.overhead,
        "{cheap:?} vs {heavy:?}"
    );
}

#[test]
fn model_picks_reliable_for_reliable_ordered_and_says_when_nothing_meets() {
    for path in [clean(), lossy(), long_fat()] {
        let s = select(Policy::Model, &Qos::reliable_ordered(), &path, &STATE, None);
        assert_eq!(s.mechanism, Mechanism::Reliable, "{path:?}");
        assert!(s.meets);
    }
    // Full and ordered: only Reliable delivers messages in order (Striped
    // and Blast move objects), whatever their predictions.
    let q = Qos::reliable_ordered();
    for m in [
        Mechanism::Striped { streams: 2 },
        Mechanism::Blast,
        Mechanism::Plain,
    ] {
        let p = predict(&m, &q, &clean(), &STATE);
        assert!(!meets(&q, &m, &p), "{m}");
    }
    let p = predict(
        &Mechanism::Striped { streams: 2 },
        &Qos::bulk(),
        &clean(),
        &STATE,
    );
    assert!(meets(&Qos::bulk(), &Mechanism::Striped { streams: 2 }, &p));
    // Every message within 10 ms on a 100 ms path with loss: nothing can.
    let qos = Qos::reliable_ordered().max_delay(ms(10));
    let path = PathEstimate::known(ms(100), 0.02, 2.0, Some(Bitrate::mbps(100)));
    let s = select(Policy::Model, &qos, &path, &STATE, None);
    assert!(!s.meets, "{s:?}");
    // 1e-6 within 5 ms on 30% loss in long bursts: nothing can either,
    // and the answer is the least lossy candidate.
    let qos = Qos::stream().max_residual_loss(1e-6).max_delay(ms(5));
    let path = PathEstimate::known(ms(20), 0.3, 10.0, Some(Bitrate::mbps(100)));
    let s = select(Policy::Model, &qos, &path, &VIDEO, None);
    assert!(!s.meets, "{s:?}");
    // Of those that fit and come within a tenth of the fewest failed
    // windows (the mean loss here: no window), the least loss for the
    // bytes sent.
    let all: Vec<Prediction> = candidates(&Provision::DEFAULT, &qos, &path)
        .iter()
        .map(|m| predict(m, &qos, &path, &VIDEO))
        .filter(|p| p.rate_ok)
        .collect();
    let least = all.iter().map(Prediction::lost).fold(1.0, f64::min);
    assert!(s.prediction.lost() <= least * (1.0 + NONE_MEETS_TOLERANCE) + 1e-12);
    for p in all
        .iter()
        .filter(|p| p.lost() <= least * (1.0 + NONE_MEETS_TOLERANCE))
    {
        assert!(p.loss_cost() >= s.prediction.loss_cost(), "{p:?} is better");
    }
}

#[test]
fn when_nothing_meets_the_fewest_failed_windows_win_and_alike_ones_go_to_the_cheapest() {
    let p = |lost: f64, overhead: f64| Prediction {
        residual: lost,
        late: 0.0,
        added_delay: Duration::ZERO,
        overhead,
        rate_ok: true,
        throughput: None,
        cluster: 1.0,
    };
    // 20 messages a window, none may be lost: a window fails with any
    // loss, 1 − e^(−20·lost).
    let qos = Qos::low_latency().max_loss(0.001);
    let w = Some(Window {
        msgs: 20.0,
        risk: 0.05,
    });
    let one_copy = window_fail(&qos, &p(0.0095, 1.0), w);
    let two_copies = window_fail(&qos, &p(0.0071, 2.0), w);
    assert!(
        (one_copy - (1.0 - (-0.19f64).exp())).abs() < 1e-9,
        "{one_copy}"
    );
    assert!(two_copies < one_copy * (1.0 - NONE_MEETS_TOLERANCE));
    // Without a window, the mean loss.
    assert_eq!(window_fail(&qos, &p(0.0095, 1.0), None), 0.0095);
    // Every window failing whatever is sent: all alike, and then twice
    // the bytes for a quarter less loss is not worth it; for half the
    // loss it is even.
    let hopeless = |o| window_fail(&qos, &p(0.5, o), w);
    assert!((hopeless(0.0) - hopeless(3.0)).abs() < 1e-3);
    assert!(p(0.0075, 2.0).loss_cost() > p(0.01, 1.0).loss_cost());
    assert_eq!(p(0.005, 3.0).loss_cost(), p(0.01, 1.0).loss_cost());
}

#[test]
fn model_stripes_bulk_on_a_long_fat_path_and_blasts_where_reserved() {
    let s = select(Policy::Model, &Qos::bulk(), &long_fat(), &STATE, None);
    assert!(
        matches!(s.mechanism, Mechanism::Striped { streams } if streams >= 2),
        "{s:?}"
    );
    let short = select(Policy::Model, &Qos::bulk(), &clean(), &STATE, None);
    assert_eq!(short.mechanism, Mechanism::Reliable, "{short:?}");
}

/// Leigh et al. §4.3 on a lossy path: one connection's loss-driven
/// window fills little of a measured 100 Mbit/s, so the model stripes a
/// bulk channel, over the fewest connections within a tenth of the best;
/// without a capacity estimate, or where the stream does not cross the
/// measured path, nothing says more connections help, and it keeps one.
#[test]
fn model_stripes_bulk_where_one_connection_cannot_fill_the_measured_room() {
    let s = select(Policy::Model, &Qos::bulk(), &lossy(), &STATE, None);
    let Mechanism::Striped { streams } = s.mechanism else {
        panic!("{s:?}")
    };
    assert!((2..=crate::MAX_STREAMS).contains(&streams), "{s:?}");
    let unmeasured = PathEstimate {
        capacity: None,
        ..lossy()
    };
    let s = select(Policy::Model, &Qos::bulk(), &unmeasured, &STATE, None);
    assert_eq!(s.mechanism, Mechanism::Reliable, "{s:?}");
    let off_path = Provision {
        stream_on_path: false,
        ..Provision::DEFAULT
    };
    let s = select_with(
        Policy::Model,
        &off_path,
        &Qos::bulk(),
        &lossy(),
        &STATE,
        None,
    );
    assert_eq!(s.mechanism, Mechanism::Reliable, "{s:?}");
    // A small room: one connection's rate already fills it.
    let thin = PathEstimate::known(ms(60), 0.03, 2.0, Some(Bitrate::kbps(200)));
    let s = select(Policy::Model, &Qos::bulk(), &thin, &STATE, None);
    assert_eq!(s.mechanism, Mechanism::Reliable, "{s:?}");
}

#[test]
fn with_one_stream_connection_neither_policy_stripes() {
    let one = Provision {
        max_streams: 1,
        ..Provision::DEFAULT
    };
    let path = long_fat();
    assert!(
        !candidates(&one, &Qos::bulk(), &path)
            .iter()
            .any(|m| m.kind() == MechanismKind::Striped)
    );
    for policy in [Policy::Model, Policy::Heuristic] {
        let s = select_with(policy, &one, &Qos::bulk(), &path, &STATE, None);
        assert_eq!(s.mechanism, Mechanism::Reliable, "{policy:?}: {s:?}");
    }
    // With more, the heuristic stripes the same path.
    let h = select_with(
        Policy::Heuristic,
        &Provision::DEFAULT,
        &Qos::bulk(),
        &path,
        &STATE,
        None,
    );
    assert!(matches!(h.mechanism, Mechanism::Striped { .. }), "{h:?}");
}

#[test]
fn xor_rows_and_blocks_predict_what_the_exact_code_computes() {
    let path = lossy();
    let model = path.model();
    let qos = Qos::stream().max_residual_loss(0.001);
    for l in 2..=10u8 {
        let p = predict(&Mechanism::Xor(XorLayout::row(l)), &qos, &path, &VIDEO);
        assert_eq!(p.residual, block_residual(&model, usize::from(l), 1));
        assert!((p.overhead - 1.0 / f64::from(l)).abs() < 1e-12);
    }
    let b = Mechanism::Block {
        target: 0.001,
        max_delay: ms(50),
    };
    let p = predict(&b, &qos, &path, &VIDEO);
    // The session's controller: blocks close at half the budget.
    let cfg = crate::session::channel::block_controller(0.001, ms(50));
    assert_eq!(cfg.block_budget(), ms(25));
    let code = choose_code(
        &[model],
        0.001,
        k_within(cfg.block_budget(), VIDEO.msg_rate, 254),
        3.0,
    );
    assert_eq!(p.residual, code.residual);
    assert!((p.overhead - code.m as f64 / code.k as f64).abs() < 1e-12);
    assert!(code.meets && p.residual <= 0.001);
}

/// Every pattern of `n` packets on `model` from its stationary state, with
/// its probability: state paths and, per state, lost or not.
fn patterns(model: &TwoState, n: usize) -> Vec<(Vec<bool>, f64)> {
    let mut out = Vec::new();
    for states in 0..1u32 << n {
        for losses in 0..1u32 << n {
            let mut pr = 1.0;
            let mut lost = Vec::with_capacity(n);
            for t in 0..n {
                let bad = states >> t & 1 == 1;
                pr *= if t == 0 {
                    if bad {
                        model.p_bad()
                    } else {
                        1.0 - model.p_bad()
                    }
                } else {
                    let was = states >> (t - 1) & 1 == 1;
                    match (was, bad) {
                        (false, false) => 1.0 - model.p,
                        (false, true) => model.p,
                        (true, false) => model.r,
                        (true, true) => 1.0 - model.r,
                    }
                };
                let h = if bad { model.loss_bad } else { model.loss_good };
                let l = losses >> t & 1 == 1;
                pr *= if l { h } else { 1.0 - h };
                lost.push(l);
            }
            out.push((lost, pr));
        }
    }
    out
}

#[test]
fn chain_formulas_agree_with_brute_force_enumeration() {
    let chains = [
        TwoState::gilbert(0.1, 0.4),
        TwoState {
            p: 0.2,
            r: 0.3,
            loss_good: 0.05,
            loss_bad: 0.6,
        },
    ];
    for model in chains {
        let n = 7;
        let all = patterns(&model, n);
        let total: f64 = all.iter().map(|x| x.1).sum();
        assert!((total - 1.0).abs() < 1e-12);
        let prob = |f: &dyn Fn(&[bool]) -> bool| -> f64 {
            all.iter().filter(|(l, _)| f(l)).map(|x| x.1).sum()
        };
        for k in 1..=n {
            let lost = prob(&|l: &[bool]| l[..k].iter().all(|&x| x));
            let recv = prob(&|l: &[bool]| l[..k].iter().all(|&x| !x));
            assert!((run_prob(&model, k as u64, true) - lost).abs() < 1e-12);
            assert!((run_prob(&model, k as u64, false) - recv).abs() < 1e-12);
        }
        // A loss run begins at packet 1.
        let starts = prob(&|l: &[bool]| !l[0] && l[1]);
        assert!((run_starts(&model) - starts).abs() < 1e-12);
        // The chain every 3rd packet: packets 0 and 3 both lost.
        let both = prob(&|l: &[bool]| l[0] && l[3]);
        assert!((run_prob(&every_nth(&model, 3.0), 2, true) - both).abs() < 1e-12);
        // An XOR row of 3 and its parity: sources lost in rows with more
        // than one of the four lost.
        let row: f64 = all
            .iter()
            .filter(|(l, _)| l[..4].iter().filter(|&&x| x).count() > 1)
            .map(|(l, pr)| pr * l[..3].iter().filter(|&&x| x).count() as f64 / 3.0)
            .sum();
        let path = PathEstimate {
            loss_model: Some(model),
            loss: model.loss_rate(),
            ..PathEstimate::known(ms(20), 0.0, 1.0, None)
        };
        let qos = Qos::stream().max_residual_loss(0.01);
        let p = predict(&Mechanism::Xor(XorLayout::row(3)), &qos, &path, &STATE);
        assert!((p.residual - row).abs() < 1e-12, "{} vs {row}", p.residual);
        // AFEC at whole sizes: a message in 3 consecutive packets.
        let mer3 = prob(&|l: &[bool]| l[..3].iter().all(|&x| x));
        let band = |m: f64| Mechanism::Afec { lo: m, hi: m };
        let a = predict(&band(mer3), &qos, &path, &STATE);
        assert!((a.residual - mer3).abs() < 1e-9, "{a:?} vs {mer3}");
        assert!((a.overhead - 2.0).abs() < 1e-6, "{a:?}");
    }
}

#[test]
fn reliable_is_late_by_head_of_line_blocking_past_the_budget() {
    // 60 ms RTT, 1% independent loss, 100 messages/s: a loss costs
    // min(RTO, RTT + 3 gaps) = min(200, 90) ms; with a 55 ms budget, a
    // message is late iff one of the ⌈35 ms · 100/s⌉ = 4 last segments
    // (itself included) was lost.
    let path = PathEstimate {
        loss: 0.01,
        loss_model: None,
        ..PathEstimate::known(ms(60), 0.0, 1.0, None)
    };
    let qos = Qos::stream().max_residual_loss(0.001).max_delay(ms(55));
    let p = predict(&Mechanism::Reliable, &qos, &path, &STATE);
    assert!(
        p.added_delay.abs_diff(ms(90)) < Duration::from_micros(1),
        "{p:?}"
    );
    let want = 1.0 - 0.99f64.powi(4);
    assert!((p.late - want).abs() < 1e-9, "{p:?} vs {want}");
    assert_eq!(p.residual, 0.0);
    // Without a budget nothing is late.
    let p = predict(
        &Mechanism::Reliable,
        &Qos::reliable_ordered(),
        &path,
        &STATE,
    );
    assert_eq!(p.late, 0.0);
}

/// Noisy estimates of a stationary path: loss, burst and RTT each off by
/// up to ±20%.
fn noisy(rng: &mut ChaCha8Rng, rtt: Duration, loss: f64, burst: f64) -> PathEstimate {
    let mut n = || 1.0 + 0.4 * (rng.random::<f64>() - 0.5);
    PathEstimate::known(
        rtt.mul_f64(n()),
        loss * n(),
        (burst * n()).max(1.0),
        Some(Bitrate::mbps(100)),
    )
}

const INTERVAL: Duration = Duration::from_millis(100);

fn at(i: u64) -> Instant {
    Instant::ZERO.saturating_add(INTERVAL * i as u32)
}

/// Ten simulated minutes of one channel on a stationary path with noisy
/// estimates; the switches made.
fn stationary_run(seed: u64, qos: Qos, loss: f64) -> Vec<(u64, Switch)> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut c = AdaptiveController::new(ControllerConfig::default(), Policy::Model, qos);
    let mut out = Vec::new();
    for i in 0..6000 {
        let path = noisy(&mut rng, ms(100), loss, 1.5);
        if let Some(s) = c.on_interval(at(i), &path, &VIDEO, None) {
            out.push((i, s));
        }
    }
    assert_eq!(c.intervals(), 6000);
    out
}

#[test]
fn controller_does_not_switch_on_a_stationary_path_with_noisy_estimates() {
    for (seed, loss) in [(1, 0.02), (2, 0.005), (3, 0.0)] {
        let s = stationary_run(seed, video(), loss);
        assert_eq!(s.len(), 1, "loss {loss}: only the first choice, got {s:?}");
        assert_eq!(s[0].1.from, None);
    }
    // Same seed, same decisions.
    assert_eq!(
        stationary_run(7, video(), 0.01),
        stationary_run(7, video(), 0.01)
    );
}

#[test]
fn controller_switches_once_after_a_path_change_and_only_after_hold() {
    let mut c = AdaptiveController::new(ControllerConfig::default(), Policy::Model, video());
    let calm = PathEstimate::known(ms(100), 0.0, 1.0, Some(Bitrate::mbps(100)));
    let bad = PathEstimate::known(ms(100), 0.03, 2.0, Some(Bitrate::mbps(100)));
    let first = c
        .on_interval(at(0), &calm, &VIDEO, None)
        .expect("first choice");
    assert_eq!(first.to, Mechanism::Plain);
    let mut switches = Vec::new();
    // 2 minutes calm, then 5 minutes of 3% loss in bursts of 2.
    for i in 1..4200 {
        let path = if i < 1200 { calm } else { bad };
        if let Some(s) = c.on_interval(at(i), &path, &VIDEO, None) {
            switches.push((i, s));
        }
    }
    assert_eq!(switches.len(), 1, "{switches:?}");
    let (i, s) = &switches[0];
    // The change at interval 1200 is seen at once; the switch comes when
    // it has held for the rescue hold, 2 s (20 intervals): the loss rate
    // moved far past the change ratio.
    assert_eq!(*i, 1220, "{s:?}");
    assert_eq!(s.from, Some(Mechanism::Plain));
    assert!(s.prediction.lost() <= 0.001 && c.meets(), "{s:?}");
    assert_eq!(c.switches(), 1);
    assert_eq!(c.current(), Some(s.to));
}

/// A heuristic controller for a 1% loss target on a calm path (0.1%),
/// then 5% loss from 10 s to 15 s: the intervals at which it switched.
fn heuristic_switches_over_a_loss_episode(cfg: ControllerConfig) -> Vec<u64> {
    let qos = Qos::low_latency().max_loss(0.01);
    let mut c = AdaptiveController::new(cfg, Policy::Heuristic, qos);
    let calm = PathEstimate::known(ms(50), 0.001, 1.0, None);
    let bad = PathEstimate::known(ms(50), 0.05, 1.0, None);
    c.on_interval(at(0), &calm, &STATE, None);
    let mut switches = Vec::new();
    for i in 1..2000 {
        let path = if (100..151).contains(&i) { bad } else { calm };
        if let Some(s) = c.on_interval(at(i), &path, &STATE, None) {
            switches.push(i);
            assert!(s.from.is_some());
        }
    }
    assert_eq!(c.switches(), switches.len() as u64);
    switches
}

#[test]
fn controller_waits_out_min_dwell_before_a_second_switch() {
    // No path change counts as one: only the dwell and the hold apply.
    let cfg = ControllerConfig {
        change_ratio: f64::INFINITY,
        ..ControllerConfig::default()
    };
    // To FEC at 15 s, back to plain no sooner than 60 s later.
    assert_eq!(heuristic_switches_over_a_loss_episode(cfg), vec![150, 750]);
}

#[test]
fn a_changed_path_rescues_a_channel_within_the_dwell() {
    // A loss rate fifty times the first choice's is a new path on which
    // plain fails: to FEC 2 s after it is seen, within the dwell had there
    // been an earlier switch. Back on the calm path FEC still meets the
    // QoS, so the move back to plain waits out the dwell.
    let switches = heuristic_switches_over_a_loss_episode(ControllerConfig::default());
    assert_eq!(switches, vec![120, 720]);
}

#[test]
fn an_overload_moves_the_channel_to_what_fits_within_a_second() {
    let qos = video();
    let mut c = AdaptiveController::new(ControllerConfig::default(), Policy::Model, qos);
    // 2% loss, room for anything: the controller settles on redundancy.
    let roomy = PathEstimate::known(ms(40), 0.02, 1.0, Some(Bitrate::mbps(100)));
    c.on_interval(at(0), &roomy, &VIDEO, None)
        .expect("first choice");
    for i in 1..100 {
        c.on_interval(at(i), &roomy, &VIDEO, None);
    }
    let chosen = c.prediction().expect("a prediction");
    assert!(chosen.overhead > 0.0, "{chosen:?}");
    // Now the channel's share of the path is its bare rate: whatever it
    // sends beyond that overloads the path. It moves at the next control
    // interval and the overload hold later, though the dwell has not run.
    let need = VIDEO.msg_rate * VIDEO.msg_size as f64 * 8.0;
    let tight = PathEstimate {
        delivered: Some(Bitrate::bps((need * 1.01) as u64)),
        ..roomy
    };
    let mut moved = None;
    for i in 100..200 {
        if let Some(s) = c.on_interval(at(i), &tight, &VIDEO, None) {
            moved = Some((i, s));
            break;
        }
    }
    let (i, s) = moved.expect("a switch off the overload");
    assert!(i <= 106, "at {i}");
    assert!(s.prediction.rate_ok, "{s:?}");
    assert_eq!(s.to, Mechanism::Plain);
}

#[test]
fn controller_falls_back_when_measured_loss_contradicts_the_prediction() {
    let qos = video();
    // The closed loop alone: the target is the mean (no window), so the
    // first choice is predicted near it.
    let cfg = ControllerConfig {
        window: Duration::ZERO,
        ..ControllerConfig::default()
    };
    let mut c = AdaptiveController::new(cfg, Policy::Model, qos);
    // The monitor sees 1% random loss; the channel measures 1% residual
    // after recovery, ten times its target (a loss process the fit
    // misses).
    let path = PathEstimate::known(ms(100), 0.01, 1.0, Some(Bitrate::mbps(100)));
    let first = c.on_interval(at(0), &path, &VIDEO, None).expect("first");
    assert!(first.prediction.lost() <= 0.001);
    let mut switch = None;
    for i in 1..1200 {
        let m = Measured {
            loss_after_recovery: 0.01,
            messages: 25,
        };
        if let Some(s) = c.on_interval(at(i), &path, &VIDEO, Some(m)) {
            switch = Some((i, s));
            break;
        }
        if i > 20 {
            assert!(
                !c.meets(),
                "contradicted at {i}: correction {}",
                c.correction()
            );
        }
    }
    let (i, s) = switch.expect("a switch to something stronger");
    assert!(i < 100, "within seconds: {i}");
    assert_eq!(s.from, Some(first.to));
    let old = predict(&first.to, &qos, &path, &VIDEO);
    assert!(s.prediction.lost() < old.lost(), "{s:?} vs {old:?}");
    assert!(c.correction() > 1.0);
}

/// The closed loop's evidence is of the path it was gathered on: the same
/// contradicting losses as above, but the monitor's recent loss says the
/// path has moved (a tenth of the loss at the choice) while its estimate
/// still lags, so no stronger mechanism is taken on that evidence.
#[test]
fn a_moved_path_sets_aside_the_closed_loops_correction() {
    let cfg = ControllerConfig {
        window: Duration::ZERO,
        ..ControllerConfig::default()
    };
    let mut c = AdaptiveController::new(cfg, Policy::Model, video());
    let path = PathEstimate::known(ms(100), 0.01, 1.0, Some(Bitrate::mbps(100)));
    c.on_interval(at(0), &path, &VIDEO, None).expect("first");
    let moved = PathEstimate {
        recent_loss: Some(0.001),
        ..path
    };
    for i in 1..1200 {
        let m = Measured {
            loss_after_recovery: 0.01,
            messages: 25,
        };
        let s = c.on_interval(at(i), &moved, &VIDEO, Some(m));
        assert!(s.is_none(), "at {i}: {s:?}");
    }
    assert!(c.correction() > 1.0, "the evidence is kept, only set aside");
    assert!(c.meets());
}

#[test]
fn heuristic_controller_follows_the_heuristic_after_hold() {
    let qos = Qos::low_latency().max_loss(0.01);
    let mut c = AdaptiveController::new(ControllerConfig::default(), Policy::Heuristic, qos);
    let calm = PathEstimate::known(ms(50), 0.001, 1.0, None);
    let bad = PathEstimate::known(ms(50), 0.05, 1.0, None);
    c.on_interval(at(0), &calm, &STATE, None);
    assert_eq!(c.current(), Some(Mechanism::Plain));
    let mut when = None;
    for i in 1..200 {
        if c.on_interval(at(i), &bad, &STATE, None).is_some() {
            when = Some(i);
            break;
        }
    }
    // Seen at the next selection (1 s); a loss rate fifty times the one at
    // the first choice is a new path, so the rescue hold (2 s) applies.
    assert_eq!(when, Some(30));
    assert_eq!(c.current(), Some(Mechanism::Xor(XorLayout::row(3))));
}

fn all_mechanisms() -> Vec<Mechanism> {
    let mut v = vec![
        Mechanism::Plain,
        Mechanism::Afec { lo: 0.01, hi: 0.02 },
        Mechanism::Block {
            target: 0.001,
            max_delay: ms(50),
        },
        Mechanism::Reliable,
        Mechanism::Striped { streams: 4 },
        Mechanism::Blast,
    ];
    v.extend((2..=10).map(|l| Mechanism::Xor(XorLayout::row(l))));
    v.extend([
        Mechanism::Xor(XorLayout::matrix(4, 4)),
        Mechanism::Xor(XorLayout::matrix(10, 10)),
        Mechanism::Xor(XorLayout::column(10, 10)),
    ]);
    v
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn predictions_are_finite_and_in_range(
        loss in 0.0f64..0.6,
        burst in 1.0f64..20.0,
        rtt_ms in 1u64..400,
        rate in 0.1f64..5000.0,
        size in 1usize..9000,
        budget_ms in prop::option::of(1u64..500),
        mbps in prop::option::of(1u64..1000),
    ) {
        let path = PathEstimate::known(ms(rtt_ms), loss, burst, mbps.map(Bitrate::mbps));
        let mut qos = Qos::stream().max_residual_loss(0.001);
        qos.max_delay = budget_ms.map(ms);
        let t = Traffic::new(rate, size);
        for m in all_mechanisms() {
            let p = predict(&m, &qos, &path, &t);
            prop_assert!((0.0..=1.0).contains(&p.residual), "{m}: {p:?}");
            prop_assert!((0.0..=1.0).contains(&p.late), "{m}: {p:?}");
            prop_assert!(p.lost() <= 1.0);
            prop_assert!(p.overhead.is_finite() && p.overhead >= 0.0, "{m}: {p:?}");
            prop_assert!(p.throughput.is_none_or(|x| x >= 0.0 && !x.is_nan()));
            if qos.max_delay.is_none() {
                prop_assert_eq!(p.late, 0.0);
            }
        }
        for policy in [Policy::Heuristic, Policy::Model] {
            let s = select(policy, &qos, &path, &t, None);
            prop_assert_eq!(s.meets, meets(&qos, &s.mechanism, &s.prediction));
        }
    }

    #[test]
    fn more_loss_never_predicts_less_loss_for_a_fixed_code(
        loss in 0.0f64..0.5,
        more in 0.0f64..0.3,
        burst in 1.0f64..10.0,
        budget_ms in prop::option::of(1u64..300),
    ) {
        let a = PathEstimate::known(ms(80), loss, burst, None);
        let b = PathEstimate::known(ms(80), (loss + more).min(0.8), burst, None);
        let mut qos = Qos::stream().max_residual_loss(0.001);
        qos.max_delay = budget_ms.map(ms);
        let fixed = all_mechanisms()
            .into_iter()
            .filter(|m| !matches!(m.kind(), MechanismKind::Afec | MechanismKind::Block));
        for m in fixed {
            let (pa, pb) = (predict(&m, &qos, &a, &VIDEO), predict(&m, &qos, &b, &VIDEO));
            prop_assert!(pb.residual >= pa.residual - 1e-12, "{m}: {pa:?} then {pb:?}");
            prop_assert!(pb.lost() >= pa.lost() - 1e-12, "{m}: {pa:?} then {pb:?}");
        }
        // The adaptive codes aim at their targets instead: more loss buys
        // more redundancy.
        let afec = Mechanism::Afec { lo: 0.01, hi: 0.02 };
        let (pa, pb) = (predict(&afec, &qos, &a, &VIDEO), predict(&afec, &qos, &b, &VIDEO));
        prop_assert!(pb.overhead >= pa.overhead - 1e-9, "{pa:?} then {pb:?}");
    }
}

#[test]
fn without_the_stream_on_the_path_only_full_reliability_gets_tcp() {
    let off = Provision {
        stream_on_path: false,
        ..Provision::DEFAULT
    };
    let path = PathEstimate::UNKNOWN;
    for qos in [
        Qos::awareness(),
        Qos::low_latency().max_loss(0.01),
        Qos::stream(),
    ] {
        assert!(!candidates(&off, &qos, &path).contains(&Mechanism::Reliable));
        assert!(candidates(&Provision::DEFAULT, &qos, &path).contains(&Mechanism::Reliable));
    }
    assert!(candidates(&off, &Qos::reliable_ordered(), &path).contains(&Mechanism::Reliable));
}

#[test]
fn window_target_bounds_the_share_of_windows_over_the_target() {
    // 30 messages a window, a 6% top: one loss allowed. Two or more in at
    // most 5% of windows needs a mean of about 1.2%.
    let q = window_target(0.06, 30.0, 0.05);
    assert!((0.011..0.013).contains(&q), "{q}");
    let tail = |q: f64| 1.0 - (1.0 - q).powi(30) - 30.0 * q * (1.0 - q).powi(29);
    assert!((tail(q) - 0.05).abs() < 1e-6, "{}", tail(q));
    // 20 messages, a 0.1% target: none allowed, and the 5% risk allows a
    // mean of 0.26%, more than the target: the target stands.
    assert_eq!(window_target(0.001, 20.0, 0.05), 0.001);
    // 250 messages, 0.1%: none allowed; (1 - q)^250 >= 0.95.
    let q = window_target(0.001, 250.0, 0.05);
    assert!(((1.0 - q).powi(250) - 0.95).abs() < 1e-6, "{q}");
    // More risk allowed, or fewer messages: never a tighter mean.
    let mut last = 0.0;
    for risk in [0.01, 0.05, 0.2, 0.5] {
        let q = window_target(0.01, 1000.0, risk);
        assert!(q >= last && q <= 0.01, "{risk}: {q}");
        last = q;
    }
    // Degenerate inputs give the target back, or nothing.
    assert_eq!(window_target(0.0, 30.0, 0.05), 0.0);
    assert_eq!(window_target(0.01, 0.0, 0.05), 0.01);
    assert_eq!(window_target(f64::NAN, 30.0, 0.05), 0.0);
}

#[test]
fn upper_bound_raises_a_thin_estimate_and_leaves_a_known_path() {
    let known = PathEstimate::known(ms(20), 0.02, 2.0, None);
    assert_eq!(known.upper_bound(1.0), known);
    // 2000 packets at 0.1% loss in runs of 1: two runs.
    let thin = PathEstimate {
        samples: 2000.0,
        ..PathEstimate::known(ms(20), 0.001, 1.0, None)
    };
    let up = thin.upper_bound(1.0);
    let k = thin.loss_model.expect("a chain").p * 2000.0 * 0.999;
    let want = (k + k.sqrt()) / (2000.0 * 0.999);
    assert!((up.loss_model.expect("a chain").p - want).abs() < 1e-12);
    assert!(
        up.loss > thin.loss && up.loss < 2.0 * thin.loss,
        "{}",
        up.loss
    );
    // The burst length is kept; z = 0 is the fit itself.
    assert_eq!(up.loss_model.unwrap().r, thin.loss_model.unwrap().r);
    assert_eq!(thin.upper_bound(0.0), thin);
    // More evidence, a tighter bound.
    let thick = PathEstimate {
        samples: 200_000.0,
        ..thin
    };
    assert!(thick.upper_bound(1.0).loss < up.loss);
}

#[test]
fn fractional_spacing_and_gapped_losses_agree_with_the_whole_chain() {
    let m = TwoState::gilbert(0.02, 0.25);
    // A whole spacing is the chain's n-th power, fractional ones lie
    // between.
    for n in [1.0, 2.0, 5.0] {
        let a = every_nth(&m, n);
        let b = every_nth(&m, n + 0.5);
        assert!(b.p >= a.p && b.r >= a.r, "{n}");
    }
    assert_eq!(every_nth(&m, 1.0), m);
    // Gaps of one are consecutive packets.
    for k in 1..6u64 {
        let gaps = vec![1.0; k as usize - 1];
        assert!((all_lost_at(&m, &gaps) - run_prob(&m, k, true)).abs() < 1e-12);
    }
    // Far apart, two losses are independent.
    let far = all_lost_at(&m, &[1e6]);
    assert!((far - m.loss_rate().powi(2)).abs() < 1e-9, "{far}");
}

#[test]
fn a_sparse_channel_beside_a_busy_one_sees_bursts_less() {
    // 8% loss in bursts of 4: three packets a message alone on the path
    // lose together often; with ten others' packets between each, nearly
    // independently.
    let path = PathEstimate::known(ms(40), 0.08, 4.0, None);
    let qos = Qos::awareness().mer_band(0.05, 0.06);
    let alone = Traffic::new(30.0, 40);
    let beside = Traffic {
        others_pkt_rate: 400.0,
        ..alone
    };
    let row = Mechanism::Xor(XorLayout::row(3));
    let a = predict(&row, &qos, &path, &alone);
    let b = predict(&row, &qos, &path, &beside);
    assert!(b.residual < 0.6 * a.residual, "{a:?} vs {b:?}");
    // Independent losses on three sources and a parity.
    let p: f64 = 0.08;
    let indep = p * (1.0 - (1.0 - p).powi(3));
    assert!(
        (b.residual - indep).abs() < 0.25 * indep,
        "{} vs {indep}",
        b.residual
    );
    // Plain loses the path's rate either way.
    assert_eq!(
        predict(&Mechanism::Plain, &qos, &path, &beside).residual,
        predict(&Mechanism::Plain, &qos, &path, &alone).residual
    );
}

#[test]
fn reliable_behind_a_bulk_transfer_is_late_for_a_budgeted_channel() {
    let path = PathEstimate::known(ms(40), 0.001, 1.0, None);
    let qos = Qos::low_latency().max_loss(0.001).max_delay(ms(50));
    let shared = Traffic {
        stream_shared_with_bulk: true,
        ..STATE
    };
    let p = predict(&Mechanism::Reliable, &qos, &path, &shared);
    assert_eq!(p.lost(), 1.0, "{p:?}");
    assert!(predict(&Mechanism::Reliable, &qos, &path, &STATE).lost() < 0.01);
    // Without a budget nothing is late, shared or not.
    let p = predict(
        &Mechanism::Reliable,
        &Qos::reliable_ordered(),
        &path,
        &shared,
    );
    assert_eq!(p.lost(), 0.0);
}

/// The window check counts clumps: an unrebuilt XOR row loses two
/// messages at once. Simulated: rows of ten and their parity on 2%
/// independent loss, 30 messages a window, one loss allowed (a 6% band
/// top). The compound-Poisson check is close to the simulation; the same
/// mean as independent losses (clusters of one) would read several times
/// fewer failing windows, which is what the selector believed before.
#[test]
fn window_check_counts_the_clumps_an_xor_row_loses_in() {
    let path = PathEstimate::known(ms(20), 0.02, 1.0, Some(Bitrate::mbps(100)));
    let traffic = Traffic::new(30.0, 40);
    let qos = Qos::awareness().mer_band(0.05, 0.06);
    let row = Mechanism::Xor(XorLayout::row(10));
    let p = predict(&row, &qos, &path, &traffic);
    assert!(p.cluster > 1.5 && p.cluster < 2.2, "{p:?}");
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let windows = 200_000;
    let mut over = 0;
    for _ in 0..windows {
        let mut lost = 0;
        for _ in 0..3 {
            let sources = (0..10).filter(|_| rng.random::<f64>() < 0.02).count();
            let parity = usize::from(rng.random::<f64>() < 0.02);
            if sources + parity >= 2 {
                lost += sources;
            }
        }
        over += usize::from(lost > 1);
    }
    let simulated = over as f64 / windows as f64;
    let predicted = window_excess(p.lost(), p.cluster, 30.0, 1);
    let independent = window_excess(p.lost(), 1.0, 30.0, 1);
    assert!(
        predicted > simulated / 2.0 && predicted < simulated * 2.0,
        "predicted {predicted}, simulated {simulated}"
    );
    assert!(
        independent < simulated / 3.0,
        "{independent} vs {simulated}"
    );
    // So at a 5% risk the row does not meet the window, while its mean
    // (0.5%) is far under the band's 6%.
    let w = Some(Window {
        msgs: 30.0,
        risk: 0.05,
    });
    assert!(meets(&qos, &row, &p));
    assert_eq!(window_meets(&qos, &row, &p, w), predicted <= 0.05);
}

/// The compound-Poisson tail with clusters of one is the Poisson tail, and
/// it grows with the mean and with the clump size.
#[test]
fn window_excess_is_poisson_for_single_losses_and_grows_with_clumps() {
    let poisson_tail = |lambda: f64, allowed: u32| {
        let mut term = (-lambda).exp();
        let mut cdf = term;
        for k in 1..=allowed {
            term *= lambda / f64::from(k);
            cdf += term;
        }
        1.0 - cdf
    };
    for (lost, n, allowed) in [(0.01, 30.0, 1), (0.02, 100.0, 3), (0.001, 250.0, 0)] {
        let got = window_excess(lost, 1.0, n, allowed);
        let want = poisson_tail(lost * n, allowed as u32);
        assert!((got - want).abs() < 1e-12, "{got} vs {want}");
    }
    let mut last = 0.0;
    for c in [1.0, 1.25, 1.5, 1.75, 2.0] {
        let e = window_excess(0.01, c, 30.0, 1);
        assert!(e >= last, "cluster {c}: {e} < {last}");
        last = e;
    }
    // From two on, every event fails the window: 1 − e^(−λ).
    for c in [2.0, 3.0, 4.0] {
        let e = window_excess(0.01, c, 30.0, 1);
        assert!((e - (1.0 - (-0.3f64 / c).exp())).abs() < 1e-12, "{c}: {e}");
    }
    // Nothing allowed: only the events count, so clumps help.
    assert!(window_excess(0.01, 4.0, 30.0, 0) < window_excess(0.01, 1.0, 30.0, 0));
    assert_eq!(window_excess(0.0, 2.0, 30.0, 1), 0.0);
    assert_eq!(window_excess(f64::NAN, f64::NAN, 30.0, 1), 0.0);
}
