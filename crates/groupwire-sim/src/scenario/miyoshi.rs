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
//!
//! **Figures 2 and 3** (§3, §4): one bulk TCP Reno transfer over the
//! network of Figure 1 ([`crate::miyoshi::wireless`]) at each bit error
//! rate of `fig2_ber` / `fig3_ber`, for each scheme of `fig2_schemes` /
//! `fig3_schemes`, `tcp_seeds` times. The crossings of consecutive
//! Snoop+ELN curves of Figure 3 are the thresholds of the adaptive
//! scheme, printed as a bit error rate and as the packet error rate of an
//! 800-bit frame.
//!
//! **Observation window against speed** (§4, eq. 1): Snoop+ELN over the
//! threshold switch on Table 2's channels, with the chain's state
//! durations scaled by `reference_speed / speed` (the Doppler frequency
//! f_d = v f_c / c grows with speed, 3 Hz per m/s at 900 MHz, and fades
//! shorten with it), for each window length of `windows`.

use groupwire_codec::Bch;
use groupwire_link::loss::LossModel;
use groupwire_proto::Instant;
use groupwire_proto::control::ladder::{PredictiveConfig, ThresholdConfig};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use std::sync::Arc;
use std::time::Duration;

use groupwire_metrics::TimeSeries;

use super::{Plot, Progress, Report, ScenarioError, Table, invalid, require, serde_duration};
use crate::miyoshi::frames::{self, FrameRow};
use crate::miyoshi::wireless::{Scheme, SchemeFec, WirelessPath, WirelessResult};
use crate::rng;

/// The parts of the scenario, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Part {
    /// Tables 3 and 4.
    Tables,
    /// Figure 2.
    Fig2,
    /// Figure 3 and the thresholds.
    Fig3,
    /// Throughput against the observation window for several speeds.
    Windows,
    /// Frames through a channel that changes every `phase_frames`: each
    /// switch against the best fixed code of each phase.
    Phases,
}

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
    /// The predictive switch (beyond the paper), for the frames of Tables
    /// 3-4 and the phases.
    pub predictive: PredictiveConfig,
    /// The predictive switch under TCP: as `predictive`, but a lost segment
    /// also costs the transfer the wait for its repair (Snoop's local
    /// retransmission behind a full queue), counted as `loss_penalty`
    /// extra frames.
    pub predictive_tcp: PredictiveConfig,
    /// After each of Table 2's channels, also run the same chain with the
    /// Error-state bit error rate fitted to the paper's BCH(127, 92) row
    /// (rounded to four decimals): the channel the paper's tables imply.
    pub fit_paper_fec92: bool,
    /// Which parts to run.
    pub parts: Vec<Part>,
    /// Simulated time of each TCP transfer.
    #[serde(with = "serde_duration")]
    pub tcp_duration: Duration,
    /// TCP transfers per point (different seeds); figures show the mean.
    pub tcp_seeds: u32,
    /// Figure 2's schemes (§3: Reno, ELN, Snoop+ELN, FEC BCH(127, 92)).
    pub fig2_schemes: Vec<Scheme>,
    /// Figure 2's bit error rates.
    pub fig2_ber: Vec<f64>,
    /// Figure 3's schemes (§4: Snoop+ELN over no FEC and each code), and
    /// the adaptive switch beside them.
    pub fig3_schemes: Vec<Scheme>,
    /// Figure 3's bit error rates (wider than Figure 2's: the codes only
    /// fail far above 1e-3).
    pub fig3_ber: Vec<f64>,
    /// Observation windows (frames) of the window sweep; the switch climbs
    /// at `max(1, round(window × up / threshold.window))` errors, the
    /// paper's 2 in 10 scaled.
    pub windows: Vec<u32>,
    /// Vehicle speeds (m/s) of the window sweep.
    pub speeds: Vec<f64>,
    /// The speed at which Table 2's chain holds as given (m/s): our
    /// assumption, the paper does not say.
    pub reference_speed: f64,
    /// Worker threads for the TCP runs; 0 uses every core.
    pub threads: usize,
    /// The channels of the changing-channel run, in order.
    pub phases: Vec<LossModel>,
    /// Frames per phase (14,400: 30 s of 800-bit frames at 384 kbit/s).
    pub phase_frames: u64,
}

/// Three points per decade from `from` to `to` (1, 2, 5 × 10^n).
fn decades(from: i32, to: i32) -> Vec<f64> {
    // Through text, so 5e-6 is the double nearest 5e-6 (5 × 10^-6 in
    // floating point is not).
    let at = |m: u32, e: i32| format!("{m}e{e}").parse::<f64>().expect("a number");
    let mut v: Vec<f64> = (from..to)
        .flat_map(|e| [1, 2, 5].map(|m| at(m, e)))
        .collect();
    v.push(at(1, to));
    v
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
            predictive: PredictiveConfig::default(),
            predictive_tcp: PredictiveConfig {
                loss_penalty: 1.0,
                ..PredictiveConfig::default()
            },
            fit_paper_fec92: true,
            parts: vec![
                Part::Tables,
                Part::Phases,
                Part::Fig2,
                Part::Fig3,
                Part::Windows,
            ],
            tcp_duration: Duration::from_secs(30),
            tcp_seeds: 3,
            fig2_schemes: ["reno", "eln", "snoop+eln", "fec:5"]
                .map(|s| s.parse().expect("a valid scheme"))
                .to_vec(),
            fig2_ber: decades(-6, -3),
            fig3_schemes: [
                "snoop+eln",
                "snoop+eln+fec:5",
                "snoop+eln+fec:10",
                "snoop+eln+fec:15",
                "snoop+eln+adaptive",
                "snoop+eln+predictive",
            ]
            .map(|s| s.parse().expect("a valid scheme"))
            .to_vec(),
            fig3_ber: decades(-6, -1),
            windows: vec![2, 5, 10, 20, 40, 64],
            speeds: vec![1.0, 5.0, 20.0],
            reference_speed: 5.0,
            threads: 0,
            phases: [
                "ber:miyoshi-lower",
                "ber:p=0.006,r=0.007,good=0,bad=0.0297",
                "ber:1e-6",
                "ber:2e-3",
                "ber:p=0.006,r=0.05,good=0,bad=0.009",
                "ber:miyoshi-higher",
                "ber:0.02",
            ]
            .map(|c| c.parse().expect("a valid channel"))
            .to_vec(),
            phase_frames: 14_400,
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
        let frames = 1..=100_000_000;
        require(
            frames.contains(&self.frames),
            "frames",
            "must be between 1 and 10^8",
        )?;
        require(
            (1..=1_000_000).contains(&self.frame_bits),
            "frame_bits",
            "a frame is 1 to 10^6 bits (the paper's is 800)",
        )?;
        require(
            (1..=1000).contains(&self.seeds),
            "seeds",
            "must be between 1 and 1000",
        )?;
        require(
            !self.channels.is_empty(),
            "channels",
            "list at least one channel, e.g. \"ber:miyoshi-lower\"",
        )?;
        for c in &self.channels {
            c.build()?;
        }
        self.codes()?;
        self.threshold
            .validate()
            .map_err(|why| invalid("threshold", why))?;
        if self.parts.contains(&Part::Phases) {
            require(
                !self.phases.is_empty(),
                "phases",
                "list at least one channel, e.g. [\"ber:miyoshi-lower\"]",
            )?;
            for c in &self.phases {
                c.build()?;
            }
            let ok = frames.contains(&self.phase_frames);
            require(ok, "phase_frames", "must be between 1 and 10^8")?;
        }
        require(
            !self.parts.is_empty(),
            "parts",
            "list at least one of tables, phases, fig2, fig3, windows",
        )?;
        let tcp = Duration::from_secs(1)..=Duration::from_secs(3600);
        require(
            tcp.contains(&self.tcp_duration),
            "tcp_duration",
            "must be between 1s and 1h",
        )?;
        let ok = (1..=100).contains(&self.tcp_seeds);
        require(ok, "tcp_seeds", "must be between 1 and 100")?;
        for (key, list) in [("fig2_ber", &self.fig2_ber), ("fig3_ber", &self.fig3_ber)] {
            require(
                !list.is_empty() && list.iter().all(|b| *b > 0.0 && *b < 1.0),
                key,
                "list bit error rates strictly between 0 and 1, e.g. [1e-6, 1e-5]",
            )?;
        }
        for (key, list) in [
            ("fig2_schemes", &self.fig2_schemes),
            ("fig3_schemes", &self.fig3_schemes),
        ] {
            let why = "list at least one scheme, e.g. \"snoop+eln\"";
            require(!list.is_empty(), key, why)?;
        }
        require(
            !self.windows.is_empty() && self.windows.iter().all(|w| (1..=64).contains(w)),
            "windows",
            "list observation windows of 1 to 64 frames",
        )?;
        let speed = |v: &f64| *v > 0.0 && v.is_finite();
        require(
            !self.speeds.is_empty() && self.speeds.iter().all(speed),
            "speeds",
            "list positive speeds in m/s",
        )?;
        let why = "must be a positive speed in m/s";
        require(speed(&self.reference_speed), "reference_speed", why)
    }

    /// The code switches the frame runs compare.
    fn switches(&self) -> frames::Switches {
        frames::Switches {
            threshold: self.threshold,
            predictive: self.predictive,
        }
    }

    fn codes(&self) -> Result<Vec<Bch>, ScenarioError> {
        let why = "list at least one code, e.g. [5, 10, 15]";
        require(!self.code_t.is_empty(), "code_t", why)?;
        let codes = self
            .code_t
            .iter()
            .map(|&t| Bch::new(t))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| invalid("code_t", e))?;
        require(
            codes.windows(2).all(|w| w[0].k() > w[1].k()),
            "code_t",
            "codes go weakest first: each t must give a smaller k than the one before",
        )?;
        Ok(codes)
    }

    /// Work items in all, for progress: one per table run (channel and
    /// seed) and one per TCP transfer.
    pub(super) fn total_work(&self) -> u64 {
        self.parts
            .iter()
            .map(|p| match p {
                Part::Tables => {
                    let fitted = if self.fit_paper_fec92 {
                        self.channels
                            .iter()
                            .filter(|c| self.paper_table(c).is_some())
                            .count()
                    } else {
                        0
                    };
                    u64::from(self.seeds) * (self.channels.len() + fitted) as u64
                }
                Part::Phases => u64::from(self.seeds),
                Part::Fig2 => self.tcp_jobs(&self.fig2_schemes, &self.fig2_ber),
                Part::Fig3 => self.tcp_jobs(&self.fig3_schemes, &self.fig3_ber),
                Part::Windows => {
                    u64::from(self.tcp_seeds)
                        * (self.windows.len() * self.speeds.len() * self.window_channels().len())
                            as u64
                }
            })
            .sum()
    }

    fn tcp_jobs(&self, schemes: &[Scheme], bers: &[f64]) -> u64 {
        u64::from(self.tcp_seeds) * (schemes.len() * bers.len()) as u64
    }

    /// The channels of the window sweep: Table 2's, whatever `channels` says.
    fn window_channels(&self) -> [(&'static str, LossModel); 2] {
        [
            ("lower", LossModel::miyoshi_lower()),
            ("higher", LossModel::miyoshi_higher()),
        ]
    }

    pub(super) fn run(&self, seed: u64, progress: Progress<'_>) -> Result<Report, ScenarioError> {
        let mut report = Report::new("miyoshi", seed);
        let mut done = 0u64;
        let mut tick = |n: u64| {
            done += n;
            progress(Instant::from_nanos(done));
        };
        for part in &self.parts {
            match part {
                Part::Tables => self.run_tables(seed, &mut report, &mut tick)?,
                Part::Fig2 => self.run_figure(seed, 2, &mut report, &mut tick)?,
                Part::Fig3 => self.run_figure(seed, 3, &mut report, &mut tick)?,
                Part::Windows => self.run_windows(seed, &mut report, &mut tick)?,
                Part::Phases => self.run_phases(seed, &mut report, &mut tick)?,
            }
        }
        Ok(report)
    }

    fn run_tables(
        &self,
        seed: u64,
        report: &mut Report,
        tick: &mut dyn FnMut(u64),
    ) -> Result<(), ScenarioError> {
        let codes = self.codes()?;
        // The configured channels, each of Table 2's followed (with
        // `fit_paper_fec92`) by the same chain with the Error-state bit
        // error rate that reproduces the paper's own BCH(127, 92) row.
        let mut channels: Vec<(LossModel, Option<usize>)> = Vec::new();
        for c in &self.channels {
            let paper = self.paper_table(c);
            channels.push((c.clone(), paper));
            if let (true, Some(t)) = (self.fit_paper_fec92, paper) {
                if let (LossModel::BitError { p, r, good, .. }, Some((bad, _))) = (
                    c,
                    fit_bad_ber(c, PAPER_TABLES[t][1].0, self.frames, self.frame_bits),
                ) {
                    let bad = (bad * 1e4).round() / 1e4;
                    channels.push((
                        LossModel::BitError {
                            p: *p,
                            r: *r,
                            good: *good,
                            bad,
                        },
                        paper,
                    ));
                }
            }
        }
        for (ci, (channel, paper)) in channels.iter().enumerate() {
            let (channel, paper) = (channel, *paper);
            let mut runs: Vec<Vec<FrameRow>> = Vec::new();
            for s in 0..self.seeds {
                let mut r = rng::stream(seed, "miyoshi-frames", (ci as u64) << 32 | u64::from(s));
                let rows = frames::simulate(
                    channel,
                    self.frames,
                    self.frame_bits,
                    &codes,
                    self.switches(),
                    &mut r,
                    &mut |_| {},
                )?;
                tick(1);
                runs.push(rows);
            }
            let name = format!("frames-{}", ci + 1);
            report
                .tables
                .push(self.table(&name, channel, &codes, &runs, paper));
            report
                .tables
                .push(per_seed_table(&format!("{name}-per-seed"), &runs));
            self.summarize(&mut report.summary, ci, channel, &runs, paper);
        }
        Ok(())
    }

    fn run_phases(
        &self,
        seed: u64,
        report: &mut Report,
        tick: &mut dyn FnMut(u64),
    ) -> Result<(), ScenarioError> {
        let codes = self.codes()?;
        let phases: Vec<(LossModel, u64)> = self
            .phases
            .iter()
            .map(|c| (c.clone(), self.phase_frames))
            .collect();
        let mut runs = Vec::new();
        for s in 0..self.seeds {
            let mut r = rng::stream(seed, "miyoshi-phases", u64::from(s));
            runs.push(frames::simulate_phases(
                &phases,
                self.frame_bits,
                &codes,
                self.switches(),
                &mut r,
                &mut |_| {},
            )?);
            tick(1);
        }
        let fixed = codes.len() + 1;
        let mut rows = Vec::new();
        let (mut worst_pred, mut worst_thr) = (f64::INFINITY, f64::INFINITY);
        for (pi, channel) in self.phases.iter().enumerate() {
            let avail = |i: usize| stats(runs.iter().map(|r| r[pi][i].available)).0;
            let best = (0..fixed)
                .max_by(|&a, &b| avail(a).total_cmp(&avail(b)))
                .expect("at least no FEC");
            let (thr, pred) = (avail(fixed) / avail(best), avail(fixed + 1) / avail(best));
            worst_thr = worst_thr.min(thr);
            worst_pred = worst_pred.min(pred);
            rows.push(vec![
                json!(pi + 1),
                json!(channel.to_string()),
                json!(runs[0][pi][best].scheme),
                json!(round1(avail(best))),
                json!(round1(avail(fixed))),
                json!(round1(avail(fixed + 1))),
                json!(round1(avail(fixed + 2))),
                json!(round4(thr)),
                json!(round4(pred)),
            ]);
        }
        report.tables.push(Table::new(
            "phases",
            &[
                "phase",
                "channel",
                "best_fixed",
                "best_fixed_available",
                "threshold_available",
                "predictive_available",
                "hindsight_available",
                "threshold_vs_best",
                "predictive_vs_best",
            ],
            rows,
        ));
        report.summary.insert(
            "phases_worst_threshold_vs_best_fixed".into(),
            json!(round4(worst_thr)),
        );
        report.summary.insert(
            "phases_worst_predictive_vs_best_fixed".into(),
            json!(round4(worst_pred)),
        );
        Ok(())
    }

    /// The adaptive ladder above no FEC: the scenario's codes.
    fn ladder(&self) -> Result<Vec<Arc<groupwire_codec::Bch>>, ScenarioError> {
        Ok(self.codes()?.into_iter().map(Arc::new).collect())
    }

    /// Runs `jobs` TCP transfers on all worker threads; results in job order.
    fn run_tcp(
        &self,
        jobs: Vec<(WirelessPath, u64)>,
        tick: &mut dyn FnMut(u64),
    ) -> Result<Vec<WirelessResult>, ScenarioError> {
        let threads = match self.threads {
            0 => std::thread::available_parallelism().map_or(1, usize::from),
            n => n,
        }
        .min(jobs.len().max(1));
        let next = std::sync::atomic::AtomicUsize::new(0);
        let (tx, rx) = std::sync::mpsc::channel();
        let mut results: Vec<Option<WirelessResult>> = vec![None; jobs.len()];
        let mut first_error = None;
        std::thread::scope(|scope| {
            for _ in 0..threads {
                let tx = tx.clone();
                let (jobs, next) = (&jobs, &next);
                scope.spawn(move || {
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some((path, seed)) = jobs.get(i) else {
                            break;
                        };
                        if tx.send((i, path.run(*seed))).is_err() {
                            break;
                        }
                    }
                });
            }
            drop(tx);
            for (i, r) in rx {
                tick(1);
                match r {
                    Ok(r) => results[i] = Some(r),
                    Err(e) => {
                        first_error.get_or_insert(e);
                    }
                }
            }
        });
        if let Some(e) = first_error {
            return Err(e.into());
        }
        Ok(results
            .into_iter()
            .map(|r| r.expect("every job ran"))
            .collect())
    }

    fn base_path(&self) -> WirelessPath {
        WirelessPath {
            duration: self.tcp_duration,
            ..WirelessPath::default()
        }
    }

    fn run_figure(
        &self,
        seed: u64,
        figure: u32,
        report: &mut Report,
        tick: &mut dyn FnMut(u64),
    ) -> Result<(), ScenarioError> {
        let (schemes, bers) = match figure {
            2 => (&self.fig2_schemes, &self.fig2_ber),
            _ => (&self.fig3_schemes, &self.fig3_ber),
        };
        let ladder = self.ladder()?;
        let mut jobs = Vec::new();
        for (bi, &ber) in bers.iter().enumerate() {
            for scheme in schemes {
                for s in 0..self.tcp_seeds {
                    let mut path = self.base_path();
                    path.channel = LossModel::BitError {
                        p: groupwire_proto::Probability::ZERO,
                        r: groupwire_proto::Probability::ZERO,
                        good: ber,
                        bad: ber,
                    };
                    scheme
                        .apply(&mut path, &ladder, self.threshold, self.predictive_tcp)
                        .map_err(|e| invalid("fig_schemes", e))?;
                    // Common random numbers: every scheme at one BER and
                    // seed index sees the same channel draws.
                    let job_seed = rng::derive_seed(
                        seed,
                        "miyoshi-tcp",
                        (u64::from(figure) << 40) | (bi as u64) << 20 | u64::from(s),
                    );
                    jobs.push((path, job_seed));
                }
            }
        }
        let results = self.run_tcp(jobs, tick)?;
        let per_point = self.tcp_seeds as usize;
        let mut rows = Vec::new();
        let mut curves: Vec<TimeSeries> = schemes
            .iter()
            .map(|s| TimeSeries::new(s.to_string()))
            .collect();
        let mut means = vec![vec![0.0; bers.len()]; schemes.len()];
        let mut events = 0u64;
        for (bi, &ber) in bers.iter().enumerate() {
            for (si, scheme) in schemes.iter().enumerate() {
                let at = (bi * schemes.len() + si) * per_point;
                let runs = &results[at..at + per_point];
                events += runs.iter().map(|r| r.events).sum::<u64>();
                let (mean, sd) = stats(runs.iter().map(|r| r.goodput_bps / 1000.0));
                let avg =
                    |f: &dyn Fn(&WirelessResult) -> u64| stats(runs.iter().map(|r| f(r) as f64)).0;
                means[si][bi] = mean;
                curves[si].push(ber, mean);
                rows.push(vec![
                    json!(ber),
                    json!(scheme.to_string()),
                    json!(round1(mean)),
                    json!(round1(sd)),
                    json!(round1(avg(&|r| r.timeouts))),
                    json!(round1(avg(&|r| r.fast_retransmits))),
                    json!(round1(avg(&|r| r.station.local_retransmits))),
                    json!(round1(avg(&|r| r.station.eln_marked))),
                    json!(round1(avg(&|r| r.fec_lost))),
                    json!(round1(avg(&|r| r.station.code_switches))),
                ]);
            }
        }
        let name = format!("fig{figure}");
        report.tables.push(Table::new(
            format!("{name}-points"),
            &[
                "ber",
                "scheme",
                "goodput_kbps",
                "goodput_sd",
                "timeouts",
                "fast_retransmits",
                "local_retransmits",
                "eln_marked",
                "fec_lost_frames",
                "code_switches",
            ],
            rows,
        ));
        report.plots.push(Plot {
            file: name.clone(),
            title: match figure {
                2 => "Figure 2: TCP goodput against bit error rate".into(),
                _ => "Figure 3: Snoop+ELN over each BCH code".into(),
            },
            x_label: "bit error rate (log scale)".into(),
            y_label: "goodput (kbit/s)".into(),
            series: curves,
            log_x: true,
            ..Default::default()
        });
        report
            .summary
            .insert(format!("{name}_events"), json!(events));
        match figure {
            2 => {
                // Where FEC overtakes Snoop+ELN (the paper: about 1e-4).
                let fec = schemes
                    .iter()
                    .position(|s| !s.snoop && matches!(s.fec, SchemeFec::Fixed(_)));
                let snoop = schemes
                    .iter()
                    .position(|s| s.snoop && s.eln && s.fec == SchemeFec::None);
                if let (Some(f), Some(sn)) = (fec, snoop) {
                    let cross = crossing(bers, &means[sn], &means[f]);
                    report.summary.insert(
                        "fig2_fec_beats_snoop_eln_above_ber".into(),
                        cross.map_or(Value::Null, |b| json!(format!("{b:.2e}"))),
                    );
                }
            }
            _ => self.thresholds(bers, schemes, &means, report),
        }
        Ok(())
    }

    /// The crossings of consecutive Snoop+ELN curves (no FEC, then the
    /// codes from weakest): the thresholds of the adaptive scheme.
    fn thresholds(
        &self,
        bers: &[f64],
        schemes: &[Scheme],
        means: &[Vec<f64>],
        report: &mut Report,
    ) {
        let ladder: Vec<usize> = std::iter::once(SchemeFec::None)
            .chain(self.code_t.iter().map(|&t| SchemeFec::Fixed(t)))
            .filter_map(|fec| {
                schemes
                    .iter()
                    .position(|s| s.snoop && s.eln && s.fec == fec)
            })
            .collect();
        let mut rows = Vec::new();
        let segment_bits = self.base_path().segment_bytes as usize * 8;
        let code_of = |i: usize| match schemes[i].fec {
            SchemeFec::Fixed(t) => groupwire_codec::Bch::new(t).ok(),
            _ => None,
        };
        for (n, pair) in ladder.windows(2).enumerate() {
            let name = char::from(b'A' + n as u8).to_string();
            let cross = crossing(bers, &means[pair[0]], &means[pair[1]]);
            // What the station observes at the crossing: the segment error
            // rate under the lighter code (climb when it is exceeded) and
            // under the stronger one (fall back when it drops below).
            let seen = |i: usize| {
                cross.map_or(Value::Null, |b| {
                    json!(round4(frames::packet_loss(
                        code_of(i).as_ref(),
                        segment_bits,
                        b
                    )))
                })
            };
            rows.push(vec![
                json!(name),
                json!(schemes[pair[0]].to_string()),
                json!(schemes[pair[1]].to_string()),
                cross.map_or(Value::Null, |b| json!(format!("{b:.3e}"))),
                seen(pair[0]),
                seen(pair[1]),
            ]);
            report.summary.insert(
                format!("threshold_{name}_ber"),
                cross.map_or(Value::Null, |b| json!(format!("{b:.2e}"))),
            );
        }
        report.tables.push(Table::new(
            "thresholds",
            &[
                "threshold",
                "below",
                "above",
                "ber",
                "p_err_under_below",
                "p_err_under_above",
            ],
            rows,
        ));
    }

    fn run_windows(
        &self,
        seed: u64,
        report: &mut Report,
        tick: &mut dyn FnMut(u64),
    ) -> Result<(), ScenarioError> {
        let ladder = self.ladder()?;
        let scheme: Scheme = "snoop+eln+adaptive".parse().expect("a valid scheme");
        let mut jobs = Vec::new();
        let mut keys = Vec::new();
        for (ci, (cname, channel)) in self.window_channels().into_iter().enumerate() {
            for (vi, &speed) in self.speeds.iter().enumerate() {
                let scale = speed / self.reference_speed;
                let LossModel::BitError { p, r, good, bad } = channel else {
                    unreachable!("Table 2's channels are bit-error models");
                };
                let scaled = LossModel::BitError {
                    p: groupwire_proto::Probability::new((p.get() * scale).min(1.0))
                        .expect("in [0, 1]"),
                    r: groupwire_proto::Probability::new((r.get() * scale).min(1.0))
                        .expect("in [0, 1]"),
                    good,
                    bad,
                };
                for &w in &self.windows {
                    let up = ((f64::from(w) * f64::from(self.threshold.up)
                        / f64::from(self.threshold.window))
                    .round() as u32)
                        .max(1);
                    let threshold = ThresholdConfig {
                        window: w,
                        up,
                        down: self.threshold.down.min(up - 1),
                    };
                    keys.push((cname, speed, w));
                    for s in 0..self.tcp_seeds {
                        let mut path = self.base_path();
                        path.channel = scaled.clone();
                        scheme
                            .apply(&mut path, &ladder, threshold, self.predictive_tcp)
                            .expect("the ladder's codes exist");
                        let job_seed = rng::derive_seed(
                            seed,
                            "miyoshi-windows",
                            (ci as u64) << 40 | (vi as u64) << 20 | u64::from(s),
                        );
                        jobs.push((path, job_seed));
                    }
                }
            }
        }
        let results = self.run_tcp(jobs, tick)?;
        let per = self.tcp_seeds as usize;
        let mut rows = Vec::new();
        let mut series: Vec<TimeSeries> = Vec::new();
        for (k, &(cname, speed, w)) in keys.iter().enumerate() {
            let runs = &results[k * per..(k + 1) * per];
            let (mean, sd) = stats(runs.iter().map(|r| r.goodput_bps / 1000.0));
            let switches = stats(runs.iter().map(|r| r.station.code_switches as f64)).0;
            let label = format!("{cname} BER, {speed} m/s");
            if series.last().is_none_or(|s| s.name != label) {
                series.push(TimeSeries::new(label));
            }
            series.last_mut().expect("pushed").push(f64::from(w), mean);
            rows.push(vec![
                json!(cname),
                json!(speed),
                json!(3.0 * speed),
                json!(w),
                json!(round1(mean)),
                json!(round1(sd)),
                json!(round1(switches)),
            ]);
        }
        report.tables.push(Table::new(
            "windows-points",
            &[
                "channel",
                "speed_mps",
                "doppler_hz",
                "window",
                "goodput_kbps",
                "goodput_sd",
                "code_switches",
            ],
            rows,
        ));
        report.plots.push(Plot {
            file: "windows".into(),
            title: "Snoop+ELN over adaptive FEC: observation window against speed".into(),
            x_label: "observation window (frames)".into(),
            y_label: "goodput (kbit/s)".into(),
            series,
            ..Default::default()
        });
        Ok(())
    }

    /// The paper's table for this channel, if it is one of Table 2's and
    /// the frames are the paper's.
    fn paper_table(&self, channel: &LossModel) -> Option<usize> {
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
        Table::new(
            name,
            &[
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
            ],
            rows,
        )
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
        // Rows: no FEC, the codes, threshold, predictive, hindsight.
        let (adaptive, predictive, bound) = (rows - 3, rows - 2, rows - 1);
        let best_fixed = (0..adaptive)
            .max_by(|&a, &b| avail(a).total_cmp(&avail(b)))
            .expect("at least no FEC");
        summary.insert(key("best_fixed"), json!(runs[0][best_fixed].scheme));
        for (name, row) in [
            ("threshold", adaptive),
            ("predictive", predictive),
            ("hindsight", bound),
        ] {
            summary.insert(
                key(&format!("{name}_vs_best_fixed")),
                json!(round4(avail(row) / avail(best_fixed))),
            );
        }
        summary.insert(
            key("threshold_vs_no_fec"),
            json!(round4(avail(adaptive) / avail(0))),
        );
        if let Some(t) = paper {
            summary.insert(
                key("predictive_vs_paper_adaptive"),
                json!(round4(avail(predictive) / PAPER_TABLES[t][4].3 as f64)),
            );
        }
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
    Table::new(
        name,
        &[
            "seed_index",
            "scheme",
            "lost",
            "received",
            "overhead",
            "available",
            "exact_overhead",
            "switches",
        ],
        rows,
    )
}

/// Where curve `b` first rises above curve `a` between two neighbouring
/// points of `x` (interpolated linearly in log x), if it does.
fn crossing(x: &[f64], a: &[f64], b: &[f64]) -> Option<f64> {
    (1..x.len()).find_map(|i| {
        let (d0, d1) = (b[i - 1] - a[i - 1], b[i] - a[i]);
        if d0 < 0.0 && d1 >= 0.0 {
            let f = d0 / (d0 - d1);
            let (l0, l1) = (x[i - 1].log10(), x[i].log10());
            Some(10f64.powf(l0 + f * (l1 - l0)))
        } else {
            None
        }
    })
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
            parts: vec![Part::Tables],
            ..Default::default()
        };
        s.validate().expect("valid");
        let a = s.run(1, &mut |_| {}).expect("runs");
        let b = s.run(1, &mut |_| {}).expect("runs");
        assert_eq!(
            serde_json::to_string(&a.tables[0].rows).unwrap(),
            serde_json::to_string(&b.tables[0].rows).unwrap()
        );
        assert_eq!(a.tables.len(), 4, "not the paper's frames: nothing fitted");
        assert_eq!(a.tables[0].rows.len(), 7);
        // Not the paper's 50,000 frames: no paper column.
        assert!(a.tables[0].rows[0][11].is_null());
    }

    /// A small Figure 3: the curves cross (no FEC best at a low BER, a
    /// code at a high one), the thresholds are found in order, and the
    /// run is deterministic whatever the thread count.
    #[test]
    fn figure_three_has_ordered_thresholds_and_any_thread_count_gives_the_same_report() {
        let s = Miyoshi {
            parts: vec![Part::Fig3],
            tcp_duration: Duration::from_secs(4),
            tcp_seeds: 1,
            fig3_ber: vec![1e-5, 1e-3, 1e-2, 3e-2, 6e-2],
            threads: 2,
            ..Default::default()
        };
        let a = s.run(5, &mut |_| {}).expect("runs");
        let one = Miyoshi {
            threads: 1,
            ..s.clone()
        }
        .run(5, &mut |_| {})
        .expect("runs");
        assert_eq!(
            serde_json::to_string(&a.tables).unwrap(),
            serde_json::to_string(&one.tables).unwrap()
        );
        let t = a
            .tables
            .iter()
            .find(|t| t.file == "thresholds")
            .expect("thresholds");
        let bers: Vec<f64> = t
            .rows
            .iter()
            .map(|r| {
                r[3].as_str()
                    .expect("a crossing")
                    .parse::<f64>()
                    .expect("a number")
            })
            .collect();
        assert_eq!(bers.len(), 3, "{:?}", t.rows);
        assert!(bers.windows(2).all(|w| w[0] < w[1]), "{bers:?}");
    }

    #[test]
    fn bad_parameters_are_named() {
        // As a user would set them: `--set key=value`, then validation.
        for (key, value) in [
            ("frames", "0"),
            ("code_t", "[10, 5]"),
            ("code_t", "[40]"),
            ("channels", "[]"),
            ("frame_bits", "0"),
            ("fig2_ber", "[0.0]"),
            ("fig3_ber", "[1.5]"),
            ("windows", "[0]"),
            ("speeds", "[-1.0]"),
            ("parts", "[]"),
            ("tcp_seeds", "0"),
            ("phase_frames", "0"),
        ] {
            let mut s = super::super::Scenario::Miyoshi(Box::default());
            s.set(key, value).expect("parses");
            let e = s.validate().unwrap_err().to_string();
            assert!(e.contains(key), "{key}={value}: {e}");
        }
    }
}
