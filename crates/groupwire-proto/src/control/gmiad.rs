//! GMIAD, GENEVA's FEC window controller (Matsuzono et al., §3.2).
//!
//! The sender keeps a *total window* `Wtot`: the packets it has in flight
//! over one `ERTT + SYN` (eq. 1). Each SYN report moves it:
//! **multiplicatively up** by `i(Wtot)` once per lost packet (eq. 4) and
//! **additively down** by `b` once per delivered packet (eq. 5). The FEC
//! window `Fwnd` is what the new `Wtot` leaves after the `k` source packets
//! (eq. 3), kept in `[Fwnd_min, Fwnd_max]`.
//!
//! At equilibrium loss probability `p`, `i(W*) = b / p` (eq. 7); choosing
//! `W* = a / (pmax − p)` with `a = 2` (eq. 2) gives
//! `i(W) = b W / (pmax W − 2)` (eq. 8). Below `W = 73` that would exceed
//! the halving of a TCP window (Fig. 6), so `i` is the constant 10 there.
//!
//! ```
//! use std::time::Duration;
//! use groupwire_proto::Instant;
//! use groupwire_proto::control::{FecController, ReportSample, StreamShape};
//! use groupwire_proto::control::gmiad::{Gmiad, GmiadConfig};
//!
//! let mut g = Gmiad::new(GmiadConfig::default());
//! let shape = StreamShape { k: 25, syn: Duration::from_millis(10) };
//! let lossy = ReportSample { lost: 3, delivered: 30, rtt: Some(Duration::from_millis(10)), ..Default::default() };
//! g.on_report(Instant::ZERO, shape, &lossy);
//! assert!(g.fwnd() > 8);
//! ```

use std::time::Duration;

use super::{FecController, ReportSample, StreamShape};
use crate::time::Instant;

/// GMIAD's constants. Defaults are the paper's (§3.2.4).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GmiadConfig {
    /// Weight of the old estimate in `ERTT = α ERTT + (1 − α) SRTT`
    /// (§3.2.2; §3.2.4 sets 0.9 so `Wtot` follows loss, not RTT jitter).
    pub alpha: f64,
    /// Additive decrease per delivered packet, `b` (eq. 5; Fig. 6: 0.04).
    pub b: f64,
    /// Highest loss probability the flow tolerates, `pmax` (§3.2.4: 0.03).
    pub p_max: f64,
    /// Scale of the equilibrium window, `a` in eq. 2 (§3.2.3: 2).
    pub a: f64,
    /// Below this `Wtot`, `i` is the constant [`i_low`](Self::i_low)
    /// (text under Fig. 6: 73 for `b = 0.04`).
    pub w_low: f64,
    /// `i(Wtot)` below [`w_low`](Self::w_low) (text under Fig. 6: 10).
    pub i_low: f64,
    /// Smallest `Fwnd` (§3.2.4: 8).
    pub fwnd_min: usize,
    /// Largest `Fwnd` (§3.2.4: 60, to keep FEC delay under 150 ms).
    pub fwnd_max: usize,
    /// Most lost packets one report may count. Eq. 4 runs once per lost
    /// packet; a report claiming more (a hostile or corrupt peer) is
    /// clamped. Not in the paper.
    pub max_lost_per_report: u32,
}

impl Default for GmiadConfig {
    fn default() -> Self {
        Self {
            alpha: 0.9,
            b: 0.04,
            p_max: 0.03,
            a: 2.0,
            w_low: 73.0,
            i_low: 10.0,
            fwnd_min: 8,
            fwnd_max: 60,
            max_lost_per_report: 4096,
        }
    }
}

impl GmiadConfig {
    /// The increase `i(Wtot)` (eq. 8, and the constant below `w_low`).
    pub fn increase(&self, w: f64) -> f64 {
        let denom = self.p_max * w - self.a;
        if w < self.w_low || denom <= 0.0 {
            self.i_low
        } else {
            self.b * w / denom
        }
    }
}

/// The GMIAD controller.
#[derive(Clone, Debug)]
pub struct Gmiad {
    cfg: GmiadConfig,
    fwnd: usize,
    ertt: Option<Duration>,
    wtot: Option<f64>,
}

impl Gmiad {
    /// A controller starting at `Fwnd_min`.
    pub fn new(cfg: GmiadConfig) -> Self {
        Self {
            fwnd: cfg.fwnd_min,
            cfg,
            ertt: None,
            wtot: None,
        }
    }

    /// Its configuration.
    pub fn config(&self) -> &GmiadConfig {
        &self.cfg
    }
}

impl FecController for Gmiad {
    fn on_report(&mut self, _now: Instant, shape: StreamShape, report: &ReportSample) {
        let cfg = &self.cfg;
        // §3.2.2: ERTT = α ERTT + (1 − α) SRTT; the first sample seeds it.
        if let Some(srtt) = report.rtt {
            self.ertt = Some(match self.ertt {
                None => srtt,
                Some(e) => e.mul_f64(cfg.alpha) + srtt.mul_f64(1.0 - cfg.alpha),
            });
        }
        // Without an RTT there is no Wtot: hold Fwnd (as for a lost report).
        let Some(ertt) = self.ertt else { return };
        let syn = shape.syn.as_secs_f64();
        if syn <= 0.0 {
            return;
        }
        let span = ertt.as_secs_f64() + syn;
        let k = shape.k as f64;
        // Eq. 1: Wtot = (Fwnd + k) (ERTT + SYN) / SYN, from the window in force.
        let mut w = (self.fwnd as f64 + k) * span / syn;
        // Eq. 4, once per lost packet, before the decreases.
        for _ in 0..report.lost.min(cfg.max_lost_per_report) {
            w += cfg.increase(w);
        }
        // Eq. 5, once per delivered packet: Wtot -= b, i.e. b × delivered.
        w = (w - cfg.b * f64::from(report.delivered)).max(0.0);
        self.wtot = Some(w);
        // Eq. 3: Fwnd = ⌊Wtot SYN / (ERTT + SYN) − k⌋, within [min, max].
        let f = (w * syn / span - k).floor();
        self.fwnd = if f.is_nan() || f < cfg.fwnd_min as f64 {
            cfg.fwnd_min
        } else {
            (f as usize).min(cfg.fwnd_max)
        };
    }

    fn fwnd(&self) -> usize {
        self.fwnd
    }

    fn rtt_estimate(&self) -> Option<Duration> {
        self.ertt
    }

    fn total_window(&self) -> Option<f64> {
        self.wtot
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SYN: Duration = Duration::from_millis(10);

    fn shape(k: usize) -> StreamShape {
        StreamShape { k, syn: SYN }
    }

    fn report(lost: u32, delivered: u32, rtt_ms: u64) -> ReportSample {
        ReportSample {
            lost,
            delivered,
            rtt: Some(Duration::from_millis(rtt_ms)),
            ..ReportSample::default()
        }
    }

    #[test]
    fn increase_matches_eq_8_and_the_floor_below_73() {
        let c = GmiadConfig::default();
        assert_eq!(c.increase(10.0), 10.0);
        assert_eq!(c.increase(72.9), 10.0);
        // i(W) = bW / (pmax W − 2): at W = 100, 4 / 1 = 4.
        assert!((c.increase(100.0) - 4.0).abs() < 1e-12);
        // Fig. 6's range ends at W = 1700: i ≈ 1.38.
        let i = c.increase(1700.0);
        assert!((i - 0.04 * 1700.0 / (0.03 * 1700.0 - 2.0)).abs() < 1e-12);
        assert!(i > 1.3 && i < 1.4, "{i}");
    }

    #[test]
    fn holds_until_the_first_rtt_sample() {
        let mut g = Gmiad::new(GmiadConfig::default());
        let no_rtt = ReportSample {
            lost: 50,
            delivered: 0,
            rtt: None,
            ..ReportSample::default()
        };
        g.on_report(Instant::ZERO, shape(25), &no_rtt);
        assert_eq!(g.fwnd(), 8);
        assert_eq!(g.total_window(), None);
    }

    #[test]
    fn one_loss_at_10ms_rtt_worked_by_hand() {
        // k = 25, Fwnd = 8, ERTT = 10 ms: Wtot = 33 × 20 / 10 = 66 (< 73, so i = 10).
        // One loss: 76. 32 delivered: 76 − 1.28 = 74.72.
        // Fwnd = ⌊74.72 × 10 / 20 − 25⌋ = ⌊12.36⌋ = 12.
        let mut g = Gmiad::new(GmiadConfig::default());
        g.on_report(Instant::ZERO, shape(25), &report(1, 32, 10));
        assert!((g.total_window().unwrap() - 74.72).abs() < 1e-9);
        assert_eq!(g.fwnd(), 12);
        // Loss-free reports decay it: Wtot = 37 × 2 = 74, − 0.04 × 37 = 72.52 → 11.
        g.on_report(Instant::ZERO, shape(25), &report(0, 37, 10));
        assert_eq!(g.fwnd(), 11);
        for _ in 0..20 {
            g.on_report(Instant::ZERO, shape(25), &report(0, 40, 10));
        }
        assert_eq!(g.fwnd(), 8, "decays back to Fwnd_min");
    }

    #[test]
    fn long_rtt_moves_fwnd_little() {
        // §4.2.1: at 100 ms RTT "the Fwnd maintains almost the same value
        // (between 8.2 and 8.4)": Wtot = 33 × 11 = 363, i(363) ≈ 1.63, so a
        // single loss moves Fwnd by 0.15 and is floored away.
        let mut g = Gmiad::new(GmiadConfig::default());
        g.on_report(Instant::ZERO, shape(25), &report(1, 32, 100));
        assert_eq!(g.fwnd(), 8);
        // A burst of ten losses in one interval adds ~16 to Wtot: +1 Fwnd.
        let mut g = Gmiad::new(GmiadConfig::default());
        g.on_report(Instant::ZERO, shape(25), &report(10, 23, 100));
        assert_eq!(g.fwnd(), 9);
    }

    #[test]
    fn ertt_is_the_papers_ewma() {
        let mut g = Gmiad::new(GmiadConfig::default());
        g.on_report(Instant::ZERO, shape(25), &report(0, 33, 10));
        assert_eq!(g.rtt_estimate(), Some(Duration::from_millis(10)));
        g.on_report(Instant::ZERO, shape(25), &report(0, 33, 20));
        // 0.9 × 10 + 0.1 × 20 = 11 ms.
        let e = g.rtt_estimate().unwrap().as_secs_f64();
        assert!((e - 0.011).abs() < 1e-9, "{e}");
    }

    #[test]
    fn clamps_to_fwnd_max_and_survives_hostile_counts() {
        let mut g = Gmiad::new(GmiadConfig::default());
        g.on_report(Instant::ZERO, shape(25), &report(u32::MAX, 0, 10));
        assert_eq!(g.fwnd(), 60);
        g.on_report(Instant::ZERO, shape(25), &report(0, u32::MAX, 10));
        assert_eq!(g.fwnd(), 8);
        // A zero SYN or a huge k do not panic.
        let zero = StreamShape {
            k: 25,
            syn: Duration::ZERO,
        };
        g.on_report(Instant::ZERO, zero, &report(5, 5, 10));
        g.on_report(Instant::ZERO, shape(usize::MAX), &report(5, 5, 10));
        assert_eq!(g.fwnd(), 8);
    }

    #[test]
    fn steady_random_loss_settles_near_the_equilibrium() {
        // With loss probability p every report, Wtot drifts toward W* where
        // i(W*) = b / p (eq. 7). At p = 1% and k = 25, 100 ms RTT:
        // W* = 2 / (0.03 − 0.01) = 100 is below Wtot(Fwnd_min) = 363, so
        // Fwnd stays at the minimum: long-RTT flows are stable (§3.2.3).
        let mut g = Gmiad::new(GmiadConfig::default());
        for i in 0..10_000u32 {
            let lost = u32::from(i % 3 == 0); // ~1 loss per 100 packets
            g.on_report(Instant::ZERO, shape(25), &report(lost, 33 - lost, 100));
        }
        assert_eq!(g.fwnd(), 8);
    }
}
