//! The relay client's channel measures (Leigh et al. §4: bandwidth,
//! latency, jitter and burstiness on every channel), one
//! [`ChannelMeter`] per group, since sequence numbers are per group.
//!
//! What each measure means on a relay connection:
//!
//! - **bandwidth**: out, the `Send` frames for the group (length prefix
//!   included); in, its `Deliver` frames. Other frames (replies,
//!   membership, pings) belong to no group and are not counted.
//! - **latency**: from the sender's stamp (`sent_at_micros`, its wall
//!   clock) to the moment the frame reached this client, through the
//!   relay. With a shared clock ([`RelayMeters::new`]'s
//!   `shared_clock_micros`, which [`RelayClient`](super::RelayClient)
//!   always sets) it is [`LatencyKind::OneWay`]: exact on one host, as good
//!   as the hosts' clock synchronization between hosts (a stamp ahead of
//!   our clock counts as zero). Without one it is
//!   [`LatencyKind::AboveBase`], per sender (each sender's clock has its
//!   own offset). Updates replayed from the log on join or after a resync
//!   (sequence numbers up to the state transfer's `head_seq`) were sent
//!   before this client asked for them, so they carry no latency.
//! - **loss and burstiness**: the relay's order is dense (every sequence
//!   number of a group is delivered to each member, in order), so a gap
//!   before a live update is judged at once: updates the relay dropped for
//!   this member (a slow consumer's backlog, `Resync`) and folded into the
//!   fresh state's checkpoint instead of replaying them. Dropped updates
//!   the replay after the checkpoint delivers are not lost; ones delivered
//!   twice count as duplicates. Every delivered update took
//!   [`Path::Arrived`]; wire and residual loss are the same.
//!
//! Memory is bounded and in the client's hands: a group is metered from
//! the client's own `Join` or `Send` for it (never because the relay named
//! it), at most [`MAX_GROUPS`] of them (frames of later ones are counted in
//! [`RelayMeters::unmetered`]; a meter holds two latency histograms, about
//! 190 KiB each), and at most [`MAX_SENDERS`] senders' base transits are
//! kept per group.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use groupwire_metrics::{ChannelMeter, ChannelSnapshot, LatencyKind, Path};
use groupwire_proto::Instant;

/// Groups metered per connection; frames of further groups are counted
/// but not metered.
pub const MAX_GROUPS: usize = 32;

/// Senders whose base transit a group's meter keeps without a shared
/// clock; later senders' updates carry no latency.
pub const MAX_SENDERS: usize = 1024;

/// Sequence numbers a group's meter keeps while a replay runs (live
/// updates judge what precedes them at once).
const WINDOW: u64 = 1024;

/// The channel measures of one relay connection, one meter per group.
#[derive(Clone, Debug)]
pub struct RelayMeters {
    start: Instant,
    shared_clock_micros: Option<u64>,
    groups: BTreeMap<String, GroupMeter>,
    unmetered: u64,
}

#[derive(Clone, Debug)]
struct GroupMeter {
    meter: ChannelMeter,
    /// Updates up to this one are a replay (state transfer), not live.
    replay_until: u64,
    /// Lowest transit seen per sender, µs (signed: clocks differ).
    base: HashMap<u64, i128>,
}

impl RelayMeters {
    /// Meters started at `now`. `shared_clock_micros` is the wall clock
    /// (µs since the Unix epoch) at [`Instant::ZERO`] of the caller's
    /// clock, if it has one: latency is then one-way against the senders'
    /// stamps, else above each sender's lowest transit.
    pub fn new(now: Instant, shared_clock_micros: Option<u64>) -> Self {
        Self {
            start: now,
            shared_clock_micros,
            groups: BTreeMap::new(),
            unmetered: 0,
        }
    }

    /// What the latency figures mean.
    pub fn latency_kind(&self) -> LatencyKind {
        if self.shared_clock_micros.is_some() {
            LatencyKind::OneWay
        } else {
            LatencyKind::AboveBase
        }
    }

    /// Meters `group` from now on (the client asked to join it), unless
    /// [`MAX_GROUPS`] are metered already.
    pub fn join(&mut self, group: &str) {
        let _ = self.group_or_new(group);
    }

    /// The meter of `group`, made on first use unless [`MAX_GROUPS`] are
    /// metered already.
    fn group_or_new(&mut self, group: &str) -> Option<&mut GroupMeter> {
        if !self.groups.contains_key(group) {
            if self.groups.len() >= MAX_GROUPS {
                return None;
            }
            let meter = ChannelMeter::with_window(
                format!("relay {group}"),
                self.latency_kind(),
                self.start,
                WINDOW,
            );
            self.groups.insert(
                group.to_owned(),
                GroupMeter {
                    meter,
                    replay_until: 0,
                    base: HashMap::new(),
                },
            );
        }
        self.groups.get_mut(group)
    }

    /// A `Send` frame of `bytes` for `group` went out.
    pub fn sent(&mut self, group: &str, bytes: usize) {
        match self.group_or_new(group) {
            Some(g) => g.meter.sent(bytes),
            None => self.unmetered += 1,
        }
    }

    /// A state transfer for `group` (a join's reply, or a fresh state after
    /// a resync or role change): deliveries up to `head_seq` replay the
    /// log.
    pub fn state(&mut self, group: &str, head_seq: u64) {
        if let Some(g) = self.groups.get_mut(group) {
            g.replay_until = g.replay_until.max(head_seq);
        }
    }

    /// A `Deliver` frame of `bytes` for update `seq` of `group`, stamped
    /// `sent_at_micros` by `sender`, reached this client at `now` (counted
    /// as unmetered unless the client joined or sent to `group`).
    pub fn delivered(
        &mut self,
        now: Instant,
        group: &str,
        seq: u64,
        sender: u64,
        sent_at_micros: u64,
        bytes: usize,
    ) {
        let shared = self.shared_clock_micros;
        let Some(g) = self.groups.get_mut(group) else {
            self.unmetered += 1;
            return;
        };
        g.meter.received(bytes);
        if seq <= g.replay_until {
            g.meter.delivered(seq, Path::Arrived, None);
        } else {
            let latency = g.latency(now, shared, sender, sent_at_micros);
            g.meter.delivered(seq, Path::Arrived, latency);
            // Live updates come in order: everything before one is judged.
            g.meter.judge_through(seq);
        }
    }

    /// Frames of groups not metered (beyond [`MAX_GROUPS`], or never
    /// joined).
    pub fn unmetered(&self) -> u64 {
        self.unmetered
    }

    /// Every group's measures as of `now`, by group name; each
    /// snapshot starts a new interval.
    pub fn snapshots(&mut self, now: Instant) -> Vec<ChannelSnapshot> {
        self.groups
            .values_mut()
            .map(|g| g.meter.snapshot(now))
            .collect()
    }

    /// Judges every pending sequence number (the end of a run), so the
    /// next snapshots count the tail's losses.
    pub fn finish(&mut self) {
        for g in self.groups.values_mut() {
            g.meter.finish();
        }
    }
}

impl GroupMeter {
    fn latency(
        &mut self,
        now: Instant,
        shared: Option<u64>,
        sender: u64,
        sent_at_micros: u64,
    ) -> Option<Duration> {
        let received = i128::from(shared.unwrap_or(0)) + i128::from(now.as_micros());
        let transit = received - i128::from(sent_at_micros);
        let above = if shared.is_some() {
            transit
        } else {
            if !self.base.contains_key(&sender) && self.base.len() >= MAX_SENDERS {
                return None;
            }
            let base = self.base.entry(sender).or_insert(transit);
            *base = (*base).min(transit);
            transit - *base
        };
        Some(Duration::from_micros(
            u64::try_from(above.max(0)).unwrap_or(u64::MAX),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(us: u64) -> Instant {
        Instant::ZERO + Duration::from_micros(us)
    }

    #[test]
    fn one_way_latency_from_the_senders_stamp_and_none_for_replays() {
        let mut m = RelayMeters::new(Instant::ZERO, Some(1_000_000));
        m.join("g");
        m.state("g", 2);
        // Replayed: sent long ago, no latency.
        m.delivered(at(10), "g", 1, 7, 0, 50);
        m.delivered(at(10), "g", 2, 7, 0, 50);
        // Live: stamped at wall 1_000_100, received at wall 1_000_600.
        m.delivered(at(600), "g", 3, 7, 1_000_100, 50);
        // A stamp ahead of our clock counts as zero, not a panic.
        m.delivered(at(700), "g", 4, 7, u64::MAX, 50);
        m.finish();
        let s = &m.snapshots(at(1_000_000))[0];
        assert_eq!(s.channel, "relay g");
        assert_eq!(s.latency_kind, LatencyKind::OneWay);
        assert_eq!(s.latency_total.count, 2);
        assert!((s.latency_total.max_ms - 0.5).abs() < 0.01, "{s:?}");
        assert_eq!(s.inbound.packets, 4);
        assert_eq!(s.inbound.bytes, 200);
        assert_eq!(s.loss.judged, 4);
        assert_eq!(s.loss.residual_lost, 0);
    }

    #[test]
    fn gaps_are_updates_the_relay_dropped() {
        let mut m = RelayMeters::new(Instant::ZERO, Some(0));
        m.join("g");
        for seq in (1..=10).chain(16..=20) {
            m.delivered(at(seq * 10), "g", seq, 1, 0, 10);
        }
        m.sent("g", 30);
        m.finish();
        let s = &m.snapshots(at(1_000_000))[0];
        assert_eq!(s.loss.judged, 20);
        assert_eq!(s.loss.wire_lost, 5);
        assert_eq!(s.loss.residual_lost, 5);
        assert_eq!(s.burst.runs, 1);
        assert_eq!(s.out.packets, 1);
        assert_eq!(s.out.bytes, 30);
    }

    #[test]
    fn a_resync_replay_after_the_checkpoint_is_not_loss() {
        let mut m = RelayMeters::new(Instant::ZERO, Some(0));
        m.join("g");
        for seq in 1..=10 {
            m.delivered(at(seq), "g", seq, 1, 0, 10);
        }
        // The relay dropped 11..=50 for us; the fresh state is at #30 and
        // the replay brings 31..=60, then live updates follow.
        m.state("g", 60);
        for seq in 31..=62 {
            m.delivered(at(100 + seq), "g", seq, 1, 0, 10);
        }
        let s = &m.snapshots(at(1_000))[0];
        assert_eq!(s.loss.judged, 62);
        assert_eq!(s.loss.residual_lost, 20, "11..=30 folded into the state");
        assert_eq!(s.latency_total.count, 10 + 2);
    }

    #[test]
    fn without_a_shared_clock_latency_is_above_each_senders_base() {
        let mut m = RelayMeters::new(Instant::ZERO, None);
        m.join("g");
        // Sender 1's clock is far ahead of ours, sender 2's far behind:
        // each is measured against its own lowest transit.
        m.delivered(at(1_000), "g", 1, 1, 900_000_000, 10);
        m.delivered(at(2_300), "g", 2, 1, 900_001_000, 10);
        m.delivered(at(3_000), "g", 3, 2, 5, 10);
        m.delivered(at(4_200), "g", 4, 2, 1_005, 10);
        let s = &m.snapshots(at(1_000_000))[0];
        assert_eq!(s.latency_kind, LatencyKind::AboveBase);
        assert_eq!(s.latency_total.count, 4);
        assert!((s.latency_total.max_ms - 0.3).abs() < 0.01, "{s:?}");
    }

    #[test]
    fn memory_is_bounded_in_groups_and_senders() {
        let mut m = RelayMeters::new(Instant::ZERO, None);
        // A relay cannot make the client meter a group it did not join.
        m.delivered(at(0), "never joined", 1, 1, 0, 10);
        assert!(m.snapshots(at(1)).is_empty());
        for i in 0..(MAX_GROUPS as u64 + 10) {
            m.join(&format!("g{i}"));
            m.delivered(at(i), &format!("g{i}"), 1, 1, 0, 10);
        }
        assert_eq!(m.snapshots(at(1)).len(), MAX_GROUPS);
        assert_eq!(m.unmetered(), 11);
        for sender in 0..(MAX_SENDERS as u64 + 10) {
            m.delivered(at(sender), "g0", sender + 2, sender, 0, 10);
        }
        let g = &m.groups["g0"];
        assert_eq!(g.base.len(), MAX_SENDERS);
    }
}
