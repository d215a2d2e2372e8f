//! PNG line charts with plotters, using an embedded font so they render
//! on machines without system fonts; and `groupwire plot`, which draws one
//! from any CSV file's columns (the relay bench's series, a sim run's
//! tables).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Once;

use anyhow::{Context, Result, anyhow};
use clap::Args;
use groupwire_metrics::{Plot, PlotStyle, TimeSeries};
use plotters::prelude::*;
use plotters::style::{FontStyle, register_font};

static FONT: Once = Once::new();
const DEJAVU_SANS: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");

fn ensure_font() {
    FONT.call_once(|| {
        if register_font("sans-serif", FontStyle::Normal, DEJAVU_SANS).is_err() {
            tracing::warn!("embedded font failed to load; plot text may be missing");
        }
    });
}

/// Draws `plot` into `path` (PNG, 1000x600): lines or points, numeric or
/// categorical x axis, and vertical marker lines.
pub(crate) fn line_chart(path: &Path, plot: &Plot) -> anyhow::Result<()> {
    ensure_font();
    let err = |e: &dyn std::fmt::Display| anyhow::anyhow!("{e}");
    let root = BitMapBackend::new(path, (1000, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    // A logarithmic x axis is drawn as log10(x), labelled back in x.
    let to_x = |x: f64| if plot.log_x { x.log10() } else { x };
    let pts = plot
        .series
        .iter()
        .flat_map(|s| s.points.iter())
        .map(|&(x, y)| (to_x(x), y));
    let (mut x0, mut x1, mut y0, mut y1) =
        (f64::INFINITY, f64::NEG_INFINITY, 0.0f64, f64::NEG_INFINITY);
    for (x, y) in pts.filter(|(x, y)| x.is_finite() && y.is_finite()) {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if !x0.is_finite() {
        (x0, x1, y1) = (0.0, 1.0, 1.0);
    }
    let categorical = !plot.x_categories.is_empty();
    if categorical {
        // One slot per category, with half a slot of margin on each side.
        (x0, x1) = (-0.5, plot.x_categories.len() as f64 - 0.5);
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    if y1 <= y0 {
        y1 = y0 + 1.0;
    }
    y1 *= 1.05;
    let mut chart = ChartBuilder::on(&root)
        .caption(&plot.title, ("sans-serif", 24))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(|e| err(&e))?;
    let cats = &plot.x_categories;
    let label_x = |x: &f64| -> String {
        if categorical {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 {
                return cats.get(i as usize).cloned().unwrap_or_default();
            }
            return String::new();
        }
        if plot.log_x {
            // Decades only: 1e-6, 1e-5, ...
            let e = x.round();
            return if (x - e).abs() < 1e-6 {
                format!("1e{e}")
            } else {
                String::new()
            };
        }
        format!("{x}")
    };
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(&plot.x_label)
        .y_desc(&plot.y_label)
        .label_style(("sans-serif", 15));
    if categorical {
        mesh.x_labels(cats.len().max(2) * 2 + 1)
            .x_label_formatter(&label_x)
            .disable_x_mesh();
    } else if plot.log_x {
        // Enough labels that every decade gets one.
        let decades = (x1 - x0).ceil() as usize;
        mesh.x_labels(decades * 4 + 1).x_label_formatter(&label_x);
    }
    mesh.draw().map_err(|e| err(&e))?;
    for &m in &plot.markers {
        chart
            .draw_series(LineSeries::new(
                [(m, y0), (m, y1)],
                BLACK.mix(0.4).stroke_width(1),
            ))
            .map_err(|e| err(&e))?;
    }
    for (i, s) in plot.series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let legend = move |(x, y): (i32, i32)| {
            PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
        };
        let finite = s
            .points
            .iter()
            .map(|&(x, y)| (to_x(x), y))
            .filter(|(x, y)| x.is_finite() && y.is_finite());
        match plot.style {
            PlotStyle::Points => chart
                .draw_series(finite.map(|p| Circle::new(p, 4, color.filled())))
                .map_err(|e| err(&e))?
                .label(s.name.clone())
                .legend(legend),
            // Thin lines: plotters does not clip thick ones to the plot area.
            _ => chart
                .draw_series(LineSeries::new(finite, color.stroke_width(1)))
                .map_err(|e| err(&e))?
                .label(s.name.clone())
                .legend(legend),
        };
    }
    if plot.series.len() > 1 {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .label_font(("sans-serif", 15))
            .draw()
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// Draw a PNG line or point chart from a CSV file's columns.
///
/// Example: groupwire plot --csv fig6.csv --x size --y small,large --out fig6.png
#[derive(Debug, Args)]
pub(crate) struct PlotArgs {
    /// CSV file with a header row.
    #[arg(long)]
    csv: PathBuf,
    /// Column for the x axis.
    #[arg(long)]
    x: String,
    /// Columns to draw, one series each.
    #[arg(long, value_delimiter = ',', required = true)]
    y: Vec<String>,
    /// Only rows whose column --filter-col equals --filter-value.
    #[arg(long, requires = "filter_value")]
    filter_col: Option<String>,
    /// See --filter-col.
    #[arg(long)]
    filter_value: Option<String>,
    /// Split series by this column's values (one line per value and y column).
    #[arg(long)]
    split: Option<String>,
    /// Chart title.
    #[arg(long, default_value = "")]
    title: String,
    /// X axis label (default: the column name).
    #[arg(long)]
    x_label: Option<String>,
    /// Y axis label.
    #[arg(long, default_value = "")]
    y_label: String,
    /// Markers instead of lines.
    #[arg(long)]
    points: bool,
    /// PNG to write.
    #[arg(long)]
    out: PathBuf,
}

pub(crate) fn run_plot(a: PlotArgs) -> Result<()> {
    let mut rd =
        csv::Reader::from_path(&a.csv).with_context(|| format!("reading {}", a.csv.display()))?;
    let headers = rd.headers()?.clone();
    let col = |name: &str| {
        headers
            .iter()
            .position(|h| h == name)
            .ok_or_else(|| anyhow!("{} has no column {name:?}", a.csv.display()))
    };
    let xi = col(&a.x)?;
    let yis = a.y.iter().map(|y| col(y)).collect::<Result<Vec<_>>>()?;
    let fi = a.filter_col.as_deref().map(col).transpose()?;
    let si = a.split.as_deref().map(col).transpose()?;
    let mut series: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    for rec in rd.records() {
        let rec = rec?;
        if let (Some(fi), Some(v)) = (fi, a.filter_value.as_deref())
            && rec.get(fi) != Some(v)
        {
            continue;
        }
        let Some(x) = rec.get(xi).and_then(|s| s.parse::<f64>().ok()) else {
            continue;
        };
        for (yname, &yi) in a.y.iter().zip(&yis) {
            let Some(y) = rec.get(yi).and_then(|s| s.parse::<f64>().ok()) else {
                continue;
            };
            let name = match si {
                Some(si) if a.y.len() > 1 => format!("{} {yname}", rec.get(si).unwrap_or("")),
                Some(si) => rec.get(si).unwrap_or("").to_owned(),
                None => yname.clone(),
            };
            if !series.contains_key(&name) {
                order.push(name.clone());
            }
            series.entry(name).or_default().push((x, y));
        }
    }
    let plot = Plot {
        file: String::new(),
        title: a.title,
        x_label: a.x_label.unwrap_or(a.x),
        y_label: a.y_label,
        series: order
            .into_iter()
            .map(|name| {
                let points = series.remove(&name).unwrap_or_default();
                TimeSeries { name, points }
            })
            .collect(),
        style: if a.points {
            PlotStyle::Points
        } else {
            PlotStyle::Lines
        },
        x_categories: Vec::new(),
        markers: Vec::new(),
        log_x: false,
    };
    line_chart(&a.out, &plot)
}
