//! A sliding-window FEC endpoint (RFC 8681's SWRLC over GF(2^8), in the
//! spirit of Tetrys, RFC 9407): the tunnel's third code beside GENEVA's
//! blocks ([`crate::block`]) and Leigh et al.'s XOR parity
//! ([`crate::xor`]), issue 15's point 5.
//!
//! Every datagram the application sends leaves at once as a *source*
//! packet (its ADU and its ESI); after every `1 / overhead` sources a
//! *repair* packet carries a random linear combination of the last
//! `window` sources ([`groupwire_codec::sliding::Encoder`]). A block code
//! can rebuild a loss only once its whole block and repairs are in; here
//! the next repair after a loss covers it, wherever it falls, so for the
//! same overhead a rebuilt datagram waits about `1 / overhead` packets
//! instead of up to a block. The receiver feeds every packet to an
//! on-the-fly Gaussian elimination ([`groupwire_codec::sliding::Decoder`])
//! and hands out each source as soon as it arrives or the equations
//! determine it.
//!
//! Open loop, as the XOR scheme: no reports flow, the overhead is the
//! configuration's. When the application pauses, one last repair covers
//! the sources sent since the previous one
//! ([`SlidingConfig::flush_after`]), so a tail loss is rebuilt too.
//!
//! ## Wire format (the tunnel seals it under a key, as every packet)
//!
//! ```text
//! source: 0xA1 | session (u32) | ESI (u32, RFC 8681 §4.1.2)            | ADU
//! repair: 0xA2 | session (u32) | Repair FEC Payload ID (8, §4.1.3)     | symbol (E bytes)
//! ```
//!
//! All big-endian. A source symbol is the ADU's ADUI (flow ID 0, the
//! ADU's length, the ADU, zeros to E), built again at the receiver, so a
//! source packet carries no padding; E is the largest ADUI
//! ([`SlidingConfig::symbol_size`]). A repair symbol goes without its
//! trailing zeros (past the window's longest ADUI it is all zeros) and
//! the receiver pads it back to E: a departure from RFC 8681's repair
//! packet, whose symbol is always E bytes, that keeps a repair as long as
//! the datagrams it covers (with E at the link's largest, 1000-byte
//! datagrams' repairs were half as long again). Departures from RFC 8681, and why, are in
//! [`groupwire_codec::sliding`]'s docs (one symbol per ADUI); here the
//! FEC Payload IDs sit in front of the ADU rather than after it, beside
//! the session number that tells two tunnels apart.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use groupwire_codec::sliding::{
    ADUI_HEADER_LEN, DT_DENSE, Decoder, DecoderConfig, Encoder, RepairPayloadId, SlidingError,
    SourcePayloadId,
};

use crate::{Instant, Machine, Transmit, Transport};

/// First byte of a source packet.
pub const SOURCE_TYPE: u8 = 0xA1;
/// First byte of a repair packet.
pub const REPAIR_TYPE: u8 = 0xA2;
/// Bytes in front of a source packet's ADU.
pub const SOURCE_HEADER_LEN: usize = 1 + 4 + SourcePayloadId::LEN;
/// Bytes in front of a repair packet's symbol.
pub const REPAIR_HEADER_LEN: usize = 1 + 4 + RepairPayloadId::LEN;

/// Arrival times kept for judging how long a rebuilt datagram waited.
const ARRIVALS: usize = 4096;
/// How many later ESIs are looked at for a rebuilt one's wait.
const LATER_SCAN: u32 = 64;

/// A sliding-window code: how many sources a repair covers and how many
/// repairs per source (`sliding:w=20,o=0.2` on the command line).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SlidingCode {
    /// The encoding window, in sources (1..=4095, RFC 8681's
    /// `ew_max_size`).
    pub window: u16,
    /// Repairs per source (0 < overhead <= 1).
    pub overhead: f64,
}

impl SlidingCode {
    /// Why this code cannot be used, if it cannot.
    pub fn validate(&self) -> Result<(), String> {
        if self.window == 0 || usize::from(self.window) > groupwire_codec::sliding::MAX_NSS {
            return Err(format!(
                "the window must be 1 to {} sources, not {}",
                groupwire_codec::sliding::MAX_NSS,
                self.window
            ));
        }
        if !(self.overhead > 0.0 && self.overhead <= 1.0) {
            return Err(format!(
                "the overhead must be above 0 and at most 1 repair per source, not {}",
                self.overhead
            ));
        }
        Ok(())
    }
}

impl std::fmt::Display for SlidingCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "sliding:w={},o={}", self.window, self.overhead)
    }
}

impl std::str::FromStr for SlidingCode {
    type Err = String;

    /// `sliding:w=W,o=O` (either order; `o` also as a percentage).
    fn from_str(s: &str) -> Result<Self, String> {
        let usage = "expected sliding:w=W,o=O (a window of W sources, O repairs per source, e.g. sliding:w=20,o=0.2)";
        let rest = s.strip_prefix("sliding:").ok_or(usage)?;
        let (mut window, mut overhead) = (None, None);
        for part in rest.split(',') {
            match part.split_once('=') {
                Some(("w", v)) => window = Some(v.parse::<u16>().map_err(|_| usage)?),
                Some(("o", v)) => {
                    let o = match v.strip_suffix('%') {
                        Some(p) => p.parse::<f64>().map_err(|_| usage)? / 100.0,
                        None => v.parse::<f64>().map_err(|_| usage)?,
                    };
                    overhead = Some(o);
                }
                _ => return Err(usage.into()),
            }
        }
        let code = Self {
            window: window.ok_or(usage)?,
            overhead: overhead.ok_or(usage)?,
        };
        code.validate()?;
        Ok(code)
    }
}

/// A [`SlidingEndpoint`]'s configuration.
#[derive(Clone, Debug)]
pub struct SlidingConfig {
    /// Where packets go, and the only address taken from.
    pub peer: SocketAddr,
    /// The code.
    pub code: SlidingCode,
    /// Both sides' session number: packets of another are dropped.
    pub session: u32,
    /// The largest datagram on the link: a repair packet
    /// ([`REPAIR_HEADER_LEN`] and E) must fit it.
    pub max_datagram: usize,
    /// With nothing sent for this long, one repair covers the sources
    /// sent since the last one (`None`: never; a tail loss then waits for
    /// the next traffic).
    pub flush_after: Option<Duration>,
    /// The receiver's decoding window, in ESIs (at least the code's
    /// window; RFC 8681's `dw_max_size`).
    pub decoding_window: usize,
}

impl SlidingConfig {
    /// A code toward `peer`: session 0, 1472-byte datagrams, a repair
    /// 2 ms after the last send (the tunnel's block wait), a decoding
    /// window of four encoding windows (at least 256).
    pub fn new(peer: SocketAddr, code: SlidingCode) -> Self {
        Self {
            peer,
            code,
            session: 0,
            max_datagram: 1472,
            flush_after: Some(Duration::from_millis(2)),
            decoding_window: (4 * usize::from(code.window)).clamp(256, 4095),
        }
    }

    /// E: the largest ADUI a repair packet of `max_datagram` carries.
    pub fn symbol_size(&self) -> usize {
        self.max_datagram.saturating_sub(REPAIR_HEADER_LEN)
    }

    /// The largest datagram the application may send.
    pub fn max_payload(&self) -> usize {
        max_payload(self.max_datagram)
    }
}

/// The largest datagram the application may send on links of
/// `max_datagram` bytes: a repair carries its ADUI (3 bytes more) behind
/// [`REPAIR_HEADER_LEN`].
pub fn max_payload(max_datagram: usize) -> usize {
    max_datagram.saturating_sub(REPAIR_HEADER_LEN + ADUI_HEADER_LEN)
}

/// A datagram delivered to the application.
#[derive(Clone, Debug)]
pub struct SlidingDelivery {
    /// Its ESI (the sender's count of datagrams).
    pub esi: u32,
    /// The datagram.
    pub payload: Bytes,
    /// `Some` if rebuilt: how long after the first later datagram arrived
    /// (zero if none had).
    pub recovered: Option<Duration>,
}

/// What a [`SlidingEndpoint`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlidingStats {
    /// Source packets sent.
    pub sources_sent: u64,
    /// Repair packets sent.
    pub repairs_sent: u64,
    /// Of them, sent because the application paused.
    pub flush_repairs: u64,
    /// Bytes of the packets sent (sources and repairs).
    pub bytes_sent: u64,
    /// Source packets received (of this session).
    pub sources_received: u64,
    /// Repair packets received (of this session).
    pub repairs_received: u64,
    /// Datagrams delivered as they arrived.
    pub delivered: u64,
    /// Datagrams rebuilt and delivered.
    pub rebuilt: u64,
    /// Source packets of a datagram already delivered (rebuilt first, or
    /// sent twice by the network).
    pub duplicates: u64,
    /// Packets that did not parse or that the decoder refused.
    pub malformed: u64,
    /// Packets of another session or from another address.
    pub foreign: u64,
    /// Datagrams the application offered that were too large.
    pub too_large: u64,
}

/// The sending and receiving halves of a sliding-window code toward one
/// peer, as a sans-IO [`Machine`]. Any input is safe: what does not parse
/// is counted and dropped, and memory is bounded by the decoding window.
#[derive(Debug)]
pub struct SlidingEndpoint {
    cfg: SlidingConfig,
    enc: Encoder,
    dec: Decoder,
    /// Repairs owed: each source adds the overhead, each repair takes one.
    credit: f64,
    /// Sources sent since the last repair.
    uncovered: u32,
    repair_key: u16,
    flush_at: Option<Instant>,
    out: VecDeque<Transmit>,
    events: VecDeque<SlidingDelivery>,
    /// Per `esi % ARRIVALS`: the ESI delivered there and when it arrived
    /// (`None` if it was rebuilt).
    seen: Vec<Option<(u32, Option<Instant>)>>,
    stats: SlidingStats,
}

impl SlidingEndpoint {
    /// An endpoint; fails if the code or the sizes are impossible.
    pub fn new(cfg: SlidingConfig) -> Result<Self, String> {
        cfg.code.validate()?;
        let e = cfg.symbol_size();
        if e <= ADUI_HEADER_LEN {
            return Err(format!(
                "a {}-byte datagram leaves no room for a repair",
                cfg.max_datagram
            ));
        }
        let enc = Encoder::new(e, usize::from(cfg.code.window)).map_err(|e| e.to_string())?;
        let mut dc = DecoderConfig::new(e);
        dc.max_window = cfg.decoding_window.clamp(
            usize::from(cfg.code.window),
            groupwire_codec::sliding::MAX_NSS,
        );
        let dec = Decoder::new(dc).map_err(|e| e.to_string())?;
        Ok(Self {
            cfg,
            enc,
            dec,
            credit: 0.0,
            uncovered: 0,
            repair_key: 0,
            flush_at: None,
            out: VecDeque::new(),
            events: VecDeque::new(),
            seen: vec![None; ARRIVALS],
            stats: SlidingStats::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &SlidingConfig {
        &self.cfg
    }

    /// What it did.
    pub fn stats(&self) -> SlidingStats {
        self.stats
    }

    /// Sends one datagram (now) and the repairs it makes due. Queueing:
    /// what it produces waits for [`poll_transmit`](Machine::poll_transmit).
    pub fn send(&mut self, now: Instant, payload: &[u8]) -> Result<(), SlidingError> {
        let esi = match self.enc.push_adu(0, payload) {
            Ok(esi) => esi,
            Err(e) => {
                self.stats.too_large += 1;
                return Err(e);
            }
        };
        let mut b = BytesMut::with_capacity(SOURCE_HEADER_LEN + payload.len());
        b.put_u8(SOURCE_TYPE);
        b.put_u32(self.cfg.session);
        b.put_slice(&SourcePayloadId { esi }.to_bytes());
        b.put_slice(payload);
        self.stats.bytes_sent += b.len() as u64;
        self.push(b.freeze());
        self.stats.sources_sent += 1;
        self.uncovered += 1;
        self.credit += self.cfg.code.overhead;
        // (Less a rounding margin: five sources at 0.2 owe one repair.)
        while self.credit >= 1.0 - 1e-9 {
            self.credit -= 1.0;
            self.repair();
        }
        self.flush_at = self.cfg.flush_after.map(|w| now.saturating_add(w));
        Ok(())
    }

    fn push(&mut self, payload: Bytes) {
        self.out.push_back(Transmit {
            dst: self.cfg.peer,
            transport: Transport::Udp,
            payload,
        });
    }

    /// One repair over the current window.
    fn repair(&mut self) {
        let e = self.enc.symbol_size();
        let mut b = BytesMut::zeroed(REPAIR_HEADER_LEN + e);
        let key = self.repair_key;
        self.repair_key = key.wrapping_add(1);
        // The window is never empty here: a source came first.
        let Ok(id) = self
            .enc
            .repair_into(key, DT_DENSE, &mut b[REPAIR_HEADER_LEN..])
        else {
            return;
        };
        b[0] = REPAIR_TYPE;
        b[1..5].copy_from_slice(&self.cfg.session.to_be_bytes());
        b[5..REPAIR_HEADER_LEN].copy_from_slice(&id.to_bytes());
        // Past the longest ADUI in the window the symbol is all zeros:
        // those bytes stay home (the receiver pads to E again), so a
        // repair is as long as the datagrams it covers, not the link's
        // largest.
        let used = b[REPAIR_HEADER_LEN..]
            .iter()
            .rposition(|&x| x != 0)
            .map_or(0, |i| i + 1);
        b.truncate(REPAIR_HEADER_LEN + used);
        self.stats.bytes_sent += b.len() as u64;
        self.push(b.freeze());
        self.stats.repairs_sent += 1;
        self.uncovered = 0;
    }

    /// Whether `esi` was delivered already; marks it delivered (arrived
    /// at `arrived`, or rebuilt) if not.
    fn first_delivery(&mut self, esi: u32, arrived: Option<Instant>) -> bool {
        let slot = &mut self.seen[esi as usize % ARRIVALS];
        if slot.is_some_and(|(e, _)| e == esi) {
            return false;
        }
        *slot = Some((esi, arrived));
        true
    }

    /// How long a datagram rebuilt now waited: since the first later one
    /// arrived.
    fn waited(&self, esi: u32, now: Instant) -> Duration {
        (1..=LATER_SCAN)
            .find_map(|j| {
                let e = esi.wrapping_add(j);
                match self.seen[e as usize % ARRIVALS] {
                    Some((s, Some(at))) if s == e => Some(at),
                    _ => None,
                }
            })
            .map_or(Duration::ZERO, |at| now.saturating_duration_since(at))
    }

    /// Hands out what the decoder rebuilt.
    fn collect(&mut self, now: Instant) {
        while let Some(r) = self.dec.poll_recovered() {
            if !self.first_delivery(r.esi, None) {
                continue;
            }
            self.stats.rebuilt += 1;
            let waited = self.waited(r.esi, now);
            self.events.push_back(SlidingDelivery {
                esi: r.esi,
                payload: Bytes::from(r.adu),
                recovered: Some(waited),
            });
        }
    }

    fn on_source(&mut self, now: Instant, body: &[u8]) {
        let Ok((id, adu)) = SourcePayloadId::parse(body) else {
            self.stats.malformed += 1;
            return;
        };
        if adu.len() + ADUI_HEADER_LEN > self.enc.symbol_size() {
            self.stats.malformed += 1;
            return;
        }
        self.stats.sources_received += 1;
        if self.first_delivery(id.esi, Some(now)) {
            self.stats.delivered += 1;
            self.events.push_back(SlidingDelivery {
                esi: id.esi,
                payload: Bytes::copy_from_slice(adu),
                recovered: None,
            });
        } else {
            self.stats.duplicates += 1;
        }
        if self.dec.receive_source_adu(id.esi, 0, adu).is_err() {
            self.stats.malformed += 1;
        }
        self.collect(now);
    }

    fn on_repair(&mut self, now: Instant, body: &[u8]) {
        let Ok((id, symbol)) = RepairPayloadId::parse(body) else {
            self.stats.malformed += 1;
            return;
        };
        self.stats.repairs_received += 1;
        let e = self.enc.symbol_size();
        if symbol.len() > e {
            self.stats.malformed += 1;
            return;
        }
        // Sent without its trailing zeros (see `repair`).
        let mut full = vec![0u8; e];
        full[..symbol.len()].copy_from_slice(symbol);
        if self.dec.receive_repair(id, &full).is_err() {
            self.stats.malformed += 1;
            return;
        }
        self.collect(now);
    }
}

impl Machine for SlidingEndpoint {
    type Event = SlidingDelivery;

    fn handle_datagram(&mut self, now: Instant, src: SocketAddr, data: &[u8]) {
        if src != self.cfg.peer {
            self.stats.foreign += 1;
            return;
        }
        let (Some(&kind), Some(session)) = (data.first(), data.get(1..5)) else {
            self.stats.malformed += 1;
            return;
        };
        if session != self.cfg.session.to_be_bytes() {
            self.stats.foreign += 1;
            return;
        }
        match kind {
            SOURCE_TYPE => self.on_source(now, &data[5..]),
            REPAIR_TYPE => self.on_repair(now, &data[5..]),
            _ => self.stats.malformed += 1,
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        if self.flush_at.is_some_and(|t| t <= now) {
            self.flush_at = None;
            if self.uncovered > 0 {
                self.stats.flush_repairs += 1;
                self.repair();
            }
        }
    }

    fn poll_transmit(&mut self, _now: Instant) -> Option<Transmit> {
        self.out.pop_front()
    }

    fn poll_event(&mut self) -> Option<SlidingDelivery> {
        self.events.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.flush_at
    }
}

/// A source packet of `session` (the tunnel's test before it takes a new
/// peer).
pub fn is_source_of(data: &[u8], session: u32) -> bool {
    data.len() >= SOURCE_HEADER_LEN && data[0] == SOURCE_TYPE && data[1..5] == session.to_be_bytes()
}

#[cfg(test)]
mod tests;
