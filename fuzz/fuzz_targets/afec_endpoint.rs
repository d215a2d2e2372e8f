//! A whole AFEC endpoint fed arbitrary datagrams: never panics, and its
//! memory stays bounded (checked through its own limits).
#![no_main]

use std::net::SocketAddr;

use groupwire_proto::afec::{AfecConfig, AfecEndpoint};
use groupwire_proto::{Instant, Machine};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut e = AfecEndpoint::new(AfecConfig::new(1)).expect("default config is valid");
    let peer: SocketAddr = "10.0.0.2:7400".parse().expect("valid address");
    e.add_peer(peer);
    let mut now = Instant::ZERO;
    // Split the input into datagrams at 0xff bytes; time advances between them.
    for (i, chunk) in data.split(|b| *b == 0xff).enumerate() {
        now = Instant::from_millis(i as u64 * 7);
        e.handle_datagram(now, peer, chunk);
        while e.poll_transmit(now).is_some() {}
        while e.poll_event().is_some() {}
        e.handle_timeout(now);
    }
    while e.poll_transmit(now).is_some() {}
});
