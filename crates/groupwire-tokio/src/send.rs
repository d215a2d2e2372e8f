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
    send_transmits_marked(socket, ts, scratch, 0).await
}

/// [`send_transmits`] with the traffic-class byte `tos` on every datagram
/// ([`DatagramSocket::send_segments_marked`]; 0: unmarked, the plain path).
pub(crate) async fn send_transmits_marked<S: DatagramSocket>(
    socket: &S,
    ts: &[Transmit],
    scratch: &mut Vec<u8>,
    tos: u8,
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
            if tos == 0 {
                socket.send_to(&t.payload, t.dst).await
            } else {
                let len = t.payload.len();
                socket
                    .send_segments_marked(&t.payload, len, t.dst, tos)
                    .await
            }
        } else {
            scratch.clear();
            for u in &ts[i..end] {
                scratch.extend_from_slice(&u.payload);
            }
            let seg = t.payload.len();
            if tos == 0 {
                socket.send_segments(scratch, seg, t.dst).await
            } else {
                socket.send_segments_marked(scratch, seg, t.dst, tos).await
            }
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

/// A timer for a select loop that keeps its registration: [`set`](Self::set)
/// it to the machine's deadline each turn and await [`wait`](Self::wait);
/// it touches tokio's timer only when the deadline changes. For loops that
/// turn far more often than their deadline moves (a client's keepalive),
/// where a fresh [`sleep_until`] per turn would register and cancel a timer
/// every time.
#[derive(Debug)]
pub struct Deadline {
    sleep: std::pin::Pin<Box<tokio::time::Sleep>>,
    at: Option<tokio::time::Instant>,
    /// `wait` was polled since the last change: the timer holds the
    /// task's waker and wakes it when it fires.
    registered: bool,
}

impl Deadline {
    /// A timer that is not armed.
    pub fn new() -> Self {
        Self {
            sleep: Box::pin(tokio::time::sleep(std::time::Duration::from_secs(
                365 * 24 * 3600,
            ))),
            at: None,
            registered: false,
        }
    }

    /// Arms the timer for `at`, or disarms it with `None`.
    pub fn set(&mut self, at: Option<tokio::time::Instant>) {
        if at != self.at {
            if let Some(t) = at {
                self.sleep.as_mut().reset(t);
            }
            self.at = at;
            self.registered = false;
        }
    }

    /// Whether [`wait`](Self::wait) has to be polled this turn: it is armed
    /// and either not polled since it was set or due. A task that awaits
    /// nothing but this timer and other wakers may leave it out of its
    /// select while this is `false` (`if deadline.needs_poll()`): the timer
    /// already holds the task's waker, and polling it on every turn of a
    /// busy loop was a measurable share of a load generator's CPU.
    pub fn needs_poll(&self) -> bool {
        self.at.is_some() && (!self.registered || self.sleep.is_elapsed())
    }

    /// Completes at the deadline (at once if it has passed); never while
    /// disarmed.
    pub async fn wait(&mut self) {
        match self.at {
            Some(_) => {
                std::future::poll_fn(|cx| {
                    let r = self.sleep.as_mut().poll(cx);
                    self.registered = r.is_pending();
                    r
                })
                .await;
            }
            None => std::future::pending().await,
        }
    }
}

impl Default for Deadline {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::Deadline;
    use crate::Clock;

    #[tokio::test(start_paused = true)]
    async fn a_deadline_fires_when_set_moves_with_set_and_sleeps_when_disarmed() {
        let clock = Clock::start();
        let mut d = Deadline::new();
        let never = tokio::time::timeout(Duration::from_secs(3600), d.wait()).await;
        assert!(never.is_err(), "a disarmed deadline never fires");
        let start = clock.now();
        d.set(Some(clock.to_tokio(start + Duration::from_millis(50))));
        d.set(Some(clock.to_tokio(start + Duration::from_millis(20))));
        d.wait().await;
        assert_eq!(clock.now(), start + Duration::from_millis(20));
        d.set(None);
        assert!(
            tokio::time::timeout(Duration::from_secs(10), d.wait())
                .await
                .is_err()
        );
    }

    /// Once polled, a deadline wakes its task by itself: it needs polling
    /// again only when it is due or set to another time.
    #[tokio::test(start_paused = true)]
    async fn a_deadline_needs_polling_only_when_newly_set_or_due() {
        let clock = Clock::start();
        let mut d = Deadline::new();
        assert!(!d.needs_poll(), "disarmed");
        let start = clock.now();
        d.set(Some(clock.to_tokio(start + Duration::from_millis(50))));
        assert!(d.needs_poll(), "not registered yet");
        let early = tokio::time::timeout(Duration::from_millis(10), d.wait()).await;
        assert!(early.is_err());
        assert!(!d.needs_poll(), "registered, not due");
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert!(d.needs_poll(), "due");
        d.wait().await;
        d.set(Some(clock.to_tokio(start + Duration::from_millis(100))));
        assert!(d.needs_poll(), "set again");
    }
}
