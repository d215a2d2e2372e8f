//! Parallel TCP socket striping: one payload over N TCP connections,
//! reassembled in order at the receiver, checked end to end with BLAKE3.
//!
//! //= Leigh et al. §4.2; Park et al., "CAVERNsoft G2" (2000)
//! //# Parallel TCP Socket striping overcomes the LFN problem by
//! //# partitioning a payload and delivering it over multiple TCP
//! //# connections.
//!
//! One TCP connection moves at most one window per round trip; over a long
//! fat network (the paper's Chicago–Amsterdam link: 45 Mbit/s × 150 ms =
//! 0.84 MB in flight) a default window leaves most of the path idle. N
//! connections keep N windows in flight (GridFTP's parallel streams and
//! `iperf3 -P` do the same today). [`plan`] picks N and the socket buffers
//! from the bandwidth-delay product when the caller gives the path's rate
//! and round-trip time but no stream count.
//!
//! # The exchange
//!
//! ```text
//! sender                                      receiver
//!   N × connect, each: Hello(session, i, N, size, chunk) ──▶
//!   Chunk(offset, len) + payload ... (any stream) ──▶     write_at(offset)
//!   End(chunks, bytes, BLAKE3) on every stream ──▶        every chunk once?
//!                                                          hash what is stored
//!   ◀── Done(ok | mismatch | error, receiver's BLAKE3) on stream 0
//! ```
//!
//! The frames are [`groupwire_proto::wire::striped`]. Unlike RBUDP this
//! is not a sans-IO machine: reliability, ordering and congestion control
//! are each connection's TCP, and what is left (dealing chunks, checking
//! each arrives once, the hash) is bookkeeping around the sockets, so it
//! lives with them here.
//!
//! - **Dealing chunks.** The sender reads the source in order on one
//!   blocking thread (hashing it as it goes) into a queue a few chunks
//!   deep; each stream takes the next chunk whenever its socket has room.
//!   The queue is the shared next-offset counter of GridFTP's mode E: a
//!   slow stream takes fewer chunks, a fast one more.
//! - **Reassembly.** The receiver writes each chunk at its offset
//!   ([`BlastSink::write_at`], `pwrite` for a [`FileSink`]) and keeps one
//!   bit per chunk, so every byte range is covered exactly once (a chunk
//!   outside the transfer, off a chunk boundary or sent twice is a
//!   protocol error). Memory: one chunk buffer per stream and the bitmap.
//! - **Integrity.** Each End carries the sender's hash of what it read;
//!   the receiver hashes what it stored and answers [`DoneStatus::Ok`] or
//!   [`DoneStatus::HashMismatch`] with its own hash, which the sender also
//!   checks.
//! - **Failures** are [`StripedError`]s that name the stream: a full disk,
//!   a peer gone, a stream closed before its End, a source that changed.
//!   Every wait is bounded by [`StripedConfig::timeout`], so a silent peer
//!   is an error, never a hang. The receiver tells the sender why it
//!   stopped (an early `Done` with
//!   an error status); the sender tells the receiver (an Abort).
//!
//! ```no_run
//! use groupwire_tokio::striped::{self, StripedConfig, StripedListener, FileSink};
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! // Receiver.
//! let cfg = StripedConfig::new();
//! let listener = StripedListener::bind("0.0.0.0:7500".parse()?).await?;
//! let report = listener.accept(FileSink::create("copy.bin")?, &cfg, |_done| {}).await?;
//! println!("{} bytes at {} bit/s", report.bytes, report.rate_bps);
//! // Sender (elsewhere): N from the path's bandwidth-delay product.
//! let cfg = StripedConfig::new()
//!     .path(groupwire_proto::Bitrate::mbps(45), std::time::Duration::from_millis(150));
//! striped::send_file("192.0.2.7:7500".parse()?, "data.bin", &cfg, |done| eprint!("\r{done}")).await?;
//! # Ok(()) }
//! ```

use std::fs::File;
use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use groupwire_proto::rbudp::{BlastSink, BlastSource};
use groupwire_proto::wire::striped::{
    Abort, AbortReason, CHUNK_HEADER_LEN, ChunkHeader, Done, DoneStatus, End, Frame, Hash, Hello,
    MAX_CHUNK_SIZE, MAX_FRAME_LEN, MAX_STREAMS, PREFIX_LEN, Repr, frame_len,
};
use groupwire_proto::{Bitrate, Instant};
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::mpsc;
use tokio::task::{JoinError, JoinSet};
use tracing::debug;

pub use crate::file::{FileSink, FileSource};
use crate::{Clock, hex};

#[cfg(test)]
mod tests;

/// The default chunk: 256 KiB, large enough that the 24-byte frame header
/// and the per-chunk bookkeeping vanish, small enough that a slow stream
/// holds back little at the end.
pub const DEFAULT_CHUNK_SIZE: u32 = 256 * 1024;
/// The window [`plan`] assumes one untuned TCP connection gets: 64 KiB,
/// TCP's largest window without the window-scale option (RFC 7323), the
/// window the paper's LFN problem is about.
pub const DEFAULT_WINDOW: u64 = 64 * 1024;
/// Streams when neither a count nor the path is given: 4, a common
/// GridFTP `-p` setting.
pub const DEFAULT_STREAMS: u16 = 4;
/// The most streams [`plan`] chooses: past a dozen or so, more connections
/// mostly fight each other (and anyone else on the path).
pub const MAX_PLANNED_STREAMS: u16 = 16;
/// The default bound on every wait (connecting, a silent stream, the
/// receiver's answer).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// The most chunk-buffer memory a receiver commits to one transfer
/// (streams × chunk size); a Hello asking for more is refused.
pub const RECEIVER_BUFFER_LIMIT: u64 = 64 * 1024 * 1024;
/// The most chunks a receiver tracks (a 64 MiB bitmap; 128 TiB at the
/// default chunk size).
pub const MAX_CHUNKS: u64 = 1 << 29;

/// How a striped transfer runs. Both sides take one; the fields each side
/// reads are noted.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct StripedConfig {
    /// Sender: TCP connections to open. `None`: from [`plan`] when
    /// [`path_rate`](Self::path_rate) and [`path_rtt`](Self::path_rtt) are
    /// given, else [`DEFAULT_STREAMS`].
    pub streams: Option<u16>,
    /// Sender: payload bytes per chunk, 1 to [`MAX_CHUNK_SIZE`].
    pub chunk_size: u32,
    /// Both: SO_SNDBUF (sender) or SO_RCVBUF (receiver, given to
    /// [`StripedListener::bind_with`]) in bytes. `None`: from [`plan`]
    /// when the path is given, else the system's default (autotuning).
    pub socket_buffer: Option<usize>,
    /// The path's bottleneck rate, for [`plan`].
    pub path_rate: Option<Bitrate>,
    /// The path's round-trip time, for [`plan`].
    pub path_rtt: Option<Duration>,
    /// The window [`plan`] assumes one connection gets.
    pub window: u64,
    /// Both: the bound on each wait: connecting every stream, a stream with
    /// no progress, the receiver's answer (plus the time to hash the
    /// payload, at [`HASH_RATE_FLOOR`]).
    pub timeout: Duration,
    /// Receiver: how long [`StripedListener::accept`] waits for a first
    /// sender. `None`: forever.
    pub wait: Option<Duration>,
    /// Sender: the session id. `None`: from the wall clock and process id.
    pub session: Option<u32>,
    /// Sender: the payload's BLAKE3 hash when known up front. It goes in
    /// the Hello, and a payload that reads to another hash is
    /// [`StripedError::SourceChanged`].
    pub hash: Option<Hash>,
}

impl Default for StripedConfig {
    fn default() -> Self {
        Self {
            streams: None,
            chunk_size: DEFAULT_CHUNK_SIZE,
            socket_buffer: None,
            path_rate: None,
            path_rtt: None,
            window: DEFAULT_WINDOW,
            timeout: DEFAULT_TIMEOUT,
            wait: None,
            session: None,
            hash: None,
        }
    }
}

impl StripedConfig {
    /// The defaults: streams and buffers from the system, 256 KiB chunks,
    /// 30 s timeout.
    pub fn new() -> Self {
        Self::default()
    }
    /// Sets [`streams`](Self::streams).
    pub fn streams(mut self, n: u16) -> Self {
        self.streams = Some(n);
        self
    }
    /// Sets [`chunk_size`](Self::chunk_size).
    pub fn chunk_size(mut self, bytes: u32) -> Self {
        self.chunk_size = bytes;
        self
    }
    /// Sets [`socket_buffer`](Self::socket_buffer).
    pub fn socket_buffer(mut self, bytes: usize) -> Self {
        self.socket_buffer = Some(bytes);
        self
    }
    /// Sets [`path_rate`](Self::path_rate) and [`path_rtt`](Self::path_rtt).
    pub fn path(mut self, rate: Bitrate, rtt: Duration) -> Self {
        self.path_rate = Some(rate);
        self.path_rtt = Some(rtt);
        self
    }
    /// Sets [`window`](Self::window).
    pub fn window(mut self, bytes: u64) -> Self {
        self.window = bytes;
        self
    }
    /// Sets [`timeout`](Self::timeout).
    pub fn timeout(mut self, d: Duration) -> Self {
        self.timeout = d;
        self
    }
    /// Sets [`wait`](Self::wait).
    pub fn wait(mut self, d: Duration) -> Self {
        self.wait = Some(d);
        self
    }
    /// Sets [`session`](Self::session).
    pub fn session(mut self, id: u32) -> Self {
        self.session = Some(id);
        self
    }
    /// Sets [`hash`](Self::hash).
    pub fn hash(mut self, hash: Hash) -> Self {
        self.hash = Some(hash);
        self
    }

    /// The plan for the configured path, if both hints are given.
    pub fn plan(&self) -> Option<StripePlan> {
        Some(plan(self.path_rate?, self.path_rtt?, self.window))
    }

    /// The streams a sender opens: the configured count (clamped to
    /// 1..=[`MAX_STREAMS`]), else the plan's, else [`DEFAULT_STREAMS`].
    pub fn resolved_streams(&self) -> u16 {
        match (self.streams, self.plan()) {
            (Some(n), _) => n.clamp(1, MAX_STREAMS),
            (None, Some(p)) => p.streams,
            (None, None) => DEFAULT_STREAMS,
        }
    }

    /// The socket buffer to set: the configured one, else the plan's, else
    /// none (the system's default).
    pub fn resolved_buffer(&self) -> Option<usize> {
        self.socket_buffer.or_else(|| self.plan().map(|p| p.buffer))
    }
}

/// Streams and buffers for a path, from its bandwidth-delay product.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct StripePlan {
    /// The path's bandwidth-delay product, bytes.
    pub bdp: u64,
    /// Connections to open.
    pub streams: u16,
    /// SO_SNDBUF / SO_RCVBUF per connection, bytes.
    pub buffer: usize,
}

/// Plans a striped transfer from the bandwidth-delay product `bdp = rate ×
/// rtt`:
///
/// - `streams = ceil(bdp / per_stream_window)`, clamped to
///   1..=[`MAX_PLANNED_STREAMS`]: enough windows in flight to fill the
///   path (the paper's remedy for the LFN problem, without kernel tuning);
/// - `buffer = ceil(bdp / streams) × 5/4`, rounded up to a KiB and at
///   least 64 KiB: each connection's share of the capacity, with 25 %
///   headroom for round-trip variation and the acknowledgement clock.
///
/// The paper's example, 45 Mbit/s × 150 ms = 0.84 MB, with the untuned
/// 64 KiB window gives 13 streams of 80 KiB buffers. A zero window counts
/// as one byte.
pub fn plan(rate: Bitrate, rtt: Duration, per_stream_window: u64) -> StripePlan {
    let bdp = rate.bytes_in(rtt);
    let window = per_stream_window.max(1);
    let streams = bdp
        .div_ceil(window)
        .clamp(1, u64::from(MAX_PLANNED_STREAMS));
    let share = bdp.div_ceil(streams);
    let buffer = share
        .saturating_add(share / 4)
        .div_ceil(1024)
        .saturating_mul(1024)
        .max(64 * 1024);
    StripePlan {
        bdp,
        streams: u16::try_from(streams).expect("clamped to MAX_PLANNED_STREAMS"),
        buffer: usize::try_from(buffer).unwrap_or(usize::MAX),
    }
}

/// The slowest rate the sender assumes the receiver hashes its stored
/// payload at, when bounding the wait for its answer: 32 MiB/s (a slow
/// disk read back; BLAKE3 itself runs at GB/s).
pub const HASH_RATE_FLOOR: u64 = 32 * 1024 * 1024;

/// What a finished transfer did (both sides report one).
#[derive(Clone, Debug, Serialize)]
#[non_exhaustive]
pub struct StripedReport {
    /// The session id.
    pub session: u32,
    /// Payload bytes.
    pub bytes: u64,
    /// TCP connections used.
    pub streams: u16,
    /// Payload bytes per chunk.
    pub chunk_size: u32,
    /// The socket buffer set, if any.
    pub socket_buffer: Option<usize>,
    /// From the first connection to the receiver's answer (sender) or from
    /// the first Hello to the answer sent (receiver).
    #[serde(rename = "seconds", serialize_with = "as_secs")]
    pub elapsed: Duration,
    /// Payload bits over `elapsed`: the paper's effective bandwidth.
    pub rate_bps: u64,
    /// Each stream's share.
    pub per_stream: Vec<StreamStats>,
    /// The BLAKE3 hash of the payload, as both sides computed it.
    #[serde(serialize_with = "as_hex")]
    pub hash: Hash,
}

impl StripedReport {
    /// [`rate_bps`](Self::rate_bps) as a [`Bitrate`].
    pub fn effective_rate(&self) -> Bitrate {
        Bitrate::bps(self.rate_bps)
    }
}

/// One stream's share of a [`StripedReport`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct StreamStats {
    /// The stream's index.
    pub index: u16,
    /// Chunks it carried.
    pub chunks: u64,
    /// Payload bytes it carried.
    pub bytes: u64,
    /// From its Hello to its End.
    #[serde(rename = "seconds", serialize_with = "as_secs")]
    pub elapsed: Duration,
    /// Its payload bits over its `elapsed`.
    pub rate_bps: u64,
}

/// Why a striped transfer failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StripedError {
    /// A stream could not connect.
    #[error("stream {stream}: cannot connect to {addr}: {source}")]
    Connect {
        /// The stream.
        stream: u16,
        /// Where to.
        addr: SocketAddr,
        /// Why.
        source: io::Error,
    },
    /// A local socket operation failed (bind, accept, socket options).
    #[error("socket: {0}")]
    Io(#[from] io::Error),
    /// Reading the source failed (sender).
    #[error("reading the source at byte {offset}: {source}")]
    Source {
        /// Where.
        offset: u64,
        /// Why.
        source: io::Error,
    },
    /// The source changed while it was being sent: it got shorter, its
    /// length or modification time differ at the end, or it read to
    /// another hash than [`StripedConfig::hash`] (sender).
    #[error("the source changed while it was being sent")]
    SourceChanged,
    /// Storing the payload failed (receiver).
    #[error("storing the payload at byte {offset}: {source}")]
    Sink {
        /// Where.
        offset: u64,
        /// Why.
        source: io::Error,
    },
    /// The destination's storage is full (receiver: ENOSPC or EDQUOT
    /// from the sink).
    #[error("the destination disk is full (writing at byte {offset})")]
    DiskFull {
        /// Where the write failed.
        offset: u64,
    },
    /// A stream's connection failed (reset, broken pipe).
    #[error("stream {stream}: the peer is gone: {source}")]
    PeerGone {
        /// The stream.
        stream: u16,
        /// The socket's error.
        source: io::Error,
    },
    /// A stream closed before its End frame (receiver), or before the
    /// answer (sender, stream 0).
    #[error("stream {stream} closed early, after {bytes} payload bytes")]
    StreamClosedEarly {
        /// The stream.
        stream: u16,
        /// Payload bytes it had carried.
        bytes: u64,
    },
    /// A wait passed [`StripedConfig::timeout`].
    #[error("timed out after {after:?} waiting for {what}")]
    Timeout {
        /// What did not happen.
        what: String,
        /// How long it waited.
        after: Duration,
    },
    /// The peer broke the protocol on a stream.
    #[error("stream {stream}: protocol violation: {reason}")]
    Protocol {
        /// The stream.
        stream: u16,
        /// What it did.
        reason: String,
    },
    /// Every byte arrived, but the receiver's hash of what it stored
    /// differs from the sender's.
    #[error(
        "BLAKE3 mismatch: the sender read {} but the receiver stored {}",
        hex(sent),
        hex(stored)
    )]
    HashMismatch {
        /// The sender's hash.
        sent: Hash,
        /// The receiver's.
        stored: Hash,
    },
    /// The receiver stopped the transfer and said why (sender).
    #[error("the receiver stopped the transfer: {0:?}")]
    Receiver(DoneStatus),
    /// The sender stopped the transfer and said why (receiver).
    #[error("the sender aborted the transfer: {0:?}")]
    SenderAborted(AbortReason),
}

impl StripedError {
    /// The status a receiver answers with when this error stops it.
    fn done_status(&self) -> Option<DoneStatus> {
        Some(match self {
            Self::DiskFull { .. } => DoneStatus::DiskFull,
            Self::Sink { .. } => DoneStatus::Storage,
            Self::StreamClosedEarly { .. } | Self::PeerGone { .. } => DoneStatus::StreamClosedEarly,
            Self::Timeout { .. } => DoneStatus::Timeout,
            Self::HashMismatch { .. } => DoneStatus::HashMismatch,
            Self::Protocol { .. } => DoneStatus::Protocol,
            Self::SenderAborted(_) => return None,
            _ => DoneStatus::Storage,
        })
    }

    /// Whether a stream's connection broke: the receiver may have said why
    /// first.
    fn is_connection_loss(&self) -> bool {
        matches!(
            self,
            Self::PeerGone { .. } | Self::StreamClosedEarly { .. } | Self::Timeout { .. }
        )
    }
}

/// Sends `source` to a [`StripedListener`] at `addr` over
/// [`StripedConfig::resolved_streams`] TCP connections. `progress` hears
/// the payload bytes handed to the sockets so far, every 100 ms and at the
/// end. Returns when the receiver confirms the hash.
///
/// The source is read in order on a blocking thread (so a slow disk does
/// not stall the runtime), at most a few chunks ahead of the sockets.
pub async fn send<S>(
    addr: SocketAddr,
    source: S,
    cfg: &StripedConfig,
    progress: impl FnMut(u64),
) -> Result<StripedReport, StripedError>
where
    S: BlastSource + Send + 'static,
{
    send_inner(addr, source, None, cfg, progress).await
}

/// [`send`] for the file at `path`, read with positional reads. A file
/// that shrinks, or whose length or modification time differ once it is
/// read, fails with [`StripedError::SourceChanged`] (the receiver hears an
/// Abort).
pub async fn send_file(
    addr: SocketAddr,
    path: impl AsRef<Path>,
    cfg: &StripedConfig,
    progress: impl FnMut(u64),
) -> Result<StripedReport, StripedError> {
    let path = path.as_ref().to_owned();
    let opened = tokio::task::spawn_blocking(move || -> io::Result<_> {
        let source = FileSource::open(&path)?;
        let probe = source.file().try_clone()?;
        let stamp = Stamp::of(&probe)?;
        Ok((source, probe, stamp))
    })
    .await;
    let (source, probe, stamp) =
        joined(opened).map_err(|source| StripedError::Source { offset: 0, source })?;
    let unchanged: Box<dyn FnOnce() -> bool + Send> =
        Box::new(move || Stamp::of(&probe).is_ok_and(|s| s == stamp));
    send_inner(addr, source, Some(unchanged), cfg, progress).await
}

/// A TCP listener for striped transfers: one [`accept`](Self::accept) per
/// transfer.
#[derive(Debug)]
pub struct StripedListener {
    listener: TcpListener,
    buffer: Option<usize>,
}

impl StripedListener {
    /// Listens on `addr` with the system's default receive buffer.
    pub async fn bind(addr: SocketAddr) -> io::Result<Self> {
        Self::bind_with(addr, &StripedConfig::new()).await
    }

    /// Listens on `addr`, with SO_RCVBUF set to `cfg`'s
    /// [`resolved_buffer`](StripedConfig::resolved_buffer) before `listen`
    /// (so the window scale covers it) and inherited by every connection.
    pub async fn bind_with(addr: SocketAddr, cfg: &StripedConfig) -> io::Result<Self> {
        let socket = if addr.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        socket.set_reuseaddr(true)?;
        let buffer = cfg.resolved_buffer();
        if let Some(b) = buffer {
            socket.set_recv_buffer_size(u32::try_from(b).unwrap_or(u32::MAX))?;
        }
        socket.bind(addr)?;
        Ok(Self {
            listener: socket.listen(1024)?,
            buffer,
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Receives one transfer into `dest`: waits (up to
    /// [`StripedConfig::wait`]) for a sender, takes the streams of its
    /// session (each must connect within [`StripedConfig::timeout`] of the
    /// first), stores every chunk at its offset, checks every byte arrived
    /// once, hashes what `dest` holds and answers the sender. `progress`
    /// hears the payload bytes stored so far, every 100 ms and at the end.
    ///
    /// A connection that does not open with a valid Hello (garbage, another
    /// protocol, silence, a stream index already taken) is dropped and does
    /// not disturb the transfer. Hellos of several sessions may be pending
    /// at once; the first session whose streams are all connected is the
    /// one received.
    pub async fn accept<D>(
        &self,
        dest: D,
        cfg: &StripedConfig,
        progress: impl FnMut(u64),
    ) -> Result<StripedReport, StripedError>
    where
        D: BlastSink + Send + 'static,
    {
        self.accept_with(None, dest, cfg, progress).await
    }

    /// A listener on an already bound TCP listener, with the system's
    /// default receive buffer.
    pub(crate) fn from_listener(listener: TcpListener) -> Self {
        Self {
            listener,
            buffer: None,
        }
    }

    /// The TCP listener, for a listener that looks at each connection's
    /// first bytes before handing it here.
    pub(crate) fn tcp(&self) -> &TcpListener {
        &self.listener
    }

    /// [`accept`](Self::accept), the transfer's first stream already
    /// taken (by a listener that tells protocols apart on one port).
    pub(crate) async fn accept_with<D>(
        &self,
        first: Option<FirstStream>,
        dest: D,
        cfg: &StripedConfig,
        mut progress: impl FnMut(u64),
    ) -> Result<StripedReport, StripedError>
    where
        D: BlastSink + Send + 'static,
    {
        let (clock, candidates) = match first {
            Some(f) => (f.clock, vec![f.candidate]),
            None => (Clock::start(), Vec::new()),
        };
        let gathered = self.gather(candidates, cfg, &clock).await?;
        let started = gathered.started;
        let Gathered {
            session,
            hello,
            streams,
            ..
        } = gathered;
        let (reads, mut writes): (Vec<_>, Vec<_>) =
            streams.into_iter().map(TcpStream::into_split).unzip();
        let chunks = hello.size.div_ceil(u64::from(hello.chunk_size));
        let sink = Arc::new(Mutex::new(dest));
        let size = hello.size;
        let prepared = {
            let sink = sink.clone();
            joined(tokio::task::spawn_blocking(move || lock(&sink).prepare(size)).await)
        };
        if let Err(e) = prepared {
            return fail(writes.first_mut(), session, storage_error(e, 0), 0).await;
        }
        let Some(bitmap) = Bitmap::new(chunks) else {
            return fail(
                writes.first_mut(),
                session,
                StripedError::Protocol {
                    stream: 0,
                    reason: format!("{chunks} chunks do not fit in memory"),
                },
                0,
            )
            .await;
        };
        let shared = Arc::new(Shared {
            session,
            hello,
            chunks,
            bitmap: Mutex::new(bitmap),
            sink,
            stored: AtomicU64::new(0),
            hash: Mutex::new(hello.hash),
            timeout: cfg.timeout,
            clock,
        });
        let mut tasks = JoinSet::new();
        for (i, r) in reads.into_iter().enumerate() {
            let index = u16::try_from(i).expect("at most MAX_STREAMS streams");
            tasks.spawn(recv_stream(index, r, shared.clone()));
        }
        let mut per_stream = vec![StreamStats::default(); usize::from(hello.count)];
        let mut tick = progress_ticker();
        loop {
            tokio::select! {
                r = tasks.join_next() => match r {
                    None => break,
                    Some(r) => match joined(r) {
                        Ok(s) => per_stream[usize::from(s.index)] = s,
                        Err(e) => {
                            tasks.abort_all();
                            let stored = shared.stored.load(Ordering::Relaxed);
                            return fail(writes.first_mut(), session, e, stored).await;
                        }
                    },
                },
                _ = tick.tick() => progress(shared.stored.load(Ordering::Relaxed)),
            }
        }
        let stored = shared.stored.load(Ordering::Relaxed);
        progress(stored);
        let ones = lock(&shared.bitmap).ones;
        let sent_hash = *lock(&shared.hash);
        let check = if ones != chunks || stored != size {
            Err(format!(
                "the streams ended with {ones} of {chunks} chunks ({stored} of {size} bytes)"
            ))
        } else {
            sent_hash.ok_or_else(|| "no stream said the payload's hash".to_owned())
        };
        let sent_hash = match check {
            Ok(h) => h,
            Err(reason) => {
                let e = StripedError::Protocol { stream: 0, reason };
                return fail(writes.first_mut(), session, e, stored).await;
            }
        };
        let sink = shared.sink.clone();
        let hashed =
            joined(tokio::task::spawn_blocking(move || hash_sink(&mut *lock(&sink), size)).await);
        let stored_hash = match hashed {
            Ok(h) => h,
            Err(e) => return fail(writes.first_mut(), session, storage_error(e, 0), stored).await,
        };
        let status = if stored_hash == sent_hash {
            DoneStatus::Ok
        } else {
            DoneStatus::HashMismatch
        };
        let done = Done {
            status,
            stored,
            hash: stored_hash,
        };
        if let Some(w) = writes.first_mut() {
            write_frame(w, session, Frame::Done(done), cfg.timeout, 0).await?;
            let _ = w.shutdown().await;
        }
        if status != DoneStatus::Ok {
            return Err(StripedError::HashMismatch {
                sent: sent_hash,
                stored: stored_hash,
            });
        }
        let elapsed = clock.now().saturating_duration_since(started);
        Ok(StripedReport {
            session,
            bytes: size,
            streams: hello.count,
            chunk_size: hello.chunk_size,
            socket_buffer: self.buffer,
            elapsed,
            rate_bps: rate(size, elapsed),
            per_stream,
            hash: stored_hash,
        })
    }

    /// Accepts connections until one session (of `candidates` or a new
    /// one) has all its streams.
    async fn gather(
        &self,
        mut candidates: Vec<Candidate>,
        cfg: &StripedConfig,
        clock: &Clock,
    ) -> Result<Gathered, StripedError> {
        let first_deadline = cfg.wait.map(|w| clock.now().saturating_add(w));
        let mut pending = JoinSet::new();
        loop {
            if let Some(i) = candidates.iter().position(Candidate::complete) {
                let c = candidates.swap_remove(i);
                for other in candidates {
                    debug!(session = other.session, "striped: another session dropped");
                }
                return Ok(Gathered {
                    session: c.session,
                    hello: c.hello,
                    streams: c.slots.into_iter().flatten().collect(),
                    started: c.started,
                });
            }
            let deadline =
                candidates
                    .iter()
                    .map(|c| c.deadline)
                    .min()
                    .or(if candidates.is_empty() {
                        first_deadline
                    } else {
                        None
                    });
            let sleep = sleep_opt(deadline.map(|d| clock.to_tokio(d)));
            tokio::select! {
                r = self.listener.accept() => match r {
                    Ok((s, peer)) if pending.len() < MAX_PENDING_HELLOS => {
                        debug!(%peer, "striped: connection");
                        pending.spawn(read_hello(s, cfg.timeout.min(HELLO_TIMEOUT)));
                    }
                    Ok((_, peer)) => debug!(%peer, "striped: too many connections pending, dropped"),
                    Err(e) if crate::is_transient(&e) => debug!(error = %e, "striped: accept"),
                    Err(e) => {
                        debug!(error = %e, "striped: accept failed, backing off");
                        // EMFILE and the like: wait for connections to close.
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
                Some(r) = pending.join_next() => {
                    let (stream, hello) = joined(r);
                    match hello {
                        Ok((session, h)) => {
                            admit(&mut candidates, stream, session, h, cfg, clock).await;
                        }
                        Err(e) => debug!(error = %e, "striped: not a striping hello, dropped"),
                    }
                }
                () = sleep => {
                    let now = clock.now();
                    if candidates.is_empty() {
                        return Err(StripedError::Timeout {
                            what: "a sender to connect".into(),
                            after: cfg.wait.unwrap_or_default(),
                        });
                    }
                    let (expired, live): (Vec<_>, Vec<_>) =
                        candidates.into_iter().partition(|c| c.deadline <= now);
                    candidates = live;
                    let mut last = None;
                    for mut c in expired {
                        let have = c.slots.iter().flatten().count();
                        debug!(session = c.session, have, "striped: streams did not all connect");
                        if let Some(s) = c.slots.first_mut().and_then(Option::as_mut) {
                            let done = Done { status: DoneStatus::Timeout, stored: 0, hash: [0; 32] };
                            let _ = write_frame(s, c.session, Frame::Done(done), Duration::from_secs(1), 0).await;
                        }
                        last = Some((have, c.hello.count));
                    }
                    if candidates.is_empty() {
                        let (have, count) = last.expect("a deadline passed, so a session expired");
                        return Err(StripedError::Timeout {
                            what: format!("the sender's streams to connect ({have} of {count})"),
                            after: cfg.timeout,
                        });
                    }
                }
            }
        }
    }
}

/// Tells the sender why the receiver stops (an early Done on stream 0,
/// best effort) and returns the error.
async fn fail<T>(
    w: Option<&mut OwnedWriteHalf>,
    session: u32,
    e: StripedError,
    stored: u64,
) -> Result<T, StripedError> {
    if let (Some(status), Some(w)) = (e.done_status(), w) {
        let done = Done {
            status,
            stored,
            hash: [0; 32],
        };
        let _ = write_frame(w, session, Frame::Done(done), Duration::from_secs(1), 0).await;
        let _ = w.shutdown().await;
    }
    Err(e)
}

// ---------------------------------------------------------------------------
// Sender internals.

/// Chunks the reader may queue ahead of the streams, per stream.
const QUEUE_PER_STREAM: usize = 1;
/// How often `progress` hears from a transfer.
const PROGRESS_EVERY: Duration = Duration::from_millis(100);
/// How long a sender whose stream broke waits for the receiver's reason.
const ANSWER_GRACE: Duration = Duration::from_secs(2);
/// How long an accepted connection has to send its Hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections whose Hello the receiver awaits at once; more are dropped.
const MAX_PENDING_HELLOS: usize = 64;
/// Sessions whose streams the receiver gathers at once.
const MAX_CANDIDATES: usize = 8;

/// A chunk read from the source: its offset and a buffer of
/// [`CHUNK_HEADER_LEN`] bytes for the frame header, then the payload.
type ReadChunk = (u64, Vec<u8>);

/// Why the reader stopped.
enum ReadFail {
    Source {
        offset: u64,
        source: io::Error,
    },
    Changed,
    /// The streams are gone: the transfer already failed.
    Cancelled,
}

async fn send_inner<S>(
    addr: SocketAddr,
    source: S,
    unchanged: Option<Box<dyn FnOnce() -> bool + Send>>,
    cfg: &StripedConfig,
    mut progress: impl FnMut(u64),
) -> Result<StripedReport, StripedError>
where
    S: BlastSource + Send + 'static,
{
    let clock = Clock::start();
    let n = cfg.resolved_streams();
    let buffer = cfg.resolved_buffer();
    let chunk_size = cfg.chunk_size.clamp(1, MAX_CHUNK_SIZE);
    let size = source.len();
    let session = cfg.session.unwrap_or_else(|| session_id(&clock));
    let timeout = cfg.timeout;

    let mut conns = connect_all(addr, n, buffer, timeout).await?;
    for (i, c) in conns.iter_mut().enumerate() {
        let hello = Hello {
            size,
            chunk_size,
            index: u16::try_from(i).expect("at most MAX_STREAMS streams"),
            count: n,
            hash: cfg.hash,
        };
        let index = hello.index;
        write_frame(c, session, Frame::Hello(hello), timeout, index).await?;
    }
    let (mut reads, writes): (Vec<_>, Vec<_>) =
        conns.into_iter().map(TcpStream::into_split).unzip();
    let answer = read_answer(reads.swap_remove(0), session);
    tokio::pin!(answer);

    let (tx, rx) = mpsc::channel::<ReadChunk>(usize::from(n) * QUEUE_PER_STREAM);
    let claimed = cfg.hash;
    let reader = tokio::task::spawn_blocking(move || {
        read_source(source, size, chunk_size, tx, unchanged, claimed)
    });
    let rx = Arc::new(tokio::sync::Mutex::new(rx));
    let sent = Arc::new(AtomicU64::new(0));
    let mut tasks = JoinSet::new();
    for (i, w) in writes.into_iter().enumerate() {
        let index = u16::try_from(i).expect("at most MAX_STREAMS streams");
        let ctx = StreamCtx {
            session,
            timeout,
            sent: sent.clone(),
            clock,
        };
        tasks.spawn(send_stream(index, w, rx.clone(), ctx));
    }
    drop(rx);

    let transfer = async {
        let mut writers: Vec<Option<OwnedWriteHalf>> = (0..n).map(|_| None).collect();
        let mut per_stream = vec![StreamStats::default(); usize::from(n)];
        let mut tick = progress_ticker();
        loop {
            tokio::select! {
                r = tasks.join_next() => match r {
                    None => break,
                    Some(r) => {
                        let (w, s) = joined(r)?;
                        writers[usize::from(s.index)] = Some(w);
                        per_stream[usize::from(s.index)] = s;
                    }
                },
                _ = tick.tick() => progress(sent.load(Ordering::Relaxed)),
            }
        }
        let mut writers: Vec<OwnedWriteHalf> = writers.into_iter().flatten().collect();
        let hash = match joined(reader.await) {
            Ok(h) => h,
            Err(fail) => {
                let (err, reason) = match fail {
                    ReadFail::Source { offset, source } => (
                        StripedError::Source { offset, source },
                        AbortReason::SourceRead,
                    ),
                    ReadFail::Changed => (StripedError::SourceChanged, AbortReason::SourceChanged),
                    ReadFail::Cancelled => (
                        StripedError::Io(io::Error::other("the streams stopped early")),
                        AbortReason::Cancelled,
                    ),
                };
                for (i, w) in writers.iter_mut().enumerate() {
                    let abort = Frame::Abort(Abort { reason });
                    let index = u16::try_from(i).expect("at most MAX_STREAMS streams");
                    let _ = write_frame(w, session, abort, Duration::from_secs(1), index).await;
                }
                return Err(err);
            }
        };
        for (i, w) in writers.iter_mut().enumerate() {
            let s = per_stream[i];
            let end = End {
                chunks: s.chunks,
                bytes: s.bytes,
                hash: Some(hash),
            };
            write_frame(w, session, Frame::End(end), timeout, s.index).await?;
        }
        progress(sent.load(Ordering::Relaxed));
        Ok((hash, writers, per_stream))
    };
    tokio::pin!(transfer);

    let outcome = tokio::select! {
        biased;
        r = &mut transfer => r,
        a = &mut answer => {
            return Err(match a {
                Ok(done) => status_error(done.status).unwrap_or_else(|| StripedError::Protocol {
                    stream: 0,
                    reason: "the receiver answered Ok before the last End".into(),
                }),
                Err(e) => e,
            });
        }
    };
    let (hash, _writers, per_stream) = match outcome {
        Ok(x) => x,
        Err(e) => {
            // A broken stream may be the receiver hanging up after an
            // error it has already told us about on stream 0.
            if e.is_connection_loss() {
                if let Ok(Ok(done)) = tokio::time::timeout(ANSWER_GRACE, &mut answer).await {
                    if let Some(reason) = status_error(done.status) {
                        return Err(reason);
                    }
                }
            }
            return Err(e);
        }
    };
    let wait = timeout.saturating_add(Duration::from_secs_f64(
        size as f64 / HASH_RATE_FLOOR as f64,
    ));
    let done = tokio::time::timeout(wait, &mut answer)
        .await
        .map_err(|_| StripedError::Timeout {
            what: "the receiver's answer".into(),
            after: wait,
        })??;
    match done.status {
        DoneStatus::Ok if done.hash == hash && done.stored == size => {}
        DoneStatus::Ok | DoneStatus::HashMismatch => {
            return Err(StripedError::HashMismatch {
                sent: hash,
                stored: done.hash,
            });
        }
        other => return Err(StripedError::Receiver(other)),
    }
    let elapsed = clock.now().saturating_duration_since(Instant::ZERO);
    Ok(StripedReport {
        session,
        bytes: size,
        streams: n,
        chunk_size,
        socket_buffer: buffer,
        elapsed,
        rate_bps: rate(size, elapsed),
        per_stream,
        hash,
    })
}

/// What every sending stream shares.
struct StreamCtx {
    session: u32,
    timeout: Duration,
    sent: Arc<AtomicU64>,
    clock: Clock,
}

/// One sending stream: takes the next chunk off the queue whenever its
/// socket has taken the last, until the queue closes.
async fn send_stream(
    index: u16,
    mut w: OwnedWriteHalf,
    queue: Arc<tokio::sync::Mutex<mpsc::Receiver<ReadChunk>>>,
    ctx: StreamCtx,
) -> Result<(OwnedWriteHalf, StreamStats), StripedError> {
    let started = ctx.clock.now();
    let mut stats = StreamStats {
        index,
        ..StreamStats::default()
    };
    loop {
        let next = queue.lock().await.recv().await;
        let Some((offset, mut buf)) = next else { break };
        let length = buf.len() - CHUNK_HEADER_LEN;
        let head = Repr {
            session: ctx.session,
            frame: Frame::Chunk(ChunkHeader {
                offset,
                length: u32::try_from(length).expect("chunks are at most MAX_CHUNK_SIZE"),
            }),
        };
        head.emit(&mut buf[..CHUNK_HEADER_LEN]);
        write_timed(&mut w, &buf, ctx.timeout, index).await?;
        stats.chunks += 1;
        stats.bytes += length as u64;
        ctx.sent.fetch_add(length as u64, Ordering::Relaxed);
    }
    stats.elapsed = ctx.clock.now().saturating_duration_since(started);
    stats.rate_bps = rate(stats.bytes, stats.elapsed);
    Ok((w, stats))
}

/// Reads the source in order into the queue, hashing it; its hash once
/// the whole source is read and unchanged.
fn read_source<S: BlastSource>(
    mut source: S,
    size: u64,
    chunk_size: u32,
    tx: mpsc::Sender<ReadChunk>,
    unchanged: Option<Box<dyn FnOnce() -> bool + Send>>,
    claimed: Option<Hash>,
) -> Result<Hash, ReadFail> {
    let mut hasher = blake3::Hasher::new();
    let mut offset = 0u64;
    while offset < size {
        let n = (size - offset).min(u64::from(chunk_size)) as usize;
        let mut buf = vec![0u8; CHUNK_HEADER_LEN + n];
        match source.read_at(offset, &mut buf[CHUNK_HEADER_LEN..]) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Err(ReadFail::Changed),
            Err(source) => return Err(ReadFail::Source { offset, source }),
        }
        hasher.update(&buf[CHUNK_HEADER_LEN..]);
        if tx.blocking_send((offset, buf)).is_err() {
            return Err(ReadFail::Cancelled);
        }
        offset += n as u64;
    }
    let hash = *hasher.finalize().as_bytes();
    let same = unchanged.is_none_or(|f| f()) && claimed.is_none_or(|c| c == hash);
    if !same {
        return Err(ReadFail::Changed);
    }
    Ok(hash)
}

/// Connects the `n` streams at once.
async fn connect_all(
    addr: SocketAddr,
    n: u16,
    buffer: Option<usize>,
    timeout: Duration,
) -> Result<Vec<TcpStream>, StripedError> {
    let mut set = JoinSet::new();
    for stream in 0..n {
        set.spawn(async move {
            let connect = async {
                let socket = if addr.is_ipv4() {
                    TcpSocket::new_v4()?
                } else {
                    TcpSocket::new_v6()?
                };
                if let Some(b) = buffer {
                    socket.set_send_buffer_size(u32::try_from(b).unwrap_or(u32::MAX))?;
                }
                socket.connect(addr).await
            };
            let r = match tokio::time::timeout(timeout, connect).await {
                Ok(Ok(s)) => Ok(s),
                Ok(Err(source)) => Err(StripedError::Connect {
                    stream,
                    addr,
                    source,
                }),
                Err(_) => Err(StripedError::Timeout {
                    what: format!("stream {stream} to connect to {addr}"),
                    after: timeout,
                }),
            };
            (stream, r)
        });
    }
    let mut conns: Vec<Option<TcpStream>> = (0..n).map(|_| None).collect();
    while let Some(r) = set.join_next().await {
        let (stream, r) = joined(r);
        conns[usize::from(stream)] = Some(r?);
    }
    Ok(conns.into_iter().flatten().collect())
}

/// Reads the receiver's one answer on stream 0.
async fn read_answer(mut r: OwnedReadHalf, session: u32) -> Result<Done, StripedError> {
    let mut buf = [0u8; MAX_FRAME_LEN];
    let repr = read_frame(&mut r, &mut buf, None, 0, 0).await?;
    match repr.frame {
        Frame::Done(d) if repr.session == session => Ok(d),
        _ => Err(StripedError::Protocol {
            stream: 0,
            reason: "the receiver answered with something other than Done".into(),
        }),
    }
}

/// The error a receiver's non-Ok answer means, if it is an error.
fn status_error(status: DoneStatus) -> Option<StripedError> {
    (status != DoneStatus::Ok).then_some(StripedError::Receiver(status))
}

/// A session id from the wall clock and the process id: distinct enough
/// to tell transfers apart on one listener (not a secret).
fn session_id(clock: &Clock) -> u32 {
    let micros = clock.wall_micros(Instant::ZERO);
    ((micros ^ (micros >> 32)) as u32) ^ std::process::id().rotate_left(16)
}

// ---------------------------------------------------------------------------
// Receiver internals.

/// The streams of one session, once all are in.
struct Gathered {
    session: u32,
    hello: Hello,
    streams: Vec<TcpStream>,
    started: Instant,
}

/// A session whose streams are still connecting.
struct Candidate {
    session: u32,
    hello: Hello,
    slots: Vec<Option<TcpStream>>,
    started: Instant,
    deadline: Instant,
}

impl Candidate {
    fn complete(&self) -> bool {
        self.slots.iter().all(Option::is_some)
    }
}

/// Files a stream that opened with a valid Hello under its session, or
/// drops it (a taken index, a shape that differs from its session's
/// first Hello, too many sessions at once, a transfer too large to take).
async fn admit(
    candidates: &mut Vec<Candidate>,
    mut stream: TcpStream,
    session: u32,
    h: Hello,
    cfg: &StripedConfig,
    clock: &Clock,
) {
    let same_shape = |a: &Hello| {
        (a.size, a.chunk_size, a.count, a.hash) == (h.size, h.chunk_size, h.count, h.hash)
    };
    if let Some(c) = candidates.iter_mut().find(|c| c.session == session) {
        let slot = &mut c.slots[usize::from(h.index)];
        if !same_shape(&c.hello) || slot.is_some() {
            debug!(
                session,
                index = h.index,
                "striped: hello does not fit its session, dropped"
            );
            return;
        }
        *slot = Some(stream);
        return;
    }
    let memory = u64::from(h.count) * u64::from(h.chunk_size);
    let chunks = h.size.div_ceil(u64::from(h.chunk_size));
    if memory > RECEIVER_BUFFER_LIMIT || chunks > MAX_CHUNKS {
        debug!(session, memory, chunks, "striped: transfer refused");
        let done = Done {
            status: DoneStatus::Refused,
            stored: 0,
            hash: [0; 32],
        };
        let _ = write_frame(
            &mut stream,
            session,
            Frame::Done(done),
            Duration::from_secs(1),
            h.index,
        )
        .await;
        return;
    }
    if candidates.len() >= MAX_CANDIDATES {
        debug!(
            session,
            "striped: too many sessions connecting at once, dropped"
        );
        return;
    }
    let now = clock.now();
    let mut slots: Vec<Option<TcpStream>> = (0..h.count).map(|_| None).collect();
    slots[usize::from(h.index)] = Some(stream);
    candidates.push(Candidate {
        session,
        hello: h,
        slots,
        started: now,
        deadline: now.saturating_add(cfg.timeout),
    });
}

/// A striped transfer's first stream, its Hello read and its session
/// admitted: what a listener that tells protocols apart on one port hands
/// to [`StripedListener::accept_with`].
pub(crate) struct FirstStream {
    candidate: Candidate,
    clock: Clock,
}

impl FirstStream {
    /// Reads `s`'s Hello (within [`StripedConfig::timeout`], at most
    /// 5 s) and admits its session; why not, when it is not a striped
    /// sender's stream or its transfer is refused.
    pub(crate) async fn open(s: TcpStream, cfg: &StripedConfig) -> Result<Self, String> {
        let clock = Clock::start();
        let (s, hello) = read_hello(s, cfg.timeout.min(HELLO_TIMEOUT)).await;
        let (session, h) = hello?;
        let mut candidates = Vec::with_capacity(1);
        admit(&mut candidates, s, session, h, cfg, &clock).await;
        match candidates.pop() {
            Some(candidate) => Ok(Self { candidate, clock }),
            None => Err(format!("session {session}: transfer refused")),
        }
    }

    /// The transfer's payload bytes.
    pub(crate) fn size(&self) -> u64 {
        self.candidate.hello.size
    }
}

/// Reads a connection's first frame, which must be a Hello.
async fn read_hello(
    mut s: TcpStream,
    timeout: Duration,
) -> (TcpStream, Result<(u32, Hello), String>) {
    let mut buf = [0u8; MAX_FRAME_LEN];
    let r = match read_frame(&mut s, &mut buf, Some(timeout), 0, 0).await {
        Ok(Repr {
            session,
            frame: Frame::Hello(h),
        }) => Ok((session, h)),
        Ok(other) => Err(format!("first frame {other:?}")),
        Err(e) => Err(e.to_string()),
    };
    (s, r)
}

/// What the receiving streams share.
struct Shared<D> {
    session: u32,
    hello: Hello,
    chunks: u64,
    bitmap: Mutex<Bitmap>,
    sink: Arc<Mutex<D>>,
    stored: AtomicU64,
    /// The sender's hash: from the Hello if it had one, else the first End.
    hash: Mutex<Option<Hash>>,
    timeout: Duration,
    clock: Clock,
}

/// One receiving stream: chunks in, stored at their offsets, until its End.
async fn recv_stream<D: BlastSink + Send + 'static>(
    index: u16,
    mut r: OwnedReadHalf,
    shared: Arc<Shared<D>>,
) -> Result<StreamStats, StripedError> {
    let started = shared.clock.now();
    let chunk_size = shared.hello.chunk_size;
    let size = shared.hello.size;
    let mut stats = StreamStats {
        index,
        ..StreamStats::default()
    };
    let protocol = |reason: String| StripedError::Protocol {
        stream: index,
        reason,
    };
    let mut head = [0u8; MAX_FRAME_LEN];
    let mut buf = Some(vec![0u8; chunk_size as usize]);
    loop {
        let repr = read_frame(&mut r, &mut head, Some(shared.timeout), index, stats.bytes).await?;
        if repr.session != shared.session {
            return Err(protocol(format!("a frame of session {}", repr.session)));
        }
        match repr.frame {
            Frame::Chunk(c) => {
                let len = u64::from(c.length);
                let i = c.offset / u64::from(chunk_size);
                let expected = size.saturating_sub(c.offset).min(u64::from(chunk_size));
                if c.offset % u64::from(chunk_size) != 0 || i >= shared.chunks || len != expected {
                    return Err(protocol(format!(
                        "chunk of {len} bytes at {} is not a chunk of the transfer",
                        c.offset
                    )));
                }
                if !lock(&shared.bitmap).set(i) {
                    return Err(protocol(format!("chunk at {} sent twice", c.offset)));
                }
                let mut data = buf.take().expect("the buffer comes back after each write");
                let n = c.length as usize;
                read_timed(&mut r, &mut data[..n], shared.timeout, index, stats.bytes).await?;
                let sink = shared.sink.clone();
                let offset = c.offset;
                let (data, written) = joined(
                    tokio::task::spawn_blocking(move || {
                        let w = lock(&sink).write_at(offset, &data[..n]);
                        (data, w)
                    })
                    .await,
                );
                buf = Some(data);
                written.map_err(|e| storage_error(e, offset))?;
                stats.chunks += 1;
                stats.bytes += len;
                shared.stored.fetch_add(len, Ordering::Relaxed);
            }
            Frame::End(e) => {
                if (e.chunks, e.bytes) != (stats.chunks, stats.bytes) {
                    return Err(protocol(format!(
                        "End says {} chunks and {} bytes, {} and {} arrived",
                        e.chunks, e.bytes, stats.chunks, stats.bytes
                    )));
                }
                let mut known = lock(&shared.hash);
                match (*known, e.hash) {
                    (_, None) => {}
                    (None, Some(h)) => *known = Some(h),
                    (Some(k), Some(h)) if k == h => {}
                    (Some(_), Some(_)) => {
                        return Err(protocol("a hash that differs from another stream's".into()));
                    }
                }
                break;
            }
            Frame::Abort(a) => return Err(StripedError::SenderAborted(a.reason)),
            other => return Err(protocol(format!("unexpected {other:?}"))),
        }
    }
    stats.elapsed = shared.clock.now().saturating_duration_since(started);
    stats.rate_bps = rate(stats.bytes, stats.elapsed);
    Ok(stats)
}

/// The BLAKE3 hash of the sink's first `size` bytes, read back a MiB at a
/// time.
fn hash_sink<D: BlastSink>(sink: &mut D, size: u64) -> io::Result<Hash> {
    let mut hasher = blake3::Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut at = 0u64;
    while at < size {
        let n = (size - at).min(buf.len() as u64) as usize;
        sink.read_at(at, &mut buf[..n])?;
        hasher.update(&buf[..n]);
        at += n as u64;
    }
    Ok(*hasher.finalize().as_bytes())
}

/// One bit per chunk, set when it has arrived.
struct Bitmap {
    words: Vec<u64>,
    len: u64,
    ones: u64,
}

impl Bitmap {
    /// `len` clear bits; `None` when they do not fit in memory.
    fn new(len: u64) -> Option<Self> {
        let n = usize::try_from(len.div_ceil(64)).ok()?;
        let mut words = Vec::new();
        words.try_reserve_exact(n).ok()?;
        words.resize(n, 0);
        Some(Self {
            words,
            len,
            ones: 0,
        })
    }

    /// Sets bit `i`; whether it was clear (and in range).
    fn set(&mut self, i: u64) -> bool {
        if i >= self.len {
            return false;
        }
        let w = &mut self.words[(i / 64) as usize];
        let bit = 1u64 << (i % 64);
        let was_clear = *w & bit == 0;
        *w |= bit;
        self.ones += u64::from(was_clear);
        was_clear
    }
}

// ---------------------------------------------------------------------------
// Shared helpers.

/// Reads one frame (for a chunk, its header) into `buf`. With a timeout,
/// each read must finish within it.
async fn read_frame<R: tokio::io::AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut [u8; MAX_FRAME_LEN],
    timeout: Option<Duration>,
    stream: u16,
    bytes: u64,
) -> Result<Repr, StripedError> {
    let protocol = |e: groupwire_proto::wire::WireError| StripedError::Protocol {
        stream,
        reason: e.to_string(),
    };
    let t = timeout.unwrap_or(Duration::MAX);
    read_timed(r, &mut buf[..PREFIX_LEN], t, stream, bytes).await?;
    let len = frame_len(&buf[..PREFIX_LEN]).map_err(protocol)?;
    read_timed(r, &mut buf[PREFIX_LEN..len], t, stream, bytes).await?;
    Repr::parse(&buf[..len]).map_err(protocol)
}

/// `read_exact` bounded by `timeout`, its errors named by stream.
async fn read_timed<R: tokio::io::AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut [u8],
    timeout: Duration,
    stream: u16,
    bytes: u64,
) -> Result<(), StripedError> {
    let read = r.read_exact(buf);
    let result = if timeout == Duration::MAX {
        read.await
    } else {
        tokio::time::timeout(timeout, read)
            .await
            .map_err(|_| StripedError::Timeout {
                what: format!("data on stream {stream}"),
                after: timeout,
            })?
    };
    match result {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
            Err(StripedError::StreamClosedEarly { stream, bytes })
        }
        Err(source) => Err(StripedError::PeerGone { stream, source }),
    }
}

/// `write_all` bounded by `timeout`, its errors named by stream.
async fn write_timed<W: tokio::io::AsyncWrite + Unpin>(
    w: &mut W,
    data: &[u8],
    timeout: Duration,
    stream: u16,
) -> Result<(), StripedError> {
    match tokio::time::timeout(timeout, w.write_all(data)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(source)) => Err(StripedError::PeerGone { stream, source }),
        Err(_) => Err(StripedError::Timeout {
            what: format!("the receiver to take data on stream {stream}"),
            after: timeout,
        }),
    }
}

async fn write_frame<W: tokio::io::AsyncWrite + Unpin>(
    w: &mut W,
    session: u32,
    frame: Frame,
    timeout: Duration,
    stream: u16,
) -> Result<(), StripedError> {
    debug_assert!(
        !matches!(frame, Frame::Chunk(_)),
        "chunks go out with their payload"
    );
    let bytes = Repr { session, frame }.to_vec();
    write_timed(w, &bytes, timeout, stream).await
}

/// A storage error: ENOSPC and EDQUOT are a full disk.
fn storage_error(e: io::Error, offset: u64) -> StripedError {
    /// Linux's ENOSPC and EDQUOT (the tokio crate does not link libc).
    const ENOSPC: i32 = 28;
    const EDQUOT: i32 = 122;
    if e.kind() == io::ErrorKind::StorageFull || matches!(e.raw_os_error(), Some(ENOSPC | EDQUOT)) {
        StripedError::DiskFull { offset }
    } else {
        StripedError::Sink { offset, source: e }
    }
}

/// A file's length and modification time, to notice it changing.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Stamp {
    len: u64,
    modified: Option<SystemTime>,
}

impl Stamp {
    fn of(file: &File) -> io::Result<Self> {
        let m = file.metadata()?;
        Ok(Self {
            len: m.len(),
            modified: m.modified().ok(),
        })
    }
}

fn progress_ticker() -> tokio::time::Interval {
    let mut tick = tokio::time::interval(PROGRESS_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick
}

async fn sleep_opt(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// The task's result; a panic in it resumes here.
fn joined<T>(r: Result<T, JoinError>) -> T {
    match r {
        Ok(t) => t,
        Err(e) => match e.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            Err(e) => panic!("striped tasks are only cancelled by dropping their set: {e}"),
        },
    }
}

/// Locks a mutex; a poisoned one means a task panicked, and that panic is
/// already on its way up through [`joined`].
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn rate(bytes: u64, elapsed: Duration) -> u64 {
    let s = elapsed.as_secs_f64();
    if s > 0.0 {
        (bytes as f64 * 8.0 / s) as u64
    } else {
        0
    }
}

fn as_hex<S: serde::Serializer>(h: &Hash, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&hex(h))
}

fn as_secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

#[cfg(test)]
mod plan_tests {
    use super::*;

    //= Leigh et al. §4.2
    //# For example, for a 45Mbps link between Chicago and Amsterdam, with
    //# an average round trip time of 150ms, the capacity is 45*0.15/8 =
    //# 0.84Mbytes.
    #[test]
    fn plans_the_papers_chicago_amsterdam_link() {
        let p = plan(
            Bitrate::mbps(45),
            Duration::from_millis(150),
            DEFAULT_WINDOW,
        );
        assert_eq!(p.bdp, 843_750);
        // ceil(843 750 / 65 536) = 13 windows in flight.
        assert_eq!(p.streams, 13);
        // ceil(843 750 / 13) = 64 904, + 25 % = 81 130, up to a KiB.
        assert_eq!(p.buffer, 80 * 1024);
        // A tuned 1 MiB window needs one stream with the whole BDP.
        let tuned = plan(Bitrate::mbps(45), Duration::from_millis(150), 1 << 20);
        assert_eq!(tuned.streams, 1);
        assert_eq!(tuned.buffer, 1_054_720);
    }

    #[test]
    fn plan_stays_in_bounds() {
        let lan = plan(Bitrate::gbps(1), Duration::from_micros(100), DEFAULT_WINDOW);
        assert_eq!((lan.streams, lan.buffer), (1, 64 * 1024));
        let huge = plan(
            Bitrate::gbps(100),
            Duration::from_millis(300),
            DEFAULT_WINDOW,
        );
        assert_eq!(huge.streams, MAX_PLANNED_STREAMS);
        assert!(huge.buffer as u64 >= huge.bdp / u64::from(MAX_PLANNED_STREAMS));
        let zero = plan(Bitrate::bps(0), Duration::ZERO, 0);
        assert_eq!((zero.bdp, zero.streams), (0, 1));
        let cfg = StripedConfig::new().path(Bitrate::mbps(45), Duration::from_millis(150));
        assert_eq!(cfg.resolved_streams(), 13);
        assert_eq!(cfg.resolved_buffer(), Some(80 * 1024));
        assert_eq!(cfg.clone().streams(2).resolved_streams(), 2);
        assert_eq!(StripedConfig::new().resolved_streams(), DEFAULT_STREAMS);
        assert_eq!(StripedConfig::new().streams(0).resolved_streams(), 1);
    }
}
