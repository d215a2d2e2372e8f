//! The data receiver: reassembly, delayed ACKs and SACK blocks.

use std::time::Duration;

use groupwire_proto::Instant;

use super::scoreboard::RangeSet;
use super::{Segment, TcpConfig};

/// Counters kept by a [`TcpReceiver`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReceiverStats {
    /// Data segments received (including duplicates and a bare FIN).
    pub segments_received: u64,
    /// Segments carrying only bytes already received.
    pub duplicate_segments: u64,
    /// Segments that arrived above a gap.
    pub out_of_order_segments: u64,
    /// ACKs returned by [`TcpReceiver::poll_ack`].
    pub acks_sent: u64,
}

/// The receiving half of a one-way TCP connection, as a sans-IO state machine.
///
/// - Inputs: [`handle_segment`](Self::handle_segment),
///   [`handle_timeout`](Self::handle_timeout) (delayed-ACK timer).
/// - Outputs: [`poll_ack`](Self::poll_ack) until `None`, then
///   [`poll_timeout`](Self::poll_timeout).
/// - Getters: [`delivered`](Self::delivered),
///   [`is_complete`](Self::is_complete), [`stats`](Self::stats).
///
/// Out-of-order data is kept as merged ranges (`BTreeMap` start → end), so
/// each segment costs `O(log n)` in the number of holes.
#[derive(Debug)]
pub struct TcpReceiver {
    sack: bool,
    delayed_ack: Option<Duration>,
    /// Next in-order byte expected (RCV.NXT).
    rcv_nxt: u64,
    /// Data received above `rcv_nxt`.
    ooo: RangeSet,
    /// Where the stream ends, once a FIN was seen.
    fin_at: Option<u64>,
    /// Bytes in the blocks reported most recently, newest first (RFC 2018 §4).
    recent: [u64; 4],
    recent_len: usize,
    /// In-order segments not yet acknowledged.
    unacked_segments: u32,
    /// ACKs to emit now.
    acks_owed: u32,
    ack_deadline: Option<Instant>,
    stats: ReceiverStats,
}

impl TcpReceiver {
    /// A receiver expecting byte 0. Uses `sack` and `delayed_ack` from `cfg`.
    pub fn new(cfg: &TcpConfig) -> Self {
        Self {
            sack: cfg.sack,
            delayed_ack: cfg.delayed_ack,
            rcv_nxt: 0,
            ooo: RangeSet::default(),
            fin_at: None,
            recent: [0; 4],
            recent_len: 0,
            unacked_segments: 0,
            acks_owed: 0,
            ack_deadline: None,
            stats: ReceiverStats::default(),
        }
    }

    /// Processes a data segment. Duplicates and overlaps are safe.
    pub fn handle_segment(&mut self, now: Instant, seg: &Segment) {
        self.stats.segments_received += 1;
        let end = seg.seq + u64::from(seg.len);
        if seg.fin {
            self.fin_at = Some(end);
        }
        if seg.len == 0 {
            // A bare FIN (or a stray empty segment): acknowledge it at once.
            self.owe_ack_now();
            return;
        }
        if end <= self.rcv_nxt {
            //= RFC 5681 §4.2
            //# A TCP receiver SHOULD send an immediate duplicate ACK when an out-
            //# of-order segment arrives.
            // An old duplicate (e.g. after a spurious retransmission) also
            // gets an immediate ACK, as RFC 9293 §3.10.7.4 requires.
            self.stats.duplicate_segments += 1;
            self.owe_ack_now();
            return;
        }
        if seg.seq > self.rcv_nxt {
            self.stats.out_of_order_segments += 1;
            if self.ooo.insert(seg.seq, end, |_, _| {}) == 0 {
                self.stats.duplicate_segments += 1;
            }
            self.note_recent(seg.seq);
            self.owe_ack_now();
            return;
        }
        // In order: seq <= rcv_nxt < end.
        let filled_gap = !self.ooo.is_empty();
        self.rcv_nxt = end;
        if filled_gap {
            self.ooo.remove_below(self.rcv_nxt, |_, _| {});
            if let Some((s, e)) = self.ooo.first()
                && s == self.rcv_nxt
            {
                self.rcv_nxt = e;
                self.ooo.remove_below(e, |_, _| {});
            }
            //= RFC 5681 §4.2
            //# Out-of-order data segments SHOULD be acknowledged immediately, in
            //# order to accelerate loss recovery.  To trigger the fast retransmit
            //# algorithm, the receiver SHOULD send an immediate duplicate ACK when
            //# it receives a data segment above a gap in the sequence space.  To
            //# provide feedback to senders recovering from losses, the receiver
            //# SHOULD send an immediate ACK when it receives a data segment that
            //# fills in all or part of a gap in the sequence space.
            self.owe_ack_now();
            return;
        }
        if self.is_complete() {
            // The FIN: ACK at once so the sender can finish (as ns-3 does).
            self.owe_ack_now();
            return;
        }
        let Some(timeout) = self.delayed_ack else {
            self.owe_ack_now();
            return;
        };
        self.unacked_segments += 1;
        //= RFC 5681 §4.2
        //# The delayed ACK algorithm specified in [RFC1122] SHOULD be used by a
        //# TCP receiver.  When using delayed ACKs, a TCP receiver MUST NOT
        //# excessively delay acknowledgments.  Specifically, an ACK SHOULD be
        //# generated for at least every second full-sized segment, and MUST be
        //# generated within 500 ms of the arrival of the first unacknowledged
        //# packet.
        if self.unacked_segments >= 2 {
            self.owe_ack_now();
        } else if self.ack_deadline.is_none() {
            self.ack_deadline = Some(now + timeout);
        }
    }

    /// The ACK to send now, if any: immediately for out-of-order, gap-filling,
    /// duplicate and FIN segments, for every 2nd in-order segment, or when the
    /// delayed-ACK timer fired. Call until `None` after every `handle_*`.
    pub fn poll_ack(&mut self, _now: Instant) -> Option<Segment> {
        if self.acks_owed == 0 {
            return None;
        }
        self.acks_owed -= 1;
        self.unacked_segments = 0;
        self.ack_deadline = None;
        self.stats.acks_sent += 1;
        let mut seg = Segment {
            ack: self.rcv_nxt,
            fin: self.is_complete(),
            ..Segment::default()
        };
        if self.sack {
            self.fill_sack(&mut seg);
        }
        Some(seg)
    }

    /// Delayed-ACK timer. Early or repeated calls are no-ops.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.ack_deadline.is_some_and(|d| now >= d) {
            self.ack_deadline = None;
            self.owe_ack_now();
        }
    }

    /// When [`handle_timeout`](Self::handle_timeout) must be called: the
    /// delayed-ACK deadline, if armed.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.ack_deadline
    }

    /// In-order bytes delivered to the application so far. Data above a hole
    /// is not counted until the hole is filled (head-of-line blocking).
    pub fn delivered(&self) -> u64 {
        self.rcv_nxt
    }

    /// True once the FIN was received and everything before it delivered.
    pub fn is_complete(&self) -> bool {
        self.fin_at.is_some_and(|f| f <= self.rcv_nxt)
    }

    /// Counters.
    pub fn stats(&self) -> &ReceiverStats {
        &self.stats
    }

    fn owe_ack_now(&mut self) {
        self.acks_owed += 1;
        self.ack_deadline = None;
    }

    fn note_recent(&mut self, seq: u64) {
        let n = self.recent.len();
        self.recent.copy_within(0..n - 1, 1);
        self.recent[0] = seq;
        self.recent_len = (self.recent_len + 1).min(self.recent.len());
    }

    fn fill_sack(&mut self, seg: &mut Segment) {
        //= RFC 2018 §4
        //# * The first SACK block (i.e., the one immediately following the
        //#   kind and length fields in the option) MUST specify the contiguous
        //#   block of data containing the segment which triggered this ACK,
        //#   unless that segment advanced the Acknowledgment Number field in
        //#   the header.  This assures that the ACK with the SACK option
        //#   reflects the most recent change in the data receiver's buffer
        //#   queue.
        //#
        //# * The SACK option SHOULD be filled out by repeating the most
        //#   recently reported SACK blocks (based on first SACK blocks in
        //#   previous SACK options) that are not subsets of a SACK block
        //#   already included in the SACK option being constructed.
        let mut n = 0;
        for i in 0..self.recent_len {
            let r = self.recent[i];
            let Some(block) = self.ooo.containing(r) else {
                continue;
            };
            if seg.sack[..n].contains(&block) {
                continue;
            }
            seg.sack[n] = block;
            n += 1;
            if n == seg.sack.len() {
                break;
            }
        }
        // Keep one representative byte per reported block, newest first.
        for i in 0..n {
            self.recent[i] = seg.sack[i].0;
        }
        self.recent_len = n;
        seg.sack_len = u8::try_from(n).expect("at most 4 SACK blocks");
    }
}
