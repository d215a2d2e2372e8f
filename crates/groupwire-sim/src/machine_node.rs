//! Runs a sans-IO [`Machine`] from `groupwire-proto` as a simulator node:
//! the same state machine that the tokio driver runs on real sockets.

use groupwire_link::qdisc::Dscp;
use groupwire_proto::{Instant, Machine, Transmit};

use crate::core::{Ctx, Node, NodeId, Packet, Payload, addr_of, node_of};
use crate::traffic::{Message, UDP_IP_HEADER};

/// Hands one application message to the machine (a command such as `send`).
pub type Feed<M> = Box<dyn FnMut(&mut M, Instant, usize, &Message)>;

/// A node driving a [`Machine`]: datagrams in, transmits out, events kept
/// with their times for the scenario to read after (or during) the run.
/// Optionally it also plays an application: a message schedule fed to the
/// machine through a [`Feed`] at each message's time.
pub struct MachineNode<M: Machine> {
    me: NodeId,
    machine: M,
    /// Events the machine emitted, with the time they were polled.
    pub events: Vec<(Instant, M::Event)>,
    /// Transmits addressed to something that is not a simulated node.
    pub unroutable: u64,
    schedule: Vec<Message>,
    next_msg: usize,
    feed: Option<Feed<M>>,
}

impl<M: Machine + std::fmt::Debug> std::fmt::Debug for MachineNode<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MachineNode")
            .field("me", &self.me)
            .field("machine", &self.machine)
            .field("events", &self.events.len())
            .field("next_msg", &self.next_msg)
            .finish_non_exhaustive()
    }
}

impl<M: Machine> MachineNode<M> {
    /// Wraps `machine` as node `me`. Its socket address is [`addr_of`]`(me)`.
    pub fn new(me: NodeId, machine: M) -> Self {
        Self {
            me,
            machine,
            events: Vec::new(),
            unroutable: 0,
            schedule: Vec::new(),
            next_msg: 0,
            feed: None,
        }
    }

    /// Plays `schedule`: at each message's time, `feed` hands it to the machine.
    pub fn with_schedule(mut self, schedule: Vec<Message>, feed: Feed<M>) -> Self {
        self.schedule = schedule;
        self.feed = Some(feed);
        self
    }

    /// Messages fed so far.
    pub fn fed(&self) -> usize {
        self.next_msg
    }

    /// The machine, for reading its state.
    pub fn machine(&self) -> &M {
        &self.machine
    }

    /// The machine, for commands. After a command, drain with [`MachineNode::drain`].
    pub fn machine_mut(&mut self) -> &mut M {
        &mut self.machine
    }

    /// Sends every pending transmit and collects every pending event (the
    /// drain contract of [`Machine`]).
    pub fn drain(&mut self, ctx: &mut Ctx<'_>) {
        drain_into(
            self.me,
            &mut self.machine,
            &mut self.events,
            &mut self.unroutable,
            ctx,
        );
    }
}

/// `pkt` with the code point a machine gave its datagram (six bits; an
/// out-of-range value leaves it unmarked), for the classful links.
pub(crate) fn marked(pkt: Packet, dscp: Option<u8>) -> Packet {
    match dscp.and_then(Dscp::new) {
        Some(d) => pkt.with_dscp(d),
        None => pkt,
    }
}

fn drain_into<M: Machine>(
    me: NodeId,
    machine: &mut M,
    events: &mut Vec<(Instant, M::Event)>,
    unroutable: &mut u64,
    ctx: &mut Ctx<'_>,
) {
    let now = ctx.now();
    while let Some((Transmit { dst, payload, .. }, dscp)) = machine.poll_transmit_marked(now) {
        let Some(dst) = node_of(dst) else {
            *unroutable += 1;
            continue;
        };
        let size = u32::try_from(payload.len())
            .unwrap_or(u32::MAX)
            .saturating_add(UDP_IP_HEADER);
        ctx.send(marked(
            Packet::new(me, dst, 0, size, Payload::Datagram(payload)),
            dscp,
        ));
    }
    while let Some(e) = machine.poll_event() {
        events.push((now, e));
    }
}

impl<M: Machine + 'static> Node for MachineNode<M> {
    fn handle_packet(&mut self, ctx: &mut Ctx<'_>, pkt: Packet) {
        if let Payload::Datagram(data) = &pkt.payload {
            self.machine
                .handle_datagram(ctx.now(), addr_of(pkt.src), data);
        }
        self.drain(ctx);
    }

    fn handle_timeout(&mut self, ctx: &mut Ctx<'_>) {
        let now = ctx.now();
        if let Some(feed) = &mut self.feed {
            while let Some(m) = self.schedule.get(self.next_msg).filter(|m| m.at <= now) {
                feed(&mut self.machine, now, self.next_msg, m);
                self.next_msg += 1;
                // Drain after each command, as the contract asks.
                let me = self.me;
                let machine = &mut self.machine;
                drain_into(me, machine, &mut self.events, &mut self.unroutable, ctx);
            }
        }
        if self.machine.poll_timeout().is_some_and(|t| t <= now) {
            self.machine.handle_timeout(now);
        }
        self.drain(ctx);
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let app = self
            .feed
            .as_ref()
            .and_then(|_| self.schedule.get(self.next_msg))
            .map(|m| m.at);
        match (self.machine.poll_timeout(), app) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::net::SocketAddr;
    use std::time::Duration;

    use bytes::Bytes;
    use groupwire_link::link::LinkConfig;
    use groupwire_proto::Transport;

    use super::*;
    use crate::core::Simulator;
    use crate::topology::PointToPoint;

    #[test]
    fn a_machines_code_point_marks_its_packet_and_a_bad_one_is_ignored() {
        let pkt = || {
            Packet::new(
                NodeId(0),
                NodeId(1),
                0,
                100,
                Payload::Datagram(Bytes::new()),
            )
        };
        assert_eq!(marked(pkt(), Some(46)).dscp, Dscp::EF);
        assert_eq!(marked(pkt(), None).dscp, Dscp::DEFAULT);
        assert_eq!(marked(pkt(), Some(64)).dscp, Dscp::DEFAULT);
    }

    /// Pings its peer every 10 ms with a counter; reports every datagram it receives.
    #[derive(Debug)]
    struct Pinger {
        peer: Option<SocketAddr>,
        next: Instant,
        count: u32,
        out: VecDeque<Transmit>,
        got: VecDeque<(SocketAddr, u32)>,
    }

    impl Machine for Pinger {
        type Event = (SocketAddr, u32);
        fn handle_datagram(&mut self, _now: Instant, src: SocketAddr, data: &[u8]) {
            if let Ok(b) = <[u8; 4]>::try_from(data) {
                self.got.push_back((src, u32::from_be_bytes(b)));
            }
        }
        fn handle_timeout(&mut self, now: Instant) {
            let Some(peer) = self.peer else { return };
            while self.next <= now && self.count < 5 {
                self.out.push_back(Transmit {
                    dst: peer,
                    transport: Transport::Udp,
                    payload: Bytes::copy_from_slice(&self.count.to_be_bytes()),
                });
                self.count += 1;
                self.next += Duration::from_millis(10);
            }
        }
        fn poll_transmit(&mut self, _now: Instant) -> Option<Transmit> {
            self.out.pop_front()
        }
        fn poll_event(&mut self) -> Option<Self::Event> {
            self.got.pop_front()
        }
        fn poll_timeout(&self) -> Option<Instant> {
            (self.peer.is_some() && self.count < 5).then_some(self.next)
        }
    }

    #[test]
    fn machines_exchange_datagrams_over_a_link() {
        let mut sim = Simulator::new(3);
        let a = sim.next_node_id();
        let b = NodeId(a.0 + 1);
        let pinger = |peer| Pinger {
            peer,
            next: Instant::ZERO,
            count: 0,
            out: VecDeque::new(),
            got: VecDeque::new(),
        };
        sim.add_node(Box::new(MachineNode::new(a, pinger(Some(addr_of(b))))));
        sim.add_node(Box::new(MachineNode::new(b, pinger(None))));
        let link = LinkConfig::new().latency(Duration::from_millis(25));
        PointToPoint::build(&mut sim, a, b, link.clone(), link).unwrap();
        sim.run_until(Instant::from_secs(1), &mut |_| {});
        let rx = sim
            .view()
            .node::<MachineNode<Pinger>>(b)
            .unwrap()
            .events
            .clone();
        let seen: Vec<(Instant, u32)> = rx
            .iter()
            .map(|(t, (src, n))| {
                assert_eq!(*src, addr_of(a));
                (*t, *n)
            })
            .collect();
        let expect: Vec<(Instant, u32)> = (0..5)
            .map(|i| (Instant::from_millis(25 + 10 * u64::from(i)), i))
            .collect();
        assert_eq!(seen, expect);
    }
}
