//! Traffic sources and the UDP application nodes that carry them.
//!
//! A [`Source`] produces a schedule of application messages (send time and
//! size). The same schedule can be carried by plain UDP ([`UdpSender`] →
//! [`UdpSink`]), by TCP ([`crate::tcpnode`]) or, in later experiments, by a
//! FEC machine, so protocols are compared on identical input.

use std::fmt::Debug;
use std::path::Path;
use std::time::Duration;

use groupwire_link::qdisc::Dscp;
use groupwire_link::stats::LossStats;
use groupwire_proto::{Bitrate, Instant};
use rand::Rng;
use rand_distr::{Distribution, Exp};
use serde::{Deserialize, Serialize};

use crate::core::{Ctx, Node, NodeId, Packet, Payload};
use crate::metrics::{LatencyStats, TimeSeries};
use crate::rng::SimRng;

/// [`IP_UDP_OVERHEAD`](groupwire_proto::units::IP_UDP_OVERHEAD) as the
/// simulator's packet sizes count it.
pub(crate) const UDP_IP_HEADER: u32 = groupwire_proto::units::IP_UDP_OVERHEAD as u32;

/// One application message: when it is produced and how many bytes it has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message {
    /// When the application hands it over.
    pub at: Instant,
    /// Payload bytes (headers excluded).
    pub size: u32,
}

/// `n` messages of `size` bytes, `gap` seconds apart from time zero: a
/// constant-rate schedule known up front.
pub(crate) fn evenly_spaced(n: u64, gap: f64, size: u32) -> Vec<Message> {
    (0..n)
        .map(|i| Message {
            at: Instant::ZERO + Duration::from_secs_f64(i as f64 * gap),
            size,
        })
        .collect()
}

/// The number a numbered payload carries (its first 8 bytes, big-endian,
/// as the scenarios' senders write the message's index), if it has one
/// and it is below `n`.
pub(crate) fn payload_index(payload: &[u8], n: u64) -> Option<u64> {
    payload
        .get(..8)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map(u64::from_be_bytes)
        .filter(|&i| i < n)
}

/// Produces application messages in time order.
pub trait Source: Debug {
    /// The next message, or `None` when the source is done.
    fn next_message(&mut self, rng: &mut SimRng) -> Option<Message>;
}

/// All messages of `source` produced before `until`.
pub fn schedule(source: &mut dyn Source, until: Instant, rng: &mut SimRng) -> Vec<Message> {
    let mut out = Vec::new();
    while let Some(m) = source.next_message(rng) {
        if m.at >= until {
            break;
        }
        out.push(m);
    }
    out
}

/// Constant bit rate: `size`-byte messages spaced so the payload rate is `rate`.
#[derive(Debug, Clone)]
pub struct Cbr {
    size: u32,
    interval: Duration,
    next: Instant,
}

impl Cbr {
    /// `size`-byte messages at `rate` (payload bits), starting at `start`.
    pub fn new(rate: Bitrate, size: u32, start: Instant) -> Self {
        Self {
            size,
            interval: rate.transmit_time(u64::from(size)),
            next: start,
        }
    }
}

impl Source for Cbr {
    fn next_message(&mut self, _rng: &mut SimRng) -> Option<Message> {
        let m = Message {
            at: self.next,
            size: self.size,
        };
        self.next += self.interval;
        Some(m)
    }
}

/// Parameters of the clustered telepointer source.
///
/// Dyck & Gutwin §5 recorded "a message trace ... by moving a mouse manually
/// in a manner that simulated natural activity with a whiteboard", with
/// "the update frequency for the telepointer ... fixed at a maximum rate of
/// 30 updates/second", and §3 describes telepointer motion as "most often a
/// series of moves with stops in between". The trace itself is not
/// published, so this source models it as alternating *moves* (exponential
/// length, mean `mean_move`) and *pauses* (exponential, mean `mean_pause`).
/// During a move the pointer is sampled at `max_rate` and each tick produces
/// an update unless the mouse happens to be still for that tick
/// (`idle_tick` probability). Messages are `size` bytes: a telepointer
/// update (user, x, y, timestamp, trace points) is well under the paper's
/// "< 200 bytes" bound for awareness messages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelepointerParams {
    /// Updates per second while moving (paper: 30).
    pub max_rate: f64,
    /// Mean length of a burst of motion.
    #[serde(with = "crate::scenario::serde_duration")]
    pub mean_move: Duration,
    /// Mean pause between bursts of motion.
    #[serde(with = "crate::scenario::serde_duration")]
    pub mean_pause: Duration,
    /// Probability that a tick during a move produces no update.
    pub idle_tick: f64,
    /// Message payload bytes.
    pub size: u32,
}

impl Default for TelepointerParams {
    fn default() -> Self {
        Self {
            max_rate: 30.0,
            mean_move: Duration::from_millis(2_000),
            mean_pause: Duration::from_millis(800),
            idle_tick: 0.1,
            size: 40,
        }
    }
}

impl TelepointerParams {
    /// Long-run mean update rate, per second.
    pub fn mean_rate(&self) -> f64 {
        let on = self.mean_move.as_secs_f64();
        let off = self.mean_pause.as_secs_f64();
        self.max_rate * (1.0 - self.idle_tick) * on / (on + off)
    }
}

/// The clustered telepointer source (see [`TelepointerParams`]).
#[derive(Debug, Clone)]
pub struct Telepointer {
    params: TelepointerParams,
    tick: Duration,
    now: Instant,
    move_ends: Instant,
}

impl Telepointer {
    /// A source starting with a move at `start`.
    ///
    /// # Panics
    /// If `max_rate` is not positive or the means are zero (validated by the scenario).
    pub fn new(params: TelepointerParams, start: Instant) -> Self {
        assert!(params.max_rate > 0.0, "max_rate must be positive");
        let tick = Duration::from_secs_f64(1.0 / params.max_rate);
        Self {
            params,
            tick,
            now: start,
            move_ends: start,
        }
    }
}

fn exp_sample(rng: &mut SimRng, mean: Duration) -> Duration {
    let exp =
        Exp::new(1.0 / mean.as_secs_f64().max(1e-9)).expect("rate of a positive mean is positive");
    Duration::from_secs_f64(exp.sample(rng))
}

impl Source for Telepointer {
    fn next_message(&mut self, rng: &mut SimRng) -> Option<Message> {
        loop {
            if self.now >= self.move_ends {
                // A new move starts after a pause (no pause before the first move).
                if self.move_ends > Instant::ZERO || self.now > Instant::ZERO {
                    self.now += exp_sample(rng, self.params.mean_pause);
                }
                self.move_ends = self.now + exp_sample(rng, self.params.mean_move).max(self.tick);
            }
            let at = self.now;
            self.now += self.tick;
            if rng.random::<f64>() >= self.params.idle_tick {
                return Some(Message {
                    at,
                    size: self.params.size,
                });
            }
        }
    }
}

/// Replays messages from a CSV file with lines `seconds,bytes` (a header
/// line and `#` comments are allowed). Times must not go backwards.
#[derive(Debug, Clone)]
pub struct TraceSource {
    messages: Vec<Message>,
    next: usize,
}

/// Why a trace file could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TraceError {
    /// The file could not be opened or read.
    #[error("cannot read trace {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A line is not `seconds,bytes`.
    #[error("trace {path}, line {line}: {why} (expected `seconds,bytes`, e.g. `0.033,40`)")]
    Line {
        /// The file.
        path: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        why: &'static str,
    },
}

impl TraceSource {
    /// Reads a trace file.
    pub fn from_file(path: &Path) -> Result<Self, TraceError> {
        let text = std::fs::read_to_string(path).map_err(|source| TraceError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parses trace text; `name` is used in errors.
    pub fn parse(text: &str, name: &str) -> Result<Self, TraceError> {
        let mut messages = Vec::new();
        let err = |line, why| TraceError::Line {
            path: name.to_owned(),
            line,
            why,
        };
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut parts = line.split(',');
            let (Some(t), Some(s), None) = (parts.next(), parts.next(), parts.next()) else {
                return Err(err(i + 1, "wrong number of fields"));
            };
            let Ok(secs) = t.trim().parse::<f64>() else {
                if i == 0 {
                    continue; // a header line
                }
                return Err(err(i + 1, "time is not a number"));
            };
            let size: u32 = s
                .trim()
                .parse()
                .map_err(|_| err(i + 1, "size is not a whole number of bytes"))?;
            if !secs.is_finite() || secs < 0.0 {
                return Err(err(i + 1, "time must be a non-negative number of seconds"));
            }
            let at = Instant::from_nanos((secs * 1e9).round() as u64);
            if messages.last().is_some_and(|m: &Message| m.at > at) {
                return Err(err(i + 1, "time goes backwards"));
            }
            messages.push(Message { at, size });
        }
        Ok(Self { messages, next: 0 })
    }
}

impl Source for TraceSource {
    fn next_message(&mut self, _rng: &mut SimRng) -> Option<Message> {
        let m = self.messages.get(self.next).copied();
        self.next += 1;
        m
    }
}

/// Sends a message schedule as one UDP datagram per message, each marked
/// with the sender's current DiffServ codepoint ([`Dscp::DEFAULT`] unless
/// set with [`UdpSender::with_dscp`] or, mid-run from a script,
/// [`UdpSender::set_dscp`]).
#[derive(Debug)]
pub struct UdpSender {
    me: NodeId,
    dst: NodeId,
    flow: u32,
    messages: Vec<Message>,
    next: usize,
    dscp: Dscp,
}

impl UdpSender {
    /// Sends `messages` from node `me` to `dst` as flow `flow`.
    pub fn new(me: NodeId, dst: NodeId, flow: u32, messages: Vec<Message>) -> Self {
        Self {
            me,
            dst,
            flow,
            messages,
            next: 0,
            dscp: Dscp::DEFAULT,
        }
    }
    /// Marks every datagram with `dscp`.
    pub fn with_dscp(mut self, dscp: Dscp) -> Self {
        self.dscp = dscp;
        self
    }
    /// Marks the datagrams sent from now on with `dscp` (as an application
    /// does when a reservation is granted: Leigh et al. §3's GARA).
    pub fn set_dscp(&mut self, dscp: Dscp) {
        self.dscp = dscp;
    }
    /// The mark of the datagrams sent now.
    pub fn dscp(&self) -> Dscp {
        self.dscp
    }
    /// Messages sent so far.
    pub fn sent(&self) -> usize {
        self.next
    }
}

impl Node for UdpSender {
    fn handle_packet(&mut self, _ctx: &mut Ctx<'_>, _pkt: Packet) {}

    fn handle_timeout(&mut self, ctx: &mut Ctx<'_>) {
        while let Some(m) = self.messages.get(self.next).filter(|m| m.at <= ctx.now()) {
            let payload = Payload::Message {
                seq: self.next as u64,
                sent_at: m.at,
            };
            ctx.send(
                Packet::new(
                    self.me,
                    self.dst,
                    self.flow,
                    m.size + UDP_IP_HEADER,
                    payload,
                )
                .with_dscp(self.dscp),
            );
            self.next += 1;
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.messages.get(self.next).map(|m| m.at)
    }
}

/// Receives [`Payload::Message`] datagrams: latency, loss and burst statistics.
#[derive(Debug, Default)]
pub struct UdpSink {
    /// Latency of each received message.
    pub latency: LatencyStats,
    /// Loss pattern by message sequence number (gaps are losses).
    pub loss: LossStats,
    /// Payload bytes received (headers excluded).
    pub bytes: u64,
    /// Per-message latency over time, if enabled with [`UdpSink::with_series`].
    pub series: Option<TimeSeries>,
    next_seq: u64,
    late: u64,
}

impl UdpSink {
    /// An empty sink.
    pub fn new() -> Self {
        Self::default()
    }
    /// Also keep every message's latency as a time series (for plots).
    pub fn with_series(mut self) -> Self {
        self.series = Some(TimeSeries::new("latency_ms"));
        self
    }
    /// Messages that arrived after a later one (reordered); they are not
    /// counted as losses twice, nor as deliveries in the loss pattern.
    pub fn reordered(&self) -> u64 {
        self.late
    }
}

impl Node for UdpSink {
    fn handle_packet(&mut self, ctx: &mut Ctx<'_>, pkt: Packet) {
        let Payload::Message { seq, sent_at } = pkt.payload else {
            return;
        };
        if seq < self.next_seq {
            self.late += 1;
            return;
        }
        for _ in self.next_seq..seq {
            self.loss.record(true);
        }
        self.loss.record(false);
        self.next_seq = seq + 1;
        let lat = ctx.now() - sent_at;
        self.latency.record(lat);
        self.bytes += u64::from(pkt.size.saturating_sub(UDP_IP_HEADER));
        if let Some(s) = &mut self.series {
            s.push(sent_at.as_secs_f64(), lat.as_secs_f64() * 1e3);
        }
    }
    fn handle_timeout(&mut self, _ctx: &mut Ctx<'_>) {}
    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng;

    #[test]
    fn telepointer_is_clustered_and_capped_at_max_rate() {
        let p = TelepointerParams::default();
        let mut src = Telepointer::new(p.clone(), Instant::ZERO);
        let mut r = rng::stream(1, "test", 0);
        let msgs = schedule(&mut src, Instant::from_secs(2000), &mut r);
        let rate = msgs.len() as f64 / 2000.0;
        assert!(
            (rate - p.mean_rate()).abs() / p.mean_rate() < 0.05,
            "rate {rate} vs {}",
            p.mean_rate()
        );
        let tick = Duration::from_secs_f64(1.0 / 30.0);
        let gaps: Vec<Duration> = msgs.windows(2).map(|w| w[1].at - w[0].at).collect();
        assert!(
            gaps.iter().all(|g| *g + Duration::from_micros(1) >= tick),
            "never faster than 30/s"
        );
        let pauses = gaps
            .iter()
            .filter(|g| **g > Duration::from_millis(200))
            .count();
        assert!(pauses > 500, "moves separated by pauses: {pauses}");
    }

    #[test]
    fn cbr_spacing_matches_rate() {
        let mut src = Cbr::new(Bitrate::mbps(1), 125, Instant::ZERO);
        let mut r = rng::stream(1, "test", 0);
        let msgs = schedule(&mut src, Instant::from_secs(1), &mut r);
        assert_eq!(msgs.len(), 1000);
    }

    #[test]
    fn trace_parses_and_rejects_bad_lines() {
        let t = TraceSource::parse("seconds,bytes\n0.0,40\n# c\n0.033,41\n", "t").unwrap();
        assert_eq!(t.messages.len(), 2);
        let e = TraceSource::parse("0.1,40\n0.05,40\n", "t").unwrap_err();
        assert!(e.to_string().contains("line 2"), "{e}");
        assert!(TraceSource::parse("0.1,x\n", "t").is_err());
    }
}
