//! `robustness-tunnel`: the tunnel half of the channel-family bench
//! (issue 15): does `groupwire tunnel` meet a residual-loss target within
//! a delay budget on channels the papers never used, and at what overhead
//! against the best fixed code chosen in hindsight?
//!
//! Every channel of the family (Bernoulli, Gilbert with several burst
//! lengths, Gilbert-Elliott with loss in both states, the `schedule:`
//! presets) carries 2000 datagrams/s of 1000 bytes through the tunnel's
//! machine, reusing the `tunnel` scenario's run ([`TunnelScenario`]). Each
//! cell is a channel, a residual target and a delay budget; its rows:
//!
//! - **gmiad**: `groupwire tunnel --fec gmiad` with its defaults (k = 20,
//!   2 ms block wait), which knows neither target nor budget (one run per
//!   channel and seed, judged against every cell);
//! - **target**: `--fec target --target-loss T --max-delay D`;
//! - **sliding-target**: `--fec sliding:target --target-loss T --max-delay D`:
//!   the same controller on the sliding-window code (RFC 8681), a window of
//!   `k` sources and `m / k` repairs per source
//!   ([`groupwire_proto::sliding`]'s closed loop), so a loss waits for
//!   the next repairs rather than its block's end;
//! - **oracle**: the cheapest fixed code `(k, m)` (`--fec static:m --k k`)
//!   that meets the target within the budget on this channel's own loss
//!   realisations, found in hindsight: for each `k` whose block fills
//!   within the budget, the smallest `m` meeting the target by bisection,
//!   then the least `m / k`. The search replays the simulator's forward
//!   link (the same seeded loss process, offered the code's packets at
//!   their send times), so a candidate costs a pass over the packets
//!   instead of a simulation; the chosen code is then run like the others.
//!
//! A datagram counts as lost if it never arrives **or** arrives later than
//! the budget (its delay above the link's own one-way delay): meeting the
//! target within the budget is one number, `residual`.

use super::par_map;
use std::collections::BTreeMap;
use std::time::Duration;

use groupwire_link::link::{Fate, LinkConfig, QueueLimit};
use groupwire_link::loss::LossModel;
use groupwire_proto::control::ControllerKind;
use groupwire_proto::wire::block::{DATA_HEADER_LEN, SYMBOL_PREFIX};
use groupwire_proto::{Instant, Probability};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::tunnel::{Run, TunnelScenario, TunnelSetting};
use super::{Progress, Report, ScenarioError, Table, serde_duration};

/// Parameters of `robustness-tunnel`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RobustnessTunnel {
    /// The channel family (loss from A to B; reports travel back
    /// losslessly).
    pub channels: Vec<LossModel>,
    /// Residual loss targets.
    pub targets: Vec<f64>,
    /// Delay budgets, milliseconds.
    pub budgets_ms: Vec<u64>,
    /// Application datagrams per second.
    pub datagrams_per_sec: f64,
    /// Bytes per datagram.
    pub size: u32,
    /// How long the application sends on a fixed channel.
    #[serde(with = "serde_duration")]
    pub duration: Duration,
    /// ... and on a `schedule:` channel (at least one cycle).
    #[serde(with = "serde_duration")]
    pub schedule_duration: Duration,
    /// Seeds per cell (`seed`, `seed + 1`, ...); a cell pools them.
    pub seeds: u32,
    /// Worker threads (0: one per core). Results do not depend on it.
    pub threads: usize,
}

impl Default for RobustnessTunnel {
    fn default() -> Self {
        // Gilbert with long-run loss `loss` in runs of mean `burst`:
        // r = 1 / burst, p = r · loss / (1 − loss).
        let gilbert = |loss: f64, burst: f64| {
            let r = 1.0 / burst;
            LossModel::Gilbert {
                p: prob(r * loss / (1.0 - loss)),
                r: prob(r),
            }
        };
        let bernoulli = |p: f64| LossModel::Bernoulli { p: prob(p) };
        Self {
            channels: vec![
                bernoulli(0.01),
                bernoulli(0.05),
                bernoulli(0.10),
                bernoulli(0.25),
                gilbert(0.10, 2.0),
                gilbert(0.10, 4.0),
                gilbert(0.10, 10.0),
                gilbert(0.20, 2.0),
                gilbert(0.20, 4.0),
                gilbert(0.20, 10.0),
                LossModel::gilbert_elliott(0.01, 0.1, 0.01, 0.5),
                LossModel::gilbert_elliott(0.02, 0.2, 0.02, 0.3),
                LossModel::alternating(),
                LossModel::fading(),
            ],
            targets: vec![0.01, 0.001, 0.0001],
            budgets_ms: vec![10, 30, 100],
            datagrams_per_sec: 2000.0,
            size: 1000,
            duration: Duration::from_secs(8),
            schedule_duration: Duration::from_secs(80),
            seeds: 2,
            threads: 0,
        }
    }
}

/// Which row of a cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Row {
    Gmiad,
    Target,
    /// `--fec sliding:target`: the same controller on the sliding code.
    Sliding,
    Oracle,
}

/// One simulation to run.
#[derive(Clone, Debug)]
struct Job {
    channel: usize,
    seed: u64,
    setting: TunnelSetting,
}

/// A row's pooled measures over the seeds.
#[derive(Clone, Debug, Default)]
struct Pooled {
    sent: u64,
    /// Delivered within the budget.
    in_time: u64,
    /// Delivered, late.
    late: u64,
    link_loss: f64,
    wire_x: f64,
    mean_k: f64,
    mean_m: f64,
    unmet_blocks: u64,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
}

impl Pooled {
    fn residual(&self) -> f64 {
        1.0 - self.in_time as f64 / self.sent.max(1) as f64
    }
}

impl RobustnessTunnel {
    pub(super) fn total_runs(&self) -> u64 {
        let per_seed = 1 + 2 * self.targets.len() * self.budgets_ms.len();
        (self.channels.len() * per_seed) as u64 * u64::from(self.seeds)
    }

    pub(super) fn validate(&self) -> Result<(), ScenarioError> {
        let invalid = |key, why: String| Err(ScenarioError::Invalid { key, why });
        if self.channels.is_empty() || self.targets.is_empty() || self.budgets_ms.is_empty() {
            return invalid(
                "channels",
                "name at least one channel, target and budget".into(),
            );
        }
        if let Some(t) = self.targets.iter().find(|t| !(**t > 0.0 && **t < 1.0)) {
            return invalid("targets", format!("{t}: must be above 0 and below 1"));
        }
        if self.budgets_ms.iter().any(|b| *b < 2) {
            return invalid("budgets_ms", "each at least 2 ms".into());
        }
        if self.seeds == 0 || self.seeds > 100 {
            return invalid("seeds", "from 1 to 100".into());
        }
        for c in &self.channels {
            let check = vec![TunnelSetting::target(
                "check",
                0.01,
                Duration::from_millis(30),
            )];
            self.channel_scenario(c, check).validate()?;
        }
        Ok(())
    }

    /// The `tunnel` scenario of one channel (its settings to be filled in).
    fn channel_scenario(&self, loss: &LossModel, settings: Vec<TunnelSetting>) -> TunnelScenario {
        let duration = if matches!(loss, LossModel::Schedule(_)) {
            self.schedule_duration
        } else {
            self.duration
        };
        TunnelScenario {
            loss: loss.clone(),
            datagrams_per_sec: self.datagrams_per_sec,
            size: self.size,
            duration,
            settings,
            ..TunnelScenario::default()
        }
    }

    fn seeds(&self, seed: u64) -> Vec<u64> {
        (0..u64::from(self.seeds)).map(|i| seed + i).collect()
    }

    pub(super) fn run(&self, seed: u64, progress: Progress<'_>) -> Result<Report, ScenarioError> {
        let seeds = self.seeds(seed);
        let mut done = 0u64;
        let mut tick = |n: u64| {
            done += n;
            progress(Instant::from_nanos(done));
        };
        // The oracle's codes first (a replay of the link, no simulation),
        // one channel per thread.
        let searched = par_map(self.threads, self.channels.len(), |c| {
            let sc = self.channel_scenario(&self.channels[c], Vec::new());
            let mut search = Search::new(&sc, &seeds);
            let mut codes = Vec::new();
            for &target in &self.targets {
                for &budget in &self.budgets_ms {
                    codes.push(search.cheapest(target, Duration::from_millis(budget))?);
                }
            }
            Ok::<_, ScenarioError>(codes)
        });
        let mut oracle: BTreeMap<(usize, usize, usize), Option<Code>> = BTreeMap::new();
        for (c, codes) in searched.into_iter().enumerate() {
            let mut codes = codes?.into_iter();
            for t in 0..self.targets.len() {
                for b in 0..self.budgets_ms.len() {
                    let code = codes.next().expect("one code per target and budget");
                    oracle.insert((c, t, b), code);
                }
            }
            tick(1);
        }
        // Then every simulation, on all threads.
        let mut jobs: Vec<(Job, (usize, Row, usize, usize))> = Vec::new();
        for (c, _) in self.channels.iter().enumerate() {
            for &s in &seeds {
                jobs.push((
                    Job {
                        channel: c,
                        seed: s,
                        setting: TunnelSetting::new("gmiad", ControllerKind::Gmiad, 20, 2),
                    },
                    (c, Row::Gmiad, 0, 0),
                ));
                for (t, &target) in self.targets.iter().enumerate() {
                    for (b, &budget) in self.budgets_ms.iter().enumerate() {
                        let budget = Duration::from_millis(budget);
                        jobs.push((
                            Job {
                                channel: c,
                                seed: s,
                                setting: TunnelSetting::target("target", target, budget),
                            },
                            (c, Row::Target, t, b),
                        ));
                        jobs.push((
                            Job {
                                channel: c,
                                seed: s,
                                setting: TunnelSetting::sliding_target(
                                    "sliding-target",
                                    target,
                                    budget,
                                ),
                            },
                            (c, Row::Sliding, t, b),
                        ));
                    }
                }
            }
            // One run per distinct oracle code of the channel.
            let codes: std::collections::BTreeSet<(usize, usize)> = oracle
                .iter()
                .filter(|((cc, _, _), _)| *cc == c)
                .filter_map(|(_, code)| code.map(|(k, m, _)| (k, m)))
                .collect();
            for (k, m) in codes {
                for &s in &seeds {
                    jobs.push((
                        Job {
                            channel: c,
                            seed: s,
                            setting: TunnelSetting {
                                // The last, short block closes when a
                                // full one would have: its repairs are
                                // as late as any block's.
                                block_wait: oracle_block_wait(k, self.datagrams_per_sec),
                                ..TunnelSetting::new("oracle", ControllerKind::Static(m), k, 0)
                            },
                        },
                        (c, Row::Oracle, k, m),
                    ));
                }
            }
        }
        let runs = self.run_jobs(jobs.iter().map(|(j, _)| j.clone()).collect(), &mut tick)?;
        // Group the runs: (channel, row, a, b) -> runs over seeds.
        let mut by_key: BTreeMap<(usize, Row, usize, usize), Vec<Run>> = BTreeMap::new();
        for ((_, key), run) in jobs.into_iter().zip(runs) {
            by_key.entry(key).or_default().push(run);
        }
        let delay = TunnelScenario::default().delay;
        let pool = |runs: &[Run], budget: Duration| -> Pooled {
            let mut p = Pooled::default();
            let mut added: Vec<u64> = Vec::new();
            let base = delay.as_micros() as u64;
            let limit = budget.as_micros() as u64;
            for r in runs {
                p.sent += r.sent;
                for &l in &r.latencies_us {
                    let a = l.saturating_sub(base);
                    added.push(a);
                    if a <= limit {
                        p.in_time += 1;
                    } else {
                        p.late += 1;
                    }
                }
                p.link_loss += r.link_loss / runs.len() as f64;
                p.wire_x += (1.0 + r.overhead) / runs.len() as f64;
                p.mean_k += r.mean_k / runs.len() as f64;
                p.mean_m += r.mean_fwnd / runs.len() as f64;
                p.unmet_blocks += r.unmet_blocks;
            }
            added.sort_unstable();
            let q = |f: f64| {
                if added.is_empty() {
                    0.0
                } else {
                    let i = ((added.len() - 1) as f64 * f).round() as usize;
                    added[i] as f64 / 1e3
                }
            };
            p.p50_ms = q(0.5);
            p.p99_ms = q(0.99);
            p.max_ms = q(1.0);
            p
        };
        let mut rows = Vec::new();
        let mut cells = Vec::new();
        let mut summary = serde_json::Map::new();
        let (mut n_cells, mut met, mut met_oracle, mut met_gmiad) = (0, 0, 0, 0);
        let mut ratios: Vec<f64> = Vec::new();
        let mut sliding_ratios: Vec<f64> = Vec::new();
        let (mut met_sliding, mut both_met, mut sliding_sooner, mut sliding_cheaper) = (0, 0, 0, 0);
        for (c, loss) in self.channels.iter().enumerate() {
            let channel = loss.to_string();
            for (t, &target) in self.targets.iter().enumerate() {
                for (b, &budget_ms) in self.budgets_ms.iter().enumerate() {
                    let budget = Duration::from_millis(budget_ms);
                    let gm = pool(&by_key[&(c, Row::Gmiad, 0, 0)], budget);
                    let tg = pool(&by_key[&(c, Row::Target, t, b)], budget);
                    let sl = pool(&by_key[&(c, Row::Sliding, t, b)], budget);
                    let code = oracle[&(c, t, b)];
                    let or = code.map(|(k, m, _)| pool(&by_key[&(c, Row::Oracle, k, m)], budget));
                    let ratio_to = |p: &Pooled| {
                        or.as_ref()
                            .map(|o| (p.wire_x - 1.0) / (o.wire_x - 1.0).max(1e-9))
                    };
                    for (name, p, code) in [
                        ("gmiad", Some(&gm), "k=20".to_owned()),
                        (
                            "target",
                            Some(&tg),
                            format!("k≈{:.0} m≈{:.1}", tg.mean_k, tg.mean_m),
                        ),
                        ("sliding-target", Some(&sl), "sliding:target".to_owned()),
                        (
                            "oracle",
                            or.as_ref(),
                            code.map_or("none meets".into(), |(k, m, _)| format!("k={k} m={m}")),
                        ),
                    ] {
                        let Some(p) = p else {
                            // No run: the measured columns are empty.
                            let mut row = vec![
                                json!(channel),
                                json!(target),
                                json!(budget_ms),
                                json!(name),
                                json!(code),
                            ];
                            row.resize(14, json!(null));
                            rows.push(row);
                            continue;
                        };
                        rows.push(vec![
                            json!(channel),
                            json!(target),
                            json!(budget_ms),
                            json!(name),
                            json!(code),
                            json!(p.link_loss),
                            json!(p.residual()),
                            json!(p.late),
                            json!(p.wire_x),
                            json!(p.p50_ms),
                            json!(p.p99_ms),
                            json!(p.max_ms),
                            json!(p.residual() <= target),
                            json!(ratio_to(p)),
                        ]);
                    }
                    n_cells += 1;
                    let tg_met = tg.residual() <= target;
                    met += u32::from(tg_met);
                    met_gmiad += u32::from(gm.residual() <= target);
                    met_oracle += u32::from(or.as_ref().is_some_and(|o| o.residual() <= target));
                    let ratio = ratio_to(&tg);
                    if let (true, Some(r)) = (tg_met, ratio) {
                        ratios.push(r);
                    }
                    let sl_met = sl.residual() <= target;
                    met_sliding += u32::from(sl_met);
                    if let (true, Some(r)) = (sl_met, ratio_to(&sl)) {
                        sliding_ratios.push(r);
                    }
                    if sl_met && tg_met {
                        both_met += 1;
                        sliding_sooner += u32::from(sl.p99_ms < tg.p99_ms);
                        sliding_cheaper += u32::from(sl.wire_x <= tg.wire_x);
                    }
                    cells.push(vec![
                        json!(channel),
                        json!(target),
                        json!(budget_ms),
                        json!(tg.sent),
                        json!(tg_met),
                        json!(tg.residual()),
                        json!(tg.wire_x),
                        json!(tg.p99_ms),
                        json!(tg.unmet_blocks),
                        json!(code.map(|(k, m, _)| format!("k={k} m={m}"))),
                        json!(or.as_ref().map(|o| o.residual())),
                        json!(or.as_ref().map(|o| o.wire_x)),
                        json!(ratio),
                        json!(gm.residual() <= target),
                        json!(gm.wire_x),
                        json!(sl_met),
                        json!(sl.residual()),
                        json!(sl.wire_x),
                        json!(sl.p99_ms),
                        json!(ratio_to(&sl)),
                    ]);
                }
            }
        }
        ratios.sort_by(f64::total_cmp);
        summary.insert("cells".into(), json!(n_cells));
        summary.insert("target_met".into(), json!(met));
        summary.insert("oracle_met".into(), json!(met_oracle));
        summary.insert("gmiad_met".into(), json!(met_gmiad));
        let median = ratios.get(ratios.len() / 2).copied();
        summary.insert("overhead_ratio_median_where_met".into(), json!(median));
        summary.insert(
            "overhead_ratio_max_where_met".into(),
            json!(ratios.last().copied()),
        );
        sliding_ratios.sort_by(f64::total_cmp);
        summary.insert("sliding_met".into(), json!(met_sliding));
        summary.insert(
            "sliding_overhead_ratio_median_where_met".into(),
            json!(sliding_ratios.get(sliding_ratios.len() / 2).copied()),
        );
        summary.insert("both_met".into(), json!(both_met));
        summary.insert(
            "sliding_lower_p99_where_both_met".into(),
            json!(sliding_sooner),
        );
        summary.insert(
            "sliding_no_costlier_where_both_met".into(),
            json!(sliding_cheaper),
        );
        summary.insert("seeds".into(), json!(self.seeds));
        let columns = |c: &[&str]| c.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        Ok(Report {
            scenario: "robustness-tunnel".into(),
            seed,
            summary,
            tables: vec![
                Table {
                    file: "cells".into(),
                    columns: columns(&[
                        "channel",
                        "target",
                        "budget_ms",
                        "sent",
                        "target_met",
                        "target_residual",
                        "target_wire_x",
                        "target_p99_ms",
                        "target_unmet_blocks",
                        "oracle_code",
                        "oracle_residual",
                        "oracle_wire_x",
                        "overhead_vs_oracle",
                        "gmiad_met",
                        "gmiad_wire_x",
                        "sliding_met",
                        "sliding_residual",
                        "sliding_wire_x",
                        "sliding_p99_ms",
                        "sliding_overhead_vs_oracle",
                    ]),
                    rows: cells,
                },
                Table {
                    file: "rows".into(),
                    columns: columns(&[
                        "channel",
                        "target",
                        "budget_ms",
                        "row",
                        "code",
                        "link_loss",
                        "residual",
                        "late",
                        "wire_x",
                        "p50_ms",
                        "p99_ms",
                        "max_ms",
                        "met",
                        "overhead_vs_oracle",
                    ]),
                    rows,
                },
            ],
            plots: Vec::new(),
        })
    }

    /// Runs `jobs` on worker threads; results in job order (so the report
    /// does not depend on the thread count).
    fn run_jobs(
        &self,
        jobs: Vec<Job>,
        tick: &mut dyn FnMut(u64),
    ) -> Result<Vec<Run>, ScenarioError> {
        let scenarios: Vec<TunnelScenario> = self
            .channels
            .iter()
            .map(|c| self.channel_scenario(c, Vec::new()))
            .collect();
        let runs = par_map(self.threads, jobs.len(), |i| {
            let job = &jobs[i];
            scenarios[job.channel].run_one(job.seed, &job.setting, &mut |_| {})
        });
        tick(runs.len() as u64);
        runs.into_iter().collect()
    }
}

/// A fixed code `(k, m)` and its residual loss.
type Code = (usize, usize, f64);

/// The oracle's search over fixed codes on one channel's realisations.
struct Search<'a> {
    sc: &'a TunnelScenario,
    seeds: &'a [u64],
    /// `(k, m)` -> datagrams lost over all seeds, and the delays of the
    /// rebuilt ones (ns, sorted), for any budget.
    cache: BTreeMap<(usize, usize), (u64, Vec<u64>)>,
    sent: u64,
}

impl<'a> Search<'a> {
    fn new(sc: &'a TunnelScenario, seeds: &'a [u64]) -> Self {
        let n = (sc.datagrams_per_sec * sc.duration.as_secs_f64()) as u64;
        Self {
            sc,
            seeds,
            cache: BTreeMap::new(),
            sent: n * seeds.len() as u64,
        }
    }

    /// Datagrams of all seeds lost or later than `budget` with code `(k, m)`.
    fn lost(&mut self, k: usize, m: usize, budget: Duration) -> Result<u64, ScenarioError> {
        if !self.cache.contains_key(&(k, m)) {
            let (mut lost, mut delays) = (0, Vec::new());
            for &seed in self.seeds {
                lost += replay(self.sc, seed, k, m, &mut delays)?;
            }
            delays.sort_unstable();
            self.cache.insert((k, m), (lost, delays));
        }
        let (lost, delays) = &self.cache[&(k, m)];
        let limit = budget.as_nanos() as u64;
        let late = delays.len() - delays.partition_point(|&d| d <= limit);
        Ok(lost + late as u64)
    }

    /// The cheapest `(k, m)` meeting `target` within `budget`, with its
    /// residual; `None` if no code within the budget does.
    fn cheapest(&mut self, target: f64, budget: Duration) -> Result<Option<Code>, ScenarioError> {
        let gap = 1.0 / self.sc.datagrams_per_sec;
        let k_max = ((budget.as_secs_f64() / gap).floor() as usize + 1).min(254);
        let allowed = (target * self.sent as f64).floor() as u64;
        let mut best: Option<Code> = None;
        // Longest blocks first: they are usually the cheapest, and a good
        // code found early bounds the search of every other length.
        for k in candidate_ks(k_max).into_iter().rev() {
            let hi = 255 - k;
            // Only codes cheaper than the best so far are worth a look.
            let hi = best.map_or(hi, |(bk, bm, _)| hi.min((bm * k).div_ceil(bk)));
            if self.lost(k, hi, budget)? > allowed {
                continue;
            }
            let (mut lo, mut hi) = (0usize, hi);
            if self.lost(k, 0, budget)? <= allowed {
                hi = 0;
            }
            // Invariant: hi meets; lo does not (or lo == hi == 0).
            while hi > lo + 1 {
                let mid = lo + (hi - lo) / 2;
                if self.lost(k, mid, budget)? <= allowed {
                    hi = mid;
                } else {
                    lo = mid;
                }
            }
            let m = hi;
            let cheaper = best.is_none_or(|(bk, bm, _)| m * bk < bm * k);
            if cheaper {
                let res = self.lost(k, m, budget)? as f64 / self.sent as f64;
                best = Some((k, m, res));
            }
        }
        Ok(best)
    }
}

/// Block lengths the oracle tries up to `k_max`: every one up to 12, then
/// steps of about 8%, and `k_max` itself.
fn candidate_ks(k_max: usize) -> Vec<usize> {
    let mut ks = Vec::new();
    let mut k = 1usize;
    while k < k_max {
        ks.push(k);
        k = if k < 12 {
            k + 1
        } else {
            (k as f64 * 1.08).ceil() as usize
        };
    }
    ks.push(k_max);
    ks
}

/// Replays the simulator's forward link for a fixed code `(k, m)`: the
/// same seeded loss process (the link's seed is derived as the simulator
/// derives it for its first link), offered source packets at the
/// application's send times and each block's `m` repairs right after its
/// `k`-th source, as the tunnel sends them. Returns the datagrams lost
/// (more than `m` of a block's `k + m` lost), and pushes onto `delays` how
/// long after it was sent (beyond the link's own delay) each rebuilt one
/// was rebuilt, in nanoseconds.
fn replay(
    sc: &TunnelScenario,
    seed: u64,
    k: usize,
    m: usize,
    delays: &mut Vec<u64>,
) -> Result<u64, ScenarioError> {
    let n = (sc.datagrams_per_sec * sc.duration.as_secs_f64()) as u64;
    let gap = 1.0 / sc.datagrams_per_sec;
    let mut link = LinkConfig::new()
        .rate(sc.rate)
        .latency(sc.delay)
        .queue(QueueLimit::Unlimited)
        .loss(sc.loss.clone())
        .seed(crate::rng::derive_seed(seed, "link", 0))
        .build()?;
    let src_len = DATA_HEADER_LEN + sc.size as usize;
    let rep_len = src_len + SYMBOL_PREFIX;
    let base = sc.delay.as_nanos() as u64;
    let mut lost = 0u64;
    let mut i = 0u64;
    let mut sends: Vec<u64> = Vec::with_capacity(k);
    let mut arrivals: Vec<Option<u64>> = Vec::with_capacity(k + m);
    while i < n {
        let len = (k as u64).min(n - i) as usize;
        // The last block, if short, gets the static controller's scaled
        // repairs, ⌈m · len / k⌉, when its block wait ends.
        let reps = if len < k { (m * len).div_ceil(k) } else { m };
        sends.clear();
        arrivals.clear();
        let mut at = Instant::ZERO;
        for j in 0..len as u64 {
            at = Instant::ZERO + Duration::from_secs_f64((i + j) as f64 * gap);
            sends.push(at.as_nanos());
            arrivals.push(arrival(link.offer(at, src_len)));
        }
        if len < k {
            at = Instant::from_nanos(sends[0]) + oracle_block_wait(k, sc.datagrams_per_sec);
        }
        for _ in 0..reps {
            arrivals.push(arrival(link.offer(at, rep_len)));
        }
        let received = arrivals.iter().flatten().count();
        let missing = arrivals[..len].iter().filter(|a| a.is_none()).count() as u64;
        if received < len {
            lost += missing;
        } else if missing > 0 {
            // Rebuilt when the len-th symbol arrives (the link is FIFO).
            let done = *arrivals
                .iter()
                .flatten()
                .nth(len - 1)
                .expect("len symbols arrived");
            for (j, a) in arrivals[..len].iter().enumerate() {
                if a.is_none() {
                    delays.push(done.saturating_sub(sends[j] + base));
                }
            }
        }
        i += len as u64;
    }
    Ok(lost)
}

/// The block wait of the oracle's runs: a full block's fill time, so the
/// run's last (short) block closes when a full one would have.
fn oracle_block_wait(k: usize, per_sec: f64) -> Duration {
    Duration::from_secs_f64((k - 1) as f64 / per_sec) + Duration::from_micros(1)
}

fn arrival(f: Fate) -> Option<u64> {
    match f {
        Fate::Deliver { at } => Some(at.as_nanos()),
        // Corrupted packets fail their checksum: lost to the receiver.
        Fate::Corrupt { .. } | Fate::Lost | Fate::QueueDrop => None,
    }
}

fn prob(p: f64) -> Probability {
    Probability::new(p).expect("a probability")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> RobustnessTunnel {
        RobustnessTunnel {
            channels: vec![LossModel::Gilbert {
                p: prob(0.027778),
                r: prob(0.25),
            }],
            targets: vec![0.01],
            budgets_ms: vec![30],
            duration: Duration::from_secs(3),
            seeds: 2,
            threads: 2,
            ..RobustnessTunnel::default()
        }
    }

    /// The replay is the simulator's link: a fixed code's residual there
    /// equals the full simulation's, datagram for datagram.
    #[test]
    fn the_oracles_replay_matches_the_simulated_tunnel() {
        let r = tiny();
        let sc = r.channel_scenario(&r.channels[0], Vec::new());
        // 6000 datagrams: whole blocks of 20, a short last block of 23.
        for (k, m) in [(20, 4), (41, 12)] {
            let setting = TunnelSetting {
                block_wait: oracle_block_wait(k, 2000.0),
                ..TunnelSetting::new("fixed", ControllerKind::Static(m), k, 0)
            };
            let run = sc.run_one(5, &setting, &mut |_| {}).expect("runs");
            let lost = replay(&sc, 5, k, m, &mut Vec::new()).expect("replays");
            let sim_lost = run.sent - run.latencies_us.len() as u64;
            assert_eq!(lost, sim_lost, "code ({k}, {m})");
            assert!(lost > 0, "something to compare");
        }
    }

    #[test]
    fn the_oracle_is_the_cheapest_code_meeting_the_target() {
        let r = tiny();
        let sc = r.channel_scenario(&r.channels[0], Vec::new());
        let seeds = [1, 2];
        let mut s = Search::new(&sc, &seeds);
        let budget = Duration::from_millis(30);
        let (k, m, res) = s.cheapest(0.01, budget).expect("runs").expect("some code");
        assert!(res <= 0.01 && k <= 61, "({k}, {m}) {res}");
        // No cheaper code with the same k meets it.
        if m > 0 {
            let worse = s.lost(k, m - 1, budget).expect("runs");
            assert!(worse as f64 / s.sent as f64 > 0.01);
        }
    }

    #[test]
    fn a_cell_reports_all_four_rows_and_the_same_seed_repeats() {
        let r = tiny();
        let a = r.run(1, &mut |_| {}).expect("runs");
        assert_eq!(a.tables[1].rows.len(), 4);
        assert_eq!(a.tables[0].rows.len(), 1);
        let b = r.run(1, &mut |_| {}).expect("runs");
        assert_eq!(a.tables[0].rows, b.tables[0].rows);
        assert_eq!(a.tables[1].rows, b.tables[1].rows);
        // The target controller meets a 1% target on a 10% bursty channel.
        assert_eq!(a.summary["target_met"], json!(1), "{:?}", a.tables[1].rows);
        // So does the same controller on the sliding-window code.
        assert_eq!(a.summary["sliding_met"], json!(1), "{:?}", a.tables[1].rows);
    }
}
