//! The strategy selector and the adaptive controller (Leigh et al. §2,
//! Figure 1; issue 16): which [`Mechanism`] carries a channel, chosen from
//! its [`Qos`] and the [`PathEstimate`], and re-chosen when the path
//! changes.
//!
//! Pure code: no I/O, no clock (time comes in as [`Instant`]), no
//! randomness. Three layers:
//!
//! 1. **Predictors** ([`predict`]): what a mechanism would deliver on the
//!    path: residual loss, the share delivered past the delay budget, the
//!    typical added delay, the overhead and whether the rate fits
//!    ([`Prediction`]). Built on the fitted loss chain
//!    ([`PathEstimate::model`]) and the exact machinery that already
//!    exists: [`block_residual`](crate::control::target::block_residual)
//!    for XOR rows and Reed-Solomon blocks,
//!    [`choose_code`](crate::control::target::choose_code) for the code
//!    the block target controller would pick, the AFEC's run-length MER,
//!    TCP's throughput equation
//!    ([`throughput`](crate::control::tfrc::throughput)). Each formula is
//!    given at its function in `predict.rs`; every call is `O(1)` to
//!    `O(log n)` per candidate (the block chooser: a few thousand
//!    recursion steps), no Monte Carlo.
//! 2. **Policies** ([`select`], [`Policy`]): Leigh et al. §5 item 3's
//!    heuristics as written ([`Policy::Heuristic`]), and a model-based
//!    policy ([`Policy::Model`]) that predicts every candidate and keeps
//!    the cheapest that meets the QoS, or says none can.
//! 3. **The adaptive controller** ([`AdaptiveController`]): per channel,
//!    once per control interval, re-selects with hysteresis and closes the
//!    loop on the channel's measured loss.
//!
//! ## Words made precise
//!
//! - **Delay budget** `B`: what recovery may add to a message's delay:
//!   [`Qos::max_delay`], or, when a lifetime is set, the lifetime less the
//!   one-way delay (half the round trip), whichever is shorter. `None`:
//!   nothing is ever late. So a latency-bound profile (interactive,
//!   streaming) without a budget may get Reliable from the model policy on
//!   a lossy path, where TCP's retransmissions cost fewer bytes than FEC:
//!   nothing in such a QoS says how late is too late. Give latency-bound
//!   channels a [`Qos::max_delay`]. (The heuristic reads the profile
//!   instead: there "low latency" needs no number.)
//! - **Meets** ([`meets`]): the rate fits ([`Prediction::rate_ok`]) and
//!   `residual + late <= qos.reliability.max_loss()`; for a
//!   [`MerBand`](Reliability::MerBand) that is the predicted MER at or
//!   under the band's top. [`Reliability::Full`] also needs a mechanism
//!   that retransmits (Reliable, Striped, Blast) and, when order is asked,
//!   one that delivers messages in order (Reliable: Striped and Blast move
//!   objects). Order for partially reliable channels is not modelled (a
//!   reorder buffer is the session's business).
//! - **A message is one datagram** for the datagram mechanisms (Plain,
//!   AFEC, XOR, Block); Reliable cuts it into MSS-sized segments.
//! - **Rate fits**: the bytes the mechanism puts on the wire per second
//!   (the application's, [`Traffic`], times `1 + overhead`) are at most
//!   [`PathEstimate::delivered`], read as the bandwidth available (so a
//!   monitor whose `delivered` is only what the channel sends now would
//!   make every costlier mechanism look unfit: it should report a capacity
//!   estimate there, or `None`); TCP's
//!   predicted throughput must carry the application's bytes. With
//!   `delivered` unknown, every datagram mechanism fits. A bulk transfer
//!   ([`CapacityProfile::CapacitySeeking`] with [`Reliability::Full`]) has
//!   no rate to fit: it is ranked by throughput instead.

mod controller;
mod predict;
pub(crate) use predict::afec_size;
#[cfg(test)]
mod tests;

use std::time::Duration;

pub use controller::{AdaptiveController, ControllerConfig, Measured, Switch};
pub use predict::{RTO_MIN, predict_with};

use crate::Instant;
use crate::session::{CapacityProfile, Mechanism, PathEstimate, Qos, Reliability};
use crate::xor::XorLayout;

/// What the channel sends: the predictors' load.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Traffic {
    /// Messages per second the channel sends (measured, or from
    /// [`Qos::rate`]).
    pub msg_rate: f64,
    /// Mean message size, bytes.
    pub msg_size: usize,
    /// Datagrams per second the peer's *other* channels send on the same
    /// path (0: this channel is alone). A channel's packets are then
    /// interleaved with theirs, so it sees the path's loss chain only
    /// every few packets: burst losses hit its consecutive packets less
    /// often than the chain's consecutive ones. The predictors thin the
    /// chain accordingly (`predict.rs`, `Ctx::new`).
    pub others_pkt_rate: f64,
    /// The peer's reliable stream also carries a capacity-seeking channel
    /// (a bulk transfer): the stream is one FIFO, so a message written to
    /// it may wait behind the whole transfer (TCP keeps its send buffer
    /// full). Reliable is then late for any channel with a delay budget.
    pub stream_shared_with_bulk: bool,
    /// The QoS is judged per window of this many messages, each window
    /// allowed the QoS's share of them lost, in all but a share of windows
    /// (`None`: on the mean). Read by [`Policy::Model`]
    /// ([`window_meets`]); the [`AdaptiveController`] sets it from
    /// [`ControllerConfig::window`].
    pub window: Option<Window>,
}

/// How a QoS is judged over time: per window of `msgs` messages, at most
/// the QoS's share of them lost, in all but `risk` of the windows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Window {
    /// Messages per window.
    pub msgs: f64,
    /// The share of windows allowed over the target.
    pub risk: f64,
}

impl Traffic {
    /// `msg_rate` messages of `msg_size` bytes per second, alone on the
    /// path.
    pub const fn new(msg_rate: f64, msg_size: usize) -> Self {
        Self {
            msg_rate,
            msg_size,
            others_pkt_rate: 0.0,
            stream_shared_with_bulk: false,
            window: None,
        }
    }

    /// The load [`Qos::rate`] declares, in messages of `msg_size` bytes;
    /// `None` without a rate (or with a zero size).
    pub fn from_qos(qos: &Qos, msg_size: usize) -> Option<Self> {
        let rate = qos.rate?;
        (msg_size > 0).then(|| Self::new(rate.as_bps() as f64 / 8.0 / msg_size as f64, msg_size))
    }
}

/// What a mechanism is predicted to deliver on a path ([`predict`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Prediction {
    /// Share of messages still lost after recovery, in `[0, 1]`.
    pub residual: f64,
    /// Share delivered later than the delay budget (0 without one): lost
    /// to the application as surely as the residual.
    pub late: f64,
    /// Typical added delay of a recovered message.
    pub added_delay: Duration,
    /// Extra bytes sent per application byte.
    pub overhead: f64,
    /// Whether the mechanism carries the channel's rate on this path.
    pub rate_ok: bool,
    /// Goodput the mechanism can reach, bytes per second: set for the
    /// stream and bulk mechanisms (TCP's equation, Blast's delivered
    /// rate), `None` for datagram mechanisms, which send what they are
    /// given. Beyond the brief: the bulk profile ranks by it.
    pub throughput: Option<f64>,
    /// Messages lost together per loss event, on average (at least 1): a
    /// plain channel's loss runs, the sources an unrebuilt XOR group or
    /// block loses, the messages a stalled stream holds past the budget.
    /// A window's loss count is a sum of such clumps, not of independent
    /// messages ([`window_meets`]).
    pub cluster: f64,
}

impl Prediction {
    /// What the application loses: `residual + late`.
    pub fn lost(&self) -> f64 {
        (self.residual + self.late).min(1.0)
    }

    /// What is lost weighed by what is sent: `lost · (1 + overhead)`. Of
    /// the candidates alike in failed windows when nothing meets
    /// ([`NONE_MEETS_TOLERANCE`]), the selector takes the least of this:
    /// redundancy that costs `k` times the bytes must lose `k` times less
    /// (the camera on the tele-immersion path's third minute fails every
    /// window whatever it sends, and keeps the light code that trims the
    /// most loss for its bytes, which also carries it into the fourth
    /// minute's lighter loss, rather than none).
    pub fn loss_cost(&self) -> f64 {
        self.lost() * (1.0 + self.overhead)
    }

    /// Every share in `[0, 1]` and NaN as the worst case, so no caller
    /// sees an impossible number.
    fn sanitised(mut self) -> Self {
        let unit = |x: f64| if x.is_nan() { 1.0 } else { x.clamp(0.0, 1.0) };
        self.residual = unit(self.residual);
        self.late = unit(self.late).min(1.0 - self.residual);
        if self.overhead.is_nan() || self.overhead < 0.0 {
            self.overhead = f64::INFINITY;
        }
        self.throughput = self
            .throughput
            .map(|t| if t.is_nan() { 0.0 } else { t.max(0.0) });
        self.cluster = if self.cluster.is_nan() {
            1.0
        } else {
            self.cluster.clamp(1.0, 1e6)
        };
        self
    }
}

/// What the host and network offer beyond the measured path: settings the
/// session knows, not measures.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Provision {
    /// Bandwidth is reserved along the path (an IntServ reservation, a
    /// provisioned circuit, a testbed's dedicated link): Reliable Blast UDP
    /// is a candidate only then (Leigh et al. §5: "if QoS is available").
    /// No reservation protocol is implemented here (issue 16), so the
    /// operator sets this; default `false`.
    pub reserved: bool,
    /// The largest TCP window the host gives a connection, bytes: Linux's
    /// default `net.ipv4.tcp_rmem` ceiling, 6 MiB, the most receive-buffer
    /// autotuning grows to. A TCP connection "fits the path" when this
    /// covers the bandwidth-delay product.
    pub max_window: u64,
    /// TCP's maximum segment size, bytes (1460, Ethernet's).
    pub mss: usize,
    /// Round trip assumed before the monitor has one (100 ms: a
    /// continental path; the first measurement replaces it).
    pub assumed_rtt: Duration,
    /// The AFEC's largest code set size (`AfecConfig::max_size`'s default).
    pub afec_max_size: f64,
    /// The block controller's overhead bound
    /// (`TargetConfig::max_overhead`'s default).
    pub block_max_overhead: f64,
    /// The reliable stream crosses the path the monitor measures (default
    /// `true`: TCP and UDP to one peer share a route). Where it does not
    /// (the stream goes straight to the peer while the datagrams cross a
    /// relay or a link emulator), nothing measured says what the stream
    /// would do, so [`Mechanism::Reliable`] is offered only to channels
    /// that need every message.
    pub stream_on_path: bool,
    /// Most stream connections the driver may open to one peer: striped
    /// TCP is a candidate over 2 to this many (default 8, Leigh et al.'s
    /// parallel sockets; below 2, never; at most
    /// [`MAX_STREAMS`](crate::MAX_STREAMS)). Both of this repository's
    /// drivers of a [`Session`](super::Session) open a connection per
    /// stream.
    pub max_streams: u8,
}

impl Provision {
    /// The defaults (see each field).
    pub const DEFAULT: Self = Self {
        reserved: false,
        max_window: 6 << 20,
        mss: 1460,
        assumed_rtt: Duration::from_millis(100),
        afec_max_size: 16.0,
        block_max_overhead: 3.0,
        stream_on_path: true,
        max_streams: 8,
    };
}

impl Default for Provision {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// The prediction for mechanism `m` carrying `traffic` with `qos` over
/// `path`, with the default [`Provision`]. Deterministic, `O(1)` to
/// `O(log n)` except Block (the target controller's chooser).
pub fn predict(m: &Mechanism, qos: &Qos, path: &PathEstimate, traffic: &Traffic) -> Prediction {
    predict_with(m, &Provision::DEFAULT, qos, path, traffic)
}

/// Whether `m`, predicted `p`, meets `qos` (see the module docs, "Meets").
pub fn meets(qos: &Qos, m: &Mechanism, p: &Prediction) -> bool {
    if !p.rate_ok {
        return false;
    }
    if let Reliability::Full = qos.reliability {
        let retransmits = matches!(
            m,
            Mechanism::Reliable | Mechanism::Striped { .. } | Mechanism::Blast
        );
        let ordered = !qos.preserve_order || matches!(m, Mechanism::Reliable);
        return retransmits && ordered && p.residual <= 0.0 && p.late <= 0.0;
    }
    // A hair of slack so a prediction exactly at the target meets it.
    p.lost() <= qos.reliability.max_loss() * (1.0 + 1e-9) + 1e-15
}

/// Whether `p` meets `qos` judged per `window` ([`meets`] without one,
/// for [`Reliability::Full`], or past [`MAX_WINDOW_ALLOWED`] losses a
/// window, where the mean decides): a window of `n` messages may lose
/// `⌊max_loss · n⌋` of them, and at most the share `risk` of windows may
/// lose more.
///
/// Losses arrive in clumps ([`Prediction::cluster`]): the loss events in
/// a window are Poisson with mean `n · lost / cluster` and each loses the
/// whole numbers nearest `cluster` (`⌊c⌋` or `⌈c⌉`, mixed to that mean:
/// an unrebuilt XOR row loses two sources, or one and its parity), so the
/// window's count is compound Poisson, its distribution by Panjer's
/// recursion. With `cluster = 1` this is the Poisson limit of
/// [`window_target`]'s binomial. A Gilbert run's sizes are geometric and
/// spread more than that: for a plain channel on a bursty path the check
/// is a little pessimistic at an allowance of one loss a window (every
/// clump over one fails it, where a geometric run is a single loss with
/// probability `r`) and a little optimistic at large allowances. Measured in the tele-immersion scenario
/// (issue 16): a row of ten XOR at 2% loss leaves 0.5% lost, which at 30
/// messages a window reads as 1% of windows over a one-loss allowance;
/// but an unrebuilt row loses two messages at once, and 7% of windows
/// were over.
pub fn window_meets(qos: &Qos, m: &Mechanism, p: &Prediction, window: Option<Window>) -> bool {
    let sane_risk = window.filter(|w| w.risk.is_finite() && w.risk > 0.0);
    match sane_risk.and_then(|w| judged(qos, w).map(|allowed| (w, allowed))) {
        Some((w, allowed)) => {
            p.rate_ok
                && window_excess(p.lost(), p.cluster, w.msgs, allowed) <= w.risk * (1.0 + 1e-9)
        }
        None => meets(qos, m, p),
    }
}

/// The share of windows `p` is predicted to fail `qos` in ([`window_meets`]'s
/// compound Poisson tail), or, where the mean decides there (no window,
/// [`Reliability::Full`], past [`MAX_WINDOW_ALLOWED`]), the mean loss
/// [`Prediction::lost`]: what a selector minimises when nothing meets.
pub fn window_fail(qos: &Qos, p: &Prediction, window: Option<Window>) -> f64 {
    match window.and_then(|w| judged(qos, w).map(|allowed| (w, allowed))) {
        Some((w, allowed)) => window_excess(p.lost(), p.cluster, w.msgs, allowed),
        None => p.lost(),
    }
}

/// Losses a window of `w.msgs` may have under `qos`, where the window
/// judges ([`window_meets`]): `None` for [`Reliability::Full`], a window
/// of no (or no finite) messages, or past [`MAX_WINDOW_ALLOWED`].
fn judged(qos: &Qos, w: Window) -> Option<usize> {
    if matches!(qos.reliability, Reliability::Full) || !(w.msgs.is_finite() && w.msgs > 0.0) {
        return None;
    }
    let allowed = (qos.reliability.max_loss() * w.msgs * (1.0 + 1e-9)).floor();
    (allowed <= MAX_WINDOW_ALLOWED as f64).then_some(allowed as usize)
}

/// Above this many losses allowed a window, [`window_meets`] judges the
/// mean (the recursion costs the square of the count; with hundreds
/// allowed, the window's count is close to its mean).
pub const MAX_WINDOW_ALLOWED: usize = 256;

/// `P(S > allowed)` for `S` compound Poisson: `Poisson(n · lost /
/// cluster)` events, each losing `⌊cluster⌋` or `⌈cluster⌉` messages,
/// mixed to the mean `cluster` (Panjer's recursion, `O(allowed²)`).
fn window_excess(lost: f64, cluster: f64, n: f64, allowed: usize) -> f64 {
    if lost.is_nan() || lost <= 0.0 {
        return 0.0;
    }
    let c = if cluster.is_nan() {
        1.0
    } else {
        cluster.clamp(1.0, 1e6)
    };
    let lambda = n * lost.min(1.0) / c;
    let lo = c.floor() as usize;
    let frac = c - c.floor();
    let f = |j: usize| {
        if j == lo {
            1.0 - frac
        } else if j == lo + 1 {
            frac
        } else {
            0.0
        }
    };
    let mut g = Vec::with_capacity(allowed + 1);
    g.push((-lambda).exp());
    for k in 1..=allowed {
        let sum: f64 = (1..=k).map(|j| j as f64 * f(j) * g[k - j]).sum();
        g.push(lambda / k as f64 * sum);
    }
    (1.0 - g.iter().sum::<f64>()).clamp(0.0, 1.0)
}

/// When nothing meets: failure shares within this much of the least are
/// alike, and of them the least loss for the bytes sent is taken
/// ([`Prediction::loss_cost`]). The QoS is judged per
/// window, so what a channel that cannot meet it still wants is the
/// fewest failed windows, and redundancy is worth its bytes while it
/// clearly cuts them: on the tele-immersion path's third minute (8% loss
/// in bursts of 4) a second XOR copy of each state message cuts the loss
/// one copy leaves by about a quarter, and the windows failed by more
/// than this tolerance (`xor:5x5` against `xor:2` in the minute-3 column
/// of `scripts/tele_immersion_seeds.py`). The rule before took the least
/// loss times bytes sent over all, which refused that second copy.
pub const NONE_MEETS_TOLERANCE: f64 = 0.1;

/// How a channel's mechanism is chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Policy {
    /// Leigh et al. §5 item 3's heuristics, as written; see
    /// [`select`].
    Heuristic,
    /// Predict every candidate, keep the cheapest that meets the QoS.
    Model,
}

/// What a policy chose.
#[derive(Clone, Debug, PartialEq)]
pub struct Selection {
    /// The mechanism.
    pub mechanism: Mechanism,
    /// What it is predicted to deliver.
    pub prediction: Prediction,
    /// Whether that meets the QoS ([`meets`]).
    pub meets: bool,
    /// Why, in a few words, for logs.
    pub reason: String,
}

/// Chooses a mechanism for a channel with the default [`Provision`]; see
/// [`select_with`].
pub fn select(
    policy: Policy,
    qos: &Qos,
    path: &PathEstimate,
    traffic: &Traffic,
    current: Option<&Mechanism>,
) -> Selection {
    select_with(policy, &Provision::DEFAULT, qos, path, traffic, current)
}

/// Chooses a mechanism for a channel.
///
/// **[`Policy::Heuristic`]**, Leigh et al. §5 item 3 ("Heuristics may be
/// used initially"), with its words made thresholds:
///
/// - *Large and requiring reliable delivery*: [`Reliability::Full`] with
///   the bulk profile ([`CapacityProfile::CapacitySeeking`]). Then:
///   with bandwidth reserved ([`Provision::reserved`]), Reliable Blast
///   UDP (the paper's "if QoS is available"; it comes first because a
///   reservation is what Blast needs and TCP cannot use); else TCP if its
///   window "matches network capacity": [`Provision::max_window`] at least
///   the bandwidth-delay product `delivered × min RTT` (unknown bandwidth:
///   assumed to fit); else striped TCP over `⌈BDP / window⌉` connections
///   (2 to [`Provision::max_streams`]; where that is under 2, TCP).
/// - *Requires low latency*: a delay budget (max delay or lifetime) or an
///   interactive, non-interactive or streaming profile; and not
///   [`Reliability::Full`] (which is "else TCP").
/// - *Can tolerate much loss*: the loss the QoS tolerates
///   ([`Reliability::max_loss`]) is at least the path's measured loss, so
///   plain UDP meets it: UDP.
/// - *Can tolerate low loss*: tolerates some (above 0) but less than the
///   path loses: FEC UDP with the paper's code, one XOR parity per 3
///   packets (§4.1, Fig. 5).
/// - *Else*: TCP.
///
/// `current` is not read: the heuristic is memoryless.
///
/// **[`Policy::Model`]** predicts each candidate ([`predict_with`]):
/// Plain; for a MER band, AFEC with that band; XOR rows of 2 to 10 and
/// the matrices 4×4, 5×5, 10×10 and columns 10×10; Block with the QoS's
/// loss target (a band's middle) and budget (30 ms, the tunnel's, without
/// one); Reliable; for [`Reliability::Full`] only the reliable ones, and
/// for the bulk profile Striped over 2 to [`Provision::max_streams`]
/// connections (where the stream crosses the measured path,
/// [`Provision::stream_on_path`]) and, where
/// bandwidth is reserved, Blast. Of those that meet the QoS ([`meets`]),
/// the least overhead (ties: the lower added delay, then the order above).
/// For the bulk profile, throughput first: of those within 10% of the
/// best predicted throughput, the least overhead (beyond the brief: a bulk
/// transfer wants speed, and every reliable mechanism costs the same
/// retransmissions). If none meets, of those that fit the rate (all, if
/// none does), of those whose share of failed windows ([`window_fail`];
/// the mean loss without a window) is within [`NONE_MEETS_TOLERANCE`] of
/// the least, the least loss for the bytes sent
/// ([`Prediction::loss_cost`]), with [`Selection::meets`] false. `current` is not read
/// either (the controller holds the hysteresis); it is in the signature
/// so a policy may prefer staying put.
pub fn select_with(
    policy: Policy,
    prov: &Provision,
    qos: &Qos,
    path: &PathEstimate,
    traffic: &Traffic,
    _current: Option<&Mechanism>,
) -> Selection {
    match policy {
        Policy::Heuristic => heuristic(prov, qos, path, traffic),
        Policy::Model => model(prov, qos, path, traffic),
    }
}

pub(crate) fn is_bulk(qos: &Qos) -> bool {
    qos.profile == CapacityProfile::CapacitySeeking && qos.reliability == Reliability::Full
}

fn selection(
    m: Mechanism,
    prov: &Provision,
    qos: &Qos,
    path: &PathEstimate,
    traffic: &Traffic,
    reason: String,
) -> Selection {
    let prediction = predict_with(&m, prov, qos, path, traffic);
    Selection {
        meets: meets(qos, &m, &prediction),
        mechanism: m,
        prediction,
        reason,
    }
}

/// The paper's default FEC code: one parity per 3 packets (§4.1, Fig. 5).
pub const PAPER_XOR: u8 = 3;

fn heuristic(prov: &Provision, qos: &Qos, path: &PathEstimate, traffic: &Traffic) -> Selection {
    let (m, why) = if is_bulk(qos) {
        let rtt = path
            .min_rtt
            .or(path.srtt)
            .unwrap_or(prov.assumed_rtt)
            .as_secs_f64();
        let bdp = path
            .delivered
            .map(|b| b.as_bps() as f64 / 8.0 * rtt)
            .unwrap_or(0.0);
        let window = prov.max_window.max(1) as f64;
        if prov.reserved {
            (Mechanism::Blast, "bulk, bandwidth reserved".to_string())
        } else if bdp <= window {
            (
                Mechanism::Reliable,
                format!("bulk, window {window:.0} B covers BDP {bdp:.0} B"),
            )
        } else if prov.max_streams >= 2 {
            let n = (bdp / window)
                .ceil()
                .clamp(2.0, f64::from(prov.max_streams)) as u8;
            (
                Mechanism::Striped { streams: n },
                format!("bulk, BDP {bdp:.0} B over window {window:.0} B"),
            )
        } else {
            (
                Mechanism::Reliable,
                format!("bulk, BDP {bdp:.0} B over window {window:.0} B, one stream only"),
            )
        }
    } else {
        let rtt = path.srtt.or(path.min_rtt).unwrap_or(prov.assumed_rtt);
        let low_latency = predict::budget(qos, rtt).is_some()
            || matches!(
                qos.profile,
                CapacityProfile::Interactive
                    | CapacityProfile::NonInteractive
                    | CapacityProfile::Streaming
            );
        let tolerated = qos.reliability.max_loss();
        let measured = path.model().loss_rate();
        // Without the stream on the measured path, a channel that tolerates
        // loss stays on datagrams (see `Provision::stream_on_path`).
        let to_tcp = !low_latency && prov.stream_on_path;
        if to_tcp || qos.reliability == Reliability::Full || tolerated <= 0.0 {
            (
                Mechanism::Reliable,
                "not low latency, or no loss tolerated".to_string(),
            )
        } else if tolerated >= measured {
            (
                Mechanism::Plain,
                format!("low latency, tolerates {tolerated} >= loss {measured:.4}"),
            )
        } else {
            (
                Mechanism::Xor(XorLayout::row(PAPER_XOR)),
                format!("low latency, tolerates {tolerated} < loss {measured:.4}"),
            )
        }
    };
    selection(m, prov, qos, path, traffic, why)
}

/// Default budget for Block when the QoS has none: the tunnel's
/// (`TargetConfig::max_delay`).
const BLOCK_DEFAULT_DELAY: Duration = Duration::from_millis(30);

/// XOR matrices tried besides the rows: SMPTE 2022-1's small and large
/// squares, and 1-D columns against long bursts.
const MATRICES: [(u8, u8, bool); 4] = [(4, 4, true), (5, 5, true), (10, 10, true), (10, 10, false)];

/// The model policy's candidates for `qos`, in the stable order ties fall
/// back on.
pub fn candidates(prov: &Provision, qos: &Qos, path: &PathEstimate) -> Vec<Mechanism> {
    let mut out = Vec::with_capacity(24);
    if qos.reliability != Reliability::Full {
        out.push(Mechanism::Plain);
        if let Reliability::MerBand { lo, hi } = qos.reliability {
            out.push(Mechanism::Afec { lo, hi });
        }
        out.extend((2..=10).map(|l| Mechanism::Xor(XorLayout::row(l))));
        out.extend(MATRICES.iter().map(|&(l, d, rows)| {
            Mechanism::Xor(if rows {
                XorLayout::matrix(l, d)
            } else {
                XorLayout::column(l, d)
            })
        }));
        let target = match qos.reliability {
            Reliability::MerBand { lo, hi } => (lo + hi) / 2.0,
            r => r.max_loss(),
        };
        if target > 0.0 && target < 1.0 {
            let rtt = path.srtt.or(path.min_rtt).unwrap_or(prov.assumed_rtt);
            let max_delay = predict::budget(qos, rtt)
                .filter(|d| !d.is_zero())
                .unwrap_or(BLOCK_DEFAULT_DELAY);
            out.push(Mechanism::Block { target, max_delay });
        }
    }
    if qos.reliability == Reliability::Full || prov.stream_on_path {
        out.push(Mechanism::Reliable);
    }
    if is_bulk(qos) {
        // Striping's gain is read from the measured path's loss: where the
        // stream does not cross it, nothing says more connections help.
        if prov.stream_on_path {
            let most = prov.max_streams.min(crate::MAX_STREAMS);
            out.extend((2..=most).map(|n| Mechanism::Striped { streams: n }));
        }
        if prov.reserved {
            out.push(Mechanism::Blast);
        }
    }
    out
}

fn model(prov: &Provision, qos: &Qos, path: &PathEstimate, traffic: &Traffic) -> Selection {
    // Targets for the mechanisms that take one (Block's, AFEC's band):
    // the mean at which independent losses would meet the window.
    let aim = match traffic.window {
        Some(w) => capped(
            qos,
            window_target(qos.reliability.max_loss(), w.msgs, w.risk),
        ),
        None => *qos,
    };
    let scored: Vec<(Mechanism, Prediction, bool)> = candidates(prov, &aim, path)
        .into_iter()
        .map(|m| match (m, qos.reliability) {
            // AFEC's band is held by its receiver (Dyck & Gutwin's NAK and
            // INC), which knows the channel's QoS and not this aim: the
            // session's receiving half is built from the QoS
            // (`endpoint::receive_side`). An AFEC aimed under the band
            // measured the band's MER, not the aim's.
            (Mechanism::Afec { .. }, Reliability::MerBand { lo, hi }) => Mechanism::Afec { lo, hi },
            _ => m,
        })
        .map(|m| {
            let p = predict_with(&m, prov, &aim, path, traffic);
            (m, p, window_meets(qos, &m, &p, traffic.window))
        })
        .collect();
    let delay = |p: &Prediction| p.added_delay;
    let best_tput = scored
        .iter()
        .filter(|s| s.2)
        .filter_map(|s| s.1.throughput)
        .fold(0.0, f64::max);
    let bulk = is_bulk(qos);
    // The first of the least (stable: `min_by` keeps the first of equals).
    let pick = scored
        .iter()
        .filter(|s| s.2)
        .filter(|s| !bulk || s.1.throughput.unwrap_or(0.0) >= 0.9 * best_tput)
        .min_by(|a, b| {
            a.1.overhead
                .total_cmp(&b.1.overhead)
                .then(delay(&a.1).cmp(&delay(&b.1)))
        });
    if let Some((m, p, _)) = pick {
        let why = format!(
            "cheapest meeting: overhead {:.3}, lost {:.2e}",
            p.overhead,
            p.lost()
        );
        return Selection {
            mechanism: *m,
            prediction: *p,
            meets: true,
            reason: why,
        };
    }
    let fail = |p: &Prediction| window_fail(qos, p, traffic.window);
    let fits = scored.iter().any(|s| s.1.rate_ok);
    let pool = || scored.iter().filter(|s| s.1.rate_ok || !fits);
    let least = pool().map(|s| fail(&s.1)).fold(1.0f64, f64::min);
    let (m, p, _) = pool()
        .filter(|s| fail(&s.1) <= least * (1.0 + NONE_MEETS_TOLERANCE) + 1e-12)
        .min_by(|a, b| {
            a.1.loss_cost()
                .total_cmp(&b.1.loss_cost())
                .then(fail(&a.1).total_cmp(&fail(&b.1)))
        })
        .expect("Reliable is always a candidate");
    Selection {
        mechanism: *m,
        prediction: *p,
        meets: false,
        reason: format!(
            "none meets; lost {:.2e} at overhead {:.3}",
            p.lost(),
            p.overhead
        ),
    }
}

/// A QoS whose loss target is divided by `factor` (at least 1): what the
/// controller asks when the channel measured more loss than predicted.
fn tightened(qos: &Qos, factor: f64) -> Qos {
    let f = if factor.is_finite() {
        factor.max(1.0)
    } else {
        1e4
    };
    let mut q = *qos;
    q.reliability = match qos.reliability {
        Reliability::Residual(p) => Reliability::Residual(p / f),
        Reliability::MerBand { lo, hi } => Reliability::MerBand {
            lo: lo / f,
            hi: hi / f,
        },
        r => r,
    };
    q
}

/// The highest mean loss `q` at which a window of `n` messages loses more
/// than the share `target` of them with probability at most `risk`: the
/// largest `q` with `P(Binomial(n, q) > ⌊target·n⌋) <= risk`, by bisection
/// (the tail grows with `q`). Independent losses: a burst loss clumps, so
/// the same mean exceeds the target in fewer windows, and the bound is on
/// the safe side there. `n` is capped at 10⁶ and the allowed count at
/// 10⁴ (the sum's length); never more than `target`.
pub fn window_target(target: f64, n: f64, risk: f64) -> f64 {
    let bad = |x: f64, floor: f64| x.is_nan() || x < floor;
    if bad(target, f64::MIN_POSITIVE) || bad(n, 1.0) || bad(risk, f64::MIN_POSITIVE) {
        return target.max(0.0);
    }
    let n = n.min(1e6).floor();
    let allowed = (target * n * (1.0 + 1e-9)).floor().min(1e4) as u64;
    // P(X <= allowed) for X ~ Binomial(n, q), term by term.
    let cdf = |q: f64| {
        let mut term = (1.0 - q).powf(n);
        let mut sum = term;
        for i in 0..allowed {
            let i = i as f64;
            term *= (n - i) / (i + 1.0) * q / (1.0 - q);
            sum += term;
        }
        sum
    };
    let (mut lo, mut hi) = (0.0, target.min(1.0));
    if 1.0 - cdf(hi) <= risk {
        return hi;
    }
    for _ in 0..50 {
        let mid = (lo + hi) / 2.0;
        if 1.0 - cdf(mid) <= risk {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

/// A QoS whose loss target (a band's top; its floor keeps its ratio to
/// the top) is at most `target`.
fn capped(qos: &Qos, target: f64) -> Qos {
    let mut q = *qos;
    q.reliability = match qos.reliability {
        Reliability::Residual(p) => Reliability::Residual(p.min(target)),
        Reliability::MerBand { lo, hi } if hi > target && hi > 0.0 => Reliability::MerBand {
            lo: lo * target / hi,
            hi: target,
        },
        r => r,
    };
    q
}

/// For the controller: the time since `earlier`, if there was one.
fn since(now: Instant, earlier: Option<Instant>) -> Option<Duration> {
    earlier.map(|e| now.saturating_duration_since(e))
}
