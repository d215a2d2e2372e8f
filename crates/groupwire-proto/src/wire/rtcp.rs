//! RTCP (RFC 3550 §6) as far as groupwire speaks it: walking a compound
//! packet, the empty receiver report that opens one, and APP packets
//! (§6.7), which carry AFEC's feedback when its data travels as RTP/RED
//! (see [`afec::ControlRepr::emit_rtcp`](super::afec::ControlRepr::emit_rtcp)).
//!
//! # Common header (RFC 3550 §6.4)
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |V=2|P| RC/sub  |      PT       |   length (32-bit words - 1)   |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  body ...                                                     |
//! ```
//!
//! # APP packet (RFC 3550 §6.7)
//!
//! ```text
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |V=2|P| subtype |   PT=APP=204  |             length            |
//! |                           SSRC/CSRC                           |
//! |                          name (ASCII)                         |
//! |                   application-dependent data                ...
//! ```
//!
//! RTP and RTCP share a port the RFC 5761 way: a datagram whose second
//! byte is 192 to 223 ([`is_rtcp`]) is RTCP, so RTP payload types 64 to 95
//! are not used on such a port.
//!
//! Parsing never panics and never reads past the buffer.

use super::WireError;

/// RTCP sender report.
pub const PT_SR: u8 = 200;
/// RTCP receiver report.
pub const PT_RR: u8 = 201;
/// RTCP application-defined packet.
pub const PT_APP: u8 = 204;
/// Bytes of the common header.
pub const HEADER_LEN: usize = 4;
/// Bytes of a receiver report without report blocks.
pub const EMPTY_RR_LEN: usize = 8;
/// Bytes of an APP packet before its data.
pub const APP_HEADER_LEN: usize = 12;

/// Whether `buf` is RTCP rather than RTP when both share a port.
//= https://www.rfc-editor.org/rfc/rfc5761#section-4
//# if the value of the second octet of the packet is between 192 and 223
//# (inclusive), the packet is RTCP
pub fn is_rtcp(buf: &[u8]) -> bool {
    buf.len() >= 2 && buf[0] >> 6 == 2 && (192..=223).contains(&buf[1])
}

/// One packet of a compound, borrowing its body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet<'a> {
    /// The 5-bit field after P: report count, or an APP packet's subtype.
    pub count: u8,
    /// Packet type (200 to 204 and beyond).
    pub packet_type: u8,
    /// What follows the common header, padding removed.
    pub body: &'a [u8],
}

/// Iterator over the packets of a compound; see [`packets`].
#[derive(Clone, Debug)]
pub struct Packets<'a> {
    rest: &'a [u8],
}

/// The packets of compound `buf`, in order. An item is `Err` where a
/// header is cut short, names a version other than 2, claims more bytes
/// than remain, or pads by more than its body; iteration ends after it.
pub fn packets(buf: &[u8]) -> Packets<'_> {
    Packets { rest: buf }
}

impl<'a> Iterator for Packets<'a> {
    type Item = Result<Packet<'a>, WireError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let buf = self.rest;
        let r = parse_one(buf);
        self.rest = match &r {
            Ok((_, len)) => &buf[*len..],
            Err(_) => &[],
        };
        Some(r.map(|(p, _)| p))
    }
}

fn parse_one(buf: &[u8]) -> Result<(Packet<'_>, usize), WireError> {
    let Some(h) = buf.first_chunk::<HEADER_LEN>() else {
        return Err(WireError::Truncated {
            needed: HEADER_LEN,
            got: buf.len(),
        });
    };
    let version = h[0] >> 6;
    if version != 2 {
        return Err(WireError::UnsupportedVersion(version));
    }
    let len = 4 * (usize::from(u16::from_be_bytes([h[2], h[3]])) + 1);
    let Some(whole) = buf.get(..len) else {
        return Err(WireError::Truncated {
            needed: len,
            got: buf.len(),
        });
    };
    let mut body = &whole[HEADER_LEN..];
    if h[0] & 0x20 != 0 {
        let pad = usize::from(
            *body
                .last()
                .ok_or(WireError::Malformed("RTCP padding in an empty packet"))?,
        );
        if pad == 0 || pad > body.len() {
            return Err(WireError::Malformed("RTCP padding count out of range"));
        }
        body = &body[..body.len() - pad];
    }
    Ok((
        Packet {
            count: h[0] & 0x1f,
            packet_type: h[1],
            body,
        },
        len,
    ))
}

/// Writes a receiver report with no report blocks from `ssrc` into
/// `buf[..EMPTY_RR_LEN]`: the first packet of a compound (RFC 3550 §6.1)
/// whose sender has nothing to report per source.
///
/// # Panics
/// If `buf` is shorter than [`EMPTY_RR_LEN`].
pub fn emit_empty_rr(ssrc: u32, buf: &mut [u8]) {
    buf[..4].copy_from_slice(&[0x80, PT_RR, 0, 1]);
    buf[4..EMPTY_RR_LEN].copy_from_slice(&ssrc.to_be_bytes());
}

/// An APP packet, borrowing its data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct App<'a> {
    /// Application-defined subtype (5 bits).
    pub subtype: u8,
    /// The sender's SSRC.
    pub ssrc: u32,
    /// Four ASCII characters naming the application.
    pub name: [u8; 4],
    /// Application data: a whole number of 32-bit words.
    pub data: &'a [u8],
}

impl<'a> App<'a> {
    /// Reads an APP packet out of `p`; fails on another packet type or a
    /// body shorter than the SSRC and name.
    pub fn parse(p: &Packet<'a>) -> Result<Self, WireError> {
        if p.packet_type != PT_APP {
            return Err(WireError::Malformed("not an RTCP APP packet"));
        }
        let Some((head, data)) = p.body.split_first_chunk::<8>() else {
            return Err(WireError::Truncated {
                needed: APP_HEADER_LEN,
                got: HEADER_LEN + p.body.len(),
            });
        };
        Ok(Self {
            subtype: p.count,
            ssrc: u32::from_be_bytes([head[0], head[1], head[2], head[3]]),
            name: [head[4], head[5], head[6], head[7]],
            data,
        })
    }

    /// Bytes [`emit`](Self::emit) writes.
    pub fn buffer_len(&self) -> usize {
        APP_HEADER_LEN + self.data.len()
    }

    /// Writes the packet into `buf`, exactly [`buffer_len`](Self::buffer_len) bytes.
    ///
    /// # Panics
    /// On a buffer of the wrong size, data that is not a whole number of
    /// 32-bit words, more than 256 KiB of it, or a subtype over 31 (a
    /// caller's bugs).
    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(buf.len(), self.buffer_len(), "buffer sized by buffer_len");
        assert!(self.data.len() % 4 == 0, "APP data is whole 32-bit words");
        assert!(self.subtype < 32, "APP subtype is 5 bits");
        let words = u16::try_from(buf.len() / 4 - 1).expect("APP packet under 256 KiB");
        buf[0] = 0x80 | self.subtype;
        buf[1] = PT_APP;
        buf[2..4].copy_from_slice(&words.to_be_bytes());
        buf[4..8].copy_from_slice(&self.ssrc.to_be_bytes());
        buf[8..12].copy_from_slice(&self.name);
        buf[APP_HEADER_LEN..].copy_from_slice(self.data);
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn empty_rr_then_app_walk_as_a_compound() {
        let mut buf = [0u8; EMPTY_RR_LEN + APP_HEADER_LEN + 4];
        emit_empty_rr(0xdead_beef, &mut buf[..EMPTY_RR_LEN]);
        App {
            subtype: 3,
            ssrc: 7,
            name: *b"GWAF",
            data: &[1, 2, 3, 4],
        }
        .emit(&mut buf[EMPTY_RR_LEN..]);
        assert_eq!(buf[..8], [0x80, 201, 0, 1, 0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(buf[8..12], [0x83, 204, 0, 3]);
        assert!(is_rtcp(&buf));
        let ps: Vec<_> = packets(&buf).collect::<Result<_, _>>().unwrap();
        assert_eq!(ps.len(), 2);
        assert_eq!((ps[0].packet_type, ps[0].count), (PT_RR, 0));
        let app = App::parse(&ps[1]).unwrap();
        assert_eq!(
            (app.subtype, app.ssrc, &app.name, app.data),
            (3, 7, b"GWAF", &[1u8, 2, 3, 4][..])
        );
        assert!(App::parse(&ps[0]).is_err());
    }

    #[test]
    fn rtp_is_not_rtcp() {
        // RTP with PT 100 (second byte 100 or 228 with the marker).
        assert!(!is_rtcp(&[0x80, 100, 0, 0]));
        assert!(!is_rtcp(&[0x80, 0x80 | 100, 0, 0]));
        assert!(!is_rtcp(&[0x01, 201]));
        assert!(!is_rtcp(&[0x80]));
    }

    #[test]
    fn rejects_lengths_that_lie_and_bad_padding() {
        // Claims two words of body, has one.
        let r: Vec<_> = packets(&[0x80, 201, 0, 2, 0, 0, 0, 1]).collect();
        assert!(matches!(r[..], [Err(WireError::Truncated { .. })]));
        // Padding of 9 in an 8-byte body.
        let r: Vec<_> = packets(&[0xa0, 204, 0, 2, 0, 0, 0, 0, 0, 0, 0, 9]).collect();
        assert!(matches!(r[..], [Err(WireError::Malformed(_))]));
        // Version 1.
        let r: Vec<_> = packets(&[0x40, 201, 0, 0]).collect();
        assert!(matches!(r[..], [Err(WireError::UnsupportedVersion(1))]));
        // A valid packet, then garbage: the first is read, then the error.
        let r: Vec<_> = packets(&[0x80, 201, 0, 1, 0, 0, 0, 1, 0x80]).collect();
        assert!(matches!(r[..], [Ok(_), Err(WireError::Truncated { .. })]));
        // Padding removed from the body.
        let p = packets(&[
            0xa0, 204, 0, 3, 0, 0, 0, 1, b'G', b'W', b'A', b'F', 0, 0, 0, 4,
        ])
        .next()
        .unwrap()
        .unwrap();
        assert_eq!(App::parse(&p).unwrap().data, b"");
    }

    proptest! {
        #[test]
        fn app_round_trips(subtype in 0u8..32, ssrc: u32, name: [u8; 4], words in proptest::collection::vec(any::<[u8; 4]>(), 0..20)) {
            let data: Vec<u8> = words.concat();
            let app = App { subtype, ssrc, name, data: &data };
            let mut buf = vec![0u8; app.buffer_len()];
            app.emit(&mut buf);
            let p = packets(&buf).next().unwrap().unwrap();
            prop_assert_eq!(App::parse(&p), Ok(app));
        }

        #[test]
        fn any_bytes_walk_without_panic_and_stay_inside(buf in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut total = 0;
            for p in packets(&buf) {
                let Ok(p) = p else { break };
                total += HEADER_LEN + p.body.len();
                let _ = App::parse(&p);
            }
            prop_assert!(total <= buf.len());
        }
    }
}
