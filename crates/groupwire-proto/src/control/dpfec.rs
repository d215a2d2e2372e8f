//! DP-FEC, dynamic probing FEC (Matsuzono, Asaeda & Murai, JIP 20(1), 2012;
//! GENEVA's ref. \[29\]): the baseline GENEVA improves on.
//!
//! What GENEVA's §5 says of it: "Using variations in the intervals between
//! packet loss events as a network indicator, it estimates the degree of
//! FEC impact on competing TCP performance while gradually increasing the
//! degree of added FEC redundancy. When the estimated FEC impact exceeds
//! the defined threshold, it immediately reduces the degree of FEC by
//! half." DP-FEC's own §4.2 adds: "if no congestion is sensed, the FEC
//! window size is increased except when (it) is already at its maximum; if
//! congestion is sensed, (it) is decreased except when (it) is at its
//! minimum", congestion meaning an FEC impact above a threshold.
//!
//! **Reconstruction.** Neither text gives the estimator's exact form or
//! constants, so this module implements the description as follows and
//! every constant is configurable:
//!
//! - Loss events are counted as in TFRC: losses within one RTT of the first
//!   loss of an event are one event. The *loss-event interval* is the number
//!   of packets between event starts.
//! - Probing runs in estimation periods of [`period`](DpFecConfig::period).
//!   At the end of each, the mean loss-event interval of the period is
//!   compared with that of the previous one. The relative shortening,
//!   `impact = (I_prev − I_now) / I_prev`, is the estimated FEC impact: the
//!   extra repair packets of the last increase made loss events come sooner.
//! - `impact > threshold`: congestion; `Fwnd` is halved. Otherwise `Fwnd`
//!   grows by [`step`](DpFecConfig::step). A period with no loss event has an
//!   infinite interval and never counts as congestion.
//!
//! The paper's tables show DP-FEC flows at mean `Fwnd` from 7 to 58, so the
//! range here is `[1, 60]`: the upper bound is GENEVA's `Fwnd_max` and the
//! lower bound lets a 90 Mbit/s flow fall to 7 as in Table 2.

use std::time::Duration;

use super::{FecController, ReportSample, StreamShape};
use crate::time::Instant;

/// DP-FEC's knobs; see the module docs for how they are used.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DpFecConfig {
    /// Length of one estimation period.
    pub period: Duration,
    /// Relative shortening of the loss-event interval taken as congestion.
    pub threshold: f64,
    /// Increase of `Fwnd` per period without congestion.
    pub step: usize,
    /// Smallest `Fwnd`.
    pub fwnd_min: usize,
    /// Largest `Fwnd`.
    pub fwnd_max: usize,
    /// `Fwnd` at start.
    pub fwnd_initial: usize,
}

impl Default for DpFecConfig {
    fn default() -> Self {
        Self {
            period: Duration::from_millis(500),
            threshold: 0.5,
            step: 1,
            fwnd_min: 1,
            fwnd_max: 60,
            fwnd_initial: 8,
        }
    }
}

/// The DP-FEC controller.
#[derive(Clone, Debug)]
pub struct DpFec {
    cfg: DpFecConfig,
    fwnd: usize,
    rtt: Option<Duration>,
    period_start: Option<Instant>,
    /// Packets seen since the start of the current loss event.
    since_event: u64,
    /// When the current loss event started (losses before `+ rtt` join it).
    event_start: Option<Instant>,
    /// Sum and count of loss-event intervals closed in this period.
    interval_sum: u64,
    intervals: u64,
    prev_mean: Option<f64>,
}

impl DpFec {
    /// A controller at [`DpFecConfig::fwnd_initial`].
    pub fn new(cfg: DpFecConfig) -> Self {
        Self {
            fwnd: cfg.fwnd_initial.clamp(cfg.fwnd_min, cfg.fwnd_max),
            cfg,
            rtt: None,
            period_start: None,
            since_event: 0,
            event_start: None,
            interval_sum: 0,
            intervals: 0,
            prev_mean: None,
        }
    }

    fn end_period(&mut self) {
        let mean = if self.intervals == 0 {
            f64::INFINITY
        } else {
            self.interval_sum as f64 / self.intervals as f64
        };
        let congested = match self.prev_mean {
            Some(prev) if prev.is_finite() && prev > 0.0 => {
                (prev - mean) / prev > self.cfg.threshold
            }
            _ => false,
        };
        self.fwnd = if congested {
            (self.fwnd / 2).max(self.cfg.fwnd_min)
        } else {
            (self.fwnd + self.cfg.step).min(self.cfg.fwnd_max)
        };
        self.prev_mean = Some(mean);
        self.interval_sum = 0;
        self.intervals = 0;
    }
}

impl FecController for DpFec {
    fn on_report(&mut self, now: Instant, _shape: StreamShape, report: &ReportSample) {
        if let Some(r) = report.rtt {
            // RFC 6298-style smoothing; only used to group losses into events.
            self.rtt = Some(match self.rtt {
                None => r,
                Some(s) => s.mul_f64(0.875) + r.mul_f64(0.125),
            });
        }
        let start = *self.period_start.get_or_insert(now);
        let packets = u64::from(report.lost) + u64::from(report.delivered);
        if report.lost > 0 {
            let rtt = self.rtt.unwrap_or(Duration::ZERO);
            let new_event = self.event_start.is_none_or(|s| now >= s + rtt);
            if new_event {
                if self.event_start.is_some() {
                    self.interval_sum += self.since_event;
                    self.intervals += 1;
                }
                self.event_start = Some(now);
                self.since_event = 0;
            }
        }
        self.since_event = self.since_event.saturating_add(packets);
        if now.saturating_duration_since(start) >= self.cfg.period {
            self.end_period();
            self.period_start = Some(now);
        }
    }

    fn fwnd(&self) -> usize {
        self.fwnd
    }

    fn rtt_estimate(&self) -> Option<Duration> {
        self.rtt
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHAPE: StreamShape = StreamShape {
        k: 25,
        syn: Duration::from_millis(10),
    };

    fn feed(d: &mut DpFec, t_ms: u64, lost: u32) {
        let r = ReportSample {
            lost,
            delivered: 33 - lost,
            rtt: Some(Duration::from_millis(10)),
            ..ReportSample::default()
        };
        d.on_report(Instant::from_millis(t_ms), SHAPE, &r);
    }

    #[test]
    fn probes_upward_without_loss() {
        let mut d = DpFec::new(DpFecConfig::default());
        for t in (0..=2_000).step_by(10) {
            feed(&mut d, t, 0);
        }
        assert_eq!(d.fwnd(), 12, "one step per 500 ms for 2 s from 8");
        for t in (2_010..=30_000).step_by(10) {
            feed(&mut d, t, 0);
        }
        assert_eq!(d.fwnd(), 60);
    }

    #[test]
    fn halves_when_loss_events_come_sooner() {
        let mut d = DpFec::new(DpFecConfig::default());
        // A loss event every 100 ms for a while: steady intervals, probing up.
        let mut t = 0;
        while t < 1_010 {
            feed(&mut d, t, u32::from(t % 100 == 0));
            t += 10;
        }
        let before = d.fwnd();
        assert!(before > 8);
        // Then every 20 ms: the interval shrinks by far more than 20%.
        while t < 1_510 {
            feed(&mut d, t, u32::from(t % 20 == 0));
            t += 10;
        }
        assert_eq!(d.fwnd(), before / 2);
    }

    #[test]
    fn stays_in_range() {
        let cfg = DpFecConfig {
            fwnd_initial: 500,
            ..DpFecConfig::default()
        };
        let d = DpFec::new(cfg);
        assert_eq!(d.fwnd(), 60);
    }
}
