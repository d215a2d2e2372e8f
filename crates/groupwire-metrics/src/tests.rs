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
