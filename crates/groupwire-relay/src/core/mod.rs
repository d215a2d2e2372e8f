//! The relay's protocol core: a sans-IO state machine (STYLE.md §1).
//!
//! [`RelayCore`] owns groups, members, roles, sequencing, locks and the
//! priority [scheduler](crate::sched). It never touches a socket, a clock
//! or a file: the driver ([`crate::server`]) feeds it inputs and drains its
//! outputs.
//!
//! Method classes:
//!
//! - inputs: [`handle_connect`](RelayCore::handle_connect),
//!   [`handle_frame`](RelayCore::handle_frame) (raw bytes of one frame),
//!   [`handle_stream_error`](RelayCore::handle_stream_error),
//!   [`handle_violation`](RelayCore::handle_violation),
//!   [`handle_conn_timeout`](RelayCore::handle_conn_timeout),
//!   [`handle_written`](RelayCore::handle_written),
//!   [`handle_disconnect`](RelayCore::handle_disconnect),
//!   [`handle_storage`](RelayCore::handle_storage) (results of storage
//!   operations), [`handle_timeout`](RelayCore::handle_timeout);
//!   [`restore_groups`](RelayCore::restore_groups) once at startup;
//! - outputs, drained after every input in this order:
//!   [`poll_storage`](RelayCore::poll_storage) until `None` (run them in
//!   order on one storage thread), [`poll_transmit`](RelayCore::poll_transmit)
//!   until `None` (or until the driver's fan-out budget for this round is
//!   spent), then [`poll_timeout`](RelayCore::poll_timeout);
//! - getters: [`stats`](RelayCore::stats), [`queue_depths`](RelayCore::queue_depths).
//!
//! # Services (Litiu & Prakash §2.1)
//!
//! - **Membership**: create, delete, join (with role), leave, change role,
//!   change activity mode; a client may be in many groups over one
//!   connection; watchers get join/leave notifications; a disconnect is a
//!   leave, announced as such, and disturbs nobody else.
//! - **Total order**: every update sent to a group gets the next sequence
//!   number in arrival order and is delivered to every member in that order
//!   once it is durable; the sender gets the sequence number.
//! - **State transfer**: a joiner gets the latest checkpoint and every later
//!   update, with no gap and no duplicate across the boundary (see
//!   `Member::live_from`).
//! - **Locks**: named per group, FIFO waiters, released when the holder
//!   leaves or disconnects.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bytes::Bytes;
use groupwire_proto::Instant;

use crate::auth::{self, Claims};
use crate::frame::{
    self, ActivityMode, ErrorCode, Frame, FrameError, JoinInfo, MemberInfo, MembershipChange,
    MembershipNotice, Role,
};
use crate::sched::{
    ConnId, GroupId, GroupIdMap, GroupMap, QueueDepth, Scheduler, SchedulerConfig, SchedulerStats,
    SlowAction, Transmit,
};
use crate::storage::{
    Checkpoint, GroupRecord, Loaded, Origin, StorageDone, StorageError, StorageOp, Update,
};

pub use crate::priority::{
    DEFAULT_GROUP_PRIORITY, MAX_GROUP_PRIORITY, MAX_PRIORITY, member_priority,
};

/// Core knobs.
#[derive(Clone, Debug)]
pub struct CoreConfig {
    /// Cap on one frame, prefix included. On NATS JetStream, every relay
    /// node of one cluster must have the same (issue 17, see
    /// [`ClusterSettingsError`](crate::storage::ClusterSettingsError)).
    pub max_frame: usize,
    /// Send window granted when `Hello` asks for 0.
    pub default_window: u32,
    /// Smallest window granted.
    pub min_window: u32,
    /// Largest window granted.
    pub max_window: u32,
    /// Token keys by key id (see [`auth`]); `None` accepts every client
    /// with [`Claims::anyone`]. On NATS JetStream, either every relay node
    /// of one cluster has keys or none has (issue 17); the keys may differ.
    pub auth_keys: Option<auth::Keys>,
    /// Unix seconds at the driver's epoch, for token expiry.
    pub wall_epoch_unix_secs: u64,
    /// Delete log entries a checkpoint covers. On NATS JetStream, every
    /// relay node of one cluster must have the same (issue 17).
    pub compact_on_checkpoint: bool,
    /// Log bytes per page of a state transfer (default 256 KiB). A joiner
    /// or a resynchronized member gets the checkpoint and the log after it
    /// one page at a time, the next page loaded once the last is sent, so
    /// a long log never sits in the relay's memory whole. A client with a
    /// small send window gets pages of four windows (at least 16 KiB): it
    /// reads no faster, and a hundred such clients joining at once cost a
    /// hundred small reads of the log, not a hundred large ones (with the
    /// memory store, in the core task's own turn).
    pub transfer_page_bytes: usize,
    /// Litiu & Prakash §4.2: a group with more members than this may lose
    /// observers while the relay is overloaded (0, the default: never).
    pub shed_observers_above: usize,
    /// The relay counts as overloaded while this many bytes wait in its
    /// queues, all clients together (default 64 MiB).
    pub overload_queued_bytes: u64,
    /// Priority scheduler.
    pub sched: SchedulerConfig,
    /// Other relay nodes share the store (NATS JetStream): a lock is
    /// granted only once the store's compare-and-set says so
    /// ([`StorageOp::TakeLock`]), not on this node's word alone.
    pub shared_locks: bool,
    /// Other relay nodes share the groups' membership (NATS JetStream):
    /// every join, change and leave here is also a
    /// [`StorageOp::Member`], and members of other nodes come back as
    /// [`StorageDone::MemberChanged`], listed in `Joined` and announced
    /// to watchers like this node's.
    pub shared_membership: bool,
}

impl Default for CoreConfig {
    fn default() -> Self {
        Self {
            max_frame: frame::DEFAULT_MAX_FRAME,
            default_window: 256 << 10,
            min_window: 4 << 10,
            max_window: 16 << 20,
            auth_keys: None,
            wall_epoch_unix_secs: 0,
            compact_on_checkpoint: true,
            transfer_page_bytes: 256 << 10,
            shed_observers_above: 0,
            overload_queued_bytes: 64 << 20,
            sched: SchedulerConfig::default(),
            shared_locks: false,
            shared_membership: false,
        }
    }
}

/// Everything the relay counts. Read it from the server handle.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RelayStats {
    /// Connections accepted.
    pub connections_opened: u64,
    /// Connections gone (closed, failed or disconnected by the relay).
    pub connections_closed: u64,
    /// Frames received.
    pub frames_in: u64,
    /// Frames written.
    pub frames_out: u64,
    /// Bytes written.
    pub bytes_out: u64,
    /// `Deliver` frames written.
    pub deliveries: u64,
    /// Updates sequenced.
    pub updates: u64,
    /// Error frames sent (all codes).
    pub errors_sent: u64,
    /// Undecodable frames.
    pub malformed_frames: u64,
    /// Frames above the cap.
    pub oversized_frames: u64,
    /// Frames in an unknown version.
    pub unsupported_versions: u64,
    /// Frames out of place (not `Hello` first, relay-only kinds, bad credit).
    pub protocol_violations: u64,
    /// Refused tokens.
    pub auth_failures: u64,
    /// Requests the role or token did not allow.
    pub forbidden: u64,
    /// Requests for groups the client is not in.
    pub not_member: u64,
    /// Lock requests refused (busy, not holder, already held).
    pub lock_errors: u64,
    /// Storage failures.
    pub storage_errors: u64,
    /// Observers removed from oversized groups under overload (§4.2).
    pub observers_shed: u64,
    /// Scheduler counters (demotions, agings, slow consumers, queues).
    pub sched: SchedulerStats,
    /// Times the driver stopped reading a client's input because its
    /// unread replies were over [`ServerConfig::input_pause_bytes`](crate::ServerConfig::input_pause_bytes)
    /// (backpressure). Counted by the driver; 0 from the core alone.
    pub input_pauses: u64,
    /// Connections closed because no `Hello` arrived within the handshake
    /// timeout. Counted by the driver.
    pub handshake_timeouts: u64,
    /// Connections closed because nothing arrived within the idle timeout.
    /// Counted by the driver.
    pub idle_timeouts: u64,
    /// Connections refused because their source address had as many open
    /// as [`ServerConfig::max_conns_per_ip`](crate::ServerConfig::max_conns_per_ip).
    /// Counted by the driver.
    pub refused_per_ip: u64,
    /// Connections without a `Hello` yet, closed to free a file descriptor
    /// when the relay ran out of them. Counted by the driver.
    pub shed_for_descriptors: u64,
}

/// A member of a group as the core keeps it.
#[derive(Clone, Debug)]
struct Member {
    role: Role,
    mode: ActivityMode,
    watch: bool,
    /// The first sequence number delivered live. Updates below it come
    /// from the state transfer (checkpoint + log up to `live_from - 1`),
    /// updates from it on from the live fan-out: no gap, no duplicate.
    live_from: u64,
    /// A state transfer is in flight: `Some(request id)` of the `Joined`.
    loading: Option<u32>,
    /// The transfer in flight (from [`RelayCore::next_transfer`]): pages of
    /// an older one are ignored.
    transfer: u64,
    /// The last sequence number the transfer has queued so far.
    transfer_sent: u64,
    /// Frames dropped by a slow-consumer resync, announced before `Joined`.
    resync_dropped: Option<u64>,
    /// A resumed join (`Join::resume_after`) whose first page has not
    /// come: its `Joined` names this sequence as the checkpoint and
    /// carries no state.
    resume: Option<u64>,
    /// Spilled ([`SchedulerConfig::spill_queue_bytes`]): the member is
    /// served from the log until it reaches the head, and the fan-out
    /// queues nothing for it meanwhile; each page's request moves
    /// `live_from` up to what is committed by then, and the page that
    /// reaches the head while nothing newer is committed ends it (no gap:
    /// the core is one task, so nothing commits between that check and
    /// the next live push).
    following: bool,
}

#[derive(Debug)]
struct Group {
    /// Its number for the scheduler, never reused while the process runs.
    id: GroupId,
    group_type: String,
    default_priority: u8,
    /// Next sequence number to assign.
    next_seq: u64,
    /// Last sequence number durable and fanned out.
    committed: u64,
    checkpoint_seq: u64,
    members: BTreeMap<ConnId, Member>,
    /// Members connected to other relay nodes, by client id (with
    /// [`CoreConfig::shared_membership`]; the store bounds how many).
    remote: BTreeMap<u64, MemberInfo>,
    locks: BTreeMap<String, Lock>,
    /// An append failed: sequence numbers may have a hole; refuse updates
    /// until the relay restarts and reloads the head from storage.
    broken: bool,
}

#[derive(Debug)]
struct Lock {
    holder: ConnId,
    waiters: VecDeque<(ConnId, u32)>,
    /// With [`CoreConfig::shared_locks`]: the holder's grant waits for the
    /// store (request id, and whether it answers with `LockGranted`, a
    /// waiter's grant, rather than `Ok`).
    pending: Option<(u32, bool)>,
}

#[derive(Debug)]
struct Conn {
    /// `None` until `Hello`.
    claims: Option<Claims>,
    name: String,
    groups: BTreeSet<String>,
}

/// The protocol core. See the module docs for the call order.
#[derive(Debug)]
pub struct RelayCore {
    cfg: CoreConfig,
    /// Groups by name: the one map from a name to its [`GroupId`].
    groups: GroupMap<Group>,
    /// Names by id, for what the scheduler reports by id.
    names: GroupIdMap<String>,
    /// The id [`insert_group`](Self::insert_group) tries next.
    next_group: u32,
    conns: crate::sched::ConnIdMap<Conn>,
    sched: Scheduler,
    storage_ops: VecDeque<StorageOp>,
    slow: Vec<SlowAction>,
    stats: RelayStats,
    /// The `now` of the input being handled.
    now: Instant,
    /// Numbers state transfers.
    next_transfer: u64,
    /// Bumped on every join, leave and role change.
    roles_epoch: u64,
}

impl RelayCore {
    /// A core with no groups.
    pub fn new(cfg: CoreConfig) -> Self {
        Self {
            sched: Scheduler::new(cfg.sched.clone()),
            cfg,
            groups: GroupMap::default(),
            names: GroupIdMap::default(),
            next_group: 0,
            conns: crate::sched::ConnIdMap::default(),
            storage_ops: VecDeque::new(),
            slow: Vec::new(),
            stats: RelayStats::default(),
            now: Instant::ZERO,
            next_transfer: 0,
            roles_epoch: 0,
        }
    }

    /// Loads groups found in storage at startup (with their heads).
    pub fn restore_groups(&mut self, records: Vec<GroupRecord>) {
        for r in records {
            self.insert_group(
                r.name,
                Group {
                    id: GroupId(0),
                    group_type: r.group_type,
                    default_priority: r.priority,
                    next_seq: r.head_seq + 1,
                    committed: r.head_seq,
                    checkpoint_seq: r.checkpoint_seq,
                    members: BTreeMap::new(),
                    remote: BTreeMap::new(),
                    locks: BTreeMap::new(),
                    broken: false,
                },
            );
        }
    }

    /// Counters, scheduler counters included.
    pub fn stats(&self) -> RelayStats {
        let mut s = self.stats.clone();
        s.sched = self.sched.stats();
        s
    }

    /// Every (member, group) queue with its depth and priority.
    pub fn queue_depths(&self) -> Vec<QueueDepth> {
        let mut out: Vec<QueueDepth> = self
            .sched
            .depths()
            .into_iter()
            .filter_map(|d| {
                Some(QueueDepth {
                    conn: d.conn,
                    group: self.names.get(&d.group)?.clone(),
                    frames: d.frames,
                    bytes: d.bytes,
                    priority: d.priority,
                })
            })
            .collect();
        out.sort_unstable_by(|a, b| (a.conn, &a.group).cmp(&(b.conn, &b.group)));
        out
    }

    /// Bytes of replies (`Ok`, `Sent`, `Pong`, errors, ...) queued for
    /// `conn` and not yet handed to its writer. They drain only as fast as
    /// the client reads, so the driver stops reading the client's requests
    /// while this is above its threshold (backpressure): a client that
    /// floods requests without reading costs a bounded amount of memory.
    pub fn reply_backlog(&self, conn: ConnId) -> usize {
        self.sched.reply_backlog(conn)
    }

    /// Whether `conn` keeps up: its `Hello` was accepted, no fatal error
    /// is queued for it, its send window has room and its writer is not
    /// backed up. The driver serves the connections that do not (not yet,
    /// or no longer) at a lower OS priority than those that do, so what
    /// they cost waits behind the clients that read (`server/place.rs`).
    pub fn keeps_up(&self, conn: ConnId) -> bool {
        self.conns.get(&conn).is_some_and(|c| c.claims.is_some()) && self.sched.keeps_up(conn)
    }

    /// Names of the groups that exist, sorted.
    pub fn group_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.groups.keys().cloned().collect();
        names.sort_unstable();
        names
    }

    /// A group's instant priority (its default, lowered during a burst).
    pub fn instant_priority(&self, group: &str) -> Option<u8> {
        self.sched.instant_priority(self.groups.get(group)?.id)
    }

    //= Litiu & Prakash §4.5
    //# Client Receiver threads run at the maximum of the priority of groups
    //# in which the client has a principal role.
    /// The priority at which the driver should take `conn`'s input: the
    /// highest instant priority of the groups it is a principal in. A
    /// client that is principal nowhere sends only requests and credits;
    /// the paper does not say, and we use [`DEFAULT_GROUP_PRIORITY`] so an
    /// observer's credits are not starved by a demoted publisher. With
    /// [`SchedulerConfig::equal_priorities`], the default for everyone.
    ///
    /// A client that does not read its replies (some wait while its writer
    /// is backed up) is taken last, at 0: its requests only add to what it
    /// does not read, and ahead of a member's they delayed it by a reply
    /// each (100 ping flooders held a demoted publisher's sends for seconds).
    pub fn receive_priority(&self, conn: ConnId) -> u8 {
        let Some(c) = self.conns.get(&conn) else {
            return DEFAULT_GROUP_PRIORITY;
        };
        if self.sched.not_reading_replies(conn) {
            return 0;
        }
        if self.cfg.sched.equal_priorities {
            return DEFAULT_GROUP_PRIORITY;
        }
        c.groups
            .iter()
            .filter_map(|g| self.groups.get(g))
            .filter(|g| {
                g.members
                    .get(&conn)
                    .is_some_and(|m| m.role == Role::Principal)
            })
            .filter_map(|g| self.sched.instant_priority(g.id))
            .max()
            .unwrap_or(DEFAULT_GROUP_PRIORITY)
    }

    /// Changes whenever a group's instant priority may have changed (burst
    /// demotion and restore, `SetPriority`, deletion): then every client's
    /// [`receive_priority`](Self::receive_priority) may have changed.
    /// Otherwise a client's changes only after its own input.
    pub fn priority_epoch(&self) -> u64 {
        self.sched.epoch()
    }

    /// Changes on every join, leave and role change: after an input that
    /// changed it, the sender's [`receive_priority`](Self::receive_priority)
    /// may have changed.
    pub fn roles_epoch(&self) -> u64 {
        self.roles_epoch
    }

    /// A new connection. `conn` must be unique over the core's life.
    pub fn handle_connect(&mut self, now: Instant, conn: ConnId) {
        self.now = self.now.max(now);
        self.stats.connections_opened += 1;
        self.conns.insert(
            conn,
            Conn {
                claims: None,
                name: String::new(),
                groups: BTreeSet::new(),
            },
        );
        self.sched
            .add_conn(conn, u64::from(self.cfg.default_window), 0);
    }

    /// The driver's stream decoder failed (oversized prefix, bad length):
    /// the connection gets a fatal error.
    pub fn handle_stream_error(&mut self, now: Instant, conn: ConnId, err: &FrameError) {
        self.now = self.now.max(now);
        self.decode_failed(now, conn, err);
        self.drain_slow(now);
    }

    /// The driver saw `conn` break the protocol below the frame layer (a
    /// WebSocket text message): the connection gets a fatal
    /// `PROTOCOL_VIOLATION`.
    pub fn handle_violation(&mut self, now: Instant, conn: ConnId, message: &str) {
        self.now = self.now.max(now);
        self.violation(conn, 0, message);
        self.drain_slow(now);
    }

    /// The driver's handshake or idle timer for `conn` fired: the
    /// connection gets a fatal `TIMEOUT` with `message`.
    pub fn handle_conn_timeout(&mut self, now: Instant, conn: ConnId, message: &str) {
        self.now = self.now.max(now);
        self.fail(conn, 0, ErrorCode::TIMEOUT, message);
        self.drain_slow(now);
    }

    /// One whole frame's bytes from `conn`. Malformed input is answered and
    /// counted, never a panic. Payloads are kept as slices of `bytes`, not
    /// copied.
    pub fn handle_frame(&mut self, now: Instant, conn: ConnId, bytes: &Bytes) {
        self.now = self.now.max(now);
        if !self.conns.contains_key(&conn) {
            return; // closing or gone: ignore what is still in flight
        }
        self.stats.frames_in += 1;
        match frame::decode_bytes(bytes, self.cfg.max_frame) {
            Ok(env) => self.dispatch(now, conn, env.request, env.frame),
            Err(e) => self.decode_failed(now, conn, &e),
        }
        self.drain_slow(now);
    }

    /// The driver wrote `bytes` of `conn`'s frames to the socket.
    pub fn handle_written(&mut self, conn: ConnId, bytes: usize) {
        self.sched.written(conn, bytes as u64);
    }

    /// The connection closed or failed: a leave of every group, announced
    /// as [`MembershipChange::Disconnected`]; its locks are released.
    pub fn handle_disconnect(&mut self, now: Instant, conn: ConnId) {
        self.now = self.now.max(now);
        self.drop_conn(now, conn);
        self.sched.remove_conn(conn);
        self.drain_slow(now);
    }

    /// A storage operation finished.
    pub fn handle_storage(&mut self, now: Instant, done: StorageDone) {
        self.now = self.now.max(now);
        match done {
            StorageDone::Appended {
                origin,
                entry,
                result,
            } => self.on_appended(now, origin, entry, result),
            StorageDone::Created {
                origin,
                group,
                result,
            } => match result {
                Ok(()) => self.reply(origin.conn, origin.request, Frame::Ok),
                Err(e) => {
                    self.stats.storage_errors += 1;
                    if self
                        .groups
                        .get(&group)
                        .is_some_and(|g| g.members.is_empty())
                    {
                        self.remove_group_entry(&group);
                    }
                    let code = match e {
                        StorageError::GroupExists(_) => ErrorCode::GROUP_EXISTS,
                        _ => ErrorCode::STORAGE,
                    };
                    self.error(origin.conn, origin.request, code, &e.to_string());
                }
            },
            StorageDone::Loaded(loaded) => self.on_loaded(now, loaded),
            StorageDone::Checkpointed {
                origin,
                group,
                seq,
                result,
            } => match result {
                Ok(()) => {
                    if let Some(g) = self.groups.get_mut(&group) {
                        g.checkpoint_seq = g.checkpoint_seq.max(seq);
                    }
                    self.reply(origin.conn, origin.request, Frame::Ok);
                }
                Err(e) => {
                    self.stats.storage_errors += 1;
                    self.error(
                        origin.conn,
                        origin.request,
                        ErrorCode::STORAGE,
                        &e.to_string(),
                    );
                }
            },
            StorageDone::Failed { error } => {
                self.stats.storage_errors += 1;
                tracing::warn!(%error, "relay storage write failed");
            }
            StorageDone::Remote { entry } => self.on_remote(now, entry),
            StorageDone::LockTaken {
                origin,
                group,
                lock,
                granted,
            } => self.on_lock_taken(origin, &group, &lock, granted),
            StorageDone::GroupFound { record } => {
                if !self.groups.contains_key(&record.name) {
                    self.restore_groups(vec![record]);
                }
            }
            StorageDone::GroupGone { group } => self.drop_group(&group),
            StorageDone::MemberChanged {
                group,
                member,
                change,
            } => self.on_remote_member(now, &group, member, change),
            StorageDone::PriorityChanged { group, priority } => {
                self.apply_group_priority(&group, priority.min(MAX_GROUP_PRIORITY));
            }
        }
        self.drain_slow(now);
    }

    /// Burst demotion and aging (see [`crate::sched`]). Early or repeated
    /// calls are harmless.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.now = self.now.max(now);
        let actions = self.sched.handle_timeout(now);
        self.slow.extend(actions);
        self.drain_slow(now);
    }

    /// The next storage operation to run. Run them in this order, on one
    /// thread, and feed each result back with [`handle_storage`](Self::handle_storage).
    pub fn poll_storage(&mut self) -> Option<StorageOp> {
        self.storage_ops.pop_front()
    }

    /// The next frame to write, highest priority first. Call again until
    /// `None`; new frames may appear after any input.
    pub fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
        let t = self.sched.poll_transmit(now)?;
        self.load_next_pages();
        self.stats.frames_out += 1;
        self.stats.bytes_out += t.frame.len() as u64;
        if frame::is_deliver(&t.frame) {
            self.stats.deliveries += 1;
        }
        if t.close_after {
            self.stats.connections_closed += 1;
        }
        Some(t)
    }

    /// When to call [`handle_timeout`](Self::handle_timeout). Changes after
    /// any input or `poll_transmit`.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.sched.poll_timeout()
    }

    // ---- dispatch ----

    fn decode_failed(&mut self, _now: Instant, conn: ConnId, e: &FrameError) {
        let code = match e {
            FrameError::TooLarge { .. } => {
                self.stats.oversized_frames += 1;
                ErrorCode::FRAME_TOO_LARGE
            }
            FrameError::UnsupportedVersion(_) => {
                self.stats.unsupported_versions += 1;
                ErrorCode::UNSUPPORTED_VERSION
            }
            _ => {
                self.stats.malformed_frames += 1;
                ErrorCode::MALFORMED
            }
        };
        self.fail(conn, 0, code, &e.to_string());
    }

    fn dispatch(&mut self, now: Instant, conn: ConnId, req: u32, f: Frame) {
        let hello_done = self.conns.get(&conn).is_some_and(|c| c.claims.is_some());
        if !hello_done {
            return match f {
                Frame::Hello {
                    max_version,
                    window,
                    token,
                    name,
                } => self.on_hello(now, conn, req, max_version, window, &token, name),
                _ => self.violation(conn, req, "the first frame must be Hello"),
            };
        }
        match f {
            Frame::CreateGroup {
                group,
                group_type,
                priority,
                initial_state,
            } => self.on_create(conn, req, group, group_type, priority, initial_state),
            Frame::DeleteGroup { group } => self.on_delete(now, conn, req, &group),
            Frame::Join {
                group,
                role,
                mode,
                watch_membership,
                resume_after,
            } => self.on_join(
                now,
                conn,
                req,
                &group,
                (role, mode, watch_membership),
                resume_after,
            ),
            Frame::Leave { group } => {
                if self.member(conn, req, &group).is_some() {
                    self.remove_member(now, conn, &group, MembershipChange::Left);
                    self.reply(conn, req, Frame::Ok);
                }
            }
            Frame::ChangeRole { group, role } => self.on_change_role(now, conn, req, &group, role),
            Frame::ChangeMode { group, mode } => self.on_change_mode(now, conn, req, &group, mode),
            Frame::SetPriority { group, priority } => {
                self.on_set_priority(conn, req, &group, priority);
            }
            Frame::Send {
                group,
                msg_type,
                sent_at_micros,
                payload,
            } => self.on_send(conn, req, group, msg_type, sent_at_micros, payload),
            Frame::Checkpoint { group, seq, state } => {
                self.on_checkpoint(conn, req, group, seq, state);
            }
            Frame::LockAcquire { group, lock, wait } => {
                self.on_lock_acquire(conn, req, &group, &lock, wait);
            }
            Frame::LockRelease { group, lock } => self.on_lock_release(conn, req, &group, &lock),
            Frame::Credit { consumed } => {
                if self.sched.credit(conn, consumed).is_err() {
                    self.violation(conn, req, "credit for bytes never sent");
                }
            }
            Frame::Ping { nonce } => self.reply(conn, req, Frame::Pong { nonce }),
            Frame::Hello { .. } => self.violation(conn, req, "a second Hello"),
            other => {
                let kind = other.kind();
                self.violation(
                    conn,
                    req,
                    &format!("{kind:?} is sent by the relay, not clients"),
                );
            }
        }
    }

    fn claims(&self, conn: ConnId) -> Claims {
        self.conns
            .get(&conn)
            .and_then(|c| c.claims.clone())
            .unwrap_or_else(|| Claims {
                groups: Vec::new(),
                ..Claims::anyone()
            })
    }

    /// The member, or an error reply (`NO_SUCH_GROUP`, `NOT_MEMBER`).
    fn member(&mut self, conn: ConnId, req: u32, group: &str) -> Option<Member> {
        let why = match self.groups.get(group) {
            None => format!("no group {group:?}"),
            Some(g) => match g.members.get(&conn) {
                Some(m) => return Some(m.clone()),
                None => format!("not a member of {group:?}"),
            },
        };
        self.stats.not_member += 1;
        self.error(conn, req, ErrorCode::NOT_MEMBER, &why);
        None
    }

    //= Litiu & Prakash §4.2
    //# Principals have update privilege on a shared state.
    /// `conn`'s membership of `group` if it is a principal there; otherwise
    /// answers `req` (not a member, or forbidden to `what`) and counts it.
    fn principal(&mut self, conn: ConnId, req: u32, group: &str, what: &str) -> Option<Member> {
        let m = self.member(conn, req, group)?;
        if m.role != Role::Principal {
            self.stats.forbidden += 1;
            self.error(
                conn,
                req,
                ErrorCode::FORBIDDEN,
                &format!("only principals may {what}"),
            );
            return None;
        }
        Some(m)
    }

    /// Adds `group` under `name` with a fresh [`GroupId`] (or, for a name
    /// that exists, under its id, replacing it) and tells the scheduler.
    fn insert_group(&mut self, name: String, mut group: Group) {
        group.id = match self.groups.get(&name) {
            Some(old) => old.id,
            None => loop {
                let id = GroupId(self.next_group);
                // Wrapping after 2^32 groups is harmless: a removed group's
                // id is nowhere (its queues and refills go with it), and
                // live ids are skipped.
                self.next_group = self.next_group.wrapping_add(1);
                if !self.names.contains_key(&id) {
                    break id;
                }
            },
        };
        self.sched.add_group(group.id, group.default_priority);
        self.names.insert(group.id, name.clone());
        self.groups.insert(name, group);
    }

    /// Removes the group called `name`, if it exists, from the core and the
    /// scheduler (its members' queues too); returns it.
    fn remove_group_entry(&mut self, name: &str) -> Option<Group> {
        let g = self.groups.remove(name)?;
        self.names.remove(&g.id);
        self.sched.remove_group(g.id);
        Some(g)
    }

    /// The scheduler's id of the group called `name`.
    fn group_id(&self, name: &str) -> Option<GroupId> {
        self.groups.get(name).map(|g| g.id)
    }

    fn member_mut(&mut self, conn: ConnId, group: &str) -> Option<&mut Member> {
        self.groups.get_mut(group)?.members.get_mut(&conn)
    }

    fn push(&mut self, now: Instant, conn: ConnId, group: GroupId, frame: Bytes) {
        if let Some(a) = self.sched.push(now, conn, group, frame) {
            self.slow.push(a);
        }
    }

    fn push_control(&mut self, conn: ConnId, req: u32, f: &Frame) {
        if !self.conns.contains_key(&conn) {
            return;
        }
        if let Some(a) = self.sched.push_control(conn, frame::encode(req, f)) {
            self.slow.push(a);
        }
    }

    fn reply(&mut self, conn: ConnId, req: u32, f: Frame) {
        self.push_control(conn, req, &f);
    }

    /// A non-fatal error reply.
    fn error(&mut self, conn: ConnId, req: u32, code: ErrorCode, message: &str) {
        self.stats.errors_sent += 1;
        tracing::debug!(conn = conn.0, %code, message, "relay request failed");
        self.push_control(
            conn,
            req,
            &Frame::Error {
                code,
                message: message.into(),
            },
        );
    }

    /// The error reply to a request naming `group`, which does not exist.
    fn no_such_group(&mut self, conn: ConnId, req: u32, group: &str) {
        self.error(
            conn,
            req,
            ErrorCode::NO_SUCH_GROUP,
            &format!("no group {group:?}"),
        );
    }

    fn violation(&mut self, conn: ConnId, req: u32, message: &str) {
        self.stats.protocol_violations += 1;
        self.fail(conn, req, ErrorCode::PROTOCOL_VIOLATION, message);
    }

    /// A fatal error: the client leaves every group, gets `code` and is
    /// closed after it.
    fn fail(&mut self, conn: ConnId, req: u32, code: ErrorCode, message: &str) {
        if !self.conns.contains_key(&conn) {
            return;
        }
        self.stats.errors_sent += 1;
        tracing::debug!(conn = conn.0, %code, message, "relay closes a connection");
        self.drop_conn(self.now, conn);
        self.sched.close(
            conn,
            frame::encode(
                req,
                &Frame::Error {
                    code,
                    message: message.into(),
                },
            ),
        );
    }

    /// Removes `conn` from every group (announced as a disconnect, with
    /// its name: the connection is forgotten only after the notices).
    fn drop_conn(&mut self, now: Instant, conn: ConnId) {
        let Some(groups) = self.conns.get(&conn).map(|c| c.groups.clone()) else {
            return;
        };
        self.stats.connections_closed += 1;
        for group in groups {
            self.remove_member(now, conn, &group, MembershipChange::Disconnected);
        }
        self.conns.remove(&conn);
    }

    fn drain_slow(&mut self, now: Instant) {
        while let Some(a) = self.slow.pop() {
            match a {
                SlowAction::Resync { conn, group } => {
                    if let Some(name) = self.names.get(&group).cloned() {
                        self.start_resync(now, conn, &name, true);
                    }
                }
                SlowAction::Follow { conn, group } => {
                    if let Some(name) = self.names.get(&group).cloned() {
                        self.follow_log(conn, &name);
                    }
                }
                SlowAction::Spill {
                    conn,
                    group,
                    oldest,
                } => {
                    if let Some(name) = self.names.get(&group).cloned() {
                        self.start_spill(now, conn, &name, oldest);
                    }
                }
                SlowAction::Disconnect { conn } => self.fail(
                    conn,
                    0,
                    ErrorCode::SLOW_CONSUMER,
                    "the client did not read its messages fast enough",
                ),
            }
        }
    }
}

mod locks;
mod membership;
mod order;
mod transfer;

#[cfg(test)]
mod tests;
