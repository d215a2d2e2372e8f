//! `groupwire emulate shell`: kernel TCP from a command in the shell's
//! namespace crosses the link models (Mahimahi's shells). A megabyte
//! downloaded over a 20 ms path losing 2% of the packets toward the
//! command arrives whole, and the counters show the losses TCP repaired.
//!
//! The server listens on the shell's host address, a 100.64.0.0/10
//! address on a TUN device that exists only between this host and the
//! shell's namespace (no route leads there from elsewhere). Needs root,
//! /dev/net/tun, iproute2's ip and bash; where they are missing the test
//! says so and skips.

#![expect(
    clippy::disallowed_methods,
    reason = "a real process and socket, bounded by the wall clock"
)]

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Why this machine cannot run a shell, if it cannot.
fn missing() -> Option<String> {
    // The effective user id, third field of the Uid line.
    let root = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false);
    if !root {
        return Some("not root".into());
    }
    if !std::path::Path::new("/dev/net/tun").exists() {
        return Some("no /dev/net/tun".into());
    }
    for tool in ["ip", "bash"] {
        let found = Command::new(tool)
            .arg(if tool == "ip" { "-V" } else { "--version" })
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            return Some(format!("no {tool}"));
        }
    }
    None
}

const SIZE: usize = 1 << 20;

fn pattern(i: usize) -> u8 {
    (i % 251) as u8
}

#[test]
fn kernel_tcp_through_the_shell_meets_the_link_models() {
    if let Some(why) = missing() {
        eprintln!("SKIPPED: emulate shell needs root, /dev/net/tun, ip and bash: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("download");
    let stats = dir.path().join("stats.json");
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    // The command retries until the server listens, then downloads.
    let script = format!(
        "for i in $(seq 400); do cat < /dev/tcp/$GROUPWIRE_SHELL_HOST/{port} > {o} 2>/dev/null && [ -s {o} ] && exit 0; sleep 0.05; done; exit 3",
        o = out.display()
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_groupwire"))
        .args(["emulate", "shell", "--delay", "20ms"])
        .args(["--reverse-loss", "bernoulli:0.02", "--seed", "7"])
        .arg("--stats-json")
        .arg(&stats)
        .args(["--", "bash", "-c", &script])
        .stderr(Stdio::piped())
        .spawn()
        .expect("groupwire runs");
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    let host = line
        .split("the host is ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("no host address in {line:?}"))
        .to_owned();
    let listener = TcpListener::bind((host.as_str(), port)).expect("bind the host address");
    let (mut conn, peer) = listener.accept().unwrap();
    let data: Vec<u8> = (0..SIZE).map(pattern).collect();
    conn.write_all(&data).unwrap();
    drop(conn);
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            panic!("the download did not finish in 120 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
    assert!(status.success(), "{status}: {line}{rest}");
    let got = std::fs::read(&out).unwrap();
    assert_eq!(got.len(), SIZE, "{rest}");
    assert!(got == data, "the download differs");
    assert!(
        peer.ip().to_string() != host,
        "the command has its own address"
    );
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    let down = &s["downlink"];
    let (received, lost) = (
        down["received"].as_u64().unwrap(),
        down["lost"].as_u64().unwrap(),
    );
    eprintln!("downlink: {received} packets, {lost} lost; {rest}");
    // A megabyte is over 700 packets; 2% of them is some 15, and TCP sent
    // each lost one again.
    assert!(received > SIZE as u64 / 1500, "{s}");
    assert!(lost > 0 && lost < received / 10, "{s}");
    assert_eq!(s["uplink"]["lost"], 0, "{s}");
}
