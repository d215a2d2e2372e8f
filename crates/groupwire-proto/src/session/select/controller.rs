//! The adaptive controller (Leigh et al. §2: "Once a strategy has been
//! activated, the Adaptive Controller must monitor the progress of the
//! data transmission and adjust"): one per channel, called once per
//! control interval.

use std::time::Duration;

use super::{
    Policy, Prediction, Provision, Selection, Traffic, Window, is_bulk, predict_with, select_with,
    since, tightened, window_meets,
};
use crate::Instant;
use crate::control::gilbert::decay_weight;
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
    /// The least time between two switches (default 60 s) while the path
    /// stays as it was at the last one: this bounds a channel to one switch
    /// a minute on a stationary path, whatever the estimates do, which is
    /// issue 16's "never flaps more than once a minute on a stationary
    /// path". It yields to a *rescue* (see [`AdaptiveController`]): a path
    /// that changed, or a mechanism the path no longer carries. The first
    /// choice is not a switch and does not start it, so a channel that
    /// started on an unmeasured path can move as soon as the path is
    /// measured.
    pub min_dwell: Duration,
    /// A path has *changed* when its loss rate is this many times what it
    /// was at the last choice, or that many times less (default 2; loss
    /// rates under [`ControllerConfig::loss_floor`] count as the floor).
    pub change_ratio: f64,
    /// Loss rates this low are alike for [`ControllerConfig::change_ratio`]
    /// (default 0.5%: the monitor's fast fit rests on about 1.4 s of
    /// packets, 600 at 400 a second, and three losses more or less move a
    /// lower rate by twice; a change among rates this low goes by the
    /// dwell).
    pub loss_floor: f64,
    /// How long a pick must stay better before it replaces a mechanism
    /// the path cannot carry (default 500 ms: an overload delays every
    /// channel of the peer behind a full queue, so it is left as soon as
    /// the estimate has shown it for a few control intervals; while it
    /// lasts the controller reselects every interval, not every
    /// [`ControllerConfig::reselect`]).
    pub overload_hold: Duration,
    /// How long a pick must stay better on a changed path before it
    /// replaces the current mechanism within the dwell (default 2 s: the
    /// monitor shows a rise in loss within about 3 s, and a change of
    /// twice the loss rate that holds at every reselection for 2 s is not
    /// noise on a stationary path).
    pub rescue_hold: Duration,
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
    /// Under [`Policy::Model`], the path is predicted on with its loss-run
    /// rate this many standard errors above the fit
    /// ([`PathEstimate::upper_bound`]; default 1): a mechanism is trusted
    /// to a loss rate only as far as the packets measured bear it out (at
    /// 0.1% loss and 2000 packets, two runs: the bound is 0.17%), so a
    /// channel does not drop its redundancy on a lucky few seconds.
    /// Beyond the paper; 0 predicts on the fit itself.
    pub confidence_z: f64,
    /// The QoS's loss target holds for every window this long, not only on
    /// average (default 1 s; `ZERO`: on average): with `n` messages a
    /// window, the model policy keeps a mechanism only if a window loses
    /// more than the target with probability at most
    /// [`ControllerConfig::window_risk`], counting the clumps its losses
    /// come in ([`window_meets`](super::window_meets)). At 30 messages a
    /// second and a 6% band top, one loss a window is allowed, and a 2%
    /// mean of independent losses loses two or more in 12% of windows
    /// (targets are set at 1.2% instead: [`window_target`](super::window_target));
    /// an XOR row that fails loses two at once. Beyond the paper, whose
    /// QoS is a mean: an application sees its windows, and the scenario
    /// judges them.
    pub window: Duration,
    /// The share of windows allowed over the target (default 5%).
    pub window_risk: f64,
    /// What the host and network offer.
    pub provision: Provision,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            hold: Duration::from_secs(5),
            min_dwell: Duration::from_secs(60),
            overload_hold: Duration::from_millis(500),
            rescue_hold: Duration::from_secs(2),
            change_ratio: 2.0,
            loss_floor: 5e-3,
            margin: 0.2,
            feedback_half_life: Duration::from_secs(30),
            reselect: Duration::from_secs(1),
            confidence_z: 1.0,
            window: Duration::from_secs(1),
            window_risk: 0.05,
            provision: Provision::DEFAULT,
        }
    }
}

/// What the channel itself measured since the last call.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Measured {
    /// Share of its messages lost after recovery (or late): the residual
    /// loss or MER the receiver reports. Negative when messages counted
    /// lost in an earlier interval were delivered in this one (a recovery
    /// slower than the reports), down to -1.
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
    /// Since when the pick has been better on a changed path or past an
    /// overload, at every interval.
    rescue_since: Option<Instant>,
    /// The path's loss rate at the last choice.
    loss_at_choice: f64,
    measured_lost: f64,
    predicted_lost: f64,
    /// The QoS as judged ([`ControllerConfig::window`]) since the current
    /// mechanism was adopted.
    windows: Windows,
    switches: u64,
    intervals: u64,
}

/// The channel's own windows: how many of those since the current
/// mechanism was adopted lost more than the QoS allows (decayed).
#[derive(Clone, Copy, Debug, Default)]
struct Windows {
    start: Option<Instant>,
    lost: f64,
    msgs: f64,
    failed: f64,
    seen: f64,
}

/// A mechanism is refuted when its failed windows would be this unlikely
/// if each failed with probability [`ControllerConfig::window_risk`].
const REFUTE_P: f64 = 0.001;
/// Half-life of the failed-window counts.
const REFUTE_HALF_LIFE: Duration = Duration::from_secs(10);

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
            rescue_since: None,
            loss_at_choice: 0.0,
            measured_lost: 0.0,
            predicted_lost: 0.0,
            windows: Windows::default(),
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
        // Between reselections only an overload is looked at: the share of
        // the path the channel has against what its mechanism sends, a
        // product, not a prediction.
        if self.current.is_some()
            && since(now, self.last_select).is_some_and(|d| d < self.cfg.reselect)
            && !self.overloaded(path, traffic)
        {
            return None;
        }
        self.last_select = Some(now);
        let prov = self.cfg.provision;
        // The closed loop's evidence is of the path it was gathered on. A
        // recent loss (the monitor's fast fit) past the change ratio from
        // the loss at the choice is another path, though the estimate (the
        // more pessimistic fit) still lags it: the pick is made on the QoS
        // as stated, and a switch takes the evidence with it. (Three
        // seconds into the tele-immersion run's fourth minute, the third
        // minute's correction tightened the telepointer's Block to 0.16%
        // and it kept that into a path losing 0.5%.)
        let moved = self.current.is_some() && path.recent_loss.is_some_and(|l| self.changed(l));
        let correction = if moved { 1.0 } else { self.correction() };
        let qos = tightened(&self.qos, correction);
        let mut judged = *traffic;
        if self.policy == Policy::Model && !self.cfg.window.is_zero() {
            judged.window = Some(Window {
                msgs: traffic.msg_rate * self.cfg.window.as_secs_f64(),
                risk: self.cfg.window_risk,
            });
        }
        let traffic = &judged;
        let loss_now = path.model().loss_rate();
        let path = &match self.policy {
            Policy::Model => path.upper_bound(self.cfg.confidence_z),
            _ => *path,
        };
        let pick = select_with(
            self.policy,
            &prov,
            &qos,
            path,
            traffic,
            self.current.as_ref(),
        );
        let Some(current) = self.current else {
            self.adopt(&pick, loss_now);
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
        let cur_meets = window_meets(&qos, &current, &cur, traffic.window);
        self.prediction = Some(cur);
        self.meets = cur_meets;
        let better = pick.mechanism != current
            && match self.policy {
                Policy::Heuristic => true,
                Policy::Model => self.clearly_better(
                    &pick.prediction,
                    pick.meets,
                    &cur,
                    cur_meets,
                    traffic.window,
                ),
            };
        if !better {
            self.better_since = None;
            self.rescue_since = None;
            return None;
        }
        // The pick fits where the current mechanism does not (when neither
        // does, the others' load is the overload, not this channel's).
        let overload = !cur.rate_ok && pick.prediction.rate_ok;
        // A changed path rescues a channel that no longer meets its QoS;
        // one that now over-protects waits out the dwell (a falling loss
        // estimate crosses the change ratio again and again as it decays).
        // So is one the channel's own windows refute: it fails the QoS as
        // judged several times as often as allowed.
        let refuted = self.refuted();
        let changed = self.changed(loss_now);
        let urgent = ((changed || refuted) && !cur_meets) || overload;
        if !urgent {
            self.rescue_since = None;
        }
        let rescue_hold = if overload {
            self.cfg.overload_hold
        } else {
            self.cfg.rescue_hold
        }
        .min(self.cfg.hold);
        let held_for =
            |t: &mut Option<Instant>| now.saturating_duration_since(*t.get_or_insert(now));
        let better_for = held_for(&mut self.better_since);
        let rescue = urgent && held_for(&mut self.rescue_since) >= rescue_hold;
        let last = since(now, self.last_switch);
        let dwelt = last.is_none_or(|d| d >= self.cfg.min_dwell);
        let normal = better_for >= self.cfg.hold && dwelt;
        // Never sooner than the hold after a switch: a pick that needs
        // rescuing at once was a wrong pick, and another at once may be too.
        let may_rescue = rescue && last.is_none_or(|d| d >= self.cfg.hold);
        if !(normal || may_rescue) {
            return None;
        }
        // What was measured on another path says nothing of this one; on
        // the same path the closed loop's evidence stands.
        if (rescue && (changed || overload)) || moved {
            self.measured_lost = 0.0;
            self.predicted_lost = 0.0;
        }
        self.adopt(&pick, loss_now);
        self.last_switch = Some(now);
        self.switches += 1;
        Some(Switch {
            from: Some(current),
            to: pick.mechanism,
            prediction: pick.prediction,
            reason: pick.reason,
        })
    }

    /// Whether the windows judged since the current mechanism was adopted
    /// fail the QoS more often than [`ControllerConfig::window_risk`]
    /// allows, beyond chance: that many failures of that many windows
    /// would have probability under [`REFUTE_P`] (a binomial tail). A
    /// mean-based closed loop (the correction) needs tens of seconds of
    /// evidence to move a target; a mechanism whose prediction is far off
    /// (AFEC in the tele-immersion scenario's bursty minute, whose copies
    /// did not outrun the bursts) fails half its windows, which is plain
    /// within a few seconds, while a right one failing its 5% now and then
    /// is not refuted.
    fn refuted(&self) -> bool {
        let w = &self.windows;
        if self.cfg.window.is_zero() || w.failed < 1.0 {
            return false;
        }
        let (n, k) = (w.seen.round(), w.failed.round());
        binomial_tail(n, k, self.cfg.window_risk.clamp(1e-9, 1.0)) < REFUTE_P
    }

    /// Counts `lost` of `n` messages into the current window, closing it
    /// when it is [`ControllerConfig::window`] old.
    fn judge(&mut self, now: Instant, lost: f64, n: f64) {
        if self.cfg.window.is_zero() {
            return;
        }
        let allowed = (self.qos.reliability.max_loss() * (1.0 + 1e-9)).max(0.0);
        let w = &mut self.windows;
        let start = *w.start.get_or_insert(now);
        w.lost += lost;
        w.msgs += n;
        let age = now.saturating_duration_since(start);
        if age < self.cfg.window {
            return;
        }
        let decay = decay_weight(age, REFUTE_HALF_LIFE);
        w.failed *= decay;
        w.seen *= decay;
        if w.msgs > 0.0 {
            w.seen += 1.0;
            if w.lost.round() > (allowed * w.msgs).floor() {
                w.failed += 1.0;
            }
        }
        *w = Windows {
            start: Some(now),
            failed: w.failed,
            seen: w.seen,
            ..Windows::default()
        };
    }

    /// Takes `pick` as the current mechanism, on a path losing `loss`.
    fn adopt(&mut self, pick: &Selection, loss: f64) {
        self.windows = Windows::default();
        self.current = Some(pick.mechanism);
        self.prediction = Some(pick.prediction);
        self.meets = pick.meets;
        self.loss_at_choice = loss;
        self.better_since = None;
        self.rescue_since = None;
    }

    /// Whether the channel's share of the path (`path.delivered`, as the
    /// session gives it) is below what the current mechanism sends: its
    /// load times one plus the overhead last predicted for it.
    fn overloaded(&self, path: &PathEstimate, traffic: &Traffic) -> bool {
        let (Some(share), Some(p)) = (path.delivered, self.prediction) else {
            return false;
        };
        if p.throughput.is_some() {
            return false;
        }
        let wire = traffic.msg_rate * traffic.msg_size as f64 * 8.0 * (1.0 + p.overhead);
        wire > share.as_bps() as f64
    }

    /// Whether the path's loss rate moved by the change ratio since the
    /// last choice.
    fn changed(&self, loss_now: f64) -> bool {
        let floor = self.cfg.loss_floor.max(1e-12);
        let (a, b) = (self.loss_at_choice.max(floor), loss_now.max(floor));
        let ratio = if a > b { a / b } else { b / a };
        ratio >= self.cfg.change_ratio.max(1.0)
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
            m.loss_after_recovery.clamp(-1.0, 1.0)
        };
        let n = m.messages as f64;
        self.judge(now, share * n, n);
        self.measured_lost = (self.measured_lost + share * n).max(0.0);
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
        window: Option<super::Window>,
    ) -> bool {
        let x = self.cfg.margin.clamp(0.0, 1.0);
        // A mechanism the path cannot carry loses more than predicted (the
        // queue overflows, for every channel of the peer): one that fits
        // is better, whatever the two predict.
        if new.rate_ok != cur.rate_ok {
            return new.rate_ok;
        }
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
            // Neither meets: clearly less lost for the bytes sent.
            (false, false) => {
                let (a, b) = (
                    super::window_fail(&self.qos, new, window),
                    super::window_fail(&self.qos, cur, window),
                );
                a <= (1.0 - x) * b
                    || (a <= b * (1.0 + super::NONE_MEETS_TOLERANCE)
                        && new.loss_cost() <= (1.0 - x) * cur.loss_cost())
            }
        }
    }
}

/// `P(X >= k)` for `X ~ Binomial(n, p)` (`n` a whole number up to a few
/// hundred: the decayed window counts).
fn binomial_tail(n: f64, k: f64, p: f64) -> f64 {
    if k <= 0.0 {
        return 1.0;
    }
    if k > n {
        return 0.0;
    }
    // P(X <= k - 1), term by term.
    let mut term = (1.0 - p).powf(n);
    let mut below = term;
    let mut i = 0.0;
    while i + 1.0 < k {
        term *= (n - i) / (i + 1.0) * p / (1.0 - p).max(1e-300);
        below += term;
        i += 1.0;
    }
    (1.0 - below).clamp(0.0, 1.0)
}
