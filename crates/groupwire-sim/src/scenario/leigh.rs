//! `leigh`: Leigh et al.'s XOR FEC over UDP (§4.1, Figure 5), and the
//! latency price of spreading parity across the stream.
//!
//! **Figure 5** sends a stream at 50 Mbit/s over a 100 Mbit/s path between
//! EVL (Chicago) and SARA (Amsterdam), as plain UDP and with one XOR parity
//! per three packets, then again with 50 Mbit/s of congestion injected.
//! The paper's loss: UDP 1.90% → FEC 0.05%, and under congestion 17.4% →
//! 4.15%.
//!
//! The model here: the foreground stream and Poisson cross traffic share a
//! drop-tail bottleneck of `link_rate` on a path of `rtt` (the
//! transatlantic path's round trip, 150 ms, as the bulk-transfer issue
//! takes from the paper's context). The path also loses packets at random
//! (`path_loss`, default Bernoulli 1.9%: the paper's uncongested UDP loss
//! is the only figure of the path's own loss it gives). The paper does not
//! say what else used the path; `background` (Poisson, default 26 Mbit/s)
//! is the cross traffic that was there all along, chosen so that plain UDP
//! under the injected congestion loses about what the paper measured. FEC's
//! residual loss is then a prediction, not a fit.
//!
//! Whether "sent at 50 Mbit/s" includes the parity is not said either;
//! `rate_includes_parity` (default `true`) sends media at 3/4 of the rate
//! so the stream is 50 Mbit/s on the wire, as a rate-limited sender would;
//! `false` adds the parity on top (67 Mbit/s for one per three), and the
//! parity's own load then raises the loss ("the FEC packets themselves can
//! become a source of congestion", §4.1).
//!
//! Beside the paper's one-per-three (`xor:3`) run the spread layouts it
//! asks for ("the selection of encoding packets must be more widely
//! distributed across the data stream"): SMPTE 2022-1 columns and the 2-D
//! matrix, with the latency each rebuild added (from the arrival of the next
//! later packet that did arrive) and the one-way latency, so the price of
//! spreading shows.
//!
//! **Figure 3** (§3, part `fig3`, parameters in the `fig3` table: see
//! [`LeighDiffServ`]) is the DiffServ experiment on the EMERGE testbed: a
//! 25 Mbit/s UDP stream, 25 Mbit/s of competing traffic, then the stream
//! marked Expedited Forwarding, through routers with priority queueing and
//! WFQ and an interior router that ignores the mark.

use std::time::Duration;

use groupwire_link::link::QueueLimit;
use groupwire_link::loss::LossModel;
use groupwire_link::stats::LossStats;
use groupwire_proto::units::IP_UDP_OVERHEAD;
use groupwire_proto::xor::{Via, XorEndpoint, XorEndpointConfig, XorLayout};
use groupwire_proto::{Bitrate, Instant};
use rand::Rng;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::leigh_fig3::LeighDiffServ;
use super::leigh_fig4::Fig4;
use super::{
    Plot, PlotStyle, Progress, Report, ScenarioError, Table, latency_cells, report, require_parts,
    serde_duration,
};
use crate::core::{NodeId, Simulator, addr_of};
use crate::machine_node::MachineNode;
use crate::metrics::{LatencyStats, TimeSeries};
use crate::rng;
use crate::topology::{Dumbbell, DumbbellConfig};
use crate::traffic::{Message, UdpSender, UdpSink, evenly_spaced, payload_index};

/// Parameters of the `leigh` scenario: Figure 5's path, its congestion and
/// the XOR layouts run over it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Leigh {
    /// The bottleneck's rate (the paper's 100 Mbit/s link).
    pub link_rate: Bitrate,
    /// Round-trip propagation delay of the path.
    #[serde(with = "serde_duration")]
    pub rtt: Duration,
    /// Drop-tail queue at the bottleneck, in packets.
    pub queue: u32,
    /// The path's own random loss (on the bottleneck, every flow).
    pub path_loss: LossModel,
    /// The foreground stream's rate (the paper's 50 Mbit/s).
    pub rate: Bitrate,
    /// Bytes per foreground datagram (the paper recommends "small (like
    /// 1Kbyte)" packets).
    pub size: u32,
    /// Whether `rate` includes the parity: `true` sends media at N/(N+1) of
    /// `rate` so the stream is `rate` on the wire; `false` adds the parity on
    /// top (the paper does not say which it did).
    pub rate_includes_parity: bool,
    /// Injected congestion, Poisson (the paper's 50 Mbit/s).
    pub congestion: Bitrate,
    /// Cross traffic present in both runs, Poisson.
    pub background: Bitrate,
    /// Bytes per cross-traffic datagram.
    pub cross_size: u32,
    /// How long the stream runs.
    #[serde(with = "serde_duration")]
    pub duration: Duration,
    /// The XOR layouts compared with plain UDP (text forms: `xor:3`,
    /// `xor:LxD`, `xor:LxD:col`).
    pub layouts: Vec<String>,
    /// Which of the paper's experiments to run: `fig5` (loss, above),
    /// `fig4` (latency and jitter against packet size) and `fig3` (DiffServ).
    pub parts: Vec<String>,
    /// Figure 4's packet sizes, bytes.
    pub fig4_sizes: Vec<u32>,
    /// Figure 4's packets per run (the paper's 100).
    pub fig4_packets: u32,
    /// Figure 4's application rate (not given by the paper): a packet is
    /// made every size × 8 / rate seconds.
    pub fig4_rate: Bitrate,
    /// Figure 4's runs per scheme and size, each on its own seed.
    pub fig4_runs: u32,
    /// Figure 3's testbed, traffic and timeline.
    pub fig3: LeighDiffServ,
}

impl Default for Leigh {
    fn default() -> Self {
        Self {
            link_rate: Bitrate::mbps(100),
            rtt: Duration::from_millis(150),
            queue: 1000,
            path_loss: "bernoulli:0.019".parse().expect("a valid loss model"),
            rate: Bitrate::mbps(50),
            size: 1000,
            rate_includes_parity: true,
            congestion: Bitrate::mbps(50),
            background: Bitrate::mbps(26),
            cross_size: 1000,
            duration: Duration::from_secs(10),
            layouts: ["xor:3", "xor:3x3:col", "xor:12x3:col", "xor:4x4"]
                .map(String::from)
                .to_vec(),
            parts: ["fig5", "fig4", "fig3"].map(String::from).to_vec(),
            fig4_sizes: vec![128, 256, 512, 1024, 1400],
            fig4_packets: 100,
            fig4_rate: Bitrate::mbps(2),
            fig4_runs: 20,
            fig3: LeighDiffServ::default(),
        }
    }
}

/// The parts `parts` may name.
const PARTS: [&str; 3] = ["fig5", "fig4", "fig3"];

/// Figure 5's loss, in percent: UDP and FEC (one per three), without and
/// with the injected congestion.
const PAPER_FIG5: [f64; 4] = [1.90, 0.05, 17.40, 4.15];

/// Node ids of one run's dumbbell: foreground pair, then cross traffic.
const PAIRS: u32 = 2;

/// One run: a condition and a scheme.
struct Run {
    raw: LossStats,
    residual: f64,
    overhead: f64,
    rebuilt_row: u64,
    rebuilt_column: u64,
    added: LatencyStats,
    one_way: LatencyStats,
    events: u64,
}

impl Leigh {
    /// Runs in the whole scenario: two conditions times UDP and each
    /// layout, Figure 4 as one, and one per Figure 3 variant.
    pub(super) fn total_runs(&self) -> u64 {
        let fig5 = if self.runs("fig5") {
            2 * (1 + self.layouts.len() as u64)
        } else {
            0
        };
        let fig3 = if self.runs("fig3") {
            self.fig3.total_runs()
        } else {
            0
        };
        fig5 + u64::from(self.runs("fig4")) + fig3
    }

    fn parsed_layouts(&self) -> Result<Vec<XorLayout>, ScenarioError> {
        self.layouts
            .iter()
            .map(|l| {
                l.parse()
                    .map_err(
                        |e: groupwire_proto::xor::XorLayoutError| ScenarioError::Invalid {
                            key: "layouts",
                            why: e.to_string(),
                        },
                    )
            })
            .collect()
    }

    pub(super) fn validate(&self) -> Result<(), ScenarioError> {
        let invalid = |key, why: String| Err(ScenarioError::Invalid { key, why });
        if self.duration.is_zero() || self.duration > Duration::from_secs(600) {
            return invalid("duration", "must be from 1ms to 600s".into());
        }
        if self.rate.as_bps() == 0 || self.link_rate.as_bps() == 0 {
            return invalid("rate", "rate and link_rate must be positive".into());
        }
        let max = XorEndpointConfig::new(addr_of(NodeId(0)), XorLayout::row(3)).max_payload();
        if !(8..=max).contains(&(self.size as usize)) {
            return invalid("size", format!("must be from 8 to {max} bytes"));
        }
        if self.cross_size == 0 || self.queue == 0 {
            return invalid("cross_size", "cross_size and queue must be positive".into());
        }
        let pps = self.rate.as_bps() as f64 / 8.0 / f64::from(self.size);
        if pps * self.duration.as_secs_f64() > 20e6 {
            return invalid(
                "duration",
                "rate × duration must stay under 20 million packets".into(),
            );
        }
        self.parsed_layouts()?;
        self.path_loss.build()?;
        require_parts(
            &self.parts,
            &PARTS,
            "name some of fig3, fig4 and fig5, e.g. [\"fig3\"]",
        )?;
        if self.fig4_sizes.is_empty()
            || self
                .fig4_sizes
                .iter()
                .any(|s| !(8..=max).contains(&(*s as usize)))
        {
            return invalid("fig4_sizes", format!("name sizes from 8 to {max} bytes"));
        }
        if !(3..=100_000).contains(&self.fig4_packets) || !(1..=1000).contains(&self.fig4_runs) {
            return invalid(
                "fig4_packets",
                "fig4_packets from 3 to 100000, fig4_runs from 1 to 1000".into(),
            );
        }
        if self.fig4_rate.as_bps() == 0 {
            return invalid("fig4_rate", "must be positive".into());
        }
        self.fig3.validate()?;
        Ok(())
    }

    /// The EVL-SARA path of Figures 4 and 5: the bottleneck behind fast
    /// access links.
    fn path(&self) -> DumbbellConfig {
        DumbbellConfig::fast_access(
            self.link_rate,
            self.rtt,
            QueueLimit::Packets(self.queue),
            self.path_loss.clone(),
        )
    }

    fn runs(&self, part: &str) -> bool {
        self.parts.iter().any(|p| p == part)
    }

    /// Media datagrams per second for `layout` (`None`: plain UDP).
    fn media_pps(&self, layout: Option<&XorLayout>) -> f64 {
        let wire = self.rate.as_bps() as f64 / 8.0 / f64::from(self.size);
        match layout {
            Some(l) if self.rate_includes_parity => wire / (1.0 + l.overhead()),
            _ => wire,
        }
    }

    fn run_one(
        &self,
        seed: u64,
        congested: bool,
        layout: Option<XorLayout>,
    ) -> Result<Run, ScenarioError> {
        let mut sim = Simulator::new(seed);
        let first = sim.next_node_id();
        let ids: Vec<NodeId> = (0..2 * PAIRS).map(|i| NodeId(first.0 + i)).collect();
        let (a, c, b, d) = (ids[0], ids[1], ids[2], ids[3]);
        let pps = self.media_pps(layout.as_ref());
        let n = (pps * self.duration.as_secs_f64()) as u64;
        let gap = 1.0 / pps;
        let msgs = evenly_spaced(n, gap, self.size);
        // Cross traffic: Poisson, from its own stream of the seed.
        let cross = Bitrate::bps(
            self.background.as_bps()
                + if congested {
                    self.congestion.as_bps()
                } else {
                    0
                },
        );
        let mut r = rng::stream(seed, "leigh-cross", u64::from(congested));
        let mut cross_msgs = Vec::new();
        if cross.as_bps() > 0 {
            let rate = cross.as_bps() as f64 / 8.0 / f64::from(self.cross_size);
            let mut t = 0.0;
            loop {
                let u: f64 = r.random_range(f64::MIN_POSITIVE..1.0);
                t += -u.ln() / rate;
                if t >= self.duration.as_secs_f64() {
                    break;
                }
                cross_msgs.push(Message {
                    at: Instant::ZERO + Duration::from_secs_f64(t),
                    size: self.cross_size,
                });
            }
        }
        // Nodes are numbered in the order they are added: a, c, b, d.
        match layout {
            None => {
                sim.add_node(Box::new(UdpSender::new(a, b, 1, msgs.clone())));
            }
            Some(l) => {
                let cfg = |peer| {
                    let mut c = XorEndpointConfig::new(addr_of(peer), l);
                    c.close_when_idle = None;
                    c
                };
                let ep = XorEndpoint::new(cfg(b)).map_err(|e| ScenarioError::Invalid {
                    key: "layouts",
                    why: e.to_string(),
                })?;
                let size = self.size as usize;
                let node = MachineNode::new(a, ep).with_schedule(
                    msgs.clone(),
                    Box::new(move |ep, now, i, _m| {
                        let mut p = vec![0u8; size];
                        p[..8].copy_from_slice(&(i as u64).to_be_bytes());
                        // Sizes were validated: never too large.
                        let _ = ep.send(now, &p);
                    }),
                );
                sim.add_node(Box::new(node));
            }
        }
        sim.add_node(Box::new(UdpSender::new(c, d, 2, cross_msgs)));
        match layout {
            None => sim.add_node(Box::new(UdpSink::new())),
            Some(l) => {
                let mut c = XorEndpointConfig::new(addr_of(a), l);
                c.close_when_idle = None;
                let ep = XorEndpoint::new(c).expect("validated layout");
                sim.add_node(Box::new(MachineNode::new(b, ep)))
            }
        };
        sim.add_node(Box::new(UdpSink::new()));
        Dumbbell::build(&mut sim, &self.path(), &[a, c], &[b, d])?;
        let end = Instant::ZERO + self.duration + self.rtt * 2 + Duration::from_secs(1);
        sim.run_until(end, &mut |_| {});
        let view = sim.view();
        let mut raw = LossStats::new();
        let (mut added, mut one_way) = (LatencyStats::new(), LatencyStats::new());
        let run = match layout {
            None => {
                let sink = view.node::<UdpSink>(b).expect("node b is the UDP sink");
                let mut raw = sink.loss.clone();
                for _ in raw.packets()..n {
                    raw.record(true);
                }
                raw.finish();
                Run {
                    residual: raw.loss_rate(),
                    raw,
                    overhead: 0.0,
                    rebuilt_row: 0,
                    rebuilt_column: 0,
                    added,
                    one_way: sink.latency.clone(),
                    events: 0,
                }
            }
            Some(_) => {
                let rx = view
                    .node::<MachineNode<XorEndpoint>>(b)
                    .expect("node b is the XOR receiver");
                let tx = view
                    .node::<MachineNode<XorEndpoint>>(a)
                    .expect("node a is the XOR sender")
                    .machine()
                    .encoder_stats();
                let mut arrived = vec![false; n as usize];
                let mut seen = vec![false; n as usize];
                let (mut unique, mut rows, mut cols) = (0u64, 0, 0);
                for (at, ev) in &rx.events {
                    let Some(i) = payload_index(&ev.payload, n) else {
                        continue;
                    };
                    let i = i as usize;
                    if std::mem::replace(&mut seen[i], true) {
                        continue;
                    }
                    unique += 1;
                    one_way.record(at.saturating_duration_since(msgs[i].at));
                    match ev.recovered {
                        None => arrived[i] = true,
                        Some((via, extra)) => {
                            added.record(extra);
                            match via {
                                Via::Row => rows += 1,
                                Via::Column => cols += 1,
                            }
                        }
                    }
                }
                for &got in &arrived {
                    raw.record(!got);
                }
                raw.finish();
                let hdr = IP_UDP_OVERHEAD as f64;
                let media = n as f64 * (f64::from(self.size) + 12.0 + hdr);
                let parity = tx.fec_bytes as f64 + (tx.row_fec + tx.column_fec) as f64 * hdr;
                Run {
                    raw,
                    residual: 1.0 - unique as f64 / n.max(1) as f64,
                    overhead: if media > 0.0 { parity / media } else { 0.0 },
                    rebuilt_row: rows,
                    rebuilt_column: cols,
                    added,
                    one_way,
                    events: 0,
                }
            }
        };
        Ok(Run {
            events: sim.stats().events,
            ..run
        })
    }

    pub(super) fn run(&self, seed: u64, progress: Progress<'_>) -> Result<Report, ScenarioError> {
        let layouts = self.parsed_layouts()?;
        let mut rows = Vec::new();
        let mut summary = serde_json::Map::new();
        let mut events = 0;
        let mut done = 0;
        let names: Vec<String> = std::iter::once("udp".to_owned())
            .chain(layouts.iter().map(ToString::to_string))
            .collect();
        let mut by_scheme = Vec::new();
        let mut price = Vec::new();
        let conditions: &[bool] = if self.runs("fig5") {
            &[false, true]
        } else {
            &[]
        };
        for &congested in conditions {
            let condition = if congested {
                "congested"
            } else {
                "uncongested"
            };
            let schemes = std::iter::once(None).chain(layouts.iter().copied().map(Some));
            let mut residuals = TimeSeries::new(condition);
            let mut latency = TimeSeries::new(condition);
            for (x, layout) in schemes.enumerate() {
                let r = self.run_one(seed, congested, layout)?;
                done += 1;
                progress(Instant::from_nanos(done));
                events += r.events;
                let scheme = layout.map_or_else(|| "udp".to_owned(), |l| l.to_string());
                let (add, e2e) = (r.added.summary(), r.one_way.summary());
                let mut row = vec![
                    json!(condition),
                    json!(scheme),
                    json!(r.raw.loss_rate()),
                    json!(r.raw.mean_burst_len()),
                    json!(r.residual),
                    json!(r.overhead),
                    json!(r.rebuilt_row),
                    json!(r.rebuilt_column),
                ];
                row.extend(latency_cells(&add, true));
                row.extend(latency_cells(&e2e, false));
                rows.push(row);
                residuals.push(x as f64, 100.0 * r.residual);
                if add.count > 0 {
                    latency.push(add.p99_ms, 100.0 * r.residual);
                }
                summary.insert(format!("residual[{condition},{scheme}]"), json!(r.residual));
                summary.insert(
                    format!("link_loss[{condition},{scheme}]"),
                    json!(r.raw.loss_rate()),
                );
            }
            by_scheme.push(residuals);
            price.push(latency);
        }
        // Figure 5's own bars: UDP and one parity per three.
        for (name, udp, fec) in [
            ("paper, uncongested", PAPER_FIG5[0], PAPER_FIG5[1]),
            ("paper, congested", PAPER_FIG5[2], PAPER_FIG5[3]),
        ] {
            let mut s = TimeSeries::new(name);
            s.push(0.0, udp);
            if let Some(x) = names.iter().position(|n| n == "xor:3") {
                s.push(x as f64, fec);
            }
            by_scheme.push(s);
        }
        let mut tables = Vec::new();
        let mut plots = Vec::new();
        if self.runs("fig5") {
            tables.push(Table::new(
                "schemes",
                &[
                    "condition",
                    "scheme",
                    "link_loss",
                    "mean_burst",
                    "residual",
                    "overhead",
                    "rebuilt_row",
                    "rebuilt_column",
                    "added_p50_ms",
                    "added_p99_ms",
                    "added_max_ms",
                    "one_way_p50_ms",
                    "one_way_p99_ms",
                ],
                rows,
            ));
            plots.extend([
                Plot {
                    file: "fig5".into(),
                    title: "Loss after FEC (Leigh et al. Figure 5 and spread layouts)".into(),
                    x_label: "scheme".into(),
                    y_label: "loss (%)".into(),
                    series: by_scheme,
                    style: PlotStyle::Points,
                    x_categories: names,
                    ..Default::default()
                },
                Plot {
                    file: "latency_price".into(),
                    title: "The latency price of spreading parity".into(),
                    x_label: "p99 latency a rebuild added (ms)".into(),
                    y_label: "loss after FEC (%)".into(),
                    series: price,
                    style: PlotStyle::Points,
                    ..Default::default()
                },
            ]);
        }
        if self.runs("fig4") {
            let fig4 = Fig4 {
                path: self.path(),
                sizes: self.fig4_sizes.clone(),
                packets: self.fig4_packets,
                rate: self.fig4_rate,
                runs: self.fig4_runs,
            };
            let (table, fig4_plots, ev) = fig4.run(seed)?;
            events += ev;
            done += 1;
            progress(Instant::from_nanos(done));
            tables.push(table);
            plots.extend(fig4_plots);
        }
        if self.runs("fig3") {
            let fig3 = self.fig3.run(seed, &mut || {
                done += 1;
                progress(Instant::from_nanos(done));
            })?;
            events += fig3.events;
            tables.extend(fig3.tables);
            plots.extend(fig3.plots);
            summary.extend(fig3.summary);
        }
        summary.insert("events".into(), json!(events));
        Ok(report("leigh", seed, summary, tables, plots))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> Leigh {
        Leigh {
            duration: Duration::from_secs(2),
            layouts: vec!["xor:3".into(), "xor:12x3:col".into()],
            // Figure 3 has tests of its own.
            parts: vec!["fig5".into(), "fig4".into()],
            ..Leigh::default()
        }
    }

    fn cell(r: &Report, row: usize, col: &str) -> f64 {
        let t = &r.tables[0];
        let i = t.columns.iter().position(|c| c == col).expect("column");
        t.rows[row][i].as_f64().unwrap_or(f64::NAN)
    }

    #[test]
    fn fec_cuts_the_loss_and_spreading_costs_latency() {
        let r = small().run(1, &mut |_| {}).unwrap();
        // Rows: uncongested udp, xor:3, 12x3:col; congested the same.
        let (udp, xor3) = (cell(&r, 0, "residual"), cell(&r, 1, "residual"));
        assert!(
            (0.012..0.027).contains(&udp),
            "uncongested UDP loses the path's 1.9%: {udp}"
        );
        assert!(xor3 < udp / 5.0, "one parity per three: {xor3} vs {udp}");
        let (cudp, cxor3) = (cell(&r, 3, "residual"), cell(&r, 4, "residual"));
        assert!(cudp > 0.08, "congestion adds overflow loss: {cudp}");
        assert!(cxor3 < cudp, "{cxor3} vs {cudp}");
        // The price: a column of 12 waits far longer than a row of 3.
        assert!(cell(&r, 2, "added_p99_ms") > 2.0 * cell(&r, 1, "added_p99_ms"));
    }

    /// Figure 4's findings: FEC's latency and jitter between UDP's and
    /// TCP's, and a sender that holds each group pays more for larger
    /// packets (the time to gather three).
    #[test]
    fn figure_4_fec_lies_between_udp_and_tcp_and_small_packets_cost_less() {
        let s = Leigh {
            parts: vec!["fig4".into()],
            fig4_sizes: vec![128, 1400],
            fig4_runs: 5,
            ..Leigh::default()
        };
        let r = s.run(1, &mut |_| {}).expect("runs");
        assert_eq!(r.tables.len(), 1, "only Figure 4 ran");
        let t = &r.tables[0];
        let get = |scheme: &str, size: u64, col: &str| {
            let c = t.columns.iter().position(|x| x == col).expect("column");
            let row = t
                .rows
                .iter()
                .find(|row| row[0] == scheme && row[1] == size)
                .expect("row");
            row[c].as_f64().expect("number")
        };
        let held = "fec xor:3, sent when encoded";
        for size in [128, 1400] {
            for col in ["latency_mean_ms", "jitter_fig4_ms"] {
                let (udp, fec, tcp) = (
                    get("udp", size, col),
                    get(held, size, col),
                    get("tcp", size, col),
                );
                assert!(
                    udp <= fec && fec < tcp,
                    "{col} at {size}: {udp} {fec} {tcp}"
                );
            }
            // Nothing lost for good is what FEC buys over UDP.
            assert!(get(held, size, "delivered") > get("udp", size, "delivered"));
        }
        let excess =
            |size| get(held, size, "latency_mean_ms") - get("udp", size, "latency_mean_ms");
        assert!(
            excess(1400) > 3.0 * excess(128),
            "{} {}",
            excess(128),
            excess(1400)
        );
        let ours = |size| {
            get("fec xor:3, sent at once", size, "latency_mean_ms")
                - get("udp", size, "latency_mean_ms")
        };
        assert!(
            ours(1400) < excess(1400),
            "sending at once costs less than holding"
        );
    }

    #[test]
    fn the_same_seed_gives_the_same_report() {
        let s = Leigh {
            duration: Duration::from_millis(300),
            ..small()
        };
        let a = s.run(7, &mut |_| {}).unwrap();
        let b = s.run(7, &mut |_| {}).unwrap();
        assert_eq!(a.tables[0].rows, b.tables[0].rows);
        assert_ne!(
            s.run(8, &mut |_| {}).unwrap().tables[0].rows,
            a.tables[0].rows
        );
    }

    #[test]
    fn impossible_settings_are_named() {
        for (key, value) in [("layouts", "xor:0"), ("size", "4"), ("duration", "0s")] {
            let mut s = Leigh::default();
            match key {
                "layouts" => s.layouts = vec![value.into()],
                "size" => s.size = 4,
                _ => s.duration = Duration::ZERO,
            }
            let e = s.validate().unwrap_err().to_string();
            assert!(e.contains(key), "{key}: {e}");
        }
    }
}
