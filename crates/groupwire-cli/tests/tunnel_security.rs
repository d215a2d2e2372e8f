//! `groupwire tunnel` against hostile senders and a missing far side, as a
//! user runs it: separate processes on loopback, free ports, each bounded
//! by `--duration`. Assertions are counts, never timings.

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use bytes::Bytes;
use groupwire_proto::Machine;
use groupwire_proto::block::{BlockSender, SenderConfig};

mod common;
use common::{arg, stats, tunnel_forwarding, tunnel_to_peer};

#[test]
fn a_datagram_too_large_is_said_once_and_counted_and_a_missing_far_side_is_shown() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("a.json");
    // The far side is a socket nobody reads: no reports ever come.
    let nobody = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let a = tunnel_to_peer(
        nobody.local_addr().expect("bound"),
        &["--duration", "3s", "--stats-json", arg(&json)],
    );
    let to = a.addr("app");
    let app = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let (small, big) = (20u64, 3u64);
    for i in 0..small {
        if i < big {
            app.send_to(&[7u8; 9000], to).expect("send");
        }
        app.send_to(&[1u8; 100], to).expect("send");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (out, err) = a.finish();
    assert_eq!(
        err.matches("dropped a 9000-byte datagram").count(),
        1,
        "said once: {err}"
    );
    assert!(err.contains("no reports: far side not up?"), "{err}");
    assert!(out.contains("none received"), "{out}");
    let s = stats(&json);
    assert_eq!(s["dropped"]["too_large"].as_u64(), Some(big), "{s}");
    assert_eq!(s["sent"]["app_datagrams"].as_u64(), Some(small), "{s}");
    assert!(s["sent"]["residual_loss"].is_null(), "{s}");
    assert!(s["sent"]["overhead"].as_f64() > Some(0.0), "{s}");
}

/// Data packets a sender of session 0 emits for `n` small datagrams.
fn valid_packets(n: u32) -> Vec<Bytes> {
    let peer: SocketAddr = "127.0.0.1:9".parse().expect("address");
    let mut cfg = SenderConfig::new(peer, 4);
    cfg.pacing = false;
    let mut tx = BlockSender::new(cfg);
    let now = groupwire_proto::Instant::from_millis(1);
    for i in 0..n {
        tx.send(now, Bytes::from(vec![i as u8; 60])).expect("sent");
    }
    std::iter::from_fn(|| tx.poll_transmit(now))
        .map(|t| t.payload)
        .collect()
}

/// An application socket the far tunnel forwards to, its reads bounded.
fn app_receiver() -> UdpSocket {
    let app_rx = UdpSocket::bind("127.0.0.1:0").expect("bind receiver");
    app_rx
        .set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    app_rx
}

/// Sends `payload(seq)` for each of `count` sequence numbers to the
/// tunnel at `to`, 10 ms apart, calling `after_send(seq)` after each;
/// collects what `app_rx` receives as it goes, then until it has `count`
/// or a read times out.
fn send_and_collect(
    to: SocketAddr,
    app_rx: &UdpSocket,
    count: u64,
    payload: impl Fn(u64) -> Vec<u8>,
    mut after_send: impl FnMut(u64),
) -> Vec<Vec<u8>> {
    let app = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let mut got = Vec::new();
    let mut buf = [0u8; 2048];
    for seq in 0..count {
        app.send_to(&payload(seq), to).expect("send");
        std::thread::sleep(Duration::from_millis(10));
        after_send(seq);
        while let Ok(n) = app_rx.recv(&mut buf) {
            got.push(buf[..n].to_vec());
            if got.len() as u64 == seq + 1 {
                break;
            }
        }
    }
    while (got.len() as u64) < count {
        let Ok(n) = app_rx.recv(&mut buf) else { break };
        got.push(buf[..n].to_vec());
    }
    got
}

/// The bytes waiting at `sock` now (what was sent back to it).
fn bytes_waiting(sock: &UdpSocket) -> usize {
    sock.set_nonblocking(true).expect("nonblocking");
    let mut buf = [0u8; 2048];
    let mut bytes = 0;
    while let Ok(n) = sock.recv(&mut buf) {
        bytes += n;
    }
    bytes
}

#[test]
fn corrupted_first_packets_from_a_stranger_claim_nothing_and_get_no_bytes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let b_json = dir.path().join("b.json");
    let app_rx = app_receiver();
    let b_args = ["--duration", "4s", "--quiet", "--stats-json", arg(&b_json)];
    let b = tunnel_forwarding(app_rx.local_addr().expect("bound"), &b_args);
    let b_link = b.addr("link");
    // Every single-bit flip past the common header of a valid packet, sent
    // from a stranger before the real peer's first packet.
    let stranger = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let good = valid_packets(1);
    let mut flipped = 0u64;
    let mut bytes_in = 0;
    for i in 8 * 8..good[0].len() * 8 {
        let mut m = good[0].to_vec();
        m[i / 8] ^= 1 << (i % 8);
        stranger.send_to(&m, b_link).expect("send");
        flipped += 1;
        bytes_in += m.len();
        if flipped % 64 == 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    std::thread::sleep(Duration::from_millis(200));
    let a = tunnel_to_peer(b_link, &["--duration", "3s", "--quiet"]);
    let (to, a_link) = (a.addr("app"), a.addr("link"));
    let count = 50u64;
    let payload = |seq: u64| seq.to_be_bytes().to_vec();
    let got = send_and_collect(to, &app_rx, count, payload, |_| ());
    assert!(got.iter().all(|d| d.len() == 8), "datagrams of ours, whole");
    let got = got.len() as u64;
    a.finish();
    b.finish();
    // The stranger got nothing back for what it sent.
    let bytes_out = bytes_waiting(&stranger);
    assert!(bytes_in > 0);
    assert_eq!(bytes_out, 0, "no bytes to an unproven address");
    let s = stats(&b_json);
    assert_eq!(s["received"]["delivered"].as_u64(), Some(count), "{s}");
    assert_eq!(got, count, "{s}");
    assert_eq!(s["peer"].as_str(), Some(a_link.to_string().as_str()), "{s}");
    let d = &s["dropped"];
    assert_eq!(d["invalid_before_peer"].as_u64(), Some(flipped), "{s}");
}

/// Two keyed tunnels through a capturing relay on loopback: a stranger
/// replays every captured packet from its own address, and the relay
/// replays them from the peer's own address, during and after the
/// transfer. The application's datagrams arrive byte-identical, each once;
/// the replays claim nothing, deliver nothing and get 0 bytes back.
#[test]
fn keyed_tunnels_carry_data_and_replays_get_nothing_through() {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = dir.path().join("tunnel.key");
    std::fs::write(&key, "c2VjcmV0LWtleS1mb3ItdGhlLXR1bm5lbC10ZXN0Cg==\n").expect("key file");
    let key = key.to_str().expect("utf-8");
    let b_json = dir.path().join("b.json");
    let app_rx = app_receiver();
    let b = tunnel_forwarding(
        app_rx.local_addr().expect("bound"),
        &[
            "--key-file",
            key,
            "--duration",
            "5s",
            "--quiet",
            "--stats-json",
            arg(&b_json),
        ],
    );
    let b_link = b.addr("link");
    let relay = UdpSocket::bind("127.0.0.1:0").expect("bind relay");
    let relay_addr = relay.local_addr().expect("bound");
    let a = tunnel_to_peer(
        relay_addr,
        &["--key-file", key, "--duration", "4s", "--quiet"],
    );
    let (to, a_link) = (a.addr("app"), a.addr("link"));
    let captured = std::sync::Arc::new(std::sync::Mutex::new(Vec::<Vec<u8>>::new()));
    let relay_tx = relay.try_clone().expect("clone");
    relay
        .set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    let cap = captured.clone();
    #[expect(
        clippy::disallowed_methods,
        reason = "the capturing relay runs beside the test's blocking application loop"
    )]
    let forwarder = std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        let mut idle = 0;
        while idle < 25 {
            let Ok((n, src)) = relay.recv_from(&mut buf) else {
                idle += 1;
                continue;
            };
            idle = 0;
            if src == a_link {
                cap.lock().expect("lock").push(buf[..n].to_vec());
                relay.send_to(&buf[..n], b_link).expect("forward");
            } else {
                relay.send_to(&buf[..n], a_link).expect("back");
            }
        }
    });
    let stranger = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let replay = |n: &mut u64| {
        let packets = captured.lock().expect("lock").clone();
        for p in &packets {
            stranger.send_to(p, b_link).expect("send");
            relay_tx.send_to(p, b_link).expect("send");
            *n += 1;
        }
    };
    let payload = |seq: u64| -> Vec<u8> {
        (0..100u64)
            .map(|i| (seq.wrapping_mul(31) + i) as u8)
            .collect()
    };
    let count = 60u64;
    let mut replays = 0u64;
    let mut got = send_and_collect(to, &app_rx, count, payload, |seq| {
        if seq == count / 2 {
            replay(&mut replays);
        }
    });
    replay(&mut replays);
    std::thread::sleep(Duration::from_millis(300));
    let mut buf = [0u8; 2048];
    while let Ok(n) = app_rx.recv(&mut buf) {
        got.push(buf[..n].to_vec());
    }
    a.finish();
    b.finish();
    forwarder.join().expect("forwarder");
    let bytes_out = bytes_waiting(&stranger);
    assert!(replays > 0);
    assert_eq!(bytes_out, 0, "no bytes to the stranger");
    let s = stats(&b_json);
    got.sort();
    let mut want: Vec<Vec<u8>> = (0..count).map(payload).collect();
    want.sort();
    assert_eq!(got, want, "each datagram once, byte-identical: {s}");
    assert_eq!(
        s["peer"].as_str(),
        Some(relay_addr.to_string().as_str()),
        "{s}"
    );
    let d = &s["dropped"];
    // Each captured packet was replayed from the stranger's address and
    // from the peer's own.
    assert_eq!(d["foreign"].as_u64(), Some(replays), "{s}");
    assert_eq!(d["replayed"].as_u64(), Some(replays), "{s}");
    assert_eq!(d["unauthenticated"].as_u64(), Some(0), "{s}");
}
