//! Latency distributions: exact mean and maximum, percentiles from an HDR
//! histogram.

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
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize, serde::Deserialize)]
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

    /// Adds one sample given in microseconds (clamped as [`record`](Self::record)).
    pub fn record_micros(&mut self, us: u64) {
        self.record(std::time::Duration::from_micros(us));
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

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.hist.is_empty()
    }

    /// Forgets every sample (a per-interval window starts again).
    pub fn reset(&mut self) {
        self.hist.reset();
        self.sum_us = 0;
        self.max_us = 0;
    }

    /// The `q` quantile (0 to 1) in microseconds, never above the exact
    /// maximum; `None` when empty.
    pub fn quantile_micros(&self, q: f64) -> Option<u64> {
        (!self.is_empty()).then(|| self.hist.value_at_quantile(q).min(self.max_us))
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
