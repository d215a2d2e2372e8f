//! Runs one sans-IO [`Machine`] over one datagram socket (STYLE.md §4).

use std::future::pending;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use groupwire_proto::{Instant, Machine, Transmit, Transport};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tracing::{debug, trace};

use crate::clock::Clock;
use crate::socket::{DatagramSocket, is_transient};

/// A command for the machine: runs on the driver's task with the machine
/// and the current time, e.g. `Box::new(|m, now| { m.send(now, ..); })`.
pub type Command<M> = Box<dyn FnOnce(&mut M, Instant) + Send>;

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
}

impl Default for DriverConfig {
    fn default() -> Self {
        Self {
            command_capacity: 256,
            event_capacity: 4096,
            recv_buffer: MAX_UDP_PAYLOAD,
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
}

/// Counters of a running driver (a snapshot; see [`DriverHandle::stats`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DriverStats {
    /// Datagrams the socket accepted.
    pub datagrams_sent: u64,
    /// Their bytes (UDP payload).
    pub bytes_sent: u64,
    /// Datagrams the socket refused: counted as lost, never an error.
    pub send_errors: u64,
    /// Transmits for a transport this driver does not carry (TCP frames), dropped.
    pub unsupported_transmits: u64,
    /// Datagrams received and handed to the machine.
    pub datagrams_received: u64,
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
/// Each turn: drain `poll_transmit` into the socket (a failed send is a
/// lost datagram, counted in [`DriverStats::send_errors`]), drain
/// `poll_event` into the event channel, then wait for whichever comes
/// first: a command from a [`DriverHandle`], a datagram, or the machine's
/// `poll_timeout`. Time comes from one [`Clock`].
///
/// The driver stops, after a last drain, when every [`DriverHandle`] is
/// dropped, and returns the machine so its final state can be read. It
/// returns an error only for a receive error that does not merely mean a
/// lost datagram. If the application drops the event receiver, events are
/// counted and dropped; the driver goes on.
///
/// One `recv_from`/`send_to` per datagram: no `recvmmsg`/GSO batching yet.
pub struct Driver<M: Machine, S> {
    machine: M,
    socket: S,
    clock: Clock,
    commands: mpsc::Receiver<Command<M>>,
    events: mpsc::Sender<M::Event>,
    counters: Arc<Counters>,
    recv_buffer: usize,
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
        } = self;
        let mut buf = vec![0u8; recv_buffer];
        let mut events_open = true;
        let mut commands_open = true;
        loop {
            let now = clock.now();
            while let Some(t) = machine.poll_transmit(now) {
                send_or_count_loss(&socket, &counters, &t).await;
            }
            while let Some(e) = machine.poll_event() {
                if events_open && events.send(e).await.is_err() {
                    events_open = false;
                }
                if !events_open {
                    Counters::add(&counters.events_dropped, 1);
                }
            }
            if !commands_open {
                return Ok(machine);
            }
            let deadline = machine.poll_timeout().map(|t| clock.to_tokio(t));
            tokio::select! {
                cmd = commands.recv() => match cmd {
                    Some(cmd) => {
                        Counters::add(&counters.commands, 1);
                        cmd(&mut machine, clock.now());
                    }
                    None => commands_open = false,
                },
                r = socket.recv_from(&mut buf) => match r {
                    Ok((n, src)) => {
                        Counters::add(&counters.datagrams_received, 1);
                        Counters::add(&counters.bytes_received, n as u64);
                        machine.handle_datagram(clock.now(), src, &buf[..n]);
                    }
                    Err(e) if is_transient(&e) => {
                        Counters::add(&counters.recv_errors, 1);
                        debug!(error = %e, "recv error ignored: a datagram was lost");
                    }
                    Err(e) => return Err(e),
                },
                () = sleep_until_opt(deadline) => machine.handle_timeout(clock.now()),
            }
        }
    }
}

/// Sends commands to a running [`Driver`] and reads its counters.
/// Cloneable; the driver stops when the last clone is dropped.
pub struct DriverHandle<M> {
    commands: mpsc::Sender<Command<M>>,
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
        self.commands
            .send(Box::new(f))
            .await
            .map_err(|_| DriverClosed)
    }

    /// Runs `f` on the machine and returns its result: a command with an
    /// answer, also the way to read a getter such as `mer()` while running.
    pub async fn call<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut M, Instant) -> R + Send + 'static,
    ) -> Result<R, DriverClosed> {
        let (tx, rx) = oneshot::channel();
        self.command(move |m, now| {
            // The caller may have given up waiting; then nobody needs the answer.
            let _ = tx.send(f(m, now));
        })
        .await?;
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

/// Sends `t`; a failure is a lost datagram, logged and counted.
async fn send_or_count_loss<S: DatagramSocket>(socket: &S, counters: &Counters, t: &Transmit) {
    if t.transport != Transport::Udp {
        Counters::add(&counters.unsupported_transmits, 1);
        debug!(dst = %t.dst, transport = ?t.transport, "transmit dropped: UDP driver");
        return;
    }
    match socket.send_to(&t.payload, t.dst).await {
        Ok(n) => {
            Counters::add(&counters.datagrams_sent, 1);
            Counters::add(&counters.bytes_sent, n as u64);
        }
        Err(e) => {
            Counters::add(&counters.send_errors, 1);
            trace!(dst = %t.dst, error = %e, "send failed: counted as a lost datagram");
        }
    }
}

/// Sleeps until `deadline`, or forever without one.
async fn sleep_until_opt(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(t) => tokio::time::sleep_until(t).await,
        None => pending().await,
    }
}

/// Live counters, shared between the driver and its handles.
#[derive(Debug, Default)]
struct Counters {
    datagrams_sent: AtomicU64,
    bytes_sent: AtomicU64,
    send_errors: AtomicU64,
    unsupported_transmits: AtomicU64,
    datagrams_received: AtomicU64,
    bytes_received: AtomicU64,
    recv_errors: AtomicU64,
    commands: AtomicU64,
    events_dropped: AtomicU64,
}

impl Counters {
    fn add(c: &AtomicU64, n: u64) {
        // Counters only; no ordering with other memory is needed.
        c.fetch_add(n, Ordering::Relaxed);
    }

    fn snapshot(&self) -> DriverStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        DriverStats {
            datagrams_sent: get(&self.datagrams_sent),
            bytes_sent: get(&self.bytes_sent),
            send_errors: get(&self.send_errors),
            unsupported_transmits: get(&self.unsupported_transmits),
            datagrams_received: get(&self.datagrams_received),
            bytes_received: get(&self.bytes_received),
            recv_errors: get(&self.recv_errors),
            commands: get(&self.commands),
            events_dropped: get(&self.events_dropped),
        }
    }
}

/// The largest UDP payload over IPv4 (65535 − 20 − 8).
const MAX_UDP_PAYLOAD: usize = 65_507;

#[cfg(test)]
mod tests;
