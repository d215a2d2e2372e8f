//! The predictors: what each [`Mechanism`] would deliver on a measured
//! path. Every formula is exact for the fitted two-state chain where the
//! text says "exact", and a stated approximation elsewhere.

use std::time::Duration;

use super::{Prediction, Provision, Traffic};
use crate::control::target::{TwoState, block_loss, choose_code, k_within};
use crate::control::tfrc::throughput;
use crate::session::channel::{block_controller, xor_close_wait};
use crate::session::{Mechanism, PathEstimate, Qos};
use crate::xor::{ColumnTiming, XorLayout};

/// Linux's `TCP_RTO_MIN` (200 ms), the floor of the retransmission timer
/// on the hosts groupwire runs on (RFC 6298 §2.4 asks for 1 s; Linux and
/// most stacks use less).
pub const RTO_MIN: Duration = Duration::from_millis(200);

/// Duplicate ACKs before a fast retransmit (RFC 5681 §3.2).
const DUP_ACKS: f64 = 3.0;

/// Loss rates are capped here so that `loss / (1 − loss)` stays finite.
const MAX_LOSS: f64 = 0.999;

/// What the predictors read of the inputs, sanitised once.
struct Ctx {
    model: TwoState,
    loss: f64,
    rtt: Duration,
    /// Datagrams per second (one message per datagram).
    rate: f64,
    /// Seconds between datagrams.
    gap: f64,
    /// The most recovery may add, in seconds: the delay budget, or the
    /// lifetime less the one-way delay.
    budget: Option<f64>,
    /// Application bytes per second.
    need: f64,
    /// The path's delivered rate, bytes per second.
    delivered: Option<f64>,
    /// The path's capacity estimate, bytes per second.
    capacity: Option<f64>,
    jitter: Duration,
    /// Seconds an XOR sender waits idle before closing a partial group
    /// (the session's rule, [`xor_close_wait`]).
    xor_wait: f64,
    /// The path's chain itself (`model` is thinned to the channel's
    /// packets by [`Ctx::thinned`]), and the other channels' datagrams
    /// per second.
    path_model: TwoState,
    others: f64,
}

impl Ctx {
    fn new(qos: &Qos, path: &PathEstimate, traffic: &Traffic, prov: &Provision) -> Self {
        let model = sane_model(path.model());
        let rate = if traffic.msg_rate.is_finite() && traffic.msg_rate > 0.0 {
            traffic.msg_rate
        } else {
            MIN_RATE
        };
        let rtt = path.srtt.or(path.min_rtt).unwrap_or(prov.assumed_rtt);
        Self {
            loss: model.loss_rate().clamp(0.0, MAX_LOSS),
            model,
            rtt,
            rate,
            gap: 1.0 / rate,
            budget: budget(qos, rtt).map(|d| d.as_secs_f64()),
            // A bulk transfer takes what the path gives: its throughput is
            // the objective, not a rate to fit.
            need: if super::is_bulk(qos) {
                0.0
            } else {
                rate * traffic.msg_size as f64
            },
            delivered: path.delivered.map(|b| b.as_bps() as f64 / 8.0),
            capacity: path.capacity.map(|b| b.as_bps() as f64 / 8.0),
            jitter: path.jitter,
            xor_wait: xor_close_wait(qos).as_secs_f64(),
            path_model: model,
            others: if traffic.others_pkt_rate.is_finite() {
                traffic.others_pkt_rate.max(0.0)
            } else {
                0.0
            },
        }
    }

    /// This context with the chain as the channel's own packets see it
    /// when it sends `per_msg` packets a message: between two of them the
    /// other channels send `others / (rate · per_msg)` on average, so the
    /// channel sees every `1 + that`-th packet of the path's chain
    /// ([`every_nth`], taken at that mean spacing). Beyond the paper, which
    /// predicts per channel as if it were alone: a sparse channel beside a
    /// busy one sees nearly independent losses on a bursty path, and a
    /// prediction on the path's chain overstates what bursts do to it.
    fn thinned(mut self, per_msg: f64) -> Self {
        let spacing = 1.0 + self.others / (self.rate * per_msg.max(1.0));
        self.model = every_nth(&self.path_model, spacing);
        self
    }

    /// Whether `wire` bytes per second fit the delivered rate (always,
    /// when it is not known).
    fn fits(&self, wire: f64) -> bool {
        self.delivered.is_none_or(|d| wire <= d)
    }
}

/// Messages per second assumed for a channel that says it sends none.
const MIN_RATE: f64 = 1e-3;

/// The budget recovery has, as [`super`] defines it: the delay budget,
/// and a lifetime less the one-way delay (half of `rtt`), whichever is
/// shorter.
pub(super) fn budget(qos: &Qos, rtt: Duration) -> Option<Duration> {
    let from_life = qos.lifetime.map(|l| l.saturating_sub(rtt / 2));
    match (qos.max_delay, from_life) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// A chain with every probability in `[0, 1]` (NaN read as 0), so the
/// predictors stay finite whatever the monitor reports.
fn sane_model(m: TwoState) -> TwoState {
    let c = |x: f64| if x.is_nan() { 0.0 } else { x.clamp(0.0, 1.0) };
    TwoState {
        p: c(m.p),
        r: c(m.r),
        loss_good: c(m.loss_good),
        loss_bad: c(m.loss_bad),
    }
}

/// The chain seen every `n`-th packet (`n >= 1`): for a two-state chain
/// with `λ = 1 − p − r`, `Pⁿ` has `P(G→B) = π_B (1 − λⁿ)` and
/// `P(B→G) = π_G (1 − λⁿ)` (the eigen-decomposition of a 2×2 stochastic
/// matrix); the losses per state are unchanged. Exact for whole `n`; a
/// fractional `n` (a mean spacing) takes `λⁿ` at it where `λ >= 0`, and
/// rounds `n` where the chain alternates (`λ < 0`).
pub(super) fn every_nth(m: &TwoState, n: f64) -> TwoState {
    let (pb, s) = (m.p_bad(), m.p + m.r);
    if s <= 0.0 || n.is_nan() || n <= 1.0 {
        return *m;
    }
    let lam = 1.0 - s;
    let n = n.min(1e9);
    let pow = if lam >= 0.0 {
        lam.powf(n)
    } else {
        lam.powi(n.round() as i32)
    };
    let mix = 1.0 - pow;
    TwoState {
        p: (pb * mix).clamp(0.0, 1.0),
        r: ((1.0 - pb) * mix).clamp(0.0, 1.0),
        ..*m
    }
}

/// `P(n consecutive packets are all lost)` (`lost`) or all received
/// (`!lost`) on the chain from its stationary state: `v·Mⁿ⁻¹·1` with
/// `v = (π_s e_s)` and `M_st = P_st e_t`, `e` the per-state chance of the
/// event, by squaring (`O(log n)`). Exact; 1 for `n = 0`.
pub(super) fn run_prob(m: &TwoState, n: u64, lost: bool) -> f64 {
    if n == 0 {
        return 1.0;
    }
    let e = if lost {
        [m.loss_good, m.loss_bad]
    } else {
        [1.0 - m.loss_good, 1.0 - m.loss_bad]
    };
    let pb = m.p_bad();
    let v = [(1.0 - pb) * e[0], pb * e[1]];
    let step = [
        [(1.0 - m.p) * e[0], m.p * e[1]],
        [m.r * e[0], (1.0 - m.r) * e[1]],
    ];
    let pw = mat_pow(step, n - 1);
    let out = v[0] * (pw[0][0] + pw[0][1]) + v[1] * (pw[1][0] + pw[1][1]);
    out.clamp(0.0, 1.0)
}

/// `P(a packet and the packets gaps[0], gaps[0] + gaps[1], … after it
/// are all lost)` on the chain from its stationary state, a gap `g`
/// stepping the chain as [`every_nth`] does. Exact for whole gaps.
pub(super) fn all_lost_at(m: &TwoState, gaps: &[f64]) -> f64 {
    let v = gaps
        .iter()
        .fold(first_lost(m), |v, &g| then_lost(m, v, &every_nth(m, g)));
    (v[0] + v[1]).clamp(0.0, 1.0)
}

/// The forward pass's start: `P(in state s and the packet lost)` from the
/// stationary state.
fn first_lost(m: &TwoState) -> [f64; 2] {
    let pb = m.p_bad();
    [(1.0 - pb) * m.loss_good, pb * m.loss_bad]
}

/// One step of the forward pass: `v` moved by `step`'s transitions, and
/// the next packet lost in each state of `m`.
fn then_lost(m: &TwoState, v: [f64; 2], step: &TwoState) -> [f64; 2] {
    [
        (v[0] * (1.0 - step.p) + v[1] * step.r) * m.loss_good,
        (v[0] * step.p + v[1] * (1.0 - step.r)) * m.loss_bad,
    ]
}

type Mat = [[f64; 2]; 2];

fn mat_mul(a: Mat, b: Mat) -> Mat {
    [
        [
            a[0][0] * b[0][0] + a[0][1] * b[1][0],
            a[0][0] * b[0][1] + a[0][1] * b[1][1],
        ],
        [
            a[1][0] * b[0][0] + a[1][1] * b[1][0],
            a[1][0] * b[0][1] + a[1][1] * b[1][1],
        ],
    ]
}

fn mat_pow(mut a: Mat, mut n: u64) -> Mat {
    let mut out = [[1.0, 0.0], [0.0, 1.0]];
    while n > 0 {
        if n & 1 == 1 {
            out = mat_mul(out, a);
        }
        a = mat_mul(a, a);
        n >>= 1;
    }
    out
}

/// `P(all of the first n packets lost)` for `n` in `0..=len`, by one
/// forward pass (`O(len)`): AFEC's `MER(k)` table.
fn all_lost_table(m: &TwoState, len: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(len + 1);
    out.push(1.0);
    let mut v = first_lost(m);
    for _ in 0..len {
        out.push((v[0] + v[1]).clamp(0.0, 1.0));
        v = then_lost(m, v, m);
    }
    out
}

/// Loss events per packet: the share of packets that are lost right after
/// a received one (a loss run begins), `Σ_s π_s (1 − h_s) Σ_t P_st h_t`.
/// Exact for the chain; TCP halves its window once per run when the run
/// falls within one window, which is what RFC 5348's `p` counts.
pub(super) fn run_starts(m: &TwoState) -> f64 {
    let pb = m.p_bad();
    let (hg, hb) = (m.loss_good, m.loss_bad);
    let from_g = (1.0 - m.p) * hg + m.p * hb;
    let from_b = m.r * hg + (1.0 - m.r) * hb;
    ((1.0 - pb) * (1.0 - hg) * from_g + pb * (1.0 - hb) * from_b).clamp(0.0, 1.0)
}

/// Share of a block's rebuilt sources that arrive later than `budget`,
/// when a source at position `i` of `k` waits `(k − i)` packet gaps (the
/// rest of its block and one repair) and every position is as likely to
/// be lost (true for independent losses, an approximation under bursts).
fn block_late_share(k: usize, gap: f64, budget: Option<f64>) -> f64 {
    let Some(b) = budget else { return 0.0 };
    if k == 0 {
        return 0.0;
    }
    // Waits are 1..=k gaps; those above the budget are late.
    let on_time = (b / gap).floor().clamp(0.0, k as f64);
    (k as f64 - on_time) / k as f64
}

/// The typical wait of a rebuilt source of a block of `k`: the mean of
/// `1..=k` gaps.
fn block_typical(k: usize, gap: f64) -> f64 {
    (k as f64 + 1.0) / 2.0 * gap
}

/// A group code's loss on `model` as two shares of the messages: what it
/// leaves lost ([`block_loss`]'s residual) and the loss *events*, the
/// unrebuilt groups per message (`P(group lost) / k`).
fn group_loss(model: &TwoState, k: usize, m: usize) -> (f64, f64) {
    let (residual, p_fail) = block_loss(model, k, m);
    (residual, p_fail / k.max(1) as f64)
}

/// The mean length of a loss run on `model`: `1 / (1 − P(lost | the
/// previous lost))`, 1 without loss.
fn mean_run(model: &TwoState) -> f64 {
    let loss = model.loss_rate();
    if loss.is_nan() || loss <= 0.0 {
        return 1.0;
    }
    let (p, r) = (model.p.clamp(0.0, 1.0), model.r.clamp(0.0, 1.0));
    let (lg, lb) = (model.loss_good, model.loss_bad);
    let bad = model.p_bad();
    // P(this lost and the next lost), over the state now and next.
    let both = (1.0 - bad) * lg * ((1.0 - p) * lg + p * lb) + bad * lb * (r * lg + (1.0 - r) * lb);
    let stay = (both / loss).clamp(0.0, 1.0 - 1e-9);
    1.0 / (1.0 - stay)
}

/// Messages per loss event of a prediction that leaves `residual` lost in
/// `events` events per message and `late` late (late messages come in
/// the path's loss runs: the rebuilt sources of one burst).
fn clumps(residual: f64, events: f64, late: f64, c: &Ctx) -> f64 {
    let late_events = late / mean_run(&c.model);
    let all = events + late_events;
    if all > 0.0 {
        (residual + late) / all
    } else {
        1.0
    }
}

fn secs(s: f64) -> Duration {
    if s.is_finite() && s > 0.0 {
        Duration::try_from_secs_f64(s).unwrap_or(Duration::MAX)
    } else if s > 0.0 {
        Duration::MAX
    } else {
        Duration::ZERO
    }
}

/// [`predict`](super::predict()) with the host's own [`Provision`].
pub fn predict_with(
    m: &Mechanism,
    prov: &Provision,
    qos: &Qos,
    path: &PathEstimate,
    traffic: &Traffic,
) -> Prediction {
    let c = Ctx::new(qos, path, traffic, prov);
    let per_msg = match *m {
        Mechanism::Xor(layout) => 1.0 + layout.overhead(),
        Mechanism::Reliable | Mechanism::Striped { .. } => {
            (traffic.msg_size as f64 / prov.mss.max(1) as f64).ceil()
        }
        // AFEC piggybacks its copies; Block's repairs are not known before
        // its code is chosen (they space its sources a little more: the
        // prediction is a little pessimistic there).
        _ => 1.0,
    };
    let c = c.thinned(per_msg);
    let p = match *m {
        Mechanism::Plain => Prediction {
            residual: c.loss,
            late: 0.0,
            added_delay: Duration::ZERO,
            overhead: 0.0,
            rate_ok: c.fits(c.need),
            throughput: None,
            cluster: mean_run(&c.model),
        },
        Mechanism::Xor(layout) => xor(&c, layout),
        Mechanism::Afec { lo, hi } => afec(&c, prov, lo, hi),
        Mechanism::Block { target, max_delay } => block(&c, prov, target, max_delay),
        Mechanism::Reliable => stream(&c, prov, traffic, 1),
        Mechanism::Striped { streams } => stream(&c, prov, traffic, streams.max(1)),
        Mechanism::Blast => blast(&c),
    };
    p.sanitised()
}

/// XOR parity (Leigh et al. §4.1; SMPTE 2022-1's layouts).
///
/// - A row of `L` and its parity is an `(L, 1)` MDS code: residual
///   [`block_residual`](crate::control::target::block_residual)`(model, L, 1)`, exact.
/// - A column of `D` packets `L` apart sees the chain every `L`-th packet
///   ([`every_nth`], exact); its parity is taken as the next packet of that
///   chain (it goes out later, spread over the next matrix: so the
///   column's residual is `block_residual(every_nth(model, L), D, 1)`, an
///   approximation in where the parity falls).
/// - With both, the decoder rebuilds at least what either alone rebuilds,
///   so the residual is at most the smaller of the two: the prediction
///   takes that bound (pessimistic; the iterative gain of 2-D decoding is
///   not counted).
///
/// Delay: a source rebuilt from its row waits `1..=L` gaps (see
/// `block_late_share`); from its column, up to `2·L·D` gaps with spread
/// parities (`L·D` immediate), taken as uniform over that span.
///
/// All of that holds when groups fill: the session's sender closes a
/// partial group only after [`xor_close_wait`] with nothing sent, so they
/// do at any message gap shorter than that wait. At a longer gap every
/// message is a group of its own ([`xor_alone`]).
fn xor(c: &Ctx, layout: XorLayout) -> Prediction {
    if c.gap >= c.xor_wait {
        return xor_alone(c, layout);
    }
    let l = usize::from(layout.l.max(1));
    let d = usize::from(layout.d.max(1));
    let plain = (c.loss, c.loss / mean_run(&c.model));
    let row = if layout.rows {
        group_loss(&c.model, l, 1)
    } else {
        plain
    };
    let col = if layout.columns {
        group_loss(&every_nth(&c.model, l as f64), d, 1)
    } else {
        plain
    };
    let (row_res, col_res) = (row.0, col.0);
    let residual = row_res.min(col_res).min(c.loss);
    // The clumps of whichever rebuilds more (its bound is the residual).
    let events = if row_res <= col_res { row.1 } else { col.1 };
    let by_row = if layout.rows {
        (c.loss - row_res).max(0.0)
    } else {
        0.0
    };
    let by_col = (c.loss - residual - by_row).max(0.0);
    let span = (l * d) as f64
        * match layout.column_timing {
            ColumnTiming::Spread => 2.0,
            ColumnTiming::Immediate => 1.0,
        }
        * c.gap;
    let col_late = c.budget.map_or(0.0, |b| (1.0 - b / span).clamp(0.0, 1.0));
    let late = by_row * block_late_share(l, c.gap, c.budget) + by_col * col_late;
    let rebuilt = by_row + by_col;
    let typical = if rebuilt > 0.0 {
        (by_row * block_typical(l, c.gap) + by_col * span / 2.0) / rebuilt
    } else if layout.rows {
        block_typical(l, c.gap)
    } else {
        span / 2.0
    };
    let overhead = layout.overhead();
    Prediction {
        residual,
        late,
        added_delay: secs(typical),
        overhead,
        rate_ok: c.fits(c.need * (1.0 + overhead)),
        throughput: None,
        cluster: clumps(residual, events, late, c),
    }
}

/// XOR when the message gap is at least the sender's idle wait, so every
/// message closes its own group: the group's row and column parity (each
/// a copy of the message) follow it after the wait, before the next
/// message, so they are the channel's next packets. Residual: the message
/// and its copies all lost, [`block_residual`](crate::control::target::block_residual)`(model, 1, copies)`, exact
/// for that order. Rebuilt messages wait the wait: late iff it is past
/// the budget. Overhead: one parity per copy, per message.
fn xor_alone(c: &Ctx, layout: XorLayout) -> Prediction {
    let copies = usize::from(layout.rows) + usize::from(layout.columns);
    // The copies go out back to back the wait after the message, with the
    // other channels' packets between it and them.
    let spacing = 1.0 + c.others * c.xor_wait.max(0.0);
    let gaps: Vec<f64> = (0..copies)
        .map(|i| if i == 0 { spacing } else { 1.0 })
        .collect();
    let residual = all_lost_at(&c.path_model, &gaps).min(c.loss);
    let late = match c.budget {
        Some(b) if c.xor_wait > b => (c.loss - residual).max(0.0),
        _ => 0.0,
    };
    let overhead = copies as f64;
    Prediction {
        residual,
        late,
        added_delay: secs(c.xor_wait),
        overhead,
        rate_ok: c.fits(c.need * (1.0 + overhead)),
        throughput: None,
        // Each message is its own group, a wait from the next.
        cluster: 1.0,
    }
}

/// Dyck & Gutwin's AFEC with a band: a message sent in `k` consecutive
/// packets is lost iff all are (`afec/predictor.rs`'s run-length form);
/// on the chain `MER(k) = P(k consecutive losses)`, exact
/// (`all_lost_table`). The controller aims at the band's middle (as
/// `afec`'s predictive step does) within its size cap
/// ([`Provision::afec_max_size`]); a fractional size `k + f` mixes
/// `MER(k)` and `MER(k + 1)`, solved by the AFEC's own solver. Overhead:
/// the extra copies, `size − 1` message bytes per message (headers not
/// counted). A message rebuilt from its `j`-th later copy waits `j` gaps:
/// the share later than the budget is `P(first j₀ lost) − P(all lost)`
/// with `j₀` the first copy past the budget; typical wait one gap.
fn afec(c: &Ctx, prov: &Provision, lo: f64, hi: f64) -> Prediction {
    let cap = prov.afec_max_size.clamp(1.0, 255.0);
    let table = all_lost_table(&c.model, cap.ceil() as usize + 1);
    let mer = |k: u32| table.get(k as usize).copied().unwrap_or(0.0);
    let size = afec_size_in(&table, lo, hi, cap);
    let k = size.floor().max(1.0) as u32;
    let f = size - f64::from(k);
    let residual = (1.0 - f) * mer(k) + f * mer(k + 1);
    let late_k = |n: u32| match c.budget {
        None => 0.0,
        Some(b) => {
            let j0 = ((b / c.gap).floor() + 1.0).min(f64::from(n)) as u32;
            (mer(j0) - mer(n)).max(0.0)
        }
    };
    let late = (1.0 - f) * late_k(k) + f * late_k(k + 1);
    let overhead = size - 1.0;
    Prediction {
        residual,
        late,
        added_delay: secs(c.gap),
        overhead,
        rate_ok: c.fits(c.need * size),
        throughput: None,
        // A message is lost when all its copies are; the next message's
        // copies are other packets.
        cluster: 1.0,
    }
}

/// The code set size at which AFEC's MER on `model` is the band's middle
/// (its predictive step's aim), at most `cap`: the size [`afec`]'s
/// prediction assumes, and the one the session's AFEC sender starts at
/// (`channel.rs`), so the prediction holds from the switch on and not
/// only once the feedback has climbed there.
pub(crate) fn afec_size(model: &TwoState, lo: f64, hi: f64, cap: f64) -> f64 {
    let cap = cap.clamp(1.0, 255.0);
    afec_size_in(&all_lost_table(model, cap.ceil() as usize + 1), lo, hi, cap)
}

fn afec_size_in(table: &[f64], lo: f64, hi: f64, cap: f64) -> f64 {
    let mer = |k: u32| table.get(k as usize).copied().unwrap_or(0.0);
    let mid = ((lo + hi) / 2.0).max(0.0);
    crate::afec::solve_size(mer, mid, -1.0, 1.0, cap)
        .unwrap_or(cap)
        .clamp(1.0, cap)
}

/// The block target controller (`control::target`): the code it would
/// choose for this chain, target and budget at this rate
/// ([`choose_code`], [`k_within`]), and what that code leaves
/// ([`block_residual`](crate::control::target::block_residual), exact). Delay as for XOR rows, over the block's
/// `k`.
///
/// The controller's configuration is the session's own
/// ([`block_controller`]: blocks close at half the budget), so `k` is
/// at most what the session's sender fills, and the overhead `m / k` is
/// what it sends (repair symbols per source; headers not counted). The
/// predictor follows the mechanism here, not the other way round: the
/// half budget is the session's choice for rebuilt messages to be in time
/// behind a queue (see there), and a prediction for blocks the sender
/// never closes (the tunnel's 90% of the budget, as it was) promised
/// about half the overhead Block then sent.
fn block(c: &Ctx, prov: &Provision, target: f64, max_delay: Duration) -> Prediction {
    let cfg = block_controller(target, max_delay);
    let k_max = k_within(cfg.block_budget(), c.rate, cfg.k_max);
    let code = choose_code(&[c.model], target, k_max, prov.block_max_overhead);
    let residual = code.residual.min(c.loss);
    let rebuilt = (c.loss - residual).max(0.0);
    let overhead = code.m as f64 / code.k.max(1) as f64;
    let late = rebuilt * block_late_share(code.k, c.gap, c.budget);
    let (res, events) = group_loss(&c.model, code.k, code.m);
    let events = if res > 0.0 {
        events * residual / res
    } else {
        0.0
    };
    Prediction {
        residual,
        late,
        added_delay: secs(block_typical(code.k, c.gap)),
        overhead,
        rate_ok: c.fits(c.need * (1.0 + overhead)),
        throughput: None,
        cluster: clumps(residual, events, late, c),
    }
}

/// TCP, one connection or `n` striped (Leigh et al. §4.3).
///
/// - **Throughput**: RFC 5348 §3.1's equation ([`throughput`], `s` the
///   MSS, `t_RTO = 4R`, `b = 1`) at the loss event rate `run_starts` (one
///   window halving per loss run), capped by one window per round trip
///   ([`Provision::max_window`]) and by the delivered rate when known.
///   `n` connections gain over one what `n` times one connection's rate
///   reaches of the room on the path (the delivered rate where known, as
///   the session gives each channel its share there, at most the
///   capacity estimate) over what one reaches of it
///   (each sees the same path loss: the striping gain of Leigh et al.
///   Fig. 7 on a path whose losses are not caused by the transfer
///   itself). Without a capacity estimate nothing says the path carries
///   more than one connection sends, so striping is predicted to gain
///   nothing, and one connection (listed first) is chosen: more
///   connections take more than a fair share of a shared bottleneck, a
///   price worth paying only where one connection cannot fill the path.
/// - **Recovery delay** of a lost segment: the retransmission leaves at
///   `min(RTO, RTT + 3 gaps)` after the original (the third duplicate ACK
///   comes back an RTT after the third later segment; a sparse stream
///   waits for the timer instead, `RTO = max(RTO_MIN, RTT + 4·jitter)` in
///   RFC 6298's form with the jitter for `RTTVAR`), so it arrives that
///   much later. A lost retransmission (another RTO) is not counted.
/// - **Late share** (head-of-line blocking): a message sent at `t` is held
///   past the budget `B` iff a segment sent in the `d − B` before it (or
///   itself) was lost, `d` the recovery delay: `1 − P(n consecutive
///   received)` with `n = ⌈(d − B)·rate⌉` ([`run_prob`], exact on the
///   chain). With striping, the messages are reassembled in order, so the
///   same holds with the per-connection gaps for `d`.
/// - **Overhead**: retransmitted bytes, `loss / (1 − loss)` (ACKs and
///   headers not counted).
fn stream(c: &Ctx, prov: &Provision, traffic: &Traffic, n: u8) -> Prediction {
    let n_f = f64::from(n);
    let mss = prov.mss.max(1) as f64;
    let segs_per_msg = (traffic.msg_size as f64 / mss).ceil().max(1.0);
    let seg_rate = c.rate * segs_per_msg;
    let p_ev = run_starts(&c.model);
    let eq = throughput(mss, c.rtt, p_ev, c.rtt.saturating_mul(4), 1.0);
    let rtt_s = c.rtt.as_secs_f64().max(1e-6);
    let window = prov.max_window as f64 / rtt_s;
    let one = eq.min(window);
    // The room striping can fill: the channel's share of the path where
    // the session gives one (its `delivered`), else the whole capacity.
    let room = c.capacity.map(|cap| c.delivered.unwrap_or(cap).min(cap));
    let gain = match room {
        Some(room) if room > 0.0 && one > 0.0 => (n_f * one).min(room) / one.min(room),
        _ => 1.0,
    };
    let mut tput = one;
    if let Some(d) = c.delivered {
        tput = tput.min(d);
    }
    tput *= gain;
    let rto = RTO_MIN
        .max(c.rtt + c.jitter.saturating_mul(4))
        .as_secs_f64();
    let gaps = DUP_ACKS * n_f / seg_rate;
    let d = rto.min(rtt_s + gaps);
    // A stall holds every message of the `d − B` before the retransmission
    // past the budget: one clump.
    let mut held = 1.0;
    let late = match c.budget {
        // Behind a bulk transfer on the same stream, any wait (`Traffic`).
        Some(_) if traffic.stream_shared_with_bulk => 1.0,
        Some(b) if d > b && c.loss > 0.0 => {
            let n_pkts = ((d - b) * seg_rate).ceil().clamp(1.0, 1e12) as u64;
            held = (d - b) * c.rate;
            1.0 - run_prob(&c.model, n_pkts, false)
        }
        _ => 0.0,
    };
    let overhead = c.loss / (1.0 - c.loss);
    Prediction {
        residual: 0.0,
        late,
        added_delay: secs(d),
        overhead,
        rate_ok: c.need <= tput,
        throughput: Some(tput),
        cluster: held,
    }
}

/// Reliable Blast UDP (Leigh et al. §4.2): blasts at the reserved rate and
/// resends what the receiver's bitmap says is missing, one round trip per
/// round. Throughput: the delivered rate, which must be known (a
/// reservation says how much there is). A lost datagram waits at least
/// the round trip for the bitmap. Overhead: the resent share,
/// `loss / (1 − loss)`.
fn blast(c: &Ctx) -> Prediction {
    let rtt = c.rtt.as_secs_f64();
    let late = match c.budget {
        Some(b) if rtt > b => c.loss,
        _ => 0.0,
    };
    Prediction {
        residual: 0.0,
        late,
        added_delay: c.rtt,
        overhead: c.loss / (1.0 - c.loss),
        rate_ok: c.delivered.is_some_and(|d| c.need <= d),
        throughput: c.delivered,
        cluster: mean_run(&c.model),
    }
}
