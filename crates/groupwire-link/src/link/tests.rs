use super::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn at(nanos: u64) -> Fate {
    Fate::Deliver {
        at: Instant::from_nanos(nanos),
    }
}

#[test]
fn serialization_times_are_exact() {
    // 100 bytes at 56 kbit/s: 800 bits / 56,000 bit/s = 14,285,714.3 ns,
    // rounded up to 14,285,715 ns.
    let tx = 14_285_715;
    assert_eq!(transmit_nanos(Bitrate::kbps(56), 100), tx);
    let mut link = LinkConfig::new()
        .rate(Bitrate::kbps(56))
        .latency(ms(60))
        .build()
        .expect("valid");
    let delay = 60_000_000;
    // Three back-to-back packets queue behind each other.
    assert_eq!(link.offer(Instant::ZERO, 100), at(tx + delay));
    assert_eq!(link.offer(Instant::ZERO, 100), at(2 * tx + delay));
    assert_eq!(link.offer(Instant::from_nanos(1), 100), at(3 * tx + delay));
    // After the link went idle, a packet starts serializing when offered.
    let later = 10 * tx;
    assert_eq!(
        link.offer(Instant::from_nanos(later), 100),
        at(later + tx + delay)
    );
    // 1500 bytes at 1 Gbit/s: 12 us.
    let mut fast = LinkConfig::new()
        .rate(Bitrate::gbps(1))
        .build()
        .expect("valid");
    assert_eq!(fast.offer(Instant::from_secs(1), 1500), at(1_000_012_000));
}

#[test]
fn fast_transmit_time_agrees_with_bitrate() {
    for bps in [1, 9_600, 56_000, 1_000_000_007, 400_000_000_000] {
        for bytes in [0, 1, 40, 1_499, 1_500, 65_535, 1 << 30, u64::MAX / 4] {
            let rate = Bitrate::bps(bps);
            assert_eq!(
                transmit_nanos(rate, bytes),
                duration_nanos(rate.transmit_time(bytes)),
                "{bytes} bytes at {bps} bit/s"
            );
        }
    }
}

#[test]
fn drops_at_the_tail_when_the_packet_limit_is_reached() {
    let mut link = LinkConfig::new()
        .rate(Bitrate::kbps(80)) // 100 bytes = 10 ms
        .queue(QueueLimit::Packets(2))
        .build()
        .expect("valid");
    assert_eq!(link.offer(Instant::ZERO, 100), at(10_000_000));
    assert_eq!(link.offer(Instant::ZERO, 100), at(20_000_000));
    assert_eq!(link.offer(Instant::ZERO, 100), Fate::QueueDrop);
    assert_eq!(link.queue_packets(Instant::ZERO), 2);
    // The first finishes serializing at 10 ms, making room for one.
    assert_eq!(link.offer(Instant::from_millis(10), 100), at(30_000_000));
    assert_eq!(link.offer(Instant::from_millis(10), 100), Fate::QueueDrop);
    let stats = link.stats();
    assert_eq!(
        (stats.offered, stats.delivered, stats.queue_drops),
        (5, 3, 2)
    );
    assert_eq!(stats.max_queue_packets, 2);
}

#[test]
fn drops_at_the_tail_when_the_byte_limit_is_reached() {
    let mut link = LinkConfig::new()
        .rate(Bitrate::kbps(80))
        .queue(QueueLimit::Bytes(250))
        .build()
        .expect("valid");
    assert!(matches!(
        link.offer(Instant::ZERO, 100),
        Fate::Deliver { .. }
    ));
    assert!(matches!(
        link.offer(Instant::ZERO, 100),
        Fate::Deliver { .. }
    ));
    assert_eq!(link.offer(Instant::ZERO, 100), Fate::QueueDrop);
    // A smaller packet still fits.
    assert!(matches!(
        link.offer(Instant::ZERO, 50),
        Fate::Deliver { .. }
    ));
    assert_eq!(link.queue_bytes(Instant::ZERO), 250);
    assert_eq!(link.stats().max_queue_bytes, 250);
    // A packet larger than the whole queue never fits.
    let mut tiny = LinkConfig::new()
        .rate(Bitrate::kbps(80))
        .queue(QueueLimit::Bytes(99))
        .build()
        .expect("valid");
    assert_eq!(tiny.offer(Instant::ZERO, 100), Fate::QueueDrop);
}

#[test]
fn counts_queue_occupancy_over_time() {
    let mut link = LinkConfig::new()
        .rate(Bitrate::kbps(80)) // 100 bytes = 10 ms, 50 bytes = 5 ms
        .build()
        .expect("valid");
    for len in [100, 50, 100] {
        link.offer(Instant::ZERO, len);
    }
    // Departures at 10, 15 and 25 ms.
    let occupancy = |link: &mut Link, t_ms| {
        let now = Instant::from_millis(t_ms);
        (link.queue_packets(now), link.queue_bytes(now))
    };
    assert_eq!(occupancy(&mut link, 0), (3, 250));
    assert_eq!(occupancy(&mut link, 9), (3, 250));
    assert_eq!(occupancy(&mut link, 10), (2, 150));
    assert_eq!(occupancy(&mut link, 15), (1, 100));
    assert_eq!(occupancy(&mut link, 24), (1, 100));
    assert_eq!(occupancy(&mut link, 25), (0, 0));
    assert_eq!(link.stats().max_queue_packets, 3);
}

#[test]
fn without_a_rate_there_is_no_queue() {
    let mut link = LinkConfig::new()
        .latency(ms(5))
        .queue(QueueLimit::Packets(0))
        .build()
        .expect("valid");
    for i in 0..10 {
        assert_eq!(
            link.offer(Instant::from_millis(i), 1500),
            at((i + 5) * 1_000_000)
        );
    }
    assert_eq!(link.queue_packets(Instant::from_millis(9)), 0);
    assert_eq!(link.stats().queue_drops, 0);
}

fn arrivals(reorder: bool, seed: u64) -> Vec<Instant> {
    let mut link = LinkConfig::new()
        .rate(Bitrate::mbps(10))
        .latency(ms(20))
        .jitter(ms(30))
        .allow_reorder(reorder)
        .seed(seed)
        .build()
        .expect("valid");
    (0..2_000)
        .map(|i| match link.offer(Instant::from_millis(i), 200) {
            Fate::Deliver { at } => at,
            other => panic!("lossless link gave {other:?}"),
        })
        .collect()
}

#[test]
fn jitter_never_reorders_unless_allowed() {
    let in_order = arrivals(false, 1);
    assert!(in_order.windows(2).all(|w| w[0] <= w[1]));
    let reordered = arrivals(true, 1);
    let inversions = reordered.windows(2).filter(|w| w[0] > w[1]).count();
    assert!(inversions > 100, "only {inversions} inversions");
    // Jitter stays within [0, max] on top of serialization and delay.
    for (i, a) in reordered.iter().enumerate() {
        let base = Instant::from_millis(i as u64) + Duration::from_nanos(160_000) + ms(20);
        assert!(*a >= base && *a <= base + ms(30), "packet {i} at {a}");
    }
    // In order, a packet arrives at the later of its own time and the previous arrival.
    for (i, (ordered, own)) in in_order.iter().zip(&reordered).enumerate().skip(1) {
        assert_eq!(*ordered, (*own).max(in_order[i - 1]), "packet {i}");
    }
}

#[test]
fn lost_packets_still_use_the_link() {
    let mut link = LinkConfig::new()
        .rate(Bitrate::kbps(80))
        .loss(LossModel::dyck_random(1.0))
        .build()
        .expect("valid");
    assert_eq!(link.offer(Instant::ZERO, 100), Fate::Lost);
    assert_eq!(link.queue_packets(Instant::ZERO), 1);
    link.set_loss(LossModel::None).expect("valid");
    assert_eq!(link.offer(Instant::ZERO, 100), at(20_000_000));
    assert_eq!(link.stats().lost, 1);
}

#[test]
fn corrupt_packets_arrive_with_their_errors() {
    let mut link = LinkConfig::new()
        .latency(ms(1))
        .loss("ber:1".parse().expect("valid"))
        .build()
        .expect("valid");
    match link.offer(Instant::ZERO, 1) {
        Fate::Corrupt { at, errors } => {
            assert_eq!(at, Instant::from_millis(1));
            assert_eq!(errors.count(), 8);
        }
        other => panic!("expected corruption, got {other:?}"),
    }
    assert_eq!(link.stats().corrupted, 1);
}

#[test]
fn same_seed_gives_the_same_fates() {
    let fates = |seed| {
        let mut link = LinkConfig::cellular().seed(seed).build().expect("valid");
        (0..20_000)
            .map(|i| link.offer(Instant::from_micros(i * 500), 1000))
            .collect::<Vec<_>>()
    };
    let a = fates(3);
    assert_eq!(a, fates(3));
    assert_ne!(a, fates(4));
    assert!(a.contains(&Fate::Lost));
    assert!(a.contains(&Fate::QueueDrop));
}

#[test]
fn loss_pattern_does_not_depend_on_jitter_or_delay() {
    let lost = |config: LinkConfig| {
        let mut link = config.seed(9).build().expect("valid");
        (0..5_000)
            .map(|i| link.offer(Instant::from_millis(i), 100) == Fate::Lost)
            .collect::<Vec<_>>()
    };
    let loss = LossModel::gilbert(0.01, 0.2);
    assert_eq!(
        lost(LinkConfig::new().loss(loss.clone())),
        lost(LinkConfig::new().loss(loss).latency(ms(50)).jitter(ms(20)))
    );
}

#[test]
fn stats_add_up() {
    let mut link = LinkConfig::new()
        .rate(Bitrate::mbps(2)) // 200 bytes = 0.8 ms, offered every 1 ms
        .queue(QueueLimit::Packets(10))
        .loss(LossModel::dyck_burst(0.04, 5))
        .seed(5)
        .build()
        .expect("valid");
    for i in 0..10_000 {
        link.offer(Instant::from_micros(i * 1_000), 200);
    }
    let s = link.stats();
    assert_eq!(s.offered, 10_000);
    assert_eq!(s.offered_bytes, 2_000_000);
    assert_eq!(
        s.delivered + s.lost + s.corrupted + s.queue_drops,
        s.offered
    );
    assert!(s.lost > 500 && s.queue_drops == 0, "{s:?}");
}

#[test]
fn presets_build_and_describe_the_paper_links() {
    let dialup = LinkConfig::dialup_56k();
    assert_eq!(dialup.rate, Some(Bitrate::kbps(56)));
    assert_eq!(LinkConfig::lan_256k().rate, Some(Bitrate::kbps(256)));
    for config in [dialup, LinkConfig::lan_256k(), LinkConfig::cellular()] {
        let link = config.build().expect("valid preset");
        assert_eq!(link.config(), &config);
    }
    assert_eq!(LinkConfig::default(), LinkConfig::new());
    assert_eq!(LinkConfig::new().jitter(Duration::ZERO).jitter, None);
}

#[test]
fn rate_and_delay_schedules_apply_at_each_packets_time() {
    let mut link = LinkConfig::new()
        .rate_schedule(
            "schedule:1s 1Mbit/s; 1s 2Mbit/s; repeat"
                .parse()
                .expect("valid"),
        )
        .delay_schedule("schedule:10s 20ms -> 200ms".parse().expect("valid"))
        .build()
        .expect("valid");
    // 1250 bytes = 10,000 bits: 10 ms at 1 Mbit/s, 5 ms at 2 Mbit/s.
    let fate = |link: &mut Link, t_ms: u64| link.offer(Instant::from_millis(t_ms), 1250);
    // At 0: 10 ms serialization, then the delay in force at 10 ms (20.18 ms).
    assert_eq!(fate(&mut link, 0), at(10_000_000 + 20_180_000));
    // At 1.5 s: 5 ms serialization; the delay ramps 18 ms per second.
    assert_eq!(fate(&mut link, 1500), at(1_505_000_000 + 47_090_000));
    // The rate repeats; the delay, played once, holds 200 ms after 10 s.
    assert_eq!(fate(&mut link, 20_000), at(20_010_000_000 + 200_000_000));
    assert_eq!(
        link.rate_at(Instant::from_millis(2500)),
        Some(Bitrate::mbps(1))
    );
    assert_eq!(link.delay_at(Instant::from_secs(5)), ms(110));
    // set_rate ends the schedule.
    link.set_rate(Some(Bitrate::mbps(10)));
    assert_eq!(
        link.rate_at(Instant::from_millis(2500)),
        Some(Bitrate::mbps(10))
    );
}

#[test]
fn a_falling_delay_does_not_reorder_without_permission() {
    let mut link = LinkConfig::new()
        .delay_schedule("schedule:1s 500ms; 1s 10ms".parse().expect("valid"))
        .build()
        .expect("valid");
    let first = link.offer(Instant::from_millis(999), 100);
    let second = link.offer(Instant::from_millis(1000), 100);
    assert_eq!(first, at(1_499_000_000));
    // It would arrive at 1.01 s, before the first: held behind it.
    assert_eq!(second, at(1_499_000_000));
}

#[test]
fn schedules_travel_in_the_config_file_as_text() {
    let config = LinkConfig::new()
        .loss(LossModel::alternating())
        .rate_schedule(
            "schedule:30s 10Mbit/s -> 2Mbit/s; repeat"
                .parse()
                .expect("valid"),
        );
    let text = toml::to_string(&config).expect("serializes");
    assert!(
        text.contains("rate_schedule = \"schedule:30s 10Mbit/s -> 2Mbit/s; repeat\""),
        "{text}"
    );
    assert!(text.contains("loss = \"schedule:alternating\""), "{text}");
    let back: LinkConfig = toml::from_str(&text).expect("parses");
    assert_eq!(back, config);
    let bad: Result<LinkConfig, _> = toml::from_str("rate_schedule = \"schedule:1s fast\"");
    assert!(bad.expect_err("rejected").to_string().contains("bit rate"));
}
