use std::sync::{Arc, Mutex};

use groupwire_proto::control::ControllerKind;
use tokio::net::UdpSocket;
use tokio::sync::oneshot;

use super::*;

const LO: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::LOCALHOST), 0);

/// Echoes every datagram back to its source until the task is dropped.
async fn echo_server() -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let s = UdpSocket::bind(LO).await.expect("bind echo");
    let addr = s.local_addr().expect("addr");
    let task = tokio::spawn(async move {
        let mut buf = vec![0u8; 2048];
        while let Ok((n, src)) = s.recv_from(&mut buf).await {
            let _ = s.send_to(&buf[..n], src).await;
        }
    });
    (addr, task)
}

type Notices = Arc<Mutex<Vec<String>>>;

fn spawn(
    t: Tunnel,
    notices: Notices,
) -> (
    oneshot::Sender<()>,
    tokio::task::JoinHandle<io::Result<TunnelReport>>,
) {
    let (stop, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(t.run(
        Clock::start(),
        async {
            let _ = rx.await;
        },
        move |n| {
            let line = match n {
                TunnelNotice::Second(s) => format!("second {:?}", s.far_side),
                TunnelNotice::FirstTooLarge { len, max } => format!("too large {len} > {max}"),
            };
            notices.lock().expect("lock").push(line);
        },
    ));
    (stop, task)
}

/// An application's datagrams go through both sides to a server and its
/// echoes come back; the typed reports agree with what was sent, and the
/// one datagram too large to carry is said once and counted.
#[tokio::test]
async fn datagrams_cross_both_sides_and_the_reports_count_them() {
    const N: usize = 200;
    let (server, echo) = echo_server().await;
    let mut cfg = TunnelConfig::new(None, 4);
    cfg.sender.controller = ControllerKind::Static(2).into();
    let max = cfg.max_payload();
    let b = Tunnel::bind(
        TunnelSetup::new(LO, TunnelRole::Forward { target: server }),
        cfg.clone(),
    )
    .await
    .expect("bind b");
    let a = Tunnel::bind(
        TunnelSetup::new(
            LO,
            TunnelRole::Listen {
                peer: b.link_addr(),
            },
        ),
        cfg,
    )
    .await
    .expect("bind a");
    let (a_app, a_link) = (a.app_addr(), a.link_addr());
    let notices = Notices::default();
    let (stop_a, task_a) = spawn(a, Arc::clone(&notices));
    let (stop_b, task_b) = spawn(b, Notices::default());

    let app = UdpSocket::bind(LO).await.expect("bind app");
    app.send_to(&vec![0u8; max + 1], a_app)
        .await
        .expect("send big");
    let mut got = std::collections::BTreeSet::new();
    let mut buf = vec![0u8; 2048];
    for i in 0..N {
        app.send_to(&(i as u32).to_be_bytes(), a_app)
            .await
            .expect("send");
        if i % 20 == 19 {
            // Paced a little, so even a loaded machine's buffers hold them.
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    // Loopback loses nothing a static:2 code cannot rebuild; wait long
    // enough for a busy machine.
    let clock = Clock::start();
    let deadline = clock.to_tokio(clock.now() + Duration::from_secs(30));
    while got.len() < N {
        match tokio::time::timeout_at(deadline, app.recv_from(&mut buf)).await {
            Ok(Ok((4, _))) => {
                got.insert(u32::from_be_bytes(buf[..4].try_into().expect("4 bytes")));
            }
            Ok(_) => {}
            Err(_) => panic!("only {} of {N} echoes came back", got.len()),
        }
    }
    stop_a.send(()).expect("a running");
    stop_b.send(()).expect("b running");
    let ra = task_a.await.expect("task a").expect("run a");
    let rb = task_b.await.expect("task b").expect("run b");
    echo.abort();

    assert_eq!(ra.role, "listen");
    assert_eq!(rb.role, "forward");
    assert_eq!(ra.fec, "static:2");
    // a's link socket is bound to any address; b saw it from loopback.
    assert_eq!(rb.peer.map(|p| p.port()), Some(a_link.port()));
    assert_eq!(ra.sent.app_datagrams, N as u64);
    assert_eq!(ra.dropped.too_large, 1);
    assert_eq!(ra.dropped.total(), 1);
    assert!(ra.sent.repair_packets > 0, "{ra:?}");
    assert!(ra.sent.overhead > 0.0, "{ra:?}");
    assert_eq!(rb.received.delivered, N as u64, "{rb:?}");
    assert_eq!(rb.received.app_datagrams, N as u64, "{rb:?}");
    assert_eq!(ra.received.delivered, N as u64, "{ra:?}");
    assert_eq!(ra.received.app_datagrams, N as u64, "{ra:?}");
    let said = notices.lock().expect("lock").clone();
    let too_large: Vec<_> = said.iter().filter(|l| l.starts_with("too large")).collect();
    assert_eq!(too_large, [&format!("too large {} > {max}", max + 1)]);

    // The JSON document keeps the shape scripts read.
    let v = serde_json::to_value(&ra).expect("json");
    for p in [
        "/sent/residual_loss",
        "/sent/overhead",
        "/sent/mean_fwnd",
        "/received/added_latency_us/p50",
        "/dropped/invalid_before_peer",
        "/peer",
    ] {
        assert!(v.pointer(p).is_some(), "{p} missing in {v}");
    }
    assert_eq!(
        v.pointer("/received/delivered").and_then(|x| x.as_u64()),
        Some(N as u64)
    );
}

/// A port in use is a clear error naming the address.
#[tokio::test]
async fn a_busy_port_is_a_bind_error() {
    let taken = UdpSocket::bind(LO).await.expect("bind");
    let addr = taken.local_addr().expect("addr");
    let err = Tunnel::bind(
        TunnelSetup::new(addr, TunnelRole::Forward { target: addr }),
        TunnelConfig::new(None, 4),
    )
    .await
    .expect_err("port in use");
    assert_eq!(err.addr, addr);
    assert!(err.to_string().starts_with(&format!("cannot bind {addr}")));
}
