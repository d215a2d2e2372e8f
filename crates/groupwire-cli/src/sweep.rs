//! `groupwire sim sweep PLAN.toml`: an experiment plan's run sets on
//! `--jobs` threads, each written as `sim run` writes a run, composed into
//! one page.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use groupwire_metrics::Report;
use groupwire_proto::Instant;
use groupwire_sim::scenario::Scenario;
use groupwire_sim::sweep::{self, Finished, Plan, PlannedRun};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::UsageError;
use crate::output;
use crate::sim::{WallClock, progress_style, progress_units, split_sets};

#[derive(Debug, Args)]
pub(crate) struct SweepArgs {
    /// The plan (TOML; see crates/groupwire-sim/plans/ for examples).
    pub(crate) plan: PathBuf,
    /// Run sets to run at once. Defaults to the number of cores.
    #[arg(long, short, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub(crate) jobs: Option<u16>,
    /// Output directory. Defaults to `out/<plan file stem>`.
    #[arg(long, value_name = "DIR")]
    pub(crate) out: Option<PathBuf>,
    /// Run only these run sets (repeatable; names as in the plan).
    #[arg(long, value_name = "NAME")]
    pub(crate) only: Vec<String>,
    /// Change a parameter of every run set, after the plan's own
    /// overrides (repeatable): `--set duration=20s`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub(crate) set: Vec<String>,
    /// Do not write PNG plots (CSV and JSON are still written).
    #[arg(long)]
    pub(crate) no_plots: bool,
    /// Print nothing but errors; no progress bars.
    #[arg(long, short)]
    pub(crate) quiet: bool,
}

pub(crate) fn run(args: &SweepArgs) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&args.plan)
        .with_context(|| format!("cannot read plan {}", args.plan.display()))
        .map_err(UsageError)?;
    let plan = Plan::from_toml(&text)
        .with_context(|| format!("plan {}", args.plan.display()))
        .map_err(UsageError)?;
    let base = Scenario::builtin(&plan.scenario)
        .with_context(|| format!("plan {}", args.plan.display()))
        .map_err(UsageError)?;
    let extra = split_sets(&args.set)?;
    let runs = plan
        .expand(&base, &args.only, &extra)
        .with_context(|| format!("plan {}", args.plan.display()))
        .map_err(UsageError)?;
    let out_dir = args.out.clone().unwrap_or_else(|| {
        let stem = args.plan.file_stem().unwrap_or_default();
        PathBuf::from("out").join(stem)
    });
    let jobs = args.jobs.map_or_else(
        || std::thread::available_parallelism().map_or(1, usize::from),
        usize::from,
    );

    let clock = WallClock::start();
    let done = run_all(&runs, jobs, &out_dir, args)?;
    let summary = sweep::summarize(&plan, &done)
        .with_context(|| format!("plan {}", args.plan.display()))
        .map_err(UsageError)?;
    let page = sweep::markdown(
        &plan,
        &done,
        &summary,
        &command_line(args, &out_dir),
        &out_dir.display().to_string(),
    );
    write(&out_dir.join("report.md"), page.as_bytes())?;
    write(
        &out_dir.join("sweep.json"),
        serde_json::to_string_pretty(&summary)?.as_bytes(),
    )?;
    if !args.quiet {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", plan.title)?;
        for t in &summary.tallies {
            match t.of {
                Some(of) => writeln!(out, "  {}: {} of {}", t.label, t.count, of)?,
                None => writeln!(out, "  {}: {}", t.label, t.count)?,
            }
        }
        writeln!(
            out,
            "\nran {} run sets in {:.1} s; wrote {} (the page) and one directory per run set",
            done.len(),
            clock.elapsed().as_secs_f64(),
            out_dir.join("report.md").display()
        )?;
    }
    Ok(())
}

/// Runs every planned run on `jobs` threads, writing each to
/// `out/NAME/` as it finishes; the results come back in plan order. The
/// first failure stops new runs from starting and is the error.
fn run_all(
    runs: &[PlannedRun],
    jobs: usize,
    out: &Path,
    args: &SweepArgs,
) -> anyhow::Result<Vec<Finished>> {
    let bars = MultiProgress::with_draw_target(if args.quiet {
        ProgressDrawTarget::hidden()
    } else {
        ProgressDrawTarget::stderr()
    });
    let total = bars.add(ProgressBar::new(runs.len() as u64));
    total.set_style(
        ProgressStyle::with_template("run sets {pos}/{len} [{bar:30}] {elapsed_precise}")
            .expect("static progress template is valid")
            .progress_chars("=> "),
    );
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let results: Mutex<Vec<Option<anyhow::Result<Report>>>> =
        Mutex::new(runs.iter().map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..jobs.min(runs.len()) {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(run) = runs.get(i) else { break };
                    if failed.load(Ordering::Relaxed) {
                        break;
                    }
                    let r = run_one(run, out, &bars, args.no_plots);
                    if r.is_err() {
                        failed.store(true, Ordering::Relaxed);
                    }
                    total.inc(1);
                    results.lock().expect("no thread panics holding the lock")[i] = Some(r);
                }
            });
        }
    });
    total.finish_and_clear();
    let mut done = Vec::new();
    let results = results.into_inner().expect("no thread panicked");
    for (run, r) in runs.iter().zip(results) {
        match r {
            Some(Ok(report)) => done.push(Finished {
                run: run.clone(),
                report,
            }),
            Some(Err(e)) => return Err(e.context(format!("run set {}", run.name))),
            None => {}
        }
    }
    Ok(done)
}

/// One run set, with its own progress bar, written to `out/NAME/`.
fn run_one(
    run: &PlannedRun,
    out: &Path,
    bars: &MultiProgress,
    no_plots: bool,
) -> anyhow::Result<Report> {
    let unit = run.scenario.progress_unit();
    let bar = bars.add(ProgressBar::new(progress_units(
        run.scenario.duration(),
        unit,
    )));
    bar.set_style(progress_style(unit, "  {prefix:<20}"));
    bar.set_prefix(run.name.clone());
    let clock = WallClock::start();
    let report = run
        .scenario
        .run(run.seed, &mut |t: Instant| {
            bar.set_position(progress_units(t.since_epoch(), unit));
        })
        .map_err(UsageError::new)?;
    let wall: Duration = clock.elapsed();
    bar.finish_and_clear();
    bars.remove(&bar);
    output::write_all(
        &out.join(&run.name),
        &run.scenario,
        &report,
        wall,
        !no_plots,
    )?;
    Ok(report)
}

fn write(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create output directory {}", dir.display()))?;
    }
    std::fs::write(path, bytes).with_context(|| format!("cannot write {}", path.display()))
}

/// The command that made the page, as the page prints it (without
/// `--jobs`, `--quiet` and `--no-plots`, which do not change the results).
fn command_line(args: &SweepArgs, out: &Path) -> String {
    let mut line = format!("groupwire sim sweep {}", args.plan.display());
    for o in &args.only {
        line.push_str(&format!(" --only {o}"));
    }
    for kv in &args.set {
        line.push_str(&format!(" --set '{kv}'"));
    }
    line.push_str(&format!(" --out {}", out.display()));
    line
}
