//! Reliable Blast UDP over loopback sockets. Every test asserts what holds
//! on a loaded machine (delivery, integrity, errors), never a speed; waits
//! are bounded by generous timeouts.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use groupwire_proto::rbudp::{Pattern, PatternSink};
use groupwire_proto::wire::rbudp::AbortReason;

use super::*;

const LIMIT: Duration = Duration::from_secs(60);

fn localhost() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

fn quick_receive() -> ReceiveConfig {
    ReceiveConfig {
        start_timeout: Duration::from_millis(300),
        idle_timeout: Duration::from_secs(20),
        accept_timeout: Some(LIMIT),
        ..ReceiveConfig::default()
    }
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("gw-rbudp-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_crosses_loopback_byte_for_byte_and_both_sides_agree() {
    let dir = temp_dir("file");
    let (src_path, dst_path) = (dir.join("in"), dir.join("out"));
    let size = 12_000_000 + 777; // not a multiple of the packet size
    let mut data = vec![0u8; size];
    Pattern::new(3, size as u64).fill(0, &mut data);
    std::fs::write(&src_path, &data).unwrap();

    let listener = RbudpListener::bind(localhost()).await.unwrap();
    let to = listener.local_addr().unwrap();
    let sink = FileSink::create(&dst_path).unwrap();
    let recv = tokio::spawn(async move {
        let mut last = Progress::default();
        let r = listener.receive(&quick_receive(), sink, |p| last = p).await;
        (r, last)
    });
    let cfg = SendConfig::new(to, Bitrate::mbps(400));
    let mut updates = 0;
    let sent = tokio::time::timeout(
        LIMIT,
        send(&cfg, FileSource::open(&src_path).unwrap(), |_| updates += 1),
    )
    .await
    .expect("the transfer ends")
    .expect("the transfer completes");
    let (got, last) = tokio::time::timeout(LIMIT, recv).await.unwrap().unwrap();
    let (got, mut sink) = got.expect("the receiver completes");
    sink.sync().unwrap();
    drop(sink);

    assert_eq!(std::fs::read(&dst_path).unwrap(), data);
    assert_eq!(sent.size, size as u64);
    assert_eq!(sent.blake3, got.blake3);
    assert_eq!(sent.blake3.len(), 64);
    assert_eq!(sent.rounds, got.rounds);
    assert!(sent.effective_bps > 0 && got.effective_bps > 0);
    assert!(updates >= 1, "the sender reports progress");
    assert_eq!((last.bytes, last.total), (size as u64, size as u64));
    let rx = got.receiver.unwrap();
    assert_eq!(rx.stored, sent.packets);
    assert_eq!(rx.foreign, 0);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A UDP socket that loses every `every`-th datagram it is asked to send.
struct Lossy {
    inner: BatchedUdpSocket,
    every: u64,
    n: AtomicU64,
    lost: Arc<AtomicU64>,
}

impl DatagramSocket for Lossy {
    async fn send_to(&self, data: &[u8], dst: SocketAddr) -> io::Result<usize> {
        if self.n.fetch_add(1, Ordering::Relaxed) % self.every == self.every - 1 {
            self.lost.fetch_add(1, Ordering::Relaxed);
            return Ok(data.len());
        }
        self.inner.send_to(data, dst).await
    }
    async fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        self.inner.recv_from(buf).await
    }
    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_datagrams_are_blasted_again_until_the_pattern_is_whole() {
    let listener = RbudpListener::bind(localhost()).await.unwrap();
    let to = listener.local_addr().unwrap();
    let size = 3_000_000u64;
    let recv = tokio::spawn(async move {
        listener
            .receive(&quick_receive(), PatternSink::new(9), |_| {})
            .await
    });
    let tcp = TcpStream::connect(to).await.unwrap();
    let lost = Arc::new(AtomicU64::new(0));
    let udp = Lossy {
        inner: BatchedUdpSocket::bind(tcp.local_addr().unwrap())
            .await
            .unwrap(),
        every: 10,
        n: AtomicU64::new(0),
        lost: Arc::clone(&lost),
    };
    let cfg = SendConfig::new(to, Bitrate::mbps(200));
    let sent = tokio::time::timeout(
        LIMIT,
        send_over(&cfg, tcp, &udp, 0, Pattern::new(9, size), |_| {}),
    )
    .await
    .unwrap()
    .expect("the transfer completes despite the loss");
    let (got, sink) = tokio::time::timeout(LIMIT, recv)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(lost.load(Ordering::Relaxed) > 0);
    assert!(sent.nak_rounds >= 1, "a lossy blast needs a missing list");
    assert!(sink.wrong.is_empty());
    assert_eq!(sink.written, size);
    let s = sent.sender.unwrap();
    assert!(s.retransmitted >= lost.load(Ordering::Relaxed) - s.retransmitted / 10);
    assert_eq!(got.blake3, sent.blake3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_and_silent_connections_do_not_keep_a_real_sender_out() {
    let listener = RbudpListener::bind(localhost()).await.unwrap();
    let to = listener.local_addr().unwrap();
    let recv = tokio::spawn(async move {
        listener
            .receive(&quick_receive(), PatternSink::new(5), |_| {})
            .await
    });
    // An oversized frame, then garbage, then one that says nothing.
    let mut huge = TcpStream::connect(to).await.unwrap();
    huge.write_all(&u32::MAX.to_be_bytes()).await.unwrap();
    let mut junk = TcpStream::connect(to).await.unwrap();
    junk.write_all(&[0, 0, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8])
        .await
        .unwrap();
    let _silent = TcpStream::connect(to).await.unwrap();
    // Datagrams from an address that opened no transfer.
    let stray = tokio::net::UdpSocket::bind(localhost()).await.unwrap();
    for _ in 0..50 {
        stray.send_to(b"not a blast", to).await.unwrap();
    }
    let cfg = SendConfig::new(to, Bitrate::mbps(100));
    let sent = tokio::time::timeout(LIMIT, send(&cfg, Pattern::new(5, 500_000), |_| {}))
        .await
        .unwrap()
        .expect("the real sender gets its turn");
    let (got, sink) = tokio::time::timeout(LIMIT, recv)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(sink.wrong.is_empty());
    assert_eq!(got.blake3, sent.blake3);
    drop((huge, junk));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sender_that_vanishes_mid_transfer_is_a_clear_error_not_a_hang() {
    let listener = RbudpListener::bind(localhost()).await.unwrap();
    let to = listener.local_addr().unwrap();
    let recv = tokio::spawn(async move {
        listener
            .receive(&quick_receive(), PatternSink::new(1), |_| {})
            .await
    });
    // 100 MB at 20 Mbit/s takes 40 s: stop it after the blast began.
    let cfg = SendConfig::new(to, Bitrate::mbps(20));
    let sending =
        tokio::spawn(async move { send(&cfg, Pattern::new(1, 100_000_000), |_| {}).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    sending.abort();
    let got = tokio::time::timeout(Duration::from_secs(30), recv)
        .await
        .expect("the receiver does not wait out its idle timeout")
        .unwrap();
    assert!(
        matches!(got, Err(RbudpError::PeerGone)),
        "got {:?}",
        got.map(|r| r.0)
    );
}

/// A sink whose disk fills after `room` bytes.
struct FullDisk {
    room: u64,
    used: u64,
}

impl BlastSink for FullDisk {
    fn write_at(&mut self, _offset: u64, data: &[u8]) -> io::Result<()> {
        self.used += data.len() as u64;
        if self.used > self.room {
            return Err(io::Error::from_raw_os_error(28)); // ENOSPC
        }
        Ok(())
    }
    fn read_at(&mut self, _offset: u64, _buf: &mut [u8]) -> io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_stops_both_sides_with_the_reason() {
    let listener = RbudpListener::bind(localhost()).await.unwrap();
    let to = listener.local_addr().unwrap();
    let recv = tokio::spawn(async move {
        let sink = FullDisk {
            room: 200_000,
            used: 0,
        };
        listener.receive(&quick_receive(), sink, |_| {}).await
    });
    let cfg = SendConfig::new(to, Bitrate::mbps(100));
    let sent = tokio::time::timeout(LIMIT, send(&cfg, Pattern::new(2, 2_000_000), |_| {}))
        .await
        .unwrap();
    let got = tokio::time::timeout(LIMIT, recv).await.unwrap().unwrap();
    match got {
        Err(RbudpError::Blast(BlastError::Storage(why))) => {
            assert!(why.contains("No space left"), "{why}");
        }
        other => panic!("receiver: {:?}", other.map(|r| r.0)),
    }
    assert!(
        matches!(
            sent,
            Err(RbudpError::Blast(BlastError::PeerAborted(
                AbortReason::Storage
            )))
        ),
        "sender: {sent:?}"
    );
}

#[tokio::test]
async fn nobody_at_the_address_is_a_connect_error() {
    // Bind and drop a listener: its port is then most likely closed.
    let l = TcpListener::bind(localhost()).await.unwrap();
    let to = l.local_addr().unwrap();
    drop(l);
    let mut cfg = SendConfig::new(to, Bitrate::mbps(10));
    cfg.connect_timeout = Duration::from_secs(5);
    let r = send(&cfg, Pattern::new(0, 10), |_| {}).await;
    assert!(matches!(r, Err(RbudpError::Connect { .. })), "{r:?}");
}
