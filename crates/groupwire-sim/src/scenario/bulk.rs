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
//!
//! **LFN** (part `lfn`): the paper's own example of the long fat network
//! problem, "for a 45Mbps link between Chicago and Amsterdam, with an
//! average round trip time of 150ms, the capacity is 45*0.15/8 =
//! 0.84Mbytes", and its two answers, "Parallel TCP Socket striping ... and
//! Reliable Blast UDP" (§4.2). Every mechanism moves `lfn_size` (50 MB,
//! Figure 6's file, so that a transfer at the link rate lasts about 9 s,
//! some 60 round trips, and the start-up costs are small beside it) over
//! one `lfn_rate` x `lfn_rtt` path with no competing traffic, at each
//! random loss rate of `lfn_loss` (Bernoulli on the bottleneck, data
//! direction; none, 0.1% and 1% by default, so the table shows where
//! single TCP collapses and the others hold). Rows:
//!
//! - **single TCP** with the 64 KiB default window (`tcp_default_window`)
//!   and with a window of the path's bandwidth-delay product
//!   (`tcp_tuned_window`, default 843 750 bytes);
//! - **striped TCP** over N = `lfn_streams` connections of the same TCP
//!   model and 64 KiB window each, started together, sharing the payload
//!   as the real socket code does, by work stealing from a shared offset:
//!   a stream takes the next `lfn_chunk` (64 KiB) whenever it is free, that
//!   is when its unacknowledged bytes fit in a send buffer the size of its
//!   window ([`TcpHost::connect_striped`]), so a stream slowed by loss
//!   holds at most a buffer and a chunk and the others carry the rest;
//! - **RBUDP** at a fixed rate of `lfn_rbudp_share` (95%) of the link,
//!   counted as payload (98.5% of the link on the wire with 1400-byte
//!   packets): the paper's "just below the available bandwidth" on a path
//!   with nothing else on it; and the adaptive rate starting at the same
//!   rate.
//!
//! The bottleneck's drop-tail queue is one bandwidth-delay product
//! (`lfn_queue`), the classic sizing for one loss-based TCP flow: a
//! slow-start burst of the BDP-window flow fits, and a lost segment, not a
//! short queue, is what the loss rows measure. The time of a transfer ends
//! when the receiver has the last byte in order (every stream's last byte,
//! for striping; RBUDP's receiver's Complete) and, for TCP, begins one
//! round trip earlier than the first segment, for the handshake the model
//! skips (the streams of a striped transfer open in parallel). A lossless
//! cell is deterministic and runs once; lossy cells run `runs` times.
//!
//! The TCP rows use a minimum RTO of `lfn_tcp_min_rto` = 1 s (RFC 6298
//! §2.4: "if it is less than 1 second, then the RTO SHOULD be rounded up
//! to 1 second"), not the model's ns-3 default of 200 ms: on a 150 ms path
//! with 200 ms delayed ACKs, an ACK for a lone segment returns after
//! 350 ms while the RTO is about srtt + 4 rttvar ≈ 280 ms, so after its
//! first timeout a flow times out on every segment (Karn's rule keeps
//! those ACKs from correcting srtt), stays at one segment per timeout
//! (about 40 kbit/s) and never leaves; real stacks escape through a larger
//! RTO floor or RTT timestamps.

use std::time::Duration;

use groupwire_link::link::QueueLimit;
use groupwire_link::loss::LossModel;
use groupwire_proto::rbudp::{
    MAX_PACKET_SIZE, Pattern, PatternSink, RateControl, RbudpReceiver, RbudpSender, ReceiverConfig,
    ReceiverEvent, SenderConfig, SenderEvent,
};
use groupwire_proto::units::IP_UDP_OVERHEAD;
use groupwire_proto::wire::rbudp::DATA_HEADER_LEN;
use groupwire_proto::{Bitrate, DataSize, Instant, Probability};
use rand::Rng;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{Plot, PlotStyle, Report, ScenarioError, Table, require_parts, serde_duration};
use crate::core::{Simulator, addr_of};
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
    /// Which experiments: `fig6`, `lfn`.
    pub parts: Vec<String>,
    /// A run still unfinished after this long is reported as such.
    /// Figure 6's runs and the LFN part's lossless ones stop sooner (three
    /// times the transfer at its nominal rate, plus 10 s); the LFN part's
    /// lossy runs may take all of it (single TCP at 1% loss needs more than
    /// ten minutes for 50 MB).
    #[serde(with = "serde_duration")]
    pub horizon: Duration,
    /// LFN part: the bottleneck's rate (the paper's 45 Mbit/s link between
    /// Chicago and Amsterdam, §4.2).
    pub lfn_rate: Bitrate,
    /// LFN part: the path's round-trip propagation delay (the paper's
    /// 150 ms).
    #[serde(with = "serde_duration")]
    pub lfn_rtt: Duration,
    /// LFN part: the payload.
    pub lfn_size: DataSize,
    /// LFN part: the bottleneck's drop-tail queue in bytes; `None`: one
    /// bandwidth-delay product.
    pub lfn_queue: Option<DataSize>,
    /// LFN part: the numbers of parallel TCP streams to stripe over.
    pub lfn_streams: Vec<u32>,
    /// LFN part: the chunk a free stream takes from the striped payload.
    pub lfn_chunk: DataSize,
    /// LFN part: random (Bernoulli) loss rates on the bottleneck, one row
    /// set each.
    pub lfn_loss: Vec<Probability>,
    /// LFN part: the fixed RBUDP rate (payload) as a share of `lfn_rate`;
    /// the adaptive rate starts there too.
    pub lfn_rbudp_share: f64,
    /// LFN part: the TCP rows' minimum retransmission timeout (see the
    /// module docs for why not the model's 200 ms default).
    #[serde(with = "serde_duration")]
    pub lfn_tcp_min_rto: Duration,
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
            parts: vec!["fig6".into(), "lfn".into()],
            horizon: Duration::from_secs(1800),
            lfn_rate: Bitrate::mbps(45),
            lfn_rtt: Duration::from_millis(150),
            lfn_size: DataSize::bytes(50_000_000),
            lfn_queue: None,
            lfn_streams: vec![2, 4, 8],
            lfn_chunk: DataSize::kib(64),
            lfn_loss: [0.0, 0.001, 0.01]
                .map(|p| Probability::new(p).expect("in [0, 1]"))
                .to_vec(),
            lfn_rbudp_share: 0.95,
            lfn_tcp_min_rto: Duration::from_secs(1),
        }
    }
}

const PARTS: [&str; 2] = ["fig6", "lfn"];

/// Figure 6: sending rate (Mbit/s), effective bandwidth low and high
/// (Mbit/s), NAK rounds.
const PAPER_FIG6: [(u64, f64, f64, u32); 5] = [
    (20, 19.7, 19.7, 0),
    (40, 38.5, 38.5, 0),
    (60, 54.0, 57.0, 1),
    (80, 56.0, 70.0, 2),
    (90, 61.0, 77.0, 3),
];

/// Most parallel streams a striped transfer may use.
const MAX_STREAMS: u32 = 64;

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
    Rbudp {
        rate: Bitrate,
        adaptive: bool,
    },
    Tcp {
        window: u64,
        tuned: bool,
    },
    /// `streams` TCP connections, each with `window`, taking chunks of
    /// the payload by work stealing.
    Striped {
        streams: u32,
        window: u64,
    },
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
            Scheme::Striped { .. } => "tcp striped",
        }
    }

    /// The row's label in the LFN table and plot.
    fn label(self) -> String {
        match self {
            Scheme::Tcp {
                window,
                tuned: false,
            } => format!("tcp, {} window", DataSize::bytes(window)),
            Scheme::Tcp { tuned: true, .. } => "tcp, BDP window".into(),
            Scheme::Striped { streams, .. } => format!("striped tcp x{streams}"),
            Scheme::Rbudp { .. } => self.name().into(),
        }
    }

    fn streams(self) -> u32 {
        match self {
            Scheme::Striped { streams, .. } => streams,
            _ => 1,
        }
    }
}

/// Where one transfer runs and how it is timed.
#[derive(Debug, Clone)]
struct Setting {
    path: DumbbellConfig,
    size: u64,
    competing: Bitrate,
    /// `true`: the transfer ends when the receiver has the whole payload
    /// (the LFN part); `false`: when the sender knows (Figure 6's RBUDP
    /// Done, TCP's last ACK).
    at_receiver: bool,
    horizon: Duration,
    /// The TCP rows' minimum RTO; `None`: the model's default.
    tcp_min_rto: Option<Duration>,
}

impl Bulk {
    fn schemes(&self) -> Vec<Scheme> {
        let mut v = Vec::new();
        for &rate in &self.rates {
            self.push_rbudp(&mut v, rate);
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

    /// The LFN part's rows, in table order.
    fn lfn_schemes(&self) -> Vec<Scheme> {
        let window = self.tcp_default_window.as_bytes();
        let mut v = vec![
            Scheme::Tcp {
                window,
                tuned: false,
            },
            Scheme::Tcp {
                window: self
                    .tcp_tuned_window
                    .map_or(self.lfn_bdp(), DataSize::as_bytes),
                tuned: true,
            },
        ];
        for &streams in &self.lfn_streams {
            v.push(Scheme::Striped { streams, window });
        }
        let rate =
            Bitrate::bps((self.lfn_rbudp_share * self.lfn_rate.as_bps() as f64).round() as u64);
        self.push_rbudp(&mut v, rate);
        v
    }

    /// RBUDP at `rate`, then with the adaptive rate too if asked for.
    fn push_rbudp(&self, schemes: &mut Vec<Scheme>, rate: Bitrate) {
        schemes.push(Scheme::Rbudp {
            rate,
            adaptive: false,
        });
        if self.adaptive {
            schemes.push(Scheme::Rbudp {
                rate,
                adaptive: true,
            });
        }
    }

    /// The LFN path's bandwidth-delay product in bytes (the paper's
    /// "45*0.15/8 = 0.84Mbytes").
    fn lfn_bdp(&self) -> u64 {
        self.lfn_rate.bytes_in(self.lfn_rtt)
    }

    /// Runs of one LFN cell: a lossless cell is deterministic (no
    /// competing traffic, no random loss), so it runs once.
    fn lfn_runs(&self, loss: Probability) -> u32 {
        if loss.get() == 0.0 { 1 } else { self.runs }
    }

    fn has_part(&self, part: &str) -> bool {
        self.parts.iter().any(|p| p == part)
    }

    /// Transfers in the whole scenario (the progress count).
    pub(super) fn total_runs(&self) -> u64 {
        let mut n = 0;
        if self.has_part("fig6") {
            n += self.schemes().len() as u64 * u64::from(self.runs);
        }
        if self.has_part("lfn") {
            let runs: u64 = self
                .lfn_loss
                .iter()
                .map(|&p| u64::from(self.lfn_runs(p)))
                .sum();
            n += self.lfn_schemes().len() as u64 * runs;
        }
        n
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
        require_parts(&self.parts, &PARTS, "name fig6, lfn or both")?;
        if self.has_part("fig6") && self.rates.is_empty() && !self.tcp {
            return invalid("rates", "name a rate, or set tcp = true".into());
        }
        if self.lfn_rate.as_bps() == 0 {
            return invalid("lfn_rate", "must be positive".into());
        }
        if self.lfn_rtt.is_zero() || self.lfn_rtt > Duration::from_secs(10) {
            return invalid("lfn_rtt", "must be from 1us to 10s".into());
        }
        let lfn_size = self.lfn_size.as_bytes();
        if lfn_size == 0 || lfn_size > 10_000_000_000 {
            return invalid("lfn_size", "must be from 1 byte to 10GB".into());
        }
        if self.lfn_queue.is_some_and(|q| q.as_bytes() < 1500) {
            return invalid(
                "lfn_queue",
                "must hold at least one 1500-byte packet".into(),
            );
        }
        if self.lfn_streams.is_empty()
            || self
                .lfn_streams
                .iter()
                .any(|&n| !(1..=MAX_STREAMS).contains(&n) || u64::from(n) > lfn_size)
        {
            return invalid(
                "lfn_streams",
                format!("name 1 to {MAX_STREAMS} streams, each with at least a byte to carry"),
            );
        }
        if self.lfn_chunk.as_bytes() == 0 {
            return invalid("lfn_chunk", "must be positive".into());
        }
        if self.lfn_loss.is_empty() || self.lfn_loss.iter().any(|p| p.get() >= 0.5) {
            return invalid("lfn_loss", "name loss rates from 0 to below 0.5".into());
        }
        if self.lfn_tcp_min_rto.is_zero() || self.lfn_tcp_min_rto > Duration::from_secs(60) {
            return invalid("lfn_tcp_min_rto", "must be from 1us to 60s".into());
        }
        if !(self.lfn_rbudp_share > 0.0 && self.lfn_rbudp_share <= 2.0) {
            return invalid("lfn_rbudp_share", "must be above 0 and at most 2".into());
        }
        self.path_loss.build()?;
        Ok(())
    }

    /// Figure 6's transfers of `scheme`.
    fn fig6_setting(&self, scheme: Scheme) -> Setting {
        let path = DumbbellConfig::fast_access(
            self.link_rate,
            self.rtt,
            QueueLimit::Packets(self.queue),
            self.path_loss.clone(),
        );
        let size = self.size.as_bytes();
        Setting {
            horizon: self.run_horizon(size, &path, scheme),
            path,
            size,
            competing: self.competing,
            at_receiver: false,
            tcp_min_rto: None,
        }
    }

    /// The LFN part's transfers of `scheme` at random loss `loss`: the
    /// paper's link alone, no competing traffic.
    fn lfn_setting(&self, scheme: Scheme, loss: Probability) -> Setting {
        let path = DumbbellConfig::fast_access(
            self.lfn_rate,
            self.lfn_rtt,
            QueueLimit::Bytes(self.lfn_queue.map_or(self.lfn_bdp(), DataSize::as_bytes)),
            if loss.get() == 0.0 {
                LossModel::None
            } else {
                LossModel::Bernoulli { p: loss }
            },
        );
        let size = self.lfn_size.as_bytes();
        // Loss slows TCP far below its window's rate: give it the whole horizon.
        let horizon = if loss.get() == 0.0 {
            self.run_horizon(size, &path, scheme)
        } else {
            self.horizon
        };
        Setting {
            path,
            size,
            competing: Bitrate::bps(0),
            at_receiver: true,
            horizon,
            tcp_min_rto: Some(self.lfn_tcp_min_rto),
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
    fn run_horizon(&self, size: u64, path: &DumbbellConfig, scheme: Scheme) -> Duration {
        let bits = size as f64 * 8.0;
        let link = path.bottleneck_rate.as_bps();
        let rate = match scheme {
            Scheme::Rbudp { rate, .. } => rate.as_bps().min(link) as f64,
            Scheme::Tcp { window, .. } => {
                (window as f64 * 8.0 / path.rtt.as_secs_f64()).min(link as f64)
            }
            Scheme::Striped { streams, window } => {
                (f64::from(streams) * window as f64 * 8.0 / path.rtt.as_secs_f64()).min(link as f64)
            }
        };
        Duration::from_secs_f64((3.0 * bits / rate.max(1.0) + 10.0).min(self.horizon.as_secs_f64()))
    }

    /// Poisson competing traffic at `rate` up to `until`.
    fn competing(&self, rate: Bitrate, seed: u64, until: Duration) -> Vec<Message> {
        let mut out = Vec::new();
        if rate.as_bps() == 0 {
            return out;
        }
        let mut r = rng::stream(seed, "bulk-competing", 0);
        let rate = rate.as_bps() as f64 / 8.0 / f64::from(self.competing_size);
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

    fn run_one(&self, seed: u64, scheme: Scheme, set: &Setting) -> Result<Outcome, ScenarioError> {
        let horizon = set.horizon;
        let mut sim = Simulator::new(seed);
        // Added in this order: a, c, b, d.
        let [a, c, b, d] = sim.next_node_ids();
        let size = set.size;
        let cross = UdpSender::new(c, d, 2, self.competing(set.competing, seed, horizon));
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
                Dumbbell::build(&mut sim, &set.path, &[a, c], &[b, d])?;
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
                if set.at_receiver {
                    // The receiver's Complete: every packet stored and the
                    // hash checked, before its Done goes back.
                    let done = rx.events.iter().find_map(|(_, e)| match e {
                        ReceiverEvent::Complete(s) => Some(s.finished),
                        _ => None,
                    });
                    out.elapsed = done.map(|t| (t - Instant::ZERO).as_secs_f64());
                    out.effective = out.elapsed.map(|s| size as f64 * 8.0 / s / 1e6);
                }
            }
            Scheme::Tcp { window, .. } | Scheme::Striped { window, .. } => {
                let mut cfg = TcpConfig::default().rwnd(window);
                if let Some(rto) = set.tcp_min_rto {
                    cfg = cfg.min_rto(rto);
                }
                let mut host = TcpHost::new(a, cfg.clone());
                let streams = scheme.streams();
                if let Scheme::Striped { .. } = scheme {
                    // Chunks to whichever stream is free, each stream's
                    // send buffer the size of its window.
                    let flows: Vec<u32> = (1..=streams).collect();
                    let chunk = self.lfn_chunk.as_bytes();
                    host.connect_striped(&flows, b, size, chunk, window, Instant::ZERO);
                } else {
                    host.connect(1, b, TcpApp::Bytes(size), Instant::ZERO);
                }
                sim.add_node(Box::new(host));
                sim.add_node(Box::new(cross));
                sim.add_node(Box::new(TcpSinkHost::new(b, cfg)));
                sim.add_node(Box::new(UdpSink::new()));
                Dumbbell::build(&mut sim, &set.path, &[a, c], &[b, d])?;
                let mut t = Instant::ZERO;
                while t < Instant::ZERO + horizon {
                    t += Duration::from_secs(1);
                    sim.run_until(t, &mut |_| {});
                    let host = sim
                        .view()
                        .node::<TcpHost>(a)
                        .expect("node a is the TCP host");
                    if host.completed.len() == streams as usize {
                        break;
                    }
                }
                let view = sim.view();
                let host = view.node::<TcpHost>(a).expect("node a is the TCP host");
                let took = if set.at_receiver {
                    let sink = view.node::<TcpSinkHost>(b).expect("node b is the TCP sink");
                    (1..=streams)
                        .map(|flow| sink.completed_at(a, flow).map(|t| t - Instant::ZERO))
                        .collect::<Option<Vec<_>>>()
                        .and_then(|v| v.into_iter().max())
                } else if host.completed.len() == streams as usize {
                    host.completed.iter().map(|c| c.1).max()
                } else {
                    None
                };
                if let Some(took) = took {
                    // One round trip for the handshake the model skips (the
                    // streams open in parallel).
                    let s = (took + set.path.rtt).as_secs_f64();
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
        let mut report = Report::new("bulk", seed);
        let mut count = Progress {
            done: 0,
            events: 0,
            progress,
        };
        if self.has_part("fig6") {
            self.fig6(seed, &mut count, &mut report)?;
        }
        if self.has_part("lfn") {
            self.lfn(seed, &mut count, &mut report)?;
        }
        report.summary.insert("events".into(), json!(count.events));
        Ok(report)
    }

    /// Figure 6: RBUDP at each rate, fixed and adaptive, and TCP, on the
    /// 100 Mbit/s path with competing traffic.
    fn fig6(
        &self,
        seed: u64,
        count: &mut Progress<'_>,
        report: &mut Report,
    ) -> Result<(), ScenarioError> {
        let mut runs_rows = Vec::new();
        let mut rows = Vec::new();
        let summary = &mut report.summary;
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
                let o = self.run_one(run_seed, scheme, &self.fig6_setting(scheme))?;
                count.one(&o);
                let rate = match scheme {
                    Scheme::Rbudp { rate, .. } => json!(rate.as_bps() as f64 / 1e6),
                    Scheme::Tcp { .. } | Scheme::Striped { .. } => json!(null),
                };
                let window = match scheme {
                    Scheme::Tcp { window, .. } | Scheme::Striped { window, .. } => json!(window),
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
                Scheme::Tcp { window, .. } | Scheme::Striped { window, .. } => {
                    (None, Some(window), None)
                }
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
        report.tables.extend([
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
        ]);
        report.plots.extend([
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
        ]);
        Ok(())
    }

    /// The LFN table: every mechanism moving `lfn_size` over the paper's
    /// 45 Mbit/s, 150 ms link at each random loss rate.
    fn lfn(
        &self,
        seed: u64,
        count: &mut Progress<'_>,
        report: &mut Report,
    ) -> Result<(), ScenarioError> {
        let link = self.lfn_rate.as_bps() as f64 / 1e6;
        let schemes = self.lfn_schemes();
        let mut rows = Vec::new();
        let mut runs_rows = Vec::new();
        let mut series = Vec::new();
        for (li, &loss) in self.lfn_loss.iter().enumerate() {
            let loss_label = loss_label(loss);
            let mut line = TimeSeries::new(loss_label.clone());
            for (si, &scheme) in schemes.iter().enumerate() {
                let set = self.lfn_setting(scheme, loss);
                let runs = self.lfn_runs(loss);
                let mut cell = Vec::new();
                for run in 0..runs {
                    // Every mechanism gets the same seed in run `run` of a
                    // loss rate; the losses still differ, as the packets do.
                    let run_seed = rng::derive_seed(
                        seed,
                        "bulk-lfn-run",
                        ((li as u64) << 32) | u64::from(run),
                    );
                    let o = self.run_one(run_seed, scheme, &set)?;
                    count.one(&o);
                    runs_rows.push(vec![
                        json!(loss.get()),
                        json!(scheme.label()),
                        json!(run),
                        json!(o.effective),
                        json!(o.elapsed),
                        json!(o.nak_rounds),
                        json!(o.retransmitted),
                        json!(o.control_timeouts),
                    ]);
                    cell.push(o);
                }
                let eff: Vec<f64> = cell.iter().filter_map(|o| o.effective).collect();
                let time: Vec<f64> = cell.iter().filter_map(|o| o.elapsed).collect();
                let naks: Vec<f64> = cell
                    .iter()
                    .filter_map(|o| o.nak_rounds.map(f64::from))
                    .collect();
                let retx: Vec<f64> = cell.iter().map(|o| o.retransmitted as f64).collect();
                let mean_eff = mean(&eff);
                let (rate, window) = match scheme {
                    Scheme::Rbudp { rate, .. } => (Some(rate.as_bps() as f64 / 1e6), None),
                    Scheme::Tcp { window, .. } | Scheme::Striped { window, .. } => {
                        (None, Some(window))
                    }
                };
                rows.push(vec![
                    json!(loss.get()),
                    json!(scheme.label()),
                    json!(scheme.name()),
                    json!(scheme.streams()),
                    json!(window),
                    json!(rate),
                    json!(runs),
                    json!(eff.len()),
                    json!(eff.iter().copied().reduce(f64::min)),
                    json!(mean_eff),
                    json!(eff.iter().copied().reduce(f64::max)),
                    json!(mean_eff.map(|e| e / link)),
                    json!(mean(&time)),
                    json!(mean(&naks)),
                    json!(naks.iter().copied().reduce(f64::max)),
                    json!(mean(&retx)),
                ]);
                let key = format!("{loss_label}, {}", scheme.label());
                report
                    .summary
                    .insert(format!("lfn_mbps[{key}]"), json!(mean_eff));
                if matches!(scheme, Scheme::Rbudp { .. }) {
                    report
                        .summary
                        .insert(format!("lfn_nak_rounds[{key}]"), json!(mean(&naks)));
                }
                if let Some(e) = mean_eff {
                    line.push(si as f64, e);
                }
            }
            series.push(line);
        }
        let mut capacity = TimeSeries::new("link rate");
        capacity.push(0.0, link);
        capacity.push(schemes.len().saturating_sub(1) as f64, link);
        series.push(capacity);
        report
            .summary
            .insert("lfn_bdp_bytes".into(), json!(self.lfn_bdp()));
        report.tables.extend([
            Table {
                file: "lfn".into(),
                columns: [
                    "loss",
                    "mechanism",
                    "scheme",
                    "streams",
                    "window_bytes",
                    "rate_mbps",
                    "runs",
                    "completed",
                    "effective_min_mbps",
                    "effective_mean_mbps",
                    "effective_max_mbps",
                    "link_fraction",
                    "time_mean_s",
                    "nak_rounds_mean",
                    "nak_rounds_max",
                    "retransmitted_mean",
                ]
                .map(String::from)
                .to_vec(),
                rows,
            },
            Table {
                file: "lfn_runs".into(),
                columns: [
                    "loss",
                    "mechanism",
                    "run",
                    "effective_mbps",
                    "elapsed_s",
                    "nak_rounds",
                    "retransmitted",
                    "control_timeouts",
                ]
                .map(String::from)
                .to_vec(),
                rows: runs_rows,
            },
        ]);
        report.plots.push(Plot {
            file: "lfn_throughput".into(),
            title: format!(
                "{} MB over {} at {} ms round trip, by random loss (Leigh et al. §4.2)",
                self.lfn_size.as_bytes() as f64 / 1e6,
                self.lfn_rate,
                self.lfn_rtt.as_millis()
            ),
            x_label: "mechanism".into(),
            y_label: "effective throughput (Mbit/s)".into(),
            series,
            style: PlotStyle::Lines,
            x_categories: schemes.iter().map(|s| s.label()).collect(),
            ..Default::default()
        });
        Ok(())
    }
}

/// The mean, `None` for no values.
fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// "no loss", "0.1% loss", "1% loss".
fn loss_label(p: Probability) -> String {
    if p.get() == 0.0 {
        return "no loss".into();
    }
    let pct = format!("{:.4}", p.get() * 100.0);
    format!("{}% loss", pct.trim_end_matches('0').trim_end_matches('.'))
}

/// Counts finished transfers for the progress report.
struct Progress<'a> {
    done: u64,
    events: u64,
    progress: &'a mut dyn FnMut(Instant),
}

impl Progress<'_> {
    fn one(&mut self, o: &Outcome) {
        self.done += 1;
        self.events += o.events;
        (self.progress)(Instant::from_nanos(self.done));
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
            parts: vec!["fig6".into()],
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
            parts: vec!["fig6".into()],
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
        for key in [
            "size",
            "packet_size",
            "runs",
            "parts",
            "lfn_streams",
            "lfn_loss",
            "lfn_rbudp_share",
        ] {
            let mut s = Bulk::default();
            match key {
                "size" => s.size = DataSize::bytes(0),
                "packet_size" => s.packet_size = 0,
                "runs" => s.runs = 0,
                "lfn_streams" => s.lfn_streams = vec![0],
                "lfn_loss" => s.lfn_loss.clear(),
                "lfn_rbudp_share" => s.lfn_rbudp_share = 0.0,
                _ => s.parts = vec!["fig9".into()],
            }
            let e = s.validate().unwrap_err().to_string();
            assert!(e.contains(key), "{key}: {e}");
        }
    }

    /// The LFN part alone at the paper's setting (45 Mbit/s, 150 ms,
    /// 50 MB), at the loss rates `loss`.
    fn lfn(loss: &[f64]) -> Bulk {
        Bulk {
            parts: vec!["lfn".into()],
            runs: 2,
            lfn_loss: loss
                .iter()
                .map(|&p| Probability::new(p).expect("a probability"))
                .collect(),
            ..Bulk::default()
        }
    }

    fn lfn_cell(r: &Report, loss: f64, mechanism: &str, col: &str) -> f64 {
        let t = r
            .tables
            .iter()
            .find(|t| t.file == "lfn")
            .expect("lfn table");
        let c = t.columns.iter().position(|x| x == col).expect("column");
        let row = t
            .rows
            .iter()
            .find(|row| row[0].as_f64() == Some(loss) && row[1] == mechanism)
            .expect("row");
        row[c].as_f64().unwrap_or(f64::NAN)
    }

    /// A table as the CLI's CSV writer lays it out: strings bare, other
    /// values as JSON text.
    fn csv(t: &Table) -> String {
        let cell = |v: &serde_json::Value| match v {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let mut out = t.columns.join(",");
        for row in &t.rows {
            out.push('\n');
            out.push_str(&row.iter().map(cell).collect::<Vec<_>>().join(","));
        }
        out
    }

    #[test]
    fn on_the_papers_lfn_a_64k_window_is_window_limited_and_striping_and_rbudp_are_not() {
        let r = lfn(&[0.0]).run(1, &mut |_| {}).expect("runs");
        // The CLI writes tables and plots as FILE.csv side by side.
        for p in &r.plots {
            assert!(r.tables.iter().all(|t| t.file != p.file), "{}", p.file);
        }
        let link = 45.0;
        // At most one 64 KiB window per 150 ms round trip: 3.495 Mbit/s. At
        // least 44 full segments (64 240 bytes, 98% of the window) per round
        // trip, over some 780 round trips, less the handshake and three
        // round trips of slow start from 10 segments: above 95% of it.
        let limit = 65536.0 * 8.0 / 0.15 / 1e6;
        let single = lfn_cell(&r, 0.0, "tcp, 64KiB window", "effective_mean_mbps");
        assert!((0.95 * limit..=limit).contains(&single), "{single}");
        // Eight such windows per round trip, still far below the link.
        let x8 = lfn_cell(&r, 0.0, "striped tcp x8", "effective_mean_mbps");
        assert!(x8 >= 4.0 * single, "{x8} against {single}");
        // The BDP window fills the link less the headers (1460 of every
        // 1500 bytes, 97%) after slow start from 10 to 578 segments (about
        // 6 round trips, 0.9 s of some 10 s) and the handshake: above 80%.
        let bdp = lfn_cell(&r, 0.0, "tcp, BDP window", "link_fraction");
        assert!(bdp >= 0.8, "{bdp}");
        // RBUDP blasts the payload at 95% of the link for 9.4 s; the
        // handshake and the end-of-blast exchange add about three round
        // trips (0.45 s): above 90%, and no NAK round on a lossless path.
        for m in ["rbudp fixed", "rbudp adaptive"] {
            let f = lfn_cell(&r, 0.0, m, "link_fraction");
            assert!(f >= 0.9, "{m}: {f} of {link} Mbit/s");
            assert_eq!(lfn_cell(&r, 0.0, m, "nak_rounds_max"), 0.0, "{m}");
        }
    }

    #[test]
    fn at_one_percent_loss_rbudp_holds_the_link_and_single_tcp_collapses() {
        let r = lfn(&[0.01]).run(1, &mut |_| {}).expect("runs");
        // The NAK rounds resend the 1% (and 1% of that): two or three
        // short rounds, about 0.5 s beside the 9.4 s blast.
        for m in ["rbudp fixed", "rbudp adaptive"] {
            let f = lfn_cell(&r, 0.01, m, "link_fraction");
            assert!(f >= 0.85, "{m}: {f}");
        }
        // Loss, not the window, limits TCP now: Mathis et al.'s
        // MSS/RTT * sqrt(3 / (2 b p)) with delayed ACKs (b = 2) is
        // 0.67 Mbit/s, whatever the window; under 1 Mbit/s, less than a
        // third of the 64 KiB window's lossless 3.4 Mbit/s.
        for m in ["tcp, 64KiB window", "tcp, BDP window"] {
            let e = lfn_cell(&r, 0.01, m, "effective_mean_mbps");
            assert!(e < 1.0, "{m}: {e}");
        }
        // Eight streams have eight such shares.
        let single = lfn_cell(&r, 0.01, "tcp, 64KiB window", "effective_mean_mbps");
        let x8 = lfn_cell(&r, 0.01, "striped tcp x8", "effective_mean_mbps");
        assert!(x8 > 3.0 * single, "{x8} against {single}");
    }

    #[test]
    fn the_same_seed_gives_the_same_lfn_csv() {
        let s = Bulk {
            lfn_size: DataSize::bytes(2_000_000),
            lfn_streams: vec![2],
            runs: 1,
            ..lfn(&[0.0, 0.01])
        };
        let a = s.run(7, &mut |_| {}).expect("runs");
        let b = s.run(7, &mut |_| {}).expect("runs");
        assert_eq!(a.tables.len(), 2);
        for (x, y) in a.tables.iter().zip(&b.tables) {
            assert_eq!(csv(x), csv(y), "{}", x.file);
        }
        let c = s.run(8, &mut |_| {}).expect("runs");
        assert_ne!(csv(&a.tables[1]), csv(&c.tables[1]));
    }
}
