//! The tunnel's sans-IO core: one [`BlockEndpoint`] toward one peer, the
//! rule for which peer that is, and the added latency of rebuilt packets.
//!
//! [`TunnelEndpoint`] is a [`Machine`] over the tunnel-facing socket:
//! datagrams in are block-FEC data and reports from the peer; its events
//! are the application's datagrams to hand out. The command
//! [`send`](TunnelEndpoint::send) takes a datagram from the application.
//! Polling order as for every machine: after any `handle_*` or command,
//! `poll_transmit` until `None`, `poll_event` until `None`, then
//! `poll_timeout`.
//!
//! **Which peer.** With a configured peer (`--peer`) only datagrams from
//! that address are accepted. Without one (`--forward`), the source of the
//! first valid data packet of the session becomes the peer ("valid":
//! parses, checksum matches, our session; a corrupted copy claims
//! nothing); until then the application's replies are dropped (there is
//! nowhere to send them). The peer keeps its slot while it is alive: any
//! valid packet from it within [`TunnelConfig::peer_idle`] (5 s in the
//! tunnel) keeps it; only after that much silence may a valid data packet
//! from another address take its place (a restarted or re-mapped peer),
//! with fresh FEC state. Datagrams from any other address are counted as
//! foreign and dropped. After the same silence from a fixed peer, its
//! next packet also starts fresh receive state, since a restarted peer
//! numbers its blocks from zero again. Without a key a checksum is no
//! proof of origin: a stranger who replays (or forges) a valid packet
//! before the real peer's first one still claims the slot until it falls
//! silent for `peer_idle`.
//!
//! **With a key** ([`TunnelConfig::key`]) every packet is sealed and
//! opened by the [`seal`] layer first: a packet that fails
//! authentication (too short, unknown version, tag mismatch, our own
//! packet reflected) or repeats one already taken (anti-replay window) is
//! counted and dropped before any FEC work, and it never claims the peer
//! slot, moves timers or gets a reply. So only a holder of the key can
//! take the slot, and a replay of its packets from anywhere takes nothing.
//! A new peer key (the peer restarted) is taken only under the same rule
//! as a new peer: none yet, or the peer silent for `peer_idle`.
//!
//! **No amplification.** Nothing is ever sent to an address before a
//! valid packet came from it: the learned peer is set only by one, and
//! reports go to the source of the latest valid data packet from the peer
//! in use. So an address that has sent only junk, corrupted copies or
//! another session's packets gets 0 bytes, whatever it sent.
//!
//! **Added latency** of a rebuilt packet: the time from the arrival of the
//! next-later data packet that did arrive (the first received source packet
//! with a higher data sequence number) to the rebuilt packet's delivery.
//! Had it not been lost, the packet would have arrived just before that
//! one, so this is what FEC recovery added, to within one inter-packet
//! gap. A packet rebuilt before any later source packet arrived (the end
//! of a block, rebuilt from repairs) added nothing and counts as zero.
//! Received packets are handed out at once and add no FEC delay.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;

use crate::block::{
    BlockEndpoint, BlockReceiver, BlockSender, ReceiverConfig, ReceiverStats, SendError,
    SenderConfig, SenderStats,
};
use crate::control::FecConfig;
use crate::control::target::TargetConfig;
use crate::sliding::{SlidingCode, SlidingConfig, SlidingEndpoint};
use crate::units::MAX_UDP_PAYLOAD;
use crate::wire::block::{DATA_HEADER_LEN, DataRepr, SYMBOL_PREFIX};
use crate::wire::rtp::{FEC_PREFIX_LEN, RtpHeader};
use crate::xor::{MEDIA_PT, Via, XorEndpoint, XorEndpointConfig, XorLayout};
use crate::{Instant, Machine, Transmit};
use bytes::Bytes;
use groupwire_metrics::{ChannelMeter, ChannelSnapshot, LatencyKind, Path};

pub mod seal;

pub use self::seal::Cipher;
use self::seal::{OpenError, Opener, Sealer};

/// The pre-shared key and this process's session salt.
#[derive(Clone)]
pub struct TunnelKey {
    /// The key (at least [`seal::MIN_KEY_LEN`] bytes).
    pub psk: Vec<u8>,
    /// This side's random session salt (seeded in tests).
    pub salt: u64,
    /// What this side seals with (it opens either).
    pub cipher: Cipher,
}

impl std::fmt::Debug for TunnelKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TunnelKey")
            .field("salt", &self.salt)
            .field("cipher", &self.cipher)
            .finish_non_exhaustive()
    }
}

/// How a [`TunnelEndpoint`] is set up. [`TunnelConfig::new`] gives the
/// defaults of `groupwire tunnel`; [`TunnelConfig::validate`] says what is
/// impossible.
#[derive(Clone, Debug)]
pub struct TunnelConfig {
    /// The peer, or `None` to learn it from the first valid packet.
    pub peer: Option<SocketAddr>,
    /// Sender template (its `peer` is replaced by the peer in use).
    pub sender: SenderConfig,
    /// Receiver configuration (unordered for a tunnel).
    pub receiver: ReceiverConfig,
    /// Silence after which another address may take the peer's place.
    pub peer_idle: Duration,
    /// Seal and open every packet with this key (`--key-file`).
    pub key: Option<TunnelKey>,
    /// The largest datagram on the link, sealed if keyed (the path MTU less
    /// IP and UDP headers). [`TunnelEndpoint::new`] sets the sender's
    /// `max_datagram` and the receiver's `max_symbol` from it, less
    /// [`seal::OVERHEAD`] under a key, so a sealed packet still fits: the
    /// template's own values for those two are not used.
    pub max_datagram: usize,
    /// XOR parity FEC in this layout instead of block FEC (`--fec xor:3`,
    /// Leigh et al. §4.1): media and SMPTE 2022-1 parity on the link, the
    /// sender's `session` as both sides' SSRC, open groups closed once the
    /// application has sent nothing for the sender's `max_block_wait`. The block sender's `k` and
    /// controller and the receiver's template are then not used, and no
    /// reports flow (the scheme is open loop).
    pub xor: Option<XorLayout>,
    /// A sliding-window code instead of block FEC (`--fec
    /// sliding:w=20,o=0.2`, RFC 8681; issue 15): every datagram leaves at
    /// once and a repair over the last `w` follows every `1/o` of them, so
    /// a loss is rebuilt by the next repair rather than at its block's
    /// end. The sender's `session` on both sides, a last repair once the
    /// application has sent nothing for the sender's `max_block_wait`;
    /// open loop like XOR (no reports). Ignored when `xor` is set.
    pub sliding: Option<SlidingCode>,
    /// With `sliding`: close the loop (`--fec sliding:target`): both sides
    /// report every 10 ms, and the target controller chooses the window
    /// and overhead that meet this residual target within its delay
    /// budget ([`crate::sliding`]'s "Closed loop"); `sliding` then gives
    /// only the largest window (at most the target's `k_max`).
    pub sliding_target: Option<TargetConfig>,
    /// The wall clock (microseconds since the Unix epoch) at the driver's
    /// [`Instant::ZERO`], if the driver has one: XOR media then carry
    /// wall-clock RTP timestamps and the channel's latency is one-way
    /// ([`XorEndpointConfig::shared_clock_micros`]). Block FEC reports half
    /// the sender's round trip instead.
    pub shared_clock_micros: Option<u64>,
}

impl TunnelConfig {
    /// `groupwire tunnel`'s defaults: `k` datagrams per block, GMIAD with
    /// the paper's window bounds (GENEVA §3.2.4), repairs sent at once (no
    /// pacing: "send originals at once; only recovered packets wait"), a
    /// short block closed 2 ms after its first datagram, unordered delivery,
    /// 200 ms to rebuild a missing datagram, 64 blocks held, 1472-byte link
    /// datagrams, a peer replaceable after 5 s of silence, no key. Without a
    /// `peer` the sender's address is a placeholder until one is learned.
    pub fn new(peer: Option<SocketAddr>, k: usize) -> Self {
        let placeholder = SocketAddr::from(([0, 0, 0, 0], 0));
        let mut sender = SenderConfig::new(peer.unwrap_or(placeholder), k);
        sender.controller = FecConfig::default();
        sender.pacing = false;
        sender.max_block_wait = Some(Duration::from_millis(2));
        let receiver = ReceiverConfig {
            ordered: false,
            max_wait: Duration::from_millis(200),
            max_blocks: 64,
            ..ReceiverConfig::default()
        };
        Self {
            peer,
            sender,
            receiver,
            peer_idle: PEER_IDLE,
            key: None,
            max_datagram: DEFAULT_MAX_DATAGRAM,
            xor: None,
            sliding: None,
            sliding_target: None,
            shared_clock_micros: None,
        }
    }

    /// What `--fec` names: the XOR layout, or the block controller.
    pub fn fec_name(&self) -> String {
        match (self.xor, self.sliding) {
            (Some(l), _) => l.to_string(),
            (None, Some(_)) if self.sliding_target.is_some() => "sliding:target".to_owned(),
            (None, Some(c)) => c.to_string(),
            (None, None) => self.sender.controller.to_string(),
        }
    }

    /// The closed-loop sliding-window code (`--fec sliding:target`):
    /// windows of up to `target.k_max` sources, their length and overhead
    /// chosen by the target controller for `target`
    /// ([`SlidingConfig::controlled`], which keeps half the budget as
    /// margin unless `target` sets one).
    pub fn use_sliding_target(&mut self, target: TargetConfig) {
        self.sliding = Some(SlidingCode {
            window: target.k_max.clamp(1, groupwire_codec::sliding::MAX_NSS) as u16,
            overhead: 1.0,
        });
        self.sliding_target = Some(target);
    }

    /// The sliding-window endpoint's configuration toward `peer`.
    fn sliding_config(&self, code: SlidingCode, peer: SocketAddr) -> SlidingConfig {
        let mut c = match self.sliding_target {
            Some(mut t) => {
                t.k_max = t.k_max.min(usize::from(code.window)).max(1);
                SlidingConfig::controlled(peer, t)
            }
            None => SlidingConfig::new(peer, code),
        };
        c.session = self.sender.session;
        c.flush_after = self.sender.max_block_wait;
        c.max_datagram = self.inner_datagram();
        c
    }

    /// The XOR endpoint's configuration toward `peer`.
    fn xor_config(&self, layout: XorLayout, peer: SocketAddr) -> XorEndpointConfig {
        let mut c = XorEndpointConfig::new(peer, layout);
        c.ssrc = self.sender.session;
        c.peer_ssrc = Some(self.sender.session);
        c.close_when_idle = self.sender.max_block_wait;
        c.max_datagram = self.inner_datagram();
        c.shared_clock_micros = self.shared_clock_micros;
        c
    }

    /// What the channel's latency figures mean (see [`TunnelEndpoint::channel`]).
    pub fn latency_kind(&self) -> LatencyKind {
        match (self.xor, self.shared_clock_micros) {
            // Open loop, no timestamps: what recovery added only.
            (None, _) if self.sliding.is_some() => LatencyKind::AboveBase,
            (None, _) => LatencyKind::HalfRtt,
            (Some(_), Some(_)) => LatencyKind::OneWay,
            (Some(_), None) => LatencyKind::AboveBase,
        }
    }

    /// The bytes a source datagram may have: [`max_datagram`](Self::max_datagram)
    /// less the seal (under a key), the data header and the symbol prefix.
    pub fn max_payload(&self) -> usize {
        if self.xor.is_some() {
            return self.inner_datagram().saturating_sub(FEC_PREFIX_LEN);
        }
        if self.sliding.is_some() {
            return crate::sliding::max_payload(self.inner_datagram());
        }
        self.inner_datagram()
            .saturating_sub(DATA_HEADER_LEN + SYMBOL_PREFIX)
    }

    /// The largest block packet before sealing.
    fn inner_datagram(&self) -> usize {
        let seal = if self.key.is_some() {
            seal::OVERHEAD
        } else {
            0
        };
        self.max_datagram.saturating_sub(seal)
    }

    /// Checks what the machines would otherwise clamp or refuse at run time.
    ///
    /// - `k` from 1 to 254 (a Reed-Solomon block over GF(2⁸) has at most 255
    ///   symbols, and at least one repair must fit);
    /// - a controller without rate control (the tunnel carries the
    ///   application's datagrams as they come; TFRC would have to queue them);
    /// - GMIAD's `fwnd_min <= fwnd_max`, and `k + fwnd_min <= 255`. Above
    ///   that the sender caps `Fwnd` at `255 − k`;
    /// - a `max_datagram` from the smallest packet carrying one byte to the
    ///   largest UDP payload.
    pub fn validate(&self) -> Result<(), TunnelConfigError> {
        let bad = |field, why: String| Err(TunnelConfigError { field, why });
        if let Some(layout) = self.xor {
            if let Err(e) = layout.validate() {
                return bad("controller", e.0);
            }
            return self.validate_max_datagram(FEC_PREFIX_LEN);
        }
        if let Some(code) = self.sliding {
            if let Err(e) = code.validate() {
                return bad("controller", e);
            }
            if let Some(Err(e)) = self.sliding_target.map(|t| t.validate()) {
                return bad("controller", e);
            }
            // A repair carries the largest symbol: one byte of payload
            // needs the repair header and an ADUI of one byte.
            return self.validate_max_datagram(
                crate::sliding::REPAIR_HEADER_LEN + groupwire_codec::sliding::ADUI_HEADER_LEN,
            );
        }
        let k = self.sender.k;
        if !(1..=254).contains(&k) {
            return bad("k", format!("{k}: must be from 1 to 254"));
        }
        if self.sender.controller.is_rate_controlled() {
            return bad(
                "controller",
                format!(
                    "{}: the tunnel has no rate control; use target, gmiad, static:N, \
                     static-small, static-large or dp-fec",
                    self.sender.controller
                ),
            );
        }
        let gmiad = match &self.sender.controller {
            FecConfig::Gmiad(g) => Some(g),
            _ => None,
        };
        if let FecConfig::Target(t) = &self.sender.controller {
            if let Err(why) = t.validate() {
                return bad("controller", format!("target: {why}"));
            }
        }
        if let Some(g) = gmiad.filter(|g| g.fwnd_min > g.fwnd_max || k + g.fwnd_min > 255) {
            return bad(
                "fwnd_min",
                format!(
                    "{} (fwnd_max {}, k {k}): need fwnd_min <= fwnd_max and k + fwnd_min <= 255",
                    g.fwnd_min, g.fwnd_max
                ),
            );
        }
        self.validate_max_datagram(DATA_HEADER_LEN + SYMBOL_PREFIX)
    }

    /// `max_datagram` from the smallest packet carrying one byte (`header`
    /// and the seal before it) to the largest UDP payload.
    fn validate_max_datagram(&self, header: usize) -> Result<(), TunnelConfigError> {
        let seal = if self.key.is_some() {
            seal::OVERHEAD
        } else {
            0
        };
        let min = header + 1 + seal;
        if !(min..=MAX_UDP_PAYLOAD).contains(&self.max_datagram) {
            return Err(TunnelConfigError {
                field: "max_datagram",
                why: format!(
                    "{}: must be from {min} to {MAX_UDP_PAYLOAD}{}",
                    self.max_datagram,
                    if seal > 0 { " under a key" } else { "" }
                ),
            });
        }
        Ok(())
    }
}

/// A [`TunnelConfig`] field with an impossible value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("tunnel {field} {why}")]
pub struct TunnelConfigError {
    /// The field (`k`, `controller`, `fwnd_min`, `max_datagram`).
    pub field: &'static str,
    /// Its value and what is wrong with it.
    pub why: String,
}

/// A datagram for the application.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TunnelDelivery {
    /// The datagram, as the far side's application sent it.
    pub payload: Bytes,
    /// Rebuilt by the code, with the latency the recovery added.
    pub recovered: Option<Duration>,
}

/// What the tunnel dropped before its FEC machines saw it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TunnelStats {
    /// Datagrams from an address that is not the peer.
    pub foreign: u64,
    /// Datagrams before a peer was known that were not a valid data packet
    /// of the session.
    pub invalid_before_peer: u64,
    /// Application datagrams dropped because no peer is known yet.
    pub no_peer: u64,
    /// Application datagrams the sender refused (queue full).
    pub refused: u64,
    /// Application datagrams larger than the tunnel carries
    /// ([`SenderConfig::max_payload`]), and their bytes.
    pub too_large: u64,
    /// The bytes of those datagrams.
    pub too_large_bytes: u64,
    /// Times the FEC state was started afresh (new or silent peer).
    pub restarts: u64,
    /// With a key: datagrams that failed authentication.
    pub unauthenticated: u64,
    /// With a key: authentic datagrams seen before, too old for the
    /// replay window, or under a replaced peer key.
    pub replayed: u64,
    /// With a key: packets not sent because this key's sequence numbers
    /// ran out (after 2^64 packets).
    pub seal_exhausted: u64,
}

/// Counters over every FEC state the tunnel has had (a new peer, or a
/// restarted one, gets fresh machines): the sending half's and the
/// receiving half's own stats, accumulated with
/// [`SenderStats::accumulate`] and `+=` on [`ReceiverStats`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Totals {
    /// The block senders'.
    pub sender: SenderStats,
    /// The block receivers'.
    pub receiver: ReceiverStats,
}

impl Totals {
    /// Loss left after FEC in our direction, as the far side's reports
    /// show it: the larger of what it gave up on and what it never
    /// delivered of the source packets it had echoed (datagrams that
    /// reached someone else, or nobody, count too). `None` until a report
    /// came: the far side is not up, or not reachable.
    pub fn sent_residual(&self) -> Option<f64> {
        self.sender.last_report_at?;
        let reported = ratio(
            self.sender.peer_unrecovered,
            self.sender
                .peer_delivered
                .saturating_add(self.sender.peer_unrecovered),
        );
        let unseen = ratio(
            self.sender
                .peer_sent
                .saturating_sub(self.sender.peer_delivered),
            self.sender.peer_sent,
        );
        Some(reported.max(unseen))
    }

    /// Datagrams the machines dropped as not a valid packet (data or
    /// report).
    pub fn malformed(&self) -> u64 {
        self.sender
            .malformed
            .saturating_add(self.receiver.malformed)
    }

    fn add(&mut self, s: &SenderStats, r: &ReceiverStats) {
        self.sender.accumulate(s);
        self.receiver += *r;
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

/// The tunnel's machine. See the [module docs](self).
#[derive(Debug)]
pub struct TunnelEndpoint {
    cfg: TunnelConfig,
    peer: Option<SocketAddr>,
    last_heard: Option<Instant>,
    inner: Option<Fec>,
    /// Totals of FEC states already replaced.
    retired: Totals,
    /// Arrival time of received source packets, by `data_seq % len`.
    arrivals: Vec<(u64, Instant)>,
    events: VecDeque<TunnelDelivery>,
    stats: TunnelStats,
    crypto: Option<(Sealer, Opener)>,
    /// Bandwidth, latency, jitter, burstiness and recovery of the channel
    /// (Leigh et al. §4).
    meter: ChannelMeter,
}

impl TunnelEndpoint {
    /// With a key, data packets go without their CRC-32 (the AEAD's tag
    /// catches what it would, and it was most of the keyed tunnel's extra
    /// cost) and are taken without one; without a key both are checked.
    pub fn new(mut cfg: TunnelConfig) -> Self {
        cfg.sender.checksums = cfg.key.is_none();
        cfg.receiver.allow_unchecked = cfg.key.is_some();
        let inner = cfg.inner_datagram();
        cfg.sender.max_datagram = inner;
        cfg.receiver.max_symbol = inner.saturating_sub(DATA_HEADER_LEN);
        let meter = ChannelMeter::new(
            format!("tunnel {}", cfg.fec_name()),
            cfg.latency_kind(),
            Instant::ZERO,
        );
        let mut t = Self {
            meter,
            peer: cfg.peer,
            cfg,
            last_heard: None,
            inner: None,
            retired: Totals::default(),
            arrivals: vec![(u64::MAX, Instant::ZERO); ARRIVALS],
            events: VecDeque::new(),
            stats: TunnelStats::default(),
            crypto: None,
        };
        if let Some(k) = &t.cfg.key {
            t.crypto = Some((
                Sealer::new(&k.psk, k.salt, k.cipher),
                Opener::new(&k.psk, k.salt),
            ));
        }
        if let Some(p) = t.peer {
            t.inner = Some(t.fresh(p));
        }
        t
    }

    /// The peer in use.
    pub fn peer(&self) -> Option<SocketAddr> {
        self.peer
    }

    /// The channel's measures as of `now` (the driver's clock, whose
    /// [`Instant::ZERO`] is the meter's start): datagrams on the link both
    /// ways, and every datagram delivered to the application with its
    /// latency and recovery path. Latency is half the sender's round trip
    /// plus what recovery added under block FEC, and from the RTP timestamps
    /// under XOR ([`TunnelConfig::latency_kind`]). Starts a new interval.
    pub fn channel(&mut self, now: Instant) -> ChannelSnapshot {
        self.meter.snapshot(now)
    }

    /// Judges every datagram still in the meter's window (call at the end,
    /// before the last [`channel`](Self::channel)).
    pub fn finish_channel(&mut self) {
        self.meter.finish();
    }

    /// What the tunnel dropped before its FEC machines saw it.
    pub fn stats(&self) -> TunnelStats {
        self.stats
    }

    /// Counters over the tunnel's whole life.
    pub fn totals(&self) -> Totals {
        let mut t = self.retired;
        if let Some(ep) = &self.inner {
            ep.add_to(&mut t);
        }
        t
    }

    /// Whether the FEC runs without reports from the far side (XOR
    /// parity), so nothing here knows what the far side receives.
    pub fn open_loop(&self) -> bool {
        self.cfg.xor.is_some() || (self.cfg.sliding.is_some() && self.cfg.sliding_target.is_none())
    }

    /// The repair packets the next full block gets.
    pub fn fwnd(&self) -> Option<usize> {
        match self.inner.as_ref()? {
            Fec::Block(ep) => Some(ep.sender.fwnd()),
            Fec::Xor(_) | Fec::Sliding(_) => None,
        }
    }

    /// The source packets the next block holds if it fills (the target
    /// controller chooses it; other controllers keep the configured `k`).
    pub fn k(&self) -> Option<usize> {
        match self.inner.as_ref()? {
            Fec::Block(ep) => Some(ep.sender.k()),
            Fec::Xor(_) | Fec::Sliding(_) => None,
        }
    }

    /// The target controller's code and what it expects of it
    /// (`--fec target` only).
    pub fn target_status(&self) -> Option<crate::control::target::TargetStatus> {
        match self.inner.as_ref()? {
            Fec::Block(ep) => ep.sender.controller().target_status(),
            Fec::Sliding(ep) => ep.target_status(),
            Fec::Xor(_) => None,
        }
    }

    /// Blocks the receiver holds now (bounded by its `max_blocks`).
    pub fn blocks_held(&self) -> usize {
        match &self.inner {
            Some(Fec::Block(ep)) => ep.receiver.blocks_held(),
            _ => 0,
        }
    }

    /// A datagram from the application, for the peer. Dropped (and
    /// counted) without a peer or if the sender refuses it.
    ///
    /// Queueing (see [`Machine`]'s drain contract): a driver may send a
    /// whole batch before draining; what the sends produce waits here.
    pub fn send(&mut self, now: Instant, payload: Bytes) -> Result<(), SendRefused> {
        let Some(ep) = self.inner.as_mut() else {
            self.stats.no_peer += 1;
            return Err(SendRefused::NoPeer);
        };
        let len = payload.len() as u64;
        let sent = match ep {
            Fec::Block(ep) => ep.sender.send(now, payload).map(|_| ()),
            Fec::Xor(ep) => ep.send(now, &payload).map_err(|e| SendError::TooLarge {
                len: e.len,
                max: e.max,
            }),
            Fec::Sliding(ep) => {
                let max = ep.config().max_payload();
                ep.send(now, &payload).map_err(|_| SendError::TooLarge {
                    len: payload.len(),
                    max,
                })
            }
        };
        sent.map_err(|e| {
            if matches!(e, SendError::TooLarge { .. }) {
                self.stats.too_large += 1;
                self.stats.too_large_bytes += len;
            } else {
                self.stats.refused += 1;
            }
            SendRefused::Sender(e)
        })
    }

    fn fresh(&self, peer: SocketAddr) -> Fec {
        if let Some(layout) = self.cfg.xor {
            let ep = XorEndpoint::new(self.cfg.xor_config(layout, peer)).expect("validated layout");
            return Fec::Xor(Box::new(ep));
        }
        if let Some(code) = self.cfg.sliding {
            let ep =
                SlidingEndpoint::new(self.cfg.sliding_config(code, peer)).expect("validated code");
            return Fec::Sliding(Box::new(ep));
        }
        let mut s = self.cfg.sender.clone();
        s.peer = peer;
        Fec::Block(Box::new(BlockEndpoint::new(
            BlockSender::new(s),
            BlockReceiver::new(self.cfg.receiver.clone()),
        )))
    }

    /// A data packet of this session: a block data packet, or an XOR
    /// media packet with the session's SSRC (parity carries SSRC 0, so it
    /// claims nothing).
    fn is_valid_data(&self, data: &[u8]) -> bool {
        if self.cfg.xor.is_some() {
            return RtpHeader::parse(data).is_ok_and(|(h, _)| {
                h.ssrc == self.cfg.sender.session && h.payload_type == MEDIA_PT
            });
        }
        if self.cfg.sliding.is_some() {
            return crate::sliding::is_source_of(data, self.cfg.sender.session);
        }
        DataRepr::parse_with(data, self.cfg.receiver.allow_unchecked)
            .is_ok_and(|d| d.session == self.cfg.sender.session)
    }

    fn silent(&self, now: Instant) -> bool {
        self.last_heard
            .is_some_and(|t| now.saturating_duration_since(t) >= self.cfg.peer_idle)
    }

    /// Replaces the FEC state (all of it, or the receiving half).
    fn restart(&mut self, peer: SocketAddr, whole: bool) {
        self.stats.restarts += 1;
        match self.inner.as_mut() {
            Some(Fec::Block(ep)) if !whole => {
                let old = std::mem::replace(
                    &mut ep.receiver,
                    BlockReceiver::new(self.cfg.receiver.clone()),
                );
                // The sender's counters stay with the sender.
                self.retired.receiver += old.stats();
            }
            _ => {
                // XOR's halves share no state worth keeping: a silent
                // peer's return starts both afresh.
                if let Some(old) = self.inner.take() {
                    old.add_to(&mut self.retired);
                }
                self.peer = Some(peer);
                self.inner = Some(self.fresh(peer));
            }
        }
        self.arrivals.fill((u64::MAX, Instant::ZERO));
        // The new state numbers from its own start.
        self.meter.restart_numbering();
    }

    /// Moves the inner machine's deliveries out, stamped with `now`.
    fn collect(&mut self, now: Instant) {
        let ep = match self.inner.as_mut() {
            Some(Fec::Block(ep)) => ep,
            Some(Fec::Xor(ep)) => {
                while let Some(d) = ep.poll_event() {
                    let path = match d.recovered {
                        None => Path::Arrived,
                        Some((Via::Row, _)) => Path::XorRow,
                        Some((Via::Column, _)) => Path::XorColumn,
                    };
                    self.meter.delivered(d.index, path, d.latency);
                    self.events.push_back(TunnelDelivery {
                        payload: d.payload,
                        recovered: d.recovered.map(|(_, added)| added),
                    });
                }
                return;
            }
            Some(Fec::Sliding(ep)) => {
                while let Some(d) = ep.poll_event() {
                    let path = if d.recovered.is_some() {
                        Path::Block
                    } else {
                        Path::Arrived
                    };
                    // Open loop and no timestamps: the latency is what
                    // recovery added (zero for what arrived itself).
                    self.meter.delivered(
                        u64::from(d.esi),
                        path,
                        Some(d.recovered.unwrap_or_default()),
                    );
                    self.events.push_back(TunnelDelivery {
                        payload: d.payload,
                        recovered: d.recovered,
                    });
                }
                return;
            }
            None => return,
        };
        while let Some(d) = ep.poll_event() {
            let len = self.arrivals.len() as u64;
            let recovered = if d.recovered {
                let later = (1..=LATER_SCAN).find_map(|j| {
                    let s = d.data_seq + j;
                    let (seq, at) = self.arrivals[(s % len) as usize];
                    (seq == s).then_some(at)
                });
                Some(later.map_or(Duration::ZERO, |at| now.saturating_duration_since(at)))
            } else {
                self.arrivals[(d.data_seq % len) as usize] = (d.data_seq, now);
                None
            };
            let path = if d.recovered {
                Path::Block
            } else {
                Path::Arrived
            };
            let latency = ep
                .receiver
                .peer_rtt()
                .map(|rtt| rtt / 2 + recovered.unwrap_or_default());
            self.meter.delivered(d.data_seq, path, latency);
            self.events.push_back(TunnelDelivery {
                payload: d.payload,
                recovered,
            });
        }
    }
}

/// Why [`TunnelEndpoint::send`] dropped a datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendRefused {
    /// No peer known yet.
    NoPeer,
    /// The block sender refused it.
    Sender(SendError),
}

impl Machine for TunnelEndpoint {
    type Event = TunnelDelivery;

    /// Any input is safe: invalid or foreign datagrams are counted and dropped.
    fn handle_datagram(&mut self, now: Instant, src: SocketAddr, data: &[u8]) {
        let wire_len = data.len();
        let opened;
        let silent = self.silent(now);
        let data = if let Some((_, opener)) = self.crypto.as_mut() {
            // A stranger while the peer is alive: no crypto work for it.
            if self
                .peer
                .is_some_and(|p| p != src && (self.cfg.peer.is_some() || !silent))
            {
                self.stats.foreign += 1;
                return;
            }
            let may_switch = self.last_heard.is_none() || silent;
            match opener.open(data, may_switch) {
                Ok(plain) => {
                    opened = plain;
                    &opened[..]
                }
                Err(OpenError::Unauthenticated) => {
                    self.stats.unauthenticated += 1;
                    return;
                }
                Err(OpenError::Replayed) => {
                    self.stats.replayed += 1;
                    return;
                }
                Err(OpenError::OtherKey) => {
                    self.stats.foreign += 1;
                    return;
                }
            }
        } else {
            data
        };
        match self.peer {
            None => {
                if !self.is_valid_data(data) {
                    self.stats.invalid_before_peer += 1;
                    return;
                }
                self.restart(src, true);
                self.stats.restarts -= 1; // learning the first peer is no restart
            }
            Some(p) if p != src => {
                let learnable = self.cfg.peer.is_none();
                if learnable && self.silent(now) && self.is_valid_data(data) {
                    self.restart(src, true);
                } else {
                    self.stats.foreign += 1;
                    return;
                }
            }
            Some(p) => {
                if self.silent(now) && self.is_valid_data(data) {
                    self.restart(p, false);
                }
            }
        }
        self.meter.received(wire_len);
        let ep = self.inner.as_mut().expect("a peer has an endpoint");
        let before = ep.heard();
        ep.machine().take_datagram(now, src, data);
        if ep.heard() != before {
            self.last_heard = Some(now);
        }
        self.collect(now);
    }

    fn handle_timeout(&mut self, now: Instant) {
        if let Some(ep) = self.inner.as_mut() {
            ep.machine().take_timeout(now);
        }
        self.collect(now);
    }

    fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
        loop {
            let mut t = self.inner.as_mut()?.machine().next_transmit(now)?;
            let Some((sealer, _)) = self.crypto.as_mut() else {
                self.meter.sent(t.payload.len());
                return Some(t);
            };
            match sealer.seal(&t.payload) {
                Some(sealed) => {
                    t.payload = Bytes::from(sealed);
                    self.meter.sent(t.payload.len());
                    return Some(t);
                }
                None => self.stats.seal_exhausted += 1,
            }
        }
    }

    fn poll_event(&mut self) -> Option<TunnelDelivery> {
        self.events.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        match self.inner.as_ref()? {
            Fec::Block(ep) => ep.poll_timeout(),
            Fec::Xor(ep) => ep.poll_timeout(),
            Fec::Sliding(ep) => ep.poll_timeout(),
        }
    }
}

/// The FEC machine toward the peer: block FEC (GENEVA) or XOR parity
/// (Leigh et al.).
#[derive(Debug)]
enum Fec {
    Block(Box<BlockEndpoint>),
    Xor(Box<XorEndpoint>),
    Sliding(Box<SlidingEndpoint>),
}

/// The datagram-facing part both machines share (their events differ).
/// (Named apart from [`Machine`]'s methods, which every machine also has.)
trait Link {
    fn take_datagram(&mut self, now: Instant, src: SocketAddr, data: &[u8]);
    fn take_timeout(&mut self, now: Instant);
    fn next_transmit(&mut self, now: Instant) -> Option<Transmit>;
}

impl<M: Machine> Link for M {
    fn take_datagram(&mut self, now: Instant, src: SocketAddr, data: &[u8]) {
        self.handle_datagram(now, src, data);
    }
    fn take_timeout(&mut self, now: Instant) {
        self.handle_timeout(now);
    }
    fn next_transmit(&mut self, now: Instant) -> Option<Transmit> {
        self.poll_transmit(now)
    }
}

impl Fec {
    fn machine(&mut self) -> &mut dyn Link {
        match self {
            Self::Block(ep) => ep.as_mut(),
            Self::Xor(ep) => ep.as_mut(),
            Self::Sliding(ep) => ep.as_mut(),
        }
    }

    /// Counts that move when a valid packet from the peer was taken.
    fn heard(&self) -> (u64, u64) {
        match self {
            Self::Block(ep) => (ep.receiver.stats().packets, ep.sender.stats().reports),
            Self::Xor(ep) => {
                let d = ep.decoder_stats();
                (
                    d.media + d.media_duplicate + d.media_late,
                    d.fec + d.fec_duplicate,
                )
            }
            Self::Sliding(ep) => {
                let s = ep.stats();
                (s.sources_received, s.repairs_received + s.reports_received)
            }
        }
    }

    /// Adds this machine's counters to `t`, XOR's in the block machines'
    /// terms: media packets are sources, parity packets repairs, and there
    /// are no blocks or reports.
    fn add_to(&self, t: &mut Totals) {
        match self {
            Self::Block(ep) => t.add(&ep.sender.stats(), &ep.receiver.stats()),
            Self::Xor(ep) => {
                let (s, e, d) = (ep.stats(), ep.encoder_stats(), ep.decoder_stats());
                let sender = SenderStats {
                    source_sent: s.media_sent,
                    repair_sent: e.row_fec + e.column_fec,
                    bytes_sent: s.media_bytes + e.fec_bytes,
                    refused: s.too_large,
                    ..SenderStats::default()
                };
                let receiver = ReceiverStats {
                    packets: d.media + d.fec,
                    source_packets: d.media,
                    repair_packets: d.fec,
                    lost_packets: s.lost,
                    delivered: s.delivered + s.recovered,
                    recovered: s.recovered,
                    unrecovered: s.unrecovered,
                    malformed: s.malformed + d.media_malformed + d.fec_malformed,
                    duplicates: d.media_duplicate + d.fec_duplicate,
                    late: d.media_late,
                    inconsistent: d.fec_mismatched + d.bad_length,
                    stale: d.fec_out_of_window,
                    evicted: d.evicted + d.fec_full,
                    ..ReceiverStats::default()
                };
                t.add(&sender, &receiver);
            }
            Self::Sliding(ep) => {
                let s = ep.stats();
                // The peer's delivered: what arrived, and what went
                // missing less what it gave up (the rest rebuilt, or still
                // in its decoding window).
                let peer_delivered =
                    (s.peer_received + s.peer_lost).saturating_sub(s.peer_unrecovered);
                let sender = SenderStats {
                    source_sent: s.sources_sent,
                    repair_sent: s.repairs_sent,
                    bytes_sent: s.bytes_sent,
                    refused: s.too_large,
                    reports: s.reports_received,
                    peer_delivered,
                    peer_recovered: peer_delivered.saturating_sub(s.peer_received),
                    peer_unrecovered: s.peer_unrecovered,
                    last_report_at: s.last_report_at,
                    ..SenderStats::default()
                };
                let receiver = ReceiverStats {
                    packets: s.sources_received + s.repairs_received,
                    source_packets: s.sources_received,
                    repair_packets: s.repairs_received,
                    lost_packets: s.sources_lost + s.repairs_lost,
                    delivered: s.delivered + s.rebuilt,
                    recovered: s.rebuilt,
                    unrecovered: s.unrecovered,
                    malformed: s.malformed,
                    duplicates: s.duplicates,
                    ..ReceiverStats::default()
                };
                t.add(&sender, &receiver);
            }
        }
    }
}

/// Received source packets remembered for the added-latency measure: more
/// than the reorder span of a block (255 symbols).
const ARRIVALS: usize = 4096;

/// Silence after which a learned peer may be replaced (a restarted or
/// re-mapped peer gets through; a stray packet during traffic does not).
const PEER_IDLE: Duration = Duration::from_secs(5);

/// The largest UDP payload in a 1500-byte Ethernet frame (1500 − 20 − 8).
pub const DEFAULT_MAX_DATAGRAM: usize = 1472;
/// How far past a rebuilt packet to look for the next received one: one
/// block at most.
const LATER_SCAN: u64 = 255;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::ControllerKind;

    const A: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 1);
    const B: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 2);
    const C: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 3);

    fn config(peer: Option<SocketAddr>, fec: ControllerKind) -> TunnelConfig {
        let mut cfg = TunnelConfig::new(peer, 4);
        cfg.sender.controller = fec.into();
        cfg
    }

    #[test]
    fn validate_names_the_field_and_the_defaults_pass() {
        let ok = TunnelConfig::new(None, 20);
        assert_eq!(ok.validate(), Ok(()));
        assert_eq!(ok.max_payload(), 1472 - DATA_HEADER_LEN - SYMBOL_PREFIX);
        let field = |f: &dyn Fn(&mut TunnelConfig)| {
            let mut c = TunnelConfig::new(None, 20);
            f(&mut c);
            c.validate().map_err(|e| e.field)
        };
        assert_eq!(field(&|c| c.sender.k = 0), Err("k"));
        assert_eq!(field(&|c| c.sender.k = 255), Err("k"));
        assert_eq!(
            field(&|c| c.sender.controller = FecConfig::Tfrc),
            Err("controller")
        );
        let gmiad =
            |c: &mut TunnelConfig| c.sender.controller.gmiad_mut().expect("GMIAD").fwnd_min = 61;
        assert_eq!(field(&gmiad), Err("fwnd_min"));
        assert_eq!(field(&|c| c.sender.k = 250), Err("fwnd_min"));
        // The sender caps Fwnd at 255 - k: a large k with the default
        // fwnd_max is fine.
        assert_eq!(field(&|c| c.sender.k = 200), Ok(()));
        assert_eq!(field(&|c| c.max_datagram = 38), Err("max_datagram"));
        assert_eq!(field(&|c| c.max_datagram = 39), Ok(()));
        assert_eq!(field(&|c| c.max_datagram = 65_508), Err("max_datagram"));
        // Under a key the seal must fit too, and the payload shrinks by it.
        let key = |c: &mut TunnelConfig| {
            c.key = Some(TunnelKey {
                psk: vec![7; 32],
                salt: 1,
                cipher: Cipher::ChaCha20Poly1305,
            });
        };
        assert_eq!(
            field(&|c| {
                key(c);
                c.max_datagram = 39;
            }),
            Err("max_datagram")
        );
        let mut keyed = TunnelConfig::new(None, 20);
        key(&mut keyed);
        assert_eq!(keyed.max_payload(), ok.max_payload() - seal::OVERHEAD);
    }

    /// A sealed packet of the largest payload fits the configured link
    /// datagram exactly, keyed or not.
    #[test]
    fn the_largest_payload_fills_the_link_datagram() {
        for keyed in [false, true] {
            let mut cfg = TunnelConfig::new(Some(B), 1);
            cfg.sender.controller = ControllerKind::Static(1).into();
            cfg.max_datagram = 600;
            if keyed {
                cfg.key = Some(TunnelKey {
                    psk: vec![7; 32],
                    salt: 1,
                    cipher: Cipher::ChaCha20Poly1305,
                });
            }
            let max = cfg.max_payload();
            let mut a = TunnelEndpoint::new(cfg);
            let now = Instant::ZERO;
            assert!(a.send(now, Bytes::from(vec![1; max + 1])).is_err());
            let out = packets(&mut a, now, &[&vec![1; max]]);
            let lens: Vec<usize> = out.iter().map(Bytes::len).collect();
            assert_eq!(lens, [600 - SYMBOL_PREFIX, 600], "keyed {keyed}");
        }
    }

    /// Data packets `a` (at A, peer B) sends for `payloads`.
    fn packets(a: &mut TunnelEndpoint, now: Instant, payloads: &[&[u8]]) -> Vec<Bytes> {
        for p in payloads {
            a.send(now, Bytes::copy_from_slice(p)).expect("sent");
        }
        let mut out = Vec::new();
        while let Some(t) = a.poll_transmit(now) {
            out.push(t.payload);
        }
        out
    }

    #[test]
    fn learns_the_peer_from_the_first_valid_packet_and_ignores_others() {
        let mut a = TunnelEndpoint::new(config(Some(B), ControllerKind::Static(1)));
        let mut b = TunnelEndpoint::new(config(None, ControllerKind::Static(1)));
        let now = Instant::from_millis(1);
        // Replies before the peer is known have nowhere to go.
        assert_eq!(
            b.send(now, Bytes::from_static(b"x")),
            Err(SendRefused::NoPeer)
        );
        b.handle_datagram(now, C, b"garbage");
        assert_eq!(b.peer(), None);
        let pkts = packets(&mut a, now, &[b"one", b"two", b"three", b"four"]);
        assert_eq!(pkts.len(), 5, "4 sources + 1 repair");
        for p in &pkts {
            b.handle_datagram(now, A, p);
        }
        assert_eq!(b.peer(), Some(A));
        // The same packets from elsewhere are foreign.
        b.handle_datagram(now, C, &pkts[0]);
        let got: Vec<_> = std::iter::from_fn(|| b.poll_event()).collect();
        assert_eq!(got.len(), 4);
        assert!(got.iter().all(|d| d.recovered.is_none()));
        let s = b.stats();
        assert_eq!((s.invalid_before_peer, s.foreign, s.no_peer), (1, 1, 1));
        // Replies now go to A.
        b.send(now, Bytes::from_static(b"reply"))
            .expect("peer known");
        let t = b.poll_transmit(now).expect("a data packet");
        assert_eq!(t.dst, A);
    }

    #[test]
    fn a_silent_peer_can_be_replaced_by_a_new_address() {
        let mut a = TunnelEndpoint::new(config(Some(B), ControllerKind::Static(0)));
        let mut b = TunnelEndpoint::new(config(None, ControllerKind::Static(0)));
        let t0 = Instant::from_millis(1);
        for p in packets(&mut a, t0, &[b"a"]) {
            b.handle_datagram(t0, A, &p);
        }
        // A restarted peer (fresh numbering) at a new address, too soon:
        let mut a2 = TunnelEndpoint::new(config(Some(B), ControllerKind::Static(0)));
        let p = packets(&mut a2, t0, &[b"b"]);
        b.handle_datagram(t0 + Duration::from_secs(1), C, &p[0]);
        assert_eq!((b.peer(), b.stats().foreign), (Some(A), 1));
        // ... and after the idle time.
        b.handle_datagram(t0 + Duration::from_secs(6), C, &p[0]);
        assert_eq!((b.peer(), b.stats().restarts), (Some(C), 1));
        assert_eq!(b.totals().receiver.delivered, 2);
    }

    #[test]
    fn rebuilt_packets_carry_the_latency_recovery_added() {
        let mut a = TunnelEndpoint::new(config(Some(B), ControllerKind::Static(2)));
        let mut b = TunnelEndpoint::new(config(None, ControllerKind::Static(2)));
        let t0 = Instant::from_millis(10);
        let pkts = packets(&mut a, t0, &[b"s0", b"s1", b"s2", b"s3"]);
        assert_eq!(pkts.len(), 6);
        // s1 lost; s2 arrives at +1 ms, the first repair at +4 ms.
        let at = |ms| t0 + Duration::from_millis(ms);
        b.handle_datagram(at(0), A, &pkts[0]);
        b.handle_datagram(at(1), A, &pkts[2]);
        b.handle_datagram(at(2), A, &pkts[3]);
        b.handle_datagram(at(4), A, &pkts[4]);
        let got: Vec<_> = std::iter::from_fn(|| b.poll_event()).collect();
        let rebuilt: Vec<_> = got.iter().filter(|d| d.recovered.is_some()).collect();
        assert_eq!(rebuilt.len(), 1);
        assert_eq!(rebuilt[0].payload, Bytes::from_static(b"s1"));
        assert_eq!(rebuilt[0].recovered, Some(Duration::from_millis(3)));
        // The last packet of a block, rebuilt before anything later came,
        // added nothing.
        let pkts = packets(&mut a, at(5), &[b"t0", b"t1", b"t2", b"t3"]);
        for p in [&pkts[0], &pkts[1], &pkts[2], &pkts[4]] {
            b.handle_datagram(at(6), A, p);
        }
        let got: Vec<_> = std::iter::from_fn(|| b.poll_event()).collect();
        let last = got.iter().find(|d| d.payload == Bytes::from_static(b"t3"));
        assert_eq!(last.and_then(|d| d.recovered), Some(Duration::ZERO));
    }

    #[test]
    fn hostile_datagrams_from_the_peer_are_counted_never_panic() {
        let mut b = TunnelEndpoint::new(config(Some(A), ControllerKind::Gmiad));
        let mut a = TunnelEndpoint::new(config(Some(B), ControllerKind::Gmiad));
        let now = Instant::from_millis(1);
        let good = packets(&mut a, now, &[b"hello"]);
        let mut junk: Vec<Vec<u8>> = vec![vec![], vec![1], vec![0xff; 3000]];
        for i in 0..good[0].len() {
            let mut m = good[0].to_vec();
            m[i] ^= 0x5a;
            junk.push(m);
            junk.push(good[0][..i].to_vec());
        }
        for j in &junk {
            b.handle_datagram(now, A, j);
            while b.poll_transmit(now).is_some() {}
        }
        let t = b.totals();
        let r = &t.receiver;
        let dropped = t.malformed() + r.other_session + r.inconsistent + r.oversized + r.stale;
        assert!(dropped > 0, "{t:?}");
        assert!(b.blocks_held() <= ReceiverConfig::default().max_blocks);
    }

    #[test]
    fn a_live_peer_keeps_its_slot_and_corrupt_packets_claim_nothing() {
        let mut a = TunnelEndpoint::new(config(Some(B), ControllerKind::Static(0)));
        let mut b = TunnelEndpoint::new(config(None, ControllerKind::Static(0)));
        let t0 = Instant::from_millis(1);
        let first = packets(&mut a, t0, &[b"first"]);
        // Bit-flipped copies from another address, before the real peer:
        // none claims the slot.
        for i in 8..first[0].len() {
            let mut m = first[0].to_vec();
            m[i] ^= 0x04;
            b.handle_datagram(t0, C, &m);
        }
        assert_eq!(b.peer(), None);
        assert_eq!(b.stats().invalid_before_peer, first[0].len() as u64 - 8);
        b.handle_datagram(t0, A, &first[0]);
        assert_eq!(b.peer(), Some(A));
        // A stays alive (a packet every second); replays of its packets
        // from C, long after the idle time since the first, stay foreign.
        let mut replays = 0;
        for s in 1..=12u64 {
            let now = t0 + Duration::from_secs(s);
            let p = packets(&mut a, now, &[b"alive"]);
            b.handle_datagram(now, A, &p[0]);
            b.handle_datagram(now + Duration::from_millis(500), C, &p[0]);
            replays += 1;
        }
        assert_eq!(b.peer(), Some(A));
        assert_eq!((b.stats().foreign, b.stats().restarts), (replays, 0));
        assert_eq!(b.totals().receiver.delivered, 13);
    }

    /// Runs both machines' timers to `now` and carries B's reports to A.
    fn reports_to_a(a: &mut TunnelEndpoint, b: &mut TunnelEndpoint, now: Instant) {
        b.handle_timeout(now);
        while let Some(t) = b.poll_transmit(now) {
            assert_eq!(t.dst, A);
            a.handle_datagram(now, B, &t.payload);
        }
    }

    #[test]
    fn the_senders_residual_counts_what_the_far_side_never_delivered() {
        let mut a = TunnelEndpoint::new(config(Some(B), ControllerKind::Static(0)));
        let mut b = TunnelEndpoint::new(config(None, ControllerKind::Static(0)));
        let t0 = Instant::from_millis(1);
        let pkts = packets(
            &mut a,
            t0,
            &[b"0", b"1", b"2", b"3", b"4", b"5", b"6", b"7"],
        );
        assert_eq!(a.totals().sent_residual(), None, "no report yet");
        // Sources 4, 5 and 6 went elsewhere; B has not given up on them
        // yet, so its own loss count is still 0.
        for i in [0, 1, 2, 3, 7] {
            b.handle_datagram(t0, A, &pkts[i]);
        }
        reports_to_a(&mut a, &mut b, t0 + Duration::from_millis(20));
        let t = a.totals();
        assert_eq!(
            (
                t.sender.peer_sent,
                t.sender.peer_delivered,
                t.sender.peer_unrecovered
            ),
            (8, 5, 0)
        );
        assert_eq!(t.sent_residual(), Some(3.0 / 8.0));
    }

    #[test]
    fn nothing_is_sent_to_an_address_before_it_sends_a_valid_packet() {
        let mut a = TunnelEndpoint::new(config(Some(B), ControllerKind::Static(2)));
        let good = packets(&mut a, Instant::from_millis(1), &[b"hello"]);
        let mut other_session = TunnelEndpoint::new({
            let mut c = config(Some(B), ControllerKind::Static(0));
            c.sender.session = 7;
            c
        });
        let foreign = packets(&mut other_session, Instant::from_millis(1), &[b"x"]);
        let mut flipped = good[0].to_vec();
        flipped[30] ^= 1;
        let junk: Vec<Vec<u8>> = vec![
            vec![],
            vec![0xff; 1400],
            [1u8, 8, 0, 0, 0, 0, 0, 0].to_vec(),
            flipped,
            foreign[0].to_vec(),
        ];
        // The forward side (peer learned) and the listen side (peer fixed,
        // junk from a stranger) answer spoofed-looking first packets with
        // nothing at all, over two seconds of timers.
        for mut ep in [
            TunnelEndpoint::new(config(None, ControllerKind::Static(2))),
            TunnelEndpoint::new(config(Some(A), ControllerKind::Static(2))),
        ] {
            let (mut bytes_in, mut bytes_out) = (0, 0);
            for ms in 0..2_000u64 {
                let now = Instant::from_millis(ms);
                if ms % 10 == 0 {
                    let j = &junk[(ms / 10) as usize % junk.len()];
                    ep.handle_datagram(now, C, j);
                    bytes_in += j.len();
                }
                ep.handle_timeout(now);
                while let Some(t) = ep.poll_transmit(now) {
                    bytes_out += t.payload.len();
                }
            }
            assert!(bytes_in > 0);
            assert_eq!(bytes_out, 0, "{:?}", ep.stats());
            assert_eq!(ep.peer(), ep.cfg.peer);
        }
    }

    #[test]
    fn a_datagram_larger_than_the_tunnel_carries_is_counted() {
        let mut a = TunnelEndpoint::new(config(Some(B), ControllerKind::Static(0)));
        let max = a.cfg.sender.max_payload();
        assert_eq!(max, 1472 - 38);
        assert!(a.send(Instant::ZERO, Bytes::from(vec![0; max])).is_ok());
        let r = a.send(Instant::ZERO, Bytes::from(vec![0; 9000]));
        assert!(matches!(
            r,
            Err(SendRefused::Sender(SendError::TooLarge { len: 9000, .. }))
        ));
        let s = a.stats();
        assert_eq!((s.too_large, s.too_large_bytes, s.refused), (1, 9000, 0));
    }

    const KEY: &[u8] = b"a tunnel test key, 32 bytes long";

    fn keyed(
        peer: Option<SocketAddr>,
        fec: ControllerKind,
        psk: &[u8],
        salt: u64,
    ) -> TunnelEndpoint {
        let mut c = config(peer, fec);
        c.key = Some(TunnelKey {
            psk: psk.to_vec(),
            salt,
            // Odd salts seal with one cipher, even with the other: the
            // tests below then cover a mixed pair too.
            cipher: if salt % 2 == 1 {
                Cipher::Aes256Gcm
            } else {
                Cipher::ChaCha20Poly1305
            },
        });
        TunnelEndpoint::new(c)
    }

    fn delivered(b: &mut TunnelEndpoint) -> Vec<Bytes> {
        std::iter::from_fn(|| b.poll_event())
            .map(|d| d.payload)
            .collect()
    }

    #[test]
    fn keyed_packets_round_trip_and_hostile_ones_never_reach_the_app() {
        let mut a = keyed(Some(B), ControllerKind::Static(1), KEY, 1);
        let mut b = keyed(None, ControllerKind::Static(1), KEY, 2);
        let now = Instant::from_millis(1);
        let pkts = packets(&mut a, now, &[b"one", b"two", b"three", b"four"]);
        assert_eq!(pkts.len(), 5);
        // Before the first authentic packet: wrong key, bit flips anywhere,
        // truncations, a reflected packet (b's own), from the peer's own
        // address: none claims the slot, none reaches the app.
        let mut stranger = keyed(
            Some(B),
            ControllerKind::Static(1),
            b"not the key, but 16+ bytes",
            1,
        );
        let wrong = packets(&mut stranger, now, &[b"evil"]);
        b.handle_datagram(now, A, &wrong[0]);
        let mut flips = 0;
        for bit in (0..pkts[0].len() * 8).step_by(7) {
            let mut p = pkts[0].to_vec();
            p[bit / 8] ^= 1 << (bit % 8);
            b.handle_datagram(now, A, &p);
            flips += 1;
        }
        for n in 0..pkts[0].len() {
            b.handle_datagram(now, A, &pkts[0][..n]);
        }
        b.send(now, Bytes::from_static(b"x")).unwrap_err();
        let mut own = keyed(Some(A), ControllerKind::Static(1), KEY, 2);
        let reflected = packets(&mut own, now, &[b"own"]);
        b.handle_datagram(now, A, &reflected[0]);
        assert_eq!(b.peer(), None);
        assert!(delivered(&mut b).is_empty());
        assert_eq!(
            b.totals().receiver.packets,
            0,
            "no FEC work on unauthenticated input"
        );
        let s = b.stats();
        assert_eq!(s.unauthenticated, 1 + flips + pkts[0].len() as u64 + 1);
        // The real packets, then each again (replays), from A.
        for p in &pkts {
            b.handle_datagram(now, A, p);
        }
        for p in &pkts {
            b.handle_datagram(now, A, p);
        }
        assert_eq!(b.peer(), Some(A));
        let got = delivered(&mut b);
        assert_eq!(got.len(), 4);
        assert_eq!(b.stats().replayed, 5);
        // A stranger replaying the same packets from C: foreign, nothing.
        for p in &pkts {
            b.handle_datagram(now, C, p);
        }
        assert_eq!(b.stats().foreign, 5);
        assert!(delivered(&mut b).is_empty());
        // b's reply is sealed, and a's own packets reflected back at it are refused.
        b.send(now, Bytes::from_static(b"reply"))
            .expect("peer known");
        let mut replies = Vec::new();
        while let Some(t) = b.poll_transmit(now) {
            assert_eq!(t.dst, A);
            assert!(!t.payload.windows(5).any(|w| w == b"reply"), "sealed");
            replies.push(t.payload);
        }
        for p in &replies {
            a.handle_datagram(now, B, p);
        }
        assert_eq!(delivered(&mut a), vec![Bytes::from_static(b"reply")]);
        a.handle_datagram(now, B, &pkts[1]);
        assert_eq!(a.stats().unauthenticated, 1);
        assert!(delivered(&mut a).is_empty());
    }

    #[test]
    fn a_replay_after_the_peer_restarted_takes_nothing() {
        let mut b = keyed(None, ControllerKind::Static(0), KEY, 2);
        let t0 = Instant::from_millis(1);
        let mut a1 = keyed(Some(B), ControllerKind::Static(0), KEY, 10);
        let old = packets(&mut a1, t0, &[b"a1"]);
        b.handle_datagram(t0, A, &old[0]);
        // The peer restarts (new salt) after the idle time.
        let t1 = t0 + Duration::from_secs(6);
        let mut a2 = keyed(Some(B), ControllerKind::Static(0), KEY, 11);
        let new = packets(&mut a2, t1, &[b"a2"]);
        b.handle_datagram(t1, A, &new[0]);
        assert_eq!(delivered(&mut b).len(), 2);
        // The first session's packet, replayed from anywhere, even later.
        let t2 = t1 + Duration::from_secs(6);
        b.handle_datagram(t2, C, &old[0]);
        b.handle_datagram(t2, A, &old[0]);
        assert_eq!(b.stats().replayed, 2);
        assert_eq!(b.peer(), Some(A));
        assert!(delivered(&mut b).is_empty());
    }

    /// Bytes `b` sends to `src` after spoofed first packets from it.
    fn bytes_back(b: &mut TunnelEndpoint, src: SocketAddr, spoofed: &[Vec<u8>]) -> (u64, u64) {
        let now = Instant::from_millis(1);
        let (mut bytes_in, mut bytes_out) = (0, 0);
        for (i, p) in spoofed.iter().enumerate() {
            let at = now + Duration::from_millis(i as u64);
            b.handle_datagram(at, src, p);
            bytes_in += p.len() as u64;
            b.send(at, Bytes::from_static(b"an application reply")).ok();
            for t in [at, at + Duration::from_secs(1)] {
                b.handle_timeout(t);
                while let Some(tx) = b.poll_transmit(t) {
                    if tx.dst == src {
                        bytes_out += tx.payload.len() as u64;
                    }
                }
            }
        }
        (bytes_in, bytes_out)
    }

    #[test]
    fn no_amplification_toward_an_unproven_address() {
        let now = Instant::from_millis(1);
        // Spoofed first packets: junk, truncated and corrupted copies of
        // real ones, another session's packets.
        let mut a = TunnelEndpoint::new(config(Some(B), ControllerKind::Static(4)));
        let real = packets(&mut a, now, &[b"one", b"two"]);
        let mut spoofed: Vec<Vec<u8>> = vec![vec![0; 1200], vec![0xff; 40]];
        for p in &real {
            spoofed.push(p[..p.len() / 2].to_vec());
            let mut c = p.to_vec();
            c[p.len() - 1] ^= 1;
            spoofed.push(c);
        }
        let mut other = config(Some(B), ControllerKind::Static(4));
        other.sender.session = 99;
        let mut o = TunnelEndpoint::new(other);
        spoofed.extend(packets(&mut o, now, &[b"x"]).iter().map(|p| p.to_vec()));
        let mut b = TunnelEndpoint::new(config(None, ControllerKind::Static(4)));
        let (inn, out) = bytes_back(&mut b, C, &spoofed);
        assert!(inn > 0);
        assert_eq!(
            out, 0,
            "without a key: nothing to an address that sent no valid packet"
        );
        // With a key: also the other side's valid packets, sealed under a
        // wrong key, and a keyless tunnel's valid packets.
        let mut wrong = keyed(
            Some(B),
            ControllerKind::Static(4),
            b"not the key, but 16+ bytes",
            5,
        );
        spoofed.extend(packets(&mut wrong, now, &[b"y"]).iter().map(|p| p.to_vec()));
        spoofed.extend(real.iter().map(|p| p.to_vec()));
        let mut kb = keyed(None, ControllerKind::Static(4), KEY, 2);
        let (inn, out) = bytes_back(&mut kb, C, &spoofed);
        assert!(inn > 0);
        assert_eq!(
            out, 0,
            "with a key: nothing to an address before an authentic packet"
        );
        assert_eq!(kb.stats().unauthenticated, spoofed.len() as u64);
        // The counting is real: a proven peer does get replies.
        let mut ka = keyed(Some(B), ControllerKind::Static(4), KEY, 1);
        let good: Vec<Vec<u8>> = packets(&mut ka, now, &[b"hi"])
            .iter()
            .map(|p| p.to_vec())
            .collect();
        let (_, out) = bytes_back(&mut kb, C, &good);
        assert!(out > 0);
    }

    /// `--fec xor:...`: the tunnel carries XOR parity instead of blocks,
    /// keyed or not; a lost datagram is rebuilt, the peer is learned from
    /// a media packet of the session, and under a key a forged packet with
    /// the right SSRC claims nothing.
    /// An open-loop tunnel pair (`fec` sets the code; session 77), keyed
    /// or not: a stranger's `forged` data packet of the session is taken
    /// as the peer only without a key; six datagrams make `packets`
    /// packets, and with the second lost all six arrive, one rebuilt.
    fn open_loop_tunnels_rebuild_and_learn_their_peer(
        fec: impl Fn(&mut TunnelConfig),
        name: &str,
        forged: &[u8],
        packets_made: usize,
    ) {
        for keyed in [false, true] {
            let config = |peer: Option<SocketAddr>| {
                let mut c = TunnelConfig::new(peer, 4);
                fec(&mut c);
                c.sender.session = 77;
                if keyed {
                    c.key = Some(TunnelKey {
                        psk: vec![7; 32],
                        // Each side its own salt (its own is a reflection).
                        salt: u64::from(peer.is_some()),
                        cipher: Cipher::ChaCha20Poly1305,
                    });
                }
                c
            };
            assert_eq!(config(None).validate(), Ok(()));
            assert_eq!(config(None).fec_name(), name);
            let mut a = TunnelEndpoint::new(config(Some(B)));
            let mut b = TunnelEndpoint::new(config(None));
            let now = Instant::from_millis(1);
            b.handle_datagram(now, C, forged);
            assert_eq!(b.peer().is_some(), !keyed, "{name} keyed {keyed}");
            let mut b = TunnelEndpoint::new(config(None));
            let payloads: Vec<Vec<u8>> = (0..6u8).map(|i| vec![i; 10 + usize::from(i)]).collect();
            let refs: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
            let out = packets(&mut a, now, &refs);
            assert_eq!(out.len(), packets_made, "{name}");
            for (i, p) in out.iter().enumerate() {
                if i != 1 {
                    b.handle_datagram(now, A, p);
                }
            }
            assert_eq!(b.peer(), Some(A), "{:?}", b.stats());
            let mut got: Vec<Vec<u8>> = std::iter::from_fn(|| b.poll_event())
                .map(|d| d.payload.to_vec())
                .collect();
            got.sort();
            assert_eq!(got, payloads, "{name} keyed {keyed}");
            let t = b.totals();
            assert_eq!((t.receiver.recovered, t.receiver.delivered), (1, 6));
            assert!(a.open_loop() && a.fwnd().is_none());
            // What the configuration says fits, fits; a byte more does not.
            let max = config(None).max_payload();
            assert!(a.send(now, Bytes::from(vec![1; max])).is_ok(), "{name}");
            assert!(
                a.send(now, Bytes::from(vec![1; max + 1])).is_err(),
                "{name}"
            );
        }
    }

    #[test]
    fn xor_tunnels_rebuild_and_learn_their_peer() {
        // A stranger's RTP packet with the session's SSRC; 6 media and 2
        // parity.
        let forged = crate::wire::rtp::RtpHeader {
            payload_type: MEDIA_PT,
            ssrc: 77,
            ..Default::default()
        }
        .to_packet(b"forged");
        let xor = |c: &mut TunnelConfig| c.xor = Some(XorLayout::row(3));
        open_loop_tunnels_rebuild_and_learn_their_peer(xor, "xor:3", &forged, 8);
    }

    #[test]
    fn sliding_tunnels_rebuild_and_learn_their_peer() {
        // A stranger's source packet of the session; 6 sources and a
        // repair after every 2 (the one after the loss rebuilds it).
        let mut forged = vec![crate::sliding::SOURCE_TYPE];
        forged.extend_from_slice(&77u32.to_be_bytes());
        forged.extend_from_slice(&[0, 0, 0, 9, 1, 2, 3]);
        let code = "sliding:w=8,o=0.5".parse().expect("code");
        let sliding = |c: &mut TunnelConfig| c.sliding = Some(code);
        open_loop_tunnels_rebuild_and_learn_their_peer(sliding, "sliding:w=8,o=0.5", &forged, 9);
    }
}
