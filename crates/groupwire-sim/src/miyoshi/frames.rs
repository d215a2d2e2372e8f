//! Miyoshi et al. §5 (Figure 6, Tables 3 and 4): fixed-length frames
//! through a bursty bit-error channel, with no FEC, a fixed BCH code or the
//! adaptive code switch.
//!
//! # The frame
//!
//! The paper sends 50,000 packets of 800 bits and counts a packet's
//! overhead as `(127 - k) / 127` of it (Table 3: 50,000 × 63 / 127 =
//! 24,803 for BCH(127, 64)): the 800 bits on the air *include* the parity.
//! We lay codewords out on those 800 air bits: as many full 127-bit
//! codewords as fit (six), then a shortened codeword in the remaining 38
//! bits if its parity leaves room for data (for (127, 92): 35 parity + 3
//! data bits), else 38 bits of padding that carry nothing (errors there
//! are harmless). So a frame carries [`AirLayout::data_bits`] bits: 555
//! with (127, 92), 384 with (127, 64), 216 with (127, 36), all 800 without
//! FEC. Tables report overhead both ways: the paper's `(127 - k) / 127`
//! (to compare with its columns) and the exact `1 - data_bits / 800`.
//!
//! # The channel
//!
//! Any [`LossModel`]; the paper's is Table 2's Gilbert chain stepped once
//! per frame with random bit errors inside a frame
//! ([`LossModel::miyoshi_lower`], [`LossModel::miyoshi_higher`]). Every
//! scheme sees the *same* error pattern on each frame (common random
//! numbers), so the rows differ only by what the schemes do with it.
//!
//! # Deciding a frame's fate
//!
//! With a code, every codeword of the frame goes through the real decoder
//! ([`Bch::decode_errors`]): the frame is lost if any codeword is
//! uncorrectable or miscorrected. Without FEC, any bit error loses it.

use groupwire_codec::{BCH_N, Bch};
use groupwire_link::loss::{LossError, LossModel, PacketFate};
use groupwire_proto::control::ladder::{
    FrameOutcome, LadderController, PredictiveConfig, PredictiveLadder, RungModel, ThresholdConfig,
    ThresholdLadder,
};
use groupwire_units::{Bitrate, Instant};
use rand::Rng;

/// The rate frames go out at, back to back, so that a time-varying channel
/// (`schedule:`) sees time pass: the wireless rate of the TCP part's path
/// ([`super::wireless::WirelessPath`], 384 kbit/s). The frame experiment
/// itself has no clock, and no other channel looks at the time.
pub const FRAME_RATE: Bitrate = Bitrate::kbps(384);

/// Where a code's codewords sit in a frame of `air_bits` bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AirLayout {
    /// Bits on the air per frame.
    pub air_bits: usize,
    /// Data bits the frame carries.
    pub data_bits: usize,
    /// Length of the shortened last codeword, 0 if the tail is padding
    /// (or there is no FEC).
    pub tail_bits: usize,
    /// Full 127-bit codewords (0 without FEC).
    pub full_codewords: usize,
}

impl AirLayout {
    /// The layout of `code` (or no FEC) in `air_bits` bits.
    pub fn new(code: Option<&Bch>, air_bits: usize) -> Self {
        let Some(code) = code else {
            return Self {
                air_bits,
                data_bits: air_bits,
                tail_bits: 0,
                full_codewords: 0,
            };
        };
        let full = air_bits / BCH_N;
        let rest = air_bits % BCH_N;
        let tail = if rest > code.parity_bits() { rest } else { 0 };
        let data_bits = full * code.k() + tail.saturating_sub(code.parity_bits());
        debug_assert!(code.wire_bits(data_bits) <= air_bits);
        Self {
            air_bits,
            data_bits,
            tail_bits: tail,
            full_codewords: full,
        }
    }

    /// The lengths of the codewords on the air, in order.
    pub fn codeword_lengths(&self) -> impl Iterator<Item = usize> {
        std::iter::repeat_n(BCH_N, self.full_codewords)
            .chain((self.tail_bits > 0).then_some(self.tail_bits))
    }

    /// The paper's overhead share of a frame: `(127 - k) / 127`, 0 without FEC.
    pub fn paper_overhead(code: Option<&Bch>) -> f64 {
        code.map_or(0.0, |c| c.parity_bits() as f64 / BCH_N as f64)
    }

    /// The exact overhead share: air bits that are not data.
    pub fn exact_overhead(&self) -> f64 {
        1.0 - self.data_bits as f64 / self.air_bits as f64
    }
}

/// What becomes of a frame with these bit errors (`None`: intact) under
/// `code`: lost, or delivered with the decoder's count of corrected bits.
/// Errors past the codewords (padding) are harmless. Without FEC any
/// error loses the frame.
pub fn frame_outcome(
    code: Option<&Bch>,
    layout: &AirLayout,
    errors: Option<&[u32]>,
) -> FrameOutcome {
    let lost = FrameOutcome::LOST;
    match (errors, code) {
        (None, _) => FrameOutcome::CLEAN,
        (Some([]), None) => FrameOutcome::CLEAN,
        (Some(_), None) => lost,
        (Some(e), Some(code)) => match code.decode_errors(layout.data_bits, e) {
            Ok(corrected) => FrameOutcome {
                lost: false,
                corrected_bits: Some(corrected),
            },
            Err(_) => lost,
        },
    }
}

/// How a frame of `air_bits` bits fares under `code` (or none), laid out
/// as [`AirLayout`] does, for [`PredictiveLadder`] and the analysis:
/// efficiency the paper's way, `k / 127`.
pub fn air_rung(code: Option<&Bch>, air_bits: usize) -> RungModel {
    match code {
        None => RungModel::uncoded(air_bits),
        Some(c) => RungModel {
            efficiency: 1.0 - AirLayout::paper_overhead(Some(c)),
            codewords: AirLayout::new(Some(c), air_bits)
                .codeword_lengths()
                .map(|n| (n, c.t()))
                .collect(),
        },
    }
}

/// How a packet of `data_bits` bits fares as a link-layer frame under
/// `code` (or none): `ceil(bits / k)` codewords, the last shortened, as
/// [`Bch::encode_packet`] lays them out; efficiency is data over air bits.
pub fn packet_rung(code: Option<&Bch>, data_bits: usize) -> RungModel {
    match code {
        None => RungModel::uncoded(data_bits),
        Some(c) => {
            let q = c.codewords(data_bits).max(1);
            let last = data_bits - (q - 1) * c.k() + c.parity_bits();
            let mut codewords = vec![(BCH_N, c.t()); q - 1];
            codewords.push((last, c.t()));
            RungModel {
                efficiency: data_bits as f64 / c.wire_bits(data_bits).max(1) as f64,
                codewords,
            }
        }
    }
}

/// The rungs `[no FEC, codes...]` of [`air_rung`].
pub fn rung_models(codes: &[Bch], air_bits: usize) -> Vec<RungModel> {
    std::iter::once(air_rung(None, air_bits))
        .chain(codes.iter().map(|c| air_rung(Some(c), air_bits)))
        .collect()
}

/// One row of Table 3 or 4.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct FrameRow {
    /// `no FEC`, `BCH(127,92)`, ..., `adaptive`.
    pub scheme: String,
    /// Frames sent.
    pub sent: u64,
    /// Frames lost on the link.
    pub lost: u64,
    /// Frames received (sent - lost).
    pub received: u64,
    /// Overhead in frames, the paper's way: the sum over received frames
    /// of `(127 - k) / 127` (eq. a-5).
    pub overhead: f64,
    /// Received minus overhead: the paper's "available" column.
    pub available: f64,
    /// Overhead counted exactly: the sum over received frames of their
    /// air bits that are not data, in frames.
    pub exact_overhead: f64,
    /// Code changes (adaptive only).
    pub switches: u64,
}

impl FrameRow {
    fn new(scheme: String, sent: u64) -> Self {
        Self {
            scheme,
            sent,
            lost: 0,
            received: 0,
            overhead: 0.0,
            available: 0.0,
            exact_overhead: 0.0,
            switches: 0,
        }
    }

    fn record(&mut self, lost: bool, code: Option<&Bch>, layout: &AirLayout) {
        if lost {
            self.lost += 1;
        } else {
            self.received += 1;
            self.overhead += AirLayout::paper_overhead(code);
            self.exact_overhead += layout.exact_overhead();
        }
        self.available = self.received as f64 - self.overhead;
    }
}

/// The name of a rung: `no FEC` or `BCH(127,k)`.
pub fn scheme_name(code: Option<&Bch>) -> String {
    code.map_or_else(|| "no FEC".to_owned(), |c| format!("BCH(127,{})", c.k()))
}

/// The two code switches of [`simulate`].
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Switches {
    /// The paper's threshold rule.
    pub threshold: ThresholdConfig,
    /// The predictive rule (beyond the paper).
    pub predictive: PredictiveConfig,
}

/// The experiment of Figure 6: `frames` frames of `air_bits` bits through
/// `channel`, decided for no FEC, each of `codes`, the threshold switch
/// and the predictive switch over the ladder `[no FEC, codes...]`, all on
/// the same errors. Rows in that order, then `hindsight per frame`: the
/// best rung for each frame chosen knowing its errors (an upper bound no
/// causal rule reaches). Each switch learns only what its receiver would
/// tell it: lost, or the bits its decoder corrected.
pub fn simulate<R: Rng + ?Sized>(
    channel: &LossModel,
    frames: u64,
    air_bits: usize,
    codes: &[Bch],
    switches: Switches,
    rng: &mut R,
    progress: &mut dyn FnMut(u64),
) -> Result<Vec<FrameRow>, LossError> {
    let mut phases = simulate_phases(
        &[(channel.clone(), frames)],
        air_bits,
        codes,
        switches,
        rng,
        progress,
    )?;
    Ok(phases.pop().expect("one phase"))
}

/// [`simulate`] over a channel that changes: `phases` of (channel,
/// frames) in turn, the switches keeping what they learned across a
/// change (they are not told). One set of rows per phase.
pub fn simulate_phases<R: Rng + ?Sized>(
    phases: &[(LossModel, u64)],
    air_bits: usize,
    codes: &[Bch],
    switches: Switches,
    rng: &mut R,
    progress: &mut dyn FnMut(u64),
) -> Result<Vec<Vec<FrameRow>>, LossError> {
    let air_bytes = air_bits.div_ceil(8);
    let processes = phases
        .iter()
        .map(|(c, _)| c.build())
        .collect::<Result<Vec<_>, _>>()?;
    let ladder: Vec<Option<&Bch>> = std::iter::once(None)
        .chain(codes.iter().map(Some))
        .collect();
    let layouts: Vec<AirLayout> = ladder
        .iter()
        .map(|c| AirLayout::new(*c, air_bits))
        .collect();
    let mut controller = ThresholdLadder::new(ladder.len(), switches.threshold);
    let mut predictor = PredictiveLadder::new(rung_models(codes, air_bits), switches.predictive);
    let mut outcome = vec![FrameOutcome::CLEAN; ladder.len()];
    let mut lost = vec![false; ladder.len()];
    let mut out = Vec::with_capacity(phases.len());
    let mut done = 0u64;
    for ((_, frames), mut process) in phases.iter().zip(processes) {
        let frames = *frames;
        let mut rows: Vec<FrameRow> = ladder
            .iter()
            .map(|c| FrameRow::new(scheme_name(*c), frames))
            .collect();
        let mut adaptive = FrameRow::new("adaptive (threshold)".to_owned(), frames);
        let mut predictive = FrameRow::new("adaptive (predictive)".to_owned(), frames);
        let mut bound = FrameRow::new("hindsight per frame".to_owned(), frames);
        let switches_before = (controller.switches(), predictor.switches());
        for n in 0..frames {
            let now = Instant::ZERO + FRAME_RATE.transmit_time((done + n) * air_bytes as u64);
            let fate = process.on_packet(now, air_bytes, rng);
            let errors: Option<Vec<u32>> = match fate {
                PacketFate::Delivered => None,
                PacketFate::Lost => Some((0..air_bits as u32).collect()),
                PacketFate::Corrupted(e) => {
                    let inside: Vec<u32> = e
                        .positions()
                        .iter()
                        .copied()
                        .filter(|&p| (p as usize) < air_bits)
                        .collect();
                    (!inside.is_empty()).then_some(inside)
                }
            };
            for (i, code) in ladder.iter().enumerate() {
                outcome[i] = frame_outcome(*code, &layouts[i], errors.as_deref());
                lost[i] = outcome[i].lost;
                rows[i].record(lost[i], *code, &layouts[i]);
            }
            let r = controller.rung();
            adaptive.record(lost[r], ladder[r], &layouts[r]);
            controller.on_frame(outcome[r]);
            let r = predictor.rung();
            predictive.record(lost[r], ladder[r], &layouts[r]);
            predictor.on_frame(outcome[r]);
            // The best rung for this frame alone: the lightest that survives.
            let best = (0..ladder.len()).filter(|&i| !lost[i]).min_by(|&a, &b| {
                AirLayout::paper_overhead(ladder[a])
                    .total_cmp(&AirLayout::paper_overhead(ladder[b]))
            });
            match best {
                Some(i) => bound.record(false, ladder[i], &layouts[i]),
                None => bound.record(true, None, &layouts[0]),
            }
            if n & 0x3ff == 0 {
                progress(done + n);
            }
        }
        done += frames;
        progress(done);
        adaptive.switches = controller.switches() - switches_before.0;
        predictive.switches = predictor.switches() - switches_before.1;
        rows.push(adaptive);
        rows.push(predictive);
        rows.push(bound);
        out.push(rows);
    }
    Ok(out)
}

/// Analytic loss of one frame under `code` on `channel`, from the chain
/// (the paper's appendix analysis for no FEC and fixed FEC): the frame's
/// state is Good with probability `π_G = r / (p + r)` and Bad with `π_B`;
/// in a state with bit error rate `b` a codeword of `m` bits survives with
/// probability `P(Binomial(m, b) <= t)` and a frame survives if every
/// codeword does. `None` for channels that are not
/// [`LossModel::BitError`].
pub fn analytic_loss(channel: &LossModel, code: Option<&Bch>, air_bits: usize) -> Option<f64> {
    let LossModel::BitError { p, r, good, bad } = *channel else {
        return None;
    };
    let (p, r) = (p.get(), r.get());
    let pi_bad = if p > 0.0 { p / (p + r) } else { 0.0 };
    let rung = air_rung(code, air_bits);
    Some((1.0 - pi_bad) * rung.frame_loss(good) + pi_bad * rung.frame_loss(bad))
}

/// The probability that a packet of `data_bits` bits is lost at
/// independent bit error rate `ber` as a link-layer frame under `code`
/// ([`packet_rung`]): what the station sees as the packet error rate.
pub fn packet_loss(code: Option<&Bch>, data_bits: usize, ber: f64) -> f64 {
    packet_rung(code, data_bits).frame_loss(ber)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    /// 20 000 of the paper's 800-bit frames over `channel` with `codes`
    /// and the default switches, from `seed`.
    fn paper_frames(channel: &LossModel, codes: &[Bch], seed: u64) -> Vec<FrameRow> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        simulate(
            channel,
            20_000,
            800,
            codes,
            Switches::default(),
            &mut rng,
            &mut |_| {},
        )
        .expect("valid")
    }

    #[test]
    fn layouts_fill_eight_hundred_air_bits() {
        let [c92, c64, c36] = Bch::paper_codes();
        let l = AirLayout::new(Some(&c92), 800);
        assert_eq!((l.full_codewords, l.tail_bits, l.data_bits), (6, 38, 555));
        assert_eq!(c92.wire_bits(l.data_bits), 800);
        let l = AirLayout::new(Some(&c64), 800);
        assert_eq!((l.full_codewords, l.tail_bits, l.data_bits), (6, 0, 384));
        let l = AirLayout::new(Some(&c36), 800);
        assert_eq!(l.data_bits, 216);
        assert_eq!(AirLayout::new(None, 800).data_bits, 800);
        // The paper's check: 50,000 frames × 63 / 127 = 24,803.
        let overhead = 50_000.0 * AirLayout::paper_overhead(Some(&c64));
        assert_eq!(overhead.round(), 24_803.0);
    }

    #[test]
    fn simulated_losses_match_the_analysis_and_are_deterministic() {
        let channel: LossModel = "ber:4e-3".parse().expect("valid");
        let codes = Bch::paper_codes();
        let run = |seed| paper_frames(&channel, &codes, seed);
        let rows = run(7);
        assert_eq!(rows, run(7));
        for (row, code) in rows
            .iter()
            .zip(std::iter::once(None).chain(codes.iter().map(Some)))
        {
            let p = analytic_loss(&channel, code, 800).expect("bit errors");
            let expected = p * 20_000.0;
            let sd = (20_000.0 * p * (1.0 - p)).sqrt();
            assert!(
                (row.lost as f64 - expected).abs() <= 5.0 * sd + 2.0,
                "{}: lost {} vs {expected:.1}",
                row.scheme,
                row.lost
            );
            assert_eq!(row.lost + row.received, 20_000);
        }
        // Stronger codes lose less on a steady channel.
        assert!(rows[0].lost > rows[1].lost && rows[1].lost > rows[2].lost);
        // The per-frame hindsight bound is at least every other row.
        let bound = rows.last().expect("rows").available;
        assert!(rows.iter().all(|r| r.available <= bound + 1e-9));
    }

    /// On the paper's higher-BER channel, the threshold switch spends its
    /// time on the codes a fade needs: it loses far fewer frames than no
    /// FEC and carries more than the strongest fixed code.
    #[test]
    fn the_threshold_switch_sits_between_no_fec_and_the_strongest_code() {
        let codes = Bch::paper_codes();
        let rows = paper_frames(&LossModel::miyoshi_higher(), &codes, 3);
        let adaptive = &rows[4];
        assert_eq!(adaptive.scheme, "adaptive (threshold)");
        assert!(adaptive.lost < rows[0].lost / 2, "{rows:?}");
        assert!(adaptive.available > rows[3].available, "{rows:?}");
        assert!(adaptive.switches > 0);
        // The predictive switch carries more than the threshold rule and
        // every fixed code, and no more than the per-frame bound.
        let predictive = &rows[5];
        assert_eq!(predictive.scheme, "adaptive (predictive)");
        assert!(predictive.available > adaptive.available, "{rows:?}");
        assert!(
            rows[..4].iter().all(|r| predictive.available > r.available),
            "{rows:?}"
        );
        assert!(predictive.available <= rows[6].available, "{rows:?}");
    }
}
