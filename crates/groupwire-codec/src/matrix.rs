//! The generator matrix of RFC 5510's Reed-Solomon code and the small
//! matrix algebra decoding needs.

use crate::gf;

// RFC 5510 §8 (the encoding algorithm, paraphrased, not quoted): the
// k*n generator matrix GM is the systematic form V_{k,k}^-1 * V_{k,n} of
// the Vandermonde matrix V_{k,n} whose element (i, j) is alpha^(i*j),
// alpha the primitive element; encoding symbol j of the source vector s
// is (s * GM)_j, so symbols 0..k are the sources themselves.
//
// Row `i` of `V_{k,k}^-1 * V_{k,n}` maps the source vector `s` to the values
// at `x_j = alpha^j` of the polynomial of degree < k that takes the value
// `s_i` at `x_i`. So column `j` of GM is the Lagrange basis at `x_j`:
//
//   GM[i][j] = L_i(x_j) = prod_{l != i} (x_j - x_l) / (x_i - x_l)
//            = N_j / ((x_j - x_i) * d_i),
//   N_j = prod_{l < k} (x_j - x_l),  d_i = prod_{l != i} (x_i - x_l),
//
// which costs O(k * (k + m)) instead of inverting a k*k matrix, and is
// checked against the literal V^-1 * V product in the tests. Every entry is
// non-zero and every square submatrix of the repair part is invertible (it
// is a Cauchy matrix scaled by rows and columns), which is what makes the
// code MDS. Repair column `j` does not depend on `m`, so codes with the
// same `k` and different `m` agree on their common repair symbols.

/// The repair part of the systematic generator matrix: `m` rows of `k`
/// coefficients, row `j` giving repair symbol `k + j` (its encoding symbol
/// ID in RFC 5510) as `sum_i coeffs[j * k + i] * source_i`.
pub(crate) fn repair_matrix(k: usize, m: usize) -> Vec<u8> {
    let x = |t: usize| gf::exp(t);
    // 1 / d_i
    let inv_d: Vec<u8> = (0..k)
        .map(|i| {
            let d = (0..k)
                .filter(|&l| l != i)
                .fold(1, |p, l| gf::mul(p, x(i) ^ x(l)));
            gf::inv(d).expect("distinct powers of a primitive element differ")
        })
        .collect();
    let mut out = Vec::with_capacity(k * m);
    for j in k..k + m {
        let n = (0..k).fold(1, |p, l| gf::mul(p, x(j) ^ x(l)));
        for (i, &inv_di) in inv_d.iter().enumerate() {
            let den = gf::inv(x(j) ^ x(i)).expect("alpha^j != alpha^i for i < k <= j < 255");
            out.push(gf::mul(n, gf::mul(den, inv_di)));
        }
    }
    out
}

/// Inverts the `n`*`n` row-major matrix `a` in place by Gauss-Jordan
/// elimination; `None` if it is singular (never for submatrices of the
/// repair matrix, but the caller turns it into an error, not a panic).
pub(crate) fn invert(a: &mut [u8], n: usize) -> Option<()> {
    debug_assert_eq!(a.len(), n * n);
    let mut inv = vec![0u8; n * n];
    for i in 0..n {
        inv[i * n + i] = 1;
    }
    for col in 0..n {
        let pivot = (col..n).find(|&r| a[r * n + col] != 0)?;
        if pivot != col {
            for c in 0..n {
                a.swap(pivot * n + c, col * n + c);
                inv.swap(pivot * n + c, col * n + c);
            }
        }
        let p = gf::inv(a[col * n + col])?;
        for c in 0..n {
            a[col * n + c] = gf::mul(a[col * n + c], p);
            inv[col * n + c] = gf::mul(inv[col * n + c], p);
        }
        for r in 0..n {
            let f = a[r * n + col];
            if r == col || f == 0 {
                continue;
            }
            for c in 0..n {
                a[r * n + c] ^= gf::mul(f, a[col * n + c]);
                inv[r * n + c] ^= gf::mul(f, inv[col * n + c]);
            }
        }
    }
    a.copy_from_slice(&inv);
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 5510's construction taken literally: build V_{k,n}, invert its
    /// first k columns, multiply.
    fn rfc5510_generator(k: usize, n: usize) -> Vec<u8> {
        let v = |i: usize, j: usize| gf::exp(i * j);
        let mut vkk: Vec<u8> = (0..k).flat_map(|i| (0..k).map(move |j| v(i, j))).collect();
        invert(&mut vkk, k).expect("Vandermonde on distinct points is invertible");
        let mut gm = vec![0u8; k * n];
        for i in 0..k {
            for j in 0..n {
                gm[i * n + j] = (0..k).fold(0, |s, l| s ^ gf::mul(vkk[i * k + l], v(l, j)));
            }
        }
        gm
    }

    #[test]
    fn repair_matrix_is_rfc5510_generator() {
        for (k, m) in [
            (1, 1),
            (2, 1),
            (3, 4),
            (5, 3),
            (20, 8),
            (20, 60),
            (64, 64),
            (170, 85),
            (254, 1),
        ] {
            let gm = rfc5510_generator(k, k + m);
            let n = k + m;
            for i in 0..k {
                for j in 0..k {
                    assert_eq!(
                        gm[i * n + j],
                        u8::from(i == j),
                        "not systematic at ({i},{j})"
                    );
                }
            }
            let r = repair_matrix(k, m);
            for j in 0..m {
                for i in 0..k {
                    assert_eq!(
                        r[j * k + i],
                        gm[i * n + k + j],
                        "k={k} m={m} repair {j} source {i}"
                    );
                }
            }
        }
    }

    #[test]
    fn invert_round_trips() {
        let a: Vec<u8> = vec![3, 7, 1, 9, 2, 5, 4, 4, 8];
        let mut b = a.clone();
        invert(&mut b, 3).expect("invertible");
        for i in 0..3 {
            for j in 0..3 {
                let s = (0..3).fold(0, |s, l| s ^ gf::mul(a[i * 3 + l], b[l * 3 + j]));
                assert_eq!(s, u8::from(i == j));
            }
        }
        let mut singular = vec![1, 2, 1, 2];
        assert!(invert(&mut singular, 2).is_none());
    }
}
