use std::time::Duration;

use crate::*;

#[test]
fn latency_summary_has_exact_mean_and_max() {
    let mut s = LatencyStats::new();
    for ms in 1..=100 {
        s.record(Duration::from_millis(ms));
    }
    let sum = s.summary();
    assert_eq!(sum.count, 100);
    assert!((sum.mean_ms - 50.5).abs() < 1e-9);
    assert_eq!(sum.max_ms, 100.0);
    assert!((sum.p95_ms - 95.0).abs() < 0.1, "{sum:?}");
}

#[test]
fn jain_index_bounds() {
    assert_eq!(jain_fairness(&[5.0, 5.0, 5.0]), 1.0);
    assert!((jain_fairness(&[1.0, 0.0, 0.0, 0.0]) - 0.25).abs() < 1e-12);
}

#[test]
fn quantiles_stay_at_or_below_the_maximum_and_reset_empties() {
    let mut s = LatencyStats::new();
    assert_eq!(s.quantile_micros(0.5), None);
    for us in [1_001, 1_002, 1_003] {
        s.record(Duration::from_micros(us));
    }
    assert_eq!(s.quantile_micros(1.0), Some(1_003));
    assert!(
        s.quantile_micros(0.5)
            .is_some_and(|q| (1_000..=1_003).contains(&q))
    );
    s.reset();
    assert!(s.is_empty());
    assert_eq!(s.summary(), LatencySummary::default());
}

#[test]
fn the_bucket_meter_forgets_bytes_older_than_its_window() {
    use groupwire_units::Instant;
    let mut m = BucketMeter::new(Duration::from_secs(1));
    m.record(Instant::from_millis(10), 1000);
    m.record(Instant::from_millis(500), 3000);
    assert_eq!(m.rate(Instant::from_millis(900)), 4000);
    // The first bucket (0-125 ms) leaves the window at 1125 ms.
    assert_eq!(m.rate(Instant::from_millis(1130)), 3000);
    assert_eq!(m.last(), Instant::from_millis(1130));
    assert_eq!(m.rate(Instant::from_secs(5)), 0);
}

#[test]
fn the_arrival_window_is_exact_and_bounded() {
    use groupwire_units::Instant;
    // From 1 s on: at the clock's epoch the window's start saturates.
    let ms = |t: u64| Instant::from_millis(1000 + t);
    let w = Duration::from_millis(100);
    let mut a = ArrivalWindow::new(3);
    a.push(ms(0), 10, w);
    a.push(ms(50), 20, w);
    assert_eq!(a.sum_since(ms(60), w), 30);
    // (now - window, now]: the arrival at 0 leaves at 100 ms exactly.
    assert_eq!(a.sum_since(ms(100), w), 20);
    // A shorter window on read.
    assert_eq!(a.sum_since(ms(60), Duration::from_millis(5)), 0);
    // Beyond capacity, arrivals merge into the newest record.
    a.push(ms(60), 1, w);
    a.push(ms(70), 2, w);
    a.push(ms(80), 4, w);
    assert_eq!(a.sum_since(ms(80), w), 37);
    // The last two merged into the record of 60 ms, so they leave with it.
    assert_eq!(a.sum_since(ms(80), Duration::from_millis(25)), 7);
    assert_eq!(a.sum_since(ms(80), Duration::from_millis(15)), 0);
}

mod channel {
    use std::time::Duration;

    use groupwire_units::Instant;
    use proptest::prelude::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use crate::channel::{BurstStats, Fig4Jitter, Rfc3550Jitter};
    use crate::*;

    #[test]
    fn fig4_jitter_is_the_mean_deviation_from_each_run_of_20s_mean() {
        let mut j = Fig4Jitter::default();
        for i in 0..19 {
            j.push(if i % 2 == 0 { 10.0 } else { 20.0 });
        }
        assert_eq!(j.micros(), None, "a run of 20 is not finished");
        j.push(20.0);
        assert_eq!(j.micros(), Some(5.0));
        // A constant second run halves the mean deviation; a level shift
        // between runs is not jitter (each run has its own short-term mean).
        for _ in 0..20 {
            j.push(1000.0);
        }
        assert_eq!(j.micros(), Some(2.5));
        j.reset();
        assert_eq!(j.micros(), None);
    }

    #[test]
    fn rfc3550_jitter_converges_to_the_transit_difference() {
        let mut j = Rfc3550Jitter::default();
        assert_eq!(j.micros(), None);
        for _ in 0..100 {
            j.push(5000.0);
        }
        assert_eq!(j.micros(), Some(0.0));
        let mut j = Rfc3550Jitter::default();
        for i in 0..=400 {
            j.push(if i % 2 == 0 { 0.0 } else { 160.0 });
        }
        // J_n = 160 (1 - (15/16)^n): within a microsecond after 400.
        assert!(
            (j.micros().unwrap() - 160.0).abs() < 1.0,
            "{:?}",
            j.micros()
        );
    }

    #[test]
    fn gilbert_fit_recovers_the_chain_that_made_the_losses() {
        let (p, r) = (0.02, 0.3);
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut b = BurstStats::default();
        let mut bad = false;
        for _ in 0..400_000 {
            bad = if bad {
                !rng.random_bool(r)
            } else {
                rng.random_bool(p)
            };
            b.push(bad);
        }
        let s = b.summary();
        let (fp, fr) = (s.gilbert_p.unwrap(), s.gilbert_r.unwrap());
        assert!((fp - p).abs() < 0.1 * p, "p {fp}");
        assert!((fr - r).abs() < 0.1 * r, "r {fr}");
        assert!((s.mean_run.unwrap() - 1.0 / r).abs() < 0.1 / r, "{s:?}");
        let total: u64 = s.run_lengths.iter().map(|(_, n)| n).sum();
        assert_eq!(total, s.runs);
    }

    #[test]
    fn runs_in_bulk_equal_runs_one_by_one() {
        let mut a = BurstStats::default();
        let mut b = BurstStats::default();
        for (lost, n) in [
            (false, 3),
            (true, 2),
            (false, 1),
            (true, 40),
            (false, 5),
            (true, 1),
        ] {
            a.push_run(lost, n);
            for _ in 0..n {
                b.push(lost);
            }
        }
        assert_eq!(a.summary(), b.summary());
        let s = a.summary();
        assert_eq!((s.runs, s.max_run), (3, 40));
        assert_eq!(
            s.run_lengths,
            vec![(1, 1), (2, 1), (channel::MAX_RUN_BUCKET, 1)]
        );
    }

    fn ms(v: u64) -> Option<Duration> {
        Some(Duration::from_millis(v))
    }

    #[test]
    fn an_in_order_channel_judges_a_gap_at_once() {
        let t0 = Instant::ZERO;
        let mut m = ChannelMeter::new("relay", LatencyKind::OneWay, t0);
        for seq in [1u64, 2, 5] {
            m.delivered(seq, Path::Arrived, ms(1));
            m.judge_through(seq);
        }
        // Beyond the newest is not judged: it may still come.
        m.judge_through(1000);
        let s = m.snapshot(t0 + Duration::from_secs(1));
        assert_eq!((s.loss.judged, s.loss.residual_lost), (5, 2));
        assert_eq!(s.burst.runs, 1);
        m.delivered(6, Path::Arrived, ms(1));
        let s = m.snapshot(t0 + Duration::from_secs(2));
        assert_eq!(s.loss.judged, 5, "6 waits for the window or a judge");
    }

    #[test]
    fn the_meter_judges_arrivals_rebuilds_and_losses() {
        let t0 = Instant::ZERO;
        let mut m = ChannelMeter::with_window("x", LatencyKind::OneWay, t0, 8);
        for seq in 100..120u64 {
            m.sent(1000);
            match seq {
                105 | 106 => {} // lost on the wire
                107 => {}       // lost, rebuilt below
                _ => {
                    m.received(1000);
                    m.delivered(seq, Path::Arrived, ms(10));
                }
            }
            if seq == 109 {
                m.delivered(107, Path::XorColumn, ms(14));
            }
        }
        m.delivered(118, Path::Arrived, None); // a duplicate
        m.delivered(90, Path::Arrived, None); // before the first: late
        let s = m.snapshot(t0 + Duration::from_secs(2));
        // Judged so far: everything 8 or more behind the newest (119).
        assert_eq!(s.loss.judged, 112 - 100);
        m.finish();
        let s = m.snapshot(t0 + Duration::from_secs(3));
        assert_eq!(s.loss.judged, 20);
        assert_eq!((s.loss.wire_lost, s.loss.residual_lost), (3, 2));
        assert_eq!((s.loss.duplicates, s.loss.late), (1, 1));
        assert_eq!(s.paths["arrived"], 17 + 1);
        assert_eq!(s.paths["xor_column"], 1);
        assert_eq!((s.out.packets, s.inbound.packets), (20, 17));
        assert_eq!(s.burst.runs, 1);
        assert_eq!(s.burst.max_run, 3);
        assert_eq!(s.latency_total.count, 18);
        // The interval since the last snapshot saw no traffic.
        assert_eq!(s.out.bitrate, 0.0);
        assert_eq!(s.latency.count, 0);
        assert!(s.line().contains("1 xor_column"), "{}", s.line());
    }

    #[test]
    fn columns_flatten_a_snapshot_and_survive_a_json_round_trip() {
        let t0 = Instant::ZERO;
        let mut m = ChannelMeter::with_window("x", LatencyKind::OneWay, t0, 8);
        for seq in 0..30u64 {
            m.sent(1250);
            if seq % 10 == 4 {
                m.delivered(seq, Path::XorRow, ms(30));
            } else if seq != 7 {
                m.received(1000);
                m.delivered(seq, Path::Arrived, ms(10 + seq % 3));
            }
        }
        m.finish();
        let s = m.snapshot(t0 + Duration::from_secs(1));
        let col = |s: &ChannelSnapshot, name: &str| {
            s.columns()
                .into_iter()
                .find(|(n, _)| *n == name)
                .unwrap_or_else(|| panic!("no column {name}"))
                .1
        };
        // Names are unique and in COLUMNS' order.
        let names: Vec<&str> = s.columns().iter().map(|(n, _)| *n).collect();
        assert_eq!(names, COLUMNS);
        let unique: std::collections::BTreeSet<&str> = names.iter().copied().collect();
        assert_eq!(unique.len(), COLUMNS.len());
        assert_eq!(col(&s, "t_s"), Some(1.0));
        assert_eq!(col(&s, "out_packets"), Some(30.0));
        assert_eq!(col(&s, "out_mbps"), Some(30.0 * 1250.0 * 8.0 / 1e6));
        assert_eq!(col(&s, "in_mbps"), Some(26.0 * 1000.0 * 8.0 / 1e6));
        assert_eq!(col(&s, "latency_count"), Some(29.0));
        assert_eq!(col(&s, "latency_max_ms"), Some(30.0));
        assert_eq!(col(&s, "latency_total_max_ms"), Some(30.0));
        assert_eq!(col(&s, "jitter_fig4_ms"), s.jitter_fig4_ms);
        assert!(col(&s, "jitter_rfc3550_ms").is_some());
        assert_eq!(col(&s, "loss_judged"), Some(30.0));
        assert_eq!(col(&s, "loss_wire_lost"), Some(4.0));
        assert_eq!(col(&s, "loss_wire"), Some(4.0 / 30.0));
        assert_eq!(col(&s, "loss_residual"), Some(1.0 / 30.0));
        assert_eq!(col(&s, "burst_mean"), Some(1.0));
        assert_eq!(col(&s, "gilbert_p"), s.burst.gilbert_p);
        assert_eq!(col(&s, "gilbert_r"), Some(1.0));
        assert_eq!(col(&s, "path_arrived"), Some(26.0));
        assert_eq!(col(&s, "path_xor_row"), Some(3.0));
        assert_eq!(col(&s, "path_block"), Some(0.0));
        assert_eq!(
            (col(&s, "delivered"), col(&s, "rebuilt")),
            (Some(29.0), Some(3.0))
        );

        // The JSON-lines record reads back as the snapshot written.
        let line = serde_json::to_string(&s).expect("a snapshot serializes");
        let back: ChannelSnapshot = serde_json::from_str(&line).expect("and reads back");
        assert_eq!(back, s);

        // An empty interval: latency unknown rather than zero, rates zero.
        let e = m.snapshot(t0 + Duration::from_secs(2));
        assert_eq!(col(&e, "latency_count"), Some(0.0));
        assert_eq!(col(&e, "latency_p50_ms"), None);
        assert_eq!(col(&e, "latency_total_p50_ms"), s.columns()[16].1);
        assert_eq!(col(&e, "out_mbps"), Some(0.0));
        assert_eq!(col(&e, "jitter_fig4_ms"), None);

        // A record naming a path groupwire does not know is refused.
        let odd = line.replace("\"xor_row\"", "\"carrier_pigeon\"");
        let err = serde_json::from_str::<ChannelSnapshot>(&odd).expect_err("unknown path");
        assert!(err.to_string().contains("carrier_pigeon"), "{err}");
    }

    #[test]
    fn a_hostile_jump_is_judged_in_one_step_and_memory_stays_fixed() {
        let mut m = ChannelMeter::with_window("x", LatencyKind::AboveBase, Instant::ZERO, 16);
        m.delivered(0, Path::Arrived, None);
        m.delivered(1 << 50, Path::Arrived, None);
        m.delivered(u64::MAX - 1, Path::Arrived, None);
        m.finish();
        let s = m.snapshot(Instant::ZERO);
        assert_eq!(s.loss.judged, u64::MAX);
        assert_eq!(s.loss.wire_lost, u64::MAX - 3);
        assert_eq!(s.burst.runs, 2);
    }

    #[test]
    fn prometheus_text_is_well_formed() {
        let mut m = ChannelMeter::new("tun\"nel\\a\nb", LatencyKind::HalfRtt, Instant::ZERO);
        for seq in 0..50 {
            if seq % 7 != 3 {
                m.delivered(seq, Path::Arrived, ms(seq % 5 + 1));
            } else {
                m.delivered(seq, Path::Block, ms(20));
            }
        }
        m.sent(10);
        let quiet =
            ChannelMeter::new("quiet", LatencyKind::OneWay, Instant::ZERO).snapshot(Instant::ZERO);
        let text = prometheus_text(&[m.snapshot(Instant::from_millis(1000)), quiet]);
        let mut families = std::collections::HashSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                assert!(
                    families.insert(rest.split(' ').next().unwrap().to_owned()),
                    "{line}"
                );
                continue;
            }
            if line.starts_with("# HELP ") {
                continue;
            }
            let (name, rest) = line.split_once('{').expect(line);
            assert!(name.starts_with("groupwire_channel_"), "{line}");
            let (labels, value) = rest.rsplit_once("} ").expect(line);
            assert!(value.parse::<f64>().is_ok(), "{line}");
            assert!(!labels.contains('\n'));
        }
        assert!(text.contains(r#"channel="tun\"nel\\a\nb""#), "{text}");
        assert!(
            text.contains(r#"groupwire_channel_delivered_total{channel="quiet",path="block"} 0"#)
        );
        // No latency yet: no latency samples rather than zeros.
        assert!(!text.contains(r#"latency_seconds{channel="quiet""#));
        assert!(text.contains(r#"kind="half_rtt",quantile="0.99""#));
    }

    proptest! {
        /// Whatever order and whatever numbers the units arrive in, after
        /// `finish` every number from the first to the newest is judged once,
        /// and the counts add up.
        #[test]
        fn every_number_is_judged_once(
            first in 0u64..1000,
            steps in proptest::collection::vec((-40i64..60, 0usize..3), 1..400),
            window in 1u64..64,
        ) {
            let mut m = ChannelMeter::with_window("p", LatencyKind::OneWay, Instant::ZERO, window);
            m.delivered(first, Path::Arrived, None);
            let mut newest = first;
            for (d, path) in steps {
                let seq = first.saturating_add_signed(d);
                newest = newest.max(seq);
                m.delivered(seq, [Path::Arrived, Path::Block, Path::Piggyback][path], ms(1));
            }
            m.finish();
            let s = m.snapshot(Instant::ZERO);
            prop_assert_eq!(s.loss.judged, newest - first + 1);
            prop_assert!(s.loss.residual_lost <= s.loss.wire_lost);
            prop_assert!(s.loss.wire_lost <= s.loss.judged);
            let delivered: u64 = s.paths.values().sum();
            prop_assert_eq!(delivered + s.loss.duplicates, 1 + s.latency_total.count);
        }

        /// A hostile peer's sequence numbers (anywhere in u64, up to its
        /// end, restarted at will) never make the meter panic, and what it
        /// reports stays consistent.
        #[test]
        fn any_sequence_numbers_are_safe(
            ops in proptest::collection::vec(
                prop_oneof![
                    8 => any::<u64>().prop_map(Some),
                    2 => (u64::MAX - 3..=u64::MAX).prop_map(Some),
                    1 => Just(None),
                ],
                1..60,
            ),
            window in 1u64..16,
        ) {
            let mut m = ChannelMeter::with_window("h", LatencyKind::OneWay, Instant::ZERO, window);
            for op in ops {
                match op {
                    Some(seq) => {
                        m.delivered(seq, Path::Arrived, ms(1));
                        m.judge_through(seq);
                    }
                    None => m.restart_numbering(),
                }
            }
            m.finish();
            let s = m.snapshot(Instant::ZERO);
            prop_assert!(s.loss.residual_lost <= s.loss.judged);
            prop_assert!(s.burst.max_run <= s.loss.wire_lost.max(1));
        }
    }
}
