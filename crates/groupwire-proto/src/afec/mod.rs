//! Message-level adaptive FEC for groupware awareness streams (Dyck &
//! Gutwin, "Improving Groupware Performance in Lossy Networks with Adaptive
//! Forward Error Correction").
//!
//! Each packet carries one new message followed by whole copies of earlier
//! ones; each message type has a *code set size* n, the number of packets
//! each of its messages travels in (n = 1 is plain UDP, n = 3 is the
//! paper's FEC-3). The receiver measures each (sender, type)'s message
//! error rate (MER) over the last 1000 messages and, when it leaves the
//! type's band, asks the sender for more (NAK) or less (INC) redundancy.
//!
//! [`AfecEndpoint`] is both halves: it sends to the peers added with
//! [`add_peer`](AfecEndpoint::add_peer) and receives from anyone (bounded).
//! It is a sans-IO [`Machine`]: see the crate docs for the drain contract.
//!
//! Method classes:
//! - commands: [`add_peer`](AfecEndpoint::add_peer),
//!   [`send`](AfecEndpoint::send),
//!   [`send_sampled`](AfecEndpoint::send_sampled);
//! - inputs: [`handle_datagram`](Machine::handle_datagram),
//!   [`handle_timeout`](Machine::handle_timeout);
//! - outputs, in this order after every input or command:
//!   [`poll_transmit`](Machine::poll_transmit) until `None`,
//!   [`poll_event`](Machine::poll_event) until `None`, then
//!   [`poll_timeout`](Machine::poll_timeout);
//! - getters: [`stats`](AfecEndpoint::stats),
//!   [`code_set_size`](AfecEndpoint::code_set_size),
//!   [`mer`](AfecEndpoint::mer).
//!
//! # Two framings
//!
//! By default packets go in groupwire's compact format
//! ([`wire::afec`](crate::wire::afec)). With [`AfecConfig::framing`] set to
//! [`Framing::Red`] they go as RTP with the RFC 2198 redundancy payload
//! ([`wire::red`](crate::wire::red)), the standard form of the paper's
//! packet, which stock RTP tools decode, and feedback goes as RTCP APP
//! packets. An endpoint reads both framings whatever it sends. The table
//! of what maps to what, and what RTP/RED cannot carry (per-type MER, the
//! per-type index, the session, the flush flag), is in
//! [`wire::afec`](crate::wire::afec#rtpred-framing-the-standard-alternative).
//!
//! # Where we read the paper a particular way
//!
//! - **What "code set size" counts.** The paper says both that UDP is
//!   "equivalent to FEC-1" and (Fig. 2) that with code set size three
//!   "message loss only occurs when more than three packets are lost in a
//!   row". We follow the sender's description, which "knows how many times
//!   each message has been sent": n is the number of packets a message is
//!   sent in, so FEC-1 is UDP and FEC-n survives bursts of n − 1.
//! - **Feedback.** The paper sends NAK/INC "through a separate reliable
//!   channel". Here they are control entries on the same socket, each with
//!   a sequence number and the *absolute* code set size asked for, repeated
//!   until acknowledged; duplicates and reordering are harmless because the
//!   highest sequence wins. The sender's ACK carries the size in force, so
//!   the receiver always knows what it is measuring.
//! - **Cannot meet.** Beyond the paper's MTU limit, a configured rate cap
//!   ([`AfecConfig::max_bitrate`]) also limits redundancy, because the
//!   paper's failure case was latency running away in a 56 kbit/s channel.

mod config;
mod mer;
mod predictor;
mod receiver;
mod red_rx;
mod robust;
mod sender;
#[cfg(test)]
mod tests;

/// The code set size solver, shared with the session's strategy selector.
pub(crate) use predictor::solve_size;

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};

pub use self::config::{
    AfecConfig, ConfigError, DEFAULT_LIFETIME, Framing, Mode, RedConfig, Scheme, Step, TypeQos,
};
use self::mer::Observed;
use self::predictor::{PREDICTIVE_FEEDBACK, predict_size};
use self::receiver::{PeerRx, TypeRx};
use self::red_rx::{Place, RedStream};
use self::robust::{robust_ready, robust_size};
use self::sender::{Hist, PeerTx, TypeTx};
use crate::machine::{Machine, Transmit, Transport};
use crate::time::Instant;
use crate::units::IP_UDP_OVERHEAD;
use crate::wire::afec::{
    ControlRepr, DATA_HEADER_LEN, DataPacket, DataWriter, Entry, MAX_ENTRIES, MAX_MESSAGES,
    MESSAGE_HEADER_LEN, MessageRepr, MsgType, Op,
};
use crate::wire::header::{self, Kind};
use crate::wire::rtp::{RTP_HEADER_LEN, RTP_VERSION, RtpHeader};
use crate::wire::{red, rtcp};

/// What the endpoint tells its application.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum AfecEvent {
    /// A message arrived for the first time (exactly once per message).
    Delivered(Delivery),
    /// Sender side: a peer's request changed the code set size of a type.
    CodeSetChanged {
        /// The peer.
        peer: SocketAddr,
        /// The type.
        msg_type: MsgType,
        /// The size now in force.
        size: f64,
    },
    /// Receiver side: the controller asked a sender for a new size (NAK or INC).
    Requested {
        /// The remote user.
        from: u32,
        /// The type.
        msg_type: MsgType,
        /// The size asked for.
        size: f64,
        /// `true` for NAK (more redundancy), `false` for INC (less).
        nak: bool,
    },
    /// Sender side: the requested redundancy does not fit the MTU or rate
    /// cap toward this peer; the application should lower its requirement
    /// or its message rate.
    QosUnmet {
        /// The peer.
        peer: SocketAddr,
        /// The type.
        msg_type: MsgType,
        /// The code set size asked for.
        requested: f64,
        /// The largest size that fits.
        achievable: f64,
    },
    /// Sender side: a type that could not be given its redundancy (a
    /// [`AfecEvent::QosUnmet`] before) fits again; the peer is told.
    QosMet {
        /// The peer.
        peer: SocketAddr,
        /// The type.
        msg_type: MsgType,
    },
    /// Receiver side: a sender that could not meet the requested
    /// redundancy can again; the controller may ask for any size.
    PeerCanMeet {
        /// The remote user.
        from: u32,
        /// The type.
        msg_type: MsgType,
    },
    /// Receiver side: a sender reported it cannot meet the requested redundancy.
    PeerCannotMeet {
        /// The remote user.
        from: u32,
        /// The type.
        msg_type: MsgType,
        /// The largest size the sender can deliver.
        achievable: f64,
    },
}

/// One delivered message.
#[derive(Clone, Debug, PartialEq)]
pub struct Delivery {
    /// The remote user.
    pub from: u32,
    /// The address it came from.
    pub addr: SocketAddr,
    /// Its type.
    pub msg_type: MsgType,
    /// Its index among the sender's messages of this type. In RTP/RED
    /// framing, which carries no index, its number in the sender's stream
    /// of all types: the RTP sequence number of the packet that carried it
    /// new, extended to 32 bits (for a recovered message, the slot its
    /// timestamp places it in; see [`wire::afec`](crate::wire::afec)).
    pub index: u32,
    /// The message.
    pub payload: Bytes,
    /// `true` when it came as a redundant copy because the packet that
    /// carried it as new was lost. (RTP/RED has no flush flag: a message
    /// whose only copy to arrive was a flush's re-sent primary counts as
    /// new.)
    pub recovered: bool,
    /// Time since the sender first sent it (native framing) or sampled it
    /// (RTP/RED framing). Needs a clock shared with the sender: the
    /// simulator or one host; otherwise meaningless.
    pub latency: Duration,
}

/// Counters. Peer input never panics: what is wrong is counted here.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AfecStats {
    /// Data packets sent (flush packets included).
    pub data_packets_sent: u64,
    /// Redundancy-only packets sent at the end of clusters.
    pub flush_packets_sent: u64,
    /// Bytes of data packets sent (UDP payload).
    pub data_bytes_sent: u64,
    /// New messages sent (per peer).
    pub messages_sent: u64,
    /// Redundant copies sent.
    pub redundant_copies_sent: u64,
    /// Control packets sent.
    pub control_packets_sent: u64,
    /// Data packets received and parsed.
    pub data_packets_received: u64,
    /// Control packets received and parsed.
    pub control_packets_received: u64,
    /// Messages delivered that came as new.
    pub delivered_new: u64,
    /// Messages delivered that came as redundant copies.
    pub delivered_recovered: u64,
    /// Copies of messages already delivered.
    pub duplicates: u64,
    /// Messages detected lost (index gaps) and never recovered, so far.
    pub lost: u64,
    /// Datagrams that failed to parse.
    pub malformed: u64,
    /// Datagrams of another kind or session.
    pub ignored: u64,
    /// Packets from senders or types beyond the configured bounds.
    pub over_limit: u64,
    /// Control entries from users we do not send to, or stale requests.
    pub stale_control: u64,
    /// Control packets to a remote sender held back because they would
    /// have sent its address more bytes than it sent us (no
    /// amplification toward an address that may be spoofed).
    pub control_held: u64,
    /// RTP/RED sending: redundant copies RFC 2198 cannot carry (a message
    /// longer than a block's 10-bit length, or older than the 14-bit
    /// timestamp offset reaches), dropped from the history unsent.
    pub red_uncarriable: u64,
    /// Sender: copies still owed when their message outlived its
    /// [`TypeQos::lifetime`], dropped unsent.
    pub expired_copies: u64,
    /// Receiver: copies that arrived older than their type's lifetime,
    /// neither delivered nor counted as delivered in the MER. A copy's age
    /// is what the sender stamped on it plus how much longer than the
    /// fastest packet so far its packet took to arrive (the one-way delay
    /// above its floor, which needs no synchronized clocks): the floor
    /// itself, the path's base delay, is not counted. Native framing only:
    /// RTP/RED carries no age.
    pub expired: u64,
}

/// A sans-IO AFEC endpoint: sender, receiver and feedback loop. See the
/// module docs.
#[derive(Debug)]
pub struct AfecEndpoint {
    cfg: AfecConfig,
    /// Next index per message type (shared by all peers).
    next_index: BTreeMap<MsgType, u32>,
    peers: BTreeMap<SocketAddr, PeerTx>,
    remotes: BTreeMap<u32, PeerRx>,
    next_check: Option<Instant>,
    transmits: VecDeque<Transmit>,
    events: VecDeque<AfecEvent>,
    stats: AfecStats,
    /// Reused for parsing, oldest-first processing.
    scratch: Vec<(MsgType, u32, u16, usize, usize)>,
    /// RTP/RED receiving, reused: redundant blocks as (type, offset,
    /// position, length), and the extended sequence number each goes to.
    red_blocks: Vec<(MsgType, u16, usize, usize)>,
    red_placed: Vec<(u64, usize)>,
    /// RTP/RED sending: the last message's timestamp (they never go back).
    last_rtp_ts: Option<u32>,
}

impl AfecEndpoint {
    /// An endpoint with `cfg`.
    pub fn new(cfg: AfecConfig) -> Result<Self, ConfigError> {
        cfg.validate()?;
        Ok(Self {
            cfg,
            next_index: BTreeMap::new(),
            peers: BTreeMap::new(),
            remotes: BTreeMap::new(),
            next_check: None,
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            stats: AfecStats::default(),
            scratch: Vec::new(),
            red_blocks: Vec::new(),
            red_placed: Vec::new(),
            last_rtp_ts: None,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &AfecConfig {
        &self.cfg
    }

    /// Counters.
    pub fn stats(&self) -> &AfecStats {
        &self.stats
    }

    /// Starts sending to `peer`. Adding a peer twice is a no-op.
    pub fn add_peer(&mut self, peer: SocketAddr) {
        self.peers.entry(peer).or_insert_with(PeerTx::new);
    }

    /// The code set size in force toward `peer` for `msg_type`.
    ///
    /// [`MsgType::ANY`] gives the size an RTP/RED receiver last asked for
    /// every type at once.
    pub fn code_set_size(&self, peer: SocketAddr, msg_type: MsgType) -> f64 {
        let p = self.peers.get(&peer);
        let any = p.and_then(|p| p.any_size);
        if msg_type == MsgType::ANY {
            return any.unwrap_or_else(|| self.cfg.initial_size(msg_type));
        }
        p.and_then(|p| p.types.get(&msg_type)).map_or_else(
            || any.unwrap_or_else(|| self.cfg.initial_size(msg_type)),
            |t| t.size,
        )
    }

    /// The MER of `msg_type` from remote user `from` over the window, if any message came.
    ///
    /// A stream that came as RTP/RED has one MER for all its types (under
    /// [`MsgType::ANY`]), which this returns whatever `msg_type` asks.
    pub fn mer(&self, from: u32, msg_type: MsgType) -> Option<f64> {
        let types = &self.remotes.get(&from)?.types;
        types
            .get(&msg_type)
            .or_else(|| types.get(&MsgType::ANY))
            .map(|t| t.window.mer())
    }

    /// Sends a message of `msg_type` to every peer, with the redundancy the
    /// type's code set size asks for. Returns the message's index. The
    /// message counts as sampled `now`; see
    /// [`send_sampled`](Self::send_sampled).
    pub fn send(
        &mut self,
        now: Instant,
        msg_type: MsgType,
        payload: Bytes,
    ) -> Result<u32, SendError> {
        self.send_sampled(now, now, msg_type, payload)
    }

    /// [`send`](Self::send) for a message the application sampled at
    /// `sampled` (a telepointer position read at a tick of its schedule),
    /// not `now`. In RTP/RED framing that instant is the message's RTP
    /// timestamp, as RFC 3550 §5.1 has it ("the sampling instant of the
    /// first octet in the RTP data packet"), so timestamps keep the
    /// application's steady rate whatever the send jitter (stock RED
    /// decoders place recovered blocks by interpolating timestamps). A
    /// `sampled` later than `now` counts as `now`, and timestamps never go
    /// backwards: a message sampled at or before the previous one gets the
    /// previous timestamp plus one tick. The native format ignores it.
    pub fn send_sampled(
        &mut self,
        now: Instant,
        sampled: Instant,
        msg_type: MsgType,
        payload: Bytes,
    ) -> Result<u32, SendError> {
        let red = self.cfg.framing == Framing::Red;
        let room = if red {
            self.cfg.mtu - RTP_HEADER_LEN - red::PRIMARY_HEADER_LEN
        } else {
            self.cfg.mtu - DATA_HEADER_LEN - MESSAGE_HEADER_LEN
        };
        if payload.len() > room || payload.len() > usize::from(u16::MAX) {
            return Err(SendError::TooLarge {
                len: payload.len(),
                max: room,
            });
        }
        if red && self.cfg.red.pt_of(msg_type).is_none() {
            return Err(SendError::NoPayloadType { msg_type });
        }
        let rtp_ts = {
            let ts = rtp_ticks(sampled.min(now), self.cfg.red.clock_rate);
            match self.last_rtp_ts {
                Some(last) if ts.wrapping_sub(last) as i32 <= 0 => last.wrapping_add(1),
                _ => ts,
            }
        };
        self.last_rtp_ts = Some(rtp_ts);
        let counter = self.next_index.entry(msg_type).or_insert(0);
        let index = *counter;
        *counter = counter.wrapping_add(1);
        let addrs: Vec<SocketAddr> = self.peers.keys().copied().collect();
        for addr in addrs {
            let peer = self
                .peers
                .get_mut(&addr)
                .expect("addresses come from the map");
            let initial = peer
                .any_size
                .unwrap_or_else(|| self.cfg.initial_size(msg_type));
            let t = peer
                .types
                .entry(msg_type)
                .or_insert_with(|| TypeTx::new(initial));
            let copies = t.next_requirement();
            peer.push_history(
                Hist {
                    msg_type,
                    index,
                    payload: payload.clone(),
                    first_sent: now,
                    remaining: copies,
                    rtp_ts,
                    rtp_seq: 0,
                },
                self.cfg.history_limit,
            );
            self.stats.messages_sent += 1;
            self.build_data(now, addr, false);
            let peer = self
                .peers
                .get_mut(&addr)
                .expect("addresses come from the map");
            peer.flush_at = Some(now + self.cfg.flush_after);
        }
        Ok(index)
    }

    /// Builds and queues one data packet toward `addr`: the newest history
    /// entry first (unless `flush`), then older ones whose requirement is
    /// not met, as long as they fit the MTU and the rate cap.
    ///
    /// In RTP/RED framing the newest entry is the primary block, and the
    /// older ones become redundant blocks, oldest first (RFC 2198 §3). A
    /// flush has no new message, but RFC 2198 has no packet without a
    /// primary (and `rtpreddec` drops one whose primary is empty), so it
    /// re-sends the newest message's packet, same sequence number and
    /// timestamp, with the redundancy still owed: a stock decoder then
    /// places the flush's blocks by the same timestamps as the original's.
    fn build_data(&mut self, now: Instant, addr: SocketAddr, flush: bool) {
        let cfg = &self.cfg;
        let red = cfg.framing == Framing::Red;
        let Some(peer) = self.peers.get_mut(&addr) else {
            return;
        };
        // No copy of a message older than its lifetime (TypeQos::lifetime).
        for h in peer.history.iter_mut().filter(|h| h.remaining > 0) {
            let expired = cfg
                .qos_of(h.msg_type)
                .lifetime
                .is_some_and(|l| now.saturating_duration_since(h.first_sent) > l);
            if expired {
                self.stats.expired_copies += u64::from(h.remaining);
                h.remaining = 0;
            }
        }
        peer.refill(now, cfg.max_bitrate);
        let (fixed, per_message, per_primary) = if red {
            (
                RTP_HEADER_LEN,
                red::REDUNDANT_HEADER_LEN,
                red::PRIMARY_HEADER_LEN,
            )
        } else {
            (DATA_HEADER_LEN, MESSAGE_HEADER_LEN, MESSAGE_HEADER_LEN)
        };
        let max_messages = if red { red::MAX_BLOCKS } else { MAX_MESSAGES };
        let mut len = fixed;
        // History positions carried, newest first.
        let mut chosen: Vec<usize> = Vec::new();
        let mut unmet: Vec<MsgType> = Vec::new();
        let mut redundant = 0u64;
        let mut owed = 0usize;
        let newest = peer.history.len().checked_sub(1);
        // The RED flush's primary: the newest message, owed a copy or not.
        let flush_primary = match newest {
            Some(n) if red && flush => {
                let h = &mut peer.history[n];
                if h.remaining > 0 {
                    h.remaining -= 1;
                    owed += 1;
                }
                len += per_primary + h.payload.len();
                redundant += 1;
                Some(n)
            }
            _ => None,
        };
        let primary_ts = newest.map_or(0, |n| peer.history[n].rtp_ts);
        for i in (0..peer.history.len()).rev() {
            let h = &mut peer.history[i];
            if h.remaining == 0 || flush_primary == Some(i) {
                continue;
            }
            let first = chosen.is_empty() && !flush;
            if red && !first {
                // RFC 2198 §3: 14 bits of offset, 10 bits of length. A copy
                // beyond either can never be carried: drop what it is owed.
                let offset = primary_ts.wrapping_sub(h.rtp_ts);
                if h.payload.len() > red::MAX_BLOCK_LEN
                    || offset > u32::from(red::MAX_TIMESTAMP_OFFSET)
                {
                    h.remaining = 0;
                    self.stats.red_uncarriable += 1;
                    continue;
                }
            }
            let size = if first { per_primary } else { per_message } + h.payload.len();
            let fits = chosen.len() + usize::from(flush_primary.is_some()) < max_messages
                && len + size <= cfg.mtu;
            let affordable = first || cfg.max_bitrate.is_none() || peer.tokens >= size as f64;
            if !fits || !affordable {
                if !unmet.contains(&h.msg_type) {
                    unmet.push(h.msg_type);
                }
                continue;
            }
            if cfg.max_bitrate.is_some() {
                peer.tokens -= size as f64;
            }
            len += size;
            h.remaining -= 1;
            owed += 1;
            if !first {
                redundant += 1;
            }
            chosen.push(i);
        }
        if owed == 0 {
            return;
        }
        let carried = chosen.len() + usize::from(flush_primary.is_some());
        let mut buf = BytesMut::zeroed(len);
        if red {
            let primary = flush_primary.unwrap_or_else(|| chosen[0]);
            let seq = if flush_primary.is_some() {
                peer.history[primary].rtp_seq
            } else {
                let seq = peer.next_seq as u16;
                peer.history[primary].rtp_seq = seq;
                peer.next_seq = peer.next_seq.wrapping_add(1);
                seq
            };
            let pt_of = |t| {
                cfg.red
                    .pt_of(t)
                    .expect("send() admits only types with a payload type in RED framing")
            };
            let p = &peer.history[primary];
            let repr = red::Repr {
                // Oldest first: `chosen` is newest first.
                redundant: chosen
                    .iter()
                    .rev()
                    .filter(|&&i| i != primary)
                    .map(|&i| {
                        let h = &peer.history[i];
                        red::Block {
                            payload_type: pt_of(h.msg_type),
                            timestamp_offset: u16::try_from(p.rtp_ts.wrapping_sub(h.rtp_ts))
                                .expect("offsets over 14 bits were left out above"),
                            data: &h.payload,
                        }
                    })
                    .collect(),
                primary: red::Primary {
                    payload_type: pt_of(p.msg_type),
                    data: &p.payload,
                },
            };
            RtpHeader {
                payload_type: cfg.red.payload_type,
                seq,
                timestamp: p.rtp_ts,
                ssrc: cfg.user,
                ..RtpHeader::default()
            }
            .emit(&mut buf);
            repr.emit(&mut buf[RTP_HEADER_LEN..])
                .expect("lengths, offsets and payload types were checked above");
        } else {
            let mut w = DataWriter::start(
                &mut buf,
                cfg.session,
                cfg.user,
                peer.next_seq,
                timestamp32(now),
            );
            for &i in &chosen {
                let h = &peer.history[i];
                let age = now.saturating_duration_since(h.first_sent).as_millis();
                w.push(&MessageRepr {
                    msg_type: h.msg_type,
                    index: h.index,
                    age_ms: u16::try_from(age).unwrap_or(u16::MAX),
                    payload: &h.payload,
                });
            }
            let written = w.finish(flush);
            debug_assert_eq!(written, len);
            peer.next_seq = peer.next_seq.wrapping_add(1);
        }
        if cfg.max_bitrate.is_some() {
            peer.tokens -= (fixed + IP_UDP_OVERHEAD) as f64;
        }
        peer.trim_history();
        self.stats.data_packets_sent += 1;
        self.stats.data_bytes_sent += len as u64;
        self.stats.redundant_copies_sent += redundant;
        if flush {
            self.stats.flush_packets_sent += 1;
        }
        self.transmits.push_back(Transmit {
            dst: addr,
            transport: Transport::Udp,
            payload: buf.freeze(),
        });
        // Cannot-meet bookkeeping, per type, from what fits now: a type
        // that stopped fitting raises the event and a reliable notice to
        // the peer; one that has fitted again for a whole packet, at least
        // UNMET_HOLD after it stopped, clears both ends (a notice with
        // NO_CAP), so a receiver's cap never outlives the reason for it.
        let achievable = carried as f64;
        let user_seq = &mut peer.next_ctl_seq;
        for (t, st) in peer.types.iter_mut() {
            let missed = unmet.contains(t);
            let value = match st.unmet_since {
                None if missed => {
                    st.unmet_since = Some(now);
                    self.events.push_back(AfecEvent::QosUnmet {
                        peer: addr,
                        msg_type: *t,
                        requested: st.size,
                        achievable,
                    });
                    achievable
                }
                Some(since)
                    if !missed && !flush && now.saturating_duration_since(since) >= UNMET_HOLD =>
                {
                    st.unmet_since = None;
                    self.events.push_back(AfecEvent::QosMet {
                        peer: addr,
                        msg_type: *t,
                    });
                    NO_CAP
                }
                _ => continue,
            };
            *user_seq += 1;
            peer.pending.push(Pending {
                entry: Entry {
                    op: Op::CannotMeet,
                    msg_type: *t,
                    seq: *user_seq,
                    value: size_to_wire(value),
                },
                due: now,
            });
        }
    }

    /// Flushes, retries control entries, and runs the MER check.
    fn on_timers(&mut self, now: Instant) {
        let addrs: Vec<SocketAddr> = self.peers.keys().copied().collect();
        for addr in &addrs {
            let due = self
                .peers
                .get(addr)
                .and_then(|p| p.flush_at)
                .is_some_and(|t| t <= now);
            if due {
                self.build_data(now, *addr, true);
                let interval = self.cfg.flush_interval;
                let p = self
                    .peers
                    .get_mut(addr)
                    .expect("addresses come from the map");
                p.flush_at = p
                    .history
                    .iter()
                    .any(|h| h.remaining > 0)
                    .then(|| now + interval);
            }
        }
        if self.next_check.is_some_and(|t| t <= now) {
            self.check_mer(now);
            self.next_check = Some(now + self.cfg.check_interval);
        }
        self.send_control(now);
    }

    /// The paper's control module: per (sender, type), when enough new
    /// messages arrived since the last change, NAK above the band and INC
    /// below it.
    ///
    /// Two choices the paper leaves open (its Fig. 9 shows the integer
    /// controller going up and down):
    /// - The decision looks only at messages that arrived since the last
    ///   change (up to the window): a 1000-message window that still holds
    ///   the losses from before a NAK keeps NAKing and overshoots (FEC-6 at
    ///   20% random loss, where FEC-2 suffices). The MER the application
    ///   sees ([`mer`](Self::mer)) is still over the whole window.
    /// - INC probes back off: when an INC is answered by a NAK back to the
    ///   size just left, the next INC from that size waits twice as many
    ///   messages (up to eight windows), so a size that is just enough is
    ///   not abandoned every few hundred messages.
    fn check_mer(&mut self, now: Instant) {
        if self.cfg.mode != Mode::Adaptive {
            return;
        }
        let step = match self.cfg.step {
            Step::Integer => 1.0,
            Step::Fractional(s) => s,
            _ => 0.0,
        };
        let predictive = self.cfg.step == Step::Predictive;
        let robust = self.cfg.step == Step::Robust;
        let max_gate = u32::try_from(self.cfg.mer_window.saturating_mul(8)).unwrap_or(u32::MAX);
        for (&from, r) in &mut self.remotes {
            if robust {
                r.loss.scan(&r.packets);
            }
            for (&t, st) in &mut r.types {
                let q = self
                    .cfg
                    .qos
                    .get(&t)
                    .copied()
                    .unwrap_or(self.cfg.default_qos);
                let gate = if robust {
                    robust::GATE
                } else {
                    self.cfg.gate_messages.max(1)
                };
                let recent = (st.since_change as usize).min(st.window.len());
                // The robust controller answers a change of channel at once
                // (and its first request too: it starts from what the first
                // packets show, not from a whole gate of size 1).
                let fresh =
                    robust && (st.seen_changes != r.loss.changes || st.controlled.is_none());
                let min_recent = if robust {
                    gate as usize
                } else {
                    self.cfg.min_window.min(self.cfg.mer_window)
                };
                if !fresh && (recent < min_recent || st.since_change < gate) {
                    continue;
                }
                let mer = st.window.recent_mer(recent);
                let cap = st.cap.unwrap_or(self.cfg.max_size).min(self.cfg.max_size);
                let (target, nak) = if robust {
                    // Steer the MER window to its aim (robust::Spread: as
                    // high in the band as the window's spread allows) with
                    // robust::window_goal, within [half the floor, the top
                    // plus the band's width]: the size never exceeds what
                    // the measured loss process needs for half the band's
                    // floor (robust.rs).
                    let mid = (q.mer_min + q.mer_max) / 2.0;
                    let width = q.mer_max - q.mer_min;
                    let controlled = st.controlled.map_or(0, |c| c as usize);
                    let span = controlled.min(st.window.len());
                    let aim =
                        st.spread
                            .aim(&st.window, span, self.cfg.mer_window, q.mer_min, q.mer_max);
                    let floor = (q.mer_min / 2.0).max(mid / 4.0);
                    let goal = robust::window_goal(&st.window, span, self.cfg.mer_window, aim)
                        .clamp(floor, q.mer_max + width);
                    let tau = self.cfg.mer_window as f64;
                    let Some(target) = robust_size(
                        &r.packets,
                        &r.loss,
                        tau,
                        floor,
                        goal,
                        width / 4.0,
                        st.current,
                        cap,
                    ) else {
                        // Nothing to change (or too few packets yet): a
                        // change of channel stays fresh until the regime has
                        // enough packets to say what it needs.
                        if robust_ready(&r.packets, &r.loss) {
                            st.seen_changes = r.loss.changes;
                            st.controlled.get_or_insert(0);
                        }
                        continue;
                    };
                    st.seen_changes = r.loss.changes;
                    st.controlled.get_or_insert(0);
                    (target, target > st.current)
                } else if predictive {
                    // Aim at the middle of the band, corrected by how far the
                    // measured MER over the window is from it: losses that
                    // already happened are made up for by aiming lower for a
                    // while, which keeps windows of messages inside the band
                    // on bursty paths where the long-run average alone does not.
                    let mid = (q.mer_min + q.mer_max) / 2.0;
                    let goal =
                        (mid - PREDICTIVE_FEEDBACK * (st.window.mer() - mid)).clamp(0.0, q.mer_max);
                    let tolerance = (q.mer_max - q.mer_min) / 2.0;
                    let Some(target) = predict_size(&r.packets, goal, tolerance, st.current, cap)
                    else {
                        continue;
                    };
                    (target, target > st.current)
                } else {
                    //= dyck-gutwin §"AFEC for groupware", Receiver
                    //# If any of the MERs are above the maximum, a negative
                    //# acknowledgement (NAK) is sent to the sender immediately, telling
                    //# the sender to increase the amount of redundancy for the specified
                    //# message type. If an MER is below its minimum value, the receiver
                    //# sends an increase acknowledgement (INC) message, which tells the
                    //# sender to reduce the redundancy for the specified message type.
                    // Fractional steps are small so the size can settle inside a
                    // narrow band; far above the band they grow with the excess
                    // (one step per multiple of the band's top), up to a whole
                    // packet, so a burst-loss path is not approached 0.1 at a time.
                    let up = match self.cfg.step {
                        Step::Fractional(s) if q.mer_max > 0.0 => {
                            (s * (mer / q.mer_max).floor()).clamp(s, 1.0)
                        }
                        _ => step,
                    };
                    let (target, nak) = if mer > q.mer_max {
                        ((st.current + up).min(cap), true)
                    } else if mer < q.mer_min && st.since_change >= st.inc_gate.max(gate) {
                        ((st.current - step).max(1.0), false)
                    } else {
                        continue;
                    };
                    let target = round_size(target);
                    if (target - st.current).abs() < 1e-9 {
                        continue;
                    }
                    if nak && st.last_inc_from.is_some_and(|f| (f - target).abs() < 1e-9) {
                        // The last INC left a size that was needed: probe less often.
                        st.inc_gate = st.inc_gate.max(gate).saturating_mul(2).min(max_gate);
                    }
                    st.last_inc_from = if nak { None } else { Some(st.current) };
                    (target, nak)
                };
                st.current = target;
                st.since_change = 0;
                r.next_ctl_seq += 1;
                let op = if nak { Op::Nak } else { Op::Inc };
                let entry = Entry {
                    op,
                    msg_type: t,
                    seq: r.next_ctl_seq,
                    value: size_to_wire(target),
                };
                r.pending.retain(|p| {
                    !(p.entry.msg_type == t && matches!(p.entry.op, Op::Nak | Op::Inc))
                });
                r.pending.push(Pending { entry, due: now });
                self.events.push_back(AfecEvent::Requested {
                    from,
                    msg_type: t,
                    size: target,
                    nak,
                });
            }
        }
    }

    /// Sends pending control entries that are due, with any
    /// acknowledgements owed, one packet per address: native control
    /// packets, or RTCP (an empty RR and a `GWAF` APP packet) toward a peer
    /// we send RTP/RED to and a remote whose data came as RTP/RED.
    fn send_control(&mut self, now: Instant) {
        let retry = self.cfg.control_retry;
        let red = self.cfg.framing == Framing::Red;
        let mut out: BTreeMap<SocketAddr, (Vec<Entry>, bool)> = BTreeMap::new();
        for (addr, p) in &mut self.peers {
            let o = out.entry(*addr).or_default();
            o.1 |= red;
            collect_due(&mut p.pending, &mut p.acks, now, retry, &mut o.0);
        }
        for r in self.remotes.values_mut() {
            let Some(addr) = r.addr else { continue };
            let mut entries = Vec::new();
            collect_due(&mut r.pending, &mut r.acks, now, retry, &mut entries);
            if entries.is_empty() {
                continue;
            }
            let rtcp = r.red.is_some();
            // No amplification: a remote sender's address is only what its
            // datagrams claim, so it never gets more bytes than it sent us
            // (QUIC's anti-amplification rule, RFC 9000 §8, at 1x and for
            // good: a live sender's data outweighs its feedback by far, so
            // the cap binds only on an address that stopped sending or
            // never sent). Held entries are sent at their next retry.
            let len: u64 = entries
                .chunks(MAX_ENTRIES)
                .map(|c| control_len(c.len(), rtcp) as u64)
                .sum();
            if r.bytes_sent + len > r.bytes_received {
                self.stats.control_held += 1;
                continue;
            }
            r.bytes_sent += len;
            let o = out.entry(addr).or_default();
            o.0.extend(entries);
            o.1 |= rtcp;
        }
        for (addr, (entries, rtcp)) in out {
            for chunk in entries.chunks(MAX_ENTRIES) {
                if chunk.is_empty() {
                    continue;
                }
                let repr = ControlRepr {
                    session: self.cfg.session,
                    sender: self.cfg.user,
                    entries: chunk.to_vec(),
                };
                let mut buf = vec![0u8; control_len(chunk.len(), rtcp)];
                if rtcp {
                    repr.emit_rtcp(&mut buf);
                } else {
                    repr.emit(&mut buf);
                }
                self.stats.control_packets_sent += 1;
                self.transmits.push_back(Transmit {
                    dst: addr,
                    transport: Transport::Udp,
                    payload: buf.into(),
                });
            }
        }
    }

    /// Admits a data packet of `len` bytes from sender `from` at `src`:
    /// false (counted as over the limit) for a new sender past
    /// `max_remote_senders`; else counts the packet, arms the adaptive
    /// check, and creates the sender's state if needed with `src` noted.
    fn admit(&mut self, now: Instant, from: u32, src: SocketAddr, len: usize) -> bool {
        if !self.remotes.contains_key(&from) && self.remotes.len() >= self.cfg.max_remote_senders {
            self.stats.over_limit += 1;
            return false;
        }
        self.stats.data_packets_received += 1;
        if self.next_check.is_none() && self.cfg.mode == Mode::Adaptive {
            self.next_check = Some(now + self.cfg.check_interval);
        }
        let cfg = &self.cfg;
        self.remotes
            .entry(from)
            .or_insert_with(|| PeerRx::new(cfg.packet_window))
            .note_address(src, len);
        true
    }

    fn handle_data(&mut self, now: Instant, src: SocketAddr, data: &[u8]) {
        let Ok(p) = DataPacket::new_checked(data) else {
            self.stats.malformed += 1;
            return;
        };
        // Collect message bounds first: a malformed message drops the packet.
        self.scratch.clear();
        let base = data.as_ptr() as usize;
        for m in p.messages() {
            match m {
                Ok(m) => {
                    let off = m.payload.as_ptr() as usize - base;
                    self.scratch
                        .push((m.msg_type, m.index, m.age_ms, off, m.payload.len()));
                }
                Err(_) => {
                    self.stats.malformed += 1;
                    return;
                }
            }
        }
        let from = p.sender();
        let sent_at = widen(now, p.timestamp());
        let flush =
            header::Packet::new_unchecked(data).flags() & crate::wire::afec::FLAG_FLUSH != 0;
        if !self.admit(now, from, src, data.len()) {
            return;
        }
        let cfg = &self.cfg;
        let r = self.remotes.get_mut(&from).expect("admitted");
        let _ = r.packets.observe(p.seq());
        r.packets_seen += 1;
        let queued = r.delay_above_floor(now, sent_at);
        // Oldest first (§"AFEC for groupware", Receiver: "The messages in a
        // packet are processed in reverse order from oldest to newest").
        for (i, &(msg_type, index, age_ms, off, len)) in self.scratch.iter().enumerate().rev() {
            if !r.types.contains_key(&msg_type) && r.types.len() >= cfg.max_types_per_sender {
                self.stats.over_limit += 1;
                continue;
            }
            let initial = cfg.initial_size(msg_type);
            let st = r
                .types
                .entry(msg_type)
                .or_insert_with(|| TypeRx::new(cfg.mer_window, initial));
            let age = Duration::from_millis(u64::from(age_ms)) + queued;
            let expired = cfg.qos_of(msg_type).lifetime.is_some_and(|l| age > l);
            match st.window.observe(index) {
                Observed::Duplicate => self.stats.duplicates += 1,
                Observed::TooOld => self.stats.duplicates += 1,
                Observed::Fresh { lost, late } if expired => {
                    // Too old to be of use: it stays (or becomes) a loss.
                    self.stats.lost += lost + u64::from(!late);
                    st.window.mark_lost(index);
                    self.stats.expired += 1;
                }
                Observed::Fresh { lost, late } => {
                    let recovered = flush || i != 0;
                    count_fresh(&mut self.stats, st, lost, late, recovered);
                    let first_sent =
                        sent_at.saturating_sub(Duration::from_millis(u64::from(age_ms)));
                    self.events.push_back(AfecEvent::Delivered(Delivery {
                        from,
                        addr: src,
                        msg_type,
                        index,
                        payload: Bytes::copy_from_slice(&data[off..off + len]),
                        recovered,
                        latency: now.saturating_duration_since(first_sent),
                    }));
                }
            }
        }
    }

    /// An RTP packet: RFC 2198 RED (payload type `red.payload_type`), or a
    /// plain packet of a mapped message type (a primary without
    /// redundancy, as RFC 2198 streams may mix in).
    fn handle_rtp(&mut self, now: Instant, src: SocketAddr, data: &[u8]) {
        let Ok((rtp, body)) = RtpHeader::parse(data) else {
            self.stats.malformed += 1;
            return;
        };
        let Ok(payload) = rtp.payload(body) else {
            self.stats.malformed += 1;
            return;
        };
        let base = data.as_ptr() as usize;
        let at = |d: &[u8]| (d.as_ptr() as usize - base, d.len());
        // Each redundant block as (type, offset, position, length).
        let mut blocks = std::mem::take(&mut self.red_blocks);
        blocks.clear();
        let red_cfg = &self.cfg.red;
        let primary = if rtp.payload_type == red_cfg.payload_type {
            let Ok(p) = red::Packet::new_checked(payload) else {
                self.stats.malformed += 1;
                self.red_blocks = blocks;
                return;
            };
            for b in p.redundant() {
                // A block of a payload type not in the table is not ours to name.
                if let Some(t) = red_cfg.type_of(b.payload_type) {
                    let (pos, len) = at(b.data);
                    blocks.push((t, b.timestamp_offset, pos, len));
                }
            }
            let prim = p.primary();
            red_cfg
                .type_of(prim.payload_type)
                .map(|t| (t, at(prim.data)))
        } else {
            red_cfg.type_of(rtp.payload_type).map(|t| (t, at(payload)))
        };
        let Some((primary_type, (primary_pos, primary_len))) = primary else {
            self.stats.ignored += 1;
            self.red_blocks = blocks;
            return;
        };
        let from = rtp.ssrc;
        if !self.admit(now, from, src, data.len()) {
            self.red_blocks = blocks;
            return;
        }
        let cfg = &self.cfg;
        let r = self.remotes.get_mut(&from).expect("admitted");
        let stream = r.red.get_or_insert_with(RedStream::default);
        // Which message each block is (afec::red): the primary first, then
        // the redundant blocks newest first, each an anchor for older ones.
        let mut placed = std::mem::take(&mut self.red_placed);
        placed.clear();
        let (ext, place) = stream.primary(rtp.seq, rtp.timestamp);
        match place {
            Place::At(x) => placed.push((x, usize::MAX)),
            Place::Known => self.stats.duplicates += 1,
            Place::TooOld => {
                self.stats.duplicates += 1 + blocks.len() as u64;
                blocks.clear();
            }
        }
        blocks.sort_by_key(|b| b.1);
        for (i, b) in blocks.iter().enumerate() {
            match b.1 {
                // As old as the primary: a copy of it.
                0 => self.stats.duplicates += 1,
                off => match stream.redundant(ext, rtp.timestamp, off) {
                    Place::At(x) => placed.push((x, i)),
                    Place::Known | Place::TooOld => self.stats.duplicates += 1,
                },
            }
        }
        let _ = r.packets.observe(ext as u32);
        r.packets_seen += 1;
        // One MER window per stream: RTP/RED cannot tell the type of a
        // message lost for good (wire::afec, "RTP/RED framing").
        if !r.types.contains_key(&MsgType::ANY) && r.types.len() >= cfg.max_types_per_sender {
            self.stats.over_limit += 1;
            self.red_blocks = blocks;
            self.red_placed = placed;
            return;
        }
        let st = r
            .types
            .entry(MsgType::ANY)
            .or_insert_with(|| TypeRx::new(cfg.mer_window, cfg.initial_size(MsgType::ANY)));
        // Oldest first (§"AFEC for groupware", Receiver).
        placed.sort_unstable();
        for &(x, i) in &placed {
            let (msg_type, offset, pos, len) = match blocks.get(i) {
                Some(&b) => b,
                None => (primary_type, 0, primary_pos, primary_len),
            };
            match st.window.observe(x as u32) {
                Observed::Duplicate | Observed::TooOld => self.stats.duplicates += 1,
                Observed::Fresh { lost, late } => {
                    let recovered = i != usize::MAX;
                    count_fresh(&mut self.stats, st, lost, late, recovered);
                    let sampled = rtp_instant(
                        now,
                        rtp.timestamp.wrapping_sub(u32::from(offset)),
                        cfg.red.clock_rate,
                    );
                    self.events.push_back(AfecEvent::Delivered(Delivery {
                        from,
                        addr: src,
                        msg_type,
                        index: x as u32,
                        payload: Bytes::copy_from_slice(&data[pos..pos + len]),
                        recovered,
                        latency: now.saturating_duration_since(sampled),
                    }));
                }
            }
        }
        self.red_blocks = blocks;
        self.red_placed = placed;
    }

    fn handle_control(&mut self, now: Instant, src: SocketAddr, data: &[u8]) {
        let Ok(c) = ControlRepr::parse(data) else {
            self.stats.malformed += 1;
            return;
        };
        self.apply_control(now, src, c);
    }

    /// RTCP on the data port: AFEC's feedback in a `GWAF` APP packet, or
    /// reports from some RTP tool, which carry nothing for us.
    fn handle_rtcp(&mut self, now: Instant, src: SocketAddr, data: &[u8]) {
        match ControlRepr::parse_rtcp(data) {
            Ok(Some(c)) => self.apply_control(now, src, c),
            Ok(None) => self.stats.ignored += 1,
            Err(_) => self.stats.malformed += 1,
        }
    }

    fn apply_control(&mut self, now: Instant, src: SocketAddr, c: ControlRepr) {
        self.stats.control_packets_received += 1;
        let mut reply = false;
        for e in c.entries {
            match e.op {
                Op::Nak | Op::Inc if e.msg_type == MsgType::ANY => {
                    // An RTP/RED receiver's request for every type we send
                    // to `src` (it cannot tell types apart; wire::afec).
                    let Some(peer) = self.peers.get_mut(&src) else {
                        self.stats.stale_control += 1;
                        continue;
                    };
                    let in_force = peer
                        .any_size
                        .unwrap_or_else(|| self.cfg.initial_size(MsgType::ANY));
                    let mut size = in_force;
                    if self.cfg.mode == Mode::Adaptive
                        && peer.any_applied_seq.is_none_or(|s| e.seq > s)
                    {
                        peer.any_applied_seq = Some(e.seq);
                        size = wire_to_size(e.value).clamp(1.0, self.cfg.max_size);
                        peer.any_size = Some(size);
                        for t in peer.types.values_mut() {
                            if (size - t.size).abs() > 1e-9 {
                                t.size = size;
                                t.acc = 0.0;
                            }
                        }
                        if (size - in_force).abs() > 1e-9 {
                            self.events.push_back(AfecEvent::CodeSetChanged {
                                peer: src,
                                msg_type: MsgType::ANY,
                                size,
                            });
                        }
                    } else if peer.any_applied_seq.is_some_and(|s| e.seq < s) {
                        self.stats.stale_control += 1;
                    }
                    peer.acks.push(Entry {
                        op: Op::Ack,
                        msg_type: MsgType::ANY,
                        seq: e.seq,
                        value: size_to_wire(size),
                    });
                    reply = true;
                }
                Op::Nak | Op::Inc => {
                    // A request about what we send to `src`.
                    let Some(peer) = self.peers.get_mut(&src) else {
                        self.stats.stale_control += 1;
                        continue;
                    };
                    let initial = self.cfg.initial_size(e.msg_type);
                    if !peer.types.contains_key(&e.msg_type)
                        && peer.types.len() >= self.cfg.max_types_per_sender
                    {
                        self.stats.over_limit += 1;
                        continue;
                    }
                    let t = peer
                        .types
                        .entry(e.msg_type)
                        .or_insert_with(|| TypeTx::new(initial));
                    if self.cfg.mode == Mode::Adaptive && t.applied_seq.is_none_or(|s| e.seq > s) {
                        t.applied_seq = Some(e.seq);
                        let size = wire_to_size(e.value).clamp(1.0, self.cfg.max_size);
                        if (size - t.size).abs() > 1e-9 {
                            t.size = size;
                            t.acc = 0.0;
                            self.events.push_back(AfecEvent::CodeSetChanged {
                                peer: src,
                                msg_type: e.msg_type,
                                size,
                            });
                        }
                    } else if t.applied_seq.is_some_and(|s| e.seq < s) {
                        self.stats.stale_control += 1;
                    }
                    // Always acknowledge, with the size in force.
                    peer.acks.push(Entry {
                        op: Op::Ack,
                        msg_type: e.msg_type,
                        seq: e.seq,
                        value: size_to_wire(t.size),
                    });
                    reply = true;
                }
                Op::CannotMeet => {
                    let Some(r) = self.remotes.get_mut(&c.sender) else {
                        self.stats.stale_control += 1;
                        continue;
                    };
                    r.note_address(src, 0);
                    let achievable = wire_to_size(e.value).max(1.0);
                    if r.cannot_meet_seq.is_none_or(|s| e.seq > s) {
                        r.cannot_meet_seq = Some(e.seq);
                        // An RTP/RED stream's types share one controller.
                        let key = if r.types.contains_key(&e.msg_type) {
                            e.msg_type
                        } else {
                            MsgType::ANY
                        };
                        let cleared = achievable >= NO_CAP;
                        if let Some(st) = r.types.get_mut(&key) {
                            st.cap = (!cleared).then_some(achievable);
                        }
                        self.events.push_back(if cleared {
                            AfecEvent::PeerCanMeet {
                                from: c.sender,
                                msg_type: e.msg_type,
                            }
                        } else {
                            AfecEvent::PeerCannotMeet {
                                from: c.sender,
                                msg_type: e.msg_type,
                                achievable,
                            }
                        });
                    }
                    r.acks.push(Entry {
                        op: Op::Ack,
                        msg_type: e.msg_type,
                        seq: e.seq,
                        value: 0,
                    });
                    reply = true;
                }
                Op::Ack => {
                    // Acknowledges one of our requests (as receiver) or notices (as sender).
                    if let Some(r) = self.remotes.get_mut(&c.sender) {
                        let before = r.pending.len();
                        r.pending
                            .retain(|p| p.entry.seq != e.seq || p.entry.msg_type != e.msg_type);
                        if r.pending.len() < before && e.value > 0 {
                            if let Some(st) = r.types.get_mut(&e.msg_type) {
                                // The size in force, as the sender reports it.
                                st.current = wire_to_size(e.value);
                            }
                        }
                    }
                    if let Some(p) = self.peers.get_mut(&src) {
                        p.pending
                            .retain(|p| p.entry.seq != e.seq || p.entry.msg_type != e.msg_type);
                    }
                }
            }
        }
        if reply {
            self.send_control(now);
        }
    }
}

/// Why a message could not be sent.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SendError {
    /// The message does not fit one packet.
    #[error("message of {len} bytes does not fit the path MTU (at most {max} bytes)")]
    TooLarge {
        /// Its length.
        len: usize,
        /// The largest that fits.
        max: usize,
    },
    /// RTP/RED framing: the type has no payload type in [`RedConfig::types`].
    #[error("message type {msg_type} has no RTP payload type (RedConfig::types)")]
    NoPayloadType {
        /// The type.
        msg_type: MsgType,
    },
}

impl Machine for AfecEndpoint {
    type Event = AfecEvent;

    fn handle_datagram(&mut self, now: Instant, src: SocketAddr, data: &[u8]) {
        // RTP and RTCP carry version 2 in the top bits of byte 0; groupwire's
        // own header has version 1 in the whole byte, so those bits are 0.
        if data.first().is_some_and(|b| b >> 6 == RTP_VERSION) {
            if rtcp::is_rtcp(data) {
                self.handle_rtcp(now, src, data);
            } else {
                self.handle_rtp(now, src, data);
            }
            return;
        }
        let h = match header::Repr::parse(&header::Packet::new_unchecked(data)) {
            Ok(h) => h,
            Err(_) => {
                self.stats.malformed += 1;
                return;
            }
        };
        if h.session != self.cfg.session {
            self.stats.ignored += 1;
            return;
        }
        match h.kind {
            Kind::AfecData => self.handle_data(now, src, data),
            Kind::AfecControl => self.handle_control(now, src, data),
            _ => self.stats.ignored += 1,
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.on_timers(now);
    }

    fn poll_transmit(&mut self, _now: Instant) -> Option<Transmit> {
        self.transmits.pop_front()
    }

    fn poll_event(&mut self) -> Option<AfecEvent> {
        self.events.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let flush = self.peers.values().filter_map(|p| p.flush_at);
        let retries = self
            .peers
            .values()
            .flat_map(|p| p.pending.iter().map(|x| x.due))
            .chain(
                self.remotes
                    .values()
                    .flat_map(|r| r.pending.iter().map(|x| x.due)),
            );
        flush.chain(retries).chain(self.next_check).min()
    }
}

// ---- Helpers -------------------------------------------------------------

/// A control entry, sender or receiver side, resent until acknowledged.
#[derive(Debug)]
struct Pending {
    entry: Entry,
    due: Instant,
}

/// Moves due entries (and all owed ACKs) into `out`, re-arming each entry's retry.
fn collect_due(
    pending: &mut [Pending],
    acks: &mut Vec<Entry>,
    now: Instant,
    retry: Duration,
    out: &mut Vec<Entry>,
) {
    out.append(acks);
    for p in pending.iter_mut() {
        if p.due <= now {
            out.push(p.entry);
            p.due = now + retry;
        }
    }
    // Bound a control packet's size even if a peer floods requests.
    out.truncate(MAX_ENTRIES * 4);
}

/// Bytes of a control packet of `entries` entries, native or RTCP.
fn control_len(entries: usize, rtcp: bool) -> usize {
    if rtcp {
        ControlRepr::rtcp_len(entries)
    } else {
        ControlRepr::wire_len(entries)
    }
}

/// `at` in ticks of an RTP clock of `rate` Hz since the driver's epoch,
/// rounded to the nearest tick (so a 30 Hz schedule in nanoseconds lands
/// on whole ticks of 90 kHz), low 32 bits (RFC 3550 §5.1: the timestamp
/// wraps).
fn rtp_ticks(at: Instant, rate: u32) -> u32 {
    let ticks = (u128::from(at.as_nanos()) * u128::from(rate) + 500_000_000) / 1_000_000_000;
    ticks as u32
}

/// How long a type that stopped fitting stays "cannot meet" at least,
/// before a packet that leaves none of its copies out clears it: at most
/// two notices a second per type on a path at the edge of fitting.
const UNMET_HOLD: Duration = Duration::from_secs(1);

/// The "achievable" size of a cannot-meet notice that clears it: any size
/// fits again.
const NO_CAP: f64 = 255.0;

/// Code set sizes travel as hundredths.
fn size_to_wire(size: f64) -> u16 {
    (size * 100.0).round().clamp(0.0, f64::from(u16::MAX)) as u16
}

fn wire_to_size(v: u16) -> f64 {
    f64::from(v) / 100.0
}

/// Sizes are kept at the wire's resolution so both ends agree exactly.
fn round_size(size: f64) -> f64 {
    wire_to_size(size_to_wire(size))
}

/// The instant RTP timestamp `ts` (ticks of `rate` Hz since the sender's
/// epoch) most likely means on `now`'s clock: at most 2^31 ticks back.
fn rtp_instant(now: Instant, ts: u32, rate: u32) -> Instant {
    let back = rtp_ticks(now, rate).wrapping_sub(ts);
    if back < 1 << 31 {
        let nanos = u128::from(back) * 1_000_000_000 / u128::from(rate.max(1));
        now.saturating_sub(Duration::from_nanos(
            u64::try_from(nanos).unwrap_or(u64::MAX),
        ))
    } else {
        now
    }
}

/// Counts a message new to its type's window `st`: the `lost` ones it
/// skipped (one loss fewer if it is itself `late`, counted lost before),
/// one more since the type's last change, and its delivery as `recovered`
/// or new.
fn count_fresh(stats: &mut AfecStats, st: &mut TypeRx, lost: u64, late: bool, recovered: bool) {
    stats.lost += lost;
    if late {
        stats.lost = stats.lost.saturating_sub(1);
    }
    st.since_change = st.since_change.saturating_add(1);
    if let Some(c) = st.controlled.as_mut() {
        *c = c.saturating_add(1);
    }
    if recovered {
        stats.delivered_recovered += 1;
    } else {
        stats.delivered_new += 1;
    }
}

/// Low 32 bits of `now` in microseconds.
fn timestamp32(now: Instant) -> u32 {
    (now.as_micros() & 0xffff_ffff) as u32
}

/// The instant a 32-bit microsecond timestamp most likely means, relative
/// to `now` on the same clock: at most 2^31 us (35 minutes) in the past.
fn widen(now: Instant, ts: u32) -> Instant {
    let back = timestamp32(now).wrapping_sub(ts);
    if back < 1 << 31 {
        now.saturating_sub(Duration::from_micros(u64::from(back)))
    } else {
        now
    }
}
