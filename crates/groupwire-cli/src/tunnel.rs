//! `groupwire tunnel`: an adaptive block-FEC UDP tunnel (like UDPspeeder or
//! kcptun's FEC) on the GENEVA machines of `proto::block`.
//!
//! Each side runs one [`TunnelEndpoint`] (a `BlockEndpoint`: sender and
//! receiver on one socket) over two sockets: the **app socket**, where the
//! local UDP application's datagrams come in and the peer's go out, and
//! the **link socket**, which carries the FEC stream to and from the other
//! side.
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
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use clap::Args;
use clap::builder::TypedValueParser as _;
use groupwire_proto::block::{ReceiverConfig, SendError, SenderConfig};
use groupwire_proto::control::ControllerKind;
use groupwire_proto::control::gmiad::GmiadConfig;
use groupwire_proto::units::IP_UDP_OVERHEAD;
use groupwire_proto::wire::block::{DATA_HEADER_LEN, SYMBOL_PREFIX};
use groupwire_proto::{Instant, Machine, Transmit};
use groupwire_tokio::{BatchedUdpSocket, Clock, DatagramSocket, RecvBatch, is_transient};
use hdrhistogram::Histogram;
use serde_json::json;

use crate::UsageError;
use crate::net::{runtime, shutdown_signal};
use groupwire_proto::tunnel::seal;
use groupwire_proto::tunnel::{SendRefused, Totals, TunnelConfig, TunnelEndpoint, TunnelKey};

/// Carry UDP datagrams over an adaptive block-FEC link (GENEVA/GMIAD).
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
/// packets; Fwnd is chosen by --fec from the far side's loss reports
/// (every 10 ms). Received datagrams are handed out at once; only rebuilt
/// ones wait for their block's repairs.
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
///   Fwnd       repair packets per block of k, now
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
/// nothing else by design. Both sides must use the same --session.
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
    /// Redundancy controller: gmiad (adaptive, GENEVA), static:N (N repair
    /// packets per block; static:0 is no FEC), static-small (8),
    /// static-large (12), dp-fec.
    #[arg(long, value_name = "CONTROLLER", default_value = "gmiad")]
    fec: ControllerKind,
    /// Source datagrams per block.
    #[arg(long, value_name = "N", default_value_t = 20)]
    k: usize,
    /// GMIAD's smallest Fwnd (GENEVA §3.2.4: 8).
    #[arg(long, value_name = "N")]
    fwnd_min: Option<usize>,
    /// GMIAD's largest Fwnd (GENEVA §3.2.4: 60); caps the overhead at
    /// FWND_MAX / k.
    #[arg(long, value_name = "N")]
    fwnd_max: Option<usize>,
    /// Close a block with fewer than k datagrams once its first is this
    /// old, so a slow stream never stalls (its Fwnd is scaled down with it).
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration, default_value = "2ms")]
    block_wait: Duration,
    /// How long a missing datagram may still be rebuilt after a later one
    /// arrived; then it counts as lost.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration, default_value = "200ms")]
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
          value_parser = clap::builder::PossibleValuesParser::new(seal::Cipher::ALL.map(seal::Cipher::name))
              .try_map(|s| s.parse::<seal::Cipher>()))]
    cipher: Option<seal::Cipher>,
    /// Session id; both sides must agree.
    #[arg(long, default_value_t = 0)]
    session: u32,
    /// Stop after this long (default: run until Ctrl-C).
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    duration: Option<Duration>,
    /// Write the final summary as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    stats_json: Option<PathBuf>,
    /// No per-second progress lines.
    #[arg(long, short)]
    quiet: bool,
}

pub(crate) fn run(args: TunnelArgs) -> anyhow::Result<()> {
    let cfg = config(&args).map_err(UsageError)?;
    runtime()?.block_on(serve(args, cfg))
}

/// The machine's configuration from the arguments, or what is wrong with them.
fn config(args: &TunnelArgs) -> anyhow::Result<TunnelConfig> {
    if !(1..=254).contains(&args.k) {
        anyhow::bail!("--k {}: must be from 1 to 254", args.k);
    }
    if !matches!(
        args.fec,
        ControllerKind::Gmiad
            | ControllerKind::Static(_)
            | ControllerKind::StaticSmall
            | ControllerKind::StaticLarge
            | ControllerKind::DpFec
    ) {
        anyhow::bail!(
            "--fec {}: the tunnel has no rate control; use gmiad, static:N, static-small, static-large or dp-fec",
            args.fec
        );
    }
    let mut gmiad = GmiadConfig::default();
    if args.fwnd_min.is_some() || args.fwnd_max.is_some() {
        if args.fec != ControllerKind::Gmiad {
            anyhow::bail!("--fwnd-min and --fwnd-max apply to --fec gmiad only");
        }
        gmiad.fwnd_min = args.fwnd_min.unwrap_or(gmiad.fwnd_min);
        gmiad.fwnd_max = args.fwnd_max.unwrap_or(gmiad.fwnd_max);
        if gmiad.fwnd_min > gmiad.fwnd_max || gmiad.fwnd_max + args.k > 255 {
            anyhow::bail!(
                "--fwnd-min {} --fwnd-max {}: need min <= max and k + max <= 255",
                gmiad.fwnd_min,
                gmiad.fwnd_max
            );
        }
    }
    let cipher = args.cipher.unwrap_or_else(seal::Cipher::auto);
    let key = args
        .key_file
        .as_deref()
        .map(|f| read_key(f, cipher))
        .transpose()?;
    let seal_overhead = if key.is_some() { seal::OVERHEAD } else { 0 };
    let min_datagram = DATA_HEADER_LEN + SYMBOL_PREFIX + 1 + seal_overhead;
    if !(min_datagram..=MAX_UDP_PAYLOAD).contains(&args.max_datagram) {
        anyhow::bail!(
            "--max-datagram {}: must be from {min_datagram} to {MAX_UDP_PAYLOAD}",
            args.max_datagram
        );
    }
    // The sender's peer is a placeholder until one is known (see endpoint).
    let mut sender = SenderConfig::new(args.peer.unwrap_or(args.listen), args.k);
    sender.session = args.session;
    sender.controller = args.fec;
    sender.pacing = false;
    sender.max_block_wait = Some(args.block_wait);
    // The sealed packet must fit in --max-datagram.
    let inner_datagram = args.max_datagram - seal_overhead;
    sender.max_datagram = inner_datagram;
    let receiver = ReceiverConfig {
        session: args.session,
        ordered: false,
        max_wait: args.max_wait,
        max_blocks: 64,
        max_symbol: inner_datagram - DATA_HEADER_LEN,
        ..ReceiverConfig::default()
    };
    Ok(TunnelConfig {
        peer: args.peer,
        sender,
        receiver,
        gmiad,
        peer_idle: PEER_IDLE,
        key,
    })
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

/// Which way this side faces.
#[derive(Clone, Copy, Debug)]
enum Role {
    /// Faces the application; the link goes to a known peer.
    Listen,
    /// Faces the server at this address; the peer is learned.
    Forward(SocketAddr),
}

async fn serve(args: TunnelArgs, cfg: TunnelConfig) -> anyhow::Result<()> {
    let role = args.forward.map_or(Role::Listen, Role::Forward);
    let other = args
        .peer
        .or(args.forward)
        .expect("clap requires --peer or --forward");
    let second = args.bind.unwrap_or_else(|| any_addr(other));
    let (app_bind, link_bind) = match role {
        Role::Listen => (args.listen, second),
        Role::Forward(_) => (second, args.listen),
    };
    let bind = |a: SocketAddr| async move {
        let s = BatchedUdpSocket::bind(a)
            .await
            .with_context(|| format!("cannot bind {a}"))
            .map_err(UsageError)?;
        // Large kernel buffers ride out bursts; the OS may cap them.
        let _ = s.set_recv_buffer_size(SOCKET_BUFFER);
        let _ = s.set_send_buffer_size(SOCKET_BUFFER);
        anyhow::Ok(s)
    };
    let app = bind(app_bind).await?;
    let link = bind(link_bind).await?;
    let app_addr = app.local_addr().context("app socket")?;
    let link_addr = link.local_addr().context("link socket")?;
    // One machine-readable line, always: tests and scripts read the ports.
    eprintln!(
        "tunnel app={app_addr} link={link_addr} {} fec={} k={}{} (Ctrl-C to stop)",
        match role {
            Role::Listen => format!("peer={other} app-peer=last-source"),
            Role::Forward(t) => format!("peer=first-valid forward={t}"),
        },
        args.fec,
        args.k,
        cfg.key
            .as_ref()
            .map(|k| format!(" seal={}", k.cipher))
            .unwrap_or_default()
    );
    let clock = Clock::start();
    let mut ep = TunnelEndpoint::new(cfg);
    let mut app_peer = match role {
        Role::Listen => None,
        Role::Forward(t) => Some(t),
    };
    let mut io = Io::default();
    let mut stats = LiveStats::new();
    let mut app_rx = RecvBatch::new(RECV_BATCH, GRO_BUFFER);
    let mut link_rx = RecvBatch::new(RECV_BATCH, GRO_BUFFER);
    let stop = shutdown_signal(args.duration);
    tokio::pin!(stop);
    let start = clock.now();
    let mut tick = tokio::time::interval_at(
        clock.to_tokio(start + Duration::from_secs(1)),
        Duration::from_secs(1),
    );
    let mut last = Snapshot::default();
    loop {
        io.flush(&link, &app, app_peer, &mut stats).await;
        let deadline = ep.poll_timeout().map(|t| clock.to_tokio(t));
        tokio::select! {
            () = &mut stop => break,
            _ = tick.tick() => {
                let now = Snapshot::read(&ep, &stats, clock.now());
                if !args.quiet {
                    eprintln!("t={:>4}s  {}", now.at.saturating_duration_since(start).as_secs_f64().round(), now.line(&last, &ep));
                }
                stats.window = latency_histogram();
                last = now;
            }
            r = link.recv_batch(&mut link_rx) => match r {
                Ok(()) => {
                    let now = clock.now();
                    for (src, data) in link_rx.iter() {
                        ep.handle_datagram(now, src, data);
                        io.drain(&mut ep, now, &mut stats);
                    }
                }
                Err(e) if is_transient(&e) => stats.recv_errors += 1,
                Err(e) => return Err(anyhow::Error::new(e).context("link socket")),
            },
            r = app.recv_batch(&mut app_rx) => match r {
                Ok(()) => {
                    let now = clock.now();
                    for (src, data) in app_rx.iter() {
                        match role {
                            Role::Forward(t) if src != t => {
                                stats.app_foreign += 1;
                                continue;
                            }
                            Role::Forward(_) => {}
                            Role::Listen => app_peer = Some(src),
                        }
                        stats.app_in += 1;
                        stats.app_in_bytes += data.len() as u64;
                        // Refusals are counted by the endpoint; a datagram
                        // too large to carry is also said once.
                        if let Err(SendRefused::Sender(SendError::TooLarge { len, max })) =
                            ep.send(now, Bytes::copy_from_slice(data))
                        {
                            if !stats.said_too_large {
                                stats.said_too_large = true;
                                eprintln!(
                                    "tunnel: dropped a {len}-byte datagram: the tunnel carries at most {max} bytes \
                                     (--max-datagram {} less {}); such datagrams are dropped and counted as too_large",
                                    args.max_datagram,
                                    args.max_datagram - max
                                );
                            }
                        }
                        io.drain(&mut ep, now, &mut stats);
                    }
                }
                Err(e) if is_transient(&e) => stats.recv_errors += 1,
                Err(e) => return Err(anyhow::Error::new(e).context("app socket")),
            },
            () = sleep_until_opt(deadline) => {
                let now = clock.now();
                ep.handle_timeout(now);
                io.drain(&mut ep, now, &mut stats);
            }
        }
    }
    io.flush(&link, &app, app_peer, &mut stats).await;
    let fin = Snapshot::read(&ep, &stats, clock.now());
    let summary = summary(&args, role, &ep, &stats, &fin, start);
    let mut out = std::io::stdout().lock();
    print_summary(&mut out, &summary)?;
    if let Some(path) = &args.stats_json {
        std::fs::write(path, serde_json::to_string_pretty(&summary)? + "\n")
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

/// What the machine asked for, sent at the end of a turn: link transmits
/// and datagrams for the application, each in runs for one GSO send.
#[derive(Default)]
struct Io {
    transmits: Vec<Transmit>,
    deliveries: Vec<Bytes>,
    scratch: Vec<u8>,
}

impl Io {
    fn drain(&mut self, ep: &mut TunnelEndpoint, now: Instant, stats: &mut LiveStats) {
        while let Some(t) = ep.poll_transmit(now) {
            self.transmits.push(t);
        }
        while let Some(d) = ep.poll_event() {
            if let Some(added) = d.recovered {
                let us = u64::try_from(added.as_micros()).unwrap_or(u64::MAX);
                stats.latency.saturating_record(us);
                stats.window.saturating_record(us);
            }
            self.deliveries.push(d.payload);
        }
    }

    async fn flush(
        &mut self,
        link: &BatchedUdpSocket,
        app: &BatchedUdpSocket,
        app_peer: Option<SocketAddr>,
        stats: &mut LiveStats,
    ) {
        let mut i = 0;
        while i < self.transmits.len() {
            let dst = self.transmits[i].dst;
            let end = run_end(&self.transmits[i..], link.max_send_segments(), |t| {
                (t.dst == dst).then_some(t.payload.len())
            });
            let n = end as u64;
            let r = send_run(
                link,
                dst,
                self.transmits[i..i + end].iter().map(|t| &t.payload),
                &mut self.scratch,
            )
            .await;
            stats.link_datagrams += n;
            if r.is_err() {
                stats.link_send_errors += n;
            }
            i += end;
        }
        self.transmits.clear();
        let Some(dst) = app_peer else {
            stats.no_app += self.deliveries.len() as u64;
            self.deliveries.clear();
            return;
        };
        let mut i = 0;
        while i < self.deliveries.len() {
            let end = run_end(&self.deliveries[i..], app.max_send_segments(), |p| {
                Some(p.len())
            });
            let n = end as u64;
            let r = send_run(
                app,
                dst,
                self.deliveries[i..i + end].iter(),
                &mut self.scratch,
            )
            .await;
            stats.app_out += n;
            if r.is_err() {
                stats.app_send_errors += n;
            }
            i += end;
        }
        self.deliveries.clear();
    }
}

/// How many leading items can go in one GSO send: same key (destination)
/// and same length, up to `max_segments` and 64 KiB.
fn run_end<T>(items: &[T], max_segments: usize, len: impl Fn(&T) -> Option<usize>) -> usize {
    let Some(first) = items.first().and_then(&len) else {
        return 1;
    };
    if first == 0 {
        return 1;
    }
    let cap = max_segments.max(1).min(MAX_UDP_PAYLOAD / first).max(1);
    1 + items[1..]
        .iter()
        .take(cap - 1)
        .take_while(|t| len(t) == Some(first))
        .count()
}

async fn send_run<'a>(
    socket: &BatchedUdpSocket,
    dst: SocketAddr,
    mut payloads: impl ExactSizeIterator<Item = &'a Bytes>,
    scratch: &mut Vec<u8>,
) -> std::io::Result<usize> {
    if payloads.len() == 1 {
        let p = payloads.next().expect("one payload");
        return socket.send_to(p, dst).await;
    }
    scratch.clear();
    let mut seg = 0;
    for p in payloads {
        seg = p.len();
        scratch.extend_from_slice(p);
    }
    socket.send_segments(scratch, seg, dst).await
}

/// Counters the run loop keeps (the machine keeps the rest).
struct LiveStats {
    app_in: u64,
    app_in_bytes: u64,
    app_out: u64,
    app_foreign: u64,
    app_send_errors: u64,
    no_app: u64,
    link_datagrams: u64,
    link_send_errors: u64,
    recv_errors: u64,
    /// A too-large datagram was reported on stderr already.
    said_too_large: bool,
    /// Added latency of rebuilt datagrams over the run, microseconds.
    latency: Histogram<u64>,
    /// ... over the current second.
    window: Histogram<u64>,
}

impl LiveStats {
    fn new() -> Self {
        Self {
            app_in: 0,
            app_in_bytes: 0,
            app_out: 0,
            app_foreign: 0,
            app_send_errors: 0,
            no_app: 0,
            link_datagrams: 0,
            link_send_errors: 0,
            recv_errors: 0,
            said_too_large: false,
            latency: latency_histogram(),
            window: latency_histogram(),
        }
    }
}

/// Cumulative counters at one instant.
#[derive(Clone, Copy, Debug, Default)]
struct Snapshot {
    at: Instant,
    app_in: u64,
    app_in_bytes: u64,
    app_out: u64,
    totals: Totals,
    p50_us: u64,
    p99_us: u64,
    samples: u64,
}

impl Snapshot {
    fn read(ep: &TunnelEndpoint, s: &LiveStats, at: Instant) -> Self {
        let st = ep.stats();
        Self {
            at,
            // What the tunnel carried: too-large datagrams are not in it.
            app_in: s.app_in - st.too_large,
            app_in_bytes: s.app_in_bytes - st.too_large_bytes,
            app_out: s.app_out,
            totals: ep.totals(),
            p50_us: s.window.value_at_quantile(0.5),
            p99_us: s.window.value_at_quantile(0.99),
            samples: s.window.len(),
        }
    }

    fn line(&self, last: &Self, ep: &TunnelEndpoint) -> String {
        let secs = self
            .at
            .saturating_duration_since(last.at)
            .as_secs_f64()
            .max(1e-9);
        let (t, l) = (&self.totals, &last.totals);
        let app_in = self.app_in - last.app_in;
        let app_bytes = self.app_in_bytes - last.app_in_bytes;
        let wire = t.bytes_sent - l.bytes_sent;
        let wire_n = (t.source_sent + t.repair_sent) - (l.source_sent + l.repair_sent);
        format!(
            "in {:>6.0}/s {:>8.2} Mbit/s  overhead {:>6}  Fwnd {:>3}  residual {:>7}  |  out {:>6.0}/s  rebuilt {:>5}  lost {:>4}  added p50 {:>8} p99 {:>8}",
            app_in as f64 / secs,
            app_bytes as f64 * 8.0 / secs / 1e6,
            percent(overhead(app_bytes, app_in, wire, wire_n)),
            ep.fwnd().map_or("-".to_owned(), |f| f.to_string()),
            far_side(t, self.at, t.source_sent > l.source_sent),
            (self.app_out - last.app_out) as f64 / secs,
            t.recovered - l.recovered,
            t.unrecovered - l.unrecovered,
            ms(self.p50_us, self.samples),
            ms(self.p99_us, self.samples),
        )
    }
}

/// The final summary (also the `--stats-json` document).
fn summary(
    args: &TunnelArgs,
    role: Role,
    ep: &TunnelEndpoint,
    s: &LiveStats,
    fin: &Snapshot,
    start: Instant,
) -> serde_json::Value {
    let t = &fin.totals;
    let wire_n = t.source_sent + t.repair_sent;
    let lat = &s.latency;
    let q = |x: f64| (!lat.is_empty()).then(|| lat.value_at_quantile(x));
    let st = ep.stats();
    let sent_residual = t.sent_residual();
    json!({
        "role": match role { Role::Listen => "listen", Role::Forward(_) => "forward" },
        "fec": args.fec.to_string(),
        "k": args.k,
        "seconds": fin.at.saturating_duration_since(start).as_secs_f64(),
        "peer": ep.peer().map(|p| p.to_string()),
        "sent": {
            "app_datagrams": fin.app_in,
            "app_bytes": fin.app_in_bytes,
            "wire_datagrams": wire_n,
            "wire_bytes": t.bytes_sent,
            "source_packets": t.source_sent,
            "repair_packets": t.repair_sent,
            "blocks": t.blocks,
            "short_blocks": t.short_blocks,
            "mean_fwnd": if t.blocks == 0 { 0.0 } else { t.fwnd_sum as f64 / t.blocks as f64 },
            "fwnd": ep.fwnd(),
            "overhead": overhead(fin.app_in_bytes, fin.app_in, t.bytes_sent, wire_n),
            "refused": st.refused,
            "no_peer": st.no_peer,
            "send_errors": s.link_send_errors,
            "peer_delivered": t.peer_delivered,
            "peer_recovered": t.peer_recovered,
            "peer_unrecovered": t.peer_unrecovered,
            "peer_sent": t.peer_sent,
            "reports": t.reports_received,
            // null: no report came (the far side is not up or not reachable).
            "residual_loss": sent_residual,
        },
        "received": {
            "packets": t.packets,
            "lost_packets": t.lost_packets,
            "delivered": t.delivered,
            "recovered": t.recovered,
            "unrecovered": t.unrecovered,
            "residual_loss": residual(t.unrecovered, t.delivered),
            "app_datagrams": s.app_out,
            "app_send_errors": s.app_send_errors,
            "no_app": s.no_app,
            "added_latency_us": {
                "count": lat.len(),
                "p50": q(0.5),
                "p99": q(0.99),
                "max": q(1.0),
            },
        },
        "dropped": {
            "too_large": st.too_large,
            "foreign": st.foreign,
            "invalid_before_peer": st.invalid_before_peer,
            "unauthenticated": st.unauthenticated,
            "replayed": st.replayed,
            "seal_exhausted": st.seal_exhausted,
            "app_foreign": s.app_foreign,
            "malformed": t.malformed,
            "other_session": t.other_session,
            "stale": t.stale,
            "late": t.late,
            "inconsistent": t.inconsistent,
            "oversized": t.oversized,
            "corrupt": t.corrupt,
            "evicted_blocks": t.evicted,
        },
        // Rebuilt datagrams whose checksum failed: not handed out, counted
        // as lost above.
        "corrupt_rebuilt": t.corrupt_rebuilt,
        // Repairs of blocks already complete, and the like: normal, not dropped input.
        "surplus_symbols": t.duplicates,
        "blocks_held": ep.blocks_held(),
        "restarts": st.restarts,
        "recv_errors": s.recv_errors,
    })
}

fn print_summary(out: &mut impl Write, v: &serde_json::Value) -> anyhow::Result<()> {
    let f = |p: &str| {
        v.pointer(p)
            .and_then(serde_json::Value::as_f64)
            .unwrap_or(0.0)
    };
    let u = |p: &str| {
        v.pointer(p)
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0)
    };
    let secs = f("/seconds").max(1e-9);
    writeln!(
        out,
        "tunnel summary ({}, --fec {} --k {}, {:.1} s, peer {}):",
        v["role"].as_str().unwrap_or("-"),
        v["fec"].as_str().unwrap_or("-"),
        u("/k"),
        secs,
        v["peer"].as_str().unwrap_or("none")
    )?;
    writeln!(
        out,
        "  in                   {} datagrams ({:.0}/s, {:.2} Mbit/s)",
        u("/sent/app_datagrams"),
        f("/sent/app_datagrams") / secs,
        f("/sent/app_bytes") * 8.0 / secs / 1e6
    )?;
    writeln!(
        out,
        "  on the link          {} source + {} repair packets, overhead {}, mean Fwnd {:.1}",
        u("/sent/source_packets"),
        u("/sent/repair_packets"),
        percent(f("/sent/overhead")),
        f("/sent/mean_fwnd")
    )?;
    if v.pointer("/sent/residual_loss")
        .is_some_and(serde_json::Value::is_null)
    {
        writeln!(
            out,
            "  far side (reports)   none received: the far side is not up or not reachable"
        )?;
    } else {
        writeln!(
            out,
            "  far side (reports)   {} of {} delivered, {} rebuilt, {} lost: residual loss {}",
            u("/sent/peer_delivered"),
            u("/sent/peer_sent"),
            u("/sent/peer_recovered"),
            u("/sent/peer_unrecovered"),
            percent(f("/sent/residual_loss"))
        )?;
    }
    writeln!(
        out,
        "  out                  {} datagrams, {} rebuilt, {} lost: residual loss {}",
        u("/received/delivered"),
        u("/received/recovered"),
        u("/received/unrecovered"),
        percent(f("/received/residual_loss"))
    )?;
    let lat = |p: &str| ms(u(p), u("/received/added_latency_us/count"));
    writeln!(
        out,
        "  added latency        p50 {} p99 {} max {} (rebuilt datagrams)",
        lat("/received/added_latency_us/p50"),
        lat("/received/added_latency_us/p99"),
        lat("/received/added_latency_us/max"),
    )?;
    let dropped: u64 = v["dropped"].as_object().map_or(0, |m| {
        m.values().filter_map(serde_json::Value::as_u64).sum()
    });
    writeln!(out, "  dropped              {dropped} ({})", v["dropped"])?;
    Ok(())
}

/// Extra bytes on the link over sending the application's datagrams bare,
/// IPv4 and UDP headers counted on both.
fn overhead(app_bytes: u64, app_n: u64, wire_bytes: u64, wire_n: u64) -> f64 {
    let bare = app_bytes + IP_UDP_OVERHEAD as u64 * app_n;
    if bare == 0 {
        return 0.0;
    }
    (wire_bytes + IP_UDP_OVERHEAD as u64 * wire_n) as f64 / bare as f64 - 1.0
}

fn residual(lost: u64, delivered: u64) -> f64 {
    if lost + delivered == 0 {
        0.0
    } else {
        lost as f64 / (lost + delivered) as f64
    }
}

/// The live residual column: the far side's view, or why there is none
/// (`sending`: we sent data this second, so reports should come).
fn far_side(t: &Totals, now: Instant, sending: bool) -> String {
    match (t.sent_residual(), t.last_report_at) {
        (Some(r), Some(at)) if !sending || now.saturating_duration_since(at) < FAR_SIDE_SILENT => {
            percent(r)
        }
        (Some(_), Some(at)) => format!(
            "far side silent {:.0}s",
            now.saturating_duration_since(at).as_secs_f64()
        ),
        _ if t.source_sent == 0 => "-".to_owned(),
        _ => "no reports: far side not up?".to_owned(),
    }
}

fn percent(x: f64) -> String {
    format!("{:.2}%", 100.0 * x)
}

/// Microseconds as milliseconds, or `-` without samples.
fn ms(micros: u64, count: u64) -> String {
    if count == 0 {
        "-".to_owned()
    } else {
        format!("{:.2} ms", micros as f64 / 1e3)
    }
}

fn latency_histogram() -> Histogram<u64> {
    // 1 µs to 60 s, 3 significant digits.
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("static histogram bounds are valid")
}

/// The unspecified address of `peer`'s family, any port.
fn any_addr(peer: SocketAddr) -> SocketAddr {
    if peer.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    }
}

async fn sleep_until_opt(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// Silence after which a learned peer may be replaced (a restarted or
/// re-mapped peer gets through; a stray packet during traffic does not).
const PEER_IDLE: Duration = Duration::from_secs(5);
/// Reports come every 10 ms while data flows; this long without one
/// while we send means the far side stopped hearing us.
const FAR_SIDE_SILENT: Duration = Duration::from_secs(2);
/// The largest UDP payload over IPv4 (65535 − 20 − 8).
const MAX_UDP_PAYLOAD: usize = 65_507;
/// Receive buffers per system call (quinn-udp's `recvmmsg` batch).
const RECV_BATCH: usize = 32;
/// One receive buffer: room for 64 KiB of GRO-glued datagrams.
const GRO_BUFFER: usize = 65_536;
/// Kernel socket buffers asked for (4 MiB).
const SOCKET_BUFFER: usize = 4 << 20;
