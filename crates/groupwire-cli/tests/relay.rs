//! The relay as a real process: crash recovery after `kill -9`, and the
//! `groupwire relay` / `groupwire group` commands as a user meets them.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use groupwire_relay::frame::{ActivityMode, Role};
use groupwire_relay::{ClientEvent, ClientOptions, RelayClient};

/// Starts `groupwire relay serve` on a free loopback port; returns the
/// process and its address (read from its first line of output).
fn start_relay(data_dir: &std::path::Path) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_groupwire"))
        .args(["relay", "serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data_dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the groupwire binary runs");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("the relay prints its address");
    let addr = line
        .trim()
        .strip_prefix("relay listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();
    (child, addr)
}

/// Kills the relay process we started, by its own handle (SIGKILL on Unix).
struct Relay(Child);

impl Drop for Relay {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn every_acknowledged_update_survives_kill_9_in_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (child, addr) = start_relay(dir.path());
    let mut relay = Relay(child);
    let acked: Arc<Mutex<Vec<(u64, String)>>> = Arc::default();
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(20), async {
            let (admin, _e) = RelayClient::connect(addr.as_str(), ClientOptions::new("admin"))
                .await
                .expect("connect");
            admin
                .create_group("log", "test", 4, Bytes::from_static(b"init"))
                .await
                .expect("create");
            // Four writers hammer the relay; each records what was acknowledged.
            let mut writers = Vec::new();
            for w in 0..4 {
                let addr = addr.clone();
                let acked = acked.clone();
                writers.push(tokio::spawn(async move {
                    let (c, _e) = RelayClient::connect(addr.as_str(), ClientOptions::new("w"))
                        .await
                        .expect("connect");
                    c.join("log", Role::Principal, ActivityMode::Active, false)
                        .await
                        .expect("join");
                    for i in 0.. {
                        let payload = format!("w{w}-{i}");
                        match c.send("log", 1, Bytes::from(payload.clone())).await {
                            Ok(seq) => acked.lock().expect("lock").push((seq, payload)),
                            Err(_) => break, // the relay died mid-request: not acknowledged
                        }
                    }
                }));
            }
            // Let them run, then kill -9 while updates are in flight.
            while acked.lock().expect("lock").len() < 400 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            relay.0.kill().expect("kill -9");
            let _ = relay.0.wait();
            for w in writers {
                let _ = w.await;
            }
        })
        .await
        .expect("the load phase finishes in time");
    });
    drop(relay);

    let mut acked = std::mem::take(&mut *acked.lock().expect("lock"));
    acked.sort();
    assert!(acked.len() >= 400);
    let (child, addr) = start_relay(dir.path());
    let _relay = Relay(child);
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(20), async {
            let (c, mut ev) = RelayClient::connect(addr.as_str(), ClientOptions::new("reader"))
                .await
                .expect("connect after restart");
            let j = c
                .join("log", Role::Observer, ActivityMode::Active, false)
                .await
                .expect("the group survived");
            assert_eq!((j.checkpoint_seq, &j.state[..]), (0, &b"init"[..]));
            let last_acked = acked.last().expect("some").0;
            assert!(
                j.head_seq >= last_acked,
                "head {} < acked {last_acked}",
                j.head_seq
            );
            let mut log = Vec::new();
            while log.len() < j.head_seq as usize {
                match ev.recv().await.expect("event") {
                    ClientEvent::Deliver(d) => {
                        log.push((d.seq, String::from_utf8_lossy(&d.payload).into_owned()));
                    }
                    ClientEvent::Closed(e) => panic!("closed: {e:?}"),
                    _ => {}
                }
            }
            // Contiguous, in order, and every acknowledged update at its sequence.
            assert!(log.iter().enumerate().all(|(i, (s, _))| *s == i as u64 + 1));
            for (seq, payload) in &acked {
                assert_eq!(&log[*seq as usize - 1].1, payload, "update #{seq}");
            }
            // The restarted relay keeps sequencing after the recovered head.
            c.change_role("log", Role::Principal).await.expect("role");
            let seq = c
                .send("log", 1, Bytes::from_static(b"after"))
                .await
                .expect("send");
            assert_eq!(seq, j.head_seq + 1);
        })
        .await
        .expect("recovery finishes in time");
    });
}

fn groupwire(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_groupwire"))
        .args(args)
        .output()
        .expect("the groupwire binary runs")
}

#[test]
fn relay_and_group_commands_work_by_hand() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (child, addr) = start_relay(dir.path());
    let _relay = Relay(child);
    let ok = |args: &[&str]| {
        let mut full = vec!["group", "--relay", addr.as_str()];
        full.extend_from_slice(args);
        let o = groupwire(&full);
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    assert!(ok(&["create", "chat", "--state", "hello"]).contains("created chat"));
    assert!(ok(&["send", "chat", "one", "two"]).contains("sent #2"));
    let out = ok(&["join", "chat"]);
    assert!(
        out.contains("state at #0 = \"hello\"") && out.contains("#2 from"),
        "{out}"
    );
    assert!(ok(&["lock", "chat", "pen", "--hold", "10ms", "--try"]).contains("released pen"));
    // A relay error is a failed run (1); bad arguments are usage errors (2).
    let o = groupwire(&["group", "--relay", addr.as_str(), "join", "nosuch"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no-such-group"));
    let o = groupwire(&[
        "group",
        "--relay",
        addr.as_str(),
        "join",
        "chat",
        "--role",
        "king",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let o = groupwire(&["relay", "serve", "--sync", "sometimes"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown sync mode"));
}

#[test]
fn tokens_minted_by_the_cli_are_checked_by_the_relay() {
    let dir = tempfile::tempdir().expect("tempdir");
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "correct horse battery staple\n").expect("secret");
    let mut child = Command::new(env!("CARGO_BIN_EXE_groupwire"))
        .args([
            "relay",
            "--listen",
            "127.0.0.1:0",
            "--memory",
            "--auth-secret-file",
        ])
        .arg(&secret)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("runs");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("address");
    let _relay = Relay(child);
    let addr = line
        .trim()
        .trim_start_matches("relay listening on ")
        .to_owned();
    let secret_s = secret.to_str().expect("utf-8 path");
    let o = groupwire(&[
        "relay",
        "token",
        "--secret-file",
        secret_s,
        "--group",
        "lab-*",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let token = String::from_utf8_lossy(&o.stdout).trim().to_owned();
    let create = |group: &str, token: &str| {
        groupwire(&[
            "group",
            "--relay",
            addr.as_str(),
            "--token",
            token,
            "create",
            group,
        ])
    };
    assert!(create("lab-1", &token).status.success());
    let o = create("other", &token);
    assert!(String::from_utf8_lossy(&o.stderr).contains("forbidden"));
    let o = create("lab-2", "forged.token");
    assert!(String::from_utf8_lossy(&o.stderr).contains("unauthorized"));
    let o = groupwire(&[
        "relay",
        "token",
        "--secret-file",
        secret_s,
        "--role",
        "emperor",
    ]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn group_commands_reach_the_relay_over_websocket() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_groupwire"))
        .args([
            "relay",
            "--listen",
            "127.0.0.1:0",
            "--ws",
            "127.0.0.1:0",
            "--memory",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("runs");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let _relay = Relay(child);
    let tcp = lines
        .next()
        .expect("a first line")
        .expect("utf-8")
        .trim_start_matches("relay listening on ")
        .to_owned();
    let ws = lines
        .next()
        .expect("a second line")
        .expect("utf-8")
        .trim_start_matches("websocket on ")
        .to_owned();
    assert!(ws.starts_with("ws://"), "{ws}");
    let run = |relay: &str, args: &[&str]| {
        let mut full = vec!["group", "--relay", relay];
        full.extend_from_slice(args);
        groupwire_within(&full, Duration::from_secs(20))
    };
    let ok = |relay: &str, args: &[&str]| {
        let o = run(relay, args);
        assert!(
            o.status.success(),
            "{relay} {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    assert!(ok(&ws, &["create", "chat", "--state", "hi"]).contains("created chat"));
    assert!(ok(&ws, &["send", "chat", "over ws"]).contains("sent #1"));
    let tcp_url = format!("tcp://{tcp}");
    assert!(ok(&tcp_url, &["send", "chat", "over tcp"]).contains("sent #2"));
    let out = ok(&ws, &["join", "chat"]);
    assert!(
        out.contains("state at #0 = \"hi\"") && out.contains("over ws") && out.contains("over tcp"),
        "{out}"
    );
    assert!(ok(&ws, &["lock", "chat", "pen", "--hold", "10ms", "--try"]).contains("released pen"));
    // A scheme the client does not speak is a usage error (2); a relay
    // error over WebSocket is a failed run (1), as over TCP.
    let o = run("http://127.0.0.1:1/", &["join", "chat"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("unknown scheme"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = run(&ws, &["join", "nosuch"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no-such-group"));
    let help = groupwire(&["group", "--help"]);
    assert!(String::from_utf8_lossy(&help.stdout).contains("ws://host:port/"));
}

/// [`groupwire`], killed (and the test failed) if it runs longer than `limit`.
fn groupwire_within(args: &[&str], limit: Duration) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_groupwire"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the groupwire binary runs");
    let step = Duration::from_millis(10);
    let mut waited = Duration::ZERO;
    // The outputs are a few lines, far below a pipe's buffer, so waiting
    // before reading cannot block the child.
    while child.try_wait().expect("wait").is_none() {
        if waited >= limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("groupwire {args:?} ran longer than {limit:?}");
        }
        std::thread::sleep(step);
        waited += step;
    }
    child.wait_with_output().expect("output")
}

/// Writes a CA and a server certificate for 127.0.0.1 it signed, as PEM
/// files `ca.pem`, `relay.pem` and `relay.key` in `dir`.
fn write_test_pki(dir: &std::path::Path) {
    let ca_key = rcgen::KeyPair::generate().expect("CA key");
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).expect("CA");
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .expect("params")
        .signed_by(&key, &ca)
        .expect("certificate");
    std::fs::write(dir.join("ca.pem"), ca.pem()).expect("write");
    std::fs::write(dir.join("relay.pem"), cert.pem()).expect("write");
    std::fs::write(dir.join("relay.key"), key.serialize_pem()).expect("write");
}

#[test]
fn tls_and_rotated_keys_work_from_the_command_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    write_test_pki(d);
    std::fs::write(d.join("2026-10.secret"), "old secret\n").expect("secret");
    std::fs::write(d.join("new.secret"), "  new secret  \n").expect("secret");
    let path = |f: &str| d.join(f).to_str().expect("utf-8 path").to_owned();
    let mut child = Command::new(env!("CARGO_BIN_EXE_groupwire"))
        .args([
            "relay",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--ws",
            "127.0.0.1:0",
            "--memory",
        ])
        .args([
            "--tls-cert",
            &path("relay.pem"),
            "--tls-key",
            &path("relay.key"),
        ])
        .args(["--auth-secret-file", &path("2026-10.secret")])
        .args([
            "--auth-secret-file",
            &format!("2026-11={}", path("new.secret")),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("runs");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let _relay = Relay(child);
    let tls = lines
        .next()
        .expect("a first line")
        .expect("utf-8")
        .trim_start_matches("relay listening on ")
        .to_owned();
    let wss = lines
        .next()
        .expect("a second line")
        .expect("utf-8")
        .trim_start_matches("websocket on ")
        .to_owned();
    assert!(tls.starts_with("tls://127.0.0.1:"), "{tls}");
    assert!(wss.starts_with("wss://127.0.0.1:"), "{wss}");
    let mint = |args: &[&str]| {
        let o = groupwire(&[&["relay", "token", "--expires", "1h"], args].concat());
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).trim().to_owned()
    };
    // The kid defaults to the file's stem, as on the relay; a renamed key
    // needs --kid.
    let old = mint(&["--secret-file", &path("2026-10.secret")]);
    let new = mint(&["--secret-file", &path("new.secret"), "--kid", "2026-11"]);
    let unnamed = mint(&["--secret-file", &path("new.secret")]);
    let ca = path("ca.pem");
    let run = |relay: &str, token: &str, extra: &[&str], args: &[&str]| {
        let mut full = vec!["group", "--relay", relay, "--token", token];
        full.extend_from_slice(extra);
        full.extend_from_slice(args);
        groupwire_within(&full, Duration::from_secs(20))
    };
    let with_ca = ["--ca-file", ca.as_str()];
    let o = run(&tls, &old, &with_ca, &["create", "chat"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = run(&wss, &new, &with_ca, &["send", "chat", "over wss"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = run(&tls, &new, &with_ca, &["join", "chat"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("over wss"));
    // A token naming a key the relay does not know.
    let o = run(&tls, &unnamed, &with_ca, &["join", "chat"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("key id \"new\""));
    // Without --ca-file the built-in roots do not vouch for a private CA.
    let o = run(&tls, &new, &[], &["join", "chat"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("UnknownIssuer"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // Plaintext to the TLS listener: no welcome.
    let plain = tls.trim_start_matches("tls://").to_owned();
    let o = run(&plain, &new, &[], &["join", "chat"]);
    assert_eq!(o.status.code(), Some(1));
}
