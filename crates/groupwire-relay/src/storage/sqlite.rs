//! The default [`Storage`]: SQLite in WAL mode, in one file in a data
//! directory, built from source (rusqlite's `bundled` feature).
//!
//! # Durability
//!
//! Every [`Storage::append`] is one transaction; the relay acknowledges an
//! update (`Sent`) only after that transaction has committed. What survives
//! depends on [`SyncMode`]:
//!
//! | mode | SQLite setting | survives `kill -9` of the relay | survives power loss / OS crash |
//! |---|---|---|---|
//! | [`SyncMode::Full`] (default) | `synchronous=FULL` | every acknowledged update | every acknowledged update |
//! | [`SyncMode::Normal`] | `synchronous=NORMAL` | every acknowledged update | updates of the last few commits may be lost (the WAL is synced only at checkpoints) |
//!
//! A killed process cannot lose a committed WAL frame: the OS holds the
//! written pages. Only a machine failure can, which is what `FULL`'s fsync
//! per commit is for. Group commit (see [`super::execute`]) makes that
//! fsync cost per batch, not per update: under load one commit covers every
//! update that arrived while the previous one was syncing.

use std::path::Path;

use bytes::Bytes;
use rusqlite::{Connection, OptionalExtension, params};

use super::{Checkpoint, GroupRecord, Storage, StorageError, Update, check_next};

/// How hard each commit tries to reach the disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SyncMode {
    /// fsync the WAL on every commit: acknowledged updates survive power loss.
    #[default]
    Full,
    /// fsync only at WAL checkpoints: acknowledged updates survive a process
    /// crash, not a power loss. Faster on slow disks.
    Normal,
}

impl SyncMode {
    /// Every mode.
    pub const ALL: [Self; 2] = [Self::Full, Self::Normal];

    /// The mode's name as the CLI spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Full => "full",
            Self::Normal => "normal",
        }
    }
}

impl std::str::FromStr for SyncMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| format!("unknown sync mode {s:?} (full, normal)"))
    }
}

/// SQLite file name inside the data directory.
pub const DB_FILE: &str = "relay.sqlite3";

/// SQLite-backed storage.
#[derive(Debug)]
pub struct SqliteStorage {
    db: Connection,
}

impl SqliteStorage {
    /// Opens (creating if needed) `dir/relay.sqlite3`.
    pub fn open(dir: &Path, sync: SyncMode) -> Result<Self, StorageError> {
        std::fs::create_dir_all(dir)
            .map_err(|e| StorageError::Engine(format!("create {}: {e}", dir.display())))?;
        let db = Connection::open(dir.join(DB_FILE)).map_err(engine)?;
        Self::init(db, sync)
    }

    /// A private in-memory SQLite database (for tests of this engine).
    pub fn open_in_memory() -> Result<Self, StorageError> {
        Self::init(
            Connection::open_in_memory().map_err(engine)?,
            SyncMode::Full,
        )
    }

    fn init(db: Connection, sync: SyncMode) -> Result<Self, StorageError> {
        db.pragma_update(None, "journal_mode", "WAL")
            .map_err(engine)?;
        db.pragma_update(
            None,
            "synchronous",
            match sync {
                SyncMode::Full => "FULL",
                SyncMode::Normal => "NORMAL",
            },
        )
        .map_err(engine)?;
        db.execute_batch(
            "CREATE TABLE IF NOT EXISTS groups (
                name TEXT PRIMARY KEY,
                type TEXT NOT NULL,
                priority INTEGER NOT NULL,
                head_seq INTEGER NOT NULL,
                checkpoint_seq INTEGER NOT NULL
            );
            CREATE TABLE IF NOT EXISTS log (
                grp TEXT NOT NULL,
                seq INTEGER NOT NULL,
                sender INTEGER NOT NULL,
                msg_type INTEGER NOT NULL,
                sent_at INTEGER NOT NULL,
                payload BLOB NOT NULL,
                PRIMARY KEY (grp, seq)
            ) WITHOUT ROWID;
            CREATE TABLE IF NOT EXISTS checkpoints (
                grp TEXT PRIMARY KEY,
                seq INTEGER NOT NULL,
                state BLOB NOT NULL
            );
            CREATE TABLE IF NOT EXISTS locks (
                grp TEXT NOT NULL,
                name TEXT NOT NULL,
                holder INTEGER NOT NULL,
                PRIMARY KEY (grp, name)
            );",
        )
        .map_err(engine)?;
        Ok(Self { db })
    }

    fn exists(&self, group: &str) -> Result<bool, StorageError> {
        self.db
            .query_row("SELECT 1 FROM groups WHERE name = ?1", [group], |_| Ok(()))
            .optional()
            .map(|o| o.is_some())
            .map_err(engine)
    }

    fn require(&self, group: &str) -> Result<(), StorageError> {
        if self.exists(group)? {
            Ok(())
        } else {
            Err(StorageError::NoSuchGroup(group.into()))
        }
    }
}

fn engine(e: rusqlite::Error) -> StorageError {
    StorageError::Engine(e.to_string())
}

// SQLite integers are i64; sequence numbers and client ids stay far below
// 2^63, timestamps are stored bit-for-bit.
fn to_sql(v: u64) -> i64 {
    v as i64
}
fn from_sql(v: i64) -> u64 {
    v as u64
}

impl Storage for SqliteStorage {
    fn load_groups(&mut self) -> Result<Vec<GroupRecord>, StorageError> {
        let mut stmt = self
            .db
            .prepare(
                "SELECT name, type, priority, head_seq, checkpoint_seq FROM groups ORDER BY name",
            )
            .map_err(engine)?;
        let rows = stmt
            .query_map([], |r| {
                Ok(GroupRecord {
                    name: r.get(0)?,
                    group_type: r.get(1)?,
                    priority: r.get(2)?,
                    head_seq: from_sql(r.get(3)?),
                    checkpoint_seq: from_sql(r.get(4)?),
                })
            })
            .map_err(engine)?;
        rows.collect::<Result<_, _>>().map_err(engine)
    }

    fn create_group(
        &mut self,
        record: &GroupRecord,
        initial_state: &[u8],
    ) -> Result<(), StorageError> {
        if self.exists(&record.name)? {
            return Err(StorageError::GroupExists(record.name.clone()));
        }
        let tx = self.db.transaction().map_err(engine)?;
        tx.execute(
            "INSERT INTO groups (name, type, priority, head_seq, checkpoint_seq) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![
                record.name,
                record.group_type,
                record.priority,
                to_sql(record.head_seq),
                to_sql(record.checkpoint_seq)
            ],
        )
        .map_err(engine)?;
        tx.execute(
            "INSERT OR REPLACE INTO checkpoints (grp, seq, state) VALUES (?1, ?2, ?3)",
            params![record.name, to_sql(record.checkpoint_seq), initial_state],
        )
        .map_err(engine)?;
        tx.commit().map_err(engine)
    }

    fn delete_group(&mut self, group: &str) -> Result<(), StorageError> {
        self.require(group)?;
        let tx = self.db.transaction().map_err(engine)?;
        for sql in [
            "DELETE FROM groups WHERE name = ?1",
            "DELETE FROM log WHERE grp = ?1",
            "DELETE FROM checkpoints WHERE grp = ?1",
            "DELETE FROM locks WHERE grp = ?1",
        ] {
            tx.execute(sql, [group]).map_err(engine)?;
        }
        tx.commit().map_err(engine)
    }

    fn set_priority(&mut self, group: &str, priority: u8) -> Result<(), StorageError> {
        let n = self
            .db
            .execute(
                "UPDATE groups SET priority = ?2 WHERE name = ?1",
                params![group, priority],
            )
            .map_err(engine)?;
        if n == 0 {
            return Err(StorageError::NoSuchGroup(group.into()));
        }
        Ok(())
    }

    fn append(&mut self, entries: &[Update]) -> Result<(), StorageError> {
        let tx = self.db.transaction().map_err(engine)?;
        {
            let mut head = tx
                .prepare_cached("SELECT head_seq FROM groups WHERE name = ?1")
                .map_err(engine)?;
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO log (grp, seq, sender, msg_type, sent_at, payload) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                )
                .map_err(engine)?;
            let mut bump = tx
                .prepare_cached("UPDATE groups SET head_seq = ?2 WHERE name = ?1")
                .map_err(engine)?;
            for e in entries {
                let h: Option<i64> = head
                    .query_row([&e.group], |r| r.get(0))
                    .optional()
                    .map_err(engine)?;
                let h = from_sql(h.ok_or_else(|| StorageError::NoSuchGroup(e.group.clone()))?);
                // Dropping `tx` rolls the whole batch back.
                check_next(e, h)?;
                insert
                    .execute(params![
                        e.group,
                        to_sql(e.seq),
                        to_sql(e.sender),
                        e.msg_type,
                        to_sql(e.sent_at_micros),
                        &e.payload[..]
                    ])
                    .map_err(engine)?;
                bump.execute(params![e.group, to_sql(e.seq)])
                    .map_err(engine)?;
            }
        }
        tx.commit().map_err(engine)
    }

    fn read_log(
        &mut self,
        group: &str,
        after: u64,
        upto: u64,
        max_bytes: usize,
    ) -> Result<Vec<Update>, StorageError> {
        self.require(group)?;
        let mut stmt = self
            .db
            .prepare_cached(
                "SELECT seq, sender, msg_type, sent_at, payload FROM log
                 WHERE grp = ?1 AND seq > ?2 AND seq <= ?3 ORDER BY seq",
            )
            .map_err(engine)?;
        let rows = stmt
            .query_map(params![group, to_sql(after), to_sql(upto)], |r| {
                Ok(Update {
                    group: group.to_owned(),
                    seq: from_sql(r.get(0)?),
                    sender: from_sql(r.get(1)?),
                    msg_type: r.get(2)?,
                    sent_at_micros: from_sql(r.get(3)?),
                    payload: Bytes::from(r.get::<_, Vec<u8>>(4)?),
                })
            })
            .map_err(engine)?;
        let mut out = Vec::new();
        let mut total = 0;
        for row in rows {
            if total >= max_bytes && total > 0 {
                break;
            }
            let e = row.map_err(engine)?;
            total += e.payload.len().max(1);
            out.push(e);
        }
        Ok(out)
    }

    fn put_checkpoint(
        &mut self,
        group: &str,
        seq: u64,
        state: &[u8],
        compact: bool,
    ) -> Result<(), StorageError> {
        self.require(group)?;
        let tx = self.db.transaction().map_err(engine)?;
        tx.execute(
            "INSERT OR REPLACE INTO checkpoints (grp, seq, state) VALUES (?1, ?2, ?3)",
            params![group, to_sql(seq), state],
        )
        .map_err(engine)?;
        tx.execute(
            "UPDATE groups SET checkpoint_seq = ?2 WHERE name = ?1",
            params![group, to_sql(seq)],
        )
        .map_err(engine)?;
        if compact {
            tx.execute(
                "DELETE FROM log WHERE grp = ?1 AND seq <= ?2",
                params![group, to_sql(seq)],
            )
            .map_err(engine)?;
        }
        tx.commit().map_err(engine)
    }

    fn latest_checkpoint(&mut self, group: &str) -> Result<Checkpoint, StorageError> {
        self.db
            .query_row(
                "SELECT seq, state FROM checkpoints WHERE grp = ?1",
                [group],
                |r| {
                    Ok(Checkpoint {
                        seq: from_sql(r.get(0)?),
                        state: Bytes::from(r.get::<_, Vec<u8>>(1)?),
                    })
                },
            )
            .optional()
            .map_err(engine)?
            .ok_or_else(|| StorageError::NoSuchGroup(group.into()))
    }

    fn lock_cas(
        &mut self,
        group: &str,
        lock: &str,
        expected: Option<u64>,
        new: Option<u64>,
    ) -> Result<bool, StorageError> {
        self.require(group)?;
        let tx = self.db.transaction().map_err(engine)?;
        let current: Option<i64> = tx
            .query_row(
                "SELECT holder FROM locks WHERE grp = ?1 AND name = ?2",
                params![group, lock],
                |r| r.get(0),
            )
            .optional()
            .map_err(engine)?;
        if current.map(from_sql) != expected {
            return Ok(false);
        }
        match new {
            Some(h) => tx.execute(
                "INSERT OR REPLACE INTO locks (grp, name, holder) VALUES (?1, ?2, ?3)",
                params![group, lock, to_sql(h)],
            ),
            None => tx.execute(
                "DELETE FROM locks WHERE grp = ?1 AND name = ?2",
                params![group, lock],
            ),
        }
        .map_err(engine)?;
        tx.commit().map_err(engine)?;
        Ok(true)
    }

    fn clear_locks(&mut self) -> Result<(), StorageError> {
        self.db.execute("DELETE FROM locks", []).map_err(engine)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::conformance;
    use super::*;

    #[test]
    fn sqlite_engine_conforms() {
        let open = || SqliteStorage::open_in_memory().expect("open");
        conformance::groups_log_and_checkpoints(&mut open());
        conformance::locks(&mut open());
        conformance::execute_batches_appends(&mut open());
    }

    #[test]
    fn sqlite_state_survives_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let mut s = SqliteStorage::open(dir.path(), SyncMode::Normal).expect("open");
            s.create_group(
                &GroupRecord {
                    name: "g".into(),
                    group_type: "t".into(),
                    priority: 2,
                    head_seq: 0,
                    checkpoint_seq: 0,
                },
                b"init",
            )
            .expect("create");
            s.append(&[Update {
                group: "g".into(),
                seq: 1,
                sender: 1,
                msg_type: 0,
                sent_at_micros: u64::MAX,
                payload: Bytes::from_static(b"x"),
            }])
            .expect("append");
        }
        let mut s = SqliteStorage::open(dir.path(), SyncMode::Full).expect("reopen");
        assert_eq!(s.load_groups().expect("groups")[0].head_seq, 1);
        let log = s.read_log("g", 0, 10, usize::MAX).expect("log");
        assert_eq!(log[0].sent_at_micros, u64::MAX);
        assert_eq!(s.latest_checkpoint("g").expect("ckpt").state, &b"init"[..]);
    }
}
