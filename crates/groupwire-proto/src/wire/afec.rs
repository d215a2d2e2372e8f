//! AFEC datagrams (Dyck & Gutwin): awareness data with whole redundant
//! messages piggybacked, and the control packets of its feedback loop.
//!
//! Both follow the common [`header`] (`version`, `kind`,
//! `flags`, `session`). All fields are big-endian.
//!
//! # Data packet (`kind` = [`Kind::AfecData`])
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  common header: version=1, kind=1, flags, reserved, session   |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                       sender (user) id                        |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                    packet sequence number                     |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |          send timestamp (microseconds, low 32 bits)           |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! | message count |   reserved    |  message 1 (newest) ...
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//!
//! each message:
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |      message type code        |     message index (per type)  |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |    ... index (low half)       |        age (milliseconds)     |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |        payload length         |  payload ...                  |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! - Messages are whole and in their original form (§"AFEC for groupware":
//!   "redundant messages are included in their entirety and in their
//!   original form"), newest first: the new message, then the redundant
//!   ones going back in time. The receiver processes them oldest first.
//! - The type code is two bytes, by convention two ASCII characters such
//!   as `TP` for telepointer (the paper's "two-character message type code
//!   that precedes the index number"). The index counts messages of that
//!   type from this sender.
//! - `age` is how long ago the sender first sent the message, in
//!   milliseconds (saturating at 65535), so the receiver can time recovered
//!   messages from their first transmission.
//! - `flags` bit 0 ([`FLAG_FLUSH`]): the packet carries no new message, only
//!   redundancy (the end-of-cluster flush).
//! - The timestamp is the low 32 bits of the sender's clock in
//!   microseconds; a receiver that shares the sender's clock (the simulator,
//!   loopback) widens it against its own clock.
//!
//! # Control packet (`kind` = [`Kind::AfecControl`])
//!
//! ```text
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  common header: version=1, kind=2, flags, reserved, session   |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                       sender (user) id                        |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  entry count  |   reserved    |  entries, 10 bytes each ...
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//!
//! each entry:
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |      op       |   reserved    |      message type code        |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                       request sequence                        |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |   value (code set size x100)  |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! Ops ([`Op`]): `NAK` and `INC` (receiver to sender) carry the code set
//! size the receiver asks for; `CANNOT_MEET` (sender to receiver) the
//! largest size the sender can deliver; `ACK` acknowledges the entry with
//! that sequence number. Requests carry absolute sizes, not "one more", so
//! a repeated or reordered entry is harmless: the highest sequence wins.
//!
//! Parsing never panics and never allocates more than the datagram holds:
//! counts are checked against the bytes present before anything is read.
//!
//! # RTP/RED framing (the standard alternative)
//!
//! The compact format above is the default. An endpoint set to
//! [`Framing::Red`](crate::afec::Framing::Red) sends the same packets as
//! RTP (RFC 3550) with the RFC 2198 redundancy payload ([`red`](super::red)),
//! so a stock RED decoder (GStreamer's `rtpreddec`) recovers the messages:
//!
//! | native field | RTP/RED |
//! |---|---|
//! | sender (user) id | SSRC |
//! | new message | the primary block; RTP timestamp = when the message was sampled, sequence number = one per new message |
//! | redundant messages, newest first | redundant blocks, oldest first, timestamp offset = how much earlier each was sampled |
//! | message type code | the block's payload type, through a table both ends share ([`RedConfig`](crate::afec::RedConfig), as SDP would carry) |
//! | per-type message index | not carried: the receiver numbers messages by RTP sequence number, and places a recovered one by its timestamp between the messages it has (exact for one loss in a row and for regular timing, a nearby slot otherwise; the count of losses stays exact) |
//! | age (ms) | the timestamp offset, in ticks of the RTP clock ([`RedConfig::clock_rate`](crate::afec::RedConfig::clock_rate), 1 kHz by default: 14 bits reach 16.4 s) |
//! | session | not carried: the SSRC and the port tell streams apart |
//! | flush flag | not carried: a flush re-sends the newest packet, same sequence number and timestamp, with the redundancy still owed (a receiver that drops duplicate sequence numbers before RED decoding loses only that extra redundancy) |
//! | control packet (NAK, INC, cannot-meet, ACK) | an RTCP compound: an empty receiver report, then an APP packet named `GWAF` whose data is this format's control body ([`ControlRepr::emit_rtcp`]) |
//!
//! What RTP/RED cannot carry, and what groupwire does about it:
//!
//! - **Per-type MER.** A message lost for good takes its payload type with
//!   it, so an RTP/RED receiver cannot tell which type it was: it measures
//!   one MER per stream (per SSRC), and its NAK/INC name the wildcard type
//!   [`MsgType::ANY`], which the sender applies to every type it sends to
//!   that peer. Streams that need different bands per type use the native
//!   format (or one endpoint per type).
//! - **Control feedback.** RFC 2198 is a payload format; RTCP has no
//!   standard packet for "more" or "less redundancy" (RFC 4585's generic
//!   NACK asks for retransmission of given sequence numbers, which is not
//!   what NAK means here). The entries ride in an RTCP APP packet (RFC 3550
//!   §6.7, the standard's place for application feedback) on the data's
//!   own port, multiplexed the RFC 5761 way, so they cross the same NATs
//!   and firewalls as the data and stock RTP tools skip them.
//! - **Lengths.** A redundant block is at most 1023 bytes and at most
//!   16383 clock ticks older than the primary; copies beyond either are
//!   dropped from the history and counted
//!   ([`AfecStats::red_uncarriable`](crate::afec::AfecStats::red_uncarriable)).

use super::header::{self, HEADER_LEN, Kind};
use super::rtcp;
use super::{WireError, be16, be32};

mod field {
    use core::ops::Range;
    pub(super) const SENDER: Range<usize> = 0..4;
    pub(super) const SEQ: Range<usize> = 4..8;
    pub(super) const TIMESTAMP: Range<usize> = 8..12;
    pub(super) const COUNT: usize = 12;
    pub(super) const MESSAGES: usize = 14;

    pub(super) const MSG_TYPE: Range<usize> = 0..2;
    pub(super) const MSG_INDEX: Range<usize> = 2..6;
    pub(super) const MSG_AGE: Range<usize> = 6..8;
    pub(super) const MSG_LEN: Range<usize> = 8..10;
    pub(super) const MSG_PAYLOAD: usize = 10;

    pub(super) const CTL_COUNT: usize = 4;
    pub(super) const CTL_ENTRIES: usize = 6;

    pub(super) const ENTRY_OP: usize = 0;
    pub(super) const ENTRY_TYPE: Range<usize> = 2..4;
    pub(super) const ENTRY_SEQ: Range<usize> = 4..8;
    pub(super) const ENTRY_VALUE: Range<usize> = 8..10;
}

/// Bytes of a data packet before its first message, common header included.
pub const DATA_HEADER_LEN: usize = HEADER_LEN + field::MESSAGES;
/// Bytes of a message before its payload.
pub const MESSAGE_HEADER_LEN: usize = field::MSG_PAYLOAD;
/// Bytes of a control packet before its first entry, common header included.
pub const CONTROL_HEADER_LEN: usize = HEADER_LEN + field::CTL_ENTRIES;
/// Bytes of one control entry.
pub const ENTRY_LEN: usize = 10;
/// Most messages in one data packet (the count is one byte).
pub const MAX_MESSAGES: usize = u8::MAX as usize;
/// Most entries in one control packet (the count is one byte).
pub const MAX_ENTRIES: usize = u8::MAX as usize;
/// Name of the RTCP APP packet that carries control entries in RTP/RED framing.
pub const RTCP_APP_NAME: [u8; 4] = *b"GWAF";
/// Subtype of that APP packet.
pub const RTCP_APP_SUBTYPE: u8 = 0;
/// Header flag: no new message, redundancy only (end-of-cluster flush).
pub const FLAG_FLUSH: u8 = 0x01;

/// A message type code, conventionally two ASCII characters (`*b"TP"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct MsgType(pub u16);

impl MsgType {
    /// Every type of a sender: in RTP/RED framing a receiver cannot tell
    /// the type of a message lost for good, so it measures one MER per
    /// stream under this type, and a NAK or INC naming it applies to every
    /// type the sender sends (see the [module docs](self)). Reserved: do
    /// not send messages of this type.
    pub const ANY: Self = Self::new(*b"**");

    /// The type named by two ASCII characters, e.g. `MsgType::new(*b"TP")`.
    pub const fn new(code: [u8; 2]) -> Self {
        Self(u16::from_be_bytes(code))
    }
}

impl core::fmt::Display for MsgType {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let [a, b] = self.0.to_be_bytes();
        if a.is_ascii_graphic() && b.is_ascii_graphic() {
            write!(f, "{}{}", a as char, b as char)
        } else {
            write!(f, "#{:04x}", self.0)
        }
    }
}

/// One message inside a data packet, borrowing its payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MessageRepr<'a> {
    /// Message type.
    pub msg_type: MsgType,
    /// Index of the message among its sender's messages of this type.
    pub index: u32,
    /// Milliseconds since the sender first sent it (saturating).
    pub age_ms: u16,
    /// The message, whole.
    pub payload: &'a [u8],
}

impl MessageRepr<'_> {
    /// Bytes this message takes in a packet.
    pub const fn buffer_len(&self) -> usize {
        MESSAGE_HEADER_LEN + self.payload.len()
    }
}

/// A parsed data packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataRepr<'a> {
    /// The common header's session.
    pub session: u32,
    /// The sending user.
    pub sender: u32,
    /// Packet sequence number.
    pub seq: u32,
    /// Low 32 bits of the sender's clock, microseconds.
    pub timestamp: u32,
    /// Redundancy only: the first message is not new.
    pub flush: bool,
    /// Newest first. At most [`MAX_MESSAGES`].
    pub messages: Vec<MessageRepr<'a>>,
}

super::buffer_view! {
    /// A view of a data packet in a buffer. Its messages, past the fixed
    /// header, are checked one by one by [`messages`](Self::messages).
    pub struct DataPacket, fixed part DATA_HEADER_LEN
}

impl<T: AsRef<[u8]>> DataPacket<T> {
    fn body(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }

    /// The sending user.
    pub fn sender(&self) -> u32 {
        be32(&self.body()[field::SENDER])
    }

    /// The packet sequence number.
    pub fn seq(&self) -> u32 {
        be32(&self.body()[field::SEQ])
    }

    /// Low 32 bits of the sender's clock in microseconds.
    pub fn timestamp(&self) -> u32 {
        be32(&self.body()[field::TIMESTAMP])
    }

    /// Number of messages the packet claims to hold.
    pub fn count(&self) -> u8 {
        self.body()[field::COUNT]
    }

    /// The messages, newest first; each item is checked against the bytes
    /// present, and the first malformed one ends the iteration with `Err`.
    pub fn messages(&self) -> Messages<'_> {
        Messages {
            rest: &self.body()[field::MESSAGES..],
            left: self.count(),
        }
    }
}

/// Iterator over the messages of a data packet; see [`DataPacket::messages`].
#[derive(Debug, Clone)]
pub struct Messages<'a> {
    rest: &'a [u8],
    left: u8,
}

impl<'a> Iterator for Messages<'a> {
    type Item = Result<MessageRepr<'a>, WireError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let b = self.rest;
        if b.len() < MESSAGE_HEADER_LEN {
            self.left = 0;
            return Some(Err(WireError::Truncated {
                needed: MESSAGE_HEADER_LEN,
                got: b.len(),
            }));
        }
        let len = usize::from(be16(&b[field::MSG_LEN]));
        let end = MESSAGE_HEADER_LEN + len;
        if b.len() < end {
            self.left = 0;
            return Some(Err(WireError::Truncated {
                needed: end,
                got: b.len(),
            }));
        }
        self.rest = &b[end..];
        Some(Ok(MessageRepr {
            msg_type: MsgType(be16(&b[field::MSG_TYPE])),
            index: be32(&b[field::MSG_INDEX]),
            age_ms: be16(&b[field::MSG_AGE]),
            payload: &b[MESSAGE_HEADER_LEN..end],
        }))
    }
}

impl<'a> DataRepr<'a> {
    /// Parses a whole data packet. Never panics. Rejects a wrong version or
    /// kind, a count larger than the messages present, and trailing bytes.
    pub fn parse(buf: &'a [u8]) -> Result<Self, WireError> {
        let h = header::Repr::parse_kind(buf, Kind::AfecData, "not an AFEC data packet")?;
        let p = DataPacket::new_checked(buf)?;
        // Each message takes at least MESSAGE_HEADER_LEN bytes, so the count
        // is bounded by the datagram before anything is allocated.
        let room = (buf.len() - DATA_HEADER_LEN) / MESSAGE_HEADER_LEN;
        if usize::from(p.count()) > room {
            return Err(WireError::Malformed("message count exceeds the datagram"));
        }
        let mut messages = Vec::with_capacity(usize::from(p.count()));
        let mut it = Messages {
            rest: &buf[DATA_HEADER_LEN..],
            left: p.count(),
        };
        for m in &mut it {
            messages.push(m?);
        }
        if !it.rest.is_empty() {
            return Err(WireError::Malformed("bytes after the last message"));
        }
        Ok(Self {
            session: h.session,
            sender: p.sender(),
            seq: p.seq(),
            timestamp: p.timestamp(),
            flush: h.flags & FLAG_FLUSH != 0,
            messages,
        })
    }

    /// Bytes [`emit`](Self::emit) writes.
    pub fn buffer_len(&self) -> usize {
        DATA_HEADER_LEN
            + self
                .messages
                .iter()
                .map(MessageRepr::buffer_len)
                .sum::<usize>()
    }

    /// Writes the packet into `buf`, which must be exactly
    /// [`buffer_len`](Self::buffer_len) bytes.
    ///
    /// # Panics
    /// On a wrong buffer size, more than [`MAX_MESSAGES`] messages or a
    /// payload over 65535 bytes: local sizing bugs, not peer input.
    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(buf.len(), self.buffer_len(), "buffer sized by buffer_len");
        let count = u8::try_from(self.messages.len()).expect("at most 255 messages per packet");
        let mut w = DataWriter::start(buf, self.session, self.sender, self.seq, self.timestamp);
        for m in &self.messages {
            w.push(m);
        }
        debug_assert_eq!(w.count, count);
        w.finish(self.flush);
    }
}

/// Writes a data packet message by message, for senders that decide what
/// fits as they go.
#[derive(Debug)]
pub struct DataWriter<'b> {
    buf: &'b mut [u8],
    len: usize,
    count: u8,
}

impl<'b> DataWriter<'b> {
    /// Starts a packet in `buf` (at least [`DATA_HEADER_LEN`] bytes).
    ///
    /// # Panics
    /// If `buf` is shorter than [`DATA_HEADER_LEN`].
    pub fn start(buf: &'b mut [u8], session: u32, sender: u32, seq: u32, timestamp: u32) -> Self {
        header::Repr {
            kind: Kind::AfecData,
            flags: 0,
            session,
        }
        .emit(&mut header::Packet::new_unchecked(&mut *buf));
        let body = &mut buf[HEADER_LEN..];
        body[field::SENDER].copy_from_slice(&sender.to_be_bytes());
        body[field::SEQ].copy_from_slice(&seq.to_be_bytes());
        body[field::TIMESTAMP].copy_from_slice(&timestamp.to_be_bytes());
        body[field::COUNT] = 0;
        body[field::COUNT + 1] = 0;
        Self {
            buf,
            len: DATA_HEADER_LEN,
            count: 0,
        }
    }

    /// Whether a message with `payload_len` bytes still fits.
    pub fn fits(&self, payload_len: usize) -> bool {
        usize::from(self.count) < MAX_MESSAGES
            && self.len + MESSAGE_HEADER_LEN + payload_len <= self.buf.len()
    }

    /// Appends a message.
    ///
    /// # Panics
    /// If it does not [`fit`](Self::fits) or the payload exceeds 65535 bytes.
    pub fn push(&mut self, m: &MessageRepr<'_>) {
        assert!(self.fits(m.payload.len()), "caller checks fits()");
        let len = u16::try_from(m.payload.len()).expect("payloads are at most 65535 bytes");
        let b = &mut self.buf[self.len..];
        b[field::MSG_TYPE].copy_from_slice(&m.msg_type.0.to_be_bytes());
        b[field::MSG_INDEX].copy_from_slice(&m.index.to_be_bytes());
        b[field::MSG_AGE].copy_from_slice(&m.age_ms.to_be_bytes());
        b[field::MSG_LEN].copy_from_slice(&len.to_be_bytes());
        b[MESSAGE_HEADER_LEN..MESSAGE_HEADER_LEN + m.payload.len()].copy_from_slice(m.payload);
        self.len += m.buffer_len();
        self.count += 1;
    }

    /// Messages written so far.
    pub fn count(&self) -> usize {
        usize::from(self.count)
    }

    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no message has been written.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Sets the count and flags; returns the packet's length.
    pub fn finish(self, flush: bool) -> usize {
        self.buf[HEADER_LEN + field::COUNT] = self.count;
        let mut p = header::Packet::new_unchecked(&mut *self.buf);
        p.set_flags(if flush { FLAG_FLUSH } else { 0 });
        self.len
    }
}

crate::wire_enum! {
    /// What a control entry says.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    #[non_exhaustive]
    pub enum Op: WireError = (WireError::UnknownKind) {
        /// Receiver to sender: MER above the band; use the code set size in `value`.
        Nak = 1,
        /// Receiver to sender: MER below the band; use the code set size in `value`.
        Inc = 2,
        /// Sender to receiver: the requested redundancy does not fit; `value` is
        /// the largest code set size the sender can deliver.
        CannotMeet = 3,
        /// Acknowledges the entry whose sequence is `seq`.
        Ack = 4,
    }
}

/// One control entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Entry {
    /// What it says.
    pub op: Op,
    /// The message type it is about (zero for `Ack`).
    pub msg_type: MsgType,
    /// Request sequence (for `Ack`: the sequence acknowledged).
    pub seq: u32,
    /// Code set size ×100 (zero for `Ack`).
    pub value: u16,
}

/// A parsed control packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControlRepr {
    /// The common header's session.
    pub session: u32,
    /// The user who sent it.
    pub sender: u32,
    /// At most [`MAX_ENTRIES`].
    pub entries: Vec<Entry>,
}

impl ControlRepr {
    /// Parses a control packet. Never panics; unknown ops are an error for
    /// the whole packet (a newer peer should bump the version).
    pub fn parse(buf: &[u8]) -> Result<Self, WireError> {
        let h = header::Repr::parse_kind(buf, Kind::AfecControl, "not an AFEC control packet")?;
        super::need(buf, CONTROL_HEADER_LEN)?;
        let body = &buf[HEADER_LEN..];
        let count = usize::from(body[field::CTL_COUNT]);
        let needed = CONTROL_HEADER_LEN + count * ENTRY_LEN;
        if buf.len() != needed {
            return Err(if buf.len() < needed {
                WireError::Truncated {
                    needed,
                    got: buf.len(),
                }
            } else {
                WireError::Malformed("bytes after the last control entry")
            });
        }
        let entries = body[field::CTL_ENTRIES..]
            .chunks_exact(ENTRY_LEN)
            .map(read_entry)
            .collect::<Result<Vec<_>, WireError>>()?;
        Ok(Self {
            session: h.session,
            sender: be32(&body[field::SENDER]),
            entries,
        })
    }

    /// Bytes [`emit`](Self::emit) writes.
    pub fn buffer_len(&self) -> usize {
        Self::wire_len(self.entries.len())
    }

    /// Bytes of a control packet with `entries` entries.
    pub fn wire_len(entries: usize) -> usize {
        CONTROL_HEADER_LEN + entries * ENTRY_LEN
    }

    /// Bytes of the RTCP form ([`emit_rtcp`](Self::emit_rtcp)) with `entries` entries.
    pub fn rtcp_len(entries: usize) -> usize {
        rtcp::EMPTY_RR_LEN + rtcp::APP_HEADER_LEN + app_data_len(entries)
    }

    /// Writes the RTCP form into `buf` of exactly
    /// [`rtcp_len`](Self::rtcp_len) bytes: a compound of an empty receiver
    /// report and an APP packet named [`RTCP_APP_NAME`], both with SSRC
    /// `sender`, whose data is this packet's body after the sender id
    /// (count, reserved byte, entries) zero-padded to 32 bits. `session`
    /// is not carried (see the [module docs](self)).
    ///
    /// # Panics
    /// On a wrong buffer size or more than [`MAX_ENTRIES`] entries (local bugs).
    pub fn emit_rtcp(&self, buf: &mut [u8]) {
        assert_eq!(
            buf.len(),
            Self::rtcp_len(self.entries.len()),
            "buffer sized by rtcp_len"
        );
        let count = u8::try_from(self.entries.len()).expect("at most 255 control entries");
        let (rr, app) = buf.split_at_mut(rtcp::EMPTY_RR_LEN);
        rtcp::emit_empty_rr(self.sender, rr);
        let mut data = vec![0u8; app_data_len(self.entries.len())];
        data[0] = count;
        for (e, out) in self
            .entries
            .iter()
            .zip(data[2..].chunks_exact_mut(ENTRY_LEN))
        {
            write_entry(e, out);
        }
        rtcp::App {
            subtype: RTCP_APP_SUBTYPE,
            ssrc: self.sender,
            name: RTCP_APP_NAME,
            data: &data,
        }
        .emit(app);
    }

    /// Reads the RTCP form: the first APP packet named [`RTCP_APP_NAME`]
    /// in compound `buf`. `Ok(None)` for well-formed RTCP without one
    /// (another application's, or plain reports). `session` reads as 0.
    /// Never panics; a compound that does not walk, or an AFEC APP packet
    /// whose count disagrees with its length, is an error.
    pub fn parse_rtcp(buf: &[u8]) -> Result<Option<Self>, WireError> {
        for p in rtcp::packets(buf) {
            let p = p?;
            if p.packet_type != rtcp::PT_APP {
                continue;
            }
            let app = rtcp::App::parse(&p)?;
            if app.name != RTCP_APP_NAME || app.subtype != RTCP_APP_SUBTYPE {
                continue;
            }
            let count = usize::from(*app.data.first().ok_or(WireError::Truncated {
                needed: rtcp::APP_HEADER_LEN + 2,
                got: rtcp::APP_HEADER_LEN,
            })?);
            if app.data.len() != app_data_len(count) {
                return Err(WireError::Malformed(
                    "AFEC APP data length disagrees with its entry count",
                ));
            }
            let entries = app.data[2..2 + count * ENTRY_LEN]
                .chunks_exact(ENTRY_LEN)
                .map(read_entry)
                .collect::<Result<Vec<_>, WireError>>()?;
            return Ok(Some(Self {
                session: 0,
                sender: app.ssrc,
                entries,
            }));
        }
        Ok(None)
    }

    /// Writes the packet into `buf` of exactly [`buffer_len`](Self::buffer_len) bytes.
    ///
    /// # Panics
    /// On a wrong buffer size or more than [`MAX_ENTRIES`] entries (local bugs).
    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(buf.len(), self.buffer_len(), "buffer sized by buffer_len");
        let count = u8::try_from(self.entries.len()).expect("at most 255 control entries");
        header::Repr {
            kind: Kind::AfecControl,
            flags: 0,
            session: self.session,
        }
        .emit(&mut header::Packet::new_unchecked(&mut *buf));
        let body = &mut buf[HEADER_LEN..];
        body[field::SENDER].copy_from_slice(&self.sender.to_be_bytes());
        body[field::CTL_COUNT] = count;
        body[field::CTL_COUNT + 1] = 0;
        for (e, out) in self
            .entries
            .iter()
            .zip(body[field::CTL_ENTRIES..].chunks_exact_mut(ENTRY_LEN))
        {
            write_entry(e, out);
        }
    }
}

/// Bytes of the APP data for `entries` entries: count, reserved, entries,
/// zero padding to a whole number of 32-bit words.
fn app_data_len(entries: usize) -> usize {
    (2 + entries * ENTRY_LEN).div_ceil(4) * 4
}

fn read_entry(e: &[u8]) -> Result<Entry, WireError> {
    Ok(Entry {
        op: Op::try_from(e[field::ENTRY_OP])?,
        msg_type: MsgType(be16(&e[field::ENTRY_TYPE])),
        seq: be32(&e[field::ENTRY_SEQ]),
        value: be16(&e[field::ENTRY_VALUE]),
    })
}

fn write_entry(e: &Entry, out: &mut [u8]) {
    out[field::ENTRY_OP] = e.op as u8;
    out[field::ENTRY_OP + 1] = 0;
    out[field::ENTRY_TYPE].copy_from_slice(&e.msg_type.0.to_be_bytes());
    out[field::ENTRY_SEQ].copy_from_slice(&e.seq.to_be_bytes());
    out[field::ENTRY_VALUE].copy_from_slice(&e.value.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const TP: MsgType = MsgType::new(*b"TP");

    #[rustfmt::skip]
    const GOLDEN_DATA: [u8; 8 + 14 + 12 + 11] = [
        0x01, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x07, // header: v1, AfecData, session 7
        0x00, 0x00, 0x00, 0x2a,                         // sender 42
        0x00, 0x00, 0x01, 0x00,                         // seq 256
        0x00, 0x0f, 0x42, 0x40,                         // timestamp 1_000_000 us
        0x02, 0x00,                                     // 2 messages
        b'T', b'P', 0x00, 0x00, 0x00, 0x1b, 0x00, 0x00, 0x00, 0x02, 0xaa, 0xbb, // TP #27, age 0, "aabb"
        b'T', b'P', 0x00, 0x00, 0x00, 0x1a, 0x00, 0x21, 0x00, 0x01, 0xcc,       // TP #26, age 33 ms, "cc"
    ];

    fn golden_repr() -> DataRepr<'static> {
        DataRepr {
            session: 7,
            sender: 42,
            seq: 256,
            timestamp: 1_000_000,
            flush: false,
            messages: vec![
                MessageRepr {
                    msg_type: TP,
                    index: 27,
                    age_ms: 0,
                    payload: &[0xaa, 0xbb],
                },
                MessageRepr {
                    msg_type: TP,
                    index: 26,
                    age_ms: 33,
                    payload: &[0xcc],
                },
            ],
        }
    }

    #[test]
    fn data_golden_bytes_both_ways() {
        assert_eq!(DataRepr::parse(&GOLDEN_DATA).unwrap(), golden_repr());
        let r = golden_repr();
        let mut buf = vec![0xffu8; r.buffer_len()];
        r.emit(&mut buf);
        assert_eq!(buf, GOLDEN_DATA);
    }

    #[test]
    fn control_golden_bytes_both_ways() {
        #[rustfmt::skip]
        let golden: [u8; 8 + 6 + 10] = [
            0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x07,
            0x00, 0x00, 0x00, 0x05, 0x01, 0x00,
            0x01, 0x00, b'T', b'P', 0x00, 0x00, 0x00, 0x03, 0x01, 0x2c, // NAK TP seq 3, size 3.00
        ];
        let r = ControlRepr {
            session: 7,
            sender: 5,
            entries: vec![Entry {
                op: Op::Nak,
                msg_type: TP,
                seq: 3,
                value: 300,
            }],
        };
        assert_eq!(ControlRepr::parse(&golden).unwrap(), r);
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut buf);
        assert_eq!(buf, golden);
    }

    #[test]
    fn control_rtcp_golden_bytes_both_ways() {
        #[rustfmt::skip]
        let golden: [u8; 8 + 12 + 12] = [
            0x80, 201, 0x00, 0x01, 0x00, 0x00, 0x00, 0x05, // RR, no blocks, SSRC 5
            0x80, 204, 0x00, 0x05, 0x00, 0x00, 0x00, 0x05, // APP subtype 0, 6 words, SSRC 5
            b'G', b'W', b'A', b'F',
            0x01, 0x00,                                     // one entry
            0x01, 0x00, b'*', b'*', 0x00, 0x00, 0x00, 0x03, 0x01, 0x2c, // NAK ** seq 3, size 3.00
        ];
        let r = ControlRepr {
            session: 0,
            sender: 5,
            entries: vec![Entry {
                op: Op::Nak,
                msg_type: MsgType::ANY,
                seq: 3,
                value: 300,
            }],
        };
        assert_eq!(ControlRepr::rtcp_len(1), golden.len());
        assert_eq!(ControlRepr::parse_rtcp(&golden), Ok(Some(r.clone())));
        let mut buf = vec![0xffu8; golden.len()];
        r.emit_rtcp(&mut buf);
        assert_eq!(buf, golden);
        // Plain RTCP without AFEC feedback is no error, and no feedback.
        assert_eq!(ControlRepr::parse_rtcp(&golden[..8]), Ok(None));
        // A count that disagrees with the APP length is.
        let mut lie = golden;
        lie[20] = 2;
        assert!(ControlRepr::parse_rtcp(&lie).is_err());
    }

    #[test]
    fn rejects_lying_counts_and_lengths() {
        let mut b = GOLDEN_DATA;
        b[HEADER_LEN + field::COUNT] = 3;
        assert!(DataRepr::parse(&b).is_err());
        let mut b = GOLDEN_DATA;
        b[HEADER_LEN + field::COUNT] = 1; // one message, then trailing bytes
        assert_eq!(
            DataRepr::parse(&b),
            Err(WireError::Malformed("bytes after the last message"))
        );
        let mut b = GOLDEN_DATA;
        b[HEADER_LEN + field::COUNT] = 200; // more than the bytes could hold
        assert_eq!(
            DataRepr::parse(&b),
            Err(WireError::Malformed("message count exceeds the datagram"))
        );
        let mut b = GOLDEN_DATA;
        b[DATA_HEADER_LEN + 8] = 0xff; // first payload length 65280+
        assert!(matches!(
            DataRepr::parse(&b),
            Err(WireError::Truncated { .. })
        ));
        let mut long = GOLDEN_DATA.to_vec();
        long.push(0);
        assert!(DataRepr::parse(&long).is_err());
        assert!(DataRepr::parse(&GOLDEN_DATA[..DATA_HEADER_LEN - 1]).is_err());
        let mut wrong_kind = GOLDEN_DATA;
        wrong_kind[1] = 2;
        assert!(DataRepr::parse(&wrong_kind).is_err());
    }

    #[test]
    fn writer_stops_at_the_mtu() {
        let mut buf = [0u8; DATA_HEADER_LEN + 2 * (MESSAGE_HEADER_LEN + 40)];
        let mut w = DataWriter::start(&mut buf, 1, 2, 3, 4);
        let payload = [7u8; 40];
        let m = MessageRepr {
            msg_type: TP,
            index: 0,
            age_ms: 0,
            payload: &payload,
        };
        assert!(w.fits(40));
        w.push(&m);
        w.push(&m);
        assert!(!w.fits(40) && !w.fits(0));
        let n = w.finish(true);
        let r = DataRepr::parse(&buf[..n]).unwrap();
        assert!(r.flush);
        assert_eq!(r.messages.len(), 2);
    }

    fn any_type() -> impl Strategy<Value = MsgType> {
        any::<u16>().prop_map(MsgType)
    }

    fn any_op() -> impl Strategy<Value = Op> {
        (1u8..=4).prop_map(|o| Op::try_from(o).expect("1..=4 are ops"))
    }

    proptest! {
        #[test]
        fn data_round_trips(
            session: u32, sender: u32, seq: u32, timestamp: u32, flush: bool,
            msgs in proptest::collection::vec((any_type(), any::<u32>(), any::<u16>(),
                proptest::collection::vec(any::<u8>(), 0..64)), 0..20),
        ) {
            let messages = msgs.iter().map(|(t, i, a, p)| MessageRepr { msg_type: *t, index: *i, age_ms: *a, payload: p }).collect();
            let r = DataRepr { session, sender, seq, timestamp, flush, messages };
            let mut buf = vec![0u8; r.buffer_len()];
            r.emit(&mut buf);
            prop_assert_eq!(DataRepr::parse(&buf), Ok(r));
        }

        #[test]
        fn control_round_trips(
            session: u32, sender: u32,
            entries in proptest::collection::vec((any_op(), any_type(), any::<u32>(), any::<u16>()), 0..30),
        ) {
            let entries = entries.into_iter().map(|(op, msg_type, seq, value)| Entry { op, msg_type, seq, value }).collect();
            let r = ControlRepr { session, sender, entries };
            let mut buf = vec![0u8; r.buffer_len()];
            r.emit(&mut buf);
            prop_assert_eq!(ControlRepr::parse(&buf), Ok(r));
        }

        #[test]
        fn control_rtcp_round_trips(
            sender: u32,
            entries in proptest::collection::vec((any_op(), any_type(), any::<u32>(), any::<u16>()), 0..30),
        ) {
            let entries = entries.into_iter().map(|(op, msg_type, seq, value)| Entry { op, msg_type, seq, value }).collect();
            let r = ControlRepr { session: 0, sender, entries };
            let mut buf = vec![0u8; ControlRepr::rtcp_len(r.entries.len())];
            r.emit_rtcp(&mut buf);
            prop_assert!(rtcp::is_rtcp(&buf));
            prop_assert_eq!(ControlRepr::parse_rtcp(&buf), Ok(Some(r)));
        }

        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..300), kind in 1u8..=2) {
            let mut data = data;
            if data.len() >= 2 {
                data[0] = 1;
                data[1] = kind;
            }
            let _ = DataRepr::parse(&data);
            let _ = ControlRepr::parse(&data);
            if let Ok(p) = DataPacket::new_checked(&data[..]) {
                for m in p.messages() {
                    let _ = m;
                }
            }
        }
    }
}
