//! The `groupwire` binary as a user meets it: help, errors, outputs.

use std::process::{Command, Output};

fn groupwire(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_groupwire"))
        .args(args)
        .env_remove("GROUPWIRE_SIM_SEED")
        .output()
        .expect("the groupwire binary runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A usage error: exit code 2, one line on stderr naming `needle`, no panic.
fn assert_usage_error(args: &[&str], needle: &str) {
    let o = groupwire(args);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "{args:?}: one line expected, got {err}"
    );
    assert!(
        err.contains(needle),
        "{args:?}: {err:?} should mention {needle:?}"
    );
    assert!(!err.contains("panicked"), "{args:?}: {err}");
}

#[test]
fn help_explains_the_commands() {
    let o = groupwire(&["--help"]);
    assert!(o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("sim"), "{out}");
    let o = groupwire(&["sim", "run", "--help"]);
    let out = String::from_utf8_lossy(&o.stdout);
    for needle in ["--seed", "--out", "--set", "groupwire sim run tcp-dumbbell"] {
        assert!(out.contains(needle), "sim run --help lacks {needle}: {out}");
    }
}

#[test]
fn lists_builtin_scenarios() {
    let o = groupwire(&["sim", "list"]);
    assert!(o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("tcp-dumbbell") && out.contains("link-models"),
        "{out}"
    );
}

#[test]
fn bad_input_gives_one_line_and_exit_code_2() {
    assert_usage_error(&["sim", "run", "no-such-scenario"], "unknown scenario");
    for (set, says) in [
        ("loss=bernoulli:1.5", "1.5"),
        ("bottleneck_rate=0", "out of range"),
        ("flows", "KEY=VALUE"),
        ("nonsense=1", "nonsense"),
        ("warmup=1h", "warmup"),
    ] {
        assert_usage_error(&["sim", "run", "tcp-dumbbell", "--set", set], says);
    }
    assert_usage_error(&["sim", "run", "missing.toml"], "missing.toml");
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "scenario = \"tcp-dumbbell\"\nflows = [oops\n").unwrap();
    assert_usage_error(&["sim", "run", bad.to_str().unwrap()], "bad.toml");
    // clap's own usage errors also exit 2.
    assert_eq!(groupwire(&["sim", "run"]).status.code(), Some(2));
}

#[test]
fn run_writes_summary_csv_and_plots_and_is_reproducible() {
    let dir = tempfile::tempdir().unwrap();
    let run = |sub: &str| {
        let out = dir.path().join(sub);
        let o = groupwire(&[
            "sim",
            "run",
            "tcp-dumbbell",
            "--seed",
            "9",
            "--set",
            "flows=3",
            "--set",
            "duration=3s",
            "--set",
            "warmup=1s",
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let table = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(
            table.contains("throughput_bps") && table.contains("jain_fairness"),
            "{table}"
        );
        out
    };
    let a = run("a");
    for f in [
        "summary.json",
        "scenario.toml",
        "flows.csv",
        "throughput.csv",
        "throughput.png",
        "queue.png",
        "cwnd.png",
    ] {
        assert!(a.join(f).is_file(), "missing {f}");
    }
    let png = std::fs::read(a.join("cwnd.png")).unwrap();
    assert_eq!(&png[1..4], b"PNG");
    // The scenario file it wrote runs again to the same numbers.
    let b = run("b");
    for f in ["flows.csv", "throughput.csv", "cwnd.csv"] {
        assert_eq!(
            std::fs::read(a.join(f)).unwrap(),
            std::fs::read(b.join(f)).unwrap(),
            "{f} differs"
        );
    }
    let again = dir.path().join("c");
    let o = groupwire(&[
        "sim",
        "run",
        a.join("scenario.toml").to_str().unwrap(),
        "--seed",
        "9",
        "--out",
        again.to_str().unwrap(),
        "-q",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(o.stdout.is_empty(), "--quiet prints nothing");
    assert_eq!(
        std::fs::read(a.join("flows.csv")).unwrap(),
        std::fs::read(again.join("flows.csv")).unwrap()
    );
}

/// A plan's run sets on two threads give the same page, CSV and
/// comparisons as on one; bad plans are usage errors.
#[test]
fn sweep_runs_a_plan_and_is_independent_of_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.toml");
    std::fs::write(
        &plan,
        r#"
title = "Two dumbbells"
scenario = "tcp-dumbbell"
seed = 3
tables = ["flows"]
[set]
duration = "3s"
warmup = "1s"
[[run]]
name = "two"
title = "Two flows"
set = { flows = 2 }
[[run.reference]]
source = "a made-up table"
table = "flows"
match = { flow = 0 }
values = { throughput_bps = 1e6 }
[[run]]
name = "three"
title = "Three flows"
set = { flows = 3, rtt = "40ms" }
[[tally]]
label = "flows"
summary = "flows"
"#,
    )
    .unwrap();
    let sweep = |jobs: &str, sub: &str| {
        let out = dir.path().join(sub);
        let o = groupwire(&[
            "sim",
            "sweep",
            plan.to_str().unwrap(),
            "--jobs",
            jobs,
            "--no-plots",
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let printed = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(printed.contains("flows: 5"), "{printed}");
        out
    };
    let a = sweep("1", "a");
    let b = sweep("2", "b");
    for f in ["two/flows.csv", "three/flows.csv", "sweep.json"] {
        assert_eq!(
            std::fs::read(a.join(f)).unwrap(),
            std::fs::read(b.join(f)).unwrap(),
            "{f} differs between --jobs 1 and 2"
        );
    }
    let page = std::fs::read_to_string(a.join("report.md")).unwrap();
    assert!(page.starts_with("# Two dumbbells"), "{page}");
    assert!(page.contains("a made-up table, beside ours"), "{page}");
    // Each run set's command line reproduces it alone.
    assert!(
        page.contains("groupwire sim run tcp-dumbbell --seed 3 --set duration=3s"),
        "{page}"
    );

    let p = plan.to_str().unwrap();
    assert_usage_error(&["sim", "sweep", p, "--only", "four"], "two, three");
    assert_usage_error(&["sim", "sweep", p, "--set", "flows=0"], "flows");
    assert_usage_error(
        &["sim", "sweep", "/nonexistent/plan.toml"],
        "cannot read plan",
    );
    let o = groupwire(&["sim", "sweep", p, "--jobs", "0"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}
