//! [`XorListener`]: XOR FEC from a sender whose address is not known in
//! advance (`groupwire awareness recv --protocol xor:3`), as a [`Machine`].

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;

use super::{
    XorDecoderStats, XorDelivery, XorEndpoint, XorEndpointConfig, XorEndpointStats, XorLayoutError,
};
use crate::wire::rtp::RtpHeader;
use crate::{Instant, Machine, Transmit};

/// What an [`XorListener`] tells its application.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum XorListenerEvent {
    /// A sender's stream starts: the first one heard, or one that took the
    /// place of a peer silent for the listener's `peer_idle`. Deliveries
    /// after this are numbered afresh ([`XorDelivery::index`] restarts).
    NewPeer(SocketAddr),
    /// A media payload, as it arrived or rebuilt from parity.
    Delivered(XorDelivery),
}

/// What an [`XorListener`] dropped before its endpoint saw it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct XorListenerStats {
    /// Datagrams before any peer that were not a media packet of the
    /// stream (RTP, the media payload type, the expected SSRC).
    pub invalid_before_peer: u64,
    /// Datagrams from another address while the peer was alive.
    pub foreign: u64,
    /// Streams started after the first (a new or restarted sender).
    pub restarts: u64,
}

/// An [`XorEndpoint`] toward the sender of the first valid media packet.
///
/// A receiver that binds an address and waits (as `groupwire awareness
/// recv` does) knows neither the sender's address nor its port; an
/// [`XorEndpoint`] takes datagrams from its configured peer only. The
/// listener makes the source of the first media packet of the stream
/// ("valid": RTP with the template's media payload type and, if set, its
/// `peer_ssrc`) the peer, and runs a fresh endpoint toward it. Parity
/// packets claim nothing (SMPTE 2022-1 parity carries SSRC 0), nor does
/// anything else; datagrams from other addresses are counted and dropped
/// while the peer is alive. After `peer_idle` without a packet the
/// endpoint took, the next valid media packet, from the peer or anyone
/// else, starts a fresh endpoint ([`XorListenerEvent::NewPeer`]): a
/// restarted sender numbers its packets from its start again. Nothing is
/// sent to an address before a valid media packet came from it (the
/// scheme is open loop: a receiving endpoint sends nothing at all).
///
/// Methods: getters ([`peer`](Self::peer), [`stats`](Self::stats),
/// [`endpoint_stats`](Self::endpoint_stats),
/// [`decoder_stats`](Self::decoder_stats)), the [`Machine`] inputs and
/// outputs. Drain contract as for every [`Machine`]; the only timer is the
/// endpoint's.
#[derive(Debug)]
pub struct XorListener {
    template: XorEndpointConfig,
    peer_idle: Duration,
    inner: Option<XorEndpoint>,
    /// When the endpoint last took a packet.
    last_heard: Option<Instant>,
    /// Counters of endpoints already replaced.
    retired: (XorEndpointStats, XorDecoderStats),
    events: VecDeque<XorListenerEvent>,
    stats: XorListenerStats,
}

impl XorListener {
    /// A listener whose endpoints follow `template` (its `peer` is replaced
    /// by the one learned). Fails on an impossible layout.
    pub fn new(template: XorEndpointConfig, peer_idle: Duration) -> Result<Self, XorLayoutError> {
        template.layout.validate()?;
        Ok(Self {
            template,
            peer_idle,
            inner: None,
            last_heard: None,
            retired: Default::default(),
            events: VecDeque::new(),
            stats: XorListenerStats::default(),
        })
    }

    /// The sender in use, once one was heard.
    pub fn peer(&self) -> Option<SocketAddr> {
        self.inner.as_ref().map(|ep| ep.config().peer)
    }

    /// What the listener dropped itself.
    pub fn stats(&self) -> XorListenerStats {
        self.stats
    }

    /// The endpoints' counters, over every peer so far.
    pub fn endpoint_stats(&self) -> XorEndpointStats {
        let mut s = self.retired.0;
        if let Some(ep) = &self.inner {
            s += ep.stats();
        }
        s
    }

    /// The decoders' counters, over every peer so far.
    pub fn decoder_stats(&self) -> XorDecoderStats {
        let mut s = self.retired.1;
        if let Some(ep) = &self.inner {
            s += ep.decoder_stats();
        }
        s
    }

    /// A media packet that may claim the peer's place.
    fn is_valid_media(&self, data: &[u8]) -> bool {
        RtpHeader::parse(data).is_ok_and(|(h, _)| {
            h.payload_type == self.template.media_pt
                && self.template.peer_ssrc.is_none_or(|s| s == h.ssrc)
        })
    }

    /// Replaces the endpoint by a fresh one toward `peer`.
    fn start(&mut self, peer: SocketAddr) {
        if let Some(old) = self.inner.take() {
            self.stats.restarts += 1;
            self.retired.0 += old.stats();
            self.retired.1 += old.decoder_stats();
        }
        let cfg = XorEndpointConfig {
            peer,
            ..self.template
        };
        self.inner = Some(XorEndpoint::new(cfg).expect("layout validated in XorListener::new"));
        self.events.push_back(XorListenerEvent::NewPeer(peer));
    }
}

impl Machine for XorListener {
    type Event = XorListenerEvent;

    /// Any input is safe: invalid or foreign datagrams are counted and
    /// dropped.
    fn handle_datagram(&mut self, now: Instant, src: SocketAddr, data: &[u8]) {
        let silent = self
            .last_heard
            .is_some_and(|t| now.saturating_duration_since(t) >= self.peer_idle);
        match self.peer() {
            None if self.is_valid_media(data) => self.start(src),
            None => {
                self.stats.invalid_before_peer += 1;
                return;
            }
            Some(_) if silent && self.is_valid_media(data) => self.start(src),
            Some(p) if p != src => {
                self.stats.foreign += 1;
                return;
            }
            Some(_) => {}
        }
        let ep = self.inner.as_mut().expect("a peer has an endpoint");
        let heard = |ep: &XorEndpoint| {
            let d = ep.decoder_stats();
            d.media + d.media_duplicate + d.media_late + d.fec + d.fec_duplicate
        };
        let before = heard(ep);
        ep.handle_datagram(now, src, data);
        if heard(ep) != before {
            self.last_heard = Some(now);
        }
        while let Some(d) = ep.poll_event() {
            self.events.push_back(XorListenerEvent::Delivered(d));
        }
    }

    /// Closes the endpoint's open groups when due; early calls are no-ops.
    fn handle_timeout(&mut self, now: Instant) {
        if let Some(ep) = self.inner.as_mut() {
            ep.handle_timeout(now);
        }
    }

    fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
        self.inner.as_mut()?.poll_transmit(now)
    }

    /// Call until `None` after every input.
    fn poll_event(&mut self) -> Option<XorListenerEvent> {
        self.events.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.inner.as_ref()?.poll_timeout()
    }
}
