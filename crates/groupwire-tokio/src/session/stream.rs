//! The reliable channels' TCP connections: one reader and one writer task
//! per connection, length-prefixed frames (4 bytes, big endian).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use groupwire_proto::FRAME_PREFIX;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufWriter};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::debug;

use super::{Shared, StreamCounters};
use crate::driver::Counters;

/// A connection's number in the driver.
pub(super) type ConnId = u64;

/// What the connection tasks tell the driver.
#[derive(Debug)]
pub(super) enum StreamIn {
    /// A whole frame (without its length prefix).
    Frame { conn: ConnId, data: Vec<u8> },
    /// The connection is gone (closed, broken, never opened, or a frame
    /// over the limit).
    Closed { conn: ConnId },
}

/// Unsent bytes at which the kernel calls a session stream writable
/// (`TCP_NOTSENT_LOWAT`): what waits there waits in send order, so the
/// session keeps the rest itself and orders it by channel
/// ([`SessionConfig::stream_window`](groupwire_proto::session::SessionConfig::stream_window)).
pub(super) const NOTSENT_LOWAT: u32 = 16 * 1024;

/// The driver's end of one connection.
#[derive(Debug)]
pub(super) struct Conn {
    /// Frames to write.
    tx: mpsc::UnboundedSender<Bytes>,
    reader: Option<JoinHandle<()>>,
    writer: JoinHandle<()>,
    /// Stream bytes of the frames it took (length prefixes included) that
    /// are written to the socket or dropped, counted by its writer.
    sent: Arc<AtomicU64>,
    /// How much of `sent` the driver has told the machine.
    reported: u64,
}

impl Conn {
    /// Queues `frame`: counted in the shared queue until written.
    pub(super) fn send(&self, counters: &StreamCounters, frame: Bytes) {
        let len = frame.len();
        counters.queued.fetch_add(len, Ordering::Relaxed);
        if self.tx.send(frame).is_err() {
            counters.queued.fetch_sub(len, Ordering::Relaxed);
            Counters::add(&counters.frames_dropped, 1);
            self.sent
                .fetch_add((len + FRAME_PREFIX) as u64, Ordering::Relaxed);
        }
    }

    /// Stream bytes written or dropped since the last call
    /// ([`StreamMachine::handle_stream_sent`](groupwire_proto::StreamMachine::handle_stream_sent)).
    pub(super) fn take_sent(&mut self) -> u64 {
        let sent = self.sent.load(Ordering::Relaxed);
        let new = sent.saturating_sub(self.reported);
        self.reported = sent;
        new
    }

    /// Opens a connection to `addr` and writes `bind` first; frames
    /// queued meanwhile follow it.
    pub(super) fn dial(
        shared: &Arc<Shared>,
        conn: ConnId,
        addr: SocketAddr,
        bind: Bytes,
        timeout: Duration,
        events: mpsc::Sender<StreamIn>,
    ) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let sh = Arc::clone(shared);
        let sent = Arc::new(AtomicU64::new(0));
        let q = Queue {
            rx,
            sh: Arc::clone(shared),
            sent: Arc::clone(&sent),
        };
        Self {
            tx,
            sent,
            reported: 0,
            reader: None,
            writer: tokio::spawn(async move {
                let stream = match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
                    Ok(Ok(s)) => s,
                    Ok(Err(e)) => {
                        debug!(%addr, error = %e, "session stream: connect failed");
                        return fail(q, conn, events).await;
                    }
                    Err(_) => {
                        debug!(%addr, "session stream: connect timed out");
                        return fail(q, conn, events).await;
                    }
                };
                Counters::add(&sh.streams.opened, 1);
                tune(&stream);
                let (r, w) = stream.into_split();
                let reader = tokio::spawn(read_loop(r, conn, sh.max_frame, events.clone()));
                let mut w = BufWriter::new(w);
                if write_frame(&mut w, &bind).await.is_err() || w.flush().await.is_err() {
                    reader.abort();
                    return fail(q, conn, events).await;
                }
                write_loop(w, q, conn, events).await;
                reader.abort();
            }),
        }
    }

    /// Takes an accepted connection: frames are read at once, written
    /// once the driver has bound it and queues some.
    pub(super) fn accepted(
        shared: &Arc<Shared>,
        conn: ConnId,
        stream: TcpStream,
        events: mpsc::Sender<StreamIn>,
    ) -> Self {
        tune(&stream);
        let (r, w) = stream.into_split();
        let (tx, rx) = mpsc::unbounded_channel();
        let sent = Arc::new(AtomicU64::new(0));
        let q = Queue {
            rx,
            sh: Arc::clone(shared),
            sent: Arc::clone(&sent),
        };
        let reader = tokio::spawn(read_loop(r, conn, shared.max_frame, events.clone()));
        Self {
            tx,
            sent,
            reported: 0,
            reader: Some(reader),
            writer: tokio::spawn(write_loop(BufWriter::new(w), q, conn, events)),
        }
    }

    /// Lets the writer finish what is queued, then closes.
    pub(super) async fn finish(self) {
        let Self {
            tx, reader, writer, ..
        } = self;
        drop(tx);
        let _ = writer.await;
        if let Some(r) = reader {
            r.abort();
        }
    }

    /// Closes it now; frames still queued are dropped and counted.
    pub(super) fn close(self) {
        if let Some(r) = self.reader {
            r.abort();
        }
        self.writer.abort();
    }
}

/// A connection's queue of frames to write. Dropped (the writer ended,
/// failed or was aborted), it gives back what it still held to the shared
/// count and counts it dropped.
struct Queue {
    rx: mpsc::UnboundedReceiver<Bytes>,
    sh: Arc<Shared>,
    /// [`Conn::sent`].
    sent: Arc<AtomicU64>,
}

impl Queue {
    /// The next frame, no longer counted as queued.
    async fn next(&mut self) -> Option<Bytes> {
        let f = self.rx.recv().await?;
        self.sh.streams.queued.fetch_sub(f.len(), Ordering::Relaxed);
        Some(f)
    }

    /// A frame of `len` bytes left (written, or dropped): the driver tells
    /// the machine, which may hand over more.
    fn done(&self, len: usize) {
        self.sent
            .fetch_add((len + FRAME_PREFIX) as u64, Ordering::Relaxed);
        self.sh.wake.notify_one();
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        self.rx.close();
        let mut any = false;
        while let Ok(f) = self.rx.try_recv() {
            self.sh.streams.queued.fetch_sub(f.len(), Ordering::Relaxed);
            Counters::add(&self.sh.streams.frames_dropped, 1);
            self.sent
                .fetch_add((f.len() + FRAME_PREFIX) as u64, Ordering::Relaxed);
            any = true;
        }
        if any {
            self.sh.wake.notify_one();
        }
    }
}

/// Nagle off (frames are latency-bound) and, on Linux, the kernel's
/// unsent bytes bounded ([`NOTSENT_LOWAT`]).
fn tune(stream: &TcpStream) {
    let _ = stream.set_nodelay(true);
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        let _ = socket2::SockRef::from(stream).set_tcp_notsent_lowat(NOTSENT_LOWAT);
    }
}

/// Writes queued frames until the queue closes or a write fails; then
/// tells the driver.
async fn write_loop(
    mut w: BufWriter<OwnedWriteHalf>,
    mut q: Queue,
    conn: ConnId,
    events: mpsc::Sender<StreamIn>,
) {
    while let Some(frame) = q.next().await {
        if write_frame(&mut w, &frame).await.is_err() {
            Counters::add(&q.sh.streams.frames_dropped, 1);
            q.done(frame.len());
            return fail(q, conn, events).await;
        }
        Counters::add(&q.sh.streams.frames_sent, 1);
        q.done(frame.len());
        // Gather what is queued into one write; flush when caught up.
        if q.rx.is_empty() && w.flush().await.is_err() {
            return fail(q, conn, events).await;
        }
    }
}

/// The connection failed: what is queued is dropped, the driver told.
async fn fail(q: Queue, conn: ConnId, events: mpsc::Sender<StreamIn>) {
    Counters::add(&q.sh.streams.failed, 1);
    drop(q);
    let _ = events.send(StreamIn::Closed { conn }).await;
}

async fn write_frame(w: &mut BufWriter<OwnedWriteHalf>, frame: &[u8]) -> std::io::Result<()> {
    let len = u32::try_from(frame.len()).map_err(std::io::Error::other)?;
    w.write_all(&len.to_be_bytes()).await?;
    w.write_all(frame).await
}

/// Reads frames and hands them to the driver; a length over `max_frame`,
/// the end of the stream or an error ends the connection.
async fn read_loop(
    mut r: OwnedReadHalf,
    conn: ConnId,
    max_frame: usize,
    events: mpsc::Sender<StreamIn>,
) {
    while let Ok(len) = r.read_u32().await {
        let len = len as usize;
        if len > max_frame {
            debug!(conn, len, max_frame, "session stream: frame over the limit");
            break;
        }
        let mut data = vec![0u8; len];
        if r.read_exact(&mut data).await.is_err() {
            break;
        }
        if events.send(StreamIn::Frame { conn, data }).await.is_err() {
            return;
        }
    }
    let _ = events.send(StreamIn::Closed { conn }).await;
}
