//! Tests for the loss models, including the statistical tests that hold each
//! running process to its analytic figures.
//!
//! # Tolerances
//!
//! Each statistical check runs [`PACKETS`] packets from a fixed seed and
//! accepts a deviation of at most [`SIGMAS`] standard errors, with the
//! standard error derived for that estimator below. With about a hundred
//! checks at 5 sigma, a correct implementation fails one by chance with
//! probability about 100 × 5.7e-7 ≈ 6e-5 per seed; an error of a few
//! percent in a model's mathematics shows up as tens of sigma.
//!
//! - **Loss rate** of a two-state Markov-modulated process (Bernoulli,
//!   Gilbert, Gilbert-Elliott, bit error). Write `L_n = h(S_n) + e_n` where
//!   `e_n` is independent noise given the state. Then `Var(Σ L_n) ≈ N (E[h
//!   (1 - h)] + Var(h(S)) (1 + λ) / (1 - λ))`, with `λ = 1 - p - r` the
//!   chain's second eigenvalue (the autocorrelation of `h(S_n)` at lag `k`
//!   is `λ^k`), and `Var(h(S)) = π_G π_B (h_B - h_G)^2`.
//! - **Loss rate** of the Dyck burst model, a renewal-reward process: a
//!   cycle is one delivered packet (`X = 1, Y = 0`, probability `1 - q`) or
//!   one burst (`X = Y = B`, probability `q`). With `ρ` the loss rate, the
//!   delta method gives `Var(ΣY / ΣX) ≈ Var(Y - ρX) / (N E[X])`, where
//!   `Var(Y - ρX) = (1 - q) ρ^2 + q (1 - ρ)^2 E[B^2]`.
//! - **Mean burst length**: the mean of the observed runs, standard error
//!   `sd(R) / sqrt(runs)` with `sd(R)` from the analytic run-length
//!   distribution. Runs are independent for Bernoulli, Gilbert and the Dyck
//!   model (a run ends on a delivered packet, which is a renewal point); for
//!   Gilbert-Elliott the state at the end of one run slightly correlates
//!   with the next, which the 5-sigma margin absorbs.
//! - **Run-length distribution**: the count of runs of each length `k` is
//!   binomial, standard error `sqrt(runs p_k (1 - p_k))`; bins with an
//!   expected count below [`MIN_EXPECTED`] are pooled into one tail bin.

use std::collections::BTreeMap;

use proptest::prelude::*;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::*;
use crate::stats::LossStats;

/// Packets per statistical test.
const PACKETS: u64 = 1_000_000;
/// Accepted deviation in standard errors.
const SIGMAS: f64 = 5.0;
/// Smallest expected count for a run-length bin of its own.
const MIN_EXPECTED: f64 = 20.0;
/// Run lengths considered when computing moments of the analytic
/// distribution (the mass beyond is negligible for every model tested).
const PMF_LEN: u32 = 20_000;

/// Result of running a process over [`PACKETS`] packets.
struct Run {
    stats: LossStats,
    bit_errors: u64,
}

fn run(model: &LossModel, len: usize, seed: u64) -> Run {
    let mut process = model.build().expect("valid model");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut stats = LossStats::new();
    let mut bit_errors = 0;
    for _ in 0..PACKETS {
        let fate = process.on_packet(Instant::ZERO, len, &mut rng);
        if let PacketFate::Corrupted(errors) = &fate {
            bit_errors += errors.count() as u64;
        }
        stats.record(fate.is_loss());
    }
    stats.finish();
    Run { stats, bit_errors }
}

/// Standard error of the empirical loss rate over `n` packets (module docs).
fn loss_rate_sigma(model: &LossModel, len: usize, n: u64) -> f64 {
    let n = n as f64;
    if let LossModel::Burst {
        start,
        min_len,
        max_len,
    } = *model
    {
        let q = start.get();
        let rho = model.mean_loss_rate(len).expect("analytic");
        let (lo, hi) = (f64::from(min_len), f64::from(max_len));
        let mean_b = (lo + hi) / 2.0;
        let count = hi - lo + 1.0;
        let mean_b2 = (lo as u32..=hi as u32)
            .map(|b| f64::from(b).powi(2))
            .sum::<f64>()
            / count;
        let mean_x = (1.0 - q) + q * mean_b;
        let var = (1.0 - q) * rho * rho + q * (1.0 - rho).powi(2) * mean_b2;
        return (var / (n * mean_x)).sqrt();
    }
    let m = model.markov(len).expect("Markov model");
    let pi = m.stationary();
    let noise = pi[0] * m.h_good * (1.0 - m.h_good) + pi[1] * m.h_bad * (1.0 - m.h_bad);
    let modulation = if m.h_good == m.h_bad {
        0.0
    } else {
        let lambda = 1.0 - m.p - m.r;
        pi[0] * pi[1] * (m.h_bad - m.h_good).powi(2) * (1.0 + lambda) / (1.0 - lambda)
    };
    ((noise + modulation) / n).sqrt()
}

/// Holds one model's empirical loss rate, mean burst length and run-length
/// distribution to the analytic ones. Prints the figures (`--nocapture`).
fn check_against_analytics(name: &str, model: &LossModel, len: usize, seed: u64) -> Run {
    let result = run(model, len, seed);
    let stats = &result.stats;

    let rate = model.mean_loss_rate(len).expect("analytic loss rate");
    let rate_sigma = loss_rate_sigma(model, len, PACKETS);
    let rate_z = (stats.loss_rate() - rate) / rate_sigma;

    let pmf = model.burst_len_pmf(len, PMF_LEN).expect("analytic pmf");
    let covered: f64 = pmf.iter().sum();
    assert!(covered > 1.0 - 1e-9, "{name}: pmf truncated ({covered})");
    let mean = model.mean_burst_len(len).expect("analytic mean burst");
    let pmf_mean: f64 = pmf.iter().zip(1..).map(|(p, k)| p * f64::from(k)).sum();
    assert!(
        (pmf_mean - mean).abs() < 1e-6 * mean,
        "{name}: pmf mean {pmf_mean} disagrees with closed form {mean}"
    );
    let var: f64 = pmf
        .iter()
        .zip(1..)
        .map(|(p, k)| p * (f64::from(k) - mean).powi(2))
        .sum();
    let runs = stats.bursts() as f64;
    let burst_sigma = (var / runs).sqrt();
    let burst_z = (stats.mean_burst_len() - mean) / burst_sigma;

    let (bins, worst_bin) = compare_histogram(name, stats.burst_histogram(), &pmf, runs);

    println!(
        "{name:<28} loss {:.5} vs {rate:.5} (z {rate_z:+.2}) | mean burst {:.4} vs {mean:.4} \
         (z {burst_z:+.2}, {} runs) | {bins} run-length bins, worst |z| {worst_bin:.2}",
        stats.loss_rate(),
        stats.mean_burst_len(),
        stats.bursts(),
    );
    assert!(
        rate_z.abs() <= SIGMAS,
        "{name}: loss rate {} vs analytic {rate} is {rate_z:.2} sigma off (sigma {rate_sigma})",
        stats.loss_rate()
    );
    assert!(
        burst_z.abs() <= SIGMAS,
        "{name}: mean burst {} vs analytic {mean} is {burst_z:.2} sigma off",
        stats.mean_burst_len()
    );
    result
}

/// Compares observed run counts per length with `runs × pmf`, pooling bins
/// with small expected counts into a tail. Returns (bins, worst |z|).
fn compare_histogram(
    name: &str,
    histogram: &BTreeMap<u32, u64>,
    pmf: &[f64],
    runs: f64,
) -> (usize, f64) {
    let mut worst: f64 = 0.0;
    let mut bins = 0;
    let mut check = |label: String, observed: f64, p: f64| {
        let expected = runs * p;
        let sigma = (runs * p * (1.0 - p)).sqrt().max(1e-9);
        let z = (observed - expected) / sigma;
        worst = worst.max(z.abs());
        bins += 1;
        assert!(
            z.abs() <= SIGMAS,
            "{name}: runs of length {label}: observed {observed}, expected {expected:.1} \
             ({z:.2} sigma)"
        );
    };
    let mut tail_from = None;
    for (k, &p) in (1u32..).zip(pmf) {
        if runs * p < MIN_EXPECTED {
            // Only pool once the distribution's bulk is past (the Dyck pmf
            // is zero below min_len, so do not stop at leading zeros).
            let seen: f64 = pmf[..k as usize].iter().sum();
            if seen > 0.5 {
                tail_from = Some(k);
                break;
            }
        }
        let observed = histogram.get(&k).copied().unwrap_or(0) as f64;
        check(k.to_string(), observed, p);
    }
    if let Some(k) = tail_from {
        let p: f64 = pmf[k as usize - 1..].iter().sum();
        let observed: u64 = histogram.range(k..).map(|(_, c)| c).sum();
        if runs * p >= MIN_EXPECTED {
            check(format!(">= {k}"), observed as f64, p);
        }
    }
    (bins, worst)
}

fn ber(p: f64, r: f64, good: f64, bad: f64) -> LossModel {
    LossModel::BitError {
        p: Probability::new(p).expect("probability"),
        r: Probability::new(r).expect("probability"),
        good,
        bad,
    }
}

#[test]
fn bernoulli_matches_its_analytics() {
    check_against_analytics("bernoulli 10%", &LossModel::dyck_random(0.1), 100, 1);
    check_against_analytics("bernoulli 20%", &LossModel::dyck_random(0.2), 100, 2);
}

#[test]
fn dyck_burst_model_matches_its_analytics() {
    for (seed, (start, max_len)) in (10..).zip([(0.04, 5), (0.08, 5), (0.02, 10), (0.04, 10)]) {
        let model = LossModel::dyck_burst(start, max_len);
        check_against_analytics(
            &format!("dyck burst 1-{max_len} @ {start}"),
            &model,
            100,
            seed,
        );
    }
    let fixed = "burst:start=0.05,len=3..3".parse().expect("valid");
    check_against_analytics("burst len 3 @ 0.05", &fixed, 100, 20);
}

#[test]
fn dyck_burst_lengths_are_uniform_per_burst() {
    // A burst starts on a lost packet that was not in a burst; it leaves
    // `remaining` = length - 1. Each length in 1..=5 has probability 1/5.
    let model = LossModel::dyck_burst(0.08, 5);
    let mut process = model.build().expect("valid");
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let remaining = |p: &LossProcess| match p.state {
        State::Burst { remaining, .. } => remaining,
        _ => unreachable!("burst model"),
    };
    let mut counts = [0u64; 5];
    for _ in 0..PACKETS {
        let before = remaining(&process);
        if process.on_packet(Instant::ZERO, 100, &mut rng).is_loss() && before == 0 {
            counts[remaining(&process) as usize] += 1;
        }
    }
    let total: u64 = counts.iter().sum();
    let p = 0.2;
    for (len, &c) in (1..).zip(&counts) {
        let z = (c as f64 - total as f64 * p) / (total as f64 * p * (1.0 - p)).sqrt();
        assert!(
            z.abs() <= SIGMAS,
            "burst length {len}: {c} of {total} (z {z:.2})"
        );
    }
}

#[test]
fn dyck_presets_match_the_papers_overall_loss() {
    //= dyck-gutwin §5 (EXPERIMENTS, "Loss patterns")
    //# 1-5 messages being lost with a 4% chance of starting on any packet
    //# (10% overall loss), 1-5 messages being lost with an 8% chance (20%
    //# overall), 1-10 messages being lost with a 2% chance (10% overall),
    //# and 1-10 messages being lost with a 4% chance (20% overall).
    for (start, max_len, paper) in [
        (0.04, 5, 0.1),
        (0.08, 5, 0.2),
        (0.02, 10, 0.1),
        (0.04, 10, 0.2),
    ] {
        let rate = LossModel::dyck_burst(start, max_len)
            .mean_loss_rate(100)
            .expect("analytic");
        // The paper rounds to the nearest 10%.
        assert!(
            (rate - paper).abs() < 0.015,
            "1-{max_len} at {start}: {rate} vs the paper's {paper}"
        );
    }
}

#[test]
fn gilbert_matches_its_analytics() {
    let low = check_against_analytics(
        "gilbert miyoshi low",
        &LossModel::miyoshi_low_ber(),
        100,
        30,
    );
    // Runs are exactly the Bad sojourns: geometric with parameter r.
    let r: f64 = 0.05;
    let pmf = LossModel::miyoshi_low_ber()
        .burst_len_pmf(100, 50)
        .expect("analytic");
    for (k, p) in (1..).zip(&pmf) {
        let geometric = (1.0 - r).powi(k - 1) * r;
        assert!((p - geometric).abs() < 1e-12, "P({k}) = {p} vs {geometric}");
    }
    assert!(low.stats.bursts() > 4_000);
    check_against_analytics(
        "gilbert miyoshi high",
        &LossModel::miyoshi_high_ber(),
        100,
        31,
    );
    check_against_analytics(
        "gilbert p=0.01 r=0.3",
        &LossModel::gilbert(0.01, 0.3),
        100,
        32,
    );
}

#[test]
fn gilbert_elliott_matches_its_analytics() {
    check_against_analytics("ge cellular", &LossModel::cellular(), 100, 40);
    let model = LossModel::gilbert_elliott(0.02, 0.2, 0.01, 0.5);
    check_against_analytics("ge p=.02 r=.2 good=.01 bad=.5", &model, 100, 41);
}

#[test]
fn bit_error_model_matches_its_analytics() {
    // Miyoshi et al. §5: 800-bit packets.
    let len = 100;
    for (seed, name, model) in [
        (50, "ber 1e-4", ber(0.0, 0.0, 1e-4, 1e-4)),
        (51, "ber two-state", ber(0.006, 0.05, 1e-6, 1e-3)),
    ] {
        let result = check_against_analytics(name, &model, len, seed);
        // Mean bit errors per packet: bits × (π_G b_G + π_B b_B). Standard
        // error as for the loss rate, with per-packet count variance
        // E[n b (1 - b)] and modulation Var(n b_S) (1 + λ) / (1 - λ).
        let LossModel::BitError { p, r, good, bad } = model else {
            unreachable!("bit error model")
        };
        let bits = (8 * len) as f64;
        let m = Markov2 {
            p: p.get(),
            r: r.get(),
            h_good: good,
            h_bad: bad,
        };
        let pi = m.stationary();
        let expected = bits * (pi[0] * good + pi[1] * bad);
        let noise = bits * (pi[0] * good * (1.0 - good) + pi[1] * bad * (1.0 - bad));
        let modulation = if good == bad {
            0.0
        } else {
            let lambda = 1.0 - m.p - m.r;
            pi[0] * pi[1] * (bits * (bad - good)).powi(2) * (1.0 + lambda) / (1.0 - lambda)
        };
        let sigma = ((noise + modulation) / PACKETS as f64).sqrt();
        let observed = result.bit_errors as f64 / PACKETS as f64;
        let z = (observed - expected) / sigma;
        println!("{name:<28} bit errors/packet {observed:.6} vs {expected:.6} (z {z:+.2})");
        assert!(
            z.abs() <= SIGMAS,
            "{name}: {observed} bit errors per packet vs {expected}"
        );
    }
}

#[test]
fn bit_error_positions_are_sorted_in_range_and_uniform() {
    let len = 200;
    let bits = 8 * len as u32;
    let mut process = ber(0.0, 0.0, 1e-3, 1e-3).build().expect("valid");
    let mut rng = ChaCha8Rng::seed_from_u64(60);
    let (mut sum, mut count) = (0.0, 0u64);
    for _ in 0..100_000 {
        if let PacketFate::Corrupted(errors) = process.on_packet(Instant::ZERO, len, &mut rng) {
            assert!(errors.count() >= 1);
            assert!(errors.positions().windows(2).all(|w| w[0] < w[1]));
            assert!(errors.positions().iter().all(|&p| p < bits));
            sum += errors
                .positions()
                .iter()
                .map(|&p| f64::from(p))
                .sum::<f64>();
            count += errors.count() as u64;
        }
    }
    // Each error's position is uniform on 0..bits: mean (bits - 1) / 2,
    // variance (bits^2 - 1) / 12.
    let mean = sum / count as f64;
    let expected = f64::from(bits - 1) / 2.0;
    let sigma = ((f64::from(bits).powi(2) - 1.0) / 12.0 / count as f64).sqrt();
    assert!(
        ((mean - expected) / sigma).abs() <= SIGMAS,
        "mean position {mean} vs {expected}"
    );
}

#[test]
fn bit_error_edge_cases() {
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    let mut all = ber(0.0, 0.0, 1.0, 1.0).build().expect("valid");
    match all.on_packet(Instant::ZERO, 2, &mut rng) {
        PacketFate::Corrupted(e) => assert_eq!(e.positions(), (0..16).collect::<Vec<_>>()),
        other => panic!("expected every bit flipped, got {other:?}"),
    }
    // An empty packet has no bits to flip.
    assert_eq!(
        all.on_packet(Instant::ZERO, 0, &mut rng),
        PacketFate::Delivered
    );
    let mut clean = ber(0.0, 0.0, 0.0, 0.0).build().expect("valid");
    assert_eq!(
        clean.on_packet(Instant::ZERO, 1500, &mut rng),
        PacketFate::Delivered
    );

    let errors = BitErrors {
        positions: vec![0, 9, 15, 100],
    };
    let mut packet = [0u8; 2];
    errors.apply(&mut packet);
    assert_eq!(packet, [0x80, 0x41]);
}

#[test]
fn merged_bit_errors_compose_like_applying_both() {
    let first = BitErrors {
        positions: vec![1, 5, 9, 30],
    };
    let second = BitErrors {
        positions: vec![0, 5, 31, 40],
    };
    let merged = first.merged(&second);
    assert_eq!(merged.positions(), [0, 1, 9, 30, 31, 40]);
    let (mut both, mut once) = ([0u8; 6], [0u8; 6]);
    first.apply(&mut both);
    second.apply(&mut both);
    merged.apply(&mut once);
    assert_eq!(both, once);
    assert_eq!(first.merged(&first).count(), 0);
}

#[test]
fn same_seed_gives_the_same_fates() {
    let models = [
        "bernoulli:0.1",
        "burst:start=0.04,len=1..5",
        "gilbert:p=0.006,r=0.05",
        "ge:p=0.01,r=0.1,good=0.01,bad=0.6",
        "ber:p=0.01,r=0.1,good=1e-5,bad=1e-3",
    ];
    for text in models {
        let model: LossModel = text.parse().expect("valid");
        let fates = |seed| {
            let mut process = model.build().expect("valid");
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            (0..10_000)
                .map(|_| process.on_packet(Instant::ZERO, 200, &mut rng))
                .collect::<Vec<_>>()
        };
        assert_eq!(fates(7), fates(7), "{text}");
        assert_ne!(fates(7), fates(8), "{text}");
    }
}

#[test]
fn trace_replays_and_loops() {
    let trace = LossTrace::parse("t.txt", "# header\n0\n1 # lost\n\n 1 0 \n00 1\n").expect("valid");
    assert_eq!(
        trace.pattern(),
        [false, true, true, false, false, false, true]
    );
    let mut process = LossModel::Trace(trace).build().expect("no I/O, no error");
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    let lost: Vec<bool> = (0..14)
        .map(|_| process.on_packet(Instant::ZERO, 10, &mut rng).is_loss())
        .collect();
    assert_eq!(lost[..7], lost[7..]);
    assert_eq!(lost[..3], [false, true, true]);
}

#[test]
fn trace_errors_name_the_file_and_line() {
    let err = parse_trace(Path::new("losses.txt"), "0\n1\n0 x 1\n").expect_err("bad char");
    let msg = err.to_string();
    assert!(
        msg.contains("losses.txt") && msg.contains("line 3") && msg.contains("'x'"),
        "{msg}"
    );
    let err = parse_trace(Path::new("e.txt"), "# nothing\n\n").expect_err("empty");
    assert!(matches!(err, LossError::TraceEmpty { .. }), "{err}");
    let msg = "trace:/nonexistent/groupwire/trace.txt"
        .parse::<LossModel>()
        .expect_err("missing file")
        .to_string();
    assert!(msg.contains("/nonexistent/groupwire/trace.txt"), "{msg}");
    // A device or a directory is refused before anything is read.
    for path in ["/dev/zero", "/"] {
        let err = LossTrace::read(path).expect_err("not a regular file");
        assert!(err.to_string().contains("regular file"), "{err}");
    }
}

#[test]
fn trace_file_loads_when_parsed() {
    let dir = std::env::temp_dir().join(format!("groupwire-link-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("trace.txt");
    std::fs::write(&path, "0010\n").expect("write trace");
    let text = format!("trace:{}", path.display());
    let model: LossModel = text.parse().expect("valid");
    assert_eq!(model.to_string(), text, "prints back to its text form");
    assert_eq!(text.parse::<LossModel>().expect("again"), model);
    let mut process = model.build().expect("no I/O in build");
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    let lost: Vec<bool> = (0..8)
        .map(|_| process.on_packet(Instant::ZERO, 10, &mut rng).is_loss())
        .collect();
    assert_eq!(lost, [false, false, true, false, false, false, true, false]);
    assert_eq!(model.mean_loss_rate(10), None);
    std::fs::remove_dir_all(&dir).expect("clean up");
}

#[test]
fn parses_the_documented_forms() {
    let p = |s: &str| Probability::new(s.parse().expect("number")).expect("probability");
    let cases = [
        ("none", LossModel::None),
        ("bernoulli:0.1", LossModel::Bernoulli { p: p("0.1") }),
        ("bernoulli:10%", LossModel::Bernoulli { p: p("0.1") }),
        (
            " burst: start=0.04, len=1..5 ",
            LossModel::dyck_burst(0.04, 5),
        ),
        ("burst:len=1-10,start=2%", LossModel::dyck_burst(0.02, 10)),
        ("gilbert:p=0.006,r=0.05", LossModel::gilbert(0.006, 0.05)),
        (
            "ge:p=0.006,r=0.05,good=0.001,bad=0.83",
            LossModel::cellular(),
        ),
        ("ber:1e-5", ber(0.0, 0.0, 1e-5, 1e-5)),
        (
            "ber:p=0.006,r=0.05,good=1e-6,bad=1e-3",
            ber(0.006, 0.05, 1e-6, 1e-3),
        ),
        ("ber:miyoshi-lower", LossModel::miyoshi_lower()),
        ("ber:Miyoshi-Higher", LossModel::miyoshi_higher()),
        (
            &LossModel::miyoshi_higher().to_string(),
            LossModel::miyoshi_higher(),
        ),
    ];
    for (text, model) in cases {
        assert_eq!(text.parse::<LossModel>().expect(text), model, "{text}");
    }
    assert_eq!(
        LossModel::dyck_burst(0.04, 5).to_string(),
        "burst:start=0.04,len=1..5"
    );
    assert_eq!(ber(0.0, 0.0, 1e-5, 1e-5).to_string(), "ber:0.00001");
}

#[test]
fn rejects_bad_models_with_helpful_messages() {
    let cases = [
        ("bernoulli:1.5", "out of range"),
        ("bernoulli", "needs parameters"),
        ("wifi:0.1", "unknown loss model"),
        ("burst:start=0.1,len=0..5", "at least 1 packet"),
        ("burst:start=0.1,len=5..1", "is empty"),
        ("burst:start=0.1", "missing key \"len\""),
        ("gilbert:p=0.1,r=0", "never left"),
        ("gilbert:p=0.1,r=0.2,r=0.3", "given twice"),
        ("gilbert:p=0.1,q=0.2", "unknown key \"q\""),
        ("ber:2", "out of range"),
        ("trace:", "needs a file name"),
    ];
    for (text, needle) in cases {
        let msg = text.parse::<LossModel>().expect_err(text).to_string();
        assert!(msg.contains(needle), "{text}: {msg}");
        assert!(msg.starts_with(&format!("loss model {text:?}")), "{msg}");
    }
    assert_eq!(
        "bernoulli:1.5"
            .parse::<LossModel>()
            .expect_err("range")
            .to_string(),
        "loss model \"bernoulli:1.5\": loss probability: probability \"1.5\" is out of range: \
         a probability must be between 0 and 1 (or 0% and 100%)"
    );
    // Built directly, invalid models are caught by `build`.
    let absorbing = LossModel::gilbert(0.1, 0.0);
    assert!(matches!(absorbing.build(), Err(LossError::Invalid { .. })));
    assert_eq!(absorbing.mean_loss_rate(100), None);
    let bad_ber = ber(0.0, 0.0, f64::NAN, 0.1);
    assert!(bad_ber.build().is_err());
}

/// Runs `model` for `secs` seconds at `pps` packets per second from time
/// zero: the loss record per packet.
fn run_timed(model: &LossModel, secs: u64, pps: u64, seed: u64) -> Vec<bool> {
    let mut process = model.build().expect("valid model");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let gap = 1_000_000_000 / pps;
    (0..secs * pps)
        .map(|i| {
            process
                .on_packet(Instant::from_nanos(i * gap), 100, &mut rng)
                .is_loss()
        })
        .collect()
}

fn loss_rate(fates: &[bool]) -> f64 {
    fates.iter().filter(|l| **l).count() as f64 / fates.len() as f64
}

#[test]
fn the_family_reads_back_and_has_the_losses_and_bursts_it_names() {
    let family = LossModel::family();
    assert_eq!(family.len(), 11);
    for m in &family {
        let text = m.to_string();
        assert_eq!(&text.parse::<LossModel>().expect("reads back"), m, "{text}");
        m.build().expect("every member builds");
    }
    // The Gilbert members: 10% in bursts of 2, 4 and 10, then 20% in 4.
    let gilberts: Vec<(f64, f64)> = family
        .iter()
        .filter(|m| matches!(m, LossModel::Gilbert { .. }))
        .map(|m| {
            (
                m.mean_loss_rate(100).unwrap(),
                m.mean_burst_len(100).unwrap(),
            )
        })
        .collect();
    let want = [(0.1, 2.0), (0.1, 4.0), (0.1, 10.0), (0.2, 4.0)];
    assert_eq!(gilberts.len(), want.len());
    for ((loss, run), (l, r)) in gilberts.iter().zip(want) {
        assert!(
            (loss - l).abs() < 1e-4 && (run - r).abs() < 1e-9,
            "{loss} {run}"
        );
    }
}

#[test]
fn a_schedule_follows_its_segments_and_its_long_run_figures() {
    let model = LossModel::alternating();
    assert_eq!(model.to_string(), "schedule:alternating");
    // 20 periods of 2 minutes at 1000 packets/s: 2.4 million packets.
    let fates = run_timed(&model, 2400, 1000, 7);
    // Each minute behaves as its own model: 1% random, then 11.1% in bursts.
    let light = loss_rate(&fates[..60_000]);
    let heavy = loss_rate(&fates[60_000..120_000]);
    assert!((light - 0.01).abs() < 0.002, "{light}");
    assert!((heavy - 0.025 / 0.225).abs() < 0.015, "{heavy}");
    // The whole run against the time-weighted analytic figures.
    let mut stats = LossStats::new();
    for lost in &fates {
        stats.record(*lost);
    }
    stats.finish();
    let rate = model.mean_loss_rate(100).expect("analytic");
    assert!((rate - (0.01 + 0.025 / 0.225) / 2.0).abs() < 1e-12);
    assert!(
        (stats.loss_rate() - rate).abs() < 0.03 * rate,
        "{} vs {rate}",
        stats.loss_rate()
    );
    let burst = model.mean_burst_len(100).expect("analytic");
    // Runs: 1% Bernoulli gives runs of 1/0.99; the Gilbert part runs of 5,
    // weighted by how many runs each starts.
    let runs = 0.01 / (1.0 / 0.99) + (0.025 / 0.225) / 5.0;
    assert!(
        (burst - (0.01 + 0.025 / 0.225) / runs).abs() < 1e-9,
        "{burst}"
    );
    assert!((stats.mean_burst_len() - burst).abs() < 0.03 * burst);
    let pmf = model.burst_len_pmf(100, 40).expect("analytic");
    let single =
        stats.burst_histogram().get(&1).copied().unwrap_or(0) as f64 / stats.bursts() as f64;
    assert!((single - pmf[0]).abs() < 0.02, "{single} vs {}", pmf[0]);
}

#[test]
fn a_ramp_moves_the_loss_rate_and_a_finished_schedule_holds_its_end() {
    let model: LossModel = "schedule:10s none -> bernoulli:20%".parse().expect("valid");
    let fates = run_timed(&model, 20, 10_000, 3);
    let first = loss_rate(&fates[..10_000]);
    let last = loss_rate(&fates[90_000..100_000]);
    let after = loss_rate(&fates[100_000..]);
    assert!(first < 0.02, "{first}");
    assert!((last - 0.19).abs() < 0.02, "{last}");
    assert!((after - 0.20).abs() < 0.01, "{after}");
    // Played once: the long run is the final model.
    assert_eq!(model.mean_loss_rate(100), Some(0.2));
}

#[test]
fn a_ramp_keeps_the_chain_state_but_a_new_segment_starts_afresh() {
    // Bad is absorbing-ish (r tiny) and entered at once (p = 1): along a
    // ramp the chain stays Bad when the parameters are retuned every
    // RAMP_STEP, so every packet is lost.
    let ramp: LossModel = "schedule:1s gilbert:p=1,r=0.000001 -> gilbert:p=0.5,r=0.000001"
        .parse()
        .expect("valid");
    assert!(run_timed(&ramp, 1, 10_000, 1).iter().all(|l| *l));
    // Two segments: the second starts in Good with p = 0, so nothing is lost.
    let two: LossModel = "schedule:1s gilbert:p=1,r=0.000001; 1s gilbert:p=0,r=0.5"
        .parse()
        .expect("valid");
    let fates = run_timed(&two, 2, 1000, 1);
    assert!(fates[..1000].iter().all(|l| *l));
    assert!(fates[1000..].iter().all(|l| !*l));
}

#[test]
fn schedules_parse_print_and_reject_what_they_cannot_run() {
    assert_eq!(LossModel::fading().to_string(), "schedule:fading");
    assert_eq!(
        "schedule:Fading".parse::<LossModel>().expect("preset"),
        LossModel::fading()
    );
    let fading = LossModel::fading().mean_loss_rate(100).expect("analytic");
    assert!((0.03..0.06).contains(&fading), "{fading}");
    let text =
        "schedule:1.5s bernoulli:0.01; 2s gilbert:p=0.1,r=0.5 -> gilbert:p=0.2,r=0.4; repeat";
    let model: LossModel = text.parse().expect("valid");
    assert_eq!(model.to_string(), text);
    for (bad, needle) in [
        (
            "schedule:1s bernoulli:1% -> gilbert:p=0.1,r=0.5",
            "same kind",
        ),
        ("schedule:1s wifi:1", "unknown loss model"),
        ("schedule:bernoulli:1%", "needs a duration"),
        ("schedule:", "at least one segment"),
        ("schedule:1s gilbert:p=0.1,r=0", "never left"),
    ] {
        let msg = bad.parse::<LossModel>().expect_err(bad).to_string();
        assert!(msg.contains(needle), "{bad}: {msg}");
    }
    // Nested schedules cannot be written in the text form (the `;` ends a
    // segment), and built directly they are rejected.
    let inner = LossModel::alternating();
    let nested = LossModel::Schedule(
        Schedule::new(
            vec![crate::Segment {
                duration: std::time::Duration::from_secs(1),
                from: inner,
                to: None,
            }],
            false,
        )
        .expect("segments are fine on their own"),
    );
    assert!(nested.build().is_err());
    assert_eq!(nested.mean_loss_rate(100), None);
}

#[test]
fn serde_uses_the_text_form() {
    use serde::de::value::{Error, StrDeserializer};
    use serde::de::{Deserialize, IntoDeserializer};
    let de: StrDeserializer<'_, Error> = "gilbert:p=0.006,r=0.05".into_deserializer();
    assert_eq!(
        LossModel::deserialize(de).expect("valid"),
        LossModel::miyoshi_low_ber()
    );
    let de: StrDeserializer<'_, Error> = "gilbert:p=2,r=0.05".into_deserializer();
    assert!(LossModel::deserialize(de).is_err());
}

fn arb_prob() -> impl Strategy<Value = Probability> {
    prop_oneof![Just(0.0), Just(1.0), 0.0..=1.0f64]
        .prop_map(|p| Probability::new(p).expect("in range"))
}

fn arb_positive_prob() -> impl Strategy<Value = Probability> {
    prop_oneof![Just(1.0), 1e-12..=1.0f64].prop_map(|p| Probability::new(p).expect("in range"))
}

/// A chain that is valid: `r > 0` whenever `p > 0`.
fn arb_chain() -> impl Strategy<Value = (Probability, Probability)> {
    prop_oneof![
        arb_prob().prop_map(|r| (Probability::ZERO, r)),
        (arb_prob(), arb_positive_prob()),
    ]
}

fn arb_model() -> impl Strategy<Value = LossModel> {
    prop_oneof![
        Just(LossModel::None),
        arb_prob().prop_map(|p| LossModel::Bernoulli { p }),
        (arb_prob(), 1u32..1000, 0u32..1000).prop_map(|(start, min_len, extra)| {
            LossModel::Burst {
                start,
                min_len,
                max_len: min_len + extra,
            }
        }),
        arb_chain().prop_map(|(p, r)| LossModel::Gilbert { p, r }),
        (arb_chain(), arb_prob(), arb_prob())
            .prop_map(|((p, r), good, bad)| LossModel::GilbertElliott { p, r, good, bad }),
        (arb_chain(), arb_prob(), arb_prob()).prop_map(|((p, r), good, bad)| {
            LossModel::BitError {
                p,
                r,
                good: good.get(),
                bad: bad.get(),
            }
        }),
        arb_prob().prop_map(|b| ber(0.0, 0.0, b.get(), b.get())),
    ]
}

/// A schedule of up to 5 segments: holds of any model, and Bernoulli or
/// Gilbert ramps; played once or repeated.
fn arb_schedule() -> impl Strategy<Value = LossModel> {
    let segment = (
        1u64..20_000,
        prop_oneof![
            arb_model().prop_map(|m| (m, None)),
            (arb_prob(), arb_prob()).prop_map(|(a, b)| (
                LossModel::Bernoulli { p: a },
                Some(LossModel::Bernoulli { p: b }),
            )),
            (arb_chain(), arb_chain()).prop_map(|((p0, r0), (p1, r1))| (
                LossModel::Gilbert { p: p0, r: r0 },
                Some(LossModel::Gilbert { p: p1, r: r1 }),
            )),
        ],
    );
    (prop::collection::vec(segment, 1..5), any::<bool>()).prop_map(|(segments, repeat)| {
        let segments = segments
            .into_iter()
            .map(|(ms, (from, to))| crate::Segment {
                duration: std::time::Duration::from_millis(ms),
                from,
                to,
            })
            .collect();
        LossModel::Schedule(Schedule::new(segments, repeat).expect("valid segments"))
    })
}

proptest! {
    #[test]
    fn schedules_round_trip_build_and_stay_in_range(model in arb_schedule(), step_ms in 1u64..5000) {
        let text = model.to_string();
        let parsed: LossModel = text.parse().map_err(|e| TestCaseError::fail(format!("{e}")))?;
        prop_assert_eq!(&parsed, &model, "{}", text);
        let mut process = model.build().map_err(|e| TestCaseError::fail(format!("{e}")))?;
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        for i in 0..200 {
            process.on_packet(Instant::from_millis(i * step_ms), 64, &mut rng);
        }
        let rate = model.mean_loss_rate(64).expect("analytic");
        prop_assert!((0.0..=1.0).contains(&rate), "{}", rate);
        if let Some(pmf) = model.burst_len_pmf(64, 16) {
            prop_assert!(pmf.iter().all(|p| (0.0..=1.0 + 1e-9).contains(p)));
            prop_assert!(pmf.iter().sum::<f64>() <= 1.0 + 1e-9);
        }
    }

    #[test]
    fn display_and_from_str_round_trip(model in arb_model()) {
        let text = model.to_string();
        let parsed: LossModel = text.parse().map_err(|e| TestCaseError::fail(format!("{e}")))?;
        prop_assert_eq!(&parsed, &model, "{}", text);
        if !matches!(model, LossModel::Trace(_)) {
            let mut process = model.build().map_err(|e| TestCaseError::fail(format!("{e}")))?;
            let mut rng = ChaCha8Rng::seed_from_u64(0);
            for _ in 0..64 {
                process.on_packet(Instant::ZERO, 64, &mut rng);
            }
            let rate = model.mean_loss_rate(64).expect("analytic");
            prop_assert!((0.0..=1.0).contains(&rate));
        }
    }

    #[test]
    fn arbitrary_strings_give_errors_not_panics(text in any::<String>()) {
        let _ = text.parse::<LossModel>();
    }

    #[test]
    fn near_miss_strings_give_errors_not_panics(
        text in "(none|bernoulli|burst|gilbert|ge|ber|trace)?:?([a-z]{1,5}=?)?[-0-9e.%,=]{0,20}(,[a-z]{1,5}=[-0-9e.%]{0,8}){0,4}"
    ) {
        if let Ok(model) = text.parse::<LossModel>() {
            // Whatever parses also prints back to itself and builds (traces aside).
            prop_assert_eq!(model.to_string().parse::<LossModel>().ok(), Some(model.clone()));
            if !matches!(model, LossModel::Trace(_)) {
                let mut process = model.build().map_err(|e| TestCaseError::fail(format!("{e}")))?;
                let mut rng = ChaCha8Rng::seed_from_u64(0);
                process.on_packet(Instant::ZERO, 64, &mut rng);
                let _ = model.burst_len_pmf(64, 16);
            }
        }
    }
}

/// Miyoshi et al.'s Table 2 presets: the Error-state rate follows from the
/// stated long-run bit error rate, and a seeded run of the process shows
/// that long-run rate and the analytic packet error rate for 800-bit
/// packets (100 bytes).
#[test]
fn miyoshi_presets_give_the_stated_long_run_bit_error_rate() {
    use super::{MIYOSHI_HIGHER_P_B, MIYOSHI_LOWER_P_B};
    for (model, p_b, bad) in [
        (LossModel::miyoshi_lower(), MIYOSHI_LOWER_P_B, 0.0014),
        (LossModel::miyoshi_higher(), MIYOSHI_HIGHER_P_B, 0.001625),
    ] {
        let LossModel::BitError { p, r, good, bad: b } = model else {
            panic!("a bit error model");
        };
        assert_eq!(good, 0.0);
        assert!((b - bad).abs() < 1e-12, "{b} vs {bad}");
        let pi_e = p.get() / (p.get() + r.get());
        let analytic = model.mean_loss_rate(100).expect("analytic");
        assert!((analytic - pi_e * (1.0 - (1.0 - b).powi(800))).abs() < 1e-12);
        let mut process = model.build().expect("valid");
        let mut rng = ChaCha8Rng::seed_from_u64(20);
        let (packets, mut flipped, mut corrupted) = (400_000u64, 0u64, 0u64);
        for _ in 0..packets {
            if let PacketFate::Corrupted(e) = process.on_packet(Instant::ZERO, 100, &mut rng) {
                flipped += e.count() as u64;
                corrupted += 1;
            }
        }
        let measured = flipped as f64 / (packets * 800) as f64;
        assert!(
            (measured / p_b - 1.0).abs() < 0.05,
            "p_b {measured} vs {p_b}"
        );
        let per = corrupted as f64 / packets as f64;
        assert!(
            (per / analytic - 1.0).abs() < 0.05,
            "p_err {per} vs {analytic}"
        );
    }
}
