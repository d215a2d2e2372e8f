//! `tunnel`: `groupwire tunnel`'s machine over a simulated bursty link.
//!
//! Two [`TunnelEndpoint`]s, the same machine `groupwire tunnel` runs on real
//! sockets (`groupwire_tokio::tunnel`), face each other over a point-to-point
//! link: side A knows its peer (`--peer`), side B learns it (`--forward`).
//! An application at A sends a constant-rate stream of datagrams; B hands
//! them out. The forward direction loses packets by `loss` (default: the
//! Gilbert channel of `docs/results/tunnel.md`, 10% long-run loss in bursts
//! of mean length 4); the reverse direction carries B's reports.
//!
//! Each setting (controller, `k`, window bounds, block wait) runs on its own
//! copy of the link with the same seed, so every setting sees the same loss
//! process. The table has the columns of `docs/results/tunnel.md`, so the
//! simulated tunnel and the real one can be read side by side; the plot is
//! `Fwnd` over time per setting.

use std::time::Duration;

use bytes::Bytes;
use groupwire_link::link::{LinkConfig, QueueLimit};
use groupwire_link::loss::LossModel;
use groupwire_link::schedule::Schedule;
use groupwire_metrics::{ChannelMeter, ChannelSnapshot, LatencyKind, Path};
use groupwire_proto::control::ControllerKind;
use groupwire_proto::control::target::TargetConfig;
use groupwire_proto::sliding::SlidingCode;
use groupwire_proto::tunnel::{TunnelConfig, TunnelDelivery, TunnelEndpoint};
use groupwire_proto::units::IP_UDP_OVERHEAD;
use groupwire_proto::{Bitrate, Instant, Probability};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{Plot, Progress, Report, ScenarioError, Table, latency_cells, report, serde_duration};
use crate::core::{NodeId, Simulator, addr_of};
use crate::machine_node::MachineNode;
use crate::metrics::{LatencyStats, TimeSeries};
use crate::topology::PointToPoint;
use crate::traffic::{evenly_spaced, payload_index};

/// One tunnel setting: what `groupwire tunnel`'s FEC flags set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TunnelSetting {
    /// The row's name.
    pub name: String,
    /// Redundancy controller (`--fec`).
    pub fec: ControllerKind,
    /// Source datagrams per block (`--k`).
    pub k: usize,
    /// GMIAD's smallest window (`--fwnd-min`; default GENEVA §3.2.4's 8).
    #[serde(default)]
    pub fwnd_min: Option<usize>,
    /// GMIAD's largest window (`--fwnd-max`; default GENEVA §3.2.4's 60).
    #[serde(default)]
    pub fwnd_max: Option<usize>,
    /// A short block closes this long after its first datagram (`--block-wait`).
    #[serde(with = "serde_duration")]
    pub block_wait: Duration,
    /// With `fec = "target"`: the residual loss asked for (`--target-loss`;
    /// default 0.1%).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_loss: Option<f64>,
    /// With `fec = "target"`: the delay budget (`--max-delay`; default 30 ms).
    #[serde(
        default,
        with = "serde_duration::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_delay: Option<Duration>,
    /// A sliding-window code instead of block FEC, as `--fec` names it:
    /// `sliding:w=W,o=O`, or `sliding:target` (the target controller
    /// chooses the window and overhead for `target_loss` within
    /// `max_delay`). `fec` and `k` are then not used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sliding: Option<String>,
}

impl TunnelSetting {
    pub(super) fn new(name: &str, fec: ControllerKind, k: usize, block_wait_ms: u64) -> Self {
        Self {
            name: name.to_owned(),
            fec,
            k,
            fwnd_min: None,
            fwnd_max: None,
            block_wait: Duration::from_millis(block_wait_ms),
            target_loss: None,
            max_delay: None,
            sliding: None,
        }
    }

    /// `--fec sliding:target --target-loss TARGET --max-delay BUDGET`.
    /// (The pause's repair 2 ms after the last send, as `groupwire
    /// tunnel` sends it: a sliding code has no block to wait for.)
    pub(super) fn sliding_target(name: &str, target: f64, budget: Duration) -> Self {
        Self {
            sliding: Some("sliding:target".to_owned()),
            block_wait: Duration::from_millis(2),
            ..Self::target(name, target, budget)
        }
    }

    /// What `--fec` names.
    pub(super) fn fec_name(&self) -> String {
        self.sliding.clone().unwrap_or_else(|| self.fec.to_string())
    }

    /// The sliding code named, or why it is not one.
    fn sliding_code(&self) -> Result<Option<SlidingCode>, String> {
        match self.sliding.as_deref() {
            None | Some("sliding:target") => Ok(None),
            Some(s) => s.parse().map(Some),
        }
    }

    /// `--fec target --target-loss TARGET --max-delay BUDGET`, as
    /// `groupwire tunnel` runs it (the controller bounds the block's wait).
    pub(super) fn target(name: &str, target: f64, budget: Duration) -> Self {
        Self {
            target_loss: Some(target),
            max_delay: Some(budget),
            block_wait: budget,
            ..Self::new(name, ControllerKind::Target, 20, 0)
        }
    }

    /// The machine's configuration, as `groupwire tunnel` builds it.
    fn config(&self, peer: Option<std::net::SocketAddr>) -> TunnelConfig {
        let mut cfg = TunnelConfig::new(peer, self.k);
        cfg.sender.controller = self.fec.into();
        cfg.sender.max_block_wait = Some(self.block_wait);
        if let Some(t) = cfg.sender.controller.target_mut() {
            t.target = self.target_loss.unwrap_or(t.target);
            t.max_delay = self.max_delay.unwrap_or(t.max_delay);
        }
        if let Some(g) = cfg.sender.controller.gmiad_mut() {
            g.fwnd_min = self.fwnd_min.unwrap_or(g.fwnd_min);
        }
        if let (Some(m), Some(max)) = (cfg.sender.controller.fwnd_max_mut(), self.fwnd_max) {
            *m = max;
        }
        if self.sliding.as_deref() == Some("sliding:target") {
            let t = TargetConfig {
                target: self.target_loss.unwrap_or(TargetConfig::default().target),
                max_delay: self.max_delay.unwrap_or(TargetConfig::default().max_delay),
                ..TargetConfig::default()
            };
            cfg.use_sliding_target(t);
        } else if let Ok(Some(code)) = self.sliding_code() {
            cfg.sliding = Some(code);
        }
        cfg
    }
}

/// Parameters of the `tunnel` scenario. Defaults are the setting of
/// `docs/results/tunnel.md` (`scripts/tunnel_bench.py`): 2000 datagrams/s of
/// 1000 bytes for 30 s, Gilbert loss with `p = 0.027778`, `r = 0.25`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TunnelScenario {
    /// Link rate, both directions.
    pub rate: Bitrate,
    /// One-way propagation delay.
    #[serde(with = "serde_duration")]
    pub delay: Duration,
    /// A time-varying rate, both directions, replacing `rate` (e.g.
    /// `schedule:30s 2Mbit/s; 30s 2Mbit/s -> 500kbit/s; repeat`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_schedule: Option<Schedule<Bitrate>>,
    /// A time-varying one-way delay, replacing `delay` (e.g.
    /// `schedule:20s 20ms; 20s 200ms; repeat`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delay_schedule: Option<Schedule<Duration>>,
    /// Loss from A to B (the data direction).
    pub loss: LossModel,
    /// Loss from B to A (the reports).
    pub reverse_loss: LossModel,
    /// Application datagrams per second at A.
    pub datagrams_per_sec: f64,
    /// Bytes per application datagram (at least 8: the sequence number).
    pub size: u32,
    /// How long the application sends.
    #[serde(with = "serde_duration")]
    pub duration: Duration,
    /// The settings compared, one run each.
    pub settings: Vec<TunnelSetting>,
}

impl Default for TunnelScenario {
    fn default() -> Self {
        let mut big =
            TunnelSetting::new("GMIAD, k=150, Fwnd 8..70", ControllerKind::Gmiad, 150, 100);
        big.fwnd_max = Some(70);
        let mut long_threshold = TunnelSetting::new(
            "Miyoshi threshold switch (k=150, Fwnd 0..70)",
            ControllerKind::Threshold,
            150,
            100,
        );
        long_threshold.fwnd_max = Some(70);
        let mut long_predictive = TunnelSetting::new(
            "predictive switch (k=150, Fwnd 0..70)",
            ControllerKind::Predictive,
            150,
            100,
        );
        long_predictive.fwnd_max = Some(70);
        Self {
            rate: Bitrate::mbps(1000),
            delay: Duration::from_millis(1),
            loss: LossModel::Gilbert {
                p: Probability::new(0.027778).expect("a probability"),
                r: Probability::new(0.25).expect("a probability"),
            },
            reverse_loss: LossModel::None,
            rate_schedule: None,
            delay_schedule: None,
            datagrams_per_sec: 2000.0,
            size: 1000,
            duration: Duration::from_secs(30),
            settings: vec![
                TunnelSetting::new("no FEC", ControllerKind::Static(0), 20, 2),
                TunnelSetting::new("fixed 20:10", ControllerKind::Static(10), 20, 100),
                TunnelSetting::new(
                    "GMIAD as published (k=20, Fwnd 8..60)",
                    ControllerKind::Gmiad,
                    20,
                    100,
                ),
                TunnelSetting::new(
                    "GMIAD, tunnel defaults (k=20, --block-wait 2ms)",
                    ControllerKind::Gmiad,
                    20,
                    2,
                ),
                big,
                TunnelSetting::new("fixed 150:70", ControllerKind::Static(70), 150, 100),
                TunnelSetting::new(
                    "Miyoshi threshold switch (k=20, Fwnd 0..60)",
                    ControllerKind::Threshold,
                    20,
                    100,
                ),
                TunnelSetting::new(
                    "predictive switch (k=20, Fwnd 0..60)",
                    ControllerKind::Predictive,
                    20,
                    100,
                ),
                long_threshold,
                long_predictive,
                TunnelSetting::target(
                    "target, tunnel defaults (0.1% within 30 ms)",
                    0.001,
                    Duration::from_millis(30),
                ),
                TunnelSetting::target(
                    "target 0.1% within 100 ms",
                    0.001,
                    Duration::from_millis(100),
                ),
                TunnelSetting {
                    sliding: Some("sliding:w=20,o=0.5".to_owned()),
                    ..TunnelSetting::new(
                        "sliding w=20, o=0.5 (fixed)",
                        ControllerKind::Static(0),
                        20,
                        2,
                    )
                },
                TunnelSetting::sliding_target(
                    "sliding target 0.1% within 30 ms",
                    0.001,
                    Duration::from_millis(30),
                ),
                TunnelSetting::sliding_target(
                    "sliding target 0.1% within 100 ms",
                    0.001,
                    Duration::from_millis(100),
                ),
            ],
        }
    }
}

/// What one setting's run measured.
pub(super) struct Run {
    pub(super) link_loss: f64,
    pub(super) residual: f64,
    pub(super) overhead: f64,
    pub(super) mean_fwnd: f64,
    /// Source datagrams per block, on average.
    pub(super) mean_k: f64,
    pub(super) short_blocks: u64,
    pub(super) blocks: u64,
    pub(super) rebuilt: u64,
    /// Blocks sent with a code the target controller expected to miss.
    pub(super) unmet_blocks: u64,
    pub(super) added: LatencyStats,
    pub(super) one_way: LatencyStats,
    /// One-way latency of every distinct datagram delivered, in
    /// microseconds, in delivery order (for delays past a budget).
    pub(super) latencies_us: Vec<u64>,
    /// Datagrams the application sent.
    pub(super) sent: u64,
    pub(super) fwnd: TimeSeries,
    /// The receiving application's view, one-way on the simulator's clock.
    pub(super) channel: ChannelSnapshot,
    pub(super) events: u64,
}

impl TunnelScenario {
    pub(super) fn total_runs(&self) -> u64 {
        self.settings.len() as u64
    }

    fn datagrams(&self) -> u64 {
        (self.datagrams_per_sec * self.duration.as_secs_f64()) as u64
    }

    pub(super) fn validate(&self) -> Result<(), ScenarioError> {
        let invalid = |key, why: String| Err(ScenarioError::Invalid { key, why });
        if self.duration.is_zero() {
            return invalid("duration", "must be positive, e.g. 30s".into());
        }
        if !(self.datagrams_per_sec > 0.0 && self.datagrams_per_sec <= 1e6) {
            return invalid("datagrams_per_sec", "must be in (0, 1000000]".into());
        }
        if self.datagrams() > 50_000_000 {
            return invalid(
                "duration",
                "datagrams_per_sec × duration must stay under 50 million".into(),
            );
        }
        if self.settings.is_empty() {
            return invalid("settings", "name at least one".into());
        }
        for s in &self.settings {
            if let Err(e) = s.sliding_code() {
                return invalid("settings", format!("{}: sliding: {e}", s.name));
            }
            let cfg = s.config(None);
            if self.size < 8 || self.size as usize > cfg.max_payload() {
                return invalid(
                    "size",
                    format!(
                        "must be from 8 to {} bytes (the tunnel's payload)",
                        cfg.max_payload()
                    ),
                );
            }
            cfg.validate().map_err(|e| ScenarioError::Invalid {
                key: "settings",
                why: format!("{}: {e}", s.name),
            })?;
        }
        self.loss.build()?;
        self.reverse_loss.build()?;
        Ok(())
    }

    /// One setting's run with `seed`: the machinery `robustness-tunnel`
    /// reuses per cell.
    pub(super) fn run_one(
        &self,
        seed: u64,
        s: &TunnelSetting,
        progress: Progress<'_>,
    ) -> Result<Run, ScenarioError> {
        let n = self.datagrams();
        let gap = 1.0 / self.datagrams_per_sec;
        let msgs = evenly_spaced(n, gap, self.size);
        let mut sim = Simulator::new(seed);
        let a = sim.next_node_id();
        let b = NodeId(a.0 + 1);
        let size = self.size as usize;
        let sender = MachineNode::new(a, TunnelEndpoint::new(s.config(Some(addr_of(b)))))
            .with_schedule(
                msgs.clone(),
                Box::new(move |ep, now, i, _m| {
                    // The sequence number, then bytes that are not zero:
                    // an application's datagrams (media, ciphertext) do
                    // not end in zeros, and a sliding-window repair sends
                    // none of its trailing zeros, so zero padding would
                    // make its repairs look nearly free.
                    let mut p: Vec<u8> = (0..size).map(|j| (j as u8) | 1).collect();
                    p[..8].copy_from_slice(&(i as u64).to_be_bytes());
                    // Refusals are counted by the endpoint.
                    let _ = ep.send(now, Bytes::from(p));
                }),
            );
        sim.add_node(Box::new(sender));
        sim.add_node(Box::new(MachineNode::new(
            b,
            TunnelEndpoint::new(s.config(None)),
        )));
        let link = LinkConfig::new()
            .rate(self.rate)
            .latency(self.delay)
            .schedules(self.rate_schedule.as_ref(), self.delay_schedule.as_ref())
            .queue(QueueLimit::Unlimited);
        PointToPoint::build(
            &mut sim,
            a,
            b,
            link.clone().loss(self.loss.clone()),
            link.loss(self.reverse_loss.clone()),
        )?;
        // Run in 100 ms steps, sampling the sender's window; then give the
        // last blocks time to arrive.
        let end = Instant::ZERO + self.duration;
        let step = Duration::from_millis(100);
        let mut fwnd = TimeSeries::new(s.name.clone());
        let mut t = Instant::ZERO;
        while t < end {
            t = (t + step).min(end);
            sim.run_until(t, progress);
            let view = sim.view();
            let node = view
                .node::<MachineNode<TunnelEndpoint>>(a)
                .expect("node a is the sending tunnel");
            if let Some(f) = node.machine().fwnd() {
                fwnd.push(t.as_secs_f64(), f as f64);
            }
        }
        sim.run_until(end + Duration::from_secs(2), progress);
        let view = sim.view();
        let tx = view
            .node::<MachineNode<TunnelEndpoint>>(a)
            .expect("node a is the sending tunnel")
            .machine()
            .totals();
        let rx_node = view
            .node::<MachineNode<TunnelEndpoint>>(b)
            .expect("node b is the receiving tunnel");
        let rx = rx_node.machine().totals();
        let mut seen = vec![false; n as usize];
        let (mut added, mut one_way) = (LatencyStats::new(), LatencyStats::new());
        let mut unique = 0u64;
        let mut latencies_us = Vec::new();
        let mut meter = ChannelMeter::new(s.name.clone(), LatencyKind::OneWay, Instant::ZERO);
        for (at, TunnelDelivery { payload, recovered }) in &rx_node.events {
            let Some(i) = payload_index(payload, n) else {
                continue;
            };
            if std::mem::replace(&mut seen[i as usize], true) {
                continue;
            }
            unique += 1;
            let latency = at.saturating_duration_since(msgs[i as usize].at);
            one_way.record(latency);
            latencies_us.push(latency.as_micros() as u64);
            if let Some(d) = recovered {
                added.record(*d);
            }
            let path = if recovered.is_some() {
                Path::Block
            } else {
                Path::Arrived
            };
            meter.delivered(i, path, Some(latency));
        }
        // Datagrams on the link both ways, for the channel's bandwidth.
        meter.sent_many(
            tx.sender.source_sent + tx.sender.repair_sent,
            tx.sender.bytes_sent,
        );
        meter.finish();
        let channel = meter.snapshot(Instant::ZERO + self.duration);
        let hdr = IP_UDP_OVERHEAD as f64;
        let bare = n as f64 * (self.size as f64 + hdr);
        let wire = tx.sender.bytes_sent as f64
            + (tx.sender.source_sent + tx.sender.repair_sent) as f64 * hdr;
        Ok(Run {
            link_loss: ratio(
                rx.receiver.lost_packets,
                rx.receiver.packets + rx.receiver.lost_packets,
            ),
            residual: 1.0 - unique as f64 / n.max(1) as f64,
            overhead: if bare > 0.0 { wire / bare - 1.0 } else { 0.0 },
            mean_fwnd: ratio(tx.sender.fwnd_sum, tx.sender.blocks),
            mean_k: ratio(tx.sender.source_sent, tx.sender.blocks),
            short_blocks: tx.sender.short_blocks,
            blocks: tx.sender.blocks,
            rebuilt: rx.receiver.recovered,
            unmet_blocks: tx.sender.unmet_blocks,
            added,
            one_way,
            latencies_us,
            sent: n,
            fwnd,
            channel,
            events: sim.stats().events,
        })
    }

    pub(super) fn run(&self, seed: u64, progress: Progress<'_>) -> Result<Report, ScenarioError> {
        let mut rows = Vec::new();
        let mut series = Vec::new();
        let mut events = 0;
        let mut summary = serde_json::Map::new();
        let mut channel_rows = Vec::new();
        for (i, s) in self.settings.iter().enumerate() {
            let r = self.run_one(seed, s, &mut |_| {})?;
            progress(Instant::from_nanos(i as u64 + 1));
            let (add, e2e) = (r.added.summary(), r.one_way.summary());
            let mut row = vec![
                json!(s.name),
                json!(s.fec_name()),
                json!(s.k),
                json!(r.link_loss),
                json!(r.residual),
                json!(r.overhead),
                json!(r.mean_k),
                json!(r.mean_fwnd),
                json!(r.short_blocks),
                json!(r.blocks),
                json!(r.rebuilt),
            ];
            row.extend(latency_cells(&add, false));
            row.extend(latency_cells(&e2e, false));
            rows.push(row);
            let c = &r.channel;
            channel_rows.push(vec![
                json!(s.name),
                json!(c.out.bitrate),
                json!(c.latency_total.p50_ms),
                json!(c.latency_total.p99_ms),
                json!(c.jitter_fig4_total_ms),
                json!(c.jitter_rfc3550_ms),
                json!(c.loss.wire_loss),
                json!(c.loss.residual_loss),
                json!(c.burst.mean_run),
                json!(c.burst.gilbert_p),
                json!(c.burst.gilbert_r),
                json!(c.paths.get("block")),
            ]);
            summary.insert(format!("residual[{}]", s.name), json!(r.residual));
            summary.insert(format!("overhead[{}]", s.name), json!(r.overhead));
            series.push(r.fwnd);
            events += r.events;
        }
        summary.insert("datagrams".into(), json!(self.datagrams()));
        summary.insert("events".into(), json!(events));
        let tables = vec![
            Table::new(
                "settings",
                &[
                    "setting",
                    "fec",
                    "k",
                    "link_loss",
                    "residual",
                    "overhead",
                    "mean_k",
                    "mean_fwnd",
                    "short_blocks",
                    "blocks",
                    "rebuilt",
                    "added_p50_ms",
                    "added_p99_ms",
                    "one_way_p50_ms",
                    "one_way_p99_ms",
                ],
                rows,
            ),
            // The channel measures every transport reports (Leigh et al.
            // §4; docs/metrics.md), from the receiving application: one-way
            // latency, both jitters, and the burstiness of the sources'
            // loss on the link with its fitted Gilbert chain.
            Table::new(
                "channel",
                &[
                    "setting",
                    "link_bitrate",
                    "one_way_p50_ms",
                    "one_way_p99_ms",
                    "jitter_fig4_ms",
                    "jitter_rfc3550_ms",
                    "wire_loss",
                    "residual_loss",
                    "mean_burst",
                    "gilbert_p",
                    "gilbert_r",
                    "rebuilt",
                ],
                channel_rows,
            ),
        ];
        let plots = vec![Plot {
            file: "fwnd".into(),
            title: format!("Tunnel repair window over time, {}", self.loss),
            x_label: "time (s)".into(),
            y_label: "Fwnd (repair packets per block)".into(),
            series,
            ..Default::default()
        }];
        Ok(report("tunnel", seed, summary, tables, plots))
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> TunnelScenario {
        TunnelScenario {
            duration: Duration::from_secs(5),
            settings: vec![
                TunnelSetting::new("none", ControllerKind::Static(0), 20, 2),
                TunnelSetting::new("big", ControllerKind::Static(70), 150, 100),
            ],
            ..TunnelScenario::default()
        }
    }

    fn cell(r: &Report, row: usize, col: &str) -> f64 {
        let t = &r.tables[0];
        let c = t.columns.iter().position(|x| x == col).expect("column");
        t.rows[row][c].as_f64().expect("number")
    }

    /// The same machine as on sockets: without FEC the residual is the
    /// link's loss; long blocks with 47% repairs rebuild nearly all of it,
    /// at about that overhead.
    #[test]
    fn long_blocks_rebuild_the_gilbert_channel_and_no_fec_does_not() {
        let r = small().run(1, &mut |_| {}).expect("runs");
        let (loss, none) = (cell(&r, 0, "link_loss"), cell(&r, 0, "residual"));
        assert!((0.07..0.13).contains(&loss), "link loss {loss}");
        assert!(
            (none - loss).abs() < 0.02,
            "no FEC: residual {none} vs loss {loss}"
        );
        let big = cell(&r, 1, "residual");
        assert!(big < 0.002, "k=150 m=70 residual {big}");
        let over = cell(&r, 1, "overhead");
        assert!((0.40..0.60).contains(&over), "overhead {over}");
        assert!(cell(&r, 1, "rebuilt") > 500.0);

        // The channel measures: without FEC the fitted Gilbert chain is the
        // link's own (p = 0.0278, r = 0.25), and long blocks add latency
        // and jitter where no FEC has none.
        let ch = |row: usize, col: &str| {
            let t = &r.tables[1];
            let c = t.columns.iter().position(|x| x == col).expect("column");
            t.rows[row][c].as_f64().unwrap_or(f64::NAN)
        };
        let (p, q) = (ch(0, "gilbert_p"), ch(0, "gilbert_r"));
        assert!((p - 0.027778).abs() < 0.2 * 0.027778, "p {p}");
        assert!((q - 0.25).abs() < 0.2 * 0.25, "r {q}");
        assert!((ch(0, "wire_loss") - loss).abs() < 0.01);
        assert_eq!(ch(0, "jitter_fig4_ms"), 0.0);
        assert!(ch(1, "jitter_fig4_ms") > 0.1 && ch(1, "one_way_p99_ms") > 10.0);
        assert_eq!(ch(1, "rebuilt"), cell(&r, 1, "rebuilt"));
    }

    #[test]
    fn the_same_seed_gives_the_same_report() {
        let s = TunnelScenario {
            duration: Duration::from_secs(2),
            ..small()
        };
        let a = s.run(7, &mut |_| {}).expect("runs");
        let b = s.run(7, &mut |_| {}).expect("runs");
        assert_eq!(a.tables[0].rows, b.tables[0].rows);
        let c = s.run(8, &mut |_| {}).expect("runs");
        assert_ne!(a.tables[0].rows, c.tables[0].rows);
    }

    #[test]
    fn impossible_settings_are_named() {
        let mut s = small();
        s.settings[0].k = 0;
        let e = s.validate().expect_err("k = 0");
        assert!(e.to_string().contains("none: tunnel k"), "{e}");
        let mut s = small();
        s.size = 5000;
        assert!(s.validate().is_err());
    }
}
