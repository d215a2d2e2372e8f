//! The sending half: turns the peer's reports into a [`PathEstimate`].

use std::time::Duration;

use super::report::MonitorReport;
use super::{MonitorConfig, wire_ts};
use crate::control::gilbert::{RunCounts, TwoFits, decay_weight};
use crate::session::path::PathEstimate;
use crate::wire::block::LossRuns;
use crate::{Bitrate, Instant};

/// What a [`SendMonitor`] has seen, cumulative. Every report is counted
/// once: accepted, or under the first reason it was ignored for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendStats {
    /// Datagrams sent ([`SendMonitor::on_send`]).
    pub sent: u64,
    /// Bytes of those, and of the stream frames written ([`SendMonitor::on_stream_send`]).
    pub sent_bytes: u64,
    /// Reports accepted.
    pub reports: u64,
    /// Ignored: not newer than the last accepted (a reordered or replayed
    /// report).
    pub stale: u64,
    /// Ignored: a counter below the last accepted report's.
    pub backwards: u64,
    /// Ignored: a packet number or a count beyond what was sent.
    pub future: u64,
    /// Ignored: counters that disagree with the last accepted report's,
    /// or a jitter, interval or rate beyond any path.
    pub absurd: u64,
    /// Round-trip samples taken.
    pub rtt_samples: u64,
    /// Echoes that gave no sample (negative, above
    /// [`MonitorConfig::max_rtt`], or older than the first send); the
    /// report's other fields were used.
    pub rtt_rejected: u64,
    /// Probes asked for ([`SendMonitor::poll_probe`] returning `true`).
    pub probes: u64,
    /// Reports that found the path full (see the module docs,
    /// "Capacity"): their losses did not go into the loss fit.
    pub full_reports: u64,
}

/// Kathleen Nichols' windowed minimum as Linux keeps it
/// (`lib/win_minmax.c`, used by BBR for its `min_rtt`): the least sample
/// of the last `window` and two runners-up from later sub-windows, so the
/// minimum expires without storing every sample.
#[derive(Clone, Copy, Debug)]
struct WindowedMin {
    s: [(Instant, u64); 3],
}

impl WindowedMin {
    fn new(t: Instant, v: u64) -> Self {
        Self { s: [(t, v); 3] }
    }

    fn get(&self) -> u64 {
        self.s[0].1
    }

    fn update(&mut self, win: Duration, t: Instant, v: u64) {
        if v <= self.s[0].1 || t - self.s[2].0 > win {
            *self = Self::new(t, v);
            return;
        }
        if v <= self.s[1].1 {
            self.s[1] = (t, v);
            self.s[2] = (t, v);
        } else if v <= self.s[2].1 {
            self.s[2] = (t, v);
        }
        let dt = t - self.s[0].0;
        if dt > win {
            self.s = [self.s[1], self.s[2], (t, v)];
            if t - self.s[0].0 > win {
                self.s = [self.s[1], self.s[2], (t, v)];
            }
        } else if self.s[1].0 == self.s[0].0 && dt > win / 4 {
            self.s[1] = (t, v);
            self.s[2] = (t, v);
        } else if self.s[2].0 == self.s[1].0 && dt > win / 2 {
            self.s[2] = (t, v);
        }
    }
}

/// Why a report is ignored (the [`SendStats`] counter it goes to).
#[derive(Clone, Copy, Debug)]
enum Reject {
    Stale,
    Backwards,
    Future,
    Absurd,
}

/// The last accepted report and when it came.
#[derive(Clone, Copy, Debug)]
struct Accepted {
    at: Instant,
    report: MonitorReport,
}

/// The sender's view of the path to one peer (see the [module
/// docs](super)).
///
/// Call [`on_send`](Self::on_send) for every datagram sent to the peer and
/// [`on_report`](Self::on_report) for every report from it; read
/// [`estimate`](Self::estimate); send a probe when
/// [`poll_probe`](Self::poll_probe) says so, and wake at
/// [`poll_timeout`](Self::poll_timeout). Fixed memory.
#[derive(Clone, Debug)]
pub struct SendMonitor {
    cfg: MonitorConfig,
    stats: SendStats,
    first_send: Option<Instant>,
    last_send: Option<Instant>,
    /// Highest packet number sent, extended.
    sent_highest: Option<u64>,
    last: Option<Accepted>,
    fit: TwoFits,
    /// The last accepted report's runs less the one before it.
    interval_runs: LossRuns,
    /// RFC 6298's SRTT and RTTVAR, microseconds.
    srtt: Option<(f64, f64)>,
    latest_rtt: Option<Duration>,
    min_rtt: Option<WindowedMin>,
    /// Decayed bytes delivered and the seconds they took, and when last
    /// decayed.
    delivered: Option<(f64, f64, Instant)>,
    /// The same for what we sent, over the same intervals (the time
    /// between accepted reports), and `stats.sent_bytes` at the last one.
    sent_rate: Option<(f64, f64, Instant)>,
    sent_at_report: u64,
    /// Bytes per second the path gave when last seen full, when, and the
    /// minimum round trip then (microseconds).
    capacity: Option<(f64, Instant, u64)>,
    /// The last report found the path full.
    full: bool,
    /// Stream frames wait in the sender for room on the stream
    /// ([`on_stream_backlog`](Self::on_stream_backlog)).
    stream_backlogged: bool,
    jitter: Duration,
    jitter_leigh: Option<Duration>,
    last_probe: Option<Instant>,
    /// The last reports' dispersion rates (bytes per second) and when they
    /// came, a ring ([`Self::bottleneck`]).
    dispersion: [(Instant, f64); DISPERSION_REPORTS],
    dispersion_n: usize,
}

/// Reports whose dispersion rates [`SendMonitor::bottleneck`] takes the
/// median of.
const DISPERSION_REPORTS: usize = 5;

/// Oldest report whose dispersion rate [`SendMonitor::bottleneck`] uses.
const DISPERSION_AGE: Duration = Duration::from_secs(2);

impl SendMonitor {
    /// A monitor that has sent nothing.
    pub fn new(cfg: MonitorConfig) -> Self {
        Self {
            fit: TwoFits::new(RunCounts::ZERO, cfg.half_life, cfg.fast_half_life),
            cfg,
            stats: SendStats::default(),
            first_send: None,
            last_send: None,
            sent_highest: None,
            last: None,
            interval_runs: LossRuns::default(),
            srtt: None,
            latest_rtt: None,
            min_rtt: None,
            delivered: None,
            sent_rate: None,
            sent_at_report: 0,
            capacity: None,
            full: false,
            stream_backlogged: false,
            jitter: Duration::ZERO,
            jitter_leigh: None,
            last_probe: None,
            dispersion: [(Instant::ZERO, 0.0); DISPERSION_REPORTS],
            dispersion_n: 0,
        }
    }

    /// The bottleneck's rate, bytes per second: the median of the last
    /// [`DISPERSION_REPORTS`] reports' dispersion rates that came within
    /// [`DISPERSION_AGE`] of `now` (`None` with fewer than three; see the
    /// module docs, "Dispersion").
    fn bottleneck(&self, now: Instant) -> Option<f64> {
        let mut v = [0.0f64; DISPERSION_REPORTS];
        let mut n = 0;
        for &(t, r) in &self.dispersion[..self.dispersion_n.min(DISPERSION_REPORTS)] {
            if now.saturating_duration_since(t) <= DISPERSION_AGE {
                v[n] = r;
                n += 1;
            }
        }
        if n < 3 {
            return None;
        }
        let v = &mut v[..n];
        v.sort_by(f64::total_cmp);
        Some(v[n / 2])
    }

    /// What it has seen.
    pub fn stats(&self) -> SendStats {
        self.stats
    }

    /// One datagram sent to the peer with packet number `seq` (its `ts`
    /// is [`wire_ts`]`(now)`).
    pub fn on_send(&mut self, now: Instant, seq: u32, bytes: usize) {
        self.stats.sent += 1;
        self.stats.sent_bytes = self
            .stats
            .sent_bytes
            .saturating_add(u64::try_from(bytes).unwrap_or(u64::MAX));
        self.first_send.get_or_insert(now);
        self.last_send = Some(now);
        let ext = match self.sent_highest {
            None => u64::from(seq),
            Some(h) => crate::block::unwrap32(h, seq).max(h),
        };
        self.sent_highest = Some(ext);
    }

    /// `bytes` written to the peer's stream (a frame and its length
    /// prefix): they count in the rate sent, beside the datagrams, since
    /// the peer counts them in the rate delivered
    /// ([`ReceiveMonitor::on_stream_bytes`](super::ReceiveMonitor::on_stream_bytes)).
    /// A bulk transfer's frames are written faster than the path takes
    /// them, so while one drains, a full path reads as full, and its
    /// delivered rate, the stream's and the datagrams' together, is the
    /// capacity.
    pub fn on_stream_send(&mut self, _now: Instant, bytes: usize) {
        self.stats.sent_bytes = self
            .stats
            .sent_bytes
            .saturating_add(u64::try_from(bytes).unwrap_or(u64::MAX));
    }

    /// Whether stream frames are waiting in the sender for room on the
    /// stream (a session's
    /// [`stream_window`](crate::session::SessionConfig::stream_window)):
    /// the stream is not application-limited. Its sender, TCP, keeps what
    /// it sends to what the path delivers, so a full path shows no excess
    /// of sent over delivered; a standing queue while the stream is
    /// backlogged reads as full (BBR's bottleneck bandwidth is the
    /// delivered rate when not application-limited, for the same reason).
    /// Read at each report.
    pub fn on_stream_backlog(&mut self, backlogged: bool) {
        self.stream_backlogged = backlogged;
    }

    /// One report from the peer, already decoded. Stale, hostile or
    /// impossible ones are counted in [`stats`](Self::stats) and ignored.
    pub fn on_report(&mut self, now: Instant, r: &MonitorReport) {
        if let Err(why) = self.vet(r) {
            let s = &mut self.stats;
            *match why {
                Reject::Stale => &mut s.stale,
                Reject::Backwards => &mut s.backwards,
                Reject::Future => &mut s.future,
                Reject::Absurd => &mut s.absurd,
            } += 1;
            return;
        }
        self.stats.reports += 1;
        // Loss: the counters' growth since the last accepted report
        // (everything, for the first), into both fits.
        let (elapsed, before) = match self.last {
            Some(a) => (now.saturating_duration_since(a.at), a.report),
            None => (Duration::ZERO, MonitorReport::default()),
        };
        let received = (r.received - before.received) as f64;
        // `lost` falls when late packets fill gaps: a signed difference.
        let lost = r.lost as f64 - before.lost as f64;
        let runs = (r.runs - before.runs) as f64;
        self.interval_runs = r.runs_since(&before);
        // Delivered rate: decayed bytes over decayed seconds, from the
        // intervals that carried any.
        if r.interval_bytes > 0 && r.interval_us > 0 {
            let secs = f64::from(r.interval_us) / 1e6;
            let bytes = r.interval_bytes as f64;
            let half = self.cfg.fast_half_life;
            self.delivered = Some(decayed_add(self.delivered, now, half, bytes, secs));
            if self.last.is_some() && !elapsed.is_zero() {
                let sent = self.stats.sent_bytes.saturating_sub(self.sent_at_report) as f64;
                let e = elapsed.as_secs_f64();
                self.sent_rate = Some(decayed_add(self.sent_rate, now, half, sent, e));
            }
        }
        self.sent_at_report = self.stats.sent_bytes;
        self.jitter = Duration::from_micros(u64::from(r.jitter_us));
        if let Some(j) = r.jitter_leigh_us {
            self.jitter_leigh = Some(Duration::from_micros(u64::from(j)));
        }
        self.rtt_sample(now, r);
        if let Some(d) = r.dispersion_bps {
            self.dispersion[self.dispersion_n % DISPERSION_REPORTS] = (now, d as f64);
            self.dispersion_n = self.dispersion_n.saturating_add(1);
        }
        self.last = Some(Accepted {
            at: now,
            report: *r,
        });
        self.update_capacity(now);
        // While the path is full, its drops are the queue's, caused by
        // what we send: not a property of the path that redundancy
        // repairs (repairs add to them). The fits only decay then.
        if self.full {
            self.fit.add(elapsed, 0.0, 0.0, 0.0);
            self.stats.full_reports += 1;
        } else {
            self.fit.add(elapsed, received, lost, runs);
        }
    }

    /// Bytes per second of decayed `(bytes, secs)` sums, once they rest on
    /// [`MonitorConfig::min_rate_interval`].
    fn mean_rate(&self, sums: Option<(f64, f64, Instant)>) -> Option<f64> {
        let min = self.cfg.min_rate_interval.as_secs_f64();
        sums.and_then(|(b, s, _)| (s >= min).then(|| b / s))
    }

    /// The capacity estimate after a report (see the module docs,
    /// "Capacity").
    fn update_capacity(&mut self, now: Instant) {
        let min_rtt = self.min_rtt.as_ref().map(WindowedMin::get);
        // Forgotten after its hold, and at once on a shorter path: a
        // minimum round trip under three quarters of the one it was
        // measured at is no queue's doing (queues only lengthen it) but a
        // new route or link (a handover), whose capacity the old one says
        // nothing of. (Kept for its minute, the third minute's 4 Mbit/s
        // held the tele-immersion camera on plain for 11 s into a fourth
        // minute of 10 Mbit/s, 0.5% loss and half the delay.)
        if self.capacity.is_some_and(|(_, at, rtt)| {
            now.saturating_duration_since(at) > self.cfg.capacity_hold
                || min_rtt.is_some_and(|m| m.saturating_mul(4) < rtt.saturating_mul(3))
        }) {
            self.capacity = None;
        }
        let was_full = std::mem::take(&mut self.full);
        let (Some(got), Some(sent)) = (
            self.mean_rate(self.delivered),
            self.mean_rate(self.sent_rate),
        ) else {
            return;
        };
        // A standing queue shows in the latest round trip as in the
        // smoothed one: after a step down in the path's delay, SRTT takes
        // a few reports to come down to the new minimum, and read alone
        // it measured a 10 Mbit/s link as full at the 1 Mbit/s sent.
        let queued = match (self.srtt, self.latest_rtt, self.min_rtt) {
            (Some((srtt, _)), Some(latest), Some(m)) => {
                let min = m.get() as f64;
                let threshold = (self.cfg.queue_threshold.as_micros() as f64).max(min / 4.0);
                srtt - min > threshold && latest.as_micros() as f64 - min > threshold
            }
            _ => false,
        };
        // What the path loses anyway: the less pessimistic fit (at a rise
        // the slow one lags, so an overload's own drops do not count as
        // the path's), and a tenth of what was sent beyond it.
        let base = self
            .fits()
            .iter()
            .map(|f| f.loss_rate())
            .fold(1.0f64, f64::min)
            .clamp(0.0, 1.0);
        let excess = got < (1.0 - base - FULL_MARGIN).max(0.0) * sent;
        self.full = queued && (excess || self.stream_backlogged);
        // While the path stays full its delivered rate climbs to the
        // capacity (the decayed mean lags a change): the episode's highest
        // is the estimate, and a new episode starts it again. Outside one,
        // a delivered rate above the kept capacity raises it.
        let restart = self.full && (!was_full || self.capacity.is_none());
        if restart || self.capacity.is_some_and(|(c, _, _)| got > c) {
            self.capacity = Some((got, now, min_rtt.unwrap_or(0)));
        }
    }

    /// Why a report is to be ignored, if it is.
    fn vet(&self, r: &MonitorReport) -> Result<(), Reject> {
        let Some(highest) = self.sent_highest else {
            return Err(Reject::Future);
        };
        if r.highest_seq > highest || r.received > self.stats.sent {
            return Err(Reject::Future);
        }
        let cfg = &self.cfg;
        if u128::from(r.jitter_us) > cfg.max_rtt.as_micros()
            || u128::from(r.interval_us) > cfg.max_interval.as_micros()
            || r.interval_bytes > self.stats.sent_bytes
        {
            return Err(Reject::Absurd);
        }
        let Some(a) = self.last else { return Ok(()) };
        let b = a.report;
        if (r.report_seq.wrapping_sub(b.report_seq) as i32) <= 0 {
            return Err(Reject::Stale);
        }
        let grown = r.highest_seq >= b.highest_seq
            && r.received >= b.received
            && r.runs >= b.runs
            && r.histogram.iter().zip(&b.histogram).all(|(n, o)| n >= o);
        if !grown {
            return Err(Reject::Backwards);
        }
        // Received and lost together are the sequence numbers from the
        // receiver's first to its highest: they grow with it exactly.
        let span = |x: &MonitorReport| x.received.wrapping_add(x.lost);
        if span(r).wrapping_sub(span(&b)) != r.highest_seq - b.highest_seq {
            return Err(Reject::Absurd);
        }
        Ok(())
    }

    /// RFC 3550 §6.4.1's round trip from the echo, into RFC 6298's SRTT
    /// and RTTVAR and the windowed minimum.
    fn rtt_sample(&mut self, now: Instant, r: &MonitorReport) {
        let rtt = wire_ts(now)
            .wrapping_sub(r.echo_ts)
            .wrapping_sub(r.echo_hold_us);
        let since_first = self
            .first_send
            .map_or(0, |f| now.saturating_duration_since(f).as_micros());
        let rtt_us = u64::from(rtt);
        if u128::from(rtt_us) > self.cfg.max_rtt.as_micros() || u128::from(rtt_us) > since_first {
            self.stats.rtt_rejected += 1;
            return;
        }
        self.stats.rtt_samples += 1;
        let sample = rtt_us as f64;
        // RFC 6298 §2.2 and §2.3: alpha = 1/8, beta = 1/4; RTTVAR first.
        self.srtt = Some(match self.srtt {
            None => (sample, sample / 2.0),
            Some((srtt, var)) => {
                let var = 0.75 * var + 0.25 * (srtt - sample).abs();
                (0.875 * srtt + 0.125 * sample, var)
            }
        });
        self.latest_rtt = Some(Duration::from_micros(rtt_us));
        match &mut self.min_rtt {
            None => self.min_rtt = Some(WindowedMin::new(now, rtt_us)),
            Some(m) => m.update(self.cfg.min_rtt_window, now, rtt_us),
        }
    }

    /// RFC 6298's RTTVAR, if any round trip was measured.
    pub fn rttvar(&self) -> Option<Duration> {
        self.srtt.map(|(_, v)| micros(v))
    }

    /// The latest round-trip sample.
    pub fn latest_rtt(&self) -> Option<Duration> {
        self.latest_rtt
    }

    /// The last accepted report's loss runs less its predecessor's: the
    /// block-FEC report's per-interval form, for a controller that reads
    /// one ([`crate::control::ReportSample::runs`]).
    pub fn interval_runs(&self) -> LossRuns {
        self.interval_runs
    }

    /// Both loss fits' counts: the slow one, then the fast one.
    pub fn fits(&self) -> [RunCounts; 2] {
        [self.fit.slow(), self.fit.fast()]
    }

    /// The fit the estimate reports: of the fits resting on at least
    /// [`MonitorConfig::min_samples`] packets, the one with the higher
    /// loss rate (ties: the longer bursts); with neither, the slow one.
    fn chosen_fit(&self) -> (RunCounts, bool) {
        let min = self.cfg.min_samples;
        let worse = |a: &RunCounts, b: &RunCounts| {
            a.loss_rate()
                .total_cmp(&b.loss_rate())
                .then(b.model().r.total_cmp(&a.model().r))
        };
        let trusted = self.fits().into_iter().filter(|c| c.samples() >= min);
        match trusted.max_by(worse) {
            Some(c) => (c, true),
            None => (self.fit.slow(), false),
        }
    }

    /// What is known of the path now.
    pub fn estimate(&self) -> PathEstimate {
        let (fit, trusted) = self.chosen_fit();
        let delivered = self
            .mean_rate(self.delivered)
            .map(|b| Bitrate::bps((b * 8.0).round() as u64));
        PathEstimate {
            srtt: self.srtt.map(|(s, _)| micros(s)),
            min_rtt: self.min_rtt.map(|m| Duration::from_micros(m.get())),
            loss: fit.loss_rate(),
            loss_model: trusted.then(|| fit.model()),
            mean_burst: if fit.runs > 0.0 {
                (fit.lost / fit.runs).max(1.0)
            } else {
                1.0
            },
            delivered,
            capacity: {
                let kept = self.capacity.map(|(c, _, _)| c);
                let pp = self
                    .last
                    .and_then(|a| self.bottleneck(a.at))
                    .map(|c| c * (1.0 - fit.loss_rate().clamp(0.0, 1.0)));
                match (kept, pp) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                }
                .map(|c| Bitrate::bps((c * 8.0).round() as u64))
            },
            jitter: self.jitter,
            jitter_leigh: self.jitter_leigh,
            samples: fit.samples(),
            recent_loss: Some(self.fit.fast())
                .filter(|f| f.samples() >= self.cfg.min_samples)
                .map(|f| f.loss_rate()),
        }
    }

    /// Whether to send a probe now: some report came from the peer
    /// (never probe an address that has not answered), none of the last
    /// [`MonitorConfig::probe_silence`] went unanswered, and nothing was
    /// sent for [`MonitorConfig::probe_idle`] (a probe included, so at
    /// most one probe per `probe_idle`). `true` counts the probe; send it
    /// through [`on_send`](Self::on_send) like any datagram.
    pub fn poll_probe(&mut self, now: Instant) -> bool {
        if self.poll_timeout().is_none_or(|t| t > now) {
            return false;
        }
        self.last_probe = Some(now);
        self.stats.probes += 1;
        true
    }

    /// When [`poll_probe`](Self::poll_probe) will next say yes if nothing
    /// is sent before; `None` while it cannot (no report yet, or the peer
    /// silent for [`MonitorConfig::probe_silence`]).
    pub fn poll_timeout(&self) -> Option<Instant> {
        let answered = self.last?.at;
        let idle = self.cfg.probe_idle;
        let due = [self.last_send, self.last_probe]
            .into_iter()
            .flatten()
            .map(|t| t + idle)
            .max()
            .unwrap_or(answered);
        (due <= answered + self.cfg.probe_silence).then_some(due)
    }
}

/// Share of what was sent, beyond the path's own loss, that must go
/// missing for a queued path to read as full.
const FULL_MARGIN: f64 = 0.1;

/// `(bytes, secs)` sums decayed with `half` since they were last added
/// to, plus this interval's.
fn decayed_add(
    prev: Option<(f64, f64, Instant)>,
    now: Instant,
    half: Duration,
    bytes: f64,
    secs: f64,
) -> (f64, f64, Instant) {
    match prev {
        None => (bytes, secs, now),
        Some((b, s, at)) => {
            let w = decay_weight(now.saturating_duration_since(at), half);
            (b * w + bytes, s * w + secs, now)
        }
    }
}

fn micros(us: f64) -> Duration {
    Duration::from_nanos((us * 1000.0).round().max(0.0) as u64)
}
