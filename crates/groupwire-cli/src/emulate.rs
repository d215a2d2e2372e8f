//! `groupwire emulate ...`: the userspace link emulator on real sockets.

use std::io::Write;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, ValueEnum};
use groupwire_link::{LinkConfig, LossModel, QueueLimit, Varying};
use groupwire_proto::Bitrate;
use groupwire_tokio::emulator::tcp::TcpCongestion;
use groupwire_tokio::{
    Clock, CorruptPolicy, DirectionStats, Emulator, EmulatorConfig, EmulatorStats,
};
use groupwire_units::duration;

use crate::UsageError;
use crate::net::{runtime, shutdown_signal};

/// Forward UDP through emulated lossy links (real sockets), or run a
/// command whose every packet crosses them (`emulate shell`).
///
/// Every datagram a client sends to ADDR is forwarded to the target from a
/// socket of its own (one per client address), and the target's replies go
/// back the same way. Each direction is one seeded link model, the same as
/// in the simulator: drop-tail queue, serialization at --rate (IP and UDP
/// headers counted), --delay plus up to --jitter, then the loss model.
/// --loss applies client → target; the reverse direction is lossless unless
/// --reverse-loss is given. Corrupted datagrams (ber: models) are dropped,
/// as a UDP checksum would, unless --corrupt forward.
///
/// With --tcp it also relays TCP: connections to ADDR's port go to the
/// target's port, their segments through the same links (so a bulk TCP
/// transfer and the datagrams share one queue); a lost segment is sent
/// again a round trip later and the bytes behind it wait, as with TCP's
/// own retransmission, and each direction's window halves on loss and
/// grows as TCP Reno's does, up to --tcp-window bytes (--tcp-congestion
/// fixed: never cut).
///
/// Prints both directions' counters on stderr once a second and a summary
/// on stdout when stopped by Ctrl-C or --duration.
///
/// Each socket asks for 4 MiB of kernel buffers (SO_RCVBUF/SO_SNDBUF); if
/// the kernel caps them (net.core.rmem_max, wmem_max) that is said on
/// stderr. Datagrams the kernel still dropped on a full receive buffer are
/// counted as "socket drops" (Linux, from /proc/net/udp), apart from the
/// link model's loss: they are the host's overload, not the link.
///
/// Example (Dyck & Gutwin's 256 kbit/s line with ~20% bursty loss):
///   groupwire emulate --listen 127.0.0.1:7401 --forward 127.0.0.1:7400 \
///       --loss burst:start=0.08,len=1..5 --rate 256kbit/s --delay 10ms
#[derive(Debug, Args)]
#[command(
    verbatim_doc_comment,
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
pub(crate) struct EmulateArgs {
    #[command(subcommand)]
    command: Option<EmulateCommand>,
    /// Address clients send to.
    #[arg(long, value_name = "ADDR", required = true)]
    listen: Option<SocketAddr>,
    /// Address datagrams are forwarded to (the target).
    #[arg(long, value_name = "ADDR", required = true)]
    forward: Option<SocketAddr>,
    #[command(flatten)]
    link: LinkArgs,
    /// What happens to corrupted datagrams.
    #[arg(long, value_enum, default_value_t = Corrupt::Drop)]
    corrupt: Corrupt,
    /// Also relay TCP connections to ADDR's port through the same links.
    #[arg(long)]
    tcp: bool,
    /// Most bytes per direction a relayed TCP connection may hold in the
    /// link, its receive window (default: twice the forward link's
    /// bandwidth-delay product, 64 KiB to 16 MiB).
    #[arg(long, value_name = "BYTES", requires = "tcp")]
    tcp_window: Option<usize>,
    /// How a relayed connection's window reacts to loss: reno (halves,
    /// as loss-based TCP senders do) or fixed (never cut, as a sender
    /// that ignores random loss, BBR roughly).
    #[arg(long, value_enum, default_value_t = Congestion::Reno, requires = "tcp")]
    tcp_congestion: Congestion,
    /// Stop after this long (default: run until Ctrl-C).
    #[arg(long, value_name = "DURATION", value_parser = duration::parse)]
    duration: Option<Duration>,
    /// No per-second progress lines.
    #[arg(long, short)]
    quiet: bool,
    /// Once bound, print one JSON line on stdout for scripts:
    /// `{"ready":"emulate","listen":ADDR,"forward":ADDR}` (and
    /// `"tcp":ADDR` with --tcp).
    #[arg(long)]
    ready_json: bool,
    /// Write the final counters as JSON to FILE (per direction: received,
    /// delivered, lost, queue_drops, corrupted, socket_drops, ...).
    #[arg(long, value_name = "FILE")]
    stats_json: Option<std::path::PathBuf>,
}

#[derive(Debug, clap::Subcommand)]
enum EmulateCommand {
    Shell(ShellArgs),
}

/// Each direction's link model, as the simulator's links.
#[derive(Debug, Args)]
struct LinkArgs {
    /// Loss model client → target (in a shell: the command's sends): none,
    /// bernoulli:0.1, burst:start=0.04,len=1..5, gilbert:p=..,r=..,
    /// ge:p=..,r=..,good=..,bad=.., ber:1e-5, trace:FILE, or one that
    /// changes over time: "schedule:60s bernoulli:1%; 60s
    /// gilbert:p=0.025,r=0.2; repeat" (hold for 60 s; "A -> B" ramps),
    /// schedule:alternating, schedule:fading.
    #[arg(long, value_name = "MODEL", default_value = "none")]
    loss: LossModel,
    /// Loss model target → client (default: none).
    #[arg(long, value_name = "MODEL", default_value = "none")]
    reverse_loss: LossModel,
    /// Bit rate of each direction, e.g. 256kbit/s, 2Mbps (default:
    /// unlimited), or a schedule: "schedule:30s 10Mbit/s; 30s 10Mbit/s ->
    /// 1Mbit/s; repeat".
    #[arg(long, value_name = "RATE")]
    rate: Option<Varying<Bitrate>>,
    /// One-way delay of each direction, e.g. 20ms, or a schedule:
    /// "schedule:20s 20ms; 20s 200ms; repeat".
    #[arg(long, value_name = "DURATION", default_value = "0ms")]
    delay: Varying<Duration>,
    /// Extra delay per datagram, uniform up to this, without reordering.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, default_value = "0ms")]
    jitter: Duration,
    /// Drop-tail queue limit in datagrams (needs --rate; default: unlimited).
    #[arg(long, value_name = "N", requires = "rate")]
    queue: Option<u32>,
    /// Seed of the forward link; the reverse link uses SEED + 1.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

impl LinkArgs {
    /// The forward and reverse links.
    fn links(&self) -> (LinkConfig, LinkConfig) {
        let link = |loss: &LossModel, seed: u64| {
            let mut l = LinkConfig::new()
                .varying_delay(self.delay.clone())
                .jitter(self.jitter)
                .loss(loss.clone())
                .seed(seed);
            if let Some(r) = &self.rate {
                l = l.varying_rate(r.clone());
            }
            if let Some(q) = self.queue {
                l = l.queue(QueueLimit::Packets(q));
            }
            l
        };
        (
            link(&self.loss, self.seed),
            link(&self.reverse_loss, self.seed.wrapping_add(1)),
        )
    }
}

/// Run a command whose IP traffic crosses the emulated links (Mahimahi's
/// shells): kernel TCP, QUIC, iperf3, anything.
///
/// The command runs in a network namespace of its own whose only route is
/// a TUN device; every packet it sends crosses the forward link (--loss),
/// every packet to it the reverse link (--reverse-loss). The host is
/// reachable from inside at the address in $GROUPWIRE_SHELL_HOST (a
/// private 100.64.0.0/10 address, printed at the start): run servers
/// there, listening on that address. Nothing beyond this host is
/// reachable. Needs Linux, root (CAP_NET_ADMIN, CAP_SYS_ADMIN) and
/// iproute2's ip. Exits with the command's status; the counters of both
/// directions follow on stderr.
///
/// Example (the paper's long fat path, 100 Mbit/s, 150 ms RTT, 1% loss):
///   groupwire emulate shell --rate 100Mbit/s --delay 75ms \
///       --loss bernoulli:0.01 -- sh -c 'iperf3 -c $GROUPWIRE_SHELL_HOST'
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
struct ShellArgs {
    #[command(flatten)]
    link: LinkArgs,
    /// Packets in flight at most, both directions (more are dropped).
    #[arg(long, value_name = "N", default_value_t = groupwire_tokio::shell::DEFAULT_MAX_HELD)]
    max_held: usize,
    /// Write the final counters as JSON to FILE (uplink and downlink:
    /// received, delivered, lost, queue_drops, ...).
    #[arg(long, value_name = "FILE")]
    stats_json: Option<std::path::PathBuf>,
    /// No line on stderr before the command starts.
    #[arg(long, short)]
    quiet: bool,
    /// The command and its arguments.
    #[arg(required = true, last = true, value_name = "COMMAND")]
    command: Vec<std::ffi::OsString>,
}

/// `--ready-json`: where the emulator listens and where it forwards.
#[derive(serde::Serialize)]
struct Ready {
    listen: SocketAddr,
    forward: SocketAddr,
    /// The TCP relay's address, with --tcp.
    #[serde(skip_serializing_if = "Option::is_none")]
    tcp: Option<SocketAddr>,
}

/// `--tcp-congestion`.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum Congestion {
    /// TCP Reno's window (RFC 5681).
    Reno,
    /// The receive window, never cut.
    Fixed,
}

/// `--corrupt`.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum Corrupt {
    /// Drop corrupted datagrams, as a UDP checksum would.
    Drop,
    /// Flip their bits and forward them.
    Forward,
}

pub(crate) fn run(args: EmulateArgs) -> anyhow::Result<()> {
    if let Some(EmulateCommand::Shell(shell)) = args.command {
        return run_shell(shell);
    }
    let (Some(listen), Some(forward)) = (args.listen, args.forward) else {
        unreachable!("clap requires --listen and --forward without a subcommand")
    };
    let (fwd, rev) = args.link.links();
    let cfg = EmulatorConfig::new(listen, forward)
        .forward_link(fwd)
        .reverse_link(rev)
        .corrupt(match args.corrupt {
            Corrupt::Drop => CorruptPolicy::Drop,
            Corrupt::Forward => CorruptPolicy::Forward,
        })
        .tcp(args.tcp)
        .tcp_congestion(match args.tcp_congestion {
            Congestion::Reno => TcpCongestion::Reno,
            Congestion::Fixed => TcpCongestion::Fixed,
        });
    let cfg = match args.tcp_window {
        Some(w) => cfg.tcp_window(w),
        None => cfg,
    };
    runtime()?.block_on(async move {
        let emu = Emulator::bind(cfg)
            .await
            .with_context(|| format!("cannot start the emulator on {}", listen))
            .map_err(UsageError)?;
        let addr = emu.local_addr().context("listen socket")?;
        let b = emu.buffers();
        if b.capped() {
            // Said even with --quiet: it explains socket drops later.
            eprintln!(
                "emulate: the kernel capped socket buffers at {} (receive) / {} (send) bytes of the {} asked; \
                 bursts may overflow them (counted as socket drops, not link loss). Raise the limits: \
                 sysctl -w net.core.rmem_max={} net.core.wmem_max={}",
                b.recv, b.send, b.asked, b.asked, b.asked
            );
        }
        if args.ready_json {
            crate::ready::announce(
                "emulate",
                &Ready {
                    listen: addr,
                    forward,
                    tcp: emu.tcp_addr(),
                },
            )?;
        }
        if !args.quiet {
            eprintln!("emulating {addr} → {} (Ctrl-C to stop)", forward);
            if emu.tcp_addr().is_some() {
                eprintln!(
                    "relaying TCP {addr} → {forward} too, {} bytes of window per direction",
                    emu.tcp_window()
                );
            }
        }
        let mut stats = emu.stats();
        let clock = Clock::start();
        let quiet = args.quiet;
        let progress = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.tick().await;
            let mut last = EmulatorStats::default();
            loop {
                tick.tick().await;
                let now = stats.borrow_and_update().clone();
                if !quiet {
                    let secs = clock.now().as_secs_f64().round();
                    eprintln!(
                        "t={secs:>4}s  fwd {}  |  rev {}",
                        line(&now.forward, &last.forward),
                        line(&now.reverse, &last.reverse)
                    );
                }
                last = now;
            }
        });
        let final_stats = emu
            .run(shutdown_signal(args.duration))
            .await
            .context("emulator failed")?;
        progress.abort();
        if let Some(path) = &args.stats_json {
            std::fs::write(path, serde_json::to_string_pretty(&final_stats)? + "\n")
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        let mut out = std::io::stdout().lock();
        writeln!(out, "emulator summary ({addr} → {}):", forward)?;
        for (name, d) in [
            ("client → target", &final_stats.forward),
            ("target → client", &final_stats.reverse),
        ] {
            writeln!(
                out,
                "  {name}: {} in, {}, {} socket drops (host overload, not link loss)",
                d.received,
                fates(d),
                d.socket_drops
            )?;
        }
        writeln!(
            out,
            "  clients: {} forgotten to stay within the limit",
            final_stats.clients_evicted
        )?;
        let t = &final_stats.tcp;
        if t.accepted + t.refused > 0 {
            writeln!(
                out,
                "  TCP: {} connections relayed, {} refused, {} failed; segments sent again: {} forward, {} reverse",
                t.accepted, t.refused, t.failed, t.forward_resent, t.reverse_resent
            )?;
        }
        Ok(())
    })
}

/// `groupwire emulate shell`.
#[cfg(target_os = "linux")]
fn run_shell(args: ShellArgs) -> anyhow::Result<()> {
    use groupwire_tokio::shell::{Shell, ShellConfig};
    let (up, down) = args.link.links();
    let mut cfg = ShellConfig::new(up, down);
    cfg.max_held = args.max_held;
    let (status, stats) = runtime()?.block_on(async {
        let mut shell = Shell::create(cfg).map_err(|e| UsageError(e.into()))?;
        if !args.quiet {
            eprintln!(
                "emulate shell: the command runs at {} in namespace {}; the host is {} ($GROUPWIRE_SHELL_HOST)",
                shell.inner_addr(),
                shell.namespace(),
                shell.host_addr()
            );
        }
        shell.run(&args.command).await.context("emulate shell")
    })?;
    if let Some(path) = &args.stats_json {
        std::fs::write(path, serde_json::to_string_pretty(&stats)? + "\n")
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    for (name, d) in [("uplink", &stats.uplink), ("downlink", &stats.downlink)] {
        eprintln!(
            "emulate shell {name}: {} packets in, {}",
            d.received,
            fates(d)
        );
    }
    match status.code() {
        Some(0) => Ok(()),
        Some(code) => std::process::exit(code),
        None => Err(anyhow::anyhow!(
            "the command was killed by a signal ({status})"
        )),
    }
}

/// `groupwire emulate shell` needs Linux's network namespaces and TUN.
#[cfg(not(target_os = "linux"))]
fn run_shell(_: ShellArgs) -> anyhow::Result<()> {
    Err(UsageError(anyhow::anyhow!(
        "emulate shell needs Linux (network namespaces and TUN devices)"
    ))
    .into())
}

/// What became of one direction's packets, in all: `N out, N lost (P%),
/// N queue drops, N corrupted, N over the held limit, N send errors`.
fn fates(d: &DirectionStats) -> String {
    format!(
        "{} out, {} lost ({:.1}%), {} queue drops, {} corrupted, {} over the held limit, {} send errors",
        d.delivered,
        d.lost,
        percent(d.lost, d.received),
        d.queue_drops,
        d.corrupted,
        d.overflow,
        d.send_errors
    )
}

/// One direction's counters over the last second.
fn line(now: &DirectionStats, last: &DirectionStats) -> String {
    let d = |f: fn(&DirectionStats) -> u64| f(now).saturating_sub(f(last));
    let received = d(|s| s.received);
    let lost = d(|s| s.lost + s.queue_drops + s.corrupted + s.overflow);
    format!(
        "{received:>5} in/s {:>5} out/s  loss {:>5.1}%  held {:>4}  socket drops {:>4}",
        d(|s| s.delivered),
        percent(lost, received),
        now.held,
        d(|s| s.socket_drops)
    )
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}
