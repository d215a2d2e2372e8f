//! The block-FEC receiver (GENEVA §3.2.1): recovery, delivery and SYN reports.

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use groupwire_codec::{Decoder, ReedSolomon};

use super::{DEFAULT_SYN, pad_symbol, unpad_symbol, unwrap32};
use crate::control::tfrc::{DataPacketInfo, TfrcConfig, TfrcFeedback, TfrcReceiver};
use crate::machine::{Machine, Transmit, Transport};
use crate::time::Instant;
use crate::wire::WireError;
use crate::wire::block::{DataRepr, LossRuns, ReportRepr, SYMBOL_PREFIX, Symbol, TfrcFields};

/// Configuration of a [`BlockReceiver`].
#[derive(Clone, Debug, PartialEq)]
pub struct ReceiverConfig {
    /// Session id; packets of other sessions are counted and dropped.
    pub session: u32,
    /// Report interval (SYN, GENEVA §3.2.1: 10 ms).
    pub syn: Duration,
    /// Deliver in data sequence order, holding packets behind a gap for up
    /// to [`max_wait`](Self::max_wait) (`true`, a media player's view), or
    /// each at once, recovered ones when rebuilt (`false`, the tunnel's).
    pub ordered: bool,
    /// How long a missing packet may hold up the packets after it before it
    /// is given up as lost. GENEVA §3.2.4 budgets about 150 ms of FEC delay.
    pub max_wait: Duration,
    /// Blocks held at once; a new block beyond it evicts the oldest
    /// (bounds memory against floods of block ids).
    pub max_blocks: usize,
    /// Largest symbol (repair payload) accepted; bigger packets are dropped.
    pub max_symbol: usize,
    /// Data sequence numbers tracked ahead of the oldest undelivered one.
    pub reorder_window: usize,
    /// Emit a [`Delivery`] per packet (`false`: count only, as the
    /// simulator's long runs do).
    pub emit_deliveries: bool,
    /// Stop reporting after this long without a packet.
    pub idle_after: Duration,
    /// Run TFRC's loss-event estimator (RFC 5348 §5) and put `X_recv` and
    /// `p` in the reports, for a rate-controlled sender.
    pub tfrc: bool,
    /// Bytes each data packet counts for in `X_recv`; `None`: its size plus
    /// 28 bytes of IP and UDP header (see `SenderConfig::wire_size`).
    pub wire_size: Option<u32>,
    /// Take data packets without a CRC-32 ([`FLAG_UNCHECKED`](crate::wire::block::FLAG_UNCHECKED)).
    /// Only under a layer that authenticates every datagram first (the
    /// tunnel's `--key-file`); otherwise they count as corrupt.
    pub allow_unchecked: bool,
}

impl Default for ReceiverConfig {
    fn default() -> Self {
        Self {
            session: 0,
            syn: DEFAULT_SYN,
            ordered: true,
            max_wait: Duration::from_millis(150),
            max_blocks: 32,
            max_symbol: 2048,
            reorder_window: 8192,
            emit_deliveries: true,
            idle_after: Duration::from_secs(1),
            tfrc: false,
            wire_size: None,
            allow_unchecked: false,
        }
    }
}

/// One source packet handed to the application.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// Its data sequence number (widened to 64 bits).
    pub data_seq: u64,
    /// The datagram the sender's application sent.
    pub payload: Bytes,
    /// Rebuilt by the code rather than received.
    pub recovered: bool,
}

/// What a [`BlockReceiver`] has seen. Every dropped datagram is counted in
/// exactly one of the "dropped" fields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReceiverStats {
    /// Valid data packets of this session.
    pub packets: u64,
    /// ... source packets among them.
    pub source_packets: u64,
    /// ... repair packets among them.
    pub repair_packets: u64,
    /// Packets found missing from sequence gaps.
    pub lost_packets: u64,
    /// Gaps of more than three packets (GENEVA §4.1's bursty loss event).
    pub bursty_loss_events: u64,
    /// Runs of consecutive missing packets (every gap, whatever its
    /// length): `lost_packets / loss_runs` is the mean run length.
    pub loss_runs: u64,
    /// Packets that arrived after a later one.
    pub reordered: u64,
    /// Source packets delivered (received or rebuilt).
    pub delivered: u64,
    /// ... of which rebuilt by the code.
    pub recovered: u64,
    /// Source packets given up as lost (residual loss).
    pub unrecovered: u64,
    /// Blocks decoded.
    pub decodes: u64,
    /// Reports sent.
    pub reports_sent: u64,
    /// Dropped: not a valid block data packet.
    pub malformed: u64,
    /// Dropped: another session.
    pub other_session: u64,
    /// Dropped: a symbol already held.
    pub duplicates: u64,
    /// Dropped: a block already evicted or finished long ago (a replay).
    pub stale: u64,
    /// Dropped: arrived after its data sequence number was given up.
    pub late: u64,
    /// Dropped: disagrees with its block (shape, base, symbol length).
    pub inconsistent: u64,
    /// Dropped: a symbol over [`ReceiverConfig::max_symbol`].
    pub oversized: u64,
    /// Dropped: the datagram's checksum did not match (corrupted in
    /// transit); a corrupted source may still be rebuilt, a corrupted
    /// repair is never used.
    pub corrupt: u64,
    /// Rebuilt sources whose own checksum failed (a forged or inconsistent
    /// block); not handed out, so they end up given up as lost. Not a
    /// dropped datagram.
    pub corrupt_rebuilt: u64,
    /// Blocks evicted by the [`ReceiverConfig::max_blocks`] cap while
    /// still incomplete.
    pub evicted: u64,
}

impl std::ops::AddAssign for ReceiverStats {
    /// Adds another receiver's counters (saturating): a tunnel's totals
    /// over the receivers it has replaced.
    fn add_assign(&mut self, o: Self) {
        // Destructured, so a new field cannot be forgotten here.
        let ReceiverStats {
            packets,
            source_packets,
            repair_packets,
            lost_packets,
            bursty_loss_events,
            loss_runs,
            reordered,
            delivered,
            recovered,
            unrecovered,
            decodes,
            reports_sent,
            malformed,
            other_session,
            duplicates,
            stale,
            late,
            inconsistent,
            oversized,
            corrupt,
            corrupt_rebuilt,
            evicted,
        } = o;
        for (a, b) in [
            (&mut self.packets, packets),
            (&mut self.source_packets, source_packets),
            (&mut self.repair_packets, repair_packets),
            (&mut self.lost_packets, lost_packets),
            (&mut self.bursty_loss_events, bursty_loss_events),
            (&mut self.loss_runs, loss_runs),
            (&mut self.reordered, reordered),
            (&mut self.delivered, delivered),
            (&mut self.recovered, recovered),
            (&mut self.unrecovered, unrecovered),
            (&mut self.decodes, decodes),
            (&mut self.reports_sent, reports_sent),
            (&mut self.malformed, malformed),
            (&mut self.other_session, other_session),
            (&mut self.duplicates, duplicates),
            (&mut self.stale, stale),
            (&mut self.late, late),
            (&mut self.inconsistent, inconsistent),
            (&mut self.oversized, oversized),
            (&mut self.corrupt, corrupt),
            (&mut self.corrupt_rebuilt, corrupt_rebuilt),
            (&mut self.evicted, evicted),
        ] {
            *a = a.saturating_add(b);
        }
    }
}

#[derive(Debug, Default)]
struct BlockState {
    /// Data sequence number of source index 0.
    base: Option<u64>,
    /// `(k, m)` from a repair packet.
    shape: Option<(usize, usize)>,
    symbol_len: Option<usize>,
    sources: Vec<Option<Bytes>>,
    repairs: Vec<(usize, Bytes)>,
    /// Every source delivered or rebuilt; buffers freed.
    done: bool,
}

impl BlockState {
    fn source_count(&self) -> usize {
        self.sources.iter().flatten().count()
    }

    fn free(&mut self) {
        self.done = true;
        self.sources = Vec::new();
        self.repairs = Vec::new();
    }
}

#[derive(Debug)]
enum Slot {
    Missing,
    /// Delivered already (immediate mode); arrival time.
    Done(Instant),
    /// Waiting for the gap before it (ordered mode).
    Held(Instant, Bytes, bool),
}

/// The receiving half of GENEVA. See the [module docs](super).
#[derive(Debug)]
pub struct BlockReceiver {
    cfg: ReceiverConfig,
    stats: ReceiverStats,
    peer: Option<SocketAddr>,
    // Loss counting and the RTT echo, in packet sequence numbers.
    highest: Option<u64>,
    highest_at: Instant,
    interval_lost: u32,
    interval_received: u32,
    /// Loss runs counted in this interval (for the report's extension).
    interval_runs: LossRuns,
    last_packet_at: Instant,
    /// The sender's RTT estimate, from its latest data packet that had one.
    peer_rtt: Option<Duration>,
    next_report: Option<Instant>,
    report_seq: u32,
    // Blocks by widened id.
    blocks: BTreeMap<u64, BlockState>,
    high_block: Option<u64>,
    block_floor: u64,
    decoders: Vec<Decoder>,
    // Delivery, in data sequence numbers.
    frontier: Option<u64>,
    slots: VecDeque<Slot>,
    hole_deadline: Option<Instant>,
    events: VecDeque<Delivery>,
    transmits: VecDeque<Transmit>,
    scratch: Vec<u8>,
    tfrc: Option<TfrcReceiver>,
    /// The latest TFRC feedback not yet reported.
    tfrc_pending: Option<TfrcFeedback>,
}

impl BlockReceiver {
    /// A receiver with `cfg`.
    pub fn new(mut cfg: ReceiverConfig) -> Self {
        cfg.max_blocks = cfg.max_blocks.max(1);
        cfg.reorder_window = cfg.reorder_window.max(256);
        let tfrc = cfg.tfrc.then(|| TfrcReceiver::new(TfrcConfig::default()));
        Self {
            tfrc,
            tfrc_pending: None,
            cfg,
            stats: ReceiverStats::default(),
            peer: None,
            highest: None,
            highest_at: Instant::ZERO,
            interval_lost: 0,
            interval_received: 0,
            interval_runs: LossRuns::default(),
            last_packet_at: Instant::ZERO,
            peer_rtt: None,
            next_report: None,
            report_seq: 0,
            blocks: BTreeMap::new(),
            high_block: None,
            block_floor: 0,
            decoders: Vec::new(),
            frontier: None,
            slots: VecDeque::new(),
            hole_deadline: None,
            events: VecDeque::new(),
            transmits: VecDeque::new(),
            scratch: Vec::new(),
        }
    }

    /// The round trip the sender last told us (its data packets carry its
    /// estimate), for a latency figure on the receiving side.
    pub fn peer_rtt(&self) -> Option<Duration> {
        self.peer_rtt
    }

    /// What it has seen.
    pub fn stats(&self) -> ReceiverStats {
        self.stats
    }

    /// Blocks held now (bounded by [`ReceiverConfig::max_blocks`]).
    pub fn blocks_held(&self) -> usize {
        self.blocks.len()
    }

    /// The address reports go to (the latest sender of a valid packet).
    pub fn peer(&self) -> Option<SocketAddr> {
        self.peer
    }

    fn count_seq(&mut self, now: Instant, seq: u32) {
        let s = unwrap32(self.highest.unwrap_or(u64::from(seq)), seq);
        match self.highest {
            None => {
                self.highest = Some(s);
                self.highest_at = now;
            }
            Some(h) if s > h => {
                let gap = s - h - 1;
                self.stats.lost_packets += gap;
                self.interval_lost = self
                    .interval_lost
                    .saturating_add(u32::try_from(gap).unwrap_or(u32::MAX));
                if gap > 3 {
                    self.stats.bursty_loss_events += 1;
                }
                if gap > 0 {
                    self.stats.loss_runs += 1;
                    self.interval_runs.add(gap);
                }
                self.highest = Some(s);
                self.highest_at = now;
            }
            Some(_) => {
                // A late packet takes back one loss of this interval.
                self.stats.reordered += 1;
                self.interval_lost = self.interval_lost.saturating_sub(1);
                self.stats.lost_packets = self.stats.lost_packets.saturating_sub(1);
            }
        }
        self.interval_received = self.interval_received.saturating_add(1);
    }

    fn on_data(&mut self, now: Instant, d: DataRepr<'_>) {
        // Which block: widened against the highest seen; replays are stale.
        let block = unwrap32(self.high_block.unwrap_or(u64::from(d.block)), d.block);
        if block < self.block_floor || self.blocks.get(&block).is_some_and(|b| b.done) {
            // A finished block's late repair is normal, not hostile.
            if block < self.block_floor {
                self.stats.stale += 1;
            } else {
                self.stats.duplicates += 1;
            }
            return;
        }
        let index = usize::from(d.index);
        let base_of_packet = match d.symbol {
            Symbol::Source => self.widen_data(d.data_seq).checked_sub(index as u64),
            Symbol::Repair { .. } => Some(self.widen_data(d.data_seq)),
        };
        let Some(base) = base_of_packet else {
            self.stats.inconsistent += 1;
            return;
        };
        if let Symbol::Repair { .. } = d.symbol {
            if d.payload.len() > self.cfg.max_symbol || d.payload.len() < SYMBOL_PREFIX {
                self.stats.oversized += 1;
                return;
            }
        } else if d.payload.len() + SYMBOL_PREFIX > self.cfg.max_symbol {
            self.stats.oversized += 1;
            return;
        }
        // Admit the block, evicting the oldest beyond the cap.
        if let std::collections::btree_map::Entry::Vacant(e) = self.blocks.entry(block) {
            e.insert(BlockState::default());
            self.high_block = Some(self.high_block.map_or(block, |h| h.max(block)));
            while self.blocks.len() > self.cfg.max_blocks {
                if let Some((old, st)) = self.blocks.pop_first() {
                    if !st.done {
                        self.stats.evicted += 1;
                    }
                    self.block_floor = self.block_floor.max(old + 1);
                }
            }
            if !self.blocks.contains_key(&block) {
                // It was the oldest itself.
                self.stats.stale += 1;
                return;
            }
        }
        if self.frontier.is_none() {
            // Start delivery at the first block's first source, so losses at
            // its head are counted (and can be rebuilt).
            self.frontier = Some(base);
        }
        let st = self.blocks.get_mut(&block).expect("admitted above");
        if st.base.is_some_and(|b| b != base) {
            self.stats.inconsistent += 1;
            return;
        }
        st.base = Some(base);
        match d.symbol {
            Symbol::Source => {
                if st.sources.len() <= index {
                    st.sources.resize(index + 1, None);
                }
                if st.sources[index].is_some() {
                    self.stats.duplicates += 1;
                    return;
                }
                if st.shape.is_some_and(|(k, _)| index >= k) {
                    self.stats.inconsistent += 1;
                    return;
                }
                if st
                    .symbol_len
                    .is_some_and(|l| d.payload.len() + SYMBOL_PREFIX > l)
                {
                    self.stats.inconsistent += 1;
                    return;
                }
                let payload = Bytes::copy_from_slice(d.payload);
                st.sources[index] = Some(payload.clone());
                self.stats.source_packets += 1;
                self.accept(now, base + index as u64, payload, false);
            }
            Symbol::Repair { k, m } => {
                let (k, m) = (usize::from(k), usize::from(m));
                let sym = d.payload.len();
                let shape_ok = st.shape.is_none_or(|s| s == (k, m))
                    && st.symbol_len.is_none_or(|l| l == sym)
                    && st.sources.iter().skip(k).all(Option::is_none)
                    && st
                        .sources
                        .iter()
                        .flatten()
                        .all(|p| p.len() + SYMBOL_PREFIX <= sym);
                if !shape_ok {
                    self.stats.inconsistent += 1;
                    return;
                }
                if st.repairs.iter().any(|(i, _)| *i == index) {
                    self.stats.duplicates += 1;
                    return;
                }
                st.shape = Some((k, m));
                st.symbol_len = Some(sym);
                st.repairs.push((index, Bytes::copy_from_slice(d.payload)));
                self.stats.repair_packets += 1;
            }
        }
        self.try_finish(now, block);
    }

    /// Widens a data sequence number against the delivery frontier.
    fn widen_data(&self, wire: u32) -> u64 {
        unwrap32(self.frontier.unwrap_or(u64::from(wire)), wire)
    }

    /// Frees a complete block, or rebuilds its missing sources when enough
    /// symbols are in.
    fn try_finish(&mut self, now: Instant, block: u64) {
        let Some(st) = self.blocks.get_mut(&block) else {
            return;
        };
        let Some((k, m)) = st.shape else { return };
        let have = st.source_count();
        if have >= k {
            st.free();
            return;
        }
        if have + st.repairs.len() < k {
            return;
        }
        let (Some(sym), Some(base)) = (st.symbol_len, st.base) else {
            return;
        };
        let missing: Vec<usize> = (0..k)
            .filter(|&i| st.sources.get(i).is_none_or(Option::is_none))
            .collect();
        // Padded copies of the received sources, one flat buffer.
        self.scratch.clear();
        self.scratch.resize((have + missing.len()) * sym, 0);
        let (src_buf, out_buf) = self.scratch.split_at_mut(have * sym);
        let held = st
            .sources
            .iter()
            .take(k)
            .enumerate()
            .filter_map(|(i, p)| p.as_ref().map(|p| (i, p)));
        let mut order = Vec::with_capacity(have);
        for (c, (i, p)) in src_buf.chunks_exact_mut(sym).zip(held) {
            if pad_symbol(p, c).is_none() {
                self.stats.inconsistent += 1;
                st.free();
                return;
            }
            order.push(i);
        }
        let mut received: Vec<(usize, &[u8])> =
            order.into_iter().zip(src_buf.chunks_exact(sym)).collect();
        for (i, r) in &st.repairs {
            received.push((*i, r));
        }
        let mut outs: Vec<(usize, &mut [u8])> = missing
            .iter()
            .copied()
            .zip(out_buf.chunks_exact_mut(sym))
            .collect();
        let decoder = match self
            .decoders
            .iter()
            .position(|d| d.code().source_count() == k && d.code().repair_count() == m)
        {
            Some(i) => &mut self.decoders[i],
            None => {
                let Ok(code) = ReedSolomon::new(k, m) else {
                    self.stats.inconsistent += 1;
                    st.free();
                    return;
                };
                if self.decoders.len() >= 8 {
                    self.decoders.remove(0);
                }
                self.decoders.push(Decoder::new(code));
                self.decoders.last_mut().expect("just pushed")
            }
        };
        if decoder.decode(&received, &mut outs).is_err() {
            self.stats.inconsistent += 1;
            st.free();
            return;
        }
        self.stats.decodes += 1;
        let mut bad = 0;
        let rebuilt: Vec<(u64, Bytes)> = outs
            .iter()
            .filter_map(|(i, s)| {
                let p = unpad_symbol(s);
                bad += u64::from(p.is_none());
                p.map(|p| (base + *i as u64, Bytes::copy_from_slice(p)))
            })
            .collect();
        // A rebuilt source whose own checksum fails is never handed out;
        // it is given up as lost like any other missing packet.
        self.stats.corrupt_rebuilt += bad;
        st.free();
        for (d, p) in rebuilt {
            self.accept(now, d, p, true);
        }
    }

    /// One source packet (received or rebuilt) for delivery.
    fn accept(&mut self, now: Instant, data_seq: u64, payload: Bytes, recovered: bool) {
        let Some(mut frontier) = self.frontier else {
            return;
        };
        if data_seq < frontier {
            self.stats.late += 1;
            return;
        }
        // Too far ahead: give up the oldest gaps to make room.
        let window = self.cfg.reorder_window as u64;
        while data_seq >= frontier + window {
            self.give_up_front();
            frontier = self.frontier.expect("set");
            if self.slots.is_empty() && data_seq >= frontier + window {
                // Jump straight there: everything between is lost.
                let skipped = data_seq - frontier - window + 1;
                self.stats.unrecovered += skipped;
                self.frontier = Some(frontier + skipped);
                frontier += skipped;
            }
        }
        let idx = (data_seq - frontier) as usize;
        while self.slots.len() <= idx {
            self.slots.push_back(Slot::Missing);
        }
        if !matches!(self.slots[idx], Slot::Missing) {
            self.stats.duplicates += 1;
            return;
        }
        self.stats.delivered += 1;
        if recovered {
            self.stats.recovered += 1;
        }
        if self.cfg.ordered {
            self.slots[idx] = Slot::Held(now, payload, recovered);
        } else {
            self.slots[idx] = Slot::Done(now);
            self.emit(data_seq, payload, recovered);
        }
        self.advance();
    }

    fn emit(&mut self, data_seq: u64, payload: Bytes, recovered: bool) {
        if self.cfg.emit_deliveries {
            self.events.push_back(Delivery {
                data_seq,
                payload,
                recovered,
            });
        }
    }

    /// Moves the frontier over resolved slots, then re-arms the hole timer.
    fn advance(&mut self) {
        let Some(mut frontier) = self.frontier else {
            return;
        };
        while let Some(front) = self.slots.front() {
            match front {
                Slot::Missing => break,
                Slot::Done(_) => {
                    self.slots.pop_front();
                }
                Slot::Held(..) => {
                    if let Some(Slot::Held(_, p, r)) = self.slots.pop_front() {
                        self.emit(frontier, p, r);
                    }
                }
            }
            frontier += 1;
        }
        self.frontier = Some(frontier);
        // The hole at the front waits `max_wait` from the arrival of the
        // first packet after it.
        self.hole_deadline = self.slots.iter().find_map(|s| match s {
            Slot::Missing => None,
            Slot::Done(at) | Slot::Held(at, ..) => Some(*at + self.cfg.max_wait),
        });
    }

    /// Gives up the run of missing packets at the front.
    fn give_up_front(&mut self) {
        let Some(mut frontier) = self.frontier else {
            return;
        };
        while matches!(self.slots.front(), Some(Slot::Missing)) {
            self.slots.pop_front();
            self.stats.unrecovered += 1;
            frontier += 1;
        }
        self.frontier = Some(frontier);
        self.advance();
    }

    fn send_report(&mut self, now: Instant) {
        let Some(peer) = self.peer else { return };
        let r = ReportRepr {
            session: self.cfg.session,
            report_seq: self.report_seq,
            echo_seq: self.highest.unwrap_or(0) as u32,
            echo_delay_us: u32::try_from(
                now.saturating_duration_since(self.highest_at).as_micros(),
            )
            .unwrap_or(u32::MAX),
            lost: self.interval_lost,
            received: self.interval_received,
            delivered_total: self.stats.delivered,
            recovered_total: self.stats.recovered,
            unrecovered_total: self.stats.unrecovered,
            tfrc: None,
            runs: Some(self.interval_runs),
        };
        let mut r = r;
        if let Some(t) = self.tfrc.as_mut() {
            if let Some(fb) = t.poll_feedback(now) {
                self.tfrc_pending = Some(fb);
            }
            r.tfrc = self.tfrc_pending.take().map(|fb| TfrcFields {
                x_recv: fb.x_recv.clamp(0.0, f64::from(u32::MAX)) as u32,
                p: TfrcFields::encode_p(fb.p),
            });
        }
        self.report_seq = self.report_seq.wrapping_add(1);
        self.interval_lost = 0;
        self.interval_received = 0;
        self.interval_runs = LossRuns::default();
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut buf);
        self.stats.reports_sent += 1;
        self.transmits.push_back(Transmit {
            dst: peer,
            transport: Transport::Udp,
            payload: Bytes::from(buf),
        });
    }
}

impl Machine for BlockReceiver {
    type Event = Delivery;

    fn handle_datagram(&mut self, now: Instant, src: SocketAddr, data: &[u8]) {
        let d = match DataRepr::parse_with(data, self.cfg.allow_unchecked) {
            Ok(d) => d,
            Err(WireError::Checksum) => {
                self.stats.corrupt += 1;
                return;
            }
            Err(_) => {
                self.stats.malformed += 1;
                return;
            }
        };
        if d.session != self.cfg.session {
            self.stats.other_session += 1;
            return;
        }
        self.stats.packets += 1;
        self.peer = Some(src);
        self.last_packet_at = now;
        if d.rtt_us > 0 {
            self.peer_rtt = Some(Duration::from_micros(u64::from(d.rtt_us)));
        }
        self.count_seq(now, d.seq);
        if let Some(t) = self.tfrc.as_mut() {
            // The echo is by sequence number (the report's), so the
            // sequence number stands in for the send timestamp.
            let seq = unwrap32(self.highest.unwrap_or(0), d.seq);
            let size = self.cfg.wire_size.unwrap_or_else(|| {
                u32::try_from(data.len() + crate::units::IP_UDP_OVERHEAD).unwrap_or(u32::MAX)
            });
            t.on_data_packet(
                now,
                &DataPacketInfo {
                    seq,
                    timestamp: Instant::from_nanos(seq),
                    rtt: (d.rtt_us > 0).then(|| Duration::from_micros(u64::from(d.rtt_us))),
                    size,
                },
            );
            if let Some(fb) = t.poll_feedback(now) {
                self.tfrc_pending = Some(fb);
            }
        }
        if self.next_report.is_none() {
            self.next_report = Some(now + self.cfg.syn);
        }
        self.on_data(now, d);
    }

    fn handle_timeout(&mut self, now: Instant) {
        while self.hole_deadline.is_some_and(|t| t <= now) {
            self.give_up_front();
        }
        if let Some(t) = self.next_report.filter(|t| *t <= now) {
            self.send_report(now);
            let next = t + self.cfg.syn;
            self.next_report =
                if now.saturating_duration_since(self.last_packet_at) >= self.cfg.idle_after {
                    None
                } else if next <= now {
                    Some(now + self.cfg.syn)
                } else {
                    Some(next)
                };
        }
    }

    fn poll_transmit(&mut self, _now: Instant) -> Option<Transmit> {
        self.transmits.pop_front()
    }

    fn poll_event(&mut self) -> Option<Delivery> {
        self.events.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        match (self.hole_deadline, self.next_report) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}
