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

#[test]
fn a_file_crosses_with_rbudp_and_both_summaries_agree() {
    let dir = temp_dir("rbudp");
    let (src, dst) = (dir.join("in.bin"), dir.join("out.bin"));
    let data = payload(5_000_123);
    std::fs::write(&src, &data).unwrap();
    let (send_json, recv_json) = (dir.join("send.json"), dir.join("recv.json"));

    let recv = spawn(&[
        "bulk",
        "recv",
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
    assert_eq!(recv.ready["via"], "rbudp");
    let to = recv.addr("listen").to_string();
    let sent = groupwire(&[
        "bulk",
        "send",
        src.to_str().unwrap(),
        "--to",
        &to,
        "--rate",
        "200Mbit/s",
        "--adaptive",
        "--quiet",
        "--stats-json",
        send_json.to_str().unwrap(),
    ]);
    let out = String::from_utf8_lossy(&sent.stdout);
    assert!(
        sent.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&sent.stderr)
    );
    assert!(out.starts_with("sent: 5000123 bytes"), "{out}");
    let (rout, _) = recv.finish();
    assert!(rout.contains("received: 5000123 bytes"), "{rout}");

    assert_eq!(std::fs::read(&dst).unwrap(), data);
    let (s, r) = (stats(&send_json), stats(&recv_json));
    assert_eq!(s["blake3"], r["blake3"]);
    assert_eq!(s["size"], 5_000_123);
    assert_eq!(s["role"], "send");
    assert_eq!(r["role"], "receive");
    assert!(s["effective_bps"].as_u64().unwrap() > 0);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_file_crosses_striped_over_tcp_and_both_summaries_agree() {
    for via in ["striped:4", "tcp"] {
        let dir = temp_dir(&via.replace(':', "-"));
        let (src, dst) = (dir.join("in.bin"), dir.join("out.bin"));
        let data = payload(3_000_001);
        std::fs::write(&src, &data).unwrap();
        let (send_json, recv_json) = (dir.join("send.json"), dir.join("recv.json"));
        let recv = spawn(&[
            "bulk",
            "recv",
            "--via",
            "tcp",
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
        assert_eq!(recv.ready["via"], "tcp");
        let to = recv.addr("listen").to_string();
        let sent = groupwire(&[
            "bulk",
            "send",
            src.to_str().unwrap(),
            "--to",
            &to,
            "--via",
            via,
            "--quiet",
            "--stats-json",
            send_json.to_str().unwrap(),
        ]);
        let out = String::from_utf8_lossy(&sent.stdout);
        assert!(
            sent.status.success(),
            "{via}: {out}{}",
            String::from_utf8_lossy(&sent.stderr)
        );
        let streams = if via == "tcp" { 1 } else { 4 };
        assert!(out.contains(&format!("tcp: {streams} stream(s)")), "{out}");
        let (rout, _) = recv.finish();
        assert!(rout.contains("received: 3000001 bytes"), "{rout}");
        assert_eq!(std::fs::read(&dst).unwrap(), data, "{via}");
        let (s, r) = (stats(&send_json), stats(&recv_json));
        assert_eq!(s["hash"], r["hash"]);
        assert_eq!(
            (s["via"].as_str(), s["size"].as_u64()),
            (Some("tcp"), Some(3_000_001))
        );
        assert_eq!(s["per_stream"].as_array().unwrap().len(), streams);
        std::fs::remove_dir_all(&dir).unwrap();
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
