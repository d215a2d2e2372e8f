//! The emulator's TCP relay ([`EmulatorConfig::tcp`](super::EmulatorConfig::tcp)): TCP connections
//! through the same two links as the datagrams.
//!
//! A userspace relay cannot drop a TCP segment the way a router does (it
//! terminates both connections), so it models what the application on
//! top of TCP sees:
//!
//! - **Segments share the link.** Bytes read from one side are cut into
//!   segments of at most [`MSS`] bytes, each offered to that direction's
//!   [`Link`](groupwire_link::Link) with [`TCP_OVERHEAD`] bytes of headers,
//!   so they take their turn in the same queue, at the same rate and delay,
//!   as the datagrams crossing the emulator.
//! - **A lost segment is sent again when its sender would know** (the
//!   round trip is both links' one-way delays at the time, at least 1 ms),
//!   as Linux's RACK-TLP loss detection (RFC 8985) does: if the relay read
//!   more of that side's bytes after it, the acknowledgements of those tell
//!   the sender, and the segment goes again 1.25 round trips after it was
//!   lost (one round trip plus RACK's reordering window of a quarter,
//!   §6.2); if nothing followed it (a thin stream, the last segment of a
//!   burst), only the tail loss probe finds it, two round trips after
//!   (§7.2's PTO of 2·SRTT). The segment is then offered to the link
//!   again, where it may be lost again.
//!   A segment the loss model corrupted counts as lost (the TCP checksum
//!   drops it) whatever the datagram policy is.
//! - **Order is kept:** the bytes behind a lost segment wait for it (head-
//!   of-line blocking), and each side's bytes come out in the order they
//!   went in.
//! - **A congestion window, as Reno's** (RFC 5681): each direction of a
//!   connection may have at most its window of bytes between the relay's
//!   read and its write; past that it stops reading, the sender's socket
//!   buffer fills and its TCP stops sending. The window starts at ten
//!   segments (RFC 6928), grows by the bytes delivered in slow start and
//!   by about a segment per window's worth delivered after, and halves
//!   (at least two segments) when the link loses a segment, once per
//!   round trip, so throughput falls with loss as a TCP sender's does.
//!   It never grows past
//!   [`EmulatorConfig::tcp_window`](super::EmulatorConfig::tcp_window)
//!   (the receive window; its default, twice the path's bandwidth-delay
//!   product, fills the link with a short standing queue). Only the
//!   bytes' delivery counts as their acknowledgement: no ACKs cross the
//!   reverse link. [`TcpCongestion::Fixed`] keeps the receive window and
//!   never cuts it, for endpoints whose TCP does not slow down for random
//!   loss (BBR): the relay terminates the sender's TCP, so the sender's
//!   own congestion control never sees the emulated loss, and the relay
//!   stands in for it.
//! - A close (FIN) crosses the link as an empty segment behind the data; a
//!   failed read or write, or a target that refuses the connection, closes
//!   both sides at once.
//!
//! Memory is bounded: at most [`EmulatorConfig::max_clients`](super::EmulatorConfig::max_clients) connections
//! at once (more are refused and counted), each holding at most twice its
//! window.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use groupwire_proto::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinHandle;
use tracing::debug;

use super::Dir;

/// Payload bytes per segment: an Ethernet MTU's 1500 bytes less
/// [`TCP_OVERHEAD`].
pub const MSS: usize = 1448;
/// Bytes of headers under each segment on the modelled wire: IPv4 (20),
/// TCP (20) and the timestamps option every Linux segment carries (12,
/// RFC 7323 §3).
pub const TCP_OVERHEAD: usize = 52;
/// Smallest and largest automatic window.
const WINDOW_RANGE: (usize, usize) = (64 << 10, 16 << 20);

/// Counters of the TCP relay.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct TcpStats {
    /// Connections accepted and relayed.
    pub accepted: u64,
    /// Connections refused: [`EmulatorConfig::max_clients`] were open.
    ///
    /// [`EmulatorConfig::max_clients`]: super::EmulatorConfig::max_clients
    pub refused: u64,
    /// Connections the target refused, or that failed on a read or write.
    pub failed: u64,
    /// Connections open now.
    pub open: u64,
    /// Segments sent again after the forward link lost them.
    pub forward_resent: u64,
    /// Segments sent again after the reverse link lost them.
    pub reverse_resent: u64,
    /// Times a forward congestion window was halved.
    pub forward_window_cuts: u64,
    /// Times a reverse congestion window was halved.
    pub reverse_window_cuts: u64,
}

/// How a relayed connection's window reacts to loss
/// ([`EmulatorConfig::tcp_congestion`](super::EmulatorConfig::tcp_congestion)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum TcpCongestion {
    /// Reno's window (RFC 5681; the module docs): throughput falls with
    /// loss as a loss-based sender's does (Reno, CUBIC).
    #[default]
    Reno,
    /// The receive window alone, never cut: a sender that does not slow
    /// down for random loss (BBR roughly; the relay's rate is the link's).
    Fixed,
}

/// One direction's congestion window: the bytes its reader may have in
/// flight, as permits, and Reno's state (see the module docs).
#[derive(Debug)]
pub(super) struct Window {
    room: Semaphore,
    reno: Mutex<Reno>,
}

#[derive(Debug)]
struct Reno {
    cwnd: usize,
    ssthresh: usize,
    /// The receive window: the most `cwnd` may be.
    cap: usize,
    /// Permits to withhold from bytes given back (a cut larger than the
    /// free permits).
    debt: usize,
    /// No second cut before this (one per round trip).
    calm_until: Instant,
    /// Not cut nor grown: the receive window from the start.
    fixed: bool,
}

/// RFC 6928's initial window, in segments.
const INITIAL_SEGMENTS: usize = 10;

impl Window {
    /// A window of at most `cap` bytes, starting at ten segments (Reno)
    /// or at `cap` (fixed).
    pub(super) fn new(cap: usize, cc: TcpCongestion) -> Self {
        let fixed = cc == TcpCongestion::Fixed;
        let cwnd = if fixed {
            cap
        } else {
            (INITIAL_SEGMENTS * MSS).min(cap)
        };
        Self {
            room: Semaphore::new(cwnd),
            reno: Mutex::new(Reno {
                cwnd,
                ssthresh: cap,
                cap,
                debt: 0,
                calm_until: Instant::ZERO,
                fixed,
            }),
        }
    }

    fn reno(&self) -> std::sync::MutexGuard<'_, Reno> {
        self.reno.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The window now, bytes.
    #[cfg(test)]
    pub(super) fn cwnd(&self) -> usize {
        self.reno().cwnd
    }

    /// `n` bytes were delivered: their permits come back (less any debt)
    /// and the window grows.
    pub(super) fn delivered(&self, n: usize) {
        let mut r = self.reno();
        let back = n.saturating_sub(r.debt);
        r.debt -= n - back;
        let grow = if r.cwnd < r.ssthresh {
            n
        } else {
            (MSS * n).div_ceil(r.cwnd.max(1))
        };
        let grow = grow.min(r.cap.saturating_sub(r.cwnd));
        r.cwnd += grow;
        drop(r);
        self.room.add_permits(back + grow);
    }

    /// The link lost a segment at `now` on a path of round trip `rtt`:
    /// halves the window unless it was cut less than a round trip ago.
    /// True if it cut.
    pub(super) fn lost(&self, now: Instant, rtt: Duration) -> bool {
        let mut r = self.reno();
        if r.fixed || now < r.calm_until {
            return false;
        }
        let to = (r.cwnd / 2).max(2 * MSS).min(r.cwnd);
        let cut = r.cwnd - to;
        r.cwnd = to;
        r.ssthresh = to;
        r.calm_until = now + rtt.max(MIN_RTT);
        let taken = self.room.forget_permits(cut);
        r.debt += cut - taken;
        true
    }
}

/// When a segment lost at `lost` goes again on a path of round trip `rtt`:
/// `followed` (more of its side's bytes were sent after it) at RACK's
/// 1.25 round trips, else at the tail loss probe's two (RFC 8985 §6.2 and
/// §7.2; the module docs).
pub(super) fn resend_at(lost: Instant, rtt: Duration, followed: bool) -> Instant {
    let rtt = rtt.max(MIN_RTT);
    lost + if followed { rtt + rtt / 4 } else { 2 * rtt }
}

/// The round trip the resend times assume at least.
const MIN_RTT: Duration = Duration::from_millis(1);

/// The default window: twice the bandwidth-delay product of a path with
/// `rate` bits per second (none: unlimited) and round trip `rtt`, within
/// 64 KiB to 16 MiB.
pub(super) fn auto_window(rate: Option<u64>, rtt: Duration) -> usize {
    let Some(bps) = rate else {
        return WINDOW_RANGE.1;
    };
    let bdp = (bps as f64 / 8.0 * rtt.as_secs_f64() * 2.0) as usize;
    bdp.clamp(WINDOW_RANGE.0, WINDOW_RANGE.1)
}

/// What a connection's tasks tell the emulator's loop.
pub(super) enum TcpIn {
    /// Both connections are up; the readers start.
    Opened {
        id: u64,
        writers: [mpsc::UnboundedSender<Segment>; 2],
        tasks: [JoinHandle<()>; 2],
    },
    /// Bytes read (empty with `fin`: the reader saw the end).
    Read { id: u64, dir: Dir, segment: Segment },
    /// A writer passed on its side's close.
    Closed { id: u64, dir: Dir },
    /// Connecting, a read or a write failed: close both sides.
    Failed { id: u64 },
}

/// One segment of one direction of a connection.
#[derive(Debug)]
pub(super) struct Segment {
    /// Its place in its direction, from 0.
    pub seq: u64,
    pub data: Vec<u8>,
    /// The reader saw the end of its side's bytes.
    pub fin: bool,
}

/// A connection the loop knows.
pub(super) struct Conn {
    /// Connects, then reads both sides.
    reader: JoinHandle<()>,
    /// Per direction, to the task writing it, once open.
    writers: Option<[mpsc::UnboundedSender<Segment>; 2]>,
    writer_tasks: Vec<JoinHandle<()>>,
    closed: [bool; 2],
    /// Per direction, the highest segment offered to the link.
    highest: [Option<u64>; 2],
    /// Per direction, its congestion window.
    windows: [Arc<Window>; 2],
}

impl Conn {
    /// Starts relaying `client` to `target` with `window` bytes a
    /// direction; its tasks report to `out` under `id`.
    pub(super) fn start(
        id: u64,
        client: TcpStream,
        target: SocketAddr,
        window: usize,
        cc: TcpCongestion,
        out: mpsc::Sender<TcpIn>,
    ) -> Self {
        let windows = [
            Arc::new(Window::new(window, cc)),
            Arc::new(Window::new(window, cc)),
        ];
        Self {
            reader: tokio::spawn(relay(id, client, target, windows.clone(), out)),
            writers: None,
            writer_tasks: Vec::new(),
            closed: [false; 2],
            highest: [None; 2],
            windows,
        }
    }

    /// The link lost a segment of `dir` (see [`Window::lost`]).
    pub(super) fn lost(&self, dir: Dir, now: Instant, rtt: Duration) -> bool {
        self.windows[dir as usize].lost(now, rtt)
    }

    pub(super) fn opened(
        &mut self,
        writers: [mpsc::UnboundedSender<Segment>; 2],
        tasks: [JoinHandle<()>; 2],
    ) {
        self.writers = Some(writers);
        self.writer_tasks = tasks.into();
    }

    /// Segment `seq` of `dir` went into the link.
    pub(super) fn offered(&mut self, dir: Dir, seq: u64) {
        let h = &mut self.highest[dir as usize];
        *h = Some(h.map_or(seq, |h| h.max(seq)));
    }

    /// Whether a segment of `dir` after `seq` went into the link.
    pub(super) fn read_past(&self, dir: Dir, seq: u64) -> bool {
        self.highest[dir as usize].is_some_and(|h| h > seq)
    }

    /// Hands a segment whose time has come to its writer.
    pub(super) fn deliver(&self, dir: Dir, segment: Segment) {
        if let Some(w) = &self.writers {
            // A writer gone has failed and said so: the connection closes.
            let _ = w[dir as usize].send(segment);
        }
    }

    /// `dir`'s close was passed on; true once both were.
    pub(super) fn close_half(&mut self, dir: Dir) -> bool {
        self.closed[dir as usize] = true;
        self.closed == [true; 2]
    }

    /// Stops its tasks; the sockets close as they drop.
    pub(super) fn abort(self) {
        self.reader.abort();
        for t in self.writer_tasks {
            t.abort();
        }
    }
}

/// Connects to `target`, starts the writers, then reads both sides until
/// both ended.
async fn relay(
    id: u64,
    client: TcpStream,
    target: SocketAddr,
    windows: [Arc<Window>; 2],
    out: mpsc::Sender<TcpIn>,
) {
    let upstream = match TcpStream::connect(target).await {
        Ok(s) => s,
        Err(e) => {
            debug!(%target, error = %e, "TCP relay: the target refused; closing the client");
            let _ = out.send(TcpIn::Failed { id }).await;
            return;
        }
    };
    // Segments leave the link as they are due; Nagle would hold them again.
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let (client_rd, client_wr) = client.into_split();
    let (up_rd, up_wr) = upstream.into_split();
    let (to_up, up_rx) = mpsc::unbounded_channel();
    let (to_client, client_rx) = mpsc::unbounded_channel();
    let tasks = [
        tokio::spawn(write_half(
            id,
            Dir::Forward,
            up_wr,
            up_rx,
            Arc::clone(&windows[0]),
            out.clone(),
        )),
        tokio::spawn(write_half(
            id,
            Dir::Reverse,
            client_wr,
            client_rx,
            Arc::clone(&windows[1]),
            out.clone(),
        )),
    ];
    let opened = TcpIn::Opened {
        id,
        writers: [to_up, to_client],
        tasks,
    };
    if out.send(opened).await.is_err() {
        return;
    }
    let [fw, rw] = windows;
    tokio::join!(
        read_half(id, Dir::Forward, client_rd, fw, out.clone()),
        read_half(id, Dir::Reverse, up_rd, rw, out),
    );
}

/// Reads one side into segments while its window has room.
async fn read_half(
    id: u64,
    dir: Dir,
    mut rd: OwnedReadHalf,
    window: Arc<Window>,
    out: mpsc::Sender<TcpIn>,
) {
    let mut buf = vec![0u8; MSS];
    for seq in 0.. {
        let Ok(room) = window.room.acquire_many(MSS as u32).await else {
            return;
        };
        let n = match rd.read(&mut buf).await {
            Ok(n) => n,
            Err(e) => {
                debug!(error = %e, "TCP relay: a read failed; closing both sides");
                let _ = out.send(TcpIn::Failed { id }).await;
                return;
            }
        };
        // The segment's bytes stay taken until its writer has written them.
        room.forget();
        window.room.add_permits(MSS - n);
        let segment = Segment {
            seq,
            data: buf[..n].to_vec(),
            fin: n == 0,
        };
        if out.send(TcpIn::Read { id, dir, segment }).await.is_err() || n == 0 {
            return;
        }
    }
}

/// Writes one side's segments in order, giving their bytes back to the
/// window; passes on the close.
async fn write_half(
    id: u64,
    dir: Dir,
    mut wr: OwnedWriteHalf,
    mut rx: mpsc::UnboundedReceiver<Segment>,
    window: Arc<Window>,
    out: mpsc::Sender<TcpIn>,
) {
    let mut next = 0u64;
    let mut early: BTreeMap<u64, Segment> = BTreeMap::new();
    while let Some(s) = rx.recv().await {
        early.insert(s.seq, s);
        while let Some(s) = early.remove(&next) {
            next += 1;
            if s.fin {
                let _ = wr.shutdown().await;
                let _ = out.send(TcpIn::Closed { id, dir }).await;
                return;
            }
            if let Err(e) = wr.write_all(&s.data).await {
                debug!(error = %e, "TCP relay: a write failed; closing both sides");
                let _ = out.send(TcpIn::Failed { id }).await;
                return;
            }
            window.delivered(s.data.len());
        }
    }
}
