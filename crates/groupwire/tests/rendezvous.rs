//! Two sessions that know only a relay and a group meet through it
//! (`groupwire::rendezvous`), on loopback with an in-process relay. What
//! is asserted holds on a loaded machine: who meets whom, and that the
//! session they get carries messages; the waits are generous bounds.

use std::time::Duration;

use groupwire::rendezvous::{self, RendezvousError, RendezvousOptions};
use groupwire::{Event, Qos, Session};
use groupwire_relay::{ClientOptions, RelayHandle, ServerConfig, StorageConfig};

const LIMIT: Duration = Duration::from_secs(60);

async fn relay() -> RelayHandle {
    let mut cfg = ServerConfig::new("127.0.0.1:0".parse().unwrap());
    cfg.storage = StorageConfig::Memory;
    groupwire_relay::server::start(cfg).await.unwrap()
}

fn opts(name: &str) -> RendezvousOptions {
    RendezvousOptions::new()
        .client(ClientOptions::new(name))
        .timeout(LIMIT)
}

/// Both sides meet at once; each gets the other's session.
async fn meet_pair(url: &str, group: &str) -> (Session, Session, groupwire::Peer, groupwire::Peer) {
    let a = Session::bind("127.0.0.1:0").await.unwrap();
    let b = Session::bind("127.0.0.1:0").await.unwrap();
    let (pa, pb) = tokio::join!(
        rendezvous::meet(&a, url, group, opts("a")),
        rendezvous::meet(&b, url, group, opts("b")),
    );
    let (pa, pb) = (pa.unwrap(), pb.unwrap());
    assert_eq!(pa.addr(), b.local_addr(), "a met b");
    assert_eq!(pb.addr(), a.local_addr(), "b met a");
    (a, b, pa, pb)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sessions_meet_in_a_group_and_talk_and_the_group_serves_the_next_pair() {
    let relay = relay().await;
    let url = format!("tcp://{}", relay.local_addr());
    let (_a, b, pa, _pb) = meet_pair(&url, "room").await;
    let edits = pa.channel("edits", Qos::reliable_ordered()).unwrap();
    edits.send(b"hello").unwrap();
    let got = tokio::time::timeout(LIMIT, async {
        while let Some(ev) = b.next_event().await {
            if let Event::Message { payload, .. } = ev {
                return payload;
            }
        }
        panic!("b's session ended");
    })
    .await
    .expect("the message arrives");
    assert_eq!(&got[..], b"hello");
    // The first pair's offers stay in the group's log, from members gone:
    // a second pair meets each other, not the first.
    let (_c, _d, _pc, _pd) = meet_pair(&url, "room").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alone_in_the_group_it_times_out_and_an_unspecified_address_is_refused() {
    let relay = relay().await;
    let url = format!("tcp://{}", relay.local_addr());
    let a = Session::bind("127.0.0.1:0").await.unwrap();
    let r = rendezvous::meet(
        &a,
        &url,
        "empty",
        opts("a").timeout(Duration::from_millis(300)),
    )
    .await;
    assert!(matches!(r, Err(RendezvousError::Timeout { .. })), "{r:?}");
    let any = Session::bind("0.0.0.0:0").await.unwrap();
    let r = rendezvous::meet(&any, &url, "g", opts("x")).await;
    assert!(matches!(r, Err(RendezvousError::Unreachable(_))), "{r:?}");
    // With an address a peer can use, it goes on.
    let at = std::net::SocketAddr::from(([127, 0, 0, 1], any.local_addr().port()));
    let b = Session::bind("127.0.0.1:0").await.unwrap();
    let (pa, pb) = tokio::join!(
        rendezvous::meet(&any, &url, "g", opts("x").advertise(at)),
        rendezvous::meet(&b, &url, "g", opts("b")),
    );
    assert_eq!(pb.unwrap().addr(), at);
    assert_eq!(pa.unwrap().addr(), b.local_addr());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_that_is_not_there_is_a_relay_error() {
    let gone = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("tcp://{}", gone.local_addr().unwrap());
    drop(gone);
    let a = Session::bind("127.0.0.1:0").await.unwrap();
    let r = rendezvous::meet(&a, &url, "g", opts("a")).await;
    assert!(matches!(r, Err(RendezvousError::Relay(_))), "{r:?}");
}
