//! Shared by the relay's integration tests: a relay on free loopback
//! ports, clients, and the one bound on every wait.
#![allow(
    dead_code,
    reason = "each test binary uses its own part of this module"
)]

use std::time::Duration;

use bytes::Bytes;
use groupwire_relay::frame::{self, ActivityMode, Frame, Role};
use groupwire_relay::{ClientEvent, ClientOptions, RelayClient, RelayHandle, ServerConfig};
use tokio::sync::mpsc;

/// The bound on every test's waits: generous, so a loaded machine passes
/// where an idle one does; nothing asserts how fast the machine is.
pub(crate) const LIMIT: Duration = Duration::from_secs(30);

/// Runs a test's body, bounded by [`LIMIT`].
pub(crate) async fn in_time<T>(body: impl Future<Output = T>) -> T {
    tokio::time::timeout(LIMIT, body).await.expect("in time")
}

/// A relay on free loopback ports (TCP and WebSocket), configured by `f`.
pub(crate) async fn relay(f: impl FnOnce(&mut ServerConfig)) -> RelayHandle {
    let mut cfg = ServerConfig::new("127.0.0.1:0".parse().expect("addr"));
    cfg.ws = Some("127.0.0.1:0".parse().expect("addr"));
    f(&mut cfg);
    groupwire_relay::server::start(cfg)
        .await
        .expect("relay starts")
}

/// A TCP client of `r` named `name`.
pub(crate) async fn client(
    r: &RelayHandle,
    name: &str,
) -> (RelayClient, mpsc::Receiver<ClientEvent>) {
    RelayClient::connect(r.local_addr(), ClientOptions::new(name))
        .await
        .expect("connect")
}

/// `c` joins `group` in `role`, active, watching its membership if `watch`.
pub(crate) async fn join(c: &RelayClient, group: &str, role: Role, watch: bool) {
    c.join(group, role, ActivityMode::Active, watch)
        .await
        .expect("join");
}

/// `c` creates `group` (type `t`, priority 4, empty state) and joins it as
/// a principal, watching its membership if `watch`.
pub(crate) async fn open_group(c: &RelayClient, group: &str, watch: bool) {
    c.create_group(group, "t", 4, Bytes::new())
        .await
        .expect("create");
    join(c, group, Role::Principal, watch).await;
}

/// A raw client's Hello (request 1), as bytes for the socket.
pub(crate) fn hello(name: &str) -> Bytes {
    frame::encode(
        1,
        &Frame::Hello {
            max_version: 1,
            window: 0,
            token: String::new(),
            name: name.into(),
        },
    )
}

pub(crate) mod failover;
