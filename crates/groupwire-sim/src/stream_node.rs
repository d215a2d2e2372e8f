//! Runs a [`StreamMachine`] as a simulator node: its UDP datagrams cross
//! the links as packets, as [`MachineNode`](crate::machine_node::MachineNode)'s
//! do, and its control frames ([`Transport::TcpFrame`]) cross the same
//! links on a modelled TCP connection to the peer, so they take the path's
//! delay, queue behind the data at the bottleneck and wait for
//! retransmissions when the path drops a segment.
//!
//! The connection is two one-way connections of the simulator's TCP model
//! (`crate::tcp`, one each way, Nagle off as a control channel sets
//! `TCP_NODELAY`). That model carries byte counts, not bytes: a frame's
//! bytes wait in a queue shared by the two ends ([`stream_pair`]), and the
//! receiving end hands a frame to its machine once TCP has delivered, in
//! order, every byte up to the frame's end (a 4-byte length prefix per
//! frame is counted, as a real framing would send it).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

use bytes::Bytes;
use groupwire_proto::{FRAME_PREFIX, Instant, StreamMachine, Transmit, Transport};

use crate::core::{Ctx, Node, NodeId, Packet, Payload, addr_of, node_of};
use crate::machine_node::marked;
use crate::tcp::{TcpConfig, TcpReceiver, TcpSender};
use crate::traffic::UDP_IP_HEADER;

/// Frames written into one direction of the stream: the stream offset of
/// each frame's end, and its bytes.
type Pipe = Rc<RefCell<VecDeque<(u64, Bytes)>>>;

/// A node driving a [`StreamMachine`] with a TCP control stream to one
/// peer node.
pub struct StreamMachineNode<M: StreamMachine> {
    me: NodeId,
    peer: NodeId,
    machine: M,
    /// Events the machine emitted, with the time they were polled.
    pub events: Vec<(Instant, M::Event)>,
    /// Transmits addressed to something other than the peer or a node.
    pub unroutable: u64,
    tx: TcpSender,
    rx: TcpReceiver,
    out_flow: u32,
    in_flow: u32,
    outbox: Pipe,
    inbox: Pipe,
    written: u64,
    /// Stream bytes reported sent to the machine
    /// ([`StreamMachine::handle_stream_sent`]).
    reported: u64,
    /// A first wake-up, to send what commands given before the run queued.
    kick: Option<Instant>,
}

impl<M: StreamMachine + std::fmt::Debug> std::fmt::Debug for StreamMachineNode<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamMachineNode")
            .field("me", &self.me)
            .field("peer", &self.peer)
            .field("machine", &self.machine)
            .field("events", &self.events.len())
            .finish_non_exhaustive()
    }
}

/// Two nodes, `a` running `ma` and `b` running `mb`, joined by a control
/// stream on TCP `config` (flows `flow` from `a` to `b` and `flow + 1`
/// back). Add both to the simulator with routes between them.
pub fn stream_pair<A: StreamMachine, B: StreamMachine>(
    a: NodeId,
    ma: A,
    b: NodeId,
    mb: B,
    config: &TcpConfig,
    flow: u32,
) -> (StreamMachineNode<A>, StreamMachineNode<B>) {
    let ab: Pipe = Rc::default();
    let ba: Pipe = Rc::default();
    let na = StreamMachineNode::new(
        a,
        b,
        ma,
        config,
        (flow, flow + 1),
        (Rc::clone(&ab), Rc::clone(&ba)),
    );
    let nb = StreamMachineNode::new(b, a, mb, config, (flow + 1, flow), (ba, ab));
    (na, nb)
}

impl<M: StreamMachine> StreamMachineNode<M> {
    /// `flows` and `pipes` are (outgoing, incoming).
    fn new(
        me: NodeId,
        peer: NodeId,
        machine: M,
        config: &TcpConfig,
        (out_flow, in_flow): (u32, u32),
        (outbox, inbox): (Pipe, Pipe),
    ) -> Self {
        Self {
            me,
            peer,
            machine,
            events: Vec::new(),
            unroutable: 0,
            tx: TcpSender::new(config.clone()),
            rx: TcpReceiver::new(config),
            out_flow,
            in_flow,
            outbox,
            inbox,
            written: 0,
            reported: 0,
            kick: Some(Instant::ZERO),
        }
    }

    /// The machine, for reading its state.
    pub fn machine(&self) -> &M {
        &self.machine
    }

    /// The machine, for commands given before the run (the node drains
    /// them at time zero).
    pub fn machine_mut(&mut self) -> &mut M {
        &mut self.machine
    }

    /// The control stream's sender (its retransmissions and timeouts).
    pub fn control_sender(&self) -> &TcpSender {
        &self.tx
    }

    /// Sends what the machine and TCP have, hands over frames TCP has
    /// delivered, and collects events.
    fn drain(&mut self, ctx: &mut Ctx<'_>) {
        let now = ctx.now();
        loop {
            // Frames whose every byte has arrived in order.
            let delivered = self.rx.delivered();
            let ready = {
                let mut inbox = self.inbox.borrow_mut();
                match inbox.front() {
                    Some((end, _)) if *end <= delivered => inbox.pop_front(),
                    _ => None,
                }
            };
            let Some((_, frame)) = ready else { break };
            self.machine.handle_frame(now, addr_of(self.peer), &frame);
            self.flush_machine(ctx);
        }
        self.flush_machine(ctx);
        self.send_segments(ctx);
        // Bytes TCP has sent once have left its queue: the machine may
        // hand over more (a session's stream window), which TCP may send
        // at once.
        loop {
            let sent = (self.tx.snd_una() + self.tx.flight_size()).min(self.written);
            if sent <= self.reported {
                break;
            }
            let bytes = usize::try_from(sent - self.reported).unwrap_or(usize::MAX);
            self.reported = sent;
            self.machine
                .handle_stream_sent(now, addr_of(self.peer), bytes);
            self.flush_machine(ctx);
            self.send_segments(ctx);
        }
    }

    /// TCP's segments and acknowledgements, onto the network.
    fn send_segments(&mut self, ctx: &mut Ctx<'_>) {
        let now = ctx.now();
        while let Some(seg) = self.tx.poll_segment(now) {
            let pkt = Packet::new(
                self.me,
                self.peer,
                self.out_flow,
                seg.wire_len(),
                Payload::Tcp(seg),
            );
            ctx.send(pkt);
        }
        while let Some(ack) = self.rx.poll_ack(now) {
            let pkt = Packet::new(
                self.me,
                self.peer,
                self.in_flow,
                ack.wire_len(),
                Payload::Tcp(ack),
            );
            ctx.send(pkt);
        }
    }

    /// The machine's transmits (datagrams out, frames onto the stream)
    /// and events.
    fn flush_machine(&mut self, ctx: &mut Ctx<'_>) {
        let now = ctx.now();
        while let Some((
            Transmit {
                dst,
                transport,
                payload,
            },
            dscp,
        )) = self.machine.poll_transmit_marked(now)
        {
            match transport {
                Transport::TcpFrame if node_of(dst) == Some(self.peer) => {
                    self.written += (payload.len() + FRAME_PREFIX) as u64;
                    self.tx.write(now, (payload.len() + FRAME_PREFIX) as u64);
                    self.outbox.borrow_mut().push_back((self.written, payload));
                }
                Transport::Udp => {
                    let Some(dst) = node_of(dst) else {
                        self.unroutable += 1;
                        continue;
                    };
                    let size = u32::try_from(payload.len())
                        .unwrap_or(u32::MAX)
                        .saturating_add(UDP_IP_HEADER);
                    ctx.send(marked(
                        Packet::new(self.me, dst, 0, size, Payload::Datagram(payload)),
                        dscp,
                    ));
                }
                _ => self.unroutable += 1,
            }
        }
        while let Some(e) = self.machine.poll_event() {
            self.events.push((now, e));
        }
    }
}

impl<M: StreamMachine + 'static> Node for StreamMachineNode<M> {
    fn handle_packet(&mut self, ctx: &mut Ctx<'_>, pkt: Packet) {
        let now = ctx.now();
        match &pkt.payload {
            Payload::Datagram(data) => {
                self.machine.handle_datagram(now, addr_of(pkt.src), data);
            }
            Payload::Tcp(seg) if pkt.src == self.peer && pkt.flow == self.out_flow => {
                self.tx.handle_ack(now, seg);
            }
            Payload::Tcp(seg) if pkt.src == self.peer && pkt.flow == self.in_flow => {
                self.rx.handle_segment(now, seg);
            }
            _ => {}
        }
        self.drain(ctx);
    }

    fn handle_timeout(&mut self, ctx: &mut Ctx<'_>) {
        let now = ctx.now();
        self.kick = None;
        if self.tx.poll_timeout().is_some_and(|t| t <= now) {
            self.tx.handle_timeout(now);
        }
        if self.rx.poll_timeout().is_some_and(|t| t <= now) {
            self.rx.handle_timeout(now);
        }
        if self.machine.poll_timeout().is_some_and(|t| t <= now) {
            self.machine.handle_timeout(now);
        }
        self.drain(ctx);
    }

    fn poll_timeout(&self) -> Option<Instant> {
        [
            self.machine.poll_timeout(),
            self.tx.poll_timeout(),
            self.rx.poll_timeout(),
            self.kick,
        ]
        .into_iter()
        .flatten()
        .min()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use groupwire_link::link::LinkConfig;
    use groupwire_proto::Bitrate;
    use groupwire_proto::rbudp::{
        Pattern, PatternSink, RbudpReceiver, RbudpSender, ReceiverConfig, ReceiverEvent,
        SenderConfig, SenderEvent,
    };

    use super::*;
    use crate::core::Simulator;
    use crate::topology::PointToPoint;

    /// RBUDP over a path that loses 20% of packets both ways: the blasts
    /// need NAK rounds, and the control stream's segments are lost too and
    /// come through by TCP's retransmissions, so the transfer completes.
    #[test]
    fn control_frames_survive_a_lossy_path_on_tcp() {
        let mut sim = Simulator::new(4);
        let a = sim.next_node_id();
        let b = NodeId(a.0 + 1);
        let payload = Pattern::new(9, 300_000);
        let mut tx = RbudpSender::new(SenderConfig::new(addr_of(b), Bitrate::mbps(20)), payload);
        tx.start(Instant::ZERO);
        let rx = RbudpReceiver::new(ReceiverConfig::new(addr_of(a)), PatternSink::new(9));
        let (na, nb) = stream_pair(a, tx, b, rx, &TcpConfig::default().nagle(false), 1);
        sim.add_node(Box::new(na));
        sim.add_node(Box::new(nb));
        let link = LinkConfig::new()
            .latency(Duration::from_millis(20))
            .rate(Bitrate::mbps(100))
            .loss("bernoulli:0.2".parse().expect("a loss model"));
        PointToPoint::build(&mut sim, a, b, link.clone(), link).expect("links");
        sim.run_until(Instant::from_secs(60), &mut |_| {});
        let view = sim.view();
        let tx = view
            .node::<StreamMachineNode<RbudpSender<Pattern>>>(a)
            .expect("the sender");
        let rx = view
            .node::<StreamMachineNode<RbudpReceiver<PatternSink>>>(b)
            .expect("the receiver");
        let Some((_, SenderEvent::Complete(s))) = tx.events.last() else {
            panic!("not complete: {:?}", tx.events.last())
        };
        assert!(s.rounds >= 3, "{} rounds", s.rounds);
        assert!(matches!(
            rx.events.last(),
            Some((_, ReceiverEvent::Complete(_)))
        ));
        assert!(rx.machine().sink().wrong.is_empty());
        let lost_control =
            tx.control_sender().stats().retransmits + rx.control_sender().stats().retransmits;
        assert!(lost_control > 0, "the path lost no control segment");
    }
}
