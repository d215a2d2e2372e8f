//! Runs one sans-IO [`Machine`] over one datagram socket (STYLE.md §4).

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use groupwire_proto::units::MAX_UDP_PAYLOAD;
use groupwire_proto::{Instant, Machine, Transmit};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tracing::debug;

use crate::clock::Clock;
use crate::send::{send_transmits, sleep_until};
use crate::socket::{DatagramSocket, RecvBatch, is_transient};

/// A command for the machine: runs on the driver's task with the machine
/// and the current time, e.g. `Box::new(|m, now| { m.send(now, ..); })`.
pub type Command<M> = Box<dyn FnOnce(&mut M, Instant) + Send>;

/// What a handle queues: a command, and whether it answers a
/// [`DriverHandle::call`] (then everything earlier commands caused is sent
/// before it runs, so the answer comes after their transmits and events).
struct Request<M> {
    f: Command<M>,
    call: bool,
}

/// Sizes of the driver's channels and buffers.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct DriverConfig {
    /// Commands that may wait for the driver before
    /// [`DriverHandle::command`] waits too.
    pub command_capacity: usize,
    /// Events that may wait for the application before the driver waits
    /// (and, meanwhile, the socket's receive buffer fills and drops).
    pub event_capacity: usize,
    /// Receive buffer: the largest datagram the machine can see whole.
    pub recv_buffer: usize,
    /// Most receive buffers of `recv_buffer` bytes (64 KiB at least, for
    /// GRO) filled per system call, when the socket can fill several
    /// ([`DatagramSocket::max_recv_batch`]). The default, 32, costs 2 MiB
    /// per driver over a [`BatchedUdpSocket`](crate::BatchedUdpSocket);
    /// other sockets use one buffer whatever this says.
    pub recv_batch: usize,
    /// Most queued commands applied in one turn of the loop before the
    /// transmits they caused are sent together (so a GSO socket can send
    /// them in one system call) and the socket gets its turn.
    pub commands_per_turn: usize,
}

impl Default for DriverConfig {
    fn default() -> Self {
        Self {
            command_capacity: 256,
            event_capacity: 4096,
            recv_buffer: MAX_UDP_PAYLOAD,
            recv_batch: 32,
            commands_per_turn: 64,
        }
    }
}

impl DriverConfig {
    /// Sets the command channel's capacity.
    pub fn command_capacity(mut self, n: usize) -> Self {
        self.command_capacity = n.max(1);
        self
    }
    /// Sets the event channel's capacity.
    pub fn event_capacity(mut self, n: usize) -> Self {
        self.event_capacity = n.max(1);
        self
    }
    /// Sets the most receive buffers filled per system call.
    pub fn recv_batch(mut self, n: usize) -> Self {
        self.recv_batch = n.max(1);
        self
    }
    /// Sets the most commands applied per turn.
    pub fn commands_per_turn(mut self, n: usize) -> Self {
        self.commands_per_turn = n.max(1);
        self
    }
}

/// Counters of a running driver (a snapshot; see [`DriverHandle::stats`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DriverStats {
    /// Datagrams the socket accepted.
    pub datagrams_sent: u64,
    /// System calls (or socket calls) that sent them: below
    /// `datagrams_sent` when segmentation offload (GSO) batched some.
    pub send_calls: u64,
    /// Their bytes (UDP payload).
    pub bytes_sent: u64,
    /// Datagrams the socket refused: counted as lost, never an error.
    pub send_errors: u64,
    /// Transmits for a transport this driver does not carry (TCP frames), dropped.
    pub unsupported_transmits: u64,
    /// Datagrams received and handed to the machine.
    pub datagrams_received: u64,
    /// Receive calls that returned them: below `datagrams_received` when
    /// `recvmmsg` or GRO batched some.
    pub recv_calls: u64,
    /// Their bytes (UDP payload).
    pub bytes_received: u64,
    /// Receive errors that only mean a datagram was lost (ICMP
    /// unreachable, `ConnectionReset`), ignored.
    pub recv_errors: u64,
    /// Commands applied.
    pub commands: u64,
    /// Events dropped because the application closed its event receiver.
    pub events_dropped: u64,
}

/// Drives a [`Machine`] over a [`DatagramSocket`] in one select loop.
///
/// Each turn: send the transmits the machine queued (a failed send is a
/// lost datagram, counted in [`DriverStats::send_errors`]), hand its events
/// to the event channel, then wait for whichever comes first: a command
/// from a [`DriverHandle`], datagrams, or the machine's `poll_timeout`.
/// Time comes from one [`Clock`].
///
/// **Batching.** Every input is followed by the machine's full drain
/// (STYLE.md §3), but the transmits are only collected there and sent at
/// the end of the turn, so one turn can carry many: all the datagrams one
/// receive call returned, or up to [`DriverConfig::commands_per_turn`]
/// queued commands. Over a socket with segmentation offload
/// ([`DatagramSocket::max_send_segments`] above 1, e.g.
/// [`BatchedUdpSocket`](crate::BatchedUdpSocket) on Linux) consecutive
/// datagrams of one size to one destination then leave in one system
/// call; over a socket with `recvmmsg` ([`DatagramSocket::max_recv_batch`])
/// up to [`DriverConfig::recv_batch`] datagrams arrive in one. Over
/// tokio's `UdpSocket` it is one system call per datagram either way.
///
/// The driver stops, after a last drain, when every [`DriverHandle`] is
/// dropped, and returns the machine so its final state can be read. It
/// returns an error only for a receive error that does not merely mean a
/// lost datagram. If the application drops the event receiver, events are
/// counted and dropped; the driver goes on.
pub struct Driver<M: Machine, S> {
    machine: M,
    socket: S,
    clock: Clock,
    commands: mpsc::Receiver<Request<M>>,
    events: mpsc::Sender<M::Event>,
    counters: Arc<Counters>,
    recv_buffer: usize,
    recv_batch: usize,
    commands_per_turn: usize,
}

impl<M, S> Driver<M, S>
where
    M: Machine + Send + 'static,
    M::Event: Send + 'static,
    S: DatagramSocket,
{
    /// A driver with default channel sizes; see [`Driver::with_config`].
    pub fn new(
        machine: M,
        socket: S,
        clock: Clock,
    ) -> io::Result<(Self, DriverHandle<M>, mpsc::Receiver<M::Event>)> {
        Self::with_config(machine, socket, clock, DriverConfig::default())
    }

    /// A driver, the handle that sends it commands, and the receiver of
    /// the machine's events. Fails only if the socket has no local address.
    pub fn with_config(
        machine: M,
        socket: S,
        clock: Clock,
        cfg: DriverConfig,
    ) -> io::Result<(Self, DriverHandle<M>, mpsc::Receiver<M::Event>)> {
        let local_addr = socket.local_addr()?;
        let (cmd_tx, cmd_rx) = mpsc::channel(cfg.command_capacity.max(1));
        let (ev_tx, ev_rx) = mpsc::channel(cfg.event_capacity.max(1));
        let counters = Arc::new(Counters::default());
        let handle = DriverHandle {
            commands: cmd_tx,
            counters: Arc::clone(&counters),
            clock,
            local_addr,
        };
        let driver = Self {
            machine,
            socket,
            clock,
            commands: cmd_rx,
            events: ev_tx,
            counters,
            recv_buffer: cfg.recv_buffer.max(1),
            recv_batch: cfg.recv_batch.max(1),
            commands_per_turn: cfg.commands_per_turn.max(1),
        };
        Ok((driver, handle, ev_rx))
    }

    /// Runs [`Driver::run`] on a new tokio task.
    pub fn spawn(self) -> JoinHandle<io::Result<M>> {
        tokio::spawn(self.run())
    }

    /// Runs until every [`DriverHandle`] is dropped; returns the machine.
    pub async fn run(self) -> io::Result<M> {
        let Self {
            mut machine,
            socket,
            clock,
            mut commands,
            events,
            counters,
            recv_buffer,
            recv_batch,
            commands_per_turn,
        } = self;
        let slots = recv_batch.min(socket.max_recv_batch()).max(1);
        // With several buffers the socket may also glue datagrams (GRO),
        // up to 64 KiB per buffer.
        let slot_len = if slots > 1 {
            recv_buffer.max(GRO_BUFFER)
        } else {
            recv_buffer
        };
        let mut rx = RecvBatch::new(slots, slot_len);
        let mut out = Outbox::default();
        let mut events_open = true;
        let mut commands_open = true;
        loop {
            out.drain(&mut machine, clock.now());
            out.flush(&socket, &counters, &events, &mut events_open)
                .await;
            if !commands_open {
                return Ok(machine);
            }
            let deadline = machine.poll_timeout().map(|t| clock.to_tokio(t));
            tokio::select! {
                req = commands.recv() => {
                    let mut next = req;
                    let mut applied = 0;
                    loop {
                        let Some(req) = next else {
                            commands_open = false;
                            break;
                        };
                        if req.call {
                            out.flush(&socket, &counters, &events, &mut events_open)
                                .await;
                        }
                        Counters::add(&counters.commands, 1);
                        let now = clock.now();
                        (req.f)(&mut machine, now);
                        out.drain(&mut machine, now);
                        applied += 1;
                        if applied >= commands_per_turn {
                            break;
                        }
                        next = match commands.try_recv() {
                            Ok(req) => Some(req),
                            Err(mpsc::error::TryRecvError::Empty) => break,
                            Err(mpsc::error::TryRecvError::Disconnected) => None,
                        };
                    }
                }
                r = socket.recv_batch(&mut rx) => match r {
                    Ok(()) => {
                        Counters::add(&counters.recv_calls, 1);
                        let now = clock.now();
                        for (src, data) in rx.iter() {
                            Counters::add(&counters.datagrams_received, 1);
                            Counters::add(&counters.bytes_received, data.len() as u64);
                            machine.handle_datagram(now, src, data);
                            out.drain(&mut machine, now);
                        }
                    }
                    Err(e) if is_transient(&e) => {
                        Counters::add(&counters.recv_errors, 1);
                        debug!(error = %e, "recv error ignored: a datagram was lost");
                    }
                    Err(e) => return Err(e),
                },
                () = sleep_until(deadline) => {
                    let now = clock.now();
                    machine.handle_timeout(now);
                    out.drain(&mut machine, now);
                }
            }
        }
    }
}

/// Sends commands to a running [`Driver`] and reads its counters.
/// Cloneable; the driver stops when the last clone is dropped.
pub struct DriverHandle<M> {
    commands: mpsc::Sender<Request<M>>,
    counters: Arc<Counters>,
    clock: Clock,
    local_addr: SocketAddr,
}

impl<M> Clone for DriverHandle<M> {
    fn clone(&self) -> Self {
        Self {
            commands: self.commands.clone(),
            counters: Arc::clone(&self.counters),
            clock: self.clock,
            local_addr: self.local_addr,
        }
    }
}

impl<M> std::fmt::Debug for DriverHandle<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DriverHandle")
            .field("local_addr", &self.local_addr)
            .finish_non_exhaustive()
    }
}

impl<M: Send + 'static> DriverHandle<M> {
    /// Queues `f` to run on the machine at the driver's current time. Waits
    /// only while the command channel is full.
    pub async fn command(
        &self,
        f: impl FnOnce(&mut M, Instant) + Send + 'static,
    ) -> Result<(), DriverClosed> {
        self.request(Box::new(f), false).await
    }

    async fn request(&self, f: Command<M>, call: bool) -> Result<(), DriverClosed> {
        self.commands
            .send(Request { f, call })
            .await
            .map_err(|_| DriverClosed)
    }

    /// Runs `f` on the machine and returns its result: a command with an
    /// answer, also the way to read a getter such as `mer()` while running.
    /// The answer comes after the transmits and events of every command
    /// queued before it were handed to the socket and the event channel.
    pub async fn call<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut M, Instant) -> R + Send + 'static,
    ) -> Result<R, DriverClosed> {
        let (tx, rx) = oneshot::channel();
        let f = Box::new(move |m: &mut M, now| {
            // The caller may have given up waiting; then nobody needs the answer.
            let _ = tx.send(f(m, now));
        });
        self.request(f, true).await?;
        rx.await.map_err(|_| DriverClosed)
    }

    /// The driver's counters so far.
    pub fn stats(&self) -> DriverStats {
        self.counters.snapshot()
    }

    /// The driver's clock.
    pub fn clock(&self) -> Clock {
        self.clock
    }

    /// The socket's local address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }
}

/// The driver has stopped (it returned an error or its task ended).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DriverClosed;

impl std::fmt::Display for DriverClosed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the driver has stopped")
    }
}

impl std::error::Error for DriverClosed {}

/// What the machine asked for during one turn, sent at its end.
struct Outbox<E> {
    transmits: Vec<Transmit>,
    events: Vec<E>,
    /// Segments glued together for one GSO send.
    scratch: Vec<u8>,
}

impl<E> Default for Outbox<E> {
    fn default() -> Self {
        Self {
            transmits: Vec::new(),
            events: Vec::new(),
            scratch: Vec::new(),
        }
    }
}

impl<E> Outbox<E> {
    /// The machine's drain after an input: transmits, then events.
    fn drain<M: Machine<Event = E>>(&mut self, machine: &mut M, now: Instant) {
        while let Some(t) = machine.poll_transmit(now) {
            self.transmits.push(t);
        }
        while let Some(e) = machine.poll_event() {
            self.events.push(e);
        }
    }

    /// Sends the transmits, then hands the events to the application.
    async fn flush<S: DatagramSocket>(
        &mut self,
        socket: &S,
        counters: &Counters,
        events: &mpsc::Sender<E>,
        events_open: &mut bool,
    ) {
        self.send(socket, counters).await;
        for e in self.events.drain(..) {
            if *events_open && events.send(e).await.is_err() {
                *events_open = false;
            }
            if !*events_open {
                Counters::add(&counters.events_dropped, 1);
            }
        }
    }

    /// Sends the transmits in order ([`send_transmits`]).
    async fn send<S: DatagramSocket>(&mut self, socket: &S, counters: &Counters) {
        let t = send_transmits(socket, &self.transmits, &mut self.scratch).await;
        Counters::add(&counters.send_calls, t.calls);
        Counters::add(&counters.datagrams_sent, t.datagrams);
        Counters::add(&counters.bytes_sent, t.bytes);
        Counters::add(&counters.send_errors, t.errors);
        Counters::add(&counters.unsupported_transmits, t.unsupported);
        self.transmits.clear();
    }
}

/// Live counters, shared between the driver and its handles.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) datagrams_sent: AtomicU64,
    pub(crate) send_calls: AtomicU64,
    pub(crate) bytes_sent: AtomicU64,
    pub(crate) send_errors: AtomicU64,
    pub(crate) unsupported_transmits: AtomicU64,
    pub(crate) datagrams_received: AtomicU64,
    pub(crate) recv_calls: AtomicU64,
    pub(crate) bytes_received: AtomicU64,
    pub(crate) recv_errors: AtomicU64,
    pub(crate) commands: AtomicU64,
    pub(crate) events_dropped: AtomicU64,
}

impl Counters {
    pub(crate) fn add(c: &AtomicU64, n: u64) {
        // Counters only; no ordering with other memory is needed.
        c.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> DriverStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        DriverStats {
            datagrams_sent: get(&self.datagrams_sent),
            send_calls: get(&self.send_calls),
            bytes_sent: get(&self.bytes_sent),
            send_errors: get(&self.send_errors),
            unsupported_transmits: get(&self.unsupported_transmits),
            datagrams_received: get(&self.datagrams_received),
            recv_calls: get(&self.recv_calls),
            bytes_received: get(&self.bytes_received),
            recv_errors: get(&self.recv_errors),
            commands: get(&self.commands),
            events_dropped: get(&self.events_dropped),
        }
    }
}

/// Receive buffer per slot when the socket may glue datagrams (GRO): the
/// kernel glues at most 64 KiB.
pub(crate) const GRO_BUFFER: usize = 65_536;

#[cfg(test)]
mod tests;
