//! Membership (Corona §4.2): sessions, group creation and deletion, joins
//! and leaves, roles, activity modes and priorities, and the membership
//! notices members get.

use super::*;

impl RelayCore {
    #[expect(clippy::too_many_arguments, reason = "the fields of Hello")]
    pub(super) fn on_hello(
        &mut self,
        now: Instant,
        conn: ConnId,
        req: u32,
        max_version: u8,
        window: u32,
        token: &str,
        name: String,
    ) {
        //= docs/relay-protocol.md#version-negotiation
        //# the relay answers Welcome with version = min(max_version, relay's
        //# highest)
        let version = max_version.min(frame::VERSION);
        if version < frame::MIN_VERSION {
            self.stats.unsupported_versions += 1;
            return self.fail(
                conn,
                req,
                ErrorCode::UNSUPPORTED_VERSION,
                &format!(
                    "client speaks up to version {max_version}, relay {}..={}",
                    frame::MIN_VERSION,
                    frame::VERSION
                ),
            );
        }
        let claims = match &self.cfg.auth_keys {
            None => Claims::anyone(),
            Some(keys) => {
                let unix = self.cfg.wall_epoch_unix_secs + now.as_nanos() / 1_000_000_000;
                match auth::verify(keys, token, unix) {
                    Ok(c) => c,
                    Err(e) => {
                        self.stats.auth_failures += 1;
                        return self.fail(conn, req, ErrorCode::UNAUTHORIZED, &e.to_string());
                    }
                }
            }
        };
        let window = if window == 0 {
            self.cfg.default_window
        } else {
            window.clamp(self.cfg.min_window, self.cfg.max_window)
        };
        self.sched
            .set_conn_limits(conn, u64::from(window), claims.max_priority);
        let c = self.conns.get_mut(&conn).expect("checked by handle_frame");
        c.claims = Some(claims);
        c.name = name;
        self.reply(
            conn,
            req,
            Frame::Welcome {
                version,
                client: conn.client_id(),
                max_frame: u32::try_from(self.cfg.max_frame).unwrap_or(u32::MAX),
                window,
                resume: true,
            },
        );
    }

    pub(super) fn on_create(
        &mut self,
        conn: ConnId,
        req: u32,
        group: String,
        group_type: String,
        priority: u8,
        initial_state: Bytes,
    ) {
        if group.is_empty() {
            return self.error(conn, req, ErrorCode::INVALID_ARGUMENT, "empty group name");
        }
        if !self.group_priority_allowed(conn, req, &group, priority, "creating") {
            return;
        }
        if self.groups.contains_key(&group) {
            return self.error(
                conn,
                req,
                ErrorCode::GROUP_EXISTS,
                &format!("group {group:?} exists"),
            );
        }
        self.insert_group(
            group.clone(),
            Group {
                id: GroupId(0),
                group_type: group_type.clone(),
                default_priority: priority,
                next_seq: 1,
                committed: 0,
                checkpoint_seq: 0,
                members: BTreeMap::new(),
                remote: BTreeMap::new(),
                locks: BTreeMap::new(),
                broken: false,
            },
        );
        self.storage_ops.push_back(StorageOp::CreateGroup {
            origin: Origin { conn, request: req },
            record: GroupRecord {
                name: group,
                group_type,
                priority,
                head_seq: 0,
                checkpoint_seq: 0,
            },
            initial_state,
        });
    }

    pub(super) fn on_delete(&mut self, now: Instant, conn: ConnId, req: u32, group: &str) {
        if !self.groups.contains_key(group) {
            return self.no_such_group(conn, req, group);
        }
        if !self.authorize(conn, req, group, Role::Principal, || {
            "token does not allow deleting this group".into()
        }) {
            return;
        }
        self.drop_group(group);
        self.storage_ops.push_back(StorageOp::DeleteGroup {
            group: group.into(),
        });
        let _ = now;
        self.reply(conn, req, Frame::Ok);
    }

    /// Removes `group` (deleted here or, in a cluster, through another
    /// node); its members get `GroupDeleted` and are no longer members.
    pub(super) fn drop_group(&mut self, group: &str) {
        let Some(g) = self.remove_group_entry(group) else {
            return;
        };
        for (&m, member) in &g.members {
            self.share_member(group, m, MembershipChange::Left, member.role, member.mode);
            if let Some(c) = self.conns.get_mut(&m) {
                c.groups.remove(group);
            }
            //= docs/relay-protocol.md#requests
            //# Members, the deleting client included if it is one, receive
            //# GroupDeleted
            self.push_control(
                m,
                0,
                &Frame::GroupDeleted {
                    group: group.into(),
                },
            );
        }
    }

    /// A `Join`: from the checkpoint, or, with `resume_after`, from the
    /// log after that sequence when the log still has it.
    pub(super) fn on_join(
        &mut self,
        now: Instant,
        conn: ConnId,
        req: u32,
        group: &str,
        (role, mode, watch): (Role, ActivityMode, bool),
        resume_after: Option<u64>,
    ) {
        if !self.groups.contains_key(group) {
            return self.no_such_group(conn, req, group);
        }
        if !self.authorize(conn, req, group, role, || {
            format!("token does not allow {} in {group:?}", role.as_str())
        }) {
            return;
        }
        let g = &self.groups[group];
        if g.members.contains_key(&conn) {
            return self.error(
                conn,
                req,
                ErrorCode::ALREADY_MEMBER,
                &format!("already in {group:?}"),
            );
        }
        // The transfer reads what is durable; updates committed later
        // (this node's appends in flight among them) are queued live behind
        // it. On a cluster an append in flight may yet be stored under a
        // later number, so a transfer up to `next_seq - 1` could ask the
        // log for an update that is not there.
        let head = g.committed;
        // A resume from before the checkpoint of a compacted log is a plain
        // join (the client sees `checkpoint_seq` above what it asked for);
        // one from beyond the head (this node has not yet followed what
        // another node delivered) starts at the head, and the client drops
        // the live updates it already has. If another node compacted past
        // `after` meanwhile, the first page says so and the transfer
        // starts over from the checkpoint (`on_loaded`).
        let after = resume_after
            .map(|s| s.min(head))
            .filter(|&s| s >= g.checkpoint_seq || !self.cfg.compact_on_checkpoint);
        self.groups
            .get_mut(group)
            .expect("checked above")
            .members
            .insert(
                conn,
                Member {
                    role,
                    mode,
                    watch,
                    live_from: head + 1,
                    loading: Some(req),
                    transfer: 0,
                    transfer_sent: 0,
                    resync_dropped: None,
                    resume: after,
                    following: false,
                },
            );
        self.roles_epoch += 1;
        if let Some(id) = self.group_id(group) {
            self.sched
                .add_queue(conn, id, member_priority(role, mode), now);
        }
        if let Some(c) = self.conns.get_mut(&conn) {
            c.groups.insert(group.into());
        }
        self.start_transfer(conn, group, req, after, head);
        self.notify(now, group, conn, MembershipChange::Joined, role, mode);
        self.share_member(group, conn, MembershipChange::Joined, role, mode);
    }

    pub(super) fn on_change_role(
        &mut self,
        now: Instant,
        conn: ConnId,
        req: u32,
        group: &str,
        role: Role,
    ) {
        let Some(m) = self.member(conn, req, group) else {
            return;
        };
        let old = m.role;
        let mode = m.mode;
        if !self.authorize(conn, req, group, role, || {
            format!("token does not allow {}", role.as_str())
        }) {
            return;
        }
        self.member_mut(conn, group).expect("checked above").role = role;
        self.roles_epoch += 1;
        self.member_changed(
            now,
            conn,
            req,
            group,
            MembershipChange::RoleChanged,
            role,
            mode,
        );
        // A membership observer received no updates: becoming an observer
        // or principal needs the state first.
        if old == Role::MembershipObserver && role != Role::MembershipObserver {
            self.start_resync(now, conn, group, false);
        }
    }

    pub(super) fn on_change_mode(
        &mut self,
        now: Instant,
        conn: ConnId,
        req: u32,
        group: &str,
        mode: ActivityMode,
    ) {
        let Some(m) = self.member(conn, req, group) else {
            return;
        };
        let role = m.role;
        self.member_mut(conn, group).expect("checked above").mode = mode;
        //= Litiu & Prakash §4.3
        //# The client priority within a group is decreased when the client
        //# indicates that its activity mode is changing from active to
        //# passive within a group, and restored when the client changes
        //# back to active mode.
        self.member_changed(
            now,
            conn,
            req,
            group,
            MembershipChange::ModeChanged,
            role,
            mode,
        );
    }

    /// `conn`'s token allows `role` in `group`; otherwise the request is
    /// refused with `FORBIDDEN`, saying `why()`, and counted.
    fn authorize(
        &mut self,
        conn: ConnId,
        req: u32,
        group: &str,
        role: Role,
        why: impl FnOnce() -> String,
    ) -> bool {
        if self.claims(conn).allows(group, role) {
            return true;
        }
        self.stats.forbidden += 1;
        self.error(conn, req, ErrorCode::FORBIDDEN, &why());
        false
    }

    /// `conn`'s role or mode in `group` is now `role` and `mode`: its
    /// queue's priority follows, the request is answered and the watchers
    /// are told `change`.
    #[expect(
        clippy::too_many_arguments,
        reason = "one membership change, spelled out as the notify it sends"
    )]
    fn member_changed(
        &mut self,
        now: Instant,
        conn: ConnId,
        req: u32,
        group: &str,
        change: MembershipChange,
        role: Role,
        mode: ActivityMode,
    ) {
        if let Some(id) = self.group_id(group) {
            self.sched
                .set_member_priority(conn, id, member_priority(role, mode));
        }
        self.reply(conn, req, Frame::Ok);
        self.notify(now, group, conn, change, role, mode);
        self.share_member(group, conn, change, role, mode);
    }

    /// Checks a group priority a principal asks for (create or change):
    /// within [`MAX_GROUP_PRIORITY`], a group the token allows, and under
    /// the token's priority cap. On refusal the error is sent and counted.
    pub(super) fn group_priority_allowed(
        &mut self,
        conn: ConnId,
        req: u32,
        group: &str,
        priority: u8,
        verb: &str,
    ) -> bool {
        if priority > MAX_GROUP_PRIORITY {
            self.error(
                conn,
                req,
                ErrorCode::INVALID_ARGUMENT,
                &format!("priority {priority} above {MAX_GROUP_PRIORITY}"),
            );
            return false;
        }
        let claims = self.claims(conn);
        if !claims.allows(group, Role::Principal) {
            self.stats.forbidden += 1;
            self.error(
                conn,
                req,
                ErrorCode::FORBIDDEN,
                &format!("token does not allow {verb} this group"),
            );
            return false;
        }
        if priority > claims.max_priority {
            self.stats.forbidden += 1;
            let cap = claims.max_priority;
            self.error(
                conn,
                req,
                ErrorCode::PRIORITY_NOT_ALLOWED,
                &format!("priority {priority} above the token's cap {cap}"),
            );
            return false;
        }
        true
    }

    pub(super) fn on_set_priority(&mut self, conn: ConnId, req: u32, group: &str, priority: u8) {
        if !self.group_priority_allowed(conn, req, group, priority, "changing") {
            return;
        }
        if !self.apply_group_priority(group, priority) {
            return self.no_such_group(conn, req, group);
        }
        self.storage_ops.push_back(StorageOp::SetPriority {
            group: group.into(),
            priority,
        });
        self.reply(conn, req, Frame::Ok);
    }

    /// Makes `priority` the default priority of `group` here (a
    /// `SetPriority` through this node, or through another one as the
    /// store reports it); false if there is no such group.
    pub(super) fn apply_group_priority(&mut self, group: &str, priority: u8) -> bool {
        let Some(g) = self.groups.get_mut(group) else {
            return false;
        };
        g.default_priority = priority;
        let id = g.id;
        self.sched.set_group_priority(id, priority);
        true
    }

    pub(super) fn remove_member(
        &mut self,
        now: Instant,
        conn: ConnId,
        group: &str,
        change: MembershipChange,
    ) {
        let Some(g) = self.groups.get_mut(group) else {
            return;
        };
        let Some(m) = g.members.remove(&conn) else {
            return;
        };
        self.roles_epoch += 1;
        let id = g.id;
        self.sched.remove_queue(conn, id);
        if let Some(c) = self.conns.get_mut(&conn) {
            c.groups.remove(group);
        }
        // Locks: release what it held, forget what it waited for.
        let g = self.groups.get_mut(group).expect("checked above");
        let mut cancelled = Vec::new();
        for l in g.locks.values_mut() {
            l.waiters.retain(|(w, r)| {
                if *w == conn {
                    cancelled.push(*r);
                }
                *w != conn
            });
        }
        let held: Vec<String> = g
            .locks
            .iter()
            .filter(|(_, l)| l.holder == conn)
            .map(|(n, l)| {
                // A grant still waiting for the store is a wait too.
                cancelled.extend(l.pending.map(|(r, _)| r));
                n.clone()
            })
            .collect();
        for lock in held {
            self.release_lock(group, &lock);
        }
        if matches!(change, MembershipChange::Left | MembershipChange::Evicted) {
            for r in cancelled {
                self.error(
                    conn,
                    r,
                    ErrorCode::NOT_MEMBER,
                    &format!("left {group:?} while waiting for a lock"),
                );
            }
        }
        self.notify(now, group, conn, change, m.role, m.mode);
        self.share_member(group, conn, change, m.role, m.mode);
    }

    //= Litiu & Prakash §4.2
    //# The delays in multicasting to principals should be largely
    //# independent of the number of observers. [...] It may even decide to
    //# disconnect the observers when the size of the group is too large and
    //# the server is overloaded by intense traffic.
    /// Removes observers from `group` down to
    /// [`CoreConfig::shed_observers_above`] members while the relay is
    /// overloaded: lowest member priority first (membership observers,
    /// then passive observers, then active ones), newest first among
    /// equals. Principals are never removed. Each one removed gets a
    /// `Membership { change: Evicted }` about itself, watchers the same.
    pub(super) fn shed_observers(&mut self, now: Instant, group: &str) {
        let cap = self.cfg.shed_observers_above;
        if cap == 0 || self.sched.queued_bytes() < self.cfg.overload_queued_bytes {
            return;
        }
        let Some(g) = self.groups.get(group) else {
            return;
        };
        if g.members.len() <= cap {
            return;
        }
        let mut observers: Vec<(u8, std::cmp::Reverse<ConnId>)> = g
            .members
            .iter()
            .filter(|(_, m)| m.role != Role::Principal)
            .map(|(&c, m)| (member_priority(m.role, m.mode), std::cmp::Reverse(c)))
            .collect();
        observers.sort_unstable();
        let excess = g.members.len() - cap;
        for (_, std::cmp::Reverse(conn)) in observers.into_iter().take(excess) {
            let Some(m) = self.groups.get(group).and_then(|g| g.members.get(&conn)) else {
                continue;
            };
            let (role, mode) = (m.role, m.mode);
            self.stats.observers_shed += 1;
            let evicted = self.membership(group, conn, MembershipChange::Evicted, role, mode);
            self.push_control(conn, 0, &evicted);
            self.remove_member(now, conn, group, MembershipChange::Evicted);
        }
    }

    /// With [`CoreConfig::shared_membership`]: tells the other relay
    /// nodes, through the store, that `conn` (now in `role` and `mode`)
    /// had `change` in `group`.
    fn share_member(
        &mut self,
        group: &str,
        conn: ConnId,
        change: MembershipChange,
        role: Role,
        mode: ActivityMode,
    ) {
        if !self.cfg.shared_membership {
            return;
        }
        let member = MemberInfo {
            client: conn.client_id(),
            name: self.conn_name(conn),
            role,
            mode,
        };
        self.storage_ops.push_back(StorageOp::Member {
            group: group.into(),
            member,
            change,
        });
    }

    /// A member of `group` connected to another relay node had `change`
    /// (from the store): listed from now on in `Joined` (or no longer),
    /// and announced to this node's watchers of the group.
    pub(super) fn on_remote_member(
        &mut self,
        now: Instant,
        group: &str,
        member: MemberInfo,
        change: MembershipChange,
    ) {
        let Some(g) = self.groups.get_mut(group) else {
            return; // deleted meanwhile
        };
        let leave = matches!(
            change,
            MembershipChange::Left | MembershipChange::Disconnected | MembershipChange::Evicted
        );
        if leave {
            if g.remote.remove(&member.client).is_none() {
                return;
            }
        } else {
            g.remote.insert(member.client, member.clone());
        }
        let notice = Frame::Membership(MembershipNotice {
            group: group.into(),
            client: member.client,
            name: member.name,
            change,
            role: member.role,
            mode: member.mode,
        });
        self.notify_watchers(now, group, None, &notice);
    }

    /// The name `conn` gave in `Hello` (empty once it is gone).
    pub(super) fn conn_name(&self, conn: ConnId) -> String {
        self.conns
            .get(&conn)
            .map(|c| c.name.clone())
            .unwrap_or_default()
    }

    /// A `Membership` notification about `about`.
    pub(super) fn membership(
        &self,
        group: &str,
        about: ConnId,
        change: MembershipChange,
        role: Role,
        mode: ActivityMode,
    ) -> Frame {
        Frame::Membership(MembershipNotice {
            group: group.into(),
            client: about.client_id(),
            name: self
                .conns
                .get(&about)
                .map(|c| c.name.clone())
                .unwrap_or_default(),
            change,
            role,
            mode,
        })
    }

    /// Tells watchers of `group` (members that joined with
    /// `watch_membership`, other than `about`) what happened.
    pub(super) fn notify(
        &mut self,
        now: Instant,
        group: &str,
        about: ConnId,
        change: MembershipChange,
        role: Role,
        mode: ActivityMode,
    ) {
        let notice = self.membership(group, about, change, role, mode);
        self.notify_watchers(now, group, Some(about), &notice);
    }

    /// Sends `notice` to the watchers of `group` other than `except`.
    fn notify_watchers(
        &mut self,
        now: Instant,
        group: &str,
        except: Option<ConnId>,
        notice: &Frame,
    ) {
        let Some(g) = self.groups.get(group) else {
            return;
        };
        let id = g.id;
        let watchers: Vec<ConnId> = g
            .members
            .iter()
            .filter(|(c, m)| Some(**c) != except && m.watch)
            .map(|(&c, _)| c)
            .collect();
        if watchers.is_empty() {
            return;
        }
        let frame = frame::encode(0, notice);
        for w in watchers {
            self.push(now, w, id, frame.clone());
        }
    }
}
