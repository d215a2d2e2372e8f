//! Parallel TCP striping (Leigh et al. §4.2, after Park et al.): the frames
//! on each of a transfer's TCP connections.
//!
//! //= Leigh et al. §4.2
//! //# Parallel TCP Socket striping overcomes the LFN problem by
//! //# partitioning a payload and delivering it over multiple TCP
//! //# connections.
//!
//! A transfer opens `count` TCP connections ("streams") to the receiver.
//! Each starts with a [`Hello`] naming the session, its index and the
//! transfer's shape, then carries [`ChunkHeader`] frames, each followed on
//! the stream by exactly `length` payload bytes (the chunk's bytes of the
//! payload from `offset`), then one [`End`] saying what this stream sent
//! (with the sender's BLAKE3 hash of the whole payload). The receiver
//! answers once, on stream 0, with a [`Done`]: the hash of what it stored
//! and whether it matches, or the error that stopped it. Either side may
//! instead end a transfer with an [`Abort`] (sender) or an early `Done`
//! carrying an error status (receiver).
//!
//! Every frame starts with the common [`header`] (`kind` =
//! [`Kind::Striped`]); byte 8 is the frame type ([`FrameType`]), bytes 9 to
//! 11 are reserved (zero on emit, ignored on parse), and the header's
//! `flags` carry the frame's flag bits. All fields are big-endian; sizes
//! and offsets are 64-bit, so a payload of any size fits. A frame's length
//! follows from its first [`PREFIX_LEN`] bytes ([`frame_len`]), so a
//! reader takes a frame off a byte stream with two exact reads (three for
//! a chunk: then its payload, straight into the chunk buffer).
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! | common header: version=1, kind=10, flags, reserved, session   |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |     type      |                   reserved                    |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                    type-specific body ...
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//!
//! Hello (1), 64 bytes: sender → receiver, first on every stream
//!   12 magic "GWSP" | 16 total size u64 | 24 chunk size u32
//!   28 stream index u16 | 30 stream count u16 | 32 hash [32]
//!   flags bit 0 (FLAG_HASH): the hash is present (else zero, ignored)
//! Chunk (2), 24 bytes, then `length` payload bytes: sender → receiver
//!   12 length u32 | 16 offset u64
//! End (3), 64 bytes: sender → receiver, last on every stream
//!   12 reserved [4] | 16 chunks on this stream u64
//!   24 payload bytes on this stream u64 | 32 hash [32]
//!   flags bit 0 (FLAG_HASH): the hash is present (else zero, ignored)
//! Done (4), 56 bytes: receiver → sender, on stream 0
//!   12 status u8 | 13 reserved [3] | 16 bytes stored u64 | 24 hash [32]
//! Abort (5), 16 bytes: sender → receiver, on any stream
//!   12 reason u8 | 13 reserved [3]
//! ```
//!
//! Parsing never panics and never allocates. Lengths are checked before
//! use: a Hello's chunk size is at most [`MAX_CHUNK_SIZE`] and its stream
//! count at most [`MAX_STREAMS`], with the index below the count; a
//! chunk's length is 1 to [`MAX_CHUNK_SIZE`] and its end does not pass
//! 2^64. Whether a chunk lies inside the transfer, on a chunk boundary,
//! and arrives once is the receiver's check (the frame alone does not know
//! the transfer).

use core::ops::Range;

use super::header::{self, Kind};
use super::{WireError, be16, be32, be64, need};

pub use super::rbudp::Hash;

/// Bytes that say what a frame is and how long it is: the common header,
/// the type byte and 3 reserved bytes.
pub const PREFIX_LEN: usize = 12;
/// Bytes of a [`Hello`].
pub const HELLO_LEN: usize = 64;
/// Bytes of a [`ChunkHeader`] (its payload follows).
pub const CHUNK_HEADER_LEN: usize = 24;
/// Bytes of an [`End`].
pub const END_LEN: usize = 64;
/// Bytes of a [`Done`].
pub const DONE_LEN: usize = 56;
/// Bytes of an [`Abort`].
pub const ABORT_LEN: usize = 16;
/// The longest frame (a chunk's payload not counted).
pub const MAX_FRAME_LEN: usize = 64;
/// The largest chunk: 16 MiB, so one chunk buffer per stream stays small
/// next to any machine's memory.
pub const MAX_CHUNK_SIZE: u32 = 16 * 1024 * 1024;
/// The most streams one transfer may open (GridFTP and `iperf3 -P` users
/// rarely go past a few dozen; beyond, the connections fight each other).
pub const MAX_STREAMS: u16 = 64;
/// The Hello's magic, so a stray connection is told apart from a sender at
/// its first frame.
pub const MAGIC: [u8; 4] = *b"GWSP";

/// [`Hello`] and [`End`] flag: the hash field holds the hash.
pub const FLAG_HASH: u8 = 0x01;

crate::wire_enum! {
    /// Which frame a buffer holds (byte 8).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
    #[non_exhaustive]
    pub enum FrameType: WireError = (WireError::UnknownKind) {
        /// [`Hello`].
        Hello = 1,
        /// [`ChunkHeader`].
        Chunk = 2,
        /// [`End`].
        End = 3,
        /// [`Done`].
        Done = 4,
        /// [`Abort`].
        Abort = 5,
    }
}

crate::wire_enum! {
    /// How the receiver's [`Done`] ends the transfer.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    #[non_exhaustive]
    pub enum DoneStatus: WireError = (|_| WireError::Malformed("unknown done status")) {
        /// Every byte arrived once and the hash matches the sender's.
        Ok = 0,
        /// Every byte arrived, but the hash of what was stored differs.
        HashMismatch = 1,
        /// The receiver's storage is full.
        DiskFull = 2,
        /// Storing the payload failed otherwise.
        Storage = 3,
        /// A stream closed before its End frame.
        StreamClosedEarly = 4,
        /// A stream broke the protocol (a chunk outside the transfer, sent
        /// twice, counts that do not add up).
        Protocol = 5,
        /// A stream fell silent, or not every stream connected in time.
        Timeout = 6,
        /// The receiver will not take this transfer (too many streams, too
        /// large a chunk, too many chunks for its memory).
        Refused = 7,
    }
}

crate::wire_enum! {
    /// Why the sender's [`Abort`] ends the transfer.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    #[non_exhaustive]
    pub enum AbortReason: WireError = (|_| WireError::Malformed("unknown abort reason")) {
        /// Reading the source failed.
        SourceRead = 1,
        /// The source changed while it was being sent.
        SourceChanged = 2,
        /// The sender's application cancelled, or another stream failed.
        Cancelled = 3,
    }
}

mod field {
    use core::ops::Range;
    pub(super) const TYPE: usize = 8;
    // Hello.
    pub(super) const MAGIC: Range<usize> = 12..16;
    pub(super) const SIZE: Range<usize> = 16..24;
    pub(super) const CHUNK_SIZE: Range<usize> = 24..28;
    pub(super) const INDEX: Range<usize> = 28..30;
    pub(super) const COUNT: Range<usize> = 30..32;
    pub(super) const HELLO_HASH: Range<usize> = 32..64;
    // Chunk.
    pub(super) const LENGTH: Range<usize> = 12..16;
    pub(super) const OFFSET: Range<usize> = 16..24;
    // End.
    pub(super) const CHUNKS: Range<usize> = 16..24;
    pub(super) const BYTES: Range<usize> = 24..32;
    pub(super) const END_HASH: Range<usize> = 32..64;
    // Done.
    pub(super) const STATUS: usize = 12;
    pub(super) const STORED: Range<usize> = 16..24;
    pub(super) const DONE_HASH: Range<usize> = 24..56;
    // Abort.
    pub(super) const REASON: usize = 12;
}

/// Opens a stream (sender → receiver): which transfer, which stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hello {
    /// Bytes of the whole payload.
    pub size: u64,
    /// Payload bytes per chunk (all but the last), 1 to [`MAX_CHUNK_SIZE`].
    pub chunk_size: u32,
    /// This stream's index, below `count`.
    pub index: u16,
    /// Streams in the transfer, 1 to [`MAX_STREAMS`].
    pub count: u16,
    /// The sender's BLAKE3 hash of the payload, when it knows it up front.
    pub hash: Option<Hash>,
}

/// A chunk's header (sender → receiver); `length` payload bytes follow it
/// on the stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkHeader {
    /// The payload offset of the chunk's first byte.
    pub offset: u64,
    /// Payload bytes that follow, 1 to [`MAX_CHUNK_SIZE`].
    pub length: u32,
}

/// The last frame of a stream (sender → receiver).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct End {
    /// Chunks this stream carried.
    pub chunks: u64,
    /// Payload bytes this stream carried.
    pub bytes: u64,
    /// The BLAKE3 hash of the whole payload, as the sender read it.
    pub hash: Option<Hash>,
}

/// The receiver's answer (receiver → sender, stream 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Done {
    /// How the transfer ended.
    pub status: DoneStatus,
    /// Payload bytes the receiver stored.
    pub stored: u64,
    /// The BLAKE3 hash of what it stored (zero unless the status is
    /// [`DoneStatus::Ok`] or [`DoneStatus::HashMismatch`]).
    pub hash: Hash,
}

/// The sender gives up (sender → receiver).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Abort {
    /// Why.
    pub reason: AbortReason,
}

/// A frame's body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Frame {
    /// [`Hello`].
    Hello(Hello),
    /// [`ChunkHeader`].
    Chunk(ChunkHeader),
    /// [`End`].
    End(End),
    /// [`Done`].
    Done(Done),
    /// [`Abort`].
    Abort(Abort),
}

/// A parsed frame: its session and body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Repr {
    /// The transfer's session id (the sender picks it).
    pub session: u32,
    /// The frame.
    pub frame: Frame,
}

/// The length of the frame that starts with `prefix` (at least
/// [`PREFIX_LEN`] bytes; only those are read), its header only for a chunk.
/// Never panics; rejects other versions, other kinds and unknown types.
pub fn frame_len(prefix: &[u8]) -> Result<usize, WireError> {
    parse_prefix(prefix).map(|(_, t)| type_len(t))
}

impl Repr {
    /// Parses one whole frame: exactly [`frame_len`] bytes (for a chunk,
    /// its header without the payload). Never panics.
    pub fn parse(buf: &[u8]) -> Result<Self, WireError> {
        let (h, ty) = parse_prefix(buf)?;
        let len = type_len(ty);
        need(buf, len)?;
        if buf.len() > len {
            return Err(WireError::Malformed("bytes after the frame"));
        }
        let hash_at = |at: Range<usize>| {
            (h.flags & FLAG_HASH != 0).then(|| {
                let mut out = [0u8; 32];
                out.copy_from_slice(&buf[at]);
                out
            })
        };
        let frame = match ty {
            FrameType::Hello => {
                if buf[field::MAGIC] != MAGIC {
                    return Err(WireError::Malformed("not a striping hello (magic)"));
                }
                let chunk_size = be32(&buf[field::CHUNK_SIZE]);
                if chunk_size == 0 || chunk_size > MAX_CHUNK_SIZE {
                    return Err(WireError::Malformed(
                        "chunk size outside 1..=MAX_CHUNK_SIZE",
                    ));
                }
                let (index, count) = (be16(&buf[field::INDEX]), be16(&buf[field::COUNT]));
                if count == 0 || count > MAX_STREAMS {
                    return Err(WireError::Malformed("stream count outside 1..=MAX_STREAMS"));
                }
                if index >= count {
                    return Err(WireError::Malformed("stream index not below the count"));
                }
                Frame::Hello(Hello {
                    size: be64(&buf[field::SIZE]),
                    chunk_size,
                    index,
                    count,
                    hash: hash_at(field::HELLO_HASH),
                })
            }
            FrameType::Chunk => {
                let length = be32(&buf[field::LENGTH]);
                let offset = be64(&buf[field::OFFSET]);
                if length == 0 || length > MAX_CHUNK_SIZE {
                    return Err(WireError::Malformed(
                        "chunk length outside 1..=MAX_CHUNK_SIZE",
                    ));
                }
                if offset.checked_add(u64::from(length)).is_none() {
                    return Err(WireError::Malformed("chunk past 2^64 bytes"));
                }
                Frame::Chunk(ChunkHeader { offset, length })
            }
            FrameType::End => Frame::End(End {
                chunks: be64(&buf[field::CHUNKS]),
                bytes: be64(&buf[field::BYTES]),
                hash: hash_at(field::END_HASH),
            }),
            FrameType::Done => {
                let mut hash = [0u8; 32];
                hash.copy_from_slice(&buf[field::DONE_HASH]);
                Frame::Done(Done {
                    status: DoneStatus::try_from(buf[field::STATUS])?,
                    stored: be64(&buf[field::STORED]),
                    hash,
                })
            }
            FrameType::Abort => Frame::Abort(Abort {
                reason: AbortReason::try_from(buf[field::REASON])?,
            }),
        };
        Ok(Self {
            session: h.session,
            frame,
        })
    }

    /// Bytes [`emit`](Self::emit) writes (for a chunk, its header only).
    pub const fn buffer_len(&self) -> usize {
        type_len(match self.frame {
            Frame::Hello(_) => FrameType::Hello,
            Frame::Chunk(_) => FrameType::Chunk,
            Frame::End(_) => FrameType::End,
            Frame::Done(_) => FrameType::Done,
            Frame::Abort(_) => FrameType::Abort,
        })
    }

    /// Writes the frame into `buf`, exactly [`buffer_len`](Self::buffer_len)
    /// bytes. A chunk's payload is the caller's to write after it.
    ///
    /// # Panics
    /// On a wrong buffer size: a local sizing bug, not peer input.
    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(buf.len(), self.buffer_len(), "buffer sized by buffer_len");
        buf.fill(0);
        let put = |buf: &mut [u8], at: Range<usize>, v: &[u8]| buf[at].copy_from_slice(v);
        match &self.frame {
            Frame::Hello(h) => {
                let flags = if h.hash.is_some() { FLAG_HASH } else { 0 };
                emit_prefix(buf, FrameType::Hello, flags, self.session);
                put(buf, field::MAGIC, &MAGIC);
                put(buf, field::SIZE, &h.size.to_be_bytes());
                put(buf, field::CHUNK_SIZE, &h.chunk_size.to_be_bytes());
                put(buf, field::INDEX, &h.index.to_be_bytes());
                put(buf, field::COUNT, &h.count.to_be_bytes());
                put(buf, field::HELLO_HASH, &h.hash.unwrap_or_default());
            }
            Frame::Chunk(c) => {
                emit_prefix(buf, FrameType::Chunk, 0, self.session);
                put(buf, field::LENGTH, &c.length.to_be_bytes());
                put(buf, field::OFFSET, &c.offset.to_be_bytes());
            }
            Frame::End(e) => {
                let flags = if e.hash.is_some() { FLAG_HASH } else { 0 };
                emit_prefix(buf, FrameType::End, flags, self.session);
                put(buf, field::CHUNKS, &e.chunks.to_be_bytes());
                put(buf, field::BYTES, &e.bytes.to_be_bytes());
                put(buf, field::END_HASH, &e.hash.unwrap_or_default());
            }
            Frame::Done(d) => {
                emit_prefix(buf, FrameType::Done, 0, self.session);
                buf[field::STATUS] = d.status.into();
                put(buf, field::STORED, &d.stored.to_be_bytes());
                put(buf, field::DONE_HASH, &d.hash);
            }
            Frame::Abort(a) => {
                emit_prefix(buf, FrameType::Abort, 0, self.session);
                buf[field::REASON] = a.reason.into();
            }
        }
    }

    /// The frame as a new buffer (for a chunk, its header only).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut buf = vec![0u8; self.buffer_len()];
        self.emit(&mut buf);
        buf
    }
}

const fn type_len(t: FrameType) -> usize {
    match t {
        FrameType::Hello => HELLO_LEN,
        FrameType::Chunk => CHUNK_HEADER_LEN,
        FrameType::End => END_LEN,
        FrameType::Done => DONE_LEN,
        FrameType::Abort => ABORT_LEN,
    }
}

/// The common header (must be a striping frame) and the type byte.
fn parse_prefix(buf: &[u8]) -> Result<(header::Repr, FrameType), WireError> {
    let h = header::Repr::parse_kind(buf, Kind::Striped, "not a striping frame")?;
    need(buf, PREFIX_LEN)?;
    Ok((h, FrameType::try_from(buf[field::TYPE])?))
}

fn emit_prefix(buf: &mut [u8], ty: FrameType, flags: u8, session: u32) {
    header::emit_typed(buf, Kind::Striped, ty.into(), flags, session);
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[rustfmt::skip]
    const GOLDEN_HELLO: [u8; HELLO_LEN] = [
        0x01, 0x0a, 0x01, 0x00, 0x00, 0x00, 0x00, 0x2a, // header: v1, Striped, FLAG_HASH, session 42
        0x01, 0x00, 0x00, 0x00,                         // Hello, reserved
        b'G', b'W', b'S', b'P',                         // magic
        0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x05, // size 2^32 + 5
        0x00, 0x04, 0x00, 0x00,                         // chunk size 256 KiB
        0x00, 0x02,                                     // stream 2
        0x00, 0x04,                                     // of 4
        0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, // hash
        0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab,
        0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab,
        0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab,
    ];

    #[rustfmt::skip]
    const GOLDEN_CHUNK: [u8; CHUNK_HEADER_LEN] = [
        0x01, 0x0a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x2a, // header: session 42
        0x02, 0x00, 0x00, 0x00,                         // Chunk
        0x00, 0x04, 0x00, 0x00,                         // length 256 KiB
        0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, // offset 8 GiB
    ];

    #[rustfmt::skip]
    const GOLDEN_DONE: [u8; DONE_LEN] = [
        0x01, 0x0a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x07, // header: session 7
        0x04, 0x00, 0x00, 0x00,                         // Done
        0x02, 0x00, 0x00, 0x00,                         // disk full, reserved
        0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, // 1 MiB stored
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // no hash
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ];

    #[test]
    fn hello_golden_bytes_both_ways() {
        let r = Repr {
            session: 42,
            frame: Frame::Hello(Hello {
                size: (1 << 32) + 5,
                chunk_size: 256 * 1024,
                index: 2,
                count: 4,
                hash: Some([0xab; 32]),
            }),
        };
        assert_eq!(Repr::parse(&GOLDEN_HELLO), Ok(r));
        assert_eq!(r.to_vec(), GOLDEN_HELLO);
        assert_eq!(frame_len(&GOLDEN_HELLO[..PREFIX_LEN]), Ok(HELLO_LEN));
        assert!(Repr::parse(&GOLDEN_HELLO[..HELLO_LEN - 1]).is_err());
    }

    #[test]
    fn chunk_and_done_golden_bytes_both_ways() {
        let chunk = Repr {
            session: 42,
            frame: Frame::Chunk(ChunkHeader {
                offset: 8 << 30,
                length: 256 * 1024,
            }),
        };
        assert_eq!(Repr::parse(&GOLDEN_CHUNK), Ok(chunk));
        assert_eq!(chunk.to_vec(), GOLDEN_CHUNK);
        assert_eq!(frame_len(&GOLDEN_CHUNK), Ok(CHUNK_HEADER_LEN));
        let done = Repr {
            session: 7,
            frame: Frame::Done(Done {
                status: DoneStatus::DiskFull,
                stored: 1 << 20,
                hash: [0; 32],
            }),
        };
        assert_eq!(Repr::parse(&GOLDEN_DONE), Ok(done));
        assert_eq!(done.to_vec(), GOLDEN_DONE);
    }

    #[test]
    fn bounds_are_checked_before_use() {
        let hello = |f: &dyn Fn(&mut [u8])| {
            let mut b = GOLDEN_HELLO;
            f(&mut b);
            Repr::parse(&b)
        };
        assert!(hello(&|b| b[12] = b'X').is_err(), "magic");
        assert!(hello(&|b| b[24..28].fill(0)).is_err(), "zero chunk size");
        assert!(
            hello(&|b| b[24..28].copy_from_slice(&(MAX_CHUNK_SIZE + 1).to_be_bytes())).is_err(),
            "chunk too large"
        );
        assert!(
            hello(&|b| b[28..30].copy_from_slice(&[0, 4])).is_err(),
            "index = count"
        );
        assert!(hello(&|b| b[30..32].fill(0)).is_err(), "no streams");
        assert!(
            hello(&|b| b[30..32].copy_from_slice(&(MAX_STREAMS + 1).to_be_bytes())).is_err(),
            "too many streams"
        );
        assert!(hello(&|b| b[0] = 2).is_err(), "version");
        assert!(hello(&|b| b[1] = 6).is_err(), "an RBUDP message");
        let mut c = GOLDEN_CHUNK;
        c[12..16].fill(0);
        assert!(Repr::parse(&c).is_err(), "empty chunk");
        let mut c = GOLDEN_CHUNK;
        c[16..24].fill(0xff);
        assert!(Repr::parse(&c).is_err(), "past 2^64");
        let mut c = GOLDEN_CHUNK.to_vec();
        c.push(0);
        assert!(Repr::parse(&c).is_err(), "trailing bytes");
        let mut d = GOLDEN_DONE;
        d[12] = 99;
        assert!(Repr::parse(&d).is_err(), "unknown status");
        let mut d = GOLDEN_DONE;
        d[8] = 99;
        assert_eq!(Repr::parse(&d), Err(WireError::UnknownKind(99)));
        assert_eq!(frame_len(&d), Err(WireError::UnknownKind(99)));
        assert!(frame_len(&GOLDEN_DONE[..PREFIX_LEN - 1]).is_err());
    }

    fn any_frame() -> impl Strategy<Value = Frame> {
        let hash = || proptest::option::of(any::<[u8; 32]>());
        prop_oneof![
            (
                any::<u64>(),
                1..=MAX_CHUNK_SIZE,
                1..=MAX_STREAMS,
                any::<u16>(),
                hash()
            )
                .prop_map(|(size, chunk_size, count, i, hash)| Frame::Hello(Hello {
                    size,
                    chunk_size,
                    index: i % count,
                    count,
                    hash,
                })),
            (0..u64::MAX - u64::from(MAX_CHUNK_SIZE), 1..=MAX_CHUNK_SIZE)
                .prop_map(|(offset, length)| Frame::Chunk(ChunkHeader { offset, length })),
            (any::<u64>(), any::<u64>(), hash()).prop_map(|(chunks, bytes, hash)| Frame::End(
                End {
                    chunks,
                    bytes,
                    hash
                }
            )),
            (0u8..=7, any::<u64>(), any::<[u8; 32]>()).prop_map(|(s, stored, hash)| {
                Frame::Done(Done {
                    status: DoneStatus::try_from(s).expect("statuses 0 to 7"),
                    stored,
                    hash,
                })
            }),
            (1u8..=3).prop_map(|r| Frame::Abort(Abort {
                reason: AbortReason::try_from(r).expect("reasons 1 to 3"),
            })),
        ]
    }

    proptest! {
        #[test]
        fn frames_round_trip(session: u32, frame in any_frame()) {
            let r = Repr { session, frame };
            let bytes = r.to_vec();
            prop_assert_eq!(frame_len(&bytes), Ok(bytes.len()));
            prop_assert_eq!(Repr::parse(&bytes), Ok(r));
        }

        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..80),
                                       ty in 1u8..=5) {
            let mut d = data;
            if d.len() >= 9 { d[0] = 1; d[1] = 10; d[8] = ty; }
            if let Ok(len) = frame_len(&d) {
                prop_assert!(len <= MAX_FRAME_LEN);
            }
            if let Ok(r) = Repr::parse(&d) {
                prop_assert_eq!(Repr::parse(&r.to_vec()), Ok(r));
            }
        }
    }
}
