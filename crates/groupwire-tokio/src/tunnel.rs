//! The tunnel on real sockets: one [`TunnelEndpoint`] over two UDP sockets
//! (what `groupwire tunnel` runs).
//!
//! - The **app socket** takes the local application's datagrams and hands
//!   it the peer's.
//! - The **link socket** carries the block-FEC stream to and from the other
//!   side of the tunnel.
//!
//! Which address is which depends on the [`TunnelRole`]: facing the
//! application ([`TunnelRole::Listen`]: the app socket is bound to
//! `listen`, the application is the last source seen there, the link goes
//! to a known peer) or facing a server ([`TunnelRole::Forward`]: the link
//! socket is bound to `listen`, the peer is learned by the machine, the
//! app socket sends to the server and accepts only its replies).
//!
//! The machine does all protocol work (see [`groupwire_proto::tunnel`]);
//! this loop reads both sockets in batches (`recvmmsg`/GRO), feeds the
//! machine, and at the end of each turn sends what it asked for in GSO runs
//! (the same routine as [`Driver`](crate::Driver)). It returns a typed,
//! serializable [`TunnelReport`] and reports each second through a
//! callback, so a caller prints or records what it likes.

use std::future::Future;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use groupwire_metrics::{ChannelSnapshot, LatencyStats};
use groupwire_proto::block::SendError;
use groupwire_proto::tunnel::{SendRefused, Totals, TunnelConfig, TunnelEndpoint};
use groupwire_proto::units::IP_UDP_OVERHEAD;
use groupwire_proto::{Instant, Machine, Transmit, Transport};
use serde::Serialize;

use crate::clock::Clock;
use crate::driver::GRO_BUFFER;
use crate::send::{SendTally, send_transmits, sleep_until};
use crate::socket::{BatchedUdpSocket, DatagramSocket, RecvBatch, is_transient};

/// Which way a tunnel side faces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TunnelRole {
    /// Faces the application: the app socket is bound to the listen
    /// address and replies go to the last address the application sent
    /// from; the link goes to `peer` only.
    Listen {
        /// The other side's link address.
        peer: SocketAddr,
    },
    /// Faces a server: the link socket is bound to the listen address and
    /// the peer is learned from the first valid packet; the app socket
    /// sends to `target` and accepts only its replies.
    Forward {
        /// Where the peer's datagrams go.
        target: SocketAddr,
    },
}

impl TunnelRole {
    /// `listen` or `forward`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Listen { .. } => "listen",
            Self::Forward { .. } => "forward",
        }
    }
}

/// Where a tunnel side binds.
#[derive(Clone, Debug)]
pub struct TunnelSetup {
    /// The app socket's address ([`TunnelRole::Listen`]) or the link
    /// socket's ([`TunnelRole::Forward`]).
    pub listen: SocketAddr,
    /// Which way this side faces.
    pub role: TunnelRole,
    /// The other socket's local address; `None`: the unspecified address of
    /// the peer's (or target's) family, any port.
    pub bind: Option<SocketAddr>,
    /// Kernel receive and send buffers asked for on both sockets (the OS
    /// may cap them): large buffers ride out bursts.
    pub socket_buffer: usize,
}

impl TunnelSetup {
    /// Kernel socket buffers asked for by default (4 MiB).
    pub const DEFAULT_SOCKET_BUFFER: usize = 4 << 20;

    /// A setup with the default buffers and any second address.
    pub fn new(listen: SocketAddr, role: TunnelRole) -> Self {
        Self {
            listen,
            role,
            bind: None,
            socket_buffer: Self::DEFAULT_SOCKET_BUFFER,
        }
    }
}

/// A socket could not be bound.
#[derive(Debug, thiserror::Error)]
#[error("cannot bind {addr}: {source}")]
pub struct BindError {
    /// The address asked for.
    pub addr: SocketAddr,
    /// Why.
    #[source]
    pub source: io::Error,
}

/// What a running tunnel tells its caller as it goes.
#[derive(Debug)]
#[non_exhaustive]
pub enum TunnelNotice<'a> {
    /// Another second went by.
    Second(&'a TunnelSecond),
    /// The first application datagram too large to carry was dropped (later
    /// ones are only counted, in [`TunnelDropped::too_large`]).
    FirstTooLarge {
        /// Its length.
        len: usize,
        /// The most the tunnel carries.
        max: usize,
    },
}

/// A bound tunnel side, ready to [`run`](Tunnel::run).
#[derive(Debug)]
pub struct Tunnel {
    app: BatchedUdpSocket,
    link: BatchedUdpSocket,
    app_addr: SocketAddr,
    link_addr: SocketAddr,
    role: TunnelRole,
    cfg: TunnelConfig,
}

impl Tunnel {
    /// Binds both sockets. `cfg` should have passed
    /// [`TunnelConfig::validate`]; its `peer` is set from the role.
    pub async fn bind(setup: TunnelSetup, mut cfg: TunnelConfig) -> Result<Self, BindError> {
        let other = match setup.role {
            TunnelRole::Listen { peer } => peer,
            TunnelRole::Forward { target } => target,
        };
        let second = setup.bind.unwrap_or_else(|| any_addr(other));
        let (app_bind, link_bind) = match setup.role {
            TunnelRole::Listen { .. } => (setup.listen, second),
            TunnelRole::Forward { .. } => (second, setup.listen),
        };
        let bind = |addr: SocketAddr| async move {
            let fail = |source| BindError { addr, source };
            let s = BatchedUdpSocket::bind(addr).await.map_err(fail)?;
            // Best effort: the OS may cap (or refuse) large buffers.
            let _ = s.set_recv_buffer_size(setup.socket_buffer);
            let _ = s.set_send_buffer_size(setup.socket_buffer);
            let local = s.local_addr().map_err(fail)?;
            Ok::<_, BindError>((s, local))
        };
        let (app, app_addr) = bind(app_bind).await?;
        let (link, link_addr) = bind(link_bind).await?;
        cfg.peer = match setup.role {
            TunnelRole::Listen { peer } => Some(peer),
            TunnelRole::Forward { .. } => None,
        };
        Ok(Self {
            app,
            link,
            app_addr,
            link_addr,
            role: setup.role,
            cfg,
        })
    }

    /// The app socket's local address.
    pub fn app_addr(&self) -> SocketAddr {
        self.app_addr
    }

    /// The link socket's local address.
    pub fn link_addr(&self) -> SocketAddr {
        self.link_addr
    }

    /// Carries datagrams until `shutdown` completes; `on_notice` hears each
    /// second and the first too-large datagram. A receive error that only
    /// means a lost datagram is counted; any other stops the tunnel.
    pub async fn run(
        self,
        clock: Clock,
        shutdown: impl Future<Output = ()>,
        mut on_notice: impl FnMut(TunnelNotice<'_>),
    ) -> io::Result<TunnelReport> {
        let Self {
            app,
            link,
            role,
            cfg,
            ..
        } = self;
        let mut cfg = cfg;
        // XOR's RTP timestamps on the wall clock: a peer on this host (or a
        // synchronized one) measures one-way latency.
        cfg.shared_clock_micros = Some(clock.wall_micros(Instant::ZERO));
        let max_payload = cfg.max_payload();
        let (controller, k) = (cfg.fec_name(), cfg.sender.k);
        let mut ep = TunnelEndpoint::new(cfg);
        let mut app_peer = match role {
            TunnelRole::Listen { .. } => None,
            TunnelRole::Forward { target } => Some(target),
        };
        let mut io = Io::default();
        let mut stats = LiveStats::new();
        let mut app_rx = RecvBatch::new(RECV_BATCH, GRO_BUFFER);
        let mut link_rx = RecvBatch::new(RECV_BATCH, GRO_BUFFER);
        tokio::pin!(shutdown);
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
                () = &mut shutdown => break,
                _ = tick.tick() => {
                    let now = Snapshot::read(&ep, &stats, clock.now());
                    let mut second = now.second(&last, &ep, start);
                    second.channel = Some(ep.channel(now.at));
                    on_notice(TunnelNotice::Second(&second));
                    stats.window.reset();
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
                    Err(e) => return Err(io::Error::new(e.kind(), format!("link socket: {e}"))),
                },
                r = app.recv_batch(&mut app_rx) => match r {
                    Ok(()) => {
                        let now = clock.now();
                        for (src, data) in app_rx.iter() {
                            match role {
                                TunnelRole::Forward { target } if src != target => {
                                    stats.app_foreign += 1;
                                    continue;
                                }
                                TunnelRole::Forward { .. } => {}
                                TunnelRole::Listen { .. } => app_peer = Some(src),
                            }
                            stats.app_in += 1;
                            stats.app_in_bytes += data.len() as u64;
                            // The endpoint counts refusals; the first
                            // too-large datagram is also said.
                            if let Err(SendRefused::Sender(SendError::TooLarge { len, .. })) =
                                ep.send(now, Bytes::copy_from_slice(data))
                            {
                                if !stats.said_too_large {
                                    stats.said_too_large = true;
                                    on_notice(TunnelNotice::FirstTooLarge { len, max: max_payload });
                                }
                            }
                        }
                        // Sends only queue (see `TunnelEndpoint::send`): one
                        // drain per batch lets the machine order the batch's
                        // output (XOR parity after the media), so equal-sized
                        // datagrams leave in one segmentation-offload call.
                        io.drain(&mut ep, now, &mut stats);
                    }
                    Err(e) if is_transient(&e) => stats.recv_errors += 1,
                    Err(e) => return Err(io::Error::new(e.kind(), format!("app socket: {e}"))),
                },
                () = sleep_until(deadline) => {
                    let now = clock.now();
                    ep.handle_timeout(now);
                    io.drain(&mut ep, now, &mut stats);
                }
            }
        }
        io.flush(&link, &app, app_peer, &mut stats).await;
        let fin = Snapshot::read(&ep, &stats, clock.now());
        Ok(TunnelReport::new(
            role, controller, k, &mut ep, &stats, &fin, start,
        ))
    }
}

/// What the machine asked for, sent at the end of a turn: link transmits
/// and datagrams for the application.
#[derive(Default)]
struct Io {
    transmits: Vec<Transmit>,
    deliveries: Vec<Bytes>,
    /// The deliveries as transmits to the application, at flush time (the
    /// application's address may change within a turn).
    to_app: Vec<Transmit>,
    scratch: Vec<u8>,
}

impl Io {
    fn drain(&mut self, ep: &mut TunnelEndpoint, now: Instant, stats: &mut LiveStats) {
        while let Some(t) = ep.poll_transmit(now) {
            self.transmits.push(t);
        }
        while let Some(d) = ep.poll_event() {
            if let Some(added) = d.recovered {
                stats.latency.record(added);
                stats.window.record(added);
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
        let t = send_transmits(link, &self.transmits, &mut self.scratch).await;
        stats.link.add(t);
        self.transmits.clear();
        let Some(dst) = app_peer else {
            stats.no_app += self.deliveries.len() as u64;
            self.deliveries.clear();
            return;
        };
        self.to_app
            .extend(self.deliveries.drain(..).map(|payload| Transmit {
                dst,
                transport: Transport::Udp,
                payload,
            }));
        let t = send_transmits(app, &self.to_app, &mut self.scratch).await;
        stats.app.add(t);
        self.to_app.clear();
    }
}

/// What one socket's sends came to.
#[derive(Clone, Copy, Debug, Default)]
struct Sent {
    datagrams: u64,
    errors: u64,
}

impl Sent {
    fn add(&mut self, t: SendTally) {
        self.datagrams += t.datagrams + t.errors;
        self.errors += t.errors;
    }
}

/// Counters the run loop keeps (the machine keeps the rest).
struct LiveStats {
    app_in: u64,
    app_in_bytes: u64,
    app_foreign: u64,
    /// Datagrams for the application (attempted) and the failed ones.
    app: Sent,
    /// Deliveries dropped: the application's address is not known yet.
    no_app: u64,
    /// Link datagrams (attempted) and the failed ones.
    link: Sent,
    recv_errors: u64,
    /// A too-large datagram was reported already.
    said_too_large: bool,
    /// Added latency of rebuilt datagrams over the run.
    latency: LatencyStats,
    /// ... over the current second.
    window: LatencyStats,
}

impl LiveStats {
    fn new() -> Self {
        Self {
            app_in: 0,
            app_in_bytes: 0,
            app_foreign: 0,
            app: Sent::default(),
            no_app: 0,
            link: Sent::default(),
            recv_errors: 0,
            said_too_large: false,
            latency: LatencyStats::new(),
            window: LatencyStats::new(),
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
    /// Added latency of this second's rebuilt datagrams, microseconds.
    added_p50: Option<u64>,
    added_p99: Option<u64>,
}

impl Snapshot {
    fn read(ep: &TunnelEndpoint, s: &LiveStats, at: Instant) -> Self {
        let st = ep.stats();
        Self {
            at,
            // What the tunnel carried: too-large datagrams are not in it.
            app_in: s.app_in - st.too_large,
            app_in_bytes: s.app_in_bytes - st.too_large_bytes,
            app_out: s.app.datagrams,
            totals: ep.totals(),
            added_p50: s.window.quantile_micros(0.5),
            added_p99: s.window.quantile_micros(0.99),
        }
    }

    /// The second from `last` to `self`.
    fn second(&self, last: &Self, ep: &TunnelEndpoint, start: Instant) -> TunnelSecond {
        let secs = self
            .at
            .saturating_duration_since(last.at)
            .as_secs_f64()
            .max(1e-9);
        let (t, l) = (&self.totals, &last.totals);
        let app_in = self.app_in - last.app_in;
        let app_bytes = self.app_in_bytes - last.app_in_bytes;
        let wire = t.sender.bytes_sent - l.sender.bytes_sent;
        let wire_n = (t.sender.source_sent + t.sender.repair_sent)
            - (l.sender.source_sent + l.sender.repair_sent);
        TunnelSecond {
            at: self.at.saturating_duration_since(start),
            in_per_sec: app_in as f64 / secs,
            in_mbit_per_sec: app_bytes as f64 * 8.0 / secs / 1e6,
            overhead: overhead(app_bytes, app_in, wire, wire_n),
            fwnd: ep.fwnd(),
            k: ep.k(),
            cannot_meet: ep.target_status().is_some_and(|t| !t.meets),
            far_side: FarSide::read(
                t,
                self.at,
                t.sender.source_sent > l.sender.source_sent,
                ep.open_loop(),
            ),
            out_per_sec: (self.app_out - last.app_out) as f64 / secs,
            rebuilt: t.receiver.recovered - l.receiver.recovered,
            lost: t.receiver.unrecovered - l.receiver.unrecovered,
            added_p50: self.added_p50.map(Duration::from_micros),
            added_p99: self.added_p99.map(Duration::from_micros),
            channel: None,
        }
    }
}

/// One second of a running tunnel (the live line of `groupwire tunnel`).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct TunnelSecond {
    /// Time since the tunnel started.
    pub at: Duration,
    /// Datagrams per second the tunnel took from the local application.
    pub in_per_sec: f64,
    /// Their megabits per second.
    pub in_mbit_per_sec: f64,
    /// Extra bytes on the link over sending those datagrams bare, IP and
    /// UDP headers counted on both (FEC headers and repair packets).
    pub overhead: f64,
    /// Repair packets per block of k, now.
    pub fwnd: Option<usize>,
    /// Source datagrams per block, now (the target controller chooses it;
    /// others keep `--k`).
    pub k: Option<usize>,
    /// The target controller found no code within its delay budget that
    /// meets its target (`--fec target` only).
    pub cannot_meet: bool,
    /// Loss left after FEC in our direction, from the far side's reports.
    pub far_side: FarSide,
    /// Datagrams per second handed to the local application.
    pub out_per_sec: f64,
    /// Of them, rebuilt by FEC this second.
    pub rebuilt: u64,
    /// Datagrams given up this second.
    pub lost: u64,
    /// Latency recovery added to this second's rebuilt datagrams, p50.
    pub added_p50: Option<Duration>,
    /// ... p99.
    pub added_p99: Option<Duration>,
    /// The channel's measures (bandwidth, latency, jitter, burstiness,
    /// recovery paths), this second's and since the start.
    pub channel: Option<ChannelSnapshot>,
}

/// What the far side's reports say of our direction.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FarSide {
    /// We have sent nothing, so no report is due.
    Idle,
    /// The residual loss the latest reports show.
    Residual(f64),
    /// We send but no report came for this long (reports come every 10 ms
    /// while data flows): the far side stopped hearing us.
    Silent(Duration),
    /// We send and no report ever came: the far side is not up?
    NoReports,
    /// The FEC sends no reports (XOR parity is open loop): what the far
    /// side gets is not known here.
    OpenLoop,
}

impl FarSide {
    /// `sending`: we sent data this second, so reports should come.
    fn read(t: &Totals, now: Instant, sending: bool, open_loop: bool) -> Self {
        if open_loop {
            return Self::OpenLoop;
        }
        match (t.sent_residual(), t.sender.last_report_at) {
            (Some(r), Some(at))
                if !sending || now.saturating_duration_since(at) < FAR_SIDE_SILENT =>
            {
                Self::Residual(r)
            }
            (Some(_), Some(at)) => Self::Silent(now.saturating_duration_since(at)),
            _ if t.sender.source_sent == 0 => Self::Idle,
            _ => Self::NoReports,
        }
    }
}

/// The end-of-run summary of one tunnel side (`--stats-json`).
#[derive(Clone, Debug, Serialize)]
#[non_exhaustive]
pub struct TunnelReport {
    /// `listen` or `forward`.
    pub role: &'static str,
    /// The redundancy controller (`gmiad`, `static:N`, ...).
    pub fec: String,
    /// Source datagrams per block.
    pub k: usize,
    /// How long the tunnel ran.
    pub seconds: f64,
    /// The peer in use at the end.
    pub peer: Option<SocketAddr>,
    /// Our direction: what went out and what the far side reported.
    pub sent: TunnelSent,
    /// The other direction: what came in and what went to the application.
    pub received: TunnelReceived,
    /// Input dropped, by reason.
    pub dropped: TunnelDropped,
    /// Rebuilt datagrams whose checksum failed: not handed out, counted
    /// as lost.
    pub corrupt_rebuilt: u64,
    /// Repairs of blocks already complete and the like: normal, not
    /// dropped input.
    pub surplus_symbols: u64,
    /// Blocks the receiver held at the end.
    pub blocks_held: usize,
    /// Times the FEC state was replaced (a new or restarted peer).
    pub restarts: u64,
    /// Receive errors that only meant a lost datagram.
    pub recv_errors: u64,
    /// The channel's measures over the whole run (the last interval's
    /// rates and latency; totals, jitter, loss and burstiness since the
    /// start).
    pub channel: ChannelSnapshot,
}

/// Our direction of a [`TunnelReport`].
#[derive(Clone, Debug, Serialize)]
#[non_exhaustive]
pub struct TunnelSent {
    /// Datagrams from the application the tunnel carried.
    pub app_datagrams: u64,
    /// Their bytes.
    pub app_bytes: u64,
    /// Datagrams on the link (source and repair packets).
    pub wire_datagrams: u64,
    /// Their bytes.
    pub wire_bytes: u64,
    /// Source packets.
    pub source_packets: u64,
    /// Repair packets.
    pub repair_packets: u64,
    /// Blocks sent.
    pub blocks: u64,
    /// Blocks closed before k datagrams (`--block-wait`).
    pub short_blocks: u64,
    /// Repair packets per block, on average.
    pub mean_fwnd: f64,
    /// Repair packets per block at the end.
    pub fwnd: Option<usize>,
    /// Source packets per block, on average (`source_packets / blocks`).
    pub mean_k: f64,
    /// With `--fec target`: the code it chose last and what it expects.
    pub target: Option<TargetCode>,
    /// With `--fec target`: blocks sent with a code expected to miss the
    /// target (nothing within the delay budget met it).
    pub unmet_blocks: u64,
    /// Extra bytes on the link over sending the datagrams bare, IP and UDP
    /// headers counted on both.
    pub overhead: f64,
    /// Datagrams the sender refused (queue full).
    pub refused: u64,
    /// Datagrams dropped: no peer known yet.
    pub no_peer: u64,
    /// Link datagrams the socket refused.
    pub send_errors: u64,
    /// Source packets the far side delivered (its latest report).
    pub peer_delivered: u64,
    /// Of them, rebuilt.
    pub peer_recovered: u64,
    /// Source packets the far side gave up on.
    pub peer_unrecovered: u64,
    /// Source packets the far side has seen the sequence numbers of.
    pub peer_sent: u64,
    /// Reports received.
    pub reports: u64,
    /// Loss left after FEC in this direction, as the far side reports it;
    /// `None` (JSON `null`): no report came (the far side is not up, or not
    /// reachable).
    pub residual_loss: Option<f64>,
}

/// The target controller's code at the end of a run (`--fec target`).
#[derive(Clone, Debug, Serialize)]
#[non_exhaustive]
pub struct TargetCode {
    /// Source packets per block.
    pub k: usize,
    /// Repair packets per block.
    pub m: usize,
    /// The residual loss asked for (`--target-loss`).
    pub target: f64,
    /// The delay budget (`--max-delay`), milliseconds.
    pub max_delay_ms: f64,
    /// The residual loss the controller expects of the code.
    pub predicted_residual: f64,
    /// Whether it meets the target within the budget.
    pub meets: bool,
    /// The fitted channel: Gilbert `p`, `r`, and its loss rate.
    pub gilbert_p: f64,
    /// See [`gilbert_p`](Self::gilbert_p).
    pub gilbert_r: f64,
    /// The fitted chain's long-run loss rate.
    pub fitted_loss: f64,
}

/// The other direction of a [`TunnelReport`].
#[derive(Clone, Debug, Serialize)]
#[non_exhaustive]
pub struct TunnelReceived {
    /// Data packets received.
    pub packets: u64,
    /// Data packets missing from the sequence.
    pub lost_packets: u64,
    /// Datagrams delivered, rebuilt ones included.
    pub delivered: u64,
    /// Rebuilt by FEC.
    pub recovered: u64,
    /// Given up.
    pub unrecovered: u64,
    /// `unrecovered / (unrecovered + delivered)`.
    pub residual_loss: f64,
    /// Datagrams sent to the application.
    pub app_datagrams: u64,
    /// Of them, refused by the socket.
    pub app_send_errors: u64,
    /// Deliveries dropped: the application's address was not known yet.
    pub no_app: u64,
    /// Latency recovery added to rebuilt datagrams, microseconds.
    pub added_latency_us: AddedLatency,
}

/// Percentiles of the latency recovery added, microseconds; `None` without
/// rebuilt datagrams.
#[derive(Clone, Copy, Debug, Serialize)]
#[non_exhaustive]
pub struct AddedLatency {
    /// Rebuilt datagrams measured.
    pub count: u64,
    /// Median.
    pub p50: Option<u64>,
    /// 99th percentile.
    pub p99: Option<u64>,
    /// Largest.
    pub max: Option<u64>,
}

/// Input a tunnel dropped, by reason (see [`groupwire_proto::tunnel`] and
/// [`groupwire_proto::block`] for each).
#[derive(Clone, Copy, Debug, Serialize)]
#[non_exhaustive]
pub struct TunnelDropped {
    /// Application datagrams over the tunnel's largest payload.
    pub too_large: u64,
    /// Link datagrams from an address that is not the peer.
    pub foreign: u64,
    /// Link datagrams before a peer was known that were not a valid data
    /// packet of the session.
    pub invalid_before_peer: u64,
    /// Under a key: packets that failed authentication.
    pub unauthenticated: u64,
    /// Under a key: packets seen before (anti-replay window).
    pub replayed: u64,
    /// Under a key: packets not sealed because the nonces ran out.
    pub seal_exhausted: u64,
    /// App socket datagrams from someone other than the forward target.
    pub app_foreign: u64,
    /// Link datagrams that did not parse.
    pub malformed: u64,
    /// Packets of another session id.
    pub other_session: u64,
    /// Packets of a block already evicted or finished long ago (a replay).
    pub stale: u64,
    /// Packets that arrived after their sequence number was given up.
    pub late: u64,
    /// Packets that disagree with their block (shape, base, symbol length).
    pub inconsistent: u64,
    /// Symbols over the receiver's largest.
    pub oversized: u64,
    /// Packets whose checksum failed.
    pub corrupt: u64,
    /// Blocks evicted unfinished to keep the receiver's bound.
    pub evicted_blocks: u64,
}

impl TunnelDropped {
    /// All of them.
    pub fn total(&self) -> u64 {
        [
            self.too_large,
            self.foreign,
            self.invalid_before_peer,
            self.unauthenticated,
            self.replayed,
            self.seal_exhausted,
            self.app_foreign,
            self.malformed,
            self.other_session,
            self.stale,
            self.late,
            self.inconsistent,
            self.oversized,
            self.corrupt,
            self.evicted_blocks,
        ]
        .iter()
        .sum()
    }
}

impl TunnelReport {
    fn new(
        role: TunnelRole,
        fec: String,
        k: usize,
        ep: &mut TunnelEndpoint,
        s: &LiveStats,
        fin: &Snapshot,
        start: Instant,
    ) -> Self {
        let t = &fin.totals;
        let wire_n = t.sender.source_sent + t.sender.repair_sent;
        ep.finish_channel();
        let channel = ep.channel(fin.at);
        let lat = &s.latency;
        let q = |x: f64| lat.quantile_micros(x);
        let st = ep.stats();
        Self {
            role: role.name(),
            fec,
            k,
            seconds: fin.at.saturating_duration_since(start).as_secs_f64(),
            peer: ep.peer(),
            sent: TunnelSent {
                app_datagrams: fin.app_in,
                app_bytes: fin.app_in_bytes,
                wire_datagrams: wire_n,
                wire_bytes: t.sender.bytes_sent,
                source_packets: t.sender.source_sent,
                repair_packets: t.sender.repair_sent,
                blocks: t.sender.blocks,
                short_blocks: t.sender.short_blocks,
                mean_fwnd: if t.sender.blocks == 0 {
                    0.0
                } else {
                    t.sender.fwnd_sum as f64 / t.sender.blocks as f64
                },
                fwnd: ep.fwnd(),
                mean_k: if t.sender.blocks == 0 {
                    0.0
                } else {
                    t.sender.source_sent as f64 / t.sender.blocks as f64
                },
                target: ep.target_status().map(|c| TargetCode {
                    k: c.k,
                    m: c.m,
                    target: c.target,
                    max_delay_ms: c.max_delay.as_secs_f64() * 1e3,
                    predicted_residual: c.predicted,
                    meets: c.meets,
                    gilbert_p: c.model.p,
                    gilbert_r: c.model.r,
                    fitted_loss: c.model.loss_rate(),
                }),
                unmet_blocks: t.sender.unmet_blocks,
                overhead: overhead(fin.app_in_bytes, fin.app_in, t.sender.bytes_sent, wire_n),
                refused: st.refused,
                no_peer: st.no_peer,
                send_errors: s.link.errors,
                peer_delivered: t.sender.peer_delivered,
                peer_recovered: t.sender.peer_recovered,
                peer_unrecovered: t.sender.peer_unrecovered,
                peer_sent: t.sender.peer_sent,
                reports: t.sender.reports,
                residual_loss: t.sent_residual(),
            },
            received: TunnelReceived {
                packets: t.receiver.packets,
                lost_packets: t.receiver.lost_packets,
                delivered: t.receiver.delivered,
                recovered: t.receiver.recovered,
                unrecovered: t.receiver.unrecovered,
                residual_loss: residual(t.receiver.unrecovered, t.receiver.delivered),
                app_datagrams: s.app.datagrams,
                app_send_errors: s.app.errors,
                no_app: s.no_app,
                added_latency_us: AddedLatency {
                    count: lat.count(),
                    p50: q(0.5),
                    p99: q(0.99),
                    max: q(1.0),
                },
            },
            dropped: TunnelDropped {
                too_large: st.too_large,
                foreign: st.foreign,
                invalid_before_peer: st.invalid_before_peer,
                unauthenticated: st.unauthenticated,
                replayed: st.replayed,
                seal_exhausted: st.seal_exhausted,
                app_foreign: s.app_foreign,
                malformed: t.malformed(),
                other_session: t.receiver.other_session,
                stale: t.receiver.stale,
                late: t.receiver.late,
                inconsistent: t.receiver.inconsistent,
                oversized: t.receiver.oversized,
                corrupt: t.receiver.corrupt,
                evicted_blocks: t.receiver.evicted,
            },
            corrupt_rebuilt: t.receiver.corrupt_rebuilt,
            surplus_symbols: t.receiver.duplicates,
            blocks_held: ep.blocks_held(),
            restarts: st.restarts,
            recv_errors: s.recv_errors,
            channel,
        }
    }
}

/// Extra bytes on the link over sending the application's datagrams bare,
/// IPv4 and UDP headers counted on both.
fn overhead(app_bytes: u64, app_n: u64, wire_bytes: u64, wire_n: u64) -> f64 {
    let hdr = IP_UDP_OVERHEAD as u64;
    let bare = app_bytes + hdr * app_n;
    if bare == 0 {
        return 0.0;
    }
    (wire_bytes + hdr * wire_n) as f64 / bare as f64 - 1.0
}

fn residual(lost: u64, delivered: u64) -> f64 {
    if lost + delivered == 0 {
        0.0
    } else {
        lost as f64 / (lost + delivered) as f64
    }
}

/// The unspecified address of `peer`'s family, any port.
fn any_addr(peer: SocketAddr) -> SocketAddr {
    if peer.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    }
}

/// Reports come every 10 ms while data flows; this long without one
/// while we send means the far side stopped hearing us.
const FAR_SIDE_SILENT: Duration = Duration::from_secs(2);
/// Receive buffers per system call (quinn-udp's `recvmmsg` batch).
const RECV_BATCH: usize = 32;

#[cfg(test)]
mod tests;
