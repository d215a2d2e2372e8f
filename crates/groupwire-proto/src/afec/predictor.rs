//! The size predictor behind
//! [`Step::Predictive`](super::Step::Predictive) (beyond the paper): the
//! code set size that meets a MER goal, from the pattern of packet losses.

use super::mer::MerWindow;

/// Gain of the predictive controller's correction toward the measured MER.
pub(super) const PREDICTIVE_FEEDBACK: f64 = 1.0;

/// Beyond the paper ([`Step::Predictive`](super::Step::Predictive)): the
/// smallest code set size whose MER, predicted from the packet-loss pattern
/// in `packets`, is `goal`; `None` when the size in force is predicted
/// within `tolerance` of it, or there are too few packets to tell.
///
/// A message first sent in packet `i` with code set size `k` travels in
/// packets `i .. i + k`, so it is lost exactly when all of them are. A run
/// of `L` consecutive lost packets therefore loses `max(0, L - k + 1)`
/// messages, and `MER(k) = Σ_runs max(0, L - k + 1) / packets`. A
/// fractional size `k + f` sends a share `f` of messages `k + 1` times, so
/// its MER is `(1 - f) MER(k) + f MER(k + 1)`, which is solved for `f`.
pub(super) fn predict_size(
    packets: &MerWindow,
    goal: f64,
    tolerance: f64,
    current: f64,
    cap: f64,
) -> Option<f64> {
    /// Fewest packets before the pattern is trusted.
    const MIN_PACKETS: usize = 200;
    let n = packets.len();
    if n < MIN_PACKETS {
        return None;
    }
    let runs = packets.loss_runs();
    let mer = |k: u32| -> f64 {
        let lost: u64 = runs
            .iter()
            .map(|&l| u64::from(l.saturating_sub(k - 1)))
            .sum();
        lost as f64 / n as f64
    };
    let size = solve_size(mer, goal, tolerance, current, cap)?;
    to_wire(size, current, cap)
}

/// The smallest (fractional) code set size, at most `cap`, whose MER is
/// `goal`, given `mer(k)` for whole sizes; `None` when the size in force,
/// `current`, is predicted within `tolerance` of the goal. A fractional
/// size `k + f` sends a share `f` of messages `k + 1` times, so its MER is
/// `(1 - f) MER(k) + f MER(k + 1)`, solved here for `f`. Shared by the
/// predictive and the robust controllers, which differ in how they
/// estimate `mer`.
pub(crate) fn solve_size(
    mer: impl Fn(u32) -> f64,
    goal: f64,
    tolerance: f64,
    current: f64,
    cap: f64,
) -> Option<f64> {
    let predicted = |size: f64| {
        let k = size.floor().max(1.0) as u32;
        let f = size - f64::from(k);
        (1.0 - f) * mer(k) + f * mer(k + 1)
    };
    if (predicted(current) - goal).abs() <= tolerance {
        return None;
    }
    let mut size = cap;
    for k in 1..cap.floor().max(1.0) as u32 {
        let (here, next) = (mer(k), mer(k + 1));
        if here <= goal {
            size = f64::from(k);
            break;
        }
        if next <= goal {
            size = f64::from(k) + (here - goal) / (here - next);
            break;
        }
    }
    Some(size)
}

/// `size` up to the wire's resolution (hundredths), rounding up so the
/// prediction stays at or below the goal; `None` if that is the size in
/// force.
pub(super) fn to_wire(size: f64, current: f64, cap: f64) -> Option<f64> {
    let size = ((size * 100.0).ceil() / 100.0).clamp(1.0, cap);
    ((size - current).abs() >= 0.01).then_some(size)
}
