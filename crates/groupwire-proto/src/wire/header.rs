//! The common header of every groupwire datagram.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |    version    |     kind      |     flags     |   reserved    |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                          session id                           |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                     kind-specific body ...
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! - `version`: [`VERSION`]. Other values are rejected with
//!   [`WireError::UnsupportedVersion`] so a future format can coexist.
//! - `kind`: a [`Kind`]; unknown values give [`WireError::UnknownKind`].
//! - `flags`: per-kind bits; this module carries them opaquely.
//! - `reserved`: zero on emit, ignored on parse.
//! - `session id`: chosen by the endpoint that opens a session; lets one UDP
//!   port carry several sessions and lets a receiver drop stray datagrams.
//!
//! All fields are big-endian. After [`Packet::check_len`] returns `Ok`, no
//! accessor panics.

use super::WireError;

mod field {
    use core::ops::Range;
    pub(super) const VERSION: usize = 0;
    pub(super) const KIND: usize = 1;
    pub(super) const FLAGS: usize = 2;
    pub(super) const RESERVED: usize = 3;
    pub(super) const SESSION: Range<usize> = 4..8;
    pub(super) const BODY: usize = 8;
}

/// Bytes before the kind-specific body.
pub const HEADER_LEN: usize = field::BODY;
/// The only version this build speaks.
pub const VERSION: u8 = 1;

crate::wire_enum! {
    /// What the body of a datagram is. Numbers are stable on the wire.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
    #[non_exhaustive]
    pub enum Kind: WireError = (WireError::UnknownKind) {
        /// Awareness data with piggybacked redundant messages (Dyck & Gutwin AFEC).
        AfecData = 1,
        /// Receiver feedback for AFEC (NAK / INC / cannot-meet), and its acknowledgement.
        AfecControl = 2,
        /// A block-FEC source or repair symbol (GENEVA), checksummed. Kind 3
        /// was its unchecked predecessor and is no longer spoken.
        BlockData = 8,
        /// Periodic block-FEC loss report (GENEVA SYN report), checksummed.
        /// Kind 4 was its unchecked predecessor and is no longer spoken.
        BlockReport = 9,
        /// XOR-parity FEC over UDP (Leigh et al.).
        XorData = 5,
        /// Reliable Blast UDP data and control (Leigh et al.).
        Blast = 6,
        /// Active probe for the resource monitor (RTT, loss, bandwidth).
        Probe = 7,
        /// Parallel TCP striping's frames (Leigh et al. §4.2, Park et al.),
        /// on each of the transfer's TCP connections.
        Striped = 10,
    }
}

super::buffer_view! {
    /// A read/write view of a header in a buffer.
    pub struct Packet, fixed part HEADER_LEN
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// The version byte.
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VERSION]
    }

    /// The raw kind byte.
    pub fn kind_raw(&self) -> u8 {
        self.buffer.as_ref()[field::KIND]
    }

    /// The flags byte.
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    /// The session id.
    pub fn session(&self) -> u32 {
        let b = &self.buffer.as_ref()[field::SESSION];
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }

    /// The bytes after the header, borrowed from the buffer.
    pub fn body(&self) -> &[u8] {
        &self.buffer.as_ref()[field::BODY..]
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the version byte.
    pub fn set_version(&mut self, v: u8) {
        self.buffer.as_mut()[field::VERSION] = v;
    }
    /// Sets the kind byte.
    pub fn set_kind(&mut self, k: Kind) {
        self.buffer.as_mut()[field::KIND] = k as u8;
    }
    /// Sets the flags byte.
    pub fn set_flags(&mut self, f: u8) {
        self.buffer.as_mut()[field::FLAGS] = f;
    }
    /// Zeroes the reserved byte.
    pub fn clear_reserved(&mut self) {
        self.buffer.as_mut()[field::RESERVED] = 0;
    }
    /// Sets the session id.
    pub fn set_session(&mut self, s: u32) {
        self.buffer.as_mut()[field::SESSION].copy_from_slice(&s.to_be_bytes());
    }
    /// The body, mutably.
    pub fn body_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::BODY..]
    }
}

/// A parsed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// What the body is.
    pub kind: Kind,
    /// Per-kind flag bits.
    pub flags: u8,
    /// The session the datagram belongs to.
    pub session: u32,
}

impl Repr {
    /// Parses and validates a header. Never panics.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Self, WireError> {
        packet.check_len()?;
        if packet.version() != VERSION {
            return Err(WireError::UnsupportedVersion(packet.version()));
        }
        Ok(Self {
            kind: Kind::try_from(packet.kind_raw())?,
            flags: packet.flags(),
            session: packet.session(),
        })
    }

    /// Parses the header at the start of `buf` and checks it is of `kind`:
    /// [`WireError::Malformed`]`(not_it)` when it is another. Never panics.
    pub(crate) fn parse_kind(
        buf: &[u8],
        kind: Kind,
        not_it: &'static str,
    ) -> Result<Self, WireError> {
        let h = Self::parse(&Packet::new_unchecked(buf))?;
        if h.kind != kind {
            return Err(WireError::Malformed(not_it));
        }
        Ok(h)
    }

    /// Bytes [`emit`](Self::emit) writes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header into the first [`HEADER_LEN`] bytes.
    ///
    /// # Panics
    /// If the buffer is shorter than [`HEADER_LEN`]: a local sizing bug, not peer input.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, packet: &mut Packet<&mut T>) {
        packet.set_version(VERSION);
        packet.set_kind(self.kind);
        packet.set_flags(self.flags);
        packet.clear_reserved();
        packet.set_session(self.session);
    }
}

/// Writes the prefix the stream protocols' messages share (RBUDP,
/// striping): the header of `kind`, then the message type `ty` at byte
/// [`HEADER_LEN`] and three reserved zero bytes.
pub(crate) fn emit_typed(buf: &mut [u8], kind: Kind, ty: u8, flags: u8, session: u32) {
    Repr {
        kind,
        flags,
        session,
    }
    .emit(&mut Packet::new_unchecked(&mut buf[..HEADER_LEN]));
    buf[HEADER_LEN] = ty;
    buf[HEADER_LEN + 1..HEADER_LEN + 4].fill(0);
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const GOLDEN: [u8; 10] = [0x01, 0x08, 0x80, 0x00, 0xde, 0xad, 0xbe, 0xef, 0xaa, 0xbb];

    #[test]
    fn parses_golden_bytes() {
        let p = Packet::new_checked(&GOLDEN[..]).unwrap();
        let r = Repr::parse(&p).unwrap();
        assert_eq!(
            r,
            Repr {
                kind: Kind::BlockData,
                flags: 0x80,
                session: 0xdead_beef
            }
        );
        assert_eq!(p.body(), &[0xaa, 0xbb]);
    }

    #[test]
    fn emits_golden_bytes() {
        let r = Repr {
            kind: Kind::BlockData,
            flags: 0x80,
            session: 0xdead_beef,
        };
        let mut buf = [0xffu8; 10];
        buf[8] = 0xaa;
        buf[9] = 0xbb;
        r.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, GOLDEN);
    }

    #[test]
    fn rejects_short_unknown_and_future_headers() {
        assert_eq!(
            Packet::new_checked(&GOLDEN[..7]).unwrap_err(),
            WireError::Truncated { needed: 8, got: 7 }
        );
        let mut future = GOLDEN;
        future[0] = 2;
        assert_eq!(
            Repr::parse(&Packet::new_unchecked(&future[..])),
            Err(WireError::UnsupportedVersion(2))
        );
        let mut unknown = GOLDEN;
        unknown[1] = 0xee;
        assert_eq!(
            Repr::parse(&Packet::new_unchecked(&unknown[..])),
            Err(WireError::UnknownKind(0xee))
        );
        // The unchecked block format's kinds are retired (wire::block).
        for retired in [3, 4] {
            unknown[1] = retired;
            assert_eq!(
                Repr::parse(&Packet::new_unchecked(&unknown[..])),
                Err(WireError::UnknownKind(retired))
            );
        }
    }

    #[test]
    fn ignores_reserved_bits_on_parse() {
        let mut b = GOLDEN;
        b[3] = 0x5a;
        assert!(Repr::parse(&Packet::new_unchecked(&b[..])).is_ok());
    }

    fn any_kind() -> impl Strategy<Value = Kind> {
        prop_oneof![1u8..=2, 5u8..=10]
            .prop_map(|k| Kind::try_from(k).expect("1, 2 and 5..=10 are all defined kinds"))
    }

    proptest! {
        #[test]
        fn round_trips(kind in any_kind(), flags: u8, session: u32) {
            let r = Repr { kind, flags, session };
            let mut buf = vec![0u8; r.buffer_len()];
            r.emit(&mut Packet::new_unchecked(&mut buf[..]));
            prop_assert_eq!(Repr::parse(&Packet::new_unchecked(&buf[..])), Ok(r));
        }

        #[test]
        fn never_panics_on_arbitrary_bytes(data in proptest::collection::vec(any::<u8>(), 0..32)) {
            let _ = Repr::parse(&Packet::new_unchecked(&data[..]));
        }
    }
}
