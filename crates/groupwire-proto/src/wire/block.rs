//! Block-FEC datagrams (GENEVA): source and repair symbols, and the
//! receiver's SYN report.
//!
//! Both follow the common [`header`]. All fields are big-endian. This format
//! is groupwire's own and interoperates with nothing else by design.
//!
//! # Data packet (`kind` = [`Kind::BlockData`])
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  common header: version=1, kind=8, flags, reserved, session   |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                 packet sequence number (seq)                  |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                           block id                            |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                    data sequence number                       |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |               sender's RTT estimate (microseconds)            |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |     index     |       k       |       m       |   reserved    |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                   checksum (CRC-32, see below)                |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  payload: the application datagram, or a repair symbol ...
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! - `flags` bit 0 ([`FLAG_REPAIR`]): a repair symbol; otherwise a source packet.
//! - `flags` bit 1 ([`FLAG_UNCHECKED`]): the checksum field is zero and was
//!   not computed, because an outer layer authenticates every datagram
//!   (the tunnel's `--key-file` AEAD, whose tag catches any corruption a
//!   CRC would). Only a receiver that runs under such a layer accepts it
//!   ([`DataRepr::parse_with`]); any other counts it as corrupt.
//! - `seq` numbers every packet, source and repair, in sending order: the
//!   receiver counts losses from its gaps and echoes the highest in its
//!   report so the sender can time the round trip (GENEVA §3.2.2: "keeping
//!   pairs of the sequence number and its transmitted time").
//! - `block` numbers source blocks. `index` is the symbol's place in the
//!   block: `0..k` for source packets, `k..k+m` for repair symbols.
//! - `data sequence number` numbers source packets; in a repair packet it
//!   is the data sequence number of the block's first source packet.
//! - `k` and `m` are carried by repair packets only (a source packet is sent
//!   before its block is closed, when the block's size may not be known
//!   yet: the tunnel closes blocks early at low rates); source packets carry 0.
//!   `1 <= k`, `k + m <= 255`, `k <= index < k + m`.
//! - The RTT estimate lets the receiver group losses into TFRC loss events
//!   (RFC 5348 §5.2); 0 means unknown.
//!
//! The protected symbol of source packet `i` is its payload's length (2
//! bytes, big-endian), the CRC-32 of the payload (4 bytes, big-endian),
//! then the payload, zero-padded to the block's symbol length
//! ([`SYMBOL_PREFIX`]); a repair packet's payload is a whole symbol, so
//! every repair packet of a block has the same payload length. A rebuilt
//! source carries its own checksum, so the receiver verifies it before
//! handing it out.
//!
//! # Checksums
//!
//! Every data packet and report carries a CRC-32 (IEEE 802.3 polynomial,
//! as in Ethernet and zlib; `crc32fast`) over the whole datagram with the
//! checksum field itself read as zeros. [`DataRepr::parse`] and
//! [`ReportRepr::parse`] reject a mismatch with
//! [`WireError::Checksum`], so a corrupted source is dropped (and may be
//! rebuilt from the rest of its block) and a corrupted repair never enters
//! a decode. A CRC catches every burst of up to 32 flipped bits and all
//! but 2^-32 of other corruption; it is **no** protection against a
//! sender who computes it (the tunnel's `--key-file` mode is).
//!
//! # Versions
//!
//! Kinds 3 and 4 were this format without checksums (and with a 2-byte
//! symbol prefix); they are no longer spoken and parse as
//! [`WireError::UnknownKind`], so a peer running an older build is counted
//! and dropped instead of misread.
//!
//! # Report (`kind` = [`Kind::BlockReport`])
//!
//! ```text
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  common header: version=1, kind=9, flags, reserved, session   |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                      report sequence number                   |
//! |                 highest packet seq received (echo)            |
//! |        time since that packet arrived (microseconds)          |
//! |                packets lost in this interval                  |
//! |              packets received in this interval                |
//! |              data packets delivered, total (64 bits)          |
//! |              data packets recovered, total (64 bits)          |
//! |             data packets given up as lost, total (64 bits)    |
//! |         TFRC receive rate X_recv (bytes per second)           |
//! |         TFRC loss event rate p (fraction × 2^32, saturating)  |
//! |                   checksum (CRC-32, see below)                |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |          loss runs begun in this interval (flag bit 1)        |
//! |     runs of length 1      |     runs of length 2      |
//! |     runs of length 3-4    |     runs of length 5-8    |
//! |     runs of length 9-16   |     runs of 17 or more    |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! Sent every SYN (10 ms, GENEVA §3.2.1). Interval counts let the sender run
//! GMIAD (eqs. 4–5); a lost report loses only its interval, and the sender
//! holds `Fwnd` (§3.2.1, footnote 2). Totals let the sender show residual
//! loss. `flags` bit 0 ([`FLAG_TFRC`]): the TFRC fields are meaningful.
//! `flags` bit 1 ([`FLAG_RUNS`]): the report is [`RUNS_LEN`] bytes longer and
//! ends with the interval's loss runs ([`LossRuns`]): how many runs of
//! consecutive missing sequence numbers began, and a coarse histogram of their
//! lengths (16-bit counts, saturating). With `lost` and `received` that is what
//! a two-state (Gilbert) fit needs: `p ≈ runs / received`, `r ≈ runs / lost`
//! (the target controller, [`crate::control::target`]). The checksum field
//! stays where it is and covers the extension too. A report without the flag
//! is the 64-byte report of earlier builds and still parses (`runs: None`);
//! an earlier build counts the longer one as malformed, so both sides of a
//! tunnel run the same build (the format interoperates with nothing else
//! anyway).
//!
//! Parsing never panics and rejects anything inconsistent; the receiver
//! counts and drops it.

use super::header::{self, HEADER_LEN, Kind};
use super::{WireError, be32, be64};

/// Data packet flag: the payload is a repair symbol.
pub const FLAG_REPAIR: u8 = 0x01;
/// Data `flags` bit: no checksum (see the [module docs](self)).
pub const FLAG_UNCHECKED: u8 = 0x02;
/// Report flag: the TFRC fields hold measurements.
pub const FLAG_TFRC: u8 = 0x01;
/// Report flag: the report ends with the interval's [`LossRuns`].
pub const FLAG_RUNS: u8 = 0x02;
/// Bytes the [`LossRuns`] extension adds to a report.
pub const RUNS_LEN: usize = 4 + 2 * RUN_BUCKETS;
/// Buckets of [`LossRuns::histogram`]: run lengths 1, 2, 3–4, 5–8, 9–16
/// and 17 or more.
pub const RUN_BUCKETS: usize = 6;
/// Bytes before a data packet's payload.
pub const DATA_HEADER_LEN: usize = HEADER_LEN + 24;
/// Bytes of a report.
pub const REPORT_LEN: usize = HEADER_LEN + 56;
/// Bytes before the payload inside a protected symbol: its length (2) and
/// its CRC-32 (4). See the [module docs](self).
pub const SYMBOL_PREFIX: usize = 6;
/// Largest `k + m` a block may have (GF(2^8) Reed-Solomon).
pub const MAX_BLOCK_SYMBOLS: usize = 255;

/// Source or repair, with the fields only repair packets carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Symbol {
    /// An application datagram, sent as is.
    Source,
    /// A repair symbol of a block of `k` source and `m` repair symbols.
    Repair {
        /// Source symbols in the block.
        k: u8,
        /// Repair symbols in the block.
        m: u8,
    },
}

/// A parsed data packet; `payload` borrows from the datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataRepr<'a> {
    /// Session id from the common header.
    pub session: u32,
    /// Packet sequence number.
    pub seq: u32,
    /// Block id.
    pub block: u32,
    /// Data sequence number (see the module docs).
    pub data_seq: u32,
    /// Sender's RTT estimate in microseconds, 0 if unknown.
    pub rtt_us: u32,
    /// Symbol index in the block.
    pub index: u8,
    /// Source or repair.
    pub symbol: Symbol,
    /// Whether the packet carries its CRC-32 (`false`: [`FLAG_UNCHECKED`]).
    pub checked: bool,
    /// The datagram or the repair symbol.
    pub payload: &'a [u8],
}

mod field {
    use core::ops::Range;
    pub(super) const SEQ: Range<usize> = 8..12;
    pub(super) const BLOCK: Range<usize> = 12..16;
    pub(super) const DATA_SEQ: Range<usize> = 16..20;
    pub(super) const RTT: Range<usize> = 20..24;
    pub(super) const INDEX: usize = 24;
    pub(super) const K: usize = 25;
    pub(super) const M: usize = 26;
    pub(super) const RESERVED: usize = 27;
    pub(super) const CHECK: Range<usize> = 28..32;
}

impl<'a> DataRepr<'a> {
    /// Parses a data packet. Never panics. Rejects wrong kinds, truncation,
    /// a checksum mismatch, packets without a checksum
    /// ([`FLAG_UNCHECKED`]), and repair packets whose `k`, `m` and `index`
    /// are impossible.
    pub fn parse(buf: &'a [u8]) -> Result<Self, WireError> {
        Self::parse_with(buf, false)
    }

    /// [`parse`](Self::parse), also taking packets without a checksum if
    /// `allow_unchecked`: for receivers whose every datagram an outer layer
    /// has already authenticated. A packet that has one is still checked.
    pub fn parse_with(buf: &'a [u8], allow_unchecked: bool) -> Result<Self, WireError> {
        let h = header::Repr::parse_kind(buf, Kind::BlockData, "not a block data packet")?;
        super::need(buf, DATA_HEADER_LEN)?;
        let checked = h.flags & FLAG_UNCHECKED == 0;
        if checked {
            verify(buf, field::CHECK)?;
        } else if !allow_unchecked {
            return Err(WireError::Checksum);
        }
        let index = buf[field::INDEX];
        let (k, m) = (buf[field::K], buf[field::M]);
        let symbol = if h.flags & FLAG_REPAIR != 0 {
            if k == 0 || m == 0 || usize::from(k) + usize::from(m) > MAX_BLOCK_SYMBOLS {
                return Err(WireError::Malformed("impossible block shape"));
            }
            if index < k || usize::from(index) >= usize::from(k) + usize::from(m) {
                return Err(WireError::Malformed("repair index outside the block"));
            }
            Symbol::Repair { k, m }
        } else {
            if k != 0 || m != 0 {
                return Err(WireError::Malformed("source packet with a block shape"));
            }
            if usize::from(index) >= MAX_BLOCK_SYMBOLS - 1 {
                return Err(WireError::Malformed("source index outside any block"));
            }
            Symbol::Source
        };
        Ok(Self {
            session: h.session,
            seq: be32(&buf[field::SEQ]),
            block: be32(&buf[field::BLOCK]),
            data_seq: be32(&buf[field::DATA_SEQ]),
            rtt_us: be32(&buf[field::RTT]),
            index,
            symbol,
            checked,
            payload: &buf[DATA_HEADER_LEN..],
        })
    }

    /// Bytes [`emit`](Self::emit) writes.
    pub fn buffer_len(&self) -> usize {
        DATA_HEADER_LEN + self.payload.len()
    }

    /// Writes the packet into `buf`, exactly [`buffer_len`](Self::buffer_len)
    /// bytes, checksum included (if [`checked`](Self::checked)).
    ///
    /// # Panics
    /// On a wrong buffer size: a local sizing bug, not peer input.
    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(buf.len(), self.buffer_len(), "buffer sized by buffer_len");
        self.emit_header(&mut buf[..DATA_HEADER_LEN]);
        buf[DATA_HEADER_LEN..].copy_from_slice(self.payload);
        if self.checked {
            seal_data(buf);
        }
    }

    /// Writes only the [`DATA_HEADER_LEN`] header bytes (for senders that
    /// place the payload themselves), with a zero checksum: call
    /// [`seal_data`] on the whole datagram once it is complete (unless it
    /// goes without one, [`checked`](Self::checked) `false`).
    ///
    /// # Panics
    /// If `buf` is not [`DATA_HEADER_LEN`] bytes.
    pub fn emit_header(&self, buf: &mut [u8]) {
        assert_eq!(buf.len(), DATA_HEADER_LEN, "header buffer size");
        let (flags, k, m) = match self.symbol {
            Symbol::Source => (0, 0, 0),
            Symbol::Repair { k, m } => (FLAG_REPAIR, k, m),
        };
        let flags = if self.checked {
            flags
        } else {
            flags | FLAG_UNCHECKED
        };
        header::Repr {
            kind: Kind::BlockData,
            flags,
            session: self.session,
        }
        .emit(&mut header::Packet::new_unchecked(&mut *buf));
        buf[field::SEQ].copy_from_slice(&self.seq.to_be_bytes());
        buf[field::BLOCK].copy_from_slice(&self.block.to_be_bytes());
        buf[field::DATA_SEQ].copy_from_slice(&self.data_seq.to_be_bytes());
        buf[field::RTT].copy_from_slice(&self.rtt_us.to_be_bytes());
        buf[field::INDEX] = self.index;
        buf[field::K] = k;
        buf[field::M] = m;
        buf[field::RESERVED] = 0;
        buf[field::CHECK].fill(0);
    }
}

/// Writes the checksum of a complete data packet (header and payload) into
/// its checksum field; a sender that patches fields after
/// [`DataRepr::emit`] (sequence numbers at send time) calls it again.
///
/// # Panics
/// If `buf` is shorter than [`DATA_HEADER_LEN`]: a local sizing bug.
pub fn seal_data(buf: &mut [u8]) {
    let c = checksum(buf, field::CHECK);
    buf[field::CHECK].copy_from_slice(&c.to_be_bytes());
}

/// Writes the checksum of a complete report (its
/// [`ReportRepr::buffer_len`] bytes) into its checksum field (as
/// [`ReportRepr::emit`] does).
///
/// # Panics
/// If `buf` is shorter than [`REPORT_LEN`]: a local sizing bug.
pub fn seal_report(buf: &mut [u8]) {
    let c = checksum(buf, rfield::CHECK);
    buf[rfield::CHECK].copy_from_slice(&c.to_be_bytes());
}

/// CRC-32 of `buf` with the 4 bytes at `at` read as zeros.
fn checksum(buf: &[u8], at: core::ops::Range<usize>) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&buf[..at.start]);
    h.update(&[0; 4]);
    h.update(&buf[at.end..]);
    h.finalize()
}

/// Checks the checksum at `at` (the caller checked the length).
fn verify(buf: &[u8], at: core::ops::Range<usize>) -> Result<(), WireError> {
    // Fuzzers cannot forge a CRC; under `cfg(fuzzing)` the check is
    // skipped so they reach the parsers and machines behind it.
    if cfg!(fuzzing) || be32(&buf[at.clone()]) == checksum(buf, at) {
        Ok(())
    } else {
        Err(WireError::Checksum)
    }
}

/// The CRC-32 a protected symbol carries for `payload` (see the
/// [module docs](self)).
pub fn symbol_checksum(payload: &[u8]) -> u32 {
    crc32fast::hash(payload)
}

/// A parsed report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReportRepr {
    /// Session id from the common header.
    pub session: u32,
    /// Report sequence number (one per SYN interval).
    pub report_seq: u32,
    /// Highest packet sequence number received so far.
    pub echo_seq: u32,
    /// Microseconds between that packet's arrival and this report.
    pub echo_delay_us: u32,
    /// Packets found missing during the interval.
    pub lost: u32,
    /// Packets received during the interval.
    pub received: u32,
    /// Data packets delivered to the application so far.
    pub delivered_total: u64,
    /// Of those, packets rebuilt by the code.
    pub recovered_total: u64,
    /// Data packets given up as lost so far (residual loss).
    pub unrecovered_total: u64,
    /// TFRC feedback, when the receiver runs TFRC's loss estimator.
    pub tfrc: Option<TfrcFields>,
    /// The interval's loss runs ([`FLAG_RUNS`]); `None` in a report of an
    /// earlier build.
    pub runs: Option<LossRuns>,
}

/// The loss runs of one report interval: maximal runs of consecutive
/// missing packet sequence numbers, counted when the packet after the run
/// arrives (a run still open at the report is counted in the next one).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LossRuns {
    /// Runs begun (counted) in the interval (saturating).
    pub runs: u32,
    /// Runs by length: 1, 2, 3–4, 5–8, 9–16, 17 or more (saturating).
    pub histogram: [u16; RUN_BUCKETS],
}

impl LossRuns {
    /// The histogram bucket of a run of `len` packets (`len >= 1`; 0 reads as 1).
    pub fn bucket(len: u64) -> usize {
        match len {
            0..=2 => len.max(1) as usize - 1,
            3..=4 => 2,
            5..=8 => 3,
            9..=16 => 4,
            _ => 5,
        }
    }

    /// Counts one run of `len` packets.
    pub fn add(&mut self, len: u64) {
        self.runs = self.runs.saturating_add(1);
        let b = &mut self.histogram[Self::bucket(len)];
        *b = b.saturating_add(1);
    }
}

/// TFRC feedback carried in a report (RFC 5348 §6.2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TfrcFields {
    /// Receive rate over the last RTT, bytes per second (saturating).
    pub x_recv: u32,
    /// Loss event rate as a fraction of 2^32 (saturating at `u32::MAX`).
    pub p: u32,
}

impl TfrcFields {
    /// Encodes a loss event rate in `[0, 1]` (NaN reads as 0).
    pub fn encode_p(p: f64) -> u32 {
        if p.is_nan() || p <= 0.0 {
            0
        } else {
            (p * 4_294_967_296.0).min(f64::from(u32::MAX)) as u32
        }
    }

    /// The loss event rate as a fraction.
    pub fn p_fraction(&self) -> f64 {
        f64::from(self.p) / 4_294_967_296.0
    }
}

mod rfield {
    use core::ops::Range;
    pub(super) const REPORT_SEQ: Range<usize> = 8..12;
    pub(super) const ECHO_SEQ: Range<usize> = 12..16;
    pub(super) const ECHO_DELAY: Range<usize> = 16..20;
    pub(super) const LOST: Range<usize> = 20..24;
    pub(super) const RECEIVED: Range<usize> = 24..28;
    pub(super) const DELIVERED: Range<usize> = 28..36;
    pub(super) const RECOVERED: Range<usize> = 36..44;
    pub(super) const UNRECOVERED: Range<usize> = 44..52;
    pub(super) const X_RECV: Range<usize> = 52..56;
    pub(super) const P: Range<usize> = 56..60;
    pub(super) const CHECK: Range<usize> = 60..64;
    pub(super) const RUNS: Range<usize> = 64..68;
    pub(super) const HISTOGRAM: usize = 68;
}

impl ReportRepr {
    /// Parses a report. Never panics; rejects wrong kinds and any length
    /// other than [`REPORT_LEN`] (plus [`RUNS_LEN`] with [`FLAG_RUNS`]).
    pub fn parse(buf: &[u8]) -> Result<Self, WireError> {
        let h = header::Repr::parse_kind(buf, Kind::BlockReport, "not a block report")?;
        let len = if h.flags & FLAG_RUNS != 0 {
            REPORT_LEN + RUNS_LEN
        } else {
            REPORT_LEN
        };
        super::need(buf, len)?;
        if buf.len() > len {
            return Err(WireError::Malformed("bytes after the report"));
        }
        verify(buf, rfield::CHECK)?;
        let runs = (h.flags & FLAG_RUNS != 0).then(|| {
            let mut histogram = [0u16; RUN_BUCKETS];
            for (i, b) in histogram.iter_mut().enumerate() {
                let at = rfield::HISTOGRAM + 2 * i;
                *b = u16::from_be_bytes([buf[at], buf[at + 1]]);
            }
            LossRuns {
                runs: be32(&buf[rfield::RUNS]),
                histogram,
            }
        });
        let tfrc = (h.flags & FLAG_TFRC != 0).then(|| TfrcFields {
            x_recv: be32(&buf[rfield::X_RECV]),
            p: be32(&buf[rfield::P]),
        });
        Ok(Self {
            session: h.session,
            report_seq: be32(&buf[rfield::REPORT_SEQ]),
            echo_seq: be32(&buf[rfield::ECHO_SEQ]),
            echo_delay_us: be32(&buf[rfield::ECHO_DELAY]),
            lost: be32(&buf[rfield::LOST]),
            received: be32(&buf[rfield::RECEIVED]),
            delivered_total: be64(&buf[rfield::DELIVERED]),
            recovered_total: be64(&buf[rfield::RECOVERED]),
            unrecovered_total: be64(&buf[rfield::UNRECOVERED]),
            tfrc,
            runs,
        })
    }

    /// Bytes [`emit`](Self::emit) writes: [`REPORT_LEN`], plus
    /// [`RUNS_LEN`] with loss runs.
    pub const fn buffer_len(&self) -> usize {
        if self.runs.is_some() {
            REPORT_LEN + RUNS_LEN
        } else {
            REPORT_LEN
        }
    }

    /// Writes the report into `buf`, exactly [`buffer_len`](Self::buffer_len) bytes.
    ///
    /// # Panics
    /// On a wrong buffer size: a local sizing bug, not peer input.
    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(buf.len(), self.buffer_len(), "buffer sized by buffer_len");
        let flags = if self.tfrc.is_some() { FLAG_TFRC } else { 0 }
            | if self.runs.is_some() { FLAG_RUNS } else { 0 };
        header::Repr {
            kind: Kind::BlockReport,
            flags,
            session: self.session,
        }
        .emit(&mut header::Packet::new_unchecked(&mut *buf));
        buf[rfield::REPORT_SEQ].copy_from_slice(&self.report_seq.to_be_bytes());
        buf[rfield::ECHO_SEQ].copy_from_slice(&self.echo_seq.to_be_bytes());
        buf[rfield::ECHO_DELAY].copy_from_slice(&self.echo_delay_us.to_be_bytes());
        buf[rfield::LOST].copy_from_slice(&self.lost.to_be_bytes());
        buf[rfield::RECEIVED].copy_from_slice(&self.received.to_be_bytes());
        buf[rfield::DELIVERED].copy_from_slice(&self.delivered_total.to_be_bytes());
        buf[rfield::RECOVERED].copy_from_slice(&self.recovered_total.to_be_bytes());
        buf[rfield::UNRECOVERED].copy_from_slice(&self.unrecovered_total.to_be_bytes());
        let t = self.tfrc.unwrap_or_default();
        buf[rfield::X_RECV].copy_from_slice(&t.x_recv.to_be_bytes());
        buf[rfield::P].copy_from_slice(&t.p.to_be_bytes());
        if let Some(r) = &self.runs {
            buf[rfield::RUNS].copy_from_slice(&r.runs.to_be_bytes());
            for (i, b) in r.histogram.iter().enumerate() {
                let at = rfield::HISTOGRAM + 2 * i;
                buf[at..at + 2].copy_from_slice(&b.to_be_bytes());
            }
        }
        seal_report(buf);
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[rustfmt::skip]
    const GOLDEN_REPAIR: [u8; DATA_HEADER_LEN + 3] = [
        0x01, 0x08, 0x01, 0x00, 0x00, 0x00, 0x00, 0x09, // header: v1, BlockData, repair, session 9
        0x00, 0x00, 0x01, 0x00,                         // seq 256
        0x00, 0x00, 0x00, 0x07,                         // block 7
        0x00, 0x00, 0x00, 0xaf,                         // first data seq of the block: 175
        0x00, 0x00, 0x27, 0x10,                         // RTT 10 000 us
        0x1a, 0x19, 0x08, 0x00,                         // index 26, k 25, m 8
        0x87, 0x9c, 0x53, 0x0a,                         // CRC-32 (python3: zlib.crc32 with these 4 bytes zero)
        0xde, 0xad, 0x01,                               // symbol
    ];

    #[test]
    fn data_golden_bytes_both_ways() {
        let r = DataRepr {
            session: 9,
            seq: 256,
            block: 7,
            data_seq: 175,
            rtt_us: 10_000,
            index: 26,
            symbol: Symbol::Repair { k: 25, m: 8 },
            checked: true,
            payload: &[0xde, 0xad, 0x01],
        };
        assert_eq!(DataRepr::parse(&GOLDEN_REPAIR), Ok(r));
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut buf);
        assert_eq!(buf, GOLDEN_REPAIR);
    }

    #[test]
    fn rejects_impossible_repair_shapes() {
        let with = |index: u8, k: u8, m: u8| {
            let mut b = GOLDEN_REPAIR;
            b[24] = index;
            b[25] = k;
            b[26] = m;
            seal_data(&mut b);
            DataRepr::parse(&b).is_ok()
        };
        assert!(with(26, 25, 8));
        assert!(!with(24, 25, 8), "index inside the source range");
        assert!(!with(33, 25, 8), "index past k + m");
        assert!(!with(200, 200, 56), "k + m > 255");
        assert!(!with(0, 0, 8), "k = 0");
        assert!(!with(25, 25, 0), "m = 0");
        let mut source = GOLDEN_REPAIR;
        source[2] = 0;
        seal_data(&mut source);
        assert!(DataRepr::parse(&source).is_err(), "source with a shape");
        source[25] = 0;
        source[26] = 0;
        seal_data(&mut source);
        assert!(DataRepr::parse(&source).is_ok());
        assert!(DataRepr::parse(&GOLDEN_REPAIR[..DATA_HEADER_LEN - 1]).is_err());
    }

    #[test]
    fn report_golden_round_trip_and_length_checks() {
        let r = ReportRepr {
            session: 1,
            report_seq: 2,
            echo_seq: 3,
            echo_delay_us: 4,
            lost: 5,
            received: 6,
            delivered_total: 7,
            recovered_total: 8,
            unrecovered_total: 9,
            tfrc: Some(TfrcFields { x_recv: 10, p: 11 }),
            runs: None,
        };
        let mut buf = [0u8; REPORT_LEN];
        r.emit(&mut buf);
        assert_eq!(&buf[..4], &[0x01, 0x09, 0x01, 0x00]);
        assert_eq!(&buf[52..60], &[0, 0, 0, 10, 0, 0, 0, 11]);
        assert_eq!(ReportRepr::parse(&buf), Ok(r));
        assert!(ReportRepr::parse(&buf[..REPORT_LEN - 1]).is_err());
        let mut long = buf.to_vec();
        long.push(0);
        assert!(ReportRepr::parse(&long).is_err());
        assert!(DataRepr::parse(&buf).is_err(), "a report is not data");
    }

    #[test]
    fn report_with_loss_runs_golden_bytes_and_length_checks() {
        let r = ReportRepr {
            lost: 5,
            received: 6,
            runs: Some(LossRuns {
                runs: 3,
                histogram: [1, 0, 1, 0, 0, 0xffff],
            }),
            ..ReportRepr::default()
        };
        assert_eq!(r.buffer_len(), REPORT_LEN + RUNS_LEN);
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut buf);
        assert_eq!(&buf[..4], &[0x01, 0x09, FLAG_RUNS, 0x00]);
        #[rustfmt::skip]
        let tail = [0, 0, 0, 3, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0xff, 0xff];
        assert_eq!(&buf[REPORT_LEN..], &tail);
        assert_eq!(ReportRepr::parse(&buf), Ok(r));
        // The flag promises the extension: without it, or with bytes
        // after it, the report is refused (checksums recomputed, so the
        // length check is what refuses it).
        let mut short = buf[..REPORT_LEN].to_vec();
        seal_report(&mut short);
        assert!(matches!(
            ReportRepr::parse(&short),
            Err(WireError::Truncated { .. })
        ));
        let mut long = buf.clone();
        long.push(0);
        seal_report(&mut long);
        assert!(ReportRepr::parse(&long).is_err());
        let mut b = buf.clone();
        b[REPORT_LEN + 3] ^= 1;
        assert_eq!(ReportRepr::parse(&b), Err(WireError::Checksum));
    }

    #[test]
    fn run_buckets_are_powers_of_two() {
        let b: Vec<usize> = [0, 1, 2, 3, 4, 5, 8, 9, 16, 17, 1000]
            .into_iter()
            .map(LossRuns::bucket)
            .collect();
        assert_eq!(b, [0, 0, 1, 2, 2, 3, 3, 4, 4, 5, 5]);
        let mut r = LossRuns::default();
        r.add(3);
        r.add(40);
        assert_eq!((r.runs, r.histogram), (2, [0, 0, 1, 0, 0, 1]));
    }

    #[test]
    fn every_flipped_bit_is_a_checksum_error() {
        // Bits the header parser reads first (version, kind, lengths) may
        // give another error; none may parse.
        for i in 0..GOLDEN_REPAIR.len() * 8 {
            let mut b = GOLDEN_REPAIR;
            b[i / 8] ^= 1 << (i % 8);
            assert!(DataRepr::parse(&b).is_err(), "bit {i}");
            if i / 8 >= HEADER_LEN {
                assert_eq!(DataRepr::parse(&b), Err(WireError::Checksum), "bit {i}");
            }
        }
        let mut r = [0u8; REPORT_LEN];
        ReportRepr::default().emit(&mut r);
        for i in HEADER_LEN * 8..REPORT_LEN * 8 {
            let mut b = r;
            b[i / 8] ^= 1 << (i % 8);
            assert_eq!(ReportRepr::parse(&b), Err(WireError::Checksum), "bit {i}");
        }
    }

    #[test]
    fn symbol_checksum_is_crc32() {
        // zlib.crc32(b"123456789") == 0xcbf43926, the CRC-32 check value.
        assert_eq!(symbol_checksum(b"123456789"), 0xcbf4_3926);
    }

    #[test]
    fn p_encoding_saturates() {
        assert_eq!(TfrcFields::encode_p(f64::NAN), 0);
        assert_eq!(TfrcFields::encode_p(-1.0), 0);
        assert_eq!(TfrcFields::encode_p(2.0), u32::MAX);
        let f = TfrcFields {
            x_recv: 0,
            p: TfrcFields::encode_p(0.25),
        };
        assert!((f.p_fraction() - 0.25).abs() < 1e-9);
    }

    fn any_symbol() -> impl Strategy<Value = (u8, Symbol)> {
        prop_oneof![
            (0u8..254).prop_map(|i| (i, Symbol::Source)),
            (1u8..=254)
                .prop_flat_map(|k| (Just(k), 1..=255 - k))
                .prop_flat_map(|(k, m)| (k..k + m, Just(Symbol::Repair { k, m }))),
        ]
    }

    proptest! {
        #[test]
        fn data_round_trips(session: u32, seq: u32, block: u32, data_seq: u32, rtt_us: u32,
                            (index, symbol) in any_symbol(), checked: bool,
                            payload in proptest::collection::vec(any::<u8>(), 0..64)) {
            let r = DataRepr { session, seq, block, data_seq, rtt_us, index, symbol, checked, payload: &payload };
            let mut buf = vec![0u8; r.buffer_len()];
            r.emit(&mut buf);
            prop_assert_eq!(DataRepr::parse_with(&buf, true), Ok(r));
            // Without a checksum only where the receiver allows it.
            if checked {
                prop_assert_eq!(DataRepr::parse(&buf), Ok(r));
            } else {
                prop_assert_eq!(DataRepr::parse(&buf), Err(WireError::Checksum));
            }
        }

        #[test]
        fn report_round_trips(session: u32, report_seq: u32, echo_seq: u32, echo_delay_us: u32,
                              lost: u32, received: u32, delivered_total: u64,
                              recovered_total: u64, unrecovered_total: u64,
                              tfrc in proptest::option::of((any::<u32>(), any::<u32>())),
                              runs in proptest::option::of((any::<u32>(), any::<[u16; RUN_BUCKETS]>()))) {
            let r = ReportRepr {
                session, report_seq, echo_seq, echo_delay_us, lost, received,
                delivered_total, recovered_total, unrecovered_total,
                tfrc: tfrc.map(|(x_recv, p)| TfrcFields { x_recv, p }),
                runs: runs.map(|(runs, histogram)| LossRuns { runs, histogram }),
            };
            let mut buf = vec![0u8; r.buffer_len()];
            r.emit(&mut buf);
            prop_assert_eq!(ReportRepr::parse(&buf), Ok(r));
        }

        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..128),
                                       kind in 8u8..=9) {
            let mut d = data;
            if d.len() >= 2 { d[0] = 1; d[1] = kind; }
            if d.len() >= DATA_HEADER_LEN && kind == 8 { seal_data(&mut d); }
            if d.len() >= REPORT_LEN && kind == 9 { seal_report(&mut d); }
            let _ = DataRepr::parse(&d);
            let _ = ReportRepr::parse(&d);
        }
    }
}
