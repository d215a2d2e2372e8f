//! [`Session`]: the sans-IO machine behind one session socket, with any
//! number of peers and, per peer, any number of channels.
//!
//! **Peers.** [`Session::connect`] sends a Hello and retries it with
//! exponential backoff (500 ms, doubling) until a HelloAck comes or
//! [`SessionConfig::handshake_timeout`] passes ([`SessionEvent::PeerFailed`]).
//! A Hello from an unknown address is answered (when
//! [`SessionConfig::accept`]) with a shorter HelloAck and nothing more until
//! the address proves it received it (see [`wire`]: QUIC's
//! address validation). Two sessions that connect to each other at once
//! make one handshake: the side with the smaller connection id answers the
//! other's Hello as if it had not dialed ([`Session::dialed`] says which
//! side's Hello won; TCP's simultaneous open makes one connection of two
//! SYNs likewise, RFC 9293 §3.5). Half-open handshakes are bounded
//! ([`SessionConfig::max_pending`]) and expire, and peers are bounded
//! ([`SessionConfig::max_peers`]). With a key, every datagram and frame is
//! sealed ([`tunnel::seal`](crate::tunnel::seal)) and anything that fails
//! to open is counted and dropped before it is parsed, so only a holder of
//! the key reaches a peer slot, a channel or the application.
//!
//! **Channels.** [`Session::open_channel`] names a channel and states its
//! [`Qos`]; the peer learns the name from an Open (repeated until
//! acknowledged) and delivers what arrives under the channel it opened
//! with the same name, or, if it opened none, under a new one it reports
//! with [`SessionEvent::ChannelOpened`]. Each channel runs one
//! [`Mechanism`] at a time ([`Session::set_mechanism`]; the strategy
//! selector drives it); after a switch the old mechanism drains (its last
//! repairs and copies still go out and are still taken) for
//! [`SessionConfig::drain`], and the receiver drops second copies by
//! message number, so a switch neither loses what the old mechanism would
//! have delivered nor duplicates anything; an ordered channel is delivered
//! in order across it. Reliable channels travel as stream frames
//! ([`Transport::TcpFrame`]) on stream 0, the connection the driver keeps
//! to the peer. A striped channel ([`Mechanism::Striped`], Leigh et al.
//! §4.3) spreads its frames over streams 0 to `n - 1`, each its own
//! connection, to whichever holds least unsent (`Session::stripe_mask`
//! says which it may use); each stream has its own replay window under a
//! key, and the receiver puts an ordered channel's messages back in order
//! by message number. A Blast channel ([`Mechanism::Blast`], Reliable
//! Blast UDP) sends each message as one transfer: data as datagrams, its
//! control as
//! [control frames](wire::ControlFrame) on that stream (see
//! [`super::blast`]); a replaced Blast drains until its transfers are done,
//! and comes back if the channel returns to Blast before then.
//!
//! **Monitor and selector.** Every datagram carries the per-peer packet
//! number and send time the resource monitor ([`super::monitor`]) reads;
//! reports go back every 100 ms and probes keep an idle path measured.
//! Every [`SessionConfig::control_interval`] each channel not pinned by
//! [`Session::set_mechanism`] has its [`AdaptiveController`] look at the
//! path estimate and the channel's load, and moves to what it picks.
//!
//! **Closed loop.** With each monitor report the receiver also sends a
//! ChannelReport: per channel, the highest message number seen and the
//! messages delivered. The sender turns their increments into the loss
//! after recovery each controller measured since its last look (messages
//! still being rebuilt when a report leaves count as lost until the next
//! one), so a mechanism that misses its target while predicted to meet it
//! is moved off.
//!
//! **DiffServ** (the paper's QoS provisioner): each channel's datagrams,
//! and the feedback about it, carry the code point its [`Qos`] gives
//! ([`Session::poll_transmit_marked`]); control datagrams and stream frames
//! go unmarked.
//!
//! **Not yet** (issue 16, later steps): a peer that moves to another
//! address (its packets are dropped as foreign; QUIC would migrate).
//! A striped channel's frames on stream 0 are reported as delivered by
//! [`MechanismKind::Reliable`]: the receiver cannot tell them from a
//! reliable channel's there.

use std::borrow::Cow;
use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;

use super::channel::{
    MechInst, MechRefused, Numbering, Reorder, Seen, SeenWindow, Start, split_msg,
};
use super::monitor::{MonitorConfig, MonitorReport, ReceiveMonitor, SendMonitor, wire_ts};
use super::select::{AdaptiveController, ControllerConfig, Measured, Policy, Traffic, is_bulk};
use super::wire::{self, Body, ChannelCounts, ChannelReports, Frame, Kind};
use super::{CapacityProfile, Dscp, Mechanism, MechanismKind, PathEstimate, Qos, Reliability};
use crate::control::gilbert::decay_weight;
use crate::tunnel::TunnelKey;
use crate::tunnel::seal::{self, Opener, Sealer};
use crate::{
    Bitrate, FRAME_PREFIX, Instant, MAX_STREAMS, Machine, StreamMachine, Transmit, Transport,
};

/// How a [`Session`] behaves. [`SessionConfig::new`] gives the defaults.
#[derive(Clone, Debug)]
pub struct SessionConfig {
    /// Seal every datagram and frame with this pre-shared key; peers
    /// without it get nothing through.
    pub key: Option<TunnelKey>,
    /// Seed of the connection ids (the driver passes OS randomness; the
    /// simulator a seeded value).
    pub seed: u64,
    /// Answer Hellos from unknown addresses.
    pub accept: bool,
    /// Most peers at once, handshakes included.
    pub max_peers: usize,
    /// Most half-open handshakes (answered Hellos not yet proven).
    pub max_pending: usize,
    /// Most channels per peer and direction.
    pub max_channels: usize,
    /// Give up a handshake (or forget an unproven address) after this.
    pub handshake_timeout: Duration,
    /// Forget a peer silent this long.
    pub idle_timeout: Duration,
    /// Largest datagram (the path MTU less IP and UDP headers).
    pub max_datagram: usize,
    /// How long a mechanism replaced on a channel keeps sending and taking
    /// its last packets.
    pub drain: Duration,
    /// Most messages an ordered channel holds back waiting for a gap.
    pub reorder_limit: usize,
    /// Interval of Open retries.
    pub open_retry: Duration,
    /// The resource monitor's settings.
    pub monitor: MonitorConfig,
    /// The selector's policy for channels not pinned to a mechanism
    /// ([`Session::set_mechanism`] pins); `None`: every channel stays on
    /// [`initial_mechanism`] until set.
    pub policy: Option<Policy>,
    /// The adaptive controller's hysteresis and provisioning (its
    /// [`Provision::max_streams`](super::Provision::max_streams) is held at
    /// [`MAX_STREAMS`] at most).
    pub controller: ControllerConfig,
    /// How often the controller looks at each channel (Leigh et al.'s
    /// adaptive controller; the selector runs at most once a second per
    /// channel within it, see [`ControllerConfig::reselect`]).
    pub control_interval: Duration,
    /// Most bytes of stream frames (length prefixes included) a peer's
    /// stream may hold unsent in the driver, for a driver that says what
    /// it has sent ([`StreamMachine::handle_stream_sent`]); the rest wait
    /// in the session, per channel, and leave by their channels' capacity
    /// profiles, each profile with twice the share of the stream of the
    /// one ranked below it (interactive most, scavenger least; channels of
    /// one profile in turn). So a reliable channel's edit
    /// waits behind at most this much of a bulk transfer, not behind all
    /// of it. `None` (the default, for a driver that does not report):
    /// every frame goes to the driver at once, in the order sent.
    pub stream_window: Option<usize>,
    /// Largest message a peer's Blast transfer may bring (default 16 MiB,
    /// as the tokio driver's largest stream frame): a Start for more is
    /// refused, and the peer's transfer fails.
    pub max_blast: u64,
    /// Most payload bytes a peer's Blast transfers under way may hold here
    /// at once, over all its channels (default 64 MiB): the receive
    /// buffers are allocated as a Start says, so this bounds what one peer
    /// can make this side hold.
    pub blast_memory: u64,
}

impl SessionConfig {
    /// Defaults: accept peers, 64 peers, 16 pending handshakes, 256
    /// channels, 5 s handshake, 30 s idle, 1472-byte datagrams, 2 s drain,
    /// 4096 held messages, Opens retried every 250 ms, the monitor's
    /// defaults, the model-based selector looking every 100 ms.
    pub fn new(seed: u64) -> Self {
        Self {
            key: None,
            seed,
            accept: true,
            max_peers: 64,
            max_pending: 16,
            max_channels: 256,
            handshake_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(30),
            max_datagram: 1472,
            drain: Duration::from_secs(2),
            reorder_limit: 4096,
            open_retry: Duration::from_millis(250),
            monitor: MonitorConfig::default(),
            policy: Some(Policy::Model),
            controller: ControllerConfig::default(),
            control_interval: Duration::from_millis(100),
            stream_window: None,
            max_blast: 16 << 20,
            blast_memory: 64 << 20,
        }
    }

    /// [`max_channels`](Self::max_channels), within what the wire numbers.
    fn channel_limit(&self) -> usize {
        self.max_channels.min(usize::from(wire::MAX_CHANNEL) + 1)
    }

    /// Bytes a mechanism's packet may take.
    fn room(&self) -> usize {
        let seal = if self.key.is_some() {
            seal::OVERHEAD
        } else {
            0
        };
        self.max_datagram
            .saturating_sub(wire::HEADER_LEN + 3 + seal)
    }
}

/// A peer, named by this side's connection id for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PeerId(pub u32);

/// One of this side's channels to a peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ChannelId {
    /// The peer.
    pub peer: PeerId,
    /// Its number (this side's).
    pub id: u16,
}

/// What the session tells its application.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum SessionEvent {
    /// A handshake completed.
    PeerConnected {
        /// The peer.
        peer: PeerId,
        /// Its address.
        addr: SocketAddr,
    },
    /// A handshake we started got no answer.
    PeerFailed {
        /// The peer it would have been.
        peer: PeerId,
        /// Where it was sent.
        addr: SocketAddr,
    },
    /// The peer closed, or fell silent for the idle timeout.
    PeerGone {
        /// The peer.
        peer: PeerId,
    },
    /// The peer sends on a channel this side had not opened; it is opened
    /// here (best effort, plain) under `channel`.
    ChannelOpened {
        /// This side's channel.
        channel: ChannelId,
        /// Its name.
        name: String,
    },
    /// A message.
    Message {
        /// The channel.
        channel: ChannelId,
        /// The application's bytes.
        payload: Bytes,
        /// The mechanism that delivered it.
        via: MechanismKind,
        /// Rebuilt by the mechanism's redundancy rather than received.
        recovered: bool,
    },
    /// Whether a channel's QoS is predicted met changed (the adaptive
    /// controller's verdict on the measured path, corrected by the loss
    /// the peer reported; see [`Session::meets`]). The first verdict after
    /// a channel opens comes as one of these too.
    QosMet {
        /// The channel.
        channel: ChannelId,
        /// Met now.
        met: bool,
    },
    /// A channel's mechanism changed.
    MechanismChanged {
        /// The channel.
        channel: ChannelId,
        /// What it was.
        from: Mechanism,
        /// What it is.
        to: Mechanism,
    },
}

/// Why a command was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// No such peer.
    #[error("no such peer")]
    NoPeer,
    /// No such channel.
    #[error("no such channel")]
    NoChannel,
    /// The peer limit is reached.
    #[error("the session has its maximum number of peers")]
    TooManyPeers,
    /// The channel limit is reached.
    #[error("the peer has its maximum number of channels")]
    TooManyChannels,
    /// A channel by that name exists.
    #[error("a channel named {0:?} exists")]
    NameTaken(String),
    /// The name is empty or longer than 64 bytes.
    #[error("a channel name must have 1 to 64 bytes")]
    BadName,
    /// The QoS is not usable.
    #[error("{0}")]
    Qos(String),
    /// The mechanism cannot carry this channel yet.
    #[error("{0} cannot run in a session yet")]
    Unsupported(String),
    /// The mechanism refused the message.
    #[error("message of {len} bytes is over the {max}-byte limit of the channel's mechanism")]
    TooLarge {
        /// Its size.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The mechanism's queue is full.
    #[error("the channel's queue is full")]
    Full,
}

/// Counters: every datagram or frame not taken is in exactly one of the
/// dropped fields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionStats {
    /// Datagrams sent.
    pub sent: u64,
    /// Their bytes.
    pub sent_bytes: u64,
    /// Datagrams received (all of them).
    pub received: u64,
    /// Their bytes.
    pub received_bytes: u64,
    /// Dropped: failed to open under the key (or replayed).
    pub unauthenticated: u64,
    /// Dropped: not a session datagram, or malformed.
    pub malformed: u64,
    /// Dropped: from an address or with a connection id we do not know,
    /// or not valid in the peer's state.
    pub foreign: u64,
    /// Hellos from a peer we were connecting to at the same time, which
    /// this side answered (the other side's count of them is in
    /// `foreign`).
    pub simultaneous_opens: u64,
    /// Dropped: a Hello refused (not accepting, or limits reached).
    pub refused: u64,
    /// Dropped: data for a channel the peer never opened, or over the
    /// channel limit.
    pub unknown_channel: u64,
    /// Dropped: a mechanism this code does not run.
    pub unknown_mechanism: u64,
    /// Messages dropped as second copies.
    pub duplicates: u64,
    /// Messages dropped as older than the duplicate window.
    pub too_old: u64,
    /// Messages an ordered channel gave up waiting for.
    pub skipped: u64,
    /// Frames received.
    pub frames: u64,
    /// Frames dropped (malformed, unauthenticated, unknown peer).
    pub bad_frames: u64,
    /// Channel reports whose counts went backwards or past what was sent.
    pub bad_reports: u64,
}

/// Per-channel counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ChannelStats {
    /// Messages the application sent.
    pub sent: u64,
    /// Their bytes.
    pub sent_bytes: u64,
    /// Bytes of this channel's datagrams and frames on the wire (both
    /// directions' mechanism packets this side sent, headers included).
    pub wire_bytes: u64,
    /// Messages delivered to the application.
    pub delivered: u64,
    /// ... of which rebuilt by redundancy.
    pub recovered: u64,
    /// Mechanism switches.
    pub switches: u64,
    /// Messages given up by their mechanism: a Blast transfer the peer
    /// refused, or one that failed its tries
    /// ([`blast::ATTEMPTS`](super::blast::ATTEMPTS)).
    pub failed: u64,
}

#[derive(Debug)]
struct OutChannel {
    name: String,
    qos: Qos,
    mech: Mechanism,
    inst: Option<MechInst>,
    /// Replaced mechanisms still draining, until the instant given.
    draining: Vec<(MechInst, Instant)>,
    /// Where the next XOR or Block instance starts its numbers.
    numbering: Numbering,
    next_msg: u32,
    open_acked: bool,
    next_open: Instant,
    stats: ChannelStats,
    /// The adaptive controller; `None` when pinned or without a policy.
    controller: Option<AdaptiveController>,
    /// What was sent since the last control tick.
    tick: Sent,
    /// When the application last sent on the channel.
    last_send: Option<Instant>,
    /// The channel's load, smoothed over the control ticks.
    load: Load,
    /// The peer's last ChannelReport for this channel (highest, delivered).
    fb_last: Option<(u32, u32)>,
    /// Messages the reports covered and of those delivered, since the
    /// last control tick.
    fb_acc: (u64, u64),
    /// The same since the channel opened.
    fb_total: (u64, u64),
    /// Opened here only because the peer sent on it
    /// ([`SessionEvent::ChannelOpened`]); the application may still open it
    /// by name with a QoS of its own.
    implicit: bool,
    /// The earliest of its instances' timers, kept by
    /// [`refresh_timer`](Self::refresh_timer) (see [`Session::timers`]).
    timer: Option<Instant>,
}

impl OutChannel {
    fn new(
        name: String,
        qos: Qos,
        mech: Mechanism,
        inst: Option<MechInst>,
        controller: Option<AdaptiveController>,
        now: Instant,
    ) -> Self {
        Self {
            name,
            qos,
            mech,
            inst,
            draining: Vec::new(),
            numbering: Numbering::default(),
            next_msg: 0,
            open_acked: false,
            next_open: now,
            stats: ChannelStats::default(),
            controller,
            tick: Sent::default(),
            last_send: None,
            load: Load::default(),
            fb_last: None,
            fb_acc: (0, 0),
            fb_total: (0, 0),
            implicit: false,
            timer: None,
        }
        .with_timer()
    }

    fn with_timer(mut self) -> Self {
        self.refresh_timer();
        self
    }

    /// The earliest timer of its instance and of those draining.
    fn next_timer(&self) -> Option<Instant> {
        self.inst
            .iter()
            .filter_map(MechInst::poll_timeout)
            .chain(self.draining.iter().map(|(_, until)| *until))
            .chain(self.draining.iter().filter_map(|(i, _)| i.poll_timeout()))
            .min()
    }

    /// Recomputes [`timer`](Self::timer) after its instances changed.
    fn refresh_timer(&mut self) {
        self.timer = self.next_timer();
    }

    /// A capacity-seeking channel on the stream (no datagram instance).
    fn bulk_on_stream(&self) -> bool {
        self.inst.is_none() && is_bulk(&self.qos)
    }
}

/// A channel the application has not sent on for this long keeps its
/// mechanism: the controller is not run for it.
const IDLE_CHANNEL: Duration = Duration::from_secs(1);

/// Half-life of a channel's smoothed load ([`Load`]).
const LOAD_HALF_LIFE: Duration = Duration::from_secs(1);

/// What a channel sent in one control tick: the application's messages
/// and their bytes, and the datagrams put on the wire and theirs.
#[derive(Clone, Copy, Debug, Default)]
struct Sent {
    msgs: u64,
    bytes: u64,
    dgrams: u64,
    dgram_bytes: u64,
}

/// A channel's load as decayed sums (half-life [`LOAD_HALF_LIFE`]) of what
/// it sent per control tick and of the ticks' seconds, so each rate is an
/// unbiased time-weighted mean from the first tick on.
#[derive(Clone, Copy, Debug, Default)]
struct Load {
    msgs: f64,
    bytes: f64,
    dgrams: f64,
    dgram_bytes: f64,
    secs: f64,
}

impl Load {
    /// One tick of `secs` in which the channel sent `t`.
    fn tick(&mut self, secs: f64, t: Sent) {
        let w = decay_weight(Duration::from_secs_f64(secs), LOAD_HALF_LIFE);
        self.msgs = self.msgs * w + t.msgs as f64;
        self.bytes = self.bytes * w + t.bytes as f64;
        self.dgrams = self.dgrams * w + t.dgrams as f64;
        self.dgram_bytes = self.dgram_bytes * w + t.dgram_bytes as f64;
        self.secs = self.secs * w + secs;
    }

    /// Per second: messages, datagrams, datagram bytes.
    fn rates(&self) -> (f64, f64, f64) {
        let s = self.secs.max(1e-9);
        (self.msgs / s, self.dgrams / s, self.dgram_bytes / s)
    }

    /// Datagram bytes per second the channel would send without
    /// redundancy: a datagram of its mean size per message (0 for a
    /// channel on the stream).
    fn base_rate(&self) -> f64 {
        if self.dgrams > 0.0 {
            self.msgs * (self.dgram_bytes / self.dgrams) / self.secs.max(1e-9)
        } else {
            0.0
        }
    }

    /// Mean message size, bytes (0 before any message).
    fn msg_size(&self) -> usize {
        if self.msgs > 0.0 {
            (self.bytes / self.msgs).round() as usize
        } else {
            0
        }
    }
}

#[derive(Debug)]
struct InChannel {
    /// This side's channel the messages go to.
    local: u16,
    insts: BTreeMap<MechanismKind, (MechInst, Instant)>,
    seen: SeenWindow,
    reorder: Option<Reorder>,
    /// Highest message number seen and messages delivered (both
    /// wrapping), for the ChannelReport; `dirty` when they moved since the
    /// last one.
    highest: u32,
    delivered: u32,
    dirty: bool,
    /// The earliest of its instances' timers and drain deadlines, kept by
    /// [`refresh_timer`](Self::refresh_timer).
    timer: Option<Instant>,
}

impl InChannel {
    fn next_timer(&self) -> Option<Instant> {
        self.insts
            .values()
            .flat_map(|(i, until)| i.poll_timeout().into_iter().chain([*until]))
            .min()
    }

    fn refresh_timer(&mut self) {
        self.timer = self.next_timer();
    }
}

#[derive(Debug, PartialEq, Eq)]
enum State {
    /// We sent Hellos.
    Connecting {
        next_hello: Instant,
        backoff: Duration,
        deadline: Instant,
    },
    /// We answered a Hello; the address is not proven.
    Validating {
        deadline: Instant,
    },
    Established,
}

#[derive(Debug)]
struct Peer {
    addr: SocketAddr,
    local_cid: u32,
    remote_cid: u32,
    state: State,
    /// Our Hello made the handshake (we connected, and did not answer the
    /// peer's own Hello instead: [`Session::on_hello`]).
    dialed: bool,
    next_seq: u32,
    last_heard: Instant,
    opener: Option<Opener>,
    /// Under a key, the opener of each stream's frames (by stream
    /// number), made when the stream's first frame comes: frames are
    /// sealed in the order they go onto their stream, so each stream's
    /// window sees its counters in order, however the streams interleave.
    frame_openers: BTreeMap<u8, Opener>,
    /// Under a key, the opener of bind frames (the first frame on a
    /// connection the driver has not bound yet), kept apart from the
    /// streams' so a replayed bind is refused whatever stream it names.
    bind_opener: Option<Opener>,
    /// Streams the peer has sent a frame on, a bit per stream number: on
    /// the side that did not dial, the only streams a striped channel
    /// may use (its driver holds frames for any other until the peer's
    /// connection binds).
    streams_heard: u8,
    /// A bit per stream number: on the side that did not dial, the
    /// streams it asked the peer to open ([`Session::stripe_mask`]); on
    /// the side that dialed, those it answered (once each, so a peer's
    /// repeated asks cost it a frame each and us nothing).
    streams_asked: u8,
    out: BTreeMap<u16, OutChannel>,
    by_name: BTreeMap<String, u16>,
    incoming: BTreeMap<u16, InChannel>,
    rx_mon: ReceiveMonitor,
    tx_mon: SendMonitor,
    next_control: Instant,
    /// A Block sender started before the monitor's fit rested on
    /// [`MonitorConfig::min_samples`](super::monitor::MonitorConfig::min_samples)
    /// packets: every Block sender of the peer is offered the fit when it
    /// does (`MechInst::late_prior`).
    late_prior: bool,
    /// Reliable channels' frames waiting for room on the stream
    /// ([`SessionConfig::stream_window`]).
    stream: StreamQueue,
    /// Data and frames for peer channels whose Open has not come yet
    /// (it was lost, or the stream outran it), bounded by [`EARLY`].
    early: VecDeque<Early>,
}

impl Peer {
    /// Holds what came for a peer channel not opened yet, up to [`EARLY`];
    /// past that it is counted in `stats` and dropped.
    fn hold_early(&mut self, e: Early, stats: &mut SessionStats) {
        if self.early.len() >= EARLY {
            stats.unknown_channel += 1;
        } else {
            self.early.push_back(e);
        }
    }
}

/// The [`SessionConfig::stream_window`] our drivers (the simulator's and
/// `groupwire-tokio`'s) set: 16 KiB, the unsent bytes at which HTTP/2
/// deployments set Linux's `TCP_NOTSENT_LOWAT` so that a priority stream
/// waits behind little of a bulk one. One bulk frame of 16 KiB still
/// leaves alone; what waits behind it is at most one frame.
pub const DEFAULT_STREAM_WINDOW: usize = 16 * 1024;

/// A peer's stream frames not yet handed to the driver, and the bytes the
/// driver holds unsent ([`SessionConfig::stream_window`]).
#[derive(Debug, Default)]
struct StreamQueue {
    /// Per channel, by its rank ([`stream_rank`]) and id, in the order
    /// sent: message number and payload (sealed only when it leaves, so
    /// sealed frames keep the stream's order).
    waiting: BTreeMap<(usize, u16), VecDeque<(u32, Bytes)>>,
    /// Their payload bytes.
    waiting_bytes: usize,
    /// Bytes handed to the driver and not yet reported sent, per stream
    /// number.
    unsent: [usize; MAX_STREAMS as usize],
    /// A striped channel's next stream, without a stream window (frames
    /// go in turn).
    turn: u8,
    /// Datagram channels send and no capacity is known to pace bulk
    /// frames by ([`StreamQueue::pace_at`]): striped channels keep to
    /// stream 0 ([`Session::stripe_mask`]).
    unpaced: bool,
    /// The channel that sent last, for turns within a profile.
    last: Option<u16>,
    /// Start-time fair queueing over the ranks ([`stream_rank`]): each
    /// rank's virtual time (bytes sent over its weight), and the virtual
    /// time of the last frame sent.
    vtime: [f64; RANKS],
    clock: f64,
    /// The bulk ranks' pacer ([`BulkPacer`]), once the monitor knows the
    /// path's capacity.
    pace: Option<BulkPacer>,
    /// Set when [`Session::release_frames`] last stopped with bulk frames
    /// waiting for the pacer alone: when they may go.
    held_until: Option<Instant>,
}

/// Paces the frames of the bulk ranks (capacity-seeking and scavenger
/// channels on the stream) at what the path's capacity leaves after the
/// datagram channels, so a bulk transfer's TCP never holds more of the
/// bottleneck's queue than one frame and the window: TCP can only send
/// what it was handed. Without it, every transfer's slow start filled the
/// drop-tail queue the real-time channels share (the tele-immersion
/// scenario's state channel: late or lost for a window or two at every
/// dataset), and the loss that caused them was ours, not the path's.
/// A token bucket: a frame leaves while the tokens are not negative and
/// takes its bytes from them; they refill at
/// [`rate`](Self::rate) up to one window.
#[derive(Clone, Copy, Debug)]
struct BulkPacer {
    /// Bytes per second.
    rate: f64,
    tokens: f64,
    at: Instant,
}

/// Share of the capacity left by the datagram channels that bulk frames
/// are paced at ([`BulkPacer`]): the rest covers TCP's headers and
/// retransmissions and the estimate's error.
const BULK_PACE_SHARE: f64 = 0.85;

/// Least share of the capacity bulk frames are paced at, however much
/// the datagram channels send: bulk still moves.
const BULK_PACE_FLOOR: f64 = 0.05;

/// The first rank [`BulkPacer`] paces ([`stream_rank`]).
const BULK_RANK: usize = 4;

impl BulkPacer {
    /// Refills to `now` (up to `burst` bytes).
    fn refill(&mut self, now: Instant, burst: f64) {
        let secs = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + secs * self.rate).min(burst);
        self.at = now;
    }

    /// When the tokens are back at zero.
    fn ready_at(&self) -> Instant {
        if self.tokens >= 0.0 || self.rate <= 0.0 {
            return self.at;
        }
        // Whole microseconds, rounded up: a wake-up that refills a
        // rounding error short of zero would come again at once.
        let us = (-self.tokens / self.rate * 1e6).ceil().max(1.0);
        self.at.saturating_add(Duration::from_micros(us as u64))
    }
}

impl StreamQueue {
    /// Sets the bulk pacer's rate at a control tick ([`BulkPacer`]): the
    /// path's capacity (the monitor's estimate) less what the `channels`
    /// put in datagrams, times [`BULK_PACE_SHARE`], at least
    /// [`BULK_PACE_FLOOR`] of the capacity. No pacer without a capacity
    /// or while no channel sends datagrams (then bulk has the path to
    /// itself, and TCP finds its rate).
    fn pace_at<'a>(
        &mut self,
        now: Instant,
        estimate: &PathEstimate,
        channels: impl Iterator<Item = &'a OutChannel>,
        window: f64,
    ) {
        let dgram_rate: f64 = channels.map(|c| c.load.rates().2).sum();
        let cap = estimate
            .capacity
            .map(|c| c.as_bps() as f64 / 8.0)
            .filter(|_| dgram_rate > 0.0);
        self.unpaced = cap.is_none() && dgram_rate > 0.0;
        self.pace = cap.map(|cap| {
            let rate = ((cap - dgram_rate) * BULK_PACE_SHARE).max(cap * BULK_PACE_FLOOR);
            let mut pc = self.pace.unwrap_or(BulkPacer {
                rate,
                tokens: 0.0,
                at: now,
            });
            pc.refill(now, window);
            pc.rate = rate;
            pc
        });
    }
}

/// Ranks of [`stream_rank`].
const RANKS: usize = 6;

/// A rank's share of the stream when every rank has frames waiting:
/// twice the next rank's, so a profile ranked above another gets most of
/// the stream and the one below still moves (strict priority let a camera
/// put on the stream starve every edit behind it).
fn stream_weight(rank: usize) -> f64 {
    f64::from(1u32 << (RANKS - 1 - rank.min(RANKS - 1)))
}

/// The streams a channel on `m` spreads its frames over: a striped
/// channel's count (at most [`MAX_STREAMS`]), else 1 (stream 0).
fn stripes(m: &Mechanism) -> u8 {
    match *m {
        Mechanism::Striped { streams } => streams.clamp(1, MAX_STREAMS),
        _ => 1,
    }
}

/// The order in which channels' frames take the stream: lower first.
fn stream_rank(profile: CapacityProfile) -> usize {
    match profile {
        CapacityProfile::Interactive => 0,
        CapacityProfile::NonInteractive => 1,
        CapacityProfile::Streaming => 2,
        CapacityProfile::Default => 3,
        CapacityProfile::CapacitySeeking => 4,
        CapacityProfile::Scavenger => 5,
    }
}

/// What arrived before its channel's Open.
#[derive(Debug)]
enum Early {
    Datagram {
        channel: u16,
        mechanism: u8,
        payload: Bytes,
    },
    Frame {
        channel: u16,
        msg: u32,
        payload: Bytes,
    },
    Control {
        channel: u16,
        mechanism: u8,
        payload: Bytes,
    },
}

/// Most datagrams and frames held per peer for channels not yet opened.
pub const EARLY: usize = 256;

/// The session machine. See the [module docs](self).
#[derive(Debug)]
pub struct Session {
    cfg: SessionConfig,
    peers: BTreeMap<u32, Peer>,
    by_addr: BTreeMap<SocketAddr, u32>,
    next_id: u64,
    sealer: Option<Sealer>,
    /// What to send, each datagram with its channel's DiffServ code point
    /// (`None`: unmarked, the socket's default).
    transmits: VecDeque<(Transmit, Option<Dscp>)>,
    events: VecDeque<SessionEvent>,
    stats: SessionStats,
    buf: Vec<u8>,
    /// The latest `now` any input or command gave.
    now: Instant,
}

impl Session {
    /// A session with `cfg`.
    pub fn new(mut cfg: SessionConfig) -> Self {
        // Stream numbers stop at the machine contract's bound.
        cfg.controller.provision.max_streams =
            cfg.controller.provision.max_streams.min(MAX_STREAMS);
        let sealer = cfg
            .key
            .as_ref()
            .map(|k| Sealer::new(&k.psk, k.salt, k.cipher));
        Self {
            cfg,
            peers: BTreeMap::new(),
            by_addr: BTreeMap::new(),
            next_id: 0,
            sealer,
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            stats: SessionStats::default(),
            buf: Vec::new(),
            now: Instant::ZERO,
        }
    }

    /// Counters.
    pub fn stats(&self) -> SessionStats {
        self.stats
    }

    /// A channel's counters.
    pub fn channel_stats(&self, ch: ChannelId) -> Option<ChannelStats> {
        self.peers.get(&ch.peer.0)?.out.get(&ch.id).map(|c| {
            let live = c.inst.iter().chain(c.draining.iter().map(|(i, _)| i));
            ChannelStats {
                failed: c.stats.failed + live.map(MechInst::failed).sum::<u64>(),
                ..c.stats
            }
        })
    }

    /// A channel's mechanism.
    pub fn mechanism(&self, ch: ChannelId) -> Option<Mechanism> {
        self.peers.get(&ch.peer.0)?.out.get(&ch.id).map(|c| c.mech)
    }

    /// The peer's address, once known.
    pub fn peer_addr(&self, peer: PeerId) -> Option<SocketAddr> {
        self.peers.get(&peer.0).map(|p| p.addr)
    }

    /// The peer at `addr` (connected, connecting or validating).
    pub fn peer_at(&self, addr: SocketAddr) -> Option<PeerId> {
        self.by_addr.get(&addr).map(|&id| PeerId(id))
    }

    /// A channel's name.
    pub fn channel_name(&self, ch: ChannelId) -> Option<&str> {
        let p = self.peers.get(&ch.peer.0)?;
        p.out.get(&ch.id).map(|c| c.name.as_str())
    }

    /// Whether this side's Hello made the handshake with `peer`: it
    /// [`connect`](Self::connect)ed, and (when both sides connected at
    /// once) was not the one to answer. A driver opens the stream
    /// connection from this side then, and waits for the peer's otherwise.
    pub fn dialed(&self, peer: PeerId) -> bool {
        self.peers.get(&peer.0).is_some_and(|p| p.dialed)
    }

    /// Whether the handshake with `peer` is complete.
    pub fn is_connected(&self, peer: PeerId) -> bool {
        self.peers
            .get(&peer.0)
            .is_some_and(|p| p.state == State::Established)
    }

    /// A fresh nonzero connection id not in use: BLAKE3 of the seed and a
    /// counter (ids must be unguessable to an off-path sender, so the
    /// seed must be secret in a real driver).
    fn fresh_cid(&mut self) -> u32 {
        loop {
            let mut h = blake3::Hasher::new();
            h.update(b"groupwire session cid");
            h.update(&self.cfg.seed.to_be_bytes());
            h.update(&self.next_id.to_be_bytes());
            self.next_id += 1;
            let b = h.finalize();
            let id = u32::from_be_bytes(b.as_bytes()[..4].try_into().expect("4 bytes"));
            if id != 0 && !self.peers.contains_key(&id) {
                return id;
            }
        }
    }

    /// Opens a session to `addr`; [`SessionEvent::PeerConnected`] or
    /// [`SessionEvent::PeerFailed`] follows. Channels may be opened at once;
    /// their Opens go out once the handshake completes.
    pub fn connect(&mut self, now: Instant, addr: SocketAddr) -> Result<PeerId, SessionError> {
        self.now = self.now.max(now);
        if let Some(&id) = self.by_addr.get(&addr) {
            return Ok(PeerId(id));
        }
        if self.peers.len() >= self.cfg.max_peers {
            return Err(SessionError::TooManyPeers);
        }
        let cid = self.fresh_cid();
        let state = State::Connecting {
            next_hello: now,
            backoff: Duration::from_millis(500),
            deadline: now.saturating_add(self.cfg.handshake_timeout),
        };
        let mut peer = self.new_peer(now, addr, cid, 0, state, self.new_opener());
        peer.dialed = true;
        self.peers.insert(cid, peer);
        self.by_addr.insert(addr, cid);
        self.handle_timeout(now);
        Ok(PeerId(cid))
    }

    fn new_peer(
        &self,
        now: Instant,
        addr: SocketAddr,
        local_cid: u32,
        remote_cid: u32,
        state: State,
        opener: Option<Opener>,
    ) -> Peer {
        Peer {
            addr,
            local_cid,
            remote_cid,
            state,
            dialed: false,
            next_seq: 0,
            last_heard: now,
            opener,
            frame_openers: BTreeMap::new(),
            bind_opener: self.new_opener(),
            streams_heard: 0,
            streams_asked: 0,
            rx_mon: ReceiveMonitor::new(self.cfg.monitor),
            tx_mon: SendMonitor::new(self.cfg.monitor),
            late_prior: false,
            stream: StreamQueue::default(),
            next_control: now,
            out: BTreeMap::new(),
            by_name: BTreeMap::new(),
            incoming: BTreeMap::new(),
            early: VecDeque::new(),
        }
    }

    fn new_opener(&self) -> Option<Opener> {
        self.cfg.key.as_ref().map(|k| Opener::new(&k.psk, k.salt))
    }

    /// Opens channel `name` to `peer` with `qos`, on the mechanism the
    /// QoS maps to by Leigh et al.'s heuristic until the selector says
    /// otherwise ([`initial_mechanism`]).
    pub fn open_channel(
        &mut self,
        now: Instant,
        peer: PeerId,
        name: &str,
        qos: Qos,
    ) -> Result<ChannelId, SessionError> {
        self.now = self.now.max(now);
        qos.validate().map_err(|e| SessionError::Qos(e.0))?;
        if name.is_empty() || name.len() > wire::MAX_NAME {
            return Err(SessionError::BadName);
        }
        let max = self.cfg.channel_limit();
        let (policy, ctl) = (self.cfg.policy, self.cfg.controller);
        let p = self.peers.get_mut(&peer.0).ok_or(SessionError::NoPeer)?;
        if let Some(&id) = p.by_name.get(name) {
            // The peer opened it first: take it over with this QoS.
            let c = p.out.get_mut(&id).expect("by_name names out channels");
            if !c.implicit {
                return Err(SessionError::NameTaken(name.into()));
            }
            c.implicit = false;
            c.qos = qos;
            if qos.preserve_order {
                for inc in p.incoming.values_mut().filter(|i| i.local == id) {
                    inc.reorder.get_or_insert_with(Reorder::default);
                }
            }
            let c = p.out.get_mut(&id).expect("by_name names out channels");
            c.controller = policy.map(|pol| AdaptiveController::new(ctl, pol, qos));
            let ch = ChannelId { peer, id };
            let (from, to) = (c.mech, initial_mechanism(&qos));
            if from != to {
                self.install(now, ch, to, None)?;
                self.events.push_back(SessionEvent::MechanismChanged {
                    channel: ch,
                    from,
                    to,
                });
            }
            self.handle_timeout(now);
            return Ok(ch);
        }
        if p.out.len() >= max {
            return Err(SessionError::TooManyChannels);
        }
        let id = p.out.len() as u16;
        p.by_name.insert(name.into(), id);
        p.out.insert(
            id,
            OutChannel::new(
                name.into(),
                qos,
                Mechanism::Plain,
                None,
                policy.map(|pol| AdaptiveController::new(ctl, pol, qos)),
                now,
            ),
        );
        let ch = ChannelId { peer, id };
        let m = initial_mechanism(&qos);
        self.install(now, ch, m, None)?;
        self.handle_timeout(now);
        Ok(ch)
    }

    /// Runs `ch` on `m` from the next message on; the old mechanism drains.
    /// Pins the channel: the selector no longer changes it.
    pub fn set_mechanism(
        &mut self,
        now: Instant,
        ch: ChannelId,
        m: Mechanism,
    ) -> Result<(), SessionError> {
        let from = self.mechanism(ch).ok_or(SessionError::NoChannel)?;
        self.out_mut(ch)?.controller = None;
        if from == m {
            return Ok(());
        }
        self.install(now, ch, m, None)?;
        let c = self.out_mut(ch)?;
        c.stats.switches += 1;
        self.events.push_back(SessionEvent::MechanismChanged {
            channel: ch,
            from,
            to: m,
        });
        Ok(())
    }

    /// Puts `ch` on `m`; `budget` is the most extra bytes per application
    /// byte a Block sender may spend ([`block_budget`]; `None`: its
    /// controller's own bound).
    fn install(
        &mut self,
        now: Instant,
        ch: ChannelId,
        m: Mechanism,
        budget: Option<f64>,
    ) -> Result<(), SessionError> {
        let room = self.cfg.room();
        let drain = self.cfg.drain;
        let addr = self.peer_addr(ch.peer).ok_or(SessionError::NoPeer)?;
        // What the monitor has measured of the path, once it rests on
        // enough packets to be reported (its own rule): a Block sender's
        // controller starts there, as the selector's prediction did.
        let min = self.cfg.monitor.min_samples;
        let fits = self
            .peers
            .get(&ch.peer.0)
            .map(|p| p.tx_mon.fits())
            .filter(|[slow, _]| slow.samples() >= min);
        if fits.is_none() && matches!(m, Mechanism::Block { .. }) {
            if let Some(p) = self.peers.get_mut(&ch.peer.0) {
                p.late_prior = true;
            }
        }
        // A Blast's first rate: the QoS's, else just below what the
        // monitor measured the path to carry (Leigh et al. §4.2: "just
        // below the available bandwidth"), else the default.
        let blast = matches!(m, Mechanism::Blast);
        let capacity = self
            .peers
            .get(&ch.peer.0)
            .filter(|_| blast)
            .and_then(|p| p.tx_mon.estimate().capacity);
        let c = self.out_mut(ch)?;
        let rate = c
            .qos
            .rate
            .or(capacity.map(|b| Bitrate::bps(b.as_bps() / 10 * 9)));
        if let Some(old) = &c.inst {
            old.hand_on(&mut c.numbering);
        }
        // A channel has one Blast at a time (the peer's receiving half
        // takes one transfer at a time, and its answers name only the
        // kind): one still draining its transfers comes back.
        let revived = c
            .draining
            .iter()
            .position(|(i, _)| blast && i.kind() == MechanismKind::Blast)
            .map(|at| c.draining.remove(at).0);
        let inst = match m {
            Mechanism::Blast if revived.is_some() => revived,
            Mechanism::Reliable => None,
            // Frames spread over the streams ([`Session::stripe_mask`]).
            Mechanism::Striped { streams } if (1..=MAX_STREAMS).contains(&streams) => None,
            Mechanism::Striped { .. } => {
                return Err(SessionError::Unsupported(m.to_string()));
            }
            _ => Some(
                MechInst::new(
                    &m,
                    &c.qos,
                    addr,
                    room,
                    &c.numbering,
                    Start {
                        fits,
                        max_overhead: budget,
                        id: u32::from(ch.id),
                        rate,
                    },
                )
                .ok_or_else(|| SessionError::Unsupported(m.to_string()))?,
            ),
        };
        if let Some(old) = c.inst.take() {
            c.draining.push((old, now.saturating_add(drain)));
        }
        c.inst = inst;
        c.mech = m;
        // What the handover queued leaves now (the pump also refreshes
        // the channel's timer).
        self.pump(now, ch.peer.0, Pump::Out(ch.id));
        Ok(())
    }

    fn out_mut(&mut self, ch: ChannelId) -> Result<&mut OutChannel, SessionError> {
        self.peers
            .get_mut(&ch.peer.0)
            .ok_or(SessionError::NoPeer)?
            .out
            .get_mut(&ch.id)
            .ok_or(SessionError::NoChannel)
    }

    /// Sends one message on `ch`. Never waits for loss recovery. Queueing:
    /// what it produces waits for [`poll_transmit`](Machine::poll_transmit).
    /// Messages sent before the handshake completes are dropped (counted
    /// as sent, never delivered): a channel is usable once
    /// [`SessionEvent::PeerConnected`] came.
    pub fn send(
        &mut self,
        now: Instant,
        ch: ChannelId,
        payload: &[u8],
    ) -> Result<(), SessionError> {
        self.now = self.now.max(now);
        let room = self.cfg.room();
        let c = self.out_mut(ch)?;
        let msg = c.next_msg;
        match c.inst.as_mut() {
            Some(inst) => inst.send(now, msg, payload, room).map_err(|e| match e {
                MechRefused::TooLarge { len, max } => SessionError::TooLarge { len, max },
                MechRefused::Full => SessionError::Full,
            })?,
            None => {
                // A stream frame's length prefix is 32 bits.
                let max = u32::MAX as usize - 64;
                if payload.len() > max {
                    return Err(SessionError::TooLarge {
                        len: payload.len(),
                        max,
                    });
                }
            }
        }
        c.next_msg = msg.wrapping_add(1);
        c.last_send = Some(now);
        c.tick.msgs += 1;
        c.tick.bytes += payload.len() as u64;
        c.stats.sent += 1;
        c.stats.sent_bytes += payload.len() as u64;
        if c.inst.is_none() {
            self.queue_frame(ch, msg, payload);
        }
        self.pump(now, ch.peer.0, Pump::Out(ch.id));
        Ok(())
    }

    /// A reliable channel's message onto the stream: at once without a
    /// [`SessionConfig::stream_window`], else behind the channel's earlier
    /// frames, when the window has room and its turn comes.
    fn queue_frame(&mut self, ch: ChannelId, msg: u32, payload: &[u8]) {
        if self.cfg.stream_window.is_none() {
            // Striped: the usable streams in turn.
            let mask = self.stripe_mask(ch);
            let Some(p) = self.peers.get_mut(&ch.peer.0) else {
                return;
            };
            let q = &mut p.stream;
            let stream = (0..MAX_STREAMS)
                .map(|i| (q.turn + i) % MAX_STREAMS)
                .find(|k| mask & (1 << k) != 0)
                .unwrap_or(0);
            if mask != 1 {
                q.turn = (stream + 1) % MAX_STREAMS;
            }
            self.send_frame(ch, msg, payload, stream);
            return;
        }
        let Some(p) = self.peers.get_mut(&ch.peer.0) else {
            return;
        };
        let rank = p
            .out
            .get(&ch.id)
            .map_or(RANKS - 1, |c| stream_rank(c.qos.profile));
        let q = &mut p.stream;
        // A rank that had nothing waiting starts at the clock: it saved no
        // share while idle.
        if q.waiting
            .range((rank, 0)..=(rank, u16::MAX))
            .next()
            .is_none()
        {
            q.vtime[rank] = q.vtime[rank].max(q.clock);
        }
        q.waiting
            .entry((rank, ch.id))
            .or_default()
            .push_back((msg, Bytes::copy_from_slice(payload)));
        q.waiting_bytes += payload.len();
        self.release_frames(ch.peer.0);
    }

    /// Hands the driver `cid`'s waiting frames while the window has room
    /// (a frame larger than the window goes alone): of the ranks with
    /// frames waiting, the one least served for its weight (start-time
    /// fair queueing, [`stream_weight`]; ties: the better rank), and
    /// within it the channels in turn.
    fn release_frames(&mut self, cid: u32) {
        let Some(window) = self.cfg.stream_window else {
            return;
        };
        let window = window.max(1);
        // The streams each waiting channel may use (1: stream 0 alone).
        let ids: Vec<u16> = self.peers.get(&cid).map_or_else(Vec::new, |p| {
            p.stream.waiting.keys().map(|&(_, id)| id).collect()
        });
        let mut masks = BTreeMap::new();
        for id in ids {
            let m = self.stripe_mask(ChannelId {
                peer: PeerId(cid),
                id,
            });
            masks.insert(id, m);
        }
        loop {
            let Some(p) = self.peers.get_mut(&cid) else {
                return;
            };
            let q = &mut p.stream;
            q.held_until = None;
            // The stream a channel's next frame would take: of those it
            // may use with room, the one holding least (ties: in turn).
            let (unsent, turn) = (q.unsent, q.turn);
            let pick = |id: &u16| {
                let mask = masks.get(id).copied().unwrap_or(1);
                (0..MAX_STREAMS)
                    .map(|i| (turn + i) % MAX_STREAMS)
                    .filter(|&k| mask & (1 << k) != 0 && unsent[usize::from(k)] < window)
                    .min_by_key(|&k| unsent[usize::from(k)])
            };
            if !q.waiting.keys().any(|(_, id)| pick(id).is_some()) {
                return;
            }
            // The bulk ranks wait for their pacer's tokens.
            let now = self.now;
            let paced = q.pace.as_mut().and_then(|pc| {
                pc.refill(now, window as f64);
                Some(pc.ready_at()).filter(|&t| t > now)
            });
            let Some(best) = q
                .waiting
                .keys()
                .filter(|(_, id)| pick(id).is_some())
                .map(|&(rank, _)| rank)
                .filter(|&r| !(paced.is_some() && r >= BULK_RANK))
                .min_by(|&a, &b| q.vtime[a].total_cmp(&q.vtime[b]).then(a.cmp(&b)))
            else {
                if q.waiting.keys().any(|&(r, _)| r >= BULK_RANK) {
                    q.held_until = paced;
                }
                return;
            };
            // The next channel of that rank after the last one served,
            // else the first.
            let after = q.last.map_or(0, |l| l.saturating_add(1));
            let mut next = q
                .waiting
                .range((best, after)..=(best, u16::MAX))
                .filter(|((_, id), _)| pick(id).is_some());
            let first = || {
                q.waiting
                    .range((best, 0)..=(best, u16::MAX))
                    .find(|((_, id), _)| pick(id).is_some())
            };
            let Some((&key, _)) = next.next().or_else(first) else {
                return;
            };
            let stream = pick(&key.1).unwrap_or(0);
            if masks.get(&key.1).is_some_and(|&m| m != 1) {
                q.turn = (stream + 1) % MAX_STREAMS;
            }
            let Some(fifo) = q.waiting.get_mut(&key) else {
                return;
            };
            let Some((msg, payload)) = fifo.pop_front() else {
                return;
            };
            if fifo.is_empty() {
                q.waiting.remove(&key);
            }
            let id = key.1;
            q.waiting_bytes -= payload.len();
            q.last = Some(id);
            q.clock = q.vtime[best];
            q.vtime[best] += payload.len() as f64 / stream_weight(best);
            if best >= BULK_RANK
                && let Some(pc) = q.pace.as_mut()
            {
                pc.tokens -= payload.len() as f64;
            }
            let ch = ChannelId {
                peer: PeerId(cid),
                id,
            };
            if let Some(len) = self.send_frame(ch, msg, &payload, stream) {
                if let Some(p) = self.peers.get_mut(&cid) {
                    p.stream.unsent[usize::from(stream)] += len;
                }
            }
        }
    }

    /// Payload bytes of reliable messages waiting in the session for room
    /// on `peer`'s stream ([`SessionConfig::stream_window`]): a driver
    /// that bounds what it queues counts these too.
    pub fn stream_waiting(&self, peer: PeerId) -> usize {
        self.peers
            .get(&peer.0)
            .map_or(0, |p| p.stream.waiting_bytes)
    }

    /// Payload bytes of `ch`'s messages waiting in the session for room on
    /// the stream ([`SessionConfig::stream_window`]): sent by the
    /// application, not yet on the wire.
    pub fn channel_waiting(&self, ch: ChannelId) -> usize {
        self.peers.get(&ch.peer.0).map_or(0, |p| {
            let q = p.stream.waiting.iter();
            q.filter(|((_, id), _)| *id == ch.id)
                .flat_map(|(_, fifo)| fifo.iter().map(|(_, b)| b.len()))
                .sum()
        })
    }

    /// Payload bytes of `ch`'s messages the application sent that the
    /// session still holds: waiting for room on the stream
    /// ([`channel_waiting`](Self::channel_waiting)), or queued for, or in,
    /// a Blast transfer. A driver that bounds what an application may
    /// queue counts these.
    pub fn queued(&self, ch: ChannelId) -> usize {
        let blast = self
            .peers
            .get(&ch.peer.0)
            .and_then(|p| p.out.get(&ch.id))
            .map_or(0, |c| {
                let insts = c.inst.iter().chain(c.draining.iter().map(|(i, _)| i));
                insts.map(MechInst::queued).sum()
            });
        self.channel_waiting(ch) + blast
    }

    /// Seals one frame for the driver; the bytes it takes on the stream,
    /// length prefix included (`None`: the peer is not established, and
    /// the frame is dropped).
    fn send_frame(&mut self, ch: ChannelId, msg: u32, payload: &[u8], stream: u8) -> Option<usize> {
        let (dst, bytes) = self.seal_frame(ch.peer, ch.id, msg, payload)?;
        Some(self.push_frame(ch.peer.0, dst, bytes, Some(ch.id), stream))
    }

    /// The streams `ch`'s next frame may take, a bit per stream number:
    /// stream 0 alone unless the channel is striped over `n` streams
    /// ([`Mechanism::Striped`]). Then, on the side that dialed, all `n`
    /// (its driver opens a stream's connection with its first frame); on
    /// the other, stream 0 and those the peer has sent on, and the peer is
    /// asked once, with a bind frame naming the stream on stream 0, to
    /// open each missing one (it answers with an empty frame on it).
    ///
    /// Stream 0 alone, too, while datagram channels send and the monitor
    /// knows no capacity to pace bulk frames by ([`BulkPacer`]): unpaced,
    /// `n` connections take `n` shares of the bottleneck's queue from the
    /// real-time channels (in the tele-immersion scenario the fourth
    /// minute's new link, whose capacity is not measured yet, cost the
    /// state channel a window in ten while the dataset was striped).
    fn stripe_mask(&mut self, ch: ChannelId) -> u8 {
        let Some(p) = self.peers.get_mut(&ch.peer.0) else {
            return 1;
        };
        let n = p.out.get(&ch.id).map_or(1, |c| stripes(&c.mech));
        if p.stream.unpaced {
            return 1;
        }
        let all = (((1u16 << n) - 1) & 0xFF) as u8;
        if n <= 1 {
            return 1;
        }
        if p.dialed {
            return all;
        }
        let missing = all & !p.streams_heard & !p.streams_asked & !1;
        p.streams_asked |= missing;
        for k in (1..MAX_STREAMS).filter(|k| missing & (1 << k) != 0) {
            self.send_bind(ch.peer.0, 0, &[k]);
        }
        let p = self.peers.get(&ch.peer.0).expect("looked up above");
        all & (p.streams_heard | 1)
    }

    /// A bind-channel frame carrying `payload` onto peer `cid`'s stream
    /// `stream` at once, counted against its window: on a bound stream,
    /// `[k]` asks the dialing peer to open stream `k`, and an empty one
    /// is its answer on stream `k`.
    fn send_bind(&mut self, cid: u32, stream: u8, payload: &[u8]) {
        let Some((dst, bytes)) = self.seal_frame(PeerId(cid), wire::BIND_CHANNEL, 0, payload)
        else {
            return;
        };
        let len = self.push_frame(cid, dst, bytes, None, stream);
        if self.cfg.stream_window.is_some()
            && let Some(p) = self.peers.get_mut(&cid)
        {
            p.stream.unsent[usize::from(stream)] += len;
        }
    }

    /// A mechanism's control frame onto peer `cid`'s stream, at once (it
    /// is small, and a transfer's progress waits on it), counted against
    /// the stream window; its `dcid` is the peer's.
    fn send_control(&mut self, cid: u32, f: wire::ControlFrame<'_>) {
        let (channel, msg) = f.as_fields();
        let Some((dst, bytes)) = self.seal_frame(PeerId(cid), channel, msg, f.payload) else {
            return;
        };
        let ours = (!f.peer_owned).then_some(f.channel);
        let len = self.push_frame(cid, dst, bytes, ours, 0);
        if self.cfg.stream_window.is_some()
            && let Some(p) = self.peers.get_mut(&cid)
        {
            p.stream.unsent[0] += len;
        }
    }

    /// Queues a sealed frame to peer `cid`'s stream `stream` for the
    /// driver, counted by the monitor and in the wire bytes of our
    /// `channel`, if it is one; the bytes it takes on the stream, length
    /// prefix included.
    fn push_frame(
        &mut self,
        cid: u32,
        dst: SocketAddr,
        bytes: Bytes,
        channel: Option<u16>,
        stream: u8,
    ) -> usize {
        let len = bytes.len() + FRAME_PREFIX;
        if let Some(p) = self.peers.get_mut(&cid) {
            p.tx_mon.on_stream_send(self.now, len);
            if let Some(c) = channel.and_then(|id| p.out.get_mut(&id)) {
                c.stats.wire_bytes += bytes.len() as u64;
            }
        }
        self.transmits.push_back((
            Transmit {
                dst,
                transport: Transport::TcpFrame { stream },
                payload: bytes,
            },
            None,
        ));
        len
    }

    /// A stream frame to an established `peer` (sealed under the key),
    /// and the peer's address.
    fn seal_frame(
        &mut self,
        peer: PeerId,
        channel: u16,
        msg: u32,
        payload: &[u8],
    ) -> Option<(SocketAddr, Bytes)> {
        let p = self.peers.get(&peer.0)?;
        if p.state != State::Established {
            return None;
        }
        let (dst, dcid) = (p.addr, p.remote_cid);
        let mut body = Vec::with_capacity(wire::FRAME_HEADER_LEN + payload.len());
        Frame {
            dcid,
            channel,
            msg,
            payload,
        }
        .write(&mut body);
        let bytes = match self.sealer.as_mut() {
            None => body,
            Some(s) => {
                let sealed = s.seal(&body[4..])?;
                let mut out = body[..4].to_vec();
                out.extend_from_slice(&sealed);
                out
            }
        };
        Some((dst, Bytes::from(bytes)))
    }

    /// The first frame a driver writes on the connection it opened to
    /// `peer` (established) for stream number `stream` (below
    /// [`MAX_STREAMS`]): it carries no message, and tells the peer
    /// (through [`accept_frame`](Self::accept_frame)) which peer slot and
    /// which stream the connection serves, so the peer can send its own
    /// frames back on it. Sealed under the key like every frame, so only a
    /// key holder can bind a stream, and a replayed bind is refused by the
    /// anti-replay window. `None` before the handshake completes.
    pub fn bind_frame(&mut self, peer: PeerId, stream: u8) -> Option<Bytes> {
        if stream >= MAX_STREAMS {
            return None;
        }
        self.seal_frame(peer, wire::BIND_CHANNEL, 0, &[stream])
            .map(|(_, b)| b)
    }

    /// Wraps and queues one datagram to peer `cid`, unmarked (control:
    /// handshakes, Opens, reports, probes).
    fn emit(&mut self, cid: u32, body: &Body<'_>) -> usize {
        self.emit_marked(cid, body, None)
    }

    /// Wraps and queues one datagram to peer `cid` with code point `dscp`.
    fn emit_marked(&mut self, cid: u32, body: &Body<'_>, dscp: Option<Dscp>) -> usize {
        let Some(p) = self.peers.get_mut(&cid) else {
            return 0;
        };
        let seq = p.next_seq;
        p.next_seq = seq.wrapping_add(1);
        let (dst, dcid) = (p.addr, p.remote_cid);
        let ts = wire_ts(self.now);
        let mut buf = std::mem::take(&mut self.buf);
        if !wire::write(&mut buf, dcid, seq, ts, body) {
            self.buf = buf;
            return 0;
        }
        let out = match self.sealer.as_mut() {
            None => buf.clone(),
            Some(s) => match s.seal(&buf) {
                Some(v) => v,
                None => {
                    self.buf = buf;
                    return 0;
                }
            },
        };
        self.buf = buf;
        let n = out.len();
        if let Some(p) = self.peers.get_mut(&cid) {
            p.tx_mon.on_send(self.now, seq, n);
        }
        self.stats.sent += 1;
        self.stats.sent_bytes += n as u64;
        self.transmits.push_back((
            Transmit {
                dst,
                transport: Transport::Udp,
                payload: Bytes::from(out),
            },
            dscp,
        ));
        n
    }

    /// Moves what a peer's mechanisms have to send (one channel's, or all)
    /// onto the wire, and what they delivered to the application; then
    /// refreshes the timers of the channels it looked at (every change to
    /// a channel's instances is followed by its pump).
    fn pump(&mut self, now: Instant, cid: u32, pump: Pump) {
        self.pump_queued(now, cid, pump);
        let Some(p) = self.peers.get_mut(&cid) else {
            return;
        };
        match pump {
            Pump::Out(id) if p.state == State::Established => {
                p.out.get_mut(&id).map(OutChannel::refresh_timer);
            }
            Pump::In(id) if p.state == State::Established => {
                p.incoming.get_mut(&id).map(InChannel::refresh_timer);
            }
            _ => {
                p.out.values_mut().for_each(OutChannel::refresh_timer);
                p.incoming.values_mut().for_each(InChannel::refresh_timer);
            }
        }
    }

    /// [`pump`](Self::pump) but for the channels' timers.
    fn pump_queued(&mut self, now: Instant, cid: u32, pump: Pump) {
        let Some(p) = self.peers.get_mut(&cid) else {
            return;
        };
        if p.state != State::Established {
            // Nothing leaves before the handshake: drop what queued.
            for c in p.out.values_mut() {
                if let Some(i) = c.inst.as_mut() {
                    while i.poll_transmit(now).is_some() {}
                }
            }
            return;
        }
        let mut pkts: Vec<(u16, u8, Bytes, Option<Dscp>)> = Vec::new();
        // Mechanisms' control frames: channel, kind, whether the channel
        // is the peer's.
        let mut frames: Vec<(u16, u8, bool, Bytes)> = Vec::new();
        // One channel's send looks at that channel alone, not at all of
        // them: with many channels, walking them all per message was what
        // the session cost over one mechanism (issue 16's loopback
        // benchmark, 8 channels).
        for (id, c) in pump.outgoing().of(&mut p.out) {
            let dscp = c.qos.dscp_value();
            let insts = c
                .inst
                .iter_mut()
                .chain(c.draining.iter_mut().map(|(i, _)| i));
            for inst in insts {
                let k = inst.kind() as u8;
                while let Some(pkt) = inst.poll_transmit(now) {
                    pkts.push((id, k, pkt, dscp));
                }
                while let Some(f) = inst.poll_frame() {
                    frames.push((id, k, false, f));
                }
            }
        }
        // Feedback (reports, NAK/INC) of the channels the peer sends on
        // goes with a full pump, or with the pump of the channel a packet
        // came in on: one channel's send makes none. Feedback is marked as
        // the channel it is about is here.
        for (id, c) in pump.incoming().of(&mut p.incoming) {
            let dscp = p.out.get(&c.local).and_then(|o| o.qos.dscp_value());
            for (k, (inst, _)) in c.insts.iter_mut() {
                while let Some(pkt) = inst.poll_transmit(now) {
                    pkts.push((id | wire::PEER_OWNED, *k as u8, pkt, dscp));
                }
                while let Some(f) = inst.poll_frame() {
                    frames.push((id, *k as u8, true, f));
                }
            }
        }
        for (channel, mechanism, peer_owned, payload) in frames {
            self.send_control(
                cid,
                wire::ControlFrame {
                    dcid: 0,
                    channel,
                    mechanism,
                    peer_owned,
                    payload: &payload,
                },
            );
        }
        for (channel, mechanism, payload, dscp) in pkts {
            let n = self.emit_marked(
                cid,
                &Body::Data {
                    channel,
                    mechanism,
                    payload: &payload,
                },
                dscp,
            );
            if channel & wire::PEER_OWNED == 0
                && let Some(c) = self
                    .peers
                    .get_mut(&cid)
                    .and_then(|p| p.out.get_mut(&channel))
            {
                c.stats.wire_bytes += n as u64;
                c.tick.dgrams += 1;
                c.tick.dgram_bytes += n as u64;
            }
        }
        match pump {
            Pump::All => self.pump_in(cid, None),
            Pump::In(id) => self.pump_in(cid, Some(id)),
            Pump::Out(_) => {}
        }
    }

    /// Delivers what the receive-side mechanisms of peer `cid` rebuilt
    /// (of the peer's channel `only`, or of all).
    fn pump_in(&mut self, cid: u32, only: Option<u16>) {
        let Some(p) = self.peers.get_mut(&cid) else {
            return;
        };
        let mut ready = Vec::new();
        let keys = only.map_or(Keys::All, Keys::One);
        for (id, c) in keys.of(&mut p.incoming) {
            for (k, (inst, _)) in c.insts.iter_mut() {
                while let Some((data, recovered)) = inst.poll_delivery() {
                    ready.push((id, *k, data, recovered));
                }
            }
        }
        for (id, k, data, recovered) in ready {
            match split_msg(&data) {
                Some((msg, payload)) => self.deliver(cid, id, msg, payload, k, recovered),
                None => self.stats.malformed += 1,
            }
        }
    }

    /// Message `msg` of the peer's channel `id`: dropped if seen before,
    /// else handed out (in order, where the channel asked for it).
    fn deliver(
        &mut self,
        cid: u32,
        id: u16,
        msg: u32,
        payload: Bytes,
        via: MechanismKind,
        recovered: bool,
    ) {
        let limit = self.cfg.reorder_limit;
        let Some(p) = self.peers.get_mut(&cid) else {
            return;
        };
        let Some(inc) = p.incoming.get_mut(&id) else {
            return;
        };
        let local = inc.local;
        let n = match inc.seen.check(msg) {
            Seen::New(n) => {
                if inc.delivered == 0 || msg.wrapping_sub(inc.highest) as i32 > 0 {
                    inc.highest = msg;
                }
                inc.delivered = inc.delivered.wrapping_add(1);
                inc.dirty = true;
                n
            }
            Seen::Duplicate => {
                self.stats.duplicates += 1;
                return;
            }
            Seen::TooOld => {
                self.stats.too_old += 1;
                return;
            }
        };
        let out = match inc.reorder.as_mut() {
            None => vec![(payload, via, recovered)],
            Some(r) => r.push(n, (payload, via, recovered), limit, &mut self.stats.skipped),
        };
        let channel = ChannelId {
            peer: PeerId(cid),
            id: local,
        };
        for (payload, via, recovered) in out {
            if let Some(c) = p.out.get_mut(&local) {
                c.stats.delivered += 1;
                c.stats.recovered += u64::from(recovered);
            }
            self.events.push_back(SessionEvent::Message {
                channel,
                payload,
                via,
                recovered,
            });
        }
    }

    /// The local channel that takes peer channel `id` named `name`,
    /// opened here if this side has none by that name.
    fn bind_incoming(&mut self, now: Instant, cid: u32, id: u16, name: &str) -> Option<u16> {
        let max = self.cfg.channel_limit();
        let p = self.peers.get_mut(&cid)?;
        if let Some(c) = p.incoming.get(&id) {
            return Some(c.local);
        }
        if p.incoming.len() >= max {
            return None;
        }
        let local = match p.by_name.get(name) {
            Some(&l) => l,
            None => {
                if p.out.len() >= max {
                    return None;
                }
                let l = p.out.len() as u16;
                p.by_name.insert(name.into(), l);
                p.out.insert(
                    l,
                    OutChannel {
                        implicit: true,
                        ..OutChannel::new(
                            name.into(),
                            Qos::low_latency(),
                            Mechanism::Plain,
                            Some(MechInst::new(
                                &Mechanism::Plain,
                                &Qos::low_latency(),
                                p.addr,
                                0,
                                &Numbering::default(),
                                Start::default(),
                            )?),
                            None,
                            now,
                        )
                    },
                );
                self.events.push_back(SessionEvent::ChannelOpened {
                    channel: ChannelId {
                        peer: PeerId(cid),
                        id: l,
                    },
                    name: name.into(),
                });
                l
            }
        };
        let p = self.peers.get_mut(&cid)?;
        let ordered = p.out.get(&local).is_some_and(|c| c.qos.preserve_order);
        p.incoming.insert(
            id,
            InChannel {
                local,
                insts: BTreeMap::new(),
                seen: SeenWindow::default(),
                reorder: ordered.then(Reorder::default),
                highest: 0,
                delivered: 0,
                dirty: false,
                timer: None,
            },
        );
        Some(local)
    }

    /// Finds the peer a datagram from `src` belongs to, opening it first
    /// under the key.
    fn open_datagram<'a>(
        &mut self,
        src: SocketAddr,
        data: &'a [u8],
    ) -> Option<(Option<u32>, Cow<'a, [u8]>)> {
        let known = self.by_addr.get(&src).copied();
        if self.cfg.key.is_none() {
            return Some((known, Cow::Borrowed(data)));
        }
        let opened = match known.and_then(|c| self.peers.get_mut(&c)) {
            Some(p) => {
                let may_switch = p.state != State::Established;
                p.opener.as_mut()?.open(data, may_switch)
            }
            None => {
                // A stranger: a throwaway opener proves the key, and the
                // peer's own opener (made when its Hello is taken) keeps
                // its replay window from then on.
                let k = self.cfg.key.as_ref()?;
                Opener::new(&k.psk, k.salt).open(data, true)
            }
        };
        match opened {
            Ok(plain) => Some((known, Cow::Owned(plain))),
            Err(_) => {
                self.stats.unauthenticated += 1;
                None
            }
        }
    }

    fn on_hello(&mut self, now: Instant, src: SocketAddr, raw: &[u8], scid: u32, min: u8, max: u8) {
        if let Some(&cid) = self.by_addr.get(&src) {
            let p = self.peers.get_mut(&cid).expect("by_addr names a peer");
            match p.state {
                // A repeated Hello (our HelloAck was lost): answer again,
                // one reply per Hello, never larger.
                State::Validating { .. } if p.remote_cid == scid => self.send_hello_ack(cid, scid),
                // Both sides connected at once, each Hello at the other's
                // Connecting peer. The side with the smaller connection id
                // answers, as if it had not dialed, keeping its id (so its
                // `connect` goes on waiting for the same peer); the other
                // drops this Hello and takes the answer to its own. Both
                // decide alike from the two ids, so exactly one answers
                // (equal ids, one in 2^32, time out as before).
                State::Connecting { .. }
                    if scid != 0 && cid < scid && (min..=max).contains(&wire::VERSION) =>
                {
                    p.remote_cid = scid;
                    p.dialed = false;
                    p.state = State::Validating {
                        deadline: now.saturating_add(self.cfg.handshake_timeout),
                    };
                    self.stats.simultaneous_opens += 1;
                    self.send_hello_ack(cid, scid);
                }
                _ => self.stats.foreign += 1,
            }
            return;
        }
        let pending = self
            .peers
            .values()
            .filter(|p| matches!(p.state, State::Validating { .. }))
            .count();
        if !self.cfg.accept
            || self.peers.len() >= self.cfg.max_peers
            || pending >= self.cfg.max_pending
            || !(min..=max).contains(&wire::VERSION)
            || scid == 0
        {
            self.stats.refused += 1;
            return;
        }
        let cid = self.fresh_cid();
        let mut opener = self.new_opener();
        if let Some(o) = opener.as_mut() {
            // Take the Hello's key into this peer's replay window.
            let _ = o.open(raw, true);
        }
        let state = State::Validating {
            deadline: now.saturating_add(self.cfg.handshake_timeout),
        };
        let peer = self.new_peer(now, src, cid, scid, state, opener);
        self.peers.insert(cid, peer);
        self.by_addr.insert(src, cid);
        self.send_hello_ack(cid, scid);
    }

    fn send_hello_ack(&mut self, cid: u32, echo: u32) {
        self.emit(
            cid,
            &Body::HelloAck {
                scid: cid,
                echo,
                version: wire::VERSION,
            },
        );
    }

    fn established(&mut self, now: Instant, cid: u32) {
        let Some(p) = self.peers.get_mut(&cid) else {
            return;
        };
        p.state = State::Established;
        for c in p.out.values_mut() {
            c.next_open = now;
        }
        let addr = p.addr;
        self.events.push_back(SessionEvent::PeerConnected {
            peer: PeerId(cid),
            addr,
        });
    }

    fn remove_peer(&mut self, cid: u32) -> Option<Peer> {
        let p = self.peers.remove(&cid)?;
        self.by_addr.remove(&p.addr);
        Some(p)
    }

    fn on_packet(&mut self, now: Instant, cid: u32, src: SocketAddr, body: Body<'_>) {
        let Some(p) = self.peers.get_mut(&cid) else {
            return;
        };
        p.last_heard = now;
        match body {
            Body::Hello { .. } => unreachable!("handled before"),
            Body::HelloAck {
                scid,
                echo,
                version,
            } => {
                if !matches!(p.state, State::Connecting { .. })
                    || echo != p.local_cid
                    || version != wire::VERSION
                    || scid == 0
                {
                    self.stats.foreign += u64::from(p.state != State::Established);
                    return;
                }
                p.remote_cid = scid;
                self.established(now, cid);
                // Prove our address to the responder at once.
                self.emit(cid, &Body::Probe);
            }
            Body::Open { channel, name } => {
                let name = name.to_owned();
                if self.bind_incoming(now, cid, channel, &name).is_some() {
                    self.emit(cid, &Body::OpenAck { channel });
                    self.replay_early(now, cid, src, channel);
                } else {
                    self.stats.unknown_channel += 1;
                }
            }
            Body::OpenAck { channel } => {
                if let Some(c) = p.out.get_mut(&channel) {
                    c.open_acked = true;
                }
            }
            Body::Data {
                channel,
                mechanism,
                payload,
            } => {
                let Some(kind) = MechanismKind::from_u8(mechanism) else {
                    self.stats.unknown_mechanism += 1;
                    return;
                };
                let room = self.cfg.room();
                let drain = self.cfg.drain;
                let inst = if channel & wire::PEER_OWNED != 0 {
                    // Feedback for a channel we send on.
                    p.out.get_mut(&(channel & !wire::PEER_OWNED)).and_then(|c| {
                        c.inst
                            .iter_mut()
                            .chain(c.draining.iter_mut().map(|(i, _)| i))
                            .find(|i| i.kind() == kind)
                    })
                } else {
                    let addr = p.addr;
                    let Some(inc) = p.incoming.get_mut(&channel) else {
                        p.hold_early(
                            Early::Datagram {
                                channel,
                                mechanism,
                                payload: Bytes::copy_from_slice(payload),
                            },
                            &mut self.stats,
                        );
                        return;
                    };
                    let qos = p.out.get(&inc.local).map(|c| c.qos);
                    let Some(i) = receiving_inst(inc, kind, qos, addr, room, now, drain) else {
                        self.stats.unknown_mechanism += 1;
                        return;
                    };
                    Some(i)
                };
                match inst {
                    Some(i) => i.handle(now, src, payload),
                    None => {
                        self.stats.unknown_channel += 1;
                        return;
                    }
                }
                // Only the instance that took the packet has anything new
                // to send or deliver: with many channels a full pump per
                // datagram was most of what the session cost over one
                // mechanism (issue 16's loopback benchmark, 8 channels).
                let pump = if channel & wire::PEER_OWNED != 0 {
                    Pump::Out(channel & !wire::PEER_OWNED)
                } else {
                    Pump::In(channel)
                };
                self.pump(now, cid, pump);
            }
            Body::Report(r) => match MonitorReport::decode(r) {
                Ok(r) => {
                    p.tx_mon.on_stream_backlog(p.stream.waiting_bytes > 0);
                    p.tx_mon.on_report(now, &r);
                    let fits = p.late_prior.then(|| p.tx_mon.fits());
                    if let Some(fits) =
                        fits.filter(|[slow, _]| slow.samples() >= self.cfg.monitor.min_samples)
                    {
                        p.late_prior = false;
                        for c in p.out.values_mut() {
                            if let Some(inst) = &mut c.inst {
                                inst.late_prior(fits);
                            }
                        }
                    }
                }
                Err(_) => self.stats.malformed += 1,
            },
            Body::Probe => {}
            Body::ChannelReport(r) => {
                for e in r.iter() {
                    let Some(c) = p.out.get_mut(&e.channel) else {
                        self.stats.unknown_channel += 1;
                        continue;
                    };
                    // A report about a message not yet sent is a lie.
                    if c.next_msg.wrapping_sub(e.highest) as i32 <= 0 {
                        self.stats.bad_reports += 1;
                        continue;
                    }
                    let Some((h0, d0)) = c.fb_last.replace((e.highest, e.delivered)) else {
                        continue;
                    };
                    // Counts only move forward: a stale or reordered report
                    // moves nothing. (A key holder can still claim losses
                    // it did not have, which costs redundancy, never a
                    // message.)
                    let span = i64::from(e.highest.wrapping_sub(h0) as i32);
                    let got = i64::from(e.delivered.wrapping_sub(d0) as i32);
                    if span < 0 || got < 0 {
                        c.fb_last = Some((h0, d0));
                        self.stats.bad_reports += 1;
                        continue;
                    }
                    // A message rebuilt or retransmitted after the report
                    // that first covered it comes in a later one: the
                    // count may exceed the span by what is still missing.
                    let missing = c.fb_total.0.saturating_sub(c.fb_total.1);
                    let got = (got as u64).min(span as u64 + missing);
                    c.fb_acc.0 += span as u64;
                    c.fb_acc.1 += got;
                    c.fb_total.0 += span as u64;
                    c.fb_total.1 += got;
                }
            }
            Body::Close { .. } => {
                self.remove_peer(cid);
                self.events
                    .push_back(SessionEvent::PeerGone { peer: PeerId(cid) });
            }
        }
    }

    /// One control tick for peer `cid`: each unpinned channel's controller
    /// sees the monitor's estimate and the channel's load since the last
    /// tick, and the channel moves to what it picks.
    fn control(&mut self, now: Instant, cid: u32) {
        let interval = self.cfg.control_interval.as_secs_f64().max(1e-3);
        let Some(p) = self.peers.get_mut(&cid) else {
            return;
        };
        // Each channel's load this tick, then the peer's totals. A
        // channel's packets are interleaved with the others'. Its share of
        // the path (PathEstimate::delivered, as the selector reads it) is
        // the capacity less what the others would send without
        // redundancy: every datagram channel keeps room for its messages,
        // and redundancy competes for the rest (a channel that takes more
        // than the rest overloads the path, and the overload rescue moves
        // it). The stream is elastic (TCP yields) and takes no share.
        let estimate = p.tx_mon.estimate();
        let mut totals = (0.0, 0.0);
        let mut bulk_on_stream = 0usize;
        for c in p.out.values_mut() {
            c.load.tick(interval, std::mem::take(&mut c.tick));
            let (_, d, _) = c.load.rates();
            totals.0 += d;
            totals.1 += c.load.base_rate();
            bulk_on_stream += usize::from(c.bulk_on_stream());
        }
        let window = self.cfg.stream_window.unwrap_or(0) as f64;
        p.stream.pace_at(now, &estimate, p.out.values(), window);
        let mut moves = Vec::new();
        let mut verdicts = Vec::new();
        for (&id, c) in p.out.iter_mut() {
            let others_bulk = bulk_on_stream > usize::from(c.bulk_on_stream());
            let Some(ctl) = c.controller.as_mut() else {
                continue;
            };
            // A channel that sent nothing for a second is not reselected:
            // its load and its feedback say nothing of what it will send.
            let idle = c
                .last_send
                .is_none_or(|t| now.saturating_duration_since(t) > IDLE_CHANNEL);
            if ctl.current().is_some() && idle {
                continue;
            }
            let before = ctl.current().map(|_| ctl.meets());
            let (msgs, dgrams, _) = c.load.rates();
            let base = c.load.base_rate();
            let mut traffic = if msgs > 0.0 && c.load.msg_size() > 0 {
                Traffic::new(msgs, c.load.msg_size())
            } else {
                Traffic::from_qos(&c.qos, 200).unwrap_or(Traffic::new(1.0, 200))
            };
            traffic.others_pkt_rate = (totals.0 - dgrams).max(0.0);
            traffic.stream_shared_with_bulk = others_bulk;
            let path = PathEstimate {
                delivered: estimate.capacity.map(|cap| {
                    let others = (totals.1 - base).max(0.0) * 8.0;
                    Bitrate::bps((cap.as_bps() as f64 - others).max(0.0) as u64)
                }),
                ..estimate
            };
            // Late deliveries can make an interval's share negative: they
            // take back losses counted before. Held until a report covers
            // a message.
            let measured = (c.fb_acc.0 > 0).then(|| {
                let (span, got) = std::mem::take(&mut c.fb_acc);
                Measured {
                    loss_after_recovery: (span as f64 - got as f64) / span as f64,
                    messages: span,
                }
            });
            let switch = ctl.on_interval(now, &path, &traffic, measured);
            let after = ctl.current().map(|_| ctl.meets());
            if after.is_some() && after != before {
                verdicts.push((id, after == Some(true)));
            }
            if let Some(sw) = switch
                && sw.to != c.mech
            {
                moves.push((id, c.mech, sw.to, block_budget(sw.prediction.overhead)));
            }
        }
        for (id, met) in verdicts {
            self.events.push_back(SessionEvent::QosMet {
                channel: ChannelId {
                    peer: PeerId(cid),
                    id,
                },
                met,
            });
        }
        for (id, from, to, budget) in moves {
            let ch = ChannelId {
                peer: PeerId(cid),
                id,
            };
            if self.install(now, ch, to, Some(budget)).is_ok() {
                if let Ok(c) = self.out_mut(ch) {
                    c.stats.switches += 1;
                }
                self.events.push_back(SessionEvent::MechanismChanged {
                    channel: ch,
                    from,
                    to,
                });
            }
        }
    }

    /// What the peer's ChannelReports said of channel `ch` since it opened:
    /// the messages they covered, and how many of those were delivered.
    pub fn delivery_report(&self, ch: ChannelId) -> Option<(u64, u64)> {
        self.peers
            .get(&ch.peer.0)?
            .out
            .get(&ch.id)
            .map(|c| c.fb_total)
    }

    /// What the resource monitor knows of the path to `peer`.
    pub fn path(&self, peer: PeerId) -> Option<PathEstimate> {
        self.peers.get(&peer.0).map(|p| p.tx_mon.estimate())
    }

    /// Channel `ch`'s QoS.
    pub fn qos(&self, ch: ChannelId) -> Option<Qos> {
        self.peers.get(&ch.peer.0)?.out.get(&ch.id).map(|c| c.qos)
    }

    /// Whether the controller predicts channel `ch` meets its QoS on its
    /// current mechanism (`None`: pinned, or not yet decided).
    pub fn meets(&self, ch: ChannelId) -> Option<bool> {
        let c = self.peers.get(&ch.peer.0)?.out.get(&ch.id)?;
        c.controller
            .as_ref()
            .filter(|k| k.current().is_some())
            .map(AdaptiveController::meets)
    }

    /// Feeds what waited for channel `id`'s Open.
    fn replay_early(&mut self, now: Instant, cid: u32, src: SocketAddr, id: u16) {
        let Some(p) = self.peers.get_mut(&cid) else {
            return;
        };
        let (mine, rest): (VecDeque<Early>, VecDeque<Early>) = std::mem::take(&mut p.early)
            .into_iter()
            .partition(|e| match e {
                Early::Datagram { channel, .. }
                | Early::Frame { channel, .. }
                | Early::Control { channel, .. } => *channel == id,
            });
        p.early = rest;
        for e in mine {
            match e {
                Early::Datagram {
                    channel,
                    mechanism,
                    payload,
                } => self.on_packet(
                    now,
                    cid,
                    src,
                    Body::Data {
                        channel,
                        mechanism,
                        payload: &payload,
                    },
                ),
                Early::Frame {
                    channel,
                    msg,
                    payload,
                } => {
                    self.deliver(cid, channel, msg, payload, MechanismKind::Reliable, false);
                }
                Early::Control {
                    channel,
                    mechanism,
                    payload,
                } => self.on_control(
                    now,
                    cid,
                    &wire::ControlFrame {
                        dcid: 0,
                        channel,
                        mechanism,
                        peer_owned: false,
                        payload: &payload,
                    },
                ),
            }
        }
    }

    /// The earliest timer of every peer: its handshake or idle deadline,
    /// its channels' (kept by each channel as its instances change: every
    /// change is followed by a pump of the channel, which refreshes it, so
    /// a session with many channels does not ask every instance each time
    /// it is polled), Opens not yet acknowledged, the monitors and the
    /// control tick. One loop: this runs after every event a driver sees.
    fn next_timer(&self) -> Option<Instant> {
        let mut t: Option<Instant> = None;
        let mut at = |x: Option<Instant>| {
            if let Some(x) = x {
                t = Some(t.map_or(x, |t| t.min(x)));
            }
        };
        for p in self.peers.values() {
            let established = p.state == State::Established;
            at(Some(match p.state {
                State::Connecting {
                    next_hello,
                    deadline,
                    ..
                } => next_hello.min(deadline),
                State::Validating { deadline } => deadline,
                State::Established => p.last_heard.saturating_add(self.cfg.idle_timeout),
            }));
            let mut controlled = false;
            for c in p.out.values() {
                debug_assert_eq!(c.timer, c.next_timer(), "stale timer of {}", c.name);
                at(c.timer);
                if established && !c.open_acked {
                    at(Some(c.next_open));
                }
                controlled |= c.controller.is_some();
            }
            for c in p.incoming.values() {
                debug_assert_eq!(c.timer, c.next_timer(), "stale incoming timer");
                at(c.timer);
            }
            if established {
                at(p.rx_mon.poll_timeout());
                at(p.tx_mon.poll_timeout());
                at(p.stream.held_until);
                // The tick also paces bulk frames on the stream.
                if controlled && self.cfg.policy.is_some() || self.cfg.stream_window.is_some() {
                    at(Some(p.next_control));
                }
            }
        }
        t
    }
}

/// What a mechanism's receive side needs of the QoS: the band for AFEC
/// comes from the sender (the receiver measures against what it is told),
/// so any values serve here; the XOR layout is read from the packets.
/// What a pump looks at ([`Session::pump`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pump {
    /// Every channel of the peer, both ways, and every delivery.
    All,
    /// One channel we send on (a send, or the peer's feedback for it).
    Out(u16),
    /// One channel the peer sends on (a packet of it came in): its
    /// feedback and its deliveries.
    In(u16),
}

/// The channels a pump looks at in one direction: all, one, or none.
#[derive(Clone, Copy, Debug)]
enum Keys {
    All,
    One(u16),
    None,
}

impl Keys {
    /// Those of `map`'s entries (a lookup for one, not a range walk).
    fn of<V>(self, map: &mut BTreeMap<u16, V>) -> Selected<'_, V> {
        match self {
            Self::All => Selected::All(map.iter_mut()),
            Self::One(id) => Selected::One(map.get_mut(&id).map(|v| (id, v))),
            Self::None => Selected::One(None),
        }
    }
}

/// What [`Keys::of`] selects.
enum Selected<'a, V> {
    All(std::collections::btree_map::IterMut<'a, u16, V>),
    One(Option<(u16, &'a mut V)>),
}

impl<'a, V> Iterator for Selected<'a, V> {
    type Item = (u16, &'a mut V);

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Self::All(it) => it.next().map(|(&k, v)| (k, v)),
            Self::One(one) => one.take(),
        }
    }
}

impl Pump {
    /// The channels we send on whose instances it looks at.
    fn outgoing(self) -> Keys {
        match self {
            Self::All => Keys::All,
            Self::Out(id) => Keys::One(id),
            Self::In(_) => Keys::None,
        }
    }

    /// The peer's channels whose instances it looks at.
    fn incoming(self) -> Keys {
        match self {
            Self::All => Keys::All,
            Self::In(id) => Keys::One(id),
            Self::Out(_) => Keys::None,
        }
    }
}

/// The overhead a Block sender the selector chose may spend: twice what
/// the selector predicted for it, and at least a tenth more. Beyond that
/// the path has changed, and the selector, which knows the path's
/// capacity and the other channels, decides (it rescues a channel whose
/// path changed within seconds). Until this bound, Block's target
/// controller answered the tele-immersion scenario's third minute (8%
/// loss in bursts, the link cut to 4 Mbit/s) by raising the camera's
/// repairs from the 0.29 it was chosen at to 1.7: 5.4 Mbit/s into a
/// 4 Mbit/s link, and every channel of the session late for the second
/// and a half before the selector moved it.
fn block_budget(predicted: f64) -> f64 {
    let p = if predicted.is_finite() {
        predicted.max(0.0)
    } else {
        3.0
    };
    (2.0 * p).max(p + 0.1)
}

fn receive_side(kind: MechanismKind, qos: &Qos) -> Option<Mechanism> {
    Some(match kind {
        MechanismKind::Plain => Mechanism::Plain,
        MechanismKind::Afec => match qos.reliability {
            Reliability::MerBand { lo, hi } => Mechanism::Afec { lo, hi },
            _ => Mechanism::Afec { lo: 0.01, hi: 0.02 },
        },
        // Any layout: the receiving half reads each parity's own
        // (`XorEndpointConfig::any_layout`).
        MechanismKind::Xor => Mechanism::Xor(crate::xor::XorLayout::row(3)),
        MechanismKind::Block => Mechanism::Block {
            target: 0.001,
            max_delay: qos.max_delay.unwrap_or(Duration::from_millis(100)),
        },
        MechanismKind::Blast => Mechanism::Blast,
        MechanismKind::Reliable | MechanismKind::Striped => return None,
    })
}

/// The receiving instance of `kind` on the peer's channel `inc` (whose
/// local channel has QoS `qos`, if opened here), made on its first packet
/// or control frame; it is kept `drain` past this one. `None`: no such
/// receiving half.
fn receiving_inst(
    inc: &mut InChannel,
    kind: MechanismKind,
    qos: Option<Qos>,
    addr: SocketAddr,
    room: usize,
    now: Instant,
    drain: Duration,
) -> Option<&mut MechInst> {
    let qos = qos.unwrap_or(Qos::low_latency());
    let slot = match inc.insts.entry(kind) {
        Entry::Occupied(o) => o.into_mut(),
        Entry::Vacant(v) => {
            let i = receive_side(kind, &qos).and_then(|m| {
                MechInst::new(
                    &m,
                    &qos,
                    addr,
                    room,
                    &Numbering::default(),
                    Start::default(),
                )
            })?;
            v.insert((i, now))
        }
    };
    slot.1 = now.saturating_add(drain);
    Some(&mut slot.0)
}

/// The mechanism a channel starts on: Leigh et al. §5's heuristics read
/// literally ("low latency, much loss tolerated: UDP; low latency, low
/// loss: FEC UDP; else TCP"), with the loss band's channels on AFEC, the
/// design made for them. The selector replaces it once it has measured
/// the path.
pub fn initial_mechanism(qos: &Qos) -> Mechanism {
    match qos.reliability {
        Reliability::Full => Mechanism::Reliable,
        Reliability::BestEffort => Mechanism::Plain,
        Reliability::MerBand { lo, hi } => Mechanism::Afec { lo, hi },
        Reliability::Residual(target) => Mechanism::Block {
            target,
            max_delay: qos.max_delay.unwrap_or(Duration::from_millis(100)),
        },
    }
}

impl Machine for Session {
    type Event = SessionEvent;

    fn handle_datagram(&mut self, now: Instant, src: SocketAddr, data: &[u8]) {
        self.now = self.now.max(now);
        self.stats.received += 1;
        self.stats.received_bytes += data.len() as u64;
        let Some((known, plain)) = self.open_datagram(src, data) else {
            return;
        };
        let (header, body) = match wire::parse(&plain) {
            Ok(x) => x,
            Err(_) => {
                self.stats.malformed += 1;
                return;
            }
        };
        if let Body::Hello {
            scid,
            min_version,
            max_version,
        } = body
        {
            self.on_hello(now, src, data, scid, min_version, max_version);
            return;
        }
        let Some(cid) = known else {
            self.stats.foreign += 1;
            return;
        };
        if header.dcid != cid {
            self.stats.foreign += 1;
            return;
        }
        let state = &self.peers[&cid].state;
        match (state, header.kind) {
            (State::Connecting { .. }, Kind::HelloAck) => {}
            (State::Connecting { .. }, _) => {
                self.stats.foreign += 1;
                return;
            }
            (State::Validating { .. }, _) => {
                // The address proved it has our HelloAck.
                self.established(now, cid);
            }
            (State::Established, _) => {}
        }
        if let Some(p) = self.peers.get_mut(&cid) {
            p.rx_mon.on_packet(now, header.seq, header.ts, data.len());
        }
        self.on_packet(now, cid, src, body);
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.now = self.now.max(now);
        let drain = self.cfg.drain;
        let cids: Vec<u32> = self.peers.keys().copied().collect();
        for cid in cids {
            let Some(p) = self.peers.get_mut(&cid) else {
                continue;
            };
            match p.state {
                State::Connecting {
                    next_hello,
                    backoff,
                    deadline,
                } => {
                    if now >= deadline {
                        let addr = p.addr;
                        self.remove_peer(cid);
                        self.events.push_back(SessionEvent::PeerFailed {
                            peer: PeerId(cid),
                            addr,
                        });
                        continue;
                    }
                    if now >= next_hello {
                        p.state = State::Connecting {
                            next_hello: now.saturating_add(backoff),
                            backoff: backoff * 2,
                            deadline,
                        };
                        self.emit(
                            cid,
                            &Body::Hello {
                                scid: cid,
                                min_version: wire::VERSION,
                                max_version: wire::VERSION,
                            },
                        );
                    }
                    continue;
                }
                State::Validating { deadline } => {
                    if now >= deadline {
                        self.remove_peer(cid);
                    }
                    continue;
                }
                State::Established => {}
            }
            if now >= p.last_heard.saturating_add(self.cfg.idle_timeout) {
                self.remove_peer(cid);
                self.events
                    .push_back(SessionEvent::PeerGone { peer: PeerId(cid) });
                continue;
            }
            // Only the channels whose own timer is due run theirs (the
            // others have nothing due), and only they are pumped after,
            // unless the controller ran: with many channels, each
            // channel's timer waking all of them made the timers cost
            // the square of the channels.
            let mut opens = Vec::new();
            let mut due = Vec::new();
            for (&id, c) in p.out.iter_mut() {
                if c.timer.is_some_and(|t| t <= now) {
                    if let Some(i) = c.inst.as_mut() {
                        i.handle_timeout(now);
                    }
                    let failed = &mut c.stats.failed;
                    c.draining.retain_mut(|(i, until)| {
                        i.handle_timeout(now);
                        // A Blast with a transfer left outlasts the drain.
                        if now >= *until && i.busy() {
                            *until = now.saturating_add(drain);
                        }
                        let keep = now < *until;
                        if !keep {
                            *failed += i.failed();
                        }
                        keep
                    });
                    due.push(Pump::Out(id));
                }
                if !c.open_acked && now >= c.next_open {
                    c.next_open = now.saturating_add(self.cfg.open_retry);
                    opens.push((id, c.name.clone()));
                }
            }
            for (&id, c) in p.incoming.iter_mut() {
                if c.timer.is_some_and(|t| t <= now) {
                    c.insts.retain(|_, (i, until)| {
                        i.handle_timeout(now);
                        if now >= *until && i.busy() {
                            *until = now.saturating_add(drain);
                        }
                        now < *until
                    });
                    due.push(Pump::In(id));
                }
            }
            let paced_due = p.stream.held_until.is_some_and(|t| t <= now);
            let report = p.rx_mon.poll_report(now);
            let probe = p.tx_mon.poll_probe(now);
            let counts: Vec<ChannelCounts> = if report.is_some() {
                p.incoming
                    .iter_mut()
                    .filter(|(_, c)| c.dirty)
                    .map(|(&channel, c)| {
                        c.dirty = false;
                        ChannelCounts {
                            channel,
                            highest: c.highest,
                            delivered: c.delivered,
                        }
                    })
                    .collect()
            } else {
                Vec::new()
            };
            let control = (self.cfg.policy.is_some() || self.cfg.stream_window.is_some())
                && now >= p.next_control;
            if control {
                p.next_control = now.saturating_add(self.cfg.control_interval);
            }
            for (channel, name) in opens {
                self.emit(
                    cid,
                    &Body::Open {
                        channel,
                        name: &name,
                    },
                );
            }
            if let Some(r) = report {
                let mut body = Vec::new();
                r.encode(&mut body);
                self.emit(cid, &Body::Report(&body));
            }
            let mut buf = Vec::new();
            for chunk in counts.chunks(wire::MAX_CHANNEL_REPORTS) {
                let r = ChannelReports::encode(chunk, &mut buf);
                self.emit(cid, &Body::ChannelReport(r));
            }
            if probe {
                self.emit(cid, &Body::Probe);
            }
            if paced_due {
                self.release_frames(cid);
            }
            if control {
                self.control(now, cid);
                self.pump(now, cid, Pump::All);
            } else {
                for pump in due {
                    self.pump(now, cid, pump);
                }
            }
        }
    }

    fn poll_transmit(&mut self, _now: Instant) -> Option<Transmit> {
        self.transmits.pop_front().map(|(t, _)| t)
    }

    /// The code point is the channel's ([`Qos::dscp_value`], RFC 4594 by
    /// the capacity profile) for channel data and the feedback about it,
    /// `None` (unmarked) for control and stream frames.
    fn poll_transmit_marked(&mut self, _now: Instant) -> Option<(Transmit, Option<u8>)> {
        self.transmits
            .pop_front()
            .map(|(t, d)| (t, d.map(Dscp::bits)))
    }

    fn poll_event(&mut self) -> Option<SessionEvent> {
        self.events.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.next_timer()
    }
}

impl Session {
    /// A mechanism's control frame from peer `cid`: to the sending half of
    /// our channel it names (`peer_owned`), or to the receiving half of
    /// the peer's, made if need be (a frame before the channel's Open waits
    /// with the early packets). A receiving half may take a transfer of
    /// up to [`SessionConfig::max_blast`] bytes, less what the peer's
    /// other transfers hold of [`SessionConfig::blast_memory`].
    fn on_control(&mut self, now: Instant, cid: u32, f: &wire::ControlFrame<'_>) {
        let Some(kind) = MechanismKind::from_u8(f.mechanism).filter(|k| *k == MechanismKind::Blast)
        else {
            self.stats.unknown_mechanism += 1;
            return;
        };
        let (room, drain) = (self.cfg.room(), self.cfg.drain);
        let (max_blast, memory) = (self.cfg.max_blast, self.cfg.blast_memory);
        let Some(p) = self.peers.get_mut(&cid) else {
            return;
        };
        if f.peer_owned {
            let inst = p.out.get_mut(&f.channel).and_then(|c| {
                c.inst
                    .iter_mut()
                    .chain(c.draining.iter_mut().map(|(i, _)| i))
                    .find(|i| i.kind() == kind)
            });
            let Some(inst) = inst else {
                self.stats.unknown_channel += 1;
                return;
            };
            inst.handle_frame(now, true, f.payload, 0);
            self.pump(now, cid, Pump::Out(f.channel));
            return;
        }
        let held: u64 = p
            .incoming
            .iter()
            .filter(|(id, _)| **id != f.channel)
            .flat_map(|(_, c)| c.insts.values().map(|(i, _)| i.held()))
            .sum();
        let max_size = max_blast.min(memory.saturating_sub(held));
        let addr = p.addr;
        let Some(inc) = p.incoming.get_mut(&f.channel) else {
            p.hold_early(
                Early::Control {
                    channel: f.channel,
                    mechanism: f.mechanism,
                    payload: Bytes::copy_from_slice(f.payload),
                },
                &mut self.stats,
            );
            return;
        };
        let qos = p.out.get(&inc.local).map(|c| c.qos);
        let Some(inst) = receiving_inst(inc, kind, qos, addr, room, now, drain) else {
            self.stats.unknown_mechanism += 1;
            return;
        };
        inst.handle_frame(now, false, f.payload, max_size);
        self.pump(now, cid, Pump::In(f.channel));
    }
}

impl StreamMachine for Session {
    fn handle_frame(&mut self, now: Instant, _src: SocketAddr, stream: u8, frame: &[u8]) {
        self.accept_frame(now, Some(stream), frame);
    }

    fn handle_stream_sent(&mut self, now: Instant, dst: SocketAddr, stream: u8, bytes: usize) {
        self.now = self.now.max(now);
        let Some(&cid) = self.by_addr.get(&dst) else {
            return;
        };
        if let Some(p) = self.peers.get_mut(&cid)
            && let Some(u) = p.stream.unsent.get_mut(usize::from(stream))
        {
            *u = u.saturating_sub(bytes);
        }
        self.release_frames(cid);
    }
}

impl Session {
    /// [`handle_frame`](StreamMachine::handle_frame) that also says which
    /// peer and stream the frame came from: `Some` when it was accepted
    /// (opened under the key, well formed, for an established peer),
    /// `None` when it was counted in [`SessionStats::bad_frames`] and
    /// dropped. `stream` is the number of the stream the connection is
    /// bound to, `None` for a connection not bound yet: then only a bind
    /// frame ([`bind_frame`](Self::bind_frame)) is accepted, and the
    /// answer names the stream it binds. A driver binds a connection so,
    /// and closes a connection whose frame was refused.
    pub fn accept_frame(
        &mut self,
        now: Instant,
        stream: Option<u8>,
        frame: &[u8],
    ) -> Option<(PeerId, u8)> {
        self.now = self.now.max(now);
        self.stats.frames += 1;
        let Some(dcid) = frame
            .get(..4)
            .map(|b| u32::from_be_bytes(b.try_into().expect("4 bytes")))
        else {
            self.stats.bad_frames += 1;
            return None;
        };
        if stream.is_some_and(|k| k >= MAX_STREAMS) {
            self.stats.bad_frames += 1;
            return None;
        }
        let fresh = self.new_opener();
        let Some(p) = self.peers.get_mut(&dcid) else {
            self.stats.bad_frames += 1;
            return None;
        };
        let opener = match stream {
            None => p.bind_opener.as_mut(),
            Some(k) => match fresh {
                Some(o) => Some(p.frame_openers.entry(k).or_insert(o)),
                None => None,
            },
        };
        let plain = match opener {
            None => frame.to_vec(),
            Some(o) => match o.open(&frame[4..], true) {
                Ok(body) => {
                    let mut v = frame[..4].to_vec();
                    v.extend_from_slice(&body);
                    v
                }
                Err(_) => {
                    self.stats.bad_frames += 1;
                    return None;
                }
            },
        };
        // A mechanism's control frame, or a message (or the bind).
        let parsed = if wire::ControlFrame::is_control(&plain) {
            wire::ControlFrame::parse(&plain).map(Err)
        } else {
            Frame::parse(&plain).map(Ok)
        };
        let Ok(parsed) = parsed else {
            self.stats.bad_frames += 1;
            return None;
        };
        // An unbound connection's first frame binds it, and names its
        // stream (none named: stream 0).
        let was_bound = stream.is_some();
        let stream = match (stream, &parsed) {
            (Some(k), _) => k,
            (None, Ok(f)) if f.channel == wire::BIND_CHANNEL => {
                match f.payload.first().copied().unwrap_or(0) {
                    k if k < MAX_STREAMS && f.payload.len() <= 1 => k,
                    _ => {
                        self.stats.bad_frames += 1;
                        return None;
                    }
                }
            }
            (None, _) => {
                self.stats.bad_frames += 1;
                return None;
            }
        };
        match p.state {
            State::Established => {}
            // The frame names the connection id we chose at random and sent
            // only in the HelloAck to the peer's address: the same proof a
            // datagram carrying it gives (RFC 9000 §8.1). The stream's bind
            // frame often outruns the first datagram.
            State::Validating { .. } => self.established(now, dcid),
            State::Connecting { .. } => {
                self.stats.bad_frames += 1;
                return None;
            }
        }
        let p = self.peers.get_mut(&dcid).expect("looked up above");
        p.last_heard = now;
        p.streams_heard |= 1 << stream;
        // With its length prefix: what the stream carried.
        p.rx_mon.on_stream_bytes(now, frame.len() + FRAME_PREFIX);
        let bound = Some((PeerId(dcid), stream));
        let f = match parsed {
            Err(c) => {
                self.on_control(now, dcid, &c);
                return bound;
            }
            Ok(f) if f.channel == wire::BIND_CHANNEL => {
                // On a bound stream, `[k]` asks the side that dialed to
                // open stream `k` ([`Session::stripe_mask`]): an empty
                // frame on it makes the driver dial it.
                if let [k] = *f.payload
                    && was_bound
                    && p.dialed
                    && (1..MAX_STREAMS).contains(&k)
                    && p.streams_asked & (1 << k) == 0
                {
                    p.streams_asked |= 1 << k;
                    self.send_bind(dcid, k, &[]);
                }
                return bound;
            }
            Ok(f) => f,
        };
        if !p.incoming.contains_key(&f.channel) {
            p.hold_early(
                Early::Frame {
                    channel: f.channel,
                    msg: f.msg,
                    payload: Bytes::copy_from_slice(f.payload),
                },
                &mut self.stats,
            );
            return bound;
        }
        let payload = Bytes::copy_from_slice(f.payload);
        // Only a striped channel puts frames past stream 0; on stream 0
        // its frames cannot be told from a reliable channel's.
        let via = if stream == 0 {
            MechanismKind::Reliable
        } else {
            MechanismKind::Striped
        };
        self.deliver(dcid, f.channel, f.msg, payload, via, false);
        bound
    }
}
