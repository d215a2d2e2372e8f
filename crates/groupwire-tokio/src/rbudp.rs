//! Reliable Blast UDP on real sockets (Leigh et al. §4.2): the sans-IO
//! [`RbudpSender`] and [`RbudpReceiver`] of `groupwire-proto` driven over a
//! UDP socket for the blast and a TCP connection for the control messages,
//! as the paper's implementation signals the end of a blast over TCP.
//!
//! - [`send`] connects to a receiver and moves any [`BlastSource`]
//!   ([`FileSource`] for a file) at a fixed or adaptive rate;
//!   [`RbudpListener`] waits for senders and stores into any [`BlastSink`]
//!   ([`FileSink`]).
//! - **One address per side.** The receiver's TCP listener and UDP socket
//!   share one port, so the sender blasts to the address it connected to;
//!   the sender binds its UDP socket to its TCP connection's own address
//!   (TCP and UDP ports are separate spaces), so the receiver takes data
//!   only from the address whose control connection opened the transfer.
//!   Datagrams from anywhere else are counted as foreign and dropped
//!   before any work.
//! - **Batched I/O.** Both sides use [`BatchedUdpSocket`]: a blast goes out
//!   in segmentation-offload runs (GSO), arrivals come in `recvmmsg`/GRO
//!   batches, and files are read ahead and written behind a megabyte at a
//!   time ([`FileSource`], [`FileSink`]).
//! - **No amplification.** The receiver sends nothing on UDP; everything it
//!   says goes back on the TCP connection, whose address the handshake
//!   proved.
//! - **Integrity, not authentication.** The BLAKE3 hash of the payload is
//!   compared end to end, so a corrupted or forged byte fails the
//!   transfer; but anyone who can open a TCP connection to a receiver can
//!   send it a payload. Run it where that is acceptable, or inside
//!   `groupwire tunnel --key-file` style protection; a pre-shared key for
//!   bulk transfers is not built yet.
//!
//! Frames on the control connection are a 4-byte big-endian length and
//! one [`groupwire_proto::wire::rbudp`] control message; a frame longer
//! than [`MAX_CONTROL_LEN`] ends the connection.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use groupwire_proto::rbudp::{
    BlastError, BlastSink, BlastSource, DEFAULT_PACKET_SIZE, RateControl, RbudpReceiver,
    RbudpSender, ReceiverConfig, ReceiverEvent, ReceiverStats, SenderConfig, SenderEvent,
    SenderStats, TransferSummary,
};
use groupwire_proto::wire::rbudp::MAX_CONTROL_LEN;
use groupwire_proto::{Bitrate, Instant, StreamMachine, Transmit, Transport};
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};

#[cfg(unix)]
pub use crate::file::{FileSink, FileSource};

use crate::clock::Clock;
use crate::driver::GRO_BUFFER;
use crate::hex;
use crate::send::{send_transmits, sleep_until};
use crate::socket::{BatchedUdpSocket, DatagramSocket, RecvBatch, bind_with_tcp, is_transient};

/// Socket buffer asked for on each side's UDP socket (`SO_RCVBUF` on the
/// receiver, `SO_SNDBUF` on the sender): a blast arrives faster than a
/// busy receiver reads, and what does not fit is lost and blasted again.
/// The kernel caps it at `net.core.rmem_max`/`wmem_max`; the report says
/// what was granted.
pub const DEFAULT_SOCKET_BUFFER: usize = 8 << 20;

/// How often the progress callback is called during a transfer.
const PROGRESS_EVERY: Duration = Duration::from_millis(100);

/// How a [`send`] is set up; [`SendConfig::new`] gives the defaults.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SendConfig {
    /// The receiver's address (its TCP and UDP port).
    pub to: SocketAddr,
    /// The first blast's rate, on the wire (IP and UDP headers counted).
    pub rate: Bitrate,
    /// Fixed (the paper) or adaptive.
    pub rate_control: RateControl,
    /// Payload bytes per datagram.
    pub packet_size: u32,
    /// `SO_SNDBUF` asked for.
    pub socket_buffer: usize,
    /// How long to wait for the TCP connection.
    pub connect_timeout: Duration,
    /// The least wait for an answer before asking again (the sender's
    /// [`SenderConfig::response_timeout`]).
    pub response_timeout: Duration,
    /// The payload's version, which makes the transfer resumable
    /// ([`SenderConfig::version`]; [`FileSource::version`] for a file).
    pub version: Option<u64>,
}

impl SendConfig {
    /// Defaults: a fixed rate, [`DEFAULT_PACKET_SIZE`],
    /// [`DEFAULT_SOCKET_BUFFER`], a 10 s connect timeout, answers awaited
    /// at least 1 s, not resumable.
    pub fn new(to: SocketAddr, rate: Bitrate) -> Self {
        Self {
            to,
            rate,
            rate_control: RateControl::Fixed,
            packet_size: DEFAULT_PACKET_SIZE,
            socket_buffer: DEFAULT_SOCKET_BUFFER,
            connect_timeout: Duration::from_secs(10),
            response_timeout: Duration::from_secs(1),
            version: None,
        }
    }
}

/// How an [`RbudpListener`] takes a transfer; [`ReceiveConfig::default`]
/// gives the defaults.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ReceiveConfig {
    /// The largest payload accepted, bytes.
    pub max_size: u64,
    /// A connection that has not sent a valid Start by then is closed and
    /// the listener waits for the next one.
    pub start_timeout: Duration,
    /// With a transfer under way, silence after which it fails.
    pub idle_timeout: Duration,
    /// How long to wait for a sender at all; `None`: forever.
    pub accept_timeout: Option<Duration>,
}

impl Default for ReceiveConfig {
    /// Any size, 10 s to start, 90 s of silence (the machine's default),
    /// no accept timeout.
    fn default() -> Self {
        Self {
            max_size: u64::MAX,
            start_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(90),
            accept_timeout: None,
        }
    }
}

/// Where a transfer stands, for a progress bar.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Progress {
    /// Payload bytes: sent (the first blast) or known delivered (sender,
    /// later blasts), or stored (receiver).
    pub bytes: u64,
    /// The payload's size (0 until the receiver has the Start).
    pub total: u64,
    /// The current blast (0 for the first).
    pub round: u32,
    /// The sender's current blast rate (0 on the receiver).
    pub rate_bps: u64,
}

/// What a finished transfer did.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct RbudpReport {
    /// `"send"` or `"receive"`.
    pub role: &'static str,
    /// Payload bytes.
    pub size: u64,
    /// Datagrams in the payload.
    pub packets: u64,
    /// Seconds from the Start to the end (the sender: until the receiver's
    /// Done arrived; the receiver: until the hash matched).
    pub seconds: f64,
    /// Payload bits over those seconds.
    pub effective_bps: u64,
    /// Blasts, the first included.
    pub rounds: u32,
    /// Packets the receiver already held from an interrupted transfer (0
    /// unless the transfer resumed).
    pub held_packets: u64,
    /// The receiver discarded a partial of another version of the payload
    /// (the file changed since the interrupted transfer; receiver only).
    pub discarded_partial: bool,
    /// Missing lists that asked for a re-blast (the paper's NAK rounds).
    pub nak_rounds: u32,
    /// The first blast's rate (the sender's; 0 on the receiver).
    pub first_rate_bps: u64,
    /// The last blast's rate (differs under the adaptive rate).
    pub final_rate_bps: u64,
    /// The BLAKE3 hash both sides agreed on, hex.
    pub blake3: String,
    /// The UDP socket buffer the kernel granted, bytes.
    pub socket_buffer: usize,
    /// The sender's counters.
    pub sender: Option<SenderStats>,
    /// The receiver's counters.
    pub receiver: Option<ReceiverStats>,
}

impl RbudpReport {
    fn new(role: &'static str, s: &TransferSummary, socket_buffer: usize) -> Self {
        let seconds = s.elapsed().as_secs_f64();
        Self {
            role,
            size: s.size,
            packets: s.packets,
            seconds,
            effective_bps: s.effective_rate().map_or(0, Bitrate::as_bps),
            rounds: s.rounds,
            held_packets: 0,
            discarded_partial: false,
            nak_rounds: s.nak_rounds(),
            first_rate_bps: 0,
            final_rate_bps: 0,
            blake3: hex(&s.hash),
            socket_buffer,
            sender: None,
            receiver: None,
        }
    }
}

/// Why a transfer did not complete.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RbudpError {
    /// The protocol machine gave up (the peer refused, aborted or went
    /// silent, the hash did not match, the file could not be read or
    /// written).
    #[error(transparent)]
    Blast(#[from] BlastError),
    /// The control connection closed before the transfer finished.
    #[error("the peer closed the control connection before the transfer finished")]
    PeerGone,
    /// No receiver answered at that address in time.
    #[error("could not connect to {addr}: {source}")]
    Connect {
        /// The receiver.
        addr: SocketAddr,
        /// Why.
        source: io::Error,
    },
    /// No sender came within [`ReceiveConfig::accept_timeout`].
    #[error("no sender connected within {0:?}")]
    NoSender(Duration),
    /// A socket failed.
    #[error("{0}")]
    Io(#[from] io::Error),
}

/// Sends `source`'s payload to a receiver listening at `cfg.to`
/// ([`RbudpListener`] or `groupwire bulk recv --via rbudp`), calling
/// `progress` about ten times a second. Returns when the receiver confirmed
/// the hash, or with the reason it could not.
pub async fn send<S: BlastSource>(
    cfg: &SendConfig,
    source: S,
    progress: impl FnMut(Progress),
) -> Result<RbudpReport, RbudpError> {
    let (tcp, udp) = connect_pair(cfg).await?;
    let _ = udp.set_send_buffer_size(cfg.socket_buffer);
    let granted = socket2::SockRef::from(udp.get_ref())
        .send_buffer_size()
        .unwrap_or(0);
    send_over(cfg, tcp, &udp, granted, source, progress).await
}

/// [`send`] over a connected control stream and a UDP socket bound to its
/// local address.
async fn send_over<S: BlastSource, U: DatagramSocket>(
    cfg: &SendConfig,
    tcp: TcpStream,
    udp: &U,
    granted: usize,
    source: S,
    mut progress: impl FnMut(Progress),
) -> Result<RbudpReport, RbudpError> {
    let mut scfg = SenderConfig::new(cfg.to, cfg.rate);
    scfg.session = session_id();
    scfg.packet_size = cfg.packet_size;
    scfg.rate_control = cfg.rate_control;
    scfg.response_timeout = cfg.response_timeout;
    scfg.version = cfg.version;
    let packet_size = u64::from(scfg.packet_size);
    let total = source.len();
    let mut sender = RbudpSender::new(scfg, source);
    let clock = Clock::start();
    sender.start(clock.now());
    let mut conn = ControlStream::new(tcp);
    // Bytes known delivered once a missing list came in (or a resume's
    // list: what the receiver held); the later blasts' progress counts
    // from there. Atomics only to share them between the two callbacks in
    // a `Send` future; one task touches them.
    let confirmed = AtomicU64::new(u64::MAX);
    let sent_base = AtomicU64::new(0);
    let held = AtomicU64::new(0);
    let mut summary = None;
    let mut failure = None;
    let end = drive(
        &mut sender,
        udp,
        &mut conn,
        cfg.to,
        clock,
        |s: &mut RbudpSender<S>, ev| match ev {
            SenderEvent::Missing { missing, .. } => {
                confirmed.store(total.saturating_sub(missing * packet_size), Relaxed);
                sent_base.store(s.stats().datagrams, Relaxed);
                true
            }
            SenderEvent::Resuming { held: h, missing } => {
                held.store(h, Relaxed);
                confirmed.store(total.saturating_sub(missing * packet_size), Relaxed);
                sent_base.store(s.stats().datagrams, Relaxed);
                true
            }
            SenderEvent::Complete(sum) => {
                summary = Some(sum);
                false
            }
            SenderEvent::Failed(e) => {
                failure = Some(e);
                false
            }
            _ => true,
        },
        |s: &RbudpSender<S>| {
            let st = s.stats();
            let since = st.datagrams.saturating_sub(sent_base.load(Relaxed)) * packet_size;
            let bytes = match confirmed.load(Relaxed) {
                u64::MAX => since,
                c => c + since,
            };
            progress(Progress {
                bytes: bytes.min(total),
                total,
                round: s.round(),
                rate_bps: s.rate().as_bps(),
            });
        },
        None,
    )
    .await;
    if let Some(e) = failure {
        return Err(e.into());
    }
    end.map_err(gone)?;
    let Some(sum) = summary else {
        return Err(RbudpError::PeerGone);
    };
    let mut r = RbudpReport::new("send", &sum, granted);
    r.first_rate_bps = cfg.rate.as_bps();
    r.final_rate_bps = sender.rate().as_bps();
    r.held_packets = held.load(Relaxed);
    r.sender = Some(sender.stats());
    Ok(r)
}

/// Connects the control stream and binds the UDP socket to its address.
async fn connect_pair(cfg: &SendConfig) -> Result<(TcpStream, BatchedUdpSocket), RbudpError> {
    let connect_err = |source| RbudpError::Connect {
        addr: cfg.to,
        source,
    };
    // The port the kernel picks for the TCP connection may be taken for
    // UDP by someone else: then take another connection.
    let mut last = None;
    for _ in 0..8 {
        let tcp = tokio::time::timeout(cfg.connect_timeout, TcpStream::connect(cfg.to))
            .await
            .map_err(|_| connect_err(io::ErrorKind::TimedOut.into()))?
            .map_err(connect_err)?;
        let _ = tcp.set_nodelay(true);
        match BatchedUdpSocket::bind(tcp.local_addr()?).await {
            Ok(udp) => return Ok((tcp, udp)),
            Err(e) => last = Some(e),
        }
    }
    Err(RbudpError::Io(last.unwrap_or_else(|| {
        io::Error::other("no UDP port beside the control connection")
    })))
}

/// The control connection's end before the transfer's is the peer gone.
fn gone(e: io::Error) -> RbudpError {
    if e.kind() == io::ErrorKind::UnexpectedEof || e.kind() == io::ErrorKind::ConnectionReset {
        RbudpError::PeerGone
    } else {
        RbudpError::Io(e)
    }
}

/// A transfer id from the clock and the process: it tells transfers apart,
/// it is not a secret.
fn session_id() -> u32 {
    let t = crate::clock::wall_micros();
    (t ^ (t >> 32) ^ u64::from(std::process::id()).rotate_left(16)) as u32
}

/// Takes RBUDP transfers: a TCP listener and a UDP socket on one port.
#[derive(Debug)]
pub struct RbudpListener {
    tcp: TcpListener,
    udp: BatchedUdpSocket,
    socket_buffer: usize,
}

impl RbudpListener {
    /// Listens at `addr` (TCP and UDP, the same port; port 0 picks one
    /// free for both).
    pub async fn bind(addr: SocketAddr) -> io::Result<Self> {
        let (tcp, udp, socket_buffer) = bind_pair(addr).await?;
        Ok(Self {
            tcp,
            udp,
            socket_buffer,
        })
    }

    /// The address senders connect to.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.tcp.local_addr()
    }

    /// `SO_RCVBUF` the kernel granted the UDP socket.
    pub fn socket_buffer(&self) -> usize {
        self.socket_buffer
    }

    /// Waits for a sender and stores its payload into `sink`, calling
    /// `progress` about ten times a second. A connection that sends no
    /// valid Start within [`ReceiveConfig::start_timeout`], or closes
    /// before it, is dropped and the next one is awaited. Returns the
    /// sink with the report once the hash matched.
    pub async fn receive<K: BlastSink>(
        &self,
        cfg: &ReceiveConfig,
        mut sink: K,
        mut progress: impl FnMut(Progress),
    ) -> Result<(RbudpReport, K), RbudpError> {
        let deadline = cfg.accept_timeout.map(|d| Clock::start().tokio_after(d));
        loop {
            let (tcp, peer) = accept_until(&self.tcp, deadline)
                .await?
                .ok_or_else(|| RbudpError::NoSender(cfg.accept_timeout.unwrap_or_default()))?;
            match receive_on(
                &self.udp,
                self.socket_buffer,
                tcp,
                peer,
                cfg,
                sink,
                &mut progress,
            )
            .await?
            {
                Taken::Done(r, k) => return Ok((r, k)),
                // Not a sender, or not one that got going: wait for the next.
                Taken::NotStarted(k) => sink = k,
            }
        }
    }
}

/// The next connection on `tcp`, skipping transient accept errors;
/// `None` once `deadline` (if any) has passed.
pub(crate) async fn accept_until(
    tcp: &TcpListener,
    deadline: Option<tokio::time::Instant>,
) -> io::Result<Option<(TcpStream, SocketAddr)>> {
    loop {
        let accepted = match deadline {
            Some(d) => match tokio::time::timeout_at(d, tcp.accept()).await {
                Ok(a) => a,
                Err(_) => return Ok(None),
            },
            None => tcp.accept().await,
        };
        match accepted {
            Ok(a) => return Ok(Some(a)),
            Err(e) if is_transient(&e) => {}
            Err(e) => return Err(e),
        }
    }
}

/// Binds a TCP listener and a UDP socket on one port (port 0 picks one
/// free for both, [`bind_with_tcp`]); the UDP socket with
/// [`DEFAULT_SOCKET_BUFFER`] asked for, and the `SO_RCVBUF` granted.
pub(crate) async fn bind_pair(
    addr: SocketAddr,
) -> io::Result<(TcpListener, BatchedUdpSocket, usize)> {
    let (udp, tcp) = bind_with_tcp(addr, BatchedUdpSocket::bind_now).await?;
    let _ = udp.set_recv_buffer_size(DEFAULT_SOCKET_BUFFER);
    let socket_buffer = socket2::SockRef::from(udp.get_ref())
        .recv_buffer_size()
        .unwrap_or(0);
    Ok((tcp, udp, socket_buffer))
}

/// What one accepted control connection came to.
#[expect(
    clippy::large_enum_variant,
    reason = "one value per connection, returned once"
)]
pub(crate) enum Taken<K> {
    /// The transfer completed: its report and the sink.
    Done(RbudpReport, K),
    /// No valid Start came in time, or the connection ended before one:
    /// not a sender (or not one that got going). The sink is untouched.
    NotStarted(K),
}

/// Takes one transfer on an accepted control connection from `peer`, the
/// blast arriving on `udp` (whose `SO_RCVBUF` is `socket_buffer`).
pub(crate) async fn receive_on<K: BlastSink>(
    udp: &BatchedUdpSocket,
    socket_buffer: usize,
    tcp: TcpStream,
    peer: SocketAddr,
    cfg: &ReceiveConfig,
    sink: K,
    progress: &mut impl FnMut(Progress),
) -> Result<Taken<K>, RbudpError> {
    let _ = tcp.set_nodelay(true);
    let mut rcfg = ReceiverConfig::new(peer);
    rcfg.max_size = cfg.max_size;
    rcfg.idle_timeout = cfg.idle_timeout;
    let mut receiver = RbudpReceiver::new(rcfg, sink);
    let mut conn = ControlStream::new(tcp);
    let clock = Clock::start();
    let start_by = clock.now().saturating_add(cfg.start_timeout);
    let mut started = false;
    let mut held = 0;
    let mut discarded = false;
    let mut summary = None;
    let mut failure = None;
    let end = drive(
        &mut receiver,
        udp,
        &mut conn,
        peer,
        clock,
        |_: &mut RbudpReceiver<K>, ev| match ev {
            ReceiverEvent::Started {
                held: h,
                discarded: d,
                ..
            } => {
                started = true;
                held = h;
                discarded = d;
                true
            }
            ReceiverEvent::Complete(sum) => {
                summary = Some(sum);
                false
            }
            ReceiverEvent::Failed(e) => {
                failure = Some(e);
                false
            }
            _ => true,
        },
        |r: &RbudpReceiver<K>| {
            if let Some((total, packet)) = r.transfer() {
                let stored = total.saturating_sub(r.missing() * u64::from(packet));
                progress(Progress {
                    bytes: stored,
                    total,
                    round: r.round(),
                    rate_bps: 0,
                });
            }
        },
        Some(start_by),
    )
    .await;
    let stats = receiver.stats();
    if summary.is_none() {
        // Cut off (the connection dropped): keep what arrived for a resume
        // (a machine that failed has recorded it already).
        if let Err(e) = receiver.checkpoint(clock.now()) {
            tracing::warn!(error = %e, "could not record the transfer for a resume");
        }
    }
    let sink = receiver.into_sink();
    if let Some(sum) = summary {
        conn.linger().await;
        let mut r = RbudpReport::new("receive", &sum, socket_buffer);
        r.receiver = Some(stats);
        r.held_packets = held;
        r.discarded_partial = discarded;
        return Ok(Taken::Done(r, sink));
    }
    if !started {
        tracing::debug!(%peer, ?end, "control connection dropped before a Start");
        return Ok(Taken::NotStarted(sink));
    }
    if let Some(e) = failure {
        return Err(e.into());
    }
    end.map_err(gone)?;
    Err(RbudpError::PeerGone)
}

/// The length-prefixed control connection.
struct ControlStream {
    rd: OwnedReadHalf,
    wr: OwnedWriteHalf,
    rbuf: BytesMut,
    wbuf: Vec<u8>,
}

impl ControlStream {
    fn new(tcp: TcpStream) -> Self {
        let (rd, wr) = tcp.into_split();
        Self {
            rd,
            wr,
            rbuf: BytesMut::with_capacity(MAX_CONTROL_LEN + 4),
            wbuf: Vec::new(),
        }
    }

    /// The next whole frame read, if any; an oversized one is an error.
    fn next_frame(&mut self) -> io::Result<Option<BytesMut>> {
        if self.rbuf.len() < 4 {
            return Ok(None);
        }
        let len =
            u32::from_be_bytes([self.rbuf[0], self.rbuf[1], self.rbuf[2], self.rbuf[3]]) as usize;
        if len > MAX_CONTROL_LEN {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a control frame of {len} bytes (at most {MAX_CONTROL_LEN})"),
            ));
        }
        if self.rbuf.len() < 4 + len {
            self.rbuf.reserve(4 + len - self.rbuf.len());
            return Ok(None);
        }
        self.rbuf.advance(4);
        Ok(Some(self.rbuf.split_to(len)))
    }

    /// Reads what the connection has (cancel safe); 0 at its end.
    async fn fill(&mut self) -> io::Result<usize> {
        self.rd.read_buf(&mut self.rbuf).await
    }

    /// Queues one frame.
    fn push(&mut self, frame: &[u8]) {
        self.wbuf
            .extend_from_slice(&(frame.len() as u32).to_be_bytes());
        self.wbuf.extend_from_slice(frame);
    }

    /// Writes the queued frames.
    async fn flush(&mut self) -> io::Result<()> {
        if !self.wbuf.is_empty() {
            self.wr.write_all(&self.wbuf).await?;
            self.wbuf.clear();
        }
        Ok(())
    }

    /// After the last frame: close our side and read until the peer closes
    /// (at most 2 s), so unread bytes never turn the close into a reset
    /// that could destroy our last frame in flight.
    async fn linger(&mut self) {
        let _ = self.wr.shutdown().await;
        let mut sink = [0u8; 1024];
        let _ = tokio::time::timeout(Duration::from_secs(2), async {
            while matches!(self.rd.read(&mut sink).await, Ok(n) if n > 0) {}
        })
        .await;
    }
}

/// Runs `m` over `udp` and `conn` until `on_event` returns `false` (the
/// transfer is over), the connection ends or fails, or `start_by` passes
/// with `m` still waiting for input that never came. Frames on `conn` are
/// handed to the machine as coming from `frame_src`. Each input is
/// followed by the machine's drain; its transmits go out at the end of the
/// turn, datagrams in GSO runs, each control frame after the datagrams
/// that preceded it (an end-of-blast follows its blast).
#[expect(
    clippy::too_many_arguments,
    reason = "one private loop; its callers name every part"
)]
async fn drive<M: StreamMachine, U: DatagramSocket>(
    m: &mut M,
    udp: &U,
    conn: &mut ControlStream,
    frame_src: SocketAddr,
    clock: Clock,
    mut on_event: impl FnMut(&mut M, M::Event) -> bool,
    mut tick: impl FnMut(&M),
    start_by: Option<Instant>,
) -> io::Result<()> {
    let slots = udp.max_recv_batch().max(1);
    let slot_len = if slots > 1 {
        GRO_BUFFER
    } else {
        groupwire_proto::units::MAX_UDP_PAYLOAD
    };
    let mut rx = RecvBatch::new(slots, slot_len);
    let mut pending: Vec<Transmit> = Vec::new();
    let mut events = Vec::new();
    let mut scratch = Vec::new();
    let mut next_tick = clock.now();
    let drain = |m: &mut M, now, pending: &mut Vec<Transmit>, events: &mut Vec<M::Event>| {
        while let Some(t) = m.poll_transmit(now) {
            pending.push(t);
        }
        while let Some(e) = m.poll_event() {
            events.push(e);
        }
    };
    drain(m, clock.now(), &mut pending, &mut events);
    loop {
        // Send in order: datagrams in runs, each frame after them.
        let mut from = 0;
        for i in 0..pending.len() {
            if pending[i].transport == Transport::FRAME {
                send_transmits(udp, &pending[from..i], &mut scratch).await;
                conn.push(&pending[i].payload);
                conn.flush().await?;
                from = i + 1;
            }
        }
        send_transmits(udp, &pending[from..], &mut scratch).await;
        pending.clear();
        let mut go_on = true;
        for e in events.drain(..) {
            go_on &= on_event(m, e);
        }
        let now = clock.now();
        if now >= next_tick || !go_on {
            tick(m);
            next_tick = now.saturating_add(PROGRESS_EVERY);
        }
        if !go_on {
            return Ok(());
        }
        // Before the machine has a deadline of its own (a receiver awaiting
        // its Start), `start_by` bounds the wait.
        let deadline = m.poll_timeout().or(start_by).map(|t| {
            // Wake for the progress callback too.
            clock.to_tokio(t.min(next_tick))
        });
        tokio::select! {
            r = conn.fill() => {
                if r? == 0 {
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
                while let Some(f) = conn.next_frame()? {
                    let now = clock.now();
                    m.handle_frame(now, frame_src, 0, &f);
                    drain(m, now, &mut pending, &mut events);
                }
            }
            r = udp.recv_batch(&mut rx) => match r {
                Ok(()) => {
                    let now = clock.now();
                    for (src, data) in rx.iter() {
                        m.handle_datagram(now, src, data);
                        drain(m, now, &mut pending, &mut events);
                    }
                }
                Err(e) if is_transient(&e) => {}
                Err(e) => return Err(e),
            },
            () = sleep_until(deadline) => {
                let now = clock.now();
                if start_by.is_some_and(|s| s <= now) && m.poll_timeout().is_none() {
                    return Err(io::ErrorKind::TimedOut.into());
                }
                m.handle_timeout(now);
                drain(m, now, &mut pending, &mut events);
            }
        }
    }
}

#[cfg(test)]
mod tests;
