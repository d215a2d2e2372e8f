//! `groupwire emulate` and `groupwire awareness` as a user meets them.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Output, Stdio};

fn groupwire(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_groupwire"))
        .args(args)
        .output()
        .expect("the groupwire binary runs")
}

#[test]
fn help_shows_a_loopback_example() {
    let o = groupwire(&["emulate", "--help"]);
    assert!(o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    for needle in [
        "--listen",
        "--forward",
        "--loss",
        "--reverse-loss",
        "--rate",
        "--queue",
        "groupwire emulate --listen 127.0.0.1:7401",
    ] {
        assert!(out.contains(needle), "emulate --help lacks {needle}: {out}");
    }
    let o = groupwire(&["awareness", "send", "--help"]);
    let out = String::from_utf8_lossy(&o.stdout);
    for needle in [
        "--protocol",
        "afec-frac",
        "--trace",
        "groupwire awareness send --to",
        "--framing",
        "rtpreddec",
        "--red-clock-rate",
        "--red-pt",
        "--message-pt",
    ] {
        assert!(
            out.contains(needle),
            "awareness send --help lacks {needle}: {out}"
        );
    }
}

#[test]
fn bad_arguments_exit_with_code_2() {
    for args in [
        &[
            "awareness",
            "send",
            "--to",
            "127.0.0.1:9",
            "--protocol",
            "tcp",
        ][..],
        &["awareness", "send", "--to", "127.0.0.1:9", "--size", "4"],
        &[
            "awareness",
            "send",
            "--to",
            "127.0.0.1:9",
            "--framing",
            "rtp",
        ],
        // RTP payload types 64-95 would read as RTCP on a shared port.
        &[
            "awareness",
            "send",
            "--to",
            "127.0.0.1:9",
            "--framing",
            "red",
            "--red-pt",
            "72",
        ],
        &[
            "awareness",
            "recv",
            "--bind",
            "127.0.0.1:0",
            "--message-pt",
            "100",
        ],
        &[
            "awareness",
            "recv",
            "--bind",
            "127.0.0.1:0",
            "--mer-band",
            "0.2,0.1",
        ],
        &[
            "emulate",
            "--listen",
            "127.0.0.1:0",
            "--forward",
            "127.0.0.1:9",
            "--loss",
            "bernoulli:2",
        ],
    ] {
        let o = groupwire(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

/// Two processes on loopback: a receiver on a free port, then a sender
/// that streams to it for a second; both exit on their own with code 0.
#[test]
fn sender_and_receiver_processes_exchange_a_stream() {
    exchange("native");
}

/// The same in RTP/RED framing: the receiver reads RFC 2198 without being
/// told (it reads both framings).
#[test]
fn sender_and_receiver_processes_exchange_a_red_stream() {
    exchange("red");
}

fn exchange(framing: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let lines = dir.path().join("channel.jsonl");
    let mut rx = Command::new(env!("CARGO_BIN_EXE_groupwire"))
        .args([
            "awareness",
            "recv",
            "--bind",
            "127.0.0.1:0",
            // Room for a busy host to start the sender late.
            "--duration",
            "5s",
            "--metrics-json",
            lines.to_str().expect("utf-8"),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("receiver starts");
    let mut first = String::new();
    // Kept open until the receiver exits: it writes progress there.
    let mut progress = BufReader::new(rx.stderr.take().expect("piped"));
    progress
        .read_line(&mut first)
        .expect("receiver says where it listens");
    let addr = first
        .split_whitespace()
        .nth(2)
        .expect("`receiving on ADDR ...`")
        .to_owned();
    let tx = groupwire(&[
        "awareness",
        "send",
        "--to",
        &addr,
        "--duration",
        "1s",
        "--rate",
        "50",
        "--framing",
        framing,
        "--quiet",
    ]);
    assert!(
        tx.status.success(),
        "{}",
        String::from_utf8_lossy(&tx.stderr)
    );
    let tx_out = String::from_utf8_lossy(&tx.stdout);
    assert!(tx_out.contains("messages sent"), "{tx_out}");
    let mut rest = String::new();
    progress
        .read_to_string(&mut rest)
        .expect("receiver progress");
    let rx = rx.wait_with_output().expect("receiver exits");
    assert!(rx.status.success(), "{rest}");
    assert!(rest.contains("MER"), "{rest}");
    let rx_out = String::from_utf8_lossy(&rx.stdout);
    let delivered: u64 = rx_out
        .lines()
        .find_map(|l| l.trim().strip_prefix("messages delivered"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no delivered count in {rx_out}"));
    assert!(delivered > 10, "{rx_out}");
    // The channel measures (docs/metrics.md): the last JSON line covers the
    // run, by message index, with one-way latency from the stamps.
    let text = std::fs::read_to_string(&lines).expect("metrics json lines");
    let c: serde_json::Value =
        serde_json::from_str(text.lines().last().expect("a line")).expect("JSON");
    assert_eq!(c["latency_kind"], "one_way", "{c}");
    let by_path =
        c["paths"]["arrived"].as_u64().unwrap_or(0) + c["paths"]["piggyback"].as_u64().unwrap_or(0);
    assert_eq!(by_path, delivered, "{c}\n{rx_out}");
    assert!(c["loss"]["judged"].as_u64() >= Some(delivered), "{c}");
    assert!(c["latency_total"]["count"].as_u64() > Some(10), "{c}");
    assert!(c["in"]["packets"].as_u64() > Some(10), "{c}");
    assert!(rx_out.contains("channel"), "{rx_out}");
}
