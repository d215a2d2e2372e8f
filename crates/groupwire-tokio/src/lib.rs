//! groupwire on real sockets: a tokio driver for the sans-IO machines of
//! `groupwire-proto`, and a userspace link emulator built on the
//! `groupwire-link` models.
//!
//! # Model
//!
//! - [`Driver`] runs any [`groupwire_proto::Machine`] over a
//!   [`DatagramSocket`] (tokio's `UdpSocket`, [`BatchedUdpSocket`] for
//!   `recvmmsg` and GSO/GRO batching through `quinn-udp`, or a test
//!   double) in one select loop: datagrams in, the machine's deadline, and commands from
//!   the application ([`DriverHandle::command`], [`DriverHandle::call`]);
//!   transmits out to the socket and events out to a channel. A failed send
//!   or an ICMP-induced `ConnectionReset` is a lost datagram, counted in
//!   [`DriverStats`], never a reason to stop: the protocols above are built
//!   for loss.
//! - [`Clock`] is the one place that reads the time: it maps
//!   `tokio::time::Instant` to the machines' [`groupwire_proto::Instant`]
//!   (nanoseconds since the clock started), so tests with paused tokio time
//!   drive everything on virtual time.
//! - [`tunnel::Tunnel`] runs the tunnel's machine
//!   ([`groupwire_proto::tunnel::TunnelEndpoint`]) over its two sockets and
//!   returns a typed [`tunnel::TunnelReport`] (`groupwire tunnel`).
//! - [`rbudp`] moves files (any [`groupwire_proto::rbudp::BlastSource`])
//!   with Reliable Blast UDP: [`rbudp::send`] and [`rbudp::RbudpListener`]
//!   run the sans-IO RBUDP machines over a UDP socket and a TCP control
//!   connection (`groupwire bulk`).
//! - [`striped`] moves one payload over N parallel TCP connections (Leigh
//!   et al. §4.2, Park et al.), N and the socket buffers from the path's
//!   bandwidth-delay product ([`striped::plan`]), checked end to end with
//!   BLAKE3 ([`striped::send_file`], [`striped::StripedListener`]).
//! - [`bulk::BulkListener`] takes either on one port: it tells an RBUDP
//!   control connection from a striped stream by its first byte
//!   (`groupwire bulk recv --via auto`).
//! - [`session`] is the application's view: one [`session::Session`] per
//!   process, peers, and channels that declare a [`session::Qos`]; the
//!   strategy selector picks each channel's mechanism (Leigh et al. §2).
//! - [`Emulator`] forwards UDP between clients and a target through two
//!   seeded [`groupwire_link::Link`]s, the same models the simulator uses.
//!
//! ```no_run
//! use groupwire_proto::afec::{AfecConfig, AfecEndpoint};
//! use groupwire_proto::wire::afec::MsgType;
//! use groupwire_tokio::{Clock, Driver};
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await?;
//! let mut endpoint = AfecEndpoint::new(AfecConfig::new(1))?;
//! endpoint.add_peer("127.0.0.1:7400".parse()?);
//! let (driver, handle, mut events) = Driver::new(endpoint, socket, Clock::start())?;
//! let task = driver.spawn();
//! handle
//!     .command(|ep, now| {
//!         let _ = ep.send(now, MsgType::new(*b"TP"), bytes::Bytes::from_static(b"x=1,y=2"));
//!     })
//!     .await?;
//! drop(handle); // the driver stops when every handle is gone
//! let endpoint = task.await??;
//! println!("{:?}", endpoint.stats());
//! # let _ = events.try_recv();
//! # Ok(()) }
//! ```

#[cfg(unix)]
pub mod bulk;
mod clock;
mod driver;
pub mod emulator;
#[cfg(unix)]
pub mod file;
pub mod metrics_http;
pub mod rbudp;
mod send;
pub mod session;
#[cfg(target_os = "linux")]
pub mod shell;
mod socket;
#[cfg(unix)]
pub mod striped;
pub mod tunnel;

pub use clock::{Clock, wall_micros};
pub use driver::{Command, Driver, DriverClosed, DriverConfig, DriverHandle, DriverStats};
pub use emulator::{
    BufferSizes, CorruptPolicy, DEFAULT_SOCKET_BUFFER, DirectionStats, Emulator, EmulatorConfig,
    EmulatorError, EmulatorStats, RunningEmulator,
};
pub use metrics_http::{MetricsEndpoint, MetricsPublisher};
pub use send::{Deadline, sleep_until};
pub use socket::{BatchedUdpSocket, DatagramSocket, RecvBatch, is_transient};

/// Lower-case hex of `bytes` (the BLAKE3 hashes in the bulk transports'
/// reports).
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}
