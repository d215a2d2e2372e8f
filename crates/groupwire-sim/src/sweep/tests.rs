use std::time::Duration;

use groupwire_metrics::Table;
use serde_json::json;

use super::*;

const PLAN: &str = r#"
title = "A test plan"
scenario = "tcp-dumbbell"
seed = 7
tables = ["flows"]

[set]
duration = "2s"
warmup = "500ms"
short_flows = { rate = 1.0, mean_packets = 10.0, shape = 1.5 }

[[run]]
name = "short"
title = "Short RTT"
set = { rtt = "10ms", flows = 2 }

[[run.reference]]
source = "Table 9"
table = "flows"
match = { flow = 0 }
values = { goodput_mbps = 40.0 }

[[run]]
name = "long"
title = "Long RTT"
set = { rtt = "100ms", short_flows = { rate = 2.5 } }

[[tally]]
label = "flows"
summary = "flows"
runs = ["s*"]
"#;

fn plan() -> Plan {
    Plan::from_toml(PLAN).expect("the test plan parses")
}

fn dumbbell(s: &Scenario) -> &crate::scenario::TcpDumbbell {
    let Scenario::TcpDumbbell(d) = s else {
        panic!("tcp-dumbbell")
    };
    d
}

#[test]
fn expands_plan_then_run_then_command_line_overrides_in_order() {
    let base = Scenario::builtin("tcp-dumbbell").unwrap();
    let extra = vec![("duration".to_owned(), "3s".to_owned())];
    let runs = plan().expand(&base, &[], &extra).unwrap();
    assert_eq!(runs.len(), 2);
    let short = dumbbell(&runs[0].scenario);
    assert_eq!(short.rtt, Duration::from_millis(10));
    assert_eq!(short.flows, 2);
    assert_eq!(short.duration, Duration::from_secs(3), "--set comes last");
    let long = dumbbell(&runs[1].scenario);
    assert_eq!(long.rtt, Duration::from_millis(100));
    // A nested table sets one leaf, not the whole table.
    let flows = long.short_flows.as_ref().expect("short flows");
    assert_eq!((flows.rate, flows.mean_packets), (2.5, 10.0));
    assert_eq!(
        runs[0].command_line("tcp-dumbbell", "out/short"),
        "groupwire sim run tcp-dumbbell --seed 7 --set duration=2s --set warmup=500ms \
         --set short_flows.rate=1.0 --set short_flows.mean_packets=10.0 \
         --set short_flows.shape=1.5 --set rtt=10ms --set flows=2 --set duration=3s --out out/short"
    );
    // The command line, parsed back, gives the same scenario.
    let mut again = base.clone();
    for (k, v) in &runs[0].overrides {
        again.set(k, v).unwrap();
    }
    assert_eq!(again, runs[0].scenario);
}

#[test]
fn only_selects_run_sets_and_names_unknown_ones() {
    let base = Scenario::builtin("tcp-dumbbell").unwrap();
    let runs = plan().expand(&base, &["long".into()], &[]).unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].name, "long");
    let e = plan()
        .expand(&base, &["nope".into()], &[])
        .unwrap_err()
        .to_string();
    assert!(e.contains("short, long"), "{e}");
}

#[test]
fn bad_plans_are_clear_errors() {
    let bad_key = PLAN.replace("flows = 2 }", "flowz = 2 }");
    let base = Scenario::builtin("tcp-dumbbell").unwrap();
    let e = Plan::from_toml(&bad_key)
        .unwrap()
        .expand(&base, &[], &[])
        .unwrap_err()
        .to_string();
    assert!(e.contains("short") && e.contains("flowz"), "{e}");
    let e = Plan::from_toml(&PLAN.replace("name = \"long\"", "name = \"short\""))
        .unwrap_err()
        .to_string();
    assert!(e.contains("two run sets"), "{e}");
    let e = Plan::from_toml(&PLAN.replace("name = \"long\"", "name = \"../x\""))
        .unwrap_err()
        .to_string();
    assert!(e.contains("directory"), "{e}");
    let e = Plan::from_toml(&PLAN.replace("goodput_mbps = 40.0", "goodput_mbps = \"40\""))
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a number"), "{e}");
    let e = Plan::from_toml(&PLAN.replace("runs = [\"s*\"]", "runs = [\"x*\"]"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("no run set"), "{e}");
    assert!(Plan::from_toml("title = \"x\"\nscenario = \"tcp-dumbbell\"\nrun = []").is_err());
    assert!(Plan::from_toml(&format!("{PLAN}\nunknown = 1")).is_err());
}

fn report(flows: u64) -> Report {
    Report {
        scenario: "tcp-dumbbell".into(),
        seed: 7,
        summary: [("flows".to_owned(), json!(flows))].into_iter().collect(),
        tables: vec![Table {
            file: "flows".into(),
            columns: vec!["flow".into(), "goodput_mbps".into(), "name".into()],
            rows: vec![
                vec![json!(0), json!(42.5), json!("a")],
                vec![json!(1), json!(null), json!("a")],
            ],
        }],
        plots: vec![],
    }
}

fn reference(matches: &str, values: &str) -> Reference {
    Reference {
        source: "Table 9".into(),
        table: "flows".into(),
        matches: toml::from_str(matches).unwrap(),
        values: toml::from_str(values).unwrap(),
    }
}

#[test]
fn references_match_exactly_one_row() {
    let r = report(2);
    let c = compare(&reference("flow = 0", "goodput_mbps = 40.0"), &r).unwrap();
    assert_eq!(c.key, vec![("flow".to_owned(), "0".to_owned())]);
    assert_eq!(c.values[0].reference, 40.0);
    assert_eq!(c.values[0].ours, Some(42.5));
    // An empty cell is "no value", not an error.
    let c = compare(&reference("flow = 1", "goodput_mbps = 3"), &r).unwrap();
    assert_eq!(c.values[0].ours, None);
    for (m, v, want) in [
        ("name = \"a\"", "goodput_mbps = 1", "picks 2 rows"),
        ("flow = 5", "goodput_mbps = 1", "picks 0 rows"),
        ("flow = 0", "nope = 1", "no column nope"),
        ("nope = 0", "goodput_mbps = 1", "no column nope"),
    ] {
        let e = compare(&reference(m, v), &r).unwrap_err().to_string();
        assert!(e.contains(want), "{m} {v}: {e}");
    }
    let mut other = reference("flow = 0", "goodput_mbps = 1");
    other.table = "cells".into();
    let e = compare(&other, &r).unwrap_err().to_string();
    assert!(e.contains("has flows"), "{e}");
}

#[test]
fn the_page_has_commands_tables_references_and_tallies() {
    let plan = plan();
    let base = Scenario::builtin("tcp-dumbbell").unwrap();
    let done: Vec<Finished> = plan
        .expand(&base, &[], &[])
        .unwrap()
        .into_iter()
        .zip([2, 5])
        .map(|(run, n)| Finished {
            run,
            report: report(n),
        })
        .collect();
    let summary = summarize(&plan, &done).unwrap();
    assert_eq!(
        summary.tallies[0].count, 2.0,
        "only run sets starting with s"
    );
    assert_eq!(summary.tallies[0].runs, vec!["short".to_owned()]);
    let md = markdown(&plan, &done, &summary, "groupwire sim sweep p.toml", "p");
    assert!(md.starts_with("# A test plan\n"), "{md}");
    assert!(md.contains("--out p/short"), "{md}");
    assert!(md.contains("## Short RTT"), "{md}");
    assert!(md.contains("| flow | goodput_mbps |"), "{md}");
    assert!(md.contains("| flows | 2 |\n"), "the run's summary: {md}");
    assert!(md.contains("| 0 | 40.0000 / 42.5000 |"), "{md}");
    assert!(md.contains("| flows | 2 | - | short |"), "{md}");
}

/// The plans committed beside the simulator parse and expand against the
/// built-in scenarios (running them is `scripts/results.sh`'s job).
#[test]
fn committed_plans_expand() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("plans");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).expect("plans/ exists") {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let plan = Plan::from_toml(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let base = Scenario::builtin(&plan.scenario).unwrap();
        let runs = plan
            .expand(&base, &[], &[])
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(runs.len(), plan.runs.len());
        n += 1;
    }
    assert!(n >= 2, "the GENEVA and Dyck plans");
}
