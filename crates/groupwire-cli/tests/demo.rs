//! `groupwire demo`: the README's main command, run short. What is asserted
//! holds on a loaded machine: every channel carried messages, the reliable
//! ones lost none, and the files are there.

use std::process::Command;

#[test]
fn a_short_demo_runs_every_channel_and_writes_its_report() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_groupwire"))
        .args(["demo", "--duration", "4s", "--quiet", "--no-plots", "--out"])
        .arg(dir.path())
        .arg("--metrics-json")
        .arg(dir.path().join("m.jsonl"))
        .output()
        .expect("the groupwire binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let csv = std::fs::read_to_string(dir.path().join("channels.csv")).unwrap();
    let mut rows = csv::Reader::from_reader(csv.as_bytes());
    let head = rows.headers().unwrap().clone();
    let col = |name: &str| head.iter().position(|h| h == name).unwrap();
    let mut seen = Vec::new();
    for row in rows.records() {
        let row = row.unwrap();
        let name = row[col("channel")].to_owned();
        let sent: u64 = row[col("sent")].parse().unwrap();
        let delivered: u64 = row[col("delivered")].parse().unwrap();
        assert!(
            sent > 0 && delivered > 0,
            "{name}: {sent} sent, {delivered} delivered"
        );
        if name == "edits" {
            assert_eq!(delivered, sent, "reliable channel lost messages");
        }
        assert!(!row[col("mechanisms")].is_empty());
        seen.push(name);
    }
    assert_eq!(seen, ["telepointer", "state", "camera", "edits", "dataset"]);
    for f in [
        "summary.json",
        "report.md",
        "loss.csv",
        "latency.csv",
        "overhead.csv",
    ] {
        assert!(dir.path().join(f).exists(), "{f} missing");
    }
    assert!(stdout.contains("demo"), "{stdout}");
    // The shared metrics model: a line per channel per second, and a last one.
    let lines = std::fs::read_to_string(dir.path().join("m.jsonl")).unwrap();
    for name in &seen {
        let n = lines
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["channel"] == name.as_str())
            .count();
        assert!(n >= 2, "{name}: {n} snapshots");
    }
}

#[test]
fn a_bad_loss_model_is_a_usage_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_groupwire"))
        .args(["demo", "--loss", "bernoulli:2"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(!String::from_utf8_lossy(&out.stderr).is_empty());
}
