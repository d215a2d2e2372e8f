//! Simulator nodes that run the TCP model: a sending host with any number
//! of connections (long-lived bulk flows, message streams, short flows with
//! Poisson arrivals and Pareto sizes) and a receiving host.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use groupwire_proto::Instant;
use rand_distr::{Distribution, Exp, Pareto};

use crate::core::{Ctx, Node, NodeId, Packet, Payload};
use crate::metrics::{LatencyStats, TimeSeries};
use crate::tcp::{Segment, TcpConfig, TcpReceiver, TcpSender};
use crate::traffic::Message;

/// What the application on one connection writes.
#[derive(Debug, Clone)]
pub enum TcpApp {
    /// An endless backlog (a long-lived flow).
    Bulk,
    /// `n` bytes at the start, then close (a short-lived flow).
    Bytes(u64),
    /// Messages written at their times; the receiver measures each
    /// message's latency when its last byte is delivered in order.
    Messages(Vec<Message>),
}

/// Short-lived flows: Poisson arrivals, Pareto sizes (Matsuzono et al. §4.1:
/// "Short-lived TCP flows arrive ... as a Poisson process with an average
/// rate of r_tcp flows per second. The size of each TCP flow follows Pareto
/// distribution with an average of s_tcp packets and shape parameter 1.5").
#[derive(Debug, Clone, PartialEq)]
pub struct ShortFlows {
    /// Mean arrivals per second.
    pub rate: f64,
    /// Mean flow size in packets (full segments).
    pub mean_packets: f64,
    /// Pareto shape (must be > 1 for a finite mean).
    pub shape: f64,
    /// First arrival no earlier than this.
    pub start: Instant,
}

#[derive(Debug)]
struct Conn {
    tcp: TcpSender,
    dst: NodeId,
    app: TcpApp,
    next_msg: usize,
    started: Instant,
    begun: bool,
    deadline: Option<Instant>,
    /// The striped payload this connection takes chunks from, if any.
    pool: Option<usize>,
    /// Bytes the application has written.
    written: u64,
}

/// A payload dealt in chunks to whichever connection of a group is free
/// (see [`TcpHost::connect_striped`]).
#[derive(Debug, Clone)]
struct Pool {
    remaining: u64,
    chunk: u64,
    sndbuf: u64,
    flows: Vec<u32>,
    /// Every connection has been told to close.
    closed: bool,
}

impl Conn {
    fn app_next(&self) -> Option<Instant> {
        match &self.app {
            TcpApp::Messages(m) => m.get(self.next_msg).map(|m| m.at),
            _ => None,
        }
    }
    fn wanted(&self) -> Option<Instant> {
        if !self.begun {
            return Some(self.started);
        }
        match (self.tcp.poll_timeout(), self.app_next()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// Flow ids at and above this are given to short flows.
const SHORT_FLOW_BASE: u32 = 1 << 24;
/// The deadline key of the short-flow arrival process.
const ARRIVALS: u32 = u32::MAX;

/// A host sending on TCP connections.
#[derive(Debug)]
pub struct TcpHost {
    me: NodeId,
    config: TcpConfig,
    conns: BTreeMap<u32, Conn>,
    deadlines: BTreeSet<(Instant, u32)>,
    short: Option<(ShortFlows, NodeId, Instant)>,
    next_short_id: u32,
    pools: Vec<Pool>,
    /// Completion times of finished finite flows: (start, duration, bytes).
    pub completed: Vec<(Instant, Duration, u64)>,
    /// Retransmissions on connections that have finished.
    retransmits_done: u64,
    /// Timeouts on connections that have finished.
    timeouts_done: u64,
}

impl TcpHost {
    /// A host at node `me` whose connections use `config`.
    pub fn new(me: NodeId, config: TcpConfig) -> Self {
        Self {
            me,
            config,
            conns: BTreeMap::new(),
            deadlines: BTreeSet::new(),
            short: None,
            next_short_id: SHORT_FLOW_BASE,
            pools: Vec::new(),
            completed: Vec::new(),
            retransmits_done: 0,
            timeouts_done: 0,
        }
    }

    /// Adds a connection `flow` to `dst` starting at `start`.
    pub fn connect(&mut self, flow: u32, dst: NodeId, app: TcpApp, start: Instant) {
        let mut tcp = TcpSender::new(self.config.clone());
        match &app {
            TcpApp::Bulk => tcp.set_bulk(),
            TcpApp::Bytes(_) | TcpApp::Messages(_) => {}
        }
        let conn = Conn {
            tcp,
            dst,
            app,
            next_msg: 0,
            started: start,
            begun: false,
            deadline: None,
            pool: None,
            written: 0,
        };
        self.conns.insert(flow, conn);
        self.update_deadline(flow);
    }

    /// Parallel socket striping: `total` bytes dealt in chunks of `chunk`
    /// to connections `flows` (to `dst`, all starting at `start`) by work
    /// stealing, as a sender with one thread per socket and a shared
    /// offset does: a connection takes the next chunk whenever it is free,
    /// that is when its written but unacknowledged bytes fit in a send
    /// buffer of `sndbuf` (a blocking `send` of the chunk has returned).
    /// Each connection closes once every chunk is dealt. A connection
    /// slowed by loss keeps what it holds (at most `sndbuf + chunk`) and
    /// the others take the rest.
    pub fn connect_striped(
        &mut self,
        flows: &[u32],
        dst: NodeId,
        total: u64,
        chunk: u64,
        sndbuf: u64,
        start: Instant,
    ) {
        let pool = self.pools.len();
        self.pools.push(Pool {
            remaining: total,
            chunk: chunk.max(1),
            sndbuf,
            flows: flows.to_vec(),
            closed: false,
        });
        for &flow in flows {
            self.connect(flow, dst, TcpApp::Bytes(0), start);
            if let Some(c) = self.conns.get_mut(&flow) {
                c.pool = Some(pool);
            }
        }
    }

    /// Generates short-lived flows to `dst` from `flows.start` on.
    pub fn short_flows(&mut self, flows: ShortFlows, dst: NodeId) {
        self.deadlines.insert((flows.start, ARRIVALS));
        self.short = Some((flows.clone(), dst, flows.start));
    }

    /// The sender of connection `flow`, while it exists.
    pub fn sender(&self, flow: u32) -> Option<&TcpSender> {
        self.conns.get(&flow).map(|c| &c.tcp)
    }

    /// Connections open now.
    pub fn open_connections(&self) -> usize {
        self.conns.len()
    }

    /// Retransmissions and timeouts over all connections, finished ones included.
    pub fn loss_recovery_counts(&self) -> (u64, u64) {
        let (mut r, mut t) = (self.retransmits_done, self.timeouts_done);
        for c in self.conns.values() {
            r += c.tcp.stats().retransmits;
            t += c.tcp.stats().timeouts;
        }
        (r, t)
    }

    /// Runs connection `flow`: app writes due, timers due, then sends what TCP allows.
    fn drive(&mut self, ctx: &mut Ctx<'_>, flow: u32, timeout: bool) {
        let now = ctx.now();
        let Some(c) = self.conns.get_mut(&flow) else {
            return;
        };
        let mut drained = None;
        if c.started <= now {
            if !c.begun {
                c.begun = true;
                if let (TcpApp::Bytes(n), None) = (&c.app, c.pool) {
                    c.tcp.write(now, *n);
                    c.tcp.close();
                }
            }
            if let Some(p) = c.pool {
                let pool = &mut self.pools[p];
                while pool.remaining > 0
                    && c.written - c.tcp.snd_una().min(c.written) <= pool.sndbuf
                {
                    let n = pool.chunk.min(pool.remaining);
                    c.tcp.write(now, n);
                    c.written += n;
                    pool.remaining -= n;
                }
                if pool.remaining == 0 {
                    c.tcp.close();
                    if !pool.closed {
                        pool.closed = true;
                        drained = Some(p);
                    }
                }
            }
            if let TcpApp::Messages(msgs) = &c.app {
                while let Some(m) = msgs.get(c.next_msg).filter(|m| m.at <= now) {
                    c.tcp.write(now, u64::from(m.size));
                    c.next_msg += 1;
                }
            }
            if timeout && c.tcp.poll_timeout().is_some_and(|t| t <= now) {
                c.tcp.handle_timeout(now);
            }
            while let Some(seg) = c.tcp.poll_segment(now) {
                ctx.send(Packet::new(
                    self.me,
                    c.dst,
                    flow,
                    seg.wire_len(),
                    Payload::Tcp(seg),
                ));
            }
        }
        let finished = c.tcp.is_finished();
        self.update_deadline(flow);
        if finished {
            if let Some(c) = self.conns.remove(&flow) {
                if let Some(d) = c.deadline {
                    self.deadlines.remove(&(d, flow));
                }
                self.retransmits_done += c.tcp.stats().retransmits;
                self.timeouts_done += c.tcp.stats().timeouts;
                self.completed
                    .push((c.started, now - c.started, c.tcp.stats().bytes_acked));
            }
        }
        // The last chunk is dealt: the other connections close too, idle
        // ones with a bare FIN now.
        if let Some(p) = drained {
            for other in self.pools[p].flows.clone() {
                if other != flow && self.conns.get(&other).is_some_and(|c| c.begun) {
                    self.drive(ctx, other, false);
                }
            }
        }
    }

    fn update_deadline(&mut self, flow: u32) {
        let Some(c) = self.conns.get_mut(&flow) else {
            return;
        };
        let new = c.wanted();
        if new != c.deadline {
            if let Some(old) = c.deadline {
                self.deadlines.remove(&(old, flow));
            }
            if let Some(n) = new {
                self.deadlines.insert((n, flow));
            }
            c.deadline = new;
        }
    }

    fn spawn_short_flow(&mut self, ctx: &mut Ctx<'_>) {
        let Some((flows, dst, next)) = self.short.clone() else {
            return;
        };
        let now = ctx.now();
        if next > now {
            return;
        }
        self.deadlines.remove(&(next, ARRIVALS));
        // Pareto with mean m and shape a has scale m (a - 1) / a.
        let scale = flows.mean_packets * (flows.shape - 1.0) / flows.shape;
        let pareto = Pareto::new(scale, flows.shape).expect("validated: positive scale and shape");
        let packets = pareto.sample(ctx.rng()).ceil().max(1.0);
        let bytes = (packets * f64::from(self.config.mss)).min(1e15) as u64;
        let id = self.next_short_id;
        self.next_short_id = self.next_short_id.wrapping_add(1).max(SHORT_FLOW_BASE);
        self.connect(id, dst, TcpApp::Bytes(bytes), now);
        let gap = Exp::new(flows.rate)
            .expect("validated: positive rate")
            .sample(ctx.rng());
        let at = now + Duration::from_secs_f64(gap);
        self.deadlines.insert((at, ARRIVALS));
        self.short = Some((flows, dst, at));
        self.drive(ctx, id, false);
    }
}

impl Node for TcpHost {
    fn handle_packet(&mut self, ctx: &mut Ctx<'_>, pkt: Packet) {
        let Payload::Tcp(seg) = pkt.payload else {
            return;
        };
        let now = ctx.now();
        if let Some(c) = self.conns.get_mut(&pkt.flow) {
            c.tcp.handle_ack(now, &seg);
            self.drive(ctx, pkt.flow, false);
        }
    }

    fn handle_timeout(&mut self, ctx: &mut Ctx<'_>) {
        let now = ctx.now();
        // Each due deadline is handled once per call, so a connection that
        // asks to be woken again at `now` cannot spin here.
        let due: Vec<(Instant, u32)> = self.deadlines.range(..=(now, u32::MAX)).copied().collect();
        for (t, flow) in due {
            if flow == ARRIVALS {
                self.spawn_short_flow(ctx);
            } else if self.deadlines.remove(&(t, flow)) {
                if let Some(c) = self.conns.get_mut(&flow) {
                    c.deadline = None;
                }
                self.drive(ctx, flow, true);
            }
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.deadlines.first().map(|&(t, _)| t)
    }
}

#[derive(Debug)]
struct RxConn {
    tcp: TcpReceiver,
    /// Cumulative end offsets and send times of expected messages.
    messages: Vec<(u64, Instant)>,
    next_msg: usize,
    deadline: Option<Instant>,
    last_ack: Option<Segment>,
}

/// A host receiving TCP connections; they open on their first segment.
#[derive(Debug)]
pub struct TcpSinkHost {
    me: NodeId,
    config: TcpConfig,
    conns: BTreeMap<(NodeId, u32), RxConn>,
    closed: BTreeMap<(NodeId, u32), Segment>,
    deadlines: BTreeSet<(Instant, NodeId, u32)>,
    expected: BTreeMap<(NodeId, u32), Vec<Message>>,
    delivered: BTreeMap<(NodeId, u32), u64>,
    complete: BTreeMap<(NodeId, u32), Instant>,
    /// Latency of every message of message-stream connections.
    pub latency: LatencyStats,
    /// Per-message latency over time (ms), for message streams.
    pub latency_series: TimeSeries,
}

impl TcpSinkHost {
    /// A receiving host at node `me`.
    pub fn new(me: NodeId, config: TcpConfig) -> Self {
        Self {
            me,
            config,
            conns: BTreeMap::new(),
            closed: BTreeMap::new(),
            deadlines: BTreeSet::new(),
            expected: BTreeMap::new(),
            delivered: BTreeMap::new(),
            complete: BTreeMap::new(),
            latency: LatencyStats::new(),
            latency_series: TimeSeries::new("latency_ms"),
        }
    }

    /// Tells the host which messages connection (`src`, `flow`) carries, so
    /// it can time each one.
    pub fn expect_messages(&mut self, src: NodeId, flow: u32, messages: Vec<Message>) {
        self.expected.insert((src, flow), messages);
    }

    /// In-order bytes delivered on connection (`src`, `flow`).
    pub fn delivered(&self, src: NodeId, flow: u32) -> u64 {
        self.delivered.get(&(src, flow)).copied().unwrap_or(0)
    }

    /// In-order bytes delivered on all connections.
    pub fn delivered_total(&self) -> u64 {
        self.delivered.values().sum()
    }

    /// When connection (`src`, `flow`) had delivered, in order, its last
    /// byte and its FIN (which rides on the last data segment); `None`
    /// while it has not.
    pub fn completed_at(&self, src: NodeId, flow: u32) -> Option<Instant> {
        self.complete.get(&(src, flow)).copied()
    }

    fn ack_out(&mut self, ctx: &mut Ctx<'_>, key: (NodeId, u32)) {
        let now = ctx.now();
        let Some(c) = self.conns.get_mut(&key) else {
            return;
        };
        while let Some(ack) = c.tcp.poll_ack(now) {
            c.last_ack = Some(ack);
            send_segment(ctx, self.me, key, ack);
        }
        let got = c.tcp.delivered();
        self.delivered.insert(key, got);
        if c.tcp.is_complete() {
            self.complete.entry(key).or_insert(now);
        }
        while let Some(&(end, sent)) = c.messages.get(c.next_msg) {
            if end > got {
                break;
            }
            let lat = now - sent;
            self.latency.record(lat);
            self.latency_series
                .push(sent.as_secs_f64(), lat.as_secs_f64() * 1e3);
            c.next_msg += 1;
        }
        let new = c.tcp.poll_timeout();
        if new != c.deadline {
            if let Some(old) = c.deadline {
                self.deadlines.remove(&(old, key.0, key.1));
            }
            if let Some(n) = new {
                self.deadlines.insert((n, key.0, key.1));
            }
            c.deadline = new;
        }
        if c.tcp.is_complete() && c.deadline.is_none() {
            // Keep only the final ACK, to repeat it if the sender missed it.
            if let Some(last) = c.last_ack {
                self.closed.insert(key, last);
            }
            self.conns.remove(&key);
        }
    }
}

impl Node for TcpSinkHost {
    fn handle_packet(&mut self, ctx: &mut Ctx<'_>, pkt: Packet) {
        let Payload::Tcp(seg) = pkt.payload else {
            return;
        };
        let key = (pkt.src, pkt.flow);
        if let Some(last) = self.closed.get(&key) {
            // The connection finished; the sender missed our last ACK.
            send_segment(ctx, self.me, key, *last);
            return;
        }
        let config = &self.config;
        let expected = &self.expected;
        let c = self.conns.entry(key).or_insert_with(|| {
            let mut end = 0u64;
            let messages = expected
                .get(&key)
                .map(|ms| {
                    ms.iter()
                        .map(|m| {
                            end += u64::from(m.size);
                            (end, m.at)
                        })
                        .collect()
                })
                .unwrap_or_default();
            RxConn {
                tcp: TcpReceiver::new(config),
                messages,
                next_msg: 0,
                deadline: None,
                last_ack: None,
            }
        });
        c.tcp.handle_segment(ctx.now(), &seg);
        self.ack_out(ctx, key);
    }

    fn handle_timeout(&mut self, ctx: &mut Ctx<'_>) {
        let now = ctx.now();
        let due: Vec<(Instant, NodeId, u32)> = self
            .deadlines
            .range(..=(now, NodeId(u32::MAX), u32::MAX))
            .copied()
            .collect();
        for (t, src, flow) in due {
            if !self.deadlines.remove(&(t, src, flow)) {
                continue;
            }
            if let Some(c) = self.conns.get_mut(&(src, flow)) {
                c.deadline = None;
                c.tcp.handle_timeout(now);
            }
            self.ack_out(ctx, (src, flow));
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.deadlines.first().map(|&(t, _, _)| t)
    }
}

/// Sends `seg` from `me` to connection `key` = (peer, flow).
fn send_segment(ctx: &mut Ctx<'_>, me: NodeId, key: (NodeId, u32), seg: Segment) {
    ctx.send(Packet::new(
        me,
        key.0,
        key.1,
        seg.wire_len(),
        Payload::Tcp(seg),
    ));
}

#[cfg(test)]
mod tests {
    use groupwire_link::link::LinkConfig;
    use groupwire_proto::Bitrate;

    use super::*;
    use crate::core::Simulator;
    use crate::tcp::TcpConfig;
    use crate::topology::PointToPoint;

    /// Work stealing over a lossy path: every byte arrives, the streams
    /// together carry exactly the payload in whole chunks (one of them
    /// also the short last chunk), and they do not carry equal shares.
    #[test]
    fn a_striped_payload_goes_to_whichever_stream_is_free() {
        let mut sim = Simulator::new(5);
        let a = sim.next_node_id();
        let b = NodeId(a.0 + 1);
        let cfg = TcpConfig::default()
            .rwnd(65536)
            .min_rto(Duration::from_secs(1));
        let mut host = TcpHost::new(a, cfg.clone());
        let (total, chunk) = (4_000_000, 65536);
        host.connect_striped(&[1, 2, 3, 4], b, total, chunk, 65536, Instant::ZERO);
        sim.add_node(Box::new(host));
        sim.add_node(Box::new(TcpSinkHost::new(b, cfg)));
        let rev = LinkConfig::new()
            .latency(Duration::from_millis(50))
            .rate(Bitrate::mbps(50));
        let fwd = rev
            .clone()
            .loss("bernoulli:0.01".parse().expect("a loss model"));
        PointToPoint::build(&mut sim, a, b, fwd, rev).expect("links");
        sim.run_until(Instant::from_secs(600), &mut |_| {});
        let view = sim.view();
        let sink = view.node::<TcpSinkHost>(b).expect("the sink");
        let got: Vec<u64> = (1..=4).map(|f| sink.delivered(a, f)).collect();
        assert_eq!(got.iter().sum::<u64>(), total, "{got:?}");
        let short = got.iter().filter(|&&g| g % chunk != 0).count();
        assert_eq!(short, 1, "{got:?}");
        assert!((1..=4).all(|f| sink.completed_at(a, f).is_some()));
        let host = view.node::<TcpHost>(a).expect("the host");
        assert_eq!(host.completed.len(), 4);
        assert!(got.iter().max() > got.iter().min(), "{got:?}");
    }
}
