//! Reliable Blast UDP (Leigh et al. §4.2): bulk data at a chosen rate over
//! UDP, with one negative acknowledgement per blast over a reliable control
//! stream. Sans-IO: [`RbudpSender`] and [`RbudpReceiver`] are
//! [`StreamMachine`](crate::StreamMachine)s; the simulator and socket drivers run them.
//!
//! //= Leigh et al. §4.2, "Reliable Blast UDP (RUDP)"
//! //# The scheme works by "blasting" the contents of a data file at just
//! //# below the available bandwidth without asking the remote site to
//! //# acknowledge any of the packets. [...] At the remote site, a tally is
//! //# kept for all the packets that have arrived and, after some timeout
//! //# period, a list of missing packets is sent back to the sending client.
//! //# The sender reacts by resending all the missing packets and again
//! //# waiting for another negative acknowledgement.
//!
//! # The exchange
//!
//! ```text
//! sender                                   receiver
//!   Start(size, packet size, rate[, hash]) ──▶   (control stream)
//!   ◀── Accept                                   bitmap of size/packet bits
//!   data 0, 1, 2, ... n-1  ═══▶ (UDP, paced at the rate, no acknowledgements)
//!   EndOfBlast(round 0, hash) ──▶
//!   ◀── Missing(round 0: list of what did not arrive, arrival rate)
//!   data (exactly the missing ones) ═══▶
//!   EndOfBlast(round 1) ──▶
//!   ...                                          every packet in: hash it
//!   ◀── Done(ok, receiver's hash)
//! ```
//!
//! Control messages ([`crate::wire::rbudp`]) go out as
//! [`Transport::TcpFrame`](crate::Transport::TcpFrame) transmits and come
//! in through [`StreamMachine::handle_frame`](crate::StreamMachine::handle_frame);
//! data datagrams are plain UDP
//! ([`Machine::handle_datagram`](crate::Machine::handle_datagram)). Where the paper's receiver answers
//! "after some timeout period", ours answers the sender's end-of-blast
//! message (as the paper's own implementation signals over TCP), once no
//! datagram has arrived for [`ReceiverConfig::settle`], so stragglers
//! queued behind the message are counted.
//!
//! Where this goes beyond the paper:
//!
//! - **The handshake.** The sender waits for [`Accept`](crate::wire::rbudp::Accept)
//!   before blasting (one round trip), so the receiver has its storage
//!   ready and can refuse a transfer it cannot take.
//! - **Integrity.** A BLAKE3 hash of the whole payload, computed by the
//!   sender while it reads the first blast (or given up front,
//!   [`SenderConfig::hash`]) and by the receiver over what it stored,
//!   compared at the end: a corrupted byte fails the transfer
//!   ([`BlastError::HashMismatch`]) instead of passing silently.
//! - **The adaptive rate** ([`RateControl::Adaptive`]): the paper leaves
//!   the rate to the user ("just below the available bandwidth"). The
//!   receiver measures each blast's arrival rate and returns it with the
//!   missing list; after a lossy blast the sender sets the next rounds'
//!   rate just below that rate. Fixed is the default, as in the paper.
//! - **Bad input and silence.** Lists naming packets past the end, stale or
//!   repeated control messages and a peer that never answers are counted,
//!   dropped or turned into a clear [`BlastError`]; never a panic.
//!
//! # Memory
//!
//! The payload is read ([`BlastSource`]) and written ([`BlastSink`])
//! through traits, a packet at a time, so a payload of any size streams
//! through. Per transfer, each side holds one bit per packet: the
//! receiver's tally, and the sender's set of packets to resend in the
//! current round (the receiver's list, applied). Everything else is
//! bounded by the configuration.

use std::io;
use std::time::Duration;

use crate::Bitrate;
use crate::wire::rbudp::{Abort, AbortReason, Control, DATA_HEADER_LEN, Hash};

mod receiver;
mod sender;
#[cfg(test)]
mod tests;
mod tree_hash;

pub use receiver::{RbudpReceiver, ReceiverConfig, ReceiverEvent, ReceiverStats};
pub use sender::{RateControl, RbudpSender, SenderConfig, SenderEvent, SenderStats};

/// The default payload bytes per packet: with our 24-byte header and 28
/// of IP and UDP, a 1452-byte datagram, inside a 1500-byte MTU.
pub const DEFAULT_PACKET_SIZE: u32 = 1400;

/// The largest payload one data datagram carries.
pub const MAX_PACKET_SIZE: u32 = (crate::units::MAX_UDP_PAYLOAD - DATA_HEADER_LEN) as u32;

/// Where a sender reads the payload: `len` bytes, read a packet at a time.
pub trait BlastSource {
    /// Bytes in the payload.
    fn len(&self) -> u64;
    /// Whether the payload is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Fills `buf` with the payload's bytes from `offset`. The range is
    /// always inside the payload.
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> io::Result<()>;
}

/// Where a receiver stores the payload, a packet at a time, in any order,
/// and reads it back once for the final hash.
pub trait BlastSink {
    /// The transfer starts: make room for `size` bytes (a file sets its
    /// length). The default does nothing.
    fn prepare(&mut self, size: u64) -> io::Result<()> {
        let _ = size;
        Ok(())
    }
    /// Stores `data` at `offset`.
    fn write_at(&mut self, offset: u64, data: &[u8]) -> io::Result<()>;
    /// Reads back what was stored from `offset` (for the hash).
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    /// A transfer that may resume is starting: what this sink holds of the
    /// payload `key` names, from an earlier transfer that was interrupted.
    /// On [`Partial::Held`] the transfer goes on from there and
    /// [`prepare`](Self::prepare) is not called. The default holds nothing
    /// (a sink that keeps no state between transfers).
    fn resume(&mut self, key: &ResumeKey) -> io::Result<Partial> {
        let _ = key;
        Ok(Partial::None)
    }
    /// Records which packets are stored, for a later [`resume`](Self::resume):
    /// bit `i % 64` of `tally[i / 64]` is set when packet `i` is. Called
    /// about once a second while packets arrive, after each round, and
    /// when a transfer stops unfinished; what it records must not claim a
    /// packet whose bytes could still be lost when the process dies (write
    /// them first). The default records nothing.
    fn checkpoint(&mut self, key: &ResumeKey, tally: &[u64]) -> io::Result<()> {
        let _ = (key, tally);
        Ok(())
    }
    /// The transfer completed and its hash matched: forget what
    /// [`checkpoint`](Self::checkpoint) recorded. The default does nothing.
    fn completed(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Names a resumable transfer's payload (its [`Start`](crate::wire::rbudp::Start)):
/// a partial is only resumed by a transfer with the same key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ResumeKey {
    /// Payload bytes.
    pub size: u64,
    /// Bytes per packet (the tally counts packets).
    pub packet_size: u32,
    /// The payload's version, as the sender gives it.
    pub version: u64,
}

/// What a [`BlastSink`] holds of a payload before its transfer starts.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Partial {
    /// Nothing: the transfer starts from the beginning.
    None,
    /// What was held belonged to another payload, or another version of
    /// it (the file changed since the interrupted transfer), and was
    /// discarded: the transfer starts from the beginning.
    Discarded,
    /// The packets held, as [`BlastSink::checkpoint`] recorded them.
    Held(Vec<u64>),
}

impl BlastSource for bytes::Bytes {
    fn len(&self) -> u64 {
        self.as_ref().len() as u64
    }
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        copy_out(self, offset, buf)
    }
}

impl BlastSource for Vec<u8> {
    fn len(&self) -> u64 {
        self.as_slice().len() as u64
    }
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        copy_out(self, offset, buf)
    }
}

impl BlastSink for Vec<u8> {
    fn prepare(&mut self, size: u64) -> io::Result<()> {
        let size = usize::try_from(size).map_err(|_| io::Error::other("too large for memory"))?;
        self.clear();
        self.resize(size, 0);
        Ok(())
    }
    fn write_at(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        let at = usize::try_from(offset).map_err(|_| io::Error::other("offset past memory"))?;
        self.get_mut(at..at + data.len())
            .ok_or_else(|| io::Error::other("write past the prepared size"))?
            .copy_from_slice(data);
        Ok(())
    }
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        copy_out(self, offset, buf)
    }
}

/// Fills `buf` from `from` at `offset`, or says the range is outside it.
pub(crate) fn copy_out(from: &[u8], offset: u64, buf: &mut [u8]) -> io::Result<()> {
    let at = usize::try_from(offset).map_err(|_| io::Error::other("offset past memory"))?;
    buf.copy_from_slice(
        from.get(at..at + buf.len())
            .ok_or_else(|| io::Error::other("read past the end"))?,
    );
    Ok(())
}

/// A synthetic payload: `len` bytes that are a function of a seed and the
/// offset, generated on demand (simulations, benchmarks and tests of files
/// larger than memory). As a [`BlastSink`] ([`PatternSink`]) it stores
/// nothing and checks every write against the pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pattern {
    seed: u64,
    len: u64,
}

impl Pattern {
    /// `len` bytes generated from `seed`.
    pub const fn new(seed: u64, len: u64) -> Self {
        Self { seed, len }
    }

    /// Writes the pattern's bytes from `offset` into `buf` (past the end,
    /// the pattern simply continues).
    pub fn fill(&self, offset: u64, buf: &mut [u8]) {
        let mut at = offset;
        let mut out = buf;
        while !out.is_empty() {
            let word = self.word(at / 8).to_be_bytes();
            let skip = (at % 8) as usize;
            let n = (8 - skip).min(out.len());
            out[..n].copy_from_slice(&word[skip..skip + n]);
            out = &mut out[n..];
            at += n as u64;
        }
    }

    /// The BLAKE3 hash of the whole pattern.
    pub fn hash(&self) -> Hash {
        let mut h = blake3::Hasher::new();
        let mut buf = vec![0u8; 1 << 16];
        let mut at = 0;
        while at < self.len {
            let n = (self.len - at).min(buf.len() as u64) as usize;
            self.fill(at, &mut buf[..n]);
            h.update(&buf[..n]);
            at += n as u64;
        }
        *h.finalize().as_bytes()
    }

    /// SplitMix64 of word `i` (Steele et al.): fast, and every word differs.
    fn word(&self, i: u64) -> u64 {
        let mut z = self
            .seed
            .wrapping_add(i.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

impl BlastSource for Pattern {
    fn len(&self) -> u64 {
        self.len
    }
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.fill(offset, buf);
        Ok(())
    }
}

/// A [`BlastSink`] for a [`Pattern`] payload that stores nothing: it counts
/// the bytes written and the writes that differ from the pattern, and
/// keeps only those (so reading back gives what was written, and the
/// final hash sees a wrong write).
#[derive(Clone, Debug, Default)]
pub struct PatternSink {
    pattern: Option<Pattern>,
    seed: u64,
    /// Bytes written.
    pub written: u64,
    /// Writes that differed from the pattern, kept with their offset.
    pub wrong: Vec<(u64, Vec<u8>)>,
}

impl PatternSink {
    /// A sink expecting the pattern of `seed` (its length comes with the
    /// transfer).
    pub fn new(seed: u64) -> Self {
        Self {
            seed,
            ..Self::default()
        }
    }
}

impl BlastSink for PatternSink {
    fn prepare(&mut self, size: u64) -> io::Result<()> {
        self.pattern = Some(Pattern::new(self.seed, size));
        Ok(())
    }
    fn write_at(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        let p = self
            .pattern
            .ok_or_else(|| io::Error::other("write before prepare"))?;
        let mut expect = vec![0u8; data.len()];
        p.fill(offset, &mut expect);
        if expect != data {
            self.wrong.push((offset, data.to_vec()));
        }
        self.written += data.len() as u64;
        Ok(())
    }
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let p = self
            .pattern
            .ok_or_else(|| io::Error::other("read before prepare"))?;
        p.fill(offset, buf);
        let end = offset + buf.len() as u64;
        for (at, data) in &self.wrong {
            let (s, e) = (*at.max(&offset), (at + data.len() as u64).min(end));
            if s < e {
                buf[(s - offset) as usize..(e - offset) as usize]
                    .copy_from_slice(&data[(s - at) as usize..(e - at) as usize]);
            }
        }
        Ok(())
    }
}

/// Why a transfer ended unfinished.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BlastError {
    /// The peer did not answer within the timeouts and retries.
    #[error("the peer stopped answering")]
    PeerSilent,
    /// The peer ended the transfer.
    #[error("the peer aborted the transfer: {0:?}")]
    PeerAborted(AbortReason),
    /// The receiver refused the transfer, or this receiver refused it.
    #[error("transfer refused: {0}")]
    Refused(String),
    /// Every packet arrived, but the hash of what was stored differs from
    /// the sender's: something corrupted the data on the way or at rest.
    #[error("the payload's BLAKE3 hash does not match: the data was corrupted")]
    HashMismatch,
    /// Reading the payload (sender) or storing it (receiver) failed.
    #[error("storage: {0}")]
    Storage(String),
    /// The peer broke the protocol (a list naming packets past the end, a
    /// hash that changed between messages).
    #[error("protocol violation: {0}")]
    Protocol(String),
    /// More rounds than [`SenderConfig::max_rounds`].
    #[error("still incomplete after {0} rounds")]
    TooManyRounds(u32),
    /// The payload changed while it was being sent: its hash differs from
    /// the one given in [`SenderConfig::hash`].
    #[error("the payload changed during the transfer")]
    SourceChanged,
}

impl BlastError {
    /// The reason an [`Abort`](crate::wire::rbudp::Abort) tells the peer.
    pub(crate) fn abort_reason(&self) -> AbortReason {
        match self {
            Self::PeerSilent => AbortReason::PeerSilent,
            Self::Refused(_) => AbortReason::Refused,
            Self::Storage(_) | Self::SourceChanged => AbortReason::Storage,
            Self::TooManyRounds(_) => AbortReason::TooManyRounds,
            Self::PeerAborted(r) => *r,
            Self::HashMismatch | Self::Protocol(_) => AbortReason::Protocol,
        }
    }

    /// The [`Abort`] that tells the peer of this failure.
    pub(crate) fn abort(&self) -> Control<'static> {
        Control::Abort(Abort {
            reason: self.abort_reason(),
        })
    }
}

/// What a finished transfer did (both sides report one).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TransferSummary {
    /// Payload bytes.
    pub size: u64,
    /// Data packets in the payload.
    pub packets: u64,
    /// Blasts, the first included.
    pub rounds: u32,
    /// Data datagrams sent (sender) or received, duplicates included
    /// (receiver).
    pub datagrams: u64,
    /// When the transfer began: [`RbudpSender::start`] for the sender, the
    /// Start message for the receiver.
    #[serde(skip)]
    pub started: crate::Instant,
    /// When it completed.
    #[serde(skip)]
    pub finished: crate::Instant,
    /// The BLAKE3 hash of the payload.
    #[serde(skip)]
    pub hash: Hash,
}

impl TransferSummary {
    /// Retransmission rounds: the paper's "number of NAKs" (a NAK that
    /// names nothing is the Done, not counted).
    pub fn nak_rounds(&self) -> u32 {
        self.rounds.saturating_sub(1)
    }

    /// How long the transfer took.
    pub fn elapsed(&self) -> Duration {
        self.finished.saturating_duration_since(self.started)
    }

    /// The payload over the time taken: the paper's "effective bandwidth".
    pub fn effective_rate(&self) -> Option<Bitrate> {
        let s = self.elapsed().as_secs_f64();
        (s > 0.0).then(|| Bitrate::bps((self.size as f64 * 8.0 / s) as u64))
    }
}

/// Packets of `packet_size` in `size` bytes (the last may be short).
pub(crate) fn packet_count(size: u64, packet_size: u32) -> u64 {
    size.div_ceil(u64::from(packet_size.max(1)))
}

/// Payload bytes of packet `index`.
pub(crate) fn packet_len(size: u64, packet_size: u32, index: u64) -> usize {
    let ps = u64::from(packet_size);
    let start = index.saturating_mul(ps);
    size.saturating_sub(start).min(ps) as usize
}

/// One bit per packet, set when the packet is in (receiver) or still to
/// send (sender).
#[derive(Clone, Debug, Default)]
pub(crate) struct Bitmap {
    words: Vec<u64>,
    len: u64,
    ones: u64,
}

impl Bitmap {
    /// `len` clear bits; `None` when they do not fit this machine's memory.
    pub(crate) fn new(len: u64) -> Option<Self> {
        let words = usize::try_from(len.div_ceil(64)).ok()?;
        let mut v = Vec::new();
        v.try_reserve_exact(words).ok()?;
        v.resize(words, 0);
        Some(Self {
            words: v,
            len,
            ones: 0,
        })
    }

    /// `len` bits from `words` (bit `i % 64` of word `i / 64`), bits past
    /// `len` cleared; `None` unless there are exactly enough words.
    pub(crate) fn from_words(len: u64, mut words: Vec<u64>) -> Option<Self> {
        if words.len() as u64 != len.div_ceil(64) {
            return None;
        }
        if let Some(last) = words.last_mut() {
            if len % 64 != 0 {
                *last &= (1u64 << (len % 64)) - 1;
            }
        }
        let ones = words.iter().map(|w| u64::from(w.count_ones())).sum();
        Some(Self { words, len, ones })
    }

    /// The bits, as [`from_words`](Self::from_words) takes them.
    pub(crate) fn words(&self) -> &[u64] {
        &self.words
    }

    pub(crate) fn ones(&self) -> u64 {
        self.ones
    }

    pub(crate) fn get(&self, i: u64) -> bool {
        i < self.len && self.words[(i / 64) as usize] & (1 << (i % 64)) != 0
    }

    /// Sets bit `i`; whether it was clear. Out of range: `false`.
    pub(crate) fn set(&mut self, i: u64) -> bool {
        if i >= self.len {
            return false;
        }
        let w = &mut self.words[(i / 64) as usize];
        let b = 1 << (i % 64);
        let was_clear = *w & b == 0;
        *w |= b;
        self.ones += u64::from(was_clear);
        was_clear
    }

    /// Clears every bit.
    pub(crate) fn clear(&mut self) {
        self.words.fill(0);
        self.ones = 0;
    }

    /// The first bit at or after `from` whose value is `value`.
    pub(crate) fn next(&self, from: u64, value: bool) -> Option<u64> {
        if from >= self.len {
            return None;
        }
        let mut w = (from / 64) as usize;
        let flip = if value { 0 } else { u64::MAX };
        let mut bits = (self.words[w] ^ flip) & (u64::MAX << (from % 64));
        loop {
            if bits != 0 {
                let i = w as u64 * 64 + u64::from(bits.trailing_zeros());
                return (i < self.len).then_some(i);
            }
            w += 1;
            bits = self.words.get(w)? ^ flip;
        }
    }
}
