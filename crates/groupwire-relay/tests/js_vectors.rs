//! Shared test vectors for clients in other languages: one frame of every
//! kind (and edge values: empty and non-ASCII names, `u64::MAX`, a
//! member list), encoded by this crate, in `clients/js/test/vectors.json`,
//! plus bytes that must not decode. The TypeScript client's tests decode
//! every vector, compare the fields, and encode them back to the same
//! bytes, and check their names for the relay's error codes; this test
//! keeps the file current.
//! `GROUPWIRE_WRITE_VECTORS=1 cargo test -p groupwire-relay --test js_vectors`
//! rewrites it.

use bytes::Bytes;
use groupwire_relay::frame::{
    self, ActivityMode, DEFAULT_MAX_FRAME, ErrorCode, Frame, JoinInfo, MemberInfo,
    MembershipChange, MembershipNotice, Role, Update,
};
use serde_json::{Value, json};

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A `u64` as a decimal string: JSON numbers lose precision above 2^53.
fn u64s(v: u64) -> Value {
    Value::String(v.to_string())
}

fn role(r: Role) -> &'static str {
    r.as_str()
}

fn mode(m: ActivityMode) -> &'static str {
    match m {
        ActivityMode::Active => "active",
        ActivityMode::Passive => "passive",
    }
}

fn change(c: MembershipChange) -> &'static str {
    match c {
        MembershipChange::Joined => "joined",
        MembershipChange::Left => "left",
        MembershipChange::RoleChanged => "role-changed",
        MembershipChange::ModeChanged => "mode-changed",
        MembershipChange::Disconnected => "disconnected",
        MembershipChange::Evicted => "evicted",
    }
}

/// The frame's fields as the TypeScript client names them (`Frame` in
/// `clients/js/src/frame.ts`): camelCase, `u64` as decimal strings, bytes
/// as hex. The resume fields (`Join`'s sequence, `Welcome`'s flag) appear
/// only when set, as the TypeScript frames hold them: `resumeAfter`,
/// `resume: true`.
fn fields(f: &Frame) -> Value {
    match f {
        Frame::Hello {
            max_version,
            window,
            token,
            name,
        } => {
            json!({"kind": "Hello", "maxVersion": max_version, "window": window, "token": token, "name": name})
        }
        Frame::CreateGroup {
            group,
            group_type,
            priority,
            initial_state,
        } => {
            json!({"kind": "CreateGroup", "group": group, "groupType": group_type, "priority": priority, "initialState": hex(initial_state)})
        }
        Frame::DeleteGroup { group } => json!({"kind": "DeleteGroup", "group": group}),
        Frame::Join {
            group,
            role: r,
            mode: m,
            watch_membership,
            resume_after,
        } => {
            let mut v = json!({"kind": "Join", "group": group, "role": role(*r), "mode": mode(*m), "watchMembership": watch_membership});
            if let Some(after) = resume_after {
                v["resumeAfter"] = u64s(*after);
            }
            v
        }
        Frame::Leave { group } => json!({"kind": "Leave", "group": group}),
        Frame::ChangeRole { group, role: r } => {
            json!({"kind": "ChangeRole", "group": group, "role": role(*r)})
        }
        Frame::ChangeMode { group, mode: m } => {
            json!({"kind": "ChangeMode", "group": group, "mode": mode(*m)})
        }
        Frame::SetPriority { group, priority } => {
            json!({"kind": "SetPriority", "group": group, "priority": priority})
        }
        Frame::Send {
            group,
            msg_type,
            sent_at_micros,
            payload,
        } => {
            json!({"kind": "Send", "group": group, "msgType": msg_type, "sentAtMicros": u64s(*sent_at_micros), "payload": hex(payload)})
        }
        Frame::Checkpoint { group, seq, state } => {
            json!({"kind": "Checkpoint", "group": group, "seq": u64s(*seq), "state": hex(state)})
        }
        Frame::LockAcquire { group, lock, wait } => {
            json!({"kind": "LockAcquire", "group": group, "lock": lock, "wait": wait})
        }
        Frame::LockRelease { group, lock } => {
            json!({"kind": "LockRelease", "group": group, "lock": lock})
        }
        Frame::Credit { consumed } => json!({"kind": "Credit", "consumed": u64s(*consumed)}),
        Frame::Ping { nonce } => json!({"kind": "Ping", "nonce": u64s(*nonce)}),
        Frame::Welcome {
            version,
            client,
            max_frame,
            window,
            resume,
        } => {
            let mut v = json!({"kind": "Welcome", "version": version, "client": u64s(*client), "maxFrame": max_frame, "window": window});
            if *resume {
                v["resume"] = json!(true);
            }
            v
        }
        Frame::Ok => json!({"kind": "Ok"}),
        Frame::Sent { group, seq } => json!({"kind": "Sent", "group": group, "seq": u64s(*seq)}),
        Frame::Joined(j) => json!({
            "kind": "Joined", "group": j.group, "groupType": j.group_type,
            "checkpointSeq": u64s(j.checkpoint_seq), "headSeq": u64s(j.head_seq),
            "state": hex(&j.state),
            "members": j.members.iter().map(|m| json!({
                "client": u64s(m.client), "name": m.name, "role": role(m.role), "mode": mode(m.mode)
            })).collect::<Vec<_>>(),
        }),
        Frame::Deliver(u) => json!({
            "kind": "Deliver", "group": u.group, "seq": u64s(u.seq), "sender": u64s(u.sender),
            "msgType": u.msg_type, "sentAtMicros": u64s(u.sent_at_micros), "payload": hex(&u.payload),
        }),
        Frame::Membership(m) => json!({
            "kind": "Membership", "group": m.group, "client": u64s(m.client), "name": m.name,
            "change": change(m.change), "role": role(m.role), "mode": mode(m.mode),
        }),
        Frame::LockGranted { group, lock } => {
            json!({"kind": "LockGranted", "group": group, "lock": lock})
        }
        Frame::GroupDeleted { group } => json!({"kind": "GroupDeleted", "group": group}),
        Frame::Resync { group, dropped } => {
            json!({"kind": "Resync", "group": group, "dropped": u64s(*dropped)})
        }
        Frame::Error { code, message } => {
            json!({"kind": "Error", "code": code.0, "message": message})
        }
        Frame::Pong { nonce } => json!({"kind": "Pong", "nonce": u64s(*nonce)}),
        other => panic!("a frame kind the vectors do not cover yet: {other:?}"),
    }
}

/// One frame of every kind, with values that catch byte-order, length and
/// UTF-8 mistakes.
fn frames() -> Vec<(u32, Frame)> {
    let big = u64::MAX;
    vec![
        (
            1,
            Frame::Hello {
                max_version: 1,
                window: 262_144,
                token: "eyJ.tok.en".into(),
                name: "alice ✏️".into(),
            },
        ),
        (
            2,
            Frame::CreateGroup {
                group: "board".into(),
                group_type: "whiteboard".into(),
                priority: 7,
                initial_state: Bytes::from_static(&[0, 1, 2, 0xff]),
            },
        ),
        (3, Frame::DeleteGroup { group: "".into() }),
        (
            4,
            Frame::Join {
                group: "board".into(),
                role: Role::Principal,
                mode: ActivityMode::Active,
                watch_membership: true,
                resume_after: None,
            },
        ),
        (
            0xffff_ffff,
            Frame::Join {
                group: "g".repeat(255),
                role: Role::MembershipObserver,
                mode: ActivityMode::Passive,
                watch_membership: false,
                resume_after: None,
            },
        ),
        (
            4,
            Frame::Join {
                group: "board".into(),
                role: Role::Principal,
                mode: ActivityMode::Active,
                watch_membership: true,
                resume_after: Some(0x0102_0304_0506_0708),
            },
        ),
        (
            4,
            Frame::Join {
                group: "board".into(),
                role: Role::Observer,
                mode: ActivityMode::Passive,
                watch_membership: false,
                resume_after: Some(u64::MAX),
            },
        ),
        (
            5,
            Frame::Leave {
                group: "board".into(),
            },
        ),
        (
            6,
            Frame::ChangeRole {
                group: "board".into(),
                role: Role::Observer,
            },
        ),
        (
            7,
            Frame::ChangeMode {
                group: "board".into(),
                mode: ActivityMode::Passive,
            },
        ),
        (
            8,
            Frame::SetPriority {
                group: "board".into(),
                priority: 0,
            },
        ),
        (
            0x0a0b_0c0d,
            Frame::Send {
                group: "chat".into(),
                msg_type: 7,
                sent_at_micros: 0x0102,
                payload: Bytes::from_static(b"hi"),
            },
        ),
        (
            9,
            Frame::Send {
                group: "ünïcode".into(),
                msg_type: 0xffff,
                sent_at_micros: big,
                payload: Bytes::new(),
            },
        ),
        (
            10,
            Frame::Checkpoint {
                group: "board".into(),
                seq: 1 << 53 | 1,
                state: Bytes::from_static(b"{\"strokes\":[]}"),
            },
        ),
        (
            11,
            Frame::LockAcquire {
                group: "board".into(),
                lock: "pen".into(),
                wait: true,
            },
        ),
        (
            12,
            Frame::LockAcquire {
                group: "board".into(),
                lock: "pen".into(),
                wait: false,
            },
        ),
        (
            13,
            Frame::LockRelease {
                group: "board".into(),
                lock: "pen".into(),
            },
        ),
        (0, Frame::Credit { consumed: 300_000 }),
        (14, Frame::Ping { nonce: big }),
        (
            1,
            Frame::Welcome {
                version: 1,
                client: 42,
                max_frame: 1 << 20,
                window: 262_144,
                resume: false,
            },
        ),
        (
            1,
            Frame::Welcome {
                version: 1,
                client: 43,
                max_frame: 1 << 20,
                window: 262_144,
                resume: true,
            },
        ),
        (2, Frame::Ok),
        (
            9,
            Frame::Sent {
                group: "chat".into(),
                seq: 12_345_678_901,
            },
        ),
        (
            4,
            Frame::Joined(JoinInfo {
                group: "board".into(),
                group_type: "whiteboard".into(),
                checkpoint_seq: 3,
                head_seq: 5,
                state: Bytes::from_static(b"state"),
                members: vec![
                    MemberInfo {
                        client: 1,
                        name: "alice".into(),
                        role: Role::Principal,
                        mode: ActivityMode::Active,
                    },
                    MemberInfo {
                        client: big,
                        name: "".into(),
                        role: Role::Observer,
                        mode: ActivityMode::Passive,
                    },
                ],
            }),
        ),
        (
            0,
            Frame::Joined(JoinInfo {
                group: "empty".into(),
                group_type: "".into(),
                checkpoint_seq: 0,
                head_seq: 0,
                state: Bytes::new(),
                members: vec![],
            }),
        ),
        (
            0,
            Frame::Deliver(Update {
                group: "chat".into(),
                seq: 1,
                sender: 2,
                msg_type: 3,
                sent_at_micros: 1_795_000_000_000_000,
                payload: Bytes::from_static("héllo".as_bytes()),
            }),
        ),
        (
            0,
            Frame::Membership(MembershipNotice {
                group: "board".into(),
                client: 7,
                name: "bob".into(),
                change: MembershipChange::Disconnected,
                role: Role::Principal,
                mode: ActivityMode::Active,
            }),
        ),
        (
            0,
            Frame::Membership(MembershipNotice {
                group: "board".into(),
                client: 8,
                name: "carol".into(),
                change: MembershipChange::Evicted,
                role: Role::Observer,
                mode: ActivityMode::Passive,
            }),
        ),
        (
            11,
            Frame::LockGranted {
                group: "board".into(),
                lock: "pen".into(),
            },
        ),
        (
            0,
            Frame::GroupDeleted {
                group: "board".into(),
            },
        ),
        (
            0,
            Frame::Resync {
                group: "board".into(),
                dropped: 17,
            },
        ),
        (
            12,
            Frame::Error {
                code: ErrorCode::LOCK_BUSY,
                message: "lock pen is held".into(),
            },
        ),
        (
            0,
            Frame::Error {
                code: ErrorCode(999),
                message: "".into(),
            },
        ),
        (14, Frame::Pong { nonce: 0 }),
    ]
}

/// Bytes that must not decode, each with why.
fn malformed() -> Vec<(&'static str, Vec<u8>)> {
    let ok = frame::encode(1, &Frame::Ok).to_vec();
    let with = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut b = ok.clone();
        f(&mut b);
        b
    };
    let join = frame::encode(
        4,
        &Frame::Join {
            group: "g".into(),
            role: Role::Principal,
            mode: ActivityMode::Active,
            watch_membership: true,
            resume_after: None,
        },
    )
    .to_vec();
    let mut bad_bool = join.clone();
    *bad_bool.last_mut().expect("non-empty") = 2;
    let mut bad_role = join.clone();
    let n = bad_role.len();
    bad_role[n - 3] = 4;
    let empty_joined = frame::encode(
        0,
        &Frame::Joined(JoinInfo {
            group: "g".into(),
            group_type: "t".into(),
            checkpoint_seq: 0,
            head_seq: 0,
            state: Bytes::new(),
            members: vec![],
        }),
    )
    .to_vec();
    let mut bogus_count = empty_joined.clone();
    let n = bogus_count.len();
    bogus_count[n - 4..].copy_from_slice(&u32::MAX.to_be_bytes());
    let leave = |name: &[u8]| {
        let mut b = vec![0, 0, 0, 0, 1, 0x05, 0, 0, 0, 0, 0, 5];
        b.extend_from_slice(&u16::try_from(name.len()).expect("short").to_be_bytes());
        b.extend_from_slice(name);
        let len = u32::try_from(b.len() - 4).expect("short");
        b[..4].copy_from_slice(&len.to_be_bytes());
        b
    };
    vec![
        ("empty input", vec![]),
        ("shorter than the length prefix", vec![0, 0]),
        ("length below the header size", vec![0, 0, 0, 2, 1, 0x41]),
        ("truncated header", with(&|b| b.truncate(10))),
        ("unsupported version", with(&|b| b[4] = 9)),
        ("unknown kind", with(&|b| b[5] = 0x3f)),
        (
            "bytes after the body",
            with(&|b| {
                b.push(0);
                b[3] += 1;
            }),
        ),
        ("bytes after the frame", with(&|b| b.push(0))),
        ("boolean other than 0 or 1", bad_bool),
        ("unknown role", bad_role),
        ("member count beyond the frame", bogus_count),
        ("name longer than 255 bytes", leave(&[b'x'; 256])),
        ("name that is not UTF-8", leave(&[0xc3, 0x28])),
    ]
}

fn vectors() -> Value {
    let frames: Vec<Value> = frames()
        .into_iter()
        .map(|(request, f)| {
            let bytes = frame::encode(request, &f);
            let back = frame::decode(&bytes, DEFAULT_MAX_FRAME).expect("a vector decodes");
            assert_eq!((back.request, &back.frame), (request, &f));
            json!({"request": request, "frame": fields(&f), "hex": hex(&bytes)})
        })
        .collect();
    let malformed: Vec<Value> = malformed()
        .into_iter()
        .map(|(why, bytes)| {
            assert!(
                frame::decode(&bytes, DEFAULT_MAX_FRAME).is_err(),
                "{why} decodes"
            );
            json!({"why": why, "hex": hex(&bytes)})
        })
        .collect();
    // Every code the relay sends, by the name clients show (ErrorCode::name).
    let error_codes: Vec<Value> = (1..=20)
        .map(|c| json!({"code": c, "name": ErrorCode(c).name()}))
        .collect();
    json!({
        "errorCodes": error_codes,
        "about": "Frames encoded by crates/groupwire-relay (docs/relay-protocol.md), for clients in other languages. Regenerate: GROUPWIRE_WRITE_VECTORS=1 cargo test -p groupwire-relay --test js_vectors",
        "maxFrame": DEFAULT_MAX_FRAME,
        "frames": frames,
        "malformed": malformed,
    })
}

#[test]
fn js_client_vectors_are_current() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../clients/js/test/vectors.json");
    let text = serde_json::to_string_pretty(&vectors()).expect("json") + "\n";
    if std::env::var_os("GROUPWIRE_WRITE_VECTORS").is_some() {
        std::fs::write(&path, &text).expect("write vectors.json");
    }
    let stored = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        stored == text,
        "{} is stale or missing: the relay's frames changed. Rerun with \
         GROUPWIRE_WRITE_VECTORS=1 and check the TypeScript client still passes its tests",
        path.display()
    );
}
