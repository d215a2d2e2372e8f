//! Time series and summary statistics over sets of values.

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
