//! TCP-Friendly Rate Control (TFRC), RFC 5348, as two sans-IO halves.
//!
//! TFRC is the rate-controlled baseline of the GENEVA reproduction
//! (Matsuzono et al., §2.2 and §4.1: `TPindex` compares TCP throughput next
//! to the target flows with TCP throughput next to TFRC flows). The sender
//! may send at most [`TfrcSender::allowed_rate`]; the receiver measures the
//! loss event rate `p` and the receive rate `X_recv` and reports them about
//! once per round-trip time.
//!
//! - [`throughput`]: the TCP throughput equation (RFC 5348 §3.1).
//! - [`LossHistory`]: loss detection, loss events, loss intervals and the
//!   loss event rate `p` (§5). Pure: sequence numbers and times in, `p` out.
//! - [`TfrcReceiver`]: wraps a [`LossHistory`], measures `X_recv` and decides
//!   when feedback is due (§6).
//! - [`TfrcSender`]: the allowed sending rate `X` (§4).
//!
//! **On the `//=` / `//#` citations in this file:** they name the RFC 5348
//! section each rule comes from and give its text as we understood it; the
//! RFC's full text was not reachable when this was written, so the wording
//! is a paraphrase checked against other implementations (Linux DCCP CCID3,
//! farstream), not a verbatim quote.
//!
//! Nothing here reads a clock or touches a socket; every input carries
//! `now`, and `now` must not go backwards (each half has its own clock; the
//! sender's timestamps are only echoed by the receiver, never compared with
//! its own clock).
//!
//! # Driving the receiver
//!
//! 1. For every arriving data packet, [`TfrcReceiver::on_data_packet`] with
//!    the packet's sequence number, the sender's send timestamp and RTT
//!    estimate carried in the packet, and its size.
//! 2. Then [`TfrcReceiver::poll_feedback`] until `None` (at most one
//!    report); encode and send each report to the sender.
//! 3. Wake up at [`TfrcReceiver::poll_timeout`] and call
//!    [`poll_feedback`](TfrcReceiver::poll_feedback) again. Early or
//!    repeated calls are harmless.
//!
//! # Driving the sender
//!
//! 1. Create it with [`TfrcSender::new`] when the flow starts.
//! 2. Before sending a data packet, stamp it with `now` (the timestamp the
//!    receiver echoes) and [`TfrcSender::rtt`] (the RTT the receiver uses
//!    to group losses); send no faster than
//!    [`allowed_rate`](TfrcSender::allowed_rate) (for example one packet of
//!    `s` bytes every [`inter_packet_interval`](TfrcSender::inter_packet_interval));
//!    after sending, call [`on_packet_sent`](TfrcSender::on_packet_sent).
//! 3. For every feedback report, [`TfrcSender::on_feedback`].
//! 4. Wake up at [`TfrcSender::nofeedback_deadline`] and call
//!    [`on_nofeedback_timeout`](TfrcSender::on_nofeedback_timeout); calls
//!    before the deadline are no-ops.
//!
//! After any call, re-read `allowed_rate` and the deadline.
//!
//! # Where this reads RFC 5348 a particular way
//!
//! - **Data-limited intervals (§4.3 step 4, §8.2.1).** Instead of the
//!   `not_limited1/2` bookkeeping of §8.2.1, the interval covered by a report
//!   counts as data-limited when no packet sent since the previous report's
//!   echoed timestamp was reported as *not* data-limited through
//!   [`TfrcSender::on_packet_sent`]. A sender that never reports sends is
//!   treated as never data-limited and never idle.
//! - **`t_RTO` in the equation** is `4R` (§3.1 "SHOULD"); the nofeedback
//!   timer uses `max(4R, 2s/X)` (§4.3 step 3).
//! - **Echo.** The receiver echoes the timestamp of the received packet with
//!   the latest send timestamp, and `t_delay` since that packet's arrival.
//! - **Fewer than n = 8 loss intervals (§5.4).** With k < n closed
//!   intervals the weights `w_0..w_(k-1)` are used, as in Linux DCCP
//!   (`net/dccp/ccids/lib/loss_interval.c`).
//! - **No RTT yet at the receiver.** Until a data packet carries the
//!   sender's RTT, the receiver uses [`TfrcConfig::fallback_rtt`] (200 ms,
//!   Linux `DCCP_FALLBACK_RTT`) for loss grouping and its feedback timer.
//! - **Bounded memory.** Loss detection keeps only the 3 highest sequence
//!   numbers above the settled point, 8 closed loss intervals and at most
//!   4096 arrival records for `X_recv`; sequence numbers below the settled
//!   point (duplicates, packets already declared lost, packets from before
//!   the first one) are ignored. A single gap that spans more than about
//!   ten loss events is stepped through with evenly spaced loss events
//!   (linear interpolation makes them evenly spaced anyway, ±1 packet).

use std::collections::VecDeque;
use std::time::Duration;

use crate::time::Instant;
use crate::units::Bitrate;

/// TCP throughput in bytes per second (RFC 5348 §3.1):
///
/// ```text
///                                 s
/// X_Bps = ----------------------------------------------------------
///         R*sqrt(2*b*p/3) + (t_RTO * (3*sqrt(3*b*p/8)*p*(1+32*p^2)))
/// ```
///
/// `s_bytes` is the segment size, `rtt` the round-trip time `R`, `p` the
/// loss event rate, `t_rto` the TCP retransmission timeout and `b` the
/// number of packets acknowledged by one TCP acknowledgement (RFC 5348 uses
/// `b = 1`; see [`throughput_default`]). Never panics: `p <= 0` (or NaN) or
/// a zero `rtt` give infinity (no limit), `p > 1` counts as 1, and a
/// non-positive `b` counts as 1.
//= https://www.rfc-editor.org/rfc/rfc5348#section-3.1
//# X_Bps = s / (R*sqrt(2*b*p/3) + (t_RTO * (3*sqrt(3*b*p/8)*p*(1+32*p^2))))
pub fn throughput(s_bytes: f64, rtt: Duration, p: f64, t_rto: Duration, b: f64) -> f64 {
    let r = rtt.as_secs_f64();
    if s_bytes.is_nan() || s_bytes <= 0.0 {
        return 0.0;
    }
    if p.is_nan() || p <= 0.0 || r <= 0.0 {
        return f64::INFINITY;
    }
    let p = p.min(1.0);
    let b = if b.is_finite() && b > 0.0 { b } else { 1.0 };
    let t_rto = t_rto.as_secs_f64();
    let denominator = r * (2.0 * b * p / 3.0).sqrt()
        + t_rto * (3.0 * (3.0 * b * p / 8.0).sqrt() * p * (1.0 + 32.0 * p * p));
    s_bytes / denominator
}

/// [`throughput`] with RFC 5348's recommended `b = 1` and `t_RTO = 4R`.
//= https://www.rfc-editor.org/rfc/rfc5348#section-3.1
//# Implementations SHOULD set t_RTO = 4*R.
pub fn throughput_default(s_bytes: f64, rtt: Duration, p: f64) -> f64 {
    throughput(s_bytes, rtt, p, rtt.saturating_mul(4), 1.0)
}

/// The loss event rate `p` at which [`throughput_default`] gives `x_target`
/// bytes per second, in `[MIN_INVERSE_P, 1]` (bisection in `log p`; the
/// equation decreases in `p`). Used for the first loss interval (§6.3.1).
pub fn loss_rate_for_throughput(s_bytes: f64, rtt: Duration, x_target: f64) -> f64 {
    if x_target.is_nan() || x_target <= throughput_default(s_bytes, rtt, 1.0) {
        return 1.0;
    }
    if x_target >= throughput_default(s_bytes, rtt, MIN_INVERSE_P) {
        return MIN_INVERSE_P;
    }
    let (mut lo, mut hi) = (MIN_INVERSE_P.ln(), 0.0_f64);
    for _ in 0..100 {
        let mid = 0.5 * (lo + hi);
        if throughput_default(s_bytes, rtt, mid.exp()) > x_target {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (0.5 * (lo + hi)).exp()
}

/// Configuration of both TFRC halves, with RFC 5348's defaults. Chained
/// setters. Out-of-range values (a zero segment size, `q` outside `[0, 1]`,
/// a zero `t_mbi`, a non-positive `b`) fall back to the defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct TfrcConfig {
    /// Segment size `s` in bytes, used by the equation and the rate floors.
    /// Default 1460 (a TCP MSS); the GENEVA scenario uses 1500.
    pub segment_size: u32,
    /// Packets acknowledged per TCP ACK, `b` (§3.1). Default 1.
    pub b: f64,
    /// Maximum backoff interval `t_mbi`; the rate never falls below
    /// `s / t_mbi` (§4.3). Default 64 s.
    pub t_mbi: Duration,
    /// RTT filter constant `q` of `R = q*R + (1-q)*R_sample` (§4.3). Default 0.9.
    pub rtt_filter: f64,
    /// Nofeedback timeout before the first RTT sample (§4.2). Default 2 s.
    pub initial_nofeedback_timeout: Duration,
    /// Oscillation reduction (§4.5): scale the rate by
    /// `R_sqmean / sqrt(R_sample)`. Default off (optional in the RFC).
    pub oscillation_reduction: bool,
    /// History discounting of the average loss interval (§5.5). Default off.
    pub history_discounting: bool,
    /// RTT the receiver assumes until data packets carry one. Default
    /// 200 ms (Linux DCCP's `DCCP_FALLBACK_RTT`; the RFC does not say).
    pub fallback_rtt: Duration,
}

impl Default for TfrcConfig {
    fn default() -> Self {
        Self {
            segment_size: 1460,
            b: 1.0,
            t_mbi: T_MBI,
            rtt_filter: RTT_Q,
            initial_nofeedback_timeout: INITIAL_NOFEEDBACK,
            oscillation_reduction: false,
            history_discounting: false,
            fallback_rtt: FALLBACK_RTT,
        }
    }
}

impl TfrcConfig {
    /// The RFC 5348 defaults.
    pub fn new() -> Self {
        Self::default()
    }
    /// Sets the segment size `s` in bytes.
    pub fn segment_size(mut self, bytes: u32) -> Self {
        self.segment_size = bytes;
        self
    }
    /// Sets `b`, packets acknowledged per TCP ACK.
    pub fn b(mut self, b: f64) -> Self {
        self.b = b;
        self
    }
    /// Sets the maximum backoff interval `t_mbi`.
    pub fn t_mbi(mut self, t_mbi: Duration) -> Self {
        self.t_mbi = t_mbi;
        self
    }
    /// Sets the RTT filter constant `q`.
    pub fn rtt_filter(mut self, q: f64) -> Self {
        self.rtt_filter = q;
        self
    }
    /// Sets the nofeedback timeout used before the first RTT sample.
    pub fn initial_nofeedback_timeout(mut self, d: Duration) -> Self {
        self.initial_nofeedback_timeout = d;
        self
    }
    /// Turns oscillation reduction (§4.5) on or off.
    pub fn oscillation_reduction(mut self, on: bool) -> Self {
        self.oscillation_reduction = on;
        self
    }
    /// Turns history discounting (§5.5) on or off.
    pub fn history_discounting(mut self, on: bool) -> Self {
        self.history_discounting = on;
        self
    }
    /// Sets the receiver's RTT before data packets carry one.
    pub fn fallback_rtt(mut self, d: Duration) -> Self {
        self.fallback_rtt = d;
        self
    }

    fn s(&self) -> f64 {
        if self.segment_size == 0 {
            1460.0
        } else {
            f64::from(self.segment_size)
        }
    }
    fn b_value(&self) -> f64 {
        if self.b.is_finite() && self.b > 0.0 {
            self.b
        } else {
            1.0
        }
    }
    fn q(&self) -> f64 {
        if (0.0..=1.0).contains(&self.rtt_filter) {
            self.rtt_filter
        } else {
            RTT_Q
        }
    }
    /// The rate floor `s / t_mbi` in bytes per second.
    fn min_rate(&self) -> f64 {
        let t_mbi = if self.t_mbi.is_zero() {
            T_MBI
        } else {
            self.t_mbi
        };
        self.s() / t_mbi.as_secs_f64()
    }
    fn fallback_rtt_value(&self) -> Duration {
        if self.fallback_rtt.is_zero() {
            FALLBACK_RTT
        } else {
            self.fallback_rtt
        }
    }
}

// ---------------------------------------------------------------------------
// Receiver side: loss history (§5)
// ---------------------------------------------------------------------------

/// What [`LossHistory::on_packet`] made of an arrival.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Arrival {
    /// A new packet at or above the settled point; it counts.
    Accepted,
    /// A second copy of a packet that is still in the reordering window.
    Duplicate,
    /// Below the settled point: a duplicate of a settled packet, a packet
    /// already declared lost (it stays lost, §5.1), or one from before the
    /// first packet seen. Ignored by loss detection.
    Old,
}

/// Loss detection and the loss event rate of RFC 5348 §5.
///
/// A packet is lost once [`NDUPACK`] packets with higher sequence numbers
/// have arrived (§5.1). Lost packets get a nominal arrival time interpolated
/// between their received neighbours (§5.2); a lost packet whose nominal
/// time is more than one RTT after the start of the current loss event
/// starts a new loss event. Loss intervals run from the first lost packet of
/// one loss event to the next (§5.3); `p` is the inverse of their weighted
/// average (§5.4), optionally with history discounting (§5.5).
///
/// Memory is bounded: the 3 highest unsettled sequence numbers, 8 closed
/// intervals and a few counters.
#[derive(Clone, Debug)]
pub struct LossHistory {
    discounting: bool,
    started: bool,
    /// Every sequence number below this is settled: received or lost.
    frontier: u64,
    /// Received packets at or above `frontier`, highest first, at most `NDUPACK - 1`
    /// between calls.
    pending: Vec<(u64, Instant)>,
    /// The highest settled received packet (the "before" neighbour of a gap).
    last_settled: Option<(u64, Instant)>,
    highest: u64,
    /// First lost packet of the most recent loss event, and its nominal time.
    current: Option<(u64, Instant)>,
    /// Closed loss intervals I_1, I_2, .., most recent first.
    closed: VecDeque<Interval>,
    lost_packets: u64,
    loss_events: u64,
}

#[derive(Clone, Copy, Debug)]
struct Interval {
    len: f64,
    /// Per-interval discount factor DF_i (§5.5); 1 without discounting.
    df: f64,
}

impl LossHistory {
    /// An empty history; `history_discounting` turns on §5.5.
    pub fn new(history_discounting: bool) -> Self {
        Self {
            discounting: history_discounting,
            started: false,
            frontier: 0,
            pending: Vec::with_capacity(NDUPACK + 1),
            last_settled: None,
            highest: 0,
            current: None,
            closed: VecDeque::with_capacity(N_INTERVALS + 1),
            lost_packets: 0,
            loss_events: 0,
        }
    }

    /// Records the arrival of packet `seq` at `now`; `rtt` is the sender's
    /// RTT estimate used to group losses into loss events (§5.2).
    ///
    /// `first_interval` is called at most once in the history's life, when
    /// the first loss event is detected, for the synthetic first loss
    /// interval of §6.3.1 (in packets; values below 1, NaN or infinite are
    /// clamped). Never panics, whatever the sequence numbers.
    pub fn on_packet(
        &mut self,
        now: Instant,
        seq: u64,
        rtt: Duration,
        first_interval: impl FnOnce() -> f64,
    ) -> Arrival {
        if !self.started {
            self.started = true;
            self.frontier = seq;
            self.highest = seq;
            self.pending.push((seq, now));
            return Arrival::Accepted;
        }
        if seq < self.frontier {
            return Arrival::Old;
        }
        if self.pending.iter().any(|&(s, _)| s == seq) {
            return Arrival::Duplicate;
        }
        let at = self.pending.partition_point(|&(s, _)| s > seq);
        self.pending.insert(at, (seq, now));
        self.highest = self.highest.max(seq);
        let mut first_interval = Some(first_interval);
        //= https://www.rfc-editor.org/rfc/rfc5348#section-5.1
        //# a packet is considered lost ... if at least NDUPACK packets with a
        //# higher sequence number have been received
        // Everything below the NDUPACK-th highest pending packet has NDUPACK
        // packets above it: the holes are lost, and that packet is settled.
        while self.pending.len() >= NDUPACK {
            let Some((r, t)) = self.pending.pop() else {
                break;
            };
            if self.frontier < r {
                self.on_lost_range(self.frontier, r - 1, (r, t), rtt, &mut first_interval);
            }
            self.last_settled = Some((r, t));
            self.frontier = r.saturating_add(1);
        }
        Arrival::Accepted
    }

    /// The loss event rate `p = 1 / I_mean` in `[0, 1]`; 0 before the first
    /// loss event (§5.4).
    pub fn loss_event_rate(&self) -> f64 {
        match self.average_loss_interval() {
            Some(i) if i >= 1.0 => 1.0 / i,
            Some(_) => 1.0,
            None => 0.0,
        }
    }

    /// The average loss interval `I_mean` in packets (§5.4, with §5.5 when
    /// configured), or `None` before the first loss event.
    pub fn average_loss_interval(&self) -> Option<f64> {
        let i0 = self.open_interval()? as f64;
        let closed: Vec<(f64, f64)> = self.closed.iter().map(|i| (i.len, i.df)).collect();
        Some(if self.discounting {
            discounted_mean(i0, &closed)
        } else {
            let lens: Vec<f64> = closed.iter().map(|c| c.0).collect();
            average_loss_interval(i0, &lens)
        })
    }

    /// The open interval `I_0`: packets from the start of the most recent
    /// loss event to the highest received one, inclusive (§5.3).
    pub fn open_interval(&self) -> Option<u64> {
        let (s0, _) = self.current?;
        Some(self.highest.saturating_sub(s0).saturating_add(1))
    }

    /// Closed loss intervals `I_1, I_2, ..`, most recent first, at most 8
    /// (the first one ever is the synthetic interval of §6.3.1).
    pub fn closed_intervals(&self) -> impl Iterator<Item = f64> + '_ {
        self.closed.iter().map(|i| i.len)
    }

    /// Packets declared lost so far.
    pub fn lost_packets(&self) -> u64 {
        self.lost_packets
    }

    /// Loss events so far.
    pub fn loss_events(&self) -> u64 {
        self.loss_events
    }

    /// The highest sequence number received, if any.
    pub fn highest_seq(&self) -> Option<u64> {
        self.started.then_some(self.highest)
    }

    /// Packets `a..=b` are lost; `after` is the received packet just above them.
    fn on_lost_range<F: FnOnce() -> f64>(
        &mut self,
        a: u64,
        b: u64,
        after: (u64, Instant),
        rtt: Duration,
        first_interval: &mut Option<F>,
    ) {
        self.lost_packets = self.lost_packets.saturating_add((b - a).saturating_add(1));
        let interp = Interp {
            before: self.last_settled.unwrap_or(after),
            after,
        };
        let mut s = a;
        let mut prev_start: Option<u64> = None;
        loop {
            //= https://www.rfc-editor.org/rfc/rfc5348#section-5.2
            //# If T_old + R >= T_new, then S_new is part of the existing loss
            //# event.  Otherwise, S_new is the first packet of a new loss event.
            if let Some((_, t0)) = self.current {
                match interp.first_after(t0.saturating_add(rtt), s, b) {
                    Some(next) => s = next,
                    None => break,
                }
            }
            self.start_event(s, interp.at(s), first_interval);
            if let Some(ps) = prev_start {
                // Evenly spaced events through a long gap: step over all but
                // the last few (only the last 8 intervals matter).
                let k = s.saturating_sub(ps).max(1);
                let remaining = (b - s) / k;
                let keep = (N_INTERVALS + 1) as u64;
                if remaining > 2 * keep {
                    let jump = remaining - keep;
                    for _ in 0..jump.min(keep) {
                        self.push_closed(k as f64);
                    }
                    self.loss_events = self.loss_events.saturating_add(jump);
                    s += jump * k;
                    self.current = Some((s, interp.at(s)));
                }
            }
            prev_start = Some(s);
            if s >= b {
                break;
            }
            s += 1;
        }
    }

    fn start_event<F: FnOnce() -> f64>(
        &mut self,
        s: u64,
        t: Instant,
        first_interval: &mut Option<F>,
    ) {
        let len = match self.current {
            //= https://www.rfc-editor.org/rfc/rfc5348#section-6.3.1
            //# the receiver ... uses the throughput equation ... to compute
            //# the loss interval that would be required to produce X_recv
            None => {
                let i = first_interval.take().map_or(1.0, |f| f());
                if i.is_finite() {
                    i.clamp(1.0, MAX_FIRST_INTERVAL)
                } else if i > 0.0 {
                    MAX_FIRST_INTERVAL
                } else {
                    1.0
                }
            }
            Some((s0, _)) => s.saturating_sub(s0).max(1) as f64,
        };
        self.push_closed(len);
        self.current = Some((s, t));
        self.loss_events = self.loss_events.saturating_add(1);
    }

    fn push_closed(&mut self, len: f64) {
        if self.discounting {
            //= https://www.rfc-editor.org/rfc/rfc5348#section-5.5
            //# When a new loss event occurs, ... the previous discount factor
            //# DF has to be incorporated into the existing discount factors
            let df = self.general_discount();
            for i in &mut self.closed {
                i.df *= df;
            }
        }
        self.closed.push_front(Interval { len, df: 1.0 });
        self.closed.truncate(N_INTERVALS);
    }

    /// The general discount factor DF of §5.5: `max(0.5, 2*I_mean/I_0)` when
    /// `I_0 > 2*I_mean`, else 1. `I_mean` here averages the closed
    /// intervals with their own discount factors.
    fn general_discount(&self) -> f64 {
        let Some(i0) = self.open_interval() else {
            return 1.0;
        };
        let (mut i_tot, mut w_tot) = (0.0, 0.0);
        for (i, c) in self.closed.iter().enumerate() {
            i_tot += c.len * WEIGHTS[i] * c.df;
            w_tot += WEIGHTS[i] * c.df;
        }
        if w_tot <= 0.0 {
            return 1.0;
        }
        let mean = i_tot / w_tot;
        let i0 = i0 as f64;
        if i0 > 2.0 * mean {
            (2.0 * mean / i0).max(DISCOUNT_THRESHOLD)
        } else {
            1.0
        }
    }
}

/// The average loss interval of RFC 5348 §5.4 from the open interval `i0`
/// and the closed intervals `closed` (`I_1, I_2, ..`, most recent first;
/// only the first 8 count). With k < 8 closed intervals the first k
/// weights are used (as Linux DCCP does). Without closed intervals this is
/// `i0`.
//= https://www.rfc-editor.org/rfc/rfc5348#section-5.4
//# I_tot = max(I_tot0, I_tot1);
//# I_mean = I_tot/W_tot;
pub fn average_loss_interval(i0: f64, closed: &[f64]) -> f64 {
    let k = closed.len().min(N_INTERVALS);
    if k == 0 {
        return i0;
    }
    let (mut i_tot0, mut i_tot1, mut w_tot) = (0.0, 0.0, 0.0);
    for i in 0..=k {
        let ii = if i == 0 { i0 } else { closed[i - 1] };
        if i < k {
            i_tot0 += ii * WEIGHTS[i];
            w_tot += WEIGHTS[i];
        }
        if i > 0 {
            i_tot1 += ii * WEIGHTS[i - 1];
        }
    }
    i_tot0.max(i_tot1) / w_tot
}

/// §5.5: the average loss interval with per-interval discount factors
/// `closed[i].1` and the general discount factor applied to `I_tot0`.
fn discounted_mean(i0: f64, closed: &[(f64, f64)]) -> f64 {
    let k = closed.len().min(N_INTERVALS);
    if k == 0 {
        return i0;
    }
    let (mut i_tot1, mut w_tot1) = (0.0, 0.0);
    for (i, &(len, df_i)) in closed.iter().take(k).enumerate() {
        i_tot1 += len * WEIGHTS[i] * df_i;
        w_tot1 += WEIGHTS[i] * df_i;
    }
    let mean1 = if w_tot1 > 0.0 { i_tot1 / w_tot1 } else { i0 };
    let df = if i0 > 2.0 * mean1 {
        (2.0 * mean1 / i0).max(DISCOUNT_THRESHOLD)
    } else {
        1.0
    };
    let (mut i_tot0, mut w_tot0) = (i0 * WEIGHTS[0], WEIGHTS[0]);
    for (i, &(len, df_i)) in closed.iter().take(k - 1).enumerate() {
        i_tot0 += len * WEIGHTS[i + 1] * df_i * df;
        w_tot0 += WEIGHTS[i + 1] * df_i * df;
    }
    (i_tot0 / w_tot0).max(mean1)
}

/// Nominal arrival times of lost packets between two received ones (§5.2):
/// `T_loss = T_before + (T_after - T_before) * (S_loss - S_before) / (S_after - S_before)`.
#[derive(Clone, Copy, Debug)]
struct Interp {
    before: (u64, Instant),
    after: (u64, Instant),
}

impl Interp {
    fn at(&self, s: u64) -> Instant {
        let ((sb, tb), (sa, ta)) = (self.before, self.after);
        let span = u128::from(sa.saturating_sub(sb));
        if span == 0 {
            return ta;
        }
        let ds = u128::from(s.saturating_sub(sb)).min(span);
        let (tb, ta) = (tb.as_nanos(), ta.as_nanos());
        let nanos = if ta >= tb {
            let d = u128::from(ta - tb) * ds / span;
            tb + u64::try_from(d).unwrap_or(u64::MAX)
        } else {
            let d = u128::from(tb - ta) * ds / span;
            tb - u64::try_from(d).unwrap_or(0).min(tb - ta)
        };
        Instant::from_nanos(nanos)
    }

    /// The first sequence number in `lo..=hi` whose nominal time is after
    /// `limit`. Times are monotonic in the sequence number.
    fn first_after(&self, limit: Instant, lo: u64, hi: u64) -> Option<u64> {
        if lo > hi {
            return None;
        }
        if self.after.1 < self.before.1 {
            // Decreasing: only `lo` can be the latest.
            return (self.at(lo) > limit).then_some(lo);
        }
        if self.at(hi) <= limit {
            return None;
        }
        let (mut lo, mut hi) = (lo, hi);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.at(mid) > limit {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        Some(lo)
    }
}

// ---------------------------------------------------------------------------
// Receiver (§6)
// ---------------------------------------------------------------------------

/// What the receiver needs from one data packet (the sender puts the
/// timestamp and its RTT estimate in every data packet, §3.2.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataPacketInfo {
    /// Sequence number, increasing by one per data packet (extended to 64 bits).
    pub seq: u64,
    /// The sender's send time, in the sender's clock; echoed back untouched.
    pub timestamp: Instant,
    /// The sender's RTT estimate, or `None` before it has one.
    pub rtt: Option<Duration>,
    /// Packet size in bytes, counted in `X_recv`.
    pub size: u32,
}

/// One feedback report (RFC 5348 §3.2.2). Plain values; the caller encodes them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TfrcFeedback {
    /// `t_recvdata`: echo of the timestamp of the last data packet received.
    pub t_recvdata: Instant,
    /// `t_delay`: time between that packet's arrival and this report.
    pub t_delay: Duration,
    /// `X_recv`: bytes per second received over the last RTT (0 in the
    /// first report, §6.3).
    pub x_recv: f64,
    /// `p`: the loss event rate, in `[0, 1]`.
    pub p: f64,
}

/// Receiver counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReceiverStats {
    /// Data packets handed in.
    pub packets: u64,
    /// Duplicates inside the reordering window (ignored).
    pub duplicates: u64,
    /// Packets below the settled point (late, duplicate or ancient; ignored
    /// for loss detection, counted in `X_recv`).
    pub old: u64,
    /// Feedback reports produced.
    pub feedback_sent: u64,
}

/// TFRC receiver (RFC 5348 §6): a [`LossHistory`], the receive rate and
/// the feedback schedule.
///
/// - input: [`on_data_packet`](Self::on_data_packet) for every data packet;
/// - outputs, after every input and at the deadline:
///   [`poll_feedback`](Self::poll_feedback) until `None`, then
///   [`poll_timeout`](Self::poll_timeout);
/// - getters: [`loss_event_rate`](Self::loss_event_rate),
///   [`loss_history`](Self::loss_history), [`stats`](Self::stats).
#[derive(Clone, Debug)]
pub struct TfrcReceiver {
    config: TfrcConfig,
    history: LossHistory,
    /// R_m, the most recent RTT carried by a data packet.
    rtt: Option<Duration>,
    rate: RateMeter,
    /// (send timestamp, arrival) of the packet with the latest send timestamp.
    last: Option<(Instant, Instant)>,
    /// Whether a report was produced yet.
    reported: bool,
    /// When the feedback timer was last (re)started: the last report, or
    /// an expiry without data.
    timer_base: Option<Instant>,
    data_since_feedback: bool,
    feedback_due: bool,
    deadline: Option<Instant>,
    stats: ReceiverStats,
}

impl TfrcReceiver {
    /// A receiver that has seen nothing yet.
    pub fn new(config: TfrcConfig) -> Self {
        Self {
            history: LossHistory::new(config.history_discounting),
            config,
            rtt: None,
            rate: RateMeter::default(),
            last: None,
            reported: false,
            timer_base: None,
            data_since_feedback: false,
            feedback_due: false,
            deadline: None,
            stats: ReceiverStats::default(),
        }
    }

    /// Records one arriving data packet (§6.1). Any sequence number is
    /// safe: duplicates and packets below the settled point are counted
    /// and ignored by loss detection. Then call
    /// [`poll_feedback`](Self::poll_feedback).
    pub fn on_data_packet(&mut self, now: Instant, pkt: &DataPacketInfo) {
        self.stats.packets += 1;
        if let Some(r) = pkt.rtt.filter(|r| !r.is_zero()) {
            self.rtt = Some(r);
        }
        let rtt = self.rtt_m();
        let first_packet = self.history.highest_seq().is_none();
        let p_prev = self.history.loss_event_rate();
        let s = if pkt.size == 0 {
            self.config.s()
        } else {
            f64::from(pkt.size)
        };
        // X_recv including this packet, for the synthetic first interval.
        let rate = &self.rate;
        let size = pkt.size;
        let arrival = self.history.on_packet(now, pkt.seq, rtt, || {
            let x_recv = rate.bytes_since(now, rtt).saturating_add(u64::from(size)) as f64
                / rtt.as_secs_f64();
            1.0 / loss_rate_for_throughput(s, rtt, x_recv)
        });
        match arrival {
            Arrival::Duplicate => {
                self.stats.duplicates += 1;
                return;
            }
            Arrival::Old => self.stats.old += 1,
            Arrival::Accepted => {}
        }
        self.rate.push(now, pkt.size, rtt);
        if self.last.is_none_or(|(ts, _)| pkt.timestamp >= ts) {
            self.last = Some((pkt.timestamp, now));
        }
        self.data_since_feedback = true;
        //= https://www.rfc-editor.org/rfc/rfc5348#section-6.1
        //# If p_new > p_prev, ... expire the feedback timer
        if first_packet || self.history.loss_event_rate() > p_prev {
            self.feedback_due = true;
        }
        // The timer runs R_m after the last report, with the latest R_m
        // (the first report is timed with the fallback RTT).
        self.deadline = Some(self.timer_base.unwrap_or(now) + rtt);
    }

    /// A feedback report if one is due at `now`: after the first packet,
    /// when `p` rose, or once per RTT while data arrives (§6.2). Call after
    /// every [`on_data_packet`](Self::on_data_packet) and at
    /// [`poll_timeout`](Self::poll_timeout), until `None`.
    pub fn poll_feedback(&mut self, now: Instant) -> Option<TfrcFeedback> {
        let expired = self.deadline.is_some_and(|d| now >= d);
        if !self.feedback_due && !expired {
            return None;
        }
        let rtt = self.rtt_m();
        let (t_recvdata, arrived) = self.last?;
        if !self.feedback_due && !self.data_since_feedback {
            // §6.2: no data since the last report: no report, restart the timer.
            self.timer_base = Some(now);
            self.deadline = Some(now + rtt);
            return None;
        }
        let x_recv = if self.reported {
            //= https://www.rfc-editor.org/rfc/rfc5348#section-6.2
            //# Calculate the measured receive rate, X_recv, based on the
            //# packets received within the previous R_m seconds.
            self.rate.bytes_since(now, rtt) as f64 / rtt.as_secs_f64()
        } else {
            0.0
        };
        self.reported = true;
        self.timer_base = Some(now);
        self.feedback_due = false;
        self.data_since_feedback = false;
        self.deadline = Some(now + rtt);
        self.stats.feedback_sent += 1;
        Some(TfrcFeedback {
            t_recvdata,
            t_delay: now - arrived,
            x_recv,
            p: self.history.loss_event_rate().clamp(0.0, 1.0),
        })
    }

    /// When to call [`poll_feedback`](Self::poll_feedback) next; `None`
    /// before the first packet. May change after every call.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.feedback_due {
            return self.last.map(|(_, arrived)| arrived);
        }
        self.deadline
    }

    /// The current loss event rate `p`.
    pub fn loss_event_rate(&self) -> f64 {
        self.history.loss_event_rate()
    }

    /// The loss history, for inspection.
    pub fn loss_history(&self) -> &LossHistory {
        &self.history
    }

    /// The RTT in use (`R_m`, or the fallback).
    pub fn rtt(&self) -> Duration {
        self.rtt_m()
    }

    /// Counters.
    pub fn stats(&self) -> &ReceiverStats {
        &self.stats
    }

    fn rtt_m(&self) -> Duration {
        self.rtt.unwrap_or_else(|| self.config.fallback_rtt_value())
    }
}

/// Bytes received per arrival time, pruned to the last RTT and capped at
/// `RATE_SAMPLES` records (beyond that, arrivals merge into the newest).
#[derive(Clone, Debug, Default)]
struct RateMeter {
    samples: VecDeque<(Instant, u64)>,
}

impl RateMeter {
    fn push(&mut self, now: Instant, size: u32, window: Duration) {
        let horizon = now - window;
        while self.samples.front().is_some_and(|&(t, _)| t <= horizon) {
            self.samples.pop_front();
        }
        if self.samples.len() >= RATE_SAMPLES {
            if let Some(back) = self.samples.back_mut() {
                back.1 = back.1.saturating_add(u64::from(size));
            }
        } else {
            self.samples.push_back((now, u64::from(size)));
        }
    }

    /// Bytes that arrived in `(now - window, now]`.
    fn bytes_since(&self, now: Instant, window: Duration) -> u64 {
        let horizon = now - window;
        self.samples
            .iter()
            .rev()
            .take_while(|&&(t, _)| t > horizon)
            .fold(0u64, |acc, &(_, b)| acc.saturating_add(b))
    }
}

// ---------------------------------------------------------------------------
// Sender (§4)
// ---------------------------------------------------------------------------

/// Sender counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SenderStats {
    /// Feedback reports used.
    pub feedback: u64,
    /// Reports dropped because their echo lies in the sender's future.
    pub invalid_feedback: u64,
    /// Nofeedback timer expiries handled.
    pub nofeedback_timeouts: u64,
}

/// TFRC sender (RFC 5348 §4): the allowed sending rate `X`.
///
/// - inputs: [`on_packet_sent`](Self::on_packet_sent),
///   [`on_feedback`](Self::on_feedback),
///   [`on_nofeedback_timeout`](Self::on_nofeedback_timeout);
/// - outputs, re-read after every input:
///   [`allowed_rate`](Self::allowed_rate),
///   [`nofeedback_deadline`](Self::nofeedback_deadline),
///   [`rtt`](Self::rtt) (to put in data packets);
/// - getters: [`loss_event_rate`](Self::loss_event_rate),
///   [`rto`](Self::rto), [`stats`](Self::stats).
///
/// Uses RFC 5348's `X_recv_set` (§4.3), not RFC 3448's `2*X_recv` rule.
#[derive(Clone, Debug)]
pub struct TfrcSender {
    config: TfrcConfig,
    s: f64,
    /// Allowed sending rate X, bytes per second.
    x: f64,
    /// Smoothed RTT R, seconds.
    r: Option<f64>,
    /// Last equation value X_Bps.
    x_bps: Option<f64>,
    /// Last reported loss event rate.
    p: f64,
    /// Time Last Doubled during slow start (`None` is the RFC's -1).
    tld: Option<Instant>,
    x_recv_set: Vec<(f64, Instant)>,
    deadline: Instant,
    feedback_received: bool,
    sent_since_timer: bool,
    any_send_reported: bool,
    last_not_limited_send: Option<Instant>,
    prev_echo: Option<Instant>,
    r_sqmean: Option<f64>,
    last_r_sample: Option<f64>,
    stats: SenderStats,
}

impl TfrcSender {
    /// A sender starting at `now`: one packet per second and a 2-second
    /// nofeedback timer (§4.2).
    //= https://www.rfc-editor.org/rfc/rfc5348#section-4.2
    //# the value of X is set to s bytes per second, the nofeedback timer is
    //# set to expire after 2 seconds, and tld is set to -1.
    pub fn new(now: Instant, config: TfrcConfig) -> Self {
        let s = config.s();
        let first_timeout = if config.initial_nofeedback_timeout.is_zero() {
            INITIAL_NOFEEDBACK
        } else {
            config.initial_nofeedback_timeout
        };
        Self {
            s,
            x: s,
            r: None,
            x_bps: None,
            p: 0.0,
            tld: None,
            x_recv_set: vec![(f64::INFINITY, now)],
            deadline: now + first_timeout,
            feedback_received: false,
            sent_since_timer: false,
            any_send_reported: false,
            last_not_limited_send: None,
            prev_echo: None,
            r_sqmean: None,
            last_r_sample: None,
            stats: SenderStats::default(),
            config,
        }
    }

    /// Records a data packet sent at `now`. `data_limited` is `true` when
    /// the application had nothing more to send at the allowed rate (for
    /// §4.3's data-limited intervals and §4.4's idle test). Report every
    /// packet, or none at all (then the sender counts as never idle).
    pub fn on_packet_sent(&mut self, now: Instant, _bytes: u32, data_limited: bool) {
        self.any_send_reported = true;
        self.sent_since_timer = true;
        if !data_limited {
            self.last_not_limited_send = Some(now);
        }
    }

    /// Processes one feedback report (§4.3). Reports whose echoed timestamp
    /// is after `now` are counted in [`stats`](Self::stats) and dropped.
    pub fn on_feedback(&mut self, now: Instant, fb: &TfrcFeedback) {
        let Some(elapsed) = now.checked_duration_since(fb.t_recvdata) else {
            self.stats.invalid_feedback += 1;
            return;
        };
        self.stats.feedback += 1;
        let p = if fb.p.is_nan() {
            0.0
        } else {
            fb.p.clamp(0.0, 1.0)
        };
        let x_recv = if fb.x_recv.is_nan() || fb.x_recv < 0.0 {
            0.0
        } else {
            fb.x_recv
        };

        // 1) R_sample = (t_now - t_recvdata) - t_delay
        let r_sample = elapsed
            .saturating_sub(fb.t_delay)
            .max(MIN_RTT)
            .as_secs_f64();
        // 2) R = q*R + (1-q)*R_sample
        let q = self.config.q();
        let r = match self.r {
            None => r_sample,
            Some(r) => q * r + (1.0 - q) * r_sample,
        };
        self.r = Some(r);
        // 3) t_RTO = max(4*R, 2*s/X): the nofeedback interval, step 6.

        // 4) the allowed sending rate.
        // Data-limited: no send reported as not data-limited since the
        // previous report's echo.
        let data_limited = self.any_send_reported
            && self
                .last_not_limited_send
                .is_none_or(|t| self.prev_echo.is_some_and(|e| t <= e));
        let recv_limit = if data_limited {
            if p > self.p {
                for e in &mut self.x_recv_set {
                    e.0 /= 2.0;
                }
                self.maximize_x_recv_set(now, 0.85 * x_recv)
            } else {
                2.0 * self.maximize_x_recv_set(now, x_recv)
            }
        } else {
            2.0 * self.update_x_recv_set(now, x_recv, r)
        };
        self.p = p;
        self.recompute_x(now, recv_limit);

        // 5) oscillation reduction (§4.5).
        let sq = r_sample.sqrt();
        self.r_sqmean = Some(match self.r_sqmean {
            None => sq,
            Some(m) => OSC_Q2 * m + (1.0 - OSC_Q2) * sq,
        });
        self.last_r_sample = Some(r_sample);

        // 6) restart the nofeedback timer.
        self.feedback_received = true;
        self.prev_echo = Some(fb.t_recvdata);
        self.restart_timer(now);
    }

    /// Handles the nofeedback timer (§4.4): usually halves the rate, never
    /// below `s / t_mbi`, and restarts the timer. Calls before
    /// [`nofeedback_deadline`](Self::nofeedback_deadline) do nothing.
    pub fn on_nofeedback_timeout(&mut self, now: Instant) {
        if now < self.deadline {
            return;
        }
        self.stats.nofeedback_timeouts += 1;
        let min_rate = self.config.min_rate();
        let idle = self.any_send_reported && !self.sent_since_timer;
        let x_recv = self.x_recv_set.iter().map(|e| e.0).fold(0.0_f64, f64::max);
        let recover_rate = self.initial_rate().unwrap_or(0.0);
        //= https://www.rfc-editor.org/rfc/rfc5348#section-4.4
        //# If the nofeedback timer expires, the sender should perform the
        //# following actions:
        if self.r.is_none() && !self.feedback_received && !idle {
            self.x = (self.x / 2.0).max(min_rate);
        } else if idle
            && ((self.p > 0.0 && x_recv < recover_rate)
                || (self.p == 0.0 && self.x < 2.0 * recover_rate))
        {
            // Idle since the timer was set, and already at a low rate.
        } else if self.p == 0.0 {
            self.x = (self.x / 2.0).max(min_rate);
        } else {
            let x_bps = self.x_bps.unwrap_or(f64::INFINITY);
            if x_bps > 2.0 * x_recv {
                self.update_limits(now, x_recv);
            } else {
                self.update_limits(now, x_bps / 2.0);
            }
        }
        self.restart_timer(now);
    }

    /// When [`on_nofeedback_timeout`](Self::on_nofeedback_timeout) is due.
    /// Always `Some` (the timer always runs); may change after every input.
    pub fn nofeedback_deadline(&self) -> Option<Instant> {
        Some(self.deadline)
    }

    /// The allowed sending rate in bytes per second: `X`, or `X_inst` with
    /// oscillation reduction (§4.5). At least `s / t_mbi`.
    pub fn allowed_rate(&self) -> f64 {
        let x = match (
            self.config.oscillation_reduction,
            self.r_sqmean,
            self.last_r_sample,
        ) {
            (true, Some(m), Some(r)) if r > 0.0 => x_inst(self.x, m, r),
            _ => self.x,
        };
        x.max(self.config.min_rate())
    }

    /// [`allowed_rate`](Self::allowed_rate) as a bit rate (rounded down,
    /// saturating).
    pub fn allowed_bitrate(&self) -> Bitrate {
        Bitrate::bps((self.allowed_rate() * 8.0) as u64)
    }

    /// Time between packets of `bytes` bytes at the allowed rate (§4.6's
    /// `t_ipi = s / X`).
    pub fn inter_packet_interval(&self, bytes: u32) -> Duration {
        secs(f64::from(bytes) / self.allowed_rate())
    }

    /// The smoothed RTT `R` to put in data packets; `None` before the first
    /// feedback.
    pub fn rtt(&self) -> Option<Duration> {
        self.r.map(secs)
    }

    /// The nofeedback interval `max(4R, 2s/X)` (or the initial 2 s before an
    /// RTT sample).
    pub fn rto(&self) -> Duration {
        let two_s_over_x = secs(2.0 * self.s / self.x);
        match self.r {
            Some(r) => secs(4.0 * r).max(two_s_over_x),
            None => {
                let init = if self.config.initial_nofeedback_timeout.is_zero() {
                    INITIAL_NOFEEDBACK
                } else {
                    self.config.initial_nofeedback_timeout
                };
                init.max(two_s_over_x)
            }
        }
    }

    /// The loss event rate from the last report.
    pub fn loss_event_rate(&self) -> f64 {
        self.p
    }

    /// The last equation value `X_Bps`, once `p > 0` was reported.
    pub fn equation_rate(&self) -> Option<f64> {
        self.x_bps
    }

    /// Counters.
    pub fn stats(&self) -> &SenderStats {
        &self.stats
    }

    /// `initial_rate = W_init / R` with `W_init = min(4s, max(2s, 4380))` (§4.2).
    //= https://www.rfc-editor.org/rfc/rfc5348#section-4.2
    //# W_init = min(4*s, max(2*s, 4380)).
    fn initial_rate(&self) -> Option<f64> {
        let w_init = (4.0 * self.s).min((2.0 * self.s).max(4380.0));
        self.r.map(|r| w_init / r)
    }

    /// §4.3 step 4, second half: X from `p`, `recv_limit` and slow start.
    fn recompute_x(&mut self, now: Instant, recv_limit: f64) {
        let Some(r) = self.r else {
            return;
        };
        let min_rate = self.config.min_rate();
        if self.p > 0.0 {
            //= https://www.rfc-editor.org/rfc/rfc5348#section-4.3
            //# X = max(min(X_Bps, recv_limit), s/t_mbi);
            let x_bps = throughput(
                self.s,
                secs(r),
                self.p,
                secs(4.0 * r),
                self.config.b_value(),
            );
            self.x_bps = Some(x_bps);
            self.x = x_bps.min(recv_limit).max(min_rate);
        } else if self.tld.is_none_or(|tld| now - tld >= secs(r)) {
            //= https://www.rfc-editor.org/rfc/rfc5348#section-4.3
            //# X = max(min(2*X, recv_limit), initial_rate);
            let initial = self.initial_rate().unwrap_or(self.s);
            self.x = (2.0 * self.x).min(recv_limit).max(initial);
            self.tld = Some(now);
        }
        if !self.x.is_finite() {
            // Only reachable with an infinite recv_limit and X_Bps; stay put.
            self.x = f64::MAX / 4.0;
        }
    }

    /// "Update X_recv_set": add `(x_recv, now)`, forget entries older than
    /// two RTTs, return the maximum.
    fn update_x_recv_set(&mut self, now: Instant, x_recv: f64, r: f64) -> f64 {
        self.x_recv_set.push((x_recv, now));
        let horizon = now - secs(2.0 * r);
        self.x_recv_set.retain(|&(_, t)| t >= horizon);
        if self.x_recv_set.len() > X_RECV_SET_CAP {
            let excess = self.x_recv_set.len() - X_RECV_SET_CAP;
            self.x_recv_set.drain(..excess);
        }
        self.x_recv_set.iter().map(|e| e.0).fold(x_recv, f64::max)
    }

    /// "Maximize X_recv_set": keep only the maximum of the set (without the
    /// initial Infinity) and `x_recv`, stamped `now`; return it.
    fn maximize_x_recv_set(&mut self, now: Instant, x_recv: f64) -> f64 {
        let max = self
            .x_recv_set
            .iter()
            .map(|e| e.0)
            .filter(|v| v.is_finite())
            .fold(x_recv, f64::max);
        self.x_recv_set.clear();
        self.x_recv_set.push((max, now));
        max
    }

    /// §4.4 `Update_Limits(timer_limit)`.
    fn update_limits(&mut self, now: Instant, timer_limit: f64) {
        let timer_limit = timer_limit.max(self.config.min_rate());
        self.x_recv_set.clear();
        self.x_recv_set.push((timer_limit / 2.0, now));
        // Recalculate X as in step (4) of §4.3 (typical branch).
        self.recompute_x(now, timer_limit);
    }

    fn restart_timer(&mut self, now: Instant) {
        self.deadline = now + self.rto();
        self.sent_since_timer = false;
    }
}

/// §4.5: `X_inst = X * R_sqmean / sqrt(R_sample)`.
fn x_inst(x: f64, r_sqmean: f64, r_sample: f64) -> f64 {
    x * r_sqmean / r_sample.sqrt()
}

/// Seconds to a `Duration`, saturating; NaN and negatives give zero.
fn secs(x: f64) -> Duration {
    Duration::try_from_secs_f64(x).unwrap_or(if x > 0.0 {
        Duration::MAX
    } else {
        Duration::ZERO
    })
}

/// A packet is lost once this many later packets arrived (RFC 5348 §5.1).
pub const NDUPACK: usize = 3;
/// Loss intervals in the average (RFC 5348 §5.4).
pub const N_INTERVALS: usize = 8;
/// Weights `w_0..w_7` of the average loss interval (RFC 5348 §5.4).
pub const WEIGHTS: [f64; N_INTERVALS] = [1.0, 1.0, 1.0, 1.0, 0.8, 0.6, 0.4, 0.2];
/// `t_mbi`, the maximum backoff interval (RFC 5348 §4.3).
const T_MBI: Duration = Duration::from_secs(64);
/// `q` of the RTT filter (RFC 5348 §4.3).
const RTT_Q: f64 = 0.9;
/// `q2` of `R_sqmean` (RFC 5348 §4.5).
const OSC_Q2: f64 = 0.9;
/// The nofeedback timer before an RTT sample (RFC 5348 §4.2).
const INITIAL_NOFEEDBACK: Duration = Duration::from_secs(2);
/// Linux DCCP `DCCP_FALLBACK_RTT` (USEC_PER_SEC / 5).
const FALLBACK_RTT: Duration = Duration::from_millis(200);
/// Lower bound of an RTT sample, so rates stay finite.
const MIN_RTT: Duration = Duration::from_micros(1);
/// Floor of `p` from the inverse equation: a first interval of at most 10^10 packets.
const MIN_INVERSE_P: f64 = 1e-10;
const MAX_FIRST_INTERVAL: f64 = 1.0 / MIN_INVERSE_P;
/// RFC 5348 §5.5 `DF` never goes below this.
const DISCOUNT_THRESHOLD: f64 = 0.5;
/// Arrival records kept for `X_recv` (2500 packets/s for 1.6 s).
const RATE_SAMPLES: usize = 4096;
/// Entries kept in `X_recv_set` (feedback comes about once per RTT, so two
/// RTTs hold about three).
const X_RECV_SET_CAP: usize = 32;

#[cfg(test)]
mod tests;
