//! groupwire-relay: a Corona-style group communication relay
//! (Litiu & Prakash, "Adaptive Group Communication Services for Groupware
//! Systems").
//!
//! - [`frame`]: the wire format (documented in `docs/relay-protocol.md`);
//! - [`core`]: the sans-IO protocol core (groups, members, roles, total
//!   order, state transfer, checkpoints, locks);
//! - [`sched`]: the priority scheduler of §4 (group and member priorities,
//!   per-(member, group) queues, burst demotion, aging, slow consumers);
//! - [`storage`]: the store behind a trait (SQLite by default, in memory for
//!   tests);
//! - [`auth`]: tokens (JWT HS256, key ids for rotation, an expiry) with
//!   group, role and priority limits;
//! - [`server`]: the tokio driver, [`client`]: the client library (both
//!   over TCP and WebSocket, each plain or inside TLS: [`tls`]).
pub mod auth;
pub mod bench;
pub mod client;
pub mod core;
pub mod frame;
pub mod priority;
pub mod sched;
pub mod server;
pub mod storage;
pub mod tls;

pub use client::{ClientError, ClientEvent, ClientOptions, JoinInfo, PlaintextToken, RelayClient};
pub use core::{CoreConfig, RelayStats};
pub use sched::{SchedulerConfig, SlowConsumerPolicy};
pub use server::{RelayHandle, ServerConfig, StorageConfig};
