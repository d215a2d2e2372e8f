//! The priority scheduler of outgoing traffic (Litiu & Prakash §4.4–§4.6).
//!
//! A sans-IO structure: frames go in with `Scheduler::push`, come out in
//! priority order from `Scheduler::poll_transmit`; time is an input.
//!
//! - One queue per (member, group). Its priority is the group's *instant*
//!   priority plus the member's priority (role and activity mode), capped by
//!   the client's token ([`crate::auth::Claims::max_priority`]).
//! - `Scheduler::poll_transmit` serves, across all clients, the client
//!   whose best queue has the highest priority, and within that client its
//!   highest-priority queue; ties go round robin (between clients and
//!   between a client's queues). Each client's replies go first.
//! - A client is served only while its send window is open (bytes sent but
//!   not yet credited by the client) and its writer is not backed up.
//! - Burst demotion, aging and the slow-consumer policy: see
//!   [`SchedulerConfig`].
//!
//! Memory is bounded: a client's group queues together, and its replies
//! separately, are capped by [`SchedulerConfig::max_client_queue_bytes`]
//! (so at most twice the cap per client); crossing it triggers the
//! slow-consumer policy for the group queues and a disconnect for replies
//! (never a larger buffer). Under the default policy a client that does
//! not read spills far earlier, at
//! [`SchedulerConfig::spill_queue_bytes`] in one queue, and is then
//! served from the log: what a lagging member costs stops growing with
//! how long it lags.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::time::Duration;

use bytes::Bytes;
use groupwire_metrics::BucketMeter;
use groupwire_proto::Instant;

/// A connection: the relay's handle for one client connection, and the
/// client's id on the wire (`Welcome.client`, `Deliver.sender`,
/// `Membership.client`), which is where it turns into a bare `u64`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u64);

impl ConnId {
    /// The client id on the wire.
    pub fn client_id(self) -> u64 {
        self.0
    }
}

impl std::fmt::Display for ConnId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// What to do with a member whose queues keep timing out or overflow.
///
/// Litiu & Prakash §4.6: "If timeouts are violated on a queue frequently, a
/// policy of removing low-priority members from the system can be
/// implemented." The paper leaves the policy open; these are the choices.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum SlowConsumerPolicy {
    /// Serve the client last (priority 0) until its queues drain. At the
    /// memory cap the overflowing queue spills to the log: its frames are
    /// dropped from memory and read back from storage, page by page, from
    /// the oldest the client has not been sent. The client misses nothing
    /// and sees no resync; it only falls further behind.
    #[default]
    Demote,
    /// Drop the client's queue for the group and send it a fresh state
    /// transfer (checkpoint + log) instead of the backlog.
    Resync,
    /// Close the connection with `SLOW_CONSUMER`.
    Disconnect,
}

impl SlowConsumerPolicy {
    /// Every policy.
    pub const ALL: [Self; 3] = [Self::Demote, Self::Resync, Self::Disconnect];

    /// The policy's name as the CLI spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Demote => "demote",
            Self::Resync => "resync",
            Self::Disconnect => "disconnect",
        }
    }
}

impl std::str::FromStr for SlowConsumerPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| {
                format!("unknown slow-consumer policy {s:?} (demote, resync, disconnect)")
            })
    }
}

/// Scheduler knobs. Defaults follow the paper where it gives a value and
/// say so where it does not.
#[derive(Clone, Debug)]
pub struct SchedulerConfig {
    /// Every queue has the same priority, no burst demotion, no aging: the
    /// paper's non-QoS baseline (§5.1 a, §5.2, §5.3 c), for comparisons.
    pub equal_priorities: bool,
    /// Window over which a group's outgoing bandwidth is measured (§4.4
    /// "recent bandwidth usage"; the paper gives no value; default 1 s).
    pub burst_window: Duration,
    /// A group above this rate (bytes/s, fan-out included) is demoted
    /// (default 1 MiB/s: well above the paper's chat traffic, 5 × 200 B
    /// messages/s to 6 members, below its 40 KB image bursts).
    pub burst_high_bytes_per_sec: u64,
    /// A demoted group is restored below this rate (default 256 KiB/s;
    /// hysteresis so a group does not flap).
    pub burst_low_bytes_per_sec: u64,
    /// How far a burst lowers the group's instant priority (default 2).
    pub burst_penalty: u8,
    /// A non-empty queue not served for this long is aged (§4.6: "should be
    /// reasonably large"; default 2 s).
    pub aging_timeout: Duration,
    /// Agings of one client within [`slow_window`](Self::slow_window) that
    /// make it a slow consumer (default 3).
    pub slow_agings: u32,
    /// See [`slow_agings`](Self::slow_agings) (default 10 s).
    pub slow_window: Duration,
    /// What to do with slow consumers.
    pub slow_policy: SlowConsumerPolicy,
    /// Hard cap on one client's queued group messages, and separately on
    /// its queued replies (default 32 MiB each). Group messages crossing
    /// it apply the slow-consumer policy at once; replies crossing it
    /// disconnect the client (it floods requests and reads no answers).
    pub max_client_queue_bytes: usize,
    /// Under [`SlowConsumerPolicy::Demote`], a group queue holding more
    /// than this while its client does not read (its send window full or
    /// its writer backed up) spills to the log long before the cap
    /// (default 512 KiB, two default windows): the member is then served
    /// from the log page by page, and the core queues none of the group's
    /// updates for it until it has caught up with the head. Behind a
    /// state transfer the live frames go the same way
    /// (they are in the log too). A member that lags then costs one page
    /// of memory and nothing per update however long it lags, where a
    /// queue of shared frames costs a handle per update: 100 observers
    /// reading 20 KB/s behind a busy group's long state transfer held
    /// 160 MiB after 20 000 updates (`examples/relay_hostile.rs --kinds
    /// slow`), 89 MiB with this. 0 turns it off (the cap alone).
    pub spill_queue_bytes: usize,
    /// Cap on bytes handed to a client's socket writer and not yet written
    /// (default 256 KiB): bounds memory when a client credits bytes it
    /// never reads, or reads no replies. Each frame counts its length plus
    /// [`WRITER_FRAME_COST`], so the cap holds for many small frames (a
    /// flood of `Pong`s) as for few large ones.
    pub max_writer_bytes: u64,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            equal_priorities: false,
            burst_window: Duration::from_secs(1),
            burst_high_bytes_per_sec: 1 << 20,
            burst_low_bytes_per_sec: 256 << 10,
            burst_penalty: 2,
            aging_timeout: Duration::from_secs(2),
            slow_agings: 3,
            slow_window: Duration::from_secs(10),
            slow_policy: SlowConsumerPolicy::Demote,
            max_client_queue_bytes: 32 << 20,
            spill_queue_bytes: 512 << 10,
            max_writer_bytes: 256 << 10,
        }
    }
}

impl SchedulerConfig {
    /// The paper's non-QoS baseline: all priorities equal.
    pub fn equal_priorities() -> Self {
        Self {
            equal_priorities: true,
            ..Self::default()
        }
    }
}

/// A frame the driver must write to a client.
#[derive(Clone, Debug)]
#[must_use]
pub struct Transmit {
    /// The client.
    pub conn: ConnId,
    /// The encoded frame.
    pub frame: Bytes,
    /// Close the connection after writing this frame (a fatal error).
    pub close_after: bool,
}

/// A slow-consumer decision the protocol core must carry out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum SlowAction {
    /// Drop `group`'s queue of `conn` from memory and continue from the
    /// log at the oldest frame dropped ([`SlowConsumerPolicy::Demote`]).
    Spill {
        /// The client.
        conn: ConnId,
        /// The group.
        group: GroupId,
        /// The oldest frame not yet sent, if any.
        oldest: Option<Bytes>,
    },
    /// `group`'s queue of `conn` is blocked behind a state transfer and
    /// holds more than [`SchedulerConfig::spill_queue_bytes`] of live
    /// frames while its client does not read: drop those (they are in the
    /// log) and let the transfer go on to the head
    /// ([`SlowConsumerPolicy::Demote`]).
    Follow {
        /// The client.
        conn: ConnId,
        /// The group.
        group: GroupId,
    },
    /// Drop `group`'s queue of `conn` and resynchronize it.
    Resync {
        /// The client.
        conn: ConnId,
        /// The group.
        group: GroupId,
    },
    /// Close `conn`.
    Disconnect {
        /// The client.
        conn: ConnId,
    },
}

/// Scheduler counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SchedulerStats {
    /// Groups demoted for a burst (§4.4).
    pub burst_demotions: u64,
    /// Demoted groups restored.
    pub burst_restores: u64,
    /// Queues aged (§4.6).
    pub agings: u64,
    /// Clients demoted as slow consumers.
    pub slow_demotions: u64,
    /// Queues resynchronized as slow consumers.
    pub slow_resyncs: u64,
    /// Queues spilled to the log (policy `demote`): at the memory cap, or
    /// early ([`SchedulerConfig::spill_queue_bytes`]).
    pub slow_spills: u64,
    /// Clients disconnected as slow consumers.
    pub slow_disconnects: u64,
    /// Frames discarded (resync, disconnect, leave with a backlog).
    pub dropped_frames: u64,
    /// Frames currently queued.
    pub queued_frames: u64,
    /// Bytes currently queued.
    pub queued_bytes: u64,
    /// The most bytes ever queued at once.
    pub max_queued_bytes: u64,
}

/// One (member, group) queue as seen from outside.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueDepth {
    /// The client.
    pub conn: ConnId,
    /// The group.
    pub group: String,
    /// Frames waiting.
    pub frames: usize,
    /// Bytes waiting.
    pub bytes: usize,
    /// Its current priority.
    pub priority: u16,
}

/// Priority of a client's replies: above every queue, aged or not.
const CONTROL_PRIORITY: u16 = 1000;
/// A writer holding more than `max_writer_bytes / BACKED_UP_FRACTION`
/// (16 KiB at the default cap, a dozen Ethernet segments: more than a
/// reading client's writer keeps between two turns) is backed up.
const BACKED_UP_FRACTION: u64 = 16;
/// Priority of an aged queue: above every normal priority (group 7 +
/// member 3), below replies.
//= Litiu & Prakash §4.6
//# the instant priority of a queue is temporarily raised above the default
//# value when a queue is not served for a timeout interval.
const AGED_PRIORITY: u16 = 100;

/// Groups by name. Hashed (foldhash, seeded per process, so clients cannot
/// aim collisions): a delivery looks its group up several times, and an
/// ordered map of 1000 names spent that time comparing their prefixes.
/// Nothing iterates it where order shows.
pub(crate) type GroupMap<V> = HashMap<String, V, foldhash::fast::RandomState>;

/// A group's number inside the relay, assigned by the core when the group
/// is created and never reused while the process runs, so a group deleted
/// and created again under the same name starts afresh. The scheduler
/// knows groups only by it: the core looks a name up once per request,
/// and comparing or hashing long names with shared prefixes on every push
/// and pick was a visible share of the relay's CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct GroupId(pub(crate) u32);

/// Groups by id. Nothing iterates it where order shows.
pub(crate) type GroupIdMap<V> = HashMap<GroupId, V, foldhash::fast::RandomState>;

/// Clients by id, hashed: every frame of a fan-out looks its member up
/// here several times (push, pick, written), and in a `BTreeMap` of 1000
/// clients each lookup walked four nodes (about a tenth of the relay's
/// own CPU on `relay bench fanout --groups 1 --members 1000`). Where the
/// order shows (slow-consumer actions, queue depths), the ids are sorted
/// first; round robin between clients uses the ordered `levels` index.
pub(crate) type ConnIdMap<V> = HashMap<ConnId, V, foldhash::fast::RandomState>;

/// One (member, group) queue, as the scheduler sees it; the core names the
/// group for the public [`QueueDepth`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Depth {
    pub(crate) conn: ConnId,
    pub(crate) group: GroupId,
    pub(crate) frames: usize,
    pub(crate) bytes: usize,
    pub(crate) priority: u16,
}

/// The scheduler. See the module docs.
#[derive(Debug)]
pub(crate) struct Scheduler {
    cfg: SchedulerConfig,
    /// State of every group that exists, by id.
    groups: GroupIdMap<GroupState>,
    conns: ConnIdMap<ConnState>,
    /// Clients that can be served now, by the priority of what they would
    /// be served next. Kept up to date on every change to a client, so a
    /// pick looks at the top level only instead of scanning every client
    /// (which made fan-out to 1000 clients quadratic).
    levels: BTreeMap<u16, BTreeSet<ConnId>>,
    /// The client served last, for round robin between clients.
    cursor: ConnId,
    stats: SchedulerStats,
    /// No queue ages before this: the earliest aging deadline found by the
    /// last [`handle_timeout`](Self::handle_timeout) scan, lowered when a
    /// queue starts waiting. It may be early (a queue was served since),
    /// never late, so [`poll_timeout`](Self::poll_timeout) need not scan
    /// every queue on every turn of the driver.
    aging_deadline: Option<Instant>,
    /// Queues whose state-transfer page was sent out while more pages are
    /// due: the core loads the next page ([`take_refills`](Self::take_refills)).
    refills: Vec<(ConnId, GroupId)>,
    /// Bumped whenever a group's instant priority may have changed.
    epoch: u64,
}

#[derive(Debug)]
struct GroupState {
    default_priority: u8,
    demoted: bool,
    meter: BucketMeter,
}

/// What a frame at a client's writer costs beyond its bytes: its handle,
/// its allocation's header and its slot in the writer's channel.
pub const WRITER_FRAME_COST: u64 = 64;

#[derive(Debug)]
struct ConnState {
    window: u64,
    sent: u64,
    consumed: u64,
    writer_pending: u64,
    /// Lengths of the frames at the writer, oldest first (to charge
    /// [`WRITER_FRAME_COST`] each until written).
    writer_frames: VecDeque<u32>,
    /// Bytes written of the oldest frame in `writer_frames`.
    writer_partial: u64,
    priority_cap: u8,
    control: VecDeque<Bytes>,
    /// Ordered by id, the order of round robin between queues of equal
    /// priority. Only queues of groups that exist: queues of a removed
    /// group go with it.
    queues: BTreeMap<GroupId, Queue>,
    /// The group served last, for round robin within the client.
    rr_last: Option<GroupId>,
    agings: VecDeque<Instant>,
    demoted: bool,
    /// Everything queued for the client: replies and group queues.
    queued_bytes: usize,
    /// The replies' share of `queued_bytes`. The cap applies to replies
    /// and to group queues separately, so a publisher whose own group
    /// backlog overflows (and is resynchronized) is not disconnected for
    /// the acknowledgement queued just after it.
    control_bytes: usize,
    /// A fatal error is queued; the client goes away after it.
    closing: bool,
    /// Its entry in [`Scheduler::levels`], if it can be served.
    level: Option<u16>,
}

#[derive(Debug)]
struct Queue {
    /// Live frames.
    frames: VecDeque<Bytes>,
    /// The state transfer's current page: sent before `frames`, even while
    /// `blocked`.
    front: VecDeque<Bytes>,
    /// Bytes in `frames` and `front`.
    bytes: usize,
    member_priority: u8,
    /// A state transfer is under way: live frames wait until its last page
    /// is queued.
    blocked: bool,
    /// Last served, or when it last became non-empty.
    since: Instant,
    aged: bool,
}

impl Queue {
    /// Frames held, transfer page and live frames together.
    fn len(&self) -> usize {
        self.front.len() + self.frames.len()
    }

    /// Whether it has a frame to send now.
    fn ready(&self) -> bool {
        !self.front.is_empty() || (!self.blocked && !self.frames.is_empty())
    }
}

impl Scheduler {
    pub(crate) fn new(cfg: SchedulerConfig) -> Self {
        Self {
            cfg,
            groups: GroupIdMap::default(),
            conns: ConnIdMap::default(),
            levels: BTreeMap::new(),
            cursor: ConnId(0),
            stats: SchedulerStats::default(),
            aging_deadline: None,
            refills: Vec::new(),
            epoch: 0,
        }
    }

    pub(crate) fn stats(&self) -> SchedulerStats {
        self.stats.clone()
    }

    /// Adds a group. For an id that exists, only resets its priority and
    /// meter (its queues stay).
    pub(crate) fn add_group(&mut self, id: GroupId, default_priority: u8) {
        self.groups.insert(
            id,
            GroupState {
                default_priority,
                demoted: false,
                meter: BucketMeter::new(self.cfg.burst_window),
            },
        );
    }

    pub(crate) fn set_group_priority(&mut self, id: GroupId, priority: u8) {
        if let Some(g) = self.groups.get_mut(&id) {
            g.default_priority = priority;
        }
        self.epoch += 1;
        self.refresh_all();
    }

    /// Forgets a group, with any queues and refills left for it (the core
    /// removes its members' queues first; whatever remains is dropped).
    pub(crate) fn remove_group(&mut self, id: GroupId) {
        if self.groups.remove(&id).is_some() {
            self.refills.retain(|&(_, g)| g != id);
            let (mut frames, mut bytes) = (0, 0);
            #[expect(
                clippy::iter_over_hash_type,
                reason = "each client's queue is removed on its own; only sums leave the loop"
            )]
            for c in self.conns.values_mut() {
                if let Some(q) = c.queues.remove(&id) {
                    c.queued_bytes -= q.bytes;
                    frames += q.len();
                    bytes += q.bytes;
                }
            }
            self.forget(frames, bytes);
        }
        self.epoch += 1;
        self.refresh_all();
    }

    /// Bytes waiting in every client's queues.
    pub(crate) fn queued_bytes(&self) -> u64 {
        self.stats.queued_bytes
    }

    /// Changes whenever a group's instant priority may have changed.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The group's instant priority (§4.4), or `None` for an unknown group.
    pub(crate) fn instant_priority(&self, id: GroupId) -> Option<u8> {
        self.groups.get(&id).map(|g| self.group_priority(g))
    }

    pub(crate) fn add_conn(&mut self, conn: ConnId, window: u64, priority_cap: u8) {
        self.conns.insert(
            conn,
            ConnState {
                window,
                sent: 0,
                consumed: 0,
                writer_pending: 0,
                writer_frames: VecDeque::new(),
                writer_partial: 0,
                priority_cap,
                control: VecDeque::new(),
                queues: BTreeMap::new(),
                rr_last: None,
                agings: VecDeque::new(),
                demoted: false,
                queued_bytes: 0,
                control_bytes: 0,
                closing: false,
                level: None,
            },
        );
    }

    pub(crate) fn set_conn_limits(&mut self, conn: ConnId, window: u64, priority_cap: u8) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.window = window;
            c.priority_cap = priority_cap;
        }
        self.refresh(conn);
    }

    /// Forgets a client at once (it disconnected); its backlog is dropped.
    pub(crate) fn remove_conn(&mut self, conn: ConnId) {
        if let Some(c) = self.conns.remove(&conn) {
            self.unlevel(conn, c.level);
            let frames = c.control.len() + c.queues.values().map(|q| q.len()).sum::<usize>();
            self.forget(frames, c.queued_bytes);
        }
    }

    /// Drops a client's queues and sends `last` (a fatal error) before the
    /// driver closes it ([`Transmit::close_after`]).
    pub(crate) fn close(&mut self, conn: ConnId, last: Bytes) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let frames = c.control.len() + c.queues.values().map(|q| q.len()).sum::<usize>();
        let bytes = c.queued_bytes;
        c.control.clear();
        c.queues.clear();
        c.queued_bytes = last.len();
        c.control_bytes = last.len();
        c.control.push_back(last.clone());
        c.closing = true;
        self.forget(frames, bytes);
        self.account_push(last.len());
        self.refresh(conn);
    }

    pub(crate) fn add_queue(
        &mut self,
        conn: ConnId,
        id: GroupId,
        member_priority: u8,
        now: Instant,
    ) {
        // A queue of an unknown group would never be served.
        if !self.groups.contains_key(&id) {
            return;
        }
        if let Some(c) = self.conns.get_mut(&conn) {
            c.queues.insert(
                id,
                Queue {
                    frames: VecDeque::new(),
                    front: VecDeque::new(),
                    bytes: 0,
                    member_priority,
                    blocked: true,
                    since: now,
                    aged: false,
                },
            );
        }
    }

    pub(crate) fn set_member_priority(&mut self, conn: ConnId, id: GroupId, member_priority: u8) {
        if let Some(q) = self
            .conns
            .get_mut(&conn)
            .and_then(|c| c.queues.get_mut(&id))
        {
            q.member_priority = member_priority;
        }
        self.refresh(conn);
    }

    pub(crate) fn remove_queue(&mut self, conn: ConnId, id: GroupId) {
        if let Some(c) = self.conns.get_mut(&conn)
            && let Some(q) = c.queues.remove(&id)
        {
            c.queued_bytes -= q.bytes;
            self.forget(q.len(), q.bytes);
        }
        self.refresh(conn);
    }

    /// Drops the backlog of `group` for `conn`, but the live frames for
    /// which `keep` holds (they stay queued, in order, behind the
    /// transfer), and blocks the queue until the last page of a
    /// [`transfer`](Self::transfer). Returns the frames dropped.
    pub(crate) fn reset_queue(
        &mut self,
        conn: ConnId,
        id: GroupId,
        keep: impl Fn(&Bytes) -> bool,
    ) -> usize {
        self.drop_frames(conn, id, true, keep)
    }

    /// Queues one page of a state transfer: it goes before everything
    /// queued live since the transfer started. With `last`, the transfer
    /// ends and live frames follow; otherwise, once the page is sent, the
    /// queue is listed for [`take_refills`](Self::take_refills).
    pub(crate) fn transfer(
        &mut self,
        now: Instant,
        conn: ConnId,
        id: GroupId,
        page: Vec<Bytes>,
        last: bool,
    ) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let Some(q) = c.queues.get_mut(&id) else {
            return;
        };
        let bytes: usize = page.iter().map(Bytes::len).sum();
        let n = page.len();
        q.front.extend(page);
        if q.front.is_empty() && !last {
            // Nothing to wait for: ask for the next page at once.
            self.refills.push((conn, id));
        }
        q.bytes += bytes;
        q.blocked = !last;
        q.since = now;
        let due = now + self.cfg.aging_timeout;
        self.aging_deadline = Some(self.aging_deadline.map_or(due, |d| d.min(due)));
        c.queued_bytes += bytes;
        self.account_push_n(n, bytes);
        self.refresh(conn);
    }

    /// Queues `frame` for (conn, group). The group's bandwidth meter counts
    /// it (§4.4). Returns a slow-consumer action if the client's cap is hit.
    pub(crate) fn push(
        &mut self,
        now: Instant,
        conn: ConnId,
        id: GroupId,
        frame: Bytes,
    ) -> Option<SlowAction> {
        let len = frame.len();
        let c = self.conns.get_mut(&conn)?;
        let stuck =
            c.sent - c.consumed >= c.window || Self::backed_up(&self.cfg, Self::at_writer(c));
        let q = c.queues.get_mut(&id)?;
        if q.frames.is_empty() {
            q.since = now;
            let due = now + self.cfg.aging_timeout;
            self.aging_deadline = Some(self.aging_deadline.map_or(due, |d| d.min(due)));
        }
        q.frames.push_back(frame);
        q.bytes += len;
        c.queued_bytes += len;
        // Far behind, and only while the client is not reading (its window
        // is full or its writer backed up): a burst queued in one turn for
        // a client that reads stays in memory, and so do the live frames
        // behind a fast joiner's transfer, which then catches up at its
        // own speed, not at the speed of reading the log.
        let lagging = self.cfg.slow_policy == SlowConsumerPolicy::Demote
            && self.cfg.spill_queue_bytes > 0
            && q.bytes > self.cfg.spill_queue_bytes
            && stuck;
        let over = c.queued_bytes - c.control_bytes > self.cfg.max_client_queue_bytes
            || (lagging && !q.blocked && q.front.is_empty());
        let follow = !over && lagging && q.blocked;
        self.account_push(len);
        let mut burst_changed = false;
        if !self.cfg.equal_priorities
            && let Some(g) = self.groups.get_mut(&id)
        {
            g.meter.record(now, len as u64);
            burst_changed = Self::update_burst(&self.cfg, &mut self.stats, g, now);
        }
        if burst_changed {
            self.epoch += 1;
            self.refresh_all();
        } else {
            self.refresh(conn);
        }
        if over {
            return Some(self.overflow(conn, id));
        }
        if follow {
            self.stats.slow_spills += 1;
            return Some(SlowAction::Follow { conn, group: id });
        }
        None
    }

    /// Drops the live frames of `group` for `conn` (not the state
    /// transfer's page) except those for which `keep` holds. Returns the
    /// frames dropped.
    pub(crate) fn drop_live(
        &mut self,
        conn: ConnId,
        id: GroupId,
        keep: impl Fn(&Bytes) -> bool,
    ) -> usize {
        self.drop_frames(conn, id, false, keep)
    }

    /// Drops (conn, group)'s live frames but those `keep` holds for, and
    /// with `reset` its transfer page too, blocking the queue until a
    /// transfer's last page. Returns the frames dropped.
    fn drop_frames(
        &mut self,
        conn: ConnId,
        id: GroupId,
        reset: bool,
        keep: impl Fn(&Bytes) -> bool,
    ) -> usize {
        let Some(c) = self.conns.get_mut(&conn) else {
            return 0;
        };
        let Some(q) = c.queues.get_mut(&id) else {
            return 0;
        };
        let (held, before) = (q.len(), q.bytes);
        if reset {
            q.front.clear();
            q.blocked = true;
            q.aged = false;
        }
        q.frames.retain(|f| keep(f));
        q.bytes = q.front.iter().chain(&q.frames).map(Bytes::len).sum();
        let (frames, bytes) = (held - q.len(), before - q.bytes);
        c.queued_bytes -= bytes;
        self.forget(frames, bytes);
        self.refresh(conn);
        frames
    }

    /// Queues a reply for `conn` (served before its group queues).
    pub(crate) fn push_control(&mut self, conn: ConnId, frame: Bytes) -> Option<SlowAction> {
        let len = frame.len();
        let c = self.conns.get_mut(&conn)?;
        if c.closing {
            return None;
        }
        c.control.push_back(frame);
        c.queued_bytes += len;
        c.control_bytes += len;
        let over = c.control_bytes > self.cfg.max_client_queue_bytes;
        self.account_push(len);
        self.refresh(conn);
        if over {
            // Replies cannot be dropped and resent: a client that floods
            // requests without reading the answers is disconnected.
            self.stats.slow_disconnects += 1;
            return Some(SlowAction::Disconnect { conn });
        }
        None
    }

    /// Bytes of replies queued for `conn` and not yet handed to its writer
    /// (0 for an unknown client). The driver stops reading a client's
    /// input while this is high: only the client reading its socket
    /// drains it.
    pub(crate) fn reply_backlog(&self, conn: ConnId) -> usize {
        self.conns.get(&conn).map_or(0, |c| c.control_bytes)
    }

    /// The client reports `consumed` bytes (cumulative). `Err` if that is
    /// more than was ever sent (a protocol violation).
    pub(crate) fn credit(&mut self, conn: ConnId, consumed: u64) -> Result<(), ()> {
        let Some(c) = self.conns.get_mut(&conn) else {
            return Ok(());
        };
        if consumed > c.sent {
            return Err(());
        }
        c.consumed = c.consumed.max(consumed);
        self.refresh(conn);
        Ok(())
    }

    /// Whether `conn` has replies waiting while its writer is backed up
    /// (more than a sixteenth of [`SchedulerConfig::max_writer_bytes`] not
    /// yet written to its socket): it is not reading what it asked for.
    pub(crate) fn not_reading_replies(&self, conn: ConnId) -> bool {
        self.conns
            .get(&conn)
            .is_some_and(|c| c.control_bytes > 0 && Self::backed_up(&self.cfg, Self::at_writer(c)))
    }

    /// Whether `conn` keeps up: its send window has room, its writer is
    /// not backed up and no fatal error is queued for it. One that does not
    /// could take no more now anyway, so the driver serves it at a lower
    /// OS priority (`server/place.rs`).
    pub(crate) fn keeps_up(&self, conn: ConnId) -> bool {
        self.conns.get(&conn).is_some_and(|c| {
            !c.closing
                && c.sent - c.consumed < c.window
                && !Self::backed_up(&self.cfg, Self::at_writer(c))
        })
    }

    /// `conn`'s send window, if it is known.
    pub(crate) fn window(&self, conn: ConnId) -> Option<u64> {
        self.conns.get(&conn).map(|c| c.window)
    }

    /// Queues that sent their state-transfer page and wait for the next.
    pub(crate) fn take_refills(&mut self) -> Vec<(ConnId, GroupId)> {
        std::mem::take(&mut self.refills)
    }

    /// The driver wrote `bytes` of `conn`'s frames to its socket.
    pub(crate) fn written(&mut self, conn: ConnId, bytes: u64) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.writer_pending = c.writer_pending.saturating_sub(bytes);
            let mut left = c.writer_partial + bytes;
            while let Some(&len) = c.writer_frames.front() {
                if left < u64::from(len) {
                    break;
                }
                left -= u64::from(len);
                c.writer_frames.pop_front();
            }
            c.writer_partial = if c.writer_frames.is_empty() { 0 } else { left };
        }
        self.refresh(conn);
    }

    /// The next frame to write, in priority order. Call until `None`
    /// after every input; a `None` may become `Some` after any input or
    /// [`handle_timeout`](Self::handle_timeout).
    pub(crate) fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
        // Round robin between clients: among those with the highest
        // priority, the first after the one served last.
        let (_, top) = self.levels.iter().next_back()?;
        let id = *top
            .range(ConnId(self.cursor.0.saturating_add(1))..)
            .next()
            .or_else(|| top.iter().next())
            .expect("levels holds no empty sets");
        self.cursor = id;
        let c = self.conns.get_mut(&id).expect("chosen from the map");
        let frame = if let Some(f) = c.control.pop_front() {
            c.control_bytes -= f.len();
            f
        } else {
            let (_, group) = Self::best_queue_of(&self.cfg, &self.groups, c)
                .expect("chosen because it has a ready queue");
            let q = c.queues.get_mut(&group).expect("best_queue names a queue");
            let f = match q.front.pop_front() {
                Some(f) => {
                    if q.front.is_empty() && q.blocked {
                        self.refills.push((id, group));
                    }
                    f
                }
                None => q.frames.pop_front().expect("ready queues are non-empty"),
            };
            q.bytes -= f.len();
            //= Litiu & Prakash §4.6
            //# A queue which has its priority raised due to starvation is
            //# brought back to its default priority after the corresponding
            //# thread gets a chance to send some data from the queue.
            q.aged = false;
            q.since = now;
            c.rr_last = Some(group);
            f
        };
        let len = frame.len();
        c.queued_bytes -= len;
        c.sent += len as u64;
        c.writer_pending += len as u64;
        c.writer_frames
            .push_back(u32::try_from(len).unwrap_or(u32::MAX));
        if c.demoted && c.queued_bytes == 0 {
            c.demoted = false;
        }
        let close_after = c.closing && c.control.is_empty();
        if close_after {
            let level = c.level;
            self.conns.remove(&id);
            self.unlevel(id, level);
        } else {
            self.refresh(id);
        }
        self.stats.queued_frames -= 1;
        self.stats.queued_bytes -= len as u64;
        Some(Transmit {
            conn: id,
            frame,
            close_after,
        })
    }

    /// Re-evaluates burst demotion and aging. Early or repeated calls are
    /// harmless. Returns slow-consumer actions for the core to carry out.
    pub(crate) fn handle_timeout(&mut self, now: Instant) -> Vec<SlowAction> {
        let mut actions = Vec::new();
        if self.cfg.equal_priorities {
            return actions;
        }
        #[expect(
            clippy::iter_over_hash_type,
            reason = "each group is updated on its own; only the count of changes leaves the loop"
        )]
        for g in self.groups.values_mut() {
            if Self::update_burst(&self.cfg, &mut self.stats, g, now) {
                self.epoch += 1;
            }
        }
        // In id order: the actions come out in it.
        let mut conns: Vec<ConnId> = self.conns.keys().copied().collect();
        conns.sort_unstable();
        for id in conns {
            let c = self.conns.get_mut(&id).expect("listed above");
            let mut aged_groups = Vec::new();
            for (&group, q) in &mut c.queues {
                // An aged queue still not served a timeout later times out
                // again: that is what makes a consumer "slow".
                if q.ready() && now.saturating_duration_since(q.since) >= self.cfg.aging_timeout {
                    q.aged = true;
                    q.since = now;
                    aged_groups.push(group);
                }
            }
            for group in aged_groups {
                self.stats.agings += 1;
                c.agings.push_back(now);
                while c
                    .agings
                    .front()
                    .is_some_and(|t| now.saturating_duration_since(*t) > self.cfg.slow_window)
                {
                    c.agings.pop_front();
                }
                if c.agings.len() >= self.cfg.slow_agings as usize {
                    c.agings.clear();
                    match self.cfg.slow_policy {
                        SlowConsumerPolicy::Demote => {
                            if !c.demoted {
                                c.demoted = true;
                                self.stats.slow_demotions += 1;
                            }
                        }
                        SlowConsumerPolicy::Resync => {
                            self.stats.slow_resyncs += 1;
                            actions.push(SlowAction::Resync { conn: id, group });
                        }
                        SlowConsumerPolicy::Disconnect => {
                            self.stats.slow_disconnects += 1;
                            actions.push(SlowAction::Disconnect { conn: id });
                            break;
                        }
                    }
                }
            }
        }
        // Aging, demotions and restores move many clients at once.
        self.refresh_all();
        self.aging_deadline = self
            .conns
            .values()
            .flat_map(|c| c.queues.values())
            .filter(|q| q.ready())
            .map(|q| q.since + self.cfg.aging_timeout)
            .min();
        actions
    }

    /// When to call [`handle_timeout`](Self::handle_timeout) next: the
    /// earliest aging deadline, and while a group is demoted, a fraction of
    /// the burst window so it is restored promptly.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        if self.cfg.equal_priorities {
            return None;
        }
        let mut next: Option<Instant> = self.aging_deadline;
        let mut earliest = |t: Instant| {
            next = Some(next.map_or(t, |n| n.min(t)));
        };
        // Skip the scan of every group unless one may be demoted.
        if self.stats.burst_demotions > self.stats.burst_restores {
            #[expect(
                clippy::iter_over_hash_type,
                reason = "a minimum: order does not matter"
            )]
            for g in self.groups.values() {
                if g.demoted {
                    earliest(g.meter.last() + self.cfg.burst_window / 8);
                }
            }
        }
        next
    }

    /// Every queue, by client and group id.
    pub(crate) fn depths(&self) -> Vec<Depth> {
        let mut out = Vec::new();
        let mut conns: Vec<(&ConnId, &ConnState)> = self.conns.iter().collect();
        conns.sort_unstable_by_key(|(id, _)| **id);
        for (&conn, c) in conns {
            for (&id, q) in &c.queues {
                let g = self.groups.get(&id).expect("queues go with their group");
                out.push(Depth {
                    conn,
                    group: id,
                    frames: q.len(),
                    bytes: q.bytes,
                    priority: self.queue_priority(c, q, g),
                });
            }
        }
        out
    }

    /// Whether `conn`'s queue for `group` is demoted for slowness.
    #[cfg(test)]
    pub(crate) fn is_demoted(&self, conn: ConnId) -> bool {
        self.conns.get(&conn).is_some_and(|c| c.demoted)
    }

    // ---- helpers ----

    fn group_priority(&self, g: &GroupState) -> u8 {
        if g.demoted {
            g.default_priority.saturating_sub(self.cfg.burst_penalty)
        } else {
            g.default_priority
        }
    }

    fn queue_priority(&self, c: &ConnState, q: &Queue, g: &GroupState) -> u16 {
        priority_of(&self.cfg, c, q, g)
    }

    /// The priority `c` would be served at now, or `None` if it cannot be
    /// served (nothing ready, window closed or writer backed up).
    fn serve_priority(
        cfg: &SchedulerConfig,
        groups: &GroupIdMap<GroupState>,
        c: &ConnState,
    ) -> Option<u16> {
        let at_writer = Self::at_writer(c);
        if at_writer >= cfg.max_writer_bytes {
            None
        } else if !c.control.is_empty() {
            // A reply handed to a writer that already holds a backlog waits
            // behind it whatever its rank here; ranked first it would only
            // hold up other clients' frames. So replies go first while the
            // client reads them, and last once its socket is full (a client
            // that sends requests and reads nothing: 100 of them put every
            // member's delivery behind their Pongs for seconds).
            if Self::backed_up(cfg, at_writer) {
                Some(0)
            } else {
                Some(CONTROL_PRIORITY)
            }
        } else if c.sent - c.consumed < c.window {
            Self::best_queue_of(cfg, groups, c).map(|(p, _)| p)
        } else {
            None
        }
    }

    /// What `c`'s writer holds: bytes not yet written, plus
    /// [`WRITER_FRAME_COST`] per frame.
    fn at_writer(c: &ConnState) -> u64 {
        c.writer_pending + WRITER_FRAME_COST * c.writer_frames.len() as u64
    }

    /// Whether a writer holding `at_writer` is backed up: the socket took
    /// less than it was handed, so the client is not reading (on loopback
    /// and LANs a reading client's writer empties within a turn).
    fn backed_up(cfg: &SchedulerConfig, at_writer: u64) -> bool {
        at_writer >= cfg.max_writer_bytes / BACKED_UP_FRACTION
    }

    /// Moves `conn` to the level it belongs to now. Call after any change
    /// to the client, its queues or their priorities.
    fn refresh(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let new = Self::serve_priority(&self.cfg, &self.groups, c);
        if new == c.level {
            return;
        }
        let old = std::mem::replace(&mut c.level, new);
        self.unlevel(conn, old);
        if let Some(p) = new {
            self.levels.entry(p).or_default().insert(conn);
        }
    }

    /// [`refresh`](Self::refresh) for every client (group-wide changes).
    fn refresh_all(&mut self) {
        // Each client is refreshed on its own: order does not show.
        let ids: Vec<ConnId> = self.conns.keys().copied().collect();
        for id in ids {
            self.refresh(id);
        }
    }

    fn unlevel(&mut self, conn: ConnId, level: Option<u16>) {
        if let Some(p) = level
            && let Some(set) = self.levels.get_mut(&p)
        {
            set.remove(&conn);
            if set.is_empty() {
                self.levels.remove(&p);
            }
        }
    }

    //= Litiu & Prakash §4.5
    //# Each thread uses a round-robin policy within the queues of the same
    //# priority to deliver messages to its client.
    /// The ready queue to serve next and its priority.
    fn best_queue_of(
        cfg: &SchedulerConfig,
        groups: &GroupIdMap<GroupState>,
        c: &ConnState,
    ) -> Option<(u16, GroupId)> {
        use std::ops::Bound::{Excluded, Unbounded};
        if c.queues.len() == 1 {
            // The common case (one group per client): no round robin.
            let (&id, q) = c.queues.iter().next().expect("one queue");
            if !q.ready() {
                return None;
            }
            let g = groups.get(&id)?;
            return Some((priority_of(cfg, c, q, g), id));
        }
        let mut best: Option<(u16, GroupId)> = None;
        // Queues after the one served last, then from the start: the first
        // of the highest priority wins, which is round robin among equals.
        let (after, before) = match c.rr_last {
            Some(last) => (
                c.queues.range((Excluded(last), Unbounded)),
                c.queues.range(..=last),
            ),
            None => (c.queues.range(..), c.queues.range(..GroupId(0))),
        };
        for (&id, q) in after.chain(before) {
            if !q.ready() {
                continue;
            }
            let Some(g) = groups.get(&id) else { continue };
            let p = priority_of(cfg, c, q, g);
            if best.is_none_or(|(bp, _)| p > bp) {
                best = Some((p, id));
            }
        }
        best
    }

    fn update_burst(
        cfg: &SchedulerConfig,
        stats: &mut SchedulerStats,
        g: &mut GroupState,
        now: Instant,
    ) -> bool {
        //= Litiu & Prakash §4.6
        //# To insulate low-bandwidth communication from bursty traffic in
        //# another group, the instant priority of the group where the bursty
        //# traffic occurred is lowered. [...] The priority is raised when the
        //# recent bandwidth usage goes down.
        let rate = g.meter.rate(now);
        if !g.demoted && rate > cfg.burst_high_bytes_per_sec {
            g.demoted = true;
            stats.burst_demotions += 1;
            true
        } else if g.demoted && rate < cfg.burst_low_bytes_per_sec {
            g.demoted = false;
            stats.burst_restores += 1;
            true
        } else {
            false
        }
    }

    fn overflow(&mut self, conn: ConnId, group: GroupId) -> SlowAction {
        match self.cfg.slow_policy {
            SlowConsumerPolicy::Disconnect => {
                self.stats.slow_disconnects += 1;
                SlowAction::Disconnect { conn }
            }
            SlowConsumerPolicy::Demote => {
                self.stats.slow_spills += 1;
                let oldest = self
                    .conns
                    .get(&conn)
                    .and_then(|c| c.queues.get(&group))
                    .and_then(|q| q.front.front().or(q.frames.front()).cloned());
                SlowAction::Spill {
                    conn,
                    group,
                    oldest,
                }
            }
            SlowConsumerPolicy::Resync => {
                self.stats.slow_resyncs += 1;
                SlowAction::Resync { conn, group }
            }
        }
    }

    fn account_push(&mut self, len: usize) {
        self.account_push_n(1, len);
    }

    fn account_push_n(&mut self, frames: usize, len: usize) {
        self.stats.queued_frames += frames as u64;
        self.stats.queued_bytes += len as u64;
        self.stats.max_queued_bytes = self.stats.max_queued_bytes.max(self.stats.queued_bytes);
    }

    fn forget(&mut self, frames: usize, bytes: usize) {
        self.stats.dropped_frames += frames as u64;
        self.stats.queued_frames -= frames as u64;
        self.stats.queued_bytes -= bytes as u64;
    }
}

//= Litiu & Prakash §4.5
//# Each message queue is dynamically assigned a priority, based on the
//# sum of the current priorities of the group and the receiver
//# associated with the queue.
fn priority_of(cfg: &SchedulerConfig, c: &ConnState, q: &Queue, g: &GroupState) -> u16 {
    if cfg.equal_priorities {
        return 0;
    }
    if q.aged {
        return AGED_PRIORITY;
    }
    if c.demoted {
        return 0;
    }
    let group = if g.demoted {
        g.default_priority.saturating_sub(cfg.burst_penalty)
    } else {
        g.default_priority
    };
    u16::from((group + q.member_priority).min(c.priority_cap))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The tests name groups; the core would number them.
    fn id(name: &str) -> GroupId {
        const NAMES: [&str; 10] = [
            "g", "a", "b", "c", "chat", "bulk", "hi", "lo", "img", "nope",
        ];
        let i = NAMES
            .iter()
            .position(|n| *n == name)
            .expect("a test group name");
        GroupId(i as u32)
    }

    /// The selection before the priority index: scan every client in
    /// round-robin order, keep the first of the highest priority.
    fn naive_pick(s: &Scheduler) -> Option<ConnId> {
        let mut best: Option<(u16, ConnId)> = None;
        let mut ids: Vec<ConnId> = s.conns.keys().copied().collect();
        ids.sort_unstable();
        let split = ids.partition_point(|&id| id <= s.cursor);
        let order = ids[split..]
            .iter()
            .chain(&ids[..split])
            .map(|id| (id, &s.conns[id]));
        for (&id, c) in order {
            if let Some(p) = Scheduler::serve_priority(&s.cfg, &s.groups, c)
                && best.is_none_or(|(bp, _)| p > bp)
            {
                best = Some((p, id));
            }
        }
        best.map(|(_, id)| id)
    }

    proptest! {
        #[test]
        fn indexed_picks_match_a_scan_of_every_client(
            ops in prop::collection::vec((0u8..8, 1u64..6, 0usize..3, 1usize..200), 1..300)
        ) {
            let cfg = SchedulerConfig {
                aging_timeout: Duration::from_millis(300),
                max_writer_bytes: 500,
                burst_high_bytes_per_sec: 4000,
                burst_low_bytes_per_sec: 1000,
                ..SchedulerConfig::default()
            };
            let groups = ["a", "b", "c"];
            let mut s = Scheduler::new(cfg);
            s.add_group(id("a"), 6);
            s.add_group(id("b"), 4);
            s.add_group(id("c"), 2);
            for c in 1..=5u64 {
                s.add_conn(ConnId(c), 600, u8::MAX);
                for (i, g) in groups.iter().enumerate() {
                    if (c as usize + i) % 3 != 0 {
                        s.add_queue(ConnId(c), id(g), (c % 4) as u8, Instant::ZERO);
                        s.transfer(Instant::ZERO, ConnId(c), id(g), Vec::new(), true);
                    }
                }
            }
            let mut now = Instant::ZERO;
            for (op, conn, g, n) in ops {
                let group = groups[g];
                match op {
                    0 | 1 => { let _ = s.push(now, ConnId(conn), id(group), f(1, n)); }
                    2 => { let _ = s.push_control(ConnId(conn), f(2, 10)); }
                    3 => {
                        let sent = s.conns.get(&ConnId(conn)).map_or(0, |c| c.sent);
                        let _ = s.credit(ConnId(conn), sent);
                    }
                    4 => s.written(ConnId(conn), n as u64 * 4),
                    5 => {
                        now += Duration::from_millis(n as u64 * 5);
                        let _ = s.handle_timeout(now);
                    }
                    6 => s.set_member_priority(ConnId(conn), id(group), (n % 4) as u8),
                    _ => {
                        let want = naive_pick(&s);
                        let got = s.poll_transmit(now).map(|t| t.conn);
                        prop_assert_eq!(got, want);
                    }
                }
                #[expect(clippy::iter_over_hash_type, reason = "each client is checked on its own")]
                for (&id, c) in &s.conns {
                    let fresh = Scheduler::serve_priority(&s.cfg, &s.groups, c);
                    prop_assert_eq!(c.level, fresh, "client {}", id);
                }
                // The cached aging deadline may be early, never late.
                let exact = s
                    .conns
                    .values()
                    .flat_map(|c| c.queues.values())
                    .filter(|q| q.ready())
                    .map(|q| q.since + s.cfg.aging_timeout)
                    .min();
                if let Some(e) = exact {
                    prop_assert!(s.poll_timeout().is_some_and(|t| t <= e));
                }
            }
        }
    }

    fn f(tag: u8, len: usize) -> Bytes {
        let mut v = vec![tag; len.max(1)];
        v[0] = tag;
        Bytes::from(v)
    }

    /// A scheduler with clients 1..=n, unlimited windows, all queues unblocked.
    fn sched(
        cfg: SchedulerConfig,
        groups: &[(&str, u8)],
        members: &[(ConnId, &str, u8)],
    ) -> Scheduler {
        let mut s = Scheduler::new(cfg);
        for (g, p) in groups {
            s.add_group(id(g), *p);
        }
        for (c, g, p) in members {
            if !s.conns.contains_key(c) {
                s.add_conn(*c, u64::MAX / 2, u8::MAX);
            }
            s.add_queue(*c, id(g), *p, Instant::ZERO);
            s.transfer(Instant::ZERO, *c, id(g), Vec::new(), true);
        }
        s
    }

    /// Serves everything: (connection number, first byte) per frame.
    fn drain(s: &mut Scheduler, now: Instant) -> Vec<(u64, u8)> {
        let mut out = Vec::new();
        while let Some(t) = s.poll_transmit(now) {
            s.written(t.conn, t.frame.len() as u64);
            out.push((t.conn.0, t.frame[0]));
        }
        out
    }

    #[test]
    fn higher_priority_queues_go_first_across_clients_and_keep_their_order() {
        let mut s = sched(
            SchedulerConfig::default(),
            &[("chat", 6), ("bulk", 2)],
            &[
                (ConnId(1), "bulk", 3),
                (ConnId(2), "chat", 1),
                (ConnId(2), "bulk", 3),
            ],
        );
        let t = Instant::ZERO;
        for i in 0..3 {
            let _ = s.push(t, ConnId(1), id("bulk"), f(10 + i, 10));
            let _ = s.push(t, ConnId(2), id("bulk"), f(20 + i, 10));
        }
        let _ = s.push(t, ConnId(2), id("chat"), f(1, 10));
        let _ = s.push(t, ConnId(2), id("chat"), f(2, 10));
        let out = drain(&mut s, t);
        // chat (6 + 1 = 7) beats bulk (2 + 3 = 5): both chat frames first, in order.
        assert_eq!(&out[..2], &[(2, 1), (2, 2)]);
        // Then bulk, round robin between the two clients, each in order.
        let c1: Vec<u8> = out
            .iter()
            .filter(|(c, _)| *c == 1)
            .map(|(_, t)| *t)
            .collect();
        assert_eq!(c1, vec![10, 11, 12]);
        let alternation: Vec<u64> = out[2..].iter().map(|(c, _)| *c).collect();
        assert_eq!(alternation, vec![1, 2, 1, 2, 1, 2]);
    }

    #[test]
    fn equal_queues_of_one_client_are_served_round_robin() {
        let mut s = sched(
            SchedulerConfig::default(),
            &[("a", 4), ("b", 4)],
            &[(ConnId(1), "a", 2), (ConnId(1), "b", 2)],
        );
        for i in 0..3 {
            let _ = s.push(Instant::ZERO, ConnId(1), id("a"), f(i, 5));
            let _ = s.push(Instant::ZERO, ConnId(1), id("b"), f(100 + i, 5));
        }
        let tags: Vec<u8> = drain(&mut s, Instant::ZERO)
            .into_iter()
            .map(|(_, t)| t)
            .collect();
        assert_eq!(tags, vec![0, 100, 1, 101, 2, 102]);
    }

    #[test]
    fn equal_priorities_mode_ignores_priorities() {
        let mut s = sched(
            SchedulerConfig::equal_priorities(),
            &[("hi", 7), ("lo", 0)],
            &[(ConnId(1), "lo", 0), (ConnId(2), "hi", 3)],
        );
        for i in 0..2 {
            let _ = s.push(Instant::ZERO, ConnId(1), id("lo"), f(i, 5));
            let _ = s.push(Instant::ZERO, ConnId(2), id("hi"), f(100 + i, 5));
        }
        let conns: Vec<u64> = drain(&mut s, Instant::ZERO)
            .into_iter()
            .map(|(c, _)| c)
            .collect();
        assert_eq!(conns, vec![1, 2, 1, 2]);
        assert_eq!(s.poll_timeout(), None);
    }

    #[test]
    fn the_send_window_holds_frames_until_credit() {
        let mut s = sched(SchedulerConfig::default(), &[("g", 4)], &[]);
        s.add_conn(ConnId(1), 100, u8::MAX);
        s.add_queue(ConnId(1), id("g"), 3, Instant::ZERO);
        s.transfer(Instant::ZERO, ConnId(1), id("g"), Vec::new(), true);
        for i in 0..4 {
            let _ = s.push(Instant::ZERO, ConnId(1), id("g"), f(i, 60));
        }
        assert_eq!(
            drain(&mut s, Instant::ZERO).len(),
            2,
            "60 + 60 fills a 100-byte window"
        );
        assert!(
            s.credit(ConnId(1), 1000).is_err(),
            "credit beyond what was sent"
        );
        s.credit(ConnId(1), 120).expect("credit");
        assert_eq!(drain(&mut s, Instant::ZERO).len(), 2);
        // Replies are not held by the window.
        let _ = s.push_control(ConnId(1), f(9, 10));
        assert_eq!(drain(&mut s, Instant::ZERO), vec![(1, 9)]);
    }

    /// A client whose writer is backed up (it reads nothing) has its
    /// replies served after other clients' group frames, and is reported
    /// as not reading them; once its writer drains, replies go first again.
    #[test]
    fn replies_of_a_client_that_does_not_read_wait_behind_other_frames() {
        let mut s = sched(
            SchedulerConfig::default(),
            &[("g", 4)],
            &[(ConnId(1), "g", 0), (ConnId(2), "g", 0)],
        );
        // Client 2 is handed 16 KiB it does not read (nothing is written).
        let cap = s.cfg.max_writer_bytes / BACKED_UP_FRACTION;
        let _ = s.push(Instant::ZERO, ConnId(2), id("g"), f(1, cap as usize));
        assert!(s.poll_transmit(Instant::ZERO).is_some());
        let _ = s.push_control(ConnId(2), f(9, 20));
        let _ = s.push(Instant::ZERO, ConnId(1), id("g"), f(2, 100));
        assert!(s.not_reading_replies(ConnId(2)));
        assert!(!s.not_reading_replies(ConnId(1)));
        let order: Vec<_> = std::iter::from_fn(|| s.poll_transmit(Instant::ZERO))
            .map(|t| (t.conn.0, t.frame[0]))
            .collect();
        assert_eq!(order, [(1, 2), (2, 9)]);
        // It read what it was handed: its reply goes first again.
        s.written(ConnId(2), cap + 20);
        let _ = s.push(Instant::ZERO, ConnId(1), id("g"), f(3, 100));
        let _ = s.push_control(ConnId(2), f(8, 20));
        assert!(!s.not_reading_replies(ConnId(2)));
        assert_eq!(drain(&mut s, Instant::ZERO), [(2, 8), (1, 3)]);
    }

    /// Small frames fill the writer cap by their count too: 10-byte
    /// replies stop at cap / (10 + WRITER_FRAME_COST), not cap / 10, and
    /// each frame written makes room for one more.
    #[test]
    fn the_writer_cap_counts_each_frame_not_only_its_bytes() {
        let cfg = SchedulerConfig {
            max_writer_bytes: 7400,
            ..SchedulerConfig::default()
        };
        let mut s = sched(cfg, &[], &[]);
        s.add_conn(ConnId(1), 1 << 20, u8::MAX);
        for i in 0..500 {
            let _ = s.push_control(ConnId(1), f((i % 200) as u8, 10));
        }
        let mut handed = Vec::new();
        while let Some(t) = s.poll_transmit(Instant::ZERO) {
            handed.push(t.frame.len() as u64);
        }
        assert_eq!(handed.len(), 100, "7400 / (10 + 64)");
        // Three frames written: three more go.
        s.written(ConnId(1), handed[..3].iter().sum());
        let more = std::iter::from_fn(|| s.poll_transmit(Instant::ZERO)).count();
        assert_eq!(more, 3);
    }

    #[test]
    fn a_blocked_queue_waits_for_its_state_transfer() {
        let mut s = sched(SchedulerConfig::default(), &[("g", 4)], &[]);
        s.add_conn(ConnId(1), 1000, u8::MAX);
        s.add_queue(ConnId(1), id("g"), 3, Instant::ZERO);
        let _ = s.push(Instant::ZERO, ConnId(1), id("g"), f(5, 5));
        assert!(s.poll_transmit(Instant::ZERO).is_none());
        s.transfer(
            Instant::ZERO,
            ConnId(1),
            id("g"),
            vec![f(1, 5), f(2, 5)],
            true,
        );
        let tags: Vec<u8> = drain(&mut s, Instant::ZERO)
            .into_iter()
            .map(|(_, t)| t)
            .collect();
        assert_eq!(tags, vec![1, 2, 5]);
    }

    #[test]
    fn a_paged_transfer_asks_for_each_page_once_the_last_is_sent() {
        let mut s = sched(SchedulerConfig::default(), &[("g", 4)], &[]);
        s.add_conn(ConnId(1), 1000, u8::MAX);
        s.add_queue(ConnId(1), id("g"), 3, Instant::ZERO);
        let _ = s.push(Instant::ZERO, ConnId(1), id("g"), f(9, 5));
        s.transfer(
            Instant::ZERO,
            ConnId(1),
            id("g"),
            vec![f(1, 5), f(2, 5)],
            false,
        );
        assert!(s.take_refills().is_empty(), "the page is not sent yet");
        let tags: Vec<u8> = drain(&mut s, Instant::ZERO)
            .into_iter()
            .map(|(_, t)| t)
            .collect();
        assert_eq!(tags, vec![1, 2], "live frames wait for the last page");
        assert_eq!(s.take_refills(), vec![(ConnId(1), id("g"))]);
        assert!(s.take_refills().is_empty(), "asked once");
        s.transfer(Instant::ZERO, ConnId(1), id("g"), vec![f(3, 5)], true);
        let tags: Vec<u8> = drain(&mut s, Instant::ZERO)
            .into_iter()
            .map(|(_, t)| t)
            .collect();
        assert_eq!(tags, vec![3, 9]);
        assert!(s.take_refills().is_empty());
        assert_eq!(s.stats().queued_bytes, 0);
    }

    #[test]
    fn a_burst_demotes_its_group_until_usage_goes_down() {
        let mut s = sched(
            SchedulerConfig::default(),
            &[("img", 4), ("chat", 4)],
            &[(ConnId(1), "img", 3), (ConnId(1), "chat", 3)],
        );
        let t = Instant::from_millis(10);
        for i in 0..30 {
            let _ = s.push(t, ConnId(1), id("img"), f(i, 40_000));
        }
        assert_eq!(s.instant_priority(id("img")), Some(2));
        assert_eq!(s.instant_priority(id("chat")), Some(4));
        // The low-bandwidth group now goes first.
        let _ = s.push(t, ConnId(1), id("chat"), f(200, 100));
        assert_eq!(s.poll_transmit(t).map(|t| t.frame[0]), Some(200));
        let _ = drain(&mut s, t);
        let later = Instant::from_millis(1500);
        assert!(s.poll_timeout().is_some_and(|d| d < later));
        let _ = s.handle_timeout(later);
        assert_eq!(s.instant_priority(id("img")), Some(4));
        assert_eq!(
            (s.stats().burst_demotions, s.stats().burst_restores),
            (1, 1)
        );
    }

    #[test]
    fn a_starved_queue_ages_above_everyone_then_returns_to_normal() {
        let cfg = SchedulerConfig {
            aging_timeout: Duration::from_millis(500),
            ..SchedulerConfig::default()
        };
        let mut s = sched(
            cfg,
            &[("hi", 7), ("lo", 0)],
            &[(ConnId(1), "hi", 3), (ConnId(2), "lo", 0)],
        );
        let _ = s.push(Instant::ZERO, ConnId(2), id("lo"), f(1, 10));
        let _ = s.push(Instant::ZERO, ConnId(2), id("lo"), f(2, 10));
        // A steady stream of high-priority frames starves "lo" ...
        let mut now = Instant::ZERO;
        let mut served_lo = Vec::new();
        for step in 0..20u64 {
            now = Instant::from_millis(step * 100);
            let _ = s.handle_timeout(now);
            let _ = s.push(now, ConnId(1), id("hi"), f(50, 10));
            let _ = s.push(now, ConnId(1), id("hi"), f(50, 10));
            // ... the relay can only send one frame per step.
            if let Some(t) = s.poll_transmit(now) {
                s.written(t.conn, t.frame.len() as u64);
                if t.conn == ConnId(2) {
                    served_lo.push((step, t.frame[0]));
                }
            }
        }
        // ... until it ages (after 500 ms), is served once, and waits again.
        assert_eq!(served_lo, vec![(5, 1), (10, 2)]);
        assert_eq!(s.stats().agings, 2);
        let _ = now;
    }

    #[test]
    fn repeated_agings_trigger_the_slow_consumer_policy() {
        for (policy, want) in [
            (SlowConsumerPolicy::Demote, None),
            (
                SlowConsumerPolicy::Resync,
                Some(SlowAction::Resync {
                    conn: ConnId(1),
                    group: id("g"),
                }),
            ),
            (
                SlowConsumerPolicy::Disconnect,
                Some(SlowAction::Disconnect { conn: ConnId(1) }),
            ),
        ] {
            let cfg = SchedulerConfig {
                aging_timeout: Duration::from_secs(1),
                slow_agings: 2,
                slow_policy: policy,
                ..SchedulerConfig::default()
            };
            let mut s = sched(cfg, &[("g", 4)], &[]);
            s.add_conn(ConnId(1), 10, u8::MAX); // a tiny window nobody credits
            s.add_queue(ConnId(1), id("g"), 3, Instant::ZERO);
            s.transfer(Instant::ZERO, ConnId(1), id("g"), Vec::new(), true);
            let mut actions = Vec::new();
            for sec in 0..6 {
                let now = Instant::from_secs(sec);
                let _ = s.push(now, ConnId(1), id("g"), f(1, 20));
                let _ = s.poll_transmit(now);
                actions.extend(s.handle_timeout(now));
            }
            assert_eq!(actions.first().cloned(), want, "{policy:?}");
            if policy == SlowConsumerPolicy::Demote {
                assert!(s.is_demoted(ConnId(1)));
                assert_eq!(s.stats().slow_demotions, 1);
            }
        }
    }

    #[test]
    fn the_per_client_memory_cap_triggers_the_policy() {
        let cfg = SchedulerConfig {
            max_client_queue_bytes: 1000,
            ..SchedulerConfig::default()
        };
        let mut s = sched(cfg, &[("g", 4)], &[]);
        s.add_conn(ConnId(1), 0, u8::MAX);
        s.add_queue(ConnId(1), id("g"), 3, Instant::ZERO);
        s.transfer(Instant::ZERO, ConnId(1), id("g"), Vec::new(), true);
        let mut action = None;
        for _ in 0..20 {
            action = action.or(s.push(Instant::ZERO, ConnId(1), id("g"), f(1, 100)));
        }
        // Demote (the default) spills from the oldest frame not yet sent.
        assert_eq!(
            action,
            Some(SlowAction::Spill {
                conn: ConnId(1),
                group: id("g"),
                oldest: Some(f(1, 100)),
            })
        );
        assert_eq!(s.reset_queue(ConnId(1), id("g"), |_| false), 20);
        assert_eq!(s.stats().queued_bytes, 0);
    }

    #[test]
    fn a_group_removed_and_added_again_starts_afresh() {
        let mut s = sched(
            SchedulerConfig::default(),
            &[("g", 4)],
            &[(ConnId(1), "g", 3)],
        );
        s.add_conn(ConnId(2), u64::MAX / 2, u8::MAX);
        s.add_queue(ConnId(2), id("g"), 3, Instant::ZERO);
        // Conn 2 holds a transfer page and awaits a refill once it is sent.
        s.transfer(Instant::ZERO, ConnId(2), id("g"), vec![f(7, 10)], false);
        let t = Instant::from_millis(10);
        // A burst: "g" is demoted and conn 1 has a backlog.
        for i in 0..30 {
            let _ = s.push(t, ConnId(1), id("g"), f(i, 40_000));
        }
        assert_eq!(s.instant_priority(id("g")), Some(2));
        assert_eq!(s.poll_transmit(t).map(|t| t.conn), Some(ConnId(1)));
        assert_eq!(s.poll_transmit(t).map(|t| t.conn), Some(ConnId(2)));
        // Deleted with its backlog and pending refill still there.
        s.remove_group(id("g"));
        assert!(s.take_refills().is_empty(), "a refill of a deleted group");
        assert_eq!(s.instant_priority(id("g")), None);
        assert_eq!(s.push(t, ConnId(1), id("g"), f(99, 10)), None);
        assert_eq!(s.stats().queued_bytes, 0);
        assert!(s.depths().is_empty());

        s.add_group(id("g"), 5);
        assert_eq!(
            s.instant_priority(id("g")),
            Some(5),
            "not demoted, new default"
        );
        assert!(s.poll_transmit(t).is_none(), "no old queue is served");
        s.add_queue(ConnId(1), id("g"), 1, t);
        let _ = s.push(t, ConnId(1), id("g"), f(100, 10));
        assert!(
            s.poll_transmit(t).is_none(),
            "a new queue waits for its transfer"
        );
        s.transfer(t, ConnId(1), id("g"), vec![f(101, 10)], true);
        assert_eq!(
            s.depths(),
            vec![Depth {
                conn: ConnId(1),
                group: id("g"),
                frames: 2,
                bytes: 20,
                priority: 6,
            }]
        );
        let tags: Vec<u8> = drain(&mut s, t).into_iter().map(|(_, t)| t).collect();
        assert_eq!(tags, vec![101, 100], "none of the old backlog");
        assert!(s.take_refills().is_empty());
    }

    #[test]
    fn a_queue_of_an_unknown_group_is_not_created() {
        let mut s = sched(SchedulerConfig::default(), &[("g", 4)], &[]);
        s.add_conn(ConnId(1), 1000, u8::MAX);
        s.add_queue(ConnId(1), id("nope"), 3, Instant::ZERO);
        assert!(s.depths().is_empty());
        assert_eq!(s.push(Instant::ZERO, ConnId(1), id("nope"), f(1, 10)), None);
        assert_eq!(s.stats().queued_frames, 0);
    }
}
