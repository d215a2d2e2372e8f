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
