//! The one-line text form of a [`LossModel`]: `Display`, `FromStr`, and
//! the `String` conversions serde goes through.

use core::fmt;
use core::str::FromStr;

use groupwire_units::Probability;

use super::{LossError, LossModel, LossTrace};

impl fmt::Display for LossModel {
    /// The one-line text form accepted by `FromStr`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::None => f.write_str("none"),
            Self::Bernoulli { p } => write!(f, "bernoulli:{p}"),
            Self::Burst {
                start,
                min_len,
                max_len,
            } => write!(f, "burst:start={start},len={min_len}..{max_len}"),
            Self::Gilbert { p, r } => write!(f, "gilbert:p={p},r={r}"),
            Self::GilbertElliott { p, r, good, bad } => {
                write!(f, "ge:p={p},r={r},good={good},bad={bad}")
            }
            Self::BitError { p, r, good, bad } => {
                if p.get() == 0.0 && r.get() == 0.0 && good == bad {
                    write!(f, "ber:{good}")
                } else {
                    write!(f, "ber:p={p},r={r},good={good},bad={bad}")
                }
            }
            Self::Trace(trace) => write!(f, "trace:{}", trace.source().display()),
            Self::Schedule(schedule) => write!(f, "{schedule}"),
        }
    }
}

impl FromStr for LossModel {
    type Err = LossError;

    /// Parses the text forms in the [module docs](super).
    fn from_str(s: &str) -> Result<Self, LossError> {
        let syntax = |problem: String| LossError::Syntax {
            text: s.to_owned(),
            problem,
        };
        let text = s.trim();
        let (kind, args) = match text.split_once(':') {
            Some((kind, args)) => (kind.trim(), Some(args.trim())),
            None => (text, None),
        };
        let need_args = || {
            args.ok_or_else(|| {
                syntax(format!(
                    "\"{kind}\" needs parameters after a colon; {FORMS_HINT}"
                ))
            })
        };
        let model = match kind.to_ascii_lowercase().as_str() {
            "none" => {
                if args.is_some_and(|a| !a.is_empty()) {
                    return Err(syntax("\"none\" takes no parameters".to_owned()));
                }
                Self::None
            }
            "bernoulli" => Self::Bernoulli {
                p: parse_prob("loss probability", need_args()?).map_err(syntax)?,
            },
            "burst" => {
                let [start, len] = key_values(need_args()?, ["start", "len"]).map_err(syntax)?;
                let (min_len, max_len) = parse_len_range(len).map_err(syntax)?;
                Self::Burst {
                    start: parse_prob("start", start).map_err(syntax)?,
                    min_len,
                    max_len,
                }
            }
            "gilbert" => {
                let [p, r] = key_values(need_args()?, ["p", "r"]).map_err(syntax)?;
                Self::Gilbert {
                    p: parse_prob("p", p).map_err(syntax)?,
                    r: parse_prob("r", r).map_err(syntax)?,
                }
            }
            "ge" | "gilbert-elliott" | "gilbert_elliott" => {
                let [p, r, good, bad] =
                    key_values(need_args()?, ["p", "r", "good", "bad"]).map_err(syntax)?;
                Self::GilbertElliott {
                    p: parse_prob("p", p).map_err(syntax)?,
                    r: parse_prob("r", r).map_err(syntax)?,
                    good: parse_prob("good", good).map_err(syntax)?,
                    bad: parse_prob("bad", bad).map_err(syntax)?,
                }
            }
            "ber" => {
                let args = need_args()?;
                if args.eq_ignore_ascii_case("miyoshi-lower") {
                    Self::miyoshi_lower()
                } else if args.eq_ignore_ascii_case("miyoshi-higher") {
                    Self::miyoshi_higher()
                } else if args.contains('=') {
                    let [p, r, good, bad] =
                        key_values(args, ["p", "r", "good", "bad"]).map_err(syntax)?;
                    Self::BitError {
                        p: parse_prob("p", p).map_err(syntax)?,
                        r: parse_prob("r", r).map_err(syntax)?,
                        good: parse_prob("good", good).map_err(syntax)?.get(),
                        bad: parse_prob("bad", bad).map_err(syntax)?.get(),
                    }
                } else {
                    let ber = parse_prob("bit error rate", args).map_err(syntax)?.get();
                    Self::BitError {
                        p: Probability::ZERO,
                        r: Probability::ZERO,
                        good: ber,
                        bad: ber,
                    }
                }
            }
            "trace" => {
                let path = need_args()?;
                if path.is_empty() {
                    return Err(syntax(
                        "trace needs a file name, e.g. trace:losses.txt".to_owned(),
                    ));
                }
                // The loader's one file read (a bounded regular file).
                Self::Trace(LossTrace::read(path)?)
            }
            "schedule" => {
                let body = need_args()?;
                match Self::schedule_preset(body.trim()) {
                    Some(preset) => preset,
                    None => Self::Schedule(
                        crate::schedule::Schedule::parse_body(body)
                            .map_err(|e| syntax(e.problem))?,
                    ),
                }
            }
            _ => {
                return Err(syntax(format!(
                    "unknown loss model \"{kind}\"; {FORMS_HINT}"
                )));
            }
        };
        model.validate().map_err(|e| match e {
            LossError::Invalid { problem, .. } => syntax(problem),
            other => other,
        })?;
        Ok(model)
    }
}

impl TryFrom<String> for LossModel {
    type Error = LossError;
    fn try_from(s: String) -> Result<Self, LossError> {
        s.parse()
    }
}

impl From<LossModel> for String {
    fn from(m: LossModel) -> String {
        m.to_string()
    }
}

/// One-line summary of the text forms, for error messages.
const FORMS_HINT: &str = "expected one of none, bernoulli:0.1, burst:start=0.04,len=1..5, \
                          gilbert:p=0.006,r=0.05, ge:p=..,r=..,good=..,bad=.., ber:1e-5, \
                          ber:p=..,r=..,good=..,bad=.., ber:miyoshi-lower, ber:miyoshi-higher, trace:FILE, \
                          schedule:60s MODEL; 60s MODEL -> MODEL; repeat, \
                          schedule:alternating, schedule:fading";

fn parse_prob(what: &str, text: &str) -> Result<Probability, String> {
    text.parse::<Probability>()
        .map_err(|e| format!("{what}: {e}"))
}

/// Splits `a=1,b=2` into the values of exactly `keys`, in that order.
fn key_values<'a, const N: usize>(args: &'a str, keys: [&str; N]) -> Result<[&'a str; N], String> {
    let mut values: [Option<&str>; N] = [None; N];
    let expected = keys.join(", ");
    for part in args.split(',') {
        let Some((key, value)) = part.split_once('=') else {
            return Err(format!(
                "expected key=value, found \"{}\"; keys are {expected}",
                part.trim()
            ));
        };
        let key = key.trim();
        let Some(i) = keys.iter().position(|k| k.eq_ignore_ascii_case(key)) else {
            return Err(format!("unknown key \"{key}\"; keys are {expected}"));
        };
        if values[i].replace(value.trim()).is_some() {
            return Err(format!("key \"{key}\" given twice"));
        }
    }
    let mut out = [""; N];
    for (i, v) in values.iter().enumerate() {
        out[i] = v.ok_or_else(|| format!("missing key \"{}\"; keys are {expected}", keys[i]))?;
    }
    Ok(out)
}

/// `1..5`, `1-5` (as in the paper) or `3`, inclusive.
fn parse_len_range(text: &str) -> Result<(u32, u32), String> {
    let hint = "len is a packet count or an inclusive range such as len=1..5";
    let (lo, hi) = text
        .split_once("..")
        .or_else(|| text.split_once('-'))
        .unwrap_or((text, text));
    let num = |t: &str| {
        t.trim()
            .parse::<u32>()
            .map_err(|_| format!("cannot read burst length \"{}\": {hint}", t.trim()))
    };
    Ok((num(lo)?, num(hi)?))
}
