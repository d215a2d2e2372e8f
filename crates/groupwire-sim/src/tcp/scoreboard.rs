//! A set of disjoint, non-touching byte ranges: the receiver's out-of-order
//! queue and the sender's SACK scoreboard.
//!
//! Ranges are a `BTreeMap<start, end>`, merged on insert, so every operation
//! is `O(log n)` plus the ranges it merges or removes (amortised `O(1)`:
//! each range is inserted once and removed once). Nothing is per byte.

use std::collections::BTreeMap;
use std::ops::Bound::{Excluded, Included};

/// Disjoint, non-adjacent half-open ranges `[start, end)` with a running total.
#[derive(Debug, Clone, Default)]
pub(crate) struct RangeSet {
    map: BTreeMap<u64, u64>,
    total: u64,
}

impl RangeSet {
    /// Bytes covered.
    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The lowest range.
    pub(crate) fn first(&self) -> Option<(u64, u64)> {
        self.map.first_key_value().map(|(&s, &e)| (s, e))
    }

    /// Adds `[start, end)`, calling `newly(s, e)` for each sub-range that was
    /// not covered before. Returns the number of newly covered bytes.
    pub(crate) fn insert(&mut self, start: u64, end: u64, mut newly: impl FnMut(u64, u64)) -> u64 {
        if start >= end {
            return 0;
        }
        let mut added = 0;
        // A predecessor that overlaps or touches `start` absorbs the new range
        // and keeps its key. `cursor`: bytes in [start, cursor) are accounted for.
        let pred = self
            .map
            .range(..=start)
            .next_back()
            .map(|(&s, &e)| (s, e))
            .filter(|&(_, e)| e >= start);
        let (key, mut cursor) = match pred {
            Some((_, pe)) if pe >= end => return 0,
            Some((ps, pe)) => (ps, pe),
            None => (start, start),
        };
        let mut merged_end = end;
        // Successors starting in (key, end] (touching ones merge too).
        while let Some((ns, ne)) = self
            .map
            .range((Excluded(key), Included(end)))
            .next()
            .map(|(&s, &e)| (s, e))
        {
            self.map.remove(&ns);
            if ns > cursor {
                newly(cursor, ns);
                added += ns - cursor;
            }
            cursor = cursor.max(ne);
            merged_end = merged_end.max(ne);
        }
        if cursor < end {
            newly(cursor, end);
            added += end - cursor;
        }
        let slot = self.map.entry(key).or_insert(merged_end);
        *slot = (*slot).max(merged_end);
        self.total += added;
        added
    }

    /// Removes everything below `at`, calling `removed(s, e)` for each
    /// removed piece. Returns the number of bytes removed.
    pub(crate) fn remove_below(&mut self, at: u64, mut removed: impl FnMut(u64, u64)) -> u64 {
        let mut bytes = 0;
        while let Some((s, e)) = self.first() {
            if s >= at {
                break;
            }
            self.map.remove(&s);
            let cut = e.min(at);
            removed(s, cut);
            bytes += cut - s;
            if e > at {
                self.map.insert(at, e);
                break;
            }
        }
        self.total -= bytes;
        bytes
    }

    /// The range containing `x`, if any.
    pub(crate) fn containing(&self, x: u64) -> Option<(u64, u64)> {
        self.map
            .range(..=x)
            .next_back()
            .map(|(&s, &e)| (s, e))
            .filter(|&(_, e)| e > x)
    }

    /// Start of the first range starting at or after `x`.
    pub(crate) fn next_start(&self, x: u64) -> Option<u64> {
        self.map.range(x..).next().map(|(&s, _)| s)
    }

    /// Covered bytes at or above `x`. Walks ranges from the top, so costs
    /// `O(log n + ranges above x)`.
    pub(crate) fn total_from(&self, x: u64) -> u64 {
        let mut acc = 0;
        for (&s, &e) in self.map.iter().rev() {
            if e <= x {
                break;
            }
            acc += e - s.max(x);
        }
        acc
    }

    /// The smallest `b` such that more than `threshold` covered bytes lie at
    /// or above `b`; `None` if the set covers `threshold` bytes or fewer.
    /// Walks ranges from the top, so costs `O(log n + ranges visited)`.
    pub(crate) fn point_with_more_than_above(&self, threshold: u64) -> Option<u64> {
        if self.total <= threshold {
            return None;
        }
        let mut acc = 0;
        for (&s, &e) in self.map.iter().rev() {
            let len = e - s;
            if acc + len > threshold {
                // Need threshold + 1 - acc bytes of this range.
                return Some(e - (threshold + 1 - acc));
            }
            acc += len;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranges(r: &RangeSet) -> Vec<(u64, u64)> {
        r.map.iter().map(|(&s, &e)| (s, e)).collect()
    }

    #[test]
    fn merges_overlapping_and_touching_ranges() {
        let mut r = RangeSet::default();
        let mut new = Vec::new();
        assert_eq!(r.insert(10, 20, |s, e| new.push((s, e))), 10);
        assert_eq!(r.insert(30, 40, |s, e| new.push((s, e))), 10);
        assert_eq!(r.insert(20, 30, |s, e| new.push((s, e))), 10);
        assert_eq!(ranges(&r), vec![(10, 40)]);
        assert_eq!(r.insert(5, 50, |s, e| new.push((s, e))), 15);
        assert_eq!(ranges(&r), vec![(5, 50)]);
        assert_eq!(r.insert(10, 20, |_, _| panic!("nothing new")), 0);
        assert_eq!(r.total(), 45);
        assert_eq!(new, vec![(10, 20), (30, 40), (20, 30), (5, 10), (40, 50)]);
        assert_eq!(r.insert(60, 70, |_, _| {}), 10);
        assert_eq!(r.insert(50, 55, |_, _| {}), 5);
        assert_eq!(ranges(&r), vec![(5, 55), (60, 70)]);
        assert_eq!(r.insert(60, 80, |_, _| {}), 10);
        assert_eq!(r.insert(58, 90, |_, _| {}), 12);
        assert_eq!(ranges(&r), vec![(5, 55), (58, 90)]);
        assert_eq!(r.total(), 50 + 32);
        assert_eq!(r.remove_below(60, |_, _| {}), 52);
        assert_eq!(ranges(&r), vec![(60, 90)]);
        assert_eq!(r.total(), 30);
        assert_eq!(r.point_with_more_than_above(10), Some(79));
        assert_eq!(r.point_with_more_than_above(30), None);
    }

    proptest::proptest! {
        #[test]
        fn matches_a_bitmap(ops in proptest::collection::vec((0u64..200, 1u64..30, proptest::bool::ANY), 1..60)) {
            let mut r = RangeSet::default();
            let mut bits = [false; 256];
            for (s, l, rm) in ops {
                if rm {
                    r.remove_below(s, |_, _| {});
                    bits[..s as usize].iter_mut().for_each(|b| *b = false);
                } else {
                    let mut fresh = 0;
                    r.insert(s, s + l, |a, b| {
                        for i in a..b {
                            assert!(!bits[i as usize]);
                        }
                        fresh += b - a;
                    });
                    let expect = (s..s + l).filter(|&i| !bits[i as usize]).count() as u64;
                    proptest::prop_assert_eq!(fresh, expect);
                    (s..s + l).for_each(|i| bits[i as usize] = true);
                }
                let want: u64 = bits.iter().filter(|&&b| b).count() as u64;
                proptest::prop_assert_eq!(r.total(), want);
                for x in [0u64, s, s + l, 100, 255] {
                    let above = bits[x.min(256) as usize..].iter().filter(|&&b| b).count() as u64;
                    proptest::prop_assert_eq!(r.total_from(x), above);
                }
                let rs = ranges(&r);
                for w in rs.windows(2) {
                    proptest::prop_assert!(w[0].1 < w[1].0);
                }
                for (a, b) in rs {
                    for i in a..b {
                        proptest::prop_assert!(bits[i as usize]);
                    }
                }
            }
        }
    }
}
