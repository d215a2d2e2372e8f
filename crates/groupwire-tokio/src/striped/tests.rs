//! Striped transfers over loopback: real sockets, bounded in time, and
//! assertions on behaviour only (never on speed: the machine may be
//! loaded).

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use groupwire_proto::rbudp::{BlastSink, Pattern};
use groupwire_proto::wire::striped::DONE_LEN;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::*;

/// The bound on every test: generous for a loaded 2-core machine, yet a
/// hang fails instead of blocking the suite.
const LIMIT: Duration = Duration::from_secs(120);

fn localhost() -> SocketAddr {
    "127.0.0.1:0".parse().expect("valid address")
}

/// Writes `len` bytes of `Pattern(seed)` to `dir/name`; its path and hash.
fn pattern_file(dir: &Path, name: &str, seed: u64, len: u64) -> (PathBuf, Hash) {
    let p = Pattern::new(seed, len);
    let mut bytes = vec![0u8; len as usize];
    p.fill(0, &mut bytes);
    let path = dir.join(name);
    std::fs::write(&path, &bytes).expect("write the source file");
    (path, *blake3::hash(&bytes).as_bytes())
}

/// A listener on loopback and its address.
async fn listener() -> (StripedListener, SocketAddr) {
    let l = StripedListener::bind(localhost()).await.expect("bind");
    let addr = l.local_addr().expect("local addr");
    (l, addr)
}

/// Spawns one `accept` into `sink`.
fn spawn_accept<D: BlastSink + Send + 'static>(
    l: StripedListener,
    sink: D,
    cfg: StripedConfig,
) -> tokio::task::JoinHandle<Result<StripedReport, StripedError>> {
    tokio::spawn(async move { l.accept(sink, &cfg, |_| {}).await })
}

fn hello(session: u32, size: u64, chunk_size: u32, index: u16, count: u16) -> Vec<u8> {
    Repr {
        session,
        frame: Frame::Hello(Hello {
            size,
            chunk_size,
            index,
            count,
            hash: None,
        }),
    }
    .to_vec()
}

fn chunk_head(session: u32, offset: u64, length: u32) -> Vec<u8> {
    Repr {
        session,
        frame: Frame::Chunk(ChunkHeader { offset, length }),
    }
    .to_vec()
}

/// Reads the receiver's Done off a hand-made sender's stream 0.
async fn read_done(s: &mut TcpStream) -> Done {
    let mut buf = [0u8; DONE_LEN];
    s.read_exact(&mut buf).await.expect("a Done frame");
    match Repr::parse(&buf).expect("a valid frame").frame {
        Frame::Done(d) => d,
        other => panic!("expected Done, got {other:?}"),
    }
}

async fn twenty_mb_file_over(streams: u16) {
    const LEN: u64 = 20 * 1024 * 1024;
    let dir = tempfile::tempdir().expect("temp dir");
    let (src, hash) = pattern_file(dir.path(), "src.bin", u64::from(streams), LEN);
    let dst = dir.path().join("dst.bin");
    let (l, addr) = listener().await;
    let rx_cfg = StripedConfig::new().timeout(Duration::from_secs(30));
    let rx = spawn_accept(l, FileSink::create(&dst).expect("create"), rx_cfg);
    let cfg = StripedConfig::new()
        .streams(streams)
        .timeout(Duration::from_secs(30));
    let mut seen = Vec::new();
    let tx = tokio::time::timeout(LIMIT, send_file(addr, &src, &cfg, |b| seen.push(b)))
        .await
        .expect("in time")
        .expect("sent");
    let rx = tokio::time::timeout(LIMIT, rx)
        .await
        .expect("in time")
        .expect("no panic")
        .expect("received");

    assert_eq!(tx.hash, hash);
    assert_eq!(rx.hash, hash);
    assert!(
        std::fs::read(&dst).expect("read back") == std::fs::read(&src).expect("read source"),
        "the copy is byte-identical"
    );
    assert_eq!((tx.streams, rx.streams), (streams, streams));
    assert_eq!((tx.bytes, rx.bytes), (LEN, LEN));
    let chunks = LEN.div_ceil(u64::from(DEFAULT_CHUNK_SIZE));
    for r in [&tx, &rx] {
        assert_eq!(r.per_stream.len(), usize::from(streams));
        assert_eq!(r.per_stream.iter().map(|s| s.bytes).sum::<u64>(), LEN);
        assert_eq!(r.per_stream.iter().map(|s| s.chunks).sum::<u64>(), chunks);
    }
    let shares = |r: &StripedReport| {
        r.per_stream
            .iter()
            .map(|s| (s.index, s.chunks, s.bytes))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        shares(&tx),
        shares(&rx),
        "both sides count each stream alike"
    );
    assert!(seen.windows(2).all(|w| w[0] <= w[1]), "progress only grows");
    assert_eq!(seen.last(), Some(&LEN), "progress ends at the total");
    let json = serde_json::to_value(&tx).expect("serializes");
    assert_eq!(json["hash"].as_str().map(str::len), Some(64));
    // Measured, not asserted: the machine may be loaded.
    eprintln!(
        "striped N={streams}: {} bytes in {:.3} s = {:.0} bytes/s (sender), per-stream bytes {:?}",
        tx.bytes,
        tx.elapsed.as_secs_f64(),
        tx.rate_bps as f64 / 8.0,
        tx.per_stream.iter().map(|s| s.bytes).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_mb_file_arrives_identical_over_one_stream() {
    twenty_mb_file_over(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_mb_file_arrives_identical_over_four_streams() {
    twenty_mb_file_over(4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_and_buffers_follow_the_plan_when_not_given() {
    let (l, addr) = listener().await;
    let pattern = Pattern::new(11, 2 * 1024 * 1024 + 17);
    let rx = spawn_accept(
        l,
        Vec::new(),
        StripedConfig::new().timeout(Duration::from_secs(30)),
    );
    // The paper's Chicago–Amsterdam path: 13 streams of 80 KiB buffers.
    let cfg = StripedConfig::new()
        .path(Bitrate::mbps(45), Duration::from_millis(150))
        .chunk_size(64 * 1024)
        .timeout(Duration::from_secs(30));
    let tx = tokio::time::timeout(LIMIT, send(addr, pattern, &cfg, |_| {}))
        .await
        .expect("in time")
        .expect("sent");
    let rx = rx.await.expect("no panic").expect("received");
    let p = plan(
        Bitrate::mbps(45),
        Duration::from_millis(150),
        DEFAULT_WINDOW,
    );
    assert_eq!((tx.streams, rx.streams), (p.streams, p.streams));
    assert_eq!(tx.socket_buffer, Some(p.buffer));
    assert_eq!(tx.hash, pattern.hash());
    assert_eq!(rx.hash, pattern.hash());
    assert_eq!(rx.chunk_size, 64 * 1024);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_and_foreign_connections_do_not_disturb_a_transfer() {
    let (l, addr) = listener().await;
    let rx = spawn_accept(
        l,
        Vec::new(),
        StripedConfig::new().timeout(Duration::from_secs(20)),
    );
    // Another protocol.
    let mut garbage = TcpStream::connect(addr).await.expect("connect");
    garbage
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\nxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx")
        .await
        .expect("write");
    // Silence.
    let silent = TcpStream::connect(addr).await.expect("connect");
    // A Hello with the wrong magic.
    let mut bad = hello(77, 1000, 100, 0, 2);
    bad[12] = b'X';
    let mut bad_magic = TcpStream::connect(addr).await.expect("connect");
    bad_magic.write_all(&bad).await.expect("write");
    // A chunk before any Hello.
    let mut no_hello = TcpStream::connect(addr).await.expect("connect");
    no_hello
        .write_all(&chunk_head(77, 0, 100))
        .await
        .expect("write");
    // A valid Hello of a foreign session whose other streams never come.
    let mut foreign = TcpStream::connect(addr).await.expect("connect");
    foreign
        .write_all(&hello(9, 1000, 100, 0, 3))
        .await
        .expect("write");
    tokio::time::sleep(Duration::from_millis(100)).await;

    let pattern = Pattern::new(5, 1024 * 1024 + 3);
    let cfg = StripedConfig::new()
        .streams(2)
        .chunk_size(64 * 1024)
        .session(77)
        .timeout(Duration::from_secs(20));
    let tx = tokio::time::timeout(LIMIT, send(addr, pattern, &cfg, |_| {}))
        .await
        .expect("in time")
        .expect("sent despite the noise");
    let rx = rx
        .await
        .expect("no panic")
        .expect("received despite the noise");
    assert_eq!((tx.session, rx.session), (77, 77));
    assert_eq!(rx.hash, pattern.hash());
    // The garbage connection was dropped: it reads end of stream, or a reset.
    let mut buf = [0u8; 16];
    let r = tokio::time::timeout(Duration::from_secs(10), garbage.read(&mut buf))
        .await
        .expect("the receiver closed it");
    assert!(matches!(r, Ok(0) | Err(_)), "{r:?}");
    drop((silent, bad_magic, no_hello, foreign));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receiver_names_a_stream_that_closes_mid_chunk() {
    const CHUNK: u32 = 64 * 1024;
    let (l, addr) = listener().await;
    let rx = spawn_accept(
        l,
        Vec::new(),
        StripedConfig::new().timeout(Duration::from_secs(10)),
    );
    let mut s0 = TcpStream::connect(addr).await.expect("connect");
    let mut s1 = TcpStream::connect(addr).await.expect("connect");
    s0.write_all(&hello(5, 4 * u64::from(CHUNK), CHUNK, 0, 2))
        .await
        .expect("hello");
    s1.write_all(&hello(5, 4 * u64::from(CHUNK), CHUNK, 1, 2))
        .await
        .expect("hello");
    s0.write_all(&chunk_head(5, 0, CHUNK)).await.expect("chunk");
    s0.write_all(&vec![1u8; CHUNK as usize])
        .await
        .expect("payload");
    s1.write_all(&chunk_head(5, u64::from(CHUNK), CHUNK))
        .await
        .expect("chunk");
    s1.write_all(&[2u8; 1000]).await.expect("part of a payload");
    // The sender dies mid-chunk on stream 1.
    drop(s1);
    let r = tokio::time::timeout(LIMIT, rx)
        .await
        .expect("an error well within the timeout")
        .expect("no panic");
    assert!(
        matches!(r, Err(StripedError::StreamClosedEarly { stream: 1, .. })),
        "{r:?}"
    );
    let done = tokio::time::timeout(LIMIT, read_done(&mut s0))
        .await
        .expect("answered");
    assert_eq!(done.status, DoneStatus::StreamClosedEarly);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receiver_times_out_when_not_every_stream_connects() {
    let (l, addr) = listener().await;
    let timeout = Duration::from_millis(500);
    let rx = spawn_accept(l, Vec::new(), StripedConfig::new().timeout(timeout));
    let mut s0 = TcpStream::connect(addr).await.expect("connect");
    s0.write_all(&hello(6, 1000, 100, 0, 3))
        .await
        .expect("hello");
    let r = tokio::time::timeout(LIMIT, rx)
        .await
        .expect("in time")
        .expect("no panic");
    match r {
        Err(StripedError::Timeout { what, after }) => {
            assert!(what.contains("1 of 3"), "{what}");
            assert_eq!(after, timeout);
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert_eq!(read_done(&mut s0).await.status, DoneStatus::Timeout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receiver_stops_waiting_for_a_sender_after_wait() {
    let (l, _addr) = listener().await;
    let cfg = StripedConfig::new().wait(Duration::from_millis(200));
    let r = tokio::time::timeout(LIMIT, l.accept(Vec::new(), &cfg, |_| {}))
        .await
        .expect("in time");
    assert!(matches!(r, Err(StripedError::Timeout { .. })), "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sender_times_out_on_a_receiver_that_never_answers() {
    // Accepts connections and never reads them.
    let mute = tokio::net::TcpListener::bind(localhost())
        .await
        .expect("bind");
    let addr = mute.local_addr().expect("addr");
    let hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = mute.accept().await {
            held.push(s);
        }
    });
    for len in [64 * 1024, 64 * 1024 * 1024] {
        let cfg = StripedConfig::new()
            .streams(2)
            .timeout(Duration::from_millis(500));
        let r = tokio::time::timeout(LIMIT, send(addr, Pattern::new(1, len), &cfg, |_| {}))
            .await
            .expect("an error, not a hang");
        assert!(
            matches!(r, Err(StripedError::Timeout { .. })),
            "{len}: {r:?}"
        );
    }
    hold.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sender_reports_a_refused_connection() {
    let addr = {
        let l = std::net::TcpListener::bind(localhost()).expect("bind");
        l.local_addr().expect("addr")
    };
    let cfg = StripedConfig::new()
        .streams(2)
        .timeout(Duration::from_secs(5));
    let r = tokio::time::timeout(LIMIT, send(addr, Pattern::new(1, 10), &cfg, |_| {}))
        .await
        .expect("in time");
    assert!(matches!(r, Err(StripedError::Connect { .. })), "{r:?}");
}

/// A sink with room for `room` bytes: past that, ENOSPC.
struct FullDisk {
    room: u64,
    inner: Vec<u8>,
}

impl BlastSink for FullDisk {
    fn prepare(&mut self, size: u64) -> io::Result<()> {
        self.inner.prepare(size)
    }
    fn write_at(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        if offset + data.len() as u64 > self.room {
            return Err(io::Error::from_raw_os_error(28)); // ENOSPC
        }
        self.inner.write_at(offset, data)
    }
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        BlastSink::read_at(&mut self.inner, offset, buf)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_is_disk_full_on_both_sides() {
    let (l, addr) = listener().await;
    let sink = FullDisk {
        room: 1024 * 1024,
        inner: Vec::new(),
    };
    let rx = spawn_accept(
        l,
        sink,
        StripedConfig::new().timeout(Duration::from_secs(20)),
    );
    let cfg = StripedConfig::new()
        .streams(4)
        .chunk_size(64 * 1024)
        .timeout(Duration::from_secs(20));
    let tx = tokio::time::timeout(LIMIT, send(addr, Pattern::new(2, 8 << 20), &cfg, |_| {}))
        .await
        .expect("in time");
    let rx = rx.await.expect("no panic");
    assert!(
        matches!(rx, Err(StripedError::DiskFull { offset }) if offset >= 1024 * 1024 - 64 * 1024),
        "{rx:?}"
    );
    assert!(
        matches!(tx, Err(StripedError::Receiver(DoneStatus::DiskFull))),
        "{tx:?}"
    );
}

/// A sink that flips one bit of what it stores at offset 1000.
struct BitRot(Vec<u8>);

impl BlastSink for BitRot {
    fn prepare(&mut self, size: u64) -> io::Result<()> {
        self.0.prepare(size)
    }
    fn write_at(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.0.write_at(offset, data)?;
        if (offset..offset + data.len() as u64).contains(&1000) {
            self.0[1000] ^= 0x10;
        }
        Ok(())
    }
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        BlastSink::read_at(&mut self.0, offset, buf)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corruption_at_rest_is_a_hash_mismatch_on_both_sides() {
    let (l, addr) = listener().await;
    let rx = spawn_accept(
        l,
        BitRot(Vec::new()),
        StripedConfig::new().timeout(Duration::from_secs(20)),
    );
    let pattern = Pattern::new(3, 300_000);
    let cfg = StripedConfig::new()
        .streams(3)
        .chunk_size(10_000)
        .timeout(Duration::from_secs(20));
    let tx = tokio::time::timeout(LIMIT, send(addr, pattern, &cfg, |_| {}))
        .await
        .expect("in time");
    let rx = rx.await.expect("no panic");
    match (tx, rx) {
        (
            Err(StripedError::HashMismatch { sent, stored }),
            Err(StripedError::HashMismatch {
                sent: s2,
                stored: st2,
            }),
        ) => {
            assert_eq!((sent, s2), (pattern.hash(), pattern.hash()));
            assert_eq!(stored, st2);
            assert_ne!(stored, sent);
        }
        other => panic!("expected mismatches, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_that_reads_to_another_hash_is_a_changed_source() {
    let (l, addr) = listener().await;
    let rx = spawn_accept(
        l,
        Vec::new(),
        StripedConfig::new().timeout(Duration::from_secs(20)),
    );
    let cfg = StripedConfig::new()
        .streams(2)
        .chunk_size(10_000)
        .hash([7; 32])
        .timeout(Duration::from_secs(20));
    let tx = tokio::time::timeout(LIMIT, send(addr, Pattern::new(4, 100_000), &cfg, |_| {}))
        .await
        .expect("in time");
    assert!(matches!(tx, Err(StripedError::SourceChanged)), "{tx:?}");
    let rx = rx.await.expect("no panic");
    assert!(
        matches!(
            rx,
            Err(StripedError::SenderAborted(AbortReason::SourceChanged))
        ),
        "{rx:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_file_is_a_transfer_too() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (src, hash) = pattern_file(dir.path(), "empty", 0, 0);
    let dst = dir.path().join("copy");
    let (l, addr) = listener().await;
    let rx = spawn_accept(
        l,
        FileSink::create(&dst).expect("create"),
        StripedConfig::new(),
    );
    let tx = tokio::time::timeout(
        LIMIT,
        send_file(addr, &src, &StripedConfig::new().streams(3), |_| {}),
    )
    .await
    .expect("in time")
    .expect("sent");
    let rx = rx.await.expect("no panic").expect("received");
    assert_eq!((tx.hash, rx.hash, rx.bytes), (hash, hash, 0));
    assert_eq!(std::fs::metadata(&dst).expect("copy").len(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transfer_too_large_for_the_receivers_memory_is_refused() {
    let (l, addr) = listener().await;
    // 8 streams of 16 MiB chunk buffers: past RECEIVER_BUFFER_LIMIT.
    let rx = spawn_accept(
        l,
        Vec::new(),
        StripedConfig::new().wait(Duration::from_secs(3)),
    );
    let cfg = StripedConfig::new()
        .streams(8)
        .chunk_size(MAX_CHUNK_SIZE)
        .timeout(Duration::from_secs(20));
    let tx = tokio::time::timeout(LIMIT, send(addr, Pattern::new(1, 1 << 20), &cfg, |_| {}))
        .await
        .expect("in time");
    assert!(
        matches!(tx, Err(StripedError::Receiver(DoneStatus::Refused))),
        "{tx:?}"
    );
    // The receiver refused it and went on waiting for a sender.
    let rx = rx.await.expect("no panic");
    assert!(matches!(rx, Err(StripedError::Timeout { .. })), "{rx:?}");
}

/// A source that takes 2 ms per chunk, so a transfer lasts long enough to
/// be cut in the middle.
struct SlowSource(Pattern);

impl groupwire_proto::rbudp::BlastSource for SlowSource {
    fn len(&self) -> u64 {
        self.0.len()
    }
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        std::thread::sleep(Duration::from_millis(2));
        self.0.read_at(offset, buf)
    }
}

/// A sink that takes 2 ms per write.
struct SlowSink(Vec<u8>);

impl BlastSink for SlowSink {
    fn prepare(&mut self, size: u64) -> io::Result<()> {
        self.0.prepare(size)
    }
    fn write_at(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        std::thread::sleep(Duration::from_millis(2));
        self.0.write_at(offset, data)
    }
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        BlastSink::read_at(&mut self.0, offset, buf)
    }
}

/// Polls `seen` until it passes zero.
async fn until_moving(seen: &std::sync::atomic::AtomicU64) {
    while seen.load(Ordering::Relaxed) == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sender_killed_mid_transfer_is_a_stream_closed_early() {
    let (l, addr) = listener().await;
    let stored = Arc::new(AtomicU64::new(0));
    let seen = stored.clone();
    let rx = tokio::spawn(async move {
        let cfg = StripedConfig::new().timeout(Duration::from_secs(60));
        l.accept(Vec::new(), &cfg, |b| seen.store(b, Ordering::Relaxed))
            .await
    });
    let cfg = StripedConfig::new().streams(4).chunk_size(16 * 1024);
    // 2 000 chunks at 2 ms each: seconds of transfer, cut after the first.
    let source = SlowSource(Pattern::new(8, 2000 * 16 * 1024));
    let tx = tokio::spawn(async move { send(addr, source, &cfg, |_| {}).await });
    tokio::time::timeout(LIMIT, until_moving(&stored))
        .await
        .expect("the transfer starts");
    tx.abort();
    // Well before the 60 s timeout: the streams close, they do not fall silent.
    let r = tokio::time::timeout(Duration::from_secs(30), rx)
        .await
        .expect("an error well before the timeout")
        .expect("no panic");
    assert!(
        matches!(r, Err(StripedError::StreamClosedEarly { .. })),
        "{r:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_killed_mid_transfer_is_a_peer_gone() {
    let (l, addr) = listener().await;
    let stored = Arc::new(AtomicU64::new(0));
    let seen = stored.clone();
    let rx = tokio::spawn(async move {
        let cfg = StripedConfig::new().timeout(Duration::from_secs(60));
        l.accept(SlowSink(Vec::new()), &cfg, |b| {
            seen.store(b, Ordering::Relaxed)
        })
        .await
    });
    let cfg = StripedConfig::new()
        .streams(4)
        .chunk_size(16 * 1024)
        .timeout(Duration::from_secs(60));
    let tx = tokio::spawn(async move { send(addr, Pattern::new(9, 64 << 20), &cfg, |_| {}).await });
    tokio::time::timeout(LIMIT, until_moving(&stored))
        .await
        .expect("the transfer starts");
    rx.abort();
    let r = tokio::time::timeout(Duration::from_secs(30), tx)
        .await
        .expect("an error well before the timeout")
        .expect("no panic");
    assert!(
        matches!(
            r,
            Err(StripedError::PeerGone { .. } | StripedError::StreamClosedEarly { stream: 0, .. })
        ),
        "{r:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_truncated_while_it_is_sent_is_a_changed_source() {
    // At the slow sink's 8 MB/s, seconds of transfer: the reader is still
    // well inside the file when it is cut, so its next read fails.
    const LEN: u64 = 32 * 1024 * 1024;
    let dir = tempfile::tempdir().expect("temp dir");
    let (src, _) = pattern_file(dir.path(), "src.bin", 12, LEN);
    // Small buffers and a slow sink: the sender's reader cannot run ahead.
    let small = StripedConfig::new()
        .socket_buffer(64 * 1024)
        .timeout(Duration::from_secs(60));
    let l = StripedListener::bind_with(localhost(), &small)
        .await
        .expect("bind");
    let addr = l.local_addr().expect("addr");
    let stored = Arc::new(AtomicU64::new(0));
    let seen = stored.clone();
    let rx_cfg = small.clone();
    let rx = tokio::spawn(async move {
        l.accept(SlowSink(Vec::new()), &rx_cfg, |b| {
            seen.store(b, Ordering::Relaxed);
        })
        .await
    });
    let cfg = small.streams(2).chunk_size(16 * 1024);
    let path = src.clone();
    let tx = tokio::spawn(async move { send_file(addr, &path, &cfg, |_| {}).await });
    tokio::time::timeout(LIMIT, until_moving(&stored))
        .await
        .expect("the transfer starts");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&src)
        .and_then(|f| f.set_len(1024 * 1024))
        .expect("truncate the source");
    let tx = tokio::time::timeout(LIMIT, tx)
        .await
        .expect("in time")
        .expect("no panic");
    assert!(matches!(tx, Err(StripedError::SourceChanged)), "{tx:?}");
    let rx = tokio::time::timeout(LIMIT, rx)
        .await
        .expect("in time")
        .expect("no panic");
    assert!(
        matches!(
            rx,
            Err(StripedError::SenderAborted(AbortReason::SourceChanged))
        ),
        "{rx:?}"
    );
}
