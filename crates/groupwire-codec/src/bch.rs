//! Binary BCH codes of length 127: the link-layer FEC of Miyoshi et al.
//! ("Adaptive FEC with ELN for TCP over bursty wireless links").
//!
//! A [`Bch`] code is a primitive narrow-sense binary BCH code over
//! GF(2^7): `n = 127` bits per codeword, `k` message bits, and it corrects
//! any `t` bit errors in a codeword. The paper switches between three of
//! them, (127, 92) with t = 5, (127, 64) with t = 10 and (127, 36) with
//! t = 15 ([`Bch::paper_codes`]); [`Bch::new`] builds any designed `t`
//! from 1 to 31. The generator polynomial is the least common multiple of
//! the minimal polynomials of α, α², …, α^(2t), so `k` follows from `t`
//! as in the standard tables (t = 8 and t = 9 share one code, k = 71).
//!
//! - **Encoding** is systematic: the message occupies the codeword's high
//!   `k` bits, the remainder of `message · x^(n-k)` modulo the generator
//!   its low `n - k` bits.
//! - **Decoding** computes the syndromes S₁ … S₂ₜ (from the remainder
//!   modulo the generator, which is zero exactly for codewords), finds the
//!   error-locator polynomial by Berlekamp-Massey and its roots by a Chien
//!   search. A received word farther than `t` from every codeword is
//!   reported [`Uncorrectable`] whenever the decoder can tell: a locator
//!   of degree above `t`, fewer roots than its degree, or a corrected word
//!   that is not a codeword. (A word that lands within `t` of another
//!   codeword is miscorrected, silently: no decoder can tell that case
//!   from a correctable one. Its rate is measured in `tests/bch.rs`.)
//!
//! Codewords are `u128`: bit `i` is the coefficient of `x^i`.
//!
//! **Packets.** A packet of `L` bits travels in `ceil(L / k)` codewords
//! ([`Bch::encode_packet`]): bits in order, most significant bit of each
//! byte first, `k` to a codeword. The last codeword is *shortened*: its
//! `r = L - (q - 1)·k` bits are its message's low bits and the `k - r`
//! message bits above them are zero, known to both ends and not sent, so
//! a packet costs `L + q·(n - k)` bits on the wire
//! ([`Bch::wire_bits`]). A decoder that "corrects" a padding bit has
//! miscorrected, and says so.

use std::fmt;

/// Codeword length: 2^7 - 1.
pub const BCH_N: usize = 127;

/// The field's polynomial, x^7 + x^3 + 1 (primitive: α = x generates all
/// 127 non-zero elements; a unit test checks it).
const PRIMITIVE: u16 = 0x89;

/// log/antilog tables of GF(2^7): `EXP[i] = α^i` for `i` in `0..254`
/// (twice round, so a sum of two logs needs no reduction), `LOG[x]` for
/// `x` in `1..128`.
const fn tables() -> ([u8; 2 * BCH_N], [u8; BCH_N + 1]) {
    let mut exp = [0u8; 2 * BCH_N];
    let mut log = [0u8; BCH_N + 1];
    let mut x: u16 = 1;
    let mut i = 0;
    while i < BCH_N {
        exp[i] = x as u8;
        exp[i + BCH_N] = x as u8;
        log[x as usize] = i as u8;
        x <<= 1;
        if x & 0x80 != 0 {
            x ^= PRIMITIVE;
        }
        i += 1;
    }
    (exp, log)
}

const TABLES: ([u8; 2 * BCH_N], [u8; BCH_N + 1]) = tables();
const EXP: [u8; 2 * BCH_N] = TABLES.0;
const LOG: [u8; BCH_N + 1] = TABLES.1;

/// Logarithms with a sentinel for zero, for branchless products in the
/// hot loops: `LOG_Z[0] = 254`, so any sum involving it lands in the zero
/// half of [`EXP_Z`].
const LOG_Z: [u16; BCH_N + 1] = {
    let mut t = [0u16; BCH_N + 1];
    t[0] = 2 * BCH_N as u16;
    let mut x = 1;
    while x <= BCH_N {
        t[x] = LOG[x] as u16;
        x += 1;
    }
    t
};

/// `EXP_Z[i] = α^i` for `i < 254`, zero from 254 on (a logarithm sum that
/// involved the zero sentinel).
const EXP_Z: [u8; 4 * BCH_N + 1] = {
    let mut t = [0u8; 4 * BCH_N + 1];
    let mut i = 0;
    while i < 2 * BCH_N {
        t[i] = EXP[i];
        i += 1;
    }
    t
};

fn mul(a: u8, b: u8) -> u8 {
    if a == 0 || b == 0 {
        0
    } else {
        EXP[usize::from(LOG[usize::from(a)]) + usize::from(LOG[usize::from(b)])]
    }
}

fn div(a: u8, b: u8) -> u8 {
    debug_assert!(b != 0, "division by zero in GF(2^7)");
    if a == 0 {
        0
    } else {
        EXP[usize::from(LOG[usize::from(a)]) + BCH_N - usize::from(LOG[usize::from(b)])]
    }
}

/// α^e for any exponent.
fn alpha_pow(e: usize) -> u8 {
    EXP[e % BCH_N]
}

/// The largest designed `t` with a non-trivial code (k = 8).
pub const BCH_MAX_T: usize = 31;

/// Why a code cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BchError {
    /// `t` is 0 or leaves no message bits.
    #[error("a BCH(127, k) code corrects 1 to {BCH_MAX_T} bit errors, not {0}")]
    BadT(usize),
}

/// The received word is farther than `t` bit errors from every codeword
/// (as far as the decoder can tell).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("uncorrectable: more bit errors than the code corrects")]
pub struct Uncorrectable;

/// A decoded codeword.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decoded {
    /// The message bits (the codeword's high `k` bits).
    pub message: u128,
    /// Bits the decoder flipped.
    pub corrected: u32,
}

/// A binary BCH(127, k) code correcting `t` bit errors per codeword.
#[derive(Clone, PartialEq, Eq)]
pub struct Bch {
    t: usize,
    k: usize,
    /// The generator polynomial, degree `n - k`.
    generator: u128,
    /// `REDUCE[b] = (b · x^(n-k)) mod g` for every byte `b`: the remainder
    /// goes eight bits a step, as a table-driven CRC does.
    reduce: Box<[u128; 256]>,
}

impl fmt::Debug for Bch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BCH(127, {}) t={}", self.k, self.t)
    }
}

impl Bch {
    /// The code with designed error-correcting capability `t` (1 to
    /// [`BCH_MAX_T`]).
    pub fn new(t: usize) -> Result<Self, BchError> {
        if !(1..=BCH_MAX_T).contains(&t) {
            return Err(BchError::BadT(t));
        }
        // Cyclotomic cosets of 1..=2t under doubling mod 127: each gives
        // one minimal polynomial; the generator is their product.
        let mut covered = [false; BCH_N];
        let mut generator: u128 = 1;
        for i in 1..=2 * t {
            if covered[i] {
                continue;
            }
            let mut coset = Vec::new();
            let mut c = i;
            while !covered[c] {
                covered[c] = true;
                coset.push(c);
                c = (2 * c) % BCH_N;
            }
            generator = clmul(generator, minimal_polynomial(&coset));
        }
        let degree = 127 - generator.leading_zeros() as usize;
        let mut code = Self {
            t,
            k: BCH_N - degree,
            generator,
            reduce: Box::new([0; 256]),
        };
        for b in 0..256u128 {
            code.reduce[b as usize] = code.remainder_bitwise(b << degree);
        }
        Ok(code)
    }

    /// The paper's three codes (Miyoshi et al. §3): (127, 92) t = 5,
    /// (127, 64) t = 10 and (127, 36) t = 15, weakest first.
    pub fn paper_codes() -> [Self; 3] {
        [5, 10, 15].map(|t| Self::new(t).expect("t in range"))
    }

    /// Bits per codeword: 127.
    pub fn n(&self) -> usize {
        BCH_N
    }

    /// Message bits per codeword.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Bit errors per codeword it corrects.
    pub fn t(&self) -> usize {
        self.t
    }

    /// Parity bits per codeword, `n - k`.
    pub fn parity_bits(&self) -> usize {
        BCH_N - self.k
    }

    /// The generator polynomial (bit `i` = coefficient of `x^i`).
    pub fn generator(&self) -> u128 {
        self.generator
    }

    /// The codeword of `message` (its low `k` bits; higher bits are
    /// ignored).
    pub fn encode(&self, message: u128) -> u128 {
        let shifted = (message & mask(self.k)) << self.parity_bits();
        shifted | self.remainder(shifted)
    }

    /// Decodes a received 127-bit word (bit 127 is ignored).
    pub fn decode(&self, received: u128) -> Result<Decoded, Uncorrectable> {
        let received = received & mask(BCH_N);
        let rem = self.remainder(received);
        if rem == 0 {
            return Ok(Decoded {
                message: received >> self.parity_bits(),
                corrected: 0,
            });
        }
        // r = q·g + rem and g(α^j) = 0 for j in 1..=2t: the syndromes of r
        // are those of the remainder, a polynomial of lower degree. For a
        // binary word S₂ⱼ = Sⱼ², so only the odd ones are summed.
        let two_t = 2 * self.t;
        let mut s = [0u8; 2 * BCH_MAX_T];
        // S_j = rem(α^j) = Σ_m α^(8mj)·B_m(α^j) over the remainder's bytes
        // B_m: one precomputed row per (byte position, byte value) holds
        // that term for every odd j, so the odd syndromes are the XOR of
        // one 32-byte row per byte.
        let table = syndrome_table();
        let bytes = rem.to_le_bytes();
        let top = (128 - rem.leading_zeros() as usize).div_ceil(8);
        let mut odd = [0u128; 2];
        for (m, &b) in bytes[..top].iter().enumerate() {
            let row = &table[m * 256 + usize::from(b)];
            odd[0] ^= row[0];
            odd[1] ^= row[1];
        }
        let (low, high) = (odd[0].to_le_bytes(), odd[1].to_le_bytes());
        for (q, &v) in low.iter().chain(&high).enumerate().take(self.t) {
            s[2 * q] = v;
        }
        for j in (1..two_t).step_by(2) {
            s[j] = mul(s[j / 2], s[j / 2]);
        }
        let (locator, degree) = berlekamp_massey(&s[..two_t]);
        if degree > self.t {
            return Err(Uncorrectable);
        }
        // One or two errors (most codewords at a low bit error rate): the
        // roots in closed form. More: a Chien search.
        let flips = match small_degree_roots(&locator, degree) {
            Some(flips) => flips?,
            None => chien_search(&locator, degree)?,
        };
        let corrected = received ^ flips;
        if self.remainder(corrected) != 0 {
            return Err(Uncorrectable);
        }
        Ok(Decoded {
            message: corrected >> self.parity_bits(),
            corrected: degree as u32,
        })
    }

    /// `word mod g(x)`: eight bits a step through the table while at least
    /// eight bits lie above the parity, then bit by bit.
    fn remainder(&self, word: u128) -> u128 {
        let p = self.parity_bits();
        let mut r = word;
        let mut top = BCH_N; // bits at and above `top` are clear
        while top >= p + 8 {
            let j = top - 8;
            let b = (r >> j) & 0xff;
            r &= !(0xff << j);
            r ^= self.reduce[b as usize] << (j - p);
            top = j;
        }
        for i in (p..top).rev() {
            if r >> i & 1 == 1 {
                r ^= self.generator << (i - p);
            }
        }
        r
    }

    /// `word mod g(x)`, by long division from bit 126 down (builds the
    /// table; the reference the table-driven one is tested against).
    fn remainder_bitwise(&self, word: u128) -> u128 {
        let p = self.parity_bits();
        let mut r = word;
        for i in (p..BCH_N).rev() {
            if r >> i & 1 == 1 {
                r ^= self.generator << (i - p);
            }
        }
        r
    }

    /// Codewords for a packet of `bits` bits: `ceil(bits / k)`.
    pub fn codewords(&self, bits: usize) -> usize {
        bits.div_ceil(self.k)
    }

    /// Bits a packet of `bits` bits costs on the wire: its own bits plus
    /// `n - k` parity bits per codeword (the last codeword is shortened).
    pub fn wire_bits(&self, bits: usize) -> usize {
        bits + self.codewords(bits) * self.parity_bits()
    }

    /// The codewords of `data` (see the module docs for the bit order and
    /// the shortened last codeword).
    pub fn encode_packet(&self, data: &[u8]) -> Vec<u128> {
        let bits = data.len() * 8;
        (0..self.codewords(bits))
            .map(|c| {
                let (from, to) = (c * self.k, ((c + 1) * self.k).min(bits));
                self.encode(read_bits(data, from, to))
            })
            .collect()
    }

    /// Whether a packet of `bits` data bits survives the channel that
    /// flipped the wire bits at `errors` (offsets from the start of the
    /// packet on the wire, in any order; offsets past [`Bch::wire_bits`]
    /// are ignored). Returns the bits the decoder corrected, or
    /// [`Uncorrectable`] when any codeword fails to decode *or decodes to
    /// the wrong codeword* (a miscorrection, which a frame check would
    /// catch).
    ///
    /// **Wire order.** The codewords go out one after the other, each
    /// from its highest sent bit down: a full codeword's bit 126 first,
    /// the shortened last codeword's bit `r + n - k - 1` first (its zero
    /// padding is not sent).
    ///
    /// **Why the data is not needed.** The code is linear: decoding
    /// `c + e` flips the same bits as decoding `e`, for every codeword
    /// `c`. So this decodes the error pattern alone, as the received
    /// word of the all-zero packet, with the real decoder: a simulator can
    /// carry packets as sizes and still run every codeword through
    /// [`Bch::decode`].
    pub fn decode_errors(&self, bits: usize, errors: &[u32]) -> Result<u32, Uncorrectable> {
        let q = self.codewords(bits);
        if q == 0 {
            return Ok(0);
        }
        let last_len = bits - (q - 1) * self.k + self.parity_bits();
        let len_of = |c: usize| if c + 1 == q { last_len } else { BCH_N };
        let mut words = vec![0u128; q];
        for &w in errors {
            let w = w as usize;
            let (c, offset) = (w / BCH_N, w % BCH_N);
            if c < q && offset < len_of(c) {
                words[c] ^= 1u128 << (len_of(c) - 1 - offset);
            }
        }
        let mut corrected = 0;
        for word in words.into_iter().filter(|&w| w != 0) {
            let d = self.decode(word)?;
            if d.message != 0 {
                return Err(Uncorrectable);
            }
            corrected += d.corrected;
        }
        Ok(corrected)
    }

    /// Decodes the codewords of a packet of `len` bytes into `out`
    /// (cleared first); returns the bits corrected. Fails if any codeword
    /// is uncorrectable, if a shortened codeword's padding decodes to
    /// anything but zeros, or if `words` is not the packet's count.
    pub fn decode_packet(
        &self,
        words: &[u128],
        len: usize,
        out: &mut Vec<u8>,
    ) -> Result<u32, Uncorrectable> {
        let bits = len * 8;
        if words.len() != self.codewords(bits) {
            return Err(Uncorrectable);
        }
        out.clear();
        out.resize(len, 0);
        let mut corrected = 0;
        for (c, &w) in words.iter().enumerate() {
            let d = self.decode(w)?;
            let (from, to) = (c * self.k, ((c + 1) * self.k).min(bits));
            if d.message >> (to - from) != 0 {
                return Err(Uncorrectable);
            }
            write_bits(out, from, to, d.message);
            corrected += d.corrected;
        }
        Ok(corrected)
    }
}

/// The low `bits` bits set.
fn mask(bits: usize) -> u128 {
    if bits >= 128 {
        u128::MAX
    } else {
        (1u128 << bits) - 1
    }
}

/// Bits `from..to` of `data` (most significant bit of each byte first) as
/// an integer, the first bit most significant.
fn read_bits(data: &[u8], from: usize, to: usize) -> u128 {
    (from..to).fold(0u128, |acc, b| {
        (acc << 1) | u128::from(data[b / 8] >> (7 - b % 8) & 1)
    })
}

/// The inverse of [`read_bits`]: writes `value`'s low `to - from` bits.
fn write_bits(data: &mut [u8], from: usize, to: usize, value: u128) {
    for (j, b) in (from..to).enumerate() {
        let bit = (value >> (to - from - 1 - j)) & 1;
        data[b / 8] |= (bit as u8) << (7 - b % 8);
    }
}

/// `QUADRATIC[c]`: a `y` with `y² + y = c` in GF(2^7), or 0 when there is
/// none (then `y = 0` solves only `c = 0`, which callers rule out).
const QUADRATIC: [u8; BCH_N + 1] = {
    let mut table = [0u8; BCH_N + 1];
    let mut y = 1;
    while y <= BCH_N {
        // y² + y, by the tables (const: no closures).
        let sq = EXP[2 * LOG[y] as usize];
        let c = (sq ^ y as u8) as usize;
        if c != 0 && table[c] == 0 {
            table[c] = y as u8;
        }
        y += 1;
    }
    table
};

/// The error positions of a locator of degree 1 or 2, as bits, found in
/// closed form; `None` for other degrees (use a Chien search), `Some(Err)`
/// when the locator has no such roots. Degree 1: Λ(x) = 1 + Λ₁x has its
/// root at α^(-p) for Λ₁ = α^p. Degree 2: with x = (Λ₁/Λ₂)·y the equation
/// becomes y² + y = Λ₂/Λ₁², solved by table; the roots are y and y + 1.
fn small_degree_roots(locator: &[u8], degree: usize) -> Option<Result<u128, Uncorrectable>> {
    let position = |x: u8| (BCH_N - usize::from(LOG[usize::from(x)])) % BCH_N;
    match degree {
        1 => Some(Ok(1u128 << LOG[usize::from(locator[1])])),
        2 => {
            let (l1, l2) = (locator[1], locator[2]);
            if l1 == 0 {
                // A double root: not two distinct error positions.
                return Some(Err(Uncorrectable));
            }
            let c = div(l2, mul(l1, l1));
            let y = QUADRATIC[usize::from(c)];
            if y == 0 {
                return Some(Err(Uncorrectable));
            }
            let scale = div(l1, l2);
            let (x1, x2) = (mul(scale, y), mul(scale, y ^ 1));
            Some(Ok(1u128 << position(x1) | 1u128 << position(x2)))
        }
        _ => None,
    }
}

/// `SYNDROME_BYTE[q][b]`: the byte `b` read as a polynomial (bit `k` the
/// coefficient of x^k) evaluated at α^j, for odd `j = 2q + 1`.
const SYNDROME_BYTE: [[u8; 256]; BCH_MAX_T] = {
    let mut t = [[0u8; 256]; BCH_MAX_T];
    let mut q = 0;
    while q < BCH_MAX_T {
        let j = 2 * q + 1;
        let mut b = 0;
        while b < 256 {
            let mut v = 0u8;
            let mut k = 0;
            while k < 8 {
                if b >> k & 1 == 1 {
                    v ^= EXP[(j * k) % BCH_N];
                }
                k += 1;
            }
            t[q][b] = v;
            b += 1;
        }
        q += 1;
    }
    t
};

/// The odd-syndrome rows, built once (128 KiB) on first use: row
/// `m·256 + b`, as 32 little-endian bytes, holds `α^(8mj)·SYNDROME_BYTE[q][b]`
/// in byte `q` for odd `j = 2q + 1` (byte 31 unused): the contribution of
/// byte value `b` at byte position `m` of a word to each odd syndrome.
fn syndrome_table() -> &'static [[u128; 2]] {
    static TABLE: std::sync::OnceLock<Box<[[u128; 2]]>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        let mut rows = vec![[0u128; 2]; 16 * 256];
        for (i, row) in rows.iter_mut().enumerate() {
            let (m, b) = (i / 256, i % 256);
            let mut bytes = [0u8; 32];
            for (q, out) in bytes.iter_mut().enumerate().take(BCH_MAX_T) {
                let shift = alpha_pow(8 * m * (2 * q + 1));
                *out = mul(shift, SYNDROME_BYTE[q][b]);
            }
            let (lo, hi) = bytes.split_at(16);
            *row = [
                u128::from_le_bytes(lo.try_into().expect("16 bytes")),
                u128::from_le_bytes(hi.try_into().expect("16 bytes")),
            ];
        }
        rows.into_boxed_slice()
    })
}

/// `POW_NEG[i - 1][p] = α^(-i·p)` for locator term `i` in `1..=31` and
/// position `p` in `0..127` (lane 127 is padding, never a position).
pub(crate) const POW_NEG: [[u8; 128]; BCH_MAX_T] = {
    let mut t = [[1u8; 128]; BCH_MAX_T];
    let mut i = 0;
    while i < BCH_MAX_T {
        let mut p = 0;
        while p < BCH_N {
            // -(i + 1)·p mod 127, as a non-negative exponent.
            t[i][p] = EXP[(BCH_N - ((i + 1) * p) % BCH_N) % BCH_N];
            p += 1;
        }
        i += 1;
    }
    t
};

/// Split-nibble product tables: `c·x = MUL_LO[c][x & 15] ^ MUL_HI[c][x >> 4]`
/// for `x` in GF(2^7) (high nibble at most 7; the upper half of each
/// `MUL_HI` row is unused), as the Reed-Solomon kernels do in GF(2^8).
pub(crate) const MUL_NIBBLES: ([[u8; 16]; 128], [[u8; 16]; 128]) = {
    const fn gf_mul(a: usize, b: usize) -> u8 {
        if a == 0 || b == 0 {
            0
        } else {
            EXP[LOG[a] as usize + LOG[b] as usize]
        }
    }
    let mut lo = [[0u8; 16]; 128];
    let mut hi = [[0u8; 16]; 128];
    let mut c = 1;
    while c < 128 {
        let mut n = 0;
        while n < 16 {
            lo[c][n] = gf_mul(c, n);
            if n < 8 {
                hi[c][n] = gf_mul(c, n << 4);
            }
            n += 1;
        }
        c += 1;
    }
    (lo, hi)
};

/// The error positions of a locator of degree `degree`, as bits, by a
/// Chien search: an error at bit p makes α^(-p) a root, so bit p is set
/// where Λ(α^(-p)) = 1 + Σᵢ Λᵢ·α^(-i·p) is zero. Term by term over all
/// 127 positions at once: each term adds `Λᵢ · POW_NEG[i - 1]`, a
/// product by a constant done with split-nibble tables, 16 positions per
/// `pshufb` where the CPU has SSSE3. Fails unless exactly `degree` roots
/// exist.
fn chien_search(locator: &[u8], degree: usize) -> Result<u128, Uncorrectable> {
    #[cfg(target_arch = "x86_64")]
    let flips = crate::simd::chien_roots(locator, degree)
        .unwrap_or_else(|| chien_roots_scalar(locator, degree));
    #[cfg(not(target_arch = "x86_64"))]
    let flips = chien_roots_scalar(locator, degree);
    if flips.count_ones() as usize != degree {
        return Err(Uncorrectable);
    }
    Ok(flips)
}

/// The portable Chien search: the same tables, one position at a time.
fn chien_roots_scalar(locator: &[u8], degree: usize) -> u128 {
    let (lo, hi) = &MUL_NIBBLES;
    let mut acc = [1u8; 128];
    for (i, &c) in locator.iter().enumerate().take(degree + 1).skip(1) {
        if c == 0 {
            continue;
        }
        let (lo, hi) = (&lo[usize::from(c)], &hi[usize::from(c)]);
        for (a, &x) in acc.iter_mut().zip(&POW_NEG[i - 1]) {
            *a ^= lo[usize::from(x & 15)] ^ hi[usize::from(x >> 4)];
        }
    }
    acc[..BCH_N]
        .iter()
        .enumerate()
        .filter(|&(_, &v)| v == 0)
        .fold(0u128, |f, (p, _)| f | 1 << p)
}

/// Carry-less product of two binary polynomials (the result fits: the
/// generator has degree at most 119).
fn clmul(a: u128, b: u128) -> u128 {
    let mut r = 0;
    let mut bits = b;
    while bits != 0 {
        let i = bits.trailing_zeros();
        bits &= bits - 1;
        r ^= a << i;
    }
    r
}

/// ∏ (x - α^c) over a cyclotomic coset: a polynomial with binary
/// coefficients.
fn minimal_polynomial(coset: &[usize]) -> u128 {
    // Coefficients in GF(2^7), lowest degree first.
    let mut p = vec![1u8];
    for &c in coset {
        let root = alpha_pow(c);
        let mut next = vec![0u8; p.len() + 1];
        for (i, &a) in p.iter().enumerate() {
            next[i + 1] ^= a;
            next[i] ^= mul(a, root);
        }
        p = next;
    }
    p.iter().enumerate().fold(0u128, |acc, (i, &a)| {
        debug_assert!(a <= 1, "minimal polynomials are binary");
        acc | (u128::from(a & 1) << i)
    })
}

/// The error-locator polynomial of syndromes `s` (S₁ first, at most
/// 2·[`BCH_MAX_T`] of them), lowest degree first, and its degree
/// (Berlekamp-Massey).
fn berlekamp_massey(s: &[u8]) -> ([u8; 2 * BCH_MAX_T + 1], usize) {
    let mut c = [0u8; 2 * BCH_MAX_T + 1];
    let mut b = [0u8; 2 * BCH_MAX_T + 1];
    let mut before = [0u8; 2 * BCH_MAX_T + 1];
    let len = s.len() + 1;
    c[0] = 1;
    b[0] = 1;
    let (mut l, mut m, mut last) = (0usize, 1usize, 1u8);
    // The degree of `b`: the update touches only its terms.
    let mut b_degree = 0usize;
    // For a binary code (S₂ⱼ = Sⱼ²) every other discrepancy is zero
    // (Berlekamp's simplification; Lin & Costello §6.4): only even steps are
    // computed, and each odd one just ages `b` by one more step.
    let mut log_s = [0u16; 2 * BCH_MAX_T];
    for (l, &x) in log_s.iter_mut().zip(s) {
        *l = LOG_Z[usize::from(x & 0x7f)];
    }
    for n in (0..s.len()).step_by(2) {
        let mut d = s[n];
        for i in 1..=l {
            d ^= EXP_Z[usize::from(LOG_Z[usize::from(c[i] & 0x7f)] + log_s[n - i])];
        }
        if d == 0 {
            m += 2;
            continue;
        }
        let coef = div(d, last);
        // deg C <= l always, so only c[..=l] is kept for `b`, not all 63
        // bytes.
        let grows = 2 * l <= n;
        if grows {
            before[..=l].copy_from_slice(&c[..=l]);
        }
        let log_coef = LOG_Z[usize::from(coef)];
        for i in 0..=b_degree.min(len - 1 - m) {
            c[i + m] ^= EXP_Z[usize::from(log_coef + LOG_Z[usize::from(b[i] & 0x7f)])];
        }
        if grows {
            b[..=l].copy_from_slice(&before[..=l]);
            if b_degree > l {
                b[l + 1..=b_degree].fill(0);
            }
            b_degree = l;
            l = n + 1 - l;
            last = d;
            m = 2;
        } else {
            m += 2;
        }
    }
    (c, l)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn branchless_products_match_the_field() {
        for a in 0..128u8 {
            for b in 0..128u8 {
                let z = EXP_Z[usize::from(LOG_Z[usize::from(a)] + LOG_Z[usize::from(b)])];
                assert_eq!(z, mul(a, b), "{a} · {b}");
            }
        }
    }

    /// The vector Chien search and the portable one find the same roots
    /// for any locator, and both agree with evaluating the polynomial.
    #[test]
    fn chien_backends_agree_with_direct_evaluation() {
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let degree = (x % BCH_MAX_T as u64) as usize + 1;
            let mut locator = [0u8; 2 * BCH_MAX_T + 1];
            locator[0] = 1;
            for (i, l) in locator.iter_mut().enumerate().take(degree + 1).skip(1) {
                *l = ((x >> (i % 8 * 7)) & 0x7f) as u8;
            }
            let direct = (0..BCH_N).fold(0u128, |f, p| {
                let v = (0..=degree).fold(0u8, |acc, i| {
                    acc ^ mul(locator[i], alpha_pow((BCH_N - i * p % BCH_N) % BCH_N))
                });
                if v == 0 { f | 1 << p } else { f }
            });
            assert_eq!(chien_roots_scalar(&locator, degree), direct);
            #[cfg(target_arch = "x86_64")]
            if let Some(v) = crate::simd::chien_roots(&locator, degree) {
                assert_eq!(v, direct);
            }
        }
    }

    #[test]
    fn the_field_polynomial_is_primitive() {
        let mut seen = [false; BCH_N + 1];
        for &x in &EXP[..BCH_N] {
            assert!(x != 0 && !seen[usize::from(x)], "α repeats before 127");
            seen[usize::from(x)] = true;
        }
        assert_eq!(mul(div(77, 13), 13), 77);
    }

    #[test]
    fn dimensions_match_the_standard_table() {
        // n = 127 primitive BCH codes (Lin & Costello, Table 6.1 / Appendix C).
        let table = [
            (1, 120),
            (2, 113),
            (3, 106),
            (4, 99),
            (5, 92),
            (6, 85),
            (7, 78),
            (8, 71),
            (9, 71),
            (10, 64),
            (11, 57),
            (13, 50),
            (14, 43),
            (15, 36),
            (21, 29),
            (23, 22),
            (27, 15),
            (31, 8),
        ];
        for (t, k) in table {
            assert_eq!(Bch::new(t).unwrap().k(), k, "t = {t}");
        }
        let [a, b, c] = Bch::paper_codes();
        assert_eq!((a.k(), b.k(), c.k()), (92, 64, 36));
        assert!(Bch::new(0).is_err() && Bch::new(32).is_err());
    }

    #[test]
    fn the_table_driven_remainder_is_the_long_division() {
        let mut x = 0x1234_5678_9abc_def0_u128 * 0x9e37_79b9_7f4a_7c15;
        for t in [1, 5, 10, 15, 31] {
            let code = Bch::new(t).unwrap();
            for _ in 0..1000 {
                x = x
                    .wrapping_mul(0x2545_f491_4f6c_dd1d)
                    .wrapping_add(1442695040888963407);
                let w = x & mask(BCH_N);
                assert_eq!(code.remainder(w), code.remainder_bitwise(w), "t = {t}");
            }
        }
    }

    #[test]
    fn the_generator_divides_x_to_the_n_minus_one() {
        for t in [1, 5, 10, 15, 31] {
            let code = Bch::new(t).unwrap();
            // x^127 + 1 mod g: reduce x^127 by hand, one step past 126.
            let p = code.parity_bits();
            let mut r: u128 = 1 << 126;
            for i in (p..BCH_N).rev() {
                if r >> i & 1 == 1 {
                    r ^= code.generator << (i - p);
                }
            }
            // x^127 = x · x^126 ≡ x · r.
            let mut x127 = r << 1;
            if x127 >> p & 1 == 1 {
                x127 ^= code.generator;
            }
            assert_eq!(x127, 1, "t = {t}: x^127 ≡ 1 mod g");
        }
    }
}
