//! What a channel needs, not how to get it: the vocabulary an application
//! declares per channel ([`Qos`]), after IETF TAPS (RFC 9622) where TAPS has
//! a word for it, with what TAPS lacks added.
//!
//! | here | RFC 9622 |
//! |---|---|
//! | [`Reliability::Full`] | `reliability` = Require (§6.2.1) |
//! | [`Reliability::BestEffort`] | `reliability` = Prohibit |
//! | [`Qos::preserve_order`] | `preserveOrder` (§6.2.4) |
//! | [`Qos::lifetime`] | `msgLifetime` (§9.1.3.1) |
//! | [`Qos::profile`] | `connCapacityProfile` (§8.1.6) |
//! | [`Reliability::Residual`], [`Reliability::MerBand`], [`Qos::max_delay`], [`Qos::rate`] | none: a residual-loss target, a loss band, a delay budget for recovery, a rate |
//!
//! TAPS's partial reliability is per message (`msgReliable`); a channel
//! here states instead how many messages it can lose after recovery
//! ([`Reliability::Residual`]) or, for awareness data (Dyck & Gutwin), the
//! band its message error rate should sit in ([`Reliability::MerBand`]):
//! a lower MER than the band's floor is wasted redundancy.
//!
//! A [`Qos`] also chooses the DiffServ code point of the channel's packets
//! ([`Qos::dscp`]), the QoS provisioner's part (Leigh et al. §2, "QoS
//! provisioning").

use std::fmt;
use std::time::Duration;

use crate::Bitrate;

/// How much of what is sent must arrive.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum Reliability {
    /// Every message, or the channel reports that it failed (TCP's promise).
    Full,
    /// At most this share of messages still lost after recovery, in
    /// `[0, 1)`: a residual-loss target.
    Residual(f64),
    /// Keep the message error rate (the share of messages lost) inside
    /// `[lo, hi]` (Dyck & Gutwin's per-type band): above `hi` add
    /// redundancy, below `lo` shed it.
    MerBand {
        /// Lower end, in `[0, hi]`.
        lo: f64,
        /// Upper end, in `[lo, 1)`.
        hi: f64,
    },
    /// Whatever the path delivers; no recovery.
    BestEffort,
}

impl Reliability {
    /// The most loss after recovery this asks for: 0 for [`Full`](Self::Full),
    /// the target, the band's top, 1 for best effort.
    pub fn max_loss(self) -> f64 {
        match self {
            Self::Full => 0.0,
            Self::Residual(p) => p,
            Self::MerBand { hi, .. } => hi,
            Self::BestEffort => 1.0,
        }
    }
}

/// RFC 9622 §8.1.6's capacity profile: what kind of traffic the channel
/// carries, which sets its DSCP ([`Qos::dscp`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum CapacityProfile {
    /// No preference (TAPS "Default").
    #[default]
    Default,
    /// Yield to everything else (TAPS "Scavenger").
    Scavenger,
    /// Interactive and latency-bound: awareness, telepointers, game state
    /// (TAPS "Low Latency/Interactive").
    Interactive,
    /// Latency-bound but not interactive (TAPS "Low Latency/Non-Interactive").
    NonInteractive,
    /// Media at a steady rate (TAPS "Constant-Rate Streaming").
    Streaming,
    /// Take what capacity there is: bulk transfer (TAPS "Capacity-Seeking").
    CapacitySeeking,
}

/// A DiffServ code point (RFC 2474): six bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Dscp(u8);

impl Dscp {
    /// Default forwarding (RFC 2474), `000000`.
    pub const DF: Self = Self(0);
    /// Lower effort (RFC 8622), `000001`.
    pub const LE: Self = Self(1);
    /// Assured forwarding class 1, low drop (RFC 2597): high-throughput data.
    pub const AF11: Self = Self(10);
    /// Assured forwarding class 2, low drop: low-latency data.
    pub const AF21: Self = Self(18);
    /// Assured forwarding class 4, low drop: multimedia conferencing.
    pub const AF41: Self = Self(34);
    /// Expedited forwarding (RFC 3246).
    pub const EF: Self = Self(46);

    /// A code point from its six bits; `None` above 63.
    pub const fn new(bits: u8) -> Option<Self> {
        if bits < 64 { Some(Self(bits)) } else { None }
    }

    /// The six bits.
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// The IP traffic-class byte that carries it (ECN bits zero): what
    /// `IP_TOS` / `IPV6_TCLASS` take.
    pub const fn tos(self) -> u8 {
        self.0 << 2
    }
}

/// What one channel needs. Build one from a preset and refine it:
///
/// ```
/// use std::time::Duration;
/// use groupwire_proto::Bitrate;
/// use groupwire_proto::session::Qos;
///
/// let pointer = Qos::awareness().mer_band(0.05, 0.06);
/// let video = Qos::stream()
///     .rate(Bitrate::mbps(25))
///     .max_residual_loss(0.001)
///     .max_delay(Duration::from_millis(50));
/// assert!(pointer.validate().is_ok() && video.validate().is_ok());
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Qos {
    /// How much must arrive.
    pub reliability: Reliability,
    /// Deliver in the order sent.
    pub preserve_order: bool,
    /// A message older than this is worth nothing: not sent, not
    /// delivered. `None`: forever.
    pub lifetime: Option<Duration>,
    /// The most recovery may add to a message's one-way delay: the wait
    /// for repairs or a retransmission. `None`: no bound.
    pub max_delay: Option<Duration>,
    /// The rate the application will send at, if it knows.
    pub rate: Option<Bitrate>,
    /// What kind of traffic this is.
    pub profile: CapacityProfile,
    /// Overrides the profile's code point; `Some(None)` leaves packets
    /// unmarked (for a network that re-marks or drops marked packets).
    pub dscp_override: Option<Option<Dscp>>,
}

/// Why a [`Qos`] is not usable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QosError(pub String);

impl fmt::Display for QosError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for QosError {}

/// Dyck & Gutwin's Table 1 lifetime for awareness data is not given; this
/// is G.114's planning bound, as [`crate::afec::DEFAULT_LIFETIME`].
const AWARENESS_LIFETIME: Duration = crate::afec::DEFAULT_LIFETIME;

impl Qos {
    /// A preset's base: no lifetime, delay bound, rate or code point
    /// override, which the application sets itself.
    const fn preset(
        reliability: Reliability,
        preserve_order: bool,
        profile: CapacityProfile,
    ) -> Self {
        Self {
            reliability,
            preserve_order,
            lifetime: None,
            max_delay: None,
            rate: None,
            profile,
            dscp_override: None,
        }
    }

    /// Awareness data (telepointers, view extents): loss tolerated inside
    /// a band (by default 1 to 2% MER), latency first, no order, a 400 ms
    /// lifetime. Dyck & Gutwin's traffic; EF.
    pub const fn awareness() -> Self {
        Self {
            lifetime: Some(AWARENESS_LIFETIME),
            ..Self::preset(
                Reliability::MerBand { lo: 0.01, hi: 0.02 },
                false,
                CapacityProfile::Interactive,
            )
        }
    }

    /// Small latency-bound messages (state updates, game input): best
    /// effort until [`max_loss`](Self::max_loss) says otherwise, no order,
    /// EF.
    pub const fn low_latency() -> Self {
        Self::preset(Reliability::BestEffort, false, CapacityProfile::Interactive)
    }

    /// Media at a steady rate: best effort until told a residual loss and
    /// a delay budget, AF41.
    pub const fn stream() -> Self {
        Self::preset(Reliability::BestEffort, false, CapacityProfile::Streaming)
    }

    /// Every message, in order (TAPS's reliable stream). DF.
    pub const fn reliable_ordered() -> Self {
        Self::preset(Reliability::Full, true, CapacityProfile::Default)
    }

    /// Large objects, every byte, as fast as the path allows; order within
    /// an object is the mechanism's business. AF11.
    pub const fn bulk() -> Self {
        Self::preset(Reliability::Full, false, CapacityProfile::CapacitySeeking)
    }

    /// Hold the message error rate in `[lo, hi]`.
    pub const fn mer_band(mut self, lo: f64, hi: f64) -> Self {
        self.reliability = Reliability::MerBand { lo, hi };
        self
    }

    /// At most this share of messages lost after recovery.
    pub const fn max_residual_loss(mut self, p: f64) -> Self {
        self.reliability = Reliability::Residual(p);
        self
    }

    /// Same as [`max_residual_loss`](Self::max_residual_loss).
    pub const fn max_loss(self, p: f64) -> Self {
        self.max_residual_loss(p)
    }

    /// Recovery may add at most `d` to a message's delay.
    pub const fn max_delay(mut self, d: Duration) -> Self {
        self.max_delay = Some(d);
        self
    }

    /// The application sends at about `rate`.
    pub const fn rate(mut self, rate: Bitrate) -> Self {
        self.rate = Some(rate);
        self
    }

    /// Messages older than `d` are dropped unsent and undelivered.
    pub const fn lifetime(mut self, d: Duration) -> Self {
        self.lifetime = Some(d);
        self
    }

    /// Deliver in order (or not).
    pub const fn ordered(mut self, yes: bool) -> Self {
        self.preserve_order = yes;
        self
    }

    /// Mark packets with `dscp` (or, with `None`, leave them unmarked),
    /// whatever the profile says.
    pub const fn dscp(mut self, dscp: Option<Dscp>) -> Self {
        self.dscp_override = Some(dscp);
        self
    }

    /// The code point for this channel's packets: the override if set,
    /// else the profile's class from RFC 4594 (§4: EF for interactive
    /// real-time, AF4x for multimedia conferencing, AF2x for low-latency
    /// data, AF1x for high-throughput data) and RFC 8622 (LE for
    /// scavenger).
    pub fn dscp_value(&self) -> Option<Dscp> {
        if let Some(o) = self.dscp_override {
            return o;
        }
        Some(match self.profile {
            CapacityProfile::Default => Dscp::DF,
            CapacityProfile::Scavenger => Dscp::LE,
            CapacityProfile::Interactive => Dscp::EF,
            CapacityProfile::NonInteractive => Dscp::AF21,
            CapacityProfile::Streaming => Dscp::AF41,
            CapacityProfile::CapacitySeeking => Dscp::AF11,
        })
    }

    /// Checks the numbers: probabilities in range, a band with `lo <= hi`,
    /// nonzero durations, and no lifetime shorter than the delay budget.
    pub fn validate(&self) -> Result<(), QosError> {
        let prob = |what: &str, p: f64| {
            if p.is_finite() && (0.0..1.0).contains(&p) {
                Ok(())
            } else {
                Err(QosError(format!("{what} must be in [0, 1), got {p}")))
            }
        };
        match self.reliability {
            Reliability::Residual(p) => prob("the residual loss", p)?,
            Reliability::MerBand { lo, hi } => {
                prob("the band's low end", lo)?;
                prob("the band's high end", hi)?;
                if lo > hi {
                    return Err(QosError(format!(
                        "the MER band's low end {lo} is above its high end {hi}"
                    )));
                }
            }
            Reliability::Full | Reliability::BestEffort => {}
        }
        if self.max_delay == Some(Duration::ZERO) {
            return Err(QosError(
                "a delay budget of 0 leaves no time to recover".into(),
            ));
        }
        if self.lifetime == Some(Duration::ZERO) {
            return Err(QosError("a lifetime of 0 drops every message".into()));
        }
        if let (Some(l), Some(d)) = (self.lifetime, self.max_delay)
            && l < d
        {
            return Err(QosError(format!(
                "the lifetime {l:?} is shorter than the delay budget {d:?}"
            )));
        }
        if self.rate == Some(Bitrate::bps(0)) {
            return Err(QosError("a rate of 0 sends nothing".into()));
        }
        if matches!(self.reliability, Reliability::Full) && self.lifetime.is_some() {
            return Err(QosError(
                "full reliability and a lifetime contradict: a late message would be both owed and worthless".into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_are_valid_and_marked_as_rfc_4594_says() {
        let cases = [
            (Qos::awareness(), Dscp::EF),
            (Qos::low_latency(), Dscp::EF),
            (Qos::stream(), Dscp::AF41),
            (Qos::reliable_ordered(), Dscp::DF),
            (Qos::bulk(), Dscp::AF11),
        ];
        for (q, d) in cases {
            assert_eq!(q.validate(), Ok(()), "{q:?}");
            assert_eq!(q.dscp_value(), Some(d));
        }
        assert_eq!(Dscp::EF.tos(), 0xb8);
        assert_eq!(Qos::bulk().dscp(None).dscp_value(), None);
        assert_eq!(Dscp::new(64), None);
    }

    #[test]
    fn bad_numbers_are_refused_with_a_reason() {
        let bad = [
            Qos::awareness().mer_band(0.06, 0.05),
            Qos::awareness().mer_band(-0.1, 0.05),
            Qos::stream().max_residual_loss(1.0),
            Qos::stream().max_residual_loss(f64::NAN),
            Qos::stream().max_delay(Duration::ZERO),
            Qos::stream()
                .max_delay(Duration::from_millis(50))
                .lifetime(Duration::from_millis(10)),
            Qos::reliable_ordered().lifetime(Duration::from_millis(10)),
            Qos::stream().rate(Bitrate::bps(0)),
        ];
        for q in bad {
            let e = q.validate().expect_err("refused");
            assert!(!e.0.is_empty());
        }
    }

    #[test]
    fn max_loss_reads_each_reliability() {
        assert_eq!(Reliability::Full.max_loss(), 0.0);
        assert_eq!(Reliability::Residual(0.01).max_loss(), 0.01);
        assert_eq!(Reliability::MerBand { lo: 0.05, hi: 0.06 }.max_loss(), 0.06);
        assert_eq!(Reliability::BestEffort.max_loss(), 1.0);
    }
}
