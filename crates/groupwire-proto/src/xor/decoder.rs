//! The receiving side: media and parity packets in, rebuilt media out.

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;
use groupwire_codec::xor::xor_into;

use super::{Recovery, XorLayout};
use crate::wire::rtp::{FecPacket, RTP_HEADER_LEN, RtpHeader};

/// Sequence numbers held behind the newest by default: room for a matrix
/// of [`MAX_MATRIX`](super::MAX_MATRIX) and its spread parities, well
/// below half the 16-bit sequence space so numbers never alias.
pub const DEFAULT_WINDOW: u16 = 4096;
/// Bytes of media held at most by default.
pub const DEFAULT_MAX_BYTES: usize = 16 << 20;

/// How an [`XorDecoder`] is set up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecoderConfig {
    /// The sender's layout, or `None` to learn `L` and `D` from the first
    /// parity packets as GStreamer's `rtpst2022-1-fecdec` does (with
    /// `partial_groups`: to take any geometry, see there). Parity that
    /// disagrees with it is counted ([`XorDecoderStats::fec_mismatched`])
    /// and dropped.
    pub layout: Option<XorLayout>,
    /// Media sequence numbers held behind the newest (1 to 16384): media
    /// and parity older than this are forgotten. Must cover the spread of
    /// column parities, `2·L·D`.
    pub window: u16,
    /// Bytes of media held at most (the oldest go first), and of parity
    /// (new parity is refused).
    pub max_bytes: usize,
    /// Take groups shorter than the layout's (`NA` below `L` for a row or
    /// `D` for a column, from [`XorEncoder::close`](super::XorEncoder::close)).
    /// Off by default, as in GStreamer. Without a `layout`, every parity
    /// packet's own geometry (its `NA` and offset) is taken and none is
    /// learnt: for a receiver that does not know the sender's layout, or
    /// whose sender changes it.
    pub partial_groups: bool,
}

impl Default for DecoderConfig {
    fn default() -> Self {
        Self {
            layout: None,
            window: DEFAULT_WINDOW,
            max_bytes: DEFAULT_MAX_BYTES,
            partial_groups: false,
        }
    }
}

/// Which parity rebuilt a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Via {
    /// A row parity (`L` consecutive packets).
    Row,
    /// A column parity (`D` packets `L` apart).
    Column,
}

/// A media packet rebuilt from parity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recovered {
    /// Its sequence number.
    pub seq: u16,
    /// The whole RTP packet, as the sender sent it (its SSRC taken from
    /// another packet of the group).
    pub packet: Bytes,
    /// Which parity rebuilt it.
    pub via: Via,
}

/// What became of a media packet given to [`XorDecoder::on_media`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MediaOutcome {
    /// New: hand it to the application.
    New,
    /// Already here, received or rebuilt: drop it.
    Duplicate,
    /// Older than the window: whether it was delivered is forgotten.
    Late,
    /// Not an RTP packet.
    Malformed,
}

/// What an [`XorDecoder`] has seen. Every packet it was given is counted
/// in exactly one of `media`, `media_duplicate`, `media_late`,
/// `media_malformed`, or one of `fec` and the `fec_*` drop counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct XorDecoderStats {
    /// New media packets taken.
    pub media: u64,
    /// Media packets already held (received twice, or after a rebuild).
    pub media_duplicate: u64,
    /// Media packets older than the window.
    pub media_late: u64,
    /// Media packets that are not RTP.
    pub media_malformed: u64,
    /// Parity packets taken.
    pub fec: u64,
    /// Parity packets that do not parse.
    pub fec_malformed: u64,
    /// Parity packets whose `L` or `D` disagrees with the layout.
    pub fec_mismatched: u64,
    /// Parity packets for groups outside the window.
    pub fec_out_of_window: u64,
    /// Parity packets already held.
    pub fec_duplicate: u64,
    /// Rebuilds refused because the length recovery said the packet was
    /// longer than the parity (a corrupt or lying parity packet).
    pub bad_length: u64,
    /// Packets rebuilt from a row parity.
    pub recovered_row: u64,
    /// Packets rebuilt from a column parity.
    pub recovered_column: u64,
    /// Media packets forgotten early to keep within `max_bytes`.
    pub evicted: u64,
    /// Parity packets refused because the parity held already takes
    /// `max_bytes`.
    pub fec_full: u64,
}

impl std::ops::AddAssign for XorDecoderStats {
    /// Adds another decoder's counters (saturating): totals over the
    /// endpoints an [`XorListener`](super::XorListener) has replaced.
    fn add_assign(&mut self, o: Self) {
        // Destructured, so a new field cannot be forgotten here.
        let XorDecoderStats {
            media,
            media_duplicate,
            media_late,
            media_malformed,
            fec,
            fec_malformed,
            fec_mismatched,
            fec_out_of_window,
            fec_duplicate,
            bad_length,
            recovered_row,
            recovered_column,
            evicted,
            fec_full,
        } = o;
        for (a, b) in [
            (&mut self.media, media),
            (&mut self.media_duplicate, media_duplicate),
            (&mut self.media_late, media_late),
            (&mut self.media_malformed, media_malformed),
            (&mut self.fec, fec),
            (&mut self.fec_malformed, fec_malformed),
            (&mut self.fec_mismatched, fec_mismatched),
            (&mut self.fec_out_of_window, fec_out_of_window),
            (&mut self.fec_duplicate, fec_duplicate),
            (&mut self.bad_length, bad_length),
            (&mut self.recovered_row, recovered_row),
            (&mut self.recovered_column, recovered_column),
            (&mut self.evicted, evicted),
            (&mut self.fec_full, fec_full),
        ] {
            *a = a.saturating_add(b);
        }
    }
}

impl XorDecoderStats {
    /// Packets rebuilt either way.
    pub fn recovered(&self) -> u64 {
        self.recovered_row + self.recovered_column
    }
}

/// A held parity packet: the whole packet, and its group's members.
#[derive(Clone, Debug)]
struct Held {
    packet: Bytes,
    step: u64,
    count: u64,
}

/// Rebuilds lost media packets from SMPTE 2022-1 row and column parity.
///
/// Give it every media packet ([`on_media`](Self::on_media): deliver it if
/// the answer is [`MediaOutcome::New`]) and every parity packet
/// ([`on_fec`](Self::on_fec)), in any order, then take rebuilt packets from
/// [`poll_recovered`](Self::poll_recovered). Memory is bounded by the
/// window and `max_bytes`; no input panics it.
#[derive(Debug)]
pub struct XorDecoder {
    cfg: DecoderConfig,
    l: Option<u8>,
    d: Option<u8>,
    /// Newest extended media sequence number (`None` before any packet).
    newest: Option<u64>,
    /// SSRC of the latest media packet (for groups with no other member).
    ssrc: u32,
    media: BTreeMap<u64, Bytes>,
    media_bytes: usize,
    rows: BTreeMap<u64, Held>,
    columns: BTreeMap<u64, Held>,
    fec_bytes: usize,
    out: VecDeque<Recovered>,
    stats: XorDecoderStats,
}

/// Extended sequence numbers start here, so that ones before the first
/// packet stay positive.
const EXT_ORIGIN: u64 = 1 << 32;

impl XorDecoder {
    /// A decoder; `window` is clamped to 1..=16384.
    pub fn new(mut cfg: DecoderConfig) -> Self {
        cfg.window = cfg.window.clamp(1, 16384);
        let (l, d) = match cfg.layout {
            Some(x) => (Some(x.l), x.columns.then_some(x.d)),
            None => (None, None),
        };
        Self {
            cfg,
            l,
            d,
            newest: None,
            ssrc: 0,
            media: BTreeMap::new(),
            media_bytes: 0,
            rows: BTreeMap::new(),
            columns: BTreeMap::new(),
            fec_bytes: 0,
            out: VecDeque::new(),
            stats: XorDecoderStats::default(),
        }
    }

    /// What has been seen so far.
    pub fn stats(&self) -> XorDecoderStats {
        self.stats
    }

    /// `L` and `D` as configured or learned so far.
    pub fn dimensions(&self) -> (Option<u8>, Option<u8>) {
        (self.l, self.d)
    }

    /// Media packets held now (for tests of the memory bound).
    pub fn held_media(&self) -> usize {
        self.media.len()
    }

    /// Parity packets held now.
    pub fn held_fec(&self) -> usize {
        self.rows.len() + self.columns.len()
    }

    /// The next rebuilt packet.
    pub fn poll_recovered(&mut self) -> Option<Recovered> {
        self.out.pop_front()
    }

    /// Takes a received media packet (a whole RTP packet).
    pub fn on_media(&mut self, packet: Bytes) -> MediaOutcome {
        let Ok((h, _)) = RtpHeader::parse(&packet) else {
            self.stats.media_malformed += 1;
            return MediaOutcome::Malformed;
        };
        let seq = self.extend(h.seq);
        if self.is_behind(seq) {
            self.stats.media_late += 1;
            return MediaOutcome::Late;
        }
        if self.media.contains_key(&seq) {
            self.stats.media_duplicate += 1;
            return MediaOutcome::Duplicate;
        }
        self.stats.media += 1;
        self.ssrc = h.ssrc;
        self.store(seq, packet);
        MediaOutcome::New
    }

    /// Takes a parity packet from either FEC stream.
    pub fn on_fec(&mut self, packet: Bytes) {
        let Ok(p) = FecPacket::parse(&packet) else {
            self.stats.fec_malformed += 1;
            return;
        };
        let f = p.fec;
        let (step, count) = if f.row {
            (1, f.na)
        } else {
            (u64::from(f.offset), f.na)
        };
        if !self.fits_layout(f.row, f.offset, f.na) {
            self.stats.fec_mismatched += 1;
            return;
        }
        let base = self.extend(f.sn_base);
        let last = base + step * (u64::from(count) - 1);
        let ahead = self
            .newest
            .is_some_and(|n| base > n + u64::from(self.cfg.window));
        if self.is_behind(last) || ahead || last - base >= u64::from(self.cfg.window) {
            self.stats.fec_out_of_window += 1;
            return;
        }
        let map = if f.row {
            &mut self.rows
        } else {
            &mut self.columns
        };
        if map.contains_key(&base) {
            self.stats.fec_duplicate += 1;
            return;
        }
        if self.fec_bytes + packet.len() > self.cfg.max_bytes {
            self.stats.fec_full += 1;
            return;
        }
        self.stats.fec += 1;
        self.fec_bytes += packet.len();
        map.insert(
            base,
            Held {
                packet,
                step,
                count: u64::from(count),
            },
        );
        if self.newest.is_none() {
            self.newest = Some(last);
        }
        self.work(vec![(f.row, base)]);
    }

    /// Whether a parity's dimensions agree with what is known, learning
    /// what is not (a row gives `L`; a column gives `L` and `D`).
    fn fits_layout(&mut self, row: bool, offset: u8, na: u8) -> bool {
        let (l, d) = if row { (na, None) } else { (offset, Some(na)) };
        if self.cfg.partial_groups && self.cfg.layout.is_none() {
            // Any layout: the header says which packets the parity covers
            // (the parser refuses NA or offset 0).
            return true;
        }
        if self.cfg.partial_groups {
            // Only the counts may fall short; the geometry must agree.
            let short_row = row && self.l.is_some_and(|x| na <= x);
            let short_col = !row && self.l == Some(offset) && self.d.is_some_and(|x| na <= x);
            return (short_row || short_col)
                && self
                    .cfg
                    .layout
                    .is_some_and(|x| if row { x.rows } else { x.columns });
        }
        if self.l.is_some_and(|x| x != l) || d.is_some_and(|d| self.d.is_some_and(|x| x != d)) {
            return false;
        }
        if self
            .cfg
            .layout
            .is_some_and(|x| if row { !x.rows } else { !x.columns })
        {
            return false;
        }
        self.l = Some(l);
        if d.is_some() {
            self.d = d;
        }
        true
    }

    /// The extended sequence number nearest the newest.
    fn extend(&self, seq: u16) -> u64 {
        match self.newest {
            None => EXT_ORIGIN + u64::from(seq),
            Some(n) => {
                let delta = i64::from(seq.wrapping_sub(n as u16) as i16);
                n.saturating_add_signed(delta)
            }
        }
    }

    fn is_behind(&self, seq: u64) -> bool {
        self.newest
            .is_some_and(|n| seq + u64::from(self.cfg.window) <= n)
    }

    /// Holds a received media packet and tries the parity groups it
    /// belongs to.
    fn store(&mut self, seq: u64, packet: Bytes) {
        self.hold(seq, packet);
        let mut todo = Vec::new();
        self.groups_of(seq, &mut todo);
        self.work(todo);
    }

    /// Holds a media packet (received or rebuilt), moves the window, and
    /// keeps within the byte budget.
    fn hold(&mut self, seq: u64, packet: Bytes) {
        self.media_bytes += packet.len();
        self.media.insert(seq, packet);
        if self.newest.is_none_or(|n| seq > n) {
            self.newest = Some(seq);
            self.forget_old();
        }
        while self.media_bytes > self.cfg.max_bytes {
            let Some((_, p)) = self.media.pop_first() else {
                break;
            };
            self.media_bytes -= p.len();
            self.stats.evicted += 1;
        }
    }

    /// The held parity groups `seq` belongs to.
    fn groups_of(&self, seq: u64, todo: &mut Vec<(bool, u64)>) {
        for (&base, g) in self.rows.range(seq.saturating_sub(255)..=seq).rev() {
            if base + g.count > seq {
                todo.push((true, base));
            }
        }
        if let (Some(l), Some(d)) = (self.l, self.d) {
            for i in 0..u64::from(d) {
                let Some(base) = seq.checked_sub(i * u64::from(l)) else {
                    break;
                };
                if self.columns.contains_key(&base) {
                    todo.push((false, base));
                }
            }
        } else if self.cfg.partial_groups && self.cfg.layout.is_none() {
            // Any layout: each held column has its own step and count; a
            // column spans at most 254 steps of 255.
            let from = seq.saturating_sub(254 * 255);
            for (&base, g) in self.columns.range(from..=seq) {
                let off = seq - base;
                if off % g.step == 0 && off / g.step < g.count {
                    todo.push((false, base));
                }
            }
        }
    }

    /// Tries each group on the list, and the groups of whatever it rebuilds,
    /// until nothing more can be rebuilt.
    fn work(&mut self, mut todo: Vec<(bool, u64)>) {
        while let Some((row, base)) = todo.pop() {
            let map = if row { &self.rows } else { &self.columns };
            let Some(g) = map.get(&base) else { continue };
            let members = (0..g.count).map(|i| base + i * g.step);
            let mut missing = members.clone().filter(|s| !self.media.contains_key(s));
            let (Some(lost), None) = (missing.next(), missing.next()) else {
                // None missing: the parity is spent. Two or more: wait.
                if members.clone().all(|s| self.media.contains_key(&s)) {
                    self.remove(row, base);
                }
                continue;
            };
            let g = self.remove(row, base);
            let Some(packet) = self.rebuild(&g, base, lost) else {
                self.stats.bad_length += 1;
                continue;
            };
            let via = if row { Via::Row } else { Via::Column };
            match via {
                Via::Row => self.stats.recovered_row += 1,
                Via::Column => self.stats.recovered_column += 1,
            }
            self.out.push_back(Recovered {
                seq: lost as u16,
                packet: packet.clone(),
                via,
            });
            // A group that straddles the window's edge can rebuild a packet
            // just behind it: hand it out, but do not hold it.
            if !self.is_behind(lost) {
                self.hold(lost, packet);
                self.groups_of(lost, &mut todo);
            }
        }
    }

    fn remove(&mut self, row: bool, base: u64) -> Held {
        let map = if row {
            &mut self.rows
        } else {
            &mut self.columns
        };
        let held = map.remove(&base).unwrap_or(Held {
            packet: Bytes::new(),
            step: 1,
            count: 0,
        });
        self.fec_bytes -= held.packet.len();
        held
    }

    /// XORs the parity with every other member; `None` if the recovered
    /// length does not fit the parity.
    fn rebuild(&self, g: &Held, base: u64, lost: u64) -> Option<Bytes> {
        let p = FecPacket::parse(&g.packet).ok()?;
        let others = || {
            (0..g.count)
                .map(|i| base + i * g.step)
                .filter(|&s| s != lost)
                .filter_map(|s| self.media.get(&s))
                .filter_map(|m| RtpHeader::parse(m).ok())
        };
        let mut r = Recovery {
            padding: p.rtp.padding,
            extension: p.rtp.extension,
            csrc_count: p.rtp.csrc_count,
            marker: p.rtp.marker,
            payload_type: p.fec.pt_recovery,
            timestamp: p.fec.ts_recovery,
            length: p.fec.length_recovery,
        };
        let mut ssrc = self.ssrc;
        for (m, body) in others() {
            r.add(&m, body);
            ssrc = m.ssrc;
        }
        let len = usize::from(r.length);
        if len > p.parity.len() {
            return None;
        }
        let mut out = vec![0u8; RTP_HEADER_LEN + len];
        RtpHeader {
            padding: r.padding,
            extension: r.extension,
            csrc_count: r.csrc_count & 0x0f,
            marker: r.marker,
            payload_type: r.payload_type & 0x7f,
            seq: lost as u16,
            timestamp: r.timestamp,
            ssrc,
        }
        .emit(&mut out);
        let body = &mut out[RTP_HEADER_LEN..];
        body.copy_from_slice(&p.parity[..len]);
        for (_, other) in others() {
            xor_into(body, other);
        }
        Some(Bytes::from(out))
    }

    /// Forgets media and parity the window has passed.
    fn forget_old(&mut self) {
        let Some(newest) = self.newest else { return };
        let Some(oldest) = newest.checked_sub(u64::from(self.cfg.window) - 1) else {
            return;
        };
        while let Some(entry) = self.media.first_entry() {
            if *entry.key() >= oldest {
                break;
            }
            self.media_bytes -= entry.remove().len();
        }
        // Groups that start before `oldest`: few, since older ones went
        // at earlier calls (at most one row and `L` columns overlap it).
        for row in [true, false] {
            let map = if row { &self.rows } else { &self.columns };
            let gone: Vec<u64> = map
                .range(..oldest)
                .filter(|(base, g)| *base + g.step * (g.count - 1) < oldest)
                .map(|(base, _)| *base)
                .collect();
            for base in gone {
                self.remove(row, base);
            }
        }
    }
}
