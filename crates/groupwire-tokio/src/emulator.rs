//! A userspace UDP link emulator: the `groupwire-link` models on real sockets.
//!
//! ```text
//!  client A ──┐                 forward Link               ┌── upstream socket (A) ──┐
//!  client B ──┼─► listen socket ─────────────► held until ─┼── upstream socket (B) ──┼─► target
//!             │                                 Deliver.at │                         │
//!             └◄──────────────── reverse Link ◄────────────┴◄────────────────────────┘
//! ```
//!
//! The emulator listens on one address and forwards every datagram to a
//! target address, from one upstream socket per client address it has seen
//! (so the target sees each client as a distinct peer and its replies find
//! their way back). Each direction has its own [`Link`] (loss, rate, delay,
//! jitter, drop-tail queue), seeded independently. A datagram offered to a
//! link at its arrival time is held until its [`Fate::Deliver`] time, then
//! sent on.
//!
//! Memory is bounded: at most [`EmulatorConfig::max_clients`] upstream
//! sockets (the least recently seen client is forgotten first) and at most
//! [`EmulatorConfig::max_held`] datagrams in flight per direction (the rest
//! are dropped and counted in [`DirectionStats::overflow`]; give the link a
//! queue limit to model a real bottleneck instead).
//!
//! **Socket buffers.** Every socket asks the kernel for
//! [`EmulatorConfig::socket_buffer`] bytes of `SO_RCVBUF` and `SO_SNDBUF`
//! (4 MiB by default), so a burst on a busy host waits in the kernel
//! instead of overflowing it. Linux caps the request at
//! `net.core.rmem_max` / `wmem_max`; what the kernel granted is in
//! [`EmulatorStats::buffers`] (`groupwire emulate` says so when it is
//! less). Datagrams the kernel still dropped because a receive buffer was
//! full are **not** link loss: they are read from the sockets' `drops`
//! column in `/proc/net/udp` (Linux; 0 elsewhere) into
//! [`DirectionStats::socket_drops`], apart from the modelled
//! [`DirectionStats::lost`].
//!
//! **TCP.** With [`EmulatorConfig::tcp`] the emulator also listens for TCP
//! on its port and relays each connection to the target's port, cutting
//! the bytes into segments that cross the same two links as the datagrams
//! (so a bulk transfer and a telepointer share one queue, as on a real
//! path): a lost segment costs a round trip and holds the bytes behind it,
//! as TCP's retransmission would, and halves the connection's window, as
//! Reno's congestion control would (the [`tcp`](mod@tcp) module says how
//! exactly). Segments count in [`DirectionStats`] like datagrams, and in
//! [`EmulatorStats::tcp`].

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, BinaryHeap};
use std::future::Future;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use bytes::Bytes;
use groupwire_link::{Fate, Link, LinkConfig, LossError, LossModel};
use groupwire_proto::units::{IP_UDP_OVERHEAD, MAX_UDP_PAYLOAD};
use groupwire_proto::{Instant, Transmit, Transport};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tracing::{debug, trace};

use crate::clock::Clock;
use crate::send::send_transmits;
use crate::socket::{bind_with_tcp, is_transient};
use tcp::{Conn, MSS, Segment, TCP_OVERHEAD, TcpCongestion, TcpIn, TcpStats};

/// What the emulator does with a datagram the link corrupted (bit-error
/// loss models only).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum CorruptPolicy {
    /// Drop it, as the receiver's UDP checksum would (the default).
    #[default]
    Drop,
    /// Flip its bits and forward it, to test a protocol's own integrity
    /// checks. Flips that fall on the modelled IP and UDP headers are
    /// ignored; the payload carries the rest.
    Forward,
}

/// Configuration of an [`Emulator`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct EmulatorConfig {
    /// Where clients send.
    pub listen: SocketAddr,
    /// Where the emulator forwards their datagrams.
    pub forward: SocketAddr,
    /// The client → target direction.
    pub forward_link: LinkConfig,
    /// The target → client direction.
    pub reverse_link: LinkConfig,
    /// What to do with corrupted datagrams.
    pub corrupt: CorruptPolicy,
    /// Most client addresses with an upstream socket at once.
    pub max_clients: usize,
    /// Most datagrams held (in the link) per direction.
    pub max_held: usize,
    /// Kernel buffer bytes asked for each socket (see the module docs).
    pub socket_buffer: usize,
    /// Also relay TCP: listen for TCP on the listen address's port and
    /// relay each connection to the target address's port, its segments
    /// through the same links (see [`tcp`](mod@tcp)). Off by default.
    pub tcp: bool,
    /// Most bytes per direction of a relayed TCP connection between the
    /// relay's read and its write (its receive window: the congestion
    /// window grows no further); `None`: twice the forward
    /// link's bandwidth-delay product when the emulator starts (64 KiB to
    /// 16 MiB; 16 MiB on an unlimited link).
    pub tcp_window: Option<usize>,
    /// How a relayed connection's window reacts to loss (default Reno's).
    pub tcp_congestion: TcpCongestion,
}

impl EmulatorConfig {
    /// Perfect links both ways, 64 clients, 8192 datagrams held per direction,
    /// 4 MiB socket buffers.
    pub fn new(listen: SocketAddr, forward: SocketAddr) -> Self {
        Self {
            listen,
            forward,
            forward_link: LinkConfig::new(),
            reverse_link: LinkConfig::new(),
            corrupt: CorruptPolicy::Drop,
            max_clients: DEFAULT_MAX_CLIENTS,
            max_held: DEFAULT_MAX_HELD,
            socket_buffer: DEFAULT_SOCKET_BUFFER,
            tcp: false,
            tcp_window: None,
            tcp_congestion: TcpCongestion::Reno,
        }
    }
    /// Sets the client → target link.
    pub fn forward_link(mut self, link: LinkConfig) -> Self {
        self.forward_link = link;
        self
    }
    /// Sets the target → client link.
    pub fn reverse_link(mut self, link: LinkConfig) -> Self {
        self.reverse_link = link;
        self
    }
    /// Both links as `link` (rate, delay, queue), `loss` on the client →
    /// target one only: the usual path for a one-way transfer, where the
    /// feedback should arrive. The forward link is seeded with `seed`, the
    /// reverse one with `seed + 1`, so the two draw independently.
    pub fn lossy_forward(self, link: LinkConfig, seed: u64, loss: LossModel) -> Self {
        self.forward_link(link.clone().seed(seed).loss(loss))
            .reverse_link(link.seed(seed.wrapping_add(1)))
    }
    /// Sets the corrupted-datagram policy.
    pub fn corrupt(mut self, policy: CorruptPolicy) -> Self {
        self.corrupt = policy;
        self
    }
    /// Sets the client limit (at least 1).
    pub fn max_clients(mut self, n: usize) -> Self {
        self.max_clients = n.max(1);
        self
    }
    /// Sets the per-direction limit on held datagrams (at least 1).
    pub fn max_held(mut self, n: usize) -> Self {
        self.max_held = n.max(1);
        self
    }
    /// Sets the kernel buffer bytes asked for each socket.
    pub fn socket_buffer(mut self, bytes: usize) -> Self {
        self.socket_buffer = bytes;
        self
    }
    /// Relays TCP too (see [`tcp`](Self::tcp)).
    pub fn tcp(mut self, on: bool) -> Self {
        self.tcp = on;
        self
    }
    /// Sets how the relayed connections' windows react to loss.
    pub fn tcp_congestion(mut self, cc: TcpCongestion) -> Self {
        self.tcp_congestion = cc;
        self
    }
    /// Sets the relayed TCP connections' window (at least one segment).
    pub fn tcp_window(mut self, bytes: usize) -> Self {
        self.tcp_window = Some(bytes.max(MSS));
        self
    }
}

/// Kernel socket buffers asked for by default (4 MiB, as the tunnel asks).
pub const DEFAULT_SOCKET_BUFFER: usize = 4 << 20;

/// Counters of one direction.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct DirectionStats {
    /// Datagrams that entered the direction.
    pub received: u64,
    /// Their payload bytes.
    pub received_bytes: u64,
    /// Datagrams sent on at their delivery time.
    pub delivered: u64,
    /// Their payload bytes.
    pub delivered_bytes: u64,
    /// Lost by the loss model.
    pub lost: u64,
    /// Dropped at the tail of the link's queue.
    pub queue_drops: u64,
    /// Corrupted by the loss model (dropped or forwarded per [`CorruptPolicy`]).
    pub corrupted: u64,
    /// Dropped because [`EmulatorConfig::max_held`] datagrams were in flight.
    pub overflow: u64,
    /// Sends the OS refused (counted as lost).
    pub send_errors: u64,
    /// Datagrams the kernel dropped on this direction's receiving sockets
    /// (receive buffer full): host overload, not the modelled link. The
    /// listen socket's for the forward direction, the upstream sockets'
    /// for the reverse one. Linux only (from `/proc/net/udp`).
    pub socket_drops: u64,
    /// Datagrams held right now.
    pub held: u64,
    /// Most datagrams held at once.
    pub max_held: u64,
}

/// Counters of an [`Emulator`].
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct EmulatorStats {
    /// Client → target.
    pub forward: DirectionStats,
    /// Target → client.
    pub reverse: DirectionStats,
    /// Clients with an upstream socket now.
    pub clients: u64,
    /// Clients forgotten to stay within [`EmulatorConfig::max_clients`].
    pub clients_evicted: u64,
    /// Kernel buffer sizes the listen socket got.
    pub buffers: BufferSizes,
    /// The TCP relay's counters ([`EmulatorConfig::tcp`]).
    pub tcp: TcpStats,
}

/// Socket buffer sizes asked for and granted (as the kernel reports them:
/// Linux doubles the request for its bookkeeping and caps it at
/// `net.core.rmem_max` / `wmem_max`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct BufferSizes {
    /// Bytes asked for, each of `SO_RCVBUF` and `SO_SNDBUF`.
    pub asked: usize,
    /// `SO_RCVBUF` as read back.
    pub recv: usize,
    /// `SO_SNDBUF` as read back.
    pub send: usize,
}

impl BufferSizes {
    /// The kernel granted less than asked for (Linux reports double what it
    /// grants, so a full grant reads back as at least `asked`).
    pub fn capped(&self) -> bool {
        self.recv < self.asked || self.send < self.asked
    }
}

/// A UDP socket bound to `addr` with `bytes` of kernel buffers asked for.
fn sized_socket(addr: SocketAddr, bytes: usize) -> io::Result<(UdpSocket, BufferSizes)> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    // The kernel caps these at its limits; a refusal is not fatal.
    let _ = s.set_recv_buffer_size(bytes);
    let _ = s.set_send_buffer_size(bytes);
    s.set_nonblocking(true)?;
    s.bind(&addr.into())?;
    let sizes = BufferSizes {
        asked: bytes,
        recv: s.recv_buffer_size().unwrap_or(0),
        send: s.send_buffer_size().unwrap_or(0),
    };
    Ok((UdpSocket::from_std(s.into())?, sizes))
}

/// Datagrams the kernel dropped on the UDP socket bound to local `port`
/// (the `drops` column of `/proc/net/udp` and `/proc/net/udp6`), or 0
/// where there is no such file.
fn kernel_drops(ports: &[u16]) -> u64 {
    let mut total = 0;
    for file in ["/proc/net/udp", "/proc/net/udp6"] {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let port = cols
                .get(1)
                .and_then(|a| a.rsplit(':').next())
                .and_then(|p| u16::from_str_radix(p, 16).ok());
            if port.is_some_and(|p| ports.contains(&p)) {
                total += cols.last().and_then(|d| d.parse::<u64>().ok()).unwrap_or(0);
            }
        }
    }
    total
}

/// Why an emulator could not start.
#[derive(Debug)]
#[non_exhaustive]
pub enum EmulatorError {
    /// A link's loss model is invalid or its trace unreadable.
    Link(LossError),
    /// A link has a classful queue discipline: the emulator serves each
    /// direction as one FIFO (it reads no DiffServ marks from its sockets);
    /// the disciplines run in the simulator.
    Classful,
    /// The listen socket could not be bound.
    Io(io::Error),
    /// The TCP relay's listener could not be bound on the listen port.
    Tcp(io::Error),
}

impl std::fmt::Display for EmulatorError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Link(e) => write!(f, "link model: {e}"),
            Self::Classful => f.write_str(
                "link model: the emulator serves each direction as one FIFO; priority, DRR and WFQ queues run in the simulator",
            ),
            Self::Io(e) => write!(f, "listen socket: {e}"),
            Self::Tcp(e) => write!(
                f,
                "TCP relay: cannot listen for TCP on the emulator's port (another program has it?): {e}"
            ),
        }
    }
}

impl std::error::Error for EmulatorError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Link(e) => Some(e),
            Self::Classful => None,
            Self::Io(e) | Self::Tcp(e) => Some(e),
        }
    }
}

/// An emulator forwarding on its own task ([`Emulator::spawn`]).
#[derive(Debug)]
pub struct RunningEmulator {
    addr: SocketAddr,
    stats: watch::Receiver<EmulatorStats>,
    stop: tokio::sync::oneshot::Sender<()>,
    task: JoinHandle<io::Result<EmulatorStats>>,
}

impl RunningEmulator {
    /// The address clients send to (the TCP relay, if on, shares it).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Live counters, updated after every datagram.
    pub fn stats(&self) -> watch::Receiver<EmulatorStats> {
        self.stats.clone()
    }

    /// Stops forwarding and returns the final counters; an error if the
    /// listen socket failed (see [`Emulator::run`]) or the task panicked.
    pub async fn stop(self) -> io::Result<EmulatorStats> {
        let _ = self.stop.send(());
        self.task.await.map_err(io::Error::other)?
    }
}

/// A running-to-be link emulator: [`bind`](Emulator::bind), then
/// [`run`](Emulator::run) until a shutdown future completes.
#[derive(Debug)]
pub struct Emulator {
    cfg: EmulatorConfig,
    listen: Arc<UdpSocket>,
    links: [Link; 2],
    clock: Clock,
    stats_tx: watch::Sender<EmulatorStats>,
    buffers: BufferSizes,
    tcp: Option<Arc<TcpListener>>,
    tcp_window: usize,
}

impl Emulator {
    /// Builds both links and binds the listen socket. Time starts now.
    pub async fn bind(cfg: EmulatorConfig) -> Result<Self, EmulatorError> {
        let forward = cfg.forward_link.build().map_err(EmulatorError::Link)?;
        let reverse = cfg.reverse_link.build().map_err(EmulatorError::Link)?;
        if forward.is_classful() || reverse.is_classful() {
            return Err(EmulatorError::Classful);
        }
        let sized = |at| {
            let (s, sizes) = sized_socket(at, cfg.socket_buffer)?;
            let local = s.local_addr()?;
            Ok(((s, sizes), local))
        };
        let ((listen, buffers), tcp) = if cfg.tcp {
            let (u, l) = bind_with_tcp(cfg.listen, sized)
                .await
                .map_err(EmulatorError::Tcp)?;
            (u, Some(Arc::new(l)))
        } else {
            let (u, _) = sized(cfg.listen).map_err(EmulatorError::Io)?;
            (u, None)
        };
        let epoch = Instant::ZERO;
        let rtt = forward.delay_at(epoch) + reverse.delay_at(epoch);
        let tcp_window = cfg
            .tcp_window
            .unwrap_or_else(|| tcp::auto_window(forward.rate_at(epoch).map(|r| r.as_bps()), rtt));
        let (stats_tx, _) = watch::channel(EmulatorStats::default());
        Ok(Self {
            tcp,
            tcp_window,
            buffers,
            cfg,
            listen: Arc::new(listen),
            links: [forward, reverse],
            clock: Clock::start(),
            stats_tx,
        })
    }

    /// What the kernel granted the listen socket's buffers.
    pub fn buffers(&self) -> BufferSizes {
        self.buffers
    }

    /// The address clients should send to.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listen.local_addr()
    }

    /// Where clients connect for the TCP relay (the same port as
    /// [`local_addr`](Self::local_addr)); `None` without
    /// [`EmulatorConfig::tcp`].
    pub fn tcp_addr(&self) -> Option<SocketAddr> {
        self.tcp.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// Bytes per direction each relayed TCP connection may hold.
    pub fn tcp_window(&self) -> usize {
        self.tcp_window
    }

    /// Live counters, updated after every datagram.
    pub fn stats(&self) -> watch::Receiver<EmulatorStats> {
        self.stats_tx.subscribe()
    }

    /// Runs the emulator on a task of its own until
    /// [`RunningEmulator::stop`], which returns the final counters: the
    /// usual way to put an emulated path between two endpoints in a
    /// program or a test (`run` with a shutdown future of your own is the
    /// general form).
    pub fn spawn(self) -> io::Result<RunningEmulator> {
        let addr = self.local_addr()?;
        let stats = self.stats();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(self.run(async move {
            let _ = stopped.await;
        }));
        Ok(RunningEmulator {
            addr,
            stats,
            stop,
            task,
        })
    }

    /// Forwards datagrams until `shutdown` completes; returns the final
    /// counters. Datagrams still held then are discarded. Errors only if
    /// the listen socket fails for a reason other than a lost datagram.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> io::Result<EmulatorStats> {
        let (up_tx, up_rx) = mpsc::channel(UPSTREAM_CHANNEL);
        let (tcp_tx, tcp_rx) = mpsc::channel(UPSTREAM_CHANNEL);
        let mut state = State {
            tcp: self.tcp,
            tcp_window: self.tcp_window,
            tcp_tx,
            conns: BTreeMap::new(),
            next_conn: 0,
            accept_after: None,
            cfg: self.cfg,
            listen: self.listen,
            links: self.links,
            clock: self.clock,
            stats_tx: self.stats_tx,
            clients: BTreeMap::new(),
            held: BinaryHeap::new(),
            scratch: Vec::new(),
            next_seq: 0,
            last_seen: 0,
            stats: EmulatorStats {
                buffers: self.buffers,
                ..EmulatorStats::default()
            },
            up_tx,
        };
        let result = state.run(up_rx, tcp_rx, shutdown).await;
        state.count_socket_drops();
        for (_, c) in std::mem::take(&mut state.clients) {
            c.reader.abort();
        }
        for (_, c) in std::mem::take(&mut state.conns) {
            c.abort();
        }
        state.stats.tcp.open = 0;
        state.stats.forward.held = 0;
        state.stats.reverse.held = 0;
        state.stats.clients = 0;
        state.stats_tx.send_replace(state.stats.clone());
        result.map(|()| state.stats)
    }
}

/// Index of a direction in `State::links` and the stats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dir {
    Forward = 0,
    Reverse = 1,
}

struct Client {
    socket: Arc<UdpSocket>,
    reader: JoinHandle<()>,
    /// Value of `State::last_seen` when it last sent (for eviction).
    seen: u64,
}

/// A packet waiting for its time.
struct Held {
    at: Instant,
    seq: u64,
    dir: Dir,
    to: To,
}

/// What a held packet is and where it goes.
enum To {
    /// A datagram, due out of `socket` to `dst`.
    Udp {
        socket: Arc<UdpSocket>,
        dst: SocketAddr,
        data: Vec<u8>,
    },
    /// A TCP segment of connection `conn`, due to its writer.
    Tcp { conn: u64, segment: Segment },
    /// A TCP segment the link lost at `lost`, due to be offered to it
    /// again if the sender would know by now ([`tcp::resend_at`]).
    Resend {
        conn: u64,
        segment: Segment,
        lost: Instant,
        probed: bool,
    },
}

impl PartialEq for Held {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Held {}
impl PartialOrd for Held {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Held {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

struct State {
    cfg: EmulatorConfig,
    listen: Arc<UdpSocket>,
    links: [Link; 2],
    clock: Clock,
    stats_tx: watch::Sender<EmulatorStats>,
    clients: BTreeMap<SocketAddr, Client>,
    held: BinaryHeap<Reverse<Held>>,
    /// Glues a GSO run together ([`send_transmits`]); kept to allocate once.
    scratch: Vec<u8>,
    next_seq: u64,
    last_seen: u64,
    stats: EmulatorStats,
    up_tx: mpsc::Sender<(SocketAddr, Vec<u8>)>,
    tcp: Option<Arc<TcpListener>>,
    tcp_window: usize,
    tcp_tx: mpsc::Sender<TcpIn>,
    conns: BTreeMap<u64, Conn>,
    next_conn: u64,
    /// After a failed accept (out of descriptors), when to try again.
    accept_after: Option<tokio::time::Instant>,
}

impl State {
    /// Kernel drops now on the listen socket and the upstream sockets.
    fn kernel_drops(&self) -> [u64; 2] {
        let port = |s: &UdpSocket| s.local_addr().map_or(0, |a| a.port());
        let up: Vec<u16> = self.clients.values().map(|c| port(&c.socket)).collect();
        [kernel_drops(&[port(&self.listen)]), kernel_drops(&up)]
    }

    fn count_socket_drops(&mut self) {
        // Every socket was bound by this emulator, so its count is ours
        // from zero; a forgotten upstream socket's drops stay counted.
        let [listen, up] = self.kernel_drops();
        self.stats.forward.socket_drops = listen;
        self.stats.reverse.socket_drops = self.stats.reverse.socket_drops.max(up);
    }

    async fn run(
        &mut self,
        mut up_rx: mpsc::Receiver<(SocketAddr, Vec<u8>)>,
        mut tcp_rx: mpsc::Receiver<TcpIn>,
        shutdown: impl Future<Output = ()>,
    ) -> io::Result<()> {
        let mut buf = vec![0u8; MAX_UDP_PAYLOAD];
        tokio::pin!(shutdown);
        let mut drops_tick = tokio::time::interval(DROPS_EVERY);
        loop {
            self.deliver_due().await;
            self.stats_tx.send_replace(self.stats.clone());
            let next = self.held.peek().map(|Reverse(h)| self.clock.to_tokio(h.at));
            let listen = Arc::clone(&self.listen);
            let tcp = self.tcp.clone();
            let after = self.accept_after;
            tokio::select! {
                () = &mut shutdown => return Ok(()),
                r = listen.recv_from(&mut buf) => match r {
                    Ok((n, src)) => self.handle_client_datagram(src, &buf[..n]).await,
                    Err(e) if is_transient(&e) => debug!(error = %e, "listen socket: datagram lost"),
                    Err(e) => return Err(e),
                },
                Some((client, data)) = up_rx.recv() => self.handle_target_datagram(client, data),
                r = accept(tcp, after) => self.on_accept(r),
                Some(m) = tcp_rx.recv() => self.on_tcp(m),
                _ = drops_tick.tick() => self.count_socket_drops(),
                () = crate::sleep_until(next) => {}
            }
        }
    }

    /// A datagram from a client: into the forward link, from its upstream socket.
    async fn handle_client_datagram(&mut self, src: SocketAddr, data: &[u8]) {
        let socket = match self.client_socket(src).await {
            Ok(s) => s,
            Err(e) => {
                debug!(client = %src, error = %e, "cannot open an upstream socket; datagram dropped");
                let s = &mut self.stats.forward;
                s.received += 1;
                s.send_errors += 1;
                return;
            }
        };
        let dst = self.cfg.forward;
        self.offer(Dir::Forward, socket, dst, data.to_vec());
    }

    /// A datagram from the target toward `client`: into the reverse link.
    fn handle_target_datagram(&mut self, client: SocketAddr, data: Vec<u8>) {
        let socket = Arc::clone(&self.listen);
        self.offer(Dir::Reverse, socket, client, data);
    }

    /// Offers one datagram to a direction's link and holds it if it survives.
    fn offer(&mut self, dir: Dir, socket: Arc<UdpSocket>, dst: SocketAddr, mut data: Vec<u8>) {
        let now = self.clock.now();
        let stats = match dir {
            Dir::Forward => &mut self.stats.forward,
            Dir::Reverse => &mut self.stats.reverse,
        };
        let room = stats.held < self.cfg.max_held as u64;
        // The link sees the datagram as it is on the wire, headers included,
        // as the simulator does.
        let Some(at) = admit(
            &mut self.links[dir as usize],
            now,
            &mut data,
            IP_UDP_OVERHEAD,
            self.cfg.corrupt,
            room,
            stats,
        ) else {
            return;
        };
        self.hold(at, dir, To::Udp { socket, dst, data });
    }

    fn hold(&mut self, at: Instant, dir: Dir, to: To) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.held.push(Reverse(Held { at, seq, dir, to }));
    }

    fn dir_stats(&mut self, dir: Dir) -> &mut DirectionStats {
        match dir {
            Dir::Forward => &mut self.stats.forward,
            Dir::Reverse => &mut self.stats.reverse,
        }
    }

    /// A TCP connection came (or accepting failed: out of descriptors, so
    /// wait a little rather than spin).
    fn on_accept(&mut self, r: io::Result<(TcpStream, SocketAddr)>) {
        let (stream, from) = match r {
            Ok(a) => a,
            Err(e) => {
                debug!(error = %e, "TCP relay: accept failed; trying again in 50 ms");
                let again = self.clock.now() + std::time::Duration::from_millis(50);
                self.accept_after = Some(self.clock.to_tokio(again));
                return;
            }
        };
        self.accept_after = None;
        if self.conns.len() >= self.cfg.max_clients {
            debug!(%from, "TCP relay: max_clients connections open; refused");
            self.stats.tcp.refused += 1;
            return;
        }
        self.next_conn += 1;
        let id = self.next_conn;
        let conn = Conn::start(
            id,
            stream,
            self.cfg.forward,
            self.tcp_window,
            self.cfg.tcp_congestion,
            self.tcp_tx.clone(),
        );
        self.conns.insert(id, conn);
        self.stats.tcp.accepted += 1;
        self.stats.tcp.open = self.conns.len() as u64;
    }

    /// What a relayed connection's tasks said.
    fn on_tcp(&mut self, m: TcpIn) {
        match m {
            TcpIn::Opened { id, writers, tasks } => match self.conns.get_mut(&id) {
                Some(c) => c.opened(writers, tasks),
                None => tasks.iter().for_each(JoinHandle::abort),
            },
            TcpIn::Read { id, dir, segment } => {
                if self.conns.contains_key(&id) {
                    self.offer_segment(dir, id, segment);
                }
            }
            TcpIn::Closed { id, dir } => {
                if self.conns.get_mut(&id).is_some_and(|c| c.close_half(dir))
                    && let Some(c) = self.conns.remove(&id)
                {
                    c.abort();
                }
            }
            TcpIn::Failed { id } => {
                if let Some(c) = self.conns.remove(&id) {
                    c.abort();
                    self.stats.tcp.failed += 1;
                }
            }
        }
        self.stats.tcp.open = self.conns.len() as u64;
    }

    /// Offers one TCP segment to `dir`'s link: held until its delivery
    /// time, or, lost, offered again a round trip later (see [`tcp`](mod@tcp)).
    fn offer_segment(&mut self, dir: Dir, conn: u64, segment: Segment) {
        let now = self.clock.now();
        if let Some(c) = self.conns.get_mut(&conn) {
            c.offered(dir, segment.seq);
        }
        let fate = self.links[dir as usize].offer(now, segment.data.len() + TCP_OVERHEAD);
        let rtt = self.rtt(now);
        let stats = self.dir_stats(dir);
        stats.received += 1;
        stats.received_bytes += segment.data.len() as u64;
        match fate {
            Fate::Deliver { at } => {
                stats.held += 1;
                stats.max_held = stats.max_held.max(stats.held);
                self.hold(at, dir, To::Tcp { conn, segment });
                return;
            }
            Fate::Corrupt { .. } => stats.corrupted += 1,
            Fate::Lost => stats.lost += 1,
            Fate::QueueDrop => stats.queue_drops += 1,
        }
        let cut = self.conns.get(&conn).is_some_and(|c| c.lost(dir, now, rtt));
        let t = &mut self.stats.tcp;
        match dir {
            Dir::Forward => {
                t.forward_resent += 1;
                t.forward_window_cuts += u64::from(cut);
            }
            Dir::Reverse => {
                t.reverse_resent += 1;
                t.reverse_window_cuts += u64::from(cut);
            }
        }
        let again = tcp::resend_at(now, rtt, true);
        let to = To::Resend {
            conn,
            segment,
            lost: now,
            probed: false,
        };
        self.hold(again, dir, to);
    }

    /// The path's round trip at `now`: both links' one-way delays.
    fn rtt(&self, now: Instant) -> std::time::Duration {
        self.links[0].delay_at(now) + self.links[1].delay_at(now)
    }

    /// Sends every held datagram whose time has come, in delivery order:
    /// each run on one socket through the drivers' one send routine
    /// ([`send_transmits`]: one GSO call per same-size run where the socket
    /// offers it). A send the OS refuses is a lost datagram. TCP segments
    /// due go to their writers, and lost ones due are offered again.
    async fn deliver_due(&mut self) {
        let now = self.clock.now();
        let mut due: Vec<(Dir, Arc<UdpSocket>, Transmit)> = Vec::new();
        while self.held.peek().is_some_and(|Reverse(h)| h.at <= now) {
            let h = self.held.pop().expect("peeked just above").0;
            match h.to {
                To::Udp { socket, dst, data } => due.push((h.dir, socket, udp(dst, data))),
                To::Tcp { conn, segment } => self.deliver_segment(h.dir, conn, segment),
                To::Resend {
                    conn,
                    segment,
                    lost,
                    probed,
                } => self.resend(now, h.dir, conn, segment, lost, probed),
            }
        }
        let mut rest = due.as_slice();
        while let Some((dir, socket, _)) = rest.first() {
            let n = rest
                .iter()
                .take_while(|(_, s, _)| Arc::ptr_eq(s, socket))
                .count();
            let (run, tail) = rest.split_at(n);
            rest = tail;
            let ts: Vec<Transmit> = run.iter().map(|(_, _, t)| t.clone()).collect();
            let tally = send_transmits(&**socket, &ts, &mut self.scratch).await;
            let stats = self.dir_stats(*dir);
            stats.held -= n as u64;
            stats.delivered += tally.datagrams;
            stats.delivered_bytes += tally.bytes;
            stats.send_errors += tally.errors;
        }
    }

    /// A segment's delivery time came: to its connection's writer.
    fn deliver_segment(&mut self, dir: Dir, conn: u64, segment: Segment) {
        let stats = self.dir_stats(dir);
        stats.held -= 1;
        stats.delivered += 1;
        stats.delivered_bytes += segment.data.len() as u64;
        if let Some(c) = self.conns.get(&conn) {
            c.deliver(dir, segment);
        }
    }

    /// A lost segment's first resend time came: offered again if later
    /// segments' acknowledgements told the sender; else (nothing was sent
    /// after it) it waits for the probe timer, and goes then.
    fn resend(
        &mut self,
        now: Instant,
        dir: Dir,
        conn: u64,
        segment: Segment,
        lost: Instant,
        probed: bool,
    ) {
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        if !probed && !c.read_past(dir, segment.seq) {
            let at = tcp::resend_at(lost, self.rtt(now), false);
            let to = To::Resend {
                conn,
                segment,
                lost,
                probed: true,
            };
            self.hold(at, dir, to);
            return;
        }
        self.offer_segment(dir, conn, segment);
    }

    /// The upstream socket of `client`, opened (and its reader started) on
    /// first sight; the least recently seen client is forgotten when full.
    async fn client_socket(&mut self, client: SocketAddr) -> io::Result<Arc<UdpSocket>> {
        self.last_seen += 1;
        if let Some(c) = self.clients.get_mut(&client) {
            c.seen = self.last_seen;
            return Ok(Arc::clone(&c.socket));
        }
        if self.clients.len() >= self.cfg.max_clients {
            let oldest = self
                .clients
                .iter()
                .min_by_key(|(_, c)| c.seen)
                .map(|(a, _)| *a)
                .expect("max_clients is at least 1, so the map is not empty");
            if let Some(c) = self.clients.remove(&oldest) {
                c.reader.abort();
                self.stats.clients_evicted += 1;
                debug!(client = %oldest, "forgot the least recently seen client");
            }
        }
        let any: SocketAddr = if self.cfg.forward.is_ipv4() {
            (Ipv4Addr::UNSPECIFIED, 0).into()
        } else {
            (Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let socket = Arc::new(sized_socket(any, self.cfg.socket_buffer)?.0);
        let reader = tokio::spawn(read_upstream(
            Arc::clone(&socket),
            client,
            self.cfg.forward,
            self.up_tx.clone(),
        ));
        self.clients.insert(
            client,
            Client {
                socket: Arc::clone(&socket),
                reader,
                seen: self.last_seen,
            },
        );
        self.stats.clients = self.clients.len() as u64;
        Ok(socket)
    }
}

fn udp(dst: SocketAddr, data: Vec<u8>) -> Transmit {
    Transmit {
        dst,
        transport: Transport::Udp,
        payload: Bytes::from(data),
    }
}

/// The next TCP connection, from `after` on; never without a listener.
async fn accept(
    listener: Option<Arc<TcpListener>>,
    after: Option<tokio::time::Instant>,
) -> io::Result<(TcpStream, SocketAddr)> {
    let Some(l) = listener else {
        return std::future::pending().await;
    };
    if let Some(t) = after {
        tokio::time::sleep_until(t).await;
    }
    l.accept().await
}

/// Offers one datagram (`overhead` bytes of headers below it on the wire)
/// to `link` and counts its fate in `stats`: its delivery time if it
/// survives and there is `room` to hold it (then counted as held), else
/// `None`. A corrupted one is dropped or has its bits flipped per
/// `corrupt`. The one admission rule of the UDP emulator and the shell.
pub(crate) fn admit(
    link: &mut Link,
    now: Instant,
    data: &mut [u8],
    overhead: usize,
    corrupt: CorruptPolicy,
    room: bool,
    stats: &mut DirectionStats,
) -> Option<Instant> {
    stats.received += 1;
    stats.received_bytes += data.len() as u64;
    let at = match link.offer(now, data.len() + overhead) {
        Fate::Deliver { at } => at,
        Fate::Corrupt { at, errors } => {
            stats.corrupted += 1;
            match corrupt {
                CorruptPolicy::Drop => return None,
                CorruptPolicy::Forward => {
                    let mut wire = vec![0u8; overhead];
                    wire.extend_from_slice(data);
                    errors.apply(&mut wire);
                    data.copy_from_slice(&wire[overhead..]);
                }
            }
            at
        }
        Fate::Lost => {
            stats.lost += 1;
            return None;
        }
        Fate::QueueDrop => {
            stats.queue_drops += 1;
            return None;
        }
    };
    if !room {
        stats.overflow += 1;
        trace!("held-datagram limit reached; dropped");
        return None;
    }
    stats.held += 1;
    stats.max_held = stats.max_held.max(stats.held);
    Some(at)
}

/// Reads the target's replies to `client` and hands them to the main loop.
async fn read_upstream(
    socket: Arc<UdpSocket>,
    client: SocketAddr,
    target: SocketAddr,
    out: mpsc::Sender<(SocketAddr, Vec<u8>)>,
) {
    let mut buf = vec![0u8; MAX_UDP_PAYLOAD];
    loop {
        match socket.recv_from(&mut buf).await {
            Ok((n, src)) if src == target => {
                if out.send((client, buf[..n].to_vec())).await.is_err() {
                    return;
                }
            }
            Ok((_, src)) => trace!(%src, "upstream datagram not from the target; ignored"),
            Err(e) if is_transient(&e) => trace!(error = %e, "upstream: datagram lost"),
            Err(e) => {
                debug!(%client, error = %e, "upstream socket failed; its replies stop");
                return;
            }
        }
    }
}

/// How often the kernel's drop counters are read.
const DROPS_EVERY: std::time::Duration = std::time::Duration::from_millis(500);
/// Upstream sockets at once, by default: plenty for a test bench.
const DEFAULT_MAX_CLIENTS: usize = 64;
/// Datagrams in flight per direction, by default: 8192 × 64 KiB worst case
/// is 512 MiB, but with the usual ≤ 1500-byte datagrams about 12 MiB.
const DEFAULT_MAX_HELD: usize = 8192;
/// Replies from upstream sockets waiting for the main loop.
const UPSTREAM_CHANNEL: usize = 1024;

pub mod tcp;
#[cfg(test)]
mod tests;
