//! Time-varying link parameters: a [`Schedule`] is a sequence of values,
//! each held for a duration or ramped linearly to another, played once
//! (the last value then holds) or repeated.
//!
//! The same type varies a loss model ([`LossModel::Schedule`]), a link's
//! rate ([`LinkConfig::rate_schedule`]) and its delay
//! ([`LinkConfig::delay_schedule`]), in the simulator and the real-socket
//! emulator alike: both hand the link the time of each packet, measured
//! from the driver's epoch ([`Instant::ZERO`]: the start of a simulation
//! or of `groupwire emulate`).
//!
//! # Text form
//!
//! ```text
//! schedule:DURATION VALUE; DURATION VALUE -> VALUE; ...; repeat
//! ```
//!
//! - `60s bernoulli:1%` holds a value for 60 s;
//! - `30s 10Mbit/s -> 2Mbit/s` ramps linearly from one value to the other
//!   over 30 s (every numeric parameter of a loss model moves linearly;
//!   both ends must be the same kind of model);
//! - a final `repeat` plays the sequence again and again; without it the
//!   last segment's end value holds forever.
//!
//! ```
//! use std::time::Duration;
//! use groupwire_link::{LossModel, Schedule};
//! use groupwire_units::Bitrate;
//!
//! let rate: Schedule<Bitrate> = "schedule:10s 10Mbit/s; 10s 10Mbit/s -> 2Mbit/s".parse()?;
//! assert_eq!(rate.value_at(Duration::from_secs(15)), Bitrate::mbps(6));
//! assert_eq!(rate.value_at(Duration::from_secs(99)), Bitrate::mbps(2));
//!
//! let loss: LossModel = "schedule:60s bernoulli:1%; 60s gilbert:p=0.02,r=0.2; repeat".parse()?;
//! assert!((loss.mean_loss_rate(100).unwrap() - (0.01 + 0.02 / 0.22) / 2.0).abs() < 1e-9);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! [`LossModel::Schedule`]: crate::LossModel::Schedule
//! [`LinkConfig::rate_schedule`]: crate::LinkConfig::rate_schedule
//! [`LinkConfig::delay_schedule`]: crate::LinkConfig::delay_schedule
//! [`Instant::ZERO`]: groupwire_units::Instant::ZERO

use core::fmt;
use core::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use groupwire_units::{Bitrate, duration};

/// The most segments a schedule may have: a bound on what a (possibly
/// mistyped or hostile) configuration line can allocate.
pub const MAX_SEGMENTS: usize = 4096;

/// Samples per ramp for [`Schedule::time_average`] (midpoint rule).
pub const AVERAGE_SAMPLES: u32 = 64;

/// A value a [`Schedule`] can carry: parsed from and printed to text, and
/// interpolated along a ramp.
pub trait ScheduleValue: Clone + PartialEq + Sized {
    /// What the value is, for error messages ("loss model", "bit rate").
    const WHAT: &'static str;
    /// Parses one value's text form.
    fn parse_value(text: &str) -> Result<Self, String>;
    /// Writes the text form [`ScheduleValue::parse_value`] reads back.
    fn write_value(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result;
    /// The value a fraction `f` (in `[0, 1]`) of the way from `from` to
    /// `to`; `None` when the two cannot be interpolated (say, loss models
    /// of different kinds).
    fn lerp(from: &Self, to: &Self, f: f64) -> Option<Self>;
}

/// One segment of a [`Schedule`].
#[derive(Debug, Clone, PartialEq)]
pub struct Segment<T> {
    /// How long the segment lasts (positive).
    pub duration: Duration,
    /// The value at the segment's start (held throughout without `to`).
    pub from: T,
    /// With a ramp, the value at the segment's end.
    pub to: Option<T>,
}

impl<T: ScheduleValue> Segment<T> {
    /// The value a fraction `f` of the way through the segment.
    pub fn value_at(&self, f: f64) -> T {
        match &self.to {
            None => self.from.clone(),
            Some(to) => T::lerp(&self.from, to, f.clamp(0.0, 1.0))
                .expect("a schedule's ramps were checked to interpolate"),
        }
    }

    /// The value at the segment's end.
    pub fn end(&self) -> &T {
        self.to.as_ref().unwrap_or(&self.from)
    }
}

/// A value that changes over time: see the [module docs](self).
///
/// Cloning is cheap (the segments are shared).
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule<T> {
    segments: Arc<[Segment<T>]>,
    /// Cumulative end of each segment, in nanoseconds from the start.
    ends: Arc<[u64]>,
    repeat: bool,
    /// A preset's name: printed instead of the segments.
    name: Option<&'static str>,
}

/// Where a time falls in a [`Schedule`]: the segment and how far through it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Position {
    /// Index of the segment.
    pub index: usize,
    /// Time since the segment started.
    pub into: Duration,
    /// Whether a non-repeating schedule has ended (its last segment's end
    /// value holds).
    pub ended: bool,
}

/// Why a schedule was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("schedule {text:?}: {problem}")]
pub struct ScheduleError {
    /// The offending text (or a summary of the segments).
    pub text: String,
    /// What is wrong and what a valid schedule looks like.
    pub problem: String,
}

impl<T: ScheduleValue> Schedule<T> {
    /// A schedule of `segments`, played once (the last end value then
    /// holds) or repeated.
    ///
    /// Rejects an empty list, more than [`MAX_SEGMENTS`] segments, a
    /// zero-length segment, a total over a billion seconds and a ramp whose
    /// ends cannot be interpolated.
    pub fn new(segments: Vec<Segment<T>>, repeat: bool) -> Result<Self, ScheduleError> {
        let err = |problem: String| ScheduleError {
            text: format!("{} segments", segments.len()),
            problem,
        };
        if segments.is_empty() {
            return Err(err(format!(
                "a schedule needs at least one segment; {HINT}"
            )));
        }
        if segments.len() > MAX_SEGMENTS {
            return Err(err(format!("more than {MAX_SEGMENTS} segments")));
        }
        let mut ends = Vec::with_capacity(segments.len());
        let mut total: u64 = 0;
        for (i, s) in segments.iter().enumerate() {
            let nanos = u64::try_from(s.duration.as_nanos()).unwrap_or(u64::MAX);
            if nanos == 0 {
                return Err(err(format!("segment {} lasts no time", i + 1)));
            }
            total = total
                .checked_add(nanos)
                .filter(|t| *t <= MAX_TOTAL_NANOS)
                .ok_or_else(|| err("the segments last over a billion seconds".to_owned()))?;
            ends.push(total);
            if let Some(to) = &s.to {
                if T::lerp(&s.from, to, 0.5).is_none() {
                    return Err(err(format!(
                        "segment {} ramps between two {}s that cannot be interpolated: \
                         a ramp's ends must be of the same kind",
                        i + 1,
                        T::WHAT
                    )));
                }
            }
        }
        Ok(Self {
            segments: segments.into(),
            ends: ends.into(),
            repeat,
            name: None,
        })
    }

    /// The same schedule, printed as `schedule:NAME` (for presets, whose
    /// `FromStr` accepts the name).
    pub(crate) fn named(mut self, name: &'static str) -> Self {
        self.name = Some(name);
        self
    }

    /// The segments, in order (never empty).
    pub fn segments(&self) -> &[Segment<T>] {
        &self.segments
    }

    /// Whether the sequence repeats.
    pub fn repeats(&self) -> bool {
        self.repeat
    }

    /// How long one pass of the sequence lasts.
    pub fn period(&self) -> Duration {
        Duration::from_nanos(*self.ends.last().expect("never empty"))
    }

    /// Where time `t` (since the epoch) falls.
    pub fn position(&self, t: Duration) -> Position {
        let period = *self.ends.last().expect("never empty");
        let mut t = u64::try_from(t.as_nanos()).unwrap_or(u64::MAX);
        if t >= period {
            if !self.repeat {
                let index = self.segments.len() - 1;
                let start = index.checked_sub(1).map_or(0, |i| self.ends[i]);
                return Position {
                    index,
                    into: Duration::from_nanos(period - start),
                    ended: true,
                };
            }
            t %= period;
        }
        // The first segment that ends after t.
        let index = self.ends.partition_point(|&end| end <= t);
        let start = index.checked_sub(1).map_or(0, |i| self.ends[i]);
        Position {
            index,
            into: Duration::from_nanos(t - start),
            ended: false,
        }
    }

    /// The value at time `t` since the epoch.
    pub fn value_at(&self, t: Duration) -> T {
        let pos = self.position(t);
        let seg = &self.segments[pos.index];
        if pos.ended {
            return seg.end().clone();
        }
        seg.value_at(pos.into.as_secs_f64() / seg.duration.as_secs_f64())
    }

    /// The time-weighted mean of `f` over one pass (ramps sampled at
    /// [`AVERAGE_SAMPLES`] midpoints), or `None` if `f` is `None` anywhere.
    ///
    /// For a repeating schedule this is the long-run mean; for one played
    /// once, the long run is its last value, so see
    /// [`Schedule::long_run_weights`].
    pub fn time_average(&self, f: impl Fn(&T) -> Option<f64>) -> Option<f64> {
        let mut sum = 0.0;
        let mut total = 0.0;
        for (w, v) in self.weighted_values() {
            sum += w * f(&v)?;
            total += w;
        }
        Some(sum / total)
    }

    /// The values a long run spends its time in, with weights summing to 1:
    /// one pass's segments (ramps as [`AVERAGE_SAMPLES`] samples) when the
    /// schedule repeats, otherwise its final value alone.
    pub fn long_run_weights(&self) -> Vec<(f64, T)> {
        if !self.repeat {
            let last = self.segments.last().expect("never empty");
            return vec![(1.0, last.end().clone())];
        }
        let total = self.period().as_secs_f64();
        self.weighted_values()
            .map(|(w, v)| (w / total, v))
            .collect()
    }

    /// (seconds, value) pairs covering one pass: a hold once, a ramp as
    /// midpoint samples.
    fn weighted_values(&self) -> impl Iterator<Item = (f64, T)> + '_ {
        self.segments.iter().flat_map(|s| {
            let secs = s.duration.as_secs_f64();
            let n = if s.to.is_some() { AVERAGE_SAMPLES } else { 1 };
            (0..n).map(move |i| {
                let f = (f64::from(i) + 0.5) / f64::from(n);
                (secs / f64::from(n), s.value_at(f))
            })
        })
    }

    /// Parses the part after `schedule:` (see the [module docs](self)).
    pub fn parse_body(body: &str) -> Result<Self, ScheduleError> {
        let err = |problem: String| ScheduleError {
            text: body.to_owned(),
            problem,
        };
        let mut parts: Vec<&str> = body.split(';').map(str::trim).collect();
        while parts.last() == Some(&"") {
            parts.pop();
        }
        let repeat = parts
            .last()
            .is_some_and(|p| p.eq_ignore_ascii_case("repeat"));
        if repeat {
            parts.pop();
        }
        if parts.len() > MAX_SEGMENTS {
            return Err(err(format!("more than {MAX_SEGMENTS} segments")));
        }
        let mut segments = Vec::with_capacity(parts.len());
        for (i, part) in parts.iter().enumerate() {
            let n = i + 1;
            let Some((dur, rest)) = part.split_once(char::is_whitespace) else {
                return Err(err(format!(
                    "segment {n} ({part:?}) needs a duration and a {}; {HINT}",
                    T::WHAT
                )));
            };
            let duration = duration::parse(dur).map_err(|e| err(format!("segment {n}: {e}")))?;
            let value =
                |t: &str| T::parse_value(t.trim()).map_err(|e| err(format!("segment {n}: {e}")));
            let (from, to) = match rest.split_once("->") {
                Some((a, b)) => (value(a)?, Some(value(b)?)),
                None => (value(rest)?, None),
            };
            segments.push(Segment { duration, from, to });
        }
        Self::new(segments, repeat).map_err(|e| err(e.problem))
    }
}

/// Nanoseconds a schedule may last at most (a billion seconds, as the
/// duration grammar).
const MAX_TOTAL_NANOS: u64 = 1_000_000_000 * 1_000_000_000;

/// How to write a schedule, for error messages.
const HINT: &str = "write e.g. schedule:60s bernoulli:1%; 60s gilbert:p=0.02,r=0.2; repeat \
                    (DURATION VALUE to hold, DURATION VALUE -> VALUE to ramp, a final repeat to loop)";

impl<T: ScheduleValue> fmt::Display for Schedule<T> {
    /// `schedule:` and the segments (or a preset's name), as
    /// [`Schedule::parse_body`] reads them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("schedule:")?;
        if let Some(name) = self.name {
            return f.write_str(name);
        }
        for (i, s) in self.segments.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{} ", duration::format(s.duration))?;
            s.from.write_value(f)?;
            if let Some(to) = &s.to {
                f.write_str(" -> ")?;
                to.write_value(f)?;
            }
        }
        if self.repeat {
            f.write_str("; repeat")?;
        }
        Ok(())
    }
}

impl<T: ScheduleValue> FromStr for Schedule<T> {
    type Err = ScheduleError;

    /// `schedule:...`, as in the [module docs](self).
    fn from_str(s: &str) -> Result<Self, ScheduleError> {
        let t = s.trim();
        let body = t
            .get(..9)
            .filter(|k| k.eq_ignore_ascii_case("schedule:"))
            .map(|_| &t[9..])
            .ok_or_else(|| ScheduleError {
                text: s.to_owned(),
                problem: format!("a schedule starts with \"schedule:\"; {HINT}"),
            })?;
        Self::parse_body(body)
    }
}

impl<T: ScheduleValue> serde::Serialize for Schedule<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de, T: ScheduleValue> serde::Deserialize<'de> for Schedule<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = <String as serde::Deserialize>::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// A value that is fixed or follows a [`Schedule`]: what a command-line
/// flag such as `groupwire emulate --rate` accepts (`2Mbit/s`, or
/// `schedule:30s 2Mbit/s; 30s 500kbit/s; repeat`).
#[derive(Debug, Clone, PartialEq)]
pub enum Varying<T> {
    /// The same value all the time.
    Fixed(T),
    /// A value that changes over time.
    Schedule(Schedule<T>),
}

impl<T: ScheduleValue> Varying<T> {
    /// The value at time `t` since the epoch.
    pub fn value_at(&self, t: Duration) -> T {
        match self {
            Self::Fixed(v) => v.clone(),
            Self::Schedule(s) => s.value_at(t),
        }
    }
}

impl<T: ScheduleValue> FromStr for Varying<T> {
    type Err = ScheduleError;

    /// A schedule if the text starts with `schedule:`, else one value.
    fn from_str(s: &str) -> Result<Self, ScheduleError> {
        if s.trim()
            .get(..9)
            .is_some_and(|k| k.eq_ignore_ascii_case("schedule:"))
        {
            return s.parse().map(Self::Schedule);
        }
        T::parse_value(s.trim())
            .map(Self::Fixed)
            .map_err(|problem| ScheduleError {
                text: s.to_owned(),
                problem: format!("{problem} (or a schedule: {HINT})"),
            })
    }
}

impl<T: ScheduleValue> fmt::Display for Varying<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Fixed(v) => v.write_value(f),
            Self::Schedule(s) => fmt::Display::fmt(s, f),
        }
    }
}

impl ScheduleValue for Bitrate {
    const WHAT: &'static str = "bit rate";

    fn parse_value(text: &str) -> Result<Self, String> {
        text.parse().map_err(|e| format!("{e}"))
    }

    fn write_value(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }

    fn lerp(from: &Self, to: &Self, f: f64) -> Option<Self> {
        let (a, b) = (from.as_bps() as f64, to.as_bps() as f64);
        Some(Self::bps((a + (b - a) * f).round().max(1.0) as u64))
    }
}

impl ScheduleValue for Duration {
    const WHAT: &'static str = "duration";

    fn parse_value(text: &str) -> Result<Self, String> {
        duration::parse(text)
    }

    fn write_value(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&duration::format(*self))
    }

    fn lerp(from: &Self, to: &Self, f: f64) -> Option<Self> {
        let (a, b) = (from.as_nanos() as f64, to.as_nanos() as f64);
        Some(Self::from_nanos((a + (b - a) * f).round().max(0.0) as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(text: &str) -> Schedule<Bitrate> {
        text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn holds_ramps_and_repeats() {
        let s = rate("schedule:1s 10Mbit/s; 2s 10Mbit/s -> 2Mbit/s; repeat");
        assert_eq!(s.period(), Duration::from_secs(3));
        let at = |ms| s.value_at(Duration::from_millis(ms));
        assert_eq!(at(0), Bitrate::mbps(10));
        assert_eq!(at(999), Bitrate::mbps(10));
        assert_eq!(at(1000), Bitrate::mbps(10));
        assert_eq!(at(2000), Bitrate::mbps(6));
        // Repeats: 3.5 s is 0.5 s into the next pass.
        assert_eq!(at(3500), Bitrate::mbps(10));
        assert_eq!(at(5000), Bitrate::mbps(6));
        // Time-weighted mean: (1 s at 10) + (2 s averaging 6) over 3 s.
        let mean = s.time_average(|r| Some(r.as_bps() as f64)).unwrap();
        assert!((mean - 22e6 / 3.0).abs() < 1.0, "{mean}");
    }

    #[test]
    fn once_holds_the_last_end_value() {
        let s = rate("schedule:1s 1Mbit/s -> 3Mbit/s");
        assert!(!s.repeats());
        assert_eq!(s.value_at(Duration::from_millis(500)), Bitrate::mbps(2));
        assert_eq!(s.value_at(Duration::from_secs(7)), Bitrate::mbps(3));
        assert!(s.position(Duration::from_secs(7)).ended);
        assert_eq!(s.long_run_weights(), vec![(1.0, Bitrate::mbps(3))]);
    }

    #[test]
    fn text_round_trips() {
        for text in [
            "schedule:1s 10Mbit/s; 2s 10Mbit/s -> 2Mbit/s; repeat",
            "schedule:500ms 56kbit/s",
        ] {
            let s = rate(text);
            assert_eq!(s.to_string(), text);
            assert_eq!(rate(&s.to_string()), s);
        }
        let d: Schedule<Duration> = "schedule:10s 20ms -> 200ms; 10s 200ms; repeat"
            .parse()
            .unwrap();
        assert_eq!(
            d.value_at(Duration::from_secs(5)),
            Duration::from_millis(110)
        );
        assert_eq!(d.to_string().parse::<Schedule<Duration>>().unwrap(), d);
    }

    #[test]
    fn a_varying_value_is_fixed_or_scheduled() {
        let fixed: Varying<Bitrate> = "2Mbit/s".parse().unwrap();
        assert_eq!(fixed, Varying::Fixed(Bitrate::mbps(2)));
        assert_eq!(fixed.value_at(Duration::from_secs(9)), Bitrate::mbps(2));
        let varying: Varying<Duration> = "Schedule:1s 10ms; 1s 30ms; repeat".parse().unwrap();
        assert_eq!(
            varying.value_at(Duration::from_millis(1500)),
            Duration::from_millis(30)
        );
        assert_eq!(varying.to_string(), "schedule:1s 10ms; 1s 30ms; repeat");
        let e = "fast".parse::<Varying<Bitrate>>().unwrap_err().to_string();
        assert!(e.contains("bit rate") && e.contains("schedule:"), "{e}");
    }

    #[test]
    fn bad_schedules_say_what_is_wrong() {
        for (text, needle) in [
            ("schedule:", "at least one segment"),
            ("schedule:repeat", "at least one segment"),
            ("schedule:10Mbit/s", "needs a duration"),
            ("schedule:0s 1Mbit/s", "lasts no time"),
            ("schedule:1x 1Mbit/s", "cannot read duration"),
            ("schedule:1s fast", "bit rate"),
            ("1s 1Mbit/s", "starts with"),
            ("schedule:999999999s 1M; 999999999s 1M", "billion"),
        ] {
            let e = text.parse::<Schedule<Bitrate>>().unwrap_err().to_string();
            assert!(e.contains(needle), "{text}: {e}");
        }
        let many = format!("schedule:{}", "1s 1M;".repeat(MAX_SEGMENTS + 1));
        assert!(many.parse::<Schedule<Bitrate>>().is_err());
    }
}
