//! Experiments as data.
//!
//! A [`Scenario`] is a serde struct, so it reads from TOML (`groupwire sim
//! run my.toml`) as well as from the built-in list, and single fields can
//! be changed from the command line (`--set rtt=100ms`). Running one gives a
//! [`Report`]: a summary (printed as a table and written as JSON), tables
//! (written as CSV) and plots (written as CSV and PNG by the CLI).

mod awareness_path;
mod bulk;
mod dyck;
mod fec_codes;
mod geneva;
mod leigh;
mod leigh_fig3;
mod leigh_fig4;
mod link_models;
mod miyoshi;
mod robustness_afec;
mod robustness_tunnel;
mod tcp_dumbbell;
mod tele_immersion;
mod tunnel;

use std::time::Duration;

use groupwire_proto::Instant;
use serde::{Deserialize, Serialize};

pub use self::awareness_path::AwarenessPath;
pub use self::bulk::Bulk;
pub use self::dyck::{Dyck, Protocol};
pub use self::fec_codes::{CodeSetting, FecCodes};
pub use self::geneva::Geneva;
pub use self::leigh::Leigh;
pub use self::leigh_fig3::{LeighDiffServ, Variant as LeighDiffServVariant};
pub use self::link_models::LinkModels;
pub use self::miyoshi::Miyoshi;
pub use self::robustness_afec::RobustnessAfec;
pub use self::robustness_tunnel::RobustnessTunnel;
pub use self::tcp_dumbbell::{QueueSpec, ShortFlowSpec, TcpDumbbell};
pub use self::tele_immersion::TeleImmersion;
pub use self::tunnel::{TunnelScenario, TunnelSetting};

/// A runnable experiment. The `scenario` key of a TOML file names the kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "scenario", rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Scenario {
    /// Long-lived (and optionally short-lived) TCP flows through a dumbbell.
    TcpDumbbell(Box<TcpDumbbell>),
    /// Every loss model against its analytic loss rate and burst statistics.
    LinkModels(LinkModels),
    /// A telepointer stream over UDP and over TCP on one lossy, narrow path.
    AwarenessPath(Box<AwarenessPath>),
    /// Dyck & Gutwin's grid: TCP, UDP, FEC-n and AFEC on narrow lossy paths.
    Dyck(Box<Dyck>),
    /// Matsuzono et al.'s GENEVA evaluation: block-FEC streams (GMIAD,
    /// static, DP-FEC, TFRC) against TCP on a 1 Gbit/s dumbbell.
    Geneva(Box<Geneva>),
    /// `groupwire tunnel`'s machine over a simulated bursty link: residual
    /// loss, overhead and latency per FEC setting.
    Tunnel(Box<TunnelScenario>),
    /// The tunnel on the channel family: residual targets and delay
    /// budgets, the target controller and GMIAD against the best fixed
    /// code in hindsight.
    RobustnessTunnel(Box<RobustnessTunnel>),
    /// Miyoshi et al.'s adaptive BCH FEC with ELN and Snoop on a bursty
    /// wireless link: Tables 3-4, Figures 2-3 and beyond.
    Miyoshi(Box<Miyoshi>),
    /// Leigh et al.'s experiments: XOR FEC over UDP (Figures 4 and 5) and
    /// the latency price of spreading parity, and DiffServ (Figure 3).
    Leigh(Box<Leigh>),
    /// Bulk data over a long fat network: Leigh et al.'s Reliable Blast
    /// UDP (Figure 6) against TCP, and the paper's 45 Mbit/s x 150 ms LFN
    /// example with parallel TCP striping.
    Bulk(Box<Bulk>),
    /// A sliding-window code (RFC 8681) against a block code at equal
    /// overhead and span on the channel family: residual loss and how long
    /// rebuilt packets wait.
    FecCodes(Box<FecCodes>),
    /// Issue 15's channel-family bench for AFEC: every controller against
    /// the cheapest fixed code set size that meets each band.
    RobustnessAfec(Box<RobustnessAfec>),
    /// Issue 16's proof: one session with five channels over a changing
    /// path, the model selector against the heuristic and every fixed
    /// mechanism.
    TeleImmersion(Box<TeleImmersion>),
}

/// A built-in scenario: its name, a one-line description and its defaults.
#[derive(Debug, Clone)]
pub struct Builtin {
    /// The name on the command line.
    pub name: &'static str,
    /// What it shows, in one line.
    pub about: &'static str,
    /// Builds the default configuration.
    pub make: fn() -> Scenario,
}

/// Every built-in scenario.
pub fn builtins() -> Vec<Builtin> {
    vec![
        Builtin {
            name: "tcp-dumbbell",
            about: "N long-lived TCP flows (plus optional short flows and CBR) through one drop-tail bottleneck",
            make: || Scenario::TcpDumbbell(Box::default()),
        },
        Builtin {
            name: "link-models",
            about: "every loss model drawn 10^6 times: empirical vs analytic loss rate and burst lengths",
            make: || Scenario::LinkModels(LinkModels::default()),
        },
        Builtin {
            name: "awareness-path",
            about: "a clustered telepointer stream over UDP and TCP on a 56 kbit/s lossy path: loss vs head-of-line latency",
            make: || Scenario::AwarenessPath(Box::default()),
        },
        Builtin {
            name: "dyck",
            about: "Dyck & Gutwin's experiments: TCP, UDP, FEC-2..7 and AFEC (5-6% MER band) on 56/256 kbit/s lossy paths",
            make: || Scenario::Dyck(Box::default()),
        },
        Builtin {
            name: "geneva",
            about: "GENEVA's evaluation: 10 block-FEC streams (GMIAD, static-small/large, DP-FEC, TFRC) vs TCP on a 1 Gbit/s dumbbell",
            make: || Scenario::Geneva(Box::default()),
        },
        Builtin {
            name: "tunnel",
            about: "groupwire tunnel's machine over a Gilbert link (10% loss, bursts of 4): residual loss, overhead and latency per FEC setting",
            make: || Scenario::Tunnel(Box::default()),
        },
        Builtin {
            name: "robustness-tunnel",
            about: "the tunnel on the channel family (Bernoulli, Gilbert, Gilbert-Elliott, schedules) x residual targets 1%, 0.1%, 0.01% x delay budgets 10, 30, 100 ms: --fec target and gmiad against the cheapest fixed code in hindsight",
            make: || Scenario::RobustnessTunnel(Box::default()),
        },
        Builtin {
            name: "miyoshi",
            about: "Miyoshi et al.'s adaptive BCH FEC with ELN and Snoop: Tables 3-4, Figures 2-3, window vs speed, a changing channel",
            make: || Scenario::Miyoshi(Box::default()),
        },
        Builtin {
            name: "leigh",
            about: "Leigh et al.'s tele-immersion experiments: XOR FEC over UDP in Figure 5 (UDP vs one parity per 3, with and without congestion), SMPTE 2022-1 columns and their latency price, Figure 4 (latency and jitter of TCP, UDP and FEC against packet size), and Figure 3 (DiffServ EF through priority and WFQ routers and an interior router that ignores the mark)",
            make: || Scenario::Leigh(Box::default()),
        },
        Builtin {
            name: "bulk",
            about: "bulk data over a long fat network: Leigh et al.'s Figure 6, Reliable Blast UDP moving 50 MB at 20-90 Mbit/s over 100 Mbit/s and 150 ms with competing traffic (fixed and adaptive rate), against TCP with a default and a BDP window (part fig6); and the paper's 45 Mbit/s x 150 ms LFN example: TCP with a 64 KiB and a BDP window, striped TCP over 2, 4, 8 streams and RBUDP, at 0, 0.1% and 1% random loss (part lfn)",
            make: || Scenario::Bulk(Box::default()),
        },
        Builtin {
            name: "fec-codes",
            about: "a sliding-window code (RFC 8681) against a Reed-Solomon block code at equal overhead and span, on the channel family: residual loss, and how long rebuilt packets wait against 10/30/100 ms budgets",
            make: || Scenario::FecCodes(Box::default()),
        },
        Builtin {
            name: "robustness-afec",
            about: "issue 15's channel family for AFEC: afec, afec-frac, afec-pred and afec-robust on Bernoulli, Gilbert, Gilbert-Elliott and time-varying channels with 4 MER bands at 256 and 56 kbit/s, each against the cheapest fixed code set size that meets the band",
            make: || Scenario::RobustnessAfec(Box::default()),
        },
        Builtin {
            name: "tele-immersion",
            about: "issue 16's proof: one session with a telepointer, state, camera, edits and bulk channel over a path whose loss, rate and delay change; the model-based selector against Leigh et al.'s heuristic and each fixed mechanism, and on a stationary path",
            make: || Scenario::TeleImmersion(Box::default()),
        },
    ]
}

/// Why a scenario could not be built or run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScenarioError {
    /// No built-in scenario has this name.
    #[error(
        "unknown scenario {name:?}; `groupwire sim list` shows the built-in ones ({known}), or pass a .toml file"
    )]
    Unknown {
        /// What was asked for.
        name: String,
        /// The known names.
        known: String,
    },
    /// The TOML text or a `--set` value does not fit the scenario.
    #[error("{0}")]
    Parse(String),
    /// A parameter is impossible (zero flows, warm-up longer than the run, ...).
    #[error("invalid parameter {key}: {why}")]
    Invalid {
        /// The parameter.
        key: &'static str,
        /// What is wrong and what would be valid.
        why: String,
    },
    /// A loss model could not be built (bad trace file, ...).
    #[error(transparent)]
    Loss(#[from] groupwire_link::loss::LossError),
}

/// [`ScenarioError::Invalid`] naming `key`, saying `why`.
pub(crate) fn invalid(key: &'static str, why: impl ToString) -> ScenarioError {
    ScenarioError::Invalid {
        key,
        why: why.to_string(),
    }
}

/// The validators' one check: `Ok` when `ok`, else [`invalid`]`(key, why)`.
pub(crate) fn require(ok: bool, key: &'static str, why: &str) -> Result<(), ScenarioError> {
    if ok { Ok(()) } else { Err(invalid(key, why)) }
}

/// A latency summary's p50 and p99 (and its max, `with_max`) as table
/// cells in ms; `null` where nothing was measured.
pub(crate) fn latency_cells(
    s: &crate::metrics::LatencySummary,
    with_max: bool,
) -> Vec<serde_json::Value> {
    let mut ms = vec![s.p50_ms, s.p99_ms];
    if with_max {
        ms.push(s.max_ms);
    }
    ms.into_iter()
        .map(|v| {
            if s.count == 0 {
                serde_json::Value::Null
            } else {
                serde_json::json!(v)
            }
        })
        .collect()
}

/// A run's progress callback: it receives the simulated time now and then
/// (or a count, as [`Scenario::progress_unit`] says).
pub(crate) type Progress<'a> = &'a mut dyn FnMut(Instant);

/// A scenario's finished [`Report`]: `scenario` run with `seed`, with its
/// summary, tables and plots.
pub(crate) fn report(
    scenario: &str,
    seed: u64,
    summary: serde_json::Map<String, serde_json::Value>,
    tables: Vec<Table>,
    plots: Vec<Plot>,
) -> Report {
    Report {
        scenario: scenario.into(),
        seed,
        summary,
        tables,
        plots,
    }
}

/// The check of a `parts` list: at least one part, each one of `known`;
/// else [`invalid`]`("parts", why)`.
pub(crate) fn require_parts(
    parts: &[String],
    known: &[&str],
    why: &str,
) -> Result<(), ScenarioError> {
    let ok = !parts.is_empty() && parts.iter().all(|p| known.contains(&p.as_str()));
    require(ok, "parts", why)
}

impl Scenario {
    /// The built-in scenario `name`.
    pub fn builtin(name: &str) -> Result<Self, ScenarioError> {
        let all = builtins();
        all.iter()
            .find(|b| b.name == name)
            .map(|b| (b.make)())
            .ok_or_else(|| ScenarioError::Unknown {
                name: name.to_owned(),
                known: all.iter().map(|b| b.name).collect::<Vec<_>>().join(", "),
            })
    }

    /// Reads a scenario from TOML text. Missing fields take their defaults;
    /// unknown fields are errors.
    pub fn from_toml(text: &str) -> Result<Self, ScenarioError> {
        toml::from_str(text).map_err(|e| ScenarioError::Parse(one_line(&e.to_string())))
    }

    /// The scenario as TOML (what `groupwire sim show` prints).
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("scenarios serialize to TOML")
    }

    /// The kind's name, as in the `scenario` key.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::TcpDumbbell(_) => "tcp-dumbbell",
            Self::LinkModels(_) => "link-models",
            Self::AwarenessPath(_) => "awareness-path",
            Self::Dyck(_) => "dyck",
            Self::Geneva(_) => "geneva",
            Self::Tunnel(_) => "tunnel",
            Self::RobustnessTunnel(_) => "robustness-tunnel",
            Self::Miyoshi(_) => "miyoshi",
            Self::Leigh(_) => "leigh",
            Self::Bulk(_) => "bulk",
            Self::FecCodes(_) => "fec-codes",
            Self::RobustnessAfec(_) => "robustness-afec",
            Self::TeleImmersion(_) => "tele-immersion",
        }
    }

    /// Sets `key` (dotted for nested tables: `short_flows.rate`) to `value`,
    /// given as a TOML value or a bare string (`rtt=100ms`, `flows=100`,
    /// `sack=false`).
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ScenarioError> {
        self.set_value(key, parse_set_value(value))
    }

    /// Sets `key` (dotted for nested tables) to a TOML value, as
    /// [`set`](Self::set) does with text. A table value replaces the whole
    /// table; experiment plans flatten theirs into one key per leaf.
    pub fn set_value(&mut self, key: &str, parsed: toml::Value) -> Result<(), ScenarioError> {
        let mut doc = toml::Value::try_from(&*self).expect("scenarios serialize to TOML values");
        let mut table = doc.as_table_mut().expect("a scenario is a table");
        let mut parts = key.split('.').peekable();
        while let Some(part) = parts.next() {
            if part == "scenario" {
                return Err(ScenarioError::Parse(
                    "the scenario kind cannot be changed with --set".into(),
                ));
            }
            if parts.peek().is_none() {
                table.insert(part.to_owned(), parsed.clone());
                break;
            }
            let entry = table
                .entry(part.to_owned())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            table = entry.as_table_mut().ok_or_else(|| {
                ScenarioError::Parse(format!("--set {key}: {part} is not a table"))
            })?;
        }
        *self = doc.try_into().map_err(|e: toml::de::Error| {
            ScenarioError::Parse(format!(
                "--set {key}={}: {}",
                set_value_text(&parsed),
                one_line(&e.to_string())
            ))
        })?;
        Ok(())
    }

    /// Checks every parameter; the first impossible one is the error.
    pub fn validate(&self) -> Result<(), ScenarioError> {
        match self {
            Self::TcpDumbbell(s) => s.validate(),
            Self::LinkModels(s) => s.validate(),
            Self::AwarenessPath(s) => s.validate(),
            Self::Dyck(s) => s.validate(),
            Self::Geneva(s) => s.validate(),
            Self::Tunnel(s) => s.validate(),
            Self::RobustnessTunnel(s) => s.validate(),
            Self::Miyoshi(s) => s.validate(),
            Self::Leigh(s) => s.validate(),
            Self::Bulk(s) => s.validate(),
            Self::FecCodes(s) => s.validate(),
            Self::RobustnessAfec(s) => s.validate(),
            Self::TeleImmersion(s) => s.validate(),
        }
    }

    /// How far the run goes, in the units its progress reports: simulated
    /// time, or for scenarios without time a count (packets drawn, as nanoseconds).
    pub fn duration(&self) -> Duration {
        match self {
            Self::TcpDumbbell(s) => s.total_duration(),
            Self::LinkModels(s) => Duration::from_nanos(s.total_packets()),
            Self::AwarenessPath(s) => s.duration,
            Self::Dyck(s) => Duration::from_nanos(s.total_runs()),
            Self::Geneva(s) => Duration::from_nanos(s.total_runs()),
            Self::Tunnel(s) => Duration::from_nanos(s.total_runs()),
            Self::RobustnessTunnel(s) => Duration::from_nanos(s.total_runs()),
            Self::Miyoshi(s) => Duration::from_nanos(s.total_work()),
            Self::Leigh(s) => Duration::from_nanos(s.total_runs()),
            Self::Bulk(s) => Duration::from_nanos(s.total_runs()),
            Self::FecCodes(s) => Duration::from_nanos(s.total_runs()),
            Self::RobustnessAfec(s) => Duration::from_nanos(s.total_runs()),
            Self::TeleImmersion(s) => Duration::from_nanos(s.total_runs()),
        }
    }

    /// What [`duration`](Self::duration) counts, for progress bars.
    pub fn progress_unit(&self) -> ProgressUnit {
        match self {
            Self::TcpDumbbell(_) => ProgressUnit::SimulatedTime,
            Self::LinkModels(_) => ProgressUnit::Count,
            Self::AwarenessPath(_) => ProgressUnit::SimulatedTime,
            Self::Dyck(_)
            | Self::Geneva(_)
            | Self::Tunnel(_)
            | Self::RobustnessTunnel(_)
            | Self::Miyoshi(_)
            | Self::Leigh(_)
            | Self::Bulk(_)
            | Self::FecCodes(_)
            | Self::RobustnessAfec(_)
            | Self::TeleImmersion(_) => ProgressUnit::Count,
        }
    }

    /// Runs the scenario with `seed`. `progress` receives the simulated time now and then.
    pub fn run(
        &self,
        seed: u64,
        progress: &mut dyn FnMut(Instant),
    ) -> Result<Report, ScenarioError> {
        self.validate()?;
        match self {
            Self::TcpDumbbell(s) => s.run(seed, progress),
            Self::LinkModels(s) => s.run(seed, progress),
            Self::AwarenessPath(s) => s.run(seed, progress),
            Self::Dyck(s) => s.run(seed, progress),
            Self::Geneva(s) => s.run(seed, progress),
            Self::Tunnel(s) => s.run(seed, progress),
            Self::RobustnessTunnel(s) => s.run(seed, progress),
            Self::Miyoshi(s) => s.run(seed, progress),
            Self::Leigh(s) => s.run(seed, progress),
            Self::Bulk(s) => s.run(seed, progress),
            Self::FecCodes(s) => s.run(seed, progress),
            Self::RobustnessAfec(s) => s.run(seed, progress),
            Self::TeleImmersion(s) => s.run(seed, progress),
        }
    }
}

/// What a scenario's progress counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProgressUnit {
    /// Simulated time.
    SimulatedTime,
    /// Items (packets, runs), reported as nanoseconds of an [`Instant`].
    Count,
}

pub use groupwire_metrics::{Plot, PlotStyle, Report, Table};

/// Serde for durations as human strings (`10ms`, `1.5s`, `200us`): the one
/// duration grammar, shared with every command-line flag, lives in
/// [`groupwire_units::duration`].
pub use groupwire_units::duration as serde_duration;

/// A `--set` value: TOML if it parses as TOML (`100`, `false`, `[1, 2]`,
/// `"text"`), else the text itself as a string (`100ms`).
pub fn parse_set_value(text: &str) -> toml::Value {
    toml::from_str::<toml::Table>(&format!("v = {text}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(text.to_owned()))
}

/// The `--set` text that [`parse_set_value`] reads back as `value`:
/// strings bare unless that would read as another type, everything else as
/// TOML.
pub fn set_value_text(value: &toml::Value) -> String {
    match value {
        toml::Value::String(s) if parse_set_value(s) == *value => s.clone(),
        other => other.to_string(),
    }
}

/// Folds a multi-line parser message into one line, dropping the source
/// excerpt (`2 | flows = [oops` and the `^` marker under it).
fn one_line(s: &str) -> String {
    let is_excerpt = |l: &str| {
        let rest = l.trim_start_matches(|c: char| c.is_ascii_digit() || c == ' ');
        rest.starts_with('|')
    };
    let kept: Vec<&str> = s
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !is_excerpt(l))
        .collect();
    match kept.split_first() {
        Some((head, rest)) if !rest.is_empty() => format!("{head}: {}", rest.join(" ")),
        Some((head, _)) => (*head).to_owned(),
        None => String::new(),
    }
}

/// `f(0..n)` on `threads` worker threads (0: one per core), results in
/// index order whatever the thread count (as `miyoshi`'s runner does).
pub(crate) fn par_map<R: Send>(threads: usize, n: usize, f: impl Fn(usize) -> R + Sync) -> Vec<R> {
    let threads = match threads {
        0 => std::thread::available_parallelism().map_or(1, usize::from),
        t => t,
    }
    .clamp(1, n.max(1));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let (tx, rx) = std::sync::mpsc::channel();
    let mut results: Vec<Option<R>> = (0..n).map(|_| None).collect();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            let tx = tx.clone();
            let (next, f) = (&next, &f);
            scope.spawn(move || {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if i >= n || tx.send((i, f(i))).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        for (i, r) in rx {
            results[i] = Some(r);
        }
    });
    results
        .into_iter()
        .map(|r| r.expect("every index ran"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_changes_one_field_and_names_bad_keys() {
        let mut s = Scenario::builtin("tcp-dumbbell").unwrap();
        s.set("flows", "3").unwrap();
        s.set("rtt", "100ms").unwrap();
        let Scenario::TcpDumbbell(d) = &s else {
            panic!("tcp-dumbbell builds a TcpDumbbell")
        };
        assert_eq!(d.flows, 3);
        assert_eq!(d.rtt, Duration::from_millis(100));
        let e = s.set("no_such_key", "1").unwrap_err().to_string();
        assert!(e.contains("no_such_key"), "{e}");
        let e = s.set("bottleneck_rate", "0").unwrap_err().to_string();
        assert!(e.contains("out of range"), "{e}");
    }

    #[test]
    fn toml_round_trips_and_rejects_unknown_scenarios() {
        let s = Scenario::builtin("tcp-dumbbell").unwrap();
        assert_eq!(Scenario::from_toml(&s.to_toml()).unwrap(), s);
        assert!(
            Scenario::builtin("nope")
                .unwrap_err()
                .to_string()
                .contains("sim list")
        );
        assert!(Scenario::from_toml("scenario = \"nope\"").is_err());
    }
}
