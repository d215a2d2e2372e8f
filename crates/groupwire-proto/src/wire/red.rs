//! RFC 2198 redundant data ("RED"): the RTP payload format that carries a
//! new block of data plus whole earlier ones, each with its payload type and
//! how much older it is. It is the standard form of Dyck & Gutwin's AFEC
//! packet (a new message plus whole earlier messages), which groupwire
//! speaks when an [`AfecEndpoint`](crate::afec::AfecEndpoint) is set to
//! [`Framing::Red`](crate::afec::Framing::Red), so that stock decoders
//! (GStreamer's `rtpreddec`) recover the messages.
//!
//! This module is the payload only (what follows the RTP header of
//! [`rtp`](super::rtp)); it knows nothing of messages or time.
//!
//! # Payload (RFC 2198 §3)
//!
//! One 4-byte header per redundant block, then a 1-byte header for the
//! primary block, then the blocks' data in the same order:
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |F|   block PT  |  timestamp offset         |   block length    |  F = 1, once per
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+  redundant block
//! |0|   block PT  |  (the primary's header: F = 0, one byte)
//! +-+-+-+-+-+-+-+-+
//! |  redundant block 1 data | redundant block 2 data | ... | primary data ...
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! - The primary's length is what is left of the payload; its timestamp is
//!   the RTP header's.
//! - A redundant block's timestamp is the RTP header's minus its offset
//!   (14 bits: at most [`MAX_TIMESTAMP_OFFSET`] ticks of the RTP clock);
//!   its length is 10 bits (at most [`MAX_BLOCK_LEN`] bytes).
//! - groupwire sends redundant blocks oldest first (offsets decreasing), as
//!   RFC 2198's examples do; this module reads them in whatever order they
//!   come.
//! - At most [`MAX_BLOCKS`] blocks, the primary included (RFC 2198 sets no
//!   limit; ours is a native AFEC packet's one-byte message count, and it
//!   bounds the work one datagram can ask for).
//!
//! **Empty primary.** The RFC does not forbid a primary of zero bytes and
//! this module reads one, but GStreamer's `rtpreddec` discards such a
//! packet whole: senders that want stock decoders to read them send at
//! least one byte of primary data.
//!
//! Parsing never panics, never allocates (the [`Packet`] view) and never
//! reads past the buffer; [`Repr::emit`] checks every field's range first.

use super::WireError;

/// Bytes of a redundant block's header.
pub const REDUNDANT_HEADER_LEN: usize = 4;
/// Bytes of the primary block's header.
pub const PRIMARY_HEADER_LEN: usize = 1;
/// The largest timestamp offset (14 bits).
pub const MAX_TIMESTAMP_OFFSET: u16 = (1 << 14) - 1;
/// The largest redundant block (10-bit length).
pub const MAX_BLOCK_LEN: usize = (1 << 10) - 1;
/// Most blocks in one payload, the primary included.
pub const MAX_BLOCKS: usize = 255;
/// The largest RTP payload type (7 bits).
pub const MAX_PAYLOAD_TYPE: u8 = 127;

//= https://www.rfc-editor.org/rfc/rfc2198#section-3
//# F: 1 bit First bit in header indicates whether another header block
//# follows. If 1 further header blocks follow, if 0 this is the last
//# header block.
const F_BIT: u8 = 0x80;

/// A redundant block, borrowing its data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block<'a> {
    /// The block's RTP payload type (7 bits).
    pub payload_type: u8,
    //= https://www.rfc-editor.org/rfc/rfc2198#section-3
    //# timestamp offset: 14 bits Unsigned offset of timestamp of this block
    //# relative to timestamp given in RTP header.
    /// RTP clock ticks to subtract from the RTP header's timestamp to get
    /// this block's (14 bits).
    pub timestamp_offset: u16,
    /// The block's data (at most [`MAX_BLOCK_LEN`] bytes).
    pub data: &'a [u8],
}

/// The primary block, borrowing its data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Primary<'a> {
    /// The block's RTP payload type (7 bits).
    pub payload_type: u8,
    /// The block's data: the rest of the payload.
    pub data: &'a [u8],
}

/// A checked view of a RED payload: every header read, every length checked
/// against the bytes present. No accessor panics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet<'a> {
    buffer: &'a [u8],
    /// Redundant blocks (headers of 4 bytes before the primary's).
    redundant: usize,
    /// Where the first block's data starts.
    data_start: usize,
}

impl<'a> Packet<'a> {
    /// Reads the header chain of `payload` (an RTP payload). Fails when the
    /// chain runs off the end (no final header), when the redundant blocks'
    /// lengths add up to more than the bytes after the headers (lengths
    /// that lie), or when there are more than [`MAX_BLOCKS`] blocks.
    pub fn new_checked(payload: &'a [u8]) -> Result<Self, WireError> {
        let mut at = 0;
        let mut redundant = 0;
        let mut data_len = 0;
        loop {
            let Some(&first) = payload.get(at) else {
                return Err(WireError::Truncated {
                    needed: at + PRIMARY_HEADER_LEN,
                    got: payload.len(),
                });
            };
            if first & F_BIT == 0 {
                at += PRIMARY_HEADER_LEN;
                break;
            }
            let Some(h) = payload.get(at..at + REDUNDANT_HEADER_LEN) else {
                return Err(WireError::Truncated {
                    needed: at + REDUNDANT_HEADER_LEN,
                    got: payload.len(),
                });
            };
            redundant += 1;
            if redundant >= MAX_BLOCKS {
                return Err(WireError::Malformed(
                    "more than 255 RED blocks (the primary included)",
                ));
            }
            data_len += usize::from(block_len(h));
            at += REDUNDANT_HEADER_LEN;
        }
        if payload.len() < at + data_len {
            return Err(WireError::Truncated {
                needed: at + data_len,
                got: payload.len(),
            });
        }
        Ok(Self {
            buffer: payload,
            redundant,
            data_start: at,
        })
    }

    /// Number of redundant blocks.
    pub fn redundant_count(&self) -> usize {
        self.redundant
    }

    /// The redundant blocks, in the order they are on the wire.
    pub fn redundant(&self) -> Blocks<'a> {
        Blocks {
            headers: &self.buffer[..self.redundant * REDUNDANT_HEADER_LEN],
            data: &self.buffer[self.data_start..],
        }
    }

    /// The primary block.
    pub fn primary(&self) -> Primary<'a> {
        let data_len: usize = self.redundant().map(|b| b.data.len()).sum();
        Primary {
            payload_type: self.buffer[self.data_start - PRIMARY_HEADER_LEN] & 0x7f,
            data: &self.buffer[self.data_start + data_len..],
        }
    }
}

/// The redundant blocks of a [`Packet`], in wire order.
#[derive(Clone, Debug)]
pub struct Blocks<'a> {
    /// Headers not yet read, 4 bytes each.
    headers: &'a [u8],
    /// Data not yet handed out.
    data: &'a [u8],
}

impl<'a> Iterator for Blocks<'a> {
    type Item = Block<'a>;

    fn next(&mut self) -> Option<Block<'a>> {
        let (h, rest) = self.headers.split_first_chunk::<REDUNDANT_HEADER_LEN>()?;
        self.headers = rest;
        // Packet::new_checked summed the lengths against the data present.
        let (data, rest) = self.data.split_at(usize::from(block_len(h)));
        self.data = rest;
        Some(Block {
            payload_type: h[0] & 0x7f,
            timestamp_offset: u16::from(h[1]) << 6 | u16::from(h[2] >> 2),
            data,
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.headers.len() / REDUNDANT_HEADER_LEN;
        (n, Some(n))
    }
}

impl ExactSizeIterator for Blocks<'_> {}

/// A RED payload as values: redundant blocks in wire order, then the primary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Repr<'a> {
    /// Redundant blocks, in wire order (groupwire: oldest first).
    pub redundant: Vec<Block<'a>>,
    /// The primary block.
    pub primary: Primary<'a>,
}

impl<'a> Repr<'a> {
    /// Parses a RED payload (see [`Packet::new_checked`]). Allocates one
    /// entry per redundant block, which the datagram bounds.
    pub fn parse(payload: &'a [u8]) -> Result<Self, WireError> {
        let p = Packet::new_checked(payload)?;
        Ok(Self {
            redundant: p.redundant().collect(),
            primary: p.primary(),
        })
    }

    /// Bytes [`emit`](Self::emit) writes.
    pub fn buffer_len(&self) -> usize {
        self.redundant
            .iter()
            .map(|b| REDUNDANT_HEADER_LEN + b.data.len())
            .sum::<usize>()
            + PRIMARY_HEADER_LEN
            + self.primary.data.len()
    }

    /// Whether every field fits its width: payload types of 7 bits,
    /// offsets of 14, redundant lengths of 10, at most [`MAX_BLOCKS`] blocks.
    pub fn check(&self) -> Result<(), EncodeError> {
        if self.redundant.len() >= MAX_BLOCKS {
            return Err(EncodeError::TooManyBlocks(self.redundant.len() + 1));
        }
        if self.primary.payload_type > MAX_PAYLOAD_TYPE {
            return Err(EncodeError::PayloadType(self.primary.payload_type));
        }
        for b in &self.redundant {
            if b.payload_type > MAX_PAYLOAD_TYPE {
                return Err(EncodeError::PayloadType(b.payload_type));
            }
            if b.timestamp_offset > MAX_TIMESTAMP_OFFSET {
                return Err(EncodeError::TimestampOffset(b.timestamp_offset));
            }
            if b.data.len() > MAX_BLOCK_LEN {
                return Err(EncodeError::BlockTooLong(b.data.len()));
            }
        }
        Ok(())
    }

    /// Writes the payload into `buf`, which must be exactly
    /// [`buffer_len`](Self::buffer_len) bytes, after [`check`](Self::check)ing
    /// the fields (nothing is written when that fails).
    ///
    /// # Panics
    /// On a buffer of the wrong size (a caller's sizing bug).
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), EncodeError> {
        self.check()?;
        assert_eq!(buf.len(), self.buffer_len(), "buffer sized by buffer_len");
        let (headers, mut data) = buf.split_at_mut(self.redundant.len() * REDUNDANT_HEADER_LEN);
        for (b, h) in self
            .redundant
            .iter()
            .zip(headers.chunks_exact_mut(REDUNDANT_HEADER_LEN))
        {
            let len = u16::try_from(b.data.len()).expect("checked: at most 1023");
            h[0] = F_BIT | b.payload_type;
            h[1] = (b.timestamp_offset >> 6) as u8;
            h[2] = ((b.timestamp_offset & 0x3f) as u8) << 2 | (len >> 8) as u8;
            h[3] = len as u8;
        }
        data[0] = self.primary.payload_type;
        data = &mut data[PRIMARY_HEADER_LEN..];
        for d in self
            .redundant
            .iter()
            .map(|b| b.data)
            .chain([self.primary.data])
        {
            let (out, rest) = data.split_at_mut(d.len());
            out.copy_from_slice(d);
            data = rest;
        }
        Ok(())
    }

    /// The payload as a new vector (see [`emit`](Self::emit)).
    pub fn to_vec(&self) -> Result<Vec<u8>, EncodeError> {
        let mut buf = vec![0u8; self.buffer_len()];
        self.emit(&mut buf)?;
        Ok(buf)
    }
}

/// A [`Repr`] field that does not fit its width on the wire (a caller's
/// mistake; peer input never produces one).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// A payload type above 127.
    #[error("payload type {0} does not fit 7 bits")]
    PayloadType(u8),
    /// A timestamp offset above [`MAX_TIMESTAMP_OFFSET`].
    #[error("timestamp offset {0} does not fit 14 bits (at most 16383)")]
    TimestampOffset(u16),
    /// A redundant block longer than [`MAX_BLOCK_LEN`].
    #[error("a redundant block of {0} bytes does not fit the 10-bit length (at most 1023)")]
    BlockTooLong(usize),
    /// More than [`MAX_BLOCKS`] blocks.
    #[error("{0} RED blocks: at most 255, the primary included")]
    TooManyBlocks(usize),
}

//= https://www.rfc-editor.org/rfc/rfc2198#section-3
//# block length: 10 bits Length in bytes of the corresponding data block
//# excluding header.
fn block_len(h: &[u8]) -> u16 {
    u16::from(h[2] & 0x03) << 8 | u16::from(h[3])
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Two redundant blocks (PT 101, 40 and 20 ticks old, "ab" and "c"),
    /// then the primary (PT 101, "xyz"): RFC 2198 §3's layout.
    #[rustfmt::skip]
    const GOLDEN: [u8; 4 + 4 + 1 + 2 + 1 + 3] = [
        0x80 | 101, 0x00, 40 << 2, 0x02, // F=1 PT 101, offset 40, length 2
        0x80 | 101, 0x00, 20 << 2, 0x01, // F=1 PT 101, offset 20, length 1
        101,                             // F=0 PT 101: the primary
        b'a', b'b', b'c', b'x', b'y', b'z',
    ];

    fn golden() -> Repr<'static> {
        Repr {
            redundant: vec![
                Block {
                    payload_type: 101,
                    timestamp_offset: 40,
                    data: b"ab",
                },
                Block {
                    payload_type: 101,
                    timestamp_offset: 20,
                    data: b"c",
                },
            ],
            primary: Primary {
                payload_type: 101,
                data: b"xyz",
            },
        }
    }

    #[test]
    fn golden_bytes_both_ways() {
        assert_eq!(Repr::parse(&GOLDEN), Ok(golden()));
        assert_eq!(golden().to_vec(), Ok(GOLDEN.to_vec()));
        let p = Packet::new_checked(&GOLDEN).unwrap();
        assert_eq!(p.redundant_count(), 2);
        assert_eq!(p.redundant().len(), 2);
    }

    #[test]
    fn wide_fields_use_every_bit() {
        // Offset 0x3fff and length 0x3ff straddle bytes 1-3 of the header.
        let data = vec![7u8; MAX_BLOCK_LEN];
        let r = Repr {
            redundant: vec![Block {
                payload_type: 127,
                timestamp_offset: MAX_TIMESTAMP_OFFSET,
                data: &data,
            }],
            primary: Primary {
                payload_type: 0,
                data: b"",
            },
        };
        let bytes = r.to_vec().unwrap();
        assert_eq!(bytes[..5], [0xff, 0xff, 0xff, 0xff, 0x00]);
        assert_eq!(Repr::parse(&bytes), Ok(r));
    }

    #[test]
    fn primary_only_is_one_byte_of_header() {
        let r = Repr::parse(&[96, 1, 2, 3]).unwrap();
        assert!(r.redundant.is_empty());
        assert_eq!(
            r.primary,
            Primary {
                payload_type: 96,
                data: &[1, 2, 3]
            }
        );
    }

    #[test]
    fn rejects_truncation_and_lying_lengths() {
        assert_eq!(
            Repr::parse(&[]),
            Err(WireError::Truncated { needed: 1, got: 0 })
        );
        // A redundant header cut short.
        assert_eq!(
            Repr::parse(&GOLDEN[..6]),
            Err(WireError::Truncated { needed: 8, got: 6 })
        );
        // Every header F=1: the chain never ends.
        assert_eq!(
            Repr::parse(&GOLDEN[..8]),
            Err(WireError::Truncated { needed: 9, got: 8 })
        );
        // Lengths that add up to more than the data present.
        let mut lie = GOLDEN;
        lie[3] = 0xff;
        assert!(matches!(
            Repr::parse(&lie),
            Err(WireError::Truncated { .. })
        ));
        // Exactly the redundant data and no primary data is fine (empty primary).
        assert_eq!(Repr::parse(&GOLDEN[..12]).unwrap().primary.data, b"");
        assert!(Repr::parse(&GOLDEN[..11]).is_err());
    }

    #[test]
    fn rejects_too_many_blocks() {
        let mut many = [0x80 | 101, 0, 4, 0].repeat(MAX_BLOCKS - 1);
        many.push(101);
        assert!(Repr::parse(&many).is_ok());
        let mut more = [0x80 | 101, 0, 4, 0].repeat(MAX_BLOCKS);
        more.push(101);
        assert!(matches!(Repr::parse(&more), Err(WireError::Malformed(_))));
    }

    #[test]
    fn emit_refuses_fields_wider_than_the_wire() {
        let long = vec![0u8; MAX_BLOCK_LEN + 1];
        let mut r = golden();
        r.redundant[0].timestamp_offset = MAX_TIMESTAMP_OFFSET + 1;
        assert_eq!(r.to_vec(), Err(EncodeError::TimestampOffset(16384)));
        let mut r = golden();
        r.redundant[1].data = &long;
        assert_eq!(r.to_vec(), Err(EncodeError::BlockTooLong(1024)));
        let mut r = golden();
        r.primary.payload_type = 128;
        assert_eq!(r.to_vec(), Err(EncodeError::PayloadType(128)));
        let mut r = golden();
        r.redundant = vec![r.redundant[0]; MAX_BLOCKS - 1];
        assert!(r.to_vec().is_ok());
        r.redundant.push(r.redundant[0]);
        assert_eq!(r.to_vec(), Err(EncodeError::TooManyBlocks(MAX_BLOCKS + 1)));
        // The primary is not limited to 10 bits.
        let mut r = golden();
        r.primary.data = &long;
        assert!(r.to_vec().is_ok());
    }

    fn any_block() -> impl Strategy<Value = (u8, u16, Vec<u8>)> {
        (
            0..=MAX_PAYLOAD_TYPE,
            0..=MAX_TIMESTAMP_OFFSET,
            proptest::collection::vec(any::<u8>(), 0..40),
        )
    }

    proptest! {
        #[test]
        fn round_trips(
            blocks in proptest::collection::vec(any_block(), 0..12),
            pt in 0..=MAX_PAYLOAD_TYPE,
            primary in proptest::collection::vec(any::<u8>(), 0..80),
        ) {
            let r = Repr {
                redundant: blocks.iter().map(|(payload_type, timestamp_offset, data)| Block {
                    payload_type: *payload_type, timestamp_offset: *timestamp_offset, data,
                }).collect(),
                primary: Primary { payload_type: pt, data: &primary },
            };
            let bytes = r.to_vec().unwrap();
            prop_assert_eq!(bytes.len(), r.buffer_len());
            prop_assert_eq!(Repr::parse(&bytes), Ok(r));
        }

        #[test]
        fn any_bytes_parse_to_a_canonical_form_or_fail(buf in proptest::collection::vec(any::<u8>(), 0..96)) {
            if let Ok(r) = Repr::parse(&buf) {
                // Nothing is ignored: what parses re-emits to the same bytes.
                prop_assert_eq!(r.to_vec().unwrap(), buf);
            }
        }
    }
}
