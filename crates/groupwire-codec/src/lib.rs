//! groupwire's codes: pure functions on symbols and codewords.
//!
//! [`ReedSolomon`] is a systematic MDS erasure code over GF(2^8): `k` source
//! symbols and `m` repair symbols, `k + m <= 255`, and any `k` of the
//! `k + m` symbols give back the sources. Source symbols are sent as they
//! are; only repair symbols are computed. The generator matrix is RFC 5510's
//! (the systematic form of a Vandermonde matrix over the field with
//! polynomial x^8 + x^4 + x^3 + x^2 + 1), so repair symbols are the ones an
//! RFC 5510 Reed-Solomon FEC scheme sends for the same encoding symbol IDs;
//! see [`ReedSolomon`] for the exact matrix.
//!
//! The GENEVA block FEC of Matsuzono et al. (§3) adds `Fwnd = n - k` repair
//! packets to each block of `k` source packets with an MDS code; `Fwnd`
//! changes from block to block, which this code allows without rebuilding
//! anything: repair symbol `k + j` does not depend on `m`, and
//! [`ReedSolomon::encode`] computes any prefix of the repair symbols.
//!
//! ```
//! use groupwire_codec::{Decoder, ReedSolomon};
//!
//! let rs = ReedSolomon::new(3, 2)?;
//! let sources = [*b"abcd", *b"efgh", *b"ijkl"];
//! let mut repairs = [[0u8; 4]; 2];
//! rs.encode(&sources, &mut repairs)?;
//!
//! // Sources 0 and 2 are lost; source 1 and both repairs arrive.
//! let received = [(1, &sources[1][..]), (3, &repairs[0][..]), (4, &repairs[1][..])];
//! let mut lost0 = [0u8; 4];
//! let mut lost2 = [0u8; 4];
//! let mut decoder = Decoder::new(rs);
//! decoder.decode(&received, &mut [(0, &mut lost0[..]), (2, &mut lost2[..])])?;
//! assert_eq!((&lost0, &lost2), (b"abcd", b"ijkl"));
//! # Ok::<(), groupwire_codec::CodecError>(())
//! ```
//!
//! [`Bch`] is the other kind: binary BCH(127, k) codes that *correct* bit
//! errors inside a frame (Miyoshi et al.'s link-layer FEC), with a
//! Berlekamp-Massey decoder.
//!
//! [`sliding`] is a sliding-window random linear code over GF(2^8),
//! wire-compatible with RFC 8681 (FEC Encoding ID 10): repair symbols
//! cover a window that moves with every source instead of a block, so a
//! loss is repaired by the next repair symbol whatever its position. Its
//! coefficients come from RFC 8682's TinyMT32 generator, and it runs on
//! the same multiply-add backends as [`ReedSolomon`].
//!
//! [`xor`] is the simplest: the single-parity code of Leigh et al.'s
//! FEC-UDP and SMPTE 2022-1, on symbols of unequal length.
//!
//! Nothing here reads a clock, does I/O or takes a lock. The multiply-add
//! loop runs on the fastest [`Backend`] the CPU has, chosen at run time:
//! AVX-512 with GFNI, AVX2 or SSSE3 (split-nibble `pshufb` tables, as in
//! ISA-L's `gf_vect_dot_prod` and klauspost/reedsolomon), or portable
//! product tables.

mod backend;
mod bch;
mod codec;
mod gf;
mod kernel;
mod matrix;
mod pad;
mod scalar;
#[cfg(target_arch = "x86_64")]
mod simd;
pub mod sliding;
mod tinymt32;
pub mod xor;

pub use backend::Backend;
pub use bch::{BCH_MAX_T, BCH_N, Bch, BchError, Decoded, Uncorrectable};
pub use codec::{CacheStats, Decoder, ReedSolomon};
pub use pad::{LENGTH_PREFIX, pad, unpad};

/// The most symbols (source plus repair) in one block: the field has 255
/// non-zero elements, one evaluation point per symbol (RFC 5510 allows
/// n <= 2^m - 1).
pub const MAX_SYMBOLS: usize = 255;

/// Why a codec call was refused. Nothing is written to any output when an
/// error is returned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CodecError {
    /// `k` is zero or `k + m` exceeds [`MAX_SYMBOLS`].
    #[error("invalid code: k = {k}, m = {m} (need k >= 1 and k + m <= 255)")]
    InvalidParameters {
        /// Source symbols asked for.
        k: usize,
        /// Repair symbols asked for.
        m: usize,
    },
    /// The backend cannot run on this CPU.
    #[error("backend {0:?} is not available on this CPU")]
    BackendUnavailable(Backend),
    /// `encode` was not given exactly `k` sources.
    #[error("expected {expected} source symbols, got {got}")]
    SourceCount {
        /// `k`.
        expected: usize,
        /// Sources passed.
        got: usize,
    },
    /// `encode` was given more repair buffers than the code has repairs.
    #[error("the code has {max} repair symbols, {got} buffers given")]
    RepairCount {
        /// `m`.
        max: usize,
        /// Buffers passed.
        got: usize,
    },
    /// A symbol or buffer is not as long as the others.
    #[error("symbol {index} is {got} bytes, expected {expected}")]
    LengthMismatch {
        /// The symbol's index in the block (its encoding symbol ID).
        index: usize,
        /// The length of the first symbol.
        expected: usize,
        /// This symbol's length.
        got: usize,
    },
    /// An index is not in `0..k + m` (or, for an output, not in `0..k`).
    #[error("symbol index {index} is out of range 0..{limit}")]
    IndexOutOfRange {
        /// The offending index.
        index: usize,
        /// The exclusive upper bound.
        limit: usize,
    },
    /// The same index appears twice among the received symbols or outputs.
    #[error("symbol index {index} given twice")]
    DuplicateIndex {
        /// The repeated index.
        index: usize,
    },
    /// An output asks to rebuild a source symbol that was received.
    #[error("source symbol {index} was received; nothing to rebuild")]
    NotMissing {
        /// The index.
        index: usize,
    },
    /// Fewer than `k` distinct symbols arrived: the block cannot be decoded.
    #[error("need {needed} symbols to decode, have {got}")]
    NotEnoughSymbols {
        /// `k`.
        needed: usize,
        /// Distinct symbols received.
        got: usize,
    },
    /// A padded symbol's length prefix says more than the symbol holds, or
    /// a payload does not fit the symbol.
    #[error("padded length {len} does not fit a {symbol_len}-byte symbol")]
    BadPadding {
        /// The payload length (given, or read from the prefix).
        len: usize,
        /// The symbol's length.
        symbol_len: usize,
    },
}
