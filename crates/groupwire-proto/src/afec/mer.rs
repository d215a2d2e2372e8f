//! The receiver's message error rate (MER) window: which of the last
//! message indices (or packet sequence numbers) of one sender arrived.

use std::collections::VecDeque;

/// Outcome of the last `capacity` message indices of one (sender, type).
#[derive(Debug)]
pub(super) struct MerWindow {
    /// `true` = lost (so far). Index of the front is `base`.
    outcomes: VecDeque<bool>,
    base: u32,
    lost: usize,
    capacity: usize,
    started: bool,
}

pub(super) enum Observed {
    /// First time seen. `lost` new gap losses; `late` if it fills an
    /// earlier gap.
    Fresh {
        lost: u64,
        late: bool,
    },
    Duplicate,
    TooOld,
}

impl MerWindow {
    pub(super) fn new(capacity: usize) -> Self {
        Self {
            outcomes: VecDeque::new(),
            base: 0,
            lost: 0,
            capacity,
            started: false,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.outcomes.len()
    }

    pub(super) fn mer(&self) -> f64 {
        if self.outcomes.is_empty() {
            0.0
        } else {
            self.lost as f64 / self.outcomes.len() as f64
        }
    }

    /// Lengths of the runs of consecutive losses in the window.
    pub(super) fn loss_runs(&self) -> Vec<u32> {
        let mut runs = Vec::new();
        let mut cur = 0u32;
        for &lost in &self.outcomes {
            if lost {
                cur += 1;
            } else if cur > 0 {
                runs.push(cur);
                cur = 0;
            }
        }
        if cur > 0 {
            runs.push(cur);
        }
        runs
    }

    /// MER over the newest `n` outcomes.
    pub(super) fn recent_mer(&self, n: usize) -> f64 {
        let n = n.min(self.outcomes.len());
        if n == 0 {
            return 0.0;
        }
        self.recent_lost(n) as f64 / n as f64
    }

    /// Losses among the newest `n` outcomes.
    pub(super) fn recent_lost(&self, n: usize) -> usize {
        self.outcomes.iter().rev().take(n).filter(|&&l| l).count()
    }

    /// Next index after the newest seen.
    pub(super) fn end(&self) -> u32 {
        self.base.wrapping_add(self.outcomes.len() as u32)
    }

    /// The outcomes from index `from` to the newest, oldest first (from
    /// the oldest kept if `from` is older than the window).
    pub(super) fn since(&self, from: u32) -> impl Iterator<Item = bool> + '_ {
        let ahead = from.wrapping_sub(self.base);
        let skip = if ahead < u32::MAX / 2 {
            (ahead as usize).min(self.outcomes.len())
        } else {
            0
        };
        self.outcomes.iter().skip(skip).copied()
    }

    /// Records `index`, just observed, as lost after all (it arrived too
    /// late to count). Does nothing for an index outside the window.
    pub(super) fn mark_lost(&mut self, index: u32) {
        let back = index.wrapping_sub(self.base) as usize;
        if let Some(slot) = self.outcomes.get_mut(back) {
            if !*slot {
                *slot = true;
                self.lost += 1;
            }
        }
    }

    //= dyck-gutwin §"AFEC for groupware", Receiver
    //# The highest received index is stored for each message type, and if
    //# the index of a message exceeds this value by more than one, the number
    //# of lost messages is reported and the MER for that message type is
    //# updated.
    pub(super) fn observe(&mut self, index: u32) -> Observed {
        if !self.started {
            self.started = true;
            self.base = index;
            self.outcomes.push_back(false);
            return Observed::Fresh {
                lost: 0,
                late: false,
            };
        }
        let ahead = index.wrapping_sub(self.end());
        if ahead < u32::MAX / 2 {
            // Newer than anything seen: `ahead` messages in between are lost.
            // A jump beyond the window only counts a window's worth, so a
            // hostile index costs O(window), not O(2^31).
            let gap = (ahead as usize).min(self.capacity);
            if gap == self.capacity {
                self.outcomes.clear();
                self.lost = 0;
                self.base = index.wrapping_sub(gap as u32);
            }
            for _ in 0..gap {
                self.outcomes.push_back(true);
            }
            self.lost += gap;
            self.outcomes.push_back(false);
            while self.outcomes.len() > self.capacity {
                if self.outcomes.pop_front() == Some(true) {
                    self.lost -= 1;
                }
                self.base = self.base.wrapping_add(1);
            }
            return Observed::Fresh {
                lost: gap as u64,
                late: false,
            };
        }
        let back = index.wrapping_sub(self.base);
        if (back as usize) < self.outcomes.len() {
            let slot = &mut self.outcomes[back as usize];
            if *slot {
                *slot = false;
                self.lost -= 1;
                return Observed::Fresh {
                    lost: 0,
                    late: true,
                };
            }
            return Observed::Duplicate;
        }
        Observed::TooOld
    }
}
