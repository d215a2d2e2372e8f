//! Locks (Corona §4.5): named per-group locks, granted to principals,
//! queued while busy, released on unlock, leave or disconnect.

use super::*;

impl RelayCore {
    pub(super) fn on_lock_acquire(
        &mut self,
        conn: ConnId,
        req: u32,
        group: &str,
        lock: &str,
        wait: bool,
    ) {
        if self.principal(conn, req, group, "take locks").is_none() {
            return;
        }
        if lock.is_empty() {
            return self.error(conn, req, ErrorCode::INVALID_ARGUMENT, "empty lock name");
        }
        let g = self.groups.get_mut(group).expect("members are in groups");
        match g.locks.get_mut(lock) {
            None => {
                g.locks.insert(
                    lock.into(),
                    Lock {
                        holder: conn,
                        waiters: VecDeque::new(),
                    },
                );
                self.storage_ops.push_back(StorageOp::Lock {
                    group: group.into(),
                    lock: lock.into(),
                    expected: None,
                    new: Some(conn.client_id()),
                });
                self.reply(conn, req, Frame::Ok);
            }
            Some(l) if l.holder == conn || l.waiters.iter().any(|(w, _)| *w == conn) => {
                self.stats.lock_errors += 1;
                self.error(
                    conn,
                    req,
                    ErrorCode::ALREADY_HELD,
                    &format!("{lock:?} already held or awaited"),
                );
            }
            Some(l) if wait => l.waiters.push_back((conn, req)),
            Some(l) => {
                let holder = l.holder;
                self.stats.lock_errors += 1;
                self.error(
                    conn,
                    req,
                    ErrorCode::LOCK_BUSY,
                    &format!("{lock:?} is held by client {holder}"),
                );
            }
        }
    }

    pub(super) fn on_lock_release(&mut self, conn: ConnId, req: u32, group: &str, lock: &str) {
        if self.member(conn, req, group).is_none() {
            return;
        }
        let holds = self.groups[group]
            .locks
            .get(lock)
            .is_some_and(|l| l.holder == conn);
        if !holds {
            self.stats.lock_errors += 1;
            return self.error(
                conn,
                req,
                ErrorCode::NOT_HOLDER,
                &format!("{lock:?} is not yours"),
            );
        }
        self.release_lock(group, lock);
        self.reply(conn, req, Frame::Ok);
    }

    // ---- storage results ----

    /// Hands `lock` to its next waiter, or frees it.
    pub(super) fn release_lock(&mut self, group: &str, lock: &str) {
        let Some(g) = self.groups.get_mut(group) else {
            return;
        };
        let Some(l) = g.locks.get_mut(lock) else {
            return;
        };
        let old = l.holder;
        if let Some((next, req)) = l.waiters.pop_front() {
            l.holder = next;
            self.storage_ops.push_back(StorageOp::Lock {
                group: group.into(),
                lock: lock.into(),
                expected: Some(old.client_id()),
                new: Some(next.client_id()),
            });
            self.reply(
                next,
                req,
                Frame::LockGranted {
                    group: group.into(),
                    lock: lock.into(),
                },
            );
        } else {
            g.locks.remove(lock);
            self.storage_ops.push_back(StorageOp::Lock {
                group: group.into(),
                lock: lock.into(),
                expected: Some(old.client_id()),
                new: None,
            });
        }
    }
}
