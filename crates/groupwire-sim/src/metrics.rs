//! What experiments measure: latency distributions, time series, fairness.
//! The types live in `groupwire-metrics`, shared with the real-socket
//! commands and the relay bench; they are re-exported here for the
//! simulator's scenarios.

pub use groupwire_metrics::{LatencyStats, LatencySummary, TimeSeries, jain_fairness};
