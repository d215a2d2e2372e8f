//! `geneva`: the evaluation of GENEVA (Matsuzono et al. §4).
//!
//! Streaming flows of block FEC (k source + Fwnd repair packets per SYN)
//! share the 1 Gbit/s dumbbell of Fig. 7 with long-lived or short-lived TCP
//! flows. One run of the scenario runs every controller of
//! [`controllers`](Geneva::controllers) against every TCP population of
//! [`tcp_flows`](Geneva::tcp_flows), with [`seeds`](Geneva::seeds) seeds
//! each, on one network, and reports the paper's metrics (§4.1):
//!
//! - **residual data loss rate**: source packets never delivered (not
//!   received, not rebuilt) over source packets sent;
//! - **bursty packet loss events**: more than three consecutive packets
//!   of a stream lost, per stream;
//! - **mean `Fwnd`** and, for GMIAD, mean total window `Wtot`;
//! - **TPindex** (eq. 9): mean TCP throughput against the controller's
//!   flows over mean TCP throughput against TFRC flows, same TCP
//!   population and seed.
//!
//! Figures 8 and 9 are `tcp_flows = [..]` sweeps at RTTmin 10 and 100 ms,
//! Table 1 is `tcp_flows = [0]` with short flows at 50% load, Table 2 is
//! `streams = 5`, `extra_stream_rates = ["60Mbps", "90Mbps"]` against 200
//! flows, and each run's traces (Figs. 10-12) are the `Fwnd` of the first
//! streams and the bottleneck's loss rate over time.

use std::collections::BTreeMap;
use std::time::Duration;

use groupwire_link::link::QueueLimit;
use groupwire_proto::block::{self, BlockSender, ReceiverConfig};
use groupwire_proto::control::ControllerKind;
use groupwire_proto::{Bitrate, DataSize, Instant};
use rand::Rng;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::tcp_dumbbell::{QueueSpec, ShortFlowSpec, bell_counters};
use super::{Plot, PlotStyle, Progress, Report, ScenarioError, Table, serde_duration};
use crate::blockfec::{BlockSink, BlockSource, stream_sender_config};
use crate::core::{NodeId, Simulator};
use crate::metrics::TimeSeries;
use crate::rng;
use crate::tcp::{HEADER_BYTES, TcpConfig};
use crate::tcpnode::{TcpApp, TcpHost, TcpSinkHost};
use crate::topology::{Dumbbell, DumbbellConfig};

/// Parameters of the `geneva` scenario. Defaults are the paper's Fig. 8
/// setting at one TCP population, shortened to 30 s (the paper: "about 3
/// minutes"; `--set duration=180s`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Geneva {
    /// Bottleneck rate (§4.1: 1 Gbit/s).
    pub bottleneck_rate: Bitrate,
    /// Two-way propagation delay, RTTmin (§4.1: 10 or 100 ms).
    #[serde(with = "serde_duration")]
    pub rtt: Duration,
    /// Access link rate (§4.1: 10 Gbit/s).
    pub access_rate: Bitrate,
    /// One-way delay of each access link (§4.1: "about 1 ms").
    #[serde(with = "serde_duration")]
    pub access_delay: Duration,
    /// Bottleneck queue: "auto" = min(BDP, 2048) packets (§4.1).
    pub queue: QueueSpec,
    /// Bytes per packet on the wire, every flow (§4.1: 1500).
    pub packet_size: u32,
    /// Streaming flows at [`stream_rate`](Self::stream_rate) (§4.2: 10).
    pub streams: u32,
    /// Data rate of each of those (§4.2: 30 Mbit/s).
    pub stream_rate: Bitrate,
    /// More streams at other rates (Table 2: 60 and 90 Mbit/s).
    pub extra_stream_rates: Vec<Bitrate>,
    /// Controllers compared, each in its own run on the same network.
    pub controllers: Vec<ControllerKind>,
    /// Long-lived TCP populations, one run each.
    pub tcp_flows: Vec<u32>,
    /// Short-lived TCP flows in every run, if set (Table 1).
    pub short_flows: Option<ShortFlowSpec>,
    /// Seeds per (population, controller); run `i` uses `seed + i`.
    pub seeds: u32,
    /// Simulated time per run.
    #[serde(with = "serde_duration")]
    pub duration: Duration,
    /// Metrics are measured after this.
    #[serde(with = "serde_duration")]
    pub warmup: Duration,
    /// Flows start uniformly at random in `[0, start_spread)`.
    #[serde(with = "serde_duration")]
    pub start_spread: Duration,
    /// The report interval, SYN (§3.2.1: 10 ms).
    #[serde(with = "serde_duration")]
    pub syn: Duration,
    /// How long the receiver waits for a block before giving a packet up
    /// (§3.2.4 budgets about 150 ms of FEC delay).
    #[serde(with = "serde_duration")]
    pub max_wait: Duration,
    /// The TCP flows' lower bound on the retransmission timeout (the
    /// simulator's default, 200 ms as Linux and the ns-3 validation; RFC
    /// 6298 §2.4 says 1 s).
    #[serde(with = "serde_duration")]
    pub tcp_min_rto: Duration,
    /// Streams whose `Fwnd` is traced (Figs. 10-12 show three).
    pub traced_streams: u32,
    /// Trace resolution (the paper averages link loss over RTTmin).
    #[serde(with = "serde_duration")]
    pub sample_interval: Duration,
    /// Send-time jitter of every host (default 0: exact send times, as in
    /// the paper's ns-3 runs): each packet leaves its host up to this much
    /// later, in order. A few tens of microseconds break the phase locking
    /// of the streams' exact periods with the drop-tail queue, which makes
    /// one run's stream loss a point on a sawtooth (see `tcp-dumbbell`'s
    /// `send_jitter` and docs/results/ns3-validation.md).
    #[serde(with = "serde_duration")]
    pub send_jitter: Duration,
}

impl Default for Geneva {
    fn default() -> Self {
        Self {
            bottleneck_rate: Bitrate::gbps(1),
            rtt: Duration::from_millis(10),
            access_rate: Bitrate::gbps(10),
            access_delay: Duration::from_millis(1),
            queue: QueueSpec::Auto,
            packet_size: 1500,
            streams: 10,
            stream_rate: Bitrate::mbps(30),
            extra_stream_rates: Vec::new(),
            controllers: ControllerKind::PAPER.to_vec(),
            tcp_flows: vec![200],
            short_flows: None,
            seeds: 1,
            duration: Duration::from_secs(30),
            warmup: Duration::from_secs(5),
            start_spread: Duration::from_secs(1),
            syn: block::DEFAULT_SYN,
            max_wait: Duration::from_millis(150),
            tcp_min_rto: TcpConfig::default().min_rto,
            traced_streams: 3,
            send_jitter: Duration::ZERO,
            sample_interval: Duration::from_millis(100),
        }
    }
}

/// One run's measurements (means over streams, over the measured window).
#[derive(Debug, Clone, Default)]
struct RunResult {
    data_rate_bps: f64,
    data_loss_rate: f64,
    packet_loss_rate: f64,
    mean_fwnd: f64,
    mean_wtot: Option<f64>,
    bursty_events_per_stream: f64,
    tcp_throughput_bps: f64,
    link_loss_rate: f64,
    refused: u64,
    per_stream: Vec<StreamResult>,
    fwnd_traces: Vec<TimeSeries>,
    link_loss_trace: TimeSeries,
    events: u64,
}

#[derive(Debug, Clone)]
struct StreamResult {
    rate: Bitrate,
    /// Its counters over the measurement window.
    counts: Snap,
    wtot: Option<f64>,
}

/// Counters of one stream at one instant.
#[derive(Debug, Clone, Copy, Default)]
struct Snap {
    sent: u64,
    unrecovered: u64,
    packets: u64,
    lost: u64,
    fwnd_sum: u64,
    blocks: u64,
    bursty: u64,
}

impl Snap {
    /// What was counted from `before` to `self`.
    fn since(&self, before: &Self) -> Self {
        Self {
            sent: self.sent - before.sent,
            unrecovered: self.unrecovered - before.unrecovered,
            packets: self.packets - before.packets,
            lost: self.lost - before.lost,
            fwnd_sum: self.fwnd_sum - before.fwnd_sum,
            blocks: self.blocks - before.blocks,
            bursty: self.bursty - before.bursty,
        }
    }
}

impl Geneva {
    fn stream_rates(&self) -> Vec<Bitrate> {
        let mut r = vec![self.stream_rate; self.streams as usize];
        r.extend(self.extra_stream_rates.iter().copied());
        r
    }

    fn queue_limit(&self) -> QueueLimit {
        self.queue
            .limit(self.bottleneck_rate, self.rtt, self.packet_size)
    }

    /// Runs in the whole grid (for progress).
    pub(super) fn total_runs(&self) -> u64 {
        (self.tcp_flows.len() * self.controllers.len()) as u64 * u64::from(self.seeds)
    }

    pub(super) fn validate(&self) -> Result<(), ScenarioError> {
        let bad = |key, why: &str| {
            Err(ScenarioError::Invalid {
                key,
                why: why.to_owned(),
            })
        };
        if self.stream_rates().is_empty() {
            return bad("streams", "there must be at least one streaming flow");
        }
        if self.controllers.is_empty() {
            return bad("controllers", "name at least one, e.g. [\"gmiad\"]");
        }
        if self.tcp_flows.is_empty() {
            return bad(
                "tcp_flows",
                "give at least one population, e.g. [200] or [0]",
            );
        }
        if self.tcp_flows.iter().any(|&n| n > 20_000) {
            return bad("tcp_flows", "at most 20000 flows");
        }
        if self.seeds == 0 || self.seeds > 100 {
            return bad("seeds", "must be between 1 and 100");
        }
        if self.packet_size <= HEADER_BYTES || self.packet_size > 9000 {
            return bad("packet_size", "must be between 41 and 9000 bytes");
        }
        if self.warmup >= self.duration {
            return bad("warmup", "must be shorter than duration");
        }
        if self.rtt < self.access_delay * 4 {
            return bad("rtt", "must be at least four access delays");
        }
        if self.syn < Duration::from_millis(1) || self.syn > Duration::from_secs(1) {
            return bad("syn", "must be between 1ms and 1s");
        }
        if self.sample_interval.is_zero() || self.sample_interval > self.duration {
            return bad("sample_interval", "must be positive and at most duration");
        }
        if matches!(
            self.queue_limit(),
            QueueLimit::Packets(0) | QueueLimit::Bytes(0)
        ) {
            return bad("queue", "must hold at least one packet");
        }
        if let Some(s) = &self.short_flows {
            if !(s.rate > 0.0 && s.rate.is_finite() && s.shape > 1.0 && s.mean_packets >= 1.0) {
                return bad(
                    "short_flows",
                    "rate > 0, shape > 1 and mean_packets >= 1 are needed",
                );
            }
        }
        Ok(())
    }

    pub(super) fn run(&self, seed: u64, progress: Progress<'_>) -> Result<Report, ScenarioError> {
        let mut results: BTreeMap<(u32, usize, u32), RunResult> = BTreeMap::new();
        let mut done = 0u64;
        for &n_tcp in &self.tcp_flows {
            for s in 0..self.seeds {
                for (ci, &ctrl) in self.controllers.iter().enumerate() {
                    let r = self.run_one(n_tcp, ctrl, seed + u64::from(s))?;
                    results.insert((n_tcp, ci, s), r);
                    done += 1;
                    progress(Instant::from_nanos(done));
                }
            }
        }
        Ok(self.report(seed, &results))
    }

    fn run_one(
        &self,
        n_tcp: u32,
        ctrl: ControllerKind,
        seed: u64,
    ) -> Result<RunResult, ScenarioError> {
        let mut sim = Simulator::new(seed);
        let tcp = TcpConfig {
            mss: self.packet_size - HEADER_BYTES,
            min_rto: self.tcp_min_rto,
            ..TcpConfig::default()
        };
        let end = Instant::ZERO + self.duration;
        let warmup = Instant::ZERO + self.warmup;
        let rates = self.stream_rates();
        let n_str = rates.len();
        let n_tcp = n_tcp as usize;
        let n_short = usize::from(self.short_flows.is_some());
        let pairs = n_str + n_tcp + n_short;
        let base = sim.next_node_id().0;
        let id = |i: usize| NodeId(base + u32::try_from(i).expect("validated counts fit u32"));
        let left: Vec<NodeId> = (0..pairs).map(id).collect();
        let right: Vec<NodeId> = (pairs..2 * pairs).map(id).collect();
        let mut starts = rng::stream(seed, "flow-start", 0);
        let packet = DataSize::bytes(u64::from(self.packet_size));

        for (i, &rate) in rates.iter().enumerate() {
            let k = block::k_for_rate(rate, packet, self.syn);
            let mut cfg = stream_sender_config(right[i], k);
            cfg.syn = self.syn;
            cfg.controller = ctrl.into();
            cfg.wire_size = Some(self.packet_size);
            let start = Instant::ZERO + self.start_spread.mul_f64(starts.random::<f64>());
            sim.add_node(Box::new(BlockSource::new(
                left[i],
                BlockSender::new(cfg),
                rate,
                self.packet_size,
                start,
                end,
            )));
        }
        for i in n_str..n_str + n_tcp {
            let mut host = TcpHost::new(left[i], tcp.clone());
            let start = Instant::ZERO + self.start_spread.mul_f64(starts.random::<f64>());
            host.connect(0, right[i], TcpApp::Bulk, start);
            sim.add_node(Box::new(host));
        }
        if let Some(s) = &self.short_flows {
            let i = n_str + n_tcp;
            sim.add_node(Box::new(s.host(left[i], right[i], tcp.clone())));
        }
        for (i, &r) in right.iter().enumerate() {
            if i < n_str {
                let cfg = ReceiverConfig {
                    syn: self.syn,
                    max_wait: self.max_wait,
                    tfrc: ctrl.is_rate_controlled(),
                    wire_size: Some(self.packet_size),
                    ..ReceiverConfig::default()
                };
                sim.add_node(Box::new(BlockSink::new(r, cfg)));
            } else {
                sim.add_node(Box::new(TcpSinkHost::new(r, tcp.clone())));
            }
        }
        let topo = DumbbellConfig {
            bottleneck_rate: self.bottleneck_rate,
            rtt: self.rtt,
            access_rate: self.access_rate,
            access_delay: self.access_delay,
            queue: self.queue_limit(),
            loss: groupwire_link::loss::LossModel::None,
            host_jitter: self.send_jitter,
        };
        let bell = Dumbbell::build(&mut sim, &topo, &left, &right)?;

        let snap = |sim: &Simulator| -> Vec<Snap> {
            let view = sim.view();
            (0..n_str)
                .map(|i| {
                    let tx = view
                        .node::<BlockSource>(left[i])
                        .map(|s| s.sender().stats());
                    let rx = view
                        .node::<BlockSink>(right[i])
                        .map(|s| s.receiver().stats());
                    let (tx, rx) = (tx.unwrap_or_default(), rx.unwrap_or_default());
                    Snap {
                        sent: tx.source_sent,
                        unrecovered: rx.unrecovered,
                        packets: rx.packets,
                        lost: rx.lost_packets,
                        fwnd_sum: tx.fwnd_sum,
                        blocks: tx.blocks,
                        bursty: rx.bursty_loss_events,
                    }
                })
                .collect()
        };
        let tcp_delivered = |sim: &Simulator| -> u64 {
            let view = sim.view();
            right[n_str..]
                .iter()
                .filter_map(|&r| view.node::<TcpSinkHost>(r))
                .map(TcpSinkHost::delivered_total)
                .sum()
        };
        let traced = (self.traced_streams as usize).min(n_str);
        let mut fwnd_traces: Vec<TimeSeries> = (0..traced)
            .map(|i| TimeSeries::new(format!("stream {i} ({})", rates[i])))
            .collect();
        let mut link_loss_trace = TimeSeries::new("bottleneck loss rate");
        let mut wtot_sum = 0.0;
        let mut wtot_n = 0u64;
        let mut at_warmup = (snap(&sim), 0u64, bell_counters(&sim, bell.bottleneck));
        let mut last_link = bell_counters(&sim, bell.bottleneck);
        let mut t = Instant::ZERO;
        while t < end {
            let mut next = (t + self.sample_interval).min(end);
            if t < warmup && next > warmup {
                next = warmup;
            }
            sim.run_until(next, &mut |_| {});
            let now = sim.now();
            let secs = now.as_secs_f64();
            let view = sim.view();
            for (i, tr) in fwnd_traces.iter_mut().enumerate() {
                if let Some(s) = view.node::<BlockSource>(left[i]) {
                    tr.push(secs, s.sender().fwnd() as f64);
                }
            }
            let link = bell_counters(&sim, bell.bottleneck);
            let offered = link.0 - last_link.0;
            link_loss_trace.push(
                secs,
                if offered == 0 {
                    0.0
                } else {
                    (link.1 - last_link.1) as f64 / offered as f64
                },
            );
            last_link = link;
            if now > warmup {
                for &l in &left[..n_str] {
                    if let Some(w) = view
                        .node::<BlockSource>(l)
                        .and_then(|s| s.sender().controller().total_window())
                    {
                        wtot_sum += w;
                        wtot_n += 1;
                    }
                }
            }
            if now == warmup {
                at_warmup = (snap(&sim), tcp_delivered(&sim), link);
            }
            t = now;
        }

        let window = (end - warmup).as_secs_f64();
        let fin = snap(&sim);
        let per_stream: Vec<StreamResult> = fin
            .iter()
            .zip(&at_warmup.0)
            .enumerate()
            .map(|(i, (b, a))| StreamResult {
                rate: rates[i],
                counts: b.since(a),
                wtot: None,
            })
            .collect();
        let sum = |f: fn(&Snap) -> u64| per_stream.iter().map(|s| f(&s.counts)).sum::<u64>();
        let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
        let link = bell_counters(&sim, bell.bottleneck);
        let tcp_bytes = tcp_delivered(&sim) - at_warmup.1;
        let tcp_count = (n_tcp + n_short).max(1);
        let view = sim.view();
        let refused = (0..n_str)
            .filter_map(|i| view.node::<BlockSource>(left[i]))
            .map(|s| s.refused)
            .sum();
        Ok(RunResult {
            data_rate_bps: sum(|s| s.sent) as f64 * f64::from(self.packet_size) * 8.0
                / window
                / n_str as f64,
            data_loss_rate: ratio(sum(|s| s.unrecovered), sum(|s| s.sent)),
            packet_loss_rate: ratio(sum(|s| s.lost), sum(|s| s.lost) + sum(|s| s.packets)),
            mean_fwnd: ratio(sum(|s| s.fwnd_sum), sum(|s| s.blocks)),
            mean_wtot: (wtot_n > 0).then(|| wtot_sum / wtot_n as f64),
            bursty_events_per_stream: sum(|s| s.bursty) as f64 / n_str as f64,
            // Long-lived flows: mean per flow. Short flows only: their aggregate.
            tcp_throughput_bps: tcp_bytes as f64 * 8.0 / window / tcp_count as f64,
            link_loss_rate: ratio(link.1 - at_warmup.2.1, link.0 - at_warmup.2.0),
            refused,
            per_stream,
            fwnd_traces,
            link_loss_trace,
            events: view.stats().events,
        })
    }

    fn report(&self, seed: u64, results: &BTreeMap<(u32, usize, u32), RunResult>) -> Report {
        let tfrc = self
            .controllers
            .iter()
            .position(|c| *c == ControllerKind::Tfrc);
        let tp_index = |n: u32, ci: usize, s: u32| -> Option<f64> {
            let base = results.get(&(n, tfrc?, s))?.tcp_throughput_bps;
            let me = results.get(&(n, ci, s))?.tcp_throughput_bps;
            (base > 0.0).then(|| me / base)
        };
        let mut run_rows = Vec::new();
        for (&(n, ci, s), r) in results {
            run_rows.push(vec![
                json!(n),
                json!(self.controllers[ci].to_string()),
                json!(seed + u64::from(s)),
                json!(r.data_rate_bps / 1e6),
                json!(r.data_loss_rate),
                json!(r.packet_loss_rate),
                json!(r.mean_fwnd),
                json!(r.mean_wtot),
                json!(r.bursty_events_per_stream),
                json!(tp_index(n, ci, s)),
                json!(r.tcp_throughput_bps / 1e6),
                json!(r.link_loss_rate),
                json!(r.refused),
                json!(r.events),
            ]);
        }
        // Means over seeds, per (population, controller).
        let mut cells: BTreeMap<(u32, usize), Vec<(u32, &RunResult)>> = BTreeMap::new();
        for (&(n, ci, s), r) in results {
            cells.entry((n, ci)).or_default().push((s, r));
        }
        let mean = |v: &[f64]| {
            if v.is_empty() {
                f64::NAN
            } else {
                v.iter().sum::<f64>() / v.len() as f64
            }
        };
        let mut cell_rows = Vec::new();
        let mut cell_means: BTreeMap<(u32, usize), [f64; 6]> = BTreeMap::new();
        for (&(n, ci), runs) in &cells {
            let f = |g: fn(&RunResult) -> f64| {
                mean(&runs.iter().map(|(_, r)| g(r)).collect::<Vec<_>>())
            };
            let tpi: Vec<f64> = runs
                .iter()
                .filter_map(|(s, _)| tp_index(n, ci, *s))
                .collect();
            let wt: Vec<f64> = runs.iter().filter_map(|(_, r)| r.mean_wtot).collect();
            let m = [
                f(|r| r.data_loss_rate),
                f(|r| r.bursty_events_per_stream),
                f(|r| r.mean_fwnd),
                if tpi.is_empty() { f64::NAN } else { mean(&tpi) },
                f(|r| r.packet_loss_rate),
                f(|r| r.link_loss_rate),
            ];
            cell_means.insert((n, ci), m);
            cell_rows.push(vec![
                json!(n),
                json!(self.controllers[ci].to_string()),
                json!(runs.len()),
                json!(f(|r| r.data_rate_bps) / 1e6),
                json!(m[0]),
                json!(m[4]),
                json!(m[2]),
                json!(if wt.is_empty() {
                    Value::Null
                } else {
                    json!(mean(&wt))
                }),
                json!(m[1]),
                json!(if m[3].is_nan() {
                    Value::Null
                } else {
                    json!(m[3])
                }),
                json!(f(|r| r.tcp_throughput_bps) / 1e6),
                json!(m[5]),
            ]);
        }

        // The bar: GMIAD's residual loss below static-small's, and
        // its TPindex within 0.05 of static-small's, per population.
        let gm = self
            .controllers
            .iter()
            .position(|c| *c == ControllerKind::Gmiad);
        let ss = self
            .controllers
            .iter()
            .position(|c| *c == ControllerKind::StaticSmall);
        let mut summary = serde_json::Map::new();
        let mut put = |k: &str, v: Value| {
            summary.insert(k.to_owned(), v);
        };
        put("runs", json!(self.total_runs()));
        put("rtt_ms", json!(self.rtt.as_secs_f64() * 1e3));
        put("streams", json!(self.stream_rates().len()));
        put("duration_s", json!(self.duration.as_secs_f64()));
        put("seeds_per_cell", json!(self.seeds));
        put(
            "events",
            json!(results.values().map(|r| r.events).sum::<u64>()),
        );
        for (ci, c) in self.controllers.iter().enumerate() {
            let of = |j: usize| {
                mean(
                    &cell_means
                        .iter()
                        .filter(|((_, i), _)| *i == ci)
                        .map(|(_, m)| m[j])
                        .filter(|x| !x.is_nan())
                        .collect::<Vec<_>>(),
                )
            };
            put(&format!("{c}_data_loss_rate"), json!(of(0)));
            put(&format!("{c}_mean_fwnd"), json!(of(2)));
            let tpi = of(3);
            put(
                &format!("{c}_tpindex"),
                if tpi.is_nan() {
                    Value::Null
                } else {
                    json!(tpi)
                },
            );
        }
        // The bar GENEVA is held to here: in each population GMIAD loses
        // fewer data packets than static-small and keeps its TPindex within
        // 0.05 of static-small's.
        let mut bar_rows = Vec::new();
        if let (Some(gm), Some(ss)) = (gm, ss) {
            let mut lower = 0;
            let mut close = 0;
            let mut both = 0;
            for &n in &self.tcp_flows {
                let (Some(g), Some(s)) = (cell_means.get(&(n, gm)), cell_means.get(&(n, ss)))
                else {
                    continue;
                };
                let l = g[0] < s[0];
                let c = (g[3] - s[3]).abs() <= 0.05;
                lower += usize::from(l);
                close += usize::from(c);
                both += usize::from(l && c);
                let yes = |b: bool| json!(if b { "yes" } else { "no" });
                let num = |x: f64| if x.is_nan() { Value::Null } else { json!(x) };
                bar_rows.push(vec![
                    json!(n),
                    num(g[0]),
                    num(s[0]),
                    num(g[3]),
                    num(s[3]),
                    yes(l),
                    yes(c),
                    yes(l && c),
                ]);
            }
            put("gmiad_lower_loss_than_static_small", json!(lower));
            put("gmiad_tpindex_within_0_05", json!(close));
            put("gmiad_meets_both", json!(both));
            put("populations", json!(self.tcp_flows.len()));
        }

        // Per-stream table of the first population's first seed (Table 2).
        let mut stream_rows = Vec::new();
        if let Some(&n0) = self.tcp_flows.first() {
            for (ci, c) in self.controllers.iter().enumerate() {
                if let Some(r) = results.get(&(n0, ci, 0)) {
                    for (i, stream) in r.per_stream.iter().enumerate() {
                        let s = &stream.counts;
                        let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
                        stream_rows.push(vec![
                            json!(c.to_string()),
                            json!(i),
                            json!(stream.rate.as_bps() as f64 / 1e6),
                            json!(ratio(s.unrecovered, s.sent)),
                            json!(ratio(s.lost, s.lost + s.packets)),
                            json!(ratio(s.fwnd_sum, s.blocks)),
                            json!(s.bursty),
                            json!(stream.wtot),
                        ]);
                    }
                }
            }
        }
        let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
        // What each run measures, and each cell's summary of its runs.
        const MEASURES: &[&str] = &[
            "data_rate_mbps",
            "data_loss_rate",
            "packet_loss_rate",
            "mean_fwnd",
            "mean_wtot",
            "bursty_events_per_stream",
            "tpindex",
            "tcp_throughput_mbps",
            "link_loss_rate",
        ];
        let tables = vec![
            Table {
                file: "runs".into(),
                columns: s(&[
                    &["tcp_flows", "controller", "seed"],
                    MEASURES,
                    &["refused", "events"],
                ]
                .concat()),
                rows: run_rows,
            },
            Table {
                file: "cells".into(),
                columns: s(&[&["tcp_flows", "controller", "seeds"], MEASURES].concat()),
                rows: cell_rows,
            },
            Table {
                file: "streams".into(),
                columns: s(&[
                    "controller",
                    "stream",
                    "rate_mbps",
                    "data_loss_rate",
                    "packet_loss_rate",
                    "mean_fwnd",
                    "bursty_events",
                    "mean_wtot",
                ]),
                rows: stream_rows,
            },
            Table {
                file: "bar".into(),
                columns: s(&[
                    "tcp_flows",
                    "gmiad_data_loss",
                    "static_small_data_loss",
                    "gmiad_tpindex",
                    "static_small_tpindex",
                    "lower_loss",
                    "tpindex_within_0_05",
                    "both",
                ]),
                rows: bar_rows,
            },
        ];

        // Figs. 8/9: each metric against the TCP population, one line per
        // FEC controller. TFRC is the reference of TPindex and carries no
        // FEC; like the paper's figures, the plots leave it out (its data
        // loss would set the scale), the tables keep it.
        let metric_plot = |j: usize, file: &str, title: &str, y: &str| {
            let series = self
                .controllers
                .iter()
                .enumerate()
                .filter(|(_, c)| !c.is_rate_controlled())
                .map(|(ci, c)| {
                    let mut ts = TimeSeries::new(c.to_string());
                    for &n in &self.tcp_flows {
                        if let Some(m) = cell_means.get(&(n, ci)) {
                            if !m[j].is_nan() {
                                ts.push(f64::from(n), m[j]);
                            }
                        }
                    }
                    ts
                })
                .filter(|ts| !ts.points.is_empty())
                .collect();
            Plot {
                file: file.into(),
                title: format!("{title} (RTTmin {} ms)", self.rtt.as_millis()),
                x_label: "long-lived TCP flows".into(),
                y_label: y.into(),
                series,
                style: if self.tcp_flows.len() > 1 {
                    PlotStyle::Lines
                } else {
                    PlotStyle::Points
                },
                ..Default::default()
            }
        };
        let mut plots = vec![
            metric_plot(
                0,
                "data_loss",
                "(a) residual data loss rate",
                "data loss rate",
            ),
            metric_plot(
                1,
                "bursty_events",
                "(b) bursty packet loss events",
                "events per stream",
            ),
            metric_plot(2, "fwnd", "(c) mean FEC window size", "Fwnd (packets)"),
            metric_plot(3, "tpindex", "(d) TCP performance index", "TPindex"),
        ];
        // Figs. 10-12: the GMIAD (or first) controller's traces, first run.
        let traced = gm.unwrap_or(0);
        if let Some(r) = self
            .tcp_flows
            .first()
            .and_then(|&n| results.get(&(n, traced, 0)))
        {
            plots.push(Plot {
                file: "fwnd_trace".into(),
                title: format!(
                    "Fwnd of selected {} streams ({} TCP flows, RTTmin {} ms)",
                    self.controllers[traced],
                    self.tcp_flows[0],
                    self.rtt.as_millis()
                ),
                x_label: "time (s)".into(),
                y_label: "Fwnd (packets)".into(),
                series: r.fwnd_traces.clone(),
                ..Default::default()
            });
            plots.push(Plot {
                file: "link_loss_trace".into(),
                title: "Packet loss rate on the bottleneck".into(),
                x_label: "time (s)".into(),
                y_label: "loss rate".into(),
                series: vec![r.link_loss_trace.clone()],
                ..Default::default()
            });
        }
        Report {
            scenario: "geneva".into(),
            seed,
            summary,
            tables,
            plots,
        }
    }
}
