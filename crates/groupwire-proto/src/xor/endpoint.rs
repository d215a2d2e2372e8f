//! [`XorEndpoint`]: XOR FEC toward one peer over one socket, as a
//! [`Machine`], for the tunnel, the simulator and applications.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use groupwire_metrics::LatencyKind;

use super::{
    DecoderConfig, EncoderStats, MediaOutcome, Via, XorDecoder, XorDecoderStats, XorEncoder,
    XorLayout, XorLayoutError,
};
use crate::units::MAX_UDP_PAYLOAD;
use crate::wire::rtp::{FEC_PREFIX_LEN, RtpHeader};
use crate::{Instant, Machine, Transmit, Transport};

/// The payload type of media packets by default (dynamic).
pub const MEDIA_PT: u8 = 97;
/// The payload type of parity packets by default (GStreamer's encoder's).
pub const FEC_PT: u8 = 96;

/// How an [`XorEndpoint`] is set up; [`XorEndpointConfig::new`] gives the
/// defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct XorEndpointConfig {
    /// Where media and parity go, and the only address taken from.
    pub peer: SocketAddr,
    /// The parity layout (both sides must use the same).
    pub layout: XorLayout,
    /// This side's SSRC: the peer's packets must carry the peer's, so set
    /// both sides from a shared session number.
    pub ssrc: u32,
    /// The peer's SSRC, or `None` to take any.
    pub peer_ssrc: Option<u32>,
    /// Payload type of media packets (dynamic, 97 by default).
    pub media_pt: u8,
    /// Payload type of parity packets (96, as GStreamer's encoder).
    pub fec_pt: u8,
    /// The first media sequence number.
    pub first_seq: u16,
    /// RTP timestamp units per second (90 kHz, as for video).
    pub clock_rate: u32,
    /// Microseconds of a clock the peer shares (the wall clock since the
    /// Unix epoch) at this driver's [`Instant::ZERO`], if there is one:
    /// RTP timestamps then count on that clock, and a peer with the same
    /// setting measures one-way latency ([`LatencyKind::OneWay`]; exact on
    /// one host, as good as the clocks' sync between hosts). `None`:
    /// timestamps count from this driver's epoch and the receiver reports
    /// the transit above the lowest seen ([`LatencyKind::AboveBase`]), as
    /// it must for a stock RTP sender whose timestamps start at random
    /// (RFC 3550 §5.1).
    pub shared_clock_micros: Option<u64>,
    /// Close the open groups once nothing has been sent for this long (a
    /// partial group's parity covers what it has), so the last packets
    /// before a pause are protected at once and a rebuild never waits
    /// longer than the pause; `None`: only full groups, as SMPTE 2022-1.
    /// The receiver takes partial groups when this is set. Set it above
    /// the stream's packet gap: a stream slower than one packet per wait
    /// closes a group after every packet (one parity each).
    pub close_when_idle: Option<Duration>,
    /// Rebuild from parity of any layout, reading each parity packet's
    /// geometry from its header instead of checking it against `layout`
    /// (partial groups included): for a receiver that does not know the
    /// sender's layout, such as a session's, whose peer picks and changes
    /// it. `layout` then only shapes what this side sends.
    pub any_layout: bool,
    /// Sequence window of the decoder.
    pub window: u16,
    /// Byte budget of the decoder.
    pub max_bytes: usize,
    /// The largest datagram on the link (media packet: 12 bytes of RTP
    /// header and the payload; a parity packet is 16 bytes longer still).
    pub max_datagram: usize,
}

impl XorEndpointConfig {
    /// Defaults: SSRC 0 both ways, payload types 97 (media) and 96
    /// (parity), 90 kHz timestamps, partial groups closed after 2 ms
    /// without a packet (the tunnel's block wait), parity checked against
    /// `layout`, the decoder's default window and budget, 1472-byte
    /// datagrams.
    pub fn new(peer: SocketAddr, layout: XorLayout) -> Self {
        Self {
            peer,
            layout,
            ssrc: 0,
            peer_ssrc: None,
            media_pt: MEDIA_PT,
            fec_pt: FEC_PT,
            first_seq: 0,
            clock_rate: 90_000,
            shared_clock_micros: None,
            close_when_idle: Some(Duration::from_millis(2)),
            any_layout: false,
            window: super::DEFAULT_WINDOW,
            max_bytes: super::DEFAULT_MAX_BYTES,
            max_datagram: 1472,
        }
    }

    /// The largest application payload: a parity packet of it must fit
    /// `max_datagram`.
    pub fn max_payload(&self) -> usize {
        self.max_datagram.saturating_sub(FEC_PREFIX_LEN)
    }
}

/// A datagram for the application.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XorDelivery {
    /// The payload, as the peer's application sent it.
    pub payload: Bytes,
    /// Its media sequence number.
    pub seq: u16,
    /// The sequence number extended to 64 bits (nearest the newest seen).
    pub index: u64,
    /// Its latency from the RTP timestamp, as
    /// [`XorEndpoint::latency_kind`] says; `None` when the sender's clock
    /// is ahead of ours.
    pub latency: Option<Duration>,
    /// Rebuilt from parity: which, and the latency the rebuild added (from
    /// the arrival of the next later received packet, as the tunnel counts
    /// it; zero when none had arrived).
    pub recovered: Option<(Via, Duration)>,
}

/// What an [`XorEndpoint`] dropped outside its encoder and decoder.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct XorEndpointStats {
    /// Datagrams from an address other than the peer.
    pub foreign: u64,
    /// Datagrams that are not RTP, or carry another SSRC or payload type.
    pub malformed: u64,
    /// Application payloads larger than [`XorEndpointConfig::max_payload`].
    pub too_large: u64,
    /// Media packets delivered as they arrived.
    pub delivered: u64,
    /// Media packets delivered after a rebuild.
    pub recovered: u64,
    /// Media packets sent, and their bytes (RTP header included).
    pub media_sent: u64,
    /// The bytes of those packets.
    pub media_bytes: u64,
    /// Media packets missing from the sequence when a later one arrived.
    pub lost: u64,
    /// Media packets never delivered once the decoder's window passed
    /// them (the residual loss; packets within the window of the newest
    /// may still be rebuilt and are not counted yet).
    pub unrecovered: u64,
}

impl std::ops::AddAssign for XorEndpointStats {
    /// Adds another endpoint's counters (saturating): totals over the
    /// endpoints an [`XorListener`](super::XorListener) has replaced.
    fn add_assign(&mut self, o: Self) {
        // Destructured, so a new field cannot be forgotten here.
        let XorEndpointStats {
            foreign,
            malformed,
            too_large,
            delivered,
            recovered,
            media_sent,
            media_bytes,
            lost,
            unrecovered,
        } = o;
        for (a, b) in [
            (&mut self.foreign, foreign),
            (&mut self.malformed, malformed),
            (&mut self.too_large, too_large),
            (&mut self.delivered, delivered),
            (&mut self.recovered, recovered),
            (&mut self.media_sent, media_sent),
            (&mut self.media_bytes, media_bytes),
            (&mut self.lost, lost),
            (&mut self.unrecovered, unrecovered),
        ] {
            *a = a.saturating_add(b);
        }
    }
}

/// Why [`XorEndpoint::send`] refused a payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("payload of {len} bytes is more than the {max} an XOR FEC packet carries")]
pub struct TooLarge {
    /// Its length.
    pub len: usize,
    /// The most allowed.
    pub max: usize,
}

/// Received media arrival times, by extended sequence number modulo this.
const ARRIVALS: usize = 4096;
/// How far after a rebuilt packet to look for the next arrival.
const LATER_SCAN: u16 = 255;

/// XOR FEC (Leigh et al. §4.1) toward one peer: application payloads go
/// out as RTP media packets with SMPTE 2022-1 parity beside them on the
/// same socket (told apart by payload type); what comes in is delivered at
/// once and what was lost is delivered when parity rebuilds it. No
/// feedback: the scheme is open loop, as the paper's.
///
/// Drain contract as for every [`Machine`]. Timers: closing partial groups
/// ([`XorEndpointConfig::close_when_idle`]).
#[derive(Debug)]
pub struct XorEndpoint {
    cfg: XorEndpointConfig,
    enc: XorEncoder,
    dec: XorDecoder,
    seq: u16,
    /// When the open matrix closes.
    close_at: Option<Instant>,
    out: VecDeque<Transmit>,
    /// Parity waiting behind `out`: a drain hands out the media first, then
    /// the parity, so a socket driver sees runs of equal-sized datagrams
    /// (one segmentation-offload call each) rather than media and the
    /// longer parity interleaved, which ends a run at every parity. A parity
    /// packet still leaves in the same drain as the media that completed it.
    fec_out: VecDeque<Transmit>,
    events: VecDeque<XorDelivery>,
    arrivals: Vec<Option<(u16, Instant)>>,
    /// Extended media sequence numbers delivered, by value modulo its
    /// length (twice the window), for judging what was never delivered.
    delivered: Vec<u64>,
    /// Newest extended media sequence number that arrived or was rebuilt.
    newest: Option<u64>,
    /// Newest that arrived (for counting gaps).
    newest_arrived: Option<u64>,
    /// Everything below this has been judged delivered or not.
    judged: u64,
    /// Lowest transit seen, in RTP ticks (for [`LatencyKind::AboveBase`]).
    base_transit: Option<u32>,
    stats: XorEndpointStats,
}

impl XorEndpoint {
    /// An endpoint; fails on an impossible layout.
    pub fn new(cfg: XorEndpointConfig) -> Result<Self, XorLayoutError> {
        let enc = XorEncoder::new(cfg.layout, cfg.fec_pt)?;
        let dec = XorDecoder::new(DecoderConfig {
            layout: (!cfg.any_layout).then_some(cfg.layout),
            window: cfg.window,
            max_bytes: cfg.max_bytes,
            partial_groups: cfg.any_layout || cfg.close_when_idle.is_some(),
        });
        Ok(Self {
            seq: cfg.first_seq,
            cfg,
            enc,
            dec,
            close_at: None,
            out: VecDeque::new(),
            fec_out: VecDeque::new(),
            events: VecDeque::new(),
            arrivals: vec![None; ARRIVALS],
            delivered: vec![u64::MAX; 2 * usize::from(cfg.window.clamp(1, 16384))],
            newest: None,
            newest_arrived: None,
            judged: 0,
            base_transit: None,
            stats: XorEndpointStats::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &XorEndpointConfig {
        &self.cfg
    }

    /// The sequence number the next media packet gets: where a successor
    /// toward the same receiver should start ([`XorEndpointConfig::first_seq`]).
    pub fn next_seq(&self) -> u16 {
        self.seq
    }

    /// What was dropped and delivered.
    pub fn stats(&self) -> XorEndpointStats {
        self.stats
    }

    /// The sending half's counters.
    pub fn encoder_stats(&self) -> EncoderStats {
        self.enc.stats()
    }

    /// The receiving half's counters.
    pub fn decoder_stats(&self) -> XorDecoderStats {
        self.dec.stats()
    }

    /// Sends `payload` to the peer as the next media packet, with whatever
    /// parity it completes. Queueing (see [`Machine`]): several sends may
    /// precede a drain, which hands out their media first, then their parity.
    pub fn send(&mut self, now: Instant, payload: &[u8]) -> Result<(), TooLarge> {
        let max = self.cfg.max_payload().min(MAX_UDP_PAYLOAD - FEC_PREFIX_LEN);
        if payload.len() > max {
            self.stats.too_large += 1;
            return Err(TooLarge {
                len: payload.len(),
                max,
            });
        }
        let packet = RtpHeader {
            payload_type: self.cfg.media_pt,
            seq: self.seq,
            timestamp: self.ticks(now),
            ssrc: self.cfg.ssrc,
            ..RtpHeader::default()
        }
        .to_packet(payload);
        self.seq = self.seq.wrapping_add(1);
        self.stats.media_sent += 1;
        self.stats.media_bytes += packet.len() as u64;
        if self.enc.push(&packet).is_err() {
            // Our own header: cannot fail to parse.
            return Ok(());
        }
        self.transmit(Bytes::from(packet));
        self.take_fec();
        self.close_at = if self.enc.is_open() || self.enc.has_held() {
            self.cfg.close_when_idle.map(|w| now.saturating_add(w))
        } else {
            None
        };
        Ok(())
    }

    fn transmit(&mut self, payload: Bytes) {
        self.out.push_back(self.to_peer(payload));
    }

    fn to_peer(&self, payload: Bytes) -> Transmit {
        Transmit {
            dst: self.cfg.peer,
            transport: Transport::Udp,
            payload,
        }
    }

    fn take_fec(&mut self) {
        while let Some(f) = self.enc.poll_fec() {
            let t = self.to_peer(f.packet);
            self.fec_out.push_back(t);
        }
    }

    /// The RTP timestamp of `now`: ticks of `clock_rate` since the shared
    /// clock's epoch (or ours), modulo 2^32 as RFC 3550 wraps it.
    fn ticks(&self, now: Instant) -> u32 {
        let us =
            u128::from(now.as_micros()) + u128::from(self.cfg.shared_clock_micros.unwrap_or(0));
        (us * u128::from(self.cfg.clock_rate) / 1_000_000) as u32
    }

    /// What [`XorDelivery::latency`] measures.
    pub fn latency_kind(&self) -> LatencyKind {
        if self.cfg.shared_clock_micros.is_some() {
            LatencyKind::OneWay
        } else {
            LatencyKind::AboveBase
        }
    }

    /// The latency of a packet stamped `timestamp` that is here at `now`.
    /// Differences are taken modulo 2^32 ticks, so the timestamps' wrap
    /// and a stock sender's random offset cancel.
    fn latency(&mut self, now: Instant, timestamp: u32) -> Option<Duration> {
        let transit = self.ticks(now).wrapping_sub(timestamp);
        let ticks = if self.cfg.shared_clock_micros.is_some() {
            // Negative (the sender's clock ahead): no figure.
            (transit < 1 << 31).then_some(transit)?
        } else {
            match self.base_transit {
                Some(base) if (transit.wrapping_sub(base) as i32) >= 0 => {
                    transit.wrapping_sub(base)
                }
                _ => {
                    self.base_transit = Some(transit);
                    0
                }
            }
        };
        let rate = u64::from(self.cfg.clock_rate.max(1));
        Some(Duration::from_micros(u64::from(ticks) * 1_000_000 / rate))
    }

    /// The extended sequence number of `seq`, nearest the newest.
    fn extend(&self, seq: u16) -> u64 {
        const ORIGIN: u64 = 1 << 32;
        self.newest.map_or(ORIGIN + u64::from(seq), |n| {
            n.saturating_add_signed(i64::from(seq.wrapping_sub(n as u16) as i16))
        })
    }

    /// Marks `seq` delivered, and judges what the window has passed.
    fn mark(&mut self, seq: u16) {
        let ext = self.extend(seq);
        let len = self.delivered.len() as u64;
        if self.newest.is_none() {
            self.judged = ext;
        }
        if ext < self.judged {
            return;
        }
        self.delivered[(ext % len) as usize] = ext;
        if self.newest.is_none_or(|n| ext > n) {
            self.newest = Some(ext);
        }
        let window = u64::from(self.cfg.window.clamp(1, 16384));
        let newest = self.newest.unwrap_or(ext);
        while self.judged + window <= newest {
            if self.delivered[(self.judged % len) as usize] != self.judged {
                self.stats.unrecovered += 1;
            }
            self.judged += 1;
        }
    }

    fn deliver(&mut self, now: Instant) {
        while let Some(r) = self.dec.poll_recovered() {
            let later = (1..=LATER_SCAN).find_map(|j| {
                let s = r.seq.wrapping_add(j);
                self.arrivals[usize::from(s) % ARRIVALS]
                    .and_then(|(seq, at)| (seq == s).then_some(at))
            });
            let added = later.map_or(Duration::ZERO, |at| now.saturating_duration_since(at));
            let parsed = RtpHeader::parse(&r.packet).ok();
            let payload = parsed
                .and_then(|(h, body)| h.payload(body).ok().map(|p| r.packet.slice_ref(p)))
                .unwrap_or_default();
            let latency = parsed.and_then(|(h, _)| self.latency(now, h.timestamp));
            self.stats.recovered += 1;
            let index = self.extend(r.seq);
            self.mark(r.seq);
            self.events.push_back(XorDelivery {
                payload,
                seq: r.seq,
                index,
                latency,
                recovered: Some((r.via, added)),
            });
        }
    }
}

impl Machine for XorEndpoint {
    type Event = XorDelivery;

    fn handle_datagram(&mut self, now: Instant, src: SocketAddr, data: &[u8]) {
        if src != self.cfg.peer {
            self.stats.foreign += 1;
            return;
        }
        let Ok((h, body)) = RtpHeader::parse(data) else {
            self.stats.malformed += 1;
            return;
        };
        let packet = Bytes::copy_from_slice(data);
        if h.payload_type == self.cfg.fec_pt {
            // Parity's SSRC is 0 (SMPTE 2022-1), whoever sends it.
            self.dec.on_fec(packet);
        } else if h.payload_type != self.cfg.media_pt
            || self.cfg.peer_ssrc.is_some_and(|s| s != h.ssrc)
        {
            self.stats.malformed += 1;
            return;
        } else if self.dec.on_media(packet.clone()) == MediaOutcome::New {
            self.arrivals[usize::from(h.seq) % ARRIVALS] = Some((h.seq, now));
            self.stats.delivered += 1;
            let ext = self.extend(h.seq);
            if let Some(n) = self.newest_arrived.filter(|&n| ext > n) {
                self.stats.lost += ext - n - 1;
            }
            if self.newest_arrived.is_none_or(|n| ext > n) {
                self.newest_arrived = Some(ext);
            }
            self.mark(h.seq);
            // The payload's place in `data` is its place in `packet`.
            let payload = h.payload(body).map_or_else(
                |_| Bytes::new(),
                |p| {
                    let at = p.as_ptr() as usize - data.as_ptr() as usize;
                    packet.slice(at..at + p.len())
                },
            );
            let latency = self.latency(now, h.timestamp);
            self.events.push_back(XorDelivery {
                payload,
                seq: h.seq,
                index: ext,
                latency,
                recovered: None,
            });
        }
        self.deliver(now);
    }

    fn handle_timeout(&mut self, now: Instant) {
        if self.close_at.is_some_and(|t| t <= now) {
            self.close_at = None;
            self.enc.close();
            self.take_fec();
        }
    }

    fn poll_transmit(&mut self, _now: Instant) -> Option<Transmit> {
        self.out.pop_front().or_else(|| self.fec_out.pop_front())
    }

    fn poll_event(&mut self) -> Option<XorDelivery> {
        self.events.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.close_at
    }
}
