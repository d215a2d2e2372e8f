//! The base station between the wired and the wireless link: Snoop, ELN
//! and the link-layer FEC choice (Miyoshi et al. §2, §4, Figure 4).
//!
//! The station sits at the far end of the wired downlink and of the
//! wireless uplink ([`Simulator::set_transit`](crate::Simulator::set_transit)),
//! so it sees every data segment on its way to the wireless terminal and
//! every ACK on its way back, per flow:
//!
//! - **ELN** (Balakrishnan & Katz; the paper's §2.2 steps 1-3): the
//!   station remembers the sequence numbers it forwarded; a duplicate ACK
//!   asking for one of them means the wireless hop lost it, and the ACK goes
//!   on marked [`Segment::eln`]. A hole the station never saw (lost before
//!   it: congestion) is not marked.
//! - **Snoop** (Balakrishnan et al. 1995; §2.1 steps 1-3): the station
//!   caches the segments themselves, retransmits a lost one locally on the
//!   first duplicate ACK for it (or when its local timer expires: no ACK
//!   [`StationConfig::local_timeout`] after the segment was due at the
//!   terminal), and suppresses the duplicate ACKs it handles, so the
//!   sender sees none. A duplicate ACK that comes before the missing
//!   segment's latest copy can have arrived (the echo of a duplicate, with
//!   the copy still queued) is not taken for a loss. After
//!   [`StationConfig::max_local_retransmits`] local tries for one segment
//!   it gives up and lets the duplicates through. With ELN too (the paper's
//!   Snoop+ELN), those duplicates carry the ELN mark.
//! - **Link-layer FEC**: a fixed BCH code on both wireless directions, or
//!   the threshold switch of §4 fed by what ELN sees: a segment is "in
//!   error" when a duplicate ACK asks for it, and "clean" when an ACK
//!   covers it first. The code is set per frame on the downlink and the
//!   uplink alike (the terminal answers in the code it was sent).
//!
//! Memory per flow is bounded: at most [`MAX_CACHED`] segments are cached
//! (the oldest is forgotten first), and at most [`MAX_FLOWS`] flows are
//! tracked.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use groupwire_codec::Bch;
use groupwire_proto::Instant;
use groupwire_proto::control::ladder::{
    FrameOutcome, LadderController, PredictiveConfig, PredictiveLadder, RungModel, ThresholdConfig,
    ThresholdLadder,
};

use super::frames::packet_rung;
use crate::core::{Ctx, LinkId, Node, NodeId, Packet, Payload};
use crate::tcp::Segment;

/// Segments cached per flow at most.
pub const MAX_CACHED: usize = 4096;
/// Flows tracked at most; segments of further flows pass untouched.
pub const MAX_FLOWS: usize = 1024;

/// What the station does.
#[derive(Debug, Clone, PartialEq)]
pub struct StationConfig {
    /// Retransmit wireless losses locally and hide their duplicate ACKs.
    pub snoop: bool,
    /// Mark duplicate ACKs for segments lost on the wireless hop.
    pub eln: bool,
    /// Local retransmissions of one segment before Snoop gives up on it.
    /// Not in either paper (Snoop's own description retransmits until the
    /// sender's timer takes over); a bound keeps one deep fade from holding
    /// the sender's ACK clock hostage.
    pub max_local_retransmits: u32,
    /// Snoop's local timer fires this long after the oldest
    /// unacknowledged segment was due at the terminal (the time its ACK
    /// may take to come back up); a duplicate ACK only counts as a loss
    /// once the segment's latest copy was due.
    pub local_timeout: Duration,
    /// The wireless link's FEC.
    pub fec: LinkFec,
}

impl Default for StationConfig {
    fn default() -> Self {
        Self {
            snoop: false,
            eln: false,
            max_local_retransmits: 4,
            local_timeout: Duration::from_millis(20),
            fec: LinkFec::None,
        }
    }
}

/// The wireless link's FEC policy.
#[derive(Debug, Clone, PartialEq)]
pub enum LinkFec {
    /// No FEC: any bit error loses the frame.
    None,
    /// One code on every frame.
    Fixed(Arc<Bch>),
    /// Miyoshi et al.'s switch (§4): rung 0 is no FEC, then `codes`
    /// weakest first.
    Threshold {
        /// The codes above "no FEC", weakest first.
        codes: Vec<Arc<Bch>>,
        /// The rule.
        config: ThresholdConfig,
    },
    /// The predictive switch (beyond the paper), fed by the terminal's
    /// link-layer reports (lost, or bits corrected) for each downlink
    /// frame, read when its next frame comes up
    /// ([`Ctx::take_link_feedback`](crate::Ctx::take_link_feedback)).
    Predictive {
        /// The codes above "no FEC", weakest first.
        codes: Vec<Arc<Bch>>,
        /// Bits in a data frame (the segment size), for the rung models.
        frame_bits: usize,
        /// The rule.
        config: PredictiveConfig,
    },
}

/// What the station did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct StationStats {
    /// Segments retransmitted by Snoop.
    pub local_retransmits: u64,
    /// Duplicate ACKs Snoop kept from the sender.
    pub dupacks_suppressed: u64,
    /// Duplicate ACKs sent on with the ELN mark.
    pub eln_marked: u64,
    /// Segments judged lost on the wireless hop (what ELN sees).
    pub wireless_losses: u64,
    /// Code changes of the adaptive FEC.
    pub code_switches: u64,
    /// Data frames sent on each rung (adaptive) or the one code (fixed).
    pub frames_per_rung: Vec<u64>,
}

#[derive(Debug)]
struct Cached {
    pkt: Packet,
    end: u64,
    /// When the latest copy (the sender's or a local one) is due at the
    /// terminal: the station owns the wireless link, so it knows what is
    /// queued ahead of a frame.
    due: Instant,
    local: u32,
    /// The latest copy's fate was already reported to the FEC switch.
    reported: bool,
}

#[derive(Debug, Default)]
struct Flow {
    cache: BTreeMap<u64, Cached>,
    last_ack: u64,
    timer: Option<Instant>,
}

impl Flow {
    /// Snoop's timer: `margin` after the oldest unacknowledged segment's
    /// latest copy was due, unless Snoop gave up on it.
    fn rearm(&mut self, margin: Duration, max_local: u32) {
        self.timer = self
            .cache
            .values()
            .next()
            .filter(|c| c.local < max_local)
            .map(|c| c.due + margin);
    }
}

/// The codes above "no FEC" and the switch that picks among them.
type Ladder = (Vec<Arc<Bch>>, Box<dyn LadderController>);

/// The base station's agent; see the module docs.
#[derive(Debug)]
pub struct BaseStation {
    cfg: StationConfig,
    down: LinkId,
    up: LinkId,
    ladder: Option<Ladder>,
    /// The ladder learns from link-layer reports, not from ELN.
    link_feedback: bool,
    rung_set: Option<usize>,
    flows: BTreeMap<(NodeId, NodeId, u32), Flow>,
    stats: StationStats,
}

impl BaseStation {
    /// A station whose wireless downlink is `down` and uplink `up`. Set
    /// the code of a [`LinkFec::Fixed`] policy on both links before the
    /// run; the station sets it per frame for [`LinkFec::Threshold`].
    pub fn new(cfg: StationConfig, down: LinkId, up: LinkId) -> Self {
        let (ladder, rungs): (Option<Ladder>, usize) = match &cfg.fec {
            LinkFec::Threshold { codes, config } => (
                Some((
                    codes.clone(),
                    Box::new(ThresholdLadder::new(codes.len() + 1, *config)),
                )),
                codes.len() + 1,
            ),
            LinkFec::Predictive {
                codes,
                frame_bits,
                config,
            } => (
                Some((
                    codes.clone(),
                    Box::new(PredictiveLadder::new(
                        rung_models(codes, *frame_bits),
                        *config,
                    )),
                )),
                codes.len() + 1,
            ),
            _ => (None, 1),
        };
        let link_feedback = matches!(cfg.fec, LinkFec::Predictive { .. });
        Self {
            cfg,
            down,
            up,
            ladder,
            link_feedback,
            rung_set: None,
            flows: BTreeMap::new(),
            stats: StationStats {
                frames_per_rung: vec![0; rungs],
                ..StationStats::default()
            },
        }
    }

    /// What the station did so far.
    pub fn stats(&self) -> &StationStats {
        &self.stats
    }

    fn report(&mut self, lost: bool) {
        if lost {
            self.stats.wireless_losses += 1;
        }
        if self.link_feedback {
            return;
        }
        if let Some((_, ladder)) = &mut self.ladder {
            let before = ladder.rung();
            ladder.on_frame(if lost {
                FrameOutcome::LOST
            } else {
                FrameOutcome::CLEAN
            });
            if ladder.rung() != before {
                self.stats.code_switches += 1;
            }
        }
    }

    /// Sends a data frame on the wireless link in the current code;
    /// returns when it is due at the terminal.
    fn send_data(&mut self, ctx: &mut Ctx<'_>, pkt: Packet) -> Instant {
        self.read_link_feedback(ctx);
        let rung = match &self.ladder {
            Some((codes, ladder)) => {
                let rung = ladder.rung();
                if self.rung_set != Some(rung) {
                    let code = rung.checked_sub(1).map(|i| Arc::clone(&codes[i]));
                    ctx.set_link_fec(self.down, code.clone());
                    ctx.set_link_fec(self.up, code);
                    self.rung_set = Some(rung);
                }
                rung
            }
            None => 0,
        };
        self.stats.frames_per_rung[rung] += 1;
        let due = ctx.link_due(self.down, pkt.size);
        ctx.forward(pkt);
        due
    }

    fn on_data(&mut self, ctx: &mut Ctx<'_>, pkt: Packet, seg: Segment) {
        let key = (pkt.src, pkt.dst, pkt.flow);
        if !self.flows.contains_key(&key) && self.flows.len() >= MAX_FLOWS {
            ctx.forward(pkt);
            return;
        }
        let end = seg.seq + u64::from(seg.len);
        let cache = self.flows.get(&key).is_none_or(|f| end > f.last_ack);
        let copy = cache.then(|| pkt.clone());
        let due = self.send_data(ctx, pkt);
        let (margin, max_local) = (self.cfg.local_timeout, self.cfg.max_local_retransmits);
        let flow = self.flows.entry(key).or_default();
        if let Some(pkt) = copy {
            if flow.cache.len() >= MAX_CACHED && !flow.cache.contains_key(&seg.seq) {
                flow.cache.pop_first();
            }
            flow.cache.insert(
                seg.seq,
                Cached {
                    pkt,
                    end,
                    due,
                    local: 0,
                    reported: false,
                },
            );
            if self.cfg.snoop {
                flow.rearm(margin, max_local);
            }
        }
    }

    /// Feeds the terminal's link-layer reports that have come back to the
    /// predictive switch (before every frame sent and every ACK).
    fn read_link_feedback(&mut self, ctx: &mut Ctx<'_>) {
        if !self.link_feedback {
            return;
        }
        let reports = ctx.take_link_feedback(self.down);
        if let Some((_, ladder)) = &mut self.ladder {
            for r in reports {
                let before = ladder.rung();
                ladder.on_frame(r);
                if ladder.rung() != before {
                    self.stats.code_switches += 1;
                }
            }
        }
    }

    fn on_ack(&mut self, ctx: &mut Ctx<'_>, mut pkt: Packet, seg: Segment) {
        self.read_link_feedback(ctx);
        let key = (pkt.dst, pkt.src, pkt.flow);
        let now = ctx.now();
        let (margin, max_local) = (self.cfg.local_timeout, self.cfg.max_local_retransmits);
        let Some(flow) = self.flows.get_mut(&key) else {
            ctx.forward(pkt);
            return;
        };
        if seg.ack > flow.last_ack {
            // New data acknowledged: every cached segment it covers arrived.
            flow.last_ack = seg.ack;
            let mut clean = 0u32;
            while let Some(entry) = flow.cache.first_entry() {
                if entry.get().end > seg.ack {
                    break;
                }
                if !entry.remove().reported {
                    clean += 1;
                }
            }
            if self.cfg.snoop {
                flow.rearm(margin, max_local);
            }
            for _ in 0..clean {
                self.report(false);
            }
            ctx.forward(pkt);
            return;
        }
        let is_dup = seg.ack == flow.last_ack && seg.len == 0;
        let Some(c) = is_dup.then(|| flow.cache.get_mut(&seg.ack)).flatten() else {
            // Not a duplicate for a segment the station forwarded: a hole
            // before the station (congestion) or an old ACK. Unmarked.
            ctx.forward(pkt);
            return;
        };
        if now < c.due {
            // The missing segment's latest copy cannot have arrived yet:
            // this is the echo of something else (a duplicate), not a loss.
            if self.cfg.snoop {
                self.stats.dupacks_suppressed += 1;
            } else {
                ctx.forward(pkt);
            }
            return;
        }
        // The terminal still lacks a segment whose latest copy was due: the
        // wireless hop lost it.
        let newly_lost = !c.reported;
        c.reported = true;
        let resend = (self.cfg.snoop && c.local < max_local).then(|| {
            c.local += 1;
            c.reported = false;
            c.pkt.clone()
        });
        if newly_lost {
            self.report(true);
        }
        if let Some(p) = resend {
            self.stats.local_retransmits += 1;
            self.stats.dupacks_suppressed += 1;
            let due = self.send_data(ctx, p);
            if let Some(flow) = self.flows.get_mut(&key) {
                if let Some(c) = flow.cache.get_mut(&seg.ack) {
                    c.due = due;
                }
                flow.rearm(margin, max_local);
            }
            return;
        }
        if self.cfg.eln {
            if let Payload::Tcp(s) = &mut pkt.payload {
                s.eln = true;
            }
            self.stats.eln_marked += 1;
        }
        ctx.forward(pkt);
    }
}

impl Node for BaseStation {
    fn handle_packet(&mut self, _ctx: &mut Ctx<'_>, _pkt: Packet) {
        // Nothing is addressed to the station itself.
    }

    fn handle_transit(&mut self, ctx: &mut Ctx<'_>, from: LinkId, pkt: Packet) {
        let Payload::Tcp(seg) = pkt.payload else {
            ctx.forward(pkt);
            return;
        };
        // ACKs come up the wireless uplink; data from the wired side.
        if from == self.up {
            self.on_ack(ctx, pkt, seg);
        } else {
            self.on_data(ctx, pkt, seg);
        }
    }

    fn handle_timeout(&mut self, ctx: &mut Ctx<'_>) {
        let now = ctx.now();
        let (margin, max_local) = (self.cfg.local_timeout, self.cfg.max_local_retransmits);
        let due: Vec<(NodeId, NodeId, u32)> = self
            .flows
            .iter()
            .filter(|(_, f)| f.timer.is_some_and(|t| t <= now))
            .map(|(k, _)| *k)
            .collect();
        for key in due {
            let flow = self.flows.get_mut(&key).expect("listed");
            flow.timer = None;
            let Some((&seq, c)) = flow.cache.iter_mut().next() else {
                continue;
            };
            // Snoop's local timer: no ACK came for the oldest segment
            // `margin` after its latest copy was due at the terminal, so
            // the copy was lost (or, rarely, every ACK since): resent, and
            // reported to the code switch like a duplicate ACK's loss.
            if c.local >= max_local {
                continue;
            }
            let newly_lost = !c.reported;
            c.local += 1;
            c.reported = false;
            let p = c.pkt.clone();
            if newly_lost {
                self.report(true);
            }
            self.stats.local_retransmits += 1;
            let due = self.send_data(ctx, p);
            let flow = self.flows.get_mut(&key).expect("listed");
            if let Some(c) = flow.cache.get_mut(&seq) {
                c.due = due;
            }
            flow.rearm(margin, max_local);
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.flows.values().filter_map(|f| f.timer).min()
    }
}

/// The rungs of a link-layer ladder for frames of `frame_bits` data bits:
/// no FEC, then each code laid out as [`Bch::encode_packet`] does.
pub fn rung_models(codes: &[Arc<Bch>], frame_bits: usize) -> Vec<RungModel> {
    std::iter::once(packet_rung(None, frame_bits))
        .chain(codes.iter().map(|c| packet_rung(Some(c), frame_bits)))
        .collect()
}
