//! One session to a peer, many channels, each declaring what it needs
//! (Leigh et al. §2's framework; ARCHITECTURE.md, "The application's
//! view").
//!
//! - [`qos`]: what a channel needs ([`Qos`]), after RFC 9622.
//! - [`mechanism`]: the ways groupwire can carry it ([`Mechanism`]).
//! - [`path`]: what the resource monitor knows of the path ([`PathEstimate`]).
//! - [`monitor`]: the resource monitor itself ([`ReceiveMonitor`],
//!   [`MonitorReport`], [`SendMonitor`]).

pub mod mechanism;
pub mod monitor;
pub mod path;
pub mod qos;

pub use mechanism::{Mechanism, MechanismKind};
pub use monitor::{
    MonitorConfig, MonitorReport, ReceiveMonitor, ReceiveStats, ReportError, SendMonitor, SendStats,
};
pub use path::PathEstimate;
pub use qos::{CapacityProfile, Dscp, Qos, QosError, Reliability};
