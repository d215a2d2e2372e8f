//! The session machine driven end to end: a real peer beside hostile
//! datagrams, frames, application sends and mechanism switches.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use groupwire_proto::session::wire::{self, ControlFrame, Frame};
use groupwire_proto::session::{
    ChannelId, Mechanism, MechanismKind, PeerId, Qos, Session, SessionConfig, SessionEvent,
};
use groupwire_proto::tunnel::{Cipher, TunnelKey};
use groupwire_proto::xor::XorLayout;
use groupwire_proto::{Instant, Machine, StreamMachine, Transport};

/// The session under test.
pub const A: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 7400);
/// Its honest peer.
pub const B: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 7401);
/// A stranger.
const STRANGER: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 6666);

/// Op: the bytes as a datagram from the peer's address.
pub const OP_RAW: u8 = 0;
/// Op: the bytes as a datagram from a stranger.
pub const OP_STRANGER: u8 = 1;
/// Op: a datagram from the peer with a valid header (A's connection id,
/// kind from the first byte) and the rest as its body (keyless runs).
pub const OP_HEADED: u8 = 2;
/// Op: a stream frame to A's connection id with the bytes after it
/// (keyless runs: sometimes a well-formed message frame, or, when the top
/// bit of the first byte is set, a Blast control frame).
pub const OP_FRAME: u8 = 3;
/// Op: A sends the bytes on channel `first byte % 3`.
pub const OP_SEND: u8 = 4;
/// Op: A switches channel `b0 % 3` to mechanism `b1 % 6`.
pub const OP_SWITCH: u8 = 5;
/// Op: both sides run for `b0 × 10` ms, exchanging what they send.
pub const OP_RUN: u8 = 6;

/// Config byte bit 0: both sides hold a key.
pub const CFG_KEYED: u8 = 1;

fn mechanisms() -> [Mechanism; 6] {
    [
        Mechanism::Plain,
        Mechanism::Afec { lo: 0.01, hi: 0.02 },
        Mechanism::Xor(XorLayout::row(3)),
        Mechanism::Block {
            target: 0.001,
            max_delay: Duration::from_millis(30),
        },
        Mechanism::Reliable,
        Mechanism::Blast,
    ]
}

struct Pair {
    a: Session,
    b: Session,
    now: Instant,
    /// Bytes each address sent A, and A sent it.
    bytes: BTreeMap<SocketAddr, (usize, usize)>,
    /// Messages B delivered.
    delivered: usize,
}

impl Pair {
    /// Runs both for `d`, delivering everything after 1 ms.
    fn run(&mut self, d: Duration) {
        let end = self.now + d;
        loop {
            let mut moved = false;
            while let Some(t) = self.a.poll_transmit(self.now) {
                moved = true;
                self.bytes.entry(t.dst).or_default().1 += t.payload.len();
                if t.dst == B {
                    match t.transport {
                        Transport::Udp => self.b.handle_datagram(self.now, A, &t.payload),
                        Transport::TcpFrame { stream } => {
                            self.b.handle_frame(self.now, A, stream, &t.payload);
                        }
                        _ => {}
                    }
                }
            }
            while let Some(t) = self.b.poll_transmit(self.now) {
                moved = true;
                match t.transport {
                    Transport::Udp => self.a.handle_datagram(self.now, B, &t.payload),
                    Transport::TcpFrame { stream } => {
                        self.a.handle_frame(self.now, B, stream, &t.payload);
                    }
                    _ => {}
                }
            }
            while self.a.poll_event().is_some() {}
            while let Some(e) = self.b.poll_event() {
                self.delivered += usize::from(matches!(e, SessionEvent::Message { .. }));
            }
            if moved {
                continue;
            }
            let next = [self.a.poll_timeout(), self.b.poll_timeout()]
                .into_iter()
                .flatten()
                .min()
                .map_or(end, |t| t.max(self.now + Duration::from_millis(1)));
            if next > end {
                self.now = end;
                return;
            }
            self.now = next;
            self.a.handle_timeout(self.now);
            self.b.handle_timeout(self.now);
        }
    }
}

fn config(seed: u64, keyed: bool) -> SessionConfig {
    let mut c = SessionConfig::new(seed);
    c.max_pending = 4;
    if keyed {
        c.key = Some(TunnelKey {
            psk: b"fuzzing session key, 32 bytes..".to_vec(),
            salt: seed,
            cipher: Cipher::ChaCha20Poly1305,
        });
    }
    c
}

/// Two sessions, A and B, connected with three channels; then the input
/// drives A: `config, then [op, len, len bytes]*` (see the `OP_*`
/// constants). Checks: nothing panics, and A never sends a stranger more
/// bytes than the stranger sent it.
pub fn session_endpoint(data: &[u8]) {
    run(data);
}

/// [`session_endpoint`], returning the messages B delivered (so seeds can
/// be checked to reach the machines).
pub fn run(data: &[u8]) -> usize {
    let Some((&cfg, mut rest)) = data.split_first() else {
        return 0;
    };
    let keyed = cfg & CFG_KEYED != 0;
    let mut p = Pair {
        a: Session::new(config(1, keyed)),
        b: Session::new(config(2, keyed)),
        now: Instant::ZERO,
        bytes: BTreeMap::new(),
        delivered: 0,
    };
    let Ok(peer_b) = p.a.connect(p.now, B) else {
        return 0;
    };
    p.run(Duration::from_millis(10));
    let Some(PeerId(cid)) = Some(peer_b).filter(|&pb| p.a.is_connected(pb)) else {
        panic!("two honest sessions connect");
    };
    let qos = [
        Qos::low_latency(),
        Qos::awareness(),
        Qos::reliable_ordered(),
    ];
    let channels: Vec<ChannelId> = qos
        .iter()
        .enumerate()
        .filter_map(|(i, q)| p.a.open_channel(p.now, peer_b, &format!("c{i}"), *q).ok())
        .collect();
    p.run(Duration::from_millis(10));
    let mut buf = Vec::new();
    while let [op, len, tail @ ..] = rest {
        let n = usize::from(*len).min(tail.len());
        let (body, next) = tail.split_at(n);
        rest = next;
        match op % 7 {
            OP_RAW => p.a.handle_datagram(p.now, B, body),
            OP_STRANGER => {
                p.bytes.entry(STRANGER).or_default().0 += body.len();
                p.a.handle_datagram(p.now, STRANGER, body);
            }
            OP_HEADED => {
                let kind = body.first().copied().unwrap_or(3) % 10;
                wire::write(&mut buf, cid, 0, 0, &wire::Body::Probe);
                buf[3] = kind;
                buf.extend_from_slice(body.get(1..).unwrap_or_default());
                p.a.handle_datagram(p.now, B, &buf);
            }
            OP_FRAME => {
                buf.clear();
                buf.extend_from_slice(&cid.to_be_bytes());
                buf.extend_from_slice(body);
                if body.len() >= 6 && !keyed && body[0] & 0x80 != 0 {
                    // A control frame about one of A's channels or B's.
                    let f = ControlFrame {
                        dcid: cid,
                        channel: u16::from(body[0] % 4),
                        mechanism: MechanismKind::Blast as u8,
                        peer_owned: body[1] & 1 != 0,
                        payload: &body[2..],
                    };
                    buf.clear();
                    f.write(&mut buf);
                } else if body.len() >= 6 && !keyed {
                    // Sometimes a well-formed frame.
                    let f = Frame {
                        dcid: cid,
                        channel: u16::from(body[0] % 4),
                        msg: u32::from(body[1]),
                        payload: &body[2..],
                    };
                    buf.clear();
                    f.write(&mut buf);
                }
                // Any stream, some past the bound.
                let stream = body
                    .last()
                    .map_or(0, |b| b % (groupwire_proto::MAX_STREAMS + 2));
                p.a.handle_frame(p.now, B, stream, &buf);
            }
            OP_SEND => {
                if let Some(&ch) = channels.get(usize::from(body.first().copied().unwrap_or(0) % 3))
                {
                    let _ = p.a.send(p.now, ch, body);
                }
            }
            OP_SWITCH => {
                let (c, m) = (
                    usize::from(body.first().copied().unwrap_or(0) % 3),
                    usize::from(body.get(1).copied().unwrap_or(0) % 6),
                );
                if let Some(&ch) = channels.get(c) {
                    let _ = p.a.set_mechanism(p.now, ch, mechanisms()[m]);
                }
            }
            _ => {
                let ms = u64::from(body.first().copied().unwrap_or(1));
                p.run(Duration::from_millis(ms * 10));
            }
        }
        // Drain A after every input.
        p.run(Duration::ZERO);
    }
    let (got, sent) = p.bytes.get(&STRANGER).copied().unwrap_or_default();
    assert!(sent <= got, "A sent a stranger {sent} bytes for {got}");
    p.delivered
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_committed_seeds_reach_the_peer() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fuzz/corpus/session_endpoint");
        let mut reached = 0;
        for f in std::fs::read_dir(dir).expect("corpus") {
            let data = std::fs::read(f.expect("entry").path()).expect("file");
            reached += usize::from(super::run(&data) > 20);
        }
        assert!(reached >= 2, "keyless and keyed seeds deliver messages");
    }

    #[test]
    fn the_blast_seed_delivers_its_transfers() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fuzz/corpus/session_endpoint/seed-blast");
        let data = std::fs::read(path).expect("seed");
        assert_eq!(super::run(&data), 2, "both messages, each one transfer");
    }
}
