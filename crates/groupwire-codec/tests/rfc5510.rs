//! Wire compatibility with RFC 5510's Reed-Solomon scheme over GF(2^8):
//! repair symbols are `s * GM` for its generator matrix, computed here
//! from scratch (bitwise field arithmetic, a literal Vandermonde matrix
//! and a Gauss-Jordan inverse) independently of the crate's tables.

use groupwire_codec::ReedSolomon;

/// RFC 5510's field: polynomial x^8 + x^4 + x^3 + x^2 + 1.
fn mul(mut a: u8, mut b: u8) -> u8 {
    let mut r = 0;
    while b != 0 {
        if b & 1 != 0 {
            r ^= a;
        }
        let carry = a & 0x80 != 0;
        a <<= 1;
        if carry {
            a ^= 0x1D;
        }
        b >>= 1;
    }
    r
}

fn pow(a: u8, e: usize) -> u8 {
    (0..e).fold(1, |p, _| mul(p, a))
}

fn inv(a: u8) -> u8 {
    (1..=255u8)
        .find(|&b| mul(a, b) == 1)
        .expect("non-zero has an inverse")
}

/// GM = V_{k,k}^-1 * V_{k,n}, V[i][j] = alpha^(i*j), alpha = 2; row-major k*n.
fn generator(k: usize, n: usize) -> Vec<Vec<u8>> {
    let v: Vec<Vec<u8>> = (0..k)
        .map(|i| (0..n).map(|j| pow(2, i * j)).collect())
        .collect();
    // Invert the left k*k block by Gauss-Jordan on [V_kk | I].
    let mut a: Vec<Vec<u8>> = (0..k)
        .map(|i| {
            v[i][..k]
                .iter()
                .copied()
                .chain((0..k).map(|j| u8::from(i == j)))
                .collect()
        })
        .collect();
    for c in 0..k {
        let p = (c..k).find(|&r| a[r][c] != 0).expect("invertible");
        a.swap(p, c);
        let f = inv(a[c][c]);
        a[c].iter_mut().for_each(|x| *x = mul(*x, f));
        for r in 0..k {
            if r != c && a[r][c] != 0 {
                let f = a[r][c];
                let pivot = a[c].clone();
                a[r].iter_mut()
                    .zip(&pivot)
                    .for_each(|(x, &y)| *x ^= mul(f, y));
            }
        }
    }
    (0..k)
        .map(|i| {
            (0..n)
                .map(|j| (0..k).fold(0, |s, l| s ^ mul(a[i][k + l], v[l][j])))
                .collect()
        })
        .collect()
}

#[test]
fn repair_symbols_are_rfc5510_encoding_symbols() {
    for (k, m) in [(1, 2), (3, 2), (10, 5), (20, 8)] {
        let n = k + m;
        let gm = generator(k, n);
        let rs = ReedSolomon::new(k, m).expect("valid");
        let sources: Vec<Vec<u8>> = (0..k)
            .map(|i| (0..50).map(|b| (i * 37 + b * 11 + 5) as u8).collect())
            .collect();
        let mut repairs = vec![vec![0u8; 50]; m];
        rs.encode(&sources, &mut repairs).expect("valid");
        for j in 0..n {
            let want: Vec<u8> = (0..50)
                .map(|b| (0..k).fold(0, |s, i| s ^ mul(sources[i][b], gm[i][j])))
                .collect();
            let got = if j < k { &sources[j] } else { &repairs[j - k] };
            assert_eq!(got, &want, "k={k} encoding symbol {j}");
            if j >= k {
                for (i, row) in gm.iter().enumerate() {
                    assert_eq!(rs.coefficient(j - k, i), Some(row[j]));
                }
            }
        }
    }
}

/// Pins the bytes, so a change of matrix or field shows up as a diff.
#[test]
fn golden_repair_bytes() {
    let rs = ReedSolomon::new(3, 2).expect("valid");
    let mut repairs = [[0u8; 4]; 2];
    rs.encode(&[*b"abcd", *b"efgh", *b"ijkl"], &mut repairs)
        .expect("valid");
    let gm = generator(3, 5);
    let coeffs: Vec<[u8; 3]> = (3..5).map(|j| [gm[0][j], gm[1][j], gm[2][j]]).collect();
    assert_eq!(coeffs, GOLDEN_COEFFS);
    assert_eq!(repairs, GOLDEN_REPAIRS);
}

const GOLDEN_COEFFS: [[u8; 3]; 2] = [[8, 14, 7], [56, 34, 27]];
const GOLDEN_REPAIRS: [[u8; 4]; 2] = [[97, 98, 99, 20], [49, 50, 51, 57]];
