//! Rate meters over sliding windows of a driver's clock ([`Instant`]): the
//! relay's per-client burst meter and TFRC's receive rate are both here.

use std::collections::VecDeque;
use std::time::Duration;

use groupwire_units::Instant;

/// Buckets of a [`BucketMeter`].
const BUCKETS: usize = 8;

/// Bytes per second over a sliding window kept as eight buckets: O(1) per
/// record and per read, fixed memory. The oldest bucket leaves the window
/// whole, so the rate steps at bucket edges (an eighth of the window).
#[derive(Debug, Clone)]
pub struct BucketMeter {
    bucket: Duration,
    buckets: [u64; BUCKETS],
    /// Index (time / bucket) of the newest bucket.
    head: u64,
    /// The latest time the meter was recorded or read at.
    last: Instant,
    /// Sum of `buckets`, kept so `rate` (read on every record by the relay)
    /// does not add up the buckets each time.
    total: u64,
}

impl BucketMeter {
    /// A meter over `window` (buckets of at least 1 ms).
    pub fn new(window: Duration) -> Self {
        Self {
            bucket: (window / BUCKETS as u32).max(Duration::from_millis(1)),
            buckets: [0; BUCKETS],
            head: 0,
            last: Instant::ZERO,
            total: 0,
        }
    }

    fn advance(&mut self, now: Instant) {
        let idx = now.as_nanos() / self.bucket.as_nanos().max(1) as u64;
        if idx > self.head {
            let steps = (idx - self.head).min(BUCKETS as u64);
            for i in 1..=steps {
                let b = &mut self.buckets[((self.head + i) % BUCKETS as u64) as usize];
                self.total -= *b;
                *b = 0;
            }
            self.head = idx;
        }
        self.last = self.last.max(now);
    }

    /// The latest time the meter was recorded or read at.
    pub fn last(&self) -> Instant {
        self.last
    }

    /// Counts `bytes` at `now`. Times before the newest bucket count in it.
    pub fn record(&mut self, now: Instant, bytes: u64) {
        self.advance(now);
        self.buckets[(self.head % BUCKETS as u64) as usize] += bytes;
        self.total += bytes;
    }

    /// Bytes per second over the window ending at `now`.
    pub fn rate(&mut self, now: Instant) -> u64 {
        self.advance(now);
        let window_nanos = (self.bucket.as_nanos() as u64).max(1) * BUCKETS as u64;
        u64::try_from(u128::from(self.total) * 1_000_000_000 / u128::from(window_nanos))
            .unwrap_or(u64::MAX)
    }
}

/// Amounts per arrival time, exact to the arrival, over a window the
/// caller may change on every call (TFRC measures its receive rate over
/// the last RTT). At most `capacity` records are kept: beyond that,
/// arrivals merge into the newest, so memory is bounded whatever the rate.
#[derive(Debug, Clone)]
pub struct ArrivalWindow {
    samples: VecDeque<(Instant, u64)>,
    capacity: usize,
}

impl ArrivalWindow {
    /// An empty window keeping at most `capacity` (at least 1) records.
    pub fn new(capacity: usize) -> Self {
        Self {
            samples: VecDeque::new(),
            capacity: capacity.max(1),
        }
    }

    /// Counts `amount` at `now`, forgetting what arrived at or before
    /// `now - window`.
    pub fn push(&mut self, now: Instant, amount: u64, window: Duration) {
        let horizon = now - window;
        while self.samples.front().is_some_and(|&(t, _)| t <= horizon) {
            self.samples.pop_front();
        }
        if self.samples.len() >= self.capacity {
            if let Some(back) = self.samples.back_mut() {
                back.1 = back.1.saturating_add(amount);
            }
        } else {
            self.samples.push_back((now, amount));
        }
    }

    /// The amount that arrived in `(now - window, now]`.
    pub fn sum_since(&self, now: Instant, window: Duration) -> u64 {
        let horizon = now - window;
        self.samples
            .iter()
            .rev()
            .take_while(|&&(t, _)| t > horizon)
            .fold(0u64, |acc, &(_, b)| acc.saturating_add(b))
    }
}
