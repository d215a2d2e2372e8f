//! Sender-side state of an [`AfecEndpoint`](super::AfecEndpoint): per
//! peer, the recent messages still owed copies, the code set size in force
//! per type, the rate-cap token bucket and the control entries awaiting
//! acknowledgement.

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;

use super::Pending;
use crate::time::Instant;
use crate::wire::afec::{Entry, MsgType};

#[derive(Debug)]
pub(super) struct Hist {
    pub(super) msg_type: MsgType,
    pub(super) index: u32,
    pub(super) payload: Bytes,
    pub(super) first_sent: Instant,
    /// Packets this message still has to go out in.
    pub(super) remaining: u8,
    /// RTP/RED framing: the message's RTP timestamp (when it was sampled).
    pub(super) rtp_ts: u32,
    /// RTP/RED framing: the sequence number of the packet that first
    /// carried it (as its primary); a flush re-sends that packet.
    pub(super) rtp_seq: u16,
}

#[derive(Debug)]
pub(super) struct TypeTx {
    /// Code set size in force.
    pub(super) size: f64,
    /// Error-diffusion accumulator for the fractional part.
    pub(super) acc: f64,
    pub(super) applied_seq: Option<u32>,
    /// Since when the size in force has not fit (MTU or rate cap), if it
    /// does not.
    pub(super) unmet_since: Option<Instant>,
}

impl TypeTx {
    pub(super) fn new(size: f64) -> Self {
        Self {
            size,
            acc: 0.0,
            applied_seq: None,
            unmet_since: None,
        }
    }

    /// Copies for the next message: `floor(n)` plus one for a share of
    /// messages equal to the fractional part, spread evenly (error
    /// diffusion, no randomness): n = 2.4 sends 40% of messages three times.
    pub(super) fn next_requirement(&mut self) -> u8 {
        let whole = self.size.floor();
        self.acc += self.size - whole;
        let extra = if self.acc >= 1.0 - 1e-9 {
            self.acc -= 1.0;
            1.0
        } else {
            0.0
        };
        (whole + extra).clamp(1.0, 255.0) as u8
    }
}

#[derive(Debug)]
pub(super) struct PeerTx {
    pub(super) types: BTreeMap<MsgType, TypeTx>,
    /// Oldest at the front.
    pub(super) history: VecDeque<Hist>,
    pub(super) next_seq: u32,
    pub(super) flush_at: Option<Instant>,
    /// Rate-cap token bucket, bytes.
    pub(super) tokens: f64,
    refilled: Option<Instant>,
    pub(super) pending: Vec<Pending>,
    pub(super) acks: Vec<Entry>,
    pub(super) next_ctl_seq: u32,
    /// The code set size of the last request for every type at once
    /// ([`MsgType::ANY`], from an RTP/RED receiver), which types this peer
    /// has not sent yet start with; and that request's sequence.
    pub(super) any_size: Option<f64>,
    pub(super) any_applied_seq: Option<u32>,
}

impl PeerTx {
    pub(super) fn new() -> Self {
        Self {
            types: BTreeMap::new(),
            history: VecDeque::new(),
            next_seq: 0,
            flush_at: None,
            tokens: 0.0,
            refilled: None,
            pending: Vec::new(),
            acks: Vec::new(),
            next_ctl_seq: 0,
            any_size: None,
            any_applied_seq: None,
        }
    }

    pub(super) fn push_history(&mut self, h: Hist, limit: usize) {
        self.history.push_back(h);
        while self.history.len() > limit {
            self.history.pop_front();
        }
    }

    /// Drops messages at the old end whose requirement is met.
    pub(super) fn trim_history(&mut self) {
        while self.history.front().is_some_and(|h| h.remaining == 0) {
            self.history.pop_front();
        }
    }

    /// Token bucket at `rate`. Its depth is 50 ms of the rate, and at least
    /// 512 bytes so a packet of a few small messages always fits: deep
    /// enough for the jitter of message timing, shallow enough that a burst
    /// of credit cannot queue much on a slow link (512 bytes are 73 ms at
    /// 56 kbit/s).
    pub(super) fn refill(&mut self, now: Instant, rate: Option<crate::units::Bitrate>) {
        let Some(rate) = rate else { return };
        let bytes_per_sec = rate.as_bps() as f64 / 8.0;
        let cap = 512.0_f64.max(bytes_per_sec * 0.05);
        let elapsed = self.refilled.map_or(cap / bytes_per_sec, |t| {
            now.saturating_duration_since(t).as_secs_f64()
        });
        self.tokens = (self.tokens + elapsed * bytes_per_sec).min(cap);
        self.refilled = Some(now);
    }
}
