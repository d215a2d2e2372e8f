//! Arithmetic in GF(2^8) with the primitive polynomial
//! x^8 + x^4 + x^3 + x^2 + 1 (0x11D), and the tables every backend uses.
//!
//! All tables are built at compile time, so there is no initialisation and
//! nothing to share between threads.

// RFC 5510 §8 (the finite field, paraphrased): for m = 8 the field is
// built from the primitive polynomial x^8 + x^4 + x^3 + x^2 + 1.
/// The field's reduction polynomial, with the x^8 bit.
pub(crate) const POLY: u16 = 0x11D;

/// `EXP[i] = alpha^i` for `i` in `0..510`, so `EXP[log a + log b]` needs no
/// reduction modulo 255. `alpha` is the element `x` (the byte 2).
pub(crate) static EXP: [u8; 512] = build_exp();
/// `LOG[a]` for `a != 0`; `LOG[0]` is unused (0).
pub(crate) static LOG: [u8; 256] = build_log();
/// `MUL[a][b] = a * b`: the scalar backend's table (64 KiB, one 256-byte row
/// per constant, so a multiply-accumulate by a constant touches one row).
pub(crate) static MUL: [[u8; 256]; 256] = build_mul();
/// Split-nibble tables for the shuffle backends: `NIBBLE[c][n] = c * n` and
/// `NIBBLE[c][16 + n] = c * (n << 4)` for `n < 16`, so
/// `c * x = NIBBLE[c][x & 15] ^ NIBBLE[c][16 + (x >> 4)]`.
pub(crate) static NIBBLE: [[u8; 32]; 256] = build_nibble();
/// GF(2)-affine bit matrices for `gf2p8affineqb`: multiplying by `c` is a
/// linear map on the 8 bits of a byte, whatever the field polynomial, so
/// the GFNI instruction computes our field's product in one step.
pub(crate) static AFFINE: [u64; 256] = build_affine();

/// `a * b` in the field.
#[inline]
pub(crate) fn mul(a: u8, b: u8) -> u8 {
    MUL[a as usize][b as usize]
}

/// `1 / a`, or `None` for zero.
#[inline]
pub(crate) fn inv(a: u8) -> Option<u8> {
    (a != 0).then(|| EXP[255 - LOG[a as usize] as usize])
}

/// `alpha^e`.
#[inline]
pub(crate) fn exp(e: usize) -> u8 {
    EXP[e % 255]
}

/// Carry-less multiply and reduce; used only to build the tables.
const fn mul_slow(a: u8, b: u8) -> u8 {
    let (mut a, mut b, mut r) = (a as u16, b, 0u16);
    while b != 0 {
        if b & 1 != 0 {
            r ^= a;
        }
        a <<= 1;
        if a & 0x100 != 0 {
            a ^= POLY;
        }
        b >>= 1;
    }
    r as u8
}

const fn build_exp() -> [u8; 512] {
    let mut t = [0u8; 512];
    let mut x = 1u8;
    let mut i = 0;
    while i < 512 {
        t[i] = x;
        x = mul_slow(x, 2);
        i += 1;
    }
    t
}

const fn build_log() -> [u8; 256] {
    let exp = build_exp();
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 255 {
        t[exp[i] as usize] = i as u8;
        i += 1;
    }
    t
}

const fn build_mul() -> [[u8; 256]; 256] {
    let exp = build_exp();
    let log = build_log();
    let mut t = [[0u8; 256]; 256];
    let mut a = 1;
    while a < 256 {
        let mut b = 1;
        while b < 256 {
            t[a][b] = exp[log[a] as usize + log[b] as usize];
            b += 1;
        }
        a += 1;
    }
    t
}

const fn build_nibble() -> [[u8; 32]; 256] {
    let mut t = [[0u8; 32]; 256];
    let mut c = 0;
    while c < 256 {
        let mut n = 0;
        while n < 16 {
            t[c][n] = mul_slow(c as u8, n as u8);
            t[c][16 + n] = mul_slow(c as u8, (n << 4) as u8);
            n += 1;
        }
        c += 1;
    }
    t
}

/// Row `i` of the matrix (bit `j` set when bit `i` of `c * 2^j` is set) goes
/// in byte `7 - i` of the qword, as `gf2p8affineqb` reads it (Intel SDM,
/// GF2P8AFFINEQB: result bit `i` is the parity of `A.byte[7 - i] & x`).
const fn build_affine() -> [u64; 256] {
    let mut t = [0u64; 256];
    let mut c = 0;
    while c < 256 {
        let mut q = 0u64;
        let mut i = 0;
        while i < 8 {
            let mut row = 0u64;
            let mut j = 0;
            while j < 8 {
                if (mul_slow(c as u8, 1 << j) >> i) & 1 != 0 {
                    row |= 1 << j;
                }
                j += 1;
            }
            q |= row << (8 * (7 - i));
            i += 1;
        }
        t[c] = q;
        c += 1;
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_agree_with_carryless_multiply() {
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                let p = mul_slow(a, b);
                assert_eq!(mul(a, b), p);
                assert_eq!(
                    NIBBLE[a as usize][(b & 15) as usize]
                        ^ NIBBLE[a as usize][16 + (b >> 4) as usize],
                    p
                );
            }
        }
    }

    #[test]
    fn alpha_is_primitive_and_inverses_hold() {
        let mut seen = [false; 256];
        for e in 0..255 {
            assert!(!seen[exp(e) as usize], "alpha^{e} repeats");
            seen[exp(e) as usize] = true;
        }
        assert_eq!(inv(0), None);
        for a in 1..=255u8 {
            assert_eq!(mul(a, inv(a).expect("nonzero")), 1);
        }
    }
}
