//! An in-memory [`Storage`] for tests and throwaway relays.

use std::collections::BTreeMap;

use bytes::Bytes;

use super::{Checkpoint, GroupRecord, Storage, StorageError, Update, check_next};

/// Keeps everything in maps; nothing survives the process.
#[derive(Debug, Default)]
pub struct MemoryStorage {
    groups: BTreeMap<String, Group>,
}

#[derive(Debug)]
struct Group {
    record: GroupRecord,
    log: BTreeMap<u64, Update>,
    checkpoint: Checkpoint,
    locks: BTreeMap<String, u64>,
}

impl MemoryStorage {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn group(&mut self, name: &str) -> Result<&mut Group, StorageError> {
        self.groups
            .get_mut(name)
            .ok_or_else(|| StorageError::NoSuchGroup(name.into()))
    }
}

impl Storage for MemoryStorage {
    fn load_groups(&mut self) -> Result<Vec<GroupRecord>, StorageError> {
        Ok(self.groups.values().map(|g| g.record.clone()).collect())
    }

    fn create_group(
        &mut self,
        record: &GroupRecord,
        initial_state: &[u8],
    ) -> Result<(), StorageError> {
        if self.groups.contains_key(&record.name) {
            return Err(StorageError::GroupExists(record.name.clone()));
        }
        self.groups.insert(
            record.name.clone(),
            Group {
                record: record.clone(),
                log: BTreeMap::new(),
                checkpoint: Checkpoint {
                    seq: record.checkpoint_seq,
                    state: Bytes::copy_from_slice(initial_state),
                },
                locks: BTreeMap::new(),
            },
        );
        Ok(())
    }

    fn delete_group(&mut self, group: &str) -> Result<(), StorageError> {
        self.groups
            .remove(group)
            .map(|_| ())
            .ok_or_else(|| StorageError::NoSuchGroup(group.into()))
    }

    fn set_priority(&mut self, group: &str, priority: u8) -> Result<(), StorageError> {
        self.group(group)?.record.priority = priority;
        Ok(())
    }

    fn append(&mut self, entries: &[Update]) -> Result<(), StorageError> {
        // Validate the whole batch first: all or nothing.
        let mut heads: BTreeMap<&str, u64> = BTreeMap::new();
        for e in entries {
            let head = match heads.get(e.group.as_str()) {
                Some(h) => *h,
                None => {
                    self.groups
                        .get(&e.group)
                        .ok_or_else(|| StorageError::NoSuchGroup(e.group.clone()))?
                        .record
                        .head_seq
                }
            };
            check_next(e, head)?;
            heads.insert(&e.group, e.seq);
        }
        for e in entries {
            let g = self.group(&e.group)?;
            g.record.head_seq = e.seq;
            g.log.insert(e.seq, e.clone());
        }
        Ok(())
    }

    fn read_log(
        &mut self,
        group: &str,
        after: u64,
        upto: u64,
        max_bytes: usize,
    ) -> Result<Vec<Update>, StorageError> {
        if upto <= after {
            self.group(group)?;
            return Ok(Vec::new());
        }
        let mut total = 0;
        Ok(self
            .group(group)?
            .log
            .range(after + 1..=upto)
            .take_while(|(_, e)| {
                let more = total < max_bytes || total == 0;
                total += e.payload.len().max(1);
                more
            })
            .map(|(_, e)| e.clone())
            .collect())
    }

    fn put_checkpoint(
        &mut self,
        group: &str,
        seq: u64,
        state: &[u8],
        compact: bool,
    ) -> Result<(), StorageError> {
        let g = self.group(group)?;
        g.checkpoint = Checkpoint {
            seq,
            state: Bytes::copy_from_slice(state),
        };
        g.record.checkpoint_seq = seq;
        if compact {
            g.log = g.log.split_off(&(seq + 1));
        }
        Ok(())
    }

    fn latest_checkpoint(&mut self, group: &str) -> Result<Checkpoint, StorageError> {
        Ok(self.group(group)?.checkpoint.clone())
    }

    fn lock_cas(
        &mut self,
        group: &str,
        lock: &str,
        expected: Option<u64>,
        new: Option<u64>,
    ) -> Result<bool, StorageError> {
        let g = self.group(group)?;
        if g.locks.get(lock).copied() != expected {
            return Ok(false);
        }
        match new {
            Some(h) => g.locks.insert(lock.into(), h),
            None => g.locks.remove(lock),
        };
        Ok(true)
    }

    fn clear_locks(&mut self) -> Result<(), StorageError> {
        for g in self.groups.values_mut() {
            g.locks.clear();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::conformance;
    use super::*;

    #[test]
    fn memory_engine_conforms() {
        conformance::groups_log_and_checkpoints(&mut MemoryStorage::new());
        conformance::locks(&mut MemoryStorage::new());
        conformance::execute_batches_appends(&mut MemoryStorage::new());
    }
}
