//! The sending side: media packets in, row and column parity packets out.

use std::collections::VecDeque;

use bytes::Bytes;
use groupwire_codec::xor::accumulate;

use super::{ColumnTiming, Recovery, XorLayout, XorLayoutError};
use crate::wire::WireError;
use crate::wire::rtp::{FecHeader, FecPacket, RtpHeader};

/// Which FEC stream a parity packet belongs to (SMPTE 2022-1 sends the
/// column stream to the media port + 2 and the row stream to port + 4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FecStream {
    /// Parity of `D` packets `L` apart.
    Column,
    /// Parity of `L` consecutive packets.
    Row,
}

/// A parity packet to send.
#[derive(Clone, Debug)]
pub struct EncodedFec {
    /// Its stream.
    pub stream: FecStream,
    /// The whole RTP packet.
    pub packet: Bytes,
}

/// What an [`XorEncoder`] has done.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct EncoderStats {
    /// Media packets taken.
    pub media: u64,
    /// Row parity packets made.
    pub row_fec: u64,
    /// Column parity packets made.
    pub column_fec: u64,
    /// Bytes of parity packets made.
    pub fec_bytes: u64,
    /// Times a gap in the media sequence numbers started a new matrix
    /// (the unfinished groups were dropped unsent).
    pub restarts: u64,
}

/// The running parity of one group.
#[derive(Clone, Debug, Default)]
struct Group {
    base: u16,
    count: u8,
    recovery: Recovery,
    parity: Vec<u8>,
}

impl Group {
    fn add(&mut self, h: &RtpHeader, body: &[u8]) {
        if self.count == 0 {
            self.base = h.seq;
        }
        self.count += 1;
        self.recovery.add(h, body);
        accumulate(&mut self.parity, body);
    }

    /// The parity packet; `offset` and `na` as the FEC header needs.
    fn finish(&mut self, stream: FecStream, rtp: RtpHeader, offset: u8) -> Vec<u8> {
        let g = std::mem::take(self);
        let r = g.recovery;
        let packet = FecPacket {
            rtp: RtpHeader {
                padding: r.padding,
                extension: r.extension,
                csrc_count: r.csrc_count,
                marker: r.marker,
                ..rtp
            },
            fec: FecHeader {
                sn_base: g.base,
                length_recovery: r.length,
                pt_recovery: r.payload_type,
                ts_recovery: r.timestamp,
                row: stream == FecStream::Row,
                offset,
                na: g.count,
            },
            parity: &g.parity,
        };
        let mut out = vec![0u8; packet.buffer_len()];
        packet.emit(&mut out);
        // Keep the allocation for the next group.
        *self = Group {
            parity: {
                let mut p = g.parity;
                p.clear();
                p
            },
            ..Group::default()
        };
        out
    }
}

/// Makes SMPTE 2022-1 row and column parity packets from a media stream.
///
/// [`push`](Self::push) each media RTP packet as it is sent, then take the
/// parity packets from [`poll_fec`](Self::poll_fec) and send them on their
/// stream. Media sequence numbers must be consecutive (SMPTE 2022-1; a gap
/// starts a new matrix and is counted). A column parity held for
/// [`ColumnTiming::Spread`] goes out with a later media packet; at the end
/// of a stream, or when it pauses, [`flush`](Self::flush) releases them.
#[derive(Debug)]
pub struct XorEncoder {
    layout: XorLayout,
    fec_pt: u8,
    row: Group,
    columns: Vec<Group>,
    /// Place of the next media packet in the matrix, `0..L·D`.
    pos: usize,
    matrix_base: u16,
    last: Option<(u16, u32)>,
    row_seq: u16,
    col_seq: u16,
    /// Column parities waiting for their media sequence number.
    held: VecDeque<(u16, Vec<u8>)>,
    out: VecDeque<EncodedFec>,
    stats: EncoderStats,
}

impl XorEncoder {
    /// An encoder for `layout` whose parity packets carry payload type
    /// `fec_pt` (GStreamer's default is 96) and SSRC 0 (SMPTE 2022-1).
    pub fn new(layout: XorLayout, fec_pt: u8) -> Result<Self, XorLayoutError> {
        layout.validate()?;
        Ok(Self {
            layout,
            fec_pt,
            row: Group::default(),
            columns: vec![Group::default(); usize::from(layout.l)],
            pos: 0,
            matrix_base: 0,
            last: None,
            row_seq: 0,
            col_seq: 0,
            held: VecDeque::new(),
            out: VecDeque::new(),
            stats: EncoderStats::default(),
        })
    }

    /// The layout.
    pub fn layout(&self) -> XorLayout {
        self.layout
    }

    /// What has been done so far.
    pub fn stats(&self) -> EncoderStats {
        self.stats
    }

    /// Takes one media packet (a whole RTP packet). Fails, changing
    /// nothing, on a packet that is not RTP version 2.
    pub fn push(&mut self, packet: &[u8]) -> Result<(), WireError> {
        let (h, body) = RtpHeader::parse(packet)?;
        if self
            .last
            .is_some_and(|(seq, _)| seq.wrapping_add(1) != h.seq)
        {
            self.restart();
        }
        if self.pos == 0 {
            self.matrix_base = h.seq;
        }
        self.last = Some((h.seq, h.timestamp));
        self.stats.media += 1;
        let l = usize::from(self.layout.l);
        let (row, col) = (self.pos / l, self.pos % l);
        if self.layout.rows {
            self.row.add(&h, body);
            if col == l - 1 {
                let rtp = self.fec_header(FecStream::Row);
                let fec = self.row.finish(FecStream::Row, rtp, 1);
                self.emit(FecStream::Row, fec);
            }
        }
        if self.layout.columns {
            self.columns[col].add(&h, body);
            if row == usize::from(self.layout.d) - 1 {
                let rtp = self.fec_header(FecStream::Column);
                let fec = self.columns[col].finish(FecStream::Column, rtp, self.layout.l);
                match self.layout.column_timing {
                    ColumnTiming::Immediate => self.emit(FecStream::Column, fec),
                    ColumnTiming::Spread => {
                        // GStreamer's schedule: column c with media
                        // base + L·D + D·c, spread evenly over the next
                        // matrix.
                        let len = self.layout.matrix_len();
                        let d = usize::from(self.layout.d);
                        let target = usize::from(self.matrix_base) + len + d * col;
                        self.held.push_back((target as u16, fec));
                    }
                }
            }
        }
        self.pos = (self.pos + 1) % self.layout.matrix_len();
        while let Some((target, _)) = self.held.front() {
            // Due when `target` is at or before this media packet.
            if (h.seq.wrapping_sub(*target) as i16) < 0 {
                break;
            }
            if let Some((_, fec)) = self.held.pop_front() {
                self.emit(FecStream::Column, fec);
            }
        }
        Ok(())
    }

    /// Releases every held column parity now (end of stream, or a pause).
    /// Unfinished groups stay open.
    pub fn flush(&mut self) {
        while let Some((_, fec)) = self.held.pop_front() {
            self.emit(FecStream::Column, fec);
        }
    }

    /// Closes every open group now with the packets it has (a row of fewer
    /// than `L`, columns of fewer than `D`: their `NA` says how many),
    /// releases the held columns, and starts a new matrix with the next
    /// packet. For a stream that pauses, so its last packets are protected
    /// at once; only a decoder that accepts partial groups
    /// ([`DecoderConfig::partial_groups`](super::DecoderConfig::partial_groups))
    /// uses them, and GStreamer's refuses them, so the SMPTE 2022-1 interop
    /// path never calls this.
    pub fn close(&mut self) {
        if self.layout.rows && self.row.count > 0 {
            let rtp = self.fec_header(FecStream::Row);
            let fec = self.row.finish(FecStream::Row, rtp, 1);
            self.emit(FecStream::Row, fec);
        }
        for c in 0..self.columns.len() {
            if self.layout.columns && self.columns[c].count > 0 {
                let rtp = self.fec_header(FecStream::Column);
                let fec = self.columns[c].finish(FecStream::Column, rtp, self.layout.l);
                self.held.push_back((0, fec));
            }
        }
        self.flush();
        self.pos = 0;
    }

    /// Whether a group is open (media taken since its parity went out).
    pub fn is_open(&self) -> bool {
        self.pos != 0
    }

    /// Whether column parities are held back for later media.
    pub fn has_held(&self) -> bool {
        !self.held.is_empty()
    }

    /// The next parity packet to send.
    pub fn poll_fec(&mut self) -> Option<EncodedFec> {
        self.out.pop_front()
    }

    fn restart(&mut self) {
        self.stats.restarts += 1;
        self.flush();
        self.row = Group::default();
        for c in &mut self.columns {
            *c = Group::default();
        }
        self.pos = 0;
    }

    fn fec_header(&mut self, stream: FecStream) -> RtpHeader {
        let seq = match stream {
            FecStream::Row => &mut self.row_seq,
            FecStream::Column => &mut self.col_seq,
        };
        let header = RtpHeader {
            payload_type: self.fec_pt,
            seq: *seq,
            ..RtpHeader::default()
        };
        *seq = seq.wrapping_add(1);
        header
    }

    fn emit(&mut self, stream: FecStream, mut fec: Vec<u8>) {
        // Timestamped with the latest media packet, as GStreamer does.
        let ts = self.last.map_or(0, |(_, ts)| ts);
        fec[4..8].copy_from_slice(&ts.to_be_bytes());
        match stream {
            FecStream::Row => self.stats.row_fec += 1,
            FecStream::Column => self.stats.column_fec += 1,
        }
        self.stats.fec_bytes += fec.len() as u64;
        self.out.push_back(EncodedFec {
            stream,
            packet: Bytes::from(fec),
        });
    }
}
