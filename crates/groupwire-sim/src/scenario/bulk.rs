//! `bulk`: bulk data over a long fat network (Leigh et al. §4.2).
//!
//! **Figure 6** (part `fig6`): a 50 MB payload with Reliable Blast UDP
//! ([`groupwire_proto::rbudp`], the machines the socket drivers run) at
//! sending rates of 20 to 90 Mbit/s over a 100 Mbit/s path between Chicago
//! (EVL) and Amsterdam (SARA): the effective bandwidth (payload over the
//! whole transfer's time) and the number of NAK rounds. The paper: 20 →
//! 19.7 Mbit/s; 40 → 38.5; 60 → 54-57 with one NAK; 80 → 56-70 with two;
//! 90 → 61-77 with three.
//!
//! The model:
//!
//! - **The path** is the one the `leigh` scenario uses for Figure 5: a
//!   100 Mbit/s drop-tail bottleneck of 1000 packets behind fast access
//!   links, a 150 ms round trip (the paper's "average round trip time of
//!   150ms" between Chicago and Amsterdam, §4.2), no random loss of its own
//!   (the paper's 20 and 40 Mbit/s blasts lost not one packet of about
//!   36 000, so the path dropped less than 1 in 36 000 of them when not
//!   full).
//! - **Competing traffic**: the paper says the link was "non-QoS
//!   provisioned" and that "interference from competing traffic streams was
//!   possible and likely", without a figure. Here, Poisson UDP at
//!   `competing` (default 26 Mbit/s of 1000-byte datagrams: the background
//!   the `leigh` scenario takes for the same path in Figure 5, chosen there
//!   for Figure 5's loss and not changed here), so Figure 6 is a prediction
//!   of that model, not a fit.
//! - **RBUDP**: 1400-byte packets (a 1452-byte datagram). The sending rate
//!   counts the payload (`rate_is_payload`): the paper's 20 Mbit/s blast
//!   gave 19.7 Mbit/s of effective bandwidth, 98.5%, where a rate counted
//!   on the wire would leave at most 1400/1452 = 96.4% for the payload
//!   before any round trip, so the paper's application must have paced its
//!   payload (a 90 Mbit/s blast is then 93.3 Mbit/s on the wire). Control
//!   messages on a TCP connection across the same
//!   path (`stream_node`); the effective bandwidth from the sender's Start
//!   to its receipt of the receiver's Done, which includes the handshake
//!   and the end-of-blast exchange of every round. Each rate runs with the
//!   fixed rate (the paper) and, beside it, groupwire's adaptive rate,
//!   on the same cross traffic.
//! - **TCP on the same path** (the paper: "TCP typically incurs a 20%
//!   bandwidth loss"): the simulator's TCP (NewReno with SACK) moving the
//!   same payload with a 64 KiB window (the default of the paper's era)
//!   and with a window of the path's bandwidth-delay product, timed from
//!   one round trip before its first segment (the model has no handshake).
//!
//! Each cell runs `runs` times on different cross-traffic draws (the paper
//! gives ranges); fixed, adaptive and TCP see the same draws.

use std::time::Duration;

use groupwire_link::link::QueueLimit;
use groupwire_link::loss::LossModel;
use groupwire_proto::rbudp::{
    MAX_PACKET_SIZE, Pattern, PatternSink, RateControl, RbudpReceiver, RbudpSender, ReceiverConfig,
    SenderConfig, SenderEvent,
};
use groupwire_proto::units::IP_UDP_OVERHEAD;
use groupwire_proto::wire::rbudp::DATA_HEADER_LEN;
use groupwire_proto::{Bitrate, DataSize, Instant};
use rand::Rng;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{Plot, PlotStyle, Report, ScenarioError, Table, serde_duration};
use crate::core::{NodeId, Simulator, addr_of};
use crate::metrics::TimeSeries;
use crate::rng;
use crate::stream_node::{StreamMachineNode, stream_pair};
use crate::tcp::TcpConfig;
use crate::tcpnode::{TcpApp, TcpHost, TcpSinkHost};
use crate::topology::{Dumbbell, DumbbellConfig};
use crate::traffic::{Message, UdpSender, UdpSink};

/// Parameters of the `bulk` scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Bulk {
    /// The bottleneck's rate (the paper's 100 Mbit/s link).
    pub link_rate: Bitrate,
    /// Round-trip propagation delay of the path.
    #[serde(with = "serde_duration")]
    pub rtt: Duration,
    /// Drop-tail queue at the bottleneck, in packets.
    pub queue: u32,
    /// The path's own random loss on the bottleneck.
    pub path_loss: LossModel,
    /// Competing traffic on the bottleneck, Poisson UDP.
    pub competing: Bitrate,
    /// Bytes per competing datagram.
    pub competing_size: u32,
    /// The payload (the paper's 50 MB file).
    pub size: DataSize,
    /// RBUDP payload bytes per packet.
    pub packet_size: u32,
    /// RBUDP sending rates (Figure 6's rows).
    pub rates: Vec<Bitrate>,
    /// Whether a sending rate counts the payload only (`true`, as the
    /// paper's must: see the module docs) or the datagrams on the wire,
    /// headers included (the machine's own unit).
    pub rate_is_payload: bool,
    /// Also run each rate with the adaptive rate.
    pub adaptive: bool,
    /// Also move the payload with the simulator's TCP, default and tuned.
    pub tcp: bool,
    /// The untuned TCP's window.
    pub tcp_default_window: DataSize,
    /// The tuned TCP's window; `None`: the path's bandwidth-delay product.
    pub tcp_tuned_window: Option<DataSize>,
    /// Runs per cell, each on its own cross-traffic draw.
    pub runs: u32,
    /// Which experiments: `fig6`.
    pub parts: Vec<String>,
    /// A run still unfinished after this long is reported as such.
    #[serde(with = "serde_duration")]
    pub horizon: Duration,
}

impl Default for Bulk {
    fn default() -> Self {
        Self {
            link_rate: Bitrate::mbps(100),
            rtt: Duration::from_millis(150),
            queue: 1000,
            path_loss: LossModel::None,
            competing: Bitrate::mbps(26),
            competing_size: 1000,
            size: DataSize::bytes(50_000_000),
            packet_size: 1400,
            rates: [20, 40, 60, 80, 90].map(Bitrate::mbps).to_vec(),
            rate_is_payload: true,
            adaptive: true,
            tcp: true,
            tcp_default_window: DataSize::kib(64),
            tcp_tuned_window: None,
            runs: 5,
            parts: vec!["fig6".into()],
            horizon: Duration::from_secs(600),
        }
    }
}

const PARTS: [&str; 1] = ["fig6"];

/// Figure 6: sending rate (Mbit/s), effective bandwidth low and high
/// (Mbit/s), NAK rounds.
const PAPER_FIG6: [(u64, f64, f64, u32); 5] = [
    (20, 19.7, 19.7, 0),
    (40, 38.5, 38.5, 0),
    (60, 54.0, 57.0, 1),
    (80, 56.0, 70.0, 2),
    (90, 61.0, 77.0, 3),
];

/// What one transfer gave.
#[derive(Debug, Clone, Default)]
struct Outcome {
    /// Payload over the transfer's time, Mbit/s; `None` if unfinished.
    effective: Option<f64>,
    elapsed: Option<f64>,
    nak_rounds: Option<u32>,
    first_loss: Option<f64>,
    next_rate: Option<f64>,
    datagrams: u64,
    retransmitted: u64,
    /// Retransmission timeouts of the control connection (both ways).
    control_timeouts: u64,
    events: u64,
}

/// One scheme of the comparison.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Scheme {
    Rbudp { rate: Bitrate, adaptive: bool },
    Tcp { window: u64, tuned: bool },
}

impl Scheme {
    fn name(self) -> &'static str {
        match self {
            Scheme::Rbudp {
                adaptive: false, ..
            } => "rbudp fixed",
            Scheme::Rbudp { adaptive: true, .. } => "rbudp adaptive",
            Scheme::Tcp { tuned: false, .. } => "tcp default window",
            Scheme::Tcp { tuned: true, .. } => "tcp bdp window",
        }
    }
}

impl Bulk {
    fn schemes(&self) -> Vec<Scheme> {
        let mut v = Vec::new();
        for &rate in &self.rates {
            v.push(Scheme::Rbudp {
                rate,
                adaptive: false,
            });
            if self.adaptive {
                v.push(Scheme::Rbudp {
                    rate,
                    adaptive: true,
                });
            }
        }
        if self.tcp {
            let bdp = self.link_rate.bytes_in(self.rtt);
            v.push(Scheme::Tcp {
                window: self.tcp_default_window.as_bytes(),
                tuned: false,
            });
            v.push(Scheme::Tcp {
                window: self.tcp_tuned_window.map_or(bdp, DataSize::as_bytes),
                tuned: true,
            });
        }
        v
    }

    /// Transfers in the whole scenario (the progress count).
    pub(super) fn total_runs(&self) -> u64 {
        self.schemes().len() as u64 * u64::from(self.runs)
    }

    pub(super) fn validate(&self) -> Result<(), ScenarioError> {
        let invalid = |key, why: String| Err(ScenarioError::Invalid { key, why });
        if self.link_rate.as_bps() == 0 {
            return invalid("link_rate", "must be positive".into());
        }
        if self.rtt.is_zero() || self.rtt > Duration::from_secs(10) {
            return invalid("rtt", "must be from 1us to 10s".into());
        }
        if self.queue == 0 || self.competing_size == 0 {
            return invalid("queue", "queue and competing_size must be positive".into());
        }
        let size = self.size.as_bytes();
        if size == 0 || size > 10_000_000_000 {
            return invalid("size", "must be from 1 byte to 10GB".into());
        }
        if !(1..=MAX_PACKET_SIZE).contains(&self.packet_size) {
            return invalid(
                "packet_size",
                format!("must be from 1 to {MAX_PACKET_SIZE}"),
            );
        }
        if self.rates.iter().any(|r| r.as_bps() == 0) {
            return invalid("rates", "every rate must be positive".into());
        }
        if !(1..=100).contains(&self.runs) {
            return invalid("runs", "must be from 1 to 100".into());
        }
        if self.tcp_default_window.as_bytes() == 0
            || self.tcp_tuned_window.is_some_and(|w| w.as_bytes() == 0)
        {
            return invalid("tcp_default_window", "windows must be positive".into());
        }
        if self.horizon.is_zero() || self.horizon > Duration::from_secs(3600) {
            return invalid("horizon", "must be from 1ms to 3600s".into());
        }
        if self.parts.is_empty() || self.parts.iter().any(|p| !PARTS.contains(&p.as_str())) {
            return invalid("parts", "name fig6".into());
        }
        if self.rates.is_empty() && !self.tcp {
            return invalid("rates", "name a rate, or set tcp = true".into());
        }
        self.path_loss.build()?;
        Ok(())
    }

    fn path(&self) -> DumbbellConfig {
        DumbbellConfig {
            bottleneck_rate: self.link_rate,
            rtt: self.rtt,
            access_rate: Bitrate::gbps(10),
            access_delay: Duration::from_micros(100),
            queue: QueueLimit::Packets(self.queue),
            loss: self.path_loss.clone(),
        }
    }

    /// The machine's rate (on the wire) for a scenario rate.
    fn wire_rate(&self, rate: Bitrate) -> Bitrate {
        if !self.rate_is_payload {
            return rate;
        }
        let ps = u64::from(self.packet_size);
        let wire = ps + (DATA_HEADER_LEN + IP_UDP_OVERHEAD) as u64;
        Bitrate::bps((u128::from(rate.as_bps()) * u128::from(wire) / u128::from(ps)) as u64)
    }

    /// How long a run may take: three times the transfer at its nominal
    /// rate, plus 10 s, at most `horizon`.
    fn run_horizon(&self, scheme: Scheme) -> Duration {
        let bits = self.size.as_bytes() as f64 * 8.0;
        let rate = match scheme {
            Scheme::Rbudp { rate, .. } => rate.as_bps().min(self.link_rate.as_bps()) as f64,
            Scheme::Tcp { window, .. } => {
                (window as f64 * 8.0 / self.rtt.as_secs_f64()).min(self.link_rate.as_bps() as f64)
            }
        };
        Duration::from_secs_f64((3.0 * bits / rate.max(1.0) + 10.0).min(self.horizon.as_secs_f64()))
    }

    /// Poisson competing traffic up to `until`.
    fn competing(&self, seed: u64, until: Duration) -> Vec<Message> {
        let mut out = Vec::new();
        if self.competing.as_bps() == 0 {
            return out;
        }
        let mut r = rng::stream(seed, "bulk-competing", 0);
        let rate = self.competing.as_bps() as f64 / 8.0 / f64::from(self.competing_size);
        let mut t = 0.0;
        loop {
            let u: f64 = r.random_range(f64::MIN_POSITIVE..1.0);
            t += -u.ln() / rate;
            if t >= until.as_secs_f64() {
                return out;
            }
            out.push(Message {
                at: Instant::ZERO + Duration::from_secs_f64(t),
                size: self.competing_size,
            });
        }
    }

    fn run_one(&self, seed: u64, scheme: Scheme) -> Result<Outcome, ScenarioError> {
        let horizon = self.run_horizon(scheme);
        let mut sim = Simulator::new(seed);
        let first = sim.next_node_id();
        // Added in this order: a, c, b, d.
        let (a, c, b, d) = (
            first,
            NodeId(first.0 + 1),
            NodeId(first.0 + 2),
            NodeId(first.0 + 3),
        );
        let size = self.size.as_bytes();
        let cross = UdpSender::new(c, d, 2, self.competing(seed, horizon));
        let mut out = Outcome::default();
        match scheme {
            Scheme::Rbudp { rate, adaptive } => {
                let mut cfg = SenderConfig::new(addr_of(b), self.wire_rate(rate));
                cfg.packet_size = self.packet_size;
                if adaptive {
                    cfg.rate_control = RateControl::adaptive();
                }
                let mut tx = RbudpSender::new(cfg, Pattern::new(seed, size));
                tx.start(Instant::ZERO);
                let rx =
                    RbudpReceiver::new(ReceiverConfig::new(addr_of(a)), PatternSink::new(seed));
                let control = TcpConfig::default().nagle(false);
                let (na, nb) = stream_pair(a, tx, b, rx, &control, 10);
                sim.add_node(Box::new(na));
                sim.add_node(Box::new(cross));
                sim.add_node(Box::new(nb));
                sim.add_node(Box::new(UdpSink::new()));
                Dumbbell::build(&mut sim, &self.path(), &[a, c], &[b, d])?;
                type Tx = StreamMachineNode<RbudpSender<Pattern>>;
                let mut t = Instant::ZERO;
                while t < Instant::ZERO + horizon {
                    t += Duration::from_secs(1);
                    sim.run_until(t, &mut |_| {});
                    let node = sim
                        .view()
                        .node::<Tx>(a)
                        .expect("node a is the RBUDP sender");
                    if node.machine().is_over() {
                        break;
                    }
                }
                let view = sim.view();
                let node = view.node::<Tx>(a).expect("node a is the RBUDP sender");
                let stats = node.machine().stats();
                let rx = view
                    .node::<StreamMachineNode<RbudpReceiver<PatternSink>>>(b)
                    .expect("node b is the RBUDP receiver");
                out.control_timeouts =
                    node.control_sender().stats().timeouts + rx.control_sender().stats().timeouts;
                out.datagrams = stats.datagrams;
                out.retransmitted = stats.retransmitted;
                let mut sent0 = None;
                for (_, e) in &node.events {
                    match e {
                        SenderEvent::BlastEnded { round: 0, sent, .. } => sent0 = Some(*sent),
                        SenderEvent::Missing {
                            round: 0,
                            arrived,
                            next_rate,
                            ..
                        } => {
                            out.first_loss = sent0.map(|s| 1.0 - *arrived as f64 / s.max(1) as f64);
                            out.next_rate = Some(next_rate.as_bps() as f64 / 1e6);
                        }
                        SenderEvent::Complete(s) => {
                            out.effective = s.effective_rate().map(|r| r.as_bps() as f64 / 1e6);
                            out.elapsed = Some(s.elapsed().as_secs_f64());
                            out.nak_rounds = Some(s.nak_rounds());
                            out.first_loss.get_or_insert(0.0);
                        }
                        _ => {}
                    }
                }
            }
            Scheme::Tcp { window, .. } => {
                let cfg = TcpConfig::default().rwnd(window);
                let mut host = TcpHost::new(a, cfg.clone());
                host.connect(1, b, TcpApp::Bytes(size), Instant::ZERO);
                sim.add_node(Box::new(host));
                sim.add_node(Box::new(cross));
                sim.add_node(Box::new(TcpSinkHost::new(b, cfg)));
                sim.add_node(Box::new(UdpSink::new()));
                Dumbbell::build(&mut sim, &self.path(), &[a, c], &[b, d])?;
                let mut t = Instant::ZERO;
                while t < Instant::ZERO + horizon {
                    t += Duration::from_secs(1);
                    sim.run_until(t, &mut |_| {});
                    let host = sim
                        .view()
                        .node::<TcpHost>(a)
                        .expect("node a is the TCP host");
                    if !host.completed.is_empty() {
                        break;
                    }
                }
                let view = sim.view();
                let host = view.node::<TcpHost>(a).expect("node a is the TCP host");
                if let Some((_, took, _)) = host.completed.first() {
                    // One round trip for the handshake the model skips.
                    let s = (*took + self.rtt).as_secs_f64();
                    out.elapsed = Some(s);
                    out.effective = Some(size as f64 * 8.0 / s / 1e6);
                }
                out.retransmitted = host.loss_recovery_counts().0;
            }
        }
        out.events = sim.stats().events;
        Ok(out)
    }

    pub(super) fn run(
        &self,
        seed: u64,
        progress: &mut dyn FnMut(Instant),
    ) -> Result<Report, ScenarioError> {
        let mut runs_rows = Vec::new();
        let mut rows = Vec::new();
        let mut summary = serde_json::Map::new();
        let mut events = 0;
        let mut done = 0;
        let mut fixed = TimeSeries::new("rbudp fixed (mean)");
        let mut adaptive = TimeSeries::new("rbudp adaptive (mean)");
        let mut naks_fixed = TimeSeries::new("rbudp fixed (mean)");
        let mut naks_adaptive = TimeSeries::new("rbudp adaptive (mean)");
        let mut tcp_lines = Vec::new();
        for scheme in self.schemes() {
            let mut cell = Vec::new();
            for run in 0..self.runs {
                // Every scheme meets the same competing traffic in run `run`.
                let run_seed = rng::derive_seed(seed, "bulk-run", u64::from(run));
                let o = self.run_one(run_seed, scheme)?;
                done += 1;
                progress(Instant::from_nanos(done));
                events += o.events;
                let rate = match scheme {
                    Scheme::Rbudp { rate, .. } => json!(rate.as_bps() as f64 / 1e6),
                    Scheme::Tcp { .. } => json!(null),
                };
                let window = match scheme {
                    Scheme::Tcp { window, .. } => json!(window),
                    Scheme::Rbudp { .. } => json!(null),
                };
                runs_rows.push(vec![
                    json!(scheme.name()),
                    rate,
                    window,
                    json!(run),
                    json!(o.effective),
                    json!(o.elapsed),
                    json!(o.nak_rounds),
                    json!(o.first_loss),
                    json!(o.next_rate),
                    json!(o.datagrams),
                    json!(o.retransmitted),
                    json!(o.control_timeouts),
                ]);
                cell.push(o);
            }
            let eff: Vec<f64> = cell.iter().filter_map(|o| o.effective).collect();
            let naks: Vec<u32> = cell.iter().filter_map(|o| o.nak_rounds).collect();
            let loss: Vec<f64> = cell.iter().filter_map(|o| o.first_loss).collect();
            let mean = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
            let min = |v: &[f64]| v.iter().copied().reduce(f64::min);
            let max = |v: &[f64]| v.iter().copied().reduce(f64::max);
            let nak_mean =
                (!naks.is_empty()).then(|| f64::from(naks.iter().sum::<u32>()) / naks.len() as f64);
            let (rate_mbps, window, paper) = match scheme {
                Scheme::Rbudp { rate, .. } => {
                    let r = rate.as_bps() as f64 / 1e6;
                    let paper = PAPER_FIG6.iter().find(|p| p.0 as f64 == r);
                    (Some(r), None, paper)
                }
                Scheme::Tcp { window, .. } => (None, Some(window), None),
            };
            rows.push(vec![
                json!(scheme.name()),
                json!(rate_mbps),
                json!(window),
                json!(self.runs),
                json!(eff.len()),
                json!(min(&eff)),
                json!(mean(&eff)),
                json!(max(&eff)),
                json!(naks.iter().min()),
                json!(nak_mean),
                json!(naks.iter().max()),
                json!(mean(&loss)),
                json!(paper.map(|p| p.1)),
                json!(paper.map(|p| p.2)),
                json!(paper.map(|p| p.3)),
            ]);
            let key = match rate_mbps {
                Some(r) => format!("{},{r}", scheme.name()),
                None => scheme.name().to_owned(),
            };
            summary.insert(format!("effective_mbps[{key}]"), json!(mean(&eff)));
            summary.insert(format!("nak_rounds[{key}]"), json!(nak_mean));
            match (scheme, mean(&eff), rate_mbps) {
                (
                    Scheme::Rbudp {
                        adaptive: false, ..
                    },
                    Some(e),
                    Some(r),
                ) => {
                    fixed.push(r, e);
                    naks_fixed.push(r, nak_mean.unwrap_or(f64::NAN));
                }
                (Scheme::Rbudp { adaptive: true, .. }, Some(e), Some(r)) => {
                    adaptive.push(r, e);
                    naks_adaptive.push(r, nak_mean.unwrap_or(f64::NAN));
                }
                (Scheme::Tcp { .. }, Some(e), _) => tcp_lines.push((scheme.name(), e)),
                _ => {}
            }
        }
        let (lo, hi) = self
            .rates
            .iter()
            .map(|r| r.as_bps() as f64 / 1e6)
            .fold((f64::MAX, f64::MIN), |(a, b), r| (a.min(r), b.max(r)));
        let mut paper_lo = TimeSeries::new("paper (low)");
        let mut paper_hi = TimeSeries::new("paper (high)");
        let mut paper_naks = TimeSeries::new("paper");
        for (r, l, h, n) in PAPER_FIG6 {
            paper_lo.push(r as f64, l);
            paper_hi.push(r as f64, h);
            paper_naks.push(r as f64, f64::from(n));
        }
        let mut ideal = TimeSeries::new("sending rate");
        let mut series = vec![fixed, adaptive, paper_lo, paper_hi];
        if lo <= hi {
            ideal.push(lo, lo);
            ideal.push(hi, hi);
            for (name, e) in tcp_lines {
                let mut s = TimeSeries::new(name);
                s.push(lo, e);
                s.push(hi, e);
                series.push(s);
            }
        }
        series.push(ideal);
        summary.insert("events".into(), json!(events));
        let tables = vec![
            Table {
                file: "fig6".into(),
                columns: [
                    "scheme",
                    "rate_mbps",
                    "window_bytes",
                    "runs",
                    "completed",
                    "effective_min_mbps",
                    "effective_mean_mbps",
                    "effective_max_mbps",
                    "nak_rounds_min",
                    "nak_rounds_mean",
                    "nak_rounds_max",
                    "first_blast_loss",
                    "paper_effective_low_mbps",
                    "paper_effective_high_mbps",
                    "paper_nak_rounds",
                ]
                .map(String::from)
                .to_vec(),
                rows,
            },
            Table {
                file: "fig6_runs".into(),
                columns: [
                    "scheme",
                    "rate_mbps",
                    "window_bytes",
                    "run",
                    "effective_mbps",
                    "elapsed_s",
                    "nak_rounds",
                    "first_blast_loss",
                    "next_rate_mbps",
                    "datagrams",
                    "retransmitted",
                    "control_timeouts",
                ]
                .map(String::from)
                .to_vec(),
                rows: runs_rows,
            },
        ];
        let plots = vec![
            Plot {
                file: "fig6_effective".into(),
                title: "RBUDP, 50 MB over 100 Mbit/s at 150 ms (Leigh et al. Figure 6)".into(),
                x_label: "sending rate (Mbit/s)".into(),
                y_label: "effective bandwidth (Mbit/s)".into(),
                series,
                style: PlotStyle::Lines,
                ..Default::default()
            },
            Plot {
                file: "fig6_naks".into(),
                title: "NAK rounds (Leigh et al. Figure 6)".into(),
                x_label: "sending rate (Mbit/s)".into(),
                y_label: "NAK rounds".into(),
                series: vec![naks_fixed, naks_adaptive, paper_naks],
                style: PlotStyle::Lines,
                ..Default::default()
            },
        ];
        Ok(Report {
            scenario: "bulk".into(),
            seed,
            summary,
            tables,
            plots,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 15 MB payload: enough for a 90 Mbit/s blast to overflow the
    /// bottleneck's queue, as Figure 6's 50 MB do.
    fn small() -> Bulk {
        Bulk {
            size: DataSize::bytes(15_000_000),
            runs: 2,
            ..Bulk::default()
        }
    }

    fn cell(r: &Report, scheme: &str, rate: Option<f64>, col: &str) -> f64 {
        let t = &r.tables[0];
        let c = t.columns.iter().position(|x| x == col).expect("column");
        let row = t
            .rows
            .iter()
            .find(|row| row[0] == scheme && row[1].as_f64() == rate)
            .expect("row");
        row[c].as_f64().unwrap_or(f64::NAN)
    }

    #[test]
    fn below_the_available_rate_rbudp_delivers_its_sending_rate_without_naks() {
        let s = Bulk {
            rates: vec![Bitrate::mbps(20), Bitrate::mbps(90)],
            ..small()
        };
        let r = s.run(1, &mut |_| {}).expect("runs");
        let eff20 = cell(&r, "rbudp fixed", Some(20.0), "effective_mean_mbps");
        // 6 s of blast and about 0.3 s of round trips.
        assert!((18.5..19.5).contains(&eff20), "{eff20}");
        assert_eq!(cell(&r, "rbudp fixed", Some(20.0), "nak_rounds_max"), 0.0);
        // Above what the competing traffic leaves, the blast loses and
        // needs NAK rounds; its goodput stays under the path's share.
        let loss90 = cell(&r, "rbudp fixed", Some(90.0), "first_blast_loss");
        assert!(loss90 > 0.05, "{loss90}");
        assert!(cell(&r, "rbudp fixed", Some(90.0), "nak_rounds_min") >= 1.0);
        let eff90 = cell(&r, "rbudp fixed", Some(90.0), "effective_mean_mbps");
        assert!(eff90 < 80.0 && eff90 > eff20, "{eff90}");
        // The adaptive rate needs fewer rounds from the same start.
        assert!(
            cell(&r, "rbudp adaptive", Some(90.0), "nak_rounds_mean")
                <= cell(&r, "rbudp fixed", Some(90.0), "nak_rounds_mean")
        );
        // TCP with a 64 KiB window is window-limited: 64 KiB per 150 ms.
        let tcp = cell(&r, "tcp default window", None, "effective_mean_mbps");
        assert!(tcp < 65536.0 * 8.0 / 0.15 / 1e6, "{tcp}");
        assert!(cell(&r, "tcp bdp window", None, "effective_mean_mbps") > 2.0 * tcp);
    }

    #[test]
    fn the_same_seed_gives_the_same_report() {
        let s = Bulk {
            size: DataSize::bytes(1_000_000),
            rates: vec![Bitrate::mbps(90)],
            runs: 1,
            ..Bulk::default()
        };
        let a = s.run(7, &mut |_| {}).expect("runs");
        let b = s.run(7, &mut |_| {}).expect("runs");
        assert_eq!(a.tables[1].rows, b.tables[1].rows);
        assert_ne!(
            s.run(8, &mut |_| {}).expect("runs").tables[1].rows,
            a.tables[1].rows
        );
    }

    #[test]
    fn impossible_settings_are_named() {
        for key in ["size", "packet_size", "runs", "parts"] {
            let mut s = Bulk::default();
            match key {
                "size" => s.size = DataSize::bytes(0),
                "packet_size" => s.packet_size = 0,
                "runs" => s.runs = 0,
                _ => s.parts = vec!["fig9".into()],
            }
            let e = s.validate().unwrap_err().to_string();
            assert!(e.contains(key), "{key}: {e}");
        }
    }
}
