//! The TFRC receiver (RFC 5348 §6): receive rate and feedback schedule
//! around a [`LossHistory`].

use std::time::Duration;

use super::history::{Arrival, LossHistory};
use groupwire_metrics::ArrivalWindow;

use super::{RATE_SAMPLES, TfrcConfig, loss_rate_for_throughput};
use crate::time::Instant;

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
    /// Bytes per arrival over the last RTT (§6.2's X_recv).
    rate: ArrivalWindow,
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
            rate: ArrivalWindow::new(RATE_SAMPLES),
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
            let x_recv =
                rate.sum_since(now, rtt).saturating_add(u64::from(size)) as f64 / rtt.as_secs_f64();
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
        self.rate.push(now, u64::from(pkt.size), rtt);
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
            self.rate.sum_since(now, rtt) as f64 / rtt.as_secs_f64()
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
