//! The two-state (Good/Bad) Markov chain behind the Gilbert,
//! Gilbert-Elliott and bit-error models: the biased coin and the chain a
//! running process steps, and the chain's analytic figures.

use groupwire_units::Probability;
use rand::Rng;

/// A biased coin. Certain outcomes draw no random number, so a Gilbert
/// chain with `p = 0` or a loss-free state costs nothing.
#[derive(Debug, Clone, Copy)]
pub(super) enum Chance {
    Never,
    Always,
    /// True when a uniform `u64` is below this (probability `t / 2^64`, as
    /// in `rand::distr::Bernoulli`).
    Below(u64),
}

impl Chance {
    pub(super) fn new(p: f64) -> Self {
        if p <= 0.0 {
            Self::Never
        } else if p >= 1.0 {
            Self::Always
        } else {
            // 2^64 as f64 is exact; `as` saturates should p * 2^64 round up to 2^64.
            Self::Below((p * 18_446_744_073_709_551_616.0) as u64)
        }
    }

    pub(super) fn sample<R: Rng + ?Sized>(self, rng: &mut R) -> bool {
        match self {
            Self::Never => false,
            Self::Always => true,
            Self::Below(t) => rng.next_u64() < t,
        }
    }
}

/// A two-state (Good/Bad) Markov chain stepped once per packet.
#[derive(Debug, Clone)]
pub(super) struct Chain {
    to_bad: Chance,
    to_good: Chance,
    bad: bool,
}

impl Chain {
    pub(super) fn new(p: Probability, r: Probability) -> Self {
        Self {
            to_bad: Chance::new(p.get()),
            to_good: Chance::new(r.get()),
            bad: false,
        }
    }

    /// Whether the chain is in Bad.
    pub(super) fn is_bad(&self) -> bool {
        self.bad
    }

    /// Puts the chain in Bad (`true`) or Good.
    pub(super) fn set_bad(&mut self, bad: bool) {
        self.bad = bad;
    }

    /// Makes one transition; returns whether the new state is Bad.
    pub(super) fn step<R: Rng + ?Sized>(&mut self, rng: &mut R) -> bool {
        self.bad = if self.bad {
            !self.to_good.sample(rng)
        } else {
            self.to_bad.sample(rng)
        };
        self.bad
    }
}

/// A two-state Markov-modulated loss process, for the analytic figures.
#[derive(Debug, Clone, Copy)]
pub(super) struct Markov2 {
    pub(super) p: f64,
    pub(super) r: f64,
    pub(super) h_good: f64,
    pub(super) h_bad: f64,
}

impl Markov2 {
    /// Stationary (π_G, π_B); a chain that never leaves Good stays there.
    pub(super) fn stationary(&self) -> [f64; 2] {
        let sum = self.p + self.r;
        let bad = if sum > 0.0 { self.p / sum } else { 0.0 };
        [1.0 - bad, bad]
    }

    /// `T[from][to]`, state 0 = Good, 1 = Bad.
    fn transitions(&self) -> [[f64; 2]; 2] {
        [[1.0 - self.p, self.p], [self.r, 1.0 - self.r]]
    }

    fn h(&self) -> [f64; 2] {
        [self.h_good, self.h_bad]
    }

    pub(super) fn loss_rate(&self) -> f64 {
        let pi = self.stationary();
        pi[0] * self.h_good + pi[1] * self.h_bad
    }

    /// `v_1(s)`: probability that packet n-1 is delivered, packet n is lost
    /// and the state at n is `s`.
    fn run_start(&self) -> [f64; 2] {
        let (pi, t, h) = (self.stationary(), self.transitions(), self.h());
        let mut v = [0.0; 2];
        for (s, vs) in v.iter_mut().enumerate() {
            *vs = (0..2)
                .map(|from| pi[from] * (1.0 - h[from]) * t[from][s])
                .sum::<f64>()
                * h[s];
        }
        v
    }

    pub(super) fn mean_run(&self) -> Option<f64> {
        let start: f64 = self.run_start().iter().sum();
        // Below this, runs essentially never start (no loss) or never end.
        if start <= f64::MIN_POSITIVE {
            return None;
        }
        Some(self.loss_rate() / start)
    }

    pub(super) fn run_pmf(&self, n: usize) -> Vec<f64> {
        let (t, h) = (self.transitions(), self.h());
        let mut v = self.run_start();
        let total: f64 = v.iter().sum();
        let mut out = Vec::with_capacity(n);
        let mut at_least = 1.0;
        for _ in 0..n {
            let next = [
                (v[0] * t[0][0] + v[1] * t[1][0]) * h[0],
                (v[0] * t[0][1] + v[1] * t[1][1]) * h[1],
            ];
            let at_least_next = (next[0] + next[1]) / total;
            out.push(at_least - at_least_next);
            at_least = at_least_next;
            v = next;
        }
        out
    }
}
