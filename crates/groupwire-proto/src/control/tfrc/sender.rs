//! The TFRC sender (RFC 5348 §4): the allowed sending rate `X`.

use std::time::Duration;

use super::receiver::TfrcFeedback;
use super::{INITIAL_NOFEEDBACK, MIN_RTT, OSC_Q2, TfrcConfig, X_RECV_SET_CAP, throughput};
use crate::time::Instant;
use crate::units::Bitrate;

/// Sender counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SenderStats {
    /// Feedback reports used.
    pub feedback: u64,
    /// Reports dropped because their echo lies in the sender's future.
    pub invalid_feedback: u64,
    /// Nofeedback timer expiries handled.
    pub nofeedback_timeouts: u64,
}

/// TFRC sender (RFC 5348 §4): the allowed sending rate `X`.
///
/// - inputs: [`on_packet_sent`](Self::on_packet_sent),
///   [`on_feedback`](Self::on_feedback),
///   [`on_nofeedback_timeout`](Self::on_nofeedback_timeout);
/// - outputs, re-read after every input:
///   [`allowed_rate`](Self::allowed_rate),
///   [`nofeedback_deadline`](Self::nofeedback_deadline),
///   [`rtt`](Self::rtt) (to put in data packets);
/// - getters: [`loss_event_rate`](Self::loss_event_rate),
///   [`rto`](Self::rto), [`stats`](Self::stats).
///
/// Uses RFC 5348's `X_recv_set` (§4.3), not RFC 3448's `2*X_recv` rule.
#[derive(Clone, Debug)]
pub struct TfrcSender {
    config: TfrcConfig,
    s: f64,
    /// Allowed sending rate X, bytes per second.
    x: f64,
    /// Smoothed RTT R, seconds.
    r: Option<f64>,
    /// Last equation value X_Bps.
    x_bps: Option<f64>,
    /// Last reported loss event rate.
    p: f64,
    /// Time Last Doubled during slow start (`None` is the RFC's -1).
    tld: Option<Instant>,
    x_recv_set: Vec<(f64, Instant)>,
    deadline: Instant,
    feedback_received: bool,
    sent_since_timer: bool,
    any_send_reported: bool,
    last_not_limited_send: Option<Instant>,
    prev_echo: Option<Instant>,
    r_sqmean: Option<f64>,
    last_r_sample: Option<f64>,
    stats: SenderStats,
}

impl TfrcSender {
    /// A sender starting at `now`: one packet per second and a 2-second
    /// nofeedback timer (§4.2).
    //= https://www.rfc-editor.org/rfc/rfc5348#section-4.2
    //# the value of X is set to s bytes per second, the nofeedback timer is
    //# set to expire after 2 seconds, and tld is set to -1.
    pub fn new(now: Instant, config: TfrcConfig) -> Self {
        let s = config.s();
        let first_timeout = if config.initial_nofeedback_timeout.is_zero() {
            INITIAL_NOFEEDBACK
        } else {
            config.initial_nofeedback_timeout
        };
        Self {
            s,
            x: s,
            r: None,
            x_bps: None,
            p: 0.0,
            tld: None,
            x_recv_set: vec![(f64::INFINITY, now)],
            deadline: now + first_timeout,
            feedback_received: false,
            sent_since_timer: false,
            any_send_reported: false,
            last_not_limited_send: None,
            prev_echo: None,
            r_sqmean: None,
            last_r_sample: None,
            stats: SenderStats::default(),
            config,
        }
    }

    /// Records a data packet sent at `now`. `data_limited` is `true` when
    /// the application had nothing more to send at the allowed rate (for
    /// §4.3's data-limited intervals and §4.4's idle test). Report every
    /// packet, or none at all (then the sender counts as never idle).
    pub fn on_packet_sent(&mut self, now: Instant, _bytes: u32, data_limited: bool) {
        self.any_send_reported = true;
        self.sent_since_timer = true;
        if !data_limited {
            self.last_not_limited_send = Some(now);
        }
    }

    /// Processes one feedback report (§4.3). Reports whose echoed timestamp
    /// is after `now` are counted in [`stats`](Self::stats) and dropped.
    pub fn on_feedback(&mut self, now: Instant, fb: &TfrcFeedback) {
        let Some(elapsed) = now.checked_duration_since(fb.t_recvdata) else {
            self.stats.invalid_feedback += 1;
            return;
        };
        self.stats.feedback += 1;
        let p = if fb.p.is_nan() {
            0.0
        } else {
            fb.p.clamp(0.0, 1.0)
        };
        let x_recv = if fb.x_recv.is_nan() || fb.x_recv < 0.0 {
            0.0
        } else {
            fb.x_recv
        };

        // 1) R_sample = (t_now - t_recvdata) - t_delay
        let r_sample = elapsed
            .saturating_sub(fb.t_delay)
            .max(MIN_RTT)
            .as_secs_f64();
        // 2) R = q*R + (1-q)*R_sample
        let q = self.config.q();
        let r = match self.r {
            None => r_sample,
            Some(r) => q * r + (1.0 - q) * r_sample,
        };
        self.r = Some(r);
        // 3) t_RTO = max(4*R, 2*s/X): the nofeedback interval, step 6.

        // 4) the allowed sending rate.
        // Data-limited: no send reported as not data-limited since the
        // previous report's echo.
        let data_limited = self.any_send_reported
            && self
                .last_not_limited_send
                .is_none_or(|t| self.prev_echo.is_some_and(|e| t <= e));
        let recv_limit = if data_limited {
            if p > self.p {
                for e in &mut self.x_recv_set {
                    e.0 /= 2.0;
                }
                self.maximize_x_recv_set(now, 0.85 * x_recv)
            } else {
                2.0 * self.maximize_x_recv_set(now, x_recv)
            }
        } else {
            2.0 * self.update_x_recv_set(now, x_recv, r)
        };
        self.p = p;
        self.recompute_x(now, recv_limit);

        // 5) oscillation reduction (§4.5).
        let sq = r_sample.sqrt();
        self.r_sqmean = Some(match self.r_sqmean {
            None => sq,
            Some(m) => OSC_Q2 * m + (1.0 - OSC_Q2) * sq,
        });
        self.last_r_sample = Some(r_sample);

        // 6) restart the nofeedback timer.
        self.feedback_received = true;
        self.prev_echo = Some(fb.t_recvdata);
        self.restart_timer(now);
    }

    /// Handles the nofeedback timer (§4.4): usually halves the rate, never
    /// below `s / t_mbi`, and restarts the timer. Calls before
    /// [`nofeedback_deadline`](Self::nofeedback_deadline) do nothing.
    pub fn on_nofeedback_timeout(&mut self, now: Instant) {
        if now < self.deadline {
            return;
        }
        self.stats.nofeedback_timeouts += 1;
        let min_rate = self.config.min_rate();
        let idle = self.any_send_reported && !self.sent_since_timer;
        let x_recv = self.x_recv_set.iter().map(|e| e.0).fold(0.0_f64, f64::max);
        let recover_rate = self.initial_rate().unwrap_or(0.0);
        //= https://www.rfc-editor.org/rfc/rfc5348#section-4.4
        //# If the nofeedback timer expires, the sender should perform the
        //# following actions:
        if self.r.is_none() && !self.feedback_received && !idle {
            self.x = (self.x / 2.0).max(min_rate);
        } else if idle
            && ((self.p > 0.0 && x_recv < recover_rate)
                || (self.p == 0.0 && self.x < 2.0 * recover_rate))
        {
            // Idle since the timer was set, and already at a low rate.
        } else if self.p == 0.0 {
            self.x = (self.x / 2.0).max(min_rate);
        } else {
            let x_bps = self.x_bps.unwrap_or(f64::INFINITY);
            if x_bps > 2.0 * x_recv {
                self.update_limits(now, x_recv);
            } else {
                self.update_limits(now, x_bps / 2.0);
            }
        }
        self.restart_timer(now);
    }

    /// When [`on_nofeedback_timeout`](Self::on_nofeedback_timeout) is due.
    /// Always `Some` (the timer always runs); may change after every input.
    pub fn nofeedback_deadline(&self) -> Option<Instant> {
        Some(self.deadline)
    }

    /// The allowed sending rate in bytes per second: `X`, or `X_inst` with
    /// oscillation reduction (§4.5). At least `s / t_mbi`.
    pub fn allowed_rate(&self) -> f64 {
        let x = match (
            self.config.oscillation_reduction,
            self.r_sqmean,
            self.last_r_sample,
        ) {
            (true, Some(m), Some(r)) if r > 0.0 => x_inst(self.x, m, r),
            _ => self.x,
        };
        x.max(self.config.min_rate())
    }

    /// [`allowed_rate`](Self::allowed_rate) as a bit rate (rounded down,
    /// saturating).
    pub fn allowed_bitrate(&self) -> Bitrate {
        Bitrate::bps((self.allowed_rate() * 8.0) as u64)
    }

    /// Time between packets of `bytes` bytes at the allowed rate (§4.6's
    /// `t_ipi = s / X`).
    pub fn inter_packet_interval(&self, bytes: u32) -> Duration {
        secs(f64::from(bytes) / self.allowed_rate())
    }

    /// The smoothed RTT `R` to put in data packets; `None` before the first
    /// feedback.
    pub fn rtt(&self) -> Option<Duration> {
        self.r.map(secs)
    }

    /// The nofeedback interval `max(4R, 2s/X)` (or the initial 2 s before an
    /// RTT sample).
    pub fn rto(&self) -> Duration {
        let two_s_over_x = secs(2.0 * self.s / self.x);
        match self.r {
            Some(r) => secs(4.0 * r).max(two_s_over_x),
            None => {
                let init = if self.config.initial_nofeedback_timeout.is_zero() {
                    INITIAL_NOFEEDBACK
                } else {
                    self.config.initial_nofeedback_timeout
                };
                init.max(two_s_over_x)
            }
        }
    }

    /// The loss event rate from the last report.
    pub fn loss_event_rate(&self) -> f64 {
        self.p
    }

    /// The last equation value `X_Bps`, once `p > 0` was reported.
    pub fn equation_rate(&self) -> Option<f64> {
        self.x_bps
    }

    /// Counters.
    pub fn stats(&self) -> &SenderStats {
        &self.stats
    }

    /// `initial_rate = W_init / R` with `W_init = min(4s, max(2s, 4380))` (§4.2).
    //= https://www.rfc-editor.org/rfc/rfc5348#section-4.2
    //# W_init = min(4*s, max(2*s, 4380)).
    fn initial_rate(&self) -> Option<f64> {
        let w_init = (4.0 * self.s).min((2.0 * self.s).max(4380.0));
        self.r.map(|r| w_init / r)
    }

    /// §4.3 step 4, second half: X from `p`, `recv_limit` and slow start.
    fn recompute_x(&mut self, now: Instant, recv_limit: f64) {
        let Some(r) = self.r else {
            return;
        };
        let min_rate = self.config.min_rate();
        if self.p > 0.0 {
            //= https://www.rfc-editor.org/rfc/rfc5348#section-4.3
            //# X = max(min(X_Bps, recv_limit), s/t_mbi);
            let x_bps = throughput(
                self.s,
                secs(r),
                self.p,
                secs(4.0 * r),
                self.config.b_value(),
            );
            self.x_bps = Some(x_bps);
            self.x = x_bps.min(recv_limit).max(min_rate);
        } else if self.tld.is_none_or(|tld| now - tld >= secs(r)) {
            //= https://www.rfc-editor.org/rfc/rfc5348#section-4.3
            //# X = max(min(2*X, recv_limit), initial_rate);
            let initial = self.initial_rate().unwrap_or(self.s);
            self.x = (2.0 * self.x).min(recv_limit).max(initial);
            self.tld = Some(now);
        }
        if !self.x.is_finite() {
            // Only reachable with an infinite recv_limit and X_Bps; stay put.
            self.x = f64::MAX / 4.0;
        }
    }

    /// "Update X_recv_set": add `(x_recv, now)`, forget entries older than
    /// two RTTs, return the maximum.
    fn update_x_recv_set(&mut self, now: Instant, x_recv: f64, r: f64) -> f64 {
        self.x_recv_set.push((x_recv, now));
        let horizon = now - secs(2.0 * r);
        self.x_recv_set.retain(|&(_, t)| t >= horizon);
        if self.x_recv_set.len() > X_RECV_SET_CAP {
            let excess = self.x_recv_set.len() - X_RECV_SET_CAP;
            self.x_recv_set.drain(..excess);
        }
        self.x_recv_set.iter().map(|e| e.0).fold(x_recv, f64::max)
    }

    /// "Maximize X_recv_set": keep only the maximum of the set (without the
    /// initial Infinity) and `x_recv`, stamped `now`; return it.
    fn maximize_x_recv_set(&mut self, now: Instant, x_recv: f64) -> f64 {
        let max = self
            .x_recv_set
            .iter()
            .map(|e| e.0)
            .filter(|v| v.is_finite())
            .fold(x_recv, f64::max);
        self.x_recv_set.clear();
        self.x_recv_set.push((max, now));
        max
    }

    /// §4.4 `Update_Limits(timer_limit)`.
    fn update_limits(&mut self, now: Instant, timer_limit: f64) {
        let timer_limit = timer_limit.max(self.config.min_rate());
        self.x_recv_set.clear();
        self.x_recv_set.push((timer_limit / 2.0, now));
        // Recalculate X as in step (4) of §4.3 (typical branch).
        self.recompute_x(now, timer_limit);
    }

    fn restart_timer(&mut self, now: Instant) {
        self.deadline = now + self.rto();
        self.sent_since_timer = false;
    }
}

/// §4.5: `X_inst = X * R_sqmean / sqrt(R_sample)`.
fn x_inst(x: f64, r_sqmean: f64, r_sample: f64) -> f64 {
    x * r_sqmean / r_sample.sqrt()
}

/// Seconds to a `Duration`, saturating; NaN and negatives give zero.
fn secs(x: f64) -> Duration {
    Duration::try_from_secs_f64(x).unwrap_or(if x > 0.0 {
        Duration::MAX
    } else {
        Duration::ZERO
    })
}
