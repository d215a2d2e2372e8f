//! Loss detection, loss events, loss intervals and the loss event rate
//! `p` (RFC 5348 §5), for the receiver.

use std::collections::VecDeque;
use std::time::Duration;

use super::{DISCOUNT_THRESHOLD, MAX_FIRST_INTERVAL, N_INTERVALS, NDUPACK, WEIGHTS};
use crate::time::Instant;

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
