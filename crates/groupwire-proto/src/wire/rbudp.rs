//! Reliable Blast UDP (Leigh et al. §4.2): the data datagram that goes out
//! over UDP, and the control messages that go over the reliable control
//! stream (one TCP connection, each message one length-prefixed frame).
//!
//! Every message follows the common [`header`] with `kind` =
//! [`Kind::Blast`]; byte 8 says which message it is ([`MsgType`]), bytes
//! 9 to 11 are reserved (zero on emit, ignored on parse). The header's
//! `flags` byte carries the message's flag bits. All fields are
//! big-endian. Sizes and offsets are 64-bit, so a payload of any size
//! (CAVERNsoft's 64-bit file transfer) fits.
//!
//! # Data datagram (UDP, [`MsgType::Data`])
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  common header: version=1, kind=6, flags=0, reserved, session |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  type = 1     |                   reserved                    |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                        round (blast number)                   |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                  packet index (64 bits) ...                   |
//! |                                                               |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  payload: bytes index·packet_size .. of the transfer ...
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! Packet `i` carries the payload's bytes from `i · packet_size`, all but
//! the last packet exactly `packet_size` of them. The round is the blast
//! it was sent in (0 for the first), so the receiver measures each blast's
//! arrivals apart from stragglers of the one before. No checksum: UDP's
//! own catches transmission errors, and the BLAKE3 hash of the whole
//! payload, compared at the end, catches everything else.
//!
//! # Control messages (reliable stream)
//!
//! After the common header and the type byte (and 3 reserved bytes):
//!
//! ```text
//! Start (2), 72 bytes: sender → receiver, opens the transfer
//!   12 packet_size u32 | 16 size u64 | 24 rate (bit/s) u64 | 32 hash [32]
//!   64 version u64
//!   flags bit 0 (FLAG_HASH): the hash is present (else zero, ignored)
//!   flags bit 1 (FLAG_VERSION): the version is present (else zero,
//!     ignored): the payload's version, so a receiver holding part of it
//!     from an interrupted transfer may resume
//! Accept (3), 24 bytes: receiver → sender, ready for the blast
//!   12 packet_size u32 | 16 size u64            (echoes the Start)
//!   flags bit 0 (FLAG_RESUMED): the receiver holds part of this version
//!     of the payload; a missing list for round RESUME_ROUND follows, and
//!     the first blast sends only what it names
//! EndOfBlast (4), 56 bytes: sender → receiver, a blast is over
//!   12 round u32 | 16 sent (datagrams in the round) u64 | 24 hash [32]
//!   flags bit 0 (FLAG_HASH): the hash is present (else zero, ignored)
//! Missing (5), 64 bytes + list: receiver → sender, one chunk of the
//!   missing list after a round
//!   12 round u32 | 16 chunk seq u32 | 20 arrived u64 | 28 arrived bytes u64
//!   36 arrival span (µs) u64 | 44 total missing u64 | 52 base u64
//!   60 count u32 | 64 list ...
//!   flags bit 0 (FLAG_LAST): the last chunk of this round's list
//!   flags bit 1 (FLAG_BITMAP): the list is a bitmap
//!   flags bit 2 (FLAG_GAPS): the list is gap-coded (neither: ranges)
//! Done (6), 48 bytes: receiver → sender, every packet is in
//!   12 status u8 | 13 reserved [3] | 16 the receiver's hash [32]
//! Abort (7), 16 bytes: either way, the transfer is over
//!   12 reason u8 | 13 reserved [3]
//! ```
//!
//! A missing list is cut into chunks of at most [`MAX_LIST_BYTES`] bytes,
//! each either a **bitmap** (`count` bits from packet `base`, most
//! significant bit first, a set bit is a missing packet; the bits past
//! `count` in the last byte are zero), **ranges** (`count` entries of a
//! 64-bit first packet and a 32-bit length; sorted, not overlapping, each
//! at least one packet long; `base` is zero) or **gaps** (`count` runs,
//! each two LEB128 varints: the packets from the end of the previous run,
//! or from `base` for the first, to the run's start, then the run's length
//! less one). The receiver picks whichever is shortest. The paper's list
//! is a bitmap; gaps are ours: at 1% random loss they take about 1.5 bytes
//! a missing packet where a bitmap takes 100 bits, so a list fits in the
//! few segments a TCP connection idle through a long blast may send at
//! once (Linux restarts an idle connection's window from its initial ten
//! segments), and costs one round trip instead of two. `arrived`, `arrived bytes` and the arrival span (first to
//! last arrival, µs) measure the round's datagrams as they arrived, for
//! the sender's adaptive rate; `total missing` counts the whole list.
//!
//! Parsing never panics and never allocates: lengths and counts are
//! checked against the bytes present first. Whether a list names packets
//! beyond the transfer is the machine's check (the wire does not know the
//! size).

use core::ops::Range;

use super::header::{self, HEADER_LEN, Kind};
use super::{WireError, be32, be64, need};

/// Bytes before a data datagram's payload.
pub const DATA_HEADER_LEN: usize = HEADER_LEN + 16;
/// Bytes of a [`Start`].
pub const START_LEN: usize = 72;
/// Bytes of an [`Accept`].
pub const ACCEPT_LEN: usize = 24;
/// Bytes of an [`EndOfBlast`].
pub const END_OF_BLAST_LEN: usize = 56;
/// Bytes of a [`Missing`] chunk before its list.
pub const MISSING_HEADER_LEN: usize = 64;
/// Bytes of a [`Done`].
pub const DONE_LEN: usize = 48;
/// Bytes of an [`Abort`].
pub const ABORT_LEN: usize = 16;
/// The most list bytes one [`Missing`] chunk carries (a bitmap of 262 144
/// packets), so every control frame stays under 64 KiB.
pub const MAX_LIST_BYTES: usize = 32 * 1024;
/// The largest control message.
pub const MAX_CONTROL_LEN: usize = MISSING_HEADER_LEN + MAX_LIST_BYTES;
/// Bytes of one entry of a ranges list: first packet (8), length (4).
pub const RANGE_LEN: usize = 12;

/// [`Start`] and [`EndOfBlast`] flag: the hash field holds the hash.
pub const FLAG_HASH: u8 = 0x01;
/// [`Start`] flag: the version field holds the payload's version.
pub const FLAG_VERSION: u8 = 0x02;
/// [`Accept`] flag: the receiver resumes an interrupted transfer.
pub const FLAG_RESUMED: u8 = 0x01;
/// The round of the missing list that follows a resumed [`Accept`]: what
/// the receiver lacks before any blast.
pub const RESUME_ROUND: u32 = u32::MAX;
/// [`Missing`] flag: the last chunk of its round's list.
pub const FLAG_LAST: u8 = 0x01;
/// [`Missing`] flag: the list is a bitmap.
pub const FLAG_BITMAP: u8 = 0x02;
/// [`Missing`] flag: the list is gap-coded.
pub const FLAG_GAPS: u8 = 0x04;

/// A BLAKE3 hash.
pub type Hash = [u8; 32];

crate::wire_enum! {
    /// Which RBUDP message a buffer holds (byte 8).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
    #[non_exhaustive]
    pub enum MsgType: WireError = (WireError::UnknownKind) {
        /// A data datagram (UDP).
        Data = 1,
        /// [`Start`].
        Start = 2,
        /// [`Accept`].
        Accept = 3,
        /// [`EndOfBlast`].
        EndOfBlast = 4,
        /// [`Missing`].
        Missing = 5,
        /// [`Done`].
        Done = 6,
        /// [`Abort`].
        Abort = 7,
    }
}

crate::wire_enum! {
    /// How a [`Done`] ends the transfer.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    #[non_exhaustive]
    pub enum DoneStatus: WireError = (|_| WireError::Malformed("unknown done status")) {
        /// Every packet arrived and the hash matches.
        Ok = 0,
        /// Every packet arrived but the hash of what was written differs
        /// from the sender's.
        HashMismatch = 1,
    }
}

crate::wire_enum! {
    /// Why an [`Abort`] ends the transfer.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    #[non_exhaustive]
    pub enum AbortReason: WireError = (|_| WireError::Malformed("unknown abort reason")) {
        /// The receiver refuses the transfer (too large, a packet size it
        /// does not take, a transfer already under way).
        Refused = 1,
        /// Reading the payload (sender) or storing it (receiver) failed.
        Storage = 2,
        /// The peer stopped answering.
        PeerSilent = 3,
        /// The peer broke the protocol (a list naming packets past the
        /// end, a hash that changed).
        Protocol = 4,
        /// The application cancelled.
        Cancelled = 5,
        /// More rounds than the sender allows.
        TooManyRounds = 6,
    }
}

mod field {
    use core::ops::Range;
    pub(super) const TYPE: usize = 8;
    // Data.
    pub(super) const ROUND: Range<usize> = 12..16;
    pub(super) const INDEX: Range<usize> = 16..24;
    // Start and Accept.
    pub(super) const PACKET_SIZE: Range<usize> = 12..16;
    pub(super) const SIZE: Range<usize> = 16..24;
    pub(super) const RATE: Range<usize> = 24..32;
    pub(super) const START_HASH: Range<usize> = 32..64;
    pub(super) const VERSION: Range<usize> = 64..72;
    // EndOfBlast (round at ROUND).
    pub(super) const SENT: Range<usize> = 16..24;
    pub(super) const EOB_HASH: Range<usize> = 24..56;
    // Missing (round at ROUND).
    pub(super) const SEQ: Range<usize> = 16..20;
    pub(super) const ARRIVED: Range<usize> = 20..28;
    pub(super) const ARRIVED_BYTES: Range<usize> = 28..36;
    pub(super) const SPAN: Range<usize> = 36..44;
    pub(super) const TOTAL: Range<usize> = 44..52;
    pub(super) const BASE: Range<usize> = 52..60;
    pub(super) const COUNT: Range<usize> = 60..64;
    // Done.
    pub(super) const STATUS: usize = 12;
    pub(super) const DONE_HASH: Range<usize> = 16..48;
    // Abort.
    pub(super) const REASON: usize = 12;
}

/// A parsed data datagram; `payload` borrows from the buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataRepr<'a> {
    /// The transfer's session id.
    pub session: u32,
    /// The blast it was sent in, from 0.
    pub round: u32,
    /// Its packet index: it carries the bytes from `index · packet_size`.
    pub index: u64,
    /// Those bytes.
    pub payload: &'a [u8],
}

impl<'a> DataRepr<'a> {
    /// Parses a data datagram. Never panics.
    pub fn parse(buf: &'a [u8]) -> Result<Self, WireError> {
        let h = parse_header(buf, MsgType::Data)?;
        need(buf, DATA_HEADER_LEN)?;
        Ok(Self {
            session: h.session,
            round: be32(&buf[field::ROUND]),
            index: be64(&buf[field::INDEX]),
            payload: &buf[DATA_HEADER_LEN..],
        })
    }

    /// Bytes [`emit`](Self::emit) writes.
    pub fn buffer_len(&self) -> usize {
        DATA_HEADER_LEN + self.payload.len()
    }

    /// Writes the datagram into `buf`, exactly [`buffer_len`](Self::buffer_len) bytes.
    ///
    /// # Panics
    /// On a wrong buffer size: a local sizing bug, not peer input.
    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(buf.len(), self.buffer_len(), "buffer sized by buffer_len");
        self.emit_header(&mut buf[..DATA_HEADER_LEN]);
        buf[DATA_HEADER_LEN..].copy_from_slice(self.payload);
    }

    /// Writes only the [`DATA_HEADER_LEN`] header bytes, for a sender that
    /// reads the payload straight into the datagram after them.
    ///
    /// # Panics
    /// If `buf` is not [`DATA_HEADER_LEN`] bytes.
    pub fn emit_header(&self, buf: &mut [u8]) {
        assert_eq!(buf.len(), DATA_HEADER_LEN, "header buffer size");
        emit_header(buf, MsgType::Data, 0, self.session);
        buf[field::ROUND].copy_from_slice(&self.round.to_be_bytes());
        buf[field::INDEX].copy_from_slice(&self.index.to_be_bytes());
    }
}

/// Opens a transfer (sender → receiver).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Start {
    /// Payload bytes per data packet (all but the last).
    pub packet_size: u32,
    /// Bytes of the whole payload.
    pub size: u64,
    /// The first blast's rate on the wire, bit/s (for the receiver's
    /// information: the blast paces itself).
    pub rate_bps: u64,
    /// The BLAKE3 hash of the payload, when the sender knows it before the
    /// first blast (otherwise it comes with the first [`EndOfBlast`]).
    pub hash: Option<Hash>,
    /// The payload's version (for a file: from its length and modification
    /// time), when the transfer may resume: a receiver that holds part of
    /// the same size, packet size and version from an interrupted transfer
    /// keeps it.
    pub version: Option<u64>,
}

/// The receiver is ready (receiver → sender), echoing the [`Start`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Accept {
    /// As in the [`Start`].
    pub packet_size: u32,
    /// As in the [`Start`].
    pub size: u64,
    /// Part of the payload is held from an interrupted transfer: a
    /// [`Missing`] list for [`RESUME_ROUND`] follows.
    pub resumed: bool,
}

/// A blast is over (sender → receiver): time to answer with what is missing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EndOfBlast {
    /// The round that ended.
    pub round: u32,
    /// Datagrams sent in it.
    pub sent: u64,
    /// The payload's hash, once the sender has read the whole payload
    /// (always, from the end of round 0 on).
    pub hash: Option<Hash>,
}

/// One chunk of the list of packets still missing after a round
/// (receiver → sender), with the round's arrival measurements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Missing<'a> {
    /// The round this list answers.
    pub round: u32,
    /// The chunk's place in the list, from 0.
    pub seq: u32,
    /// The last chunk of the list.
    pub last: bool,
    /// Datagrams of the round that arrived.
    pub arrived: u64,
    /// Their bytes (UDP payload, our header included).
    pub arrived_bytes: u64,
    /// Microseconds from the round's first arrival to its last.
    pub span_us: u64,
    /// Packets missing in the whole list (every chunk).
    pub total: u64,
    /// This chunk's packets.
    pub list: MissingList<'a>,
}

/// The packets one [`Missing`] chunk names, as it came on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MissingList<'a> {
    /// Runs of missing packets: `count` entries of [`RANGE_LEN`] bytes,
    /// checked sorted and disjoint.
    Ranges {
        /// The entries, borrowed.
        bytes: &'a [u8],
    },
    /// One bit per packet from `base`, set when missing.
    Bitmap {
        /// The first packet the bitmap covers.
        base: u64,
        /// How many packets it covers.
        bits: u32,
        /// `ceil(bits / 8)` bytes, most significant bit first.
        bytes: &'a [u8],
    },
    /// Runs as varint pairs (gap before, length less one), checked to
    /// decode to exactly `runs` runs inside 64 bits ([`push_gap_run`]).
    Gaps {
        /// Where the first gap counts from.
        base: u64,
        /// How many runs.
        runs: u32,
        /// The varints.
        bytes: &'a [u8],
    },
}

impl<'a> MissingList<'a> {
    /// The missing packets as runs `[start, end)`, in order (a bitmap's
    /// adjacent set bits come out as one run).
    pub fn runs(&self) -> Runs<'a> {
        Runs {
            list: *self,
            pos: 0,
            prev: match self {
                Self::Gaps { base, .. } => *base,
                _ => 0,
            },
        }
    }

    /// Bytes of the list on the wire.
    pub fn wire_len(&self) -> usize {
        match self {
            Self::Ranges { bytes } | Self::Bitmap { bytes, .. } | Self::Gaps { bytes, .. } => {
                bytes.len()
            }
        }
    }

    /// The `count` field: ranges, bits or runs.
    fn count(&self) -> u32 {
        match self {
            Self::Ranges { bytes } => (bytes.len() / RANGE_LEN) as u32,
            Self::Bitmap { bits, .. } => *bits,
            Self::Gaps { runs, .. } => *runs,
        }
    }
}

/// Appends `v` as an unsigned LEB128 varint (7 bits a byte, low first).
fn push_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads a varint at `*at`, moving past it; `None` if it runs off the end
/// or past 64 bits.
fn read_varint(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *bytes.get(*at)?;
        *at += 1;
        if shift == 63 && b > 1 {
            return None;
        }
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// Appends the run `start .. start + len` to a gap-coded list whose last
/// run ended at `*end` (the list's `base` before the first run), and moves
/// `*end` past it. `start` must not be before `*end`, `len` at least 1.
pub fn push_gap_run(out: &mut Vec<u8>, end: &mut u64, start: u64, len: u64) {
    debug_assert!(start >= *end && len >= 1);
    push_varint(out, start - *end);
    push_varint(out, len - 1);
    *end = start + len;
}

/// The run at `*at` of a gap-coded list whose last run ended at `prev`.
fn read_gap_run(bytes: &[u8], at: &mut usize, prev: u64) -> Option<Range<u64>> {
    let start = prev.checked_add(read_varint(bytes, at)?)?;
    let end = start.checked_add(read_varint(bytes, at)?)?.checked_add(1)?;
    Some(start..end)
}

/// Iterator over a [`MissingList`]'s runs; see [`MissingList::runs`].
#[derive(Clone, Debug)]
pub struct Runs<'a> {
    list: MissingList<'a>,
    /// The entry (ranges), bit (bitmap) or byte (gaps) to read next.
    pos: u64,
    /// Gaps: where the last run ended.
    prev: u64,
}

impl Iterator for Runs<'_> {
    type Item = Range<u64>;

    fn next(&mut self) -> Option<Range<u64>> {
        match self.list {
            MissingList::Ranges { bytes } => {
                let at = usize::try_from(self.pos).ok()?.checked_mul(RANGE_LEN)?;
                let e = bytes.get(at..at + RANGE_LEN)?;
                self.pos += 1;
                let start = be64(&e[..8]);
                Some(start..start + u64::from(be32(&e[8..])))
            }
            MissingList::Bitmap { base, bits, bytes } => {
                let bit = |i: u64| bytes[(i / 8) as usize] & (0x80 >> (i % 8)) != 0;
                let n = u64::from(bits);
                while self.pos < n && !bit(self.pos) {
                    self.pos += 1;
                }
                if self.pos >= n {
                    return None;
                }
                let start = self.pos;
                while self.pos < n && bit(self.pos) {
                    self.pos += 1;
                }
                Some(base + start..base + self.pos)
            }
            MissingList::Gaps { bytes, .. } => {
                let mut at = usize::try_from(self.pos).ok()?;
                let run = read_gap_run(bytes, &mut at, self.prev)?;
                self.pos = at as u64;
                self.prev = run.end;
                Some(run)
            }
        }
    }
}

/// Every packet is in (receiver → sender).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Done {
    /// Whether the receiver's hash matched.
    pub status: DoneStatus,
    /// The BLAKE3 hash of what the receiver stored.
    pub hash: Hash,
}

/// The transfer is over, unfinished (either way).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Abort {
    /// Why.
    pub reason: AbortReason,
}

/// A control message's body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Control<'a> {
    /// [`Start`].
    Start(Start),
    /// [`Accept`].
    Accept(Accept),
    /// [`EndOfBlast`].
    EndOfBlast(EndOfBlast),
    /// [`Missing`].
    Missing(Missing<'a>),
    /// [`Done`].
    Done(Done),
    /// [`Abort`].
    Abort(Abort),
}

/// A parsed control message: its session and body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ControlRepr<'a> {
    /// The transfer's session id.
    pub session: u32,
    /// The message.
    pub msg: Control<'a>,
}

impl<'a> ControlRepr<'a> {
    /// Parses one control message (one whole frame). Never panics; rejects
    /// data datagrams, wrong lengths, and lists that are not sorted,
    /// disjoint and inside 64 bits.
    pub fn parse(buf: &'a [u8]) -> Result<Self, WireError> {
        let h = header::Repr::parse_kind(buf, Kind::Blast, "not an RBUDP message")?;
        need(buf, HEADER_LEN + 1)?;
        let kind = MsgType::try_from(buf[field::TYPE])?;
        let exact = |len: usize| -> Result<(), WireError> {
            need(buf, len)?;
            if buf.len() > len {
                return Err(WireError::Malformed("bytes after the message"));
            }
            Ok(())
        };
        let hash_at = |at: Range<usize>| {
            (h.flags & FLAG_HASH != 0).then(|| {
                let mut out = [0u8; 32];
                out.copy_from_slice(&buf[at]);
                out
            })
        };
        let msg = match kind {
            MsgType::Data => return Err(WireError::Malformed("a data datagram, not control")),
            MsgType::Start => {
                exact(START_LEN)?;
                Control::Start(Start {
                    packet_size: be32(&buf[field::PACKET_SIZE]),
                    size: be64(&buf[field::SIZE]),
                    rate_bps: be64(&buf[field::RATE]),
                    hash: hash_at(field::START_HASH),
                    version: (h.flags & FLAG_VERSION != 0).then(|| be64(&buf[field::VERSION])),
                })
            }
            MsgType::Accept => {
                exact(ACCEPT_LEN)?;
                Control::Accept(Accept {
                    packet_size: be32(&buf[field::PACKET_SIZE]),
                    size: be64(&buf[field::SIZE]),
                    resumed: h.flags & FLAG_RESUMED != 0,
                })
            }
            MsgType::EndOfBlast => {
                exact(END_OF_BLAST_LEN)?;
                Control::EndOfBlast(EndOfBlast {
                    round: be32(&buf[field::ROUND]),
                    sent: be64(&buf[field::SENT]),
                    hash: hash_at(field::EOB_HASH),
                })
            }
            MsgType::Missing => Control::Missing(parse_missing(buf, h.flags)?),
            MsgType::Done => {
                exact(DONE_LEN)?;
                let mut hash = [0u8; 32];
                hash.copy_from_slice(&buf[field::DONE_HASH]);
                Control::Done(Done {
                    status: DoneStatus::try_from(buf[field::STATUS])?,
                    hash,
                })
            }
            MsgType::Abort => {
                exact(ABORT_LEN)?;
                Control::Abort(Abort {
                    reason: AbortReason::try_from(buf[field::REASON])?,
                })
            }
        };
        Ok(Self {
            session: h.session,
            msg,
        })
    }

    /// Bytes [`emit`](Self::emit) writes.
    pub fn buffer_len(&self) -> usize {
        match &self.msg {
            Control::Start(_) => START_LEN,
            Control::Accept(_) => ACCEPT_LEN,
            Control::EndOfBlast(_) => END_OF_BLAST_LEN,
            Control::Missing(m) => MISSING_HEADER_LEN + m.list.wire_len(),
            Control::Done(_) => DONE_LEN,
            Control::Abort(_) => ABORT_LEN,
        }
    }

    /// Writes the message into `buf`, exactly [`buffer_len`](Self::buffer_len) bytes.
    ///
    /// # Panics
    /// On a wrong buffer size, or a [`Missing`] list longer than
    /// [`MAX_LIST_BYTES`] or not a whole number of entries: local bugs,
    /// not peer input.
    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(buf.len(), self.buffer_len(), "buffer sized by buffer_len");
        buf.fill(0);
        let put = |buf: &mut [u8], at: Range<usize>, v: &[u8]| buf[at].copy_from_slice(v);
        match &self.msg {
            Control::Start(s) => {
                let flags = if s.hash.is_some() { FLAG_HASH } else { 0 }
                    | if s.version.is_some() { FLAG_VERSION } else { 0 };
                emit_header(buf, MsgType::Start, flags, self.session);
                put(buf, field::PACKET_SIZE, &s.packet_size.to_be_bytes());
                put(buf, field::SIZE, &s.size.to_be_bytes());
                put(buf, field::RATE, &s.rate_bps.to_be_bytes());
                put(buf, field::START_HASH, &s.hash.unwrap_or_default());
                put(
                    buf,
                    field::VERSION,
                    &s.version.unwrap_or_default().to_be_bytes(),
                );
            }
            Control::Accept(a) => {
                let flags = if a.resumed { FLAG_RESUMED } else { 0 };
                emit_header(buf, MsgType::Accept, flags, self.session);
                put(buf, field::PACKET_SIZE, &a.packet_size.to_be_bytes());
                put(buf, field::SIZE, &a.size.to_be_bytes());
            }
            Control::EndOfBlast(e) => {
                let flags = if e.hash.is_some() { FLAG_HASH } else { 0 };
                emit_header(buf, MsgType::EndOfBlast, flags, self.session);
                put(buf, field::ROUND, &e.round.to_be_bytes());
                put(buf, field::SENT, &e.sent.to_be_bytes());
                put(buf, field::EOB_HASH, &e.hash.unwrap_or_default());
            }
            Control::Missing(m) => {
                let len = m.list.wire_len();
                assert!(len <= MAX_LIST_BYTES, "missing list chunk too long");
                let (flags, base) = match m.list {
                    MissingList::Ranges { bytes } => {
                        assert_eq!(bytes.len() % RANGE_LEN, 0, "whole range entries");
                        (0, 0)
                    }
                    MissingList::Bitmap { base, .. } => (FLAG_BITMAP, base),
                    MissingList::Gaps { base, .. } => (FLAG_GAPS, base),
                };
                let flags = flags | if m.last { FLAG_LAST } else { 0 };
                emit_header(buf, MsgType::Missing, flags, self.session);
                put(buf, field::ROUND, &m.round.to_be_bytes());
                put(buf, field::SEQ, &m.seq.to_be_bytes());
                put(buf, field::ARRIVED, &m.arrived.to_be_bytes());
                put(buf, field::ARRIVED_BYTES, &m.arrived_bytes.to_be_bytes());
                put(buf, field::SPAN, &m.span_us.to_be_bytes());
                put(buf, field::TOTAL, &m.total.to_be_bytes());
                put(buf, field::BASE, &base.to_be_bytes());
                put(buf, field::COUNT, &m.list.count().to_be_bytes());
                let (MissingList::Ranges { bytes }
                | MissingList::Bitmap { bytes, .. }
                | MissingList::Gaps { bytes, .. }) = m.list;
                buf[MISSING_HEADER_LEN..].copy_from_slice(bytes);
            }
            Control::Done(d) => {
                emit_header(buf, MsgType::Done, 0, self.session);
                buf[field::STATUS] = d.status.into();
                put(buf, field::DONE_HASH, &d.hash);
            }
            Control::Abort(a) => {
                emit_header(buf, MsgType::Abort, 0, self.session);
                buf[field::REASON] = a.reason.into();
            }
        }
    }

    /// The message as a new buffer.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut buf = vec![0u8; self.buffer_len()];
        self.emit(&mut buf);
        buf
    }
}

/// Appends one ranges-list entry (`start`, `len` packets) to `out`.
pub fn push_range(out: &mut Vec<u8>, start: u64, len: u32) {
    out.extend_from_slice(&start.to_be_bytes());
    out.extend_from_slice(&len.to_be_bytes());
}

fn parse_missing(buf: &[u8], flags: u8) -> Result<Missing<'_>, WireError> {
    need(buf, MISSING_HEADER_LEN)?;
    let count = be32(&buf[field::COUNT]);
    let body = &buf[MISSING_HEADER_LEN..];
    if body.len() > MAX_LIST_BYTES {
        return Err(WireError::Malformed("missing list longer than a chunk"));
    }
    if flags & FLAG_BITMAP != 0 && flags & FLAG_GAPS != 0 {
        return Err(WireError::Malformed("a list both bitmap and gap-coded"));
    }
    let list = if flags & FLAG_GAPS != 0 {
        let base = be64(&buf[field::BASE]);
        let (mut at, mut prev) = (0, base);
        for _ in 0..count {
            prev = read_gap_run(body, &mut at, prev)
                .ok_or(WireError::Malformed("gap-coded run cut short or past 2^64"))?
                .end;
        }
        if at != body.len() {
            return Err(WireError::Malformed("gap-coded list longer than its count"));
        }
        MissingList::Gaps {
            base,
            runs: count,
            bytes: body,
        }
    } else if flags & FLAG_BITMAP != 0 {
        let base = be64(&buf[field::BASE]);
        let want = count.div_ceil(8) as usize;
        if body.len() != want {
            return Err(WireError::Malformed(
                "bitmap length does not match its count",
            ));
        }
        if base.checked_add(u64::from(count)).is_none() {
            return Err(WireError::Malformed("bitmap past 2^64 packets"));
        }
        if count % 8 != 0 && body.last().is_some_and(|b| b & (0xff >> (count % 8)) != 0) {
            return Err(WireError::Malformed("bits set past the bitmap's count"));
        }
        MissingList::Bitmap {
            base,
            bits: count,
            bytes: body,
        }
    } else {
        if body.len() != count as usize * RANGE_LEN {
            return Err(WireError::Malformed(
                "ranges length does not match its count",
            ));
        }
        let mut end = 0u64;
        for (i, e) in body.chunks_exact(RANGE_LEN).enumerate() {
            let (start, len) = (be64(&e[..8]), be32(&e[8..]));
            if len == 0 {
                return Err(WireError::Malformed("empty range"));
            }
            if i > 0 && start < end {
                return Err(WireError::Malformed("ranges out of order or overlapping"));
            }
            end = start
                .checked_add(u64::from(len))
                .ok_or(WireError::Malformed("range past 2^64 packets"))?;
        }
        MissingList::Ranges { bytes: body }
    };
    Ok(Missing {
        round: be32(&buf[field::ROUND]),
        seq: be32(&buf[field::SEQ]),
        last: flags & FLAG_LAST != 0,
        arrived: be64(&buf[field::ARRIVED]),
        arrived_bytes: be64(&buf[field::ARRIVED_BYTES]),
        span_us: be64(&buf[field::SPAN]),
        total: be64(&buf[field::TOTAL]),
        list,
    })
}

/// Parses the common header and the type byte, which must be `want`.
fn parse_header(buf: &[u8], want: MsgType) -> Result<header::Repr, WireError> {
    let h = header::Repr::parse_kind(buf, Kind::Blast, "not an RBUDP message")?;
    need(buf, HEADER_LEN + 1)?;
    if MsgType::try_from(buf[field::TYPE])? != want {
        return Err(WireError::Malformed("another RBUDP message type"));
    }
    Ok(h)
}

fn emit_header(buf: &mut [u8], kind: MsgType, flags: u8, session: u32) {
    header::emit_typed(buf, Kind::Blast, kind.into(), flags, session);
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[rustfmt::skip]
    const GOLDEN_DATA: [u8; DATA_HEADER_LEN + 2] = [
        0x01, 0x06, 0x00, 0x00, 0x00, 0x00, 0x00, 0x2a, // header: v1, Blast, session 42
        0x01, 0x00, 0x00, 0x00,                         // Data, reserved
        0x00, 0x00, 0x00, 0x03,                         // round 3
        0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x05, // index 2^32 + 5
        0xbe, 0xef,                                     // payload
    ];

    #[test]
    fn data_golden_bytes_both_ways() {
        let r = DataRepr {
            session: 42,
            round: 3,
            index: (1 << 32) + 5,
            payload: &[0xbe, 0xef],
        };
        assert_eq!(DataRepr::parse(&GOLDEN_DATA), Ok(r));
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut buf);
        assert_eq!(buf, GOLDEN_DATA);
        assert!(DataRepr::parse(&GOLDEN_DATA[..DATA_HEADER_LEN - 1]).is_err());
        assert!(
            ControlRepr::parse(&GOLDEN_DATA).is_err(),
            "data is not control"
        );
    }

    #[rustfmt::skip]
    const GOLDEN_MISSING: [u8; MISSING_HEADER_LEN + 2] = [
        0x01, 0x06, 0x03, 0x00, 0x00, 0x00, 0x00, 0x07, // header: Blast, LAST | BITMAP, session 7
        0x05, 0x00, 0x00, 0x00,                         // Missing
        0x00, 0x00, 0x00, 0x01,                         // round 1
        0x00, 0x00, 0x00, 0x00,                         // chunk 0
        0, 0, 0, 0, 0, 0, 0x03, 0xe8,                   // arrived 1000
        0, 0, 0, 0, 0, 0x16, 0xe3, 0x60,                // 1 500 000 bytes
        0, 0, 0, 0, 0, 0x01, 0x86, 0xa0,                // over 100 000 us
        0, 0, 0, 0, 0, 0, 0, 0x04,                      // 4 missing in all
        0, 0, 0, 0, 0, 0, 0, 0x10,                      // bitmap from packet 16
        0x00, 0x00, 0x00, 0x0c,                         // 12 bits
        0b1000_0011, 0b1000_0000,                       // 16, 22, 23, 24
    ];

    #[test]
    fn missing_bitmap_golden_bytes_and_runs() {
        let r = ControlRepr::parse(&GOLDEN_MISSING).unwrap();
        let Control::Missing(m) = r.msg else {
            panic!("a missing chunk")
        };
        assert_eq!((r.session, m.round, m.seq, m.last), (7, 1, 0, true));
        assert_eq!(
            (m.arrived, m.arrived_bytes, m.span_us, m.total),
            (1000, 1_500_000, 100_000, 4)
        );
        assert_eq!(m.list.runs().collect::<Vec<_>>(), vec![16..17, 22..25]);
        assert_eq!(r.to_vec(), GOLDEN_MISSING);
        // A bit past the count is malformed.
        let mut b = GOLDEN_MISSING;
        b[MISSING_HEADER_LEN + 1] |= 0x01;
        assert!(ControlRepr::parse(&b).is_err());
    }

    /// `list` emitted in a Missing chunk and parsed back: its runs, or why
    /// the parse refused it.
    fn list_through_the_wire(list: MissingList<'_>) -> Result<Vec<Range<u64>>, WireError> {
        let r = ControlRepr {
            session: 1,
            msg: Control::Missing(Missing {
                round: 0,
                seq: 0,
                last: true,
                arrived: 0,
                arrived_bytes: 0,
                span_us: 0,
                total: 0,
                list,
            }),
        };
        match ControlRepr::parse(&r.to_vec())?.msg {
            Control::Missing(m) => Ok(m.list.runs().collect()),
            other => panic!("a missing list, not {other:?}"),
        }
    }

    #[test]
    fn gap_coded_lists_decode_their_runs_and_reject_what_does_not_add_up() {
        let list = |base: u64, runs: u32, bytes: &[u8]| {
            list_through_the_wire(MissingList::Gaps { base, runs, bytes })
        };
        // From 1000: 3 packets on, 1 missing; 200 on (two varint bytes),
        // 2 missing.
        let mut body = Vec::new();
        let mut end = 1000;
        push_gap_run(&mut body, &mut end, 1003, 1);
        push_gap_run(&mut body, &mut end, 1204, 2);
        assert_eq!(body, [3, 0, 0xc8, 0x01, 1]);
        assert_eq!(list(1000, 2, &body), Ok(vec![1003..1004, 1204..1206]));
        // A count that does not match the bytes, a varint cut short, a
        // run past 2^64: malformed.
        assert!(list(1000, 3, &body).is_err());
        assert!(list(1000, 1, &body).is_err());
        assert!(list(1000, 2, &body[..3]).is_err());
        assert!(list(u64::MAX - 1, 1, &[0, 5]).is_err());
        assert!(list(0, 1, &[0xff; 11]).is_err());
    }

    #[test]
    fn ranges_must_be_sorted_disjoint_and_non_empty() {
        let with = |entries: &[(u64, u32)]| {
            let mut body = Vec::new();
            for &(s, l) in entries {
                push_range(&mut body, s, l);
            }
            list_through_the_wire(MissingList::Ranges { bytes: &body })
        };
        assert!(with(&[(0, 3), (3, 1), (10, 5)]).is_ok());
        assert!(with(&[(5, 3), (6, 1)]).is_err(), "overlap");
        assert!(with(&[(5, 3), (1, 1)]).is_err(), "out of order");
        assert!(with(&[(5, 0)]).is_err(), "empty");
        assert!(with(&[(u64::MAX - 1, 2)]).is_err(), "past 2^64");
    }

    #[test]
    fn lengths_types_and_reasons_are_checked() {
        let start = ControlRepr {
            session: 9,
            msg: Control::Start(Start {
                packet_size: 1400,
                size: 50_000_000,
                rate_bps: 90_000_000,
                hash: None,
                version: None,
            }),
        }
        .to_vec();
        assert_eq!(&start[..12], &[1, 6, 0, 0, 0, 0, 0, 9, 2, 0, 0, 0]);
        assert!(ControlRepr::parse(&start).is_ok());
        assert!(ControlRepr::parse(&start[..START_LEN - 1]).is_err());
        let mut long = start.clone();
        long.push(0);
        assert!(ControlRepr::parse(&long).is_err());
        let mut unknown = start.clone();
        unknown[8] = 99;
        assert_eq!(
            ControlRepr::parse(&unknown),
            Err(WireError::UnknownKind(99))
        );
        let abort = ControlRepr {
            session: 9,
            msg: Control::Abort(Abort {
                reason: AbortReason::PeerSilent,
            }),
        };
        let mut b = abort.to_vec();
        assert_eq!(ControlRepr::parse(&b), Ok(abort));
        b[12] = 0;
        assert!(ControlRepr::parse(&b).is_err(), "no reason 0");
        assert!(DataRepr::parse(&start).is_err(), "control is not data");
    }

    fn any_hash() -> impl Strategy<Value = Option<Hash>> {
        proptest::option::of(any::<[u8; 32]>())
    }

    /// A list: bitmap or not, its base, its bytes and its count field.
    /// A list: its form (0 ranges, 1 bitmap, 2 gaps), base, body and count.
    fn any_list() -> impl Strategy<Value = (u8, u64, Vec<u8>, u32)> {
        prop_oneof![
            // Ranges: sorted, disjoint, from gaps and lengths.
            proptest::collection::vec((0u64..1 << 40, 1u32..=u32::MAX), 0..20).prop_map(|v| {
                let mut body = Vec::new();
                let mut at = 0u64;
                for (gap, len) in v {
                    let start = at + gap;
                    push_range(&mut body, start, len);
                    at = start + u64::from(len);
                }
                let count = (body.len() / RANGE_LEN) as u32;
                (0, 0, body, count)
            }),
            // Gaps: the same runs, gap-coded from a base.
            (
                0u64..1 << 40,
                proptest::collection::vec((0u64..1 << 40, 1u64..1 << 33), 0..20)
            )
                .prop_map(|(base, v)| {
                    let mut body = Vec::new();
                    let mut end = base;
                    for (gap, len) in &v {
                        let start = end + gap;
                        push_gap_run(&mut body, &mut end, start, *len);
                    }
                    (2, base, body, v.len() as u32)
                }),
            // Bitmaps: any bytes, the last `cut` bits unused and zero.
            (
                0u64..u64::MAX / 2,
                proptest::collection::vec(any::<u8>(), 1..64),
                0u32..8
            )
                .prop_map(|(base, mut bytes, cut)| {
                    let last = bytes.len() - 1;
                    bytes[last] &= 0xffu8 << cut;
                    let bits = bytes.len() as u32 * 8 - cut;
                    (1, base, bytes, bits)
                }),
        ]
    }

    proptest! {
        #[test]
        fn data_round_trips(session: u32, round: u32, index: u64,
                            payload in proptest::collection::vec(any::<u8>(), 0..64)) {
            let r = DataRepr { session, round, index, payload: &payload };
            let mut buf = vec![0u8; r.buffer_len()];
            r.emit(&mut buf);
            prop_assert_eq!(DataRepr::parse(&buf), Ok(r));
        }

        #[test]
        fn control_round_trips(session: u32, packet_size: u32, size: u64, rate_bps: u64,
                               hash in any_hash(), round: u32, seq: u32, last: bool,
                               arrived: u64, arrived_bytes: u64, span_us: u64, total: u64,
                               (form, base, body, bits) in any_list(), which in 0u8..6,
                               version in proptest::option::of(any::<u64>())) {
            let list = match form {
                0 => MissingList::Ranges { bytes: &body },
                1 => MissingList::Bitmap { base, bits, bytes: &body },
                _ => MissingList::Gaps { base, runs: bits, bytes: &body },
            };
            let msg = match which {
                0 => Control::Start(Start { packet_size, size, rate_bps, hash, version }),
                1 => Control::Accept(Accept { packet_size, size, resumed: last }),
                2 => Control::EndOfBlast(EndOfBlast { round, sent: size, hash }),
                3 => Control::Missing(Missing { round, seq, last, arrived, arrived_bytes, span_us, total, list }),
                4 => Control::Done(Done { status: if last { DoneStatus::Ok } else { DoneStatus::HashMismatch }, hash: hash.unwrap_or_default() }),
                _ => Control::Abort(Abort { reason: AbortReason::try_from((seq % 6) as u8 + 1).expect("reasons 1 to 6") }),
            };
            let r = ControlRepr { session, msg };
            let bytes = r.to_vec();
            prop_assert_eq!(ControlRepr::parse(&bytes), Ok(r));
        }

        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..160),
                                       ty in 1u8..=7) {
            let mut d = data;
            if d.len() >= 9 { d[0] = 1; d[1] = 6; d[8] = ty; }
            let _ = DataRepr::parse(&d);
            if let Ok(r) = ControlRepr::parse(&d) {
                let bytes = r.to_vec();
                prop_assert_eq!(ControlRepr::parse(&bytes), Ok(r));
                if let Control::Missing(m) = r.msg {
                    prop_assert!(m.list.runs().count() <= MAX_LIST_BYTES * 8);
                }
            }
        }
    }
}
