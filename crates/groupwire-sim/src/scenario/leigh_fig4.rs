//! Leigh et al.'s Figure 4: latency and jitter of TCP, UDP and XOR FEC
//! (one parity per three) "over 100 packets" for several packet sizes on
//! the EVL-SARA path (§4.1).
//!
//! The paper gives neither the path's rate and round trip for this
//! experiment nor the stream's rate. The model: the `leigh` scenario's path
//! (its `link_rate`, `rtt`, `queue` and `path_loss`: the transatlantic
//! round trip and the uncongested loss of Figure 5), no cross traffic, and
//! an application that produces `fig4_packets` packets at `fig4_rate` (so
//! a larger packet comes later: the time to gather three of them grows with
//! the size, as the paper's explanation needs). Each scheme and size runs
//! `fig4_runs` times on its own seed, and the figures pool the runs:
//!
//! - **UDP**: each packet once; lost ones have no latency.
//! - **FEC, sent at once** (`xor:3`, groupwire's [`XorEndpoint`]): media
//!   leave as the application produces them, parity after each third; only
//!   a rebuilt packet waits (for the rest of its group and the parity).
//! - **FEC, sent when encoded**: the paper's explanation ("it takes less
//!   time to accumulate and encode 3 small packets") implies a sender that
//!   holds each group until its parity is computed; the same endpoint fed
//!   each group at once, when its last packet is produced.
//! - **TCP** (NewReno, Nagle off as a latency-sensitive application sets
//!   it): each packet a message written when produced; its latency ends when
//!   its last byte is delivered in order, so a loss holds everything behind
//!   it for a retransmission.
//!
//! Latency is one-way on the simulator's clock, from when the application
//! produced the packet. Jitter is the paper's own definition
//! ([`Fig4Jitter`]: mean absolute deviation from the mean of each run of 20
//! packets), with RFC 3550's beside it, over the packets in delivery order.

use std::time::Duration;

use groupwire_metrics::channel::{Fig4Jitter, Rfc3550Jitter};
use groupwire_proto::xor::{XorEndpoint, XorEndpointConfig, XorLayout};
use groupwire_proto::{Bitrate, Instant};
use serde_json::json;

use super::{Plot, PlotStyle, ScenarioError, Table};
use crate::core::{NodeId, Simulator, addr_of};
use crate::machine_node::MachineNode;
use crate::metrics::{LatencyStats, TimeSeries};
use crate::tcp::TcpConfig;
use crate::tcpnode::{TcpApp, TcpHost, TcpSinkHost};
use crate::topology::{Dumbbell, DumbbellConfig};
use crate::traffic::{Message, UdpSender, UdpSink, evenly_spaced, payload_index};

/// The path and the stream of Figure 4.
pub(super) struct Fig4 {
    pub path: DumbbellConfig,
    pub sizes: Vec<u32>,
    pub packets: u32,
    pub rate: Bitrate,
    pub runs: u32,
}

/// A scheme of Figure 4.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scheme {
    Udp,
    FecAtOnce,
    FecWhenEncoded,
    Tcp,
}

impl Scheme {
    const ALL: [Scheme; 4] = [
        Scheme::Udp,
        Scheme::FecAtOnce,
        Scheme::FecWhenEncoded,
        Scheme::Tcp,
    ];

    fn name(self) -> &'static str {
        match self {
            Scheme::Udp => "udp",
            Scheme::FecAtOnce => "fec xor:3, sent at once",
            Scheme::FecWhenEncoded => "fec xor:3, sent when encoded",
            Scheme::Tcp => "tcp",
        }
    }
}

/// What one scheme at one size gave, pooled over the runs.
struct Cell {
    delivered: u64,
    latency: LatencyStats,
    /// Per-run jitters (Figure 4's, RFC 3550's), µs.
    fig4: Vec<f64>,
    rfc3550: Vec<f64>,
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

impl Fig4 {
    /// The table of every scheme and size, and the two plots (latency and
    /// jitter against packet size).
    pub(super) fn run(&self, seed: u64) -> Result<(Table, Vec<Plot>, u64), ScenarioError> {
        let mut rows = Vec::new();
        let mut events = 0;
        let mut lat_plot: Vec<TimeSeries> = Vec::new();
        let mut jit_plot: Vec<TimeSeries> = Vec::new();
        for scheme in Scheme::ALL {
            let mut lat = TimeSeries::new(scheme.name());
            let mut jit = TimeSeries::new(scheme.name());
            for &size in &self.sizes {
                let mut cell = Cell {
                    delivered: 0,
                    latency: LatencyStats::new(),
                    fig4: Vec::new(),
                    rfc3550: Vec::new(),
                };
                for run in 0..self.runs {
                    // Every scheme meets the same loss draws at a size.
                    let run_seed = seed
                        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                        .wrapping_add(u64::from(size) << 20 | u64::from(run));
                    let (samples, ev) = self.run_one(run_seed, scheme, size)?;
                    events += ev;
                    let (mut f, mut r) = (Fig4Jitter::default(), Rfc3550Jitter::default());
                    for d in &samples {
                        let us = d.as_secs_f64() * 1e6;
                        cell.latency.record(*d);
                        f.push(us);
                        r.push(us);
                    }
                    cell.delivered += samples.len() as u64;
                    cell.fig4.extend(f.micros());
                    cell.rfc3550.extend(r.micros());
                }
                let l = cell.latency.summary();
                let (f, r) = (mean(&cell.fig4), mean(&cell.rfc3550));
                rows.push(vec![
                    json!(scheme.name()),
                    json!(size),
                    json!(self.runs),
                    json!(u64::from(self.packets) * u64::from(self.runs)),
                    json!(cell.delivered),
                    json!(l.mean_ms),
                    json!(l.p50_ms),
                    json!(l.p99_ms),
                    json!(l.max_ms),
                    json!(f.map(|j| j / 1000.0)),
                    json!(r.map(|j| j / 1000.0)),
                ]);
                lat.push(f64::from(size), l.mean_ms);
                if let Some(f) = f {
                    jit.push(f64::from(size), f / 1000.0);
                }
            }
            lat_plot.push(lat);
            jit_plot.push(jit);
        }
        let table = Table {
            file: "fig4".into(),
            columns: [
                "scheme",
                "size",
                "runs",
                "sent",
                "delivered",
                "latency_mean_ms",
                "latency_p50_ms",
                "latency_p99_ms",
                "latency_max_ms",
                "jitter_fig4_ms",
                "jitter_rfc3550_ms",
            ]
            .map(String::from)
            .to_vec(),
            rows,
        };
        let plot = |file: &str, title: &str, y: &str, series| Plot {
            file: file.into(),
            title: title.into(),
            x_label: "packet size (bytes)".into(),
            y_label: y.into(),
            series,
            style: PlotStyle::Lines,
            ..Default::default()
        };
        let plots = vec![
            plot(
                "fig4_latency",
                "Latency of 100 packets (Leigh et al. Figure 4, left)",
                "mean one-way latency (ms)",
                lat_plot,
            ),
            plot(
                "fig4_jitter",
                "Jitter, Figure 4's definition (Leigh et al. Figure 4, right)",
                "jitter (ms)",
                jit_plot,
            ),
        ];
        Ok((table, plots, events))
    }

    /// One run: the latencies of the delivered packets in delivery order,
    /// and the simulator's event count.
    fn run_one(
        &self,
        seed: u64,
        scheme: Scheme,
        size: u32,
    ) -> Result<(Vec<Duration>, u64), ScenarioError> {
        let n = self.packets as usize;
        let gap = f64::from(size) * 8.0 / self.rate.as_bps().max(1) as f64;
        let made = evenly_spaced(n as u64, gap, size);
        let mut sim = Simulator::new(seed);
        let a = sim.next_node_id();
        let b = NodeId(a.0 + 1);
        match scheme {
            Scheme::Udp => {
                sim.add_node(Box::new(UdpSender::new(a, b, 1, made.clone())));
                sim.add_node(Box::new(UdpSink::new().with_series()));
            }
            Scheme::FecAtOnce | Scheme::FecWhenEncoded => {
                let layout = XorLayout::row(3);
                let cfg = |peer| {
                    let mut c = XorEndpointConfig::new(addr_of(peer), layout);
                    c.close_when_idle = None;
                    c
                };
                // The paper's sender: a group leaves when its third packet
                // is made (the last group when the stream ends).
                let sends: Vec<Message> = if scheme == Scheme::FecWhenEncoded {
                    (0..n)
                        .map(|i| Message {
                            at: made[(i / 3 * 3 + 2).min(n - 1)].at,
                            size,
                        })
                        .collect()
                } else {
                    made.clone()
                };
                let len = size as usize;
                let ep = XorEndpoint::new(cfg(b)).expect("a row of 3 is a valid layout");
                let node = MachineNode::new(a, ep).with_schedule(
                    sends,
                    Box::new(move |ep, now, i, _m| {
                        let mut p = vec![0u8; len.max(8)];
                        p[..8].copy_from_slice(&(i as u64).to_be_bytes());
                        let _ = ep.send(now, &p);
                    }),
                );
                sim.add_node(Box::new(node));
                let rx = XorEndpoint::new(cfg(a)).expect("a row of 3 is a valid layout");
                sim.add_node(Box::new(MachineNode::new(b, rx)));
            }
            Scheme::Tcp => {
                let cfg = TcpConfig::default().nagle(false);
                let mut host = TcpHost::new(a, cfg.clone());
                host.connect(0, b, TcpApp::Messages(made.clone()), Instant::ZERO);
                sim.add_node(Box::new(host));
                let mut sink = TcpSinkHost::new(b, cfg);
                sink.expect_messages(a, 0, made.clone());
                sim.add_node(Box::new(sink));
            }
        }
        Dumbbell::build(&mut sim, &self.path, &[a], &[b])?;
        // Long enough for TCP to finish after its retransmission timeouts.
        let end = made.last().map_or(Instant::ZERO, |m| m.at)
            + self.path.rtt * 40
            + Duration::from_secs(60);
        sim.run_until(end, &mut |_| {});
        let view = sim.view();
        let ms = |v: f64| Duration::from_secs_f64(v / 1000.0);
        let samples = match scheme {
            Scheme::Udp => {
                let sink = view.node::<UdpSink>(b).expect("node b is the UDP sink");
                sink.series
                    .as_ref()
                    .map(|s| s.points.iter().map(|&(_, l)| ms(l)).collect())
                    .unwrap_or_default()
            }
            Scheme::Tcp => {
                let sink = view.node::<TcpSinkHost>(b).expect("node b is the TCP sink");
                sink.latency_series
                    .points
                    .iter()
                    .map(|&(_, l)| ms(l))
                    .collect()
            }
            Scheme::FecAtOnce | Scheme::FecWhenEncoded => {
                let rx = view
                    .node::<MachineNode<XorEndpoint>>(b)
                    .expect("node b is the XOR receiver");
                let mut seen = vec![false; n];
                rx.events
                    .iter()
                    .filter_map(|(at, ev)| {
                        let i = payload_index(&ev.payload, n as u64)? as usize;
                        (!std::mem::replace(&mut seen[i], true))
                            .then(|| at.saturating_duration_since(made[i].at))
                    })
                    .collect()
            }
        };
        Ok((samples, sim.stats().events))
    }
}
