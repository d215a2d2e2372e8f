//! The sliding-window code against exact values, a brute-force rank
//! computation, and hostile input.

use super::*;
use proptest::prelude::*;
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

// ---- coefficients ----

/// Exact values, worked by hand from RFC 8682 Figure 2 (seed 1) through
/// RFC 8681 §3.6's draws: rand256 is the low byte and rand16 the low
/// nibble of each 32-bit output, in order.
#[test]
fn coefficients_for_key_1_follow_the_rfc_draws() {
    let mut cc = [0u8; 10];
    // Dense GF(2^8): one rand256 per coefficient (none of the first ten
    // outputs has a zero low byte, so no redraw).
    generate_coding_coefs(1, &mut cc, 15, 8).expect("valid");
    assert_eq!(cc, [37, 225, 177, 176, 21, 246, 54, 139, 168, 237]);
    // DT 7 over GF(2^8): rand16 (nibbles 5, 1, 5, 6, 8, 13, 3, ...) then,
    // when <= 7, rand256 from the next output.
    generate_coding_coefs(1, &mut cc, 7, 8).expect("valid");
    assert_eq!(cc, [225, 176, 246, 139, 0, 0, 187, 0, 0, 0]);
    // DT 7 over GF(2): nibbles 5 1 1 0 5 6 6 11 8 13 against 7.
    generate_coding_coefs(1, &mut cc, 7, 1).expect("valid");
    assert_eq!(cc, [1, 1, 1, 1, 1, 1, 1, 0, 0, 0]);
    // Dense GF(2): all ones, whatever the key.
    for key in [0, 1, 0xFFFF] {
        generate_coding_coefs(key, &mut cc, 15, 1).expect("valid");
        assert_eq!(cc, [1; 10]);
    }
}

#[test]
fn coefficients_refuse_bad_parameters() {
    let mut cc = [0u8; 3];
    assert_eq!(
        generate_coding_coefs(0, &mut cc, 16, 8),
        Err(SlidingError::BadDensity { dt: 16 })
    );
    assert_eq!(
        generate_coding_coefs(0, &mut cc, 15, 2),
        Err(SlidingError::BadField { m: 2 })
    );
    // An empty table is fine (a window of zero symbols).
    generate_coding_coefs(0, &mut [], 3, 8).expect("valid");
}

/// DT = 15 never gives a zero over GF(2^8) (every source counts); a
/// prefix of a longer table is the shorter table (the draws are in window
/// order); and DT sets the density: (DT + 1) / 16 non-zero on average.
#[test]
fn coefficients_density_and_prefix() {
    let mut long = vec![0u8; 300];
    let mut short = vec![0u8; 17];
    for key in (0..=u16::MAX).step_by(97) {
        generate_coding_coefs(key, &mut long, 15, 8).expect("valid");
        assert!(long.iter().all(|&c| c != 0), "key {key}");
        for dt in [0, 3, 14] {
            generate_coding_coefs(key, &mut long, dt, 8).expect("valid");
            generate_coding_coefs(key, &mut short, dt, 8).expect("valid");
            assert_eq!(&long[..17], &short[..], "key {key} dt {dt}");
        }
    }
    for dt in 0..15u8 {
        for m in [1, 8] {
            let mut nonzero = 0usize;
            let total = 200 * 300;
            for key in 0..200 {
                generate_coding_coefs(key, &mut long, dt, m).expect("valid");
                nonzero += long.iter().filter(|&&c| c != 0).count();
            }
            let expect = total * (usize::from(dt) + 1) / 16;
            assert!(
                nonzero.abs_diff(expect) * 20 < expect,
                "dt {dt} m {m}: {nonzero} non-zero of {total}, expected about {expect}"
            );
        }
    }
}

// ---- ADUI and FEC Payload IDs ----

#[test]
fn adui_layout() {
    let mut s = [0xAAu8; 10];
    write_adui(7, b"hey", &mut s).expect("fits");
    assert_eq!(s, [7, 0, 3, b'h', b'e', b'y', 0, 0, 0, 0]);
    assert_eq!(read_adui(&s), Ok((7, &b"hey"[..])));
    write_adui(1, b"", &mut s[..3]).expect("fits");
    assert_eq!(read_adui(&s[..3]), Ok((1, &b""[..])));
    assert_eq!(
        write_adui(0, b"12345678", &mut s),
        Err(SlidingError::AduTooLong {
            len: 8,
            symbol_size: 10
        })
    );
    assert_eq!(
        read_adui(&[0, 0, 8, 1, 2]),
        Err(SlidingError::BadAdui {
            len: 8,
            symbol_size: 5
        })
    );
    assert!(read_adui(&[0, 0]).is_err());
}

#[test]
fn payload_id_layout() {
    let id = RepairPayloadId::new(0xBEEF, 7, 0x0ABC, 0x0102_0304).expect("fits");
    assert_eq!(id.to_bytes(), [0xBE, 0xEF, 0x7A, 0xBC, 1, 2, 3, 4]);
    let (back, rest) = RepairPayloadId::parse(&[0xBE, 0xEF, 0x7A, 0xBC, 1, 2, 3, 4, 9]).expect("8");
    assert_eq!((back, rest), (id, &[9u8][..]));
    assert_eq!(
        RepairPayloadId::parse(&[1, 2, 3, 4, 5, 6, 7]),
        Err(SlidingError::Truncated { needed: 8, got: 7 })
    );
    assert_eq!(
        RepairPayloadId::new(0, 16, 1, 0),
        Err(SlidingError::BadDensity { dt: 16 })
    );
    assert!(RepairPayloadId::new(0, 15, 4096, 0).is_err());
    let src = SourcePayloadId { esi: 0xFFFF_FFFE };
    assert_eq!(src.to_bytes(), [0xFF, 0xFF, 0xFF, 0xFE]);
    assert_eq!(SourcePayloadId::parse(&src.to_bytes()), Ok((src, &[][..])));
    assert_eq!(
        SourcePayloadId::parse(&[1, 2, 3]),
        Err(SlidingError::Truncated { needed: 4, got: 3 })
    );
}

proptest! {
    #[test]
    fn repair_payload_id_round_trips(key: u16, dt in 0u8..16, nss in 0u16..4096, esi: u32) {
        let id = RepairPayloadId::new(key, dt, nss, esi).expect("in range");
        let bytes = id.to_bytes();
        prop_assert_eq!(RepairPayloadId::parse(&bytes), Ok((id, &[][..])));
        prop_assert_eq!((id.repair_key(), id.dt(), id.nss(), id.first_esi()), (key, dt, nss, esi));
    }

    /// Every 8 bytes parse, and write back to themselves: the field has no
    /// invalid or redundant encodings.
    #[test]
    fn any_eight_bytes_are_a_repair_payload_id(bytes: [u8; 8], tail in proptest::collection::vec(any::<u8>(), 0..4)) {
        let mut buf = bytes.to_vec();
        buf.extend_from_slice(&tail);
        let (id, rest) = RepairPayloadId::parse(&buf).expect("8 bytes");
        prop_assert_eq!(id.to_bytes(), bytes);
        prop_assert_eq!(rest, &tail[..]);
        for n in 0..8 {
            prop_assert!(RepairPayloadId::parse(&buf[..n]).is_err());
        }
    }

    #[test]
    fn source_payload_id_round_trips(esi: u32) {
        let id = SourcePayloadId { esi };
        let bytes = id.to_bytes();
        prop_assert_eq!(SourcePayloadId::parse(&bytes), Ok((id, &[][..])));
    }

    #[test]
    fn adui_round_trips(flow: u8, adu in proptest::collection::vec(any::<u8>(), 0..64), extra in 0usize..16) {
        let mut s = vec![0xA5; adu.len() + ADUI_HEADER_LEN + extra];
        write_adui(flow, &adu, &mut s).expect("fits");
        prop_assert_eq!(read_adui(&s), Ok((flow, &adu[..])));
        prop_assert!(s[ADUI_HEADER_LEN + adu.len()..].iter().all(|&b| b == 0));
    }
}

// ---- encoder ----

/// `sum_i coefs[i] * symbols[i]` with the field's scalar multiply.
fn naive_combination(coefs: &[u8], symbols: &[Vec<u8>]) -> Vec<u8> {
    let mut out = vec![0u8; symbols[0].len()];
    for (&c, s) in coefs.iter().zip(symbols) {
        for (o, &x) in out.iter_mut().zip(s) {
            *o ^= gf::mul(c, x);
        }
    }
    out
}

#[test]
fn repair_of_two_one_byte_sources() {
    let mut enc = Encoder::new(1, 4).expect("valid");
    assert_eq!(enc.push_symbol(&[1]), Ok(0));
    assert_eq!(enc.push_symbol(&[1]), Ok(1));
    // Coefficients 37 and 225 (key 1, dense): 37 * 1 + 225 * 1.
    let (id, r) = enc.repair(1, 15).expect("non-empty");
    assert_eq!(r, [37 ^ 225]);
    assert_eq!(id, RepairPayloadId::new(1, 15, 2, 0).expect("fits"));
    // Over GF(2), dense: the XOR of the window.
    let mut enc = Encoder::new(2, 4).expect("valid").with_field(Field::Gf2);
    enc.push_symbol(&[0x0F, 1]).expect("E bytes");
    enc.push_symbol(&[0xF1, 3]).expect("E bytes");
    assert_eq!(enc.repair(9, 15).expect("non-empty").1, [0xFE, 2]);
}

#[test]
fn encoder_window_slides_and_wraps() {
    let mut enc = Encoder::new(4, 3).expect("valid").starting_at(u32::MAX - 1);
    assert_eq!(enc.repair(0, 15), Err(SlidingError::EmptyWindow));
    let esis: Vec<u32> = (0..5)
        .map(|i| enc.push_symbol(&[i; 4]).expect("E bytes"))
        .collect();
    assert_eq!(esis, [u32::MAX - 1, u32::MAX, 0, 1, 2]);
    assert_eq!(
        (enc.first_esi(), enc.window_len(), enc.next_esi()),
        (Some(0), 3, 3)
    );
    let (id, _) = enc.repair(5, 15).expect("non-empty");
    assert_eq!((id.first_esi(), id.nss()), (0, 3));
    assert_eq!(enc.drop_oldest(2), 2);
    assert_eq!((enc.first_esi(), enc.window_len()), (Some(2), 1));
    assert_eq!(enc.drop_oldest(9), 1);
    assert_eq!((enc.first_esi(), enc.next_esi()), (None, 3));
    // Wrong lengths and ADUs that do not fit are refused and change nothing.
    assert!(enc.push_symbol(&[0; 5]).is_err());
    assert!(enc.push_adu(0, &[0; 2]).is_err());
    assert_eq!(enc.push_adu(0, &[0; 1]), Ok(3));
    assert!(Encoder::new(0, 1).is_err());
    assert!(Encoder::new(1, 0).is_err());
    assert!(Encoder::new(1, 4096).is_err());
}

/// A failed push into a full window must not cost the window its oldest
/// symbol.
#[test]
fn refused_push_keeps_a_full_window() {
    let mut enc = Encoder::new(4, 2).expect("valid");
    enc.push_adu(0, b"a").expect("fits");
    enc.push_adu(0, b"b").expect("fits");
    assert!(enc.push_adu(0, b"toolong").is_err());
    assert_eq!((enc.first_esi(), enc.window_len()), (Some(0), 2));
}

/// The encoder computes RFC 8681 §3.7's sum on every backend, for windows
/// wider than the vector loops take at once (255) and sparse codes.
#[test]
fn encoder_matches_the_naive_sum_on_every_backend() {
    let mut rng = ChaCha8Rng::seed_from_u64(8681);
    for (w, len) in [(1, 7), (10, 100), (50, 33), (255, 64), (300, 40), (600, 17)] {
        let symbols: Vec<Vec<u8>> = (0..w)
            .map(|_| (0..len).map(|_| rng.random()).collect())
            .collect();
        for backend in Backend::ALL.into_iter().filter(|b| b.is_available()) {
            let mut enc = Encoder::new(len, w)
                .expect("valid")
                .with_backend(backend)
                .expect("available");
            for s in &symbols {
                enc.push_symbol(s).expect("E bytes");
            }
            for (key, dt, field) in [
                (0, 15, Field::Gf256),
                (77, 3, Field::Gf256),
                (9, 6, Field::Gf2),
            ] {
                enc = enc.with_field(field);
                let (id, r) = enc.repair(key, dt).expect("non-empty");
                let mut cc = vec![0u8; w];
                generate_coding_coefs(key, &mut cc, dt, field.m()).expect("valid");
                assert_eq!(
                    r,
                    naive_combination(&cc, &symbols),
                    "w {w} {backend:?} key {key}"
                );
                assert_eq!(usize::from(id.nss()), w);
            }
        }
    }
}

// ---- decoder: exact small cases ----

fn dec(e: usize) -> Decoder {
    Decoder::new(DecoderConfig::new(e)).expect("valid")
}

#[test]
fn one_loss_one_repair() {
    let mut enc = Encoder::new(12, 8).expect("valid");
    let mut d = dec(12);
    let adus: [&[u8]; 5] = [b"alpha", b"beta", b"gamma", b"delta", b"eps"];
    for (i, a) in adus.iter().enumerate() {
        let esi = enc.push_adu(3, a).expect("fits");
        if i != 2 {
            d.receive_source_adu(esi, 3, a).expect("valid");
        }
    }
    assert_eq!(d.poll_recovered(), None);
    let (id, r) = enc.repair(42, 15).expect("non-empty");
    d.receive_repair(id, &r).expect("valid");
    assert_eq!(
        d.poll_recovered(),
        Some(Recovered {
            esi: 2,
            flow_id: 3,
            adu: b"gamma".to_vec()
        })
    );
    assert_eq!(d.poll_recovered(), None);
    assert!(d.is_known(2));
    let s = d.stats();
    assert_eq!((s.sources, s.repairs, s.recovered), (4, 1, 1));
    assert_eq!(d.equations(), 0);
    // The source arriving late now is a duplicate; another repair over
    // the same window says nothing new.
    d.receive_source_adu(2, 3, b"gamma").expect("valid");
    let (id, r) = enc.repair(43, 15).expect("non-empty");
    d.receive_repair(id, &r).expect("valid");
    let s = d.stats();
    assert_eq!((s.duplicate_sources, s.redundant_repairs), (1, 1));
}

/// Repairs first, sources later: the equations wait, and each source that
/// arrives is substituted in at once until the rest are determined.
#[test]
fn repairs_before_sources() {
    let mut enc = Encoder::new(8, 8).expect("valid");
    let adus: Vec<Vec<u8>> = (0..4u8).map(|i| vec![i; (i + 1).into()]).collect();
    for a in &adus {
        enc.push_adu(0, a).expect("fits");
    }
    let mut d = dec(8);
    for key in [1, 2] {
        let (id, r) = enc.repair(key, 15).expect("non-empty");
        d.receive_repair(id, &r).expect("valid");
    }
    assert_eq!(d.equations(), 2);
    d.receive_source_adu(0, 0, &adus[0]).expect("valid");
    assert_eq!(d.poll_recovered(), None);
    // Three unknowns (1, 2, 3), two equations: source 3 makes it two.
    d.receive_source_adu(3, 0, &adus[3]).expect("valid");
    let mut got: Vec<(u32, Vec<u8>)> = std::iter::from_fn(|| d.poll_recovered())
        .map(|r| (r.esi, r.adu))
        .collect();
    got.sort();
    assert_eq!(got, [(1, adus[1].clone()), (2, adus[2].clone())]);
    assert_eq!(d.equations(), 0);
}

#[test]
fn equations_are_capped() {
    let mut enc = Encoder::new(4, 8).expect("valid");
    for i in 0..4u8 {
        enc.push_adu(0, &[i]).expect("fits");
    }
    let mut cfg = DecoderConfig::new(4);
    cfg.max_equations = 2;
    let mut d = Decoder::new(cfg).expect("valid");
    for key in 0..3 {
        let (id, r) = enc.repair(key, 15).expect("non-empty");
        d.receive_repair(id, &r).expect("valid");
    }
    assert_eq!(d.equations(), 2);
    assert_eq!(d.stats().dropped_equations, 1);
}

#[test]
fn bad_input_is_an_error_and_a_count() {
    let mut d = dec(8);
    assert!(d.receive_source(0, &[0; 7]).is_err());
    assert!(d.receive_source_adu(0, 0, &[0; 6]).is_err());
    let id = RepairPayloadId::new(0, 15, 0, 0).expect("fits");
    assert!(d.receive_repair(id, &[0; 8]).is_err());
    let id = RepairPayloadId::new(0, 15, 4095, 0).expect("fits");
    assert!(d.receive_repair(id, &[0; 8]).is_err());
    let id = RepairPayloadId::new(0, 15, 3, 0).expect("fits");
    assert!(d.receive_repair(id, &[0; 9]).is_err());
    assert_eq!(d.stats().malformed, 5);
    assert_eq!(d.window_start(), None);
    assert!(Decoder::new(DecoderConfig::new(0)).is_err());
    let mut cfg = DecoderConfig::new(8);
    cfg.max_window = 4096;
    assert!(Decoder::new(cfg).is_err());
}

/// A rebuilt symbol whose ADUI length runs past the symbol is counted,
/// not handed out (and does not panic).
#[test]
fn corrupt_adui_is_counted() {
    let mut enc = Encoder::new(4, 4).expect("valid");
    enc.push_symbol(&[0, 0xFF, 0xFF, 0]).expect("E bytes");
    let mut d = dec(4);
    let (id, r) = enc.repair(0, 15).expect("non-empty");
    d.receive_repair(id, &r).expect("valid");
    assert_eq!(d.poll_recovered(), None);
    let s = d.stats();
    assert_eq!((s.recovered, s.corrupt_adui), (1, 1));
    assert!(d.is_known(0));
}

/// The decoding window slides: sources leaving it unrecovered are counted,
/// an equation pivoting on one goes with it, and late symbols are stale.
#[test]
fn window_slides_and_gives_up() {
    let mut cfg = DecoderConfig::new(4);
    cfg.max_window = 4;
    let mut d = Decoder::new(cfg).expect("valid");
    let mut enc = Encoder::new(4, 2).expect("valid");
    let e0 = enc.push_adu(0, b"a").expect("fits");
    enc.push_adu(0, b"b").expect("fits");
    // Both lost; one repair: an equation over 0 and 1, pivot 0.
    let (id, r) = enc.repair(0, 15).expect("non-empty");
    d.receive_repair(id, &r).expect("valid");
    assert_eq!((d.equations(), d.window_len()), (1, 2));
    // Source 5 arrives: the window becomes [2, 6).
    for _ in 2..6 {
        enc.push_adu(0, b"x").expect("fits");
    }
    d.receive_source_adu(5, 0, b"x").expect("valid");
    assert_eq!(
        (d.window_start(), d.window_len(), d.equations()),
        (Some(2), 4, 0)
    );
    let s = d.stats();
    assert_eq!((s.expired_equations, s.unrecovered), (1, 2));
    // Now late: source 0, and a repair over [0, 2).
    d.receive_source_adu(e0, 0, b"a").expect("valid");
    d.receive_repair(id, &r).expect("valid");
    assert_eq!(d.stats().stale, 2);
    // A repair over [1, 3) with a non-zero coefficient on 1 is stale too.
    let id = RepairPayloadId::new(0, 15, 2, 1).expect("fits");
    d.receive_repair(id, &r).expect("valid");
    assert_eq!(d.stats().stale, 3);
    assert!(d.window_len() <= 4);
}

// ---- decoder against a brute-force rank computation ----

enum Packet {
    Source(u32, Vec<u8>),
    Repair(RepairPayloadId, Vec<u8>),
}

/// Which variables `rows` (over `n` variables) determine: Gauss-Jordan to
/// reduced row echelon form, then a variable is determined when its pivot
/// row has nothing else.
fn determined(n: usize, mut rows: Vec<Vec<u8>>) -> Vec<bool> {
    let mut r = 0;
    let mut pivot_row = vec![None; n];
    for col in 0..n {
        let Some(i) = (r..rows.len()).find(|&i| rows[i][col] != 0) else {
            continue;
        };
        rows.swap(r, i);
        let inv = gf::inv(rows[r][col]).expect("non-zero");
        for x in &mut rows[r] {
            *x = gf::mul(*x, inv);
        }
        let pivot = rows[r].clone();
        for (i, row) in rows.iter_mut().enumerate() {
            let c = row[col];
            if i != r && c != 0 {
                for (x, &p) in row.iter_mut().zip(&pivot) {
                    *x ^= gf::mul(c, p);
                }
            }
        }
        pivot_row[col] = Some(r);
        r += 1;
    }
    (0..n)
        .map(|col| {
            pivot_row[col]
                .is_some_and(|i| rows[i].iter().enumerate().all(|(j, &x)| j == col || x == 0))
        })
        .collect()
}

#[derive(Debug, Clone)]
struct Scenario {
    seed: u64,
    n: usize,
    e: usize,
    window: usize,
    dt: u8,
    gf2: bool,
    start: u32,
    source_loss: u8,
    repair_loss: u8,
    repair_every: usize,
    reorder: bool,
}

/// Runs a stream through an encoder, loses and maybe reorders packets,
/// feeds a decoder whose window holds the whole stream, and checks it
/// rebuilds exactly the sources the received packets determine, byte for
/// byte, and nothing else. Returns (sources lost, sources rebuilt).
fn run_against_brute_force(sc: &Scenario) -> (usize, usize) {
    let mut rng = ChaCha8Rng::seed_from_u64(sc.seed);
    let field = if sc.gf2 { Field::Gf2 } else { Field::Gf256 };
    let mut enc = Encoder::new(sc.e, sc.window)
        .expect("valid")
        .with_field(field)
        .starting_at(sc.start);
    let mut adus = Vec::new();
    let mut sent = Vec::new();
    let mut key = 0u16;
    for i in 0..sc.n {
        let len = rng.random_range(0..=sc.e - ADUI_HEADER_LEN);
        let adu: Vec<u8> = (0..len).map(|_| rng.random()).collect();
        let esi = enc.push_adu(i as u8, &adu).expect("fits");
        assert_eq!(esi, sc.start.wrapping_add(i as u32));
        sent.push(Packet::Source(esi, adu.clone()));
        adus.push(adu);
        if i % sc.repair_every == sc.repair_every - 1 || i + 1 == sc.n {
            for _ in 0..rng.random_range(1..=2) {
                let (id, r) = enc.repair(key, sc.dt).expect("non-empty");
                key = key.wrapping_add(1);
                sent.push(Packet::Repair(id, r));
            }
        }
    }
    let mut received: Vec<Packet> = sent
        .into_iter()
        .filter(|p| {
            let loss = match p {
                Packet::Source(..) => sc.source_loss,
                Packet::Repair(..) => sc.repair_loss,
            };
            rng.random_range(0..100) >= loss
        })
        .collect();
    if sc.reorder {
        // Swap neighbours at random: mild reordering.
        for i in 1..received.len() {
            if rng.random_bool(0.3) {
                received.swap(i - 1, i);
            }
        }
    }
    // The reference system over all n sources.
    let mut rows = Vec::new();
    let mut got_source = vec![false; sc.n];
    for p in &received {
        let mut row = vec![0u8; sc.n];
        match p {
            Packet::Source(esi, _) => {
                let i = esi.wrapping_sub(sc.start) as usize;
                row[i] = 1;
                got_source[i] = true;
            }
            Packet::Repair(id, _) => {
                let mut cc = vec![0u8; usize::from(id.nss())];
                generate_coding_coefs(id.repair_key(), &mut cc, id.dt(), field.m()).expect("valid");
                let first = id.first_esi().wrapping_sub(sc.start) as usize;
                row[first..first + cc.len()].copy_from_slice(&cc);
            }
        }
        rows.push(row);
    }
    let det = determined(sc.n, rows);

    let mut cfg = DecoderConfig::new(sc.e);
    cfg.field = field;
    let mut d = Decoder::new(cfg).expect("valid");
    let mut rebuilt = vec![None; sc.n];
    let mut arrived = vec![false; sc.n];
    for p in &received {
        match p {
            Packet::Source(esi, adu) => {
                let i = esi.wrapping_sub(sc.start) as usize;
                arrived[i] = true;
                d.receive_source_adu(*esi, i as u8, adu).expect("valid");
            }
            Packet::Repair(id, r) => d.receive_repair(*id, r).expect("valid"),
        }
        while let Some(r) = d.poll_recovered() {
            let i = r.esi.wrapping_sub(sc.start) as usize;
            assert!(i < sc.n, "{sc:?}: rebuilt ESI {} out of the stream", r.esi);
            assert!(rebuilt[i].is_none(), "{sc:?}: ESI {} rebuilt twice", r.esi);
            assert!(
                !arrived[i],
                "{sc:?}: ESI {} rebuilt after it arrived",
                r.esi
            );
            assert_eq!(r.flow_id, i as u8, "{sc:?}");
            rebuilt[i] = Some(r.adu);
        }
        assert!(d.equations() <= d.window_len());
    }
    for i in 0..sc.n {
        // Every determined source never received is rebuilt; nothing
        // undetermined is. In order, a source always arrives before the
        // repairs covering it, so a received one is never rebuilt too;
        // reordered, a repair may rebuild it before it arrives.
        if det[i] && !got_source[i] {
            assert!(
                rebuilt[i].is_some(),
                "{sc:?}: source {i} determined, not rebuilt"
            );
        }
        if rebuilt[i].is_some() {
            assert!(det[i], "{sc:?}: source {i} rebuilt, not determined");
            assert!(
                sc.reorder || !got_source[i],
                "{sc:?}: source {i} received and rebuilt"
            );
        }
        if let Some(a) = &rebuilt[i] {
            assert_eq!(a, &adus[i], "{sc:?}: source {i}");
        }
        assert_eq!(
            d.is_known(sc.start.wrapping_add(i as u32)),
            det[i],
            "{sc:?}: source {i}"
        );
    }
    let s = d.stats();
    assert_eq!(
        s.recovered,
        rebuilt.iter().filter(|r| r.is_some()).count() as u64
    );
    assert_eq!(
        (s.malformed, s.stale, s.corrupt_adui, s.unrecovered),
        (0, 0, 0, 0),
        "{sc:?}"
    );
    (
        got_source.iter().filter(|&&g| !g).count(),
        s.recovered as usize,
    )
}

fn scenario() -> impl Strategy<Value = Scenario> {
    (
        any::<u64>(),
        1usize..48,
        4usize..24,
        1usize..14,
        prop_oneof![Just(15u8), 0u8..16],
        proptest::bool::weighted(0.2),
        prop_oneof![Just(0u32), Just(u32::MAX - 20), any::<u32>()],
        (0u8..60, 0u8..40, 1usize..5, any::<bool>()),
    )
        .prop_map(
            |(seed, n, e, window, dt, gf2, start, (sl, rl, every, reorder))| Scenario {
                seed,
                n,
                e,
                window,
                dt,
                gf2,
                start,
                source_loss: sl,
                repair_loss: rl,
                repair_every: every,
                reorder,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn decoder_rebuilds_exactly_what_is_determined(sc in scenario()) {
        run_against_brute_force(&sc);
    }
}

/// With enough repairs in every window, every loss comes back byte-exact,
/// including across the ESI wrap.
#[test]
fn enough_repairs_rebuild_everything() {
    for start in [0, u32::MAX - 30] {
        let sc = Scenario {
            seed: 5,
            n: 60,
            e: 40,
            window: 8,
            dt: 15,
            gf2: false,
            start,
            source_loss: 20,
            repair_loss: 0,
            repair_every: 1,
            reorder: false,
        };
        let (lost, rebuilt) = run_against_brute_force(&sc);
        assert!(lost > 5, "the run loses something");
        assert_eq!(rebuilt, lost, "every loss rebuilt");
    }
}

// ---- long streams, bounded windows ----

/// A long stream through a small decoding window: memory stays within
/// its bounds, every rebuilt ADU is the one sent, and with one repair per
/// two sources at 10% loss nearly all losses come back.
#[test]
fn long_stream_small_window() {
    let mut rng = ChaCha8Rng::seed_from_u64(42);
    let mut enc = Encoder::new(64, 16)
        .expect("valid")
        .starting_at(u32::MAX - 500);
    let mut cfg = DecoderConfig::new(64);
    cfg.max_window = 32;
    cfg.max_equations = 16;
    let mut d = Decoder::new(cfg).expect("valid");
    let mut sent = std::collections::HashMap::new();
    let (mut lost, mut rebuilt) = (0u32, 0u32);
    for i in 0..5000u32 {
        let adu: Vec<u8> = (0..rng.random_range(0..=61))
            .map(|_| rng.random())
            .collect();
        let esi = enc.push_adu(1, &adu).expect("fits");
        if rng.random_range(0..10) == 0 {
            lost += 1;
        } else {
            d.receive_source_adu(esi, 1, &adu).expect("valid");
        }
        sent.insert(esi, adu);
        if i % 2 == 1 && rng.random_range(0..10) != 0 {
            let (id, r) = enc.repair(i as u16, 15).expect("non-empty");
            d.receive_repair(id, &r).expect("valid");
        }
        while let Some(r) = d.poll_recovered() {
            assert_eq!(Some(&r.adu), sent.get(&r.esi), "ESI {}", r.esi);
            rebuilt += 1;
        }
        assert!(d.window_len() <= 32);
        assert!(d.equations() <= 16);
    }
    assert!(rebuilt * 100 >= lost * 95, "rebuilt {rebuilt} of {lost}");
    assert_eq!(d.stats().corrupt_adui, 0);
}

// ---- determinism and backends ----

/// The same stream gives the same repairs and the same rebuilt sources on
/// every backend and every run.
#[test]
fn deterministic_across_runs_and_backends() {
    let run = |backend: Backend| {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut enc = Encoder::new(300, 40)
            .expect("valid")
            .with_backend(backend)
            .expect("available");
        let mut d = Decoder::new(DecoderConfig::new(300))
            .expect("valid")
            .with_backend(backend)
            .expect("available");
        let mut repairs = Vec::new();
        let mut out = Vec::new();
        for i in 0..200u16 {
            let adu: Vec<u8> = (0..rng.random_range(0..=297))
                .map(|_| rng.random())
                .collect();
            let esi = enc.push_adu(0, &adu).expect("fits");
            if rng.random_range(0..4) != 0 {
                d.receive_source_adu(esi, 0, &adu).expect("valid");
            }
            if i % 3 == 0 {
                let (id, r) = enc.repair(i, (i % 16) as u8).expect("non-empty");
                d.receive_repair(id, &r).expect("valid");
                repairs.push((id, r));
            }
            out.extend(std::iter::from_fn(|| d.poll_recovered()));
        }
        (repairs, out, d.stats())
    };
    let first = run(Backend::Scalar);
    assert!(!first.1.is_empty());
    assert_eq!(run(Backend::Scalar), first);
    for backend in Backend::ALL.into_iter().filter(|b| b.is_available()) {
        assert_eq!(run(backend), first, "{backend:?}");
    }
}

// ---- hostile input ----

/// Random bytes as FEC Payload IDs and symbols (NSS up to 4095, ESIs
/// anywhere, far ahead and far behind), mixed with a real stream: no
/// panic, and memory within the configured bounds after every packet.
#[test]
fn hostile_stream_stays_bounded() {
    for seed in 0..8u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let e = 24;
        let mut cfg = DecoderConfig::new(e);
        cfg.max_window = 48;
        cfg.max_equations = 20;
        cfg.field = if seed % 2 == 0 {
            Field::Gf256
        } else {
            Field::Gf2
        };
        let mut d = Decoder::new(cfg).expect("valid");
        let mut enc = Encoder::new(e, 12).expect("valid").with_field(cfg.field);
        for step in 0..4000u32 {
            let mut bytes = [0u8; 8];
            rng.fill_bytes(&mut bytes);
            let near = d.window_start().unwrap_or(0);
            match rng.random_range(0..8) {
                0 => {
                    let (id, _) = RepairPayloadId::parse(&bytes).expect("8 bytes");
                    let mut sym = vec![0u8; e];
                    rng.fill_bytes(&mut sym);
                    let _ = d.receive_repair(id, &sym);
                }
                1 => {
                    // Near the window, NSS small or at its 4095 maximum.
                    let nss = if rng.random_bool(0.2) {
                        4095
                    } else {
                        rng.random_range(0..60)
                    };
                    // Near the window's start, or near the point 2^31
                    // ahead of it where serial order flips.
                    let base = if rng.random_bool(0.1) {
                        near.wrapping_add(1 << 31)
                    } else {
                        near
                    };
                    let first = base.wrapping_add(rng.random_range(0..120)).wrapping_sub(60);
                    let id =
                        RepairPayloadId::new(rng.random(), rng.random_range(0..16), nss, first)
                            .expect("in range");
                    let mut sym = vec![
                        0u8;
                        if rng.random_bool(0.9) {
                            e
                        } else {
                            rng.random_range(0..2 * e)
                        }
                    ];
                    rng.fill_bytes(&mut sym);
                    let _ = d.receive_repair(id, &sym);
                }
                2 => {
                    // Far ahead or far behind.
                    let jump = rng.random_range(1u32 << 20..1 << 31);
                    let esi = if rng.random_bool(0.5) {
                        near.wrapping_add(jump)
                    } else {
                        near.wrapping_sub(jump)
                    };
                    let mut sym = vec![0u8; e];
                    rng.fill_bytes(&mut sym);
                    let _ = d.receive_source(esi, &sym);
                }
                3 => {
                    let esi = near.wrapping_add(rng.random_range(0..80)).wrapping_sub(20);
                    let adu: Vec<u8> = (0..rng.random_range(0..30)).map(|_| rng.random()).collect();
                    let _ = d.receive_source_adu(esi, 0, &adu);
                }
                _ => {
                    let adu = step.to_be_bytes();
                    let esi = enc.push_adu(0, &adu).expect("fits");
                    if rng.random_bool(0.7) {
                        let _ = d.receive_source_adu(esi, 0, &adu);
                    }
                    let (id, r) = enc
                        .repair(step as u16, rng.random_range(0..16))
                        .expect("non-empty");
                    let _ = d.receive_repair(id, &r);
                }
            }
            assert!(d.window_len() <= 48, "seed {seed} step {step}");
            assert!(d.equations() <= 20, "seed {seed} step {step}");
            assert!(d.equations() <= d.window_len() - d.known_sources());
            assert!(d.pending_recovered() <= 48);
            if rng.random_bool(0.5) {
                while let Some(r) = d.poll_recovered() {
                    assert!(r.adu.len() <= e - ADUI_HEADER_LEN);
                }
            }
        }
        let s = d.stats();
        assert!(
            s.malformed > 0 && s.stale > 0 && s.unrecovered > 0,
            "seed {seed}: {s:?}"
        );
    }
}

/// A repair window straddling the point 2^31 ahead of the decoding
/// window's start: its end must be placed from its first ESI (by serial
/// order alone it would look 2^31 behind, and the window would not reach
/// it). The window jumps forward to cover it and keeps the equation; an
/// ESI exactly 2^31 away is behind, and stale.
#[test]
fn repair_straddling_the_serial_horizon() {
    for start in [0u32, u32::MAX - 3, 1 << 31] {
        let mut d = dec(4);
        d.receive_source_adu(start, 0, b"a").expect("valid");
        let first = start.wrapping_add((1 << 31) - 2);
        let id = RepairPayloadId::new(1, 15, 10, first).expect("fits");
        d.receive_repair(id, &[7; 4]).expect("valid");
        let lo = first.wrapping_add(9).wrapping_sub(255);
        assert_eq!(d.window_start(), Some(lo), "start {start}");
        assert_eq!((d.window_len(), d.equations()), (256, 1), "start {start}");
        let s = d.stats();
        assert_eq!((s.stale, s.unrecovered), (0, 0), "start {start}");
        d.receive_source_adu(lo.wrapping_add(1 << 31), 0, b"b")
            .expect("valid");
        assert_eq!(d.stats().stale, 1, "start {start}");
    }
}
