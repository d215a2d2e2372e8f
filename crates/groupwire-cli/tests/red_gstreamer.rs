//! groupwire's AFEC speaks RFC 2198 (RED) with stock GStreamer, both ways,
//! through `groupwire emulate` with seeded loss:
//!
//! - `groupwire awareness send --framing red --protocol fec-3` streams
//!   telepointer messages that GStreamer's `rtpreddec` recovers from the
//!   redundant blocks where the link lost the packet that carried them new;
//! - GStreamer's `rtpredenc` protects a stream that groupwire's AFEC
//!   endpoint, reading RTP/RED, recovers.
//!
//! Every message handed out must be the one sent. The tests count over
//! what was actually sent and lost (a tap records what crossed the link),
//! never over time, so a loaded machine changes the numbers, not the
//! verdict. GStreamer is installed by `scripts/gstreamer.sh`; where it
//! cannot be, the tests say so and skip.

#![expect(
    clippy::disallowed_methods,
    reason = "real processes and sockets, timed by the wall clock; reader threads"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::net::{SocketAddr, UdpSocket};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use groupwire_proto::afec::{AfecConfig, AfecEndpoint, AfecEvent, Mode};
use groupwire_proto::wire::red;
use groupwire_proto::wire::rtp::RtpHeader;
use groupwire_proto::{Instant as Now, Machine};

mod common;

use common::gst::{Pipeline, bind, free_port, gst_launch};

/// RED and message payload types (the CLI's defaults).
const RED_PT: u8 = 100;
const MSG_PT: u8 = 101;

fn local(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// Every datagram `sock` receives, each passed to `each` first, until it
/// has been quiet for `quiet` after `done` is set.
fn drain_until(
    sock: &UdpSocket,
    quiet: Duration,
    done: &AtomicBool,
    mut each: impl FnMut(&[u8]),
) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let mut buf = vec![0u8; 65536];
    let mut last = Instant::now();
    while !done.load(Ordering::Relaxed) || last.elapsed() < quiet {
        if let Ok(n) = sock.recv(&mut buf) {
            each(&buf[..n]);
            got.push(buf[..n].to_vec());
            last = Instant::now();
        }
    }
    got
}

/// A `groupwire emulate` process, killed when dropped (even by a failing
/// assertion), so none outlives its test.
struct Emulator(common::Proc);

impl Emulator {
    fn listen(&self) -> SocketAddr {
        self.0.addr("listen")
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        self.0.child.kill().ok();
        self.0.child.wait().ok();
    }
}

/// `groupwire emulate` in front of `target`, losing 10% of what clients
/// send, from a seeded Bernoulli process.
fn emulate(target: SocketAddr, seed: u64) -> Emulator {
    let seed = seed.to_string();
    let args = [
        "--loss",
        "bernoulli:0.1",
        "--seed",
        &seed,
        "--duration",
        "90s",
        "--quiet",
    ];
    Emulator(common::emulate_to(target, &args))
}

/// Until `out` hears from the pipeline, a one-byte datagram (not RTP, so
/// `rtpreddec` passes it through without touching its history) to `port`.
fn wait_until_playing(port: u16, out: &UdpSocket) {
    let tx = bind();
    let start = Instant::now();
    let mut buf = [0u8; 2048];
    loop {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "GStreamer never passed a packet"
        );
        tx.send_to(&[0], local(port)).unwrap();
        if out.recv(&mut buf).is_ok() {
            break;
        }
    }
    // Let the warm-up datagrams still in flight come out.
    let quiet = AtomicBool::new(true);
    drain_until(out, Duration::from_millis(300), &quiet, |_| {});
}

/// Messages the sender streams: one every 10 ms (a whole number of the
/// 1 kHz RTP clock's ticks, which `rtpreddec`'s timestamp interpolation
/// needs), 40 bytes each.
const MESSAGES: usize = 400;
const SIZE: usize = 40;

#[test]
fn gstreamer_rtpreddec_recovers_messages_groupwire_sent_as_red() {
    let Some(gst) = gst_launch() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (_gst, gst_port, out) = Pipeline::udp_to_socket(
        &gst,
        &format!(
            "application/x-rtp,media=application,clock-rate=1000,encoding-name=RED,payload={RED_PT}"
        ),
        &format!("rtpreddec pt={RED_PT}"),
    );
    wait_until_playing(gst_port, &out);

    // What GStreamer hands out, read while the stream runs.
    let done = Arc::new(AtomicBool::new(false));
    let reader = std::thread::spawn({
        let done = Arc::clone(&done);
        move || drain_until(&out, Duration::from_secs(2), &done, |_| {})
    });
    // The tap: what crossed the emulated link, forwarded to GStreamer.
    let tap = bind();
    let tap_addr = tap.local_addr().unwrap();
    let tapper = std::thread::spawn({
        let done = Arc::clone(&done);
        move || {
            let fwd = bind();
            drain_until(&tap, Duration::from_secs(1), &done, |p| {
                fwd.send_to(p, local(gst_port)).ok();
            })
        }
    });
    let emu = emulate(tap_addr, 7);

    let trace = dir.path().join("steady.csv");
    let mut f = std::fs::File::create(&trace).unwrap();
    for i in 0..MESSAGES {
        writeln!(f, "{:.3},{SIZE}", i as f64 * 0.010).unwrap();
    }
    drop(f);
    let sender = Command::new(env!("CARGO_BIN_EXE_groupwire"))
        .args(["awareness", "send", "--to"])
        .arg(emu.listen().to_string())
        .args(["--protocol", "fec-3", "--framing", "red", "--quiet"])
        .args(["--duration", "10s", "--trace"])
        .arg(&trace)
        .output()
        .expect("the sender runs");
    let summary = String::from_utf8_lossy(&sender.stdout);
    assert!(
        sender.status.success(),
        "sender: {summary}{}",
        String::from_utf8_lossy(&sender.stderr)
    );
    done.store(true, Ordering::Relaxed);
    let crossed = tapper.join().expect("tap");
    let handed_out = reader.join().expect("reader");

    // What crossed the link: each message's RTP timestamp and bytes, by
    // sequence number (one per message), from primaries and redundant
    // blocks alike.
    let mut primaries: BTreeMap<u16, (u32, Vec<u8>)> = BTreeMap::new();
    let mut carried: BTreeMap<u32, Vec<u8>> = BTreeMap::new();
    for p in &crossed {
        let (h, body) = RtpHeader::parse(p).expect("the sender sends RTP");
        assert_eq!(h.payload_type, RED_PT);
        let r = red::Repr::parse(body).expect("RFC 2198");
        for b in &r.redundant {
            assert_eq!(b.payload_type, MSG_PT);
            carried.insert(h.timestamp - u32::from(b.timestamp_offset), b.data.to_vec());
        }
        primaries.insert(h.seq, (h.timestamp, r.primary.data.to_vec()));
        carried.insert(h.timestamp, r.primary.data.to_vec());
    }
    let (&first, &(ts_first, _)) = primaries.first_key_value().expect("packets crossed");
    let ts0 = ts_first - 10 * u32::from(first);
    // Timestamps follow the schedule: 10 ticks of 1 kHz per message.
    for (&seq, (ts, _)) in &primaries {
        assert_eq!(*ts, ts0 + 10 * u32::from(seq), "seq {seq}");
    }
    let sent = MESSAGES as u16;
    let lost: Vec<u16> = (0..sent).filter(|s| !primaries.contains_key(s)).collect();
    let ts_of = |s: u16| ts0 + 10 * u32::from(s);
    let lost_but_carried: Vec<u16> = lost
        .iter()
        .copied()
        .filter(|&s| carried.contains_key(&ts_of(s)))
        .collect();

    // What GStreamer handed out: primaries as they came, and messages it
    // rebuilt from redundant blocks under the sequence numbers it
    // inferred from their timestamps.
    let mut recovered = BTreeSet::new();
    for p in &handed_out {
        let (h, body) = RtpHeader::parse(p).expect("rtpreddec sends RTP");
        let payload = h.payload(body).unwrap();
        assert_eq!(h.payload_type, MSG_PT, "the primary's and blocks' PT");
        assert!(h.seq < sent, "seq {}", h.seq);
        assert_eq!(h.timestamp, ts_of(h.seq), "seq {} at its timestamp", h.seq);
        let want = carried
            .get(&h.timestamp)
            .expect("only what crossed the link is handed out");
        assert_eq!(payload, &want[..], "message {} differs", h.seq);
        if !primaries.contains_key(&h.seq) {
            recovered.insert(h.seq);
        }
    }
    eprintln!(
        "sent {sent} messages; the link lost {} of their packets, {} of them with \
         the message carried again in a later packet that crossed; rtpreddec \
         recovered {} of those\nsender: {}",
        lost.len(),
        lost_but_carried.len(),
        recovered.len(),
        summary.trim()
    );
    assert!(!lost.is_empty(), "the emulated link lost packets");
    assert!(
        recovered.iter().all(|s| lost_but_carried.contains(s)),
        "{recovered:?}"
    );
    // Every such message is one rtpreddec can place (its neighbours
    // crossed); allow a few to a loaded kernel's full socket buffers
    // between the tap and GStreamer.
    assert!(
        recovered.len() * 10 >= lost_but_carried.len() * 9,
        "rtpreddec recovered {} of {}",
        recovered.len(),
        lost_but_carried.len()
    );
}

/// Message `seq` of the stream GStreamer protects: 24 bytes that name it.
fn message(seq: u16) -> Vec<u8> {
    (0..24u16)
        .map(|i| (seq.wrapping_mul(31).wrapping_add(i * 7) % 251) as u8)
        .collect()
}

#[test]
fn groupwire_recovers_messages_gstreamer_protected_with_rtpredenc() {
    let Some(gst) = gst_launch() else { return };
    let rx = bind();
    let rx_addr = rx.local_addr().unwrap();
    let emu = emulate(rx_addr, 11);
    let in_port = free_port();
    let _gst = Pipeline::udp(
        &gst,
        in_port,
        &format!(
            "application/x-rtp,media=application,clock-rate=1000,encoding-name=X-GW-TP,payload={MSG_PT}"
        ),
        &format!("rtpredenc pt={RED_PT} distance=1"),
        emu.listen().port(),
    );
    // groupwire's side: the AFEC endpoint reading RTP/RED with the CLI's
    // payload types (the defaults); the test is its driver.
    let mut g = Receiver {
        ep: AfecEndpoint::new(AfecConfig::new(2).mode(Mode::Plain)).expect("valid"),
        delivered: BTreeMap::new(),
        datagrams: 0,
    };
    rx.set_nonblocking(true).unwrap();
    let tx = bind();
    // Until the pipeline plays the kernel drops what is sent to it; the
    // stream starts wherever it first gets through.
    let start = Instant::now();
    let total = 1000u16;
    let mut seq = 0u16;
    let mut first: Option<u16> = None;
    while first.is_none_or(|f| seq.wrapping_sub(f) < total) {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "GStreamer never passed a packet"
        );
        let pkt = RtpHeader {
            payload_type: MSG_PT,
            seq,
            timestamp: 5000 + 20 * u32::from(seq),
            ssrc: 0x6777_0001,
            ..RtpHeader::default()
        }
        .to_packet(&message(seq));
        tx.send_to(&pkt, local(in_port)).unwrap();
        seq = seq.wrapping_add(1);
        if seq % 4 == 0 {
            std::thread::sleep(Duration::from_millis(1));
            g.take(&rx);
            first = first.or_else(|| g.delivered.keys().next().copied());
        }
    }
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        g.take(&rx);
        std::thread::sleep(Duration::from_millis(10));
    }
    let Receiver { ep, delivered, .. } = g;
    let first = first.expect("messages arrived");
    // Judged: from the first message through the one before the last sent
    // (the last has no later packet to carry it).
    let judged: Vec<u16> = (first..seq.wrapping_sub(1)).collect();
    let have = judged.iter().filter(|s| delivered.contains_key(s)).count();
    let recovered = delivered.values().filter(|r| **r).count();
    let s = ep.stats();
    eprintln!(
        "judged {} messages from {first}: groupwire has {have}, {recovered} of them \
         recovered from rtpredenc's redundant blocks; {} lost for good, {} duplicates",
        judged.len(),
        s.lost,
        s.duplicates
    );
    assert!(recovered > 0, "{s:?}");
    // rtpredenc's one block rebuilds any loss not followed by another;
    // at 10% random loss that is ~99% of messages.
    assert!(
        have * 100 >= judged.len() * 97,
        "{have} of {}",
        judged.len()
    );
}

/// groupwire's side of the second test: an AFEC endpoint fed what arrives.
struct Receiver {
    ep: AfecEndpoint,
    /// Delivered messages by sequence number: whether recovered.
    delivered: BTreeMap<u16, bool>,
    datagrams: u64,
}

impl Receiver {
    /// Takes whatever has arrived; checks every message against what was sent.
    fn take(&mut self, rx: &UdpSocket) {
        let mut buf = vec![0u8; 65536];
        while let Ok((n, src)) = rx.recv_from(&mut buf) {
            self.datagrams += 1;
            let now = Now::from_millis(self.datagrams);
            self.ep.handle_datagram(now, src, &buf[..n]);
            while self.ep.poll_transmit(now).is_some() {}
            while let Some(e) = self.ep.poll_event() {
                if let AfecEvent::Delivered(d) = e {
                    let seq = d.index as u16;
                    assert_eq!(d.payload, message(seq), "message {seq} differs");
                    assert!(
                        self.delivered.insert(seq, d.recovered).is_none(),
                        "delivered twice: {seq}"
                    );
                }
            }
        }
    }
}
