//! `miyoshi`: Miyoshi et al.'s adaptive FEC with ELN on a bursty wireless
//! link.
//!
//! **Tables 3 and 4** (§5, Figure 6): `frames` frames of `frame_bits` bits
//! through each of `channels` (default: Table 2's lower and higher BER
//! cases), decided for no FEC, BCH(127, 92), (127, 64), (127, 36), the
//! threshold switch and the per-frame hindsight bound, over `seeds` seeds;
//! the mean of each column beside the chain's analytic value and the
//! paper's figure. See [`crate::miyoshi::frames`] for the frame layout
//! and the overhead accounting.

use groupwire_codec::Bch;
use groupwire_link::loss::LossModel;
use groupwire_proto::Instant;
use groupwire_proto::control::ladder::ThresholdConfig;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{Report, ScenarioError, Table};
use crate::miyoshi::frames::{self, FrameRow};
use crate::rng;

/// Parameters of the `miyoshi` scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Miyoshi {
    /// Frames per channel and seed (§5: 50,000).
    pub frames: u64,
    /// Bits on the air per frame (§5: 800).
    pub frame_bits: usize,
    /// Independent runs per channel; tables show their mean.
    pub seeds: u32,
    /// The channels of Tables 3 and 4, in their one-line text form.
    pub channels: Vec<LossModel>,
    /// Error-correcting capability of the fixed codes, weakest first
    /// (§3: 5, 10 and 15 bits: BCH(127, 92), (127, 64), (127, 36)).
    pub code_t: Vec<usize>,
    /// The threshold switch (§4: two errors in ten frames).
    pub threshold: ThresholdConfig,
}

impl Default for Miyoshi {
    fn default() -> Self {
        Self {
            frames: 50_000,
            frame_bits: 800,
            seeds: 5,
            channels: vec![LossModel::miyoshi_lower(), LossModel::miyoshi_higher()],
            code_t: vec![5, 10, 15],
            threshold: ThresholdConfig::default(),
        }
    }
}

/// The paper's Tables 3 and 4: (lost, received, overhead, available) for
/// no FEC, "FEC(127.94)", FEC(127.64), FEC(127.36) and adaptive FEC.
const PAPER_TABLES: [[(u64, u64, u64, u64); 5]; 2] = [
    [
        (4461, 45539, 0, 45539),
        (35, 49965, 12983, 36982),
        (0, 50000, 24803, 25197),
        (0, 50000, 35827, 14173),
        (2292, 47708, 1002, 46706),
    ],
    [
        (22242, 27758, 0, 27758),
        (15903, 34097, 8860, 25237),
        (934, 49066, 24340, 24726),
        (11, 49989, 35819, 14170),
        (8213, 41787, 9223, 32564),
    ],
];

/// The long-run figures the paper states for its two channels (§5): p_b
/// and p_err for 800-bit packets.
const PAPER_CHANNELS: [(f64, f64); 2] = [(0.00015, 0.090), (0.00075, 0.445)];

impl Miyoshi {
    pub(super) fn validate(&self) -> Result<(), ScenarioError> {
        if !(1..=100_000_000).contains(&self.frames) {
            return Err(ScenarioError::Invalid {
                key: "frames",
                why: "must be between 1 and 10^8".into(),
            });
        }
        if !(1..=1_000_000).contains(&self.frame_bits) {
            return Err(ScenarioError::Invalid {
                key: "frame_bits",
                why: "a frame is 1 to 10^6 bits (the paper's is 800)".into(),
            });
        }
        if !(1..=1000).contains(&self.seeds) {
            return Err(ScenarioError::Invalid {
                key: "seeds",
                why: "must be between 1 and 1000".into(),
            });
        }
        if self.channels.is_empty() {
            return Err(ScenarioError::Invalid {
                key: "channels",
                why: "list at least one channel, e.g. \"ber:miyoshi-lower\"".into(),
            });
        }
        for c in &self.channels {
            c.build()?;
        }
        self.codes()?;
        self.threshold
            .validate()
            .map_err(|why| ScenarioError::Invalid {
                key: "threshold",
                why,
            })?;
        Ok(())
    }

    fn codes(&self) -> Result<Vec<Bch>, ScenarioError> {
        if self.code_t.is_empty() {
            return Err(ScenarioError::Invalid {
                key: "code_t",
                why: "list at least one code, e.g. [5, 10, 15]".into(),
            });
        }
        let codes = self
            .code_t
            .iter()
            .map(|&t| Bch::new(t))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ScenarioError::Invalid {
                key: "code_t",
                why: e.to_string(),
            })?;
        if codes.windows(2).any(|w| w[0].k() <= w[1].k()) {
            return Err(ScenarioError::Invalid {
                key: "code_t",
                why: "codes go weakest first: each t must give a smaller k than the one before"
                    .into(),
            });
        }
        Ok(codes)
    }

    /// Frames drawn in all (for progress).
    pub(super) fn total_frames(&self) -> u64 {
        self.frames * u64::from(self.seeds) * self.channels.len() as u64
    }

    pub(super) fn run(
        &self,
        seed: u64,
        progress: &mut dyn FnMut(Instant),
    ) -> Result<Report, ScenarioError> {
        let codes = self.codes()?;
        let mut summary = serde_json::Map::new();
        let mut tables = Vec::new();
        let mut done = 0u64;
        for (ci, channel) in self.channels.iter().enumerate() {
            let mut runs: Vec<Vec<FrameRow>> = Vec::new();
            for s in 0..self.seeds {
                let mut r = rng::stream(seed, "miyoshi-frames", (ci as u64) << 32 | u64::from(s));
                let rows = frames::simulate(
                    channel,
                    self.frames,
                    self.frame_bits,
                    &codes,
                    self.threshold,
                    &mut r,
                    &mut |n| progress(Instant::from_nanos(done + n)),
                )?;
                done += self.frames;
                runs.push(rows);
            }
            let paper = self.paper_table(ci, channel);
            let name = format!("frames-{}", ci + 1);
            tables.push(self.table(&name, channel, &codes, &runs, paper));
            tables.push(per_seed_table(&format!("{name}-per-seed"), &runs));
            self.summarize(&mut summary, ci, channel, &runs, paper);
        }
        Ok(Report {
            scenario: "miyoshi".into(),
            seed,
            summary,
            tables,
            plots: Vec::new(),
        })
    }

    /// The paper's table for this channel, if it is one of Table 2's and
    /// the frames are the paper's.
    fn paper_table(&self, _ci: usize, channel: &LossModel) -> Option<usize> {
        let same_setup =
            self.frames == 50_000 && self.frame_bits == 800 && self.code_t == [5, 10, 15];
        if !same_setup {
            return None;
        }
        if *channel == LossModel::miyoshi_lower() {
            Some(0)
        } else if *channel == LossModel::miyoshi_higher() {
            Some(1)
        } else {
            None
        }
    }

    fn table(
        &self,
        name: &str,
        channel: &LossModel,
        codes: &[Bch],
        runs: &[Vec<FrameRow>],
        paper: Option<usize>,
    ) -> Table {
        let n = self.frames as f64;
        let ladder: Vec<Option<&Bch>> = std::iter::once(None)
            .chain(codes.iter().map(Some))
            .collect();
        let rows = (0..runs[0].len())
            .map(|i| {
                let lost = stats(runs.iter().map(|r| r[i].lost as f64));
                let available = stats(runs.iter().map(|r| r[i].available));
                let overhead = stats(runs.iter().map(|r| r[i].overhead)).0;
                let exact = stats(runs.iter().map(|r| r[i].exact_overhead)).0;
                let received = n - lost.0;
                // Analytic values for the fixed schemes only.
                let analytic = ladder.get(i).and_then(|code| {
                    let p = frames::analytic_loss(channel, *code, self.frame_bits)?;
                    let recv = n * (1.0 - p);
                    Some((
                        n * p,
                        recv * (1.0 - frames::AirLayout::paper_overhead(*code)),
                    ))
                });
                // The paper's five rows are no FEC, three codes, adaptive.
                let paper_row = paper.and_then(|t| {
                    let j = match i {
                        0..=3 => i,
                        4 => 4,
                        _ => return None,
                    };
                    Some(PAPER_TABLES[t][j])
                });
                vec![
                    json!(runs[0][i].scheme),
                    json!(round1(lost.0)),
                    json!(round1(lost.1)),
                    json!(round1(received)),
                    json!(round1(overhead)),
                    json!(round1(available.0)),
                    json!(round1(available.1)),
                    json!(round1(exact)),
                    json!(round1(received - exact)),
                    analytic.map_or(Value::Null, |a| json!(round1(a.0))),
                    analytic.map_or(Value::Null, |a| json!(round1(a.1))),
                    paper_row.map_or(Value::Null, |p| json!(p.0)),
                    paper_row.map_or(Value::Null, |p| json!(p.3)),
                ]
            })
            .collect();
        Table {
            file: name.into(),
            columns: [
                "scheme",
                "lost",
                "lost_sd",
                "received",
                "overhead",
                "available",
                "available_sd",
                "exact_overhead",
                "exact_available",
                "analytic_lost",
                "analytic_available",
                "paper_lost",
                "paper_available",
            ]
            .map(String::from)
            .to_vec(),
            rows,
        }
    }

    fn summarize(
        &self,
        summary: &mut serde_json::Map<String, Value>,
        ci: usize,
        channel: &LossModel,
        runs: &[Vec<FrameRow>],
        paper: Option<usize>,
    ) {
        let key = |what: &str| format!("channel{}_{what}", ci + 1);
        summary.insert(key("model"), json!(channel.to_string()));
        let bits = self.frame_bits;
        if let Some(p_err) = channel.mean_loss_rate(bits.div_ceil(8)) {
            summary.insert(key("analytic_p_err"), json!(round4(p_err)));
        }
        let n = self.frames as f64;
        let measured = stats(runs.iter().map(|r| r[0].lost as f64 / n)).0;
        summary.insert(key("measured_p_err"), json!(round4(measured)));
        if let Some(t) = paper {
            summary.insert(
                key("paper_p_b"),
                json!(format!("{:e}", PAPER_CHANNELS[t].0)),
            );
            summary.insert(key("paper_p_err"), json!(PAPER_CHANNELS[t].1));
            // Which Error-state BER would make the paper's own BCH(127, 92)
            // row come out of this chain, and the long-run p_b that implies.
            if let Some((bad, p_b)) =
                fit_bad_ber(channel, PAPER_TABLES[t][1].0, self.frames, self.frame_bits)
            {
                summary.insert(
                    key("bad_ber_fitting_paper_fec92"),
                    json!(format!("{bad:.4}")),
                );
                summary.insert(key("p_b_fitting_paper_fec92"), json!(format!("{p_b:.5}")));
            }
        }
        let avail = |i: usize| stats(runs.iter().map(|r| r[i].available)).0;
        let rows = runs[0].len();
        let (adaptive, bound) = (rows - 2, rows - 1);
        let best_fixed = (0..adaptive)
            .max_by(|&a, &b| avail(a).total_cmp(&avail(b)))
            .expect("at least no FEC");
        summary.insert(key("best_fixed"), json!(runs[0][best_fixed].scheme));
        summary.insert(
            key("adaptive_vs_best_fixed"),
            json!(round4(avail(adaptive) / avail(best_fixed))),
        );
        summary.insert(
            key("adaptive_vs_no_fec"),
            json!(round4(avail(adaptive) / avail(0))),
        );
        summary.insert(
            key("hindsight_vs_best_fixed"),
            json!(round4(avail(bound) / avail(best_fixed))),
        );
    }
}

/// The Error-state bit error rate at which the chain of `channel` (a
/// two-state [`LossModel::BitError`]) loses `lost` of `frames` frames
/// under BCH(127, 92), by bisection on the analytic loss (which grows
/// with the rate); with the long-run bit error rate it implies.
fn fit_bad_ber(
    channel: &LossModel,
    lost: u64,
    frames: u64,
    frame_bits: usize,
) -> Option<(f64, f64)> {
    let LossModel::BitError { p, r, good, .. } = *channel else {
        return None;
    };
    let code = Bch::new(5).expect("t = 5 is a code");
    let target = lost as f64 / frames as f64;
    let loss_at = |bad: f64| {
        let m = LossModel::BitError { p, r, good, bad };
        frames::analytic_loss(&m, Some(&code), frame_bits).unwrap_or(0.0)
    };
    let (mut lo, mut hi) = (0.0f64, 0.5f64);
    if !(loss_at(lo) <= target && target <= loss_at(hi)) {
        return None;
    }
    for _ in 0..60 {
        let mid = (lo + hi) / 2.0;
        if loss_at(mid) < target {
            lo = mid
        } else {
            hi = mid
        }
    }
    let bad = (lo + hi) / 2.0;
    let pi_bad = p.get() / (p.get() + r.get());
    Some((bad, (1.0 - pi_bad) * good + pi_bad * bad))
}

/// One row per seed and scheme, for the CSV.
fn per_seed_table(name: &str, runs: &[Vec<FrameRow>]) -> Table {
    let rows = runs
        .iter()
        .enumerate()
        .flat_map(|(s, rows)| {
            rows.iter().map(move |r| {
                vec![
                    json!(s),
                    json!(r.scheme),
                    json!(r.lost),
                    json!(r.received),
                    json!(round1(r.overhead)),
                    json!(round1(r.available)),
                    json!(round1(r.exact_overhead)),
                    json!(r.switches),
                ]
            })
        })
        .collect();
    Table {
        file: name.into(),
        columns: [
            "seed_index",
            "scheme",
            "lost",
            "received",
            "overhead",
            "available",
            "exact_overhead",
            "switches",
        ]
        .map(String::from)
        .to_vec(),
        rows,
    }
}

/// Mean and sample standard deviation.
fn stats(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let v: Vec<f64> = values.collect();
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = if v.len() > 1 {
        v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)
    } else {
        0.0
    };
    (mean, var.sqrt())
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

fn round4(x: f64) -> f64 {
    (x * 1e4).round() / 1e4
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_run_has_both_tables_and_is_deterministic() {
        let s = Miyoshi {
            frames: 3000,
            seeds: 2,
            ..Default::default()
        };
        s.validate().expect("valid");
        let a = s.run(1, &mut |_| {}).expect("runs");
        let b = s.run(1, &mut |_| {}).expect("runs");
        assert_eq!(
            serde_json::to_string(&a.tables[0].rows).unwrap(),
            serde_json::to_string(&b.tables[0].rows).unwrap()
        );
        assert_eq!(a.tables.len(), 4);
        assert_eq!(a.tables[0].rows.len(), 6);
        // Not the paper's 50,000 frames: no paper column.
        assert!(a.tables[0].rows[0][11].is_null());
    }

    #[test]
    fn bad_parameters_are_named() {
        for (set, key) in [
            (
                Miyoshi {
                    frames: 0,
                    ..Default::default()
                },
                "frames",
            ),
            (
                Miyoshi {
                    code_t: vec![10, 5],
                    ..Default::default()
                },
                "code_t",
            ),
            (
                Miyoshi {
                    code_t: vec![40],
                    ..Default::default()
                },
                "code_t",
            ),
            (
                Miyoshi {
                    channels: vec![],
                    ..Default::default()
                },
                "channels",
            ),
            (
                Miyoshi {
                    frame_bits: 0,
                    ..Default::default()
                },
                "frame_bits",
            ),
        ] {
            let e = set.validate().unwrap_err().to_string();
            assert!(e.contains(key), "{e}");
        }
    }
}
