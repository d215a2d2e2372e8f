//! The transport mechanisms a channel can run on, with the parameters the
//! strategy selector picks for each.

use std::fmt;
use std::time::Duration;

use crate::xor::XorLayout;

/// One way to carry a channel's messages. Each names a design groupwire
/// implements; [`kind`](Self::kind) is its number on the wire.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum Mechanism {
    /// Datagrams as they are: no recovery, no overhead (Leigh et al.'s
    /// "UDP" for low latency when much loss is tolerated).
    Plain,
    /// Dyck & Gutwin's message AFEC: whole earlier messages piggybacked,
    /// the receiver holding the MER in `[lo, hi]` with NAK/INC feedback.
    Afec {
        /// Band's low end.
        lo: f64,
        /// Band's high end.
        hi: f64,
    },
    /// Leigh et al. §4.1's XOR parity over RTP, in SMPTE 2022-1's layouts.
    Xor(XorLayout),
    /// Reed-Solomon blocks with the controller that meets a residual-loss
    /// target within a delay budget at the least overhead (the tunnel's
    /// `--fec target`, beyond GENEVA).
    Block {
        /// Residual loss to meet.
        target: f64,
        /// Longest a rebuilt message may wait.
        max_delay: Duration,
    },
    /// A reliable, ordered byte stream (TCP): every message, in order,
    /// at the price of a retransmission round trip per loss.
    Reliable,
    /// Parallel TCP streams (Leigh et al. §4.3), for bulk on a long fat or
    /// lossy path: each message goes whole on one of `streams` connections
    /// (the one holding least unsent), so each connection's loss-driven
    /// window halves alone and the channel gets about `streams` times one
    /// connection's rate. Every message arrives once; an ordered channel's
    /// receiver puts them back in order, holding at most
    /// [`SessionConfig::reorder_limit`](super::SessionConfig::reorder_limit)
    /// messages behind a gap: a connection that stalls while the others
    /// deliver more than that many gives its gap up (the messages behind
    /// it go on, the stalled ones are dropped when they come, counted in
    /// [`SessionStats::skipped`](super::SessionStats::skipped)), so an
    /// ordered channel of small messages on a fast path wants a larger
    /// limit. The selector stripes only bulk, which is unordered.
    Striped {
        /// Number of connections, 1 to [`MAX_STREAMS`](crate::MAX_STREAMS).
        streams: u8,
    },
    /// Reliable Blast UDP (Leigh et al. §4.2), for bulk where bandwidth is
    /// reserved.
    Blast,
}

/// A [`Mechanism`]'s number on the wire and in reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum MechanismKind {
    /// [`Mechanism::Plain`].
    Plain = 0,
    /// [`Mechanism::Afec`].
    Afec = 1,
    /// [`Mechanism::Xor`].
    Xor = 2,
    /// [`Mechanism::Block`].
    Block = 3,
    /// [`Mechanism::Reliable`].
    Reliable = 4,
    /// [`Mechanism::Striped`].
    Striped = 5,
    /// [`Mechanism::Blast`].
    Blast = 6,
}

impl MechanismKind {
    /// Every kind, in wire order.
    pub const ALL: [Self; 7] = [
        Self::Plain,
        Self::Afec,
        Self::Xor,
        Self::Block,
        Self::Reliable,
        Self::Striped,
        Self::Blast,
    ];

    /// The kind with wire number `b`.
    pub fn from_u8(b: u8) -> Option<Self> {
        Self::ALL.get(usize::from(b)).copied()
    }

    /// A short lower-case name for tables and logs.
    pub fn name(self) -> &'static str {
        match self {
            Self::Plain => "plain",
            Self::Afec => "afec",
            Self::Xor => "xor",
            Self::Block => "block",
            Self::Reliable => "reliable",
            Self::Striped => "striped",
            Self::Blast => "blast",
        }
    }
}

impl Mechanism {
    /// Its wire number.
    pub fn kind(&self) -> MechanismKind {
        match self {
            Self::Plain => MechanismKind::Plain,
            Self::Afec { .. } => MechanismKind::Afec,
            Self::Xor(_) => MechanismKind::Xor,
            Self::Block { .. } => MechanismKind::Block,
            Self::Reliable => MechanismKind::Reliable,
            Self::Striped { .. } => MechanismKind::Striped,
            Self::Blast => MechanismKind::Blast,
        }
    }

    /// Whether it runs over a stream (TCP) rather than datagrams.
    pub fn is_stream(&self) -> bool {
        matches!(self, Self::Reliable | Self::Striped { .. })
    }
}

impl fmt::Display for MechanismKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

impl fmt::Display for Mechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Plain | Self::Reliable | Self::Blast => f.write_str(self.kind().name()),
            Self::Afec { lo, hi } => write!(f, "afec[{:.1}-{:.1}%]", lo * 100.0, hi * 100.0),
            Self::Xor(l) => write!(f, "{l}"),
            // Three significant digits and whole milliseconds: a target
            // the controller tightened, and a budget derived from a
            // lifetime and an RTT, have no round values.
            Self::Block { target, max_delay } => write!(
                f,
                "block[{}% in {}ms]",
                Sig3(target * 100.0),
                max_delay.as_millis()
            ),
            Self::Striped { streams } => write!(f, "striped:{streams}"),
        }
    }
}

/// A number to three significant digits, without trailing zeros
/// (`0.1`, `0.0206`, `5.5`, `12.3`).
struct Sig3(f64);

impl fmt::Display for Sig3 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let x = self.0;
        if !x.is_finite() || x == 0.0 {
            return write!(f, "{x}");
        }
        let digits = (2 - x.abs().log10().floor() as i32).clamp(0, 12) as usize;
        let s = format!("{x:.digits$}");
        let s = if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.')
        } else {
            &s
        };
        f.write_str(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_targets_show_three_significant_digits() {
        let b = |target: f64| Mechanism::Block {
            target,
            max_delay: Duration::from_millis(50),
        };
        assert_eq!(b(0.001).to_string(), "block[0.1% in 50ms]");
        assert_eq!(
            b(0.000_205_152_130_973).to_string(),
            "block[0.0205% in 50ms]"
        );
        assert_eq!(b(0.055).to_string(), "block[5.5% in 50ms]");
        assert_eq!(b(0.011_360_737).to_string(), "block[1.14% in 50ms]");
        assert_eq!(b(0.5).to_string(), "block[50% in 50ms]");
    }

    #[test]
    fn kinds_round_trip_their_wire_numbers() {
        for k in MechanismKind::ALL {
            assert_eq!(MechanismKind::from_u8(k as u8), Some(k));
        }
        assert_eq!(MechanismKind::from_u8(7), None);
        assert_eq!(
            Mechanism::Xor(XorLayout::row(3)).to_string(),
            "xor:3",
            "the XOR layout's own text form"
        );
    }
}
