//! A packet-level, sans-IO model of one-way bulk TCP: [`TcpSender`] and [`TcpReceiver`].
//!
//! # Model
//!
//! - **Sequence space** is a `u64` byte offset starting at 0 with no
//!   wraparound. There is no handshake: data flows from the first
//!   [`TcpSender::poll_segment`], as with ns-2's one-way TCP agents. The FIN is
//!   a flag on the last data segment (or a zero-length segment if the
//!   application closes after everything was sent) and takes no sequence
//!   space; the receiver echoes `fin: true` on ACKs once it has everything up
//!   to the FIN, and that echo is what [`TcpSender::is_finished`] waits for.
//! - **Segments** are [`Segment`] values, not bytes; [`Segment::wire_len`]
//!   adds [`HEADER_BYTES`] of IP + TCP header. Options (SACK blocks) are not
//!   counted in the size.
//! - **Congestion control** follows ns-3's `TcpNewReno` (RFC 5681 slow start
//!   and congestion avoidance with one increment per ACK) and loss recovery
//!   follows [`Variant`]: Reno (RFC 5681 §3.2), NewReno (RFC 6582) or, with
//!   [`TcpConfig::sack`], RFC 6675 SACK-based recovery with `cwnd = ssthresh`
//!   on entry (ns-3 `TcpClassicRecovery`). Limited transmit (RFC 3042) is on.
//! - **Timers**: one retransmission timer at the sender (RFC 6298) and one
//!   delayed-ACK timer at the receiver (RFC 1122 §4.2.3.2, RFC 5681 §4.2).
//!
//! # Driving the machines
//!
//! Both machines take `now` on every input and never read a clock. After any
//! `handle_*` call or command, drain the outputs (`poll_segment` or
//! `poll_ack` until `None`), then read `poll_timeout` and call
//! `handle_timeout` once that instant is reached. Early or repeated
//! `handle_timeout` calls are harmless no-ops.
//!
//! # Deliberate choices shared with ns-3 3.37 (and where they leave the RFCs)
//!
//! - With SACK, ssthresh on loss is `max(pipe / 2, 2 * SMSS)`, where pipe is
//!   the RFC 6675 estimate (FlightSize minus SACKed and lost bytes, plus
//!   retransmissions in flight) with the head counted as lost, as ns-3's
//!   `TcpNewReno::GetSsThresh(BytesInFlight())` after `MarkHeadAsLost`.
//!   RFC 5681 §3.1 only requires ssthresh to be *no more than*
//!   `max(FlightSize / 2, 2 * SMSS)` and pipe <= FlightSize, so this is
//!   compliant, just lower (about 2 segments after a single loss; Linux's
//!   Reno uses cwnd / 2). On a timeout the pipe before the timeout is halved.
//!   Without SACK, FlightSize / 2.
//! - The SACK scoreboard survives a retransmission timeout: everything
//!   unSACKed is marked lost and resent through the RFC 6675 pipe / NextSeg
//!   rules (cwnd restarting at one segment, slow start per ACK, duplicate
//!   ACKs ignored until `recover` is acknowledged: ns-3's `CA_LOSS`), and
//!   SACKed data is not resent. RFC 6675 §5.1 / RFC 2018 say a sender
//!   SHOULD expunge the scoreboard in case the receiver reneged; ns-3
//!   (`SetSentListLost(false)`) and Linux (`tcp_enter_loss`, unless
//!   reneging is detected) keep it, and this model's receivers never renege
//!   (RFC 6675 §5.1 discusses when keeping it is safe). Without SACK,
//!   go-back-N from the oldest unacknowledged byte.
//! - With SACK, a duplicate ACK is one that SACKs new data (RFC 6675 §2,
//!   ns-3 `isDupack = scoreboardUpdated`), even if it also advances the
//!   cumulative ACK; a pure duplicate without new SACK information (the
//!   answer to a spurious retransmission) neither counts towards DupThresh
//!   nor releases a limited-transmit segment. Consequence, shared with
//!   ns-3 under the default timers: a flow at cwnd 1 with one segment in
//!   flight waits for the 200 ms delayed-ACK timer, the 200 ms minimum RTO
//!   fires first (spuriously), Karn's rule discards the sample, and the
//!   flow can repeat this for seconds at about one segment per 210 ms. The
//!   100 Mbit/s × 10 ms × 100-flow validation cell is dominated by it in
//!   both simulators. RFC 6298's 1 s minimum RTO, or a shorter
//!   delayed-ACK timeout, avoids it.
//! - The ACK that ends fast recovery sets cwnd = ssthresh and then applies
//!   one congestion-avoidance step (ns-3 calls `IncreaseWindow` for it).
//! - SACK options carry up to 4 blocks (RFC 2018 §3: without timestamps 4
//!   fit in 40 option bytes), as ns-3 fills them.
//!
//! # Known differences from ns-3 3.37 (`TcpNewReno` + `TcpClassicRecovery` + SACK)
//!
//! - No handshake: ns-3 takes an RTT sample from the SYN exchange; here the
//!   first sample comes from the first data ACK (initial RTO 1 s either way).
//! - Without SACK, Reno and NewReno inflate cwnd by one SMSS per duplicate
//!   ACK (RFC 5681 §3.2); ns-3 keeps cwnd at ssthresh and instead counts each
//!   duplicate ACK as a SACKed segment in its pipe ("Reno SACK"). Both let
//!   one new segment out per duplicate ACK after the first half window.
//! - Delayed ACKs count segments (ACK every 2nd in-order segment of any
//!   size), as ns-3's `DelAckCount` does, rather than full-sized segments.
//! - [`TcpConfig::nagle`] defaults to on (RFC 1122); ns-3's `TcpNoDelay`
//!   defaults to true (Nagle off). Bulk flows never send sub-MSS segments, so
//!   this only matters for message traffic.
//! - ACK sizes ignore SACK option bytes (ns-3 adds them); irrelevant on an
//!   uncongested reverse path.

mod receiver;
mod scoreboard;
mod sender;
#[cfg(test)]
mod tests;

use std::time::Duration;

pub use receiver::{ReceiverStats, TcpReceiver};
pub use sender::{SenderStats, TcpSender};

/// Bytes of IP (20) and TCP (20) header on every segment.
///
/// Options are not modelled in the size: ns-3 adds SACK option bytes to ACKs,
/// but ACK sizes do not matter on an uncongested reverse path, so they are
/// ignored here. With the default 1460-byte MSS a full segment is a
/// 1500-byte packet.
pub const HEADER_BYTES: u32 = 40;

/// One TCP segment: data (with `len > 0`) from sender to receiver, or a pure
/// ACK (`len == 0`) from receiver to sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Segment {
    /// First byte offset carried (data segments).
    pub seq: u64,
    /// Payload bytes (0 for pure ACKs and a bare FIN).
    pub len: u32,
    /// Cumulative ACK: the next byte the receiver expects. Valid on ACKs.
    pub ack: u64,
    /// SACK blocks `[start, end)`, most recent first (RFC 2018); only the
    /// first `sack_len` entries are valid. Four fit in the 40 option bytes
    /// without timestamps (RFC 2018 §3), as ns-3 sends them.
    pub sack: [(u64, u64); 4],
    /// Number of valid entries in `sack`.
    pub sack_len: u8,
    /// On data: this segment ends the stream. On an ACK: the receiver has
    /// everything up to and including the FIN.
    pub fin: bool,
    /// This data segment is a retransmission (for tracing and metrics only).
    pub retransmit: bool,
    /// On an ACK: Explicit Loss Notification (Balakrishnan & Katz; Miyoshi
    /// et al. §2.2). A base station sets it on a duplicate ACK for a segment
    /// it forwarded and the wireless hop lost, so a sender with
    /// [`TcpConfig::eln`] retransmits without treating the loss as
    /// congestion.
    pub eln: bool,
}

impl Segment {
    /// Bytes on the wire: payload plus [`HEADER_BYTES`].
    pub fn wire_len(&self) -> u32 {
        self.len + HEADER_BYTES
    }

    /// The valid SACK blocks.
    pub fn sack_blocks(&self) -> &[(u64, u64)] {
        &self.sack[..usize::from(self.sack_len).min(self.sack.len())]
    }
}

/// Loss recovery without SACK. With [`TcpConfig::sack`] on, recovery is
/// RFC 6675 (pipe, scoreboard, NextSeg) with NewReno-style cwnd reduction
/// whatever the variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Variant {
    /// RFC 5681 §3.2 fast retransmit / fast recovery: recovery ends on the
    /// first ACK of new data, so several losses in a window usually need
    /// several halvings or a timeout.
    Reno,
    /// RFC 6582: stays in recovery until all data outstanding at entry is
    /// acknowledged, retransmitting one hole per partial ACK (one per RTT).
    NewReno,
}

/// Sender and receiver parameters. [`Default`] matches the ns-3 setup the
/// model is validated against (NewReno, SACK, 1460-byte MSS, IW 10,
/// MinRto 200 ms, delayed ACK 2 segments / 200 ms).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct TcpConfig {
    /// Loss recovery when `sack` is off.
    pub variant: Variant,
    /// Use SACK (RFC 2018) and RFC 6675 loss recovery.
    pub sack: bool,
    /// Sender maximum segment size (SMSS) in payload bytes.
    pub mss: u32,
    /// Initial congestion window in segments (RFC 6928 allows 10).
    pub initial_cwnd: u32,
    /// Initial slow-start threshold in bytes; `None` is infinite (RFC 5681
    /// §3.1 "arbitrarily high"; ns-3's default `UINT32_MAX`).
    pub initial_ssthresh: Option<u64>,
    /// Lower bound on the RTO. RFC 6298 §2.4 says 1 s; Linux uses 200 ms and
    /// the ns-3 validation setup sets `MinRto` to 200 ms, so that is the default.
    pub min_rto: Duration,
    /// RTO before the first RTT sample (RFC 6298 §2.1: 1 s).
    pub initial_rto: Duration,
    /// Upper bound on the backed-off RTO (RFC 6298 §2.5: at least 60 s).
    pub max_rto: Duration,
    /// Delayed-ACK timeout; ACK at least every 2nd segment. `None` ACKs
    /// every segment.
    pub delayed_ack: Option<Duration>,
    /// Nagle's algorithm (RFC 896, RFC 1122 §4.2.3.4).
    pub nagle: bool,
    /// Receiver window in bytes (constant; no flow control is modelled).
    pub rwnd: u64,
    /// Duplicate ACKs that trigger fast retransmit (DupThresh).
    pub dupack_threshold: u32,
    /// Honour ELN marks on duplicate ACKs (Miyoshi et al. §2.2): a fast
    /// retransmit triggered by ELN-marked duplicates keeps ssthresh and
    /// returns cwnd to its value before the loss when recovery ends. A
    /// retransmission timeout still collapses the window (neither paper
    /// changes the timer's response). Off by default: a plain TCP ignores
    /// the bit.
    pub eln: bool,
}

impl Default for TcpConfig {
    fn default() -> Self {
        Self {
            variant: Variant::NewReno,
            sack: true,
            mss: 1460,
            initial_cwnd: 10,
            initial_ssthresh: None,
            min_rto: Duration::from_millis(200),
            initial_rto: Duration::from_secs(1),
            max_rto: Duration::from_secs(60),
            delayed_ack: Some(Duration::from_millis(200)),
            nagle: true,
            rwnd: 64 << 20,
            dupack_threshold: 3,
            eln: false,
        }
    }
}

impl TcpConfig {
    /// The ns-3-matching defaults (same as [`Default`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets [`TcpConfig::variant`].
    pub fn variant(mut self, variant: Variant) -> Self {
        self.variant = variant;
        self
    }

    /// Sets [`TcpConfig::sack`].
    pub fn sack(mut self, sack: bool) -> Self {
        self.sack = sack;
        self
    }

    /// Sets [`TcpConfig::mss`].
    pub fn mss(mut self, mss: u32) -> Self {
        self.mss = mss;
        self
    }

    /// Sets [`TcpConfig::initial_cwnd`] (segments).
    pub fn initial_cwnd(mut self, segments: u32) -> Self {
        self.initial_cwnd = segments;
        self
    }

    /// Sets [`TcpConfig::initial_ssthresh`] (bytes).
    pub fn initial_ssthresh(mut self, bytes: Option<u64>) -> Self {
        self.initial_ssthresh = bytes;
        self
    }

    /// Sets [`TcpConfig::min_rto`].
    pub fn min_rto(mut self, d: Duration) -> Self {
        self.min_rto = d;
        self
    }

    /// Sets [`TcpConfig::initial_rto`].
    pub fn initial_rto(mut self, d: Duration) -> Self {
        self.initial_rto = d;
        self
    }

    /// Sets [`TcpConfig::max_rto`].
    pub fn max_rto(mut self, d: Duration) -> Self {
        self.max_rto = d;
        self
    }

    /// Sets [`TcpConfig::delayed_ack`].
    pub fn delayed_ack(mut self, d: Option<Duration>) -> Self {
        self.delayed_ack = d;
        self
    }

    /// Sets [`TcpConfig::nagle`].
    pub fn nagle(mut self, on: bool) -> Self {
        self.nagle = on;
        self
    }

    /// Sets [`TcpConfig::rwnd`] (bytes).
    pub fn rwnd(mut self, bytes: u64) -> Self {
        self.rwnd = bytes;
        self
    }

    /// Sets [`TcpConfig::dupack_threshold`].
    pub fn dupack_threshold(mut self, n: u32) -> Self {
        self.dupack_threshold = n;
        self
    }

    /// Sets [`eln`](Self::eln).
    pub fn eln(mut self, on: bool) -> Self {
        self.eln = on;
        self
    }
}
