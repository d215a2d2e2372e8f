//! Two sessions over a scripted network: handshakes, channels on every
//! datagram mechanism and the stream, switches without loss or
//! duplication, the key, address validation and hostile input.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::*;
use crate::tunnel::{Cipher, TunnelKey};
use crate::xor::XorLayout;
use crate::{Bitrate, Instant, Machine, StreamMachine, Transmit, Transport};

const A: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 7400);
const B: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 7401);

/// Says whether the network drops a datagram from an address.
type DropRule = Box<dyn FnMut(SocketAddr, &Transmit) -> bool>;

/// Two sessions and the wire between them: datagrams take `delay` and
/// are dropped when `drop` says so; frames are never dropped (TCP).
struct Net {
    a: Session,
    b: Session,
    now: Instant,
    delay: Duration,
    /// In flight: arrival, from, to, transmit.
    flight: VecDeque<(Instant, SocketAddr, Transmit)>,
    drop: DropRule,
    ev_a: Vec<SessionEvent>,
    ev_b: Vec<SessionEvent>,
    /// Everything either side sent, in order.
    log: Vec<(SocketAddr, Transmit)>,
    /// A's datagrams to B cross a link of this many bytes per second
    /// (FIFO, no limit) before the delay; `None`: no serialization.
    rate: Option<f64>,
    /// When that link is next free.
    busy: Instant,
    /// A's stream: a driver that sends every frame at once, and says so
    /// ([`StreamMachine::handle_stream_sent`]).
    send_frames: bool,
    /// B's stream, the same.
    send_frames_b: bool,
    /// Extra delay of frames on stream `k`: `k` times this (so a striped
    /// channel's frames arrive out of order across its streams).
    stream_skew: Duration,
}

impl Net {
    fn new(a: SessionConfig, b: SessionConfig) -> Self {
        Self {
            a: Session::new(a),
            b: Session::new(b),
            now: Instant::ZERO,
            delay: Duration::from_millis(10),
            flight: VecDeque::new(),
            drop: Box::new(|_, _| false),
            ev_a: Vec::new(),
            ev_b: Vec::new(),
            log: Vec::new(),
            rate: None,
            busy: Instant::ZERO,
            send_frames: false,
            send_frames_b: false,
            stream_skew: Duration::ZERO,
        }
    }

    fn drain(&mut self) {
        loop {
            let mut frames = [0; crate::MAX_STREAMS as usize];
            let mut frames_b = [0; crate::MAX_STREAMS as usize];
            for (from, s, ev) in [
                (A, &mut self.a, &mut self.ev_a),
                (B, &mut self.b, &mut self.ev_b),
            ] {
                while let Some(t) = s.poll_transmit(self.now) {
                    self.log.push((from, t.clone()));
                    if t.transport == Transport::Udp && (self.drop)(from, &t) {
                        continue;
                    }
                    let mut at = self.now;
                    match (from, t.transport, self.rate) {
                        (A, Transport::Udp, Some(rate)) => {
                            let busy = self.busy.max(self.now);
                            let secs = (t.payload.len() + 28) as f64 / rate;
                            self.busy = busy + Duration::from_secs_f64(secs);
                            at = self.busy;
                        }
                        (A, Transport::TcpFrame { stream }, _) if self.send_frames => {
                            frames[usize::from(stream)] += t.payload.len() + crate::FRAME_PREFIX;
                        }
                        (B, Transport::TcpFrame { stream }, _) if self.send_frames_b => {
                            frames_b[usize::from(stream)] += t.payload.len() + crate::FRAME_PREFIX;
                        }
                        _ => {}
                    }
                    if let Transport::TcpFrame { stream } = t.transport {
                        at += self.stream_skew * u32::from(stream);
                    }
                    self.flight.push_back((at + self.delay, from, t));
                }
                while let Some(e) = s.poll_event() {
                    ev.push(e);
                }
            }
            if frames.iter().chain(&frames_b).all(|&n| n == 0) {
                return;
            }
            for (k, (n, nb)) in (0u8..).zip(frames.into_iter().zip(frames_b)) {
                if n > 0 {
                    self.a.handle_stream_sent(self.now, B, k, n);
                }
                if nb > 0 {
                    self.b.handle_stream_sent(self.now, A, k, nb);
                }
            }
        }
    }

    /// Runs until `until`, delivering and firing timers in time order.
    fn run_until(&mut self, until: Instant) {
        loop {
            self.drain();
            let next_flight = self.flight.iter().map(|f| f.0).min();
            let next_timer = [self.a.poll_timeout(), self.b.poll_timeout()]
                .into_iter()
                .flatten()
                .min();
            let next = [next_flight, next_timer].into_iter().flatten().min();
            let Some(next) = next.filter(|&t| t <= until) else {
                self.now = until;
                self.a.handle_timeout(until);
                self.b.handle_timeout(until);
                self.drain();
                return;
            };
            self.now = self.now.max(next);
            if next_flight == Some(next) {
                let i = self.flight.iter().position(|f| f.0 == next).expect("found");
                let (_, from, t) = self.flight.remove(i).expect("found");
                let to = if t.dst == A { &mut self.a } else { &mut self.b };
                match t.transport {
                    Transport::Udp => to.handle_datagram(self.now, from, &t.payload),
                    Transport::TcpFrame { stream } => {
                        to.handle_frame(self.now, from, stream, &t.payload);
                    }
                }
            } else {
                self.a.handle_timeout(self.now);
                self.b.handle_timeout(self.now);
            }
        }
    }

    fn run_for(&mut self, d: Duration) {
        let until = self.now + d;
        self.run_until(until);
    }

    /// Connects A to B and opens `name` on both sides.
    fn pair(&mut self, name: &str, qos: Qos) -> (ChannelId, ChannelId) {
        let pb = self.a.connect(self.now, B).expect("connect");
        self.run_for(self.delay * 5);
        assert!(self.a.is_connected(pb), "{:?}", self.ev_a);
        let pa = self
            .ev_b
            .iter()
            .find_map(|e| match e {
                SessionEvent::PeerConnected { peer, .. } => Some(*peer),
                _ => None,
            })
            .expect("B saw A connect");
        let ca = self.a.open_channel(self.now, pb, name, qos).expect("open");
        let cb = self.b.open_channel(self.now, pa, name, qos).expect("open");
        self.run_for(self.delay * 5);
        (ca, cb)
    }

    /// Payloads B delivered on `ch`, as numbers.
    fn got(&self, ch: ChannelId) -> Vec<u32> {
        self.ev_b
            .iter()
            .filter_map(|e| match e {
                SessionEvent::Message {
                    channel, payload, ..
                } if *channel == ch => Some(u32::from_be_bytes(payload[..4].try_into().unwrap())),
                _ => None,
            })
            .collect()
    }
}

/// Drops every `n`th data datagram A sends (repairs and copies too).
fn every_nth_data_from_a(n: u32) -> DropRule {
    let mut count = 0u32;
    Box::new(move |from, t| {
        let data = crate::session::wire::parse(&t.payload)
            .is_ok_and(|(h, _)| h.kind == crate::session::wire::Kind::Data);
        if from == A && data {
            count += 1;
            count % n == 0
        } else {
            false
        }
    })
}

fn msg(i: u32) -> Vec<u8> {
    let mut v = i.to_be_bytes().to_vec();
    v.resize(200, i as u8);
    v
}

/// Sends `n` messages from A on `ch`, one every `gap`, starting at `from`.
fn stream(net: &mut Net, ch: ChannelId, from: u32, n: u32, gap: Duration) {
    for i in from..from + n {
        net.a.send(net.now, ch, &msg(i)).expect("send");
        net.run_for(gap);
    }
}

fn every_mechanism() -> Vec<(Qos, Mechanism)> {
    vec![
        (Qos::low_latency(), Mechanism::Plain),
        (Qos::awareness(), Mechanism::Afec { lo: 0.01, hi: 0.02 }),
        (Qos::stream(), Mechanism::Xor(XorLayout::row(3))),
        (
            Qos::stream()
                .max_residual_loss(0.001)
                .max_delay(Duration::from_millis(50)),
            Mechanism::Block {
                target: 0.001,
                max_delay: Duration::from_millis(50),
            },
        ),
        (Qos::reliable_ordered(), Mechanism::Reliable),
    ]
}

#[test]
fn every_mechanism_delivers_each_message_exactly_once_on_a_clean_path() {
    for (qos, m) in every_mechanism() {
        let mut net = Net::new(SessionConfig::new(1), SessionConfig::new(2));
        let (ca, cb) = net.pair("ch", qos);
        net.a.set_mechanism(net.now, ca, m).expect("mechanism");
        stream(&mut net, ca, 0, 300, Duration::from_millis(5));
        net.run_for(Duration::from_secs(1));
        assert_eq!(net.got(cb), (0..300).collect::<Vec<_>>(), "{m}");
        let via: Vec<_> = net
            .ev_b
            .iter()
            .filter_map(|e| match e {
                SessionEvent::Message { via, .. } => Some(*via),
                _ => None,
            })
            .collect();
        assert!(via.iter().all(|v| *v == m.kind()), "{m}: {via:?}");
        assert_eq!(net.b.stats().duplicates, 0);
        assert_eq!(net.b.stats().malformed + net.b.stats().foreign, 0, "{m}");
    }
}

#[test]
fn fec_mechanisms_rebuild_losses_and_plain_does_not() {
    for (qos, m) in every_mechanism().into_iter().take(4) {
        let mut net = Net::new(SessionConfig::new(1), SessionConfig::new(2));
        let (ca, cb) = net.pair("ch", qos);
        net.a.set_mechanism(net.now, ca, m).expect("mechanism");
        // Every 7th data datagram A sends is lost (repairs and copies too).
        net.drop = every_nth_data_from_a(7);
        stream(&mut net, ca, 0, 700, Duration::from_millis(5));
        net.run_for(Duration::from_secs(2));
        let got = net.got(cb);
        let recovered = net.b.channel_stats(cb).expect("channel").recovered;
        // AFEC starts at one copy and raises it from the measured MER
        // (Dyck & Gutwin's NAK), so only its later messages are judged.
        let late = got.iter().filter(|&&i| i >= 400).count();
        match m {
            Mechanism::Plain => {
                assert_eq!(got.len(), 600, "plain loses every 7th");
                assert_eq!(recovered, 0);
            }
            Mechanism::Afec { .. } => assert!(
                late >= 285 && recovered > 0,
                "{m}: {late} of the last 300, recovered {recovered}"
            ),
            _ => assert!(
                got.len() > 690 && recovered > 0,
                "{m}: got {}, recovered {recovered}",
                got.len()
            ),
        }
        assert_eq!(
            net.b.stats().duplicates,
            0,
            "{m}: a copy is not a second delivery"
        );
    }
}

/// An XOR row of 4 sends one parity per 4 messages whenever the message
/// gap is shorter than the wait before a partial group is closed (half the
/// delay budget, or 1 s without one), and one per message (a copy, in time
/// for the budget) when it is not; a 4x4 matrix sends 8 per 16. The
/// selector's predictor counts the same overhead. Until groups were closed
/// by the budget, a 2 ms idle wait made every message its own group at
/// every gap here.
#[test]
fn xor_rows_send_one_parity_per_row_and_the_predictor_counts_the_same() {
    let budget = Qos::stream()
        .max_residual_loss(0.001)
        .max_delay(Duration::from_millis(50));
    let row = XorLayout::row(4);
    // (QoS, layout, gap between messages, parity packets for 400 messages)
    let cases = [
        (budget, row, 5, 100),
        (Qos::stream(), row, 100, 100),
        (budget, row, 40, 400),
        // 25 matrices of 16: 4 rows and 4 columns each.
        (budget, XorLayout::matrix(4, 4), 5, 200),
    ];
    for (qos, layout, gap_ms, parity) in cases {
        let mut net = Net::new(SessionConfig::new(1), SessionConfig::new(2));
        let (ca, cb) = net.pair("ch", qos);
        net.a
            .set_mechanism(net.now, ca, Mechanism::Xor(layout))
            .expect("mechanism");
        let before = net.log.len();
        net.drop = every_nth_data_from_a(7);
        let gap = Duration::from_millis(gap_ms);
        stream(&mut net, ca, 0, 400, gap);
        net.run_for(Duration::from_secs(2));
        let data = net.log[before..]
            .iter()
            .filter(|(from, t)| {
                *from == A
                    && crate::session::wire::parse(&t.payload)
                        .is_ok_and(|(h, _)| h.kind == crate::session::wire::Kind::Data)
            })
            .count();
        let what = format!("{layout} {qos:?} every {gap_ms} ms");
        assert_eq!(data - 400, parity, "{what}");
        let got = net.got(cb).len();
        assert!(got > 390, "{what}: parity rebuilt the losses: {got}");
        let traffic = Traffic::new(1000.0 / gap_ms as f64, msg(0).len());
        let path = PathEstimate::known(Duration::from_millis(20), 0.01, 1.0, None);
        let p = predict(&Mechanism::Xor(layout), &qos, &path, &traffic);
        assert!(
            (p.overhead - parity as f64 / 400.0).abs() < 1e-9,
            "{what}: predicted {p:?}"
        );
    }
}

/// The camera channel of the tele-immersion scenario (2 Mbit/s of
/// 1000-byte messages, a 0.1% residual target within 50 ms, 20 ms one
/// way) over a seeded loss chain, on Plain for 10 s while the resource
/// monitor measures the path, then pinned to Block: from the switch on,
/// the bytes the session puts on the wire per application byte are what
/// the selector's predictor counts for the same inputs, translated to the
/// wire.
///
/// The predictor counts repair symbols per source symbol, not headers, so
/// the expected figure adds what the wire formats fix: every source
/// datagram carries the session header, the data body's channel and
/// mechanism, the block data header and the message number; every repair
/// the same plus the symbol prefix. Tolerance: 15% of the predicted
/// repair share, plus 0.01: the sender's controller refits its chain from
/// decayed counts every few reports and takes the worse of two fits, so it
/// sometimes adds a repair the predictor, given the true chain, does not.
/// The receiver's reports go the other way and are not the channel's wire
/// bytes (nor in the prediction): one 100-byte report per 10 ms, about
/// 0.045 here, checked to stay under 0.06.
///
/// Two causes made Block send far more than predicted. The predictor
/// assumed blocks that fill in 90% of the budget (12 messages here) while
/// the session closed every block at half of it (7 messages), so each
/// block carried the repairs of a short block: at 2% loss, after its
/// controller had settled, Block cost 0.37 where 0.23 was expected. And
/// every Block the session switched to started from the controller's
/// pessimistic prior (15% loss in runs of 4), not from the loss the
/// monitor had measured and the prediction used: its first seconds sent
/// up to three repairs per message.
/// The tele-immersion camera's messages: 1000 bytes every 4 ms.
const CAMERA_MSG: usize = 1000;
const CAMERA_GAP: Duration = Duration::from_millis(4);
/// A data datagram's body: channel (2) and mechanism (1).
const DATA_BODY: usize = 3;

/// The tele-immersion camera's QoS (2 Mbit/s, 0.1% within 50 ms) and the
/// Block mechanism for it.
fn camera() -> (Qos, Mechanism) {
    let budget = Duration::from_millis(50);
    let qos = Qos::stream()
        .rate(crate::Bitrate::mbps(2))
        .max_residual_loss(0.001)
        .max_delay(budget);
    let block = Mechanism::Block {
        target: 0.001,
        max_delay: budget,
    };
    (qos, block)
}

#[test]
fn block_sends_the_overhead_the_predictor_counts() {
    use crate::control::target::TwoState;
    use crate::wire::block::{DATA_HEADER_LEN, SYMBOL_PREFIX};
    const MSG: usize = CAMERA_MSG;
    const GAP: Duration = CAMERA_GAP;
    let (qos, block) = camera();
    let source = (wire::HEADER_LEN + DATA_BODY + DATA_HEADER_LEN + MSG_PREFIX + MSG) as f64;
    let repair = source + SYMBOL_PREFIX as f64;
    // (what, chain): independent 2% and 0.5% loss, the scenario's second
    // and fourth minutes.
    let cases = [
        ("2% random", TwoState::gilbert(0.02, 0.98)),
        ("0.5% random", TwoState::gilbert(0.005, 0.995)),
    ];
    for (what, chain) in cases {
        let mut net = Net::new(SessionConfig::new(1), SessionConfig::new(2));
        net.delay = Duration::from_millis(20);
        let (ca, _) = net.pair("camera", qos);
        net.a
            .set_mechanism(net.now, ca, Mechanism::Plain)
            .expect("pin");
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut bad = false;
        net.drop = Box::new(move |from, t| {
            let data = wire::parse(&t.payload).is_ok_and(|(h, _)| h.kind == wire::Kind::Data);
            if from != A || !data {
                return false;
            }
            bad = rng.random_bool(if bad { 1.0 - chain.r } else { chain.p });
            bad
        });
        let payload = vec![7u8; MSG];
        let send_for = |net: &mut Net, secs: u32| {
            for _ in 0..secs * 250 {
                net.a.send(net.now, ca, &payload).expect("send");
                net.run_for(GAP);
            }
        };
        send_for(&mut net, 10);
        net.a.set_mechanism(net.now, ca, block).expect("pin");
        let (before, log) = (net.a.channel_stats(ca).expect("channel"), net.log.len());
        send_for(&mut net, 30);
        let after = net.a.channel_stats(ca).expect("channel");
        let sent = (after.sent_bytes - before.sent_bytes) as f64;
        let measured = (after.wire_bytes - before.wire_bytes) as f64 / sent - 1.0;
        let feedback: usize = net.log[log..]
            .iter()
            .filter(|(from, _)| *from == B)
            .map(|(_, t)| t.payload.len())
            .sum();
        let path = PathEstimate::known(net.delay * 2, chain.loss_rate(), 1.0 / chain.r, None);
        let p = predict(
            &block,
            &qos,
            &path,
            &Traffic::new(1.0 / GAP.as_secs_f64(), MSG),
        );
        let expected = (source + p.overhead * repair) / MSG as f64 - 1.0;
        assert!(
            (measured - expected).abs() <= 0.15 * p.overhead + 0.01,
            "{what}: measured {measured:.3}, expected {expected:.3} (predicted {:.3})",
            p.overhead
        );
        assert!(
            (feedback as f64) < 0.06 * sent,
            "{what}: reports {feedback} bytes for {sent} sent"
        );
    }
}

/// A Block channel opened before the monitor has measured the path starts
/// from the controller's pessimistic prior (15% loss in runs of 4); once
/// the monitor's fit rests on enough packets the controller takes it, so
/// on a clean path it stops sending repairs within a second or two rather
/// than outweighing the prior from its own share of the packets.
#[test]
fn a_block_channel_opened_before_the_path_was_measured_takes_the_monitors_fit() {
    use crate::wire::block::DATA_HEADER_LEN;
    const MSG: usize = CAMERA_MSG;
    const GAP: Duration = CAMERA_GAP;
    let (qos, block) = camera();
    let mut net = Net::new(SessionConfig::new(1), SessionConfig::new(2));
    let (ca, cb) = net.pair("camera", qos);
    net.a.set_mechanism(net.now, ca, block).expect("pin");
    let payload = vec![7u8; MSG];
    let send_for = |net: &mut Net, n: u32| {
        for _ in 0..n {
            net.a.send(net.now, ca, &payload).expect("send");
            net.run_for(GAP);
        }
    };
    // The first half second: the prior's repairs.
    send_for(&mut net, 125);
    let early = net.a.channel_stats(ca).expect("channel");
    let source = (wire::HEADER_LEN + DATA_BODY + DATA_HEADER_LEN + MSG_PREFIX + MSG) as f64;
    let headers = source / MSG as f64 - 1.0;
    let overhead = |wire: u64, sent: u64| wire as f64 / sent as f64 - 1.0;
    assert!(
        overhead(early.wire_bytes, early.sent_bytes) > headers + 0.05,
        "the prior sends repairs: {early:?}"
    );
    // Seconds 2 to 4: sources only.
    send_for(&mut net, 375);
    let before = net.a.channel_stats(ca).expect("channel");
    send_for(&mut net, 500);
    let after = net.a.channel_stats(ca).expect("channel");
    let late = overhead(
        after.wire_bytes - before.wire_bytes,
        after.sent_bytes - before.sent_bytes,
    );
    assert!(
        late < headers + 0.005,
        "{late:.4} against headers {headers:.4}"
    );
    net.run_for(Duration::from_millis(200));
    assert_eq!(net.got(cb).len(), 1000);
}

#[test]
fn switching_mechanisms_mid_stream_loses_and_duplicates_nothing() {
    let ms = [
        Mechanism::Plain,
        Mechanism::Block {
            target: 0.001,
            max_delay: Duration::from_millis(50),
        },
        Mechanism::Xor(XorLayout::row(4)),
        Mechanism::Afec { lo: 0.01, hi: 0.02 },
        Mechanism::Plain,
    ];
    let mut net = Net::new(SessionConfig::new(1), SessionConfig::new(2));
    let (ca, cb) = net.pair("ch", Qos::stream());
    let mut sent = 0;
    for m in ms {
        net.a.set_mechanism(net.now, ca, m).expect("switch");
        // Switch with messages still in flight: no pause between.
        stream(&mut net, ca, sent, 100, Duration::from_millis(3));
        sent += 100;
    }
    net.run_for(Duration::from_secs(3));
    let mut got = net.got(cb);
    got.sort_unstable();
    assert_eq!(got, (0..sent).collect::<Vec<_>>());
    let changes = net
        .ev_a
        .iter()
        .filter(|e| matches!(e, SessionEvent::MechanismChanged { .. }))
        .count();
    assert_eq!(
        changes, 4,
        "Plain to Plain at the start is not a change, the rest are"
    );
    assert_eq!(net.a.channel_stats(ca).unwrap().switches, 4);
}

#[test]
fn an_ordered_channel_stays_in_order_across_a_switch_from_datagrams_to_the_stream() {
    // The stream is slower here than the datagrams (a frame waits behind
    // TCP), so messages on the new mechanism could overtake the old ones.
    let mut net = Net::new(SessionConfig::new(1), SessionConfig::new(2));
    let (ca, cb) = net.pair("edits", Qos::stream().ordered(true));
    assert_eq!(net.a.mechanism(ca), Some(Mechanism::Plain));
    stream(&mut net, ca, 0, 50, Duration::from_millis(1));
    net.a
        .set_mechanism(net.now, ca, Mechanism::Reliable)
        .unwrap();
    stream(&mut net, ca, 50, 50, Duration::from_millis(1));
    net.run_for(Duration::from_secs(1));
    assert_eq!(net.got(cb), (0..100).collect::<Vec<_>>());
}

#[test]
fn data_before_its_open_waits_for_it() {
    let mut net = Net::new(SessionConfig::new(1), SessionConfig::new(2));
    let pb = net.a.connect(net.now, B).unwrap();
    net.run_for(Duration::from_millis(100));
    // The first two Opens are lost.
    let mut opens = 0;
    net.drop = Box::new(move |_, t| {
        let open = crate::session::wire::parse(&t.payload)
            .is_ok_and(|(h, _)| h.kind == crate::session::wire::Kind::Open);
        opens += u32::from(open);
        open && opens <= 2
    });
    let ca = net
        .a
        .open_channel(net.now, pb, "late", Qos::low_latency())
        .unwrap();
    stream(&mut net, ca, 0, 20, Duration::from_millis(5));
    net.run_for(Duration::from_secs(1));
    let opened = net.ev_b.iter().find_map(|e| match e {
        SessionEvent::ChannelOpened { channel, name } => Some((*channel, name.clone())),
        _ => None,
    });
    let (cb, name) = opened.expect("B learns the channel");
    assert_eq!(name, "late");
    assert_eq!(net.got(cb), (0..20).collect::<Vec<_>>());
}

fn keyed(seed: u64, psk: &[u8]) -> SessionConfig {
    let mut c = SessionConfig::new(seed);
    c.key = Some(TunnelKey {
        psk: psk.to_vec(),
        salt: seed * 7919,
        cipher: Cipher::ChaCha20Poly1305,
    });
    c
}

#[test]
fn with_a_key_both_transports_work_and_a_wrong_key_gets_nothing() {
    for (qos, m) in [
        (Qos::stream(), Mechanism::Xor(XorLayout::row(3))),
        (Qos::reliable_ordered(), Mechanism::Reliable),
    ] {
        let mut net = Net::new(keyed(1, b"0123456789abcdef"), keyed(2, b"0123456789abcdef"));
        let (ca, cb) = net.pair("ch", qos);
        net.a.set_mechanism(net.now, ca, m).unwrap();
        stream(&mut net, ca, 0, 50, Duration::from_millis(5));
        net.run_for(Duration::from_secs(1));
        assert_eq!(net.got(cb), (0..50).collect::<Vec<_>>(), "{m}");
    }
    let mut net = Net::new(keyed(1, b"0123456789abcdef"), keyed(2, b"fedcba9876543210"));
    let pb = net.a.connect(net.now, B).unwrap();
    net.run_for(Duration::from_secs(10));
    assert!(!net.a.is_connected(pb));
    assert!(
        net.ev_a
            .iter()
            .any(|e| matches!(e, SessionEvent::PeerFailed { .. }))
    );
    assert!(
        net.log.iter().all(|(from, _)| *from == A),
        "B sent nothing to a peer without the key"
    );
    assert!(net.b.stats().unauthenticated > 0);
    assert!(net.ev_b.is_empty());
}

#[test]
fn an_unproven_address_never_gets_more_bytes_than_it_sent() {
    // A spoofed Hello (its answer never reaches the spoofer's victim's
    // sender) and junk from many addresses.
    let mut s = Session::new(SessionConfig::new(3));
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    let mut sent_to = std::collections::BTreeMap::<SocketAddr, (usize, usize)>::new();
    let mut hello = Vec::new();
    for i in 0..200u16 {
        let src = SocketAddr::new(
            std::net::IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1)),
            1000 + i,
        );
        let data: Vec<u8> = if i % 2 == 0 {
            super::wire::write(
                &mut hello,
                0,
                0,
                0,
                &super::wire::Body::Hello {
                    scid: u32::from(i) + 1,
                    min_version: 1,
                    max_version: 1,
                },
            );
            hello.clone()
        } else {
            (0..rng.random_range(0..1300))
                .map(|_| rng.random())
                .collect()
        };
        let now = Instant::from_millis(u64::from(i));
        s.handle_datagram(now, src, &data);
        sent_to.entry(src).or_default().0 += data.len();
        while let Some(t) = s.poll_transmit(now) {
            sent_to.entry(t.dst).or_default().1 += t.payload.len();
        }
    }
    for (addr, (got, sent)) in &sent_to {
        assert!(sent <= got, "{addr}: received {got}, sent {sent}");
    }
    let answered = sent_to.values().filter(|v| v.1 > 0).count();
    assert_eq!(answered, 16, "only max_pending handshakes are held");
    assert_eq!(s.stats().refused, 100 - 16);
    // Unproven handshakes expire.
    s.handle_timeout(Instant::from_secs(10));
    assert!(s.poll_timeout().is_none());
}

#[test]
fn the_same_seed_gives_the_same_bytes() {
    let run = || {
        let mut net = Net::new(SessionConfig::new(5), SessionConfig::new(6));
        let (ca, _) = net.pair("ch", Qos::awareness());
        stream(&mut net, ca, 0, 100, Duration::from_millis(5));
        net.log
            .iter()
            .map(|(f, t)| (*f, t.dst, t.payload.clone()))
            .collect::<Vec<(SocketAddr, SocketAddr, Bytes)>>()
    };
    assert_eq!(run(), run());
}

#[test]
fn limits_and_bad_commands_are_refused_with_a_reason() {
    let mut cfg = SessionConfig::new(1);
    cfg.max_peers = 1;
    cfg.max_channels = 2;
    let mut s = Session::new(cfg);
    let now = Instant::ZERO;
    let p = s.connect(now, B).unwrap();
    assert_eq!(s.connect(now, A), Err(SessionError::TooManyPeers));
    assert_eq!(
        s.open_channel(now, p, "", Qos::bulk()),
        Err(SessionError::BadName)
    );
    s.open_channel(now, p, "x", Qos::low_latency()).unwrap();
    assert!(matches!(
        s.open_channel(now, p, "x", Qos::low_latency()),
        Err(SessionError::NameTaken(_))
    ));
    assert!(matches!(
        s.open_channel(now, p, "y", Qos::awareness().mer_band(0.5, 0.1)),
        Err(SessionError::Qos(_))
    ));
    let c = s.open_channel(now, p, "z", Qos::low_latency()).unwrap();
    assert_eq!(
        s.open_channel(now, p, "w", Qos::low_latency()),
        Err(SessionError::TooManyChannels)
    );
    assert!(matches!(
        s.set_mechanism(
            now,
            c,
            Mechanism::Striped {
                streams: crate::MAX_STREAMS + 1
            }
        ),
        Err(SessionError::Unsupported(_))
    ));
    assert!(matches!(
        s.send(now, c, &vec![0; 2000]),
        Err(SessionError::TooLarge { .. })
    ));
}

/// `len` bytes that differ with `seed` and with the offset.
fn bulk_msg(seed: u32, len: usize) -> Vec<u8> {
    let mut rng = ChaCha8Rng::seed_from_u64(u64::from(seed));
    let mut v = vec![0u8; len];
    rng.fill(&mut v[..]);
    v[..4].copy_from_slice(&seed.to_be_bytes());
    v
}

/// B's deliveries on `ch`: payload and mechanism.
fn deliveries(net: &Net, ch: ChannelId) -> Vec<(Bytes, MechanismKind)> {
    net.ev_b
        .iter()
        .filter_map(|e| match e {
            SessionEvent::Message {
                channel,
                payload,
                via,
                ..
            } if *channel == ch => Some((payload.clone(), *via)),
            _ => None,
        })
        .collect()
}

/// Messages B delivered, on any channel.
fn messages_at_b(net: &Net) -> usize {
    net.ev_b
        .iter()
        .filter(|e| matches!(e, SessionEvent::Message { .. }))
        .count()
}

/// Drops each data datagram A sends with probability `p` (seeded).
fn random_data_from_a(p: f64, seed: u64) -> DropRule {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    Box::new(move |from, t| {
        let data = crate::session::wire::parse(&t.payload)
            .is_ok_and(|(h, _)| h.kind == crate::session::wire::Kind::Data);
        from == A && data && rng.random_bool(p)
    })
}

#[test]
fn blast_carries_whole_messages_over_a_lossy_path_in_order() {
    let mut net = Net::new(SessionConfig::new(1), SessionConfig::new(2));
    let (ca, cb) = net.pair("dataset", Qos::bulk().rate(Bitrate::mbps(20)));
    net.a.set_mechanism(net.now, ca, Mechanism::Blast).unwrap();
    net.drop = random_data_from_a(0.1, 7);
    let sent: Vec<Vec<u8>> = [300_000, 1, 0, 150_001]
        .iter()
        .enumerate()
        .map(|(i, &n)| bulk_msg(i as u32, n.max(4)))
        .collect();
    for m in &sent {
        net.a.send(net.now, ca, m).unwrap();
    }
    let total: usize = sent.iter().map(Vec::len).sum();
    assert_eq!(net.a.queued(ca), total, "held until each transfer ends");
    net.run_for(Duration::from_secs(10));
    assert_eq!(net.a.queued(ca), 0);
    let got = deliveries(&net, cb);
    assert_eq!(got.len(), sent.len(), "every message, once");
    for ((g, via), m) in got.iter().zip(&sent) {
        assert_eq!(&g[..], &m[..], "whole and in order");
        assert_eq!(*via, MechanismKind::Blast);
    }
    // Data went as datagrams, control as stream frames, both ways.
    let frames = |from| {
        net.log
            .iter()
            .filter(|(f, t)| *f == from && t.transport == Transport::FRAME)
            .count()
    };
    assert!(frames(A) >= 2 * sent.len() && frames(B) >= 2 * sent.len());
    let stats = net.a.channel_stats(ca).unwrap();
    assert_eq!(stats.failed, 0);
    // The lost tenth was sent again, and little more.
    let payload: usize = sent.iter().map(Vec::len).sum();
    let overhead = stats.wire_bytes as f64 / payload as f64 - 1.0;
    assert!((0.1..0.3).contains(&overhead), "overhead {overhead}");
}

/// On a path that loses at random, each blast arrives at `1 − p` of its
/// rate whatever the rate: carried from transfer to transfer, the adaptive
/// rate fell with every transfer at 10% loss.
#[test]
fn every_blast_transfer_starts_at_the_channels_rate() {
    let mut net = Net::new(SessionConfig::new(1), SessionConfig::new(2));
    let (ca, cb) = net.pair("dataset", Qos::bulk().rate(Bitrate::mbps(20)));
    net.a.set_mechanism(net.now, ca, Mechanism::Blast).unwrap();
    net.drop = random_data_from_a(0.1, 11);
    for i in 0..20 {
        net.a.send(net.now, ca, &bulk_msg(i, 200_000)).unwrap();
    }
    // When the 10th and the 20th arrived (simulated time, 10 ms steps).
    let start = net.now;
    let mut at = Vec::new();
    while at.len() < 2 && net.now < start + Duration::from_secs(30) {
        net.run_for(Duration::from_millis(10));
        let n = deliveries(&net, cb).len();
        if n >= 10 * (at.len() + 1) {
            at.push(net.now - start);
        }
    }
    let [first, both] = at[..] else {
        panic!("{} delivered", deliveries(&net, cb).len());
    };
    // The second ten take about as long as the first (ratcheting down,
    // over three times as long).
    assert!(
        both - first < first * 13 / 10,
        "{first:?} then {:?}",
        both - first
    );
}

#[test]
fn a_switch_onto_blast_and_off_it_loses_duplicates_and_reorders_nothing() {
    let mut net = Net::new(SessionConfig::new(1), SessionConfig::new(2));
    let (ca, cb) = net.pair("edits", Qos::reliable_ordered());
    net.drop = random_data_from_a(0.05, 3);
    let mut sent = Vec::new();
    let mut push = |net: &mut Net, i: u32| {
        let m = bulk_msg(i, 4 + (i as usize * 7919) % 40_000);
        net.a.send(net.now, ca, &m).unwrap();
        sent.push(m);
    };
    for (round, m) in [
        Mechanism::Reliable,
        Mechanism::Blast,
        Mechanism::Reliable,
        Mechanism::Blast,
    ]
    .into_iter()
    .enumerate()
    {
        net.a.set_mechanism(net.now, ca, m).unwrap();
        for i in 0..20 {
            push(&mut net, round as u32 * 20 + i);
            net.run_for(Duration::from_millis(3));
        }
    }
    net.run_for(Duration::from_secs(10));
    let got: Vec<Bytes> = deliveries(&net, cb).into_iter().map(|(b, _)| b).collect();
    assert_eq!(got.len(), sent.len());
    assert!(got.iter().zip(&sent).all(|(g, m)| g[..] == m[..]));
    assert_eq!(net.b.stats().skipped, 0);
}

#[test]
fn a_transfer_past_the_receivers_bounds_is_refused_and_counted() {
    let mut b = SessionConfig::new(2);
    b.max_blast = 100_000;
    b.blast_memory = 150_000;
    let mut net = Net::new(SessionConfig::new(1), b);
    let (ca, cb) = net.pair("one", Qos::bulk());
    let ca2 = net
        .a
        .open_channel(net.now, ca.peer, "two", Qos::bulk())
        .unwrap();
    net.run_for(Duration::from_millis(100));
    for c in [ca, ca2] {
        net.a.set_mechanism(net.now, c, Mechanism::Blast).unwrap();
    }
    // Past max_blast: refused at once, never tried again.
    net.a.send(net.now, ca, &bulk_msg(1, 100_001)).unwrap();
    net.run_for(Duration::from_secs(2));
    assert_eq!(net.a.channel_stats(ca).unwrap().failed, 1);
    assert!(deliveries(&net, cb).is_empty());
    // Two at once fit max_blast but not blast_memory together: the
    // second Start finds the first's 90 kB held.
    net.a.send(net.now, ca, &bulk_msg(2, 90_000)).unwrap();
    net.a.send(net.now, ca2, &bulk_msg(3, 90_000)).unwrap();
    net.run_for(Duration::from_secs(5));
    let failed = |c| net.a.channel_stats(c).unwrap().failed;
    assert_eq!(failed(ca) + failed(ca2), 2, "one of the two refused");
    assert_eq!(messages_at_b(&net), 1);
    // Once that is done, the memory is free again.
    net.a.send(net.now, ca2, &bulk_msg(4, 90_000)).unwrap();
    net.run_for(Duration::from_secs(5));
    assert_eq!(messages_at_b(&net), 2);
}

#[test]
fn a_blast_transfer_outlasts_the_drain_of_a_switch() {
    let mut net = Net::new(SessionConfig::new(1), SessionConfig::new(2));
    let (ca, cb) = net.pair("dataset", Qos::bulk().rate(Bitrate::mbps(1)));
    net.a.set_mechanism(net.now, ca, Mechanism::Blast).unwrap();
    // 1 MB at 1 Mbit/s: about 8 s, four times the drain.
    let m = bulk_msg(9, 1_000_000);
    net.a.send(net.now, ca, &m).unwrap();
    net.run_for(Duration::from_millis(500));
    net.a
        .set_mechanism(net.now, ca, Mechanism::Reliable)
        .unwrap();
    net.a.send(net.now, ca, b"after").unwrap();
    net.run_for(Duration::from_secs(12));
    let got = deliveries(&net, cb);
    assert_eq!(got.len(), 2);
    assert!(
        got.iter()
            .any(|(g, via)| g[..] == m[..] && *via == MechanismKind::Blast)
    );
}

proptest! {
    #[test]
    fn hostile_control_frames_never_panic_and_reach_nothing(
        frames in proptest::collection::vec(
            (any::<bool>(), 0u16..4, proptest::collection::vec(any::<u8>(), 0..120)),
            1..40,
        ),
    ) {
        let mut net = Net::new(SessionConfig::new(1), SessionConfig::new(2));
        let (ca, _) = net.pair("dataset", Qos::bulk());
        net.a.set_mechanism(net.now, ca, Mechanism::Blast).unwrap();
        // B's connection id for A, from a datagram A sent it.
        let dcid = net
            .log
            .iter()
            .find_map(|(from, t)| {
                let ours = *from == A && t.transport == Transport::Udp;
                ours.then(|| crate::session::wire::parse(&t.payload).ok().map(|(h, _)| h.dcid))
                    .flatten()
            })
            .expect("A sent B a datagram");
        for (peer_owned, channel, payload) in &frames {
            let mut f = Vec::new();
            crate::session::wire::ControlFrame {
                dcid,
                channel: *channel,
                mechanism: MechanismKind::Blast as u8,
                peer_owned: *peer_owned,
                payload,
            }
            .write(&mut f);
            net.b.handle_frame(net.now, A, 0, &f);
            net.run_for(Duration::from_millis(5));
        }
        net.run_for(Duration::from_secs(2));
        let got = net.ev_b.iter().filter(|e| matches!(e, SessionEvent::Message { .. })).count();
        prop_assert_eq!(got, 0);
    }
}

proptest! {
    #[test]
    fn hostile_datagrams_and_frames_never_panic(
        packets in proptest::collection::vec(
            (any::<bool>(), proptest::collection::vec(any::<u8>(), 0..200), 0u8..10),
            1..50,
        )
    ) {
        let mut net = Net::new(SessionConfig::new(1), SessionConfig::new(2));
        let (_, _) = net.pair("ch", Qos::awareness());
        for (frame, mut data, kind) in packets {
            // Make some of them look like ours past the header checks.
            if data.len() >= 16 && kind > 0 {
                data[..4].copy_from_slice(&[0x67, 0x57, 1, kind]);
            }
            if frame {
                net.b.handle_frame(net.now, A, 0, &data);
            } else {
                net.b.handle_datagram(net.now, A, &data);
            }
            net.run_for(Duration::from_millis(1));
        }
    }
}

/// The check of the adaptive controller: a scripted path change
/// (clean, then every 10th data datagram lost, then clean again) makes a
/// channel that asks for at most 1% residual loss within 50 ms move from
/// plain datagrams to FEC once the monitor sees the loss and the hold has
/// passed, and back once the path has been clean for the minimum dwell;
/// from the first switch on no message is lost, and none is delivered
/// twice. (On a short round trip the model may pick the stream instead
/// of FEC, as cheaper and in time; the path here is too long for that.)
#[test]
fn a_scripted_path_change_switches_the_mechanism_without_loss_or_duplicates() {
    use std::cell::Cell;
    use std::rc::Rc;
    let mut net = Net::new(SessionConfig::new(11), SessionConfig::new(12));
    // An 80 ms round trip: a retransmission cannot meet the 50 ms budget.
    net.delay = Duration::from_millis(40);
    let qos = Qos::stream()
        .max_residual_loss(0.01)
        .max_delay(Duration::from_millis(50));
    let (ca, cb) = net.pair("video", qos);
    // The controller's first choice, on a path not yet measured, replaces
    // the heuristic's start (block FEC for a residual target).
    net.run_for(Duration::from_secs(1));
    assert_eq!(net.a.mechanism(ca), Some(Mechanism::Plain));
    net.ev_a.clear();
    let lossy = Rc::new(Cell::new(false));
    let flag = lossy.clone();
    let mut n = 0u32;
    net.drop = Box::new(move |from, t| {
        let data = crate::session::wire::parse(&t.payload)
            .is_ok_and(|(h, _)| h.kind == crate::session::wire::Kind::Data);
        if from == A && data && flag.get() {
            n += 1;
            n % 10 == 0
        } else {
            false
        }
    });
    // (message index, from, to) of every switch.
    let mut switches = Vec::new();
    let mut sent = 0u32;
    let mut at_clean = ChannelStats::default();
    for (phase, (secs, loss)) in [(10, false), (20, true), (40, false), (40, false)]
        .into_iter()
        .enumerate()
    {
        if phase == 3 {
            at_clean = net.a.channel_stats(ca).unwrap();
        }
        lossy.set(loss);
        for _ in 0..secs * 100 {
            net.a.send(net.now, ca, &msg(sent)).expect("send");
            sent += 1;
            net.run_for(Duration::from_millis(10));
            for e in net.ev_a.drain(..) {
                if let SessionEvent::MechanismChanged { from, to, .. } = e {
                    switches.push((sent, from, to));
                }
            }
        }
    }
    net.run_for(Duration::from_secs(2));
    assert!(
        (1..=2).contains(&switches.len()),
        "one switch to FEC, at most one back: {switches:?}"
    );
    let (first, from, to) = switches[0];
    assert_eq!(from, Mechanism::Plain);
    assert!(
        matches!(to, Mechanism::Block { .. } | Mechanism::Xor(_)),
        "{to}"
    );
    assert!((1000..2000).contains(&first), "switched at message {first}");
    if let Some(&(second, from, _)) = switches.get(1) {
        // Back to something cheaper once clean, never within the dwell.
        assert_eq!(from, to);
        assert!(second >= first + 6000, "no sooner than the dwell: {second}");
    }
    // Once clean, whatever it runs on costs little: block FEC's target
    // controller sends no repairs on a channel that loses nothing, and an
    // XOR row of L one parity per L (over the last 40 s, once the loss
    // estimates have forgotten the lossy phase).
    let s = net.a.channel_stats(ca).unwrap();
    let (wire, app) = (
        s.wire_bytes - at_clean.wire_bytes,
        s.sent_bytes - at_clean.sent_bytes,
    );
    assert!(
        (wire as f64) < 1.35 * app as f64,
        "{wire} wire bytes for {app} once clean"
    );
    let got = net.got(cb);
    let after: Vec<u32> = got.iter().copied().filter(|&i| i >= first).collect();
    let mut sorted = after.clone();
    sorted.sort_unstable();
    assert_eq!(
        sorted,
        (first..sent).collect::<Vec<_>>(),
        "nothing lost from the first switch on"
    );
    assert_eq!(net.b.stats().duplicates, 0);
    let lost_before = first as usize - got.iter().filter(|&&i| i < first).count();
    assert!(lost_before > 0, "plain lost messages before the switch");
    assert_eq!(
        net.a.channel_stats(ca).unwrap().switches,
        switches.len() as u64 + 1,
        "and the first choice, from the heuristic's start"
    );
    let path = net.a.path(ca.peer).expect("peer");
    assert!(path.srtt.is_some(), "the monitor measured the round trip");
}

#[test]
fn the_peer_reports_what_each_channel_delivered() {
    let mut net = Net::new(SessionConfig::new(1), SessionConfig::new(2));
    let (ca, _) = net.pair("ch", Qos::low_latency());
    net.a.set_mechanism(net.now, ca, Mechanism::Plain).unwrap();
    net.drop = every_nth_data_from_a(10);
    stream(&mut net, ca, 0, 1000, Duration::from_millis(5));
    net.run_for(Duration::from_secs(1));
    let (covered, delivered) = net.a.delivery_report(ca).expect("channel");
    // The first report sets the baseline; the rest cover all but the
    // first few messages, and every 10th was lost.
    assert!((950..=1000).contains(&covered), "{covered}");
    let loss = 1.0 - delivered as f64 / covered as f64;
    assert!((loss - 0.1).abs() < 0.01, "{loss}");
    assert_eq!(net.a.stats().bad_reports, 0);
}

#[test]
fn channel_reports_round_trip_and_refuse_ragged_bodies() {
    use crate::session::wire::{Body, ChannelCounts, ChannelReports, parse, write};
    let entries = [
        ChannelCounts {
            channel: 1,
            highest: 7,
            delivered: 6,
        },
        ChannelCounts {
            channel: 2,
            highest: u32::MAX,
            delivered: 0,
        },
    ];
    let mut b = Vec::new();
    let r = ChannelReports::encode(&entries, &mut b);
    let mut out = Vec::new();
    assert!(write(&mut out, 1, 2, 3, &Body::ChannelReport(r)));
    match parse(&out).unwrap().1 {
        Body::ChannelReport(r) => assert_eq!(r.iter().collect::<Vec<_>>(), entries),
        other => panic!("{other:?}"),
    }
    out.push(0);
    assert!(parse(&out).is_err());
}

#[test]
fn a_proven_peer_flooding_opens_and_reports_stays_bounded() {
    use crate::session::wire::{Body, ChannelCounts, ChannelReports, write};
    let mut cfg = SessionConfig::new(1);
    cfg.max_channels = 32;
    let mut net = Net::new(cfg, SessionConfig::new(2));
    let (ca, _) = net.pair("ch", Qos::low_latency());
    let dcid = ca.peer.0;
    let mut out = Vec::new();
    let mut rb = Vec::new();
    let (mut sent, mut answered) = (0usize, 0usize);
    for i in 0..5000u32 {
        let name = format!("flood-{i}");
        let body = if i % 2 == 0 {
            Body::Open {
                channel: (i % 30_000) as u16,
                name: &name,
            }
        } else {
            let lie = [ChannelCounts {
                channel: ca.id,
                highest: i * 1000,
                delivered: 0,
            }];
            Body::ChannelReport(ChannelReports::encode(&lie, &mut rb))
        };
        write(&mut out, dcid, i, 0, &body);
        sent += out.len();
        net.a.handle_datagram(net.now, B, &out);
        while let Some(t) = net.a.poll_transmit(net.now) {
            answered += t.payload.len();
        }
    }
    let s = net.a.stats();
    // 32 channels at most, opened by the peer or here; the rest refused.
    assert!(s.unknown_channel >= 2500 - 32, "{s:?}");
    let opened = std::iter::from_fn(|| net.a.poll_event())
        .filter(|e| matches!(e, SessionEvent::ChannelOpened { .. }))
        .count();
    assert!(opened <= 32, "{opened}");
    // Claims of more messages than were ever sent are refused.
    assert!(s.bad_reports >= 2000, "{s:?}");
    assert_eq!(net.a.delivery_report(ca), Some((0, 0)));
    assert!(answered < sent, "replies {answered} for {sent}");
}

#[test]
fn a_bind_frame_names_its_sender_only_under_the_key_and_only_once() {
    let mut net = Net::new(keyed(1, b"0123456789abcdef"), keyed(2, b"0123456789abcdef"));
    let pb = net.a.connect(net.now, B).unwrap();
    net.run_for(Duration::from_millis(100));
    assert!(net.a.is_connected(pb));
    let pa = net
        .ev_b
        .iter()
        .find_map(|e| match e {
            SessionEvent::PeerConnected { peer, .. } => Some(*peer),
            _ => None,
        })
        .expect("B saw A");
    let bind = net.a.bind_frame(pb, 0).expect("established");
    let now = net.now;
    assert_eq!(net.b.accept_frame(now, None, &bind), Some((pa, 0)));
    // A striped channel's second stream binds under its own number.
    let bind3 = net.a.bind_frame(pb, 3).expect("established");
    assert_eq!(net.b.accept_frame(now, None, &bind3), Some((pa, 3)));
    assert!(net.a.bind_frame(pb, crate::MAX_STREAMS).is_none());
    let bad_before = net.b.stats().bad_frames;
    // A replay is refused by the anti-replay window ...
    assert_eq!(net.b.accept_frame(now, None, &bind), None);
    assert_eq!(net.b.accept_frame(now, None, &bind3), None);
    // ... and so is a flipped bit, a truncation, and a stranger's cid.
    let mut flipped = bind.to_vec();
    *flipped.last_mut().unwrap() ^= 1;
    assert_eq!(net.b.accept_frame(now, None, &flipped), None);
    assert_eq!(net.b.accept_frame(now, None, &bind[..3]), None);
    let mut stranger = bind.to_vec();
    stranger[0] ^= 0xff;
    assert_eq!(net.b.accept_frame(now, None, &stranger), None);
    // A stream past the bound is refused whatever the frame.
    let fresh = net.a.bind_frame(pb, 1).expect("established");
    assert_eq!(
        net.b.accept_frame(now, Some(crate::MAX_STREAMS), &fresh),
        None
    );
    assert_eq!(net.b.stats().bad_frames, bad_before + 6);
    assert!(
        net.ev_b
            .iter()
            .all(|e| !matches!(e, SessionEvent::Message { .. }))
    );
    // Before the handshake there is nothing to bind.
    let mut lone = Session::new(SessionConfig::new(9));
    let p = lone.connect(Instant::ZERO, A).unwrap();
    assert!(lone.bind_frame(p, 0).is_none());
}

#[test]
fn a_bind_frame_that_outruns_the_first_datagram_proves_the_address() {
    let mut net = Net::new(SessionConfig::new(1), SessionConfig::new(2));
    let pb = net.a.connect(net.now, B).unwrap();
    // Hello at 0 ms reaches B at 10, the HelloAck reaches A at 20; A's
    // next datagram would reach B at 30.
    net.run_for(Duration::from_millis(25));
    assert!(net.a.is_connected(pb));
    assert!(
        !net.ev_b
            .iter()
            .any(|e| matches!(e, SessionEvent::PeerConnected { .. })),
        "B has not seen A's proof yet"
    );
    let bind = net.a.bind_frame(pb, 0).unwrap();
    let (pa, _) = net
        .b
        .accept_frame(net.now, None, &bind)
        .expect("the bind proves A");
    net.drain();
    assert!(net.b.is_connected(pa));
    assert!(
        net.ev_b
            .iter()
            .any(|e| matches!(e, SessionEvent::PeerConnected { peer, .. } if *peer == pa))
    );
}

/// A switch to another layout or target of the same mechanism starts a
/// new sender toward the peer's one receiver of that kind for the channel,
/// which cannot tell senders apart: the new sender continues the old one's
/// numbers (a restart at 0 looked like packets already seen, and every
/// later message was lost), also across a spell on another mechanism, and
/// the XOR receiver rebuilds at whatever layout the parity has.
#[test]
fn switching_between_layouts_or_targets_of_one_mechanism_loses_nothing() {
    let block = |target| Mechanism::Block {
        target,
        max_delay: Duration::from_millis(50),
    };
    let ms = [
        Mechanism::Xor(XorLayout::row(4)),
        Mechanism::Xor(XorLayout::row(5)),
        Mechanism::Xor(XorLayout::matrix(4, 4)),
        Mechanism::Plain,
        Mechanism::Xor(XorLayout::row(3)),
        block(0.001),
        block(0.0005),
        Mechanism::Plain,
        block(0.0001),
    ];
    let mut net = Net::new(SessionConfig::new(1), SessionConfig::new(2));
    let (ca, cb) = net.pair("ch", Qos::stream());
    net.drop = every_nth_data_from_a(9);
    let mut sent = 0;
    let mut lossless = Vec::new();
    for m in ms {
        net.a.set_mechanism(net.now, ca, m).expect("switch");
        if m != Mechanism::Plain {
            lossless.extend(sent..sent + 100);
        }
        stream(&mut net, ca, sent, 100, Duration::from_millis(3));
        sent += 100;
    }
    net.run_for(Duration::from_secs(3));
    let mut got = net.got(cb);
    got.sort_unstable();
    let missing: Vec<u32> = lossless
        .into_iter()
        .filter(|&i| got.binary_search(&i).is_err())
        .collect();
    assert!(missing.is_empty(), "{} lost: {missing:?}", missing.len());
    assert!(net.b.channel_stats(cb).unwrap().recovered > 50);
    assert_eq!(net.b.stats().duplicates, 0);
}

#[test]
fn each_channels_datagrams_carry_its_code_point_and_control_goes_unmarked() {
    let mut net = Net::new(SessionConfig::new(1), SessionConfig::new(2));
    let (pointer, _) = net.pair("pointer", Qos::awareness());
    let camera = net
        .a
        .open_channel(net.now, pointer.peer, "camera", Qos::stream())
        .unwrap();
    let quiet = net
        .a
        .open_channel(
            net.now,
            pointer.peer,
            "quiet",
            Qos::low_latency().dscp(None),
        )
        .unwrap();
    net.run_for(Duration::from_millis(100));
    let mut marks = Vec::new();
    for (ch, tag) in [(pointer, 1u8), (camera, 2), (quiet, 3)] {
        net.a.set_mechanism(net.now, ch, Mechanism::Plain).unwrap();
        net.a.send(net.now, ch, &[tag; 8]).unwrap();
        while let Some((t, dscp)) = net.a.poll_transmit_marked(net.now) {
            marks.push((t.payload.last().copied(), dscp));
        }
    }
    assert!(
        marks.contains(&(Some(1), Some(Dscp::EF.bits()))),
        "{marks:?}"
    );
    assert!(
        marks.contains(&(Some(2), Some(Dscp::AF41.bits()))),
        "{marks:?}"
    );
    assert!(marks.contains(&(Some(3), None)), "{marks:?}");
    // Control: a probe or report when the path is idle goes unmarked.
    net.run_for(Duration::from_secs(1));
    let mut control = 0;
    net.a.handle_timeout(net.now + Duration::from_secs(1));
    while let Some((t, dscp)) = net.a.poll_transmit_marked(net.now) {
        assert_eq!(t.transport, Transport::Udp);
        assert_eq!(dscp, None, "only channel data is marked");
        control += 1;
    }
    assert!(control > 0, "the monitor reports or probes");
}

/// AFEC's band is held by its receiver (Dyck & Gutwin's NAK and INC),
/// which reads it from the channel's QoS: on 8% random loss a channel
/// asking for a 1-1.2% MER gets copies enough for about that, at 200 and
/// at 30 messages a second, within a minute. The selector must not aim an
/// AFEC under the QoS's band (`select::model`): the receiver would hold
/// the QoS's band anyway, as it did when the tele-immersion telepointer's
/// AFEC, aimed at 1.2% for its windows, measured 5% (the 5-6% band).
#[test]
fn afec_holds_the_channels_band_on_random_loss() {
    use rand::{Rng, SeedableRng};
    for gap_ms in [5u64, 33] {
        let mut net = Net::new(SessionConfig::new(1), SessionConfig::new(2));
        let qos = Qos::awareness()
            .mer_band(0.01, 0.012)
            .lifetime(Duration::from_millis(400));
        let (ca, cb) = net.pair("ch", qos);
        let afec = Mechanism::Afec {
            lo: 0.01,
            hi: 0.012,
        };
        net.a.set_mechanism(net.now, ca, afec).expect("mechanism");
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        net.drop = Box::new(move |from, t| {
            let data = crate::session::wire::parse(&t.payload)
                .is_ok_and(|(h, _)| h.kind == crate::session::wire::Kind::Data);
            from == A && data && rng.random::<f64>() < 0.08
        });
        let n = 1800;
        stream(&mut net, ca, 0, n, Duration::from_millis(gap_ms));
        net.run_for(Duration::from_secs(2));
        // The controller has settled by the second half.
        let tail = net.got(cb).iter().filter(|&&i| i >= n / 2).count();
        let lost = 1.0 - tail as f64 / f64::from(n / 2);
        assert!(lost <= 0.03, "gap {gap_ms} ms: {lost} lost");
        assert!(net.b.channel_stats(cb).expect("channel").recovered > 50);
    }
}

/// With a stream window, the driver holds at most the window of frames
/// unsent: an edit sent behind a bulk transfer takes the stream before
/// the transfer's waiting frames (its profile ranks first), and every
/// frame still arrives exactly once.
#[test]
fn a_stream_window_lets_an_edit_pass_a_bulk_transfer_and_loses_nothing() {
    const WINDOW: usize = 4096;
    let mut cfg = SessionConfig::new(1);
    cfg.stream_window = Some(WINDOW);
    let mut net = Net::new(cfg, SessionConfig::new(2));
    let (bulk_a, bulk_b) = net.pair("bulk", Qos::bulk());
    let ea = net
        .a
        .open_channel(net.now, bulk_a.peer, "edits", Qos::reliable_ordered())
        .expect("open");
    let eb = net
        .b
        .open_channel(net.now, bulk_b.peer, "edits", Qos::reliable_ordered())
        .expect("open");
    net.run_for(Duration::from_millis(100));
    let big = vec![1u8; 2000];
    for _ in 0..20 {
        net.a.send(net.now, bulk_a, &big).expect("send");
    }
    net.a.send(net.now, ea, b"edit").expect("send");
    // What the driver takes: (channel, bytes on the stream), and the frames.
    let mut frames = Vec::new();
    let mut take = |net: &mut Net| {
        let mut got = Vec::new();
        while let Some(t) = net.a.poll_transmit(net.now) {
            if t.transport == Transport::FRAME {
                let f = wire::Frame::parse(&t.payload).expect("a frame");
                got.push((f.channel, t.payload.len() + 4));
                frames.push(t.payload);
            }
        }
        got
    };
    let first = take(&mut net);
    let bytes: usize = first.iter().map(|f| f.1).sum();
    assert!(
        first.iter().all(|f| f.0 == bulk_a.id),
        "{first:?} {:?}",
        net.a.mechanism(bulk_a)
    );
    assert!(
        bytes >= WINDOW && bytes - first[first.len() - 1].1 < WINDOW,
        "{first:?}"
    );
    assert_eq!(
        net.a.stream_waiting(bulk_a.peer),
        (20 - first.len()) * 2000 + 4
    );
    // The driver sends the first frame: the edit goes next.
    net.a.handle_stream_sent(net.now, B, 0, first[0].1);
    let second = take(&mut net);
    assert_eq!(second.first().map(|f| f.0), Some(ea.id), "{second:?}");
    // Then the rest, as the driver sends.
    let mut unsent = bytes - first[0].1 + second.iter().map(|f| f.1).sum::<usize>();
    let mut rounds = 0;
    while net.a.stream_waiting(bulk_a.peer) > 0 {
        net.a.handle_stream_sent(net.now, B, 0, unsent);
        unsent = take(&mut net).iter().map(|f| f.1).sum();
        assert!(unsent > 0, "the window opened and nothing came");
        rounds += 1;
        assert!(rounds < 100, "stalled");
    }
    assert_eq!(frames.len(), 21);
    for f in &frames {
        net.b.handle_frame(net.now, A, 0, f);
    }
    net.drain();
    assert_eq!(net.got(bulk_b).len(), 20);
    assert_eq!(net.got(eb).len(), 1);
}

/// The stream's profiles share it by weight, not strict priority: a
/// media channel put on the stream and sending without pause leaves a
/// bulk channel a quarter of its share (weights 8 and 2), never nothing.
#[test]
fn a_stream_window_shares_the_stream_by_profile_and_starves_none() {
    let mut cfg = SessionConfig::new(1);
    cfg.stream_window = Some(1);
    let mut net = Net::new(cfg, SessionConfig::new(2));
    let (bulk, _) = net.pair("bulk", Qos::bulk());
    let media = net
        .a
        .open_channel(net.now, bulk.peer, "media", Qos::stream())
        .expect("open");
    net.a
        .set_mechanism(net.now, media, Mechanism::Reliable)
        .expect("pin");
    net.run_for(Duration::from_millis(100));
    let frame = vec![3u8; 1000];
    for _ in 0..100 {
        net.a.send(net.now, media, &frame).expect("send");
    }
    for _ in 0..100 {
        net.a.send(net.now, bulk, &frame).expect("send");
    }
    // A window of one byte: one frame at a time, as the driver sends.
    let mut order = Vec::new();
    for _ in 0..50 {
        let mut len = 0;
        while let Some(t) = net.a.poll_transmit(net.now) {
            if t.transport == Transport::FRAME {
                order.push(wire::Frame::parse(&t.payload).expect("a frame").channel);
                len += t.payload.len() + 4;
            }
        }
        net.a.handle_stream_sent(net.now, B, 0, len);
    }
    let bulk_frames = order.iter().filter(|&&c| c == bulk.id).count();
    // Media was sent first; from then on, 4 media frames to each bulk one.
    assert_eq!(order.len(), 50, "{order:?}");
    assert!(
        (9..=12).contains(&bulk_frames),
        "{bulk_frames} of 50: {order:?}"
    );
}

/// Bulk frames on the stream are paced at what the path's capacity
/// leaves after the datagram channels (the monitor measures the link
/// from the dispersion of the datagrams' bursts), so a transfer's TCP
/// cannot fill the queue the real-time channels share; without datagram
/// channels, bulk goes unpaced.
#[test]
fn bulk_frames_are_paced_at_what_the_datagram_channels_leave() {
    // 4 Mbit/s from A to B; a camera-like channel sends 2 Mbit/s in
    // bursts of 5 messages every 20 ms; a bulk channel has 4 MB queued.
    let run = |with_datagrams: bool| {
        let mut cfg = SessionConfig::new(1);
        cfg.stream_window = Some(DEFAULT_STREAM_WINDOW);
        let mut net = Net::new(cfg, SessionConfig::new(2));
        net.rate = Some(4e6 / 8.0);
        net.send_frames = true;
        let (bulk, _) = net.pair("bulk", Qos::bulk());
        let media = net
            .a
            .open_channel(net.now, bulk.peer, "media", Qos::stream())
            .expect("open");
        net.a
            .set_mechanism(net.now, media, Mechanism::Plain)
            .expect("pin");
        let chunk = vec![7u8; 16 * 1024];
        let frame = vec![1u8; 1000];
        let mut bulk_at = Vec::new();
        for tick in 0..250u32 {
            // The transfer starts once the path has been measured.
            if tick == 50 {
                for _ in 0..256 {
                    net.a.send(net.now, bulk, &chunk).expect("send");
                }
            }
            if with_datagrams {
                for _ in 0..5 {
                    net.a.send(net.now, media, &frame).expect("send");
                }
            }
            net.run_for(Duration::from_millis(20));
            if tick == 150 || tick == 249 {
                bulk_at.push(net.a.channel_stats(bulk).expect("open").wire_bytes);
            }
        }
        let rate = (bulk_at[1] - bulk_at[0]) as f64 * 8.0 / 2.0;
        (rate, net.a.stream_waiting(bulk.peer))
    };
    // (4 Mbit/s less the 2 Mbit/s of datagrams) × 0.85, from second 3 to 5.
    let (paced, waiting) = run(true);
    assert!((1.4e6..2.0e6).contains(&paced), "{paced}");
    assert!(waiting > 0);
    // No datagrams: the harness's driver takes every frame at once.
    let (free, waiting) = run(false);
    assert_eq!((free, waiting), (0.0, 0), "all of it went at once");
}

/// Payloads of `ev`'s messages on `ch`, as numbers, with the mechanism
/// that delivered each.
fn got_via(ev: &[SessionEvent], ch: ChannelId) -> Vec<(u32, MechanismKind)> {
    ev.iter()
        .filter_map(|e| match e {
            SessionEvent::Message {
                channel,
                payload,
                via,
                ..
            } if *channel == ch => {
                Some((u32::from_be_bytes(payload[..4].try_into().unwrap()), *via))
            }
            _ => None,
        })
        .collect()
}

/// Frames `from` sent, counted per stream number.
fn frames_per_stream(net: &Net, from: SocketAddr) -> Vec<usize> {
    let mut n = vec![0; usize::from(crate::MAX_STREAMS)];
    for (f, t) in &net.log {
        if let (true, Transport::TcpFrame { stream }) = (*f == from, t.transport) {
            n[usize::from(stream)] += 1;
        }
    }
    n
}

/// A striped channel spreads its frames over its streams (Leigh et al.
/// §4.3), each of which the harness delays by its own amount so they
/// arrive out of order; the ordered channel still delivers every message
/// once, in order. From the side that dialed every stream is used at
/// once; from the other, stream 0 until the dialer has opened the others
/// at its asking. With and without a key (each stream has its own replay
/// window), with and without a stream window.
#[test]
fn a_striped_channel_spreads_over_its_streams_and_delivers_once_in_order() {
    let psk = b"0123456789abcdef";
    for (keyed_pair, window) in [
        (false, None),
        (true, None),
        (true, Some(DEFAULT_STREAM_WINDOW)),
    ] {
        let cfg = |seed| {
            let mut c = if keyed_pair {
                keyed(seed, psk)
            } else {
                SessionConfig::new(seed)
            };
            c.stream_window = window;
            c
        };
        let mut net = Net::new(cfg(1), cfg(2));
        net.send_frames = window.is_some();
        net.send_frames_b = window.is_some();
        net.stream_skew = Duration::from_millis(3);
        let (ca, cb) = net.pair("edits", Qos::reliable_ordered());
        let striped = Mechanism::Striped { streams: 4 };
        net.a.set_mechanism(net.now, ca, striped).expect("striped");
        net.b
            .set_mechanism(net.now, cb, Mechanism::Striped { streams: 3 })
            .expect("striped");
        for i in 0..400 {
            net.a.send(net.now, ca, &msg(i)).expect("send");
            net.b.send(net.now, cb, &msg(i)).expect("send");
            net.run_for(Duration::from_millis(1));
        }
        net.run_for(Duration::from_secs(1));
        let case = format!("key {keyed_pair}, window {window:?}");
        // A dialed: its four streams carried frames.
        let a_streams = frames_per_stream(&net, A);
        assert!(
            a_streams[..4].iter().all(|&n| n >= 50),
            "{case}: {a_streams:?}"
        );
        assert!(
            a_streams[4..].iter().all(|&n| n == 0),
            "{case}: {a_streams:?}"
        );
        let at_b = got_via(&net.ev_b, cb);
        assert_eq!(
            at_b.iter().map(|m| m.0).collect::<Vec<_>>(),
            (0..400).collect::<Vec<_>>(),
            "{case}"
        );
        assert!(at_b.iter().any(|m| m.1 == MechanismKind::Striped), "{case}");
        // B did not dial: it asked A for streams 1 and 2, and used them
        // once A's answers came.
        let b_streams = frames_per_stream(&net, B);
        assert!(
            b_streams[1] >= 50 && b_streams[2] >= 50,
            "{case}: {b_streams:?}"
        );
        assert!(
            b_streams[3..].iter().all(|&n| n == 0),
            "{case}: {b_streams:?}"
        );
        let at_a = got_via(&net.ev_a, ca);
        assert_eq!(
            at_a.iter().map(|m| m.0).collect::<Vec<_>>(),
            (0..400).collect::<Vec<_>>(),
            "{case}"
        );
        for s in [net.a.stats(), net.b.stats()] {
            assert_eq!(
                (s.duplicates, s.bad_frames, s.skipped),
                (0, 0, 0),
                "{case}: {s:?}"
            );
        }
    }
    // More streams than the contract allows are refused.
    let mut net = Net::new(SessionConfig::new(1), SessionConfig::new(2));
    let (ca, _) = net.pair("bulk", Qos::bulk());
    let too_many = Mechanism::Striped {
        streams: crate::MAX_STREAMS + 1,
    };
    assert!(matches!(
        net.a.set_mechanism(net.now, ca, too_many),
        Err(SessionError::Unsupported(_))
    ));
}

#[test]
fn two_sessions_that_connect_to_each_other_at_once_make_one_handshake() {
    for (ca, cb) in [
        (SessionConfig::new(1), SessionConfig::new(2)),
        (keyed(1, b"0123456789abcdef"), keyed(2, b"0123456789abcdef")),
        (SessionConfig::new(5), SessionConfig::new(4)),
    ] {
        let mut net = Net::new(ca, cb);
        let pb = net.a.connect(net.now, B).unwrap();
        let pa = net.b.connect(net.now, A).unwrap();
        net.run_for(Duration::from_secs(1));
        assert!(
            net.a.is_connected(pb) && net.b.is_connected(pa),
            "{:?}",
            net.ev_a
        );
        // Exactly one side answered and gave up its dial.
        let answered = (
            net.a.stats().simultaneous_opens,
            net.b.stats().simultaneous_opens,
        );
        assert!(matches!(answered, (1, 0) | (0, 1)), "{answered:?}");
        assert_ne!(net.a.dialed(pb), net.b.dialed(pa));
        assert_eq!(net.a.dialed(pb), answered.1 == 1);
        // Each `connect`'s peer is the one that connected, once.
        for ev in [&net.ev_a, &net.ev_b] {
            let n = ev
                .iter()
                .filter(|e| matches!(e, SessionEvent::PeerConnected { .. }))
                .count();
            assert_eq!(n, 1, "{ev:?}");
        }
        // And it carries messages both ways.
        let c = net
            .a
            .open_channel(net.now, pb, "ch", Qos::stream())
            .unwrap();
        let back = net
            .b
            .open_channel(net.now, pa, "back", Qos::stream())
            .unwrap();
        net.run_for(Duration::from_millis(100));
        for i in 0..10 {
            net.a.send(net.now, c, &msg(i)).unwrap();
            net.b.send(net.now, back, &msg(i)).unwrap();
        }
        net.run_for(Duration::from_secs(1));
        let got = |ev: &[SessionEvent]| {
            ev.iter()
                .filter(|e| matches!(e, SessionEvent::Message { .. }))
                .count()
        };
        assert_eq!((got(&net.ev_a), got(&net.ev_b)), (10, 10));
    }
}
