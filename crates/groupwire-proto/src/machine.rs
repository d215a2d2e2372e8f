//! The contract between a protocol state machine and whatever drives it.

use std::net::SocketAddr;

use bytes::Bytes;

use crate::time::Instant;

/// Which transport a [`Transmit`] should go out on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Transport {
    /// One UDP datagram.
    Udp,
    /// One length-prefixed frame on stream connection number `stream` to
    /// `dst` (TCP, or WebSocket). Most machines use stream 0 alone; a
    /// [`Session`](crate::session::Session)'s striped channels spread
    /// over streams 0 to `n - 1` (Leigh et al. §4.3), below
    /// [`MAX_STREAMS`]. Each stream is reliable and ordered on its own;
    /// frames on two streams have no order between them.
    TcpFrame {
        /// The connection's number among the peer's streams.
        stream: u8,
    },
}

impl Transport {
    /// A frame on stream 0, the one most machines use.
    pub const FRAME: Self = Self::TcpFrame { stream: 0 };
}

/// Most stream connections a [`StreamMachine`] uses to one peer: stream
/// numbers are below this.
pub const MAX_STREAMS: u8 = 8;

/// A datagram the caller must send. `payload` is `Bytes` so a relay fans out
/// without copies.
#[derive(Debug, Clone)]
#[must_use = "a Transmit must be sent (or counted as lost)"]
pub struct Transmit {
    /// Where to send it.
    pub dst: SocketAddr,
    /// How to send it.
    pub transport: Transport,
    /// The bytes on the wire, our header included.
    pub payload: Bytes,
}

/// A protocol state machine with no I/O, no clock and no threads.
///
/// **Drain contract:** call one `handle_*` method or command, then drain:
/// [`poll_transmit`](Machine::poll_transmit) until `None`,
/// [`poll_event`](Machine::poll_event) until `None`, then read
/// [`poll_timeout`](Machine::poll_timeout) and call
/// [`handle_timeout`](Machine::handle_timeout) no later than that. `now` never
/// goes backwards. A command a machine documents as *queueing* (such as
/// [`TunnelEndpoint::send`](crate::tunnel::TunnelEndpoint::send)) may be
/// repeated, one per datagram of a batch the application handed over, before
/// one drain: its output waits in the machine, which may order the batch's
/// output as a whole (an XOR endpoint puts the batch's parity after its media,
/// so a driver sends equal-sized runs in one segmentation-offload call).
pub trait Machine {
    /// What the machine tells its application (delivered messages, QoS signals, ...).
    type Event;
    /// Feed one datagram from the network. Malformed input is counted in the
    /// machine's stats and dropped; it never panics.
    fn handle_datagram(&mut self, now: Instant, src: SocketAddr, data: &[u8]);
    /// Let timers fire. Spurious or early calls are harmless no-ops.
    fn handle_timeout(&mut self, now: Instant);
    /// The next datagram to send, if any. Call until `None` after every input.
    fn poll_transmit(&mut self, now: Instant) -> Option<Transmit>;
    /// [`poll_transmit`](Machine::poll_transmit) with the DiffServ code
    /// point (six bits, RFC 2474) the datagram should carry, `None` for
    /// unmarked. A driver that can mark sets it as the traffic class (the
    /// simulator on the packet, honoured by its classful links). The
    /// default marks nothing; a machine that marks overrides it, and a
    /// driver calls one of the two, never both.
    fn poll_transmit_marked(&mut self, now: Instant) -> Option<(Transmit, Option<u8>)> {
        self.poll_transmit(now).map(|t| (t, None))
    }
    /// The next event for the application, if any. Call until `None` after every input.
    fn poll_event(&mut self) -> Option<Self::Event>;
    /// When [`handle_timeout`](Machine::handle_timeout) should next be called.
    /// May change after any `handle_*`, command, or `poll_transmit` returning `Some`.
    fn poll_timeout(&self) -> Option<Instant>;
}

/// Bytes of the length (big endian) in front of every frame a driver
/// writes on a [`StreamMachine`]'s stream: frames' bytes on the stream, as
/// [`StreamMachine::handle_stream_sent`] counts them, include it.
pub const FRAME_PREFIX: usize = 4;

/// A [`Machine`] that also talks to its peer over a reliable, ordered
/// message stream (one TCP connection, or anything the driver makes as
/// reliable): it emits those messages as [`Transmit`]s with
/// [`Transport::TcpFrame`], beside its UDP datagrams, and the driver hands
/// every frame that arrives on the stream, whole and in order, to
/// [`handle_frame`](StreamMachine::handle_frame). The drain contract is
/// [`Machine`]'s.
pub trait StreamMachine: Machine {
    /// Feed one whole frame from stream number `stream` (below
    /// [`MAX_STREAMS`]; 0 for a driver with one) with `src`. Malformed or
    /// unexpected frames are counted in the machine's stats and dropped; it
    /// never panics.
    fn handle_frame(&mut self, now: Instant, src: SocketAddr, stream: u8, frame: &[u8]);
    /// The driver has sent `bytes` of the frames it took for `dst`'s
    /// stream number `stream` (length
    /// prefixes included: the stream's own bytes): they left its queue for
    /// the network, or were dropped with a connection that failed. A
    /// machine that bounds what a driver holds unsent (a session's
    /// [`stream_window`](crate::session::SessionConfig::stream_window))
    /// hands over more; the default ignores it, and a driver that never
    /// calls it must leave such bounds off.
    fn handle_stream_sent(&mut self, now: Instant, dst: SocketAddr, stream: u8, bytes: usize) {
        let _ = (now, dst, stream, bytes);
    }
}
