use proptest::prelude::*;

use super::*;
use crate::frame::{ActivityMode, ErrorCode, JoinInfo, Role, Update, decode, encode};

fn opts() -> ClientOptions {
    ClientOptions::new("alice")
}

fn welcome(window: u32, max_frame: u32) -> Bytes {
    encode(
        HELLO_REQUEST,
        &Frame::Welcome {
            version: frame::VERSION,
            client: 42,
            max_frame,
            window,
            resume: true,
        },
    )
}

fn deliver(seq: u64, payload: &'static [u8]) -> Bytes {
    encode(
        0,
        &Frame::Deliver(Update {
            group: "chat".into(),
            seq,
            sender: 7,
            msg_type: 1,
            sent_at_micros: 99,
            payload: Bytes::from_static(payload),
        }),
    )
}

fn transmits(c: &mut ClientCore) -> Vec<Frame> {
    std::iter::from_fn(|| c.poll_transmit())
        .map(|b| decode(&b, usize::MAX).expect("our frames decode").frame)
        .collect()
}

fn events(c: &mut ClientCore) -> Vec<CoreEvent> {
    std::iter::from_fn(|| c.poll_event()).collect()
}

/// A core with a 1 s keepalive, past its handshake (the welcome handed
/// over as a frame), events and transmits drained.
fn keepalive_1s() -> ClientCore {
    let o = ClientOptions {
        keepalive: Duration::from_secs(1),
        ..opts()
    };
    let mut c = ClientCore::new(Instant::ZERO, &o);
    c.handle_frame(Instant::ZERO, welcome(1 << 20, 1 << 20));
    events(&mut c);
    transmits(&mut c);
    c
}

/// A core past its handshake, transmits drained.
fn connected(window: u32) -> ClientCore {
    let mut c = ClientCore::new(Instant::ZERO, &opts());
    c.handle_bytes(Instant::ZERO, &welcome(window, 1 << 20));
    assert!(matches!(
        events(&mut c)[..],
        [CoreEvent::Connected { client_id: 42, .. }]
    ));
    transmits(&mut c);
    c
}

#[test]
fn says_hello_and_takes_the_welcome() {
    let mut c = ClientCore::new(Instant::ZERO, &opts().token("t"));
    assert!(matches!(
        &transmits(&mut c)[..],
        [Frame::Hello { name, token, .. }] if name == "alice" && token == "t"
    ));
    assert_eq!(c.poll_timeout(), None, "no keepalive before the Welcome");
    // The Welcome arrives in two pieces.
    let w = welcome(4096, 9999);
    c.handle_bytes(Instant::ZERO, &w[..5]);
    assert!(c.poll_event().is_none());
    c.handle_bytes(Instant::ZERO, &w[5..]);
    match c.poll_event() {
        Some(CoreEvent::Connected {
            client_id,
            window,
            max_frame,
        }) => assert_eq!((client_id, window, max_frame), (42, 4096, 9999)),
        other => panic!("{other:?}"),
    }
    assert!(c.poll_timeout().is_some());
}

#[test]
fn a_refused_hello_closes_with_the_relays_error() {
    let mut c = ClientCore::new(Instant::ZERO, &opts());
    c.handle_frame(
        Instant::ZERO,
        encode(
            HELLO_REQUEST,
            &Frame::Error {
                code: ErrorCode::UNAUTHORIZED,
                message: "bad token".into(),
            },
        ),
    );
    match c.poll_event() {
        Some(CoreEvent::Closed(Some(ClientError::Relay { code, .. }))) => {
            assert_eq!(code, ErrorCode::UNAUTHORIZED);
        }
        other => panic!("{other:?}"),
    }
    assert!(c.is_closed());
    assert!(c.poll_event().is_none());
    assert_eq!(c.request(&Frame::Ok), Err(ClientError::Closed));
}

#[test]
fn replies_find_their_requests_and_updates_are_read_in_place() {
    let mut c = connected(1 << 20);
    let a = c
        .request(&Frame::Leave { group: "a".into() })
        .expect("queued");
    let b = c
        .request(&Frame::Leave { group: "b".into() })
        .expect("queued");
    assert_ne!(a, b);
    assert_eq!(transmits(&mut c).len(), 2);
    c.handle_frame(Instant::ZERO, deliver(5, b"hi"));
    c.handle_frame(
        Instant::ZERO,
        encode(
            b.0,
            &Frame::Error {
                code: ErrorCode::NOT_MEMBER,
                message: "no".into(),
            },
        ),
    );
    c.handle_frame(Instant::ZERO, encode(a.0, &Frame::Ok));
    let ev = events(&mut c);
    assert!(
        matches!(&ev[0], CoreEvent::Deliver(v) if v.seq() == 5 && v.payload() == b"hi" && v.group() == "chat")
    );
    assert!(
        matches!(&ev[1], CoreEvent::Reply { id, result: Err(e) } if *id == b && e.code() == Some(ErrorCode::NOT_MEMBER))
    );
    assert!(matches!(&ev[2], CoreEvent::Reply { id, result: Ok(Frame::Ok) } if *id == a));
    assert_eq!(c.in_flight(), 0);
    assert!(!c.is_closed(), "a request's error is not fatal");
}

#[test]
fn detached_requests_report_only_failures() {
    let mut c = connected(1 << 20);
    let send = |g: &str| Frame::Send {
        group: g.into(),
        msg_type: 1,
        sent_at_micros: 0,
        payload: Bytes::new(),
    };
    let ok = c.request_detached(&send("a")).expect("queued");
    let bad = c.request_detached(&send("b")).expect("queued");
    c.handle_frame(
        Instant::ZERO,
        encode(
            ok.0,
            &Frame::Sent {
                group: "a".into(),
                seq: 1,
            },
        ),
    );
    c.handle_frame(
        Instant::ZERO,
        encode(
            bad.0,
            &Frame::Error {
                code: ErrorCode::FORBIDDEN,
                message: "observer".into(),
            },
        ),
    );
    let ev = events(&mut c);
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert!(matches!(&ev[0], CoreEvent::Reply { id, result: Err(_) } if *id == bad));
    assert_eq!(c.detached_replies(), 1);
}

#[test]
fn an_unsolicited_error_is_fatal_and_a_stale_reply_is_dropped() {
    let mut c = connected(1 << 20);
    c.handle_frame(Instant::ZERO, encode(77, &Frame::Ok));
    c.handle_frame(Instant::ZERO, encode(0, &Frame::Pong { nonce: 0 }));
    c.handle_frame(
        Instant::ZERO,
        encode(
            0,
            &Frame::Error {
                code: ErrorCode::MALFORMED,
                message: "slow".into(),
            },
        ),
    );
    c.handle_frame(Instant::ZERO, deliver(1, b"after"));
    let ev = events(&mut c);
    assert!(
        matches!(
            &ev[..],
            [CoreEvent::Closed(Some(ClientError::Relay { .. }))]
        ),
        "{ev:?}"
    );
}

/// In-place deliveries: the same updates, consumed and credited as
/// through `poll_event`; the first other frame stops them and comes out
/// of `poll_event`, after which the next deliveries are read in place again.
#[test]
fn deliveries_read_in_place_stop_at_other_frames_and_count_as_consumed() {
    let mut c = connected(400);
    let mut bytes = Vec::new();
    for i in 0..8 {
        bytes.extend_from_slice(&deliver(i, b"0123456789"));
    }
    bytes.extend_from_slice(&encode(
        0,
        &Frame::Resync {
            group: "chat".into(),
            dropped: 3,
        },
    ));
    bytes.extend_from_slice(&deliver(8, b"0123456789"));
    // Half a frame at the end: left for the next read.
    let last = deliver(9, b"0123456789");
    bytes.extend_from_slice(&last[..5]);
    c.handle_bytes(Instant::ZERO, &bytes);
    let mut seqs = Vec::new();
    let mut read = |v: DeliverView<&[u8]>| {
        assert_eq!(
            (v.group_bytes(), v.sender(), v.payload()),
            (&b"chat"[..], 7, &b"0123456789"[..])
        );
        seqs.push(v.seq());
    };
    assert_eq!(c.poll_delivers(&mut read), 8);
    assert!(matches!(
        c.poll_event(),
        Some(CoreEvent::Event(ClientEvent::Resync { dropped: 3, .. }))
    ));
    assert_eq!(c.poll_delivers(&mut read), 1);
    assert_eq!(c.poll_delivers(&mut read), 0);
    c.handle_bytes(Instant::ZERO, &last[5..]);
    assert_eq!(c.poll_delivers(&mut read), 1);
    assert!(c.poll_event().is_none());
    assert_eq!(seqs, (0..10).collect::<Vec<_>>());
    // Every byte handed over counts: credits as through poll_event.
    let credits: Vec<u64> = transmits(&mut c)
        .into_iter()
        .filter_map(|f| match f {
            Frame::Credit { consumed } => Some(consumed),
            _ => None,
        })
        .collect();
    let handed = (bytes.len() - 5 + last.len()) as u64 + welcome(400, 1 << 20).len() as u64;
    assert!(!credits.is_empty());
    assert!(
        handed - credits.last().copied().unwrap_or(0) < 100 + last.len() as u64,
        "{credits:?}"
    );
}

#[test]
fn credit_goes_back_every_quarter_window_of_frames_handed_over() {
    let mut c = connected(400);
    let f = deliver(1, b"0123456789");
    let n = f.len() as u64;
    let mut handed = 0u64;
    let mut credits = Vec::new();
    for i in 0..20 {
        c.handle_frame(Instant::ZERO, deliver(i, b"0123456789"));
        // Nothing is credited before the event is handed over.
        for fr in transmits(&mut c) {
            if let Frame::Credit { consumed } = fr {
                credits.push(consumed);
            }
        }
        assert!(c.poll_event().is_some());
        handed += n;
    }
    for fr in transmits(&mut c) {
        if let Frame::Credit { consumed } = fr {
            credits.push(consumed);
        }
    }
    let welcome_len = welcome(400, 1 << 20).len() as u64;
    let total = welcome_len + handed;
    assert!(!credits.is_empty());
    assert!(
        credits.windows(2).all(|w| w[1] - w[0] >= 100),
        "{credits:?}"
    );
    assert!(
        total - credits.last().copied().unwrap_or(0) < 100 + n,
        "{credits:?}"
    );
}

#[test]
fn a_request_over_the_relays_cap_is_refused_here() {
    let mut c = ClientCore::new(Instant::ZERO, &opts());
    c.handle_frame(Instant::ZERO, welcome(1 << 20, 64));
    events(&mut c);
    transmits(&mut c);
    let big = Frame::Send {
        group: "g".into(),
        msg_type: 1,
        sent_at_micros: 0,
        payload: Bytes::from(vec![0; 100]),
    };
    assert!(matches!(
        c.request(&big),
        Err(ClientError::FrameTooLarge { max: 64, .. })
    ));
    assert!(transmits(&mut c).is_empty());
    assert_eq!(c.in_flight(), 0);
}

#[test]
fn pings_after_each_quiet_keepalive_period() {
    let mut c = keepalive_1s();
    let t = c.poll_timeout().expect("armed");
    assert_eq!(t, Instant::from_millis(1000));
    c.handle_timeout(Instant::from_millis(999));
    assert!(transmits(&mut c).is_empty(), "early call is a no-op");
    c.handle_timeout(t);
    assert!(matches!(&transmits(&mut c)[..], [Frame::Ping { .. }]));
    assert_eq!(c.poll_timeout(), Some(Instant::from_millis(2000)));
}

proptest! {
    /// Any bytes from the relay: events or a close, never a panic, and
    /// nothing after the close.
    #[test]
    fn any_bytes_never_panic(chunks in proptest::collection::vec(
        proptest::collection::vec(any::<u8>(), 0..64), 0..8)) {
        let mut c = ClientCore::new(Instant::ZERO, &opts());
        let w = welcome(1024, 1 << 20);
        c.handle_bytes(Instant::ZERO, &w);
        for ch in &chunks {
            c.handle_bytes(Instant::ZERO, ch);
            while let Some(ev) = c.poll_event() {
                if matches!(ev, CoreEvent::Closed(_)) {
                    prop_assert!(c.poll_event().is_none());
                }
            }
            while c.poll_transmit().is_some() {}
        }
    }
}

/// A live update of group `g` stamped at wall clock `sent_at`.
fn deliver_to(g: &str, seq: u64, sent_at: u64) -> Bytes {
    encode(
        0,
        &Frame::Deliver(Update {
            group: g.into(),
            seq,
            sender: 7,
            msg_type: 1,
            sent_at_micros: sent_at,
            payload: Bytes::from_static(b"x"),
        }),
    )
}

#[test]
fn meters_each_group_from_join_to_the_relays_drops() {
    // Wall clock 1 s at our Instant::ZERO.
    let o = ClientOptions {
        shared_clock_micros: Some(1_000_000),
        ..opts()
    };
    let mut c = ClientCore::new(Instant::ZERO, &o);
    c.handle_frame(Instant::ZERO, welcome(1 << 20, 1 << 20));
    events(&mut c);
    let join = c
        .request(&Frame::Join {
            group: "a".into(),
            role: crate::frame::Role::Principal,
            mode: crate::frame::ActivityMode::Active,
            watch_membership: false,
            resume_after: None,
        })
        .expect("queued");
    let send = Frame::Send {
        group: "a".into(),
        msg_type: 1,
        sent_at_micros: 0,
        payload: Bytes::from_static(b"hello"),
    };
    c.request_detached(&send).expect("queued");
    transmits(&mut c);
    c.handle_frame(
        Instant::ZERO,
        encode(
            join.0,
            &Frame::Joined(crate::frame::JoinInfo {
                group: "a".into(),
                group_type: "chat".into(),
                checkpoint_seq: 0,
                head_seq: 2,
                state: Bytes::new(),
                members: vec![],
            }),
        ),
    );
    // The log replay (stamped long ago: no latency), then live updates
    // 2 ms in flight, a gap of 3 the relay dropped, and another group.
    for seq in 1..=2 {
        c.handle_frame(Instant::from_millis(1), deliver_to("a", seq, 5));
    }
    for seq in (3..=10).chain(14..=20) {
        let now = Instant::from_millis(10 * seq);
        let sent_at = 1_000_000 + (10 * seq - 2) * 1000;
        c.handle_frame(now, deliver_to("a", seq, sent_at));
    }
    c.request_detached(&Frame::Send {
        group: "b".into(),
        msg_type: 1,
        sent_at_micros: 0,
        payload: Bytes::new(),
    })
    .expect("queued");
    c.handle_frame(Instant::from_millis(300), deliver_to("b", 1, 1_299_000));
    // Not joined, not sent to: not metered.
    c.handle_frame(Instant::from_millis(300), deliver_to("c", 1, 1_299_000));
    assert_eq!(events(&mut c).len(), 1 + 2 + 15 + 2);
    c.finish_channels();
    let snaps = c.channel_snapshots(Instant::from_millis(1000));
    let [a, b] = &snaps[..] else {
        panic!("{snaps:?}")
    };
    assert_eq!(
        (a.channel.as_str(), b.channel.as_str()),
        ("relay a", "relay b")
    );
    assert_eq!(a.out.packets, 1, "the Send");
    assert_eq!(a.inbound.packets, 17);
    assert_eq!(a.latency_total.count, 15, "replays carry no latency");
    assert!((a.latency_total.p50_ms - 2.0).abs() < 0.05, "{a:?}");
    assert_eq!(a.loss.judged, 20);
    assert_eq!(a.loss.residual_lost, 3);
    assert_eq!(a.burst.runs, 1);
    assert_eq!(b.latency_total.count, 1);
    assert!((b.latency_total.p50_ms - 1.0).abs() < 0.05, "{b:?}");
}

#[test]
fn an_unmetered_core_reports_no_channels() {
    let o = ClientOptions {
        metered: false,
        ..opts()
    };
    let mut c = ClientCore::new(Instant::ZERO, &o);
    c.handle_frame(Instant::ZERO, welcome(1 << 20, 1 << 20));
    c.handle_frame(Instant::ZERO, deliver_to("a", 1, 0));
    assert_eq!(events(&mut c).len(), 2);
    assert!(c.channel_snapshots(Instant::from_millis(1)).is_empty());
}

/// The frames queued, with their request ids.
fn transmits_with_ids(c: &mut ClientCore) -> Vec<(u32, Frame)> {
    std::iter::from_fn(|| c.poll_transmit())
        .map(|b| {
            let env = decode(&b, usize::MAX).expect("our frames decode");
            (env.request, env.frame)
        })
        .collect()
}

fn joined_reply(request: u32, checkpoint_seq: u64, head_seq: u64) -> Bytes {
    encode(
        request,
        &Frame::Joined(JoinInfo {
            group: "chat".into(),
            group_type: "t".into(),
            checkpoint_seq,
            head_seq,
            state: Bytes::from_static(b"s"),
            members: vec![],
        }),
    )
}

fn welcome_resume(resume: bool) -> Bytes {
    encode(
        HELLO_REQUEST,
        &Frame::Welcome {
            version: frame::VERSION,
            client: 43,
            max_frame: 1 << 20,
            window: 1 << 20,
            resume,
        },
    )
}

/// A core in group "chat" (joined at checkpoint 3) that handed over
/// updates 4 and 5, then lost its connection and said `Hello` again.
fn reconnected_after_5(resume: bool) -> (ClientCore, u32) {
    let mut c = connected(1 << 20);
    let join = c
        .request(&Frame::Join {
            group: "chat".into(),
            role: Role::Observer,
            mode: ActivityMode::Active,
            watch_membership: false,
            resume_after: None,
        })
        .expect("queued");
    transmits(&mut c);
    c.handle_frame(Instant::ZERO, joined_reply(join.0, 3, 3));
    c.handle_frame(Instant::ZERO, deliver(4, b"u4"));
    c.handle_frame(Instant::ZERO, deliver(5, b"u5"));
    let ev = events(&mut c);
    assert_eq!(ev.len(), 3, "{ev:?}");
    c.reconnect(Instant::from_millis(10));
    assert!(matches!(&transmits(&mut c)[..], [Frame::Hello { .. }]));
    assert_eq!(c.poll_timeout(), None, "greeting again");
    c.handle_frame(Instant::from_millis(10), welcome_resume(resume));
    assert!(matches!(
        events(&mut c)[..],
        [CoreEvent::Connected { client_id: 43, .. }]
    ));
    let sent = transmits_with_ids(&mut c);
    let [
        (
            id,
            Frame::Join {
                group,
                role,
                resume_after,
                ..
            },
        ),
    ] = &sent[..]
    else {
        panic!("one re-join: {sent:?}");
    };
    assert_eq!((group.as_str(), *role), ("chat", Role::Observer));
    assert_eq!(*resume_after, resume.then_some(5));
    (c, *id)
}

#[test]
fn a_reconnect_rejoins_resuming_after_the_last_update_handed_over() {
    let (mut c, id) = reconnected_after_5(true);
    c.handle_frame(Instant::ZERO, joined_reply(id, 5, 7));
    // A node behind the cluster may send an update it already had.
    c.handle_frame(Instant::ZERO, deliver(5, b"u5"));
    c.handle_frame(Instant::ZERO, deliver(6, b"u6"));
    let ev = events(&mut c);
    assert!(
        matches!(&ev[..], [CoreEvent::Deliver(v)] if v.seq() == 6),
        "the re-join's reply is the core's own; 5 was handed over before: {ev:?}"
    );
    assert_eq!(c.duplicates_dropped(), 1);
}

#[test]
fn a_relay_without_resume_gets_a_plain_join_and_old_updates_are_dropped() {
    let (mut c, id) = reconnected_after_5(false);
    c.handle_frame(Instant::ZERO, joined_reply(id, 3, 6));
    for seq in 4..=6 {
        c.handle_frame(Instant::ZERO, deliver(seq, b"u"));
    }
    let ev = events(&mut c);
    assert!(
        matches!(&ev[..], [CoreEvent::Deliver(v)] if v.seq() == 6),
        "{ev:?}"
    );
}

#[test]
fn a_rejoin_past_a_compacted_log_is_a_resync_and_a_state() {
    let (mut c, id) = reconnected_after_5(true);
    c.handle_frame(Instant::ZERO, joined_reply(id, 9, 9));
    c.handle_frame(Instant::ZERO, deliver(10, b"u10"));
    let ev = events(&mut c);
    match &ev[..] {
        [
            CoreEvent::Event(ClientEvent::Resync { group, dropped: 4 }),
            CoreEvent::Event(ClientEvent::State(j)),
            CoreEvent::Deliver(v),
        ] => {
            assert_eq!(group, "chat");
            assert_eq!(j.checkpoint_seq, 9);
            assert_eq!(v.seq(), 10);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_rejoin_to_a_group_gone_meanwhile_says_so() {
    let (mut c, id) = reconnected_after_5(true);
    c.handle_frame(
        Instant::ZERO,
        encode(
            id,
            &Frame::Error {
                code: ErrorCode::NO_SUCH_GROUP,
                message: "gone".into(),
            },
        ),
    );
    let ev = events(&mut c);
    assert!(
        matches!(&ev[..], [CoreEvent::Event(ClientEvent::RejoinFailed { group, error })]
            if group == "chat" && error.code() == Some(ErrorCode::NO_SUCH_GROUP)),
        "{ev:?}"
    );
    c.reconnect(Instant::ZERO);
    transmits(&mut c);
    c.handle_frame(Instant::ZERO, welcome_resume(true));
    events(&mut c);
    assert!(transmits(&mut c).is_empty(), "nothing left to re-join");
}

#[test]
fn a_left_group_is_not_rejoined() {
    let (mut c, id) = reconnected_after_5(true);
    c.handle_frame(Instant::ZERO, joined_reply(id, 5, 5));
    let leave = c
        .request(&Frame::Leave {
            group: "chat".into(),
        })
        .expect("queued");
    c.handle_frame(Instant::ZERO, encode(leave.0, &Frame::Ok));
    events(&mut c);
    c.reconnect(Instant::ZERO);
    transmits(&mut c);
    c.handle_frame(Instant::ZERO, welcome_resume(true));
    events(&mut c);
    assert!(transmits(&mut c).is_empty());
}

#[test]
fn a_silent_relay_is_given_up_after_two_keepalive_periods() {
    let mut c = keepalive_1s();
    c.handle_timeout(Instant::from_millis(1000));
    assert!(matches!(&transmits(&mut c)[..], [Frame::Ping { .. }]));
    // The Pong of the first ping comes: heard at 1.5 s.
    c.handle_frame(
        Instant::from_millis(1500),
        encode(0, &Frame::Pong { nonce: 0 }),
    );
    events(&mut c);
    c.handle_timeout(Instant::from_millis(2000));
    transmits(&mut c);
    assert!(!c.is_closed());
    assert_eq!(c.poll_timeout(), Some(Instant::from_millis(3000)));
    c.handle_timeout(Instant::from_millis(3000));
    transmits(&mut c);
    assert_eq!(c.poll_timeout(), Some(Instant::from_millis(3500)));
    c.handle_timeout(Instant::from_millis(3500));
    assert!(matches!(
        events(&mut c)[..],
        [CoreEvent::Closed(Some(ClientError::KeepaliveTimeout))]
    ));
    assert!(c.is_closed());
}

/// A driver that reads into `recv_buffer` (no time with the bytes) is
/// heard from by what arrives: a busy connection is never given up, a
/// silent one after two periods, one check late at most.
#[test]
fn bytes_read_into_the_receive_buffer_count_as_heard() {
    let o = ClientOptions {
        keepalive: Duration::from_secs(1),
        ..opts()
    };
    let mut c = ClientCore::new(Instant::ZERO, &o);
    c.recv_buffer()
        .extend_from_slice(&welcome(1 << 20, 1 << 20));
    events(&mut c);
    let mut seq = 0;
    let mut t = 0;
    // Ten seconds of a delivery every 100 ms, timers run when due.
    while t < 10_000 {
        t += 100;
        c.recv_buffer()
            .extend_from_slice(&deliver(seq, b"0123456789"));
        seq += 1;
        assert_eq!(c.poll_delivers(|_| {}), 1, "at {t} ms");
        if c.poll_timeout()
            .is_some_and(|d| d <= Instant::from_millis(t))
        {
            c.handle_timeout(Instant::from_millis(t));
        }
        assert!(!c.is_closed(), "a busy connection given up at {t} ms");
        transmits(&mut c);
    }
    // Then silence: given up within three periods.
    while !c.is_closed() {
        let due = c.poll_timeout().expect("a timer while connected");
        assert!(due <= Instant::from_millis(t + 3000), "{due:?}");
        c.handle_timeout(due);
        transmits(&mut c);
    }
    assert!(matches!(
        events(&mut c)[..],
        [CoreEvent::Closed(Some(ClientError::KeepaliveTimeout))]
    ));
}
