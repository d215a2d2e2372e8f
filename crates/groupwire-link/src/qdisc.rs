//! Queueing disciplines: which queued packet a link serializes next.
//!
//! A [`Qdisc`] is part of a [`LinkConfig`](crate::LinkConfig). The default,
//! [`Qdisc::Fifo`], is one drop-tail queue of [`LinkConfig::queue`]
//! packets or bytes: a packet's departure is known when it is offered, and
//! [`Link::offer`] answers at once. The classful disciplines sort packets
//! into **classes** by their DiffServ mark ([`Dscp`], RFC 2474), each class
//! with its own drop-tail limit, and pick the next packet to serialize when
//! the transmitter frees:
//!
//! - [`Qdisc::Priority`]: strict priority, the first class first. **Non-
//!   preemptive**: a packet being serialized always finishes, so a packet of
//!   a higher class waits for it (and, with a transmit ring deeper than one
//!   packet, for the whole ring; see [`Classes::tx_ring`]).
//! - [`Qdisc::Drr`]: deficit round robin (Shreedhar & Varghese, SIGCOMM
//!   1995): each backlogged class may send [`DRR_QUANTUM`] × its weight
//!   bytes per round, so long-run shares follow the weights whatever the
//!   packet sizes. O(1) per packet.
//! - [`Qdisc::Wfq`]: weighted fair queueing in its self-clocked form (SCFQ,
//!   Golestani, INFOCOM 1994): each packet gets the finish tag
//!   `max(V, previous tag of its class) + len / weight`, where `V` is the tag
//!   of the packet last chosen for service, and the smallest tag goes next.
//!   The same long-run shares as DRR, with the per-packet order of a
//!   fluid fair queue (WFQ's) approximated more closely.
//!
//! A classful link's departures depend on packets offered later (a later
//! packet of a higher class overtakes an earlier one), so it is driven by
//! events: [`Link::enqueue`] a packet with a caller's token, then at
//! [`Link::poll_timeout`] collect what finished serializing with
//! [`Link::poll_departure`]. Those calls work on FIFO links too.
//!
//! A router that does not honour DiffServ marks is a classful link with
//! [`Classes::honour_marks`] off: every packet goes to the default class
//! (the last one), whatever its mark.
//!
//! Memory is bounded by the class limits and the ring: a class holds at
//! most its limit in packets or bytes, and the transmit ring at most
//! [`Classes::tx_ring`] packets more.
//!
//! [`Link::offer`]: crate::Link::offer
//! [`Link::enqueue`]: crate::Link::enqueue
//! [`Link::poll_timeout`]: crate::Link::poll_timeout
//! [`Link::poll_departure`]: crate::Link::poll_departure
//! [`LinkConfig::queue`]: crate::LinkConfig::queue

use std::collections::VecDeque;
use std::fmt;

use groupwire_units::DataSize;
use serde::{Deserialize, Serialize};

use crate::link::QueueLimit;

/// A DiffServ codepoint (RFC 2474 §3: the six high bits of the IPv4 TOS /
/// IPv6 traffic class byte), 0 to 63.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(try_from = "u8", into = "u8")]
pub struct Dscp(u8);

impl Dscp {
    /// Default forwarding (best effort), codepoint 0 (RFC 2474 §4.1).
    pub const DEFAULT: Dscp = Dscp(0);
    /// Expedited Forwarding, codepoint 46 (`101110`, RFC 3246 §2.4): the
    /// mark Leigh et al.'s GARA reservation put on the foreground stream.
    pub const EF: Dscp = Dscp(46);

    /// The codepoint `value`, if it fits in six bits.
    pub const fn new(value: u8) -> Option<Self> {
        if value < 64 { Some(Self(value)) } else { None }
    }

    /// The codepoint, 0 to 63.
    pub const fn value(self) -> u8 {
        self.0
    }

    /// The IP precedence it falls in (its top three bits), 0 to 7.
    pub const fn precedence(self) -> u8 {
        self.0 >> 3
    }
}

impl TryFrom<u8> for Dscp {
    type Error = QdiscError;
    fn try_from(v: u8) -> Result<Self, QdiscError> {
        Self::new(v).ok_or(QdiscError::Dscp(v))
    }
}

impl From<Dscp> for u8 {
    fn from(d: Dscp) -> u8 {
        d.0
    }
}

impl fmt::Display for Dscp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::EF => f.write_str("EF"),
            Self::DEFAULT => f.write_str("default"),
            Self(v) => write!(f, "DSCP {v}"),
        }
    }
}

/// How a link orders its queued packets. See the [module docs](self).
///
/// In TOML, `kind` names the discipline and the others take the fields of
/// [`Classes`]:
///
/// ```toml
/// kind = "priority"
/// honour_marks = true
/// classes = [
///     { name = "ef", dscp = [46], limit = "20p" },
///     { name = "best-effort", limit = "60p" },
/// ]
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Qdisc {
    /// One drop-tail FIFO of [`LinkConfig::queue`](crate::LinkConfig::queue);
    /// marks are ignored.
    #[default]
    Fifo,
    /// Strict, non-preemptive priority: the first class first.
    Priority(Classes),
    /// Deficit round robin, shares by weight.
    Drr(Classes),
    /// Self-clocked weighted fair queueing, shares by weight.
    Wfq(Classes),
}

impl Qdisc {
    /// Strict priority over `classes`, marks honoured, a one-packet ring.
    pub fn priority(classes: Vec<ClassConfig>) -> Self {
        Self::Priority(Classes::new(classes))
    }

    /// Deficit round robin over `classes`, marks honoured, a one-packet ring.
    pub fn drr(classes: Vec<ClassConfig>) -> Self {
        Self::Drr(Classes::new(classes))
    }

    /// Self-clocked WFQ over `classes`, marks honoured, a one-packet ring.
    pub fn wfq(classes: Vec<ClassConfig>) -> Self {
        Self::Wfq(Classes::new(classes))
    }

    /// Whether packets are scheduled by class (anything but FIFO).
    pub fn is_classful(&self) -> bool {
        !matches!(self, Self::Fifo)
    }

    /// The classes, if classful.
    pub fn classes(&self) -> Option<&Classes> {
        match self {
            Self::Fifo => None,
            Self::Priority(c) | Self::Drr(c) | Self::Wfq(c) => Some(c),
        }
    }

    /// The classes, mutably, if classful (to change a setting from a script
    /// or a scenario before the link is built).
    pub fn classes_mut(&mut self) -> Option<&mut Classes> {
        match self {
            Self::Fifo => None,
            Self::Priority(c) | Self::Drr(c) | Self::Wfq(c) => Some(c),
        }
    }

    /// Checks the classes: at least one and at most [`MAX_CLASSES`],
    /// positive weights, codepoints below 64, a ring of at least one packet.
    pub fn validate(&self) -> Result<(), QdiscError> {
        let Some(c) = self.classes() else {
            return Ok(());
        };
        if c.classes.is_empty() || c.classes.len() > MAX_CLASSES {
            return Err(QdiscError::ClassCount(c.classes.len()));
        }
        if c.tx_ring == 0 {
            return Err(QdiscError::TxRing);
        }
        for class in &c.classes {
            if let Some(&v) = class.dscp.iter().find(|&&v| v >= 64) {
                return Err(QdiscError::Dscp(v));
            }
            if class.weight == 0 && !matches!(self, Self::Priority(_)) {
                return Err(QdiscError::Weight(class.name.clone()));
            }
        }
        Ok(())
    }
}

/// The classes of a classful [`Qdisc`] and how packets reach them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Classes {
    /// The classes; for [`Qdisc::Priority`] in priority order, highest
    /// first. A packet joins the first class whose `dscp` lists its mark,
    /// else the last class (the default class).
    pub classes: Vec<ClassConfig>,
    /// Whether marks choose the class. `false` is a router that does not
    /// honour DiffServ: every packet joins the last class.
    pub honour_marks: bool,
    /// Packets handed to the interface's own FIFO transmit queue below the
    /// scheduler (the one being serialized included). At 1 the discipline
    /// is ideal non-preemptive: a packet waits for at most the one in
    /// service. Routers such as Cisco's with a transmit ring let the
    /// scheduler decide only when the ring has room, so a priority packet
    /// also waits behind the packets already in the ring.
    ///
    /// At 1, the packet being serialized counts against its class's limit,
    /// as on a FIFO link (one class is then exactly the FIFO link). A
    /// deeper ring is the interface's own memory: packets count against
    /// their class only until they enter it.
    pub tx_ring: u32,
}

impl Default for Classes {
    fn default() -> Self {
        Self::new(vec![ClassConfig::new("default")])
    }
}

impl Classes {
    /// `classes`, marks honoured, a one-packet ring.
    pub fn new(classes: Vec<ClassConfig>) -> Self {
        Self {
            classes,
            honour_marks: true,
            tx_ring: 1,
        }
    }

    /// Whether marks choose the class.
    pub fn honour_marks(mut self, honour: bool) -> Self {
        self.honour_marks = honour;
        self
    }

    /// Packets in the transmit ring below the scheduler.
    pub fn tx_ring(mut self, packets: u32) -> Self {
        self.tx_ring = packets;
        self
    }
}

/// One class of a classful [`Qdisc`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClassConfig {
    /// A name for reports (`ef`, `best-effort`).
    pub name: String,
    /// The DiffServ codepoints that join this class (ignored for the last
    /// class, which also takes every unlisted mark).
    pub dscp: Vec<u8>,
    /// Drop-tail limit of this class's queue (see [`Classes::tx_ring`] for
    /// whether it counts the packet being serialized): `"60p"` (or `60`)
    /// packets, `"512KiB"` bytes, or `"unlimited"`.
    #[serde(with = "queue_limit_text")]
    pub limit: QueueLimit,
    /// Share under [`Qdisc::Drr`] and [`Qdisc::Wfq`] (ignored by
    /// [`Qdisc::Priority`]): backlogged classes get the link in proportion
    /// to their weights.
    pub weight: u32,
}

impl Default for ClassConfig {
    fn default() -> Self {
        Self::new("default")
    }
}

impl ClassConfig {
    /// A class named `name` taking no marks of its own, unlimited, weight 1.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            dscp: Vec::new(),
            limit: QueueLimit::Unlimited,
            weight: 1,
        }
    }

    /// The codepoints that join this class.
    pub fn dscp(mut self, marks: impl IntoIterator<Item = Dscp>) -> Self {
        self.dscp = marks.into_iter().map(Dscp::value).collect();
        self
    }

    /// The class's drop-tail limit.
    pub fn limit(mut self, limit: QueueLimit) -> Self {
        self.limit = limit;
        self
    }

    /// The class's weight (DRR and WFQ).
    pub fn weight(mut self, weight: u32) -> Self {
        self.weight = weight;
        self
    }
}

/// Counters of one class of a classful link.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClassStats {
    /// Packets that joined the class.
    pub enqueued: u64,
    /// Their bytes.
    pub enqueued_bytes: u64,
    /// Packets dropped at the tail of the full class.
    pub dropped: u64,
    /// Their bytes.
    pub dropped_bytes: u64,
    /// Packets that finished serializing (the loss process may still lose
    /// them on the wire).
    pub departed: u64,
    /// Their bytes.
    pub departed_bytes: u64,
    /// Largest occupancy in packets (right after an enqueue).
    pub max_packets: u64,
    /// Largest occupancy in bytes (right after an enqueue).
    pub max_bytes: u64,
}

/// Why a queue discipline was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QdiscError {
    /// Too few or too many classes.
    #[error("a classful queue discipline needs 1 to {MAX_CLASSES} classes, not {0}")]
    ClassCount(usize),
    /// A codepoint does not fit six bits.
    #[error("DSCP {0} is not a codepoint: they run from 0 to 63 (EF is 46)")]
    Dscp(u8),
    /// A DRR or WFQ class has weight zero.
    #[error("class {0:?} has weight 0: DRR and WFQ weights must be positive")]
    Weight(String),
    /// The transmit ring holds no packet.
    #[error("tx_ring must be at least 1 packet (1 is ideal non-preemptive scheduling)")]
    TxRing,
}

/// Most classes a classful discipline may have.
pub const MAX_CLASSES: usize = 64;

/// Bytes a DRR class may send per round per unit of weight: one
/// Ethernet MTU, so a weight-1 class sends at least one full-size packet
/// per round (Shreedhar & Varghese's condition for O(1) work per packet).
pub const DRR_QUANTUM: u64 = 1500;

/// Fixed-point scale of WFQ finish tags (tags are bytes × this / weight).
const WFQ_SCALE: u128 = 1 << 20;

/// A packet waiting in a class queue.
#[derive(Debug, Clone, Copy)]
struct Waiting {
    token: u64,
    len: u64,
    /// WFQ finish tag (0 for other disciplines).
    finish: u128,
}

#[derive(Debug)]
struct ClassState {
    queue: VecDeque<Waiting>,
    limit: QueueLimit,
    weight: u64,
    /// Packets and bytes counted against this class's limit: queued, and in
    /// the ring when it is one packet deep.
    packets: u64,
    bytes: u64,
    /// DRR: bytes the class may still send this round.
    deficit: u64,
    /// WFQ: the finish tag of the class's last packet.
    last_finish: u128,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Priority,
    Drr,
    Wfq,
}

/// The classes' queues and the rule that picks the next packet. It knows
/// nothing of time: the link asks it for the next packet when its transmit
/// ring has room.
#[derive(Debug)]
pub(crate) struct Scheduler {
    kind: Kind,
    classes: Vec<ClassState>,
    /// Counters, one per class (apart so the link can lend them as a slice).
    stats: Vec<ClassStats>,
    /// Class of each codepoint.
    class_of: [u8; 64],
    /// DRR: backlogged classes in round order; the front one holds the turn.
    active: VecDeque<usize>,
    /// DRR: whether the front class got its quantum for this turn.
    turn_started: bool,
    /// WFQ: the system virtual time (tag of the last packet chosen).
    vtime: u128,
    pub(crate) tx_ring: usize,
    /// Packets and bytes in a ring deeper than one, which no class counts.
    ring_packets: u64,
    ring_bytes: u64,
}

impl Scheduler {
    /// The scheduler of a classful `qdisc`, or `None` for FIFO.
    pub(crate) fn new(qdisc: &Qdisc) -> Result<Option<Self>, QdiscError> {
        qdisc.validate()?;
        let (kind, cfg) = match qdisc {
            Qdisc::Fifo => return Ok(None),
            Qdisc::Priority(c) => (Kind::Priority, c),
            Qdisc::Drr(c) => (Kind::Drr, c),
            Qdisc::Wfq(c) => (Kind::Wfq, c),
        };
        let last = u8::try_from(cfg.classes.len() - 1).expect("at most 64 classes, validated");
        let mut class_of = [last; 64];
        if cfg.honour_marks {
            // The first class listing a mark wins: walk backwards so earlier
            // classes overwrite later ones.
            for (i, class) in cfg.classes.iter().enumerate().rev() {
                for &d in &class.dscp {
                    class_of[usize::from(d)] = u8::try_from(i).expect("at most 64 classes");
                }
            }
        }
        Ok(Some(Self {
            kind,
            classes: cfg
                .classes
                .iter()
                .map(|c| ClassState {
                    queue: VecDeque::new(),
                    limit: c.limit.clone(),
                    weight: u64::from(c.weight.max(1)),
                    packets: 0,
                    bytes: 0,
                    deficit: 0,
                    last_finish: 0,
                })
                .collect(),
            stats: vec![ClassStats::default(); cfg.classes.len()],
            class_of,
            active: VecDeque::new(),
            turn_started: false,
            vtime: 0,
            tx_ring: usize::try_from(cfg.tx_ring).unwrap_or(usize::MAX),
            ring_packets: 0,
            ring_bytes: 0,
        }))
    }

    /// The class a packet marked `dscp` joins.
    pub(crate) fn classify(&self, dscp: Dscp) -> usize {
        usize::from(self.class_of[usize::from(dscp.value())])
    }

    /// Admits a packet of `len` bytes to `class` (drop-tail on the class's
    /// limit) and queues it. `false`: dropped.
    pub(crate) fn push(&mut self, class: usize, token: u64, len: u64) -> bool {
        let vtime = self.vtime;
        let c = &mut self.classes[class];
        let stats = &mut self.stats[class];
        let full = match c.limit {
            QueueLimit::Unlimited => false,
            QueueLimit::Packets(max) => c.packets >= u64::from(max),
            QueueLimit::Bytes(max) => c.bytes.saturating_add(len) > max,
        };
        if full {
            stats.dropped += 1;
            stats.dropped_bytes += len;
            return false;
        }
        let finish = if self.kind == Kind::Wfq {
            let start = vtime.max(c.last_finish);
            let f = start + u128::from(len.max(1)) * WFQ_SCALE / u128::from(c.weight);
            c.last_finish = f;
            f
        } else {
            0
        };
        if c.queue.is_empty() && self.kind == Kind::Drr {
            self.active.push_back(class);
        }
        c.queue.push_back(Waiting { token, len, finish });
        c.packets += 1;
        c.bytes += len;
        stats.enqueued += 1;
        stats.enqueued_bytes += len;
        stats.max_packets = stats.max_packets.max(c.packets);
        stats.max_bytes = stats.max_bytes.max(c.bytes);
        true
    }

    /// Takes the next packet to serialize: `(class, token, len)`.
    pub(crate) fn pop(&mut self) -> Option<(usize, u64, u64)> {
        let class = match self.kind {
            Kind::Priority => self.classes.iter().position(|c| !c.queue.is_empty())?,
            Kind::Wfq => {
                let (i, _) = self
                    .classes
                    .iter()
                    .enumerate()
                    .filter_map(|(i, c)| c.queue.front().map(|w| (i, w.finish)))
                    .min_by_key(|&(i, f)| (f, i))?;
                i
            }
            Kind::Drr => self.drr_next()?,
        };
        let c = &mut self.classes[class];
        let w = c.queue.pop_front().expect("the chosen class has a packet");
        if self.kind == Kind::Wfq {
            self.vtime = w.finish;
        }
        if self.tx_ring > 1 {
            // Into the interface's own memory.
            c.packets -= 1;
            c.bytes -= w.len;
            self.ring_packets += 1;
            self.ring_bytes += w.len;
        }
        Some((class, w.token, w.len))
    }

    /// DRR: the class whose head packet goes next, its deficit charged.
    fn drr_next(&mut self) -> Option<usize> {
        loop {
            let &class = self.active.front()?;
            let c = &mut self.classes[class];
            if !self.turn_started {
                c.deficit += DRR_QUANTUM * c.weight;
                self.turn_started = true;
            }
            let head = c.queue.front().expect("active classes are backlogged").len;
            if c.deficit >= head {
                c.deficit -= head;
                if c.queue.len() == 1 {
                    // The class empties: it leaves the round with no credit.
                    c.deficit = 0;
                    self.active.pop_front();
                    self.turn_started = false;
                }
                return Some(class);
            }
            // Not enough credit: the turn passes, the deficit carries over.
            self.active.rotate_left(1);
            self.turn_started = false;
        }
    }

    /// A packet of `class` finished serializing.
    pub(crate) fn on_departed(&mut self, class: usize, len: u64) {
        if self.tx_ring > 1 {
            self.ring_packets -= 1;
            self.ring_bytes -= len;
        } else {
            let c = &mut self.classes[class];
            c.packets -= 1;
            c.bytes -= len;
        }
        self.stats[class].departed += 1;
        self.stats[class].departed_bytes += len;
    }

    /// Packets and bytes held, every class and the ring.
    pub(crate) fn occupancy(&self) -> (u64, u64) {
        self.classes
            .iter()
            .fold((self.ring_packets, self.ring_bytes), |(p, b), c| {
                (p + c.packets, b + c.bytes)
            })
    }

    pub(crate) fn stats(&self) -> &[ClassStats] {
        &self.stats
    }
}

/// Serde for a [`QueueLimit`] as text: `60` or `"60p"` packets, `"512KiB"`
/// bytes, `"unlimited"`.
pub mod queue_limit_text {
    use serde::{Deserialize, Deserializer, Serializer};

    use super::{DataSize, QueueLimit};

    /// Writes `"60p"`, `"512KiB"` or `"unlimited"`.
    pub fn serialize<S: Serializer>(limit: &QueueLimit, s: S) -> Result<S::Ok, S::Error> {
        match limit {
            QueueLimit::Unlimited => s.serialize_str("unlimited"),
            QueueLimit::Packets(p) => s.serialize_str(&format!("{p}p")),
            QueueLimit::Bytes(b) => s.serialize_str(&DataSize::bytes(*b).to_string()),
        }
    }

    /// Reads a number of packets, `"Np"`, a data size or `"unlimited"`.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<QueueLimit, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(u32),
            Text(String),
        }
        const HINT: &str = "a queue limit is a number of packets (60 or \"60p\"), a size (\"512KiB\") or \"unlimited\"";
        match Raw::deserialize(d)? {
            Raw::Int(p) => Ok(QueueLimit::Packets(p)),
            Raw::Text(t) => {
                let t = t.trim();
                if t == "unlimited" {
                    return Ok(QueueLimit::Unlimited);
                }
                if let Some(p) = t.strip_suffix('p') {
                    return p
                        .trim()
                        .parse()
                        .map(QueueLimit::Packets)
                        .map_err(|_| serde::de::Error::custom(HINT));
                }
                t.parse::<DataSize>()
                    .map(|s| QueueLimit::Bytes(s.as_bytes()))
                    .map_err(|_| serde::de::Error::custom(HINT))
            }
        }
    }
}

#[cfg(test)]
mod tests;
