//! What a session's channel multiplexing costs in the machine itself,
//! without sockets (issue 16: "channel multiplexing costs at most 10% of
//! the single-mechanism rate"): two `session::Session`s joined in memory,
//! 4096 messages sent round robin over 1 or 8 channels pinned to AFEC
//! (40 bytes) or to Block (1000 bytes, 0.1% within 50 ms), the datagrams handed to the other side every 32 messages,
//! timers read as a driver would (after each send, which wakes it, and
//! after each batch of datagrams). The loopback
//! benchmark (`groupwire-tokio`'s `loopback`) measures the same through
//! real sockets, where the kernel's share hides much of the machine's.

#![expect(
    missing_docs,
    reason = "criterion_group! generates an undocumented function"
)]

use std::hint::black_box;
use std::net::SocketAddr;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use groupwire_proto::session::{
    ChannelId, Mechanism, PeerId, Qos, Session, SessionConfig, SessionEvent,
};
use groupwire_proto::{Instant, Machine};

const A: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 7400);
const B: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 7401);
const MESSAGES: u64 = 4096;
/// Messages sent between two turns of the wire (the loopback
/// benchmark's window is 64).
const BURST: u64 = 32;

/// Two connected sessions, `channels` channels from A to B on AFEC.
struct Pair {
    a: Session,
    b: Session,
    now: Instant,
    chans: Vec<ChannelId>,
    delivered: u64,
    /// How B names A, once connected.
    peer_a: Option<PeerId>,
}

impl Pair {
    fn new(channels: usize, m: Mechanism, len: usize) -> Self {
        let mut p = Self {
            a: Session::new(SessionConfig::new(1)),
            b: Session::new(SessionConfig::new(2)),
            now: Instant::ZERO,
            chans: Vec::new(),
            delivered: 0,
            peer_a: None,
        };
        let pb = p.a.connect(p.now, B).expect("connect");
        p.turn(Duration::from_millis(1));
        let pa = p.peer_a.expect("B saw A connect");
        for i in 0..channels {
            let name = format!("ch{i}");
            let ca = p.a.open_channel(p.now, pb, &name, Qos::stream());
            let ca = ca.expect("open");
            p.b.open_channel(p.now, pa, &name, Qos::stream())
                .expect("open");
            p.a.set_mechanism(p.now, ca, m).expect("mechanism");
            p.chans.push(ca);
        }
        p.turn(Duration::from_millis(1));
        // The pipe works before it is timed.
        p.run(&vec![0; len]);
        assert_eq!(p.delivered, MESSAGES, "a round was not delivered");
        p
    }

    /// Moves every datagram across and runs due timers, until quiet;
    /// then the clock moves on by `step`.
    fn turn(&mut self, step: Duration) {
        loop {
            let mut moved = false;
            while let Some(t) = self.a.poll_transmit(self.now) {
                self.b.handle_datagram(self.now, A, &t.payload);
                moved = true;
            }
            while let Some(t) = self.b.poll_transmit(self.now) {
                self.a.handle_datagram(self.now, B, &t.payload);
                moved = true;
            }
            for s in [&mut self.a, &mut self.b] {
                if s.poll_timeout().is_some_and(|t| t <= self.now) {
                    s.handle_timeout(self.now);
                    moved = true;
                }
            }
            while let Some(e) = self.b.poll_event() {
                match e {
                    SessionEvent::Message { .. } => self.delivered += 1,
                    SessionEvent::PeerConnected { peer, .. } => self.peer_a = Some(peer),
                    _ => {}
                }
            }
            while self.a.poll_event().is_some() {}
            if !moved {
                break;
            }
        }
        self.now += step;
    }

    fn run(&mut self, payload: &[u8]) {
        for i in 0..MESSAGES {
            let ch = self.chans[i as usize % self.chans.len()];
            self.a.send(self.now, ch, payload).expect("send");
            // The driver, woken by the send, sends and sets its timer.
            black_box(self.a.poll_timeout());
            if i % BURST == BURST - 1 {
                self.turn(Duration::from_micros(100));
            }
        }
        self.turn(Duration::from_micros(100));
    }
}

fn multiplexing(c: &mut Criterion) {
    let mut g = c.benchmark_group("session");
    g.throughput(Throughput::Elements(MESSAGES));
    let afec = Mechanism::Afec { lo: 0.01, hi: 0.02 };
    // The loopback benchmark's Block: 0.1% within 50 ms, 1000-byte
    // messages.
    let block = Mechanism::Block {
        target: 0.001,
        max_delay: Duration::from_millis(50),
    };
    for (name, m, len) in [("afec", afec, 40), ("block", block, 1000)] {
        let payload = vec![7u8; len];
        for channels in [1, 8] {
            let mut pair = Pair::new(channels, m, len);
            g.bench_function(format!("{name}_{channels}ch"), |b| {
                b.iter(|| pair.run(black_box(&payload)));
            });
        }
    }
    g.finish();
}

criterion_group!(benches, multiplexing);
criterion_main!(benches);
