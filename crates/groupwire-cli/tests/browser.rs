//! The TypeScript client (`clients/js`) for real: its Node test suite
//! against this relay, the bundle the relay serves checked against a
//! fresh build, and headless Chromium running browser clients beside a
//! Rust client in one group (`clients/js/test/browser/driver.mjs`).
//!
//! `scripts/browser.sh` (which CI runs first) installs Debian's chromium
//! and builds `clients/js`; these tests run it too (it is fast when all is
//! there). Only the Chromium test skips, and only where the script left
//! `target/browser/unavailable` saying why Chromium could not be
//! installed; a failed build, a missing Node.js or any other missing piece
//! fails.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use bytes::Bytes;
use groupwire_relay::frame::{ActivityMode, Role};
use groupwire_relay::{ClientEvent, ClientOptions, RelayClient};
use serde_json::Value;

mod common;
use common::Relay;

/// Updates each of the three senders sends in the total-order step.
const N: usize = 30;
/// Bound on the browser step (the driver's own is 120 s; a loaded 2-core
/// machine starts Chromium slowly, so this is generous, not a measure).
const LIMIT: Duration = Duration::from_secs(300);

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn js_dir() -> PathBuf {
    repo().join("clients/js")
}

/// Runs `scripts/browser.sh` once per test binary; panics with its output
/// if it failed.
fn prepare() {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    let r = DONE.get_or_init(|| {
        let out = Command::new(repo().join("scripts/browser.sh"))
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("scripts/browser.sh does not run: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "scripts/browser.sh failed ({}):\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    });
    if let Err(e) = r {
        panic!("{e}");
    }
}

fn describe(what: &str, out: &Output) -> String {
    format!(
        "{what} exited with {}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn the_served_client_bundle_matches_a_fresh_build() {
    prepare();
    let built = std::fs::read_to_string(js_dir().join("dist/groupwire.js")).expect("built bundle");
    let served = std::fs::read_to_string(repo().join("crates/groupwire-relay/assets/groupwire.js"))
        .expect("committed bundle");
    assert!(
        built == served,
        "crates/groupwire-relay/assets/groupwire.js is stale: the relay would serve an old \
         client. Run `npm run relay-asset` in clients/js and commit the result"
    );
}

#[test]
fn js_client_node_tests_pass_against_this_relay() {
    prepare();
    let mut files: Vec<String> = std::fs::read_dir(js_dir().join("test"))
        .expect("clients/js/test")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|f| f.ends_with(".test.mjs"))
        .map(|f| format!("test/{f}"))
        .collect();
    files.sort();
    assert!(files.len() >= 2, "the Node test files: {files:?}");
    let out = Command::new("node")
        .args(["--test", "--test-concurrency=1"])
        .args(&files)
        .current_dir(js_dir())
        .env("GROUPWIRE_BIN", env!("CARGO_BIN_EXE_groupwire"))
        .stdin(Stdio::null())
        .output()
        .expect("node runs");
    assert!(out.status.success(), "{}", describe("node --test", &out));
}

#[test]
fn browsers_and_a_rust_client_share_one_order_state_and_lock() {
    prepare();
    let marker = repo().join("target/browser/unavailable");
    if let Ok(why) = std::fs::read_to_string(&marker) {
        // Straight to stderr, not through the test harness's capture, so
        // the skip shows in CI's log.
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED browsers_and_a_rust_client_share_one_order_state_and_lock: {} ({})",
            why.trim(),
            marker.display()
        );
        return;
    }
    assert!(
        Path::new("/usr/bin/chromium").exists(),
        "/usr/bin/chromium is missing although scripts/browser.sh did not say it could not be installed"
    );
    let mut relay = Relay::start(&["--memory", "--ws", "127.0.0.1:0"]);
    let ws = relay
        .next_line()
        .strip_prefix("websocket on ")
        .expect("the banner's websocket line")
        .to_owned();
    let tcp = relay.addr.clone();
    let group = "order";

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (mine, result) = rt.block_on(async {
        tokio::time::timeout(LIMIT, async {
            let (c, mut ev) = RelayClient::connect(tcp.as_str(), ClientOptions::new("rust"))
                .await
                .expect("connect");
            c.create_group(group, "test", 4, Bytes::from_static(b"[]"))
                .await
                .expect("create");
            c.join(group, Role::Principal, ActivityMode::Active, false)
                .await
                .expect("join");
            assert!(c.try_lock(group, "pen").await.expect("lock"), "pen is free");

            let child = Command::new("node")
                .args([
                    "test/browser/driver.mjs",
                    "--ws",
                    &ws,
                    "--group",
                    group,
                    "--n",
                    &N.to_string(),
                ])
                .current_dir(js_dir())
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("node runs the driver");
            let pid = child.id();
            let mut driver = tokio::task::spawn_blocking(move || child.wait_with_output());

            let mut seen: Vec<(u64, String)> = Vec::new();
            let mut burst_sent = false;
            loop {
                let d = tokio::select! {
                    e = ev.recv() => match e {
                        Some(ClientEvent::Deliver(d)) => d,
                        Some(ClientEvent::Closed(e)) => panic!("the Rust client closed: {e:?}"),
                        Some(_) => continue,
                        None => panic!("the Rust client's events ended"),
                    },
                    out = &mut driver => {
                        let out = out.expect("join").expect("driver output");
                        panic!("{}", describe("the driver (before the Rust client was done)", &out));
                    }
                };
                let text = String::from_utf8(d.payload.to_vec()).expect("utf-8");
                seen.push((d.seq, text.clone()));
                if !burst_sent && (text.starts_with("A:") || text.starts_with("B:")) {
                    // Interleave with the browsers' updates.
                    burst_sent = true;
                    for i in 0..N {
                        c.send(group, 0, Bytes::from(format!("R:{i}"))).await.expect("send");
                    }
                }
                match text.as_str() {
                    // A queued for the lock behind us: pass it on.
                    "A:waiting" => c.unlock(group, "pen").await.expect("unlock"),
                    "A:got-pen" => {
                        assert!(
                            !c.try_lock(group, "pen").await.expect("try"),
                            "a browser holds the lock"
                        );
                        // Queue for it, then say so (the acquire is written first).
                        let mut lock = Box::pin(c.lock(group, "pen"));
                        tokio::select! {
                            biased;
                            r = &mut lock => panic!("granted while a browser holds it: {r:?}"),
                            () = std::future::ready(()) => {}
                        }
                        c.send(group, 0, Bytes::from_static(b"R:waiting")).await.expect("send");
                        lock.await.expect("the browser passes the lock back");
                        c.send(group, 0, Bytes::from_static(b"R:got-pen")).await.expect("send");
                        c.send(group, 0, Bytes::from_static(b"R:done")).await.expect("send");
                    }
                    "R:done" => break,
                    _ => {}
                }
            }
            let out = driver.await.expect("join").expect("driver output");
            assert!(out.status.success(), "{}", describe("the driver", &out));
            let line = String::from_utf8_lossy(&out.stdout);
            let result: Value = serde_json::from_str(line.trim()).unwrap_or_else(|e| {
                panic!("driver result {line:?} (pid {pid}): {e}")
            });
            (seen, result)
        })
        .await
        .expect("the browser test finishes in time")
    });
    relay.kill();

    let list = |v: &Value| -> Vec<(u64, String)> {
        v.as_array()
            .expect("a list")
            .iter()
            .map(|e| {
                (
                    e[0].as_str().expect("seq").parse().expect("a number"),
                    e[1].as_str().expect("payload").to_owned(),
                )
            })
            .collect()
    };
    // One total order: seq 1, 2, 3, ... with the same update at each, everywhere.
    assert!(
        mine.iter()
            .enumerate()
            .all(|(i, (s, _))| *s == i as u64 + 1)
    );
    assert_eq!(list(&result["A"]), mine, "browser A's order");
    assert_eq!(list(&result["B"]), mine, "browser B's order");
    for who in ["A", "B", "R"] {
        let count = mine
            .iter()
            .filter(|(_, m)| m.starts_with(&format!("{who}:")) && m[2..].parse::<usize>().is_ok())
            .count();
        assert_eq!(count, N, "{who}'s updates");
    }
    // The late joiner: the checkpoint A wrote, then the log after it.
    let k: u64 = result["cCheckpoint"]
        .as_str()
        .expect("seq")
        .parse()
        .expect("a number");
    let state: Vec<String> = result["cState"]
        .as_array()
        .expect("the checkpoint is a JSON list")
        .iter()
        .map(|m| m.as_str().expect("a payload").to_owned())
        .collect();
    assert!(k >= 3 * N as u64, "checkpoint after the order step: {k}");
    assert_eq!(state.len() as u64, k);
    let c = list(&result["C"]);
    assert_eq!(
        c.first().map(|(s, _)| *s),
        Some(k + 1),
        "C's log starts after the checkpoint"
    );
    let rebuilt: Vec<&str> = state
        .iter()
        .map(String::as_str)
        .chain(c.iter().map(|(_, m)| m.as_str()))
        .collect();
    let want: Vec<&str> = mine.iter().map(|(_, m)| m.as_str()).collect();
    assert_eq!(rebuilt, want, "C's state plus log is everyone's history");
    let members: Vec<&str> = result["cMembers"]
        .as_array()
        .expect("members")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for m in ["rust", "browser-A", "browser-B", "browser-C"] {
        assert!(members.contains(&m), "{m} in {members:?}");
    }
    // The lock went browser A -> Rust in this order.
    let at = |m: &str| mine.iter().position(|(_, x)| x == m).expect(m);
    assert!(at("A:waiting") < at("A:got-pen"));
    assert!(at("A:got-pen") < at("R:waiting"));
    assert!(at("R:waiting") < at("R:got-pen"));
    // The demo page: a drag reached the other tab; a late tab starts from
    // the checkpoint a tab stored (under the page's lock) and draws the same.
    let segments = result["demoSegments"].as_u64().expect("segments");
    assert!(segments >= 5, "{segments}");
    let late = &result["demoLate"];
    assert!(late["stored"].as_u64().expect("stored") >= 4, "{late}");
    assert!(
        late["joinedAt"].as_u64() >= late["stored"].as_u64(),
        "{late}"
    );
    assert_eq!(late["segments"].as_u64(), Some(segments), "{late}");
}
