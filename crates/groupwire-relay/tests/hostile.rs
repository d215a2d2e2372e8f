//! The relay against hostile and broken clients on loopback: clients that
//! never read, never speak, open too many connections, send text over
//! WebSocket, oversized frames with a body behind them, or plain HTTP.
//! Every wait is bounded by a generous timeout; nothing asserts how fast
//! the machine is.

use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use groupwire_relay::frame::{self, ErrorCode, Frame, Role};
use groupwire_relay::{ClientEvent, ClientOptions, RelayClient, RelayHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

mod common;
use common::{LIMIT, client, hello, in_time, join, open_group, relay};

/// Reads frames until the relay closes (or `LIMIT`); returns them.
async fn frames_until_close(s: &mut TcpStream) -> Vec<Frame> {
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(LIMIT, s.read_to_end(&mut buf)).await;
    let mut d = frame::FrameDecoder::new(usize::MAX);
    d.extend(&buf);
    let mut out = Vec::new();
    while let Ok(Some(f)) = d.next_frame() {
        if let Ok(env) = frame::decode(&f, usize::MAX) {
            out.push(env.frame);
        }
    }
    out
}

fn last_error(frames: &[Frame]) -> Option<ErrorCode> {
    frames.iter().rev().find_map(|f| match f {
        Frame::Error { code, .. } => Some(*code),
        _ => None,
    })
}

/// Reads `ws` until the relay closes it; the close frame it sent, if any.
async fn close_frame(ws: &mut WebSocketStream<MaybeTlsStream<TcpStream>>) -> Option<CloseFrame> {
    let mut close = None;
    while let Some(Ok(m)) = ws.next().await {
        if let Message::Close(c) = m {
            close = c;
        }
    }
    close
}

/// Polls the relay's counters until `f` holds (the test's timeout bounds it).
async fn wait_for(r: &RelayHandle, f: impl Fn(&groupwire_relay::RelayStats) -> bool) {
    loop {
        let s = r.stats().await;
        if f(&s) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_client_flooding_pings_without_reading_is_paused_and_members_still_get_theirs() {
    in_time(async {
        let cap = 1 << 20;
        let r = relay(|c| {
            c.core.sched.max_client_queue_bytes = cap;
            c.input_pause_bytes = 16 << 10;
        })
        .await;
        let (a, _ea) = client(&r, "a").await;
        let (b, mut eb) = client(&r, "b").await;
        open_group(&a, "g", false).await;
        join(&b, "g", Role::Observer, false).await;
        // The flooder: Hello, then Pings (bounded: 64 MiB at most), and it
        // never reads a byte. Before backpressure its replies grew until
        // the cap cut it; now the relay stops reading it.
        let mut s = TcpStream::connect(r.local_addr()).await.expect("connect");
        s.write_all(&hello("flooder")).await.expect("hello");
        let ping = frame::encode(9, &Frame::Ping { nonce: 1 });
        let batch: Vec<u8> = ping
            .iter()
            .copied()
            .cycle()
            .take(ping.len() * 1000)
            .collect();
        let flood = tokio::spawn(async move {
            for _ in 0..(64 << 20) / batch.len() {
                if s.write_all(&batch).await.is_err() {
                    break;
                }
            }
            s
        });
        wait_for(&r, |s| s.input_pauses >= 1).await;
        // The flooder's writes block once its socket buffers are full;
        // meanwhile a member still gets every delivery.
        for i in 0..20u8 {
            a.send("g", 1, Bytes::from(vec![i; 100]))
                .await
                .expect("send");
            loop {
                match eb.recv().await.expect("event") {
                    ClientEvent::Deliver(d) => {
                        assert_eq!(d.payload[0], i);
                        break;
                    }
                    ClientEvent::Closed(e) => panic!("closed: {e:?}"),
                    _ => {}
                }
            }
        }
        let st = r.stats().await;
        assert_eq!(st.sched.slow_disconnects, 0, "paused, not cut: {st:?}");
        assert!(
            st.sched.max_queued_bytes < cap as u64,
            "the relay's queued bytes stay under the cap: {st:?}"
        );
        assert!(!flood.is_finished(), "the flooder is blocked, not done");
        flood.abort();
        r.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn a_connection_without_hello_gets_timeout_and_is_closed() {
    in_time(async {
        let r = relay(|c| c.handshake_timeout = Duration::from_millis(200)).await;
        let mut s = TcpStream::connect(r.local_addr()).await.expect("connect");
        let frames = frames_until_close(&mut s).await;
        assert_eq!(last_error(&frames), Some(ErrorCode::TIMEOUT), "{frames:?}");
        // A half-open WebSocket upgrade is closed too.
        http(&r, b"GET / HTTP/1.1\r\nHost: x\r\n").await;
        assert_eq!(r.stats().await.handshake_timeouts, 2);
        r.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn an_idle_connection_is_closed_and_pings_keep_one_open() {
    in_time(async {
        let r = relay(|c| c.idle_timeout = Some(Duration::from_secs(2))).await;
        // Silent after Hello: closed with TIMEOUT.
        let mut s = TcpStream::connect(r.local_addr()).await.expect("connect");
        s.write_all(&hello("quiet")).await.expect("hello");
        let frames = frames_until_close(&mut s).await;
        assert!(
            matches!(frames.first(), Some(Frame::Welcome { .. })),
            "{frames:?}"
        );
        assert_eq!(last_error(&frames), Some(ErrorCode::TIMEOUT), "{frames:?}");
        // Pinging every 50 ms (40 times the idle timeout's rate) keeps a
        // connection open past it.
        let (c, mut ev) = client(&r, "pinger").await;
        for _ in 0..60 {
            c.ping().await.expect("still open");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(ev.try_recv().is_err(), "no Closed event");
        drop((c, ev));
        // The Rust client's keepalive does the same on its own.
        let mut opts = ClientOptions::new("listener");
        opts.keepalive = Duration::from_millis(100);
        let (l, mut lev) = RelayClient::connect(r.local_addr(), opts)
            .await
            .expect("connect");
        tokio::time::sleep(Duration::from_secs(3)).await;
        l.ping().await.expect("kept alive past the idle timeout");
        assert!(lev.try_recv().is_err(), "no Closed event");
        assert_eq!(r.stats().await.idle_timeouts, 1);
        r.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn connections_per_address_are_capped() {
    in_time(async {
        let r = relay(|c| c.max_conns_per_ip = 2).await;
        let (a, _ea) = client(&r, "a").await;
        let (b, _eb) = client(&r, "b").await;
        // The third from 127.0.0.1 is closed without a word.
        let mut s = TcpStream::connect(r.local_addr()).await.expect("connect");
        let _ = s.write_all(&hello("c")).await;
        let mut buf = Vec::new();
        let _ = tokio::time::timeout(LIMIT, s.read_to_end(&mut buf))
            .await
            .expect("closed in time");
        assert!(buf.is_empty(), "refused before Hello: {buf:?}");
        assert_eq!(r.stats().await.refused_per_ip, 1);
        a.ping().await.expect("a is fine");
        // Once one leaves, a new one gets in.
        drop(b);
        drop(_eb);
        loop {
            if RelayClient::connect(r.local_addr(), ClientOptions::new("d"))
                .await
                .is_ok()
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        r.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn a_websocket_text_message_gets_protocol_violation_and_a_close_code() {
    in_time(async {
        let r = relay(|_| {}).await;
        let url = format!("ws://{}/", r.ws_addr().expect("ws"));
        let (mut ws, _) = tokio_tungstenite::connect_async(url)
            .await
            .expect("ws connect");
        ws.send(Message::Binary(hello("browser")))
            .await
            .expect("send");
        ws.send(Message::Text("hello".into())).await.expect("send");
        let (mut code, mut close) = (None, None);
        while let Some(Ok(m)) = ws.next().await {
            match m {
                Message::Binary(b) => {
                    if let Ok(frame::Envelope {
                        frame: Frame::Error { code: c, .. },
                        ..
                    }) = frame::decode(&b, usize::MAX)
                    {
                        code = Some(c);
                    }
                }
                Message::Close(c) => close = c,
                _ => {}
            }
        }
        assert_eq!(code, Some(ErrorCode::PROTOCOL_VIOLATION));
        let close = close.expect("a close frame with a code");
        assert_eq!(close.code, CloseCode::Policy);
        assert!(
            close.reason.starts_with("protocol-violation: "),
            "{}",
            close.reason
        );
        r.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn websocket_closes_say_why() {
    in_time(async {
        let r = relay(|c| c.core.max_frame = 4096).await;
        let url = format!("ws://{}/", r.ws_addr().expect("ws"));
        let (mut ws, _) = tokio_tungstenite::connect_async(&url)
            .await
            .expect("ws connect");
        ws.send(Message::Binary(hello("big"))).await.expect("send");
        let _ = ws.send(Message::Binary(Bytes::from(vec![0u8; 8192]))).await;
        let close = close_frame(&mut ws).await;
        let close = close.expect("a close frame");
        assert_eq!(close.code, CloseCode::Size);
        assert!(
            close.reason.starts_with("frame-too-large"),
            "{}",
            close.reason
        );
        // The relay stopping closes with "going away".
        let (mut ws, _) = tokio_tungstenite::connect_async(&url)
            .await
            .expect("ws connect");
        ws.send(Message::Binary(hello("b"))).await.expect("send");
        let _ = ws.next().await; // Welcome
        r.shutdown().await;
        let close = close_frame(&mut ws).await;
        assert_eq!(close.expect("a close frame").code, CloseCode::Away);
    })
    .await;
}

/// Writes all of `bytes` (however long the relay takes to drain them),
/// closes the write side, and returns every frame the relay sent until it
/// closed: everything is written before anything is read, so a reset
/// caused by unread input would arrive before the read.
async fn write_all_then_read(s: &mut TcpStream, bytes: &[u8]) -> Vec<Frame> {
    let _ = tokio::time::timeout(LIMIT, s.write_all(bytes)).await;
    let _ = s.shutdown().await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut frames = Vec::new();
    let _ = tokio::time::timeout(LIMIT, s.read_to_end(&mut frames)).await;
    let mut d = frame::FrameDecoder::new(usize::MAX);
    d.extend(&frames);
    let mut got = Vec::new();
    while let Ok(Some(f)) = d.next_frame() {
        got.push(frame::decode(&f, usize::MAX).expect("decodes").frame);
    }
    got
}

#[tokio::test]
async fn an_oversized_frame_with_a_body_behind_it_still_gets_its_error_before_the_close() {
    in_time(async {
        let r = relay(|c| c.core.max_frame = 64 << 10).await;
        for _ in 0..5 {
            let mut s = TcpStream::connect(r.local_addr()).await.expect("connect");
            // Hello, then a 1 MiB frame the relay rejects at its prefix,
            // with its body sent anyway: unread input at close used to
            // reset the connection under the error.
            let mut bytes = hello("big").to_vec();
            bytes.extend_from_slice(&(1u32 << 20).to_be_bytes());
            bytes.extend(std::iter::repeat_n(0u8, 1 << 20));
            // The write finishes only because the relay drains it.
            let got = write_all_then_read(&mut s, &bytes).await;
            assert_eq!(
                last_error(&got),
                Some(ErrorCode::FRAME_TOO_LARGE),
                "{got:?}"
            );
        }
        assert_eq!(r.stats().await.oversized_frames, 5);
        r.shutdown().await;
    })
    .await;
}

/// An error the core sends (here for a frame of an unknown version)
/// reaches a client that keeps writing frames before it reads: the relay
/// lingers as it does for errors its reader finds. Its connection task
/// used to panic there (a oneshot polled after it completed) and drop the
/// socket with input unread, which reset the connection under the error.
#[tokio::test]
async fn an_error_from_the_core_reaches_a_client_that_keeps_writing() {
    thread_local! {
        static PANICS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    }
    // The relay's tasks run on this test's thread (a current-thread
    // runtime), so a panic in one of them is counted here; tokio would
    // otherwise swallow it.
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.with(|p| p.set(p.get() + 1));
        previous(info);
    }));
    in_time(async {
        let r = relay(|_| {}).await;
        for _ in 0..3 {
            let mut s = TcpStream::connect(r.local_addr()).await.expect("connect");
            let mut bytes = hello("late").to_vec();
            bytes.extend_from_slice(&[0, 0, 0, 8, 9, 0x0e, 0, 0, 0, 0, 0, 9]);
            let ping = frame::encode(0, &Frame::Ping { nonce: 1 });
            for _ in 0..(1 << 20) / ping.len() {
                bytes.extend_from_slice(&ping);
            }
            let got = write_all_then_read(&mut s, &bytes).await;
            assert_eq!(
                last_error(&got),
                Some(ErrorCode::UNSUPPORTED_VERSION),
                "{got:?}"
            );
        }
        r.shutdown().await;
        assert_eq!(
            PANICS.with(std::cell::Cell::get),
            0,
            "a relay task panicked"
        );
    })
    .await;
}

#[tokio::test]
async fn a_plain_http_get_on_the_websocket_port_gets_an_http_error() {
    in_time(async {
        let r = relay(|c| c.demo_page = false).await;
        let mut s = TcpStream::connect(r.ws_addr().expect("ws"))
            .await
            .expect("connect");
        s.write_all(b"GET / HTTP/1.1\r\nHost: relay\r\n\r\n")
            .await
            .expect("write");
        let mut buf = Vec::new();
        tokio::time::timeout(LIMIT, s.read_to_end(&mut buf))
            .await
            .expect("answered and closed in time")
            .expect("read");
        let text = String::from_utf8_lossy(&buf);
        assert!(
            text.starts_with("HTTP/1.1 426 Upgrade Required\r\n"),
            "{text}"
        );
        assert!(text.contains("Upgrade: websocket\r\n"), "{text}");
        assert!(text.contains("WebSocket"), "a short body: {text}");
        // Not a GET at all.
        let buf = http(
            &r,
            b"POST / HTTP/1.1\r\nHost: relay\r\nContent-Length: 0\r\n\r\n",
        )
        .await;
        assert!(
            buf.starts_with(b"HTTP/1.1 405 "),
            "{}",
            String::from_utf8_lossy(&buf)
        );
        // Real WebSocket clients still get in.
        ws_client_gets_in(&r, "/any/path").await;
        r.shutdown().await;
    })
    .await;
}

/// Connects a WebSocket client to `path` on the WebSocket port and pings.
async fn ws_client_gets_in(r: &RelayHandle, path: &str) {
    let url = format!("ws://{}{path}", r.ws_addr().expect("ws"));
    let (c, _e) = RelayClient::connect_url(&url, ClientOptions::new("w"))
        .await
        .expect("ws client");
    c.ping().await.expect("ping");
}

/// Sends `request` to the WebSocket port and reads the answer to the end
/// (the relay closes after one response).
async fn http(r: &RelayHandle, request: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(r.ws_addr().expect("ws"))
        .await
        .expect("connect");
    s.write_all(request).await.expect("write");
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(LIMIT, s.read_to_end(&mut buf))
        .await
        .expect("answered and closed in time");
    buf
}

#[tokio::test]
async fn the_websocket_port_serves_the_demo_page_and_nothing_else() {
    in_time(async {
        let r = relay(|_| {}).await;
        let page = http(&r, b"GET /?board=x HTTP/1.1\r\nHost: relay\r\n\r\n").await;
        let text = String::from_utf8_lossy(&page);
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
        assert!(text.contains("Content-Type: text/html; charset=utf-8\r\n"));
        assert!(text.contains("Connection: close\r\n"));
        let (head, body) = text.split_once("\r\n\r\n").expect("a head and a body");
        assert!(head.contains(&format!("Content-Length: {}\r\n", body.len())));
        assert!(
            body.contains("from '/groupwire.js'"),
            "the page imports the client"
        );
        let js = http(&r, b"GET /groupwire.js HTTP/1.1\r\nHost: relay\r\n\r\n").await;
        let js = String::from_utf8_lossy(&js);
        assert!(js.starts_with("HTTP/1.1 200 OK\r\n"));
        assert!(js.contains("Content-Type: text/javascript; charset=utf-8\r\n"));
        // The minified bundle exports `connect` under its own name.
        assert!(
            js.contains(" as connect,") || js.contains(" as connect}"),
            "{js}"
        );
        // Every other path or method: an error, then close.
        for (req, status) in [
            (&b"GET /etc/passwd HTTP/1.1\r\n\r\n"[..], "404"),
            (b"GET /../groupwire.js HTTP/1.1\r\n\r\n", "404"),
            (b"HEAD / HTTP/1.1\r\n\r\n", "405"),
            (b"POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", "405"),
            (b"garbage\r\n\r\n", "400"),
        ] {
            let got = http(&r, req).await;
            assert!(
                got.starts_with(format!("HTTP/1.1 {status} ").as_bytes()),
                "{}: {}",
                String::from_utf8_lossy(req),
                String::from_utf8_lossy(&got)
            );
            assert!(got.len() < 512, "a short answer");
        }
        // Two requests on one connection get one answer: no keep-alive.
        let two = http(&r, b"GET / HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\n").await;
        assert_eq!(
            String::from_utf8_lossy(&two)
                .matches("HTTP/1.1 200")
                .count(),
            1
        );
        // And WebSocket clients still get in, on / too.
        ws_client_gets_in(&r, "/").await;
        r.shutdown().await;
    })
    .await;
}
