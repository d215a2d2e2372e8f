//! The relay over real loopback sockets: TCP clients, a WebSocket client,
//! tokens, locks across disconnects, and hostile input.

use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use groupwire_relay::auth::{self, Claims};
use groupwire_relay::frame::{
    self, ActivityMode, ErrorCode, Frame, JoinInfo, MembershipNotice, Role, Update,
};
use groupwire_relay::{
    ClientEvent, ClientOptions, RelayClient, SchedulerConfig, SlowConsumerPolicy, StorageConfig,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

mod common;
use common::{client, hello, in_time, join, open_group, relay};

async fn next_delivery(ev: &mut mpsc::Receiver<ClientEvent>) -> (u64, Bytes) {
    loop {
        match ev.recv().await.expect("event") {
            ClientEvent::Deliver(d) => return (d.seq, d.payload),
            ClientEvent::Closed(e) => panic!("closed: {e:?}"),
            _ => {}
        }
    }
}

#[tokio::test]
async fn tcp_clients_get_total_order_and_a_late_joiner_gets_the_state() {
    in_time(async {
        let r = relay(|_| {}).await;
        let (a, mut ea) = client(&r, "a").await;
        let (b, mut eb) = client(&r, "b").await;
        a.create_group("doc", "text", 5, Bytes::from_static(b"v0"))
            .await
            .expect("create");
        a.join("doc", Role::Principal, ActivityMode::Active, false)
            .await
            .expect("join a");
        b.join("doc", Role::Principal, ActivityMode::Active, false)
            .await
            .expect("join b");
        let (sa, sb) = tokio::join!(
            async {
                let mut v = Vec::new();
                for i in 0..50 {
                    v.push(
                        a.send("doc", 1, Bytes::from(format!("a{i}")))
                            .await
                            .expect("send"),
                    );
                }
                v
            },
            async {
                let mut v = Vec::new();
                for i in 0..50 {
                    v.push(
                        b.send("doc", 1, Bytes::from(format!("b{i}")))
                            .await
                            .expect("send"),
                    );
                }
                v
            }
        );
        assert!(sa.windows(2).all(|w| w[0] < w[1]) && sb.windows(2).all(|w| w[0] < w[1]));
        let mut da = Vec::new();
        let mut db = Vec::new();
        for _ in 0..100 {
            da.push(next_delivery(&mut ea).await);
            db.push(next_delivery(&mut eb).await);
        }
        assert_eq!(da, db, "same order everywhere");
        assert_eq!(
            da.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
            (1..=100).collect::<Vec<_>>()
        );
        a.checkpoint("doc", 60, Bytes::from_static(b"v60"))
            .await
            .expect("checkpoint");
        let (c, mut ec) = client(&r, "c").await;
        let j = c
            .join("doc", Role::Observer, ActivityMode::Passive, false)
            .await
            .expect("join c");
        assert_eq!(
            (j.checkpoint_seq, j.head_seq, &j.state[..]),
            (60, 100, &b"v60"[..])
        );
        assert_eq!(j.members.len(), 3);
        for want in 61..=100 {
            assert_eq!(next_delivery(&mut ec).await.0, want);
        }
        let err = c
            .send("doc", 1, Bytes::new())
            .await
            .expect_err("observers may not send");
        assert_eq!(err.code(), Some(ErrorCode::FORBIDDEN));
        let s = r.stats().await;
        assert_eq!(s.updates, 100);
        assert!(s.deliveries >= 240, "{s:?}");
        r.shutdown().await;
    })
    .await;
}

/// The core task writes a plain TCP socket directly and hands what the
/// socket does not take to the connection's writer task: frames far larger
/// than the socket's buffer, sent while the receiver reads nothing (its
/// event channel full, so its socket fills), arrive whole and in order
/// once it reads, through the task and back to direct writes.
#[tokio::test]
async fn frames_larger_than_the_socket_takes_arrive_whole_and_in_order() {
    in_time(async {
        let r = relay(|_| {}).await;
        let (a, _ea) = client(&r, "a").await;
        open_group(&a, "g", false).await;
        let (b, mut eb) = client(&r, "b").await;
        join(&b, "g", Role::Observer, false).await;
        let payload = |i: u8| Bytes::from(vec![i; 100_000 + usize::from(i)]);
        let mut seqs = Vec::new();
        for i in 0..24u8 {
            seqs.push(a.send("g", 1, payload(i)).await.expect("sent"));
        }
        // One more after them, past whatever the client buffered.
        seqs.push(a.send("g", 1, payload(200)).await.expect("sent"));
        let mut got = Vec::new();
        for _ in 0..seqs.len() {
            got.push(next_delivery(&mut eb).await);
        }
        assert_eq!(got.iter().map(|(s, _)| *s).collect::<Vec<_>>(), seqs);
        for (i, (_, p)) in got.iter().enumerate() {
            let tag = if i == 24 { 200 } else { i as u8 };
            assert!(*p == payload(tag), "delivery {i}: {} bytes", p.len());
        }
        r.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn a_websocket_client_speaks_the_same_frames() {
    in_time(async {
        let r = relay(|_| {}).await;
        let (a, _ea) = client(&r, "a").await;
        a.create_group("chat", "chat", 6, Bytes::new()).await.expect("create");
        a.join("chat", Role::Principal, ActivityMode::Active, false).await.expect("join");
        let url = format!("ws://{}/", r.ws_addr().expect("ws"));
        let (mut ws, _) = tokio_tungstenite::connect_async(url).await.expect("ws connect");
        let hello = Frame::Hello { max_version: 1, window: 0, token: String::new(), name: "browser".into() };
        ws.send(Message::Binary(frame::encode(1, &hello))).await.expect("send");
        let join = Frame::Join { group: "chat".into(), role: Role::Observer, mode: ActivityMode::Active, watch_membership: false, resume_after: None };
        ws.send(Message::Binary(frame::encode(2, &join))).await.expect("send");
        let mut got = Vec::new();
        let mut sent = false;
        while got.len() < 3 {
            let Some(Ok(Message::Binary(b))) = ws.next().await else { panic!("ws closed") };
            let env = frame::decode(&b, frame::DEFAULT_MAX_FRAME).expect("decodes");
            if matches!(env.frame, Frame::Joined(JoinInfo { .. })) && !sent {
                sent = true;
                a.send("chat", 1, Bytes::from_static(b"hi browser")).await.expect("send");
            }
            got.push(env.frame);
        }
        assert!(matches!(got[0], Frame::Welcome { .. }));
        assert!(matches!(got[1], Frame::Joined(JoinInfo { .. })));
        assert!(matches!(&got[2], Frame::Deliver(Update { seq: 1, payload, .. }) if &payload[..] == b"hi browser"));
        // A text message is a protocol error: an error frame, then close.
        ws.send(Message::Text("hello".into())).await.expect("send");
        let mut code = None;
        while let Some(Ok(m)) = ws.next().await {
            if let Message::Binary(b) = m
                && let Ok(frame::Envelope { frame: Frame::Error { code: c, .. }, .. }) = frame::decode(&b, usize::MAX)
            {
                code = Some(c);
            }
        }
        assert_eq!(code, Some(ErrorCode::PROTOCOL_VIOLATION));
        r.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn tokens_are_checked_on_the_wire() {
    in_time(async {
        let secret = b"test-secret".to_vec();
        let s2 = secret.clone();
        let r = relay(move |c| {
            c.core.auth_keys = Some(auth::Keys::single("k", &s2).expect("key"));
        })
        .await;
        let err = RelayClient::connect(r.local_addr(), ClientOptions::new("x"))
            .await
            .expect_err("no token");
        assert_eq!(err.code(), Some(ErrorCode::UNAUTHORIZED));
        let token = auth::mint(
            "k",
            &secret,
            &Claims {
                groups: vec!["lab-*".into()],
                expires_unix: groupwire_relay::client::wall_micros() / 1_000_000 + 3600,
                ..Claims::anyone()
            },
        )
        .expect("mint");
        let (c, _e) = RelayClient::connect(r.local_addr(), ClientOptions::new("x").token(&token))
            .await
            .expect("token ok");
        c.create_group("lab-1", "t", 3, Bytes::new())
            .await
            .expect("allowed");
        let err = c
            .create_group("other", "t", 3, Bytes::new())
            .await
            .expect_err("not allowed");
        assert_eq!(err.code(), Some(ErrorCode::FORBIDDEN));
        assert_eq!(r.stats().await.auth_failures, 1);
        r.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn a_lock_held_by_a_client_that_disconnects_goes_to_the_next_waiter() {
    in_time(async {
        let r = relay(|_| {}).await;
        let (a, _ea) = client(&r, "a").await;
        let (b, mut eb) = client(&r, "b").await;
        open_group(&a, "g", false).await;
        join(&b, "g", Role::Principal, true).await;
        a.lock("g", "pen").await.expect("lock");
        assert!(!b.try_lock("g", "pen").await.expect("try"));
        let waiter = tokio::spawn({
            let b = b.clone();
            async move { b.lock("g", "pen").await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished());
        drop(a);
        drop(_ea);
        waiter
            .await
            .expect("task")
            .expect("granted after a's disconnect");
        let mut saw_disconnect = false;
        while let Ok(Some(ev)) = tokio::time::timeout(Duration::from_millis(200), eb.recv()).await {
            if let ClientEvent::Membership(MembershipNotice {
                change: frame::MembershipChange::Disconnected,
                ..
            }) = ev
            {
                saw_disconnect = true;
            }
        }
        assert!(saw_disconnect);
        b.unlock("g", "pen").await.expect("unlock");
        let err = b
            .unlock("g", "pen")
            .await
            .expect_err("not the holder any more");
        assert_eq!(err.code(), Some(ErrorCode::NOT_HOLDER));
        r.shutdown().await;
    })
    .await;
}

/// Reads frames from a raw socket until it closes; returns the error codes.
async fn error_codes_until_close(s: &mut TcpStream) -> Vec<ErrorCode> {
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf)).await;
    let mut d = frame::FrameDecoder::new(usize::MAX);
    d.extend(&buf);
    let mut codes = Vec::new();
    while let Ok(Some(f)) = d.next_frame() {
        if let Ok(frame::Envelope {
            frame: Frame::Error { code, .. },
            ..
        }) = frame::decode(&f, usize::MAX)
        {
            codes.push(code);
        }
    }
    codes
}

#[tokio::test]
async fn hostile_input_gets_an_error_and_a_close_never_a_crash() {
    in_time(async {
        let r = relay(|c| c.core.max_frame = 64 << 10).await;
        let hello = hello("evil");
        let cases: Vec<(Vec<u8>, ErrorCode)> = vec![
            // An oversized length prefix: rejected before the body arrives.
            (
                [&hello[..], &[0x7f, 0xff, 0xff, 0xff]].concat(),
                ErrorCode::FRAME_TOO_LARGE,
            ),
            // Garbage kind.
            (
                [&hello[..], &[0, 0, 0, 8, 1, 0x33, 0, 0, 0, 0, 0, 9]].concat(),
                ErrorCode::MALFORMED,
            ),
            // Unknown version.
            (
                [&hello[..], &[0, 0, 0, 8, 9, 0x0e, 0, 0, 0, 0, 0, 9]].concat(),
                ErrorCode::UNSUPPORTED_VERSION,
            ),
            // Not Hello first.
            (
                frame::encode(1, &Frame::Ping { nonce: 1 }).to_vec(),
                ErrorCode::PROTOCOL_VIOLATION,
            ),
            // Credit for bytes never sent.
            (
                [
                    &hello[..],
                    &frame::encode(2, &Frame::Credit { consumed: 1 << 40 })[..],
                ]
                .concat(),
                ErrorCode::PROTOCOL_VIOLATION,
            ),
        ];
        for (bytes, want) in cases {
            let mut s = TcpStream::connect(r.local_addr()).await.expect("connect");
            s.write_all(&bytes).await.expect("write");
            let codes = error_codes_until_close(&mut s).await;
            assert_eq!(codes.last(), Some(&want), "{codes:?}");
        }
        // The relay is still fine.
        let (c, _e) = client(&r, "ok").await;
        c.ping().await.expect("ping");
        let s = r.stats().await;
        assert_eq!(
            (
                s.oversized_frames,
                s.malformed_frames,
                s.unsupported_versions,
                s.protocol_violations
            ),
            (1, 1, 1, 2)
        );
        r.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn a_client_that_never_reads_is_disconnected_and_memory_stays_bounded() {
    in_time(async {
        let r = relay(|c| {
            c.core.sched = SchedulerConfig {
                slow_policy: SlowConsumerPolicy::Disconnect,
                max_client_queue_bytes: 2 << 20,
                ..SchedulerConfig::default()
            };
            c.storage = StorageConfig::Memory;
        })
        .await;
        let (a, mut ea) = client(&r, "a").await;
        open_group(&a, "g", false).await;
        // A raw client that joins and then never reads a byte.
        let mut s = TcpStream::connect(r.local_addr()).await.expect("connect");
        s.write_all(&hello("stuck")).await.expect("w");
        s.write_all(&frame::encode(
            2,
            &Frame::Join {
                group: "g".into(),
                role: Role::Observer,
                mode: ActivityMode::Active,
                watch_membership: false,
                resume_after: None,
            },
        ))
        .await
        .expect("w");
        let drain = tokio::spawn(async move { while ea.recv().await.is_some() {} });
        let payload = Bytes::from(vec![7u8; 60_000]);
        for _ in 0..120 {
            a.send("g", 1, payload.clone())
                .await
                .expect("the reader keeps going");
        }
        let st = r.stats().await;
        assert_eq!(st.sched.slow_disconnects, 1, "{st:?}");
        assert!(st.sched.max_queued_bytes < 4 << 20, "{st:?}");
        drop(s);
        drop(a);
        let _ = drain.await;
        r.shutdown().await;
    })
    .await;
}
