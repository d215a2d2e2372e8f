//! x86-64 vector backends for [`kernel::dot_prod`](crate::kernel::dot_prod).
//!
//! Same shape as ISA-L's `gf_Nvect_dot_prod_*` (used by `ec_encode_data`):
//! the outputs are taken in groups of `N` rows; for each vector-wide
//! column of the symbols, every input is loaded once and multiplied into
//! `N` accumulators held in registers, which are stored once at the end.
//! So an input vector is read once per group, not once per output, and
//! outputs are written, never read back.
//!
//! - SSSE3 and AVX2 multiply by a constant `c` with the split-nibble trick:
//!   `c * x = T_lo[x & 15] ^ T_hi[x >> 4]`, each lookup one `pshufb` into
//!   a 16-byte table ([`gf::NIBBLE`]).
//! - AVX-512 + GFNI multiply with one `vgf2p8affineqb` per 64 bytes: a
//!   product by a constant is a linear map on a byte's 8 bits, the 8x8
//!   bit matrix coming from [`gf::AFFINE`]; GFNI's own field multiply
//!   (`gf2p8mulb`) is for another polynomial (0x11B) and is not used.
//!
//! The last, partial vector of a symbol is handled by recomputing the last
//! full vector, overlapping the previous one (outputs are written, not
//! accumulated, so this is harmless); symbols shorter than one vector go
//! to a narrower backend or the scalar loop.
//!
//! `unsafe` is limited to calling a `#[target_feature]` function after
//! checking that the CPU has the feature, and to unaligned vector loads
//! and stores through references of exactly the vector's size.

#![allow(
    unsafe_code,
    reason = "calls to #[target_feature] functions and unaligned vector loads/stores; each block has a SAFETY comment"
)]

use core::arch::x86_64::*;

use crate::backend::Backend;
use crate::scalar::dot_prod_scalar;
use crate::{MAX_SYMBOLS, gf};

/// Runs the widest vector loop `backend` allows for this symbol length.
pub(crate) fn dot_prod(
    backend: Backend,
    rows: &[&[u8]],
    inputs: &[&[u8]],
    outputs: &mut [&mut [u8]],
) {
    let len = outputs.first().map_or(0, |o| o.len());
    debug_assert!(inputs.iter().all(|i| i.len() == len) && outputs.iter().all(|o| o.len() == len));
    // Re-checking the CPU here (a cached atomic load per feature) keeps
    // each SAFETY argument local instead of relying on how the backend
    // was chosen.
    if backend == Backend::Avx512Gfni && len >= 64 && Backend::Avx512Gfni.is_available() {
        // SAFETY: the CPU has AVX-512F, AVX-512BW and GFNI (checked above).
        unsafe { dot_prod_gfni512(rows, inputs, outputs, len) }
    } else if matches!(backend, Backend::Avx512Gfni | Backend::Avx2)
        && len >= 32
        && Backend::Avx2.is_available()
    {
        // SAFETY: the CPU has AVX2 (checked above).
        unsafe { dot_prod_avx2(rows, inputs, outputs, len) }
    } else if backend != Backend::Scalar && len >= 16 && Backend::Ssse3.is_available() {
        // SAFETY: the CPU has SSSE3 (checked above).
        unsafe { dot_prod_ssse3(rows, inputs, outputs, len) }
    } else {
        dot_prod_scalar(rows, inputs, outputs);
    }
}

/// Splits the outputs into groups of at most `$max` rows and runs
/// `$group::<N>` on each, `N` a literal so the accumulators stay in
/// registers.
macro_rules! by_groups {
    ($group:ident, $rows:ident, $inputs:ident, $outputs:ident, $len:ident, $max:literal, [$($n:literal),+]) => {{
        let mut r = 0;
        while r < $rows.len() {
            let g = ($rows.len() - r).min($max);
            let (rows, outs) = (&$rows[r..r + g], &mut $outputs[r..r + g]);
            match g {
                $($n => $group::<$n>(rows, $inputs, outs, $len),)+
                _ => unreachable!("group sizes are 1..={}", $max),
            }
            r += g;
        }
    }};
}

/// The start of each `W`-byte vector of a `len`-byte symbol (`len >= W`),
/// the last one moved back to end at `len`.
/// The group's coefficients input-major, `coef[i][r] = rows[r][i]`, so the
/// inner loop reads them without bounds checks.
fn transpose<const N: usize>(rows: &[&[u8]], k: usize) -> [[u8; N]; MAX_SYMBOLS] {
    let mut coef = [[0u8; N]; MAX_SYMBOLS];
    for (r, row) in rows.iter().enumerate().take(N) {
        for (c, &x) in coef.iter_mut().zip(&row[..k]) {
            c[r] = x;
        }
    }
    coef
}

fn columns<const W: usize>(len: usize) -> impl Iterator<Item = usize> {
    (0..len.div_ceil(W)).map(move |c| (c * W).min(len - W))
}

// ---- SSSE3 ----

#[target_feature(enable = "ssse3")]
fn dot_prod_ssse3(rows: &[&[u8]], inputs: &[&[u8]], outputs: &mut [&mut [u8]], len: usize) {
    by_groups!(
        group_ssse3,
        rows,
        inputs,
        outputs,
        len,
        6,
        [1, 2, 3, 4, 5, 6]
    );
}

#[target_feature(enable = "ssse3")]
fn group_ssse3<const N: usize>(
    rows: &[&[u8]],
    inputs: &[&[u8]],
    outputs: &mut [&mut [u8]],
    len: usize,
) {
    let coef = transpose::<N>(rows, inputs.len());
    let coef = &coef[..inputs.len()];
    let mask = _mm_set1_epi8(0x0f);
    for at in columns::<16>(len) {
        let mut acc = [_mm_setzero_si128(); N];
        for (input, c) in inputs.iter().zip(coef) {
            let x = load128(&input[at..at + 16]);
            let lo = _mm_and_si128(x, mask);
            let hi = _mm_and_si128(_mm_srli_epi64::<4>(x), mask);
            for (a, &c) in acc.iter_mut().zip(c) {
                let t = &gf::NIBBLE[usize::from(c)];
                let pl = _mm_shuffle_epi8(load128(&t[..16]), lo);
                let ph = _mm_shuffle_epi8(load128(&t[16..]), hi);
                *a = _mm_xor_si128(*a, _mm_xor_si128(pl, ph));
            }
        }
        for (a, out) in acc.iter().zip(outputs.iter_mut()) {
            store128(&mut out[at..at + 16], *a);
        }
    }
}

// ---- AVX2 ----

#[target_feature(enable = "avx2")]
fn dot_prod_avx2(rows: &[&[u8]], inputs: &[&[u8]], outputs: &mut [&mut [u8]], len: usize) {
    by_groups!(
        group_avx2,
        rows,
        inputs,
        outputs,
        len,
        8,
        [1, 2, 3, 4, 5, 6, 7, 8]
    );
}

#[target_feature(enable = "avx2")]
fn group_avx2<const N: usize>(
    rows: &[&[u8]],
    inputs: &[&[u8]],
    outputs: &mut [&mut [u8]],
    len: usize,
) {
    let coef = transpose::<N>(rows, inputs.len());
    let coef = &coef[..inputs.len()];
    let mask = _mm256_set1_epi8(0x0f);
    for at in columns::<32>(len) {
        let mut acc = [_mm256_setzero_si256(); N];
        for (input, c) in inputs.iter().zip(coef) {
            let x = load256(&input[at..at + 32]);
            let lo = _mm256_and_si256(x, mask);
            let hi = _mm256_and_si256(_mm256_srli_epi64::<4>(x), mask);
            for (a, &c) in acc.iter_mut().zip(c) {
                let t = &gf::NIBBLE[usize::from(c)];
                let tl = _mm256_broadcastsi128_si256(load128(&t[..16]));
                let th = _mm256_broadcastsi128_si256(load128(&t[16..]));
                let p = _mm256_xor_si256(_mm256_shuffle_epi8(tl, lo), _mm256_shuffle_epi8(th, hi));
                *a = _mm256_xor_si256(*a, p);
            }
        }
        for (a, out) in acc.iter().zip(outputs.iter_mut()) {
            store256(&mut out[at..at + 32], *a);
        }
    }
}

// ---- AVX-512 + GFNI ----

#[target_feature(enable = "avx512f,avx512bw,gfni")]
fn dot_prod_gfni512(rows: &[&[u8]], inputs: &[&[u8]], outputs: &mut [&mut [u8]], len: usize) {
    by_groups!(
        group_gfni512,
        rows,
        inputs,
        outputs,
        len,
        16,
        [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]
    );
}

#[target_feature(enable = "avx512f,avx512bw,gfni")]
fn group_gfni512<const N: usize>(
    rows: &[&[u8]],
    inputs: &[&[u8]],
    outputs: &mut [&mut [u8]],
    len: usize,
) {
    let coef = transpose::<N>(rows, inputs.len());
    let coef = &coef[..inputs.len()];
    for at in columns::<64>(len) {
        let mut acc = [_mm512_setzero_si512(); N];
        for (input, c) in inputs.iter().zip(coef) {
            let x = load512(&input[at..at + 64]);
            for (a, &c) in acc.iter_mut().zip(c) {
                let m = _mm512_set1_epi64(gf::AFFINE[usize::from(c)] as i64);
                *a = _mm512_xor_si512(*a, _mm512_gf2p8affine_epi64_epi8::<0>(x, m));
            }
        }
        for (a, out) in acc.iter().zip(outputs.iter_mut()) {
            store512(&mut out[at..at + 64], *a);
        }
    }
}

// ---- loads and stores ----
// Each takes a slice that the caller cut to exactly the vector's width, so
// the length check below is the only one and the pointer is in bounds.

#[inline]
fn load128(s: &[u8]) -> __m128i {
    let s: &[u8; 16] = s.try_into().expect("16-byte slice");
    // SAFETY: `s` is 16 readable bytes; `loadu` has no alignment
    // requirement; SSE2 is part of the x86-64 baseline.
    unsafe { _mm_loadu_si128(s.as_ptr().cast()) }
}

#[inline]
fn store128(s: &mut [u8], v: __m128i) {
    let s: &mut [u8; 16] = s.try_into().expect("16-byte slice");
    // SAFETY: `s` is 16 writable bytes, borrowed exclusively; no alignment
    // requirement; SSE2 is baseline.
    unsafe { _mm_storeu_si128(s.as_mut_ptr().cast(), v) }
}

#[inline]
#[target_feature(enable = "avx")]
fn load256(s: &[u8]) -> __m256i {
    let s: &[u8; 32] = s.try_into().expect("32-byte slice");
    // SAFETY: `s` is 32 readable bytes; no alignment requirement.
    unsafe { _mm256_loadu_si256(s.as_ptr().cast()) }
}

#[inline]
#[target_feature(enable = "avx")]
fn store256(s: &mut [u8], v: __m256i) {
    let s: &mut [u8; 32] = s.try_into().expect("32-byte slice");
    // SAFETY: `s` is 32 writable bytes, borrowed exclusively; no alignment
    // requirement.
    unsafe { _mm256_storeu_si256(s.as_mut_ptr().cast(), v) }
}

#[inline]
#[target_feature(enable = "avx512f")]
fn load512(s: &[u8]) -> __m512i {
    let s: &[u8; 64] = s.try_into().expect("64-byte slice");
    // SAFETY: `s` is 64 readable bytes; no alignment requirement.
    unsafe { _mm512_loadu_si512(s.as_ptr().cast()) }
}

#[inline]
#[target_feature(enable = "avx512f")]
fn store512(s: &mut [u8], v: __m512i) {
    let s: &mut [u8; 64] = s.try_into().expect("64-byte slice");
    // SAFETY: `s` is 64 writable bytes, borrowed exclusively; no alignment
    // requirement.
    unsafe { _mm512_storeu_si512(s.as_mut_ptr().cast(), v) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_cover_the_symbol_once_the_last_overlapping() {
        assert_eq!(columns::<32>(32).collect::<Vec<_>>(), [0]);
        assert_eq!(columns::<32>(70).collect::<Vec<_>>(), [0, 32, 38]);
        assert_eq!(columns::<16>(48).collect::<Vec<_>>(), [0, 16, 32]);
    }

    #[test]
    fn every_backend_multiplies_like_the_table() {
        // One input, one row per constant: out = c * x for all c and x.
        let x: Vec<u8> = (0..=255u8).collect();
        let coeffs: Vec<[u8; 1]> = (0..=255u8).map(|c| [c]).collect();
        let rows: Vec<&[u8]> = coeffs.iter().map(|c| &c[..]).collect();
        for backend in Backend::ALL.into_iter().filter(|b| b.is_available()) {
            let mut outs = vec![vec![0u8; 256]; 256];
            let mut refs: Vec<&mut [u8]> = outs.iter_mut().map(|o| &mut o[..]).collect();
            dot_prod(backend, &rows, &[&x], &mut refs);
            for (c, out) in outs.iter().enumerate() {
                for (b, &p) in out.iter().enumerate() {
                    assert_eq!(p, gf::mul(c as u8, b as u8), "{backend:?} {c} * {b}");
                }
            }
        }
    }
}

/// The BCH Chien search's root mask ([`crate::bch`]) on 16 positions per
/// `pshufb`, or `None` if the CPU lacks SSSE3.
pub(crate) fn chien_roots(locator: &[u8], degree: usize) -> Option<u128> {
    if !Backend::Ssse3.is_available() {
        return None;
    }
    // SAFETY: the CPU has SSSE3 (checked above).
    Some(unsafe { chien_roots_ssse3(locator, degree) })
}

#[target_feature(enable = "ssse3")]
fn chien_roots_ssse3(locator: &[u8], degree: usize) -> u128 {
    use crate::bch::{MUL_NIBBLES, POW_NEG};
    let (lo_tables, hi_tables) = &MUL_NIBBLES;
    let nibble = _mm_set1_epi8(0x0f);
    let mut acc = [_mm_set1_epi8(1); 8];
    for (i, &c) in locator.iter().enumerate().take(degree + 1).skip(1) {
        if c == 0 {
            continue;
        }
        let c = usize::from(c & 0x7f);
        // SAFETY: each table row is exactly 16 bytes.
        let (lo, hi) = unsafe {
            (
                _mm_loadu_si128(lo_tables[c].as_ptr().cast()),
                _mm_loadu_si128(hi_tables[c].as_ptr().cast()),
            )
        };
        for (b, a) in acc.iter_mut().enumerate() {
            // SAFETY: POW_NEG rows are 128 bytes; b < 8, so 16·b + 16 <= 128.
            let x = unsafe { _mm_loadu_si128(POW_NEG[i - 1][16 * b..].as_ptr().cast()) };
            let l = _mm_shuffle_epi8(lo, _mm_and_si128(x, nibble));
            let h = _mm_shuffle_epi8(hi, _mm_and_si128(_mm_srli_epi64::<4>(x), nibble));
            *a = _mm_xor_si128(*a, _mm_xor_si128(l, h));
        }
    }
    let zero = _mm_setzero_si128();
    let mut roots = 0u128;
    for (b, a) in acc.iter().enumerate() {
        let m = _mm_movemask_epi8(_mm_cmpeq_epi8(*a, zero)) as u16;
        roots |= u128::from(m) << (16 * b);
    }
    // Lane 127 is padding, not a position.
    roots & (u128::MAX >> 1)
}
