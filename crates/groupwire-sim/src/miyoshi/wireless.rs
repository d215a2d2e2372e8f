//! Miyoshi et al.'s network (Figure 1, Table 1): a wired host, a base
//! station and a wireless terminal, one bulk TCP Reno transfer from the
//! wired host down to the terminal.
//!
//! | parameter | value | source |
//! |---|---|---|
//! | wireless link | 384 kbit/s each way, 1 ms | Table 1 |
//! | wired link | 10 Mbit/s each way, 1 ms | not given; 26× the wireless rate, so it never limits |
//! | segments | 100 bytes on the wire (60 payload + 40 header) | Table 1 |
//! | ACKs | 40 bytes | Table 1 |
//! | station buffer | 50 KB per wireless direction | Table 1 |
//! | TCP | Reno without SACK, an ACK per segment, window 20 segments | ns-2's `Agent/TCP/Reno`, `TCPSink` and `window_` defaults (§3 used ns-2) |
//! | RTO | 200 ms minimum, 3 s initial | ns-2's `minrto_` / `rtxcur_init_` |
//!
//! Losses come only from the wireless link: the window (20 × 100 bytes)
//! can never fill the 50 KB buffer. Bit errors hit both wireless
//! directions (ACKs too), each with its own draws from the same channel
//! model; with link-layer FEC both directions use the code the station
//! chose. A frame with FEC is longer on the air by its parity
//! ([`Bch::wire_bits`]), which is where FEC's cost in throughput comes from.

use std::sync::Arc;
use std::time::Duration;

use groupwire_codec::{Bch, BchError};
use groupwire_link::link::{LinkConfig, QueueLimit};
use groupwire_link::loss::{LossError, LossModel};
use groupwire_proto::control::ladder::{PredictiveConfig, ThresholdConfig};
use groupwire_proto::{Bitrate, Instant};

use super::station::{BaseStation, LinkFec, StationConfig, StationStats};
use crate::core::Simulator;
use crate::tcp::{HEADER_BYTES, TcpConfig, Variant};
use crate::tcpnode::{TcpApp, TcpHost, TcpSinkHost};

/// A TCP enhancement and link-layer FEC combination, in a one-line text
/// form joined by `+`: `reno` (nothing), `eln`, `snoop`, `snoop+eln`,
/// `fec:5` (a fixed BCH code correcting 5 bits), `snoop+eln+fec:10`,
/// `snoop+eln+adaptive` (the threshold switch over no FEC and the
/// scenario's codes), `snoop+eln+predictive` (the predictive switch).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Scheme {
    /// Snoop at the station.
    pub snoop: bool,
    /// ELN at the station and the sender.
    pub eln: bool,
    /// The wireless link's FEC.
    pub fec: SchemeFec,
}

/// The FEC part of a [`Scheme`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemeFec {
    /// None.
    None,
    /// BCH(127, k) correcting this many bits.
    Fixed(usize),
    /// The threshold switch (Miyoshi et al. §4).
    Adaptive,
    /// The predictive switch on link-layer reports (beyond the paper).
    Predictive,
}

impl Scheme {
    /// Plain TCP Reno.
    pub const RENO: Self = Self {
        snoop: false,
        eln: false,
        fec: SchemeFec::None,
    };

    /// The station and sender configuration of this scheme on `path`;
    /// `codes` is the adaptive ladder above no FEC.
    pub fn apply(
        &self,
        path: &mut WirelessPath,
        codes: &[Arc<Bch>],
        threshold: ThresholdConfig,
        predictive: PredictiveConfig,
    ) -> Result<(), BchError> {
        path.station.snoop = self.snoop;
        path.station.eln = self.eln;
        path.tcp_eln = self.eln;
        path.station.fec = match self.fec {
            SchemeFec::None => LinkFec::None,
            SchemeFec::Fixed(t) => LinkFec::Fixed(Arc::new(Bch::new(t)?)),
            SchemeFec::Adaptive => LinkFec::Threshold {
                codes: codes.to_vec(),
                config: threshold,
            },
            SchemeFec::Predictive => LinkFec::Predictive {
                codes: codes.to_vec(),
                frame_bits: path.segment_bytes as usize * 8,
                config: predictive,
            },
        };
        Ok(())
    }
}

impl std::fmt::Display for Scheme {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        if self.snoop {
            parts.push("snoop".to_owned());
        }
        if self.eln {
            parts.push("eln".to_owned());
        }
        match self.fec {
            SchemeFec::None => {}
            SchemeFec::Fixed(t) => parts.push(format!("fec:{t}")),
            SchemeFec::Adaptive => parts.push("adaptive".to_owned()),
            SchemeFec::Predictive => parts.push("predictive".to_owned()),
        }
        if parts.is_empty() {
            f.write_str("reno")
        } else {
            f.write_str(&parts.join("+"))
        }
    }
}

impl std::str::FromStr for Scheme {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let mut scheme = Self::RENO;
        for part in s.split('+').map(str::trim) {
            match part.to_ascii_lowercase().as_str() {
                "reno" | "tcp" => {}
                "snoop" => scheme.snoop = true,
                "eln" => scheme.eln = true,
                "adaptive" => scheme.fec = SchemeFec::Adaptive,
                "predictive" => scheme.fec = SchemeFec::Predictive,
                other => {
                    let t = other
                        .strip_prefix("fec:")
                        .and_then(|t| t.parse::<usize>().ok())
                        .ok_or_else(|| {
                            format!(
                                "unknown part {part:?} in scheme {s:?}; join reno, eln, snoop, \
                                 fec:T (T = bits a BCH(127, k) code corrects, 1..=31) and \
                                 adaptive or predictive with +, e.g. snoop+eln+fec:5"
                            )
                        })?;
                    Bch::new(t).map_err(|e| format!("scheme {s:?}: {e}"))?;
                    scheme.fec = SchemeFec::Fixed(t);
                }
            }
        }
        Ok(scheme)
    }
}

impl TryFrom<String> for Scheme {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl From<Scheme> for String {
    fn from(s: Scheme) -> String {
        s.to_string()
    }
}

/// One run's setting.
#[derive(Debug, Clone, PartialEq)]
pub struct WirelessPath {
    /// Wireless rate, each way (Table 1: 384 kbit/s).
    pub wireless_rate: Bitrate,
    /// Wired rate, each way (not in the paper; 10 Mbit/s).
    pub wired_rate: Bitrate,
    /// One-way propagation delay of every hop (Table 1: 1 ms).
    pub delay: Duration,
    /// Station buffer per wireless direction (Table 1: 50 KB).
    pub buffer_bytes: u64,
    /// TCP segment size on the wire (Table 1: 100 bytes).
    pub segment_bytes: u32,
    /// Sender window in segments (ns-2's default `window_` 20).
    pub window_segments: u32,
    /// Bit errors on each wireless direction.
    pub channel: LossModel,
    /// Loss on the wired link from the host to the station (none in the
    /// paper; for checking that ELN leaves congestion-like losses alone).
    pub wired_loss: LossModel,
    /// The sender honours ELN marks.
    pub tcp_eln: bool,
    /// The station's agents and FEC.
    pub station: StationConfig,
    /// Simulated time of the transfer.
    pub duration: Duration,
    /// Bytes delivered before this are not counted (slow start).
    pub warmup: Duration,
}

impl Default for WirelessPath {
    fn default() -> Self {
        Self {
            wireless_rate: Bitrate::kbps(384),
            wired_rate: Bitrate::mbps(10),
            delay: Duration::from_millis(1),
            buffer_bytes: 50_000,
            segment_bytes: 100,
            window_segments: 20,
            channel: LossModel::None,
            wired_loss: LossModel::None,
            tcp_eln: false,
            station: StationConfig::default(),
            duration: Duration::from_secs(60),
            warmup: Duration::from_secs(2),
        }
    }
}

/// What one run measured.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct WirelessResult {
    /// Payload bytes delivered in order to the terminal after the warm-up,
    /// per second, in bits.
    pub goodput_bps: f64,
    /// The sender's retransmission timeouts.
    pub timeouts: u64,
    /// The sender's fast retransmits (ELN ones included).
    pub fast_retransmits: u64,
    /// Fast retransmits that kept the window (ELN).
    pub eln_recoveries: u64,
    /// Frames the link-layer FEC could not decode, both directions.
    pub fec_lost: u64,
    /// Events the simulator executed.
    pub events: u64,
    /// What the station did.
    pub station: StationStats,
}

impl WirelessPath {
    /// The TCP configuration of Table 1 and ns-2's defaults.
    pub fn tcp_config(&self) -> TcpConfig {
        let mss = self.segment_bytes.saturating_sub(HEADER_BYTES).max(1);
        TcpConfig::default()
            .variant(Variant::Reno)
            .sack(false)
            .mss(mss)
            .initial_cwnd(1)
            .delayed_ack(None)
            .min_rto(Duration::from_millis(200))
            .initial_rto(Duration::from_secs(3))
            .rwnd(u64::from(self.window_segments) * u64::from(mss))
            .eln(self.tcp_eln)
    }

    /// Runs the transfer with `seed`.
    pub fn run(&self, seed: u64) -> Result<WirelessResult, LossError> {
        let mut sim = Simulator::new(seed);
        let host = sim.next_node_id();
        let terminal = groupwire_proto_node(host.0 + 1);
        let station_id = groupwire_proto_node(host.0 + 2);
        let tcp = self.tcp_config();
        let mut sender = TcpHost::new(host, tcp.clone());
        sender.connect(1, terminal, TcpApp::Bulk, Instant::ZERO);
        sim.add_node(Box::new(sender));
        sim.add_node(Box::new(TcpSinkHost::new(terminal, tcp)));
        let wired = |name: &str, sim: &mut Simulator| {
            sim.add_link(
                name,
                LinkConfig::new()
                    .rate(self.wired_rate)
                    .latency(self.delay)
                    .queue(QueueLimit::Bytes(self.buffer_bytes)),
            )
        };
        let wireless = |name: &str, sim: &mut Simulator| {
            sim.add_link(
                name,
                LinkConfig::new()
                    .rate(self.wireless_rate)
                    .latency(self.delay)
                    .queue(QueueLimit::Bytes(self.buffer_bytes))
                    .loss(self.channel.clone()),
            )
        };
        let wired_down = sim.add_link(
            "wired-down",
            LinkConfig::new()
                .rate(self.wired_rate)
                .latency(self.delay)
                .queue(QueueLimit::Bytes(self.buffer_bytes))
                .loss(self.wired_loss.clone()),
        )?;
        let wired_up = wired("wired-up", &mut sim)?;
        let radio_down = wireless("wireless-down", &mut sim)?;
        let radio_up = wireless("wireless-up", &mut sim)?;
        sim.add_route(host, terminal, vec![wired_down, radio_down]);
        sim.add_route(terminal, host, vec![radio_up, wired_up]);
        if let LinkFec::Fixed(code) = &self.station.fec {
            sim.set_link_fec(radio_down, Some(Arc::clone(code)));
            sim.set_link_fec(radio_up, Some(Arc::clone(code)));
        }
        if matches!(self.station.fec, LinkFec::Predictive { .. }) {
            sim.enable_link_feedback(radio_down);
        }
        let id = sim.add_node(Box::new(BaseStation::new(
            self.station.clone(),
            radio_down,
            radio_up,
        )));
        debug_assert_eq!(id, station_id);
        sim.set_transit(wired_down, id);
        sim.set_transit(radio_up, id);

        let warm = Instant::ZERO + self.warmup;
        sim.run_until(warm, &mut |_| {});
        let at_warmup = sink_bytes(&sim, terminal, host);
        sim.run_until(Instant::ZERO + self.duration, &mut |_| {});
        let delivered = sink_bytes(&sim, terminal, host) - at_warmup;
        let measured = self.duration.saturating_sub(self.warmup).as_secs_f64();
        let view = sim.view();
        let tx = view
            .node::<TcpHost>(host)
            .and_then(|h| h.sender(1))
            .expect("the sender exists");
        let stats = tx.stats();
        let station = view
            .node::<BaseStation>(id)
            .expect("the station exists")
            .stats()
            .clone();
        Ok(WirelessResult {
            goodput_bps: delivered as f64 * 8.0 / measured.max(f64::MIN_POSITIVE),
            timeouts: stats.timeouts,
            fast_retransmits: stats.fast_retransmits,
            eln_recoveries: stats.eln_recoveries,
            fec_lost: view.stats().fec_lost,
            events: view.stats().events,
            station,
        })
    }

    /// The highest goodput the wireless link allows with `code` (or none):
    /// payload bits over air bits of a segment, times the rate.
    pub fn capacity_bps(&self, code: Option<&Bch>) -> f64 {
        let bits = self.segment_bytes as usize * 8;
        let air = code.map_or(bits, |c| c.wire_bits(bits).div_ceil(8) * 8);
        let payload = (self.segment_bytes.saturating_sub(HEADER_BYTES) * 8) as f64;
        self.wireless_rate.as_bps() as f64 * payload / air as f64
    }
}

fn groupwire_proto_node(i: u32) -> crate::core::NodeId {
    crate::core::NodeId(i)
}

fn sink_bytes(sim: &Simulator, terminal: crate::core::NodeId, host: crate::core::NodeId) -> u64 {
    sim.view()
        .node::<TcpSinkHost>(terminal)
        .map_or(0, |s| s.delivered(host, 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(channel: &str) -> WirelessPath {
        WirelessPath {
            channel: channel.parse().expect("valid"),
            duration: Duration::from_secs(20),
            ..Default::default()
        }
    }

    #[test]
    fn a_clean_link_runs_at_the_wireless_rate() {
        let p = path("none");
        let r = p.run(1).expect("runs");
        let cap = p.capacity_bps(None);
        assert!(
            r.goodput_bps > 0.9 * cap && r.goodput_bps <= cap * 1.001,
            "{r:?} cap {cap}"
        );
        assert_eq!((r.timeouts, r.fast_retransmits), (0, 0));
    }

    #[test]
    fn fec_costs_its_parity_on_a_clean_link_and_saves_a_noisy_one() {
        let code = Arc::new(Bch::new(5).expect("t = 5"));
        let mut p = path("none");
        p.station.fec = LinkFec::Fixed(Arc::clone(&code));
        let clean = p.run(1).expect("runs");
        let cap = p.capacity_bps(Some(&code));
        assert!(clean.goodput_bps > 0.9 * cap && clean.goodput_bps <= cap * 1.001);
        let mut noisy = path("ber:1e-3");
        let plain = noisy.run(1).expect("runs").goodput_bps;
        noisy.station.fec = LinkFec::Fixed(code);
        let coded = noisy.run(1).expect("runs");
        assert!(
            coded.goodput_bps > 2.0 * plain,
            "{} vs {plain}",
            coded.goodput_bps
        );
    }

    /// Snoop retransmits wireless losses itself: the sender sees no
    /// duplicate ACKs, so it never fast-retransmits, and the station did
    /// the retransmitting.
    #[test]
    fn snoop_retransmits_locally_and_hides_duplicate_acks() {
        let mut p = path("ber:2e-4");
        p.station.snoop = true;
        p.station.max_local_retransmits = u32::MAX;
        let r = p.run(3).expect("runs");
        assert!(r.station.local_retransmits > 50, "{r:?}");
        assert!(r.station.dupacks_suppressed > 0, "{r:?}");
        assert_eq!(r.fast_retransmits, 0, "{r:?}");
        let reno = path("ber:2e-4").run(3).expect("runs");
        assert!(reno.fast_retransmits > 20, "{reno:?}");
        assert!(r.goodput_bps > reno.goodput_bps, "{r:?} vs {reno:?}");
    }

    /// ELN: the station marks the duplicates for wireless losses and the
    /// sender's recoveries keep the window, which beats plain Reno.
    #[test]
    fn eln_marks_wireless_losses_and_the_sender_keeps_its_window() {
        let mut p = path("ber:2e-4");
        p.station.eln = true;
        p.tcp_eln = true;
        let r = p.run(3).expect("runs");
        assert!(r.station.eln_marked > 0, "{r:?}");
        // Nearly every fast retransmit is an ELN one: the exceptions are
        // duplicates echoing the sender's own go-back after a timeout,
        // which the station rightly leaves unmarked.
        assert!(
            r.eln_recoveries > 0 && r.eln_recoveries * 10 >= r.fast_retransmits * 9,
            "{r:?}"
        );
        let reno = path("ber:2e-4").run(3).expect("runs");
        assert!(
            r.goodput_bps > reno.goodput_bps,
            "{} vs {}",
            r.goodput_bps,
            reno.goodput_bps
        );
    }

    #[test]
    fn runs_are_deterministic() {
        let mut p = path("ber:5e-4");
        p.station.snoop = true;
        p.station.eln = true;
        p.tcp_eln = true;
        p.station.fec = LinkFec::Threshold {
            codes: Bch::paper_codes().into_iter().map(Arc::new).collect(),
            config: Default::default(),
        };
        let a = p.run(9).expect("runs");
        assert_eq!(a, p.run(9).expect("runs"));
        assert!(a.station.code_switches > 0, "{a:?}");
    }

    #[test]
    fn schemes_round_trip_and_reject_nonsense() {
        for text in [
            "reno",
            "eln",
            "snoop",
            "snoop+eln",
            "fec:5",
            "snoop+eln+fec:10",
            "snoop+eln+adaptive",
            "snoop+eln+predictive",
        ] {
            let s: Scheme = text.parse().expect(text);
            assert_eq!(s.to_string(), text);
        }
        assert_eq!(
            "ELN + Snoop".parse::<Scheme>().unwrap().to_string(),
            "snoop+eln"
        );
        assert!("fec:40".parse::<Scheme>().unwrap_err().contains("1 to 31"));
        assert!(
            "snop"
                .parse::<Scheme>()
                .unwrap_err()
                .contains("unknown part")
        );
    }

    /// Under TCP the predictive switch, fed by link-layer reports, keeps
    /// up with the best fixed code where the paper's threshold rule flaps
    /// (a steady BER at which only the t = 10 code holds).
    #[test]
    fn the_predictive_switch_keeps_up_with_the_best_code_under_tcp() {
        let codes: Vec<Arc<Bch>> = Bch::paper_codes().into_iter().map(Arc::new).collect();
        let goodput = |scheme: &str, penalty: f64| {
            let mut p = path("ber:3e-2");
            let s: Scheme = scheme.parse().expect("valid");
            let predictive = PredictiveConfig {
                loss_penalty: penalty,
                ..PredictiveConfig::default()
            };
            s.apply(&mut p, &codes, ThresholdConfig::default(), predictive)
                .expect("codes exist");
            p.run(4).expect("runs").goodput_bps
        };
        let best = goodput("snoop+eln+fec:10", 0.0);
        let predictive = goodput("snoop+eln+predictive", 1.0);
        let threshold = goodput("snoop+eln+adaptive", 0.0);
        assert!(predictive > 0.9 * best, "{predictive} vs {best}");
        assert!(predictive > threshold, "{predictive} vs {threshold}");
    }

    /// A loss before the station (the wired hop, standing in for
    /// congestion) is not the wireless link's: the station leaves those
    /// duplicates unmarked, and the ELN sender cuts its window as Reno does.
    #[test]
    fn losses_before_the_station_are_not_marked_and_still_cut_the_window() {
        let mut p = path("none");
        p.wired_loss = "bernoulli:0.01".parse().expect("valid");
        p.station.eln = true;
        p.tcp_eln = true;
        let r = p.run(2).expect("runs");
        assert!(r.fast_retransmits > 10, "{r:?}");
        assert_eq!(r.eln_recoveries, 0, "{r:?}");
        assert_eq!(r.station.eln_marked, 0, "{r:?}");
    }
}
