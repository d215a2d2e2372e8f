//! Receiving AFEC in RTP/RED framing: which message of a stream each block
//! is.
//!
//! A native packet names every message by (type, index). An RFC 2198
//! packet names only its primary, by RTP sequence number (one per new
//! message); a redundant block has just a timestamp offset. The receiver
//! keeps the sequence numbers and timestamps of the messages it has and
//! places a recovered block in the gap its timestamp falls in: exactly
//! when the gap is one message wide or messages came at a steady rate
//! (interpolating timestamps, as GStreamer's `rtpreddec` does), at the
//! nearest free slot otherwise. Each recovered block fills one slot that
//! was counted lost, so the count of losses (the MER) is exact either way.

use std::collections::BTreeMap;

/// How far below the newest sequence number messages are remembered. A
/// redundant copy further back is too old to place; AFEC's redundancy
/// spans at most `max_size` (255) messages plus a flush.
const SPAN: u64 = 512;

/// Where a message goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Place {
    /// Already have it.
    Known,
    /// Before what the stream remembers.
    TooOld,
    /// New, at this extended sequence number.
    At(u64),
}

/// One sender's RTP stream: the messages it has, by extended sequence number.
#[derive(Debug, Default)]
pub(super) struct RedStream {
    /// Extended sequence number → RTP timestamp, the last [`SPAN`].
    known: BTreeMap<u64, u32>,
    max: Option<u64>,
}

impl RedStream {
    /// The extended sequence number nearest the newest one seen (RFC 3550
    /// Appendix A.1). Starts at 2^32 so a stream can go back a little.
    fn extend(&self, seq: u16) -> u64 {
        match self.max {
            None => (1 << 32) | u64::from(seq),
            Some(m) => {
                let delta = i64::from(seq.wrapping_sub(m as u16) as i16);
                m.wrapping_add_signed(delta)
            }
        }
    }

    fn floor(&self) -> u64 {
        self.max.map_or(0, |m| m.saturating_sub(SPAN))
    }

    /// A packet's primary: sequence number `seq`, timestamp `ts`. Returns
    /// its extended sequence number and where it goes.
    pub(super) fn primary(&mut self, seq: u16, ts: u32) -> (u64, Place) {
        let ext = self.extend(seq);
        if ext < self.floor() {
            return (ext, Place::TooOld);
        }
        if self.known.contains_key(&ext) {
            return (ext, Place::Known);
        }
        self.insert(ext, ts);
        (ext, Place::At(ext))
    }

    /// A redundant block `offset` ticks older than the primary at `ext`
    /// (timestamp `ts`). Call for a packet's blocks newest first, after its
    /// primary: each placed block is an anchor for the older ones.
    pub(super) fn redundant(&mut self, ext: u64, ts: u32, offset: u16) -> Place {
        let floor = self.floor();
        let off = i64::from(offset);
        // The nearest messages we have on either side of the block's time:
        // `newer` starts at the primary, `older` is the first found below.
        let mut newer = (ext, 0i64);
        let mut older = None;
        for (&k, &t) in self.known.range(floor..ext).rev() {
            // How much older than the primary (negative: a sender whose
            // timestamps went backwards; treated as newer).
            let age = i64::from(ts.wrapping_sub(t) as i32);
            if age == off {
                return Place::Known;
            }
            if age < off {
                newer = (k, age);
            } else {
                older = Some((k, age));
                break;
            }
        }
        let (b, age_b) = newer;
        let slot = match older {
            // Every sequence number strictly between the two is missing.
            Some((a, age_a)) => {
                if b - a < 2 {
                    // No slot left: more blocks than losses (a sender that
                    // reuses timestamps). Nothing to deliver.
                    return Place::Known;
                }
                let frac = (age_a - off) as f64 / (age_a - age_b) as f64;
                let ideal = (a as f64 + frac * (b - a) as f64).round() as u64;
                ideal.clamp(a + 1, b - 1)
            }
            // Older than everything we have: just below the oldest newer one.
            None => b - 1,
        };
        if slot < floor {
            return Place::TooOld;
        }
        self.insert(slot, ts.wrapping_sub(u32::from(offset)));
        Place::At(slot)
    }

    fn insert(&mut self, ext: u64, ts: u32) {
        self.known.insert(ext, ts);
        if self.max.is_none_or(|m| ext > m) {
            self.max = Some(ext);
            let floor = self.floor();
            while self
                .known
                .first_key_value()
                .is_some_and(|(&k, _)| k < floor)
            {
                self.known.pop_first();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: u64 = 1 << 32;

    #[test]
    fn places_single_losses_exactly() {
        let mut s = RedStream::default();
        // 0, 1 arrive; 2 lost; 3 carries 2 (10 ticks) and 1 (20 ticks).
        assert_eq!(s.primary(0, 1000).1, Place::At(BASE));
        assert_eq!(s.primary(1, 1010).1, Place::At(BASE + 1));
        assert_eq!(s.primary(3, 1030).1, Place::At(BASE + 3));
        assert_eq!(s.redundant(BASE + 3, 1030, 10), Place::At(BASE + 2));
        assert_eq!(s.redundant(BASE + 3, 1030, 20), Place::Known);
        // A later copy of 2 is a duplicate.
        assert_eq!(s.primary(4, 1040).1, Place::At(BASE + 4));
        assert_eq!(s.redundant(BASE + 4, 1040, 20), Place::Known);
        assert_eq!(s.primary(3, 1030), (BASE + 3, Place::Known));
    }

    #[test]
    fn interpolates_bursts_at_a_steady_rate() {
        let mut s = RedStream::default();
        s.primary(10, 0);
        // 11, 12, 13 lost; 14 carries 12 and 13.
        assert_eq!(s.primary(14, 400), (BASE + 14, Place::At(BASE + 14)));
        assert_eq!(s.redundant(BASE + 14, 400, 100), Place::At(BASE + 13));
        assert_eq!(s.redundant(BASE + 14, 400, 200), Place::At(BASE + 12));
        // 15 carries 11 (and 12, a duplicate).
        s.primary(15, 500);
        assert_eq!(s.redundant(BASE + 15, 500, 300), Place::Known);
        assert_eq!(s.redundant(BASE + 15, 500, 400), Place::At(BASE + 11));
    }

    #[test]
    fn irregular_timing_still_fills_one_slot_per_message() {
        let mut s = RedStream::default();
        s.primary(0, 0);
        // 1 (t=5), 2 (t=90) lost; 3 at t=100 carries both.
        s.primary(3, 100);
        let a = s.redundant(BASE + 3, 100, 10);
        let b = s.redundant(BASE + 3, 100, 95);
        let mut got = [a, b];
        got.sort_by_key(|p| match p {
            Place::At(x) => *x,
            _ => 0,
        });
        assert_eq!(got, [Place::At(BASE + 1), Place::At(BASE + 2)]);
    }

    #[test]
    fn stream_start_places_blocks_below_the_first_primary() {
        let mut s = RedStream::default();
        assert_eq!(s.primary(7, 700).1, Place::At(BASE + 7));
        assert_eq!(s.redundant(BASE + 7, 700, 10), Place::At(BASE + 6));
        assert_eq!(s.redundant(BASE + 7, 700, 20), Place::At(BASE + 5));
    }

    #[test]
    fn sequence_numbers_wrap_and_memory_is_bounded() {
        let mut s = RedStream::default();
        let mut ts = 0u32;
        for i in 0..3 * u64::from(u16::MAX) {
            ts = ts.wrapping_add(7);
            assert_eq!(s.primary(i as u16, ts).1, Place::At(BASE + i));
        }
        assert!(s.known.len() as u64 <= SPAN + 1);
        // A copy from before what is remembered.
        let newest = BASE + 3 * u64::from(u16::MAX) - 1;
        assert_eq!(s.redundant(newest, ts, 7 * 600), Place::TooOld);
        assert_eq!(s.primary((newest - 600) as u16, 0).1, Place::TooOld);
    }

    #[test]
    fn more_blocks_than_losses_deliver_nothing_extra() {
        let mut s = RedStream::default();
        s.primary(0, 0);
        s.primary(2, 20);
        assert_eq!(s.redundant(BASE + 2, 20, 5), Place::At(BASE + 1));
        // A second, different timestamp in the same one-message gap.
        assert_eq!(s.redundant(BASE + 2, 20, 15), Place::Known);
    }
}
