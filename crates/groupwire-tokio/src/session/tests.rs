//! Two sessions on loopback sockets. Every assertion holds on a loaded
//! machine: deadlines are generous and only bound how long a failure
//! takes to show; what is asserted is counted, not timed.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use groupwire_link::{LinkConfig, LossModel};
use tokio::io::AsyncWriteExt;

use super::*;
use crate::emulator::{Emulator, EmulatorConfig};

const LOOPBACK: &str = "127.0.0.1:0";
/// Only bounds how long a failing test takes.
const PATIENCE: Duration = Duration::from_secs(30);

fn opts() -> SessionOptions {
    let mut o = SessionOptions::new().unwrap();
    o.config.handshake_timeout = Duration::from_secs(10);
    o
}

/// What one side received, by channel name: message numbers in arrival
/// order, and how many were rebuilt.
#[derive(Default, Debug)]
struct Got {
    names: BTreeMap<ChannelId, String>,
    msgs: BTreeMap<String, Vec<u32>>,
    recovered: BTreeMap<String, usize>,
    peers: Vec<PeerId>,
}

impl Got {
    fn count(&self, name: &str) -> usize {
        self.msgs.get(name).map_or(0, Vec::len)
    }

    fn take(&mut self, s: &Session, e: Event) {
        match e {
            Event::PeerConnected { peer, .. } => self.peers.push(peer),
            Event::ChannelOpened { channel, name } => {
                self.names.insert(channel, name);
            }
            Event::Message {
                channel,
                payload,
                recovered,
                ..
            } => {
                let name = self
                    .names
                    .entry(channel)
                    .or_insert_with(|| s.channel(channel).unwrap().name().to_owned())
                    .clone();
                let n = u32::from_be_bytes(payload[..4].try_into().unwrap());
                self.msgs.entry(name.clone()).or_default().push(n);
                *self.recovered.entry(name).or_default() += usize::from(recovered);
            }
            _ => {}
        }
    }
}

/// Reads `s`'s events into `got` until `done` says so or [`PATIENCE`]
/// runs out.
async fn read_until(s: &Session, got: &mut Got, done: impl Fn(&Got) -> bool) {
    let _ = tokio::time::timeout(PATIENCE, async {
        while !done(got) {
            match s.next_event().await {
                Some(e) => got.take(s, e),
                None => return,
            }
        }
    })
    .await;
}

/// Reads events into `got` for `d` more.
async fn read_for(s: &Session, got: &mut Got, d: Duration) {
    let _ = tokio::time::timeout(d, async {
        while let Some(e) = s.next_event().await {
            got.take(s, e);
        }
    })
    .await;
}

fn msg(i: u32, len: usize) -> Vec<u8> {
    let mut v = i.to_be_bytes().to_vec();
    v.resize(len.max(4), 0xab);
    v
}

/// Sends `n` messages on each channel, paced so loopback buffers never
/// fill whatever the load.
async fn send_all(chans: &[&Channel], n: u32, len: usize) {
    for i in 0..n {
        for c in chans {
            c.send(msg(i, len)).unwrap();
        }
        if i % 20 == 19 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

fn in_order_once(v: &[u32], n: u32) -> bool {
    v == (0..n).collect::<Vec<_>>()
}

fn each_at_most_once(v: &[u32], n: u32) -> bool {
    let mut s = v.to_vec();
    s.sort_unstable();
    s.dedup();
    s.len() == v.len() && v.iter().all(|&i| i < n)
}

#[tokio::test]
async fn two_sessions_carry_every_kind_of_channel_over_one_socket() {
    let a = Session::bind_with(LOOPBACK, opts()).await.unwrap();
    let b = Session::bind_with(LOOPBACK, opts()).await.unwrap();
    let peer = a.connect(b.local_addr()).await.unwrap();
    assert!(peer.is_connected());
    let pointer = peer
        .channel("telepointer", Qos::awareness().mer_band(0.05, 0.06))
        .unwrap();
    let state = peer
        .channel("state", Qos::low_latency().max_loss(0.001))
        .unwrap();
    let edits = peer.channel("edits", Qos::reliable_ordered()).unwrap();
    assert_eq!(edits.report().unwrap().mechanism, Mechanism::Reliable);
    let n = 300;
    send_all(&[&pointer, &state, &edits], n, 200).await;
    let mut got = Got::default();
    read_until(&b, &mut got, |g| {
        g.count("edits") == n as usize
            && g.count("telepointer") >= n as usize * 95 / 100
            && g.count("state") >= n as usize * 95 / 100
    })
    .await;
    assert!(
        in_order_once(&got.msgs["edits"], n),
        "{:?}",
        got.msgs.get("edits")
    );
    for name in ["telepointer", "state"] {
        let v = &got.msgs[name];
        assert!(each_at_most_once(v, n), "{name}: {v:?}");
        assert!(
            v.len() >= n as usize * 95 / 100,
            "{name}: {} of {n}",
            v.len()
        );
    }
    assert_eq!(got.peers.len(), 1);
    let streams = a.stream_stats();
    assert_eq!(streams.opened, 1, "{streams:?}");
    assert_eq!(b.stream_stats().bound, 1, "{:?}", b.stream_stats());
    assert_eq!(a.stats().malformed + b.stats().malformed, 0);
    a.close().await.unwrap();
    b.close().await.unwrap();
}

/// A bulk transfer and edits share the peer's stream through the
/// session's stream window (this driver reports what its connections
/// send): sent without pause, every message still arrives once, the edits
/// in order, and nothing is dropped or left waiting.
#[tokio::test]
async fn a_bulk_transfer_and_edits_share_the_stream_window_and_all_arrive() {
    let a = Session::bind_with(LOOPBACK, opts()).await.unwrap();
    let b = Session::bind_with(LOOPBACK, opts()).await.unwrap();
    let peer = a.connect(b.local_addr()).await.unwrap();
    let bulk = peer.channel("bulk", Qos::bulk()).unwrap();
    let edits = peer.channel("edits", Qos::reliable_ordered()).unwrap();
    assert_eq!(bulk.report().unwrap().mechanism, Mechanism::Reliable);
    let (nb, ne) = (256u32, 32u32);
    for i in 0..nb {
        bulk.send(msg(i, 16 * 1024)).unwrap();
        if i % 8 == 7 {
            edits.send(msg(i / 8, 300)).unwrap();
        }
    }
    let mut got = Got::default();
    read_until(&b, &mut got, |g| {
        g.count("bulk") == nb as usize && g.count("edits") == ne as usize
    })
    .await;
    assert!(
        in_order_once(&got.msgs["edits"], ne),
        "{:?}",
        got.msgs.get("edits")
    );
    let v = &got.msgs["bulk"];
    assert!(
        each_at_most_once(v, nb) && v.len() == nb as usize,
        "{} of {nb}",
        v.len()
    );
    assert_eq!(a.stream_stats().frames_dropped, 0, "{:?}", a.stream_stats());
    assert_eq!(a.stream_stats().frames_sent, u64::from(nb + ne));
    a.close().await.unwrap();
    b.close().await.unwrap();
}

#[tokio::test]
async fn the_accepting_side_sends_reliable_messages_back_on_the_dialers_connection() {
    let a = Session::bind_with(LOOPBACK, opts()).await.unwrap();
    let b = Session::bind_with(LOOPBACK, opts()).await.unwrap();
    let _peer = a.connect(b.local_addr()).await.unwrap();
    // B learns of A from its event, and replies first on a channel of its
    // own; A never sends a reliable frame.
    let mut got_b = Got::default();
    read_until(&b, &mut got_b, |g| !g.peers.is_empty()).await;
    let to_a = b.peer(got_b.peers[0]).expect("connected");
    let replies = to_a.channel("replies", Qos::reliable_ordered()).unwrap();
    let n = 500;
    send_all(&[&replies], n, 1000).await;
    let mut got_a = Got::default();
    read_until(&a, &mut got_a, |g| g.count("replies") == n as usize).await;
    assert!(in_order_once(&got_a.msgs["replies"], n));
    assert_eq!(a.stream_stats().opened, 1);
    assert_eq!(b.stream_stats().opened, 0, "B never dials");
}

/// A bulk channel striped over 4 streams (Leigh et al. §4.3) from the
/// side that dialed, and over 3 from the side that did not, under a key:
/// the dialer opens a connection per stream, the other side asks it for
/// the ones it needs, and every message arrives exactly once.
#[tokio::test]
async fn a_striped_channel_opens_its_streams_from_either_side_and_loses_nothing() {
    let keyed = || opts().key(b"0123456789abcdef0123456789abcdef").unwrap();
    let a = Session::bind_with(LOOPBACK, keyed()).await.unwrap();
    let b = Session::bind_with(LOOPBACK, keyed()).await.unwrap();
    let peer = a.connect(b.local_addr()).await.unwrap();
    let mut got_b = Got::default();
    read_until(&b, &mut got_b, |g| !g.peers.is_empty()).await;
    let to_a = b.peer(got_b.peers[0]).expect("connected");
    let out = peer.channel("dataset", Qos::bulk()).unwrap();
    out.set_mechanism(Mechanism::Striped { streams: 4 })
        .unwrap();
    let back = to_a.channel("results", Qos::bulk()).unwrap();
    back.set_mechanism(Mechanism::Striped { streams: 3 })
        .unwrap();
    let n = 400u32;
    send_all(&[&out, &back], n, 8 * 1024).await;
    let (mut got_a, mut got_b2) = (Got::default(), Got::default());
    let (ra, rb) = tokio::join!(
        read_until(&a, &mut got_a, |g| g.count("results") == n as usize),
        read_until(&b, &mut got_b2, |g| g.count("dataset") == n as usize),
    );
    let _ = (ra, rb);
    for (name, got) in [("dataset", &got_b2), ("results", &got_a)] {
        let v = got.msgs.get(name).cloned().unwrap_or_default();
        assert!(
            each_at_most_once(&v, n) && v.len() == n as usize,
            "{name}: {} of {n}",
            v.len()
        );
    }
    // A dialed the four streams (B's three are among them); B dialed none.
    assert_eq!(a.stream_stats().opened, 4, "{:?}", a.stream_stats());
    assert_eq!(b.stream_stats().opened, 0, "{:?}", b.stream_stats());
    assert_eq!(b.stream_stats().bound, 4, "{:?}", b.stream_stats());
    for s in [a.stream_stats(), b.stream_stats()] {
        assert_eq!(s.frames_dropped, 0, "{s:?}");
    }
    assert_eq!(a.stats().bad_frames + b.stats().bad_frames, 0);
    a.close().await.unwrap();
    b.close().await.unwrap();
}

#[tokio::test]
async fn two_sessions_that_connect_to_each_other_at_once_share_one_handshake_and_one_stream() {
    let a = Session::bind_with(LOOPBACK, opts()).await.unwrap();
    let b = Session::bind_with(LOOPBACK, opts()).await.unwrap();
    let (pb, pa) = tokio::join!(a.connect(b.local_addr()), b.connect(a.local_addr()));
    let (pb, pa) = (pb.unwrap(), pa.unwrap());
    let to_b = pb.channel("edits", Qos::reliable_ordered()).unwrap();
    let to_a = pa.channel("replies", Qos::reliable_ordered()).unwrap();
    let n = 200;
    send_all(&[&to_b], n, 1000).await;
    send_all(&[&to_a], n, 1000).await;
    let (mut got_a, mut got_b) = (Got::default(), Got::default());
    read_until(&b, &mut got_b, |g| g.count("edits") == n as usize).await;
    read_until(&a, &mut got_a, |g| g.count("replies") == n as usize).await;
    assert!(in_order_once(&got_b.msgs["edits"], n));
    assert!(in_order_once(&got_a.msgs["replies"], n));
    // One side's Hello made the handshake, and only that side dialed.
    let opened = (a.stream_stats().opened, b.stream_stats().opened);
    assert!(matches!(opened, (1, 0) | (0, 1)), "{opened:?}");
}

#[tokio::test]
async fn a_channel_the_peer_opened_can_be_taken_over_with_a_qos() {
    let a = Session::bind_with(LOOPBACK, opts()).await.unwrap();
    let b = Session::bind_with(LOOPBACK, opts()).await.unwrap();
    let peer = a.connect(b.local_addr()).await.unwrap();
    let chat = peer.channel("chat", Qos::reliable_ordered()).unwrap();
    chat.send(msg(0, 8)).unwrap();
    let mut got_b = Got::default();
    read_until(&b, &mut got_b, |g| g.count("chat") == 1).await;
    let to_a = b.peer(got_b.peers[0]).unwrap();
    // B answers on "chat" too: the peer's channel, now with B's QoS.
    let back = to_a.channel("chat", Qos::reliable_ordered()).unwrap();
    assert_eq!(back.report().unwrap().mechanism, Mechanism::Reliable);
    back.send(msg(7, 8)).unwrap();
    let mut got_a = Got::default();
    read_until(&a, &mut got_a, |g| g.count("chat") == 1).await;
    assert_eq!(got_a.msgs["chat"], vec![7]);
    assert!(matches!(
        to_a.channel("chat", Qos::low_latency()),
        Err(SessionError::NameTaken(_))
    ));
}

#[tokio::test]
async fn without_the_key_there_is_no_session() {
    let mut o = opts().key(b"0123456789abcdef0123").unwrap();
    o.config.handshake_timeout = Duration::from_secs(2);
    let a = Session::bind_with(LOOPBACK, o).await.unwrap();
    let b = Session::bind_with(LOOPBACK, opts().key(b"another key, 20 bytes").unwrap())
        .await
        .unwrap();
    let err = a.connect(b.local_addr()).await.unwrap_err();
    assert!(matches!(err, ConnectError::NoAnswer(_)), "{err}");
    assert!(b.stats().unauthenticated > 0);
    assert!(opts().key(b"short").is_err());
    // With the same key on both sides it works, reliable frames included.
    let k = b"the same key on both sides";
    let a = Session::bind_with(LOOPBACK, opts().key(k).unwrap())
        .await
        .unwrap();
    let b = Session::bind_with(LOOPBACK, opts().key(k).unwrap())
        .await
        .unwrap();
    let peer = a.connect(b.local_addr()).await.unwrap();
    let edits = peer.channel("edits", Qos::reliable_ordered()).unwrap();
    let state = peer.channel("state", Qos::low_latency()).unwrap();
    send_all(&[&edits, &state], 50, 100).await;
    let mut got = Got::default();
    read_until(&b, &mut got, |g| {
        g.count("edits") == 50 && g.count("state") >= 45
    })
    .await;
    assert!(in_order_once(&got.msgs["edits"], 50));
}

#[tokio::test]
async fn strangers_on_the_stream_port_are_closed_and_bounded() {
    let mut o = opts();
    o.config.handshake_timeout = Duration::from_millis(500);
    o.max_unbound_streams = 4;
    let b = Session::bind_with(LOOPBACK, o).await.unwrap();
    let addr = b.local_addr();
    // A frame that does not open, a length over the limit, and silence.
    let mut garbage = tokio::net::TcpStream::connect(addr).await.unwrap();
    garbage.write_all(&[0, 0, 0, 12]).await.unwrap();
    garbage.write_all(&[1; 12]).await.unwrap();
    let mut huge = tokio::net::TcpStream::connect(addr).await.unwrap();
    huge.write_all(&u32::MAX.to_be_bytes()).await.unwrap();
    let mut silent = Vec::new();
    for _ in 0..10 {
        silent.push(tokio::net::TcpStream::connect(addr).await.unwrap());
    }
    // Every one is closed: refused (garbage, shed, silent) or failed (huge).
    let _ = tokio::time::timeout(PATIENCE, async {
        loop {
            let s = b.stream_stats();
            if s.accepted == 12 && s.refused + s.failed >= 12 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let s = b.stream_stats();
    assert_eq!(s.accepted, 12, "{s:?}");
    assert!(s.refused + s.failed >= 12, "{s:?}");
    assert_eq!(s.bound, 0);
    assert_eq!(b.stats().frames, 1, "only the garbage frame was read whole");
    assert_eq!(b.stats().bad_frames, 1);
}

/// Sessions A and B, with A's datagrams to B through an emulator that
/// loses a share `loss` of them (seeded), and its stream straight to B or,
/// with `tcp`, through the emulator's TCP relay and the same lossy link;
/// the emulator runs until stopped, which returns its stats.
async fn through_lossy_emulator(
    loss: f64,
    seed: u64,
    tcp: bool,
) -> (Session, Session, Peer, crate::emulator::RunningEmulator) {
    let b = Session::bind_with(LOOPBACK, opts()).await.unwrap();
    let loss = LossModel::Bernoulli {
        p: groupwire_proto::Probability::new(loss).unwrap(),
    };
    let emu = Emulator::bind(
        EmulatorConfig::new(LOOPBACK.parse().unwrap(), b.local_addr())
            .forward_link(LinkConfig::new().loss(loss).seed(seed))
            .tcp(tcp),
    )
    .await
    .unwrap();
    let emu = emu.spawn().unwrap();
    let emu_addr = emu.local_addr();
    let a = Session::bind_with(LOOPBACK, opts()).await.unwrap();
    let stream = if tcp { emu_addr } else { b.local_addr() };
    let peer = a.connect_with_stream(emu_addr, stream).await.unwrap();
    (a, b, peer, emu)
}

#[tokio::test]
async fn through_a_lossy_emulated_path_fec_channels_rebuild_what_plain_loses() {
    let (a, b, peer, emu) = through_lossy_emulator(0.1, 7, false).await;
    let plain = peer.channel("plain", Qos::low_latency()).unwrap();
    let xor = peer.channel("xor", Qos::low_latency()).unwrap();
    let edits = peer.channel("edits", Qos::reliable_ordered()).unwrap();
    plain.set_mechanism(Mechanism::Plain).unwrap();
    xor.set_mechanism(Mechanism::Xor(groupwire_proto::xor::XorLayout::row(2)))
        .unwrap();
    let n = 1000;
    send_all(&[&plain, &xor, &edits], n, 100).await;
    let mut got = Got::default();
    read_until(&b, &mut got, |g| g.count("edits") == n as usize).await;
    // Let the last repairs land.
    read_for(&b, &mut got, Duration::from_millis(500)).await;
    assert!(
        in_order_once(&got.msgs["edits"], n),
        "the stream bypasses the emulator: {} edits, {:?} / {:?}, {:?}",
        got.count("edits"),
        a.stream_stats(),
        b.stream_stats(),
        b.stats()
    );
    let (p, x) = (got.count("plain"), got.count("xor"));
    assert!(each_at_most_once(&got.msgs["plain"], n));
    assert!(each_at_most_once(&got.msgs["xor"], n));
    assert!(p < n as usize, "10% loss took nothing from plain ({p})");
    assert!(got.recovered["xor"] > 0, "xor rebuilt nothing");
    assert!(x > p, "xor delivered {x}, plain {p}");
    let stats = emu.stop().await.unwrap();
    assert!(stats.forward.lost > 0);
}

#[tokio::test]
async fn through_a_lossy_emulated_path_the_stream_crosses_it_too_and_loses_nothing() {
    let (_a, b, peer, emu) = through_lossy_emulator(0.1, 11, true).await;
    let edits = peer.channel("edits", Qos::reliable_ordered()).unwrap();
    let pointer = peer.channel("pointer", Qos::low_latency()).unwrap();
    let n = 500;
    send_all(&[&edits, &pointer], n, 1000).await;
    let mut got = Got::default();
    read_until(&b, &mut got, |g| g.count("edits") == n as usize).await;
    assert!(
        in_order_once(&got.msgs["edits"], n),
        "{}",
        got.count("edits")
    );
    let stats = emu.stop().await.unwrap();
    assert_eq!(stats.tcp.accepted, 1, "{:?}", stats.tcp);
    // 500 KB of edits at 10% loss: the stream's segments were lost too,
    // and went again.
    assert!(stats.tcp.forward_resent > 0, "{:?}", stats.tcp);
}

/// A striped channel through the emulator's TCP relay: each of its
/// streams is its own relayed connection across the lossy path, and
/// every message arrives once.
#[tokio::test]
async fn through_a_lossy_emulated_path_a_striped_channel_crosses_it_on_its_own_connections() {
    let (_a, b, peer, emu) = through_lossy_emulator(0.05, 13, true).await;
    let data = peer.channel("dataset", Qos::bulk()).unwrap();
    data.set_mechanism(Mechanism::Striped { streams: 3 })
        .unwrap();
    let n = 200;
    send_all(&[&data], n, 2000).await;
    let mut got = Got::default();
    read_until(&b, &mut got, |g| g.count("dataset") == n as usize).await;
    let v = got.msgs.get("dataset").cloned().unwrap_or_default();
    assert!(
        each_at_most_once(&v, n) && v.len() == n as usize,
        "{} of {n}",
        v.len()
    );
    let stats = emu.stop().await.unwrap();
    assert_eq!(stats.tcp.accepted, 3, "{:?}", stats.tcp);
    assert_eq!(stats.tcp.failed, 0, "{:?}", stats.tcp);
}

#[tokio::test]
async fn through_a_lossy_emulated_path_blast_delivers_each_dataset_whole() {
    let (a, b, peer, emu) = through_lossy_emulator(0.1, 5, false).await;
    let qos = Qos::bulk().rate(groupwire_proto::Bitrate::mbps(40));
    let data = peer.channel("dataset", qos).unwrap();
    data.set_mechanism(Mechanism::Blast).unwrap();
    let sets: Vec<Vec<u8>> = (0..3u32)
        .map(|i| {
            let mut v = vec![0u8; 700_000 + i as usize * 1001];
            for (j, x) in v.iter_mut().enumerate() {
                *x = (j as u32)
                    .wrapping_mul(2_654_435_761)
                    .wrapping_add(i)
                    .to_be_bytes()[0];
            }
            v
        })
        .collect();
    for d in &sets {
        data.send(d).unwrap();
    }
    let mut got = Vec::new();
    let _ = tokio::time::timeout(PATIENCE, async {
        while got.len() < sets.len() {
            match b.next_event().await {
                Some(Event::Message { payload, via, .. }) => got.push((payload, via)),
                Some(_) => {}
                None => return,
            }
        }
    })
    .await;
    assert_eq!(got.len(), sets.len(), "{:?} / {:?}", a.stats(), b.stats());
    for ((g, via), d) in got.iter().zip(&sets) {
        assert_eq!(*via, MechanismKind::Blast);
        assert!(g[..] == d[..], "a dataset arrived changed or out of order");
    }
    assert_eq!(data.report().unwrap().stats.failed, 0);
    let stats = emu.stop().await.unwrap();
    assert!(
        stats.forward.lost > 0,
        "the path lost nothing: nothing resent"
    );
}

/// Writes `len` reproducible bytes to `dir/name`.
fn some_file(dir: &std::path::Path, name: &str, len: usize) -> std::path::PathBuf {
    let mut v = vec![0u8; len];
    blake3::Hasher::new()
        .update(name.as_bytes())
        .finalize_xof()
        .fill(&mut v);
    let path = dir.join(name);
    std::fs::write(&path, &v).unwrap();
    path
}

/// Reads `s`'s messages into `rx` until a file is done or fails; the
/// other messages, in order.
async fn receive_file(s: &Session, rx: &mut FileReceiver) -> (Option<FileEvent>, Vec<Bytes>) {
    let mut other = Vec::new();
    let end = tokio::time::timeout(PATIENCE, async {
        while let Some(e) = s.next_event().await {
            if let Event::Message {
                channel, payload, ..
            } = e
            {
                match rx.take(channel, &payload) {
                    None => other.push(payload),
                    Some(ev @ (FileEvent::Done { .. } | FileEvent::Failed { .. })) => {
                        return Some(ev);
                    }
                    Some(_) => {}
                }
            }
        }
        None
    })
    .await;
    (end.ok().flatten(), other)
}

#[tokio::test]
async fn a_file_on_a_bulk_channel_arrives_whole_beside_the_channels_own_messages() {
    let dir = tempfile::tempdir().unwrap();
    let (out, inbox) = (dir.path().join("out"), dir.path().join("in"));
    std::fs::create_dir_all(&out).unwrap();
    std::fs::create_dir_all(&inbox).unwrap();
    let path = some_file(&out, "model.bin", 3 * RELIABLE_CHUNK + 12_345);
    let a = Session::bind_with(LOOPBACK, opts()).await.unwrap();
    let b = Session::bind_with(LOOPBACK, opts()).await.unwrap();
    let peer = a.connect(b.local_addr()).await.unwrap();
    let bulk = peer.channel("dataset", Qos::bulk()).unwrap();
    bulk.send(b"before").unwrap();
    let sent = bulk.send_file(&path).await.unwrap();
    let mut rx = FileReceiver::new(&inbox);
    let (end, other) = receive_file(&b, &mut rx).await;
    let Some(FileEvent::Done {
        path: got, size, ..
    }) = end
    else {
        panic!("{end:?}");
    };
    assert_eq!(size, sent.size);
    assert_eq!(got, inbox.join("model.bin"));
    assert_eq!(std::fs::read(&got).unwrap(), std::fs::read(&path).unwrap());
    assert_eq!(other, vec![Bytes::from_static(b"before")]);
    // Nothing else left in the directory.
    assert_eq!(std::fs::read_dir(&inbox).unwrap().count(), 1);
    // A datagram channel cannot carry one.
    let lossy = peer.channel("pointer", Qos::awareness()).unwrap();
    assert!(matches!(
        lossy.send_file(&path).await,
        Err(FileError::Unreliable)
    ));
}

#[tokio::test]
async fn through_a_lossy_emulated_path_a_file_on_blast_arrives_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = some_file(dir.path(), "scan.raw", 2 * BLAST_CHUNK + 777);
    let inbox = dir.path().join("in");
    std::fs::create_dir_all(&inbox).unwrap();
    let (a, b, peer, emu) = through_lossy_emulator(0.1, 9, false).await;
    let data = peer
        .channel(
            "dataset",
            Qos::bulk().rate(groupwire_proto::Bitrate::mbps(40)),
        )
        .unwrap();
    data.set_mechanism(Mechanism::Blast).unwrap();
    let send = data.send_file(&path);
    let mut rx = FileReceiver::new(&inbox);
    let (sent, (end, _)) = tokio::join!(send, receive_file(&b, &mut rx));
    sent.unwrap();
    let Some(FileEvent::Done { path: got, .. }) = end else {
        panic!("{end:?} / {:?}", a.stats());
    };
    assert_eq!(std::fs::read(got).unwrap(), std::fs::read(&path).unwrap());
    assert!(emu.stop().await.unwrap().forward.lost > 0);
}

#[test]
fn a_hostile_senders_files_stay_inside_the_directory_and_the_bounds() {
    let dir = tempfile::tempdir().unwrap();
    let inbox = dir.path().join("in");
    std::fs::create_dir_all(&inbox).unwrap();
    let mut rx = FileReceiver::new(&inbox);
    rx.max_size = 1000;
    rx.max_files = 1;
    let ch = ChannelId {
        peer: PeerId(1),
        id: 0,
    };
    let msg = |kind: u8, id: u32, body: &[u8]| {
        [&FILE_MAGIC[..], &[kind], &id.to_be_bytes(), body].concat()
    };
    let offer = |id: u32, size: u64, name: &str| {
        let body = [
            &size.to_be_bytes()[..],
            &[name.len() as u8],
            name.as_bytes(),
        ]
        .concat();
        msg(b'O', id, &body)
    };
    let failed = |e: Option<FileEvent>| matches!(e, Some(FileEvent::Failed { .. }));
    assert!(failed(rx.take(ch, &offer(1, 10, "../escape"))));
    assert!(failed(rx.take(ch, &offer(2, 10, "a/b"))));
    assert!(failed(rx.take(ch, &offer(3, 1001, "big"))));
    assert!(matches!(
        rx.take(ch, &offer(4, 10, "ok")),
        Some(FileEvent::Offered { .. })
    ));
    assert!(
        failed(rx.take(ch, &offer(5, 10, "second"))),
        "one at a time"
    );
    // A chunk past the offered size fails the file, and its part goes.
    let chunk = [&5u64.to_be_bytes()[..], &[0u8; 6]].concat();
    assert!(failed(rx.take(ch, &msg(b'C', 4, &chunk))));
    assert!(
        rx.take(ch, &msg(b'E', 4, &[0; 32])).is_none(),
        "over: ignored"
    );
    // A wrong hash fails it too.
    assert!(matches!(
        rx.take(ch, &offer(6, 3, "h")),
        Some(FileEvent::Offered { .. })
    ));
    let chunk = [&0u64.to_be_bytes()[..], b"abc"].concat();
    assert!(matches!(
        rx.take(ch, &msg(b'C', 6, &chunk)),
        Some(FileEvent::Progress { .. })
    ));
    assert!(matches!(
        rx.take(ch, &msg(b'E', 6, &[0; 32])),
        Some(FileEvent::Failed {
            error: FileError::HashMismatch,
            ..
        })
    ));
    // Garbage and the application's own messages are not file messages.
    assert!(rx.take(ch, b"gwF").is_none());
    assert!(rx.take(ch, b"hello, world").is_none());
    assert_eq!(
        std::fs::read_dir(&inbox).unwrap().count(),
        0,
        "nothing left"
    );
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

/// A UDP hop between two sessions that forwards both ways and records the
/// traffic class (TOS byte) of every datagram from the first sender.
#[cfg(target_os = "linux")]
mod tap {
    use std::collections::BTreeSet;
    use std::mem::MaybeUninit;
    use std::net::SocketAddr;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use socket2::{Domain, MaybeUninitSlice, MsgHdrMut, SockAddr, Socket, Type};

    pub(super) struct Tap {
        pub(super) addr: SocketAddr,
        pub(super) seen: Arc<Mutex<BTreeSet<u8>>>,
        stop: Arc<AtomicBool>,
        task: tokio::task::JoinHandle<()>,
    }

    /// The TOS byte in a control buffer (`IP_TOS` at level `IPPROTO_IP`):
    /// `cmsghdr` is a `usize` length, two `i32`s, then the data.
    fn tos(ctrl: &[u8]) -> Option<u8> {
        let mut at = 0;
        let hdr = std::mem::size_of::<usize>() + 8;
        while at + hdr <= ctrl.len() {
            let len = usize::from_ne_bytes(ctrl[at..at + 8].try_into().ok()?);
            let level = i32::from_ne_bytes(ctrl[at + 8..at + 12].try_into().ok()?);
            let kind = i32::from_ne_bytes(ctrl[at + 12..at + 16].try_into().ok()?);
            if level == 0 && kind == 1 {
                return ctrl.get(at + hdr).copied();
            }
            if len < hdr {
                return None;
            }
            at += len.next_multiple_of(8);
        }
        None
    }

    impl Tap {
        pub(super) fn start(to: SocketAddr) -> Self {
            let sock = Socket::new(Domain::IPV4, Type::DGRAM, None).unwrap();
            sock.bind(&SockAddr::from(SocketAddr::from(([127, 0, 0, 1], 0))))
                .unwrap();
            sock.set_recv_tos_v4(true).unwrap();
            sock.set_read_timeout(Some(Duration::from_millis(20)))
                .unwrap();
            let addr = sock.local_addr().unwrap().as_socket().unwrap();
            let seen = Arc::new(Mutex::new(BTreeSet::new()));
            let stop = Arc::new(AtomicBool::new(false));
            let (s, st) = (Arc::clone(&seen), Arc::clone(&stop));
            let task = tokio::task::spawn_blocking(move || {
                let mut from_a: Option<SocketAddr> = None;
                let mut buf = [MaybeUninit::new(0u8); 2048];
                let mut ctrl = [MaybeUninit::new(0u8); 128];
                while !st.load(Ordering::Relaxed) {
                    let mut src = SockAddr::from(addr);
                    let mut bufs = [MaybeUninitSlice::new(&mut buf)];
                    let mut msg = MsgHdrMut::new()
                        .with_addr(&mut src)
                        .with_buffers(&mut bufs)
                        .with_control(&mut ctrl);
                    let Ok(n) = sock.recvmsg(&mut msg, 0) else {
                        continue;
                    };
                    let clen = msg.control_len();
                    #[expect(
                        unsafe_code,
                        reason = "both buffers were initialised (zeroed) before recvmsg wrote into them"
                    )]
                    let (data, c): (Vec<u8>, Vec<u8>) = unsafe {
                        (
                            buf[..n].iter().map(|b| b.assume_init()).collect(),
                            ctrl[..clen].iter().map(|b| b.assume_init()).collect(),
                        )
                    };
                    let src = src.as_socket().unwrap();
                    let dst = if src == to {
                        from_a
                    } else {
                        from_a = Some(src);
                        if let Some(t) = tos(&c) {
                            s.lock().unwrap().insert(t);
                        }
                        Some(to)
                    };
                    if let Some(d) = dst {
                        let _ = sock.send_to(&data, &SockAddr::from(d));
                    }
                }
            });
            Self {
                addr,
                seen,
                stop,
                task,
            }
        }

        pub(super) async fn stop(self) -> BTreeSet<u8> {
            self.stop.store(true, Ordering::Relaxed);
            self.task.await.unwrap();
            self.seen.lock().unwrap().clone()
        }
    }
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn each_channels_datagrams_leave_with_its_traffic_class() {
    for mark in [true, false] {
        let b = Session::bind_with(LOOPBACK, opts()).await.unwrap();
        let tap = tap::Tap::start(b.local_addr());
        let mut o = opts();
        o.mark_dscp = mark;
        let a = Session::bind_with(LOOPBACK, o).await.unwrap();
        let peer = a
            .connect_with_stream(tap.addr, b.local_addr())
            .await
            .unwrap();
        let pointer = peer.channel("pointer", Qos::awareness()).unwrap();
        let camera = peer.channel("camera", Qos::stream()).unwrap();
        for c in [&pointer, &camera] {
            c.set_mechanism(Mechanism::Plain).unwrap();
        }
        send_all(&[&pointer, &camera], 50, 100).await;
        let mut got = Got::default();
        read_until(&b, &mut got, |g| {
            g.count("pointer") >= 45 && g.count("camera") >= 45
        })
        .await;
        let seen = tap.stop().await;
        let (ef, af41) = (
            groupwire_proto::session::Dscp::EF,
            groupwire_proto::session::Dscp::AF41,
        );
        if mark {
            assert!(seen.contains(&ef.tos()), "{seen:?}");
            assert!(seen.contains(&af41.tos()), "{seen:?}");
            assert!(seen.contains(&0), "control goes unmarked: {seen:?}");
        } else {
            assert_eq!(seen.into_iter().collect::<Vec<_>>(), vec![0]);
        }
    }
}
