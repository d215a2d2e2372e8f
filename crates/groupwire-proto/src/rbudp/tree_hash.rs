//! The BLAKE3 hash of a payload that arrives in any order, computed as it
//! completes rather than in one pass at the end.
//!
//! BLAKE3 is a tree hash (the BLAKE3 paper, §2.1): the payload's 1 KiB
//! chunks are the leaves of a left-balanced binary tree, and any aligned
//! subtree (a power-of-two run of chunks starting at a multiple of its own
//! length) has a chaining value that depends on its bytes and its offset
//! alone. [`TreeHasher`] cuts the payload into such subtrees ("segments",
//! all of one power-of-two length but the last), hashes each as soon as
//! every byte of it is stored, and at the end merges the segments'
//! chaining values along the tree's shape into the root: the same hash as
//! `blake3::hash` (or `b3sum`) of the whole payload.
//!
//! Why: with the hash over the payload in order, a blast that loses its
//! 100th packet leaves everything after it to be read back and hashed
//! once the last gap is filled, a serial pass over the whole file between
//! the last datagram and the receiver's answer. Here only the segments
//! completed by the last round wait for the end.
//!
//! Memory is bounded whatever the payload's size: at most
//! [`MAX_SEGMENTS`] segments (their length grows with the payload), each
//! with a byte count and a chaining value.

use std::io;

use blake3::hazmat::{
    ChainingValue, HasherExt, Mode, left_subtree_len, merge_subtrees_non_root, merge_subtrees_root,
};

use crate::wire::rbudp::Hash;

/// Segments a payload is cut into, at most.
pub(crate) const MAX_SEGMENTS: u64 = 4096;
/// The shortest segment: a power of two and a multiple of BLAKE3's 1 KiB
/// chunk, long enough that a segment's hash is not dominated by the call.
pub(crate) const MIN_SEGMENT: u64 = 64 * 1024;
/// Bytes read back at a time.
const READ: usize = 256 * 1024;

/// Where a [`TreeHasher`] reads stored bytes back from.
pub(crate) type ReadAt<'a> = &'a mut dyn FnMut(u64, &mut [u8]) -> io::Result<()>;

/// The BLAKE3 hash of a payload of known size whose bytes are stored in
/// any order (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct TreeHasher {
    size: u64,
    segment: u64,
    /// Bytes of each segment not yet stored.
    left: Vec<u64>,
    /// Each segment's chaining value, once hashed.
    cvs: Vec<Option<ChainingValue>>,
    /// Segments complete and not yet hashed.
    ready: Vec<u64>,
    buf: Vec<u8>,
}

impl TreeHasher {
    /// A hasher for `size` bytes, none stored yet.
    pub(crate) fn new(size: u64) -> Self {
        let segment = size
            .div_ceil(MAX_SEGMENTS)
            .checked_next_power_of_two()
            .unwrap_or(1 << 63)
            .max(MIN_SEGMENT);
        let n = size.div_ceil(segment).max(1);
        // At most MAX_SEGMENTS, so the casts below are lossless.
        let mut left = vec![segment; n as usize];
        if let Some(last) = left.last_mut() {
            *last = size - (n - 1) * segment;
        }
        Self {
            size,
            segment,
            left,
            cvs: vec![None; n as usize],
            ready: Vec::new(),
            buf: Vec::new(),
        }
    }

    /// The segment length (a power of two).
    #[cfg(test)]
    pub(crate) fn segment(&self) -> u64 {
        self.segment
    }

    /// Bytes `offset .. offset + len` were stored, each byte once over the
    /// transfer (the caller's tally sees to that). Segments this completes
    /// wait for [`hash_ready`](Self::hash_ready). Bytes outside the payload
    /// are ignored.
    pub(crate) fn stored(&mut self, offset: u64, len: u64) {
        let end = offset.saturating_add(len).min(self.size);
        let mut at = offset;
        while at < end {
            let i = at / self.segment;
            let seg_end = (i + 1).saturating_mul(self.segment).min(end);
            let Some(left) = self.left.get_mut(i as usize) else {
                return;
            };
            let was = *left;
            *left = left.saturating_sub(seg_end - at);
            if was > 0 && *left == 0 && self.cvs.len() > 1 {
                self.ready.push(i);
            }
            at = seg_end;
        }
    }

    /// Leaves the segments completed so far to [`finish`](Self::finish)
    /// (a resumed transfer's, held before it started).
    pub(crate) fn forget_ready(&mut self) {
        self.ready.clear();
    }

    /// Hashes the segments completed since the last call, reading them
    /// back through `read`.
    pub(crate) fn hash_ready(&mut self, read: ReadAt<'_>) -> io::Result<()> {
        while let Some(i) = self.ready.pop() {
            let cv = self.hash_segment(i, read)?;
            self.cvs[i as usize] = Some(cv);
        }
        Ok(())
    }

    fn hash_segment(&mut self, i: u64, read: ReadAt<'_>) -> io::Result<ChainingValue> {
        let from = i * self.segment;
        let to = (from + self.segment).min(self.size);
        let mut h = blake3::Hasher::new();
        h.set_input_offset(from);
        hash_range(&mut h, from, to, &mut self.buf, read)?;
        Ok(h.finalize_non_root())
    }

    /// The hash of the whole payload. Call once every byte is stored:
    /// segments not hashed yet (all of them for a payload of one segment)
    /// are read back through `read` first.
    pub(crate) fn finish(&mut self, read: ReadAt<'_>) -> io::Result<Hash> {
        if self.cvs.len() == 1 {
            // One segment is the whole tree: its hash is the root.
            let mut h = blake3::Hasher::new();
            hash_range(&mut h, 0, self.size, &mut self.buf, read)?;
            return Ok(*h.finalize().as_bytes());
        }
        self.ready.clear();
        for i in 0..self.cvs.len() {
            if self.cvs[i].is_none() {
                self.cvs[i] = Some(self.hash_segment(i as u64, read)?);
            }
        }
        // More than one segment: the payload is longer than a chunk.
        let left = left_subtree_len(self.size);
        let l = self.node(0, left);
        let r = self.node(left, self.size - left);
        Ok(*merge_subtrees_root(&l, &r, Mode::Hash).as_bytes())
    }

    /// The chaining value of the subtree `offset .. offset + len`: a
    /// segment's own, or its children's merged. Every subtree longer than
    /// a segment splits at a multiple of the segment length, since the
    /// left child is the largest power of two below its length.
    fn node(&self, offset: u64, len: u64) -> ChainingValue {
        if len <= self.segment {
            return self.cvs[(offset / self.segment) as usize].unwrap_or_default();
        }
        let left = left_subtree_len(len);
        merge_subtrees_non_root(
            &self.node(offset, left),
            &self.node(offset + left, len - left),
            Mode::Hash,
        )
    }
}

/// Feeds `h` the bytes `from .. to`, read through `read` into `buf` a
/// [`READ`] at a time (`buf` grows to that on first use).
pub(crate) fn hash_range(
    h: &mut blake3::Hasher,
    from: u64,
    to: u64,
    buf: &mut Vec<u8>,
    read: ReadAt<'_>,
) -> io::Result<()> {
    if buf.len() < READ {
        buf.resize(READ, 0);
    }
    let mut at = from;
    while at < to {
        let n = (to - at).min(READ as u64) as usize;
        read(at, &mut buf[..n])?;
        h.update(&buf[..n]);
        at += n as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn payload(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 11) as u8)
            .collect()
    }

    /// Stores `data` in pieces of `piece` bytes in the order `order`
    /// gives, hashing as segments complete, and returns the hash.
    fn tree_hash(data: &[u8], piece: usize, order: &[usize]) -> Hash {
        let mut t = TreeHasher::new(data.len() as u64);
        let mut read = |at: u64, buf: &mut [u8]| {
            buf.copy_from_slice(&data[at as usize..at as usize + buf.len()]);
            Ok(())
        };
        for &p in order {
            let at = p * piece;
            let len = piece.min(data.len() - at);
            t.stored(at as u64, len as u64);
            t.hash_ready(&mut read).unwrap();
        }
        t.finish(&mut read).unwrap()
    }

    #[test]
    fn sizes_around_segment_and_chunk_boundaries_hash_as_blake3_does() {
        let seg = MIN_SEGMENT as usize;
        for len in [
            0,
            1,
            1023,
            1024,
            1025,
            seg - 1,
            seg,
            seg + 1,
            2 * seg,
            3 * seg + 1400,
            7 * seg - 1,
            13 * seg + 5,
        ] {
            let data = payload(len, 7);
            let pieces = len.div_ceil(1400).max(1);
            let order: Vec<usize> = (0..pieces).rev().collect();
            assert_eq!(
                tree_hash(&data, 1400, &order),
                *blake3::hash(&data).as_bytes(),
                "{len} bytes"
            );
        }
    }

    #[test]
    fn segments_grow_so_their_count_stays_bounded() {
        for size in [0, 1, 1 << 20, 1 << 30, 1 << 40, u64::MAX / 2, u64::MAX] {
            let t = TreeHasher::new(size);
            assert!(t.segment().is_power_of_two(), "{size}");
            assert!(t.segment() >= MIN_SEGMENT);
            assert!(
                t.cvs.len() as u64 <= MAX_SEGMENTS,
                "{size}: {}",
                t.cvs.len()
            );
        }
    }

    #[test]
    fn segments_are_hashed_as_they_complete_not_at_the_end() {
        let data = payload(10 * MIN_SEGMENT as usize, 1);
        let mut t = TreeHasher::new(data.len() as u64);
        let mut reads = 0u64;
        let mut read = |at: u64, buf: &mut [u8]| {
            reads += buf.len() as u64;
            buf.copy_from_slice(&data[at as usize..at as usize + buf.len()]);
            Ok(())
        };
        // All but the last byte: every segment but the last is hashed.
        t.stored(0, data.len() as u64 - 1);
        t.hash_ready(&mut read).unwrap();
        t.stored(data.len() as u64 - 1, 1);
        let hash = t.finish(&mut read).unwrap();
        assert_eq!(hash, *blake3::hash(&data).as_bytes());
        assert_eq!(reads, data.len() as u64, "each byte read back once");
    }

    #[test]
    fn a_read_error_is_returned_not_swallowed() {
        let mut t = TreeHasher::new(3 * MIN_SEGMENT);
        t.stored(0, 3 * MIN_SEGMENT);
        let mut read = |_: u64, _: &mut [u8]| Err(io::Error::other("disk gone"));
        assert!(t.hash_ready(&mut read).is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// Any size, any piece size, any arrival order: the hash is
        /// BLAKE3's of the whole payload.
        #[test]
        fn any_order_hashes_as_blake3_does(
            len in 0usize..600_000,
            piece in 1usize..70_000,
            seed in any::<u8>(),
            shuffle in any::<u64>(),
        ) {
            let data = payload(len, seed);
            let pieces = len.div_ceil(piece).max(1);
            let mut order: Vec<usize> = (0..pieces).collect();
            // A seeded Fisher-Yates shuffle.
            let mut s = shuffle | 1;
            for i in (1..order.len()).rev() {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                order.swap(i, (s % (i as u64 + 1)) as usize);
            }
            prop_assert_eq!(tree_hash(&data, piece, &order), *blake3::hash(&data).as_bytes());
        }
    }
}
