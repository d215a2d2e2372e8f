//! Chaos on real processes (issue 17): three `groupwire relay serve
//! --nats` processes, watchers on every node and senders under load; then
//! `kill -9` of one relay node, on one nats-server, and on a three-node
//! JetStream cluster with replication 3 also `kill -9` of the NATS node
//! leading the group's stream. Every acknowledged update must reach every
//! watcher once, in order (the watcher of the killed node fails over), and
//! a lock held through the killed node must come free within its lease.
//! Every wait is bounded; nothing asserts speed. `GW_TEST_RELAY_LOGS=DIR`
//! keeps each relay's stderr in DIR (with `GROUPWIRE_LOG=debug`, say) for
//! a look after a failure.

use std::time::Duration;

use bytes::Bytes;
use groupwire_relay::frame::{ActivityMode, ErrorCode, Role};
use groupwire_relay::{ClientOptions, RelayClient};
use tokio::sync::watch;

mod common;
use common::Relay;

#[path = "../../groupwire-relay/src/storage/test_nats.rs"]
mod test_nats;
use test_nats::{NatsCluster, NatsServer};

#[path = "../../groupwire-relay/tests/common/failover.rs"]
#[allow(
    dead_code,
    reason = "the relay's failover tests use the rest of this module"
)]
mod failover;
use failover::{Sent, Watched, failover_client, keep_sending};

/// The bound on every wait: generous, so a loaded machine passes.
const LIMIT: Duration = Duration::from_secs(30);

/// `addrs` rotated to start at `i`: node `i` first, then the others.
fn from(addrs: &[String], i: usize) -> Vec<String> {
    (0..addrs.len())
        .map(|k| addrs[(i + k) % addrs.len()].clone())
        .collect()
}

/// Joins `group` once `c`'s node knows it (created through another node
/// a moment ago).
async fn join_when_found(c: &RelayClient, group: &str, role: Role) {
    for _ in 0..(LIMIT.as_millis() / 20) {
        match c.join(group, role, ActivityMode::Active, false).await {
            Ok(_) => return,
            Err(e) if e.code() == Some(ErrorCode::NO_SUCH_GROUP) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("join {group}: {e}"),
        }
    }
    panic!("{group} did not reach this node within {LIMIT:?}");
}

#[test]
fn acknowledged_updates_survive_kill_9_of_a_relay_node() {
    let nats = NatsServer::start();
    chaos(std::slice::from_ref(&nats.url), "1", || {});
}

/// The same on a three-node JetStream cluster with replication 3, each
/// relay node connected to its own NATS node first; right after the relay
/// node's `kill -9`, the NATS node leading the group's stream is killed
/// too (`kill -9`), under the same load.
#[test]
fn acknowledged_updates_survive_kill_9_of_a_relay_node_and_a_nats_node() {
    let mut nats = NatsCluster::start(3);
    let urls: Vec<String> = (0..3).map(|i| nats.urls_from(i).join(",")).collect();
    chaos(&urls, "3", || {
        let victim = (0..30 * 10)
            .find_map(|_| {
                let leader = (0..3).find_map(|i| stream_leader(&nats, i));
                if leader.is_none() {
                    std::thread::sleep(Duration::from_millis(100));
                }
                leader
            })
            .expect("the group's stream has a leader within 30 s");
        eprintln!("step: killing NATS node n{victim}, the group's stream leader");
        nats.kill(victim);
    });
}

/// The NATS node leading the group's stream, as NATS node `i` reports it
/// (`/jsz`), if it answers and knows one.
fn stream_leader(nats: &NatsCluster, i: usize) -> Option<usize> {
    let body = nats.monitor(i, "/jsz?accounts=true&streams=true")?;
    let jsz: serde_json::Value = serde_json::from_str(&body).ok()?;
    // The relay names a group's stream `GW_LOG_` and the name in hex.
    let stream = format!("GW_LOG_{}", hex("g"));
    jsz["account_details"]
        .as_array()?
        .iter()
        .flat_map(|a| a["stream_detail"].as_array().into_iter().flatten())
        .find(|s| s["name"] == stream.as_str())
        .and_then(|s| s["cluster"]["leader"].as_str())
        .and_then(|name| nats.index(name))
}

/// `s` in lowercase hex.
fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

/// Three relay nodes, node `i` on the NATS servers `nats_urls[i %
/// nats_urls.len()]` (comma-separated) with `replicas`, a watcher on each,
/// two senders, a lock held through the first node; then `kill -9` of the
/// first node, and `then` (more chaos) right after it.
fn chaos(nats_urls: &[String], replicas: &str, then: impl FnOnce()) {
    let mut relays: Vec<Relay> = (0..3)
        .map(|i| {
            Relay::start(&[
                "--nats",
                &nats_urls[i % nats_urls.len()],
                "--nats-replicas",
                replicas,
                "--nats-lock-lease",
                "2s",
            ])
        })
        .collect();
    let addrs: Vec<String> = relays.iter().map(|r| r.addr.clone()).collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(120), async {
            let (admin, _) = RelayClient::connect(addrs[0].as_str(), ClientOptions::new("admin"))
                .await
                .expect("connect");
            admin
                .create_group("g", "chaos", 4, Bytes::new())
                .await
                .expect("create");
            // A watcher on every node (each fails over to the next ones).
            let mut watchers = Vec::new();
            for i in 0..3 {
                let (w, e) = failover_client(&from(&addrs, i), &format!("watcher{i}")).await;
                join_when_found(&w, "g", Role::Observer).await;
                watchers.push((w, e, Watched::default()));
            }
            // A lock held through the node that will die.
            // Events are dropped unread (`_`): held unread, a full event
            // channel would stop the client from reading its replies.
            let (holder, _) = RelayClient::connect(addrs[0].as_str(), ClientOptions::new("holder"))
                .await
                .expect("connect");
            join_when_found(&holder, "g", Role::Principal).await;
            assert!(holder.try_lock("g", "pen").await.expect("try"));
            let (taker, _) = RelayClient::connect(addrs[1].as_str(), ClientOptions::new("taker"))
                .await
                .expect("connect");
            join_when_found(&taker, "g", Role::Principal).await;
            assert!(!taker.try_lock("g", "pen").await.expect("try"), "held");
            // Two senders, on the nodes that survive, under load.
            let (stop, stopped) = watch::channel(false);
            let mut senders = Vec::new();
            for (i, tag) in [(1, "a"), (2, "b")] {
                let (s, _) = failover_client(&from(&addrs, i), tag).await;
                join_when_found(&s, "g", Role::Principal).await;
                senders.push(keep_sending(&s, "g", tag, stopped.clone()));
            }
            for (_, e, seen) in &mut watchers {
                seen.until(e, |w| w.updates.len() >= 30).await;
            }

            relays[0].kill();
            then();

            // Every watcher goes on receiving after the chaos.
            for (_, e, seen) in &mut watchers {
                let before = seen.updates.len();
                seen.until(e, |w| w.updates.len() >= before + 30).await;
            }
            // The lock comes free once its lease (2 s) runs out.
            let mut tries = 0;
            while !taker.try_lock("g", "pen").await.expect("try") {
                tries += 1;
                assert!(tries < 300, "the dead node's lock still held after 30 s");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            stop.send(true).expect("senders run");
            let mut sent = Sent::default();
            for s in senders {
                let s = s.await.expect("sender");
                sent.acked.extend(s.acked);
                sent.interrupted.extend(s.interrupted);
            }
            sent.acked.sort();
            for (i, (_, e, seen)) in watchers.iter_mut().enumerate() {
                seen.got_every_ack_without_resync(e, &sent, i).await;
                if i == 0 {
                    assert_eq!(seen.reconnects.len(), 1, "watcher 0 failed over once");
                }
            }
        })
        .await
        .expect("the chaos test finishes in time");
    });
}
