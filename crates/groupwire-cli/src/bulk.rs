//! `groupwire bulk send|recv`: files over long fat networks (Leigh et al.
//! §4.2) with Reliable Blast UDP or striped TCP. Argument parsing, the
//! progress bar and the summary; the transports live in `groupwire-tokio`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use groupwire_proto::Bitrate;
use groupwire_proto::rbudp::{BlastSource, DEFAULT_PACKET_SIZE, MAX_PACKET_SIZE, RateControl};
use groupwire_tokio::rbudp::{
    self, FileSink, FileSource, Progress, RbudpListener, RbudpReport, ReceiveConfig, SendConfig,
};
use groupwire_units::duration;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;

use crate::UsageError;
use crate::net::runtime;
use crate::ready;

/// Move a file over a long, fat network (Leigh et al. §4.2).
///
/// Two mechanisms, both checked end to end with a BLAKE3 hash of the file:
///
///   rbudp  Reliable Blast UDP: the whole file is blasted over UDP at
///          --rate with no acknowledgements, the receiver answers each
///          blast with the list of what is missing (over a TCP control
///          connection on the same port), and exactly that is blasted
///          again until nothing is missing. Good where a rate is reserved
///          or known, and on lossy paths where TCP collapses.
///   tcp    Plain TCP striped over one or more connections (parallel
///          socket striping, as iperf3 -P and GridFTP do).
///
/// Start the receiver first, then the sender:
///   groupwire bulk recv --listen 0.0.0.0:7700 --out model.bin
///   groupwire bulk send model.bin --to 203.0.113.7:7700 --rate 90Mbit/s
#[derive(Debug, Subcommand)]
#[command(verbatim_doc_comment)]
pub(crate) enum BulkCommand {
    /// Send FILE to a `groupwire bulk recv`.
    Send(SendArgs),
    /// Wait for one file from a `groupwire bulk send` and store it.
    Recv(RecvArgs),
}

/// How to move the bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Via {
    /// Reliable Blast UDP.
    Rbudp,
}

fn parse_via(s: &str) -> Result<Via, String> {
    match s {
        "rbudp" => Ok(Via::Rbudp),
        _ => Err(format!("unknown mechanism {s:?}: use rbudp")),
    }
}

#[derive(Debug, Args)]
pub(crate) struct SendArgs {
    /// The file to send.
    file: PathBuf,
    /// The receiver's address (`groupwire bulk recv --listen`).
    #[arg(long, value_name = "ADDR")]
    to: SocketAddr,
    /// The mechanism: rbudp.
    #[arg(long, value_name = "HOW", default_value = "rbudp", value_parser = parse_via)]
    via: Via,
    /// RBUDP's blast rate on the wire (IP and UDP headers counted), e.g.
    /// 90Mbit/s: the paper's "just below the available bandwidth".
    #[arg(long, value_name = "RATE")]
    rate: Option<Bitrate>,
    /// RBUDP: after a blast that lost 1% or more, blast again just below
    /// the rate the receiver measured it arriving at (beyond the paper,
    /// which leaves the rate to the user).
    #[arg(long)]
    adaptive: bool,
    /// RBUDP payload bytes per datagram.
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_PACKET_SIZE,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_PACKET_SIZE)))]
    packet_size: u32,
    /// Give up connecting after this long.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = duration::parse)]
    connect_timeout: Duration,
    /// No progress bar.
    #[arg(long, short)]
    quiet: bool,
    /// Write the summary as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    stats_json: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct RecvArgs {
    /// Where to listen (TCP, and UDP on the same port for rbudp).
    #[arg(long, value_name = "ADDR")]
    listen: SocketAddr,
    /// Where to store the file.
    #[arg(long, value_name = "PATH")]
    out: PathBuf,
    /// Replace --out if it exists.
    #[arg(long)]
    force: bool,
    /// The mechanism the sender uses: rbudp.
    #[arg(long, value_name = "HOW", default_value = "rbudp", value_parser = parse_via)]
    via: Via,
    /// Refuse files larger than this many bytes.
    #[arg(long, value_name = "BYTES")]
    max_size: Option<u64>,
    /// Give up if no sender has come after this long (default: wait).
    #[arg(long, value_name = "DURATION", value_parser = duration::parse)]
    timeout: Option<Duration>,
    /// No progress bar.
    #[arg(long, short)]
    quiet: bool,
    /// Once listening, print one JSON line on stdout for scripts:
    /// `{"ready":"bulk-recv","listen":ADDR,"via":"rbudp"}`.
    #[arg(long)]
    ready_json: bool,
    /// Write the summary as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    stats_json: Option<PathBuf>,
}

pub(crate) fn run(cmd: BulkCommand) -> anyhow::Result<()> {
    match cmd {
        BulkCommand::Send(args) => send(&args),
        BulkCommand::Recv(args) => recv(&args),
    }
}

fn send(args: &SendArgs) -> anyhow::Result<()> {
    let source = FileSource::open(&args.file)
        .with_context(|| format!("cannot read {}", args.file.display()))
        .map_err(UsageError::new)?;
    let Via::Rbudp = args.via;
    let Some(rate) = args.rate else {
        return Err(UsageError::new(anyhow::anyhow!(
            "RBUDP blasts at a rate you choose: give --rate, just below the path's available \
             bandwidth (e.g. --rate 90Mbit/s on a 100 Mbit/s path), and add --adaptive to let \
             it come down after a lossy blast"
        ))
        .into());
    };
    let mut cfg = SendConfig::new(args.to, rate);
    cfg.packet_size = args.packet_size;
    cfg.connect_timeout = args.connect_timeout;
    if args.adaptive {
        cfg.rate_control = RateControl::adaptive();
    }
    let bar = bar(source.len(), args.quiet);
    let report = runtime()?
        .block_on(rbudp::send(&cfg, source, |p| show(&bar, p)))
        .with_context(|| format!("sending {} to {}", args.file.display(), args.to));
    bar.finish_and_clear();
    finish(&report?, args.stats_json.as_deref())
}

fn recv(args: &RecvArgs) -> anyhow::Result<()> {
    if args.out.exists() && !args.force {
        return Err(UsageError::new(anyhow::anyhow!(
            "{} exists: give another --out, or --force to replace it",
            args.out.display()
        ))
        .into());
    }
    let Via::Rbudp = args.via;
    let rt = runtime()?;
    let listener = rt
        .block_on(RbudpListener::bind(args.listen))
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let listen = listener.local_addr()?;
    if args.ready_json {
        ready::announce(
            "bulk-recv",
            &Ready {
                listen,
                via: "rbudp",
            },
        )?;
    }
    if !args.quiet {
        eprintln!(
            "listening on {listen} (rbudp; UDP receive buffer {} KiB)",
            listener.socket_buffer() / 1024
        );
    }
    let sink = FileSink::create(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    let mut cfg = ReceiveConfig::default();
    cfg.max_size = args.max_size.unwrap_or(u64::MAX);
    cfg.accept_timeout = args.timeout;
    let bar = bar(0, args.quiet);
    let got = rt.block_on(listener.receive(&cfg, sink, |p| show(&bar, p)));
    bar.finish_and_clear();
    let (report, mut sink) = match got {
        Ok(ok) => ok,
        Err(e) => {
            // A partial file would pass for the real one: remove it.
            let _ = std::fs::remove_file(&args.out);
            return Err(e).with_context(|| format!("receiving into {}", args.out.display()));
        }
    };
    sink.sync()
        .with_context(|| format!("cannot write {}", args.out.display()))?;
    finish(&report, args.stats_json.as_deref())
}

#[derive(Serialize)]
struct Ready {
    listen: SocketAddr,
    via: &'static str,
}

/// A byte bar with rate and ETA, hidden with --quiet or off a terminal.
fn bar(total: u64, quiet: bool) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template(
            "{bytes}/{total_bytes} [{bar:30}] {binary_bytes_per_sec} eta {eta} {msg}",
        )
        .expect("static progress template is valid")
        .progress_chars("=> "),
    );
    bar
}

fn show(bar: &ProgressBar, p: Progress) {
    if p.total > 0 {
        bar.set_length(p.total);
    }
    bar.set_position(p.bytes);
    let rate = if p.rate_bps > 0 {
        format!(" at {}", Bitrate::bps(p.rate_bps))
    } else {
        String::new()
    };
    bar.set_message(format!("blast {}{rate}", p.round + 1));
}

/// Prints the summary on stdout and writes it as JSON if asked.
fn finish(r: &RbudpReport, json: Option<&Path>) -> anyhow::Result<()> {
    println!(
        "{}: {} bytes in {:.3} s = {} effective, {} blast(s) ({} NAK round(s)), blake3 {}",
        if r.role == "send" { "sent" } else { "received" },
        r.size,
        r.seconds,
        Bitrate::bps(r.effective_bps),
        r.rounds,
        r.nak_rounds,
        &r.blake3[..16],
    );
    if let Some(s) = &r.sender {
        println!(
            "  datagrams {} ({} again), first rate {}, last rate {}",
            s.datagrams,
            s.retransmitted,
            Bitrate::bps(r.first_rate_bps),
            Bitrate::bps(r.final_rate_bps),
        );
    }
    if let Some(s) = &r.receiver {
        println!(
            "  datagrams {} stored {} duplicate {} foreign {} malformed {}",
            s.datagrams, s.stored, s.duplicates, s.foreign, s.malformed
        );
    }
    if let Some(path) = json {
        let text = serde_json::to_string_pretty(r)?;
        std::fs::write(path, text + "\n")
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}
