//! The tokio driver: sockets, the storage thread and one task running the
//! [`RelayCore`]. Thin by design: every decision is the core's.
//!
//! ```text
//!  TCP / WebSocket readers ──frames──▶ ┌────────────┐ ──ops──▶ storage thread
//!                                      │ core task  │          (group commit)
//!  writers ◀──frames (priority order)──│ RelayCore  │ ◀─results─┘
//!                                      └────────────┘
//! ```
//!
//! - **Fan-out worker budget**: each turn of the core task writes at most
//!   [`ServerConfig::fanout_budget`] frames, highest priority first, then
//!   looks at new input again. Under load the relay's CPU goes to the
//!   highest-priority queues first (Litiu & Prakash §4.5: the scheduler
//!   decides which Client Sender runs).
//! - **Receive priority**: readers hand frames to the core task through
//!   a queue per connection; the core task takes the highest lane with
//!   input first and, within a lane, one frame per connection per round
//!   (see `server/input.rs`). A client's lane is the highest instant priority of
//!   the groups it is a principal in (Litiu & Prakash §4.5, the Client
//!   Receiver threads), so a publisher in a demoted bursty group waits
//!   while a chat publisher's message is sequenced at once, and a client
//!   that floods frames delays the others of its lane by one frame each.
//! - **Per-connection send windows**: the core hands a client no more than
//!   its window of unconsumed bytes (see `docs/relay-protocol.md`), so each
//!   client's bandwidth is also spent in priority order.
//! - **Output**: the frames of a turn gather per connection and go out in
//!   one `writev` per connection once the core task has caught up with its
//!   input; plain TCP sockets are written by the core task itself, and only
//!   what a socket cannot take at once waits in the connection's writer
//!   task (see `server/output.rs`).
//! - **Storage**: blocking calls run on one dedicated thread; consecutive
//!   appends commit together. The core never waits for storage except for
//!   backpressure when [`ServerConfig::storage_queue`] ops are pending.

use std::collections::BTreeSet;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use groupwire_proto::Instant;
use groupwire_tokio::{Clock, sleep_until};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{Notify, Semaphore, mpsc, oneshot};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

use self::conn::{Gate, Limits, Ticket};
use crate::core::{CoreConfig, MAX_GROUP_PRIORITY, RelayCore, RelayStats};
use crate::frame::{self, FrameDecoder, FrameError};
use crate::sched::{ConnId, QueueDepth};
use crate::storage::{
    ClusterSettings, MemoryStorage, NatsConfig, SqliteStorage, Storage, StorageDone, StorageError,
    StorageOp, SyncMode, execute,
};
use crate::tls::ServerTls;

mod conn;
mod demo;
mod input;
mod output;
mod place;

use self::input::{Input, InputRings, InputTx, Ready};
use self::output::{DirectSocket, FLUSH_FRAMES, SharedWrite, Writer};
use self::place::{BACKGROUND, Background, Class, Placement};

/// Where the relay keeps its state.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum StorageConfig {
    /// In memory: lost when the relay stops (tests, demos). Its calls take
    /// microseconds and never block, so the core task makes them itself:
    /// no storage thread, no hand-off between threads per update.
    Memory,
    /// SQLite in `dir` (the default for `groupwire relay serve`).
    Sqlite {
        /// The data directory.
        dir: PathBuf,
        /// Commit durability.
        sync: SyncMode,
    },
    /// NATS JetStream: many relay nodes share groups, one total order per
    /// group (see [`crate::storage::JetStreamStorage`]).
    Nats(NatsConfig),
}

/// Server knobs.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// TCP listen address.
    pub listen: SocketAddr,
    /// WebSocket listen address, if any.
    pub ws: Option<SocketAddr>,
    /// TLS on every listener (TCP and WebSocket, which becomes `wss`);
    /// `None` for plaintext. See [`crate::tls`].
    pub tls: Option<ServerTls>,
    /// Storage engine.
    pub storage: StorageConfig,
    /// Protocol core and scheduler knobs.
    pub core: CoreConfig,
    /// Frames taken from the scheduler per turn of the core task before it
    /// looks at input again (default 64). They are written once it has
    /// caught up (see `server/output.rs`).
    pub fanout_budget: usize,
    /// Most storage operations in one group commit (default 1024).
    pub storage_batch: usize,
    /// Storage operations pending before the core waits (default 8192).
    pub storage_queue: usize,
    /// Backpressure: the relay stops reading a client's requests while
    /// more than this many bytes of replies wait for it (default 64 KiB),
    /// and reads again once half of them have been written. Replies drain
    /// only as fast as the client reads them, so a client that sends
    /// requests without reading costs at most this, plus its writer's
    /// [`SchedulerConfig::max_writer_bytes`](crate::SchedulerConfig::max_writer_bytes)
    /// and the frames in flight, whatever it sends.
    pub input_pause_bytes: usize,
    /// A connection that has not sent its first frame (`Hello`) this long
    /// after it was accepted gets `TIMEOUT` and is closed (default 10 s).
    /// For WebSocket the HTTP upgrade counts toward it.
    pub handshake_timeout: Duration,
    /// A connection from which no frame arrived for this long (Pings
    /// count) gets `TIMEOUT` and is closed (default 5 min; `None`: never).
    /// Clients that may stay quiet longer send a `Ping`.
    pub idle_timeout: Option<Duration>,
    /// Most connections open at once from one IP address, TCP and
    /// WebSocket together (default 256; 0: no limit). Further ones are
    /// closed at once.
    pub max_conns_per_ip: usize,
    /// Kernel send buffer of each accepted connection (`SO_SNDBUF`, which
    /// Linux doubles for its bookkeeping; default
    /// [`DEFAULT_SOCKET_SEND_BUFFER`], the default send window; `None`: the
    /// kernel's autotuning, up to `net.ipv4.tcp_wmem`'s maximum, 4 MiB by
    /// default).
    /// A client that sends requests without reading is detected only once
    /// the kernel buffers are full: with autotuning it got megabytes of
    /// replies per connection, each costing the relay CPU, before
    /// backpressure stopped reading it (100 such clients kept the relay
    /// busy long enough to put a member's p99 at 7x its unloaded value;
    /// `docs/results/reliability.md`). A client that reads is not slowed
    /// while its window fits: raise this for clients that ask for larger
    /// windows on long links.
    pub socket_send_buffer: Option<usize>,
    /// Serve the demo page on the WebSocket listener (default on): a plain
    /// `GET /` (no `Upgrade` header) gets a small shared-whiteboard page
    /// and `GET /groupwire.js` the browser client it imports; any other
    /// path that is not a WebSocket upgrade gets `404`. Off, every such
    /// request gets `426 Upgrade Required`.
    pub demo_page: bool,
    /// The OS priority (nice value, -20..=19; Linux) of the thread that
    /// serves the connections that do not keep up: before their `Hello`,
    /// after a fatal error, and while their window is full or their
    /// writer backed up (default 10; `None`: no such thread, every
    /// connection on the runtime the relay was started on). The kernel
    /// then runs the clients that read ahead of whatever the others cost
    /// (`docs/results/reliability.md`, fourth round). At nice 10 that
    /// thread still gets about a tenth of a busy core, so handshakes go
    /// on under load.
    pub background_nice: Option<i32>,
}

/// [`ServerConfig::background_nice`]'s default: the background thread
/// gets about 110/1134 of a core both want (the kernel's weights for nice
/// 10 and 0).
pub const DEFAULT_BACKGROUND_NICE: i32 = 10;

/// [`ServerConfig::socket_send_buffer`]'s default: the default send window
/// ([`CoreConfig::default_window`]).
pub const DEFAULT_SOCKET_SEND_BUFFER: usize = 256 << 10;

impl ServerConfig {
    /// A relay on `listen` with in-memory storage and default knobs.
    pub fn new(listen: SocketAddr) -> Self {
        Self {
            listen,
            ws: None,
            tls: None,
            storage: StorageConfig::Memory,
            core: CoreConfig::default(),
            fanout_budget: 64,
            storage_batch: 1024,
            storage_queue: 8192,
            input_pause_bytes: 64 << 10,
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Some(Duration::from_secs(300)),
            max_conns_per_ip: 256,
            socket_send_buffer: Some(DEFAULT_SOCKET_SEND_BUFFER),
            demo_page: true,
            background_nice: Some(DEFAULT_BACKGROUND_NICE),
        }
    }
}

/// A running relay. Dropping it does not stop the relay; call
/// [`shutdown`](Self::shutdown).
#[derive(Debug)]
pub struct RelayHandle {
    tcp: SocketAddr,
    ws: Option<SocketAddr>,
    commands: mpsc::UnboundedSender<Command>,
    task: tokio::task::JoinHandle<()>,
    /// Closed when the SQLite storage thread has closed its database.
    storage_closed: Option<oneshot::Receiver<()>>,
}

enum Command {
    Stats(oneshot::Sender<RelayStats>),
    Depths(oneshot::Sender<Vec<QueueDepth>>),
    Shutdown,
}

impl RelayHandle {
    /// The bound TCP address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.tcp
    }

    /// The bound WebSocket address.
    pub fn ws_addr(&self) -> Option<SocketAddr> {
        self.ws
    }

    /// The relay's counters.
    pub async fn stats(&self) -> RelayStats {
        let (tx, rx) = oneshot::channel();
        let _ = self.commands.send(Command::Stats(tx));
        rx.await.unwrap_or_default()
    }

    /// Every (member, group) queue's depth and priority.
    pub async fn queue_depths(&self) -> Vec<QueueDepth> {
        let (tx, rx) = oneshot::channel();
        let _ = self.commands.send(Command::Depths(tx));
        rx.await.unwrap_or_default()
    }

    /// Stops accepting, closes every connection and waits for the core
    /// task and the storage thread (pending storage operations finish
    /// first), so that a relay started right after on the same SQLite
    /// directory finds everything this one stored.
    pub async fn shutdown(self) {
        let _ = self.commands.send(Command::Shutdown);
        let _ = self.task.await;
        if let Some(closed) = self.storage_closed {
            let _ = closed.await;
        }
    }

    /// Waits until the relay stops (it runs until shutdown or a fatal
    /// storage error).
    pub async fn wait(self) {
        let _ = self.task.await;
    }
}

/// Opens storage, binds the listeners and starts the relay.
pub async fn start(cfg: ServerConfig) -> std::io::Result<RelayHandle> {
    let inline = matches!(cfg.storage, StorageConfig::Memory);
    let (done_tx, done_rx) = mpsc::unbounded_channel::<StorageDone>();
    let mut first_client_id = 1;
    let mut storage_closed = None;
    let (groups, storage) = if let StorageConfig::Nats(nats) = &cfg.storage {
        // The NATS thread connects, loads the groups and starts following
        // them before anything listens; NATS down is an error here.
        let (storage_tx, storage_rx) = mpsc::channel::<StorageOp>(cfg.storage_queue.max(1));
        let started = crate::storage::spawn_jetstream(
            nats.clone(),
            ClusterSettings::new(nats, &cfg.core),
            storage_rx,
            done_tx,
            cfg.storage_batch.max(1),
        )
        .await
        .map_err(storage_io)?;
        first_client_id = started.first_client_id;
        (started.groups, StorageLink::Thread(storage_tx))
    } else {
        let mut storage: Box<dyn Storage> = match &cfg.storage {
            StorageConfig::Sqlite { dir, sync } => {
                Box::new(SqliteStorage::open(dir, *sync).map_err(storage_io)?)
            }
            _ => Box::new(MemoryStorage::new()),
        };
        storage.clear_locks().map_err(storage_io)?;
        let groups = storage.load_groups().map_err(storage_io)?;
        let link = if inline {
            StorageLink::Inline(storage)
        } else {
            let (storage_tx, storage_rx) = mpsc::channel::<StorageOp>(cfg.storage_queue.max(1));
            storage_closed = Some(spawn_storage_thread(
                storage,
                storage_rx,
                done_tx,
                cfg.storage_batch.max(1),
            )?);
            StorageLink::Thread(storage_tx)
        };
        (groups, link)
    };

    let clock = Clock::start();
    let mut core_cfg = cfg.core.clone();
    core_cfg.wall_epoch_unix_secs = clock.wall_micros(Instant::ZERO) / 1_000_000;
    core_cfg.shared_locks |= matches!(cfg.storage, StorageConfig::Nats(_));
    core_cfg.shared_membership |= matches!(cfg.storage, StorageConfig::Nats(_));
    let max_frame = core_cfg.max_frame;
    let mut core = RelayCore::new(core_cfg);
    core.restore_groups(groups);

    let tcp = TcpListener::bind(cfg.listen).await?;
    let tcp_addr = tcp.local_addr()?;
    let ws = match cfg.ws {
        Some(a) => Some(TcpListener::bind(a).await?),
        None => None,
    };
    let ws_addr = ws.as_ref().map(TcpListener::local_addr).transpose()?;

    let (inputs_tx, inputs_rx) = mpsc::unbounded_channel::<Ready>();
    let (events_tx, events_rx) = mpsc::unbounded_channel::<Event>();
    let (commands, commands_rx) = mpsc::unbounded_channel();
    let next_id = Arc::new(AtomicU64::new(first_client_id));
    let (placement, background) = Placement::start(cfg.background_nice)?;
    let gate = Gate::new(
        Limits {
            handshake_timeout: cfg.handshake_timeout,
            idle_timeout: cfg.idle_timeout,
            max_conns_per_ip: cfg.max_conns_per_ip,
            max_frame,
            socket_send_buffer: cfg.socket_send_buffer,
            demo_page: cfg.demo_page,
            clock,
        },
        placement,
    );

    let mut acceptors = vec![tokio::spawn(accept_loop(
        tcp,
        Transport::Tcp,
        cfg.tls.clone(),
        next_id.clone(),
        inputs_tx.clone(),
        events_tx.clone(),
        gate.clone(),
    ))];
    if let Some(ws) = ws {
        acceptors.push(tokio::spawn(accept_loop(
            ws,
            Transport::WebSocket,
            cfg.tls.clone(),
            next_id,
            inputs_tx,
            events_tx,
            gate.clone(),
        )));
    }
    let driver = Driver {
        core,
        clock,
        writers: crate::sched::ConnIdMap::default(),
        storage,
        fanout_budget: cfg.fanout_budget.max(1),
        rings: InputRings::new(),
        input_pause_bytes: cfg.input_pause_bytes,
        paused: BTreeSet::new(),
        recheck: Vec::new(),
        gate,
        dirty: Vec::new(),
        gathered: 0,
        background,
        loads_left: LOADS_PER_TURN,
        yield_at: Instant::ZERO,
    };
    let task = tokio::spawn(driver.run(inputs_rx, events_rx, done_rx, commands_rx, acceptors));
    tracing::info!(tcp = %tcp_addr, ws = ?ws_addr, tls = cfg.tls.is_some(), "relay listening");
    Ok(RelayHandle {
        tcp: tcp_addr,
        ws: ws_addr,
        commands,
        task,
        storage_closed,
    })
}

/// `e` as an I/O error that keeps it as its inner error, so a caller can
/// tell [`StorageError::ClusterSettings`] (a node to start differently)
/// from a store that failed (`io::Error::get_ref`, then `downcast_ref`).
fn storage_io(e: StorageError) -> std::io::Error {
    std::io::Error::other(e)
}

/// Runs storage operations in order on a dedicated thread, batching
/// whatever is queued (up to `batch`) into one [`execute`] call.
fn spawn_storage_thread(
    mut storage: Box<dyn Storage>,
    mut rx: mpsc::Receiver<StorageOp>,
    done: mpsc::UnboundedSender<StorageDone>,
    batch: usize,
) -> std::io::Result<oneshot::Receiver<()>> {
    let (closed_tx, closed) = oneshot::channel();
    // A named thread rather than `spawn_blocking`: it lives as long as the
    // relay and owns the (non-`Sync`) SQLite connection.
    std::thread::Builder::new()
        .name("relay-storage".into())
        .spawn(move || {
            'serve: while let Some(first) = rx.blocking_recv() {
                let mut ops = vec![first];
                while ops.len() < batch {
                    match rx.try_recv() {
                        Ok(op) => ops.push(op),
                        Err(_) => break,
                    }
                }
                for d in execute(storage.as_mut(), ops) {
                    if done.send(d).is_err() {
                        break 'serve;
                    }
                }
            }
            // The database is closed when the receiver hears.
            drop(storage);
            drop(closed_tx);
        })
        .map(|_| closed)
}

/// Input lanes: one per receive priority (group priorities 0..=7).
const LANES: usize = MAX_GROUP_PRIORITY as usize + 1;
/// State-transfer pages (joiners, members that lag and follow the log)
/// an inline store loads per turn of the core task. Each page becomes
/// frames (a 16 KiB page of 100-byte updates: tens of microseconds), and
/// a hundred slow readers ask for theirs together: loaded in one turn,
/// they held a member's frame for milliseconds (`relay_hostile --kinds
/// slow`, `docs/results/reliability.md`).
/// The rest wait for the next turn, after the runtime has polled the
/// sockets.
const LOADS_PER_TURN: usize = 1;
/// Longest the core task works through turns without yielding to the
/// runtime (so that it reads the sockets): see `run`.
const YIELD_EVERY: Duration = Duration::from_micros(100);
/// Inputs the core task takes per turn before it fans out again.
const INPUTS_PER_TURN: usize = 65;

/// What a connection's reader and the core task share.
#[derive(Debug)]
struct ConnShared {
    /// What the reader has read and the core task not yet taken (see
    /// [`input`]).
    queue: std::sync::Mutex<VecDeque<Input>>,
    /// Bytes a reader may have in its queue (frames plus
    /// [`FRAME_OVERHEAD`] each, at least one whole frame): bounds what one
    /// connection holds there however fast it sends.
    inflight_bytes: Arc<Semaphore>,
    /// Frames a reader may have in its queue ([`input::MAX_QUEUED_FRAMES`]).
    inflight_frames: Arc<Semaphore>,
    /// The size of `inflight_bytes`: a frame asks for at most all of it.
    inflight_budget: usize,
    /// Backpressure: set by the core task while the client's unread
    /// replies are over [`ServerConfig::input_pause_bytes`]; the reader
    /// does not read while it is set.
    paused: AtomicBool,
    /// Notified when `paused` is cleared.
    resume: Notify,
    /// Where the connection's tasks run (see `place`): set by the core
    /// task from the connection's standing.
    class: Arc<Class>,
}

/// What a frame costs in a connection's in-flight budget beyond its bytes
/// (the `Bytes` handle, its allocation, the lane slot).
const FRAME_OVERHEAD: usize = 64;
/// A connection's in-flight budget when frames are small (the cap on a
/// frame raises it).
const MIN_INFLIGHT_BYTES: usize = 256 << 10;

impl ConnShared {
    /// A connection's shared state; its in-flight budget fits a frame of
    /// `max_frame` bytes.
    fn new(max_frame: usize) -> Self {
        // At most u32::MAX: permits are asked for as a u32.
        let most = usize::try_from(u32::MAX).unwrap_or(usize::MAX);
        let budget = max_frame
            .saturating_add(FRAME_OVERHEAD)
            .clamp(MIN_INFLIGHT_BYTES, most.min(Semaphore::MAX_PERMITS));
        Self {
            queue: std::sync::Mutex::new(VecDeque::new()),
            inflight_bytes: Arc::new(Semaphore::new(budget)),
            inflight_frames: Arc::new(Semaphore::new(input::MAX_QUEUED_FRAMES)),
            inflight_budget: budget,
            paused: AtomicBool::new(false),
            resume: Notify::new(),
            class: Class::new(),
        }
    }
}

/// Connection lifecycle and writer feedback (unbounded; bounded in
/// practice by connections and the core's writer cap).
enum Event {
    /// A connection's writer task, reader state and (plain TCP) socket.
    Connected(
        ConnId,
        mpsc::UnboundedSender<Outgoing>,
        Arc<ConnShared>,
        Option<DirectSocket>,
    ),
    Written(ConnId, usize),
    Disconnected(ConnId),
}

/// A frame for a writer; `close` ends the connection after it.
struct Outgoing {
    frame: Bytes,
    close: bool,
}

/// Where the core task's storage operations go.
enum StorageLink {
    /// The storage thread (SQLite: its calls block).
    Thread(mpsc::Sender<StorageOp>),
    /// Run by the core task itself (memory).
    Inline(Box<dyn Storage>),
}

struct Driver {
    core: RelayCore,
    clock: Clock,
    writers: crate::sched::ConnIdMap<Writer>,
    storage: StorageLink,
    fanout_budget: usize,
    /// Connections with input waiting, by lane.
    rings: InputRings,
    /// See [`ServerConfig::input_pause_bytes`].
    input_pause_bytes: usize,
    /// Connections whose reader is paused (backpressure).
    paused: BTreeSet<ConnId>,
    /// Paused connections that had frames handed out since the last look:
    /// only these can have less backlog now (may name one twice).
    recheck: Vec<ConnId>,
    gate: Arc<Gate>,
    /// Connections with frames gathered since the last flush (see
    /// [`output`]); may name one twice, or one gone.
    dirty: Vec<ConnId>,
    /// Frames gathered since the last flush of every connection.
    gathered: usize,
    /// The thread of the connections that do not keep up (see `place`),
    /// stopped a moment after the core task (so the connections it
    /// serves can say `SHUTTING_DOWN`).
    background: Option<Background>,
    /// Pages the inline store may still load this turn (of
    /// [`LOADS_PER_TURN`]); at 0, more may wait in the core.
    loads_left: usize,
    /// When the core task, busy since, yields to the runtime next.
    yield_at: Instant,
}

impl Driver {
    /// Hands the core's storage operations to the storage thread, or runs
    /// them. `None` if the storage thread is gone; `Some(true)` if results
    /// came back at once (inline storage), so there may be frames to send.
    async fn flush_storage(&mut self) -> Option<bool> {
        let mut ran = false;
        match &mut self.storage {
            StorageLink::Thread(tx) => {
                while let Some(op) = self.core.poll_storage() {
                    if tx.send(op).await.is_err() {
                        tracing::error!("relay storage thread stopped");
                        return None;
                    }
                }
            }
            StorageLink::Inline(storage) => {
                loop {
                    // Results may ask for more (a state transfer's next
                    // page). Pages stop once the turn has loaded
                    // `LOADS_PER_TURN`: the ops behind stay queued in the
                    // core, in order.
                    let mut ops = Vec::new();
                    while self.loads_left > 0 {
                        let Some(op) = self.core.poll_storage() else {
                            break;
                        };
                        if matches!(op, StorageOp::Load { .. }) {
                            self.loads_left -= 1;
                        }
                        ops.push(op);
                    }
                    if ops.is_empty() {
                        break;
                    }
                    let now = self.clock.now();
                    for d in execute(storage.as_mut(), ops) {
                        self.core.handle_storage(now, d);
                    }
                    ran = true;
                }
            }
        }
        Some(ran)
    }

    async fn run(
        mut self,
        mut ready: mpsc::UnboundedReceiver<Ready>,
        mut events: mpsc::UnboundedReceiver<Event>,
        mut done: mpsc::UnboundedReceiver<StorageDone>,
        mut commands: mpsc::UnboundedReceiver<Command>,
        acceptors: Vec<tokio::task::JoinHandle<()>>,
    ) {
        loop {
            // Drain outputs: storage first (so appends keep their order),
            // then at most one budget of frames in priority order.
            if self.flush_storage().await.is_none() {
                return;
            }
            let mut budget = self.fanout_budget;
            let now = self.clock.now();
            while budget > 0 {
                let Some(t) = self.core.poll_transmit(now) else {
                    break;
                };
                budget -= 1;
                self.hand_out(t);
            }
            self.resume_readers();
            // Sending a state-transfer page asks for the next one.
            let Some(loaded) = self.flush_storage().await else {
                return;
            };
            let busy = budget == 0 || !self.rings.is_empty();
            let loads_waiting = self.loads_left == 0;
            self.loads_left = LOADS_PER_TURN;
            let mut more = busy || loaded || loads_waiting;
            // Write once caught up (or when much is gathered): see
            // `output`. Pages still to load do not hold the writes back:
            // they are for members that lag or join, while the frames
            // gathered may be a member's reply. What the socket took
            // leaves room at the writer for frames the scheduler held
            // back: look again at once.
            if (!busy || self.gathered >= FLUSH_FRAMES) && self.flush_all() {
                more = true;
            }
            // Busy for long, or pages wait: yield to the runtime, which
            // polls the sockets before this task runs again, so a
            // member's frame that came meanwhile is read and taken next
            // turn. `consume_budget` alone yields once per 128 turns: a
            // hundred slow readers' credits and pages made chains of
            // turns that held a member's frame for a millisecond.
            if more && (loads_waiting || self.clock.now() >= self.yield_at) {
                tokio::task::yield_now().await;
                self.yield_at = self.clock.now() + YIELD_EVERY;
            }
            let deadline = self.core.poll_timeout().map(|t| self.clock.to_tokio(t));
            tokio::select! {
                biased;
                Some(c) = commands.recv() => match c {
                    Command::Stats(tx) => {
                        let mut s = self.core.stats();
                        self.gate.counters.add_to(&mut s);
                        let _ = tx.send(s);
                    }
                    Command::Depths(tx) => { let _ = tx.send(self.core.queue_depths()); }
                    Command::Shutdown => break,
                },
                Some(ev) = events.recv() => self.on_event(ev),
                Some(d) = done.recv() => self.core.handle_storage(self.clock.now(), d),
                Some(r) = ready.recv() => self.take_ready(r),
                () = sleep_until(deadline) => self.core.handle_timeout(self.clock.now()),
                // More to do: go on, but through the task's coop budget.
                // An always-ready branch never hands the worker thread
                // back while work keeps coming, and the tasks queued
                // behind this one on that worker (readers, writers, and
                // in tests the clients) starve: a watcher read nothing
                // for 30 s while a NATS-backed node stayed busy.
                () = tokio::task::coop::consume_budget(), if more => {}
            }
            if !more {
                // It waited: busy from now on.
                self.yield_at = self.clock.now() + YIELD_EVERY;
            }
            if !self.serve_inputs(&mut ready, &mut events) {
                break;
            }
        }
        let _ = self.flush_all();
        for a in acceptors {
            a.abort();
        }
        let shutting = frame::encode(
            0,
            &frame::Frame::Error {
                code: frame::ErrorCode::SHUTTING_DOWN,
                message: "the relay is shutting down".into(),
            },
        );
        #[expect(
            clippy::iter_over_hash_type,
            reason = "every writer gets the same close; the order does not show"
        )]
        for (_, w) in std::mem::take(&mut self.writers) {
            w.close_with(shutting.clone());
        }
        if let Some(bg) = self.background.take() {
            tokio::spawn(async move {
                tokio::time::sleep(conn::LINGER).await;
                drop(bg);
            });
        }
    }

    /// A frame from the core: gathered for its connection, or (a fatal
    /// error) handed to its writer task behind what is gathered.
    fn hand_out(&mut self, t: crate::sched::Transmit) {
        if t.close_after {
            if let Some(w) = self.writers.remove(&t.conn) {
                // The error and the lingering close behind it: background.
                w.shared.class.set(BACKGROUND);
                let n = w.close_with(t.frame);
                self.core.handle_written(t.conn, n);
            }
            return;
        }
        let Some(w) = self.writers.get_mut(&t.conn) else {
            return;
        };
        if w.shared.paused.load(Ordering::Relaxed) {
            self.recheck.push(t.conn);
        }
        if w.push(t.frame) {
            self.dirty.push(t.conn);
        }
        self.gathered += 1;
        if w.pending_bytes() >= WRITE_BATCH {
            let _ = self.flush(t.conn);
        }
    }

    /// Writes what is gathered for `conn`; `true` if the socket took
    /// some of it at once.
    fn flush(&mut self, conn: ConnId) -> bool {
        let keeps_up = self.core.keeps_up(conn);
        let Some(w) = self.writers.get_mut(&conn) else {
            return false;
        };
        w.place(keeps_up);
        let n = w.flush();
        if n > 0 {
            self.core.handle_written(conn, n);
        }
        n > 0
    }

    /// Writes what is gathered for every connection; `true` if a socket
    /// took some of it at once.
    fn flush_all(&mut self) -> bool {
        let mut dirty = std::mem::take(&mut self.dirty);
        let mut any = false;
        for conn in dirty.drain(..) {
            any |= self.flush(conn);
        }
        self.dirty = dirty;
        self.gathered = 0;
        any
    }

    /// A connection has input waiting: into the ring of its lane.
    fn take_ready(&mut self, (conn, shared): Ready) {
        let lane = usize::from(self.core.receive_priority(conn));
        self.rings.push(lane, (conn, shared));
    }

    /// Takes up to [`INPUTS_PER_TURN`] inputs, round robin between the
    /// connections of the highest lane with input (see [`input`]). Events
    /// first, so a connection's `Connected` comes before its first frame.
    /// `false` once the readers' side is gone (the relay stops).
    fn serve_inputs(
        &mut self,
        ready: &mut mpsc::UnboundedReceiver<Ready>,
        events: &mut mpsc::UnboundedReceiver<Event>,
    ) -> bool {
        loop {
            match ready.try_recv() {
                Ok(r) => self.take_ready(r),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => return false,
            }
        }
        if self.rings.is_empty() {
            return true;
        }
        while let Ok(ev) = events.try_recv() {
            self.on_event(ev);
        }
        for _ in 0..INPUTS_PER_TURN {
            let core = &self.core;
            let Some(input) = self.rings.next(|c| usize::from(core.receive_priority(c))) else {
                break;
            };
            self.on_input(input);
        }
        true
    }

    fn on_input(&mut self, input: Input) {
        let now = self.clock.now();
        let conn = input.conn();
        match input {
            Input::Frame(conn, bytes, _permit) => self.core.handle_frame(now, conn, &bytes),
            Input::StreamError(conn, e) => self.core.handle_stream_error(now, conn, &e),
            Input::Violation(conn, message) => self.core.handle_violation(now, conn, message),
            Input::Timeout(conn, message) => self.core.handle_conn_timeout(now, conn, &message),
        }
        if let Some(w) = self.writers.get(&conn) {
            // Backpressure: replies drain only as fast as the client reads.
            if self.core.reply_backlog(conn) > self.input_pause_bytes
                && !w.shared.paused.swap(true, Ordering::AcqRel)
            {
                self.paused.insert(conn);
                self.gate
                    .counters
                    .input_pauses
                    .fetch_add(1, Ordering::Relaxed);
                tracing::debug!(
                    conn = conn.0,
                    "relay stops reading a client until it reads its replies"
                );
            }
            // After the pause, which `place` reads.
            w.place(self.core.keeps_up(conn));
        }
    }

    /// Lets paused readers read again once their replies are down to half
    /// the threshold (hysteresis: one pause per backlog, not per frame).
    /// Only the connections whose backlog can have shrunk are looked at
    /// (frames of theirs were handed out): a hundred flooders paused for
    /// good cost nothing per turn.
    fn resume_readers(&mut self) {
        let low = self.input_pause_bytes / 2;
        for conn in self.recheck.drain(..) {
            if !self.paused.contains(&conn) {
                continue;
            }
            let Some(w) = self.writers.get(&conn) else {
                self.paused.remove(&conn);
                continue;
            };
            if self.core.reply_backlog(conn) > low {
                continue;
            }
            self.paused.remove(&conn);
            w.shared.paused.store(false, Ordering::Release);
            w.place(self.core.keeps_up(conn));
            w.shared.resume.notify_one();
        }
    }

    fn on_event(&mut self, ev: Event) {
        let now = self.clock.now();
        match ev {
            Event::Connected(conn, tx, shared, direct) => {
                self.writers.insert(conn, Writer::new(tx, shared, direct));
                self.core.handle_connect(now, conn);
            }
            Event::Written(conn, n) => {
                self.core.handle_written(conn, n);
                let keeps_up = self.core.keeps_up(conn);
                if let Some(w) = self.writers.get_mut(&conn) {
                    w.task_wrote(n);
                    w.place(keeps_up);
                }
            }
            Event::Disconnected(conn) => {
                if let Some(w) = self.writers.remove(&conn) {
                    // What it sent and the core has not taken goes with it
                    // (its permits too); its ready token, if any, finds
                    // the queue empty.
                    w.shared
                        .queue
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .clear();
                }
                self.paused.remove(&conn);
                self.core.handle_disconnect(now, conn);
            }
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Transport {
    Tcp,
    WebSocket,
}

async fn accept_loop(
    listener: TcpListener,
    transport: Transport,
    tls: Option<ServerTls>,
    next_id: Arc<AtomicU64>,
    inputs: mpsc::UnboundedSender<Ready>,
    events: mpsc::UnboundedSender<Event>,
    gate: Arc<Gate>,
) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) if conn::out_of_descriptors(&e) => {
                // Shed the oldest connection that has not said Hello, then
                // give its task a moment to close its descriptor. Never
                // stop accepting: the next client may be a real one.
                match gate.shed_oldest() {
                    Some(conn) => tracing::warn!(
                        error = %e,
                        conn = conn.0,
                        "relay out of file descriptors: closed the oldest connection without Hello"
                    ),
                    None => tracing::warn!(
                        error = %e,
                        "relay out of file descriptors and no connection without Hello to close"
                    ),
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
            Err(e) => {
                // Transient (a connection reset before it was accepted, and
                // the like): back off a little instead of spinning.
                tracing::warn!(error = %e, "relay accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let conn = ConnId(next_id.fetch_add(1, Ordering::Relaxed));
        let Some(ticket) = gate.admit(conn, peer.ip()) else {
            tracing::debug!(conn = conn.0, %peer, "relay refuses a connection: too many from that address");
            continue;
        };
        let _ = stream.set_nodelay(true);
        // Plain TCP starts with a small send buffer, raised to the
        // configured one at the client's first Credit (see
        // `UNCREDITED_SEND_BUFFER`); where the socket is out of reach
        // later (TLS, WebSocket), the configured one from the start.
        let raise = gate
            .limits
            .socket_send_buffer
            .filter(|_| tls.is_none() && matches!(transport, Transport::Tcp));
        if let Some(n) = gate.limits.socket_send_buffer {
            let first = raise.map_or(n, |n| n.min(UNCREDITED_SEND_BUFFER));
            let _ = socket2::SockRef::from(&stream).set_send_buffer_size(first);
        }
        tracing::debug!(conn = conn.0, %peer, ?transport, "relay connection");
        let inputs = InputTx::new(
            conn,
            inputs.clone(),
            Arc::new(ConnShared::new(gate.limits.max_frame)),
        );
        let events = events.clone();
        let tls = tls.clone();
        let class = inputs.shared.class.clone();
        // Placed, not spawned: it starts in the background (see `place`).
        gate.placement.spawn(&class, async move {
            match tls {
                None => match transport {
                    Transport::Tcp => {
                        let (rd, wr) = stream.into_split();
                        let wr = Arc::new(wr);
                        let sides = (rd, SharedWrite(wr.clone()), raise);
                        serve_tcp(conn, sides, Some(wr), inputs, events, ticket).await;
                    }
                    Transport::WebSocket => serve_ws(conn, stream, inputs, events, ticket).await,
                },
                // The TLS handshake runs in the connection's own task, so a
                // slow or silent peer holds up nobody else.
                Some(tls) => match tls.accept(stream).await {
                    Ok(stream) => match transport {
                        Transport::Tcp => {
                            let (rd, wr) = tokio::io::split(stream);
                            serve_tcp(conn, (rd, wr, None), None, inputs, events, ticket).await;
                        }
                        Transport::WebSocket => {
                            serve_ws(conn, stream, inputs, events, ticket).await;
                        }
                    },
                    Err(e) => {
                        tracing::debug!(conn = conn.0, %peer, error = %e, "TLS handshake failed")
                    }
                },
            }
        });
    }
}

/// A connection's handshake and idle timers (see
/// [`ServerConfig::handshake_timeout`], [`ServerConfig::idle_timeout`]).
struct Timers {
    clock: Clock,
    deadline: Option<tokio::time::Instant>,
    idle: Option<Duration>,
    greeted: bool,
}

impl Timers {
    fn start(limits: &conn::Limits) -> Self {
        Self {
            clock: limits.clock,
            deadline: Some(limits.clock.tokio_after(limits.handshake_timeout)),
            idle: limits.idle_timeout,
            greeted: false,
        }
    }

    /// A whole frame arrived: the idle timer starts again.
    fn frame_received(&mut self, ticket: &Ticket) {
        if !self.greeted {
            self.greeted = true;
            ticket.greeted();
        }
        self.deadline = self.idle.map(|d| self.clock.tokio_after(d));
    }

    /// The timer fired: counts it and says why, for the `TIMEOUT` error.
    fn expired(&self, ticket: &Ticket) -> String {
        let c = &ticket.gate().counters;
        if self.greeted {
            c.idle_timeouts.fetch_add(1, Ordering::Relaxed);
            let idle = self.idle.unwrap_or_default();
            format!("nothing received for {idle:?} (idle timeout)")
        } else {
            c.handshake_timeouts.fetch_add(1, Ordering::Relaxed);
            let t = ticket.gate().limits.handshake_timeout;
            format!("no Hello within {t:?} (handshake timeout)")
        }
    }
}

/// How a connection's reader ends.
enum End {
    /// The peer closed, failed or the relay stopped: just go.
    Gone,
    /// A fatal error was queued for the writer: wait until it is written
    /// (the writer then shuts its side down), then linger.
    Fatal,
    /// The relay shed the connection (out of descriptors): go at once.
    Shed,
}

/// The read side of a TCP connection; for plain TCP it reaches the socket,
/// whose send buffer grows at the client's first `Credit`.
trait ReadSide: AsyncRead + Unpin + Send + 'static {
    /// Sets the socket's send buffer (`SO_SNDBUF`), where it can.
    fn set_send_buffer(&self, _bytes: usize) {}
}

impl ReadSide for tokio::net::tcp::OwnedReadHalf {
    fn set_send_buffer(&self, bytes: usize) {
        let _ = socket2::SockRef::from(self.as_ref()).set_send_buffer_size(bytes);
    }
}

impl<S: AsyncRead + Send + 'static> ReadSide for tokio::io::ReadHalf<S> {}

/// Kernel send buffer of a plain TCP connection until the client first
/// credits what it read (Linux doubles it). A client that sends requests
/// and never reads is stopped once the kernel buffers on both sides and
/// the writer cap are full: with the configured 256 KiB that took about
/// 640 KB of 20-byte `Pong`s per ping flooder, some 30 000 replies each
/// for the relay to make and write; with this, the relay's share of the
/// kernel's part is 32 KiB. A reading client credits after a quarter of
/// its window; until then its replies and first deliveries go out 32 KiB
/// at a time, which is no limit on loopback or a LAN.
const UNCREDITED_SEND_BUFFER: usize = 16 << 10;

/// Serves one TCP connection, plain or inside TLS: its read half, write
/// half, and the send buffer to raise the socket's to at the first
/// `Credit` (if any); for plain TCP, the socket the core task writes to
/// directly (see [`output`]).
async fn serve_tcp<R, W>(
    conn: ConnId,
    (mut rd, mut wr, mut raise): (R, W, Option<usize>),
    direct: Option<DirectSocket>,
    mut inputs: InputTx,
    events: mpsc::UnboundedSender<Event>,
    ticket: Ticket,
) where
    R: ReadSide,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<Outgoing>();
    let (closed_tx, mut closed_rx) = oneshot::channel::<()>();
    if events
        .send(Event::Connected(
            conn,
            out_tx,
            inputs.shared.clone(),
            direct,
        ))
        .is_err()
    {
        return;
    }
    let wevents = events.clone();
    let placement = &ticket.gate().placement;
    let mut writer = placement.spawn(&inputs.shared.class, async move {
        // Everything already queued goes out in one write (and one
        // `Written` event): a syscall per frame capped fan-out far below
        // what the core can schedule.
        let mut batch: Vec<u8> = Vec::new();
        while let Some(first) = out_rx.recv().await {
            let mut close = first.close;
            let n = if close || out_rx.is_empty() {
                if write_flushed(&mut wr, &first.frame).await.is_err() {
                    break;
                }
                first.frame.len()
            } else {
                batch.clear();
                batch.extend_from_slice(&first.frame);
                while !close && batch.len() < WRITE_BATCH {
                    match out_rx.try_recv() {
                        Ok(o) => {
                            batch.extend_from_slice(&o.frame);
                            close = o.close;
                        }
                        Err(_) => break,
                    }
                }
                if write_flushed(&mut wr, &batch).await.is_err() {
                    break;
                }
                batch.len()
            };
            let _ = wevents.send(Event::Written(conn, n));
            if close {
                // The fatal error is in the socket: flush, then shut the
                // write side down so the client reads it, then EOF.
                let _ = wr.flush().await;
                let _ = wr.shutdown().await;
                let _ = closed_tx.send(());
                return;
            }
        }
        let _ = wr.shutdown().await;
    });
    let limits = ticket.gate().limits;
    let mut timers = Timers::start(&limits);
    let mut decoder = FrameDecoder::new(limits.max_frame);
    let shared = inputs.shared.clone();
    let mut error_written = false;
    let end = 'read: loop {
        let paused = shared.paused.load(Ordering::Acquire);
        tokio::select! {
            r = rd.read_buf(decoder.read_buffer()), if !paused => match r {
                Ok(0) | Err(_) => break 'read End::Gone,
                Ok(_) => {
                    let mut any = false;
                    loop {
                        match decoder.next_frame() {
                            Ok(Some(f)) => {
                                any = true;
                                if let Some(n) = raise.filter(|_| frame::is_credit(&f)) {
                                    rd.set_send_buffer(n);
                                    raise = None;
                                }
                                if inputs.send_frame(f).await.is_err() {
                                    break 'read End::Gone;
                                }
                            }
                            Ok(None) => break,
                            Err(e) => {
                                let _ = inputs.send(Input::StreamError(conn, e));
                                break 'read End::Fatal;
                            }
                        }
                    }
                    // One wake-up of the core task for all this read gave.
                    if inputs.flush().is_err() {
                        break 'read End::Gone;
                    }
                    if any {
                        timers.frame_received(&ticket);
                    }
                }
            },
            () = shared.resume.notified(), if paused => {}
            () = sleep_until(timers.deadline) => {
                let why = timers.expired(&ticket);
                let _ = inputs.send(Input::Timeout(conn, why));
                break 'read End::Fatal;
            }
            () = ticket.shed.notified() => break 'read End::Shed,
            _ = &mut closed_rx => {
                error_written = true;
                break 'read End::Fatal;
            }
        }
    };
    if matches!(end, End::Fatal) {
        // Wait (bounded: the client may not read) until the writer has
        // sent the error and shut its side down; then read and discard
        // what the client still sends, so closing does not reset the
        // connection under the error before the client reads it. (A
        // oneshot polled again after it completed panics: the task died
        // there, after every error the core sent, without its linger.)
        if error_written
            || tokio::time::timeout(conn::LINGER, &mut closed_rx)
                .await
                .is_ok()
        {
            conn::linger(&mut rd).await;
        }
    }
    let _ = events.send(Event::Disconnected(conn));
    if !matches!(end, End::Shed) {
        let _ = tokio::time::timeout(conn::LINGER, writer.finished()).await;
    }
    writer.abort();
}

/// Writes `bytes` and flushes: a no-op for a plain socket, but TLS keeps
/// what the socket could not take yet in its own buffer until flushed.
async fn write_flushed(wr: &mut (impl AsyncWrite + Unpin), bytes: &[u8]) -> std::io::Result<()> {
    wr.write_all(bytes).await?;
    wr.flush().await
}

/// Most bytes a TCP writer copies into one write (a few frames of the
/// default 1 MiB cap would otherwise make one huge buffer).
const WRITE_BATCH: usize = 64 << 10;

/// Serves one WebSocket connection, over plain TCP or TLS (`wss`).
async fn serve_ws<S>(
    conn: ConnId,
    stream: S,
    mut inputs: InputTx,
    events: mpsc::UnboundedSender<Event>,
    ticket: Ticket,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let limits = ticket.gate().limits;
    let max_frame = limits.max_frame;
    let mut timers = Timers::start(&limits);
    let config = WebSocketConfig::default()
        .max_message_size(Some(max_frame))
        .max_frame_size(Some(max_frame));
    let ws = tokio::select! {
        r = conn::ws_upgrade(stream, config, limits.demo_page) => match r {
            Ok(ws) => ws,
            Err(e) => {
                tracing::debug!(conn = conn.0, reason = e.0, "websocket upgrade refused");
                return;
            }
        },
        // Counted inside the branch's future: select! drops the upgrade,
        // and with it the socket, before a handler runs, and the client
        // could read the relay's stats before the count (the connection
        // runs on the background thread).
        _ = async { sleep_until(timers.deadline).await; timers.expired(&ticket) } => return,
        () = ticket.shed.notified() => return,
    };
    let (mut sink, mut source) = ws.split();
    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<Outgoing>();
    let (closed_tx, mut closed_rx) = oneshot::channel::<()>();
    if events
        .send(Event::Connected(conn, out_tx, inputs.shared.clone(), None))
        .is_err()
    {
        return;
    }
    let wevents = events.clone();
    let placement = &ticket.gate().placement;
    let mut writer = placement.spawn(&inputs.shared.class, async move {
        while let Some(o) = out_rx.recv().await {
            let len = o.frame.len();
            let close = o.close.then(|| conn::close_frame(&o.frame));
            if sink.send(Message::Binary(o.frame)).await.is_err() {
                break;
            }
            let _ = wevents.send(Event::Written(conn, len));
            if let Some(c) = close {
                // A fatal error: the close frame says why (RFC 6455 §7.4).
                let _ = sink.send(Message::Close(Some(c))).await;
                let _ = closed_tx.send(());
                return;
            }
        }
        let _ = sink.close().await;
    });
    let shared = inputs.shared.clone();
    let mut error_written = false;
    let end = 'read: loop {
        let paused = shared.paused.load(Ordering::Acquire);
        tokio::select! {
            m = source.next(), if !paused => {
                let bytes = match m {
                    Some(Ok(Message::Binary(b))) => b,
                    Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => continue,
                    Some(Ok(Message::Text(_))) => {
                        //= docs/relay-protocol.md#transports
                        //# Text messages are a protocol violation.
                        let _ = inputs
                            .send(Input::Violation(conn, "a WebSocket text message (frames travel in binary messages)"));
                        break 'read End::Fatal;
                    }
                    Some(Err(tokio_tungstenite::tungstenite::Error::Capacity(_))) => {
                        let _ = inputs
                            .send(Input::StreamError(conn, FrameError::TooLarge { len: max_frame + 1, max: max_frame }));
                        break 'read End::Fatal;
                    }
                    Some(Ok(Message::Close(_)) | Err(_)) | None => break 'read End::Gone,
                };
                // One message, one whole frame.
                match frame::frame_len(&bytes, max_frame) {
                    Ok(Some(len)) if len == bytes.len() => {
                        timers.frame_received(&ticket);
                        if inputs.send_frame(bytes).await.is_err() || inputs.flush().is_err() {
                            break 'read End::Gone;
                        }
                    }
                    other => {
                        let e = match other {
                            Err(e) => e,
                            _ => FrameError::Malformed("a WebSocket message must hold exactly one frame"),
                        };
                        let _ = inputs.send(Input::StreamError(conn, e));
                        break 'read End::Fatal;
                    }
                }
            }
            () = shared.resume.notified(), if paused => {}
            () = sleep_until(timers.deadline) => {
                let why = timers.expired(&ticket);
                let _ = inputs.send(Input::Timeout(conn, why));
                break 'read End::Fatal;
            }
            () = ticket.shed.notified() => break 'read End::Shed,
            _ = &mut closed_rx => {
                error_written = true;
                break 'read End::Fatal;
            }
        }
    };
    if matches!(end, End::Fatal)
        && (error_written
            || tokio::time::timeout(conn::LINGER, &mut closed_rx)
                .await
                .is_ok())
    {
        // Read until the client answers the close (or the linger ends),
        // so the close handshake completes (RFC 6455 §7.1.1).
        let _ = tokio::time::timeout(conn::LINGER, async {
            while let Some(Ok(m)) = source.next().await {
                if matches!(m, Message::Close(_)) {
                    break;
                }
            }
        })
        .await;
    }
    let _ = events.send(Event::Disconnected(conn));
    if !matches!(end, End::Shed) {
        let _ = tokio::time::timeout(conn::LINGER, writer.finished()).await;
    }
    writer.abort();
}
