//! Code switching on a ladder of FEC strengths: Miyoshi et al.'s reactive
//! rule (§4, after Eckhardt & Steenkiste).
//!
//! A *ladder* is an ordered list of codes, weakest (least overhead) first:
//! for Miyoshi et al. no FEC, BCH(127, 92), BCH(127, 64), BCH(127, 36). A
//! [`LadderController`] sees the outcome of every frame sent at the
//! current rung and says which rung the next frame uses. It knows nothing
//! about the codes themselves, so the same controller drives link-layer
//! BCH in the simulator and could drive any other ordered set of
//! redundancy settings.
//!
//! [`ThresholdLadder`] is the paper's rule: "the FEC code is changed when
//! two or more segments among ten segments encounter the transmission
//! error" (§4, citing Eckhardt & Steenkiste), stepping to the more
//! correcting code; "otherwise, it is changed to the less overhead code".
//!
//! [`PredictiveLadder`] goes beyond the paper: it needs no thresholds. It
//! fits a two-state Gilbert channel online to what it observes (frames
//! lost, bits corrected), filters the channel's current state, and gives
//! the next frame the rung with the highest expected goodput over a short
//! horizon, knowing each rung's cost and strength ([`RungModel`]).
//!
//! ```
//! use groupwire_proto::control::ladder::{FrameOutcome, LadderController, ThresholdLadder};
//!
//! let mut c = ThresholdLadder::new(4, Default::default());
//! c.on_frame(FrameOutcome::LOST);
//! c.on_frame(FrameOutcome::LOST);
//! assert_eq!(c.rung(), 1); // two errors in the window: one rung stronger
//! for _ in 0..10 {
//!     c.on_frame(FrameOutcome::CLEAN);
//! }
//! assert_eq!(c.rung(), 0); // a clean window: back to the lighter code
//! ```

use core::fmt;

/// What became of one frame, as the sender learns it (Miyoshi et al.: from
/// ELN, which marks the segments lost on the wireless hop).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FrameOutcome {
    /// The frame did not survive the link (more errors than its code
    /// corrects, or any error without FEC).
    pub lost: bool,
    /// Bit errors the receiver's decoder corrected in it, if the receiver
    /// reports them (a richer signal than loss; the paper's rule ignores it).
    pub corrected_bits: Option<u32>,
}

impl FrameOutcome {
    /// A frame that arrived with nothing to correct.
    pub const CLEAN: Self = Self {
        lost: false,
        corrected_bits: Some(0),
    };
    /// A frame lost on the link.
    pub const LOST: Self = Self {
        lost: true,
        corrected_bits: None,
    };
}

/// Chooses the rung (code strength, 0 = lightest) of each frame from the
/// outcomes of the frames before it.
pub trait LadderController: fmt::Debug + Send {
    /// The outcome of one frame sent at the current rung, in sending order.
    fn on_frame(&mut self, outcome: FrameOutcome);
    /// The rung for the next frame, in `0..rungs`.
    fn rung(&self) -> usize;
}

/// Parameters of [`ThresholdLadder`]. The defaults are the paper's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ThresholdConfig {
    /// Frames observed per decision (§4: ten segments). At most 64.
    pub window: u32,
    /// Lost frames among the last `window` that move one rung up (§4: two
    /// or more). Checked after every frame, so a burst is answered as soon
    /// as it shows.
    pub up: u32,
    /// Step one rung down once `window` frames have been seen at this rung
    /// with at most this many lost among the last `window`.
    ///
    /// The paper's "otherwise, it is changed to the less overhead code"
    /// leaves the exact condition open; 0 (a window with no error at all)
    /// is our reading: a window with one error neither climbs nor falls,
    /// so the rule does not flap between two codes at a steady error rate
    /// near `up / window`.
    pub down: u32,
}

impl Default for ThresholdConfig {
    fn default() -> Self {
        Self {
            window: 10,
            up: 2,
            down: 0,
        }
    }
}

impl ThresholdConfig {
    /// Checks the parameters: `1 <= window <= 64`, `1 <= up <= window`,
    /// `down < up`.
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=64).contains(&self.window) {
            return Err(format!("window {} must be 1..=64 frames", self.window));
        }
        if !(1..=self.window).contains(&self.up) {
            return Err(format!(
                "up {} must be 1..=window ({})",
                self.up, self.window
            ));
        }
        if self.down >= self.up {
            return Err(format!(
                "down {} must be less than up ({})",
                self.down, self.up
            ));
        }
        Ok(())
    }
}

/// Miyoshi et al.'s reactive code switching (§4, Figure 4): one rung up as
/// soon as `up` of the last `window` frames were lost, one rung down after
/// a full window at this rung with at most `down` lost. The observation
/// window restarts at every switch, so each decision judges the code in use.
#[derive(Clone, Debug)]
pub struct ThresholdLadder {
    config: ThresholdConfig,
    rungs: usize,
    rung: usize,
    /// Outcomes since the last switch, newest in bit 0, 1 = lost.
    history: u64,
    /// Frames seen since the last switch (saturating).
    seen: u32,
    switches: u64,
}

impl ThresholdLadder {
    /// A controller over `rungs` codes (at least 1), starting at rung 0.
    ///
    /// # Panics
    ///
    /// If `rungs` is 0 or `config` fails [`ThresholdConfig::validate`].
    pub fn new(rungs: usize, config: ThresholdConfig) -> Self {
        assert!(rungs >= 1, "a ladder needs at least one rung");
        if let Err(e) = config.validate() {
            panic!("ThresholdLadder: {e}");
        }
        Self {
            config,
            rungs,
            rung: 0,
            history: 0,
            seen: 0,
            switches: 0,
        }
    }

    /// Code changes so far.
    pub fn switches(&self) -> u64 {
        self.switches
    }

    fn window_mask(&self) -> u64 {
        if self.config.window >= 64 {
            u64::MAX
        } else {
            (1u64 << self.config.window) - 1
        }
    }

    fn switch_to(&mut self, rung: usize) {
        self.rung = rung;
        self.history = 0;
        self.seen = 0;
        self.switches += 1;
    }
}

impl LadderController for ThresholdLadder {
    fn on_frame(&mut self, outcome: FrameOutcome) {
        self.history = (self.history << 1 | u64::from(outcome.lost)) & self.window_mask();
        self.seen = self.seen.saturating_add(1);
        let lost = self.history.count_ones();
        if lost >= self.config.up && self.rung + 1 < self.rungs {
            self.switch_to(self.rung + 1);
        } else if self.seen >= self.config.window && lost <= self.config.down && self.rung > 0 {
            self.switch_to(self.rung - 1);
        }
    }

    fn rung(&self) -> usize {
        self.rung
    }
}

/// What a rung costs and how it fails: the share of a frame that is data,
/// and the frame's codewords as (bits, errors corrected). An uncoded frame
/// is one "codeword" that corrects nothing.
#[derive(Clone, Debug, PartialEq)]
pub struct RungModel {
    /// Data bits over air bits.
    pub efficiency: f64,
    /// Each codeword of a frame: its length on the air and the bit errors
    /// it corrects.
    pub codewords: Vec<(usize, usize)>,
}

impl RungModel {
    /// A frame of `bits` bits without FEC.
    pub fn uncoded(bits: usize) -> Self {
        Self {
            efficiency: 1.0,
            codewords: vec![(bits, 0)],
        }
    }

    /// Bits on the air per frame.
    pub fn frame_bits(&self) -> usize {
        self.codewords.iter().map(|c| c.0).sum()
    }

    /// Expected bit errors in a frame at bit error rate `ber`, given that
    /// it survived and given that it was lost:
    /// `E[N | lost] = (E[N] - P(survive) E[N | survive]) / P(lost)`, where a
    /// surviving frame's codewords are independent and each within its `t`.
    fn expected_errors(&self, ber: f64) -> (f64, f64) {
        let bits = self.frame_bits() as f64;
        let mut survive = 1.0;
        let mut given_survive = 0.0;
        for &(n, t) in &self.codewords {
            let (mut mass, mut mean) = (0.0, 0.0);
            for i in 0..=t.min(n) {
                let p = ln_binomial_pmf(n, ber, i).exp();
                mass += p;
                mean += i as f64 * p;
            }
            survive *= mass;
            given_survive += if mass > 0.0 { mean / mass } else { 0.0 };
        }
        let lost = 1.0 - survive;
        let fatal = self.codewords.iter().map(|c| c.1 + 1).min().unwrap_or(1) as f64;
        if lost <= 1e-12 {
            return (given_survive, fatal.max(bits * ber));
        }
        (
            given_survive,
            ((bits * ber - survive * given_survive) / lost).max(fatal),
        )
    }

    /// Probability that a frame is lost at independent bit error rate
    /// `ber`: some codeword has more errors than it corrects.
    pub fn frame_loss(&self, ber: f64) -> f64 {
        1.0 - self
            .codewords
            .iter()
            .map(|&(n, t)| binomial_cdf(n, ber, t))
            .product::<f64>()
    }
}

/// `P(Binomial(n, b) <= t)`.
pub fn binomial_cdf(n: usize, b: f64, t: usize) -> f64 {
    if b <= 0.0 {
        return 1.0;
    }
    if b >= 1.0 {
        return if t >= n { 1.0 } else { 0.0 };
    }
    let mut term = (1.0 - b).powi(n as i32); // P(X = 0)
    let mut sum = term;
    for i in 1..=t.min(n) {
        term *= (n - i + 1) as f64 / i as f64 * b / (1.0 - b);
        sum += term;
    }
    sum.min(1.0)
}

/// `ln P(Binomial(n, b) = k)`.
fn ln_binomial_pmf(n: usize, b: f64, k: usize) -> f64 {
    let b = b.clamp(1e-12, 1.0 - 1e-12);
    let k = k.min(n);
    let ln_choose: f64 = (0..k).map(|i| ((n - i) as f64 / (i + 1) as f64).ln()).sum();
    ln_choose + k as f64 * b.ln() + (n - k) as f64 * (-b).ln_1p()
}

/// Parameters of [`PredictiveLadder`].
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PredictiveConfig {
    /// Frames ahead the choice is judged over: the state estimate decays
    /// toward the long-run mix over this horizon.
    pub horizon: u32,
    /// Forgetting factor per frame of the channel statistics (0.999: an
    /// effective memory of 1000 frames), so the fit follows a channel that
    /// changes.
    pub forget: f64,
    /// Weight of a lost frame beyond its own airtime, in frames: 0 counts
    /// only the frame (the goodput of Tables 3-4); a transport that stalls
    /// on a loss (TCP waiting for a retransmission) wants more.
    pub loss_penalty: f64,
}

impl Default for PredictiveConfig {
    fn default() -> Self {
        Self {
            horizon: 10,
            forget: 0.999,
            loss_penalty: 0.0,
        }
    }
}

impl PredictiveConfig {
    /// Checks the parameters.
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=100_000).contains(&self.horizon) {
            return Err(format!(
                "horizon {} must be 1..=100000 frames",
                self.horizon
            ));
        }
        if !(self.forget > 0.5 && self.forget <= 1.0) {
            return Err(format!("forget {} must be in (0.5, 1]", self.forget));
        }
        if !(self.loss_penalty >= 0.0 && self.loss_penalty.is_finite()) {
            return Err(format!("loss_penalty {} must be >= 0", self.loss_penalty));
        }
        Ok(())
    }
}

/// Sufficient statistics of the two-state fit, forgotten exponentially.
#[derive(Clone, Copy, Debug)]
struct Fit {
    /// Expected transitions: [from][to], 0 = Good, 1 = Bad.
    trans: [[f64; 2]; 2],
    /// Expected bits and bit errors seen in each state.
    bits: [f64; 2],
    errors: [f64; 2],
}

impl Fit {
    /// A weak prior: Good nearly error-free, Bad at 1e-3, fades of ten
    /// frames every hundred, worth about ten frames of evidence.
    fn prior(frame_bits: f64) -> Self {
        Self {
            trans: [[9.0, 0.1], [1.0, 9.0]],
            bits: [10.0 * frame_bits, 10.0 * frame_bits],
            errors: [10.0 * frame_bits * 1e-6, 10.0 * frame_bits * 1e-3],
        }
    }

    fn p_gb(&self) -> f64 {
        self.trans[0][1] / (self.trans[0][0] + self.trans[0][1])
    }

    fn p_bg(&self) -> f64 {
        self.trans[1][0] / (self.trans[1][0] + self.trans[1][1])
    }

    fn ber(&self, s: usize) -> f64 {
        (self.errors[s] / self.bits[s]).clamp(1e-9, 0.999)
    }
}

/// Code choice without thresholds: an online Gilbert fit and the rung
/// with the highest expected goodput. Beyond Miyoshi et al.
///
/// Per frame it
/// 1. predicts the chance the channel is Bad from the fitted transition
///    probabilities,
/// 2. weighs that by how likely each state makes what was seen: the
///    corrected bit count when the receiver reports it (binomial), else
///    lost or not under the rung used,
/// 3. adds the expected transitions and bit errors to the (exponentially
///    forgotten) statistics: an online EM for a two-state hidden Markov
///    chain, with a lost frame's unknown error count imputed from the
///    fitted rate (at least what loses a frame on that rung),
/// 4. averages the Bad probability over the next `horizon` frames
///    (`π + (b - π) λ^k`, λ = 1 - p - r) and picks the rung maximizing
///    `efficiency × (1 - P(loss) × (1 + loss_penalty))`, the lighter one on
///    a tie.
///
/// The states are labelled by their fitted bit error rates: Bad is
/// whichever is higher.
#[derive(Clone, Debug)]
pub struct PredictiveLadder {
    rungs: Vec<RungModel>,
    config: PredictiveConfig,
    rung: usize,
    /// P(Bad) after the last frame.
    bad: f64,
    fit: Fit,
    switches: u64,
    /// Frames lost in a row on the current rung.
    lost_run: u32,
}

/// Losses in a row on one rung after which the fit's Bad-state bit error
/// rate is raised to at least where that rung loses half its frames.
const LOST_RUN_FLOOR: u32 = 3;

impl PredictiveLadder {
    /// A controller over `rungs` (weakest first), starting on rung 0.
    ///
    /// # Panics
    ///
    /// If `rungs` is empty or `config` fails [`PredictiveConfig::validate`].
    pub fn new(rungs: Vec<RungModel>, config: PredictiveConfig) -> Self {
        assert!(!rungs.is_empty(), "a ladder needs at least one rung");
        if let Err(e) = config.validate() {
            panic!("PredictiveLadder: {e}");
        }
        let bits = rungs[0].frame_bits().max(1) as f64;
        Self {
            rungs,
            config,
            rung: 0,
            bad: 0.0,
            fit: Fit::prior(bits),
            switches: 0,
            lost_run: 0,
        }
    }

    /// Code changes so far.
    pub fn switches(&self) -> u64 {
        self.switches
    }

    /// The fitted channel: (P(Good → Bad), P(Bad → Good), bit error rate
    /// in Good, in Bad) per frame.
    pub fn fitted(&self) -> (f64, f64, f64, f64) {
        (
            self.fit.p_gb(),
            self.fit.p_bg(),
            self.fit.ber(0),
            self.fit.ber(1),
        )
    }

    /// The current probability that the channel is Bad.
    pub fn p_bad(&self) -> f64 {
        self.bad
    }

    fn expected_goodput(&self, rung: &RungModel, bad: f64) -> f64 {
        let loss =
            bad * rung.frame_loss(self.fit.ber(1)) + (1.0 - bad) * rung.frame_loss(self.fit.ber(0));
        rung.efficiency * (1.0 - loss * (1.0 + self.config.loss_penalty))
    }
}

impl PredictiveLadder {
    /// One observation of `symbols` units (bits of a frame, packets of a
    /// report interval) of which exactly `errors` were hit, made on the
    /// current rung: for a block code over packets, where the receiver
    /// counts every lost packet, before and after repair alike. Updates
    /// the fit and picks the rung for what comes next. An empty
    /// observation changes nothing.
    pub fn on_symbols(&mut self, symbols: usize, errors: usize) {
        if symbols == 0 {
            return;
        }
        let errors = errors.min(symbols);
        let ber = [self.fit.ber(0), self.fit.ber(1)];
        let like = ber.map(|b| ln_binomial_pmf(symbols, b, errors).exp());
        self.update(like, symbols as f64, |_| errors as f64);
        self.choose();
    }

    /// Replaces the rungs (their number may change); the fit is kept and
    /// the current rung is clamped to the new ladder.
    pub fn set_rungs(&mut self, rungs: Vec<RungModel>) {
        assert!(!rungs.is_empty(), "a ladder needs at least one rung");
        self.rung = self.rung.min(rungs.len() - 1);
        self.rungs = rungs;
    }

    /// The forward step and the forgetting EM update for one observation:
    /// `like[s]` is its likelihood in state `s`, `symbols` its size and
    /// `errors(s)` its (expected) error count were the state `s`.
    fn update(&mut self, like: [f64; 2], symbols: f64, errors: impl Fn(usize) -> f64) {
        let (p, r) = (self.fit.p_gb(), self.fit.p_bg());
        let prev = [1.0 - self.bad, self.bad];
        let trans = [[1.0 - p, p], [r, 1.0 - r]];
        let mut joint = [[0.0; 2]; 2];
        let mut total = 0.0;
        for (from, row) in joint.iter_mut().enumerate() {
            for (to, cell) in row.iter_mut().enumerate() {
                *cell = prev[from] * trans[from][to] * like[to];
                total += *cell;
            }
        }
        if !(total > 0.0 && total.is_finite()) {
            // Nothing explains the observation (an extreme count under the
            // fit): trust the errors, take it as Bad.
            joint = [[0.0, prev[0]], [0.0, prev[1]]];
            total = 1.0;
        }
        let lambda = self.config.forget;
        let f = &mut self.fit;
        for (counts, seen) in f.trans.iter_mut().zip(&joint) {
            for (count, j) in counts.iter_mut().zip(seen) {
                *count = lambda * *count + j / total;
            }
        }
        let post_bad = (joint[0][1] + joint[1][1]) / total;
        let post = [1.0 - post_bad, post_bad];
        for (s, weight) in post.into_iter().enumerate() {
            f.bits[s] = lambda * f.bits[s] + weight * symbols;
            f.errors[s] = lambda * f.errors[s] + weight * errors(s);
        }
        // Keep Bad the noisier state.
        let mut bad = post_bad;
        if f.ber(0) > f.ber(1) {
            f.trans = [
                [f.trans[1][1], f.trans[1][0]],
                [f.trans[0][1], f.trans[0][0]],
            ];
            f.bits.swap(0, 1);
            f.errors.swap(0, 1);
            bad = 1.0 - bad;
        }
        self.bad = bad;
    }

    /// Picks the rung with the best expected goodput over the horizon.
    fn choose(&mut self) {
        let f = &self.fit;
        let bad = self.bad;
        // The Bad share averaged over the horizon.
        let (p, r) = (f.p_gb(), f.p_bg());
        let pi = p / (p + r);
        let l = 1.0 - p - r;
        let h = f64::from(self.config.horizon);
        let decay = if (1.0 - l).abs() < 1e-12 {
            1.0
        } else {
            l * (1.0 - l.powf(h)) / (h * (1.0 - l))
        };
        let mean_bad = (pi + (bad - pi) * decay).clamp(0.0, 1.0);
        let best = (0..self.rungs.len())
            .map(|i| (i, self.expected_goodput(&self.rungs[i], mean_bad)))
            .fold((0, f64::NEG_INFINITY), |acc, (i, g)| {
                if g > acc.1 + 1e-12 { (i, g) } else { acc }
            })
            .0;
        if best != self.rung {
            self.rung = best;
            self.switches += 1;
            self.lost_run = 0;
        }
    }
}

impl LadderController for PredictiveLadder {
    fn on_frame(&mut self, outcome: FrameOutcome) {
        let model = self.rungs[self.rung].clone();
        let bits = model.frame_bits().max(1);
        let ber = [self.fit.ber(0), self.fit.ber(1)];
        // Likelihood of what was seen, per state.
        let like = ber.map(|b| match (outcome.lost, outcome.corrected_bits) {
            (false, Some(n)) => ln_binomial_pmf(bits, b, n as usize).exp(),
            (false, None) => 1.0 - model.frame_loss(b),
            (true, _) => model.frame_loss(b),
        });
        self.update(like, bits as f64, |s| {
            match (outcome.lost, outcome.corrected_bits) {
                (false, Some(n)) => f64::from(n),
                (false, None) => model.expected_errors(ber[s]).0,
                // Lost: the count a lost frame has on average at this state's
                // rate (counting only survivors would bias the fit low).
                (true, _) => model.expected_errors(ber[s]).1,
            }
        });
        // A lost frame says only "at least this bad"; its imputed count
        // moves the fit slowly when the fit is far too optimistic, and a
        // transport that stalls on losses (TCP backing off) then sends too
        // few frames to learn from. So after a run of losses on one rung
        // that the fit makes unlikely (under 1 in 1000), the Bad-state rate
        // is lifted to where that rung loses half its frames (bisection on
        // the rung's loss curve).
        self.lost_run = if outcome.lost { self.lost_run + 1 } else { 0 };
        let f = &mut self.fit;
        let expected_loss = model.frame_loss(f.ber(1));
        let surprising = expected_loss.powi(LOST_RUN_FLOOR as i32) < 1e-3;
        if self.lost_run >= LOST_RUN_FLOOR && surprising {
            let (mut lo, mut hi) = (0.0f64, 0.5f64);
            for _ in 0..40 {
                let mid = (lo + hi) / 2.0;
                if model.frame_loss(mid) < 0.5 {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            if f.ber(1) < hi {
                f.errors[1] = hi * f.bits[1];
            }
            self.bad = self.bad.max(0.5);
        }
        self.choose();
    }

    fn rung(&self) -> usize {
        self.rung
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(c: &mut ThresholdLadder, pattern: &str) {
        for ch in pattern.chars() {
            c.on_frame(if ch == 'x' {
                FrameOutcome::LOST
            } else {
                FrameOutcome::CLEAN
            });
        }
    }

    #[test]
    fn two_losses_in_ten_climb_one_rung_and_restart_the_window() {
        let mut c = ThresholdLadder::new(4, ThresholdConfig::default());
        feed(&mut c, "x........");
        assert_eq!(c.rung(), 0, "one loss in the window: stay");
        feed(&mut c, "x");
        assert_eq!(c.rung(), 1, "second loss within ten frames: climb");
        // The window restarted: one more loss alone does not climb again.
        feed(&mut c, "x");
        assert_eq!(c.rung(), 1);
        feed(&mut c, "x");
        assert_eq!(c.rung(), 2);
        feed(&mut c, "xx");
        assert_eq!(c.rung(), 3);
        feed(&mut c, "xxxxxxxx");
        assert_eq!(c.rung(), 3, "the top rung is the ceiling");
    }

    #[test]
    fn losses_further_apart_than_the_window_do_not_climb() {
        let mut c = ThresholdLadder::new(4, ThresholdConfig::default());
        feed(&mut c, "x.........x.........x.........x");
        assert_eq!(c.rung(), 0);
        assert_eq!(c.switches(), 0);
    }

    #[test]
    fn a_clean_window_steps_down_and_one_error_holds() {
        let mut c = ThresholdLadder::new(3, ThresholdConfig::default());
        feed(&mut c, "xxxx");
        assert_eq!(c.rung(), 2);
        feed(&mut c, ".........");
        assert_eq!(c.rung(), 2, "nine frames are not a window");
        feed(&mut c, ".");
        assert_eq!(c.rung(), 1);
        feed(&mut c, "....x.........");
        assert_eq!(c.rung(), 1, "one error among the last ten holds the rung");
        feed(&mut c, "......");
        assert_eq!(c.rung(), 0, "ten clean frames step down");
        feed(&mut c, "....................");
        assert_eq!(c.rung(), 0, "rung 0 is the floor");
    }

    #[test]
    fn bad_configurations_are_named() {
        for (config, word) in [
            (
                ThresholdConfig {
                    window: 0,
                    ..Default::default()
                },
                "window",
            ),
            (
                ThresholdConfig {
                    window: 65,
                    ..Default::default()
                },
                "window",
            ),
            (
                ThresholdConfig {
                    up: 11,
                    ..Default::default()
                },
                "up",
            ),
            (
                ThresholdConfig {
                    down: 2,
                    ..Default::default()
                },
                "down",
            ),
        ] {
            assert!(config.validate().unwrap_err().contains(word), "{config:?}");
        }
        ThresholdLadder::new(
            1,
            ThresholdConfig {
                window: 64,
                up: 64,
                down: 63,
            },
        );
    }

    /// Rungs like Miyoshi et al.'s on an 800-bit frame: no FEC, then
    /// codes correcting 5 and 10 bits per 127-bit codeword.
    fn rungs() -> Vec<RungModel> {
        let coded = |k: usize, t: usize| RungModel {
            efficiency: k as f64 / 127.0,
            codewords: vec![(127, t); 7],
        };
        vec![RungModel::uncoded(800), coded(92, 5), coded(64, 10)]
    }

    #[test]
    fn rung_models_compute_frame_loss() {
        let r = rungs();
        assert!((r[0].frame_loss(1e-3) - (1.0 - 0.999f64.powi(800))).abs() < 1e-12);
        assert!(r[1].frame_loss(1e-3) < 1e-6);
        assert!(r[2].frame_loss(0.03) < r[1].frame_loss(0.03));
        assert_eq!(r[1].frame_bits(), 889);
        assert!((binomial_cdf(3, 0.5, 1) - 0.5).abs() < 1e-12);
        assert!((binomial_cdf(127, 0.01, 127) - 1.0).abs() < 1e-12);
        let direct: f64 = [1.0, 10.0, 45.0]
            .iter()
            .enumerate()
            .map(|(i, c)| c * 0.1f64.powi(i as i32) * 0.9f64.powi(10 - i as i32))
            .sum();
        assert!((binomial_cdf(10, 0.1, 2) - direct).abs() < 1e-12);
    }

    /// On a steady channel the choice follows the bit error rate: no FEC
    /// when it is clean, a code when it is noisy, the stronger code when
    /// the weaker one fails.
    #[test]
    fn the_predictive_rule_picks_the_code_the_bit_error_rate_needs() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        for (ber, want) in [(1e-6, 0), (2e-3, 1), (0.035, 2)] {
            let mut c = PredictiveLadder::new(rungs(), PredictiveConfig::default());
            let mut at = [0u32; 3];
            for n in 0..5000 {
                let model = &c.rungs[c.rung()].clone();
                let mut lost = false;
                let mut corrected = 0;
                for &(len, t) in &model.codewords {
                    let e = (0..len).filter(|_| rng.random_bool(ber)).count();
                    if e > t {
                        lost = true;
                    } else {
                        corrected += e as u32;
                    }
                }
                if n >= 4000 {
                    at[c.rung()] += 1;
                }
                c.on_frame(FrameOutcome {
                    lost,
                    corrected_bits: (!lost && c.rung() > 0).then_some(corrected),
                });
            }
            assert!(
                at[want] > 900,
                "BER {ber}: rungs used {at:?}, fit {:?}",
                c.fitted()
            );
        }
    }

    /// Losses only (a transport that backs off sends few frames): a run of
    /// losses the fit cannot explain lifts it, so the switch climbs to the
    /// rung that survives within a handful of frames.
    #[test]
    fn a_run_of_unexplained_losses_climbs_quickly() {
        let mut c = PredictiveLadder::new(rungs(), PredictiveConfig::default());
        let mut frames = 0;
        while c.rung() < 2 && frames < 100 {
            c.on_frame(FrameOutcome::LOST);
            frames += 1;
        }
        assert_eq!(c.rung(), 2, "after {frames} losses, fit {:?}", c.fitted());
        assert!(frames <= 12, "{frames} frames to climb");
    }

    proptest::proptest! {
        /// Whatever the receiver reports (a hostile or broken peer
        /// included: counts beyond the frame, losses on every frame, long
        /// clean runs), both switches stay on a rung of the ladder and the
        /// predictive fit stays finite.
        #[test]
        fn any_report_sequence_keeps_the_switches_sane(
            reports in proptest::collection::vec(
                (proptest::bool::ANY, proptest::option::of(proptest::num::u32::ANY)),
                0..400,
            ),
        ) {
            let mut p = PredictiveLadder::new(rungs(), PredictiveConfig::default());
            let mut t = ThresholdLadder::new(3, ThresholdConfig::default());
            for (lost, corrected_bits) in reports {
                let o = FrameOutcome { lost, corrected_bits };
                p.on_frame(o);
                t.on_frame(o);
                proptest::prop_assert!(p.rung() < 3 && t.rung() < 3);
                let (a, b, g, e) = p.fitted();
                proptest::prop_assert!([a, b, g, e, p.p_bad()].iter().all(|x| x.is_finite()));
            }
        }
    }
}
