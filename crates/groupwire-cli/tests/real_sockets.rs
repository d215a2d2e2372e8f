//! `groupwire emulate` and `groupwire awareness` as a user meets them.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, ChildStderr, Command, Output, Stdio};

mod common;

fn groupwire(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_groupwire"))
        .args(args)
        .output()
        .expect("the groupwire binary runs")
}

#[test]
fn help_shows_a_loopback_example() {
    assert_help_mentions(
        &["emulate", "--help"],
        &[
            "--listen",
            "--forward",
            "--loss",
            "--reverse-loss",
            "--rate",
            "--queue",
            "schedule:alternating",
            "groupwire emulate --listen 127.0.0.1:7401",
        ],
    );
    assert_help_mentions(
        &["awareness", "send", "--help"],
        &[
            "--protocol",
            "afec-frac",
            "--trace",
            "groupwire awareness send --to",
            "--framing",
            "rtpreddec",
            "--red-clock-rate",
            "--red-pt",
            "--message-pt",
            "xor:3",
            "xor:LxD",
            "--xor-close-after",
            "--protocol xor:3 --duration 60s",
        ],
    );
}

/// `groupwire ARGS` succeeds and its output names every one of `needles`.
fn assert_help_mentions(args: &[&str], needles: &[&str]) {
    let o = groupwire(args);
    assert!(o.status.success(), "{args:?}");
    let out = String::from_utf8_lossy(&o.stdout);
    for needle in needles {
        assert!(out.contains(needle), "{args:?} lacks {needle}: {out}");
    }
}

#[test]
fn bad_arguments_exit_with_code_2() {
    const SEND: &[&str] = &["awareness", "send", "--to", "127.0.0.1:9"];
    const RECV: &[&str] = &["awareness", "recv", "--bind", "127.0.0.1:0"];
    const EMULATE: &[&str] = &[
        "emulate",
        "--listen",
        "127.0.0.1:0",
        "--forward",
        "127.0.0.1:9",
    ];
    for (command, flags) in [
        (SEND, &["--protocol", "tcp"][..]),
        (SEND, &["--size", "4"][..]),
        (SEND, &["--framing", "rtp"][..]),
        // RTP payload types 64-95 would read as RTCP on a shared port.
        (SEND, &["--framing", "red", "--red-pt", "72"][..]),
        (RECV, &["--message-pt", "100"][..]),
        (RECV, &["--mer-band", "0.2,0.1"][..]),
        (EMULATE, &["--loss", "bernoulli:2"][..]),
        (EMULATE, &["--rate", "schedule:1s fast"][..]),
        (
            EMULATE,
            &["--loss", "schedule:1s bernoulli:1% -> gilbert:p=0.1,r=0.5"][..],
        ),
        // XOR parity needs a group of at least one message, and carries
        // RTP of its own.
        (SEND, &["--protocol", "xor:0"][..]),
        (RECV, &["--protocol", "xor:3x0"][..]),
        (SEND, &["--protocol", "xor:3", "--framing", "red"][..]),
    ] {
        let args = [command, flags].concat();
        let o = groupwire(&args);
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

/// `groupwire awareness recv --bind 127.0.0.1:0 ARGS...`: the process,
/// its stderr (kept open until it exits: it writes progress there) and
/// the address from its first line, `receiving on ADDR ...`.
fn receiver(args: &[&str]) -> (Child, BufReader<ChildStderr>, String) {
    let mut rx = Command::new(env!("CARGO_BIN_EXE_groupwire"))
        .args(["awareness", "recv", "--bind", "127.0.0.1:0"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("receiver starts");
    let mut first = String::new();
    let mut progress = BufReader::new(rx.stderr.take().expect("piped"));
    progress
        .read_line(&mut first)
        .expect("receiver says where it listens");
    let addr = first
        .split_whitespace()
        .nth(2)
        .expect("`receiving on ADDR ...`")
        .to_owned();
    (rx, progress, addr)
}

/// The number after `label` on a line of a summary.
fn count(summary: &str, label: &str) -> u64 {
    summary
        .lines()
        .find_map(|l| l.trim().strip_prefix(label))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {label} count in {summary}"))
}

fn exchange(framing: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let lines = dir.path().join("channel.jsonl");
    let (rx, mut progress, addr) = receiver(&[
        // Room for a busy host to start the sender late.
        "--duration",
        "5s",
        "--metrics-json",
        lines.to_str().expect("utf-8"),
    ]);
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
    let delivered = count(&rx_out, "messages delivered");
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

/// XOR parity on the telepointer stream (Leigh et al. §4.1, Figure 5's
/// one parity per three messages): sender → `groupwire emulate` losing
/// 10% → receiver, three processes on loopback.
#[test]
fn xor_awareness_rebuilds_messages_lost_on_an_emulated_link() {
    xor_exchange("xor:3");
}

/// The same with SMPTE 2022-1 rows and columns, whose column parity
/// rebuilds what a row cannot.
#[test]
fn xor_matrix_awareness_rebuilds_messages_lost_on_an_emulated_link() {
    xor_exchange("xor:4x4");
}

/// What holds on a loaded machine as on an idle one: counts are judged
/// against what the sender really sent and the receiver really saw, and
/// the only bounds are "some were rebuilt" and "fewer lost after the
/// parity than on the wire" (the emulator's loss is seeded; a busy host
/// may add socket drops, which only add to the wire's loss). Timing is
/// never asserted: the receiver and emulator run long enough for a late
/// sender.
fn xor_exchange(protocol: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let lines = dir.path().join("channel.jsonl");
    let (rx, mut progress, rx_addr) = receiver(&[
        "--protocol",
        protocol,
        "--duration",
        "15s",
        "--metrics-json",
        lines.to_str().expect("utf-8"),
    ]);
    let emu = common::spawn(&[
        "emulate",
        "--listen",
        "127.0.0.1:0",
        "--forward",
        &rx_addr,
        "--loss",
        "bernoulli:0.1",
        "--seed",
        "7",
        "--duration",
        "15s",
        "--quiet",
    ]);
    let tx = groupwire(&[
        "awareness",
        "send",
        "--to",
        &emu.addr("listen").to_string(),
        "--protocol",
        protocol,
        "--duration",
        "4s",
        "--rate",
        "50",
        "--quiet",
    ]);
    let tx_out = String::from_utf8_lossy(&tx.stdout);
    assert!(
        tx.status.success(),
        "{}{tx_out}",
        String::from_utf8_lossy(&tx.stderr)
    );
    let sent = count(&tx_out, "messages sent");
    assert!(sent > 50, "{tx_out}");
    assert!(tx_out.contains(&format!("({protocol} to")), "{tx_out}");
    assert!(tx_out.contains("parity"), "{tx_out}");
    let mut rest = String::new();
    progress
        .read_to_string(&mut rest)
        .expect("receiver progress");
    let rx = rx.wait_with_output().expect("receiver exits");
    let (emu_out, _) = emu.finish();
    assert!(rx.status.success(), "{rest}");
    assert!(!rest.contains("panicked"), "{rest}");
    assert!(rest.contains("rebuilt"), "{rest}");
    let rx_out = String::from_utf8_lossy(&rx.stdout);
    let delivered = count(&rx_out, "messages delivered");
    assert!(
        delivered > sent / 2 && delivered <= sent,
        "{delivered} of {sent}: {rx_out}\n{emu_out}"
    );
    assert_eq!(count(&rx_out, "senders heard"), 1, "{rx_out}");

    // The channel measures, as the other protocols report them
    // (docs/metrics.md): the last JSON line covers the run.
    let text = std::fs::read_to_string(&lines).expect("metrics json lines");
    let c: serde_json::Value =
        serde_json::from_str(text.lines().last().expect("a line")).expect("JSON");
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or_else(|| panic!("not a count: {c}"));
    let f = |v: &serde_json::Value| v.as_f64().unwrap_or_else(|| panic!("not a number: {c}"));
    assert_eq!(c["channel"], format!("awareness {protocol}"), "{c}");
    assert_eq!(c["latency_kind"], "one_way", "{c}");
    let rebuilt = n(&c["paths"]["xor_row"]) + n(&c["paths"]["xor_column"]);
    assert_eq!(
        n(&c["paths"]["arrived"]) + rebuilt,
        delivered,
        "{c}\n{rx_out}"
    );
    assert!(rebuilt > 0, "XOR rebuilt nothing: {c}\n{rx_out}\n{emu_out}");
    assert!(
        rx_out.contains(&format!("({rebuilt} rebuilt from XOR parity")),
        "{rx_out}"
    );
    // Judged by sequence number: never more than were sent.
    let judged = n(&c["loss"]["judged"]);
    assert!(
        judged >= delivered && judged <= sent,
        "{judged} of {sent}: {c}"
    );
    let (wire, residual) = (f(&c["loss"]["wire_loss"]), f(&c["loss"]["residual_loss"]));
    assert!(wire > 0.0, "the emulated link lost nothing: {c}\n{emu_out}");
    assert!(residual < wire, "residual {residual} vs wire {wire}: {c}");
    assert_eq!(
        n(&c["loss"]["residual_lost"]),
        judged - delivered,
        "every judged message delivered or lost: {c}"
    );
    // One way from the RTP timestamps (a message whose stamp is ahead of
    // the receiver's clock, which two processes' wall clocks allow, has
    // no figure).
    let timed = n(&c["latency_total"]["count"]);
    assert!(timed > 0 && timed <= delivered, "{c}");
    assert!(n(&c["in"]["packets"]) > delivered, "media and parity: {c}");
    assert!(rx_out.contains("channel"), "{rx_out}");
}
