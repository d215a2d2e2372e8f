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

/// Moves `len` bytes from a file to a file: a receiver with `recv_via`,
/// then a sender with `send_args`; checks both exit well, the file arrives
/// byte for byte, and both summaries name its size.
fn transfer(name: &str, len: usize, recv_via: &str, send_args: &[&str]) -> Transfer {
    let dir = temp_dir(name);
    let (src, dst) = (dir.join("in.bin"), dir.join("out.bin"));
    let data = payload(len);
    std::fs::write(&src, &data).unwrap();
    let (send_json, recv_json) = (dir.join("send.json"), dir.join("recv.json"));
    let recv = spawn(&[
        "bulk",
        "recv",
        "--via",
        recv_via,
        "--listen",
        "127.0.0.1:0",
        "--out",
        dst.to_str().unwrap(),
        "--timeout",
        "60s",
        "--quiet",
        "--stats-json",
        recv_json.to_str().unwrap(),
    ]);
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
        &["--rate", "200Mbit/s", "--adaptive"],
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
fn usage_errors_say_what_to_do_and_exit_2() {
    let dir = temp_dir("usage");
    let src = dir.join("in.bin");
    std::fs::write(&src, b"hello").unwrap();

    // RBUDP needs a rate.
    let o = groupwire(&["bulk", "send", src.to_str().unwrap(), "--to", "127.0.0.1:9"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--rate"));

    // A mechanism that does not exist names the ones that do.
    let o = groupwire(&[
        "bulk",
        "send",
        src.to_str().unwrap(),
        "--to",
        "127.0.0.1:9",
        "--via",
        "carrier-pigeon",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("striped:N"));

    // A file that is not there.
    let o = groupwire(&[
        "bulk",
        "send",
        dir.join("nope").to_str().unwrap(),
        "--to",
        "127.0.0.1:9",
        "--rate",
        "10Mbit/s",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("cannot read"));

    // The receiver does not overwrite a file unless told to.
    let o = groupwire(&[
        "bulk",
        "recv",
        "--listen",
        "127.0.0.1:0",
        "--out",
        src.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--force"));
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
