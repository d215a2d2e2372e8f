//! Wire formats: one module per message, in smoltcp's `Packet<T>` / `Repr` shape.
//!
//! Every groupwire datagram starts with the common [`header`]: a version
//! byte, a kind byte, and a per-kind body. Parsing never panics and never
//! allocates more than the datagram's size; unknown versions and kinds are
//! errors the caller counts and drops.

pub mod afec;
pub mod block;
pub mod header;

/// Why a datagram could not be parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// The buffer is shorter than the format needs.
    #[error("truncated: needed {needed} bytes, got {got}")]
    Truncated {
        /// Bytes the format needs.
        needed: usize,
        /// Bytes present.
        got: usize,
    },
    /// Byte 0 names a version this build does not speak.
    #[error("unsupported version {0}")]
    UnsupportedVersion(u8),
    /// The kind byte names no known message.
    #[error("unknown kind {0}")]
    UnknownKind(u8),
    /// A field holds an impossible value.
    #[error("malformed: {0}")]
    Malformed(&'static str),
    /// The datagram's checksum does not match its bytes (corrupted in
    /// transit, or forged badly).
    #[error("checksum mismatch")]
    Checksum,
}
