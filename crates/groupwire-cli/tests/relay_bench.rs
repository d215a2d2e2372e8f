//! `groupwire relay bench` and `groupwire plot` in tiny
//! configurations, so the measurement tools cannot rot between runs of
//! `scripts/results.sh relay`.

use std::process::{Command, Output};

mod common;
use common::Relay;

fn start_relay() -> (Relay, String) {
    let relay = Relay::start(&["--memory"]);
    let addr = relay.addr.clone();
    (relay, addr)
}

/// `groupwire relay bench KIND --relay ADDR --quiet ARGS...`, which must
/// succeed; its output.
fn bench(kind: &str, addr: &str, args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_groupwire"))
        .args(["relay", "bench", kind, "--relay", addr, "--quiet"])
        .args(args)
        .output()
        .expect("the bench runs");
    assert!(
        out.status.success(),
        "bench failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn bench_measures_fanout_and_relay_cpu_in_a_tiny_run() {
    let (relay, addr) = start_relay();
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("fanout.json");
    let pid = relay.child.id().to_string();
    let out = bench(
        "fanout",
        &addr,
        &[
            "--groups",
            "3",
            "--members",
            "4",
            "--rate",
            "50",
            "--duration",
            "1s",
            "--warmup",
            "300ms",
            "--relay-pid",
            &pid,
            "--json",
            json.to_str().expect("utf-8"),
        ],
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json written"))
            .expect("valid json");
    let phase = &report["phases"][0];
    // 3 groups x 50 msg/s x 4 members for about a second.
    let n = phase["classes"]["all"]["count"].as_u64().expect("a count");
    assert!(n > 100, "only {n} deliveries measured: {phase}");
    assert!(phase["classes"]["all"]["p99_ms"].as_f64().expect("p99") > 0.0);
    assert!(
        phase["relay_cpu_sec"].as_f64().is_some(),
        "relay CPU read from /proc"
    );
    assert!(phase["relay_rss_max_kib"].as_u64().expect("rss") > 0);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("fanout"), "{table}");
}

#[test]
fn bench_reproduces_fig7_roles_and_writes_probe_series() {
    let (_relay, addr) = start_relay();
    let dir = tempfile::tempdir().expect("tempdir");
    let series = dir.path().join("roles.csv");
    bench(
        "roles",
        &addr,
        &[
            "--members",
            "6",
            "--rate",
            "20",
            "--duration",
            "1s",
            "--warmup",
            "200ms",
            "--series-csv",
            series.to_str().expect("utf-8"),
        ],
    );
    let csv = std::fs::read_to_string(&series).expect("series written");
    assert!(csv.contains("high-priority member"), "{csv}");
    assert!(csv.contains("low-priority member"), "{csv}");
    // And the plot command draws it.
    let png = dir.path().join("roles.png");
    let status = Command::new(env!("CARGO_BIN_EXE_groupwire"))
        .args([
            "plot",
            "--x",
            "msg",
            "--y",
            "latency_ms",
            "--split",
            "probe",
            "--points",
        ])
        .arg("--csv")
        .arg(&series)
        .arg("--out")
        .arg(&png)
        .status()
        .expect("plot runs");
    assert!(status.success());
    assert!(std::fs::metadata(&png).expect("png written").len() > 1000);
}
