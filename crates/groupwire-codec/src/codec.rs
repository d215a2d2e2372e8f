//! The Reed-Solomon code: encoding, decoding, and the decode-matrix cache.

use core::fmt;
use std::sync::Arc;

use crate::backend::Backend;
use crate::kernel;
use crate::{CodecError, MAX_SYMBOLS, gf, matrix};

/// A systematic Reed-Solomon erasure code over GF(2^8) with `k` source and
/// `m` repair symbols (`1 <= k`, `k + m <= 255`), RFC 5510's construction.
///
/// Symbol `i < k` of a block is source symbol `i`, unchanged; symbol
/// `k + j` is repair symbol `j`, `sum_i GM[i][k + j] * source_i` over
/// GF(2^8) byte by byte, where `GM = V_{k,k}^-1 * V_{k,k+m}` and
/// `V[i][j] = alpha^(i*j)`, `alpha = 2` in the field with polynomial
/// x^8 + x^4 + x^3 + x^2 + 1. These are RFC 5510's generator matrix and
/// field, so symbol indexes are its encoding symbol IDs and an RFC 5510
/// decoder can decode what this encodes (and the other way round).
/// [`coefficient`](Self::coefficient) exposes the matrix.
///
/// Methods: getters ([`source_count`](Self::source_count),
/// [`repair_count`](Self::repair_count), [`backend`](Self::backend),
/// [`coefficient`](Self::coefficient)), [`encode`](Self::encode), and
/// [`decode`](Self::decode) without a cache; for repeated decoding keep a
/// [`Decoder`], which caches decode matrices.
///
/// Cloning is cheap (the matrix is shared, immutable, behind an `Arc`) and
/// the value is `Send + Sync`.
#[derive(Clone)]
pub struct ReedSolomon {
    inner: Arc<Inner>,
    backend: Backend,
}

struct Inner {
    k: usize,
    m: usize,
    /// `m` rows of `k`: row `j` computes repair symbol `k + j`.
    coeffs: Vec<u8>,
}

impl fmt::Debug for ReedSolomon {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReedSolomon")
            .field("k", &self.inner.k)
            .field("m", &self.inner.m)
            .field("backend", &self.backend)
            .finish_non_exhaustive()
    }
}

impl ReedSolomon {
    /// A code with `k` source and `m` repair symbols per block, on the
    /// fastest backend this CPU has. Costs O(k * (k + m)) field operations.
    pub fn new(k: usize, m: usize) -> Result<Self, CodecError> {
        if k == 0 || k.checked_add(m).is_none_or(|n| n > MAX_SYMBOLS) {
            return Err(CodecError::InvalidParameters { k, m });
        }
        Ok(Self {
            inner: Arc::new(Inner {
                k,
                m,
                coeffs: matrix::repair_matrix(k, m),
            }),
            backend: Backend::detect(),
        })
    }

    /// The same code on another backend (all compute the same bytes).
    pub fn with_backend(mut self, backend: Backend) -> Result<Self, CodecError> {
        if !backend.is_available() {
            return Err(CodecError::BackendUnavailable(backend));
        }
        self.backend = backend;
        Ok(self)
    }

    /// The backend running the multiply-add loop.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// `k`, source symbols per block.
    pub fn source_count(&self) -> usize {
        self.inner.k
    }

    /// `m`, the most repair symbols per block.
    pub fn repair_count(&self) -> usize {
        self.inner.m
    }

    /// `GM[source][k + repair]`: the weight of source symbol `source` in
    /// repair symbol `repair` (so in encoding symbol `k + repair`), or
    /// `None` if either is out of range.
    pub fn coefficient(&self, repair: usize, source: usize) -> Option<u8> {
        (repair < self.inner.m && source < self.inner.k).then(|| self.row(repair)[source])
    }

    /// Computes repair symbols `k .. k + repairs.len()` from the `k` source
    /// symbols. All symbols and buffers must have one length (zero is
    /// allowed); `repairs` may be shorter than `m`, as when a block FEC
    /// sender sends fewer repairs than the code allows, and each repair
    /// is the same whatever `repairs.len()` is.
    pub fn encode<S: AsRef<[u8]>, R: AsMut<[u8]>>(
        &self,
        sources: &[S],
        repairs: &mut [R],
    ) -> Result<(), CodecError> {
        let Inner { k, m, .. } = *self.inner;
        if sources.len() != k {
            return Err(CodecError::SourceCount {
                expected: k,
                got: sources.len(),
            });
        }
        if repairs.len() > m {
            return Err(CodecError::RepairCount {
                max: m,
                got: repairs.len(),
            });
        }
        let len = sources[0].as_ref().len();
        let mut ins: [&[u8]; MAX_SYMBOLS] = [&[]; MAX_SYMBOLS];
        for (i, (slot, s)) in ins.iter_mut().zip(sources).enumerate() {
            *slot = check_len(i, len, s.as_ref())?;
        }
        let n = repairs.len();
        let mut outs: [&mut [u8]; MAX_SYMBOLS] = core::array::from_fn(|_| Default::default());
        for (j, (slot, r)) in outs.iter_mut().zip(repairs.iter_mut()).enumerate() {
            let r = r.as_mut();
            check_len(k + j, len, r)?;
            *slot = r;
        }
        let mut rows: [&[u8]; MAX_SYMBOLS] = [&[]; MAX_SYMBOLS];
        for (j, slot) in rows.iter_mut().take(n).enumerate() {
            *slot = self.row(j);
        }
        kernel::dot_prod(self.backend, &rows[..n], &ins[..k], &mut outs[..n]);
        Ok(())
    }

    /// Rebuilds lost source symbols; like [`Decoder::decode`] but computes
    /// the decode matrix afresh (and allocates for it) on every call with
    /// two or more lost sources.
    pub fn decode<S: AsRef<[u8]>, O: AsMut<[u8]>>(
        &self,
        received: &[(usize, S)],
        missing: &mut [(usize, O)],
    ) -> Result<(), CodecError> {
        decode(self, None, received, missing)
    }

    fn row(&self, repair: usize) -> &[u8] {
        let k = self.inner.k;
        &self.inner.coeffs[repair * k..(repair + 1) * k]
    }
}

/// A decoder for one code: [`decode`](Self::decode) with a bounded cache of
/// decode matrices keyed by the erasure pattern, so a receiver that sees
/// the same pattern again (a burst hitting the same positions, or a
/// benchmark) skips the matrix inversion.
///
/// Own one per receiver (it is `Send`, not shared); clone the
/// [`ReedSolomon`] into as many decoders as needed.
#[derive(Clone, Debug)]
pub struct Decoder {
    code: ReedSolomon,
    cache: DecodeCache,
}

/// How a [`Decoder`]'s matrix cache has done so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CacheStats {
    /// Decodes that found their matrix in the cache.
    pub hits: u64,
    /// Decodes that computed their matrix (and cached it).
    pub misses: u64,
    /// Matrices held now.
    pub entries: usize,
}

impl Decoder {
    /// Matrices a [`Decoder::new`] keeps: enough for the patterns of a
    /// bursty link, small enough (a few KiB for k = 20) not to matter.
    pub const DEFAULT_CACHE_CAPACITY: usize = 32;

    /// A decoder caching up to [`Self::DEFAULT_CACHE_CAPACITY`] matrices.
    pub fn new(code: ReedSolomon) -> Self {
        Self::with_cache_capacity(code, Self::DEFAULT_CACHE_CAPACITY)
    }

    /// A decoder caching up to `capacity` matrices (0: no cache), least
    /// recently used evicted first.
    pub fn with_cache_capacity(code: ReedSolomon, capacity: usize) -> Self {
        Self {
            code,
            cache: DecodeCache::new(capacity),
        }
    }

    /// The code this decodes.
    pub fn code(&self) -> &ReedSolomon {
        &self.code
    }

    /// Hits, misses and size of the matrix cache.
    pub fn cache_stats(&self) -> CacheStats {
        CacheStats {
            hits: self.cache.hits,
            misses: self.cache.misses,
            entries: self.cache.entries.len(),
        }
    }

    /// Rebuilds lost source symbols from any `k` received symbols.
    ///
    /// `received` holds `(index, symbol)` pairs in any order, indexes in
    /// `0..k + m` (encoding symbol IDs), all distinct; `missing` holds
    /// `(index, buffer)` pairs, each index a source (`< k`) not received,
    /// all distinct: each buffer receives that source symbol. Every symbol
    /// and buffer has one length. With more than `k` symbols received,
    /// the received sources and the lowest-indexed repairs are used.
    ///
    /// Indexes may come straight from the wire: a bad one is an error,
    /// never a panic, and on error no buffer has been written. With
    /// `missing` empty it only validates. A single lost source is rebuilt
    /// from one repair without a matrix inversion; otherwise the matrix
    /// comes from the cache, or is computed and cached. Cache hits and
    /// single losses do not allocate.
    pub fn decode<S: AsRef<[u8]>, O: AsMut<[u8]>>(
        &mut self,
        received: &[(usize, S)],
        missing: &mut [(usize, O)],
    ) -> Result<(), CodecError> {
        decode(&self.code, Some(&mut self.cache), received, missing)
    }
}

/// A set of symbol indexes in `0..256`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct IndexSet([u64; 4]);

impl IndexSet {
    fn contains(&self, i: usize) -> bool {
        self.0[i / 64] >> (i % 64) & 1 != 0
    }
    fn insert(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }
}

/// Decode matrices by the set of symbols they read, least recently used
/// evicted first. A linear scan: the capacity is small.
#[derive(Clone, Debug)]
struct DecodeCache {
    capacity: usize,
    entries: Vec<CacheEntry>,
    tick: u64,
    hits: u64,
    misses: u64,
}

#[derive(Clone, Debug)]
struct CacheEntry {
    key: IndexSet,
    last_used: u64,
    matrix: Vec<u8>,
}

impl DecodeCache {
    fn new(capacity: usize) -> Self {
        Self {
            capacity,
            entries: Vec::new(),
            tick: 0,
            hits: 0,
            misses: 0,
        }
    }

    /// The matrix for `key`, computed by `compute` into a cleared buffer
    /// when absent (an evicted entry's buffer once the cache is full).
    fn get_or_insert<'a>(
        &'a mut self,
        key: IndexSet,
        scratch: &'a mut Vec<u8>,
        compute: impl FnOnce(&mut Vec<u8>),
    ) -> &'a [u8] {
        self.tick += 1;
        if let Some(i) = self.entries.iter().position(|e| e.key == key) {
            self.hits += 1;
            self.entries[i].last_used = self.tick;
            return &self.entries[i].matrix;
        }
        self.misses += 1;
        if self.capacity == 0 {
            scratch.clear();
            compute(scratch);
            return scratch;
        }
        let i = if self.entries.len() < self.capacity {
            self.entries.push(CacheEntry {
                key,
                last_used: 0,
                matrix: Vec::new(),
            });
            self.entries.len() - 1
        } else {
            let (i, _) = self
                .entries
                .iter()
                .enumerate()
                .min_by_key(|(_, e)| e.last_used)
                .expect("a full cache with capacity > 0 has entries");
            i
        };
        let e = &mut self.entries[i];
        e.key = key;
        e.last_used = self.tick;
        e.matrix.clear();
        compute(&mut e.matrix);
        &e.matrix
    }
}

fn check_len(index: usize, expected: usize, s: &[u8]) -> Result<&[u8], CodecError> {
    if s.len() == expected {
        Ok(s)
    } else {
        Err(CodecError::LengthMismatch {
            index,
            expected,
            got: s.len(),
        })
    }
}

fn decode<S: AsRef<[u8]>, O: AsMut<[u8]>>(
    code: &ReedSolomon,
    cache: Option<&mut DecodeCache>,
    received: &[(usize, S)],
    missing: &mut [(usize, O)],
) -> Result<(), CodecError> {
    let Inner { k, m, .. } = *code.inner;
    let n = k + m;
    // Validate everything before writing anything.
    let len = match (received.first(), missing.first_mut()) {
        (Some((_, s)), _) => s.as_ref().len(),
        (None, Some((_, o))) => o.as_mut().len(),
        (None, None) => return Ok(()),
    };
    let mut have = IndexSet::default();
    // Position in `received` of each received index.
    let mut pos = [0u16; MAX_SYMBOLS];
    for (p, (index, s)) in received.iter().enumerate() {
        let index = *index;
        if index >= n {
            return Err(CodecError::IndexOutOfRange { index, limit: n });
        }
        if have.contains(index) {
            return Err(CodecError::DuplicateIndex { index });
        }
        check_len(index, len, s.as_ref())?;
        have.insert(index);
        // Distinct indexes below 255, so fewer than 255 positions.
        pos[index] = p as u16;
    }
    let mut wanted = IndexSet::default();
    for (index, o) in missing.iter_mut() {
        let index = *index;
        if index >= k {
            return Err(CodecError::IndexOutOfRange { index, limit: k });
        }
        if have.contains(index) {
            return Err(CodecError::NotMissing { index });
        }
        if wanted.contains(index) {
            return Err(CodecError::DuplicateIndex { index });
        }
        check_len(index, len, o.as_mut())?;
        wanted.insert(index);
    }
    if missing.is_empty() {
        return Ok(());
    }
    if received.len() < k {
        return Err(CodecError::NotEnoughSymbols {
            needed: k,
            got: received.len(),
        });
    }

    // The k symbols read: received sources ascending, then the lowest
    // `e` received repairs, `e` being the number of lost sources.
    let mut ins: [&[u8]; MAX_SYMBOLS] = [&[]; MAX_SYMBOLS];
    let mut lost = [0u8; MAX_SYMBOLS];
    // Row of each lost source in the decode matrix.
    let mut rank = [0u8; MAX_SYMBOLS];
    let mut used = IndexSet::default();
    let (mut nin, mut e) = (0, 0);
    for i in 0..k {
        if have.contains(i) {
            ins[nin] = received[usize::from(pos[i])].1.as_ref();
            nin += 1;
            used.insert(i);
        } else {
            rank[i] = e as u8;
            lost[e] = i as u8;
            e += 1;
        }
    }
    for j in k..n {
        if nin == k {
            break;
        }
        if have.contains(j) {
            ins[nin] = received[usize::from(pos[j])].1.as_ref();
            nin += 1;
            used.insert(j);
        }
    }
    debug_assert_eq!(nin, k, "received.len() >= k distinct symbols");
    let lost = &lost[..e];
    let repairs_used = || (k..n).filter(|&j| used.contains(j)).map(|j| j - k);

    let nout = missing.len();
    let mut out_index = [0u8; MAX_SYMBOLS];
    let mut outs: [&mut [u8]; MAX_SYMBOLS] = core::array::from_fn(|_| Default::default());
    for ((slot, idx), (index, o)) in outs
        .iter_mut()
        .zip(out_index.iter_mut())
        .zip(missing.iter_mut())
    {
        *slot = o.as_mut();
        // Checked `< k <= 254` above.
        *idx = *index as u8;
    }
    let outs = &mut outs[..nout];
    let mut rows: [&[u8]; MAX_SYMBOLS] = [&[]; MAX_SYMBOLS];
    let rows = &mut rows[..nout];

    if e == 1 {
        // One lost source l, one repair j: r_j = sum_i c_i s_i, so
        // s_l = (r_j + sum_{i != l} c_i s_i) / c_l. A row of k products.
        let j = repairs_used()
            .next()
            .expect("one repair is used for one loss");
        let c = code.row(j);
        let l = usize::from(lost[0]);
        let inv_cl = gf::inv(c[l]).expect("every repair coefficient is non-zero");
        let mut row = [0u8; MAX_SYMBOLS];
        let mut t = 0;
        for (i, &ci) in c.iter().enumerate() {
            if i != l {
                row[t] = gf::mul(ci, inv_cl);
                t += 1;
            }
        }
        row[k - 1] = inv_cl;
        rows[0] = &row[..k];
        kernel::dot_prod(code.backend, rows, &ins[..k], outs);
        return Ok(());
    }

    let mut scratch = Vec::new();
    let compute = |d: &mut Vec<u8>| decode_matrix(code, lost, &used, d);
    let matrix: &[u8] = match cache {
        Some(cache) => cache.get_or_insert(used, &mut scratch, compute),
        None => {
            compute(&mut scratch);
            &scratch
        }
    };
    for (slot, &index) in rows.iter_mut().zip(&out_index[..nout]) {
        let r = usize::from(rank[usize::from(index)]);
        *slot = &matrix[r * k..(r + 1) * k];
    }
    kernel::dot_prod(code.backend, rows, &ins[..k], outs);
    Ok(())
}

/// The `e * k` matrix giving the `e` lost sources (ascending) from the
/// symbols in `used` (received sources ascending, then used repairs).
///
/// With `A = GM[lost][repairs]^T` (e*e) and `B = GM[received][repairs]^T`:
/// `r = A s_lost + B s_received`, so `s_lost = A^-1 r + A^-1 B s_received`.
fn decode_matrix(code: &ReedSolomon, lost: &[u8], used: &IndexSet, out: &mut Vec<u8>) {
    let Inner { k, m, .. } = *code.inner;
    let e = lost.len();
    let repairs: Vec<usize> = (k..k + m)
        .filter(|&j| used.contains(j))
        .map(|j| j - k)
        .collect();
    debug_assert_eq!(repairs.len(), e);
    let mut a = Vec::with_capacity(e * e);
    for &j in &repairs {
        let row = code.row(j);
        a.extend(lost.iter().map(|&l| row[usize::from(l)]));
    }
    matrix::invert(&mut a, e)
        .expect("square submatrices of the repair matrix are invertible (MDS)");
    out.resize(e * k, 0);
    for b in 0..e {
        let ainv = &a[b * e..(b + 1) * e];
        let dst = &mut out[b * k..(b + 1) * k];
        let mut col = 0;
        for i in (0..k).filter(|&i| used.contains(i)) {
            dst[col] = repairs
                .iter()
                .zip(ainv)
                .fold(0, |s, (&j, &x)| s ^ gf::mul(x, code.row(j)[i]));
            col += 1;
        }
        dst[col..].copy_from_slice(ainv);
    }
}
