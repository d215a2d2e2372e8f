//! groupwire for applications: open one [`Session`], connect to peers,
//! and open [`Channel`]s that say what their data needs ([`Qos`]), not how
//! to carry it. The strategy selector picks each channel's mechanism
//! (plain datagrams, message-level adaptive FEC, XOR parity, block FEC,
//! reliable ordered) from what the resource monitor measures of the path,
//! and the adaptive controller moves a channel when the path changes,
//! without losing or duplicating a message (Leigh et al. §2 and §5).
//!
//! ```no_run
//! use groupwire::{Bitrate, Event, Qos, Session, ms};
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let session = Session::bind("0.0.0.0:7400").await?;
//! let peer = session.connect("203.0.113.7:7400".parse()?).await?;
//! let pointer = peer.channel("telepointer", Qos::awareness().mer_band(0.05, 0.06))?;
//! let state = peer.channel("state", Qos::low_latency().max_loss(0.001))?;
//! let video = peer.channel(
//!     "camera",
//!     Qos::stream().rate(Bitrate::mbps(25)).max_residual_loss(0.001).max_delay(ms(50)),
//! )?;
//! let edits = peer.channel("edits", Qos::reliable_ordered())?;
//! pointer.send(b"x=10,y=20")?; // never blocks on loss recovery
//! while let Some(ev) = session.next_event().await {
//!     match ev {
//!         Event::Message { channel, payload, via, .. } => println!("{channel:?} via {via}: {payload:?}"),
//!         Event::MechanismChanged { channel, from, to } => println!("{channel:?}: {from} -> {to}"),
//!         Event::QosMet { channel, met } => println!("{channel:?}: QoS met {met}"),
//!         _ => {}
//!     }
//! }
//! # let _ = (state, video, edits);
//! # Ok(()) }
//! ```
//!
//! Two applications that know a relay and a group name, not each other's
//! address, meet through it: [`rendezvous::meet`] instead of `connect`.
//!
//! Runnable examples are in the repository's `examples/` (`cargo run -p
//! groupwire --example telepointer`). What runs underneath, and what is
//! not done yet, is in [`groupwire_tokio::session`]; the machine itself
//! (sans-IO, for a simulator or another runtime) is
//! [`groupwire_proto::session`].

pub mod rendezvous;

pub use groupwire_proto::Instant;
/// XOR parity layouts, for [`Channel::set_mechanism`].
pub use groupwire_proto::xor::XorLayout;
pub use groupwire_tokio::session::{
    Bitrate, Channel, ChannelId, ChannelReport, ChannelStats, Cipher, ConnectError, Event,
    FileError, FileEvent, FileReceiver, FileSent, Mechanism, MechanismKind, PathEstimate, Peer,
    PeerId, Qos, Reliability, SendError, Session, SessionConfig, SessionError, SessionOptions,
    SessionStats, StreamStats,
};

/// `n` milliseconds, for delay budgets.
pub const fn ms(n: u64) -> std::time::Duration {
    std::time::Duration::from_millis(n)
}
