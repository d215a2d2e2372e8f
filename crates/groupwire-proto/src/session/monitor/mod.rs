//! The resource monitor (Leigh et al. §2, Fig. 1): per peer, what the path
//! does to our packets: round trip, loss and its burstiness (a fitted
//! Gilbert chain), delivered bandwidth and jitter, from the session's own
//! traffic plus light probing when a path is idle. Its output is the
//! [`PathEstimate`](super::PathEstimate) the strategy selector reads.
//!
//! The session puts on **every** datagram it sends to a peer, whatever the
//! channel or mechanism, a per-peer packet number `seq: u32` (0, 1, 2, …,
//! wrapping) and a send timestamp `ts: u32` (the sender's clock in
//! microseconds, wrapping: [`wire_ts`]). Three pieces, all sans-IO:
//!
//! - [`ReceiveMonitor`], at the receiver, per peer: counts arrivals from
//!   `seq`, measures jitter from `ts`, and every
//!   [`report_interval`](MonitorConfig::report_interval) makes a
//!   [`MonitorReport`] for the session to send back.
//! - [`MonitorReport`], the report's bytes ([`report`] has the diagram).
//! - [`SendMonitor`], at the sender, per peer: reads the reports into a
//!   [`PathEstimate`](super::PathEstimate), and says when the path is idle enough to probe.
//!
//! # What is measured, and where it comes from
//!
//! - **Sequence numbers** are extended to 64 bits against the highest seen
//!   (RFC 3550 A.1's cycle count, by nearest distance), so the counts go on
//!   through the wrap at `u32::MAX`. A jump forward of more than
//!   [`max_dropout`](MonitorConfig::max_dropout) counts only once the next
//!   packet confirms it (RFC 3550 A.1's probation for a restarted sender).
//! - **Loss** is RFC 3550 A.3's: expected (first received to highest) less
//!   received. A packet arriving late, within the last
//!   [`reorder`](MonitorConfig::reorder) sequence numbers, fills its gap
//!   and takes the loss back; an older one is counted late and stays lost.
//!   **Loss runs** (maximal runs of missing numbers) are judged when they
//!   leave that reorder window, so reordering within it never splits or
//!   invents a run; they are counted in the block-FEC report's buckets
//!   ([`crate::wire::block::LossRuns`]).
//! - **Jitter**, both definitions the issue asks for, over the transit
//!   time (arrival less `ts`, so the unknown clock offset cancels):
//!   RFC 3550 §6.4.1's interarrival jitter (`J += (|D| − J)/16`, computed
//!   as A.8 does in sixteenths of a microsecond), and Leigh et al.'s (under
//!   Fig. 4: "the short-term latency over every 20 data points and then …
//!   the average deviation of the instantaneous latency as compared to the
//!   short-term latency", `groupwire-metrics`'
//!   [`Fig4Jitter`](groupwire_metrics::channel::Fig4Jitter)). They differ:
//!   RFC 3550's follows consecutive differences, Leigh's the spread around
//!   a 20-packet mean: transit times alternating between two values `d`
//!   apart give `d` to RFC 3550's and `d / 2` to Leigh's (a test holds
//!   both to it).
//!   Both go into every report (Leigh's over the runs of 20 finished since
//!   the previous report).
//! - **Round trip**: each report echoes the `ts` of the packet that
//!   arrived last and how long it has held it (RFC 3550 §6.4.1's LSR and
//!   DLSR), so the sender's sample is its clock less the echo less the
//!   hold, on its own µs clock with wrap. SRTT and RTTVAR follow RFC 6298
//!   §2; the minimum is Kathleen Nichols' windowed minimum over
//!   [`min_rtt_window`](MonitorConfig::min_rtt_window) (10 s, BBR's
//!   `min_rtt` filter, as Linux `lib/win_minmax.c` keeps it).
//! - **The Gilbert fit** is [`crate::control::gilbert`]'s, the one the
//!   tunnel's target controller uses: decayed counts of received, lost and
//!   runs at two half-lives, `p ≈ runs / received`, `r ≈ runs / lost`. The
//!   estimate reports the more pessimistic fit (the higher loss rate) of
//!   those resting on at least [`min_samples`](MonitorConfig::min_samples)
//!   packets, so **a rise in loss shows within about three fast half-lives
//!   (3 s at the default 1 s: 7/8 of the step) and a fall within three
//!   slow ones (12 s at 4 s)**; the tests hold it to that.
//! - **Delivered rate**: each report carries the bytes received in its
//!   interval and the interval; the sender keeps both decayed with the fast
//!   half-life and divides (a time-weighted mean; intervals with no bytes
//!   are skipped, so an idle path keeps its last rate).
//! - **Capacity**: the delivered rate is a lower bound on the bandwidth
//!   while we send less than the path carries, and the bandwidth itself
//!   once we send more. The sender tells the two apart by what a full
//!   path does: a standing queue (SRTT more than
//!   [`queue_threshold`](MonitorConfig::queue_threshold) above the
//!   windowed minimum) while the peer gets less of what we sent than the
//!   path's own loss explains, by a tenth of it (both rates decayed
//!   alike; the path's own loss is the less pessimistic of the two fits,
//!   since at an overload the slow one lags its drops). A queue that only
//!   delays, or a loss that only loses, is not a full path: a step up in
//!   the path's delay lifts SRTT over the minimum for one minimum window
//!   and loses nothing more. Then the delivered rate (the stream's bytes
//!   and the datagrams', so a bulk transfer filling the path measures it)
//!   is the capacity, and the loss counted while the path is full stays
//!   out of the Gilbert fit (those drops are the queue's, caused by what
//!   we send: redundancy added against them adds to them); it is kept for
//!   [`capacity_hold`](MonitorConfig::capacity_hold), raised by any higher
//!   delivered rate meanwhile, and forgotten after. BBR's bottleneck
//!   bandwidth is the delivered rate's windowed maximum for the same
//!   reason; it probes above it, which a session carrying fixed-rate
//!   channels has no call to do.
//! - **Dispersion** (Keshav's packet pair; Dovrolis, Ramanathan and
//!   Moore, "Packet-dispersion techniques and a capacity-estimation
//!   methodology", 2004): two packets in sequence that left the sender
//!   closer together than half their arrival gap were spread on the way;
//!   when the second waited behind the first in a queue, their arrival gap
//!   is its serialization time on that link, and its bytes over the gap
//!   the link's rate. The receiver samples every such pair (consecutive
//!   numbers, both received, an arrival gap above zero: a receive batch's
//!   pairs arrive together and say nothing) and reports the upper quartile
//!   of the interval's samples, from 8 up ([`MonitorReport::dispersion_bps`]);
//!   the sender takes the median of the last five such reports of the last
//!   2 s. Pairs that met an empty queue arrive as they were sent and pairs
//!   with another flow's packets between them arrive further apart, so
//!   both read below the link's rate: the quantile and the median keep to
//!   the top. Times the path's loss (loss after the queue takes bytes off
//!   what it delivers), it is the capacity before the session has filled
//!   the path, so a channel's redundancy is held to what a link that slows
//!   down still carries the moment it does (the tele-immersion camera's
//!   block code had filled the third minute's 4 Mbit/s link for 17 s
//!   before a bulk transfer overflowed its queue and the full-path test
//!   saw it); the capacity measured on a full path, while kept, caps it.
//!   The session's own messages go out in bursts often enough (a block's
//!   repairs behind its data, a camera frame's packets, the channels'
//!   messages of one tick) to keep it measured; where they do not, there
//!   is no estimate and nothing changes.
//! - **Probing** (Leigh et al.'s "light probing when a path is idle", the
//!   issue's words for §2's monitor): when nothing was sent to a peer for
//!   [`probe_idle`](MonitorConfig::probe_idle), [`SendMonitor::poll_probe`]
//!   asks for one small datagram, at most one per `probe_idle`, only once
//!   the peer has answered with a report and only until it has been
//!   silent for [`probe_silence`](MonitorConfig::probe_silence). The
//!   receiver answers a probe with its next report, whose echo gives a
//!   fresh round trip.
//!
//! Beyond the paper (which names the monitor but not its measures): the
//! report format, the fit, the filters; each cites its source above.
//!
//! Not done here: an available-bandwidth probe (packet trains sent for
//! the purpose, as pathload does); dispersion measures the bottleneck
//! link's rate, which cross traffic shares, so `capacity` reads high on a
//! path shared with other flows until the session fills it.

use std::time::Duration;

use crate::Instant;

mod receive;
pub mod report;
mod send;

pub use receive::{ReceiveMonitor, ReceiveStats};
pub use report::{MonitorReport, ReportError};
pub use send::{SendMonitor, SendStats};

#[cfg(test)]
mod tests;

/// Largest [`MonitorConfig::reorder`]: the receiver keeps one bit per
/// sequence number of its reorder window.
pub const MAX_REORDER: usize = 1024;

/// The send timestamp a datagram carries at `now`: the clock in
/// microseconds, modulo 2³² (wraps every 71.6 minutes; only differences
/// are used).
pub fn wire_ts(now: Instant) -> u32 {
    now.as_micros() as u32
}

/// Both halves' settings; the defaults are the session's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MonitorConfig {
    /// Shortest time between two reports (default 100 ms).
    pub report_interval: Duration,
    /// A report even when nothing arrived, this often, so the round trip
    /// stays measured (default 1 s).
    pub keepalive: Duration,
    /// Reorder tolerance, in sequence numbers: a packet this many behind
    /// the highest still fills its gap; loss runs are judged past it
    /// (default 32; `1..=`[`MAX_REORDER`]).
    pub reorder: u32,
    /// Largest jump forward in `seq` counted at once; a larger one waits
    /// for the next packet to confirm it (RFC 3550 A.1's `MAX_DROPOUT`,
    /// 3000 for 16 bits; default 65 536 here: 2¹⁶ of a 2³² space, 0.65 s
    /// of outage at 100 000 packets per second).
    pub max_dropout: u32,
    /// Half-life of the slow loss fit (default 4 s, the target
    /// controller's).
    pub half_life: Duration,
    /// Half-life of the fast loss fit and of the delivered rate (default
    /// 1 s, the target controller's).
    pub fast_half_life: Duration,
    /// Packets (decayed) a loss fit must rest on before the estimate
    /// reports its chain (default 100).
    pub min_samples: f64,
    /// Window of the minimum round trip (default 10 s, BBR's).
    pub min_rtt_window: Duration,
    /// Longest round trip or jitter believed (default 60 s); a report
    /// claiming more jitter is ignored, an echo giving more is not a
    /// sample.
    pub max_rtt: Duration,
    /// Longest report interval believed (default 60 s).
    pub max_interval: Duration,
    /// Decayed seconds of intervals the delivered rate must rest on
    /// before it is reported (default 50 ms).
    pub min_rate_interval: Duration,
    /// Quiet time before a probe, and the least time between two probes
    /// (default 250 ms: at most four a second).
    pub probe_idle: Duration,
    /// Stop probing a peer whose last report is this old (default 5 s).
    pub probe_silence: Duration,
    /// Queueing delay (SRTT above the windowed minimum) that counts as a
    /// standing queue for the capacity estimate (default 20 ms; a quarter
    /// of the minimum round trip where that is more, so a long path's
    /// ordinary variation does not count).
    pub queue_threshold: Duration,
    /// How long a capacity measured on a full path is kept once the path
    /// stops being full (default 60 s, the controller's least time
    /// between switches: a channel moved off an overload does not move
    /// back onto it as soon as the queue has drained).
    pub capacity_hold: Duration,
}

impl Default for MonitorConfig {
    fn default() -> Self {
        Self {
            report_interval: Duration::from_millis(100),
            keepalive: Duration::from_secs(1),
            reorder: 32,
            max_dropout: 1 << 16,
            half_life: Duration::from_secs(4),
            fast_half_life: Duration::from_secs(1),
            min_samples: 100.0,
            min_rtt_window: Duration::from_secs(10),
            max_rtt: Duration::from_secs(60),
            max_interval: Duration::from_secs(60),
            min_rate_interval: Duration::from_millis(50),
            probe_idle: Duration::from_millis(250),
            probe_silence: Duration::from_secs(5),
            queue_threshold: Duration::from_millis(20),
            capacity_hold: Duration::from_secs(60),
        }
    }
}
