//! `tele-immersion`: issue 16's simulator proof, first version. One
//! session ([`Session`], the sans-IO machine of `groupwire_proto::session`)
//! from A to B with the issue's five channels, over a path whose loss,
//! rate and delay change over time (the link schedules of
//! `groupwire_link::schedule`), run once per way of choosing mechanisms:
//!
//! - `model`: the model-based selector ([`Policy::Model`]);
//! - `heuristic`: Leigh et al. §5 item 3's heuristics ([`Policy::Heuristic`]);
//! - `fixed:M`: every channel pinned with [`Session::set_mechanism`] right
//!   after it is opened to mechanism `M` where `M` is valid for its QoS (a
//!   channel for which it is not stays pinned to [`initial_mechanism`], and
//!   that run is not one of its fixed choices);
//! - `stationary`: the model selector again on a path that never changes,
//!   to count flapping.
//!
//! Every run uses the same seed, so the links draw the same loss decisions
//! for the same packets (the loss process is drawn per packet, so two runs
//! that send different packets see different realisations of the same
//! process).
//!
//! **The channels** (the issue's five, Leigh et al. §2's tele-immersion
//! data): a telepointer (`Qos::awareness().mer_band(0.05, 0.06)`, small
//! messages at a steady rate), state (`Qos::low_latency().max_loss(0.001)
//! .max_delay(50 ms)`), a camera (`Qos::stream().rate(..)
//! .max_residual_loss(0.001).max_delay(50 ms)`), edits
//! (`Qos::reliable_ordered()`) and bulk (`Qos::bulk()`: a dataset written
//! now and then in chunks). Every message carries its number and send time;
//! B measures latency on arrival.
//!
//! **Deviations, and why.**
//! - Bulk runs on the session's reliable stream (TCP), shared with edits
//!   and with any channel pinned to Reliable, or striped over several
//!   streams (each its own modelled TCP, [`stream_pair`]) where the
//!   model predicts one stream cannot fill its share of a lossy path, or,
//!   in the `fixed:blast` run, on Reliable Blast UDP, each 16 kB chunk one
//!   transfer at 90% of the monitor's capacity estimate. The path has no
//!   reservation, so neither selector may pick Blast (the model offers it
//!   only with [`Provision::reserved`]); the fixed run shows what it would
//!   do to the other channels on a shared FIFO.
//! - The session marks each channel's packets with its DSCP, but the
//!   bottleneck is one FIFO drop-tail queue, which ignores the marks: bulk
//!   and everything on the stream compete with the real-time channels.
//! - The reverse direction (reports, NAKs, TCP acknowledgements) is
//!   loss-free; it follows the same rate and delay schedules.
//! - `overhead` is the session's own count ([`ChannelStats::wire_bytes`]
//!   over [`ChannelStats::sent_bytes`] less what still waits for the
//!   stream at the end, [`Session::channel_waiting`], less one): datagram mechanisms'
//!   repairs and session headers are in it, but a stream channel's TCP/IP
//!   headers and retransmissions are not (the session hands frames to the
//!   driver's TCP and never sees them), so Reliable's overhead is a lower
//!   bound.
//!
//! **Scoring** ([`score`]), per channel, over 1 s windows of send time after
//! the warm-up (windows in which the channel sent nothing are not
//! scored). A message is *lost* if B never delivered it, and *late* if it
//! came after its deadline: for a channel with a delay budget
//! ([`Qos::max_delay`], what recovery may add), the forward link's
//! propagation delay at its send time plus the budget (so queueing counts
//! against the budget, as it does for the application); for a channel
//! with only a lifetime (the telepointer), the lifetime. A window meets
//! the QoS when, of its messages, the share lost or late is at or under the
//! MER band's top ([`Reliability::MerBand`]; `in_band` also counts those at
//! or above its floor), at or under the residual target
//! ([`Reliability::Residual`]), or zero for [`Reliability::Full`] (every
//! message delivered, however late).
//!
//! **The goal** ([`goal`]): per channel, the model run's share of windows
//! meeting the QoS is at least the best fixed choice's (the fixed run with
//! the highest share; of equals, the least overhead), and its overhead is
//! no more than that choice's; and on the stationary path no channel
//! switches more than once in any minute (60 s sliding window, after the
//! warm-up).

use super::par_map;
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use groupwire_link::link::{LinkConfig, QueueLimit};
use groupwire_link::loss::LossModel;
use groupwire_link::schedule::Schedule;
use groupwire_proto::session::select::{Provision, candidates};
use groupwire_proto::session::{
    ChannelId, ChannelStats, DEFAULT_STREAM_WINDOW, Mechanism, MechanismKind, PathEstimate, PeerId,
    Policy, Qos, Reliability, Session, SessionConfig, SessionEvent, initial_mechanism,
};
use groupwire_proto::xor::XorLayout;
use groupwire_proto::{Bitrate, Instant, Machine, StreamMachine, Transmit};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{Plot, Progress, Report, ScenarioError, Table, serde_duration};
use crate::core::{NodeId, Simulator, addr_of};
use crate::metrics::{LatencyStats, TimeSeries};
use crate::rng;
use crate::stream_node::{StreamMachineNode, stream_pair};
use crate::tcp::TcpConfig;
use crate::topology::PointToPoint;

/// When the application starts sending (the handshake is done well before).
const APP_START: Duration = Duration::from_secs(1);

/// Bytes of a message's own header: its number (4) and send time (8).
const MSG_HEADER: usize = 12;

/// Parameters of the `tele-immersion` scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TeleImmersion {
    /// Link rate, both directions, where no schedule is given.
    pub rate: Bitrate,
    /// One-way propagation delay, where no schedule is given.
    #[serde(with = "serde_duration")]
    pub delay: Duration,
    /// A time-varying rate, both directions, replacing `rate`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_schedule: Option<Schedule<Bitrate>>,
    /// A time-varying one-way delay, both directions, replacing `delay`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delay_schedule: Option<Schedule<Duration>>,
    /// Loss from A to B (the reverse is loss-free).
    pub loss: LossModel,
    /// The bottleneck's drop-tail queue, each direction.
    pub queue: QueueLimit,
    /// How long the application sends.
    #[serde(with = "serde_duration")]
    pub duration: Duration,
    /// Windows before this are not scored (the monitor's first estimates
    /// and the selector's first choice).
    #[serde(with = "serde_duration")]
    pub warmup: Duration,
    /// Time after the last send for what is in flight to arrive.
    #[serde(with = "serde_duration")]
    pub drain: Duration,
    /// The stationary path's loss (its rate and delay are `rate` and
    /// `delay`); `none` with `stationary_duration = 0s` skips it.
    pub stationary_loss: LossModel,
    /// How long the stationary run sends (0: no stationary run).
    #[serde(with = "serde_duration")]
    pub stationary_duration: Duration,
    /// Telepointer updates per second.
    pub telepointer_rate: f64,
    /// Telepointer message size, bytes.
    pub telepointer_size: usize,
    /// State updates per second.
    pub state_rate: f64,
    /// State message size, bytes.
    pub state_size: usize,
    /// The camera's rate (declared in its QoS as well).
    pub camera_rate: Bitrate,
    /// Camera message size, bytes.
    pub camera_size: usize,
    /// Edits per second.
    pub edits_rate: f64,
    /// Edit size, bytes.
    pub edits_size: usize,
    /// Bytes of each bulk dataset.
    pub bulk_size: u64,
    /// A dataset every this long (the first half of it after the start).
    #[serde(with = "serde_duration")]
    pub bulk_every: Duration,
    /// Bulk message (chunk) size, bytes.
    pub bulk_chunk: usize,
    /// The fixed mechanisms, one run each: `plain`, `afec`, `block`,
    /// `reliable`, `blast` (bulk only), or an XOR layout (`xor:3`, `xor:5x5`). `afec` takes the
    /// channel's band and `block` its loss target and delay budget, as the
    /// model policy builds them.
    pub fixed: Vec<String>,
    /// Worker threads for the runs (0: one per core).
    pub threads: usize,
}

impl Default for TeleImmersion {
    fn default() -> Self {
        Self {
            rate: Bitrate::mbps(10),
            delay: Duration::from_millis(20),
            rate_schedule: Some(
                "schedule:120s 10Mbit/s; 60s 4Mbit/s; 60s 10Mbit/s"
                    .parse()
                    .expect("a valid built-in rate schedule"),
            ),
            delay_schedule: Some(
                "schedule:60s 20ms; 120s 40ms; 60s 20ms"
                    .parse()
                    .expect("a valid built-in delay schedule"),
            ),
            loss: "schedule:60s bernoulli:0.1%; 60s bernoulli:2%; 60s gilbert:p=0.0217,r=0.25; 60s bernoulli:0.5%"
                .parse()
                .expect("a valid built-in loss schedule"),
            queue: QueueLimit::Packets(100),
            duration: Duration::from_secs(240),
            warmup: Duration::from_secs(10),
            drain: Duration::from_secs(10),
            stationary_loss: LossModel::bernoulli(0.02),
            stationary_duration: Duration::from_secs(180),
            telepointer_rate: 30.0,
            telepointer_size: 40,
            state_rate: 20.0,
            state_size: 200,
            camera_rate: Bitrate::mbps(2),
            camera_size: 1000,
            edits_rate: 2.0,
            edits_size: 300,
            bulk_size: 1_000_000,
            bulk_every: Duration::from_secs(30),
            bulk_chunk: 16_384,
            fixed: [
                "plain", "afec", "xor:2", "xor:3", "xor:5", "xor:10", "xor:5x5", "block",
                "reliable", "blast",
            ]
                .map(String::from)
                .to_vec(),
            threads: 0,
        }
    }
}

/// A fixed choice as the configuration names it.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Fixed {
    Plain,
    Afec,
    Xor(XorLayout),
    Block,
    Reliable,
    Blast,
}

impl Fixed {
    fn parse(s: &str) -> Result<Self, String> {
        Ok(match s {
            "plain" => Self::Plain,
            "afec" => Self::Afec,
            "block" => Self::Block,
            "reliable" => Self::Reliable,
            "blast" => Self::Blast,
            x => Self::Xor(x.parse::<XorLayout>().map_err(|e| e.0)?),
        })
    }

    /// The mechanism for a channel with `qos`, if valid for it: one of the
    /// model policy's candidates of this kind (for `block` and `afec`
    /// built from the QoS as the policy does), or the layout given.
    /// `blast` is a candidate only where bandwidth is reserved
    /// ([`Provision::reserved`]); its fixed run asks what it would do
    /// here, where none is, so it is judged as if there were.
    fn for_qos(self, qos: &Qos, rtt: Duration) -> Option<Mechanism> {
        let path = PathEstimate::known(rtt, 0.0, 1.0, None);
        let prov = Provision {
            reserved: self == Self::Blast,
            ..Provision::DEFAULT
        };
        let cands = candidates(&prov, qos, &path);
        let kind = match self {
            Self::Plain => MechanismKind::Plain,
            Self::Afec => MechanismKind::Afec,
            Self::Xor(l) => {
                // Any XOR layout is valid where XOR is a candidate.
                return cands
                    .iter()
                    .any(|m| m.kind() == MechanismKind::Xor)
                    .then_some(Mechanism::Xor(l));
            }
            Self::Block => MechanismKind::Block,
            Self::Reliable => MechanismKind::Reliable,
            Self::Blast => MechanismKind::Blast,
        };
        cands.into_iter().find(|m| m.kind() == kind)
    }
}

/// How one run chooses mechanisms.
#[derive(Debug, Clone, PartialEq)]
enum Plan {
    Policy(Policy),
    Fixed(String, Fixed),
}

/// One channel of the application: its name, QoS and what it sends.
#[derive(Debug, Clone)]
struct Spec {
    name: &'static str,
    qos: Qos,
    /// Messages per burst, bytes each, a burst every `period`.
    burst: usize,
    size: usize,
    period: Duration,
    /// The first burst, after the start.
    first: Duration,
}

impl TeleImmersion {
    pub(super) fn validate(&self) -> Result<(), ScenarioError> {
        let invalid = |key, why: String| Err(ScenarioError::Invalid { key, why });
        if self.duration.is_zero() {
            return invalid("duration", "must be positive, e.g. 240s".into());
        }
        if self.warmup >= self.duration {
            return invalid("warmup", "must be shorter than the duration".into());
        }
        for (key, r) in [
            ("telepointer_rate", self.telepointer_rate),
            ("state_rate", self.state_rate),
            ("edits_rate", self.edits_rate),
        ] {
            if !(r > 0.0 && r <= 10_000.0) {
                return invalid(key, format!("must be in (0, 10000] per second, got {r}"));
            }
        }
        for (key, s) in [
            ("telepointer_size", self.telepointer_size),
            ("state_size", self.state_size),
            ("camera_size", self.camera_size),
            ("edits_size", self.edits_size),
        ] {
            if !(MSG_HEADER..=1200).contains(&s) {
                return invalid(key, format!("must be {MSG_HEADER} to 1200 bytes, got {s}"));
            }
        }
        if !(MSG_HEADER..=1 << 20).contains(&self.bulk_chunk) {
            return invalid("bulk_chunk", format!("must be {MSG_HEADER} bytes to 1 MiB"));
        }
        if self.bulk_every.is_zero() {
            return invalid("bulk_every", "must be positive".into());
        }
        if !(1.0..=10_000.0).contains(&self.camera_msgs_per_sec()) {
            return invalid(
                "camera_rate",
                "must give 1 to 10000 messages per second".into(),
            );
        }
        if matches!(self.queue, QueueLimit::Packets(0))
            || matches!(self.queue, QueueLimit::Bytes(b) if b < 1500)
        {
            return invalid("queue", "must hold at least one packet".into());
        }
        if self.fixed.is_empty() {
            return invalid("fixed", "name at least one mechanism".into());
        }
        for f in &self.fixed {
            Fixed::parse(f).map_err(|why| ScenarioError::Invalid { key: "fixed", why })?;
        }
        self.loss.build()?;
        self.stationary_loss.build()?;
        Ok(())
    }

    fn camera_msgs_per_sec(&self) -> f64 {
        self.camera_rate.as_bps() as f64 / 8.0 / self.camera_size.max(1) as f64
    }

    /// Runs: the two policies, each fixed choice, and the stationary one.
    pub(super) fn total_runs(&self) -> u64 {
        2 + self.fixed.len() as u64 + u64::from(!self.stationary_duration.is_zero())
    }

    fn specs(&self) -> Vec<Spec> {
        let budget = Duration::from_millis(50);
        let every = |r: f64| Duration::from_secs_f64(1.0 / r);
        let chunks = self.bulk_size.div_ceil(self.bulk_chunk as u64).max(1) as usize;
        vec![
            Spec {
                name: "telepointer",
                qos: Qos::awareness().mer_band(0.05, 0.06),
                burst: 1,
                size: self.telepointer_size,
                period: every(self.telepointer_rate),
                first: Duration::ZERO,
            },
            Spec {
                name: "state",
                qos: Qos::low_latency().max_loss(0.001).max_delay(budget),
                burst: 1,
                size: self.state_size,
                period: every(self.state_rate),
                first: Duration::ZERO,
            },
            Spec {
                name: "camera",
                qos: Qos::stream()
                    .rate(self.camera_rate)
                    .max_residual_loss(0.001)
                    .max_delay(budget),
                burst: 1,
                size: self.camera_size,
                period: every(self.camera_msgs_per_sec()),
                first: Duration::ZERO,
            },
            Spec {
                name: "edits",
                qos: Qos::reliable_ordered(),
                burst: 1,
                size: self.edits_size,
                period: every(self.edits_rate),
                first: Duration::ZERO,
            },
            Spec {
                name: "bulk",
                qos: Qos::bulk(),
                burst: chunks,
                size: self.bulk_chunk,
                period: self.bulk_every,
                first: self.bulk_every / 2,
            },
        ]
    }

    /// The forward link for a path: rate, delay and loss, with schedules.
    fn links(&self, stationary: bool) -> (LinkConfig, LinkConfig) {
        let mut base = LinkConfig::new()
            .rate(self.rate)
            .latency(self.delay)
            .queue(self.queue.clone());
        if !stationary {
            base = base.schedules(self.rate_schedule.as_ref(), self.delay_schedule.as_ref());
        }
        let loss = if stationary {
            self.stationary_loss.clone()
        } else {
            self.loss.clone()
        };
        (base.clone().loss(loss), base)
    }

    fn run_one(&self, seed: u64, plan: &Plan, stationary: bool) -> RunOut {
        let duration = if stationary {
            self.stationary_duration
        } else {
            self.duration
        };
        let specs = self.specs();
        let mut sim = Simulator::new(seed);
        let a = sim.next_node_id();
        let b = NodeId(a.0 + 1);
        let (fwd, rev) = self.links(stationary);
        let rtt = fwd.delay_at(Instant::ZERO) + rev.delay_at(Instant::ZERO);
        let mut cfg_a = SessionConfig::new(rng::derive_seed(seed, "tele-session", 0));
        cfg_a.policy = match plan {
            Plan::Policy(p) => Some(*p),
            Plan::Fixed(..) => None,
        };
        cfg_a.stream_window = Some(DEFAULT_STREAM_WINDOW);
        let mut cfg_b = SessionConfig::new(rng::derive_seed(seed, "tele-session", 1));
        cfg_b.policy = None;
        cfg_b.stream_window = Some(DEFAULT_STREAM_WINDOW);
        let end = Instant::ZERO + APP_START + duration;
        let mut app_a = App::sender(Session::new(cfg_a), &specs, end);
        app_a.connect(addr_of(b), plan, rtt);
        let app_b = App::receiver(Session::new(cfg_b), &specs);
        let (na, nb) = stream_pair(a, app_a, b, app_b, &stream_tcp(), 1);
        sim.add_node(Box::new(na));
        sim.add_node(Box::new(nb));
        PointToPoint::build(&mut sim, a, b, fwd.clone(), rev)
            .expect("the loss models were validated");
        sim.run_until(end + self.drain, &mut |_| {});
        let view = sim.view();
        let na = view
            .node::<StreamMachineNode<App>>(a)
            .expect("node a is the sender");
        let nb = view
            .node::<StreamMachineNode<App>>(b)
            .expect("node b is the receiver");
        let (sa, sb) = (na.machine(), nb.machine());
        let channels = specs
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let id = sa.ids[i];
                let budget = match (s.qos.max_delay, s.qos.lifetime) {
                    (Some(d), _) => Budget::Added(d),
                    (None, Some(l)) => Budget::Lifetime(l),
                    (None, None) => Budget::None,
                };
                let deadlines: Vec<Option<u64>> = sa.sent[i]
                    .iter()
                    .map(|&t| budget.deadline(t, |t| fwd.delay_at(Instant::from_nanos(t))))
                    .collect();
                ChannelLog {
                    sent: sa.sent[i].clone(),
                    deadline: deadlines,
                    got: sb.got[i].clone(),
                    stats: id
                        .and_then(|c| sa.session.channel_stats(c))
                        .unwrap_or_default(),
                    waiting: id.map_or(0, |c| sa.session.channel_waiting(c)),
                    mechanism: id.and_then(|c| sa.session.mechanism(c)),
                    switches: sa.switches[i].clone(),
                }
            })
            .collect();
        let tcp = na.control_sender().stats();
        RunOut {
            path: sa.path.clone(),
            channels,
            stream_timeouts: tcp.timeouts,
            stream_retransmits: tcp.retransmits,
            refused: sa.refused,
            events: sim.stats().events,
            end,
        }
    }

    pub(super) fn run(&self, seed: u64, progress: Progress<'_>) -> Result<Report, ScenarioError> {
        let mut plans: Vec<(String, Plan, bool)> = vec![
            ("model".into(), Plan::Policy(Policy::Model), false),
            ("heuristic".into(), Plan::Policy(Policy::Heuristic), false),
        ];
        for f in &self.fixed {
            let fixed =
                Fixed::parse(f).map_err(|why| ScenarioError::Invalid { key: "fixed", why })?;
            plans.push((format!("fixed:{f}"), Plan::Fixed(f.clone(), fixed), false));
        }
        if !self.stationary_duration.is_zero() {
            plans.push(("stationary".into(), Plan::Policy(Policy::Model), true));
        }
        let outs = par_map(self.threads, plans.len(), |i| {
            self.run_one(seed, &plans[i].1, plans[i].2)
        });
        progress(Instant::from_nanos(self.total_runs()));
        Ok(self.report(seed, &plans, &outs))
    }

    fn report(&self, seed: u64, plans: &[(String, Plan, bool)], outs: &[RunOut]) -> Report {
        let specs = self.specs();
        let start = (Instant::ZERO + APP_START + self.warmup).as_nanos();
        let rtt = self.delay * 2;
        let mut rows = Vec::new();
        let mut switch_rows = Vec::new();
        // scores[run][channel], None where the run's fixed choice was not
        // valid for the channel.
        let mut scores: Vec<Vec<Option<ChannelScore>>> = Vec::new();
        for ((name, plan, _), out) in plans.iter().zip(outs) {
            let mut per = Vec::new();
            for (i, spec) in specs.iter().enumerate() {
                let valid = match plan {
                    Plan::Policy(_) => true,
                    Plan::Fixed(_, f) => f.for_qos(&spec.qos, rtt).is_some(),
                };
                let log = &out.channels[i];
                let sc = score(&spec.qos, log, start, out.end.as_nanos());
                let label = match plan {
                    Plan::Policy(_) => name.clone(),
                    Plan::Fixed(..) => log.mechanism.map_or("-".into(), |m| m.to_string()),
                };
                rows.push(vec![
                    json!(name),
                    json!(spec.name),
                    json!(label),
                    json!(valid),
                    json!(sc.windows),
                    json!(sc.met),
                    sc.in_band.map_or(Value::Null, |x| json!(x)),
                    json!(sc.sent),
                    json!(sc.lost),
                    json!(sc.late),
                    json!(sc.overhead),
                    json!(sc.mean_ms),
                    json!(sc.p99_ms),
                    json!(sc.switches),
                    json!(sc.max_per_minute),
                ]);
                if let Plan::Policy(_) = plan {
                    for &(t, from, to) in &log.switches {
                        switch_rows.push(vec![
                            json!(name),
                            json!(spec.name),
                            json!(t as f64 / 1e9),
                            json!(from.to_string()),
                            json!(to.to_string()),
                        ]);
                    }
                }
                per.push(valid.then_some(sc));
            }
            scores.push(per);
        }
        let fixed_runs: Vec<usize> = plans
            .iter()
            .enumerate()
            .filter(|(_, p)| matches!(p.1, Plan::Fixed(..)))
            .map(|(i, _)| i)
            .collect();
        let mut goal_rows = Vec::new();
        let mut summary = serde_json::Map::new();
        let mut all_met = 0;
        let mut best_runs = Vec::new();
        for (i, spec) in specs.iter().enumerate() {
            let cands: Vec<Candidate> = fixed_runs
                .iter()
                .filter_map(|&r| {
                    scores[r][i].as_ref().map(|s| Candidate {
                        run: plans[r].0.clone(),
                        met: s.met,
                        overhead: s.overhead,
                    })
                })
                .collect();
            let model = scores[0][i]
                .as_ref()
                .expect("the model run scores every channel");
            let heur = scores[1][i]
                .as_ref()
                .expect("the heuristic run scores every channel");
            let g = goal(
                &Candidate {
                    run: "model".into(),
                    met: model.met,
                    overhead: model.overhead,
                },
                &cands,
            );
            let best = g.best.clone();
            best_runs.push(
                best.as_ref()
                    .and_then(|b| plans.iter().position(|p| p.0 == b.run)),
            );
            all_met += usize::from(g.qos && g.overhead);
            summary.insert(
                format!("{}_goal_met", spec.name),
                json!(g.qos && g.overhead),
            );
            goal_rows.push(vec![
                json!(spec.name),
                json!(best.as_ref().map(|b| b.run.clone())),
                json!(best.as_ref().map(|b| b.met)),
                json!(best.as_ref().map(|b| b.overhead)),
                json!(model.met),
                json!(model.overhead),
                json!(heur.met),
                json!(heur.overhead),
                json!(g.qos),
                json!(g.overhead),
            ]);
        }
        summary.insert("channels_meeting_goal".into(), json!(all_met));
        summary.insert("channels".into(), json!(specs.len()));
        let stationary = plans.iter().position(|p| p.2);
        if let Some(s) = stationary {
            let flaps = scores[s]
                .iter()
                .flatten()
                .map(|c| c.max_per_minute)
                .max()
                .unwrap_or(0);
            summary.insert("stationary_max_switches_per_minute".into(), json!(flaps));
            summary.insert("stationary_no_flapping".into(), json!(flaps <= 1));
        }
        summary.insert(
            "refused_sends".into(),
            json!(outs.iter().map(|o| o.refused).sum::<u64>()),
        );
        summary.insert(
            "events".into(),
            json!(outs.iter().map(|o| o.events).sum::<u64>()),
        );
        let run_rows = plans
            .iter()
            .zip(outs)
            .map(|(p, o)| {
                vec![
                    json!(p.0),
                    json!(o.stream_timeouts),
                    json!(o.stream_retransmits),
                    json!(o.refused),
                    json!(o.events),
                ]
            })
            .collect();
        let tables = vec![
            Table {
                file: "goal".into(),
                columns: [
                    "channel",
                    "best_fixed",
                    "best_fixed_met",
                    "best_fixed_overhead",
                    "model_met",
                    "model_overhead",
                    "heuristic_met",
                    "heuristic_overhead",
                    "qos_goal",
                    "overhead_goal",
                ]
                .map(String::from)
                .to_vec(),
                rows: goal_rows,
            },
            Table {
                file: "channels".into(),
                columns: [
                    "run",
                    "channel",
                    "mechanism",
                    "valid",
                    "windows",
                    "qos_met",
                    "in_band",
                    "sent",
                    "lost",
                    "late",
                    "overhead",
                    "mean_ms",
                    "p99_ms",
                    "switches",
                    "max_switches_per_min",
                ]
                .map(String::from)
                .to_vec(),
                rows,
            },
            Table {
                file: "runs".into(),
                columns: [
                    "run",
                    "stream_timeouts",
                    "stream_retransmits",
                    "refused_sends",
                    "events",
                ]
                .map(String::from)
                .to_vec(),
                rows: run_rows,
            },
            Table {
                file: "switches".into(),
                columns: ["run", "channel", "t_s", "from", "to"]
                    .map(String::from)
                    .to_vec(),
                rows: switch_rows,
            },
        ];
        let mut plots: Vec<Plot> = specs
            .iter()
            .enumerate()
            .map(|(i, spec)| Plot {
                file: format!("mechanism_{}", spec.name),
                title: format!("{}: mechanism in use", spec.name),
                x_label: "time (s)".into(),
                y_label: "mechanism (0 plain, 1 afec, 2 xor, 3 block, 4 reliable)".into(),
                series: plans
                    .iter()
                    .zip(outs)
                    .filter(|(p, _)| matches!(p.1, Plan::Policy(_)))
                    .map(|(p, o)| mechanism_series(&p.0, &o.channels[i], o.end))
                    .collect(),
                ..Default::default()
            })
            .collect();
        for (i, spec) in specs.iter().enumerate() {
            let runs = plans.iter().enumerate().filter(|(r, p)| {
                matches!(p.1, Plan::Policy(_)) && !p.2 || best_runs[i] == Some(*r)
            });
            plots.push(Plot {
                file: format!("qos_{}", spec.name),
                title: format!(
                    "{}: share of 1 s windows meeting the QoS, per 10 s",
                    spec.name
                ),
                x_label: "time (s)".into(),
                y_label: "share of windows met".into(),
                series: runs
                    .filter_map(|(r, p)| Some(met_series(&p.0, &scores[r][i].as_ref()?.per_window)))
                    .collect(),
                ..Default::default()
            });
        }
        plots.extend(self.monitor_plots(&outs[0]));
        Report {
            scenario: "tele-immersion".into(),
            seed,
            summary,
            tables,
            plots,
        }
    }
}

impl TeleImmersion {
    /// What the model run's resource monitor estimated, beside what the
    /// path was: loss rate, and the capacity against the link's rate.
    fn monitor_plots(&self, out: &RunOut) -> Vec<Plot> {
        let (fwd, _) = self.links(false);
        let mut est_loss = TimeSeries::new("estimate");
        let mut est_cap = TimeSeries::new("capacity estimate");
        let mut link = TimeSeries::new("link rate");
        let mut queue = TimeSeries::new("queueing delay (ms)");
        for (t, e) in &out.path {
            est_loss.push(*t, 100.0 * e.model().loss_rate());
            if let Some(c) = e.capacity {
                est_cap.push(*t, c.as_bps() as f64 / 1e6);
            }
            if let Some(r) = fwd.rate_at(Instant::ZERO + Duration::from_secs_f64(*t)) {
                link.push(*t, r.as_bps() as f64 / 1e6);
            }
            if let (Some(s), Some(m)) = (e.srtt, e.min_rtt) {
                queue.push(*t, s.saturating_sub(m).as_secs_f64() * 1e3);
            }
        }
        vec![
            Plot {
                file: "monitor_loss".into(),
                title: "model run: the monitor's loss estimate (A to B)".into(),
                x_label: "time (s)".into(),
                y_label: "loss (%)".into(),
                series: vec![est_loss],
                ..Default::default()
            },
            Plot {
                file: "monitor_capacity".into(),
                title: "model run: capacity as the monitor saw it, and the link".into(),
                x_label: "time (s)".into(),
                y_label: "Mbit/s; ms".into(),
                series: vec![est_cap, link, queue],
                ..Default::default()
            },
        ]
    }
}

/// The stream's TCP: Nagle off (the session's frames are latency-bound,
/// `TCP_NODELAY`) and a 40 ms delayed ACK, Linux's `TCP_DELACK_MIN`, beside
/// the model's 200 ms minimum RTO (Linux's `TCP_RTO_MIN`). The model's
/// default delayed ACK is ns-3's 200 ms, which ns-3 pairs with a 1 s
/// minimum RTO: with both at 200 ms, a timeout leaves one segment in
/// flight, the receiver holds its ACK as long as the timer runs, and the
/// timer fires again first, so after a burst of drops this stream sat at
/// one segment per timeout for the rest of a run (hundreds of spurious
/// timeouts; `the_stream_delivers_every_edit_on_a_clean_path` fails with
/// the default).
fn stream_tcp() -> TcpConfig {
    let mut c = TcpConfig::default().nagle(false);
    c.delayed_ack = Some(Duration::from_millis(40));
    c
}

/// The mechanism in use over time as a step line (y: its wire number).
fn mechanism_series(name: &str, log: &ChannelLog, end: Instant) -> TimeSeries {
    let mut s = TimeSeries::new(name);
    let first = log
        .switches
        .first()
        .map(|sw| sw.1)
        .or(log.mechanism)
        .map_or(0.0, |m| f64::from(m.kind() as u8));
    s.push(0.0, first);
    for &(t, from, to) in &log.switches {
        let t = t as f64 / 1e9;
        s.push(t, f64::from(from.kind() as u8));
        s.push(t, f64::from(to.kind() as u8));
    }
    let last = log.mechanism.map_or(first, |m| f64::from(m.kind() as u8));
    s.push(end.as_secs_f64(), last);
    s
}

/// The share of windows met in each 10 s bin, at the bin's start.
fn met_series(name: &str, windows: &[(f64, u64, bool)]) -> TimeSeries {
    const BIN: f64 = 10.0;
    let mut bins: BTreeMap<u64, (u32, u32)> = BTreeMap::new();
    for &(t, _, ok) in windows {
        let b = bins.entry((t / BIN) as u64).or_default();
        b.0 += u32::from(ok);
        b.1 += 1;
    }
    let mut s = TimeSeries::new(name);
    for (b, (met, n)) in bins {
        s.push(b as f64 * BIN, f64::from(met) / f64::from(n));
    }
    s
}

/// What one run left for scoring.
#[derive(Debug, Clone)]
struct RunOut {
    channels: Vec<ChannelLog>,
    /// The sender's path estimate once a second.
    path: Vec<(f64, PathEstimate)>,
    /// The A-to-B stream's retransmission timeouts and retransmitted
    /// segments (the simulator's TCP model).
    stream_timeouts: u64,
    stream_retransmits: u64,
    refused: u64,
    events: u64,
    /// When the application stopped sending.
    end: Instant,
}

/// One channel's record of a run: what A sent and B got.
#[derive(Debug, Clone, Default)]
struct ChannelLog {
    /// Send time (ns) of each message, by its number.
    sent: Vec<u64>,
    /// Its deadline (ns), if the channel has a delay budget or lifetime.
    deadline: Vec<Option<u64>>,
    /// Each delivery at B: the message number and its arrival time (ns).
    got: Vec<(u32, u64)>,
    /// A's counters for the channel.
    stats: ChannelStats,
    /// Bytes of its messages still waiting for the stream at the end
    /// (never on the wire, so not in the overhead's denominator).
    waiting: usize,
    /// The mechanism at the end.
    mechanism: Option<Mechanism>,
    /// A's mechanism changes: time (ns), from, to.
    switches: Vec<(u64, Mechanism, Mechanism)>,
}

/// How a message's deadline is set.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Budget {
    /// Propagation delay at the send time plus this (a `max_delay`).
    Added(Duration),
    /// Send time plus this (a lifetime).
    Lifetime(Duration),
    None,
}

impl Budget {
    fn deadline(self, sent: u64, prop: impl Fn(u64) -> Duration) -> Option<u64> {
        let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        match self {
            Self::Added(d) => Some(sent.saturating_add(ns(prop(sent) + d))),
            Self::Lifetime(d) => Some(sent.saturating_add(ns(d))),
            Self::None => None,
        }
    }
}

/// One channel's measures in one run.
#[derive(Debug, Clone, PartialEq)]
struct ChannelScore {
    /// 1 s windows scored.
    windows: u64,
    /// Share of them meeting the QoS.
    met: f64,
    /// For a MER band: share of windows inside it.
    in_band: Option<f64>,
    /// Messages sent in scored windows.
    sent: u64,
    /// Share of them never delivered.
    lost: f64,
    /// Share delivered after the deadline.
    late: f64,
    /// Extra wire bytes per application byte (the whole run).
    overhead: f64,
    /// Latency of the delivered scored messages, ms.
    mean_ms: f64,
    p99_ms: f64,
    /// Mechanism changes after the warm-up.
    switches: u64,
    /// The most in any 60 s.
    max_per_minute: u64,
    /// Each scored window: its start (s after the start of the run), its
    /// messages, and whether it met the QoS.
    per_window: Vec<(f64, u64, bool)>,
}

/// Scores `log` against `qos` over 1 s windows of send time from `start`
/// to `end` (ns); see the module docs.
fn score(qos: &Qos, log: &ChannelLog, start: u64, end: u64) -> ChannelScore {
    const WINDOW: u64 = 1_000_000_000;
    let mut arrival: Vec<Option<u64>> = vec![None; log.sent.len()];
    for &(n, t) in &log.got {
        if let Some(a) = arrival.get_mut(n as usize) {
            *a = Some(a.map_or(t, |x: u64| x.min(t)));
        }
    }
    // Per window: messages, lost or late.
    let mut windows: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    let (mut sent, mut lost, mut late) = (0u64, 0u64, 0u64);
    let mut lat = LatencyStats::new();
    let full = qos.reliability == Reliability::Full;
    for (i, &t) in log.sent.iter().enumerate() {
        if t < start || t >= end {
            continue;
        }
        sent += 1;
        let w = windows.entry((t - start) / WINDOW).or_default();
        w.0 += 1;
        match arrival[i] {
            None => {
                lost += 1;
                w.1 += 1;
            }
            Some(a) => {
                lat.record(Duration::from_nanos(a.saturating_sub(t)));
                let is_late = log
                    .deadline
                    .get(i)
                    .copied()
                    .flatten()
                    .is_some_and(|d| a > d);
                if is_late {
                    late += 1;
                    w.1 += u64::from(!full);
                }
            }
        }
    }
    let (mut met, mut in_band) = (0u64, 0u64);
    let mut per_window = Vec::with_capacity(windows.len());
    for (&w, &(n, bad)) in &windows {
        let share = bad as f64 / n as f64;
        let ok = match qos.reliability {
            Reliability::Full => bad == 0,
            r => share <= r.max_loss() * (1.0 + 1e-9) + 1e-12,
        };
        met += u64::from(ok);
        per_window.push(((start + w * WINDOW) as f64 / 1e9, n, ok));
        if let Reliability::MerBand { lo, .. } = qos.reliability {
            in_band += u64::from(ok && share >= lo * (1.0 - 1e-9));
        }
    }
    let nw = windows.len() as u64;
    let share = |x: u64, of: u64| if of == 0 { 0.0 } else { x as f64 / of as f64 };
    let times: Vec<u64> = log
        .switches
        .iter()
        .map(|s| s.0)
        .filter(|&t| t >= start)
        .collect();
    let l = lat.summary();
    ChannelScore {
        windows: nw,
        met: share(met, nw),
        in_band: matches!(qos.reliability, Reliability::MerBand { .. }).then(|| share(in_band, nw)),
        sent,
        lost: share(lost, sent),
        late: share(late, sent),
        overhead: match log.stats.sent_bytes.saturating_sub(log.waiting as u64) {
            0 => 0.0,
            on_wire => log.stats.wire_bytes as f64 / on_wire as f64 - 1.0,
        },
        mean_ms: l.mean_ms,
        p99_ms: l.p99_ms,
        switches: times.len() as u64,
        max_per_minute: max_in_window(&times, 60_000_000_000),
        per_window,
    }
}

/// The most of the sorted `times` in any half-open span of `span`.
fn max_in_window(times: &[u64], span: u64) -> u64 {
    let mut best = 0;
    let mut lo = 0;
    for hi in 0..times.len() {
        while times[hi] - times[lo] >= span {
            lo += 1;
        }
        best = best.max(hi + 1 - lo);
    }
    best as u64
}

/// A choice's result on one channel, for [`goal`].
#[derive(Debug, Clone, PartialEq)]
struct Candidate {
    run: String,
    met: f64,
    overhead: f64,
}

/// The goal's verdict on one channel.
#[derive(Debug, Clone, PartialEq)]
struct Goal {
    /// The best fixed choice: the highest share met, of equals the least
    /// overhead (then the first named).
    best: Option<Candidate>,
    /// The model met the QoS at least as often.
    qos: bool,
    /// ... at no more overhead.
    overhead: bool,
}

/// Issue 16's goal for one channel: `model` against the best of `fixed`.
/// Without a fixed choice the goal holds.
fn goal(model: &Candidate, fixed: &[Candidate]) -> Goal {
    let best = fixed
        .iter()
        .fold(None::<&Candidate>, |b, c| match b {
            Some(b) if b.met > c.met || (b.met == c.met && b.overhead <= c.overhead) => Some(b),
            _ => Some(c),
        })
        .cloned();
    let (qos, overhead) = match &best {
        None => (true, true),
        Some(b) => (
            model.met >= b.met - 1e-12,
            model.overhead <= b.overhead + 1e-9,
        ),
    };
    Goal {
        best,
        qos,
        overhead,
    }
}

/// The application on either end, around the session: A sends each
/// channel's messages on schedule and records its mechanism changes; B
/// opens the same channels and records what arrives.
#[derive(Debug)]
struct App {
    session: Session,
    specs: Vec<Spec>,
    /// A: this side's channels, by spec index.
    ids: Vec<Option<ChannelId>>,
    /// A: next send of each channel.
    next: Vec<Instant>,
    /// A: when sending stops.
    end: Instant,
    /// A: send times (ns) by message number.
    sent: Vec<Vec<u64>>,
    /// A: sends the session refused.
    refused: u64,
    /// A: mechanism changes per channel.
    switches: Vec<Vec<(u64, Mechanism, Mechanism)>>,
    /// B: channel number here -> spec index.
    by_local: BTreeMap<u16, usize>,
    /// B: deliveries per spec: message number, arrival (ns).
    got: Vec<Vec<(u32, u64)>>,
    /// A: the monitor's estimate of the path once a second (s, estimate).
    path: Vec<(f64, PathEstimate)>,
    sender: bool,
}

impl App {
    fn new(session: Session, specs: &[Spec], sender: bool, end: Instant) -> Self {
        let n = specs.len();
        let start = Instant::ZERO + APP_START;
        Self {
            session,
            specs: specs.to_vec(),
            ids: vec![None; n],
            next: specs.iter().map(|s| start + s.first).collect(),
            end,
            sent: vec![Vec::new(); n],
            refused: 0,
            switches: vec![Vec::new(); n],
            by_local: BTreeMap::new(),
            got: vec![Vec::new(); n],
            path: Vec::new(),
            sender,
        }
    }

    fn sender(session: Session, specs: &[Spec], end: Instant) -> Self {
        Self::new(session, specs, true, end)
    }

    fn receiver(session: Session, specs: &[Spec]) -> Self {
        Self::new(session, specs, false, Instant::ZERO)
    }

    /// A's set-up at time zero: connect, open the channels, pin them.
    fn connect(&mut self, to: SocketAddr, plan: &Plan, rtt: Duration) {
        let now = Instant::ZERO;
        let peer = self
            .session
            .connect(now, to)
            .expect("a fresh session connects");
        for (i, spec) in self.specs.iter().enumerate() {
            let ch = self
                .session
                .open_channel(now, peer, spec.name, spec.qos)
                .expect("the channels' QoS are valid");
            self.ids[i] = Some(ch);
            if let Plan::Fixed(_, f) = plan {
                let m = f
                    .for_qos(&spec.qos, rtt)
                    .unwrap_or_else(|| initial_mechanism(&spec.qos));
                self.session
                    .set_mechanism(now, ch, m)
                    .expect("a candidate mechanism installs");
            }
        }
        self.take_events(now);
    }

    /// Handles what the session told us.
    fn take_events(&mut self, now: Instant) {
        while let Some(e) = self.session.poll_event() {
            match e {
                SessionEvent::PeerConnected { peer, .. } if !self.sender => {
                    self.open_here(now, peer)
                }
                SessionEvent::ChannelOpened { channel, name } => {
                    if let Some(i) = self.specs.iter().position(|s| s.name == name) {
                        self.by_local.insert(channel.id, i);
                    }
                }
                SessionEvent::MechanismChanged { channel, from, to } => {
                    if let Some(i) = self.ids.iter().position(|c| *c == Some(channel)) {
                        self.switches[i].push((now.as_nanos(), from, to));
                    }
                }
                SessionEvent::Message {
                    channel, payload, ..
                } => {
                    let (Some(&i), Some(n), Some(t)) = (
                        self.by_local.get(&channel.id),
                        payload.get(..4),
                        payload.get(4..12),
                    ) else {
                        continue;
                    };
                    let n = u32::from_be_bytes(n.try_into().expect("4 bytes"));
                    let t = u64::from_be_bytes(t.try_into().expect("8 bytes"));
                    if t <= now.as_nanos() {
                        self.got[i].push((n, now.as_nanos()));
                    }
                }
                _ => {}
            }
        }
    }

    /// B: opens the same channels (same names and QoS, so ordered
    /// channels are delivered in order), unless the peer's Open came first.
    fn open_here(&mut self, now: Instant, peer: PeerId) {
        for (i, spec) in self.specs.iter().enumerate() {
            if self.by_local.values().any(|&j| j == i) {
                continue;
            }
            if let Ok(ch) = self.session.open_channel(now, peer, spec.name, spec.qos) {
                self.by_local.insert(ch.id, i);
            }
        }
    }

    /// A: sends every message due by `now`.
    fn send_due(&mut self, now: Instant) {
        if !self.sender {
            return;
        }
        let secs = now.as_secs_f64();
        if self.path.last().is_none_or(|(t, _)| secs >= t + 1.0)
            && let Some(est) = self.ids[0].and_then(|ch| self.session.path(ch.peer))
        {
            self.path.push((secs.floor(), est));
        }
        for i in 0..self.specs.len() {
            while self.next[i] <= now && self.next[i] < self.end {
                let at = self.next[i];
                let spec = &self.specs[i];
                for _ in 0..spec.burst {
                    let n = self.sent[i].len() as u32;
                    let mut msg = vec![0u8; spec.size];
                    msg[..4].copy_from_slice(&n.to_be_bytes());
                    msg[4..12].copy_from_slice(&now.as_nanos().to_be_bytes());
                    self.sent[i].push(now.as_nanos());
                    let ok = self.ids[i].is_some_and(|ch| self.session.send(now, ch, &msg).is_ok());
                    self.refused += u64::from(!ok);
                }
                self.next[i] = at + spec.period;
            }
        }
    }
}

impl Machine for App {
    type Event = Infallible;

    fn handle_datagram(&mut self, now: Instant, src: SocketAddr, data: &[u8]) {
        self.session.handle_datagram(now, src, data);
        self.take_events(now);
    }

    fn handle_timeout(&mut self, now: Instant) {
        if self.session.poll_timeout().is_some_and(|t| t <= now) {
            self.session.handle_timeout(now);
        }
        self.take_events(now);
        self.send_due(now);
        self.take_events(now);
    }

    fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
        self.session.poll_transmit(now)
    }

    fn poll_transmit_marked(&mut self, now: Instant) -> Option<(Transmit, Option<u8>)> {
        self.session.poll_transmit_marked(now)
    }

    fn poll_event(&mut self) -> Option<Infallible> {
        None
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let sends = self
            .sender
            .then(|| self.next.iter().copied().filter(|&t| t < self.end).min())
            .flatten();
        [self.session.poll_timeout(), sends]
            .into_iter()
            .flatten()
            .min()
    }
}

impl StreamMachine for App {
    fn handle_frame(&mut self, now: Instant, src: SocketAddr, stream: u8, frame: &[u8]) {
        self.session.handle_frame(now, src, stream, frame);
        self.take_events(now);
    }

    fn handle_stream_sent(&mut self, now: Instant, dst: SocketAddr, stream: u8, bytes: usize) {
        self.session.handle_stream_sent(now, dst, stream, bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn band() -> Qos {
        Qos::awareness().mer_band(0.05, 0.06)
    }

    /// A log of `per_s` messages a second for `secs` seconds from 0, each
    /// delivered after 10 ms unless `lost(i)`.
    fn log(per_s: u64, secs: u64, lost: impl Fn(u64) -> bool) -> ChannelLog {
        let n = per_s * secs;
        let step = 1_000_000_000 / per_s;
        let sent: Vec<u64> = (0..n).map(|i| i * step).collect();
        let got = (0..n)
            .filter(|&i| !lost(i))
            .map(|i| (i as u32, i * step + 10_000_000))
            .collect();
        ChannelLog {
            deadline: vec![None; sent.len()],
            sent,
            got,
            ..ChannelLog::default()
        }
    }

    #[test]
    fn a_window_meets_a_band_at_or_under_its_top_and_is_in_band_only_above_its_floor() {
        // 100 a second: window 0 loses 6 (at the top: met, in band),
        // window 1 loses 7 (over), window 2 loses 1 (met, under the band).
        let l = log(100, 3, |i| {
            (i < 100 && i % 16 == 0 && i < 96) || (100..107).contains(&i) || i == 250
        });
        let s = score(&band(), &l, 0, 3_000_000_000);
        assert_eq!(s.windows, 3);
        assert!((s.met - 2.0 / 3.0).abs() < 1e-12, "{s:?}");
        assert!((s.in_band.unwrap() - 1.0 / 3.0).abs() < 1e-12, "{s:?}");
        assert_eq!(s.sent, 300);
        assert!((s.lost - 14.0 / 300.0).abs() < 1e-12);
    }

    #[test]
    fn late_messages_count_as_lost_under_a_budget_but_not_for_full_reliability() {
        let mut l = log(10, 2, |_| false);
        // Every message of the second window arrives after its deadline.
        l.deadline = l
            .sent
            .iter()
            .map(|&t| {
                Some(if t >= 1_000_000_000 {
                    t + 1
                } else {
                    t + 20_000_000
                })
            })
            .collect();
        let residual = Qos::stream().max_residual_loss(0.001);
        let s = score(&residual, &l, 0, 2_000_000_000);
        assert_eq!((s.windows, s.met, s.lost, s.late), (2, 0.5, 0.0, 0.5));
        let s = score(&Qos::reliable_ordered(), &l, 0, 2_000_000_000);
        assert_eq!(s.met, 1.0, "late is not lost for a reliable channel");
        // One message never delivered fails a reliable channel's window.
        let mut l = log(10, 2, |i| i == 15);
        l.deadline = vec![None; l.sent.len()];
        let s = score(&Qos::reliable_ordered(), &l, 0, 2_000_000_000);
        assert_eq!(s.met, 0.5);
    }

    #[test]
    fn windows_before_the_start_or_without_messages_are_not_scored() {
        let l = log(10, 5, |i| i < 20);
        let s = score(&Qos::reliable_ordered(), &l, 2_000_000_000, 5_000_000_000);
        assert_eq!((s.windows, s.met, s.sent), (3, 1.0, 30));
        let mut sparse = log(10, 5, |_| false);
        sparse
            .sent
            .retain(|&t| !(1_000_000_000..4_000_000_000).contains(&t));
        sparse.got.clear();
        let s = score(&Qos::reliable_ordered(), &sparse, 0, 5_000_000_000);
        assert_eq!(s.windows, 2, "the empty windows 1 to 3 are skipped");
    }

    #[test]
    fn switches_are_counted_after_the_start_and_in_the_worst_minute() {
        let m = Mechanism::Plain;
        let r = Mechanism::Reliable;
        let s = 1_000_000_000;
        let mut l = log(1, 200, |_| false);
        l.switches = [1, 20, 70, 100, 125, 185]
            .iter()
            .map(|&t| (t * s, m, r))
            .collect();
        let sc = score(&Qos::reliable_ordered(), &l, 10 * s, 200 * s);
        assert_eq!(sc.switches, 5);
        // 70, 100 and 125 lie within 60 s of one another.
        assert_eq!(sc.max_per_minute, 3);
        assert_eq!(max_in_window(&[0, 60 * s, 120 * s], 60 * s), 1);
        assert_eq!(max_in_window(&[], 60 * s), 0);
    }

    #[test]
    fn the_goal_takes_the_best_fixed_choice_and_then_its_overhead() {
        let c = |run: &str, met, overhead| Candidate {
            run: run.into(),
            met,
            overhead,
        };
        let fixed = [
            c("plain", 0.5, 0.0),
            c("xor:3", 0.9, 0.4),
            c("xor:2", 0.9, 0.6),
            c("block", 0.8, 0.1),
        ];
        let g = goal(&c("model", 0.9, 0.4), &fixed);
        assert_eq!(g.best.as_ref().unwrap().run, "xor:3");
        assert!(g.qos && g.overhead);
        let g = goal(&c("model", 0.95, 0.5), &fixed);
        assert!(g.qos && !g.overhead, "more overhead than xor:3");
        let g = goal(&c("model", 0.85, 0.1), &fixed);
        assert!(!g.qos && g.overhead, "met less often than xor:3");
        assert!(goal(&c("model", 0.0, 9.0), &[]).qos);
    }

    #[test]
    fn fixed_choices_are_offered_only_where_the_qos_allows_them() {
        let rtt = Duration::from_millis(40);
        let sc = TeleImmersion::default();
        let specs = sc.specs();
        let afec = Fixed::parse("afec").unwrap();
        let xor = Fixed::parse("xor:3").unwrap();
        let plain = Fixed::parse("plain").unwrap();
        let block = Fixed::parse("block").unwrap();
        assert_eq!(
            afec.for_qos(&specs[0].qos, rtt),
            Some(Mechanism::Afec { lo: 0.05, hi: 0.06 })
        );
        assert_eq!(afec.for_qos(&specs[1].qos, rtt), None);
        assert_eq!(
            xor.for_qos(&specs[2].qos, rtt),
            Some(Mechanism::Xor(XorLayout::row(3)))
        );
        assert!(matches!(
            block.for_qos(&specs[2].qos, rtt),
            Some(Mechanism::Block { target, max_delay })
                if target == 0.001 && max_delay == Duration::from_millis(50)
        ));
        for full in &specs[3..] {
            assert_eq!(plain.for_qos(&full.qos, rtt), None);
            assert_eq!(xor.for_qos(&full.qos, rtt), None);
        }
        assert!(Fixed::parse("xor:0").is_err());
    }

    /// A short run: two phases of the default path (clean, then 2% loss
    /// and a longer delay), a short stationary run, a few fixed choices.
    fn short(duration: u64) -> TeleImmersion {
        TeleImmersion {
            duration: Duration::from_secs(duration),
            stationary_duration: Duration::from_secs(duration),
            threads: 2,
            ..TeleImmersion::default()
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_report() {
        let sc = TeleImmersion {
            fixed: vec!["plain".into(), "xor:3".into()],
            warmup: Duration::from_secs(5),
            ..short(25)
        };
        let a = sc.run(7, &mut |_| {}).expect("runs");
        let b = sc.run(7, &mut |_| {}).expect("runs");
        let text = |r: &Report| serde_json::to_string(r).expect("serializes");
        assert_eq!(text(&a), text(&b));
        let c = sc.run(8, &mut |_| {}).expect("runs");
        assert_ne!(text(&a), text(&c), "another seed draws other losses");
        // Every channel of every run is scored, and B got messages.
        let t = a.table("channels").expect("the channels table");
        assert_eq!(t.rows.len(), 5 * 5);
        let sent = t.column("sent").expect("sent");
        assert!(t.rows.iter().all(|r| r[sent].as_u64() > Some(0)));
    }

    #[test]
    fn a_pinned_channel_never_switches_and_the_model_run_does_not_flap() {
        let sc = TeleImmersion {
            fixed: vec!["block".into()],
            ..short(60)
        };
        let r = sc.run(1, &mut |_| {}).expect("runs");
        let t = r.table("channels").expect("the channels table");
        let (run, sw, per_min) = (
            t.column("run").unwrap(),
            t.column("switches").unwrap(),
            t.column("max_switches_per_min").unwrap(),
        );
        for row in &t.rows {
            if row[run] == "fixed:block" {
                assert_eq!(row[sw], 0, "{row:?}");
            }
            assert!(row[per_min].as_u64() <= Some(1), "{row:?}");
        }
        assert_eq!(r.summary["stationary_no_flapping"], true);
    }

    /// What holds of issue 16's goal today, on the default scenario and
    /// four seeds: the model selector meets the telepointer's and the
    /// camera's QoS at least as often as the best fixed choice for each,
    /// at no more overhead, on the means over the seeds (the pooled
    /// comparison of `scripts/tele_immersion_seeds.py`); no channel flaps on the stationary path; and
    /// an edit waits behind a bulk transfer's stream window, not behind
    /// the whole transfer (p99 under 3 s; 22 s when the session handed TCP
    /// every frame at once). (The state channel's QoS is what
    /// `the_model_selector_meets_issue_16s_goal` still misses.)
    #[test]
    fn the_model_selector_meets_the_goal_for_the_telepointer_and_the_camera() {
        // Means over seeds 1 to 4: one seed's comparison turns on a window
        // or two of 230 (each fixed run draws its own losses), the mean
        // over several on what the selector does.
        const SEEDS: u64 = 4;
        // (run, channel) -> (sum of qos_met, sum of overhead, valid runs)
        let mut sums: BTreeMap<(String, String), (f64, f64, u64)> = BTreeMap::new();
        for seed in 1..=SEEDS {
            let r = TeleImmersion::default()
                .run(seed, &mut |_| {})
                .expect("runs");
            let c = r.table("channels").expect("the channels table");
            let col = |n: &str| c.column(n).unwrap();
            let (run, name, valid) = (col("run"), col("channel"), col("valid"));
            let (met, overhead, p99) = (col("qos_met"), col("overhead"), col("p99_ms"));
            for row in &c.rows {
                if row[valid] != true {
                    continue;
                }
                let key = (
                    row[run].as_str().unwrap().to_string(),
                    row[name].as_str().unwrap().to_string(),
                );
                let e = sums.entry(key).or_default();
                e.0 += row[met].as_f64().unwrap();
                e.1 += row[overhead].as_f64().unwrap();
                e.2 += 1;
            }
            let edits = c
                .rows
                .iter()
                .find(|row| row[run] == "model" && row[name] == "edits")
                .expect("the model run's edits");
            let p99 = edits[p99].as_f64().expect("a p99");
            assert!(p99 < 3000.0, "seed {seed}: {edits:?}");
            assert_eq!(r.summary["stationary_no_flapping"], true, "seed {seed}");
        }
        for channel in ["telepointer", "camera"] {
            let mean = |run: &str| {
                let (m, o, n) = sums[&(run.to_string(), channel.to_string())];
                assert_eq!(n, SEEDS, "{run} {channel}");
                (m / n as f64, o / n as f64)
            };
            let model = mean("model");
            // The best fixed choice by its mean: highest share met, then
            // least overhead.
            let best = sums
                .keys()
                .filter(|(run, ch)| ch == channel && run.starts_with("fixed:"))
                .map(|(run, _)| (run.clone(), mean(run)))
                .max_by(|a, b| a.1.0.total_cmp(&b.1.0).then(b.1.1.total_cmp(&a.1.1)))
                .expect("fixed runs");
            assert!(
                model.0 >= best.1.0 - 1e-12 && model.1 <= best.1.1 + 1e-12,
                "{channel}: model {model:?}, best fixed {best:?}"
            );
        }
    }

    /// Issue 16's goal at reduced duration: the model selector meets
    /// each channel's QoS at least as often as its best fixed choice, at
    /// no more overhead, and does not flap on a stationary path. Not met
    /// yet (docs/results/tele-immersion.md says where and why), so it is
    /// ignored rather than weakened: run it with `--ignored`.
    #[test]
    #[ignore = "issue 16's goal is not met yet; see docs/results/tele-immersion.md"]
    fn the_model_selector_meets_issue_16s_goal() {
        // Runs on the default scenario (240 s, every fixed choice): where
        // the model run stands is in docs/results/tele-immersion.md.
        let r = TeleImmersion::default().run(1, &mut |_| {}).expect("runs");
        let t = r.table("goal").expect("the goal table");
        let (q, o) = (
            t.column("qos_goal").unwrap(),
            t.column("overhead_goal").unwrap(),
        );
        let missed: Vec<_> = t
            .rows
            .iter()
            .filter(|row| row[q] != true || row[o] != true)
            .collect();
        assert!(missed.is_empty(), "{missed:?}");
        assert_eq!(r.summary["stationary_no_flapping"], true);
    }

    #[test]
    fn the_stream_delivers_every_edit_on_a_clean_path() {
        // Bulk datasets overflow the queue; the stream must recover.
        let sc = TeleImmersion {
            loss: LossModel::default(),
            duration: Duration::from_secs(100),
            stationary_duration: Duration::ZERO,
            fixed: vec!["plain".into()],
            ..TeleImmersion::default()
        };
        let out = sc.run_one(1, &Plan::Fixed("plain".into(), Fixed::Plain), false);
        for ch in &out.channels[3..] {
            assert_eq!(ch.got.len(), ch.sent.len(), "{:?}", ch.stats);
        }
        assert!(out.stream_timeouts < 20, "{} timeouts", out.stream_timeouts);
    }

    #[test]
    fn the_scenario_reads_back_from_toml_and_names_impossible_settings() {
        use crate::scenario::Scenario;
        let mut s = Scenario::builtin("tele-immersion").expect("registered");
        assert_eq!(Scenario::from_toml(&s.to_toml()).expect("reads back"), s);
        s.set("duration", "60s").expect("a duration");
        s.set("fixed", "[\"plain\", \"xor:4x4\"]").expect("a list");
        assert!(s.validate().is_ok());
        for (key, value, named) in [
            ("fixed", "[\"fec\"]", "fixed"),
            ("warmup", "90s", "warmup"),
            ("state_size", "4", "state_size"),
            ("camera_rate", "1bit/s", "camera_rate"),
        ] {
            let mut bad = s.clone();
            bad.set(key, value).expect("parses");
            let e = bad.validate().expect_err("impossible").to_string();
            assert!(e.contains(named), "{key}={value}: {e}");
        }
    }
}
