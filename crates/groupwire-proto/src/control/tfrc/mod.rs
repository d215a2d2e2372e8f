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
//! **On the `//=` / `//#` citations in this module:** they name the RFC 5348
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

mod history;
mod receiver;
mod sender;
#[cfg(test)]
mod tests;

use std::time::Duration;

pub use self::history::{Arrival, LossHistory, average_loss_interval};
pub use self::receiver::{DataPacketInfo, ReceiverStats, TfrcFeedback, TfrcReceiver};
pub use self::sender::{SenderStats, TfrcSender};

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
