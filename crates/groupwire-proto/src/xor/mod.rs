//! XOR parity FEC over UDP (Leigh et al. §4.1) in SMPTE 2022-1's row and
//! column form: sans-IO encoder and decoder on RTP packets.
//!
//! The paper's scheme: "one redundant packet, the XOR of N consecutive data
//! packets", sent beside the data so the receiver rebuilds any single lost
//! packet of a group; Figure 5 uses one per three. That is a *row* of
//! SMPTE 2022-1 with `L = N` ([`XorLayout::row`], text form `xor:3`). The
//! paper's remedy for bursts, "the selection of encoding packets must be
//! more widely distributed across the data stream", is SMPTE 2022-1's
//! *column* parity: media packets laid out row by row in an `L × D`
//! matrix, one parity per column, so a burst of up to `L` consecutive
//! losses hits each column once and every column rebuilds its packet
//! ([`XorLayout::matrix`], `xor:LxD`, rows and columns; `xor:LxD:col`,
//! columns only, SMPTE's 1-D mode). With both, a rebuild in one direction
//! can complete a group in the other, and the decoder repeats until
//! nothing more can be rebuilt.
//!
//! **The latency price** (the paper: wider spreading costs latency). A
//! packet rebuilt from its row waits at most for the rest of its row (`L`
//! packets). One rebuilt from its column waits for the column's last packet
//! (`(D − 1)·L` packets later) and then for the column's parity. SMPTE
//! 2022-1 and GStreamer's encoder spread the parity packets of one matrix
//! over the next matrix so that a burst does not take out the parity too
//! ([`ColumnTiming::Spread`], the default): column `c`'s parity goes out
//! with media packet `base + L·D + D·c`, up to `2·L·D` packets after the
//! packet it rebuilds. [`ColumnTiming::Immediate`] sends it as soon as the
//! column is complete, at most `L·D` packets after. The simulator's `leigh`
//! scenario measures both.
//!
//! Machines: [`XorEndpoint`] toward a known peer (the tunnel, the
//! simulator, `groupwire awareness send`), and [`XorListener`], which
//! learns its peer from the first media packet (`groupwire awareness
//! recv`).
//!
//! Wire format: [`crate::wire::rtp`]. Media packets are plain RTP with
//! consecutive sequence numbers; FEC packets are separate RTP streams
//! (column and row, SMPTE's port+2 and port+4), so a receiver that knows
//! nothing of FEC still gets the media.

use std::fmt;
use std::str::FromStr;

mod decoder;
mod encoder;
mod endpoint;
mod listener;
#[cfg(test)]
mod tests;
pub mod ulpfec;

pub use decoder::{
    DEFAULT_MAX_BYTES, DEFAULT_WINDOW, DecoderConfig, MediaOutcome, Recovered, Via, XorDecoder,
    XorDecoderStats,
};
pub use encoder::{EncodedFec, EncoderStats, FecStream, XorEncoder};
pub use endpoint::{
    FEC_PT, MEDIA_PT, TooLarge, XorDelivery, XorEndpoint, XorEndpointConfig, XorEndpointStats,
};
pub use listener::{XorListener, XorListenerEvent, XorListenerStats};

/// What a parity packet protects of its group's media packets besides
/// their bodies (SMPTE 2022-1's recovery fields): each field the XOR of
/// the members'. The encoder XORs every member in; the decoder starts
/// from the parity packet's and XORs in every member it holds, leaving
/// the lost one's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Recovery {
    padding: bool,
    extension: bool,
    csrc_count: u8,
    marker: bool,
    payload_type: u8,
    timestamp: u32,
    /// The body's length.
    length: u16,
}

impl Recovery {
    /// XORs in one member's header and the length of its `body`.
    fn add(&mut self, h: &crate::wire::rtp::RtpHeader, body: &[u8]) {
        self.padding ^= h.padding;
        self.extension ^= h.extension;
        self.csrc_count ^= h.csrc_count;
        self.marker ^= h.marker;
        self.payload_type ^= h.payload_type;
        self.timestamp ^= h.timestamp;
        // Bodies are at most 65535 − 12 bytes (one UDP datagram).
        self.length ^= u16::try_from(body.len()).unwrap_or(u16::MAX);
    }
}

/// The largest `L × D` a layout may have (SMPTE 2022-1 allows `L·D <= 100`;
/// GStreamer does not check; we allow more for research, within the
/// decoder's default window).
pub const MAX_MATRIX: usize = 1024;

/// When a column's parity packet is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ColumnTiming {
    /// Spread over the next matrix, column `c` with media packet
    /// `base + L·D + D·c` (SMPTE 2022-1, GStreamer's `rtpst2022-1-fecenc`):
    /// a burst that takes media packets does not also take their parity.
    #[default]
    Spread,
    /// As soon as the column's last packet is sent: less latency, but a
    /// burst right after a matrix can take several parities at once.
    Immediate,
}

/// Which parity packets an [`XorEncoder`] makes and how its matrix is laid
/// out: `L` columns (packets per row), `D` rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct XorLayout {
    /// Packets per row, and the column count (SMPTE's `L`), 1 to 255.
    pub l: u8,
    /// Rows per matrix (SMPTE's `D`), 1 to 255; 1 when there are no
    /// columns.
    pub d: u8,
    /// Send a parity per row (`L` consecutive packets).
    pub rows: bool,
    /// Send a parity per column (`D` packets `L` apart).
    pub columns: bool,
    /// When column parities go out.
    pub column_timing: ColumnTiming,
}

impl XorLayout {
    /// The paper's scheme: one parity per `n` consecutive packets.
    pub fn row(n: u8) -> Self {
        Self {
            l: n,
            d: 1,
            rows: true,
            columns: false,
            column_timing: ColumnTiming::Spread,
        }
    }

    /// SMPTE 2022-1 2-D: a parity per row of `l` and per column of `d`.
    pub fn matrix(l: u8, d: u8) -> Self {
        Self {
            l,
            d,
            rows: true,
            columns: true,
            column_timing: ColumnTiming::Spread,
        }
    }

    /// SMPTE 2022-1 1-D: a parity per column only (bursts up to `l`).
    pub fn column(l: u8, d: u8) -> Self {
        Self {
            rows: false,
            ..Self::matrix(l, d)
        }
    }

    /// Parity packets per media packet: `1/L` for rows plus `1/D` for
    /// columns.
    pub fn overhead(&self) -> f64 {
        let rows = if self.rows {
            1.0 / f64::from(self.l)
        } else {
            0.0
        };
        let cols = if self.columns {
            1.0 / f64::from(self.d)
        } else {
            0.0
        };
        rows + cols
    }

    /// Media packets per matrix (`L` for rows only).
    pub fn matrix_len(&self) -> usize {
        usize::from(self.l) * usize::from(if self.columns { self.d } else { 1 })
    }

    /// Checks `L`, `D` at least 1, at least one kind of parity, and
    /// `L·D <= MAX_MATRIX`.
    pub fn validate(&self) -> Result<(), XorLayoutError> {
        let bad = |why: String| Err(XorLayoutError(why));
        if !self.columns && self.l == 0 {
            return bad("N must be at least 1 (got 0)".into());
        }
        if self.l == 0 || self.d == 0 {
            return bad(format!(
                "L and D must be at least 1 (got {}x{})",
                self.l, self.d
            ));
        }
        if !self.rows && !self.columns {
            return bad("neither row nor column parity".into());
        }
        if self.matrix_len() > MAX_MATRIX {
            return bad(format!(
                "L x D = {} is more than {MAX_MATRIX}",
                self.matrix_len()
            ));
        }
        Ok(())
    }
}

/// An impossible [`XorLayout`], or one that does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("XOR FEC layout: {0}")]
pub struct XorLayoutError(pub String);

impl fmt::Display for XorLayout {
    /// `xor:3` (rows only), `xor:4x5` (rows and columns), `xor:4x5:col`
    /// (columns only); `:now` appended for [`ColumnTiming::Immediate`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.columns {
            return write!(f, "xor:{}", self.l);
        }
        write!(f, "xor:{}x{}", self.l, self.d)?;
        if !self.rows {
            f.write_str(":col")?;
        }
        if self.column_timing == ColumnTiming::Immediate {
            f.write_str(":now")?;
        }
        Ok(())
    }
}

impl FromStr for XorLayout {
    type Err = XorLayoutError;

    /// Parses what [`Display`](fmt::Display) writes: `xor:N`, `xor:LxD`,
    /// `xor:LxD:col`, each `LxD` form optionally with `:now`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |why: &str| {
            XorLayoutError(format!(
                "{s:?}: {why} (expected xor:N, xor:LxD, xor:LxD:col, optionally :now)"
            ))
        };
        let rest = s
            .strip_prefix("xor:")
            .ok_or_else(|| err("no xor: prefix"))?;
        let mut parts = rest.split(':');
        let dims = parts.next().unwrap_or_default();
        let num = |t: &str| {
            t.trim()
                .parse::<u8>()
                .map_err(|_| err("L and D are 1 to 255"))
        };
        let mut layout = match dims.split_once('x') {
            None => Self::row(num(dims)?),
            Some((l, d)) => Self::matrix(num(l)?, num(d)?),
        };
        for flag in parts {
            match flag {
                "col" if layout.columns => layout.rows = false,
                "now" if layout.columns => layout.column_timing = ColumnTiming::Immediate,
                _ => return Err(err(&format!("unknown option {flag:?}"))),
            }
        }
        layout.validate().map_err(|e| err(&e.0))?;
        Ok(layout)
    }
}
