//! A block-FEC endpoint fed hostile datagrams (each fuzz input is split
//! into datagrams at 0xFF 0xFE markers) never panics, and its memory stays
//! within the configured block cap.
#![no_main]

use std::net::SocketAddr;
use std::time::Duration;

use groupwire_proto::block::{BlockEndpoint, BlockReceiver, BlockSender, ReceiverConfig, SenderConfig};
use groupwire_proto::{Instant, Machine};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let peer: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let rx = ReceiverConfig { max_blocks: 8, ..ReceiverConfig::default() };
    let mut ep = BlockEndpoint::new(
        BlockSender::new(SenderConfig::new(peer, 4)),
        BlockReceiver::new(rx),
    );
    let mut now = Instant::ZERO;
    for d in data.split(|&b| b == 0xFF).filter(|d| !d.is_empty()) {
        ep.handle_datagram(now, peer, d);
        now += Duration::from_millis(3);
        ep.handle_timeout(now);
        while ep.poll_transmit(now).is_some() {}
        while ep.poll_event().is_some() {}
        assert!(ep.receiver.blocks_held() <= 8);
    }
});
