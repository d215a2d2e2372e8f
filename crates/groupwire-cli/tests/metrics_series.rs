//! `groupwire metrics FILE --out DIR`: a `--metrics-json` file, written
//! here with the real `ChannelSnapshot` serialization, as CSV and PNG.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use groupwire_metrics::{COLUMNS, ChannelMeter, ChannelSnapshot, LatencyKind, Path as Via};
use groupwire_units::Instant;

const PNG_MAGIC: &[u8] = b"\x89PNG\r\n\x1a\n";

fn groupwire(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_groupwire"))
        .args(args)
        .output()
        .expect("the groupwire binary runs")
}

/// Writes `lines` to `dir/m.jsonl` and runs `groupwire metrics` on it
/// with `--out dir/out`: its output and that folder.
fn metrics_of(dir: &Path, lines: &[u8]) -> (Output, PathBuf) {
    let file = dir.join("m.jsonl");
    std::fs::write(&file, lines).expect("write the JSON lines");
    let out = dir.join("out");
    let o = groupwire(&[
        "metrics",
        file.to_str().expect("utf-8"),
        "--out",
        out.to_str().expect("utf-8"),
    ]);
    (o, out)
}

/// Three one-second snapshots of a seeded channel: 100 units a second, a
/// loss burst in the second second (two rebuilt by XOR, one lost), and a
/// quiet third second.
fn snapshots(name: &str) -> Vec<ChannelSnapshot> {
    let t0 = Instant::ZERO;
    let mut m = ChannelMeter::with_window(name, LatencyKind::OneWay, t0, 16);
    let mut out = Vec::new();
    for second in 0..2u64 {
        for i in 0..100u64 {
            let seq = second * 100 + i;
            m.sent(1250);
            let latency = Some(Duration::from_micros(10_000 + (seq * 37 % 11) * 100));
            match seq {
                150 | 151 => m.delivered(seq, Via::XorRow, latency),
                152 => {}
                _ => {
                    m.received(1000);
                    m.delivered(seq, Via::Arrived, latency);
                }
            }
        }
        out.push(m.snapshot(t0 + Duration::from_secs(second + 1)));
    }
    m.finish();
    out.push(m.snapshot(t0 + Duration::from_secs(3)));
    out
}

fn json_lines(snaps: &[&ChannelSnapshot]) -> String {
    snaps
        .iter()
        .map(|s| serde_json::to_string(s).expect("a snapshot serializes") + "\n")
        .collect()
}

fn read_csv(path: &Path) -> (Vec<String>, Vec<Vec<String>>) {
    let mut rd = csv::Reader::from_path(path).expect("the CSV opens");
    let header = rd
        .headers()
        .expect("a header")
        .iter()
        .map(String::from)
        .collect();
    let rows = rd
        .records()
        .map(|r| r.expect("a row").iter().map(String::from).collect())
        .collect();
    (header, rows)
}

fn cell<'a>(header: &[String], row: &'a [String], col: &str) -> &'a str {
    let i = header
        .iter()
        .position(|h| h == col)
        .unwrap_or_else(|| panic!("no column {col}"));
    &row[i]
}

fn assert_png(path: &Path) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        bytes.starts_with(PNG_MAGIC),
        "{} is not a PNG",
        path.display()
    );
    assert!(
        bytes.len() > 1000,
        "{} is too small to hold a chart",
        path.display()
    );
}

#[test]
fn writes_a_csv_and_three_charts_per_channel() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let (a, b) = (snapshots("tunnel xor:3"), snapshots("relay g1"));
    // Interleaved, as a command metering two channels writes them.
    let lines = json_lines(&[&a[0], &b[0], &a[1], &b[1], &a[2], &b[2]]);
    let (o, out) = metrics_of(dir.path(), lines.as_bytes());
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!stdout.contains("malformed"), "{stdout}");

    for stem in ["channel-tunnel-xor-3", "channel-relay-g1"] {
        let csv = out.join(format!("{stem}.csv"));
        assert!(stdout.contains(&csv.display().to_string()), "{stdout}");
        let (header, rows) = read_csv(&csv);
        assert_eq!(header, COLUMNS);
        assert_eq!(rows.len(), 3);
        let col = |r: usize, c: &str| cell(&header, &rows[r], c).to_owned();
        assert_eq!(
            (col(0, "t_s"), col(1, "t_s"), col(2, "t_s")),
            ("1".into(), "2".into(), "3".into())
        );
        // 100 datagrams of 1250 bytes a second: 1 Mbit/s out; 97 of 1000 in.
        assert_eq!(col(0, "out_mbps"), "1");
        let in_mbps: f64 = col(1, "in_mbps").parse().expect("a number");
        assert!((in_mbps - 0.776).abs() < 1e-9, "{in_mbps}");
        assert_eq!(col(2, "out_mbps"), "0");
        assert_eq!(col(0, "latency_count"), "100");
        assert!(
            col(0, "latency_p50_ms")
                .parse::<f64>()
                .is_ok_and(|v| (10.0..=11.0).contains(&v))
        );
        // The quiet second has no latency: an empty cell, not a zero.
        assert_eq!(col(2, "latency_p50_ms"), "");
        assert_eq!(col(2, "latency_count"), "0");
        assert!(col(0, "jitter_fig4_ms").parse::<f64>().is_ok());
        assert!(col(0, "jitter_rfc3550_ms").parse::<f64>().is_ok());
        // After finish: 200 judged, 3 lost on the wire in one run, 1 never delivered.
        assert_eq!(col(2, "loss_judged"), "200");
        assert_eq!(col(2, "loss_wire"), (3.0f64 / 200.0).to_string());
        assert_eq!(col(2, "loss_residual"), (1.0f64 / 200.0).to_string());
        assert_eq!(col(2, "burst_mean"), "3");
        assert_eq!(col(2, "path_xor_row"), "2");
        assert_eq!(col(2, "path_arrived"), "197");
        assert_eq!(col(2, "rebuilt"), "2");
        // The first second: 84 judged (16 wait for the window), no loss
        // yet, so no loss run to fit r from.
        assert_eq!(
            (col(0, "loss_judged"), col(0, "loss_wire")),
            ("84".into(), "0".into())
        );
        assert_eq!(
            (col(0, "gilbert_p"), col(0, "gilbert_r")),
            ("0".into(), "".into())
        );
        for chart in ["bandwidth", "latency", "loss"] {
            let png = out.join(format!("{stem}-{chart}.png"));
            assert_png(&png);
            assert!(stdout.contains(&png.display().to_string()), "{stdout}");
        }
    }
}

#[test]
fn malformed_lines_are_skipped_and_counted() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let snaps = snapshots("x");
    let good = json_lines(&[&snaps[0], &snaps[1]]);
    let cut = serde_json::to_string(&snaps[2]).expect("serializes");
    let lines = format!(
        "{good}not json at all\n\n{{\"channel\": \"x\", \"t_s\": \"soon\"}}\n{}",
        &cut[..cut.len() / 2]
    );
    let mut bytes = lines.into_bytes();
    // A line that is not UTF-8 at all.
    bytes.extend_from_slice(b"\n\xff\xfe{}\n");
    let (o, out) = metrics_of(dir.path(), &bytes);
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stdout}{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    // "not json", the wrong type, the cut line and the non-UTF-8 one; the
    // blank line is not counted.
    assert!(stdout.contains("skipped 4 malformed lines"), "{stdout}");
    assert!(
        stdout.contains("line 3:"),
        "the first one is named: {stdout}"
    );
    let (_, rows) = read_csv(&out.join("channel-x.csv"));
    assert_eq!(rows.len(), 2);
    assert_png(&out.join("channel-x-loss.png"));
}

/// Exit code 2, one line on stderr naming `needle`.
fn assert_usage_error(args: &[&str], needle: &str) {
    let o = groupwire(args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    assert!(
        err.contains(needle),
        "{args:?}: {err:?} should mention {needle:?}"
    );
    assert!(!err.contains("panicked"), "{args:?}: {err}");
}

#[test]
fn a_missing_empty_or_unreadable_file_is_a_usage_error() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let out = dir.path().join("out");
    let out = out.to_str().expect("utf-8");
    let missing = dir.path().join("nope.jsonl");
    assert_usage_error(
        &["metrics", missing.to_str().expect("utf-8"), "--out", out],
        "cannot open",
    );
    let empty = dir.path().join("empty.jsonl");
    std::fs::write(&empty, "\n").expect("write");
    assert_usage_error(
        &["metrics", empty.to_str().expect("utf-8"), "--out", out],
        "is empty",
    );
    let junk = dir.path().join("junk.jsonl");
    std::fs::write(&junk, "a,b,c\n1,2,3\n").expect("write");
    assert_usage_error(
        &["metrics", junk.to_str().expect("utf-8"), "--out", out],
        "no channel record (2 malformed lines",
    );
    assert!(!Path::new(out).exists(), "nothing written on an error");
}

#[test]
fn help_says_what_goes_in_and_what_comes_out() {
    let o = groupwire(&["metrics", "--help"]);
    assert!(o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    for needle in [
        "--metrics-json",
        "channel-NAME.csv",
        "channel-NAME-loss.png",
        "--out",
    ] {
        assert!(out.contains(needle), "metrics --help lacks {needle}: {out}");
    }
    let o = groupwire(&["--help"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("metrics"));
}
