//! Input from the connection readers to the core task: one queue per
//! connection, served round robin within each receive-priority lane.
//!
//! A reader appends what it reads to its connection's own queue; when the
//! queue was empty it also hands the core task a *ready token* for the
//! connection. The core task keeps the tokens in one ring per lane and
//! takes one input at a time: from the highest lane that has a token, the
//! connection at the front of that lane's ring, whose token goes to the
//! back of the ring (of the connection's lane now) if its queue holds more.
//! So within a lane every busy connection gets one input per round: a
//! client that floods frames delays another client's next frame by at
//! most one of its own, not by everything it has queued (a shared FIFO
//! per lane, as before, let 100 flooders put a thousand frames ahead of a
//! member's one). Across lanes the order is by priority (Litiu & Prakash
//! §4.5, the Client Receiver threads at the priority of their groups).
//!
//! A connection's frames keep their order (one queue), whatever lane it is
//! in; its lane applies from its next turn. Memory per connection is
//! bounded by its in-flight budget: at most [`MAX_QUEUED_FRAMES`] frames
//! (a queue that deep is never empty while the reader keeps up, since the
//! core takes one frame per connection per round) and at most
//! `ConnShared::inflight_bytes` bytes. The tokens are bounded by the
//! number of connections (at most one each).

use std::collections::VecDeque;
use std::sync::{Arc, PoisonError};

use bytes::Bytes;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

use super::{ConnShared, FRAME_OVERHEAD, LANES};

/// Frames a connection may have queued for the core task; its reader waits
/// for room beyond it. Without it the byte budget alone (sized for one
/// frame of up to the frame cap, 1 MiB by default) let one client queue
/// thirteen thousand `Ping`s, about a megabyte of relay memory each.
pub(super) const MAX_QUEUED_FRAMES: usize = 64;
use crate::frame::FrameError;
use crate::sched::ConnId;

/// Input from connection readers (each frame holds its connection's
/// in-flight permits until the core is done with it).
#[derive(Debug)]
pub(super) enum Input {
    /// A frame, with its share of the connection's in-flight budget (bytes
    /// and frames), returned when the core is done with it.
    Frame(ConnId, Bytes, [OwnedSemaphorePermit; 2]),
    StreamError(ConnId, FrameError),
    /// A WebSocket text message: `PROTOCOL_VIOLATION`.
    Violation(ConnId, &'static str),
    /// The handshake or idle timer fired: `TIMEOUT`.
    Timeout(ConnId, String),
}

impl Input {
    pub(super) fn conn(&self) -> ConnId {
        match self {
            Self::Frame(c, ..)
            | Self::StreamError(c, _)
            | Self::Violation(c, _)
            | Self::Timeout(c, _) => *c,
        }
    }
}

/// A connection with input waiting, handed to the core task.
pub(super) type Ready = (ConnId, Arc<ConnShared>);

/// A reader's end: its connection's queue and the core task's token
/// channel.
///
/// Frames ([`send_frame`](Self::send_frame)) are queued at once but their
/// ready token waits for [`flush`](Self::flush), which the reader calls
/// once it has queued everything one read gave it (and `send_frame` itself
/// before it waits for room): the core task is woken once per read, not
/// once per frame. Per frame, a reader on the background thread woke the
/// core on the interactive thread, which preempted it at once, took that
/// one frame and slept again: 100 `Ping` flooders made 49 000 such
/// context switches a second on each thread, most of the relay's CPU
/// (`/proc/PID/task/*/status` during `examples/relay_hostile.rs --isolate
/// --kinds flood`).
pub(super) struct InputTx {
    conn: ConnId,
    ready: mpsc::UnboundedSender<Ready>,
    pub(super) shared: Arc<ConnShared>,
    /// The queue went from empty to not empty and the core task has not
    /// been told yet.
    token_due: bool,
}

impl InputTx {
    pub(super) fn new(
        conn: ConnId,
        ready: mpsc::UnboundedSender<Ready>,
        shared: Arc<ConnShared>,
    ) -> Self {
        Self {
            conn,
            ready,
            shared,
            token_due: false,
        }
    }

    /// Queues `input` and tells the core task; `Err` once the relay stops.
    pub(super) fn send(&mut self, input: Input) -> Result<(), ()> {
        self.queue(input)?;
        self.flush()
    }

    /// Hands the core task the ready token that queued frames still wait
    /// for, if any; `Err` once the relay stops.
    pub(super) fn flush(&mut self) -> Result<(), ()> {
        if std::mem::take(&mut self.token_due) {
            self.ready
                .send((self.conn, self.shared.clone()))
                .map_err(|_| ())?;
        }
        Ok(())
    }

    fn queue(&mut self, input: Input) -> Result<(), ()> {
        if self.ready.is_closed() {
            return Err(());
        }
        let was_empty = {
            let mut q = self
                .shared
                .queue
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            q.push_back(input);
            q.len() == 1
        };
        self.token_due |= was_empty;
        Ok(())
    }

    /// Queues one frame, first waiting for room in the connection's
    /// in-flight budget: [`MAX_QUEUED_FRAMES`] frames and its bytes. The
    /// core task hears of it at the next [`flush`](Self::flush), or here
    /// before waiting (it must take what is queued to make room).
    pub(super) async fn send_frame(&mut self, frame: Bytes) -> Result<(), ()> {
        let slot = self.room(self.shared.inflight_frames.clone(), 1).await?;
        let cost = (frame.len() + FRAME_OVERHEAD).min(self.shared.inflight_budget);
        let cost = u32::try_from(cost).unwrap_or(u32::MAX);
        let bytes = self.room(self.shared.inflight_bytes.clone(), cost).await?;
        self.queue(Input::Frame(self.conn, frame, [slot, bytes]))
    }

    /// `n` permits of `budget`; if there is no room now, first hands the
    /// core task what is queued (it makes the room by taking it).
    async fn room(&mut self, budget: Arc<Semaphore>, n: u32) -> Result<OwnedSemaphorePermit, ()> {
        if let Ok(p) = budget.clone().try_acquire_many_owned(n) {
            return Ok(p);
        }
        self.flush()?;
        budget.acquire_many_owned(n).await.map_err(|_| ())
    }
}

/// The core task's end: ready connections, one ring per lane.
pub(super) struct InputRings {
    rings: [VecDeque<Ready>; LANES],
}

impl InputRings {
    pub(super) fn new() -> Self {
        Self {
            rings: std::array::from_fn(|_| VecDeque::new()),
        }
    }

    /// Whether no connection has input waiting.
    pub(super) fn is_empty(&self) -> bool {
        self.rings.iter().all(VecDeque::is_empty)
    }

    /// A connection has input waiting; it is served in `lane`.
    pub(super) fn push(&mut self, lane: usize, ready: Ready) {
        self.rings[lane.min(LANES - 1)].push_back(ready);
    }

    /// The next input: the front connection of the highest non-empty lane,
    /// which goes to the back of the ring of `lane_of(conn)` if it has more.
    pub(super) fn next(&mut self, lane_of: impl Fn(ConnId) -> usize) -> Option<Input> {
        for lane in (0..LANES).rev() {
            while let Some((conn, shared)) = self.rings[lane].pop_front() {
                let (input, more) = {
                    let mut q = shared.queue.lock().unwrap_or_else(PoisonError::into_inner);
                    let input = q.pop_front();
                    (input, !q.is_empty())
                };
                if more {
                    self.push(lane_of(conn), (conn, shared));
                }
                if input.is_some() {
                    return input;
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn_of(i: Option<Input>) -> u64 {
        match i {
            Some(Input::Violation(c, _)) => c.0,
            _ => 0,
        }
    }

    fn tx(conn: ConnId, ready: &mpsc::UnboundedSender<Ready>) -> InputTx {
        InputTx::new(conn, ready.clone(), Arc::new(ConnShared::new(1024)))
    }

    /// Moves every ready token into `rings` at the lane `lane_of` gives.
    fn collect(
        rx: &mut mpsc::UnboundedReceiver<Ready>,
        rings: &mut InputRings,
        lane_of: impl Fn(ConnId) -> usize,
    ) {
        while let Ok(r) = rx.try_recv() {
            rings.push(lane_of(r.0), r);
        }
    }

    #[test]
    fn the_highest_lane_goes_first() {
        let (ready, mut rx) = mpsc::unbounded_channel();
        let (mut low, mut high) = (tx(ConnId(1), &ready), tx(ConnId(2), &ready));
        for _ in 0..3 {
            low.send(Input::Violation(ConnId(1), "")).expect("open");
        }
        high.send(Input::Violation(ConnId(2), "")).expect("open");
        let lane = |c: ConnId| if c == ConnId(2) { 6 } else { 2 };
        let mut rings = InputRings::new();
        collect(&mut rx, &mut rings, lane);
        let order: Vec<_> = std::iter::from_fn(|| Some(conn_of(rings.next(lane))))
            .take(5)
            .collect();
        assert_eq!(order, [2, 1, 1, 1, 0]);
        assert!(rings.is_empty());
    }

    /// A flooder with many frames queued delays another connection of its
    /// lane by one frame per round, not by its whole queue.
    #[test]
    fn connections_of_a_lane_take_turns() {
        let (ready, mut rx) = mpsc::unbounded_channel();
        let mut flooders: Vec<_> = (1..=3).map(|c| tx(ConnId(c), &ready)).collect();
        for f in &mut flooders {
            for _ in 0..100 {
                let c = f.conn;
                f.send(Input::Violation(c, "flood")).expect("open");
            }
        }
        let mut member = tx(ConnId(9), &ready);
        member
            .send(Input::Violation(ConnId(9), "hello"))
            .expect("open");
        let mut rings = InputRings::new();
        collect(&mut rx, &mut rings, |_| 4);
        let first: Vec<_> = (0..4).map(|_| conn_of(rings.next(|_| 4))).collect();
        assert_eq!(first, [1, 2, 3, 9]);
        // The member's next frame, queued now, waits one round again.
        member
            .send(Input::Violation(ConnId(9), "again"))
            .expect("open");
        collect(&mut rx, &mut rings, |_| 4);
        let next: Vec<_> = (0..4).map(|_| conn_of(rings.next(|_| 4))).collect();
        assert_eq!(next, [1, 2, 3, 9]);
    }

    #[test]
    fn a_connection_keeps_its_order_and_changes_lane_at_its_next_turn() {
        let (ready, mut rx) = mpsc::unbounded_channel();
        let mut c = tx(ConnId(1), &ready);
        for m in ["a", "b", "c"] {
            c.send(Input::Violation(ConnId(1), m)).expect("open");
        }
        assert_eq!(rx.len(), 1, "one token while the queue is not empty");
        let mut rings = InputRings::new();
        collect(&mut rx, &mut rings, |_| 2);
        let msg = |i: Option<Input>| match i {
            Some(Input::Violation(_, m)) => m,
            _ => "",
        };
        assert_eq!(msg(rings.next(|_| 6)), "a");
        // Requeued in lane 6 now: it is served there, in order.
        assert!(rings.rings[2].is_empty() && rings.rings[6].len() == 1);
        assert_eq!(msg(rings.next(|_| 6)), "b");
        assert_eq!(msg(rings.next(|_| 6)), "c");
        assert!(rings.is_empty());
        // Empty again: the next input hands in a new token.
        c.send(Input::Violation(ConnId(1), "d")).expect("open");
        assert_eq!(rx.len(), 1);
    }

    /// The frames of one read cost the core task one wake-up: their token
    /// waits for `flush`, and a second flush hands in nothing.
    #[tokio::test]
    async fn frames_wait_for_flush_and_a_full_budget_flushes_before_waiting() {
        let (ready, mut rx) = mpsc::unbounded_channel();
        let mut c = tx(ConnId(1), &ready);
        for _ in 0..3 {
            c.send_frame(Bytes::from_static(b"ping"))
                .await
                .expect("room");
        }
        assert_eq!(rx.len(), 0, "no token before the flush");
        c.flush().expect("open");
        c.flush().expect("open");
        assert_eq!(rx.len(), 1, "one token for the three frames");
        let mut rings = InputRings::new();
        collect(&mut rx, &mut rings, |_| 0);
        while rings.next(|_| 0).is_some() {}
        // Out of frame slots: the reader must hand in its token before it
        // waits, or the core task never makes room.
        let reader = tokio::spawn(async move {
            for _ in 0..MAX_QUEUED_FRAMES + 1 {
                c.send_frame(Bytes::from_static(b"p")).await.expect("room");
            }
            c
        });
        let token = tokio::time::timeout(std::time::Duration::from_secs(10), rx.recv())
            .await
            .expect("handed in before waiting")
            .expect("open");
        rings.push(0, token);
        let mut taken = 0;
        while rings.next(|_| 0).is_some() {
            taken += 1;
        }
        assert_eq!(taken, MAX_QUEUED_FRAMES);
        let mut c = tokio::time::timeout(std::time::Duration::from_secs(10), reader)
            .await
            .expect("room was made")
            .expect("no panic");
        assert_eq!(rx.len(), 0, "the last frame waits for its flush");
        c.flush().expect("open");
        assert_eq!(rx.len(), 1);
    }

    #[test]
    fn a_stopped_relay_refuses_input() {
        let (ready, rx) = mpsc::unbounded_channel();
        let mut c = tx(ConnId(1), &ready);
        drop(rx);
        assert!(c.send(Input::Violation(ConnId(1), "late")).is_err());
    }
}
