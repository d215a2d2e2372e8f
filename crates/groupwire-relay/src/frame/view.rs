//! Frames read in place, without decoding or copying (smoltcp's
//! `Packet<T>` shape): the relay's fan-out and a load generator read a
//! frame's kind and a `Deliver`'s fields from the bytes they hold.
//!
//! Only this module and its parent know where a field sits in a frame.

use bytes::Bytes;

use super::{FrameError, HEADER_LEN, Kind, LEN_PREFIX, MAX_NAME_LEN, Update, VERSION};

/// Where the header's fields sit (docs/relay-protocol.md, "Framing").
mod field {
    use std::ops::Range;
    pub(super) const LENGTH: Range<usize> = 0..4;
    pub(super) const VERSION: usize = 4;
    pub(super) const KIND: usize = 5;
    pub(super) const REQUEST: Range<usize> = 8..12;
    /// `Deliver`: bytes after the group name up to `sent_at_micros`
    /// (`seq u64`, `sender u64`, `msg_type u16`).
    pub(super) const DELIVER_SEQ: usize = 0;
    pub(super) const DELIVER_SENDER: usize = 8;
    pub(super) const DELIVER_MSG_TYPE: usize = 16;
    pub(super) const DELIVER_SENT_AT: usize = 18;
    pub(super) const DELIVER_PAYLOAD_LEN: usize = 26;
    pub(super) const DELIVER_PAYLOAD: usize = 30;
}

/// One whole frame (length prefix included) whose header was checked: the
/// length prefix matches the buffer and the version is ours.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrameView<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> FrameView<T> {
    /// Checks the header of the frame in `buf` (exactly one frame).
    pub fn new_checked(buf: T) -> Result<Self, FrameError> {
        let b = buf.as_ref();
        if b.len() < HEADER_LEN {
            return Err(FrameError::Truncated {
                needed: HEADER_LEN,
                got: b.len(),
            });
        }
        let len = u32::from_be_bytes(b[field::LENGTH].try_into().expect("4 bytes")) as usize;
        if len.saturating_add(LEN_PREFIX) != b.len() {
            return Err(FrameError::Malformed(
                "length prefix does not match the frame",
            ));
        }
        if b[field::VERSION] != VERSION {
            return Err(FrameError::UnsupportedVersion(b[field::VERSION]));
        }
        Ok(Self { buf })
    }

    /// The kind byte as sent.
    pub fn kind_byte(&self) -> u8 {
        self.buf.as_ref()[field::KIND]
    }

    /// The kind, or `UnknownKind`.
    pub fn kind(&self) -> Result<Kind, FrameError> {
        Kind::try_from(self.kind_byte())
    }

    /// The request id (0 for frames the relay sends on its own).
    pub fn request(&self) -> u32 {
        u32::from_be_bytes(
            self.buf.as_ref()[field::REQUEST]
                .try_into()
                .expect("4 bytes"),
        )
    }

    /// The whole frame.
    pub fn as_bytes(&self) -> &[u8] {
        self.buf.as_ref()
    }

    /// The buffer back.
    pub fn into_inner(self) -> T {
        self.buf
    }
}

/// Whether `frame` (one whole encoded frame) is a `Deliver`, read from its
/// kind byte without decoding.
pub fn is_deliver(frame: &[u8]) -> bool {
    frame.get(field::KIND) == Some(&(Kind::Deliver as u8))
}

/// Whether `frame` (one whole encoded frame) is a `Credit`, read from its
/// kind byte without decoding.
pub fn is_credit(frame: &[u8]) -> bool {
    frame.get(field::KIND) == Some(&(Kind::Credit as u8))
}

/// A `Deliver` frame read in place: `group`, `seq`, `sender`, `msg_type`,
/// `sent_at_micros` and `payload` straight from the bytes, checked once
/// at construction (every field fits, the group is UTF-8 and at most
/// [`MAX_NAME_LEN`] bytes, nothing follows the payload).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeliverView<T: AsRef<[u8]>> {
    buf: T,
    /// Offset of the first byte after the group name.
    rest: usize,
}

impl<T: AsRef<[u8]>> DeliverView<T> {
    /// Checks that `buf` is one whole, well-formed `Deliver` frame.
    pub fn new_checked(buf: T) -> Result<Self, FrameError> {
        let frame = FrameView::new_checked(buf)?;
        if frame.kind()? != Kind::Deliver {
            return Err(FrameError::Malformed("not a Deliver frame"));
        }
        let buf = frame.into_inner();
        let b = buf.as_ref();
        let name_len = b
            .get(HEADER_LEN..HEADER_LEN + 2)
            .ok_or(FrameError::Truncated {
                needed: HEADER_LEN + 2,
                got: b.len(),
            })?;
        let name_len = usize::from(u16::from_be_bytes(name_len.try_into().expect("2 bytes")));
        if name_len > MAX_NAME_LEN {
            return Err(FrameError::Malformed("name longer than 255 bytes"));
        }
        let rest = HEADER_LEN + 2 + name_len;
        let fixed_end = rest + field::DELIVER_PAYLOAD;
        if b.len() < fixed_end {
            return Err(FrameError::Truncated {
                needed: fixed_end,
                got: b.len(),
            });
        }
        std::str::from_utf8(&b[HEADER_LEN + 2..rest])
            .map_err(|_| FrameError::Malformed("string is not UTF-8"))?;
        let at = rest + field::DELIVER_PAYLOAD_LEN;
        let payload_len = u32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes")) as usize;
        match fixed_end.checked_add(payload_len) {
            Some(end) if end == b.len() => Ok(Self { buf, rest }),
            Some(end) if end < b.len() => Err(FrameError::Malformed("bytes after the frame")),
            _ => Err(FrameError::Truncated {
                needed: fixed_end.saturating_add(payload_len),
                got: b.len(),
            }),
        }
    }

    fn u64_at(&self, off: usize) -> u64 {
        let at = self.rest + off;
        u64::from_be_bytes(self.buf.as_ref()[at..at + 8].try_into().expect("8 bytes"))
    }

    /// The group's name as bytes (UTF-8, checked at construction): to
    /// compare names without checking them again.
    pub fn group_bytes(&self) -> &[u8] {
        &self.buf.as_ref()[HEADER_LEN + 2..self.rest]
    }

    /// The group's name.
    pub fn group(&self) -> &str {
        std::str::from_utf8(&self.buf.as_ref()[HEADER_LEN + 2..self.rest])
            .expect("checked at construction")
    }

    /// The update's sequence number in its group.
    pub fn seq(&self) -> u64 {
        self.u64_at(field::DELIVER_SEQ)
    }

    /// The sending client's id.
    pub fn sender(&self) -> u64 {
        self.u64_at(field::DELIVER_SENDER)
    }

    /// The application's message type.
    pub fn msg_type(&self) -> u16 {
        let at = self.rest + field::DELIVER_MSG_TYPE;
        u16::from_be_bytes(self.buf.as_ref()[at..at + 2].try_into().expect("2 bytes"))
    }

    /// The sender's wall-clock stamp.
    pub fn sent_at_micros(&self) -> u64 {
        self.u64_at(field::DELIVER_SENT_AT)
    }

    /// The payload.
    pub fn payload(&self) -> &[u8] {
        &self.buf.as_ref()[self.rest + field::DELIVER_PAYLOAD..]
    }
}

impl DeliverView<Bytes> {
    /// The payload as a slice of the frame's buffer (no copy).
    pub fn payload_bytes(&self) -> Bytes {
        self.buf.slice(self.rest + field::DELIVER_PAYLOAD..)
    }

    /// The update as an owned record; the payload stays a slice of the
    /// frame (no copy).
    pub fn to_update(&self) -> Update {
        Update {
            group: self.group().to_owned(),
            seq: self.seq(),
            sender: self.sender(),
            msg_type: self.msg_type(),
            sent_at_micros: self.sent_at_micros(),
            payload: self.payload_bytes(),
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::super::{Frame, decode, encode};
    use super::*;

    proptest! {
        /// A view reads every field `decode` reads, from any encoded Deliver.
        #[test]
        fn views_read_what_decode_reads(
            group in "[a-z0-9_.:-]{0,40}",
            seq: u64, sender: u64, msg_type: u16, sent_at_micros: u64, request: u32,
            payload in proptest::collection::vec(any::<u8>(), 0..300),
        ) {
            let f = Frame::Deliver(Update {
                group: group.clone(),
                seq,
                sender,
                msg_type,
                sent_at_micros,
                payload: Bytes::from(payload.clone()),
            });
            let bytes = encode(request, &f);
            prop_assert!(is_deliver(&bytes));
            let h = FrameView::new_checked(&bytes[..]).expect("header");
            prop_assert_eq!(h.request(), request);
            prop_assert_eq!(h.kind(), Ok(Kind::Deliver));
            let v = DeliverView::new_checked(bytes.clone()).expect("deliver");
            prop_assert_eq!(v.group(), group.as_str());
            prop_assert_eq!((v.seq(), v.sender(), v.msg_type(), v.sent_at_micros()),
                (seq, sender, msg_type, sent_at_micros));
            prop_assert_eq!(v.payload(), &payload[..]);
            prop_assert_eq!(v.payload_bytes(), Bytes::from(payload));
            prop_assert_eq!(Frame::Deliver(v.to_update()), f.clone());
            prop_assert_eq!(decode(&bytes, usize::MAX).expect("decodes").frame, f);
        }

        /// Any bytes: the views refuse or read in bounds, never panic; what
        /// a view accepts, decode accepts with the same fields.
        #[test]
        fn any_bytes_are_refused_or_read(bytes in proptest::collection::vec(any::<u8>(), 0..120)) {
            let _ = FrameView::new_checked(&bytes[..]).map(|h| (h.kind(), h.request()));
            if let Ok(v) = DeliverView::new_checked(&bytes[..]) {
                let Ok(env) = decode(&bytes, usize::MAX) else {
                    return Err(TestCaseError::fail("view accepted what decode refuses"));
                };
                let Frame::Deliver(Update { group, seq, payload, .. }) = env.frame else {
                    return Err(TestCaseError::fail("not a Deliver"));
                };
                prop_assert_eq!(v.group(), group.as_str());
                prop_assert_eq!(v.seq(), seq);
                prop_assert_eq!(v.payload(), &payload[..]);
            }
        }
    }

    #[test]
    fn other_kinds_and_bad_lengths_are_refused() {
        let ok = encode(3, &Frame::Ok);
        assert!(!is_deliver(&ok));
        assert!(FrameView::new_checked(&ok[..]).is_ok());
        assert!(DeliverView::new_checked(&ok[..]).is_err());
        assert!(FrameView::new_checked(&ok[..ok.len() - 1]).is_err());
        let mut long = ok.to_vec();
        long.push(0);
        assert!(FrameView::new_checked(&long[..]).is_err());
    }
}
