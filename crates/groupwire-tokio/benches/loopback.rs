//! Real UDP on 127.0.0.1: AFEC through the groupwire-tokio driver against
//! plain UDP, in one run (issue 3's goal: AFEC at code set size 1 reaches at
//! least 80% of plain UDP's message rate).
//!
//! Every case streams 40-byte messages from a sender to a receiver in this
//! process, both on one 2-worker tokio runtime and one clock, so the
//! one-way latency is the receiving application's time minus the time
//! stamped in the message by the sending application:
//!
//! - `plain-udp`: the baseline, a raw tokio `UdpSocket` pair; each datagram
//!   is an 8-byte sequence number and the message;
//! - `afec-1`, `afec-3`: an `AfecEndpoint` at code set size 1 (`Scheme::Udp`
//!   framing) or 3 (`Scheme::Fec(3)`) on each side, each run by a `Driver`;
//!   the sending application issues one driver command per message and the
//!   receiving one reads `AfecEvent::Delivered` from the event channel;
//!   over tokio's `UdpSocket` (one system call per datagram) or over
//!   `BatchedUdpSocket` (`quinn-udp`: `recvmmsg`, GSO/GRO);
//! - `session-afec-1ch`, `session-afec-8ch`: the same messages through two
//!   `session::Session`s (batched sockets), spread round robin over 1 or 8
//!   channels pinned to AFEC, read from `next_event`: what the session's
//!   multiplexing (header, monitor, channel lookup, the shared machine)
//!   costs against `afec-1-batched` (issue 16: at most 10%);
//! - `block-batched`, `session-block-1ch`, `session-block-8ch`: block FEC
//!   on 1000-byte messages with the block target controller (0.1% within
//!   50 ms), two `TunnelEndpoint`s through the `Driver` on batched
//!   sockets, then through a session pair on 1 or 8 channels pinned to
//!   the same Block: the session's cost in goodput (issue 16 again). The
//!   ratio column is against `plain-udp` (always run, first), so divide
//!   the session rows' goodput by `block-batched`'s (scripts/perf.sh
//!   session does).
//!
//! Two phases per case, each bounded in messages and in time:
//!
//! - **rate:** `--messages` (200 000) as fast as the receiver keeps up, at
//!   most `--window` (64) messages in flight (sent, and beyond the highest
//!   sequence number the receiver has seen), so the socket buffers never
//!   overflow; repeated `--repeats` (3) times, the cases interleaved; the
//!   median rate is reported, the latency is that of all repeats together
//!   (under full load it is mostly the window's queue);
//! - **latency:** `--latency-messages` (20 000), one in flight at a time:
//!   the latency the stack adds without queueing.
//!
//! A run ends when every message arrived, after 300 ms without a delivery,
//! or after 30 s. Writes a JSON summary to `--json PATH` (read by
//! scripts/perf.sh) and a table to stdout.
//!
//! ```text
//! cargo bench -p groupwire-tokio --bench loopback -- --json loopback.json
//! ```

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use groupwire_proto::Instant;
use groupwire_proto::Machine;
use groupwire_proto::afec::{AfecConfig, AfecEndpoint, AfecEvent, Scheme};
use groupwire_proto::control::FecConfig;
use groupwire_proto::control::target::TargetConfig;
use groupwire_proto::tunnel::{TunnelConfig, TunnelDelivery, TunnelEndpoint};
use groupwire_proto::wire::afec::MsgType;
use groupwire_tokio::session::{Event, Mechanism, Qos, Session, SessionOptions};
use groupwire_tokio::{BatchedUdpSocket, Clock, DatagramSocket, Driver, DriverStats};
use hdrhistogram::Histogram;
use serde_json::json;
use tokio::net::UdpSocket;
use tokio::sync::Notify;

const TP: MsgType = MsgType::new(*b"TP");
const MESSAGE_LEN: usize = 40;
/// A run ends after this long without a delivery.
const IDLE: Duration = Duration::from_millis(300);
/// And after this long in any case.
const RUN_CAP: Duration = Duration::from_secs(30);
/// Socket receive buffers (Linux caps this at twice `net.core.rmem_max`).
const RCVBUF: usize = 4 << 20;

#[derive(Clone, Copy, Debug)]
enum Case {
    PlainUdp,
    Afec {
        scheme: Scheme,
        batched: bool,
    },
    /// Two `session::Session`s (batched sockets), the messages spread
    /// round robin over `channels` channels pinned to AFEC.
    Session {
        channels: usize,
    },
    /// Block FEC with [`BLOCK_LEN`]-byte messages and the block target
    /// controller (0.1% within 50 ms): two `TunnelEndpoint`s through the
    /// `Driver` on batched sockets (`None`), or a session pair over
    /// `Some(channels)` channels pinned to the same Block.
    Block {
        session: Option<usize>,
    },
}

/// The message size of the Block cases: goodput is what block FEC is
/// judged by (issue 16: "goodput for block FEC").
const BLOCK_LEN: usize = 1000;
/// The Block cases' target and budget, as a session's QoS would ask.
const BLOCK_TARGET: f64 = 0.001;
const BLOCK_BUDGET: Duration = Duration::from_millis(50);

impl Case {
    fn name(self) -> String {
        match self {
            Self::PlainUdp => "plain-udp".into(),
            Self::Afec { scheme, batched } => {
                let n = match scheme {
                    Scheme::Fec(n) => n,
                    _ => 1.0,
                };
                format!("afec-{n}-{}", if batched { "batched" } else { "tokio" })
            }
            Self::Session { channels } => format!("session-afec-{channels}ch"),
            Self::Block { session: None } => "block-batched".into(),
            Self::Block {
                session: Some(channels),
            } => format!("session-block-{channels}ch"),
        }
    }

    /// Application bytes per message.
    fn message_len(self) -> usize {
        match self {
            Self::Block { .. } => BLOCK_LEN,
            _ => MESSAGE_LEN,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Params {
    messages: u64,
    window: u64,
    latency_messages: u64,
    repeats: usize,
}

/// What one run measured.
struct Run {
    sent: u64,
    delivered: u64,
    /// From the first send to the last delivery.
    elapsed: Duration,
    /// One-way latency per delivered message, nanoseconds.
    latency: Histogram<u64>,
    /// Sender driver's and receiver driver's counters (AFEC cases).
    tx: Option<DriverStats>,
    rx: Option<DriverStats>,
}

impl Run {
    /// The run that sent `sent` messages from `start` and whose receiver
    /// tallied `t`; `tx` and `rx` the two ends' socket counters.
    fn new(
        sent: u64,
        t: Tally,
        start: Instant,
        tx: Option<DriverStats>,
        rx: Option<DriverStats>,
    ) -> Self {
        Self {
            sent,
            delivered: t.delivered,
            elapsed: Duration::from_nanos(t.last.saturating_sub(start.as_nanos())),
            latency: t.latency,
            tx,
            rx,
        }
    }

    fn rate(&self) -> f64 {
        self.delivered as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// The receiver's progress, for the sender's window.
#[derive(Default)]
struct Progress {
    /// One more than the highest sequence number delivered.
    highest: AtomicU64,
    notify: Notify,
}

impl Progress {
    fn delivered(&self, seq: u64) {
        self.highest.fetch_max(seq + 1, Ordering::Relaxed);
        self.notify.notify_one();
    }

    /// [`admit`](Self::admit)s message `seq`; whether the run may go on
    /// (at most [`RUN_CAP`] since `start`).
    async fn next(&self, seq: u64, window: u64, clock: &Clock, start: Instant) -> bool {
        self.admit(seq, window).await;
        clock.now().saturating_duration_since(start) <= RUN_CAP
    }

    /// Waits until message `seq` may be sent: fewer than `window` in
    /// flight. A lost message frees its place after 20 ms.
    async fn admit(&self, seq: u64, window: u64) {
        while seq >= self.highest.load(Ordering::Relaxed) + window {
            let wait = self.notify.notified();
            if seq < self.highest.load(Ordering::Relaxed) + window {
                break;
            }
            if tokio::time::timeout(Duration::from_millis(20), wait)
                .await
                .is_err()
            {
                break;
            }
        }
    }
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds")
}

fn message(clock: &Clock) -> [u8; MESSAGE_LEN] {
    let mut m = [0u8; MESSAGE_LEN];
    m[..8].copy_from_slice(&clock.now().as_nanos().to_le_bytes());
    m
}

fn stamp(m: &[u8]) -> u64 {
    m.get(..8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

async fn bind() -> UdpSocket {
    let s = UdpSocket::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .expect("bind loopback");
    socket2::SockRef::from(&s)
        .set_recv_buffer_size(RCVBUF)
        .expect("SO_RCVBUF");
    s
}

/// Counts deliveries and latencies until all `n` arrived or the run ends.
struct Tally {
    clock: Clock,
    n: u64,
    delivered: u64,
    last: u64,
    latency: Histogram<u64>,
}

impl Tally {
    fn new(clock: Clock, n: u64) -> Self {
        Self {
            clock,
            n,
            delivered: 0,
            last: 0,
            latency: histogram(),
        }
    }
    /// Records one delivery; whether all have arrived.
    fn record(&mut self, progress: &Progress, seq: u64, msg: &[u8]) -> bool {
        let now = self.clock.now().as_nanos();
        let _ = self.latency.record(now.saturating_sub(stamp(msg)).max(1));
        self.delivered += 1;
        self.last = now;
        progress.delivered(seq);
        self.delivered >= self.n
    }
}

async fn plain_udp(n: u64, window: u64) -> Run {
    let clock = Clock::start();
    let (tx, rx) = (bind().await, bind().await);
    let dst = rx.local_addr().expect("bound");
    let progress = Arc::new(Progress::default());
    let p = Arc::clone(&progress);
    let receiver = tokio::spawn(async move {
        let mut t = Tally::new(clock, n);
        let mut buf = [0u8; 2048];
        while let Ok(r) = tokio::time::timeout(IDLE, rx.recv_from(&mut buf)).await {
            let (len, _) = r.expect("recv");
            let seq = stamp(&buf[..len]);
            if t.record(&p, seq, &buf[8..len]) {
                break;
            }
        }
        t
    });
    let start = clock.now();
    let mut sent = 0;
    let mut datagram = [0u8; 8 + MESSAGE_LEN];
    for seq in 0..n {
        if !progress.next(seq, window, &clock, start).await {
            break;
        }
        datagram[..8].copy_from_slice(&seq.to_le_bytes());
        datagram[8..].copy_from_slice(&message(&clock));
        if tx.send_to(&datagram, dst).await.is_ok() {
            sent += 1;
        }
    }
    let t = receiver.await.expect("receiver task");
    Run::new(sent, t, start, None, None)
}

async fn afec<S: DatagramSocket>(
    scheme: Scheme,
    tx_socket: S,
    rx_socket: S,
    n: u64,
    window: u64,
) -> Run {
    let (mode, step) = scheme.mode_and_step();
    let rx_addr = rx_socket.local_addr().expect("bound");
    let mut tx_ep = AfecEndpoint::new(AfecConfig::new(1).mode(mode).step(step)).expect("config");
    tx_ep.add_peer(rx_addr);
    let rx_ep = AfecEndpoint::new(AfecConfig::new(2).mode(mode).step(step)).expect("config");
    let delivered = |e: AfecEvent| match e {
        AfecEvent::Delivered(d) => Some((u64::from(d.index), d.payload)),
        _ => None,
    };
    let send = |clock: &Clock, _seq| {
        let msg = Bytes::copy_from_slice(&message(clock));
        move |ep: &mut AfecEndpoint, now| {
            let _ = ep.send(now, TP, msg);
        }
    };
    driven(
        (tx_ep, tx_socket),
        (rx_ep, rx_socket),
        n,
        window,
        delivered,
        send,
    )
    .await
}

/// Two machines, each run by a `Driver` on its socket: `n` messages, at
/// most `window` in flight, each sent by the command `send(clock, seq)`
/// makes; the receiver's events become deliveries (sequence number and a
/// payload stamped as [`message`]) through `delivered`.
async fn driven<M, S, C>(
    (tx_ep, tx_socket): (M, S),
    (rx_ep, rx_socket): (M, S),
    n: u64,
    window: u64,
    delivered: impl Fn(M::Event) -> Option<(u64, Bytes)> + Send + 'static,
    send: impl Fn(&Clock, u64) -> C,
) -> Run
where
    M: Machine + Send + 'static,
    M::Event: Send + 'static,
    S: DatagramSocket,
    C: FnOnce(&mut M, Instant) + Send + 'static,
{
    let clock = Clock::start();
    let (tx_driver, tx, _tx_events) = Driver::new(tx_ep, tx_socket, clock).expect("driver");
    let (rx_driver, rx, mut rx_events) = Driver::new(rx_ep, rx_socket, clock).expect("driver");
    let (tx_task, rx_task) = (tx_driver.spawn(), rx_driver.spawn());
    let progress = Arc::new(Progress::default());
    let p = Arc::clone(&progress);
    let receiver = tokio::spawn(async move {
        let mut t = Tally::new(clock, n);
        while let Ok(Some(e)) = tokio::time::timeout(IDLE, rx_events.recv()).await {
            if let Some((seq, payload)) = delivered(e)
                && t.record(&p, seq, &payload)
            {
                break;
            }
        }
        t
    });
    let start = clock.now();
    let mut sent = 0;
    for seq in 0..n {
        if !progress.next(seq, window, &clock, start).await {
            break;
        }
        tx.command(send(&clock, seq))
            .await
            .expect("sender driver running");
        sent += 1;
    }
    let t = receiver.await.expect("receiver task");
    let (tx_stats, rx_stats) = (tx.stats(), rx.stats());
    drop((tx, rx));
    tx_task.await.expect("task").expect("sender driver");
    rx_task.await.expect("task").expect("receiver driver");
    Run::new(sent, t, start, Some(tx_stats), Some(rx_stats))
}

/// AFEC through the session: the same messages as [`afec`], on
/// `channels` channels of one session pair, each pinned to AFEC (its band
/// is moot on loopback: nothing is lost, the code set size stays 1).
async fn session(channels: usize, n: u64, window: u64) -> Run {
    let afec = Mechanism::Afec { lo: 0.01, hi: 0.02 };
    session_with(channels, afec, MESSAGE_LEN, n, window).await
}

/// Messages of `len` bytes (the send time, then the sequence number) on
/// `channels` channels of one session pair, each pinned to `m`.
async fn session_with(channels: usize, m: Mechanism, len: usize, n: u64, window: u64) -> Run {
    let clock = Clock::start();
    let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
    let opts = || {
        let mut o = SessionOptions::new().expect("OS randomness");
        o.socket_buffer = RCVBUF;
        o
    };
    let a = Session::bind_with(loopback, opts()).await.expect("bind");
    let b = Arc::new(Session::bind_with(loopback, opts()).await.expect("bind"));
    let peer = a.connect(b.local_addr()).await.expect("connect");
    let chans: Vec<_> = (0..channels)
        .map(|i| {
            let c = peer
                .channel(&format!("ch{i}"), Qos::awareness())
                .expect("channel");
            c.set_mechanism(m).expect("mechanism");
            c
        })
        .collect();
    let progress = Arc::new(Progress::default());
    let p = Arc::clone(&progress);
    let rx = Arc::clone(&b);
    let receiver = tokio::spawn(async move {
        let mut t = Tally::new(clock, n);
        while let Ok(Some(e)) = tokio::time::timeout(IDLE, rx.next_event()).await {
            if let Event::Message { payload, .. } = e {
                let seq = stamp(&payload[8..]);
                if t.record(&p, seq, &payload) {
                    break;
                }
            }
        }
        t
    });
    let start = clock.now();
    let mut sent = 0;
    for seq in 0..n {
        if !progress.next(seq, window, &clock, start).await {
            break;
        }
        if chans[seq as usize % channels]
            .send(numbered(&clock, seq, len))
            .is_ok()
        {
            sent += 1;
        }
    }
    let t = receiver.await.expect("receiver task");
    let (tx, rx) = (a.socket_stats(), b.socket_stats());
    drop(chans);
    drop(peer);
    a.close().await.expect("sender session");
    Run::new(sent, t, start, Some(tx), Some(rx))
}

/// A message of `len` bytes: the send time, then `seq` (see [`stamp`]).
fn numbered(clock: &Clock, seq: u64, len: usize) -> Bytes {
    let mut msg = vec![0u8; len.max(16)];
    msg[..MESSAGE_LEN.min(len)].copy_from_slice(&message(clock)[..MESSAGE_LEN.min(len)]);
    msg[8..16].copy_from_slice(&seq.to_le_bytes());
    Bytes::from(msg)
}

/// Block FEC alone: two `TunnelEndpoint`s (the tunnel's sans-IO machine,
/// one `BlockEndpoint` toward a fixed peer) through the `Driver` on
/// batched sockets, each with the block target controller the session's
/// Block sender runs ([`BLOCK_TARGET`] within [`BLOCK_BUDGET`], a block
/// open for half of it, 16 per block at most, no pacing).
async fn block(n: u64, window: u64) -> Run {
    let (tx_socket, rx_socket) = (batched().await, batched().await);
    let (tx_addr, rx_addr) = (
        tx_socket.local_addr().expect("bound"),
        rx_socket.local_addr().expect("bound"),
    );
    let config = |peer| {
        let mut c = TunnelConfig::new(Some(peer), 16);
        let target = TargetConfig {
            target: BLOCK_TARGET,
            max_delay: BLOCK_BUDGET,
            margin: Some(BLOCK_BUDGET / 2),
            ..TargetConfig::default()
        };
        c.sender.controller = FecConfig::Target(target);
        c.sender.max_block_wait = Some(target.block_budget());
        c
    };
    let tx_ep = TunnelEndpoint::new(config(rx_addr));
    let rx_ep = TunnelEndpoint::new(config(tx_addr));
    let delivered = |d: TunnelDelivery| Some((stamp(&d.payload[8..]), d.payload));
    let send = |clock: &Clock, seq| {
        let msg = numbered(clock, seq, BLOCK_LEN);
        move |ep: &mut TunnelEndpoint, now| {
            let _ = ep.send(now, msg);
        }
    };
    driven(
        (tx_ep, tx_socket),
        (rx_ep, rx_socket),
        n,
        window,
        delivered,
        send,
    )
    .await
}

async fn batched() -> BatchedUdpSocket {
    BatchedUdpSocket::new(bind().await).expect("quinn-udp socket")
}

async fn run(case: Case, n: u64, window: u64) -> Run {
    match case {
        Case::PlainUdp => plain_udp(n, window).await,
        Case::Afec {
            scheme,
            batched: false,
        } => afec(scheme, bind().await, bind().await, n, window).await,
        Case::Afec {
            scheme,
            batched: true,
        } => afec(scheme, batched().await, batched().await, n, window).await,
        Case::Session { channels } => session(channels, n, window).await,
        Case::Block { session: None } => block(n, window).await,
        Case::Block {
            session: Some(channels),
        } => {
            let m = Mechanism::Block {
                target: BLOCK_TARGET,
                max_delay: BLOCK_BUDGET,
            };
            session_with(channels, m, BLOCK_LEN, n, window).await
        }
    }
}

fn us(h: &Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1e3
}

/// Datagrams per system call; `None` without a driver's counters.
fn per_call(datagrams: u64, calls: u64) -> Option<f64> {
    (calls > 0).then(|| datagrams as f64 / calls as f64)
}

fn show(x: Option<f64>) -> String {
    x.map_or_else(|| "-".into(), |x| format!("{x:.2}"))
}

fn parse_args() -> (Params, Option<String>, Option<String>) {
    let mut p = Params {
        messages: 200_000,
        window: 64,
        latency_messages: 20_000,
        repeats: 3,
    };
    let mut json = None;
    let mut only = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut num = |what: &str| -> u64 {
            args.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{what} needs a number"))
        };
        match a.as_str() {
            "--messages" => p.messages = num("--messages").max(1),
            "--window" => p.window = num("--window").max(1),
            "--latency-messages" => p.latency_messages = num("--latency-messages").max(1),
            "--repeats" => p.repeats = usize::try_from(num("--repeats")).unwrap_or(1).max(1),
            "--json" => json = args.next(),
            // Some cases (comma-separated names) and the baseline.
            "--only" => only = args.next(),
            // `cargo test --benches` runs this as a smoke test.
            "--test" => {
                p = Params {
                    messages: 2_000,
                    window: 64,
                    latency_messages: 200,
                    repeats: 1,
                };
            }
            _ => {} // cargo's --bench, filters
        }
    }
    (p, json, only)
}

fn main() {
    let (p, json_out, only) = parse_args();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let cases = [
        Case::PlainUdp,
        Case::Afec {
            scheme: Scheme::Udp,
            batched: false,
        },
        Case::Afec {
            scheme: Scheme::Udp,
            batched: true,
        },
        Case::Afec {
            scheme: Scheme::Fec(3.0),
            batched: false,
        },
        Case::Afec {
            scheme: Scheme::Fec(3.0),
            batched: true,
        },
        Case::Session { channels: 1 },
        Case::Session { channels: 8 },
        Case::Block { session: None },
        Case::Block { session: Some(1) },
        Case::Block { session: Some(8) },
    ];
    let cases: Vec<Case> = cases
        .into_iter()
        .enumerate()
        .filter(|(i, c)| {
            *i == 0
                || only
                    .as_ref()
                    .is_none_or(|o| o.split(',').any(|n| n == c.name()))
        })
        .map(|(_, c)| c)
        .collect();
    let (gso, recv_batch) = rt.block_on(async {
        let s = batched().await;
        let recv_batch = s
            .max_recv_batch()
            .min(groupwire_tokio::DriverConfig::default().recv_batch);
        (s.max_send_segments(), recv_batch)
    });
    let mut rate_runs: Vec<Vec<Run>> = cases.iter().map(|_| Vec::new()).collect();
    for _ in 0..p.repeats {
        for (i, &case) in cases.iter().enumerate() {
            rate_runs[i].push(rt.block_on(run(case, p.messages, p.window)));
        }
    }
    let latency_runs: Vec<Run> = cases
        .iter()
        .map(|&case| rt.block_on(run(case, p.latency_messages, 1)))
        .collect();

    let mut rows = Vec::new();
    let mut baseline_rate = None;
    println!(
        "{:<20} {:>12} {:>7} {:>6} {:>10} {:>10} {:>10} {:>10} {:>8} {:>8}",
        "case",
        "msg/s",
        "ratio",
        "loss%",
        "load p50",
        "load p99",
        "idle p50",
        "idle p99",
        "dg/send",
        "dg/recv"
    );
    for ((case, runs), lat) in cases.iter().zip(&rate_runs).zip(&latency_runs) {
        let mut rates: Vec<f64> = runs.iter().map(Run::rate).collect();
        rates.sort_by(f64::total_cmp);
        let median = rates[rates.len() / 2];
        let base = *baseline_rate.get_or_insert(median);
        let mut loaded = histogram();
        for r in runs {
            loaded.add(&r.latency).expect("same bounds");
        }
        let sent: u64 = runs.iter().map(|r| r.sent).sum();
        let delivered: u64 = runs.iter().map(|r| r.delivered).sum();
        let loss = 1.0 - delivered as f64 / sent.max(1) as f64;
        let (mut sent_dg, mut send_calls, mut recv_dg, mut recv_calls) = (0, 0, 0, 0);
        for (tx, rx) in runs
            .iter()
            .filter_map(|r| Some((r.tx.as_ref()?, r.rx.as_ref()?)))
        {
            sent_dg += tx.datagrams_sent;
            send_calls += tx.send_calls;
            recv_dg += rx.datagrams_received;
            recv_calls += rx.recv_calls;
        }
        let (dg_send, dg_recv) = (per_call(sent_dg, send_calls), per_call(recv_dg, recv_calls));
        let row = json!({
            "case": case.name(),
            "message_len": case.message_len(),
            "goodput_bps": median * case.message_len() as f64 * 8.0,
            "rates": rates,
            "rate": median,
            "ratio": median / base,
            "sent": sent,
            "delivered": delivered,
            "loss": loss,
            "loaded_p50_us": us(&loaded, 0.5),
            "loaded_p99_us": us(&loaded, 0.99),
            "idle_p50_us": us(&lat.latency, 0.5),
            "idle_p99_us": us(&lat.latency, 0.99),
            "idle_delivered": lat.delivered,
            "datagrams_per_message": (sent > 0 && sent_dg > 0).then(|| sent_dg as f64 / sent as f64),
            "datagrams_per_send_call": dg_send,
            "datagrams_per_recv_call": dg_recv,
        });
        println!(
            "{:<20} {:>12.0} {:>7.2} {:>6.2} {:>8.1}us {:>8.1}us {:>8.1}us {:>8.1}us {:>8} {:>8}",
            case.name(),
            median,
            median / base,
            loss * 100.0,
            us(&loaded, 0.5),
            us(&loaded, 0.99),
            us(&lat.latency, 0.5),
            us(&lat.latency, 0.99),
            show(dg_send),
            show(dg_recv)
        );
        rows.push(row);
    }
    let summary = json!({
        "messages": p.messages,
        "message_len": MESSAGE_LEN,
        "block_message_len": BLOCK_LEN,
        "window": p.window,
        "repeats": p.repeats,
        "latency_messages": p.latency_messages,
        "runtime_workers": 2,
        "gso_segments": gso,
        "recv_batch": recv_batch,
        "cases": rows,
    });
    if let Some(path) = json_out {
        std::fs::write(&path, serde_json::to_string_pretty(&summary).expect("json"))
            .expect("write the JSON summary");
    }
}
