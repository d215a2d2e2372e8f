//! Block-FEC streams as simulator nodes: a constant-rate source driving a
//! [`BlockSender`] and a sink driving a [`BlockReceiver`], the machines the
//! tunnel runs on real sockets.
//!
//! **Sizes.** Every data packet (source or repair) occupies
//! `packet_size` bytes on the simulated wire, but carries only an 8-byte
//! payload (its data sequence number) through the real sender, code and
//! receiver. Recovery depends on which packets arrive, not on their bytes,
//! so this keeps the FEC logic real while a 180-second, 1 Gbit/s run does
//! not spend its time multiplying kilobytes in GF(2^8). Reports travel at
//! their real size.

use std::time::Duration;

use bytes::Bytes;
use groupwire_proto::block::{BlockReceiver, BlockSender, ReceiverConfig, SenderConfig};
use groupwire_proto::{Bitrate, Instant, Machine, Transmit};

use crate::core::{Ctx, Node, NodeId, Packet, Payload, node_of};
use crate::traffic::UDP_IP_HEADER;

/// A constant-rate application feeding a [`BlockSender`].
#[derive(Debug)]
pub struct BlockSource {
    me: NodeId,
    sender: BlockSender,
    packet_size: u32,
    interval: Duration,
    next_app: Instant,
    stop: Instant,
    next_payload: u64,
    /// Packets the sender refused (rate-limited or queue full).
    pub refused: u64,
}

impl BlockSource {
    /// Sends `rate` worth of `packet_size`-byte packets from `start` to
    /// `stop` through `sender`, which must address its peer by
    /// [`addr_of`](crate::core::addr_of).
    pub fn new(
        me: NodeId,
        sender: BlockSender,
        rate: Bitrate,
        packet_size: u32,
        start: Instant,
        stop: Instant,
    ) -> Self {
        Self {
            me,
            sender,
            packet_size,
            interval: rate.transmit_time(u64::from(packet_size)),
            next_app: start,
            stop,
            next_payload: 0,
            refused: 0,
        }
    }

    /// The sender machine.
    pub fn sender(&self) -> &BlockSender {
        &self.sender
    }

    fn drain(&mut self, ctx: &mut Ctx<'_>) {
        let now = ctx.now();
        while let Some(Transmit { dst, payload, .. }) = self.sender.poll_transmit(now) {
            if let Some(dst) = node_of(dst) {
                ctx.send(Packet::new(
                    self.me,
                    dst,
                    0,
                    self.packet_size,
                    Payload::Datagram(payload),
                ));
            }
        }
    }
}

impl Node for BlockSource {
    fn handle_packet(&mut self, ctx: &mut Ctx<'_>, pkt: Packet) {
        if let Payload::Datagram(d) = &pkt.payload {
            self.sender
                .handle_datagram(ctx.now(), crate::core::addr_of(pkt.src), d);
        }
        self.drain(ctx);
    }

    fn handle_timeout(&mut self, ctx: &mut Ctx<'_>) {
        let now = ctx.now();
        while self.next_app <= now && self.next_app < self.stop {
            let p = Bytes::copy_from_slice(&self.next_payload.to_be_bytes());
            self.next_payload += 1;
            if self.sender.send(now, p).is_err() {
                self.refused += 1;
            }
            self.next_app += self.interval;
            self.drain(ctx);
        }
        self.sender.handle_timeout(now);
        self.drain(ctx);
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let app = (self.next_app < self.stop).then_some(self.next_app);
        match (self.sender.poll_timeout(), app) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// A [`BlockReceiver`] at the far end of a stream.
#[derive(Debug)]
pub struct BlockSink {
    me: NodeId,
    receiver: BlockReceiver,
}

impl BlockSink {
    /// A sink running `cfg` (deliveries are counted, not kept).
    pub fn new(me: NodeId, mut cfg: ReceiverConfig) -> Self {
        cfg.emit_deliveries = false;
        Self {
            me,
            receiver: BlockReceiver::new(cfg),
        }
    }

    /// The receiver machine.
    pub fn receiver(&self) -> &BlockReceiver {
        &self.receiver
    }

    fn drain(&mut self, ctx: &mut Ctx<'_>) {
        let now = ctx.now();
        while let Some(Transmit { dst, payload, .. }) = self.receiver.poll_transmit(now) {
            if let Some(dst) = node_of(dst) {
                let size = u32::try_from(payload.len())
                    .unwrap_or(u32::MAX)
                    .saturating_add(UDP_IP_HEADER);
                ctx.send(Packet::new(
                    self.me,
                    dst,
                    0,
                    size,
                    Payload::Datagram(payload),
                ));
            }
        }
        while self.receiver.poll_event().is_some() {}
    }
}

impl Node for BlockSink {
    fn handle_packet(&mut self, ctx: &mut Ctx<'_>, pkt: Packet) {
        if let Payload::Datagram(d) = &pkt.payload {
            self.receiver
                .handle_datagram(ctx.now(), crate::core::addr_of(pkt.src), d);
        }
        self.drain(ctx);
    }

    fn handle_timeout(&mut self, ctx: &mut Ctx<'_>) {
        self.receiver.handle_timeout(ctx.now());
        self.drain(ctx);
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.receiver.poll_timeout()
    }
}

/// The sender configuration a simulated stream uses toward `peer`.
pub fn stream_sender_config(peer: NodeId, k: usize) -> SenderConfig {
    SenderConfig::new(crate::core::addr_of(peer), k)
}
