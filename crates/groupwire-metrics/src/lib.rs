//! One model for what groupwire measures, with no I/O: the simulator's
//! experiments, the real-socket commands, the relay bench and the
//! benchmarks all describe their results with these types, and the CLI
//! renders them.
//!
//! - [`LatencyStats`]: a latency distribution (HDR histogram, microsecond
//!   resolution, up to an hour) with exact mean and maximum, summarized as
//!   a serializable [`LatencySummary`];
//! - [`BucketMeter`] and [`ArrivalWindow`]: rates over sliding windows;
//! - [`TimeSeries`]: named `(seconds, value)` points, and
//!   [`jain_fairness`];
//! - [`ChannelMeter`]: one channel's bandwidth, latency, jitter (Leigh et
//!   al.'s Figure 4 and RFC 3550), burstiness and recovery paths, as a
//!   serializable [`ChannelSnapshot`] (read back from JSON lines too, and
//!   flattened into named numbers by [`ChannelSnapshot::columns`]) and
//!   Prometheus text;
//! - [`Report`], [`Table`], [`Plot`]: what a run produced, written by the
//!   CLI as a text table, JSON, CSV and PNG, and as Markdown by
//!   [`Report::to_markdown`].

pub mod channel;
mod format;
mod latency;
mod rate;
mod report;
mod series;

pub use channel::{COLUMNS, ChannelMeter, ChannelSnapshot, LatencyKind, Path, prometheus_text};
pub use format::{format_cell, format_quantity};
pub use latency::{LatencyStats, LatencySummary};
pub use rate::{ArrivalWindow, BucketMeter};
pub use report::{Plot, PlotStyle, Report, Table};
pub use series::{TimeSeries, jain_fairness};

#[cfg(test)]
mod tests;
