//! An open-loop load generator for the relay (and for nats-server, as a
//! yardstick): the engine behind `groupwire relay bench`, whose command
//! only parses arguments and prints the [`Report`].
//!
//! Many clients share one process and one thread: each connection is one
//! tokio task driving the client's sans-IO [`ClientCore`]
//! directly (no `RelayClient`, whose two tasks and channels per connection
//! cost more than the relay's work at 1000 connections); deliveries are
//! read in place through `frame::DeliverView`. Publishers send on a
//! schedule and never wait for replies. Latency is one way, send to
//! receipt, for every receiver; both ends read the same host's wall clock.
//! An update a publisher sends after the server held it up (a write that
//! waited for the server to read, past the update's due time) carries its
//! *scheduled* send time, so a server that holds its publishers back
//! shows as latency instead of hiding it (no coordinated omission); any
//! other update carries its real send time, since a publisher woken late
//! by tokio's 1 ms timer or the bench's own CPU is the bench's delay, not
//! the server's, and the report counts those late sends apart
//! (`stamp`, `ON_TIME`).
//!
//! Scenarios follow Litiu & Prakash §5 (see [`Scenario`]).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use groupwire_metrics::{LatencyStats, TimeSeries};
use groupwire_tokio::Clock;
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::watch;

use crate::client::{ClientCore, ClientError, ClientEvent, ClientOptions, CoreEvent, wall_micros};
use crate::frame::{ActivityMode, Frame, Role};

/// Why a bench run stopped: a client could not connect or was refused,
/// the relay closed a connection, or not every client joined in time.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BenchError(String);

type Result<T, E = BenchError> = std::result::Result<T, E>;

/// Errors that need no more words than their own: socket I/O, a client
/// refused by the relay, nats-server's malformed numbers.
macro_rules! from_display {
    ($($t:ty),*) => {$(
        impl From<$t> for BenchError {
            fn from(e: $t) -> Self {
                Self(e.to_string())
            }
        }
    )*};
}
from_display!(
    std::io::Error,
    ClientError,
    std::str::Utf8Error,
    std::num::ParseIntError
);

/// `return Err(BenchError(format!(...)))`.
macro_rules! bail {
    ($($t:tt)*) => {
        return Err(BenchError(format!($($t)*)))
    };
}

/// Adds what was being done to an error, as the bench reports it.
trait Context<T> {
    fn context(self, what: &str) -> Result<T>;
    fn with_context(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T, E: std::fmt::Display> Context<T> for std::result::Result<T, E> {
    fn context(self, what: &str) -> Result<T> {
        self.map_err(|e| BenchError(format!("{what}: {e}")))
    }
    fn with_context(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| BenchError(format!("{}: {e}", what())))
    }
}

/// What to measure (Litiu & Prakash §5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Scenario {
    /// Fig. 5: a 6-member chat group (5 msg/s of 200 B) while another
    /// 6-member group sends bursts of 5 x 40 KB.
    Burst,
    /// Fig. 6: a 2-member high-priority group (5 msg/s) while another
    /// group (5 msg/s) grows through [`BenchConfig::sizes`].
    GroupSize,
    /// Fig. 7: one 20-member group (3 msg/s); half the members have high
    /// priority (principal, active), half low (observer, passive).
    Roles,
    /// Every client is in one firehose group and in 20 low-rate groups;
    /// the low-rate latency is measured without, then with the firehose.
    Isolation,
    /// One group of 1000; then one member reads at only
    /// [`BenchConfig::slow_read`] bytes/s; the others' latency and the
    /// relay's memory are measured in both phases.
    SlowMember,
    /// [`BenchConfig::groups`] groups of [`BenchConfig::members`] members at
    /// [`BenchConfig::rate`] messages/s per group: deliveries/s, latency
    /// percentiles and deliveries per relay CPU-second.
    Fanout,
}

impl Scenario {
    /// Every scenario, in the order `--help` lists them.
    pub const ALL: [Self; 6] = [
        Self::Burst,
        Self::GroupSize,
        Self::Roles,
        Self::Isolation,
        Self::SlowMember,
        Self::Fanout,
    ];

    /// Its name on the command line and in the JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Burst => "burst",
            Self::GroupSize => "group-size",
            Self::Roles => "roles",
            Self::Isolation => "isolation",
            Self::SlowMember => "slow-member",
            Self::Fanout => "fanout",
        }
    }
}

/// What listens at [`BenchConfig::relay`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Target {
    /// groupwire relay (its binary protocol).
    Relay,
    /// nats-server (core NATS text protocol; subjects stand in for groups).
    Nats,
}

impl Target {
    /// Both targets.
    pub const ALL: [Self; 2] = [Self::Relay, Self::Nats];

    /// Its name on the command line and in the JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Relay => "relay",
            Self::Nats => "nats",
        }
    }
}

/// A bench run. `None` fields take the scenario's default (see each).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct BenchConfig {
    /// What to measure.
    pub scenario: Scenario,
    /// Address of the relay, or of nats-server with [`Target::Nats`]. For
    /// a relay, a comma-separated list of nodes of one cluster spreads the
    /// clients over them, round robin (groups are created through the
    /// first).
    pub relay: String,
    /// What listens at `relay`.
    pub target: Target,
    /// Measurement time of each phase (positive).
    pub duration: Duration,
    /// Load before each phase's measurement starts (queues settle).
    pub warmup: Duration,
    /// Members per group (default: 6 burst, 20 roles, 50 isolation, 1000
    /// slow-member, 10 fanout).
    pub members: Option<usize>,
    /// Groups (fanout; default 1).
    pub groups: Option<usize>,
    /// Client connections (fanout; default: members x groups, at most
    /// 1000; each client then joins several groups).
    pub clients: Option<usize>,
    /// Messages per second per publisher (default: 5 burst and group-size,
    /// 3 roles, 5 isolation, 20 slow-member, 100 fanout).
    pub rate: Option<f64>,
    /// Payload bytes (default 200, the paper's; 1000 for slow-member).
    pub size: Option<usize>,
    /// Publishers per group (fanout); each sends `rate`.
    pub publishers: usize,
    /// group-size: the sizes the growing group goes through.
    pub sizes: Vec<usize>,
    /// burst: time between bursts.
    pub burst_every: Duration,
    /// burst: messages per burst.
    pub burst_count: u32,
    /// burst: bytes per burst message.
    pub burst_size: usize,
    /// isolation: the firehose's messages per second.
    pub firehose_rate: f64,
    /// isolation: the firehose's payload bytes.
    pub firehose_size: usize,
    /// isolation: low-rate groups.
    pub low_groups: usize,
    /// slow-member: how fast the slow member reads, bytes/s.
    pub slow_read: u64,
    /// Send window each client asks the relay for, in bytes (0: the
    /// relay's default).
    pub window: u32,
    /// The relay's process id: its CPU time and resident memory are read
    /// from /proc during each phase.
    pub relay_pid: Option<u32>,
}

impl BenchConfig {
    /// `scenario` against the relay at `relay`, with the command line's
    /// defaults.
    pub fn new(scenario: Scenario, relay: impl Into<String>) -> Self {
        Self {
            scenario,
            relay: relay.into(),
            target: Target::Relay,
            duration: Duration::from_secs(10),
            warmup: Duration::from_secs(2),
            members: None,
            groups: None,
            clients: None,
            rate: None,
            size: None,
            publishers: 1,
            sizes: vec![2, 5, 10, 20, 30, 40, 50, 100, 200, 500],
            burst_every: Duration::from_secs(2),
            burst_count: 5,
            burst_size: 40_000,
            firehose_rate: 2000.0,
            firehose_size: 1000,
            low_groups: 20,
            slow_read: 10_000,
            window: 0,
            relay_pid: None,
        }
    }
}

/// Runs the bench on the current tokio runtime (a current-thread runtime
/// keeps the bench to one core). `log` receives progress lines (about one
/// a second per phase) and the first error a relay sent a client.
pub async fn run(cfg: &BenchConfig, log: &(dyn Fn(&str) + Sync)) -> Result<Report> {
    if cfg.duration.is_zero() {
        bail!("the measurement duration must be positive");
    }
    bench(cfg, log).await
}

// ---- the plan: groups, clients, memberships, publishers ----

#[derive(Clone, Debug)]
struct Membership {
    group: usize,
    class: usize,
    role: Role,
    mode: ActivityMode,
    /// Keep every latency of this member in a series (the paper's plots).
    probe: Option<String>,
}

#[derive(Clone, Debug)]
struct Publisher {
    group: usize,
    period: Duration,
    burst: u32,
    size: usize,
    /// Index into [`Shared::switches`]: the publisher sends only while on.
    switch: usize,
}

#[derive(Clone, Debug, Default)]
struct ClientPlan {
    memberships: Vec<Membership>,
    publishers: Vec<Publisher>,
    /// Read at most this many bytes/s while [`Shared::slow`] is set.
    slow_read: Option<u64>,
}

/// State shared by the controller and every client task (one thread, so
/// the locks are never contended).
struct Shared {
    target: Target,
    addr: String,
    /// Relay nodes (`relay` split at commas): client `k` connects to
    /// `addrs[k % len]`.
    addrs: Vec<String>,
    groups: Vec<String>,
    /// Requested send window (0: the relay's default).
    window: u32,
    /// 0 while not measuring; otherwise the phase deliveries count toward.
    phase: AtomicUsize,
    /// Deliveries scheduled before this (wall µs) do not count.
    phase_start: AtomicU64,
    switches: Vec<AtomicBool>,
    slow: AtomicBool,
    delivered: AtomicU64,
    /// Messages sent while measuring, and how many of them went out more
    /// than [`ON_TIME`] after they were due.
    sends: AtomicU64,
    sends_late: AtomicU64,
    ready: AtomicUsize,
    failed: Mutex<Option<String>>,
    rec: Mutex<Recorder>,
    epoch_micros: u64,
}

#[derive(Default)]
struct Recorder {
    hists: BTreeMap<(usize, usize), LatencyStats>,
    series: BTreeMap<String, Vec<(f64, f64)>>,
    errors: u64,
    resyncs: u64,
    disconnects: u64,
    first_error: Option<String>,
}

impl Shared {
    /// The phase deliveries count toward now (0: not measuring) and the
    /// wall time, in µs, before which they do not count.
    fn phase(&self) -> (usize, u64) {
        (
            self.phase.load(Ordering::Relaxed),
            self.phase_start.load(Ordering::Relaxed),
        )
    }
}

impl Recorder {
    fn record(&mut self, phase: usize, class: usize, micros: u64) {
        self.hists
            .entry((phase, class))
            .or_default()
            .record_micros(micros);
    }
}

// ---- the report ----

/// What a bench run measured: per phase, deliveries, latency per class
/// and the relay's CPU and memory; per probe member, its latency series.
/// Serializes to the JSON `--json` writes.
#[derive(Debug, Serialize)]
pub struct Report {
    scenario: Scenario,
    target: Target,
    relay: String,
    clients: usize,
    phases: Vec<PhaseReport>,
    #[serde(skip)]
    series: Vec<TimeSeries>,
    series_points: usize,
}

#[derive(Debug, Serialize, Default)]
struct PhaseReport {
    name: String,
    params: BTreeMap<String, f64>,
    seconds: f64,
    deliveries: u64,
    deliveries_per_sec: f64,
    classes: BTreeMap<String, ClassLatency>,
    relay_cpu_sec: Option<f64>,
    relay_cpu_util: Option<f64>,
    deliveries_per_relay_cpu_sec: Option<f64>,
    relay_rss_max_kib: Option<u64>,
    relay_rss_end_kib: Option<u64>,
    bench_cpu_util: Option<f64>,
    /// Messages the bench sent while measuring, and how many went out
    /// more than 1.5 ms after they were due for reasons of the bench's own
    /// (its timer or its CPU; see `ON_TIME`).
    sends: u64,
    sends_late: u64,
    errors: u64,
    resyncs: u64,
    disconnects: u64,
}

/// One class's latency in a phase (the bench's JSON: p90 and p99.9 too).
#[derive(Debug, Serialize, Default, Clone)]
struct ClassLatency {
    count: u64,
    mean_ms: f64,
    p50_ms: f64,
    p90_ms: f64,
    p99_ms: f64,
    p999_ms: f64,
    max_ms: f64,
}

impl ClassLatency {
    fn of(h: &LatencyStats) -> Self {
        let ms = |q: f64| h.quantile_micros(q).map_or(0.0, |us| us as f64 / 1000.0);
        Self {
            count: h.count(),
            mean_ms: h.summary().mean_ms,
            p50_ms: ms(0.50),
            p90_ms: ms(0.90),
            p99_ms: ms(0.99),
            p999_ms: ms(0.999),
            max_ms: ms(1.0),
        }
    }
}

impl Report {
    /// The per-probe latency series (seconds since the phase began, ms).
    pub fn series(&self) -> &[TimeSeries] {
        &self.series
    }

    /// The results as a text table, one block per phase.
    pub fn table(&self) -> String {
        let mut s = format!(
            "{:?} against {} ({:?}), {} clients\n",
            self.scenario, self.relay, self.target, self.clients
        );
        s += "phase                class        count     deliv/s    mean ms   p50 ms   p99 ms  p99.9 ms   max ms  relay cpu\n";
        for p in &self.phases {
            for (class, l) in &p.classes {
                s += &format!(
                    "{:<20} {:<10} {:>8} {:>11.0} {:>10.3} {:>8.3} {:>8.3} {:>9.3} {:>8.3} {:>10}\n",
                    p.name,
                    class,
                    l.count,
                    p.deliveries_per_sec,
                    l.mean_ms,
                    l.p50_ms,
                    l.p99_ms,
                    l.p999_ms,
                    l.max_ms,
                    p.relay_cpu_util
                        .map_or("-".into(), |u| format!("{:.0}%", u * 100.0)),
                );
            }
            if p.sends_late > 0 {
                s += &format!(
                    "  ({} of {} sends ({:.2}%) went out over 1.5 ms late: the bench's own timer or CPU, not counted as latency)\n",
                    p.sends_late,
                    p.sends,
                    100.0 * p.sends_late as f64 / p.sends.max(1) as f64
                );
            }
            if p.errors + p.resyncs + p.disconnects > 0 {
                s += &format!(
                    "  ({} errors, {} resyncs, {} clients disconnected)\n",
                    p.errors, p.resyncs, p.disconnects
                );
            }
        }
        s
    }
}

// ---- scenarios ----

async fn bench(a: &BenchConfig, log: &(dyn Fn(&str) + Sync)) -> Result<Report> {
    let stamp = wall_micros() % 1_000_000_000;
    let period = |rate: f64| Duration::from_secs_f64(1.0 / rate.max(1e-3));
    let size = a.size.unwrap_or(match a.scenario {
        Scenario::SlowMember => 1000,
        _ => 200,
    });
    let rate = a.rate.unwrap_or(match a.scenario {
        Scenario::Roles => 3.0,
        Scenario::SlowMember => 20.0,
        Scenario::Fanout => 100.0,
        _ => 5.0,
    });
    let chat = |group: usize, switch: usize| Publisher {
        group,
        period: period(rate),
        burst: 1,
        size,
        switch,
    };
    let member = |group: usize, class: usize| Membership {
        group,
        class,
        role: Role::Observer,
        mode: ActivityMode::Active,
        probe: None,
    };
    let principal = |group: usize, class: usize, probe: Option<&str>| Membership {
        group,
        class,
        role: Role::Principal,
        mode: ActivityMode::Active,
        probe: probe.map(str::to_owned),
    };
    // `m` clients of `group`: the first a principal publishing `publisher`
    // (its own deliveries, probed as `probe`, in `class`), the others
    // members whose deliveries count in `class`.
    let one_sender =
        |m: usize, group: usize, class: usize, probe: Option<&str>, publisher: Publisher| {
            (0..m)
                .map(|i| {
                    let mut p = ClientPlan::default();
                    if i == 0 {
                        p.memberships.push(principal(group, class, probe));
                        p.publishers.push(publisher.clone());
                    } else {
                        p.memberships.push(member(group, class));
                    }
                    p
                })
                .collect::<Vec<_>>()
        };
    let name = |g: &str| format!("b{stamp}-{g}");
    let dur = a.duration;
    let warm = a.warmup;

    // Each arm: groups (name, priority), classes, clients, then phases.
    let (groups, classes, plans, steps): Setup = match a.scenario {
        Scenario::Burst => {
            let m = a.members.unwrap_or(6).max(2);
            let mut plans = one_sender(m, 0, 0, Some("chat sender"), chat(0, 0));
            let burst = Publisher {
                group: 1,
                period: a.burst_every,
                burst: a.burst_count,
                size: a.burst_size,
                switch: 0,
            };
            plans.extend(one_sender(m, 1, 1, None, burst));
            (
                vec![(name("chat"), 4), (name("image"), 4)],
                vec!["chat", "image"],
                plans,
                vec![Step::phase("bursts", &[0], false, &[])],
            )
        }
        Scenario::GroupSize => {
            let mut plans = vec![
                ClientPlan {
                    memberships: vec![principal(0, 0, None)],
                    publishers: vec![chat(0, 0)],
                    slow_read: None,
                },
                ClientPlan {
                    memberships: vec![member(0, 0)],
                    ..ClientPlan::default()
                },
                ClientPlan {
                    memberships: vec![principal(1, 1, None)],
                    publishers: vec![chat(1, 0)],
                    slow_read: None,
                },
            ];
            let mut steps = Vec::new();
            let mut have = 1;
            let mut sizes = a.sizes.clone();
            sizes.sort_unstable();
            sizes.dedup();
            for &n in &sizes {
                let n = n.max(1);
                while have < n {
                    plans.push(ClientPlan {
                        memberships: vec![member(1, 1)],
                        ..ClientPlan::default()
                    });
                    have += 1;
                }
                steps.push(Step {
                    name: format!("size {n}"),
                    switches_on: vec![0],
                    slow: false,
                    params: vec![("size".into(), n as f64)],
                    spawn_upto: plans.len(),
                });
            }
            (
                vec![(name("small"), 6), (name("large"), 2)],
                vec!["small", "large"],
                plans,
                steps,
            )
        }
        Scenario::Roles => {
            let m = a.members.unwrap_or(20).max(3);
            let mut plans = vec![ClientPlan {
                memberships: vec![principal(0, 0, None)],
                publishers: vec![chat(0, 0)],
                slow_read: None,
            }];
            for i in 1..m {
                let high = i % 2 == 1;
                let probe = match i {
                    1 => Some("high-priority member".to_owned()),
                    2 => Some("low-priority member".to_owned()),
                    _ => None,
                };
                plans.push(ClientPlan {
                    memberships: vec![Membership {
                        group: 0,
                        class: if high { 1 } else { 2 },
                        role: if high {
                            Role::Principal
                        } else {
                            Role::Observer
                        },
                        mode: if high {
                            ActivityMode::Active
                        } else {
                            ActivityMode::Passive
                        },
                        probe,
                    }],
                    ..ClientPlan::default()
                });
            }
            (
                vec![(name("team"), 4)],
                vec!["sender", "high", "low"],
                plans,
                vec![Step::phase("roles", &[0], false, &[])],
            )
        }
        Scenario::Isolation => {
            let m = a.members.unwrap_or(50).max(2);
            let lg = a.low_groups.max(1);
            let mut groups = vec![(name("firehose"), 4)];
            for g in 0..lg {
                groups.push((name(&format!("low{g}")), 4));
            }
            let firehose = Publisher {
                group: 0,
                period: period(a.firehose_rate),
                burst: 1,
                size: a.firehose_size,
                switch: 1,
            };
            let mut plans = one_sender(m, 0, 1, None, firehose);
            for (i, p) in plans.iter_mut().enumerate() {
                for g in 0..lg {
                    // Low-rate group g's publisher is client g + 1 (client
                    // 0 is busy with the firehose).
                    if i == (g + 1) % m {
                        p.memberships.push(principal(g + 1, 0, None));
                        p.publishers.push(chat(g + 1, 0));
                    } else {
                        p.memberships.push(member(g + 1, 0));
                    }
                }
            }
            (
                groups,
                vec!["low-rate", "firehose"],
                plans,
                vec![
                    Step::phase("unloaded", &[0], false, &[]),
                    Step::phase("firehose on", &[0, 1], false, &[]),
                ],
            )
        }
        Scenario::SlowMember => {
            let m = a.members.unwrap_or(1000).max(2);
            let mut plans = one_sender(m, 0, 0, None, chat(0, 0));
            // The last member reads slowly; its deliveries are a class of
            // their own.
            let slow = &mut plans[m - 1];
            slow.memberships[0] = member(0, 1);
            slow.slow_read = Some(a.slow_read.max(1));
            (
                vec![(name("big"), 4)],
                vec!["others", "slow"],
                plans,
                vec![
                    Step::phase("all read fast", &[0], false, &[]),
                    Step::phase("one slow member", &[0], true, &[]),
                ],
            )
        }
        Scenario::Fanout => {
            let g = a.groups.unwrap_or(1).max(1);
            let m = a.members.unwrap_or(10).max(1);
            let c = a.clients.unwrap_or((g * m).min(1000)).max(m);
            let stride = (c / m).max(1);
            let pubs = a.publishers.clamp(1, m);
            let mut plans = vec![ClientPlan::default(); c];
            for gi in 0..g {
                for j in 0..m {
                    let ci = (gi + j * stride) % c;
                    if j < pubs {
                        plans[ci].memberships.push(principal(gi, 0, None));
                        plans[ci].publishers.push(chat(gi, 0));
                    } else {
                        plans[ci].memberships.push(member(gi, 0));
                    }
                }
            }
            let groups = (0..g).map(|i| (name(&format!("g{i}")), 4)).collect();
            (
                groups,
                vec!["all"],
                plans,
                vec![Step::phase(
                    "fanout",
                    &[0],
                    false,
                    &[
                        ("groups", g as f64),
                        ("members", m as f64),
                        ("clients", c as f64),
                        ("rate_per_group", rate * pubs as f64),
                    ],
                )],
            )
        }
    };
    let classes: Vec<String> = classes.into_iter().map(str::to_owned).collect();
    let addrs: Vec<String> = a
        .relay
        .split(',')
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .map(str::to_owned)
        .collect();
    let first = addrs.first().cloned().unwrap_or_default();
    let shared = Arc::new(Shared {
        target: a.target,
        addr: first.clone(),
        addrs,
        groups: groups.iter().map(|(n, _)| n.clone()).collect(),
        window: a.window,
        phase: AtomicUsize::new(0),
        phase_start: AtomicU64::new(u64::MAX),
        switches: (0..2).map(|_| AtomicBool::new(false)).collect(),
        slow: AtomicBool::new(false),
        delivered: AtomicU64::new(0),
        sends: AtomicU64::new(0),
        sends_late: AtomicU64::new(0),
        ready: AtomicUsize::new(0),
        failed: Mutex::new(None),
        rec: Mutex::new(Recorder::default()),
        epoch_micros: wall_micros(),
    });
    if a.target == Target::Relay {
        create_groups(&first, &groups).await?;
    }
    let (signal_tx, stop_rx) = watch::channel(Signal::default());
    let signal_tx = Arc::new(signal_tx);
    // The clients' keepalive timers, run for all at once (see `Signal`).
    let ticker = tokio::spawn({
        let tx = signal_tx.clone();
        async move {
            let mut every = tokio::time::interval(KEEPALIVE_TICK);
            every.tick().await;
            loop {
                every.tick().await;
                tx.send_modify(|s| s.ticks += 1);
            }
        }
    });
    let mut tasks = Vec::new();
    let mut spawned = 0;
    let mut phases = Vec::new();
    for (pi, step) in steps.iter().enumerate() {
        let upto = if step.spawn_upto == 0 {
            plans.len()
        } else {
            step.spawn_upto
        };
        while spawned < upto {
            let plan = plans[spawned].clone();
            tasks.push(tokio::spawn(client(
                shared.clone(),
                spawned,
                plan,
                stop_rx.clone(),
            )));
            spawned += 1;
        }
        wait_ready(&shared, spawned).await?;
        for (i, s) in shared.switches.iter().enumerate() {
            s.store(step.switches_on.contains(&i), Ordering::Relaxed);
        }
        shared.slow.store(step.slow, Ordering::Relaxed);
        progress(log, &shared, &step.name, warm, None).await?;
        let phase = pi + 1;
        let cpu0 = a.relay_pid.and_then(proc_cpu_secs);
        let self0 = proc_cpu_secs_self();
        let (r0, s0, d0) = {
            let r = shared.rec.lock().expect("recorder lock");
            (r.errors, r.resyncs, r.disconnects)
        };
        let sends0 = (
            shared.sends.load(Ordering::Relaxed),
            shared.sends_late.load(Ordering::Relaxed),
        );
        shared.phase_start.store(wall_micros(), Ordering::Relaxed);
        shared.phase.store(phase, Ordering::Relaxed);
        let t0 = wall_micros();
        let rss_max = progress(log, &shared, &step.name, dur, a.relay_pid).await?;
        shared.phase.store(0, Ordering::Relaxed);
        let secs = (wall_micros() - t0) as f64 / 1e6;
        let cpu = a
            .relay_pid
            .and_then(proc_cpu_secs)
            .zip(cpu0)
            .map(|(b, a)| b - a);
        let own = proc_cpu_secs_self().zip(self0).map(|(b, a)| b - a);
        let counted: u64;
        let mut rep = PhaseReport {
            name: step.name.clone(),
            params: step.params.iter().cloned().collect(),
            seconds: secs,
            ..PhaseReport::default()
        };
        {
            let r = shared.rec.lock().expect("recorder lock");
            for (ci, cname) in classes.iter().enumerate() {
                if let Some(h) = r.hists.get(&(phase, ci)) {
                    rep.classes.insert(cname.clone(), ClassLatency::of(h));
                }
            }
            counted = rep.classes.values().map(|l| l.count).sum();
            rep.errors = r.errors - r0;
            rep.resyncs = r.resyncs - s0;
            rep.disconnects = r.disconnects - d0;
        }
        rep.deliveries = counted;
        rep.deliveries_per_sec = counted as f64 / secs;
        rep.relay_cpu_sec = cpu;
        rep.relay_cpu_util = cpu.map(|c| c / secs);
        rep.deliveries_per_relay_cpu_sec = cpu.filter(|c| *c > 0.0).map(|c| counted as f64 / c);
        rep.relay_rss_max_kib = rss_max;
        rep.relay_rss_end_kib = a.relay_pid.and_then(proc_rss_kib);
        rep.bench_cpu_util = own.map(|c| c / secs);
        rep.sends = shared.sends.load(Ordering::Relaxed) - sends0.0;
        rep.sends_late = shared.sends_late.load(Ordering::Relaxed) - sends0.1;
        phases.push(rep);
    }
    ticker.abort();
    signal_tx.send_modify(|s| s.stop = true);
    for t in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
    }
    let rec = std::mem::take(&mut *shared.rec.lock().expect("recorder lock"));
    if let Some(e) = &rec.first_error {
        log(&format!("first relay error seen by a client: {e}"));
    }
    let series: Vec<TimeSeries> = rec
        .series
        .into_iter()
        .map(|(name, points)| TimeSeries { name, points })
        .collect();
    Ok(Report {
        scenario: a.scenario,
        target: a.target,
        relay: a.relay.clone(),
        clients: spawned,
        phases,
        series_points: series.iter().map(|s| s.points.len()).sum(),
        series,
    })
}

/// A scenario: groups (name, priority), latency classes, clients, phases.
type Setup = (
    Vec<(String, u8)>,
    Vec<&'static str>,
    Vec<ClientPlan>,
    Vec<Step>,
);

struct Step {
    name: String,
    switches_on: Vec<usize>,
    slow: bool,
    params: Vec<(String, f64)>,
    /// Clients `0..spawn_upto` run during this step (0: all).
    spawn_upto: usize,
}

impl Step {
    fn phase(name: &str, on: &[usize], slow: bool, params: &[(&str, f64)]) -> Self {
        Self {
            name: name.into(),
            switches_on: on.to_vec(),
            slow,
            params: params.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
            spawn_upto: 0,
        }
    }
}

/// Waits `d`, printing deliveries/s every second; returns the relay's
/// largest resident set seen (sampled every 250 ms) when `pid` is given.
async fn progress(
    log: &(dyn Fn(&str) + Sync),
    shared: &Shared,
    name: &str,
    d: Duration,
    pid: Option<u32>,
) -> Result<Option<u64>> {
    let tick = Duration::from_millis(250);
    let steps = (d.as_secs_f64() / tick.as_secs_f64()).ceil().max(1.0) as u64;
    let mut rss_max = pid.and_then(proc_rss_kib);
    let mut last = shared.delivered.load(Ordering::Relaxed);
    for i in 1..=steps {
        tokio::time::sleep(tick.min(d)).await;
        if let Some(e) = shared.failed.lock().expect("failed lock").clone() {
            bail!("a client failed: {e}");
        }
        if let Some(pid) = pid {
            rss_max = rss_max.max(proc_rss_kib(pid));
        }
        if i % 4 == 0 {
            let now = shared.delivered.load(Ordering::Relaxed);
            let measuring = if shared.phase.load(Ordering::Relaxed) == 0 {
                "warm-up"
            } else {
                "measuring"
            };
            log(&format!(
                "[{name}] {measuring} {:.0}s/{:.0}s: {} deliveries/s",
                (i * 250) as f64 / 1000.0,
                d.as_secs_f64(),
                now - last
            ));
            last = now;
        }
    }
    Ok(rss_max)
}

async fn wait_ready(shared: &Shared, n: usize) -> Result<()> {
    for _ in 0..600 {
        if let Some(e) = shared.failed.lock().expect("failed lock").clone() {
            bail!("a client failed: {e}");
        }
        if shared.ready.load(Ordering::Relaxed) >= n {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!(
        "only {} of {n} clients joined within 60 s",
        shared.ready.load(Ordering::Relaxed)
    )
}

// ---- /proc ----

/// Clock ticks per second of /proc/PID/stat's utime and stime
/// (`getconf CLK_TCK`; 100 on every Linux this runs on).
const CLK_TCK: f64 = 100.0;

fn cpu_from_stat(stat: &str) -> Option<f64> {
    // Fields after the parenthesised command name: state is field 3,
    // utime 14 and stime 15 (proc(5)).
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    Some((utime + stime) / CLK_TCK)
}

fn proc_cpu_secs(pid: u32) -> Option<f64> {
    cpu_from_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

fn proc_cpu_secs_self() -> Option<f64> {
    cpu_from_stat(&std::fs::read_to_string("/proc/self/stat").ok()?)
}

fn proc_rss_kib(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

// ---- clients ----

async fn create_groups(addr: &str, groups: &[(String, u8)]) -> Result<()> {
    let mut s = Conn::connect(addr, 0).await?;
    for (g, prio) in groups {
        s.request(&Frame::CreateGroup {
            group: g.clone(),
            group_type: "bench".into(),
            priority: *prio,
            initial_state: Bytes::new(),
        })
        .await?;
    }
    Ok(())
}

/// What the bench tells every client at once. `ticks` counts keepalive
/// ticks, every [`KEEPALIVE_TICK`]: at each, every relay client runs its
/// core's timers, which ping the relay or give it up when due (so at most
/// a tick late). One bench-wide tick instead of a timer per client: with
/// a thousand clients each turn of each client checked its own, cold in
/// memory (about 2% of the bench's CPU, where the hand-written client it
/// replaced had no keepalive at all).
#[derive(Clone, Copy, Debug, Default)]
struct Signal {
    ticks: u64,
    stop: bool,
}

/// A quarter of the clients' keepalive period.
const KEEPALIVE_TICK: Duration =
    Duration::from_secs(crate::client::DEFAULT_KEEPALIVE.as_secs() / 4);

/// The next change of the bench's signals, owning its receiver (handed
/// back with whether the bench is still there), so a client can keep one
/// registered across turns and re-arm it after it fires.
fn next_signal(
    mut rx: watch::Receiver<Signal>,
) -> std::pin::Pin<Box<dyn Future<Output = (watch::Receiver<Signal>, bool)> + Send>> {
    Box::pin(async move {
        let open = rx.changed().await.is_ok();
        (rx, open)
    })
}

/// A read of nothing from `server`: the end of the run when stopping,
/// else an error.
fn read_nothing(stop: &watch::Receiver<Signal>, server: &str) -> Result<()> {
    if stop.borrow().stop {
        return Ok(());
    }
    bail!("{server} closed the connection")
}

async fn client(
    shared: Arc<Shared>,
    index: usize,
    plan: ClientPlan,
    stop: watch::Receiver<Signal>,
) {
    let mut ready = false;
    let r = match shared.target {
        Target::Relay => relay_client(&shared, index, &plan, stop, &mut ready).await,
        Target::Nats => nats_client(&shared, index, &plan, stop, &mut ready).await,
    };
    if let Err(e) = r {
        if ready {
            // A server may drop a client under overload (a slow consumer):
            // that is a result, not a failure of the bench.
            let mut rec = shared.rec.lock().expect("recorder lock");
            rec.disconnects += 1;
            if rec.first_error.is_none() {
                rec.first_error = Some(format!("client {index}: {e:#}"));
            }
            return;
        }
        let mut f = shared.failed.lock().expect("failed lock");
        if f.is_none() {
            *f = Some(format!("client {index}: {e:#}"));
        }
    }
}

/// A relay connection: the client's sans-IO [`ClientCore`] over one TCP
/// stream, driven by the connection's own task (no channels, no second
/// task: at 1000 connections those cost more than the relay's work).
struct Conn {
    stream: TcpStream,
    core: ClientCore,
    clock: Clock,
    out: Vec<u8>,
    /// When the last write the relay made wait finished (wall µs).
    held_until: u64,
}

impl Conn {
    async fn connect(addr: &str, window: u32) -> Result<Self> {
        let stream = TcpStream::connect(addr)
            .await
            .with_context(|| format!("connecting to {addr}"))?;
        let _ = stream.set_nodelay(true);
        let clock = Clock::start();
        // The bench measures latency and loss itself, per message, and
        // never reconnects.
        let opts = ClientOptions {
            metered: false,
            resume: false,
            ..ClientOptions::new("bench").window(window)
        };
        let mut c = Self {
            core: ClientCore::new(clock.now(), &opts),
            stream,
            clock,
            out: Vec::with_capacity(4096),
            held_until: 0,
        };
        loop {
            c.flush().await?;
            match c.core.poll_event() {
                Some(CoreEvent::Connected { .. }) => return Ok(c),
                Some(CoreEvent::Closed(e)) => {
                    bail!("the relay refused the connection: {}", closed(e))
                }
                Some(_) => {}
                None => c.read().await?,
            }
        }
    }

    /// Writes what the core queued, in one write.
    async fn flush(&mut self) -> Result<()> {
        self.out.clear();
        while let Some(b) = self.core.poll_transmit() {
            self.out.extend_from_slice(&b);
        }
        if !self.out.is_empty() {
            write_all_held(
                &mut self.stream,
                TcpStream::try_write,
                &self.out,
                &mut self.held_until,
            )
            .await?;
        }
        Ok(())
    }

    /// Reads what the relay sent into the core.
    async fn read(&mut self) -> Result<()> {
        if self.stream.read_buf(self.core.recv_buffer()).await? == 0 {
            bail!("the relay closed the connection");
        }
        Ok(())
    }

    /// Sends a request and waits for its reply, dropping other events.
    async fn request(&mut self, f: &Frame) -> Result<Frame> {
        let id = self.core.request(f)?;
        loop {
            self.flush().await?;
            match self.core.poll_event() {
                Some(CoreEvent::Reply { id: got, result }) if got == id => {
                    return result.map_err(|e| BenchError(e.to_string()));
                }
                Some(CoreEvent::Closed(e)) => {
                    bail!("the relay closed the connection: {}", closed(e))
                }
                Some(_) => {}
                None => self.read().await?,
            }
        }
    }
}

/// Joins of a group another node has not seen yet, 20 ms apart (10 s).
const JOIN_TRIES: u32 = 500;

fn closed(e: Option<ClientError>) -> String {
    e.map_or("no error given".to_owned(), |e| e.to_string())
}

async fn relay_client(
    shared: &Shared,
    index: usize,
    plan: &ClientPlan,
    stop: watch::Receiver<Signal>,
    ready: &mut bool,
) -> Result<()> {
    let addr = &shared.addrs[index % shared.addrs.len().max(1)];
    let mut c = Conn::connect(addr, shared.window).await?;
    for m in &plan.memberships {
        let join = Frame::Join {
            group: shared.groups[m.group].clone(),
            role: m.role,
            mode: m.mode,
            watch_membership: false,
            resume_after: None,
        };
        // On a cluster, a group created through the first node reaches
        // the others a moment later.
        let mut tries = 0;
        loop {
            match c.request(&join).await {
                Ok(_) => break,
                Err(e) if e.to_string().contains("no-such-group") && tries < JOIN_TRIES => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }
    shared.ready.fetch_add(1, Ordering::Relaxed);
    *ready = true;
    let names: Vec<(&str, &Membership)> = plan
        .memberships
        .iter()
        .map(|m| (shared.groups[m.group].as_str(), m))
        .collect();
    let mut pubs = Publishers::new(shared, index, &plan.publishers);
    let mut tmp = vec![0u8; 1024];
    // One wait for the bench's signals, registered until it fires: a
    // fresh `changed()` each turn joined and left the watch's waiter list
    // every time.
    let mut signal = next_signal(stop.clone());
    loop {
        let slow = plan
            .slow_read
            .filter(|_| shared.slow.load(Ordering::Relaxed));
        tokio::select! {
            // In this order, each polled only while the ones above are
            // pending: a due message goes out first, then the socket.
            biased;
            () = pubs.tick() => {
                let mut refused = None;
                pubs.due(shared, c.held_until, |g, sent_at, payload| {
                    let send = Frame::Send {
                        group: shared.groups[g].clone(),
                        msg_type: 1,
                        sent_at_micros: sent_at,
                        payload: payload.clone(),
                    };
                    if let Err(e) = c.core.request_detached(&send) {
                        refused.get_or_insert(e);
                    }
                });
                if let Some(e) = refused {
                    bail!("a send was refused: {e}");
                }
                c.flush().await?;
            }
            r = async {
                if slow.is_some() {
                    // A slow reader: small reads, paced below.
                    let n = c.stream.read(&mut tmp).await?;
                    c.core.handle_bytes(c.clock.now(), &tmp[..n]);
                    Ok::<usize, std::io::Error>(n)
                } else {
                    c.stream.read_buf(c.core.recv_buffer()).await
                }
            } => {
                let n = r.context("reading from the relay")?;
                if n == 0 {
                    return read_nothing(&stop, "the relay");
                }
                let now = wall_micros();
                let (phase, start) = shared.phase();
                let mut delivered = 0;
                let mut fatal = None;
                {
                    let mut rec = shared.rec.lock().expect("recorder lock");
                    let record = |rec: &mut Recorder, group: &[u8], sent: u64| {
                        if phase != 0
                            && sent >= start
                            && let Some((_, m)) = names.iter().find(|(n, _)| n.as_bytes() == group)
                        {
                            let lat = now.saturating_sub(sent);
                            rec.record(phase, m.class, lat);
                            if let Some(p) = &m.probe {
                                let t = sent.saturating_sub(shared.epoch_micros) as f64 / 1e6;
                                rec.series.entry(p.clone()).or_default().push((t, lat as f64 / 1000.0));
                            }
                        }
                    };
                    loop {
                        // Deliveries in place first (no handle per frame),
                        // then the one other frame that stopped them.
                        delivered += c.core.poll_delivers(|v| record(&mut rec, v.group_bytes(), v.sent_at_micros())) as u64;
                        let Some(ev) = c.core.poll_event() else {
                            break;
                        };
                        match ev {
                            CoreEvent::Deliver(v) => {
                                delivered += 1;
                                record(&mut rec, v.group_bytes(), v.sent_at_micros());
                            }
                            CoreEvent::Event(ClientEvent::Resync { .. }) => rec.resyncs += 1,
                            CoreEvent::Reply { result: Err(e), .. } => {
                                rec.errors += 1;
                                rec.first_error.get_or_insert_with(|| e.to_string());
                            }
                            CoreEvent::Closed(e) => {
                                if let Some(e) = &e {
                                    rec.errors += 1;
                                    rec.first_error.get_or_insert_with(|| e.to_string());
                                }
                                fatal = Some(closed(e));
                                break;
                            }
                            _ => {}
                        }
                    }
                }
                shared.delivered.fetch_add(delivered, Ordering::Relaxed);
                if let Some(e) = fatal {
                    bail!("the relay closed the connection: {e}");
                }
                // Credit for what was handed over.
                c.flush().await?;
                if let Some(rate) = slow {
                    tokio::time::sleep(Duration::from_secs_f64(n as f64 / rate as f64)).await;
                }
            }
            (rx, open) = &mut signal => {
                if !open || rx.borrow().stop {
                    return Ok(());
                }
                // A keepalive tick: the core pings or gives up if due.
                c.core.handle_timeout(c.clock.now());
                c.flush().await?;
                signal = next_signal(rx);
            }
        }
    }
}

/// Lateness (µs) past which a send counts as late in the report
/// (`sends_late`): one and a half ticks of the publishers' 1 ms timer.
/// Such sends are the bench's own (see [`stamp`]); the report counts them
/// so a bench that cannot keep up shows.
const ON_TIME: u64 = 1500;

/// The send time a message due at `due` and sent at `now` carries (all
/// wall µs): its schedule if the server held its publisher up after it was
/// due (`held_until`, the end of the last write that waited), so the wait
/// the server caused counts in its latency (no coordinated omission); else
/// `now`, since what made it late was the bench's own timer (tokio's 1 ms
/// wheel wakes a sleeper up to about 2 ms late) or its CPU.
fn stamp(due: u64, now: u64, held_until: u64) -> u64 {
    if held_until > due { due } else { now }
}

/// Writes all of `buf` to `w`; `held_until` becomes the wall time (µs) the
/// write finished if the socket was full and the write had to wait for the
/// server to read.
async fn write_all_held<W: AsyncWrite + Unpin>(
    w: &mut W,
    try_write: impl FnOnce(&W, &[u8]) -> std::io::Result<usize>,
    buf: &[u8],
    held_until: &mut u64,
) -> std::io::Result<()> {
    let n = match try_write(w, buf) {
        Ok(n) => n,
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => 0,
        Err(e) => return Err(e),
    };
    if n < buf.len() {
        w.write_all(&buf[n..]).await?;
        *held_until = wall_micros();
    }
    Ok(())
}

/// Open-loop publishers of one client. The client sleeps until the next
/// message is due (a fixed 1 ms tick for each of 1000 clients cost the
/// bench's core a million wake-ups a second).
struct Publishers {
    list: Vec<(Publisher, u64, Bytes)>,
}

impl Publishers {
    fn new(shared: &Shared, index: usize, list: &[Publisher]) -> Self {
        let now = wall_micros();
        let list = list
            .iter()
            .enumerate()
            .map(|(i, p)| {
                // Spread publishers over their period (deterministically) so
                // a thousand of them do not fire in the same millisecond.
                let period = p.period.as_micros() as u64;
                let spread = ((index * 7919 + i * 104_729) as u64 * 1_000_003) % period.max(1);
                (p.clone(), now + spread, Bytes::from(vec![b'x'; p.size]))
            })
            .collect::<Vec<_>>();
        let _ = shared;
        Self { list }
    }

    /// Waits until a message is due (never, without publishers).
    async fn tick(&mut self) {
        let Some(next) = self.list.iter().map(|(_, n, _)| *n).min() else {
            return std::future::pending().await;
        };
        let wait = next.saturating_sub(wall_micros());
        tokio::time::sleep(Duration::from_micros(wait)).await;
    }

    /// Calls `send(group, stamp_micros, payload)` for every message due;
    /// `held_until` is when the client's last write the server made wait
    /// finished (see [`ON_TIME`] for the stamp).
    fn due(&mut self, shared: &Shared, held_until: u64, mut send: impl FnMut(usize, u64, &Bytes)) {
        let now = wall_micros();
        let measuring = shared.phase.load(Ordering::Relaxed) != 0;
        let (mut sends, mut late) = (0, 0);
        for (p, next, payload) in &mut self.list {
            let period = p.period.as_micros().max(1) as u64;
            if !shared.switches[p.switch].load(Ordering::Relaxed) {
                // Off: keep the phase of the schedule, send nothing.
                while *next <= now {
                    *next += period;
                }
                continue;
            }
            while *next <= now {
                let stamp = stamp(*next, now, held_until);
                for _ in 0..p.burst {
                    send(p.group, stamp, payload);
                }
                sends += p.burst as u64;
                if now - *next > ON_TIME {
                    late += p.burst as u64;
                }
                *next += period;
            }
        }
        if measuring && sends > 0 {
            shared.sends.fetch_add(sends, Ordering::Relaxed);
            shared.sends_late.fetch_add(late, Ordering::Relaxed);
        }
    }
}

/// The same load against nats-server: subjects are groups, a subscription
/// is a membership, the first 8 payload bytes carry the scheduled send time.
async fn nats_client(
    shared: &Shared,
    index: usize,
    plan: &ClientPlan,
    mut stop: watch::Receiver<Signal>,
    ready: &mut bool,
) -> Result<()> {
    let mut stream = TcpStream::connect(&shared.addr)
        .await
        .with_context(|| format!("connecting to nats at {}", shared.addr))?;
    let _ = stream.set_nodelay(true);
    let mut setup = String::from(
        "CONNECT {\"verbose\":false,\"pedantic\":false,\"echo\":true,\"lang\":\"groupwire-bench\",\"version\":\"0\"}\r\n",
    );
    for (sid, m) in plan.memberships.iter().enumerate() {
        setup += &format!("SUB {} {sid}\r\n", shared.groups[m.group]);
    }
    setup += "PING\r\n";
    stream.write_all(setup.as_bytes()).await?;
    let mut buf = BytesMut::with_capacity(64 << 10);
    // INFO first, then PONG once the subscriptions are in place.
    loop {
        if let Some(i) = buf.windows(6).position(|w| w == b"PONG\r\n") {
            buf.advance(i + 6);
            break;
        }
        if stream.read_buf(&mut buf).await? == 0 {
            bail!("nats-server closed the connection during setup");
        }
    }
    shared.ready.fetch_add(1, Ordering::Relaxed);
    *ready = true;
    let (mut rd, mut wr) = stream.into_split();
    let mut pubs = Publishers::new(shared, index, &plan.publishers);
    let mut out: Vec<u8> = Vec::with_capacity(4096);
    let mut held_until = 0;
    loop {
        tokio::select! {
            r = rd.read_buf(&mut buf) => {
                let n = r.context("reading from nats-server")?;
                if n == 0 {
                    return read_nothing(&stop, "nats-server");
                }
                let now = wall_micros();
                let (phase, start) = shared.phase();
                let (delivered, pong) = {
                let mut rec = shared.rec.lock().expect("recorder lock");
                let mut delivered = 0;
                let mut pong = false;
                while let Some(eol) = buf.windows(2).position(|w| w == b"\r\n") {
                    let line = &buf[..eol];
                    if let Some(rest) = line.strip_prefix(b"MSG ") {
                        // MSG <subject> <sid> [reply-to] <#bytes>
                        let parts: Vec<&[u8]> = rest.split(|&b| b == b' ').collect();
                        let (Some(sid), Some(nb)) = (parts.get(1), parts.last()) else {
                            bail!("bad MSG line from nats-server");
                        };
                        let nb: usize = std::str::from_utf8(nb)?.parse()?;
                        let sid: usize = std::str::from_utf8(sid)?.parse()?;
                        if buf.len() < eol + 2 + nb + 2 {
                            break;
                        }
                        let p = &buf[eol + 2..eol + 2 + nb];
                        delivered += 1;
                        if phase != 0 && p.len() >= 8 {
                            let sent = u64::from_be_bytes(p[..8].try_into().expect("8 bytes"));
                            if sent >= start && let Some(m) = plan.memberships.get(sid) {
                                rec.record(phase, m.class, now.saturating_sub(sent));
                            }
                        }
                        buf.advance(eol + 2 + nb + 2);
                    } else {
                        if line == b"PING" {
                            pong = true;
                        } else if line.starts_with(b"-ERR") {
                            rec.errors += 1;
                            if rec.first_error.is_none() {
                                rec.first_error = Some(String::from_utf8_lossy(line).into_owned());
                            }
                        }
                        buf.advance(eol + 2);
                    }
                }
                (delivered, pong)
                };
                shared.delivered.fetch_add(delivered, Ordering::Relaxed);
                if pong {
                    write_all_held(&mut wr, OwnedWriteHalf::try_write, b"PONG\r\n", &mut held_until).await?;
                }
            }
            () = pubs.tick() => {
                out.clear();
                pubs.due(shared, held_until, |g, sent_at, payload| {
                    let n = payload.len().max(8);
                    out.extend_from_slice(format!("PUB {} {n}\r\n", shared.groups[g]).as_bytes());
                    out.extend_from_slice(&sent_at.to_be_bytes());
                    out.extend_from_slice(&payload[payload.len().min(8)..]);
                    out.extend_from_slice(b"\r\n");
                });
                if !out.is_empty() {
                    write_all_held(&mut wr, OwnedWriteHalf::try_write, &out, &mut held_until).await?;
                }
            }
            r = stop.changed() => {
                if r.is_err() || stop.borrow().stop {
                    return Ok(());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_send_counts_from_its_schedule_only_where_the_server_held_it_up() {
        // Late by the bench's own timer: counted from when it went out.
        assert_eq!(stamp(1_000, 3_400, 0), 3_400);
        assert_eq!(stamp(1_000, 3_400, 900), 3_400);
        // Held by a write the server made wait after the message was due:
        // the wait counts.
        assert_eq!(stamp(1_000, 3_400, 3_000), 1_000);
    }

    #[tokio::test]
    async fn a_write_that_waits_for_the_reader_marks_the_publisher_held() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut w = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (mut r, _) = listener.accept().await.unwrap();
        let mut held = 0;
        write_all_held(&mut w, TcpStream::try_write, b"room", &mut held)
            .await
            .unwrap();
        assert_eq!(held, 0, "a write with room in the socket does not wait");
        // More than both sockets' buffers hold: the write finishes only
        // once the reader has read.
        let big = vec![7u8; 64 << 20];
        let reader = tokio::spawn(async move {
            let mut got = 0;
            let mut buf = vec![0u8; 1 << 16];
            while got < (64 << 20) + 4 {
                got += r.read(&mut buf).await.unwrap();
            }
            got
        });
        write_all_held(&mut w, TcpStream::try_write, &big, &mut held)
            .await
            .unwrap();
        assert!(
            held > 0,
            "a write the reader made wait marks the publisher held"
        );
        assert_eq!(reader.await.unwrap(), (64 << 20) + 4);
    }

    #[test]
    fn reads_cpu_time_from_a_proc_stat_line() {
        // pid (comm with spaces) state ppid ... utime=250 stime=50 ...
        let line = "42 (my relay) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 1000";
        assert_eq!(cpu_from_stat(line), Some(3.0));
    }
}
