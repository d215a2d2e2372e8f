//! groupwire-relay: a Corona-style group communication relay.
pub mod frame;
pub mod storage;
