//! Sans-IO, seeded, deterministic network impairment models, shared by the
//! simulator (`groupwire-sim`) and the real-socket link emulator
//! (`groupwire-tokio`).
//!
//! # Model
//!
//! A [`Link`] is one direction of a link. A packet offered at time `now`:
//!
//! 1. joins a FIFO **drop-tail queue** served at the link's **bit rate**; if
//!    the queue (the packets not yet fully serialized, the one in service
//!    included) is full, it is dropped ([`Fate::QueueDrop`]). Or, under a
//!    classful **queueing discipline** ([`Qdisc`]: strict priority, DRR,
//!    WFQ), joins the queue of its DiffServ class ([`Dscp`]), each with its
//!    own limit, and waits for the scheduler ([`qdisc`]);
//! 2. is **serialized**: it departs at `max(now, previous departure) +
//!    8 len / rate` (FIFO), or when the scheduler picks it and the packet
//!    ahead has finished;
//! 3. meets the **loss process** ([`LossModel`]): lost ([`Fate::Lost`]),
//!    corrupted by bit errors ([`Fate::Corrupt`]) or delivered;
//! 4. arrives after the **propagation delay** plus uniform **jitter**,
//!    never before the packet ahead of it unless reordering is allowed
//!    ([`Fate::Deliver`]).
//!
//! Nothing here reads a clock, sleeps or touches a socket: the caller passes
//! `now` and schedules the arrival itself. All randomness comes from a
//! ChaCha8 generator seeded from [`LinkConfig::seed`], so a seed replays the
//! same fates. [`LossProcess`] can also be used alone with any RNG.
//!
//! The loss models and their analytic figures (long-run loss rate, mean
//! burst length, burst-length distribution) are in [`loss`]; [`stats`]
//! measures the same figures on a sequence of outcomes.
//!
//! ```
//! use std::time::Duration;
//! use groupwire_link::{Fate, LinkConfig, LossModel, QueueLimit};
//! use groupwire_units::{Bitrate, Instant};
//!
//! let mut link = LinkConfig::dialup_56k()
//!     .loss(LossModel::dyck_burst(0.04, 5))
//!     .queue(QueueLimit::Packets(20))
//!     .seed(1)
//!     .build()
//!     .expect("valid config");
//! match link.offer(Instant::ZERO, 100) {
//!     Fate::Deliver { at } => assert!(at >= Instant::from_millis(60)),
//!     Fate::Corrupt { .. } | Fate::Lost | Fate::QueueDrop => {}
//! }
//! ```

pub mod link;
pub mod loss;
pub mod qdisc;
pub mod schedule;
pub mod stats;

pub use link::{Admission, Departure, Fate, Jitter, Link, LinkConfig, LinkStats, QueueLimit};
pub use loss::{BitErrors, LossError, LossModel, LossProcess, LossTrace, PacketFate};
pub use qdisc::{ClassConfig, ClassStats, Classes, Dscp, Qdisc, QdiscError};
pub use schedule::{Schedule, ScheduleError, ScheduleValue, Segment, Varying};
pub use stats::LossStats;
