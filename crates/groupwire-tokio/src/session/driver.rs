//! The session's task: the UDP socket, the TCP listener and connections,
//! the machine's timers, and the handles' wake-ups, in one select loop.

use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use groupwire_proto::units::MAX_UDP_PAYLOAD;
use groupwire_proto::{
    FRAME_PREFIX, Instant, Machine as _, StreamMachine as _, Transmit, Transport,
};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tracing::debug;

use super::stream::{Conn, ConnId, StreamIn};
use super::{ConnectError, Event, Inner, SessionOptions, Shared, StreamCounters};
use crate::driver::{Counters, GRO_BUFFER};
use crate::send::{send_transmits_marked, sleep_until};
use crate::socket::{BatchedUdpSocket, DatagramSocket, RecvBatch, is_transient};

/// How long a dialing side waits before opening a broken connection again.
const REDIAL: Duration = Duration::from_secs(1);

/// Most receive buffers per `recvmmsg`.
const RECV_BATCH: usize = 32;

/// A peer's stream: its datagram address and the stream's number (a
/// striped channel spreads over several, [`Transport::TcpFrame`]).
type StreamKey = (SocketAddr, u8);

/// The connections and what waits for them.
struct Streams {
    shared: Arc<Shared>,
    events: mpsc::Sender<StreamIn>,
    conns: BTreeMap<ConnId, Conn>,
    /// The connection that carries each peer's stream.
    by_addr: BTreeMap<StreamKey, ConnId>,
    /// The stream each bound connection carries.
    bound: BTreeMap<ConnId, u8>,
    /// Accepted connections not yet bound, oldest first, with when they came.
    unbound: VecDeque<(ConnId, tokio::time::Instant)>,
    /// Frames for streams whose connection has not bound yet.
    pending: BTreeMap<StreamKey, Vec<Bytes>>,
    /// Stream bytes gone for a stream outside a live connection's count
    /// (its frames dropped, or its connection closed: everything it held),
    /// to tell the machine ([`Streams::report_sent`]).
    gone: BTreeMap<StreamKey, usize>,
    /// Streams to dial again, and when.
    redial: BTreeMap<StreamKey, tokio::time::Instant>,
    /// Connected peers' addresses (an event names the peer only).
    peers: BTreeMap<groupwire_proto::session::PeerId, SocketAddr>,
    next: ConnId,
    max_unbound: usize,
    bind_timeout: Duration,
}

impl Streams {
    /// The driver clock's now, as a tokio instant for timers.
    fn now(&self) -> tokio::time::Instant {
        let c = self.shared.clock;
        c.to_tokio(c.now())
    }

    fn counters(&self) -> &StreamCounters {
        &self.shared.streams
    }

    /// Routes one frame the machine queued.
    fn route(&mut self, g: &mut Inner, t: Transmit) {
        let Transport::TcpFrame { stream } = t.transport else {
            return;
        };
        let key = (t.dst, stream);
        if let Some(c) = self.by_addr.get(&key).and_then(|id| self.conns.get(id)) {
            c.send(&self.shared.streams, t.payload);
            return;
        }
        if g.dial.contains_key(&t.dst) && self.dial(g, key) {
            self.route(g, t);
            return;
        }
        // The peer dials us: hold the frame until its connection binds.
        self.counters()
            .queued
            .fetch_add(t.payload.len(), Ordering::Relaxed);
        self.pending.entry(key).or_default().push(t.payload);
    }

    /// Opens the connection for stream `key` to the peer at its address
    /// (which we connected to); false if the machine has no bind frame for
    /// it (not established).
    fn dial(&mut self, g: &mut Inner, key: StreamKey) -> bool {
        if self.by_addr.contains_key(&key) {
            return true;
        }
        let (addr, stream) = key;
        let Some(tcp) = g.dial.get(&addr).copied() else {
            return false;
        };
        let Some(bind) = g
            .machine
            .peer_at(addr)
            .and_then(|p| g.machine.bind_frame(p, stream))
        else {
            return false;
        };
        let id = self.next_id();
        let conn = Conn::dial(
            &self.shared,
            id,
            tcp,
            bind,
            self.bind_timeout,
            self.events.clone(),
        );
        self.conns.insert(id, conn);
        self.bound.insert(id, stream);
        self.by_addr.insert(key, id);
        self.redial.remove(&key);
        self.flush_pending(key);
        true
    }

    fn next_id(&mut self) -> ConnId {
        self.next += 1;
        self.next
    }

    /// Hands what waited for stream `key`'s connection to it.
    fn flush_pending(&mut self, key: StreamKey) {
        let Some(frames) = self.pending.remove(&key) else {
            return;
        };
        let c = self.by_addr.get(&key).and_then(|id| self.conns.get(id));
        for f in frames {
            self.shared
                .streams
                .queued
                .fetch_sub(f.len(), Ordering::Relaxed);
            match c {
                Some(c) => c.send(&self.shared.streams, f),
                None => {
                    Counters::add(&self.shared.streams.frames_dropped, 1);
                    let gone = self.gone.entry(key).or_default();
                    *gone = gone.saturating_add(f.len() + FRAME_PREFIX);
                }
            }
        }
    }

    /// Takes an accepted connection; sheds the oldest unbound one past the
    /// limit.
    fn accept(&mut self, stream: tokio::net::TcpStream) {
        Counters::add(&self.counters().accepted, 1);
        while self.unbound.len() >= self.max_unbound {
            let Some((old, _)) = self.unbound.pop_front() else {
                break;
            };
            self.close(old, true);
        }
        let id = self.next_id();
        let conn = Conn::accepted(&self.shared, id, stream, self.events.clone());
        self.conns.insert(id, conn);
        let now = self.now();
        self.unbound.push_back((id, now));
    }

    /// What a connection's tasks said.
    fn on_stream(&mut self, g: &mut Inner, now: Instant, m: StreamIn) {
        match m {
            StreamIn::Frame { conn, data } => self.on_frame(g, now, conn, &data),
            StreamIn::Closed { conn } => {
                let unbound = self.unbound.iter().any(|&(c, _)| c == conn);
                self.close(conn, unbound);
            }
        }
    }

    /// A frame from connection `conn`.
    fn on_frame(&mut self, g: &mut Inner, now: Instant, conn: ConnId, data: &[u8]) {
        if !self.conns.contains_key(&conn) {
            return;
        }
        Counters::add(&self.counters().frames_received, 1);
        let stream = self.bound.get(&conn).copied();
        let Some((peer, stream)) = g.machine.accept_frame(now, stream, data) else {
            debug!(
                conn,
                "session stream: frame refused; closing the connection"
            );
            self.close(conn, true);
            return;
        };
        if let Some(i) = self.unbound.iter().position(|(c, _)| *c == conn) {
            self.unbound.remove(i);
            self.bound.insert(conn, stream);
            Counters::add(&self.counters().bound, 1);
            if let Some(addr) = g.machine.peer_addr(peer) {
                let key = (addr, stream);
                // The newest binding wins: a peer that dials again does so
                // because its last connection broke, even if its close has
                // not reached us yet.
                if self
                    .by_addr
                    .insert(key, conn)
                    .is_some_and(|old| old != conn)
                {
                    // The old connection's count is no longer read: start
                    // the machine's window afresh on this one.
                    self.gone.insert(key, usize::MAX);
                }
                self.flush_pending(key);
            }
        }
    }

    /// Connection `conn` is gone (or is to go).
    fn close(&mut self, conn: ConnId, refused: bool) {
        if let Some(c) = self.conns.remove(&conn) {
            c.close();
            if refused {
                Counters::add(&self.counters().refused, 1);
            }
        }
        self.unbound.retain(|(c, _)| *c != conn);
        self.bound.remove(&conn);
        let gone: Vec<StreamKey> = self
            .by_addr
            .iter()
            .filter(|&(_, &c)| c == conn)
            .map(|(&k, _)| k)
            .collect();
        for key in gone {
            self.by_addr.remove(&key);
            // What it held is lost with it (counted dropped): the machine
            // may hand its stream window to the next connection.
            self.gone.insert(key, usize::MAX);
            if self.peers.values().any(|&a| a == key.0) {
                let at = self.now() + REDIAL;
                self.redial.insert(key, at);
            }
        }
    }

    /// The peer at `addr` is gone: its connections and what waited for
    /// them.
    fn forget(&mut self, addr: SocketAddr) {
        let keys: Vec<StreamKey> = self
            .by_addr
            .keys()
            .chain(self.pending.keys())
            .chain(self.redial.keys())
            .filter(|k| k.0 == addr)
            .copied()
            .collect();
        for key in keys {
            if let Some(id) = self.by_addr.remove(&key) {
                self.close(id, false);
            }
            self.redial.remove(&key);
            self.flush_pending(key);
        }
    }

    /// Closes unbound connections past the bind timeout and redials what
    /// is due.
    fn on_timer(&mut self, g: &mut Inner) {
        let now = self.now();
        while let Some(&(id, at)) = self.unbound.front() {
            if now < at + self.bind_timeout {
                break;
            }
            self.close(id, true);
        }
        let due: Vec<StreamKey> = self
            .redial
            .iter()
            .filter(|&(_, &t)| t <= now)
            .map(|(&k, _)| k)
            .collect();
        for key in due {
            self.redial.remove(&key);
            if g.dial.contains_key(&key.0) {
                self.dial(g, key);
            }
        }
    }

    /// Tells the machine what left each peer's stream since the last call
    /// (written by a connection, or gone), so it hands over more frames
    /// ([`SessionConfig::stream_window`](groupwire_proto::session::SessionConfig::stream_window)).
    fn report_sent(&mut self, g: &mut Inner, now: Instant) {
        for (&(addr, stream), id) in &self.by_addr {
            if let Some(c) = self.conns.get_mut(id) {
                let n = c.take_sent();
                if n > 0 {
                    let n = usize::try_from(n).unwrap_or(usize::MAX);
                    g.machine.handle_stream_sent(now, addr, stream, n);
                }
            }
        }
        for ((addr, stream), n) in std::mem::take(&mut self.gone) {
            g.machine.handle_stream_sent(now, addr, stream, n);
        }
    }

    /// When [`on_timer`](Self::on_timer) has work.
    fn deadline(&self) -> Option<tokio::time::Instant> {
        let unbound = self.unbound.front().map(|&(_, at)| at + self.bind_timeout);
        unbound
            .into_iter()
            .chain(self.redial.values().copied())
            .min()
    }
}

/// Runs the session until [`Shared::stop`] is notified.
pub(super) async fn run(
    shared: Arc<Shared>,
    udp: BatchedUdpSocket,
    listener: TcpListener,
    app: mpsc::Sender<Event>,
    opts: SessionOptions,
) -> io::Result<()> {
    let clock = shared.clock;
    let slots = RECV_BATCH.min(udp.max_recv_batch()).max(1);
    let slot_len = if slots > 1 {
        GRO_BUFFER
    } else {
        MAX_UDP_PAYLOAD
    };
    let mut rx = RecvBatch::new(slots, slot_len);
    let (st_tx, mut st_rx) = mpsc::channel(256);
    let mut streams = Streams {
        shared: Arc::clone(&shared),
        events: st_tx,
        conns: BTreeMap::new(),
        by_addr: BTreeMap::new(),
        bound: BTreeMap::new(),
        unbound: VecDeque::new(),
        pending: BTreeMap::new(),
        gone: BTreeMap::new(),
        redial: BTreeMap::new(),
        peers: BTreeMap::new(),
        next: 0,
        max_unbound: opts.max_unbound_streams.max(1),
        // An accepted connection gets as long to bind as a handshake.
        bind_timeout: opts.config.handshake_timeout,
    };
    let mut out = Datagrams::default();
    let mark = opts.mark_dscp && udp.can_mark();
    let mut evs = Vec::new();
    let mut app_open = true;
    let result = loop {
        let deadline = {
            let mut g = shared.lock();
            drain(&mut g, &mut streams, clock.now(), &mut out, &mut evs);
            g.machine.poll_timeout().map(|t| clock.to_tokio(t))
        };
        out.send(&shared, &udp, mark).await;
        for e in evs.drain(..) {
            if !app_open {
                break;
            }
            // Wait only when the application is behind.
            app_open = match app.try_send(e) {
                Ok(()) => true,
                Err(mpsc::error::TrySendError::Full(e)) => app.send(e).await.is_ok(),
                Err(mpsc::error::TrySendError::Closed(_)) => false,
            };
        }
        let wake = deadline.into_iter().chain(streams.deadline()).min();
        tokio::select! {
            () = shared.stop.notified() => break Ok(()),
            () = shared.wake.notified() => {
                // Let the application's burst of sends finish, so its
                // datagrams leave together (GSO) rather than one per wake.
                tokio::task::yield_now().await;
            }
            r = udp.recv_batch(&mut rx) => match r {
                Ok(()) => {
                    let now = clock.now();
                    let c = &shared.udp;
                    Counters::add(&c.recv_calls, 1);
                    let mut g = shared.lock();
                    for (src, data) in rx.iter() {
                        Counters::add(&c.datagrams_received, 1);
                        Counters::add(&c.bytes_received, data.len() as u64);
                        g.machine.handle_datagram(now, src, data);
                    }
                }
                Err(e) if is_transient(&e) => {
                    Counters::add(&shared.udp.recv_errors, 1);
                    debug!(error = %e, "session: recv error ignored (a datagram was lost)");
                }
                Err(e) => break Err(e),
            },
            Some(m) = st_rx.recv() => {
                let now = clock.now();
                let mut g = shared.lock();
                streams.on_stream(&mut g, now, m);
                // Take what else is waiting, a bounded number per turn.
                for _ in 1..64 {
                    let Ok(m) = st_rx.try_recv() else { break };
                    streams.on_stream(&mut g, now, m);
                }
            }
            a = listener.accept() => match a {
                Ok((s, _)) => streams.accept(s),
                Err(e) => {
                    // Out of descriptors, or an aborted handshake: wait a
                    // little rather than spin, and go on.
                    debug!(error = %e, "session: accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
            () = sleep_until(wake) => {
                let mut g = shared.lock();
                g.machine.handle_timeout(clock.now());
                streams.on_timer(&mut g);
            }
        }
    };
    // Last words: what the handles queued goes out, then the connections
    // finish their queues (a second at most) and close.
    {
        let mut g = shared.lock();
        drain(&mut g, &mut streams, clock.now(), &mut out, &mut evs);
        g.closed = true;
        for (_, ws) in std::mem::take(&mut g.waiters) {
            for w in ws {
                let _ = w.send(Err(ConnectError::Closed));
            }
        }
        // Dropped, they say Closed.
        g.accepting.clear();
    }
    out.send(&shared, &udp, mark).await;
    for e in evs.drain(..) {
        if app_open {
            let _ = app.try_send(e);
        }
    }
    let conns = std::mem::take(&mut streams.conns);
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        for (_, c) in conns {
            c.finish().await;
        }
    })
    .await;
    result
}

/// A turn's datagrams, each with its code point, sent at the turn's end.
#[derive(Default)]
struct Datagrams {
    transmits: Vec<Transmit>,
    /// `marks[i]` is `transmits[i]`'s code point.
    marks: Vec<Option<u8>>,
    /// A GSO run's segments glued together.
    scratch: Vec<u8>,
}

impl Datagrams {
    fn push(&mut self, t: Transmit, dscp: Option<u8>) {
        self.transmits.push(t);
        self.marks.push(dscp);
    }

    /// Sends them, each run of one code point with that traffic class
    /// (when `mark`; in as few system calls as GSO allows), and counts
    /// them.
    async fn send(&mut self, shared: &Shared, udp: &BatchedUdpSocket, mark: bool) {
        let mut i = 0;
        while i < self.transmits.len() {
            let dscp = self.marks[i];
            let end = self.marks[i..]
                .iter()
                .position(|d| *d != dscp)
                .map_or(self.marks.len(), |n| i + n);
            // The traffic-class byte: the six DSCP bits above two ECN bits.
            let tos = if mark { dscp.map_or(0, |b| b << 2) } else { 0 };
            let t =
                send_transmits_marked(udp, &self.transmits[i..end], &mut self.scratch, tos).await;
            let c = &shared.udp;
            Counters::add(&c.send_calls, t.calls);
            Counters::add(&c.datagrams_sent, t.datagrams);
            Counters::add(&c.bytes_sent, t.bytes);
            Counters::add(&c.send_errors, t.errors);
            i = end;
        }
        self.transmits.clear();
        self.marks.clear();
    }
}

/// The machine's drain: datagrams to `out`, frames to their connections,
/// events to `evs` (after the driver's own bookkeeping).
fn drain(
    g: &mut Inner,
    streams: &mut Streams,
    now: Instant,
    out: &mut Datagrams,
    evs: &mut Vec<Event>,
) {
    streams.report_sent(g, now);
    loop {
        let mut any = false;
        while let Some((t, dscp)) = g.machine.poll_transmit_marked(now) {
            any = true;
            match t.transport {
                Transport::Udp => out.push(t, dscp),
                _ => streams.route(g, t),
            }
        }
        while let Some(e) = g.machine.poll_event() {
            any = true;
            on_event(g, streams, &e);
            evs.push(e);
        }
        if !any {
            break;
        }
    }
}

/// The driver's part of an event: connect waiters, the peer's stream.
fn on_event(g: &mut Inner, streams: &mut Streams, e: &Event) {
    match e {
        Event::PeerConnected { peer, addr } => {
            streams.peers.insert(*peer, *addr);
            for w in g.waiters.remove(peer).unwrap_or_default() {
                let _ = w.send(Ok(()));
            }
            for w in g.accepting.remove(addr).unwrap_or_default() {
                let _ = w.send(*peer);
            }
            // The dialing side opens the stream at once, so the peer can
            // send reliable frames before we do. Where both sides
            // connected at once, the one whose Hello made the handshake
            // dials, and the other waits for its connection, as if it had
            // not connected: one connection, so one order of frames.
            if g.dial.contains_key(addr) {
                if g.machine.dialed(*peer) {
                    streams.dial(g, (*addr, 0));
                } else {
                    g.dial.remove(addr);
                }
            }
        }
        Event::PeerFailed { peer, addr } => {
            g.dial.remove(addr);
            for w in g.waiters.remove(peer).unwrap_or_default() {
                let _ = w.send(Err(ConnectError::NoAnswer(*addr)));
            }
        }
        Event::PeerGone { peer } => {
            if let Some(addr) = streams.peers.remove(peer) {
                g.dial.remove(&addr);
                streams.forget(addr);
            }
        }
        _ => {}
    }
}
