//! The tunnel's pre-shared-key layer (sans-IO): every tunnel packet (data,
//! repair and report) sealed with ChaCha20-Poly1305 (RFC 8439 §2.8).
//!
//! **Wire format.** `version (1) | salt (8) | seq (8) | ciphertext | tag (16)`,
//! integers big-endian. The first 17 bytes travel in clear and are the
//! AEAD's associated data, so they are authenticated too.
//!
//! **Keys.** Each side picks a random 64-bit session salt at start (the
//! caller passes it in; the tunnel takes it from the OS RNG). The key for
//! packets *from* a side is `HKDF-SHA256(ikm = psk, salt = that side's
//! session salt, info = "groupwire tunnel v1" || "from-salt-holder")`
//! (RFC 5869 §2): one key per process start and direction, since each
//! direction is named by its sender's salt. A receiver refuses a packet
//! carrying its own salt, so a packet reflected back at its sender is
//! dropped (two honest sides pick the same salt with probability 2^-64).
//!
//! **Nonces never repeat under one key.** The nonce is the packet's 64-bit
//! sequence number (zero-padded to 96 bits). A key lives exactly as long
//! as one [`Sealer`]: a new process picks a new random salt, hence a new
//! key; within a `Sealer` the counter only increases and is never reset;
//! after sequence number `2^64 - 1` the sealer refuses to seal
//! ([`Sealer::seal`] returns `None`, the packet is dropped) instead of
//! wrapping.
//!
//! **Anti-replay** (RFC 4303 §3.4.3, RFC 6479): the [`Opener`] keeps a
//! sliding bitmap of the last [`WINDOW`] sequence numbers of the peer key
//! in use; a repeated or too-old sequence number is refused after the tag
//! check. A new peer key (the peer restarted) is taken only when the
//! caller allows it, and the last [`RETIRED`] replaced peer salts are
//! refused for good, so a replay of an earlier session's packets does not
//! reopen it.

use std::collections::VecDeque;

use chacha20poly1305::aead::{AeadInPlace, KeyInit};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce, Tag};
use hkdf::Hkdf;
use sha2::Sha256;

/// The format's version byte.
pub(crate) const VERSION: u8 = 1;
/// Clear header: version, salt, sequence number.
pub(crate) const HEADER_LEN: usize = 1 + 8 + 8;
/// Poly1305 tag.
pub(crate) const TAG_LEN: usize = 16;
/// Bytes a sealed packet adds.
pub(crate) const OVERHEAD: usize = HEADER_LEN + TAG_LEN;
/// Shortest key accepted.
pub(crate) const MIN_KEY_LEN: usize = 16;
/// Anti-replay window, in packets.
pub(crate) const WINDOW: u64 = 1024;
/// Replaced peer salts remembered (and refused).
pub(crate) const RETIRED: usize = 16;
const WORDS: usize = (WINDOW / 64) as usize;
const INFO: &[u8] = b"groupwire tunnel v1from-salt-holder";

/// The directional key of the side whose session salt is `salt`.
fn derive(psk: &[u8], salt: u64) -> ChaCha20Poly1305 {
    let hk = Hkdf::<Sha256>::new(Some(&salt.to_be_bytes()), psk);
    let mut okm = [0u8; 32];
    hk.expand(INFO, &mut okm)
        .expect("32 bytes is a valid HKDF-SHA256 output length");
    ChaCha20Poly1305::new(Key::from_slice(&okm))
}

fn nonce(seq: u64) -> Nonce {
    let mut n = [0u8; 12];
    n[4..].copy_from_slice(&seq.to_be_bytes());
    *Nonce::from_slice(&n)
}

/// Seals this side's packets under its own directional key.
pub(crate) struct Sealer {
    aead: ChaCha20Poly1305,
    salt: u64,
    next: Option<u64>,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sealer")
            .field("salt", &self.salt)
            .field("next", &self.next)
            .finish_non_exhaustive()
    }
}

impl Sealer {
    /// This side's sealer for session salt `salt`.
    pub(crate) fn new(psk: &[u8], salt: u64) -> Self {
        Self {
            aead: derive(psk, salt),
            salt,
            next: Some(0),
        }
    }

    /// `plain` sealed, or `None` once the sequence numbers are used up.
    pub(crate) fn seal(&mut self, plain: &[u8]) -> Option<Vec<u8>> {
        let seq = self.next?;
        self.next = seq.checked_add(1);
        let mut out = Vec::with_capacity(plain.len() + OVERHEAD);
        out.push(VERSION);
        out.extend_from_slice(&self.salt.to_be_bytes());
        out.extend_from_slice(&seq.to_be_bytes());
        out.extend_from_slice(plain);
        let (head, body) = out.split_at_mut(HEADER_LEN);
        let tag = self
            .aead
            .encrypt_in_place_detached(&nonce(seq), head, body)
            .expect("a tunnel packet is far below ChaCha20-Poly1305's length limit");
        out.extend_from_slice(&tag);
        Some(out)
    }
}

/// Why [`Opener::open`] refused a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OpenError {
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
    aead: ChaCha20Poly1305,
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
pub(crate) struct Opener {
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
    pub(crate) fn new(psk: &[u8], own_salt: u64) -> Self {
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
    pub(crate) fn open(&mut self, packet: &[u8], may_switch: bool) -> Result<Vec<u8>, OpenError> {
        if packet.len() < OVERHEAD || packet[0] != VERSION {
            return Err(OpenError::Unauthenticated);
        }
        let salt = u64::from_be_bytes(packet[1..9].try_into().expect("8 bytes"));
        let seq = u64::from_be_bytes(packet[9..17].try_into().expect("8 bytes"));
        if salt == self.own_salt {
            return Err(OpenError::Unauthenticated);
        }
        let (head, rest) = packet.split_at(HEADER_LEN);
        let (body, tag) = rest.split_at(rest.len() - TAG_LEN);
        let mut plain = body.to_vec();
        if let Some(k) = self.current.as_mut().filter(|k| k.salt == salt) {
            k.aead
                .decrypt_in_place_detached(&nonce(seq), head, &mut plain, Tag::from_slice(tag))
                .map_err(|_| OpenError::Unauthenticated)?;
            if !k.fresh(seq) {
                return Err(OpenError::Replayed);
            }
            k.mark(seq);
            return Ok(plain);
        }
        let aead = derive(&self.psk, salt);
        aead.decrypt_in_place_detached(&nonce(seq), head, &mut plain, Tag::from_slice(tag))
            .map_err(|_| OpenError::Unauthenticated)?;
        if self.retired.contains(&salt) {
            return Err(OpenError::Replayed);
        }
        if !may_switch {
            return Err(OpenError::OtherKey);
        }
        let mut k = PeerKey {
            salt,
            aead,
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

    proptest! {
        #[test]
        fn round_trip(
            plain in proptest::collection::vec(any::<u8>(), 0..1500),
            a in any::<u64>(),
            b in any::<u64>(),
        ) {
            prop_assume!(a != b);
            let mut s = Sealer::new(PSK, a);
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
        ) {
            let mut s = Sealer::new(PSK, 1);
            let mut o = Opener::new(PSK, 2);
            let mut p = s.seal(&plain).expect("sealed");
            let bit = bit % (p.len() * 8);
            p[bit / 8] ^= 1 << (bit % 8);
            prop_assert_eq!(o.open(&p, true), Err(OpenError::Unauthenticated));
        }
    }

    #[test]
    fn wrong_key_truncation_and_reflection_are_refused() {
        let mut s = Sealer::new(PSK, 1);
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
        let mut s = Sealer::new(PSK, 1);
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
        let mut old = Sealer::new(PSK, 10);
        let mut new = Sealer::new(PSK, 11);
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
        let mut s = Sealer::new(PSK, 1);
        s.next = Some(u64::MAX);
        assert!(s.seal(b"last").is_some());
        assert!(s.seal(b"none").is_none());
    }
}
