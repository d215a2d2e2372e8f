//! Sender and receiver driven against each other in virtual time, over a
//! modelled path: a one-way delay, an optional bottleneck (rate and
//! drop-tail queue) and a seeded or scripted loss pattern on the data.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::*;
use crate::wire::rbudp::{
    AbortReason, Control, ControlRepr, DATA_HEADER_LEN, DataRepr, EndOfBlast, Missing, MissingList,
    Start, push_range,
};
use crate::{Instant, Machine, StreamMachine, Transport};

const SENDER: &str = "10.0.0.1:7400";
const RECEIVER: &str = "10.0.0.2:7400";

fn addr(s: &str) -> SocketAddr {
    s.parse().expect("a valid address")
}

/// Drops a data datagram of `(round, index)` when it says so.
type LossFn = Box<dyn FnMut(u32, u64) -> bool>;

#[derive(PartialEq, Eq, PartialOrd, Ord)]
enum To {
    Sender,
    Receiver,
}

/// A message on the path: when it arrives, a tie-breaker, where it goes,
/// whether it is UDP data (else control), its bytes.
type InFlight = Reverse<(Instant, u64, To, bool, Vec<u8>)>;

/// A sender and a receiver on a path.
struct Pair<K: BlastSink> {
    tx: RbudpSender<Pattern>,
    rx: RbudpReceiver<K>,
    now: Instant,
    delay: Duration,
    /// Bottleneck rate and queue (packets) for the data, if any.
    bottleneck: Option<(Bitrate, usize)>,
    busy_until: Instant,
    queue: BinaryHeap<InFlight>,
    seq: u64,
    loss: LossFn,
    /// The datagram of `(round, index)` arrives with one byte flipped (a
    /// corruption UDP's checksum missed).
    corrupt: Option<(u32, u64)>,
    /// Control frames to the receiver are dropped (a receiver gone dead).
    receiver_deaf: bool,
    /// Data and control from the sender stop (a sender gone dead).
    sender_dead: bool,
    tx_events: Vec<(Instant, SenderEvent)>,
    rx_events: Vec<(Instant, ReceiverEvent)>,
}

impl<K: BlastSink> Pair<K> {
    fn new(tx: SenderConfig, payload: Pattern, sink: K) -> Self {
        Self {
            tx: RbudpSender::new(tx, payload),
            rx: RbudpReceiver::new(ReceiverConfig::new(addr(SENDER)), sink),
            now: Instant::ZERO,
            delay: Duration::from_millis(75),
            bottleneck: None,
            busy_until: Instant::ZERO,
            queue: BinaryHeap::new(),
            seq: 0,
            loss: Box::new(|_, _| false),
            corrupt: None,
            receiver_deaf: false,
            sender_dead: false,
            tx_events: Vec::new(),
            rx_events: Vec::new(),
        }
    }

    fn push(&mut self, at: Instant, to: To, udp: bool, bytes: Vec<u8>) {
        self.seq += 1;
        self.queue.push(Reverse((at, self.seq, to, udp, bytes)));
    }

    fn drain(&mut self) {
        let now = self.now;
        while let Some(t) = self.tx.poll_transmit(now) {
            assert_eq!(t.dst, addr(RECEIVER));
            if self.sender_dead {
                continue;
            }
            let udp = t.transport == Transport::Udp;
            if udp {
                let d = DataRepr::parse(&t.payload).expect("the sender's own data parses");
                if (self.loss)(d.round, d.index) {
                    continue;
                }
                if self.corrupt == Some((d.round, d.index)) {
                    let mut bytes = t.payload.to_vec();
                    bytes[DATA_HEADER_LEN + 100] ^= 0x10;
                    self.push(now + self.delay, To::Receiver, true, bytes);
                    continue;
                }
                if let Some((rate, limit)) = self.bottleneck {
                    let start = self.busy_until.max(now);
                    let wire = (t.payload.len() + crate::units::IP_UDP_OVERHEAD) as u64;
                    let tx_time = rate.transmit_time(wire);
                    let queued =
                        start.saturating_duration_since(now).as_nanos() / tx_time.as_nanos().max(1);
                    if queued as usize >= limit {
                        continue;
                    }
                    self.busy_until = start + tx_time;
                    let at = self.busy_until + self.delay;
                    self.push(at, To::Receiver, true, t.payload.to_vec());
                    continue;
                }
            }
            if !udp && self.receiver_deaf {
                continue;
            }
            self.push(now + self.delay, To::Receiver, udp, t.payload.to_vec());
        }
        while let Some(t) = self.rx.poll_transmit(now) {
            assert_eq!(
                t.transport,
                Transport::FRAME,
                "the receiver sends control only"
            );
            self.push(now + self.delay, To::Sender, false, t.payload.to_vec());
        }
        while let Some(e) = self.tx.poll_event() {
            self.tx_events.push((now, e));
        }
        while let Some(e) = self.rx.poll_event() {
            self.rx_events.push((now, e));
        }
    }

    /// Runs until nothing is left to do or `limit` passes.
    fn run(&mut self, limit: Duration) {
        let end = Instant::ZERO + limit;
        loop {
            self.drain();
            let next = [
                self.queue.peek().map(|Reverse(e)| e.0),
                self.tx.poll_timeout(),
                self.rx.poll_timeout(),
            ]
            .into_iter()
            .flatten()
            .min();
            let Some(next) = next.filter(|&n| n <= end) else {
                break;
            };
            self.now = self.now.max(next);
            while let Some(Reverse((at, ..))) = self.queue.peek() {
                if *at > self.now {
                    break;
                }
                let Reverse((_, _, to, udp, bytes)) = self.queue.pop().expect("peeked");
                match (to, udp) {
                    (To::Receiver, true) => self.rx.handle_datagram(self.now, addr(SENDER), &bytes),
                    (To::Receiver, false) => {
                        self.rx.handle_frame(self.now, addr(SENDER), 0, &bytes)
                    }
                    (To::Sender, _) => self.tx.handle_frame(self.now, addr(RECEIVER), 0, &bytes),
                }
                self.drain();
            }
            if self.tx.poll_timeout().is_some_and(|t| t <= self.now) {
                self.tx.handle_timeout(self.now);
            }
            if self.rx.poll_timeout().is_some_and(|t| t <= self.now) {
                self.rx.handle_timeout(self.now);
            }
        }
    }

    fn sender_outcome(&self) -> Option<&SenderEvent> {
        self.tx_events
            .iter()
            .map(|(_, e)| e)
            .find(|e| matches!(e, SenderEvent::Complete(_) | SenderEvent::Failed(_)))
    }

    fn receiver_outcome(&self) -> Option<&ReceiverEvent> {
        self.rx_events
            .iter()
            .map(|(_, e)| e)
            .find(|e| matches!(e, ReceiverEvent::Complete(_) | ReceiverEvent::Failed(_)))
    }

    fn summary(&self) -> TransferSummary {
        match self.sender_outcome() {
            Some(SenderEvent::Complete(s)) => *s,
            other => panic!("the sender did not complete: {other:?}"),
        }
    }
}

fn config(rate: Bitrate) -> SenderConfig {
    SenderConfig::new(addr(RECEIVER), rate)
}

fn pattern(len: u64) -> Pattern {
    Pattern::new(7, len)
}

fn expected(len: u64) -> Vec<u8> {
    let mut v = vec![0u8; len as usize];
    pattern(len).fill(0, &mut v);
    v
}

fn start_pair(tx: SenderConfig, len: u64) -> Pair<Vec<u8>> {
    let mut p = Pair::new(tx, pattern(len), Vec::new());
    p.tx.start(Instant::ZERO);
    p
}

#[test]
fn completes_in_one_blast_without_loss() {
    let len = 1_000_003;
    let mut p = start_pair(config(Bitrate::mbps(100)), len);
    p.run(Duration::from_secs(60));
    let s = p.summary();
    assert_eq!((s.rounds, s.nak_rounds()), (1, 0));
    assert_eq!(s.packets, len.div_ceil(1400));
    assert_eq!(p.rx.sink(), &expected(len), "every byte in its place");
    assert!(matches!(p.receiver_outcome(), Some(ReceiverEvent::Complete(r)) if r.hash == s.hash));
    assert_eq!(s.hash, pattern(len).hash());
    // Handshake, blast, end-of-blast and Done: about 1.5 round trips
    // beside the blast's own time.
    let blast = Bitrate::mbps(100).transmit_time(s.packets * (1400 + 24 + 28));
    let overhead = s.elapsed() - blast;
    assert!(
        (Duration::from_millis(300)..Duration::from_millis(320)).contains(&overhead),
        "{overhead:?}"
    );
}

//= Leigh et al. §4.2
//# The sender reacts by resending all the missing packets and again
//# waiting for another negative acknowledgement.
#[test]
fn resends_exactly_the_missing_packets_each_round() {
    let len = 1400 * 1000;
    let mut p = start_pair(config(Bitrate::mbps(50)), len);
    // Round 0 loses every tenth packet, round 1 the first of those again.
    p.loss = Box::new(|round, index| match round {
        0 => index % 10 == 3,
        1 => index == 3,
        _ => false,
    });
    p.run(Duration::from_secs(60));
    let s = p.summary();
    assert_eq!(s.rounds, 3, "two NAK rounds");
    assert_eq!(p.tx.stats().retransmitted, 100 + 1);
    assert_eq!(s.datagrams, 1000 + 100 + 1);
    let missing: Vec<u64> = p
        .tx_events
        .iter()
        .filter_map(|(_, e)| match e {
            SenderEvent::Missing { missing, .. } => Some(*missing),
            _ => None,
        })
        .collect();
    assert_eq!(missing, vec![100, 1]);
    assert_eq!(p.rx.sink(), &expected(len));
}

#[test]
fn completes_under_random_loss_with_a_seeded_pattern() {
    let len = 3_000_000;
    for (seed, loss) in [(1, 0.02), (2, 0.2), (3, 0.5)] {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut p = start_pair(config(Bitrate::mbps(200)), len);
        p.loss = Box::new(move |_, _| rng.random_bool(loss));
        p.run(Duration::from_secs(120));
        let s = p.summary();
        let packets = len.div_ceil(1400) as f64;
        // Expected rounds: until packets · loss^rounds < 1.
        let bound = (packets.ln() / (1.0 / loss).ln()).ceil() as u32 + 3;
        assert!(
            s.rounds >= 2 && s.rounds <= bound,
            "{loss}: {} rounds",
            s.rounds
        );
        assert_eq!(p.rx.sink(), &expected(len), "{loss}");
        let sent = p.tx.stats().datagrams as f64;
        assert!(
            (sent / packets - 1.0 / (1.0 - loss)).abs() < 0.1,
            "{loss}: {sent}"
        );
    }
}

#[test]
fn same_seed_same_transfer() {
    let run = |seed| {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut p = start_pair(config(Bitrate::mbps(80)), 500_000);
        p.loss = Box::new(move |_, _| rng.random_bool(0.1));
        p.run(Duration::from_secs(60));
        (p.summary(), p.tx.stats(), p.rx.stats())
    };
    assert_eq!(run(5), run(5));
    assert_ne!(run(5).1, run(6).1);
}

#[test]
fn an_empty_payload_completes() {
    let mut p = start_pair(config(Bitrate::mbps(10)), 0);
    p.run(Duration::from_secs(10));
    assert_eq!(p.summary().packets, 0);
    assert!(matches!(
        p.receiver_outcome(),
        Some(ReceiverEvent::Complete(_))
    ));
}

#[test]
fn the_hash_catches_a_corrupted_byte() {
    // Once in a segment completed by the first blast, once in one
    // completed by a re-blast (a packet of it was lost).
    for (index, lossy) in [(3, false), (700, true)] {
        let mut p = Pair::new(config(Bitrate::mbps(100)), pattern(1_000_000), Vec::new());
        if lossy {
            p.loss = Box::new(|round, index| round == 0 && index == 2);
        }
        p.corrupt = Some((0, index));
        p.tx.start(Instant::ZERO);
        p.run(Duration::from_secs(60));
        assert_eq!(
            p.sender_outcome(),
            Some(&SenderEvent::Failed(BlastError::HashMismatch)),
            "{index}"
        );
        assert_eq!(
            p.receiver_outcome(),
            Some(&ReceiverEvent::Failed(BlastError::HashMismatch))
        );
    }
}

#[test]
fn a_payload_that_changes_fails_against_its_given_hash() {
    let mut cfg = config(Bitrate::mbps(100));
    cfg.hash = Some(pattern(100_000).hash());
    // The file on disk is not the one that was hashed.
    let mut p = Pair::new(cfg, Pattern::new(8, 100_000), Vec::new());
    p.tx.start(Instant::ZERO);
    p.run(Duration::from_secs(10));
    assert_eq!(
        p.sender_outcome(),
        Some(&SenderEvent::Failed(BlastError::SourceChanged))
    );
    assert_eq!(
        p.receiver_outcome(),
        Some(&ReceiverEvent::Failed(BlastError::PeerAborted(
            AbortReason::Storage
        )))
    );
}

#[test]
fn an_unanswered_end_of_blast_is_repeated_then_the_sender_gives_up() {
    let mut p = start_pair(config(Bitrate::mbps(100)), 100_000);
    p.loss = Box::new(|_, index| index == 0);
    // Let the handshake through, then the receiver hears nothing more.
    p.run(Duration::from_millis(160));
    assert!(
        p.tx_events
            .iter()
            .any(|(_, e)| matches!(e, SenderEvent::Accepted { .. }))
    );
    p.receiver_deaf = true;
    p.run(Duration::from_secs(600));
    assert_eq!(
        p.sender_outcome(),
        Some(&SenderEvent::Failed(BlastError::PeerSilent))
    );
    assert_eq!(p.tx.stats().repeated, 5);
    // The first list came back (the end of round 0 was on its way before
    // the receiver went deaf): round 1's end, sent at about 0.31 s, is the
    // one never answered. The waits double from 1 s: 1 + 2 + 4 + 8 + 16 +
    // 32 s after it.
    let (at, _) = p
        .tx_events
        .iter()
        .find(|(_, e)| matches!(e, SenderEvent::Failed(_)))
        .expect("failed");
    let secs = at.as_secs_f64();
    assert!((63.30..63.32).contains(&secs), "{secs}");
    // The receiver never heard the end: its own idle timeout ends it.
    assert_eq!(
        p.receiver_outcome(),
        Some(&ReceiverEvent::Failed(BlastError::PeerSilent))
    );
}

#[test]
fn a_receiver_whose_sender_vanishes_fails_after_its_idle_timeout() {
    let mut p = start_pair(config(Bitrate::mbps(10)), 1_000_000);
    p.run(Duration::from_millis(400));
    p.sender_dead = true;
    p.run(Duration::from_secs(120));
    let (at, e) = p
        .rx_events
        .iter()
        .find(|(_, e)| matches!(e, ReceiverEvent::Failed(_)))
        .expect("the receiver gives up");
    assert_eq!(e, &ReceiverEvent::Failed(BlastError::PeerSilent));
    assert!((90.3..90.5).contains(&at.as_secs_f64()), "{at:?}");
}

/// Data datagram `index` of round 0, session 1, carrying `payload`.
fn datagram(index: u64, payload: &[u8]) -> Vec<u8> {
    let d = DataRepr {
        session: 1,
        round: 0,
        index,
        payload,
    };
    let mut b = vec![0u8; d.buffer_len()];
    d.emit(&mut b);
    b
}

fn frame(msg: Control<'_>) -> Vec<u8> {
    ControlRepr { session: 1, msg }.to_vec()
}

fn missing(round: u32, seq: u32, last: bool, list: MissingList<'_>) -> Vec<u8> {
    frame(Control::Missing(Missing {
        round,
        seq,
        last,
        arrived: 0,
        arrived_bytes: 0,
        span_us: 0,
        total: 1,
        list,
    }))
}

/// A sender that has sent its first blast of 10 packets and waits.
fn waiting_sender() -> RbudpSender<Pattern> {
    let mut tx = RbudpSender::new(config(Bitrate::mbps(1000)), pattern(14_000));
    tx.start(Instant::ZERO);
    while tx.poll_transmit(Instant::ZERO).is_some() {}
    let accept = frame(Control::Accept(crate::wire::rbudp::Accept {
        packet_size: 1400,
        size: 14_000,
        resumed: false,
    }));
    let now = Instant::from_millis(150);
    tx.handle_frame(now, addr(RECEIVER), 0, &accept);
    let mut sent = 0;
    let mut t = now;
    while !tx.is_over() && tx.round() == 0 && sent < 10 {
        while let Some(x) = tx.poll_transmit(t) {
            sent += u64::from(x.transport == Transport::Udp);
        }
        t = tx.poll_timeout().expect("pacing").max(t);
        if sent == 10 {
            break;
        }
    }
    assert_eq!(sent, 10);
    tx
}

#[test]
fn a_list_naming_packets_past_the_end_is_a_protocol_error() {
    let mut tx = waiting_sender();
    let mut body = Vec::new();
    push_range(&mut body, 8, 3); // 8, 9 and 10 of a 10-packet transfer
    let now = Instant::from_millis(400);
    while tx.poll_event().is_some() {}
    tx.handle_frame(
        now,
        addr(RECEIVER),
        0,
        &missing(0, 0, true, MissingList::Ranges { bytes: &body }),
    );
    assert!(matches!(
        tx.poll_event(),
        Some(SenderEvent::Failed(BlastError::Protocol(_)))
    ));
    let abort = tx.poll_transmit(now).expect("an Abort");
    assert!(matches!(
        ControlRepr::parse(&abort.payload).map(|r| r.msg),
        Ok(Control::Abort(_))
    ));
    assert!(tx.is_over() && tx.poll_timeout().is_none());
}

#[test]
fn repeated_and_out_of_place_control_is_counted_and_dropped() {
    let mut tx = waiting_sender();
    let now = Instant::from_millis(400);
    let bits = [0b0100_0000u8]; // packet 1
    let list = MissingList::Bitmap {
        base: 0,
        bits: 2,
        bytes: &bits,
    };
    // A chunk out of order, one for another round, another session, garbage.
    tx.handle_frame(now, addr(RECEIVER), 0, &missing(0, 1, true, list));
    tx.handle_frame(now, addr(RECEIVER), 0, &missing(7, 0, true, list));
    let mut other = missing(0, 0, true, list);
    other[7] = 2;
    tx.handle_frame(now, addr(RECEIVER), 0, &other);
    tx.handle_frame(now, addr(RECEIVER), 0, &[1, 6, 0]);
    let s = tx.stats();
    assert_eq!((s.stale, s.foreign, s.malformed), (2, 1, 1));
    assert_eq!(tx.round(), 0, "still waiting");
    // The real answer, then the same chunk again.
    tx.handle_frame(now, addr(RECEIVER), 0, &missing(0, 0, true, list));
    tx.handle_frame(now, addr(RECEIVER), 0, &missing(0, 0, true, list));
    assert_eq!(tx.round(), 1);
    assert_eq!(tx.stats().stale, 3);
    let sent: Vec<u64> = std::iter::from_fn(|| tx.poll_transmit(now))
        .filter(|t| t.transport == Transport::Udp)
        .map(|t| DataRepr::parse(&t.payload).expect("data").index)
        .collect();
    assert_eq!(sent, vec![1], "exactly the missing packet, once");
}

#[test]
fn the_receiver_answers_repeats_and_drops_stale_messages() {
    let mut rx = RbudpReceiver::new(ReceiverConfig::new(addr(SENDER)), Vec::new());
    let start = frame(Control::Start(Start {
        packet_size: 1000,
        size: 3000,
        rate_bps: 1_000_000,
        hash: None,
        version: None,
    }));
    let t = Instant::ZERO;
    rx.handle_frame(t, addr(SENDER), 0, &start);
    rx.handle_frame(t, addr(SENDER), 0, &start);
    let accepts = std::iter::from_fn(|| rx.poll_transmit(t)).count();
    assert_eq!(accepts, 2, "a repeated Start gets the Accept again");
    // Data before and past the end, of the wrong length, from elsewhere.
    let data = |index: u64, len: usize| datagram(index, &vec![0u8; len]);
    rx.handle_datagram(t, addr(SENDER), &data(3, 1000));
    rx.handle_datagram(t, addr(SENDER), &data(1, 999));
    rx.handle_datagram(t, addr(RECEIVER), &data(0, 1000));
    rx.handle_datagram(t, addr(SENDER), &data(0, 1000));
    rx.handle_datagram(t, addr(SENDER), &data(0, 1000));
    let s = rx.stats();
    assert_eq!(
        (s.out_of_range, s.foreign, s.stored, s.duplicates),
        (2, 1, 1, 1)
    );
    let eob = |round| {
        frame(Control::EndOfBlast(EndOfBlast {
            round,
            sent: 3,
            hash: Some([1; 32]),
        }))
    };
    rx.handle_frame(t, addr(SENDER), 0, &eob(0));
    let at = rx.poll_timeout().expect("the answer waits to settle");
    assert_eq!(at, t + Duration::from_millis(5));
    rx.handle_timeout(at);
    let list: Vec<Vec<u8>> = std::iter::from_fn(|| rx.poll_transmit(at))
        .map(|t| t.payload.to_vec())
        .collect();
    assert_eq!(list.len(), 1);
    let Ok(Control::Missing(m)) = ControlRepr::parse(&list[0]).map(|r| r.msg) else {
        panic!("a missing list")
    };
    assert_eq!(m.list.runs().collect::<Vec<_>>(), vec![1..3]);
    assert_eq!((m.arrived, m.total, m.last), (2, 2, true));
    // An older round's end is dropped; the same round's is answered again.
    rx.handle_frame(at, addr(SENDER), 0, &eob(1));
    rx.handle_frame(at, addr(SENDER), 0, &eob(0));
    assert!(rx.stats().stale >= 2);
}

/// The missing-list chunks a receiver answers a blast of `n` one-byte
/// packets with, when the packets `lost` names did not arrive, and the
/// sink they were stored in.
fn answer_to(n: u64, lost: impl Fn(u64) -> bool) -> (Vec<Vec<u8>>, PatternSink) {
    let mut rx = RbudpReceiver::new(ReceiverConfig::new(addr(SENDER)), PatternSink::new(7));
    let start = frame(Control::Start(Start {
        packet_size: 1,
        size: n,
        rate_bps: 1,
        hash: None,
        version: None,
    }));
    let t = Instant::ZERO;
    rx.handle_frame(t, addr(SENDER), 0, &start);
    let mut payload = [0u8; 1];
    for index in (0..n).filter(|&i| !lost(i)) {
        pattern(n).fill(index, &mut payload);
        rx.handle_datagram(t, addr(SENDER), &datagram(index, &payload));
    }
    let eob = EndOfBlast {
        round: 0,
        sent: n,
        hash: None,
    };
    rx.handle_frame(t, addr(SENDER), 0, &frame(Control::EndOfBlast(eob)));
    rx.handle_timeout(t + Duration::from_secs(1));
    let chunks = std::iter::from_fn(|| rx.poll_transmit(t))
        .skip(1) // the Accept
        .map(|t| t.payload.to_vec())
        .collect();
    (chunks, rx.into_sink())
}

#[test]
fn sparse_losses_go_back_gap_coded_in_a_few_bytes_each() {
    // 1% scattered loss over 140 000 packets (a 200 MB file's first
    // blast at 1400 bytes a packet is 142 858): the list fits in ten
    // TCP segments, where a bitmap or ranges would not.
    let n = 140_000;
    let lost = |i: u64| (i * 2_654_435_761) % 100 == 0;
    let (chunks, _) = answer_to(n, lost);
    assert_eq!(chunks.len(), 1);
    let Ok(Control::Missing(m)) = ControlRepr::parse(&chunks[0]).map(|r| r.msg) else {
        panic!("a chunk")
    };
    assert!(matches!(m.list, MissingList::Gaps { .. }), "{:?}", m.list);
    assert!(m.list.wire_len() < 10 * 1448, "{} bytes", m.list.wire_len());
    let named: Vec<u64> = m.list.runs().flatten().collect();
    let want: Vec<u64> = (0..n).filter(|&i| lost(i)).collect();
    assert_eq!(named, want);
}

#[test]
fn long_lists_are_cut_into_bounded_chunks() {
    // 600 000 one-byte packets, every other one lost: bitmaps of 2^18
    // packets each.
    let n: u64 = 600_000;
    let (chunks, sink) = answer_to(n, |i| i % 2 == 1);
    assert_eq!(chunks.len(), 3);
    let mut named = 0;
    for (i, c) in chunks.iter().enumerate() {
        assert!(c.len() <= crate::wire::rbudp::MAX_CONTROL_LEN);
        let Ok(Control::Missing(m)) = ControlRepr::parse(c).map(|r| r.msg) else {
            panic!("a chunk")
        };
        assert_eq!((m.seq, m.last, m.total), (i as u32, i == 2, n / 2));
        assert!(matches!(m.list, MissingList::Bitmap { .. }));
        for r in m.list.runs() {
            assert_eq!((r.end - r.start, r.start % 2), (1, 1));
            named += 1;
        }
    }
    assert_eq!(named, n / 2);
    assert_eq!(sink.written, n / 2);
    assert!(sink.wrong.is_empty());
}

#[test]
fn offsets_past_four_gibibytes_are_stored_where_they_belong() {
    /// Records where writes land.
    #[derive(Default, Debug)]
    struct Sparse(Vec<(u64, usize)>);
    impl BlastSink for Sparse {
        fn write_at(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
            self.0.push((offset, data.len()));
            Ok(())
        }
        fn read_at(&mut self, _: u64, _: &mut [u8]) -> io::Result<()> {
            Ok(())
        }
    }
    let size: u64 = 1 << 40; // 1 TiB
    let ps = MAX_PACKET_SIZE;
    let mut rx = RbudpReceiver::new(ReceiverConfig::new(addr(SENDER)), Sparse::default());
    rx.handle_frame(
        Instant::ZERO,
        addr(SENDER),
        0,
        &frame(Control::Start(Start {
            packet_size: ps,
            size,
            rate_bps: 1,
            hash: None,
            version: None,
        })),
    );
    let last = packet_count(size, ps) - 1;
    let payload = vec![0u8; packet_len(size, ps, last)];
    rx.handle_datagram(Instant::ZERO, addr(SENDER), &datagram(last, &payload));
    assert_eq!(rx.sink().0, vec![(last * u64::from(ps), payload.len())]);
    assert_eq!(last * u64::from(ps) + payload.len() as u64, size);
    assert_eq!(rx.missing(), last);
}

#[test]
fn refuses_what_it_cannot_take() {
    let mut cfg = ReceiverConfig::new(addr(SENDER));
    cfg.max_size = 1000;
    let mut rx = RbudpReceiver::new(cfg, Vec::new());
    let start = |size, packet_size| {
        frame(Control::Start(Start {
            packet_size,
            size,
            rate_bps: 1,
            hash: None,
            version: None,
        }))
    };
    rx.handle_frame(Instant::ZERO, addr(SENDER), 0, &start(1001, 100));
    assert!(matches!(
        rx.poll_event(),
        Some(ReceiverEvent::Failed(BlastError::Refused(_)))
    ));
    let abort = rx.poll_transmit(Instant::ZERO).expect("an Abort");
    assert!(matches!(
        ControlRepr::parse(&abort.payload).map(|r| r.msg),
        Ok(Control::Abort(a)) if a.reason == AbortReason::Refused
    ));
    let mut rx = RbudpReceiver::new(ReceiverConfig::new(addr(SENDER)), Vec::new());
    rx.handle_frame(Instant::ZERO, addr(SENDER), 0, &start(10, 0));
    assert!(matches!(
        rx.poll_event(),
        Some(ReceiverEvent::Failed(BlastError::Refused(_)))
    ));
}

/// A 90 Mbit/s blast into a 50 Mbit/s bottleneck with a short queue.
fn overloaded(rate_control: RateControl) -> Pair<Vec<u8>> {
    let mut cfg = config(Bitrate::mbps(90));
    cfg.rate_control = rate_control;
    let mut p = start_pair(cfg, 5_000_000);
    p.bottleneck = Some((Bitrate::mbps(50), 50));
    p.run(Duration::from_secs(120));
    p
}

#[test]
fn the_adaptive_rate_settles_just_below_the_bottleneck() {
    let fixed = overloaded(RateControl::Fixed);
    let adaptive = overloaded(RateControl::adaptive());
    let (f, a) = (fixed.summary(), adaptive.summary());
    let next: Vec<(Option<Bitrate>, Bitrate)> = adaptive
        .tx_events
        .iter()
        .filter_map(|(_, e)| match e {
            SenderEvent::Missing {
                arrival_rate,
                next_rate,
                ..
            } => Some((*arrival_rate, *next_rate)),
            _ => None,
        })
        .collect();
    // The first blast arrives at the bottleneck's rate; the next goes just
    // below it, and loses nothing.
    let (arrived, rate) = next[0];
    let arrived = arrived.expect("measured").as_bps() as f64;
    assert!((arrived / 50e6 - 1.0).abs() < 0.02, "{arrived}");
    assert!((rate.as_bps() as f64 / 50e6 - 0.95).abs() < 0.03, "{rate}");
    assert_eq!(a.rounds, 2, "{next:?}");
    assert!(
        f.rounds > a.rounds + 2,
        "fixed {} adaptive {}",
        f.rounds,
        a.rounds
    );
    assert!(adaptive.tx.stats().datagrams < fixed.tx.stats().datagrams);
    assert!(
        a.elapsed() <= f.elapsed(),
        "{:?} {:?}",
        a.elapsed(),
        f.elapsed()
    );
    assert_eq!(adaptive.rx.sink(), &expected(5_000_000));
}

#[test]
fn pacing_holds_the_configured_rate() {
    let mut p = start_pair(config(Bitrate::mbps(20)), 2_000_000);
    p.run(Duration::from_secs(60));
    let s = p.summary();
    let wire = p.tx.stats().bytes + p.tx.stats().datagrams * 28;
    let blast = s.elapsed().as_secs_f64() - 0.3; // less the round trips
    let rate = wire as f64 * 8.0 / blast;
    assert!((rate / 20e6 - 1.0).abs() < 0.01, "{rate}");
}

#[test]
fn bitmap_finds_set_and_clear_bits() {
    let mut b = Bitmap::new(130).expect("small");
    assert!(b.set(0) && b.set(64) && b.set(129) && !b.set(129) && !b.set(130));
    assert_eq!(b.ones(), 3);
    assert_eq!(b.next(1, true), Some(64));
    assert_eq!(b.next(65, true), Some(129));
    assert_eq!(b.next(0, false), Some(1));
    assert_eq!(b.next(129, false), None);
    assert_eq!(b.next(130, true), None);
}

#[test]
fn pattern_fills_any_range_consistently() {
    let p = pattern(100);
    let mut whole = [0u8; 100];
    p.fill(0, &mut whole);
    for (at, len) in [(0, 1), (3, 9), (7, 17), (64, 36)] {
        let mut part = vec![0u8; len];
        p.fill(at as u64, &mut part);
        assert_eq!(&part[..], &whole[at..at + len]);
    }
    assert_ne!(whole, [0u8; 100]);
    let mut h = blake3::Hasher::new();
    h.update(&whole);
    assert_eq!(p.hash(), *h.finalize().as_bytes());
}

/// A memory sink that keeps a resume record, as a file sink keeps one on
/// disk.
#[derive(Debug, Default)]
struct Keeping {
    data: Vec<u8>,
    record: Option<(ResumeKey, Vec<u64>)>,
    checkpoints: u32,
}

impl BlastSink for Keeping {
    fn prepare(&mut self, size: u64) -> io::Result<()> {
        self.record = None;
        self.data.prepare(size)
    }
    fn write_at(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.data.write_at(offset, data)
    }
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        BlastSink::read_at(&mut self.data, offset, buf)
    }
    fn resume(&mut self, key: &ResumeKey) -> io::Result<Partial> {
        Ok(match self.record.take() {
            Some((k, words)) if k == *key => Partial::Held(words),
            Some(_) => Partial::Discarded,
            None => Partial::None,
        })
    }
    fn checkpoint(&mut self, key: &ResumeKey, tally: &[u64]) -> io::Result<()> {
        self.checkpoints += 1;
        self.record = Some((*key, tally.to_vec()));
        Ok(())
    }
    fn completed(&mut self) -> io::Result<()> {
        self.record = None;
        Ok(())
    }
}

fn resumable(version: u64) -> SenderConfig {
    let mut cfg = config(Bitrate::mbps(100));
    cfg.version = Some(version);
    cfg
}

/// A transfer of `len` bytes cut off `after` into its first blast (both
/// ends gone; the driver records the receiver's tally): the sink it left.
fn interrupted(len: u64, version: u64, after: Duration) -> Keeping {
    let mut p = Pair::new(resumable(version), pattern(len), Keeping::default());
    p.loss = Box::new(|_, index| index % 10 == 3);
    p.tx.start(Instant::ZERO);
    p.run(after);
    assert!(p.receiver_outcome().is_none(), "still under way");
    let now = p.now;
    p.rx.checkpoint(now).unwrap();
    p.rx.into_sink()
}

#[test]
fn an_interrupted_transfer_resumes_with_only_what_is_missing() {
    let len = 3_000_000;
    let sink = interrupted(len, 42, Duration::from_millis(320));
    let (_, held) = sink.record.clone().expect("the tally was recorded");
    let held: u64 = held.iter().map(|w| u64::from(w.count_ones())).sum();
    let packets = packet_count(len, DEFAULT_PACKET_SIZE);
    assert!(held > 0 && held < packets, "{held} of {packets}");
    assert!(sink.checkpoints >= 1);

    let mut p = Pair::new(resumable(42), pattern(len), sink);
    p.tx.start(Instant::ZERO);
    p.run(Duration::from_secs(60));
    p.summary();
    assert!(p.tx_events.iter().any(|(_, e)| *e
        == SenderEvent::Resuming {
            held,
            missing: packets - held
        }));
    assert!(p.rx_events.iter().any(|(_, e)| matches!(
        e,
        ReceiverEvent::Started { held: h, discarded: false, .. } if *h == held
    )));
    // Only what was missing crossed the path.
    assert_eq!(p.tx.stats().datagrams, packets - held);
    let sink = p.rx.into_sink();
    assert_eq!(sink.data, expected(len));
    assert_eq!(sink.record, None, "a completed transfer forgets its record");
}

#[test]
fn a_changed_payload_starts_over_and_says_so() {
    let len = 1_000_000;
    let sink = interrupted(len, 1, Duration::from_millis(260));
    // Version 2: the file changed since the interruption.
    let mut p = Pair::new(resumable(2), pattern(len), sink);
    p.tx.start(Instant::ZERO);
    p.run(Duration::from_secs(60));
    p.summary();
    assert!(p.rx_events.iter().any(|(_, e)| matches!(
        e,
        ReceiverEvent::Started {
            held: 0,
            discarded: true,
            ..
        }
    )));
    assert!(
        !p.tx_events
            .iter()
            .any(|(_, e)| matches!(e, SenderEvent::Resuming { .. }))
    );
    assert_eq!(
        p.tx.stats().datagrams,
        packet_count(len, DEFAULT_PACKET_SIZE)
    );
    assert_eq!(p.rx.into_sink().data, expected(len));
}

#[test]
fn a_resume_with_everything_held_sends_nothing_and_checks_the_hash() {
    let len = 500_000;
    let packets = packet_count(len, DEFAULT_PACKET_SIZE);
    let key = ResumeKey {
        size: len,
        packet_size: DEFAULT_PACKET_SIZE,
        version: 9,
    };
    let mut all = Bitmap::new(packets).unwrap();
    for i in 0..packets {
        all.set(i);
    }
    let sink = Keeping {
        data: expected(len),
        record: Some((key, all.words().to_vec())),
        checkpoints: 0,
    };
    let mut p = Pair::new(resumable(9), pattern(len), sink);
    p.tx.start(Instant::ZERO);
    p.run(Duration::from_secs(60));
    assert_eq!(p.summary().hash, pattern(len).hash());
    assert_eq!(p.tx.stats().datagrams, 0);

    // The same, but what is held is not what the record claims (a power
    // cut lost it): the hash catches it and the record is forgotten.
    let sink = Keeping {
        data: vec![0; len as usize],
        record: Some((key, all.words().to_vec())),
        checkpoints: 0,
    };
    let mut p = Pair::new(resumable(9), pattern(len), sink);
    p.tx.start(Instant::ZERO);
    p.run(Duration::from_secs(60));
    assert_eq!(
        p.sender_outcome(),
        Some(&SenderEvent::Failed(BlastError::HashMismatch))
    );
    assert_eq!(p.rx.into_sink().record, None);
}

#[test]
fn a_sender_that_cannot_resume_ignores_a_held_partial() {
    // No version: the receiver is not asked to resume, and starts over.
    let len = 200_000;
    let mut sink = interrupted(len, 5, Duration::from_millis(232));
    sink.record = None;
    let mut p = Pair::new(config(Bitrate::mbps(100)), pattern(len), sink);
    p.tx.start(Instant::ZERO);
    p.run(Duration::from_secs(60));
    p.summary();
    assert_eq!(p.rx.into_sink().data, expected(len));
}

#[test]
fn a_resume_list_cut_short_is_asked_for_again() {
    let mut tx = RbudpSender::new(resumable(7), pattern(14_000));
    tx.start(Instant::ZERO);
    while tx.poll_transmit(Instant::ZERO).is_some() {}
    let accept = frame(Control::Accept(crate::wire::rbudp::Accept {
        packet_size: 1400,
        size: 14_000,
        resumed: true,
    }));
    let mut ranges = Vec::new();
    push_range(&mut ranges, 2, 3);
    let first = missing(
        crate::wire::rbudp::RESUME_ROUND,
        0,
        false,
        MissingList::Ranges { bytes: &ranges },
    );
    let t = Instant::from_millis(150);
    tx.handle_frame(t, addr(RECEIVER), 0, &accept);
    tx.handle_frame(t, addr(RECEIVER), 0, &first);
    // The rest of the list never comes: nothing is blasted, and the Start
    // goes again.
    assert!(tx.poll_transmit(t).is_none());
    let later = tx.poll_timeout().expect("a deadline for the list");
    tx.handle_timeout(later);
    let again = tx.poll_transmit(later).expect("the Start, repeated");
    assert!(matches!(
        ControlRepr::parse(&again.payload).unwrap().msg,
        Control::Start(Start {
            version: Some(7),
            ..
        })
    ));
    // A repeat of the whole answer: the first blast sends exactly 2..5.
    let last = missing(
        crate::wire::rbudp::RESUME_ROUND,
        0,
        true,
        MissingList::Ranges { bytes: &ranges },
    );
    tx.handle_frame(later, addr(RECEIVER), 0, &accept);
    tx.handle_frame(later, addr(RECEIVER), 0, &last);
    let mut sent = Vec::new();
    let mut now = later;
    while let Some(t) = tx.poll_transmit(now) {
        if t.transport == Transport::Udp {
            sent.push(DataRepr::parse(&t.payload).unwrap().index);
        }
        now += Duration::from_millis(1);
    }
    assert_eq!(sent, [2, 3, 4]);
    assert!(std::iter::from_fn(|| tx.poll_event()).any(|e| e
        == SenderEvent::Resuming {
            held: 7,
            missing: 3
        }));
}
