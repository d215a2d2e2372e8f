//! The data sender: congestion control, loss recovery and the retransmission timer.

use std::collections::VecDeque;
use std::time::Duration;

use groupwire_proto::Instant;

use super::scoreboard::RangeSet;
use super::{Segment, TcpConfig, Variant};

/// Counters kept by a [`TcpSender`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SenderStats {
    /// Data segments sent, including retransmissions and a bare FIN.
    pub segments_sent: u64,
    /// Payload bytes sent, including retransmissions.
    pub bytes_sent: u64,
    /// Segments sent again (fast retransmit, recovery, go-back-N after RTO).
    pub retransmits: u64,
    /// Entries into fast recovery (one per fast retransmit).
    pub fast_retransmits: u64,
    /// Retransmission timeouts.
    pub timeouts: u64,
    /// Fast retransmits triggered by ELN-marked duplicate ACKs, which left
    /// the window as it was (a subset of `fast_retransmits`).
    pub eln_recoveries: u64,
    /// Bytes cumulatively acknowledged.
    pub bytes_acked: u64,
}

/// The sending half of a one-way TCP connection, as a sans-IO state machine.
///
/// - Commands: [`write`](Self::write), [`set_bulk`](Self::set_bulk),
///   [`close`](Self::close).
/// - Inputs: [`handle_ack`](Self::handle_ack),
///   [`handle_timeout`](Self::handle_timeout).
/// - Outputs: [`poll_segment`](Self::poll_segment) until `None`, then
///   [`poll_timeout`](Self::poll_timeout).
/// - Getters: [`cwnd`](Self::cwnd), [`ssthresh`](Self::ssthresh),
///   [`srtt`](Self::srtt), [`rto`](Self::rto), [`snd_una`](Self::snd_una),
///   [`snd_nxt`](Self::snd_nxt), [`in_recovery`](Self::in_recovery),
///   [`stats`](Self::stats), [`is_finished`](Self::is_finished).
///
/// Per ACK the work is `O(log n)` in the number of SACK holes plus amortised
/// `O(1)` per range merged or acknowledged; nothing allocates per segment
/// once the RTT history ring has grown to the window size.
#[derive(Debug)]
pub struct TcpSender {
    cfg: TcpConfig,
    mss: u64,

    /// Oldest unacknowledged byte.
    snd_una: u64,
    /// Next byte to send (below `snd_max` only during go-back-N after an RTO).
    snd_nxt: u64,
    /// One past the highest byte ever sent (RFC 6675 HighData + 1).
    snd_max: u64,
    /// Bytes the application has written (`u64::MAX` for bulk).
    app_limit: u64,
    closed: bool,
    fin_sent: bool,
    fin_acked: bool,

    cwnd: u64,
    ssthresh: u64,
    /// ns-3 `m_bytesAckedNotProcessed`: acked bytes short of a whole segment.
    acked_remainder: u64,
    dupacks: u32,
    in_recovery: bool,
    /// The duplicate ACK being handled carries an ELN mark (and ELN is on).
    eln_mark: bool,
    /// cwnd before an ELN recovery, restored when it ends.
    eln_cwnd: Option<u64>,
    /// RFC 6582 `recover`, as an exclusive end (`snd_max` when recovery or an
    /// RTO began). `None` before the first loss (no SYN to stand for ISS).
    recover: Option<u64>,
    /// RFC 6582 step 5: only the first partial ACK restarts the timer.
    first_partial_ack: bool,
    /// A retransmission that goes out regardless of cwnd (fast retransmit,
    /// partial-ACK retransmission).
    forced_rexmit: Option<u64>,

    /// RFC 6675 scoreboard of SACKed ranges in `[snd_una, snd_max)`.
    scoreboard: RangeSet,
    /// RFC 6675 HighRxt, exclusive: all unSACKed bytes in
    /// `[snd_una, high_rxt)` were retransmitted in this recovery.
    high_rxt: u64,
    /// Retransmitted bytes neither SACKed nor cumulatively acknowledged.
    retrans_out: u64,
    /// Unsacked bytes below this are lost (RFC 6675 IsLost, or marked).
    lost_below: u64,
    /// Unsacked bytes below this were marked lost explicitly: the head on
    /// entering fast recovery (ns-3 `MarkHeadAsLost`) and everything sent
    /// before a timeout (ns-3 `SetSentListLost`).
    marked_lost_below: u64,
    /// ns-3 `CA_LOSS` with SACK: after an RTO until `recover` is acknowledged.
    /// Sending follows the pipe / NextSeg rules (SACKed data is not resent),
    /// cwnd grows per ACK, duplicate ACKs are ignored.
    in_loss: bool,

    srtt: Option<Duration>,
    rttvar: Duration,
    rto: Duration,
    /// Consecutive timeouts without an ACK of new data.
    backoff: u32,
    /// Send times of new data, oldest first, for RTT samples (ns-3 `m_history`).
    history: VecDeque<Sent>,
    rto_deadline: Option<Instant>,

    stats: SenderStats,
}

/// A transmission of new data, for RTT sampling.
#[derive(Debug, Clone, Copy)]
struct Sent {
    /// Exclusive end of the segment.
    end: u64,
    at: Instant,
    /// Retransmitted since (Karn: no sample).
    retx: bool,
}

impl TcpSender {
    /// A sender with nothing to send yet; call [`write`](Self::write) or
    /// [`set_bulk`](Self::set_bulk).
    pub fn new(cfg: TcpConfig) -> Self {
        let mss = u64::from(cfg.mss.max(1));
        //= RFC 5681 §3.1
        //# The initial value of ssthresh SHOULD be set arbitrarily high (e.g.,
        //# to the size of the largest possible advertised window)
        let ssthresh = cfg.initial_ssthresh.unwrap_or(u64::MAX);
        Self {
            cwnd: u64::from(cfg.initial_cwnd.max(1)) * mss,
            ssthresh,
            rto: cfg.initial_rto,
            mss,
            cfg,
            snd_una: 0,
            snd_nxt: 0,
            snd_max: 0,
            app_limit: 0,
            closed: false,
            fin_sent: false,
            fin_acked: false,
            acked_remainder: 0,
            dupacks: 0,
            in_recovery: false,
            eln_mark: false,
            eln_cwnd: None,
            recover: None,
            first_partial_ack: false,
            forced_rexmit: None,
            scoreboard: RangeSet::default(),
            high_rxt: 0,
            retrans_out: 0,
            lost_below: 0,
            marked_lost_below: 0,
            in_loss: false,
            srtt: None,
            rttvar: Duration::ZERO,
            backoff: 0,
            history: VecDeque::new(),
            rto_deadline: None,
            stats: SenderStats::default(),
        }
    }

    /// The application hands `bytes` more bytes to send. A total of
    /// `u64::MAX` means bulk (never ends). Writing after
    /// [`close`](Self::close) is ignored.
    pub fn write(&mut self, _now: Instant, bytes: u64) {
        if self.closed {
            return;
        }
        self.app_limit = self.app_limit.saturating_add(bytes);
    }

    /// Makes this an infinite (bulk) flow.
    pub fn set_bulk(&mut self) {
        self.app_limit = u64::MAX;
    }

    /// Closes after what was written: the last segment carries FIN and
    /// [`is_finished`](Self::is_finished) turns true once the receiver
    /// acknowledges it. No effect on a bulk flow.
    pub fn close(&mut self) {
        if self.app_limit != u64::MAX {
            self.closed = true;
        }
    }

    /// Processes an ACK from the receiver. Stale, duplicate and bogus ACKs are
    /// safe (ACKs beyond anything sent are ignored).
    pub fn handle_ack(&mut self, now: Instant, seg: &Segment) {
        let ack = seg.ack;
        if ack < self.snd_una || ack > self.snd_max {
            return;
        }
        if seg.fin && self.closed && ack == self.app_limit {
            self.fin_acked = true;
        }
        let new_data = ack > self.snd_una;
        let acked = ack - self.snd_una;
        let outstanding_before = self.snd_max > self.snd_una;
        if new_data {
            self.advance_una(now, ack);
        }
        let mut newly_sacked = 0;
        if self.cfg.sack {
            for &(s, e) in seg.sack_blocks() {
                newly_sacked += self.record_sack(s, e);
            }
            self.update_lost_boundary();
        }
        let is_dupack = if self.cfg.sack {
            //= RFC 6675 §2
            //# For the purposes of this specification, we define a "duplicate
            //# acknowledgment" as a segment that arrives carrying a SACK block
            //# that identifies previously unacknowledged and un-SACKed octets
            //# between HighACK and HighData.
            // As ns-3 (`isDupack = scoreboardUpdated`): an ACK that also
            // advances the cumulative ACK still counts, and a duplicate
            // without new SACK information (e.g. for a spurious
            // retransmission) does not, so it releases no limited-transmit
            // segment.
            newly_sacked > 0
        } else {
            !new_data && outstanding_before && seg.len == 0
        };
        if new_data && !is_dupack {
            self.dupacks = 0;
        }
        // ns-3 (`ProcessAck`): the duplicate-ACK part first (it may enter
        // recovery), then the cumulative part.
        let in_disorder = !self.in_recovery && self.dupacks > 0;
        self.eln_mark = self.cfg.eln && seg.eln;
        if is_dupack && outstanding_before {
            self.on_dupack(ack);
        }
        let mut restart_timer = new_data;
        if new_data {
            // ns-3 grows cwnd only in CA_OPEN: not for an ACK that is also
            // a duplicate while duplicates are being counted (CA_DISORDER).
            let grow = !(is_dupack && in_disorder);
            restart_timer = self.on_new_ack(ack, acked, grow);
        }
        //= RFC 6298 §5
        //# (5.2) When all outstanding data has been acknowledged, turn off the
        //# retransmission timer.
        //# (5.3) When an ACK is received that acknowledges new data, restart the
        //# retransmission timer so that it will expire after RTO seconds (for
        //# the current value of RTO).
        if !self.has_outstanding() {
            self.rto_deadline = None;
        } else if restart_timer || self.rto_deadline.is_none() {
            self.rto_deadline = Some(now + self.rto);
        }
    }

    /// Retransmission timeout. Calls before [`poll_timeout`](Self::poll_timeout)
    /// or when no timer is armed are no-ops.
    pub fn handle_timeout(&mut self, now: Instant) {
        match self.rto_deadline {
            Some(d) if now >= d => self.on_rto(now),
            _ => {}
        }
    }

    /// The next segment to put on the wire now, if cwnd, rwnd, Nagle and the
    /// application's data allow. Call until `None` after every `handle_*` and
    /// command; may change [`poll_timeout`](Self::poll_timeout).
    pub fn poll_segment(&mut self, now: Instant) -> Option<Segment> {
        if let Some(seq) = self.forced_rexmit.take()
            && seq >= self.snd_una
            && seq < self.snd_max
        {
            let end = self.rexmit_end(seq);
            return Some(self.emit_retransmission(now, seq, end));
        }
        if self.cfg.sack && (self.in_recovery || self.in_loss) {
            return self.poll_sack_recovery(now);
        }
        let window = self.send_window();
        let flight = self.snd_nxt - self.snd_una;
        if self.snd_nxt < self.snd_max {
            // Go-back-N after an RTO.
            let seq = self.snd_nxt;
            let end = (seq + self.mss).min(self.snd_max);
            if flight + (end - seq) > window {
                return None;
            }
            self.snd_nxt = end;
            return Some(self.emit_retransmission(now, seq, end));
        }
        self.poll_new_data(now, flight, window)
    }

    /// When [`handle_timeout`](Self::handle_timeout) must be called: the
    /// retransmission timer, if armed. May change after any `handle_*` or
    /// `poll_segment` returning `Some`.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.rto_deadline
    }

    /// True once the flow was closed, everything was acknowledged and the
    /// receiver confirmed the FIN. Never true for bulk flows.
    pub fn is_finished(&self) -> bool {
        self.closed && self.fin_acked && self.snd_una == self.app_limit
    }

    /// Counters.
    pub fn stats(&self) -> &SenderStats {
        &self.stats
    }

    /// Congestion window in bytes (inflated during Reno/NewReno fast recovery).
    pub fn cwnd(&self) -> u64 {
        self.cwnd
    }

    /// Slow-start threshold in bytes (`u64::MAX` until the first loss unless configured).
    pub fn ssthresh(&self) -> u64 {
        self.ssthresh
    }

    /// Smoothed RTT, once there is a sample.
    pub fn srtt(&self) -> Option<Duration> {
        self.srtt
    }

    /// Current retransmission timeout, including backoff.
    pub fn rto(&self) -> Duration {
        self.rto
    }

    /// Oldest unacknowledged byte.
    pub fn snd_una(&self) -> u64 {
        self.snd_una
    }

    /// Next byte to be sent (below the highest byte sent during go-back-N).
    pub fn snd_nxt(&self) -> u64 {
        self.snd_nxt
    }

    /// True during fast recovery.
    pub fn in_recovery(&self) -> bool {
        self.in_recovery
    }

    /// Bytes sent and not cumulatively acknowledged (FlightSize).
    pub fn flight_size(&self) -> u64 {
        self.snd_max - self.snd_una
    }

    // ---- ACK processing -------------------------------------------------

    fn has_outstanding(&self) -> bool {
        self.snd_max > self.snd_una || (self.fin_sent && !self.fin_acked)
    }

    /// Moves `snd_una` to `ack`: RTT sample, scoreboard, counters.
    fn advance_una(&mut self, now: Instant, ack: u64) {
        let acked = ack - self.snd_una;
        self.sample_rtt(now, ack);
        if self.cfg.sack {
            let old = self.snd_una;
            let lim = ack.min(self.high_rxt);
            let mut sacked_in_rexmit = 0;
            self.scoreboard.remove_below(ack, |s, e| {
                if s < lim {
                    sacked_in_rexmit += e.min(lim) - s;
                }
            });
            if lim > old {
                // Unsacked bytes below HighRxt were all retransmitted.
                self.retrans_out = self
                    .retrans_out
                    .saturating_sub((lim - old).saturating_sub(sacked_in_rexmit));
            }
        }
        self.snd_una = ack;
        self.snd_nxt = self.snd_nxt.max(ack);
        self.high_rxt = self.high_rxt.max(ack);
        self.stats.bytes_acked += acked;
        //= RFC 6298 §5
        //# Note that after retransmitting, once a new RTT measurement is
        //# obtained (which can only happen when new data has been sent and
        //# acknowledged), the computations outlined in Section 2 are performed,
        //# including the computation of RTO, which may result in "collapsing"
        //# RTO back down after it has been subject to exponential back off
        //# (rule 5.5).
        // Like Linux and ns-3 we collapse the backoff on any ACK of new data,
        // not only on a fresh sample.
        if self.backoff > 0 {
            self.backoff = 0;
            self.rto = self.computed_rto();
        }
    }

    /// Adds a SACK block to the scoreboard; returns the newly SACKed bytes.
    fn record_sack(&mut self, s: u64, e: u64) -> u64 {
        let s = s.max(self.snd_una);
        let e = e.min(self.snd_max);
        if s >= e {
            return 0;
        }
        let h = if self.in_recovery || self.in_loss {
            self.high_rxt
        } else {
            0
        };
        let mut rexmit_sacked = 0;
        let added = self.scoreboard.insert(s, e, |a, b| {
            if a < h {
                rexmit_sacked += b.min(h) - a;
            }
        });
        self.retrans_out = self.retrans_out.saturating_sub(rexmit_sacked);
        added
    }

    fn update_lost_boundary(&mut self) {
        //= RFC 6675 §4
        //# IsLost (SeqNum):
        //# This routine returns whether the given sequence number is
        //# considered to be lost.  The routine returns true when either
        //# DupThresh discontiguous SACKed sequences have arrived above
        //# 'SeqNum' or more than (DupThresh - 1) * SMSS bytes with sequence
        //# numbers greater than 'SeqNum' have been SACKed.
        // The byte rule alone: with full-sized segments it is the same test.
        let threshold = u64::from(self.cfg.dupack_threshold.saturating_sub(1)) * self.mss;
        self.lost_below = self
            .scoreboard
            .point_with_more_than_above(threshold)
            .unwrap_or(self.snd_una)
            .max(self.marked_lost_below)
            .max(self.snd_una);
    }

    /// Unsacked bytes in `[snd_una, lost_below)`.
    fn lost_bytes(&self) -> u64 {
        if self.lost_below <= self.snd_una {
            return 0;
        }
        // Walks the SACKed ranges above `lost_below` only: a few when it
        // comes from IsLost (DupThresh segments), and only those SACKed
        // since the timeout when it is the RTO mark.
        let sacked_below = self.scoreboard.total() - self.scoreboard.total_from(self.lost_below);
        (self.lost_below - self.snd_una).saturating_sub(sacked_below)
    }

    /// RFC 6675 pipe, from counters in `O(1)`.
    fn pipe(&self) -> u64 {
        //= RFC 6675 §4
        //# (a) If IsLost (S1) returns false:
        //#     Pipe is incremented by 1 octet.
        //# (b) If S1 <= HighRxt:
        //#     Pipe is incremented by 1 octet.
        let unsacked = self.flight_size().saturating_sub(self.scoreboard.total());
        unsacked.saturating_sub(self.lost_bytes()) + self.retrans_out
    }

    /// Congestion response to an ACK of new data. Returns whether the
    /// retransmission timer restarts.
    fn on_new_ack(&mut self, ack: u64, acked: u64, grow: bool) -> bool {
        let recover = self.recover.unwrap_or(0);
        if self.in_loss {
            // ns-3 `ProcessAck` in CA_LOSS: slow start on every ACK below
            // `recover`; the ACK reaching it returns to CA_OPEN and counts
            // only the segments above `recover`.
            if ack >= recover {
                self.in_loss = false;
                self.retrans_out = 0;
                self.dupacks = 0;
                self.grow_cwnd(ack - recover);
            } else {
                self.grow_cwnd(acked);
            }
            return true;
        }
        if !self.in_recovery {
            if grow {
                self.grow_cwnd(acked);
            }
            return true;
        }
        if ack >= recover {
            //= RFC 6582 §3.2
            //# Full acknowledgments:
            //# If this ACK acknowledges all of the data up to and including
            //# recover, then the ACK acknowledges all the intermediate segments
            //# sent between the original transmission of the lost segment and
            //# the receipt of the third duplicate ACK.  Set cwnd to either (1)
            //# min (ssthresh, max(FlightSize, SMSS) + SMSS) or (2) ssthresh,
            //# where ssthresh is the value set when fast retransmit was entered,
            //# and where FlightSize in (1) is the amount of data presently
            //# outstanding.
            // Option (2), as ns-3 TcpClassicRecovery::ExitRecovery does.
            self.exit_recovery();
            // ns-3 then calls `IncreaseWindow` for the ACK that ended
            // recovery: one congestion-avoidance step (cwnd == ssthresh).
            if acked >= self.mss {
                self.cwnd += (self.mss * self.mss / self.cwnd).max(1);
            }
            return true;
        }
        if self.cfg.sack {
            // ns-3 (TcpSocketBase::ProcessAck) retransmits the new head on a
            // partial ACK even with SACK; RFC 6675 would wait for IsLost. Do
            // it only if the head was not retransmitted in this recovery.
            if self.snd_una >= self.high_rxt {
                self.forced_rexmit = Some(self.snd_una);
            }
        } else {
            match self.cfg.variant {
                Variant::Reno => {
                    //= RFC 5681 §3.2
                    //# 6.  When the next ACK arrives that acknowledges previously
                    //#     unacknowledged data, a TCP MUST set cwnd to ssthresh (the value
                    //#     set in step 2).  This is termed "deflating" the window.
                    self.exit_recovery();
                    return true;
                }
                Variant::NewReno => {
                    //= RFC 6582 §3.2
                    //# Partial acknowledgments:
                    //# If this ACK does *not* acknowledge all of the data up to and
                    //# including recover, then this is a partial ACK.  In this case,
                    //# retransmit the first unacknowledged segment.  Deflate the
                    //# congestion window by the amount of new data acknowledged by the
                    //# Cumulative Acknowledgment field.  If the partial ACK
                    //# acknowledges at least one SMSS of new data, then add back SMSS
                    //# bytes to the congestion window.
                    self.forced_rexmit = Some(self.snd_una);
                    self.cwnd = self.cwnd.saturating_sub(acked).max(self.mss);
                    if acked >= self.mss {
                        self.cwnd += self.mss;
                    }
                }
            }
        }
        //= RFC 6582 §3.2
        //# For the first partial ACK that arrives
        //# during fast recovery, also reset the retransmit timer.
        let first = self.first_partial_ack;
        self.first_partial_ack = false;
        first
    }

    fn on_dupack(&mut self, ack: u64) {
        if self.in_loss {
            // ns-3 `DupAck` ignores duplicate ACKs in CA_LOSS; RFC 6582 §3.2
            // (via `recover`) forbids a new fast retransmit before the data
            // outstanding at the timeout is acknowledged anyway.
            return;
        }
        self.dupacks += 1;
        if self.in_recovery {
            if !self.cfg.sack {
                //= RFC 5681 §3.2
                //# 4.  For each additional duplicate ACK received (after the third),
                //#     cwnd MUST be incremented by SMSS.
                self.cwnd += self.mss;
            }
            return;
        }
        //= RFC 6582 §3.2
        //# 2) Three duplicate ACKs:
        //# When the third duplicate ACK is received, the TCP sender first
        //# checks the value of recover to see if the Cumulative
        //# Acknowledgment field covers more than recover.  If so, the value
        //# of recover is incremented to the value of the highest sequence
        //# number transmitted by the TCP so far.  The TCP then enters fast
        //# retransmit (step 2 of Section 3.2 of [RFC5681]).  If not, the TCP
        //# does not enter fast retransmit and does not reset ssthresh.
        // `recover` is an exclusive end here, so "covers more than recover"
        // is `ack >= recover` (ns-3: `m_highRxAckMark >= m_recover`). Reno
        // (RFC 5681) has no such check.
        let allowed = match (self.cfg.sack, self.cfg.variant) {
            (false, Variant::Reno) => true,
            _ => self.recover.is_none_or(|r| ack >= r),
        };
        //= RFC 6675 §5
        //# (a) If DupAcks >= DupThresh, go to step (4).
        //# (b) If DupAcks < DupThresh but IsLost (HighACK + 1) returns true --
        //#     indicating at least three segments have arrived above the current
        //#     cumulative acknowledgment point, which is taken to indicate loss
        //#     -- go to step (4).
        let triggered = self.dupacks == self.cfg.dupack_threshold
            || (self.cfg.sack && self.lost_below > self.snd_una);
        if triggered && allowed {
            self.enter_recovery();
        }
    }

    fn enter_recovery(&mut self) {
        self.recover = Some(self.snd_max);
        self.in_recovery = true;
        self.first_partial_ack = true;
        self.stats.fast_retransmits += 1;
        if self.eln_mark {
            // Miyoshi et al. §2.2 (ELN step 3): the loss was on the wireless
            // hop, not congestion: retransmit and keep the window. ssthresh
            // stays; cwnd is inflated by the segments that left the network
            // (as RFC 5681 step 3 does from ssthresh) and restored to its
            // pre-loss value when recovery ends.
            self.stats.eln_recoveries += 1;
            self.eln_cwnd = Some(self.cwnd);
            if self.cfg.sack {
                self.high_rxt = self.snd_una;
                self.retrans_out = 0;
                self.marked_lost_below = self.marked_lost_below.max(self.rexmit_end(self.snd_una));
                self.update_lost_boundary();
            } else {
                self.cwnd += u64::from(self.cfg.dupack_threshold) * self.mss;
            }
            self.forced_rexmit = Some(self.snd_una);
            tracing::trace!(
                snd_una = self.snd_una,
                cwnd = self.cwnd,
                "ELN: retransmit, window kept"
            );
            return;
        }
        if self.cfg.sack {
            // ns-3 `EnterRecovery`: the head counts as lost even if fewer
            // than DupThresh segments above it were SACKed (`MarkHeadAsLost`).
            self.high_rxt = self.snd_una;
            self.retrans_out = 0;
            self.marked_lost_below = self.marked_lost_below.max(self.rexmit_end(self.snd_una));
            self.update_lost_boundary();
            //= RFC 5681 §3.2
            //# 2.  When the third duplicate ACK is received, a TCP MUST set ssthresh
            //#     to no more than the value given in equation (4).
            //= RFC 5681 §3.1
            //# ssthresh = max (FlightSize / 2, 2*SMSS)            (4)
            // Like ns-3 (`TcpNewReno::GetSsThresh(BytesInFlight())`) we halve
            // the RFC 6675 pipe, not FlightSize: pipe <= FlightSize, so this
            // is "no more than" equation (4). It is lower by half the SACKed
            // and lost bytes (about 2 segments after a single loss).
            self.ssthresh = (self.pipe() / 2).max(2 * self.mss);
            //= RFC 6675 §5
            //# (4.2) ssthresh = cwnd = (FlightSize / 2)
            self.cwnd = self.ssthresh;
        } else {
            //= RFC 5681 §3.1
            //# ssthresh = max (FlightSize / 2, 2*SMSS)            (4)
            self.ssthresh = (self.flight_size() / 2).max(2 * self.mss);
            //= RFC 5681 §3.2
            //# 3.  The lost segment starting at SND.UNA MUST be retransmitted and
            //#     cwnd set to ssthresh plus 3*SMSS.
            self.cwnd = self.ssthresh + u64::from(self.cfg.dupack_threshold) * self.mss;
        }
        //= RFC 6675 §5
        //# (4.3) Retransmit the first data segment presumed dropped -- the
        //#       segment starting with sequence number HighACK + 1.
        self.forced_rexmit = Some(self.snd_una);
        tracing::trace!(
            snd_una = self.snd_una,
            snd_max = self.snd_max,
            ssthresh = self.ssthresh,
            "enter fast recovery"
        );
    }

    fn exit_recovery(&mut self) {
        self.in_recovery = false;
        self.dupacks = 0;
        self.cwnd = self.eln_cwnd.take().unwrap_or(self.ssthresh);
        self.retrans_out = 0;
        self.forced_rexmit = None;
    }

    /// ns-3 `TcpNewReno::IncreaseWindow`: slow start adds one SMSS per ACK of
    /// at least a segment, congestion avoidance `SMSS^2 / cwnd` per ACK.
    fn grow_cwnd(&mut self, acked: u64) {
        self.acked_remainder += acked % self.mss;
        let mut segs = acked / self.mss;
        if self.acked_remainder >= self.mss {
            segs += 1;
            self.acked_remainder -= self.mss;
        }
        //= RFC 5681 §3.1
        //# During slow start, a TCP increments cwnd by at most SMSS bytes for
        //# each ACK received that cumulatively acknowledges new data.
        if self.cwnd < self.ssthresh && segs >= 1 {
            self.cwnd += self.mss;
            segs -= 1;
        }
        //= RFC 5681 §3.1
        //# cwnd += SMSS*SMSS/cwnd                     (3)
        if self.cwnd >= self.ssthresh && segs > 0 {
            self.cwnd += (self.mss * self.mss / self.cwnd).max(1);
        }
    }

    // ---- RTT and RTO ----------------------------------------------------

    fn sample_rtt(&mut self, now: Instant, ack: u64) {
        if let Some(front) = self.history.front()
            && !front.retx
            && ack >= front.end
        {
            //= RFC 6298 §3
            //# TCP MUST use Karn's algorithm [KP87] for taking RTT samples.  That
            //# is, RTT samples MUST NOT be made using segments that were
            //# retransmitted (and thus for which it is ambiguous whether the reply
            //# was for the first instance of the packet or a later instance).
            let r = now.saturating_duration_since(front.at);
            self.update_rtt(r);
        }
        while self.history.front().is_some_and(|f| f.end <= ack) {
            self.history.pop_front();
        }
    }

    fn update_rtt(&mut self, r: Duration) {
        match self.srtt {
            None => {
                //= RFC 6298 §2
                //# (2.2) When the first RTT measurement R is made, the host MUST set
                //#
                //#    SRTT <- R
                //#    RTTVAR <- R/2
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            Some(srtt) => {
                //= RFC 6298 §2
                //# RTTVAR <- (1 - beta) * RTTVAR + beta * |SRTT - R'|
                //# SRTT <- (1 - alpha) * SRTT + alpha * R'
                //#
                //# The value of SRTT used in the update to RTTVAR is its value
                //# before updating SRTT itself using the second assignment.  That
                //# is, updating RTTVAR and SRTT MUST be computed in the above
                //# order.
                //#
                //# The above SHOULD be computed using alpha=1/8 and beta=1/4 (as
                //# suggested in [JK88]).
                let diff = srtt.abs_diff(r);
                self.rttvar = (self.rttvar * 3 + diff) / 4;
                self.srtt = Some((srtt * 7 + r) / 8);
            }
        }
        self.backoff = 0;
        self.rto = self.computed_rto();
    }

    /// RFC 6298 §2.3 with the configured bounds; `initial_rto` before any sample.
    fn computed_rto(&self) -> Duration {
        let Some(srtt) = self.srtt else {
            return self.cfg.initial_rto;
        };
        //= RFC 6298 §2
        //# RTO <- SRTT + max (G, K*RTTVAR)
        //#
        //# where K = 4.
        (srtt + CLOCK_GRANULARITY.max(self.rttvar * 4))
            .max(self.cfg.min_rto)
            .min(self.cfg.max_rto)
    }

    fn on_rto(&mut self, now: Instant) {
        self.stats.timeouts += 1;
        tracing::trace!(snd_una = self.snd_una, rto = ?self.rto, "retransmission timeout");
        //= RFC 5681 §3.1
        //# When a TCP sender detects segment loss using the retransmission timer
        //# and the given segment has not yet been resent by way of the
        //# retransmission timer, the value of ssthresh MUST be set to no more
        //# than the value given in equation (4)
        if self.backoff == 0 {
            // With SACK, half the pipe as in ns-3 (`GetSsThresh` of
            // `BytesInFlight()` before the timeout); see `enter_recovery`.
            let in_flight = if self.cfg.sack {
                self.pipe()
            } else {
                self.flight_size()
            };
            self.ssthresh = (in_flight / 2).max(2 * self.mss);
        }
        //= RFC 5681 §3.1
        //# Furthermore, upon a timeout (as specified in [RFC2988]) cwnd MUST be
        //# set to no more than the loss window, LW, which equals 1 full-sized
        //# segment (regardless of the value of IW).
        self.cwnd = self.mss;
        self.in_recovery = false;
        self.eln_cwnd = None;
        self.forced_rexmit = None;
        self.dupacks = 0;
        self.acked_remainder = 0;
        //= RFC 6582 §3.2
        //# 4) Retransmit timeouts:
        //# After a retransmit timeout, record the highest sequence number
        //# transmitted in the variable recover, and exit the fast recovery
        //# procedure if applicable.
        self.recover = Some(self.snd_max);
        self.retrans_out = 0;
        self.high_rxt = self.snd_una;
        if self.cfg.sack {
            //= RFC 6675 §5.1
            //# It has been suggested that, as long as robust tests for
            //# reneging are present, an implementation can retain and use SACK
            //# information across a timeout event [Errata1610].
            // Kept, as ns-3 (`SetSentListLost(false)`) and Linux
            // (`tcp_enter_loss` unless reneging is detected) do: every
            // unSACKed byte sent so far is marked lost and resent through
            // the pipe / NextSeg rules, SACKed data is not resent. This
            // model's receivers never renege.
            self.in_loss = true;
            self.marked_lost_below = self.snd_max;
            self.update_lost_boundary();
        } else {
            // Go-back-N from the oldest unacknowledged byte.
            self.snd_nxt = self.snd_una;
        }
        self.fin_sent = self.fin_acked && self.fin_sent;
        // Nothing sent so far can give an unambiguous RTT sample any more.
        self.history.clear();
        //= RFC 6298 §5
        //# (5.5) The host MUST set RTO <- RTO * 2 ("back off the timer").  The
        //#       maximum value discussed in (2.5) above may be used to provide
        //#       an upper bound to this doubling operation.
        //#
        //# (5.6) Start the retransmission timer, such that it expires after RTO
        //#       seconds (for the value of RTO after the doubling operation
        //#       outlined in 5.5).
        self.backoff += 1;
        self.rto = (self.rto * 2).min(self.cfg.max_rto);
        self.rto_deadline = Some(now + self.rto);
    }

    // ---- Sending --------------------------------------------------------

    /// Window for sending outside SACK recovery: cwnd (inflated in
    /// Reno/NewReno recovery) plus limited transmit, capped by rwnd.
    fn send_window(&self) -> u64 {
        let mut w = self.cwnd;
        if !self.in_recovery && self.dupacks > 0 && self.dupacks < self.cfg.dupack_threshold {
            //= RFC 3042 §2
            //# The congestion window (cwnd) MUST NOT be changed when these new
            //# segments are transmitted.  Assuming that these new segments and the
            //# corresponding ACKs are not dropped, this procedure allows the sender
            //# to infer loss using the standard Fast Retransmit threshold of three
            //# duplicate ACKs [RFC2581].
            // At most cwnd + 2*SMSS outstanding, one new segment per dupack.
            w += u64::from(self.dupacks.min(2)) * self.mss;
        }
        w.min(self.cfg.rwnd)
    }

    /// End of a retransmission starting at `seq`: one SMSS, stopping at the
    /// next SACKed range and at `snd_max`.
    fn rexmit_end(&self, seq: u64) -> u64 {
        let mut end = (seq + self.mss).min(self.snd_max);
        if self.cfg.sack
            && let Some(s) = self.scoreboard.next_start(seq)
        {
            end = end.min(s);
        }
        end
    }

    /// RFC 6675 NextSeg() under the pipe rule.
    fn poll_sack_recovery(&mut self, now: Instant) -> Option<Segment> {
        let window = self.cwnd.min(self.cfg.rwnd);
        let pipe = self.pipe();
        //= RFC 6675 §5
        //# (C) If cwnd - pipe >= 1 SMSS, the sender SHOULD transmit one or more
        //#     segments as follows:
        if window.saturating_sub(pipe) < self.mss {
            return None;
        }
        // First unSACKed byte at or above HighRxt.
        let mut p = self.high_rxt.max(self.snd_una);
        if let Some((_, e)) = self.scoreboard.containing(p) {
            p = e;
        }
        //= RFC 6675 §4
        //# (1) If there exists a smallest unSACKed sequence number 'S2' that
        //#     meets the following three criteria for determining loss, the
        //#     sequence range of one segment of up to SMSS octets starting
        //#     with S2 MUST be returned.
        if p < self.lost_below && p < self.snd_max {
            let end = self.rexmit_end(p);
            return Some(self.emit_retransmission(now, p, end));
        }
        //= RFC 6675 §4
        //# (2) If no sequence number 'S2' per rule (1) exists but there
        //#     exists available unsent data and the receiver's advertised
        //#     window allows, the sequence range of one segment of up to SMSS
        //#     octets of previously unsent data starting with sequence number
        //#     HighData+1 MUST be returned.
        if let Some(seg) = self.poll_new_data(now, pipe, window) {
            return Some(seg);
        }
        //= RFC 6675 §4
        //# (3) If the conditions for rules (1) and (2) fail, but there exists
        //#     an unSACKed sequence number 'S3' that meets the criteria for
        //#     detecting loss given in steps (1.a) and (1.b) above
        //#     (specifically excluding step (1.c)), then one segment of up to
        //#     SMSS octets starting with S3 SHOULD be returned.
        // Rule (4), the rescue retransmission, is not implemented.
        if p < self.snd_max && self.app_limit == self.snd_max {
            let end = self.rexmit_end(p);
            return Some(self.emit_retransmission(now, p, end));
        }
        None
    }

    /// New data at `snd_nxt == snd_max` if `flight + len <= window` and Nagle
    /// allows, or a bare FIN.
    fn poll_new_data(&mut self, now: Instant, flight: u64, window: u64) -> Option<Segment> {
        let avail = self.app_limit - self.snd_nxt;
        if avail == 0 {
            if self.closed && !self.fin_sent && self.snd_nxt == self.app_limit {
                return Some(self.emit_new(now, 0));
            }
            return None;
        }
        let len = avail.min(self.mss);
        if flight + len > window {
            return None;
        }
        let carries_fin = self.closed && self.snd_nxt + len == self.app_limit;
        //= RFC 1122 §4.2.3.4
        //# If there is unacknowledged data (i.e., SND.NXT >
        //# SND.UNA), then the sending TCP buffers all user
        //# data (regardless of the PSH bit), until the
        //# outstanding data has been acknowledged or until
        //# the TCP can send a full-sized segment (Eff.snd.MSS
        //# bytes; see Section 4.2.2.6).
        // Like Linux, a segment carrying FIN is not held.
        if self.cfg.nagle && len < self.mss && self.snd_max > self.snd_una && !carries_fin {
            return None;
        }
        Some(self.emit_new(now, len))
    }

    fn emit_new(&mut self, now: Instant, len: u64) -> Segment {
        let seq = self.snd_nxt;
        let end = seq + len;
        let fin = self.closed && end == self.app_limit;
        self.snd_nxt = end;
        self.snd_max = end;
        if len > 0 {
            self.history.push_back(Sent {
                end,
                at: now,
                retx: false,
            });
        }
        self.fin_sent |= fin;
        self.count_sent(now, len);
        Segment {
            seq,
            len: seg_len(len),
            fin,
            ..Segment::default()
        }
    }

    fn emit_retransmission(&mut self, now: Instant, seq: u64, end: u64) -> Segment {
        let len = end - seq;
        if (self.in_recovery || self.in_loss) && self.cfg.sack {
            self.high_rxt = self.high_rxt.max(end);
            self.retrans_out += len;
        }
        // Karn: mark the transmission covering `seq` as retransmitted.
        let i = self.history.partition_point(|s| s.end <= seq);
        if let Some(s) = self.history.get_mut(i) {
            s.retx = true;
        }
        let fin = self.closed && end == self.app_limit;
        self.fin_sent |= fin;
        self.stats.retransmits += 1;
        self.count_sent(now, len);
        Segment {
            seq,
            len: seg_len(len),
            fin,
            retransmit: true,
            ..Segment::default()
        }
    }

    fn count_sent(&mut self, now: Instant, len: u64) {
        self.stats.segments_sent += 1;
        self.stats.bytes_sent += len;
        //= RFC 6298 §5
        //# (5.1) Every time a packet containing data is sent (including a
        //#       retransmission), if the timer is not running, start it running
        //#       so that it will expire after RTO seconds (for the current value
        //#       of RTO).
        if self.rto_deadline.is_none() {
            self.rto_deadline = Some(now + self.rto);
        }
    }
}

/// A segment length, at most one MSS, as the `u32` of [`Segment::len`].
fn seg_len(len: u64) -> u32 {
    u32::try_from(len).expect("segments are at most one MSS, which is a u32")
}

/// Clock granularity G of RFC 6298 §2; ns-3's `ClockGranularity` default.
const CLOCK_GRANULARITY: Duration = Duration::from_millis(1);
