//! A two-state (Gilbert) loss chain fitted from loss runs with decaying
//! counts, twice: one fit that forgets slowly and one that forgets fast.
//!
//! Shared by the tunnel's target controller ([`super::target`], which
//! reads the runs from the block-FEC report,
//! [`crate::wire::block::LossRuns`]) and the session's resource monitor
//! ([`crate::session::monitor`], which reads them from its own report).
//!
//! For Gilbert's chain (the Bad state loses every packet, the Good state
//! none) the states are seen: a loss is Bad. Then
//! `p = P(Good → Bad) ≈ runs / received` and
//! `r = P(Bad → Good) ≈ runs / lost` are the maximum-likelihood estimates
//! (each run of losses begins with one Good → Bad step out of a received
//! packet, and ends with one Bad → Good step out of a lost one), and the
//! mean burst is `lost / runs = 1 / r`. The counts decay with a half-life
//! so the fit follows a channel that changes; [`TwoFits`] keeps two
//! half-lives so that a worsening channel is seen within the short one
//! while an improving one is trusted only after the long one (a user of
//! both takes the worse of the two, as the target controller and the
//! monitor do).

use std::time::Duration;

/// A two-state Markov loss chain: per packet one transition, then the
/// packet is lost with its new state's loss probability (the convention of
/// `groupwire-link`'s Gilbert-Elliott model).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TwoState {
    /// `P(Good → Bad)` per packet.
    pub p: f64,
    /// `P(Bad → Good)` per packet.
    pub r: f64,
    /// Loss probability in Good.
    pub loss_good: f64,
    /// Loss probability in Bad.
    pub loss_bad: f64,
}

impl TwoState {
    /// Gilbert's chain: Good loses nothing, Bad everything.
    pub fn gilbert(p: f64, r: f64) -> Self {
        Self {
            p,
            r,
            loss_good: 0.0,
            loss_bad: 1.0,
        }
    }

    /// The long-run share of time in Bad.
    pub fn p_bad(&self) -> f64 {
        if self.p + self.r <= 0.0 {
            0.0
        } else {
            self.p / (self.p + self.r)
        }
    }

    /// The long-run loss rate.
    pub fn loss_rate(&self) -> f64 {
        let b = self.p_bad();
        (1.0 - b) * self.loss_good + b * self.loss_bad
    }
}

/// Decayed counts of one fit: packets received, packets lost, and loss
/// runs begun.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RunCounts {
    /// Packets received (decayed).
    pub received: f64,
    /// Packets lost (decayed).
    pub lost: f64,
    /// Runs of consecutive losses begun (decayed).
    pub runs: f64,
}

impl RunCounts {
    /// Nothing counted.
    pub const ZERO: Self = Self {
        received: 0.0,
        lost: 0.0,
        runs: 0.0,
    };

    /// Multiplies every count by `w` (the weight left after a decay).
    pub fn decay(&mut self, w: f64) {
        self.received *= w;
        self.lost *= w;
        self.runs *= w;
    }

    /// Adds one interval's counts. A count may fall (RFC 3550's lost
    /// does when late packets fill gaps) but not below zero.
    pub fn add(&mut self, received: f64, lost: f64, runs: f64) {
        self.received = (self.received + received).max(0.0);
        self.lost = (self.lost + lost).max(0.0);
        self.runs = (self.runs + runs).max(0.0);
    }

    /// Packets the counts rest on: received and lost.
    pub fn samples(&self) -> f64 {
        self.received + self.lost
    }

    /// Share of the packets lost (0 with nothing counted).
    pub fn loss_rate(&self) -> f64 {
        let n = self.samples();
        if n > 0.0 { self.lost / n } else { 0.0 }
    }

    /// Gilbert's chain of these counts (see the [module docs](self)):
    /// `p = runs / received`, `r = runs / lost`. With losses but no run
    /// closed yet, a thousandth of a run stands in (one long burst); with
    /// no losses `r` is 1.
    pub fn model(&self) -> TwoState {
        let runs = self.runs.max(if self.lost > 0.0 { 1e-3 } else { 0.0 });
        let p = (runs / self.received.max(1.0)).clamp(0.0, 1.0);
        let r = if self.lost > 0.0 {
            (runs / self.lost).clamp(1e-6, 1.0)
        } else {
            1.0
        };
        TwoState::gilbert(p, r)
    }
}

/// The weight counts keep after `elapsed` at half-life `half_life`:
/// `0.5^(elapsed / half_life)` (a zero half-life forgets everything).
pub fn decay_weight(elapsed: Duration, half_life: Duration) -> f64 {
    0.5f64.powf(elapsed.as_secs_f64() / half_life.as_secs_f64().max(1e-9))
}

/// The same counts kept at two half-lives (see the [module docs](self)).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TwoFits {
    slow: RunCounts,
    fast: RunCounts,
    half_life: Duration,
    fast_half_life: Duration,
}

impl TwoFits {
    /// Both fits start at `prior`; the slow one forgets with `half_life`,
    /// the fast one with `fast_half_life`.
    pub fn new(prior: RunCounts, half_life: Duration, fast_half_life: Duration) -> Self {
        Self {
            slow: prior,
            fast: prior,
            half_life,
            fast_half_life,
        }
    }

    /// Fits that continue others' counts (`slow`, `fast`), for a fit of a
    /// path another user of it has measured.
    pub fn resume(
        slow: RunCounts,
        fast: RunCounts,
        half_life: Duration,
        fast_half_life: Duration,
    ) -> Self {
        Self {
            slow,
            fast,
            half_life,
            fast_half_life,
        }
    }

    /// `elapsed` has passed since the previous interval (both fits decay),
    /// and this interval's counts arrive.
    pub fn add(&mut self, elapsed: Duration, received: f64, lost: f64, runs: f64) {
        for (c, half) in [
            (&mut self.slow, self.half_life),
            (&mut self.fast, self.fast_half_life),
        ] {
            c.decay(decay_weight(elapsed, half));
            c.add(received, lost, runs);
        }
    }

    /// The slow fit's counts.
    pub fn slow(&self) -> RunCounts {
        self.slow
    }

    /// The fast fit's counts.
    pub fn fast(&self) -> RunCounts {
        self.fast
    }

    /// Both chains: slow first.
    pub fn models(&self) -> [TwoState; 2] {
        [self.slow.model(), self.fast.model()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_give_the_chain_they_describe() {
        // 1000 received, 40 lost in 10 runs: p = 0.01, r = 0.25.
        let c = RunCounts {
            received: 1000.0,
            lost: 40.0,
            runs: 10.0,
        };
        let m = c.model();
        assert_eq!((m.p, m.r), (0.01, 0.25));
        assert!((c.loss_rate() - 40.0 / 1040.0).abs() < 1e-15);
        assert_eq!(RunCounts::ZERO.model(), TwoState::gilbert(0.0, 1.0));
        assert_eq!(RunCounts::ZERO.loss_rate(), 0.0);
    }

    #[test]
    fn the_fast_fit_forgets_first() {
        let s = Duration::from_secs(1);
        let mut f = TwoFits::new(RunCounts::ZERO, 4 * s, s);
        f.add(Duration::ZERO, 100.0, 0.0, 0.0);
        f.add(2 * s, 0.0, 100.0, 1.0);
        // Slow: 100 · 2^-0.5 received; fast: 100 · 2^-2.
        assert!((f.slow().received - 100.0 * 0.5f64.sqrt()).abs() < 1e-9);
        assert!((f.fast().received - 25.0).abs() < 1e-9);
        assert!(f.fast().loss_rate() > f.slow().loss_rate());
        assert_eq!(decay_weight(s, s), 0.5);
    }
}
