//! A sliding-window random linear code over GF(2^8) (or GF(2)),
//! wire-compatible with RFC 8681's FEC Schemes for FECFRAME (FEC Encoding
//! ID 10 over GF(2^8), 9 over GF(2)).
//!
//! A block code ([`ReedSolomon`](crate::ReedSolomon)) repairs a block of
//! `k` sources only once the whole block is sent, so a rebuilt packet
//! waits for its block's last source and repairs. Here every repair
//! symbol is a random linear combination of the *encoding window*, the
//! last few source symbols, and the window moves with every source: a
//! loss can be repaired by the next repair symbol, whatever its position,
//! and for the same overhead the code rebuilds sooner (RFC 8681 §1.1;
//! Tetrys, RFC 9407, works the same way).
//!
//! The pieces, each a plain value with no clock, I/O or lock:
//!
//! - [`TinyMt32`]: RFC 8682's generator, from which both ends derive a
//!   repair symbol's coefficients (RFC 8681 §3.5), so only a 16-bit key
//!   travels;
//! - [`generate_coding_coefs`]: RFC 8681 §3.6, the coefficients of one
//!   repair symbol from its Repair_Key, window size and density threshold
//!   DT;
//! - [`write_adui`] / [`read_adui`]: a source symbol is an ADU Information
//!   (flow ID, length, ADU, zero padding to the symbol size E);
//! - [`SourcePayloadId`] / [`RepairPayloadId`]: the FEC Payload IDs of
//!   source and repair packets (RFC 8681 §4.1.2, §4.1.3);
//! - [`Encoder`]: holds the encoding window and computes repair symbols
//!   on the crate's fastest GF(2^8) backend;
//! - [`Decoder`]: keeps a bounded linear system over the decoding window,
//!   reduces every arriving symbol at once (on-the-fly Gaussian
//!   elimination) and rebuilds each source as soon as the received
//!   symbols determine it.
//!
//! ```
//! use groupwire_codec::sliding::{Decoder, DecoderConfig, Encoder};
//!
//! let mut enc = Encoder::new(16, 8)?;
//! let mut dec = Decoder::new(DecoderConfig::new(16))?;
//! // Three ADUs; the second is lost on the way.
//! for (i, adu) in [&b"one"[..], b"two", b"three"].into_iter().enumerate() {
//!     let esi = enc.push_adu(0, adu)?;
//!     if i != 1 {
//!         dec.receive_source_adu(esi, 0, adu)?;
//!     }
//! }
//! // One repair over the window [0, 3) rebuilds it.
//! let (id, symbol) = enc.repair(0, 15)?;
//! assert_eq!((id.first_esi(), id.nss()), (0, 3));
//! dec.receive_repair(id, &symbol)?;
//! let r = dec.poll_recovered().expect("ESI 1 rebuilt");
//! assert_eq!((r.esi, r.flow_id, &r.adu[..]), (1, 0, &b"two"[..]));
//! # Ok::<(), groupwire_codec::sliding::SlidingError>(())
//! ```
//!
//! ## Where this departs from RFC 8681, and why
//!
//! - **One symbol per ADUI.** RFC 8681 §3.2 pads an ADUI to a multiple of
//!   E and lets it span several source symbols. Here an ADUI is exactly
//!   one symbol ([`write_adui`] refuses an ADU longer than `E - 3`), so a
//!   rebuilt symbol is a whole ADU that names its own length, and the
//!   receiver needs no map from ESIs to ADU boundaries. A sender picks E
//!   at least the largest ADU plus 3; the bytes on the wire for such a
//!   flow are the RFC's.
//! - **One repair symbol per call.** How many repair symbols go in one
//!   packet, and the packet around the FEC Payload ID, are the caller's.
//! - **Bounded decoding window.** RFC 8681 leaves the decoder's memory to
//!   the implementation (§6.2). Here the decoder tracks at most
//!   [`DecoderConfig::max_window`] consecutive ESIs and
//!   [`DecoderConfig::max_equations`] pending equations; a source leaving
//!   the window unrecovered is given up and counted, and so is an
//!   equation that would reach outside it.
//! - **No FEC Scheme-Specific Information.** E and the window size ratio
//!   are signalled out of band in FECFRAME; here they are configuration.

use std::collections::VecDeque;

use crate::backend::Backend;
use crate::{CodecError, gf, kernel};

pub use crate::tinymt32::TinyMt32;

/// FEC Encoding ID of RFC 8681's scheme over GF(2) (its §5).
pub const FEC_ENCODING_ID_GF2: u8 = 9;
/// FEC Encoding ID of RFC 8681's scheme over GF(2^8) (its §4).
pub const FEC_ENCODING_ID_GF256: u8 = 10;
/// The density threshold that makes every coefficient non-zero (a dense
/// code): DT is 4 bits and the RFC's test is `rand16() <= DT`.
pub const DT_DENSE: u8 = 15;
/// The most source symbols a repair symbol can cover: NSS is 12 bits.
pub const MAX_NSS: usize = 0x0FFF;
/// Bytes in front of the ADU in an ADUI: flow ID (1) and length (2).
pub const ADUI_HEADER_LEN: usize = 3;
/// The largest symbol size E: the FEC Scheme-Specific Information carries
/// E in 16 bits.
pub const MAX_SYMBOL_SIZE: usize = u16::MAX as usize;

/// The field the code works in, RFC 8681's `m`: GF(2^m), m = 1 or 8.
///
/// Both are computed with the same GF(2^8) arithmetic: over GF(2) the
/// coefficients are 0 or 1, and a product by 0 or 1 is the same in both
/// fields, so only [`generate_coding_coefs`] tells them apart.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Field {
    /// GF(2): repair symbols are XORs of window subsets (FEC Encoding ID 9).
    Gf2,
    /// GF(2^8) with x^8 + x^4 + x^3 + x^2 + 1 (FEC Encoding ID 10).
    #[default]
    Gf256,
}

impl Field {
    /// RFC 8681's `m`.
    pub fn m(self) -> u8 {
        match self {
            Field::Gf2 => 1,
            Field::Gf256 => 8,
        }
    }

    /// The FEC Encoding ID of the scheme over this field.
    pub fn fec_encoding_id(self) -> u8 {
        match self {
            Field::Gf2 => FEC_ENCODING_ID_GF2,
            Field::Gf256 => FEC_ENCODING_ID_GF256,
        }
    }
}

/// Why a sliding-window call was refused. Input from the network gets one
/// of these (and a count in [`DecoderStats`]), never a panic.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SlidingError {
    /// A density threshold above 15.
    #[error("density threshold {dt} is not in 0..=15")]
    BadDensity {
        /// The threshold given.
        dt: u8,
    },
    /// A field parameter `m` other than 1 or 8.
    #[error("GF(2^{m}) is not a field of RFC 8681 (m must be 1 or 8)")]
    BadField {
        /// The `m` given.
        m: u8,
    },
    /// A symbol size of zero or above [`MAX_SYMBOL_SIZE`].
    #[error("symbol size {size} is not in 1..=65535")]
    BadSymbolSize {
        /// The size given.
        size: usize,
    },
    /// A window of zero symbols, or more than the field allows.
    #[error("window of {size} symbols is not in 1..={max}")]
    BadWindow {
        /// The size given (or NSS read).
        size: usize,
        /// The largest allowed.
        max: usize,
    },
    /// A symbol of the wrong length.
    #[error("symbol is {got} bytes, expected {expected}")]
    LengthMismatch {
        /// The configured symbol size.
        expected: usize,
        /// The length given.
        got: usize,
    },
    /// An ADU too long for one symbol's ADUI.
    #[error("ADU of {len} bytes does not fit a {symbol_size}-byte ADUI")]
    AduTooLong {
        /// The ADU's length.
        len: usize,
        /// The symbol size.
        symbol_size: usize,
    },
    /// An ADUI whose length field says more than the symbol holds, or a
    /// symbol shorter than the ADUI header.
    #[error("ADUI length {len} does not fit a {symbol_size}-byte symbol")]
    BadAdui {
        /// The length field (0 for a symbol too short to have one).
        len: usize,
        /// The symbol's length.
        symbol_size: usize,
    },
    /// A repair was asked of an empty encoding window.
    #[error("the encoding window is empty")]
    EmptyWindow,
    /// A FEC Payload ID shorter than its fixed size.
    #[error("FEC Payload ID needs {needed} bytes, got {got}")]
    Truncated {
        /// Bytes the field takes.
        needed: usize,
        /// Bytes given.
        got: usize,
    },
    /// The backend cannot run on this CPU.
    #[error("backend {0:?} is not available on this CPU")]
    BackendUnavailable(Backend),
}

// ---------------------------------------------------------------------
// Coding coefficients.

//= RFC 8681 §3.6 (paraphrased, not quoted)
// generate_coding_coefficients(repair_key, cc_tab, cc_nb, dt, m) fills
// cc_tab[0..cc_nb], one coefficient per source symbol of the encoding
// window, and fails for dt > 15 or m not in {1, 8}. The PRNG is seeded
// with repair_key. With m = 1: dt = 15 makes every coefficient 1 without
// touching the PRNG; otherwise each is 1 if rand16() <= dt, else 0.
// With m = 8: dt = 15 draws rand256() until non-zero for each
// coefficient (so every source of the window counts); otherwise each
// coefficient first draws rand16(), and if that is <= dt draws rand256()
// until non-zero, else is 0. So (dt + 1) / 16 of the coefficients are
// non-zero on average, and the order of draws is part of the format.
/// RFC 8681 §3.6's `generate_coding_coefficients`: fills `cc_tab` (its
/// `cc_nb` entries, one per source symbol of the window, oldest first)
/// with the coefficients of the repair symbol keyed `repair_key`, for
/// density threshold `dt` (0..=15, 15 dense) over GF(2^`m`), `m` 1 or 8.
///
/// Coefficients are bytes whatever `m`: 0 or 1 for m = 1. With m = 1 and
/// `dt` = 15 every coefficient is 1 and the key is not used.
///
/// ```
/// use groupwire_codec::sliding::generate_coding_coefs;
///
/// let mut cc = [0u8; 4];
/// generate_coding_coefs(1, &mut cc, 15, 8)?;
/// assert_eq!(cc, [37, 225, 177, 176]);
/// # Ok::<(), groupwire_codec::sliding::SlidingError>(())
/// ```
pub fn generate_coding_coefs(
    repair_key: u16,
    cc_tab: &mut [u8],
    dt: u8,
    m: u8,
) -> Result<(), SlidingError> {
    if dt > DT_DENSE {
        return Err(SlidingError::BadDensity { dt });
    }
    match m {
        1 => {
            if dt == DT_DENSE {
                cc_tab.fill(1);
            } else {
                let mut s = TinyMt32::new(u32::from(repair_key));
                for c in cc_tab {
                    *c = u8::from(s.rand16() <= dt);
                }
            }
        }
        8 => {
            let mut s = TinyMt32::new(u32::from(repair_key));
            let non_zero = |s: &mut TinyMt32| loop {
                let c = s.rand256();
                if c != 0 {
                    break c;
                }
            };
            if dt == DT_DENSE {
                for c in cc_tab {
                    *c = non_zero(&mut s);
                }
            } else {
                for c in cc_tab {
                    *c = if s.rand16() <= dt {
                        non_zero(&mut s)
                    } else {
                        0
                    };
                }
            }
        }
        _ => return Err(SlidingError::BadField { m }),
    }
    Ok(())
}

// ---------------------------------------------------------------------
// ADU Information.

//= RFC 8681 §3.2 (paraphrased, not quoted)
// A source symbol is built from an ADU Information (ADUI): the flow ID F
// (8 bits, which flow the ADU belongs to), the length L of the ADU in
// bytes (16 bits, network order), the ADU, then zero padding. F and L are
// there so that a rebuilt ADU can be handed to the right flow with its
// true length; the padding never goes on the wire (a source packet
// carries the ADU only).
/// Writes the ADUI of `adu` from flow `flow_id` into `symbol`: `F (1) ||
/// L (2, big-endian) || ADU || zeros`, exactly `symbol.len()` bytes (the
/// symbol size E). Fails if the ADU does not fit in one symbol; see the
/// module docs for why an ADUI here is always one symbol.
pub fn write_adui(flow_id: u8, adu: &[u8], symbol: &mut [u8]) -> Result<(), SlidingError> {
    let too_long = SlidingError::AduTooLong {
        len: adu.len(),
        symbol_size: symbol.len(),
    };
    // F, then L || ADU || zeros: the crate's length-prefixed padding.
    let Some((flow, rest)) = symbol.split_first_mut() else {
        return Err(too_long);
    };
    crate::pad(adu, rest).map_err(|_| too_long)?;
    *flow = flow_id;
    Ok(())
}

/// The flow ID and ADU of an ADUI written by [`write_adui`]. Fails on a
/// symbol shorter than the 3-byte header or a length field that runs
/// past the symbol (a corrupt rebuild); the padding is not checked.
pub fn read_adui(symbol: &[u8]) -> Result<(u8, &[u8]), SlidingError> {
    let bad = |len| SlidingError::BadAdui {
        len,
        symbol_size: symbol.len(),
    };
    let Some((&flow_id, rest)) = symbol.split_first() else {
        return Err(bad(0));
    };
    let adu = crate::unpad(rest).map_err(|e| match e {
        CodecError::BadPadding { len, .. } => bad(len),
        _ => bad(0),
    })?;
    Ok((flow_id, adu))
}

// ---------------------------------------------------------------------
// FEC Payload IDs.

//= RFC 8681 §4.1.2 (paraphrased, not quoted)
// The Explicit Source FEC Payload ID of a source packet is the 32-bit ESI
// of its first (here: only) source symbol, in network byte order.
/// The Explicit Source FEC Payload ID: the ESI of the source symbol the
/// packet's ADU maps to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SourcePayloadId {
    /// Encoding symbol ID; wraps from 2^32 - 1 to 0 (RFC 8681 §3.4).
    pub esi: u32,
}

impl SourcePayloadId {
    /// Bytes on the wire.
    pub const LEN: usize = 4;

    /// Reads the field from the front of `buf`, returning it and the bytes
    /// after it.
    pub fn parse(buf: &[u8]) -> Result<(Self, &[u8]), SlidingError> {
        let Some((head, rest)) = buf.split_first_chunk::<{ Self::LEN }>() else {
            return Err(SlidingError::Truncated {
                needed: Self::LEN,
                got: buf.len(),
            });
        };
        Ok((
            Self {
                esi: u32::from_be_bytes(*head),
            },
            rest,
        ))
    }

    /// The field's bytes.
    pub fn to_bytes(self) -> [u8; Self::LEN] {
        self.esi.to_be_bytes()
    }
}

//= RFC 8681 §4.1.3 (paraphrased, not quoted)
// The Repair FEC Payload ID is 8 bytes, network byte order:
//
//    0                   1                   2                   3
//    0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//   |       Repair_Key              |  DT   |NSS (# src symb in ew) |
//   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//   |            ESI of First Source Symbol in Encoding Window      |
//   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// Repair_Key seeds the coefficient generator; DT is the density
// threshold; NSS the number of source symbols in the encoding window when
// the repair was made; the last word the ESI of the window's first
// (oldest) source symbol. The window is the NSS consecutive ESIs from it.
/// The Repair FEC Payload ID: what a receiver needs to regenerate a repair
/// symbol's coefficients and know which sources it covers.
///
/// ```
/// use groupwire_codec::sliding::RepairPayloadId;
///
/// let id = RepairPayloadId::new(0x1234, 15, 10, 0xDEAD_BEEF)?;
/// assert_eq!(id.to_bytes(), [0x12, 0x34, 0xF0, 0x0A, 0xDE, 0xAD, 0xBE, 0xEF]);
/// assert_eq!(RepairPayloadId::parse(&id.to_bytes())?, (id, &[][..]));
/// # Ok::<(), groupwire_codec::sliding::SlidingError>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RepairPayloadId {
    repair_key: u16,
    dt: u8,
    nss: u16,
    first_esi: u32,
}

impl RepairPayloadId {
    /// Bytes on the wire.
    pub const LEN: usize = 8;

    /// The fields, checked to fit: `dt <= 15` and `nss <= 4095`. An NSS of
    /// 0 can be written (the wire can carry it) but names no source, so a
    /// [`Decoder`] refuses it.
    pub fn new(repair_key: u16, dt: u8, nss: u16, first_esi: u32) -> Result<Self, SlidingError> {
        if dt > DT_DENSE {
            return Err(SlidingError::BadDensity { dt });
        }
        if usize::from(nss) > MAX_NSS {
            return Err(SlidingError::BadWindow {
                size: usize::from(nss),
                max: MAX_NSS,
            });
        }
        Ok(Self {
            repair_key,
            dt,
            nss,
            first_esi,
        })
    }

    /// The seed of the repair symbol's coefficients.
    pub fn repair_key(self) -> u16 {
        self.repair_key
    }

    /// The density threshold, 0..=15.
    pub fn dt(self) -> u8 {
        self.dt
    }

    /// Source symbols in the encoding window, 0..=4095.
    pub fn nss(self) -> u16 {
        self.nss
    }

    /// ESI of the window's first (oldest) source symbol.
    pub fn first_esi(self) -> u32 {
        self.first_esi
    }

    /// Reads the field from the front of `buf`, returning it and the bytes
    /// after it (the repair symbol). Every 8 bytes are a valid field.
    pub fn parse(buf: &[u8]) -> Result<(Self, &[u8]), SlidingError> {
        let Some((head, rest)) = buf.split_first_chunk::<{ Self::LEN }>() else {
            return Err(SlidingError::Truncated {
                needed: Self::LEN,
                got: buf.len(),
            });
        };
        let [k0, k1, d_n, n1, e0, e1, e2, e3] = *head;
        Ok((
            Self {
                repair_key: u16::from_be_bytes([k0, k1]),
                dt: d_n >> 4,
                nss: u16::from_be_bytes([d_n & 0x0F, n1]),
                first_esi: u32::from_be_bytes([e0, e1, e2, e3]),
            },
            rest,
        ))
    }

    /// The field's bytes.
    pub fn to_bytes(self) -> [u8; Self::LEN] {
        let [k0, k1] = self.repair_key.to_be_bytes();
        let [n0, n1] = self.nss.to_be_bytes();
        let [e0, e1, e2, e3] = self.first_esi.to_be_bytes();
        [k0, k1, (self.dt << 4) | n0, n1, e0, e1, e2, e3]
    }
}

// ---------------------------------------------------------------------
// Encoder.

/// The sending side: the encoding window of the last source symbols and
/// their ESIs, and repair symbols over it.
///
/// Each source symbol gets the next ESI (wrapping from 2^32 - 1 to 0,
/// RFC 8681 §3.4). The window holds at most `max_window` symbols; pushing
/// one more drops the oldest (RFC 8681 §3.3), and
/// [`drop_oldest`](Self::drop_oldest) drops symbols whose ADUs have
/// expired. Sources are copied in, so the caller keeps no buffers alive.
///
/// The choice of Repair_Key and DT per repair is the caller's: RFC 8681
/// §6.1 suggests a Repair_Key that counts up and wraps.
#[derive(Clone, Debug)]
pub struct Encoder {
    symbol_size: usize,
    max_window: usize,
    field: Field,
    backend: Backend,
    window: VecDeque<Box<[u8]>>,
    /// ESI of `window[0]` (of the next symbol when the window is empty).
    first_esi: u32,
    coefs: Vec<u8>,
    mults: Vec<u8>,
    scratch: Vec<u8>,
}

impl Encoder {
    /// An encoder for symbols of `symbol_size` bytes (E, 1..=65535) and
    /// windows of up to `max_window` symbols (RFC 8681 §3.1's
    /// `ew_max_size`, 1..=4095, what NSS can say), over GF(2^8), on the
    /// fastest backend, its first ESI 0.
    pub fn new(symbol_size: usize, max_window: usize) -> Result<Self, SlidingError> {
        if symbol_size == 0 || symbol_size > MAX_SYMBOL_SIZE {
            return Err(SlidingError::BadSymbolSize { size: symbol_size });
        }
        if max_window == 0 || max_window > MAX_NSS {
            return Err(SlidingError::BadWindow {
                size: max_window,
                max: MAX_NSS,
            });
        }
        Ok(Self {
            symbol_size,
            max_window,
            field: Field::Gf256,
            backend: Backend::detect(),
            window: VecDeque::new(),
            first_esi: 0,
            coefs: Vec::new(),
            mults: Vec::new(),
            scratch: Vec::new(),
        })
    }

    /// The same encoder over another field.
    pub fn with_field(mut self, field: Field) -> Self {
        self.field = field;
        self
    }

    /// The same encoder on another backend (all compute the same bytes).
    pub fn with_backend(mut self, backend: Backend) -> Result<Self, SlidingError> {
        if !backend.is_available() {
            return Err(SlidingError::BackendUnavailable(backend));
        }
        self.backend = backend;
        Ok(self)
    }

    /// The same encoder with its window emptied and the next source
    /// getting ESI `esi` (RFC 8681 does not fix the first ESI).
    pub fn starting_at(mut self, esi: u32) -> Self {
        self.window.clear();
        self.first_esi = esi;
        self
    }

    /// E, bytes per symbol.
    pub fn symbol_size(&self) -> usize {
        self.symbol_size
    }

    /// The most symbols the window holds.
    pub fn max_window(&self) -> usize {
        self.max_window
    }

    /// The field.
    pub fn field(&self) -> Field {
        self.field
    }

    /// The backend running the multiply-add loop.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Symbols in the window now.
    pub fn window_len(&self) -> usize {
        self.window.len()
    }

    /// ESI of the window's oldest symbol, `None` when it is empty.
    pub fn first_esi(&self) -> Option<u32> {
        (!self.window.is_empty()).then_some(self.first_esi)
    }

    /// The ESI the next source symbol gets.
    pub fn next_esi(&self) -> u32 {
        self.first_esi.wrapping_add(self.window.len() as u32)
    }

    /// Adds the ADUI of `adu` (see [`write_adui`]) to the window and
    /// returns its ESI, to be sent in the source packet's
    /// [`SourcePayloadId`] beside the ADU.
    pub fn push_adu(&mut self, flow_id: u8, adu: &[u8]) -> Result<u32, SlidingError> {
        // Checked before a full window gives up its oldest symbol's buffer.
        if adu.len() + ADUI_HEADER_LEN > self.symbol_size {
            return Err(SlidingError::AduTooLong {
                len: adu.len(),
                symbol_size: self.symbol_size,
            });
        }
        let mut buf = self.take_buffer();
        // Cannot fail now: E <= 65535, so the length fits its 16 bits.
        write_adui(flow_id, adu, &mut buf)?;
        Ok(self.push_buffer(buf))
    }

    /// Adds a ready-made source symbol (exactly E bytes) to the window and
    /// returns its ESI.
    pub fn push_symbol(&mut self, symbol: &[u8]) -> Result<u32, SlidingError> {
        if symbol.len() != self.symbol_size {
            return Err(SlidingError::LengthMismatch {
                expected: self.symbol_size,
                got: symbol.len(),
            });
        }
        let mut buf = self.take_buffer();
        buf.copy_from_slice(symbol);
        Ok(self.push_buffer(buf))
    }

    /// Drops up to `n` of the oldest symbols (their ADUs are past their
    /// deadline, RFC 8681 §3.3); returns how many were dropped.
    pub fn drop_oldest(&mut self, n: usize) -> usize {
        let n = n.min(self.window.len());
        self.window.drain(..n);
        self.first_esi = self.first_esi.wrapping_add(n as u32);
        n
    }

    /// A buffer for the next symbol: the oldest one's when the window is
    /// full (it is about to leave), so a full encoder does not allocate.
    fn take_buffer(&mut self) -> Box<[u8]> {
        if self.window.len() == self.max_window
            && let Some(b) = self.window.pop_front()
        {
            self.first_esi = self.first_esi.wrapping_add(1);
            return b;
        }
        vec![0u8; self.symbol_size].into_boxed_slice()
    }

    fn push_buffer(&mut self, buf: Box<[u8]>) -> u32 {
        let esi = self.next_esi();
        self.window.push_back(buf);
        esi
    }

    //= RFC 8681 §3.7 (paraphrased, not quoted)
    // A repair symbol is the sum over i in 0..ew_size of cc_tab[i] times
    // the i-th source symbol of the encoding window, oldest first, with
    // the field's addition (XOR) and multiplication (GF(2^8) with
    // x^8 + x^4 + x^3 + x^2 + 1; over GF(2) the coefficients are 0 or 1).
    /// Computes into `out` (E bytes) the repair symbol keyed `repair_key`
    /// with density threshold `dt` over the whole current window, and
    /// returns its Repair FEC Payload ID.
    ///
    /// Only the non-zero coefficients' symbols are read, so a sparse code
    /// (small `dt`) is cheaper; the multiply-add runs on the encoder's
    /// backend in one pass over `out`.
    pub fn repair_into(
        &mut self,
        repair_key: u16,
        dt: u8,
        out: &mut [u8],
    ) -> Result<RepairPayloadId, SlidingError> {
        if out.len() != self.symbol_size {
            return Err(SlidingError::LengthMismatch {
                expected: self.symbol_size,
                got: out.len(),
            });
        }
        let n = self.window.len();
        if n == 0 {
            return Err(SlidingError::EmptyWindow);
        }
        let id = RepairPayloadId::new(repair_key, dt, n as u16, self.first_esi)?;
        self.coefs.clear();
        self.coefs.resize(n, 0);
        generate_coding_coefs(repair_key, &mut self.coefs, dt, self.field.m())?;
        self.mults.clear();
        let mut inputs: Vec<&[u8]> = Vec::with_capacity(n);
        for (&c, s) in self.coefs.iter().zip(&self.window) {
            if c != 0 {
                self.mults.push(c);
                inputs.push(s);
            }
        }
        kernel::combine(self.backend, &self.mults, &inputs, out, &mut self.scratch);
        Ok(id)
    }

    /// [`repair_into`](Self::repair_into) into a new buffer.
    pub fn repair(
        &mut self,
        repair_key: u16,
        dt: u8,
    ) -> Result<(RepairPayloadId, Vec<u8>), SlidingError> {
        let mut out = vec![0u8; self.symbol_size];
        let id = self.repair_into(repair_key, dt, &mut out)?;
        Ok((id, out))
    }
}

// ---------------------------------------------------------------------
// Decoder.

//= RFC 8681 §3.1 (paraphrased, not quoted)
// Among the codec parameters: ew_max_size, the largest encoding window
// (the encoder's max_window here); dw_max_size, the largest decoding
// window, at least ew_max_size; and ls_max_size, the largest linear
// system the decoder keeps. The values are the implementation's choice.
/// A [`Decoder`]'s bounds, RFC 8681 §3.1's `dw_max_size` and
/// `ls_max_size`. Build with [`DecoderConfig::new`] and change the fields
/// needed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DecoderConfig {
    /// E, bytes per symbol (1..=65535).
    pub symbol_size: usize,
    /// The most consecutive ESIs tracked (1..=4095): the decoding window.
    /// A repair covering more is refused; the window slides forward when
    /// a newer ESI arrives, and what leaves it is given up. It should be
    /// at least the sender's largest encoding window.
    pub max_window: usize,
    /// The most pending equations (repair symbols not yet used up); an
    /// innovative repair arriving at the limit is dropped and counted.
    /// There can never be more than `max_window` of them (each has its own
    /// unknown source), so a larger value changes nothing.
    pub max_equations: usize,
    /// The field; must be the sender's.
    pub field: Field,
}

impl DecoderConfig {
    /// Default decoding window, in symbols.
    pub const DEFAULT_MAX_WINDOW: usize = 256;
    /// Default cap on pending equations.
    pub const DEFAULT_MAX_EQUATIONS: usize = 256;

    /// Symbols of `symbol_size` bytes over GF(2^8), a 256-symbol window
    /// and up to 256 pending equations.
    pub fn new(symbol_size: usize) -> Self {
        Self {
            symbol_size,
            max_window: Self::DEFAULT_MAX_WINDOW,
            max_equations: Self::DEFAULT_MAX_EQUATIONS,
            field: Field::Gf256,
        }
    }
}

/// A source symbol the decoder rebuilt, and the ADU it carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recovered {
    /// Its ESI.
    pub esi: u32,
    /// The flow ID from its ADUI.
    pub flow_id: u8,
    /// The ADU, cut from the ADUI by its length field.
    pub adu: Vec<u8>,
}

/// What a [`Decoder`] has seen and done. Every symbol it refuses or drops
/// is counted in exactly one of the "why" counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DecoderStats {
    /// Source symbols given to it.
    pub sources: u64,
    /// Repair symbols given to it.
    pub repairs: u64,
    /// Source symbols rebuilt (each ESI once).
    pub recovered: u64,
    /// Source symbols rebuilt but not handed out: their ADUI length field
    /// ran past the symbol (a sender bug or a hostile repair).
    pub corrupt_adui: u64,
    /// Rebuilt sources dropped from the queue because it was full (the
    /// caller did not [`poll`](Decoder::poll_recovered) them in time).
    pub recovered_overflow: u64,
    /// Source symbols given twice (received, or received after rebuild).
    pub duplicate_sources: u64,
    /// Repairs that said nothing new: every source they cover was known,
    /// or they are a combination of repairs held.
    pub redundant_repairs: u64,
    /// Source symbols older than the decoding window, or repairs with a
    /// non-zero coefficient on one.
    pub stale: u64,
    /// Symbols refused outright: wrong length, NSS 0, or NSS wider than
    /// the decoding window.
    pub malformed: u64,
    /// Innovative repairs dropped because `max_equations` were pending.
    pub dropped_equations: u64,
    /// Pending equations given up because their first unknown source left
    /// the decoding window.
    pub expired_equations: u64,
    /// Source symbols that left the decoding window neither received nor
    /// rebuilt.
    pub unrecovered: u64,
}

/// One ESI of the decoding window.
#[derive(Clone, Debug)]
enum Slot {
    /// Neither received nor rebuilt, and no equation pivots on it.
    Unknown,
    /// Received or rebuilt: the source symbol.
    Known(Box<[u8]>),
    /// Unknown, and the pivot of this equation.
    Pivot(Row),
}

/// One pending equation, in reduced row echelon form with the others:
/// `sum_j coefs[j] * source(pivot + j) = data`, where the pivot is the
/// ESI of the slot holding it.
///
/// Invariants (with `p` the pivot):
/// - `coefs[0] == 1` and the last coefficient is non-zero;
/// - nothing before `p` (the pivot is the row's oldest unknown), so when
///   `p` leaves the window no other row refers to it;
/// - zero at every known source and at every other row's pivot, so a row
///   with only its pivot left *is* that source.
#[derive(Clone, Debug)]
struct Row {
    coefs: Vec<u8>,
    data: Box<[u8]>,
}

impl Row {
    fn coef(&self, j: usize) -> u8 {
        self.coefs.get(j).copied().unwrap_or(0)
    }

    fn is_solved(&self) -> bool {
        self.coefs.len() == 1
    }

    fn trim(&mut self) {
        while self.coefs.len() > 1 && self.coefs.last() == Some(&0) {
            self.coefs.pop();
        }
    }
}

/// The receiving side: source and repair symbols in, rebuilt sources out.
///
/// It keeps the decoding window (the last
/// [`max_window`](DecoderConfig::max_window) ESIs: their source symbols
/// when known, and the pending equations over the unknown ones) in
/// reduced row echelon form, each equation pivoting on its oldest unknown
/// source. Every arriving symbol is reduced against it at once, so a
/// source is rebuilt on the very symbol that makes it determined, and
/// every source the symbols received determine is rebuilt (unless it left
/// the window first).
///
/// ESIs wrap (serial-number order, as RFC 1982: an ESI less than 2^31
/// ahead of the window's start is ahead). Anything from the network is
/// checked: a bad symbol is an error and a count in
/// [`stats`](Self::stats), never a panic. Memory is bounded whatever
/// arrives: each of the at most `max_window` ESIs holds its source or one
/// equation (E bytes of symbol and at most `max_window` coefficients),
/// there are at most `max_equations` equations, and at most `max_window`
/// rebuilt ADUs wait to be polled (the oldest is dropped, and counted,
/// past that).
#[derive(Clone, Debug)]
pub struct Decoder {
    cfg: DecoderConfig,
    backend: Backend,
    /// ESI of `slots[0]`; meaningless until `started`.
    lo: u32,
    started: bool,
    /// Whether any ESI has left the window: then the window never grows
    /// backwards again (a source given up must not come back as rebuilt).
    slid: bool,
    slots: VecDeque<Slot>,
    equations: usize,
    recovered: VecDeque<Recovered>,
    stats: DecoderStats,
    coefs: Vec<u8>,
    work: Vec<u8>,
    mults: Vec<u8>,
    scratch: Vec<u8>,
}

/// Where an ESI falls against the window.
enum Place {
    /// Offset into the window (may be past its end: not yet tracked).
    Ahead(u32),
    /// This many ESIs before the window's start.
    Behind(u32),
}

impl Decoder {
    /// A decoder with these bounds, on the fastest backend.
    pub fn new(cfg: DecoderConfig) -> Result<Self, SlidingError> {
        if cfg.symbol_size == 0 || cfg.symbol_size > MAX_SYMBOL_SIZE {
            return Err(SlidingError::BadSymbolSize {
                size: cfg.symbol_size,
            });
        }
        if cfg.max_window == 0 || cfg.max_window > MAX_NSS {
            return Err(SlidingError::BadWindow {
                size: cfg.max_window,
                max: MAX_NSS,
            });
        }
        Ok(Self {
            cfg,
            backend: Backend::detect(),
            lo: 0,
            started: false,
            slid: false,
            slots: VecDeque::new(),
            equations: 0,
            recovered: VecDeque::new(),
            stats: DecoderStats::default(),
            coefs: Vec::new(),
            work: Vec::new(),
            mults: Vec::new(),
            scratch: Vec::new(),
        })
    }

    /// The same decoder on another backend (all compute the same bytes).
    pub fn with_backend(mut self, backend: Backend) -> Result<Self, SlidingError> {
        if !backend.is_available() {
            return Err(SlidingError::BackendUnavailable(backend));
        }
        self.backend = backend;
        Ok(self)
    }

    /// Its bounds.
    pub fn config(&self) -> &DecoderConfig {
        &self.cfg
    }

    /// The backend running the multiply-add loop.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Counters so far.
    pub fn stats(&self) -> DecoderStats {
        self.stats
    }

    /// ESIs tracked now (at most `max_window`).
    pub fn window_len(&self) -> usize {
        self.slots.len()
    }

    /// ESI of the decoding window's oldest slot, `None` before the first
    /// symbol.
    pub fn window_start(&self) -> Option<u32> {
        self.started.then_some(self.lo)
    }

    /// Pending equations (at most `max_equations`).
    pub fn equations(&self) -> usize {
        self.equations
    }

    /// Source symbols held (received or rebuilt, still in the window).
    pub fn known_sources(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| matches!(s, Slot::Known(_)))
            .count()
    }

    /// Whether the source with this ESI is in the window and known.
    pub fn is_known(&self, esi: u32) -> bool {
        matches!(self.slot(esi), Some(Slot::Known(_)))
    }

    /// The next rebuilt source, oldest rebuild first.
    pub fn poll_recovered(&mut self) -> Option<Recovered> {
        self.recovered.pop_front()
    }

    /// Rebuilt sources waiting to be polled.
    pub fn pending_recovered(&self) -> usize {
        self.recovered.len()
    }

    /// A received source symbol: the ADU of a source packet, with the ESI
    /// of its [`SourcePayloadId`] and its flow's ID (the receiver rebuilds
    /// the ADUI the sender coded).
    pub fn receive_source_adu(
        &mut self,
        esi: u32,
        flow_id: u8,
        adu: &[u8],
    ) -> Result<(), SlidingError> {
        let mut buf = vec![0u8; self.cfg.symbol_size].into_boxed_slice();
        if let Err(e) = write_adui(flow_id, adu, &mut buf) {
            self.stats.sources += 1;
            self.stats.malformed += 1;
            return Err(e);
        }
        self.receive_source_buf(esi, buf)
    }

    /// A received source symbol as its ADUI (exactly E bytes).
    pub fn receive_source(&mut self, esi: u32, adui: &[u8]) -> Result<(), SlidingError> {
        if adui.len() != self.cfg.symbol_size {
            self.stats.sources += 1;
            self.stats.malformed += 1;
            return Err(SlidingError::LengthMismatch {
                expected: self.cfg.symbol_size,
                got: adui.len(),
            });
        }
        self.receive_source_buf(esi, adui.into())
    }

    fn receive_source_buf(&mut self, esi: u32, data: Box<[u8]>) -> Result<(), SlidingError> {
        self.stats.sources += 1;
        if !self.track(esi, 1) {
            self.stats.stale += 1;
            return Ok(());
        }
        let d = esi.wrapping_sub(self.lo) as usize;
        match std::mem::replace(&mut self.slots[d], Slot::Unknown) {
            known @ Slot::Known(_) => {
                self.slots[d] = known;
                self.stats.duplicate_sources += 1;
            }
            Slot::Unknown => {
                // A free column: substitute it into every row using it.
                // Only rows pivoting before `d` can.
                let mut solved = Vec::new();
                for q in 0..d {
                    let Slot::Pivot(row) = &mut self.slots[q] else {
                        continue;
                    };
                    let c = row.coef(d - q);
                    if c == 0 {
                        continue;
                    }
                    kernel::mul_add(self.backend, c, &data, &mut row.data, &mut self.scratch);
                    row.coefs[d - q] = 0;
                    row.trim();
                    if row.is_solved() {
                        solved.push(q);
                    }
                }
                self.slots[d] = Slot::Known(data);
                self.settle(&solved);
            }
            Slot::Pivot(mut row) => {
                // Its own pivot: no other row uses this column. The row
                // now speaks of the sources after it only.
                self.equations -= 1;
                kernel::mul_add(self.backend, 1, &data, &mut row.data, &mut self.scratch);
                self.slots[d] = Slot::Known(data);
                let Some(k) = row.coefs.iter().skip(1).position(|&c| c != 0) else {
                    // It only ever determined this source.
                    return Ok(());
                };
                row.coefs.drain(..=k);
                let inv = gf::inv(row.coefs[0]).unwrap_or(1);
                for c in &mut row.coefs {
                    *c = gf::mul(*c, inv);
                }
                kernel::scale(self.backend, inv, &mut row.data, &mut self.scratch);
                self.insert(d + k + 1, row);
            }
        }
        Ok(())
    }

    /// A received repair symbol (exactly E bytes) and its Repair FEC
    /// Payload ID.
    pub fn receive_repair(
        &mut self,
        id: RepairPayloadId,
        symbol: &[u8],
    ) -> Result<(), SlidingError> {
        self.stats.repairs += 1;
        if symbol.len() != self.cfg.symbol_size {
            self.stats.malformed += 1;
            return Err(SlidingError::LengthMismatch {
                expected: self.cfg.symbol_size,
                got: symbol.len(),
            });
        }
        let nss = usize::from(id.nss());
        if nss == 0 || nss > self.cfg.max_window {
            self.stats.malformed += 1;
            return Err(SlidingError::BadWindow {
                size: nss,
                max: self.cfg.max_window,
            });
        }
        let first = id.first_esi();
        if !self.track(first, nss) {
            self.stats.stale += 1;
            return Ok(());
        }
        self.coefs.clear();
        self.coefs.resize(nss, 0);
        generate_coding_coefs(
            id.repair_key(),
            &mut self.coefs,
            id.dt(),
            self.cfg.field.m(),
        )?;

        // The equation over the window: unknown sources' coefficients in
        // `work`; known sources and pivots' rows become terms of the data.
        let n = self.slots.len();
        self.work.clear();
        self.work.resize(n, 0);
        let mut terms: Vec<(usize, u8)> = Vec::new();
        for (i, &c) in self.coefs.iter().enumerate() {
            if c == 0 {
                continue;
            }
            // The window covers the repair's end, so an ESI outside it
            // is before its start (the offset wraps to a huge value).
            let d = first.wrapping_add(i as u32).wrapping_sub(self.lo) as usize;
            let Some(slot) = self.slots.get(d) else {
                // A non-zero coefficient on a source given up (or never
                // tracked): this equation can never be used.
                self.stats.stale += 1;
                return Ok(());
            };
            match slot {
                Slot::Unknown => self.work[d] ^= c,
                Slot::Known(_) => terms.push((d, c)),
                Slot::Pivot(row) => {
                    // Subtract c * row: its pivot cancels, its free
                    // columns land in `work`.
                    for (j, &rc) in row.coefs.iter().enumerate().skip(1) {
                        self.work[d + j] ^= gf::mul(c, rc);
                    }
                    terms.push((d, c));
                }
            }
        }
        let Some(p) = self.work.iter().position(|&c| c != 0) else {
            self.stats.redundant_repairs += 1;
            return Ok(());
        };
        if self.equations >= self.cfg.max_equations {
            self.stats.dropped_equations += 1;
            return Ok(());
        }
        let end = self.work.iter().rposition(|&c| c != 0).map_or(p, |e| e) + 1;
        let inv = gf::inv(self.work[p]).unwrap_or(1);
        let coefs: Vec<u8> = self.work[p..end].iter().map(|&c| gf::mul(c, inv)).collect();
        // data = inv * (symbol + sum c * term), in one pass.
        self.mults.clear();
        self.mults.push(inv);
        let mut inputs: Vec<&[u8]> = Vec::with_capacity(terms.len() + 1);
        inputs.push(symbol);
        for &(d, c) in &terms {
            self.mults.push(gf::mul(c, inv));
            inputs.push(match &self.slots[d] {
                Slot::Known(s) => s,
                Slot::Pivot(row) => &row.data,
                Slot::Unknown => unreachable!("terms are known sources and pivots"),
            });
        }
        let mut data = vec![0u8; self.cfg.symbol_size].into_boxed_slice();
        kernel::combine(
            self.backend,
            &self.mults,
            &inputs,
            &mut data,
            &mut self.scratch,
        );
        self.insert(p, Row { coefs, data });
        Ok(())
    }

    /// Puts `row` in as the equation pivoting on offset `p` (an unknown
    /// source no row pivots on, the row's first non-zero coefficient, 1,
    /// and zero at every other pivot and known source), then eliminates
    /// `p` from the other rows and hands out every row that became a
    /// single source.
    fn insert(&mut self, p: usize, row: Row) {
        debug_assert!(matches!(self.slots[p], Slot::Unknown));
        debug_assert_eq!(row.coefs.first(), Some(&1));
        let mut solved = Vec::new();
        // Rows pivoting after `p` have nothing at `p`.
        for q in 0..p {
            let Slot::Pivot(other) = &mut self.slots[q] else {
                continue;
            };
            let off = p - q;
            let c = other.coef(off);
            if c == 0 {
                continue;
            }
            if other.coefs.len() < off + row.coefs.len() {
                other.coefs.resize(off + row.coefs.len(), 0);
            }
            for (o, &r) in other.coefs[off..].iter_mut().zip(&row.coefs) {
                *o ^= gf::mul(c, r);
            }
            other.trim();
            kernel::mul_add(
                self.backend,
                c,
                &row.data,
                &mut other.data,
                &mut self.scratch,
            );
            if other.is_solved() {
                solved.push(q);
            }
        }
        if row.is_solved() {
            solved.push(p);
        }
        self.slots[p] = Slot::Pivot(row);
        self.equations += 1;
        self.settle(&solved);
    }

    /// Turns solved rows (only their pivot left) into known sources and
    /// queues them. Their columns are pivots, zero in every other row, so
    /// nothing else changes.
    fn settle(&mut self, solved: &[usize]) {
        for &q in solved {
            let slot = std::mem::replace(&mut self.slots[q], Slot::Unknown);
            let Slot::Pivot(row) = slot else {
                self.slots[q] = slot;
                continue;
            };
            self.equations -= 1;
            let esi = self.lo.wrapping_add(q as u32);
            self.stats.recovered += 1;
            match read_adui(&row.data) {
                Ok((flow_id, adu)) => {
                    if self.recovered.len() >= self.cfg.max_window {
                        self.recovered.pop_front();
                        self.stats.recovered_overflow += 1;
                    }
                    self.recovered.push_back(Recovered {
                        esi,
                        flow_id,
                        adu: adu.to_vec(),
                    });
                }
                Err(_) => self.stats.corrupt_adui += 1,
            }
            self.slots[q] = Slot::Known(row.data);
        }
    }

    fn place(&self, esi: u32) -> Place {
        let ahead = esi.wrapping_sub(self.lo);
        if ahead < 1 << 31 {
            Place::Ahead(ahead)
        } else {
            Place::Behind(self.lo.wrapping_sub(esi))
        }
    }

    fn slot(&self, esi: u32) -> Option<&Slot> {
        if !self.started {
            return None;
        }
        match self.place(esi) {
            Place::Ahead(d) => self.slots.get(d as usize),
            Place::Behind(_) => None,
        }
    }

    /// Makes the window cover the `len` ESIs from `first` (`1 <= len <=
    /// max_window`) as far as it can: grows it forward, sliding its start
    /// if needed, and backward while nothing has left it yet. Returns
    /// false when all of them lie before the window (then nothing
    /// changed but, on the first symbol, the start).
    ///
    /// The end is placed by its distance from `first`, not by its own
    /// serial-number order: a window straddling the point 2^31 ahead of
    /// the start would otherwise have its end taken for the past.
    fn track(&mut self, first: u32, len: usize) -> bool {
        let w = self.cfg.max_window;
        debug_assert!((1..=w).contains(&len));
        if !self.started {
            self.started = true;
            self.lo = first;
        }
        if let Place::Behind(back) = self.place(first) {
            let back = back as usize;
            if !self.slid && self.slots.len() + back <= w {
                for _ in 0..back {
                    self.slots.push_front(Slot::Unknown);
                }
                self.lo = first;
            } else if back >= len {
                return false;
            }
        }
        // `first` is ahead by less than 2^31, or behind by less than
        // `len`: either way this offset of the last ESI does not wrap.
        let last = first.wrapping_add(len as u32 - 1);
        if last.wrapping_sub(self.lo) as usize >= w {
            self.advance(last.wrapping_sub(w as u32 - 1));
        }
        let d = last.wrapping_sub(self.lo) as usize;
        while self.slots.len() <= d {
            self.slots.push_back(Slot::Unknown);
        }
        true
    }

    /// Slides the window's start forward to `new_lo`, giving up what
    /// leaves: rows pivoting there (no other row refers to their pivot)
    /// and unknown sources.
    fn advance(&mut self, new_lo: u32) {
        let n = new_lo.wrapping_sub(self.lo) as usize;
        for _ in 0..n.min(self.slots.len()) {
            match self.slots.pop_front() {
                Some(Slot::Unknown) => self.stats.unrecovered += 1,
                Some(Slot::Pivot(_)) => {
                    self.equations -= 1;
                    self.stats.expired_equations += 1;
                    self.stats.unrecovered += 1;
                }
                Some(Slot::Known(_)) | None => {}
            }
        }
        self.lo = new_lo;
        self.slid = true;
    }
}

#[cfg(test)]
mod tests;
