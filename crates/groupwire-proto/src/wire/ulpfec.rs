//! RFC 5109 ULPFEC packets (the generic XOR FEC of RTP that WebRTC's
//! libwebrtc and GStreamer's `rtpulpfecenc`/`rtpulpfecdec` speak), level 0
//! only: one XOR parity over up to 48 media packets picked by a mask. The
//! same scheme as [`super::rtp`]'s SMPTE 2022-1 (Leigh et al. §4.1's "XOR
//! of N data packets"), in the format real-time media stacks use.
//!
//! # FEC packet (RFC 5109 §7)
//!
//! The RTP payload of a packet whose payload type is the FEC one. It rides
//! in the media's own RTP stream (same SSRC, the next sequence number),
//! as libwebrtc and GStreamer send it (RFC 5109 §5 lets it go as a
//! separate stream or inside RED; the same-stream form is what the stock
//! tools interoperate with):
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |E|L|P|X|  CC   |M| PT recovery |            SN base            |  FEC header
//! |                          TS recovery                          |  (10 bytes)
//! |        length recovery        |      protection length        |  level 0
//! |             mask              | mask cont. (present if L = 1) |  header
//! |                    mask cont. (if L = 1)                      |
//! |  level 0 payload: XOR of the protected bodies ...             |
//! ```
//!
//! - `E` = 0 (no extension is defined); `L` = 1 for a 48-bit mask, else 16.
//! - P, X, CC, M, PT and TS recovery: the XOR of the protected packets'
//!   fields; length recovery: the XOR of their body lengths (everything
//!   after the 12-byte fixed header: CSRCs, extension, payload, padding).
//! - Mask bit `i` (most significant first) set: media packet `SN base + i`
//!   is protected. The level 0 payload is the XOR of the first `protection
//!   length` bytes of each protected body, zero-padded; a body longer than
//!   the protection length cannot be rebuilt whole from level 0.
//!
//! Parsing never panics and never reads past the buffer.

use super::WireError;

/// Bytes of the FEC header.
pub const FEC_HEADER_LEN: usize = 10;
/// Bytes of the level 0 header with a 16-bit mask (`L` = 0).
pub const LEVEL0_SHORT_LEN: usize = 4;
/// Bytes of the level 0 header with a 48-bit mask (`L` = 1).
pub const LEVEL0_LONG_LEN: usize = 8;
/// The most media packets one FEC packet can protect (a 48-bit mask).
pub const MAX_PROTECTED: usize = 48;

/// The recovery fields of an RFC 5109 FEC packet and its level 0 header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct UlpfecHeader {
    /// P, X and CC recovery (6 bits: P in bit 5, X in bit 4, CC below).
    pub pxcc_recovery: u8,
    /// Marker recovery.
    pub marker_recovery: bool,
    /// Payload type recovery (7 bits).
    pub pt_recovery: u8,
    /// The sequence number mask bit 0 stands for.
    pub sn_base: u16,
    /// Timestamp recovery.
    pub ts_recovery: u32,
    /// The XOR of the protected bodies' lengths.
    pub length_recovery: u16,
    /// Bytes of the level 0 payload.
    pub protection_len: u16,
    /// The mask, 48 bits in the low bits of a `u64`; bit 47 stands for
    /// `sn_base`, bit 46 for `sn_base + 1`, and so on.
    pub mask: u64,
}

impl UlpfecHeader {
    /// The protected sequence numbers, in order.
    pub fn protected(&self) -> impl Iterator<Item = u16> + '_ {
        (0..MAX_PROTECTED as u16)
            .filter(|i| self.mask >> (47 - i) & 1 == 1)
            .map(|i| self.sn_base.wrapping_add(i))
    }

    /// Bytes of the FEC header and the level 0 header.
    pub fn header_len(&self) -> usize {
        FEC_HEADER_LEN
            + if self.needs_long_mask() {
                LEVEL0_LONG_LEN
            } else {
                LEVEL0_SHORT_LEN
            }
    }

    /// Whether a protected packet lies beyond the short mask's 16
    /// (`L` = 1 on the wire).
    pub fn needs_long_mask(&self) -> bool {
        self.mask & 0xffff_ffff != 0
    }
}

/// An RFC 5109 FEC packet's RTP payload, read in place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UlpfecPacket<'a> {
    /// The headers.
    pub header: UlpfecHeader,
    /// The level 0 payload (`protection_len` bytes).
    pub payload: &'a [u8],
}

impl<'a> UlpfecPacket<'a> {
    /// Reads the RTP payload of a FEC packet. Fails on `E` = 1, a mask
    /// that protects nothing, or fewer bytes than the headers and the
    /// protection length need. Bytes after the level 0 payload (further
    /// levels) are ignored.
    pub fn parse(buf: &'a [u8]) -> Result<Self, WireError> {
        let truncated = |needed: usize| WireError::Truncated {
            needed,
            got: buf.len(),
        };
        let head = buf.get(..FEC_HEADER_LEN).ok_or(truncated(FEC_HEADER_LEN))?;
        if head[0] & 0x80 != 0 {
            return Err(WireError::Malformed("ULPFEC E bit set"));
        }
        let long = head[0] & 0x40 != 0;
        let level_len = if long {
            LEVEL0_LONG_LEN
        } else {
            LEVEL0_SHORT_LEN
        };
        let level = buf
            .get(FEC_HEADER_LEN..FEC_HEADER_LEN + level_len)
            .ok_or(truncated(FEC_HEADER_LEN + level_len))?;
        let protection_len = u16::from_be_bytes([level[0], level[1]]);
        let mask = level[2..].iter().fold(0u64, |m, b| m << 8 | u64::from(*b))
            << (if long { 0 } else { 32 });
        if mask == 0 {
            return Err(WireError::Malformed("ULPFEC mask protects nothing"));
        }
        let start = FEC_HEADER_LEN + level_len;
        let end = start + usize::from(protection_len);
        let payload = buf.get(start..end).ok_or(truncated(end))?;
        Ok(Self {
            header: UlpfecHeader {
                pxcc_recovery: head[0] & 0x3f,
                marker_recovery: head[1] & 0x80 != 0,
                pt_recovery: head[1] & 0x7f,
                sn_base: u16::from_be_bytes([head[2], head[3]]),
                ts_recovery: u32::from_be_bytes([head[4], head[5], head[6], head[7]]),
                length_recovery: u16::from_be_bytes([head[8], head[9]]),
                protection_len,
                mask,
            },
            payload,
        })
    }

    /// Bytes [`emit`](Self::emit) writes: the headers and the payload.
    pub fn buffer_len(&self) -> usize {
        self.header.header_len() + self.payload.len()
    }

    /// Writes the headers and the payload into `buf[..buffer_len()]`. The
    /// protection length written is the payload's length; the short mask is
    /// used when the protected packets fit in 16.
    ///
    /// # Panics
    /// If `buf` is shorter than [`buffer_len`](Self::buffer_len), or the
    /// payload is longer than 65535 bytes (a caller's sizing bug).
    pub fn emit(&self, buf: &mut [u8]) {
        let h = &self.header;
        let long = h.needs_long_mask();
        buf[0] = u8::from(long) << 6 | (h.pxcc_recovery & 0x3f);
        buf[1] = u8::from(h.marker_recovery) << 7 | (h.pt_recovery & 0x7f);
        buf[2..4].copy_from_slice(&h.sn_base.to_be_bytes());
        buf[4..8].copy_from_slice(&h.ts_recovery.to_be_bytes());
        buf[8..10].copy_from_slice(&h.length_recovery.to_be_bytes());
        let plen = u16::try_from(self.payload.len()).expect("protection length fits 16 bits");
        // The level-0 header (RFC 5109 §7.4): protection length, then the
        // mask, 2 or 6 bytes.
        let level0 = FEC_HEADER_LEN;
        buf[level0..level0 + 2].copy_from_slice(&plen.to_be_bytes());
        let mask = h.mask.to_be_bytes();
        // The 48-bit mask's first 16 bits, or all 48.
        let mask = &mask[2..if long { 8 } else { 4 }];
        let at = level0 + 2;
        buf[at..at + mask.len()].copy_from_slice(mask);
        let start = at + mask.len();
        buf[start..start + self.payload.len()].copy_from_slice(self.payload);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn reads_what_gstreamer_sends() {
        // rtpulpfecenc's FEC over media 0 and 1 (mask c000, protection
        // length 21), as captured: E = L = 0, PT recovery 0, M recovery 0.
        let mut p = vec![0x00, 0x00, 0x00, 0x00, 0, 0, 0x0b, 0xb8, 0x00, 0x01];
        p.extend_from_slice(&[0x00, 0x15, 0xc0, 0x00]);
        p.extend_from_slice(&[0xaa; 21]);
        let f = UlpfecPacket::parse(&p).expect("parses");
        assert_eq!(f.header.sn_base, 0);
        assert_eq!(f.header.ts_recovery, 3000);
        assert_eq!(f.header.length_recovery, 1);
        assert_eq!(f.protected_seqs(), vec![0, 1]);
        let mut out = vec![0u8; f.buffer_len()];
        f.emit(&mut out);
        assert_eq!(out, p);
    }

    #[test]
    fn bad_headers_are_errors() {
        let ok = [0u8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0x80, 0, 7];
        assert!(UlpfecPacket::parse(&ok).is_ok());
        for n in 0..ok.len() {
            assert!(UlpfecPacket::parse(&ok[..n]).is_err(), "{n} bytes");
        }
        let mut e = ok;
        e[0] |= 0x80;
        assert!(UlpfecPacket::parse(&e).is_err(), "E bit");
        let mut m = ok;
        m[12] = 0;
        assert!(UlpfecPacket::parse(&m).is_err(), "empty mask");
        let mut long = ok;
        long[0] |= 0x40;
        assert!(UlpfecPacket::parse(&long).is_err(), "long mask, too short");
    }

    impl UlpfecPacket<'_> {
        fn protected_seqs(&self) -> Vec<u16> {
            self.header.protected().collect()
        }
    }

    proptest! {
        #[test]
        fn round_trips(
            pxcc in 0u8..64, m: bool, pt in 0u8..128, sn_base: u16, ts: u32, lr: u16,
            mask in 1u64..(1 << 48), payload in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let f = UlpfecPacket {
                header: UlpfecHeader {
                    pxcc_recovery: pxcc,
                    marker_recovery: m,
                    pt_recovery: pt,
                    sn_base,
                    ts_recovery: ts,
                    length_recovery: lr,
                    protection_len: payload.len() as u16,
                    mask,
                },
                payload: &payload,
            };
            let mut buf = vec![0u8; f.buffer_len()];
            f.emit(&mut buf);
            let back = UlpfecPacket::parse(&buf).expect("what we emit parses");
            prop_assert_eq!(back, f);
            prop_assert!(back.header.protected().count() == mask.count_ones() as usize);
        }

        #[test]
        fn any_bytes_parse_or_fail_cleanly(buf in proptest::collection::vec(any::<u8>(), 0..80)) {
            if let Ok(f) = UlpfecPacket::parse(&buf) {
                prop_assert!(f.buffer_len() <= buf.len());
                let mut out = vec![0u8; f.buffer_len()];
                f.emit(&mut out);
                prop_assert_eq!(UlpfecPacket::parse(&out), Ok(f));
            }
        }
    }
}
