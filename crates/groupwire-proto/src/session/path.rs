//! What the resource monitor knows of the path to one peer
//! ([`PathEstimate`]): the input of the strategy selector.

use std::time::Duration;

use crate::Bitrate;
use crate::control::target::TwoState;

/// The path to one peer as measured (Leigh et al. §2's resource monitor):
/// delay, loss and its burstiness, bandwidth and jitter. Every field that
/// has not been measured yet is `None` or zero, and [`samples`](Self::samples)
/// says how much the estimate rests on.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PathEstimate {
    /// Smoothed round-trip time (RFC 6298's SRTT).
    pub srtt: Option<Duration>,
    /// Least round-trip time seen recently: the path without queueing.
    pub min_rtt: Option<Duration>,
    /// Share of packets lost toward the peer, in `[0, 1]`.
    pub loss: f64,
    /// The fitted loss process: a Gilbert chain from loss runs (mean
    /// burst `1 / r`), or `None` before enough packets.
    pub loss_model: Option<TwoState>,
    /// Mean length of a run of consecutive losses, in packets (1 with no
    /// runs seen).
    pub mean_burst: f64,
    /// Rate the peer received from us recently: a lower bound on the
    /// available bandwidth while we send more than the path carries, and
    /// what we sent otherwise.
    pub delivered: Option<Bitrate>,
    /// What the path can deliver of what we send: the bottleneck's rate
    /// as our packets' dispersion measured it, less the path's loss, or,
    /// the lower, the bandwidth the path gave us when it was last seen
    /// full (the delivered rate while a standing queue held and the peer
    /// got less than we sent; [`SendMonitor`](super::monitor::SendMonitor)
    /// says how, and keeps it for
    /// [`capacity_hold`](super::monitor::MonitorConfig::capacity_hold)).
    /// `None` while neither was measured: then nothing bounds what more
    /// the path would carry.
    pub capacity: Option<Bitrate>,
    /// RFC 3550 §6.4.1's interarrival jitter of our packets at the peer.
    pub jitter: Duration,
    /// Leigh et al.'s jitter (under their Fig. 4: the mean deviation of
    /// each packet's latency from the mean of its run of 20), as the peer
    /// last reported it; `None` before a run of 20 packets finished.
    pub jitter_leigh: Option<Duration>,
    /// Packets the loss figures rest on (after decay).
    pub samples: f64,
    /// The loss rate of the last second or so (the monitor's fast fit),
    /// once it rests on
    /// [`min_samples`](super::monitor::MonitorConfig::min_samples) packets:
    /// `loss` is the more pessimistic of the two fits and follows a
    /// falling loss only slowly, this shows a change of path within
    /// seconds. `None`: not measured.
    pub recent_loss: Option<f64>,
}

impl PathEstimate {
    /// Nothing measured yet.
    pub const UNKNOWN: Self = Self {
        srtt: None,
        min_rtt: None,
        loss: 0.0,
        loss_model: None,
        mean_burst: 1.0,
        delivered: None,
        capacity: None,
        jitter: Duration::ZERO,
        jitter_leigh: None,
        samples: 0.0,
        recent_loss: None,
    };

    /// A path with these figures, for tests and the simulator's oracle:
    /// round trip `rtt`, a Gilbert loss process with rate `loss` and mean
    /// burst `burst` packets, `delivered` bandwidth, fully trusted.
    pub fn known(rtt: Duration, loss: f64, burst: f64, delivered: Option<Bitrate>) -> Self {
        let burst = burst.max(1.0);
        let r = 1.0 / burst;
        // loss = p / (p + r) for Gilbert's chain.
        let p = if loss >= 1.0 {
            1.0
        } else {
            loss * r / (1.0 - loss)
        };
        Self {
            srtt: Some(rtt),
            min_rtt: Some(rtt),
            loss,
            loss_model: Some(TwoState::gilbert(p.min(1.0), r)),
            mean_burst: burst,
            delivered,
            capacity: delivered,
            jitter: Duration::ZERO,
            jitter_leigh: None,
            samples: f64::INFINITY,
            recent_loss: Some(loss),
        }
    }

    /// The loss model to predict with: the fitted one, else independent
    /// losses at the measured rate.
    pub fn model(&self) -> TwoState {
        self.loss_model.unwrap_or(TwoState {
            p: 0.5,
            r: 0.5,
            loss_good: self.loss,
            loss_bad: self.loss,
        })
    }

    /// This estimate with the loss chain's `p` (a loss run begins) raised
    /// to an upper bound `z` standard errors above the fit, for a
    /// selector that should not trust a mechanism to a loss rate measured
    /// on little evidence: loss runs are counted events, so with `n`
    /// packets received and `k = p·n` runs, `p⁺ = (k + z√k) / n`, the
    /// count `z` Poisson standard errors up. A path on which no run was
    /// seen stays lossless: the monitor reports a chain only once it rests
    /// on [`MonitorConfig::min_samples`](super::monitor::MonitorConfig::min_samples)
    /// packets, and a clean path of a few hundred packets must still bear
    /// a 0.1% target. The burst length (`r`) is kept. An estimate resting
    /// on infinitely many packets ([`known`](Self::known)) is unchanged,
    /// and so is one without a fitted chain.
    pub fn upper_bound(&self, z: f64) -> Self {
        let Some(m) = self.loss_model else {
            return *self;
        };
        let n = self.samples * (1.0 - self.loss).clamp(0.0, 1.0);
        if !n.is_finite() || n <= 0.0 || z.is_nan() || z <= 0.0 {
            return *self;
        }
        let k = (m.p * n).max(0.0);
        let p = ((k + z * k.sqrt()) / n).clamp(m.p, 1.0);
        let r = if m.r > 0.0 { m.r } else { 1.0 };
        let model = TwoState { p, ..m };
        let model = if m.r > 0.0 {
            model
        } else {
            TwoState { r, ..model }
        };
        Self {
            loss: model.loss_rate(),
            loss_model: Some(model),
            ..*self
        }
    }

    /// One-way delay, taken as half the round trip (no clock sync).
    pub fn owd(&self) -> Option<Duration> {
        self.srtt.map(|r| r / 2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_path_has_the_loss_and_burst_it_names() {
        let p = PathEstimate::known(Duration::from_millis(40), 0.1, 4.0, None);
        let m = p.model();
        assert!((m.loss_rate() - 0.1).abs() < 1e-12);
        assert!((1.0 / m.r - 4.0).abs() < 1e-12);
        assert_eq!(p.owd(), Some(Duration::from_millis(20)));
        let u = PathEstimate::UNKNOWN;
        assert_eq!(u.model().loss_rate(), 0.0);
    }
}
