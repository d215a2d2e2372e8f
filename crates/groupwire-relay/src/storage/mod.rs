//! Where the relay keeps groups, the update log, checkpoints and locks.
//!
//! [`Storage`] is a small synchronous trait, called only from the relay's
//! storage thread (never from the async runtime: SQLite calls block). Three
//! engines implement it: [`MemoryStorage`] for tests,
//! [`SqliteStorage`], the default, in a data directory, and
//! [`JetStreamStorage`], NATS JetStream, for many relay nodes sharing
//! groups (see its module for what is stored where and how another node's
//! updates reach the core).
//!
//! The trait is shaped after NATS JetStream (ARCHITECTURE.md, "The relay"):
//!
//! - **per-group sequencing**: [`Storage::append`] takes entries whose
//!   `seq` is the group's head + 1, the same check as JetStream's
//!   `Nats-Expected-Last-Subject-Sequence` header, so a second relay node
//!   that lost a race gets an error instead of a fork;
//! - **replay from a sequence**: [`Storage::read_log`] (`after`, `upto`]
//!   is a JetStream ordered consumer with `DeliverByStartSequence`;
//! - **compare-and-set for locks**: [`Storage::lock_cas`] is a KV
//!   `update(key, value, revision)`; checkpoints are a KV put.
//!
//! [`execute`] runs a batch of [`StorageOp`]s against an engine and turns
//! consecutive appends into one [`Storage::append`] call: that is the group
//! commit (one transaction, one fsync, for every update that arrived while
//! the previous commit was running).

mod jetstream;
mod memory;
mod settings;
mod sqlite;
#[cfg(test)]
mod test_nats;

use bytes::Bytes;

use crate::frame::{MemberInfo, MembershipChange};

pub(crate) use jetstream::spawn as spawn_jetstream;
pub use jetstream::{DEFAULT_LOCK_LEASE, JetStreamStorage, NatsAuth, NatsConfig};
pub use memory::MemoryStorage;
pub(crate) use settings::ClusterSettings;
pub use settings::{ClusterSettingsError, SettingDiff};
pub use sqlite::{DB_FILE, SqliteStorage, SyncMode};

/// A group as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupRecord {
    /// Group name (unique).
    pub name: String,
    /// Application-defined type.
    pub group_type: String,
    /// Default priority (Corona §4.1).
    pub priority: u8,
    /// Last sequence number appended (0 before the first update).
    pub head_seq: u64,
    /// Sequence number of the latest checkpoint (0: the initial state).
    pub checkpoint_seq: u64,
}

pub use crate::frame::Update;

/// A snapshot of a group's state including every update up to `seq`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    /// Last sequence number the snapshot includes.
    pub seq: u64,
    /// The state.
    pub state: Bytes,
}

/// A storage failure. The request it belonged to had no effect.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StorageError {
    /// No such group.
    #[error("no group named {0:?}")]
    NoSuchGroup(String),
    /// A group of that name exists.
    #[error("group {0:?} exists")]
    GroupExists(String),
    /// An append whose sequence is not the group's head + 1.
    #[error("group {group:?}: expected sequence {expected}, got {got}")]
    WrongSequence {
        /// Group name.
        group: String,
        /// Head + 1.
        expected: u64,
        /// What the entry carried.
        got: u64,
    },
    /// The engine failed (I/O, corruption, ...).
    #[error("storage engine: {0}")]
    Engine(String),
    /// This relay node's settings do not agree with those of the other
    /// nodes sharing its NATS JetStream, or the stored ones are unreadable
    /// (issue 17; see [`ClusterSettingsError`]).
    #[error(transparent)]
    ClusterSettings(#[from] ClusterSettingsError),
}

/// Checks that `entry` is the next of its group, whose head is `head`:
/// every engine's [`Storage::append`] rule.
pub(crate) fn check_next(entry: &Update, head: u64) -> Result<(), StorageError> {
    if entry.seq == head + 1 {
        Ok(())
    } else {
        Err(StorageError::WrongSequence {
            group: entry.group.clone(),
            expected: head + 1,
            got: entry.seq,
        })
    }
}

/// A store for groups, the log, checkpoints and locks. Calls block; the
/// relay makes them from one dedicated thread, in the order the protocol
/// core issued them (so a read sees every earlier write).
pub trait Storage: Send {
    /// Every group, with its head and checkpoint sequence.
    fn load_groups(&mut self) -> Result<Vec<GroupRecord>, StorageError>;
    /// Creates a group and stores `initial_state` as its checkpoint at
    /// `record.checkpoint_seq` (0).
    fn create_group(
        &mut self,
        record: &GroupRecord,
        initial_state: &[u8],
    ) -> Result<(), StorageError>;
    /// Deletes a group with its log, checkpoints and locks.
    fn delete_group(&mut self, group: &str) -> Result<(), StorageError>;
    /// Changes a group's default priority.
    fn set_priority(&mut self, group: &str, priority: u8) -> Result<(), StorageError>;
    /// Appends `entries` atomically and durably (all or none). Within a
    /// group, each `seq` must be the previous head + 1.
    fn append(&mut self, entries: &[Update]) -> Result<(), StorageError>;
    /// Entries of `group` with `after < seq <= upto`, in order, stopping
    /// after the entry that brings the payloads to `max_bytes` or more (so
    /// at least one entry if there is any): one page of a state transfer,
    /// like a JetStream pull fetch with `max_bytes`.
    fn read_log(
        &mut self,
        group: &str,
        after: u64,
        upto: u64,
        max_bytes: usize,
    ) -> Result<Vec<Update>, StorageError>;
    /// Stores a checkpoint; with `compact`, deletes log entries `<= seq`.
    fn put_checkpoint(
        &mut self,
        group: &str,
        seq: u64,
        state: &[u8],
        compact: bool,
    ) -> Result<(), StorageError>;
    /// The latest checkpoint of `group`.
    fn latest_checkpoint(&mut self, group: &str) -> Result<Checkpoint, StorageError>;
    /// Sets lock `lock` of `group` to `new` (None: free) if its holder is
    /// `expected`; returns whether it did.
    fn lock_cas(
        &mut self,
        group: &str,
        lock: &str,
        expected: Option<u64>,
        new: Option<u64>,
    ) -> Result<bool, StorageError>;
    /// Frees every lock (at startup: the sessions that held them are gone).
    fn clear_locks(&mut self) -> Result<(), StorageError>;
}

/// Who asked for a storage operation, so its result can be routed back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Origin {
    /// The connection.
    pub conn: crate::sched::ConnId,
    /// Its request id.
    pub request: u32,
}

/// An operation the protocol core asks the storage thread to run.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum StorageOp {
    /// Create a group.
    CreateGroup {
        /// Requester.
        origin: Origin,
        /// The group.
        record: GroupRecord,
        /// Its initial state.
        initial_state: Bytes,
    },
    /// Delete a group.
    DeleteGroup {
        /// Group name.
        group: String,
    },
    /// Change a group's default priority.
    SetPriority {
        /// Group name.
        group: String,
        /// New priority.
        priority: u8,
    },
    /// Append one update (batched with its neighbours).
    Append {
        /// Sender.
        origin: Origin,
        /// The update.
        entry: Update,
    },
    /// Read one page of a state transfer, for a joiner or a
    /// resynchronized slow consumer: the first page (`after: None`) is the
    /// latest checkpoint and the log after it, later pages the log after
    /// `after`; each page holds about `max_bytes` of log, up to `upto`.
    Load {
        /// The member's connection (request: the join's request id).
        origin: Origin,
        /// Group name.
        group: String,
        /// Which transfer this page belongs to (the core's counter).
        transfer: u64,
        /// `None` for the first page, else the last sequence already sent.
        after: Option<u64>,
        /// Last sequence assigned when the transfer started.
        upto: u64,
        /// Page size: payload bytes of log per page.
        max_bytes: usize,
    },
    /// Store a checkpoint.
    Checkpoint {
        /// Requester.
        origin: Origin,
        /// Group name.
        group: String,
        /// Sequence the state includes.
        seq: u64,
        /// The state.
        state: Bytes,
        /// Delete log entries up to `seq`.
        compact: bool,
    },
    /// Take a lock in the store for `holder` and report it
    /// ([`StorageDone::LockTaken`]): a compare-and-set from `from` (a
    /// handover from that holder) or from free. With `wait`, a store that
    /// can wait (a cluster's) keeps trying until the lock is free, and a
    /// later handover from `holder` or release by `holder` replaces or
    /// cancels the wait. Used only with
    /// [`CoreConfig::shared_locks`](crate::core::CoreConfig::shared_locks).
    TakeLock {
        /// The acquiring request.
        origin: Origin,
        /// Group name.
        group: String,
        /// Lock name.
        lock: String,
        /// The holder handing it over, `None` to take a free lock.
        from: Option<u64>,
        /// The new holder.
        holder: u64,
        /// Wait while another node's client holds it.
        wait: bool,
    },
    /// Tell the other relay nodes that `member`, connected to this one,
    /// joined `group`, changed role or mode there, or left it (`change`).
    /// Used only with
    /// [`CoreConfig::shared_membership`](crate::core::CoreConfig::shared_membership);
    /// a store of one node has nobody to tell.
    Member {
        /// Group name.
        group: String,
        /// The member as it is now (as it was, for a leave).
        member: MemberInfo,
        /// What happened.
        change: MembershipChange,
    },
    /// Write a lock's holder through to the store.
    Lock {
        /// Group name.
        group: String,
        /// Lock name.
        lock: String,
        /// Expected holder.
        expected: Option<u64>,
        /// New holder.
        new: Option<u64>,
    },
}

/// One page of a state transfer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatePage {
    /// The checkpoint the transfer starts from (first page only).
    pub checkpoint: Option<Checkpoint>,
    /// Log entries after the checkpoint or the previous page, in order.
    pub entries: Vec<Update>,
}

/// One page of state for a joiner: the [`StorageOp::Load`] it answers and
/// what was read.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Loaded {
    /// The member.
    pub origin: Origin,
    /// Group name.
    pub group: String,
    /// As requested.
    pub transfer: u64,
    /// As requested.
    pub after: Option<u64>,
    /// As requested.
    pub upto: u64,
    /// The page.
    pub result: Result<StatePage, StorageError>,
}

/// The result of a [`StorageOp`], handed back to the protocol core.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum StorageDone {
    /// A group was created (or not).
    Created {
        /// Requester.
        origin: Origin,
        /// Group name.
        group: String,
        /// Outcome.
        result: Result<(), StorageError>,
    },
    /// An update is durable (or failed).
    Appended {
        /// Sender.
        origin: Origin,
        /// The update.
        entry: Update,
        /// Outcome.
        result: Result<(), StorageError>,
    },
    /// One page of state for a joiner.
    Loaded(Loaded),
    /// A checkpoint is durable (or failed).
    Checkpointed {
        /// Requester.
        origin: Origin,
        /// Group name.
        group: String,
        /// Its sequence.
        seq: u64,
        /// Outcome.
        result: Result<(), StorageError>,
    },
    /// A fire-and-forget write failed (delete, priority, lock).
    Failed {
        /// What failed.
        error: StorageError,
    },
    /// The result of a [`StorageOp::TakeLock`].
    LockTaken {
        /// The acquiring request.
        origin: Origin,
        /// Group name.
        group: String,
        /// Lock name.
        lock: String,
        /// `Ok(true)` if the store now names the holder, `Ok(false)` if
        /// someone else holds it.
        granted: Result<bool, StorageError>,
    },
    /// An update another relay node appended (cluster engines only). They
    /// come in sequence order per group, interleaved with this node's own
    /// [`Appended`](Self::Appended) results in the one order of the log.
    Remote {
        /// The update, with the sequence the log gave it.
        entry: Update,
    },
    /// A group another relay node created (cluster engines only), before
    /// any of its updates.
    GroupFound {
        /// The group (head and checkpoint 0: its updates follow as
        /// [`Remote`](Self::Remote)).
        record: GroupRecord,
    },
    /// A group another relay node deleted (cluster engines only).
    GroupGone {
        /// Group name.
        group: String,
    },
    /// A member of a group, connected to another relay node, joined it,
    /// changed role or mode there, or left it (cluster engines only). A
    /// member whose node died or shut down leaves as
    /// [`MembershipChange::Disconnected`]. The members of a group already
    /// there when the core learns of the group come as joins.
    MemberChanged {
        /// Group name.
        group: String,
        /// The member (its client id is unique across nodes).
        member: MemberInfo,
        /// What happened.
        change: MembershipChange,
    },
    /// A known group's default priority was changed through another
    /// relay node (cluster engines only): the core applies it as a
    /// `SetPriority` would, without writing it back.
    PriorityChanged {
        /// Group name.
        group: String,
        /// The new default priority.
        priority: u8,
    },
}

/// Runs `ops` in order against `storage`, committing each run of
/// consecutive appends as one batch (group commit).
pub fn execute(storage: &mut dyn Storage, ops: Vec<StorageOp>) -> Vec<StorageDone> {
    let mut done = Vec::with_capacity(ops.len());
    let mut batch: Vec<(Origin, Update)> = Vec::new();
    for op in ops {
        if let StorageOp::Append { origin, entry } = op {
            batch.push((origin, entry));
            continue;
        }
        flush_appends(storage, &mut batch, &mut done);
        match op {
            StorageOp::CreateGroup {
                origin,
                record,
                initial_state,
            } => done.push(StorageDone::Created {
                origin,
                result: storage.create_group(&record, &initial_state),
                group: record.name,
            }),
            StorageOp::DeleteGroup { group } => {
                if let Err(error) = storage.delete_group(&group) {
                    done.push(StorageDone::Failed { error });
                }
            }
            StorageOp::SetPriority { group, priority } => {
                if let Err(error) = storage.set_priority(&group, priority) {
                    done.push(StorageDone::Failed { error });
                }
            }
            StorageOp::Load {
                origin,
                group,
                transfer,
                after,
                upto,
                max_bytes,
            } => {
                let result = match after {
                    None => storage.latest_checkpoint(&group).and_then(|ckpt| {
                        Ok(StatePage {
                            entries: storage.read_log(&group, ckpt.seq, upto, max_bytes)?,
                            checkpoint: Some(ckpt),
                        })
                    }),
                    Some(after) => {
                        storage
                            .read_log(&group, after, upto, max_bytes)
                            .map(|entries| StatePage {
                                checkpoint: None,
                                entries,
                            })
                    }
                };
                done.push(StorageDone::Loaded(Loaded {
                    origin,
                    group,
                    transfer,
                    after,
                    upto,
                    result,
                }));
            }
            StorageOp::Checkpoint {
                origin,
                group,
                seq,
                state,
                compact,
            } => done.push(StorageDone::Checkpointed {
                origin,
                result: storage.put_checkpoint(&group, seq, &state, compact),
                group,
                seq,
            }),
            StorageOp::Lock {
                group,
                lock,
                expected,
                new,
            } => match storage.lock_cas(&group, &lock, expected, new) {
                Ok(true) => {}
                Ok(false) => done.push(StorageDone::Failed {
                    error: StorageError::Engine(format!(
                        "lock {group}/{lock}: stored holder is not {expected:?}"
                    )),
                }),
                Err(error) => done.push(StorageDone::Failed { error }),
            },
            // A store of one node never waits: the core queues waiters.
            StorageOp::TakeLock {
                origin,
                group,
                lock,
                from,
                holder,
                wait: _,
            } => done.push(StorageDone::LockTaken {
                granted: storage.lock_cas(&group, &lock, from, Some(holder)),
                origin,
                group,
                lock,
            }),
            StorageOp::Member { .. } => {}
            StorageOp::Append { .. } => unreachable!("appends are batched above"),
        }
    }
    flush_appends(storage, &mut batch, &mut done);
    done
}

fn flush_appends(
    storage: &mut dyn Storage,
    batch: &mut Vec<(Origin, Update)>,
    done: &mut Vec<StorageDone>,
) {
    if batch.is_empty() {
        return;
    }
    let entries: Vec<Update> = batch.iter().map(|(_, e)| e.clone()).collect();
    let result = storage.append(&entries);
    for (origin, entry) in batch.drain(..) {
        done.push(StorageDone::Appended {
            origin,
            entry,
            result: result.clone(),
        });
    }
}

#[cfg(test)]
pub(crate) mod conformance {
    //! The behaviour every engine must show; run against each engine.
    use super::*;

    fn entry(group: &str, seq: u64) -> Update {
        Update {
            group: group.into(),
            seq,
            sender: 7,
            msg_type: 1,
            sent_at_micros: u64::MAX - seq,
            payload: Bytes::from(format!("u{seq}")),
        }
    }

    fn record(name: &str) -> GroupRecord {
        GroupRecord {
            name: name.into(),
            group_type: "chat".into(),
            priority: 3,
            head_seq: 0,
            checkpoint_seq: 0,
        }
    }

    pub(crate) fn groups_log_and_checkpoints(s: &mut dyn Storage) {
        s.create_group(&record("a"), b"init").expect("create");
        assert_eq!(
            s.create_group(&record("a"), b"x"),
            Err(StorageError::GroupExists("a".into()))
        );
        s.create_group(&record("b"), b"").expect("create b");
        s.append(&[entry("a", 1), entry("a", 2), entry("b", 1)])
            .expect("append");
        assert!(matches!(
            s.append(&[entry("a", 4)]),
            Err(StorageError::WrongSequence { expected: 3, .. })
        ));
        assert!(matches!(
            s.append(&[entry("zz", 1)]),
            Err(StorageError::NoSuchGroup(_))
        ));
        // A failed batch leaves nothing behind.
        assert!(s.append(&[entry("a", 3), entry("a", 9)]).is_err());
        assert_eq!(
            s.read_log("a", 0, 10, usize::MAX).expect("read"),
            vec![entry("a", 1), entry("a", 2)]
        );
        s.append(&[entry("a", 3)]).expect("append 3");
        assert_eq!(
            s.read_log("a", 1, 2, usize::MAX).expect("read"),
            vec![entry("a", 2)]
        );
        // Pages: at least one entry, and stop once `max_bytes` is reached.
        assert_eq!(
            s.read_log("a", 0, 10, 0).expect("read"),
            vec![entry("a", 1)]
        );
        let one = entry("a", 1).payload.len();
        assert_eq!(
            s.read_log("a", 0, 10, one + 1).expect("read"),
            vec![entry("a", 1), entry("a", 2)]
        );
        let ckpt = s.latest_checkpoint("a").expect("ckpt");
        assert_eq!(
            ckpt,
            Checkpoint {
                seq: 0,
                state: Bytes::from_static(b"init")
            }
        );
        s.put_checkpoint("a", 2, b"s2", true).expect("checkpoint");
        assert_eq!(s.latest_checkpoint("a").expect("ckpt").seq, 2);
        assert_eq!(
            s.read_log("a", 0, 10, usize::MAX).expect("read"),
            vec![entry("a", 3)]
        );
        s.set_priority("a", 6).expect("priority");
        let groups = s.load_groups().expect("groups");
        let a = groups.iter().find(|g| g.name == "a").expect("a");
        assert_eq!((a.head_seq, a.checkpoint_seq, a.priority), (3, 2, 6));
        s.delete_group("b").expect("delete");
        assert_eq!(s.load_groups().expect("groups").len(), 1);
        assert!(s.latest_checkpoint("b").is_err());
    }

    pub(crate) fn locks(s: &mut dyn Storage) {
        s.create_group(&record("g"), b"").expect("create");
        assert_eq!(s.lock_cas("g", "l", None, Some(1)), Ok(true));
        assert_eq!(s.lock_cas("g", "l", None, Some(2)), Ok(false));
        assert_eq!(s.lock_cas("g", "l", Some(1), Some(2)), Ok(true));
        assert_eq!(s.lock_cas("g", "l", Some(2), None), Ok(true));
        assert_eq!(s.lock_cas("g", "l", None, Some(3)), Ok(true));
        s.clear_locks().expect("clear");
        assert_eq!(s.lock_cas("g", "l", None, Some(4)), Ok(true));
    }

    pub(crate) fn execute_batches_appends(s: &mut dyn Storage) {
        let o = Origin {
            conn: crate::sched::ConnId(1),
            request: 1,
        };
        let done = execute(
            s,
            vec![
                StorageOp::CreateGroup {
                    origin: o,
                    record: record("g"),
                    initial_state: Bytes::new(),
                },
                StorageOp::Append {
                    origin: o,
                    entry: entry("g", 1),
                },
                StorageOp::Append {
                    origin: o,
                    entry: entry("g", 2),
                },
                StorageOp::Load {
                    origin: o,
                    group: "g".into(),
                    transfer: 1,
                    after: None,
                    upto: 2,
                    max_bytes: usize::MAX,
                },
                StorageOp::Load {
                    origin: o,
                    group: "g".into(),
                    transfer: 1,
                    after: Some(1),
                    upto: 2,
                    max_bytes: 0,
                },
            ],
        );
        assert_eq!(done.len(), 5);
        match &done[3] {
            StorageDone::Loaded(Loaded {
                result: Ok(page), ..
            }) => {
                assert_eq!(page.checkpoint.as_ref().map(|c| c.seq), Some(0));
                assert_eq!(page.entries.len(), 2);
            }
            other => panic!("unexpected {other:?}"),
        }
        match &done[4] {
            StorageDone::Loaded(Loaded {
                result: Ok(page), ..
            }) => {
                assert_eq!(page.checkpoint, None);
                assert_eq!(page.entries, vec![entry("g", 2)]);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}
