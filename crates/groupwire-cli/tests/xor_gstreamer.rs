//! groupwire's XOR FEC speaks SMPTE 2022-1 with stock GStreamer, both
//! ways, through `groupwire emulate` with loss on the media stream:
//!
//! - groupwire's `XorEncoder` protects a stream that GStreamer's
//!   `rtpst2022-1-fecdec` repairs;
//! - GStreamer's `rtpst2022-1-fecenc` protects a stream that groupwire's
//!   `XorDecoder` repairs.
//!
//! Every repaired packet must be byte for byte the one sent. GStreamer is
//! installed by `scripts/gstreamer.sh`; where it cannot be, the tests say
//! so and skip.

#![expect(
    clippy::disallowed_methods,
    reason = "real processes and sockets, timed by the wall clock; a reader thread"
)]

use std::collections::BTreeMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use groupwire_proto::wire::rtp::RtpHeader;
use groupwire_proto::xor::{DecoderConfig, MediaOutcome, XorDecoder, XorEncoder, XorLayout};

mod common;

use common::gst::{
    Pipeline, bind, drain, drain_until, emulate_trace as emulate, free_port, gst_launch, udpsink,
    udpsrc,
};

/// Media packet `seq`: SSRC 0 and consecutive numbers as SMPTE 2022-1
/// (and GStreamer's encoder) require, MP2T's payload type, and a payload
/// of a length and content that depend on `seq`.
fn media(seq: u16) -> Vec<u8> {
    let len = 40 + usize::from(seq % 53) * 7;
    let body: Vec<u8> = (0..len)
        .map(|i| (i as u16).wrapping_mul(seq | 1) as u8)
        .collect();
    RtpHeader {
        payload_type: 33,
        seq,
        timestamp: u32::from(seq) * 900,
        marker: seq % 9 == 0,
        ..RtpHeader::default()
    }
    .to_packet(&body)
}

/// A loss pattern over 48 packets (three 4x4 matrices): a burst of 4 that
/// only the columns rebuild, two single losses a row rebuilds, then none.
const TRACE: &str = "\
    0000 0111 1000 0000  # burst of 4 across rows 1 and 2
    0010 0000 0000 0100  # one in row 0, one in row 3
    0000 0000 0000 0000\n";
const TRACE_LOST: usize = 6;
const TRACE_LEN: usize = 48;

#[test]
fn gstreamer_repairs_a_stream_groupwire_protected() {
    let Some(gst) = gst_launch() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (media_port, col_port, row_port) = (free_port(), free_port(), free_port());
    let out = bind();
    let caps = "application/x-rtp,media=video,clock-rate=90000,encoding-name=MP2T,payload=33";
    let src = |port: u16, caps: &str| format!("{} ! queue", udpsrc(port, caps));
    let _gst = Pipeline::start(
        &gst,
        &format!(
            "{} ! rtpst2022-1-fecdec name=d size-time=10000000000 ! {} {} ! d.fec_0 {} ! d.fec_1",
            src(media_port, caps),
            udpsink(out.local_addr().unwrap().port()),
            src(col_port, "application/x-rtp,payload=96"),
            src(row_port, "application/x-rtp,payload=96"),
        ),
    );
    let tx = bind();
    let to = |port| SocketAddr::from(([127, 0, 0, 1], port));
    // Until the pipeline plays, packets straight to it (not counted).
    let start = Instant::now();
    let mut warm = 60_000u16;
    let mut buf = [0u8; 2048];
    loop {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "GStreamer never passed a packet"
        );
        tx.send_to(&media(warm), to(media_port)).unwrap();
        warm += 1;
        if out.recv(&mut buf).is_ok() {
            break;
        }
    }
    drain(&out, Duration::from_millis(300));
    // Read while sending: the default socket buffer holds fewer packets
    // than the run.
    let done = Arc::new(AtomicBool::new(false));
    let reader = std::thread::spawn({
        let done = Arc::clone(&done);
        move || drain_until(&out, Duration::from_secs(2), &done)
    });

    let emu = emulate(to(media_port), TRACE, &dir);
    let n = TRACE_LEN as u16 * 40;
    let mut enc = XorEncoder::new(XorLayout::matrix(4, 4), 96).unwrap();
    for seq in 0..n {
        let m = media(seq);
        enc.push(&m).unwrap();
        tx.send_to(&m, emu.addr("listen")).unwrap();
        if seq == n - 1 {
            enc.flush();
        }
        while let Some(f) = enc.poll_fec() {
            let port = match f.stream {
                groupwire_proto::xor::FecStream::Column => col_port,
                groupwire_proto::xor::FecStream::Row => row_port,
            };
            tx.send_to(&f.packet, to(port)).unwrap();
        }
        if seq % 8 == 7 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    done.store(true, Ordering::Relaxed);
    let got = reader.join().expect("reader");
    let mut seen = BTreeMap::new();
    for p in got {
        let (h, _) = RtpHeader::parse(&p).expect("GStreamer sends RTP");
        if h.seq < n {
            assert_eq!(p, media(h.seq), "packet {} differs", h.seq);
            seen.insert(h.seq, ());
        }
    }
    let lost = TRACE_LOST * usize::from(n) / TRACE_LEN;
    let delivered = usize::from(n) - lost;
    eprintln!(
        "sent {n}, the link lost {lost}, GStreamer handed out {} (rebuilt {})",
        seen.len(),
        seen.len().saturating_sub(delivered)
    );
    // Every loss is one GStreamer can rebuild; allow a few to a loaded
    // kernel's full socket buffers, but most must be rebuilt.
    assert!(
        seen.len() >= usize::from(n) * 98 / 100,
        "{} of {n}",
        seen.len()
    );
    assert!(
        seen.len() >= delivered + lost * 9 / 10,
        "{} of {n}",
        seen.len()
    );
}

#[test]
fn groupwire_repairs_a_stream_gstreamer_protected() {
    let Some(gst) = gst_launch() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (media_rx, col_rx, row_rx) = (bind(), bind(), bind());
    let emu = emulate(media_rx.local_addr().unwrap(), TRACE, &dir);
    let in_port = free_port();
    let caps = "application/x-rtp,media=video,clock-rate=90000,encoding-name=MP2T,payload=33";
    let sink = |a: SocketAddr| udpsink(a.port());
    let _gst = Pipeline::start(
        &gst,
        &format!(
            "{} ! rtpst2022-1-fecenc name=e columns=4 rows=4 ! {} e.fec_0 ! {} e.fec_1 ! {}",
            udpsrc(in_port, caps),
            sink(emu.addr("listen")),
            sink(col_rx.local_addr().unwrap()),
            sink(row_rx.local_addr().unwrap()),
        ),
    );
    let tx = bind();
    let to_gst = SocketAddr::from(([127, 0, 0, 1], in_port));
    // Until the pipeline plays, the kernel drops what is sent to it; the
    // encoder starts at the first packet it gets, so send one stream.
    for s in [&media_rx, &col_rx, &row_rx] {
        s.set_nonblocking(true).unwrap();
    }
    let mut rx = Receiver {
        sockets: [media_rx, col_rx, row_rx],
        dec: XorDecoder::new(DecoderConfig::default()),
        received: BTreeMap::new(),
        first: None,
        rebuilt: 0,
    };
    let start = Instant::now();
    let mut seq = 0u16;
    let total = TRACE_LEN as u16 * 40;
    while rx.first.is_none_or(|f| seq.wrapping_sub(f) < total) {
        assert!(
            start.elapsed() < Duration::from_secs(40),
            "GStreamer never passed a packet"
        );
        tx.send_to(&media(seq), to_gst).unwrap();
        seq += 1;
        if seq % 8 == 0 {
            std::thread::sleep(Duration::from_millis(1));
            rx.take();
        }
    }
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        rx.take();
        std::thread::sleep(Duration::from_millis(10));
    }
    let Receiver {
        dec,
        received,
        first,
        rebuilt,
        ..
    } = rx;
    let first = first.expect("media arrived");
    // The last matrices' column parity waits for media never sent.
    let judged: Vec<u16> = (first..seq.saturating_sub(48)).collect();
    let have = judged.iter().filter(|s| received.contains_key(s)).count();
    let s = dec.stats();
    eprintln!(
        "judged {} packets from {first}: have {have}, rebuilt {rebuilt} ({} by rows, {} by columns)",
        judged.len(),
        s.recovered_row,
        s.recovered_column
    );
    assert!(s.recovered_row > 0 && s.recovered_column > 0, "{s:?}");
    assert!(
        have >= judged.len() * 98 / 100,
        "{have} of {}",
        judged.len()
    );
    assert_eq!(dec.dimensions(), (Some(4), Some(4)));
}

/// groupwire's side of the second test: media behind the emulator, the
/// two FEC streams straight from GStreamer.
struct Receiver {
    sockets: [UdpSocket; 3],
    dec: XorDecoder,
    received: BTreeMap<u16, ()>,
    first: Option<u16>,
    rebuilt: usize,
}

impl Receiver {
    /// Takes whatever has arrived; checks every packet against what was sent.
    fn take(&mut self) {
        let mut buf = vec![0u8; 65536];
        while let Ok(n) = self.sockets[0].recv(&mut buf) {
            let p = Bytes::copy_from_slice(&buf[..n]);
            let (h, _) = RtpHeader::parse(&p).expect("RTP");
            self.first.get_or_insert(h.seq);
            assert_eq!(&p[..], &media(h.seq)[..]);
            if self.dec.on_media(p) == MediaOutcome::New {
                self.received.insert(h.seq, ());
            }
        }
        for s in &self.sockets[1..] {
            while let Ok(n) = s.recv(&mut buf) {
                self.dec.on_fec(Bytes::copy_from_slice(&buf[..n]));
            }
        }
        while let Some(r) = self.dec.poll_recovered() {
            assert_eq!(
                &r.packet[..],
                &media(r.seq)[..],
                "rebuilt {} differs",
                r.seq
            );
            self.received.insert(r.seq, ());
            self.rebuilt += 1;
        }
    }
}
