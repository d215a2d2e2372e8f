//! `groupwire bulk send|recv` as processes on loopback: a file crosses
//! whole, the summaries agree, and the errors a user meets first say what
//! to do. Asserts delivery and integrity, never speed.

mod common;

use std::process::Command;

use common::{spawn, stats};

fn temp_dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("gw-bulk-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn payload(len: usize) -> Vec<u8> {
    // Not a multiple of the packet size; bytes that differ from packet to packet.
    (0..len).map(|i| (i * 31 + i / 1400) as u8).collect()
}

fn groupwire(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_groupwire"))
        .args(args)
        .output()
        .expect("groupwire runs")
}

/// What one transfer between a `bulk recv` and a `bulk send` left.
struct Transfer {
    /// The sender's stdout.
    sent: String,
    /// The receiver's stdout.
    received: String,
    /// The two `--stats-json` reports.
    send_json: serde_json::Value,
    recv_json: serde_json::Value,
}

impl Transfer {
    /// Both sides went `via` (`rbudp` or `tcp`) and agree on the
    /// payload's hash (RBUDP's BLAKE3, striping's hash).
    fn assert_via(&self, via: &str) {
        assert_eq!(self.send_json["via"], via, "{}", self.send_json);
        assert_eq!(self.recv_json["via"], via, "{}", self.recv_json);
        let hash = if via == "rbudp" { "blake3" } else { "hash" };
        assert_eq!(self.send_json[hash], self.recv_json[hash], "{hash}");
    }

    /// Why an auto sender chose its mechanism.
    fn chosen_because(&self) -> &str {
        self.send_json["chosen_because"].as_str().unwrap()
    }
}

/// Moves `len` bytes from a file to a file: a receiver with `recv_via`,
/// then a sender with `send_args`; checks both exit well, the file arrives
/// byte for byte, and both summaries name its size.
fn transfer(name: &str, len: usize, recv_via: &str, send_args: &[&str]) -> Transfer {
    let dir = temp_dir(name);
    let (src, dst) = (dir.join("in.bin"), dir.join("out.bin"));
    let data = payload(len);
    std::fs::write(&src, &data).unwrap();
    let (send_json, recv_json) = (dir.join("send.json"), dir.join("recv.json"));
    let recv = receiver(recv_via, &dst, &recv_json);
    assert_eq!(recv.ready["via"], recv_via);
    let to = recv.addr("listen").to_string();
    let mut args = vec!["bulk", "send", src.to_str().unwrap(), "--to", &to];
    args.extend_from_slice(send_args);
    args.extend_from_slice(&["--quiet", "--stats-json", send_json.to_str().unwrap()]);
    let out = groupwire(&args);
    let sent = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{send_args:?}: {sent}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(sent.starts_with(&format!("sent: {len} bytes")), "{sent}");
    let (received, _) = recv.finish();
    assert!(
        received.contains(&format!("received: {len} bytes")),
        "{received}"
    );
    assert_eq!(std::fs::read(&dst).unwrap(), data, "{send_args:?}");
    let t = Transfer {
        sent,
        received,
        send_json: stats(&send_json),
        recv_json: stats(&recv_json),
    };
    assert_eq!(t.send_json["size"], len);
    assert_eq!(t.send_json["role"], "send");
    assert_eq!(t.recv_json["role"], "receive");
    assert!(t.send_json["effective_bps"].as_u64().unwrap() > 0);
    std::fs::remove_dir_all(&dir).unwrap();
    t
}

#[test]
fn a_file_crosses_with_rbudp_and_both_summaries_agree() {
    let t = transfer(
        "rbudp",
        5_000_123,
        "rbudp",
        &["--via", "rbudp", "--rate", "200Mbit/s", "--adaptive"],
    );
    assert_eq!(t.send_json["blake3"], t.recv_json["blake3"]);
    assert_eq!(t.send_json["via"], "rbudp");
    assert!(t.sent.contains("rbudp: "), "{}", t.sent);
    assert!(t.received.contains("stored"), "{}", t.received);
}

#[test]
fn a_file_crosses_striped_over_tcp_and_both_summaries_agree() {
    for (via, streams) in [("striped:4", 4), ("tcp", 1)] {
        let t = transfer(&via.replace(':', "-"), 3_000_001, "tcp", &["--via", via]);
        assert!(
            t.sent.contains(&format!("tcp: {streams} stream(s)")),
            "{}",
            t.sent
        );
        assert_eq!(t.send_json["hash"], t.recv_json["hash"]);
        assert_eq!(t.send_json["via"], "tcp");
        assert_eq!(t.send_json["per_stream"].as_array().unwrap().len(), streams);
    }
}

#[test]
fn an_auto_receiver_takes_an_rbudp_sender_and_a_striped_sender() {
    let t = transfer(
        "auto-rx-rbudp",
        2_000_003,
        "auto",
        &["--via", "rbudp", "--rate", "200Mbit/s"],
    );
    t.assert_via("rbudp");
    assert!(t.received.contains("via rbudp"), "{}", t.received);
    assert_eq!(t.recv_json["dropped_connections"], 0);

    let t = transfer(
        "auto-rx-striped",
        2_000_003,
        "auto",
        &["--via", "striped:3"],
    );
    t.assert_via("tcp");
    assert!(t.received.contains("via tcp"), "{}", t.received);
    assert_eq!(t.recv_json["per_stream"].as_array().unwrap().len(), 3);
    assert_eq!(t.recv_json["dropped_connections"], 0);
}

#[test]
fn an_auto_sender_without_a_rate_stripes_over_tcp() {
    let t = transfer("auto-no-rate", 1_500_001, "auto", &[]);
    t.assert_via("tcp");
    let why = t.chosen_because();
    assert!(why.contains("no --rate"), "{why}");
    // No plan without the path: the library's 4 connections.
    assert_eq!(t.send_json["per_stream"].as_array().unwrap().len(), 4);
    // Nothing to measure: no probe connections.
    assert!(t.send_json.get("path_rtt_seconds").is_none());
    assert_eq!(t.recv_json["dropped_connections"], 0);
}

#[test]
fn an_auto_sender_with_a_rate_blasts_on_a_long_round_trip_only() {
    // A round trip given with --rtt: 40 ms is a long path.
    let t = transfer(
        "auto-long",
        1_500_001,
        "auto",
        &["--rate", "200Mbit/s", "--rtt", "40ms"],
    );
    t.assert_via("rbudp");
    assert_eq!(t.send_json["path_rtt_seconds"], 0.04);
    let why = t.chosen_because();
    assert!(why.contains("given with --rtt"), "{why}");
    assert_eq!(t.recv_json["dropped_connections"], 0);

    // A given round trip under 5 ms: striped, planned from --rate x --rtt.
    let t = transfer(
        "auto-short",
        1_500_001,
        "auto",
        &["--rate", "200Mbit/s", "--rtt", "1ms"],
    );
    assert_eq!(t.send_json["via"], "tcp");
    let why = t.chosen_because();
    assert!(why.contains("under 5.00 ms"), "{why}");

    // Measured: loopback is far under 5 ms, but a loaded machine may slow
    // a connect, so check the choice against the round trip it reports.
    let t = transfer("auto-measured", 1_500_001, "auto", &["--rate", "200Mbit/s"]);
    let rtt = t.send_json["path_rtt_seconds"].as_f64().unwrap();
    let expected = if rtt >= 0.005 { "rbudp" } else { "tcp" };
    assert_eq!(t.send_json["via"], expected, "round trip {rtt} s");
    t.assert_via(expected);
    let why = t.chosen_because();
    assert!(why.contains("measured"), "{why}");
    // The receiver dropped the three probe connections and took the sender.
    assert_eq!(t.recv_json["dropped_connections"], 3);
}

#[test]
fn help_states_the_auto_rule() {
    let o = groupwire(&["bulk", "send", "--help"]);
    let help = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success());
    assert!(help.contains("[default: auto]"), "{help}");
    assert!(help.contains("at least 5 ms"), "{help}");
    let o = groupwire(&["bulk", "recv", "--help"]);
    let help = String::from_utf8_lossy(&o.stdout);
    assert!(help.contains("[default: auto]"), "{help}");
}

#[test]
fn usage_errors_say_what_to_do_and_exit_2() {
    let dir = temp_dir("usage");
    let src = dir.join("in.bin");
    std::fs::write(&src, b"hello").unwrap();

    let (src_arg, nope) = (src.to_str().unwrap(), dir.join("nope"));
    let send = |file, flags: &[_]| [&["bulk", "send", file, "--to", "127.0.0.1:9"], flags].concat();
    for (args, says) in [
        // RBUDP needs a rate.
        (send(src_arg, &["--via", "rbudp"]), "--rate"),
        // A mechanism that does not exist names the ones that do.
        (send(src_arg, &["--via", "carrier-pigeon"]), "striped:N"),
        // A file that is not there.
        (
            send(nope.to_str().unwrap(), &["--rate", "10Mbit/s"]),
            "cannot read",
        ),
        // The receiver does not overwrite a file unless told to.
        (
            vec!["bulk", "recv", "--listen", "127.0.0.1:0", "--out", src_arg],
            "--force",
        ),
    ] {
        let o = groupwire(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    assert_eq!(std::fs::read(&src).unwrap(), b"hello");

    // A receiver nobody sends to gives up when told, leaving no file.
    let out = dir.join("never.bin");
    let o = groupwire(&[
        "bulk",
        "recv",
        "--listen",
        "127.0.0.1:0",
        "--out",
        out.to_str().unwrap(),
        "--timeout",
        "300ms",
        "--quiet",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no sender"));
    assert!(!out.exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `bulk recv --via VIA` of `dst` on a free port, with `--stats-json` to
/// `json`.
fn receiver(via: &str, dst: &std::path::Path, json: &std::path::Path) -> common::Proc {
    spawn(&[
        "bulk",
        "recv",
        "--via",
        via,
        "--listen",
        "127.0.0.1:0",
        "--out",
        dst.to_str().unwrap(),
        "--timeout",
        "60s",
        "--quiet",
        "--stats-json",
        json.to_str().unwrap(),
    ])
}

/// `bulk send SRC --to TO --via rbudp --rate RATE --quiet EXTRA...`.
fn rbudp_sender(src: &std::path::Path, to: &str, rate: &str, extra: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_groupwire"));
    c.args(["bulk", "send", src.to_str().unwrap(), "--to", to])
        .args(["--via", "rbudp", "--rate", rate, "--quiet"])
        .args(extra);
    c
}

/// A fast RBUDP sender's run: [`rbudp_sender`] at 200 Mbit/s.
fn fast_rbudp(src: &std::path::Path, to: &str, extra: &[&str]) -> std::process::Output {
    rbudp_sender(src, to, "200Mbit/s", extra)
        .output()
        .expect("groupwire runs")
}

#[test]
fn an_interrupted_rbudp_transfer_resumes_with_what_is_missing() {
    use std::io::Read;
    use std::time::Duration;

    let dir = temp_dir("resume");
    let (src, dst) = (dir.join("in.bin"), dir.join("out.bin"));
    let part = dir.join("out.bin.part");
    let record = dir.join("out.bin.part.resume");
    let len = 8_000_000;
    let data = payload(len);
    std::fs::write(&src, &data).unwrap();
    let (send_json, recv_json) = (dir.join("send.json"), dir.join("recv.json"));

    // A slow sender (8 s of blast at 8 Mbit/s), killed once the receiver
    // has recorded some of the file: the receiver keeps it and says how
    // to go on.
    let mut recv = receiver("rbudp", &dst, &recv_json);
    let to = recv.addr("listen").to_string();
    let mut sender = rbudp_sender(&src, &to, "8Mbit/s", &[]).spawn().unwrap();
    // At most 60 s (3000 polls of 20 ms): the first record is due 1 s
    // after the first datagram.
    let recorded = (0..3000).any(|_| {
        std::thread::sleep(Duration::from_millis(20));
        record.exists()
    });
    assert!(recorded, "no resume record");
    sender.kill().unwrap();
    sender.wait().unwrap();
    let status = recv.child.wait().unwrap();
    let mut err = String::new();
    recv.child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("to resume"), "{err}");
    assert!(part.exists() && record.exists() && !dst.exists());

    // The same two commands again (a fast sender this time): only what
    // was missing crosses, and the file is whole.
    let recv = receiver("rbudp", &dst, &recv_json);
    let to = recv.addr("listen").to_string();
    let out = fast_rbudp(&src, &to, &["--stats-json", send_json.to_str().unwrap()]);
    let sent = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{sent}");
    assert!(sent.contains("resumed: "), "{sent}");
    let (received, _) = recv.finish();
    assert!(received.contains("resumed: "), "{received}");
    assert_eq!(std::fs::read(&dst).unwrap(), data);
    assert!(!part.exists() && !record.exists());
    let s = stats(&send_json);
    let held = s["held_packets"].as_u64().unwrap();
    let packets = s["packets"].as_u64().unwrap();
    assert!(held > 0 && held < packets, "{held} of {packets}");
    assert_eq!(
        s["sender"]["datagrams"].as_u64().unwrap(),
        packets - held,
        "only what was missing was sent"
    );
    assert_eq!(stats(&recv_json)["held_packets"], held);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_file_changed_since_the_interruption_starts_over() {
    let dir = temp_dir("changed");
    let (src, dst) = (dir.join("in.bin"), dir.join("out.bin"));
    let len = 300_000;
    std::fs::write(&src, payload(len)).unwrap();
    // What an interrupted transfer of another version left.
    let part = dir.join("out.bin.part");
    std::fs::write(&part, vec![0u8; len]).unwrap();
    let packets = len.div_ceil(1400) as u64;
    let words = packets.div_ceil(64);
    let mut record = b"GWRBRES1".to_vec();
    record.extend_from_slice(&(len as u64).to_be_bytes());
    record.extend_from_slice(&1400u32.to_be_bytes());
    record.extend_from_slice(&[0; 4]);
    record.extend_from_slice(&12345u64.to_be_bytes());
    record.extend_from_slice(&words.to_be_bytes());
    for _ in 0..words {
        record.extend_from_slice(&u64::MAX.to_be_bytes());
    }
    std::fs::write(dir.join("out.bin.part.resume"), record).unwrap();

    let recv_json = dir.join("recv.json");
    let recv = receiver("rbudp", &dst, &recv_json);
    let to = recv.addr("listen").to_string();
    let out = fast_rbudp(&src, &to, &[]);
    assert!(out.status.success());
    let (received, _) = recv.finish();
    assert!(received.contains("another version"), "{received}");
    assert_eq!(std::fs::read(&dst).unwrap(), payload(len));
    assert_eq!(stats(&recv_json)["held_packets"], 0);
    std::fs::remove_dir_all(&dir).unwrap();
}
