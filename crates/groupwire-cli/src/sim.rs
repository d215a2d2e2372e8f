//! `groupwire sim ...`: the simulator's command line.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use groupwire_proto::Instant;
use groupwire_sim::scenario::{ProgressUnit, Scenario, builtins};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::UsageError;
use crate::output;

#[derive(Debug, Subcommand)]
pub(crate) enum SimCommand {
    /// List the built-in scenarios.
    List,
    /// Print a scenario's parameters as TOML, ready to edit and run with `sim run FILE`.
    Show {
        /// A built-in scenario name or a .toml file.
        scenario: String,
        /// Change a parameter before printing (repeatable), e.g. `--set flows=100`.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
    },
    /// Run a scenario: prints a summary table and writes CSV, JSON and PNG plots.
    ///
    /// Examples:
    ///   groupwire sim run tcp-dumbbell
    ///   groupwire sim run tcp-dumbbell --set flows=100 --set bottleneck_rate=1Gbps --set rtt=100ms
    ///   groupwire sim show tcp-dumbbell > my.toml && groupwire sim run my.toml
    #[command(verbatim_doc_comment)]
    Run(RunArgs),
    /// Run an experiment plan: named run sets of one scenario, in parallel,
    /// composed into one Markdown page with the paper's numbers beside ours.
    ///
    /// Each run set is written to OUT/NAME/ as `sim run` writes a run; the
    /// page is OUT/report.md and the comparisons and tallies OUT/sweep.json.
    ///
    /// Examples:
    ///   groupwire sim sweep crates/groupwire-sim/plans/geneva.toml --jobs 2
    ///   groupwire sim sweep crates/groupwire-sim/plans/geneva.toml --only table2 --set duration=20s
    #[command(verbatim_doc_comment)]
    Sweep(crate::sweep::SweepArgs),
}

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// A built-in scenario name (see `groupwire sim list`) or a .toml file.
    scenario: String,
    /// Seed for every random choice; the same seed gives the same output.
    /// Defaults to $GROUPWIRE_SIM_SEED, then 1.
    #[arg(long, env = "GROUPWIRE_SIM_SEED", default_value_t = 1)]
    seed: u64,
    /// Directory for CSV, JSON and PNG output (created if missing).
    /// Defaults to `out/<scenario>`.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Change a parameter (repeatable): `--set rtt=100ms --set flows=50`.
    /// `groupwire sim show <scenario>` lists the parameters.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Do not write PNG plots (CSV and JSON are still written).
    #[arg(long)]
    no_plots: bool,
    /// Print nothing but errors; no progress bar.
    #[arg(long, short)]
    quiet: bool,
}

pub(crate) fn run(cmd: SimCommand) -> anyhow::Result<()> {
    match cmd {
        SimCommand::List => list(),
        SimCommand::Show { scenario, set } => {
            let s = load(&scenario, &set)?;
            println!("{}", s.to_toml().trim_end());
            Ok(())
        }
        SimCommand::Run(args) => run_scenario(&args),
        SimCommand::Sweep(args) => crate::sweep::run(&args),
    }
}

fn list() -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "Built-in scenarios (run one with `groupwire sim run NAME`):\n"
    )?;
    for b in builtins() {
        writeln!(out, "  {:<16} {}", b.name, b.about)?;
    }
    writeln!(
        out,
        "\nSee a scenario's parameters with `groupwire sim show NAME`."
    )?;
    Ok(())
}

/// A built-in scenario or a TOML file, with `--set` changes applied and validated.
fn load(name: &str, set: &[String]) -> Result<Scenario, UsageError> {
    let usage = |e: anyhow::Error| UsageError(e);
    let path = Path::new(name);
    let mut scenario = if name.ends_with(".toml") || path.is_file() {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read scenario file {}", path.display()))
            .map_err(usage)?;
        Scenario::from_toml(&text)
            .with_context(|| format!("scenario file {}", path.display()))
            .map_err(usage)?
    } else {
        Scenario::builtin(name).map_err(|e| usage(e.into()))?
    };
    for (k, v) in split_sets(set)? {
        scenario.set(&k, &v).map_err(|e| usage(e.into()))?;
    }
    scenario.validate().map_err(|e| usage(e.into()))?;
    Ok(scenario)
}

/// `--set KEY=VALUE` arguments as (key, value) pairs, trimmed.
pub(crate) fn split_sets(set: &[String]) -> Result<Vec<(String, String)>, UsageError> {
    set.iter()
        .map(|kv| {
            let (k, v) = kv.split_once('=').ok_or_else(|| {
                UsageError(anyhow::anyhow!(
                    "--set {kv:?}: expected KEY=VALUE, e.g. --set flows=100"
                ))
            })?;
            Ok((k.trim().to_owned(), v.trim().to_owned()))
        })
        .collect()
}

fn run_scenario(args: &RunArgs) -> anyhow::Result<()> {
    let scenario = load(&args.scenario, &args.set)?;
    let out_dir = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("out").join(scenario.kind()));
    let unit = scenario.progress_unit();
    let bar = progress_bar(scenario.duration(), unit, args.quiet);
    let clock = WallClock::start();
    let mut on_progress = |t: Instant| {
        if clock.elapsed() > Duration::from_secs(1) && bar.is_hidden() && !args.quiet {
            bar.set_draw_target(ProgressDrawTarget::stderr());
        }
        bar.set_position(progress_units(t.since_epoch(), unit));
    };
    let report = scenario
        .run(args.seed, &mut on_progress)
        .map_err(UsageError::new)?;
    let wall = clock.elapsed();
    bar.finish_and_clear();
    let files = output::write_all(&out_dir, &scenario, &report, wall, !args.no_plots)?;
    if !args.quiet {
        let mut out = std::io::stdout().lock();
        output::print_summary(&mut out, &report, wall)?;
        writeln!(out, "\nwrote {} files to {}", files, out_dir.display())?;
    }
    Ok(())
}

/// Progress in the bar's units: milliseconds of simulated time, or a count.
pub(crate) fn progress_units(d: Duration, unit: ProgressUnit) -> u64 {
    let v = match unit {
        ProgressUnit::Count => d.as_nanos(),
        _ => d.as_millis(),
    };
    u64::try_from(v).unwrap_or(u64::MAX)
}

/// A bar that stays hidden until the run has taken a second.
fn progress_bar(total: Duration, unit: ProgressUnit, quiet: bool) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(
        Some(progress_units(total, unit)),
        ProgressDrawTarget::hidden(),
    );
    if !quiet {
        bar.set_style(progress_style(unit, "{spinner}"));
    }
    bar
}

/// A run's bar style: `lead` (a spinner, or a run set's name), then
/// simulated milliseconds or a count.
pub(crate) fn progress_style(unit: ProgressUnit, lead: &str) -> ProgressStyle {
    let rest = match unit {
        ProgressUnit::Count => "{human_pos}/{human_len} [{bar:30}] {percent}% eta {eta}",
        _ => "simulated {pos}/{len} ms [{bar:30}] {percent}% eta {eta}",
    };
    ProgressStyle::with_template(&format!("{lead} {rest}"))
        .expect("static progress template is valid")
        .progress_chars("=> ")
}

/// Wall-clock time for progress bars and speed reports; never enters the simulation.
pub(crate) struct WallClock(std::time::Instant);

impl WallClock {
    #[expect(
        clippy::disallowed_methods,
        reason = "driver clock: the CLI times the run for the user"
    )]
    pub(crate) fn start() -> Self {
        Self(std::time::Instant::now())
    }
    pub(crate) fn elapsed(&self) -> Duration {
        self.0.elapsed()
    }
}
