//! The relay's wire format: length-prefixed, versioned binary frames.
//!
//! The same bytes travel over TCP (a byte stream cut by the length prefix)
//! and over WebSocket (one binary message holds exactly one frame, prefix
//! included). `docs/relay-protocol.md` documents every frame for people
//! writing clients in other languages; this module is the reference.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                 length (bytes after this field)               |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |    version    |     kind      |        flags (reserved)       |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                          request id                           |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                     kind-specific body ...
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! - `length`: big-endian `u32`, at least [`HEADER_LEN`] - 4. A receiver
//!   rejects frames longer than its configured cap *before* buffering them.
//! - `version`: [`VERSION`]. Others give [`FrameError::UnsupportedVersion`].
//! - `kind`: a [`Kind`]; unknown kinds give [`FrameError::UnknownKind`].
//! - `flags`: zero on emit, ignored on parse, except [`FLAG_RESUME`] on a
//!   `Join` (a `resume_after` follows its body). A relay from before this
//!   flag reads such a `Join` as malformed (bytes after its fields), so a
//!   client sends it only to a relay whose `Welcome` carries the flag.
//! - `request id`: chosen by the client; the relay echoes it in the reply.
//!   Frames the relay sends on its own (deliveries, notifications) carry 0.
//!
//! Body fields are big-endian. A string is a `u16` length then UTF-8; a
//! blob is a `u32` length then bytes; lists are a `u32` count then items.
//! Decoding never panics, never reads past the frame and never allocates
//! more than the frame's size; trailing bytes are an error.

use bytes::{BufMut, Bytes, BytesMut};

mod view;

pub use self::view::{DeliverView, FrameView, is_credit, is_deliver};

/// Bytes of the length prefix.
pub const LEN_PREFIX: usize = 4;
/// Bytes from the start of a frame to its body (prefix included).
pub const HEADER_LEN: usize = 12;
/// The protocol version this build speaks.
pub const VERSION: u8 = 1;
/// The lowest version this build speaks.
pub const MIN_VERSION: u8 = 1;
/// Header flag of a `Join` carrying `resume_after` (a `u64` after its
/// body), and of a `Welcome` from a relay that understands it.
pub const FLAG_RESUME: u16 = 0x0001;
/// Default cap on one frame (prefix included): 1 MiB.
pub const DEFAULT_MAX_FRAME: usize = 1 << 20;
/// The longest group, lock or client name.
pub const MAX_NAME_LEN: usize = 255;

/// Why a frame could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The frame ends before a field it announces.
    #[error("truncated frame: needed {needed} bytes, got {got}")]
    Truncated {
        /// Bytes the field needs.
        needed: usize,
        /// Bytes left.
        got: usize,
    },
    /// The length prefix exceeds the receiver's cap.
    #[error("frame of {len} bytes exceeds the cap of {max}")]
    TooLarge {
        /// Announced frame length (prefix included).
        len: usize,
        /// The receiver's cap.
        max: usize,
    },
    /// A version this build does not speak.
    #[error("unsupported protocol version {0}")]
    UnsupportedVersion(u8),
    /// A kind byte no frame uses.
    #[error("unknown frame kind {0:#04x}")]
    UnknownKind(u8),
    /// A field holds a value outside its domain.
    #[error("malformed frame: {0}")]
    Malformed(&'static str),
}

groupwire_proto::wire_enum! {
    /// What a frame is. Numbers are stable on the wire: client-to-relay kinds
    /// are below `0x40`, relay-to-client kinds from `0x40`.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
    #[non_exhaustive]
    pub enum Kind: FrameError = (FrameError::UnknownKind) {
        /// Client: open a session.
        Hello = 0x01,
        /// Client: create a group.
        CreateGroup = 0x02,
        /// Client: delete a group.
        DeleteGroup = 0x03,
        /// Client: join a group.
        Join = 0x04,
        /// Client: leave a group.
        Leave = 0x05,
        /// Client: change role.
        ChangeRole = 0x06,
        /// Client: change activity mode.
        ChangeMode = 0x07,
        /// Client: change a group's default priority.
        SetPriority = 0x08,
        /// Client: multicast an update.
        Send = 0x09,
        /// Client: store a checkpoint.
        Checkpoint = 0x0a,
        /// Client: acquire a lock.
        LockAcquire = 0x0b,
        /// Client: release a lock.
        LockRelease = 0x0c,
        /// Client: return send-window credit.
        Credit = 0x0d,
        /// Client: liveness probe.
        Ping = 0x0e,
        /// Relay: session accepted.
        Welcome = 0x40,
        /// Relay: request done.
        Ok = 0x41,
        /// Relay: update sequenced and durable.
        Sent = 0x42,
        /// Relay: joined, with the state transfer head.
        Joined = 0x43,
        /// Relay: a sequenced update.
        Deliver = 0x44,
        /// Relay: a membership change.
        Membership = 0x45,
        /// Relay: a lock is now yours.
        LockGranted = 0x46,
        /// Relay: a group you were in was deleted.
        GroupDeleted = 0x47,
        /// Relay: your queue was dropped; a fresh snapshot follows.
        Resync = 0x48,
        /// Relay: a request failed, or the session is closing.
        Error = 0x49,
        /// Relay: answer to a ping.
        Pong = 0x4a,
    }
}

//= Litiu & Prakash §4.2
//# we provide three roles for the users of our system: principal, observer
//# and membership-observer, listed here in the decreasing order of their
//# priority. Principals have update privilege on a shared state.
groupwire_proto::wire_enum! {
    /// A member's role in a group (Corona §4.2), in decreasing privilege.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
    pub enum Role: FrameError = (|_| FrameError::Malformed("role")) {
        /// May update the shared state (send, checkpoint, lock); receives updates.
        Principal = 1,
        /// Receives updates; may not send.
        Observer = 2,
        /// Receives membership changes only.
        MembershipObserver = 3,
    }
}

impl Role {
    /// Every role, in decreasing privilege.
    pub const ALL: [Role; 3] = [Role::Principal, Role::Observer, Role::MembershipObserver];

    /// Whether this role is at least as privileged as `other`.
    pub fn at_least(self, other: Role) -> bool {
        (self as u8) <= (other as u8)
    }
    /// The role's name as the CLI spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Principal => "principal",
            Role::Observer => "observer",
            Role::MembershipObserver => "membership-observer",
        }
    }
}

impl std::str::FromStr for Role {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| format!("unknown role {s:?} (principal, observer, membership-observer)"))
    }
}

groupwire_proto::wire_enum! {
    /// Whether a member is actively watching a group (Corona §4.3).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
    pub enum ActivityMode: FrameError = (|_| FrameError::Malformed("activity mode")) {
        /// The application is in front of its user.
        Active = 1,
        /// The application is iconified or hidden; latency matters less.
        Passive = 2,
    }
}

impl std::str::FromStr for ActivityMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "active" => Ok(ActivityMode::Active),
            "passive" => Ok(ActivityMode::Passive),
            other => Err(format!("unknown activity mode {other:?} (active, passive)")),
        }
    }
}

groupwire_proto::wire_enum! {
    /// What happened to a member, in a [`Frame::Membership`] notification.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum MembershipChange: FrameError = (|_| FrameError::Malformed("membership change")) {
        /// The member joined.
        Joined = 1,
        /// The member left.
        Left = 2,
        /// The member changed role.
        RoleChanged = 3,
        /// The member changed activity mode.
        ModeChanged = 4,
        /// The member's connection closed or failed (handled like a leave).
        Disconnected = 5,
        /// The relay removed the member, an observer, from a group too large
        /// for an overloaded relay (Litiu & Prakash §4.2). The member itself
        /// is told too.
        Evicted = 6,
    }
}

/// An error code in a [`Frame::Error`]. Numbers are stable on the wire;
/// unknown codes decode as themselves so old clients can show them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ErrorCode(pub u16);

impl ErrorCode {
    /// The frame could not be decoded. Fatal.
    pub const MALFORMED: Self = Self(1);
    /// No common protocol version. Fatal.
    pub const UNSUPPORTED_VERSION: Self = Self(2);
    /// The frame exceeds the relay's cap. Fatal.
    pub const FRAME_TOO_LARGE: Self = Self(3);
    /// The token is missing, badly signed or expired. Fatal.
    pub const UNAUTHORIZED: Self = Self(4);
    /// The token or role does not allow this request.
    pub const FORBIDDEN: Self = Self(5);
    /// No group of that name.
    pub const NO_SUCH_GROUP: Self = Self(6);
    /// A group of that name exists.
    pub const GROUP_EXISTS: Self = Self(7);
    /// The request names a group the client is not a member of.
    pub const NOT_MEMBER: Self = Self(8);
    /// The client is already a member of that group.
    pub const ALREADY_MEMBER: Self = Self(9);
    /// Lock release by a client that does not hold the lock.
    pub const NOT_HOLDER: Self = Self(10);
    /// Try-acquire of a lock someone else holds.
    pub const LOCK_BUSY: Self = Self(11);
    /// Acquire of a lock the client already holds or waits for.
    pub const ALREADY_HELD: Self = Self(12);
    /// A checkpoint beyond the group's head or behind its last checkpoint.
    pub const BAD_CHECKPOINT: Self = Self(13);
    /// The client did not read fast enough. Fatal.
    pub const SLOW_CONSUMER: Self = Self(14);
    /// The store failed; the request had no effect.
    pub const STORAGE: Self = Self(15);
    /// A frame out of place (before `Hello`, a second `Hello`, a relay-only
    /// kind, credit for bytes never sent, a WebSocket text message). Fatal.
    pub const PROTOCOL_VIOLATION: Self = Self(16);
    /// The token's priority cap is below the requested priority.
    pub const PRIORITY_NOT_ALLOWED: Self = Self(17);
    /// A name or argument outside its domain.
    pub const INVALID_ARGUMENT: Self = Self(18);
    /// The relay is shutting down. Fatal.
    pub const SHUTTING_DOWN: Self = Self(19);
    /// No `Hello` within the relay's handshake timeout, or nothing received
    /// within its idle timeout. Fatal.
    pub const TIMEOUT: Self = Self(20);

    /// A short name for logs and the CLI.
    pub fn name(self) -> &'static str {
        match self.0 {
            1 => "malformed",
            2 => "unsupported-version",
            3 => "frame-too-large",
            4 => "unauthorized",
            5 => "forbidden",
            6 => "no-such-group",
            7 => "group-exists",
            8 => "not-member",
            9 => "already-member",
            10 => "not-holder",
            11 => "lock-busy",
            12 => "already-held",
            13 => "bad-checkpoint",
            14 => "slow-consumer",
            15 => "storage",
            16 => "protocol-violation",
            17 => "priority-not-allowed",
            18 => "invalid-argument",
            19 => "shutting-down",
            20 => "timeout",
            _ => "unknown",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.name(), self.0)
    }
}

/// One member as listed in [`Frame::Joined`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberInfo {
    /// The member's client id.
    pub client: u64,
    /// The name the client gave in `Hello`.
    pub name: String,
    /// Its role.
    pub role: Role,
    /// Its activity mode.
    pub mode: ActivityMode,
}

/// A decoded frame body. The request id travels beside it in [`Envelope`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Frame {
    /// Client, first frame: the highest version the client speaks, the send
    /// window it wants (bytes; 0 = the relay's default), a token (empty when
    /// the relay runs without authentication) and a name for logs.
    Hello {
        /// Highest protocol version the client speaks.
        max_version: u8,
        /// Send window in bytes; 0 asks for the relay's default.
        window: u32,
        /// Signed token, or empty.
        token: String,
        /// Client name for membership lists and logs.
        name: String,
    },
    /// Client: create a group with a type, a default priority and an
    /// initial state (stored as the checkpoint at sequence 0).
    CreateGroup {
        /// Group name.
        group: String,
        /// Application-defined type ("chat", "whiteboard", ...).
        group_type: String,
        /// Default priority (Corona §4.1), 0 (lowest) to [`crate::priority::MAX_GROUP_PRIORITY`].
        priority: u8,
        /// Initial shared state.
        initial_state: Bytes,
    },
    /// Client: delete a group, its log and checkpoints.
    DeleteGroup {
        /// Group name.
        group: String,
    },
    /// Client: join a group with a role and mode.
    Join {
        /// Group name.
        group: String,
        /// Requested role.
        role: Role,
        /// Initial activity mode.
        mode: ActivityMode,
        /// Also receive membership changes (membership observers always do).
        watch_membership: bool,
        /// Resume after this sequence number (a client that was a member
        /// through another connection, and has every update up to it):
        /// the relay answers a `Joined` with `checkpoint_seq` at most this
        /// and no state, then the updates after it; if the log no longer
        /// has them, a plain state transfer (`checkpoint_seq` above it).
        /// Sent with [`FLAG_RESUME`].
        resume_after: Option<u64>,
    },
    /// Client: leave a group.
    Leave {
        /// Group name.
        group: String,
    },
    /// Client: change role in a group.
    ChangeRole {
        /// Group name.
        group: String,
        /// New role.
        role: Role,
    },
    /// Client: change activity mode in a group.
    ChangeMode {
        /// Group name.
        group: String,
        /// New mode.
        mode: ActivityMode,
    },
    /// Client: change a group's default priority (Corona §4.1).
    SetPriority {
        /// Group name.
        group: String,
        /// New default priority.
        priority: u8,
    },
    /// Client: multicast an update to a group (principals only).
    Send {
        /// Group name.
        group: String,
        /// Application-defined message type.
        msg_type: u16,
        /// Sender's clock in microseconds, carried untouched to receivers.
        sent_at_micros: u64,
        /// The update.
        payload: Bytes,
    },
    /// Client: the group's state after applying every update up to `seq`.
    Checkpoint {
        /// Group name.
        group: String,
        /// Sequence number the snapshot includes.
        seq: u64,
        /// The snapshot.
        state: Bytes,
    },
    /// Client: acquire a named lock; `wait` queues behind the holder,
    /// otherwise a busy lock fails with [`ErrorCode::LOCK_BUSY`].
    LockAcquire {
        /// Group name.
        group: String,
        /// Lock name.
        lock: String,
        /// Wait in the queue instead of failing.
        wait: bool,
    },
    /// Client: release a held lock.
    LockRelease {
        /// Group name.
        group: String,
        /// Lock name.
        lock: String,
    },
    /// Client: cumulative bytes of relay frames consumed; opens the send window.
    Credit {
        /// Total bytes consumed since `Welcome`.
        consumed: u64,
    },
    /// Client: liveness probe.
    Ping {
        /// Echoed in `Pong`.
        nonce: u64,
    },
    /// Relay: session accepted.
    Welcome {
        /// Negotiated version.
        version: u8,
        /// The client's id in membership lists and deliveries.
        client: u64,
        /// The relay's frame cap.
        max_frame: u32,
        /// The send window granted, in bytes.
        window: u32,
        /// The relay resumes a `Join` from a sequence number
        /// (`Join::resume_after`); sent as [`FLAG_RESUME`] in the header.
        resume: bool,
    },
    /// Relay: the request succeeded.
    Ok,
    /// Relay: the update was sequenced and is durable.
    Sent {
        /// Group name.
        group: String,
        /// Its sequence number.
        seq: u64,
    },
    /// Relay: joined (or resynchronized). The latest checkpoint follows
    /// inline; deliveries `checkpoint_seq + 1 ..` follow as `Deliver` frames.
    Joined(JoinInfo),
    /// Relay: a sequenced update.
    Deliver(Update),
    /// Relay: a membership change.
    Membership(MembershipNotice),
    /// Relay: the lock is yours (reply to a waiting `LockAcquire`).
    LockGranted {
        /// Group name.
        group: String,
        /// Lock name.
        lock: String,
    },
    /// Relay: a group you were in was deleted; you are no longer a member.
    GroupDeleted {
        /// Group name.
        group: String,
    },
    /// Relay: you fell behind; `dropped` queued frames were discarded and a
    /// `Joined` with a fresh snapshot follows.
    Resync {
        /// Group name.
        group: String,
        /// Frames discarded.
        dropped: u64,
    },
    /// Relay: the request failed (or, for fatal codes, the session ends).
    Error {
        /// What went wrong.
        code: ErrorCode,
        /// Human-readable detail.
        message: String,
    },
    /// Relay: answer to `Ping`.
    Pong {
        /// The ping's nonce.
        nonce: u64,
    },
}

/// A sequenced update: what the relay delivers (`Deliver`), logs
/// (`storage::StorageOp::Append`) and a client hands to its application
/// ([`ClientEvent::Deliver`](crate::client::ClientEvent::Deliver)). One
/// record in every place, so nothing copies it field by field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Update {
    /// Group name.
    pub group: String,
    /// Sequence number (total order within the group, from 1).
    pub seq: u64,
    /// Sender's client id.
    pub sender: u64,
    /// Application-defined message type.
    pub msg_type: u16,
    /// The sender's timestamp, carried untouched.
    pub sent_at_micros: u64,
    /// The update.
    pub payload: Bytes,
}

/// A state transfer: what a join (or a resync) returns (`Joined`), and
/// what a client hands its application
/// ([`ClientEvent::State`](crate::client::ClientEvent::State)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JoinInfo {
    /// Group name.
    pub group: String,
    /// Application-defined type.
    pub group_type: String,
    /// Sequence the checkpoint includes; deliveries follow from the next.
    pub checkpoint_seq: u64,
    /// Last sequence assigned when the join took effect.
    pub head_seq: u64,
    /// The checkpoint state.
    pub state: Bytes,
    /// Members at join time.
    pub members: Vec<MemberInfo>,
}

/// A membership change (`Membership`, and
/// [`ClientEvent::Membership`](crate::client::ClientEvent::Membership)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MembershipNotice {
    /// Group name.
    pub group: String,
    /// The member.
    pub client: u64,
    /// Its name.
    pub name: String,
    /// What happened.
    pub change: MembershipChange,
    /// Its role after the change.
    pub role: Role,
    /// Its mode after the change.
    pub mode: ActivityMode,
}

/// A frame and its request id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Envelope {
    /// Request id (0 for frames the relay sends on its own).
    pub request: u32,
    /// The frame.
    pub frame: Frame,
}

impl Frame {
    /// The frame's kind.
    pub fn kind(&self) -> Kind {
        match self {
            Frame::Hello { .. } => Kind::Hello,
            Frame::CreateGroup { .. } => Kind::CreateGroup,
            Frame::DeleteGroup { .. } => Kind::DeleteGroup,
            Frame::Join { .. } => Kind::Join,
            Frame::Leave { .. } => Kind::Leave,
            Frame::ChangeRole { .. } => Kind::ChangeRole,
            Frame::ChangeMode { .. } => Kind::ChangeMode,
            Frame::SetPriority { .. } => Kind::SetPriority,
            Frame::Send { .. } => Kind::Send,
            Frame::Checkpoint { .. } => Kind::Checkpoint,
            Frame::LockAcquire { .. } => Kind::LockAcquire,
            Frame::LockRelease { .. } => Kind::LockRelease,
            Frame::Credit { .. } => Kind::Credit,
            Frame::Ping { .. } => Kind::Ping,
            Frame::Welcome { .. } => Kind::Welcome,
            Frame::Ok => Kind::Ok,
            Frame::Sent { .. } => Kind::Sent,
            Frame::Joined(_) => Kind::Joined,
            Frame::Deliver(_) => Kind::Deliver,
            Frame::Membership(_) => Kind::Membership,
            Frame::LockGranted { .. } => Kind::LockGranted,
            Frame::GroupDeleted { .. } => Kind::GroupDeleted,
            Frame::Resync { .. } => Kind::Resync,
            Frame::Error { .. } => Kind::Error,
            Frame::Pong { .. } => Kind::Pong,
        }
    }

    /// The group a frame is about, if any.
    pub fn group(&self) -> Option<&str> {
        match self {
            Frame::CreateGroup { group, .. }
            | Frame::DeleteGroup { group }
            | Frame::Join { group, .. }
            | Frame::Leave { group }
            | Frame::ChangeRole { group, .. }
            | Frame::ChangeMode { group, .. }
            | Frame::SetPriority { group, .. }
            | Frame::Send { group, .. }
            | Frame::Checkpoint { group, .. }
            | Frame::LockAcquire { group, .. }
            | Frame::LockRelease { group, .. }
            | Frame::Sent { group, .. }
            | Frame::Joined(JoinInfo { group, .. })
            | Frame::Deliver(Update { group, .. })
            | Frame::Membership(MembershipNotice { group, .. })
            | Frame::LockGranted { group, .. }
            | Frame::GroupDeleted { group }
            | Frame::Resync { group, .. } => Some(group),
            _ => None,
        }
    }
}

/// Encodes `frame` with its header and length prefix. Panics only if the
/// frame holds a string longer than 65535 bytes or a blob longer than 4 GiB,
/// which no caller in this crate produces (names are checked on entry).
pub fn encode(request: u32, frame: &Frame) -> Bytes {
    let mut w = start(request, frame.kind());
    if let Frame::Join {
        resume_after: Some(_),
        ..
    }
    | Frame::Welcome { resume: true, .. } = frame
    {
        w[FLAGS].copy_from_slice(&FLAG_RESUME.to_be_bytes());
    }
    match frame {
        Frame::Hello {
            max_version,
            window,
            token,
            name,
        } => {
            w.put_u8(*max_version);
            w.put_u32(*window);
            put_str(&mut w, token);
            put_str(&mut w, name);
        }
        Frame::CreateGroup {
            group,
            group_type,
            priority,
            initial_state,
        } => {
            put_str(&mut w, group);
            put_str(&mut w, group_type);
            w.put_u8(*priority);
            put_blob(&mut w, initial_state);
        }
        Frame::DeleteGroup { group } | Frame::Leave { group } | Frame::GroupDeleted { group } => {
            put_str(&mut w, group);
        }
        Frame::Join {
            group,
            role,
            mode,
            watch_membership,
            resume_after,
        } => {
            put_str(&mut w, group);
            w.put_u8(*role as u8);
            w.put_u8(*mode as u8);
            w.put_u8(u8::from(*watch_membership));
            if let Some(after) = resume_after {
                w.put_u64(*after);
            }
        }
        Frame::ChangeRole { group, role } => {
            put_str(&mut w, group);
            w.put_u8(*role as u8);
        }
        Frame::ChangeMode { group, mode } => {
            put_str(&mut w, group);
            w.put_u8(*mode as u8);
        }
        Frame::SetPriority { group, priority } => {
            put_str(&mut w, group);
            w.put_u8(*priority);
        }
        Frame::Send {
            group,
            msg_type,
            sent_at_micros,
            payload,
        } => {
            put_str(&mut w, group);
            w.put_u16(*msg_type);
            w.put_u64(*sent_at_micros);
            put_blob(&mut w, payload);
        }
        Frame::Checkpoint { group, seq, state } => {
            put_str(&mut w, group);
            w.put_u64(*seq);
            put_blob(&mut w, state);
        }
        Frame::LockAcquire { group, lock, wait } => {
            put_str(&mut w, group);
            put_str(&mut w, lock);
            w.put_u8(u8::from(*wait));
        }
        Frame::LockRelease { group, lock } | Frame::LockGranted { group, lock } => {
            put_str(&mut w, group);
            put_str(&mut w, lock);
        }
        Frame::Credit { consumed } => w.put_u64(*consumed),
        Frame::Ping { nonce } | Frame::Pong { nonce } => w.put_u64(*nonce),
        Frame::Welcome {
            version,
            client,
            max_frame,
            window,
            resume: _,
        } => {
            w.put_u8(*version);
            w.put_u64(*client);
            w.put_u32(*max_frame);
            w.put_u32(*window);
        }
        Frame::Ok => {}
        Frame::Sent { group, seq } => {
            put_str(&mut w, group);
            w.put_u64(*seq);
        }
        Frame::Joined(JoinInfo {
            group,
            group_type,
            checkpoint_seq,
            head_seq,
            state,
            members,
        }) => {
            put_str(&mut w, group);
            put_str(&mut w, group_type);
            w.put_u64(*checkpoint_seq);
            w.put_u64(*head_seq);
            put_blob(&mut w, state);
            w.put_u32(u32::try_from(members.len()).expect("fewer than 2^32 members"));
            for m in members {
                w.put_u64(m.client);
                put_str(&mut w, &m.name);
                w.put_u8(m.role as u8);
                w.put_u8(m.mode as u8);
            }
        }
        Frame::Deliver(u) => put_update(&mut w, u),
        Frame::Membership(MembershipNotice {
            group,
            client,
            name,
            change,
            role,
            mode,
        }) => {
            put_str(&mut w, group);
            w.put_u64(*client);
            put_str(&mut w, name);
            w.put_u8(*change as u8);
            w.put_u8(*role as u8);
            w.put_u8(*mode as u8);
        }
        Frame::Resync { group, dropped } => {
            put_str(&mut w, group);
            w.put_u64(*dropped);
        }
        Frame::Error { code, message } => {
            w.put_u16(code.0);
            put_str(&mut w, message);
        }
    }
    finish(w)
}

/// Encodes a `Deliver` of `u` (as [`encode`] of `Frame::Deliver`, without
/// cloning the update into a frame first).
pub fn encode_update(request: u32, u: &Update) -> Bytes {
    let mut w = start(request, Kind::Deliver);
    // Sized once: state-transfer pages encode an update per entry, and
    // growing the buffer field by field (two reallocations for a 100-byte
    // payload) was half of what a page cost the core.
    w.reserve(UPDATE_FIXED_LEN + u.group.len() + u.payload.len());
    put_update(&mut w, u);
    finish(w)
}

/// An encoded update's bytes beyond its group name and payload: their two
/// length prefixes, seq, sender, msg_type and sent_at ([`put_update`]).
const UPDATE_FIXED_LEN: usize = 2 + 8 + 8 + 2 + 8 + 4;

/// Where the header's flags sit (the rest of the header: [`view`]).
const FLAGS: std::ops::Range<usize> = 6..8;

/// A frame's header, its length left to [`finish`].
fn start(request: u32, kind: Kind) -> BytesMut {
    let mut w = BytesMut::with_capacity(HEADER_LEN + 32);
    w.put_u32(0); // patched by finish
    w.put_u8(VERSION);
    w.put_u8(kind as u8);
    w.put_u16(0);
    w.put_u32(request);
    w
}

fn put_update(w: &mut BytesMut, u: &Update) {
    put_str(w, &u.group);
    w.put_u64(u.seq);
    w.put_u64(u.sender);
    w.put_u16(u.msg_type);
    w.put_u64(u.sent_at_micros);
    put_blob(w, &u.payload);
}

/// Patches the length prefix.
fn finish(mut w: BytesMut) -> Bytes {
    let body_len = u32::try_from(w.len() - LEN_PREFIX).expect("frames are below 4 GiB");
    w[..LEN_PREFIX].copy_from_slice(&body_len.to_be_bytes());
    w.freeze()
}

/// Decodes one whole frame (length prefix included), accepting frames up
/// to `max_frame` bytes. Never panics.
pub fn decode(buf: &[u8], max_frame: usize) -> Result<Envelope, FrameError> {
    decode_with(buf, None, max_frame)
}

/// As [`decode`], but blobs (payloads, states) are slices of `buf`, not
/// copies: what the relay and the client use for frames they hold as
/// `Bytes`.
pub fn decode_bytes(buf: &Bytes, max_frame: usize) -> Result<Envelope, FrameError> {
    decode_with(buf, Some(buf), max_frame)
}

fn decode_with(
    buf: &[u8],
    whole: Option<&Bytes>,
    max_frame: usize,
) -> Result<Envelope, FrameError> {
    let len = frame_len(buf, max_frame)?.ok_or(FrameError::Truncated {
        needed: LEN_PREFIX,
        got: buf.len(),
    })?;
    if buf.len() != len {
        return Err(if buf.len() < len {
            FrameError::Truncated {
                needed: len,
                got: buf.len(),
            }
        } else {
            FrameError::Malformed("bytes after the frame")
        });
    }
    let mut r = Reader {
        buf: &buf[LEN_PREFIX..],
        whole,
    };
    let version = r.u8()?;
    if version != VERSION {
        return Err(FrameError::UnsupportedVersion(version));
    }
    let kind = Kind::try_from(r.u8()?)?;
    let flags = r.u16()?;
    let request = r.u32()?;
    let frame = match kind {
        Kind::Hello => Frame::Hello {
            max_version: r.u8()?,
            window: r.u32()?,
            token: r.string()?,
            name: r.name()?,
        },
        Kind::CreateGroup => Frame::CreateGroup {
            group: r.name()?,
            group_type: r.name()?,
            priority: r.u8()?,
            initial_state: r.blob()?,
        },
        Kind::DeleteGroup => Frame::DeleteGroup { group: r.name()? },
        Kind::Join => Frame::Join {
            group: r.name()?,
            role: Role::try_from(r.u8()?)?,
            mode: ActivityMode::try_from(r.u8()?)?,
            watch_membership: r.bool()?,
            resume_after: if flags & FLAG_RESUME != 0 {
                Some(r.u64()?)
            } else {
                None
            },
        },
        Kind::Leave => Frame::Leave { group: r.name()? },
        Kind::ChangeRole => Frame::ChangeRole {
            group: r.name()?,
            role: Role::try_from(r.u8()?)?,
        },
        Kind::ChangeMode => Frame::ChangeMode {
            group: r.name()?,
            mode: ActivityMode::try_from(r.u8()?)?,
        },
        Kind::SetPriority => Frame::SetPriority {
            group: r.name()?,
            priority: r.u8()?,
        },
        Kind::Send => Frame::Send {
            group: r.name()?,
            msg_type: r.u16()?,
            sent_at_micros: r.u64()?,
            payload: r.blob()?,
        },
        Kind::Checkpoint => Frame::Checkpoint {
            group: r.name()?,
            seq: r.u64()?,
            state: r.blob()?,
        },
        Kind::LockAcquire => Frame::LockAcquire {
            group: r.name()?,
            lock: r.name()?,
            wait: r.bool()?,
        },
        Kind::LockRelease => Frame::LockRelease {
            group: r.name()?,
            lock: r.name()?,
        },
        Kind::Credit => Frame::Credit { consumed: r.u64()? },
        Kind::Ping => Frame::Ping { nonce: r.u64()? },
        Kind::Welcome => Frame::Welcome {
            version: r.u8()?,
            client: r.u64()?,
            max_frame: r.u32()?,
            window: r.u32()?,
            resume: flags & FLAG_RESUME != 0,
        },
        Kind::Ok => Frame::Ok,
        Kind::Sent => Frame::Sent {
            group: r.name()?,
            seq: r.u64()?,
        },
        Kind::Joined => {
            let group = r.name()?;
            let group_type = r.name()?;
            let checkpoint_seq = r.u64()?;
            let head_seq = r.u64()?;
            let state = r.blob()?;
            let count = r.u32()? as usize;
            // Each member takes at least 12 bytes: never preallocate more
            // than the frame could hold.
            let mut members = Vec::with_capacity(count.min(r.buf.len() / 12));
            for _ in 0..count {
                members.push(MemberInfo {
                    client: r.u64()?,
                    name: r.name()?,
                    role: Role::try_from(r.u8()?)?,
                    mode: ActivityMode::try_from(r.u8()?)?,
                });
            }
            Frame::Joined(JoinInfo {
                group,
                group_type,
                checkpoint_seq,
                head_seq,
                state,
                members,
            })
        }
        Kind::Deliver => Frame::Deliver(Update {
            group: r.name()?,
            seq: r.u64()?,
            sender: r.u64()?,
            msg_type: r.u16()?,
            sent_at_micros: r.u64()?,
            payload: r.blob()?,
        }),
        Kind::Membership => Frame::Membership(MembershipNotice {
            group: r.name()?,
            client: r.u64()?,
            name: r.name()?,
            change: MembershipChange::try_from(r.u8()?)?,
            role: Role::try_from(r.u8()?)?,
            mode: ActivityMode::try_from(r.u8()?)?,
        }),
        Kind::LockGranted => Frame::LockGranted {
            group: r.name()?,
            lock: r.name()?,
        },
        Kind::GroupDeleted => Frame::GroupDeleted { group: r.name()? },
        Kind::Resync => Frame::Resync {
            group: r.name()?,
            dropped: r.u64()?,
        },
        Kind::Error => Frame::Error {
            code: ErrorCode(r.u16()?),
            message: r.string()?,
        },
        Kind::Pong => Frame::Pong { nonce: r.u64()? },
    };
    if !r.buf.is_empty() {
        return Err(FrameError::Malformed("bytes after the body"));
    }
    Ok(Envelope { request, frame })
}

/// The whole length of the frame starting at `buf[0]` (prefix included),
/// `None` if fewer than [`LEN_PREFIX`] bytes are there yet. Rejects frames
/// above `max_frame` or below the header size before any body arrives.
pub fn frame_len(buf: &[u8], max_frame: usize) -> Result<Option<usize>, FrameError> {
    let Some(prefix) = buf.get(..LEN_PREFIX) else {
        return Ok(None);
    };
    let body = u32::from_be_bytes(prefix.try_into().expect("4 bytes")) as usize;
    let len = body.saturating_add(LEN_PREFIX);
    if len > max_frame {
        return Err(FrameError::TooLarge {
            len,
            max: max_frame,
        });
    }
    if len < HEADER_LEN {
        return Err(FrameError::Malformed("length below the header size"));
    }
    Ok(Some(len))
}

/// Bytes a reader asks the socket for at once (see
/// [`FrameDecoder::read_buffer`]).
pub const READ_CHUNK: usize = 16 << 10;

/// Cuts a byte stream into frames (sans-IO): feed bytes with
/// [`extend`](Self::extend), take frames with [`next_frame`](Self::next_frame).
/// Memory is bounded by the cap: an oversized prefix is an error before its
/// body is buffered.
#[derive(Debug)]
pub struct FrameDecoder {
    buf: BytesMut,
    max_frame: usize,
}

impl FrameDecoder {
    /// A decoder accepting frames of at most `max_frame` bytes.
    pub fn new(max_frame: usize) -> Self {
        Self {
            buf: BytesMut::new(),
            max_frame,
        }
    }

    /// Appends bytes read from the stream.
    pub fn extend(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// The buffer as it is (to inspect what arrived).
    pub fn buffer_mut(&mut self) -> &mut BytesMut {
        &mut self.buf
    }

    /// The buffer to read into directly (`read_buf`), with room for at
    /// least a quarter of [`READ_CHUNK`]. Whole frames are split off the
    /// buffer, which leaves it without spare room; `read_buf` would then
    /// read 64 bytes per system call.
    pub fn read_buffer(&mut self) -> &mut BytesMut {
        if self.buf.capacity() - self.buf.len() < READ_CHUNK / 4 {
            self.buf.reserve(READ_CHUNK);
        }
        &mut self.buf
    }

    /// The next whole frame's bytes, `Ok(None)` if more input is needed.
    /// After an `Err` the stream is unusable: close it.
    pub fn next_frame(&mut self) -> Result<Option<Bytes>, FrameError> {
        match frame_len(&self.buf, self.max_frame)? {
            Some(len) if self.buf.len() >= len => Ok(Some(self.buf.split_to(len).freeze())),
            _ => Ok(None),
        }
    }

    /// The next whole frame's bytes in place, without taking them
    /// (`Ok(None)` if more input is needed); drop them with
    /// [`consume`](Self::consume). Unlike [`next_frame`](Self::next_frame)
    /// no `Bytes` handle is made: a reader that is done with a frame before
    /// it reads the next needs no reference count per frame.
    pub fn peek_frame(&self) -> Result<Option<&[u8]>, FrameError> {
        match frame_len(&self.buf, self.max_frame)? {
            Some(len) if self.buf.len() >= len => Ok(Some(&self.buf[..len])),
            _ => Ok(None),
        }
    }

    /// Drops the first `len` buffered bytes (a frame
    /// [`peek_frame`](Self::peek_frame) returned).
    pub fn consume(&mut self, len: usize) {
        bytes::Buf::advance(&mut self.buf, len);
    }

    /// Bytes buffered but not yet returned.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }
}

fn put_str(w: &mut BytesMut, s: &str) {
    w.put_u16(u16::try_from(s.len()).expect("strings are checked below 64 KiB"));
    w.put_slice(s.as_bytes());
}

fn put_blob(w: &mut BytesMut, b: &[u8]) {
    w.put_u32(u32::try_from(b.len()).expect("blobs are below the frame cap"));
    w.put_slice(b);
}

struct Reader<'a> {
    /// What is left to read: always a suffix of the frame.
    buf: &'a [u8],
    /// The whole frame, when blobs may be sliced from it.
    whole: Option<&'a Bytes>,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], FrameError> {
        if self.buf.len() < n {
            return Err(FrameError::Truncated {
                needed: n,
                got: self.buf.len(),
            });
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8, FrameError> {
        Ok(self.take(1)?[0])
    }
    fn bool(&mut self) -> Result<bool, FrameError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(FrameError::Malformed("boolean")),
        }
    }
    fn u16(&mut self) -> Result<u16, FrameError> {
        Ok(u16::from_be_bytes(self.take(2)?.try_into().expect("2")))
    }
    fn u32(&mut self) -> Result<u32, FrameError> {
        Ok(u32::from_be_bytes(self.take(4)?.try_into().expect("4")))
    }
    fn u64(&mut self) -> Result<u64, FrameError> {
        Ok(u64::from_be_bytes(self.take(8)?.try_into().expect("8")))
    }
    fn string(&mut self) -> Result<String, FrameError> {
        let n = self.u16()? as usize;
        let b = self.take(n)?;
        std::str::from_utf8(b)
            .map(str::to_owned)
            .map_err(|_| FrameError::Malformed("string is not UTF-8"))
    }
    /// A group, lock or client name: at most [`MAX_NAME_LEN`] bytes.
    fn name(&mut self) -> Result<String, FrameError> {
        let s = self.string()?;
        if s.len() > MAX_NAME_LEN {
            return Err(FrameError::Malformed("name longer than 255 bytes"));
        }
        Ok(s)
    }
    fn blob(&mut self) -> Result<Bytes, FrameError> {
        let n = self.u32()? as usize;
        let start = self.whole.map(|w| w.len() - self.buf.len());
        let b = self.take(n)?;
        Ok(match (self.whole, start) {
            (Some(w), Some(at)) => w.slice(at..at + n),
            _ => Bytes::copy_from_slice(b),
        })
    }
}

/// Proptest strategies for every frame (shared by this crate's tests).
#[cfg(test)]
pub(crate) mod strategies {
    use proptest::prelude::*;

    use super::*;

    fn name() -> impl Strategy<Value = String> {
        "[a-z0-9_.:-]{0,40}"
    }
    fn text() -> impl Strategy<Value = String> {
        ".{0,60}"
    }
    fn blob() -> impl Strategy<Value = Bytes> {
        proptest::collection::vec(any::<u8>(), 0..200).prop_map(Bytes::from)
    }
    fn role() -> impl Strategy<Value = Role> {
        prop_oneof![
            Just(Role::Principal),
            Just(Role::Observer),
            Just(Role::MembershipObserver)
        ]
    }
    fn mode() -> impl Strategy<Value = ActivityMode> {
        prop_oneof![Just(ActivityMode::Active), Just(ActivityMode::Passive)]
    }
    fn change() -> impl Strategy<Value = MembershipChange> {
        prop_oneof![
            Just(MembershipChange::Joined),
            Just(MembershipChange::Left),
            Just(MembershipChange::RoleChanged),
            Just(MembershipChange::ModeChanged),
            Just(MembershipChange::Disconnected),
            Just(MembershipChange::Evicted)
        ]
    }
    fn member() -> impl Strategy<Value = MemberInfo> {
        (any::<u64>(), name(), role(), mode()).prop_map(|(client, name, role, mode)| MemberInfo {
            client,
            name,
            role,
            mode,
        })
    }

    /// Any frame of any kind.
    pub(crate) fn frame() -> impl Strategy<Value = Frame> {
        prop_oneof![
            (any::<u8>(), any::<u32>(), text(), name()).prop_map(|(v, window, token, name)| {
                Frame::Hello {
                    max_version: v,
                    window,
                    token,
                    name,
                }
            }),
            (name(), name(), any::<u8>(), blob()).prop_map(|(group, t, priority, s)| {
                Frame::CreateGroup {
                    group,
                    group_type: t,
                    priority,
                    initial_state: s,
                }
            }),
            name().prop_map(|group| Frame::DeleteGroup { group }),
            (name(), role(), mode(), any::<bool>(), any::<Option<u64>>()).prop_map(
                |(group, role, mode, w, resume_after)| Frame::Join {
                    group,
                    role,
                    mode,
                    watch_membership: w,
                    resume_after,
                }
            ),
            name().prop_map(|group| Frame::Leave { group }),
            (name(), role()).prop_map(|(group, role)| Frame::ChangeRole { group, role }),
            (name(), mode()).prop_map(|(group, mode)| Frame::ChangeMode { group, mode }),
            (name(), any::<u8>())
                .prop_map(|(group, priority)| Frame::SetPriority { group, priority }),
            (name(), any::<u16>(), any::<u64>(), blob()).prop_map(|(group, t, at, payload)| {
                Frame::Send {
                    group,
                    msg_type: t,
                    sent_at_micros: at,
                    payload,
                }
            }),
            (name(), any::<u64>(), blob()).prop_map(|(group, seq, state)| Frame::Checkpoint {
                group,
                seq,
                state
            }),
            (name(), name(), any::<bool>()).prop_map(|(group, lock, wait)| Frame::LockAcquire {
                group,
                lock,
                wait
            }),
            (name(), name()).prop_map(|(group, lock)| Frame::LockRelease { group, lock }),
            any::<u64>().prop_map(|consumed| Frame::Credit { consumed }),
            any::<u64>().prop_map(|nonce| Frame::Ping { nonce }),
            (
                any::<u8>(),
                any::<u64>(),
                any::<u32>(),
                any::<u32>(),
                any::<bool>()
            )
                .prop_map(|(version, client, max_frame, window, resume)| {
                    Frame::Welcome {
                        version,
                        client,
                        max_frame,
                        window,
                        resume,
                    }
                }),
            Just(Frame::Ok),
            (name(), any::<u64>()).prop_map(|(group, seq)| Frame::Sent { group, seq }),
            (
                name(),
                name(),
                any::<u64>(),
                any::<u64>(),
                blob(),
                proptest::collection::vec(member(), 0..5)
            )
                .prop_map(|(group, group_type, c, h, state, members)| Frame::Joined(
                    JoinInfo {
                        group,
                        group_type,
                        checkpoint_seq: c,
                        head_seq: h,
                        state,
                        members
                    }
                )),
            (
                name(),
                any::<u64>(),
                any::<u64>(),
                any::<u16>(),
                any::<u64>(),
                blob()
            )
                .prop_map(|(group, seq, sender, t, at, payload)| Frame::Deliver(
                    Update {
                        group,
                        seq,
                        sender,
                        msg_type: t,
                        sent_at_micros: at,
                        payload
                    }
                )),
            (name(), any::<u64>(), name(), change(), role(), mode()).prop_map(
                |(group, client, name, change, role, mode)| Frame::Membership(MembershipNotice {
                    group,
                    client,
                    name,
                    change,
                    role,
                    mode
                })
            ),
            (name(), name()).prop_map(|(group, lock)| Frame::LockGranted { group, lock }),
            name().prop_map(|group| Frame::GroupDeleted { group }),
            (name(), any::<u64>()).prop_map(|(group, dropped)| Frame::Resync { group, dropped }),
            (any::<u16>(), text()).prop_map(|(c, message)| Frame::Error {
                code: ErrorCode(c),
                message
            }),
            any::<u64>().prop_map(|nonce| Frame::Pong { nonce }),
        ]
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn golden_bytes_of_a_send() {
        let f = Frame::Send {
            group: "chat".into(),
            msg_type: 7,
            sent_at_micros: 0x0102,
            payload: Bytes::from_static(b"hi"),
        };
        let b = encode(0x0a0b0c0d, &f);
        let want: &[u8] = &[
            0, 0, 0, 30, // length: 8 header + 6 group + 2 type + 8 time + 6 payload
            1, 0x09, 0, 0, // version, kind, flags
            0x0a, 0x0b, 0x0c, 0x0d, // request id
            0, 4, b'c', b'h', b'a', b't', // group
            0, 7, // msg type
            0, 0, 0, 0, 0, 0, 1, 2, // sent at
            0, 0, 0, 2, b'h', b'i', // payload
        ];
        assert_eq!(&b[..], want);
        assert_eq!(
            decode(&b, DEFAULT_MAX_FRAME),
            Ok(Envelope {
                request: 0x0a0b0c0d,
                frame: f
            })
        );
    }

    #[test]
    fn a_resumed_join_carries_its_flag_and_sequence() {
        let join = |resume_after| Frame::Join {
            group: "g".into(),
            role: Role::Observer,
            mode: ActivityMode::Active,
            watch_membership: false,
            resume_after,
        };
        let plain = encode(2, &join(None));
        let b = encode(2, &join(Some(0x0102)));
        assert_eq!(&plain[6..8], [0, 0]);
        assert_eq!(&b[6..8], [0, 1], "FLAG_RESUME");
        assert_eq!(b.len(), plain.len() + 8);
        assert_eq!(&b[b.len() - 8..], [0, 0, 0, 0, 0, 0, 1, 2]);
        assert_eq!(
            decode(&b, DEFAULT_MAX_FRAME).map(|e| e.frame),
            Ok(join(Some(0x0102)))
        );
        // What a relay from before the flag makes of it: bytes after the
        // fields, malformed.
        let mut old = b.to_vec();
        old[6..8].copy_from_slice(&[0, 0]);
        assert!(matches!(
            decode(&old, DEFAULT_MAX_FRAME),
            Err(FrameError::Malformed(_))
        ));
        let w = encode(
            1,
            &Frame::Welcome {
                version: 1,
                client: 1,
                max_frame: 1,
                window: 1,
                resume: true,
            },
        );
        assert_eq!(&w[6..8], [0, 1]);
    }

    #[test]
    fn rejects_unknown_version_kind_and_oversize() {
        let mut b = encode(1, &Frame::Ok).to_vec();
        b[4] = 9;
        assert_eq!(
            decode(&b, DEFAULT_MAX_FRAME),
            Err(FrameError::UnsupportedVersion(9))
        );
        b[4] = VERSION;
        b[5] = 0x3f;
        assert_eq!(
            decode(&b, DEFAULT_MAX_FRAME),
            Err(FrameError::UnknownKind(0x3f))
        );
        let big = encode(
            1,
            &Frame::Send {
                group: "g".into(),
                msg_type: 0,
                sent_at_micros: 0,
                payload: Bytes::from(vec![0; 100]),
            },
        );
        assert!(matches!(
            decode(&big, 64),
            Err(FrameError::TooLarge { max: 64, .. })
        ));
    }

    #[test]
    fn decoder_rejects_oversized_prefix_before_buffering_the_body() {
        let mut d = FrameDecoder::new(1024);
        d.extend(&[0, 0x10, 0, 0]);
        assert!(matches!(d.next_frame(), Err(FrameError::TooLarge { .. })));
        let mut d = FrameDecoder::new(1024);
        d.extend(&[0, 0, 0, 2]);
        assert!(matches!(d.next_frame(), Err(FrameError::Malformed(_))));
    }

    #[test]
    fn decoder_cuts_a_stream_at_any_split() {
        let frames: Vec<Bytes> = (0..5)
            .map(|n| encode(n, &Frame::Ping { nonce: 42 }))
            .collect();
        let stream: Vec<u8> = frames.iter().flat_map(|f| f.iter().copied()).collect();
        for split in 1..stream.len() {
            let mut d = FrameDecoder::new(DEFAULT_MAX_FRAME);
            let mut out = Vec::new();
            for chunk in stream.chunks(split) {
                d.extend(chunk);
                while let Some(f) = d.next_frame().expect("valid stream") {
                    out.push(f);
                }
            }
            assert_eq!(out, frames, "split {split}");
        }
    }

    #[test]
    fn a_bogus_member_count_does_not_allocate() {
        let mut b = encode(
            0,
            &Frame::Joined(JoinInfo {
                group: "g".into(),
                group_type: "t".into(),
                checkpoint_seq: 0,
                head_seq: 0,
                state: Bytes::new(),
                members: vec![],
            }),
        )
        .to_vec();
        let n = b.len();
        b[n - 4..].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(
            decode(&b, DEFAULT_MAX_FRAME),
            Err(FrameError::Truncated { .. })
        ));
    }

    /// One frame of every kind, the fuzz target's seed corpus
    /// (`fuzz/corpus/relay_frame/seed-*`). `GROUPWIRE_WRITE_CORPUS=1`
    /// rewrites the files; otherwise the test checks they are current.
    #[test]
    fn seed_corpus_is_current() {
        use proptest::strategy::ValueTree;
        use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/relay_frame");
        let mut runner = TestRunner::new_with_rng(
            Config::default(),
            TestRng::from_seed(RngAlgorithm::ChaCha, &[7; 32]),
        );
        let mut seen = std::collections::BTreeMap::new();
        while seen.len() < 25 {
            let f = strategies::frame()
                .new_tree(&mut runner)
                .expect("tree")
                .current();
            seen.entry(f.kind() as u8).or_insert(f);
        }
        let write = std::env::var_os("GROUPWIRE_WRITE_CORPUS").is_some();
        for (kind, f) in seen {
            let bytes = encode(u32::from(kind), &f);
            let path = dir.join(format!("seed-{kind:02x}"));
            if write {
                std::fs::create_dir_all(&dir).expect("corpus dir");
                std::fs::write(&path, &bytes).expect("write seed");
            }
            let stored = std::fs::read(&path)
                .expect("seed corpus present (GROUPWIRE_WRITE_CORPUS=1 writes it)");
            assert!(
                decode(&stored, DEFAULT_MAX_FRAME).is_ok(),
                "{}",
                path.display()
            );
        }
    }

    proptest! {
        #[test]
        fn every_frame_round_trips(request in any::<u32>(), frame in strategies::frame()) {
            let b = encode(request, &frame);
            prop_assert_eq!(decode(&b, DEFAULT_MAX_FRAME), Ok(Envelope { request, frame: frame.clone() }));
            prop_assert_eq!(decode_bytes(&b, DEFAULT_MAX_FRAME), Ok(Envelope { request, frame }));
        }

        #[test]
        fn decoding_garbage_never_panics_and_reencodes(data in proptest::collection::vec(any::<u8>(), 0..300)) {
            if let Ok(env) = decode(&data, DEFAULT_MAX_FRAME) {
                let b = encode(env.request, &env.frame);
                prop_assert_eq!(decode(&b, DEFAULT_MAX_FRAME), Ok(env));
            }
        }

        #[test]
        fn truncating_a_frame_is_an_error(frame in strategies::frame(), cut in 0usize..1000) {
            let b = encode(3, &frame);
            let cut = cut % b.len();
            prop_assert!(decode(&b[..cut], DEFAULT_MAX_FRAME).is_err());
        }
    }
}
