//! The application's view (ARCHITECTURE.md; Leigh et al. §2): one
//! [`Session`] per process, [`Peer`]s, and per peer any number of
//! [`Channel`]s that declare what they need ([`Qos`]), not how to get it.
//!
//! ```no_run
//! use groupwire_tokio::session::{Event, Qos, Session};
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let session = Session::bind("0.0.0.0:7400").await?;
//! let peer = session.connect("203.0.113.7:7400".parse()?).await?;
//! let pointer = peer.channel("telepointer", Qos::awareness().mer_band(0.05, 0.06))?;
//! let edits = peer.channel("edits", Qos::reliable_ordered())?;
//! pointer.send(b"x=10,y=20")?; // never blocks on loss recovery
//! edits.send(b"insert 3 'a'")?;
//! while let Some(ev) = session.next_event().await {
//!     if let Event::Message { channel, payload, via, .. } = ev {
//!         println!("{:?} on {channel:?} via {via}", payload);
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! # What runs underneath
//!
//! The sans-IO machine [`groupwire_proto::session::Session`] does all the
//! protocol work: the handshake (address validation, a pre-shared key if
//! one is set), channels, the mechanisms (plain, AFEC, XOR, block FEC,
//! Reliable Blast UDP, reliable), the resource monitor, the strategy selector and the adaptive
//! controller. This module is its driver, in quinn's shape: the machine sits
//! behind a mutex that the application's handles lock for a command
//! (`send`, `channel`, ...), and one task owns the sockets, locks it to feed
//! input and timers, and sends what it queued. A command never waits for
//! the network: it queues and wakes the task.
//!
//! - **One UDP socket** carries every datagram channel of every peer
//!   (`recvmmsg` and GSO where the OS has them, as [`crate::Driver`]).
//! - **One TCP connection per peer and stream** carries the reliable
//!   channels' frames, each prefixed by its length (4 bytes, big endian; at
//!   most [`SessionOptions::max_frame`]): stream 0 for reliable channels,
//!   and streams 0 to `n - 1` for a channel striped over `n`
//!   ([`Mechanism::Striped`], Leigh et al. §4.3). The TCP listener shares
//!   the UDP socket's port. The side that called [`Session::connect`]
//!   opens each connection when the stream's first frame comes (stream 0
//!   at once; to the peer's address, or to
//!   [`Session::connect_with_stream`]'s when the datagrams go through a
//!   relay or emulator) and first writes a *bind frame* the machine seals
//!   naming the stream ([`groupwire_proto::session::Session::bind_frame`]);
//!   the accepting side sends its own frames back on those connections
//!   once the bind frame opened, and asks the dialer (through the machine)
//!   for a stream it needs that is not open yet. A broken connection is
//!   dialed again after a second. An accepted connection whose first frame does not open is
//!   closed, as is one silent past the handshake timeout; at most
//!   [`SessionOptions::max_unbound_streams`] wait at once, the oldest shed
//!   first. Frames waiting for a connection are bounded by
//!   [`SessionOptions::max_queued_stream_bytes`]; past it a reliable send is
//!   refused ([`SendError::Full`]) rather than dropped.
//! - **DiffServ marks** (Leigh et al.'s QoS provisioner): each datagram
//!   leaves with its channel's code point ([`Qos::dscp_value`], RFC 4594
//!   by the channel's capacity profile) as the socket's traffic class
//!   (`IP_TOS` / `IPV6_TCLASS`), set where consecutive datagrams change
//!   class, so a run of one channel's datagrams still goes in one GSO
//!   call ([`SessionOptions::mark_dscp`] turns it off). Control datagrams
//!   and the TCP stream go unmarked. No reservation protocol (RSVP) is
//!   reachable here, so none is called.
//! - **Files**: [`Channel::send_file`] sends one on any channel that
//!   delivers every message, and a [`FileReceiver`] fed with the
//!   channel's messages stores it, checked against its BLAKE3 hash
//!   ([`files`]). A Blast channel's messages waiting for their transfers
//!   count toward [`SessionOptions::max_queued_stream_bytes`] too.
//! - A reliable connection that breaks loses the frames in flight (the
//!   next frame opens a new one): reliable means "while the connection
//!   lives", as TCP does.

mod driver;
pub mod files;
mod stream;

pub use files::{
    BLAST_CHUNK, FILE_MAGIC, FileError, FileEvent, FileReceiver, FileSent, RELIABLE_CHUNK,
};

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use groupwire_proto::session::Session as Machine;
pub use groupwire_proto::session::{
    ChannelId, ChannelStats, Mechanism, MechanismKind, PathEstimate, PeerId, Qos, Reliability,
    SessionConfig, SessionError, SessionEvent as Event, SessionStats,
};
pub use groupwire_proto::tunnel::{Cipher, TunnelKey};
pub use groupwire_proto::units::Bitrate;
use tokio::net::ToSocketAddrs;
use tokio::sync::{Notify, mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::clock::Clock;
use crate::socket::{BatchedUdpSocket, bind_with_tcp};

/// How a [`Session`]'s driver behaves beyond the machine's
/// [`SessionConfig`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SessionOptions {
    /// The machine's settings (key, limits, monitor, selector policy). Its
    /// [`stream_window`](SessionConfig::stream_window), when `None`, is
    /// [`DEFAULT_STREAM_WINDOW`](groupwire_proto::session::DEFAULT_STREAM_WINDOW):
    /// this driver reports what its connections have sent, so reliable
    /// frames wait in the session, where an edit can pass a bulk
    /// transfer, and the connections' sockets hold little unsent
    /// (`TCP_NOTSENT_LOWAT`, 16 KiB, on Linux).
    pub config: SessionConfig,
    /// Largest reliable message, in bytes (a frame's length prefix is
    /// checked against it before anything is read).
    pub max_frame: usize,
    /// Most bytes of reliable frames waiting: for their connections, all
    /// peers together, plus those in the session for the stream window of
    /// the peer sent to (a reliable send past it is refused with
    /// [`SendError::Full`]).
    pub max_queued_stream_bytes: usize,
    /// Most accepted connections not yet bound to a peer.
    pub max_unbound_streams: usize,
    /// Events that may wait for [`Session::next_event`] before the driver
    /// waits too (and the socket's buffer fills and drops).
    pub event_capacity: usize,
    /// Kernel buffer asked for the UDP socket (`SO_RCVBUF`, `SO_SNDBUF`).
    pub socket_buffer: usize,
    /// Set each channel's DiffServ code point ([`Qos::dscp_value`]) as the
    /// socket's traffic class for its datagrams (default on; off where a
    /// network drops or re-marks marked packets; a channel's
    /// [`Qos::dscp`] can also say `None`).
    pub mark_dscp: bool,
}

impl SessionOptions {
    /// The machine's defaults ([`SessionConfig::new`]) with a seed from the
    /// OS (connection ids must be unguessable), 16 MiB reliable messages,
    /// 64 MiB queued, 16 unbound connections, 4096 events, 4 MiB socket
    /// buffers.
    pub fn new() -> io::Result<Self> {
        Ok(Self::with_config(SessionConfig::new(os_random()?)))
    }

    /// These options around `config`.
    pub fn with_config(config: SessionConfig) -> Self {
        Self {
            config,
            max_frame: 16 << 20,
            max_queued_stream_bytes: 64 << 20,
            max_unbound_streams: 16,
            event_capacity: 4096,
            socket_buffer: crate::DEFAULT_SOCKET_BUFFER,
            mark_dscp: true,
        }
    }

    /// Seals everything under the pre-shared key `psk` (at least 16 bytes;
    /// the tunnel's scheme, with a fresh salt from the OS); peers without
    /// it get nothing through.
    pub fn key(mut self, psk: &[u8]) -> io::Result<Self> {
        if psk.len() < groupwire_proto::tunnel::seal::MIN_KEY_LEN {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a session key needs at least {} bytes (make one with: head -c 32 /dev/urandom | base64)",
                    groupwire_proto::tunnel::seal::MIN_KEY_LEN
                ),
            ));
        }
        self.config.key = Some(TunnelKey {
            psk: psk.to_vec(),
            salt: os_random()?,
            cipher: Cipher::auto(),
        });
        Ok(self)
    }
}

/// 64 bits from the OS random source.
fn os_random() -> io::Result<u64> {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b).map_err(|e| io::Error::other(format!("OS random source: {e}")))?;
    Ok(u64::from_be_bytes(b))
}

/// Why [`Session::connect`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The machine refused (too many peers).
    #[error(transparent)]
    Session(#[from] SessionError),
    /// No HelloAck came within the handshake timeout: nobody listens
    /// there, or it does not hold our key.
    #[error("no answer from {0} (is a groupwire session listening there, with the same key?)")]
    NoAnswer(SocketAddr),
    /// The session's driver has stopped.
    #[error("the session has stopped")]
    Closed,
}

/// Why [`Channel::send`] refused a message.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SendError {
    /// The machine refused it (too large for the mechanism, queue full,
    /// no such channel).
    #[error(transparent)]
    Session(#[from] SessionError),
    /// Reliable frames waiting for their connections, or a Blast
    /// channel's messages waiting for their transfers, are at
    /// [`SessionOptions::max_queued_stream_bytes`]: try again later.
    #[error("the reliable stream's queue is full; send again later")]
    Full,
    /// A reliable message over [`SessionOptions::max_frame`].
    #[error("a reliable message of {len} bytes is over the {max}-byte frame limit")]
    TooLarge {
        /// Its size.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The session's driver has stopped.
    #[error("the session has stopped")]
    Closed,
}

/// Counters of the driver's reliable streams.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamStats {
    /// Connections opened to peers.
    pub opened: u64,
    /// Connections accepted.
    pub accepted: u64,
    /// Accepted connections bound to a peer by a bind frame.
    pub bound: u64,
    /// Connections closed unbound: a refused frame, silence past the
    /// handshake timeout, or shed for a newer one.
    pub refused: u64,
    /// Connections that failed to open, or broke.
    pub failed: u64,
    /// Frames written.
    pub frames_sent: u64,
    /// Frames read (handed to the machine).
    pub frames_received: u64,
    /// Frames dropped: the connection broke or never opened, or the peer
    /// left before it bound one.
    pub frames_dropped: u64,
}

/// Live counters, shared by the driver, its stream tasks and the handles.
#[derive(Debug, Default)]
struct StreamCounters {
    opened: AtomicU64,
    accepted: AtomicU64,
    bound: AtomicU64,
    refused: AtomicU64,
    failed: AtomicU64,
    frames_sent: AtomicU64,
    frames_received: AtomicU64,
    frames_dropped: AtomicU64,
    /// Bytes of frames queued and not yet written.
    queued: AtomicUsize,
}

impl StreamCounters {
    fn snapshot(&self) -> StreamStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        StreamStats {
            opened: get(&self.opened),
            accepted: get(&self.accepted),
            bound: get(&self.bound),
            refused: get(&self.refused),
            failed: get(&self.failed),
            frames_sent: get(&self.frames_sent),
            frames_received: get(&self.frames_received),
            frames_dropped: get(&self.frames_dropped),
        }
    }
}

/// What the handles and the driver share.
struct Shared {
    inner: Mutex<Inner>,
    /// A handle changed the machine: the driver drains it.
    wake: Notify,
    /// The last handle is gone, or [`Session::close`] was called.
    stop: Notify,
    clock: Clock,
    local_addr: SocketAddr,
    max_frame: usize,
    max_queued: usize,
    streams: StreamCounters,
    /// The UDP socket's counters, as [`crate::Driver`]'s.
    udp: crate::driver::Counters,
}

struct Inner {
    machine: Machine,
    /// [`Session::connect`] calls waiting for their handshakes.
    waiters: BTreeMap<PeerId, Vec<oneshot::Sender<Result<(), ConnectError>>>>,
    /// [`Session::accept_from`] calls waiting for a peer at an address to
    /// connect to us.
    accepting: BTreeMap<SocketAddr, Vec<oneshot::Sender<PeerId>>>,
    /// Peers this side connected to, by datagram address: where their
    /// stream listens.
    dial: BTreeMap<SocketAddr, SocketAddr>,
    /// The driver has stopped.
    closed: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves the machine as it was at
        // the panic; the machine keeps its own invariants per call.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Keeps the driver running while any handle lives.
struct Life(Arc<Shared>);

impl Drop for Life {
    fn drop(&mut self) {
        self.0.stop.notify_one();
    }
}

/// One socket, many peers; see the [module docs](self).
pub struct Session {
    shared: Arc<Shared>,
    life: Arc<Life>,
    /// Polled under a short lock, never held across an await.
    events: Mutex<mpsc::Receiver<Event>>,
    task: Mutex<Option<JoinHandle<io::Result<()>>>>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("local_addr", &self.shared.local_addr)
            .finish_non_exhaustive()
    }
}

impl Session {
    /// Binds UDP and TCP on `addr` (one port for both) with the default
    /// [`SessionOptions`], and starts the driver on the current tokio
    /// runtime.
    pub async fn bind(addr: impl ToSocketAddrs) -> io::Result<Self> {
        Self::bind_with(addr, SessionOptions::new()?).await
    }

    /// [`bind`](Self::bind) with `opts`.
    pub async fn bind_with(addr: impl ToSocketAddrs, opts: SessionOptions) -> io::Result<Self> {
        let addr = tokio::net::lookup_host(addr)
            .await?
            .next()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no address to bind"))?;
        let (udp, listener) = bind_with_tcp(addr, BatchedUdpSocket::bind_now).await?;
        // The OS may grant less; the session works either way.
        let _ = udp.set_recv_buffer_size(opts.socket_buffer);
        let _ = udp.set_send_buffer_size(opts.socket_buffer);
        let local_addr = udp.get_ref().local_addr()?;
        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner {
                machine: Machine::new(SessionConfig {
                    // This driver says what its connections have sent, so
                    // the machine keeps the stream's backlog and orders it
                    // by channel.
                    stream_window: opts
                        .config
                        .stream_window
                        .or(Some(groupwire_proto::session::DEFAULT_STREAM_WINDOW)),
                    ..opts.config.clone()
                }),
                waiters: BTreeMap::new(),
                accepting: BTreeMap::new(),
                dial: BTreeMap::new(),
                closed: false,
            }),
            wake: Notify::new(),
            stop: Notify::new(),
            clock: Clock::start(),
            local_addr,
            max_frame: opts.max_frame.max(1),
            max_queued: opts.max_queued_stream_bytes,
            streams: StreamCounters::default(),
            udp: crate::driver::Counters::default(),
        });
        let (ev_tx, ev_rx) = mpsc::channel(opts.event_capacity.max(1));
        let task = tokio::spawn(driver::run(Arc::clone(&shared), udp, listener, ev_tx, opts));
        Ok(Self {
            life: Arc::new(Life(Arc::clone(&shared))),
            shared,
            events: Mutex::new(ev_rx),
            task: Mutex::new(Some(task)),
        })
    }

    /// The address peers reach this session at (UDP and TCP).
    pub fn local_addr(&self) -> SocketAddr {
        self.shared.local_addr
    }

    /// Opens a session to the peer at `addr` and waits for its handshake
    /// (at most [`SessionConfig::handshake_timeout`]).
    pub async fn connect(&self, addr: SocketAddr) -> Result<Peer, ConnectError> {
        self.connect_with_stream(addr, addr).await
    }

    /// [`connect`](Self::connect), with the reliable channels' TCP
    /// connection going to `stream` instead of `addr`: for datagrams that
    /// go through a link emulator or a relay that carries UDP only. The
    /// monitor then measures a path the stream does not take: set
    /// [`Provision::stream_on_path`](groupwire_proto::session::select::Provision::stream_on_path)
    /// to `false` in the session's controller settings so the selector
    /// offers the stream only to channels that need every message.
    pub async fn connect_with_stream(
        &self,
        addr: SocketAddr,
        stream: SocketAddr,
    ) -> Result<Peer, ConnectError> {
        let (tx, rx) = oneshot::channel();
        let peer = {
            let mut g = self.shared.lock();
            if g.closed {
                return Err(ConnectError::Closed);
            }
            let now = self.shared.clock.now();
            let peer = g.machine.connect(now, addr)?;
            g.dial.insert(addr, stream);
            if g.machine.is_connected(peer) {
                let _ = tx.send(Ok(()));
            } else {
                g.waiters.entry(peer).or_default().push(tx);
            }
            peer
        };
        self.shared.wake.notify_one();
        rx.await.map_err(|_| ConnectError::Closed)??;
        Ok(self.peer_handle(peer, addr))
    }

    /// Waits for the peer at `addr` to connect to this session (it calls
    /// [`connect`](Self::connect) toward us), and gives its handle; at once
    /// if it is connected already. For when the two sides agreed which one
    /// dials (as `groupwire::rendezvous` does). (Two sessions that both
    /// [`connect`](Self::connect) at once make one handshake too: the
    /// machine's [`dialed`](groupwire_proto::session::Session::dialed)
    /// says whose Hello made it, and that side opens the stream.) Wait no
    /// longer than you mean to (`tokio::time::timeout`): it waits for as
    /// long as nobody comes. The peer's [`Event::PeerConnected`] still
    /// reaches [`next_event`](Self::next_event).
    pub async fn accept_from(&self, addr: SocketAddr) -> Result<Peer, ConnectError> {
        let rx = {
            let mut g = self.shared.lock();
            if g.closed {
                return Err(ConnectError::Closed);
            }
            if let Some(p) = g.machine.peer_at(addr)
                && g.machine.is_connected(p)
            {
                return Ok(self.peer_handle(p, addr));
            }
            let (tx, rx) = oneshot::channel();
            let ws = g.accepting.entry(addr).or_default();
            // Callers that gave up are forgotten here, so the list stays
            // as long as the callers waiting now.
            ws.retain(|w| !w.is_closed());
            ws.push(tx);
            rx
        };
        let peer = rx.await.map_err(|_| ConnectError::Closed)?;
        Ok(self.peer_handle(peer, addr))
    }

    /// A handle on a connected peer (one that connected to us, named by
    /// [`Event::PeerConnected`]); `None` if it is not connected.
    pub fn peer(&self, id: PeerId) -> Option<Peer> {
        let addr = {
            let g = self.shared.lock();
            g.machine
                .is_connected(id)
                .then(|| g.machine.peer_addr(id))
                .flatten()?
        };
        Some(self.peer_handle(id, addr))
    }

    fn peer_handle(&self, id: PeerId, addr: SocketAddr) -> Peer {
        Peer {
            id,
            addr,
            shared: Arc::clone(&self.shared),
            life: Arc::clone(&self.life),
        }
    }

    /// A handle on one of this side's channels (one the peer opened,
    /// named by [`Event::ChannelOpened`], or one of ours).
    pub fn channel(&self, id: ChannelId) -> Option<Channel> {
        let name = self.shared.lock().machine.channel_name(id)?.to_owned();
        Some(Channel {
            id,
            name,
            shared: Arc::clone(&self.shared),
            _life: Arc::clone(&self.life),
        })
    }

    /// The next event: messages on every channel, peers coming and going,
    /// channels the peers opened, mechanism changes, QoS met or not.
    /// `None` once the session has stopped. Read events from one task:
    /// two tasks waiting at once may leave one of them unwoken.
    pub async fn next_event(&self) -> Option<Event> {
        std::future::poll_fn(|cx| {
            self.events
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .poll_recv(cx)
        })
        .await
    }

    /// The machine's counters.
    pub fn stats(&self) -> SessionStats {
        self.shared.lock().machine.stats()
    }

    /// The UDP socket's counters: datagrams and system calls each way,
    /// send and receive errors (as [`crate::Driver`] counts them).
    pub fn socket_stats(&self) -> crate::DriverStats {
        self.shared.udp.snapshot()
    }

    /// The reliable streams' counters.
    pub fn stream_stats(&self) -> StreamStats {
        self.shared.streams.snapshot()
    }

    /// Runs `f` on the machine: read anything it offers
    /// ([`groupwire_proto::session::Session`]'s getters) while it runs.
    pub fn inspect<R>(&self, f: impl FnOnce(&Machine) -> R) -> R {
        f(&self.shared.lock().machine)
    }

    /// Stops the driver (what was queued is sent first) and waits for it.
    /// Handles still held get [`SendError::Closed`] from then on.
    pub async fn close(self) -> io::Result<()> {
        self.shared.stop.notify_one();
        let task = self
            .task
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        match task {
            Some(t) => t.await.map_err(io::Error::other)?,
            None => Ok(()),
        }
    }
}

/// A connected peer: open channels to it.
#[derive(Clone)]
pub struct Peer {
    id: PeerId,
    addr: SocketAddr,
    shared: Arc<Shared>,
    life: Arc<Life>,
}

impl std::fmt::Debug for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peer")
            .field("id", &self.id)
            .field("addr", &self.addr)
            .finish()
    }
}

impl Peer {
    /// Opens channel `name` with `qos`: the strategy selector picks its
    /// mechanism and re-picks as the path changes. If the peer opened a
    /// channel by that name first, this takes it over with `qos`.
    pub fn channel(&self, name: &str, qos: Qos) -> Result<Channel, SessionError> {
        let id = {
            let mut g = self.shared.lock();
            let now = self.shared.clock.now();
            g.machine.open_channel(now, self.id, name, qos)?
        };
        self.shared.wake.notify_one();
        Ok(Channel {
            id,
            name: name.to_owned(),
            shared: Arc::clone(&self.shared),
            _life: Arc::clone(&self.life),
        })
    }

    /// Its id (the one events name).
    pub fn id(&self) -> PeerId {
        self.id
    }

    /// Its address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// What the resource monitor knows of the path to it.
    pub fn path(&self) -> Option<PathEstimate> {
        self.shared.lock().machine.path(self.id)
    }

    /// Whether its handshake is complete and it has not gone.
    pub fn is_connected(&self) -> bool {
        self.shared.lock().machine.is_connected(self.id)
    }
}

/// One channel to a peer: send on it; its messages come as
/// [`Event::Message`] from [`Session::next_event`].
#[derive(Clone)]
pub struct Channel {
    id: ChannelId,
    name: String,
    shared: Arc<Shared>,
    _life: Arc<Life>,
}

impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channel")
            .field("id", &self.id)
            .field("name", &self.name)
            .finish()
    }
}

/// A channel's state, for a live display.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ChannelReport {
    /// Its name.
    pub name: String,
    /// The mechanism carrying it now.
    pub mechanism: Mechanism,
    /// Whether the controller predicts its QoS met (`None`: pinned by
    /// [`Channel::set_mechanism`], or not decided yet).
    pub meets: Option<bool>,
    /// Counters.
    pub stats: ChannelStats,
    /// What the peer reported of it: messages covered, and delivered.
    pub delivered: Option<(u64, u64)>,
}

impl Channel {
    /// Sends one message. Never waits for loss recovery or the network:
    /// the mechanism queues it and the driver sends.
    pub fn send(&self, payload: impl AsRef<[u8]>) -> Result<(), SendError> {
        let payload = payload.as_ref();
        {
            let mut g = self.shared.lock();
            if g.closed {
                return Err(SendError::Closed);
            }
            let mechanism = g.machine.mechanism(self.id);
            if mechanism == Some(Mechanism::Reliable) {
                let max = self.shared.max_frame
                    - groupwire_proto::session::wire::FRAME_HEADER_LEN
                    - groupwire_proto::tunnel::seal::OVERHEAD;
                if payload.len() > max {
                    return Err(SendError::TooLarge {
                        len: payload.len(),
                        max,
                    });
                }
                let queued = self.shared.streams.queued.load(Ordering::Relaxed)
                    + g.machine.stream_waiting(self.id.peer);
                if queued + payload.len() > self.shared.max_queued {
                    return Err(SendError::Full);
                }
            } else if mechanism == Some(Mechanism::Blast)
                && g.machine.queued(self.id) + payload.len() > self.shared.max_queued
            {
                // Each message waits for the transfers before it.
                return Err(SendError::Full);
            }
            let now = self.shared.clock.now();
            g.machine.send(now, self.id, payload)?;
        }
        self.shared.wake.notify_one();
        Ok(())
    }

    /// Its id (the one events name).
    pub fn id(&self) -> ChannelId {
        self.id
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its mechanism, QoS verdict and counters now.
    pub fn report(&self) -> Option<ChannelReport> {
        let g = self.shared.lock();
        Some(ChannelReport {
            name: self.name.clone(),
            mechanism: g.machine.mechanism(self.id)?,
            meets: g.machine.meets(self.id),
            stats: g.machine.channel_stats(self.id)?,
            delivered: g.machine.delivery_report(self.id),
        })
    }

    /// Pins the channel to `m` (the selector stops choosing for it); the
    /// old mechanism drains, nothing is lost or duplicated.
    pub fn set_mechanism(&self, m: Mechanism) -> Result<(), SessionError> {
        {
            let mut g = self.shared.lock();
            let now = self.shared.clock.now();
            g.machine.set_mechanism(now, self.id, m)?;
        }
        self.shared.wake.notify_one();
        Ok(())
    }
}

#[cfg(test)]
mod tests;
