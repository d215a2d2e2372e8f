//! The one hot loop: `outputs[r] = sum_i rows[r][i] * inputs[i]` over
//! GF(2^8), byte by byte (a "dot product" per output, as ISA-L's
//! `gf_vect_dot_prod` calls it), with the backend chosen at run time.

use crate::gf;

/// Which implementation of the GF(2^8) multiply-accumulate loop a code uses.
///
/// [`Backend::detect`] picks the fastest one this CPU has; a code can be
/// forced onto another (for tests and benchmarks) with
/// [`ReedSolomon::with_backend`](crate::ReedSolomon::with_backend). Every
/// backend computes the same bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Backend {
    /// Portable: one 256-byte row of a 64 KiB product table per constant.
    Scalar,
}

impl Backend {
    /// Every backend, slowest first.
    pub const ALL: [Backend; 1] = [Backend::Scalar];

    /// The fastest backend this CPU supports.
    pub fn detect() -> Backend {
        Backend::ALL
            .into_iter()
            .rev()
            .find(|b| b.is_available())
            .unwrap_or(Backend::Scalar)
    }

    /// Whether this CPU can run the backend.
    pub fn is_available(self) -> bool {
        match self {
            Backend::Scalar => true,
        }
    }
}

/// `outputs[r][b] = sum_i rows[r][i] * inputs[i][b]` for every byte `b`.
///
/// The caller guarantees: `rows.len() == outputs.len()`, every row has
/// `inputs.len()` coefficients, every input and output has the same length,
/// and `backend.is_available()`.
pub(crate) fn dot_prod(
    backend: Backend,
    rows: &[&[u8]],
    inputs: &[&[u8]],
    outputs: &mut [&mut [u8]],
) {
    debug_assert_eq!(rows.len(), outputs.len());
    debug_assert!(rows.iter().all(|r| r.len() == inputs.len()));
    match backend {
        Backend::Scalar => dot_prod_scalar(rows, inputs, outputs),
    }
}

/// The portable loop, also the tail of the vector ones.
pub(crate) fn dot_prod_scalar(rows: &[&[u8]], inputs: &[&[u8]], outputs: &mut [&mut [u8]]) {
    for (row, out) in rows.iter().zip(outputs.iter_mut()) {
        out.fill(0);
        for (&c, input) in row.iter().zip(inputs) {
            mul_add_scalar(c, input, out);
        }
    }
}

/// `out ^= c * input`.
fn mul_add_scalar(c: u8, input: &[u8], out: &mut [u8]) {
    match c {
        0 => {}
        1 => out.iter_mut().zip(input).for_each(|(o, &x)| *o ^= x),
        _ => {
            let t = &gf::MUL[c as usize];
            out.iter_mut()
                .zip(input)
                .for_each(|(o, &x)| *o ^= t[x as usize]);
        }
    }
}
