//! The sliding-window endpoint over a scripted link: clean delivery,
//! losses rebuilt by the next repair, the pause's repair, and hostile
//! input.

use std::net::SocketAddr;
use std::time::Duration;

use proptest::prelude::*;

use crate::control::target::TargetConfig;

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

/// Both halves of a closed loop (`--fec sliding:target`): A sends
/// `rate` datagrams per second for `secs` seconds through a link that
/// drops what `lose` says (A → B only; B's reports come back intact).
/// Returns A (the controlled sender), B, and the datagrams B handed out.
fn closed_loop(
    target: TargetConfig,
    rate: u32,
    secs: u32,
    mut lose: impl FnMut(Instant) -> bool,
) -> (SlidingEndpoint, SlidingEndpoint, Vec<SlidingDelivery>) {
    let mut a = SlidingEndpoint::new(SlidingConfig::controlled(B, target)).expect("A");
    let mut b = SlidingEndpoint::new(SlidingConfig::controlled(A, target)).expect("B");
    let gap = Duration::from_secs(1) / rate;
    let mut got = Vec::new();
    let mut now = Instant::ZERO;
    for i in 0..rate * secs {
        a.send(now, &datagram(i)).expect("send");
        for ep in [&mut a, &mut b] {
            if ep.poll_timeout().is_some_and(|t| t <= now) {
                ep.handle_timeout(now);
            }
        }
        while let Some(t) = a.poll_transmit(now) {
            if !lose(now) {
                b.handle_datagram(now, A, &t.payload);
            }
        }
        while let Some(t) = b.poll_transmit(now) {
            a.handle_datagram(now, B, &t.payload);
        }
        got.extend(std::iter::from_fn(|| b.poll_event()));
        now += gap;
    }
    (a, b, got)
}

#[test]
fn the_closed_loop_follows_the_channel_and_meets_its_target() {
    use rand::{Rng, SeedableRng};
    let target = TargetConfig {
        target: 0.01,
        max_delay: Duration::from_millis(50),
        ..TargetConfig::default()
    };
    // 5% random loss at 1000 datagrams/s, 20 s.
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    let (a, b, got) = closed_loop(target, 1000, 20, |_| rng.random::<f64>() < 0.05);
    let (sa, sb) = (a.stats(), b.stats());
    assert!(sb.reports_sent >= 1000, "B reports every 10 ms: {sb:?}");
    assert!(sa.reports_received >= 900, "{sa:?}");
    let st = a.target_status().expect("closed loop");
    // The fit has found the channel: about 5% in runs of about 1.
    assert!((st.model.loss_rate() - 0.05).abs() < 0.02, "{st:?}");
    // A window within the budget (50 ms less its margin at 1000/s) and
    // the overhead the controller asked for.
    let code = a.code();
    assert!((1..=46).contains(&code.window), "{code:?} {st:?}");
    assert!((code.overhead - st.m as f64 / st.k as f64).abs() < 1e-12);
    assert!(
        code.overhead > 0.05,
        "repairs beyond the loss rate: {code:?}"
    );
    // What B gave up, and what it never handed out, within the target
    // (at most twice it: 20 s is a short sample of a 1% target).
    let sent = sa.sources_sent as f64;
    let missing = sent - got.len() as f64;
    assert!(missing / sent < 0.02, "{missing} of {sent} lost; {sb:?}");
    assert!(sb.unrecovered as f64 / sent < 0.02, "{sb:?}");
    assert_eq!(
        sa.peer_unrecovered, sb.unrecovered,
        "A knows what B gave up"
    );
    // The same seed gives the same run.
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    let (a2, _, got2) = closed_loop(target, 1000, 20, |_| rng.random::<f64>() < 0.05);
    assert_eq!((a2.stats(), got2.len()), (sa, got.len()));
}

#[test]
fn a_clean_channel_lets_the_overhead_fall_and_a_loss_burst_raises_it() {
    let target = TargetConfig::default();
    // Clean for 30 s: the pessimistic prior decays (4 s half-life), the
    // repairs go.
    let (a, _, got) = closed_loop(target, 1000, 30, |_| false);
    assert_eq!(got.len(), 30_000);
    let clean = a.code();
    assert!(clean.overhead < 0.05, "{clean:?} {:?}", a.target_status());
    // Bursts of 4 at 10% loss from 25 s on: the overhead rises.
    let mut n = 0u64;
    let (a, _, _) = closed_loop(target, 1000, 30, |now| {
        n += 1;
        now >= Instant::ZERO + Duration::from_secs(25) && n % 40 < 4
    });
    assert!(
        a.code().overhead > 2.0 * clean.overhead.max(0.01),
        "{:?} {:?}",
        a.code(),
        a.target_status()
    );
}

#[test]
fn a_short_budget_on_a_bursty_channel_gets_more_than_one_repair_per_source() {
    // 25% loss in runs of 5 packets, 20 ms at 1000/s: windows of 10 at
    // most (half the budget), and bursts half a window long.
    let target = TargetConfig {
        target: 0.01,
        max_delay: Duration::from_millis(20),
        ..TargetConfig::default()
    };
    let mut n = 0u64;
    let (a, b, got) = closed_loop(target, 1000, 20, |_| {
        n += 1;
        n % 20 < 5
    });
    let (sa, sb) = (a.stats(), b.stats());
    assert!(
        a.code().overhead > 1.0,
        "{:?} {:?}",
        a.code(),
        a.target_status()
    );
    assert!(sa.repairs_sent > sa.sources_sent, "{sa:?}");
    // And what they buy: most of the quarter lost comes back.
    let missing = sa.sources_sent - got.len() as u64;
    assert!(missing * 20 < sa.sources_sent, "{missing} missing; {sb:?}");
}

#[test]
fn sources_leaving_the_decoding_window_undelivered_are_given_up() {
    // A burst longer than anything a window of 8 at 0.25 rebuilds.
    let (got, _, rx) = run(code(8, 0.25), 2000, |i, _| (100..160).contains(&i));
    let delivered = got.len() as u64;
    let s = rx.stats();
    // Every source that never came out was given up once it fell out of
    // the 256-ESI decoding window (all of them: 2000 sources sent).
    assert_eq!(s.unrecovered, 2000 - delivered, "{s:?}");
    assert!(
        s.unrecovered > 0 && s.sources_lost >= s.unrecovered,
        "{s:?}"
    );
    // An open-loop pair sends no reports.
    assert_eq!(s.reports_sent, 0);
}

#[test]
fn reports_that_jump_or_do_not_parse_teach_the_controller_nothing() {
    let target = TargetConfig::default();
    let mut a = SlidingEndpoint::new(SlidingConfig::controlled(B, target)).expect("A");
    let before = a.target_status();
    let report = |counts: [u32; 4]| {
        let mut p = vec![REPORT_TYPE, 0, 0, 0, 0];
        for c in counts {
            p.extend_from_slice(&c.to_be_bytes());
        }
        p
    };
    let now = Instant::ZERO + Duration::from_millis(10);
    // A jump beyond any interval's counts: taken as the base only.
    a.handle_datagram(now, B, &report([u32::MAX, u32::MAX, 7, 9]));
    assert_eq!(a.target_status(), before);
    // Truncated and overlong: malformed.
    let good = report([10, 0, 0, 0]);
    a.handle_datagram(now, B, &good[..good.len() - 1]);
    a.handle_datagram(now, B, &[&good[..], &[0]].concat());
    assert_eq!(a.stats().malformed, 2);
    assert_eq!(a.stats().reports_received, 1);
}

proptest! {
    #[test]
    fn any_bytes_never_panic(packets in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..1600), 0..64), controlled in any::<bool>()) {
        let mut rx = if controlled {
            SlidingEndpoint::new(SlidingConfig::controlled(A, TargetConfig::default())).expect("rx")
        } else {
            pair(code(16, 0.25)).1
        };
        let mut now = Instant::ZERO;
        for p in &packets {
            let mut p = p.clone();
            // Half of them of the right session, so the decoder sees them.
            if p.len() >= 5 && p[0] % 2 == 0 {
                p[0] = [SOURCE_TYPE, REPAIR_TYPE, REPORT_TYPE][usize::from(p[1] % 3)];
                p[1..5].copy_from_slice(&0u32.to_be_bytes());
            }
            rx.handle_datagram(now, A, &p);
            while rx.poll_event().is_some() {}
            now += Duration::from_millis(3);
            rx.handle_timeout(now);
            while rx.poll_transmit(now).is_some() {}
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
