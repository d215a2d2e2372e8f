//! Runs a [`StreamMachine`] as a simulator node: its UDP datagrams cross
//! the links as packets, as [`MachineNode`](crate::machine_node::MachineNode)'s
//! do, and its control frames ([`Transport::TcpFrame`]) cross the same
//! links on a modelled TCP connection to the peer, so they take the path's
//! delay, queue behind the data at the bottleneck and wait for
//! retransmissions when the path drops a segment.
//!
//! Each stream is two one-way connections of the simulator's TCP model
//! (`crate::tcp`, one each way, Nagle off as a control channel sets
//! `TCP_NODELAY`). That model carries byte counts, not bytes: a frame's
//! bytes wait in a queue shared by the two ends ([`stream_pair`]), and the
//! receiving end hands a frame to its machine once TCP has delivered, in
//! order, every byte up to the frame's end (a 4-byte length prefix per
//! frame is counted, as a real framing would send it).
//!
//! A pair has [`MAX_STREAMS`] such streams (a [`Session`]'s striped
//! channels use several, Leigh et al. §4.3), each its own TCP with its own
//! congestion window, on flows `flow + 2k` and `flow + 2k + 1` for stream
//! `k`; a stream no frame was written on sends nothing.
//!
//! [`Session`]: groupwire_proto::session::Session

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

use bytes::Bytes;
use groupwire_proto::{FRAME_PREFIX, Instant, MAX_STREAMS, StreamMachine, Transmit, Transport};

use crate::core::{Ctx, Node, NodeId, Packet, Payload, addr_of, node_of};
use crate::machine_node::marked;
use crate::tcp::{TcpConfig, TcpReceiver, TcpSender};
use crate::traffic::UDP_IP_HEADER;

/// Frames written into one direction of the stream: the stream offset of
/// each frame's end, and its bytes.
type Pipe = Rc<RefCell<VecDeque<(u64, Bytes)>>>;

/// A node driving a [`StreamMachine`] with TCP streams to one peer node.
pub struct StreamMachineNode<M: StreamMachine> {
    me: NodeId,
    peer: NodeId,
    machine: M,
    /// Events the machine emitted, with the time they were polled.
    pub events: Vec<(Instant, M::Event)>,
    /// Transmits addressed to something other than the peer or a node.
    pub unroutable: u64,
    /// The streams, by number.
    lanes: Vec<Lane>,
    /// A first wake-up, to send what commands given before the run queued.
    kick: Option<Instant>,
}

/// One stream to the peer: a TCP each way.
struct Lane {
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

/// Two nodes, `a` running `ma` and `b` running `mb`, joined by
/// [`MAX_STREAMS`] streams on TCP `config` (stream `k` on flows
/// `flow + 2k` from `a` to `b` and `flow + 2k + 1` back). Add both to the
/// simulator with routes between them.
pub fn stream_pair<A: StreamMachine, B: StreamMachine>(
    a: NodeId,
    ma: A,
    b: NodeId,
    mb: B,
    config: &TcpConfig,
    flow: u32,
) -> (StreamMachineNode<A>, StreamMachineNode<B>) {
    let mut lanes_a = Vec::new();
    let mut lanes_b = Vec::new();
    for k in 0..u32::from(MAX_STREAMS) {
        let ab: Pipe = Rc::default();
        let ba: Pipe = Rc::default();
        let (f_ab, f_ba) = (flow + 2 * k, flow + 2 * k + 1);
        lanes_a.push(Lane::new(
            config,
            (f_ab, f_ba),
            (Rc::clone(&ab), Rc::clone(&ba)),
        ));
        lanes_b.push(Lane::new(config, (f_ba, f_ab), (ba, ab)));
    }
    let na = StreamMachineNode::new(a, b, ma, lanes_a);
    let nb = StreamMachineNode::new(b, a, mb, lanes_b);
    (na, nb)
}

impl Lane {
    /// `flows` and `pipes` are (outgoing, incoming).
    fn new(
        config: &TcpConfig,
        (out_flow, in_flow): (u32, u32),
        (outbox, inbox): (Pipe, Pipe),
    ) -> Self {
        Self {
            tx: TcpSender::new(config.clone()),
            rx: TcpReceiver::new(config),
            out_flow,
            in_flow,
            outbox,
            inbox,
            written: 0,
            reported: 0,
        }
    }

    /// The next frame whose every byte TCP has delivered, in order.
    fn ready(&self) -> Option<Bytes> {
        let delivered = self.rx.delivered();
        let mut inbox = self.inbox.borrow_mut();
        match inbox.front() {
            Some((end, _)) if *end <= delivered => inbox.pop_front().map(|f| f.1),
            _ => None,
        }
    }

    /// Stream bytes TCP has sent once since the last call: they have left
    /// its queue.
    fn take_sent(&mut self) -> Option<usize> {
        let sent = (self.tx.snd_una() + self.tx.flight_size()).min(self.written);
        if sent <= self.reported {
            return None;
        }
        let bytes = usize::try_from(sent - self.reported).unwrap_or(usize::MAX);
        self.reported = sent;
        Some(bytes)
    }
}

impl<M: StreamMachine> StreamMachineNode<M> {
    fn new(me: NodeId, peer: NodeId, machine: M, lanes: Vec<Lane>) -> Self {
        Self {
            me,
            peer,
            machine,
            events: Vec::new(),
            unroutable: 0,
            lanes,
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

    /// The first stream's sender (its retransmissions and timeouts).
    pub fn control_sender(&self) -> &TcpSender {
        &self.lanes[0].tx
    }

    /// Stream `k`'s sender, if there is one.
    pub fn stream_sender(&self, k: u8) -> Option<&TcpSender> {
        self.lanes.get(usize::from(k)).map(|l| &l.tx)
    }

    /// Sends what the machine and TCP have, hands over frames TCP has
    /// delivered, and collects events.
    fn drain(&mut self, ctx: &mut Ctx<'_>) {
        let now = ctx.now();
        for k in 0..self.lanes.len() {
            // Frames whose every byte has arrived in order.
            while let Some(frame) = self.lanes[k].ready() {
                let stream = u8::try_from(k).unwrap_or(u8::MAX);
                self.machine
                    .handle_frame(now, addr_of(self.peer), stream, &frame);
                self.flush_machine(ctx);
            }
        }
        self.flush_machine(ctx);
        self.send_segments(ctx);
        // Bytes TCP has sent once have left its queue: the machine may
        // hand over more (a session's stream window), which TCP may send
        // at once.
        loop {
            let mut any = false;
            for k in 0..self.lanes.len() {
                let Some(bytes) = self.lanes[k].take_sent() else {
                    continue;
                };
                any = true;
                let stream = u8::try_from(k).unwrap_or(u8::MAX);
                self.machine
                    .handle_stream_sent(now, addr_of(self.peer), stream, bytes);
                self.flush_machine(ctx);
                self.send_segments(ctx);
            }
            if !any {
                break;
            }
        }
    }

    /// TCP's segments and acknowledgements, onto the network.
    fn send_segments(&mut self, ctx: &mut Ctx<'_>) {
        let now = ctx.now();
        for l in &mut self.lanes {
            while let Some(seg) = l.tx.poll_segment(now) {
                let pkt = Packet::new(
                    self.me,
                    self.peer,
                    l.out_flow,
                    seg.wire_len(),
                    Payload::Tcp(seg),
                );
                ctx.send(pkt);
            }
            while let Some(ack) = l.rx.poll_ack(now) {
                let pkt = Packet::new(
                    self.me,
                    self.peer,
                    l.in_flow,
                    ack.wire_len(),
                    Payload::Tcp(ack),
                );
                ctx.send(pkt);
            }
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
                Transport::TcpFrame { stream }
                    if node_of(dst) == Some(self.peer)
                        && usize::from(stream) < self.lanes.len() =>
                {
                    let l = &mut self.lanes[usize::from(stream)];
                    let len = (payload.len() + FRAME_PREFIX) as u64;
                    l.written += len;
                    l.tx.write(now, len);
                    l.outbox.borrow_mut().push_back((l.written, payload));
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
            Payload::Tcp(seg) if pkt.src == self.peer => {
                for l in &mut self.lanes {
                    if pkt.flow == l.out_flow {
                        l.tx.handle_ack(now, seg);
                    } else if pkt.flow == l.in_flow {
                        l.rx.handle_segment(now, seg);
                    }
                }
            }
            _ => {}
        }
        self.drain(ctx);
    }

    fn handle_timeout(&mut self, ctx: &mut Ctx<'_>) {
        let now = ctx.now();
        self.kick = None;
        for l in &mut self.lanes {
            if l.tx.poll_timeout().is_some_and(|t| t <= now) {
                l.tx.handle_timeout(now);
            }
            if l.rx.poll_timeout().is_some_and(|t| t <= now) {
                l.rx.handle_timeout(now);
            }
        }
        if self.machine.poll_timeout().is_some_and(|t| t <= now) {
            self.machine.handle_timeout(now);
        }
        self.drain(ctx);
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let lanes = self
            .lanes
            .iter()
            .flat_map(|l| [l.tx.poll_timeout(), l.rx.poll_timeout()]);
        [self.machine.poll_timeout(), self.kick]
            .into_iter()
            .chain(lanes)
            .flatten()
            .min()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use std::net::SocketAddr;

    use groupwire_link::link::LinkConfig;
    use groupwire_proto::rbudp::{
        Pattern, PatternSink, RbudpReceiver, RbudpSender, ReceiverConfig, ReceiverEvent,
        SenderConfig, SenderEvent,
    };
    use groupwire_proto::session::{
        DEFAULT_STREAM_WINDOW, Mechanism, Qos, Session, SessionConfig, SessionEvent,
    };
    use groupwire_proto::{Bitrate, Machine};

    use super::*;
    use crate::core::Simulator;
    use crate::topology::PointToPoint;

    /// A session that, once connected, opens one bulk channel on `mech`
    /// and hands it `n` messages of `len` bytes at once; the other side
    /// counts what it receives.
    struct Bulk {
        session: Session,
        peer_addr: Option<SocketAddr>,
        mech: Mechanism,
        n: u32,
        len: usize,
        received: u32,
        last_at: Instant,
    }

    impl Bulk {
        fn new(
            seed: u64,
            peer_addr: Option<SocketAddr>,
            mech: Mechanism,
            n: u32,
            len: usize,
        ) -> Self {
            let mut cfg = SessionConfig::new(seed);
            cfg.stream_window = Some(DEFAULT_STREAM_WINDOW);
            Self {
                session: Session::new(cfg),
                peer_addr,
                mech,
                n,
                len,
                received: 0,
                last_at: Instant::ZERO,
            }
        }

        fn take_events(&mut self, now: Instant) {
            while let Some(e) = self.session.poll_event() {
                match e {
                    SessionEvent::PeerConnected { peer, .. } if self.peer_addr.is_some() => {
                        let ch = self
                            .session
                            .open_channel(now, peer, "dataset", Qos::bulk())
                            .expect("open");
                        self.session
                            .set_mechanism(now, ch, self.mech)
                            .expect("mechanism");
                        for i in 0..self.n {
                            let mut m = i.to_be_bytes().to_vec();
                            m.resize(self.len, 0);
                            self.session.send(now, ch, &m).expect("send");
                        }
                    }
                    SessionEvent::Message { .. } => {
                        self.received += 1;
                        self.last_at = now;
                    }
                    _ => {}
                }
            }
        }
    }

    impl Machine for Bulk {
        type Event = ();
        fn handle_datagram(&mut self, now: Instant, src: SocketAddr, data: &[u8]) {
            self.session.handle_datagram(now, src, data);
            self.take_events(now);
        }
        fn handle_timeout(&mut self, now: Instant) {
            self.session.handle_timeout(now);
            self.take_events(now);
        }
        fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
            self.session.poll_transmit(now)
        }
        fn poll_event(&mut self) -> Option<()> {
            None
        }
        fn poll_timeout(&self) -> Option<Instant> {
            self.session.poll_timeout()
        }
    }

    impl StreamMachine for Bulk {
        fn handle_frame(&mut self, now: Instant, src: SocketAddr, stream: u8, frame: &[u8]) {
            self.session.handle_frame(now, src, stream, frame);
            self.take_events(now);
        }
        fn handle_stream_sent(&mut self, now: Instant, dst: SocketAddr, stream: u8, bytes: usize) {
            self.session.handle_stream_sent(now, dst, stream, bytes);
            self.take_events(now);
        }
    }

    /// Seconds a 4 MB dataset takes over a 20 Mbit/s path of 100 ms round
    /// trip losing 1% of packets each way, on `mech`, and the streams'
    /// retransmissions.
    fn bulk_transfer(mech: Mechanism) -> (f64, u32, u64) {
        let mut sim = Simulator::new(11);
        let a = sim.next_node_id();
        let b = NodeId(a.0 + 1);
        let (n, len) = (256, 16 * 1024);
        let ma = Bulk::new(1, Some(addr_of(b)), mech, n, len);
        let mb = Bulk::new(2, None, mech, 0, 0);
        let mut tcp = TcpConfig::default().nagle(false);
        tcp.delayed_ack = Some(Duration::from_millis(40));
        let (mut na, nb) = stream_pair(a, ma, b, mb, &tcp, 1);
        na.machine_mut()
            .session
            .connect(Instant::ZERO, addr_of(b))
            .expect("connect");
        sim.add_node(Box::new(na));
        sim.add_node(Box::new(nb));
        let link = LinkConfig::new()
            .latency(Duration::from_millis(50))
            .rate(Bitrate::mbps(20))
            .loss("bernoulli:0.01".parse().expect("a loss model"));
        PointToPoint::build(&mut sim, a, b, link.clone(), link).expect("links");
        sim.run_until(Instant::from_secs(120), &mut |_| {});
        let view = sim.view();
        let rx = view.node::<StreamMachineNode<Bulk>>(b).expect("receiver");
        let tx = view.node::<StreamMachineNode<Bulk>>(a).expect("sender");
        let retransmits = (0..MAX_STREAMS)
            .filter_map(|k| tx.stream_sender(k))
            .map(|s| s.stats().retransmits)
            .sum();
        let m = rx.machine();
        (m.last_at.as_secs_f64(), m.received, retransmits)
    }

    /// Leigh et al. §4.3 (Fig. 7): on a lossy long path, one TCP stream is
    /// held far under the capacity by its loss-driven window, and striping
    /// over 4 streams moves the same dataset, every message of it, in well
    /// under half the time. Deterministic (one seed): the ratio is the
    /// model's, not the machine's.
    #[test]
    fn a_striped_session_channel_beats_one_stream_on_a_lossy_long_path() {
        let (one, got_one, _) = bulk_transfer(Mechanism::Reliable);
        let (four, got_four, rtx) = bulk_transfer(Mechanism::Striped { streams: 4 });
        assert_eq!((got_one, got_four), (256, 256));
        assert!(rtx > 0, "the path lost no segment");
        assert!(
            four * 2.0 < one,
            "striped {four:.1} s, one stream {one:.1} s"
        );
        assert_eq!(bulk_transfer(Mechanism::Striped { streams: 4 }).0, four);
    }

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
