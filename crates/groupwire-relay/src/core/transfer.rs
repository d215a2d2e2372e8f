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
        // A spilled member following the log goes on while updates it was
        // not queued were committed during the read.
        let last = (last_seq >= upto && !(m.following && g.committed > upto))
            || m.role == Role::MembershipObserver;
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
            m.following = false;
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
        // A spill reads the updates back from the log; what the log does
        // not hold (membership notices to a watcher) stays queued. A
        // resync's `Joined` lists the members afresh.
        let spill = after.is_some();
        let dropped = self
            .sched
            .reset_queue(conn, g.id, |f| spill && is_notice(f)) as u64;
        let m = self.member_mut(conn, group).expect("checked above");
        m.live_from = head + 1;
        m.resync_dropped = announce.then_some(dropped);
        // A spill follows the log to the head; a resync blocks live
        // updates behind its transfer, as a join does.
        m.following = spill;
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
            max_bytes: self.page_bytes(conn),
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
        tracing::debug!(
            conn = conn.0,
            group,
            first,
            "a lagging member is served from the log"
        );
        self.restart_transfer(conn, group, Some(first - 1), false);
    }

    /// A member that does not read, behind a state transfer, has a
    /// spill's worth of live updates queued: they leave memory and the
    /// transfer goes on through them to the head (the member follows the
    /// log, as after a spill). Its next page asks for them; a page in
    /// flight asked for less and, ending short of what is committed, is
    /// not the last.
    pub(super) fn follow_log(&mut self, conn: ConnId, group: &str) {
        let Some(g) = self.groups.get(group) else {
            return;
        };
        let id = g.id;
        let Some(m) = g.members.get(&conn) else {
            return;
        };
        if m.loading.is_none() || m.following {
            return; // the transfer ended since; the queue is live again
        }
        self.sched.drop_live(conn, id, is_notice);
        if let Some(m) = self.member_mut(conn, group) {
            m.following = true;
        }
    }

    /// The page size of `conn`'s transfers: [`CoreConfig::transfer_page_bytes`],
    /// or four of its send windows if that is less (at least
    /// [`MIN_PAGE_BYTES`]).
    fn page_bytes(&self, conn: ConnId) -> usize {
        let window = self.sched.window(conn).unwrap_or(u64::MAX);
        let fits = usize::try_from(window.saturating_mul(4)).unwrap_or(usize::MAX);
        self.cfg.transfer_page_bytes.min(fits.max(MIN_PAGE_BYTES))
    }

    /// Loads the next page of every transfer whose last page went out.
    pub(super) fn load_next_pages(&mut self) {
        for (conn, id) in self.sched.take_refills() {
            let Some(group) = self.names.get(&id).cloned() else {
                continue;
            };
            let Some(g) = self.groups.get_mut(&group) else {
                continue;
            };
            let committed = g.committed;
            let Some(m) = g.members.get_mut(&conn) else {
                continue;
            };
            let Some(request) = m.loading else {
                continue;
            };
            if m.following {
                // Nothing was queued for it since: read up to the head.
                m.live_from = m.live_from.max(committed + 1);
            }
            let (transfer, after, upto) = (m.transfer, m.transfer_sent, m.live_from - 1);
            self.load_page(conn, &group, request, transfer, Some(after), upto);
        }
    }
}

/// The smallest page [`RelayCore::page_bytes`] chooses.
const MIN_PAGE_BYTES: usize = 16 << 10;

/// A frame the log does not hold (anything but a `Deliver`: membership
/// notices to a watcher), kept queued when the updates around it are
/// dropped to be read back from the log.
fn is_notice(f: &Bytes) -> bool {
    frame::FrameView::new_checked(f).is_ok_and(|v| v.kind() != Ok(frame::Kind::Deliver))
}
