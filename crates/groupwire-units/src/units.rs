//! Newtypes for the domain's numbers: [`Bitrate`], [`DataSize`], [`Probability`];
//! and the UDP size constants [`IP_UDP_OVERHEAD`] and [`MAX_UDP_PAYLOAD`].
//!
//! Each parses from the short forms a person types on a command line
//! (`56kbit/s`, `1Gbps`, `1500B`, `64KiB`, `0.1`, `10%`) and rejects
//! impossible values (a negative rate, a probability of 1.5) with an error
//! that names the problem.

use core::fmt;
use core::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Header bytes a UDP datagram costs on an IPv4 link beyond its payload:
/// the IPv4 header without options (20, RFC 791) and the UDP header (8,
/// RFC 768). Everything in groupwire that counts wire bytes (rate caps,
/// TFRC's packet size, link overhead, the simulator's links) counts these.
pub const IP_UDP_OVERHEAD: usize = 28;

/// The largest UDP payload over IPv4: 65535 − 20 − 8 bytes (RFC 768's
/// length field, less the IPv4 and UDP headers). Also the most one GSO send
/// may carry in all.
pub const MAX_UDP_PAYLOAD: usize = 65_535 - IP_UDP_OVERHEAD;

/// Why a unit string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UnitError {
    /// The text is not a number with a known suffix.
    #[error("cannot read {what} from {text:?}: {hint}")]
    Syntax {
        /// What was being parsed ("bit rate", ...).
        what: &'static str,
        /// The offending text.
        text: String,
        /// What a valid value looks like.
        hint: &'static str,
    },
    /// The number parsed but is outside the allowed range.
    #[error("{what} {text:?} is out of range: {hint}")]
    Range {
        /// What was being parsed.
        what: &'static str,
        /// The offending text.
        text: String,
        /// The allowed range.
        hint: &'static str,
    },
}

/// A bit rate in bits per second. Zero is not a valid link rate; use
/// `Option<Bitrate>` for "unlimited".
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "NumberOrText", into = "String")]
pub struct Bitrate(u64);

impl Bitrate {
    /// `bps` bits per second.
    pub const fn bps(bps: u64) -> Self {
        Self(bps)
    }
    /// `k` kilobits (10^3) per second.
    pub const fn kbps(k: u64) -> Self {
        Self(k * 1_000)
    }
    /// `m` megabits (10^6) per second.
    pub const fn mbps(m: u64) -> Self {
        Self(m * 1_000_000)
    }
    /// `g` gigabits (10^9) per second.
    pub const fn gbps(g: u64) -> Self {
        Self(g * 1_000_000_000)
    }
    /// Bits per second.
    pub const fn as_bps(self) -> u64 {
        self.0
    }
    /// Time to serialize `bytes` at this rate, rounded up to the nanosecond.
    /// A zero rate gives `Duration::MAX`.
    pub fn transmit_time(self, bytes: u64) -> Duration {
        if self.0 == 0 {
            return Duration::MAX;
        }
        let nanos = (u128::from(bytes) * 8 * 1_000_000_000).div_ceil(u128::from(self.0));
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }
    /// Bytes carried in `d` at this rate (bandwidth-delay product), rounded down.
    pub fn bytes_in(self, d: Duration) -> u64 {
        let bytes = u128::from(self.0) * d.as_nanos() / 8 / 1_000_000_000;
        u64::try_from(bytes).unwrap_or(u64::MAX)
    }
}

impl fmt::Display for Bitrate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        if b >= 1_000_000_000 && b % 1_000_000 == 0 {
            write_scaled(f, b, 1_000_000_000, "Gbit/s")
        } else if b >= 1_000_000 && b % 1_000 == 0 {
            write_scaled(f, b, 1_000_000, "Mbit/s")
        } else if b >= 1_000 {
            write_scaled(f, b, 1_000, "kbit/s")
        } else {
            write!(f, "{b}bit/s")
        }
    }
}

fn write_scaled(f: &mut fmt::Formatter<'_>, v: u64, unit: u64, suffix: &str) -> fmt::Result {
    if v % unit == 0 {
        write!(f, "{}{suffix}", v / unit)
    } else {
        write!(f, "{}{suffix}", v as f64 / unit as f64)
    }
}

impl FromStr for Bitrate {
    type Err = UnitError;
    /// Accepts `56kbit/s`, `56kbps`, `56k`, `100Mbit/s`, `1G`, `1.5Mbps`, `9600`
    /// (bits per second). Decimal prefixes (k = 1000).
    fn from_str(s: &str) -> Result<Self, UnitError> {
        const WHAT: &str = "bit rate";
        const HINT: &str =
            "expected a positive number with an optional k/M/G prefix, e.g. 56kbit/s, 100Mbps, 1G";
        let syntax = || UnitError::Syntax {
            what: WHAT,
            text: s.to_owned(),
            hint: HINT,
        };
        let t = s.trim();
        let t = ["bit/s", "bps", "b/s"]
            .iter()
            .find_map(|suf| t.strip_suffix(suf))
            .unwrap_or(t);
        let (num, mult) = split_prefix(
            t,
            &[("k", 1e3), ("K", 1e3), ("M", 1e6), ("G", 1e9), ("T", 1e12)],
        );
        let v: f64 = num.trim().parse().map_err(|_| syntax())?;
        let bps = v * mult;
        if !bps.is_finite() || !(1.0..=1e15).contains(&bps) {
            return Err(UnitError::Range {
                what: WHAT,
                text: s.to_owned(),
                hint: "a rate must be between 1 bit/s and 1 Pbit/s",
            });
        }
        Ok(Self(bps.round() as u64))
    }
}

impl TryFrom<NumberOrText> for Bitrate {
    type Error = UnitError;
    /// A bare number is bits per second; text takes the [`FromStr`] forms.
    fn try_from(v: NumberOrText) -> Result<Self, UnitError> {
        v.into_text().parse()
    }
}

impl From<Bitrate> for String {
    fn from(b: Bitrate) -> String {
        b.to_string()
    }
}

/// An amount of data in bytes.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(try_from = "NumberOrText", into = "String")]
pub struct DataSize(u64);

impl DataSize {
    /// `b` bytes.
    pub const fn bytes(b: u64) -> Self {
        Self(b)
    }
    /// `k` kibibytes.
    pub const fn kib(k: u64) -> Self {
        Self(k * 1024)
    }
    /// `m` mebibytes.
    pub const fn mib(m: u64) -> Self {
        Self(m * 1024 * 1024)
    }
    /// The size in bytes.
    pub const fn as_bytes(self) -> u64 {
        self.0
    }
}

impl fmt::Display for DataSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        if b >= 1 << 20 && b % (1 << 20) == 0 {
            write!(f, "{}MiB", b >> 20)
        } else if b >= 1 << 10 && b % (1 << 10) == 0 {
            write!(f, "{}KiB", b >> 10)
        } else {
            write!(f, "{b}B")
        }
    }
}

impl FromStr for DataSize {
    type Err = UnitError;
    /// Accepts `1500`, `1500B`, `64KiB`, `64KB` (= 64000), `1MiB`, `2MB`.
    fn from_str(s: &str) -> Result<Self, UnitError> {
        const WHAT: &str = "data size";
        const HINT: &str =
            "expected a number of bytes with an optional unit, e.g. 1500B, 64KiB, 1MB";
        let t = s.trim();
        let (num, mult) = split_prefix(
            t,
            &[
                ("KiB", 1024.0),
                ("MiB", 1_048_576.0),
                ("GiB", 1_073_741_824.0),
                ("KB", 1e3),
                ("kB", 1e3),
                ("MB", 1e6),
                ("GB", 1e9),
                ("B", 1.0),
            ],
        );
        let v: f64 = num.trim().parse().map_err(|_| UnitError::Syntax {
            what: WHAT,
            text: s.to_owned(),
            hint: HINT,
        })?;
        let bytes = v * mult;
        if !bytes.is_finite() || !(0.0..=1e18).contains(&bytes) {
            return Err(UnitError::Range {
                what: WHAT,
                text: s.to_owned(),
                hint: "must be between 0 and 10^18 bytes",
            });
        }
        Ok(Self(bytes.round() as u64))
    }
}

impl TryFrom<NumberOrText> for DataSize {
    type Error = UnitError;
    /// A bare number is bytes; text takes the [`FromStr`] forms.
    fn try_from(v: NumberOrText) -> Result<Self, UnitError> {
        v.into_text().parse()
    }
}

/// A unit as it appears in a config file: a bare number or text with a unit.
#[derive(Deserialize)]
#[serde(untagged)]
#[doc(hidden)]
pub enum NumberOrText {
    /// A bare integer.
    Int(i64),
    /// A bare float.
    Float(f64),
    /// Text such as `56kbit/s`.
    Text(String),
}

impl NumberOrText {
    fn into_text(self) -> String {
        match self {
            Self::Int(i) => i.to_string(),
            Self::Float(f) => f.to_string(),
            Self::Text(t) => t,
        }
    }
}

impl From<DataSize> for String {
    fn from(d: DataSize) -> String {
        d.to_string()
    }
}

/// A probability in `[0, 1]`.
#[derive(Clone, Copy, Debug, Default, PartialEq, PartialOrd, Serialize, Deserialize)]
#[serde(try_from = "f64", into = "f64")]
pub struct Probability(f64);

impl Probability {
    /// Never.
    pub const ZERO: Self = Self(0.0);
    /// Always.
    pub const ONE: Self = Self(1.0);

    /// `p` if it lies in `[0, 1]`.
    pub fn new(p: f64) -> Result<Self, UnitError> {
        if (0.0..=1.0).contains(&p) {
            Ok(Self(p))
        } else {
            Err(UnitError::Range {
                what: "probability",
                text: p.to_string(),
                hint: "a probability must be between 0 and 1 (or 0% and 100%)",
            })
        }
    }

    /// The value in `[0, 1]`.
    pub const fn get(self) -> f64 {
        self.0
    }
}

impl fmt::Display for Probability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl FromStr for Probability {
    type Err = UnitError;
    /// Accepts `0.1`, `1e-5` or `10%`.
    fn from_str(s: &str) -> Result<Self, UnitError> {
        let t = s.trim();
        let (num, scale) = match t.strip_suffix('%') {
            Some(n) => (n, 0.01),
            None => (t, 1.0),
        };
        let v: f64 = num.trim().parse().map_err(|_| UnitError::Syntax {
            what: "probability",
            text: s.to_owned(),
            hint: "expected a number between 0 and 1, or a percentage such as 10%",
        })?;
        Self::new(v * scale).map_err(|_| UnitError::Range {
            what: "probability",
            text: s.to_owned(),
            hint: "a probability must be between 0 and 1 (or 0% and 100%)",
        })
    }
}

impl TryFrom<f64> for Probability {
    type Error = UnitError;
    fn try_from(p: f64) -> Result<Self, UnitError> {
        Self::new(p)
    }
}

impl From<Probability> for f64 {
    fn from(p: Probability) -> f64 {
        p.0
    }
}

/// Splits a known suffix off `t`, returning the number part and its multiplier.
fn split_prefix<'a>(t: &'a str, suffixes: &[(&str, f64)]) -> (&'a str, f64) {
    for (suf, mult) in suffixes {
        if let Some(n) = t.strip_suffix(suf) {
            return (n, *mult);
        }
    }
    (t, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_bitrates_people_type() {
        assert_eq!("56kbit/s".parse::<Bitrate>().unwrap(), Bitrate::kbps(56));
        assert_eq!("1Gbps".parse::<Bitrate>().unwrap(), Bitrate::gbps(1));
        assert_eq!("1.5M".parse::<Bitrate>().unwrap(), Bitrate::bps(1_500_000));
        assert_eq!("9600".parse::<Bitrate>().unwrap(), Bitrate::bps(9600));
        assert!(matches!(
            "0".parse::<Bitrate>(),
            Err(UnitError::Range { .. })
        ));
        assert!(matches!(
            "fast".parse::<Bitrate>(),
            Err(UnitError::Syntax { .. })
        ));
        assert_eq!(Bitrate::mbps(100).to_string(), "100Mbit/s");
        assert_eq!(Bitrate::kbps(56).to_string(), "56kbit/s");
    }

    #[test]
    fn transmit_time_of_a_full_packet() {
        assert_eq!(
            Bitrate::gbps(1).transmit_time(1500),
            Duration::from_nanos(12_000)
        );
        assert_eq!(
            Bitrate::gbps(1).bytes_in(Duration::from_millis(100)),
            12_500_000
        );
    }

    #[test]
    fn parses_sizes_and_probabilities() {
        assert_eq!("64KiB".parse::<DataSize>().unwrap(), DataSize::kib(64));
        assert_eq!("1500B".parse::<DataSize>().unwrap(), DataSize::bytes(1500));
        assert_eq!("10%".parse::<Probability>().unwrap().get(), 0.1);
        assert!("1.5".parse::<Probability>().is_err());
        assert!(Probability::new(-0.1).is_err());
    }
}
