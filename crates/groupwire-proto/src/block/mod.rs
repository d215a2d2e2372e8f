//! Block FEC for high-rate streams (GENEVA, Matsuzono et al. §3.2), as
//! sans-IO machines.
//!
//! The sender groups `k` source packets into a block and adds `Fwnd`
//! Reed-Solomon repair packets, `Fwnd` chosen by a
//! [`FecController`](crate::control::FecController) (GMIAD by default) from
//! the receiver's reports; it spaces all `k + Fwnd` packets evenly over one
//! SYN interval (§3.2.2: `IPG = SYN / (Fwnd + k)`). The receiver rebuilds
//! what the code allows, delivers source packets (at once or in order with
//! a bounded wait), and every SYN reports lost and received packet counts
//! plus an echo for the sender's RTT sample (§3.2.1).
//!
//! - [`BlockSender`]: commands [`send`](BlockSender::send); a [`Machine`]
//!   whose datagram input is the receiver's reports.
//! - [`BlockReceiver`]: a [`Machine`] whose events are [`Delivered`] packets.
//! - [`BlockEndpoint`]: both, for a bidirectional tunnel on one socket.
//!
//! The wire format is in [`crate::wire::block`].
//!
//! # Where we read the paper a particular way
//!
//! - **`k` from the rate.** §3.2.2 takes `k` as the source packets sent in
//!   one SYN at the stream's rate ([`k_for_rate`]); the sender also accepts
//!   any fixed `k`, and with [`SenderConfig::max_block_wait`] closes a block
//!   early when packets come too slowly (the tunnel), so a low rate never
//!   stalls a block. Such a short block gets `Fwnd` scaled to its size
//!   (`⌈Fwnd · len / k⌉` repairs), keeping the controller's repair ratio.
//! - **Loss counting.** The receiver counts a packet lost when a later
//!   sequence number arrives first (the paper's links do not reorder); a
//!   late packet takes its loss back within the same interval.
//! - **Bursty loss events** (§4.1, "more than three packets are
//!   consecutively lost") are counted by the receiver from sequence gaps.

mod receiver;
mod sender;
#[cfg(test)]
mod tests;

use std::net::SocketAddr;
use std::time::Duration;

pub use self::receiver::{BlockReceiver, Delivery, ReceiverConfig, ReceiverStats};
pub use self::sender::{BlockSender, SendError, SenderConfig, SenderNumbers, SenderStats};
use crate::machine::{Machine, Transmit};
use crate::time::Instant;
use crate::units::{Bitrate, DataSize};
use crate::wire::block::{SYMBOL_PREFIX, symbol_checksum};
use crate::wire::header::{self, Kind};

/// The GENEVA report interval, SYN (§3.2.1: "currently set to 0.01 sec").
pub const DEFAULT_SYN: Duration = Duration::from_millis(10);

/// Source packets per block for a stream of `rate` in packets of `packet`:
/// the packets sent in one `syn` (§3.2.2: 25 Mbit/s of 1500-byte packets
/// in 10 ms gives 20.83, "20 or 21"; we round down), at least 1 and at
/// most 254.
pub fn k_for_rate(rate: Bitrate, packet: DataSize, syn: Duration) -> usize {
    let bits = packet.as_bytes() as f64 * 8.0;
    if bits <= 0.0 {
        return 1;
    }
    let k = (rate.as_bps() as f64 * syn.as_secs_f64() / bits).floor();
    (k as usize).clamp(1, 254)
}

/// What a [`BlockEndpoint`] or [`BlockReceiver`] tells its application.
pub type Delivered = Delivery;

/// Widens a 32-bit wire counter to the 64-bit value nearest `reference`.
pub(crate) fn unwrap32(reference: u64, wire: u32) -> u64 {
    let diff = i64::from(wire.wrapping_sub(reference as u32) as i32);
    reference.saturating_add_signed(diff)
}

/// Writes `payload` as a protected symbol into `symbol`: length, CRC-32,
/// payload, zeros (see [`crate::wire::block`]). `None` if it does not fit.
pub(crate) fn pad_symbol(payload: &[u8], symbol: &mut [u8]) -> Option<()> {
    let len = u16::try_from(payload.len()).ok()?;
    if payload.len() + SYMBOL_PREFIX > symbol.len() {
        return None;
    }
    let (head, rest) = symbol.split_at_mut(SYMBOL_PREFIX);
    head[..2].copy_from_slice(&len.to_be_bytes());
    head[2..].copy_from_slice(&symbol_checksum(payload).to_be_bytes());
    let (body, tail) = rest.split_at_mut(payload.len());
    body.copy_from_slice(payload);
    tail.fill(0);
    Some(())
}

/// The payload of a protected symbol, if its length fits and its CRC-32
/// matches: a rebuilt source is checked before anyone sees it.
pub(crate) fn unpad_symbol(symbol: &[u8]) -> Option<&[u8]> {
    let (head, rest) = symbol.split_first_chunk::<SYMBOL_PREFIX>()?;
    let len = usize::from(u16::from_be_bytes([head[0], head[1]]));
    let crc = u32::from_be_bytes([head[2], head[3], head[4], head[5]]);
    let payload = rest.get(..len)?;
    (symbol_checksum(payload) == crc).then_some(payload)
}

/// Sender and receiver on one socket: data packets go to the receiver,
/// reports to the sender. Both directions of a tunnel run one each.
#[derive(Debug)]
pub struct BlockEndpoint {
    /// The sending half (toward the peer given at construction).
    pub sender: BlockSender,
    /// The receiving half.
    pub receiver: BlockReceiver,
    poll_sender_first: bool,
}

impl BlockEndpoint {
    /// Both halves.
    pub fn new(sender: BlockSender, receiver: BlockReceiver) -> Self {
        Self {
            sender,
            receiver,
            poll_sender_first: true,
        }
    }
}

impl Machine for BlockEndpoint {
    type Event = Delivery;

    fn handle_datagram(&mut self, now: Instant, src: SocketAddr, data: &[u8]) {
        let kind = header::Packet::new_checked(data)
            .ok()
            .and_then(|p| header::Repr::parse(&p).ok())
            .map(|h| h.kind);
        match kind {
            Some(Kind::BlockReport) => self.sender.handle_datagram(now, src, data),
            // Everything else, malformed input included, is the receiver's
            // to count.
            _ => self.receiver.handle_datagram(now, src, data),
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.sender.handle_timeout(now);
        self.receiver.handle_timeout(now);
    }

    fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
        // Alternate so neither half starves the other.
        self.poll_sender_first = !self.poll_sender_first;
        if self.poll_sender_first {
            self.sender
                .poll_transmit(now)
                .or_else(|| self.receiver.poll_transmit(now))
        } else {
            self.receiver
                .poll_transmit(now)
                .or_else(|| self.sender.poll_transmit(now))
        }
    }

    fn poll_event(&mut self) -> Option<Delivery> {
        self.receiver.poll_event()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        match (self.sender.poll_timeout(), self.receiver.poll_timeout()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}
