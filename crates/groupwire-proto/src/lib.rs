//! groupwire's protocol core: time, units, wire formats and sans-IO machines.
//!
//! Nothing here does I/O, reads a clock or spawns a thread. A driver (the
//! simulator in `groupwire-sim`, or the tokio driver) owns the sockets and
//! the clock and runs a [`Machine`] like this:
//!
//! ```no_run
//! use groupwire_proto::{Instant, Machine, Transmit};
//! # fn send(_: Transmit) {}
//! # fn recv() -> Option<(std::net::SocketAddr, Vec<u8>)> { None }
//! # fn now() -> Instant { Instant::ZERO }
//! fn run<M: Machine>(machine: &mut M, mut on_event: impl FnMut(M::Event)) {
//!     loop {
//!         while let Some(t) = machine.poll_transmit(now()) {
//!             send(t);
//!         }
//!         while let Some(e) = machine.poll_event() {
//!             on_event(e);
//!         }
//!         let _deadline = machine.poll_timeout();
//!         // wait for a datagram or the deadline, whichever comes first
//!         match recv() {
//!             Some((src, data)) => machine.handle_datagram(now(), src, &data),
//!             None => machine.handle_timeout(now()),
//!         }
//!     }
//! }
//! ```
//!
//! **After every `handle_*` call or command: drain `poll_transmit` until
//! `None`, drain `poll_event` until `None`, then re-read `poll_timeout`.**

pub mod afec;
pub mod block;
pub mod control;
pub mod machine;
pub mod rbudp;
pub mod session;
pub mod sliding;
pub mod tunnel;
pub mod wire;
pub mod xor;

pub use groupwire_units::{Bitrate, DataSize, Instant, Probability, UnitError};
/// The ground floor, re-exported: [`groupwire_units`] holds the clock's
/// instant and the unit newtypes so the link models need not depend on
/// this crate.
pub use groupwire_units::{time, units};
pub use machine::{FRAME_PREFIX, MAX_STREAMS, Machine, StreamMachine, Transmit, Transport};
