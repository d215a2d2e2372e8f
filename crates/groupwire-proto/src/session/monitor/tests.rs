use std::collections::VecDeque;
use std::time::Duration;

use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::report::{MAX_REPORT_LEN, REPORT_LEN, REPORT_LEN_DISPERSION};
use super::*;
use crate::control::gilbert::TwoState;
use crate::session::PathEstimate;

const MS: Duration = Duration::from_millis(1);

fn at_ms(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

/// A receiver with reorder tolerance `reorder`, fed `seqs` one per ms
/// (ts = the send time 20 ms earlier).
fn receiver(reorder: u32, seqs: &[u32]) -> ReceiveMonitor {
    let mut rx = ReceiveMonitor::new(MonitorConfig {
        reorder,
        ..MonitorConfig::default()
    });
    for (i, &s) in seqs.iter().enumerate() {
        let t = at_ms(20 + i as u64);
        rx.on_packet(t, s, wire_ts(t - 20 * MS), 100);
    }
    rx
}

#[test]
fn a_scripted_pattern_gives_exact_counts_and_runs() {
    // Lost: 3; 6 and 7; 21 to 25. 9 comes after 10 (within the tolerance
    // of 4: it fills its gap), 20 twice, and 3 arrives once 20 has: past
    // the tolerance, it stays lost.
    let mut seqs: Vec<u32> = vec![0, 1, 2, 4, 5, 8, 10, 9];
    seqs.extend(11..=20);
    seqs.extend([20, 3]);
    seqs.extend(26..=40);
    let mut rx = receiver(4, &seqs);
    let st = rx.stats();
    assert_eq!(
        (st.packets, st.duplicates, st.late),
        (seqs.len() as u64, 1, 1)
    );
    assert_eq!(rx.counts(), (33, 8), "0..=40 less 8 lost");
    assert_eq!(rx.runs(), (3, [1, 1, 0, 1, 0, 0]));
    let r = rx.poll_report(at_ms(100)).expect("a report is due");
    assert_eq!((r.highest_seq, r.received, r.lost, r.runs), (40, 33, 8, 3));
    assert_eq!(r.histogram, [1, 1, 0, 1, 0, 0]);
    assert_eq!(r.interval_bytes, 100 * seqs.len() as u64);
    // 40 arrived last, at 20 + index ms; the report is at 100 ms.
    let last_at = 20 + seqs.len() as u64 - 1;
    assert_eq!(r.echo_ts, wire_ts(at_ms(last_at - 20)));
    assert_eq!(r.echo_hold_us, ((100 - last_at) * 1000) as u32);
    assert_eq!(rx.poll_report(at_ms(100)), None, "one per interval");
}

#[test]
fn runs_are_judged_only_past_the_reorder_tolerance() {
    // 1 and 2 missing: counted lost at once, a run only once 2 is 4 behind.
    let mut rx = receiver(4, &[0, 3, 4, 5]);
    assert_eq!(rx.counts(), (4, 2));
    assert_eq!(rx.runs().0, 0, "the run is still within the window");
    // 2 arrives late but in time: one loss taken back, the run shrinks.
    rx.on_packet(at_ms(30), 2, wire_ts(at_ms(9)), 100);
    assert_eq!(rx.counts(), (5, 1));
    rx.on_packet(at_ms(31), 6, wire_ts(at_ms(11)), 100);
    assert_eq!(rx.runs(), (1, [1, 0, 0, 0, 0, 0]), "a run of one: 1");
}

#[test]
fn counts_run_through_the_wrap_at_u32_max() {
    let start = u32::MAX - 5;
    // MAX-1, MAX and 0 lost: one run of 3 across the wrap.
    let seqs: Vec<u32> = (0..17u32)
        .map(|i| start.wrapping_add(i))
        .filter(|s| ![u32::MAX - 1, u32::MAX, 0].contains(s))
        .collect();
    let mut rx = receiver(2, &seqs);
    let r = rx.poll_report(at_ms(100)).expect("due");
    assert_eq!(r.highest_seq, (1u64 << 32) + 10);
    assert_eq!((r.received, r.lost, r.runs), (14, 3, 1));
    assert_eq!(r.histogram, [0, 0, 1, 0, 0, 0]);
}

#[test]
fn a_jump_beyond_max_dropout_counts_once_confirmed() {
    let mut rx = ReceiveMonitor::new(MonitorConfig {
        max_dropout: 100,
        ..MonitorConfig::default()
    });
    let mut t = at_ms(0);
    let mut feed = |rx: &mut ReceiveMonitor, s: u32| {
        t += MS;
        rx.on_packet(t, s, wire_ts(t), 50);
    };
    for s in 0..=10 {
        feed(&mut rx, s);
    }
    feed(&mut rx, 1_000_000);
    assert_eq!(rx.stats().unconfirmed, 1);
    assert_eq!(rx.counts(), (11, 0), "held, not counted");
    feed(&mut rx, 11);
    feed(&mut rx, 2_000_000);
    feed(&mut rx, 2_000_001);
    assert_eq!(rx.stats().unconfirmed, 1, "1 000 000 never confirmed");
    assert_eq!(rx.counts(), (14, 2_000_002 - 14));
    for s in 2_000_002..2_000_040 {
        feed(&mut rx, s);
    }
    assert_eq!(rx.runs(), (1, [0, 0, 0, 0, 0, 1]));
}

#[test]
fn jitter_follows_both_definitions() {
    // One packet a ms; transit alternates between 10 ms and 10.4 ms.
    let mut rx = ReceiveMonitor::new(MonitorConfig::default());
    for i in 0..1000u32 {
        let sent = at_ms(u64::from(i));
        let transit = Duration::from_micros(10_000 + 400 * u64::from(i % 2));
        rx.on_packet(sent + transit, i, wire_ts(sent), 100);
    }
    let r = rx.poll_report(at_ms(1100)).expect("due");
    assert_eq!(r.jitter_us, 400, "RFC 3550: |D| = 400 µs every packet");
    assert_eq!(r.jitter_leigh_us, Some(200), "Leigh: 200 µs from a mean");
    // A constant transit, whatever the clock offset: no jitter.
    let mut rx = ReceiveMonitor::new(MonitorConfig::default());
    for i in 0..100u32 {
        let sent = Instant::from_secs(7_000) + MS * i;
        rx.on_packet(at_ms(3 + u64::from(i)), i, wire_ts(sent), 100);
    }
    let r = rx.poll_report(at_ms(200)).expect("due");
    assert_eq!((r.jitter_us, r.jitter_leigh_us), (0, Some(0)));
}

#[test]
fn reports_come_every_interval_while_packets_arrive_else_once_a_second() {
    let mut rx = ReceiveMonitor::new(MonitorConfig::default());
    assert_eq!(rx.poll_timeout(), None, "nothing arrived");
    assert_eq!(rx.poll_report(at_ms(5000)), None);
    rx.on_packet(at_ms(10), 0, 0, 100);
    assert_eq!(rx.poll_timeout(), Some(at_ms(10)), "the first at once");
    let first = rx.poll_report(at_ms(10)).expect("due");
    assert_eq!((first.report_seq, first.interval_us), (0, 0));
    rx.on_packet(at_ms(50), 1, 0, 300);
    assert_eq!(rx.poll_timeout(), Some(at_ms(110)));
    assert_eq!(rx.poll_report(at_ms(109)), None);
    let r = rx.poll_report(at_ms(110)).expect("due");
    assert_eq!(
        (r.report_seq, r.interval_bytes, r.interval_us),
        (1, 300, 100_000)
    );
    // Nothing more arrives: a keepalive a second later, with the echo
    // held longer.
    assert_eq!(rx.poll_timeout(), Some(at_ms(1110)));
    let k = rx.poll_report(at_ms(1110)).expect("keepalive");
    assert_eq!((k.interval_bytes, k.interval_us), (0, 1_000_000));
    assert_eq!(k.echo_hold_us, 1_060_000);
    // After the idle second, the next interval starts at its first packet.
    rx.on_packet(at_ms(2000), 2, 0, 500);
    let r = rx.poll_report(at_ms(2110)).expect("due");
    assert_eq!((r.interval_bytes, r.interval_us), (500, 110_000));
}

/// A path: `tx` sends, the packet crosses `delay` unless lost, `rx`
/// reports, and the report crosses `delay` back (through its bytes).
struct Pipe {
    tx: SendMonitor,
    rx: ReceiveMonitor,
    delay: Duration,
    seq: u32,
    back: VecDeque<(Instant, MonitorReport)>,
}

impl Pipe {
    fn new(delay: Duration) -> Self {
        Self {
            tx: SendMonitor::new(MonitorConfig::default()),
            rx: ReceiveMonitor::new(MonitorConfig::default()),
            delay,
            seq: 0,
            back: VecDeque::new(),
        }
    }

    fn deliver(&mut self, now: Instant) {
        while let Some(&(at, r)) = self.back.front() {
            if at > now {
                break;
            }
            self.back.pop_front();
            self.tx.on_report(at, &r);
        }
    }

    fn send(&mut self, now: Instant, bytes: usize, lost: bool) {
        self.deliver(now);
        let seq = self.seq;
        self.seq = self.seq.wrapping_add(1);
        self.tx.on_send(now, seq, bytes);
        let at = now + self.delay;
        if !lost {
            self.rx.on_packet(at, seq, wire_ts(now), bytes);
        }
        while let Some(r) = self.rx.poll_report(at) {
            let mut buf = Vec::new();
            r.encode(&mut buf);
            let r = MonitorReport::decode(&buf).expect("a report decodes");
            self.back.push_back((at + self.delay, r));
        }
    }
}

/// A Gilbert chain's loss pattern (Bad loses everything).
struct Chain {
    rng: ChaCha8Rng,
    bad: bool,
    model: TwoState,
}

impl Chain {
    fn new(seed: u64, model: TwoState) -> Self {
        Self {
            rng: ChaCha8Rng::seed_from_u64(seed),
            bad: false,
            model,
        }
    }

    fn lost(&mut self) -> bool {
        let flip = if self.bad { self.model.r } else { self.model.p };
        if self.rng.random::<f64>() < flip {
            self.bad = !self.bad;
        }
        self.bad
    }
}

/// `secs` seconds at `rate` packets per second of `chain`'s losses, from
/// `start`; the estimate after each second.
fn run(
    pipe: &mut Pipe,
    chain: &mut Chain,
    start: Instant,
    secs: u64,
    rate: u64,
) -> Vec<PathEstimate> {
    let gap = Duration::from_secs(1) / rate as u32;
    let mut out = Vec::new();
    for s in 0..secs {
        for i in 0..rate {
            let now = start + Duration::from_secs(s) + gap * i as u32;
            let lost = chain.lost();
            pipe.send(now, 1000, lost);
        }
        out.push(pipe.tx.estimate());
    }
    out
}

#[test]
fn the_round_trip_of_a_scripted_exchange_is_exact() {
    let mut tx = SendMonitor::new(MonitorConfig::default());
    let mut rx = ReceiveMonitor::new(MonitorConfig::default());
    // The sender's µs clock wraps 10 ms after the first send; the
    // receiver's clock is 5 s off.
    let t0 = Instant::from_micros(u64::from(u32::MAX) - 10_000);
    let off = Duration::from_secs(5);
    tx.on_send(t0, 0, 100);
    rx.on_packet(t0 + 20 * MS + off, 0, wire_ts(t0), 100);
    // Held 5 ms, back at 45 ms: 40 ms.
    let r = rx
        .poll_report(t0 + 25 * MS + off)
        .expect("the first is due");
    assert_eq!(r.echo_hold_us, 5_000);
    tx.on_report(t0 + 45 * MS, &r);
    let e = tx.estimate();
    assert_eq!(e.srtt, Some(40 * MS));
    assert_eq!(e.min_rtt, Some(40 * MS));
    assert_eq!(tx.rttvar(), Some(20 * MS));
    // The second: sent at 100 ms, held 5 ms, back at 165 ms: 60 ms.
    let t1 = t0 + 100 * MS;
    tx.on_send(t1, 1, 100);
    rx.on_packet(t1 + 30 * MS + off, 1, wire_ts(t1), 100);
    let r = rx.poll_report(t1 + 35 * MS + off).expect("due");
    assert_eq!(r.echo_hold_us, 5_000);
    tx.on_report(t1 + 65 * MS, &r);
    assert_eq!(tx.latest_rtt(), Some(60 * MS));
    // RFC 6298: RTTVAR = 3/4 · 20 + 1/4 · |40 − 60| = 20;
    // SRTT = 7/8 · 40 + 1/8 · 60 = 42.5.
    assert_eq!(tx.rttvar(), Some(20 * MS));
    assert_eq!(tx.estimate().srtt, Some(Duration::from_micros(42_500)));
    assert_eq!(tx.estimate().min_rtt, Some(40 * MS));
    assert_eq!(tx.stats().rtt_samples, 2);
}

#[test]
fn the_minimum_round_trip_expires_after_its_window() {
    let mut pipe = Pipe::new(20 * MS);
    let mut chain = Chain::new(1, TwoState::gilbert(0.0, 1.0));
    run(&mut pipe, &mut chain, at_ms(0), 3, 100);
    assert_eq!(pipe.tx.estimate().min_rtt, Some(40 * MS));
    // The path lengthens: the 40 ms minimum holds for its 10 s window.
    pipe.delay = 30 * MS;
    let e = run(&mut pipe, &mut chain, Instant::from_secs(3), 15, 100);
    assert_eq!(e[5].min_rtt, Some(40 * MS));
    assert_eq!(e[14].min_rtt, Some(60 * MS));
    let srtt = e[14].srtt.expect("measured");
    assert!(
        srtt.abs_diff(60 * MS) < Duration::from_micros(1),
        "{srtt:?}"
    );
}

#[test]
fn a_gilbert_stream_is_fitted_to_its_p_r_and_mean_burst() {
    // 3.85% loss in bursts of 4 on average, 10 000 packets a second.
    let model = TwoState::gilbert(0.01, 0.25);
    let mut pipe = Pipe::new(20 * MS);
    let mut chain = Chain::new(7, model);
    let e = *run(&mut pipe, &mut chain, at_ms(0), 20, 10_000)
        .last()
        .expect("20 estimates");
    let close = |got: f64, want: f64, tol: f64| (got / want - 1.0).abs() < tol;
    let [slow, fast] = pipe.tx.fits();
    for (name, c, tol) in [("slow", slow, 0.15), ("fast", fast, 0.25)] {
        let m = c.model();
        assert!(close(m.p, model.p, tol), "{name} p {} vs {}", m.p, model.p);
        assert!(close(m.r, model.r, tol), "{name} r {} vs {}", m.r, model.r);
    }
    let m = e.loss_model.expect("fitted");
    assert!(
        close(m.p, model.p, 0.25) && close(m.r, model.r, 0.25),
        "{m:?}"
    );
    assert!(close(e.mean_burst, 4.0, 0.25), "{}", e.mean_burst);
    assert!(close(e.loss, model.loss_rate(), 0.25), "{}", e.loss);
    // 1000-byte packets, 10 000 a second, less the losses.
    let want = 80e6 * (1.0 - model.loss_rate());
    let got = e.delivered.expect("measured").as_bps() as f64;
    assert!(close(got, want, 0.05), "{got} vs {want}");
    assert!(e.samples > 10_000.0, "{}", e.samples);
    let in_flight = pipe.back.len() as u64;
    assert_eq!(pipe.tx.stats().reports + in_flight, pipe.rx.stats().reports);
    assert_eq!(pipe.tx.stats().absurd + pipe.tx.stats().stale, 0);
}

#[test]
fn a_rise_in_loss_shows_within_3_s_and_a_fall_within_12_s() {
    let light = TwoState::gilbert(0.01, 0.99); // 1%, random
    let heavy = TwoState::gilbert(0.1 * 0.5 / 0.9, 0.5); // 10%, bursts of 2
    assert!((heavy.loss_rate() - 0.1).abs() < 1e-12);
    let mut pipe = Pipe::new(20 * MS);
    let mut chain = Chain::new(3, light);
    let calm = run(&mut pipe, &mut chain, at_ms(0), 20, 5000);
    assert!(calm[19].loss < 0.015, "{:?}", calm[19]);
    chain.model = heavy;
    let worse = run(&mut pipe, &mut chain, Instant::from_secs(20), 20, 5000);
    // 7/8 of the step by 3 s: 1% + 7/8 · 9% = 8.9%.
    assert!(worse[2].loss > 0.075, "after 3 s: {}", worse[2].loss);
    assert!(worse[2].mean_burst > 1.6, "{}", worse[2].mean_burst);
    chain.model = light;
    let better = run(&mut pipe, &mut chain, Instant::from_secs(40), 12, 5000);
    // Trusted only slowly: after 3 s the slow fit still sees 6%.
    assert!(better[2].loss > 0.04, "after 3 s: {}", better[2].loss);
    // By 12 s, 7/8 of the way down: 10%/8 + 7/8 · 1% = 2.1%.
    assert!(better[11].loss < 0.028, "after 12 s: {}", better[11].loss);
}

#[test]
fn the_same_seed_gives_the_same_estimates() {
    let estimates = |seed| {
        let mut pipe = Pipe::new(15 * MS);
        let mut chain = Chain::new(seed, TwoState::gilbert(0.02, 0.3));
        run(&mut pipe, &mut chain, at_ms(0), 5, 1000)
    };
    assert_eq!(estimates(11), estimates(11));
    assert_ne!(estimates(11), estimates(12));
}

#[test]
fn probes_only_after_a_report_and_only_when_idle() {
    let mut pipe = Pipe::new(20 * MS);
    // Nothing answers yet: no probe however idle.
    pipe.tx.on_send(at_ms(0), 0, 100);
    pipe.seq = 1;
    assert!(!pipe.tx.poll_probe(at_ms(2000)));
    assert_eq!(pipe.tx.poll_timeout(), None);
    // Traffic every 10 ms for a second, answered: busy, no probe.
    for i in 0..100 {
        let now = at_ms(3000 + 10 * i);
        pipe.send(now, 100, false);
        assert!(!pipe.tx.poll_probe(now));
    }
    pipe.deliver(at_ms(4100));
    assert!(pipe.tx.stats().reports > 0);
    // Idle from 3990 ms: a probe at 4240, then one per 250 ms at most.
    assert_eq!(pipe.tx.poll_timeout(), Some(at_ms(4240)));
    assert!(!pipe.tx.poll_probe(at_ms(4239)));
    assert!(pipe.tx.poll_probe(at_ms(4240)));
    assert!(!pipe.tx.poll_probe(at_ms(4240)), "one at a time");
    assert!(!pipe.tx.poll_probe(at_ms(4489)));
    // Probes sent and answered keep the round trip fresh for as long as
    // the peer answers.
    let mut now = at_ms(4240);
    let mut probes = 0;
    while now < at_ms(14_240) {
        if pipe.tx.poll_probe(now) || probes == 0 {
            probes += 1;
            pipe.send(now, 40, false);
        }
        pipe.deliver(now);
        now += MS;
    }
    assert!((38..=41).contains(&probes), "{probes} probes in 10 s");
    assert_eq!(pipe.tx.estimate().srtt, Some(40 * MS));
    // The peer goes silent: probes stop 5 s after its last report.
    let last = pipe.rx.stats().reports;
    let mut asked = 0;
    while now < at_ms(30_000) {
        if pipe.tx.poll_probe(now) {
            asked += 1;
            pipe.tx.on_send(now, pipe.seq, 40);
            pipe.seq += 1;
        }
        now += MS;
    }
    assert!(
        (19..=21).contains(&asked),
        "{asked} probes into the silence"
    );
    assert_eq!(pipe.tx.poll_timeout(), None);
    assert_eq!(pipe.rx.stats().reports, last);
}

/// A valid exchange to attack: ten packets sent, seven received.
fn attacked() -> (SendMonitor, MonitorReport) {
    let mut tx = SendMonitor::new(MonitorConfig::default());
    let mut rx = ReceiveMonitor::new(MonitorConfig::default());
    for s in 0..10u32 {
        let t = at_ms(u64::from(s));
        tx.on_send(t, s, 100);
        if s % 3 != 1 {
            rx.on_packet(t + 10 * MS, s, wire_ts(t), 100);
        }
    }
    let r = rx.poll_report(at_ms(200)).expect("due");
    tx.on_report(at_ms(210), &r);
    assert_eq!(tx.stats().reports, 1);
    (tx, r)
}

/// One of [`SendStats`]' counters.
type Counter = fn(&SendStats) -> u64;

#[test]
fn hostile_and_stale_reports_are_counted_and_ignored() {
    let (mut tx, good) = attacked();
    let before = tx.estimate();
    let next = MonitorReport {
        report_seq: good.report_seq + 1,
        ..good
    };
    let cases: [(MonitorReport, Counter); 7] = [
        (good, |s| s.stale),
        (
            MonitorReport {
                received: good.received - 1,
                lost: good.lost + 1,
                ..next
            },
            |s| s.backwards,
        ),
        (
            MonitorReport {
                highest_seq: 10,
                received: good.received + 1,
                ..next
            },
            |s| s.future,
        ),
        (
            MonitorReport {
                received: 11,
                ..next
            },
            |s| s.future,
        ),
        (
            MonitorReport {
                jitter_us: u32::MAX,
                ..next
            },
            |s| s.absurd,
        ),
        (
            MonitorReport {
                lost: good.lost + 1,
                ..next
            },
            |s| s.absurd,
        ),
        (
            MonitorReport {
                interval_bytes: u64::MAX,
                ..next
            },
            |s| s.absurd,
        ),
    ];
    for (i, (r, counter)) in cases.into_iter().enumerate() {
        let was = counter(&tx.stats());
        tx.on_report(at_ms(300 + i as u64), &r);
        assert_eq!(counter(&tx.stats()), was + 1, "case {i}");
        assert_eq!(tx.estimate(), before, "case {i} changed the estimate");
    }
    assert_eq!(tx.stats().reports, 1);
    // An echo of something never sent is no round-trip sample, but the
    // report's counts are good.
    let r = MonitorReport {
        echo_ts: wire_ts(at_ms(5000)),
        ..next
    };
    tx.on_report(at_ms(400), &r);
    assert_eq!((tx.stats().reports, tx.stats().rtt_rejected), (2, 1));
    // A report to a monitor that never sent is from the future.
    let mut fresh = SendMonitor::new(MonitorConfig::default());
    fresh.on_report(at_ms(1), &good);
    assert_eq!(fresh.stats().future, 1);
    assert_eq!(fresh.estimate(), PathEstimate::UNKNOWN);
}

#[test]
fn the_report_bytes_are_as_documented() {
    let r = MonitorReport {
        report_seq: 0x0102_0304,
        highest_seq: 0x1112_1314_1516_1718,
        received: 0x100,
        lost: 0x20,
        runs: 0x18,
        histogram: [1, 2, 3, 4, 5, 6],
        jitter_us: 0xa0b0,
        jitter_leigh_us: Some(0xc0d0),
        interval_bytes: 0x1_0000_0000,
        interval_us: 100_000,
        echo_ts: 0xdead_beef,
        echo_hold_us: 5,
        dispersion_bps: Some(0x0102_0304_0506),
    };
    let mut buf = vec![0xee];
    r.encode(&mut buf);
    let golden: [u8; REPORT_LEN_DISPERSION] = [
        1, 3, 0, 100, // version, flags (Leigh, dispersion), length
        1, 2, 3, 4, // report seq
        0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, // highest seq
        0, 0, 0, 0, 0, 0, 1, 0, // received
        0, 0, 0, 0, 0, 0, 0, 0x20, // lost
        0, 0, 0, 0, 0, 0, 0, 0x18, // runs
        0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, // histogram
        0, 0, 0, 4, 0, 0, 0, 5, 0, 0, 0, 6, //
        0, 0, 0xa0, 0xb0, // RFC 3550 jitter
        0, 0, 0xc0, 0xd0, // Leigh jitter
        0, 0, 0, 1, 0, 0, 0, 0, // interval bytes
        0, 1, 0x86, 0xa0, // interval µs
        0xde, 0xad, 0xbe, 0xef, // echo ts
        0, 0, 0, 5, // hold
        0, 0, 1, 2, 3, 4, 5, 6, // dispersion rate
    ];
    assert_eq!(buf[0], 0xee, "appended");
    assert_eq!(&buf[1..], &golden[..]);
    assert_eq!(MonitorReport::decode(&golden), Ok(r));
    // Without Leigh's jitter and the dispersion rate the flags are clear
    // and the fields zero.
    let plain = MonitorReport {
        jitter_leigh_us: None,
        dispersion_bps: None,
        ..r
    };
    let mut b = Vec::new();
    plain.encode(&mut b);
    assert_eq!(
        (b[1], &b[68..72], &b[92..]),
        (0, &[0u8; 4][..], &[0u8; 8][..])
    );
    assert_eq!(MonitorReport::decode(&b), Ok(plain));
    // A version-1.0 report (92 bytes, from a build before the dispersion
    // rate) decodes, with none; so does a flag without the field.
    let mut old = golden[..REPORT_LEN].to_vec();
    old[3] = 92;
    let want = MonitorReport {
        dispersion_bps: None,
        ..r
    };
    assert_eq!(MonitorReport::decode(&old), Ok(want));
    let mut unflagged = golden.to_vec();
    unflagged[1] = 1;
    assert_eq!(MonitorReport::decode(&unflagged), Ok(want));
}

#[test]
fn decoding_rejects_what_it_must_and_skips_later_fields() {
    let r = MonitorReport {
        received: 5,
        highest_seq: 9,
        lost: 5,
        runs: 2,
        histogram: [1, 1, 0, 0, 0, 0],
        ..MonitorReport::default()
    };
    let mut b = Vec::new();
    r.encode(&mut b);
    assert_eq!(MonitorReport::decode(&b), Ok(r));
    assert!(matches!(
        MonitorReport::decode(&b[..3]),
        Err(ReportError::Truncated { needed: 4, .. })
    ));
    assert!(matches!(
        MonitorReport::decode(&b[..99]),
        Err(ReportError::Truncated { needed: 100, .. })
    ));
    let mut v2 = b.clone();
    v2[0] = 2;
    assert_eq!(
        MonitorReport::decode(&v2),
        Err(ReportError::UnsupportedVersion(2))
    );
    let mut long = b.clone();
    long.push(0);
    assert!(matches!(
        MonitorReport::decode(&long),
        Err(ReportError::Length { .. })
    ));
    // A later minor version's 8 more bytes, with its length: skipped.
    long.extend([0; 7]);
    long[3] = 108;
    assert_eq!(MonitorReport::decode(&long), Ok(r));
    let mut huge = vec![0u8; MAX_REPORT_LEN + 1];
    huge[..4].copy_from_slice(&[1, 0, 2, 1]);
    assert!(matches!(
        MonitorReport::decode(&huge),
        Err(ReportError::Length { .. })
    ));
    for bad in [
        MonitorReport { runs: 6, ..r },
        MonitorReport { lost: 6, ..r },
        MonitorReport {
            histogram: [2, 1, 0, 0, 0, 0],
            ..r
        },
        MonitorReport {
            received: 0,
            lost: 0,
            runs: 0,
            histogram: [0; 6],
            ..r
        },
        MonitorReport {
            received: u64::MAX,
            ..r
        },
    ] {
        let mut b = Vec::new();
        bad.encode(&mut b);
        assert!(
            matches!(MonitorReport::decode(&b), Err(ReportError::Inconsistent(_))),
            "{bad:?}"
        );
    }
}

fn any_report() -> impl Strategy<Value = MonitorReport> {
    (
        any::<(u32, u64, u64, u64)>(),
        any::<[u32; 6]>(),
        any::<(u32, Option<u32>, u64, u32, u32, u32)>(),
        any::<Option<u64>>(),
    )
        .prop_map(
            |((seq, received, lost, runs), histogram, rest, dispersion_bps)| {
                // Counters that agree, as a receiver makes them.
                let received = (received >> 2).max(1);
                let lost = lost >> 2;
                let runs = runs.min(lost);
                let mut histogram = histogram;
                let mut left = runs;
                for h in &mut histogram {
                    *h = (*h).min(u32::try_from(left).unwrap_or(u32::MAX));
                    left -= u64::from(*h);
                }
                let (
                    jitter_us,
                    jitter_leigh_us,
                    interval_bytes,
                    interval_us,
                    echo_ts,
                    echo_hold_us,
                ) = rest;
                MonitorReport {
                    report_seq: seq,
                    highest_seq: received + lost - 1,
                    received,
                    lost,
                    runs,
                    histogram,
                    jitter_us,
                    jitter_leigh_us,
                    interval_bytes,
                    interval_us,
                    echo_ts,
                    echo_hold_us,
                    dispersion_bps,
                }
            },
        )
}

proptest! {
    #[test]
    fn reports_round_trip(r in any_report()) {
        let mut b = Vec::new();
        r.encode(&mut b);
        prop_assert_eq!(b.len(), REPORT_LEN_DISPERSION);
        prop_assert_eq!(MonitorReport::decode(&b), Ok(r));
    }

    #[test]
    fn any_bytes_decode_without_panicking(b in proptest::collection::vec(any::<u8>(), 0..200)) {
        if let Ok(r) = MonitorReport::decode(&b) {
            let mut again = Vec::new();
            r.encode(&mut again);
            prop_assert_eq!(MonitorReport::decode(&again), Ok(r));
        }
    }
}

/// A bottleneck: a drop-tail FIFO of `limit` packets served at `rate`
/// bytes per second, then a propagation delay that `set_delay` may change;
/// reports come back after the delay on an empty reverse path.
struct Bottleneck {
    tx: SendMonitor,
    rx: ReceiveMonitor,
    rate: f64,
    limit: usize,
    delay: Duration,
    /// Departure times (s) of the packets in the queue.
    queue: VecDeque<f64>,
    seq: u32,
    back: VecDeque<(Instant, MonitorReport)>,
}

impl Bottleneck {
    fn new(rate_bps: f64, limit: usize, delay: Duration) -> Self {
        Self {
            tx: SendMonitor::new(MonitorConfig::default()),
            rx: ReceiveMonitor::new(MonitorConfig::default()),
            rate: rate_bps / 8.0,
            limit,
            delay,
            queue: VecDeque::new(),
            seq: 0,
            back: VecDeque::new(),
        }
    }

    /// One packet of `bytes` at `now`; `lost` drops it on the path after
    /// the queue.
    fn send(&mut self, now: Instant, bytes: usize, lost: bool) {
        while let Some(&(at, r)) = self.back.front() {
            if at > now {
                break;
            }
            self.back.pop_front();
            self.tx.on_report(at, &r);
        }
        let t = now.as_secs_f64();
        while self.queue.front().is_some_and(|&d| d <= t) {
            self.queue.pop_front();
        }
        let seq = self.seq;
        self.seq = self.seq.wrapping_add(1);
        self.tx.on_send(now, seq, bytes);
        if self.queue.len() >= self.limit {
            return;
        }
        let start = self.queue.back().copied().unwrap_or(t).max(t);
        let depart = start + bytes as f64 / self.rate;
        self.queue.push_back(depart);
        if lost {
            return;
        }
        let arrive = Instant::ZERO + Duration::from_secs_f64(depart) + self.delay;
        self.rx.on_packet(arrive, seq, wire_ts(now), bytes);
        while let Some(r) = self.rx.poll_report(arrive) {
            let mut buf = Vec::new();
            r.encode(&mut buf);
            let r = MonitorReport::decode(&buf).expect("a report decodes");
            self.back.push_back((arrive + self.delay, r));
        }
    }

    /// `secs` seconds of 1000-byte packets at `bps`, losing each with
    /// `loss` on the path (seeded), from `start`.
    fn run(&mut self, start: Instant, secs: f64, bps: f64, loss: f64, seed: u64) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let gap = 1000.0 * 8.0 / bps;
        let n = (secs / gap) as u64;
        for i in 0..n {
            let now = start + Duration::from_secs_f64(i as f64 * gap);
            let lost = rng.random::<f64>() < loss;
            self.send(now, 1000, lost);
        }
    }
}

#[test]
fn an_overloaded_path_reads_as_full_and_its_rate_is_the_capacity() {
    // 4 Mbit/s, 100 packets of queue, 20 ms; 3 Mbit/s with 1% loss first,
    // then 8 Mbit/s: the queue fills and drops half.
    let mut b = Bottleneck::new(4e6, 100, 20 * MS);
    b.run(at_ms(0), 10.0, 3e6, 0.01, 1);
    let before = b.tx.estimate();
    assert_eq!(before.capacity, None, "{before:?}");
    assert_eq!(b.tx.stats().full_reports, 0);
    b.run(at_ms(10_000), 5.0, 8e6, 0.01, 2);
    let e = b.tx.estimate();
    let cap = e.capacity.expect("measured while full").as_bps() as f64;
    // What arrived: 4 Mbit/s less the path's 1%, within the decayed
    // mean's lag.
    assert!((3.3e6..4.05e6).contains(&cap), "{cap}");
    assert!(b.tx.stats().full_reports > 10, "{:?}", b.tx.stats());
    // The queue's drops stay out of the loss fit: the path loses 1%.
    assert!(e.loss < 0.05, "{}", e.loss);
}

#[test]
fn a_step_in_delay_alone_is_not_a_full_path() {
    // 2% loss well under the rate; the one-way delay goes from 20 to
    // 60 ms: SRTT sits 80 ms over the windowed minimum for 10 s.
    let mut b = Bottleneck::new(10e6, 100, 20 * MS);
    b.run(at_ms(0), 10.0, 3e6, 0.02, 3);
    b.delay = 60 * MS;
    b.run(at_ms(10_000), 10.0, 3e6, 0.02, 4);
    let e = b.tx.estimate();
    // The queueing reading is there, and nothing else says full.
    assert!(
        e.srtt.expect("measured") > e.min_rtt.expect("measured") + 20 * MS,
        "{e:?}"
    );
    assert_eq!(b.tx.stats().full_reports, 0);
    // Packets 2.7 ms apart through a link that takes 0.8 ms each arrive
    // as sent: no dispersion, so no capacity either.
    assert_eq!(e.capacity, None);
}

/// `secs` seconds of bursts of `burst` 1000-byte packets sent together,
/// a burst every `every`, from `start`.
fn bursts(b: &mut Bottleneck, start: Instant, secs: u64, burst: usize, every: Duration) {
    let n = Duration::from_secs(secs).as_nanos() / every.as_nanos();
    for i in 0..n as u32 {
        for _ in 0..burst {
            b.send(start + every * i, 1000, false);
        }
    }
}

#[test]
fn bursts_through_a_bottleneck_measure_its_rate_before_any_overload() {
    // 2 Mbit/s in bursts of 5 packets every 20 ms through 4 Mbit/s: the
    // queue drains between bursts (no standing queue, nothing full), and
    // each burst leaves the link 2 ms a packet apart.
    let mut b = Bottleneck::new(4e6, 100, 20 * MS);
    bursts(&mut b, at_ms(0), 3, 5, 20 * MS);
    let e = b.tx.estimate();
    assert_eq!(b.tx.stats().full_reports, 0);
    let cap = e.capacity.expect("dispersion measured").as_bps() as f64;
    assert!((cap - 4e6).abs() < 0.02 * 4e6, "{cap}");
    // The link slows to 1 Mbit/s: the estimate follows within two
    // seconds (the median of the last five reports).
    b.rate = 1e6 / 8.0;
    bursts(&mut b, at_ms(3_000), 2, 10, 100 * MS);
    let cap = b.tx.estimate().capacity.expect("measured").as_bps() as f64;
    assert!((cap - 1e6).abs() < 0.05 * 1e6, "{cap}");
}

#[test]
fn pairs_that_arrive_together_or_as_sent_give_no_dispersion() {
    let mut rx = ReceiveMonitor::new(MonitorConfig::default());
    // A receive batch: 20 packets sent 1 ms apart, all read at one
    // instant (a compressed pair's gap is zero).
    for i in 0..20u32 {
        rx.on_packet(at_ms(50), i, wire_ts(at_ms(u64::from(i))), 1000);
    }
    // 20 more arriving exactly as they were sent.
    for i in 20..40u32 {
        let t = at_ms(u64::from(i));
        rx.on_packet(t + 30 * MS, i, wire_ts(t), 1000);
    }
    let r = rx.poll_report(at_ms(200)).expect("due");
    assert_eq!(r.dispersion_bps, None);
    // Spread: sent together, 1 ms apart on arrival, with one loss between
    // two of them (no sample across it): 1 MB/s.
    for i in 41..60u32 {
        if i == 50 {
            continue;
        }
        rx.on_packet(at_ms(300 + u64::from(i)), i, wire_ts(at_ms(250)), 1000);
    }
    let r = rx.poll_report(at_ms(400)).expect("due");
    assert_eq!(r.dispersion_bps, Some(1_000_000));
}

#[test]
fn a_capacity_is_forgotten_after_its_hold_and_raised_by_more_delivered() {
    let mut b = Bottleneck::new(4e6, 100, 20 * MS);
    b.run(at_ms(0), 5.0, 8e6, 0.0, 5);
    let cap = b.tx.estimate().capacity.expect("full").as_bps();
    // The bottleneck widens; the same load now fits, and arrives faster
    // than the capacity kept: that raises it.
    b.rate = 20e6 / 8.0;
    b.run(at_ms(6_000), 5.0, 8e6, 0.0, 6);
    let raised = b.tx.estimate().capacity.expect("kept").as_bps();
    assert!(raised > cap + 2_000_000, "{raised} vs {cap}");
    // A minute later at a lower rate, not full: forgotten.
    b.run(at_ms(12_000), 65.0, 1e6, 0.0, 7);
    assert_eq!(b.tx.estimate().capacity, None);
}

#[test]
fn a_capacity_is_forgotten_at_once_on_a_shorter_path_and_kept_on_the_same() {
    let full = || {
        let mut b = Bottleneck::new(4e6, 100, 40 * MS);
        b.run(at_ms(0), 5.0, 8e6, 0.0, 8);
        assert!(b.tx.estimate().capacity.is_some(), "full");
        b
    };
    // The same path, lightly loaded for 3 s: the capacity stays (for its
    // hold), so a channel moved off the overload does not move back.
    let mut same = full();
    same.run(at_ms(6_000), 3.0, 1e6, 0.0, 9);
    assert!(same.tx.estimate().capacity.is_some());
    // A handover to a faster link at half the delay: the minimum round
    // trip falls from 80 to 40 ms, and the old link's capacity goes.
    let mut moved = full();
    moved.rate = 10e6 / 8.0;
    moved.delay = 20 * MS;
    moved.run(at_ms(6_000), 3.0, 1e6, 0.0, 9);
    let e = moved.tx.estimate();
    assert!(e.min_rtt.expect("measured") < 50 * MS, "{e:?}");
    assert_eq!(e.capacity, None, "{e:?}");
}

#[test]
fn a_standing_queue_behind_a_backlogged_stream_reads_as_full() {
    // 5% over a 4 Mbit/s bottleneck: the queue stands, and the drops are
    // within the margin, as when TCP fills a path (it sends what the path
    // delivers).
    let run = |backlogged: bool| {
        let mut b = Bottleneck::new(4e6, 100, 20 * MS);
        b.tx.on_stream_backlog(backlogged);
        b.run(at_ms(0), 5.0, 4.2e6, 0.0, 10);
        b.tx.estimate()
    };
    let idle = run(false);
    assert!(idle.srtt.expect("measured") > idle.min_rtt.expect("measured") + 20 * MS);
    assert_eq!(idle.capacity, None, "{idle:?}");
    let cap = run(true).capacity.expect("full").as_bps() as f64;
    assert!((cap - 4e6).abs() < 0.15 * 4e6, "{cap}");
}
