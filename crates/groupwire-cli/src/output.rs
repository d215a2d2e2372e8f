//! Writing a run's results: summary table, JSON, CSV and PNG.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use groupwire_metrics::{Report, Table, format_cell, format_quantity};
use groupwire_sim::scenario::Scenario;
use serde_json::Value;

use crate::plot;

/// Writes `summary.json`, `scenario.toml`, `report.md`, one CSV per table and per plot,
/// and a PNG per plot. Returns the number of files written.
pub(crate) fn write_all(
    dir: &Path,
    scenario: &Scenario,
    report: &Report,
    wall: Duration,
    plots: bool,
) -> anyhow::Result<usize> {
    let mut summary = report.summary.clone();
    summary.insert("seed".into(), Value::from(report.seed));
    summary.insert("wall_seconds".into(), Value::from(wall.as_secs_f64()));
    if let Some(ev) = summary.get("events").and_then(Value::as_f64) {
        summary.insert(
            "events_per_sec".into(),
            Value::from(ev / wall.as_secs_f64().max(1e-9)),
        );
    }
    let n = write_files(dir, report, &summary, plots)?;
    let p = dir.join("scenario.toml");
    std::fs::write(
        &p,
        format!("# seed = {}\n{}", report.seed, scenario.to_toml()),
    )
    .with_context(|| format!("cannot write {}", p.display()))?;
    Ok(n + 1)
}

/// Writes `summary.json` (the report's summary and its seed), `report.md`,
/// one CSV per table and per plot, and a PNG per plot. Returns the number
/// of files written.
pub(crate) fn write_report(dir: &Path, report: &Report, plots: bool) -> anyhow::Result<usize> {
    let mut summary = report.summary.clone();
    summary.insert("seed".into(), Value::from(report.seed));
    write_files(dir, report, &summary, plots)
}

/// `summary` as `summary.json`; the rest from `report` (whose own summary
/// is what `report.md` shows).
fn write_files(
    dir: &Path,
    report: &Report,
    summary: &serde_json::Map<String, Value>,
    plots: bool,
) -> anyhow::Result<usize> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create output directory {}", dir.display()))?;
    let mut n = 0;
    let write = |name: &str, bytes: &[u8]| -> anyhow::Result<()> {
        let p = dir.join(name);
        std::fs::write(&p, bytes).with_context(|| format!("cannot write {}", p.display()))
    };
    write(
        "summary.json",
        serde_json::to_string_pretty(summary)?.as_bytes(),
    )?;
    write("report.md", report.to_markdown(plots).as_bytes())?;
    n += 2;
    for t in &report.tables {
        let mut w = csv::Writer::from_writer(Vec::new());
        w.write_record(&t.columns)?;
        for row in &t.rows {
            w.write_record(row.iter().map(cell))?;
        }
        write(&format!("{}.csv", t.file), &w.into_inner()?)?;
        n += 1;
    }
    for p in &report.plots {
        let mut w = csv::Writer::from_writer(Vec::new());
        w.write_record(["series", "t", "value"])?;
        for s in &p.series {
            for (t, v) in &s.points {
                w.write_record([s.name.as_str(), &t.to_string(), &v.to_string()])?;
            }
        }
        write(&format!("{}.csv", p.file), &w.into_inner()?)?;
        n += 1;
        if plots {
            let path = dir.join(format!("{}.png", p.file));
            plot::line_chart(&path, p)
                .with_context(|| format!("cannot draw {}", path.display()))?;
            n += 1;
        }
    }
    Ok(n)
}

fn cell(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Prints the summary as an aligned two-column table; lists are summarized.
pub(crate) fn print_summary(
    out: &mut impl Write,
    report: &Report,
    wall: Duration,
) -> anyhow::Result<()> {
    writeln!(out, "{} (seed {})", report.scenario, report.seed)?;
    let width = report
        .summary
        .keys()
        .map(String::len)
        .max()
        .unwrap_or(0)
        .max(14);
    for (k, v) in &report.summary {
        writeln!(out, "  {k:<width$}  {}", format_quantity(k, v))?;
    }
    match report.summary.get("events").and_then(Value::as_f64) {
        Some(events) => writeln!(
            out,
            "  {:<width$}  {:.2} s ({:.2} M events/s)",
            "wall_time",
            wall.as_secs_f64(),
            events / wall.as_secs_f64().max(1e-9) / 1e6
        )?,
        None => writeln!(
            out,
            "  {:<width$}  {:.2} s",
            "wall_time",
            wall.as_secs_f64()
        )?,
    }
    for t in report
        .tables
        .iter()
        .filter(|t| t.rows.len() <= MAX_PRINTED_ROWS)
    {
        writeln!(out, "\n{}:", t.file)?;
        print_table(out, t)?;
    }
    Ok(())
}

/// Tables up to this many rows are printed as well as written.
const MAX_PRINTED_ROWS: usize = 20;

fn print_table(out: &mut impl Write, t: &Table) -> anyhow::Result<()> {
    let cells: Vec<Vec<String>> = t
        .rows
        .iter()
        .map(|r| r.iter().map(format_cell).collect())
        .collect();
    let widths: Vec<usize> = t
        .columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            cells
                .iter()
                .map(|r| r.get(i).map_or(0, String::len))
                .max()
                .unwrap_or(0)
                .max(c.len())
        })
        .collect();
    let line = |out: &mut dyn Write, row: &[String]| -> std::io::Result<()> {
        let mut s = String::from(" ");
        for (cell, w) in row.iter().zip(&widths) {
            s.push_str(&format!(" {cell:>w$}"));
        }
        writeln!(out, "{}", s.trim_end())
    };
    line(out, &t.columns)?;
    for r in &cells {
        line(out, r)?;
    }
    Ok(())
}
