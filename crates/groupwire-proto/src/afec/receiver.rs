//! Receiver-side state of an [`AfecEndpoint`](super::AfecEndpoint): per
//! remote sender, the packet-loss window, per type the MER window and what
//! the controller last asked for, and the anti-amplification budget.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use super::Pending;
use super::mer::MerWindow;
use super::red_rx::RedStream;
use super::robust::LossTracker;
use crate::time::Instant;
use crate::wire::afec::{Entry, MsgType};
use std::time::Duration;

#[derive(Debug)]
pub(super) struct TypeRx {
    pub(super) window: MerWindow,
    /// Messages seen since the last change of code set size.
    pub(super) since_change: u32,
    /// The code set size the sender applies, as far as we know.
    pub(super) current: f64,
    /// Largest size the sender said it can deliver.
    pub(super) cap: Option<f64>,
    /// Messages an INC must wait for (grows when INCs are undone).
    pub(super) inc_gate: u32,
    /// The size the last change left, if it was an INC.
    pub(super) last_inc_from: Option<f64>,
    /// [`Step::Robust`](super::Step::Robust): messages seen since the
    /// controller first asked for a size (`None` before), and the sender's
    /// loss-regime changes it has answered.
    pub(super) controlled: Option<u32>,
    pub(super) seen_changes: u32,
    /// [`Step::Robust`](super::Step::Robust): the window's spread around
    /// its aim.
    pub(super) spread: super::robust::Spread,
}

impl TypeRx {
    pub(super) fn new(window: usize, initial: f64) -> Self {
        Self {
            window: MerWindow::new(window),
            since_change: 0,
            current: initial,
            cap: None,
            inc_gate: 0,
            last_inc_from: None,
            controlled: None,
            seen_changes: 0,
            spread: super::robust::Spread::default(),
        }
    }
}

#[derive(Debug)]
pub(super) struct PeerRx {
    pub(super) addr: Option<SocketAddr>,
    /// Outcome of the last packets by sequence number (lost or not).
    pub(super) packets: MerWindow,
    /// Packets seen from this sender.
    pub(super) packets_seen: u64,
    /// [`Step::Robust`](super::Step::Robust): the fit of `packets` and its
    /// change test.
    pub(super) loss: LossTracker,
    pub(super) types: BTreeMap<MsgType, TypeRx>,
    pub(super) pending: Vec<Pending>,
    pub(super) acks: Vec<Entry>,
    pub(super) next_ctl_seq: u32,
    pub(super) cannot_meet_seq: Option<u32>,
    /// Bytes received from `addr`, and sent to it, since it became the
    /// sender's address (the anti-amplification budget).
    pub(super) bytes_received: u64,
    pub(super) bytes_sent: u64,
    /// RTP/RED framing: which message each block is. `Some` once the
    /// sender's data came as RTP, and then its feedback goes as RTCP.
    pub(super) red: Option<RedStream>,
    /// The smallest (arrival - sender's timestamp) seen, in nanoseconds on
    /// the two clocks: the path's base one-way delay plus the clocks'
    /// offset.
    owd_floor: Option<i128>,
}

impl PeerRx {
    /// How much longer than the fastest packet so far a packet stamped
    /// `sent_at` (on the sender's clock) and arriving `now` took: its
    /// queueing delay, without synchronized clocks (LEDBAT's base-delay
    /// idea, RFC 6817 §3.4.2, without the expiry of old minima: a floor
    /// that drifts with the clocks' rates, a few ms an hour at worst).
    pub(super) fn delay_above_floor(&mut self, now: Instant, sent_at: Instant) -> Duration {
        let owd = i128::from(now.as_nanos()) - i128::from(sent_at.as_nanos());
        let floor = self.owd_floor.map_or(owd, |f| f.min(owd));
        self.owd_floor = Some(floor);
        Duration::from_nanos(u64::try_from(owd - floor).unwrap_or(u64::MAX))
    }

    /// `src` sent us `len` bytes as this sender; a new address starts a
    /// new budget, so one that is spoofed inherits nothing.
    pub(super) fn note_address(&mut self, src: SocketAddr, len: usize) {
        if self.addr != Some(src) {
            self.addr = Some(src);
            self.bytes_received = 0;
            self.bytes_sent = 0;
        }
        self.bytes_received += len as u64;
    }

    pub(super) fn new(packet_window: usize) -> Self {
        Self {
            addr: None,
            packets: MerWindow::new(packet_window),
            packets_seen: 0,
            loss: LossTracker::default(),
            types: BTreeMap::new(),
            pending: Vec::new(),
            acks: Vec::new(),
            next_ctl_seq: 0,
            cannot_meet_seq: None,
            bytes_received: 0,
            bytes_sent: 0,
            red: None,
            owd_floor: None,
        }
    }
}
