//! [`ClientCore`]: the client's protocol without I/O (the shape of
//! quinn-proto under quinn, or str0m's `Rtc`): bytes or frames in; frames
//! to write, events and a next deadline out.
//!
//! It says `Hello`, takes the `Welcome`, numbers requests and matches their
//! replies, tells replies from unsolicited frames and a fatal `Error` from
//! a request's, returns the relay's send window (`Credit`) as frames are
//! handed over, and pings when the connection has been quiet for the
//! keepalive period. [`RelayClient`](super::RelayClient) is a tokio driver
//! around it; a load generator drives it directly, one task per connection
//! and no channels, and reads `Deliver` frames in place through
//! [`DeliverView`].
//!
//! Drain contract, as for every machine here: after any `handle_*` or
//! command, [`poll_transmit`](ClientCore::poll_transmit) until `None`, then
//! [`poll_event`](ClientCore::poll_event) until `None` (handing an event
//! over may queue a `Credit`: write it on the next turn), then
//! [`poll_timeout`](ClientCore::poll_timeout).
//!
//! It remembers the groups it is in and the last update it handed over in
//! each ([`ClientOptions::resume`]): after the connection is lost,
//! [`reconnect`](ClientCore::reconnect) says `Hello` again (to the same
//! relay or another node of a cluster) and, once welcomed, re-joins every
//! group resuming after that update. Deliveries it handed over before are
//! dropped, so the application sees each update once, in order; where the
//! log was compacted past that update it gets `Resync` and the fresh state.
//! A connection that hears nothing for twice the keepalive period (the
//! relay answers every `Ping`) is closed with
//! [`ClientError::KeepaliveTimeout`].
//!
//! It meters each group it sends to or receives from ([`RelayMeters`]:
//! bandwidth, latency, jitter, the relay's drops and their burstiness);
//! read them with [`channel_snapshots`](ClientCore::channel_snapshots).
//! [`ClientOptions::metered`] turns this off for a load generator that
//! measures on its own.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use groupwire_proto::Instant;

use groupwire_metrics::ChannelSnapshot;

use super::meter::RelayMeters;
use super::{ClientError, ClientEvent, ClientOptions};
use crate::frame::{self, DeliverView, Frame, FrameDecoder, FrameView, Kind};
use session::{Answer, Session};

mod session;

/// A request's id on its connection (the `Hello` is 1; replies carry it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(pub u32);

/// What a [`ClientCore`] tells its driver.
#[derive(Debug)]
#[non_exhaustive]
pub enum CoreEvent {
    /// The relay took the `Hello`.
    Connected {
        /// This client's id.
        client_id: u64,
        /// The send window the relay granted.
        window: u32,
        /// The largest frame the relay accepts, length prefix included.
        max_frame: usize,
    },
    /// The reply to a request (an `Error` reply is `Err`). A request sent
    /// with [`ClientCore::request_detached`] gets one only if it failed.
    Reply {
        /// The request.
        id: RequestId,
        /// Its reply.
        result: Result<Frame, ClientError>,
    },
    /// A sequenced update, read in place.
    Deliver(DeliverView<Bytes>),
    /// Any other frame the relay sent on its own (membership, resync, a
    /// fresh state, a deleted group).
    Event(ClientEvent),
    /// The connection is over, with the relay's fatal error if it sent one.
    /// Nothing more comes out; write what is queued and close.
    Closed(Option<ClientError>),
}

#[derive(Debug, PartialEq, Eq)]
enum State {
    /// `Hello` queued or sent, `Welcome` awaited.
    Greeting,
    /// Up.
    Connected,
    /// Over: no more events.
    Closed,
}

/// The client side of one relay connection, without I/O. See the
/// [module docs](self).
#[derive(Debug)]
pub struct ClientCore {
    state: State,
    /// Whole frames handed in by a framing transport, with when.
    frames: VecDeque<(Instant, Bytes)>,
    /// Bytes handed in by a byte-stream transport.
    decoder: FrameDecoder,
    out: VecDeque<Bytes>,
    /// Requests awaiting a reply, and whether the reply is reported.
    pending: HashMap<u32, bool>,
    next_request: u32,
    /// The relay's cap on frames from us (from its `Welcome`).
    max_frame: Option<usize>,
    /// Bytes of the relay's frames handed over, and at the last `Credit`.
    consumed: u64,
    credited: u64,
    /// Return credit after this many bytes (a quarter of the window).
    credit_every: u64,
    keepalive: Duration,
    next_ping: Instant,
    /// Replies to detached requests dropped unread.
    detached_replies: u64,
    /// When the bytes being decoded were handed in (the drain contract
    /// decodes them before more come), or the frame being read.
    last_rx: Instant,
    /// Requests that were a `Join`, by id: their reply's state transfer
    /// tells the meters which deliveries replay the log.
    joins: HashMap<u32, String>,
    meters: Option<RelayMeters>,
    /// The groups joined and the last update handed over in each (`None`
    /// with [`ClientOptions::resume`] off).
    session: Option<Session>,
    /// Events made by one frame beyond the one returned for it.
    queued: VecDeque<CoreEvent>,
    /// When bytes or a frame last arrived.
    heard: Instant,
    /// Bytes received (handed over or buffered) at the last
    /// [`handle_timeout`](Self::handle_timeout), and when that was: what
    /// `recv_buffer` reads counts as heard at the next check.
    received_at_check: u64,
    checked_at: Instant,
    /// This connection's client id (from its `Welcome`).
    client_id: u64,
    /// For the next `Hello`.
    hello: Frame,
    /// [`ClientOptions::max_incoming_frame`], for a reconnect's decoder.
    max_incoming: usize,
}

impl ClientCore {
    /// A core that has queued its `Hello` (name, token and window from
    /// `opts`); frames from the relay are accepted up to
    /// [`ClientOptions::max_incoming_frame`].
    pub fn new(now: Instant, opts: &ClientOptions) -> Self {
        let hello = Frame::Hello {
            max_version: frame::VERSION,
            window: opts.window,
            token: opts.token.clone(),
            name: opts.name.clone(),
        };
        let mut core = Self {
            state: State::Greeting,
            frames: VecDeque::new(),
            decoder: FrameDecoder::new(opts.max_incoming_frame),
            out: VecDeque::new(),
            pending: HashMap::new(),
            next_request: FIRST_REQUEST,
            max_frame: None,
            consumed: 0,
            credited: 0,
            credit_every: 1,
            keepalive: opts.keepalive.max(MIN_KEEPALIVE),
            next_ping: now + opts.keepalive.max(MIN_KEEPALIVE),
            detached_replies: 0,
            last_rx: now,
            joins: HashMap::new(),
            meters: opts
                .metered
                .then(|| RelayMeters::new(now, opts.shared_clock_micros)),
            session: opts.resume.then(Session::default),
            queued: VecDeque::new(),
            heard: now,
            received_at_check: 0,
            checked_at: now,
            client_id: 0,
            hello,
            max_incoming: opts.max_incoming_frame,
        };
        core.out
            .push_back(frame::encode(HELLO_REQUEST, &core.hello));
        core
    }

    /// Starts over on a new connection (to the same relay or another node
    /// of its cluster) after the last one was lost or closed: forgets what
    /// was in flight (requests awaiting replies get none: their drivers
    /// fail them), queues a new `Hello`, and once the `Welcome` comes
    /// ([`CoreEvent::Connected`]), re-joins every group it was in, each
    /// resuming after the last update handed over (see the
    /// [module docs](self)). The groups, meters and request numbering
    /// carry over.
    pub fn reconnect(&mut self, now: Instant) {
        self.state = State::Greeting;
        self.frames.clear();
        self.decoder = FrameDecoder::new(self.max_incoming);
        self.out.clear();
        self.pending.clear();
        self.joins.clear();
        self.queued.clear();
        self.max_frame = None;
        self.consumed = 0;
        self.credited = 0;
        self.credit_every = 1;
        self.heard = now;
        self.received_at_check = 0;
        self.checked_at = now;
        self.last_rx = now;
        self.next_ping = now + self.keepalive;
        if let Some(s) = self.session.as_mut() {
            s.reconnecting();
        }
        self.out
            .push_back(frame::encode(HELLO_REQUEST, &self.hello));
    }

    /// Bytes read from a byte-stream transport (TCP, TLS), in order.
    pub fn handle_bytes(&mut self, now: Instant, data: &[u8]) {
        self.last_rx = now;
        self.heard = now;
        self.decoder.extend(data);
    }

    /// The buffer to read a byte stream into directly (`read_buf`), instead
    /// of [`handle_bytes`](Self::handle_bytes); it always has room for a
    /// few KiB, so a read is not cut to 64 bytes. The meters time what is
    /// read this way at the `now` of the last `handle_*` call: a metered
    /// driver calls `handle_bytes(now, &[])` after each read. The
    /// keepalive counts what is read this way as heard at its next check
    /// ([`handle_timeout`](Self::handle_timeout)).
    pub fn recv_buffer(&mut self) -> &mut BytesMut {
        // More room than the relay's readers keep (`frame::READ_CHUNK`):
        // a client has one connection, and a delivery stream fills 16 KiB
        // between two reads often enough to cost 8% more reads.
        let buf = self.decoder.buffer_mut();
        if buf.capacity() - buf.len() < RECV_CHUNK / 4 {
            buf.reserve(RECV_CHUNK);
        }
        buf
    }

    /// One whole frame from a framing transport (a WebSocket message, or a
    /// frame a reader already cut).
    pub fn handle_frame(&mut self, now: Instant, frame: Bytes) {
        self.heard = now;
        self.frames.push_back((now, frame));
    }

    /// Time passed: pings when the keepalive period is over; closes the
    /// connection ([`ClientError::KeepaliveTimeout`]) when nothing came
    /// for two periods (the relay answers every `Ping`, so a live relay is
    /// heard from at least once a period).
    pub fn handle_timeout(&mut self, now: Instant) {
        // Bytes read through `recv_buffer` carry no time: what arrived
        // since the last check arrived after it. So a driver that reads
        // there without `handle_bytes(now, &[])` is still heard from, one
        // check late at worst (a load generator's busy connections were
        // given up after two periods however much they received).
        let received = self.consumed + self.decoder.buffered() as u64;
        if received != self.received_at_check {
            self.heard = self.heard.max(self.checked_at);
            self.received_at_check = received;
        }
        self.checked_at = now;
        if self.state == State::Connected && now >= self.dead_at() {
            let e = self.close(Some(ClientError::KeepaliveTimeout));
            self.queued.push_back(e);
            return;
        }
        if self.state == State::Connected && now >= self.next_ping {
            // Request id 0: the Pong matches no request and is dropped.
            self.out
                .push_back(frame::encode(0, &Frame::Ping { nonce: 0 }));
            self.next_ping = now + self.keepalive;
        }
    }

    /// Queues `frame` as a request; its reply comes as
    /// [`CoreEvent::Reply`]. A frame larger than the relay accepts is
    /// refused here ([`ClientError::FrameTooLarge`]), so one oversized
    /// request does not make the relay drop the connection.
    pub fn request(&mut self, frame: &Frame) -> Result<RequestId, ClientError> {
        self.queue(frame, true)
    }

    /// As [`request`](Self::request), but a successful reply is dropped
    /// unread (checked by its kind byte, not decoded): for streams of
    /// `Send`s whose `Sent` the caller does not need. A failure still comes
    /// as [`CoreEvent::Reply`].
    pub fn request_detached(&mut self, frame: &Frame) -> Result<RequestId, ClientError> {
        self.queue(frame, false)
    }

    fn queue(&mut self, frame: &Frame, report: bool) -> Result<RequestId, ClientError> {
        if self.state == State::Closed {
            return Err(ClientError::Closed);
        }
        let id = self.next_request;
        self.next_request = match self.next_request.wrapping_add(1) {
            0 | HELLO_REQUEST => FIRST_REQUEST,
            n => n,
        };
        let bytes = frame::encode(id, frame);
        if let Some(max) = self.max_frame.filter(|&m| bytes.len() > m) {
            return Err(ClientError::FrameTooLarge {
                len: bytes.len(),
                max,
            });
        }
        self.pending.insert(id, report);
        if let Some(s) = self.session.as_mut() {
            s.asked(id, frame);
        }
        if let Some(m) = self.meters.as_mut() {
            match frame {
                Frame::Send { group, .. } => m.sent(group, bytes.len()),
                Frame::Join { group, .. } => {
                    m.join(group);
                    self.joins.insert(id, group.clone());
                }
                _ => {}
            }
        }
        self.out.push_back(bytes);
        Ok(RequestId(id))
    }

    /// The next frame to write.
    pub fn poll_transmit(&mut self) -> Option<Bytes> {
        self.out.pop_front()
    }

    /// The next event; handing it over counts its frame as consumed and
    /// may queue a `Credit`.
    pub fn poll_event(&mut self) -> Option<CoreEvent> {
        if let Some(e) = self.queued.pop_front() {
            return Some(e);
        }
        while self.state != State::Closed {
            let f = match self.frames.pop_front() {
                Some((at, f)) => {
                    self.last_rx = at;
                    f
                }
                None => match self.decoder.next_frame() {
                    Ok(Some(f)) => f,
                    Ok(None) => return None,
                    Err(e) => {
                        return Some(self.close(Some(ClientError::Unexpected(e.to_string()))));
                    }
                },
            };
            self.consumed += f.len() as u64;
            let ev = self.on_frame(f);
            self.credit_if_due();
            if ev.is_some() {
                return ev;
            }
        }
        None
    }

    /// Hands each `Deliver` at the front of what was read to `f`, read in
    /// place from the receive buffer (no `Bytes` handle per frame, no
    /// copy), consumed and credited as [`poll_event`](Self::poll_event)
    /// would. Stops at the first other frame (or a malformed one), which
    /// `poll_event` then returns, and where no whole frame is buffered.
    /// Returns how many it handed over.
    ///
    /// For a driver that is done with each delivery before the next, as a
    /// load generator is: call it before `poll_event` after each read, and
    /// again after each event. Frames handed in whole
    /// ([`handle_frame`](Self::handle_frame)) are left to `poll_event`.
    pub fn poll_delivers(&mut self, mut f: impl FnMut(DeliverView<&[u8]>)) -> usize {
        if self.state != State::Connected || !self.frames.is_empty() {
            return 0;
        }
        let mut n = 0;
        while let Ok(Some(bytes)) = self.decoder.peek_frame() {
            if !frame::is_deliver(bytes) {
                break;
            }
            let len = bytes.len();
            let Ok(v) = DeliverView::new_checked(bytes) else {
                break;
            };
            if self
                .session
                .as_mut()
                .is_none_or(|s| s.deliver(v.group(), v.seq()))
            {
                meter_delivery(&mut self.meters, self.last_rx, &v, len);
                f(v);
                n += 1;
            }
            self.decoder.consume(len);
            self.consumed += len as u64;
            self.credit_if_due();
        }
        n
    }

    /// When [`handle_timeout`](Self::handle_timeout) wants to run.
    pub fn poll_timeout(&self) -> Option<Instant> {
        (self.state == State::Connected).then(|| self.next_ping.min(self.dead_at()))
    }

    /// Requests awaiting their reply.
    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }

    /// Successful replies to detached requests, dropped unread.
    pub fn detached_replies(&self) -> u64 {
        self.detached_replies
    }

    /// Each metered group's channel measures as of `now` (none if
    /// [`ClientOptions::metered`] is off); each call starts a new interval
    /// for the rates and the interval's latency.
    pub fn channel_snapshots(&mut self, now: Instant) -> Vec<ChannelSnapshot> {
        self.meters
            .as_mut()
            .map_or_else(Vec::new, |m| m.snapshots(now))
    }

    /// Judges every update still pending in the meters (at the end of a
    /// run, so the last snapshots count a trailing gap).
    pub fn finish_channels(&mut self) {
        if let Some(m) = self.meters.as_mut() {
            m.finish();
        }
    }

    /// Whether the connection is over.
    pub fn is_closed(&self) -> bool {
        self.state == State::Closed
    }

    /// Deliveries dropped because they were handed over before a
    /// reconnect (see the [module docs](self)).
    pub fn duplicates_dropped(&self) -> u64 {
        self.session.as_ref().map_or(0, |s| s.duplicates)
    }

    /// When a connection that hears nothing is given up.
    fn dead_at(&self) -> Instant {
        self.heard + 2 * self.keepalive
    }

    /// Queues a `Credit` once a quarter of the window was handed over
    /// since the last.
    #[inline]
    fn credit_if_due(&mut self) {
        if self.state == State::Connected && self.consumed - self.credited >= self.credit_every {
            self.credit();
        }
    }

    fn credit(&mut self) {
        self.credited = self.consumed;
        self.out.push_back(frame::encode(
            0,
            &Frame::Credit {
                consumed: self.consumed,
            },
        ));
    }

    fn close(&mut self, error: Option<ClientError>) -> CoreEvent {
        self.state = State::Closed;
        self.frames.clear();
        CoreEvent::Closed(error)
    }

    fn on_frame(&mut self, f: Bytes) -> Option<CoreEvent> {
        let head = match FrameView::new_checked(&f[..]) {
            Ok(h) => h,
            Err(e) => return Some(self.close(Some(ClientError::Unexpected(e.to_string())))),
        };
        let request = head.request();
        let kind = head.kind_byte();
        if self.state == State::Greeting {
            return Some(self.on_welcome(&f));
        }
        if kind == Kind::Deliver as u8 {
            let len = f.len();
            return match DeliverView::new_checked(f) {
                Ok(v) => {
                    if let Some(s) = self.session.as_mut()
                        && !s.deliver(v.group(), v.seq())
                    {
                        return None;
                    }
                    meter_delivery(&mut self.meters, self.last_rx, &v, len);
                    Some(CoreEvent::Deliver(v))
                }
                Err(e) => Some(self.close(Some(ClientError::Unexpected(e.to_string())))),
            };
        }
        let join = self.joins.remove(&request);
        // A detached request's success: dropped without decoding.
        if kind != Kind::Error as u8 && self.pending.get(&request) == Some(&false) {
            self.pending.remove(&request);
            self.detached_replies += 1;
            return None;
        }
        let env = match frame::decode_bytes(&f, usize::MAX) {
            Ok(env) => env,
            Err(e) => return Some(self.close(Some(ClientError::Unexpected(e.to_string())))),
        };
        if let (Frame::Joined(j), Some(m)) = (&env.frame, self.meters.as_mut()) {
            // A join's reply, or a fresh state after a resync or a role
            // change (request 0).
            if request == 0 || join.is_some() {
                m.state(&j.group, j.head_seq);
            }
        }
        let event = |e| Some(CoreEvent::Event(e));
        if let Some(s) = self.session.as_mut() {
            match &env.frame {
                Frame::Membership(n) => s.evicted(self.client_id, n.change, n.client, &n.group),
                Frame::GroupDeleted { group } => s.gone(group),
                Frame::Joined(j) if request == 0 => s.state(j),
                _ => {}
            }
        }
        match env.frame {
            Frame::Membership(n) => event(ClientEvent::Membership(n)),
            Frame::GroupDeleted { group } => event(ClientEvent::GroupDeleted(group)),
            Frame::Resync { group, dropped } => event(ClientEvent::Resync { group, dropped }),
            Frame::Joined(j) if request == 0 => event(ClientEvent::State(j)),
            Frame::Error { code, message }
                if request == 0 || !self.pending.contains_key(&request) =>
            {
                Some(self.close(Some(ClientError::Relay { code, message })))
            }
            reply => {
                // A reply to nothing we asked (a keepalive's Pong) is dropped.
                self.pending.remove(&request)?;
                let result = match reply {
                    Frame::Error { code, message } => Err(ClientError::Relay { code, message }),
                    other => Ok(other),
                };
                if let Some(s) = self.session.as_mut()
                    && let Answer::Own(events) = s.replied(request, &result)
                {
                    self.queued.extend(events.into_iter().map(CoreEvent::Event));
                    return self.queued.pop_front();
                }
                Some(CoreEvent::Reply {
                    id: RequestId(request),
                    result,
                })
            }
        }
    }

    /// Queues the `Join`s of a reconnect (none on a first connection).
    fn rejoin(&mut self, resume: bool) {
        let Some(s) = self.session.as_mut() else {
            return;
        };
        let mut next = self.next_request;
        let rejoins = s.rejoins(resume, || {
            let id = next;
            next = match next.wrapping_add(1) {
                0 | HELLO_REQUEST => FIRST_REQUEST,
                n => n,
            };
            id
        });
        self.next_request = next;
        for (id, join) in rejoins {
            self.pending.insert(id, true);
            if let (Some(m), Frame::Join { group, .. }) = (self.meters.as_mut(), &join) {
                m.join(group);
                self.joins.insert(id, group.clone());
            }
            self.out.push_back(frame::encode(id, &join));
        }
    }

    /// The first frame from the relay: its `Welcome`, or why not.
    fn on_welcome(&mut self, f: &[u8]) -> CoreEvent {
        match frame::decode(f, usize::MAX).map(|e| e.frame) {
            Ok(Frame::Welcome {
                client,
                window,
                max_frame,
                resume,
                ..
            }) => {
                self.state = State::Connected;
                self.client_id = client;
                self.rejoin(resume);
                let max_frame = usize::try_from(max_frame).unwrap_or(usize::MAX);
                self.max_frame = Some(max_frame);
                self.credit_every = u64::from(window / 4).max(1);
                // The Welcome itself counts, but earns no Credit of its own.
                self.credited = self.consumed;
                CoreEvent::Connected {
                    client_id: client,
                    window,
                    max_frame,
                }
            }
            Ok(Frame::Error { code, message }) => {
                self.close(Some(ClientError::Relay { code, message }))
            }
            Ok(other) => self.close(Some(ClientError::Unexpected(format!("{:?}", other.kind())))),
            Err(e) => self.close(Some(ClientError::Unexpected(e.to_string()))),
        }
    }
}

/// The `Hello`'s request id.
const HELLO_REQUEST: u32 = 1;
/// The first request after it.
const FIRST_REQUEST: u32 = 2;
/// Bytes [`ClientCore::recv_buffer`] makes room for (the hand-written
/// load generator it replaced read into 64 KiB).
const RECV_CHUNK: usize = 64 << 10;
/// Keepalive periods below this are raised to it.
const MIN_KEEPALIVE: Duration = Duration::from_millis(10);

/// Tells the meters (if any) of a delivery of `len` wire bytes read at
/// `now`: one place for both ways a delivery is read (`poll_event` and
/// `poll_delivers`).
fn meter_delivery<T: AsRef<[u8]>>(
    meters: &mut Option<RelayMeters>,
    now: Instant,
    v: &DeliverView<T>,
    len: usize,
) {
    if let Some(m) = meters.as_mut() {
        m.delivered(now, v.group(), v.seq(), v.sender(), v.sent_at_micros(), len);
    }
}

#[cfg(test)]
mod tests;
