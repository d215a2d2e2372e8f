//! PNG line charts with plotters, using an embedded font so they render
//! on machines without system fonts.

use std::path::Path;
use std::sync::Once;

use groupwire_sim::scenario::{Plot, PlotStyle};
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
    let pts = plot.series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1, mut y0, mut y1) =
        (f64::INFINITY, f64::NEG_INFINITY, 0.0f64, f64::NEG_INFINITY);
    for &(x, y) in pts.filter(|(x, y)| x.is_finite() && y.is_finite()) {
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
            .copied()
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
