//! The tunnel's endpoint driven end to end by hostile datagrams.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use groupwire_proto::tunnel::seal::Sealer;
use groupwire_proto::tunnel::{Cipher, TunnelConfig, TunnelEndpoint, TunnelKey};
use groupwire_proto::{Instant, Machine};

/// The key both sides hold in keyed runs.
pub const KEY: &[u8] = b"fuzzing tunnel key, 32 bytes....";
/// The endpoint's own session salt; the peer's is [`PEER_SALT`].
const OWN_SALT: u64 = 1;
/// The peer's session salt: [`OP_SEALED`] datagrams are sealed under it.
pub const PEER_SALT: u64 = 2;
/// Where the peer sends from.
pub const PEER: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 7000);
/// A stranger.
const STRANGER: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 6666);

/// Op: the bytes as a datagram from the peer's address.
pub const OP_FROM_PEER: u8 = 0;
/// Op: the bytes as a datagram from a stranger's address.
pub const OP_FROM_STRANGER: u8 = 1;
/// Op: the bytes sealed under the peer's key (keyed runs), from the peer.
pub const OP_SEALED: u8 = 2;
/// Op: the application sends the bytes.
pub const OP_APP: u8 = 3;
/// Op: time passes, the first byte times 10 ms (plus 6 s, past the peer's
/// idle time, if it is odd).
pub const OP_WAIT: u8 = 4;

/// Config byte (the input's first): bit 0 keyed, bit 1 ChaCha20-Poly1305
/// (else AES-256-GCM), bit 2 the peer is configured (`--peer`; else
/// learned, `--forward`), bit 3 XOR parity ([`CFG_XOR`]), bit 4 a
/// sliding-window code ([`CFG_SLIDING`]), bit 5 with it the closed loop
/// ([`CFG_SLIDING_TARGET`]).
pub const CFG_KEYED: u8 = 1;
/// See [`CFG_KEYED`].
pub const CFG_CHACHA: u8 = 2;
/// See [`CFG_KEYED`].
pub const CFG_FIXED_PEER: u8 = 4;
/// Config bit 3: XOR parity (`--fec xor:3x3`) instead of block FEC;
/// keyless datagrams then go in as they are (RTP has no checksum).
pub const CFG_XOR: u8 = 8;
/// Config bit 4: a sliding-window code (`--fec sliding:w=8,o=0.5`)
/// instead of block FEC (unless [`CFG_XOR`] is set too); keyless
/// datagrams go in as they are (the code's packets carry no checksum).
pub const CFG_SLIDING: u8 = 16;
/// Config bit 5, with [`CFG_SLIDING`]: the closed loop
/// (`--fec sliding:target`): reports flow and the target controller takes
/// the peer's.
pub const CFG_SLIDING_TARGET: u8 = 32;
/// The link's datagrams under [`CFG_SLIDING`] (sealed, if keyed): a
/// repair packet then fits one op's 255 bytes.
pub const SLIDING_MAX_DATAGRAM: usize = 240;

/// A [`TunnelEndpoint`] as `groupwire tunnel` sets it up, fed what the
/// input says: `config, then [op, len, len bytes]*` (see the `OP_*` and
/// `CFG_*` constants). Keyless datagrams get a valid CRC first (as in
/// `block_endpoint`); keyed ones cannot be forged, so [`OP_SEALED`] seals
/// the fuzzer's bytes under the peer's key: a key holder sending garbage.
///
/// Checks: nothing panics; the receiver holds no more blocks than its
/// cap; nothing is ever sent to an address that has sent nothing and is
/// not the configured peer (no amplification toward a spoofed address).
pub fn tunnel_endpoint(data: &[u8]) {
    run(data);
}

/// [`tunnel_endpoint`], returning the datagrams delivered to the
/// application and the packets sent (so seeds can be checked to reach the
/// machine).
pub fn run(data: &[u8]) -> (usize, usize) {
    let Some((&cfg_byte, mut rest)) = data.split_first() else {
        return (0, 0);
    };
    let (mut delivered, mut sent) = (0, 0);
    let keyed = cfg_byte & CFG_KEYED != 0;
    let cipher = if cfg_byte & CFG_CHACHA != 0 {
        Cipher::ChaCha20Poly1305
    } else {
        Cipher::Aes256Gcm
    };
    let fixed = (cfg_byte & CFG_FIXED_PEER != 0).then_some(PEER);
    let xor = cfg_byte & CFG_XOR != 0;
    let sliding = cfg_byte & CFG_SLIDING != 0;
    let mut cfg = config(fixed, keyed.then_some(cipher));
    if xor {
        cfg.xor = Some(groupwire_proto::xor::XorLayout::matrix(3, 3));
    } else if sliding && cfg_byte & CFG_SLIDING_TARGET != 0 {
        cfg.use_sliding_target(groupwire_proto::control::target::TargetConfig::default());
        cfg.max_datagram = SLIDING_MAX_DATAGRAM;
    } else if sliding {
        cfg.sliding = Some(groupwire_proto::sliding::SlidingCode {
            window: 8,
            overhead: 0.5,
        });
        // Repairs carry the largest symbol: small enough for one op.
        cfg.max_datagram = SLIDING_MAX_DATAGRAM;
    }
    // Packets without a checksum to fix up.
    let raw = xor || sliding;
    let mut ep = TunnelEndpoint::new(cfg);
    let mut peer_sealer = Sealer::new(KEY, PEER_SALT, cipher);
    let mut heard: BTreeSet<SocketAddr> = fixed.into_iter().collect();
    let mut now = Instant::ZERO;
    while let [op, len, tail @ ..] = rest {
        let n = usize::from(*len).min(tail.len());
        let (body, next) = tail.split_at(n);
        rest = next;
        match op % 5 {
            OP_FROM_PEER | OP_FROM_STRANGER => {
                let src = if op % 5 == OP_FROM_PEER {
                    PEER
                } else {
                    STRANGER
                };
                heard.insert(src);
                let d = if keyed || raw {
                    body.to_vec()
                } else {
                    crate::with_valid_crc(body)
                };
                ep.handle_datagram(now, src, &d);
            }
            OP_SEALED => {
                heard.insert(PEER);
                let d = if keyed {
                    peer_sealer.seal(body).unwrap_or_default()
                } else if raw {
                    body.to_vec()
                } else {
                    crate::with_valid_crc(body)
                };
                ep.handle_datagram(now, PEER, &d);
            }
            OP_APP => {
                let _ = ep.send(now, Bytes::copy_from_slice(body));
            }
            _ => {
                let steps = u64::from(body.first().copied().unwrap_or(1));
                now += Duration::from_millis(10 * steps);
                if steps % 2 == 1 {
                    now += Duration::from_secs(6);
                }
                ep.handle_timeout(now);
            }
        }
        while let Some(t) = ep.poll_transmit(now) {
            sent += 1;
            assert!(
                heard.contains(&t.dst),
                "sent {} bytes to {}, which never sent anything",
                t.payload.len(),
                t.dst
            );
        }
        while ep.poll_event().is_some() {
            delivered += 1;
        }
        assert!(ep.blocks_held() <= MAX_BLOCKS);
    }
    (delivered, sent)
}

/// The receiver's block cap in this target.
const MAX_BLOCKS: usize = 16;

fn config(peer: Option<SocketAddr>, cipher: Option<Cipher>) -> TunnelConfig {
    let mut cfg = TunnelConfig::new(peer, 4);
    cfg.sender.max_block_wait = Some(Duration::from_millis(5));
    cfg.receiver.max_blocks = MAX_BLOCKS;
    cfg.key = cipher.map(|cipher| TunnelKey {
        psk: KEY.to_vec(),
        salt: OWN_SALT,
        cipher,
    });
    cfg
}

#[cfg(test)]
mod tests {
    /// The seeds (`examples/seed_corpus.rs`) get past the checks: every
    /// one delivers datagrams and gets packets sent, keyed or not.
    #[test]
    fn the_seeds_reach_the_application() {
        let dir = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../fuzz/corpus/tunnel_endpoint"
        );
        let mut seeds = 0;
        for f in std::fs::read_dir(dir).expect("corpus dir") {
            let path = f.expect("entry").path();
            if !path
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("seed-"))
            {
                continue;
            }
            seeds += 1;
            let (delivered, sent) = super::run(&std::fs::read(&path).expect("seed"));
            assert!(
                delivered >= 8 && sent > 0,
                "{}: {delivered} delivered, {sent} sent",
                path.display()
            );
        }
        assert_eq!(seeds, 9);
    }
}
