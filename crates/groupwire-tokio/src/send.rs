//! The one routine every socket loop sends with: transmits in order, runs
//! of one size to one destination as one GSO send where the socket can.

use groupwire_proto::units::MAX_UDP_PAYLOAD;
use groupwire_proto::{Transmit, Transport};
use tracing::{debug, trace};

use crate::socket::DatagramSocket;

/// What one [`send_transmits`] call did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SendTally {
    /// Datagrams the socket accepted.
    pub datagrams: u64,
    /// Socket calls that sent them.
    pub calls: u64,
    /// Their bytes (UDP payload).
    pub bytes: u64,
    /// Datagrams in calls the socket refused: lost, never an error.
    pub errors: u64,
    /// Transmits for a transport a UDP socket does not carry, dropped.
    pub unsupported: u64,
}

/// Sends `ts` in order: a run of UDP transmits of one size to one
/// destination (the last may be shorter, as GSO allows) goes in one
/// [`DatagramSocket::send_segments`] call where the socket offers
/// segmentation offload, else one `send_to` each. A failed call is a lost
/// datagram per datagram it carried. `scratch` holds a run's segments glued
/// together; pass the same one each time so it is allocated once.
pub(crate) async fn send_transmits<S: DatagramSocket>(
    socket: &S,
    ts: &[Transmit],
    scratch: &mut Vec<u8>,
) -> SendTally {
    let max_segments = socket.max_send_segments().max(1);
    let mut tally = SendTally::default();
    let mut i = 0;
    while i < ts.len() {
        let t = &ts[i];
        if t.transport != Transport::Udp {
            tally.unsupported += 1;
            debug!(dst = %t.dst, transport = ?t.transport, "transmit dropped: UDP socket");
            i += 1;
            continue;
        }
        let end = gso_run(ts, i, max_segments);
        let n = (end - i) as u64;
        let sent = if n == 1 {
            socket.send_to(&t.payload, t.dst).await
        } else {
            scratch.clear();
            for u in &ts[i..end] {
                scratch.extend_from_slice(&u.payload);
            }
            socket.send_segments(scratch, t.payload.len(), t.dst).await
        };
        match sent {
            Ok(bytes) => {
                tally.calls += 1;
                tally.datagrams += n;
                tally.bytes += bytes as u64;
            }
            Err(e) => {
                tally.errors += n;
                trace!(dst = %t.dst, datagrams = n, error = %e, "send failed: counted as lost datagrams");
            }
        }
        i = end;
    }
    tally
}

/// The end of the GSO run that starts at `ts[start]` (a UDP transmit): the
/// following UDP transmits to the same destination with the same length,
/// plus at most one shorter one, up to `max_segments` and the largest UDP
/// payload in all.
pub(crate) fn gso_run(ts: &[Transmit], start: usize, max_segments: usize) -> usize {
    let first = &ts[start];
    let size = first.payload.len();
    let mut end = start + 1;
    if size == 0 {
        return end;
    }
    while end < ts.len()
        && end - start < max_segments
        && (end - start + 1) * size <= MAX_UDP_PAYLOAD
    {
        let t = &ts[end];
        if t.transport != Transport::Udp
            || t.dst != first.dst
            || t.payload.len() > size
            || t.payload.is_empty()
        {
            break;
        }
        end += 1;
        if t.payload.len() < size {
            break;
        }
    }
    end
}

/// Sleeps until `deadline`, or forever without one: the timer arm of every
/// driver's select loop, fed by a machine's `poll_timeout`.
pub async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}
