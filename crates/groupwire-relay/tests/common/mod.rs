//! Shared by the relay's integration tests: a relay on free loopback
//! ports, clients, and the one bound on every wait.
#![allow(
    dead_code,
    reason = "each test binary uses its own part of this module"
)]

use std::time::Duration;

use groupwire_relay::{ClientEvent, ClientOptions, RelayClient, RelayHandle, ServerConfig};
use tokio::sync::mpsc;

/// The bound on every test's waits: generous, so a loaded machine passes
/// where an idle one does; nothing asserts how fast the machine is.
pub(crate) const LIMIT: Duration = Duration::from_secs(30);

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
