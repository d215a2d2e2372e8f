//! groupwire's deterministic discrete-event simulator.
//!
//! # Model
//!
//! - A [`Simulator`] holds a binary heap of
//!   `(time, sequence, event)`; the sequence number breaks ties, so two
//!   runs with the same seed execute events in the same order and produce
//!   the same bytes.
//! - **Nodes** ([`Node`]) are hosts: a TCP endpoint, a traffic
//!   source, a sink, or an adapter around a sans-IO
//!   [`Machine`](groupwire_proto::Machine) from `groupwire-proto` (with a
//!   TCP control stream for a [`StreamMachine`](groupwire_proto::StreamMachine):
//!   [`stream_node`]). A node
//!   reacts to packets and to its own deadline, and sends packets through a
//!   [`Ctx`].
//! - **Links** are `groupwire-link` models (rate, delay, jitter, drop-tail
//!   queue, loss process), one per direction. A packet follows a static
//!   route, a list of links; routers are implicit.
//! - **Topologies** ([`topology`]) build the links and routes: a
//!   point-to-point path and a dumbbell.
//! - **Experiments** ([`scenario`]) are data: a struct that also reads from
//!   TOML, so `groupwire sim run my.toml` runs a user's own scenario.
//!
//! Randomness comes only from seeded RNGs: each link and each node gets its
//! own stream derived from the scenario seed, so adding a node does not
//! change the random numbers another node sees.

pub mod blockfec;
pub mod core;
pub mod machine_node;
pub mod metrics;
pub mod miyoshi;
pub mod rng;
pub mod scenario;
pub mod stream_node;
pub mod sweep;
pub mod tcp;
pub mod tcpnode;
pub mod topology;
pub mod traffic;

pub use crate::core::{Ctx, Node, NodeId, Packet, Payload, Simulator};
