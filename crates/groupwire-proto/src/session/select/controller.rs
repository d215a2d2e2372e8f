//! The adaptive controller (Leigh et al. §2: "Once a strategy has been
//! activated, the Adaptive Controller must monitor the progress of the
//! data transmission and adjust"): one per channel, called once per
//! control interval.

use std::time::Duration;

use super::{
    Policy, Prediction, Provision, Traffic, is_bulk, meets, predict_with, select_with, since,
    tightened,
};
use crate::Instant;
use crate::control::target::MIN_SURPRISES;
use crate::session::{Mechanism, PathEstimate, Qos};

/// The controller's hysteresis and feedback settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ControllerConfig {
    /// How long a better mechanism must stay better, every interval,
    /// before the switch (default 5 s: fifty 100 ms intervals, so one
    /// optimistic estimate does not move a channel, and a real change is
    /// followed within seconds).
    pub hold: Duration,
    /// The least time between two switches (default 60 s): this alone
    /// bounds a channel to one switch a minute, whatever the estimates do,
    /// which is issue 16's "never flaps more than once a minute on a
    /// stationary path". The first choice is not a switch and does not
    /// start it, so a channel that started on an unmeasured path can move
    /// as soon as the path is measured.
    pub min_dwell: Duration,
    /// "Clearly cheaper": a meeting candidate replaces a meeting current
    /// mechanism only if its overhead is at least this share lower (default
    /// 0.2; XOR rows of 5 and 6 differ by 17% and do not trade places on
    /// noise). For the bulk profile, or a higher throughput by this share.
    /// When neither meets, a candidate that loses this share less.
    pub margin: f64,
    /// Half-life of the measured and predicted loss that close the loop
    /// (default 30 s).
    pub feedback_half_life: Duration,
    /// How often the candidates are predicted again (default 1 s): calls
    /// in between only take in the measured loss. Predicting every
    /// candidate costs up to a few hundred microseconds for a fast channel
    /// (the block chooser at long blocks), so this is what keeps 100
    /// channels under 1% of a core at a 100 ms interval; the hold is
    /// counted at this granularity.
    pub reselect: Duration,
    /// What the host and network offer.
    pub provision: Provision,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            hold: Duration::from_secs(5),
            min_dwell: Duration::from_secs(60),
            margin: 0.2,
            feedback_half_life: Duration::from_secs(30),
            reselect: Duration::from_secs(1),
            provision: Provision::DEFAULT,
        }
    }
}

/// What the channel itself measured since the last call.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Measured {
    /// Share of its messages lost after recovery (or late): the residual
    /// loss or MER the receiver reports.
    pub loss_after_recovery: f64,
    /// Messages that share is of.
    pub messages: u64,
}

/// A decision to move a channel to another mechanism.
#[derive(Clone, Debug, PartialEq)]
pub struct Switch {
    /// The mechanism in use; `None` for the first choice (beyond the
    /// brief's `Mechanism`: the first choice has nothing to switch from).
    pub from: Option<Mechanism>,
    /// The one to use.
    pub to: Mechanism,
    /// What `to` is predicted to deliver.
    pub prediction: Prediction,
    /// Why, for logs.
    pub reason: String,
}

/// Re-selects one channel's mechanism each control interval, with
/// hysteresis and a closed loop on the measured loss.
///
/// Each [`on_interval`](Self::on_interval) takes in the measured loss;
/// at most once per [`ControllerConfig::reselect`] it also:
///
/// 1. **Closed loop** (as the block target controller's step 5): decayed
///    sums of the lost messages measured ([`Measured`]) and of those the
///    current mechanism's prediction expected. When the measured exceed
///    the predicted by [`MIN_SURPRISES`] or more, the model is optimistic
///    on this path: the loss target is divided by their ratio (at most
///    10⁴) for both the current mechanism's check and the new choice, so a
///    current mechanism that measures worse than its target is treated as
///    not meeting.
/// 2. **Choice**: the policy's pick under that QoS ([`select_with`]).
/// 3. **Hysteresis**: the pick is *better* when it meets and the current
///    mechanism does not; or both meet and the pick's overhead is lower by
///    [`ControllerConfig::margin`] or more (bulk: or its throughput higher
///    by that share); or neither meets and the pick loses that share less.
///    Under [`Policy::Heuristic`], when the heuristic names another
///    mechanism. A switch happens when some pick has been better at every
///    interval for [`ControllerConfig::hold`], and not within
///    [`ControllerConfig::min_dwell`] of the last switch; it goes to the
///    latest pick.
///
/// The first call chooses without hysteresis.
#[derive(Clone, Debug)]
pub struct AdaptiveController {
    cfg: ControllerConfig,
    policy: Policy,
    qos: Qos,
    current: Option<Mechanism>,
    prediction: Option<Prediction>,
    meets: bool,
    last_call: Option<Instant>,
    last_select: Option<Instant>,
    last_switch: Option<Instant>,
    better_since: Option<Instant>,
    measured_lost: f64,
    predicted_lost: f64,
    switches: u64,
    intervals: u64,
}

impl AdaptiveController {
    /// A controller for a channel with `qos`, choosing by `policy`.
    pub fn new(cfg: ControllerConfig, policy: Policy, qos: Qos) -> Self {
        Self {
            cfg,
            policy,
            qos,
            current: None,
            prediction: None,
            meets: false,
            last_call: None,
            last_select: None,
            last_switch: None,
            better_since: None,
            measured_lost: 0.0,
            predicted_lost: 0.0,
            switches: 0,
            intervals: 0,
        }
    }

    /// The mechanism in use (`None` before the first call).
    pub fn current(&self) -> Option<Mechanism> {
        self.current
    }

    /// Whether the current mechanism met the QoS at the last selection
    /// (under the closed loop's correction).
    pub fn meets(&self) -> bool {
        self.meets
    }

    /// The current mechanism's prediction at the last selection.
    pub fn prediction(&self) -> Option<Prediction> {
        self.prediction
    }

    /// Switches made (the first choice not counted).
    pub fn switches(&self) -> u64 {
        self.switches
    }

    /// Calls to [`on_interval`](Self::on_interval).
    pub fn intervals(&self) -> u64 {
        self.intervals
    }

    /// The closed loop's divisor of the loss target (1: the model agrees
    /// with what the channel measured).
    pub fn correction(&self) -> f64 {
        let surplus = self.measured_lost - self.predicted_lost;
        if surplus < MIN_SURPRISES {
            return 1.0;
        }
        ((self.measured_lost + 0.5) / (self.predicted_lost + 0.5)).clamp(1.0, 1e4)
    }

    /// One control interval: the path as the monitor estimates it now, the
    /// channel's load, and what the channel measured since the last call.
    /// Returns the switch to make, if any (the first call always returns
    /// the first choice).
    pub fn on_interval(
        &mut self,
        now: Instant,
        path: &PathEstimate,
        traffic: &Traffic,
        measured: Option<Measured>,
    ) -> Option<Switch> {
        self.intervals += 1;
        self.feed(now, measured);
        if self.current.is_some()
            && since(now, self.last_select).is_some_and(|d| d < self.cfg.reselect)
        {
            return None;
        }
        self.last_select = Some(now);
        let prov = self.cfg.provision;
        let qos = tightened(&self.qos, self.correction());
        let pick = select_with(
            self.policy,
            &prov,
            &qos,
            path,
            traffic,
            self.current.as_ref(),
        );
        let Some(current) = self.current else {
            self.adopt(pick.mechanism, pick.prediction, pick.meets);
            return Some(Switch {
                from: None,
                to: pick.mechanism,
                prediction: pick.prediction,
                reason: format!("first choice: {}", pick.reason),
            });
        };
        // The pick was predicted on the same inputs: do not repeat it (the
        // block chooser is the costly one).
        let cur = if pick.mechanism == current {
            pick.prediction
        } else {
            predict_with(&current, &prov, &qos, path, traffic)
        };
        let cur_meets = meets(&qos, &current, &cur);
        self.prediction = Some(cur);
        self.meets = cur_meets;
        let better = pick.mechanism != current
            && match self.policy {
                Policy::Heuristic => true,
                Policy::Model => self.clearly_better(&pick.prediction, pick.meets, &cur, cur_meets),
            };
        if !better {
            self.better_since = None;
            return None;
        }
        let since_better = *self.better_since.get_or_insert(now);
        let held = now.saturating_duration_since(since_better) >= self.cfg.hold;
        let dwelt = since(now, self.last_switch).is_none_or(|d| d >= self.cfg.min_dwell);
        if !(held && dwelt) {
            return None;
        }
        self.adopt(pick.mechanism, pick.prediction, pick.meets);
        self.last_switch = Some(now);
        self.switches += 1;
        Some(Switch {
            from: Some(current),
            to: pick.mechanism,
            prediction: pick.prediction,
            reason: pick.reason,
        })
    }

    fn adopt(&mut self, m: Mechanism, p: Prediction, meets: bool) {
        self.current = Some(m);
        self.prediction = Some(p);
        self.meets = meets;
        self.better_since = None;
    }

    fn feed(&mut self, now: Instant, measured: Option<Measured>) {
        let dt = since(now, self.last_call).unwrap_or(Duration::ZERO);
        self.last_call = Some(now);
        let half = self.cfg.feedback_half_life.as_secs_f64().max(1e-9);
        let w = 0.5f64.powf(dt.as_secs_f64() / half);
        self.measured_lost *= w;
        self.predicted_lost *= w;
        let Some(m) = measured else { return };
        let share = if m.loss_after_recovery.is_nan() {
            0.0
        } else {
            m.loss_after_recovery.clamp(0.0, 1.0)
        };
        let n = m.messages as f64;
        self.measured_lost += share * n;
        if let Some(p) = self.prediction {
            self.predicted_lost += p.lost() * n;
        }
    }

    fn clearly_better(
        &self,
        new: &Prediction,
        new_meets: bool,
        cur: &Prediction,
        cur_meets: bool,
    ) -> bool {
        let x = self.cfg.margin.clamp(0.0, 1.0);
        match (new_meets, cur_meets) {
            (true, false) => true,
            (false, true) => false,
            (true, true) => {
                let cheaper =
                    new.overhead < cur.overhead && new.overhead <= (1.0 - x) * cur.overhead;
                let faster = is_bulk(&self.qos)
                    && match (new.throughput, cur.throughput) {
                        (Some(a), Some(b)) => a >= (1.0 + x) * b,
                        _ => false,
                    };
                cheaper || faster
            }
            (false, false) => new.lost() <= (1.0 - x) * cur.lost(),
        }
    }
}
