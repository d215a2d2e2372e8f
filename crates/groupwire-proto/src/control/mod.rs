//! Rate and congestion controllers, as pure sans-IO state machines.
pub mod tfrc;
