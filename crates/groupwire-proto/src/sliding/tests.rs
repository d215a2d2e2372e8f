//! The sliding-window endpoint over a scripted link: clean delivery,
//! losses rebuilt by the next repair, the pause's repair, and hostile
//! input.

use std::net::SocketAddr;
use std::time::Duration;

use proptest::prelude::*;

use super::*;

const A: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 9000);
const B: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 9001);

fn code(window: u16, overhead: f64) -> SlidingCode {
    SlidingCode { window, overhead }
}

/// A sender toward B and a receiver taking from A.
fn pair(c: SlidingCode) -> (SlidingEndpoint, SlidingEndpoint) {
    let tx = SlidingEndpoint::new(SlidingConfig::new(B, c)).expect("sender");
    let rx = SlidingEndpoint::new(SlidingConfig::new(A, c)).expect("receiver");
    (tx, rx)
}

fn datagram(i: u32) -> Vec<u8> {
    let mut v = i.to_be_bytes().to_vec();
    v.resize(20 + (i as usize % 200), i as u8);
    v
}

/// Sends `n` datagrams 1 ms apart, dropping the packets `drop` names (by
/// their index on the link), then lets the pause's repair go; returns
/// the deliveries.
fn run(
    c: SlidingCode,
    n: u32,
    mut drop: impl FnMut(usize, &[u8]) -> bool,
) -> (Vec<SlidingDelivery>, SlidingEndpoint, SlidingEndpoint) {
    let (mut tx, mut rx) = pair(c);
    let mut now = Instant::ZERO;
    let mut link = 0usize;
    let mut got = Vec::new();
    let mut pass = |tx: &mut SlidingEndpoint, rx: &mut SlidingEndpoint, now: Instant| {
        while let Some(t) = tx.poll_transmit(now) {
            if !drop(link, &t.payload) {
                rx.handle_datagram(now, A, &t.payload);
            }
            link += 1;
        }
    };
    for i in 0..n {
        tx.send(now, &datagram(i)).expect("send");
        pass(&mut tx, &mut rx, now);
        while let Some(d) = rx.poll_event() {
            got.push(d);
        }
        now += Duration::from_millis(1);
    }
    now += Duration::from_millis(10);
    tx.handle_timeout(now);
    pass(&mut tx, &mut rx, now);
    while let Some(d) = rx.poll_event() {
        got.push(d);
    }
    (got, tx, rx)
}

fn esis(got: &[SlidingDelivery]) -> Vec<u32> {
    let mut v: Vec<u32> = got.iter().map(|d| d.esi).collect();
    v.sort_unstable();
    v
}

#[test]
fn a_clean_link_delivers_every_datagram_once_as_it_arrives() {
    let (got, tx, rx) = run(code(20, 0.2), 1000, |_, _| false);
    assert_eq!(esis(&got), (0..1000).collect::<Vec<_>>());
    for d in &got {
        assert_eq!(&d.payload[..], &datagram(d.esi)[..]);
        assert!(d.recovered.is_none());
    }
    // One repair per five sources, none left owed at the end.
    assert_eq!(tx.stats().repairs_sent, 200);
    // The bytes on the link: the sources with their headers, and the
    // repairs no longer than the longest ADUI they cover (the window's
    // longest datagram and its 3-byte ADUI header), never E.
    let payload: u64 = (0..1000).map(|i| datagram(i).len() as u64).sum();
    let longest = (0..1000).map(|i| datagram(i).len()).max().unwrap_or(0) + 3;
    let repairs = tx.stats().bytes_sent - payload - 1000 * SOURCE_HEADER_LEN as u64;
    assert!(
        repairs <= 200 * (REPAIR_HEADER_LEN + longest) as u64,
        "{repairs} bytes of repairs"
    );
    assert!(repairs >= 200 * REPAIR_HEADER_LEN as u64);
    assert_eq!(tx.stats().flush_repairs, 0);
    assert_eq!(rx.stats().rebuilt, 0);
}

#[test]
fn each_loss_is_rebuilt_by_the_next_repair_that_covers_it() {
    // Every 7th packet on the link lost (sources and repairs): never two
    // losses between two repairs 6 packets apart.
    let (got, _, rx) = run(code(20, 0.2), 2000, |i, _| i % 7 == 3);
    assert_eq!(esis(&got), (0..2000).collect::<Vec<_>>());
    for d in &got {
        assert_eq!(&d.payload[..], &datagram(d.esi)[..], "esi {}", d.esi);
    }
    assert!(rx.stats().rebuilt > 100, "{:?}", rx.stats());
    // Rebuilt from the repair after the loss: within a repair interval
    // (5 sources at 1 ms), not a block later.
    let worst = got
        .iter()
        .filter_map(|d| d.recovered)
        .max()
        .expect("some rebuilt");
    assert!(worst <= Duration::from_millis(5), "{worst:?}");
}

#[test]
fn a_burst_shorter_than_the_repairs_in_the_window_is_rebuilt() {
    // Four sources in a row lost every 100 datagrams; at one repair per
    // two sources over a window of 40, the repairs after the burst
    // cover it.
    let mut sources = 0u32;
    let (got, _, _) = run(code(40, 0.5), 1000, |_, p| {
        if p[0] == SOURCE_TYPE {
            sources += 1;
            (sources - 1) % 100 < 4
        } else {
            false
        }
    });
    assert_eq!(esis(&got), (0..1000).collect::<Vec<_>>());
}

#[test]
fn a_pause_sends_one_repair_for_the_tail() {
    // 7 sources at 0.2: one repair after the 5th, the tail of 2 covered
    // by the pause's repair, so the last datagram's loss is rebuilt.
    let (got, tx, _) = run(code(20, 0.2), 7, |i, p| p[0] == SOURCE_TYPE && i == 7);
    assert_eq!(tx.stats().flush_repairs, 1);
    assert_eq!(esis(&got), (0..7).collect::<Vec<_>>());
    assert!(got.iter().any(|d| d.esi == 6 && d.recovered.is_some()));
}

#[test]
fn a_late_source_after_its_rebuild_is_not_delivered_twice() {
    let c = code(10, 0.5);
    let (mut tx, mut rx) = pair(c);
    let now = Instant::ZERO;
    tx.send(now, b"zero").expect("send");
    tx.send(now, b"one").expect("send");
    let pkts: Vec<_> = std::iter::from_fn(|| tx.poll_transmit(now)).collect();
    // source 0, source 1, repair: source 0 arrives last.
    assert_eq!(pkts.len(), 3);
    for i in [1, 2, 0] {
        rx.handle_datagram(now, A, &pkts[i].payload);
    }
    let got: Vec<_> = std::iter::from_fn(|| rx.poll_event()).collect();
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(rx.stats().duplicates, 1);
}

#[test]
fn foreign_and_broken_packets_are_counted_and_dropped() {
    let c = code(10, 0.5);
    let (mut tx, mut rx) = pair(c);
    let now = Instant::ZERO;
    tx.send(now, b"hello").expect("send");
    let p = tx.poll_transmit(now).expect("source").payload;
    rx.handle_datagram(now, B, &p);
    assert_eq!(rx.stats().foreign, 1);
    let mut other = p.to_vec();
    other[4] ^= 1;
    rx.handle_datagram(now, A, &other);
    assert_eq!(rx.stats().foreign, 2);
    for cut in 0..SOURCE_HEADER_LEN {
        rx.handle_datagram(now, A, &p[..cut]);
    }
    rx.handle_datagram(now, A, &[0x55, 0, 0, 0, 0, 1]);
    assert!(
        rx.stats().malformed >= SOURCE_HEADER_LEN as u64,
        "{:?}",
        rx.stats()
    );
    assert!(rx.poll_event().is_none());
    // Too large for a symbol: refused at the sender, counted.
    let big = vec![0u8; tx.config().max_payload() + 1];
    assert!(tx.send(now, &big).is_err());
    assert_eq!(tx.stats().too_large, 1);
    assert!(tx.send(now, &big[1..]).is_ok());
}

#[test]
fn codes_parse_print_and_refuse_what_cannot_work() {
    let c: SlidingCode = "sliding:w=20,o=0.2".parse().expect("parse");
    assert_eq!(c, code(20, 0.2));
    assert_eq!(c.to_string().parse::<SlidingCode>(), Ok(c));
    assert_eq!(
        "sliding:o=25%,w=8".parse::<SlidingCode>(),
        Ok(code(8, 0.25))
    );
    for bad in [
        "sliding:w=0,o=0.2",
        "sliding:w=20,o=0",
        "sliding:w=20,o=1.5",
        "sliding:w=5000,o=0.2",
        "sliding:w=20",
        "sliding:w=x,o=0.2",
        "slide:w=20,o=0.2",
        "sliding:w=20,o=0.2,z=1",
    ] {
        assert!(bad.parse::<SlidingCode>().is_err(), "{bad}");
    }
}

proptest! {
    #[test]
    fn any_bytes_never_panic(packets in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..1600), 0..64)) {
        let (_, mut rx) = pair(code(16, 0.25));
        for p in &packets {
            let mut p = p.clone();
            // Half of them of the right session, so the decoder sees them.
            if p.len() >= 5 && p[0] % 2 == 0 {
                p[0] = if p[1] % 2 == 0 { SOURCE_TYPE } else { REPAIR_TYPE };
                p[1..5].copy_from_slice(&0u32.to_be_bytes());
            }
            rx.handle_datagram(Instant::ZERO, A, &p);
            while rx.poll_event().is_some() {}
        }
    }

    #[test]
    fn whatever_is_lost_comes_out_once_and_intact(seed in any::<u64>(), loss in 0.0f64..0.15) {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let (got, _, _) = run(code(24, 0.3), 300, |_, _| rng.random::<f64>() < loss);
        let mut seen = std::collections::BTreeSet::new();
        for d in &got {
            prop_assert!(seen.insert(d.esi), "esi {} twice", d.esi);
            prop_assert_eq!(&d.payload[..], &datagram(d.esi)[..]);
        }
    }
}
