//! The backends a code can run its multiply-accumulate loop on, and which
//! of them this CPU has.

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
