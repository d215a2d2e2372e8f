//! What experiments measure: latency distributions, time series, fairness.

use std::time::Duration;

use hdrhistogram::Histogram;

/// A latency distribution: exact mean and max, percentiles from an HDR
/// histogram (1 us resolution, 3 significant digits, up to one hour).
#[derive(Debug, Clone)]
pub struct LatencyStats {
    hist: Histogram<u64>,
    sum_us: u128,
    max_us: u64,
}

impl Default for LatencyStats {
    fn default() -> Self {
        Self::new()
    }
}

/// A summary of a [`LatencyStats`], in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct LatencySummary {
    /// Samples.
    pub count: u64,
    /// Mean, ms.
    pub mean_ms: f64,
    /// Median, ms.
    pub p50_ms: f64,
    /// 95th percentile, ms.
    pub p95_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// Maximum, ms.
    pub max_ms: f64,
}

impl LatencyStats {
    /// An empty distribution.
    pub fn new() -> Self {
        Self {
            hist: Histogram::new_with_bounds(1, 3_600_000_000, 3)
                .expect("static histogram bounds are valid"),
            sum_us: 0,
            max_us: 0,
        }
    }

    /// Adds one sample (clamped to the histogram's one-hour range).
    pub fn record(&mut self, d: Duration) {
        let us = u64::try_from(d.as_micros())
            .unwrap_or(u64::MAX)
            .clamp(1, 3_600_000_000);
        self.hist
            .record(us)
            .expect("value clamped into the histogram's range");
        self.sum_us += u128::from(us);
        self.max_us = self.max_us.max(us);
    }

    /// Adds every sample of `other` (pooling runs).
    pub fn merge(&mut self, other: &Self) {
        self.hist.add(&other.hist).expect("histograms share bounds");
        self.sum_us += other.sum_us;
        self.max_us = self.max_us.max(other.max_us);
    }

    /// Samples recorded.
    pub fn count(&self) -> u64 {
        self.hist.len()
    }

    /// Mean, max and percentiles in milliseconds (zeros when empty).
    pub fn summary(&self) -> LatencySummary {
        let n = self.hist.len();
        if n == 0 {
            return LatencySummary::default();
        }
        // Percentiles come from histogram buckets (3 significant digits) and
        // may round above the exact maximum; never report them above it.
        let ms = |us: u64| us.min(self.max_us) as f64 / 1000.0;
        LatencySummary {
            count: n,
            mean_ms: self.sum_us as f64 / n as f64 / 1000.0,
            p50_ms: ms(self.hist.value_at_quantile(0.50)),
            p95_ms: ms(self.hist.value_at_quantile(0.95)),
            p99_ms: ms(self.hist.value_at_quantile(0.99)),
            max_ms: ms(self.max_us),
        }
    }
}

/// A named series of `(seconds, value)` points.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize)]
pub struct TimeSeries {
    /// Legend name.
    pub name: String,
    /// Points in time order.
    pub points: Vec<(f64, f64)>,
}

impl TimeSeries {
    /// An empty series.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            points: Vec::new(),
        }
    }
    /// Appends a point.
    pub fn push(&mut self, t: f64, v: f64) {
        self.points.push((t, v));
    }
}

/// Jain's fairness index `(Σx)² / (n Σx²)`: 1 when all equal, 1/n when one
/// takes everything. 1 for an empty or all-zero input.
pub fn jain_fairness(xs: &[f64]) -> f64 {
    let sum: f64 = xs.iter().sum();
    let sq: f64 = xs.iter().map(|x| x * x).sum();
    if xs.is_empty() || sq == 0.0 {
        return 1.0;
    }
    sum * sum / (xs.len() as f64 * sq)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
