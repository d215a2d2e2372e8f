//! One session to a peer, many channels, each declaring what it needs
//! (Leigh et al. §2's framework; ARCHITECTURE.md, "The application's
//! view").
//!
//! - [`qos`]: what a channel needs ([`Qos`]), after RFC 9622.
//! - [`mechanism`]: the ways groupwire can carry it ([`Mechanism`]).
//! - [`path`]: what the resource monitor knows of the path ([`PathEstimate`]).
//! - [`select`](mod@select): the strategy selector and adaptive controller: which
//!   mechanism carries a channel, and when to change it.
//! - [`wire`]: the session's datagrams and stream frames.
//! - [`endpoint`]: the machine ([`Session`]): peers, handshakes, channels,
//!   mechanism switches.
//! - [`blast`]: Reliable Blast UDP as a channel's mechanism.
//! - [`monitor`]: the resource monitor itself ([`ReceiveMonitor`],
//!   [`MonitorReport`], [`SendMonitor`]).

pub mod blast;
mod channel;
pub mod endpoint;
pub mod mechanism;
pub mod monitor;
pub mod path;
pub mod qos;
pub mod select;
#[cfg(test)]
mod tests;
pub mod wire;

pub use channel::{DEFAULT_BLAST_RATE, MSG_PREFIX};
pub use endpoint::{
    ChannelId, ChannelStats, DEFAULT_STREAM_WINDOW, PeerId, Session, SessionConfig, SessionError,
    SessionEvent, SessionStats, initial_mechanism,
};
pub use mechanism::{Mechanism, MechanismKind};
pub use monitor::{
    MonitorConfig, MonitorReport, ReceiveMonitor, ReceiveStats, ReportError, SendMonitor, SendStats,
};
pub use path::PathEstimate;
pub use qos::{CapacityProfile, Dscp, Qos, QosError, Reliability};
pub use select::{
    AdaptiveController, ControllerConfig, Measured, Policy, Prediction, Provision, Selection,
    Switch, Traffic, predict, select,
};
