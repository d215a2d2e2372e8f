//! A [`BulkListener`] over loopback: it takes either mechanism on one
//! port and drops what is neither. Asserts behaviour only, never speed;
//! every wait is bounded.

use std::sync::Arc;

use groupwire_proto::Bitrate;
use groupwire_proto::rbudp::{BlastSource, Pattern, PatternSink};
use groupwire_proto::wire::striped::{Frame, Hello, Repr};
use tokio::io::AsyncWriteExt;

use super::*;
use crate::rbudp::SendConfig;
use crate::striped;

/// Generous for a loaded 2-core machine; a hang still fails.
const LIMIT: Duration = Duration::from_secs(60);

fn localhost() -> SocketAddr {
    "127.0.0.1:0".parse().expect("valid address")
}

fn quick() -> BulkReceiveConfig {
    let mut cfg = BulkReceiveConfig::default();
    cfg.rbudp.start_timeout = Duration::from_millis(300);
    cfg.rbudp.idle_timeout = Duration::from_secs(20);
    cfg.rbudp.accept_timeout = Some(LIMIT);
    cfg.striped = StripedConfig::new().timeout(Duration::from_secs(20));
    cfg
}

async fn listener() -> (Arc<BulkListener>, SocketAddr) {
    let l = BulkListener::bind(localhost()).await.expect("bind");
    let addr = l.local_addr().expect("local addr");
    (Arc::new(l), addr)
}

/// A spawned `receive`: its result and the mechanisms its progress named.
type Receiving =
    tokio::task::JoinHandle<(Result<Received<PatternSink>, BulkError>, Vec<Mechanism>)>;

/// Spawns one `receive` into a [`PatternSink`] of `seed`; with the
/// mechanisms its progress named.
fn spawn_receive(l: &Arc<BulkListener>, seed: u64) -> Receiving {
    let l = Arc::clone(l);
    tokio::spawn(async move {
        let mut seen = Vec::new();
        let r = l
            .receive(&quick(), PatternSink::new(seed), |m, _| {
                if !seen.contains(&m) {
                    seen.push(m);
                }
            })
            .await;
        (r, seen)
    })
}

async fn send_rbudp(to: SocketAddr, pattern: Pattern) -> RbudpReport {
    let cfg = SendConfig::new(to, Bitrate::mbps(200));
    tokio::time::timeout(LIMIT, rbudp::send(&cfg, pattern, |_| {}))
        .await
        .expect("the RBUDP sender ends in time")
        .expect("the RBUDP transfer completes")
}

async fn send_striped(to: SocketAddr, pattern: Pattern, streams: u16) -> StripedReport {
    let cfg = StripedConfig::new()
        .streams(streams)
        .chunk_size(64 * 1024)
        .timeout(Duration::from_secs(20));
    tokio::time::timeout(LIMIT, striped::send(to, pattern, &cfg, |_| {}))
        .await
        .expect("the striped sender ends in time")
        .expect("the striped transfer completes")
}

#[test]
fn first_bytes_tell_the_mechanisms_apart() {
    let hello = Repr {
        session: 7,
        frame: Frame::Hello(Hello {
            size: 1,
            chunk_size: 1,
            index: 0,
            count: 1,
            hash: None,
        }),
    }
    .to_vec();
    assert_eq!(
        Mechanism::from_first_byte(hello[0]),
        Some(Mechanism::Striped)
    );
    // The longest control frame's length prefix.
    let prefix = u32::try_from(MAX_CONTROL_LEN).unwrap().to_be_bytes();
    assert_eq!(
        Mechanism::from_first_byte(prefix[0]),
        Some(Mechanism::Rbudp)
    );
    assert_eq!(Mechanism::from_first_byte(b'G'), None);
    assert_eq!(Mechanism::from_first_byte(0x16), None); // a TLS handshake
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_port_takes_an_rbudp_sender_then_a_striped_sender() {
    let (l, to) = listener().await;

    let recv = spawn_receive(&l, 3);
    let pattern = Pattern::new(3, 2_000_003);
    let sent = send_rbudp(to, pattern).await;
    let (got, seen) = tokio::time::timeout(LIMIT, recv).await.unwrap().unwrap();
    match got.expect("the RBUDP transfer is received") {
        Received::Rbudp(r, sink) => {
            assert_eq!(r.blake3, sent.blake3);
            assert_eq!(sink.written, pattern.len());
            assert!(sink.wrong.is_empty());
        }
        other => panic!("expected RBUDP, got {:?}", other.mechanism()),
    }
    assert_eq!(seen, [Mechanism::Rbudp]);

    let recv = spawn_receive(&l, 4);
    let pattern = Pattern::new(4, 1_500_001);
    let sent = send_striped(to, pattern, 3).await;
    let (got, seen) = tokio::time::timeout(LIMIT, recv).await.unwrap().unwrap();
    match got.expect("the striped transfer is received") {
        Received::Striped(r) => {
            assert_eq!(r.hash, sent.hash);
            assert_eq!(r.hash, pattern.hash());
            assert_eq!(r.streams, 3);
        }
        other => panic!("expected striped, got {:?}", other.mechanism()),
    }
    assert_eq!(seen, [Mechanism::Striped]);
    assert_eq!(l.dropped(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_that_open_no_transfer_are_dropped_and_the_next_sender_is_taken() {
    let (l, to) = listener().await;
    let recv = spawn_receive(&l, 5);
    // Silence (held open past the start timeout).
    let silent = TcpStream::connect(to).await.unwrap();
    // Closed without a byte.
    drop(TcpStream::connect(to).await.unwrap());
    // Another protocol.
    let mut http = TcpStream::connect(to).await.unwrap();
    http.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
    // A first byte of 0 that is no RBUDP Start.
    let mut junk0 = TcpStream::connect(to).await.unwrap();
    junk0
        .write_all(&[0, 0, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8])
        .await
        .unwrap();
    // A first byte of 1 that is no striped Hello.
    let mut junk1 = TcpStream::connect(to).await.unwrap();
    junk1.write_all(&[1; 64]).await.unwrap();

    let pattern = Pattern::new(5, 1_000_000);
    let sent = send_striped(to, pattern, 2).await;
    let (got, _) = tokio::time::timeout(LIMIT, recv).await.unwrap().unwrap();
    match got.expect("the real sender gets its turn") {
        Received::Striped(r) => assert_eq!(r.hash, sent.hash),
        other => panic!("expected striped, got {:?}", other.mechanism()),
    }
    assert_eq!(l.dropped(), 5);

    // And an RBUDP sender after more silence.
    let recv = spawn_receive(&l, 6);
    let silent2 = TcpStream::connect(to).await.unwrap();
    let pattern = Pattern::new(6, 700_000);
    let sent = send_rbudp(to, pattern).await;
    let (got, _) = tokio::time::timeout(LIMIT, recv).await.unwrap().unwrap();
    match got.expect("the real sender gets its turn") {
        Received::Rbudp(r, sink) => {
            assert_eq!(r.blake3, sent.blake3);
            assert!(sink.wrong.is_empty());
        }
        other => panic!("expected RBUDP, got {:?}", other.mechanism()),
    }
    assert_eq!(l.dropped(), 6);
    drop((silent, silent2, http, junk0, junk1));
}

#[tokio::test]
async fn nobody_coming_is_no_sender() {
    let (l, _) = listener().await;
    let mut cfg = quick();
    cfg.rbudp.accept_timeout = Some(Duration::from_millis(200));
    let r = l.receive(&cfg, PatternSink::new(0), |_, _| {}).await;
    assert!(matches!(r, Err(BulkError::NoSender(_))), "{r:?}");
}
