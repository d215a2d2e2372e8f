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
//! Open loop by default, as the XOR scheme: no reports flow, the overhead
//! is the configuration's. When the application pauses, one last repair
//! covers the sources sent since the previous one
//! ([`SlidingConfig::flush_after`]), so a tail loss is rebuilt too.
//!
//! ## Closed loop: a residual target within a delay budget
//!
//! With [`SlidingConfig::control`] (`groupwire tunnel --fec sliding:target`)
//! the receiving half reports what it saw every
//! [`SlidingConfig::report_every`] (GENEVA's 10 ms SYN interval), and the
//! sending half hands the reports to the tunnel's target controller
//! ([`crate::control::target::TargetFec`]), which fits a Gilbert chain and
//! chooses the block code `(k, m)` meeting the residual target within the
//! budget, less half of it as margin ([`SlidingConfig::controlled`]), at
//! the least overhead. The sender runs it as a sliding code of
//! the same span and overhead: a window of `w = k` sources and `o = m / k`
//! repairs per source. RFC 8681's repairs carry their own window (first
//! ESI and NSS), so the sender changes `w` and `o` whenever the choice
//! changes, and the receiver needs no word of it.
//!
//! The block code's residual is the controller's prediction for the
//! sliding code of the same span: every loss has, like a block's, the
//! repairs of about `k` sources around it, but they come spread over its
//! window instead of at a block's end, so the sliding code rebuilds sooner
//! (a loss waits about `1 / o` packets, not up to `k`) and, at equal span
//! and overhead, leaves fewer sources late on most channels
//! (`docs/results/fec-codes.md`). Where it does worse, the controller's
//! feedback (step 5 of [`crate::control::target`]) sees the measured
//! residual above the prediction and tightens the target.
//!
//! A report counts **source** packets (their ESIs show the gaps; repairs
//! do not number themselves in the sources' sequence), so the fit's loss
//! runs are runs of sources: with repairs interleaved a burst of `b`
//! packets covers about `b / (1 + o)` sources, a slight underestimate of
//! the bursts, which the feedback covers like any misfit. A source counts
//! as **unrecovered** when it leaves the receiver's decoding window
//! undelivered, or is rebuilt more than [`SlidingConfig::late_after`]
//! after the first later source arrived: it missed the budget.
//!
//! ## Wire format (the tunnel seals it under a key, as every packet)
//!
//! ```text
//! source: 0xA1 | session (u32) | ESI (u32, RFC 8681 §4.1.2)            | ADU
//! repair: 0xA2 | session (u32) | Repair FEC Payload ID (8, §4.1.3)     | symbol (E bytes)
//! report: 0xA3 | session (u32) | received | lost | runs | unrecovered  (u32 each)
//! ```
//!
//! A report's counts are cumulative since the receiving half started and
//! wrap: the sender takes the differences, so a lost report loses nothing
//! but its timing.
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

use crate::control::target::{TargetConfig, TargetFec};
use crate::control::{FecController, ReportSample, StreamShape};
use crate::wire::block::LossRuns;
use crate::{Instant, Machine, Transmit, Transport};

/// First byte of a source packet.
pub const SOURCE_TYPE: u8 = 0xA1;
/// First byte of a repair packet.
pub const REPAIR_TYPE: u8 = 0xA2;
/// Bytes in front of a source packet's ADU.
pub const SOURCE_HEADER_LEN: usize = 1 + 4 + SourcePayloadId::LEN;
/// Bytes in front of a repair packet's symbol.
pub const REPAIR_HEADER_LEN: usize = 1 + 4 + RepairPayloadId::LEN;
/// First byte of a receiver report (closed loop only).
pub const REPORT_TYPE: u8 = 0xA3;
/// Bytes of a receiver report.
pub const REPORT_LEN: usize = 1 + 4 + 4 * 4;
/// The report interval of the closed loop: GENEVA's SYN (§3.2.1).
pub const REPORT_EVERY: Duration = Duration::from_millis(10);
/// A report whose counts moved by more than this since the previous one
/// is not believed (a restarted or hostile peer): the sender takes its
/// counts as the new base and learns nothing from it.
const MAX_REPORT_STEP: u32 = 1 << 24;

/// Arrival times kept for judging how long a rebuilt datagram waited, and
/// whether a source leaving the decoding window (at most 4095 ESIs) was
/// delivered: twice the largest window, so a slot judged is never one a
/// newer ESI took.
const ARRIVALS: usize = 8192;
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
    /// The sending half's window and overhead chosen by the target
    /// controller from the peer's reports (see the [module docs](self));
    /// `code` then only gives the largest window. `None`: the fixed `code`.
    pub control: Option<TargetConfig>,
    /// How often the receiving half reports to the peer while sources
    /// arrive (`None`: never). Both sides of a closed loop report.
    pub report_every: Option<Duration>,
    /// A source rebuilt more than this after the first later one arrived
    /// counts as unrecovered in the reports (the budget it missed).
    pub late_after: Option<Duration>,
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
            control: None,
            report_every: None,
            late_after: None,
        }
    }

    /// The closed loop of the [module docs](self): windows of up to
    /// `target.k_max` sources chosen by the target controller, reports
    /// every [`REPORT_EVERY`], sources rebuilt beyond the budget counted
    /// as unrecovered.
    ///
    /// Without a margin of its own, the target keeps **half** its budget
    /// free (the block code keeps a tenth): a block's losses are rebuilt
    /// when its repairs are in, but a sliding code's loss is rebuilt when
    /// the equations tying it to its neighbours' losses are, and those
    /// chain past its window. With a tenth, windows filled the budget and
    /// up to 0.7% of the datagrams of a 10% Gilbert channel came rebuilt
    /// after a 30 ms budget (`groupwire sim run robustness-tunnel`, issue
    /// 15); with half, a few in ten thousand, for a few per cent more
    /// overhead.
    pub fn controlled(peer: SocketAddr, mut target: TargetConfig) -> Self {
        if target.margin.is_none() {
            target.margin = Some(target.max_delay / 2);
        }
        let code = SlidingCode {
            window: target.k_max.clamp(1, groupwire_codec::sliding::MAX_NSS) as u16,
            overhead: 1.0,
        };
        Self {
            control: Some(target),
            report_every: Some(REPORT_EVERY),
            late_after: Some(target.max_delay),
            ..Self::new(peer, code)
        }
    }

    /// The decoder's window in use: [`decoding_window`](Self::decoding_window)
    /// within the code's window and RFC 8681's largest. A source further
    /// behind the highest ESI than this can no longer be rebuilt.
    pub fn decoder_window(&self) -> usize {
        self.decoding_window.clamp(
            usize::from(self.code.window),
            groupwire_codec::sliding::MAX_NSS,
        )
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
    /// Source ESIs found missing on arrival (gaps in the ESIs).
    pub sources_lost: u64,
    /// Repair packets found missing (gaps in their Repair_Keys, which
    /// count up).
    pub repairs_lost: u64,
    /// Sources given up: left the decoding window undelivered, or rebuilt
    /// beyond [`SlidingConfig::late_after`].
    pub unrecovered: u64,
    /// Reports sent (closed loop).
    pub reports_sent: u64,
    /// Reports taken (closed loop).
    pub reports_received: u64,
    /// The peer's counts from its latest report (closed loop): sources it
    /// received, found missing, and gave up.
    pub peer_received: u64,
    /// See [`peer_received`](Self::peer_received).
    pub peer_lost: u64,
    /// See [`peer_received`](Self::peer_received).
    pub peer_unrecovered: u64,
    /// When the latest report was taken.
    pub last_report_at: Option<Instant>,
}

/// What the receiving half counts for its reports: source ESIs, wrapping
/// (see the [module docs](self)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct RxCounts {
    received: u32,
    lost: u32,
    runs: u32,
    unrecovered: u32,
}

impl RxCounts {
    fn to_array(self) -> [u32; 4] {
        [self.received, self.lost, self.runs, self.unrecovered]
    }
}

/// The sending half's closed loop: the controller and what it needs.
#[derive(Debug)]
struct Control {
    fec: TargetFec,
    /// The previous report's counts.
    last: Option<[u32; 4]>,
    /// When the previous report was taken, and the sources sent by then.
    last_at: Option<(Instant, u64)>,
    /// Sources per second, smoothed.
    rate: Option<f64>,
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
    /// The window and overhead in use (the code's, or the controller's).
    window: usize,
    overhead: f64,
    control: Option<Control>,
    /// The receiving half: the highest ESI seen and the first one (the
    /// stream's start, before which nothing is given up).
    highest: Option<u32>,
    first: u32,
    rx: RxCounts,
    /// The latest Repair_Key received.
    last_repair_key: Option<u16>,
    /// When the next report is due (sources arrived since the last one).
    report_at: Option<Instant>,
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
        if let Some(t) = &cfg.control {
            t.validate()?;
        }
        let enc = Encoder::new(e, usize::from(cfg.code.window)).map_err(|e| e.to_string())?;
        let mut dc = DecoderConfig::new(e);
        dc.max_window = cfg.decoder_window();
        let dec = Decoder::new(dc).map_err(|e| e.to_string())?;
        Ok(Self {
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
            window: usize::from(cfg.code.window),
            overhead: cfg.code.overhead,
            control: None,
            highest: None,
            first: 0,
            rx: RxCounts::default(),
            last_repair_key: None,
            report_at: None,
            cfg,
        }
        .with_control())
    }

    /// Starts the controller, if configured, and takes its first code.
    fn with_control(mut self) -> Self {
        if let Some(t) = self.cfg.control {
            self.control = Some(Control {
                fec: TargetFec::new(t),
                last: None,
                last_at: None,
                rate: None,
            });
            self.follow_controller();
        }
        self
    }

    /// The window and overhead the controller chose: `w = k`, `o = m / k`
    /// (see the [module docs](self)).
    fn follow_controller(&mut self) {
        let Some(c) = &self.control else { return };
        let st = c.fec.status();
        let max = usize::from(self.cfg.code.window);
        self.window = st.k.clamp(1, max);
        // More than one repair per source when the channel needs it (a
        // short budget on a bursty channel): each source then owes
        // several, sent after it with distinct Repair_Keys. The fixed
        // code's `o` stays at most 1 ([`SlidingCode::validate`]); the
        // controller's is bounded by its own `max_overhead`.
        let cap = self.cfg.control.map_or(1.0, |t| t.max_overhead.max(1.0));
        self.overhead = (st.m as f64 / st.k.max(1) as f64).clamp(0.0, cap);
    }

    /// The window and overhead in use now: the code's, or the
    /// controller's latest choice.
    pub fn code(&self) -> SlidingCode {
        SlidingCode {
            window: self.window as u16,
            overhead: self.overhead,
        }
    }

    /// The target controller's view of its code (closed loop only).
    pub fn target_status(&self) -> Option<crate::control::target::TargetStatus> {
        self.control.as_ref().map(|c| c.fec.status())
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
        self.credit += self.overhead;
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

    /// One repair over the current window (its last `window` sources).
    fn repair(&mut self) {
        let excess = self.enc.window_len().saturating_sub(self.window);
        self.enc.drop_oldest(excess);
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

    /// Counts a source's arrival for the reports: a gap in the ESIs is a
    /// run of losses; sources that leave the decoding window undelivered
    /// are given up. A source older than the highest (late, or sent twice)
    /// counts as received only.
    fn count_arrival(&mut self, esi: u32) {
        self.rx.received = self.rx.received.wrapping_add(1);
        let Some(h) = self.highest else {
            self.highest = Some(esi);
            self.first = esi;
            return;
        };
        let ahead = esi.wrapping_sub(h);
        if ahead == 0 || ahead > u32::MAX / 2 {
            return;
        }
        let gap = ahead - 1;
        if gap > 0 {
            self.rx.lost = self.rx.lost.wrapping_add(gap);
            self.rx.runs = self.rx.runs.wrapping_add(1);
            self.stats.sources_lost += u64::from(gap);
        }
        self.highest = Some(esi);
        self.give_up_before(esi);
    }

    /// Judges every source from the last judged on that is now more than
    /// the decoding window behind `highest`: undelivered means given up.
    fn give_up_before(&mut self, highest: u32) {
        let horizon = self.cfg.decoder_window() as u32;
        // ESIs before `until` are out of the window.
        let until = highest.wrapping_sub(horizon);
        // `first` is the next ESI to judge.
        let behind = until.wrapping_sub(self.first);
        if behind == 0 || behind > u32::MAX / 2 {
            return;
        }
        // Slots further back than half the ring may hold newer ESIs:
        // those sources were in a gap longer than any window, never
        // delivered.
        let judged = behind.min((ARRIVALS / 2) as u32);
        let bulk = behind - judged;
        let mut given_up = bulk;
        let start = until.wrapping_sub(judged);
        for j in 0..judged {
            let e = start.wrapping_add(j);
            if !matches!(self.seen[e as usize % ARRIVALS], Some((s, _)) if s == e) {
                given_up += 1;
            }
        }
        self.first = until;
        self.rx.unrecovered = self.rx.unrecovered.wrapping_add(given_up);
        self.stats.unrecovered += u64::from(given_up);
    }

    /// The receiving half's report (see the module's wire format).
    fn report(&mut self) {
        let mut b = BytesMut::with_capacity(REPORT_LEN);
        b.put_u8(REPORT_TYPE);
        b.put_u32(self.cfg.session);
        for v in self.rx.to_array() {
            b.put_u32(v);
        }
        self.stats.bytes_sent += b.len() as u64;
        self.stats.reports_sent += 1;
        self.push(b.freeze());
    }

    /// The peer's report: the counts' differences to the controller.
    fn on_report(&mut self, now: Instant, body: &[u8]) {
        let Some(c) = self.control.as_mut() else {
            // Not ours to act on (an open-loop sender): a peer's report
            // is harmless.
            self.stats.reports_received += 1;
            return;
        };
        let Ok(raw) = <[u8; REPORT_LEN - 5]>::try_from(body) else {
            self.stats.malformed += 1;
            return;
        };
        self.stats.reports_received += 1;
        let counts: [u32; 4] = std::array::from_fn(|i| {
            u32::from_be_bytes(raw[4 * i..4 * i + 4].try_into().expect("4"))
        });
        let previous = c.last.replace(counts).unwrap_or_default();
        self.stats.peer_received = u64::from(counts[0]);
        self.stats.peer_lost = u64::from(counts[1]);
        self.stats.peer_unrecovered = u64::from(counts[3]);
        self.stats.last_report_at = Some(now);
        let delta: [u32; 4] = std::array::from_fn(|i| counts[i].wrapping_sub(previous[i]));
        let sent = self.stats.sources_sent;
        let since = c.last_at.replace((now, sent));
        if delta.iter().any(|&d| d > MAX_REPORT_STEP) {
            return;
        }
        let elapsed = since.map_or(REPORT_EVERY, |(at, _)| now.saturating_duration_since(at));
        if let Some((_, before)) = since
            && !elapsed.is_zero()
        {
            let now_rate = (sent - before) as f64 / elapsed.as_secs_f64();
            c.rate = Some(c.rate.map_or(now_rate, |r| 0.8 * r + 0.2 * now_rate));
        }
        let [received, lost, runs, unrecovered] = delta;
        let sample = ReportSample {
            lost,
            delivered: received,
            unrecovered,
            rtt: None,
            runs: Some(LossRuns {
                runs,
                ..LossRuns::default()
            }),
            sources_per_sec: c.rate,
        };
        let shape = StreamShape {
            k: self.window,
            syn: elapsed.max(Duration::from_millis(1)),
        };
        c.fec.on_report(now, shape, &sample);
        self.follow_controller();
    }

    /// Hands out what the decoder rebuilt.
    fn collect(&mut self, now: Instant) {
        while let Some(r) = self.dec.poll_recovered() {
            if !self.first_delivery(r.esi, None) {
                continue;
            }
            self.stats.rebuilt += 1;
            let waited = self.waited(r.esi, now);
            if self.cfg.late_after.is_some_and(|late| waited > late) {
                self.rx.unrecovered = self.rx.unrecovered.wrapping_add(1);
                self.stats.unrecovered += 1;
            }
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
        // Before this source takes its slot (see `give_up_before`).
        self.count_arrival(id.esi);
        if let (Some(every), None) = (self.cfg.report_every, self.report_at) {
            self.report_at = Some(now.saturating_add(every));
        }
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
        let key = id.repair_key();
        if let Some(last) = self.last_repair_key {
            let ahead = key.wrapping_sub(last);
            if ahead == 0 || ahead > u16::MAX / 2 {
                // Late or repeated: not a gap.
            } else {
                self.stats.repairs_lost += u64::from(ahead - 1);
                self.last_repair_key = Some(key);
            }
        } else {
            self.last_repair_key = Some(key);
        }
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
            REPORT_TYPE => self.on_report(now, &data[5..]),
            _ => self.stats.malformed += 1,
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        if self.flush_at.is_some_and(|t| t <= now) {
            self.flush_at = None;
            if self.uncovered > 0 && self.overhead > 0.0 {
                self.stats.flush_repairs += 1;
                self.repair();
            }
        }
        if self.report_at.is_some_and(|t| t <= now) {
            self.report_at = None;
            self.report();
        }
    }

    fn poll_transmit(&mut self, _now: Instant) -> Option<Transmit> {
        self.out.pop_front()
    }

    fn poll_event(&mut self) -> Option<SlidingDelivery> {
        self.events.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        match (self.flush_at, self.report_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// A source packet of `session` (the tunnel's test before it takes a new
/// peer).
pub fn is_source_of(data: &[u8], session: u32) -> bool {
    data.len() >= SOURCE_HEADER_LEN && data[0] == SOURCE_TYPE && data[1..5] == session.to_be_bytes()
}

#[cfg(test)]
mod tests;
