//! `groupwire`: simulate, emulate and measure adaptive, loss-resilient transports.
//!
//! Exit codes: see the `error` module (0 done, 1 failed while running, 2
//! a usage error).

mod args;
mod awareness;
mod bulk;
mod demo;
mod emulate;
mod error;
mod metrics;
mod net;
mod output;
mod plot;
mod ready;
mod relay;
mod relay_bench;
mod sim;
mod sweep;
mod timeseries;
mod tunnel;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub(crate) use error::UsageError;

/// groupwire: an adaptive, loss-resilient networking toolkit for real-time
/// collaboration and streaming.
///
/// Start with `groupwire demo` to watch a live two-peer session pick a
/// mechanism for each of its channels, or `groupwire sim list` to see the
/// built-in experiments.
#[derive(Debug, Parser)]
#[command(name = "groupwire", version, max_term_width = 100)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    Demo(demo::DemoArgs),
    /// Run and inspect experiments in the deterministic network simulator.
    #[command(subcommand)]
    Sim(sim::SimCommand),
    Emulate(Box<emulate::EmulateArgs>),
    /// Stream telepointer updates over real UDP with adaptive FEC, or receive them.
    #[command(subcommand)]
    Awareness(awareness::AwarenessCommand),
    Relay(Box<relay::RelayArgs>),
    Group(relay::GroupArgs),
    Tunnel(tunnel::TunnelArgs),
    #[command(subcommand)]
    Bulk(bulk::BulkCommand),
    Plot(plot::PlotArgs),
    Metrics(timeseries::SeriesArgs),
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("GROUPWIRE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo(args) => demo::run(args),
        Command::Sim(cmd) => sim::run(cmd),
        Command::Emulate(args) => emulate::run(*args),
        Command::Awareness(cmd) => awareness::run(cmd),
        Command::Relay(args) => relay::run_relay(*args),
        Command::Group(args) => relay::run_group(args),
        Command::Tunnel(args) => tunnel::run(args),
        Command::Bulk(cmd) => bulk::run(cmd),
        Command::Plot(args) => plot::run_plot(args),
        Command::Metrics(args) => timeseries::run(args),
    };
    error::exit_code(result)
}
