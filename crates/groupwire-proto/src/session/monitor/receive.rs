//! The receiving half: counts what arrives from one peer and reports it.

use std::time::Duration;

use groupwire_metrics::channel::Fig4Jitter;

use super::report::MonitorReport;
use super::{MAX_REORDER, MonitorConfig, wire_ts};
use crate::Instant;
use crate::block::unwrap32;
use crate::wire::block::{LossRuns, RUN_BUCKETS};

/// What a [`ReceiveMonitor`] has seen, cumulative.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReceiveStats {
    /// Every datagram passed to [`ReceiveMonitor::on_packet`].
    pub packets: u64,
    /// Bytes of those.
    pub bytes: u64,
    /// Of those, sequence numbers already received (network duplicates).
    pub duplicates: u64,
    /// Of those, sequence numbers older than the reorder tolerance: already
    /// judged lost, and left so.
    pub late: u64,
    /// Of those, a jump of more than [`MonitorConfig::max_dropout`] not
    /// (yet) confirmed by its successor (RFC 3550 A.1's probation).
    pub unconfirmed: u64,
    /// Reports made.
    pub reports: u64,
}

/// Sequence-number state after the first packet.
#[derive(Clone, Copy, Debug)]
struct Seqs {
    /// Extended seq of the first packet (RFC 3550's `base_seq`).
    base: u64,
    /// Highest extended seq received.
    highest: u64,
    /// Every seq below this is judged (received or lost, into the runs);
    /// `[settled, highest]` is the reorder window, `bitmap` its arrivals.
    settled: u64,
    /// Distinct packets received.
    received: u64,
}

/// A jump beyond `max_dropout` waiting for its successor.
#[derive(Clone, Copy, Debug)]
struct Held {
    now: Instant,
    ext: u64,
    ts: u32,
}

/// The receiver of one peer's datagrams (see the [module docs](super)).
///
/// Call [`on_packet`](Self::on_packet) for every authenticated datagram
/// from the peer, then [`poll_report`](Self::poll_report) until `None`, and
/// wake at [`poll_timeout`](Self::poll_timeout). Fixed memory whatever the
/// peer sends.
#[derive(Clone, Debug)]
pub struct ReceiveMonitor {
    cfg: MonitorConfig,
    stats: ReceiveStats,
    seqs: Option<Seqs>,
    /// Arrivals in the reorder window: bit `ext % MAX_REORDER`.
    bitmap: [u64; MAX_REORDER / 64],
    held: Option<Held>,
    /// Length of the loss run being settled (open until a received seq
    /// settles after it).
    open_run: u64,
    runs: u64,
    histogram: [u32; RUN_BUCKETS],
    /// RFC 3550 A.8's jitter, scaled by 16.
    jitter16: u64,
    /// Last transit (arrival µs − ts, wrapping) and its unwrapped
    /// running value relative to the first, for Fig. 4.
    last_transit: Option<(u32, i64)>,
    fig4: Fig4Jitter,
    /// Latest arrival: its `ts` and when.
    latest: Option<(u32, Instant)>,
    last_report: Option<Instant>,
    report_seq: u32,
    /// Datagrams since the previous report.
    since_report: u64,
    interval_bytes: u64,
    interval_start: Option<Instant>,
    /// The previous arrival in sequence: its extended seq, `ts` and when.
    prev: Option<(u64, u32, Instant)>,
    /// This interval's dispersion samples (bytes per second), the latest
    /// [`DISPERSION_SAMPLES`].
    dispersion: [u64; DISPERSION_SAMPLES],
    /// Samples taken this interval (may exceed the array: a ring).
    dispersion_n: usize,
}

/// Dispersion samples an interval keeps (the latest; fixed memory).
pub(super) const DISPERSION_SAMPLES: usize = 64;

/// Fewest samples an interval reports a dispersion rate from.
pub(super) const MIN_DISPERSION_SAMPLES: usize = 8;

impl ReceiveMonitor {
    /// A monitor that has seen nothing (`cfg.reorder` is clamped to
    /// `1..=`[`MAX_REORDER`]).
    pub fn new(mut cfg: MonitorConfig) -> Self {
        cfg.reorder = cfg.reorder.clamp(1, MAX_REORDER as u32);
        Self {
            cfg,
            stats: ReceiveStats::default(),
            seqs: None,
            bitmap: [0; MAX_REORDER / 64],
            held: None,
            open_run: 0,
            runs: 0,
            histogram: [0; RUN_BUCKETS],
            jitter16: 0,
            last_transit: None,
            fig4: Fig4Jitter::default(),
            latest: None,
            last_report: None,
            report_seq: 0,
            since_report: 0,
            interval_bytes: 0,
            interval_start: None,
            prev: None,
            dispersion: [0; DISPERSION_SAMPLES],
            dispersion_n: 0,
        }
    }

    /// What it has seen.
    pub fn stats(&self) -> ReceiveStats {
        self.stats
    }

    /// Distinct packets received, and packets lost (RFC 3550's expected
    /// less received), so far.
    pub fn counts(&self) -> (u64, u64) {
        self.seqs.map_or((0, 0), |s| (s.received, lost(&s)))
    }

    /// Loss runs judged so far: how many began, and by length in
    /// [`LossRuns::bucket`]'s buckets.
    pub fn runs(&self) -> (u64, [u32; RUN_BUCKETS]) {
        (self.runs, self.histogram)
    }

    /// `bytes` of the peer's stream (a frame and its length prefix): they
    /// count in the delivered rate, as the path carried them, and in
    /// nothing else (the stream has no packet numbers here).
    pub fn on_stream_bytes(&mut self, now: Instant, bytes: usize) {
        let bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
        self.interval_bytes = self.interval_bytes.saturating_add(bytes);
        self.interval_start.get_or_insert(now);
    }

    /// One authenticated datagram from the peer: its packet number `seq`,
    /// its send timestamp `ts` (the sender's µs clock, wrapping:
    /// [`wire_ts`]) and its size.
    pub fn on_packet(&mut self, now: Instant, seq: u32, ts: u32, bytes: usize) {
        let bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
        self.stats.packets += 1;
        self.stats.bytes = self.stats.bytes.saturating_add(bytes);
        self.since_report += 1;
        self.interval_bytes = self.interval_bytes.saturating_add(bytes);
        self.interval_start.get_or_insert(now);
        self.latest = Some((ts, now));
        let Some(s) = self.seqs else {
            self.seqs = Some(Seqs {
                base: u64::from(seq),
                highest: u64::from(seq),
                settled: u64::from(seq),
                received: 1,
            });
            self.mark(u64::from(seq));
            self.transit(now, ts);
            self.prev = Some((u64::from(seq), ts, now));
            return;
        };
        let ext = unwrap32(s.highest, seq);
        if ext > s.highest && ext - s.highest > u64::from(self.cfg.max_dropout) {
            // RFC 3550 A.1: a large jump counts only once the packet after
            // it confirms it; until then it is held, not counted.
            match self.held.take() {
                Some(h) if h.ext + 1 == ext => {
                    self.stats.unconfirmed -= 1;
                    self.accept(h.now, h.ext, h.ts, 0);
                    self.accept(now, ext, ts, bytes);
                }
                _ => {
                    self.stats.unconfirmed += 1;
                    self.held = Some(Held { now, ext, ts });
                }
            }
            return;
        }
        self.accept(now, ext, ts, bytes);
    }

    /// A packet-pair sample (Keshav's packet pair; Dovrolis et al.'s
    /// dispersion): `ext` of `bytes` arrived `now`, sent at `ts`. Two
    /// packets in sequence that left the sender closer together than half
    /// their arrival gap were spread by a link on the way; if the second
    /// waited in its queue behind the first, the gap is its serialization
    /// time there, and `bytes / gap` the link's rate. Packets that met an
    /// empty queue arrive as they were sent and give less (the sending
    /// rate), packets of other flows between them give less too, so the
    /// rate is read as a high quantile ([`ReceiveMonitor::poll_report`]).
    /// Compressed pairs (arrival gap under twice the send gap, zero for a
    /// receive batch) give no sample.
    fn disperse(&mut self, now: Instant, ext: u64, ts: u32, bytes: u64) {
        let prev = self.prev.replace((ext, ts, now));
        let Some((pext, pts, pnow)) = prev else {
            return;
        };
        if ext != pext + 1 || bytes == 0 {
            return;
        }
        let arrival_ns = now.saturating_duration_since(pnow).as_nanos();
        let send_ns = u128::from(ts.wrapping_sub(pts)) * 1000;
        if arrival_ns == 0 || send_ns.saturating_mul(2) > arrival_ns {
            return;
        }
        let bps = u128::from(bytes) * 1_000_000_000 / arrival_ns;
        let i = self.dispersion_n % DISPERSION_SAMPLES;
        self.dispersion[i] = u64::try_from(bps).unwrap_or(u64::MAX);
        self.dispersion_n = self.dispersion_n.saturating_add(1);
    }

    /// Counts an arrival of extended seq `ext` (after the first packet).
    fn accept(&mut self, now: Instant, ext: u64, ts: u32, bytes: u64) {
        self.transit(now, ts);
        self.disperse(now, ext, ts, bytes);
        let Some(mut s) = self.seqs else { return };
        if ext > s.highest {
            let old_highest = s.highest;
            s.highest = ext;
            let keep = u64::from(self.cfg.reorder);
            let target = (ext + 1).saturating_sub(keep).max(s.settled);
            // Positions up to the old highest: from the bitmap.
            while s.settled < target && s.settled <= old_highest {
                let got = self.take(s.settled);
                self.settle(got);
                s.settled += 1;
            }
            // Beyond it nothing has arrived: one stretch of losses.
            if s.settled < target {
                self.open_run = self.open_run.saturating_add(target - s.settled);
                s.settled = target;
            }
            s.received += 1;
            self.mark(ext);
        } else if ext < s.settled {
            self.stats.late += 1;
        } else if self.is_marked(ext) {
            self.stats.duplicates += 1;
        } else {
            s.received += 1;
            self.mark(ext);
        }
        self.seqs = Some(s);
    }

    /// Judges one settled position: received or lost.
    fn settle(&mut self, received: bool) {
        if !received {
            self.open_run = self.open_run.saturating_add(1);
        } else if self.open_run > 0 {
            self.runs = self.runs.saturating_add(1);
            let b = &mut self.histogram[LossRuns::bucket(self.open_run)];
            *b = b.saturating_add(1);
            self.open_run = 0;
        }
    }

    fn bit(ext: u64) -> (usize, u64) {
        let i = (ext % MAX_REORDER as u64) as usize;
        (i / 64, 1 << (i % 64))
    }

    fn mark(&mut self, ext: u64) {
        let (w, b) = Self::bit(ext);
        self.bitmap[w] |= b;
    }

    fn is_marked(&self, ext: u64) -> bool {
        let (w, b) = Self::bit(ext);
        self.bitmap[w] & b != 0
    }

    /// Whether `ext` arrived, clearing its bit.
    fn take(&mut self, ext: u64) -> bool {
        let (w, b) = Self::bit(ext);
        let got = self.bitmap[w] & b != 0;
        self.bitmap[w] &= !b;
        got
    }

    /// RFC 3550 A.8's jitter estimator, and Leigh's Fig. 4 jitter over
    /// the same transit times.
    fn transit(&mut self, now: Instant, ts: u32) {
        let transit = wire_ts(now).wrapping_sub(ts);
        let running = match self.last_transit {
            None => 0,
            Some((last, running)) => {
                let d = transit.wrapping_sub(last) as i32;
                // J += (|D| - J) / 16, in sixteenths, rounded (A.8).
                let ad = u64::from(d.unsigned_abs());
                self.jitter16 = self.jitter16 + ad - ((self.jitter16 + 8) >> 4);
                running + i64::from(d)
            }
        };
        self.last_transit = Some((transit, running));
        self.fig4.push(running as f64);
    }

    /// When the next report is due: at the first packet, then every
    /// [`MonitorConfig::report_interval`] while packets arrive, else every
    /// [`MonitorConfig::keepalive`]; `None` before any packet.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.seqs?;
        Some(match self.last_report {
            None => self.interval_start.unwrap_or(Instant::ZERO),
            Some(t) if self.since_report > 0 => t + self.cfg.report_interval,
            Some(t) => t + self.cfg.keepalive,
        })
    }

    /// The report due at `now`, if one is.
    pub fn poll_report(&mut self, now: Instant) -> Option<MonitorReport> {
        if self.poll_timeout().is_none_or(|due| due > now) {
            return None;
        }
        let s = self.seqs?;
        let (echo_ts, arrived) = self.latest?;
        let micros = |d: Duration| u32::try_from(d.as_micros()).unwrap_or(u32::MAX);
        let interval = self
            .interval_start
            .map_or(Duration::ZERO, |t| now.saturating_duration_since(t));
        let leigh = self
            .fig4
            .micros()
            .map(|j| j.round().min(f64::from(u32::MAX)) as u32);
        self.fig4.reset();
        let report = MonitorReport {
            report_seq: self.report_seq,
            highest_seq: s.highest,
            received: s.received,
            lost: lost(&s),
            runs: self.runs,
            histogram: self.histogram,
            // A.8 reads `jitter >> 4`; rounded here, so a steady |D|
            // reads as itself.
            jitter_us: u32::try_from((self.jitter16 + 8) >> 4).unwrap_or(u32::MAX),
            jitter_leigh_us: leigh,
            interval_bytes: self.interval_bytes,
            interval_us: micros(interval),
            echo_ts,
            echo_hold_us: micros(now.saturating_duration_since(arrived)),
            dispersion_bps: self.dispersion_rate(),
        };
        self.dispersion_n = 0;
        self.report_seq = self.report_seq.wrapping_add(1);
        self.stats.reports += 1;
        // The next interval starts now if this one had packets, else at
        // the next packet (so an idle stretch does not dilute the rate).
        self.interval_start = (self.since_report > 0).then_some(now);
        self.since_report = 0;
        self.interval_bytes = 0;
        self.last_report = Some(now);
        Some(report)
    }

    /// The interval's dispersion rate: the upper quartile of its samples,
    /// once it has [`MIN_DISPERSION_SAMPLES`].
    fn dispersion_rate(&self) -> Option<u64> {
        let n = self.dispersion_n.min(DISPERSION_SAMPLES);
        if n < MIN_DISPERSION_SAMPLES {
            return None;
        }
        let mut v = self.dispersion;
        let v = &mut v[..n];
        v.sort_unstable();
        Some(v[n * 3 / 4])
    }
}

/// RFC 3550 A.3: expected (base to highest) less received; never below
/// zero here, since duplicates are not counted as received.
fn lost(s: &Seqs) -> u64 {
    (s.highest - s.base + 1).saturating_sub(s.received)
}
