//! RTP (RFC 3550) and SMPTE 2022-1 FEC packets: the standard wire format of
//! groupwire's XOR parity FEC (Leigh et al. §4.1), which stock tools speak
//! (GStreamer's `rtpst2022-1-fecenc`/`rtpst2022-1-fecdec`, FFmpeg's
//! `prompeg`).
//!
//! # Media packet
//!
//! A plain RTP packet: the 12-byte fixed header, then the *body*
//! (everything after the fixed header: CSRC list, header extension,
//! payload and padding).
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |V=2|P|X|  CC   |M|     PT      |       sequence number         |
//! |                           timestamp                           |
//! |                             SSRC                              |
//! |  body ...                                                     |
//! ```
//!
//! # FEC packet (SMPTE 2022-1 §8, from RFC 2733 §7 with its extension)
//!
//! An RTP header whose P, X, CC and M fields are *recovery* values (the
//! XOR of the protected packets' fields, RFC 2733 §7.1), then a 16-byte FEC
//! header, then the XOR of the protected packets' bodies, each read as
//! zero-padded to the longest:
//!
//! ```text
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |      SNBase low bits          |        length recovery        |
//! |E| PT recovery |                    mask (0)                   |
//! |                          TS recovery                          |
//! |N|D|type |index|    offset     |      NA       |SNBase ext bits|
//! |  XOR of the protected bodies ...                              |
//! ```
//!
//! - SNBase: the lowest media sequence number protected; `offset` the step
//!   between protected sequence numbers and `NA` their count. A *row* FEC
//!   packet (`D` = 1) covers `L` consecutive packets (offset 1, NA = L); a
//!   *column* packet (`D` = 0) covers `D` packets `L` apart (offset L,
//!   NA = D).
//! - `E` = 1 (the extended header), `mask` = 0, `N` = 0, `type` = 0 (XOR),
//!   `index` = 0, SNBase ext bits = 0 (16-bit media sequence numbers), as
//!   SMPTE 2022-1 requires.
//! - Length recovery: the XOR of the protected bodies' lengths.
//!
//! **Body, not payload.** RFC 2733 protects everything after the fixed
//! header; GStreamer XORs only the RTP payload (no CSRCs, extension or
//! padding). For media without CSRCs, extension or padding (CC = 0, X = 0,
//! P = 0, what groupwire sends and what SMPTE 2022-1 streams carry) the two
//! are the same bytes; groupwire follows the RFC, so a stream that does use
//! them is still rebuilt exactly, CSRCs and all.
//!
//! Parsing never panics and never reads past the buffer.

use super::WireError;

/// Bytes of the fixed RTP header.
pub const RTP_HEADER_LEN: usize = 12;
/// Bytes of the SMPTE 2022-1 FEC header after the RTP header.
pub const FEC_HEADER_LEN: usize = 16;
/// Bytes before a FEC packet's parity.
pub const FEC_PREFIX_LEN: usize = RTP_HEADER_LEN + FEC_HEADER_LEN;
/// The RTP version every packet carries.
pub const RTP_VERSION: u8 = 2;

/// The fields of an RTP fixed header that XOR parity protects, plus the
/// sequence number and SSRC.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct RtpHeader {
    /// Padding bit.
    pub padding: bool,
    /// Extension bit.
    pub extension: bool,
    /// CSRC count (4 bits).
    pub csrc_count: u8,
    /// Marker bit.
    pub marker: bool,
    /// Payload type (7 bits).
    pub payload_type: u8,
    /// Sequence number.
    pub seq: u16,
    /// Timestamp.
    pub timestamp: u32,
    /// Synchronisation source.
    pub ssrc: u32,
}

impl RtpHeader {
    /// Reads the fixed header of `buf` and returns it with the body.
    /// Fails on fewer than 12 bytes or a version other than 2.
    pub fn parse(buf: &[u8]) -> Result<(Self, &[u8]), WireError> {
        let Some((head, body)) = buf.split_first_chunk::<RTP_HEADER_LEN>() else {
            return Err(WireError::Truncated {
                needed: RTP_HEADER_LEN,
                got: buf.len(),
            });
        };
        let version = head[0] >> 6;
        if version != RTP_VERSION {
            return Err(WireError::UnsupportedVersion(version));
        }
        let header = Self {
            padding: head[0] & 0x20 != 0,
            extension: head[0] & 0x10 != 0,
            csrc_count: head[0] & 0x0f,
            marker: head[1] & 0x80 != 0,
            payload_type: head[1] & 0x7f,
            seq: u16::from_be_bytes([head[2], head[3]]),
            timestamp: u32::from_be_bytes([head[4], head[5], head[6], head[7]]),
            ssrc: u32::from_be_bytes([head[8], head[9], head[10], head[11]]),
        };
        Ok((header, body))
    }

    /// Writes the fixed header into `buf[..12]` (`payload_type` and
    /// `csrc_count` are masked to their widths).
    ///
    /// # Panics
    /// If `buf` is shorter than 12 bytes (a caller's sizing bug).
    pub fn emit(&self, buf: &mut [u8]) {
        buf[0] = RTP_VERSION << 6
            | u8::from(self.padding) << 5
            | u8::from(self.extension) << 4
            | (self.csrc_count & 0x0f);
        buf[1] = u8::from(self.marker) << 7 | (self.payload_type & 0x7f);
        buf[2..4].copy_from_slice(&self.seq.to_be_bytes());
        buf[4..8].copy_from_slice(&self.timestamp.to_be_bytes());
        buf[8..12].copy_from_slice(&self.ssrc.to_be_bytes());
    }

    /// A whole packet: this header, then `body`.
    pub fn to_packet(&self, body: &[u8]) -> Vec<u8> {
        let mut out = vec![0u8; RTP_HEADER_LEN + body.len()];
        self.emit(&mut out);
        out[RTP_HEADER_LEN..].copy_from_slice(body);
        out
    }

    /// The RTP payload inside `body` (after CSRCs and extension, before
    /// padding), as a receiving application reads it. Fails where the
    /// counts in the header run past the body.
    pub fn payload<'a>(&self, body: &'a [u8]) -> Result<&'a [u8], WireError> {
        let truncated = |needed: usize| WireError::Truncated {
            needed: RTP_HEADER_LEN + needed,
            got: RTP_HEADER_LEN + body.len(),
        };
        let mut start = 4 * usize::from(self.csrc_count);
        if self.extension {
            let words = body.get(start + 2..start + 4).ok_or(truncated(start + 4))?;
            start += 4 + 4 * usize::from(u16::from_be_bytes([words[0], words[1]]));
        }
        let mut end = body.len();
        if self.padding {
            let pad = usize::from(*body.last().ok_or(truncated(1))?);
            if pad == 0 {
                return Err(WireError::Malformed("RTP padding count of zero"));
            }
            end = end.checked_sub(pad).ok_or(truncated(pad))?;
        }
        body.get(start..end).ok_or(truncated(start.max(end)))
    }
}

/// The SMPTE 2022-1 FEC header (see the [module docs](self)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FecHeader {
    /// The lowest protected media sequence number.
    pub sn_base: u16,
    /// XOR of the protected bodies' lengths.
    pub length_recovery: u16,
    /// XOR of the protected payload types (7 bits).
    pub pt_recovery: u8,
    /// XOR of the protected timestamps.
    pub ts_recovery: u32,
    /// `true` for a row packet (`D` bit set), `false` for a column packet.
    pub row: bool,
    /// Step between protected sequence numbers (1 for a row, L for a column).
    pub offset: u8,
    /// How many packets are protected (L for a row, D for a column).
    pub na: u8,
}

/// A parsed FEC packet: its RTP header (P, X, CC, M are recovery values),
/// FEC header and parity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FecPacket<'a> {
    /// The RTP header; `padding`, `extension`, `csrc_count` and `marker`
    /// are the XOR of the protected packets' fields (RFC 2733 §7.1).
    pub rtp: RtpHeader,
    /// The FEC header.
    pub fec: FecHeader,
    /// The XOR of the protected bodies.
    pub parity: &'a [u8],
}

impl<'a> FecPacket<'a> {
    /// Parses a FEC packet. The parity starts right after the two fixed
    /// headers whatever CC and X say (they are recovery values). Rejects
    /// `E` = 0, a non-zero mask, `N` = 1, a type other than XOR, a non-zero
    /// index or SNBase extension, `NA` = 0, `offset` = 0 and a row packet
    /// with `offset` other than 1. (Whether the length recovery fits the
    /// parity is known only at a rebuild, from the other packets' lengths.)
    pub fn parse(buf: &'a [u8]) -> Result<Self, WireError> {
        let (rtp, body) = RtpHeader::parse(buf)?;
        let Some((h, parity)) = body.split_first_chunk::<FEC_HEADER_LEN>() else {
            return Err(WireError::Truncated {
                needed: FEC_PREFIX_LEN,
                got: buf.len(),
            });
        };
        let malformed = |why| Err(WireError::Malformed(why));
        if h[4] & 0x80 == 0 {
            return malformed("FEC header E bit clear (only the extended header is spoken)");
        }
        if h[5..8] != [0, 0, 0] {
            return malformed("FEC mask must be zero");
        }
        let byte12 = h[12];
        if byte12 & 0x80 != 0 {
            return malformed("FEC N bit set");
        }
        if byte12 & 0x3f != 0 {
            return malformed("FEC type or index is not XOR (0)");
        }
        if h[15] != 0 {
            return malformed("FEC SNBase extension bits must be zero");
        }
        let fec = FecHeader {
            sn_base: u16::from_be_bytes([h[0], h[1]]),
            length_recovery: u16::from_be_bytes([h[2], h[3]]),
            pt_recovery: h[4] & 0x7f,
            ts_recovery: u32::from_be_bytes([h[8], h[9], h[10], h[11]]),
            row: byte12 & 0x40 != 0,
            offset: h[13],
            na: h[14],
        };
        if fec.na == 0 || fec.offset == 0 {
            return malformed("FEC NA and offset must be at least 1");
        }
        if fec.row && fec.offset != 1 {
            return malformed("a row FEC packet must have offset 1");
        }
        Ok(Self { rtp, fec, parity })
    }

    /// Bytes [`emit`](Self::emit) writes.
    pub fn buffer_len(&self) -> usize {
        FEC_PREFIX_LEN + self.parity.len()
    }

    /// Writes the whole packet into `buf[..self.buffer_len()]`.
    ///
    /// # Panics
    /// If `buf` is shorter than [`buffer_len`](Self::buffer_len).
    pub fn emit(&self, buf: &mut [u8]) {
        self.rtp.emit(buf);
        let f = &self.fec;
        let h = &mut buf[RTP_HEADER_LEN..FEC_PREFIX_LEN];
        h[0..2].copy_from_slice(&f.sn_base.to_be_bytes());
        h[2..4].copy_from_slice(&f.length_recovery.to_be_bytes());
        h[4] = 0x80 | (f.pt_recovery & 0x7f);
        h[5..8].fill(0);
        h[8..12].copy_from_slice(&f.ts_recovery.to_be_bytes());
        h[12] = u8::from(f.row) << 6;
        h[13] = f.offset;
        h[14] = f.na;
        h[15] = 0;
        buf[FEC_PREFIX_LEN..self.buffer_len()].copy_from_slice(self.parity);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn any_header() -> impl Strategy<Value = RtpHeader> {
        (
            any::<(bool, bool, bool)>(),
            0u8..16,
            0u8..128,
            any::<(u16, u32, u32)>(),
        )
            .prop_map(
                |(
                    (padding, extension, marker),
                    csrc_count,
                    payload_type,
                    (seq, timestamp, ssrc),
                )| {
                    RtpHeader {
                        padding,
                        extension,
                        csrc_count,
                        marker,
                        payload_type,
                        seq,
                        timestamp,
                        ssrc,
                    }
                },
            )
    }

    proptest! {
        #[test]
        fn rtp_round_trips(h in any_header(), body in proptest::collection::vec(any::<u8>(), 0..64)) {
            let pkt = h.to_packet(&body);
            let (back, b) = RtpHeader::parse(&pkt).unwrap();
            prop_assert_eq!(back, h);
            prop_assert_eq!(b, &body[..]);
        }

        #[test]
        fn fec_round_trips(
            rtp in any_header(),
            (sn_base, length_recovery, ts_recovery) in any::<(u16, u16, u32)>(),
            pt_recovery in 0u8..128,
            row in any::<bool>(),
            offset in 1u8..=255,
            na in 1u8..=255,
            parity in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let fec = FecHeader {
                sn_base, length_recovery, pt_recovery, ts_recovery, row,
                offset: if row { 1 } else { offset }, na,
            };
            let p = FecPacket { rtp, fec, parity: &parity };
            let mut buf = vec![0u8; p.buffer_len()];
            p.emit(&mut buf);
            prop_assert_eq!(FecPacket::parse(&buf).unwrap(), p);
        }

        #[test]
        fn any_bytes_parse_or_fail_without_panic(buf in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok((h, body)) = RtpHeader::parse(&buf) {
                let _ = h.payload(body);
            }
            let _ = FecPacket::parse(&buf);
        }
    }

    #[test]
    fn payload_skips_csrcs_extension_and_padding() {
        let h = RtpHeader {
            padding: true,
            extension: true,
            csrc_count: 1,
            ..RtpHeader::default()
        };
        // CSRC, extension header (1 word), extension word, payload, padding of 3.
        let body = [
            1, 2, 3, 4, 0xbe, 0xde, 0, 1, 9, 9, 9, 9, b'h', b'i', 0, 0, 3,
        ];
        assert_eq!(h.payload(&body), Ok(&b"hi"[..]));
        assert!(h.payload(&body[..6]).is_err());
        let zero_pad = RtpHeader {
            padding: true,
            ..RtpHeader::default()
        };
        assert!(zero_pad.payload(&[1, 0]).is_err());
        assert!(zero_pad.payload(&[1, 9]).is_err());
    }

    #[test]
    fn gstreamer_row_header_bytes_parse() {
        // A row FEC packet as rtpst2022-1-fecenc writes it (queue_fec_packet):
        // SNBase 0x1234, length recovery 0x0010, E=1 PT 33, mask 0, TS
        // 0xdeadbeef, D=1, offset 1, NA 3.
        let mut pkt = RtpHeader {
            payload_type: 96,
            ..RtpHeader::default()
        }
        .to_packet(&[
            0x12,
            0x34,
            0x00,
            0x10,
            0x80 | 33,
            0,
            0,
            0,
            0xde,
            0xad,
            0xbe,
            0xef,
            0x40,
            1,
            3,
            0,
        ]);
        pkt.extend_from_slice(&[7; 16]);
        let p = FecPacket::parse(&pkt).unwrap();
        assert!(p.fec.row);
        assert_eq!((p.fec.sn_base, p.fec.na, p.fec.offset), (0x1234, 3, 1));
        assert_eq!((p.fec.pt_recovery, p.fec.ts_recovery), (33, 0xdead_beef));
        assert_eq!(p.parity.len(), 16);
    }
}
