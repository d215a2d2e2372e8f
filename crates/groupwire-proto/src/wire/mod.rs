//! Wire formats: one module per message, in smoltcp's `Packet<T>` / `Repr` shape.
//!
//! Every groupwire datagram except the standard ones starts with the
//! common [`header`]: a version byte, a kind byte, and a per-kind body.
//! The standard ones, spoken for interoperability with stock tools, are
//! RTP (RFC 3550, version 2 in the top bits of byte 0, where groupwire's
//! own version 1 leaves them zero) with the payload formats in [`rtp`]
//! (SMPTE 2022-1 FEC) and [`red`] (RFC 2198 redundancy), and [`rtcp`].
//! Reliable Blast UDP's data and control messages are in [`rbudp`];
//! parallel TCP striping's frames (one TCP byte stream per connection)
//! are in [`striped`].
//! Parsing never panics and never allocates more than the datagram's size;
//! unknown versions and kinds are errors the caller counts and drops.

pub mod afec;
pub mod block;
pub mod header;
pub mod rbudp;
pub mod red;
pub mod rtcp;
pub mod rtp;
pub mod striped;
pub mod ulpfec;

/// Declares a `#[repr(u8)]` wire enum with each variant's byte once, and
/// derives `TryFrom<u8>` (an unknown byte is the error `$unknown` makes of
/// it) and `From<Enum> for u8`, so the number and the name cannot drift
/// apart (smoltcp's `enum_with_unknown!` shape, without the `Unknown`
/// variant: an unknown byte here is an error the caller counts). Both wire
/// crates use it: `groupwire-proto`'s datagrams and `groupwire-relay`'s
/// frames.
///
/// ```
/// groupwire_proto::wire_enum! {
///     /// A colour.
///     #[derive(Clone, Copy, Debug, PartialEq, Eq)]
///     pub enum Colour: String = (|b| format!("no colour {b}")) {
///         /// Red.
///         Red = 1,
///         /// Blue.
///         Blue = 4,
///     }
/// }
/// assert_eq!(Colour::try_from(4), Ok(Colour::Blue));
/// assert_eq!(u8::from(Colour::Red), 1);
/// assert!(Colour::try_from(2).is_err());
/// ```
#[macro_export]
macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident : $err:ty = ($unknown:expr) {
            $( $(#[$vmeta:meta])* $variant:ident = $value:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[repr(u8)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant = $value ),+
        }

        impl ::core::convert::TryFrom<u8> for $name {
            type Error = $err;
            fn try_from(v: u8) -> ::core::result::Result<Self, $err> {
                let unknown = $unknown;
                match v {
                    $( $value => Ok(Self::$variant), )+
                    other => Err(unknown(other)),
                }
            }
        }

        impl ::core::convert::From<$name> for u8 {
            fn from(v: $name) -> u8 {
                v as u8
            }
        }
    };
}

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

/// A view of a packet in a buffer (smoltcp's `Packet<T>` shape): the
/// struct over any `AsRef<[u8]>`, and `new_unchecked`, `new_checked` and
/// `check_len` against the `$fixed` bytes of its fixed part. The
/// accessors are the caller's.
macro_rules! buffer_view {
    ($(#[$meta:meta])* $vis:vis struct $name:ident, fixed part $fixed:expr) => {
        $(#[$meta])*
        #[derive(Debug, Clone)]
        $vis struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// Wraps `buffer` without checking its length; accessors may
            /// panic until [`check_len`](Self::check_len) has returned `Ok`.
            pub const fn new_unchecked(buffer: T) -> Self {
                Self { buffer }
            }

            /// Wraps `buffer` after checking it holds the fixed part.
            pub fn new_checked(buffer: T) -> Result<Self, WireError> {
                let p = Self::new_unchecked(buffer);
                p.check_len()?;
                Ok(p)
            }

            #[doc = concat!(
                "`Ok` when the buffer holds at least [`", stringify!($fixed),
                "`] bytes, the fixed part. After that no accessor of the fixed part panics."
            )]
            pub fn check_len(&self) -> Result<(), WireError> {
                super::need(self.buffer.as_ref(), $fixed)
            }
        }
    };
}
pub(crate) use buffer_view;

/// `Ok` when `buf` holds at least `needed` bytes, else
/// [`WireError::Truncated`].
pub(crate) fn need(buf: &[u8], needed: usize) -> Result<(), WireError> {
    if buf.len() < needed {
        return Err(WireError::Truncated {
            needed,
            got: buf.len(),
        });
    }
    Ok(())
}

/// The big-endian `u16` at the start of `b`; the caller has checked the
/// length (as every `parse` does before it reads a field).
pub(crate) fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

/// The big-endian `u32` at the start of `b`; the length is checked.
pub(crate) fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// The big-endian `u64` at the start of `b`; the length is checked.
pub(crate) fn be64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}
