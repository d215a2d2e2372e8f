//! One channel's mechanisms and its receive order.
//!
//! A [`MechInst`] runs one [`Mechanism`] for one direction of one channel:
//! the sender's half on the side that sends, the receiver's half (made on
//! the first packet) on the other. Its packets are the mechanism's own
//! wire format ([`wire::afec`](crate::wire::afec),
//! [`wire::block`](crate::wire::block), [`wire::rtp`](crate::wire::rtp));
//! the session wraps them in its header. Each application message travels
//! with its number on the channel in front (4 bytes, big-endian), so the
//! receiver drops the second copy of a message that crossed a mechanism
//! switch on both mechanisms, and restores order where it was asked for.

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};

use super::blast::BlastEndpoint;
use super::select::{Provision, afec_size};
use super::{Mechanism, MechanismKind, Qos};
use crate::afec::{AfecConfig, AfecEndpoint, AfecEvent, Mode, Step, TypeQos};
use crate::block::{
    BlockEndpoint, BlockReceiver, BlockSender, ReceiverConfig, SenderConfig, SenderNumbers,
};
use crate::control::FecConfig;
use crate::control::gilbert::RunCounts;
use crate::control::target::TargetConfig;
use crate::wire::afec::MsgType;
use crate::xor::{XorEndpoint, XorEndpointConfig};
use crate::{Bitrate, Instant, Machine};

/// Bytes of the message number in front of every message.
pub const MSG_PREFIX: usize = 4;

/// How long an XOR sender waits with nothing to send before it closes a
/// partial group ([`XorEndpointConfig::close_when_idle`]): half the
/// channel's delay budget (its [`Qos::max_delay`], else its lifetime),
/// or [`XOR_WAIT_WITHOUT_BUDGET`] when it has neither.
///
/// The wait restarts at every message, so at any message gap shorter than
/// it a row of `L` fills: one parity per `L` messages, and the row's first
/// message waits the row's fill time (`L − 1` gaps) for its parity, which
/// may be past the budget (the selector's predictor counts that share).
/// At a gap at or above it every message is a group of its own, whose
/// parity (a copy) follows it after the wait: one parity per message,
/// every rebuild in time. Half the budget rather than all of it, so that
/// copy also has time to cross the queue within the budget (Block splits
/// its budget the same way, [`block_controller`]).
pub(super) fn xor_close_wait(qos: &Qos) -> Duration {
    // `Qos::validate` keeps a lifetime at or above the delay budget, so
    // the budget, when there is one, is the shorter.
    qos.max_delay
        .or(qos.lifetime)
        .map_or(XOR_WAIT_WITHOUT_BUDGET, |b| b / 2)
}

/// The block target controller a session's Block sender runs for
/// `target` within `max_delay`: the tunnel's ([`TargetConfig::default`])
/// except that a block may stay open for only half the budget (the
/// margin is the other half), so a rebuilt message's repairs have the
/// rest to cross the queue, as an XOR parity has ([`xor_close_wait`]).
///
/// One configuration for the sender and the selector's predictor (which
/// calls this too), so both work with the same block length: the
/// controller chooses `k` for the blocks the sender actually closes.
/// Until they shared it, the sender closed every block at half the budget
/// while its controller, and the predictor, chose `k` for 90% of it: at
/// the tele-immersion camera's 250 messages a second every block closed
/// at 7 of the 12 messages the code was chosen for and took the repairs
/// of a short block, about twice the predicted overhead at 2% loss. The
/// half budget is kept rather than the 90% because the channel's deadline
/// counts queueing too: a block filling for 45 ms of a 50 ms budget
/// leaves its rebuilt messages late behind any queue.
pub(super) fn block_controller(target: f64, max_delay: Duration) -> TargetConfig {
    TargetConfig {
        target,
        max_delay,
        margin: Some(max_delay - max_delay / 2),
        ..TargetConfig::default()
    }
}

/// Where a channel's next XOR and Block senders start their numbers. The
/// peer keeps one receiver per mechanism kind for the channel (the wire
/// names only the kind), so a new sender of a kind continues the last
/// one's numbers ([`MechInst::hand_on`]): one restarting at 0 looked to
/// the receiver like packets it had already seen, and after a switch
/// between two layouts or targets of one mechanism nothing more arrived.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Numbering {
    /// The RTP sequence number of the next XOR media packet.
    pub(super) xor_seq: u16,
    /// The next Block sender's numbers.
    pub(super) block: SenderNumbers,
}

/// Why a mechanism refused a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum MechRefused {
    /// Larger than the mechanism can carry in one datagram.
    TooLarge {
        /// The message's size.
        len: usize,
        /// The most it takes.
        max: usize,
    },
    /// Its queue is full.
    Full,
}

/// One mechanism's state for one direction of one channel.
#[derive(Debug)]
pub(super) enum MechInst {
    Plain {
        out: VecDeque<Bytes>,
        delivered: VecDeque<(Bytes, bool)>,
    },
    Afec(Box<AfecEndpoint>),
    Xor(Box<XorEndpoint>),
    Block(Box<BlockEndpoint>),
    Blast(Box<BlastEndpoint>),
}

/// Largest message a plain datagram carries: the session leaves `room`.
fn prefixed(msg: u32, payload: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(MSG_PREFIX + payload.len());
    b.put_u32(msg);
    b.put_slice(payload);
    b.freeze()
}

/// The share of its `k` at which the first block of the channel with id
/// `id` closes ([`SenderConfig::first_block_share`]): `1 − frac(id ·
/// φ⁻¹)`, a Weyl sequence, which spreads however many channels evenly
/// over the block (0 gives 1: a whole block).
fn first_block_share(id: u32) -> f64 {
    const GOLDEN: f64 = 0.618_033_988_749_894_8;
    1.0 - (f64::from(id) * GOLDEN).fract()
}

/// What a new sending instance starts from.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Start {
    /// The resource monitor's loss fits of the path, slow then fast: an
    /// AFEC sender's first code set size, and a Block sender's
    /// controller's prior ([`TargetConfig::prior`]); `None`: their own.
    pub fits: Option<[RunCounts; 2]>,
    /// The most repairs per source a Block sender may spend
    /// ([`TargetConfig::max_overhead`]); `None`: its controller's bound.
    pub max_overhead: Option<f64>,
    /// The channel's id: where a Block sender's first block closes
    /// ([`first_block_share`]), so a peer's channels on Block, sent to in
    /// turn, do not all close their blocks (and encode their repairs) in
    /// one turn.
    pub id: u32,
    /// A Blast sender's first rate; `None`: [`DEFAULT_BLAST_RATE`].
    pub rate: Option<Bitrate>,
}

/// A Blast sender's first rate when neither the QoS nor the monitor gives
/// one: 10 Mbit/s, and the adaptive rate comes down from there after a
/// lossy blast ([`crate::rbudp::RateControl::adaptive`]).
pub const DEFAULT_BLAST_RATE: Bitrate = Bitrate::mbps(10);

impl MechInst {
    /// A fresh instance of `m` toward `peer`; `room` is the bytes a
    /// mechanism packet may take (the datagram less the session header and
    /// seal). `None` for the stream mechanisms, which the session runs
    /// itself. An XOR sender closes a partial group once nothing was sent
    /// for [`xor_close_wait`]`(qos)` (half the delay budget; 1 s without
    /// one), so its groups fill at the channel's message rate. XOR and
    /// Block senders start their numbers at `from`; AFEC and Block start
    /// from what `start` says of the path.
    pub(super) fn new(
        m: &Mechanism,
        qos: &Qos,
        peer: SocketAddr,
        room: usize,
        from: &Numbering,
        start: Start,
    ) -> Option<Self> {
        let Start {
            fits,
            max_overhead,
            id,
            rate,
        } = start;
        Some(match *m {
            Mechanism::Plain => Self::Plain {
                out: VecDeque::new(),
                delivered: VecDeque::new(),
            },
            Mechanism::Afec { lo, hi } => {
                // Start at the size the selector predicted on (on the
                // monitor's fit of the whole path: the channel's own
                // packets, spread among the others', see shorter bursts,
                // so this errs on the side of copies and the controller
                // steps down). From size 1, the feedback took seconds to
                // climb to the band on a bursty path, and the selector
                // had switched for a loss the channel did not see then.
                let initial_size = fits.map_or(1.0, |f| {
                    afec_size(&f[0].model(), lo, hi, Provision::DEFAULT.afec_max_size)
                });
                let tq = TypeQos {
                    mer_min: lo,
                    mer_max: hi,
                    initial_size,
                    lifetime: qos.lifetime,
                };
                // The robust fractional controller (issue 15's
                // `afec-robust`): the paper's whole steps cannot hold a
                // band narrower than one step's change of MER and flap
                // between sizes (NAK, INC, NAK) on a steady channel.
                let cfg = AfecConfig::new(0)
                    .mode(Mode::Adaptive)
                    .step(Step::Robust)
                    .default_qos(tq)
                    .mtu(room);
                let mut ep = AfecEndpoint::new(cfg).ok()?;
                ep.add_peer(peer);
                Self::Afec(Box::new(ep))
            }
            Mechanism::Xor(layout) => {
                let mut cfg = XorEndpointConfig::new(peer, layout);
                cfg.max_datagram = room;
                // Not the endpoint's 2 ms (the tunnel's block wait): at
                // the session's message rates that closed a group after
                // every message, one parity each whatever the layout.
                cfg.close_when_idle = Some(xor_close_wait(qos));
                // The receiving half is made from the mechanism's kind
                // alone (the wire names no layout), so it takes whatever
                // layout the parity says it has.
                cfg.any_layout = true;
                cfg.first_seq = from.xor_seq;
                Self::Xor(Box::new(XorEndpoint::new(cfg).ok()?))
            }
            Mechanism::Block { target, max_delay } => {
                let mut s = SenderConfig::new(peer, 16);
                let base = block_controller(target, max_delay);
                let ctl = TargetConfig {
                    prior: fits,
                    max_overhead: max_overhead.map_or(base.max_overhead, |b| {
                        b.clamp(f64::MIN_POSITIVE, base.max_overhead)
                    }),
                    ..base
                };
                s.controller = FecConfig::Target(ctl);
                s.pacing = false;
                // The controller's own bound, stated: its `k` fills in it.
                s.max_block_wait = Some(ctl.block_budget());
                s.max_datagram = room;
                s.first = from.block;
                s.first_block_share = first_block_share(id);
                let r = ReceiverConfig {
                    ordered: false,
                    max_wait: max_delay.max(Duration::from_millis(50)) * 4,
                    max_blocks: 64,
                    max_symbol: room.saturating_sub(crate::wire::block::DATA_HEADER_LEN),
                    ..ReceiverConfig::default()
                };
                Self::Block(Box::new(BlockEndpoint::new(
                    BlockSender::new(s),
                    BlockReceiver::new(r),
                )))
            }
            Mechanism::Blast => Self::Blast(Box::new(BlastEndpoint::new(
                peer,
                room,
                rate.unwrap_or(DEFAULT_BLAST_RATE),
            )?)),
            Mechanism::Reliable | Mechanism::Striped { .. } => return None,
        })
    }

    pub(super) fn kind(&self) -> MechanismKind {
        match self {
            Self::Plain { .. } => MechanismKind::Plain,
            Self::Afec(_) => MechanismKind::Afec,
            Self::Xor(_) => MechanismKind::Xor,
            Self::Block(_) => MechanismKind::Block,
            Self::Blast(_) => MechanismKind::Blast,
        }
    }

    /// Hands a Block sender's controller the monitor's fit of the path
    /// once it is ready ([`crate::control::FecController::late_prior`]);
    /// `true` if it adopted it.
    pub(super) fn late_prior(&mut self, fits: [RunCounts; 2]) -> bool {
        match self {
            Self::Block(ep) => ep.sender.late_prior(fits),
            Self::Plain { .. } | Self::Afec(_) | Self::Xor(_) | Self::Blast(_) => false,
        }
    }

    /// Records in `n` where a successor of this one's kind starts.
    pub(super) fn hand_on(&self, n: &mut Numbering) {
        match self {
            Self::Xor(ep) => n.xor_seq = ep.next_seq(),
            Self::Block(ep) => n.block = ep.sender.successor_numbers(),
            Self::Plain { .. } | Self::Afec(_) | Self::Blast(_) => {}
        }
    }

    /// Hands message number `msg` to the mechanism.
    pub(super) fn send(
        &mut self,
        now: Instant,
        msg: u32,
        payload: &[u8],
        room: usize,
    ) -> Result<(), MechRefused> {
        let data = prefixed(msg, payload);
        let too_large = |max: usize| MechRefused::TooLarge {
            len: payload.len(),
            max: max.saturating_sub(MSG_PREFIX),
        };
        match self {
            Self::Plain { out, .. } => {
                if data.len() > room {
                    return Err(too_large(room));
                }
                out.push_back(data);
                Ok(())
            }
            Self::Afec(ep) => ep
                .send(now, MsgType(0), data)
                .map(|_| ())
                .map_err(|e| match e {
                    crate::afec::SendError::TooLarge { max, .. } => too_large(max),
                    _ => MechRefused::Full,
                }),
            Self::Xor(ep) => ep.send(now, &data).map_err(|e| too_large(e.max)),
            Self::Block(ep) => ep.sender.send(now, data).map(|_| ()).map_err(|e| match e {
                crate::block::SendError::TooLarge { max, .. } => too_large(max),
                _ => MechRefused::Full,
            }),
            // One transfer per message, of any size (the receiver refuses
            // one past its bounds).
            Self::Blast(ep) => {
                ep.send(now, msg, payload);
                Ok(())
            }
        }
    }

    /// A packet of this mechanism from the peer.
    pub(super) fn handle(&mut self, now: Instant, peer: SocketAddr, pkt: &[u8]) {
        match self {
            Self::Plain { delivered, .. } => {
                delivered.push_back((Bytes::copy_from_slice(pkt), false));
            }
            Self::Afec(ep) => ep.handle_datagram(now, peer, pkt),
            Self::Xor(ep) => ep.handle_datagram(now, peer, pkt),
            Self::Block(ep) => ep.handle_datagram(now, peer, pkt),
            Self::Blast(ep) => ep.handle_datagram(now, pkt),
        }
    }

    /// A control frame of this mechanism from the peer (for the sending
    /// half when `to_sender`); a receiving half takes a new transfer of at
    /// most `max_size` bytes. Only Blast has any: others count nothing and
    /// drop it.
    pub(super) fn handle_frame(
        &mut self,
        now: Instant,
        to_sender: bool,
        msg: &[u8],
        max_size: u64,
    ) {
        if let Self::Blast(ep) = self {
            ep.handle_frame(now, to_sender, msg, max_size);
        }
    }

    /// The next control frame for the peer.
    pub(super) fn poll_frame(&mut self) -> Option<Bytes> {
        match self {
            Self::Blast(ep) => ep.poll_frame(),
            _ => None,
        }
    }

    /// Whether a replaced instance still has work that outlasts the drain:
    /// a Blast transfer queued, sent or received.
    pub(super) fn busy(&self) -> bool {
        matches!(self, Self::Blast(ep) if ep.busy())
    }

    /// Payload bytes a sending half holds that are not yet delivered
    /// (Blast's queued and current transfers; other mechanisms send at
    /// once, or hold what they may resend, not counted).
    pub(super) fn queued(&self) -> usize {
        match self {
            Self::Blast(ep) => ep.queued(),
            _ => 0,
        }
    }

    /// Payload bytes a receiving half holds for a transfer under way.
    pub(super) fn held(&self) -> u64 {
        match self {
            Self::Blast(ep) => ep.held(),
            _ => 0,
        }
    }

    /// Messages the sending half gave up on.
    pub(super) fn failed(&self) -> u64 {
        match self {
            Self::Blast(ep) => ep.failed(),
            _ => 0,
        }
    }

    pub(super) fn handle_timeout(&mut self, now: Instant) {
        match self {
            Self::Plain { .. } => {}
            Self::Afec(ep) => ep.handle_timeout(now),
            Self::Xor(ep) => ep.handle_timeout(now),
            Self::Block(ep) => ep.handle_timeout(now),
            Self::Blast(ep) => ep.handle_timeout(now),
        }
    }

    /// The next mechanism packet to send.
    pub(super) fn poll_transmit(&mut self, now: Instant) -> Option<Bytes> {
        match self {
            Self::Plain { out, .. } => out.pop_front(),
            Self::Afec(ep) => ep.poll_transmit(now).map(|t| t.payload),
            Self::Xor(ep) => ep.poll_transmit(now).map(|t| t.payload),
            Self::Block(ep) => ep.poll_transmit(now).map(|t| t.payload),
            Self::Blast(ep) => ep.poll_transmit(now),
        }
    }

    /// The next delivered message, number in front, and whether the
    /// mechanism rebuilt it.
    pub(super) fn poll_delivery(&mut self) -> Option<(Bytes, bool)> {
        match self {
            Self::Plain { delivered, .. } => delivered.pop_front(),
            Self::Afec(ep) => loop {
                match ep.poll_event()? {
                    AfecEvent::Delivered(d) => return Some((d.payload, d.recovered)),
                    _ => continue,
                }
            },
            Self::Xor(ep) => ep.poll_event().map(|d| (d.payload, d.recovered.is_some())),
            Self::Block(ep) => ep.poll_event().map(|d| (d.payload, d.recovered)),
            Self::Blast(ep) => ep.poll_delivery().map(|d| (d, false)),
        }
    }

    pub(super) fn poll_timeout(&self) -> Option<Instant> {
        match self {
            Self::Plain { .. } => None,
            Self::Afec(ep) => ep.poll_timeout(),
            Self::Xor(ep) => ep.poll_timeout(),
            Self::Block(ep) => ep.poll_timeout(),
            Self::Blast(ep) => ep.poll_timeout(),
        }
    }
}

/// Splits a delivered message into its number and the application's bytes.
pub(super) fn split_msg(data: &Bytes) -> Option<(u32, Bytes)> {
    let head: [u8; MSG_PREFIX] = data.get(..MSG_PREFIX)?.try_into().ok()?;
    Some((u32::from_be_bytes(head), data.slice(MSG_PREFIX..)))
}

/// Message numbers seen, for dropping second copies (the anti-replay
/// window of RFC 4303 §3.4.3, over message numbers).
#[derive(Debug, Default)]
pub(super) struct SeenWindow {
    /// Highest number seen, extended to 64 bits.
    top: Option<u64>,
    bits: VecDeque<bool>,
}

/// Message numbers remembered behind the highest.
pub(super) const SEEN_WINDOW: u64 = 4096;

/// What [`SeenWindow::check`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Seen {
    /// New: deliver it, with its extended number.
    New(u64),
    /// Delivered before.
    Duplicate,
    /// Older than the window: cannot tell, dropped.
    TooOld,
}

impl SeenWindow {
    /// Checks and marks `msg` (a wrapping `u32`).
    pub(super) fn check(&mut self, msg: u32) -> Seen {
        let Some(top) = self.top else {
            self.top = Some(u64::from(msg));
            self.bits.push_front(true);
            // A channel numbers its messages from 0, so those below the
            // first one seen may still come (a long Blast transfer
            // overtaken by a short message on the stream).
            if u64::from(msg) < SEEN_WINDOW {
                self.bits.extend(std::iter::repeat_n(false, msg as usize));
            }
            return Seen::New(u64::from(msg));
        };
        // Extend toward the top (RFC 3550 A.1's idea, for 32 bits).
        let delta = msg.wrapping_sub(top as u32) as i32;
        let ext = top.wrapping_add_signed(i64::from(delta));
        if delta > 0 {
            for _ in 0..delta.min(SEEN_WINDOW as i32) {
                self.bits.push_front(false);
            }
            self.bits.truncate(SEEN_WINDOW as usize);
            self.top = Some(ext);
            self.bits[0] = true;
            return Seen::New(ext);
        }
        let back = (-i64::from(delta)) as u64;
        if back >= SEEN_WINDOW || ext > top {
            return Seen::TooOld;
        }
        match self.bits.get_mut(back as usize) {
            Some(b) if *b => Seen::Duplicate,
            Some(b) => {
                *b = true;
                Seen::New(ext)
            }
            None => {
                // Before the first message seen: older than what we know.
                Seen::TooOld
            }
        }
    }
}

/// In-order delivery for a channel that asked for it: messages wait for
/// the ones before them, up to a bound.
#[derive(Debug, Default)]
pub(super) struct Reorder {
    next: Option<u64>,
    held: BTreeMap<u64, (Bytes, MechanismKind, bool)>,
}

impl Reorder {
    /// Takes message `n`; returns what can now be delivered, in order. When
    /// more than `limit` wait, the oldest gap is given up (counted by the
    /// caller as `skipped`).
    pub(super) fn push(
        &mut self,
        n: u64,
        msg: (Bytes, MechanismKind, bool),
        limit: usize,
        skipped: &mut u64,
    ) -> Vec<(Bytes, MechanismKind, bool)> {
        let next = *self.next.get_or_insert(n);
        if n < next {
            return Vec::new();
        }
        self.held.insert(n, msg);
        let mut out = Vec::new();
        let mut next = next;
        loop {
            if let Some(m) = self.held.remove(&next) {
                out.push(m);
                next += 1;
            } else if self.held.len() > limit {
                let first = *self.held.keys().next().expect("nonempty");
                *skipped += first - next;
                next = first;
            } else {
                break;
            }
        }
        self.next = Some(next);
        out
    }
}

/// [`xor_close_wait`] for a channel without a delay budget or lifetime:
/// nothing such a channel receives is late, so the wait only has to let
/// groups fill, which 1 s does for any channel sending at least once a
/// second, while the messages before a longer pause still get their
/// parity within a second.
const XOR_WAIT_WITHOUT_BUDGET: Duration = Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seen_window_drops_second_copies_across_wrap() {
        let mut w = SeenWindow::default();
        assert_eq!(w.check(u32::MAX - 1), Seen::New(u64::from(u32::MAX - 1)));
        assert_eq!(w.check(1), Seen::New(u64::from(u32::MAX) + 2));
        assert_eq!(w.check(u32::MAX), Seen::New(u64::from(u32::MAX)));
        assert_eq!(w.check(u32::MAX), Seen::Duplicate);
        assert_eq!(w.check(1), Seen::Duplicate);
        assert_eq!(w.check(0), Seen::New(u64::from(u32::MAX) + 1));
        assert_eq!(w.check(u32::MAX - 2), Seen::TooOld);
        assert_eq!(
            w.check(1 + SEEN_WINDOW as u32 + 5),
            Seen::New(u64::from(u32::MAX) + 2 + SEEN_WINDOW + 5)
        );
        assert_eq!(w.check(1), Seen::TooOld);
    }

    #[test]
    fn reorder_holds_then_releases_in_order_and_gives_up_past_its_bound() {
        let m = |i: u8| (Bytes::from(vec![i]), MechanismKind::Plain, false);
        let mut r = Reorder::default();
        let mut skipped = 0;
        assert_eq!(r.push(0, m(0), 4, &mut skipped).len(), 1);
        assert!(r.push(2, m(2), 4, &mut skipped).is_empty());
        let out = r.push(1, m(1), 4, &mut skipped);
        assert_eq!(out.iter().map(|x| x.0[0]).collect::<Vec<_>>(), [1, 2]);
        for i in 5..10 {
            r.push(i, m(i as u8), 4, &mut skipped);
        }
        assert_eq!(skipped, 2, "3 and 4 given up once 5 wait");
        assert!(r.push(3, m(3), 4, &mut skipped).is_empty(), "too late");
    }
}
