//! Instrumentation of one channel: "every CAVERNsoft network class has been
//! instrumented to measure bandwidth, latency, jitter and burstiness"
//! (Leigh et al. §4). Every groupwire transport (AFEC, the block FEC and XOR
//! FEC tunnels, plain UDP, the relay client), in the simulator and on real
//! sockets, feeds one [`ChannelMeter`] and reports a [`ChannelSnapshot`]:
//!
//! - **bandwidth** in and out, from the datagrams on the wire;
//! - **latency** of each delivered data unit: one-way where the clocks
//!   allow (the simulator's one clock, or wall-clock stamps on one host),
//!   else above the lowest transit seen, else from the round trip
//!   ([`LatencyKind`]);
//! - **jitter** as Figure 4 of the paper defines it ([`Fig4Jitter`]) and
//!   RFC 3550's interarrival jitter beside it ([`Rfc3550Jitter`]);
//! - **burstiness** of the loss on the wire: run lengths, the mean burst,
//!   and the Gilbert chain fitted from them ([`BurstStats`]);
//! - **residual loss** (never delivered) and the **recovery path** of each
//!   delivered unit ([`Path`]).
//!
//! Sans-IO: the caller passes the time and what happened; the meter keeps
//! fixed memory (a ring of `window` sequence numbers) whatever the peer
//! sends.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use groupwire_units::Instant;
use serde::{Deserialize, Deserializer, Serialize};

use crate::{LatencyStats, LatencySummary};

/// How a data unit reached the application.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Path {
    /// It arrived itself.
    Arrived,
    /// Rebuilt from a copy piggybacked on a later packet (AFEC, RFC 2198).
    Piggyback,
    /// Rebuilt by a block code (GENEVA's Reed-Solomon blocks).
    Block,
    /// Rebuilt from an XOR row parity.
    XorRow,
    /// Rebuilt from an XOR column parity.
    XorColumn,
    /// Sent again on request (ARQ).
    Retransmit,
}

impl Path {
    /// Every path, in report order.
    pub const ALL: [Path; 6] = [
        Path::Arrived,
        Path::Piggyback,
        Path::Block,
        Path::XorRow,
        Path::XorColumn,
        Path::Retransmit,
    ];

    /// Its name in reports and metric labels.
    pub fn name(self) -> &'static str {
        match self {
            Path::Arrived => "arrived",
            Path::Piggyback => "piggyback",
            Path::Block => "block",
            Path::XorRow => "xor_row",
            Path::XorColumn => "xor_column",
            Path::Retransmit => "retransmit",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// What a channel's latency figures mean.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LatencyKind {
    /// Receive time minus send time on one clock (the simulator, or wall
    /// clock stamps compared on one host or between synchronized hosts).
    OneWay,
    /// Transit (receive time minus the sender's stamp on its own clock)
    /// above the lowest transit seen so far: the queueing and recovery
    /// delay, without the unknown clock offset and propagation (as LEDBAT's
    /// base delay, RFC 6817 §3.4.2).
    AboveBase,
    /// Half the round trip the protocol measures, plus what recovery added.
    HalfRtt,
}

impl LatencyKind {
    /// Its name in reports and metric labels.
    pub fn name(self) -> &'static str {
        match self {
            LatencyKind::OneWay => "one_way",
            LatencyKind::AboveBase => "above_base",
            LatencyKind::HalfRtt => "half_rtt",
        }
    }
}

/// Jitter as Leigh et al. define it under Figure 4: "first calculating the
/// short-term latency over every 20 data points and then computing the
/// average deviation of the instantaneous latency as compared to the
/// short-term latency". The short-term latency is the mean of each
/// consecutive, non-overlapping run of 20 samples (our reading of "every 20
/// data points"); the jitter is the mean absolute deviation of the samples
/// from their run's mean. Samples of an unfinished run wait for it.
#[derive(Clone, Debug, Default)]
pub struct Fig4Jitter {
    run: Vec<f64>,
    deviation_sum: f64,
    samples: u64,
}

impl Fig4Jitter {
    /// Samples per short-term latency (the paper's 20).
    pub const RUN: usize = 20;

    /// Adds one latency sample, in microseconds.
    pub fn push(&mut self, latency_us: f64) {
        self.run.push(latency_us);
        if self.run.len() == Self::RUN {
            // Relative to the first sample, so a constant run gives exactly 0.
            let first = self.run[0];
            let mean = first + self.run.iter().map(|x| x - first).sum::<f64>() / Self::RUN as f64;
            self.deviation_sum += self.run.iter().map(|x| (x - mean).abs()).sum::<f64>();
            self.samples += Self::RUN as u64;
            self.run.clear();
        }
    }

    /// The jitter in microseconds over the finished runs; `None` before the
    /// first run of 20 finishes.
    pub fn micros(&self) -> Option<f64> {
        (self.samples > 0).then(|| self.deviation_sum / self.samples as f64)
    }

    /// Forgets the finished runs (an interval starts again); the unfinished
    /// run carries over.
    pub fn reset(&mut self) {
        self.deviation_sum = 0.0;
        self.samples = 0;
    }
}

/// RFC 3550 §6.4.1 interarrival jitter: `J += (|D(i-1, i)| - J) / 16`,
/// where `D` is the difference of two consecutive packets' transit times,
/// in arrival order. A constant clock offset cancels in `D`, so any
/// latency kind gives the same jitter.
#[derive(Clone, Copy, Debug, Default)]
pub struct Rfc3550Jitter {
    jitter: f64,
    last: Option<f64>,
}

impl Rfc3550Jitter {
    /// Adds one packet's transit time, in microseconds.
    pub fn push(&mut self, transit_us: f64) {
        if let Some(last) = self.last {
            self.jitter += ((transit_us - last).abs() - self.jitter) / 16.0;
        }
        self.last = Some(transit_us);
    }

    /// The current estimate in microseconds; `None` before two packets.
    pub fn micros(&self) -> Option<f64> {
        self.last.is_some().then_some(self.jitter)
    }
}

/// Longest run length counted on its own; longer runs share the last bucket.
pub const MAX_RUN_BUCKET: u64 = 32;

/// Burstiness of a loss process: the distribution of loss run lengths, and
/// the two-state Gilbert chain fitted to the sequence (every loss in the
/// bad state, none in the good one). The fit is the maximum-likelihood one:
/// `p` = P(loss | previous arrived) and `r` = P(arrival | previous lost),
/// from the counted transitions, so the mean burst is `1 / r`.
#[derive(Clone, Debug, Default)]
pub struct BurstStats {
    /// Runs of length `1..=MAX_RUN_BUCKET` (the last counts longer runs too).
    runs: [u64; MAX_RUN_BUCKET as usize],
    run_count: u64,
    run_sum: u64,
    max_run: u64,
    current: u64,
    prev_lost: Option<bool>,
    good_to_bad: u64,
    good_stays: u64,
    bad_to_good: u64,
    bad_stays: u64,
}

impl BurstStats {
    /// Adds `n` consecutive outcomes, all lost or all arrived.
    pub fn push_run(&mut self, lost: bool, n: u64) {
        if n == 0 {
            return;
        }
        let count = match (self.prev_lost, lost) {
            (Some(false), true) => &mut self.good_to_bad,
            (Some(true), false) => &mut self.bad_to_good,
            (Some(false), false) => &mut self.good_stays,
            (Some(true), true) => &mut self.bad_stays,
            (None, _) => &mut 0,
        };
        *count = count.saturating_add(1);
        // Saturating: a hostile peer's sequence numbers can claim runs
        // near 2^64, more than once.
        if lost {
            self.bad_stays = self.bad_stays.saturating_add(n - 1);
            self.current = self.current.saturating_add(n);
        } else {
            self.good_stays = self.good_stays.saturating_add(n - 1);
            self.end_run();
        }
        self.prev_lost = Some(lost);
    }

    /// Adds one outcome.
    pub fn push(&mut self, lost: bool) {
        self.push_run(lost, 1);
    }

    fn end_run(&mut self) {
        if self.current > 0 {
            let bucket = self.current.min(MAX_RUN_BUCKET) as usize - 1;
            self.runs[bucket] += 1;
            self.run_count += 1;
            self.run_sum = self.run_sum.saturating_add(self.current);
            self.max_run = self.max_run.max(self.current);
            self.current = 0;
        }
    }

    /// Finished loss runs, and a run still open at the end of the sequence
    /// counted as if it ended now.
    pub fn summary(&self) -> BurstSummary {
        let mut s = self.clone();
        s.end_run();
        let frac = |a: u64, b: u64| {
            let (a, b) = (a as f64, b as f64);
            (a + b > 0.0).then(|| a / (a + b))
        };
        BurstSummary {
            runs: s.run_count,
            mean_run: (s.run_count > 0).then(|| s.run_sum as f64 / s.run_count as f64),
            max_run: s.max_run,
            run_lengths: s
                .runs
                .iter()
                .enumerate()
                .filter(|(_, n)| **n > 0)
                .map(|(i, n)| (i as u64 + 1, *n))
                .collect(),
            gilbert_p: frac(s.good_to_bad, s.good_stays),
            gilbert_r: frac(s.bad_to_good, s.bad_stays),
        }
    }
}

/// A [`BurstStats`] summarized.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BurstSummary {
    /// Loss runs.
    pub runs: u64,
    /// Mean loss run length; `None` without losses.
    pub mean_run: Option<f64>,
    /// Longest loss run.
    pub max_run: u64,
    /// `(length, runs)` for every length seen; the last bucket,
    /// [`MAX_RUN_BUCKET`], also counts longer runs.
    pub run_lengths: Vec<(u64, u64)>,
    /// Fitted Gilbert P(good → bad); `None` before an arrival was followed
    /// by anything.
    pub gilbert_p: Option<f64>,
    /// Fitted Gilbert P(bad → good); `None` before a loss was followed by
    /// anything.
    pub gilbert_r: Option<f64>,
}

/// Counters that only grow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Traffic {
    /// Datagrams.
    pub packets: u64,
    /// Bytes on the wire (UDP payload).
    pub bytes: u64,
}

/// Per-channel counters, cumulative.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Counters {
    out: Traffic,
    inbound: Traffic,
    paths: [u64; Path::ALL.len()],
    judged: u64,
    wire_lost: u64,
    residual_lost: u64,
    late: u64,
    duplicates: u64,
}

/// The meter of one channel. Feed it every datagram sent and received
/// ([`sent`](Self::sent), [`received`](Self::received)) and every data unit
/// delivered to the application ([`delivered`](Self::delivered), with the
/// unit's sequence number in the channel's own numbering, extended to 64
/// bits). A sequence number is judged once `window` later ones have been
/// seen (or at [`finish`](Self::finish)): arrived, rebuilt, or lost.
#[derive(Clone, Debug)]
pub struct ChannelMeter {
    name: String,
    kind: LatencyKind,
    start: Instant,
    counters: Counters,
    latency: LatencyStats,
    latency_interval: LatencyStats,
    fig4: Fig4Jitter,
    fig4_interval: Fig4Jitter,
    rfc3550: Rfc3550Jitter,
    bursts: BurstStats,
    /// Path index + 1 of each sequence number in the window (0: nothing),
    /// tagged with the sequence number it belongs to.
    ring: Vec<(u64, u8)>,
    newest: Option<u64>,
    /// Everything below this has been judged.
    judged_below: u64,
    last: (Instant, Counters),
}

/// Sequence numbers a meter waits for before judging one lost, by default.
pub const DEFAULT_WINDOW: u64 = 4096;

impl ChannelMeter {
    /// A meter for channel `name` started at `now`, judging losses
    /// [`DEFAULT_WINDOW`] sequence numbers behind the newest.
    pub fn new(name: impl Into<String>, kind: LatencyKind, now: Instant) -> Self {
        Self::with_window(name, kind, now, DEFAULT_WINDOW)
    }

    /// As [`new`](Self::new), judging `window` (at least 1, at most 2^20)
    /// sequence numbers behind the newest. A rebuilt unit must be reported
    /// within the window to count as delivered.
    pub fn with_window(
        name: impl Into<String>,
        kind: LatencyKind,
        now: Instant,
        window: u64,
    ) -> Self {
        let window = window.clamp(1, 1 << 20);
        Self {
            name: name.into(),
            kind,
            start: now,
            counters: Counters::default(),
            latency: LatencyStats::new(),
            latency_interval: LatencyStats::new(),
            fig4: Fig4Jitter::default(),
            fig4_interval: Fig4Jitter::default(),
            rfc3550: Rfc3550Jitter::default(),
            bursts: BurstStats::default(),
            ring: vec![(u64::MAX, 0); window as usize],
            newest: None,
            judged_below: 0,
            last: (now, Counters::default()),
        }
    }

    /// The channel's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What its latency figures mean.
    pub fn latency_kind(&self) -> LatencyKind {
        self.kind
    }

    /// A datagram of `bytes` went out.
    pub fn sent(&mut self, bytes: usize) {
        self.counters.out.packets += 1;
        self.counters.out.bytes += bytes as u64;
    }

    /// `n` datagrams of `bytes` in all went out.
    pub fn sent_many(&mut self, n: u64, bytes: u64) {
        self.counters.out.packets += n;
        self.counters.out.bytes += bytes;
    }

    /// A datagram of `bytes` came in (any kind: data, parity, feedback).
    pub fn received(&mut self, bytes: usize) {
        self.counters.inbound.packets += 1;
        self.counters.inbound.bytes += bytes as u64;
    }

    /// `n` datagrams of `bytes` in all came in.
    pub fn received_many(&mut self, n: u64, bytes: u64) {
        self.counters.inbound.packets += n;
        self.counters.inbound.bytes += bytes;
    }

    /// The data unit numbered `seq` reached the application by `path`;
    /// `latency` as the channel's [`LatencyKind`] defines it, if known.
    pub fn delivered(&mut self, seq: u64, path: Path, latency: Option<Duration>) {
        if let Some(l) = latency {
            let us = l.as_secs_f64() * 1e6;
            self.latency.record(l);
            self.latency_interval.record(l);
            self.fig4.push(us);
            self.fig4_interval.push(us);
            self.rfc3550.push(us);
        }
        let window = self.ring.len() as u64;
        match self.newest {
            None => {
                self.newest = Some(seq);
                self.judged_below = seq;
            }
            Some(n) if seq > n => {
                self.newest = Some(seq);
                // Judge what falls out of the window; a jump past the whole
                // window judges the skipped span in one step (bounded work
                // whatever the peer claims).
                let keep_from = seq.saturating_add(1).saturating_sub(window);
                self.judge_until(keep_from);
            }
            Some(_) if seq < self.judged_below => {
                self.counters.late += 1;
                self.counters.paths[path.index()] += 1;
                return;
            }
            Some(_) => {}
        }
        let slot = &mut self.ring[(seq % window) as usize];
        if slot.0 == seq && slot.1 != 0 {
            self.counters.duplicates += 1;
            return;
        }
        *slot = (seq, path.index() as u8 + 1);
        self.counters.paths[path.index()] += 1;
    }

    /// Judges every sequence number below `end`.
    fn judge_until(&mut self, end: u64) {
        let window = self.ring.len() as u64;
        if end <= self.judged_below {
            return;
        }
        // Only the first `window` numbers can have been recorded (nothing
        // newer than the previous newest was, and everything `window`
        // behind it is judged already); the rest of a jump is lost.
        let ring_end = end.min(self.judged_below.saturating_add(window));
        for seq in self.judged_below..ring_end {
            let slot = self.ring[(seq % window) as usize];
            let state = if slot.0 == seq { slot.1 } else { 0 };
            let arrived = state == Path::Arrived.index() as u8 + 1;
            self.bursts.push(!arrived);
            let c = &mut self.counters;
            c.judged = c.judged.saturating_add(1);
            c.wire_lost = c.wire_lost.saturating_add(u64::from(!arrived));
            c.residual_lost = c.residual_lost.saturating_add(u64::from(state == 0));
        }
        let skipped = end - ring_end;
        if skipped > 0 {
            self.bursts.push_run(true, skipped);
            let c = &mut self.counters;
            c.judged = c.judged.saturating_add(skipped);
            c.wire_lost = c.wire_lost.saturating_add(skipped);
            c.residual_lost = c.residual_lost.saturating_add(skipped);
        }
        self.judged_below = end;
    }

    /// Judges every sequence number up to and including `seq` (at most the
    /// newest) now, without waiting for the window: for a channel that
    /// delivers in order (a relay over TCP), where a gap is known to be a
    /// loss as soon as a later unit arrives.
    pub fn judge_through(&mut self, seq: u64) {
        if let Some(n) = self.newest {
            self.judge_until(seq.min(n).saturating_add(1));
        }
    }

    /// Judges every sequence number up to the newest (the end of a run).
    pub fn finish(&mut self) {
        if let Some(n) = self.newest {
            self.judge_until(n.saturating_add(1));
        }
    }

    /// The sender's numbering starts again (a restarted peer): what was
    /// pending is judged, and the next unit starts a new sequence.
    pub fn restart_numbering(&mut self) {
        self.finish();
        self.newest = None;
        self.ring.fill((u64::MAX, 0));
    }

    /// The channel as of `now`: totals since the start, rates and latency
    /// over the interval since the last snapshot, which starts a new one.
    pub fn snapshot(&mut self, now: Instant) -> ChannelSnapshot {
        let c = self.counters;
        let (then, before) = self.last;
        let interval = now.saturating_duration_since(then).as_secs_f64();
        let rate = |now: u64, then: u64| {
            if interval > 0.0 {
                (now - then) as f64 * 8.0 / interval
            } else {
                0.0
            }
        };
        let ratio = |a: u64, b: u64| (b > 0).then(|| a as f64 / b as f64);
        let snap = ChannelSnapshot {
            channel: self.name.clone(),
            t_s: now.saturating_duration_since(self.start).as_secs_f64(),
            interval_s: interval,
            out: Direction {
                packets: c.out.packets,
                bytes: c.out.bytes,
                bitrate: rate(c.out.bytes, before.out.bytes),
            },
            inbound: Direction {
                packets: c.inbound.packets,
                bytes: c.inbound.bytes,
                bitrate: rate(c.inbound.bytes, before.inbound.bytes),
            },
            latency_kind: self.kind,
            latency: self.latency_interval.summary(),
            latency_total: self.latency.summary(),
            jitter_fig4_ms: self.fig4_interval.micros().map(|j| j / 1000.0),
            jitter_fig4_total_ms: self.fig4.micros().map(|j| j / 1000.0),
            jitter_rfc3550_ms: self.rfc3550.micros().map(|j| j / 1000.0),
            loss: LossSummary {
                judged: c.judged,
                wire_lost: c.wire_lost,
                wire_loss: ratio(c.wire_lost, c.judged),
                residual_lost: c.residual_lost,
                residual_loss: ratio(c.residual_lost, c.judged),
                late: c.late,
                duplicates: c.duplicates,
            },
            burst: self.bursts.summary(),
            paths: Path::ALL
                .iter()
                .map(|p| (p.name(), c.paths[p.index()]))
                .collect(),
        };
        self.latency_interval.reset();
        self.fig4_interval.reset();
        self.last = (now, c);
        snap
    }
}

/// Traffic one way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Direction {
    /// Datagrams since the start.
    pub packets: u64,
    /// Bytes since the start.
    pub bytes: u64,
    /// Bits per second over the last interval.
    pub bitrate: f64,
}

/// Loss as judged so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LossSummary {
    /// Sequence numbers judged.
    pub judged: u64,
    /// Judged ones that did not arrive themselves (the wire's loss).
    pub wire_lost: u64,
    /// `wire_lost / judged`.
    pub wire_loss: Option<f64>,
    /// Judged ones never delivered (the loss the application saw).
    pub residual_lost: u64,
    /// `residual_lost / judged`.
    pub residual_loss: Option<f64>,
    /// Delivered after they had been judged (counted on their path only).
    pub late: u64,
    /// Delivered twice (the second time ignored).
    pub duplicates: u64,
}

/// One channel's measures at one time: the JSON-lines record and the
/// source of the Prometheus text ([`prometheus_text`]). A record read back
/// (`serde_json::from_str`) is the snapshot that was written;
/// [`columns`](Self::columns) flattens it into named numbers for a CSV row
/// or a chart.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChannelSnapshot {
    /// The channel's name.
    pub channel: String,
    /// Seconds since the meter started.
    pub t_s: f64,
    /// Seconds since the previous snapshot.
    pub interval_s: f64,
    /// What went out.
    pub out: Direction,
    /// What came in.
    #[serde(rename = "in")]
    pub inbound: Direction,
    /// What the latency figures mean.
    pub latency_kind: LatencyKind,
    /// Latency over the interval.
    pub latency: LatencySummary,
    /// Latency since the start.
    pub latency_total: LatencySummary,
    /// Figure 4 jitter over the interval, ms.
    pub jitter_fig4_ms: Option<f64>,
    /// Figure 4 jitter since the start, ms.
    pub jitter_fig4_total_ms: Option<f64>,
    /// RFC 3550 interarrival jitter now, ms.
    pub jitter_rfc3550_ms: Option<f64>,
    /// Loss on the wire and after recovery.
    pub loss: LossSummary,
    /// Burstiness of the wire's loss.
    pub burst: BurstSummary,
    /// Units delivered by each path, since the start.
    #[serde(deserialize_with = "path_counts")]
    pub paths: BTreeMap<&'static str, u64>,
}

/// Reads `paths` back: every key must be one of [`Path::ALL`]'s names (so
/// the map can keep its `&'static str` keys).
fn path_counts<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<&'static str, u64>, D::Error> {
    BTreeMap::<String, u64>::deserialize(d)?
        .into_iter()
        .map(|(k, n)| {
            Path::ALL
                .iter()
                .find(|p| p.name() == k)
                .map(|p| (p.name(), n))
                .ok_or_else(|| serde::de::Error::custom(format!("unknown recovery path {k:?}")))
        })
        .collect()
}

/// The names of [`ChannelSnapshot::columns`], in order: a CSV header.
///
/// Rates are per interval (`out_mbps`, `in_mbps`, `latency_*`,
/// `jitter_fig4_ms`); counters, loss ratios, burstiness and path counts are
/// since the start, as in the snapshot; `jitter_rfc3550_ms` is the running
/// estimate.
pub const COLUMNS: [&str; 43] = [
    "t_s",
    "interval_s",
    "out_packets",
    "out_bytes",
    "out_mbps",
    "in_packets",
    "in_bytes",
    "in_mbps",
    "latency_count",
    "latency_mean_ms",
    "latency_p50_ms",
    "latency_p95_ms",
    "latency_p99_ms",
    "latency_max_ms",
    "latency_total_count",
    "latency_total_mean_ms",
    "latency_total_p50_ms",
    "latency_total_p95_ms",
    "latency_total_p99_ms",
    "latency_total_max_ms",
    "jitter_fig4_ms",
    "jitter_fig4_total_ms",
    "jitter_rfc3550_ms",
    "loss_judged",
    "loss_wire_lost",
    "loss_wire",
    "loss_residual_lost",
    "loss_residual",
    "loss_late",
    "loss_duplicates",
    "burst_runs",
    "burst_mean",
    "burst_max",
    "gilbert_p",
    "gilbert_r",
    // One per `Path::ALL`, in order.
    "path_arrived",
    "path_piggyback",
    "path_block",
    "path_xor_row",
    "path_xor_column",
    "path_retransmit",
    // The last two, apart from the paths: every delivered unit and the
    // rebuilt ones among them.
    "delivered",
    "rebuilt",
];

impl ChannelSnapshot {
    /// The snapshot as named numbers, in [`COLUMNS`]' order: a CSV row or
    /// the points of a time series at `t_s`. Bit rates are in Mbit/s,
    /// latency and jitter in ms, loss ratios from 0 to 1. A measure not
    /// known yet is `None`: the jitters and ratios the snapshot leaves
    /// `null`, and the latency figures of an interval (or run) with no
    /// sample, which the snapshot gives as zeros.
    pub fn columns(&self) -> [(&'static str, Option<f64>); COLUMNS.len()] {
        let n = |v: u64| Some(v as f64);
        let latency = |l: &LatencySummary| {
            let known = |v: f64| (l.count > 0).then_some(v);
            [
                n(l.count),
                known(l.mean_ms),
                known(l.p50_ms),
                known(l.p95_ms),
                known(l.p99_ms),
                known(l.max_ms),
            ]
        };
        let path = |p: Path| n(self.paths.get(p.name()).copied().unwrap_or(0));
        // Saturating: a record read back from a file may claim anything.
        let delivered = self.paths.values().fold(0u64, |a, &b| a.saturating_add(b));
        let arrived = self.paths.get(Path::Arrived.name()).copied().unwrap_or(0);
        let [lc, lmean, l50, l95, l99, lmax] = latency(&self.latency);
        let [tc, tmean, t50, t95, t99, tmax] = latency(&self.latency_total);
        let values = [
            Some(self.t_s),
            Some(self.interval_s),
            n(self.out.packets),
            n(self.out.bytes),
            Some(self.out.bitrate / 1e6),
            n(self.inbound.packets),
            n(self.inbound.bytes),
            Some(self.inbound.bitrate / 1e6),
            lc,
            lmean,
            l50,
            l95,
            l99,
            lmax,
            tc,
            tmean,
            t50,
            t95,
            t99,
            tmax,
            self.jitter_fig4_ms,
            self.jitter_fig4_total_ms,
            self.jitter_rfc3550_ms,
            n(self.loss.judged),
            n(self.loss.wire_lost),
            self.loss.wire_loss,
            n(self.loss.residual_lost),
            self.loss.residual_loss,
            n(self.loss.late),
            n(self.loss.duplicates),
            n(self.burst.runs),
            self.burst.mean_run,
            n(self.burst.max_run),
            self.burst.gilbert_p,
            self.burst.gilbert_r,
            path(Path::Arrived),
            path(Path::Piggyback),
            path(Path::Block),
            path(Path::XorRow),
            path(Path::XorColumn),
            path(Path::Retransmit),
            n(delivered),
            n(delivered.saturating_sub(arrived)),
        ];
        std::array::from_fn(|i| (COLUMNS[i], values[i]))
    }

    /// One line for a terminal: rates, latency, both jitters, loss and
    /// burstiness, and what recovery rebuilt.
    pub fn line(&self) -> String {
        let ms = |v: Option<f64>| v.map_or_else(|| "-".into(), |v| format!("{v:.2} ms"));
        let pct = |v: Option<f64>| v.map_or_else(|| "-".into(), |v| format!("{:.2}%", v * 100.0));
        let kind = match self.latency_kind {
            LatencyKind::OneWay => "one-way",
            LatencyKind::AboveBase => "above base",
            LatencyKind::HalfRtt => "rtt/2",
        };
        let mut s = format!(
            "{}: out {}, in {} | latency p50 {} p99 {} ({kind}) | jitter {} (fig4), {} (rfc3550) | loss {} wire, {} residual",
            self.channel,
            bitrate(self.out.bitrate),
            bitrate(self.inbound.bitrate),
            ms((self.latency.count > 0).then_some(self.latency.p50_ms)),
            ms((self.latency.count > 0).then_some(self.latency.p99_ms)),
            ms(self.jitter_fig4_total_ms),
            ms(self.jitter_rfc3550_ms),
            pct(self.loss.wire_loss),
            pct(self.loss.residual_loss),
        );
        if let Some(m) = self.burst.mean_run {
            let _ = write!(s, " | burst mean {m:.2}");
            if let (Some(p), Some(r)) = (self.burst.gilbert_p, self.burst.gilbert_r) {
                let _ = write!(s, " (gilbert p {p:.4} r {r:.3})");
            }
        }
        let rebuilt: Vec<String> = self
            .paths
            .iter()
            .filter(|(p, n)| **p != "arrived" && **n > 0)
            .map(|(p, n)| format!("{n} {p}"))
            .collect();
        if !rebuilt.is_empty() {
            let _ = write!(s, " | rebuilt {}", rebuilt.join(", "));
        }
        s
    }
}

/// Bits per second with a readable unit, three significant digits.
fn bitrate(bps: f64) -> String {
    match bps {
        b if b >= 1e9 => format!("{:.3} Gbit/s", b / 1e9),
        b if b >= 1e6 => format!("{:.3} Mbit/s", b / 1e6),
        b if b >= 1e3 => format!("{:.3} kbit/s", b / 1e3),
        b => format!("{b:.0} bit/s"),
    }
}

/// Escapes a Prometheus label value (backslash, double quote, newline).
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// One sample line: `name{channel="..",k="v",..} value`.
fn sample(
    o: &mut String,
    name: &str,
    s: &ChannelSnapshot,
    labels: &[(&str, &str)],
    value: impl std::fmt::Display,
) {
    let _ = write!(
        o,
        "groupwire_channel_{name}{{channel=\"{}\"",
        label(&s.channel)
    );
    for (k, v) in labels {
        let _ = write!(o, ",{k}=\"{}\"", label(v));
    }
    let _ = writeln!(o, "}} {value}");
}

/// The snapshots in the Prometheus text exposition format (version 0.0.4):
/// one metric family per measure, one sample per channel (and direction,
/// path, quantile or method). Absent measures (no latency yet) are left
/// out rather than reported as zero.
pub fn prometheus_text(snaps: &[ChannelSnapshot]) -> String {
    let mut o = String::new();
    let family = |o: &mut String, name: &str, kind: &str, help: &str| {
        let _ = writeln!(o, "# HELP groupwire_channel_{name} {help}");
        let _ = writeln!(o, "# TYPE groupwire_channel_{name} {kind}");
    };
    family(&mut o, "packets_total", "counter", "Datagrams on the wire.");
    for s in snaps {
        sample(
            &mut o,
            "packets_total",
            s,
            &[("direction", "out")],
            s.out.packets,
        );
        sample(
            &mut o,
            "packets_total",
            s,
            &[("direction", "in")],
            s.inbound.packets,
        );
    }
    family(
        &mut o,
        "bytes_total",
        "counter",
        "Bytes on the wire (UDP payload).",
    );
    for s in snaps {
        sample(
            &mut o,
            "bytes_total",
            s,
            &[("direction", "out")],
            s.out.bytes,
        );
        sample(
            &mut o,
            "bytes_total",
            s,
            &[("direction", "in")],
            s.inbound.bytes,
        );
    }
    family(
        &mut o,
        "latency_seconds",
        "summary",
        "Latency of delivered units since the start (see the kind label).",
    );
    for s in snaps.iter().filter(|s| s.latency_total.count > 0) {
        let (l, kind) = (&s.latency_total, s.latency_kind.name());
        for (q, v) in [("0.5", l.p50_ms), ("0.95", l.p95_ms), ("0.99", l.p99_ms)] {
            sample(
                &mut o,
                "latency_seconds",
                s,
                &[("kind", kind), ("quantile", q)],
                v / 1000.0,
            );
        }
        let sum = l.mean_ms * l.count as f64 / 1000.0;
        sample(&mut o, "latency_seconds_sum", s, &[("kind", kind)], sum);
        sample(
            &mut o,
            "latency_seconds_count",
            s,
            &[("kind", kind)],
            l.count,
        );
    }
    family(
        &mut o,
        "jitter_seconds",
        "gauge",
        "Jitter: Leigh et al.'s Figure 4 definition since the start, and RFC 3550's estimate now.",
    );
    for s in snaps {
        for (method, v) in [
            ("fig4", s.jitter_fig4_total_ms),
            ("rfc3550", s.jitter_rfc3550_ms),
        ] {
            if let Some(v) = v {
                sample(
                    &mut o,
                    "jitter_seconds",
                    s,
                    &[("method", method)],
                    v / 1000.0,
                );
            }
        }
    }
    family(
        &mut o,
        "judged_total",
        "counter",
        "Sequence numbers judged arrived, rebuilt or lost.",
    );
    for s in snaps {
        sample(&mut o, "judged_total", s, &[], s.loss.judged);
    }
    family(
        &mut o,
        "lost_total",
        "counter",
        "Judged units lost on the wire, and never delivered (residual).",
    );
    for s in snaps {
        sample(
            &mut o,
            "lost_total",
            s,
            &[("stage", "wire")],
            s.loss.wire_lost,
        );
        sample(
            &mut o,
            "lost_total",
            s,
            &[("stage", "residual")],
            s.loss.residual_lost,
        );
    }
    family(
        &mut o,
        "delivered_total",
        "counter",
        "Units delivered, by recovery path.",
    );
    for s in snaps {
        for (p, n) in &s.paths {
            sample(&mut o, "delivered_total", s, &[("path", p)], n);
        }
    }
    family(
        &mut o,
        "loss_runs_total",
        "counter",
        "Runs of consecutive losses on the wire.",
    );
    for s in snaps {
        sample(&mut o, "loss_runs_total", s, &[], s.burst.runs);
    }
    family(
        &mut o,
        "gilbert",
        "gauge",
        "The Gilbert chain fitted to the wire's loss: p = P(good to bad), r = P(bad to good).",
    );
    for s in snaps {
        for (param, v) in [("p", s.burst.gilbert_p), ("r", s.burst.gilbert_r)] {
            if let Some(v) = v {
                sample(&mut o, "gilbert", s, &[("param", param)], v);
            }
        }
    }
    o
}
