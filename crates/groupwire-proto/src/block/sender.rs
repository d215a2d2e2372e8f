//! The block-FEC sender (GENEVA §3.2.2).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use groupwire_codec::ReedSolomon;

use super::{DEFAULT_SYN, pad_symbol, unwrap32};
use crate::control::gilbert::RunCounts;
use crate::control::tfrc::{TfrcConfig, TfrcFeedback, TfrcSender};
use crate::control::{FecConfig, FecController, FecControllerFactory, ReportSample, StreamShape};
use crate::machine::{Machine, Transmit, Transport};
use crate::time::Instant;
use crate::wire::block::{DATA_HEADER_LEN, DataRepr, ReportRepr, SYMBOL_PREFIX, Symbol, seal_data};

/// Configuration of a [`BlockSender`].
#[derive(Clone, Debug, PartialEq)]
pub struct SenderConfig {
    /// Session id in every packet; reports of other sessions are ignored.
    pub session: u32,
    /// Where data goes.
    pub peer: SocketAddr,
    /// Source packets per block (`k`); see [`super::k_for_rate`]. A
    /// controller that chooses the block length
    /// ([`FecController::block_k`], the target controller) overrides it
    /// block by block.
    pub k: usize,
    /// Report interval the controller assumes (SYN, GENEVA §3.2.1: 10 ms).
    pub syn: Duration,
    /// Which controller picks `Fwnd`, with its configuration (a
    /// [`ControllerKind`](crate::control::ControllerKind) converts with
    /// `.into()`).
    pub controller: FecConfig,
    /// Space packets evenly, `IPG = SYN / (Fwnd + k)` (GENEVA §3.2.2), or
    /// send each at once (`false`, the tunnel's low-latency mode).
    pub pacing: bool,
    /// Close a block with fewer than `k` packets once its first packet is
    /// this old, so a slow stream never stalls a block. `None`: always wait
    /// for `k` (a constant-rate stream).
    pub max_block_wait: Option<Duration>,
    /// Largest datagram this sender emits (path MTU less IP and UDP
    /// headers). Source payloads may be up to `max_datagram −`
    /// [`DATA_HEADER_LEN`] `−` [`SYMBOL_PREFIX`] bytes, so repair packets
    /// fit too.
    pub max_datagram: usize,
    /// Packets waiting for their paced slot; beyond it `send` refuses.
    pub queue_limit: usize,
    /// Send times remembered for RTT samples (by sequence number).
    pub send_history: usize,
    /// Bytes each data packet counts for on the wire, for TFRC's rate
    /// (RFC 5348's `s`). `None`: the datagram's size plus 28 bytes of IP
    /// and UDP header. The simulator sets it when packets carry less than
    /// they occupy.
    pub wire_size: Option<u32>,
    /// Put a CRC-32 in every data packet (`true`). `false` only under a
    /// layer that authenticates every datagram (the tunnel's `--key-file`):
    /// the packets then carry [`FLAG_UNCHECKED`](crate::wire::block::FLAG_UNCHECKED)
    /// and only a receiver with [`ReceiverConfig::allow_unchecked`](super::ReceiverConfig::allow_unchecked)
    /// takes them. Symbols keep their own CRC either way.
    pub checksums: bool,
    /// The numbers of the first packet (all 0 by default): where a sender
    /// replacing another toward the same receiver starts
    /// ([`BlockSender::successor_numbers`]).
    pub first: SenderNumbers,
    /// The first block closes at this share of its `k` (default 1: at
    /// `k`), with the repairs its length needs
    /// ([`FecController::short_block_repairs`]). Senders that start
    /// together at one rate (a session's channels, sent to in turn) would
    /// otherwise close every block at the same moment and encode all
    /// their repairs in one turn: eight channels' blocks of 192 took
    /// 1.4 ms, which stalled all of them (the session's loopback
    /// benchmark). Staggered first blocks keep later blocks apart as long
    /// as the rates stay alike.
    pub first_block_share: f64,
}

/// The numbers a [`BlockSender`]'s packets carry: packet sequence, block
/// and data sequence. A receiver cannot tell two senders of one session
/// apart, so a sender that replaces another must continue its numbers,
/// or the receiver takes its blocks for ones already finished.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SenderNumbers {
    /// The next packet sequence number.
    pub seq: u32,
    /// The next block number.
    pub block: u32,
    /// The next data sequence number.
    pub data_seq: u32,
}

impl SenderConfig {
    /// GENEVA's sender toward `peer`: `k` per block, GMIAD, paced, SYN 10 ms.
    pub fn new(peer: SocketAddr, k: usize) -> Self {
        Self {
            session: 0,
            peer,
            k,
            syn: DEFAULT_SYN,
            controller: FecConfig::default(),
            pacing: true,
            max_block_wait: None,
            max_datagram: 1472,
            queue_limit: 4096,
            send_history: 8192,
            wire_size: None,
            checksums: true,
            first: SenderNumbers::default(),
            first_block_share: 1.0,
        }
    }

    /// Largest payload [`BlockSender::send`] accepts.
    pub fn max_payload(&self) -> usize {
        self.max_datagram
            .saturating_sub(DATA_HEADER_LEN + SYMBOL_PREFIX)
    }
}

/// Why [`BlockSender::send`] refused a datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SendError {
    /// Bigger than [`SenderConfig::max_payload`].
    #[error("datagram of {len} bytes exceeds the {max}-byte limit")]
    TooLarge {
        /// Its size.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The pacing queue is full: the application sends faster than the
    /// stream's rate.
    #[error("send queue full ({0} packets)")]
    QueueFull(usize),
    /// A rate-controlled stream (TFRC) is over its allowed rate; the
    /// application should lower its rate (GENEVA §2.2).
    #[error("over the allowed sending rate")]
    RateLimited,
}

/// What a [`BlockSender`] has done.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct SenderStats {
    /// Source packets sent.
    pub source_sent: u64,
    /// Repair packets sent.
    pub repair_sent: u64,
    /// Bytes of all datagrams sent.
    pub bytes_sent: u64,
    /// Blocks closed.
    pub blocks: u64,
    /// Sum of `Fwnd` over closed blocks (mean = `fwnd_sum / blocks`).
    pub fwnd_sum: u64,
    /// Blocks closed before reaching `k` (low rate, [`SenderConfig::max_block_wait`]).
    pub short_blocks: u64,
    /// Reports accepted.
    pub reports: u64,
    /// Reports older than one already seen.
    pub stale_reports: u64,
    /// Datagrams that were not a valid report of this session.
    pub malformed: u64,
    /// `send` calls refused (too large, queue full, rate limited).
    pub refused: u64,
    /// Latest RTT sample.
    pub last_rtt: Option<Duration>,
    /// TFRC's allowed rate in bytes per second (rate-controlled streams only).
    pub tfrc_rate: Option<f64>,
    /// Receiver's totals from its latest report: delivered data packets.
    pub peer_delivered: u64,
    /// ... of which rebuilt by the code.
    pub peer_recovered: u64,
    /// ... and data packets it gave up as lost.
    pub peer_unrecovered: u64,
    /// Source packets this sender had sent up to and including the packet
    /// the latest report echoed: what the far side could have delivered,
    /// so `peer_sent − peer_delivered` counts losses the far side never
    /// saw (datagrams that went to someone else), which its own
    /// `peer_unrecovered` cannot.
    pub peer_sent: u64,
    /// Reports whose echo named a packet this sender sent: the far side
    /// receives what we send (a returned cookie; see the tunnel's
    /// amplification rule).
    pub echoes: u64,
    /// When the latest report was accepted.
    pub last_report_at: Option<Instant>,
    /// Blocks sent with a code its controller expected to miss its target
    /// (the target controller, when nothing within the delay budget meets
    /// it).
    pub unmet_blocks: u64,
}

impl SenderStats {
    /// Adds a later sender's stats to these (a tunnel's machines replaced
    /// after a restart): counters add up (saturating); what describes the
    /// latest state (the RTT, TFRC's rate, the far side's totals from its
    /// latest report and when it came) is `later`'s.
    pub fn accumulate(&mut self, later: &SenderStats) {
        // Destructured, so a new field cannot be forgotten here.
        let SenderStats {
            source_sent,
            repair_sent,
            bytes_sent,
            blocks,
            fwnd_sum,
            short_blocks,
            reports,
            stale_reports,
            malformed,
            refused,
            last_rtt,
            tfrc_rate,
            peer_delivered,
            peer_recovered,
            peer_unrecovered,
            peer_sent,
            echoes,
            last_report_at,
            unmet_blocks,
        } = *later;
        for (a, b) in [
            (&mut self.source_sent, source_sent),
            (&mut self.repair_sent, repair_sent),
            (&mut self.bytes_sent, bytes_sent),
            (&mut self.blocks, blocks),
            (&mut self.fwnd_sum, fwnd_sum),
            (&mut self.short_blocks, short_blocks),
            (&mut self.reports, reports),
            (&mut self.stale_reports, stale_reports),
            (&mut self.malformed, malformed),
            (&mut self.refused, refused),
            (&mut self.echoes, echoes),
            (&mut self.unmet_blocks, unmet_blocks),
        ] {
            *a = a.saturating_add(b);
        }
        self.last_rtt = last_rtt;
        self.tfrc_rate = tfrc_rate;
        self.peer_delivered = peer_delivered;
        self.peer_recovered = peer_recovered;
        self.peer_unrecovered = peer_unrecovered;
        self.peer_sent = peer_sent;
        self.last_report_at = last_report_at;
    }
}

#[derive(Debug)]
struct Queued {
    /// The whole datagram except `seq` and the RTT hint, patched when sent.
    buf: BytesMut,
    repair: bool,
}

/// The sending half of GENEVA. See the [module docs](super).
#[derive(Debug)]
pub struct BlockSender {
    cfg: SenderConfig,
    controller: Box<dyn FecController>,
    next_seq: u32,
    next_block: u32,
    next_data_seq: u32,
    /// Source payloads of the open block.
    block: Vec<Bytes>,
    /// The open block's `k` (fixed when it opened).
    block_k: usize,
    /// Data sequence number and time at the latest report, for the source
    /// rate; and that rate (packets per second, smoothed).
    rate_mark: Option<(Instant, u32)>,
    source_rate: Option<f64>,
    block_base: u32,
    block_started: Instant,
    queue: VecDeque<Queued>,
    next_send: Instant,
    /// `(seq, sent at, source packets sent up to it)` by `seq % len`.
    history: Vec<(u32, Instant, u64)>,
    last_report: Option<u64>,
    /// Source packets sent up to the latest echoed packet, and that count
    /// when the far side's receiver last started afresh.
    echoed_sources: u64,
    peer_sent_base: u64,
    srtt: Option<Duration>,
    codes: Vec<ReedSolomon>,
    scratch: Vec<u8>,
    stats: SenderStats,
    /// TFRC rate control ([`ControllerKind::Tfrc`]); made at the first send.
    tfrc: Option<TfrcSender>,
    /// Token bucket for TFRC's rate: bytes available, last refill.
    tokens: f64,
    refilled: Instant,
}

impl BlockSender {
    /// A sender with `cfg`'s controller.
    pub fn new(cfg: SenderConfig) -> Self {
        let controller = cfg.controller.build();
        Self::with_controller(cfg, controller)
    }

    /// A sender with a controller of the caller's (for experiments).
    pub fn with_controller(mut cfg: SenderConfig, controller: Box<dyn FecController>) -> Self {
        cfg.k = cfg.k.clamp(1, 254);
        cfg.send_history = cfg.send_history.max(1);
        let first = cfg.first;
        Self {
            history: vec![(u32::MAX, Instant::ZERO, 0); cfg.send_history],
            cfg,
            controller,
            next_seq: first.seq,
            next_block: first.block,
            next_data_seq: first.data_seq,
            block: Vec::new(),
            block_k: 1,
            rate_mark: None,
            source_rate: None,
            block_base: 0,
            block_started: Instant::ZERO,
            queue: VecDeque::new(),
            next_send: Instant::ZERO,
            last_report: None,
            echoed_sources: 0,
            peer_sent_base: 0,
            srtt: None,
            codes: Vec::new(),
            scratch: Vec::new(),
            stats: SenderStats::default(),
            tfrc: None,
            tokens: 0.0,
            refilled: Instant::ZERO,
        }
    }

    /// Admits `bytes` under TFRC's allowed rate (RFC 5348 §4: the sender
    /// sends at `X`; a token bucket one SYN deep, at least two packets,
    /// smooths the application's timing). Streams without TFRC always pass.
    fn tfrc_admit(&mut self, now: Instant, bytes: u32) -> bool {
        if !self.cfg.controller.is_rate_controlled() {
            return true;
        }
        let s = f64::from(bytes);
        let tfrc = self.tfrc.get_or_insert_with(|| {
            TfrcSender::new(now, TfrcConfig::default().segment_size(bytes.max(1)))
        });
        let x = tfrc.allowed_rate();
        self.stats.tfrc_rate = Some(x);
        let depth = (x * self.cfg.syn.as_secs_f64()).max(2.0 * s);
        let dt = now.saturating_duration_since(self.refilled).as_secs_f64();
        self.tokens = (self.tokens + x * dt).min(depth);
        self.refilled = now;
        if self.tokens >= s {
            self.tokens -= s;
            true
        } else {
            false
        }
    }

    fn wire_size(&self, payload: usize) -> u32 {
        self.cfg.wire_size.unwrap_or_else(|| {
            u32::try_from(payload + DATA_HEADER_LEN + crate::units::IP_UDP_OVERHEAD)
                .unwrap_or(u32::MAX)
        })
    }

    /// Its configuration.
    pub fn config(&self) -> &SenderConfig {
        &self.cfg
    }

    /// Where a sender replacing this one toward the same receiver starts
    /// ([`SenderConfig::first`]): past its open block and past the
    /// sequence numbers of what it has queued. The open block's repairs,
    /// still to come from this one, share sequence numbers with the
    /// successor's first packets; the receiver counts them as reordered
    /// (sequence numbers feed only its loss counts, not decoding).
    pub fn successor_numbers(&self) -> SenderNumbers {
        let queued = u32::try_from(self.queue.len()).unwrap_or(u32::MAX);
        SenderNumbers {
            seq: self.next_seq.wrapping_add(queued),
            block: self
                .next_block
                .wrapping_add(u32::from(!self.block.is_empty())),
            data_seq: self.next_data_seq,
        }
    }

    /// What it has done.
    pub fn stats(&self) -> SenderStats {
        self.stats
    }

    /// The repair packets the next full block will get.
    pub fn fwnd(&self) -> usize {
        self.controller.fwnd().min(255 - self.k())
    }

    /// The source packets the next block will hold (if it fills): the
    /// controller's choice, or the configured `k`.
    pub fn k(&self) -> usize {
        self.controller
            .block_k()
            .unwrap_or(self.cfg.k)
            .clamp(1, 254)
    }

    /// The application's packet rate lately (packets per second, measured
    /// between reports), once measured.
    pub fn source_rate(&self) -> Option<f64> {
        self.source_rate
    }

    /// How long a block may stay open: the configured wait or the
    /// controller's bound, the shorter.
    fn block_wait(&self) -> Option<Duration> {
        match (self.cfg.max_block_wait, self.controller.max_block_wait()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The controller, for its state (`Wtot`, ERTT).
    pub fn controller(&self) -> &dyn FecController {
        &*self.controller
    }

    /// Hands the controller a fit of the path made elsewhere
    /// ([`FecController::late_prior`]); `true` if it adopted it.
    pub fn late_prior(&mut self, fits: [RunCounts; 2]) -> bool {
        self.controller.late_prior(fits)
    }

    /// Packets waiting for their paced slot.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Hands one datagram to the stream; returns its data sequence number.
    /// It goes out at its paced slot (or at once without pacing); the block
    /// it completes gets its repair packets queued behind it.
    pub fn send(&mut self, now: Instant, payload: Bytes) -> Result<u32, SendError> {
        let max = self.cfg.max_payload();
        if payload.len() > max {
            self.stats.refused += 1;
            return Err(SendError::TooLarge {
                len: payload.len(),
                max,
            });
        }
        if self.queue.len() >= self.cfg.queue_limit {
            self.stats.refused += 1;
            return Err(SendError::QueueFull(self.queue.len()));
        }
        let wire = self.wire_size(payload.len());
        if !self.tfrc_admit(now, wire) {
            self.stats.refused += 1;
            return Err(SendError::RateLimited);
        }
        let data_seq = self.next_data_seq;
        self.next_data_seq = data_seq.wrapping_add(1);
        if self.block.is_empty() {
            self.block_base = data_seq;
            self.block_started = now;
            self.block_k = self.k();
        }
        let index = self.block.len() as u8;
        let repr = DataRepr {
            session: self.cfg.session,
            seq: 0,
            block: self.next_block,
            data_seq,
            rtt_us: 0,
            index,
            symbol: Symbol::Source,
            checked: self.cfg.checksums,
            payload: &payload,
        };
        // The header now, the checksum in `poll_transmit` once the sequence
        // number is in: one CRC per packet.
        let mut buf = BytesMut::zeroed(repr.buffer_len());
        repr.emit_header(&mut buf[..DATA_HEADER_LEN]);
        buf[DATA_HEADER_LEN..].copy_from_slice(&payload);
        self.queue.push_back(Queued { buf, repair: false });
        self.block.push(payload);
        let first = self.stats.blocks == 0 && self.cfg.first_block_share < 1.0;
        let end = if first {
            ((self.block_k as f64 * self.cfg.first_block_share).ceil() as usize).max(1)
        } else {
            self.block_k
        };
        if self.block.len() >= end {
            self.close_block();
        }
        Ok(data_seq)
    }

    /// Closes the open block now, queueing its repair packets (a flush at
    /// the end of a stream). A no-op without an open block.
    pub fn flush(&mut self) {
        if !self.block.is_empty() {
            self.close_block();
        }
    }

    fn close_block(&mut self) {
        let k = self.block.len();
        let m = if k < self.block_k {
            self.stats.short_blocks += 1;
            self.controller.short_block_repairs(k).map_or_else(
                || repairs_for(self.controller.fwnd(), k, self.block_k),
                |m| m.min(255 - k),
            )
        } else {
            repairs_for(self.controller.fwnd(), k, self.block_k)
        };
        if self.controller.target_status().is_some_and(|s| !s.meets) {
            self.stats.unmet_blocks += 1;
        }
        if m > 0 {
            self.queue_repairs(k, m);
        }
        self.stats.blocks += 1;
        self.stats.fwnd_sum += m as u64;
        self.block.clear();
        self.next_block = self.next_block.wrapping_add(1);
    }

    fn queue_repairs(&mut self, k: usize, m: usize) {
        let longest = self.block.iter().map(Bytes::len).max().unwrap_or(0);
        let sym = longest + SYMBOL_PREFIX;
        // Padded sources, one flat scratch buffer reused across blocks.
        self.scratch.clear();
        self.scratch.resize(k * sym, 0);
        for (p, chunk) in self.block.iter().zip(self.scratch.chunks_exact_mut(sym)) {
            pad_symbol(p, chunk).expect("symbol sized for the longest payload");
        }
        let code = self.code(k, m);
        let mut repairs: Vec<BytesMut> = (0..m)
            .map(|_| BytesMut::zeroed(DATA_HEADER_LEN + sym))
            .collect();
        {
            let sources: Vec<&[u8]> = self.scratch.chunks_exact(sym).collect();
            let mut outs: Vec<&mut [u8]> = repairs
                .iter_mut()
                .map(|b| &mut b[DATA_HEADER_LEN..])
                .collect();
            code.encode(&sources, &mut outs)
                .expect("shapes checked: k sources, m repairs, one length");
        }
        for (j, mut buf) in repairs.into_iter().enumerate() {
            DataRepr {
                session: self.cfg.session,
                seq: 0,
                block: self.next_block,
                data_seq: self.block_base,
                rtt_us: 0,
                index: (k + j) as u8,
                symbol: Symbol::Repair {
                    k: k as u8,
                    m: m as u8,
                },
                checked: self.cfg.checksums,
                payload: &[],
            }
            .emit_header(&mut buf[..DATA_HEADER_LEN]);
            self.queue.push_back(Queued { buf, repair: true });
        }
    }

    /// The code for `(k, m)`, built once and kept (a handful of shapes).
    fn code(&mut self, k: usize, m: usize) -> ReedSolomon {
        if let Some(c) = self
            .codes
            .iter()
            .find(|c| c.source_count() == k && c.repair_count() == m)
        {
            return c.clone();
        }
        let c = ReedSolomon::new(k, m).expect("1 <= k, k + m <= 255");
        if self.codes.len() >= 16 {
            self.codes.remove(0);
        }
        self.codes.push(c.clone());
        c
    }

    fn ipg(&self) -> Duration {
        let n = (self.fwnd() + self.k()).max(1) as u32;
        self.cfg.syn / n
    }
}

/// Repair packets for a block of `len` sources when the controller's window
/// is `fwnd` per `k`: all of it for a full block; for a block closed early
/// ([`SenderConfig::max_block_wait`]) the same ratio, `⌈fwnd · len / k⌉`, so
/// a slow stream's overhead stays what the controller chose instead of
/// growing by `k / len` (a one-packet block would otherwise carry `fwnd`
/// repairs). Never more than the code allows (`len + m <= 255`).
pub(super) fn repairs_for(fwnd: usize, len: usize, k: usize) -> usize {
    let m = if len < k {
        (fwnd * len).div_ceil(k.max(1))
    } else {
        fwnd
    };
    m.min(255 - len)
}

impl Machine for BlockSender {
    type Event = core::convert::Infallible;

    fn handle_datagram(&mut self, now: Instant, _src: SocketAddr, data: &[u8]) {
        let r = match ReportRepr::parse(data) {
            Ok(r) if r.session == self.cfg.session => r,
            _ => {
                self.stats.malformed += 1;
                return;
            }
        };
        let seq = unwrap32(self.last_report.unwrap_or(0), r.report_seq);
        if self.last_report.is_some_and(|last| seq <= last) {
            self.stats.stale_reports += 1;
            return;
        }
        self.last_report = Some(seq);
        self.stats.reports += 1;
        // §3.2.2: SRTT from the echoed sequence number's send time, less the
        // time the receiver held it.
        let slot = self.history[r.echo_seq as usize % self.history.len()];
        let rtt = (slot.0 == r.echo_seq).then(|| {
            now.saturating_duration_since(slot.1)
                .saturating_sub(Duration::from_micros(u64::from(r.echo_delay_us)))
        });
        if let Some(s) = rtt {
            self.stats.last_rtt = Some(s);
            self.srtt = Some(match self.srtt {
                None => s,
                Some(e) => e.mul_f64(0.875) + s.mul_f64(0.125),
            });
        }
        self.stats.last_report_at = Some(now);
        if r.delivered_total.saturating_add(r.unrecovered_total)
            < self
                .stats
                .peer_delivered
                .saturating_add(self.stats.peer_unrecovered)
        {
            // The far side's receiver started afresh (after a silence of
            // ours, so it had echoed everything before): count from there.
            self.peer_sent_base = self.echoed_sources;
        }
        if slot.0 == r.echo_seq {
            self.stats.echoes += 1;
            self.echoed_sources = self.echoed_sources.max(slot.2);
        }
        self.stats.peer_sent = self.echoed_sources - self.peer_sent_base;
        // Data packets the far side gave up on since the last report (zero
        // after a restart of its counters).
        let unrecovered = r
            .unrecovered_total
            .saturating_sub(self.stats.peer_unrecovered);
        self.stats.peer_delivered = r.delivered_total;
        self.stats.peer_recovered = r.recovered_total;
        self.stats.peer_unrecovered = r.unrecovered_total;
        // The application's rate since the previous report (smoothed),
        // for controllers that bound a block's fill time.
        if let Some((at, seq)) = self.rate_mark {
            let dt = now.saturating_duration_since(at).as_secs_f64();
            if dt > 0.0 {
                let sent = f64::from(self.next_data_seq.wrapping_sub(seq));
                let inst = sent / dt;
                self.source_rate = Some(match self.source_rate {
                    None => inst,
                    Some(old) => 0.8 * old + 0.2 * inst,
                });
            }
        }
        self.rate_mark = Some((now, self.next_data_seq));
        let shape = StreamShape {
            k: self.k(),
            syn: self.cfg.syn,
        };
        let sample = ReportSample {
            lost: r.lost,
            delivered: r.received,
            unrecovered: u32::try_from(unrecovered).unwrap_or(u32::MAX),
            rtt,
            runs: r.runs,
            sources_per_sec: self.source_rate,
        };
        self.controller.on_report(now, shape, &sample);
        // RFC 5348 §4.3: the feedback echoes the last data packet; its send
        // time is ours to look up by sequence number.
        if let (Some(tfrc), Some(fields)) = (self.tfrc.as_mut(), r.tfrc) {
            if slot.0 == r.echo_seq {
                tfrc.on_feedback(
                    now,
                    &TfrcFeedback {
                        t_recvdata: slot.1,
                        t_delay: Duration::from_micros(u64::from(r.echo_delay_us)),
                        x_recv: f64::from(fields.x_recv),
                        p: fields.p_fraction(),
                    },
                );
            }
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        if let Some(t) = self.tfrc.as_mut() {
            t.on_nofeedback_timeout(now);
        }
        if let Some(wait) = self.block_wait() {
            if !self.block.is_empty() && now >= self.block_started + wait {
                self.close_block();
            }
        }
    }

    fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
        if self.queue.is_empty() || (self.cfg.pacing && now < self.next_send) {
            return None;
        }
        let Queued { mut buf, repair } = self.queue.pop_front()?;
        let seq = self.next_seq;
        self.next_seq = seq.wrapping_add(1);
        let rtt_us = self
            .tfrc
            .as_ref()
            .and_then(TfrcSender::rtt)
            .or(self.srtt)
            .map_or(0, |d| u32::try_from(d.as_micros()).unwrap_or(u32::MAX));
        buf[8..12].copy_from_slice(&seq.to_be_bytes());
        buf[20..24].copy_from_slice(&rtt_us.to_be_bytes());
        if self.cfg.checksums {
            seal_data(&mut buf);
        }
        if repair {
            self.stats.repair_sent += 1;
        } else {
            self.stats.source_sent += 1;
        }
        let len = self.history.len();
        self.history[seq as usize % len] = (seq, now, self.stats.source_sent);
        if self.cfg.pacing {
            let ipg = self.ipg();
            // An idle sender does not bank slots: restart the grid at `now`.
            if self.next_send + ipg < now {
                self.next_send = now;
            }
            self.next_send += ipg;
        }
        self.stats.bytes_sent += buf.len() as u64;
        Some(Transmit {
            dst: self.cfg.peer,
            transport: Transport::Udp,
            payload: buf.freeze(),
        })
    }

    fn poll_event(&mut self) -> Option<Self::Event> {
        None
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let pace = (self.cfg.pacing && !self.queue.is_empty()).then_some(self.next_send);
        let flush = self
            .block_wait()
            .filter(|_| !self.block.is_empty())
            .map(|w| self.block_started + w);
        let nofeedback = self.tfrc.as_ref().and_then(TfrcSender::nofeedback_deadline);
        [pace, flush, nofeedback].into_iter().flatten().min()
    }
}
