//! [`RbudpReceiver`]: tallies a blast and answers each end-of-blast with
//! the list of what is missing (Leigh et al. §4.2).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;

use super::{
    Bitmap, BlastError, BlastSink, MAX_PACKET_SIZE, Partial, ResumeKey, TransferSummary,
    packet_count, packet_len, tree_hash::TreeHasher,
};
use crate::wire::rbudp::{
    Accept, Control, ControlRepr, DataRepr, Done, DoneStatus, EndOfBlast, Hash, MAX_LIST_BYTES,
    Missing, MissingList, RANGE_LEN, RESUME_ROUND, Start, push_gap_run, push_range,
};
use crate::{Instant, Machine, StreamMachine, Transmit, Transport};

/// How an [`RbudpReceiver`] is set up; [`ReceiverConfig::new`] gives the
/// defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReceiverConfig {
    /// The sender: datagrams and frames from anywhere else are counted as
    /// foreign and dropped.
    pub peer: SocketAddr,
    /// The session to take, or `None` for the first Start's.
    pub session: Option<u32>,
    /// The largest payload accepted, bytes.
    pub max_size: u64,
    /// The most packets accepted: the tally holds one bit per packet, so
    /// this bounds its memory (2^31 packets: 256 MiB).
    pub max_packets: u64,
    /// How long after the last datagram the answer to an end-of-blast
    /// waits, so datagrams queued behind the message are counted (the
    /// paper's receiver answers "after some timeout period").
    pub settle: Duration,
    /// With a transfer under way, how long without any datagram or frame
    /// from the sender before it fails with [`BlastError::PeerSilent`].
    pub idle_timeout: Duration,
    /// While packets of a resumable transfer arrive, how often the tally
    /// goes to [`BlastSink::checkpoint`] (also after every round and when
    /// the transfer stops unfinished).
    pub checkpoint_every: Duration,
}

impl ReceiverConfig {
    /// Defaults: any session, any size up to 2^31 packets, answers 5 ms
    /// after the last datagram, gives up after 90 s of silence (longer
    /// than a default sender's 63 s of repeats, so a live sender gives up
    /// first, with the clearer error, and tells this side), records a
    /// resumable transfer's progress every second.
    pub fn new(peer: SocketAddr) -> Self {
        Self {
            peer,
            session: None,
            max_size: u64::MAX,
            max_packets: 1 << 31,
            settle: Duration::from_millis(5),
            idle_timeout: Duration::from_secs(90),
            checkpoint_every: Duration::from_secs(1),
        }
    }
}

/// What an [`RbudpReceiver`] tells its application.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ReceiverEvent {
    /// A transfer was accepted.
    Started {
        /// Its session.
        session: u32,
        /// Payload bytes.
        size: u64,
        /// Bytes per packet.
        packet_size: u32,
        /// Packets already held from an interrupted transfer of the same
        /// payload (0 for a fresh start).
        held: u64,
        /// A partial of another payload or version was discarded (the
        /// file changed since the interrupted transfer).
        discarded: bool,
    },
    /// A blast was answered with a missing list.
    Answered {
        /// The round.
        round: u32,
        /// Packets still missing.
        missing: u64,
        /// Datagrams of the round that arrived.
        arrived: u64,
    },
    /// Every packet is stored and the hash matches the sender's.
    Complete(TransferSummary),
    /// The transfer failed; nothing more will happen.
    Failed(BlastError),
}

/// What an [`RbudpReceiver`] took and dropped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ReceiverStats {
    /// Data datagrams that arrived from the sender in this session.
    pub datagrams: u64,
    /// Packets stored (each once).
    pub stored: u64,
    /// Datagrams of a packet already stored.
    pub duplicates: u64,
    /// Datagrams of a round already answered (counted as data all the same).
    pub late: u64,
    /// Datagrams before the Start, or after the end.
    pub early_or_after: u64,
    /// Datagrams naming a packet past the end, or of the wrong length for
    /// their packet.
    pub out_of_range: u64,
    /// Datagrams and frames that do not parse.
    pub malformed: u64,
    /// Datagrams and frames from another address or session.
    pub foreign: u64,
    /// Control messages that repeat or come out of place.
    pub stale: u64,
    /// Missing-list chunks sent.
    pub chunks: u64,
}

/// One chunk of a missing list, built ([`MissingList`] borrows it).
#[derive(Debug)]
enum Chunk {
    Ranges(Vec<u8>),
    Bitmap {
        base: u64,
        bits: u32,
        bytes: Vec<u8>,
    },
    Gaps {
        base: u64,
        runs: u32,
        bytes: Vec<u8>,
    },
}

/// One round's arrivals, for the sender's adaptive rate.
#[derive(Clone, Copy, Debug, Default)]
struct Arrivals {
    count: u64,
    bytes: u64,
    first: Option<Instant>,
    last: Instant,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Listening,
    Receiving,
    Over,
}

/// The receiving side of Reliable Blast UDP (Leigh et al. §4.2).
///
/// - Getters: [`stats`](Self::stats), [`sink`](Self::sink),
///   [`missing`](Self::missing), [`is_over`](Self::is_over).
/// - Input: [`handle_frame`](StreamMachine::handle_frame) (Start,
///   end-of-blast, Abort from the sender's control stream),
///   [`handle_datagram`](Machine::handle_datagram) (data),
///   [`handle_timeout`](Machine::handle_timeout) (the settled answer, the
///   idle timeout). Every input is safe in every state.
/// - Output: [`poll_transmit`](Machine::poll_transmit) gives control
///   frames only ([`Transport::TcpFrame`]: Accept, the missing list, Done,
///   Abort); then [`poll_event`](Machine::poll_event) and
///   [`poll_timeout`](Machine::poll_timeout).
///
/// Packets go to the [`BlastSink`] as they arrive, in any order; the tally
/// (one bit per packet) is the only state that grows with the payload. The
/// BLAKE3 hash is computed a segment at a time as each segment's last
/// packet is stored, read back from the sink (so it checks what the sink
/// kept), and merged along BLAKE3's tree at the end: only the segments the
/// last round completes are hashed between the last datagram and the Done
/// (beyond the paper, whose receiver has no hash; see `tree_hash`).
#[derive(Debug)]
pub struct RbudpReceiver<K: BlastSink> {
    cfg: ReceiverConfig,
    sink: K,
    state: State,
    start: Option<(u32, Start)>,
    packets: u64,
    tally: Bitmap,
    hasher: TreeHasher,
    /// A resumable transfer's key, and when its tally was last recorded.
    resume: Option<(ResumeKey, Instant)>,
    /// Resumed with part of the payload held: the Accept is followed by
    /// the list of what is missing.
    resumed: bool,
    sender_hash: Option<Hash>,
    answered: Option<u32>,
    /// A round to answer, and when.
    answer: Option<(u32, Instant)>,
    arrivals: Arrivals,
    /// When the last datagram came.
    last_data: Instant,
    last_input: Instant,
    done: Option<Bytes>,
    started: Instant,
    out: VecDeque<Transmit>,
    events: VecDeque<ReceiverEvent>,
    stats: ReceiverStats,
}

impl<K: BlastSink> RbudpReceiver<K> {
    /// A receiver that stores into `sink`, waiting for a Start.
    pub fn new(cfg: ReceiverConfig, sink: K) -> Self {
        Self {
            cfg,
            sink,
            state: State::Listening,
            start: None,
            packets: 0,
            tally: Bitmap::default(),
            hasher: TreeHasher::default(),
            resume: None,
            resumed: false,
            sender_hash: None,
            answered: None,
            answer: None,
            arrivals: Arrivals::default(),
            last_data: Instant::ZERO,
            last_input: Instant::ZERO,
            done: None,
            started: Instant::ZERO,
            out: VecDeque::new(),
            events: VecDeque::new(),
            stats: ReceiverStats::default(),
        }
    }

    /// Counters.
    pub fn stats(&self) -> ReceiverStats {
        self.stats
    }

    /// The sink.
    pub fn sink(&self) -> &K {
        &self.sink
    }

    /// Packets not yet stored (0 before a Start).
    pub fn missing(&self) -> u64 {
        self.packets - self.tally.ones()
    }

    /// Whether the transfer is over (complete, failed or refused).
    pub fn is_over(&self) -> bool {
        self.state == State::Over
    }

    /// The payload's size and bytes per packet, once a Start came in.
    pub fn transfer(&self) -> Option<(u64, u32)> {
        self.start.map(|(_, s)| (s.size, s.packet_size))
    }

    /// The blast now arriving: 0 for the first, one more after each
    /// missing list sent.
    pub fn round(&self) -> u32 {
        self.answered.map_or(0, |a| a.saturating_add(1))
    }

    /// Ends the machine, giving back its sink.
    pub fn into_sink(self) -> K {
        self.sink
    }

    /// Records which packets are stored, for a later resume
    /// ([`BlastSink::checkpoint`]), if the transfer is resumable. The
    /// machine does this itself about once a second, after each round and
    /// when it fails; a driver that abandons a transfer the machine still
    /// thinks is under way (its connection dropped) calls it once more.
    pub fn checkpoint(&mut self, now: Instant) -> std::io::Result<()> {
        let Some((key, at)) = &mut self.resume else {
            return Ok(());
        };
        // Only a transfer under way (a failing one records before it is
        // over); nothing yet is nothing to resume; everything is a
        // transfer about to complete (or one whose hash is being checked).
        if self.state != State::Receiving
            || self.tally.ones() == 0
            || self.tally.ones() == self.packets
        {
            return Ok(());
        }
        *at = now;
        self.sink.checkpoint(key, self.tally.words())
    }

    fn session(&self) -> u32 {
        self.start.map_or(0, |(s, _)| s)
    }

    fn control(&mut self, msg: Control<'_>) -> Bytes {
        let bytes = Bytes::from(
            ControlRepr {
                session: self.session(),
                msg,
            }
            .to_vec(),
        );
        self.out.push_back(Transmit {
            dst: self.cfg.peer,
            transport: Transport::FRAME,
            payload: bytes.clone(),
        });
        bytes
    }

    fn fail(&mut self, err: BlastError, tell_peer: bool) {
        if self.state == State::Over {
            return;
        }
        if tell_peer {
            self.control(err.abort());
        }
        // Keep what arrived for a resume; a failure to record it is
        // secondary to the error at hand.
        let _ = self.checkpoint(self.last_input);
        self.state = State::Over;
        self.answer = None;
        self.events.push_back(ReceiverEvent::Failed(err));
    }

    fn on_start(&mut self, now: Instant, session: u32, s: Start) {
        if let Some((had, start)) = self.start {
            if had == session && start == s && self.state == State::Receiving {
                // The sender repeated its Start: our Accept was slow.
                self.stats.stale += 1;
                self.accept(&s);
            } else {
                self.stats.stale += 1;
            }
            return;
        }
        if self.cfg.session.is_some_and(|want| want != session) {
            self.stats.foreign += 1;
            return;
        }
        self.start = Some((session, s));
        self.started = now;
        let packets = packet_count(s.size, s.packet_size);
        let refuse = if !(1..=MAX_PACKET_SIZE).contains(&s.packet_size) {
            Some(format!(
                "packet size {} is not 1 to {MAX_PACKET_SIZE}",
                s.packet_size
            ))
        } else if s.size > self.cfg.max_size {
            Some(format!(
                "{} bytes is more than the {} allowed",
                s.size, self.cfg.max_size
            ))
        } else if packets > self.cfg.max_packets {
            Some(format!(
                "{packets} packets is more than the {} allowed",
                self.cfg.max_packets
            ))
        } else {
            None
        };
        if let Some(why) = refuse {
            self.fail(BlastError::Refused(why), true);
            return;
        }
        let key = s.version.map(|version| ResumeKey {
            size: s.size,
            packet_size: s.packet_size,
            version,
        });
        let partial = match key.map(|k| self.sink.resume(&k)) {
            None => Partial::None,
            Some(Ok(p)) => p,
            Some(Err(e)) => {
                self.fail(BlastError::Storage(e.to_string()), true);
                return;
            }
        };
        let discarded = partial == Partial::Discarded;
        // A held tally of the wrong length is not this payload's: start over.
        let held = match partial {
            Partial::Held(words) => Bitmap::from_words(packets, words),
            _ => None,
        };
        self.resumed = held.is_some();
        let tally = match held {
            Some(t) => t,
            None => {
                let Some(t) = Bitmap::new(packets) else {
                    self.fail(BlastError::Refused("no memory for the tally".into()), true);
                    return;
                };
                if let Err(e) = self.sink.prepare(s.size) {
                    self.fail(BlastError::Storage(e.to_string()), true);
                    return;
                }
                t
            }
        };
        self.hasher = TreeHasher::new(s.size);
        if self.resumed {
            // What is held counts toward its segments; they are hashed
            // (read back) at the end.
            let mut i = 0;
            while let Some(p) = tally.next(i, true) {
                let offset = p * u64::from(s.packet_size);
                self.hasher
                    .stored(offset, packet_len(s.size, s.packet_size, p) as u64);
                i = p + 1;
            }
            self.hasher.forget_ready();
        }
        self.tally = tally;
        self.resume = key.map(|k| (k, now));
        self.packets = packets;
        self.sender_hash = s.hash;
        self.state = State::Receiving;
        self.accept(&s);
        self.events.push_back(ReceiverEvent::Started {
            session,
            size: s.size,
            packet_size: s.packet_size,
            held: self.tally.ones(),
            discarded,
        });
    }

    /// Accepts `s`; resuming, follows with what is missing
    /// ([`RESUME_ROUND`]), so the first blast sends only that.
    fn accept(&mut self, s: &Start) {
        self.control(Control::Accept(Accept {
            packet_size: s.packet_size,
            size: s.size,
            resumed: self.resumed,
        }));
        if self.resumed {
            self.send_lists(RESUME_ROUND, Arrivals::default());
        }
    }

    fn on_end_of_blast(&mut self, now: Instant, e: EndOfBlast) {
        if self.state == State::Over {
            // The sender missed our Done (or our Abort): say it again.
            self.stats.stale += 1;
            if let Some(done) = self.done.clone() {
                self.out.push_back(Transmit {
                    dst: self.cfg.peer,
                    transport: Transport::FRAME,
                    payload: done,
                });
            }
            return;
        }
        if self.state != State::Receiving {
            self.stats.stale += 1;
            return;
        }
        if let Some(h) = e.hash {
            if self.sender_hash.is_some_and(|had| had != h) {
                self.fail(
                    BlastError::Protocol("the sender's hash changed".into()),
                    true,
                );
                return;
            }
            self.sender_hash = Some(h);
        }
        if self.answered.is_some_and(|a| e.round < a) {
            self.stats.stale += 1;
            return;
        }
        if self.answered == Some(e.round) || self.answer.is_some_and(|(r, _)| r == e.round) {
            self.stats.stale += 1;
        }
        // Answer once no datagram has come for `settle`: stragglers of the
        // blast may still be behind the message.
        let at = now.max(self.last_data.saturating_add(self.cfg.settle));
        self.answer = Some((e.round, at));
    }

    fn on_data(&mut self, now: Instant, d: &DataRepr<'_>) {
        if self.state != State::Receiving {
            self.stats.early_or_after += 1;
            return;
        }
        let Some((session, start)) = self.start else {
            return;
        };
        if d.session != session {
            self.stats.foreign += 1;
            return;
        }
        self.last_input = now;
        self.last_data = now;
        if d.index >= self.packets
            || d.payload.len() != packet_len(start.size, start.packet_size, d.index)
        {
            self.stats.out_of_range += 1;
            return;
        }
        self.stats.datagrams += 1;
        let current = self.answered.map_or(0, |a| a + 1);
        if d.round >= current {
            let a = &mut self.arrivals;
            a.count += 1;
            a.bytes += (crate::wire::rbudp::DATA_HEADER_LEN + d.payload.len()) as u64;
            a.first.get_or_insert(now);
            a.last = now;
        } else {
            self.stats.late += 1;
        }
        if let Some((round, at)) = self.answer {
            // Still arriving: the answer waits for the blast to settle.
            self.answer = Some((round, at.max(now + self.cfg.settle)));
        }
        if self.tally.get(d.index) {
            self.stats.duplicates += 1;
            return;
        }
        let offset = d.index * u64::from(start.packet_size);
        if let Err(e) = self.sink.write_at(offset, d.payload) {
            self.fail(BlastError::Storage(e.to_string()), true);
            return;
        }
        self.tally.set(d.index);
        self.stats.stored += 1;
        self.hasher.stored(offset, d.payload.len() as u64);
        let sink = &mut self.sink;
        if let Err(e) = self.hasher.hash_ready(&mut |at, buf| sink.read_at(at, buf)) {
            self.fail(BlastError::Storage(e.to_string()), true);
            return;
        }
        let due = self
            .resume
            .is_some_and(|(_, at)| at.saturating_add(self.cfg.checkpoint_every) <= now);
        if due {
            if let Err(e) = self.checkpoint(now) {
                self.fail(BlastError::Storage(e.to_string()), true);
            }
        }
    }

    fn answer(&mut self, now: Instant, round: u32) {
        self.answer = None;
        if self.tally.ones() == self.packets {
            self.finish(now, round);
            return;
        }
        if let Err(e) = self.checkpoint(now) {
            self.fail(BlastError::Storage(e.to_string()), true);
            return;
        }
        let a = self.arrivals;
        self.send_lists(round, a);
        if self.answered.is_none_or(|r| round > r) {
            self.answered = Some(round);
            self.events.push_back(ReceiverEvent::Answered {
                round,
                missing: self.missing(),
                arrived: a.count,
            });
            self.arrivals = Arrivals::default();
        }
    }

    /// Sends the list of what is missing after `round`, with the round's
    /// arrivals, in chunks (one empty chunk if nothing is missing).
    fn send_lists(&mut self, round: u32, a: Arrivals) {
        let span_us = a.first.map_or(0, |f| {
            a.last.saturating_duration_since(f).as_micros() as u64
        });
        let total = self.missing();
        let mut lists = self.missing_lists();
        if lists.is_empty() {
            lists.push(Chunk::Ranges(Vec::new()));
        }
        let n = lists.len();
        for (seq, chunk) in lists.iter().enumerate() {
            let list = match chunk {
                Chunk::Ranges(bytes) => MissingList::Ranges { bytes },
                Chunk::Bitmap { base, bits, bytes } => MissingList::Bitmap {
                    base: *base,
                    bits: *bits,
                    bytes,
                },
                Chunk::Gaps { base, runs, bytes } => MissingList::Gaps {
                    base: *base,
                    runs: *runs,
                    bytes,
                },
            };
            self.control(Control::Missing(Missing {
                round,
                seq: seq as u32,
                last: seq + 1 == n,
                arrived: a.count,
                arrived_bytes: a.bytes,
                span_us,
                total,
                list,
            }));
            self.stats.chunks += 1;
        }
    }

    /// The missing packets as chunks, one for each window of
    /// [`MAX_LIST_BYTES`]` · 8` packets that has a missing packet, each in
    /// whichever of the three list forms is shortest.
    fn missing_lists(&self) -> Vec<Chunk> {
        let window = MAX_LIST_BYTES as u64 * 8;
        let mut out = Vec::new();
        let mut from = 0;
        while let Some(first) = self.tally.next(from, false) {
            let end = (first + window).min(self.packets);
            let (mut ranges, mut gaps) = (Vec::new(), Vec::new());
            let (mut runs, mut gap_end) = (0u32, first);
            let mut last = first;
            let mut i = first;
            while let Some(s) = self.tally.next(i, false).filter(|&s| s < end) {
                let e = self.tally.next(s, true).unwrap_or(self.packets).min(end);
                // Past a chunk's length a form has lost; stop growing it.
                if ranges.len() <= MAX_LIST_BYTES {
                    // A window is at most 2^18 packets: one u32 length each.
                    push_range(&mut ranges, s, (e - s) as u32);
                }
                if gaps.len() <= MAX_LIST_BYTES {
                    push_gap_run(&mut gaps, &mut gap_end, s, e - s);
                    runs += 1;
                }
                last = e - 1;
                i = e;
            }
            let bits = last - first + 1;
            let bitmap_len = bits.div_ceil(8) as usize;
            if gaps.len() <= ranges.len().min(bitmap_len) {
                out.push(Chunk::Gaps {
                    base: first,
                    runs,
                    bytes: gaps,
                });
            } else if ranges.len() <= bitmap_len {
                debug_assert_eq!(ranges.len() % RANGE_LEN, 0);
                out.push(Chunk::Ranges(ranges));
            } else {
                let mut bytes = vec![0u8; bitmap_len];
                for j in 0..bits {
                    if !self.tally.get(first + j) {
                        bytes[(j / 8) as usize] |= 0x80 >> (j % 8);
                    }
                }
                out.push(Chunk::Bitmap {
                    base: first,
                    bits: bits as u32,
                    bytes,
                });
            }
            from = end;
        }
        out
    }

    fn finish(&mut self, now: Instant, round: u32) {
        let Some((_, start)) = self.start else {
            return;
        };
        let Some(theirs) = self.sender_hash else {
            self.fail(
                BlastError::Protocol("every packet is in but the sender sent no hash".into()),
                true,
            );
            return;
        };
        let sink = &mut self.sink;
        let ours = match self.hasher.finish(&mut |at, buf| sink.read_at(at, buf)) {
            Ok(h) => h,
            Err(e) => {
                self.fail(BlastError::Storage(e.to_string()), true);
                return;
            }
        };
        let status = if ours == theirs {
            DoneStatus::Ok
        } else {
            DoneStatus::HashMismatch
        };
        let done = self.control(Control::Done(Done { status, hash: ours }));
        self.done = Some(done);
        self.answered = Some(round);
        if self.resume.is_some() {
            // Whole and checked, or whole and wrong (what was held cannot
            // be trusted): either way nothing is left to resume. A record
            // that cannot be removed is harmless: a transfer that resumes
            // from it finds everything held and checks the hash again.
            let _ = self.sink.completed();
        }
        if status == DoneStatus::Ok {
            self.state = State::Over;
            self.events
                .push_back(ReceiverEvent::Complete(TransferSummary {
                    size: start.size,
                    packets: self.packets,
                    rounds: round + 1,
                    datagrams: self.stats.datagrams,
                    started: self.started,
                    finished: now,
                    hash: ours,
                }));
        } else {
            self.fail(BlastError::HashMismatch, false);
        }
    }
}

impl<K: BlastSink> Machine for RbudpReceiver<K> {
    type Event = ReceiverEvent;

    /// Takes a data datagram: stores a new packet, counts a repeat, drops
    /// anything from elsewhere, of another session, malformed or past the
    /// end (each counted). Safe in any state.
    fn handle_datagram(&mut self, now: Instant, src: SocketAddr, data: &[u8]) {
        if src != self.cfg.peer {
            self.stats.foreign += 1;
            return;
        }
        match DataRepr::parse(data) {
            Ok(d) => self.on_data(now, &d),
            Err(_) => self.stats.malformed += 1,
        }
    }

    /// Answers a settled end-of-blast; fails after
    /// [`ReceiverConfig::idle_timeout`] of silence. Early calls do nothing.
    fn handle_timeout(&mut self, now: Instant) {
        if self.state != State::Receiving {
            return;
        }
        if let Some((round, at)) = self.answer {
            if at <= now {
                self.answer(now, round);
            }
        }
        if self.state == State::Receiving
            && self.last_input.saturating_add(self.cfg.idle_timeout) <= now
        {
            self.fail(BlastError::PeerSilent, true);
        }
    }

    fn poll_transmit(&mut self, _now: Instant) -> Option<Transmit> {
        self.out.pop_front()
    }

    fn poll_event(&mut self) -> Option<ReceiverEvent> {
        self.events.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        if self.state != State::Receiving {
            return None;
        }
        let idle = self.last_input.saturating_add(self.cfg.idle_timeout);
        Some(self.answer.map_or(idle, |(_, at)| at.min(idle)))
    }
}

impl<K: BlastSink> StreamMachine for RbudpReceiver<K> {
    /// Takes Start, end-of-blast and Abort from the sender. A repeated
    /// Start is answered with the Accept again, a repeated end-of-blast with
    /// the list (or the Done) again; an end-of-blast older than the last
    /// answered is dropped. Safe in any state.
    fn handle_frame(&mut self, now: Instant, src: SocketAddr, _stream: u8, frame: &[u8]) {
        if src != self.cfg.peer {
            self.stats.foreign += 1;
            return;
        }
        let r = match ControlRepr::parse(frame) {
            Ok(r) => r,
            Err(_) => {
                self.stats.malformed += 1;
                return;
            }
        };
        if let Control::Start(s) = r.msg {
            self.last_input = now;
            self.on_start(now, r.session, s);
            return;
        }
        if self.start.is_none_or(|(s, _)| s != r.session) {
            self.stats.foreign += 1;
            return;
        }
        self.last_input = now;
        match r.msg {
            Control::EndOfBlast(e) => self.on_end_of_blast(now, e),
            Control::Abort(a) => self.fail(BlastError::PeerAborted(a.reason), false),
            _ => self.stats.stale += 1,
        }
    }
}
