//! Time as the protocols see it: an [`Instant`] chosen by the driver.
//!
//! Machines never read a clock. The simulator starts its epoch at zero, so
//! traces print stably; the tokio driver picks an epoch when it starts.
//! Durations are [`std::time::Duration`].

use core::fmt;
use core::ops::{Add, AddAssign, Sub};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Nanoseconds since an epoch chosen by the driver.
///
/// Only compare instants from one driver. Nanoseconds (not microseconds)
/// because a 1500-byte packet lasts 1.2 us on a 10 Gbit/s link, and rounding
/// serialization times to microseconds would bias a simulated queue.
/// `u64` nanoseconds cover 584 years.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Instant(u64);

impl Instant {
    /// The driver's epoch.
    pub const ZERO: Self = Self(0);
    /// The largest representable instant; useful as "never".
    pub const MAX: Self = Self(u64::MAX);

    /// An instant `nanos` nanoseconds after the epoch.
    pub const fn from_nanos(nanos: u64) -> Self {
        Self(nanos)
    }

    /// An instant `micros` microseconds after the epoch (saturating).
    pub const fn from_micros(micros: u64) -> Self {
        Self(micros.saturating_mul(1_000))
    }

    /// An instant `millis` milliseconds after the epoch (saturating).
    pub const fn from_millis(millis: u64) -> Self {
        Self(millis.saturating_mul(1_000_000))
    }

    /// An instant `secs` seconds after the epoch (saturating).
    pub const fn from_secs(secs: u64) -> Self {
        Self(secs.saturating_mul(1_000_000_000))
    }

    /// Nanoseconds since the epoch.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Microseconds since the epoch, rounded down.
    pub const fn as_micros(self) -> u64 {
        self.0 / 1_000
    }

    /// Seconds since the epoch as a float, for reports and plots.
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }

    /// Time since the epoch.
    pub const fn since_epoch(self) -> Duration {
        Duration::from_nanos(self.0)
    }

    /// `self - earlier`, or zero if `earlier` is later.
    pub const fn saturating_duration_since(self, earlier: Self) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// `self - earlier`, or `None` if `earlier` is later.
    pub const fn checked_duration_since(self, earlier: Self) -> Option<Duration> {
        match self.0.checked_sub(earlier.0) {
            Some(n) => Some(Duration::from_nanos(n)),
            None => None,
        }
    }

    /// `self + d`, saturating at [`Instant::MAX`].
    pub fn saturating_add(self, d: Duration) -> Self {
        Self(self.0.saturating_add(duration_nanos(d)))
    }

    /// `self - d`, saturating at [`Instant::ZERO`].
    pub fn saturating_sub(self, d: Duration) -> Self {
        Self(self.0.saturating_sub(duration_nanos(d)))
    }
}

/// A duration in nanoseconds, saturating at `u64::MAX` (584 years).
pub fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Add<Duration> for Instant {
    type Output = Self;
    /// Saturates at [`Instant::MAX`] rather than overflowing.
    fn add(self, rhs: Duration) -> Self {
        self.saturating_add(rhs)
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, rhs: Duration) {
        *self = *self + rhs;
    }
}

impl Sub<Duration> for Instant {
    type Output = Self;
    /// Saturates at [`Instant::ZERO`].
    fn sub(self, rhs: Duration) -> Self {
        self.saturating_sub(rhs)
    }
}

impl Sub for Instant {
    type Output = Duration;
    /// Saturates at zero when `rhs` is later.
    fn sub(self, rhs: Self) -> Duration {
        self.saturating_duration_since(rhs)
    }
}

impl fmt::Display for Instant {
    /// Seconds with microsecond precision: `12.000345s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{:06}s",
            self.0 / 1_000_000_000,
            (self.0 % 1_000_000_000) / 1_000
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates_instead_of_wrapping() {
        assert_eq!(Instant::MAX + Duration::from_secs(1), Instant::MAX);
        assert_eq!(Instant::ZERO - Duration::from_secs(1), Instant::ZERO);
        assert_eq!(
            Instant::from_secs(1) - Instant::from_secs(2),
            Duration::ZERO
        );
        assert_eq!(
            Instant::from_millis(1500) - Instant::from_secs(1),
            Duration::from_millis(500)
        );
    }

    #[test]
    fn displays_seconds_with_microseconds() {
        assert_eq!(Instant::from_micros(12_000_345).to_string(), "12.000345s");
    }
}
