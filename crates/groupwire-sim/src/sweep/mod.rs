//! Experiment plans: named run sets of one scenario, as data.
//!
//! A [`Plan`] is a TOML file (`groupwire sim sweep PLAN.toml`): a scenario,
//! overrides every run shares, and a list of run sets, each with its own
//! overrides and, optionally, the paper's values for some cells, which the
//! report prints beside ours. Running the sets is the caller's business
//! (the CLI runs them on `--jobs` threads); this module expands a plan into
//! [`PlannedRun`]s, compares finished [`Report`]s with the references and
//! composes the Markdown page.
//!
//! ```toml
//! title = "GENEVA: block FEC with GMIAD"
//! scenario = "geneva"            # a built-in name (`groupwire sim list`)
//! seed = 1
//! tables = ["cells"]             # the tables the page shows (default: all)
//!
//! [set]                          # every run set starts from these
//! duration = "90s"
//!
//! [[run]]
//! name = "fig8"                  # also the run's output directory
//! title = "Fig. 8: 10 streams vs long-lived TCP, RTTmin 10 ms"
//! set = { rtt = "10ms", tcp_flows = [100, 150, 200, 250] }
//!
//! [[run.reference]]              # the paper's numbers for one row
//! source = "Table 1"
//! table = "cells"
//! match = { controller = "gmiad" }
//! values = { data_loss_rate = 0.0011, mean_fwnd = 10.19 }
//!
//! [[tally]]                      # a sum over run sets' summaries
//! label = "GMIAD meets both"
//! summary = "gmiad_meets_both"
//! of = "populations"
//! runs = ["fig*", "table*"]
//! ```

use std::fmt::Write as _;

use groupwire_metrics::{Report, format_cell, format_quantity};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::scenario::{Scenario, ScenarioError, parse_set_value, set_value_text};

/// An experiment plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// The page's title.
    pub title: String,
    /// The scenario every run set starts from: a built-in name.
    pub scenario: String,
    /// The seed of every run (each scenario derives its own per-run seeds).
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Markdown printed under the title (the setup, in words).
    #[serde(default)]
    pub intro: String,
    /// Markdown printed at the end (what differs from the paper, and why).
    #[serde(default)]
    pub notes: String,
    /// The report tables the page shows, by file stem; empty shows all.
    /// Every table is still written as CSV.
    #[serde(default)]
    pub tables: Vec<String>,
    /// Overrides every run set starts from (nested tables are dotted keys).
    #[serde(default)]
    pub set: toml::Table,
    /// The run sets, in page order.
    #[serde(rename = "run")]
    pub runs: Vec<RunSet>,
    /// Sums over run sets' summaries, printed at the top of the page.
    #[serde(default, rename = "tally")]
    pub tallies: Vec<Tally>,
}

fn default_seed() -> u64 {
    1
}

/// One run set: a name, a title and overrides on top of the plan's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunSet {
    /// A short name: the output directory and what `--only` selects.
    pub name: String,
    /// The section title.
    pub title: String,
    /// Markdown printed under the title.
    #[serde(default)]
    pub about: String,
    /// Overrides on top of the plan's.
    #[serde(default)]
    pub set: toml::Table,
    /// Shown tables for this set, replacing the plan's list when not empty.
    #[serde(default)]
    pub tables: Vec<String>,
    /// The paper's values for some rows of the report.
    #[serde(default, rename = "reference")]
    pub references: Vec<Reference>,
}

/// The paper's values for one row of a report table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reference {
    /// Where the numbers come from ("Table 1", "§4.2.1").
    pub source: String,
    /// The report table (file stem) holding our row.
    pub table: String,
    /// Column values that pick exactly one row.
    #[serde(default, rename = "match")]
    pub matches: toml::Table,
    /// The paper's value per column.
    pub values: toml::Table,
}

/// A sum of one summary quantity over run sets, optionally against the sum
/// of another ("12 of 13").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tally {
    /// What the sum means.
    pub label: String,
    /// The summary key summed.
    pub summary: String,
    /// The summary key of the whole ("of N").
    #[serde(default)]
    pub of: Option<String>,
    /// The run sets counted: names, or prefixes ending in `*`; empty
    /// counts all.
    #[serde(default)]
    pub runs: Vec<String>,
}

/// Why a plan cannot be run or reported.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// The TOML does not describe a plan.
    #[error("{0}")]
    Parse(String),
    /// The scenario or an override is wrong.
    #[error("run set {run}: {source}")]
    Scenario {
        /// The run set ("plan" for the plan's own settings).
        run: String,
        /// What is wrong.
        source: ScenarioError,
    },
    /// The plan contradicts itself or its reports.
    #[error("{0}")]
    Invalid(String),
}

/// A run set expanded into the scenario it runs.
#[derive(Debug, Clone)]
pub struct PlannedRun {
    /// The run set's name.
    pub name: String,
    /// The seed.
    pub seed: u64,
    /// The scenario with every override applied and validated.
    pub scenario: Scenario,
    /// The overrides as `--set KEY=VALUE` text, in order, for the command
    /// line that reproduces the run alone.
    pub overrides: Vec<(String, String)>,
}

impl PlannedRun {
    /// `groupwire sim run ...` reproducing this run on its own, writing to
    /// `out`.
    pub fn command_line(&self, base: &str, out: &str) -> String {
        let mut line = format!("groupwire sim run {base} --seed {}", self.seed);
        for (k, v) in &self.overrides {
            line.push_str(" --set ");
            line.push_str(&shell_word(&format!("{k}={v}")));
        }
        line.push_str(" --out ");
        line.push_str(&shell_word(out));
        line
    }
}

/// `word`, single-quoted when a shell would otherwise split or expand it.
fn shell_word(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "._=:/-+,@%".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

impl Plan {
    /// Reads a plan from TOML text; unknown keys are errors.
    pub fn from_toml(text: &str) -> Result<Self, PlanError> {
        let plan: Self = toml::from_str(text).map_err(|e| PlanError::Parse(e.to_string()))?;
        plan.check()?;
        Ok(plan)
    }

    fn check(&self) -> Result<(), PlanError> {
        if self.runs.is_empty() {
            return Err(PlanError::Invalid(
                "a plan needs at least one [[run]]".into(),
            ));
        }
        for (i, r) in self.runs.iter().enumerate() {
            let ok = |c: char| c.is_ascii_alphanumeric() || "._-".contains(c);
            if r.name.is_empty() || !r.name.chars().all(ok) || r.name.starts_with('.') {
                return Err(PlanError::Invalid(format!(
                    "run set name {:?}: use letters, digits, '.', '_' and '-' (it names a directory)",
                    r.name
                )));
            }
            if self.runs[..i].iter().any(|o| o.name == r.name) {
                return Err(PlanError::Invalid(format!(
                    "two run sets are named {:?}",
                    r.name
                )));
            }
            for reference in &r.references {
                for (k, v) in &reference.values {
                    if v.as_float().is_none() && v.as_integer().is_none() {
                        return Err(PlanError::Invalid(format!(
                            "run set {}: reference value {k} = {v} is not a number",
                            r.name
                        )));
                    }
                }
            }
        }
        for t in &self.tallies {
            if !t.runs.is_empty() && !self.runs.iter().any(|r| selects(&t.runs, &r.name)) {
                return Err(PlanError::Invalid(format!(
                    "tally {:?} counts runs {:?}, which name no run set",
                    t.label, t.runs
                )));
            }
        }
        Ok(())
    }

    /// The run sets named in `only` (every set when empty), each as the
    /// scenario `base` with the plan's overrides, the set's, then `extra`
    /// (the command line's `--set KEY=VALUE`, in order, values read by
    /// [`parse_set_value`]) applied and validated.
    pub fn expand(
        &self,
        base: &Scenario,
        only: &[String],
        extra: &[(String, String)],
    ) -> Result<Vec<PlannedRun>, PlanError> {
        if let Some(unknown) = only
            .iter()
            .find(|o| !self.runs.iter().any(|r| &r.name == *o))
        {
            return Err(PlanError::Invalid(format!(
                "no run set is named {unknown:?}; the plan has {}",
                self.runs
                    .iter()
                    .map(|r| r.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        let mut shared = Vec::new();
        flatten("", &self.set, &mut shared);
        let mut out = Vec::new();
        for r in &self.runs {
            if !only.is_empty() && !only.contains(&r.name) {
                continue;
            }
            let mut pairs = shared.clone();
            flatten("", &r.set, &mut pairs);
            pairs.extend(extra.iter().map(|(k, v)| (k.clone(), parse_set_value(v))));
            let mut scenario = base.clone();
            let mut overrides = Vec::new();
            for (k, v) in pairs {
                scenario
                    .set_value(&k, v.clone())
                    .map_err(|source| PlanError::Scenario {
                        run: r.name.clone(),
                        source,
                    })?;
                overrides.push((k, set_value_text(&v)));
            }
            scenario.validate().map_err(|source| PlanError::Scenario {
                run: r.name.clone(),
                source,
            })?;
            out.push(PlannedRun {
                name: r.name.clone(),
                seed: self.seed,
                scenario,
                overrides,
            });
        }
        Ok(out)
    }

    /// The run set named `name`.
    pub fn run_set(&self, name: &str) -> Option<&RunSet> {
        self.runs.iter().find(|r| r.name == name)
    }
}

/// `table`'s leaves as dotted keys, in order: `{a = {b = 1}}` gives `a.b = 1`.
fn flatten(prefix: &str, table: &toml::Table, out: &mut Vec<(String, toml::Value)>) {
    for (k, v) in table {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            toml::Value::Table(t) => flatten(&key, t, out),
            other => out.push((key, other.clone())),
        }
    }
}

/// Whether `name` is one of `patterns` (exact, or a prefix ending in `*`).
fn selects(patterns: &[String], name: &str) -> bool {
    patterns.iter().any(|p| match p.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => p == name,
    })
}

/// One reference value beside ours.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Compared {
    /// The column.
    pub column: String,
    /// The paper's value.
    pub reference: f64,
    /// Ours (`None` if the cell is empty or not a number).
    pub ours: Option<f64>,
}

/// A reference matched against a report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// Where the paper's numbers come from.
    pub source: String,
    /// The table.
    pub table: String,
    /// The matched row's key columns and values, as text.
    pub key: Vec<(String, String)>,
    /// Each value, paper and ours.
    pub values: Vec<Compared>,
}

/// Whether a report cell holds the value a plan names.
fn cell_matches(cell: &Value, want: &toml::Value) -> bool {
    match (cell, want) {
        (Value::String(a), toml::Value::String(b)) => a == b,
        (Value::Bool(a), toml::Value::Boolean(b)) => a == b,
        (Value::Number(a), toml::Value::Integer(b)) => a.as_f64() == Some(*b as f64),
        (Value::Number(a), toml::Value::Float(b)) => a.as_f64() == Some(*b),
        (Value::String(a), other) => *a == set_value_text(other),
        _ => false,
    }
}

/// Matches `reference` against `report`: its table must exist, every named
/// column must exist, and the key must pick exactly one row.
pub fn compare(reference: &Reference, report: &Report) -> Result<Comparison, PlanError> {
    let invalid = |why: String| {
        PlanError::Invalid(format!(
            "reference ({}) on table {}: {why}",
            reference.source, reference.table
        ))
    };
    let table = report.table(&reference.table).ok_or_else(|| {
        invalid(format!(
            "the {} report has no such table (it has {})",
            report.scenario,
            report
                .tables
                .iter()
                .map(|t| t.file.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))
    })?;
    let col = |name: &str| {
        table.column(name).ok_or_else(|| {
            invalid(format!(
                "no column {name} (columns: {})",
                table.columns.join(", ")
            ))
        })
    };
    let keys = reference
        .matches
        .iter()
        .map(|(k, v)| Ok((col(k)?, k, v)))
        .collect::<Result<Vec<_>, PlanError>>()?;
    let rows: Vec<&Vec<Value>> = table
        .rows
        .iter()
        .filter(|row| {
            keys.iter()
                .all(|(i, _, v)| row.get(*i).is_some_and(|c| cell_matches(c, v)))
        })
        .collect();
    let [row] = rows.as_slice() else {
        return Err(invalid(format!(
            "match {} picks {} rows, not one",
            toml::Value::Table(reference.matches.clone()),
            rows.len()
        )));
    };
    let values = reference
        .values
        .iter()
        .map(|(k, v)| {
            let i = col(k)?;
            Ok(Compared {
                column: k.clone(),
                reference: v
                    .as_float()
                    .or(v.as_integer().map(|x| x as f64))
                    .unwrap_or(f64::NAN),
                ours: row.get(i).and_then(Value::as_f64),
            })
        })
        .collect::<Result<Vec<_>, PlanError>>()?;
    Ok(Comparison {
        source: reference.source.clone(),
        table: reference.table.clone(),
        key: keys
            .iter()
            .map(|(_, k, v)| ((*k).clone(), set_value_text(v)))
            .collect(),
        values,
    })
}

/// A finished run set.
#[derive(Debug, Clone)]
pub struct Finished {
    /// What ran.
    pub run: PlannedRun,
    /// What it produced.
    pub report: Report,
}

/// A tally's result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TallyResult {
    /// The tally's label.
    pub label: String,
    /// The sum.
    pub count: f64,
    /// The sum of the whole, when the tally names one.
    pub of: Option<f64>,
    /// The run sets counted.
    pub runs: Vec<String>,
}

/// Sums `tally` over the finished runs it selects (runs without the key
/// count as 0).
pub fn tally(tally: &Tally, done: &[Finished]) -> TallyResult {
    let picked: Vec<&Finished> = done
        .iter()
        .filter(|f| tally.runs.is_empty() || selects(&tally.runs, &f.run.name))
        .collect();
    let sum = |key: &str| {
        picked
            .iter()
            .filter_map(|f| f.report.summary.get(key).and_then(Value::as_f64))
            .sum::<f64>()
    };
    TallyResult {
        label: tally.label.clone(),
        count: sum(&tally.summary),
        of: tally.of.as_deref().map(sum),
        runs: picked.iter().map(|f| f.run.name.clone()).collect(),
    }
}

/// What a sweep produced, as data: every run set's comparisons and the
/// tallies (written as `sweep.json`).
#[derive(Debug, Clone, Serialize)]
pub struct SweepSummary {
    /// The plan's title.
    pub title: String,
    /// The tallies.
    pub tallies: Vec<TallyResult>,
    /// Per run set: name and comparisons.
    pub runs: Vec<(String, Vec<Comparison>)>,
}

/// Compares every reference of every finished run set and sums the tallies.
pub fn summarize(plan: &Plan, done: &[Finished]) -> Result<SweepSummary, PlanError> {
    let mut runs = Vec::new();
    for f in done {
        let set = plan
            .run_set(&f.run.name)
            .ok_or_else(|| PlanError::Invalid(format!("no run set {}", f.run.name)))?;
        let comparisons = set
            .references
            .iter()
            .map(|r| compare(r, &f.report))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| PlanError::Invalid(format!("run set {}: {e}", f.run.name)))?;
        runs.push((f.run.name.clone(), comparisons));
    }
    Ok(SweepSummary {
        title: plan.title.clone(),
        tallies: plan.tallies.iter().map(|t| tally(t, done)).collect(),
        runs,
    })
}

/// The sweep as one Markdown page: title, intro, tallies, then per run set
/// its summary, the shown tables, the paper's values beside ours and
/// the plots, then the notes. `command` is how the page was made; `out` is
/// the sweep's output directory, holding one directory per run set (the
/// command lines write there) and the page itself (plots are linked as
/// `NAME/FILE.png`, relative to it).
pub fn markdown(
    plan: &Plan,
    done: &[Finished],
    summary: &SweepSummary,
    command: &str,
    out: &str,
) -> String {
    let mut md = String::new();
    let w = &mut md;
    let _ = writeln!(w, "# {}\n", plan.title);
    let _ = writeln!(
        w,
        "Produced by `{command}`. Each run set below is one command:\n\n```sh"
    );
    for f in done {
        let dir = format!("{}/{}", out.trim_end_matches('/'), f.run.name);
        let _ = writeln!(w, "{}", f.run.command_line(&plan.scenario, &dir));
    }
    let _ = writeln!(w, "```\n");
    if !plan.intro.trim().is_empty() {
        let _ = writeln!(w, "{}\n", plan.intro.trim());
    }
    if !summary.tallies.is_empty() {
        let _ = writeln!(
            w,
            "## Tallies\n\n| | count | of | run sets |\n|---|---|---|---|"
        );
        for t in &summary.tallies {
            let _ = writeln!(
                w,
                "| {} | {} | {} | {} |",
                t.label,
                number(t.count),
                t.of.map_or("-".into(), number),
                t.runs.join(", ")
            );
        }
        let _ = writeln!(w);
    }
    for (f, (_, comparisons)) in done.iter().zip(&summary.runs) {
        let Some(set) = plan.run_set(&f.run.name) else {
            continue;
        };
        let _ = writeln!(w, "## {}\n", set.title);
        if !set.about.trim().is_empty() {
            let _ = writeln!(w, "{}\n", set.about.trim());
        }
        if !f.report.summary.is_empty() {
            let _ = writeln!(w, "| quantity | value |\n|---|---|");
            for (k, v) in &f.report.summary {
                let _ = writeln!(w, "| {k} | {} |", format_quantity(k, v));
            }
            let _ = writeln!(w);
        }
        let shown = if set.tables.is_empty() {
            &plan.tables
        } else {
            &set.tables
        };
        for t in &f.report.tables {
            if shown.is_empty() || shown.contains(&t.file) {
                let _ = writeln!(w, "`{}`:\n\n{}", t.file, t.to_markdown());
            }
        }
        for c in comparisons_by_source(comparisons) {
            let _ = writeln!(w, "{c}");
        }
        for p in &f.report.plots {
            let _ = writeln!(w, "![{}]({}/{}.png)", p.title, f.run.name, p.file);
        }
        let _ = writeln!(w);
    }
    if !plan.notes.trim().is_empty() {
        let _ = writeln!(w, "{}", plan.notes.trim());
    }
    md
}

/// One Markdown table per (source, table, columns) of consecutive
/// comparisons: the key columns, then `paper / ours` per value.
fn comparisons_by_source(comparisons: &[Comparison]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut last: Option<(String, Vec<String>, Vec<String>)> = None;
    for c in comparisons {
        let keys: Vec<String> = c.key.iter().map(|(k, _)| k.clone()).collect();
        let cols: Vec<String> = c.values.iter().map(|v| v.column.clone()).collect();
        let head = (c.source.clone(), keys.clone(), cols.clone());
        if last.as_ref() != Some(&head) {
            let mut t = format!("{}, beside ours (paper / ours):\n\n|", c.source);
            for k in keys.iter().chain(&cols) {
                t.push_str(&format!(" {k} |"));
            }
            t.push_str(&format!("\n|{}\n", "---|".repeat(keys.len() + cols.len())));
            out.push(t);
            last = Some(head);
        }
        let mut row = String::from("|");
        for (_, v) in &c.key {
            row.push_str(&format!(" {v} |"));
        }
        for v in &c.values {
            let ours = v.ours.map_or("-".into(), |x| format_cell(&Value::from(x)));
            row.push_str(&format!(
                " {} / {ours} |",
                format_cell(&Value::from(v.reference))
            ));
        }
        row.push('\n');
        if let Some(t) = out.last_mut() {
            t.push_str(&row);
        }
    }
    out
}

fn number(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        format_cell(&Value::from(x))
    }
}

#[cfg(test)]
mod tests;
