//! `RelayClient` over WebSocket next to TCP clients on one relay: total
//! order both ways, locks, disconnects as leaves, frame caps, and clear
//! errors for bad URLs and failed handshakes.

use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use groupwire_relay::frame::{
    self, ActivityMode, ErrorCode, Frame, MembershipChange, MembershipNotice, Role,
};
use groupwire_relay::{
    ClientError, ClientEvent, ClientOptions, RelayClient, RelayHandle, ServerConfig, StorageConfig,
};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

mod common;
use common::{in_time, join, open_group};

async fn relay(f: impl FnOnce(&mut ServerConfig)) -> RelayHandle {
    common::relay(|cfg| {
        cfg.storage = StorageConfig::Memory;
        f(cfg);
    })
    .await
}

fn ws_url(r: &RelayHandle) -> String {
    format!("ws://{}/", r.ws_addr().expect("ws listener"))
}

use common::client as tcp_client;

async fn ws_client(r: &RelayHandle, name: &str) -> (RelayClient, mpsc::Receiver<ClientEvent>) {
    RelayClient::connect_ws(&ws_url(r), ClientOptions::new(name))
        .await
        .expect("ws connect")
}

async fn next_delivery(ev: &mut mpsc::Receiver<ClientEvent>) -> (u64, u64, Bytes) {
    loop {
        match ev.recv().await.expect("event") {
            ClientEvent::Deliver(d) => return (d.seq, d.sender, d.payload),
            ClientEvent::Closed(e) => panic!("closed: {e:?}"),
            _ => {}
        }
    }
}

async fn send_many(c: &RelayClient, group: &str, prefix: &str, n: usize) -> Vec<u64> {
    let mut seqs = Vec::new();
    for i in 0..n {
        seqs.push(
            c.send(group, 1, Bytes::from(format!("{prefix}{i}")))
                .await
                .expect("send"),
        );
    }
    seqs
}

#[tokio::test]
async fn tcp_and_websocket_clients_share_one_total_order() {
    in_time(async {
        let r = relay(|_| {}).await;
        let (t, mut et) = tcp_client(&r, "tcp").await;
        let (w, mut ew) = ws_client(&r, "ws").await;
        assert_ne!(t.client_id(), w.client_id());
        w.create_group("doc", "text", 5, Bytes::from_static(b"v0"))
            .await
            .expect("create over ws");
        let jt = t
            .join("doc", Role::Principal, ActivityMode::Active, false)
            .await
            .expect("join tcp");
        assert_eq!(&jt.state[..], b"v0");
        let jw = w
            .join("doc", Role::Principal, ActivityMode::Active, true)
            .await
            .expect("join ws");
        assert_eq!(jw.members.len(), 2);
        let (st, sw) = tokio::join!(send_many(&t, "doc", "t", 50), send_many(&w, "doc", "w", 50));
        assert!(st.windows(2).all(|p| p[0] < p[1]) && sw.windows(2).all(|p| p[0] < p[1]));
        let mut dt = Vec::new();
        let mut dw = Vec::new();
        for _ in 0..100 {
            dt.push(next_delivery(&mut et).await);
            dw.push(next_delivery(&mut ew).await);
        }
        assert_eq!(dt, dw, "the same order on both transports");
        assert_eq!(
            dt.iter().map(|d| d.0).collect::<Vec<_>>(),
            (1..=100).collect::<Vec<_>>()
        );
        // Each side got the other's updates, in its send order, at the
        // sequence numbers its sender was told.
        for (me, seqs, prefix) in [(t.client_id(), &st, "t"), (w.client_id(), &sw, "w")] {
            let mine: Vec<_> = dw.iter().filter(|d| d.1 == me).collect();
            assert_eq!(mine.iter().map(|d| d.0).collect::<Vec<_>>(), *seqs);
            for (i, d) in mine.iter().enumerate() {
                assert_eq!(d.2, Bytes::from(format!("{prefix}{i}")));
            }
        }
        w.checkpoint("doc", 100, Bytes::from_static(b"v100"))
            .await
            .expect("checkpoint over ws");
        w.ping().await.expect("ping over ws");
        assert_eq!(r.stats().await.updates, 100);
        r.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn locks_pass_between_tcp_and_websocket_clients() {
    in_time(async {
        let r = relay(|_| {}).await;
        let (t, _et) = tcp_client(&r, "tcp").await;
        let (w, _ew) = ws_client(&r, "ws").await;
        open_group(&t, "g", false).await;
        join(&w, "g", Role::Principal, false).await;
        w.lock("g", "pen").await.expect("ws locks");
        assert!(!t.try_lock("g", "pen").await.expect("try"));
        let waiter = tokio::spawn({
            let t = t.clone();
            async move { t.lock("g", "pen").await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished(), "tcp waits behind ws");
        w.unlock("g", "pen").await.expect("ws unlocks");
        waiter.await.expect("task").expect("tcp granted");
        assert!(!w.try_lock("g", "pen").await.expect("try"));
        let err = w.unlock("g", "pen").await.expect_err("not the holder");
        assert_eq!(err.code(), Some(ErrorCode::NOT_HOLDER));
        t.unlock("g", "pen").await.expect("tcp unlocks");
        assert!(w.try_lock("g", "pen").await.expect("try"));
        r.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn a_websocket_client_that_disconnects_is_a_leave() {
    in_time(async {
        let r = relay(|_| {}).await;
        let (t, mut et) = tcp_client(&r, "tcp").await;
        open_group(&t, "g", true).await;
        let (w, ew) = ws_client(&r, "ws").await;
        let ws_id = w.client_id();
        join(&w, "g", Role::Principal, false).await;
        w.lock("g", "pen").await.expect("ws locks");
        let waiter = tokio::spawn({
            let t = t.clone();
            async move { t.lock("g", "pen").await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished());
        // Dropping every handle closes the WebSocket.
        drop(w);
        drop(ew);
        waiter
            .await
            .expect("task")
            .expect("granted after the ws client left");
        let mut changes = Vec::new();
        while changes.last() != Some(&MembershipChange::Disconnected) {
            match et.recv().await.expect("event") {
                ClientEvent::Membership(MembershipNotice { client, change, .. })
                    if client == ws_id =>
                {
                    changes.push(change);
                }
                ClientEvent::Closed(e) => panic!("closed: {e:?}"),
                _ => {}
            }
        }
        assert_eq!(
            changes,
            [MembershipChange::Joined, MembershipChange::Disconnected]
        );
        let (late, _el) = ws_client(&r, "late").await;
        let j = late
            .join("g", Role::Observer, ActivityMode::Passive, false)
            .await
            .expect("join late");
        assert!(
            j.members.iter().all(|m| m.client != ws_id),
            "{:?}",
            j.members
        );
        assert_eq!(j.members.len(), 2);
        r.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn connect_url_picks_the_transport_by_scheme() {
    in_time(async {
        let r = relay(|_| {}).await;
        let tcp = r.local_addr().to_string();
        for addr in [tcp.clone(), format!("tcp://{tcp}"), ws_url(&r)] {
            let (c, _e) = RelayClient::connect_url(&addr, ClientOptions::new("u"))
                .await
                .unwrap_or_else(|e| panic!("{addr}: {e}"));
            c.ping().await.expect("ping");
        }
        let err = RelayClient::connect_url("http://example.invalid/", ClientOptions::new("u"))
            .await
            .expect_err("not a relay scheme");
        assert!(matches!(err, ClientError::InvalidAddress { .. }), "{err}");
        r.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn bad_urls_and_failed_handshakes_are_clear_errors() {
    in_time(async {
        let secret = b"test-secret".to_vec();
        let r = relay(|c| {
            c.core.auth_keys =
                Some(groupwire_relay::auth::Keys::single("k", &secret).expect("key"));
        })
        .await;
        for (url, why) in [
            ("not a url", "not a URL"),
            ("ws://", "not a URL"),
            ("http://127.0.0.1:1/", "ws://"),
        ] {
            match RelayClient::connect_ws(url, ClientOptions::new("x")).await {
                Err(ClientError::InvalidAddress { addr, reason }) => {
                    assert_eq!(addr, url);
                    assert!(reason.contains(why), "{url}: {reason}");
                }
                other => panic!("{url}: {:?}", other.map(|_| ())),
            }
        }
        // Nobody listening.
        let free = std::net::TcpListener::bind("127.0.0.1:0")
            .expect("bind")
            .local_addr()
            .expect("addr");
        let err = RelayClient::connect_ws(&format!("ws://{free}/"), ClientOptions::new("x"))
            .await
            .expect_err("refused");
        assert!(matches!(err, ClientError::Connect(_)), "{err}");
        // The relay's TCP port does not speak HTTP: the upgrade fails, and
        // nothing hangs.
        let err = RelayClient::connect_ws(
            &format!("ws://{}/", r.local_addr()),
            ClientOptions::new("x"),
        )
        .await
        .expect_err("not a websocket server");
        match &err {
            ClientError::Connect(m) => assert!(m.contains("WebSocket handshake"), "{m}"),
            other => panic!("{other:?}"),
        }
        // The handshake succeeds but the relay refuses the Hello: its error,
        // as over TCP.
        let err = RelayClient::connect_ws(&ws_url(&r), ClientOptions::new("x"))
            .await
            .expect_err("no token");
        assert_eq!(err.code(), Some(ErrorCode::UNAUTHORIZED), "{err}");
        r.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn oversized_requests_fail_locally_and_maximal_ones_reach_websocket_clients() {
    in_time(async {
        const CAP: usize = 64 << 10;
        let r = relay(|c| c.core.max_frame = CAP).await;
        let (t, mut et) = tcp_client(&r, "tcp").await;
        let (w, mut ew) = ws_client(&r, "ws").await;
        assert_eq!((t.max_frame(), w.max_frame()), (CAP, CAP));
        open_group(&t, "g", false).await;
        join(&w, "g", Role::Principal, false).await;
        let header = frame::encode(
            0,
            &Frame::Send {
                group: "g".into(),
                msg_type: 1,
                sent_at_micros: 0,
                payload: Bytes::new(),
            },
        )
        .len();
        let fits = Bytes::from(vec![7u8; CAP - header]);
        let too_big = Bytes::from(vec![7u8; CAP - header + 1]);
        for c in [&t, &w] {
            let err = c
                .send("g", 1, too_big.clone())
                .await
                .expect_err("one byte over the cap");
            assert_eq!(
                err,
                ClientError::FrameTooLarge {
                    len: CAP + 1,
                    max: CAP
                }
            );
            c.ping().await.expect("the connection survives");
        }
        // A Send of exactly the cap comes back as a Deliver a little over
        // it; both clients take it.
        let seq = t.send("g", 1, fits.clone()).await.expect("fits");
        assert_eq!(
            next_delivery(&mut et).await,
            (seq, t.client_id(), fits.clone())
        );
        assert_eq!(next_delivery(&mut ew).await, (seq, t.client_id(), fits));
        assert_eq!(r.stats().await.oversized_frames, 0);
        r.shutdown().await;
    })
    .await;
}

/// A one-connection WebSocket "relay" that answers `Hello` with a
/// `Welcome`, then sends `bad`; returns its URL.
async fn broken_relay(bad: Message) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("ws://{}/", listener.local_addr().expect("addr"));
    tokio::spawn(async move {
        let (s, _) = listener.accept().await.expect("accept");
        let mut ws = tokio_tungstenite::accept_async(s).await.expect("upgrade");
        let Some(Ok(Message::Binary(hello))) = ws.next().await else {
            panic!("no hello")
        };
        let env = frame::decode(&hello, usize::MAX).expect("hello decodes");
        assert!(matches!(env.frame, Frame::Hello { .. }));
        let welcome = Frame::Welcome {
            version: 1,
            client: 9,
            max_frame: 1 << 20,
            window: 1 << 20,
            resume: false,
        };
        let _ = ws.send(Message::Binary(frame::encode(1, &welcome))).await;
        let _ = ws.send(bad).await;
        // Stay open: the client must be the one to give up.
        while let Some(Ok(_)) = ws.next().await {}
    });
    url
}

#[tokio::test]
async fn a_relay_that_breaks_websocket_framing_ends_the_connection_with_an_error() {
    in_time(async {
        let ping = frame::encode(0, &Frame::Pong { nonce: 1 });
        let cases = [
            (
                Message::Binary(Bytes::from([&ping[..], &ping[..]].concat())),
                "not exactly one frame",
            ),
            (
                Message::Binary(ping.slice(..ping.len() - 1)),
                "not exactly one frame",
            ),
            (
                Message::Binary(Bytes::from_static(&[0, 0])),
                "not exactly one frame",
            ),
            (
                Message::Binary(Bytes::from(vec![0u8; 4096])),
                "exceeds the frame cap of 2048",
            ),
            (Message::Text("hi".into()), "text message"),
        ];
        for (bad, why) in cases {
            let url = broken_relay(bad).await;
            let (c, mut ev) =
                RelayClient::connect_ws(&url, ClientOptions::new("x").max_incoming_frame(2048))
                    .await
                    .expect("the welcome is fine");
            assert_eq!(c.client_id(), 9);
            match ev.recv().await.expect("an event") {
                ClientEvent::Closed(Some(ClientError::Unexpected(m))) => {
                    assert!(m.contains(why), "{why}: {m}");
                }
                other => panic!("{why}: {other:?}"),
            }
            assert_eq!(c.ping().await, Err(ClientError::Closed));
        }
    })
    .await;
}
