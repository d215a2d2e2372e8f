//! groupwire's ground floor: the types every other crate counts in.
//!
//! [`Instant`] is a point on a driver's clock (simulated or real) in
//! nanoseconds; [`Bitrate`], [`DataSize`] and [`Probability`] are the
//! domain's numbers, each parsed from what a person types (`56kbit/s`,
//! `64KiB`, `10%`); [`units::IP_UDP_OVERHEAD`] and
//! [`units::MAX_UDP_PAYLOAD`] are the UDP size constants; [`duration`] is
//! the one grammar for durations (`10ms`, `1.5s`) in files and on flags.
//!
//! This crate sits below both `groupwire-link` (the impairment models) and
//! `groupwire-proto` (the protocol machines), so neither floor depends on the
//! other. `groupwire-proto` re-exports all of it under the same paths
//! (`groupwire_proto::Instant`, `groupwire_proto::units::...`).

pub mod duration;
pub mod time;
pub mod units;

pub use time::Instant;
pub use units::{Bitrate, DataSize, Probability, UnitError};
