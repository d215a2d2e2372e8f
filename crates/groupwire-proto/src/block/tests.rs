//! Sender and receiver together over a scripted one-way path.

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use proptest::prelude::*;

use super::*;
use crate::control::ControllerKind;
use crate::wire::block::{DATA_HEADER_LEN, DataRepr, Symbol};

const A: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 1);
const B: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 2);
const DELAY: Duration = Duration::from_millis(5);

/// Sender at A, receiver at B, `DELAY` each way; `drop(seq)` decides which
/// data packets the path loses. The application sends `count` datagrams of
/// varying length, one every `gap`.
struct Run {
    tx: BlockSender,
    rx: BlockReceiver,
    delivered: Vec<Delivery>,
    /// `(seq, sent at, repair, block)` of every data packet.
    sent: Vec<(u32, Instant, bool, u32)>,
    /// `(k, m)` of every block with repairs, from its repair packets.
    shapes: BTreeMap<u32, (u8, u8)>,
}

fn payload(i: u32) -> Bytes {
    let len = 20 + (i as usize * 37) % 700;
    Bytes::from(
        (0..len)
            .map(|j| (i as usize * 7 + j) as u8)
            .collect::<Vec<_>>(),
    )
}

fn run(
    tx_cfg: SenderConfig,
    rx_cfg: ReceiverConfig,
    count: u32,
    gap: Duration,
    mut drop: impl FnMut(u32) -> bool,
) -> Run {
    let mut tx = BlockSender::new(tx_cfg);
    let mut rx = BlockReceiver::new(rx_cfg);
    let mut to_rx: VecDeque<(Instant, Bytes)> = VecDeque::new();
    let mut to_tx: VecDeque<(Instant, Bytes)> = VecDeque::new();
    let mut delivered = Vec::new();
    let mut sent = Vec::new();
    let mut shapes = BTreeMap::new();
    let mut next_app = Some(Instant::ZERO);
    let mut i = 0;
    let end = Instant::ZERO + gap * count + Duration::from_secs(1);
    let mut now = Instant::ZERO;
    while now < end {
        if next_app.is_some_and(|t| t <= now) {
            tx.send(now, payload(i)).expect("accepted");
            i += 1;
            next_app = (i < count).then(|| now + gap);
            if i == count {
                tx.flush();
            }
        }
        tx.handle_timeout(now);
        rx.handle_timeout(now);
        while let Some(t) = tx.poll_transmit(now) {
            let d = DataRepr::parse_with(&t.payload, true).expect("valid");
            sent.push((d.seq, now, d.symbol != Symbol::Source, d.block));
            if let Symbol::Repair { k, m } = d.symbol {
                shapes.insert(d.block, (k, m));
            }
            if !drop(d.seq) {
                to_rx.push_back((now + DELAY, t.payload));
            }
        }
        while let Some(t) = rx.poll_transmit(now) {
            to_tx.push_back((now + DELAY, t.payload));
        }
        while to_rx.front().is_some_and(|(at, _)| *at <= now) {
            let (_, p) = to_rx.pop_front().expect("checked");
            rx.handle_datagram(now, A, &p);
        }
        while to_tx.front().is_some_and(|(at, _)| *at <= now) {
            let (_, p) = to_tx.pop_front().expect("checked");
            tx.handle_datagram(now, B, &p);
        }
        while let Some(t) = rx.poll_transmit(now) {
            to_tx.push_back((now + DELAY, t.payload));
        }
        delivered.extend(std::iter::from_fn(|| rx.poll_event()));
        // Next instant anything happens.
        let mut next = [
            next_app,
            tx.poll_timeout(),
            rx.poll_timeout(),
            to_rx.front().map(|x| x.0),
            to_tx.front().map(|x| x.0),
        ]
        .into_iter()
        .flatten()
        .filter(|t| *t > now)
        .min()
        .unwrap_or(end);
        if [tx.poll_timeout(), rx.poll_timeout()]
            .into_iter()
            .flatten()
            .any(|t| t <= now)
        {
            next = now + Duration::from_micros(1);
        }
        now = next;
    }
    Run {
        tx,
        rx,
        delivered,
        sent,
        shapes,
    }
}

fn geneva(k: usize, ctrl: ControllerKind) -> SenderConfig {
    let mut c = SenderConfig::new(B, k);
    c.controller = ctrl.into();
    c
}

#[test]
fn k_from_rate_is_the_papers() {
    use crate::units::{Bitrate, DataSize};
    // §3.2.2: 25 Mbit/s of 1500-byte packets in 10 ms: 20.83 -> 20.
    assert_eq!(
        k_for_rate(Bitrate::mbps(25), DataSize::bytes(1500), DEFAULT_SYN),
        20
    );
    assert_eq!(
        k_for_rate(Bitrate::mbps(30), DataSize::bytes(1500), DEFAULT_SYN),
        25
    );
    assert_eq!(
        k_for_rate(Bitrate::kbps(1), DataSize::bytes(1500), DEFAULT_SYN),
        1
    );
    assert_eq!(
        k_for_rate(Bitrate::gbps(100), DataSize::bytes(1500), DEFAULT_SYN),
        254
    );
}

#[test]
fn lossless_stream_arrives_whole_and_in_order() {
    let r = run(
        geneva(10, ControllerKind::StaticSmall),
        ReceiverConfig::default(),
        100,
        Duration::from_millis(1),
        |_| false,
    );
    assert_eq!(r.delivered.len(), 100);
    for (i, d) in r.delivered.iter().enumerate() {
        assert_eq!(d.data_seq, i as u64);
        assert_eq!(d.payload, payload(i as u32));
        assert!(!d.recovered);
    }
    let s = r.tx.stats();
    assert_eq!((s.source_sent, s.repair_sent, s.blocks), (100, 80, 10));
    assert_eq!(r.rx.stats().lost_packets, 0);
    assert!(s.reports > 50, "a report every 10 ms: {}", s.reports);
    assert!(s.last_rtt.is_some());
}

#[test]
fn losses_up_to_fwnd_are_rebuilt_byte_for_byte() {
    // Lose 8 packets of the second block (seqs 18..26 are its sources 0..8).
    let r = run(
        geneva(10, ControllerKind::StaticSmall),
        ReceiverConfig::default(),
        30,
        Duration::from_millis(1),
        |seq| (18..26).contains(&seq),
    );
    assert_eq!(r.delivered.len(), 30);
    let rec: Vec<u64> = r
        .delivered
        .iter()
        .filter(|d| d.recovered)
        .map(|d| d.data_seq)
        .collect();
    assert_eq!(rec, (10..18).collect::<Vec<_>>());
    for (i, d) in r.delivered.iter().enumerate() {
        assert_eq!(d.data_seq, i as u64, "in order");
        assert_eq!(d.payload, payload(i as u32));
    }
    let s = r.rx.stats();
    assert_eq!((s.recovered, s.unrecovered, s.decodes), (8, 0, 1));
    assert_eq!(s.bursty_loss_events, 1, "a gap of 8 > 3");
    assert_eq!(r.tx.stats().peer_recovered, 8, "the sender learns it");
}

#[test]
fn more_losses_than_fwnd_are_given_up_and_delivery_goes_on() {
    let r = run(
        geneva(10, ControllerKind::Static(2)),
        ReceiverConfig::default(),
        30,
        Duration::from_millis(1),
        |seq| (12..15).contains(&seq), // 3 of block 1's 12 packets, m = 2
    );
    let s = r.rx.stats();
    assert_eq!(s.unrecovered, 3);
    assert_eq!(s.recovered, 0);
    assert_eq!(r.delivered.len(), 27);
    let seqs: Vec<u64> = r.delivered.iter().map(|d| d.data_seq).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "still in order");
}

#[test]
fn unordered_mode_delivers_at_once_and_rebuilt_packets_later() {
    let rx = ReceiverConfig {
        ordered: false,
        ..ReceiverConfig::default()
    };
    let r = run(
        geneva(10, ControllerKind::StaticSmall),
        rx,
        20,
        Duration::from_millis(1),
        |seq| seq == 3,
    );
    let order: Vec<u64> = r.delivered.iter().map(|d| d.data_seq).collect();
    let pos3 = order.iter().position(|&d| d == 3).expect("rebuilt");
    let pos4 = order.iter().position(|&d| d == 4).expect("received");
    assert!(
        pos4 < pos3,
        "4 is not held back by the hole at 3: {order:?}"
    );
    assert!(r.delivered[pos3].recovered);
}

#[test]
fn pacing_spaces_packets_by_syn_over_fwnd_plus_k() {
    // k = 10, Fwnd = 8: IPG = 10 ms / 18. The app sends a block at once.
    let r = run(
        geneva(10, ControllerKind::StaticSmall),
        ReceiverConfig::default(),
        10,
        Duration::from_micros(1),
        |_| false,
    );
    let times: Vec<Instant> = r.sent.iter().map(|s| s.1).collect();
    assert_eq!(times.len(), 18);
    let ipg = Duration::from_millis(10) / 18;
    for w in times.windows(2) {
        let d = w[1].saturating_duration_since(w[0]);
        assert!(d >= ipg && d <= ipg + Duration::from_micros(2), "{d:?}");
    }
}

#[test]
fn low_rate_stream_is_flushed_after_the_block_wait() {
    let mut cfg = geneva(20, ControllerKind::Static(2));
    cfg.pacing = false;
    cfg.max_block_wait = Some(Duration::from_millis(5));
    let r = run(
        cfg,
        ReceiverConfig {
            ordered: false,
            ..ReceiverConfig::default()
        },
        6,
        Duration::from_millis(3),
        |seq| seq == 1,
    );
    // 6 packets at 3 ms: blocks close after 5 ms with 2 sources each.
    assert_eq!(r.delivered.len(), 6);
    assert!(r.tx.stats().short_blocks >= 2);
    assert_eq!(r.rx.stats().recovered, 1);
}

/// A staggered first block closes at its share of `k`, with the repairs
/// of a short block; every block after it is whole (a session staggers its
/// channels' first blocks so their repairs are not all encoded at once).
#[test]
fn a_staggered_first_block_closes_early_and_the_rest_are_whole() {
    let mut cfg = geneva(10, ControllerKind::Static(4));
    cfg.pacing = false;
    cfg.first_block_share = 0.35;
    let r = run(
        cfg,
        ReceiverConfig {
            ordered: false,
            ..ReceiverConfig::default()
        },
        34,
        Duration::from_millis(1),
        |_| false,
    );
    let s = r.tx.stats();
    // 4 (⌈3.5⌉), then three blocks of 10.
    assert_eq!((s.source_sent, s.blocks, s.short_blocks), (34, 4, 1));
    let shapes: Vec<(u8, u8)> = r.shapes.values().copied().collect();
    // The short block's repairs scale with its length: ⌈4 · 4 / 10⌉ = 2.
    assert_eq!(shapes, [(4, 2), (10, 4), (10, 4), (10, 4)]);
    assert_eq!(r.delivered.len(), 34);
}

/// Regression: a block closed early by the block wait used to get the
/// whole `Fwnd`, so at 20 datagrams/s with k = 20 and `Fwnd` = 8 every
/// datagram went out with 8 repairs (800% overhead instead of 40%).
#[test]
fn short_blocks_keep_the_controllers_repair_ratio() {
    let mut cfg = geneva(20, ControllerKind::Static(8));
    cfg.pacing = false;
    cfg.max_block_wait = Some(Duration::from_millis(2));
    let r = run(
        cfg,
        ReceiverConfig {
            ordered: false,
            ..ReceiverConfig::default()
        },
        10,
        Duration::from_millis(50),
        |_| false,
    );
    let s = r.tx.stats();
    assert_eq!((s.source_sent, s.blocks, s.short_blocks), (10, 10, 10));
    // One source per block: ⌈8 · 1 / 20⌉ = 1 repair each.
    assert_eq!(s.repair_sent, 10);
    assert_eq!(s.fwnd_sum, 10);
    assert_eq!(r.delivered.len(), 10);
    // Full blocks still get the whole window; the cap keeps k + m <= 255.
    assert_eq!(super::sender::repairs_for(8, 20, 20), 8);
    assert_eq!(super::sender::repairs_for(8, 5, 20), 2);
    assert_eq!(super::sender::repairs_for(60, 250, 250), 5);
}

#[test]
fn gmiad_raises_fwnd_under_loss_and_lowers_it_after() {
    // Every 20th packet lost for the first half second.
    let r = run(
        geneva(25, ControllerKind::Gmiad),
        ReceiverConfig::default(),
        2_500,
        Duration::from_micros(400),
        |seq| seq < 1_500 && seq % 20 == 0,
    );
    let s = r.tx.stats();
    let mean = s.fwnd_sum as f64 / s.blocks as f64;
    assert!(mean > 8.0, "Fwnd rose above the minimum: mean {mean}");
    assert_eq!(r.tx.fwnd(), 8, "and came back once loss stopped");
    assert_eq!(r.rx.stats().unrecovered, 0);
}

#[test]
fn hostile_input_is_counted_never_kept() {
    let cfg = ReceiverConfig {
        max_blocks: 4,
        ..ReceiverConfig::default()
    };
    let mut rx = BlockReceiver::new(cfg);
    let now = Instant::from_millis(1);
    let repair = |block: u32, k: u8, m: u8, index: u8, len: usize| {
        let payload = vec![0xAB; len];
        let r = DataRepr {
            session: 0,
            seq: block,
            block,
            data_seq: block * 10,
            rtt_us: 0,
            index,
            symbol: Symbol::Repair { k, m },
            checked: true,
            payload: &payload,
        };
        let mut buf = vec![0; r.buffer_len()];
        r.emit(&mut buf);
        buf
    };
    // A flood of block ids: memory stays at the cap.
    for b in 0..1_000 {
        rx.handle_datagram(now, A, &repair(b, 10, 4, 10, 100));
    }
    assert!(rx.blocks_held() <= 4);
    // Replays of evicted blocks are stale.
    rx.handle_datagram(now, A, &repair(3, 10, 4, 11, 100));
    assert_eq!(rx.stats().stale, 1);
    // Same block, other shape or symbol length: inconsistent.
    rx.handle_datagram(now, A, &repair(999, 11, 4, 12, 100));
    rx.handle_datagram(now, A, &repair(999, 10, 4, 12, 99));
    assert_eq!(rx.stats().inconsistent, 2);
    // Same symbol twice: duplicate.
    rx.handle_datagram(now, A, &repair(999, 10, 4, 10, 100));
    assert_eq!(rx.stats().duplicates, 1);
    // Oversized symbols and garbage.
    rx.handle_datagram(now, A, &repair(1_000, 10, 4, 10, 5_000));
    assert_eq!(rx.stats().oversized, 1);
    rx.handle_datagram(now, A, b"\x01\x03garbage");
    assert_eq!(rx.stats().malformed, 1);
    let mut other = repair(1_001, 10, 4, 10, 10);
    other[7] = 9;
    crate::wire::block::seal_data(&mut other);
    rx.handle_datagram(now, A, &other);
    assert_eq!(rx.stats().other_session, 1);
    // A flipped bit anywhere past the common header: corrupt.
    let mut flipped = repair(1_002, 10, 4, 10, 10);
    flipped[40] ^= 0x10;
    rx.handle_datagram(now, A, &flipped);
    assert_eq!(rx.stats().corrupt, 1);
}

/// One block of `k = 3` sources and 2 repairs from a real sender, as datagrams.
fn one_block() -> Vec<Vec<u8>> {
    let mut cfg = geneva(3, ControllerKind::Static(2));
    cfg.pacing = false;
    let mut tx = BlockSender::new(cfg);
    for i in 0..3 {
        tx.send(Instant::ZERO, payload(i)).expect("accepted");
    }
    std::iter::from_fn(|| tx.poll_transmit(Instant::from_millis(100)))
        .map(|t| t.payload.to_vec())
        .collect()
}

#[test]
fn a_corrupted_source_is_dropped_then_rebuilt_intact() {
    let pkts = one_block();
    assert_eq!(pkts.len(), 5);
    let mut rx = BlockReceiver::new(ReceiverConfig {
        ordered: false,
        ..ReceiverConfig::default()
    });
    let now = Instant::from_millis(1);
    let mut bad = pkts[1].clone();
    let last = bad.len() - 1;
    bad[last] ^= 0x01;
    rx.handle_datagram(now, A, &pkts[0]);
    rx.handle_datagram(now, A, &bad);
    // A corrupted repair is not used either.
    let mut bad_repair = pkts[3].clone();
    bad_repair[DATA_HEADER_LEN + 3] ^= 0x80;
    rx.handle_datagram(now, A, &bad_repair);
    rx.handle_datagram(now, A, &pkts[2]);
    assert_eq!(rx.stats().decodes, 0, "nothing decoded from a bad repair");
    rx.handle_datagram(now, A, &pkts[4]);
    let got: Vec<_> = std::iter::from_fn(|| rx.poll_event()).collect();
    assert_eq!(got.len(), 3);
    let rebuilt = got.iter().find(|d| d.recovered).expect("one rebuilt");
    assert_eq!(rebuilt.payload, payload(1));
    let s = rx.stats();
    assert_eq!((s.corrupt, s.recovered, s.corrupt_rebuilt), (2, 1, 0));
}

#[test]
fn a_rebuilt_source_is_checked_before_delivery() {
    let pkts = one_block();
    let mut rx = BlockReceiver::new(ReceiverConfig {
        ordered: false,
        max_wait: Duration::from_millis(50),
        ..ReceiverConfig::default()
    });
    let now = Instant::from_millis(1);
    // A repair whose packet checksum was recomputed over altered bytes
    // (what a forger or a broken middlebox would send) rebuilds garbage;
    // the symbol's own checksum catches it.
    let mut forged = pkts[3].clone();
    forged[DATA_HEADER_LEN + 10] ^= 0xff;
    crate::wire::block::seal_data(&mut forged);
    for p in [&pkts[0], &pkts[2], &forged] {
        rx.handle_datagram(now, A, p);
    }
    let got: Vec<_> = std::iter::from_fn(|| rx.poll_event()).collect();
    assert_eq!(got.len(), 2, "only the received sources");
    assert!(got.iter().all(|d| !d.recovered));
    assert_eq!(rx.stats().corrupt_rebuilt, 1);
    // The missing source is given up, not handed out.
    rx.handle_timeout(now + Duration::from_secs(1));
    assert_eq!(rx.poll_event(), None);
    assert_eq!(rx.stats().unrecovered, 1);
}

#[test]
fn hostile_reports_never_panic_and_old_ones_are_stale() {
    let mut tx = BlockSender::new(geneva(10, ControllerKind::Gmiad));
    let report = |seq: u32, lost: u32, received: u32| {
        let r = crate::wire::block::ReportRepr {
            report_seq: seq,
            echo_seq: u32::MAX,
            lost,
            received,
            ..Default::default()
        };
        let mut b = vec![0; crate::wire::block::REPORT_LEN];
        r.emit(&mut b);
        b
    };
    tx.handle_datagram(Instant::ZERO, B, &report(5, u32::MAX, u32::MAX));
    tx.handle_datagram(Instant::ZERO, B, &report(4, 0, 0));
    tx.handle_datagram(Instant::ZERO, B, &report(5, 0, 0));
    tx.handle_datagram(Instant::ZERO, B, b"nonsense");
    let s = tx.stats();
    assert_eq!((s.reports, s.stale_reports, s.malformed), (1, 2, 1));
}

#[test]
fn endpoint_runs_both_directions_on_one_socket() {
    let mut a = BlockEndpoint::new(
        BlockSender::new(geneva(4, ControllerKind::Static(2))),
        BlockReceiver::new(ReceiverConfig::default()),
    );
    let mut b = BlockEndpoint::new(
        BlockSender::new(SenderConfig::new(A, 4)),
        BlockReceiver::new(ReceiverConfig::default()),
    );
    let mut t = Instant::ZERO;
    for i in 0..8 {
        a.sender.send(t, payload(i)).expect("ok");
        b.sender.send(t, payload(100 + i)).expect("ok");
        for _ in 0..40 {
            t += Duration::from_millis(1);
            a.handle_timeout(t);
            b.handle_timeout(t);
            while let Some(x) = a.poll_transmit(t) {
                b.handle_datagram(t, A, &x.payload);
            }
            while let Some(x) = b.poll_transmit(t) {
                a.handle_datagram(t, B, &x.payload);
            }
        }
    }
    let at_b: Vec<Bytes> = std::iter::from_fn(|| b.poll_event())
        .map(|d| d.payload)
        .collect();
    let at_a: Vec<Bytes> = std::iter::from_fn(|| a.poll_event())
        .map(|d| d.payload)
        .collect();
    assert_eq!(at_b, (0..8).map(payload).collect::<Vec<_>>());
    assert_eq!(at_a, (100..108).map(payload).collect::<Vec<_>>());
    assert!(a.sender.stats().reports > 0 && b.sender.stats().reports > 0);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any loss pattern: every source is delivered exactly once or counted
    /// lost, in order, with the right bytes; blocks that lose no more
    /// packets than they carried repairs (Fwnd, fewer for a short last
    /// block) lose nothing.
    #[test]
    fn any_loss_pattern_is_accounted_exactly(
        k in 1usize..12, m in 0usize..6, count in 1u32..80,
        lost in proptest::collection::btree_set(0u32..200, 0..40),
    ) {
        let r = run(geneva(k, ControllerKind::Static(m)), ReceiverConfig::default(),
                    count, Duration::from_micros(500), |seq| lost.contains(&seq));
        let s = r.rx.stats();
        prop_assert_eq!(s.delivered as usize, r.delivered.len());
        for d in &r.delivered {
            prop_assert_eq!(&d.payload, &payload(d.data_seq as u32));
        }
        let seqs: Vec<u64> = r.delivered.iter().map(|d| d.data_seq).collect();
        prop_assert!(seqs.windows(2).all(|w| w[0] < w[1]));
        // Per block (by the block id on the wire): losses <= repairs sent
        // means every source arrived. A short last block carries fewer
        // repairs than Fwnd (the controller's ratio, not its count).
        let mut per_block: BTreeMap<u32, (usize, usize)> = BTreeMap::new();
        for (seq, _, repair, block) in &r.sent {
            let e = per_block.entry(*block).or_default();
            if lost.contains(seq) { e.0 += 1; }
            e.1 += usize::from(*repair);
        }
        let sent_sources = r.sent.iter().filter(|s| !s.2).count() as u64;
        prop_assert!(s.delivered + s.unrecovered <= sent_sources);
        if per_block.values().all(|(l, repairs)| l <= repairs) && !lost.contains(&0) {
            prop_assert_eq!(s.delivered, sent_sources);
        }
    }

    /// Arbitrary bytes, and valid packets with random bytes flipped, never
    /// panic either machine.
    #[test]
    fn mutated_packets_never_panic(
        flips in proptest::collection::vec((0usize..64, any::<u8>()), 0..6),
        junk in proptest::collection::vec(any::<u8>(), 0..100),
    ) {
        let mut tx = BlockSender::new(geneva(4, ControllerKind::Static(3)));
        let mut rx = BlockReceiver::new(ReceiverConfig::default());
        let mut t = Instant::ZERO;
        for i in 0..12 {
            tx.send(t, payload(i)).expect("ok");
        }
        while let Some(p) = tx.poll_transmit(t) {
            let mut b = p.payload.to_vec();
            for (at, x) in &flips {
                if let Some(v) = b.get_mut(*at) { *v ^= x; }
            }
            rx.handle_datagram(t, A, &b);
            t += Duration::from_millis(2);
            rx.handle_timeout(t);
            tx.handle_timeout(t);
        }
        rx.handle_datagram(t, A, &junk);
        tx.handle_datagram(t, B, &junk);
        while rx.poll_event().is_some() {}
        while let Some(rep) = rx.poll_transmit(t) {
            tx.handle_datagram(t, B, &rep.payload);
        }
    }
}

/// Without packet checksums (under an authenticating layer) the same
/// stream, with the same losses, is rebuilt the same; a receiver that does
/// not allow them counts every such packet as corrupt and delivers nothing.
#[test]
fn packets_without_checksums_only_where_the_receiver_allows_them() {
    let lossy = |seq: u32| seq % 7 == 3;
    let cfg = || {
        let mut c = SenderConfig::new(B, 8);
        c.controller = ControllerKind::Static(2).into();
        c
    };
    let checked = run(
        cfg(),
        ReceiverConfig::default(),
        200,
        Duration::from_millis(1),
        lossy,
    );
    let mut bare = cfg();
    bare.checksums = false;
    let allowed = ReceiverConfig {
        allow_unchecked: true,
        ..ReceiverConfig::default()
    };
    let unchecked = run(bare.clone(), allowed, 200, Duration::from_millis(1), lossy);
    assert_eq!(unchecked.delivered, checked.delivered);
    assert!(checked.delivered.len() > 190, "{}", checked.delivered.len());
    let refused = run(
        bare,
        ReceiverConfig::default(),
        200,
        Duration::from_millis(1),
        lossy,
    );
    assert!(refused.delivered.is_empty());
    let arrived = refused.sent.iter().filter(|s| !lossy(s.0)).count();
    assert_eq!(refused.rx.stats().corrupt, arrived as u64);
}

/// Found by `scripts/fuzz.sh` (block_endpoint): a report whose totals sum
/// past `u64::MAX`, after one that set them, overflowed the sender's
/// restart check. Peer totals are the peer's word: the sender saturates.
#[test]
fn reports_with_totals_near_u64_max_do_not_overflow() {
    use crate::wire::block::{REPORT_LEN, ReportRepr};
    let mut tx = BlockSender::new(SenderConfig::new(B, 4));
    for (i, total) in [u64::MAX, u64::MAX - 1, 0].into_iter().enumerate() {
        let r = ReportRepr {
            report_seq: i as u32 + 1,
            delivered_total: total,
            unrecovered_total: total,
            recovered_total: total,
            ..ReportRepr::default()
        };
        let mut buf = [0u8; REPORT_LEN];
        r.emit(&mut buf);
        tx.handle_datagram(Instant::from_millis(i as u64), B, &buf);
    }
    assert_eq!(tx.stats().reports, 3);
}

/// The target controller chooses `k` block by block (from an assumed rate
/// at first, then from the measured one): blocks of different lengths
/// follow each other on the wire, and the receiver rebuilds each from its
/// own shape.
#[test]
fn blocks_of_different_k_follow_each_other_and_all_rebuild() {
    let mut cfg = geneva(20, ControllerKind::Target);
    cfg.pacing = false;
    let gap = Duration::from_micros(500);
    // One packet in 16 lost, never two in a row: every block rebuilds.
    let r = run(cfg, ReceiverConfig::default(), 3000, gap, |seq| {
        seq % 16 == 7
    });
    let ks: std::collections::BTreeSet<u8> = r.shapes.values().map(|s| s.0).collect();
    assert!(ks.len() >= 2, "one block length only: {ks:?}");
    assert!(r.tx.stats().repair_sent > 0);
    let rs = r.rx.stats();
    assert_eq!(rs.unrecovered, 0, "{rs:?}");
    assert_eq!(r.delivered.len(), 3000);
    assert!(rs.recovered > 100, "{rs:?}");
    // The delay bound: no block holds more sources than 27 ms of them.
    assert!(
        r.shapes.values().all(|s| usize::from(s.0) <= 55),
        "{:?}",
        r.shapes
    );
    assert!(r.tx.controller().target_status().is_some_and(|s| s.meets));
}
