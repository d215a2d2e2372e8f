//! The core task's end of a connection's output.
//!
//! Frames the core hands out during a turn gather per connection and go
//! out together when the core task has caught up with its input (or has
//! gathered [`FLUSH_FRAMES`]): one write per connection per round instead
//! of one per frame, the way nats-server flushes its clients at the end of
//! a read. On a loopback or LAN socket most of a delivery's cost is the
//! kernel's work per write (and the reader's wakeup), so frames per write
//! is what fan-out throughput per CPU-second follows.
//!
//! A plain TCP socket is written by the core task itself, with `writev`
//! of the frames as they are (encoded once, shared by every member): no
//! copy, no hop to a writer task, no wakeup and no `Written` event per
//! frame. Only what the socket does not take at once (its buffer is full:
//! the client reads slower than it is sent to) goes to the connection's
//! writer task, which waits for room; until the task reports all of it
//! written, later frames queue behind it there, so the bytes keep their
//! order. TLS and WebSocket connections always write through their task.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use tokio::io::AsyncWrite;
use tokio::net::TcpStream;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::mpsc;

use super::place::{BACKGROUND, INTERACTIVE};
use super::{ConnShared, Outgoing};

/// Frames gathered across connections before the core task writes them
/// out even though more input waits. Under a load the core keeps up with,
/// it writes whenever its input is drained, long before this; under
/// saturation this bounds the delay a frame gains by waiting for company
/// (a few milliseconds of the core's work) while each connection's write
/// carries many frames. A bound in time instead (write whatever waited
/// 1 ms) was tried: under `groupwire relay bench fanout --groups 1
/// --members 1000 --rate 1000` (relay and bench on a core each) each
/// write then carried about one frame and the relay fell from 1 M to
/// 0.2-0.4 M deliveries/s, with seconds of delay.
pub(super) const FLUSH_FRAMES: usize = 16 << 10;

/// Frames in one `writev` (the kernel takes at most `IOV_MAX`, 1024).
const MAX_IOV: usize = 64;

/// A plain TCP connection's write half, shared by the core task (direct
/// writes) and the connection's writer task (what the socket could not
/// take at once).
pub(super) type DirectSocket = Arc<OwnedWriteHalf>;

/// [`AsyncWrite`] over a shared [`DirectSocket`], for the writer task.
pub(super) struct SharedWrite(pub(super) DirectSocket);

impl SharedWrite {
    fn stream(&self) -> &TcpStream {
        (*self.0).as_ref()
    }
}

impl AsyncWrite for SharedWrite {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let s = self.stream();
        loop {
            ready!(s.poll_write_ready(cx))?;
            match s.try_write(buf) {
                // Readiness was stale: `try_write` cleared it, so the next
                // poll waits for the socket.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                r => return Poll::Ready(r),
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(socket2::SockRef::from(self.stream()).shutdown(std::net::Shutdown::Write))
    }
}

/// The core task's end of a connection.
pub(super) struct Writer {
    /// To the connection's writer task.
    tx: mpsc::UnboundedSender<Outgoing>,
    pub(super) shared: Arc<ConnShared>,
    /// Plain TCP: the socket, written directly while the task holds nothing.
    direct: Option<DirectSocket>,
    /// Bytes handed to the writer task and not yet reported written.
    at_task: u64,
    /// Frames handed out by the core and not yet written or handed on.
    pending: Vec<Bytes>,
    pending_bytes: usize,
}

impl Writer {
    pub(super) fn new(
        tx: mpsc::UnboundedSender<Outgoing>,
        shared: Arc<ConnShared>,
        direct: Option<DirectSocket>,
    ) -> Self {
        Self {
            tx,
            shared,
            direct,
            at_task: 0,
            pending: Vec::new(),
            pending_bytes: 0,
        }
    }

    /// Gathers `frame`; `true` if it is the first since the last flush.
    pub(super) fn push(&mut self, frame: Bytes) -> bool {
        self.pending_bytes += frame.len();
        self.pending.push(frame);
        self.pending.len() == 1
    }

    /// Bytes gathered and not yet flushed.
    pub(super) fn pending_bytes(&self) -> usize {
        self.pending_bytes
    }

    /// Sets where the connection's tasks run from its standing: the
    /// interactive class if it keeps up and is read, else the background
    /// (see `place`).
    pub(super) fn place(&self, keeps_up: bool) {
        let reading = !self.shared.paused.load(Ordering::Relaxed);
        self.shared.class.set(if keeps_up && reading {
            INTERACTIVE
        } else {
            BACKGROUND
        });
    }

    /// The writer task reports `n` bytes written.
    pub(super) fn task_wrote(&mut self, n: usize) {
        self.at_task = self.at_task.saturating_sub(n as u64);
    }

    /// Writes what is gathered: directly while the writer task holds
    /// nothing, the rest (or all, without a direct socket) through the
    /// task. Returns the bytes written directly, for the scheduler.
    pub(super) fn flush(&mut self) -> usize {
        if self.pending.is_empty() {
            return 0;
        }
        self.pending_bytes = 0;
        let (done, partial, written) = match &self.direct {
            // A connection in the background is written by its task, at
            // that thread's priority: a slow reader's writes (and the
            // wake-ups of its process) no longer take the core's time.
            Some(sock) if self.at_task == 0 && self.shared.class.get() == INTERACTIVE => {
                write_direct(sock, &self.pending)
            }
            _ => (0, 0, 0),
        };
        for (i, f) in self.pending.drain(..).enumerate().skip(done) {
            let f = if i == done && partial > 0 {
                f.slice(partial..)
            } else {
                f
            };
            self.at_task += f.len() as u64;
            let _ = self.tx.send(Outgoing {
                frame: f,
                close: false,
            });
        }
        written
    }

    /// Hands the writer task a frame after which it closes the
    /// connection (a fatal error), behind everything gathered. Returns
    /// the bytes written directly.
    pub(super) fn close_with(mut self, frame: Bytes) -> usize {
        let written = self.flush();
        let _ = self.tx.send(Outgoing { frame, close: true });
        written
    }
}

/// Writes `frames` to `sock` with `writev` until the socket takes less
/// than offered. Returns the frames written whole, the bytes written of
/// the next one, and the bytes written in all.
fn write_direct(sock: &OwnedWriteHalf, frames: &[Bytes]) -> (usize, usize, usize) {
    let (mut done, mut written) = (0, 0);
    while done < frames.len() {
        let chunk = &frames[done..frames.len().min(done + MAX_IOV)];
        let mut iov = [IoSlice::new(&[]); MAX_IOV];
        for (s, f) in iov.iter_mut().zip(chunk) {
            *s = IoSlice::new(f);
        }
        // Straight to the socket (`sendmsg`), not through tokio's
        // `try_write_vectored`: that first reads the socket's readiness in
        // the runtime's I/O driver, a cold cache line per connection that
        // cost 6% of the relay's CPU at 1 x 1000 broadcast (perf). Nothing
        // here waits on readiness: the writer task does, through tokio.
        // WouldBlock: the task waits for room. Any other error: the task
        // meets it too and ends the connection.
        let Ok(n) = socket2::SockRef::from(sock.as_ref()).send_vectored(&iov[..chunk.len()]) else {
            break;
        };
        written += n;
        let mut left = n;
        for f in chunk {
            if left < f.len() {
                return (done, left, written);
            }
            left -= f.len();
            done += 1;
        }
    }
    (done, 0, written)
}
