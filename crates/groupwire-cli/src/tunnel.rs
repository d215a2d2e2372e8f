//! `groupwire tunnel`: an adaptive block-FEC UDP tunnel (like UDPspeeder or
//! kcptun's FEC) on the GENEVA machines of `proto::block`.
//!
//! This module only parses and checks the arguments, builds the
//! [`TunnelConfig`] and prints. The machine is
//! [`groupwire_proto::tunnel::TunnelEndpoint`]; the socket loop that runs it
//! over the **app socket** (the local application's datagrams in, the
//! peer's out) and the **link socket** (the FEC stream to and from the other
//! side) is [`groupwire_tokio::tunnel::Tunnel`].
//!
//! - `--listen APP --peer LINK_PEER`: the app socket is bound to `APP`; the
//!   application's address is the last source seen there (replies go to
//!   it). The link socket (`--bind`, default any port) sends to the peer
//!   and accepts only datagrams from it.
//! - `--listen LINK --forward TARGET`: the link socket is bound to `LINK`;
//!   the peer is the source of the first valid (checksummed) data packet
//!   of the session; while it sends valid packets no other address can
//!   take its place (another may after 5 s of silence). The app socket
//!   (`--bind`, default any port) sends the peer's datagrams to `TARGET`
//!   and accepts only `TARGET`'s replies.
//!
//! # Wire format
//!
//! The tunnel speaks [`groupwire_proto::wire::block`] unchanged: every
//! application datagram is one source packet (its payload whole, up to
//! `--max-datagram` less 38 bytes: a 32-byte header and the 6-byte
//! length and CRC-32 every protected symbol carries), `k` of them form a
//! block, and the
//! block's `Fwnd` Reed-Solomon repair packets follow it at once (no
//! pacing: "send originals at once; only recovered packets wait"). Each
//! direction is one independent GENEVA stream with its own sequence
//! numbers, block ids and controller; both share the `--session` id, and
//! each side's receiver reports (every 10 ms) travel back on the same link
//! socket, where the kind byte tells data from reports. Nothing else
//! speaks this format: it interoperates with no other tunnel, by design.
//! Every packet carries a CRC-32 and every protected symbol the CRC-32 of
//! its datagram, so corruption is dropped and counted (`corrupt`), and a
//! rebuilt datagram is checked before it is handed out. Neither the
//! checksum nor the session id is authentication: anyone who can send
//! from the peer's address, or replay its packets before the peer's first
//! one, can inject datagrams, as with plain UDP.
//!
//! # Nothing lost silently
//!
//! A datagram larger than `--max-datagram` less 38 bytes is dropped, said
//! once on stderr and counted (`dropped.too_large`; the overhead is over
//! what was carried). The sender's residual is the larger of the far
//! side's given-up share and the share of source packets it had echoed but
//! never delivered, so datagrams that went to someone else count; before
//! any report it is `null` ("no reports: far side not up?" live).
//!
//! # Bounds
//!
//! One peer per tunnel. The sender queues at most 4096 datagrams; the
//! receiver holds at most 64 blocks and tracks 8192 data sequence numbers
//! (memory per tunnel under 64 × 255 × `--max-datagram`); malformed,
//! foreign and hostile datagrams are counted and dropped by the machines.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use groupwire_proto::control::ControllerKind;
use groupwire_proto::control::target::TargetConfig;
use groupwire_proto::sliding::SlidingCode;
use groupwire_proto::tunnel::{TunnelConfig, TunnelKey, seal};
use groupwire_proto::xor::{XorLayout, XorLayoutError};
use groupwire_tokio::Clock;
use groupwire_tokio::tunnel::{
    FarSide, Tunnel, TunnelNotice, TunnelReport, TunnelRole, TunnelSecond, TunnelSetup,
};
use groupwire_units::{Probability, duration};

use crate::UsageError;
use crate::metrics::MetricsArgs;
use crate::net::{runtime, shutdown_signal};

/// Carry UDP datagrams over an adaptive block-FEC link that meets a loss
/// target within a delay budget.
///
/// Run one side next to the application that sends first, the other next
/// to the server it talks to:
///
///   groupwire tunnel --listen 127.0.0.1:5000 --peer 203.0.113.7:7000
///   groupwire tunnel --listen 0.0.0.0:7000 --forward 127.0.0.1:6000
///
/// Datagrams the application sends to 127.0.0.1:5000 leave the other side
/// to 127.0.0.1:6000; replies from 6000 come back the same way. Every k
/// datagrams form a block followed at once by Fwnd Reed-Solomon repair
/// packets. Received datagrams are handed out at once; only rebuilt ones
/// wait for their block's repairs.
///
/// What to ask for: by default (--fec target) you state the loss you can
/// live with and how long a lost datagram may be late, and the tunnel finds
/// the cheapest code that gives it:
///
///   --target-loss 0.1%   at most 1 datagram in 1000 lost after repair
///   --max-delay 30ms     a rebuilt datagram arrives at most 30 ms late
///
/// It measures the channel from the far side's reports (every 10 ms: lost
/// packets and loss runs, fitted to a two-state burst model), computes for
/// each block length k that fills within the delay at your sending rate
/// the fewest repairs m that meet the target, and uses the least overhead
/// (m/k) of those; it follows the channel as it changes. Longer budgets
/// allow longer blocks, which cost less for the same target. If nothing
/// within the budget meets the target it says so (live line: "cannot
/// meet"; summary: unmet_blocks) and uses the code with the lowest loss.
/// The defaults suit voice, games and video calls; for bulk transfers a
/// --max-delay of 100ms or more is cheaper. --fec gmiad is GENEVA's
/// published controller (Fwnd from loss counts, fixed k), kept for
/// comparison. --fec sliding:target does the same with a sliding-window
/// code (RFC 8681): every datagram leaves at once and a repair over the
/// last k follows every k/m of them, so a loss is rebuilt by the next
/// repairs rather than at its block's end: for the same overhead, rebuilt
/// datagrams wait less.
///
/// Addresses: with --peer, --listen is the application's side and replies
/// go to the last address the application sent from; the link socket
/// (--bind, default: any port) talks only to --peer. With --forward,
/// --listen is the link side and the peer is the source of the first valid
/// (checksummed) packet of the session; no other address takes over while
/// it is alive (one may after 5 s of silence); the app socket (--bind)
/// accepts only --forward's replies. Datagrams over --max-datagram less 38
/// bytes are dropped and counted (too_large), said once on stderr.
///
/// Stats, once a second on stderr and as a summary on stdout at the end
/// (Ctrl-C or --duration); --stats-json writes the summary as JSON:
///   in         datagrams/s and Mbit/s from the local application
///   overhead   extra bytes on the link over sending those datagrams bare
///              (FEC headers and repair packets; IP+UDP headers counted)
///   k/Fwnd     source and repair packets per block, now
///   residual   loss left after FEC in our direction, from the far
///              side's reports: the larger of its unrecovered share and
///              the share of our echoed datagrams it never delivered;
///              "no reports" when none came (far side not up)
///   out        datagrams/s delivered to the local application, and how
///              many of them FEC rebuilt; lost = given up
///   added      latency recovery added to rebuilt datagrams (p50/p99):
///              from the arrival of the next later datagram that did
///              arrive to the rebuilt one's delivery
///
/// The wire format is groupwire's block FEC format; it interoperates with
/// nothing else by design. With --fec xor:..., the link carries RTP media
/// packets (payload type 97, SSRC = --session) and SMPTE 2022-1 parity
/// (payload type 96) on the one socket, no reports (open loop), and
/// --block-wait is how long the application may be silent before the open
/// parity groups are closed and sent (set it above the datagram gap).
/// Both sides must use the same --fec and --session.
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub(crate) struct TunnelArgs {
    /// With --peer: where the application sends. With --forward: where the
    /// other side's link socket sends.
    #[arg(long, value_name = "ADDR")]
    listen: SocketAddr,
    /// The other side's link address (this side faces the application).
    #[arg(
        long,
        value_name = "ADDR",
        required_unless_present = "forward",
        conflicts_with = "forward"
    )]
    peer: Option<SocketAddr>,
    /// Where datagrams from the link go (this side faces the server).
    #[arg(long, value_name = "ADDR")]
    forward: Option<SocketAddr>,
    /// Local address of the second socket (link socket with --peer, app
    /// socket with --forward; default: any address, a free port).
    #[arg(long, value_name = "ADDR")]
    bind: Option<SocketAddr>,
    /// Redundancy controller: target (the default: the cheapest code that
    /// meets --target-loss within --max-delay), gmiad (adaptive, GENEVA,
    /// as published), static:N (N repair
    /// packets per block; static:0 is no FEC), static-small (8),
    /// static-large (12), dp-fec, threshold (Miyoshi et al.'s code switch
    /// over windows of 0 to 3k, capped at --fwnd-max or 60), predictive
    /// (a window picked from an online fit of the loss); or XOR parity
    /// instead of block FEC (Leigh et al., SMPTE 2022-1 format): xor:N
    /// (one parity per N datagrams), xor:LxD (per row of L and per column
    /// of D, L apart: bursts up to L), xor:LxD:col (columns only); or a
    /// sliding-window code (RFC 8681): sliding:w=W,o=O sends every
    /// datagram at once and, after every 1/O of them, a repair over the
    /// last W, so a loss is rebuilt by the next repair instead of at the
    /// end of its block (sliding:w=20,o=0.2: 20% overhead);
    /// sliding:target lets the target controller choose W and O for
    /// --target-loss within --max-delay, from the far side's reports.
    #[arg(long, value_name = "CONTROLLER", default_value = "target")]
    fec: FecChoice,
    /// With --fec target or sliding:target: the share of datagrams that
    /// may stay lost after repair, as a fraction or a percentage.
    #[arg(long, value_name = "LOSS", default_value = "0.1%")]
    target_loss: Probability,
    /// With --fec target or sliding:target: how late a rebuilt datagram may arrive (the
    /// block's fill time plus its repairs; a tenth of it, at least 1 ms, is
    /// kept as margin).
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, default_value = "30ms")]
    max_delay: Duration,
    /// Source datagrams per block (default 20). With --fec target, the
    /// largest block the controller may choose (default 254).
    #[arg(long, value_name = "N")]
    k: Option<usize>,
    /// GMIAD's smallest Fwnd (GENEVA §3.2.4: 8).
    #[arg(long, value_name = "N")]
    fwnd_min: Option<usize>,
    /// GMIAD's largest Fwnd (GENEVA §3.2.4: 60); caps the overhead at
    /// FWND_MAX / k.
    #[arg(long, value_name = "N")]
    fwnd_max: Option<usize>,
    /// Close a block with fewer than k datagrams once its first is this
    /// old, so a slow stream never stalls (its Fwnd is scaled down with it;
    /// default 2ms). With --fec target the block closes within
    /// --max-delay less its margin anyway, and gets the repairs its length
    /// needs; this only shortens that.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse)]
    block_wait: Option<Duration>,
    /// How long a missing datagram may still be rebuilt after a later one
    /// arrived; then it counts as lost.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, default_value = "200ms")]
    max_wait: Duration,
    /// Largest datagram on the link (path MTU less IP and UDP headers);
    /// application datagrams may be up to this less 38 bytes.
    #[arg(long, value_name = "BYTES", default_value_t = 1472)]
    max_datagram: usize,
    /// Seal every packet (authenticated encryption) under the key in FILE
    /// (its bytes, trimmed of surrounding whitespace; at least 16). Both
    /// sides need the same file, e.g. from `head -c 32 /dev/urandom |
    /// base64`. Costs 33 bytes a packet: application datagrams may then be
    /// up to --max-datagram less 71 bytes.
    #[arg(long, value_name = "FILE")]
    key_file: Option<PathBuf>,
    /// The cipher this side seals with under --key-file; it opens either,
    /// so the two sides need not agree. Default: AES-256-GCM if this CPU
    /// has AES instructions, else ChaCha20-Poly1305.
    #[arg(long, value_name = "CIPHER", requires = "key_file",
          value_parser = crate::args::one_of(seal::Cipher::ALL, seal::Cipher::name))]
    cipher: Option<seal::Cipher>,
    /// Session id; both sides must agree.
    #[arg(long, default_value_t = 0)]
    session: u32,
    /// Stop after this long (default: run until Ctrl-C).
    #[arg(long, value_name = "DURATION", value_parser = duration::parse)]
    duration: Option<Duration>,
    /// Write the final summary as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    stats_json: Option<PathBuf>,
    /// No per-second progress lines.
    #[arg(long, short)]
    quiet: bool,
    #[command(flatten)]
    metrics: MetricsArgs,
    /// Once bound, print one JSON line on stdout for scripts:
    /// `{"ready":"tunnel","app":ADDR,"link":ADDR,"fec":..,"k":..,"seal":..}`
    /// (with --fec target also "target_loss" and "max_delay_ms"; "k" is
    /// then the largest block allowed).
    #[arg(long)]
    ready_json: bool,
}

/// `--ready-json`: where the tunnel listens and what it runs.
#[derive(serde::Serialize)]
struct Ready {
    app: std::net::SocketAddr,
    link: std::net::SocketAddr,
    fec: String,
    k: usize,
    seal: Option<String>,
    /// `--target-loss`, with `--fec target`.
    #[serde(skip_serializing_if = "Option::is_none")]
    target_loss: Option<f64>,
    /// `--max-delay` in milliseconds, with `--fec target`.
    #[serde(skip_serializing_if = "Option::is_none")]
    max_delay_ms: Option<f64>,
    /// The `--metrics` endpoint's address, if serving.
    #[serde(skip_serializing_if = "Option::is_none")]
    metrics: Option<std::net::SocketAddr>,
}

/// `--k` without a value, for controllers with a fixed block length.
const DEFAULT_K: usize = 20;
/// `--block-wait` without a value, for controllers other than target.
const DEFAULT_BLOCK_WAIT: Duration = Duration::from_millis(2);
/// `--max-delay`'s default (keep in step with its `default_value`).
const DEFAULT_MAX_DELAY: Duration = Duration::from_millis(30);

/// `--target-loss`'s default (keep in step with its `default_value`).
fn default_target_loss() -> Probability {
    "0.1%".parse().expect("a valid probability")
}

impl TunnelArgs {
    /// `--k`, or its default for fixed-k controllers.
    fn k(&self) -> usize {
        self.k.unwrap_or(DEFAULT_K)
    }
}

/// The `k` to announce: the fixed one, or with --fec target the largest
/// block the controller may choose.
fn cfg_k(args: &TunnelArgs, target: bool) -> usize {
    if target {
        args.k.unwrap_or(254)
    } else {
        args.k()
    }
}

pub(crate) fn run(args: TunnelArgs) -> anyhow::Result<()> {
    let cfg = config(&args).map_err(UsageError)?;
    runtime()?.block_on(serve(args, cfg))
}

/// `--fec`: a block FEC controller, or an XOR parity layout.
#[derive(Clone, Copy, Debug, PartialEq)]
enum FecChoice {
    Block(ControllerKind),
    Xor(XorLayout),
    Sliding(SlidingCode),
    /// `sliding:target`: the sliding-window code, its window and overhead
    /// chosen by the target controller.
    SlidingTarget,
}

impl std::str::FromStr for FecChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s == "sliding:target" {
            return Ok(Self::SlidingTarget);
        }
        if s.starts_with("sliding") {
            return s.parse().map(Self::Sliding).map_err(|e| {
                format!("{e}, or sliding:target to let the target controller choose them")
            });
        }
        if s.starts_with("xor") {
            return s
                .parse()
                .map(Self::Xor)
                .map_err(|e: XorLayoutError| e.to_string());
        }
        s.parse()
            .map(Self::Block)
            .map_err(|e: <ControllerKind as std::str::FromStr>::Err| {
                format!(
                    "{e}; or xor:N, xor:LxD, xor:LxD:col for XOR parity, \
                     or sliding:w=W,o=O for a sliding-window code"
                )
            })
    }
}

impl std::fmt::Display for FecChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Block(c) => c.fmt(f),
            Self::Xor(l) => l.fmt(f),
            Self::Sliding(c) => c.fmt(f),
            Self::SlidingTarget => f.write_str("sliding:target"),
        }
    }
}

/// The machine's configuration from the arguments, or what is wrong with them.
fn config(args: &TunnelArgs) -> anyhow::Result<TunnelConfig> {
    let mut cfg = TunnelConfig::new(args.peer, args.k());
    cfg.sender.session = args.session;
    match args.fec {
        FecChoice::Block(c) => cfg.sender.controller = c.into(),
        FecChoice::Xor(layout) => {
            if args.fwnd_min.is_some() || args.fwnd_max.is_some() {
                anyhow::bail!("--fwnd-min and --fwnd-max apply to block FEC, not --fec {layout}");
            }
            cfg.xor = Some(layout);
        }
        FecChoice::Sliding(code) => {
            if args.fwnd_min.is_some() || args.fwnd_max.is_some() {
                anyhow::bail!("--fwnd-min and --fwnd-max apply to block FEC, not --fec {code}");
            }
            cfg.sliding = Some(code);
        }
        FecChoice::SlidingTarget => {
            if args.fwnd_min.is_some() || args.fwnd_max.is_some() {
                anyhow::bail!(
                    "--fwnd-min and --fwnd-max apply to block FEC, not --fec sliding:target"
                );
            }
            let t = TargetConfig {
                target: args.target_loss.get(),
                max_delay: args.max_delay,
                k_max: args.k.unwrap_or(TargetConfig::default().k_max),
                ..TargetConfig::default()
            };
            cfg.use_sliding_target(t);
        }
    }
    let target_flags =
        args.target_loss != default_target_loss() || args.max_delay != DEFAULT_MAX_DELAY;
    match cfg.sender.controller.target_mut() {
        Some(t) if cfg.xor.is_none() && cfg.sliding.is_none() => {
            t.target = args.target_loss.get();
            t.max_delay = args.max_delay;
            if let Some(k) = args.k {
                t.k_max = k;
            }
            // The controller bounds the block's wait by the budget;
            // --block-wait only shortens it.
            cfg.sender.max_block_wait = args.block_wait;
        }
        _ => {
            if target_flags && cfg.sliding_target.is_none() {
                anyhow::bail!(
                    "--target-loss and --max-delay apply to --fec target and --fec sliding:target only"
                );
            }
            cfg.sender.max_block_wait = Some(args.block_wait.unwrap_or(DEFAULT_BLOCK_WAIT));
        }
    }
    cfg.receiver.session = args.session;
    cfg.receiver.max_wait = args.max_wait;
    cfg.max_datagram = args.max_datagram;
    if let Some(min) = args.fwnd_min {
        let Some(g) = cfg.sender.controller.gmiad_mut() else {
            anyhow::bail!("--fwnd-min applies to --fec gmiad only");
        };
        g.fwnd_min = min;
    }
    if let Some(max) = args.fwnd_max {
        let Some(m) = cfg.sender.controller.fwnd_max_mut() else {
            anyhow::bail!("--fwnd-max applies to --fec gmiad, threshold and predictive only");
        };
        *m = max;
    }
    let cipher = args.cipher.unwrap_or_else(seal::Cipher::auto);
    cfg.key = args
        .key_file
        .as_deref()
        .map(|f| read_key(f, cipher))
        .transpose()?;
    // Field names match the flags: `fwnd_min` is --fwnd-min, and so on.
    cfg.validate().map_err(|e| {
        let flag = match e.field {
            "controller" => "fec".to_owned(),
            f => f.replace('_', "-"),
        };
        anyhow::anyhow!("--{flag} {}", e.why)
    })?;
    Ok(cfg)
}

/// The key file's bytes, trimmed (so a trailing newline from `echo` or an
/// editor is not part of the key), with a fresh random session salt.
fn read_key(path: &std::path::Path, cipher: seal::Cipher) -> anyhow::Result<TunnelKey> {
    let bytes = std::fs::read(path)
        .map_err(|e| anyhow::anyhow!("reading the key file {}: {e}", path.display()))?;
    let psk = bytes.trim_ascii().to_vec();
    if psk.len() < seal::MIN_KEY_LEN {
        anyhow::bail!(
            "the key file {} holds {} bytes after trimming; a tunnel key needs at least {} \
             (make one with: head -c 32 /dev/urandom | base64 > FILE)",
            path.display(),
            psk.len(),
            seal::MIN_KEY_LEN
        );
    }
    // A new key per process start: see the seal module on nonces.
    let mut salt = [0u8; 8];
    getrandom::fill(&mut salt).map_err(|e| anyhow::anyhow!("the OS random source failed: {e}"))?;
    Ok(TunnelKey {
        psk,
        salt: u64::from_be_bytes(salt),
        cipher,
    })
}

async fn serve(args: TunnelArgs, cfg: TunnelConfig) -> anyhow::Result<()> {
    let role = match (args.peer, args.forward) {
        (Some(peer), _) => TunnelRole::Listen { peer },
        (None, Some(target)) => TunnelRole::Forward { target },
        (None, None) => unreachable!("clap requires --peer or --forward"),
    };
    let setup = TunnelSetup {
        bind: args.bind,
        ..TunnelSetup::new(args.listen, role)
    };
    let cipher = cfg.key.as_ref().map(|k| k.cipher.to_string());
    let target = cfg
        .sender
        .controller
        .clone()
        .target_mut()
        .filter(|_| cfg.xor.is_none() && cfg.sliding.is_none())
        .map(|t| *t)
        .or(cfg.sliding_target)
        .map(|t| (t.target, t.max_delay));
    let goal = target
        .map(|(t, d)| {
            format!(
                " target-loss={} max-delay={}ms",
                percent(t),
                d.as_secs_f64() * 1e3
            )
        })
        .unwrap_or_default();
    let seal = cipher
        .as_ref()
        .map(|c| format!(" seal={c}"))
        .unwrap_or_default();
    let tunnel = Tunnel::bind(setup, cfg).await.map_err(UsageError::new)?;
    let (mut sinks, metrics_addr) = args.metrics.open().await?;
    let metrics_at = metrics_addr
        .map(|a| format!(" metrics=http://{a}/metrics"))
        .unwrap_or_default();
    // One machine-readable line, always: tests and scripts read the ports.
    eprintln!(
        "tunnel app={} link={} {} fec={} k={}{goal}{seal}{metrics_at} (Ctrl-C to stop)",
        tunnel.app_addr(),
        tunnel.link_addr(),
        match role {
            TunnelRole::Listen { peer } => format!("peer={peer} app-peer=last-source"),
            TunnelRole::Forward { target } => format!("peer=first-valid forward={target}"),
        },
        args.fec,
        cfg_k(&args, target.is_some()),
    );
    if args.ready_json {
        crate::ready::announce(
            "tunnel",
            &Ready {
                app: tunnel.app_addr(),
                link: tunnel.link_addr(),
                fec: args.fec.to_string(),
                k: cfg_k(&args, target.is_some()),
                seal: cipher,
                target_loss: target.map(|t| t.0),
                max_delay_ms: target.map(|t| t.1.as_secs_f64() * 1e3),
                metrics: metrics_addr,
            },
        )?;
    }
    let max_datagram = args.max_datagram;
    let quiet = args.quiet;
    let report = tunnel
        .run(
            Clock::start(),
            shutdown_signal(args.duration),
            |n| match n {
                TunnelNotice::Second(s) => {
                    if !quiet {
                        eprintln!("{}", live_line(s));
                    }
                    if let Some(c) = &s.channel {
                        if !quiet {
                            eprintln!("        {}", c.line());
                        }
                        sinks.record(std::slice::from_ref(c));
                    }
                }
                TunnelNotice::FirstTooLarge { len, max } => eprintln!(
                    "tunnel: dropped a {len}-byte datagram: the tunnel carries at most {max} bytes \
                     (--max-datagram {max_datagram} less {}); such datagrams are dropped and counted as too_large",
                    max_datagram - max
                ),
                _ => {}
            },
        )
        .await?;
    sinks.record(std::slice::from_ref(&report.channel));
    sinks.close();
    let mut out = std::io::stdout().lock();
    print_summary(&mut out, &report)?;
    if let Some(path) = &args.stats_json {
        std::fs::write(path, serde_json::to_string_pretty(&report)? + "\n")
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

/// The per-second line on stderr.
fn live_line(s: &TunnelSecond) -> String {
    format!(
        "t={:>4}s  in {:>6.0}/s {:>8.2} Mbit/s  overhead {:>6}  k/Fwnd {:>7}  residual {:>7}  |  out {:>6.0}/s  rebuilt {:>5}  lost {:>4}  added p50 {:>8} p99 {:>8}{}",
        s.at.as_secs_f64().round(),
        s.in_per_sec,
        s.in_mbit_per_sec,
        percent(s.overhead),
        match (s.k, s.fwnd) {
            (Some(k), Some(f)) => format!("{k}/{f}"),
            _ => "-".to_owned(),
        },
        match s.far_side {
            FarSide::Idle => "-".to_owned(),
            FarSide::Residual(r) => percent(r),
            FarSide::Silent(d) => format!("far side silent {:.0}s", d.as_secs_f64()),
            FarSide::NoReports => "no reports: far side not up?".to_owned(),
            FarSide::OpenLoop => "open loop".to_owned(),
        },
        s.out_per_sec,
        s.rebuilt,
        s.lost,
        ms(s.added_p50.map(|d| d.as_micros() as u64)),
        ms(s.added_p99.map(|d| d.as_micros() as u64)),
        if s.cannot_meet {
            "  cannot meet the target within --max-delay"
        } else {
            ""
        },
    )
}

fn print_summary(out: &mut impl Write, r: &TunnelReport) -> anyhow::Result<()> {
    let secs = r.seconds.max(1e-9);
    let (s, v) = (&r.sent, &r.received);
    let setting = match &r.sent.target {
        Some(t) => format!(
            "--fec {} --target-loss {} --max-delay {}ms",
            r.fec,
            percent(t.target),
            t.max_delay_ms
        ),
        None => format!("--fec {} --k {}", r.fec, r.k),
    };
    writeln!(
        out,
        "tunnel summary ({}, {setting}, {:.1} s, peer {}):",
        r.role,
        r.seconds,
        r.peer.map_or("none".to_owned(), |p| p.to_string())
    )?;
    writeln!(
        out,
        "  in                   {} datagrams ({:.0}/s, {:.2} Mbit/s)",
        s.app_datagrams,
        s.app_datagrams as f64 / secs,
        s.app_bytes as f64 * 8.0 / secs / 1e6
    )?;
    let xor = r.fec.starts_with("xor");
    if xor {
        writeln!(
            out,
            "  on the link          {} media + {} parity packets, overhead {}",
            s.source_packets,
            s.repair_packets,
            percent(s.overhead),
        )?;
    } else {
        writeln!(
            out,
            "  on the link          {} source + {} repair packets, overhead {}, mean Fwnd {:.1}",
            s.source_packets,
            s.repair_packets,
            percent(s.overhead),
            s.mean_fwnd
        )?;
    }
    if let Some(t) = &s.target {
        writeln!(
            out,
            "  code                 k={} m={} now (mean k {:.1}, mean m {:.1}); expects residual {} on a \
             fitted channel of {} loss (Gilbert p {:.4} r {:.3}); {}",
            t.k,
            t.m,
            s.mean_k,
            s.mean_fwnd,
            percent(t.predicted_residual),
            percent(t.fitted_loss),
            t.gilbert_p,
            t.gilbert_r,
            if t.meets && s.unmet_blocks == 0 {
                "meets the target".to_owned()
            } else {
                format!(
                    "{} blocks sent with a code that cannot meet the target within the budget{}",
                    s.unmet_blocks,
                    if t.meets { " (meets it now)" } else { "" }
                )
            }
        )?;
    }
    match s.residual_loss {
        None if xor => writeln!(
            out,
            "  far side             open loop: XOR parity sends no reports (see the far side's summary)"
        )?,
        None => writeln!(
            out,
            "  far side (reports)   none received: the far side is not up or not reachable"
        )?,
        Some(res) => writeln!(
            out,
            "  far side (reports)   {} of {} delivered, {} rebuilt, {} lost: residual loss {}",
            s.peer_delivered,
            s.peer_sent,
            s.peer_recovered,
            s.peer_unrecovered,
            percent(res)
        )?,
    }
    writeln!(
        out,
        "  out                  {} datagrams, {} rebuilt, {} lost: residual loss {}",
        v.delivered,
        v.recovered,
        v.unrecovered,
        percent(v.residual_loss)
    )?;
    let lat = &v.added_latency_us;
    writeln!(
        out,
        "  added latency        p50 {} p99 {} max {} (rebuilt datagrams)",
        ms(lat.p50),
        ms(lat.p99),
        ms(lat.max),
    )?;
    writeln!(
        out,
        "  dropped              {} ({})",
        r.dropped.total(),
        serde_json::to_string(&r.dropped)?
    )?;
    let c = &r.channel;
    if c.loss.judged > 0 {
        let l = &c.latency_total;
        writeln!(
            out,
            "  channel              latency p50 {:.2} ms p99 {:.2} ms ({}), jitter {} (Figure 4) {} (RFC 3550), \
             wire loss {} in {} runs (mean {}, Gilbert p {} r {})",
            l.p50_ms,
            l.p99_ms,
            c.latency_kind.name(),
            opt_ms(c.jitter_fig4_total_ms),
            opt_ms(c.jitter_rfc3550_ms),
            percent(c.loss.wire_loss.unwrap_or(0.0)),
            c.burst.runs,
            c.burst.mean_run.map_or("-".into(), |m| format!("{m:.2}")),
            c.burst.gilbert_p.map_or("-".into(), |p| format!("{p:.4}")),
            c.burst.gilbert_r.map_or("-".into(), |r| format!("{r:.3}")),
        )?;
    }
    Ok(())
}

fn opt_ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.2} ms"))
}

fn percent(x: f64) -> String {
    format!("{:.2}%", 100.0 * x)
}

/// Microseconds as milliseconds, or `-` without samples.
fn ms(micros: Option<u64>) -> String {
    micros.map_or("-".to_owned(), |us| format!("{:.2} ms", us as f64 / 1e3))
}
