//! `groupwire awareness send|recv`: a telepointer stream over real UDP,
//! carried by the AFEC endpoint (Dyck & Gutwin) in a chosen mode, or as
//! RTP media packets with XOR parity (Leigh et al. §4.1: an
//! [`XorEndpoint`] sends, an [`XorListener`] receives).
//!
//! Both run on the one tokio [`Driver`]; the send loop and the receive loop
//! are shared ([`stream`], [`receive`]), and each protocol says what it
//! sends, counts and prints through [`Sending`] and [`Receiving`].

use std::io::Write;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use clap::{Args, Subcommand, ValueEnum};
use groupwire_metrics::{ChannelMeter, ChannelSnapshot, LatencyKind, LatencyStats, Path};
use groupwire_proto::afec::{
    AfecConfig, AfecEndpoint, AfecEvent, Framing, RedConfig, Scheme, TypeQos,
};
use groupwire_proto::units::IP_UDP_OVERHEAD;
use groupwire_proto::wire::afec::{DATA_HEADER_LEN, MESSAGE_HEADER_LEN, MsgType};
use groupwire_proto::xor::{
    Via, XorEndpoint, XorEndpointConfig, XorLayout, XorLayoutError, XorListener, XorListenerEvent,
};
use groupwire_proto::{Bitrate, Instant, Machine};
use groupwire_sim::traffic::{Message, Telepointer, TelepointerParams, TraceSource, schedule};
use groupwire_tokio::{BatchedUdpSocket, Clock, Driver, DriverHandle, DriverStats};
use groupwire_units::duration;
use tokio::sync::mpsc;

use crate::UsageError;
use crate::metrics::{MetricsArgs, MetricsSinks};
use crate::net::{runtime, shutdown_signal};

#[derive(Debug, Subcommand)]
pub(crate) enum AwarenessCommand {
    /// Stream a clustered telepointer trace to a receiver.
    ///
    /// Messages follow the simulator's telepointer model (moves at --rate
    /// updates/s with pauses in between) or a CSV trace (`seconds,bytes`
    /// per line). Each message carries its send time (wall-clock
    /// microseconds) in its first 8 bytes, so a receiver on the same host
    /// can measure one-way latency.
    ///
    /// With --framing red the packets are RTP with the RFC 2198 redundancy
    /// payload (RED), which stock RTP tools decode: the new message is the
    /// primary block, earlier ones redundant blocks, each timestamped when
    /// the schedule sampled it (--red-clock-rate ticks per second).
    /// GStreamer recovers the messages with, for the defaults:
    ///   gst-launch-1.0 udpsrc port=7400 \
    ///     caps="application/x-rtp,media=application,clock-rate=1000,encoding-name=RED,payload=100" \
    ///     ! rtpreddec pt=100 ! ...
    ///
    /// With --protocol xor:N or xor:LxD each message is one RTP media
    /// packet (payload type 97, SSRC --session) and XOR parity packets go
    /// beside them (Leigh et al. §4.1, in SMPTE 2022-1's format, payload
    /// type 96). xor:3 sends one parity per 3 messages (the paper's
    /// Figure 5) and rebuilds any 1 lost message of the 3; xor:4x4 also
    /// sends one per column of 4 messages spaced 4 apart, so a burst of up
    /// to 4 lost messages is rebuilt too (at the price of more parity and
    /// a longer wait). The amount of parity is fixed: the receiver sends
    /// nothing back. A pause in the stream (--xor-close-after) closes the
    /// open groups, so the last messages before it are protected at once.
    /// Both ends need the same --protocol and --session.
    ///
    /// Examples:
    ///   groupwire awareness send --to 127.0.0.1:7400 --protocol afec-frac --duration 60s
    ///   groupwire awareness send --to 127.0.0.1:7401 --protocol fec-3 --rate 60
    ///   groupwire awareness send --to 127.0.0.1:7400 --protocol fec-3 --framing red --rate 50
    ///   groupwire awareness send --to 127.0.0.1:7400 --protocol xor:3 --duration 60s
    #[command(verbatim_doc_comment)]
    Send(SendArgs),
    /// Receive a telepointer stream; print MER, redundancy, overhead and latency.
    ///
    /// The receiver runs AFEC's controller: with --protocol afec or
    /// afec-frac it asks the sender for more (NAK) or less (INC) redundancy
    /// to keep the message error rate inside --mer-band. Prints once a
    /// second on stderr and a summary on stdout at the end.
    ///
    /// Reads both framings (native and RTP/RED, --framing of the sender),
    /// and answers each sender in its own: RTP/RED senders get their
    /// feedback as RTCP APP packets. An RTP/RED stream has one MER for all
    /// its message types (a message lost for good takes its payload type
    /// with it). --red-pt and --message-pt must match the sender's.
    ///
    /// With --protocol xor:N or xor:LxD (the sender's) the receiver takes
    /// RTP media and XOR parity from the first sender it hears (another
    /// may take over after 5 s of silence), rebuilds lost messages from
    /// the parity and asks for nothing: there is no MER band to keep, and
    /// the lines show how many messages were rebuilt instead.
    ///
    /// Examples:
    ///   groupwire awareness recv --bind 127.0.0.1:7400 --duration 70s
    ///   groupwire awareness recv --bind 127.0.0.1:7400 --protocol xor:3
    #[command(verbatim_doc_comment)]
    Recv(RecvArgs),
}

#[derive(Debug, Args)]
pub(crate) struct SendArgs {
    /// The receiver (or an emulator in front of it).
    #[arg(long, value_name = "ADDR")]
    to: SocketAddr,
    /// Local address (default: any address, a free port).
    #[arg(long, value_name = "ADDR")]
    bind: Option<SocketAddr>,
    /// udp (each message once), fec-N (each message in N packets, N may be
    /// fractional), afec (adaptive, whole steps), afec-frac (adaptive,
    /// steps of 0.1), afec-pred (adaptive, predicted from the loss runs),
    /// afec-robust (predicted, with change detection and no overshoot);
    /// or XOR parity: xor:N (one parity per N messages, rebuilds 1 loss
    /// in N), xor:LxD (a parity per row of L and per column of D, rebuilds
    /// bursts up to L), xor:LxD:col (columns only).
    #[arg(long, default_value = "afec-frac")]
    protocol: Protocol,
    /// How long to stream.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, default_value = "30s")]
    duration: Duration,
    /// Telepointer updates per second while the pointer moves (paper: 30).
    #[arg(long, value_name = "HZ", default_value_t = 30.0)]
    rate: f64,
    /// Message size in bytes (at least 8: the timestamp).
    #[arg(long, value_name = "BYTES", default_value_t = 40)]
    size: usize,
    /// Replay a CSV trace (`seconds,bytes` per line) instead of the model.
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// Seed of the telepointer model.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// How long a message is worth sending or delivering: no copy goes out,
    /// and none is delivered, past it (AFEC protocols only; "off": forever,
    /// as in the paper).
    #[arg(long, value_name = "DURATION|off", default_value = "400ms", value_parser = parse_lifetime)]
    lifetime: Lifetime,
    /// Cap on the sending rate: redundancy beyond it is left out and
    /// reported as "cannot meet" (default: none; AFEC protocols only).
    #[arg(long, value_name = "RATE")]
    max_bitrate: Option<Bitrate>,
    /// Session id; both ends must agree (native framing, and xor:...,
    /// where it is the RTP SSRC; RTP/RED has none).
    #[arg(long, default_value_t = 0)]
    session: u32,
    /// XOR only: a pause this long closes the open parity groups and sends
    /// their parity, so the messages before a pause are protected without
    /// waiting for the next ones. Set it above the usual gap between
    /// messages (a shorter wait sends a parity after every message).
    /// Default: 4 update intervals at --rate (133 ms at 30/s).
    #[arg(long, value_name = "DURATION", value_parser = duration::parse)]
    xor_close_after: Option<Duration>,
    /// Wire format: native (groupwire's compact AFEC packets) or red (RTP
    /// with RFC 2198 redundancy, feedback in RTCP APP packets, decodable
    /// by stock RTP tools such as GStreamer's rtpreddec).
    #[arg(long, value_enum, default_value_t = FramingArg::Native)]
    framing: FramingArg,
    #[command(flatten)]
    red: RedArgs,
    /// RTP timestamp rate of --framing red, in Hz. RED's 14-bit timestamp
    /// offset reaches 16383 ticks (16.4 s at the default). Stock decoders
    /// that place recovered blocks by interpolating timestamps (rtpreddec)
    /// need a steady rate a whole number of ticks apart (a --trace with
    /// steady times: the model skips ticks at random, and rtpreddec cannot
    /// place a loss next to a skipped one): 1000 suits 50 or 100 updates/s;
    /// use 90000 for 30/s (182 ms of reach).
    #[arg(long, value_name = "HZ", default_value_t = 1000,
          value_parser = clap::value_parser!(u32).range(1..))]
    red_clock_rate: u32,
    /// No per-second progress lines.
    #[arg(long, short)]
    quiet: bool,
}

/// `--framing`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum FramingArg {
    /// groupwire's compact AFEC format.
    Native,
    /// RTP with RFC 2198 redundancy (RED).
    Red,
}

/// The RTP payload types of RTP/RED framing; both ends must agree, as an
/// SDP offer and answer would make them.
#[derive(Debug, Args)]
struct RedArgs {
    /// RTP payload type of RED packets (0-63 or 96-127).
    #[arg(long, value_name = "PT", default_value_t = 100)]
    red_pt: u8,
    /// RTP payload type of the telepointer messages inside RED (its block
    /// PT; 0-63 or 96-127).
    #[arg(long, value_name = "PT", default_value_t = 101)]
    message_pt: u8,
}

impl RedArgs {
    fn config(&self, clock_rate: u32) -> RedConfig {
        RedConfig {
            payload_type: self.red_pt,
            clock_rate,
            types: [(TELEPOINTER, self.message_pt)].into(),
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct RecvArgs {
    /// Address to receive on.
    #[arg(long, value_name = "ADDR")]
    bind: SocketAddr,
    /// The receiver's controller: afec, afec-frac, afec-pred or afec-robust adapt; udp
    /// and fec-N never ask the sender for a change. xor:N, xor:LxD,
    /// xor:LxD:col: the sender's XOR parity layout (no controller).
    #[arg(long, default_value = "afec-frac")]
    protocol: Protocol,
    /// The MER band the controller keeps, as MIN,MAX (paper: 5% to 6%;
    /// AFEC protocols only).
    #[arg(long, value_name = "MIN,MAX", default_value = "0.05,0.06", value_parser = parse_band)]
    mer_band: (f64, f64),
    /// How long a message is worth sending or delivering: no copy goes out,
    /// and none is delivered, past it (AFEC protocols only; "off": forever,
    /// as in the paper).
    #[arg(long, value_name = "DURATION|off", default_value = "400ms", value_parser = parse_lifetime)]
    lifetime: Lifetime,
    /// Messages over which the MER is measured (paper: 1000; AFEC
    /// protocols only).
    #[arg(long, value_name = "N", default_value_t = 1000)]
    mer_window: usize,
    /// Stop after this long (default: run until Ctrl-C).
    #[arg(long, value_name = "DURATION", value_parser = duration::parse)]
    duration: Option<Duration>,
    /// Session id; both ends must agree (native framing, and xor:...,
    /// where it is the RTP SSRC; RTP/RED has none).
    #[arg(long, default_value_t = 0)]
    session: u32,
    #[command(flatten)]
    red: RedArgs,
    /// No per-second progress lines.
    #[arg(long, short)]
    quiet: bool,
    #[command(flatten)]
    metrics: MetricsArgs,
}

pub(crate) fn run(cmd: AwarenessCommand) -> anyhow::Result<()> {
    match cmd {
        AwarenessCommand::Send(a) => send(a),
        AwarenessCommand::Recv(a) => recv(a),
    }
}

/// `--protocol`: how the stream is carried.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Protocol {
    /// The AFEC endpoint in one of its schemes (`udp`, `fec-N`, `afec`,
    /// `afec-frac`, `afec-pred`, `afec-robust`).
    Afec(Scheme),
    /// RTP media with XOR parity (`xor:N`, `xor:LxD`, `xor:LxD:col`).
    Xor(XorLayout),
}

impl Protocol {
    /// How progress lines and summaries name it: the scheme's Rust name
    /// for AFEC (as they always have), the layout (`xor:3`) for XOR.
    fn label(self) -> String {
        match self {
            Self::Afec(s) => format!("{s:?}"),
            Self::Xor(l) => l.to_string(),
        }
    }
}

impl FromStr for Protocol {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let lower = s.trim().to_ascii_lowercase();
        if lower.starts_with("xor") {
            return lower
                .parse()
                .map(Self::Xor)
                .map_err(|e: XorLayoutError| e.to_string());
        }
        s.parse()
            .map(Self::Afec)
            .map_err(|e| format!("{e}; or xor:N, xor:LxD, xor:LxD:col for XOR parity"))
    }
}

fn parse_band(s: &str) -> Result<(f64, f64), String> {
    let bad = || format!("{s:?}: expected MIN,MAX with 0 <= MIN <= MAX <= 1, e.g. 0.05,0.06");
    let (a, b) = s.split_once(',').ok_or_else(bad)?;
    let (a, b): (f64, f64) = (
        a.trim().parse().map_err(|_| bad())?,
        b.trim().parse().map_err(|_| bad())?,
    );
    if (0.0..=1.0).contains(&a) && (0.0..=1.0).contains(&b) && a <= b {
        Ok((a, b))
    } else {
        Err(bad())
    }
}

/// The AFEC configuration both ends start from: `user` running `scheme`
/// in `session`.
fn afec_config(user: u32, scheme: Scheme, session: u32) -> AfecConfig {
    let (mode, step) = scheme.mode_and_step();
    AfecConfig::new(user).mode(mode).step(step).session(session)
}

/// The endpoint for `cfg`; a configuration it refuses is a usage error.
fn afec_endpoint(cfg: AfecConfig) -> anyhow::Result<AfecEndpoint> {
    AfecEndpoint::new(cfg)
        .context("AFEC configuration")
        .map_err(|e| UsageError(e).into())
}

// ---- Sender ----------------------------------------------------------------

fn send(args: SendArgs) -> anyhow::Result<()> {
    match args.protocol {
        Protocol::Afec(scheme) => send_afec(args, scheme),
        Protocol::Xor(layout) => send_xor(args, layout),
    }
}

fn send_afec(args: SendArgs, scheme: Scheme) -> anyhow::Result<()> {
    if args.xor_close_after.is_some() {
        return Err(UsageError(anyhow::anyhow!(
            "--xor-close-after applies to --protocol xor:..., not {scheme}"
        ))
        .into());
    }
    let framing = match args.framing {
        FramingArg::Native => Framing::Native,
        FramingArg::Red => Framing::Red,
    };
    let cfg = afec_config(SENDER_USER, scheme, args.session)
        .default_qos(TypeQos {
            lifetime: args.lifetime.0,
            ..TypeQos::telepointer()
        })
        .max_bitrate(args.max_bitrate)
        .framing(framing)
        .red(args.red.config(args.red_clock_rate));
    let (messages, bind) = plan_send(&args, cfg.mtu - DATA_HEADER_LEN - MESSAGE_HEADER_LEN)?;
    let mut endpoint = afec_endpoint(cfg)?;
    endpoint.add_peer(args.to);
    let to = args.to;
    let quiet = args.quiet;
    runtime()?.block_on(async move {
        // Batched I/O (recvmmsg, GSO/GRO) where the OS has it: see docs/results/perf.md.
        let socket = bind_socket(bind).await?;
        let clock = Clock::start();
        let (driver, handle, mut events) =
            Driver::new(endpoint, socket, clock).context("socket has no local address")?;
        let task = driver.spawn();
        let event_task = tokio::spawn(async move {
            let (mut changes, mut unmet) = (0u64, 0u64);
            while let Some(e) = events.recv().await {
                match e {
                    AfecEvent::CodeSetChanged { .. } => changes += 1,
                    AfecEvent::QosUnmet { .. } => unmet += 1,
                    _ => {}
                }
            }
            (changes, unmet)
        });
        if !quiet {
            eprintln!(
                "sending {} messages over {:?} from {} to {to} with {}, {:?} framing (Ctrl-C to stop)",
                messages.len(),
                args.duration,
                handle.local_addr(),
                args.protocol.label(),
                framing
            );
        }
        let fin = stream(&handle, clock, to, &messages, quiet).await?;
        drop(handle);
        let endpoint = task.await.context("driver task")?.context("driver")?;
        let (changes, unmet) = event_task.await.context("event task")?;
        let mut out = std::io::stdout().lock();
        writeln!(out, "awareness sender summary ({} to {to}):", args.protocol.label())?;
        writeln!(out, "  messages sent        {}", endpoint.stats().messages_sent)?;
        writeln!(
            out,
            "  packets sent         {} data ({} flush), {} control",
            endpoint.stats().data_packets_sent,
            endpoint.stats().flush_packets_sent,
            endpoint.stats().control_packets_sent
        )?;
        writeln!(
            out,
            "  redundant copies     {}",
            endpoint.stats().redundant_copies_sent
        )?;
        writeln!(
            out,
            "  code set size        {:.2} (final), {changes} changes",
            fin.figure.value()
        )?;
        write_overhead(&mut out, &fin.driver, fin.messages)?;
        writeln!(out, "  cannot-meet events   {unmet}")?;
        if framing == Framing::Red {
            writeln!(
                out,
                "  RED uncarriable      {} copies (older than the 14-bit offset or over 1023 bytes)",
                endpoint.stats().red_uncarriable
            )?;
        }
        writeln!(out, "  send errors          {}", fin.driver.send_errors)?;
        Ok(())
    })
}

/// `--protocol xor:...`: each message one RTP media packet, XOR parity
/// beside them ([`XorEndpoint`], as `groupwire tunnel --fec xor:...`).
fn send_xor(args: SendArgs, layout: XorLayout) -> anyhow::Result<()> {
    if args.framing == FramingArg::Red {
        return Err(UsageError(anyhow::anyhow!(
            "--framing red carries AFEC's redundant copies (RFC 2198); --protocol {layout} \
             sends RTP media with XOR parity packets of its own: leave --framing out"
        ))
        .into());
    }
    if args.max_bitrate.is_some() {
        return Err(UsageError(anyhow::anyhow!(
            "--max-bitrate applies to the AFEC protocols: --protocol {layout} always sends \
             {:.2} parity packets per message",
            layout.overhead()
        ))
        .into());
    }
    check_rate(&args)?;
    if args.xor_close_after.is_some_and(|d| d.is_zero()) {
        return Err(UsageError(anyhow::anyhow!("--xor-close-after must be above 0")).into());
    }
    let close_after = args
        .xor_close_after
        .unwrap_or_else(|| Duration::from_secs_f64(XOR_CLOSE_INTERVALS / args.rate));
    let mut cfg = xor_config(args.to, layout, args.session);
    cfg.close_when_idle = Some(close_after);
    let (messages, bind) = plan_send(&args, cfg.max_payload())?;
    let to = args.to;
    let quiet = args.quiet;
    runtime()?.block_on(async move {
        let socket = bind_socket(bind).await?;
        let clock = Clock::start();
        // RTP timestamps on the wall clock: a receiver on this host (or a
        // synchronized one) measures one-way latency, as in the tunnel.
        cfg.shared_clock_micros = Some(clock.wall_micros(Instant::ZERO));
        let endpoint = XorEndpoint::new(cfg).expect("the layout was validated when parsed");
        let (driver, handle, events) =
            Driver::new(endpoint, socket, clock).context("socket has no local address")?;
        // Open loop: nothing should come back. Whatever does is counted and
        // dropped by the driver, which never waits for a reader.
        drop(events);
        let task = driver.spawn();
        if !quiet {
            eprintln!(
                "sending {} messages over {:?} from {} to {to} with {layout}: RTP with XOR parity, \
                 SSRC {}, groups closed after {close_after:?} without a message (Ctrl-C to stop)",
                messages.len(),
                args.duration,
                handle.local_addr(),
                args.session,
            );
        }
        let fin = stream(&handle, clock, to, &messages, quiet).await?;
        drop(handle);
        let endpoint = task.await.context("driver task")?.context("driver")?;
        let (s, e) = (endpoint.stats(), endpoint.encoder_stats());
        let mut out = std::io::stdout().lock();
        writeln!(out, "awareness sender summary ({layout} to {to}):")?;
        writeln!(out, "  messages sent        {}", s.media_sent)?;
        writeln!(
            out,
            "  packets sent         {} media, {} parity ({} row, {} column)",
            s.media_sent,
            e.row_fec + e.column_fec,
            e.row_fec,
            e.column_fec
        )?;
        write_overhead(&mut out, &fin.driver, fin.messages)?;
        writeln!(out, "  send errors          {}", fin.driver.send_errors)?;
        Ok(())
    })
}

/// What the send loop needs of an endpoint.
trait Sending: Machine + Send + 'static {
    /// Sends one message at `now`; `sampled`: when the schedule sampled
    /// it. A refused message is logged, not fatal.
    fn send_message(&mut self, now: Instant, sampled: Instant, payload: Bytes);
    /// Messages sent so far, and the protocol's own progress figure.
    fn progress(&self, to: SocketAddr) -> (u64, Figure);
}

impl Sending for AfecEndpoint {
    fn send_message(&mut self, now: Instant, sampled: Instant, payload: Bytes) {
        if let Err(e) = self.send_sampled(now, sampled, TELEPOINTER, payload) {
            tracing::warn!(error = %e, "message not sent");
        }
    }

    fn progress(&self, to: SocketAddr) -> (u64, Figure) {
        (
            self.stats().messages_sent,
            Figure::CodeSet(self.code_set_size(to, TELEPOINTER)),
        )
    }
}

impl Sending for XorEndpoint {
    fn send_message(&mut self, now: Instant, _sampled: Instant, payload: Bytes) {
        // RTP timestamps the send: the receiver's latency is from it.
        if let Err(e) = self.send(now, &payload) {
            tracing::warn!(error = %e, "message not sent");
        }
    }

    fn progress(&self, _to: SocketAddr) -> (u64, Figure) {
        let e = self.encoder_stats();
        (
            self.stats().media_sent,
            Figure::Parity(e.row_fec + e.column_fec),
        )
    }
}

/// Sends `messages` on their schedule through the driver behind `handle`,
/// with a progress line a second unless `quiet`; then lets the endpoint
/// finish (AFEC's end-of-cluster flush and control exchange, XOR's last
/// parity) and returns the final counters.
async fn stream<M: Sending>(
    handle: &DriverHandle<M>,
    clock: Clock,
    to: SocketAddr,
    messages: &[Message],
    quiet: bool,
) -> anyhow::Result<SenderSnapshot> {
    let start = clock.now();
    let stop = shutdown_signal(None);
    tokio::pin!(stop);
    let mut tick = tokio::time::interval_at(
        clock.to_tokio(start + Duration::from_secs(1)),
        Duration::from_secs(1),
    );
    let mut last = SenderSnapshot::default();
    let mut next = 0;
    while let Some(m) = messages.get(next) {
        let due = clock.to_tokio(start + m.at.since_epoch());
        tokio::select! {
            () = &mut stop => break,
            _ = tick.tick() => {
                let now = SenderSnapshot::read(handle, to).await?;
                if !quiet {
                    eprintln!("t={:>4}s  {}", (clock.now() - start).as_secs_f64().round(), now.line(&last));
                }
                last = now;
            }
            () = tokio::time::sleep_until(due) => {
                let size = m.size as usize;
                // The schedule's tick is when the pointer was sampled:
                // RED's RTP timestamps keep its steady rate whatever
                // the send jitter.
                let sampled = start + m.at.since_epoch();
                handle
                    .command(move |ep, now| {
                        let payload = stamped_payload(clock.wall_micros(now), size);
                        ep.send_message(now, sampled, payload);
                    })
                    .await
                    .context("the driver stopped")?;
                next += 1;
            }
        }
    }
    // Let the end-of-cluster flush and the last control exchange finish.
    tokio::time::sleep(LINGER).await;
    SenderSnapshot::read(handle, to).await
}

/// `--size` must fit `room` and carry the timestamp; `--rate` must be sane.
/// What a sender needs before it starts: its messages fit `room` bytes
/// and the rate, their schedule, and the address to bind (`--bind`, or
/// any of the peer's family).
fn plan_send(args: &SendArgs, room: usize) -> anyhow::Result<(Vec<Message>, SocketAddr)> {
    check_message(args, room)?;
    let messages = message_schedule(args).map_err(UsageError)?;
    let bind = args.bind.unwrap_or_else(|| any_addr(args.to));
    Ok((messages, bind))
}

fn check_message(args: &SendArgs, room: usize) -> anyhow::Result<()> {
    if !(TIMESTAMP_LEN..=room).contains(&args.size) {
        return Err(UsageError(anyhow::anyhow!(
            "--size {}: must be between {TIMESTAMP_LEN} (the timestamp) and {room} bytes",
            args.size
        ))
        .into());
    }
    check_rate(args)
}

fn check_rate(args: &SendArgs) -> anyhow::Result<()> {
    if !(args.rate > 0.0 && args.rate <= 10_000.0) {
        return Err(UsageError(anyhow::anyhow!(
            "--rate {}: must be in (0, 10000] updates/s",
            args.rate
        ))
        .into());
    }
    Ok(())
}

/// Both ends' XOR endpoint settings toward `peer` (the sender's; the
/// receiver learns its peer): the session as both SSRCs, as the tunnel.
fn xor_config(peer: SocketAddr, layout: XorLayout, session: u32) -> XorEndpointConfig {
    let mut c = XorEndpointConfig::new(peer, layout);
    c.ssrc = session;
    c.peer_ssrc = Some(session);
    c
}

/// `--lifetime`: a message's lifetime, `None` for forever.
#[derive(Clone, Copy, Debug)]
struct Lifetime(Option<Duration>);

/// `--lifetime`: a duration, or `off` for none.
fn parse_lifetime(text: &str) -> Result<Lifetime, String> {
    if text.trim().eq_ignore_ascii_case("off") {
        return Ok(Lifetime(None));
    }
    match duration::parse(text)? {
        d if d.is_zero() => Err("a lifetime must be positive; write off for none".to_owned()),
        d => Ok(Lifetime(Some(d))),
    }
}

/// The message schedule: the telepointer model or a CSV trace, up to `--duration`.
fn message_schedule(args: &SendArgs) -> anyhow::Result<Vec<Message>> {
    let until = Instant::ZERO + args.duration;
    let mut rng = groupwire_sim::rng::stream(args.seed, "telepointer", 0);
    let mut msgs = match &args.trace {
        Some(path) => schedule(&mut TraceSource::from_file(path)?, until, &mut rng),
        None => {
            let params = TelepointerParams {
                max_rate: args.rate,
                size: u32::try_from(args.size).context("--size")?,
                ..TelepointerParams::default()
            };
            schedule(
                &mut Telepointer::new(params, Instant::ZERO),
                until,
                &mut rng,
            )
        }
    };
    // Trace sizes below the timestamp are padded to it.
    let min = TIMESTAMP_LEN as u32;
    for m in &mut msgs {
        m.size = m.size.max(min);
    }
    Ok(msgs)
}

/// A payload of `size` bytes whose first 8 are `wall_micros`, big-endian.
fn stamped_payload(wall_micros: u64, size: usize) -> Bytes {
    let mut p = vec![0u8; size.max(TIMESTAMP_LEN)];
    p[..TIMESTAMP_LEN].copy_from_slice(&wall_micros.to_be_bytes());
    p.into()
}

#[derive(Clone, Debug, Default)]
struct SenderSnapshot {
    messages: u64,
    figure: Figure,
    driver: DriverStats,
}

/// A sender's own progress figure.
#[derive(Clone, Copy, Debug)]
enum Figure {
    /// AFEC: the code set size toward the receiver, now.
    CodeSet(f64),
    /// XOR: parity packets sent so far.
    Parity(u64),
}

impl Default for Figure {
    fn default() -> Self {
        Self::Parity(0)
    }
}

impl Figure {
    fn value(self) -> f64 {
        match self {
            Self::CodeSet(c) => c,
            Self::Parity(n) => n as f64,
        }
    }
}

impl SenderSnapshot {
    async fn read<M: Sending>(h: &DriverHandle<M>, to: SocketAddr) -> anyhow::Result<Self> {
        let (messages, figure) = h
            .call(move |ep, _| ep.progress(to))
            .await
            .context("the driver stopped")?;
        Ok(Self {
            messages,
            figure,
            driver: h.stats(),
        })
    }

    fn line(&self, last: &Self) -> String {
        let msgs = self.messages - last.messages;
        let bytes = wire_bytes(&self.driver) - wire_bytes(&last.driver);
        let figure = match (self.figure, last.figure) {
            (Figure::CodeSet(c), _) => format!("code set {c:>5.2}"),
            (Figure::Parity(n), Figure::Parity(m)) => {
                format!("parity {:>4}/s", n.saturating_sub(m))
            }
            (Figure::Parity(n), Figure::CodeSet(_)) => format!("parity {n:>4}/s"),
        };
        format!(
            "sent {msgs:>4} msg/s  {figure}  overhead {:>5.0} B/msg  wire {:>7.1} kbit/s",
            per_message(bytes, msgs),
            bytes as f64 * 8.0 / 1e3
        )
    }
}

// ---- Receiver --------------------------------------------------------------

fn recv(args: RecvArgs) -> anyhow::Result<()> {
    match args.protocol {
        Protocol::Afec(scheme) => recv_afec(args, scheme),
        Protocol::Xor(layout) => recv_xor(args, layout),
    }
}

fn recv_afec(args: RecvArgs, scheme: Scheme) -> anyhow::Result<()> {
    let qos = TypeQos {
        mer_min: args.mer_band.0,
        mer_max: args.mer_band.1,
        lifetime: args.lifetime.0,
        ..TypeQos::telepointer()
    };
    let mut cfg = afec_config(RECEIVER_USER, scheme, args.session)
        .default_qos(qos)
        .mer_window(args.mer_window)
        .red(args.red.config(RedConfig::default().clock_rate));
    cfg.min_window = cfg.min_window.min(args.mer_window);
    let endpoint = afec_endpoint(cfg)?;
    let quiet = args.quiet;
    runtime()?.block_on(async move {
        let socket = bind_socket(args.bind).await?;
        let clock = Clock::start();
        let (driver, handle, mut events) =
            Driver::new(endpoint, socket, clock).context("socket has no local address")?;
        let task = driver.spawn();
        if !quiet {
            eprintln!(
                "receiving on {} ({}, MER band {:.1}%-{:.1}%; Ctrl-C to stop)",
                handle.local_addr(),
                args.protocol.label(),
                100.0 * args.mer_band.0,
                100.0 * args.mer_band.1
            );
        }
        let channel = format!("awareness {}", args.protocol.label());
        let (mut rx, last_driver, sinks) =
            receive_all(&handle, &mut events, clock, &args, channel).await?;
        let mer = rx.mer(&handle).await.unwrap_or(None);
        let (driver, channel) = rx.finish(&handle, &last_driver, clock.now(), sinks);
        drop(handle);
        let endpoint = task.await.context("driver task")?.context("driver")?;
        let s = endpoint.stats();
        let delivered = s.delivered_new + s.delivered_recovered;
        let mut out = std::io::stdout().lock();
        writeln!(
            out,
            "awareness receiver summary ({}):",
            args.protocol.label()
        )?;
        writeln!(
            out,
            "  messages delivered   {delivered} ({} recovered from redundant copies)",
            s.delivered_recovered
        )?;
        writeln!(
            out,
            "  messages lost        {} (MER over the run {:.1}%)",
            s.lost,
            100.0 * ratio(s.lost, s.lost + delivered)
        )?;
        writeln!(
            out,
            "  MER (last {})      {}",
            args.mer_window,
            mer.map_or("-".to_owned(), |m| format!("{:.1}%", 100.0 * m))
        )?;
        writeln!(
            out,
            "  code set size        {:.2} (last requested), {} NAKs, {} INCs",
            rx.code_set, rx.naks, rx.incs
        )?;
        if let Some(a) = rx.cannot_meet {
            writeln!(out, "  sender cannot meet   more than {a:.2}")?;
        }
        write_costs(&mut out, &driver, delivered, &rx.latency)?;
        writeln!(out, "  duplicates           {}", s.duplicates)?;
        writeln!(out, "  channel              {}", channel.line())?;
        Ok(())
    })
}

/// `--protocol xor:...`: RTP media and XOR parity from the first sender
/// heard ([`XorListener`]); lost messages rebuilt, nothing sent back.
fn recv_xor(args: RecvArgs, layout: XorLayout) -> anyhow::Result<()> {
    let quiet = args.quiet;
    runtime()?.block_on(async move {
        let socket = bind_socket(args.bind).await?;
        let clock = Clock::start();
        // The peer is learned; the template's is a placeholder. Partial
        // groups are taken (XorEndpointConfig's default), whatever the
        // sender's --xor-close-after.
        let mut template = xor_config(args.bind, layout, args.session);
        template.shared_clock_micros = Some(clock.wall_micros(Instant::ZERO));
        let listener = XorListener::new(template, XOR_PEER_IDLE)
            .expect("the layout was validated when parsed");
        let (driver, handle, mut events) =
            Driver::new(listener, socket, clock).context("socket has no local address")?;
        let task = driver.spawn();
        if !quiet {
            eprintln!(
                "receiving on {} ({layout}: RTP with XOR parity, SSRC {}; Ctrl-C to stop)",
                handle.local_addr(),
                args.session
            );
        }
        let channel = format!("awareness {layout}");
        let (mut rx, last_driver, sinks) =
            receive_all(&handle, &mut events, clock, &args, channel).await?;
        let (driver, channel) = rx.finish(&handle, &last_driver, clock.now(), sinks);
        drop(handle);
        let listener = task.await.context("driver task")?.context("driver")?;
        let (l, e, d) = (
            listener.stats(),
            listener.endpoint_stats(),
            listener.decoder_stats(),
        );
        let delivered = e.delivered + e.recovered;
        let loss = &channel.loss;
        let percent = |x: Option<f64>| format!("{:.1}%", 100.0 * x.unwrap_or(0.0));
        let mut out = std::io::stdout().lock();
        writeln!(out, "awareness receiver summary ({layout}):")?;
        writeln!(
            out,
            "  messages delivered   {delivered} ({} rebuilt from XOR parity: {} row, {} column)",
            e.recovered, d.recovered_row, d.recovered_column
        )?;
        writeln!(
            out,
            "  messages lost        {} (residual loss {}; {} lost on the wire, {})",
            loss.residual_lost,
            percent(loss.residual_loss),
            loss.wire_lost,
            percent(loss.wire_loss)
        )?;
        writeln!(out, "  parity packets       {} received", d.fec)?;
        write_costs(&mut out, &driver, delivered, &rx.latency)?;
        writeln!(out, "  duplicates           {}", d.media_duplicate)?;
        writeln!(out, "  senders heard        {}", rx.peers)?;
        writeln!(
            out,
            "  dropped              {} (not this stream's RTP, or from another address)",
            l.invalid_before_peer
                + l.foreign
                + e.foreign
                + e.malformed
                + d.media_malformed
                + d.fec_malformed
                + d.fec_mismatched
        )?;
        writeln!(out, "  channel              {}", channel.line())?;
        Ok(())
    })
}

/// Binds the batched UDP socket a sender or receiver uses (recvmmsg,
/// GSO/GRO where the OS has them); a failure is the user's to fix.
async fn bind_socket(addr: SocketAddr) -> anyhow::Result<BatchedUdpSocket> {
    BatchedUdpSocket::bind(addr)
        .await
        .with_context(|| format!("cannot bind {addr}"))
        .map_err(|e| UsageError(e).into())
}

/// The summary's overhead line: wire bytes per message, headers counted.
fn write_overhead(
    out: &mut impl Write,
    driver: &DriverStats,
    messages: u64,
) -> std::io::Result<()> {
    writeln!(
        out,
        "  overhead             {:.0} B/msg on the wire (IP+UDP headers included)",
        per_message(wire_bytes(driver), messages)
    )
}

/// The receiver summary's overhead and latency lines.
fn write_costs(
    out: &mut impl Write,
    driver: &DriverStats,
    delivered: u64,
    latency: &LatencyStats,
) -> std::io::Result<()> {
    write_overhead(out, driver, delivered)?;
    writeln!(
        out,
        "  latency p50 / p99    {} / {} (one way, same-host clocks)",
        ms(latency.quantile_micros(0.5)),
        ms(latency.quantile_micros(0.99))
    )
}

/// Opens the receiver's metrics sinks (saying where, unless quiet) and
/// runs [`receive`] on `channel` until `--duration` or Ctrl-C: the state it
/// gathered, the driver's last counters and the sinks.
async fn receive_all<M: Receiving>(
    handle: &DriverHandle<M>,
    events: &mut mpsc::Receiver<M::Event>,
    clock: Clock,
    args: &RecvArgs,
    channel: String,
) -> anyhow::Result<(RecvState, DriverStats, MetricsSinks)> {
    let (mut sinks, metrics_addr) = args.metrics.open().await?;
    if let (Some(a), false) = (metrics_addr, args.quiet) {
        eprintln!("metrics at http://{a}/metrics");
    }
    let mut rx = RecvState::new(channel, clock.now());
    let last_driver = receive(
        handle,
        events,
        clock,
        args.duration,
        args.quiet,
        &mut sinks,
        &mut rx,
    )
    .await?;
    Ok((rx, last_driver, sinks))
}

/// What the receive loop needs of an endpoint.
trait Receiving: Machine + Send + Sized + 'static {
    /// Takes one event into the run's counts and this second's.
    fn take(rx: &mut RecvState, e: Self::Event, clock: &Clock, window: &mut Window);
    /// What the progress line reads from the running endpoint, first
    /// thing each second (AFEC: the windowed MER).
    type Live;
    async fn read_live(rx: &RecvState, h: &DriverHandle<Self>) -> anyhow::Result<Self::Live>;
    /// This second's progress line; `wire`: bytes on the wire in it.
    fn line(rx: &RecvState, window: &Window, live: Self::Live, wire: u64) -> String;
}

impl Receiving for AfecEndpoint {
    fn take(rx: &mut RecvState, e: AfecEvent, clock: &Clock, window: &mut Window) {
        rx.on_event(e, clock, window);
    }

    type Live = Option<f64>;

    async fn read_live(rx: &RecvState, h: &DriverHandle<Self>) -> anyhow::Result<Option<f64>> {
        rx.mer(h).await
    }

    fn line(rx: &RecvState, window: &Window, mer: Option<f64>, wire: u64) -> String {
        window.line(mer, rx.code_set, wire)
    }
}

impl Receiving for XorListener {
    fn take(rx: &mut RecvState, e: XorListenerEvent, _clock: &Clock, window: &mut Window) {
        match e {
            XorListenerEvent::NewPeer(_) => {
                // A new sender numbers its messages from its own start.
                if rx.peers > 0 {
                    rx.meter.restart_numbering();
                }
                rx.peers += 1;
            }
            XorListenerEvent::Delivered(d) => {
                window.delivered += 1;
                // From the RTP timestamp on the shared wall clock (one way).
                if let Some(lat) = d.latency {
                    rx.latency.record(lat);
                    window.latency.record(lat);
                }
                let path = match d.recovered {
                    None => Path::Arrived,
                    Some((Via::Row, _)) => Path::XorRow,
                    Some((Via::Column, _)) => Path::XorColumn,
                };
                if d.recovered.is_some() {
                    window.rebuilt += 1;
                }
                rx.meter.delivered(d.index, path, d.latency);
            }
            _ => {}
        }
    }

    type Live = ();

    async fn read_live(_rx: &RecvState, _h: &DriverHandle<Self>) -> anyhow::Result<()> {
        Ok(())
    }

    fn line(_rx: &RecvState, window: &Window, (): (), wire: u64) -> String {
        window.xor_line(wire)
    }
}

/// Receives until Ctrl-C, `duration` or the driver's end, with a progress
/// line and a channel line a second unless `quiet`, the channel recorded
/// to `sinks`; returns the driver's counters at the last second.
async fn receive<M: Receiving>(
    handle: &DriverHandle<M>,
    events: &mut mpsc::Receiver<M::Event>,
    clock: Clock,
    duration: Option<Duration>,
    quiet: bool,
    sinks: &mut MetricsSinks,
    rx: &mut RecvState,
) -> anyhow::Result<DriverStats> {
    let start = rx.start;
    let stop = shutdown_signal(duration);
    tokio::pin!(stop);
    let mut tick = tokio::time::interval_at(
        clock.to_tokio(start + Duration::from_secs(1)),
        Duration::from_secs(1),
    );
    let mut window = Window::new();
    let mut last_driver = DriverStats::default();
    loop {
        tokio::select! {
            () = &mut stop => break,
            _ = tick.tick() => {
                let live = M::read_live(rx, handle).await?;
                let driver = handle.stats();
                let channel = rx.channel(&driver, &last_driver, clock.now());
                if !quiet {
                    eprintln!(
                        "t={:>4}s  {}",
                        (clock.now() - start).as_secs_f64().round(),
                        M::line(rx, &window, live, wire_bytes(&driver) - wire_bytes(&last_driver))
                    );
                    eprintln!("        {}", channel.line());
                }
                sinks.record(std::slice::from_ref(&channel));
                last_driver = driver;
                window = Window::new();
            }
            e = events.recv() => match e {
                Some(e) => M::take(rx, e, &clock, &mut window),
                None => break,
            },
        }
    }
    Ok(last_driver)
}

/// What the receiver learns from events over the run.
struct RecvState {
    /// When receiving started (the meter's start).
    start: Instant,
    /// AFEC: the first sender heard from, by user id.
    from: Option<u32>,
    code_set: f64,
    naks: u64,
    incs: u64,
    cannot_meet: Option<f64>,
    /// XOR: senders heard, one after the other.
    peers: u64,
    latency: LatencyStats,
    /// The channel measures of the telepointer stream (docs/metrics.md):
    /// one-way latency from the messages' wall-clock stamps (AFEC) or RTP
    /// timestamps (XOR), loss judged by message index (AFEC: the first
    /// sender's) or sequence number (XOR), piggybacked copies or XOR
    /// parity as the recovery path.
    meter: ChannelMeter,
}

impl RecvState {
    fn new(channel: String, start: Instant) -> Self {
        Self {
            start,
            from: None,
            code_set: 1.0,
            naks: 0,
            incs: 0,
            cannot_meet: None,
            peers: 0,
            latency: LatencyStats::new(),
            meter: ChannelMeter::new(channel, LatencyKind::OneWay, start),
        }
    }

    /// The channel as of `at`, counting the socket's traffic since `last`.
    fn channel(&mut self, now: &DriverStats, last: &DriverStats, at: Instant) -> ChannelSnapshot {
        self.meter.sent_many(
            now.datagrams_sent - last.datagrams_sent,
            now.bytes_sent - last.bytes_sent,
        );
        self.meter.received_many(
            now.datagrams_received - last.datagrams_received,
            now.bytes_received - last.bytes_received,
        );
        self.meter.snapshot(at)
    }

    /// The end of the run: the final counters, the channel over the run
    /// (every message in the meter's window judged), recorded and the
    /// sinks closed.
    fn finish<M: Send + 'static>(
        &mut self,
        h: &DriverHandle<M>,
        last: &DriverStats,
        at: Instant,
        mut sinks: MetricsSinks,
    ) -> (DriverStats, ChannelSnapshot) {
        let driver = h.stats();
        self.meter.finish();
        let channel = self.channel(&driver, last, at);
        sinks.record(std::slice::from_ref(&channel));
        sinks.close();
        (driver, channel)
    }

    fn on_event(&mut self, e: AfecEvent, clock: &Clock, window: &mut Window) {
        match e {
            AfecEvent::Delivered(d) if d.msg_type == TELEPOINTER => {
                let first = *self.from.get_or_insert(d.from);
                window.delivered += 1;
                let mut latency = None;
                if let Some(ts) = d.payload.get(..TIMESTAMP_LEN) {
                    let sent = u64::from_be_bytes(ts.try_into().expect("slice of 8 bytes"));
                    let lat = clock.wall_now_micros().saturating_sub(sent);
                    self.latency.record_micros(lat);
                    window.latency.record_micros(lat);
                    latency = Some(Duration::from_micros(lat));
                }
                if d.from == first {
                    let path = if d.recovered {
                        Path::Piggyback
                    } else {
                        Path::Arrived
                    };
                    self.meter.delivered(u64::from(d.index), path, latency);
                }
            }
            AfecEvent::Requested { size, nak, .. } => {
                self.code_set = size;
                if nak {
                    self.naks += 1;
                } else {
                    self.incs += 1;
                }
            }
            AfecEvent::PeerCannotMeet { achievable, .. } => self.cannot_meet = Some(achievable),
            AfecEvent::PeerCanMeet { .. } => self.cannot_meet = None,
            _ => {}
        }
    }

    /// The endpoint's windowed MER of the first sender heard from.
    async fn mer(&self, h: &DriverHandle<AfecEndpoint>) -> anyhow::Result<Option<f64>> {
        let Some(from) = self.from else {
            return Ok(None);
        };
        h.call(move |ep, _| ep.mer(from, TELEPOINTER))
            .await
            .context("the driver stopped")
    }
}

/// One second of receiving.
struct Window {
    delivered: u64,
    /// XOR: of them, rebuilt from parity.
    rebuilt: u64,
    latency: LatencyStats,
}

impl Window {
    fn new() -> Self {
        Self {
            delivered: 0,
            rebuilt: 0,
            latency: LatencyStats::new(),
        }
    }

    /// XOR's line (no MER, no code set: the parity is fixed); `wire`:
    /// bytes on the wire during the second.
    fn xor_line(&self, wire: u64) -> String {
        format!(
            "recv {:>4} msg/s  rebuilt {:>4}  overhead {:>5.0} B/msg  latency p50 {:>8} p99 {:>8}",
            self.delivered,
            self.rebuilt,
            per_message(wire, self.delivered),
            ms(self.latency.quantile_micros(0.5)),
            ms(self.latency.quantile_micros(0.99))
        )
    }

    /// `wire`: bytes on the wire during the second.
    fn line(&self, mer: Option<f64>, code_set: f64, wire: u64) -> String {
        format!(
            "recv {:>4} msg/s  MER {:>6}  code set {:>5.2}  overhead {:>5.0} B/msg  latency p50 {:>8} p99 {:>8}",
            self.delivered,
            mer.map_or("-".to_owned(), |m| format!("{:.1}%", 100.0 * m)),
            code_set,
            per_message(wire, self.delivered),
            ms(self.latency.quantile_micros(0.5)),
            ms(self.latency.quantile_micros(0.99))
        )
    }
}

/// Bytes on the wire: UDP payload plus IPv4 and UDP headers, both directions.
fn wire_bytes(s: &DriverStats) -> u64 {
    let datagrams = s.datagrams_sent + s.datagrams_received;
    s.bytes_sent + s.bytes_received + IP_UDP_OVERHEAD as u64 * datagrams
}

fn per_message(bytes: u64, messages: u64) -> f64 {
    if messages == 0 {
        0.0
    } else {
        bytes as f64 / messages as f64
    }
}

fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// Microseconds as milliseconds, or `-` for an empty histogram.
fn ms(micros: Option<u64>) -> String {
    micros.map_or("-".to_owned(), |us| format!("{:.1} ms", us as f64 / 1e3))
}

/// The unspecified address of `peer`'s family, any port.
fn any_addr(peer: SocketAddr) -> SocketAddr {
    if peer.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    }
}

/// The telepointer message type.
const TELEPOINTER: MsgType = MsgType::new(*b"TP");
/// User ids: the sender is 1 and the receiver 2, as in the simulator.
const SENDER_USER: u32 = 1;
const RECEIVER_USER: u32 = 2;
/// Bytes of the wall-clock send time at the start of each payload.
const TIMESTAMP_LEN: usize = 8;
/// The fractional controller's step (the simulator's `dyck` default).
/// Time after the last message for the flush and control exchange.
const LINGER: Duration = Duration::from_millis(500);
/// `--xor-close-after`'s default, in update intervals at `--rate`: the
/// telepointer model skips a tick now and then (one in ten), so gaps of
/// two intervals are common and of four rare; only a pause closes groups.
const XOR_CLOSE_INTERVALS: f64 = 4.0;
/// Silence after which another sender may take an XOR receiver's place
/// (the tunnel's `peer_idle`).
const XOR_PEER_IDLE: Duration = Duration::from_secs(5);

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    /// `groupwire awareness ...` alone, to parse as the CLI does.
    #[derive(Debug, Parser)]
    struct Cli {
        #[command(subcommand)]
        command: AwarenessCommand,
    }

    fn parse(args: &[&str]) -> Result<AwarenessCommand, String> {
        Cli::try_parse_from(std::iter::once("awareness").chain(args.iter().copied()))
            .map(|c| c.command)
            .map_err(|e| e.to_string())
    }

    fn send_args(args: &[&str]) -> SendArgs {
        let all = [&["send", "--to", "127.0.0.1:9"], args].concat();
        match parse(&all) {
            Ok(AwarenessCommand::Send(a)) => a,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn xor_protocols_parse_beside_the_afec_ones() {
        let p = |s: &str| s.parse::<Protocol>();
        assert_eq!(p("xor:3"), Ok(Protocol::Xor(XorLayout::row(3))));
        assert_eq!(p("XOR:4x4"), Ok(Protocol::Xor(XorLayout::matrix(4, 4))));
        assert_eq!(p("xor:4x2:col"), Ok(Protocol::Xor(XorLayout::column(4, 2))));
        assert_eq!(p("afec-frac"), Ok(Protocol::Afec(Scheme::AfecFractional)));
        assert_eq!(p("fec-3"), Ok(Protocol::Afec(Scheme::Fec(3.0))));
        // Progress lines keep naming AFEC schemes as they always have.
        assert_eq!(
            Protocol::Afec(Scheme::AfecFractional).label(),
            "AfecFractional"
        );
        assert_eq!(Protocol::Afec(Scheme::Fec(3.0)).label(), "Fec(3.0)");
        assert_eq!(Protocol::Xor(XorLayout::matrix(4, 4)).label(), "xor:4x4");
    }

    #[test]
    fn bad_xor_layouts_say_what_is_wrong() {
        for (arg, why) in [
            ("xor:0", "N must be at least 1"),
            ("xor:3x0", "L and D must be at least 1 (got 3x0)"),
            ("xor:", "L and D are 1 to 255"),
            ("xor:300", "L and D are 1 to 255"),
            ("xor:3:col", "unknown option"),
            ("xor:40x40", "more than 1024"),
        ] {
            let e = arg.parse::<Protocol>().expect_err(arg);
            assert!(e.contains(why), "{arg}: {e}");
            assert!(e.contains("expected xor:N, xor:LxD"), "{arg}: {e}");
            // As clap shows it, on both ends.
            let e = parse(&["send", "--to", "127.0.0.1:9", "--protocol", arg]).expect_err(arg);
            assert!(e.contains("--protocol") && e.contains(why), "{arg}: {e}");
            let e = parse(&["recv", "--bind", "127.0.0.1:0", "--protocol", arg]).expect_err(arg);
            assert!(e.contains(why), "{arg}: {e}");
        }
        let e = "tcp".parse::<Protocol>().expect_err("tcp");
        assert!(e.contains("afec-frac") && e.contains("xor:N"), "{e}");
    }

    #[test]
    fn xor_refuses_afec_only_options_as_usage_errors() {
        for (args, why) in [
            (
                &["--protocol", "xor:3", "--framing", "red"][..],
                "--framing red",
            ),
            (
                &["--protocol", "xor:3", "--max-bitrate", "64kbit/s"],
                "0.33 parity",
            ),
            (
                &["--protocol", "xor:3", "--xor-close-after", "0ms"],
                "above 0",
            ),
            (&["--protocol", "xor:3", "--size", "1445"], "between 8"),
            (&["--protocol", "xor:3", "--rate", "0"], "--rate"),
            (
                &["--protocol", "afec", "--xor-close-after", "50ms"],
                "applies to",
            ),
        ] {
            let e = send(send_args(args)).expect_err(why);
            assert!(e.downcast_ref::<UsageError>().is_some(), "{args:?}: {e:#}");
            assert!(format!("{e:#}").contains(why), "{args:?}: {e:#}");
        }
    }

    #[test]
    fn xor_groups_close_after_four_update_intervals_by_default() {
        let a = send_args(&["--protocol", "xor:3"]);
        assert_eq!(a.protocol, Protocol::Xor(XorLayout::row(3)));
        assert_eq!(a.xor_close_after, None);
        // 30 updates/s: 133 ms, above the two-tick gaps the model makes.
        let wait = Duration::from_secs_f64(XOR_CLOSE_INTERVALS / a.rate);
        assert_eq!(wait.as_millis(), 133);
        let a = send_args(&["--protocol", "xor:3", "--xor-close-after", "250ms"]);
        assert_eq!(a.xor_close_after, Some(Duration::from_millis(250)));
        // The largest message fits an RTP media packet whose parity fits
        // 1472 bytes.
        assert_eq!(
            xor_config(a.to, XorLayout::row(3), 0).max_payload(),
            1472 - 28
        );
    }
}
