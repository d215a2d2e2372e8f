//! `--ready-json`: the first stdout line of `tunnel`, `emulate` and `relay
//! serve` is one JSON object naming the command and its bound addresses.

use std::net::UdpSocket;

mod common;
use common::{Proc, emulate_to, spawn, tunnel_to_peer};

/// Kills a command that runs until Ctrl-C.
fn stop(mut p: Proc) {
    p.child.kill().ok();
    p.child.wait().ok();
}

#[test]
fn tunnel_announces_its_ports() {
    let nobody = "127.0.0.1:9".parse().expect("an address");
    let p = tunnel_to_peer(nobody, &["--duration", "30s", "--quiet"]);
    let v = &p.ready;
    assert_eq!(v["ready"], "tunnel", "{v}");
    assert_ne!(p.addr("app").port(), 0);
    assert_ne!(p.addr("link").port(), 0);
    assert_eq!(v["fec"], "target", "{v}");
    assert_eq!(v["target_loss"], 0.001, "{v}");
    assert_eq!(v["max_delay_ms"], 30.0, "{v}");
    assert!(v["k"].as_u64().is_some() && v["seal"].is_null(), "{v}");
    stop(p);
}

#[test]
fn emulate_announces_its_port_and_writes_its_counters() {
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("stats.json");
    let target = UdpSocket::bind("127.0.0.1:0").unwrap();
    let forward = target.local_addr().unwrap();
    let p = emulate_to(
        forward,
        &[
            "--duration",
            "2s",
            "--quiet",
            "--stats-json",
            stats.to_str().unwrap(),
        ],
    );
    assert_eq!(p.ready["ready"], "emulate", "{}", p.ready);
    assert_eq!(p.ready["forward"], forward.to_string(), "{}", p.ready);
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    client.send_to(b"hello", p.addr("listen")).unwrap();
    p.finish();
    let s: serde_json::Value = serde_json::from_slice(&std::fs::read(&stats).unwrap()).unwrap();
    // Received, unless the loaded kernel dropped it first (counted too).
    let fwd = &s["forward"];
    let seen = fwd["received"].as_u64().unwrap() + fwd["socket_drops"].as_u64().unwrap();
    assert_eq!(seen, 1, "{s}");
}

#[test]
fn emulate_tcp_relays_a_connection_through_the_lossy_link() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("stats.json");
    let target = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let forward = target.local_addr().unwrap();
    let p = emulate_to(
        forward,
        &[
            "--tcp",
            "--loss",
            "bernoulli:20%",
            "--delay",
            "2ms",
            "--duration",
            "4s",
            "--quiet",
            "--stats-json",
            stats.to_str().unwrap(),
        ],
    );
    let at = p.addr("tcp");
    assert_eq!(at.port(), p.addr("listen").port(), "{}", p.ready);
    let data: Vec<u8> = (0..60_000u32).map(|i| (i % 251) as u8).collect();
    let got = std::thread::scope(|scope| {
        scope.spawn(|| {
            let mut c = std::net::TcpStream::connect(at).unwrap();
            c.write_all(&data).unwrap();
            c.shutdown(std::net::Shutdown::Write).unwrap();
            let mut rest = Vec::new();
            c.read_to_end(&mut rest).unwrap();
        });
        let (mut s, _) = target.accept().unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).unwrap();
        // Dropping `s` closes the target's side: the client's read ends.
        got
    });
    assert!(
        got == data,
        "{} of {} bytes, or out of order",
        got.len(),
        data.len()
    );
    let (out, _) = p.finish();
    let s: serde_json::Value = serde_json::from_slice(&std::fs::read(&stats).unwrap()).unwrap();
    let tcp = &s["tcp"];
    assert_eq!(tcp["accepted"], 1, "{s}");
    // 20% of the 42 or more segments: each loss went again.
    let resent = tcp["forward_resent"].as_u64().unwrap();
    assert!(resent >= 1, "{s}");
    assert_eq!(resent, s["forward"]["lost"].as_u64().unwrap(), "{s}");
    assert!(out.contains("1 connections relayed"), "{out}");
}

#[test]
fn relay_announces_its_listeners() {
    let p = spawn(&[
        "relay",
        "serve",
        "--memory",
        "--listen",
        "127.0.0.1:0",
        "--ws",
        "127.0.0.1:0",
    ]);
    let v = &p.ready;
    assert_eq!(v["ready"], "relay", "{v}");
    assert_ne!(p.addr("tcp").port(), 0);
    assert_eq!(v["tls"], false, "{v}");
    assert!(
        v["websocket"]
            .as_str()
            .is_some_and(|u| u.starts_with("ws://127.0.0.1:")),
        "{v}"
    );
    assert_eq!(v["state"], "memory", "{v}");
    stop(p);
}
