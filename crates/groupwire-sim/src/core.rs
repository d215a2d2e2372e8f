//! The event loop: nodes, links, routes and the event heap.
//!
//! The heap orders `(time, sequence)`; the sequence number is assigned when
//! an event is scheduled, so ties resolve in scheduling order and a run is
//! a pure function of its inputs and seed.
//!
//! A packet sent by a node follows its route link by link. A FIFO link's
//! model decides at the moment the packet is offered when it will arrive
//! (or that it is dropped), so each hop costs one heap entry. A classful
//! link (priority, DRR, WFQ: `groupwire_link::qdisc`) cannot: a packet
//! offered later may overtake this one, so the packet waits in the link
//! (parked in the in-flight table) and the link's next departure is a heap
//! entry of its own, re-armed like a node's deadline. Node deadlines are
//! re-armed lazily: a node's wake-up is pushed only when its deadline moves
//! earlier; a wake-up that finds the deadline moved later re-arms itself.
//! TCP moves its retransmission timer on every ACK, and this keeps those
//! moves off the heap.

use std::any::Any;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use std::sync::Arc;

use bytes::Bytes;
use groupwire_codec::Bch;
use groupwire_link::link::{Admission, Fate, Link, LinkConfig};
use groupwire_link::loss::{BitErrors, LossError};
use groupwire_link::qdisc::Dscp;
use groupwire_proto::Instant;
use groupwire_proto::control::ladder::FrameOutcome;

use crate::rng::{self, SimRng};
use crate::tcp::Segment;

/// A host in the simulation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub u32);

/// One direction of a link.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LinkId(pub u32);

/// What a packet carries. The simulator never serializes TCP segments or
/// synthetic messages: only [`Payload::Datagram`] holds real bytes, for
/// sans-IO machines that speak a wire format.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Payload {
    /// A TCP segment of the packet-level TCP model.
    Tcp(Segment),
    /// A real datagram produced by a [`Machine`](groupwire_proto::Machine).
    Datagram(Bytes),
    /// A synthetic application message: a sequence number and its send time.
    Message {
        /// Per-flow sequence number, from 0.
        seq: u64,
        /// When the application produced it.
        sent_at: Instant,
    },
}

/// A packet in flight.
#[derive(Debug, Clone)]
pub struct Packet {
    /// The sending node.
    pub src: NodeId,
    /// The destination node.
    pub dst: NodeId,
    /// Flow number, chosen by the sender; lets one node run many flows.
    pub flow: u32,
    /// Bytes on the wire, headers included: what links serialize and queue.
    pub size: u32,
    /// Its DiffServ mark ([`Dscp::DEFAULT`] unless the sender sets one):
    /// what classful links sort it by.
    pub dscp: Dscp,
    /// What it carries.
    pub payload: Payload,
    /// Bit errors picked up on the way (bit-error links only).
    pub corrupt: Option<BitErrors>,
    route: u32,
    hop: u16,
}

impl Packet {
    /// A packet from `src` to `dst` of `size` bytes on the wire.
    pub fn new(src: NodeId, dst: NodeId, flow: u32, size: u32, payload: Payload) -> Self {
        Self {
            src,
            dst,
            flow,
            size,
            dscp: Dscp::DEFAULT,
            payload,
            corrupt: None,
            route: 0,
            hop: 0,
        }
    }

    /// The same packet marked `dscp`.
    pub fn with_dscp(mut self, dscp: Dscp) -> Self {
        self.dscp = dscp;
        self
    }
}

/// A simulated host: a TCP endpoint, a traffic source or sink, or an
/// adapter around a sans-IO machine.
///
/// After each `handle_*` call the simulator reads [`poll_timeout`](Node::poll_timeout)
/// and calls [`handle_timeout`](Node::handle_timeout) no earlier than that.
pub trait Node: Any {
    /// A packet arrived for this node.
    fn handle_packet(&mut self, ctx: &mut Ctx<'_>, pkt: Packet);
    /// The node's deadline has passed. Early or spurious calls must be harmless.
    fn handle_timeout(&mut self, ctx: &mut Ctx<'_>);
    /// When the node next wants [`handle_timeout`](Node::handle_timeout).
    fn poll_timeout(&self) -> Option<Instant>;
    /// Whether packets with bit errors are handed over (with
    /// [`Packet::corrupt`] set) instead of being dropped as a failed checksum
    /// would drop them. FEC receivers that repair bits say yes.
    fn accepts_corrupted(&self) -> bool {
        false
    }
    /// A packet for another node finished crossing link `from`, which this node sits
    /// at the far end of, and the link was registered with
    /// [`Simulator::set_transit`] (a base station's agent, Miyoshi et al.'s
    /// Snoop or ELN). The node passes it on with [`Ctx::forward`] (the
    /// default), changes it first, keeps it, or drops it. Corrupted packets
    /// are dropped before this unless [`accepts_corrupted`](Node::accepts_corrupted).
    fn handle_transit(&mut self, ctx: &mut Ctx<'_>, from: LinkId, pkt: Packet) {
        let _ = from;
        ctx.forward(pkt);
    }
}

/// What a node may do while handling an input.
pub struct Ctx<'a> {
    net: &'a mut Network,
    me: NodeId,
}

impl Ctx<'_> {
    /// The current simulated time.
    pub fn now(&self) -> Instant {
        self.net.now
    }
    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.me
    }
    /// This node's own random stream.
    pub fn rng(&mut self) -> &mut SimRng {
        &mut self.net.node_rngs[self.me.0 as usize]
    }
    /// Sends `pkt` along its route now. A packet with no route is counted and dropped.
    pub fn send(&mut self, pkt: Packet) {
        self.net.send(pkt);
    }
    /// Passes a packet handed to [`Node::handle_transit`] on to the next
    /// link of its route (a copy of it may be forwarded again later: a
    /// local retransmission).
    pub fn forward(&mut self, pkt: Packet) {
        self.net.forward(pkt);
    }
    /// When a packet of `size` bytes offered to link `id` now would reach
    /// the far end: after what is queued ahead of it, its own transmission
    /// (longer by the parity under link-layer FEC) and the propagation
    /// delay (jitter aside). What a sender that owns the link knows.
    pub fn link_due(&mut self, id: LinkId, size: u32) -> Instant {
        let now = self.net.now;
        let slot = &mut self.net.links[id.0 as usize];
        let bits = size as usize * 8;
        let air = slot
            .fec
            .as_ref()
            .map_or(bits, |c| c.wire_bits(bits))
            .div_ceil(8) as u64;
        let queued = slot.link.queue_bytes(now);
        let sending = slot
            .link
            .rate_at(now)
            .map_or(std::time::Duration::ZERO, |r| r.transmit_time(queued + air));
        now + sending + slot.link.delay_at(now)
    }
    /// The link-layer reports of link `id` for frames that have arrived by
    /// now, oldest first (empty unless [`Simulator::enable_link_feedback`]).
    /// A station reads them when the far end's next frame comes back, as a
    /// link-layer acknowledgement would carry them.
    pub fn take_link_feedback(&mut self, id: LinkId) -> Vec<FrameOutcome> {
        let now = self.net.now;
        let Some(feedback) = &mut self.net.links[id.0 as usize].feedback else {
            return Vec::new();
        };
        let ready = feedback.iter().take_while(|(at, _)| *at <= now).count();
        feedback.drain(..ready).map(|(_, o)| o).collect()
    }
    /// Sets the link-layer FEC of link `id` for the frames offered from now
    /// on (see [`Simulator::set_link_fec`]).
    pub fn set_link_fec(&mut self, id: LinkId, code: Option<Arc<Bch>>) {
        self.net.links[id.0 as usize].fec = code;
    }
}

/// The simulated address of a node, for machines that speak in socket
/// addresses. Never used for real traffic.
pub fn addr_of(node: NodeId) -> SocketAddr {
    let [_, a, b, c] = node.0.to_be_bytes();
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, a, b, c)), 7400)
}

/// The node behind a simulated address.
pub fn node_of(addr: SocketAddr) -> Option<NodeId> {
    match addr.ip() {
        IpAddr::V4(v4) if v4.octets()[0] == 10 && addr.port() == 7400 => {
            let [_, a, b, c] = v4.octets();
            Some(NodeId(u32::from_be_bytes([0, a, b, c])))
        }
        _ => None,
    }
}

/// Counters for the whole run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetStats {
    /// Events executed (heap entries popped, stale wake-ups included).
    pub events: u64,
    /// Packets nodes sent.
    pub sent: u64,
    /// Packets handed to their destination node.
    pub delivered: u64,
    /// Packets dropped on some link (loss process or queue).
    pub dropped: u64,
    /// Packets with bit errors dropped at a destination that does not accept them.
    pub corrupt_dropped: u64,
    /// Packets sent to a destination with no route.
    pub no_route: u64,
    /// Frames a link-layer FEC stage could not decode (also in `dropped`).
    pub fec_lost: u64,
    /// Bits link-layer FEC stages corrected.
    pub fec_corrected_bits: u64,
}

/// A link of the topology and its name for reports.
#[derive(Debug)]
pub struct LinkSlot {
    /// The model.
    pub link: Link,
    /// A name for reports, such as `bottleneck`.
    pub name: String,
    /// Link-layer FEC: each packet crosses as a frame of BCH codewords
    /// (longer on the wire by the parity), bit errors hit the frame, and
    /// the real decoder decides whether it arrives (intact) or is lost.
    /// `None`: no FEC.
    pub fec: Option<Arc<Bch>>,
    /// Link-layer feedback, when enabled ([`Simulator::enable_link_feedback`]):
    /// what the receiving end's decoder made of each frame (lost, or the
    /// bits it corrected), with the time the frame arrived, oldest first.
    /// At most [`MAX_LINK_FEEDBACK`] are kept.
    pub feedback: Option<VecDeque<(Instant, FrameOutcome)>>,
}

/// Link-layer reports kept per link before the oldest is dropped.
pub const MAX_LINK_FEEDBACK: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum What {
    Arrive { link: u32, slot: u32 },
    Depart { link: u32 },
    Wake { node: u32 },
    Sample { idx: u32 },
    Script { idx: u32 },
}

type Entry = Reverse<(Instant, u64, What)>;

/// Links, routes, packets in flight and the event heap.
struct Network {
    now: Instant,
    seq: u64,
    heap: BinaryHeap<Entry>,
    links: Vec<LinkSlot>,
    /// Per link: the node that sees packets in transit after it.
    transit: Vec<Option<NodeId>>,
    /// Per classful link: the departure wake-up on the heap, if any.
    depart_armed: Vec<Option<Instant>>,
    routes: Vec<Vec<LinkId>>,
    route_of: HashMap<(NodeId, NodeId), u32>,
    in_flight: Vec<Option<Packet>>,
    free: Vec<u32>,
    node_rngs: Vec<SimRng>,
    stats: NetStats,
}

impl Network {
    fn push(&mut self, at: Instant, what: What) {
        self.seq += 1;
        self.heap.push(Reverse((at, self.seq, what)));
    }

    fn send(&mut self, mut pkt: Packet) {
        self.stats.sent += 1;
        let Some(&route) = self.route_of.get(&(pkt.src, pkt.dst)) else {
            self.stats.no_route += 1;
            tracing::debug!(src = pkt.src.0, dst = pkt.dst.0, "no route; packet dropped");
            return;
        };
        pkt.route = route;
        pkt.hop = 0;
        self.forward(pkt);
    }

    /// Offers `pkt` to the link at its current hop.
    fn forward(&mut self, pkt: Packet) {
        let link = self.routes[pkt.route as usize][pkt.hop as usize];
        let slot = &mut self.links[link.0 as usize];
        let bits = pkt.size as usize * 8;
        let on_air = match &slot.fec {
            Some(code) => code.wire_bits(bits).div_ceil(8),
            None => pkt.size as usize,
        };
        if slot.link.is_classful() {
            // The packet waits in the link; its fate comes with its departure.
            let dscp = pkt.dscp;
            let token = self.park(pkt);
            let slot = &mut self.links[link.0 as usize];
            match slot.link.enqueue(self.now, on_air, dscp, u64::from(token)) {
                Admission::Queued { .. } => self.arm_departure(link),
                Admission::Dropped { .. } => {
                    drop(self.unpark(token));
                    self.stats.dropped += 1;
                }
            }
            return;
        }
        let fate = slot.link.offer(self.now, on_air);
        self.settle(link, pkt, fate);
    }

    /// Delivers the packets a classful link finished serializing by now and
    /// re-arms its next departure.
    fn depart(&mut self, link: LinkId) {
        let l = link.0 as usize;
        if self.depart_armed[l] != Some(self.now) {
            return; // superseded by an earlier departure
        }
        self.depart_armed[l] = None;
        while let Some(d) = self.links[l].link.poll_departure(self.now) {
            let token = u32::try_from(d.token).expect("tokens are in-flight slots");
            let pkt = self.unpark(token);
            self.settle(link, pkt, d.fate);
        }
        self.arm_departure(link);
    }

    /// Pushes a departure wake-up for a classful link if its next departure
    /// is earlier than the one armed.
    fn arm_departure(&mut self, link: LinkId) {
        let l = link.0 as usize;
        let Some(at) = self.links[l].link.poll_timeout() else {
            return;
        };
        let at = at.max(self.now);
        if self.depart_armed[l].is_none_or(|a| at < a) {
            self.depart_armed[l] = Some(at);
            self.push(at, What::Depart { link: link.0 });
        }
    }

    /// Acts on what link `link` did with `pkt` once serialized: schedules
    /// its arrival or counts its loss, through the link-layer FEC if any.
    fn settle(&mut self, link: LinkId, mut pkt: Packet, fate: Fate) {
        let slot = &mut self.links[link.0 as usize];
        let bits = pkt.size as usize * 8;
        // The link-layer decoder's verdict on a corrupted frame, once.
        let decoded = match (&fate, &slot.fec) {
            (Fate::Corrupt { errors, .. }, Some(code)) => {
                Some(code.decode_errors(bits, errors.positions()))
            }
            _ => None,
        };
        if let Some(feedback) = &mut slot.feedback {
            let report = match (&fate, decoded) {
                (Fate::Deliver { at }, _) => Some((*at, FrameOutcome::CLEAN)),
                (Fate::Corrupt { at, .. }, Some(Ok(c))) => Some((
                    *at,
                    FrameOutcome {
                        lost: false,
                        corrected_bits: Some(c),
                    },
                )),
                (Fate::Corrupt { at, .. }, _) => Some((*at, FrameOutcome::LOST)),
                (Fate::Lost | Fate::QueueDrop, _) => None,
            };
            if let Some(r) = report {
                if feedback.len() >= MAX_LINK_FEEDBACK {
                    feedback.pop_front();
                }
                feedback.push_back(r);
            }
        }
        match (fate, decoded) {
            (Fate::Deliver { at }, _) => self.schedule_arrival(at, link, pkt),
            (Fate::Corrupt { at, .. }, Some(Ok(corrected))) => {
                self.stats.fec_corrected_bits += u64::from(corrected);
                self.schedule_arrival(at, link, pkt);
            }
            (Fate::Corrupt { .. }, Some(Err(_))) => {
                self.stats.fec_lost += 1;
                self.stats.dropped += 1;
            }
            (Fate::Corrupt { at, errors }, None) => {
                // Bits flipped on two hops are flipped back: keep the symmetric difference.
                pkt.corrupt = match pkt.corrupt.take() {
                    Some(prev) => Some(prev.merged(&errors)).filter(|e| e.count() > 0),
                    None => Some(errors),
                };
                self.schedule_arrival(at, link, pkt);
            }
            (Fate::Lost | Fate::QueueDrop, _) => self.stats.dropped += 1,
        }
    }

    fn schedule_arrival(&mut self, at: Instant, link: LinkId, pkt: Packet) {
        let slot = self.park(pkt);
        self.push(at, What::Arrive { link: link.0, slot });
    }

    /// Stores `pkt` in the in-flight table; returns its slot.
    fn park(&mut self, pkt: Packet) -> u32 {
        match self.free.pop() {
            Some(s) => {
                self.in_flight[s as usize] = Some(pkt);
                s
            }
            None => {
                self.in_flight.push(Some(pkt));
                u32::try_from(self.in_flight.len() - 1).expect("fewer than 2^32 packets in flight")
            }
        }
    }

    /// Takes the packet out of slot `slot` and frees it.
    fn unpark(&mut self, slot: u32) -> Packet {
        let pkt = self.in_flight[slot as usize]
            .take()
            .expect("a parked packet is in flight");
        self.free.push(slot);
        pkt
    }
}

/// Receives a sample of the simulation at a fixed interval.
pub type Sampler = Box<dyn FnMut(Instant, &SimView<'_>)>;
/// Changes the simulation at a scheduled time (conditions, flows, ...).
pub type Script = Box<dyn FnOnce(&mut Simulator)>;

/// Read access to the simulation for samplers and for reports after a run.
pub struct SimView<'a> {
    nodes: &'a [Box<dyn Node>],
    links: &'a [LinkSlot],
    stats: &'a NetStats,
}

impl<'a> SimView<'a> {
    /// The node `id` as its concrete type, if it is one.
    pub fn node<T: Node>(&self, id: NodeId) -> Option<&'a T> {
        let n: &'a dyn Any = self.nodes.get(id.0 as usize)?.as_ref();
        n.downcast_ref::<T>()
    }
    /// The link `id`.
    pub fn link(&self, id: LinkId) -> &'a LinkSlot {
        &self.links[id.0 as usize]
    }
    /// Run counters.
    pub fn stats(&self) -> &NetStats {
        self.stats
    }
}

/// The discrete-event simulator.
///
/// Build it with [`add_node`](Self::add_node), [`add_link`](Self::add_link)
/// and [`add_route`](Self::add_route), then [`run_until`](Self::run_until).
pub struct Simulator {
    seed: u64,
    nodes: Vec<Box<dyn Node>>,
    armed: Vec<Option<Instant>>,
    samplers: Vec<(std::time::Duration, Sampler)>,
    scripts: Vec<Option<Script>>,
    net: Network,
}

impl std::fmt::Debug for Simulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Simulator")
            .field("seed", &self.seed)
            .field("now", &self.net.now)
            .field("nodes", &self.nodes.len())
            .field("links", &self.net.links.len())
            .finish_non_exhaustive()
    }
}

impl Simulator {
    /// An empty simulation whose random streams derive from `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            seed,
            nodes: Vec::new(),
            armed: Vec::new(),
            samplers: Vec::new(),
            scripts: Vec::new(),
            net: Network {
                now: Instant::ZERO,
                seq: 0,
                heap: BinaryHeap::new(),
                links: Vec::new(),
                transit: Vec::new(),
                depart_armed: Vec::new(),
                routes: Vec::new(),
                route_of: HashMap::new(),
                in_flight: Vec::new(),
                free: Vec::new(),
                node_rngs: Vec::new(),
                stats: NetStats::default(),
            },
        }
    }

    /// The scenario seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The current simulated time.
    pub fn now(&self) -> Instant {
        self.net.now
    }

    /// The id the next [`add_node`](Self::add_node) will return, so nodes
    /// can be built knowing their peers' ids.
    pub fn next_node_id(&self) -> NodeId {
        NodeId(u32::try_from(self.nodes.len()).expect("fewer than 2^32 nodes"))
    }

    /// The ids the next `N` nodes added will get, in the order they are
    /// added.
    pub fn next_node_ids<const N: usize>(&self) -> [NodeId; N] {
        let first = self.next_node_id().0;
        std::array::from_fn(|i| NodeId(first + u32::try_from(i).expect("fewer than 2^32 nodes")))
    }

    /// Adds a node; it gets its own random stream and its first deadline is armed.
    pub fn add_node(&mut self, node: Box<dyn Node>) -> NodeId {
        let id = self.next_node_id();
        self.net
            .node_rngs
            .push(rng::stream(self.seed, "node", u64::from(id.0)));
        self.nodes.push(node);
        self.armed.push(None);
        self.rearm(id.0 as usize);
        id
    }

    /// Adds one direction of a link. Its loss process is seeded from the
    /// scenario seed and the link's index, mixed with `config.seed`, so links
    /// are independent and reproducible.
    pub fn add_link(
        &mut self,
        name: impl Into<String>,
        config: LinkConfig,
    ) -> Result<LinkId, LossError> {
        let id = LinkId(u32::try_from(self.net.links.len()).expect("fewer than 2^32 links"));
        let seed = rng::derive_seed(self.seed, "link", u64::from(id.0)) ^ config.seed;
        let link = config.seed(seed).build()?;
        self.net.links.push(LinkSlot {
            link,
            name: name.into(),
            fec: None,
            feedback: None,
        });
        self.net.transit.push(None);
        self.net.depart_armed.push(None);
        Ok(id)
    }

    /// Packets from `src` to `dst` traverse `links` in order. Replaces an earlier route.
    ///
    /// # Panics
    /// If `links` is empty or longer than 65535 hops: a topology bug.
    pub fn add_route(&mut self, src: NodeId, dst: NodeId, links: Vec<LinkId>) {
        assert!(
            !links.is_empty() && links.len() <= usize::from(u16::MAX),
            "a route needs 1..=65535 links"
        );
        let idx = u32::try_from(self.net.routes.len()).expect("fewer than 2^32 routes");
        self.net.routes.push(links);
        self.net.route_of.insert((src, dst), idx);
    }

    /// Packets that finish crossing `link` with more of their route to go
    /// are handed to `node`'s [`Node::handle_transit`] instead of moving
    /// on by themselves: the node sits at the link's far end, as a base
    /// station between a wired and a wireless link.
    pub fn set_transit(&mut self, link: LinkId, node: NodeId) {
        self.net.transit[link.0 as usize] = Some(node);
    }

    /// Keeps link-layer reports for link `id` ([`LinkSlot::feedback`]).
    pub fn enable_link_feedback(&mut self, id: LinkId) {
        self.net.links[id.0 as usize].feedback = Some(VecDeque::new());
    }

    /// Sets link `id`'s link-layer FEC (see [`LinkSlot::fec`]); a node can
    /// change it per frame with [`Ctx::set_link_fec`].
    pub fn set_link_fec(&mut self, id: LinkId, code: Option<Arc<Bch>>) {
        self.net.links[id.0 as usize].fec = code;
    }

    /// Calls `sampler` every `interval` from time zero (the first call at zero).
    pub fn add_sampler(&mut self, interval: std::time::Duration, sampler: Sampler) {
        let idx = u32::try_from(self.samplers.len()).expect("fewer than 2^32 samplers");
        self.samplers.push((interval, sampler));
        let at = self.net.now;
        self.net.push(at, What::Sample { idx });
    }

    /// Runs `script` at `at` (for example to change link conditions).
    pub fn schedule(&mut self, at: Instant, script: Script) {
        let idx = u32::try_from(self.scripts.len()).expect("fewer than 2^32 scripts");
        self.scripts.push(Some(script));
        self.net.push(at, What::Script { idx });
    }

    /// The link `id`, for changing its conditions from a script.
    pub fn link_mut(&mut self, id: LinkId) -> &mut LinkSlot {
        &mut self.net.links[id.0 as usize]
    }

    /// Read access to nodes, links and counters.
    pub fn view(&self) -> SimView<'_> {
        SimView {
            nodes: &self.nodes,
            links: &self.net.links,
            stats: &self.net.stats,
        }
    }

    /// The node `id` as its concrete type, mutably (for commands from scripts).
    pub fn node_mut<T: Node>(&mut self, id: NodeId) -> Option<&mut T> {
        let n: &mut dyn Any = &mut *self.nodes.get_mut(id.0 as usize)?.as_mut();
        n.downcast_mut::<T>()
    }

    /// Re-reads every node's deadline (after a script changed nodes).
    pub fn rearm_all(&mut self) {
        for i in 0..self.nodes.len() {
            self.rearm(i);
        }
    }

    /// Run counters.
    pub fn stats(&self) -> &NetStats {
        &self.net.stats
    }

    /// Executes events up to and including `end`, then sets the clock to `end`.
    /// `progress` is called with the simulated time now and then (about every
    /// 65536 events), for progress bars.
    pub fn run_until(&mut self, end: Instant, progress: &mut dyn FnMut(Instant)) {
        while let Some(&Reverse((at, _, what))) = self.net.heap.peek() {
            if at > end {
                break;
            }
            self.net.heap.pop();
            self.net.now = at;
            self.net.stats.events += 1;
            if self.net.stats.events & 0xffff == 0 {
                progress(at);
            }
            self.dispatch(what);
        }
        self.net.now = self.net.now.max(end);
        progress(self.net.now);
    }

    fn dispatch(&mut self, what: What) {
        match what {
            What::Arrive { link, slot } => {
                let pkt = self.net.in_flight[slot as usize]
                    .take()
                    .expect("an arrival's packet is in flight");
                self.net.free.push(slot);
                let next = pkt.hop as usize + 1;
                if next < self.net.routes[pkt.route as usize].len() {
                    let mut pkt = pkt;
                    pkt.hop += 1;
                    match self.net.transit[link as usize] {
                        Some(node) => self.transit(node, LinkId(link), pkt),
                        None => self.net.forward(pkt),
                    }
                } else {
                    self.deliver(pkt);
                }
            }
            What::Depart { link } => self.net.depart(LinkId(link)),
            What::Wake { node } => {
                let i = node as usize;
                if self.armed[i] != Some(self.net.now) {
                    return; // superseded by an earlier wake-up
                }
                self.armed[i] = None;
                let due = self.nodes[i]
                    .poll_timeout()
                    .is_some_and(|t| t <= self.net.now);
                if due {
                    let mut ctx = Ctx {
                        net: &mut self.net,
                        me: NodeId(node),
                    };
                    self.nodes[i].handle_timeout(&mut ctx);
                }
                self.rearm(i);
            }
            What::Sample { idx } => {
                let now = self.net.now;
                let view = SimView {
                    nodes: &self.nodes,
                    links: &self.net.links,
                    stats: &self.net.stats,
                };
                let (interval, sampler) = &mut self.samplers[idx as usize];
                sampler(now, &view);
                let next = now + *interval;
                if !interval.is_zero() {
                    self.net.push(next, What::Sample { idx });
                }
            }
            What::Script { idx } => {
                if let Some(script) = self.scripts[idx as usize].take() {
                    script(self);
                    self.rearm_all();
                }
            }
        }
    }

    fn deliver(&mut self, pkt: Packet) {
        let i = pkt.dst.0 as usize;
        if i >= self.nodes.len() {
            self.net.stats.no_route += 1;
            return;
        }
        if pkt.corrupt.is_some() && !self.nodes[i].accepts_corrupted() {
            self.net.stats.corrupt_dropped += 1;
            return;
        }
        self.net.stats.delivered += 1;
        let mut ctx = Ctx {
            net: &mut self.net,
            me: pkt.dst,
        };
        self.nodes[i].handle_packet(&mut ctx, pkt);
        self.rearm(i);
    }

    fn transit(&mut self, node: NodeId, from: LinkId, pkt: Packet) {
        let i = node.0 as usize;
        if i >= self.nodes.len() {
            self.net.forward(pkt);
            return;
        }
        if pkt.corrupt.is_some() && !self.nodes[i].accepts_corrupted() {
            self.net.stats.corrupt_dropped += 1;
            return;
        }
        let mut ctx = Ctx {
            net: &mut self.net,
            me: node,
        };
        self.nodes[i].handle_transit(&mut ctx, from, pkt);
        self.rearm(i);
    }

    /// Pushes a wake-up if the node's deadline is earlier than the one armed.
    fn rearm(&mut self, i: usize) {
        let Some(t) = self.nodes[i].poll_timeout() else {
            return;
        };
        let t = t.max(self.net.now);
        if self.armed[i].is_none_or(|a| t < a) {
            self.armed[i] = Some(t);
            self.net.push(
                t,
                What::Wake {
                    node: u32::try_from(i).expect("node index fits u32"),
                },
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use groupwire_link::QueueLimit;
    use groupwire_link::qdisc::{ClassConfig, Qdisc};
    use groupwire_proto::Bitrate;

    use super::*;
    use crate::traffic::{Cbr, UdpSender, UdpSink, schedule};

    /// A best-effort flood at twice a 10 Mbit/s priority link's rate, and a
    /// 1 Mbit/s stream that is marked EF from `mark_at` on.
    fn priority_link(mark_at: Instant) -> (Simulator, NodeId, NodeId, LinkId) {
        let mut sim = Simulator::new(5);
        let [fg, bg, fg_sink, bg_sink] = sim.next_node_ids();
        let end = Instant::from_secs(4);
        let mut r = rng::stream(5, "test", 0);
        let fg_msgs = schedule(
            &mut Cbr::new(Bitrate::mbps(1), 972, Instant::ZERO),
            end,
            &mut r,
        );
        let bg_msgs = schedule(
            &mut Cbr::new(Bitrate::mbps(20), 972, Instant::ZERO),
            end,
            &mut r,
        );
        sim.add_node(Box::new(UdpSender::new(fg, fg_sink, 1, fg_msgs)));
        sim.add_node(Box::new(UdpSender::new(bg, bg_sink, 2, bg_msgs)));
        sim.add_node(Box::new(UdpSink::new().with_series()));
        sim.add_node(Box::new(UdpSink::new()));
        let qdisc = Qdisc::priority(vec![
            ClassConfig::new("ef")
                .dscp([Dscp::EF])
                .limit(QueueLimit::Packets(20)),
            ClassConfig::new("best-effort").limit(QueueLimit::Packets(50)),
        ]);
        let cfg = LinkConfig::new()
            .rate(Bitrate::mbps(10))
            .latency(Duration::from_millis(5))
            .qdisc(qdisc);
        let link = sim.add_link("router", cfg).expect("valid link");
        sim.add_route(fg, fg_sink, vec![link]);
        sim.add_route(bg, bg_sink, vec![link]);
        sim.schedule(
            mark_at,
            Box::new(move |sim| {
                sim.node_mut::<UdpSender>(fg)
                    .expect("the foreground sender")
                    .set_dscp(Dscp::EF);
            }),
        );
        sim.run_until(end + Duration::from_secs(1), &mut |_| {});
        (sim, fg_sink, bg_sink, link)
    }

    #[test]
    fn marked_packets_overtake_the_best_effort_queue_once_marked() {
        let (sim, fg_sink, bg_sink, link) = priority_link(Instant::from_secs(2));
        let view = sim.view();
        let fg = view.node::<UdpSink>(fg_sink).expect("sink");
        let series = fg.series.as_ref().expect("kept");
        let mean = |from: f64, to: f64| {
            let v: Vec<f64> = series
                .points
                .iter()
                .filter(|p| p.0 >= from && p.0 < to)
                .map(|p| p.1)
                .collect();
            v.iter().sum::<f64>() / v.len() as f64
        };
        // 1000 bytes at 10 Mbit/s is 0.8 ms: behind 50 of them, 40 ms.
        let (before, after) = (mean(1.0, 2.0), mean(2.5, 4.0));
        assert!(
            before > 40.0,
            "best effort waits behind the flood: {before}"
        );
        // Marked: at most the packet in service ahead of it, plus its own.
        assert!(after < 5.0 + 1.7, "EF overtakes: {after}");
        let stats = view.link(link).link.class_stats();
        assert!(stats[1].dropped > 0 && stats[0].dropped == 0, "{stats:?}");
        assert!(stats[0].enqueued > 0);
        // The flood gets what EF leaves: 9 of the 10 Mbit/s.
        let bg = view.node::<UdpSink>(bg_sink).expect("sink");
        assert!(bg.bytes > 0);
        assert_eq!(
            view.stats().dropped,
            stats.iter().map(|c| c.dropped).sum::<u64>()
        );
    }

    #[test]
    fn a_classful_run_is_deterministic() {
        let digest = |seed_shift: u64| {
            let (sim, fg_sink, _, link) = priority_link(Instant::from_millis(1500 + seed_shift));
            let view = sim.view();
            let sink = view.node::<UdpSink>(fg_sink).expect("sink");
            (
                sink.latency.summary(),
                view.link(link).link.class_stats().to_vec(),
                sim.stats().clone(),
            )
        };
        assert_eq!(format!("{:?}", digest(0)), format!("{:?}", digest(0)));
        assert_ne!(format!("{:?}", digest(0)), format!("{:?}", digest(100)));
    }
}
