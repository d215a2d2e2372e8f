//! Many relay nodes on one NATS JetStream (issue 17): a real nats-server
//! on a loopback port, relay nodes in this process, clients on different
//! nodes. Every wait is bounded by `LIMIT`; nothing asserts speed.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::failover::{Sent, Watched, failover_client, keep_sending, send_numbered};
use common::{LIMIT, client, open_group};
use groupwire_relay::frame::{ActivityMode, ErrorCode, Role};
use groupwire_relay::storage::{NatsConfig, Update};
use groupwire_relay::{ClientEvent, JoinInfo, RelayClient, RelayHandle, StorageConfig};
use tokio::sync::{mpsc, watch};

#[path = "../src/storage/test_nats.rs"]
mod test_nats;

use test_nats::{NatsCluster, NatsServer};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

/// A relay node on `nats`.
async fn node(nats: &NatsServer) -> RelayHandle {
    let url = nats.url.clone();
    common::relay(move |c| c.storage = StorageConfig::Nats(NatsConfig::new(vec![url]))).await
}

/// Joins `group` as a principal once this client's node knows it (a group
/// created through another node reaches this one a moment later).
async fn join_when_found(c: &RelayClient, group: &str) -> JoinInfo {
    for _ in 0..(LIMIT.as_millis() / 20) {
        match c
            .join(group, Role::Principal, ActivityMode::Active, false)
            .await
        {
            Ok(info) => return info,
            Err(e) if e.code() == Some(ErrorCode::NO_SUCH_GROUP) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("join {group}: {e}"),
        }
    }
    panic!("{group} did not reach this node within {LIMIT:?}");
}

/// The next `n` updates delivered on `events`.
async fn deliveries(events: &mut mpsc::Receiver<ClientEvent>, n: usize) -> Vec<Update> {
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        match tokio::time::timeout(LIMIT, events.recv()).await {
            Ok(Some(ClientEvent::Deliver(u))) => out.push(u),
            Ok(Some(ClientEvent::Closed(e))) => panic!("closed: {e:?}"),
            Ok(Some(_)) => {}
            Ok(None) => panic!("events ended after {} of {n}", out.len()),
            Err(_) => panic!("{} of {n} deliveries within {LIMIT:?}", out.len()),
        }
    }
    out
}

/// Sends `n` updates `{tag}{i}` one after another; returns their sequences.
fn sender(c: &RelayClient, tag: &'static str, n: usize) -> tokio::task::JoinHandle<Vec<u64>> {
    let c = c.clone();
    tokio::spawn(async move {
        let mut seqs = Vec::with_capacity(n);
        for i in 0..n {
            let payload = Bytes::from(format!("{tag}{i}"));
            seqs.push(c.send("g", 1, payload).await.expect("send"));
        }
        seqs
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_on_three_nodes_see_one_total_order() {
    const N: usize = 60;
    let nats = NatsServer::start();
    let nodes = [node(&nats).await, node(&nats).await, node(&nats).await];
    let (a, mut ea) = client(&nodes[0], "a").await;
    let (b, mut eb) = client(&nodes[1], "b").await;
    let (c, mut ec) = client(&nodes[2], "c").await;
    open_group(&a, "g", false).await;
    join_when_found(&b, "g").await;
    join_when_found(&c, "g").await;
    let ids = [a.client_id(), b.client_id(), c.client_id()];
    assert!(
        ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2],
        "client ids are unique across nodes: {ids:?}"
    );

    // Three senders on three nodes at once: the nodes race for sequences.
    let tasks = [sender(&a, "a", N), sender(&b, "b", N), sender(&c, "c", N)];
    let mut sent = Vec::new();
    for t in tasks {
        sent.push(t.await.expect("sender"));
    }
    let (da, db, dc) = (
        deliveries(&mut ea, 3 * N).await,
        deliveries(&mut eb, 3 * N).await,
        deliveries(&mut ec, 3 * N).await,
    );
    assert_eq!(da, db, "nodes 1 and 2 delivered different orders");
    assert_eq!(da, dc, "nodes 1 and 3 delivered different orders");
    let seqs: Vec<u64> = da.iter().map(|u| u.seq).collect();
    assert_eq!(
        seqs,
        (1..=3 * N as u64).collect::<Vec<_>>(),
        "no gap, no duplicate"
    );
    for (k, tag) in ["a", "b", "c"].iter().enumerate() {
        // Each sender's updates in its order, under the numbers its Sent said.
        let mine: Vec<&Update> = da.iter().filter(|u| u.sender == ids[k]).collect();
        assert_eq!(mine.len(), N);
        for (i, u) in mine.iter().enumerate() {
            assert_eq!(u.payload, Bytes::from(format!("{tag}{i}")));
            assert_eq!(u.seq, sent[k][i], "{tag}{i}: Sent and Deliver agree");
        }
    }
    for n in nodes {
        n.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_joiners_on_other_nodes_get_state_written_through_the_first() {
    let nats = NatsServer::start();
    let first = node(&nats).await;
    let running = node(&nats).await;
    let (a, _ea) = client(&first, "a").await;
    a.create_group("g", "doc", 4, Bytes::from_static(b"s0"))
        .await
        .expect("create");
    common::join(&a, "g", Role::Principal, false).await;
    for i in 1..=20 {
        let seq = a.send("g", 1, Bytes::from(format!("u{i}"))).await;
        assert_eq!(seq.expect("send"), i);
    }
    a.checkpoint("g", 10, Bytes::from_static(b"s10"))
        .await
        .expect("checkpoint");
    for i in 21..=25 {
        let seq = a.send("g", 1, Bytes::from(format!("u{i}"))).await;
        assert_eq!(seq.expect("send"), i);
    }
    // One node that saw the group created while it ran, one started after.
    let started_after = node(&nats).await;
    let mut head = 25;
    for (k, n) in [&running, &started_after].into_iter().enumerate() {
        let (j, mut ej) = client(n, &format!("joiner{k}")).await;
        let info = join_when_found(&j, "g").await;
        assert_eq!((info.checkpoint_seq, &info.state[..]), (10, &b"s10"[..]));
        assert_eq!(info.group_type, "doc");
        let got = deliveries(&mut ej, head as usize - 10).await;
        let seqs: Vec<u64> = got.iter().map(|u| u.seq).collect();
        assert_eq!(
            seqs,
            (11..=head).collect::<Vec<_>>(),
            "node {k}: no gap, no duplicate"
        );
        assert!(got[..15].iter().all(|u| u.payload == format!("u{}", u.seq)));
        // Live from here: an update through the first node reaches it.
        let seq = a
            .send("g", 1, Bytes::from_static(b"live"))
            .await
            .expect("send");
        head += 1;
        assert_eq!(seq, head);
        let live = deliveries(&mut ej, 1).await;
        assert_eq!((live[0].seq, &live[0].payload[..]), (seq, &b"live"[..]));
    }
    for n in [first, running, started_after] {
        n.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_deleted_through_one_node_is_gone_on_the_others() {
    let nats = NatsServer::start();
    let (first, second) = (node(&nats).await, node(&nats).await);
    let (a, _ea) = client(&first, "a").await;
    let (b, mut eb) = client(&second, "b").await;
    open_group(&a, "g", false).await;
    join_when_found(&b, "g").await;
    a.delete_group("g").await.expect("delete");
    loop {
        match tokio::time::timeout(LIMIT, eb.recv()).await {
            Ok(Some(ClientEvent::GroupDeleted(g))) => {
                assert_eq!(g, "g");
                break;
            }
            Ok(Some(_)) => {}
            other => panic!("no GroupDeleted on the other node: {other:?}"),
        }
    }
    let err = b.send("g", 1, Bytes::new()).await.expect_err("gone");
    assert_eq!(err.code(), Some(ErrorCode::NOT_MEMBER));
    first.shutdown().await;
    second.shutdown().await;
}

/// The priority of the one queue of `group` on `node` (its one member
/// there), once it is `want`; panics after `LIMIT` with the last seen.
async fn queue_priority_becomes(node: &RelayHandle, group: &str, want: u16) {
    let mut seen = None;
    for _ in 0..(LIMIT.as_millis() / 20) {
        seen = node
            .queue_depths()
            .await
            .into_iter()
            .find(|d| d.group == group)
            .map(|d| d.priority);
        if seen == Some(want) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{group}'s queue priority {seen:?}, not {want}, after {LIMIT:?}");
}

/// Issue 17: a `SetPriority` through one node is in effect on the others
/// (their members' queues are served at the group's new priority), and
/// the latest change wins whichever node it went through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_priority_set_through_one_node_is_in_effect_on_the_others() {
    let nats = NatsServer::start();
    let (first, second) = (node(&nats).await, node(&nats).await);
    let (a, _ea) = client(&first, "a").await;
    let (b, _eb) = client(&second, "b").await;
    open_group(&a, "g", false).await; // priority 4
    join_when_found(&b, "g").await;
    // Both principals, active: one queue priority, the group's plus the role's.
    let at4 = second
        .queue_depths()
        .await
        .into_iter()
        .find(|d| d.group == "g")
        .expect("b's queue")
        .priority;
    queue_priority_becomes(&first, "g", at4).await;

    a.set_priority("g", 6).await.expect("set through the first");
    queue_priority_becomes(&second, "g", at4 + 2).await;
    queue_priority_becomes(&first, "g", at4 + 2).await;
    // Back through the second: the first takes it (its own earlier write
    // coming back from the store does not undo it).
    b.set_priority("g", 2)
        .await
        .expect("set through the second");
    queue_priority_becomes(&first, "g", at4 - 2).await;
    queue_priority_becomes(&second, "g", at4 - 2).await;
    // A node started now loads the latest.
    let third = node(&nats).await;
    let (c, _ec) = client(&third, "c").await;
    join_when_found(&c, "g").await;
    queue_priority_becomes(&third, "g", at4 - 2).await;
    for n in [first, second, third] {
        n.shutdown().await;
    }
}

/// The next membership notice on `events` (other events skipped).
async fn next_notice(
    events: &mut mpsc::Receiver<ClientEvent>,
) -> groupwire_relay::frame::MembershipNotice {
    loop {
        match tokio::time::timeout(LIMIT, events.recv()).await {
            Ok(Some(ClientEvent::Membership(n))) => return n,
            Ok(Some(ClientEvent::Closed(e))) => panic!("closed: {e:?}"),
            Ok(Some(_)) => {}
            Ok(None) => panic!("events ended"),
            Err(_) => panic!("no membership notice within {LIMIT:?}"),
        }
    }
}

/// The next membership notice about `client` on `events`, skipping
/// notices about others (a member announced late: a watcher that joined
/// before that member's join reached its node is told of it afterwards).
async fn next_notice_about(
    events: &mut mpsc::Receiver<ClientEvent>,
    client: u64,
) -> groupwire_relay::frame::MembershipNotice {
    loop {
        let n = next_notice(events).await;
        if n.client == client {
            return n;
        }
    }
}

/// Issue 17: membership is the cluster's. A joiner on one node is told
/// of the members on the others, a watcher is told of their joins,
/// changes and leaves, and the members of a node that stops are gone
/// from the others, as disconnected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_on_other_nodes_are_listed_and_announced() {
    use groupwire_relay::frame::MembershipChange;
    let nats = NatsServer::start();
    let (first, second) = (node(&nats).await, node(&nats).await);
    let (a, _ea) = client(&first, "a").await;
    open_group(&a, "g", false).await;
    // A watcher on the second node: a, on the first, is listed. (The
    // first node shares a's join a moment after it answers it: wait.)
    let (w, mut ew) = client(&second, "w").await;
    let mut info = None;
    for _ in 0..(LIMIT.as_millis() / 50) {
        let joined = w
            .join("g", Role::Observer, ActivityMode::Active, true)
            .await;
        match joined {
            Ok(i) if i.members.iter().any(|m| m.client == a.client_id()) => {
                info = Some(i);
                break;
            }
            Ok(_) => w.leave("g").await.expect("leave"),
            Err(e) if e.code() == Some(ErrorCode::NO_SUCH_GROUP) => {}
            Err(e) => panic!("join: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let info = info.expect("a, on the other node, listed to a joiner within LIMIT");
    let listed: Vec<(&str, Role)> = info
        .members
        .iter()
        .map(|m| (m.name.as_str(), m.role))
        .collect();
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert!(listed.contains(&("a", Role::Principal)), "{listed:?}");
    assert!(listed.contains(&("w", Role::Observer)), "{listed:?}");

    // x joins, changes mode and leaves through the first node.
    let (x, _ex) = client(&first, "x").await;
    common::join(&x, "g", Role::Principal, false).await;
    // a's join may still be announced first: w's earlier attempts joined
    // before it reached the second node.
    let n = next_notice_about(&mut ew, x.client_id()).await;
    assert_eq!(
        (n.client, n.name.as_str(), n.change, n.role),
        (
            x.client_id(),
            "x",
            MembershipChange::Joined,
            Role::Principal
        )
    );
    x.change_mode("g", ActivityMode::Passive)
        .await
        .expect("mode");
    let n = next_notice_about(&mut ew, x.client_id()).await;
    assert_eq!(
        (n.client, n.change, n.mode),
        (
            x.client_id(),
            MembershipChange::ModeChanged,
            ActivityMode::Passive
        )
    );
    x.leave("g").await.expect("leave");
    let n = next_notice_about(&mut ew, x.client_id()).await;
    assert_eq!(
        (n.client, n.change),
        (x.client_id(), MembershipChange::Left)
    );
    // A member of the second node is announced on the first.
    let (b, _eb) = client(&second, "b").await;
    let (v, mut ev) = client(&first, "v").await;
    common::join(&v, "g", Role::Observer, true).await;
    common::join(&b, "g", Role::Principal, false).await;
    let n = next_notice_about(&mut ev, b.client_id()).await;
    assert_eq!((n.name.as_str(), n.change), ("b", MembershipChange::Joined));

    // The first node stops: its members (a, v) leave the second's list.
    drop((a, v, x));
    first.shutdown().await;
    let mut gone = Vec::new();
    while gone.len() < 2 {
        let n = next_notice(&mut ew).await;
        if n.change == MembershipChange::Joined {
            continue; // v's and b's joins, announced before
        }
        assert!(
            matches!(
                n.change,
                MembershipChange::Disconnected | MembershipChange::Left
            ),
            "{n:?}"
        );
        gone.push(n.name);
    }
    gone.sort();
    assert_eq!(gone, ["a", "v"]);
    let (late, _el) = client(&second, "late").await;
    let info = late
        .join("g", Role::Observer, ActivityMode::Active, false)
        .await
        .expect("join");
    let mut names: Vec<&str> = info.members.iter().map(|m| m.name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["b", "late", "w"]);
    second.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_exclude_across_nodes() {
    let nats = NatsServer::start();
    let (first, second) = (node(&nats).await, node(&nats).await);
    let (a, _ea) = client(&first, "a").await;
    let (b, _eb) = client(&second, "b").await;
    open_group(&a, "g", false).await;
    join_when_found(&b, "g").await;

    assert!(a.try_lock("g", "pen").await.expect("try"), "free at first");
    assert!(
        !b.try_lock("g", "pen").await.expect("try"),
        "held through node 1"
    );
    // A waiter on node 2 is granted only once node 1's holder releases.
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move { b.lock("g", "pen").await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "granted while held elsewhere");
    a.unlock("g", "pen").await.expect("unlock");
    tokio::time::timeout(LIMIT, waiter)
        .await
        .expect("granted after the release")
        .expect("task")
        .expect("lock");
    assert!(!a.try_lock("g", "pen").await.expect("try"), "now node 2's");
    // A holder that disconnects releases it for the other node too.
    let waiter = {
        let a = a.clone();
        tokio::spawn(async move { a.lock("g", "pen").await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "granted while held elsewhere");
    drop((b, _eb));
    tokio::time::timeout(LIMIT, waiter)
        .await
        .expect("granted after the holder left")
        .expect("task")
        .expect("lock");
    first.shutdown().await;
    second.shutdown().await;
}

#[tokio::test]
async fn a_relay_on_an_unreachable_nats_fails_to_start() {
    let mut cfg = groupwire_relay::ServerConfig::new("127.0.0.1:0".parse().expect("addr"));
    let mut nats = NatsConfig::new(vec![format!("nats://127.0.0.1:{}", free_port())]);
    nats.connect_timeout = Duration::from_secs(2);
    cfg.storage = StorageConfig::Nats(nats);
    let err = groupwire_relay::server::start(cfg)
        .await
        .expect_err("nothing listens there");
    assert!(err.to_string().contains("connecting to NATS"), "{err}");
}

/// A relay node on `nats` listening on `addr`.
async fn node_at(nats: &NatsServer, addr: std::net::SocketAddr) -> RelayHandle {
    let url = nats.url.clone();
    common::relay(move |c| {
        c.storage = StorageConfig::Nats(NatsConfig::new(vec![url]));
        c.listen = addr;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_and_a_sender_fail_over_to_another_node() {
    let nats = NatsServer::start();
    let (first, second) = (node(&nats).await, node(&nats).await);
    let urls = [first.local_addr(), second.local_addr()].map(|a| a.to_string());
    // Both on the first node; the second is where they go.
    let (s, _) = failover_client(&urls, "sender").await;
    let (w, mut we) = failover_client(&urls, "watcher").await;
    open_group(&s, "g", false).await;
    common::join(&w, "g", Role::Observer, false).await;
    let (stop, stopped) = watch::channel(false);
    let sender = keep_sending(&s, "g", "u", stopped);

    let mut seen = Watched::default();
    seen.until(&mut we, |w| w.updates.len() >= 20).await;
    // The second node must know the group (a group created a moment ago
    // through another node may not have reached it yet: a re-join there
    // fails, see `ClientEvent::RejoinFailed`).
    join_when_found(&client(&second, "probe").await.0, "g").await;
    first.shutdown().await;
    seen.through_failover(&mut we, stop, sender).await;
    assert_eq!(seen.reconnects, [urls[1].clone()], "to the second node");
    assert!(seen.resyncs.is_empty(), "the log had everything");
    second.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_failing_over_past_a_compacted_log_gets_a_resync() {
    let nats = NatsServer::start();
    let (first, second) = (node(&nats).await, node(&nats).await);
    // The watcher's second address has no node yet: it cannot fail over
    // until the test starts one there.
    let later = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port");
    let urls = [first.local_addr(), later].map(|a| a.to_string());
    let (w, mut we) = failover_client(&urls, "watcher").await;
    let (s, _se) = client(&second, "sender").await;
    s.create_group("g", "t", 4, Bytes::from_static(b"s0"))
        .await
        .expect("create");
    common::join(&s, "g", Role::Principal, false).await;
    join_when_found(&w, "g").await;
    send_numbered(&s, "g", 1..=5).await;
    let mut seen = Watched::default();
    seen.until(&mut we, |w| w.last() == 5).await;
    first.shutdown().await;
    send_numbered(&s, "g", 6..=10).await;
    s.checkpoint("g", 10, Bytes::from_static(b"s10"))
        .await
        .expect("checkpoint");
    let third = node_at(&nats, later).await;
    seen.until(&mut we, |w| !w.resyncs.is_empty()).await;
    assert_eq!(seen.resyncs, [(5, 10)], "updates 6 to 10 are in the state");
    assert_eq!(seen.reconnects, [urls[1].clone()]);
    let seq = s.send("g", 1, Bytes::from_static(b"u11")).await;
    assert_eq!(seq.expect("send"), 11);
    seen.until(&mut we, |w| w.last() == 11).await;
    let seqs: Vec<u64> = seen.updates.iter().map(|u| u.seq).collect();
    assert_eq!(seqs, [1, 2, 3, 4, 5, 11]);
    second.shutdown().await;
    third.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_node_renews_the_lease_of_a_lock_it_holds() {
    let nats = NatsServer::start();
    let lease = Duration::from_secs(2);
    let on = |nats: &NatsServer| {
        let cfg = NatsConfig::new(vec![nats.url.clone()]).lock_lease(lease);
        common::relay(move |c| c.storage = StorageConfig::Nats(cfg))
    };
    let (first, second) = (on(&nats).await, on(&nats).await);
    let (a, _ea) = client(&first, "a").await;
    let (b, _eb) = client(&second, "b").await;
    open_group(&a, "g", false).await;
    join_when_found(&b, "g").await;
    assert!(a.try_lock("g", "pen").await.expect("try"));
    // Two and a half leases later, still held: its node renewed it.
    for _ in 0..5 {
        tokio::time::sleep(lease / 2).await;
        assert!(
            !b.try_lock("g", "pen").await.expect("try"),
            "a live holder's lock expired"
        );
    }
    a.unlock("g", "pen").await.expect("unlock");
    tokio::time::timeout(LIMIT, b.lock("g", "pen"))
        .await
        .expect("granted after the release")
        .expect("lock");
    first.shutdown().await;
    second.shutdown().await;
}

/// A relay on `nats` with NATS settings `nats_cfg` and the rest set by
/// `f`, started or refused.
async fn try_node(
    nats_cfg: NatsConfig,
    f: impl FnOnce(&mut groupwire_relay::ServerConfig),
) -> std::io::Result<RelayHandle> {
    let mut cfg = groupwire_relay::ServerConfig::new("127.0.0.1:0".parse().expect("addr"));
    cfg.storage = StorageConfig::Nats(nats_cfg);
    f(&mut cfg);
    groupwire_relay::server::start(cfg).await
}

/// Issue 17, "Bad input": settings that are each node's own (listen
/// addresses, the scheduler, shedding, state transfer pages, the NATS
/// connect timeout) may differ between the nodes of one cluster; settings
/// that must agree may be other than the defaults as long as they agree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_that_differ_only_in_their_own_settings_start() {
    let nats = NatsServer::start();
    let shared = || {
        NatsConfig::new(vec![nats.url.clone()])
            .lock_lease(Duration::from_secs(7))
            .replicas(1)
    };
    let first = try_node(shared(), |c| c.core.max_frame = 2 << 20)
        .await
        .expect("the first node starts and stores its settings");
    let mut own = shared();
    own.connect_timeout = Duration::from_secs(9);
    let second = try_node(own, |c| {
        c.core.max_frame = 2 << 20;
        c.ws = Some("127.0.0.1:0".parse().expect("addr"));
        c.fanout_budget = 7;
        c.max_conns_per_ip = 3;
        c.core.sched.equal_priorities = true;
        c.core.sched.aging_timeout = Duration::from_millis(300);
        c.core.shed_observers_above = 5;
        c.core.transfer_page_bytes = 4096;
    })
    .await
    .expect("a node differing only in its own settings starts");
    // They share the store: a group created through one reaches the other.
    let (a, _ea) = client(&first, "a").await;
    let (b, _eb) = client(&second, "b").await;
    open_group(&a, "g", false).await;
    join_when_found(&b, "g").await;
    first.shutdown().await;
    second.shutdown().await;
}

/// Issue 17, "Bad input": a node whose settings differ from those the
/// first node stored is refused, and the error names each differing
/// setting with both values and says how to fix it; the cluster's record
/// is not changed by the refused node, so a node that agrees still starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_shared_settings_differ_is_refused_with_what_differs() {
    let nats = NatsServer::start();
    let url = || NatsConfig::new(vec![nats.url.clone()]);
    let first = try_node(url(), |_| {})
        .await
        .expect("the first node starts");

    let err = try_node(url().replicas(3), |_| {})
        .await
        .expect_err("another replica count is refused");
    let msg = err.to_string();
    for part in [
        "replicas (--nats-replicas): the cluster has 1, this node 3",
        "start this node with --nats-replicas 1;",
        "nats kv del GW_CLUSTER settings",
    ] {
        assert!(msg.contains(part), "{part:?} not in: {msg}");
    }

    let mut keys = groupwire_relay::auth::Keys::new();
    keys.insert("k", b"a secret").expect("key");
    let err = try_node(url().lock_lease(Duration::from_secs(30)), |c| {
        c.core.max_frame = 4 << 20;
        c.core.auth_keys = Some(keys);
    })
    .await
    .expect_err("three differing settings are refused");
    let msg = err.to_string();
    for part in [
        "lock lease (--nats-lock-lease): the cluster has 10s, this node 30s",
        "largest frame (--max-frame): the cluster has 1048576, this node 4194304",
        "client tokens (--auth-secret-file): the cluster has not required, this node required",
        "start this node with --nats-lock-lease 10s, with --max-frame 1048576, without --auth-secret-file;",
    ] {
        assert!(msg.contains(part), "{part:?} not in: {msg}");
    }
    assert!(!msg.contains("replicas"), "replicas agree here: {msg}");

    let third = try_node(url(), |_| {})
        .await
        .expect("a node with the cluster's settings still starts");
    let (a, _ea) = client(&first, "a").await;
    let (c, _ec) = client(&third, "c").await;
    open_group(&a, "g", false).await;
    join_when_found(&c, "g").await;
    first.shutdown().await;
    third.shutdown().await;
}

/// A relay node on the three-node NATS cluster `nats` with three
/// replicas, given every NATS node's URL (node `first`'s first) so its
/// client can fail over to the others.
async fn cluster_node(nats: &NatsCluster, first: usize) -> RelayHandle {
    let cfg = NatsConfig::new(nats.urls_from(first)).replicas(3);
    common::relay(move |c| c.storage = StorageConfig::Nats(cfg)).await
}

/// The stream holding group `g`'s log (`GW_LOG_` and the name in hex).
const G_STREAM: &str = "GW_LOG_67";

/// How many relay nodes are connected to each running NATS node (by the
/// connection name the relay gives its client), from its `/connz`.
fn relay_connections(nats: &NatsCluster) -> Vec<(usize, usize)> {
    (0..3)
        .filter(|&i| nats.is_running(i))
        .filter_map(|i| {
            let body = nats.monitor(i, "/connz?limit=1000")?;
            let connz: serde_json::Value = serde_json::from_str(&body).expect("/connz is JSON");
            let n = connz["connections"].as_array().map_or(0, |c| {
                c.iter().filter(|c| c["name"] == "groupwire-relay").count()
            });
            Some((i, n))
        })
        .collect()
}

/// `g`'s stream as JetStream describes it: the leader's node (if any)
/// and the last sequence. `None` while it cannot answer (no leader yet,
/// this client reconnecting).
async fn g_stream(js: &async_nats::jetstream::Context, nats: &NatsCluster) -> Option<(usize, u64)> {
    let mut stream = js.get_stream(G_STREAM).await.ok()?;
    let info = stream.info().await.ok()?;
    let leader = info.cluster.as_ref()?.leader.as_deref()?;
    Some((nats.index(leader)?, info.state.last_sequence))
}

/// Polls `f` every 100 ms until it gives `Some`, for at most `LIMIT`.
async fn eventually<T, F: std::future::Future<Output = Option<T>>>(
    what: &str,
    mut f: impl FnMut() -> F,
) -> T {
    for _ in 0..(LIMIT.as_millis() / 100) {
        if let Some(t) = f().await {
            return t;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what}: not within {LIMIT:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_updates_survive_kill_9_of_the_nats_node_leading_the_group() {
    // The relays' warnings (lost follows, refused publishes), the
    // storage's retries and re-follows, and the NATS clients' disconnects
    // and reconnects, each line with its relay node's number, in the
    // output of a failed run. That is how a stall after the kill was
    // found: the node that appends nothing heard nothing more of `g`, its
    // client having reconnected and its follow never made again.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(
            "warn,groupwire_relay::storage=debug,async_nats=info",
        ))
        .with_test_writer()
        .try_init();
    let mut nats = NatsCluster::start(3);
    // A bound on the whole, for the waits that have none of their own
    // (requests to a relay): a hang fails, with the cluster's logs kept.
    tokio::time::timeout(
        Duration::from_secs(300),
        kill_the_nats_node_leading_the_group(&mut nats),
    )
    .await
    .expect("the test finishes within 5 min (see the last step it printed)");
}

/// The body of the test above.
async fn kill_the_nats_node_leading_the_group(nats: &mut NatsCluster) {
    let mut nodes = Vec::new();
    for first in 0..3 {
        nodes.push(cluster_node(nats, first).await);
    }
    // A client of the test's own, to ask JetStream where the group's
    // stream leader is (named apart from the relays' connections).
    let admin = async_nats::ConnectOptions::new()
        .name("test")
        .connect(nats.urls_from(0))
        .await
        .expect("connect to NATS");
    let js = async_nats::jetstream::new(admin);

    // The senders' events are dropped unread (`_`): held unread, a full
    // event channel would stop the client from reading its `Sent` replies.
    let (a, _) = client(&nodes[0], "a").await;
    open_group(&a, "g", false).await;
    let (b, _) = client(&nodes[1], "b").await;
    join_when_found(&b, "g").await;
    // A watcher on every relay node.
    let mut watchers = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        let (w, e) = client(n, &format!("watcher{i}")).await;
        join_when_found(&w, "g").await;
        watchers.push((w, e, Watched::default()));
    }
    // Two senders on two relay nodes, racing for sequences.
    let (stop, stopped) = watch::channel(false);
    let senders = [
        keep_sending(&a, "g", "a", stopped.clone()),
        keep_sending(&b, "g", "b", stopped),
    ];
    eprintln!("step: senders started");
    for (_, e, seen) in &mut watchers {
        seen.until(e, |w| w.updates.len() >= 30).await;
    }
    eprintln!("step: every watcher has 30 updates");

    // The NATS node to kill: the group's stream leader, moved first (a
    // leader step-down naming the preferred one, nats-server 2.11+) to a
    // node a relay is connected to, so the kill also cuts relays off.
    let placed = relay_connections(nats);
    assert_eq!(
        placed.iter().map(|(_, n)| n).sum::<usize>(),
        3,
        "each relay node has one NATS connection: {placed:?}"
    );
    let victim = placed
        .iter()
        .find(|(_, n)| *n > 0)
        .map(|(i, _)| *i)
        .expect("some node has a relay");
    eventually("the group's stream leader moved to the victim", || async {
        match g_stream(&js, nats).await {
            Some((leader, _)) if leader == victim => return Some(()),
            _ => {}
        }
        let request =
            serde_json::json!({ "placement": { "preferred": NatsCluster::name(victim) } });
        let _ = js
            .client()
            .request(
                format!("$JS.API.STREAM.LEADER.STEPDOWN.{G_STREAM}"),
                request.to_string().into(),
            )
            .await;
        None
    })
    .await;
    let relays_on_victim = placed.iter().find(|(i, _)| *i == victim).expect("placed").1;
    eprintln!("step: killing n{victim}, the group's stream leader");
    nats.kill(victim);

    // The group gets a new leader, and the relays that were connected to
    // the dead node reconnect to the others.
    let (leader, at_kill) = eventually("a new leader of the group's stream", || async {
        g_stream(&js, nats).await.filter(|(l, _)| *l != victim)
    })
    .await;
    eventually(
        "every relay node reconnected to a live NATS node",
        || async {
            let placed = relay_connections(nats);
            (placed.iter().map(|(_, n)| n).sum::<usize>() == 3).then_some(())
        },
    )
    .await;
    eprintln!("step: new leader n{leader} at #{at_kill}, every relay reconnected");
    // Every watcher goes on receiving updates appended after the kill:
    // the one on the node that appends nothing hears of them only through
    // its follow of the group's stream, which must survive the NATS
    // client's reconnect. While they are read, the relays' counters every
    // 10 s (for a stall: which node delivers nothing, whose queue grows).
    let counters = async {
        loop {
            tokio::time::sleep(Duration::from_secs(10)).await;
            for (i, n) in nodes.iter().enumerate() {
                let s = n.stats().await;
                eprintln!(
                    "node {i}: {} updates, {} deliveries, {} frames queued",
                    s.updates, s.deliveries, s.sched.queued_frames
                );
            }
        }
    };
    let watched = async {
        for (i, (_, e, seen)) in watchers.iter_mut().enumerate() {
            seen.until(e, |w| w.last() >= at_kill + 30).await;
            eprintln!("step: watcher {i} got 30 updates past the kill");
        }
    };
    tokio::select! {
        () = watched => {}
        () = counters => {}
    }
    eprintln!("step: 30 updates past the kill on every watcher");
    stop.send(true).expect("senders run");
    let mut sent = Sent::default();
    for s in senders {
        let s = tokio::time::timeout(LIMIT, s)
            .await
            .expect("a sender's last send answered")
            .expect("sender");
        sent.acked.extend(s.acked);
        sent.interrupted.extend(s.interrupted);
    }
    sent.acked.sort();
    assert!(sent.interrupted.is_empty(), "relay nodes never went away");
    let last = sent.acked.last().expect("acked").0;
    assert!(
        last > at_kill,
        "sends acknowledged after the kill (last {last}, {at_kill} stored at the kill)"
    );
    // The group keeps working through every relay node: a new client on
    // each sends once (not the watchers: their unread events may be
    // full, and a client with a full event channel reads no replies).
    // Then again once the killed NATS node is back (restarted on its
    // store, catching up as a replica).
    let mut late = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        let (c, _) = client(n, &format!("late{i}")).await;
        join_when_found(&c, "g").await;
        late.push(c);
    }
    for round in ["after the kill", "after the restart"] {
        if round == "after the restart" {
            eprintln!("step: restarting n{victim}");
            nats.restart(victim);
        }
        for (i, c) in late.iter().enumerate() {
            let payload = Bytes::from(format!("late{i} {round}"));
            let seq = c.send("g", 1, payload.clone()).await;
            sent.acked.push((
                seq.unwrap_or_else(|e| panic!("a send {round}: {e}")),
                payload,
            ));
        }
        for (i, (_, e, seen)) in watchers.iter_mut().enumerate() {
            seen.got_every_ack_without_resync(e, &sent, i).await;
        }
    }
    eprintln!(
        "killed NATS node n{victim} (the group's stream leader, {relays_on_victim} relay(s) on it) \
         at #{at_kill}; new leader n{leader}; {} updates acknowledged",
        sent.acked.len()
    );
    for n in nodes {
        n.shutdown().await;
    }
}
