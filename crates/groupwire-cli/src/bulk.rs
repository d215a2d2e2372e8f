//! `groupwire bulk send|recv`: files over long fat networks (Leigh et al.
//! §4.2) with Reliable Blast UDP or striped TCP. Argument parsing, the
//! progress bar and the summary; the transports live in `groupwire-tokio`.

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use groupwire_proto::Bitrate;
use groupwire_proto::rbudp::{BlastSource, DEFAULT_PACKET_SIZE, MAX_PACKET_SIZE, RateControl};
use groupwire_tokio::Clock;
use groupwire_tokio::bulk::{BulkListener, BulkReceiveConfig, Mechanism, Received};
use groupwire_tokio::file::{FileSink, FileSource};
use groupwire_tokio::rbudp::{
    self, Progress, RbudpListener, RbudpReport, ReceiveConfig, SendConfig,
};
use groupwire_tokio::striped::{self, StripedConfig, StripedListener, StripedReport};
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
///          or known, and on lossy paths where TCP collapses. It takes
///          the rate it is given whatever else is on the path.
///   tcp    Plain TCP striped over one or more connections (parallel
///          socket striping, as iperf3 -P and GridFTP do), congestion
///          controlled.
///
/// The receiver takes either on one port (--via auto, the default). The
/// sender's --via auto (the default) picks by one rule:
///
///   RBUDP at --rate  if --rate is given and the round trip (--rtt, else
///                    the fastest of 3 TCP connects to the receiver) is at
///                    least 5 ms: a long path whose rate you know;
///   striped TCP      otherwise (N from --rate x --rtt when both are
///                    given, else 4): without a rate to blast at, or on a
///                    short path, where kernel TCP keeps up.
///
/// It says which and why on stderr and in --stats-json.
///
/// Start the receiver first, then the sender:
///   groupwire bulk recv --listen 0.0.0.0:7700 --out model.bin
///   groupwire bulk send model.bin --to 203.0.113.7:7700 --rate 90Mbit/s --rtt 150ms
///   groupwire bulk send model.bin --to 203.0.113.7:7700 --via rbudp --rate 90Mbit/s
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
    /// TCP striped over this many connections (`None`: from the path's
    /// bandwidth-delay product, or the library's default).
    Striped(Option<u16>),
    /// The sender: by [`choose`]'s rule; the receiver: whichever comes.
    Auto,
}

const VIA_CHOICES: &str =
    "auto, rbudp, tcp (one connection), striped (N from --rate and --rtt) or striped:N";

/// The least round trip at which `--via auto` blasts with RBUDP. LAN and
/// data-centre paths are well under a millisecond and there kernel TCP
/// fills the path (on loopback striped TCP moved ~7 Gbit/s against
/// RBUDP's ~3); the long fat networks RBUDP is for (Leigh et al. §4.2:
/// Chicago–Amsterdam, 150 ms) are tens of milliseconds and more.
const AUTO_RBUDP_MIN_RTT: Duration = Duration::from_millis(5);

/// TCP connects `--via auto` times to measure the round trip; the fastest
/// counts (a busy host only makes a connect slower).
const RTT_PROBES: u32 = 3;

fn parse_via(s: &str) -> Result<Via, String> {
    match s {
        "auto" => Ok(Via::Auto),
        "rbudp" => Ok(Via::Rbudp),
        "tcp" => Ok(Via::Striped(Some(1))),
        "striped" => Ok(Via::Striped(None)),
        _ => match s.strip_prefix("striped:").map(str::parse::<u16>) {
            Some(Ok(n)) if (1..=64).contains(&n) => Ok(Via::Striped(Some(n))),
            Some(_) => Err(format!("{s:?}: striped:N takes N from 1 to 64")),
            None => Err(format!("unknown mechanism {s:?}: use {VIA_CHOICES}")),
        },
    }
}

fn parse_recv_via(s: &str) -> Result<Via, String> {
    match s {
        "auto" => Ok(Via::Auto),
        "rbudp" => Ok(Via::Rbudp),
        // The sender's Hello says how many connections; any number is taken.
        "tcp" | "striped" => Ok(Via::Striped(None)),
        _ => Err(format!(
            "unknown mechanism {s:?}: use auto (either), rbudp or tcp (any striping)"
        )),
    }
}

#[derive(Debug, Args)]
pub(crate) struct SendArgs {
    /// The file to send.
    file: PathBuf,
    /// The receiver's address (`groupwire bulk recv --listen`).
    #[arg(long, value_name = "ADDR")]
    to: SocketAddr,
    /// The mechanism: auto, rbudp, tcp (one connection), striped (N and
    /// the socket buffers from the bandwidth-delay product of --rate and
    /// --rtt, else 4 connections) or striped:N. auto: RBUDP at --rate when
    /// --rate is given and the round trip (--rtt, else measured with TCP
    /// connects to the receiver) is at least 5 ms, else striped.
    #[arg(long, value_name = "HOW", default_value = "auto", value_parser = parse_via)]
    via: Via,
    /// RBUDP: the blast rate on the wire (IP and UDP headers counted), e.g.
    /// 90Mbit/s, the paper's "just below the available bandwidth".
    /// Striped TCP: the path's rate, for the bandwidth-delay product.
    #[arg(long, value_name = "RATE")]
    rate: Option<Bitrate>,
    /// The path's round-trip time, e.g. 150ms. Striped TCP: for the
    /// bandwidth-delay product; auto: instead of measuring it.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse)]
    rtt: Option<Duration>,
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
    /// Where to listen (TCP, and UDP on the same port for rbudp and auto).
    #[arg(long, value_name = "ADDR")]
    listen: SocketAddr,
    /// Where to store the file.
    #[arg(long, value_name = "PATH")]
    out: PathBuf,
    /// Replace --out if it exists.
    #[arg(long)]
    force: bool,
    /// The mechanisms to take: auto (whichever the sender uses, told
    /// apart by its first byte), rbudp, or tcp (one connection or striped
    /// over any number).
    #[arg(long, value_name = "HOW", default_value = "auto", value_parser = parse_recv_via)]
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
    /// `{"ready":"bulk-recv","listen":ADDR,"via":"auto"}` (or the --via
    /// given: "rbudp", "tcp").
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
    let rt = runtime()?;
    let choice = choose(args, &rt)?;
    if args.via == Via::Auto && !args.quiet {
        eprintln!("via {}: {}", choice.name(), choice.because);
    }
    let bar = bar(source.len(), args.quiet);
    let what = || format!("sending {} to {}", args.file.display(), args.to);
    let report = match choice.via {
        Via::Rbudp => {
            let mut cfg = rbudp_config(args)?;
            // Resumable: a receiver that kept part of this version of the
            // file from an interrupted transfer asks only for the rest.
            cfg.version = source.version().ok();
            let r = rt
                .block_on(rbudp::send(&cfg, source, |p| show(&bar, p)))
                .with_context(what);
            Report::Rbudp(r?)
        }
        Via::Striped(streams) => {
            let mut cfg = StripedConfig::new();
            cfg.streams = streams;
            cfg.path_rate = args.rate;
            cfg.path_rtt = args.rtt;
            cfg.timeout = cfg.timeout.max(args.connect_timeout);
            let r = rt
                .block_on(striped::send(args.to, source, &cfg, |b| {
                    bar.set_position(b)
                }))
                .with_context(what);
            Report::Striped(r?)
        }
        Via::Auto => unreachable!("choose picks a mechanism"),
    };
    bar.finish_and_clear();
    let mut extra = vec![("chosen_because", choice.because.into())];
    if let Some(rtt) = choice.rtt {
        extra.push(("path_rtt_seconds", rtt.as_secs_f64().into()));
    }
    report.finish("send", args.stats_json.as_deref(), &extra)
}

/// The mechanism a sender uses, and why.
struct Choice {
    /// [`Via::Rbudp`] or [`Via::Striped`].
    via: Via,
    /// For people and `--stats-json`'s `chosen_because`.
    because: String,
    /// The round trip the rule looked at, if it did.
    rtt: Option<Duration>,
}

impl Choice {
    fn name(&self) -> &'static str {
        match self.via {
            Via::Rbudp => "rbudp",
            _ => "tcp",
        }
    }
}

/// The sender's mechanism: the one given, or for `--via auto` RBUDP at
/// `--rate` when `--rate` is given and the round trip (`--rtt`, else the
/// fastest of [`RTT_PROBES`] TCP connects to the receiver) is at least
/// [`AUTO_RBUDP_MIN_RTT`]; else striped TCP as `--via striped` (N from
/// `--rate` × `--rtt` when both are given, else the library's default).
///
/// RBUDP needs a rate and keeps to it whatever else is on the path (the
/// paper's use: a reserved or known path), and it pays off where TCP's
/// window, not the link, is the limit: a long round trip. Striped TCP is
/// congestion-controlled and finds the rate itself.
fn choose(args: &SendArgs, rt: &tokio::runtime::Runtime) -> anyhow::Result<Choice> {
    let given = |via| Choice {
        via,
        because: "given with --via".into(),
        rtt: None,
    };
    if args.via != Via::Auto {
        return Ok(given(args.via));
    }
    let Some(rate) = args.rate else {
        return Ok(Choice {
            via: Via::Striped(None),
            because: "no --rate: RBUDP needs a rate to blast at, striped TCP finds the path's \
                      rate itself (congestion control)"
                .into(),
            rtt: None,
        });
    };
    let (rtt, from) = match args.rtt {
        Some(rtt) => (rtt, "given with --rtt"),
        None => (
            rt.block_on(measure_rtt(args.to, args.connect_timeout))
                .with_context(|| format!("measuring the round trip to {}", args.to))?,
            "measured",
        ),
    };
    let ms = |d: Duration| format!("{:.2} ms", d.as_secs_f64() * 1e3);
    let (via, because) = if rtt >= AUTO_RBUDP_MIN_RTT {
        (
            Via::Rbudp,
            format!(
                "--rate {rate} given and the round trip, {} ({from}), is at least {}: a long \
                 path, blasted at the rate you know",
                ms(rtt),
                ms(AUTO_RBUDP_MIN_RTT)
            ),
        )
    } else {
        (
            Via::Striped(None),
            format!(
                "the round trip, {} ({from}), is under {}: a short path, where kernel TCP keeps \
                 up without a blast rate",
                ms(rtt),
                ms(AUTO_RBUDP_MIN_RTT)
            ),
        )
    };
    Ok(Choice {
        via,
        because,
        rtt: Some(rtt),
    })
}

/// The fastest of [`RTT_PROBES`] TCP connects to `to`: one round trip
/// each (the handshake), closed at once (a receiver drops a connection
/// that closes without a byte and waits for the next).
async fn measure_rtt(to: SocketAddr, timeout: Duration) -> io::Result<Duration> {
    let clock = Clock::start();
    let mut best = Duration::MAX;
    for _ in 0..RTT_PROBES {
        let t0 = clock.now();
        let conn = tokio::time::timeout(timeout, tokio::net::TcpStream::connect(to))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))??;
        best = best.min(clock.now().saturating_duration_since(t0));
        drop(conn);
    }
    Ok(best)
}

fn rbudp_config(args: &SendArgs) -> anyhow::Result<SendConfig> {
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
    Ok(cfg)
}

fn recv(args: &RecvArgs) -> anyhow::Result<()> {
    if args.out.exists() && !args.force {
        return Err(UsageError::new(anyhow::anyhow!(
            "{} exists: give another --out, or --force to replace it",
            args.out.display()
        ))
        .into());
    }
    let rt = runtime()?;
    let bar = bar(0, args.quiet);
    // The file arrives as PATH.part and takes its name once its hash
    // matched, so a partial file never passes for the real one.
    let part = part_path(&args.out);
    // RBUDP keeps a record beside it and resumes; striped TCP starts over.
    let sink = |resumable: bool| {
        let s = if resumable {
            FileSink::resumable(&part)
        } else {
            let _ = std::fs::remove_file(FileSink::record_path(&part));
            FileSink::create(&part)
        };
        s.with_context(|| format!("cannot create {}", part.display()))
    };
    let mut extra = Vec::new();
    if args.via != Via::Auto {
        extra.push(("chosen_because", "given with --via".into()));
    }
    let got = match args.via {
        Via::Auto => {
            let listener = rt
                .block_on(BulkListener::bind(args.listen))
                .with_context(|| format!("cannot listen on {}", args.listen))?;
            announce(
                args,
                listener.local_addr()?,
                "auto",
                Some(listener.socket_buffer()),
            )?;
            let mut cfg = BulkReceiveConfig::default();
            cfg.rbudp.max_size = args.max_size.unwrap_or(u64::MAX);
            cfg.rbudp.accept_timeout = args.timeout;
            // Resumable if the sender blasts; a striped sender overwrites.
            let got = rt.block_on(listener.receive(&cfg, sink(true)?, |m, p| match m {
                Mechanism::Rbudp => show(&bar, p),
                _ => {
                    bar.set_length(p.total);
                    bar.set_position(p.bytes);
                }
            }));
            extra.push(("dropped_connections", listener.dropped().into()));
            if let Ok(r) = &got {
                let because = match r.mechanism() {
                    Mechanism::Rbudp => "the sender opened with an RBUDP control frame",
                    _ => "the sender opened with a striped TCP Hello",
                };
                extra.push(("chosen_because", because.into()));
            }
            match got {
                Ok(Received::Rbudp(r, sink)) => Ok((Report::Rbudp(r), sink)),
                Ok(Received::Striped(r)) => reopen(&part).map(|f| (Report::Striped(r), f)),
                Ok(_) => Err(anyhow::anyhow!("a mechanism this build does not know")),
                Err(e) => Err(e.into()),
            }
        }
        Via::Rbudp => {
            let listener = rt
                .block_on(RbudpListener::bind(args.listen))
                .with_context(|| format!("cannot listen on {}", args.listen))?;
            announce(
                args,
                listener.local_addr()?,
                "rbudp",
                Some(listener.socket_buffer()),
            )?;
            let mut cfg = ReceiveConfig::default();
            cfg.max_size = args.max_size.unwrap_or(u64::MAX);
            cfg.accept_timeout = args.timeout;
            rt.block_on(listener.receive(&cfg, sink(true)?, |p| show(&bar, p)))
                .map(|(r, sink)| (Report::Rbudp(r), sink))
                .map_err(anyhow::Error::from)
        }
        Via::Striped(_) => {
            let mut cfg = StripedConfig::new();
            cfg.wait = args.timeout;
            let listener = rt
                .block_on(StripedListener::bind_with(args.listen, &cfg))
                .with_context(|| format!("cannot listen on {}", args.listen))?;
            announce(args, listener.local_addr()?, "tcp", None)?;
            rt.block_on(listener.accept(sink(false)?, &cfg, |b| bar.set_position(b)))
                .map_err(anyhow::Error::from)
                .and_then(|r| reopen(&part).map(|f| (Report::Striped(r), f)))
        }
    };
    bar.finish_and_clear();
    let (report, sink) = match got {
        Ok(ok) => ok,
        Err(e) => return Err(e).with_context(|| interrupted(&part)),
    };
    land(sink, &part, &args.out)?;
    report.finish("receive", args.stats_json.as_deref(), &extra)
}

/// The striped receiver keeps its sink (it writes behind and flushes
/// when dropped); the file is opened again to put it on disk.
fn reopen(out: &Path) -> anyhow::Result<FileSink> {
    let file = std::fs::OpenOptions::new().write(true).open(out)?;
    Ok(FileSink::from_file(file))
}

/// Where a file bound for `out` is written until it is whole: `OUT.part`.
fn part_path(out: &Path) -> PathBuf {
    let mut p = out.as_os_str().to_owned();
    p.push(".part");
    PathBuf::from(p)
}

/// What a failed receive says about the partial file it leaves: kept with
/// its record for a resume (RBUDP), else removed.
fn interrupted(part: &Path) -> String {
    let record = FileSink::record_path(part);
    if record.exists() {
        format!(
            "receiving into {}: kept it; run the same bulk recv and bulk send again to resume \
             (only what is missing is sent), or delete it and {} to start over",
            part.display(),
            record.display()
        )
    } else {
        let _ = std::fs::remove_file(part);
        format!("receiving into {} (removed)", part.display())
    }
}

/// Puts a received file on disk and gives it its name.
fn land(mut sink: FileSink, part: &Path, out: &Path) -> anyhow::Result<()> {
    sink.sync()
        .with_context(|| format!("cannot write {}", part.display()))?;
    drop(sink);
    // A record an RBUDP transfer left, overwritten by a striped one.
    let _ = std::fs::remove_file(FileSink::record_path(part));
    std::fs::rename(part, out)
        .with_context(|| format!("cannot rename {} to {}", part.display(), out.display()))
}

fn announce(
    args: &RecvArgs,
    listen: SocketAddr,
    via: &'static str,
    udp_buffer: Option<usize>,
) -> anyhow::Result<()> {
    if args.ready_json {
        ready::announce("bulk-recv", &Ready { listen, via })?;
    }
    if !args.quiet {
        let what = if via == "auto" { "rbudp or tcp" } else { via };
        match udp_buffer {
            Some(b) => eprintln!(
                "listening on {listen} ({what}; UDP receive buffer {} KiB)",
                b / 1024
            ),
            None => eprintln!("listening on {listen} ({what})"),
        }
    }
    Ok(())
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
        format!(" at {}", mbps(p.rate_bps))
    } else {
        String::new()
    };
    bar.set_message(format!("blast {}{rate}", p.round + 1));
}

/// A rate for people: `93.4 Mbit/s`.
fn mbps(bps: u64) -> String {
    format!("{:.1} Mbit/s", bps as f64 / 1e6)
}

/// A finished transfer's report, whichever the mechanism.
enum Report {
    Rbudp(RbudpReport),
    Striped(StripedReport),
}

impl Report {
    /// Prints the summary on stdout and writes it as JSON if asked: the
    /// mechanism's own report with `via`, `role`, `size`, `seconds` and
    /// `effective_bps` common to both, and the `extra` fields.
    fn finish(
        &self,
        role: &str,
        json: Option<&Path>,
        extra: &[(&str, serde_json::Value)],
    ) -> anyhow::Result<()> {
        let (via, size, seconds, bps, hash) = match self {
            Self::Rbudp(r) => (
                "rbudp",
                r.size,
                r.seconds,
                r.effective_bps,
                r.blake3.clone(),
            ),
            Self::Striped(r) => (
                "tcp",
                r.bytes,
                r.elapsed.as_secs_f64(),
                r.rate_bps,
                r.hash.iter().map(|b| format!("{b:02x}")).collect(),
            ),
        };
        println!(
            "{}: {size} bytes via {via} in {seconds:.3} s = {} effective, blake3 {}",
            if role == "send" { "sent" } else { "received" },
            mbps(bps),
            &hash[..16],
        );
        match self {
            Self::Rbudp(r) => {
                println!(
                    "  rbudp: {} blast(s), {} NAK round(s)",
                    r.rounds, r.nak_rounds
                );
                if r.held_packets > 0 {
                    println!(
                        "  resumed: {} of {} packets were already at the receiver",
                        r.held_packets, r.packets
                    );
                }
                if r.discarded_partial {
                    println!(
                        "  a partial file of another version (the file changed since the \
                         interrupted transfer) was discarded; started over"
                    );
                }
                if let Some(s) = &r.sender {
                    println!(
                        "  datagrams {} ({} again), first rate {}, last rate {}",
                        s.datagrams,
                        s.retransmitted,
                        mbps(r.first_rate_bps),
                        mbps(r.final_rate_bps),
                    );
                }
                if let Some(s) = &r.receiver {
                    println!(
                        "  datagrams {} stored {} duplicate {} foreign {} malformed {}",
                        s.datagrams, s.stored, s.duplicates, s.foreign, s.malformed
                    );
                }
            }
            Self::Striped(r) => {
                let buffer = r.socket_buffer.map_or_else(
                    || "system default".to_owned(),
                    |b| format!("{} KiB", b / 1024),
                );
                println!("  tcp: {} stream(s), socket buffer {buffer}", r.streams);
                for st in &r.per_stream {
                    println!(
                        "  stream {}: {} bytes in {} chunks, {}",
                        st.index,
                        st.bytes,
                        st.chunks,
                        mbps(st.rate_bps)
                    );
                }
            }
        }
        if let Some(path) = json {
            let mut v = match self {
                Self::Rbudp(r) => serde_json::to_value(r)?,
                Self::Striped(r) => serde_json::to_value(r)?,
            };
            if let Some(m) = v.as_object_mut() {
                m.insert("via".into(), via.into());
                m.insert("role".into(), role.into());
                m.insert("size".into(), size.into());
                m.insert("seconds".into(), seconds.into());
                m.insert("effective_bps".into(), bps.into());
                for (k, v) in extra {
                    m.insert((*k).into(), v.clone());
                }
            }
            let text = serde_json::to_string_pretty(&v)?;
            std::fs::write(path, text + "\n")
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        Ok(())
    }
}
