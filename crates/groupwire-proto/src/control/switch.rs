//! Miyoshi et al.'s code switches ([`super::ladder`]) driving GENEVA's
//! block FEC: the "codes" are repair windows, `Fwnd` repair packets per
//! block of `k`, on a ladder of ratios `Fwnd / k` ([`WINDOW_LADDER`]).
//!
//! On a packet network whole packets are lost, and the receiver's SYN
//! report (every 10 ms, GENEVA §3.2.1) counts them: how many packets of
//! the interval were lost before repair, and how many data packets it
//! could not rebuild after. Each report is one observation:
//!
//! - [`ThresholdFec`] is the paper's rule with the report interval as its
//!   unit: an interval is "in error" when anything was left unrebuilt
//!   (what ELN would report); two such intervals among the last ten climb
//!   one rung, ten clean ones step one down.
//! - [`PredictiveFec`] feeds the interval's raw packet losses to
//!   [`PredictiveLadder::on_symbols`] (a two-state fit per report
//!   interval) and picks the window with the best expected goodput, where
//!   a block of `k + m` packets is lost when more than `m` of them are.
//!   Losses inside one interval are taken as independent at the state's
//!   rate: bursts shorter than an interval are the fit's blind spot.

use super::ladder::{
    FrameOutcome, LadderController, PredictiveConfig, PredictiveLadder, RungModel, ThresholdConfig,
    ThresholdLadder,
};
use super::{FecController, FecControllerFactory, ReportSample, StreamShape};
use crate::time::Instant;

/// The window ladder: `Fwnd = ⌈ratio · k⌉` for these ratios, no repair
/// first. Ours (the paper's codes have fixed rates 35/127, 63/127 and
/// 91/127 of parity; a block code over packets can go further).
pub const WINDOW_LADDER: [f64; 11] = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0];

/// The window of `rung` for blocks of `k`, at most `fwnd_max`.
fn window(rung: usize, k: usize, fwnd_max: usize) -> usize {
    let ratio = WINDOW_LADDER[rung.min(WINDOW_LADDER.len() - 1)];
    ((ratio * k as f64).ceil() as usize).min(fwnd_max)
}

/// Configuration of [`ThresholdFec`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ThresholdFecConfig {
    /// The switch's rule (the paper's: 2 in 10, down after a clean 10).
    pub rule: ThresholdConfig,
    /// The largest window (GENEVA §3.2.4's `Fwnd_max`, 60, by default).
    pub fwnd_max: usize,
}

impl Default for ThresholdFecConfig {
    fn default() -> Self {
        Self {
            rule: ThresholdConfig::default(),
            fwnd_max: 60,
        }
    }
}

impl FecControllerFactory for ThresholdFecConfig {
    fn build(&self) -> Box<dyn FecController> {
        Box::new(ThresholdFec {
            config: *self,
            ladder: ThresholdLadder::new(WINDOW_LADDER.len(), self.rule),
            k: 0,
        })
    }
}

/// Miyoshi et al.'s threshold switch over repair windows; see the module
/// docs.
#[derive(Debug)]
pub struct ThresholdFec {
    config: ThresholdFecConfig,
    ladder: ThresholdLadder,
    k: usize,
}

impl FecController for ThresholdFec {
    fn on_report(&mut self, _now: Instant, shape: StreamShape, report: &ReportSample) {
        self.k = shape.k;
        if report.lost == 0 && report.delivered == 0 && report.unrecovered == 0 {
            return; // an idle interval says nothing
        }
        self.ladder.on_frame(FrameOutcome {
            lost: report.unrecovered > 0,
            corrected_bits: Some(report.lost),
        });
    }

    fn fwnd(&self) -> usize {
        window(self.ladder.rung(), self.k, self.config.fwnd_max)
    }
}

/// Configuration of [`PredictiveFec`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PredictiveFecConfig {
    /// The fit and the choice. The default weighs a lost block 20 blocks'
    /// worth beyond its own packets: a tunnel carries streams for which a
    /// residual loss costs far more than a repair packet.
    pub rule: PredictiveConfig,
    /// The largest window (GENEVA §3.2.4's `Fwnd_max`, 60, by default).
    pub fwnd_max: usize,
}

impl Default for PredictiveFecConfig {
    fn default() -> Self {
        Self {
            rule: PredictiveConfig {
                loss_penalty: 20.0,
                ..PredictiveConfig::default()
            },
            fwnd_max: 60,
        }
    }
}

impl FecControllerFactory for PredictiveFecConfig {
    fn build(&self) -> Box<dyn FecController> {
        Box::new(PredictiveFec {
            config: *self,
            ladder: PredictiveLadder::new(vec![RungModel::uncoded(1)], self.rule),
            k: 0,
        })
    }
}

/// The predictive switch over repair windows; see the module docs.
#[derive(Debug)]
pub struct PredictiveFec {
    config: PredictiveFecConfig,
    ladder: PredictiveLadder,
    k: usize,
}

impl PredictiveFec {
    /// One rung per window of the ladder: a block of `k + m` packets
    /// carrying `k` of data, lost when more than `m` are.
    fn rungs(&self, k: usize) -> Vec<RungModel> {
        (0..WINDOW_LADDER.len())
            .map(|r| {
                let m = window(r, k, self.config.fwnd_max);
                RungModel {
                    efficiency: k as f64 / (k + m).max(1) as f64,
                    codewords: vec![(k + m, m)],
                }
            })
            .collect()
    }
}

impl FecController for PredictiveFec {
    fn on_report(&mut self, _now: Instant, shape: StreamShape, report: &ReportSample) {
        if shape.k != self.k {
            self.k = shape.k;
            let rungs = self.rungs(shape.k.max(1));
            self.ladder.set_rungs(rungs);
        }
        let lost = report.lost as usize;
        self.ladder
            .on_symbols(lost + report.delivered as usize, lost);
    }

    fn fwnd(&self) -> usize {
        window(self.ladder.rung(), self.k, self.config.fwnd_max)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const SHAPE: StreamShape = StreamShape {
        k: 20,
        syn: Duration::from_millis(10),
    };

    fn report(lost: u32, delivered: u32, unrecovered: u32) -> ReportSample {
        ReportSample {
            lost,
            delivered,
            unrecovered,
            rtt: Some(Duration::from_millis(10)),
            ..ReportSample::default()
        }
    }

    #[test]
    fn the_ladder_is_in_blocks_of_k_and_capped() {
        assert_eq!(window(0, 20, 60), 0);
        assert_eq!(window(1, 20, 60), 2);
        assert_eq!(window(7, 20, 60), 20);
        assert_eq!(window(10, 20, 60), 60);
        assert_eq!(window(10, 40, 60), 60, "capped at Fwnd_max");
    }

    #[test]
    fn the_threshold_switch_climbs_on_residual_loss_and_falls_on_clean_intervals() {
        let mut c = ThresholdFecConfig::default().build();
        c.on_report(Instant::ZERO, SHAPE, &report(2, 30, 1));
        assert_eq!(c.fwnd(), 0);
        c.on_report(Instant::ZERO, SHAPE, &report(2, 30, 1));
        assert_eq!(c.fwnd(), 2, "two intervals with residual loss: one rung up");
        for _ in 0..10 {
            c.on_report(Instant::ZERO, SHAPE, &report(3, 30, 0));
        }
        assert_eq!(c.fwnd(), 0, "ten intervals fully repaired: one rung down");
    }

    /// A steady 10% packet loss: the predictive switch settles on a window
    /// that leaves a block of 20 rarely lost, and on none without loss.
    #[test]
    fn the_predictive_switch_sizes_the_window_to_the_loss() {
        let mut c = PredictiveFecConfig::default().build();
        for _ in 0..500 {
            c.on_report(Instant::ZERO, SHAPE, &report(0, 40, 0));
        }
        assert_eq!(c.fwnd(), 0, "no loss, no repair");
        // 4 of 40 lost per interval, every interval.
        for _ in 0..2000 {
            c.on_report(Instant::ZERO, SHAPE, &report(4, 36, 0));
        }
        let m = c.fwnd();
        let block_loss = 1.0 - super::super::ladder::binomial_cdf(20 + m, 0.1, m);
        assert!((4..=20).contains(&m), "Fwnd {m}");
        assert!(block_loss < 0.01, "Fwnd {m} loses {block_loss}");
    }
}
