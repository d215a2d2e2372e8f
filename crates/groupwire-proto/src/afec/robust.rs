//! The controller behind [`Step::Robust`](super::Step::Robust) (beyond the
//! paper; groupwire issue 15): the size a MER band needs, on any channel,
//! without overshoot.
//!
//! [`Step::Predictive`](super::Step::Predictive) replays the loss runs of
//! the last 4000 packets and aims at the band's middle corrected by the
//! measured MER, with the goal allowed down to 0. On a bursty channel that
//! overshoots: after start-up or a change of channel the window's MER is
//! far above the band, the goal drops to 0, and the smallest size with a
//! predicted MER of 0 is one more than the longest run seen (7-12), held
//! until the old runs leave the 4000 packets. This controller differs in
//! four ways:
//!
//! 1. **Recent runs count more.** A loss run's weight is `exp(-age/τ)`,
//!    age in packets since its last loss, `τ` the MER window in packets,
//!    so the estimate forgets at the rate the band is scored.
//! 2. **A change of channel is detected and the old one forgotten at
//!    once.** [`LossTracker`] runs two-sided CUSUM tests (Page 1954) on
//!    the two probabilities of a Gilbert channel: that a packet after a
//!    received one is lost (a run starts) and that one after a lost one is
//!    lost too (the run goes on). Each is a Bernoulli process on a Gilbert
//!    channel, so the log-likelihood ratio of the odds times (or divided
//!    by) [`ODDS`] is the textbook test. When one crosses [`THRESHOLD`],
//!    the estimate uses only the packets since the excursion began.
//! 3. **Few packets are shrunk toward a fitted model.** The replayed
//!    MER(k) is averaged with a Gilbert model of the same packets,
//!    `MER(k) = π c^(k-1)` (`c` the continuation probability, `π` the loss
//!    rate), weighted as [`PRIOR_PACKETS`] packets: right after start-up or
//!    a change, a run seen once neither sets the size nor is ignored.
//! 4. **The goal steers the window, within bounds.** A 1000-message
//!    window's MER spreads wider than a band 1% wide at any fixed size, so
//!    the goal is what brings the window itself back to a point up the
//!    band (as high as the window's measured spread allows: [`Spread`])
//!    within [`HORIZON`] messages, from the losses it holds and those
//!    about to leave it ([`window_goal`]), asked again every [`GATE`]
//!    messages; never below half the band's floor (nor above its top plus
//!    its width): the size is never more than the measured loss process
//!    needs for half the band's floor, and errors from before the first
//!    request (start-up, when nothing controlled the size) are not paid
//!    back.

use super::mer::MerWindow;
use super::predictor::{solve_size, to_wire};

/// Odds ratio of the CUSUM alternatives: the tests look for a probability
/// whose odds are this many times higher (or lower) than the reference.
/// 8 makes a burst or two of five losses on a channel that had only
/// isolated losses enough to cross the threshold.
const ODDS: f64 = 8.0;

/// CUSUM decision threshold (log-likelihood ratio): a false alarm on a
/// steady channel needs about e^25 times more evidence for the alternative
/// than for the reference. At 7, 25% random loss raised one every few
/// thousand packets, and each cuts the estimate's memory short; at 10 the
/// bad spells of a steady Gilbert-Elliott channel (50% loss for about ten
/// packets) still read as changes, and the few packets after each asked
/// for sizes of 5-9 where 2-4 meet the band. Since the window tracking
/// ([`window_goal`]) the exponential forgetting follows a real change
/// fast enough without a cut: on `robustness-afec` (3 seeds) 25 gave
/// overshoot in 21 cells where 10 gave it in 27, and as many cells in band.
const THRESHOLD: f64 = 25.0;

/// Trials that make a reference probability: older ones are forgotten
/// exponentially beyond this many.
const MEMORY: f64 = 2000.0;

/// Pseudo-trials at the run-start probability that the continuation
/// probability starts from (a memoryless channel's), so a channel with
/// few losses is tested from its first runs.
const CONT_PRIOR: f64 = 10.0;

/// Trials a reference needs before it is tested against: packets after a
/// received one, and after a lost one (a run's continuations, rarer).
const TEST_TRIALS_START: f64 = 100.0;
const TEST_TRIALS_CONT: f64 = 10.0;

/// Weight, in packets, of the Gilbert model in the MER(k) estimate.
pub(super) const PRIOR_PACKETS: f64 = 100.0;

/// Fewest packets of the current regime before a size is predicted: at
/// 40, one run of 15 in the first packets of a 10% Gilbert channel with
/// bursts of 5 asked for 3.25 where 1 meets a 10-12% band; 150 packets
/// (5 s at 30 messages/s) hold several runs.
const MIN_PACKETS: usize = 150;

/// Standard errors above the fitted Gilbert channel for the size cap: a
/// size is never above what that pessimistic channel needs for the goal's
/// floor. At 2 the cap let a 25% random channel ask for 5 where 4 gives
/// half a 1-2% band's floor; 1 keeps one long run in a short sample from
/// setting the size all the same (`robustness-afec`, 6 seeds).
const CAP_Z: f64 = 1.0;

/// Where in the band the window's MER is steered until its spread is
/// known ([`Spread`]), as a share of the band's width above its floor. The
/// middle (0.5) would leave the most room either way; a little above it
/// buys back latency and bytes (every message
/// recovered instead of lost waits for the packet that carries its copy),
/// and the window tracking below keeps the spread narrow enough that the
/// top is rarely crossed. Chosen on `groupwire sim run robustness-afec`
/// (0.5, 0.55, 0.6 and 0.7 tried, 6 seeds: 0.6 met every goal in the most
/// cells).
pub(super) const AIM: f64 = 0.6;

/// Standard deviations of the window's MER kept under the band's top:
/// [`Spread::aim`] steers to `top - SPREAD_Z·σ`, so about one window in
/// forty crosses the top if the spread is normal.
const SPREAD_Z: f64 = 2.0;

/// The aim's range, as shares of the band's width above its floor: never
/// under the middle (a spread wider than a quarter of the band is the
/// channel's, and aiming lower only buys latency and bytes), never over
/// four fifths (the window is judged after the fact).
const AIM_MIN: f64 = 0.5;
const AIM_MAX: f64 = 0.8;

/// Messages between two samples of the spread, samples it is learnt over
/// (an exponentially weighted mean: about a window's worth), and samples
/// before it replaces [`AIM`].
const SPREAD_EVERY: u32 = 10;
const SPREAD_SAMPLES: f64 = 100.0;
const SPREAD_MIN_SAMPLES: f64 = 20.0;

/// The spread of one type's MER window around the aim it is steered to,
/// and the aim that spread allows (beyond the paper). On a random channel
/// the steered window varies by much less than a 1% band, and a fixed aim
/// of [`AIM`] spends redundancy, latency and bytes it need not; on a
/// bursty one it can vary by more than the band, and the middle leaves the
/// most room. So the aim is `SPREAD_Z` standard deviations of the measured
/// window under the top, within [`AIM_MIN`, `AIM_MAX`] of the band; until
/// a full window of controlled messages has been sampled, [`AIM`].
/// `groupwire sim run robustness-afec --set seeds=6 --set
/// 'controllers=["afec-robust"]'`: cells in band in 85% of windows 15 -> 19
/// of 44 against the fixed aim.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Spread {
    /// Mean squared deviation of the window's MER from the aim.
    var: f64,
    /// Samples in `var` (capped at [`SPREAD_SAMPLES`]).
    n: f64,
    /// The window's end at the last sample.
    at: Option<u32>,
    /// The aim last returned.
    aim: Option<f64>,
}

impl Spread {
    /// The MER to steer the window `w` of `window` messages to, `span` of
    /// them controlled, for a band `[min, max]`; samples the spread first.
    pub(super) fn aim(
        &mut self,
        w: &MerWindow,
        span: usize,
        window: usize,
        min: f64,
        max: f64,
    ) -> f64 {
        let width = max - min;
        let end = w.end();
        if span >= window && self.at.is_none_or(|a| end.wrapping_sub(a) >= SPREAD_EVERY) {
            if let Some(a) = self.aim {
                let d = w.mer() - a;
                self.n = (self.n + 1.0).min(SPREAD_SAMPLES);
                self.var += (d * d - self.var) / self.n;
            }
            self.at = Some(end);
        }
        let share = if self.n >= SPREAD_MIN_SAMPLES && width > 0.0 {
            ((max - SPREAD_Z * self.var.sqrt() - min) / width).clamp(AIM_MIN, AIM_MAX)
        } else {
            AIM
        };
        let aim = min + share * width;
        self.aim = Some(aim);
        aim
    }
}

/// Messages a type must have received since the last request before the
/// robust controller asks again. The paper's gate (200 messages, which the
/// other controllers keep) lets a whole-size step show in the MER; this
/// controller predicts from the loss runs, not from the MER, so it can
/// steer every few messages, which is what keeps a 1000-message window in
/// a band 1% wide.
pub(super) const GATE: u32 = 10;

/// Messages over which [`window_goal`] brings the MER window back to the
/// aim: a fifth of the paper's 1000-message window (100, 150, 200 and 250
/// tried; shorter swings the size more, longer lets a window drift out of
/// the band before it is corrected).
const HORIZON: usize = 200;

/// The MER the next [`HORIZON`] messages should have so the window of the
/// last `window` messages is at `aim` after them (beyond the paper; issue
/// 15's "MER inside the band in 85% of windows").
///
/// A band 1% wide is narrower than the spread of a 1000-message window's
/// MER at any fixed size (about ±0.7% at 5%, binomially), so a controller
/// that only aims the long-run MER at the band holds it in barely more
/// than half the windows, as the cheapest fixed size does. This one steers
/// the window itself, deadbeat: the window now holds `E` losses; over the
/// next `H` messages the oldest `H` leave it, with `D` losses the receiver
/// already knows, and `H` new ones enter at the goal `g`, so
/// `E - D + g·H = aim·window` gives `g`. Messages from before the
/// controller first acted (`span` counts those since) are taken as at the
/// aim: start-up is not paid back. The caller clamps `g` to what the
/// loss process can give without overshoot.
pub(super) fn window_goal(w: &MerWindow, span: usize, window: usize, aim: f64) -> f64 {
    let span = span.min(window);
    // Until the window holds only controlled messages, the correction is
    // spread over the messages that complete it: start-up's few packets
    // neither set a size far from what the channel needs nor are paid back
    // within a fifth of a window.
    let h = HORIZON.max(window - span).clamp(1, window.max(1));
    let errs = w.recent_lost(span) as f64;
    // The window as it will be: `window - span` messages at the aim, then
    // the `span` measured ones.
    let assumed = window - span;
    let held = errs + aim * assumed as f64;
    let leave_assumed = assumed.min(h);
    let leave_measured = h - leave_assumed;
    let measured_gone = errs - w.recent_lost(span.saturating_sub(leave_measured)) as f64;
    let departs = aim * leave_assumed as f64 + measured_gone;
    (aim * window as f64 - held + departs) / h as f64
}

/// A probability learnt as an exponentially weighted mean of trials.
#[derive(Debug, Default, Clone, Copy)]
struct Rate {
    mean: f64,
    n: f64,
}

impl Rate {
    fn add(&mut self, x: bool) {
        self.n = (self.n + 1.0).min(MEMORY);
        self.mean += (f64::from(u8::from(x)) - self.mean) / self.n;
    }
}

/// One side of a CUSUM test: the statistic and the packet where its
/// current excursion above zero began.
#[derive(Debug, Default, Clone, Copy)]
struct Cusum {
    s: f64,
    began: u32,
}

impl Cusum {
    /// Adds one trial's log-likelihood ratio; `true` when the test fires.
    fn add(&mut self, llr: f64, at: u32) -> bool {
        if self.s <= 0.0 {
            self.began = at;
        }
        self.s = (self.s + llr).max(0.0);
        self.s > THRESHOLD
    }
}

/// Per remote sender: a Gilbert fit of its packet-loss process and the
/// change test on it (see the module docs).
#[derive(Debug, Default)]
pub(super) struct LossTracker {
    /// Next packet index to scan.
    next: Option<u32>,
    /// Whether the last packet scanned was lost.
    prev_lost: bool,
    /// Probability that a packet after a received one is lost.
    start: Rate,
    /// Probability that a packet after a lost one is lost.
    cont: Rate,
    /// Up and down tests on `start`, then on `cont`.
    tests: [Cusum; 4],
    /// First packet of the current loss regime (since the last change).
    pub(super) regime: Option<u32>,
    /// Changes detected so far.
    pub(super) changes: u32,
}

impl LossTracker {
    /// Scans the packets `packets` learnt since the last call.
    pub(super) fn scan(&mut self, packets: &MerWindow) {
        let end = packets.end();
        let mut at = self
            .next
            .unwrap_or_else(|| packets.end().wrapping_sub(packets.len() as u32));
        if self.regime.is_none() {
            self.regime = Some(at);
        }
        'rescan: loop {
            let outcomes: Vec<bool> = packets.since(at).collect();
            at = end.wrapping_sub(outcomes.len() as u32);
            for lost in outcomes {
                let i = at;
                at = at.wrapping_add(1);
                let tests = if self.prev_lost { 2 } else { 0 };
                // The reference, kept off 0 and 1 so every outcome is possible.
                let p0 = if self.prev_lost {
                    (self.cont.n * self.cont.mean + CONT_PRIOR * self.start.mean)
                        / (self.cont.n + CONT_PRIOR)
                } else {
                    self.start.mean
                }
                .clamp(0.002, 0.998);
                if self.prev_lost {
                    self.cont.add(lost);
                } else {
                    self.start.add(lost);
                }
                self.prev_lost = lost;
                // Test only against references learnt from enough trials
                // (also after a change, so one change does not beget the next).
                let learnt = if tests == 2 {
                    self.cont.n >= TEST_TRIALS_CONT
                } else {
                    self.start.n >= TEST_TRIALS_START
                };
                if !learnt {
                    continue;
                }
                let odds = p0 / (1.0 - p0);
                let up = odds * ODDS / (1.0 + odds * ODDS);
                let down = odds / ODDS / (1.0 + odds / ODDS);
                let llr = |p1: f64| {
                    if lost {
                        (p1 / p0).ln()
                    } else {
                        ((1.0 - p1) / (1.0 - p0)).ln()
                    }
                };
                let fired_up = self.tests[tests].add(llr(up), i);
                let fired_down = self.tests[tests + 1].add(llr(down), i);
                if fired_up || fired_down {
                    let began = self.tests[tests + usize::from(!fired_up)].began;
                    self.changes += 1;
                    self.regime = Some(began);
                    self.start = Rate::default();
                    self.cont = Rate::default();
                    self.tests = [Cusum::default(); 4];
                    self.prev_lost = false;
                    // Learn the new regime from where it began.
                    at = began;
                    continue 'rescan;
                }
            }
            break;
        }
        self.next = Some(end);
    }

    /// The fitted Gilbert channel: loss rate and continuation probability.
    fn gilbert(&self) -> (f64, f64) {
        self.gilbert_bound(0.0)
    }

    /// The Gilbert channel with both probabilities `z` standard errors
    /// above their estimates (`z = 0`: the fit itself).
    fn gilbert_bound(&self, z: f64) -> (f64, f64) {
        let up = |m: f64, n: f64| (m + z * (m * (1.0 - m) / n.max(1.0)).sqrt()).min(0.999);
        let p = up(self.start.mean, self.start.n);
        let c = up(
            (self.cont.n * self.cont.mean + CONT_PRIOR * self.start.mean)
                / (self.cont.n + CONT_PRIOR),
            self.cont.n + CONT_PRIOR,
        );
        let pi = if p <= 0.0 { 0.0 } else { p / (p + 1.0 - c) };
        (pi, c)
    }
}

/// Whether the current regime has packets enough for [`robust_size`].
pub(super) fn robust_ready(packets: &MerWindow, tracker: &LossTracker) -> bool {
    regime_outcomes(packets, tracker).len() >= MIN_PACKETS
}

fn regime_outcomes(packets: &MerWindow, tracker: &LossTracker) -> Vec<bool> {
    let from = tracker
        .regime
        .unwrap_or_else(|| packets.end().wrapping_sub(packets.len() as u32));
    packets.since(from).collect()
}

/// The smallest code set size whose MER, estimated from the packets of the
/// current regime (see the module docs), is `goal`; `None` when the size
/// in force is estimated within `tolerance` of it, or the regime has too
/// few packets. `tau` is the forgetting constant in packets. The size is
/// capped by what the Gilbert fit, [`CAP_Z`] standard errors pessimistic,
/// needs for a MER of `floor`: one long run in a short sample does not
/// set the size.
#[expect(
    clippy::too_many_arguments,
    reason = "the controller's inputs, each named"
)]
pub(super) fn robust_size(
    packets: &MerWindow,
    tracker: &LossTracker,
    tau: f64,
    floor: f64,
    goal: f64,
    tolerance: f64,
    current: f64,
    cap: f64,
) -> Option<f64> {
    let outcomes = regime_outcomes(packets, tracker);
    let n = outcomes.len();
    if n < MIN_PACKETS {
        return None;
    }
    // Loss runs with the weight of their last packet, and the packets' weight.
    let weight = |i: usize| (-((n - 1 - i) as f64) / tau).exp();
    let mut runs: Vec<(u32, f64)> = Vec::new();
    let mut total = 0.0;
    let mut run = 0u32;
    for (i, &lost) in outcomes.iter().enumerate() {
        total += weight(i);
        if lost {
            run += 1;
        } else if run > 0 {
            runs.push((run, weight(i - 1)));
            run = 0;
        }
    }
    if run > 0 {
        runs.push((run, 1.0));
    }
    let (pi, c) = tracker.gilbert();
    //= dyck-gutwin §"AFEC for groupware", Sender (code set size)
    //# message loss only occurs when more than three packets are lost in a row
    // A run of L losses loses max(0, L - k + 1) messages sent k times.
    let mer = |k: u32| -> f64 {
        let replayed: f64 = runs
            .iter()
            .map(|&(l, w)| w * f64::from(l.saturating_sub(k - 1)))
            .sum();
        let model = pi * c.powi(k as i32 - 1);
        (replayed + PRIOR_PACKETS * model) / (total + PRIOR_PACKETS)
    };
    let size = solve_size(mer, goal, tolerance, current, cap)?;
    // The model's cap: MER(k) = π c^(k-1) for a MER of `floor`, at the
    // pessimistic fit, and never above the whole size the fit itself
    // needs (the size the measured process requires; on few packets the
    // pessimistic fit alone allowed 2.16 on a 10% random channel where 2
    // gives a 5-6% band's half floor).
    let size_for = |(pi, c): (f64, f64)| {
        if pi <= floor || c <= 0.0 {
            1.0
        } else {
            1.0 + (floor / pi).ln() / c.ln()
        }
    };
    let model_cap = size_for(tracker.gilbert_bound(CAP_Z)).min(size_for((pi, c)).ceil());
    to_wire(size.min(model_cap.max(1.0)), current, cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A window of `pattern` repeated to `n` packets (`true` = lost).
    fn window(pattern: &[bool], n: u32) -> MerWindow {
        let mut w = MerWindow::new(4000);
        for i in 0..n {
            if !pattern[i as usize % pattern.len()] {
                let _ = w.observe(i);
            }
        }
        let _ = w.observe(n);
        w
    }

    /// A window of `n` messages, lost where `lost(i)`.
    fn messages(n: u32, lost: impl Fn(u32) -> bool) -> MerWindow {
        let mut w = MerWindow::new(1000);
        for i in 0..n {
            if !lost(i) {
                let _ = w.observe(i);
            }
        }
        let _ = w.observe(n);
        w
    }

    #[test]
    fn window_goal_pays_back_the_window_and_counts_the_losses_about_to_leave() {
        let aim = 0.05;
        // A full window at the aim (one loss in 20): keep the aim.
        let w = messages(1000, |i| i % 20 == 7);
        let g = window_goal(&w, 1000, 1000, aim);
        assert!((g - aim).abs() < 1e-3, "goal {g}");
        // Twenty losses too many, spread evenly: the next 200 messages pay
        // them back (a tenth of the excess leaves with them).
        let w = messages(1000, |i| i % 20 == 7 || i % 50 == 3);
        let g = window_goal(&w, 1000, 1000, aim);
        let expect = (50.0 - 70.0 + 14.0) / 200.0;
        assert!((g - expect).abs() < 1e-3, "goal {g}, expected {expect}");
        // The same excess in the oldest 200 messages leaves on its own.
        let w = messages(1000, |i| i % 20 == 7 || (i < 200 && i % 10 == 3));
        let g = window_goal(&w, 1000, 1000, aim);
        assert!((g - aim).abs() < 1e-3, "goal {g}");
        // Losses before the controller acted are not paid back: 100
        // controlled messages at the aim, the rest taken as at the aim.
        let w = messages(1000, |i| i < 900 || i % 20 == 7);
        let g = window_goal(&w, 100, 1000, aim);
        assert!((g - aim).abs() < 1e-3, "goal {g}");
    }

    #[test]
    fn spread_aims_high_in_the_band_when_the_window_is_steady_and_at_the_middle_when_it_is_not() {
        let (min, max) = (0.05, 0.06);
        // Before a full window is sampled: the fixed aim.
        let mut s = Spread::default();
        let w = messages(500, |i| i % 18 == 0);
        assert!((s.aim(&w, 500, 1000, min, max) - (min + AIM * 0.01)).abs() < 1e-12);
        // A window that stays at 5.6% (one loss in 18, evenly): it deviates
        // from the aim only as far as the aim moves from it (here nothing
        // steers it), so the aim rises over the fixed one, and not past
        // four fifths.
        let mut s = Spread::default();
        let mut aim = 0.0;
        for n in (1000..2000).step_by(10) {
            let w = messages(n, |i| i % 18 == 0);
            aim = s.aim(&w, n as usize, 1000, min, max);
        }
        assert!(aim > min + AIM * 0.01 + 0.0005, "aim {aim}");
        assert!(aim <= min + AIM_MAX * 0.01 + 1e-12, "aim {aim}");
        // A window swinging between 3% and 9% (bursts of losses every 500
        // messages): the middle.
        let mut s = Spread::default();
        for n in (1000..3000).step_by(10) {
            let w = messages(n, |i| (i / 250) % 2 == 0 && i % 8 == 0);
            aim = s.aim(&w, n as usize, 1000, min, max);
        }
        assert!((aim - (min + AIM_MIN * 0.01)).abs() < 1e-9, "aim {aim}");
    }

    #[test]
    fn tracker_fits_the_run_start_and_continuation_probabilities() {
        // Every 20 packets a run of 4: starts 1 in 17 received, continues 3 in 4.
        let mut p = vec![false; 20];
        p[5..9].fill(true);
        let w = window(&p, 3000);
        let mut t = LossTracker::default();
        t.scan(&w);
        assert_eq!(t.changes, 0, "a steady channel is not a change");
        let (pi, c) = t.gilbert();
        assert!((pi - 0.2).abs() < 0.02, "loss rate {pi}");
        assert!((c - 0.75).abs() < 0.05, "continuation {c}");
    }

    #[test]
    fn tracker_detects_isolated_losses_turning_into_bursts() {
        let mut w = MerWindow::new(4000);
        // 2000 packets with one loss in 100, then runs of 5 in 40.
        let lost = |i: u32| {
            if i < 2000 { i % 100 == 50 } else { i % 40 < 5 }
        };
        let mut t = LossTracker::default();
        for i in 0..2400u32 {
            if !lost(i) {
                let _ = w.observe(i);
            }
            if i % 50 == 0 {
                t.scan(&w);
            }
        }
        t.scan(&w);
        assert!(t.changes >= 1);
        let regime = t.regime.expect("a regime");
        assert!((2000..2100).contains(&regime), "regime from {regime}");
        // The new regime's size: runs of 5 need size 5 for no loss, and
        // about 4 for a MER near 1%.
        let size = robust_size(&w, &t, 1000.0, 0.005, 0.015, 0.0, 1.0, 16.0).expect("a size");
        assert!((3.0..=5.5).contains(&size), "size {size}");
    }
}
