//! One port for both bulk transports: a receiver that takes a Reliable
//! Blast UDP sender ([`rbudp`]) or a striped TCP sender
//! ([`striped`](crate::striped)), whichever comes (`groupwire bulk recv
//! --via auto`).
//!
//! Both open with a TCP connection to the receiver's port, and their first
//! bytes differ:
//!
//! - an RBUDP control connection starts with a frame's 4-byte big-endian
//!   length, at most [`MAX_CONTROL_LEN`] (64 KiB), so its first byte is 0;
//! - a striped stream starts with the common header, whose first byte is
//!   its version, [`header::VERSION`] (1).
//!
//! [`BulkListener`] binds TCP and UDP on one port (as
//! [`RbudpListener`](crate::rbudp::RbudpListener) does), accepts a
//! connection and `peek`s its first byte without consuming it. A 0 runs
//! the RBUDP receive on that connection and the UDP socket; a 1 reads the
//! striped Hello and gathers the transfer's other streams from the same
//! TCP listener. A connection that says nothing within the start timeout,
//! says something else, or does not go on to open a transfer (no valid
//! RBUDP Start, no valid Hello, a refused transfer) is dropped and
//! counted, and the next one is awaited.
//!
//! Connections are looked at one at a time, as `RbudpListener` does: a
//! silent one holds the next sender back (in the kernel's accept queue)
//! for at most [`ReceiveConfig::start_timeout`].

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use groupwire_proto::rbudp::BlastSink;
use groupwire_proto::wire::header;
use groupwire_proto::wire::rbudp::MAX_CONTROL_LEN;
use tokio::net::TcpStream;

use crate::Clock;
use crate::rbudp::{self, Progress, RbudpError, RbudpReport, ReceiveConfig, Taken};
use crate::socket::BatchedUdpSocket;
use crate::striped::{FirstStream, StripedConfig, StripedError, StripedListener, StripedReport};

/// The two mechanisms a [`BulkListener`] tells apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Mechanism {
    /// Reliable Blast UDP.
    Rbudp,
    /// TCP striped over one or more connections.
    Striped,
}

impl Mechanism {
    /// The name `groupwire bulk` uses for it: `"rbudp"` or `"tcp"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Rbudp => "rbudp",
            Self::Striped => "tcp",
        }
    }

    /// The mechanism whose connections start with `first`, if any.
    pub fn from_first_byte(first: u8) -> Option<Self> {
        // A frame length below 16 MiB; MAX_CONTROL_LEN is far below.
        const _: () = assert!(MAX_CONTROL_LEN < 1 << 24);
        match first {
            0 => Some(Self::Rbudp),
            header::VERSION => Some(Self::Striped),
            _ => None,
        }
    }
}

/// How a [`BulkListener`] takes a transfer.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct BulkReceiveConfig {
    /// For RBUDP transfers (`max_size`, `idle_timeout`). Its
    /// `accept_timeout` bounds the wait for a sender of either kind, and
    /// its `start_timeout` the wait for a new connection's first byte as
    /// well as for an RBUDP sender's Start.
    pub rbudp: ReceiveConfig,
    /// For striped transfers (`timeout`; `wait` is not used:
    /// `rbudp.accept_timeout` bounds the wait for a first sender).
    pub striped: StripedConfig,
}

/// What a [`BulkListener`] received.
#[derive(Debug)]
#[non_exhaustive]
pub enum Received<K> {
    /// From an RBUDP sender: its report and the sink.
    Rbudp(RbudpReport, K),
    /// From a striped sender: its report. The sink was dropped at the end
    /// (a [`FileSink`](crate::file::FileSink) flushes then; open the file
    /// again to sync it).
    Striped(StripedReport),
}

impl<K> Received<K> {
    /// Which mechanism the sender used.
    pub fn mechanism(&self) -> Mechanism {
        match self {
            Self::Rbudp(..) => Mechanism::Rbudp,
            Self::Striped(_) => Mechanism::Striped,
        }
    }
}

/// Why a [`BulkListener`] received nothing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BulkError {
    /// An RBUDP transfer started and failed.
    #[error(transparent)]
    Rbudp(#[from] RbudpError),
    /// A striped transfer started and failed.
    #[error(transparent)]
    Striped(#[from] StripedError),
    /// No sender came within the accept timeout.
    #[error("no sender connected within {0:?}")]
    NoSender(Duration),
    /// Accepting failed.
    #[error("{0}")]
    Io(#[from] io::Error),
}

/// Takes one bulk transfer of either mechanism on one port: a TCP listener
/// and a UDP socket bound to the same port.
#[derive(Debug)]
pub struct BulkListener {
    striped: StripedListener,
    udp: BatchedUdpSocket,
    socket_buffer: usize,
    dropped: AtomicU64,
}

impl BulkListener {
    /// Listens at `addr` (TCP and UDP, the same port; port 0 picks one
    /// free for both). The UDP socket asks for
    /// [`rbudp::DEFAULT_SOCKET_BUFFER`]; TCP connections get the system's
    /// default buffers.
    pub async fn bind(addr: SocketAddr) -> io::Result<Self> {
        let (tcp, udp, socket_buffer) = rbudp::bind_pair(addr).await?;
        Ok(Self {
            striped: StripedListener::from_listener(tcp),
            udp,
            socket_buffer,
            dropped: AtomicU64::new(0),
        })
    }

    /// The address senders connect to.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.striped.local_addr()
    }

    /// `SO_RCVBUF` the kernel granted the UDP socket.
    pub fn socket_buffer(&self) -> usize {
        self.socket_buffer
    }

    /// Connections dropped so far because they did not open a transfer
    /// (silence, another protocol, no valid RBUDP Start or striped Hello).
    /// Connections of a striped transfer's gathering that are not its
    /// streams are dropped by the striped receiver and not counted here.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Waits for a sender of either mechanism and stores its payload into
    /// `sink`. `progress` hears the mechanism and where the transfer
    /// stands about ten times a second (for a striped transfer, `round`
    /// and `rate_bps` are 0). Returns once the hash matched.
    pub async fn receive<K>(
        &self,
        cfg: &BulkReceiveConfig,
        mut sink: K,
        mut progress: impl FnMut(Mechanism, Progress),
    ) -> Result<Received<K>, BulkError>
    where
        K: BlastSink + Send + 'static,
    {
        let wait = cfg.rbudp.accept_timeout;
        let deadline = wait.map(|d| Clock::start().tokio_after(d));
        loop {
            let (tcp, peer) = rbudp::accept_until(self.striped.tcp(), deadline)
                .await?
                .ok_or_else(|| BulkError::NoSender(wait.unwrap_or_default()))?;
            let why = match sniff(&tcp, cfg.rbudp.start_timeout).await {
                Ok(Mechanism::Rbudp) => {
                    let mut on_progress = |p| progress(Mechanism::Rbudp, p);
                    match rbudp::receive_on(
                        &self.udp,
                        self.socket_buffer,
                        tcp,
                        peer,
                        &cfg.rbudp,
                        sink,
                        &mut on_progress,
                    )
                    .await?
                    {
                        Taken::Done(r, k) => return Ok(Received::Rbudp(r, k)),
                        Taken::NotStarted(k) => {
                            sink = k;
                            "no valid RBUDP Start".to_owned()
                        }
                    }
                }
                Ok(Mechanism::Striped) => match FirstStream::open(tcp, &cfg.striped).await {
                    Ok(first) => {
                        let total = first.size();
                        let on_progress = |bytes| {
                            let p = Progress {
                                bytes,
                                total,
                                ..Progress::default()
                            };
                            progress(Mechanism::Striped, p);
                        };
                        return Ok(Received::Striped(
                            self.striped
                                .accept_with(Some(first), sink, &cfg.striped, on_progress)
                                .await?,
                        ));
                    }
                    Err(why) => why,
                },
                Err(why) => why.to_owned(),
            };
            self.dropped.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(%peer, why, "bulk: connection dropped");
        }
    }
}

/// Which mechanism `tcp`'s first byte says, without consuming it; why
/// not, when it says neither or nothing within `within`.
async fn sniff(tcp: &TcpStream, within: Duration) -> Result<Mechanism, &'static str> {
    let mut first = [0u8; 1];
    match tokio::time::timeout(within, tcp.peek(&mut first)).await {
        Err(_) => Err("nothing sent within the start timeout"),
        Ok(Err(_)) => Err("the connection failed before its first byte"),
        Ok(Ok(0)) => Err("closed before its first byte"),
        Ok(Ok(_)) => Mechanism::from_first_byte(first[0]).ok_or("neither RBUDP nor striped TCP"),
    }
}

#[cfg(test)]
mod tests;
