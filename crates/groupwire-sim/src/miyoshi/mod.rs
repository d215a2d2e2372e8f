//! Miyoshi et al., "Adaptive FEC with ELN for TCP over bursty wireless
//! links": the pieces of their evaluation that are not TCP.
//!
//! - [`frames`]: §5's packet-level experiment (Figure 6, Tables 3 and 4):
//!   800-bit frames through the Gilbert channel of Table 2, with no FEC,
//!   each fixed BCH code, and the adaptive code switch, simulated and
//!   computed from the chain.
//!
//! The BCH codes are [`groupwire_codec::Bch`]; the channel presets are
//! [`groupwire_link::loss::LossModel::miyoshi_lower`] and
//! [`groupwire_link::loss::LossModel::miyoshi_higher`]; the code switch is
//! [`groupwire_proto::control::ladder`].

pub mod frames;
pub mod station;
pub mod wireless;
