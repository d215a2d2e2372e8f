//! The tunnel's pre-shared-key layer: every tunnel packet (data,
//! repair and report) sealed with an AEAD, AES-256-GCM (NIST SP 800-38D)
//! or ChaCha20-Poly1305 (RFC 8439 §2.8), both from `ring`.
//!
//! **Wire format.** `version (1) | salt (8) | seq (8) | ciphertext | tag (16)`,
//! integers big-endian. The first 17 bytes travel in clear and are the
//! AEAD's associated data, so they are authenticated too. The version
//! names the cipher: 1 is ChaCha20-Poly1305 (the first format, unchanged),
//! 2 is AES-256-GCM. Each side seals with its own [`Cipher`] and opens
//! either, so two sides need only the same key, not the same choice.
//!
//! **Why two ciphers.** With AES-NI and carry-less multiply (every x86-64
//! and ARMv8 server of the last decade) ring's AES-256-GCM seals a
//! 1400-byte packet about 2.5x faster than its ChaCha20-Poly1305, and the
//! RustCrypto ChaCha20-Poly1305 this layer first used was 9x slower (the
//! measurement: `cargo bench -p groupwire-proto --bench seal`). Without
//! those instructions AES falls back to a slow constant-time path and
//! ChaCha20-Poly1305 is the better choice; [`Cipher::auto`] picks by CPU.
//!
//! **Keys.** Each side picks a random 64-bit session salt at start (the
//! caller passes it in; the tunnel takes it from the OS RNG). The key for
//! packets *from* a side is `HKDF-SHA256(ikm = psk, salt = that side's
//! session salt, info = INFO(cipher))`, 32 bytes (RFC 5869 §2): one key
//! per process start, direction and cipher, since each direction is named
//! by its sender's salt. A receiver refuses a packet carrying its own
//! salt, so a packet reflected back at its sender is dropped (two honest
//! sides pick the same salt with probability 2^-64).
//!
//! **Nonces never repeat under one key.** The nonce is the packet's 64-bit
//! sequence number (zero-padded to 96 bits). A key lives exactly as long
//! as one [`Sealer`]: a new process picks a new random salt, hence a new
//! key; within a `Sealer` the counter only increases and is never reset;
//! after sequence number `2^64 - 1` the sealer refuses to seal
//! ([`Sealer::seal`] returns `None`, the packet is dropped) instead of
//! wrapping. (AES-GCM's limit of 2^32 invocations per key applies to
//! random nonces; with a counter nonce the limit is the counter's.)
//!
//! **Anti-replay** (RFC 4303 §3.4.3, RFC 6479): the [`Opener`] keeps a
//! sliding bitmap of the last [`WINDOW`] sequence numbers of the peer key
//! in use; a repeated or too-old sequence number is refused after the tag
//! check. A new peer key (the peer restarted) is taken only when the
//! caller allows it, and the last [`RETIRED`] replaced peer salts are
//! refused for good, so a replay of an earlier session's packets does not
//! reopen it.

use std::collections::VecDeque;

use ring::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use ring::hkdf;

/// Clear header: version, salt, sequence number.
pub const HEADER_LEN: usize = 1 + 8 + 8;
/// The authentication tag (both ciphers).
pub const TAG_LEN: usize = 16;
/// Bytes a sealed packet adds.
pub const OVERHEAD: usize = HEADER_LEN + TAG_LEN;
/// Shortest key accepted.
pub const MIN_KEY_LEN: usize = 16;
/// Anti-replay window, in packets.
pub const WINDOW: u64 = 1024;
/// Replaced peer salts remembered (and refused).
pub const RETIRED: usize = 16;
const WORDS: usize = (WINDOW / 64) as usize;

/// The AEAD a side seals its packets with (`--cipher`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cipher {
    /// AES-256-GCM: fastest where the CPU has AES and carry-less multiply
    /// instructions.
    Aes256Gcm,
    /// ChaCha20-Poly1305: fastest without them.
    ChaCha20Poly1305,
}

impl Cipher {
    /// Every cipher, by its [`name`](Self::name).
    pub const ALL: [Self; 2] = [Self::Aes256Gcm, Self::ChaCha20Poly1305];

    /// Its name on the command line: `aes-256-gcm`, `chacha20-poly1305`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Aes256Gcm => "aes-256-gcm",
            Self::ChaCha20Poly1305 => "chacha20-poly1305",
        }
    }

    /// AES-256-GCM if this CPU accelerates it, else ChaCha20-Poly1305.
    pub fn auto() -> Self {
        #[cfg(target_arch = "x86_64")]
        let fast_aes = std::arch::is_x86_feature_detected!("aes")
            && std::arch::is_x86_feature_detected!("pclmulqdq");
        #[cfg(target_arch = "aarch64")]
        let fast_aes = std::arch::is_aarch64_feature_detected!("aes")
            && std::arch::is_aarch64_feature_detected!("pmull");
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        let fast_aes = false;
        if fast_aes {
            Self::Aes256Gcm
        } else {
            Self::ChaCha20Poly1305
        }
    }

    /// The version byte that names this cipher on the wire.
    fn version(self) -> u8 {
        match self {
            Self::ChaCha20Poly1305 => 1,
            Self::Aes256Gcm => 2,
        }
    }

    fn from_version(v: u8) -> Option<Self> {
        match v {
            1 => Some(Self::ChaCha20Poly1305),
            2 => Some(Self::Aes256Gcm),
            _ => None,
        }
    }

    fn algorithm(self) -> &'static aead::Algorithm {
        match self {
            Self::ChaCha20Poly1305 => &aead::CHACHA20_POLY1305,
            Self::Aes256Gcm => &aead::AES_256_GCM,
        }
    }

    /// HKDF's `info`: the first format's string for ChaCha20-Poly1305 (so
    /// its keys are unchanged), a distinct one per further cipher.
    fn info(self) -> &'static [u8] {
        match self {
            Self::ChaCha20Poly1305 => b"groupwire tunnel v1from-salt-holder",
            Self::Aes256Gcm => b"groupwire tunnel v2 aes-256-gcm from-salt-holder",
        }
    }
}

impl std::str::FromStr for Cipher {
    type Err = String;

    /// A [`name`](Cipher::name).
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| format!("unknown cipher {s:?}: use aes-256-gcm or chacha20-poly1305"))
    }
}

impl std::fmt::Display for Cipher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Aes256Gcm => "AES-256-GCM",
            Self::ChaCha20Poly1305 => "ChaCha20-Poly1305",
        })
    }
}

/// The directional key of the side whose session salt is `salt`.
fn derive(psk: &[u8], salt: u64, cipher: Cipher) -> LessSafeKey {
    let alg = cipher.algorithm();
    let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, &salt.to_be_bytes()).extract(psk);
    let info = [cipher.info()];
    let okm = prk
        .expand(&info, alg)
        .expect("a 32-byte key is a valid HKDF-SHA256 output length");
    LessSafeKey::new(UnboundKey::from(okm))
}

fn nonce(seq: u64) -> Nonce {
    let mut n = [0u8; aead::NONCE_LEN];
    n[4..].copy_from_slice(&seq.to_be_bytes());
    Nonce::assume_unique_for_key(n)
}

/// Seals this side's packets under its own directional key.
pub struct Sealer {
    key: LessSafeKey,
    cipher: Cipher,
    salt: u64,
    next: Option<u64>,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sealer")
            .field("cipher", &self.cipher)
            .field("salt", &self.salt)
            .field("next", &self.next)
            .finish_non_exhaustive()
    }
}

impl Sealer {
    /// This side's sealer for session salt `salt`.
    pub fn new(psk: &[u8], salt: u64, cipher: Cipher) -> Self {
        Self {
            key: derive(psk, salt, cipher),
            cipher,
            salt,
            next: Some(0),
        }
    }

    /// `plain` sealed, or `None` once the sequence numbers are used up.
    /// One allocation, one copy of `plain`; encrypted in place.
    pub fn seal(&mut self, plain: &[u8]) -> Option<Vec<u8>> {
        let seq = self.next?;
        self.next = seq.checked_add(1);
        let mut out = Vec::with_capacity(plain.len() + OVERHEAD);
        out.push(self.cipher.version());
        out.extend_from_slice(&self.salt.to_be_bytes());
        out.extend_from_slice(&seq.to_be_bytes());
        out.extend_from_slice(plain);
        let (head, body) = out.split_at_mut(HEADER_LEN);
        let tag = self
            .key
            .seal_in_place_separate_tag(nonce(seq), Aad::from(&*head), body)
            .expect("a tunnel packet is far below either AEAD's length limit");
        out.extend_from_slice(tag.as_ref());
        Some(out)
    }
}

/// Why [`Opener::open`] refused a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenError {
    /// Too short, unknown version, our own salt (reflected) or tag mismatch.
    Unauthenticated,
    /// Authentic, but its sequence number was seen or is out of the
    /// window, or its key was replaced.
    Replayed,
    /// Authentic, under a peer key other than the one in use, while a
    /// switch is not allowed.
    OtherKey,
}

/// A peer's key and its anti-replay window.
struct PeerKey {
    salt: u64,
    cipher: Cipher,
    key: LessSafeKey,
    /// Highest sequence number accepted.
    top: u64,
    /// Bit `i` set: `top - i` was accepted.
    bits: [u64; WORDS],
}

impl PeerKey {
    fn fresh(&self, seq: u64) -> bool {
        if seq > self.top {
            return true;
        }
        let back = self.top - seq;
        back < WINDOW && self.bits[(back / 64) as usize] & (1 << (back % 64)) == 0
    }

    fn mark(&mut self, seq: u64) {
        if seq > self.top {
            let shift = seq - self.top;
            if shift >= WINDOW {
                self.bits = [0; WORDS];
            } else {
                // Everything moves `shift` places older (higher index).
                let words = (shift / 64) as usize;
                let bitsh = (shift % 64) as u32;
                for i in (0..WORDS).rev() {
                    let hi = i.checked_sub(words).map_or(0, |j| self.bits[j]);
                    let lo = i.checked_sub(words + 1).map_or(0, |j| self.bits[j]);
                    self.bits[i] = if bitsh == 0 {
                        hi
                    } else {
                        (hi << bitsh) | (lo >> (64 - bitsh))
                    };
                }
            }
            self.top = seq;
        }
        let back = self.top - seq;
        self.bits[(back / 64) as usize] |= 1 << (back % 64);
    }
}

/// Opens the peer's packets: checks the tag, then the replay window.
pub struct Opener {
    psk: Vec<u8>,
    own_salt: u64,
    current: Option<PeerKey>,
    retired: VecDeque<u64>,
}

impl std::fmt::Debug for Opener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Opener")
            .field("own_salt", &self.own_salt)
            .field("peer_salt", &self.current.as_ref().map(|k| k.salt))
            .finish_non_exhaustive()
    }
}

impl Opener {
    /// An opener for the side whose own salt is `own_salt`.
    pub fn new(psk: &[u8], own_salt: u64) -> Self {
        Self {
            psk: psk.to_vec(),
            own_salt,
            current: None,
            retired: VecDeque::new(),
        }
    }

    /// The plaintext of `packet`. A packet under a salt other than the
    /// current peer key's is taken (its key becomes current, with a fresh
    /// window) only if `may_switch`: the tunnel allows that when no peer
    /// key is known yet or the peer has been silent for its idle time.
    /// Nothing changes unless the packet is authentic and new.
    pub fn open(&mut self, packet: &[u8], may_switch: bool) -> Result<Vec<u8>, OpenError> {
        if packet.len() < OVERHEAD {
            return Err(OpenError::Unauthenticated);
        }
        let cipher = Cipher::from_version(packet[0]).ok_or(OpenError::Unauthenticated)?;
        let salt = u64::from_be_bytes(packet[1..9].try_into().expect("8 bytes"));
        let seq = u64::from_be_bytes(packet[9..17].try_into().expect("8 bytes"));
        if salt == self.own_salt {
            return Err(OpenError::Unauthenticated);
        }
        let (head, sealed) = packet.split_at(HEADER_LEN);
        // One copy (ciphertext and tag), decrypted in place.
        let mut plain = sealed.to_vec();
        let open = |key: &LessSafeKey, plain: &mut Vec<u8>| {
            let n = key
                .open_in_place(nonce(seq), Aad::from(head), plain)
                .map_err(|_| OpenError::Unauthenticated)?
                .len();
            plain.truncate(n);
            Ok(())
        };
        if let Some(k) = self
            .current
            .as_mut()
            .filter(|k| k.salt == salt && k.cipher == cipher)
        {
            open(&k.key, &mut plain)?;
            if !k.fresh(seq) {
                return Err(OpenError::Replayed);
            }
            k.mark(seq);
            return Ok(plain);
        }
        let key = derive(&self.psk, salt, cipher);
        open(&key, &mut plain)?;
        if self.retired.contains(&salt) || self.current.as_ref().is_some_and(|k| k.salt == salt) {
            // A replaced key, or the current peer's salt under another
            // cipher: an honest peer never changes cipher within a session.
            return Err(OpenError::Replayed);
        }
        if !may_switch {
            return Err(OpenError::OtherKey);
        }
        let mut k = PeerKey {
            salt,
            cipher,
            key,
            top: seq,
            bits: [0; WORDS],
        };
        k.mark(seq);
        if let Some(old) = self.current.replace(k) {
            if self.retired.len() == RETIRED {
                self.retired.pop_front();
            }
            self.retired.push_back(old.salt);
        }
        Ok(plain)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const PSK: &[u8] = b"0123456789abcdef-test-key";
    const BOTH: [Cipher; 2] = [Cipher::Aes256Gcm, Cipher::ChaCha20Poly1305];

    fn cipher() -> impl Strategy<Value = Cipher> {
        prop_oneof![Just(Cipher::Aes256Gcm), Just(Cipher::ChaCha20Poly1305)]
    }

    proptest! {
        #[test]
        fn round_trip(
            plain in proptest::collection::vec(any::<u8>(), 0..1500),
            a in any::<u64>(),
            b in any::<u64>(),
            c in cipher(),
        ) {
            prop_assume!(a != b);
            let mut s = Sealer::new(PSK, a, c);
            let mut o = Opener::new(PSK, b);
            let first = s.seal(&plain).expect("sealed");
            prop_assert_eq!(first.len(), plain.len() + OVERHEAD);
            prop_assert_eq!(o.open(&first, true), Ok(plain.clone()));
            let second = s.seal(&plain).expect("sealed");
            prop_assert_eq!(o.open(&second, false), Ok(plain.clone()));
            prop_assert_eq!(o.open(&first, false), Err(OpenError::Replayed));
        }

        #[test]
        fn any_bit_flip_is_refused(
            plain in proptest::collection::vec(any::<u8>(), 0..200),
            bit in any::<usize>(),
            c in cipher(),
        ) {
            let mut s = Sealer::new(PSK, 1, c);
            let mut o = Opener::new(PSK, 2);
            let mut p = s.seal(&plain).expect("sealed");
            let bit = bit % (p.len() * 8);
            p[bit / 8] ^= 1 << (bit % 8);
            prop_assert_eq!(o.open(&p, true), Err(OpenError::Unauthenticated));
        }
    }

    /// The first format (version 1, ChaCha20-Poly1305) is unchanged: these
    /// bytes were sealed by the RustCrypto implementation this layer had
    /// before it moved to ring, so tunnels of either build interoperate.
    #[test]
    fn chacha20_poly1305_packets_are_those_of_the_first_format() {
        let v1 = "0100000000000000010000000000000000fbb6ee7c1ef0fed40946ef0651966ff8219c35450b";
        let mut s = Sealer::new(PSK, 1, Cipher::ChaCha20Poly1305);
        let p = s.seal(b"hello").expect("sealed");
        let hex: String = p.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, v1);
    }

    #[test]
    fn sides_with_different_ciphers_understand_each_other() {
        let mut a = Sealer::new(PSK, 1, Cipher::Aes256Gcm);
        let mut b = Sealer::new(PSK, 2, Cipher::ChaCha20Poly1305);
        let mut at_a = Opener::new(PSK, 1);
        let mut at_b = Opener::new(PSK, 2);
        let from_a = a.seal(b"from a").expect("sealed");
        let from_b = b.seal(b"from b").expect("sealed");
        assert_eq!(from_a[0], 2);
        assert_eq!(from_b[0], 1);
        assert_eq!(at_b.open(&from_a, true), Ok(b"from a".to_vec()));
        assert_eq!(at_a.open(&from_b, true), Ok(b"from b".to_vec()));
        // The same salt and sequence number under the other cipher is not
        // a second key for the same peer.
        let mut a_other = Sealer::new(PSK, 1, Cipher::ChaCha20Poly1305);
        a_other.next = Some(5);
        let forged = a_other.seal(b"other cipher").expect("sealed");
        assert_eq!(at_b.open(&forged, true), Err(OpenError::Replayed));
        // An unknown version is refused before any crypto.
        let mut unknown = from_a.clone();
        unknown[0] = 3;
        assert_eq!(at_b.open(&unknown, true), Err(OpenError::Unauthenticated));
    }

    #[test]
    fn wrong_key_truncation_and_reflection_are_refused() {
        for c in BOTH {
            wrong_key_truncation_and_reflection(c);
        }
    }

    fn wrong_key_truncation_and_reflection(c: Cipher) {
        let mut s = Sealer::new(PSK, 1, c);
        let p = s.seal(b"hello").expect("sealed");
        let mut wrong = Opener::new(b"another key of 16+ bytes", 2);
        assert_eq!(wrong.open(&p, true), Err(OpenError::Unauthenticated));
        let mut o = Opener::new(PSK, 2);
        for n in 0..p.len() {
            assert_eq!(o.open(&p[..n], true), Err(OpenError::Unauthenticated));
        }
        // Our own packet sent back to us.
        let mut own = Opener::new(PSK, 1);
        assert_eq!(own.open(&p, true), Err(OpenError::Unauthenticated));
        assert_eq!(o.open(&p, true), Ok(b"hello".to_vec()));
    }

    #[test]
    fn window_takes_reordering_and_refuses_old_and_repeated() {
        let mut s = Sealer::new(PSK, 1, Cipher::auto());
        let mut o = Opener::new(PSK, 2);
        let ps: Vec<_> = (0..3000).map(|_| s.seal(b"x").expect("sealed")).collect();
        // Even sequence numbers 0..800, then the odd ones, still in the window.
        for p in ps.iter().step_by(2).take(400) {
            assert!(o.open(p, true).is_ok());
        }
        for p in ps.iter().skip(1).step_by(2).take(399) {
            assert!(o.open(p, false).is_ok());
        }
        for p in &ps[..799] {
            assert_eq!(o.open(p, false), Err(OpenError::Replayed));
        }
        assert!(o.open(&ps[2999], false).is_ok());
        // 2999 - 1024 = 1975 and older are out of the window now.
        assert_eq!(o.open(&ps[1975], false), Err(OpenError::Replayed));
        assert!(o.open(&ps[1976], false).is_ok());
        assert_eq!(o.open(&ps[1976], false), Err(OpenError::Replayed));
    }

    #[test]
    fn a_switch_needs_leave_and_a_replaced_key_is_refused() {
        let mut old = Sealer::new(PSK, 10, Cipher::Aes256Gcm);
        let mut new = Sealer::new(PSK, 11, Cipher::ChaCha20Poly1305);
        let mut o = Opener::new(PSK, 2);
        let p_old = old.seal(b"a").expect("sealed");
        let p_old2 = old.seal(b"b").expect("sealed");
        let p_new = new.seal(b"c").expect("sealed");
        assert!(o.open(&p_old, true).is_ok());
        assert_eq!(o.open(&p_new, false), Err(OpenError::OtherKey));
        assert!(o.open(&p_new, true).is_ok());
        assert_eq!(o.open(&p_old2, true), Err(OpenError::Replayed));
    }

    #[test]
    fn the_sealer_stops_at_the_end_of_its_sequence_numbers() {
        let mut s = Sealer::new(PSK, 1, Cipher::auto());
        s.next = Some(u64::MAX);
        assert!(s.seal(b"last").is_some());
        assert!(s.seal(b"none").is_none());
    }
}
