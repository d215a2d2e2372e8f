//! State transfer (Corona §4.4): a joining or resynced member gets the
//! latest checkpoint and the updates after it, a page at a time; a queue
//! over its memory cap spills to the log and is read back the same way.

use super::*;

impl RelayCore {
    pub(super) fn on_loaded(&mut self, now: Instant, loaded: Loaded) {
        let (origin, upto, group) = (loaded.origin, loaded.upto, loaded.group.as_str());
        let conn = origin.conn;
        let Some(g) = self.groups.get(group) else {
            return;
        };
        let Some(m) = g.members.get(&conn) else {
            return; // left before the state arrived
        };
        let Some(request) = m.loading else {
            return;
        };
        if m.transfer != loaded.transfer || request != origin.request || m.live_from != upto + 1 {
            return; // a newer state transfer superseded this one
        }
        let page = match loaded.result {
            Ok(r) => r,
            Err(e) => {
                self.stats.storage_errors += 1;
                tracing::warn!(group, error = %e, "a state transfer failed; the member is removed");
                self.remove_member(now, conn, group, MembershipChange::Left);
                return self.error(conn, request, ErrorCode::STORAGE, &e.to_string());
            }
        };
        let base = match (loaded.after, &page.checkpoint) {
            (Some(a), _) => a,
            (None, Some(c)) => c.seq,
            (None, None) => 0,
        };
        let contiguous = match page.entries.first() {
            Some(e) => e.seq == base + 1,
            None => base >= upto,
        };
        if !contiguous && m.resume.is_some() {
            // The log no longer has what a resumed join asked for: a plain
            // state transfer from the checkpoint, answering the same
            // request (the client sees `checkpoint_seq` above its resume).
            self.member_mut(conn, group).expect("checked above").resume = None;
            return self.start_transfer(conn, group, request, None, upto);
        }
        if !contiguous {
            // A checkpoint compacted the log between two pages: start over
            // from that checkpoint (the member sees Resync, then Joined).
            return self.start_resync(now, conn, group, true);
        }
        let last_seq = page.entries.last().map_or(base, |e| e.seq);
        // Membership observers get no updates: one page is the whole state.
        let last = last_seq >= upto || m.role == Role::MembershipObserver;
        let mut frames = Vec::with_capacity(page.entries.len() + 2);
        // A resumed join's first page: a `Joined` from the resume point,
        // without state.
        let resumed = m.resume.map(|seq| Checkpoint {
            seq,
            state: Bytes::new(),
        });
        if let Some(ckpt) = page.checkpoint.or(resumed) {
            if let Some(dropped) = m.resync_dropped {
                frames.push(frame::encode(
                    0,
                    &Frame::Resync {
                        group: group.into(),
                        dropped,
                    },
                ));
            }
            let members = g
                .members
                .iter()
                .map(|(&c, m)| MemberInfo {
                    client: c.client_id(),
                    name: self
                        .conns
                        .get(&c)
                        .map(|c| c.name.clone())
                        .unwrap_or_default(),
                    role: m.role,
                    mode: m.mode,
                })
                // Then the members connected to other relay nodes.
                .chain(g.remote.values().cloned())
                .collect();
            frames.push(frame::encode(
                request,
                &Frame::Joined(JoinInfo {
                    group: group.into(),
                    group_type: g.group_type.clone(),
                    checkpoint_seq: ckpt.seq,
                    head_seq: upto,
                    state: ckpt.state,
                    members,
                }),
            ));
        }
        if m.role != Role::MembershipObserver {
            frames.extend(page.entries.iter().map(|e| frame::encode_update(0, e)));
        }
        let m = self.member_mut(conn, group).expect("checked above");
        m.transfer_sent = last_seq;
        m.resume = None;
        if last {
            m.loading = None;
            m.resync_dropped = None;
        }
        if let Some(id) = self.group_id(group) {
            self.sched.transfer(now, conn, id, frames, last);
        }
        self.load_next_pages();
    }

    // ---- helpers ----

    /// Drops `conn`'s backlog for `group` and sends a fresh state transfer.
    pub(super) fn start_resync(&mut self, now: Instant, conn: ConnId, group: &str, announce: bool) {
        self.restart_transfer(conn, group, None, announce);
        let _ = now;
    }

    /// Drops `conn`'s backlog for `group` and refills it by a transfer up
    /// to the head: from the checkpoint (`after: None`, a resync, `Resync`
    /// announced if `announce`) or from the log after `after` (a spill).
    pub(super) fn restart_transfer(
        &mut self,
        conn: ConnId,
        group: &str,
        after: Option<u64>,
        announce: bool,
    ) {
        let Some(g) = self.groups.get(group) else {
            return;
        };
        if !g.members.contains_key(&conn) {
            return;
        }
        // What is durable (see `on_join`).
        let head = g.committed;
        let dropped = self.sched.reset_queue(conn, g.id) as u64;
        let m = self.member_mut(conn, group).expect("checked above");
        m.live_from = head + 1;
        m.resync_dropped = announce.then_some(dropped);
        self.start_transfer(conn, group, 0, after, head);
    }

    /// Starts a paged transfer of `group` up to `upto` for `conn`: from the
    /// checkpoint (`after: None`), answering `request` with its `Joined`,
    /// or a continuation of the log after `after`, with no `Joined` (a
    /// spill).
    pub(super) fn start_transfer(
        &mut self,
        conn: ConnId,
        group: &str,
        request: u32,
        after: Option<u64>,
        upto: u64,
    ) {
        self.next_transfer += 1;
        let transfer = self.next_transfer;
        let Some(m) = self.member_mut(conn, group) else {
            return;
        };
        m.loading = Some(request);
        m.transfer = transfer;
        m.transfer_sent = after.unwrap_or(0);
        self.load_page(conn, group, request, transfer, after, upto);
    }

    /// Asks storage for one page of a transfer.
    pub(super) fn load_page(
        &mut self,
        conn: ConnId,
        group: &str,
        request: u32,
        transfer: u64,
        after: Option<u64>,
        upto: u64,
    ) {
        self.storage_ops.push_back(StorageOp::Load {
            origin: Origin { conn, request },
            group: group.into(),
            transfer,
            after,
            upto,
            max_bytes: self.cfg.transfer_page_bytes,
        });
    }

    /// A queue reached the memory cap under the `demote` policy: drop it
    /// from memory and read it back from the log, from `oldest` (the
    /// oldest frame not yet sent) on, page by page as the client reads.
    /// The client sees the same stream, later. Falls back to a resync if
    /// `oldest` is not an update (a state transfer's `Joined` is still
    /// unsent) or the log no longer has it (compacted: the resync starts
    /// from that checkpoint).
    pub(super) fn start_spill(
        &mut self,
        now: Instant,
        conn: ConnId,
        group: &str,
        oldest: Option<Bytes>,
    ) {
        let Some(g) = self.groups.get(group) else {
            return;
        };
        if !g.members.contains_key(&conn) {
            return;
        }
        let first = oldest
            .and_then(|f| frame::DeliverView::new_checked(f).ok())
            .map(|v| v.seq());
        let Some(first) =
            first.filter(|&s| s > g.checkpoint_seq || !self.cfg.compact_on_checkpoint)
        else {
            return self.start_resync(now, conn, group, true);
        };
        self.restart_transfer(conn, group, Some(first - 1), false);
    }

    /// Loads the next page of every transfer whose last page went out.
    pub(super) fn load_next_pages(&mut self) {
        for (conn, id) in self.sched.take_refills() {
            let Some(group) = self.names.get(&id).cloned() else {
                continue;
            };
            let Some(m) = self.groups.get(&group).and_then(|g| g.members.get(&conn)) else {
                continue;
            };
            let Some(request) = m.loading else {
                continue;
            };
            let (transfer, after, upto) = (m.transfer, m.transfer_sent, m.live_from - 1);
            self.load_page(conn, &group, request, transfer, Some(after), upto);
        }
    }
}
