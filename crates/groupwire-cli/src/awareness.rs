//! `groupwire awareness send|recv`: a telepointer stream over real UDP,
//! carried by the AFEC endpoint (Dyck & Gutwin) in a chosen mode.

use std::io::Write;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
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
use groupwire_proto::{Bitrate, Instant};
use groupwire_sim::traffic::{Message, Telepointer, TelepointerParams, TraceSource, schedule};
use groupwire_tokio::{BatchedUdpSocket, Clock, Driver, DriverHandle, DriverStats};
use groupwire_units::duration;

use crate::UsageError;
use crate::metrics::MetricsArgs;
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
    /// Examples:
    ///   groupwire awareness send --to 127.0.0.1:7400 --protocol afec-frac --duration 60s
    ///   groupwire awareness send --to 127.0.0.1:7401 --protocol fec-3 --rate 60
    ///   groupwire awareness send --to 127.0.0.1:7400 --protocol fec-3 --framing red --rate 50
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
    /// Example:
    ///   groupwire awareness recv --bind 127.0.0.1:7400 --duration 70s
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
    /// fractional), afec (adaptive, whole steps) or afec-frac (adaptive,
    /// steps of 0.1).
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
    /// Cap on the sending rate: redundancy beyond it is left out and
    /// reported as "cannot meet" (default: none).
    #[arg(long, value_name = "RATE")]
    max_bitrate: Option<Bitrate>,
    /// Session id; both ends must agree (native framing only: RTP has none).
    #[arg(long, default_value_t = 0)]
    session: u32,
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
    /// The receiver's controller: afec or afec-frac adapt; udp and fec-N
    /// never ask the sender for a change.
    #[arg(long, default_value = "afec-frac")]
    protocol: Protocol,
    /// The MER band the controller keeps, as MIN,MAX (paper: 5% to 6%).
    #[arg(long, value_name = "MIN,MAX", default_value = "0.05,0.06", value_parser = parse_band)]
    mer_band: (f64, f64),
    /// Messages over which the MER is measured (paper: 1000).
    #[arg(long, value_name = "N", default_value_t = 1000)]
    mer_window: usize,
    /// Stop after this long (default: run until Ctrl-C).
    #[arg(long, value_name = "DURATION", value_parser = duration::parse)]
    duration: Option<Duration>,
    /// Session id; both ends must agree (native framing only: RTP has none).
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

/// How the AFEC endpoint carries the stream (`udp`, `fec-N`, `afec`, `afec-frac`, `afec-pred`).
pub(crate) type Protocol = Scheme;

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

// ---- Sender ----------------------------------------------------------------

fn send(args: SendArgs) -> anyhow::Result<()> {
    let usage = |e: anyhow::Error| UsageError(e);
    let (mode, step) = args.protocol.mode_and_step();
    let framing = match args.framing {
        FramingArg::Native => Framing::Native,
        FramingArg::Red => Framing::Red,
    };
    let cfg = AfecConfig::new(SENDER_USER)
        .mode(mode)
        .step(step)
        .session(args.session)
        .max_bitrate(args.max_bitrate)
        .framing(framing)
        .red(args.red.config(args.red_clock_rate));
    let room = cfg.mtu - DATA_HEADER_LEN - MESSAGE_HEADER_LEN;
    if !(TIMESTAMP_LEN..=room).contains(&args.size) {
        return Err(UsageError(anyhow::anyhow!(
            "--size {}: must be between {TIMESTAMP_LEN} (the timestamp) and {room} bytes",
            args.size
        ))
        .into());
    }
    if !(args.rate > 0.0 && args.rate <= 10_000.0) {
        return Err(UsageError(anyhow::anyhow!(
            "--rate {}: must be in (0, 10000] updates/s",
            args.rate
        ))
        .into());
    }
    let messages = message_schedule(&args).map_err(usage)?;
    let mut endpoint = AfecEndpoint::new(cfg)
        .context("AFEC configuration")
        .map_err(usage)?;
    endpoint.add_peer(args.to);
    let bind = args.bind.unwrap_or_else(|| any_addr(args.to));
    let to = args.to;
    let quiet = args.quiet;
    runtime()?.block_on(async move {
        // Batched I/O (recvmmsg, GSO/GRO) where the OS has it: see docs/results/perf.md.
        let socket = BatchedUdpSocket::bind(bind)
            .await
            .with_context(|| format!("cannot bind {bind}"))
            .map_err(usage)?;
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
                "sending {} messages over {:?} from {} to {to} with {:?}, {:?} framing (Ctrl-C to stop)",
                messages.len(),
                args.duration,
                handle.local_addr(),
                args.protocol,
                framing
            );
        }
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
                    let now = SenderSnapshot::read(&handle, to).await?;
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
                            if let Err(e) = ep.send_sampled(now, sampled, TELEPOINTER, payload) {
                                tracing::warn!(error = %e, "message not sent");
                            }
                        })
                        .await
                        .context("the driver stopped")?;
                    next += 1;
                }
            }
        }
        // Let the end-of-cluster flush and the last control exchange finish.
        tokio::time::sleep(LINGER).await;
        let fin = SenderSnapshot::read(&handle, to).await?;
        drop(handle);
        let endpoint = task.await.context("driver task")?.context("driver")?;
        let (changes, unmet) = event_task.await.context("event task")?;
        let mut out = std::io::stdout().lock();
        writeln!(out, "awareness sender summary ({:?} to {to}):", args.protocol)?;
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
        writeln!(out, "  code set size        {:.2} (final), {changes} changes", fin.code_set)?;
        writeln!(
            out,
            "  overhead             {:.0} B/msg on the wire (IP+UDP headers included)",
            per_message(wire_bytes(&fin.driver), fin.messages)
        )?;
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
    code_set: f64,
    driver: DriverStats,
}

impl SenderSnapshot {
    async fn read(h: &DriverHandle<AfecEndpoint>, to: SocketAddr) -> anyhow::Result<Self> {
        let (messages, code_set) = h
            .call(move |ep, _| (ep.stats().messages_sent, ep.code_set_size(to, TELEPOINTER)))
            .await
            .context("the driver stopped")?;
        Ok(Self {
            messages,
            code_set,
            driver: h.stats(),
        })
    }

    fn line(&self, last: &Self) -> String {
        let msgs = self.messages - last.messages;
        let bytes = wire_bytes(&self.driver) - wire_bytes(&last.driver);
        format!(
            "sent {msgs:>4} msg/s  code set {:>5.2}  overhead {:>5.0} B/msg  wire {:>7.1} kbit/s",
            self.code_set,
            per_message(bytes, msgs),
            bytes as f64 * 8.0 / 1e3
        )
    }
}

// ---- Receiver --------------------------------------------------------------

fn recv(args: RecvArgs) -> anyhow::Result<()> {
    let usage = |e: anyhow::Error| UsageError(e);
    let (mode, step) = args.protocol.mode_and_step();
    let qos = TypeQos {
        mer_min: args.mer_band.0,
        mer_max: args.mer_band.1,
        initial_size: 1.0,
    };
    let mut cfg = AfecConfig::new(RECEIVER_USER)
        .mode(mode)
        .step(step)
        .session(args.session)
        .default_qos(qos)
        .mer_window(args.mer_window)
        .red(args.red.config(RedConfig::default().clock_rate));
    cfg.min_window = cfg.min_window.min(args.mer_window);
    let endpoint = AfecEndpoint::new(cfg)
        .context("AFEC configuration")
        .map_err(usage)?;
    let quiet = args.quiet;
    runtime()?.block_on(async move {
        let socket = BatchedUdpSocket::bind(args.bind)
            .await
            .with_context(|| format!("cannot bind {}", args.bind))
            .map_err(usage)?;
        let clock = Clock::start();
        let (driver, handle, mut events) =
            Driver::new(endpoint, socket, clock).context("socket has no local address")?;
        let task = driver.spawn();
        if !quiet {
            eprintln!(
                "receiving on {} ({:?}, MER band {:.1}%-{:.1}%; Ctrl-C to stop)",
                handle.local_addr(),
                args.protocol,
                100.0 * args.mer_band.0,
                100.0 * args.mer_band.1
            );
        }
        let (mut sinks, metrics_addr) = args.metrics.open().await?;
        if let (Some(a), false) = (metrics_addr, quiet) {
            eprintln!("metrics at http://{a}/metrics");
        }
        let start = clock.now();
        let stop = shutdown_signal(args.duration);
        tokio::pin!(stop);
        let mut tick = tokio::time::interval_at(
            clock.to_tokio(start + Duration::from_secs(1)),
            Duration::from_secs(1),
        );
        let mut rx = RecvState::new(format!("awareness {:?}", args.protocol), start);
        let mut window = Window::new();
        let mut last_driver = DriverStats::default();
        loop {
            tokio::select! {
                () = &mut stop => break,
                _ = tick.tick() => {
                    let mer = rx.mer(&handle).await?;
                    let driver = handle.stats();
                    let channel = rx.channel(&driver, &last_driver, clock.now());
                    if !quiet {
                        eprintln!(
                            "t={:>4}s  {}",
                            (clock.now() - start).as_secs_f64().round(),
                            window.line(mer, rx.code_set, wire_bytes(&driver) - wire_bytes(&last_driver))
                        );
                        eprintln!("        {}", channel.line());
                    }
                    sinks.record(std::slice::from_ref(&channel));
                    last_driver = driver;
                    window = Window::new();
                }
                e = events.recv() => match e {
                    Some(e) => rx.on_event(e, &clock, &mut window),
                    None => break,
                },
            }
        }
        let mer = rx.mer(&handle).await.unwrap_or(None);
        let driver = handle.stats();
        rx.meter.finish();
        let channel = rx.channel(&driver, &last_driver, clock.now());
        sinks.record(std::slice::from_ref(&channel));
        sinks.close();
        drop(handle);
        let endpoint = task.await.context("driver task")?.context("driver")?;
        let s = endpoint.stats();
        let delivered = s.delivered_new + s.delivered_recovered;
        let mut out = std::io::stdout().lock();
        writeln!(out, "awareness receiver summary ({:?}):", args.protocol)?;
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
        writeln!(
            out,
            "  overhead             {:.0} B/msg on the wire (IP+UDP headers included)",
            per_message(wire_bytes(&driver), delivered)
        )?;
        writeln!(
            out,
            "  latency p50 / p99    {} / {} (one way, same-host clocks)",
            ms(rx.latency.quantile_micros(0.5)),
            ms(rx.latency.quantile_micros(0.99))
        )?;
        writeln!(out, "  duplicates           {}", s.duplicates)?;
        writeln!(out, "  channel              {}", channel.line())?;
        Ok(())
    })
}

/// What the receiver learns from events over the run.
struct RecvState {
    from: Option<u32>,
    code_set: f64,
    naks: u64,
    incs: u64,
    cannot_meet: Option<f64>,
    latency: LatencyStats,
    /// The channel measures of the first sender's telepointer stream
    /// (docs/metrics.md): one-way latency from the messages' wall-clock
    /// stamps, loss judged by message index, piggybacked copies as the
    /// recovery path.
    meter: ChannelMeter,
}

impl RecvState {
    fn new(channel: String, start: Instant) -> Self {
        Self {
            from: None,
            code_set: 1.0,
            naks: 0,
            incs: 0,
            cannot_meet: None,
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
    latency: LatencyStats,
}

impl Window {
    fn new() -> Self {
        Self {
            delivered: 0,
            latency: LatencyStats::new(),
        }
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
