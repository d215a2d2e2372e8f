//! Bit errors: which bits of a packet a bit-error model flips.

use rand::Rng;

/// The bits a bit-error model flipped in one packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BitErrors {
    pub(super) positions: Vec<u32>,
}

impl BitErrors {
    /// Bit offsets from the start of the packet, ascending, each less than
    /// `8 * len`. Bit `i` is bit `7 - i % 8` (most significant first) of
    /// byte `i / 8`.
    pub fn positions(&self) -> &[u32] {
        &self.positions
    }

    /// Number of flipped bits (at least one, except after [`BitErrors::merged`]).
    pub fn count(&self) -> usize {
        self.positions.len()
    }

    /// The combined effect of these errors followed by `other` on the same
    /// packet (e.g. on two hops): a bit flipped twice is intact again, so
    /// this is the symmetric difference of the positions, still ascending.
    /// Empty if the second hop undid every flip of the first.
    #[must_use]
    pub fn merged(&self, other: &Self) -> Self {
        let (a, b) = (&self.positions, &other.positions);
        let mut positions = Vec::with_capacity(a.len() + b.len());
        let (mut i, mut j) = (0, 0);
        while i < a.len() && j < b.len() {
            match a[i].cmp(&b[j]) {
                core::cmp::Ordering::Less => {
                    positions.push(a[i]);
                    i += 1;
                }
                core::cmp::Ordering::Greater => {
                    positions.push(b[j]);
                    j += 1;
                }
                core::cmp::Ordering::Equal => {
                    i += 1;
                    j += 1;
                }
            }
        }
        positions.extend_from_slice(&a[i..]);
        positions.extend_from_slice(&b[j..]);
        Self { positions }
    }

    /// Flips the reported bits in `packet` (bits past its end are ignored).
    pub fn apply(&self, packet: &mut [u8]) {
        for &pos in &self.positions {
            if let Some(byte) = packet.get_mut(pos as usize / 8) {
                *byte ^= 0x80 >> (pos % 8);
            }
        }
    }
}

/// Independent bit errors at one rate, sampled by geometric skips: one
/// random draw per flipped bit plus one, not one per bit.
#[derive(Debug, Clone, Copy)]
pub(super) enum BitChannel {
    Clean,
    /// Every bit flipped (a bit error rate of 1).
    Inverting,
    /// `ln(1 - b)`, negative and finite.
    Noisy {
        ln_keep: f64,
    },
}

impl BitChannel {
    pub(super) fn new(b: f64) -> Self {
        if b <= 0.0 {
            Self::Clean
        } else if b >= 1.0 {
            Self::Inverting
        } else {
            Self::Noisy {
                ln_keep: (-b).ln_1p(),
            }
        }
    }

    /// The flipped bits of a packet of `len` bytes, or `None` if it is intact.
    pub(super) fn errors<R: Rng + ?Sized>(self, len: usize, rng: &mut R) -> Option<BitErrors> {
        let bits = packet_bits(len);
        if bits == 0 {
            return None;
        }
        match self {
            Self::Clean => None,
            Self::Inverting => Some(BitErrors {
                positions: (0..bits).map(|b| b as u32).collect(),
            }),
            Self::Noisy { ln_keep } => {
                // The number of intact bits before the next error is
                // geometric: P(skip >= k) = (1 - b)^k = P(U <= (1 - b)^k)
                // for U uniform on (0, 1], so skip = floor(ln U / ln(1 - b)).
                let mut skip = || {
                    let u = 1.0 - rng.random::<f64>();
                    // Saturating float-to-int cast: a huge skip means "no more errors".
                    (u.ln() / ln_keep) as u64
                };
                let mut pos = skip();
                if pos >= bits {
                    return None;
                }
                let mut positions = Vec::new();
                while pos < bits {
                    positions.push(pos as u32);
                    pos = pos.saturating_add(1).saturating_add(skip());
                }
                Some(BitErrors { positions })
            }
        }
    }
}

/// Bits in a packet of `len` bytes, capped so bit offsets fit in `u32`.
pub(super) fn packet_bits(len: usize) -> u64 {
    (len as u64).saturating_mul(8).min(u64::from(u32::MAX))
}
