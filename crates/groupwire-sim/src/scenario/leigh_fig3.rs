//! Leigh et al.'s Figure 3: DiffServ over the EMERGE testbed (§3).
//!
//! > The experiment began with the transmission of a steady foreground
//! > stream of UDP data at the networks saturation point (25Mbps) from ANL
//! > (Tundra) to EVL (Laurel). After some time, 25Mbps of competitive
//! > networking traffic was transmitted from Fiuk to Laurel to increase
//! > congestion over the inter-domain link between EVL and ANL. Then
//! > DiffServ was enabled on the foreground stream to determine if
//! > bandwidth and latency recovery would occur. (§3)
//!
//! The finding to reproduce: "when DiffServ is enabled the throughput is
//! brought back to near its original levels", but "latency was only
//! partially restored", to "approximately 150ms" one way; the paper's
//! explanation is "queueing that is occurring at the interior router
//! (Aruba)" and that "priority queueing is not pre-emptive on Cisco's 7507".
//!
//! # The path (our reading of the text; Figure 2 is not in it)
//!
//! ```text
//! Tundra ─┐ LAN                 inter-domain           interior            LAN
//!         ├──► ANL router ═════════════════► Aruba ═════════════► EVL router ──► Laurel
//! Fiuk ───┘    priority queueing             ignores marks        WFQ
//!              (EF first)                    (one FIFO class)
//! ```
//!
//! - Both senders are at ANL: the competing traffic crosses "the
//!   inter-domain link between EVL and ANL" as the foreground does.
//! - **ANL router** (Cisco 7507): strict priority, EF first, non-preemptive
//!   (§3: "the routers at ANL had Priority Queueing enabled to produce
//!   DiffServ's Expedited Forwarding behavior"). Queue limits are Cisco
//!   IOS priority queueing's defaults: 20 packets for the high queue and 60
//!   for the normal queue, where unclassified traffic goes.
//! - **Aruba**, the interior router, does not honour the marking (the
//!   paper's explanation needs a queue there that EF cannot skip): a
//!   priority discipline with marks ignored, so every packet shares one
//!   FIFO class. A FIFO queues only where its output is slower than its
//!   input, so we take the link out of Aruba (`interior_rate`, 26 Mbit/s:
//!   the path's saturation point, just above the foreground's 25.5 Mbit/s
//!   on the wire) to be slower than the inter-domain link into it
//!   (`inter_domain_rate`, 28 Mbit/s). Both rates are assumptions. Aruba's
//!   buffer (512 KiB, which drains in about 160 ms at 26 Mbit/s) is **the
//!   one value taken from the paper's result**: a round size of the order
//!   its 150 ms implies. The paper gives no buffer sizes.
//! - **EVL router**: WFQ with Cisco's weighting by IP precedence (weight
//!   ∝ precedence + 1: EF, precedence 5, gets 6 shares to best effort's
//!   one) and WFQ's default congestive discard threshold of 64 packets per
//!   class. Its link to Laurel is a 100 Mbit/s LAN: with these rates it
//!   never holds a queue (the paper's router was there, so ours is).
//! - Propagation: 1 ms on each wide-area hop (ANL and EVL are "approximately
//!   30 minutes away by car"), 0.1 ms on each LAN.
//! - **Traffic**: the foreground is 25 Mbit/s of 1470-byte datagrams (the
//!   default UDP payload of iperf, the measurement tool of the day), CBR.
//!   The competing 25 Mbit/s is Poisson, so the two streams do not
//!   phase-lock at the queues as two CBR streams would in a simulator. The
//!   timeline (`congestion_at`, `diffserv_at`, `duration`: 20, 40, 60 s) is
//!   ours: the paper says only "after some time".
//!
//! # Variants
//!
//! - `ignores-ef`: the paper's testbed as above.
//! - `honours-ef`: Aruba honours EF (its EF class is used): the paper's
//!   explanation predicts the latency is then restored.
//! - `deep-ring`: Aruba honours EF, and both priority routers have a
//!   `deep_tx_ring`-packet transmit ring below the scheduler (Cisco
//!   interfaces hand packets to such a ring; the scheduler picks only when
//!   it has room), the non-preemption the paper blames. EF then waits for
//!   the ring ahead of it: about ring × packet time per router.
//!
//! # Measures
//!
//! At Laurel, per `interval` (by arrival time): the foreground's payload
//! throughput and mean one-way latency (the paper's two graphs). Per phase
//! (before congestion, congested, DiffServ on), over the **second half** of
//! the phase so queues have settled: mean throughput of both streams, mean
//! and p99 one-way latency and loss of the foreground. Per router and class:
//! packets queued, dropped and the largest occupancy.

use std::time::Duration;

use groupwire_link::link::{LinkConfig, QueueLimit};
use groupwire_link::qdisc::{ClassConfig, Dscp, Qdisc};
use groupwire_proto::{Bitrate, Instant};
use rand::Rng;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{Plot, PlotStyle, ScenarioError, Table, serde_duration};
use crate::core::{LinkId, Simulator};
use crate::metrics::{LatencyStats, TimeSeries};
use crate::rng;
use crate::traffic::{Cbr, Message, UdpSender, UdpSink, schedule};

/// Parameters of Figure 3 (the `fig3` table of the `leigh` scenario).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LeighDiffServ {
    /// The foreground's payload rate (paper: 25 Mbit/s, "the networks
    /// saturation point").
    pub rate: Bitrate,
    /// Foreground datagram payload, bytes (iperf's UDP default, 1470).
    pub size: u32,
    /// The competing traffic's payload rate, Poisson (paper: 25 Mbit/s).
    pub competing: Bitrate,
    /// Competing datagram payload, bytes.
    pub competing_size: u32,
    /// When the competing traffic starts.
    #[serde(with = "serde_duration")]
    pub congestion_at: Duration,
    /// When the foreground is marked EF.
    #[serde(with = "serde_duration")]
    pub diffserv_at: Duration,
    /// When the run ends.
    #[serde(with = "serde_duration")]
    pub duration: Duration,
    /// Width of a time-series point.
    #[serde(with = "serde_duration")]
    pub interval: Duration,
    /// The hosts' LANs (Tundra and Fiuk to ANL's router, EVL's router to
    /// Laurel).
    pub lan_rate: Bitrate,
    /// One-way delay of each LAN.
    #[serde(with = "serde_duration")]
    pub lan_delay: Duration,
    /// ANL's router to Aruba: the inter-domain link.
    pub inter_domain_rate: Bitrate,
    /// Its one-way delay.
    #[serde(with = "serde_duration")]
    pub inter_domain_delay: Duration,
    /// Aruba to EVL's router: the path's narrowest link.
    pub interior_rate: Bitrate,
    /// Its one-way delay.
    #[serde(with = "serde_duration")]
    pub interior_delay: Duration,
    /// ANL's router's queueing towards Aruba.
    pub anl: Qdisc,
    /// Aruba's queueing towards EVL. Must be classful: the `honours-ef`
    /// and `deep-ring` variants turn its `honour_marks` on.
    pub interior: Qdisc,
    /// EVL's router's queueing towards Laurel.
    pub evl: Qdisc,
    /// Transmit ring of the priority routers in the `deep-ring` variant,
    /// packets (an assumption: the paper gives none).
    pub deep_tx_ring: u32,
    /// Which variants to run: `ignores-ef` (the paper's), `honours-ef`,
    /// `deep-ring`.
    pub variants: Vec<Variant>,
}

/// A variant of Figure 3's testbed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Variant {
    /// Aruba as configured in `interior` (by default it ignores the EF
    /// mark: the paper's testbed).
    IgnoresEf,
    /// Aruba honours it.
    HonoursEf,
    /// Aruba honours it, and the priority routers hand packets to a deep
    /// transmit ring.
    DeepRing,
}

impl Variant {
    /// The name in tables and plots.
    pub fn name(self) -> &'static str {
        match self {
            Self::IgnoresEf => "ignores-ef",
            Self::HonoursEf => "honours-ef",
            Self::DeepRing => "deep-ring",
        }
    }
}

impl Default for LeighDiffServ {
    fn default() -> Self {
        Self {
            rate: Bitrate::mbps(25),
            size: IPERF_UDP_PAYLOAD,
            competing: Bitrate::mbps(25),
            competing_size: IPERF_UDP_PAYLOAD,
            congestion_at: Duration::from_secs(20),
            diffserv_at: Duration::from_secs(40),
            duration: Duration::from_secs(60),
            interval: Duration::from_secs(1),
            lan_rate: Bitrate::mbps(100),
            lan_delay: Duration::from_micros(100),
            inter_domain_rate: Bitrate::mbps(28),
            inter_domain_delay: Duration::from_millis(1),
            interior_rate: Bitrate::mbps(26),
            interior_delay: Duration::from_millis(1),
            anl: Qdisc::priority(vec![
                ClassConfig::new("ef")
                    .dscp([Dscp::EF])
                    .limit(QueueLimit::Packets(IOS_PQ_HIGH)),
                ClassConfig::new("best-effort").limit(QueueLimit::Packets(IOS_PQ_NORMAL)),
            ]),
            interior: Qdisc::Priority(
                groupwire_link::qdisc::Classes::new(vec![
                    ClassConfig::new("ef")
                        .dscp([Dscp::EF])
                        .limit(QueueLimit::Packets(IOS_PQ_HIGH)),
                    ClassConfig::new("best-effort").limit(QueueLimit::Bytes(ARUBA_BUFFER)),
                ])
                .honour_marks(false),
            ),
            evl: Qdisc::wfq(vec![
                ClassConfig::new("ef")
                    .dscp([Dscp::EF])
                    .weight(u32::from(Dscp::EF.precedence()) + 1)
                    .limit(QueueLimit::Packets(WFQ_DISCARD_THRESHOLD)),
                ClassConfig::new("best-effort")
                    .weight(1)
                    .limit(QueueLimit::Packets(WFQ_DISCARD_THRESHOLD)),
            ]),
            deep_tx_ring: 64,
            variants: vec![Variant::IgnoresEf, Variant::HonoursEf, Variant::DeepRing],
        }
    }
}

/// iperf's default UDP payload (1470 bytes: a 1500-byte IP packet less the
/// IP and UDP headers, rounded down).
const IPERF_UDP_PAYLOAD: u32 = 1470;
/// Cisco IOS priority queueing's default limit of the high queue, packets.
const IOS_PQ_HIGH: u32 = 20;
/// Cisco IOS priority queueing's default limit of the normal queue
/// (unclassified traffic), packets.
const IOS_PQ_NORMAL: u32 = 60;
/// Cisco WFQ's default congestive discard threshold, packets per flow.
const WFQ_DISCARD_THRESHOLD: u32 = 64;
/// Aruba's buffer: the one value taken from the paper's result (a round
/// size that drains in about its 150 ms at the default 26 Mbit/s).
const ARUBA_BUFFER: u64 = 512 * 1024;

/// The paper's phases, in order.
const PHASES: [&str; 3] = ["before", "congested", "diffserv"];

/// What Figure 3 adds to the report.
pub(super) struct Fig3Output {
    pub tables: Vec<Table>,
    pub plots: Vec<Plot>,
    pub summary: serde_json::Map<String, serde_json::Value>,
    pub events: u64,
}

/// What one variant's run measured.
struct Outcome {
    /// Foreground `(sent_at, latency_ms)` per received datagram.
    fg: Vec<(f64, f64)>,
    /// Competing `(sent_at, latency_ms)` per received datagram.
    bg: Vec<(f64, f64)>,
    /// Foreground send times.
    fg_sent: Vec<f64>,
    /// Per router: name and (class name, stats).
    queues: Vec<(&'static str, Vec<(String, groupwire_link::ClassStats)>)>,
    events: u64,
}

impl LeighDiffServ {
    /// Runs in this part (one per variant).
    pub(super) fn total_runs(&self) -> u64 {
        self.variants.len() as u64
    }

    pub(super) fn validate(&self) -> Result<(), ScenarioError> {
        let invalid = |why: String| Err(ScenarioError::Invalid { key: "fig3", why });
        if !(Duration::ZERO < self.congestion_at
            && self.congestion_at < self.diffserv_at
            && self.diffserv_at < self.duration
            && self.duration <= Duration::from_secs(600))
        {
            return invalid("need 0 < congestion_at < diffserv_at < duration <= 600s".into());
        }
        if self.interval.is_zero() || self.interval > self.duration {
            return invalid("interval must be positive and within the duration".into());
        }
        for r in [
            self.rate,
            self.competing,
            self.lan_rate,
            self.inter_domain_rate,
            self.interior_rate,
        ] {
            if r.as_bps() == 0 {
                return invalid("rates must be positive".into());
            }
        }
        for s in [self.size, self.competing_size] {
            if !(8..=MAX_UDP_PAYLOAD).contains(&s) {
                return invalid(format!("sizes must be 8 to {MAX_UDP_PAYLOAD} bytes"));
            }
        }
        let pps = self.rate.as_bps() as f64 / 8.0 / f64::from(self.size)
            + self.competing.as_bps() as f64 / 8.0 / f64::from(self.competing_size);
        if pps * self.duration.as_secs_f64() > 20e6 {
            return invalid("rates × duration must stay under 20 million packets".into());
        }
        for (name, q) in [
            ("anl", &self.anl),
            ("interior", &self.interior),
            ("evl", &self.evl),
        ] {
            if let Err(e) = q.validate() {
                return invalid(format!("{name}: {e}"));
            }
        }
        if self.interior.classes().is_none() {
            return invalid(
                "interior must be classful (priority, drr or wfq with marks ignored): the honours-ef variant turns its marks on".into(),
            );
        }
        if self.variants.is_empty() {
            return invalid("name variants: ignores-ef, honours-ef, deep-ring".into());
        }
        if self.deep_tx_ring == 0 {
            return invalid("deep_tx_ring must be at least 1 packet".into());
        }
        Ok(())
    }

    /// The phase-means table, the per-router queue table, the two time
    /// series plots, and the events simulated.
    pub(super) fn run(
        &self,
        seed: u64,
        progress: &mut dyn FnMut(),
    ) -> Result<Fig3Output, ScenarioError> {
        let mut phase_rows = Vec::new();
        let mut queue_rows = Vec::new();
        let mut series_rows = Vec::new();
        let mut thr_plot = Vec::new();
        let mut lat_plot = Vec::new();
        let mut summary = serde_json::Map::new();
        let mut events = 0;
        let end = self.duration.as_secs_f64();
        let bounds = [
            0.0,
            self.congestion_at.as_secs_f64(),
            self.diffserv_at.as_secs_f64(),
            end,
        ];
        for &variant in &self.variants {
            let out = self.run_variant(seed, variant)?;
            events += out.events;
            progress();
            // Time series by arrival time.
            let step = self.interval.as_secs_f64();
            let bins = (end / step).ceil() as usize;
            let mut count = vec![0u64; bins];
            let mut lat_sum = vec![0.0; bins];
            for &(sent, lat) in &out.fg {
                let arrived = sent + lat / 1e3;
                let Some(b) = bin(arrived, step, bins) else {
                    continue;
                };
                count[b] += 1;
                lat_sum[b] += lat;
            }
            let mut bg_count = vec![0u64; bins];
            for &(sent, lat) in &out.bg {
                if let Some(b) = bin(sent + lat / 1e3, step, bins) {
                    bg_count[b] += 1;
                }
            }
            let mbps = |n: u64, size: u32| n as f64 * f64::from(size) * 8.0 / step / 1e6;
            let mut thr = TimeSeries::new(variant.name());
            let mut lat = TimeSeries::new(variant.name());
            for b in 0..bins {
                let t = (b as f64 + 0.5) * step;
                let fg_mbps = mbps(count[b], self.size);
                let mean = (count[b] > 0).then(|| lat_sum[b] / count[b] as f64);
                thr.push(t, fg_mbps);
                if let Some(m) = mean {
                    lat.push(t, m);
                }
                series_rows.push(vec![
                    json!(variant.name()),
                    json!(t),
                    json!(fg_mbps),
                    json!(mean),
                    json!(mbps(bg_count[b], self.competing_size)),
                ]);
            }
            thr_plot.push(thr);
            lat_plot.push(lat);
            // Phase means over each phase's second half.
            for (p, phase) in PHASES.iter().enumerate() {
                let (from, to) = ((bounds[p] + bounds[p + 1]) / 2.0, bounds[p + 1]);
                let span = to - from;
                let within = |x: f64| x >= from && x < to;
                let mut latency = LatencyStats::new();
                let mut fg_arrived = 0u64;
                for &(sent, l) in &out.fg {
                    if within(sent + l / 1e3) {
                        fg_arrived += 1;
                        latency.record(Duration::from_secs_f64(l / 1e3));
                    }
                }
                let bg_arrived =
                    out.bg.iter().filter(|&&(s, l)| within(s + l / 1e3)).count() as u64;
                let sent = out.fg_sent.iter().filter(|&&s| within(s)).count();
                let got = out.fg.iter().filter(|&&(s, _)| within(s)).count();
                let loss = if sent == 0 {
                    0.0
                } else {
                    1.0 - got as f64 / sent as f64
                };
                let fg_thr = fg_arrived as f64 * f64::from(self.size) * 8.0 / span / 1e6;
                let bg_thr = bg_arrived as f64 * f64::from(self.competing_size) * 8.0 / span / 1e6;
                let l = latency.summary();
                let key = |what: &str| format!("fig3_{what}[{},{phase}]", variant.name());
                summary.insert(key("throughput_mbps"), json!(fg_thr));
                summary.insert(key("latency_ms"), json!(l.mean_ms));
                phase_rows.push(vec![
                    json!(variant.name()),
                    json!(phase),
                    json!(from),
                    json!(to),
                    json!(fg_thr),
                    json!(l.mean_ms),
                    json!(l.p99_ms),
                    json!(loss),
                    json!(bg_thr),
                ]);
            }
            for (router, classes) in out.queues {
                for (class, s) in classes {
                    queue_rows.push(vec![
                        json!(variant.name()),
                        json!(router),
                        json!(class),
                        json!(s.enqueued),
                        json!(s.dropped),
                        json!(s.max_packets),
                        json!(s.max_bytes),
                    ]);
                }
            }
        }
        let columns = |c: &[&str]| c.iter().map(|s| (*s).to_owned()).collect();
        let tables = vec![
            Table {
                file: "fig3".into(),
                columns: columns(&[
                    "variant",
                    "phase",
                    "from_s",
                    "to_s",
                    "throughput_mbps",
                    "latency_mean_ms",
                    "latency_p99_ms",
                    "loss",
                    "competing_mbps",
                ]),
                rows: phase_rows,
            },
            Table {
                file: "fig3_queues".into(),
                columns: columns(&[
                    "variant",
                    "router",
                    "class",
                    "enqueued",
                    "dropped",
                    "max_packets",
                    "max_bytes",
                ]),
                rows: queue_rows,
            },
            Table {
                file: "fig3_series".into(),
                columns: columns(&[
                    "variant",
                    "t_s",
                    "throughput_mbps",
                    "latency_mean_ms",
                    "competing_mbps",
                ]),
                rows: series_rows,
            },
        ];
        let markers = vec![bounds[1], bounds[2]];
        let plot = |file: &str, title: &str, y: &str, series| Plot {
            file: file.into(),
            title: title.into(),
            x_label: "time (s); competing traffic, then EF, from the markers".into(),
            y_label: y.into(),
            series,
            style: PlotStyle::Lines,
            markers: markers.clone(),
            ..Default::default()
        };
        let plots = vec![
            plot(
                "fig3_throughput",
                "Foreground throughput (Leigh et al. Figure 3, top)",
                "throughput at Laurel (Mbit/s)",
                thr_plot,
            ),
            plot(
                "fig3_latency",
                "Foreground one-way latency (Leigh et al. Figure 3, bottom)",
                "one-way latency (ms)",
                lat_plot,
            ),
        ];
        Ok(Fig3Output {
            tables,
            plots,
            summary,
            events,
        })
    }

    /// One run of the timeline with `variant`'s routers.
    fn run_variant(&self, seed: u64, variant: Variant) -> Result<Outcome, ScenarioError> {
        let mut interior = self.interior.clone();
        let mut anl = self.anl.clone();
        //= Leigh et al., §3
        //# We believe the increased latency under heavy congestion maybe due
        //# to queueing that is occurring at the interior router (Aruba.)
        if variant != Variant::IgnoresEf
            && let Some(c) = interior.classes_mut()
        {
            c.honour_marks = true;
        }
        if variant == Variant::DeepRing {
            for q in [&mut interior, &mut anl] {
                if matches!(q, Qdisc::Priority(_))
                    && let Some(c) = q.classes_mut()
                {
                    c.tx_ring = self.deep_tx_ring;
                }
            }
        }
        let mut sim = Simulator::new(seed);
        let [tundra, fiuk, laurel, laurel_bg] = sim.next_node_ids();
        let end = Instant::ZERO + self.duration;
        let mut r = rng::stream(seed, "leigh-fig3", 0);
        let fg_msgs = schedule(
            &mut Cbr::new(self.rate, self.size, Instant::ZERO),
            end,
            &mut r,
        );
        let fg_sent: Vec<f64> = fg_msgs.iter().map(|m| m.at.as_secs_f64()).collect();
        // Competing traffic: Poisson from `congestion_at`.
        let mut bg_msgs = Vec::new();
        let per_sec = self.competing.as_bps() as f64 / 8.0 / f64::from(self.competing_size);
        let mut t = self.congestion_at.as_secs_f64();
        loop {
            let u: f64 = r.random_range(f64::MIN_POSITIVE..1.0);
            t += -u.ln() / per_sec;
            if t >= self.duration.as_secs_f64() {
                break;
            }
            bg_msgs.push(Message {
                at: Instant::ZERO + Duration::from_secs_f64(t),
                size: self.competing_size,
            });
        }
        sim.add_node(Box::new(UdpSender::new(tundra, laurel, 1, fg_msgs)));
        sim.add_node(Box::new(UdpSender::new(fiuk, laurel_bg, 2, bg_msgs)));
        sim.add_node(Box::new(UdpSink::new().with_series()));
        sim.add_node(Box::new(UdpSink::new().with_series()));
        let lan = LinkConfig::new()
            .rate(self.lan_rate)
            .latency(self.lan_delay);
        let tundra_lan = sim.add_link("tundra-lan", lan.clone())?;
        let fiuk_lan = sim.add_link("fiuk-lan", lan.clone())?;
        let routers: [(&'static str, LinkId, &Qdisc); 3] = [
            (
                "anl",
                sim.add_link(
                    "anl-aruba",
                    LinkConfig::new()
                        .rate(self.inter_domain_rate)
                        .latency(self.inter_domain_delay)
                        .qdisc(anl.clone()),
                )?,
                &anl,
            ),
            (
                "aruba",
                sim.add_link(
                    "aruba-evl",
                    LinkConfig::new()
                        .rate(self.interior_rate)
                        .latency(self.interior_delay)
                        .qdisc(interior.clone()),
                )?,
                &interior,
            ),
            (
                "evl",
                sim.add_link("evl-laurel", lan.qdisc(self.evl.clone()))?,
                &self.evl,
            ),
        ];
        let wan: Vec<LinkId> = routers.iter().map(|r| r.1).collect();
        sim.add_route(
            tundra,
            laurel,
            std::iter::once(tundra_lan).chain(wan.clone()).collect(),
        );
        sim.add_route(
            fiuk,
            laurel_bg,
            std::iter::once(fiuk_lan).chain(wan).collect(),
        );
        //= Leigh et al., §3
        //# Then DiffServ was enabled on the foreground stream
        sim.schedule(
            Instant::ZERO + self.diffserv_at,
            Box::new(move |sim| {
                sim.node_mut::<UdpSender>(tundra)
                    .expect("Tundra is the foreground sender")
                    .set_dscp(Dscp::EF);
            }),
        );
        // Long enough for the last datagrams to cross full queues.
        sim.run_until(end + Duration::from_secs(5), &mut |_| {});
        let view = sim.view();
        let series = |id| {
            view.node::<UdpSink>(id)
                .and_then(|s| s.series.as_ref())
                .map(|s| s.points.clone())
                .unwrap_or_default()
        };
        let queues = routers
            .iter()
            .map(|&(name, id, q)| {
                let names = q
                    .classes()
                    .map(|c| c.classes.iter().map(|c| c.name.clone()).collect())
                    .unwrap_or_else(|| vec!["fifo".to_owned()]);
                let stats = view.link(id).link.class_stats();
                (name, names.into_iter().zip(stats.iter().cloned()).collect())
            })
            .collect();
        Ok(Outcome {
            fg: series(laurel),
            bg: series(laurel_bg),
            fg_sent,
            queues,
            events: sim.stats().events,
        })
    }
}

/// The bin of time `t`, if within the run.
fn bin(t: f64, step: f64, bins: usize) -> Option<usize> {
    let b = (t / step).floor();
    (b >= 0.0 && (b as usize) < bins).then_some(b as usize)
}

/// The largest UDP payload in an IPv4 datagram.
const MAX_UDP_PAYLOAD: u32 = 65_507;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{Leigh, Scenario};

    #[test]
    fn only_figure_3_runs_when_asked() {
        let mut s = Scenario::builtin("leigh").expect("built in");
        s.set("parts", "[\"fig3\"]").expect("a part");
        s.set("fig3.duration", "3s").expect("a duration");
        s.set("fig3.congestion_at", "1s").expect("a time");
        s.set("fig3.diffserv_at", "2s").expect("a time");
        s.set("fig3.variants", "[\"honours-ef\"]")
            .expect("a variant");
        let r = s.run(1, &mut |_| {}).expect("runs");
        let files: Vec<&str> = r.tables.iter().map(|t| t.file.as_str()).collect();
        assert_eq!(files, ["fig3", "fig3_queues", "fig3_series"]);
        assert_eq!(r.tables[0].rows.len(), 3, "one row per phase");
        assert_eq!(r.tables[2].rows.len(), 3, "one row per second");
        let plots: Vec<&str> = r.plots.iter().map(|p| p.file.as_str()).collect();
        assert_eq!(plots, ["fig3_throughput", "fig3_latency"]);
        assert_eq!(r.plots[0].markers, [1.0, 2.0]);
    }

    #[test]
    fn routers_read_from_toml_and_set() {
        let s = Scenario::builtin("leigh").expect("built in");
        assert_eq!(Scenario::from_toml(&s.to_toml()).expect("round trip"), s);
        let mut s = s;
        s.set("fig3.interior.honour_marks", "true").expect("a bool");
        s.set("fig3.anl.tx_ring", "8").expect("a ring");
        let Scenario::Leigh(l) = &s else {
            panic!("leigh builds a Leigh")
        };
        let interior = l.fig3.interior.classes().expect("classful");
        assert!(interior.honour_marks);
        assert_eq!(l.fig3.anl.classes().expect("classful").tx_ring, 8);
        let toml = "scenario = \"leigh\"\nparts = [\"fig3\"]\n[fig3]\nvariants = [\"ignores-ef\"]\n\
                    [fig3.evl]\nkind = \"drr\"\nclasses = [{ name = \"ef\", dscp = [46], weight = 6 }, { name = \"be\" }]\n";
        let s = Scenario::from_toml(toml).expect("a DRR router");
        let Scenario::Leigh(l) = &s else {
            panic!("leigh builds a Leigh")
        };
        assert!(matches!(l.fig3.evl, Qdisc::Drr(_)));
    }

    #[test]
    fn impossible_settings_are_named() {
        let bad: [fn(&mut LeighDiffServ); 6] = [
            |f| f.diffserv_at = f.congestion_at,
            |f| f.interval = Duration::ZERO,
            |f| f.interior = Qdisc::Fifo,
            |f| f.variants.clear(),
            |f| f.size = 4,
            |f| f.evl = Qdisc::wfq(vec![ClassConfig::new("x").weight(0)]),
        ];
        for (i, change) in bad.iter().enumerate() {
            let mut s = Leigh::default();
            change(&mut s.fig3);
            let e = s.validate().expect_err("invalid").to_string();
            assert!(e.contains("fig3"), "{i}: {e}");
        }
        let s = Leigh {
            parts: vec!["fig2".into()],
            ..Leigh::default()
        };
        assert!(
            s.validate()
                .expect_err("no such part")
                .to_string()
                .contains("fig3")
        );
    }
}
