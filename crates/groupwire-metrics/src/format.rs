//! Reports as people read them: numbers to a few places, rates in Mbit/s,
//! fractions in percent, and whole reports as Markdown.

use serde_json::Value;

use crate::{Report, Table};

impl Report {
    /// The run as Markdown: the summary, every table, and the plots as
    /// images (`FILE.png`, relative to where the report is written) when
    /// `plots` is set. Wall-clock figures are left out so the text depends
    /// only on the scenario and the seed.
    pub fn to_markdown(&self, plots: bool) -> String {
        let mut md = format!(
            "## {} (seed {})\n\n| quantity | value |\n|---|---|\n",
            self.scenario, self.seed
        );
        for (k, v) in &self.summary {
            md.push_str(&format!("| {k} | {} |\n", format_quantity(k, v)));
        }
        for t in &self.tables {
            md.push_str(&format!("\n### {}\n\n", t.file));
            md.push_str(&t.to_markdown());
        }
        if plots {
            md.push('\n');
            for p in &self.plots {
                md.push_str(&format!("![{}]({}.png)\n", p.title, p.file));
            }
        }
        md
    }

    /// The table whose file stem is `file`.
    pub fn table(&self, file: &str) -> Option<&Table> {
        self.tables.iter().find(|t| t.file == file)
    }
}

impl Table {
    /// The table as a Markdown table, cells by [`format_cell`].
    pub fn to_markdown(&self) -> String {
        let mut md = format!(
            "| {} |\n|{}\n",
            self.columns.join(" | "),
            "---|".repeat(self.columns.len())
        );
        for row in &self.rows {
            let cells: Vec<String> = row.iter().map(format_cell).collect();
            md.push_str(&format!("| {} |\n", cells.join(" | ")));
        }
        md
    }

    /// The index of column `name`.
    pub fn column(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c == name)
    }
}

/// A table cell: floats to four decimal places (scientific notation when
/// that would hide them), strings bare, a missing value as `-`.
pub fn format_cell(v: &Value) -> String {
    match v {
        Value::Number(n) if n.is_f64() => {
            let x = n.as_f64().unwrap_or(f64::NAN);
            if x != 0.0 && (x.abs() < 1e-3 || x.abs() >= 1e6) {
                format!("{x:.3e}")
            } else {
                format!("{x:.4}")
            }
        }
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

/// A summary quantity as a person reads it, by the key's suffix: `_bps`
/// in Mbit/s, `_rate` (and `utilization`) in percent, lists as their count,
/// minimum, mean and maximum.
pub fn format_quantity(key: &str, v: &Value) -> String {
    match v {
        Value::Array(xs) => {
            let nums: Vec<f64> = xs.iter().filter_map(Value::as_f64).collect();
            if nums.is_empty() {
                return v.to_string();
            }
            let min = nums.iter().copied().fold(f64::INFINITY, f64::min);
            let max = nums.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let mean = nums.iter().sum::<f64>() / nums.len() as f64;
            if key.ends_with("_bps") {
                format!(
                    "{} values: min {} mean {} max {}",
                    nums.len(),
                    mbps(min),
                    mbps(mean),
                    mbps(max)
                )
            } else {
                format!(
                    "{} values: min {min:.4} mean {mean:.4} max {max:.4}",
                    nums.len()
                )
            }
        }
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or(f64::NAN);
            if key.ends_with("_bps") {
                mbps(x)
            } else if key.ends_with("_rate") || key == "utilization" {
                format!("{:.4}%", x * 100.0)
            } else if n.is_f64() {
                format!("{x:.4}")
            } else {
                n.to_string()
            }
        }
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn mbps(bps: f64) -> String {
    format!("{:.3} Mbit/s", bps / 1e6)
}
