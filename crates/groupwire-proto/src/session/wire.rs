//! The session's datagram and stream-frame formats.
//!
//! Every datagram between two session endpoints starts with this header
//! (then, with a key, the whole datagram is sealed by
//! [`tunnel::seal`](crate::tunnel::seal), which authenticates all of it):
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |        magic 0x6757 "gW"      |   version     |     kind      |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |          destination connection id (the receiver's)           |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |             packet number (per peer, every datagram)          |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                 send time (sender's clock, µs)                |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                         body (by kind)                        |
//! ```
//!
//! The packet number and send time feed the resource monitor at the peer
//! (loss, loss runs, jitter and, echoed back, the round trip), whatever
//! channel or mechanism the datagram belongs to.
//!
//! Bodies:
//!
//! | kind | body |
//! |---|---|
//! | 1 Hello | source cid (4), lowest version (1), highest version (1), zero padding to [`HELLO_LEN`] |
//! | 2 HelloAck | source cid (4), echoed initiator cid (4), chosen version (1) |
//! | 3 Data | channel (2: top bit [`PEER_OWNED`]), mechanism (1), the mechanism's own packet |
//! | 4 Open | channel (2), name length (1), name (UTF-8, at most [`MAX_NAME`]) |
//! | 5 OpenAck | channel (2) |
//! | 6 Report | the resource monitor's report |
//! | 7 Probe | nothing |
//! | 8 Close | reason (1) |
//! | 9 ChannelReport | per channel the sender sends on: channel (2), highest message number seen (4), messages delivered (4, cumulative); at most [`MAX_CHANNEL_REPORTS`] |
//!
//! **Address validation, QUIC-style** (RFC 9000 §8.1): a Hello must be
//! padded to [`HELLO_LEN`] bytes and the HelloAck is shorter, so an
//! endpoint never sends more toward an address than that address sent it
//! before the address is proven; it is proven when a packet comes back
//! carrying the connection id we chose at random, which only a receiver of
//! our HelloAck knows. Until then nothing else is sent to it and nothing it
//! sends reaches the application.
//!
//! **Channels** are numbered by the side that sends on them: a data packet
//! about a channel the *receiver* sends on (feedback: block-FEC reports,
//! AFEC's NAK/INC) sets the top bit [`PEER_OWNED`] of the channel field.
//!
//! **Stream frames** (reliable channels, over the TCP connection the driver
//! keeps to the peer; each frame length-prefixed by the driver, sealed
//! like a datagram under a key): destination cid (4), channel (2), message
//! number (4), the message. A frame whose channel is [`BIND_CHANNEL`]
//! carries no message: as the first frame on a connection the driver
//! opened, it names the stream's sender and, in its one-byte payload, the
//! stream's number (none: stream 0); on a bound stream, a payload `[k]`
//! asks the side that dialed to open stream `k`, and an empty one (its
//! answer, on stream `k`) carries nothing. A frame whose channel field has the top bit
//! [`CONTROL_FRAME`] set (and is not [`BIND_CHANNEL`]) carries a
//! mechanism's control message instead of an application's, in the same
//! ten bytes ([`ControlFrame`]): destination cid (4), `CONTROL_FRAME |
//! channel` (2), mechanism (1), owner (1: 1 when the channel is the
//! frame's receiver's, as [`PEER_OWNED`] in a datagram), zero (2), the
//! mechanism's message. Reliable Blast UDP's Start, Accept, missing lists
//! and Done travel so (Leigh et al. §4.2: its control goes over TCP while
//! the data goes over UDP).

use std::fmt;

/// `"gW"`: tells a session datagram from stray traffic at a glance.
pub const MAGIC: u16 = 0x6757;
/// The one version this code speaks.
pub const VERSION: u8 = 1;
/// Bytes of the common header.
pub const HEADER_LEN: usize = 16;
/// A Hello's length, padding included: as QUIC's Initial (RFC 9000 §14.1),
/// so the reply never amplifies.
pub const HELLO_LEN: usize = 1200;
/// Longest channel name.
pub const MAX_NAME: usize = 64;
/// Channel field bit: the channel is the receiver's (it sends on it).
pub const PEER_OWNED: u16 = 0x8000;
/// Highest channel number a side may use: `0x7FFE`, so that a control
/// frame's channel field (`CONTROL_FRAME | channel`) is never
/// [`BIND_CHANNEL`].
pub const MAX_CHANNEL: u16 = PEER_OWNED - 2;
/// Channel-field bit of a stream frame that carries a mechanism's control
/// message ([`ControlFrame`]) rather than an application's.
pub const CONTROL_FRAME: u16 = 0x8000;
/// Bytes before a stream frame's message.
pub const FRAME_HEADER_LEN: usize = 10;
/// A stream frame's channel field when the frame carries no message but
/// binds the stream it arrives on to the sender's peer slot: the first
/// frame a driver writes on a stream connection it opened, so the peer can
/// send its own frames back on that connection (see
/// [`Session::bind_frame`](super::Session::bind_frame)).
pub const BIND_CHANNEL: u16 = u16::MAX;

/// What a datagram is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    /// Opens a session.
    Hello = 1,
    /// Accepts one.
    HelloAck = 2,
    /// A mechanism's packet for one channel.
    Data = 3,
    /// Names a channel its sender will send on.
    Open = 4,
    /// The name was taken.
    OpenAck = 5,
    /// A resource-monitor report.
    Report = 6,
    /// An idle path's probe: only the header, for the monitor.
    Probe = 7,
    /// The session ends.
    Close = 8,
    /// What each of the peer's channels delivered: the measured loss after
    /// recovery that closes the adaptive controller's loop.
    ChannelReport = 9,
}

impl Kind {
    fn from_u8(b: u8) -> Option<Self> {
        Some(match b {
            1 => Self::Hello,
            2 => Self::HelloAck,
            3 => Self::Data,
            4 => Self::Open,
            5 => Self::OpenAck,
            6 => Self::Report,
            7 => Self::Probe,
            8 => Self::Close,
            9 => Self::ChannelReport,
            _ => return None,
        })
    }
}

/// The common header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// What follows.
    pub kind: Kind,
    /// The receiver's connection id (0 in a Hello).
    pub dcid: u32,
    /// Per-peer packet number.
    pub seq: u32,
    /// Sender's clock, µs, wrapping.
    pub ts: u32,
}

/// A parsed datagram: the header and its body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Body<'a> {
    /// See [`Kind::Hello`].
    Hello {
        /// The initiator's connection id.
        scid: u32,
        /// Lowest version it speaks.
        min_version: u8,
        /// Highest.
        max_version: u8,
    },
    /// See [`Kind::HelloAck`].
    HelloAck {
        /// The responder's connection id.
        scid: u32,
        /// The initiator's, echoed.
        echo: u32,
        /// The version both will speak.
        version: u8,
    },
    /// See [`Kind::Data`].
    Data {
        /// Channel number (with [`PEER_OWNED`] possibly set).
        channel: u16,
        /// The mechanism's wire number ([`super::MechanismKind`]).
        mechanism: u8,
        /// The mechanism's packet.
        payload: &'a [u8],
    },
    /// See [`Kind::Open`].
    Open {
        /// Channel number.
        channel: u16,
        /// Its name.
        name: &'a str,
    },
    /// See [`Kind::OpenAck`].
    OpenAck {
        /// Channel number.
        channel: u16,
    },
    /// See [`Kind::Report`].
    Report(&'a [u8]),
    /// See [`Kind::Probe`].
    Probe,
    /// See [`Kind::Close`].
    Close {
        /// Why (0: the application closed).
        reason: u8,
    },
    /// See [`Kind::ChannelReport`]; read with [`ChannelReports`].
    ChannelReport(ChannelReports<'a>),
}

/// Entries in one ChannelReport at most.
pub const MAX_CHANNEL_REPORTS: usize = 64;
/// Bytes of one ChannelReport entry.
pub const CHANNEL_REPORT_LEN: usize = 10;

/// One channel's counts in a ChannelReport.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChannelCounts {
    /// The channel (the report's receiver sends on it).
    pub channel: u16,
    /// Highest message number seen (wrapping).
    pub highest: u32,
    /// Messages delivered so far (wrapping).
    pub delivered: u32,
}

/// A ChannelReport's entries, in place (length checked at parse).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChannelReports<'a>(&'a [u8]);

impl<'a> ChannelReports<'a> {
    /// The entries.
    pub fn iter(&self) -> impl Iterator<Item = ChannelCounts> + 'a {
        self.0
            .chunks_exact(CHANNEL_REPORT_LEN)
            .map(|c| ChannelCounts {
                channel: u16::from_be_bytes([c[0], c[1]]),
                highest: u32::from_be_bytes([c[2], c[3], c[4], c[5]]),
                delivered: u32::from_be_bytes([c[6], c[7], c[8], c[9]]),
            })
    }

    /// Writes `entries` (at most [`MAX_CHANNEL_REPORTS`] are taken) into
    /// `buf` (cleared) and views them.
    pub fn encode(entries: &[ChannelCounts], buf: &'a mut Vec<u8>) -> Self {
        buf.clear();
        for e in entries.iter().take(MAX_CHANNEL_REPORTS) {
            buf.extend_from_slice(&e.channel.to_be_bytes());
            buf.extend_from_slice(&e.highest.to_be_bytes());
            buf.extend_from_slice(&e.delivered.to_be_bytes());
        }
        Self(buf)
    }
}

impl Body<'_> {
    /// Its kind.
    pub fn kind(&self) -> Kind {
        match self {
            Self::Hello { .. } => Kind::Hello,
            Self::HelloAck { .. } => Kind::HelloAck,
            Self::Data { .. } => Kind::Data,
            Self::Open { .. } => Kind::Open,
            Self::OpenAck { .. } => Kind::OpenAck,
            Self::Report(_) => Kind::Report,
            Self::Probe => Kind::Probe,
            Self::Close { .. } => Kind::Close,
            Self::ChannelReport(_) => Kind::ChannelReport,
        }
    }
}

/// Why a datagram or frame was not taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ParseError {
    /// Shorter than its header or body says.
    Truncated,
    /// Not a session datagram (magic).
    NotOurs,
    /// A version this code does not speak.
    Version,
    /// An unknown kind.
    Kind,
    /// A Hello not padded to [`HELLO_LEN`].
    ShortHello,
    /// A name that is too long or not UTF-8.
    BadName,
    /// A channel number above [`MAX_CHANNEL`] where only those are allowed.
    BadChannel,
    /// A control frame whose owner byte is not 0 or 1, or whose reserved
    /// bytes are not zero.
    BadControl,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Truncated => "truncated",
            Self::NotOurs => "not a session datagram",
            Self::Version => "unknown version",
            Self::Kind => "unknown kind",
            Self::ShortHello => "hello not padded",
            Self::BadName => "bad channel name",
            Self::BadChannel => "bad channel number",
            Self::BadControl => "bad control frame header",
        })
    }
}

impl std::error::Error for ParseError {}

fn be16(b: &[u8], at: usize) -> Result<u16, ParseError> {
    b.get(at..at + 2)
        .map(|s| u16::from_be_bytes([s[0], s[1]]))
        .ok_or(ParseError::Truncated)
}

fn byte(b: &[u8], at: usize) -> Result<u8, ParseError> {
    b.get(at).copied().ok_or(ParseError::Truncated)
}

fn be32(b: &[u8], at: usize) -> Result<u32, ParseError> {
    b.get(at..at + 4)
        .map(|s| u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
        .ok_or(ParseError::Truncated)
}

/// Parses a datagram. Never panics, never allocates.
pub fn parse(data: &[u8]) -> Result<(Header, Body<'_>), ParseError> {
    if data.len() < HEADER_LEN {
        return Err(ParseError::Truncated);
    }
    if be16(data, 0)? != MAGIC {
        return Err(ParseError::NotOurs);
    }
    let kind = Kind::from_u8(data[3]).ok_or(ParseError::Kind)?;
    // A Hello names its versions in its body; everything else must be ours.
    if data[2] != VERSION && kind != Kind::Hello {
        return Err(ParseError::Version);
    }
    let header = Header {
        kind,
        dcid: be32(data, 4)?,
        seq: be32(data, 8)?,
        ts: be32(data, 12)?,
    };
    let b = &data[HEADER_LEN..];
    let body = match kind {
        Kind::Hello => {
            if data.len() < HELLO_LEN {
                return Err(ParseError::ShortHello);
            }
            Body::Hello {
                scid: be32(b, 0)?,
                min_version: byte(b, 4)?,
                max_version: byte(b, 5)?,
            }
        }
        Kind::HelloAck => Body::HelloAck {
            scid: be32(b, 0)?,
            echo: be32(b, 4)?,
            version: byte(b, 8)?,
        },
        Kind::Data => Body::Data {
            channel: be16(b, 0)?,
            mechanism: byte(b, 2)?,
            payload: &b[3.min(b.len())..],
        },
        Kind::Open => {
            let channel = be16(b, 0)?;
            if channel > MAX_CHANNEL {
                return Err(ParseError::BadChannel);
            }
            let len = usize::from(byte(b, 2)?);
            if len > MAX_NAME {
                return Err(ParseError::BadName);
            }
            let raw = b.get(3..3 + len).ok_or(ParseError::Truncated)?;
            let name = std::str::from_utf8(raw).map_err(|_| ParseError::BadName)?;
            Body::Open { channel, name }
        }
        Kind::OpenAck => Body::OpenAck {
            channel: be16(b, 0)?,
        },
        Kind::Report => Body::Report(b),
        Kind::Probe => Body::Probe,
        Kind::Close => Body::Close {
            reason: *b.first().ok_or(ParseError::Truncated)?,
        },
        Kind::ChannelReport => {
            if b.len() % CHANNEL_REPORT_LEN != 0 {
                return Err(ParseError::Truncated);
            }
            if b.len() > MAX_CHANNEL_REPORTS * CHANNEL_REPORT_LEN {
                return Err(ParseError::BadChannel);
            }
            Body::ChannelReport(ChannelReports(b))
        }
    };
    Ok((header, body))
}

/// Writes a datagram into `out` (cleared first). A Hello is padded to
/// [`HELLO_LEN`]; a name longer than [`MAX_NAME`] bytes is refused
/// (`false`, nothing written).
pub fn write(out: &mut Vec<u8>, dcid: u32, seq: u32, ts: u32, body: &Body<'_>) -> bool {
    out.clear();
    out.extend_from_slice(&MAGIC.to_be_bytes());
    out.push(VERSION);
    out.push(body.kind() as u8);
    out.extend_from_slice(&dcid.to_be_bytes());
    out.extend_from_slice(&seq.to_be_bytes());
    out.extend_from_slice(&ts.to_be_bytes());
    match *body {
        Body::Hello {
            scid,
            min_version,
            max_version,
        } => {
            out.extend_from_slice(&scid.to_be_bytes());
            out.push(min_version);
            out.push(max_version);
            out.resize(HELLO_LEN, 0);
        }
        Body::HelloAck {
            scid,
            echo,
            version,
        } => {
            out.extend_from_slice(&scid.to_be_bytes());
            out.extend_from_slice(&echo.to_be_bytes());
            out.push(version);
        }
        Body::Data {
            channel,
            mechanism,
            payload,
        } => {
            out.extend_from_slice(&channel.to_be_bytes());
            out.push(mechanism);
            out.extend_from_slice(payload);
        }
        Body::Open { channel, name } => {
            if name.len() > MAX_NAME || channel > MAX_CHANNEL {
                out.clear();
                return false;
            }
            out.extend_from_slice(&channel.to_be_bytes());
            out.push(name.len() as u8);
            out.extend_from_slice(name.as_bytes());
        }
        Body::OpenAck { channel } => out.extend_from_slice(&channel.to_be_bytes()),
        Body::Report(r) => out.extend_from_slice(r),
        Body::Probe => {}
        Body::Close { reason } => out.push(reason),
        Body::ChannelReport(r) => out.extend_from_slice(r.0),
    }
    true
}

/// A reliable channel's stream frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame<'a> {
    /// The receiver's connection id.
    pub dcid: u32,
    /// The sender's channel.
    pub channel: u16,
    /// The message's number on its channel.
    pub msg: u32,
    /// The message.
    pub payload: &'a [u8],
}

impl<'a> Frame<'a> {
    /// Parses a frame. Never panics, never allocates.
    pub fn parse(data: &'a [u8]) -> Result<Self, ParseError> {
        let channel = be16(data, 4)?;
        if channel > MAX_CHANNEL && channel != BIND_CHANNEL {
            return Err(ParseError::BadChannel);
        }
        Ok(Self {
            dcid: be32(data, 0)?,
            channel,
            msg: be32(data, 6)?,
            payload: data.get(FRAME_HEADER_LEN..).ok_or(ParseError::Truncated)?,
        })
    }

    /// Appends the frame to `out`.
    pub fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.dcid.to_be_bytes());
        out.extend_from_slice(&self.channel.to_be_bytes());
        out.extend_from_slice(&self.msg.to_be_bytes());
        out.extend_from_slice(self.payload);
    }
}

/// A mechanism's control message on the stream (see the module docs):
/// Reliable Blast UDP's, whose data goes as [`Kind::Data`] datagrams.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ControlFrame<'a> {
    /// The receiver's connection id.
    pub dcid: u32,
    /// The channel the message is about (at most [`MAX_CHANNEL`]).
    pub channel: u16,
    /// The mechanism's kind (its [`MechanismKind`](super::MechanismKind) number).
    pub mechanism: u8,
    /// The channel is the frame receiver's (it sends on it): the message
    /// is for the sending half of a mechanism, from its receiving half.
    pub peer_owned: bool,
    /// The mechanism's message.
    pub payload: &'a [u8],
}

impl<'a> ControlFrame<'a> {
    /// Whether a stream frame's channel field says it is a control frame.
    pub fn is_control(data: &[u8]) -> bool {
        be16(data, 4).is_ok_and(|c| c & CONTROL_FRAME != 0 && c != BIND_CHANNEL)
    }

    /// Parses a control frame. Never panics, never allocates.
    pub fn parse(data: &'a [u8]) -> Result<Self, ParseError> {
        let field = be16(data, 4)?;
        let channel = field & !CONTROL_FRAME;
        if field & CONTROL_FRAME == 0 || channel > MAX_CHANNEL {
            return Err(ParseError::BadChannel);
        }
        let head = data.get(6..FRAME_HEADER_LEN).ok_or(ParseError::Truncated)?;
        let peer_owned = match head[1] {
            0 => false,
            1 => true,
            _ => return Err(ParseError::BadControl),
        };
        if head[2..] != [0, 0] {
            return Err(ParseError::BadControl);
        }
        Ok(Self {
            dcid: be32(data, 0)?,
            channel,
            mechanism: head[0],
            peer_owned,
            payload: &data[FRAME_HEADER_LEN..],
        })
    }

    /// The channel and message-number fields of a [`Frame`] with the same
    /// bytes (how [`Session`](super::Session) seals it).
    pub fn as_fields(&self) -> (u16, u32) {
        let msg = u32::from(self.mechanism) << 24 | u32::from(self.peer_owned) << 16;
        (CONTROL_FRAME | self.channel, msg)
    }

    /// Appends the frame to `out`.
    pub fn write(&self, out: &mut Vec<u8>) {
        let (channel, msg) = self.as_fields();
        Frame {
            dcid: self.dcid,
            channel,
            msg,
            payload: self.payload,
        }
        .write(out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn golden_bytes() {
        let mut out = Vec::new();
        assert!(write(
            &mut out,
            0x0102_0304,
            5,
            6,
            &Body::Data {
                channel: 0x8001,
                mechanism: 3,
                payload: b"xy",
            }
        ));
        assert_eq!(
            out,
            [
                0x67, 0x57, 1, 3, 1, 2, 3, 4, 0, 0, 0, 5, 0, 0, 0, 6, 0x80, 1, 3, b'x', b'y'
            ]
        );
        write(
            &mut out,
            0,
            0,
            0,
            &Body::Hello {
                scid: 9,
                min_version: 1,
                max_version: 1,
            },
        );
        assert_eq!(out.len(), HELLO_LEN);
        assert_eq!(&out[16..22], &[0, 0, 0, 9, 1, 1]);
        assert!(out[22..].iter().all(|&b| b == 0));
        let mut f = Vec::new();
        Frame {
            dcid: 7,
            channel: 2,
            msg: 1,
            payload: b"m",
        }
        .write(&mut f);
        assert_eq!(f, [0, 0, 0, 7, 0, 2, 0, 0, 0, 1, b'm']);
        let mut c = Vec::new();
        ControlFrame {
            dcid: 7,
            channel: 2,
            mechanism: 6,
            peer_owned: true,
            payload: b"c",
        }
        .write(&mut c);
        assert_eq!(c, [0, 0, 0, 7, 0x80, 2, 6, 1, 0, 0, b'c']);
        c[8] = 1;
        assert_eq!(ControlFrame::parse(&c), Err(ParseError::BadControl));
        c[8] = 0;
        c[7] = 2;
        assert_eq!(ControlFrame::parse(&c), Err(ParseError::BadControl));
        let mut bind = Vec::new();
        Frame {
            dcid: 7,
            channel: BIND_CHANNEL,
            msg: 0,
            payload: b"",
        }
        .write(&mut bind);
        assert!(!ControlFrame::is_control(&bind));
    }

    #[test]
    fn hello_must_be_padded_and_others_must_speak_our_version() {
        let mut out = Vec::new();
        write(
            &mut out,
            0,
            0,
            0,
            &Body::Hello {
                scid: 1,
                min_version: 1,
                max_version: 9,
            },
        );
        out.truncate(HELLO_LEN - 1);
        assert_eq!(parse(&out), Err(ParseError::ShortHello));
        write(&mut out, 1, 0, 0, &Body::Probe);
        out[2] = 2;
        assert_eq!(parse(&out), Err(ParseError::Version));
        out[2] = VERSION;
        out[3] = 99;
        assert_eq!(parse(&out), Err(ParseError::Kind));
        out[0] = 0;
        assert_eq!(parse(&out), Err(ParseError::NotOurs));
        let long = "x".repeat(MAX_NAME + 1);
        assert!(!write(
            &mut out,
            1,
            0,
            0,
            &Body::Open {
                channel: 1,
                name: &long
            }
        ));
    }

    fn body() -> impl Strategy<Value = (u8, u32, u32, u16, u8, Vec<u8>, String)> {
        (
            1u8..=9,
            any::<u32>(),
            any::<u32>(),
            0..=MAX_CHANNEL,
            any::<u8>(),
            proptest::collection::vec(any::<u8>(), 0..64),
            "[a-z0-9/_-]{0,64}",
        )
    }

    proptest! {
        #[test]
        fn round_trip((kind, a, b, ch, m, bytes, name) in body(), dcid: u32, seq: u32, ts: u32) {
            let body = match kind {
                1 => Body::Hello { scid: a, min_version: m, max_version: m },
                2 => Body::HelloAck { scid: a, echo: b, version: VERSION },
                3 => Body::Data { channel: ch | (u16::from(m & 1) << 15), mechanism: m, payload: &bytes },
                4 => Body::Open { channel: ch, name: &name },
                5 => Body::OpenAck { channel: ch },
                6 => Body::Report(&bytes),
                7 => Body::Probe,
                8 => Body::Close { reason: m },
                _ => Body::ChannelReport(ChannelReports(&bytes[..bytes.len() / CHANNEL_REPORT_LEN * CHANNEL_REPORT_LEN])),
            };
            let mut out = Vec::new();
            prop_assert!(write(&mut out, dcid, seq, ts, &body));
            let (h, back) = parse(&out).unwrap();
            prop_assert_eq!(h, Header { kind: body.kind(), dcid, seq, ts });
            prop_assert_eq!(back, body);
        }

        #[test]
        fn garbage_never_panics(data in proptest::collection::vec(any::<u8>(), 0..1300)) {
            let _ = parse(&data);
            let _ = Frame::parse(&data);
            let _ = ControlFrame::parse(&data);
        }

        #[test]
        fn control_frames_round_trip_and_are_told_from_messages(
            dcid: u32,
            ch in 0..=MAX_CHANNEL,
            mechanism: u8,
            peer_owned: bool,
            payload in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let f = ControlFrame { dcid, channel: ch, mechanism, peer_owned, payload: &payload };
            let mut out = Vec::new();
            f.write(&mut out);
            prop_assert!(ControlFrame::is_control(&out));
            prop_assert_eq!(ControlFrame::parse(&out), Ok(f));
            // Never a message frame, never the bind.
            prop_assert_eq!(Frame::parse(&out), Err(ParseError::BadChannel));
            prop_assert_ne!(be16(&out, 4).unwrap(), BIND_CHANNEL);
            let mut msg = Vec::new();
            Frame { dcid, channel: ch, msg: 0, payload: &payload }.write(&mut msg);
            prop_assert!(!ControlFrame::is_control(&msg));
        }

        #[test]
        fn frames_round_trip(dcid: u32, ch in 0..=MAX_CHANNEL, msg: u32, payload in proptest::collection::vec(any::<u8>(), 0..64)) {
            let f = Frame { dcid, channel: ch, msg, payload: &payload };
            let mut out = Vec::new();
            f.write(&mut out);
            prop_assert_eq!(Frame::parse(&out), Ok(f));
        }

        #[test]
        fn frame_channels_past_the_limit_are_refused_but_bind(dcid: u32, ch in (MAX_CHANNEL + 1)..BIND_CHANNEL) {
            let mut out = Vec::new();
            Frame { dcid, channel: ch, msg: 0, payload: &[] }.write(&mut out);
            prop_assert_eq!(Frame::parse(&out), Err(ParseError::BadChannel));
            out.clear();
            let bind = Frame { dcid, channel: BIND_CHANNEL, msg: 0, payload: &[] };
            bind.write(&mut out);
            prop_assert_eq!(Frame::parse(&out), Ok(bind));
        }
    }
}
