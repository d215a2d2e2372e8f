//! `groupwire`: simulate, emulate and measure adaptive, loss-resilient transports.
//!
//! Exit codes: [`EXIT_OK`], [`EXIT_FAILED`], [`EXIT_USAGE`].

mod awareness;
mod emulate;
mod net;
mod output;
mod plot;
mod relay;
mod relay_bench;
mod sim;
mod tunnel;

use std::io::Write;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// The command did what was asked.
const EXIT_OK: u8 = 0;
/// The command was understood but failed while running.
const EXIT_FAILED: u8 = 1;
/// Bad arguments, a bad scenario file or an impossible parameter.
const EXIT_USAGE: u8 = 2;

/// groupwire: an adaptive, loss-resilient networking toolkit for real-time
/// collaboration and streaming.
///
/// Start with `groupwire sim list` to see the built-in experiments, then
/// `groupwire sim run tcp-dumbbell` to run one.
#[derive(Debug, Parser)]
#[command(name = "groupwire", version, max_term_width = 100)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run and inspect experiments in the deterministic network simulator.
    #[command(subcommand)]
    Sim(sim::SimCommand),
    Emulate(emulate::EmulateArgs),
    /// Stream telepointer updates over real UDP with adaptive FEC, or receive them.
    #[command(subcommand)]
    Awareness(awareness::AwarenessCommand),
    Relay(Box<relay::RelayArgs>),
    Group(relay::GroupArgs),
    Tunnel(tunnel::TunnelArgs),
    Plot(plot::PlotArgs),
}

/// An error that is the user's to fix (exit code 2), as opposed to a failure while running.
#[derive(Debug)]
struct UsageError(anyhow::Error);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#}", self.0)
    }
}

impl std::error::Error for UsageError {}

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
        Command::Sim(cmd) => sim::run(cmd),
        Command::Emulate(args) => emulate::run(args),
        Command::Awareness(cmd) => awareness::run(cmd),
        Command::Relay(args) => relay::run_relay(*args),
        Command::Group(args) => relay::run_group(args),
        Command::Tunnel(args) => tunnel::run(args),
        Command::Plot(args) => plot::run_plot(args),
    };
    match result {
        Ok(()) => ExitCode::from(EXIT_OK),
        Err(e) if is_broken_pipe(&e) => ExitCode::from(EXIT_OK),
        Err(e) => {
            let code = if e.downcast_ref::<UsageError>().is_some() {
                EXIT_USAGE
            } else {
                EXIT_FAILED
            };
            let _ = writeln!(std::io::stderr(), "error: {e:#}");
            ExitCode::from(code)
        }
    }
}

/// `groupwire sim list | head` must not fail when `head` closes the pipe.
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
