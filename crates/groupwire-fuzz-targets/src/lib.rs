//! The checks behind every fuzz target, on stable Rust.
//!
//! Each function here is one fuzz target's whole body: it takes arbitrary
//! bytes, drives one parser or machine with them, and panics only when a
//! property the code promises is broken (a round trip that does not close,
//! a cap that is exceeded, a frame the relay emits that does not decode).
//! The `fuzz/` crate (nightly, cargo-fuzz) wraps each in `fuzz_target!`;
//! this crate's `tests/corpus.rs` replays every committed corpus file of
//! every target through the same function on stable, so `cargo test`
//! catches a regression of anything a fuzzer once found.
//!
//! Adding a target: a function here, an entry in [`TARGETS`], a
//! `fuzz/fuzz_targets/NAME.rs` calling it, a `[[bin]]` in `fuzz/Cargo.toml`
//! and a seeded `fuzz/corpus/NAME/`. The corpus test checks that the four
//! agree.

use std::net::SocketAddr;
use std::time::Duration;

use groupwire_link::{LossModel, LossTrace};
use groupwire_proto::{Instant, Machine};
use rand::SeedableRng;

pub mod monitor_report;
mod relay_client;
mod relay_core;
pub mod session_endpoint;
pub mod tunnel_endpoint;

pub use monitor_report::monitor_report;
pub use relay_client::relay_client;
pub use relay_core::relay_core;
pub use session_endpoint::session_endpoint;
pub use tunnel_endpoint::tunnel_endpoint;

/// One fuzz target: its name (the file in `fuzz/fuzz_targets/` and the
/// folder in `fuzz/corpus/`) and its check.
#[derive(Debug, Clone, Copy)]
pub struct Target {
    /// The target's name.
    pub name: &'static str,
    /// Its body: panics only when a promised property breaks.
    pub check: fn(&[u8]),
}

/// Every fuzz target.
pub const TARGETS: &[Target] = &[
    Target {
        name: "header",
        check: header,
    },
    Target {
        name: "afec_data",
        check: afec_data,
    },
    Target {
        name: "afec_control",
        check: afec_control,
    },
    Target {
        name: "afec_endpoint",
        check: afec_endpoint,
    },
    Target {
        name: "block_packet",
        check: block_packet,
    },
    Target {
        name: "block_endpoint",
        check: block_endpoint,
    },
    Target {
        name: "tunnel_endpoint",
        check: tunnel_endpoint,
    },
    Target {
        name: "relay_frame",
        check: relay_frame,
    },
    Target {
        name: "relay_core",
        check: relay_core,
    },
    Target {
        name: "relay_client",
        check: relay_client,
    },
    Target {
        name: "loss_model",
        check: loss_model,
    },
    Target {
        name: "scenario",
        check: scenario,
    },
    Target {
        name: "bch_decode",
        check: bch_decode,
    },
    Target {
        name: "rtp_fec",
        check: rtp_fec,
    },
    Target {
        name: "xor_decoder",
        check: xor_decoder,
    },
    Target {
        name: "rtp_red",
        check: rtp_red,
    },
    Target {
        name: "afec_red_endpoint",
        check: afec_red_endpoint,
    },
    Target {
        name: "ulpfec",
        check: ulpfec,
    },
    Target {
        name: "rbudp_control",
        check: rbudp_control,
    },
    Target {
        name: "striped_frame",
        check: striped_frame,
    },
    Target {
        name: "sliding_decoder",
        check: sliding_decoder,
    },
    Target {
        name: "session_endpoint",
        check: session_endpoint,
    },
    Target {
        name: "monitor_report",
        check: monitor_report,
    },
];

/// Reliable Blast UDP: every control message and data datagram that parses
/// re-emits to bytes that parse to the same value; then a receiver (past a
/// valid Start of 100 ten-byte packets) and a sender (past its Accept) are
/// fed the input as hostile traffic, split at 0xFF bytes: a chunk whose
/// first byte is 0 is a control frame, 1 a datagram, anything else a valid
/// data packet of the index it names, its round and whether an
/// end-of-blast follows taken from the next bytes. Neither panics, the
/// receiver stores nothing past the payload, and every frame either emits
/// parses and stays under the largest control message.
pub fn rbudp_control(data: &[u8]) {
    use groupwire_proto::rbudp::{
        Pattern, RbudpReceiver, RbudpSender, ReceiverConfig, SenderConfig,
    };
    use groupwire_proto::wire::rbudp::{
        Accept, Control, ControlRepr, DataRepr, EndOfBlast, MAX_CONTROL_LEN, Start,
    };
    use groupwire_proto::{Bitrate, StreamMachine, Transport};
    if let Ok(r) = ControlRepr::parse(data) {
        let bytes = r.to_vec();
        assert_eq!(ControlRepr::parse(&bytes), Ok(r));
    }
    if let Ok(r) = DataRepr::parse(data) {
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut buf);
        assert_eq!(DataRepr::parse(&buf), Ok(r));
    }
    let tx_addr: SocketAddr = "10.0.0.1:7400".parse().expect("valid address");
    let rx_addr: SocketAddr = "10.0.0.2:7400".parse().expect("valid address");
    const SIZE: u64 = 1000;
    let pattern = Pattern::new(3, SIZE);
    let frame = |msg| ControlRepr { session: 1, msg }.to_vec();
    let check = |t: groupwire_proto::Transmit| {
        if t.transport == Transport::FRAME {
            assert!(t.payload.len() <= MAX_CONTROL_LEN);
            ControlRepr::parse(&t.payload).expect("our own frames parse");
        } else {
            DataRepr::parse(&t.payload).expect("our own data parses");
        }
    };
    let mut rx = RbudpReceiver::new(ReceiverConfig::new(tx_addr), Vec::new());
    let start = Start {
        packet_size: 10,
        size: SIZE,
        rate_bps: 1_000_000,
        hash: Some(pattern.hash()),
        version: Some(1),
    };
    let mut now = Instant::ZERO;
    rx.handle_frame(now, tx_addr, 0, &frame(Control::Start(start)));
    let mut cfg = SenderConfig::new(rx_addr, Bitrate::gbps(1));
    // Resumable, and (on odd inputs) accepted as a resume, so the hostile
    // frames also meet a sender waiting for its resume list.
    cfg.version = Some(1);
    let mut tx = RbudpSender::new(cfg, pattern);
    tx.start(now);
    let accept = Accept {
        packet_size: 10,
        size: SIZE,
        resumed: data.first().is_some_and(|b| b & 1 == 1),
    };
    tx.handle_frame(now, rx_addr, 0, &frame(Control::Accept(accept)));
    for chunk in data.split(|&b| b == 0xFF) {
        now += Duration::from_millis(3);
        match chunk.split_first() {
            Some((0, rest)) => {
                rx.handle_frame(now, tx_addr, 0, rest);
                tx.handle_frame(now, rx_addr, 0, rest);
            }
            Some((1, rest)) => rx.handle_datagram(now, tx_addr, rest),
            Some((&index, rest)) => {
                let index = u64::from(index) % 110;
                let round = u32::from(rest.first().copied().unwrap_or(0) % 4);
                let mut payload = [0u8; 10];
                pattern.fill(index * 10, &mut payload);
                let d = DataRepr {
                    session: 1,
                    round,
                    index,
                    payload: &payload,
                };
                let mut buf = vec![0u8; d.buffer_len()];
                d.emit(&mut buf);
                rx.handle_datagram(now, tx_addr, &buf);
                if rest.get(1).is_some_and(|b| b % 2 == 1) {
                    let eob = EndOfBlast {
                        round,
                        sent: 100,
                        hash: Some(pattern.hash()),
                    };
                    rx.handle_frame(now, tx_addr, 0, &frame(Control::EndOfBlast(eob)));
                }
            }
            None => {}
        }
        for m in [&mut rx as &mut dyn DrainCheck, &mut tx] {
            m.drain(now, &check);
        }
        assert!(rx.sink().len() as u64 <= SIZE);
    }
}

/// Parallel TCP striping's frames: every frame that parses re-emits to
/// bytes that parse to the same value and whose length [`frame_len`]
/// gives; then the input is read as one TCP stream the way a receiver
/// reads it (a prefix, the frame's length from it, the frame, and for a
/// chunk its payload), and every step stays inside the input, every frame
/// under the longest frame, every chunk within its bounds.
///
/// [`frame_len`]: groupwire_proto::wire::striped::frame_len
pub fn striped_frame(data: &[u8]) {
    use groupwire_proto::wire::striped::{
        Frame, MAX_CHUNK_SIZE, MAX_FRAME_LEN, PREFIX_LEN, Repr, frame_len,
    };
    if let Ok(r) = Repr::parse(data) {
        let bytes = r.to_vec();
        assert_eq!(Repr::parse(&bytes), Ok(r));
        assert_eq!(frame_len(&bytes), Ok(bytes.len()));
    }
    let mut rest = data;
    while rest.len() >= PREFIX_LEN {
        let Ok(len) = frame_len(rest) else { break };
        assert!((PREFIX_LEN..=MAX_FRAME_LEN).contains(&len));
        let Some(frame) = rest.get(..len) else { break };
        let Ok(r) = Repr::parse(frame) else { break };
        assert_eq!(Repr::parse(&r.to_vec()), Ok(r));
        rest = &rest[len..];
        if let Frame::Chunk(c) = r.frame {
            assert!(c.length > 0 && c.length <= MAX_CHUNK_SIZE);
            assert!(c.offset.checked_add(u64::from(c.length)).is_some());
            let Some(after) = rest.get(c.length as usize..) else {
                break;
            };
            rest = after;
        }
    }
}

/// Drains a machine after a timeout, checking each transmit.
trait DrainCheck {
    fn drain(&mut self, now: Instant, check: &dyn Fn(groupwire_proto::Transmit));
}

impl<M: Machine> DrainCheck for M {
    fn drain(&mut self, now: Instant, check: &dyn Fn(groupwire_proto::Transmit)) {
        self.handle_timeout(now);
        while let Some(t) = self.poll_transmit(now) {
            check(t);
        }
        while self.poll_event().is_some() {}
    }
}

/// RFC 2198 payloads (the whole input, and the payload of the input read
/// as an RTP packet) and RTCP compounds: what parses re-emits to the same
/// bytes (the RED encoding has no slack) and parses back to the same
/// value; an RTCP walk stays inside the input; AFEC feedback in its RTCP
/// APP form round-trips.
pub fn rtp_red(data: &[u8]) {
    use groupwire_proto::wire::afec::ControlRepr;
    use groupwire_proto::wire::rtp::RtpHeader;
    use groupwire_proto::wire::{red, rtcp};
    let inner = RtpHeader::parse(data)
        .ok()
        .and_then(|(h, body)| h.payload(body).ok());
    for p in [Some(data), inner].into_iter().flatten() {
        match red::Packet::new_checked(p) {
            Ok(view) => {
                let r = red::Repr::parse(p).expect("a checked payload parses");
                assert_eq!(r.redundant.len(), view.redundant_count());
                assert_eq!(r.primary, view.primary());
                let bytes = r.to_vec().expect("what parses fits the wire");
                assert_eq!(bytes, p, "RED re-emits to the bytes it came from");
                assert_eq!(red::Repr::parse(&bytes).as_ref(), Ok(&r));
            }
            Err(_) => assert!(red::Repr::parse(p).is_err()),
        }
    }
    let mut walked = 0;
    for p in rtcp::packets(data) {
        let Ok(p) = p else { break };
        walked += rtcp::HEADER_LEN + p.body.len();
        if let Ok(app) = rtcp::App::parse(&p) {
            if app.data.len() % 4 == 0 {
                let mut buf = vec![0u8; app.buffer_len()];
                app.emit(&mut buf);
                let again = rtcp::packets(&buf)
                    .next()
                    .expect("one packet")
                    .expect("parses");
                assert_eq!(rtcp::App::parse(&again), Ok(app));
            }
        }
    }
    assert!(walked <= data.len());
    if let Ok(Some(c)) = ControlRepr::parse_rtcp(data) {
        let mut buf = vec![0u8; ControlRepr::rtcp_len(c.entries.len())];
        c.emit_rtcp(&mut buf);
        assert!(rtcp::is_rtcp(&buf));
        assert_eq!(ControlRepr::parse_rtcp(&buf), Ok(Some(c)));
    }
}

/// An AFEC endpoint in RTP/RED framing, both sending and receiving: the
/// input split at 0xFF bytes; a chunk whose first byte is 0 is a message
/// the endpoint sends (adaptive, so NAKs and flushes change what goes
/// out), any other a datagram it receives. It never panics, and every
/// datagram it emits is well-formed RTP/RED or RTCP that parses.
pub fn afec_red_endpoint(data: &[u8]) {
    use groupwire_proto::afec::{AfecConfig, AfecEndpoint, Framing};
    use groupwire_proto::wire::afec::{ControlRepr, MsgType};
    use groupwire_proto::wire::rtp::RtpHeader;
    use groupwire_proto::wire::{red, rtcp};
    let cfg = AfecConfig::new(1).framing(Framing::Red);
    let red_pt = cfg.red.payload_type;
    let mut e = AfecEndpoint::new(cfg).expect("RED defaults are valid");
    let peer: SocketAddr = "10.0.0.2:7400".parse().expect("valid address");
    e.add_peer(peer);
    let check = |payload: &[u8]| {
        if rtcp::is_rtcp(payload) {
            assert!(matches!(ControlRepr::parse_rtcp(payload), Ok(Some(_))));
        } else {
            let (h, body) = RtpHeader::parse(payload).expect("RTP");
            assert_eq!(h.payload_type, red_pt);
            red::Packet::new_checked(body).expect("RFC 2198");
        }
    };
    let mut now = Instant::ZERO;
    for (i, chunk) in data.split(|b| *b == 0xff).enumerate() {
        now = Instant::from_millis(i as u64 * 7);
        match chunk.split_first() {
            Some((0, msg)) => {
                let _ = e.send(
                    now,
                    MsgType::new(*b"TP"),
                    bytes::Bytes::copy_from_slice(msg),
                );
            }
            _ => e.handle_datagram(now, peer, chunk),
        }
        while let Some(t) = e.poll_transmit(now) {
            check(&t.payload);
        }
        while e.poll_event().is_some() {}
        e.handle_timeout(now);
    }
    for _ in 0..20 {
        now += Duration::from_millis(50);
        e.handle_timeout(now);
        while let Some(t) = e.poll_transmit(now) {
            check(&t.payload);
        }
    }
}

/// RTP headers and SMPTE 2022-1 FEC packets round-trip, and reading an RTP
/// payload out of any body fails cleanly or stays inside it.
pub fn rtp_fec(data: &[u8]) {
    use groupwire_proto::wire::rtp::{FecPacket, RTP_HEADER_LEN, RtpHeader};
    if let Ok((h, body)) = RtpHeader::parse(data) {
        assert_eq!(h.to_packet(body), data);
        if let Ok(p) = h.payload(body) {
            assert!(p.len() <= body.len());
        }
    }
    if let Ok(p) = FecPacket::parse(data) {
        let mut buf = vec![0u8; p.buffer_len()];
        p.emit(&mut buf);
        assert_eq!(buf.len(), data.len());
        assert_eq!(FecPacket::parse(&buf), Ok(p));
        assert!(p.parity.len() + RTP_HEADER_LEN <= data.len());
    }
}

/// RFC 5109 ULPFEC: what parses as a FEC packet's payload re-emits and
/// parses back to the same value; a ULPFEC decoder fed a real protected
/// stream with hostile packets mixed in (the input split at 0xFF; a
/// chunk's first byte picks: a FEC packet with that payload, a media packet
/// with that body, or the next real packets, every other one lost) never
/// panics and never rebuilds a packet longer than RTP can carry. (A
/// hostile FEC packet can make it rebuild a wrong one: ULPFEC has no
/// checksum; the application's own checks or SRTP catch that.)
pub fn ulpfec(data: &[u8]) {
    use bytes::Bytes;
    use groupwire_proto::wire::rtp::RtpHeader;
    use groupwire_proto::wire::ulpfec::UlpfecPacket;
    use groupwire_proto::xor::ulpfec::{UlpfecDecoder, UlpfecEncoder};
    if let Ok(f) = UlpfecPacket::parse(data) {
        let mut buf = vec![0u8; f.buffer_len()];
        f.emit(&mut buf);
        assert_eq!(UlpfecPacket::parse(&buf), Ok(f));
    }
    let mut enc = UlpfecEncoder::new(3, 122).expect("valid group");
    let mut dec = UlpfecDecoder::new(122, 64);
    let mut next = 0u16;
    for chunk in data.split(|&b| b == 0xFF).filter(|d| !d.is_empty()) {
        let (&kind, rest) = chunk.split_first().expect("non-empty");
        let seq = u16::from_be_bytes([kind, rest.first().copied().unwrap_or(0)]);
        match kind % 3 {
            0 | 1 => {
                let h = RtpHeader {
                    payload_type: if kind % 3 == 0 { 122 } else { 96 },
                    seq,
                    ..RtpHeader::default()
                };
                dec.on_packet(Bytes::from(h.to_packet(rest)));
            }
            _ => {
                for _ in 0..rest.len().min(8) {
                    let h = RtpHeader {
                        payload_type: 96,
                        seq: next,
                        timestamp: u32::from(next) * 90,
                        ..RtpHeader::default()
                    };
                    enc.push(&h.to_packet(&next.to_be_bytes().repeat(usize::from(next % 9))))
                        .expect("RTP media");
                    next = next.wrapping_add(1);
                    while let Some(p) = enc.poll() {
                        // Every other real packet is lost.
                        let s = RtpHeader::parse(&p).expect("RTP").0.seq;
                        if s % 2 == 0 {
                            dec.on_packet(Bytes::from(p));
                        }
                    }
                }
            }
        }
        while let Some(r) = dec.poll_recovered() {
            assert!(r.packet.len() <= 12 + 65535);
        }
    }
}

/// An XOR FEC decoder fed a real 2-D protected stream with hostile packets
/// mixed in (the input split at 0xFF; a chunk's first byte picks media or
/// parity, or "send the next real packets") never panics, holds no more
/// than its window of media and parity, and never hands out a packet
/// longer than a UDP datagram.
pub fn xor_decoder(data: &[u8]) {
    use bytes::Bytes;
    use groupwire_proto::wire::rtp::RtpHeader;
    use groupwire_proto::xor::{DecoderConfig, XorDecoder, XorEncoder, XorLayout};
    const WINDOW: u16 = 64;
    let layout = XorLayout::matrix(4, 4);
    let mut enc = XorEncoder::new(layout, 96).expect("valid layout");
    let mut dec = XorDecoder::new(DecoderConfig {
        layout: None,
        window: WINDOW,
        max_bytes: 1 << 16,
        partial_groups: false,
    });
    let mut seq = 0u16;
    for chunk in data.split(|&b| b == 0xFF).filter(|d| !d.is_empty()) {
        let (&kind, rest) = chunk.split_first().expect("non-empty");
        match kind % 4 {
            0 => dec.on_fec(Bytes::copy_from_slice(rest)),
            1 => {
                dec.on_media(Bytes::copy_from_slice(rest));
            }
            _ => {
                // Real packets: `rest.len()` of them, some dropped.
                for (i, &b) in rest.iter().enumerate() {
                    let m = RtpHeader {
                        seq,
                        payload_type: 33,
                        ..RtpHeader::default()
                    }
                    .to_packet(&rest[..=i]);
                    seq = seq.wrapping_add(u16::from(b % 3 == 2) * 100 + 1);
                    enc.push(&m).expect("an RTP packet");
                    if b % 5 != 0 {
                        dec.on_media(Bytes::from(m));
                    }
                    while let Some(f) = enc.poll_fec() {
                        dec.on_fec(f.packet);
                    }
                }
            }
        }
        while let Some(r) = dec.poll_recovered() {
            assert!(r.packet.len() <= 65_535);
        }
        assert!(dec.held_media() <= usize::from(WINDOW));
        assert!(dec.held_fec() <= 2 * usize::from(WINDOW));
    }
}

/// The RFC 8681 sliding-window decoder fed a real protected stream with
/// hostile packets mixed in. The input is split at 0xFF; a chunk's first
/// byte picks what the rest is: a repair packet (Repair FEC Payload ID and
/// symbol, given both as it is and cut or zero-filled to the symbol
/// size), a source packet (Source FEC Payload ID and ADU, given both as an
/// ADU and as a raw ADUI), or bytes each of which sends the next real ADU
/// and maybe a repair, some of them lost. The first byte's low bit picks
/// GF(2) or GF(2^8).
///
/// The decoder never panics; after every chunk it tracks no more ESIs
/// than its window, holds no more equations than its cap or rebuilt ADUs
/// than its window, and hands out only ADUs that fit a symbol; and while
/// no hostile packet has been fed yet, every ADU it rebuilds is the one
/// sent under that ESI, and was lost.
pub fn sliding_decoder(data: &[u8]) {
    use groupwire_codec::sliding::{
        Decoder, DecoderConfig, Encoder, Field, RepairPayloadId, SourcePayloadId,
    };
    const WINDOW: usize = SLIDING_WINDOW;
    const EQUATIONS: usize = 24;
    const E: usize = SLIDING_E;
    let field = if data.first().is_some_and(|b| b & 1 == 1) {
        Field::Gf2
    } else {
        Field::Gf256
    };
    let mut cfg = DecoderConfig::new(E);
    cfg.max_window = WINDOW;
    cfg.max_equations = EQUATIONS;
    cfg.field = field;
    let mut dec = Decoder::new(cfg).expect("valid config");
    let mut enc = Encoder::new(E, 16).expect("valid window").with_field(field);
    let mut sent = SlidingSent::new();
    let mut clean = true;
    let mut key = 0u16;
    for chunk in data.split(|&b| b == 0xFF).filter(|d| !d.is_empty()) {
        let (&kind, rest) = chunk.split_first().expect("non-empty");
        match kind % 4 {
            0 => {
                clean = false;
                if let Ok((id, symbol)) = RepairPayloadId::parse(rest) {
                    let _ = dec.receive_repair(id, symbol);
                    let mut fixed = [0u8; E];
                    let n = symbol.len().min(E);
                    fixed[..n].copy_from_slice(&symbol[..n]);
                    let _ = dec.receive_repair(id, &fixed);
                }
            }
            1 => {
                clean = false;
                if let Ok((id, adu)) = SourcePayloadId::parse(rest) {
                    let _ = dec.receive_source_adu(id.esi, kind, adu);
                    let _ = dec.receive_source(id.esi, adu);
                }
            }
            _ => {
                for &b in rest {
                    let flow = b & 3;
                    let adu: Vec<u8> = (0..b % 29).map(|i| i ^ key as u8).collect();
                    let esi = enc.push_adu(flow, &adu).expect("ADU fits a symbol");
                    let delivered = b % 4 != 0;
                    if delivered {
                        dec.receive_source_adu(esi, flow, &adu)
                            .expect("a real source is valid");
                    }
                    if sent.len() == 2 * WINDOW {
                        sent.pop_front();
                    }
                    sent.push_back((esi, flow, adu, delivered));
                    if b % 3 != 0 {
                        let (id, r) = enc.repair(key, b >> 4).expect("non-empty window");
                        key = key.wrapping_add(1);
                        if b % 5 != 0 {
                            dec.receive_repair(id, &r).expect("a real repair is valid");
                        }
                    }
                    sliding_drain(&mut dec, &sent, clean);
                }
            }
        }
        sliding_drain(&mut dec, &sent, clean);
        assert!(dec.window_len() <= WINDOW, "window over its bound");
        assert!(dec.equations() <= EQUATIONS, "equations over their cap");
        assert!(dec.pending_recovered() <= WINDOW);
    }
}

const SLIDING_E: usize = 32;
const SLIDING_WINDOW: usize = 64;

/// The last real ADUs [`sliding_decoder`] sent: (ESI, flow ID, ADU,
/// delivered), twice its decoding window of them.
type SlidingSent = std::collections::VecDeque<(u32, u8, Vec<u8>, bool)>;

/// Polls every ADU the decoder rebuilt: it fits a symbol and, on a clean
/// stream, is a recent lost one, byte for byte. Called after every real
/// packet, so a rebuild is checked before its ESI leaves `sent`.
fn sliding_drain(dec: &mut groupwire_codec::sliding::Decoder, sent: &SlidingSent, clean: bool) {
    use groupwire_codec::sliding::ADUI_HEADER_LEN;
    while let Some(r) = dec.poll_recovered() {
        assert!(
            r.adu.len() <= SLIDING_E - ADUI_HEADER_LEN,
            "ADU longer than a symbol"
        );
        if clean {
            let Some((_, flow, adu, delivered)) = sent.iter().find(|s| s.0 == r.esi) else {
                panic!("rebuilt ESI {} was not sent lately", r.esi);
            };
            assert!(!delivered, "rebuilt ESI {} was delivered", r.esi);
            assert_eq!(
                (r.flow_id, &r.adu),
                (*flow, adu),
                "ESI {} rebuilt wrong",
                r.esi
            );
        }
    }
}

/// The BCH(127, k) decoder on any word: the first byte picks `t` (1 to
/// 31), the next 16 the received word (zero-filled when short). It
/// decodes to a codeword within `t` bits of the word, or reports
/// uncorrectable; never panics. A packet of the remaining bytes, after
/// encoding and the same word's bits flipped into its first codeword,
/// decodes to itself or an error.
pub fn bch_decode(data: &[u8]) {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let t = usize::from(first) % groupwire_codec::BCH_MAX_T + 1;
    let code = groupwire_codec::Bch::new(t).expect("t in 1..=31");
    let mut word = [0u8; 16];
    let n = rest.len().min(16);
    word[..n].copy_from_slice(&rest[..n]);
    let word = u128::from_le_bytes(word);
    if let Ok(d) = code.decode(word) {
        let distance = (code.encode(d.message) ^ (word & (u128::MAX >> 1))).count_ones();
        assert_eq!(distance, d.corrected, "the correction is the distance");
        assert!(distance as usize <= t, "corrected beyond t");
    }
    let packet = &rest[n..];
    let mut words = code.encode_packet(packet);
    if let Some(w) = words.first_mut() {
        *w ^= word & (u128::MAX >> 1);
    }
    let mut out = Vec::new();
    if code.decode_packet(&words, packet.len(), &mut out).is_ok() {
        // Within t of the sent codeword decodes back; farther may
        // miscorrect, but only to a packet of the same length.
        assert_eq!(out.len(), packet.len());
        if (word & (u128::MAX >> 1)).count_ones() as usize <= t {
            assert_eq!(out, packet, "errors within t are corrected");
        }
    }
    // The wrong number of codewords is an error, not a panic.
    assert!(
        code.decode_packet(&words, packet.len() + 64, &mut out)
            .is_err()
    );
}

/// The common datagram header: `parse(emit(parse(x))) == parse(x)`.
pub fn header(data: &[u8]) {
    use groupwire_proto::wire::header::{Packet, Repr};
    if let Ok(r) = Repr::parse(&Packet::new_unchecked(data)) {
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(Repr::parse(&Packet::new_unchecked(&buf[..])), Ok(r));
    }
}

/// AFEC data packets: whatever parses re-emits to bytes that parse back
/// to the same value.
pub fn afec_data(data: &[u8]) {
    use groupwire_proto::wire::afec::DataRepr;
    if let Ok(r) = DataRepr::parse(data) {
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut buf);
        assert_eq!(DataRepr::parse(&buf).as_ref(), Ok(&r));
    }
}

/// AFEC control packets: `parse(emit(parse(x))) == parse(x)` (reserved
/// bytes are ignored on parse, so the bytes themselves may differ).
pub fn afec_control(data: &[u8]) {
    use groupwire_proto::wire::afec::ControlRepr;
    if let Ok(r) = ControlRepr::parse(data) {
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut buf);
        assert_eq!(ControlRepr::parse(&buf).as_ref(), Ok(&r));
    }
}

/// A whole AFEC endpoint fed arbitrary datagrams (the input split at 0xFF
/// bytes, time advancing 7 ms between them) never panics; its memory is
/// bounded by its own limits.
pub fn afec_endpoint(data: &[u8]) {
    use groupwire_proto::afec::{AfecConfig, AfecEndpoint};
    let mut e = AfecEndpoint::new(AfecConfig::new(1)).expect("default config is valid");
    let peer: SocketAddr = "10.0.0.2:7400".parse().expect("valid address");
    e.add_peer(peer);
    let mut now = Instant::ZERO;
    for (i, chunk) in data.split(|b| *b == 0xff).enumerate() {
        now = Instant::from_millis(i as u64 * 7);
        e.handle_datagram(now, peer, chunk);
        while e.poll_transmit(now).is_some() {}
        while e.poll_event().is_some() {}
        e.handle_timeout(now);
    }
    while e.poll_transmit(now).is_some() {}
}

/// Block-FEC data packets and reports: whatever parses re-emits to bytes
/// that parse back to the same value.
pub fn block_packet(data: &[u8]) {
    use groupwire_proto::wire::block::{DataRepr, ReportRepr};
    // With and without packets that carry no checksum.
    for allow_unchecked in [false, true] {
        if let Ok(r) = DataRepr::parse_with(data, allow_unchecked) {
            let mut buf = vec![0u8; r.buffer_len()];
            r.emit(&mut buf);
            assert_eq!(DataRepr::parse_with(&buf, allow_unchecked).as_ref(), Ok(&r));
        }
    }
    if let Ok(r) = ReportRepr::parse(data) {
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut buf);
        assert_eq!(ReportRepr::parse(&buf), Ok(r));
    }
}

/// A block-FEC endpoint fed hostile datagrams (split at 0xFF bytes) never
/// panics, and the blocks it holds stay within its configured cap.
///
/// Each datagram that looks like a data packet or a report gets a valid
/// CRC-32 first, so the hostile values reach the machine on stable Rust
/// too (the fuzz build skips the check, `cfg(fuzzing)`; the corpus replay
/// does not): a CRC is no defence against a sender who computes it.
pub fn block_endpoint(data: &[u8]) {
    use groupwire_proto::block::{
        BlockEndpoint, BlockReceiver, BlockSender, ReceiverConfig, SenderConfig,
    };
    let peer: SocketAddr = "127.0.0.1:9".parse().expect("valid address");
    let rx = ReceiverConfig {
        max_blocks: 8,
        ..ReceiverConfig::default()
    };
    let mut ep = BlockEndpoint::new(
        BlockSender::new(SenderConfig::new(peer, 4)),
        BlockReceiver::new(rx),
    );
    let mut now = Instant::ZERO;
    for d in data.split(|&b| b == 0xFF).filter(|d| !d.is_empty()) {
        let d = &with_valid_crc(d);
        ep.handle_datagram(now, peer, d);
        now += Duration::from_millis(3);
        ep.handle_timeout(now);
        while ep.poll_transmit(now).is_some() {}
        while ep.poll_event().is_some() {}
        assert!(ep.receiver.blocks_held() <= 8);
    }
}

/// `d` with its block-FEC checksum recomputed, if it is long enough to be
/// a data packet or is exactly a report.
fn with_valid_crc(d: &[u8]) -> Vec<u8> {
    use groupwire_proto::wire::block::{
        DATA_HEADER_LEN, REPORT_LEN, RUNS_LEN, seal_data, seal_report,
    };
    use groupwire_proto::wire::header::{Kind, Packet};
    let mut d = d.to_vec();
    let kind = Packet::new_checked(&d[..]).map(|p| Kind::try_from(p.kind_raw()));
    match kind {
        Ok(Ok(Kind::BlockData)) if d.len() >= DATA_HEADER_LEN => seal_data(&mut d),
        Ok(Ok(Kind::BlockReport)) if [REPORT_LEN, REPORT_LEN + RUNS_LEN].contains(&d.len()) => {
            seal_report(&mut d);
        }
        _ => {}
    }
    d
}

/// Relay frames: whatever decodes re-encodes to a frame that decodes to
/// the same value, and the stream decoder cuts frames back out whole,
/// never returning more than it was fed.
pub fn relay_frame(data: &[u8]) {
    use groupwire_relay::frame::{DEFAULT_MAX_FRAME, FrameDecoder, decode, encode};
    if let Ok(env) = decode(data, DEFAULT_MAX_FRAME) {
        let bytes = encode(env.request, &env.frame);
        assert_eq!(decode(&bytes, DEFAULT_MAX_FRAME).as_ref(), Ok(&env));
    }
    let mut d = FrameDecoder::new(4096);
    d.extend(data);
    let mut total = 0;
    while let Ok(Some(f)) = d.next_frame() {
        total += f.len();
        let _ = decode(&f, 4096);
    }
    assert!(total <= data.len());
}

/// The loss models' one-line text form (`--loss`, scenario files): what
/// parses prints back to text that parses to the same model, and every
/// valid model builds and runs. Input starting with `trace` is not parsed
/// as a model (its text form names a file to read) but as a trace's
/// contents, which must build and replay.
pub fn loss_model(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let trimmed = text.trim_start();
    if trimmed
        .get(..5)
        .is_some_and(|k| k.eq_ignore_ascii_case("trace"))
    {
        let contents = &trimmed[5..];
        if let Ok(trace) = LossTrace::parse("fuzz", contents) {
            let n = trace.pattern().len();
            let mut process = LossModel::Trace(trace)
                .build()
                .expect("a parsed trace builds");
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
            for _ in 0..n.min(64) + 1 {
                let _ = process.on_packet(Instant::ZERO, 40, &mut rng);
            }
        }
        return;
    }
    let Ok(model) = text.parse::<LossModel>() else {
        return;
    };
    let printed = model.to_string();
    let again: LossModel = printed
        .parse()
        .unwrap_or_else(|e| panic!("{text:?} printed as {printed:?}, which fails: {e}"));
    assert_eq!(again, model, "{text:?} printed as {printed:?}");
    if let Ok(mut process) = model.build() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        // Times that cross segment boundaries of a `schedule:` model.
        for (i, len) in [1, 40, 1500].into_iter().enumerate() {
            let now = Instant::from_secs(i as u64 * 37);
            let _ = process.on_packet(now, len, &mut rng);
        }
    }
}

/// Scenario files and `--set key=value` overrides: parsing never panics,
/// a parsed scenario validates without panicking and prints to TOML that
/// reads back to the same scenario. Input starting with `set:` is a list
/// of `key=value` lines applied to each built-in scenario in turn.
pub fn scenario(data: &[u8]) {
    use groupwire_sim::scenario::Scenario;
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let check = |s: &Scenario| {
        let _ = s.validate();
        let toml = s.to_toml();
        let again = Scenario::from_toml(&toml)
            .unwrap_or_else(|e| panic!("printed TOML does not read back: {e}\n{toml}"));
        assert_eq!(&again, s, "{toml}");
    };
    if let Some(sets) = text.strip_prefix("set:") {
        for b in groupwire_sim::scenario::builtins() {
            let mut s = (b.make)();
            let all_applied = sets
                .lines()
                .filter_map(|l| l.split_once('='))
                .all(|(k, v)| s.set(k.trim(), v.trim()).is_ok());
            if all_applied {
                check(&s);
            }
        }
    } else if let Ok(s) = Scenario::from_toml(text) {
        check(&s);
    }
}
