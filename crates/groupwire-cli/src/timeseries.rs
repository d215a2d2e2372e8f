//! `groupwire metrics FILE --out DIR`: a `--metrics-json` file as time
//! series, one CSV table and three PNG charts per channel. The flattening
//! of a snapshot into columns is `groupwire_metrics::ChannelSnapshot::columns`;
//! this module only reads the file and writes the outputs.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;
use groupwire_metrics::{COLUMNS, ChannelSnapshot, Plot, PlotStyle, TimeSeries};

use crate::UsageError;
use crate::plot::line_chart;

/// Turn a --metrics-json file into CSV tables and PNG charts, one set per
/// channel.
///
/// `groupwire tunnel`, `groupwire awareness recv` and `groupwire group
/// watch` write their channel measures with `--metrics-json FILE`: one JSON
/// object per channel each second. This command writes, for each channel
/// NAME in FILE (characters other than letters, digits, `.`, `_` and `-`
/// become `-`; a name another channel took gets `-2`):
///
///   DIR/channel-NAME.csv            one row per record: t_s and every
///                                   numeric measure (empty cell: not known)
///   DIR/channel-NAME-bandwidth.png  out_mbps and in_mbps over time
///   DIR/channel-NAME-latency.png    latency p50/p99 and both jitters, ms
///   DIR/channel-NAME-loss.png       wire and residual loss (%) since the
///                                   start, with the mean loss burst
///
/// Lines that are not a channel record are skipped and counted. The CSV
/// columns are described in docs/metrics.md.
///
/// Example: groupwire tunnel ... --metrics-json m.jsonl, then
/// groupwire metrics m.jsonl --out m/
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub(crate) struct SeriesArgs {
    /// A file written by --metrics-json (JSON lines).
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// Directory for the CSV and PNG files (created if missing).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

pub(crate) fn run(a: SeriesArgs) -> Result<()> {
    let read = read_records(&a.file)?;
    if read.channels.is_empty() {
        let what = if read.malformed == 0 {
            "is empty".to_owned()
        } else {
            format!(
                "has no channel record ({} malformed line{}{})",
                read.malformed,
                plural(read.malformed),
                read.first_error
                    .as_deref()
                    .map(|e| format!("; first: {e}"))
                    .unwrap_or_default()
            )
        };
        return Err(UsageError::new(anyhow::anyhow!(
            "{} {what}: expected the JSON lines of --metrics-json",
            a.file.display()
        ))
        .into());
    }
    std::fs::create_dir_all(&a.out)
        .with_context(|| format!("cannot create {}", a.out.display()))
        .map_err(UsageError::new)?;
    let mut used: BTreeSet<String> = BTreeSet::new();
    for (name, snaps) in &read.channels {
        let stem = unique_stem(&mut used, name);
        let csv_path = a.out.join(format!("{stem}.csv"));
        write_csv(&csv_path, snaps)?;
        println!(
            "wrote {} ({name:?}: {} row{})",
            csv_path.display(),
            snaps.len(),
            plural(snaps.len())
        );
        for (suffix, plot) in charts(name, snaps) {
            let png = a.out.join(format!("{stem}-{suffix}.png"));
            line_chart(&png, &plot).with_context(|| format!("drawing {}", png.display()))?;
            println!("wrote {}", png.display());
        }
    }
    if read.malformed > 0 {
        println!(
            "skipped {} malformed line{} of {} (first: {})",
            read.malformed,
            plural(read.malformed),
            a.file.display(),
            read.first_error.as_deref().unwrap_or("?")
        );
    }
    Ok(())
}

/// What a `--metrics-json` file holds.
struct Records {
    /// Each channel's snapshots in file order, channels in order of first
    /// appearance.
    channels: Vec<(String, Vec<ChannelSnapshot>)>,
    /// Lines that were not a snapshot (blank lines are not counted).
    malformed: usize,
    /// `line N: why` for the first of them.
    first_error: Option<String>,
}

fn read_records(path: &Path) -> Result<Records> {
    let file = File::open(path)
        .with_context(|| format!("cannot open {}", path.display()))
        .map_err(UsageError::new)?;
    let mut rd = BufReader::new(file);
    let mut rec = Records {
        channels: Vec::new(),
        malformed: 0,
        first_error: None,
    };
    let mut index: BTreeMap<String, usize> = BTreeMap::new();
    let mut buf = Vec::new();
    for line_no in 1.. {
        buf.clear();
        let n = rd
            .read_until(b'\n', &mut buf)
            .with_context(|| format!("reading {}", path.display()))?;
        if n == 0 {
            break;
        }
        if buf.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        // Without the line end, so serde's "at line 1 column N" is this line.
        while buf.last().is_some_and(|b| matches!(b, b'\n' | b'\r')) {
            buf.pop();
        }
        // A line cut short (the writer was killed) or not JSON at all is
        // counted and skipped, as is one that is JSON but not a snapshot.
        match serde_json::from_slice::<ChannelSnapshot>(&buf) {
            Ok(s) => {
                let i = *index.entry(s.channel.clone()).or_insert_with(|| {
                    rec.channels.push((s.channel.clone(), Vec::new()));
                    rec.channels.len() - 1
                });
                rec.channels[i].1.push(s);
            }
            Err(e) => {
                rec.malformed += 1;
                rec.first_error
                    .get_or_insert_with(|| format!("line {line_no}: {e}"));
            }
        }
    }
    Ok(rec)
}

/// `channel-NAME`, with NAME made safe for a file name; `-2`, `-3`, ...
/// appended when another channel already took it (`a b` and `a:b`).
fn unique_stem(used: &mut BTreeSet<String>, channel: &str) -> String {
    let safe: String = channel
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect();
    let base = format!("channel-{safe}");
    let stem = (1..)
        .map(|n| match n {
            1 => base.clone(),
            n => format!("{base}-{n}"),
        })
        .find(|s| !used.contains(s))
        .expect("one of infinitely many stems is free");
    used.insert(stem.clone());
    stem
}

fn write_csv(path: &Path, snaps: &[ChannelSnapshot]) -> Result<()> {
    let mut w = csv::Writer::from_path(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    w.write_record(COLUMNS)?;
    for s in snaps {
        w.write_record(
            s.columns()
                .iter()
                .map(|(_, v)| v.map(|v| v.to_string()).unwrap_or_default()),
        )?;
    }
    w.flush()
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// The charts of one channel: `(file suffix, plot)`.
fn charts(channel: &str, snaps: &[ChannelSnapshot]) -> Vec<(&'static str, Plot)> {
    // (legend, column, scale)
    let series = |cols: &[(&str, &str, f64)]| -> Vec<TimeSeries> {
        cols.iter()
            .map(|&(legend, col, scale)| {
                let i = COLUMNS
                    .iter()
                    .position(|c| *c == col)
                    .expect("chart columns are names from COLUMNS");
                let mut ts = TimeSeries::new(legend);
                for s in snaps {
                    if let Some(v) = s.columns()[i].1 {
                        ts.push(s.t_s, v * scale);
                    }
                }
                ts
            })
            .collect()
    };
    let kind = snaps.first().map_or("", |s| s.latency_kind.name());
    let plot = |title: String, y_label: &str, series: Vec<TimeSeries>| Plot {
        file: String::new(),
        title,
        x_label: "time (s)".into(),
        y_label: y_label.into(),
        series,
        style: PlotStyle::Lines,
        x_categories: Vec::new(),
        markers: Vec::new(),
        log_x: false,
    };
    vec![
        (
            "bandwidth",
            plot(
                format!("{channel}: bandwidth"),
                "Mbit/s",
                series(&[("out", "out_mbps", 1.0), ("in", "in_mbps", 1.0)]),
            ),
        ),
        (
            "latency",
            plot(
                format!("{channel}: latency ({kind}) and jitter"),
                "ms",
                series(&[
                    ("latency p50", "latency_p50_ms", 1.0),
                    ("latency p99", "latency_p99_ms", 1.0),
                    ("jitter (Figure 4)", "jitter_fig4_ms", 1.0),
                    ("jitter (RFC 3550)", "jitter_rfc3550_ms", 1.0),
                ]),
            ),
        ),
        (
            "loss",
            plot(
                format!("{channel}: loss since the start and mean loss burst"),
                "loss (%) / mean burst (units)",
                series(&[
                    ("wire loss %", "loss_wire", 100.0),
                    ("residual loss %", "loss_residual", 100.0),
                    ("mean burst (units)", "burst_mean", 1.0),
                ]),
            ),
        ),
    ]
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::unique_stem;

    #[test]
    fn channel_names_become_distinct_file_stems() {
        let mut used = BTreeSet::new();
        let stems: Vec<String> = ["tunnel xor:3", "a b", "a:b", "a-b-2", "../x"]
            .iter()
            .map(|c| unique_stem(&mut used, c))
            .collect();
        assert_eq!(
            stems,
            [
                "channel-tunnel-xor-3",
                "channel-a-b",
                "channel-a-b-2",
                "channel-a-b-2-2",
                "channel-..-x",
            ]
        );
    }
}
