//! Scripted tests of the protocol core: frames in, frames out, storage run
//! in-line on the memory engine.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;

use super::*;
use crate::frame::{Envelope, decode, encode};
use crate::storage::{MemoryStorage, Storage, execute};

/// A core, a memory store and per-client inboxes. Clients credit what they
/// receive unless `stalled`.
struct Harness {
    core: RelayCore,
    store: MemoryStorage,
    inbox: BTreeMap<ConnId, Vec<Envelope>>,
    consumed: BTreeMap<ConnId, u64>,
    stalled: BTreeSet<ConnId>,
    closed: BTreeSet<ConnId>,
    now: Instant,
    next_conn: ConnId,
}

impl Harness {
    fn new(cfg: CoreConfig) -> Self {
        Self {
            core: RelayCore::new(cfg),
            store: MemoryStorage::new(),
            inbox: BTreeMap::new(),
            consumed: BTreeMap::new(),
            stalled: BTreeSet::new(),
            closed: BTreeSet::new(),
            now: Instant::ZERO,
            next_conn: ConnId(1),
        }
    }

    fn default() -> Self {
        Self::new(CoreConfig::default())
    }

    /// A harness whose scheduler is configured as `sched`.
    fn with_sched(sched: SchedulerConfig) -> Self {
        Self::new(CoreConfig {
            sched,
            ..CoreConfig::default()
        })
    }

    /// Connects, says Hello without a token and takes the `Welcome`.
    fn client(&mut self, name: &str) -> ConnId {
        let c = self.client_with_token(name, "");
        assert!(matches!(
            self.frames(c)[..],
            [Frame::Welcome { version: 1, .. }]
        ));
        c
    }

    fn client_with_token(&mut self, name: &str, token: &str) -> ConnId {
        let c = self.connect();
        self.input(
            c,
            1,
            Frame::Hello {
                max_version: 1,
                window: 0,
                token: token.into(),
                name: name.into(),
            },
        );
        self.pump();
        c
    }

    fn connect(&mut self) -> ConnId {
        let c = self.next_conn;
        self.next_conn = ConnId(self.next_conn.0 + 1);
        self.core.handle_connect(self.now, c);
        c
    }

    /// Feeds a frame without running storage or transmits.
    fn input(&mut self, conn: ConnId, req: u32, f: Frame) {
        self.core.handle_frame(self.now, conn, &encode(req, &f));
    }

    /// Feeds a frame and runs everything to quiescence.
    fn req(&mut self, conn: ConnId, req: u32, f: Frame) {
        self.input(conn, req, f);
        self.pump();
    }

    fn pump(&mut self) {
        while self.run_storage(|_| false) | self.run_transmits() {}
    }

    /// Runs the storage operations queued, those for which `later` holds
    /// after the others (a store that answers some reads late); `true`
    /// if there were any.
    fn run_storage(&mut self, later: impl Fn(&StorageOp) -> bool) -> bool {
        let (late, mut ops): (Vec<StorageOp>, Vec<StorageOp>) =
            std::iter::from_fn(|| self.core.poll_storage()).partition(|op| later(op));
        if ops.is_empty() && late.is_empty() {
            return false;
        }
        ops.extend(late);
        for done in execute(&mut self.store, ops) {
            self.core.handle_storage(self.now, done);
        }
        true
    }

    /// Takes every frame the core hands out (crediting them unless
    /// stalled); `true` if there were any.
    fn run_transmits(&mut self) -> bool {
        let mut progress = false;
        {
            let mut credits = Vec::new();
            while let Some(t) = self.core.poll_transmit(self.now) {
                progress = true;
                self.core.handle_written(t.conn, t.frame.len());
                let env = decode(&t.frame, usize::MAX).expect("the relay emits valid frames");
                self.inbox.entry(t.conn).or_default().push(env);
                let c = self.consumed.entry(t.conn).or_default();
                *c += t.frame.len() as u64;
                if t.close_after {
                    self.closed.insert(t.conn);
                } else if !self.stalled.contains(&t.conn) {
                    credits.push((t.conn, *c));
                }
            }
            for (conn, consumed) in credits {
                self.input(conn, 0, Frame::Credit { consumed });
            }
        }
        progress
    }

    fn advance(&mut self, d: Duration) {
        self.now += d;
        self.core.handle_timeout(self.now);
        self.pump();
    }

    fn take(&mut self, conn: ConnId) -> Vec<Envelope> {
        std::mem::take(self.inbox.entry(conn).or_default())
    }

    fn frames(&mut self, conn: ConnId) -> Vec<Frame> {
        self.take(conn).into_iter().map(|e| e.frame).collect()
    }

    fn create(&mut self, conn: ConnId, group: &str, state: &[u8]) {
        self.req(
            conn,
            9,
            Frame::CreateGroup {
                group: group.into(),
                group_type: "chat".into(),
                priority: DEFAULT_GROUP_PRIORITY,
                initial_state: Bytes::copy_from_slice(state),
            },
        );
        assert_eq!(self.frames(conn).last(), Some(&Frame::Ok));
    }

    fn join(&mut self, conn: ConnId, group: &str, role: Role) -> Vec<Frame> {
        self.req(conn, 10, join_frame(group, role, true));
        self.frames(conn)
    }

    /// Client `a`, principal of a new group `g` (empty state).
    fn principal_of_g(&mut self) -> ConnId {
        let a = self.client("a");
        self.create(a, "g", b"");
        self.join(a, "g", Role::Principal);
        a
    }

    /// Client `a`, principal of a new group `g` (state `state`), and
    /// client `slow`, an observer of it that reads nothing.
    fn slow_reader_of_g(&mut self, state: &[u8]) -> (ConnId, ConnId) {
        let a = self.client("a");
        let slow = self.client("slow");
        self.create(a, "g", state);
        self.join(a, "g", Role::Principal);
        self.join(slow, "g", Role::Observer);
        self.stalled.insert(slow);
        (a, slow)
    }

    /// `n` updates of `size` zero bytes from `conn` to `group`, running
    /// everything after each.
    fn flood(&mut self, conn: ConnId, group: &str, n: usize, size: usize) {
        for _ in 0..n {
            self.input(
                conn,
                5,
                Frame::Send {
                    group: group.into(),
                    msg_type: 0,
                    sent_at_micros: 0,
                    payload: Bytes::from(vec![0; size]),
                },
            );
            self.pump();
        }
    }

    /// Sends a checkpoint of `group` at `seq` holding `state`, as request
    /// `req` of `conn`, and runs everything.
    fn checkpoint(&mut self, conn: ConnId, req: u32, group: &str, seq: u64, state: &'static [u8]) {
        self.req(
            conn,
            req,
            Frame::Checkpoint {
                group: group.into(),
                seq,
                state: Bytes::from_static(state),
            },
        );
    }

    /// Client `a` creates `doc` (state `v0`), joins it as principal and
    /// sends `n` updates, the `i`th (from 1) holding `payload(i)`; runs
    /// everything.
    fn doc_of_a(&mut self, n: usize, payload: impl Fn(usize) -> String) -> ConnId {
        let a = self.client("a");
        self.create(a, "doc", b"v0");
        self.join(a, "doc", Role::Principal);
        for i in 1..=n {
            self.send(a, "doc", &payload(i));
        }
        self.pump();
        a
    }

    fn send(&mut self, conn: ConnId, group: &str, payload: &str) {
        self.input(
            conn,
            20,
            Frame::Send {
                group: group.into(),
                msg_type: 1,
                sent_at_micros: 5,
                payload: Bytes::copy_from_slice(payload.as_bytes()),
            },
        );
    }
}

/// A `Join` of `group` in `role`, active, not resuming, watching
/// membership if `watch`.
fn join_frame(group: &str, role: Role, watch: bool) -> Frame {
    Frame::Join {
        group: group.into(),
        role,
        mode: ActivityMode::Active,
        watch_membership: watch,
        resume_after: None,
    }
}

fn delivered(frames: &[Frame]) -> Vec<(u64, String)> {
    frames
        .iter()
        .filter_map(|f| match f {
            Frame::Deliver(Update { seq, payload, .. }) => {
                Some((*seq, String::from_utf8_lossy(payload).into_owned()))
            }
            _ => None,
        })
        .collect()
}

fn error_code(frames: &[Frame]) -> Option<ErrorCode> {
    frames.iter().find_map(|f| match f {
        Frame::Error { code, .. } => Some(*code),
        _ => None,
    })
}

#[test]
fn welcome_then_total_order_with_sequence_numbers_to_the_sender() {
    let mut h = Harness::default();
    let a = h.client("a");
    let b = h.client("b");
    h.create(a, "chat", b"");
    h.join(a, "chat", Role::Principal);
    h.join(b, "chat", Role::Principal);
    h.frames(a);
    for i in 0..5 {
        h.send(a, "chat", &format!("a{i}"));
        h.send(b, "chat", &format!("b{i}"));
    }
    h.pump();
    let fa = h.frames(a);
    let fb = h.frames(b);
    let da = delivered(&fa);
    assert_eq!(da.len(), 10);
    assert_eq!(da, delivered(&fb), "every member sees the same order");
    assert_eq!(
        da.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
        (1..=10).collect::<Vec<_>>()
    );
    // Arrival order: a0 b0 a1 b1 ...
    assert_eq!(da[0].1, "a0");
    assert_eq!(da[1].1, "b0");
    let sent: Vec<u64> = fa
        .iter()
        .filter_map(|f| match f {
            Frame::Sent { seq, .. } => Some(*seq),
            _ => None,
        })
        .collect();
    assert_eq!(sent, vec![1, 3, 5, 7, 9]);
}

#[test]
fn joiner_gets_checkpoint_and_log_with_no_gap_or_duplicate() {
    let mut h = Harness::default();
    let a = h.doc_of_a(4, |i| format!("u{i}"));
    h.checkpoint(a, 30, "doc", 3, b"v3");
    // Updates 5 and 6 are sequenced but not yet durable when b joins, and
    // 7 arrives right after: the boundary must still be exact. The
    // transfer reads the log up to 4 (the last durable), 5 to 7 reach b
    // live, behind it.
    h.send(a, "doc", "u5");
    h.send(a, "doc", "u6");
    let b = h.connect();
    h.input(
        b,
        1,
        Frame::Hello {
            max_version: 3,
            window: 0,
            token: String::new(),
            name: "b".into(),
        },
    );
    h.input(b, 2, join_frame("doc", Role::Observer, false));
    h.send(a, "doc", "u7");
    h.pump();
    let fb = h.frames(b);
    let joined = fb
        .iter()
        .find_map(|f| match f {
            Frame::Joined(JoinInfo {
                checkpoint_seq,
                head_seq,
                state,
                ..
            }) => Some((*checkpoint_seq, *head_seq, state.clone())),
            _ => None,
        })
        .expect("joined");
    assert_eq!(joined, (3, 4, Bytes::from_static(b"v3")));
    assert_eq!(
        delivered(&fb),
        vec![
            (4, "u4".into()),
            (5, "u5".into()),
            (6, "u6".into()),
            (7, "u7".into())
        ]
    );
}

#[test]
fn state_persists_when_everyone_leaves() {
    let mut h = Harness::default();
    let a = h.client("a");
    h.create(a, "g", b"init");
    h.join(a, "g", Role::Principal);
    h.send(a, "g", "x");
    h.pump();
    h.req(a, 3, Frame::Leave { group: "g".into() });
    h.core.handle_disconnect(h.now, a);
    let b = h.client("b");
    let fb = h.join(b, "g", Role::Observer);
    assert!(matches!(&fb[0], Frame::Joined(JoinInfo { state, .. }) if &state[..] == b"init"));
    assert_eq!(delivered(&fb), vec![(1, "x".into())]);
}

#[test]
fn roles_are_enforced() {
    let mut h = Harness::default();
    let p = h.client("p");
    let o = h.client("o");
    let mo = h.client("mo");
    h.create(p, "g", b"");
    h.join(p, "g", Role::Principal);
    h.join(o, "g", Role::Observer);
    h.join(mo, "g", Role::MembershipObserver);
    h.frames(p);
    h.send(o, "g", "nope");
    h.pump();
    assert_eq!(error_code(&h.frames(o)), Some(ErrorCode::FORBIDDEN));
    h.checkpoint(o, 4, "g", 0, b"");
    assert_eq!(error_code(&h.frames(o)), Some(ErrorCode::FORBIDDEN));
    h.send(p, "g", "yes");
    h.pump();
    assert_eq!(delivered(&h.frames(o)), vec![(1, "yes".into())]);
    // The membership observer sees membership changes, never updates.
    let fmo = h.frames(mo);
    assert!(delivered(&fmo).is_empty());
    let other = h.client("late");
    h.join(other, "g", Role::Observer);
    let fmo = h.frames(mo);
    assert!(
        fmo.iter()
            .any(|f| matches!(f, Frame::Membership(MembershipNotice { change: MembershipChange::Joined, name, .. }) if name == "late"))
    );
    assert!(h.core.stats().forbidden >= 2);
}

#[test]
fn a_crash_is_a_leave_announced_to_watchers_and_others_carry_on() {
    let mut h = Harness::default();
    let a = h.client("a");
    let b = h.client("b");
    h.create(a, "g", b"");
    h.join(a, "g", Role::Principal);
    h.join(b, "g", Role::Principal);
    h.frames(a);
    h.core.handle_disconnect(h.now, b);
    h.pump();
    let fa = h.frames(a);
    assert!(fa.iter().any(|f| matches!(
        f,
        Frame::Membership(MembershipNotice {
            change: MembershipChange::Disconnected,
            ..
        })
    )));
    h.send(a, "g", "still here");
    h.pump();
    assert_eq!(delivered(&h.frames(a)), vec![(1, "still here".into())]);
}

#[test]
fn a_disconnect_is_announced_with_the_members_name() {
    let mut h = Harness::default();
    let a = h.client("alice");
    let b = h.client("bob");
    let c = h.client("carol");
    h.create(a, "g", b"");
    h.join(a, "g", Role::Principal);
    h.join(b, "g", Role::Principal);
    h.join(c, "g", Role::Observer);
    h.frames(a);
    // A clean disconnect and a fatal error (credit for bytes never sent).
    h.core.handle_disconnect(h.now, b);
    h.req(c, 7, Frame::Credit { consumed: 1 << 40 });
    let names: Vec<(String, MembershipChange)> = h
        .frames(a)
        .into_iter()
        .filter_map(|f| match f {
            Frame::Membership(MembershipNotice { name, change, .. }) => Some((name, change)),
            _ => None,
        })
        .collect();
    assert_eq!(
        names,
        vec![
            ("bob".into(), MembershipChange::Disconnected),
            ("carol".into(), MembershipChange::Disconnected)
        ]
    );
}

#[test]
fn the_member_who_deletes_a_group_gets_group_deleted_before_its_ok() {
    let mut h = Harness::default();
    let a = h.principal_of_g();
    h.frames(a);
    h.req(a, 2, Frame::DeleteGroup { group: "g".into() });
    assert_eq!(
        h.frames(a),
        vec![Frame::GroupDeleted { group: "g".into() }, Frame::Ok]
    );
}

#[test]
fn membership_observers_get_membership_events_only_when_they_watch() {
    let mut h = Harness::default();
    let p = h.client("p");
    let quiet = h.client("quiet");
    let watching = h.client("watching");
    h.create(p, "g", b"");
    h.join(p, "g", Role::Principal);
    for (c, watch) in [(quiet, false), (watching, true)] {
        h.req(
            c,
            3,
            Frame::Join {
                group: "g".into(),
                role: Role::MembershipObserver,
                mode: ActivityMode::Active,
                watch_membership: watch,
                resume_after: None,
            },
        );
    }
    h.frames(quiet);
    h.frames(watching);
    let late = h.client("late");
    h.join(late, "g", Role::Observer);
    h.req(late, 4, Frame::Leave { group: "g".into() });
    let membership = |fs: Vec<Frame>| {
        fs.into_iter()
            .filter(|f| matches!(f, Frame::Membership(MembershipNotice { .. })))
            .count()
    };
    assert_eq!(membership(h.frames(quiet)), 0);
    assert_eq!(membership(h.frames(watching)), 2);
}

#[test]
fn many_groups_over_one_connection_and_not_member_errors() {
    let mut h = Harness::default();
    let a = h.client("a");
    h.create(a, "g1", b"");
    h.create(a, "g2", b"");
    h.join(a, "g1", Role::Principal);
    h.join(a, "g2", Role::Principal);
    h.send(a, "g1", "one");
    h.send(a, "g2", "two");
    h.send(a, "g3", "three");
    h.pump();
    let fa = h.frames(a);
    assert_eq!(delivered(&fa).len(), 2);
    assert_eq!(error_code(&fa), Some(ErrorCode::NOT_MEMBER));
    h.req(a, 5, Frame::Leave { group: "g1".into() });
    h.send(a, "g1", "gone");
    h.pump();
    assert_eq!(error_code(&h.frames(a)), Some(ErrorCode::NOT_MEMBER));
}

#[test]
fn locks_wait_try_release_and_crash_release() {
    let mut h = Harness::default();
    let a = h.client("a");
    let b = h.client("b");
    let c = h.client("c");
    h.create(a, "g", b"");
    for x in [a, b, c] {
        h.join(x, "g", Role::Principal);
    }
    let acquire = |wait| Frame::LockAcquire {
        group: "g".into(),
        lock: "pen".into(),
        wait,
    };
    let release = Frame::LockRelease {
        group: "g".into(),
        lock: "pen".into(),
    };
    h.req(a, 1, acquire(true));
    assert_eq!(h.frames(a).last(), Some(&Frame::Ok));
    h.req(b, 2, acquire(false));
    assert_eq!(error_code(&h.frames(b)), Some(ErrorCode::LOCK_BUSY));
    h.req(b, 3, acquire(true));
    h.req(c, 4, acquire(true));
    assert!(h.frames(b).is_empty(), "b waits");
    h.req(a, 5, acquire(true));
    assert_eq!(error_code(&h.frames(a)), Some(ErrorCode::ALREADY_HELD));
    h.req(c, 6, release.clone());
    assert_eq!(error_code(&h.frames(c)), Some(ErrorCode::NOT_HOLDER));
    h.req(a, 7, release.clone());
    assert_eq!(h.frames(a).last(), Some(&Frame::Ok));
    let fb = h.take(b);
    assert!(matches!(
        &fb[..],
        [Envelope {
            request: 3,
            frame: Frame::LockGranted { .. }
        }]
    ));
    // b crashes while holding the lock: c, next in line, gets it.
    h.core.handle_disconnect(h.now, b);
    h.pump();
    let fc = h.take(c);
    assert!(
        fc.iter()
            .any(|e| e.request == 4 && matches!(e.frame, Frame::LockGranted { .. }))
    );
    assert_eq!(h.core.stats().lock_errors, 3);
}

#[test]
fn checkpoints_are_bounded_by_the_committed_head() {
    let mut h = Harness::default();
    let a = h.principal_of_g();
    h.send(a, "g", "1");
    h.pump();
    let ck = |seq| Frame::Checkpoint {
        group: "g".into(),
        seq,
        state: Bytes::from_static(b"s"),
    };
    h.req(a, 1, ck(5));
    assert_eq!(error_code(&h.frames(a)), Some(ErrorCode::BAD_CHECKPOINT));
    h.req(a, 2, ck(1));
    assert_eq!(h.frames(a).last(), Some(&Frame::Ok));
    h.req(a, 3, ck(0));
    assert_eq!(error_code(&h.frames(a)), Some(ErrorCode::BAD_CHECKPOINT));
    // Compacted: the log before 1 is gone, a joiner starts from the checkpoint.
    assert!(
        h.store
            .read_log("g", 0, 10, usize::MAX)
            .expect("log")
            .is_empty()
    );
}

#[test]
fn delete_notifies_members_and_forgets_the_group() {
    let mut h = Harness::default();
    let a = h.client("a");
    let b = h.client("b");
    h.create(a, "g", b"");
    h.join(b, "g", Role::Observer);
    h.req(a, 2, Frame::DeleteGroup { group: "g".into() });
    assert_eq!(h.frames(a).last(), Some(&Frame::Ok));
    assert!(
        h.frames(b)
            .contains(&Frame::GroupDeleted { group: "g".into() })
    );
    h.req(b, 3, join_frame("g", Role::Observer, false));
    assert_eq!(error_code(&h.frames(b)), Some(ErrorCode::NO_SUCH_GROUP));
    assert!(h.store.load_groups().expect("groups").is_empty());
}

/// The core numbers groups: a group deleted and created again under its
/// name is a new group to the scheduler (no demotion, no queue carried
/// over from the old one).
#[test]
fn a_group_created_again_under_its_name_starts_afresh() {
    let mut h = Harness::default();
    let a = h.client("a");
    let b = h.client("b");
    h.create(a, "g", b"");
    h.join(a, "g", Role::Principal);
    h.join(b, "g", Role::Observer);
    h.flood(a, "g", 40, 50_000);
    assert_eq!(
        h.core.instant_priority("g"),
        Some(DEFAULT_GROUP_PRIORITY - 2)
    );
    h.req(a, 2, Frame::DeleteGroup { group: "g".into() });
    assert_eq!(h.core.instant_priority("g"), None);
    assert!(h.core.queue_depths().is_empty(), "queues go with the group");
    // Clients that have not used up their windows in the old group's flood.
    let (c, d) = (h.client("c"), h.client("d"));
    h.create(d, "g", b"");
    assert_eq!(h.core.instant_priority("g"), Some(DEFAULT_GROUP_PRIORITY));
    h.join(c, "g", Role::Observer);
    let depths = h.core.queue_depths();
    assert_eq!(depths.len(), 1, "{depths:?}");
    assert_eq!((depths[0].conn, depths[0].group.as_str()), (c, "g"));
    h.join(d, "g", Role::Principal);
    h.send(d, "g", "hello");
    h.pump();
    assert_eq!(delivered(&h.frames(c)), vec![(1, "hello".to_owned())]);
}

#[test]
fn bad_input_is_answered_counted_and_closed() {
    let mut h = Harness::default();
    // Garbage before Hello.
    let c = h.connect();
    h.core.handle_frame(
        h.now,
        c,
        &Bytes::from_static(b"\x00\x00\x00\x08\x01\xff\x00\x00\x00\x00\x00\x01"),
    );
    h.pump();
    assert_eq!(error_code(&h.frames(c)), Some(ErrorCode::MALFORMED));
    assert!(h.closed.contains(&c));
    // A request before Hello.
    let c = h.connect();
    h.req(c, 1, Frame::Ping { nonce: 1 });
    assert_eq!(
        error_code(&h.frames(c)),
        Some(ErrorCode::PROTOCOL_VIOLATION)
    );
    // A relay-only kind, a second Hello, bad credit.
    for f in [
        Frame::Ok,
        Frame::Hello {
            max_version: 1,
            window: 0,
            token: String::new(),
            name: String::new(),
        },
        Frame::Credit { consumed: u64::MAX },
    ] {
        let c = h.client("x");
        h.frames(c);
        h.req(c, 1, f);
        assert_eq!(
            error_code(&h.frames(c)),
            Some(ErrorCode::PROTOCOL_VIOLATION)
        );
        assert!(h.closed.contains(&c));
    }
    // A frame in another version.
    let c = h.client("v");
    let mut b = encode(1, &Frame::Ping { nonce: 1 }).to_vec();
    b[4] = 2;
    h.core.handle_frame(h.now, c, &Bytes::from(b));
    h.pump();
    assert_eq!(
        error_code(&h.frames(c)),
        Some(ErrorCode::UNSUPPORTED_VERSION)
    );
    // Oversized (as the driver's decoder reports it).
    let c = h.client("big");
    h.core.handle_stream_error(
        h.now,
        c,
        &FrameError::TooLarge {
            len: 1 << 30,
            max: 1 << 20,
        },
    );
    h.pump();
    assert_eq!(error_code(&h.frames(c)), Some(ErrorCode::FRAME_TOO_LARGE));
    let s = h.core.stats();
    assert_eq!(
        (
            s.malformed_frames,
            s.protocol_violations,
            s.unsupported_versions,
            s.oversized_frames
        ),
        (1, 4, 1, 1)
    );
    // Frames after the close are ignored.
    h.req(c, 1, Frame::Ping { nonce: 1 });
    assert!(h.frames(c).is_empty());
}

#[test]
fn tokens_limit_groups_roles_and_priority() {
    let secret = b"s3cret".to_vec();
    let mut h = Harness::new(CoreConfig {
        auth_keys: Some(auth::Keys::single("k", &secret).expect("key")),
        ..CoreConfig::default()
    });
    // The harness clock starts at the Unix epoch.
    let exp = 3600;
    let bad = h.client_with_token("x", "garbage.token");
    assert_eq!(error_code(&h.frames(bad)), Some(ErrorCode::UNAUTHORIZED));
    let none = h.client_with_token("none", "");
    assert_eq!(error_code(&h.frames(none)), Some(ErrorCode::UNAUTHORIZED));
    let admin = auth::mint(
        "k",
        &secret,
        &Claims {
            expires_unix: exp,
            ..Claims::anyone()
        },
    )
    .expect("mint");
    let a = h.client_with_token("admin", &admin);
    h.create(a, "chat", b"");
    h.create(a, "secret", b"");
    let limited = auth::mint(
        "k",
        &secret,
        &Claims {
            subject: "guest".into(),
            groups: vec!["chat".into()],
            max_role: Role::Observer,
            max_priority: 2,
            issued_unix: 0,
            expires_unix: exp,
        },
    )
    .expect("mint");
    let g = h.client_with_token("guest", &limited);
    assert!(matches!(h.frames(g)[..], [Frame::Welcome { .. }]));
    for (role, group, want) in [
        (Role::Principal, "chat", Some(ErrorCode::FORBIDDEN)),
        (Role::Observer, "secret", Some(ErrorCode::FORBIDDEN)),
        (Role::Observer, "chat", None),
    ] {
        let f = h.join(g, group, role);
        assert_eq!(error_code(&f), want, "{role:?} in {group}");
    }
    h.req(
        g,
        5,
        Frame::CreateGroup {
            group: "chat2".into(),
            group_type: String::new(),
            priority: 1,
            initial_state: Bytes::new(),
        },
    );
    assert_eq!(error_code(&h.frames(g)), Some(ErrorCode::FORBIDDEN));
    // The priority cap holds for the guest's queues.
    let depths = h.core.queue_depths();
    let q = depths.iter().find(|d| d.conn == g).expect("guest queue");
    assert!(q.priority <= 2, "{q:?}");
}

#[test]
fn passive_members_and_burst_groups_get_lower_priority() {
    let mut h = Harness::default();
    let a = h.principal_of_g();
    let prio = |h: &Harness| h.core.queue_depths()[0].priority;
    let active = prio(&h);
    h.req(
        a,
        2,
        Frame::ChangeMode {
            group: "g".into(),
            mode: ActivityMode::Passive,
        },
    );
    assert_eq!(prio(&h), active - 1);
    h.req(
        a,
        3,
        Frame::ChangeRole {
            group: "g".into(),
            role: Role::Observer,
        },
    );
    assert_eq!(prio(&h), active - 2);
    // 2 MB in one burst window: above the 1 MiB/s threshold.
    h.req(
        a,
        4,
        Frame::ChangeRole {
            group: "g".into(),
            role: Role::Principal,
        },
    );
    h.flood(a, "g", 40, 50_000);
    assert_eq!(
        h.core.instant_priority("g"),
        Some(DEFAULT_GROUP_PRIORITY - 2)
    );
    assert_eq!(h.core.stats().sched.burst_demotions, 1);
    h.advance(Duration::from_secs(2));
    assert_eq!(h.core.instant_priority("g"), Some(DEFAULT_GROUP_PRIORITY));
    assert_eq!(h.core.stats().sched.burst_restores, 1);
}

#[test]
fn a_client_that_never_reads_is_resynchronized_then_catches_up() {
    let mut h = Harness::with_sched(SchedulerConfig {
        slow_policy: crate::sched::SlowConsumerPolicy::Resync,
        slow_agings: 1,
        ..SchedulerConfig::default()
    });
    let (a, slow) = h.slow_reader_of_g(b"s0");
    for i in 0..200 {
        h.send(a, "g", &format!("{i:0>2000}"));
    }
    h.pump();
    h.take(slow);
    h.checkpoint(a, 7, "g", 200, b"s200");
    h.advance(Duration::from_secs(3));
    assert_eq!(h.core.stats().sched.agings, 1);
    assert_eq!(h.core.stats().sched.slow_resyncs, 1);
    assert!(h.core.stats().sched.dropped_frames > 0);
    // The slow client reads again: it gets Resync, a fresh Joined from the
    // checkpoint, then only updates after its new head.
    h.stalled.remove(&slow);
    let consumed = h.consumed[&slow];
    h.req(slow, 0, Frame::Credit { consumed });
    let fs = h.frames(slow);
    assert!(
        matches!(fs[0], Frame::Resync { dropped, .. } if dropped > 0),
        "{:?}",
        &fs[..1]
    );
    assert!(matches!(
        &fs[1],
        Frame::Joined(JoinInfo {
            checkpoint_seq: 200,
            head_seq: 200,
            ..
        })
    ));
    assert!(delivered(&fs).is_empty());
    h.send(a, "g", "fresh");
    h.pump();
    assert_eq!(delivered(&h.frames(slow)), vec![(201, "fresh".into())]);
}

#[test]
fn memory_stays_bounded_when_a_client_never_reads() {
    let mut h = Harness::with_sched(SchedulerConfig {
        slow_policy: crate::sched::SlowConsumerPolicy::Disconnect,
        max_client_queue_bytes: 1 << 20,
        ..SchedulerConfig::default()
    });
    let (a, slow) = h.slow_reader_of_g(b"");
    h.flood(a, "g", 100, 50_000);
    let s = h.core.stats();
    assert_eq!(s.sched.slow_disconnects, 1);
    assert!(h.closed.contains(&slow));
    assert!(s.sched.max_queued_bytes < 2 << 20, "{s:?}");
    assert_eq!(error_code(&h.frames(slow)), Some(ErrorCode::SLOW_CONSUMER));
    assert_eq!(
        delivered(&h.frames(a)).len(),
        100,
        "the reader is not disturbed"
    );
}

#[test]
fn a_publisher_that_never_reads_its_own_group_is_not_dropped() {
    // The isolation bench's firehose sender is also a member of the
    // firehose: its own copies overflow the cap while its acknowledgements
    // are queued. The overflow must be handled by the policy (a spill);
    // the acknowledgement after it must not count against the same cap.
    let mut h = Harness::with_sched(SchedulerConfig {
        max_client_queue_bytes: 1 << 20,
        ..SchedulerConfig::default()
    });
    let a = h.principal_of_g();
    h.stalled.insert(a);
    h.flood(a, "g", 100, 50_000);
    let s = h.core.stats();
    assert!(!h.closed.contains(&a), "{s:?}");
    assert_eq!(s.sched.slow_disconnects, 0, "{s:?}");
    assert!(s.sched.slow_spills > 0, "{s:?}");
    assert!(s.sched.max_queued_bytes < 2 << 20, "{s:?}");
}

#[test]
fn a_member_past_the_cap_spills_to_the_log_and_misses_nothing() {
    // The default policy (demote): at the cap the backlog leaves memory and
    // is read back from the log later, with no resync and no gap.
    let mut h = Harness::new(CoreConfig {
        transfer_page_bytes: 64 << 10,
        sched: SchedulerConfig {
            max_client_queue_bytes: 256 << 10,
            ..SchedulerConfig::default()
        },
        ..CoreConfig::default()
    });
    let a = h.principal_of_g();
    let slow = join_stalled_to(&mut h, "slow", "g");
    let mut max_queued = 0;
    for i in 1..=200 {
        h.send(a, "g", &format!("{i:0>5000}"));
        h.pump();
        let q: usize = h
            .core
            .queue_depths()
            .iter()
            .filter(|d| d.conn == slow)
            .map(|d| d.bytes)
            .sum();
        max_queued = max_queued.max(q);
    }
    let s = h.core.stats();
    assert!(s.sched.slow_spills > 0, "{s:?}");
    assert_eq!(s.sched.slow_resyncs, 0, "{s:?}");
    // 1 MB sent; the stalled member never holds more than the cap and a page.
    assert!(max_queued < (256 + 64 + 16) << 10, "{max_queued}");
    let fs = catch_up(&mut h, slow);
    assert!(!fs.iter().any(|f| matches!(f, Frame::Resync { .. })));
    let seqs: Vec<u64> = delivered(&fs).iter().map(|(s, _)| *s).collect();
    assert_eq!(seqs, (1..=200).collect::<Vec<_>>(), "no gap, no duplicate");
    // And it is live again.
    h.send(a, "g", "live");
    h.pump();
    assert_eq!(delivered(&h.frames(slow)), vec![(201, "live".into())]);
}

/// A harness whose lagging queues spill early (`spill` bytes), with
/// state-transfer pages of `page` bytes, and a principal `a` in `g`.
fn early_spill(spill: usize, page: usize) -> (Harness, ConnId) {
    let mut h = Harness::new(CoreConfig {
        transfer_page_bytes: page,
        sched: SchedulerConfig {
            spill_queue_bytes: spill,
            ..SchedulerConfig::default()
        },
        ..CoreConfig::default()
    });
    let a = h.principal_of_g();
    (h, a)
}

/// Bytes queued for `conn`, all groups.
fn queued_for(h: &Harness, conn: ConnId) -> usize {
    h.core
        .queue_depths()
        .iter()
        .filter(|d| d.conn == conn)
        .map(|d| d.bytes)
        .sum()
}

#[test]
fn a_lagging_member_follows_the_log_and_costs_one_page_however_long_it_lags() {
    // Far below the 32 MiB cap: past `spill_queue_bytes` the lagging
    // member is served from the log, and nothing more is queued for it
    // while it lags, however many updates go by.
    let (mut h, a) = early_spill(64 << 10, 16 << 10);
    let slow = join_stalled_to(&mut h, "slow", "g");
    let mut max_queued = 0;
    for i in 1..=1000 {
        h.send(a, "g", &format!("{i:0>1000}"));
        h.pump();
        max_queued = max_queued.max(queued_for(&h, slow));
    }
    let s = h.core.stats();
    assert!(s.sched.slow_spills > 0, "{s:?}");
    assert_eq!(s.sched.slow_resyncs, 0, "{s:?}");
    // 1 MB went by; the member held at most the threshold and a page.
    assert!(max_queued < (64 + 16 + 2) << 10, "{max_queued}");
    // Once it spilled, the queue holds one page, not the updates since.
    assert!(queued_for(&h, slow) <= (16 + 2) << 10);
    let fs = catch_up(&mut h, slow);
    assert!(!fs.iter().any(|f| matches!(f, Frame::Resync { .. })));
    let seqs: Vec<u64> = delivered(&fs).iter().map(|(s, _)| *s).collect();
    assert_eq!(seqs, (1..=1000).collect::<Vec<_>>(), "no gap, no duplicate");
    // Caught up: live again.
    h.send(a, "g", "live");
    h.pump();
    assert_eq!(delivered(&h.frames(slow)), vec![(1001, "live".into())]);
}

#[test]
fn updates_committed_while_a_page_is_read_reach_a_following_member_once() {
    // Each page is answered after an update committed meanwhile (a store
    // that answers reads late): the member, queued nothing live, must get
    // that update from a later page, then go live, with no gap or
    // duplicate.
    let (mut h, a) = early_spill(16 << 10, 4 << 10);
    let slow = join_stalled_to(&mut h, "slow", "g");
    for i in 1..=200 {
        h.send(a, "g", &format!("{i:0>500}"));
        h.pump();
    }
    assert!(h.core.stats().sched.slow_spills > 0);
    h.stalled.remove(&slow);
    let mut fs = Vec::new();
    let mut n = 200;
    for _ in 0..500 {
        // An update commits before the page asked for last is read ...
        n += 1;
        h.send(a, "g", &format!("{n:0>500}"));
        h.run_storage(|op| matches!(op, StorageOp::Load { .. }));
        // ... and the member's credit lets that page out, which asks for
        // the next.
        let consumed = h.consumed[&slow];
        h.input(slow, 0, Frame::Credit { consumed });
        h.run_transmits();
        fs.extend(h.frames(slow));
    }
    fs.extend(catch_up(&mut h, slow));
    assert!(!fs.iter().any(|f| matches!(f, Frame::Resync { .. })));
    let seqs: Vec<u64> = delivered(&fs).iter().map(|(s, _)| *s).collect();
    assert_eq!(seqs, (1..=n).collect::<Vec<_>>(), "no gap, no duplicate");
}

#[test]
fn a_spill_keeps_the_membership_notices_the_log_does_not_hold() {
    let (mut h, a) = early_spill(16 << 10, 4 << 10);
    // A watching observer that reads nothing.
    let w = h.connect();
    h.input(
        w,
        1,
        Frame::Hello {
            max_version: 1,
            window: 4096,
            token: String::new(),
            name: "w".into(),
        },
    );
    h.stalled.insert(w);
    h.input(w, 2, join_frame("g", Role::Observer, true));
    h.pump();
    for i in 1..=20 {
        h.send(a, "g", &format!("{i:0>500}"));
        h.pump();
    }
    // Someone joins while w lags; more updates then spill w's queue.
    let x = h.client("x");
    h.req(x, 3, join_frame("g", Role::Observer, false));
    for i in 21..=200 {
        h.send(a, "g", &format!("{i:0>500}"));
        h.pump();
    }
    assert!(h.core.stats().sched.slow_spills > 0);
    let fs = catch_up(&mut h, w);
    let seqs: Vec<u64> = delivered(&fs).iter().map(|(s, _)| *s).collect();
    assert_eq!(seqs, (1..=200).collect::<Vec<_>>(), "no gap, no duplicate");
    assert!(
        fs.iter().any(|f| matches!(
            f,
            Frame::Membership(MembershipNotice { change: MembershipChange::Joined, client, .. })
                if *client == x.client_id()
        )),
        "the join notice survives the spill: {fs:?}"
    );
}

/// Lagging queues spill at 64 KiB, pages are 16 KiB, and `doc` has a
/// principal `a` and 300 updates of 1000 bytes in its log.
fn long_doc_with_early_spill() -> (Harness, ConnId) {
    let mut h = Harness::new(CoreConfig {
        transfer_page_bytes: 16 << 10,
        sched: SchedulerConfig {
            spill_queue_bytes: 64 << 10,
            ..SchedulerConfig::default()
        },
        ..CoreConfig::default()
    });
    let a = h.doc_of_a(300, |i| format!("{i:0>1000}"));
    h.take(a);
    (h, a)
}

#[test]
fn a_joiner_that_does_not_read_holds_a_page_not_the_updates_behind_its_transfer() {
    // A long log (300 updates) and a joiner that reads nothing: its
    // transfer stalls on the first page while updates keep coming. Past
    // `spill_queue_bytes` those leave memory and the transfer goes on
    // through them from the log.
    let (mut h, a) = long_doc_with_early_spill();
    let b = join_stalled(&mut h, "b");
    let mut max_queued = 0;
    for i in 301..=1300 {
        h.send(a, "doc", &format!("{i:0>1000}"));
        h.pump();
        max_queued = max_queued.max(queued_for(&h, b));
    }
    assert!(h.core.stats().sched.slow_spills > 0);
    assert!(max_queued < (64 + 16 + 2) << 10, "{max_queued}");
    let fs = catch_up(&mut h, b);
    assert!(!fs.iter().any(|f| matches!(f, Frame::Resync { .. })));
    assert!(matches!(
        fs.iter().find(|f| matches!(f, Frame::Joined(_))),
        Some(Frame::Joined(JoinInfo { head_seq: 300, .. }))
    ));
    let seqs: Vec<u64> = delivered(&fs).iter().map(|(s, _)| *s).collect();
    assert_eq!(seqs, (1..=1300).collect::<Vec<_>>(), "no gap, no duplicate");
    h.send(a, "doc", "live");
    h.pump();
    assert_eq!(delivered(&h.frames(b)), vec![(1301, "live".into())]);
}

#[test]
fn a_joiner_that_reads_keeps_the_updates_behind_its_transfer_queued() {
    // The same busy group, but the joiner reads: it is never made to
    // follow the log (which would hold it to the speed of storage reads).
    let (mut h, a) = long_doc_with_early_spill();
    let b = h.client("b");
    // Updates arrive in bursts while the transfer is paged: each page is
    // answered only after them.
    h.input(b, 2, join_frame("doc", Role::Observer, false));
    for i in 301..=1300 {
        h.send(a, "doc", &format!("{i:0>1000}"));
        h.run_storage(|op| matches!(op, StorageOp::Load { .. }));
        h.run_transmits();
    }
    h.pump();
    assert_eq!(h.core.stats().sched.slow_spills, 0);
    let seqs: Vec<u64> = delivered(&h.frames(b)).iter().map(|(s, _)| *s).collect();
    assert_eq!(seqs, (1..=1300).collect::<Vec<_>>(), "no gap, no duplicate");
}

/// A harness with small state-transfer pages, a principal `a` in `doc`
/// and `n` updates of `size` bytes in the log.
fn paged_log(page: usize, n: usize, size: usize) -> (Harness, ConnId) {
    let mut h = Harness::new(CoreConfig {
        transfer_page_bytes: page,
        ..CoreConfig::default()
    });
    let a = h.doc_of_a(n, |i| format!("{i:0>size$}"));
    h.take(a);
    (h, a)
}

/// Joins `doc` with the smallest send window and reads nothing.
fn join_stalled(h: &mut Harness, name: &str) -> ConnId {
    join_stalled_to(h, name, "doc")
}

/// Joins `group` as an observer with the smallest send window and reads
/// nothing.
fn join_stalled_to(h: &mut Harness, name: &str, group: &str) -> ConnId {
    let b = h.connect();
    h.input(
        b,
        1,
        Frame::Hello {
            max_version: 1,
            window: 4096,
            token: String::new(),
            name: name.into(),
        },
    );
    h.stalled.insert(b);
    h.input(b, 2, join_frame(group, Role::Observer, false));
    h.pump();
    b
}

fn catch_up(h: &mut Harness, b: ConnId) -> Vec<Frame> {
    let mut out = Vec::new();
    h.stalled.remove(&b);
    loop {
        let consumed = h.consumed[&b];
        h.req(b, 0, Frame::Credit { consumed });
        let fs = h.frames(b);
        if fs.is_empty() {
            return out;
        }
        out.extend(fs);
    }
}

#[test]
fn a_long_log_is_transferred_in_pages_and_memory_stays_at_one_page() {
    let (mut h, a) = paged_log(64 << 10, 300, 10_000);
    let b = join_stalled(&mut h, "b");
    let queued: usize = h
        .core
        .queue_depths()
        .iter()
        .filter(|d| d.conn == b)
        .map(|d| d.bytes)
        .sum();
    // 3 MB of log; the stalled joiner holds at most one page (+ a frame).
    assert!(
        queued < 80 << 10,
        "{queued} bytes queued for a stalled joiner"
    );
    h.send(a, "doc", "live");
    h.pump();
    let fs = catch_up(&mut h, b);
    assert!(matches!(
        fs.iter()
            .find(|f| matches!(f, Frame::Joined(JoinInfo { .. }))),
        Some(Frame::Joined(JoinInfo { head_seq: 300, .. }))
    ));
    let seqs: Vec<u64> = delivered(&fs).iter().map(|(s, _)| *s).collect();
    assert_eq!(seqs, (1..=301).collect::<Vec<_>>(), "no gap, no duplicate");
}

#[test]
fn a_checkpoint_between_pages_restarts_the_transfer_from_it() {
    let (mut h, a) = paged_log(300, 50, 200);
    let b = join_stalled(&mut h, "b");
    // The joiner has the first page; a compacting checkpoint at 40 removes
    // entries its next pages need.
    h.checkpoint(a, 9, "doc", 40, b"v40");
    let fs = catch_up(&mut h, b);
    let resync = fs
        .iter()
        .position(|f| matches!(f, Frame::Resync { .. }))
        .expect("the transfer restarts with Resync");
    assert!(matches!(
        fs[resync + 1],
        Frame::Joined(JoinInfo {
            checkpoint_seq: 40,
            head_seq: 50,
            ..
        })
    ));
    let after: Vec<u64> = delivered(&fs[resync..]).iter().map(|(s, _)| *s).collect();
    assert_eq!(after, (41..=50).collect::<Vec<_>>());
}

#[test]
fn input_is_taken_at_the_priority_of_the_groups_a_client_is_principal_in() {
    let mut h = Harness::default();
    let a = h.client("a");
    let b = h.client("b");
    h.req(
        a,
        2,
        Frame::CreateGroup {
            group: "chat".into(),
            group_type: String::new(),
            priority: 6,
            initial_state: Bytes::new(),
        },
    );
    h.create(a, "images", b"");
    h.join(a, "images", Role::Principal);
    h.join(b, "images", Role::Principal);
    h.join(b, "chat", Role::Observer);
    // §4.5: the maximum over groups where the client is principal; being
    // an observer in a high-priority group does not count.
    assert_eq!(h.core.receive_priority(a), DEFAULT_GROUP_PRIORITY);
    assert_eq!(h.core.receive_priority(b), DEFAULT_GROUP_PRIORITY);
    let roles = h.core.roles_epoch();
    h.req(
        b,
        3,
        Frame::ChangeRole {
            group: "chat".into(),
            role: Role::Principal,
        },
    );
    assert_ne!(h.core.roles_epoch(), roles);
    assert_eq!(h.core.receive_priority(b), 6);
    // A burst demotes "images", and with it a's input.
    let epoch = h.core.priority_epoch();
    h.flood(a, "images", 40, 50_000);
    assert_ne!(h.core.priority_epoch(), epoch);
    assert!(h.core.receive_priority(a) < DEFAULT_GROUP_PRIORITY);
    assert_eq!(h.core.receive_priority(b), 6);
    // A client principal nowhere is taken at the default priority.
    let c = h.client("c");
    assert_eq!(h.core.receive_priority(c), DEFAULT_GROUP_PRIORITY);
}

#[test]
fn an_overloaded_relay_sheds_observers_from_an_oversized_group() {
    let mut h = Harness::new(CoreConfig {
        shed_observers_above: 3,
        // Any queued byte counts as overload: the stalled members below.
        overload_queued_bytes: 1,
        ..CoreConfig::default()
    });
    let p = h.client("principal");
    h.create(p, "big", b"");
    h.join(p, "big", Role::Principal);
    let p2 = h.client("principal2");
    h.join(p2, "big", Role::Principal);
    let active = h.client("active");
    h.join(active, "big", Role::Observer);
    let passive = h.client("passive");
    h.join(passive, "big", Role::Observer);
    h.req(
        passive,
        3,
        Frame::ChangeMode {
            group: "big".into(),
            mode: ActivityMode::Passive,
        },
    );
    let late = h.client("late");
    h.join(late, "big", Role::Observer);
    for c in [p2, active, passive, late] {
        h.take(c);
        h.stalled.insert(c);
    }
    // Not overloaded yet: nothing queued, nobody shed.
    assert_eq!(h.core.stats().observers_shed, 0);
    h.send(p, "big", "x".repeat(5000).as_str());
    h.pump();
    // 5 members, cap 3: the passive observer goes first, then the newest
    // active one; principals stay.
    assert_eq!(h.core.stats().observers_shed, 2);
    let evicted = |h: &mut Harness, c: ConnId| {
        h.frames(c).iter().any(|f| {
            matches!(f, Frame::Membership(MembershipNotice { change: MembershipChange::Evicted, client, .. }) if *client == c.client_id())
        })
    };
    for c in [passive, late, active, p2] {
        h.stalled.remove(&c);
        let consumed = h.consumed.get(&c).copied().unwrap_or(0);
        h.req(c, 0, Frame::Credit { consumed });
    }
    assert!(evicted(&mut h, passive));
    assert!(evicted(&mut h, late));
    assert!(!evicted(&mut h, active));
    assert!(!evicted(&mut h, p2));
    // The group now has 3 members and keeps working for them.
    h.send(p, "big", "y");
    h.pump();
    assert_eq!(delivered(&h.frames(active)).last(), Some(&(2, "y".into())));
}

/// An update another relay node appended to `g`, as the cluster store
/// hands it over.
fn remote(seq: u64, payload: &str) -> Update {
    Update {
        group: "g".into(),
        seq,
        sender: 99,
        msg_type: 1,
        sent_at_micros: 0,
        payload: Bytes::copy_from_slice(payload.as_bytes()),
    }
}

impl Harness {
    /// Another node's update, as the store hands it to this node's core.
    fn remote_update(&mut self, entry: Update) {
        self.core
            .handle_storage(self.now, StorageDone::Remote { entry });
    }
}

/// Issue 17: a `SetPriority` made through another node, as the cluster
/// store reports it, is in effect here as if made here, and is not
/// written back to the store.
#[test]
fn another_nodes_priority_change_applies_without_a_write() {
    let mut h = Harness::default();
    let a = h.principal_of_g();
    let queue = |h: &Harness| h.core.queue_depths()[0].priority;
    let before = queue(&h);
    h.core.handle_storage(
        h.now,
        StorageDone::PriorityChanged {
            group: "g".into(),
            priority: DEFAULT_GROUP_PRIORITY + 2,
        },
    );
    assert!(h.core.poll_storage().is_none(), "not written back");
    assert_eq!(
        h.core.instant_priority("g"),
        Some(DEFAULT_GROUP_PRIORITY + 2)
    );
    assert_eq!(queue(&h), before + 2, "the members' queues follow");
    // A joiner here gets the new default too (the group's record).
    let b = h.client("b");
    h.join(b, "g", Role::Principal);
    let depths = h.core.queue_depths();
    assert!(
        depths.iter().all(|d| d.priority == before + 2),
        "{depths:?}"
    );
    // Out of range (a hand-written record) is capped; unknown groups and
    // later requests through this node behave as before.
    h.core.handle_storage(
        h.now,
        StorageDone::PriorityChanged {
            group: "g".into(),
            priority: 200,
        },
    );
    assert_eq!(h.core.instant_priority("g"), Some(MAX_GROUP_PRIORITY));
    h.core.handle_storage(
        h.now,
        StorageDone::PriorityChanged {
            group: "nope".into(),
            priority: 1,
        },
    );
    assert_eq!(h.core.group_names(), ["g"]);
    h.req(
        a,
        3,
        Frame::SetPriority {
            group: "g".into(),
            priority: 1,
        },
    );
    assert_eq!(h.frames(a).last(), Some(&Frame::Ok));
    assert_eq!(h.core.instant_priority("g"), Some(1));
    let stored = h.store.load_groups().expect("groups");
    assert_eq!(stored[0].priority, 1, "a local change is stored");
}

fn pairs(list: &[(u64, &str)]) -> Vec<(u64, String)> {
    list.iter().map(|&(s, p)| (s, p.to_owned())).collect()
}

#[test]
fn other_nodes_updates_and_a_renumbered_append_keep_one_order() {
    let mut h = Harness::default();
    let a = h.principal_of_g();
    h.frames(a);
    // Another node appended #1.
    h.store.append(&[remote(1, "r1")]).expect("append");
    h.remote_update(remote(1, "r1"));
    // a's update is proposed as #2, but another node took #2 first: the
    // store hands #2 over, then a's update under #3 (a lost race).
    h.send(a, "g", "mine");
    let Some(StorageOp::Append { origin, entry }) = h.core.poll_storage() else {
        panic!("the send is an append");
    };
    assert_eq!(entry.seq, 2, "the core's proposal");
    let mine = Update { seq: 3, ..entry };
    h.store
        .append(&[remote(2, "r2"), mine.clone()])
        .expect("append");
    h.remote_update(remote(2, "r2"));
    h.core.handle_storage(
        h.now,
        StorageDone::Appended {
            origin,
            entry: mine,
            result: Ok(()),
        },
    );
    // Handed over twice: delivered once.
    h.remote_update(remote(2, "r2"));
    h.pump();
    let fa = h.frames(a);
    assert_eq!(delivered(&fa), pairs(&[(1, "r1"), (2, "r2"), (3, "mine")]));
    assert!(fa.contains(&Frame::Sent {
        group: "g".into(),
        seq: 3
    }));
    // A joiner gets all three from the log; the next update is #4.
    let b = h.client("b");
    let fb = h.join(b, "g", Role::Principal);
    assert_eq!(delivered(&fb), delivered(&fa));
    h.send(a, "g", "next");
    h.pump();
    assert_eq!(delivered(&h.frames(b)), pairs(&[(4, "next")]));
}

#[test]
fn a_gap_left_by_another_nodes_compaction_resyncs_the_members() {
    let mut h = Harness::default();
    let a = h.client("a");
    h.create(a, "g", b"s0");
    h.join(a, "g", Role::Principal);
    h.frames(a);
    h.store.append(&[remote(1, "r1")]).expect("append");
    h.remote_update(remote(1, "r1"));
    h.pump();
    assert_eq!(delivered(&h.frames(a)), pairs(&[(1, "r1")]));
    // Another node appended #2..#4 and checkpointed #3, compacting the log,
    // before this node saw #2 and #3.
    h.store
        .append(&[remote(2, "r2"), remote(3, "r3"), remote(4, "r4")])
        .expect("append");
    h.store
        .put_checkpoint("g", 3, b"s3", true)
        .expect("checkpoint");
    h.remote_update(remote(4, "r4"));
    h.pump();
    let fa = h.frames(a);
    assert!(
        matches!(
            fa[..],
            [Frame::Resync { dropped: 0, .. }, Frame::Joined(_), ..]
        ),
        "{fa:?}"
    );
    let joined = fa.iter().find_map(|f| match f {
        Frame::Joined(j) => Some((j.checkpoint_seq, j.head_seq, j.state.clone())),
        _ => None,
    });
    assert_eq!(joined, Some((3, 4, Bytes::from_static(b"s3"))));
    assert_eq!(
        delivered(&fa),
        pairs(&[(4, "r4")]),
        "#4 once, from the fresh transfer"
    );
}

/// `conn` joins `group` as an observer resuming after `after`.
fn resume(h: &mut Harness, conn: ConnId, group: &str, after: u64) -> Vec<Frame> {
    h.req(
        conn,
        11,
        Frame::Join {
            group: group.into(),
            role: Role::Observer,
            mode: ActivityMode::Active,
            watch_membership: false,
            resume_after: Some(after),
        },
    );
    h.frames(conn)
}

fn joined(frames: &[Frame]) -> (u64, u64, Bytes) {
    frames
        .iter()
        .find_map(|f| match f {
            Frame::Joined(j) => Some((j.checkpoint_seq, j.head_seq, j.state.clone())),
            _ => None,
        })
        .expect("joined")
}

#[test]
fn a_resumed_join_gets_the_log_after_its_sequence_and_no_state() {
    let mut h = Harness::default();
    let a = h.doc_of_a(6, |i| format!("u{i}"));
    let b = h.client("b");
    let fb = resume(&mut h, b, "doc", 4);
    assert_eq!(joined(&fb), (4, 6, Bytes::new()), "from the resume point");
    h.send(a, "doc", "u7");
    h.pump();
    let mut all = fb;
    all.extend(h.frames(b));
    assert_eq!(
        delivered(&all),
        vec![(5, "u5".into()), (6, "u6".into()), (7, "u7".into())]
    );
    // Resuming at the head, or past it (a node behind the cluster): no log.
    let c = h.client("c");
    let fc = resume(&mut h, c, "doc", 9);
    assert_eq!(joined(&fc).0, 7, "capped at the head");
    assert!(delivered(&fc).is_empty());
}

#[test]
fn a_resume_from_a_compacted_log_is_a_plain_state_transfer() {
    let mut h = Harness::default();
    let a = h.doc_of_a(5, |i| format!("u{i}"));
    h.checkpoint(a, 30, "doc", 4, b"v4");
    let b = h.client("b");
    let fb = resume(&mut h, b, "doc", 2);
    assert_eq!(joined(&fb), (4, 5, Bytes::from_static(b"v4")));
    assert_eq!(delivered(&fb), vec![(5, "u5".into())]);
    assert!(
        !fb.iter().any(|f| matches!(f, Frame::Resync { .. })),
        "the reply itself says it: checkpoint_seq above the resume point"
    );
}

#[test]
fn a_resume_the_log_lost_meanwhile_starts_over_from_the_checkpoint() {
    // The core believes the log still has update 3 (another node's
    // compaction has not reached it): the first page says otherwise.
    let mut h = Harness::default();
    h.doc_of_a(5, |i| format!("u{i}"));
    h.store
        .put_checkpoint("doc", 4, b"v4", true)
        .expect("compact behind the core's back");
    let b = h.client("b");
    let fb = resume(&mut h, b, "doc", 2);
    assert_eq!(joined(&fb), (4, 5, Bytes::from_static(b"v4")));
    assert_eq!(delivered(&fb), vec![(5, "u5".into())]);
}

impl Harness {
    /// Runs the pending storage operations (and everything after them),
    /// returning the membership changes the core shared with other nodes.
    fn shared_members(&mut self) -> Vec<(MembershipChange, u64)> {
        let mut ops = Vec::new();
        while let Some(op) = self.core.poll_storage() {
            ops.push(op);
        }
        let shared = ops
            .iter()
            .filter_map(|op| match op {
                StorageOp::Member { member, change, .. } => Some((*change, member.client)),
                _ => None,
            })
            .collect();
        for done in execute(&mut self.store, ops) {
            self.core.handle_storage(self.now, done);
        }
        self.pump();
        shared
    }
}

fn notices(frames: &[Frame]) -> Vec<(MembershipChange, u64)> {
    frames
        .iter()
        .filter_map(|f| match f {
            Frame::Membership(n) => Some((n.change, n.client)),
            _ => None,
        })
        .collect()
}

/// Issue 17: members connected to other relay nodes, as the cluster
/// store reports them, are listed to joiners and announced to watchers
/// here, and this node's joins, changes and leaves go to the store.
#[test]
fn members_of_other_nodes_are_listed_announced_and_ours_shared() {
    let mut h = Harness::new(CoreConfig {
        shared_membership: true,
        ..CoreConfig::default()
    });
    let a = h.client("a");
    h.create(a, "g", b"");
    h.input(a, 10, join_frame("g", Role::Principal, true));
    let ca = a.client_id();
    assert_eq!(
        h.shared_members(),
        [(MembershipChange::Joined, ca)],
        "a's join is shared"
    );
    h.frames(a);
    let r = MemberInfo {
        client: (99 << 32) | 1,
        name: "r".into(),
        role: Role::Observer,
        mode: ActivityMode::Active,
    };
    let remote = |h: &mut Harness, member: &MemberInfo, change| {
        h.core.handle_storage(
            h.now,
            StorageDone::MemberChanged {
                group: "g".into(),
                member: member.clone(),
                change,
            },
        );
        h.pump();
    };
    remote(&mut h, &r, MembershipChange::Joined);
    let fa = h.frames(a);
    assert_eq!(notices(&fa), [(MembershipChange::Joined, r.client)]);
    assert!(
        fa.contains(&Frame::Membership(MembershipNotice {
            group: "g".into(),
            client: r.client,
            name: "r".into(),
            change: MembershipChange::Joined,
            role: Role::Observer,
            mode: ActivityMode::Active,
        })),
        "{fa:?}"
    );
    assert!(
        h.core.poll_storage().is_none(),
        "a remote join is not shared"
    );

    // A joiner here gets r listed with the local members.
    let b = h.client("b");
    let fb = h.join(b, "g", Role::Observer);
    let listed = fb
        .iter()
        .find_map(|f| match f {
            Frame::Joined(j) => Some(j.members.clone()),
            _ => None,
        })
        .expect("Joined");
    let mut clients: Vec<u64> = listed.iter().map(|m| m.client).collect();
    clients.sort_unstable();
    assert_eq!(clients, [ca, b.client_id(), r.client]);
    assert!(listed.contains(&r), "{listed:?}");
    h.frames(a);

    // r changes role, then its node dies: both announced, and r is no
    // longer listed; a leave of someone unknown is not announced.
    let promoted = MemberInfo {
        role: Role::Principal,
        ..r.clone()
    };
    remote(&mut h, &promoted, MembershipChange::RoleChanged);
    remote(&mut h, &promoted, MembershipChange::Disconnected);
    remote(&mut h, &promoted, MembershipChange::Left);
    let want = [
        (MembershipChange::RoleChanged, r.client),
        (MembershipChange::Disconnected, r.client),
    ];
    assert_eq!(notices(&h.frames(a)), want);
    assert_eq!(notices(&h.frames(b)), want);
    let c = h.client("c");
    let fc = h.join(c, "g", Role::Observer);
    let listed = fc.iter().find_map(|f| match f {
        Frame::Joined(j) => Some(j.members.len()),
        _ => None,
    });
    assert_eq!(listed, Some(3), "a, b and c");

    // b's change and leave, and a's disconnect, are shared.
    h.input(
        b,
        11,
        Frame::ChangeMode {
            group: "g".into(),
            mode: ActivityMode::Passive,
        },
    );
    h.input(b, 12, Frame::Leave { group: "g".into() });
    h.core.handle_disconnect(h.now, a);
    assert_eq!(
        h.shared_members(),
        [
            (MembershipChange::ModeChanged, b.client_id()),
            (MembershipChange::Left, b.client_id()),
            (MembershipChange::Disconnected, ca),
        ]
    );
    // For a group that is gone, nothing happens.
    h.core.handle_storage(
        h.now,
        StorageDone::MemberChanged {
            group: "nope".into(),
            member: r,
            change: MembershipChange::Joined,
        },
    );
    assert_eq!(h.core.group_names(), ["g"]);
}

/// A relay on one node (SQLite, memory) shares no membership.
#[test]
fn a_single_node_shares_no_membership() {
    let mut h = Harness::default();
    let a = h.client("a");
    h.create(a, "g", b"");
    h.input(a, 10, join_frame("g", Role::Principal, true));
    h.input(a, 11, Frame::Leave { group: "g".into() });
    assert_eq!(h.shared_members(), []);
}
