//! groupwire's XOR FEC in RFC 5109 ULPFEC form works with stock GStreamer,
//! both ways, through `groupwire emulate` with loss on the one RTP stream
//! that carries media and FEC together (as libwebrtc and GStreamer send
//! it):
//!
//! - GStreamer's `rtpulpfecenc` protects a stream that groupwire's
//!   `UlpfecDecoder` repairs;
//! - groupwire's `UlpfecEncoder` protects a stream that GStreamer's
//!   `rtpulpfecdec` (behind `rtpstorage` and a jitter buffer, as its docs
//!   say) repairs.
//!
//! Every repaired packet must be byte for byte the one sent. GStreamer is
//! installed by `scripts/gstreamer.sh`; where it cannot be, the tests say
//! so and skip.

#![expect(
    clippy::disallowed_methods,
    reason = "real processes and sockets, timed by the wall clock; a reader thread"
)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use groupwire_proto::wire::rtp::{RTP_HEADER_LEN, RtpHeader};
use groupwire_proto::xor::ulpfec::{
    DEFAULT_FEC_PT, DEFAULT_WINDOW, UlpfecDecoder, UlpfecEncoder, UlpfecOutcome,
};

mod common;

use common::gst::{Pipeline, bind, drain_until, emulate_trace, free_port, gst_launch};

/// Media packets per frame (the marker ends one): GStreamer's encoder
/// protects a frame at a time, so with 34% it sends one FEC packet per
/// three media packets, as groupwire's `UlpfecEncoder::new(3, ..)` does.
const FRAME: u16 = 3;

const CAPS: &str = "application/x-rtp,media=video,clock-rate=90000,encoding-name=VP8,payload=96";

/// The same without `payload`: `rtpjitterbuffer` drops every packet whose
/// payload type differs from the caps' (here the FEC packets, which share
/// the stream) unless an `rtpbin` answers its `request-pt-map`; without
/// the field it takes the clock rate for both.
const CAPS_ANY_PT: &str = "application/x-rtp,media=video,clock-rate=90000,encoding-name=VP8";

/// The body of media packet `i`: its index, then bytes of a length and
/// content that depend on it.
fn body(i: u16) -> Vec<u8> {
    let len = 30 + usize::from(i % 41) * 9;
    let mut b = i.to_be_bytes().to_vec();
    b.extend((0..len).map(|k| (k as u16).wrapping_mul(i | 1) as u8));
    b
}

/// Media packet `i` (sequence number `i`; encoders renumber).
fn media(i: u16) -> Vec<u8> {
    media_at(i, u32::from(i) * 90)
}

/// Media packet `i` with timestamp `ts` (90 kHz).
fn media_at(i: u16, ts: u32) -> Vec<u8> {
    RtpHeader {
        payload_type: 96,
        seq: i,
        timestamp: ts,
        marker: i % FRAME == FRAME - 1,
        ssrc: 0x5eed,
        ..RtpHeader::default()
    }
    .to_packet(&body(i))
}

/// Losses over the combined stream (groups of three media and one FEC):
/// one media packet lost in a group (rebuilt), a FEC packet lost (nothing
/// to rebuild), then clean groups.
const TRACE: &str = "\
    0100 0000 0001 0000  # media 2 of group 0; the FEC of group 2
    0000 0010 0000 0000  # media 3 of group 5
    0000 0000 0000 0000\n";

#[test]
fn groupwire_repairs_a_stream_gstreamer_protected() {
    let Some(gst) = gst_launch() else { return };
    let dir = tempfile::tempdir().unwrap();
    let rx = bind();
    let emu = emulate_trace(rx.local_addr().unwrap(), TRACE, &dir);
    let in_port = free_port();
    let _gst = Pipeline::udp(
        &gst,
        in_port,
        CAPS,
        &format!("rtpulpfecenc pt={DEFAULT_FEC_PT} percentage=34 multipacket=true"),
        emu.addr("listen").port(),
    );
    let tx = bind();
    let to_gst = SocketAddr::from(([127, 0, 0, 1], in_port));
    // Until the pipeline plays, the kernel drops what is sent to it: send
    // frames until the first comes out, then the counted run.
    let done = Arc::new(AtomicBool::new(false));
    let reader = std::thread::spawn({
        let done = Arc::clone(&done);
        move || drain_until(&rx, Duration::from_secs(2), &done)
    });
    let total: u16 = 3000;
    for i in 0..total {
        tx.send_to(&media(i), to_gst).unwrap();
        // A packet a millisecond: the receiving socket's default buffer
        // need not ride out a loaded machine's scheduling gaps.
        std::thread::sleep(Duration::from_millis(1));
    }
    done.store(true, Ordering::Relaxed);
    let got = reader.join().expect("reader");
    let mut dec = UlpfecDecoder::new(DEFAULT_FEC_PT, DEFAULT_WINDOW);
    // Media by index (the packet's first two body bytes): GStreamer
    // renumbered them, so check each against what was sent but for the
    // sequence number.
    let mut have: BTreeMap<u16, &'static str> = BTreeMap::new();
    let mut check = |p: &[u8], how: &'static str| {
        let (h, b) = RtpHeader::parse(p).expect("RTP");
        let i = u16::from_be_bytes([b[0], b[1]]);
        let mut want = media(i);
        want[2..4].copy_from_slice(&h.seq.to_be_bytes());
        assert_eq!(p, &want[..], "{how} packet {i} differs");
        have.insert(i, how);
    };
    for p in got {
        if dec.on_packet(Bytes::from(p.clone())) == UlpfecOutcome::Media {
            check(&p, "arrived");
        }
        while let Some(r) = dec.poll_recovered() {
            check(&r.packet, "rebuilt");
        }
    }
    let s = dec.stats();
    // The first frame may have started before the pipeline played.
    let first = *have.keys().next().expect("media arrived") + FRAME;
    // The last frames may still be in GStreamer's hands.
    let judged: Vec<u16> = (first..total - 3 * FRAME).collect();
    let present = judged.iter().filter(|i| have.contains_key(i)).count();
    let rebuilt = have.values().filter(|h| **h == "rebuilt").count();
    eprintln!(
        "from media {first}: {present} of {} present, {rebuilt} rebuilt; {s:?}",
        judged.len()
    );
    assert!(rebuilt > 0 && s.unrecoverable == 0, "{s:?}");
    // Every loss the trace makes is rebuildable; allow a few to a loaded
    // kernel's full socket buffers.
    assert!(
        present >= judged.len() * 98 / 100,
        "{present} of {}",
        judged.len()
    );
}

#[test]
fn gstreamer_repairs_a_stream_groupwire_protected() {
    let Some(gst) = gst_launch() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (_gst, gst_port, out) = Pipeline::udp_to_socket(
        &gst,
        CAPS_ANY_PT,
        &format!(
            "rtpstorage size-time=2000000000 ! rtpssrcdemux ! \
             rtpjitterbuffer do-lost=true latency=1000 ! rtpulpfecdec pt={DEFAULT_FEC_PT}"
        ),
    );
    let to_gst = SocketAddr::from(([127, 0, 0, 1], gst_port));
    let emu = emulate_trace(to_gst, TRACE, &dir);
    let mut tx = Sender {
        sock: bind(),
        enc: UlpfecEncoder::new(usize::from(FRAME), DEFAULT_FEC_PT).unwrap(),
        next: 0,
        sent: BTreeMap::new(),
        start: Instant::now(),
    };
    // Until the pipeline plays (not counted): one steady real-time stream
    // throughout, since a pause would make the jitter buffer take what
    // follows for late.
    let mut buf = [0u8; 2048];
    out.set_nonblocking(true).unwrap();
    loop {
        assert!(
            tx.start.elapsed() < Duration::from_secs(30),
            "GStreamer never passed a packet"
        );
        tx.send(emu.addr("listen"));
        std::thread::sleep(Duration::from_millis(1));
        if out.recv(&mut buf).is_ok() {
            break;
        }
    }
    out.set_nonblocking(false).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let reader = std::thread::spawn({
        let done = Arc::clone(&done);
        move || drain_until(&out, Duration::from_secs(2), &done)
    });
    let counted_from = tx.next;
    for _ in 0..3000u32 {
        tx.send(emu.addr("listen"));
        std::thread::sleep(Duration::from_millis(1));
    }
    done.store(true, Ordering::Relaxed);
    let got = reader.join().expect("reader");
    // rtpulpfecdec renumbers the media it hands out (closing the gaps the
    // FEC packets leave): match by the index in the body, and check the
    // rest of each packet.
    let mut seen = BTreeMap::new();
    for p in got {
        let (h, b) = RtpHeader::parse(&p).expect("GStreamer sends RTP");
        // rtpulpfecdec passes the FEC packets on too.
        if h.payload_type == DEFAULT_FEC_PT {
            continue;
        }
        let i = u16::from_be_bytes([b[0], b[1]]);
        let want = &tx.sent[&i];
        assert_eq!(&p[RTP_HEADER_LEN..], &want[RTP_HEADER_LEN..], "body of {i}");
        assert_eq!(&p[..2], &want[..2], "P, X, CC, M, PT of {i}");
        assert_eq!(&p[4..12], &want[4..12], "timestamp and SSRC of {i}");
        seen.insert(i, h.seq);
    }
    let counted: Vec<u16> = (counted_from..tx.next).collect();
    // The jitter buffer may hold the last few.
    let judged = &counted[..counted.len() - 12];
    let have = judged.iter().filter(|s| seen.contains_key(s)).count();
    // The trace loses 2 media packets in every 48 datagrams (36 media):
    // without rtpulpfecdec the same pipeline hands out that many fewer.
    let lost = judged.len() * 2 / 36;
    eprintln!(
        "sent {} media through the emulator (about {lost} lost), GStreamer handed out {have}",
        judged.len()
    );
    assert!(
        have >= judged.len() - lost / 10,
        "{have} of {}: GStreamer rebuilt too few",
        judged.len()
    );
}

/// groupwire's side of the second test: the encoder and what it sent.
struct Sender {
    sock: std::net::UdpSocket,
    enc: UlpfecEncoder,
    /// The next media index.
    next: u16,
    /// Media as sent (renumbered), by index.
    sent: BTreeMap<u16, Vec<u8>>,
    /// Timestamps run on the wall clock from here, as a live source's do.
    start: Instant,
}

impl Sender {
    /// Sends the next media packet to `to`, and a FEC packet after every
    /// frame.
    fn send(&mut self, to: SocketAddr) {
        let ts = (self.start.elapsed().as_micros() * 9 / 100) as u32;
        self.enc.push(&media_at(self.next, ts)).unwrap();
        while let Some(p) = self.enc.poll() {
            self.sock.send_to(&p, to).unwrap();
            if p[1] & 0x7f != DEFAULT_FEC_PT {
                self.sent.insert(self.next, p);
            }
        }
        self.next += 1;
    }
}

#[test]
fn the_header_is_where_gstreamer_reads_it() {
    // Not a GStreamer run: the encoder's FEC packet starts with the RTP
    // header, then RFC 5109's FEC header at byte 12.
    let mut enc = UlpfecEncoder::new(3, DEFAULT_FEC_PT).unwrap();
    for i in 0..3 {
        enc.push(&media(i)).unwrap();
    }
    let fec = std::iter::from_fn(|| enc.poll()).last().unwrap();
    assert_eq!(fec[1] & 0x7f, DEFAULT_FEC_PT);
    assert_eq!(
        &fec[RTP_HEADER_LEN + 2..RTP_HEADER_LEN + 4],
        &[0, 0],
        "SN base 0"
    );
}
