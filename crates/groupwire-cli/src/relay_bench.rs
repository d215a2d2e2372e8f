//! `groupwire relay bench`: the command line of the relay's load
//! generator, `groupwire_relay::bench` (which see for what it measures and
//! how). This module parses the arguments and prints the report as a
//! table, JSON and CSV.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use clap::Args;
use groupwire_relay::bench::{self, BenchConfig, Scenario, Target};
use groupwire_units::duration;

use crate::args::one_of;

/// Load a running relay (or nats-server) with many clients and measure
/// delivery latency and throughput.
///
/// Start the relay yourself (ideally pinned to its own core), then point
/// the bench at it. Every client is a TCP connection in this one process;
/// publishers send on a fixed schedule (open loop) and every receiver
/// records the latency from send to receipt in an HdrHistogram (from the
/// scheduled send time where the server held the publisher up, so a slow
/// server cannot hide its delay; sends the bench itself made late are
/// counted apart). Results print as a table; --json writes every number.
///
/// Scenarios (the paper is Litiu & Prakash, §5):
///
///   burst        Fig. 5: a 6-member chat group (5 msg/s of 200 B) while
///                another 6-member group sends bursts of 5 x 40 KB.
///
///   group-size   Fig. 6: a 2-member high-priority group (5 msg/s) while
///                another group (5 msg/s) grows through --sizes.
///
///   roles        Fig. 7: one 20-member group (3 msg/s); half the members
///                have high priority (principal, active), half low
///                (observer, passive).
///
///   isolation    every client is in one firehose group and in 20
///                low-rate groups; the low-rate latency is measured
///                without, then with the firehose.
///
///   slow-member  one group of 1000; then one member reads at only
///                --slow-read bytes/s; the others' latency and the
///                relay's memory (--relay-pid) are measured in both phases.
///
///   fanout       --groups groups of --members members, --rate messages/s
///                per group: deliveries/s, latency percentiles and, with
///                --relay-pid, deliveries per relay CPU-second.
///
/// Example:
///   groupwire relay --memory --listen 127.0.0.1:7600 &
///   groupwire relay bench fanout --relay 127.0.0.1:7600 --groups 1 --members 1000 --rate 500 --duration 10s
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub(crate) struct BenchArgs {
    /// What to measure (see above).
    #[arg(value_parser = one_of(Scenario::ALL, Scenario::as_str))]
    scenario: Scenario,
    /// Address of the relay, or of nats-server with --target nats. For a
    /// relay, a comma-separated list of nodes of one cluster (--nats)
    /// spreads the clients over them, round robin.
    #[arg(long, default_value = "127.0.0.1:7600")]
    relay: String,
    /// What listens at --relay.
    #[arg(long, value_parser = one_of(Target::ALL, Target::as_str), default_value = "relay")]
    target: Target,
    /// Measurement time of each phase.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, default_value = "10s")]
    duration: Duration,
    /// Load before each phase's measurement starts (queues settle).
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, default_value = "2s")]
    warmup: Duration,
    /// Members per group (default: 6 burst, 20 roles, 50 isolation, 1000
    /// slow-member, 10 fanout).
    #[arg(long)]
    members: Option<usize>,
    /// Groups (fanout; default 1).
    #[arg(long)]
    groups: Option<usize>,
    /// Client connections (fanout; default: members x groups, at most 1000;
    /// each client then joins several groups).
    #[arg(long)]
    clients: Option<usize>,
    /// Messages per second per publisher (default: 5 burst and group-size,
    /// 3 roles, 5 isolation, 20 slow-member, 100 fanout).
    #[arg(long)]
    rate: Option<f64>,
    /// Payload bytes (default 200, the paper's; 1000 for slow-member).
    #[arg(long)]
    size: Option<usize>,
    /// Publishers per group (fanout); each sends --rate.
    #[arg(long, default_value_t = 1)]
    publishers: usize,
    /// group-size: the sizes the growing group goes through.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "2,5,10,20,30,40,50,100,200,500"
    )]
    sizes: Vec<usize>,
    /// burst: time between bursts.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, default_value = "2s")]
    burst_every: Duration,
    /// burst: messages per burst.
    #[arg(long, default_value_t = 5)]
    burst_count: u32,
    /// burst: bytes per burst message.
    #[arg(long, default_value_t = 40_000)]
    burst_size: usize,
    /// isolation: the firehose's messages per second.
    #[arg(long, default_value_t = 2000.0)]
    firehose_rate: f64,
    /// isolation: the firehose's payload bytes.
    #[arg(long, default_value_t = 1000)]
    firehose_size: usize,
    /// isolation: low-rate groups.
    #[arg(long, default_value_t = 20)]
    low_groups: usize,
    /// slow-member: how fast the slow member reads, bytes/s.
    #[arg(long, default_value_t = 10_000)]
    slow_read: u64,
    /// Send window each client asks the relay for, in bytes (0: the
    /// relay's default, 256 KiB). What a client has in flight is
    /// head-of-line delay for its next message, so latency-sensitive
    /// clients ask for small windows, as with a TCP receive window.
    #[arg(long, default_value_t = 0)]
    window: u32,
    /// The relay's process id: its CPU time (utime + stime) and resident
    /// memory are read from /proc during each phase.
    #[arg(long)]
    relay_pid: Option<u32>,
    /// Write every number as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write per-message latency series (time, ms) of the probe members
    /// to this CSV file.
    #[arg(long)]
    series_csv: Option<PathBuf>,
    /// No progress lines on stderr.
    #[arg(long)]
    quiet: bool,
}

pub(crate) fn run_bench(a: BenchArgs) -> Result<()> {
    if a.duration.is_zero() {
        return Err(crate::UsageError(anyhow!("--duration must be positive")).into());
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let quiet = a.quiet;
    let log = move |line: &str| {
        if !quiet {
            eprintln!("{line}");
        }
    };
    let report = rt.block_on(bench::run(&a.config(), &log))?;
    let mut out = std::io::stdout().lock();
    out.write_all(report.table().as_bytes())?;
    if let Some(path) = &a.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &a.series_csv {
        let mut w =
            csv::Writer::from_path(path).with_context(|| format!("writing {}", path.display()))?;
        w.write_record(["probe", "msg", "t_s", "latency_ms"])?;
        for s in report.series() {
            for (i, (t, l)) in s.points.iter().enumerate() {
                w.write_record([
                    s.name.clone(),
                    i.to_string(),
                    format!("{t:.3}"),
                    format!("{l:.3}"),
                ])?;
            }
        }
        w.flush()?;
    }
    Ok(())
}

impl BenchArgs {
    /// The library's configuration: the same fields, without the output
    /// options.
    fn config(&self) -> BenchConfig {
        let mut c = BenchConfig::new(self.scenario, self.relay.clone());
        c.target = self.target;
        c.duration = self.duration;
        c.warmup = self.warmup;
        c.members = self.members;
        c.groups = self.groups;
        c.clients = self.clients;
        c.rate = self.rate;
        c.size = self.size;
        c.publishers = self.publishers;
        c.sizes.clone_from(&self.sizes);
        c.burst_every = self.burst_every;
        c.burst_count = self.burst_count;
        c.burst_size = self.burst_size;
        c.firehose_rate = self.firehose_rate;
        c.firehose_size = self.firehose_size;
        c.low_groups = self.low_groups;
        c.slow_read = self.slow_read;
        c.window = self.window;
        c.relay_pid = self.relay_pid;
        c
    }
}
