//! `link-models`: each loss model against its own mathematics.
//!
//! Draws `packets` packets from every listed loss model with a fixed seed and
//! compares the empirical loss rate, mean loss-run length and run-length
//! distribution with the analytic values. This is the table in
//! `docs/results/link-models.md`.

use groupwire_link::loss::LossModel;
use groupwire_link::stats::LossStats;
use groupwire_proto::Instant;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{Plot, Progress, Report, ScenarioError, Table, report};
use crate::metrics::TimeSeries;
use crate::rng;

/// Run lengths shown in the distribution plot.
const PLOTTED_RUNS: u32 = 15;

/// Parameters of the `link-models` scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LinkModels {
    /// Packets drawn from each model.
    pub packets: u64,
    /// Packet size in bytes (matters for bit-error models).
    pub packet_size: u32,
    /// Packets per second, evenly spaced from time zero (matters for
    /// time-varying `schedule:` models only).
    pub packet_rate: u64,
    /// The models, in their one-line text form.
    pub models: Vec<LossModel>,
}

impl Default for LinkModels {
    fn default() -> Self {
        Self {
            packets: 1_000_000,
            packet_size: 1500,
            packet_rate: 1000,
            models: LossModel::dyck_patterns()
                .into_iter()
                .chain([
                    LossModel::gilbert(0.006, 0.05),
                    LossModel::cellular(),
                    "ber:1e-5".parse().expect("a valid loss model"),
                    "ber:p=0.006,r=0.05,good=1e-7,bad=1e-4"
                        .parse()
                        .expect("a valid loss model"),
                    LossModel::alternating(),
                    LossModel::fading(),
                ])
                .collect(),
        }
    }
}

impl LinkModels {
    pub(super) fn validate(&self) -> Result<(), ScenarioError> {
        if !(1..=1_000_000_000).contains(&self.packets) {
            return Err(ScenarioError::Invalid {
                key: "packets",
                why: "must be between 1 and 10^9".into(),
            });
        }
        if self.packet_size == 0 {
            return Err(ScenarioError::Invalid {
                key: "packet_size",
                why: "must be at least 1 byte".into(),
            });
        }
        if !(1..=1_000_000_000).contains(&self.packet_rate) {
            return Err(ScenarioError::Invalid {
                key: "packet_rate",
                why: "must be between 1 and 10^9 packets per second".into(),
            });
        }
        if self.models.is_empty() {
            return Err(ScenarioError::Invalid {
                key: "models",
                why: "list at least one loss model".into(),
            });
        }
        for m in &self.models {
            m.build()?;
        }
        Ok(())
    }

    /// Packets to draw in total (for progress).
    pub(super) fn total_packets(&self) -> u64 {
        self.packets * self.models.len() as u64
    }

    pub(super) fn run(&self, seed: u64, progress: Progress<'_>) -> Result<Report, ScenarioError> {
        let len = self.packet_size as usize;
        let mut rows = Vec::new();
        let mut plots = Vec::new();
        let mut done = 0u64;
        for (i, model) in self.models.iter().enumerate() {
            let mut process = model.build()?;
            let mut r = rng::stream(seed, "link-models", i as u64);
            let mut stats = LossStats::new();
            let gap = 1_000_000_000 / self.packet_rate;
            for n in 0..self.packets {
                let now = Instant::from_nanos(n.saturating_mul(gap));
                stats.record(process.on_packet(now, len, &mut r).is_loss());
                if n & 0xffff == 0 {
                    progress(Instant::from_nanos(done + n));
                }
            }
            stats.finish();
            done += self.packets;
            let name = model.to_string();
            rows.push(vec![
                json!(name),
                json!(model.mean_loss_rate(len)),
                json!(stats.loss_rate()),
                json!(model.mean_burst_len(len)),
                json!(stats.mean_burst_len()),
                json!(stats.bursts()),
                json!(stats.bursts_longer_than(3)),
                json!(stats.max_burst_len()),
            ]);
            let mut empirical = TimeSeries::new("empirical");
            let bursts = stats.bursts().max(1) as f64;
            for k in 1..=PLOTTED_RUNS {
                let c = stats.burst_histogram().get(&k).copied().unwrap_or(0);
                empirical.push(f64::from(k), c as f64 / bursts);
            }
            let mut series = vec![empirical];
            if let Some(pmf) = model.burst_len_pmf(len, PLOTTED_RUNS) {
                let mut analytic = TimeSeries::new("analytic");
                // Element k - 1 is P(run = k).
                for (k, p) in (1u32..).zip(&pmf) {
                    analytic.push(f64::from(k), *p);
                }
                series.push(analytic);
            }
            plots.push(Plot {
                file: format!("runs-{i}"),
                title: format!("Loss-run length distribution: {name}"),
                x_label: "consecutive losses".into(),
                y_label: "fraction of runs".into(),
                series,
                ..Default::default()
            });
        }
        let mut summary = serde_json::Map::new();
        summary.insert("packets_per_model".into(), json!(self.packets));
        summary.insert("packet_size".into(), json!(self.packet_size));
        summary.insert("models".into(), json!(self.models.len()));
        let mut worst = 0.0f64;
        for row in &rows {
            if let (Some(a), Some(e)) = (row[1].as_f64(), row[2].as_f64()) {
                if a > 0.0 {
                    worst = worst.max((e - a).abs() / a);
                }
            }
        }
        summary.insert("max_relative_loss_rate_error".into(), json!(worst));
        let tables = vec![Table {
            file: "models".into(),
            columns: [
                "model",
                "analytic_loss_rate",
                "empirical_loss_rate",
                "analytic_mean_run",
                "empirical_mean_run",
                "runs",
                "runs_longer_than_3",
                "longest_run",
            ]
            .map(String::from)
            .to_vec(),
            rows,
        }];
        Ok(report("link-models", seed, summary, tables, plots))
    }
}
