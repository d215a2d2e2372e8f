//! The report model: what a run produced (headline numbers, tables,
//! plots), rendered by the CLI as text, JSON, CSV and PNG.

use serde::Serialize;

use crate::TimeSeries;

/// How a plot draws its series.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum PlotStyle {
    /// Lines through the points.
    #[default]
    Lines,
    /// Markers only (scatter plots, categories).
    Points,
}

/// One plot: series sharing axes.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Plot {
    /// File stem for the CSV and PNG.
    pub file: String,
    /// Title.
    pub title: String,
    /// X axis label.
    pub x_label: String,
    /// Y axis label.
    pub y_label: String,
    /// The lines.
    pub series: Vec<TimeSeries>,
    /// Lines or points.
    pub style: PlotStyle,
    /// When not empty, x values are indices into these labels.
    pub x_categories: Vec<String>,
    /// X positions of vertical marker lines (events such as a change of
    /// code set size).
    pub markers: Vec<f64>,
    /// Draw the x axis on a logarithmic scale (bit error rates); points
    /// with x <= 0 are left out of the drawing, not of the CSV.
    pub log_x: bool,
}

/// A table for CSV output.
#[derive(Debug, Clone, Serialize)]
pub struct Table {
    /// File stem.
    pub file: String,
    /// Column names.
    pub columns: Vec<String>,
    /// Rows of cells.
    pub rows: Vec<Vec<serde_json::Value>>,
}

impl Table {
    /// The table `file` with `columns` and `rows`.
    pub fn new(
        file: impl Into<String>,
        columns: &[&str],
        rows: Vec<Vec<serde_json::Value>>,
    ) -> Self {
        Self {
            file: file.into(),
            columns: columns.iter().map(|c| (*c).to_owned()).collect(),
            rows,
        }
    }
}

/// What a run produced.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The scenario kind.
    pub scenario: String,
    /// The seed it ran with.
    pub seed: u64,
    /// Headline numbers in display order (machine-readable keys).
    pub summary: serde_json::Map<String, serde_json::Value>,
    /// Tables for CSV files.
    pub tables: Vec<Table>,
    /// Plots.
    pub plots: Vec<Plot>,
}

impl Report {
    /// An empty report of `scenario` run with `seed`; the run fills in its
    /// summary, tables and plots.
    pub fn new(scenario: impl Into<String>, seed: u64) -> Self {
        Self {
            scenario: scenario.into(),
            seed,
            summary: serde_json::Map::new(),
            tables: Vec::new(),
            plots: Vec::new(),
        }
    }
}
