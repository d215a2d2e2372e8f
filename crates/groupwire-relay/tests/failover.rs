//! Client failover on one relay that restarts (SQLite keeps its state):
//! a watcher and a sender connected with `RelayClient::connect_failover`
//! reconnect and resume each group where they stopped. Every wait is
//! bounded by `LIMIT`; nothing asserts speed.

mod common;

use std::net::SocketAddr;
use std::path::Path;

use bytes::Bytes;
use common::failover::{Watched, failover_client, keep_sending, send_numbered};
use common::{LIMIT, join};
use groupwire_relay::frame::Role;
use groupwire_relay::storage::SyncMode;
use groupwire_relay::{RelayClient, RelayHandle, ServerConfig, StorageConfig};
use tokio::sync::watch;

/// A free loopback address.
fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
}

/// A relay on `addr` with its SQLite database in `dir`. The address was
/// in use a moment ago (a relay that restarts): binding is retried.
async fn sqlite_relay(addr: SocketAddr, dir: &Path) -> RelayHandle {
    let mut last = None;
    for _ in 0..(LIMIT.as_millis() / 50) {
        let mut cfg = ServerConfig::new(addr);
        cfg.storage = StorageConfig::Sqlite {
            dir: dir.to_owned(),
            sync: SyncMode::Normal,
        };
        match groupwire_relay::server::start(cfg).await {
            Ok(r) => return r,
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("relay on {addr}: {last:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_and_a_sender_resume_across_a_relay_restart() {
    let dir = tempfile::tempdir().expect("temp dir");
    let addr = free_addr();
    let relay = sqlite_relay(addr, dir.path()).await;
    let urls = [addr.to_string()];
    let (s, _) = failover_client(&urls, "sender").await;
    let (w, mut we) = failover_client(&urls, "watcher").await;
    s.create_group("g", "t", 4, Bytes::new())
        .await
        .expect("create");
    join(&s, "g", Role::Principal, false).await;
    join(&w, "g", Role::Observer, false).await;
    let (stop, stopped) = watch::channel(false);
    let sender = keep_sending(&s, "g", "u", stopped);

    let mut seen = Watched::default();
    seen.until(&mut we, |w| w.updates.len() >= 20).await;
    relay.shutdown().await;
    let relay = sqlite_relay(addr, dir.path()).await;
    let sent = seen.through_failover(&mut we, stop, sender).await;
    assert_eq!(seen.reconnects, urls, "one reconnect, to the same relay");
    assert!(seen.resyncs.is_empty(), "the log had everything");
    assert!(sent.interrupted.len() <= 1, "one send in flight at a time");
    relay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_resumed_past_a_compacted_log_gets_a_resync_and_the_state() {
    let dir = tempfile::tempdir().expect("temp dir");
    let addr = free_addr();
    let relay = sqlite_relay(addr, dir.path()).await;
    let (w, mut we) = failover_client(&[addr.to_string()], "watcher").await;
    let (s, _se) = RelayClient::connect(addr, common::failover::opts("s"))
        .await
        .expect("connect");
    s.create_group("g", "t", 4, Bytes::from_static(b"s0"))
        .await
        .expect("create");
    join(&s, "g", Role::Principal, false).await;
    join(&w, "g", Role::Observer, false).await;
    send_numbered(&s, "g", 1..=5).await;
    let mut seen = Watched::default();
    seen.until(&mut we, |w| w.last() == 5).await;
    relay.shutdown().await;

    // While the watcher cannot reach its relay, the same data is served
    // elsewhere: five more updates and a compacting checkpoint.
    let elsewhere = sqlite_relay(free_addr(), dir.path()).await;
    let (s, _se) = common::client(&elsewhere, "s2").await;
    join(&s, "g", Role::Principal, false).await;
    send_numbered(&s, "g", 6..=10).await;
    s.checkpoint("g", 10, Bytes::from_static(b"s10"))
        .await
        .expect("checkpoint");
    drop(s);
    elsewhere.shutdown().await;

    let relay = sqlite_relay(addr, dir.path()).await;
    seen.until(&mut we, |w| !w.resyncs.is_empty()).await;
    assert_eq!(seen.resyncs, [(5, 10)], "updates 6 to 10 are in the state");
    let (s, _se) = common::client(&relay, "s3").await;
    join(&s, "g", Role::Principal, false).await;
    let seq = s.send("g", 1, Bytes::from_static(b"u11")).await;
    assert_eq!(seq.expect("send"), 11);
    seen.until(&mut we, |w| w.last() == 11).await;
    let seqs: Vec<u64> = seen.updates.iter().map(|u| u.seq).collect();
    assert_eq!(seqs, [1, 2, 3, 4, 5, 11]);
    relay.shutdown().await;
}
