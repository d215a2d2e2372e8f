//! [`RbudpSender`]: blasts a payload and re-blasts what the receiver
//! reports missing (Leigh et al. §4.2).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;

use super::{
    Bitmap, BlastError, BlastSource, DEFAULT_PACKET_SIZE, MAX_PACKET_SIZE, TransferSummary,
    packet_count, packet_len, tree_hash::hash_range,
};
use crate::units::IP_UDP_OVERHEAD;
use crate::wire::rbudp::{
    Abort, Accept, Control, ControlRepr, DATA_HEADER_LEN, DataRepr, Done, DoneStatus, EndOfBlast,
    Hash, Missing, RESUME_ROUND, Start,
};
use crate::{Bitrate, Instant, Machine, StreamMachine, Transmit, Transport};

/// How the sender chooses each blast's rate.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum RateControl {
    /// Every blast at [`SenderConfig::rate`]: the paper's scheme, where the
    /// user picks a rate "just below the available bandwidth".
    Fixed,
    /// Beyond the paper: the first blast at [`SenderConfig::rate`]; after a
    /// blast that lost at least `min_loss` of its datagrams, the path's
    /// capacity is taken to be the rate at which that blast arrived (the
    /// receiver measures it), and the following blasts go at `1 - margin`
    /// of it (never faster than before). A blast that overran the
    /// bottleneck arrives at the rate the bottleneck left it, so this is
    /// the rate the path could carry while it was busy.
    Adaptive {
        /// How far below the measured arrival rate to send (0.05: 5%).
        margin: f64,
        /// The loss below which a blast is taken not to have overrun the
        /// path, and the rate is kept.
        min_loss: f64,
    },
}

impl RateControl {
    /// [`RateControl::Adaptive`] with a 5% margin below the measured rate,
    /// acting on blasts that lost 1% or more.
    pub const fn adaptive() -> Self {
        Self::Adaptive {
            margin: 0.05,
            min_loss: 0.01,
        }
    }
}

/// How an [`RbudpSender`] is set up; [`SenderConfig::new`] gives the defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct SenderConfig {
    /// The receiver (data datagrams and control frames both go there).
    pub peer: SocketAddr,
    /// The transfer's session id (every message carries it).
    pub session: u32,
    /// Payload bytes per data packet.
    pub packet_size: u32,
    /// The first blast's rate, counted on the wire (IP and UDP headers
    /// included), so a 90 Mbit/s blast takes 90 Mbit/s of a link.
    pub rate: Bitrate,
    /// Fixed or adaptive rate.
    pub rate_control: RateControl,
    /// The payload's BLAKE3 hash, if known before the transfer (it then
    /// goes in the Start, and a payload that reads differently fails with
    /// [`BlastError::SourceChanged`]); otherwise the sender computes it
    /// while reading the first blast.
    pub hash: Option<Hash>,
    /// The payload's version (for a file: from its length and modification
    /// time), which makes the transfer resumable: a receiver still holding
    /// part of the same version from an interrupted transfer sends its
    /// list of what is missing, and the first blast sends only that.
    /// Resumed, the sender reads the whole payload once more for its hash
    /// (after that blast). `None`: never resumed.
    pub version: Option<u64>,
    /// The least time to wait for an answer (Accept, missing list, Done)
    /// before asking again; the wait is at least 4 measured round trips and
    /// doubles with every retry.
    pub response_timeout: Duration,
    /// Repeats of an unanswered Start or end-of-blast before the transfer
    /// fails with [`BlastError::PeerSilent`].
    pub max_retries: u32,
    /// Blasts after which an unfinished transfer fails
    /// ([`BlastError::TooManyRounds`]).
    pub max_rounds: u32,
}

impl SenderConfig {
    /// Defaults: session 1, [`DEFAULT_PACKET_SIZE`], a fixed rate,
    /// no known hash, not resumable, answers awaited at least 1 s and asked for 5 more
    /// times (1 + 2 + 4 + 8 + 16 + 32 s of silence in all), at most 1000
    /// blasts.
    pub fn new(peer: SocketAddr, rate: Bitrate) -> Self {
        Self {
            peer,
            session: 1,
            packet_size: DEFAULT_PACKET_SIZE,
            rate,
            rate_control: RateControl::Fixed,
            hash: None,
            version: None,
            response_timeout: Duration::from_secs(1),
            max_retries: 5,
            max_rounds: 1000,
        }
    }
}

/// What an [`RbudpSender`] tells its application.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum SenderEvent {
    /// The receiver accepted; the first blast begins.
    Accepted {
        /// From the Start to the Accept.
        rtt: Duration,
    },
    /// The receiver holds part of the payload from an interrupted
    /// transfer: the first blast sends only the rest.
    Resuming {
        /// Packets the receiver already holds.
        held: u64,
        /// Packets the first blast sends.
        missing: u64,
    },
    /// A blast ended; its end-of-blast message is on its way.
    BlastEnded {
        /// Which (0 for the first).
        round: u32,
        /// Datagrams it sent.
        sent: u64,
        /// At what rate.
        rate: Bitrate,
    },
    /// The receiver's missing list for a round is in.
    Missing {
        /// The round it answers.
        round: u32,
        /// Packets to send again.
        missing: u64,
        /// Datagrams of the round that arrived.
        arrived: u64,
        /// The rate they arrived at, when the receiver could measure it.
        arrival_rate: Option<Bitrate>,
        /// The rate of the next blast.
        next_rate: Bitrate,
    },
    /// Every packet arrived and the receiver's hash matches.
    Complete(TransferSummary),
    /// The transfer failed; nothing more will happen.
    Failed(BlastError),
}

/// What an [`RbudpSender`] sent and dropped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SenderStats {
    /// Data datagrams sent.
    pub datagrams: u64,
    /// Their bytes (our header included, IP and UDP not).
    pub bytes: u64,
    /// Of those, datagrams in blasts after the first.
    pub retransmitted: u64,
    /// Control frames sent.
    pub control_sent: u64,
    /// Start or end-of-blast messages sent again after a timeout.
    pub repeated: u64,
    /// Control frames that did not parse.
    pub malformed: u64,
    /// Messages of another session or from another address, and UDP
    /// datagrams (the sender expects none).
    pub foreign: u64,
    /// Control messages that repeat or answer something already handled.
    pub stale: u64,
}

/// The slack the pacer allows a late driver: after a wake-up this late it
/// sends what it owes at once, but never more than this much of sending
/// in one burst, so a stalled driver does not flood the path's queues.
const PACING_SLACK: Duration = Duration::from_millis(2);
/// Arrivals a blast needs before its arrival rate counts for the adaptive
/// rate.
const MIN_ARRIVALS: u64 = 32;
/// The adaptive rate never goes below this fraction of the first blast's.
const MIN_RATE_FRACTION: f64 = 0.01;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Not started.
    Idle,
    /// Start sent, waiting for Accept.
    Opening,
    /// Accepted as a resume, waiting for the list of what is missing.
    Resuming,
    /// Sending a blast.
    Blasting,
    /// End-of-blast sent, waiting for the missing list or Done.
    Waiting,
    /// Finished or failed.
    Over,
}

/// The sending side of Reliable Blast UDP (Leigh et al. §4.2).
///
/// - Getters: [`stats`](Self::stats), [`rate`](Self::rate),
///   [`round`](Self::round), [`is_over`](Self::is_over), [`source`](Self::source).
/// - Commands: [`start`](Self::start) (once), [`cancel`](Self::cancel).
/// - Input: [`handle_frame`](StreamMachine::handle_frame) for the control
///   stream; [`handle_datagram`](Machine::handle_datagram) takes nothing
///   (counted as foreign); [`handle_timeout`](Machine::handle_timeout).
/// - Output: [`poll_transmit`](Machine::poll_transmit) gives control
///   frames ([`Transport::TcpFrame`]) first, then the blast's data
///   datagrams ([`Transport::Udp`]) one at a time at the pacing rate: call
///   it until `None`, then wake at [`poll_timeout`](Machine::poll_timeout)
///   (the next datagram's time while blasting, an answer's deadline while
///   waiting).
#[derive(Debug)]
pub struct RbudpSender<S: BlastSource> {
    cfg: SenderConfig,
    source: S,
    size: u64,
    packets: u64,
    state: State,
    round: u32,
    rate: Bitrate,
    /// The next packet index to look at in this blast.
    cursor: u64,
    sent_in_round: u64,
    next_at: Instant,
    /// Packets to send in this blast (rounds after the first, and the
    /// first of a resumed transfer).
    todo: Option<Bitmap>,
    /// The receiver held part of the payload: the first blast sends only
    /// what it lacked, and the hash is read separately.
    resumed: bool,
    hasher: Option<blake3::Hasher>,
    hash: Option<Hash>,
    /// The next chunk of the missing list expected.
    list_seq: u32,
    /// The request an answer is awaited for, to repeat on a timeout.
    request: Option<Bytes>,
    request_at: Instant,
    deadline: Option<Instant>,
    retries: u32,
    timeout: Duration,
    rtt: Option<Duration>,
    started: Instant,
    out: VecDeque<Transmit>,
    events: VecDeque<SenderEvent>,
    stats: SenderStats,
}

impl<S: BlastSource> RbudpSender<S> {
    /// A sender of `source`'s payload. Nothing happens until
    /// [`start`](Self::start). A packet size of 0 or above
    /// [`MAX_PACKET_SIZE`] is clamped into range.
    pub fn new(mut cfg: SenderConfig, source: S) -> Self {
        cfg.packet_size = cfg.packet_size.clamp(1, MAX_PACKET_SIZE);
        let size = source.len();
        Self {
            packets: packet_count(size, cfg.packet_size),
            size,
            rate: cfg.rate,
            timeout: cfg.response_timeout,
            source,
            state: State::Idle,
            round: 0,
            cursor: 0,
            sent_in_round: 0,
            next_at: Instant::ZERO,
            todo: None,
            resumed: false,
            hasher: Some(blake3::Hasher::new()),
            hash: None,
            list_seq: 0,
            request: None,
            request_at: Instant::ZERO,
            deadline: None,
            retries: 0,
            rtt: None,
            started: Instant::ZERO,
            out: VecDeque::new(),
            events: VecDeque::new(),
            stats: SenderStats::default(),
            cfg,
        }
    }

    /// Counters.
    pub fn stats(&self) -> SenderStats {
        self.stats
    }

    /// The current blast rate.
    pub fn rate(&self) -> Bitrate {
        self.rate
    }

    /// The current blast (0 for the first).
    pub fn round(&self) -> u32 {
        self.round
    }

    /// Whether the transfer is over (complete or failed).
    pub fn is_over(&self) -> bool {
        self.state == State::Over
    }

    /// The payload's source.
    pub fn source(&self) -> &S {
        &self.source
    }

    /// Opens the transfer: sends the Start and waits for the Accept. A
    /// second call does nothing.
    pub fn start(&mut self, now: Instant) {
        if self.state != State::Idle {
            return;
        }
        self.started = now;
        self.state = State::Opening;
        let start = Control::Start(Start {
            packet_size: self.cfg.packet_size,
            size: self.size,
            rate_bps: self.rate.as_bps(),
            hash: self.cfg.hash,
            version: self.cfg.version,
        });
        self.request(now, start);
    }

    /// Abandons the transfer, telling the receiver (an
    /// [`AbortReason::Cancelled`](crate::wire::rbudp::AbortReason::Cancelled)).
    /// No event follows.
    pub fn cancel(&mut self, _now: Instant) {
        if matches!(self.state, State::Idle | State::Over) {
            self.state = State::Over;
            return;
        }
        self.control(Control::Abort(Abort {
            reason: crate::wire::rbudp::AbortReason::Cancelled,
        }));
        self.state = State::Over;
        self.deadline = None;
    }

    fn control(&mut self, msg: Control<'_>) -> Bytes {
        let bytes = Bytes::from(
            ControlRepr {
                session: self.cfg.session,
                msg,
            }
            .to_vec(),
        );
        self.stats.control_sent += 1;
        self.out.push_back(Transmit {
            dst: self.cfg.peer,
            transport: Transport::FRAME,
            payload: bytes.clone(),
        });
        bytes
    }

    /// Sends `msg` and awaits its answer.
    fn request(&mut self, now: Instant, msg: Control<'_>) {
        let bytes = self.control(msg);
        self.request = Some(bytes);
        self.request_at = now;
        self.retries = 0;
        self.timeout = self.answer_wait();
        self.deadline = Some(now.saturating_add(self.timeout));
    }

    fn answer_wait(&self) -> Duration {
        self.cfg
            .response_timeout
            .max(self.rtt.map_or(Duration::ZERO, |r| r * 4))
    }

    fn fail(&mut self, err: BlastError, tell_peer: bool) {
        if self.state == State::Over {
            return;
        }
        if tell_peer {
            self.control(err.abort());
        }
        self.state = State::Over;
        self.deadline = None;
        self.events.push_back(SenderEvent::Failed(err));
    }

    /// The next packet of this blast at or after the cursor.
    fn next_packet(&self) -> Option<u64> {
        match &self.todo {
            _ if self.round == 0 && !self.resumed => {
                (self.cursor < self.packets).then_some(self.cursor)
            }
            Some(todo) => todo.next(self.cursor, true),
            None => None,
        }
    }

    /// Builds the datagram of packet `index`, or fails the transfer.
    fn datagram(&mut self, index: u64) -> Option<Bytes> {
        let len = packet_len(self.size, self.cfg.packet_size, index);
        let mut buf = vec![0u8; DATA_HEADER_LEN + len];
        DataRepr {
            session: self.cfg.session,
            round: self.round,
            index,
            payload: &[],
        }
        .emit_header(&mut buf[..DATA_HEADER_LEN]);
        let offset = index * u64::from(self.cfg.packet_size);
        if let Err(e) = self.source.read_at(offset, &mut buf[DATA_HEADER_LEN..]) {
            self.fail(BlastError::Storage(e.to_string()), true);
            return None;
        }
        // The first blast reads every packet in order: hash as it goes.
        if self.round == 0 && !self.resumed {
            if let Some(h) = &mut self.hasher {
                h.update(&buf[DATA_HEADER_LEN..]);
            }
        }
        Some(Bytes::from(buf))
    }

    /// The blast has sent everything: end it and await the answer.
    fn end_blast(&mut self, now: Instant) {
        if self.round == 0 && self.resumed && self.hash.is_none() {
            // The blast read only what the receiver lacked.
            match self.cfg.hash.map_or_else(|| self.hash_source(), Ok) {
                Ok(h) => self.hash = Some(h),
                Err(e) => {
                    self.fail(BlastError::Storage(e.to_string()), true);
                    return;
                }
            }
        } else if self.round == 0 {
            let hash = *self.hasher.take().unwrap_or_default().finalize().as_bytes();
            if self.cfg.hash.is_some_and(|given| given != hash) {
                self.fail(BlastError::SourceChanged, true);
                return;
            }
            self.hash = Some(hash);
        }
        self.events.push_back(SenderEvent::BlastEnded {
            round: self.round,
            sent: self.sent_in_round,
            rate: self.rate,
        });
        self.state = State::Waiting;
        self.list_seq = 0;
        if let Some(t) = &mut self.todo {
            t.clear();
        }
        let eob = Control::EndOfBlast(EndOfBlast {
            round: self.round,
            sent: self.sent_in_round,
            hash: self.hash,
        });
        self.request(now, eob);
    }

    /// The payload's hash, read from the source in one pass.
    fn hash_source(&mut self) -> std::io::Result<Hash> {
        let mut h = blake3::Hasher::new();
        let source = &mut self.source;
        let mut read = |at, buf: &mut [u8]| source.read_at(at, buf);
        hash_range(&mut h, 0, self.size, &mut Vec::new(), &mut read)?;
        Ok(*h.finalize().as_bytes())
    }

    fn begin_blast(&mut self, now: Instant) {
        self.state = State::Blasting;
        self.cursor = 0;
        self.sent_in_round = 0;
        self.next_at = now;
        self.deadline = None;
        self.request = None;
        if self.next_packet().is_none() {
            self.end_blast(now);
        }
    }

    fn on_accept(&mut self, now: Instant, a: &Accept) {
        if self.state != State::Opening {
            self.stats.stale += 1;
            return;
        }
        if a.size != self.size || a.packet_size != self.cfg.packet_size {
            self.fail(
                BlastError::Protocol("the Accept does not echo the Start".into()),
                true,
            );
            return;
        }
        // Karn: only an unrepeated Start times the round trip.
        let rtt = (self.retries == 0).then(|| now.saturating_duration_since(self.request_at));
        self.rtt = rtt.or(self.rtt);
        self.events.push_back(SenderEvent::Accepted {
            rtt: rtt.unwrap_or_default(),
        });
        if a.resumed && self.cfg.version.is_some() {
            // The list of what the receiver lacks follows; a timeout
            // repeats the Start.
            self.state = State::Resuming;
            self.list_seq = 0;
            self.deadline = Some(now.saturating_add(self.timeout));
            return;
        }
        self.begin_blast(now);
    }

    fn on_missing(&mut self, now: Instant, m: &Missing<'_>) {
        let expected = match self.state {
            State::Waiting => m.round == self.round,
            State::Resuming => m.round == RESUME_ROUND,
            _ => false,
        };
        if !expected || m.seq != self.list_seq {
            // A repeated answer, or one to an earlier round.
            self.stats.stale += 1;
            return;
        }
        self.list_seq += 1;
        // The deadline now waits for the rest of the list.
        self.deadline = Some(now.saturating_add(self.timeout));
        let packets = self.packets;
        if let Some(bad) = m.list.runs().find(|r| r.end > packets) {
            let why = format!(
                "the missing list names packet {} of a {packets}-packet transfer",
                bad.end - 1
            );
            self.fail(BlastError::Protocol(why), true);
            return;
        }
        if self.todo.is_none() {
            let Some(t) = Bitmap::new(packets) else {
                self.fail(
                    BlastError::Storage("no memory for the missing list".into()),
                    true,
                );
                return;
            };
            self.todo = Some(t);
        }
        let todo = self.todo.as_mut().expect("allocated just above");
        for run in m.list.runs() {
            for i in run {
                todo.set(i);
            }
        }
        if !m.last {
            return;
        }
        let missing = self.todo.as_ref().map_or(0, Bitmap::ones);
        if self.state == State::Resuming {
            self.resumed = true;
            self.events.push_back(SenderEvent::Resuming {
                held: self.packets - missing,
                missing,
            });
            self.begin_blast(now);
            return;
        }
        let arrival_rate = arrival_rate(m);
        let sent = self.sent_in_round;
        if let (RateControl::Adaptive { margin, min_loss }, Some(r)) =
            (self.cfg.rate_control, arrival_rate)
        {
            let loss = 1.0 - m.arrived as f64 / sent.max(1) as f64;
            if loss >= min_loss {
                let floor = self.cfg.rate.as_bps() as f64 * MIN_RATE_FRACTION;
                let next = (r.as_bps() as f64 * (1.0 - margin.clamp(0.0, 0.99))).max(floor);
                self.rate = Bitrate::bps((next as u64).min(self.rate.as_bps()).max(1));
            }
        }
        self.events.push_back(SenderEvent::Missing {
            round: self.round,
            missing,
            arrived: m.arrived,
            arrival_rate,
            next_rate: self.rate,
        });
        if self.round + 1 >= self.cfg.max_rounds {
            self.fail(BlastError::TooManyRounds(self.round + 1), true);
            return;
        }
        self.round += 1;
        self.begin_blast(now);
    }

    fn on_done(&mut self, now: Instant, d: &Done) {
        if !matches!(self.state, State::Waiting | State::Blasting) {
            self.stats.stale += 1;
            return;
        }
        let ours = self.hash.unwrap_or_default();
        if d.status != DoneStatus::Ok || d.hash != ours {
            self.fail(BlastError::HashMismatch, d.status == DoneStatus::Ok);
            return;
        }
        self.state = State::Over;
        self.deadline = None;
        self.events
            .push_back(SenderEvent::Complete(TransferSummary {
                size: self.size,
                packets: self.packets,
                rounds: self.round + 1,
                datagrams: self.stats.datagrams,
                started: self.started,
                finished: now,
                hash: ours,
            }));
    }
}

/// The rate a round's datagrams arrived at, on the wire: the bytes after
/// the first arrival over the time from the first to the last.
fn arrival_rate(m: &Missing<'_>) -> Option<Bitrate> {
    if m.arrived < MIN_ARRIVALS || m.span_us == 0 {
        return None;
    }
    let wire = m.arrived_bytes as f64 + (m.arrived * IP_UDP_OVERHEAD as u64) as f64;
    let after_first = wire * (m.arrived - 1) as f64 / m.arrived as f64;
    let bps = after_first * 8.0 / (m.span_us as f64 / 1e6);
    (bps.is_finite() && bps >= 1.0).then(|| Bitrate::bps(bps.min(u64::MAX as f64) as u64))
}

impl<S: BlastSource> Machine for RbudpSender<S> {
    type Event = SenderEvent;

    /// The sender expects no datagrams: each is counted as foreign.
    fn handle_datagram(&mut self, _now: Instant, _src: SocketAddr, _data: &[u8]) {
        self.stats.foreign += 1;
    }

    /// Repeats an unanswered request, or gives up after
    /// [`SenderConfig::max_retries`]. Early calls do nothing; the pacing of
    /// a blast happens in [`poll_transmit`](Machine::poll_transmit).
    fn handle_timeout(&mut self, now: Instant) {
        let Some(deadline) = self.deadline.filter(|d| *d <= now) else {
            return;
        };
        let _ = deadline;
        if self.retries >= self.cfg.max_retries {
            self.fail(BlastError::PeerSilent, true);
            return;
        }
        let Some(req) = self.request.clone() else {
            self.deadline = None;
            return;
        };
        if self.state == State::Resuming {
            // The list never came whole: ask again from the Start.
            self.state = State::Opening;
        }
        self.retries += 1;
        self.stats.repeated += 1;
        self.stats.control_sent += 1;
        self.timeout = self.timeout.saturating_mul(2);
        self.deadline = Some(now.saturating_add(self.timeout));
        // The receiver answers the repeat from the start of its list.
        self.list_seq = 0;
        if let Some(t) = &mut self.todo {
            t.clear();
        }
        self.out.push_back(Transmit {
            dst: self.cfg.peer,
            transport: Transport::FRAME,
            payload: req,
        });
    }

    fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
        if let Some(t) = self.out.pop_front() {
            return Some(t);
        }
        if self.state != State::Blasting || self.next_at > now {
            return None;
        }
        let index = self.next_packet()?;
        let payload = self.datagram(index)?;
        self.cursor = index + 1;
        self.sent_in_round += 1;
        self.stats.datagrams += 1;
        self.stats.bytes += payload.len() as u64;
        if self.round > 0 {
            self.stats.retransmitted += 1;
        }
        let wire = (payload.len() + IP_UDP_OVERHEAD) as u64;
        self.next_at =
            self.next_at.max(now.saturating_sub(PACING_SLACK)) + self.rate.transmit_time(wire);
        if self.next_packet().is_none() {
            self.end_blast(now);
        }
        Some(Transmit {
            dst: self.cfg.peer,
            transport: Transport::Udp,
            payload,
        })
    }

    fn poll_event(&mut self) -> Option<SenderEvent> {
        self.events.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        match self.state {
            State::Blasting => Some(self.next_at),
            State::Opening | State::Resuming | State::Waiting => self.deadline,
            State::Idle | State::Over => None,
        }
    }
}

impl<S: BlastSource> StreamMachine for RbudpSender<S> {
    /// Takes Accept, Missing, Done and Abort from the receiver. Messages of
    /// another session or address are counted as foreign, repeats and
    /// answers to earlier rounds as stale; a list naming packets past the
    /// end fails the transfer ([`BlastError::Protocol`]). Safe to call in
    /// any state.
    fn handle_frame(&mut self, now: Instant, src: SocketAddr, _stream: u8, frame: &[u8]) {
        let r = match ControlRepr::parse(frame) {
            Ok(r) => r,
            Err(_) => {
                self.stats.malformed += 1;
                return;
            }
        };
        if src != self.cfg.peer || r.session != self.cfg.session {
            self.stats.foreign += 1;
            return;
        }
        if self.state == State::Over {
            self.stats.stale += 1;
            return;
        }
        match r.msg {
            Control::Accept(a) => self.on_accept(now, &a),
            Control::Missing(m) => self.on_missing(now, &m),
            Control::Done(d) => self.on_done(now, &d),
            Control::Abort(a) => {
                self.fail(BlastError::PeerAborted(a.reason), false);
            }
            _ => self.stats.stale += 1,
        }
    }
}
