//! The session's resource monitor: its report and both halves.

use std::time::Duration;

use groupwire_proto::Instant;
use groupwire_proto::session::monitor::report::REPORT_LEN_DISPERSION;
use groupwire_proto::session::monitor::{
    MonitorConfig, MonitorReport, ReceiveMonitor, ReceiveStats, SendMonitor, SendStats, wire_ts,
};

/// Bytes per operation of the monitor walk (see [`monitor_report`]).
pub const OP_LEN: usize = 6;

/// The resource monitor's report and its two halves. Whatever decodes
/// re-encodes to [`REPORT_LEN_DISPERSION`] bytes that decode to the same report.
/// Then the input is a walk of [`OP_LEN`]-byte operations over one path:
/// byte 0 advances the clock (× 100 µs); the sender sends its next
/// packet; bytes 1–2 (a signed 16-bit step) move the packet number the
/// receiver sees from the sender's (reordering, duplicates, jumps, the
/// wrap: the walk starts 100 short of `u32::MAX`), byte 3 delays its send
/// timestamp (× 64 µs), byte 4 its size; byte 5's top bit drops it, its
/// next bit delivers the receiver's due report to the sender, its next
/// asks for a probe. The receiver's every report decodes as itself (its
/// counters always agree); the estimate stays in range; nothing panics.
pub fn monitor_report(data: &[u8]) {
    if let Ok(r) = MonitorReport::decode(data) {
        let mut b = Vec::new();
        r.encode(&mut b);
        assert_eq!(b.len(), REPORT_LEN_DISPERSION);
        assert_eq!(MonitorReport::decode(&b), Ok(r));
    }
    walk(data);
}

/// The walk of [`monitor_report`]; what both halves counted.
fn walk(data: &[u8]) -> (ReceiveStats, SendStats) {
    let cfg = MonitorConfig {
        reorder: 8,
        max_dropout: 1000,
        ..MonitorConfig::default()
    };
    let mut rx = ReceiveMonitor::new(cfg);
    let mut tx = SendMonitor::new(cfg);
    let mut now = Instant::ZERO;
    let mut sent = u32::MAX - 100;
    for op in data.chunks_exact(OP_LEN) {
        now += Duration::from_micros(u64::from(op[0]) * 100);
        let seq = sent;
        sent = sent.wrapping_add(1);
        tx.on_send(now, seq, usize::from(op[4]));
        if op[5] & 0x80 == 0 {
            let step = i16::from_be_bytes([op[1], op[2]]);
            let ts = wire_ts(now).wrapping_sub(u32::from(op[3]) * 64);
            rx.on_packet(
                now,
                seq.wrapping_add_signed(i32::from(step)),
                ts,
                usize::from(op[4]),
            );
        }
        if op[5] & 0x40 != 0 {
            if let Some(r) = rx.poll_report(now) {
                let mut b = Vec::new();
                r.encode(&mut b);
                assert_eq!(
                    MonitorReport::decode(&b),
                    Ok(r),
                    "the receiver's own report"
                );
                tx.on_report(now, &r);
            }
        }
        if op[5] & 0x20 != 0 {
            let _ = tx.poll_probe(now);
        }
        let e = tx.estimate();
        assert!((0.0..=1.0).contains(&e.loss), "{e:?}");
        assert!(e.mean_burst >= 1.0 && e.mean_burst.is_finite(), "{e:?}");
        assert!(e.samples >= 0.0 && e.samples.is_finite(), "{e:?}");
        assert!(e.srtt.is_none_or(|s| s <= cfg.max_rtt), "{e:?}");
        if let Some(m) = e.loss_model {
            assert!(
                (0.0..=1.0).contains(&m.p) && (0.0..=1.0).contains(&m.r),
                "{e:?}"
            );
        }
    }
    let s = tx.stats();
    assert!(s.reports <= rx.stats().reports);
    (rx.stats(), s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_steady_walk_reaches_the_sender() {
        // 10 ms steps, a report asked for every 20th, a probe every 7th.
        let data: Vec<u8> = (0..300u16)
            .flat_map(|i| {
                let flags = if i % 20 == 19 { 0x40 } else { 0 } | if i % 7 == 0 { 0x20 } else { 0 };
                [100, 0, 0, (i % 7) as u8, 120, flags]
            })
            .collect();
        let (rx, tx) = walk(&data);
        assert_eq!(rx.packets, 300);
        assert!(tx.reports >= 10 && tx.rtt_samples == tx.reports, "{tx:?}");
    }
}
