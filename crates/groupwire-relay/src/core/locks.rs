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
            None if self.cfg.shared_locks => {
                // Free here, but maybe held through another node: the
                // store decides, and the reply waits for it.
                g.locks.insert(
                    lock.into(),
                    Lock {
                        holder: conn,
                        waiters: VecDeque::new(),
                        pending: Some((req, false)),
                    },
                );
                self.storage_ops.push_back(StorageOp::TakeLock {
                    origin: Origin { conn, request: req },
                    group: group.into(),
                    lock: lock.into(),
                    from: None,
                    holder: conn.client_id(),
                    wait,
                });
            }
            None => {
                g.locks.insert(
                    lock.into(),
                    Lock {
                        holder: conn,
                        waiters: VecDeque::new(),
                        pending: None,
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
            .is_some_and(|l| l.holder == conn && l.pending.is_none());
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
        l.pending = None;
        if let Some((next, req)) = l.waiters.pop_front() {
            if self.cfg.shared_locks {
                // The store hands it over (or, if `old` was still waiting
                // for it there, makes `next` wait instead).
                l.holder = next;
                l.pending = Some((req, true));
                self.storage_ops.push_back(StorageOp::TakeLock {
                    origin: Origin {
                        conn: next,
                        request: req,
                    },
                    group: group.into(),
                    lock: lock.into(),
                    from: Some(old.client_id()),
                    holder: next.client_id(),
                    wait: true,
                });
                return;
            }
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

    /// The store's answer to a [`StorageOp::TakeLock`]: the waiting
    /// holder gets its reply, or (taken through another node, or the
    /// store failed) the lock passes to the next waiter here.
    pub(super) fn on_lock_taken(
        &mut self,
        origin: Origin,
        group: &str,
        lock: &str,
        granted: Result<bool, StorageError>,
    ) {
        let Some(l) = self
            .groups
            .get_mut(group)
            .and_then(|g| g.locks.get_mut(lock))
        else {
            return; // released or gone meanwhile
        };
        let Some((req, waited)) = l
            .pending
            .filter(|&(r, _)| l.holder == origin.conn && r == origin.request)
        else {
            return; // a cancelled or superseded take
        };
        l.pending = None;
        match granted {
            Ok(true) if waited => self.reply(
                origin.conn,
                req,
                Frame::LockGranted {
                    group: group.into(),
                    lock: lock.into(),
                },
            ),
            Ok(true) => self.reply(origin.conn, req, Frame::Ok),
            not => {
                // Nothing of it is in the store: pass it on without a
                // release there.
                let Some((next, next_req)) = l.waiters.pop_front() else {
                    self.groups
                        .get_mut(group)
                        .expect("found above")
                        .locks
                        .remove(lock);
                    return self.refuse_lock(origin.conn, req, lock, not);
                };
                l.holder = next;
                l.pending = Some((next_req, true));
                self.storage_ops.push_back(StorageOp::TakeLock {
                    origin: Origin {
                        conn: next,
                        request: next_req,
                    },
                    group: group.into(),
                    lock: lock.into(),
                    from: None,
                    holder: next.client_id(),
                    wait: true,
                });
                self.refuse_lock(origin.conn, req, lock, not);
            }
        }
    }

    fn refuse_lock(&mut self, conn: ConnId, req: u32, lock: &str, why: Result<bool, StorageError>) {
        self.stats.lock_errors += 1;
        match why {
            Err(e) => {
                self.stats.storage_errors += 1;
                self.error(conn, req, ErrorCode::STORAGE, &e.to_string());
            }
            Ok(_) => self.error(
                conn,
                req,
                ErrorCode::LOCK_BUSY,
                &format!("{lock:?} is held through another relay node"),
            ),
        }
    }
}
