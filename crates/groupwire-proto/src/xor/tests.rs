use bytes::Bytes;
use proptest::prelude::*;

use super::*;
use crate::wire::rtp::{FecPacket, RtpHeader};

/// Media packet `seq`: its length and bytes depend on `seq`, and so do its
/// marker and timestamp, so a wrong rebuild shows.
fn media(seq: u16) -> Bytes {
    let len = 20 + usize::from(seq % 37) * 3;
    let body: Vec<u8> = (0..len)
        .map(|i| (i as u16 ^ seq.wrapping_mul(31)) as u8)
        .collect();
    Bytes::from(
        RtpHeader {
            marker: seq % 5 == 0,
            payload_type: 33,
            seq,
            timestamp: u32::from(seq).wrapping_mul(3000),
            ssrc: 0x1234_5678,
            ..RtpHeader::default()
        }
        .to_packet(&body),
    )
}

/// Runs `count` packets from `first` through an encoder, dropping the
/// media packets `lost` says, and returns the decoder and what it rebuilt.
fn run(
    layout: XorLayout,
    first: u16,
    count: u16,
    lost: impl Fn(u16) -> bool,
) -> (XorDecoder, Vec<Recovered>) {
    let mut enc = XorEncoder::new(layout, 96).unwrap();
    let mut dec = XorDecoder::new(DecoderConfig {
        layout: Some(layout),
        ..DecoderConfig::default()
    });
    let mut out = Vec::new();
    for i in 0..count {
        let seq = first.wrapping_add(i);
        let m = media(seq);
        enc.push(&m).unwrap();
        if !lost(i) {
            assert_eq!(dec.on_media(m), MediaOutcome::New);
        }
        while let Some(f) = enc.poll_fec() {
            dec.on_fec(f.packet);
        }
        out.extend(std::iter::from_fn(|| dec.poll_recovered()));
    }
    enc.flush();
    while let Some(f) = enc.poll_fec() {
        dec.on_fec(f.packet);
    }
    out.extend(std::iter::from_fn(|| dec.poll_recovered()));
    for r in &out {
        assert_eq!(r.packet, media(r.seq), "rebuilt {} differs", r.seq);
    }
    (dec, out)
}

#[test]
fn one_loss_per_row_is_rebuilt_from_the_row() {
    // Leigh et al. Figure 5's one parity per three.
    let (dec, out) = run(XorLayout::row(3), 100, 300, |i| i % 3 == i / 3 % 3);
    assert_eq!(out.len(), 100);
    assert!(out.iter().all(|r| r.via == Via::Row));
    assert_eq!(dec.stats().recovered_row, 100);
}

#[test]
fn two_losses_in_a_row_are_not_rebuilt_from_rows_alone() {
    let (_, out) = run(XorLayout::row(3), 0, 30, |i| i % 3 < 2);
    assert!(out.is_empty());
}

#[test]
fn a_burst_of_l_is_rebuilt_from_the_columns() {
    for layout in [XorLayout::column(5, 4), XorLayout::matrix(5, 4)] {
        // A burst of 5 in every second matrix, starting mid-row.
        let (dec, out) = run(layout, 7, 400, |i| i % 40 >= 13 && i % 40 < 18);
        assert_eq!(out.len(), 50, "{layout}");
        assert_eq!(dec.stats().recovered(), 50, "{layout}");
        assert!(dec.stats().recovered_column >= 30, "{layout}");
    }
    // A burst of L + 1 loses one packet in a column-only layout.
    let (_, out) = run(XorLayout::column(5, 4), 0, 20, |i| (3..9).contains(&i));
    assert_eq!(out.len(), 4);
}

/// A decoder told no layout but to take partial groups reads each
/// parity's geometry from its header: it rebuilds from a 5x4 matrix
/// (columns included), a closed partial matrix, and then rows of 7 that
/// continue the sequence numbers, as a session's receiver must when its
/// peer switches layouts.
#[test]
fn a_decoder_without_a_layout_takes_every_parity_at_its_own_geometry() {
    let mut dec = XorDecoder::new(DecoderConfig {
        layout: None,
        partial_groups: true,
        ..DecoderConfig::default()
    });
    let mut lost = Vec::new();
    // Across the sequence numbers' wrap.
    let mut seq = 65480u16;
    // (layout, packets, close at the end, lost at these indices)
    let parts: [(XorLayout, u16, bool, &[u16]); 3] = [
        // A burst of 5 mid-matrix: only the columns rebuild it.
        (XorLayout::matrix(5, 4), 40, false, &[13, 14, 15, 16, 17]),
        // A partial matrix of 2 rows and 1: rows and columns of NA < L, D.
        (XorLayout::matrix(5, 4), 11, true, &[1, 7, 10]),
        (XorLayout::row(7), 70, true, &[3, 12, 20, 69]),
    ];
    for (layout, count, close, drop) in parts {
        let mut enc = XorEncoder::new(layout, 96).unwrap();
        for i in 0..count {
            let m = media(seq);
            enc.push(&m).unwrap();
            if drop.contains(&i) {
                lost.push(seq);
            } else {
                assert_eq!(dec.on_media(m), MediaOutcome::New);
            }
            seq = seq.wrapping_add(1);
            while let Some(f) = enc.poll_fec() {
                dec.on_fec(f.packet);
            }
        }
        if close {
            enc.close();
        } else {
            enc.flush();
        }
        while let Some(f) = enc.poll_fec() {
            dec.on_fec(f.packet);
        }
    }
    let mut got: Vec<u16> = std::iter::from_fn(|| dec.poll_recovered())
        .map(|r| {
            assert_eq!(r.packet, media(r.seq), "rebuilt {} differs", r.seq);
            r.seq
        })
        .collect();
    got.sort_unstable();
    lost.sort_unstable();
    assert_eq!(got, lost);
    // Rows alone cannot rebuild the burst (3 of it in one row).
    assert!(dec.stats().recovered_column > 0, "{:?}", dec.stats());
    assert_eq!(dec.stats().fec_mismatched, 0);
    assert_eq!(dec.dimensions(), (None, None), "nothing learnt");
}

#[test]
fn rows_and_columns_rebuild_in_turn() {
    // In a 3x3 matrix lose (r0,c0), (r0,c1), (r1,c1), (r1,c2): neither
    // rows nor columns alone rebuild them all. Column 0 rebuilds (r0,c0),
    // then row 0 (r0,c1), column 1 (r1,c1) and row 1 (r1,c2).
    let lost = |i| [0, 1, 4, 5].contains(&i);
    let (dec, out) = run(XorLayout::matrix(3, 3), 65530, 18, lost);
    assert_eq!(out.len(), 4);
    assert_eq!(dec.stats().recovered_row, 2);
    assert_eq!(dec.stats().recovered_column, 2);
    assert_eq!(run(XorLayout::row(3), 65530, 18, lost).1.len(), 0);
    assert_eq!(run(XorLayout::column(3, 3), 65530, 18, lost).1.len(), 2);
}

#[test]
fn sequence_numbers_wrap() {
    let (_, out) = run(XorLayout::matrix(4, 4), 65500, 200, |i| i % 16 == 5);
    assert_eq!(out.len(), 13);
}

#[test]
fn spread_columns_go_out_with_base_plus_ld_plus_dc() {
    let layout = XorLayout::column(4, 3);
    let mut enc = XorEncoder::new(layout, 96).unwrap();
    let mut sent_with = Vec::new();
    for seq in 0..40u16 {
        enc.push(&media(seq)).unwrap();
        while let Some(f) = enc.poll_fec() {
            let p = FecPacket::parse(&f.packet).unwrap();
            sent_with.push((p.fec.sn_base, seq));
        }
    }
    // The matrix at 0: column c with media 12 + 3c.
    assert_eq!(&sent_with[..4], &[(0, 12), (1, 15), (2, 18), (3, 21)]);
    let mut now = XorEncoder::new(
        XorLayout {
            column_timing: ColumnTiming::Immediate,
            ..layout
        },
        96,
    )
    .unwrap();
    let mut first = None;
    for seq in 0..12u16 {
        now.push(&media(seq)).unwrap();
        if first.is_none() && now.poll_fec().is_some() {
            first = Some(seq);
        }
    }
    assert_eq!(first, Some(8), "column 0 is complete with media 8");
}

#[test]
fn a_sequence_gap_starts_a_new_matrix() {
    let mut enc = XorEncoder::new(XorLayout::row(3), 96).unwrap();
    for seq in [0u16, 1, 5, 6, 7] {
        enc.push(&media(seq)).unwrap();
    }
    let f = enc.poll_fec().unwrap();
    assert_eq!(FecPacket::parse(&f.packet).unwrap().fec.sn_base, 5);
    assert!(enc.poll_fec().is_none());
    assert_eq!(enc.stats().restarts, 1);
}

#[test]
fn the_layout_is_learned_and_a_changed_one_is_refused() {
    let mut enc = XorEncoder::new(XorLayout::matrix(4, 3), 96).unwrap();
    let mut other = XorEncoder::new(XorLayout::matrix(5, 3), 96).unwrap();
    let mut dec = XorDecoder::new(DecoderConfig::default());
    for seq in 0..60u16 {
        enc.push(&media(seq)).unwrap();
        other.push(&media(seq)).unwrap();
        if seq != 10 {
            dec.on_media(media(seq));
        }
        while let Some(f) = enc.poll_fec() {
            dec.on_fec(f.packet);
        }
        while let Some(f) = other.poll_fec() {
            dec.on_fec(f.packet);
        }
    }
    assert_eq!(dec.dimensions(), (Some(4), Some(3)));
    assert_eq!(dec.stats().recovered(), 1);
    assert!(dec.stats().fec_mismatched > 0);
}

#[test]
fn a_lying_length_recovery_is_counted_not_used() {
    let mut enc = XorEncoder::new(XorLayout::row(2), 96).unwrap();
    enc.push(&media(0)).unwrap();
    enc.push(&media(1)).unwrap();
    let good = enc.poll_fec().unwrap().packet;
    let mut bad = good.to_vec();
    bad[14] ^= 0x40; // length recovery, high byte
    let mut dec = XorDecoder::new(DecoderConfig::default());
    dec.on_media(media(1));
    dec.on_fec(Bytes::from(bad));
    assert!(dec.poll_recovered().is_none());
    assert_eq!(dec.stats().bad_length, 1);
}

#[test]
fn duplicates_and_late_packets_are_told_apart() {
    let mut dec = XorDecoder::new(DecoderConfig {
        window: 16,
        ..DecoderConfig::default()
    });
    assert_eq!(dec.on_media(media(100)), MediaOutcome::New);
    assert_eq!(dec.on_media(media(100)), MediaOutcome::Duplicate);
    assert_eq!(dec.on_media(media(120)), MediaOutcome::New);
    assert_eq!(dec.on_media(media(101)), MediaOutcome::Late);
    assert_eq!(
        dec.on_media(Bytes::from_static(b"junk")),
        MediaOutcome::Malformed
    );
}

#[test]
fn memory_stays_within_the_window_and_the_byte_budget() {
    let layout = XorLayout::matrix(10, 10);
    let mut enc = XorEncoder::new(layout, 96).unwrap();
    let mut dec = XorDecoder::new(DecoderConfig {
        layout: Some(layout),
        window: 300,
        max_bytes: 64 << 10,
        partial_groups: false,
    });
    let mut most = (0, 0);
    for i in 0..20_000u32 {
        let seq = i as u16;
        enc.push(&media(seq)).unwrap();
        // Some groups cannot be finished, so parity piles up unless it is
        // forgotten.
        if i % 23 != 0 && i % 29 != 0 {
            dec.on_media(media(seq));
        }
        while let Some(f) = enc.poll_fec() {
            dec.on_fec(f.packet);
        }
        most = (most.0.max(dec.held_media()), most.1.max(dec.held_fec()));
    }
    assert!(most.0 <= 300, "{most:?}");
    assert!(most.1 <= 2 * 300, "{most:?}");
    assert!(dec.stats().recovered() > 0);
}

#[test]
fn layouts_print_and_parse() {
    for s in [
        "xor:3",
        "xor:4x5",
        "xor:4x5:col",
        "xor:4x5:now",
        "xor:4x5:col:now",
    ] {
        let l: XorLayout = s.parse().unwrap();
        assert_eq!(l.to_string(), s);
    }
    for bad in [
        "xor:0",
        "xor:3:col",
        "xor:40x40",
        "xor:4x",
        "fec:3",
        "xor:4x4:what",
    ] {
        assert!(bad.parse::<XorLayout>().is_err(), "{bad}");
    }
    assert!((XorLayout::matrix(4, 5).overhead() - 0.45).abs() < 1e-12);
}

proptest! {
    /// Whatever is lost and in whatever order packets come, every rebuilt
    /// packet is the one sent, and every group left with one loss is
    /// rebuilt.
    #[test]
    fn rebuilt_packets_are_exact_under_any_loss(
        l in 1u8..6, d in 1u8..6, kind in 0u8..3,
        first in any::<u16>(),
        lost in proptest::collection::vec(any::<bool>(), 60),
        fec_first in any::<bool>(),
        backwards in any::<bool>(),
    ) {
        let layout = match kind {
            0 => XorLayout::row(l),
            1 => XorLayout::column(l, d),
            _ => XorLayout::matrix(l, d),
        };
        let mut enc = XorEncoder::new(layout, 96).unwrap();
        let mut dec = XorDecoder::new(DecoderConfig::default());
        let mut fecs = Vec::new();
        let mut got = std::collections::BTreeSet::new();
        for (i, &gone) in lost.iter().enumerate() {
            let seq = first.wrapping_add(i as u16);
            enc.push(&media(seq)).unwrap();
            while let Some(f) = enc.poll_fec() {
                fecs.push(f.packet);
            }
            if !gone {
                got.insert(seq);
            }
        }
        enc.flush();
        fecs.extend(std::iter::from_fn(|| enc.poll_fec().map(|f| f.packet)));
        let media_in = |dec: &mut XorDecoder| {
            let order: Vec<u16> = if backwards {
                got.iter().rev().copied().collect()
            } else {
                got.iter().copied().collect()
            };
            for s in order {
                dec.on_media(media(s));
            }
        };
        if fec_first {
            for f in &fecs { dec.on_fec(f.clone()); }
            media_in(&mut dec);
        } else {
            media_in(&mut dec);
            for f in &fecs { dec.on_fec(f.clone()); }
        }
        let mut have = got.clone();
        let mut rebuilt = std::collections::BTreeSet::new();
        while let Some(r) = dec.poll_recovered() {
            // The SSRC is not protected: it comes from another packet of
            // the group or the latest media, so a one-packet group rebuilt
            // before any media arrived cannot know it.
            let want = media(r.seq);
            prop_assert_eq!(&r.packet[..8], &want[..8]);
            prop_assert_eq!(&r.packet[12..], &want[12..]);
            if !fec_first {
                prop_assert_eq!(&r.packet, &want);
            }
            prop_assert!(rebuilt.insert(r.seq), "rebuilt twice");
            have.insert(r.seq);
        }
        // Peeling to a fixed point: no group with one missing is left.
        for f in &fecs {
            let p = FecPacket::parse(f).unwrap();
            let step = if p.fec.row { 1 } else { u16::from(p.fec.offset) };
            let missing = (0..u16::from(p.fec.na))
                .filter(|i| !have.contains(&p.fec.sn_base.wrapping_add(i * step)))
                .count();
            prop_assert_ne!(missing, 1);
        }
    }

    #[test]
    fn hostile_bytes_never_panic(
        packets in proptest::collection::vec(
            (any::<bool>(), proptest::collection::vec(any::<u8>(), 0..80)), 0..40),
    ) {
        let mut dec = XorDecoder::new(DecoderConfig { window: 64, ..DecoderConfig::default() });
        for (fec, mut bytes) in packets {
            if let Some(b) = bytes.first_mut() {
                *b = 0x80 | (*b & 0x3f); // mostly RTP version 2
            }
            if fec {
                if bytes.len() > 20 { bytes[16] |= 0x80; bytes[17..20].fill(0); }
                dec.on_fec(Bytes::from(bytes));
            } else {
                dec.on_media(Bytes::from(bytes));
            }
            while dec.poll_recovered().is_some() {}
        }
    }
}

mod endpoint {
    use std::net::SocketAddr;
    use std::time::Duration;

    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::super::*;
    use crate::{Instant, Machine, Transmit};

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, 1], port))
    }

    fn pair(layout: XorLayout, wait: Option<Duration>) -> (XorEndpoint, XorEndpoint) {
        let mk = |peer, ssrc, peer_ssrc| {
            let mut c = XorEndpointConfig::new(addr(peer), layout);
            c.ssrc = ssrc;
            c.peer_ssrc = Some(peer_ssrc);
            c.close_when_idle = wait;
            XorEndpoint::new(c).unwrap()
        };
        (mk(2, 7, 8), mk(1, 8, 7))
    }

    fn payload(i: u32) -> Vec<u8> {
        (0..(30 + i % 90)).map(|j| (i * 7 + j) as u8).collect()
    }

    /// Sends `n` payloads 1 ms apart from `a` to `b`, losing each media or
    /// parity packet with probability `p` (seeded); returns what `b`
    /// delivered, by index.
    fn run(
        a: &mut XorEndpoint,
        b: &mut XorEndpoint,
        n: u32,
        p: f64,
        seed: u64,
    ) -> Vec<(Instant, XorDelivery)> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut got = Vec::new();
        for i in 0..n + 10 {
            let now = Instant::from_millis(u64::from(i));
            if i < n {
                a.send(now, &payload(i)).unwrap();
            }
            a.handle_timeout(now);
            while let Some(t) = a.poll_transmit(now) {
                assert_eq!(t.dst, addr(2));
                if !rng.random_bool(p) {
                    b.handle_datagram(now, addr(1), &t.payload);
                }
            }
            got.extend(std::iter::from_fn(|| b.poll_event()).map(|e| (now, e)));
        }
        got
    }

    #[test]
    fn losses_are_rebuilt_exactly_and_columns_cost_more_latency() {
        let (mut a, mut b) = pair(XorLayout::matrix(4, 4), None);
        let got = run(&mut a, &mut b, 4000, 0.03, 1);
        let mut seen = std::collections::BTreeSet::new();
        for (_, d) in &got {
            assert_eq!(d.payload, payload(u32::from(d.seq)), "{}", d.seq);
            assert!(seen.insert(d.seq), "delivered {} twice", d.seq);
        }
        let s = b.stats();
        assert!(s.recovered > 60, "{s:?}");
        assert_eq!(s.delivered + s.recovered, got.len() as u64);
        let worst = |got: &[(Instant, XorDelivery)]| {
            got.iter()
                .filter_map(|(_, d)| d.recovered.map(|r| r.1))
                .max()
                .unwrap_or_default()
        };
        // A row waits for the rest of its row (L packets, 1 ms apart); a
        // spread column for its column and its parity, up to 2·L·D
        // packets: the latency price of spreading (Leigh et al. §4.1).
        let (mut a, mut b) = pair(XorLayout::row(4), None);
        let rows = worst(&run(&mut a, &mut b, 4000, 0.03, 2));
        let (mut a, mut b) = pair(XorLayout::column(4, 4), None);
        let cols = worst(&run(&mut a, &mut b, 4000, 0.03, 2));
        assert!(rows <= Duration::from_millis(4), "{rows:?}");
        assert!(cols > rows && cols <= Duration::from_millis(32), "{cols:?}");
    }

    #[test]
    fn a_pause_closes_the_open_groups_so_the_last_packets_are_protected() {
        let (mut a, mut b) = pair(XorLayout::matrix(4, 4), Some(Duration::from_millis(2)));
        let t0 = Instant::ZERO;
        let mut lost = None;
        for i in 0..5u32 {
            a.send(t0, &payload(i)).unwrap();
            while let Some(t) = a.poll_transmit(t0) {
                if i == 4 && lost.is_none() {
                    lost = Some(t); // the fifth media packet
                    continue;
                }
                b.handle_datagram(t0, addr(1), &t.payload);
            }
        }
        while b.poll_event().is_some() {}
        let deadline = a.poll_timeout().expect("a group is open");
        assert_eq!(deadline, t0 + Duration::from_millis(2));
        a.handle_timeout(deadline);
        while let Some(t) = a.poll_transmit(deadline) {
            b.handle_datagram(deadline, addr(1), &t.payload);
        }
        let d = b.poll_event().expect("rebuilt from the partial row");
        assert_eq!((d.seq, d.payload.to_vec()), (4, payload(4)));
        assert!(a.poll_timeout().is_none());
    }

    #[test]
    fn a_batch_of_sends_drains_media_first_then_parity_and_still_rebuilds() {
        let (mut a, mut b) = pair(XorLayout::row(3), None);
        let now = Instant::ZERO;
        for i in 0..12 {
            a.send(now, &[i as u8; 100]).unwrap();
        }
        let out: Vec<_> = std::iter::from_fn(|| a.poll_transmit(now)).collect();
        let is_fec = |t: &Transmit| t.payload[1] & 0x7f == a.config().fec_pt;
        let kinds: Vec<bool> = out.iter().map(is_fec).collect();
        assert_eq!(kinds, [[false; 12].as_slice(), &[true; 4]].concat());
        // Media all the same size, so a driver sends them in one call.
        assert!(
            out[..12]
                .iter()
                .all(|t| t.payload.len() == out[0].payload.len())
        );
        // The receiver sees each parity after its group: a loss in every
        // group is still rebuilt.
        for (i, t) in out.iter().enumerate() {
            if i >= 12 || i % 3 != 1 {
                b.handle_datagram(now, addr(1), &t.payload);
            }
        }
        let got: Vec<_> = std::iter::from_fn(|| b.poll_event()).collect();
        assert_eq!((got.len(), b.stats().recovered), (12, 4));
    }

    #[test]
    fn strangers_and_junk_are_counted_not_delivered() {
        let (mut a, mut b) = pair(XorLayout::row(3), None);
        let now = Instant::ZERO;
        a.send(now, b"hi").unwrap();
        let t = a.poll_transmit(now).unwrap();
        b.handle_datagram(now, addr(9), &t.payload);
        b.handle_datagram(now, addr(1), b"not rtp");
        let mut other = t.payload.to_vec();
        other[8..12].copy_from_slice(&99u32.to_be_bytes()); // another SSRC
        b.handle_datagram(now, addr(1), &other);
        assert!(b.poll_event().is_none());
        assert_eq!((b.stats().foreign, b.stats().malformed), (1, 2));
        b.handle_datagram(now, addr(1), &t.payload);
        assert_eq!(b.poll_event().unwrap().payload, &b"hi"[..]);
        let max = a.config().max_payload();
        assert!(a.send(now, &vec![0; max + 1]).is_err());
        assert!(a.send(now, &vec![0; max]).is_ok());
    }
}

mod listener {
    use std::net::SocketAddr;
    use std::time::Duration;

    use super::super::*;
    use crate::{Instant, Machine, Transmit};

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, 1], port))
    }

    /// A sender toward the listener's address, SSRC 7.
    fn sender(layout: XorLayout) -> XorEndpoint {
        let mut c = XorEndpointConfig::new(addr(2), layout);
        c.ssrc = 7;
        XorEndpoint::new(c).unwrap()
    }

    /// A listener for SSRC 7 whose peer may be replaced after 5 s.
    fn listener(layout: XorLayout) -> XorListener {
        let mut c = XorEndpointConfig::new(addr(0), layout);
        c.ssrc = 7;
        c.peer_ssrc = Some(7);
        XorListener::new(c, Duration::from_secs(5)).unwrap()
    }

    fn drain(ep: &mut XorEndpoint, now: Instant) -> Vec<Transmit> {
        std::iter::from_fn(|| ep.poll_transmit(now)).collect()
    }

    fn events(l: &mut XorListener) -> Vec<XorListenerEvent> {
        std::iter::from_fn(|| l.poll_event()).collect()
    }

    #[test]
    fn learns_its_peer_from_the_first_media_packet_and_rebuilds_its_losses() {
        let layout = XorLayout::row(3);
        let (mut a, mut l) = (sender(layout), listener(layout));
        let now = Instant::ZERO;
        for i in 0..6u8 {
            a.send(now, &vec![i; 10 + usize::from(i)]).unwrap();
        }
        let out = drain(&mut a, now);
        assert_eq!(out.len(), 8, "6 media and 2 parity");
        // Junk, another stream's media and parity claim nothing.
        l.handle_datagram(now, addr(9), b"not rtp");
        let mut other = out[0].payload.to_vec();
        other[8..12].copy_from_slice(&99u32.to_be_bytes());
        l.handle_datagram(now, addr(9), &other);
        l.handle_datagram(now, addr(9), &out[6].payload);
        assert_eq!(l.peer(), None);
        assert_eq!(l.stats().invalid_before_peer, 3);
        // The first media packet claims the slot; the second is lost and
        // rebuilt from its row's parity.
        for (i, t) in out.iter().enumerate() {
            if i != 1 {
                l.handle_datagram(now, addr(1), &t.payload);
            }
        }
        assert_eq!(l.peer(), Some(addr(1)));
        let ev = events(&mut l);
        assert_eq!(ev[0], XorListenerEvent::NewPeer(addr(1)));
        let got: Vec<_> = ev[1..]
            .iter()
            .map(|e| match e {
                XorListenerEvent::Delivered(d) => (d.payload.to_vec(), d.recovered.is_some()),
                XorListenerEvent::NewPeer(p) => panic!("a second peer {p}"),
            })
            .collect();
        assert_eq!(got.len(), 6);
        assert!(got.contains(&(vec![1; 11], true)), "{got:?}");
        assert_eq!(
            (l.endpoint_stats().delivered, l.endpoint_stats().recovered),
            (5, 1)
        );
        assert_eq!(l.decoder_stats().recovered_row, 1);
        // A stranger while the peer is alive: counted, not delivered.
        let mut b = sender(layout);
        b.send(now, b"intruder").unwrap();
        for t in drain(&mut b, now) {
            l.handle_datagram(now, addr(3), &t.payload);
        }
        assert!(events(&mut l).is_empty());
        assert_eq!((l.stats().foreign, l.peer()), (1, Some(addr(1))));
        // Open loop: a listener sends nothing.
        assert!(l.poll_transmit(now).is_none());
    }

    #[test]
    fn a_new_sender_takes_over_a_silent_peer_and_numbers_afresh() {
        let layout = XorLayout::matrix(2, 2);
        let (mut a, mut l) = (sender(layout), listener(layout));
        let t0 = Instant::ZERO;
        for i in 0..3u8 {
            a.send(t0, &[i; 20]).unwrap();
        }
        for t in drain(&mut a, t0) {
            l.handle_datagram(t0, addr(1), &t.payload);
        }
        let first = events(&mut l);
        assert_eq!(first.len(), 4, "{first:?}");
        // A restarted sender (another port, its numbering from zero) before
        // and after the peer's silence reached 5 s.
        let mut b = sender(layout);
        b.send(t0, b"again").unwrap();
        let restarted = drain(&mut b, t0);
        let soon = t0 + Duration::from_secs(4);
        l.handle_datagram(soon, addr(4), &restarted[0].payload);
        assert_eq!(l.stats().foreign, 1);
        let later = t0 + Duration::from_secs(5);
        l.handle_datagram(later, addr(4), &restarted[0].payload);
        assert_eq!(l.peer(), Some(addr(4)));
        let ev = events(&mut l);
        assert_eq!(ev[0], XorListenerEvent::NewPeer(addr(4)));
        let XorListenerEvent::Delivered(d) = &ev[1] else {
            panic!("{ev:?}")
        };
        assert_eq!((&d.payload[..], d.seq), (&b"again"[..], 0));
        assert_eq!(l.stats().restarts, 1);
        // Counters add up over both senders.
        assert_eq!(l.endpoint_stats().delivered, 4);
        assert_eq!(l.decoder_stats().media, 4);
    }
}
