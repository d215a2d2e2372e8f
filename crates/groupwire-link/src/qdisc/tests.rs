use std::time::Duration;

use groupwire_units::{Bitrate, Instant};
use proptest::prelude::*;

use super::*;
use crate::link::{Admission, Fate, Link, LinkConfig};
use crate::loss::LossModel;

/// What came out of a link, in the order it came out.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Out {
    token: u64,
    /// When it finished serializing (nanos).
    departed: u64,
    class: usize,
    fate: Fate,
}

/// Offers `arrivals` (time in nanos, bytes, mark) in order through the
/// event API, collecting every departure at its `poll_timeout` as a
/// simulator would. Returns the departures and the indices dropped.
fn drive(link: &mut Link, arrivals: &[(u64, usize, Dscp)]) -> (Vec<Out>, Vec<u64>) {
    fn collect(link: &mut Link, until: u64, out: &mut Vec<Out>) {
        while let Some(t) = link.poll_timeout().filter(|t| t.as_nanos() <= until) {
            while let Some(d) = link.poll_departure(t) {
                out.push(Out {
                    token: d.token,
                    departed: t.as_nanos(),
                    class: d.class,
                    fate: d.fate,
                });
            }
        }
    }
    let mut out = Vec::new();
    let mut dropped = Vec::new();
    for (i, &(t, len, dscp)) in arrivals.iter().enumerate() {
        collect(link, t, &mut out);
        let token = i as u64;
        if let Admission::Dropped { .. } = link.enqueue(Instant::from_nanos(t), len, dscp, token) {
            dropped.push(token);
        }
    }
    collect(link, u64::MAX, &mut out);
    (out, dropped)
}

/// 8 Mbit/s: a 1000-byte packet takes exactly 1 ms.
fn link(qdisc: Qdisc) -> Link {
    LinkConfig::new()
        .rate(Bitrate::mbps(8))
        .qdisc(qdisc)
        .build()
        .expect("valid qdisc")
}

fn ef_and_best_effort() -> Vec<ClassConfig> {
    vec![
        ClassConfig::new("ef").dscp([Dscp::EF]),
        ClassConfig::new("best-effort"),
    ]
}

const MS: u64 = 1_000_000;
const BE: Dscp = Dscp::DEFAULT;
const EF: Dscp = Dscp::EF;

fn order(out: &[Out]) -> Vec<(u64, u64)> {
    out.iter().map(|o| (o.token, o.departed)).collect()
}

#[test]
fn priority_serves_the_first_class_first_without_preempting() {
    let mut l = link(Qdisc::priority(ef_and_best_effort()));
    // Three best-effort packets at 0, then an EF one at 0.5 ms while the
    // first is being serialized.
    let arrivals = [
        (0, 1000, BE),
        (0, 1000, BE),
        (0, 1000, BE),
        (MS / 2, 1000, EF),
    ];
    let (out, dropped) = drive(&mut l, &arrivals);
    assert!(dropped.is_empty());
    // The one in service finishes (non-preemptive), then EF jumps the queue.
    assert_eq!(
        order(&out),
        [(0, MS), (3, 2 * MS), (1, 3 * MS), (2, 4 * MS)]
    );
    assert_eq!(out[1].class, 0, "EF is class 0");
    assert_eq!(out[0].class, 1);
}

#[test]
fn a_deep_transmit_ring_makes_priority_wait_for_the_ring() {
    let classes = Classes::new(ef_and_best_effort()).tx_ring(3);
    let mut l = link(Qdisc::Priority(classes));
    let arrivals = [
        (0, 1000, BE),
        (0, 1000, BE),
        (0, 1000, BE),
        (0, 1000, BE),
        (MS / 2, 1000, EF),
    ];
    let (out, _) = drive(&mut l, &arrivals);
    // Three best-effort packets were already in the ring: EF waits for all
    // of them, then overtakes the fourth.
    assert_eq!(
        order(&out),
        [(0, MS), (1, 2 * MS), (2, 3 * MS), (4, 4 * MS), (3, 5 * MS)]
    );
}

#[test]
fn marks_are_ignored_when_the_router_does_not_honour_them() {
    let classes = Classes::new(ef_and_best_effort()).honour_marks(false);
    let mut l = link(Qdisc::Priority(classes));
    let arrivals = [(0, 1000, BE), (0, 1000, BE), (MS / 2, 1000, EF)];
    let (out, _) = drive(&mut l, &arrivals);
    assert_eq!(
        order(&out),
        [(0, MS), (1, 2 * MS), (2, 3 * MS)],
        "FIFO order"
    );
    assert!(out.iter().all(|o| o.class == 1), "all in the last class");
    assert_eq!(l.class_stats()[0].enqueued, 0);
    assert_eq!(l.class_stats()[1].enqueued, 3);
}

#[test]
fn unlisted_marks_join_the_last_class_and_the_first_listing_wins() {
    let classes = vec![
        ClassConfig::new("voice").dscp([Dscp::EF]),
        ClassConfig::new("video").dscp([Dscp::EF, Dscp::new(34).expect("AF41")]),
        ClassConfig::new("rest"),
    ];
    let s = Scheduler::new(&Qdisc::priority(classes))
        .expect("valid")
        .expect("classful");
    assert_eq!(s.classify(Dscp::EF), 0);
    assert_eq!(s.classify(Dscp::new(34).expect("AF41")), 1);
    assert_eq!(s.classify(Dscp::DEFAULT), 2);
    assert_eq!(s.classify(Dscp::new(63).expect("six bits")), 2);
}

/// A single class, with one limit, is exactly the FIFO link: the same
/// departures, drops, losses and jitter, through either API.
#[test]
fn one_class_is_the_drop_tail_fifo() {
    let arrivals: Vec<(u64, usize, Dscp)> = (0..5_000u64)
        .map(|i| {
            // Bursts of 7 at the same instant, then a gap: queue and drops.
            let t = (i / 7) * 6 * MS + (i % 3) * 1000;
            let len = 200 + (i * 7919 % 1300) as usize;
            let dscp = if i % 5 == 0 { EF } else { BE };
            (t, len, dscp)
        })
        .collect();
    let base = LinkConfig::new()
        .rate(Bitrate::mbps(8))
        .latency(Duration::from_millis(10))
        .jitter(Duration::from_millis(2))
        .loss("bernoulli:0.05".parse::<LossModel>().expect("a loss model"))
        .seed(3);
    for limit in [QueueLimit::Packets(5), QueueLimit::Bytes(4000)] {
        let mut fifo = base.clone().queue(limit.clone()).build().expect("valid");
        let fifo_fates: Vec<Fate> = arrivals
            .iter()
            .map(|&(t, len, _)| fifo.offer(Instant::from_nanos(t), len))
            .collect();
        let one = Qdisc::priority(vec![ClassConfig::new("all").limit(limit.clone())]);
        let mut classful = base.clone().qdisc(one).build().expect("valid");
        let (out, dropped) = drive(&mut classful, &arrivals);
        let mut fates = vec![Fate::QueueDrop; arrivals.len()];
        for o in &out {
            fates[o.token as usize] = o.fate.clone();
        }
        assert_eq!(fates, fifo_fates, "{limit:?}");
        assert!(
            !dropped.is_empty() && fates.contains(&Fate::Lost),
            "{limit:?}"
        );
        assert_eq!(classful.stats(), fifo.stats(), "{limit:?}");
        // And the FIFO link answers the event API the same way.
        let mut fifo2 = base.clone().queue(limit.clone()).build().expect("valid");
        let (out2, dropped2) = drive(&mut fifo2, &arrivals);
        assert_eq!((out2, dropped2), (out, dropped), "{limit:?}");
    }
}

/// Offers three classes far more than the link carries (every class stays
/// backlogged) for `secs` seconds; the bytes each class sent.
fn backlogged_shares(qdisc: Qdisc, sizes: [usize; 3], secs: u64) -> [f64; 3] {
    let marks = [EF, Dscp::new(34).expect("AF41"), BE];
    let mut l = LinkConfig::new()
        .rate(Bitrate::mbps(10))
        .qdisc(qdisc)
        .build()
        .expect("valid");
    // Each class offers 10 Mbit/s on its own: three times the link.
    let mut arrivals = Vec::new();
    for (c, (&size, &mark)) in sizes.iter().zip(&marks).enumerate() {
        let gap = size as u64 * 800; // ns per packet at 10 Mbit/s
        let mut t = c as u64;
        while t < secs * 1_000 * MS {
            arrivals.push((t, size, mark));
            t += gap;
        }
    }
    arrivals.sort_by_key(|a| a.0);
    let (out, dropped) = drive(&mut l, &arrivals);
    assert!(!dropped.is_empty(), "overloaded");
    // Shares over the busy period only (after the last arrival the queues
    // drain in an order that says nothing about shares).
    let end = secs * 1_000 * MS;
    let mut bytes = [0.0; 3];
    for o in out.iter().filter(|o| o.departed <= end) {
        bytes[o.class] += arrivals[o.token as usize].1 as f64;
    }
    let total: f64 = bytes.iter().sum();
    // The link was never idle.
    assert!(
        (total * 8.0 / secs as f64 - 10e6).abs() < 10e6 * 0.001,
        "{total}"
    );
    bytes.map(|b| b / total)
}

fn weighted(weights: [u32; 3]) -> Vec<ClassConfig> {
    let names = ["ef", "af41", "best-effort"];
    let marks = [vec![EF], vec![Dscp::new(34).expect("AF41")], vec![]];
    (0..3)
        .map(|i| {
            ClassConfig::new(names[i])
                .dscp(marks[i].clone())
                .weight(weights[i])
                .limit(QueueLimit::Packets(50))
        })
        .collect()
}

fn assert_shares(shares: [f64; 3], weights: [u32; 3], tolerance: f64) {
    let total: u32 = weights.iter().sum();
    for (s, w) in shares.iter().zip(weights) {
        let want = f64::from(w) / f64::from(total);
        assert!(
            (s - want).abs() < tolerance,
            "shares {shares:?} for weights {weights:?}"
        );
    }
}

#[test]
fn drr_shares_follow_the_weights_whatever_the_packet_sizes() {
    let weights = [1, 2, 5];
    let shares = backlogged_shares(Qdisc::drr(weighted(weights)), [200, 1500, 700], 20);
    assert_shares(shares, weights, 0.005);
}

#[test]
fn wfq_shares_follow_the_weights_whatever_the_packet_sizes() {
    let weights = [6, 1, 3];
    let shares = backlogged_shares(Qdisc::wfq(weighted(weights)), [1500, 64, 900], 20);
    assert_shares(shares, weights, 0.005);
}

#[test]
fn priority_starves_lower_classes_under_overload() {
    let shares = backlogged_shares(Qdisc::priority(weighted([1, 1, 1])), [1000; 3], 5);
    assert!(shares[0] > 0.999, "{shares:?}");
}

#[test]
fn drops_are_counted_per_class_and_limits_bound_memory() {
    let classes = vec![
        ClassConfig::new("ef")
            .dscp([EF])
            .limit(QueueLimit::Packets(4)),
        ClassConfig::new("best-effort").limit(QueueLimit::Bytes(10_000)),
    ];
    for qdisc in [
        Qdisc::priority(classes.clone()),
        Qdisc::drr(classes.clone()),
        Qdisc::wfq(classes.clone()),
        Qdisc::Priority(Classes::new(classes.clone()).tx_ring(3)),
    ] {
        let mut l = link(qdisc.clone());
        // 2000 packets of each class in one second: five times the link.
        let arrivals: Vec<_> = (0..4000u64)
            .map(|i| (i * MS / 4, 1000, if i % 2 == 0 { EF } else { BE }))
            .collect();
        let mut peak = 0;
        for (i, &(t, len, dscp)) in arrivals.iter().enumerate() {
            let now = Instant::from_nanos(t);
            while l.poll_departure(now).is_some() {}
            let _ = l.enqueue(now, len, dscp, i as u64);
            peak = peak.max(l.queue_bytes(now));
        }
        let stats = l.class_stats();
        let ring = u64::from(qdisc.classes().expect("classful").tx_ring);
        let ring_extra = if ring > 1 { ring * 1000 } else { 0 };
        assert!(peak <= 4 * 1000 + 10_000 + ring_extra, "{qdisc:?}: {peak}");
        assert!(stats[0].max_packets <= 4, "{qdisc:?}");
        assert!(stats[1].max_bytes <= 10_000, "{qdisc:?}");
        for c in stats {
            assert!(c.dropped > 0, "{qdisc:?}: {stats:?}");
            assert_eq!(c.enqueued + c.dropped, 2000, "{qdisc:?}");
            assert_eq!(c.dropped_bytes, c.dropped * 1000);
        }
        let ls = l.stats();
        assert_eq!(ls.queue_drops, stats[0].dropped + stats[1].dropped);
        assert_eq!(ls.offered, 4000);
    }
}

#[test]
fn without_a_rate_nothing_waits() {
    let mut l = LinkConfig::new()
        .latency(Duration::from_millis(5))
        .qdisc(Qdisc::priority(ef_and_best_effort()))
        .build()
        .expect("valid");
    let (out, _) = drive(&mut l, &[(0, 1000, BE), (0, 1000, EF), (7, 1, BE)]);
    assert_eq!(order(&out), [(0, 0), (1, 0), (2, 7)]);
    assert_eq!(
        out[2].fate,
        Fate::Deliver {
            at: Instant::from_nanos(5 * MS + 7)
        }
    );
}

#[test]
#[should_panic(expected = "classful")]
fn offer_on_a_classful_link_is_a_driver_bug() {
    let mut l = link(Qdisc::priority(ef_and_best_effort()));
    let _ = l.offer(Instant::ZERO, 100);
}

#[test]
fn bad_disciplines_are_named() {
    let cases = [
        (Qdisc::priority(vec![]), "classes"),
        (
            Qdisc::drr(vec![ClassConfig::new("x").weight(0)]),
            "weight 0",
        ),
        (
            Qdisc::priority(vec![ClassConfig {
                dscp: vec![64],
                ..ClassConfig::new("x")
            }]),
            "DSCP 64",
        ),
        (
            Qdisc::Priority(Classes::new(ef_and_best_effort()).tx_ring(0)),
            "tx_ring",
        ),
    ];
    for (qdisc, says) in cases {
        let e = LinkConfig::new()
            .qdisc(qdisc)
            .build()
            .expect_err("invalid")
            .to_string();
        assert!(e.contains(says), "{e}");
    }
    // Weight 0 means nothing to strict priority.
    assert!(
        Qdisc::priority(vec![ClassConfig::new("x").weight(0)])
            .validate()
            .is_ok()
    );
    assert_eq!(Dscp::new(64), None);
    assert_eq!(Dscp::EF.precedence(), 5);
}

#[test]
fn disciplines_read_from_toml() {
    let text = r#"
        kind = "priority"
        honour_marks = false
        tx_ring = 4
        classes = [
            { name = "ef", dscp = [46], limit = "20p" },
            { name = "best-effort", limit = "512KiB" },
        ]
    "#;
    let q: Qdisc = toml::from_str(text).expect("parses");
    let want = Qdisc::Priority(
        Classes::new(vec![
            ClassConfig::new("ef")
                .dscp([EF])
                .limit(QueueLimit::Packets(20)),
            ClassConfig::new("best-effort").limit(QueueLimit::Bytes(512 * 1024)),
        ])
        .honour_marks(false)
        .tx_ring(4),
    );
    assert_eq!(q, want);
    let back: Qdisc = toml::from_str(&toml::to_string(&q).expect("writes")).expect("re-reads");
    assert_eq!(back, q);
    let drr: Qdisc =
        toml::from_str("kind = \"drr\"\nclasses = [{ name = \"a\", weight = 3, limit = 60 }, {}]")
            .expect("parses");
    let c = drr.classes().expect("classful");
    assert_eq!(c.classes[0].limit, QueueLimit::Packets(60));
    assert_eq!(c.classes[1].limit, QueueLimit::Unlimited);
    assert!(c.honour_marks && c.tx_ring == 1, "defaults");
    let fifo: Qdisc = toml::from_str("kind = \"fifo\"").expect("parses");
    assert_eq!(fifo, Qdisc::Fifo);
    for bad in [
        "kind = \"priority\"\nclasses = [{ limit = \"lots\" }]",
        "kind = \"priority\"\nclasses = [{ dscp = [300] }]",
        "kind = \"priority\"\nnope = 1",
        "kind = \"red\"",
    ] {
        assert!(toml::from_str::<Qdisc>(bad).is_err(), "{bad}");
    }
}

fn any_qdisc() -> impl Strategy<Value = Qdisc> {
    (0..3usize, 1..4u32, any::<bool>(), 1..40u32, 1..9u32).prop_map(
        |(kind, ring, honour, limit, w)| {
            let classes = vec![
                ClassConfig::new("ef")
                    .dscp([EF])
                    .limit(QueueLimit::Packets(limit))
                    .weight(w),
                ClassConfig::new("best-effort")
                    .limit(QueueLimit::Bytes(u64::from(limit) * 700))
                    .weight(1),
            ];
            let c = Classes::new(classes).tx_ring(ring).honour_marks(honour);
            match kind {
                0 => Qdisc::Priority(c),
                1 => Qdisc::Drr(c),
                _ => Qdisc::Wfq(c),
            }
        },
    )
}

proptest! {
    /// Every discipline: each admitted packet departs exactly once, one at
    /// a time at the link's rate, never before it arrived, and the link
    /// never idles while something waits (work conservation).
    #[test]
    fn every_discipline_conserves_packets_and_work(
        qdisc in any_qdisc(),
        gaps in prop::collection::vec((0..3_000_000u64, 40..1500usize, any::<bool>()), 1..300),
    ) {
        let mut t = 0;
        let arrivals: Vec<(u64, usize, Dscp)> = gaps
            .iter()
            .map(|&(gap, len, ef)| {
                t += gap;
                (t, len, if ef { EF } else { BE })
            })
            .collect();
        let mut l = link(qdisc);
        let (out, dropped) = drive(&mut l, &arrivals);
        let mut seen = vec![0u32; arrivals.len()];
        for o in &out {
            seen[o.token as usize] += 1;
        }
        for d in &dropped {
            seen[*d as usize] += 10;
        }
        prop_assert!(seen.iter().all(|&n| n == 1 || n == 10), "{seen:?}");
        // 8 Mbit/s: len bytes take len µs.
        let mut busy_until = 0;
        for o in &out {
            let (at, len, _) = arrivals[o.token as usize];
            let start = o.departed - len as u64 * 1000;
            prop_assert!(start >= at, "served before it arrived");
            prop_assert!(start >= busy_until, "two packets at once");
            // Work conservation: a gap before this start means nothing was
            // waiting, so this packet arrived at its start.
            if start > busy_until {
                prop_assert_eq!(start, at, "idle while a packet waited");
            }
            busy_until = o.departed;
            let delivered = matches!(o.fate, Fate::Deliver { .. });
            prop_assert!(delivered, "a perfect link delivers");
        }
        prop_assert_eq!(l.queue_packets(Instant::from_nanos(u64::MAX / 2)), 0);
    }
}
