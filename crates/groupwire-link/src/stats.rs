//! Loss and burst statistics over a sequence of per-packet outcomes.
//!
//! Used by the tests to hold the loss models to their mathematics and by the
//! simulator for its loss metrics. A *burst* is a maximal run of consecutive
//! lost packets.

use std::collections::BTreeMap;

/// Running loss statistics over a sequence of per-packet outcomes.
///
/// Feed outcomes in order with [`LossStats::record`] (`true` = lost). A burst
/// still open at the last packet counts in [`LossStats::bursts`],
/// [`LossStats::mean_burst_len`], [`LossStats::max_burst_len`] and
/// [`LossStats::bursts_longer_than`], but enters
/// [`LossStats::burst_histogram`] only when it closes: on the next delivered
/// packet or on [`LossStats::finish`].
#[derive(Debug, Clone, Default)]
pub struct LossStats {
    packets: u64,
    lost: u64,
    /// Length of the burst in progress (0 after a delivered packet).
    run: u32,
    closed_bursts: u64,
    max_burst: u32,
    histogram: BTreeMap<u32, u64>,
}

impl LossStats {
    /// No packets yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records the next packet's outcome: `true` if it was lost.
    pub fn record(&mut self, lost: bool) {
        self.packets += 1;
        if lost {
            self.lost += 1;
            self.run = self.run.saturating_add(1);
            self.max_burst = self.max_burst.max(self.run);
        } else {
            self.close_run();
        }
    }

    /// Closes a burst still open at the last packet, so it enters the
    /// histogram. Recording more packets afterwards starts a new burst.
    pub fn finish(&mut self) {
        self.close_run();
    }

    /// Packets recorded.
    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// Packets lost.
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// Fraction of packets lost (0 before any packet).
    pub fn loss_rate(&self) -> f64 {
        if self.packets == 0 {
            0.0
        } else {
            self.lost as f64 / self.packets as f64
        }
    }

    /// Loss bursts (maximal runs of consecutive losses), the open one included.
    pub fn bursts(&self) -> u64 {
        self.closed_bursts + u64::from(self.run > 0)
    }

    /// Mean burst length in packets (0 if nothing was lost).
    pub fn mean_burst_len(&self) -> f64 {
        match self.bursts() {
            0 => 0.0,
            n => self.lost as f64 / n as f64,
        }
    }

    /// Longest burst so far, the open one included.
    pub fn max_burst_len(&self) -> u32 {
        self.max_burst
    }

    /// Number of closed bursts of each length (see the type docs for the
    /// open one).
    pub fn burst_histogram(&self) -> &BTreeMap<u32, u64> {
        &self.histogram
    }

    /// Bursts longer than `n` packets, the open one included. GENEVA counts
    /// "bursty loss events" as `bursts_longer_than(3)`.
    pub fn bursts_longer_than(&self, n: u32) -> u64 {
        let closed: u64 = self
            .histogram
            .range(n.saturating_add(1)..)
            .map(|(_, count)| count)
            .sum();
        closed + u64::from(self.run > n)
    }

    fn close_run(&mut self) {
        if self.run > 0 {
            *self.histogram.entry(self.run).or_insert(0) += 1;
            self.closed_bursts += 1;
            self.run = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats_of(pattern: &str) -> LossStats {
        let mut s = LossStats::new();
        for c in pattern.chars() {
            s.record(c == 'x');
        }
        s
    }

    #[test]
    fn counts_runs_of_consecutive_losses() {
        let mut s = stats_of("..x..xxx.xxxxx.x.xx");
        assert_eq!(s.packets(), 19);
        assert_eq!(s.lost(), 12);
        assert_eq!(s.bursts(), 5);
        assert_eq!(s.mean_burst_len(), 12.0 / 5.0);
        assert_eq!(s.max_burst_len(), 5);
        assert_eq!(s.bursts_longer_than(3), 1);
        assert_eq!(s.bursts_longer_than(1), 3);
        // The final run of 2 is still open.
        assert_eq!(
            s.burst_histogram()
                .iter()
                .map(|(&k, &v)| (k, v))
                .collect::<Vec<_>>(),
            [(1, 2), (3, 1), (5, 1)]
        );
        s.finish();
        assert_eq!(
            s.burst_histogram()
                .iter()
                .map(|(&k, &v)| (k, v))
                .collect::<Vec<_>>(),
            [(1, 2), (2, 1), (3, 1), (5, 1)]
        );
        assert_eq!(s.bursts(), 5);
        assert_eq!(s.bursts_longer_than(1), 3);
    }

    #[test]
    fn empty_and_loss_free_sequences_have_no_bursts() {
        let s = LossStats::new();
        assert_eq!(
            (s.loss_rate(), s.bursts(), s.mean_burst_len()),
            (0.0, 0, 0.0)
        );
        let s = stats_of("....");
        assert_eq!(
            (s.loss_rate(), s.bursts(), s.mean_burst_len()),
            (0.0, 0, 0.0)
        );
        assert!(s.burst_histogram().is_empty());
    }
}
