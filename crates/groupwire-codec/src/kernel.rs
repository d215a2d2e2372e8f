//! The one hot loop: `outputs[r] = sum_i rows[r][i] * inputs[i]` over
//! GF(2^8), byte by byte (a "dot product" per output, as ISA-L's
//! `gf_vect_dot_prod` calls it), with the backend chosen at run time.
//!
//! Only the dispatch is here: each call goes to the vector loops (`simd`)
//! or the portable loop (`scalar`). Those two take [`Backend`] from
//! `backend` (and `simd` its tail from `scalar`), never anything from this
//! module, so the dependencies run one way.

use crate::backend::Backend;
use crate::scalar::dot_prod_scalar;

/// `outputs[r][b] = sum_i rows[r][i] * inputs[i][b]` for every byte `b`.
///
/// The caller guarantees: `rows.len() == outputs.len()`, every row has
/// `inputs.len()` coefficients, every input and output has the same length,
/// and `backend.is_available()`.
///
/// No outputs (a block sent with zero repairs) or zero-length symbols
/// leave nothing to compute: it returns before any backend sees them, so
/// the backends may take the symbol length from the first output.
pub(crate) fn dot_prod(
    backend: Backend,
    rows: &[&[u8]],
    inputs: &[&[u8]],
    outputs: &mut [&mut [u8]],
) {
    debug_assert_eq!(rows.len(), outputs.len());
    debug_assert!(rows.iter().all(|r| r.len() == inputs.len()));
    if outputs.first().is_none_or(|o| o.is_empty()) {
        return;
    }
    match backend {
        #[cfg(target_arch = "x86_64")]
        Backend::Ssse3 | Backend::Avx2 | Backend::Avx512Gfni => {
            crate::simd::dot_prod(backend, rows, inputs, outputs);
        }
        _ => dot_prod_scalar(rows, inputs, outputs),
    }
}
