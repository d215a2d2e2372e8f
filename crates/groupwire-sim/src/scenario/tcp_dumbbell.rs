//! `tcp-dumbbell`: TCP flows sharing one drop-tail bottleneck.
//!
//! The topology and defaults follow the GENEVA evaluation's dumbbell
//! (Matsuzono et al. §4.1): fast access links, 1500-byte packets, a
//! drop-tail queue of min(BDP, 2048) packets. It is also the scenario the
//! TCP model is validated on against ns-3 (`validation/ns3/`).

use std::time::Duration;

use groupwire_link::link::QueueLimit;
use groupwire_link::loss::LossModel;
use groupwire_link::stats::LossStats;
use groupwire_proto::{Bitrate, Instant};
use rand::Rng;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{Plot, Progress, Report, ScenarioError, Table, report, serde_duration};
use crate::core::{NodeId, Simulator};
use crate::metrics::{TimeSeries, jain_fairness};
use crate::rng;
use crate::tcp::{HEADER_BYTES, TcpConfig, Variant};
use crate::tcpnode::{ShortFlows, TcpApp, TcpHost, TcpSinkHost};
use crate::topology::{Dumbbell, DumbbellConfig};
use crate::traffic::{Cbr, UDP_IP_HEADER, UdpSender, UdpSink, schedule};

/// The largest queue the GENEVA evaluation uses, in packets (§4.1).
const MAX_AUTO_QUEUE: u64 = 2048;
/// Flows whose congestion window is plotted.
const CWND_PLOTTED: usize = 4;
/// Resolution of the fine queue samples (`queue_zoom`).
const QUEUE_ZOOM_STEP: Duration = Duration::from_millis(1);
/// Longest `queue_zoom`: 60 000 samples.
const MAX_QUEUE_ZOOM: Duration = Duration::from_secs(60);
/// Summary keys that get `_min` and `_max` over seeds.
const SPREAD_KEYS: [&str; 7] = [
    "throughput_bps",
    "jain_fairness",
    "bottleneck_loss_rate",
    "cbr_loss_rate",
    "cbr_loss_rate_min",
    "cbr_loss_rate_max",
    "cbr_mean_loss_run",
];

/// The bottleneck queue size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueSpec {
    /// min(BDP, 2048) packets, as in the GENEVA evaluation.
    Auto,
    /// A fixed number of packets.
    Packets(u32),
    /// A fixed number of bytes.
    Bytes(u64),
}

impl QueueSpec {
    /// The queue limit for a bottleneck of `rate` on a path of `rtt` with
    /// `packet_size`-byte packets ("auto": min(BDP, 2048) packets).
    pub fn limit(self, rate: Bitrate, rtt: Duration, packet_size: u32) -> QueueLimit {
        match self {
            Self::Auto => {
                let bdp = rate.bytes_in(rtt) / u64::from(packet_size.max(1));
                QueueLimit::Packets(
                    u32::try_from(bdp.clamp(1, MAX_AUTO_QUEUE)).expect("clamped to 2048"),
                )
            }
            Self::Packets(p) => QueueLimit::Packets(p),
            Self::Bytes(b) => QueueLimit::Bytes(b),
        }
    }
}

impl Serialize for QueueSpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Auto => s.serialize_str("auto"),
            Self::Packets(p) => s.serialize_u32(*p),
            Self::Bytes(b) => s.serialize_str(&format!("{b}B")),
        }
    }
}

impl<'de> Deserialize<'de> for QueueSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(u32),
            Text(String),
        }
        const HINT: &str = "queue must be \"auto\" (min(BDP, 2048) packets), a number of packets, or a size such as \"64KiB\"";
        match Raw::deserialize(d)? {
            Raw::Int(p) => Ok(Self::Packets(p)),
            Raw::Text(t) if t.trim() == "auto" => Ok(Self::Auto),
            Raw::Text(t) => {
                if let Ok(p) = t.trim().trim_end_matches('p').parse::<u32>() {
                    return Ok(Self::Packets(p));
                }
                t.parse::<groupwire_proto::DataSize>()
                    .map(|s| Self::Bytes(s.as_bytes()))
                    .map_err(|_| serde::de::Error::custom(HINT))
            }
        }
    }
}

/// Short-lived TCP flows (GENEVA §4.1: Poisson arrivals, Pareto sizes with shape 1.5).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ShortFlowSpec {
    /// Mean arrivals per second (the paper's r_tcp: 12.5 or 25).
    pub rate: f64,
    /// Mean flow size in packets (the paper's s_tcp).
    pub mean_packets: f64,
    /// Pareto shape (paper: 1.5).
    pub shape: f64,
}

impl ShortFlowSpec {
    /// A host at `me` opening these flows toward `dst` from time zero.
    pub(super) fn host(&self, me: NodeId, dst: NodeId, tcp: TcpConfig) -> TcpHost {
        let mut host = TcpHost::new(me, tcp);
        host.short_flows(
            ShortFlows {
                rate: self.rate,
                mean_packets: self.mean_packets,
                shape: self.shape,
                start: Instant::ZERO,
            },
            dst,
        );
        host
    }
}

impl Default for ShortFlowSpec {
    fn default() -> Self {
        Self {
            rate: 25.0,
            mean_packets: 40.0,
            shape: 1.5,
        }
    }
}

/// Parameters of the `tcp-dumbbell` scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TcpDumbbell {
    /// Bottleneck rate.
    pub bottleneck_rate: Bitrate,
    /// Two-way propagation delay (RTTmin).
    #[serde(with = "serde_duration")]
    pub rtt: Duration,
    /// Access link rate (GENEVA: 10 Gbit/s).
    pub access_rate: Bitrate,
    /// One-way delay of each access link.
    #[serde(with = "serde_duration")]
    pub access_delay: Duration,
    /// Bottleneck queue: "auto" = min(BDP, 2048) packets.
    pub queue: QueueSpec,
    /// Bytes per full-sized packet on the wire (MSS = this − 40).
    pub packet_size: u32,
    /// Long-lived TCP flows.
    pub flows: u32,
    /// Long-lived flows start uniformly at random in `[0, start_spread)`.
    #[serde(with = "serde_duration")]
    pub start_spread: Duration,
    /// Simulated time.
    #[serde(with = "serde_duration")]
    pub duration: Duration,
    /// Throughput, loss and fairness are measured after this.
    #[serde(with = "serde_duration")]
    pub warmup: Duration,
    /// Time-series resolution.
    #[serde(with = "serde_duration")]
    pub sample_interval: Duration,
    /// Loss recovery without SACK (and the cwnd response with it).
    pub variant: Variant,
    /// SACK-based loss recovery (RFC 6675).
    pub sack: bool,
    /// Lower bound of the retransmission timeout.
    #[serde(with = "serde_duration")]
    pub min_rto: Duration,
    /// Initial congestion window, segments.
    pub initial_cwnd: u32,
    /// Delayed-ACK timeout, or "off".
    #[serde(with = "serde_duration::option")]
    pub delayed_ack: Option<Duration>,
    /// Nagle's algorithm.
    pub nagle: bool,
    /// Extra random loss on the forward bottleneck (e.g. "bernoulli:0.01").
    pub loss: LossModel,
    /// Short-lived flows from one more sender, if set.
    pub short_flows: Option<ShortFlowSpec>,
    /// Constant-bit-rate UDP flows sharing the bottleneck.
    pub cbr_flows: u32,
    /// Rate of each CBR flow.
    pub cbr_rate: Bitrate,
    /// Send-time jitter of every host (default 0: exact send times, like
    /// ns-3's). Each packet a sender or receiver sends leaves it after an
    /// extra delay drawn uniformly from `[0, send_jitter]` (seeded; packets
    /// stay in order), as scheduling and NICs make real hosts do. With exact
    /// times a CBR flow's period and the ACK-clocked TCP arrivals lock into
    /// phase with the drop-tail queue, so the CBR loss of one run is a point
    /// on a sawtooth over the bottleneck rate (issue 15: 0.2-1.3% within
    /// 1.25 Mbit/s at 1 Gbit/s); tens of microseconds of jitter (a few
    /// packet times of the bottleneck) break that locking, though they also
    /// change the loss (20 us gave less CBR loss than the rate-sweep mean:
    /// docs/results/ns3-validation.md). Beyond the GENEVA paper, whose ns-3
    /// hosts send at exact times.
    #[serde(with = "serde_duration")]
    pub send_jitter: Duration,
    /// Runs with seeds `seed`, `seed + 1`, ... `seed + seeds - 1`; each seed
    /// draws its own flow start times (the flows' phases) and jitter. With
    /// more than one, the summary holds the mean over seeds of every number
    /// and `KEY_min` / `KEY_max` for the headline metrics, the `seeds` table
    /// one row per seed; the other tables and the plots are the first seed's.
    pub seeds: u32,
    /// The bottleneck queue is also sampled every millisecond for this long
    /// from the end of the warm-up (the `queue_fine` plot; 0 disables it):
    /// the `sample_interval` samples are too far apart to show the queue's
    /// sawtooth, which at 1 Gbit/s x 10 ms turns over within milliseconds.
    #[serde(with = "serde_duration")]
    pub queue_zoom: Duration,
}

impl Default for TcpDumbbell {
    fn default() -> Self {
        let tcp = TcpConfig::default();
        Self {
            bottleneck_rate: Bitrate::mbps(100),
            rtt: Duration::from_millis(20),
            access_rate: Bitrate::gbps(10),
            access_delay: Duration::from_micros(100),
            queue: QueueSpec::Auto,
            packet_size: 1500,
            flows: 10,
            start_spread: Duration::from_secs(1),
            duration: Duration::from_secs(30),
            warmup: Duration::from_secs(5),
            sample_interval: Duration::from_millis(100),
            variant: tcp.variant,
            sack: tcp.sack,
            min_rto: tcp.min_rto,
            initial_cwnd: tcp.initial_cwnd,
            delayed_ack: tcp.delayed_ack,
            nagle: tcp.nagle,
            loss: LossModel::None,
            short_flows: None,
            cbr_flows: 0,
            cbr_rate: Bitrate::mbps(30),
            send_jitter: Duration::ZERO,
            seeds: 1,
            queue_zoom: Duration::from_secs(1),
        }
    }
}

impl TcpDumbbell {
    /// The bottleneck queue limit this configuration gives.
    pub fn queue_limit(&self) -> QueueLimit {
        self.queue
            .limit(self.bottleneck_rate, self.rtt, self.packet_size)
    }

    fn tcp_config(&self) -> TcpConfig {
        TcpConfig {
            variant: self.variant,
            sack: self.sack,
            mss: self.packet_size - HEADER_BYTES,
            initial_cwnd: self.initial_cwnd,
            min_rto: self.min_rto,
            delayed_ack: self.delayed_ack,
            nagle: self.nagle,
            ..TcpConfig::default()
        }
    }

    pub(super) fn validate(&self) -> Result<(), ScenarioError> {
        let invalid = |key, why: &str| {
            Err(ScenarioError::Invalid {
                key,
                why: why.to_owned(),
            })
        };
        if self.flows == 0 && self.cbr_flows == 0 && self.short_flows.is_none() {
            return invalid(
                "flows",
                "there must be at least one flow (flows, cbr_flows or short_flows)",
            );
        }
        if self.flows > 100_000 || self.cbr_flows > 100_000 {
            return invalid("flows", "at most 100000 flows of each kind");
        }
        if self.packet_size <= HEADER_BYTES || self.packet_size > 65_535 {
            return invalid("packet_size", "must be between 41 and 65535 bytes");
        }
        if self.duration.is_zero() {
            return invalid("duration", "must be positive, e.g. 30s");
        }
        if self.warmup >= self.duration {
            return invalid("warmup", "must be shorter than duration");
        }
        if self.sample_interval.is_zero() || self.sample_interval > self.duration {
            return invalid(
                "sample_interval",
                "must be positive and no longer than duration",
            );
        }
        if self.rtt < self.access_delay * 4 {
            return invalid(
                "rtt",
                "must be at least four access delays (the access links alone take that long)",
            );
        }
        if self.initial_cwnd == 0 {
            return invalid("initial_cwnd", "must be at least 1 segment");
        }
        if matches!(
            self.queue_limit(),
            QueueLimit::Packets(0) | QueueLimit::Bytes(0)
        ) {
            return invalid("queue", "must hold at least one packet");
        }
        if let Some(s) = &self.short_flows {
            if !(s.rate > 0.0 && s.rate.is_finite()) {
                return invalid(
                    "short_flows.rate",
                    "must be a positive number of flows per second",
                );
            }
            if !(s.shape > 1.0 && s.shape.is_finite()) {
                return invalid(
                    "short_flows.shape",
                    "must be greater than 1 (the Pareto mean is infinite otherwise)",
                );
            }
            if !(s.mean_packets >= 1.0 && s.mean_packets.is_finite()) {
                return invalid("short_flows.mean_packets", "must be at least 1 packet");
            }
        }
        if self.cbr_flows > 0 && u64::from(self.packet_size) <= u64::from(UDP_IP_HEADER) {
            return invalid("packet_size", "too small for a UDP datagram");
        }
        if self.send_jitter > self.rtt {
            return invalid(
                "send_jitter",
                "must be at most the rtt (a host's jitter is microseconds, e.g. 20us)",
            );
        }
        if self.seeds == 0 || self.seeds > 1000 {
            return invalid("seeds", "must be between 1 and 1000");
        }
        if self.queue_zoom > MAX_QUEUE_ZOOM {
            return invalid(
                "queue_zoom",
                "at most 60s (one sample per millisecond is kept)",
            );
        }
        self.loss.build()?;
        Ok(())
    }

    /// Simulated time of the whole run, all seeds (for progress).
    pub(super) fn total_duration(&self) -> Duration {
        self.duration * self.seeds
    }

    pub(super) fn run(&self, seed: u64, progress: Progress<'_>) -> Result<Report, ScenarioError> {
        if self.seeds <= 1 {
            return self.run_one(seed, progress);
        }
        let mut reports = Vec::with_capacity(self.seeds as usize);
        for k in 0..self.seeds {
            let offset = self.duration * k;
            let mut shifted = |t: Instant| progress(t + offset);
            reports.push(self.run_one(seed.wrapping_add(u64::from(k)), &mut shifted)?);
        }
        Ok(merge_seeds(reports))
    }

    fn run_one(&self, seed: u64, progress: Progress<'_>) -> Result<Report, ScenarioError> {
        let mut sim = Simulator::new(seed);
        let tcp = self.tcp_config();
        let end = Instant::ZERO + self.duration;
        let warmup = Instant::ZERO + self.warmup;
        let n_tcp = self.flows as usize;
        let n_cbr = self.cbr_flows as usize;
        let n_short = usize::from(self.short_flows.is_some());
        let pairs = n_tcp + n_cbr + n_short;
        let base = sim.next_node_id().0;
        let id = |i: usize| NodeId(base + u32::try_from(i).expect("validated flow counts fit u32"));
        let left: Vec<NodeId> = (0..pairs).map(id).collect();
        let right: Vec<NodeId> = (pairs..2 * pairs).map(id).collect();

        // Senders, in node-id order.
        let mut starts = rng::stream(seed, "flow-start", 0);
        for i in 0..n_tcp {
            let mut host = TcpHost::new(left[i], tcp.clone());
            let start = Instant::ZERO + self.start_spread.mul_f64(starts.random::<f64>());
            host.connect(0, right[i], TcpApp::Bulk, start);
            sim.add_node(Box::new(host));
        }
        let cbr_size = self.packet_size - UDP_IP_HEADER;
        for j in 0..n_cbr {
            let i = n_tcp + j;
            let start = Instant::ZERO + self.start_spread.mul_f64(starts.random::<f64>());
            let mut src = Cbr::new(self.cbr_rate, cbr_size, start);
            let msgs = schedule(&mut src, end, &mut rng::stream(seed, "cbr", j as u64));
            sim.add_node(Box::new(UdpSender::new(left[i], right[i], 0, msgs)));
        }
        if let Some(s) = &self.short_flows {
            let i = n_tcp + n_cbr;
            sim.add_node(Box::new(s.host(left[i], right[i], tcp.clone())));
        }
        for (i, &r) in right.iter().enumerate() {
            if (n_tcp..n_tcp + n_cbr).contains(&i) {
                sim.add_node(Box::new(UdpSink::new()));
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
            loss: self.loss.clone(),
            host_jitter: self.send_jitter,
        };
        let bell = Dumbbell::build(&mut sim, &topo, &left, &right)?;

        // Step through time, sampling at each boundary.
        let mut aggregate = TimeSeries::new("aggregate");
        let mut queue = TimeSeries::new("bottleneck queue");
        let mut cwnds: Vec<TimeSeries> = (0..n_tcp.min(CWND_PLOTTED))
            .map(|i| TimeSeries::new(format!("flow {i}")))
            .collect();
        let delivered = |sim: &Simulator| -> Vec<u64> {
            let view = sim.view();
            (0..n_tcp)
                .map(|i| {
                    view.node::<TcpSinkHost>(right[i])
                        .map_or(0, |h| h.delivered(left[i], 0))
                })
                .collect()
        };
        let mut last = vec![0u64; n_tcp];
        let mut at_warmup = (vec![0u64; n_tcp], bell_counters(&sim, bell.bottleneck));
        let mut queue_sum = 0.0;
        let mut queue_samples = 0u64;
        // The fine queue samples: every QUEUE_ZOOM_STEP in [warmup, zoom_end].
        let mut queue_fine = TimeSeries::new("bottleneck queue, every 1 ms");
        let zoom_end = (warmup + self.queue_zoom).min(end);
        let mut zoom_next = (!self.queue_zoom.is_zero()).then_some(warmup);
        let mut t = Instant::ZERO;
        while t < end {
            let mut next = t + self.sample_interval;
            if t < warmup && next > warmup {
                next = warmup;
            }
            let next = next.min(end);
            // Fine queue samples up to the next regular one; stepping the
            // simulator in smaller steps does not change what it does.
            while let Some(z) = zoom_next.filter(|&z| z <= next) {
                sim.run_until(z, progress);
                let q = sim.link_mut(bell.bottleneck).link.queue_packets(z) as f64;
                queue_fine.push(z.as_secs_f64(), q);
                zoom_next = Some(z + QUEUE_ZOOM_STEP).filter(|&n| n <= zoom_end);
            }
            sim.run_until(next, progress);
            let now = sim.now();
            let secs = now.as_secs_f64();
            let dt = (now - t).as_secs_f64();
            let d = delivered(&sim);
            let bytes: u64 = d.iter().zip(&last).map(|(a, b)| a - b).sum();
            aggregate.push(secs, bytes as f64 * 8.0 / dt / 1e6);
            last = d;
            let q = sim.link_mut(bell.bottleneck).link.queue_packets(now) as f64;
            queue.push(secs, q);
            if now > warmup {
                queue_sum += q;
                queue_samples += 1;
            }
            for (i, s) in cwnds.iter_mut().enumerate() {
                let view = sim.view();
                let cwnd = view
                    .node::<TcpHost>(left[i])
                    .and_then(|h| h.sender(0))
                    .map_or(0, |s| s.cwnd());
                s.push(secs, cwnd as f64 / f64::from(tcp.mss));
            }
            if now == warmup {
                at_warmup = (last.clone(), bell_counters(&sim, bell.bottleneck));
                // CBR loss is measured in the window, like TCP's: a sink's
                // loss pattern restarts here (a loss run in progress is cut).
                for &r in &right[n_tcp..n_tcp + n_cbr] {
                    if let Some(sink) = sim.node_mut::<UdpSink>(r) {
                        sink.loss = LossStats::new();
                    }
                }
            }
            t = now;
        }

        // Summary over the measurement window.
        let window = (end - warmup).as_secs_f64();
        let per_flow: Vec<f64> = last
            .iter()
            .zip(&at_warmup.0)
            .map(|(a, b)| (a - b) as f64 * 8.0 / window)
            .collect();
        let throughput: f64 = per_flow.iter().sum();
        let (offered, dropped) = {
            let (o1, d1) = bell_counters(&sim, bell.bottleneck);
            (o1 - at_warmup.1.0, d1 - at_warmup.1.1)
        };
        let loss_rate = if offered == 0 {
            0.0
        } else {
            dropped as f64 / offered as f64
        };
        let view = sim.view();
        let (mut retransmits, mut timeouts) = (0u64, 0u64);
        for &l in &left {
            if let Some(h) = view.node::<TcpHost>(l) {
                let (r, t) = h.loss_recovery_counts();
                retransmits += r;
                timeouts += t;
            }
        }
        let queue_packets = match self.queue_limit() {
            QueueLimit::Packets(p) => json!(p),
            QueueLimit::Bytes(b) => json!(format!("{b}B")),
            other => json!(format!("{other:?}")),
        };
        let mut summary = serde_json::Map::new();
        let mut put = |k: &str, v: Value| {
            summary.insert(k.to_owned(), v);
        };
        put("simulator", json!("groupwire"));
        put("rate_bps", json!(self.bottleneck_rate.as_bps()));
        put("rtt_ms", json!(self.rtt.as_secs_f64() * 1e3));
        put("flows", json!(self.flows));
        put("duration_s", json!(self.duration.as_secs_f64()));
        put("warmup_s", json!(self.warmup.as_secs_f64()));
        put("queue_packets", queue_packets);
        put("throughput_bps", json!(throughput.round()));
        put(
            "utilization",
            json!(throughput / self.bottleneck_rate.as_bps() as f64),
        );
        put("jain_fairness", json!(jain_fairness(&per_flow)));
        put("bottleneck_loss_rate", json!(loss_rate));
        put("bottleneck_packets", json!(offered));
        put("drops", json!(dropped));
        put(
            "mean_queue_packets",
            json!(if queue_samples == 0 {
                0.0
            } else {
                queue_sum / queue_samples as f64
            }),
        );
        put("retransmits", json!(retransmits));
        put("timeouts", json!(timeouts));
        if self.short_flows.is_some() {
            let i = n_tcp + n_cbr;
            let h = view
                .node::<TcpHost>(left[i])
                .expect("the short-flow host is a TcpHost");
            let fct: Vec<f64> = h
                .completed
                .iter()
                .map(|(_, d, _)| d.as_secs_f64())
                .collect();
            put("short_flows_completed", json!(fct.len()));
            put("short_flows_open", json!(h.open_connections()));
            let mean = if fct.is_empty() {
                0.0
            } else {
                fct.iter().sum::<f64>() / fct.len() as f64
            };
            put("short_flow_mean_fct_s", json!(mean));
        }
        if !self.send_jitter.is_zero() {
            put("send_jitter_s", json!(self.send_jitter.as_secs_f64()));
        }
        // Each CBR flow's loss and loss runs in the measurement window: at
        // one setting the flows can sit at different points of the queue's
        // phase-locked sawtooth, so the aggregate alone hides how far apart
        // they are.
        let mut cbr_rows = Vec::new();
        if n_cbr > 0 {
            let (mut lost, mut pkts, mut runs) = (0u64, 0u64, 0u64);
            let mut rates = Vec::new();
            for (j, &r) in right[n_tcp..n_tcp + n_cbr].iter().enumerate() {
                let Some(sink) = view.node::<UdpSink>(r) else {
                    continue;
                };
                let mut loss = sink.loss.clone();
                loss.finish();
                lost += loss.lost();
                pkts += loss.packets();
                runs += loss.bursts();
                rates.push(loss.loss_rate());
                cbr_rows.push(vec![
                    json!(j),
                    json!(loss.packets()),
                    json!(loss.lost()),
                    json!(loss.loss_rate()),
                    json!(loss.bursts()),
                    json!(loss.mean_burst_len()),
                    json!(loss.max_burst_len()),
                ]);
            }
            let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
            put("cbr_flows", json!(n_cbr));
            put("cbr_rate_bps", json!(self.cbr_rate.as_bps()));
            put("cbr_packets", json!(pkts));
            put("cbr_lost", json!(lost));
            put("cbr_loss_rate", json!(ratio(lost, pkts)));
            let (min, max) = rates.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), &r| {
                (lo.min(r), hi.max(r))
            });
            put(
                "cbr_loss_rate_min",
                json!(if rates.is_empty() { 0.0 } else { min }),
            );
            put("cbr_loss_rate_max", json!(max));
            put("cbr_mean_loss_run", json!(ratio(lost, runs)));
            put("per_flow_cbr_loss", json!(rates));
        }
        put(
            "per_flow_bps",
            json!(per_flow.iter().map(|x| x.round()).collect::<Vec<_>>()),
        );
        put("events", json!(view.stats().events));

        let rows = per_flow
            .iter()
            .enumerate()
            .map(|(i, bps)| {
                let s = view.node::<TcpHost>(left[i]).and_then(|h| h.sender(0));
                vec![
                    json!(i),
                    json!(bps.round()),
                    json!(s.map_or(0, |s| s.stats().retransmits)),
                    json!(s.map_or(0, |s| s.stats().timeouts)),
                    json!(s.map_or(0, |s| s.cwnd())),
                ]
            })
            .collect();
        let mut tables = vec![Table {
            file: "flows".into(),
            columns: [
                "flow",
                "throughput_bps",
                "retransmits",
                "timeouts",
                "final_cwnd_bytes",
            ]
            .map(String::from)
            .to_vec(),
            rows,
        }];
        if !cbr_rows.is_empty() {
            tables.push(Table {
                file: "cbr_flows".into(),
                columns: [
                    "cbr_flow",
                    "packets",
                    "lost",
                    "loss_rate",
                    "loss_runs",
                    "mean_loss_run",
                    "longest_loss_run",
                ]
                .map(String::from)
                .to_vec(),
                rows: cbr_rows,
            });
        }
        let plots = vec![
            Plot {
                file: "throughput".into(),
                title: format!(
                    "Aggregate TCP goodput ({} flows, {})",
                    self.flows, self.bottleneck_rate
                ),
                x_label: "time (s)".into(),
                y_label: "Mbit/s".into(),
                series: vec![aggregate],
                ..Default::default()
            },
            Plot {
                file: "queue".into(),
                title: format!(
                    "Bottleneck queue occupancy, every {:?} (too coarse for the sawtooth: see queue_fine)",
                    self.sample_interval
                ),
                x_label: "time (s)".into(),
                y_label: "packets".into(),
                series: vec![queue],
                ..Default::default()
            },
            Plot {
                file: "cwnd".into(),
                title: "Congestion window".into(),
                x_label: "time (s)".into(),
                y_label: "segments".into(),
                series: cwnds,
                ..Default::default()
            },
        ];
        let mut plots = plots;
        if !queue_fine.points.is_empty() {
            plots.insert(
                2,
                Plot {
                    file: "queue_fine".into(),
                    title: format!(
                        "Bottleneck queue every 1 ms for {:?} after warm-up",
                        self.queue_zoom
                    ),
                    x_label: "time (s)".into(),
                    y_label: "packets".into(),
                    series: vec![queue_fine],
                    ..Default::default()
                },
            );
        }
        Ok(report("tcp-dumbbell", seed, summary, tables, plots))
    }
}

/// (packets offered to, packets dropped by) the bottleneck so far.
pub(super) fn bell_counters(sim: &Simulator, link: crate::core::LinkId) -> (u64, u64) {
    let s = sim.view().link(link).link.stats().clone();
    (s.offered, s.queue_drops + s.lost)
}

/// One report from the runs of several seeds (`seeds` > 1): the summary
/// holds the mean over seeds of every number (arrays left out) and, for
/// [`SPREAD_KEYS`], `KEY_min` and `KEY_max`; a `seeds` table has one row
/// per seed; the other tables and the plots are the first seed's.
fn merge_seeds(reports: Vec<Report>) -> Report {
    let n = reports.len() as f64;
    let first = &reports[0];
    let mut summary = serde_json::Map::new();
    for (k, v) in &first.summary {
        if !v.is_number() {
            if !v.is_array() {
                summary.insert(k.clone(), v.clone());
            }
            continue;
        }
        let xs: Vec<f64> = reports
            .iter()
            .filter_map(|r| r.summary.get(k).and_then(Value::as_f64))
            .collect();
        if xs.iter().all(|x| *x == xs[0]) {
            summary.insert(k.clone(), v.clone()); // the same in every run
        } else {
            summary.insert(k.clone(), json!(xs.iter().sum::<f64>() / n));
        }
        if SPREAD_KEYS.contains(&k.as_str()) {
            let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            summary.insert(format!("{k}_min"), json!(lo));
            summary.insert(format!("{k}_max"), json!(hi));
        }
    }
    summary.insert("seeds".into(), json!(reports.len()));
    let keys: Vec<&str> = SPREAD_KEYS
        .iter()
        .copied()
        .filter(|k| first.summary.contains_key(*k))
        .collect();
    let rows = reports
        .iter()
        .map(|r| {
            std::iter::once(json!(r.seed))
                .chain(
                    keys.iter()
                        .map(|k| r.summary.get(*k).cloned().unwrap_or(Value::Null)),
                )
                .collect()
        })
        .collect();
    let mut tables = vec![Table {
        file: "seeds".into(),
        columns: std::iter::once("seed")
            .chain(keys.iter().copied())
            .map(String::from)
            .collect(),
        rows,
    }];
    let seed = first.seed;
    let mut rest = reports.into_iter().next().expect("at least one seed");
    tables.append(&mut rest.tables);
    for p in &mut rest.plots {
        p.title = format!("{} (seed {seed})", p.title);
    }
    Report {
        scenario: rest.scenario,
        seed,
        summary,
        tables,
        plots: rest.plots,
    }
}
