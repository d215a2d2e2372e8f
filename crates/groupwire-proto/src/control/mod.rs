//! Redundancy and rate controllers for block FEC, behind one trait.
//!
//! A block-FEC sender ([`crate::block`]) asks its [`FecController`] how many
//! repair packets (`Fwnd`) to add to each block of `k` source packets, and
//! whether its sending rate is capped. The receiver's periodic SYN report
//! (GENEVA §3.2.1) is the controller's only input.
//!
//! | name on the command line | controller | source |
//! |---|---|---|
//! | `static-small` | [`StaticFec`] with `Fwnd = Fwnd_min = 8` | GENEVA §4.1 |
//! | `static-large` | [`StaticFec`] with `Fwnd = 1.5 × Fwnd_min = 12` | GENEVA §4.1 |
//! | `static:N` | [`StaticFec`] with `Fwnd = N` | |
//! | `gmiad` | [`gmiad::Gmiad`], the GENEVA window controller | GENEVA §3.2 |
//! | `dp-fec` | [`dpfec::DpFec`], dynamic probing FEC | GENEVA §5, ref. \[29\] |
//! | `tfrc` | no repair; sending rate capped by TFRC (RFC 5348) | GENEVA §2.2, §4.1 |
//! | `threshold` | [`switch::ThresholdFec`]: Miyoshi et al.'s reactive code switch over a ladder of windows | Miyoshi §4 |
//! | `predictive` | [`switch::PredictiveFec`]: an online Gilbert fit picking the window | beyond both papers |
//! | `target` | [`target::TargetFec`]: block length and window that meet a residual loss within a delay budget, from a fitted Gilbert chain | beyond both papers |
//!
//! Policies are small `on_*` traits picked by name, like quinn's
//! `congestion::Controller` and `ControllerFactory` (STYLE.md §3).

use core::fmt;
use core::str::FromStr;
use std::time::Duration;

use crate::time::Instant;
use crate::units::Bitrate;

pub mod dpfec;
pub mod gilbert;
pub mod gmiad;
pub mod ladder;
pub mod switch;
pub mod target;
pub mod tfrc;

/// What the sender learned from one receiver report (one SYN interval).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ReportSample {
    /// Packets (source and repair) the receiver found missing in the interval.
    pub lost: u32,
    /// Packets (source and repair) the receiver got in the interval.
    pub delivered: u32,
    /// Data packets the receiver gave up on (could not rebuild) since the
    /// previous report: the residual loss after FEC.
    pub unrecovered: u32,
    /// Sample RTT (`SRTT`, GENEVA §3.2.2) measured from this report's echo,
    /// if the echoed packet's send time was still known.
    pub rtt: Option<Duration>,
    /// The interval's loss runs, if the receiver reported them
    /// ([`crate::wire::block::FLAG_RUNS`]).
    pub runs: Option<crate::wire::block::LossRuns>,
    /// The sender's own source (application) packet rate lately, packets
    /// per second, if it has measured one.
    pub sources_per_sec: Option<f64>,
}

/// What a controller may need to know about the stream it controls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamShape {
    /// Source packets per block (`k`).
    pub k: usize,
    /// The report interval (`SYN`, GENEVA §3.2.1: 10 ms).
    pub syn: Duration,
}

/// Chooses FEC redundancy (and, for rate-controlled baselines, a rate cap)
/// from receiver reports.
pub trait FecController: fmt::Debug + Send {
    /// One receiver report arrived (reports that never arrive are never
    /// seen: a controller holds its state, GENEVA §3.2.1 footnote 2).
    fn on_report(&mut self, now: Instant, shape: StreamShape, report: &ReportSample);
    /// Repair packets for the next block (`Fwnd`).
    fn fwnd(&self) -> usize;
    /// Upper bound on the source data rate, if this controller limits it.
    fn rate_cap(&self) -> Option<Bitrate> {
        None
    }
    /// The controller's smoothed RTT, if it keeps one.
    fn rtt_estimate(&self) -> Option<Duration> {
        None
    }
    /// Its total window (`Wtot`, GENEVA eq. 1), if it keeps one.
    fn total_window(&self) -> Option<f64> {
        None
    }
    /// Source packets for the next block, if the controller chooses the
    /// block length (`None`: the sender's configured `k`). The sender asks
    /// when a block opens; the wire carries each block's `k` in its repair
    /// packets, so blocks of different lengths follow each other freely.
    fn block_k(&self) -> Option<usize> {
        None
    }
    /// Repair packets for a block closed early with `len` sources, if the
    /// controller sizes them itself (`None`: the sender scales `Fwnd` by
    /// `len / k`).
    fn short_block_repairs(&self, _len: usize) -> Option<usize> {
        None
    }
    /// How long a block may stay open, if the controller bounds it (the
    /// sender closes it then, or at its own configured wait if shorter).
    fn max_block_wait(&self) -> Option<Duration> {
        None
    }
    /// The target controller's view of its code, if this is one.
    fn target_status(&self) -> Option<target::TargetStatus> {
        None
    }
    /// A fit of the same path made elsewhere (the slow fit's counts, then
    /// the fast one's) that was not ready when this controller was built:
    /// the session's resource monitor, over every channel's packets. A
    /// controller that fits the loss process and started from its own
    /// built-in prior starts again from this one, once, and says so
    /// (`true`); one built with a prior, or already given one, keeps its
    /// counts. The default: ignored.
    fn late_prior(&mut self, _fits: [gilbert::RunCounts; 2]) -> bool {
        false
    }
}

/// A fixed number of repair packets per block: the paper's Static-FEC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StaticFec {
    /// Repair packets per block.
    pub fwnd: usize,
}

impl FecController for StaticFec {
    fn on_report(&mut self, _now: Instant, _shape: StreamShape, _report: &ReportSample) {}
    fn fwnd(&self) -> usize {
        self.fwnd
    }
}

/// A controller chosen by name; [`ControllerKind::build`] makes it.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum ControllerKind {
    /// `Fwnd` fixed at this value.
    Static(usize),
    /// Static-FEC with `Fwnd = Fwnd_min` (GENEVA §4.1 "small").
    StaticSmall,
    /// Static-FEC with `Fwnd = 1.5 × Fwnd_min` (GENEVA §4.1 "large").
    StaticLarge,
    /// GENEVA's GMIAD window controller.
    Gmiad,
    /// Dynamic probing FEC (GENEVA's ref. \[29\]).
    DpFec,
    /// No FEC; source rate limited by TFRC.
    Tfrc,
    /// Miyoshi et al.'s threshold switch over a ladder of windows.
    Threshold,
    /// The predictive switch over a ladder of windows.
    Predictive,
    /// Block length and window chosen to meet a residual loss within a
    /// delay budget ([`target::TargetFec`]).
    Target,
}

impl ControllerKind {
    /// Every named controller of the paper's comparison, in its table order.
    pub const PAPER: [Self; 5] = [
        Self::Gmiad,
        Self::StaticSmall,
        Self::StaticLarge,
        Self::DpFec,
        Self::Tfrc,
    ];

    /// The named controller's configuration with the paper's defaults
    /// (`fwnd_min` for the static sizes comes from
    /// [`gmiad::GmiadConfig::default`]).
    pub fn config(self) -> FecConfig {
        let fmin = gmiad::GmiadConfig::default().fwnd_min;
        match self {
            Self::Static(n) => FecConfig::Static(StaticFec { fwnd: n }),
            Self::StaticSmall => FecConfig::Static(StaticFec { fwnd: fmin }),
            // 1.5 × 8 = 12, as in Table 1.
            Self::StaticLarge => FecConfig::Static(StaticFec {
                fwnd: fmin + fmin / 2,
            }),
            Self::Gmiad => FecConfig::Gmiad(gmiad::GmiadConfig::default()),
            Self::DpFec => FecConfig::DpFec(dpfec::DpFecConfig::default()),
            Self::Tfrc => FecConfig::Tfrc,
            Self::Threshold => FecConfig::Threshold(switch::ThresholdFecConfig::default()),
            Self::Predictive => FecConfig::Predictive(switch::PredictiveFecConfig::default()),
            Self::Target => FecConfig::Target(target::TargetConfig::default()),
        }
    }

    /// Builds the controller with the paper's defaults.
    pub fn build(self) -> Box<dyn FecController> {
        self.config().build()
    }

    /// Whether the sender must run TFRC to cap its rate.
    pub fn is_rate_controlled(self) -> bool {
        matches!(self, Self::Tfrc)
    }
}

/// Makes a fresh [`FecController`] for each stream: a controller's
/// configuration is its own factory, as quinn's `CubicConfig` is a
/// `ControllerFactory`, so a sender (or the tunnel, which builds one per
/// peer) never needs to know which controller it runs.
pub trait FecControllerFactory: fmt::Debug + Send + Sync {
    /// A controller in its initial state.
    fn build(&self) -> Box<dyn FecController>;
}

impl FecControllerFactory for StaticFec {
    fn build(&self) -> Box<dyn FecController> {
        Box::new(*self)
    }
}

impl FecControllerFactory for gmiad::GmiadConfig {
    fn build(&self) -> Box<dyn FecController> {
        Box::new(gmiad::Gmiad::new(*self))
    }
}

impl FecControllerFactory for dpfec::DpFecConfig {
    fn build(&self) -> Box<dyn FecController> {
        Box::new(dpfec::DpFec::new(*self))
    }
}

/// A sender's controller with its configuration: one of the controllers
/// groupwire ships. [`ControllerKind`] parses the names on the command line
/// into one of these with the paper's defaults; a caller tunes a field (say
/// GMIAD's window bounds) on the value, not beside it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum FecConfig {
    /// A fixed `Fwnd` (Static-FEC).
    Static(StaticFec),
    /// GENEVA's GMIAD (§3.2).
    Gmiad(gmiad::GmiadConfig),
    /// Dynamic probing FEC (GENEVA's ref. \[29\]).
    DpFec(dpfec::DpFecConfig),
    /// No repair; the source rate capped by TFRC (RFC 5348), which the
    /// sender runs itself.
    Tfrc,
    /// Miyoshi et al.'s threshold switch over a ladder of windows.
    Threshold(switch::ThresholdFecConfig),
    /// The predictive switch over a ladder of windows.
    Predictive(switch::PredictiveFecConfig),
    /// A residual loss within a delay budget at the least overhead.
    Target(target::TargetConfig),
}

impl FecConfig {
    /// Whether the sender must run TFRC to cap its rate.
    pub fn is_rate_controlled(&self) -> bool {
        matches!(self, Self::Tfrc)
    }

    /// The largest window the controller may choose, to tune, if it has
    /// one (GMIAD and the two switches).
    pub fn fwnd_max_mut(&mut self) -> Option<&mut usize> {
        match self {
            Self::Gmiad(g) => Some(&mut g.fwnd_max),
            Self::Threshold(c) => Some(&mut c.fwnd_max),
            Self::Predictive(c) => Some(&mut c.fwnd_max),
            _ => None,
        }
    }

    /// GMIAD's constants, to tune, if this is GMIAD.
    pub fn gmiad_mut(&mut self) -> Option<&mut gmiad::GmiadConfig> {
        match self {
            Self::Gmiad(g) => Some(g),
            _ => None,
        }
    }

    /// The target controller's goal and budget, to tune, if this is it.
    pub fn target_mut(&mut self) -> Option<&mut target::TargetConfig> {
        match self {
            Self::Target(t) => Some(t),
            _ => None,
        }
    }

    /// Whether the controller chooses the block length itself (so the
    /// sender's `k` is only its starting point).
    pub fn chooses_k(&self) -> bool {
        matches!(self, Self::Target(_))
    }
}

impl Default for FecConfig {
    /// GMIAD with the paper's constants.
    fn default() -> Self {
        Self::Gmiad(gmiad::GmiadConfig::default())
    }
}

impl From<ControllerKind> for FecConfig {
    fn from(kind: ControllerKind) -> Self {
        kind.config()
    }
}

impl FecControllerFactory for FecConfig {
    fn build(&self) -> Box<dyn FecController> {
        match self {
            Self::Static(c) => c.build(),
            Self::Gmiad(c) => c.build(),
            Self::DpFec(c) => c.build(),
            Self::Tfrc => StaticFec { fwnd: 0 }.build(),
            Self::Threshold(c) => c.build(),
            Self::Predictive(c) => c.build(),
            Self::Target(c) => c.build(),
        }
    }
}

impl fmt::Display for FecConfig {
    /// The controller's name as [`ControllerKind`] prints it (`static:N`
    /// for a fixed window, whatever name chose it).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Static(c) => write!(f, "static:{}", c.fwnd),
            Self::Gmiad(_) => f.write_str("gmiad"),
            Self::DpFec(_) => f.write_str("dp-fec"),
            Self::Tfrc => f.write_str("tfrc"),
            Self::Threshold(_) => f.write_str("threshold"),
            Self::Predictive(_) => f.write_str("predictive"),
            Self::Target(_) => f.write_str("target"),
        }
    }
}

impl fmt::Display for ControllerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Static(n) => write!(f, "static:{n}"),
            Self::StaticSmall => f.write_str("static-small"),
            Self::StaticLarge => f.write_str("static-large"),
            Self::Gmiad => f.write_str("gmiad"),
            Self::DpFec => f.write_str("dp-fec"),
            Self::Tfrc => f.write_str("tfrc"),
            Self::Threshold => f.write_str("threshold"),
            Self::Predictive => f.write_str("predictive"),
            Self::Target => f.write_str("target"),
        }
    }
}

impl FromStr for ControllerKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim().to_ascii_lowercase();
        Ok(match t.as_str() {
            "static-small" | "small" => Self::StaticSmall,
            "static-large" | "large" => Self::StaticLarge,
            "gmiad" | "geneva" => Self::Gmiad,
            "dp-fec" | "dpfec" => Self::DpFec,
            "tfrc" => Self::Tfrc,
            "threshold" | "miyoshi" => Self::Threshold,
            "predictive" => Self::Predictive,
            "target" => Self::Target,
            other => match other.strip_prefix("static:").map(str::parse::<usize>) {
                Some(Ok(n)) if n <= 254 => Self::Static(n),
                _ => {
                    return Err(format!(
                        "{s:?}: expected gmiad, static-small, static-large, static:N \
                         (N from 0 to 254), dp-fec, tfrc, threshold, predictive or target"
                    ));
                }
            },
        })
    }
}

impl serde::Serialize for ControllerKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for ControllerKind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for k in ControllerKind::PAPER.into_iter().chain([
            ControllerKind::Static(3),
            ControllerKind::Threshold,
            ControllerKind::Predictive,
            ControllerKind::Target,
        ]) {
            assert_eq!(k.to_string().parse::<ControllerKind>(), Ok(k));
        }
        assert!("static:255".parse::<ControllerKind>().is_err());
        assert!("fast".parse::<ControllerKind>().is_err());
    }

    #[test]
    fn static_sizes_are_the_papers() {
        assert_eq!(ControllerKind::StaticSmall.build().fwnd(), 8);
        assert_eq!(ControllerKind::StaticLarge.build().fwnd(), 12);
        assert_eq!(ControllerKind::Tfrc.build().fwnd(), 0);
    }
}
