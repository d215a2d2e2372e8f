//! Leigh et al.'s XOR parity (§4.1: one redundant packet, the XOR of `N`
//! consecutive data packets) in RFC 5109's ULPFEC format, as WebRTC stacks
//! and GStreamer's `rtpulpfecenc`/`rtpulpfecdec` send it: the FEC packets
//! ride in the media's own RTP stream, each taking the next sequence
//! number. Wire format: [`crate::wire::ulpfec`].
//!
//! - [`UlpfecEncoder`] numbers the media it is given afresh (the FEC
//!   packets need sequence numbers between them, as GStreamer's encoder
//!   does too) and sends one FEC packet after every `group` media packets.
//! - [`UlpfecDecoder`] keeps a bounded window of the media it saw and the
//!   FEC packets that protect it; whenever a FEC packet's protected set
//!   lacks exactly one packet, it rebuilds that one, byte for byte.
//!
//! Compared with SMPTE 2022-1 ([`super::XorEncoder`]): one stream instead
//! of three (no extra ports, the FEC crosses the same NATs and SFUs), any
//! set of up to 48 packets per parity (not only rows and columns); but a
//! receiver that knows nothing of FEC sees gaps in the sequence numbers
//! where the FEC packets were, unless it drops the FEC payload type.

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;
use groupwire_codec::xor::xor_into;

use crate::wire::WireError;
use crate::wire::rtp::{RTP_HEADER_LEN, RtpHeader};
use crate::wire::ulpfec::{MAX_PROTECTED, UlpfecHeader, UlpfecPacket};

/// The payload type GStreamer's examples and many WebRTC stacks give
/// ULPFEC.
pub const DEFAULT_FEC_PT: u8 = 122;

/// Sends one ULPFEC packet after every `group` media packets, in the media's
/// own stream.
#[derive(Debug)]
pub struct UlpfecEncoder {
    fec_pt: u8,
    group: usize,
    /// The next sequence number to give out.
    next_seq: Option<u16>,
    /// The current group's packets, renumbered.
    pending: Vec<Vec<u8>>,
    out: VecDeque<Vec<u8>>,
    fec_sent: u64,
}

impl UlpfecEncoder {
    /// An encoder with one FEC packet (payload type `fec_pt`) per `group`
    /// media packets (1 to 48: a FEC packet's mask covers 48).
    pub fn new(group: usize, fec_pt: u8) -> Result<Self, WireError> {
        if !(1..=MAX_PROTECTED).contains(&group) {
            return Err(WireError::Malformed("ULPFEC group must be 1 to 48"));
        }
        Ok(Self {
            fec_pt: fec_pt & 0x7f,
            group,
            next_seq: None,
            pending: Vec::with_capacity(group),
            out: VecDeque::new(),
            fec_sent: 0,
        })
    }

    /// Takes media packet `packet` (RTP); queues it renumbered (the first
    /// keeps its number, the rest follow on, with room for the FEC), and
    /// the group's FEC packet when the group is full. Fails on a packet
    /// that is not RTP, or whose payload type is the FEC one.
    pub fn push(&mut self, packet: &[u8]) -> Result<(), WireError> {
        let (h, _) = RtpHeader::parse(packet)?;
        if h.payload_type == self.fec_pt {
            return Err(WireError::Malformed("media uses the FEC payload type"));
        }
        let seq = *self.next_seq.get_or_insert(h.seq);
        let mut p = packet.to_vec();
        p[2..4].copy_from_slice(&seq.to_be_bytes());
        self.next_seq = Some(seq.wrapping_add(1));
        self.out.push_back(p.clone());
        self.pending.push(p);
        if self.pending.len() == self.group {
            self.flush();
        }
        Ok(())
    }

    /// Sends the FEC packet of a group not yet full (at the end of a
    /// stream, or before a pause).
    pub fn flush(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let Some(seq) = self.next_seq else { return };
        let group = std::mem::take(&mut self.pending);
        let (first, _) = RtpHeader::parse(&group[0]).expect("checked in push");
        let last = RtpHeader::parse(&group[group.len() - 1])
            .expect("checked in push")
            .0;
        let mut header = UlpfecHeader {
            sn_base: first.seq,
            mask: (u64::MAX << (64 - group.len())) >> 16,
            ..UlpfecHeader::default()
        };
        let mut parity = Vec::new();
        for p in &group {
            let body = &p[RTP_HEADER_LEN..];
            header.pxcc_recovery ^= p[0] & 0x3f;
            header.marker_recovery ^= p[1] & 0x80 != 0;
            header.pt_recovery ^= p[1] & 0x7f;
            header.ts_recovery ^= u32::from_be_bytes([p[4], p[5], p[6], p[7]]);
            header.length_recovery ^= body.len() as u16;
            if parity.len() < body.len() {
                parity.resize(body.len(), 0);
            }
            xor_into(&mut parity[..body.len()], body);
        }
        header.protection_len = parity.len() as u16;
        let fec = UlpfecPacket {
            header,
            payload: &parity,
        };
        let rtp = RtpHeader {
            payload_type: self.fec_pt,
            seq,
            timestamp: last.timestamp,
            ssrc: last.ssrc,
            ..RtpHeader::default()
        };
        let mut out = vec![0u8; RTP_HEADER_LEN + fec.buffer_len()];
        rtp.emit(&mut out);
        fec.emit(&mut out[RTP_HEADER_LEN..]);
        self.next_seq = Some(seq.wrapping_add(1));
        self.out.push_back(out);
        self.fec_sent += 1;
    }

    /// The next packet to send (media and FEC, in order).
    pub fn poll(&mut self) -> Option<Vec<u8>> {
        self.out.pop_front()
    }

    /// FEC packets sent so far.
    pub fn fec_sent(&self) -> u64 {
        self.fec_sent
    }
}

/// What [`UlpfecDecoder::on_packet`] made of a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UlpfecOutcome {
    /// A media packet seen for the first time: hand it to the application.
    Media,
    /// A FEC packet, kept.
    Fec,
    /// A media packet seen (or rebuilt) already.
    Duplicate,
    /// Too far behind the window, or not RTP, or a FEC packet that does
    /// not parse: counted and dropped.
    Dropped,
}

/// A rebuilt media packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UlpfecRecovered {
    /// Its sequence number.
    pub seq: u16,
    /// The whole RTP packet.
    pub packet: Bytes,
}

/// Counters of a [`UlpfecDecoder`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UlpfecStats {
    /// Media packets received (first copies).
    pub media: u64,
    /// FEC packets received and kept.
    pub fec: u64,
    /// Media packets rebuilt.
    pub recovered: u64,
    /// FEC packets that could not rebuild their one missing packet whole
    /// (it was longer than the protection length, or the recovered length
    /// is impossible).
    pub unrecoverable: u64,
    /// Packets dropped: not RTP, malformed FEC, too old.
    pub dropped: u64,
    /// Media packets seen twice.
    pub duplicates: u64,
}

/// Rebuilds single losses from ULPFEC packets, within a bounded window.
#[derive(Debug)]
pub struct UlpfecDecoder {
    fec_pt: u8,
    window: u64,
    /// Media by extended sequence number.
    media: BTreeMap<u64, Bytes>,
    /// FEC packets kept: extended SN base, and the packet.
    fec: VecDeque<(u64, Bytes)>,
    /// The highest extended sequence number seen.
    highest: Option<u64>,
    recovered: VecDeque<UlpfecRecovered>,
    stats: UlpfecStats,
}

/// Sequence numbers of media a decoder keeps by default behind the newest.
pub const DEFAULT_WINDOW: u16 = 512;
/// FEC packets a decoder keeps at most.
const MAX_FEC: usize = 128;

impl UlpfecDecoder {
    /// A decoder for FEC payload type `fec_pt`, keeping `window` (16 to
    /// 16384) sequence numbers behind the newest.
    pub fn new(fec_pt: u8, window: u16) -> Self {
        Self {
            fec_pt: fec_pt & 0x7f,
            window: u64::from(window.clamp(16, 16384)),
            media: BTreeMap::new(),
            fec: VecDeque::new(),
            highest: None,
            recovered: VecDeque::new(),
            stats: UlpfecStats::default(),
        }
    }

    /// Takes one packet of the stream (media or FEC, any order).
    pub fn on_packet(&mut self, packet: Bytes) -> UlpfecOutcome {
        let Ok((h, body)) = RtpHeader::parse(&packet) else {
            self.stats.dropped += 1;
            return UlpfecOutcome::Dropped;
        };
        if h.payload_type == self.fec_pt {
            let Ok(f) = UlpfecPacket::parse(body) else {
                self.stats.dropped += 1;
                return UlpfecOutcome::Dropped;
            };
            let Some(base) = self
                .extend(h.seq)
                .and_then(|_| self.extend(f.header.sn_base))
            else {
                self.stats.dropped += 1;
                return UlpfecOutcome::Dropped;
            };
            self.note(h.seq);
            if self.fec.len() == MAX_FEC {
                self.fec.pop_front();
            }
            self.fec.push_back((base, packet));
            self.stats.fec += 1;
            self.recover();
            return UlpfecOutcome::Fec;
        }
        let Some(ext) = self.extend(h.seq) else {
            self.stats.dropped += 1;
            return UlpfecOutcome::Dropped;
        };
        if self.media.contains_key(&ext) {
            self.stats.duplicates += 1;
            return UlpfecOutcome::Duplicate;
        }
        self.note(h.seq);
        self.media.insert(ext, packet);
        self.stats.media += 1;
        self.recover();
        UlpfecOutcome::Media
    }

    /// The next rebuilt packet.
    pub fn poll_recovered(&mut self) -> Option<UlpfecRecovered> {
        self.recovered.pop_front()
    }

    /// The counters.
    pub fn stats(&self) -> UlpfecStats {
        self.stats
    }

    /// `seq` extended to 64 bits near the highest seen; `None` if it is
    /// behind the window.
    fn extend(&self, seq: u16) -> Option<u64> {
        let Some(high) = self.highest else {
            return Some(1 << 32 | u64::from(seq));
        };
        let delta = i64::from(seq.wrapping_sub(high as u16) as i16);
        let ext = high.checked_add_signed(delta)?;
        (ext + self.window > high).then_some(ext)
    }

    /// Moves the window forward to `seq` and forgets what falls out of it.
    fn note(&mut self, seq: u16) {
        let ext = self.extend(seq).expect("checked by the caller");
        if self.highest.is_some_and(|h| ext <= h) {
            return;
        }
        self.highest = Some(ext);
        let floor = ext.saturating_sub(self.window);
        self.media = self.media.split_off(&floor);
        self.fec
            .retain(|(base, _)| base + MAX_PROTECTED as u64 > floor);
    }

    /// Rebuilds, until nothing changes, every packet that is the only one
    /// missing from some FEC packet's set.
    fn recover(&mut self) {
        loop {
            let mut progress = false;
            let mut i = 0;
            while i < self.fec.len() {
                let (base, ref packet) = self.fec[i];
                let f = UlpfecPacket::parse(&packet[RTP_HEADER_LEN..]).expect("parsed when kept");
                let ssrc = RtpHeader::parse(packet).expect("parsed when kept").0.ssrc;
                let set: Vec<u64> = (0..MAX_PROTECTED as u64)
                    .filter(|k| f.header.mask >> (47 - k) & 1 == 1)
                    .map(|k| base + k)
                    .collect();
                let missing: Vec<u64> = set
                    .iter()
                    .copied()
                    .filter(|s| !self.media.contains_key(s))
                    .collect();
                match missing[..] {
                    [] => {
                        self.fec.remove(i);
                        continue;
                    }
                    [lost] => {
                        let rebuilt = self.rebuild(&f, ssrc, lost, &set);
                        self.fec.remove(i);
                        match rebuilt {
                            Some(p) => {
                                self.media.insert(lost, p.clone());
                                self.recovered.push_back(UlpfecRecovered {
                                    seq: lost as u16,
                                    packet: p,
                                });
                                self.stats.recovered += 1;
                                progress = true;
                            }
                            None => self.stats.unrecoverable += 1,
                        }
                        continue;
                    }
                    _ => {}
                }
                i += 1;
            }
            if !progress {
                return;
            }
        }
    }

    /// Media packet `lost` from FEC packet `f` and the other packets of
    /// `set` (all present).
    fn rebuild(&self, f: &UlpfecPacket<'_>, ssrc: u32, lost: u64, set: &[u64]) -> Option<Bytes> {
        let mut h = f.header;
        let mut body = f.payload.to_vec();
        for s in set.iter().filter(|s| **s != lost) {
            let p = &self.media[s];
            h.pxcc_recovery ^= p[0] & 0x3f;
            h.marker_recovery ^= p[1] & 0x80 != 0;
            h.pt_recovery ^= p[1] & 0x7f;
            h.ts_recovery ^= u32::from_be_bytes([p[4], p[5], p[6], p[7]]);
            let other = &p[RTP_HEADER_LEN..];
            h.length_recovery ^= other.len() as u16;
            let n = other.len().min(body.len());
            xor_into(&mut body[..n], &other[..n]);
        }
        let len = usize::from(h.length_recovery);
        if len > body.len() {
            return None;
        }
        let rtp = RtpHeader {
            padding: h.pxcc_recovery & 0x20 != 0,
            extension: h.pxcc_recovery & 0x10 != 0,
            csrc_count: h.pxcc_recovery & 0x0f,
            marker: h.marker_recovery,
            payload_type: h.pt_recovery,
            seq: lost as u16,
            timestamp: h.ts_recovery,
            ssrc,
        };
        Some(Bytes::from(rtp.to_packet(&body[..len])))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn media(seq: u16, len: usize) -> Vec<u8> {
        RtpHeader {
            payload_type: 96,
            seq,
            timestamp: u32::from(seq) * 3000,
            marker: seq % 3 == 0,
            ssrc: 0x1234,
            ..RtpHeader::default()
        }
        .to_packet(&(0..len).map(|i| (i as u16 ^ seq) as u8).collect::<Vec<_>>())
    }

    /// The encoder's output for media 0..n in groups of `group`.
    fn encode(n: u16, group: usize) -> Vec<Vec<u8>> {
        let mut e = UlpfecEncoder::new(group, DEFAULT_FEC_PT).expect("group");
        let mut out = Vec::new();
        for s in 0..n {
            e.push(&media(s, 10 + usize::from(s % 7) * 13))
                .expect("RTP");
            out.extend(std::iter::from_fn(|| e.poll()));
        }
        e.flush();
        out.extend(std::iter::from_fn(|| e.poll()));
        out
    }

    #[test]
    fn one_fec_per_group_in_the_media_stream() {
        let out = encode(7, 3);
        let pts: Vec<u8> = out
            .iter()
            .map(|p| RtpHeader::parse(p).expect("RTP").0.payload_type)
            .collect();
        assert_eq!(pts, [96, 96, 96, 122, 96, 96, 96, 122, 96, 122]);
        let seqs: Vec<u16> = out
            .iter()
            .map(|p| RtpHeader::parse(p).expect("RTP").0.seq)
            .collect();
        assert_eq!(seqs, (0..10).collect::<Vec<_>>());
    }

    #[test]
    fn rebuilds_any_single_loss_per_group_byte_for_byte() {
        let out = encode(30, 3);
        for drop in 0..out.len() {
            let mut d = UlpfecDecoder::new(DEFAULT_FEC_PT, DEFAULT_WINDOW);
            for (i, p) in out.iter().enumerate() {
                if i != drop {
                    d.on_packet(Bytes::copy_from_slice(p));
                }
            }
            let is_fec = RtpHeader::parse(&out[drop]).expect("RTP").0.payload_type == 122;
            match d.poll_recovered() {
                Some(r) => {
                    assert!(!is_fec);
                    assert_eq!(&r.packet[..], &out[drop][..], "packet {drop}");
                }
                None => assert!(is_fec, "media {drop} not rebuilt"),
            }
            assert_eq!(d.stats().unrecoverable, 0);
        }
    }

    #[test]
    fn two_losses_in_a_group_are_not_rebuilt() {
        let out = encode(3, 3);
        let mut d = UlpfecDecoder::new(DEFAULT_FEC_PT, DEFAULT_WINDOW);
        for p in [&out[0], &out[3]] {
            d.on_packet(Bytes::copy_from_slice(p));
        }
        assert_eq!(d.poll_recovered(), None);
        // The late one completes the set and the last is rebuilt.
        d.on_packet(Bytes::copy_from_slice(&out[2]));
        assert_eq!(d.poll_recovered().map(|r| r.seq), Some(1));
    }

    #[test]
    fn bad_groups_are_refused() {
        assert!(UlpfecEncoder::new(0, 122).is_err());
        assert!(UlpfecEncoder::new(49, 122).is_err());
        let mut e = UlpfecEncoder::new(2, 96).expect("group");
        assert!(e.push(&media(1, 5)).is_err(), "media on the FEC type");
        assert!(e.push(&[1, 2, 3]).is_err());
    }

    proptest! {
        /// Whatever the bytes, order or sequence numbers, the decoder never
        /// panics and rebuilds only packets it did not have.
        #[test]
        fn hostile_input_is_safe(
            packets in proptest::collection::vec(
                (any::<u16>(), any::<bool>(), proptest::collection::vec(any::<u8>(), 0..40)),
                0..60,
            ),
        ) {
            let mut d = UlpfecDecoder::new(122, 16);
            for (seq, fec, body) in packets {
                let h = RtpHeader {
                    payload_type: if fec { 122 } else { 96 },
                    seq,
                    ..RtpHeader::default()
                };
                d.on_packet(Bytes::from(h.to_packet(&body)));
            }
            let s = d.stats();
            prop_assert!(s.recovered + s.unrecoverable <= s.fec);
            prop_assert!(d.media.len() <= 16 + 48 + 1);
        }
    }
}
