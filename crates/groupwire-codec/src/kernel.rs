//! The one hot loop: `outputs[r] = sum_i rows[r][i] * inputs[i]` over
//! GF(2^8), byte by byte (a "dot product" per output, as ISA-L's
//! `gf_vect_dot_prod` calls it), with the backend chosen at run time.
//!
//! Only the dispatch is here: each call goes to the vector loops (`simd`)
//! or the portable loop (`scalar`). Those two take [`Backend`] from
//! `backend` (and `simd` its tail from `scalar`), never anything from this
//! module, so the dependencies run one way.

use crate::MAX_SYMBOLS;
use crate::backend::Backend;
use crate::scalar::dot_prod_scalar;
use crate::xor::xor_into;

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

/// `out = sum_i coefs[i] * inputs[i]` for any number of inputs.
///
/// [`dot_prod`]'s vector loops hold at most [`MAX_SYMBOLS`] coefficients
/// per output (a block code never has more), while a sliding window may
/// be wider: the inputs are taken [`MAX_SYMBOLS`] at a time, the first
/// group written to `out` and each later one computed into `scratch` and
/// XOR-ed in. With no inputs `out` is zeroed. The caller guarantees
/// `coefs.len() == inputs.len()`, one length for every input and `out`,
/// and `backend.is_available()`.
pub(crate) fn combine(
    backend: Backend,
    coefs: &[u8],
    inputs: &[&[u8]],
    out: &mut [u8],
    scratch: &mut Vec<u8>,
) {
    debug_assert_eq!(coefs.len(), inputs.len());
    let mut groups = coefs.chunks(MAX_SYMBOLS).zip(inputs.chunks(MAX_SYMBOLS));
    match groups.next() {
        Some((c, i)) => dot_prod(backend, &[c], i, &mut [&mut *out]),
        None => out.fill(0),
    }
    for (c, i) in groups {
        scratch.clear();
        scratch.resize(out.len(), 0);
        dot_prod(backend, &[c], i, &mut [&mut scratch[..]]);
        xor_into(out, scratch);
    }
}

/// `out += c * input` (the field's addition is XOR). `scratch` holds the
/// product on the vector backends, whose loops write their outputs
/// rather than accumulate into them.
pub(crate) fn mul_add(
    backend: Backend,
    c: u8,
    input: &[u8],
    out: &mut [u8],
    scratch: &mut Vec<u8>,
) {
    match c {
        0 => {}
        1 => xor_into(out, input),
        _ => {
            scratch.clear();
            scratch.resize(out.len(), 0);
            dot_prod(backend, &[&[c][..]], &[input], &mut [&mut scratch[..]]);
            xor_into(out, scratch);
        }
    }
}

/// `data = c * data`.
pub(crate) fn scale(backend: Backend, c: u8, data: &mut [u8], scratch: &mut Vec<u8>) {
    if c == 1 {
        return;
    }
    scratch.clear();
    scratch.extend_from_slice(data);
    dot_prod(backend, &[&[c][..]], &[&scratch[..]], &mut [data]);
}
