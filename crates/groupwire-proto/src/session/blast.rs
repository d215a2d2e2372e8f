//! Reliable Blast UDP (Leigh et al. §4.2) as a session mechanism: each
//! message on the channel is one transfer, blasted as session data
//! datagrams at a set rate, its Start, end-of-blast, missing lists and
//! Done carried as [control frames](super::wire::ControlFrame) on the
//! peer's stream.
//!
//! //= Leigh et al. §4.2, "Reliable Blast UDP (RUDP)"
//! //# The scheme works by "blasting" the contents of a data file at just
//! //# below the available bandwidth without asking the remote site to
//! //# acknowledge any of the packets.
//!
//! The machines are [`RbudpSender`] and [`RbudpReceiver`], unchanged; this
//! wraps them for a channel:
//!
//! - **One transfer at a time**, in the order sent: the next message waits
//!   for the one before to complete (the receiver holds one transfer per
//!   channel), so the channel delivers in order. A transfer's session id is
//!   the message's number on the channel, so a receiver tells a new
//!   transfer from a repeat of the current one, and delivers the message
//!   under its number (the session's duplicate check applies, as for any
//!   mechanism, across a switch).
//! - **Memory**: the sender holds its queued messages (the application's
//!   bytes, as a reliable channel's stream does). The receiver holds one
//!   payload at a time, as large as the Start says, refused (the peer's
//!   transfer fails with [`BlastError::Refused`]) beyond what the session
//!   allows it: [`SessionConfig::max_blast`](super::SessionConfig::max_blast)
//!   per message, less what the peer's other channels' transfers already
//!   hold ([`SessionConfig::blast_memory`](super::SessionConfig::blast_memory)).
//! - **A failed transfer** (the peer fell silent, a hash mismatch) is tried
//!   again from the start, up to [`ATTEMPTS`] times in all, then given up
//!   and counted ([`ChannelStats::failed`](super::ChannelStats::failed)); a refused one is given up at
//!   once. Beyond the paper, which leaves failure to the user.
//! - **The rate**: the paper's "just below the available bandwidth": the
//!   QoS's rate (a reservation's), else 90% of the monitor's capacity
//!   estimate when the channel was put on Blast. Within a transfer the
//!   adaptive rule of [`RateControl::adaptive`] slows later rounds to what
//!   a lossy blast arrived at; every transfer starts at the channel's rate
//!   again. Carried over, the rule ratchets down on a path that loses at
//!   random: there a blast arrives at `1 − p` of its rate, loss or no
//!   overrun, so each transfer would start at `0.95 (1 − p)` of the one
//!   before, a fifth of the rate after ten at 10% loss.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;

use bytes::Bytes;

use crate::rbudp::{
    BlastError, BlastSink, RateControl, RbudpReceiver, RbudpSender, ReceiverConfig, ReceiverEvent,
    SenderConfig, SenderEvent, copy_out,
};
use crate::wire::rbudp::{Control, ControlRepr, DATA_HEADER_LEN};
use crate::{Bitrate, Instant, Machine, StreamMachine, Transport};

use super::channel::MSG_PREFIX;

/// Tries of one message's transfer, the first included, before it is given
/// up (a refused transfer is not tried again).
pub const ATTEMPTS: u32 = 3;

/// A message being received, stored behind room for its number in front
/// (the session's delivery format, [`MSG_PREFIX`]), so delivering it copies
/// nothing.
#[derive(Debug, Default)]
struct Prefixed(Vec<u8>);

impl BlastSink for Prefixed {
    fn prepare(&mut self, size: u64) -> io::Result<()> {
        let size = usize::try_from(size).map_err(|_| io::Error::other("too large for memory"))?;
        self.0.clear();
        self.0.resize(MSG_PREFIX + size, 0);
        Ok(())
    }
    fn write_at(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        let at = usize::try_from(offset).map_err(|_| io::Error::other("offset past memory"))?;
        self.0
            .get_mut(MSG_PREFIX + at..MSG_PREFIX + at + data.len())
            .ok_or_else(|| io::Error::other("write past the prepared size"))?
            .copy_from_slice(data);
        Ok(())
    }
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        copy_out(self.0.get(MSG_PREFIX..).unwrap_or_default(), offset, buf)
    }
}

/// The transfer under way on the sending half.
#[derive(Debug)]
struct Sending {
    msg: u32,
    tries: u32,
    tx: RbudpSender<Bytes>,
}

/// One channel's Reliable Blast UDP, both halves: the sending half on the
/// side that sends on the channel, the receiving half (made by the first
/// control frame) on the other.
#[derive(Debug)]
pub(super) struct BlastEndpoint {
    peer: SocketAddr,
    packet_size: u32,
    rate: Bitrate,
    queue: VecDeque<(u32, Bytes)>,
    sending: Option<Sending>,
    /// Control messages for the peer (an instance is one half or the
    /// other: the session knows which, by the channel it sits on).
    frames: VecDeque<Bytes>,
    receiving: Option<RbudpReceiver<Prefixed>>,
    /// The message number (transfer session) the receiving half takes.
    receiving_msg: Option<u32>,
    delivered: VecDeque<Bytes>,
    failed: u64,
}

impl BlastEndpoint {
    /// A channel's Blast toward `peer`; `room` is the bytes a mechanism
    /// packet may take, `rate` the first blast's.
    pub(super) fn new(peer: SocketAddr, room: usize, rate: Bitrate) -> Option<Self> {
        let packet_size = u32::try_from(room.checked_sub(DATA_HEADER_LEN)?)
            .ok()
            .filter(|&p| p > 0)?;
        Some(Self {
            peer,
            packet_size,
            rate,
            queue: VecDeque::new(),
            sending: None,
            frames: VecDeque::new(),
            receiving: None,
            receiving_msg: None,
            delivered: VecDeque::new(),
            failed: 0,
        })
    }

    /// Messages given up: refused by the receiver, or failed [`ATTEMPTS`]
    /// times.
    pub(super) fn failed(&self) -> u64 {
        self.failed
    }

    /// Whether either half has work left: a message queued or in transfer,
    /// a transfer being received. A replaced Blast drains until it has
    /// none, however long its transfers take.
    pub(super) fn busy(&self) -> bool {
        !self.queue.is_empty()
            || self.sending.is_some()
            || self.receiving.as_ref().is_some_and(|r| !r.is_over())
    }

    /// Payload bytes of the messages queued or in transfer on the sending
    /// half (a message counts until its transfer ends).
    pub(super) fn queued(&self) -> usize {
        let waiting: usize = self.queue.iter().map(|(_, b)| b.len()).sum();
        waiting + self.sending.as_ref().map_or(0, |s| s.tx.source().len())
    }

    /// Payload bytes the receiving half holds for a transfer under way.
    pub(super) fn held(&self) -> u64 {
        self.receiving
            .as_ref()
            .filter(|r| !r.is_over())
            .and_then(RbudpReceiver::transfer)
            .map_or(0, |(size, _)| size)
    }

    /// Queues message `msg` for its transfer.
    pub(super) fn send(&mut self, now: Instant, msg: u32, payload: &[u8]) {
        self.queue.push_back((msg, Bytes::copy_from_slice(payload)));
        self.advance(now);
    }

    /// Takes the current transfer's events; once it is over, starts the
    /// next queued one (a failed one first, if it has tries left).
    fn advance(&mut self, now: Instant) {
        loop {
            if let Some(s) = &mut self.sending {
                let mut retry = false;
                while let Some(ev) = s.tx.poll_event() {
                    match ev {
                        SenderEvent::Failed(e)
                            if s.tries < ATTEMPTS && !matches!(e, BlastError::Refused(_)) =>
                        {
                            retry = true;
                        }
                        SenderEvent::Failed(_) => self.failed += 1,
                        _ => {}
                    }
                }
                if !s.tx.is_over() {
                    return;
                }
                // Its last words (an Abort) still go.
                while let Some(t) = s.tx.poll_transmit(now) {
                    if t.transport == Transport::FRAME {
                        self.frames.push_back(t.payload);
                    }
                }
                let s = self.sending.take().expect("matched above");
                // The next transfer starts at the channel's rate again,
                // not where this one's came down to (see the module docs).
                if retry {
                    let payload = s.tx.source().clone();
                    self.start(now, s.msg, payload, s.tries + 1);
                    continue;
                }
            }
            let Some((msg, payload)) = self.queue.pop_front() else {
                return;
            };
            self.start(now, msg, payload, 1);
        }
    }

    fn start(&mut self, now: Instant, msg: u32, payload: Bytes, tries: u32) {
        let mut cfg = SenderConfig::new(self.peer, self.rate);
        cfg.session = msg;
        cfg.packet_size = self.packet_size;
        cfg.rate_control = RateControl::adaptive();
        let mut tx = RbudpSender::new(cfg, payload);
        tx.start(now);
        self.sending = Some(Sending { msg, tries, tx });
    }

    /// A data datagram from the peer's sending half.
    pub(super) fn handle_datagram(&mut self, now: Instant, pkt: &[u8]) {
        if let Some(r) = &mut self.receiving {
            r.handle_datagram(now, self.peer, pkt);
        }
        self.take_received();
    }

    /// A control message from the peer: for the sending half when
    /// `to_sender`, else for the receiving half. A Start of a transfer
    /// other than the one under way makes a fresh receiver, which takes at
    /// most `max_size` bytes.
    pub(super) fn handle_frame(
        &mut self,
        now: Instant,
        to_sender: bool,
        msg: &[u8],
        max_size: u64,
    ) {
        if to_sender {
            if let Some(s) = &mut self.sending {
                s.tx.handle_frame(now, self.peer, 0, msg);
            }
            self.advance(now);
            return;
        }
        if let Ok(ControlRepr {
            session,
            msg: Control::Start(_),
        }) = ControlRepr::parse(msg)
        {
            let repeat = self.receiving_msg == Some(session)
                && self.receiving.as_ref().is_some_and(|r| !r.is_over());
            if !repeat {
                let mut cfg = ReceiverConfig::new(self.peer);
                cfg.session = Some(session);
                cfg.max_size = max_size;
                self.receiving = Some(RbudpReceiver::new(cfg, Prefixed::default()));
                self.receiving_msg = Some(session);
            }
        }
        if let Some(r) = &mut self.receiving {
            r.handle_frame(now, self.peer, 0, msg);
        }
        self.take_received();
    }

    /// Moves the receiving half's answers to the frames, and a completed
    /// payload to the deliveries (the receiver goes with it: a later
    /// control message of that transfer is stale, and is dropped).
    fn take_received(&mut self) {
        let Some(r) = &mut self.receiving else {
            return;
        };
        while let Some(t) = r.poll_transmit(Instant::ZERO) {
            if t.transport == Transport::FRAME {
                self.frames.push_back(t.payload);
            }
        }
        let mut complete = false;
        while let Some(ev) = r.poll_event() {
            complete |= matches!(ev, ReceiverEvent::Complete(_));
        }
        if complete && let (Some(r), Some(msg)) = (self.receiving.take(), self.receiving_msg) {
            let mut buf = r.into_sink().0;
            buf[..MSG_PREFIX].copy_from_slice(&msg.to_be_bytes());
            self.delivered.push_back(Bytes::from(buf));
        }
    }

    pub(super) fn handle_timeout(&mut self, now: Instant) {
        if let Some(s) = &mut self.sending {
            s.tx.handle_timeout(now);
        }
        self.advance(now);
        if let Some(r) = &mut self.receiving {
            r.handle_timeout(now);
        }
        self.take_received();
    }

    /// The next data datagram of the sending half's blast (paced at its
    /// rate); its control messages go to [`poll_frame`](Self::poll_frame).
    pub(super) fn poll_transmit(&mut self, now: Instant) -> Option<Bytes> {
        loop {
            let t = self.sending.as_mut()?.tx.poll_transmit(now)?;
            match t.transport {
                Transport::TcpFrame { .. } => self.frames.push_back(t.payload),
                _ => return Some(t.payload),
            }
        }
    }

    /// The next control message for the peer.
    pub(super) fn poll_frame(&mut self) -> Option<Bytes> {
        self.frames.pop_front()
    }

    /// The next message received whole, its number in front.
    pub(super) fn poll_delivery(&mut self) -> Option<Bytes> {
        self.delivered.pop_front()
    }

    pub(super) fn poll_timeout(&self) -> Option<Instant> {
        let tx = self.sending.as_ref().and_then(|s| s.tx.poll_timeout());
        let rx = self.receiving.as_ref().and_then(Machine::poll_timeout);
        tx.into_iter().chain(rx).min()
    }
}
