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
    /// x86-64 SSSE3 `pshufb` on 16-byte vectors, split-nibble tables.
    Ssse3,
    /// x86-64 AVX2 `vpshufb` on 32-byte vectors, split-nibble tables.
    Avx2,
    /// x86-64 AVX-512BW + GFNI: one `vgf2p8affineqb` per 64 bytes and
    /// constant.
    Avx512Gfni,
}

impl Backend {
    /// Every backend, slowest first.
    pub const ALL: [Backend; 4] = [
        Backend::Scalar,
        Backend::Ssse3,
        Backend::Avx2,
        Backend::Avx512Gfni,
    ];

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
            #[cfg(target_arch = "x86_64")]
            Backend::Ssse3 => std::arch::is_x86_feature_detected!("ssse3"),
            #[cfg(target_arch = "x86_64")]
            Backend::Avx2 => std::arch::is_x86_feature_detected!("avx2"),
            #[cfg(target_arch = "x86_64")]
            Backend::Avx512Gfni => {
                std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512bw")
                    && std::arch::is_x86_feature_detected!("gfni")
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }
}

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
