//! Topologies: which links exist and which route each packet takes.

use std::time::Duration;

use groupwire_link::link::{LinkConfig, QueueLimit};
use groupwire_link::loss::{LossError, LossModel};
use groupwire_proto::Bitrate;

use crate::core::{LinkId, NodeId, Simulator};

/// Two nodes joined by one link in each direction.
#[derive(Debug, Clone, Copy)]
pub struct PointToPoint {
    /// `a` → `b`.
    pub forward: LinkId,
    /// `b` → `a`.
    pub reverse: LinkId,
}

impl PointToPoint {
    /// Adds the links and both routes.
    pub fn build(
        sim: &mut Simulator,
        a: NodeId,
        b: NodeId,
        forward: LinkConfig,
        reverse: LinkConfig,
    ) -> Result<Self, LossError> {
        let f = sim.add_link("forward", forward)?;
        let r = sim.add_link("reverse", reverse)?;
        sim.add_route(a, b, vec![f]);
        sim.add_route(b, a, vec![r]);
        Ok(Self {
            forward: f,
            reverse: r,
        })
    }
}

/// The dumbbell of the GENEVA evaluation (Matsuzono et al. §4.1, Fig. 7):
/// N senders and N receivers on fast access links, one bottleneck between
/// two routers. Routers are implicit (they forward instantly); the
/// bottleneck router's egress queue is the bottleneck link's drop-tail queue.
#[derive(Debug, Clone, PartialEq)]
pub struct DumbbellConfig {
    /// Bottleneck rate, both directions.
    pub bottleneck_rate: Bitrate,
    /// Two-way propagation delay between a sender and its receiver (RTTmin).
    pub rtt: Duration,
    /// Access link rate (paper: 10 Gbit/s).
    pub access_rate: Bitrate,
    /// One-way delay of each access link. The bottleneck's one-way delay is
    /// `rtt / 2 - 2 * access_delay`, so the path's RTTmin is exactly `rtt`.
    pub access_delay: Duration,
    /// The bottleneck queue, both directions.
    pub queue: QueueLimit,
    /// Extra loss on the forward bottleneck (none in the paper).
    pub loss: LossModel,
    /// Send-time jitter of every host (zero: none). Each packet a sender or
    /// receiver sends leaves it after an extra delay drawn uniformly from
    /// `[0, host_jitter]`, in order (a packet never overtakes the one ahead
    /// of it): the jitter of the host's uplink ([`LinkConfig::jitter`]).
    /// The paper's hosts (and ns-3's) send at exact times; real hosts do
    /// not, and exact times lock periodic sources into phase with the
    /// bottleneck (see `tcp-dumbbell`'s `send_jitter`).
    pub host_jitter: Duration,
}

impl DumbbellConfig {
    /// A bottleneck of `rate`, `rtt`, `queue` and `loss` behind fast
    /// access links (10 Gbit/s, 100 us each way), hosts without jitter:
    /// the path a bulk transfer's bottleneck alone decides.
    pub fn fast_access(rate: Bitrate, rtt: Duration, queue: QueueLimit, loss: LossModel) -> Self {
        Self {
            bottleneck_rate: rate,
            rtt,
            access_rate: Bitrate::gbps(10),
            access_delay: Duration::from_micros(100),
            queue,
            loss,
            host_jitter: Duration::ZERO,
        }
    }

    /// One-way delay of the bottleneck link.
    pub fn bottleneck_delay(&self) -> Duration {
        (self.rtt / 2).saturating_sub(self.access_delay * 2)
    }
}

/// The links of a built dumbbell.
#[derive(Debug, Clone)]
pub struct Dumbbell {
    /// Left router → right router: where data packets queue.
    pub bottleneck: LinkId,
    /// Right router → left router: where ACKs go.
    pub bottleneck_rev: LinkId,
}

impl Dumbbell {
    /// Adds the links for `left[i]` ↔ `right[i]` pairs and their routes.
    ///
    /// # Panics
    /// If `left` and `right` differ in length (a scenario bug).
    pub fn build(
        sim: &mut Simulator,
        cfg: &DumbbellConfig,
        left: &[NodeId],
        right: &[NodeId],
    ) -> Result<Self, LossError> {
        assert_eq!(
            left.len(),
            right.len(),
            "a dumbbell pairs senders with receivers"
        );
        let bn = LinkConfig::new()
            .rate(cfg.bottleneck_rate)
            .latency(cfg.bottleneck_delay())
            .queue(cfg.queue.clone());
        let bottleneck = sim.add_link("bottleneck", bn.clone().loss(cfg.loss.clone()))?;
        let bottleneck_rev = sim.add_link("bottleneck-reverse", bn)?;
        let access = LinkConfig::new()
            .rate(cfg.access_rate)
            .latency(cfg.access_delay);
        // A host's own uplink carries its send-time jitter; the routers'
        // downlinks do not jitter.
        let uplink = access.clone().jitter(cfg.host_jitter);
        for (i, (&l, &r)) in left.iter().zip(right).enumerate() {
            let l_up = sim.add_link(format!("left-{i}-up"), uplink.clone())?;
            let l_down = sim.add_link(format!("left-{i}-down"), access.clone())?;
            let r_up = sim.add_link(format!("right-{i}-up"), uplink.clone())?;
            let r_down = sim.add_link(format!("right-{i}-down"), access.clone())?;
            sim.add_route(l, r, vec![l_up, bottleneck, r_down]);
            sim.add_route(r, l, vec![r_up, bottleneck_rev, l_down]);
        }
        Ok(Self {
            bottleneck,
            bottleneck_rev,
        })
    }
}
