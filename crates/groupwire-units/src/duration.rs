//! The one duration grammar: `10ms`, `1.5s`, `200us`, `2m`, `1h`, read
//! exactly in integer nanoseconds, and printed back to the same value.
//!
//! Scenario files (`#[serde(with = "groupwire_units::duration")]`), `--set`
//! overrides and every command-line flag that takes a duration
//! (`value_parser = groupwire_units::duration::parse`) read durations here,
//! so one spelling works everywhere. [`option`] adds `off` for `None`,
//! [`vec`](mod@vec) reads lists.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serializer};

/// Writes `d` as a human string.
pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format(*d))
}

/// Reads a human string such as `10ms`. A bare number (`min_rto = 1` in
/// TOML) is refused with a message that asks for the unit.
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let text = DurationText::deserialize(d)?
        .into_text()
        .map_err(serde::de::Error::custom)?;
    parse(&text).map_err(serde::de::Error::custom)
}

/// What a configuration file may hold where a duration goes: its text, or
/// a number that lacks the unit.
#[derive(Deserialize)]
#[serde(untagged)]
enum DurationText {
    Text(String),
    Int(i64),
    Float(f64),
}

impl DurationText {
    fn into_text(self) -> Result<String, String> {
        let number = match self {
            Self::Text(t) => return Ok(t),
            Self::Int(n) => n.to_string(),
            Self::Float(x) => x.to_string(),
        };
        Err(format!(
            "a duration needs a unit: write \"{number}s\" or \"{number}ms\" (in quotes), not {number}"
        ))
    }
}

/// The longest duration accepted, in nanoseconds (a billion seconds).
const MAX_NANOS: u128 = 1_000_000_000 * 1_000_000_000;

/// Parses `10ms`, `1.5s`, `200us`, `2m`: exactly, in integer
/// nanoseconds (digits below a nanosecond are dropped), so what
/// [`format()`] prints reads back to the same value. (It went through
/// `f64` once, and `88877776818ms` read back 4 ns off: found by the
/// `scenario` fuzz target.)
pub fn parse(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let unit_ns: u128 = match unit.trim() {
        "ns" => 1,
        "us" | "µs" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" | "min" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return Err(bad(text)),
    };
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    if (int.is_empty() && frac.is_empty()) || frac.contains('.') {
        return Err(bad(text));
    }
    let digits = |d: &str| -> Result<u128, String> {
        if d.is_empty() {
            return Ok(0);
        }
        d.parse::<u128>().map_err(|_| bad(text))
    };
    // A nanosecond is at most 10^-12 of an hour: digits past the 12th
    // can only add less than a nanosecond.
    let frac = &frac[..frac.len().min(12)];
    let whole = digits(int)?
        .checked_mul(unit_ns)
        .filter(|n| *n <= MAX_NANOS)
        .ok_or_else(|| bad(text))?;
    let scale = 10u128.pow(u32::try_from(frac.len()).map_err(|_| bad(text))?);
    let part = digits(frac)? * unit_ns / scale;
    let nanos = whole + part;
    if nanos > MAX_NANOS {
        return Err(bad(text));
    }
    Ok(Duration::from_nanos(
        u64::try_from(nanos).map_err(|_| bad(text))?,
    ))
}

/// Formats with the largest unit that keeps it exact with at most
/// three decimals (`10ms`, `1.5s`, `250ns`), in integer arithmetic.
pub fn format(d: Duration) -> String {
    let ns = d.as_nanos();
    for (unit, div) in [("s", 1_000_000_000u128), ("ms", 1_000_000), ("us", 1_000)] {
        if ns >= div && ns % (div / 1000).max(1) == 0 {
            let (whole, rem) = (ns / div, ns % div);
            if rem == 0 {
                return format!("{whole}{unit}");
            }
            // Three decimals at most (checked above), trailing zeros cut.
            let milli = rem / (div / 1000);
            let decimals = format!("{milli:03}");
            return format!("{whole}.{}{unit}", decimals.trim_end_matches('0'));
        }
    }
    format!("{ns}ns")
}

fn bad(text: &str) -> String {
    format!("cannot read duration {text:?}: expected a number with a unit, e.g. 10ms, 1.5s, 200us")
}

/// The same for `Option<Duration>`, with `"off"` for `None`.
pub mod option {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes `None` as `"off"`.
    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_str(&super::format(*d)),
            None => s.serialize_str("off"),
        }
    }

    /// Reads `"off"` as `None`.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let text = super::DurationText::deserialize(d)?
            .into_text()
            .map_err(serde::de::Error::custom)?;
        if matches!(text.trim(), "off" | "none" | "false") {
            return Ok(None);
        }
        super::parse(&text)
            .map(Some)
            .map_err(serde::de::Error::custom)
    }
}

/// The same for `Vec<Duration>`: a list of duration strings
/// (`budgets = ["10ms", "30ms"]`).
pub mod vec {
    use std::time::Duration;

    use serde::ser::SerializeSeq;
    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes each duration as a human string.
    pub fn serialize<S: Serializer>(ds: &[Duration], s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(ds.len()))?;
        for d in ds {
            seq.serialize_element(&super::format(*d))?;
        }
        seq.end()
    }

    /// Reads a list of human strings; a bare number asks for its unit.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Duration>, D::Error> {
        Vec::<super::DurationText>::deserialize(d)?
            .into_iter()
            .map(|t| {
                t.into_text()
                    .and_then(|text| super::parse(&text))
                    .map_err(serde::de::Error::custom)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_bare_number_asks_for_its_unit() {
        use serde::de::IntoDeserializer;
        use serde::de::value::Error;
        let int: serde::de::value::I64Deserializer<Error> = 1i64.into_deserializer();
        let e = deserialize(int).expect_err("no unit").to_string();
        assert!(e.contains("needs a unit") && e.contains("\"1s\""), "{e}");
        let float: serde::de::value::F64Deserializer<Error> = 0.5f64.into_deserializer();
        let e = option::deserialize(float).expect_err("no unit").to_string();
        assert!(e.contains("\"0.5ms\""), "{e}");
        let text: serde::de::value::StrDeserializer<Error> = "1s".into_deserializer();
        assert_eq!(deserialize(text).expect("text"), Duration::from_secs(1));
    }

    #[test]
    fn durations_round_trip() {
        for s in ["10ms", "1.5s", "200us", "100ms", "0.1ms"] {
            let d = parse(s).unwrap();
            assert_eq!(parse(&format(d)).unwrap(), d, "{s}");
        }
        assert!(parse("fast").is_err());
        assert!(parse("-1s").is_err());
        for bad in ["", "s", ".s", "1.2.3s", "1e3s", "2000000000s"] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
        // Found by the scenario fuzz target: exact, not through f64.
        let d = parse("88877776818ms").unwrap();
        assert_eq!(d, Duration::from_millis(88_877_776_818));
        assert_eq!(parse("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse("0.1ms").unwrap(), Duration::from_micros(100));
        assert_eq!(parse(".5us").unwrap(), Duration::from_nanos(500));
        assert_eq!(format(Duration::from_millis(1500)), "1.5s");
        assert_eq!(format(Duration::from_micros(100)), "100us");
        assert_eq!(format(Duration::from_nanos(1_000_001)), "1000.001us");
    }

    #[test]
    fn lists_read_each_duration_and_print_them_back() {
        use serde::de::IntoDeserializer;
        use serde::de::value::Error;
        let items: Vec<serde::de::value::StrDeserializer<Error>> =
            vec!["10ms".into_deserializer(), "1.5s".into_deserializer()];
        let list = serde::de::value::SeqDeserializer::<_, Error>::new(items.into_iter());
        let ds = vec::deserialize(list).expect("a list of durations");
        assert_eq!(ds, [Duration::from_millis(10), Duration::from_millis(1500)]);
        let nums = serde::de::value::SeqDeserializer::<_, Error>::new([30i64].into_iter());
        let e = vec::deserialize(nums).expect_err("no unit").to_string();
        assert!(e.contains("\"30ms\""), "{e}");
    }

    proptest! {
        #[test]
        fn any_duration_prints_and_reads_back_exactly(ns in 0u64..=1_000_000_000_000_000_000) {
            let d = Duration::from_nanos(ns);
            prop_assert_eq!(parse(&format(d)), Ok(d));
        }

        #[test]
        fn whole_milliseconds_read_exactly(ms in 0u64..=1_000_000_000_000) {
            prop_assert_eq!(
                parse(&format!("{ms}ms")),
                Ok(Duration::from_millis(ms))
            );
        }
    }
}
