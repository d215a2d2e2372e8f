//! `awareness-path`: a telepointer stream over plain UDP and over TCP on
//! the same lossy, narrow path.
//!
//! Dyck & Gutwin §5 compare TCP, UDP and FEC for awareness messages; this
//! scenario is the baseline half of that comparison (the FEC half arrives
//! with the AFEC protocol). The same message schedule goes over each
//! protocol, on its own copy of the path with the same seed, so both see
//! the same loss pattern. TCP delivers everything, in order, and pays for
//! it in latency (head-of-line blocking behind retransmissions); UDP
//! delivers on time and loses what the link loses.

use std::time::Duration;

use groupwire_link::link::{LinkConfig, QueueLimit};
use groupwire_link::loss::LossModel;
use groupwire_link::schedule::Schedule;
use groupwire_proto::{Bitrate, Instant};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{Plot, Progress, Report, ScenarioError, Table, report, serde_duration};
use crate::core::{NodeId, Simulator};
use crate::metrics::{LatencySummary, TimeSeries};
use crate::rng;
use crate::tcp::TcpConfig;
use crate::tcpnode::{TcpApp, TcpHost, TcpSinkHost};
use crate::topology::PointToPoint;
use crate::traffic::{
    Message, Telepointer, TelepointerParams, TraceSource, UdpSender, UdpSink, schedule,
};

/// Parameters of the `awareness-path` scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AwarenessPath {
    /// Link rate, both directions (Dyck & Gutwin: 56 kbit/s and 256 kbit/s).
    pub rate: Bitrate,
    /// One-way propagation delay.
    #[serde(with = "serde_duration")]
    pub delay: Duration,
    /// A time-varying rate, both directions, replacing `rate` (e.g.
    /// `schedule:30s 2Mbit/s; 30s 2Mbit/s -> 500kbit/s; repeat`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_schedule: Option<Schedule<Bitrate>>,
    /// A time-varying one-way delay, replacing `delay` (e.g.
    /// `schedule:20s 20ms; 20s 200ms; repeat`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delay_schedule: Option<Schedule<Duration>>,
    /// Loss on the forward direction (Dyck & Gutwin's patterns: `bernoulli:0.1`,
    /// `burst:start=0.04,len=1..5`, ...). The reverse direction is loss-free.
    pub loss: LossModel,
    /// Simulated time.
    #[serde(with = "serde_duration")]
    pub duration: Duration,
    /// The clustered telepointer source.
    pub telepointer: TelepointerParams,
    /// Replay this CSV trace (`seconds,bytes`) instead of the synthetic source.
    pub trace: Option<std::path::PathBuf>,
    /// Nagle's algorithm on the TCP connection (off is what interactive
    /// applications choose).
    pub nagle: bool,
}

impl Default for AwarenessPath {
    fn default() -> Self {
        Self {
            rate: Bitrate::kbps(56),
            delay: Duration::from_millis(40),
            loss: LossModel::dyck_random(0.10),
            rate_schedule: None,
            delay_schedule: None,
            duration: Duration::from_secs(120),
            telepointer: TelepointerParams::default(),
            trace: None,
            nagle: false,
        }
    }
}

impl AwarenessPath {
    pub(super) fn validate(&self) -> Result<(), ScenarioError> {
        let invalid = |key, why: &str| {
            Err(ScenarioError::Invalid {
                key,
                why: why.to_owned(),
            })
        };
        if self.duration.is_zero() {
            return invalid("duration", "must be positive, e.g. 120s");
        }
        let t = &self.telepointer;
        if !(t.max_rate > 0.0 && t.max_rate <= 10_000.0) {
            return invalid(
                "telepointer.max_rate",
                "must be between 0 and 10000 updates per second",
            );
        }
        if t.mean_move.is_zero() || t.mean_pause.is_zero() {
            return invalid("telepointer", "mean_move and mean_pause must be positive");
        }
        if !(0.0..1.0).contains(&t.idle_tick) {
            return invalid("telepointer.idle_tick", "must be in [0, 1)");
        }
        if t.size == 0 || t.size > 60_000 {
            return invalid("telepointer.size", "must be between 1 and 60000 bytes");
        }
        if let Some(p) = &self.trace {
            TraceSource::from_file(p).map_err(|e| ScenarioError::Invalid {
                key: "trace",
                why: e.to_string(),
            })?;
        }
        self.loss.build()?;
        Ok(())
    }

    fn messages(&self, seed: u64) -> Result<Vec<Message>, ScenarioError> {
        let end = Instant::ZERO + self.duration;
        let mut r = rng::stream(seed, "telepointer", 0);
        Ok(match &self.trace {
            Some(p) => {
                let mut src = TraceSource::from_file(p).map_err(|e| ScenarioError::Invalid {
                    key: "trace",
                    why: e.to_string(),
                })?;
                schedule(&mut src, end, &mut r)
            }
            None => schedule(
                &mut Telepointer::new(self.telepointer.clone(), Instant::ZERO),
                end,
                &mut r,
            ),
        })
    }

    fn path(&self, sim: &mut Simulator, a: NodeId, b: NodeId) -> Result<(), ScenarioError> {
        let link = LinkConfig::new()
            .rate(self.rate)
            .latency(self.delay)
            .schedules(self.rate_schedule.as_ref(), self.delay_schedule.as_ref())
            .queue(QueueLimit::Unlimited);
        PointToPoint::build(sim, a, b, link.clone().loss(self.loss.clone()), link)?;
        Ok(())
    }

    pub(super) fn run(&self, seed: u64, progress: Progress<'_>) -> Result<Report, ScenarioError> {
        let msgs = self.messages(seed)?;
        let end = Instant::ZERO + self.duration;
        // Messages still in flight at the end are given time to arrive.
        let drain = end + Duration::from_secs(60);

        // Plain UDP.
        let mut udp = Simulator::new(seed);
        let (a, b) = (udp.next_node_id(), NodeId(udp.next_node_id().0 + 1));
        udp.add_node(Box::new(UdpSender::new(a, b, 0, msgs.clone())));
        udp.add_node(Box::new(UdpSink::new().with_series()));
        self.path(&mut udp, a, b)?;
        udp.run_until(drain, &mut |t| {
            progress(Instant::from_nanos(t.as_nanos() / 2))
        });
        let sink = udp
            .view()
            .node::<UdpSink>(b)
            .expect("node b is the UDP sink");
        let mut udp_loss = sink.loss.clone();
        for _ in sink.loss.packets()..msgs.len() as u64 {
            udp_loss.record(true); // lost at the tail of the run
        }
        let udp_lat = sink.latency.summary();
        let udp_series = sink.series.clone().unwrap_or_default();

        // TCP, one connection, messages written as the application produces them.
        let mut tcp = Simulator::new(seed);
        let cfg = TcpConfig {
            nagle: self.nagle,
            ..TcpConfig::default()
        };
        let mut host = TcpHost::new(a, cfg.clone());
        host.connect(0, b, TcpApp::Messages(msgs.clone()), Instant::ZERO);
        tcp.add_node(Box::new(host));
        let mut sinkhost = TcpSinkHost::new(b, cfg);
        sinkhost.expect_messages(a, 0, msgs.clone());
        tcp.add_node(Box::new(sinkhost));
        self.path(&mut tcp, a, b)?;
        let half = self.duration.as_nanos() as u64 / 2;
        tcp.run_until(drain, &mut |t| {
            progress(Instant::from_nanos(half + t.as_nanos() / 2))
        });
        let view = tcp.view();
        let sinkhost = view.node::<TcpSinkHost>(b).expect("node b is the TCP sink");
        let tcp_lat = sinkhost.latency.summary();
        let tcp_series = sinkhost.latency_series.clone();

        let row = |name: &str, l: &LatencySummary, mer: f64, delivered: u64| {
            vec![
                json!(name),
                json!(msgs.len()),
                json!(delivered),
                json!(mer),
                json!(l.mean_ms),
                json!(l.p50_ms),
                json!(l.p95_ms),
                json!(l.p99_ms),
                json!(l.max_ms),
            ]
        };
        let udp_delivered = udp_loss.packets() - udp_loss.lost();
        let tcp_mer = 1.0 - tcp_lat.count as f64 / msgs.len().max(1) as f64;
        let mut summary = serde_json::Map::new();
        summary.insert("messages".into(), json!(msgs.len()));
        summary.insert(
            "messages_per_sec".into(),
            json!(msgs.len() as f64 / self.duration.as_secs_f64()),
        );
        summary.insert("udp_mer".into(), json!(udp_loss.loss_rate()));
        summary.insert("udp_mean_latency_ms".into(), json!(udp_lat.mean_ms));
        summary.insert("tcp_mer".into(), json!(tcp_mer));
        summary.insert("tcp_mean_latency_ms".into(), json!(tcp_lat.mean_ms));
        summary.insert("tcp_p99_latency_ms".into(), json!(tcp_lat.p99_ms));
        summary.insert(
            "events".into(),
            json!(udp.stats().events + tcp.stats().events),
        );
        let tables = vec![Table {
            file: "protocols".into(),
            columns: [
                "protocol",
                "messages",
                "delivered",
                "mer",
                "mean_ms",
                "p50_ms",
                "p95_ms",
                "p99_ms",
                "max_ms",
            ]
            .map(String::from)
            .to_vec(),
            rows: vec![
                row("udp", &udp_lat, udp_loss.loss_rate(), udp_delivered),
                row("tcp", &tcp_lat, tcp_mer, tcp_lat.count),
            ],
        }];
        let rename = |mut s: TimeSeries, name: &str| {
            s.name = name.to_owned();
            s
        };
        let plots = vec![Plot {
            file: "latency".into(),
            title: format!(
                "Telepointer message latency, {} with {}",
                self.rate, self.loss
            ),
            x_label: "message send time (s)".into(),
            y_label: "latency (ms)".into(),
            series: vec![rename(tcp_series, "tcp"), rename(udp_series, "udp")],
            ..Default::default()
        }];
        Ok(report("awareness-path", seed, summary, tables, plots))
    }
}
