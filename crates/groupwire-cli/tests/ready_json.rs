//! `--ready-json`: the first stdout line of `tunnel`, `emulate` and `relay
//! serve` is one JSON object naming the command and its bound addresses.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, UdpSocket};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

/// Starts `groupwire ARGS...` and parses its first stdout line.
fn ready(args: &[&str]) -> (Child, Value) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_groupwire"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("groupwire starts");
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().expect("piped stdout"))
        .read_line(&mut line)
        .expect("a first line");
    let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
    (child, v)
}

fn addr(v: &Value, key: &str) -> SocketAddr {
    v[key]
        .as_str()
        .unwrap_or_else(|| panic!("{key} in {v}"))
        .parse()
        .unwrap_or_else(|e| panic!("{key} in {v}: {e}"))
}

#[test]
fn tunnel_announces_its_ports() {
    let (mut child, v) = ready(&[
        "tunnel",
        "--listen",
        "127.0.0.1:0",
        "--peer",
        "127.0.0.1:9",
        "--duration",
        "30s",
        "--quiet",
        "--ready-json",
    ]);
    assert_eq!(v["ready"], "tunnel", "{v}");
    assert_ne!(addr(&v, "app").port(), 0);
    assert_ne!(addr(&v, "link").port(), 0);
    assert_eq!(v["fec"], "gmiad", "{v}");
    assert!(v["k"].as_u64().is_some() && v["seal"].is_null(), "{v}");
    child.kill().ok();
    child.wait().ok();
}

#[test]
fn emulate_announces_its_port_and_writes_its_counters() {
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("stats.json");
    let target = UdpSocket::bind("127.0.0.1:0").unwrap();
    let forward = target.local_addr().unwrap().to_string();
    let (mut child, v) = ready(&[
        "emulate",
        "--listen",
        "127.0.0.1:0",
        "--forward",
        &forward,
        "--duration",
        "2s",
        "--quiet",
        "--ready-json",
        "--stats-json",
        stats.to_str().unwrap(),
    ]);
    assert_eq!(v["ready"], "emulate", "{v}");
    assert_eq!(v["forward"], forward.as_str(), "{v}");
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    client.send_to(b"hello", addr(&v, "listen")).unwrap();
    assert!(child.wait().unwrap().success());
    let s: Value = serde_json::from_slice(&std::fs::read(&stats).unwrap()).unwrap();
    // Received, unless the loaded kernel dropped it first (counted too).
    let fwd = &s["forward"];
    let seen = fwd["received"].as_u64().unwrap() + fwd["socket_drops"].as_u64().unwrap();
    assert_eq!(seen, 1, "{s}");
}

#[test]
fn relay_announces_its_listeners() {
    let (mut child, v) = ready(&[
        "relay",
        "serve",
        "--memory",
        "--listen",
        "127.0.0.1:0",
        "--ws",
        "127.0.0.1:0",
        "--ready-json",
    ]);
    assert_eq!(v["ready"], "relay", "{v}");
    assert_ne!(addr(&v, "tcp").port(), 0);
    assert_eq!(v["tls"], false, "{v}");
    assert!(
        v["websocket"]
            .as_str()
            .is_some_and(|u| u.starts_with("ws://127.0.0.1:")),
        "{v}"
    );
    assert_eq!(v["state"], "memory", "{v}");
    child.kill().ok();
    child.wait().ok();
}
