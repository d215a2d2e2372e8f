//! The relay as a real process: crash recovery after `kill -9`, and the
//! `groupwire relay` / `groupwire group` commands as a user meets them.

use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use groupwire_relay::frame::{ActivityMode, Role};
use groupwire_relay::{ClientEvent, ClientOptions, JoinInfo, RelayClient};

mod common;
use common::Relay;

#[path = "../../groupwire-relay/src/storage/test_nats.rs"]
mod test_nats;

/// The clients' runtime: two workers, beside the relay process.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// `groupwire relay serve` on a free loopback port with its state in `data_dir`.
fn start_relay(data_dir: &std::path::Path) -> Relay {
    Relay::start(&["--data-dir", data_dir.to_str().expect("utf-8 path")])
}

#[test]
fn every_acknowledged_update_survives_kill_9_in_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = runtime();
    let mut relay = start_relay(dir.path());
    let addr = relay.addr.clone();
    let acked: Acked = Arc::default();
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
            let writers: Vec<_> = (0..4)
                .map(|w| tokio::spawn(publish(addr.clone(), "log", format!("w{w}"), acked.clone())))
                .collect();
            // Let them run, then kill -9 while updates are in flight.
            while acked.lock().expect("lock").len() < 400 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            relay.kill();
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
    let _relay = start_relay(dir.path());
    let addr = _relay.addr.clone();
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(20), async {
            let (c, j, log) = read_log(&addr, "log").await;
            assert_eq!((j.checkpoint_seq, &j.state[..]), (0, &b"init"[..]));
            let last_acked = acked.last().expect("some").0;
            assert!(
                j.head_seq >= last_acked,
                "head {} < acked {last_acked}",
                j.head_seq
            );
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

/// Acknowledged updates: `(seq, payload)`, shared by the publishers.
type Acked = Arc<Mutex<Vec<(u64, String)>>>;

/// Connects as `name`, joins `group` as a principal and sends
/// `NAME-000000`, `NAME-000001`, ... back to back, recording each update
/// the relay acknowledged, until the relay goes away (an update whose
/// request failed was not acknowledged).
async fn publish(addr: String, group: &'static str, name: String, acked: Acked) {
    // `_` drops the event receiver, so the client discards events: held
    // unread, they would fill its channel (a joiner is sent the whole log)
    // and stop it from reading replies.
    let Ok((c, _)) = RelayClient::connect(addr.as_str(), ClientOptions::new(&name)).await else {
        return; // killed before this publisher got in
    };
    if c.join(group, Role::Principal, ActivityMode::Active, false)
        .await
        .is_err()
    {
        return;
    }
    for i in 0.. {
        let payload = format!("{name}-{i:06}");
        match c.send(group, 1, Bytes::from(payload.clone())).await {
            Ok(seq) => acked.lock().expect("lock").push((seq, payload)),
            Err(_) => return,
        }
    }
}

/// Joins `group` on the relay at `addr` as an observer and reads its whole
/// log (from the checkpoint to the head at join time); returns the client,
/// the join reply and `(seq, payload)` in delivery order.
async fn read_log(addr: &str, group: &str) -> (RelayClient, JoinInfo, Vec<(u64, String)>) {
    let (c, mut ev) = RelayClient::connect(addr, ClientOptions::new("reader"))
        .await
        .expect("connect after restart");
    let j = c
        .join(group, Role::Observer, ActivityMode::Active, false)
        .await
        .expect("the group survived");
    let mut log = Vec::new();
    while log.len() < (j.head_seq - j.checkpoint_seq) as usize {
        match ev.recv().await.expect("event") {
            ClientEvent::Deliver(d) => {
                log.push((d.seq, String::from_utf8_lossy(&d.payload).into_owned()));
            }
            ClientEvent::Closed(e) => panic!("closed: {e:?}"),
            _ => {}
        }
    }
    (c, j, log)
}

fn groupwire(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_groupwire"))
        .args(args)
        .output()
        .expect("the groupwire binary runs")
}

#[test]
fn a_relay_whose_nats_is_down_says_so_and_fails() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let nats = format!("nats://127.0.0.1:{port}");
    let o = groupwire_within(
        &["relay", "serve", "--listen", "127.0.0.1:0", "--nats", &nats],
        Duration::from_secs(60),
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("starting the relay") && stderr.contains("connecting to NATS"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    // NATS is one store; a data directory or memory is another.
    let o = groupwire(&["relay", "serve", "--nats", &nats, "--memory"]);
    assert_eq!(o.status.code(), Some(2));
}

/// Issue 17, "Bad input": a node started on the same NATS with settings
/// that every node must share set otherwise than the first node's is
/// refused (exit code 2, as for a bad option), told each setting with
/// both values and how to start it; a node differing only in its own
/// settings starts.
#[test]
fn a_relay_node_whose_shared_settings_differ_is_refused() {
    let nats = test_nats::NatsServer::start();
    let _first = Relay::start(&["--nats", &nats.url]);
    let o = groupwire_within(
        &[
            "relay",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--nats",
            &nats.url,
            "--nats-replicas",
            "3",
            "--max-frame",
            "2097152",
        ],
        Duration::from_secs(60),
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    for part in [
        "error: starting the relay: this relay node's settings differ",
        "replicas (--nats-replicas): the cluster has 1, this node 3;",
        "largest frame (--max-frame): the cluster has 1048576, this node 2097152;",
        "start this node with --nats-replicas 1, with --max-frame 1048576;",
        "nats kv del GW_CLUSTER settings",
    ] {
        assert!(stderr.contains(part), "{part:?} not in: {stderr}");
    }
    assert!(!stderr.contains("panicked"), "{stderr}");
    let _second = Relay::start(&[
        "--nats",
        &nats.url,
        "--fanout-budget",
        "8",
        "--equal-priorities",
        "--aging-timeout",
        "1s",
    ]);
}

#[test]
fn relay_and_group_commands_work_by_hand() {
    let dir = tempfile::tempdir().expect("tempdir");
    let _relay = start_relay(dir.path());
    let addr = _relay.addr.clone();
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
    assert!(String::from_utf8_lossy(&o.stderr).contains("possible values: principal, observer"));
    let o = groupwire(&["relay", "serve", "--sync", "sometimes"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("possible values: full, normal"));
}

#[test]
fn tokens_minted_by_the_cli_are_checked_by_the_relay() {
    let dir = tempfile::tempdir().expect("tempdir");
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "correct horse battery staple\n").expect("secret");
    let relay = Relay::start(&[
        "--memory",
        "--auth-secret-file",
        secret.to_str().expect("utf-8"),
    ]);
    let addr = relay.addr.clone();
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
    let mut relay = Relay::start(&["--ws", "127.0.0.1:0", "--memory"]);
    let tcp = relay.addr.clone();
    let ws = relay
        .next_line()
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

/// `group send` reads no events; held unread, they filled the client's
/// channel (1024) once the group's log outgrew it, and the client stopped
/// reading replies: the 1025th send, or any send to a long log, hung.
#[test]
fn group_commands_do_not_stall_on_a_log_longer_than_the_event_channel() {
    let dir = tempfile::tempdir().expect("tempdir");
    let _relay = start_relay(dir.path());
    let addr = _relay.addr.clone();
    let messages: Vec<String> = (0..1100).map(|i| format!("m{i}")).collect();
    let mut args = vec!["group", "--relay", addr.as_str(), "send", "long"];
    let create = groupwire(&["group", "--relay", addr.as_str(), "create", "long"]);
    assert!(create.status.success());
    args.extend(messages.iter().map(String::as_str));
    let limit = Duration::from_secs(60);
    let o = groupwire_within(&args, limit);
    assert!(String::from_utf8_lossy(&o.stdout).contains("sent #1100"));
    // A newcomer is sent the 1100-entry log on join, then sends and locks.
    for cmd in [
        &["send", "long", "late"][..],
        &["lock", "long", "pen", "--hold", "1ms"],
    ] {
        let mut args = vec!["group", "--relay", addr.as_str()];
        args.extend_from_slice(cmd);
        let o = groupwire_within(&args, limit);
        assert!(
            o.status.success(),
            "{cmd:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
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
            let shown = &args[..args.len().min(6)];
            panic!("groupwire {shown:?}... ran longer than {limit:?}");
        }
        std::thread::sleep(step);
        waited += step;
    }
    child.wait_with_output().expect("output")
}

/// Chaos: 20 rounds of three publishers loading the relay, each ended by
/// `kill -9` at a random moment (after a seeded-random number of
/// acknowledged updates, so always under load), then a restart on the same
/// data directory. Every update acknowledged in any round is in the log
/// exactly once, at the sequence number it was acknowledged with, the log
/// has no gaps, and each publisher's updates are in the order it sent them.
#[test]
fn acknowledged_updates_survive_20_kill_9s_under_load_once_and_in_order() {
    use rand::{Rng, SeedableRng};
    const ROUNDS: usize = 20;
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = runtime();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(10);
    let acked: Acked = Arc::default();
    for round in 0..ROUNDS {
        let kill_after = rng.random_range(1..300);
        let mut relay = start_relay(dir.path());
        let addr = relay.addr.clone();
        rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(60), async {
                if round == 0 {
                    let (admin, _e) =
                        RelayClient::connect(addr.as_str(), ClientOptions::new("admin"))
                            .await
                            .expect("connect");
                    admin
                        .create_group("chaos", "test", 4, Bytes::new())
                        .await
                        .expect("create");
                }
                let before = acked.lock().expect("lock").len();
                // Names sort by round, then publisher: p07-2-000041.
                let publishers: Vec<_> = (0..3)
                    .map(|p| {
                        let name = format!("r{round:02}-p{p}");
                        tokio::spawn(publish(addr.clone(), "chaos", name, acked.clone()))
                    })
                    .collect();
                while acked.lock().expect("lock").len() < before + kill_after {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                relay.kill();
                for p in publishers {
                    p.await.expect("a publisher ends when the relay dies");
                }
            })
            .await
            .unwrap_or_else(|_| panic!("round {round} finishes in time"));
        });
    }

    let acked = std::mem::take(&mut *acked.lock().expect("lock"));
    let _relay = start_relay(dir.path());
    let addr = _relay.addr.clone();
    let (_, j, log) = rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(60), read_log(&addr, "chaos"))
            .await
            .expect("the log is read in time")
    });
    assert_eq!(j.checkpoint_seq, 0);
    assert!(
        log.iter().enumerate().all(|(i, (s, _))| *s == i as u64 + 1),
        "the log has gaps"
    );
    for (seq, payload) in &acked {
        assert_eq!(
            log.get(*seq as usize - 1).map(|(_, p)| p),
            Some(payload),
            "acknowledged update #{seq}"
        );
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut last: std::collections::BTreeMap<&str, &str> = Default::default();
    for (seq, payload) in &log {
        assert!(seen.insert(payload), "#{seq} {payload} is in the log twice");
        // r07-p2-000041: a publisher's updates in the order it sent them.
        let (publisher, counter) = payload.rsplit_once('-').expect("NAME-COUNTER");
        if let Some(prev) = last.insert(publisher, counter) {
            assert!(
                prev < counter,
                "{publisher}: {prev} logged before {counter}"
            );
        }
    }
    assert!(acked.len() >= ROUNDS, "{} acknowledged", acked.len());
    eprintln!(
        "{ROUNDS} kill -9s: {} updates acknowledged, {} in the log",
        acked.len(),
        log.len()
    );
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
    let (old_key, new_key) = (
        path("2026-10.secret"),
        format!("2026-11={}", path("new.secret")),
    );
    let mut relay = Relay::start(&[
        "--ws",
        "127.0.0.1:0",
        "--memory",
        "--tls-cert",
        &path("relay.pem"),
        "--tls-key",
        &path("relay.key"),
        "--auth-secret-file",
        &old_key,
        "--auth-secret-file",
        &new_key,
    ]);
    let tls = relay.addr.clone();
    let wss = relay
        .next_line()
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

/// `group watch` reports the group's channel measures (Leigh et al. §4) at
/// the end and in its `--metrics-json` records: the live updates' one-way
/// latency from the senders' stamps, no loss, the frames in.
#[test]
fn group_watch_reports_the_channel_measures() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().expect("tempdir");
    let _relay = start_relay(dir.path());
    let addr = _relay.addr.clone();
    let create = groupwire(&["group", "--relay", addr.as_str(), "create", "chat"]);
    assert!(create.status.success());
    let json = dir.path().join("chat.jsonl");
    let mut watch = Command::new(env!("CARGO_BIN_EXE_groupwire"))
        .args(["group", "--relay", addr.as_str(), "watch", "chat"])
        .args(["--count", "5", "--metrics-json"])
        .arg(&json)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the groupwire binary runs");
    let mut stdout = BufReader::new(watch.stdout.take().expect("piped"));
    let mut line = String::new();
    stdout.read_line(&mut line).expect("read");
    assert!(line.starts_with("joined chat"), "{line}");
    let mut args = vec!["group", "--relay", addr.as_str(), "send", "chat"];
    args.extend(["a", "b", "c", "d", "e"]);
    assert!(
        groupwire_within(&args, Duration::from_secs(60))
            .status
            .success()
    );
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).expect("read");
    let o = watch
        .wait_with_output()
        .expect("watch ends after 5 updates");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    assert_eq!(
        rest.lines().filter(|l| l.starts_with('#')).count(),
        5,
        "{rest}"
    );
    assert!(stderr.contains("relay chat: "), "{stderr}");
    let records = std::fs::read_to_string(&json).expect("json lines");
    let last: serde_json::Value = records
        .lines()
        .last()
        .map(|l| serde_json::from_str(l).expect("json"))
        .expect("a final record");
    assert_eq!(last["channel"], "relay chat", "{last}");
    assert_eq!(last["latency_kind"], "one_way", "{last}");
    assert_eq!(last["in"]["packets"], 5, "{last}");
    assert_eq!(last["latency_total"]["count"], 5, "{last}");
    assert_eq!(last["loss"]["judged"], 5, "{last}");
    assert_eq!(last["loss"]["residual_lost"], 0, "{last}");
    assert_eq!(last["paths"]["arrived"], 5, "{last}");
}
