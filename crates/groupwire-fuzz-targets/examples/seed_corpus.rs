//! Writes seed inputs for the targets whose inputs are structured
//! (`relay_core`, `scenario`, `tunnel_endpoint`, and the block-FEC wire
//! format as the current sender emits it) into `fuzz/corpus/`, so a campaign starts
//! from inputs that reach deep into the code instead of rediscovering the
//! frame layout. Run once after changing a target's input format:
//!
//! ```sh
//! cargo run -p groupwire-fuzz-targets --example seed_corpus
//! ```

use std::path::Path;

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use groupwire_proto::block::{
    BlockEndpoint, BlockReceiver, BlockSender, ReceiverConfig, SenderConfig,
};
use groupwire_proto::{Instant, Machine};
use groupwire_relay::frame::{ActivityMode, Frame, Role, encode};
use groupwire_sim::scenario::builtins;

/// One `relay_core` operation: client `slot` sends `frame`.
fn send(out: &mut Vec<u8>, slot: u8, frame: &Frame) {
    let bytes = encode(7, frame);
    assert!(bytes.len() <= 255, "seed frames fit the one-byte length");
    out.extend([slot << 4, bytes.len() as u8]);
    out.extend_from_slice(&bytes);
}

fn hello(name: &str) -> Frame {
    Frame::Hello {
        max_version: 1,
        window: 0,
        token: String::new(),
        name: name.into(),
    }
}

/// What an XOR tunnel (`xor:3x3`, session 0) sends for ten datagrams,
/// less the third media packet.
fn xor_packets() -> Vec<Bytes> {
    use groupwire_proto::xor::{XorEndpoint, XorEndpointConfig, XorLayout};
    let peer: SocketAddr = "127.0.0.1:2".parse().expect("addr");
    let mut ep = XorEndpoint::new(XorEndpointConfig::new(peer, XorLayout::matrix(3, 3)))
        .expect("valid layout");
    let now = Instant::ZERO;
    let mut out = Vec::new();
    for i in 0..10u8 {
        ep.send(now, &vec![i; 20 + usize::from(i) * 7])
            .expect("fits");
    }
    ep.handle_timeout(now + Duration::from_millis(5));
    let mut media = 0;
    while let Some(t) = ep.poll_transmit(now) {
        let is_media = t
            .payload
            .get(1)
            .is_some_and(|b| b & 0x7f == groupwire_proto::xor::MEDIA_PT);
        media += usize::from(is_media);
        if !(is_media && media == 3) {
            out.push(t.payload);
        }
    }
    out
}

/// What a sliding-window sender (`sliding:w=8,o=0.5`, the
/// `tunnel_endpoint` target's) sends for ten datagrams on links of
/// `max_datagram` bytes, the third source lost (rebuilt).
fn sliding_packets(max_datagram: usize) -> Vec<Bytes> {
    use groupwire_proto::sliding::{SOURCE_TYPE, SlidingCode, SlidingConfig, SlidingEndpoint};
    let peer: SocketAddr = "127.0.0.1:2".parse().expect("addr");
    let code = SlidingCode {
        window: 8,
        overhead: 0.5,
    };
    let mut cfg = SlidingConfig::new(peer, code);
    cfg.max_datagram = max_datagram;
    let mut ep = SlidingEndpoint::new(cfg).expect("valid code");
    let now = Instant::ZERO;
    for i in 0..10u8 {
        ep.send(now, &vec![i; 20 + usize::from(i) * 7])
            .expect("fits");
    }
    let mut out = Vec::new();
    let mut sources = 0;
    while let Some(t) = ep.poll_transmit(now) {
        let is_source = t.payload[0] == SOURCE_TYPE;
        sources += usize::from(is_source);
        if !(is_source && sources == 3) {
            out.push(t.payload);
        }
    }
    out
}

/// What an AFEC sender in RTP/RED framing (adaptive) sends to a receiver
/// over a wire losing every fourth data packet, and the receiver's RTCP
/// feedback: (data, control).
fn red_packets() -> (Vec<Bytes>, Vec<Bytes>) {
    use groupwire_proto::afec::{AfecConfig, AfecEndpoint, Framing};
    use groupwire_proto::wire::afec::MsgType;
    let (a, b): (SocketAddr, SocketAddr) = (
        "127.0.0.1:1".parse().expect("addr"),
        "127.0.0.1:2".parse().expect("addr"),
    );
    let small = |cfg: AfecConfig| AfecConfig {
        min_window: 10,
        gate_messages: 10,
        ..cfg.mer_window(40)
    };
    let mut tx = AfecEndpoint::new(small(AfecConfig::new(1).framing(Framing::Red))).expect("valid");
    tx.add_peer(b);
    let mut rx = AfecEndpoint::new(small(AfecConfig::new(2))).expect("valid");
    let (mut data, mut control) = (Vec::new(), Vec::new());
    let mut now = Instant::ZERO;
    for i in 0..120u8 {
        now += Duration::from_millis(20);
        if i < 100 {
            tx.send(now, MsgType::new(*b"TP"), Bytes::from(vec![i % 0x7f; 12]))
                .expect("fits");
        }
        tx.handle_timeout(now);
        while let Some(t) = tx.poll_transmit(now) {
            if data.len() % 4 != 3 {
                rx.handle_datagram(now, a, &t.payload);
            }
            data.push(t.payload);
        }
        rx.handle_timeout(now);
        while let Some(t) = rx.poll_transmit(now) {
            tx.handle_datagram(now, b, &t.payload);
            control.push(t.payload);
        }
    }
    (data, control)
}

/// What a block-FEC endpoint sends for ten datagrams in blocks of four
/// (sources, repairs), and what its peer's receiver reports back.
fn block_packets() -> (Vec<Bytes>, Vec<Bytes>) {
    let (a, b): (SocketAddr, SocketAddr) = (
        "127.0.0.1:1".parse().expect("addr"),
        "127.0.0.1:2".parse().expect("addr"),
    );
    let endpoint = |peer| {
        BlockEndpoint::new(
            BlockSender::new(SenderConfig::new(peer, 4)),
            BlockReceiver::new(ReceiverConfig::default()),
        )
    };
    let (mut tx, mut rx) = (endpoint(b), endpoint(a));
    let mut now = Instant::ZERO;
    for i in 0..10u8 {
        tx.sender
            .send(now, Bytes::from(vec![i; 20 + usize::from(i) * 7]))
            .expect("queued");
    }
    tx.sender.flush();
    let (mut data, mut reports) = (Vec::new(), Vec::new());
    for _ in 0..40 {
        now += Duration::from_millis(5);
        tx.handle_timeout(now);
        while let Some(t) = tx.poll_transmit(now) {
            rx.handle_datagram(now, a, &t.payload);
            data.push(t.payload);
        }
        rx.handle_timeout(now);
        while let Some(t) = rx.poll_transmit(now) {
            reports.push(t.payload);
        }
    }
    (data, reports)
}

/// `monitor_report` seeds: reports a receiver made of a lossy, reordered
/// stream, and walks (see the target's docs) that reorder, duplicate,
/// drop in runs, cross the wrap and go idle long enough to probe.
fn monitor_seeds() -> Vec<(&'static str, Vec<u8>)> {
    use groupwire_fuzz_targets::monitor_report::OP_LEN;
    use groupwire_proto::session::monitor::{MonitorConfig, ReceiveMonitor, wire_ts};
    let mut rx = ReceiveMonitor::new(MonitorConfig::default());
    let mut out = Vec::new();
    for i in 0..400u32 {
        let now = Instant::from_micros(u64::from(i) * 500);
        let seq = if i % 10 == 3 {
            i + 1
        } else if i % 10 == 4 {
            i - 1
        } else {
            i
        };
        if i % 17 < 2 {
            continue;
        }
        rx.on_packet(now, seq, wire_ts(now) ^ (i % 3), 200 + i as usize % 900);
        if let Some(r) = rx.poll_report(now) {
            if out.len() < 4 {
                let mut b = Vec::new();
                r.encode(&mut b);
                out.push((
                    ["report-0", "report-1", "report-2", "report-3"][out.len()],
                    b,
                ));
            }
        }
    }
    // One op: clock step, seq step (i16), ts delay, size, flags
    // (0x80 drop, 0x40 report, 0x20 probe).
    let op = |dt: u8, step: i16, delay: u8, flags: u8| -> [u8; OP_LEN] {
        let s = step.to_be_bytes();
        [dt, s[0], s[1], delay, 120, flags]
    };
    let mut steady = Vec::new();
    let mut bursty = Vec::new();
    let mut idle = Vec::new();
    for i in 0..300u16 {
        let report = if i % 20 == 19 { 0x40 } else { 0 };
        steady.extend(op(10, 0, (i % 7) as u8, report));
        let drop = if i % 50 < 4 || i % 13 == 0 { 0x80 } else { 0 };
        let step = match i % 9 {
            4 => 1,
            5 => -1,
            7 => -3,
            _ => 0,
        };
        bursty.extend(op(10, step, (i % 5) as u8 * 9, drop | report));
        let dt = if i > 150 { 255 } else { 10 };
        let quiet = if i > 150 && i % 2 == 0 { 0x80 } else { 0 };
        idle.extend(op(dt, 0, 3, report | quiet | 0x20));
    }
    out.extend([("steady", steady), ("bursty", bursty), ("idle", idle)]);
    out
}

fn main() -> std::io::Result<()> {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
    let g = || "g".to_owned();
    let mut session = Vec::new();
    send(&mut session, 0, &hello("alice"));
    send(&mut session, 1, &hello("bob"));
    send(&mut session, 2, &hello("carol"));
    send(
        &mut session,
        0,
        &Frame::CreateGroup {
            group: g(),
            group_type: "chat".into(),
            priority: 6,
            initial_state: Bytes::from_static(b"s0"),
        },
    );
    for (slot, role) in [
        (0, Role::Principal),
        (1, Role::Observer),
        (2, Role::MembershipObserver),
    ] {
        let join = Frame::Join {
            group: g(),
            role,
            mode: ActivityMode::Active,
            watch_membership: slot != 1,
            resume_after: None,
        };
        send(&mut session, slot, &join);
    }
    let mut updates = session.clone();
    for i in 0..5u8 {
        let payload = Bytes::from(vec![i; 40]);
        let update = Frame::Send {
            group: g(),
            msg_type: 1,
            sent_at_micros: 5,
            payload,
        };
        send(&mut updates, 0, &update);
    }
    let checkpoint = Frame::Checkpoint {
        group: g(),
        seq: 3,
        state: Bytes::from_static(b"s3"),
    };
    send(&mut updates, 0, &checkpoint);
    let mut locks = session.clone();
    for slot in [0, 1] {
        let acquire = Frame::LockAcquire {
            group: g(),
            lock: "pen".into(),
            wait: true,
        };
        send(&mut locks, slot, &acquire);
    }
    locks.extend([0x04, 0]); // client 0 hangs up holding the lock
    let mut churn = updates.clone();
    churn.extend([0x15, 1, 50]); // half a second passes
    let role_change = Frame::ChangeRole {
        group: g(),
        role: Role::Principal,
    };
    send(&mut churn, 1, &role_change);
    send(
        &mut churn,
        0,
        &Frame::SetPriority {
            group: g(),
            priority: 2,
        },
    );
    send(&mut churn, 0, &Frame::Leave { group: g() });
    send(&mut churn, 1, &Frame::DeleteGroup { group: g() });
    send(&mut churn, 3, &Frame::Ping { nonce: 9 });
    let dir = corpus.join("relay_core");
    std::fs::create_dir_all(&dir)?;
    for (name, input) in [
        ("session", session),
        ("updates", updates),
        ("locks", locks),
        ("churn", churn),
    ] {
        std::fs::write(dir.join(format!("seed-{name}")), input)?;
    }

    let (data, reports) = block_packets();
    assert!(
        !data.is_empty() && !reports.is_empty(),
        "the block pair exchanged packets"
    );
    let dir = corpus.join("block_packet");
    for (i, p) in data.iter().chain(&reports).enumerate() {
        std::fs::write(dir.join(format!("seed-{i:02}")), p)?;
    }
    let joined = |ps: &[Bytes]| ps.join(&0xFF);
    let dir = corpus.join("block_endpoint");
    std::fs::write(dir.join("seed-stream"), joined(&data))?;
    std::fs::write(
        dir.join("seed-stream-and-reports"),
        joined(&[data.clone(), reports].concat()),
    )?;

    // tunnel_endpoint: the same stream from the peer, keyless and keyed,
    // learned and configured peer, with the application answering, a
    // stranger, and a silence past the peer's idle time.
    use groupwire_fuzz_targets::tunnel_endpoint::{
        CFG_CHACHA, CFG_FIXED_PEER, CFG_KEYED, CFG_SLIDING, CFG_SLIDING_TARGET, CFG_XOR, OP_APP,
        OP_FROM_PEER, OP_FROM_STRANGER, OP_SEALED, OP_WAIT, SLIDING_MAX_DATAGRAM,
    };
    let op = |out: &mut Vec<u8>, op: u8, body: &[u8]| {
        out.extend([op, u8::try_from(body.len()).expect("seed ops fit one byte")]);
        out.extend_from_slice(body);
    };
    let dir = corpus.join("tunnel_endpoint");
    std::fs::create_dir_all(&dir)?;
    for (name, cfg, from) in [
        ("keyless-learned", 0, OP_FROM_PEER),
        ("keyless-fixed", CFG_FIXED_PEER, OP_FROM_PEER),
        ("keyed-aes-learned", CFG_KEYED, OP_SEALED),
        (
            "keyed-chacha-fixed",
            CFG_KEYED | CFG_CHACHA | CFG_FIXED_PEER,
            OP_SEALED,
        ),
    ] {
        let mut input = vec![cfg];
        for (i, p) in data.iter().enumerate() {
            op(&mut input, from, p);
            if i % 3 == 0 {
                op(&mut input, OP_APP, b"a reply from the application");
                op(&mut input, OP_WAIT, &[2]);
            }
            if i == 5 {
                op(&mut input, OP_FROM_STRANGER, p);
            }
        }
        op(&mut input, OP_WAIT, &[1]); // past the idle time
        op(&mut input, OP_FROM_STRANGER, &data[0]);
        std::fs::write(dir.join(format!("seed-{name}")), input)?;
    }
    // The same in XOR mode (`--fec xor:3x3`): the peer's media and parity
    // for ten datagrams, the third media packet lost (rebuilt).
    let xor = xor_packets();
    for (name, cfg, from) in [
        ("xor-keyless-learned", CFG_XOR, OP_FROM_PEER),
        (
            "xor-keyed-fixed",
            CFG_XOR | CFG_KEYED | CFG_FIXED_PEER,
            OP_SEALED,
        ),
    ] {
        let mut input = vec![cfg];
        for (i, p) in xor.iter().enumerate() {
            op(&mut input, from, p);
            if i % 4 == 0 {
                op(&mut input, OP_APP, b"a reply from the application");
            }
        }
        op(&mut input, OP_WAIT, &[2]);
        std::fs::write(dir.join(format!("seed-{name}")), input)?;
    }
    // And with a sliding-window code (`--fec sliding:w=8,o=0.5`): ten
    // datagrams and their repairs, the third source lost (rebuilt); the
    // keyed link's datagrams are a seal smaller, and so its symbols.
    let keyed_max = SLIDING_MAX_DATAGRAM - groupwire_proto::tunnel::seal::OVERHEAD;
    for (name, cfg, from, max) in [
        (
            "sliding-keyless-learned",
            CFG_SLIDING,
            OP_FROM_PEER,
            SLIDING_MAX_DATAGRAM,
        ),
        (
            "sliding-keyed-fixed",
            CFG_SLIDING | CFG_KEYED | CFG_FIXED_PEER,
            OP_SEALED,
            keyed_max,
        ),
    ] {
        let mut input = vec![cfg];
        for (i, p) in sliding_packets(max).iter().enumerate() {
            op(&mut input, from, p);
            if i % 4 == 0 {
                op(&mut input, OP_APP, b"a reply from the application");
            }
        }
        op(&mut input, OP_WAIT, &[2]);
        std::fs::write(dir.join(format!("seed-{name}")), input)?;
    }
    // And its closed loop (`--fec sliding:target`): the same packets, and
    // a peer's report (cumulative counts: 9 received, 1 lost in 1 run).
    let mut input = vec![CFG_SLIDING | CFG_SLIDING_TARGET];
    for p in sliding_packets(SLIDING_MAX_DATAGRAM) {
        op(&mut input, OP_FROM_PEER, &p);
    }
    let mut report = vec![groupwire_proto::sliding::REPORT_TYPE, 0, 0, 0, 0];
    for count in [9u32, 1, 1, 0] {
        report.extend_from_slice(&count.to_be_bytes());
    }
    op(&mut input, OP_FROM_PEER, &report);
    op(&mut input, OP_APP, b"a reply from the application");
    op(&mut input, OP_WAIT, &[2]);
    std::fs::write(dir.join("seed-sliding-target-keyless-learned"), input)?;

    // rtp_red: RTP/RED data and RTCP feedback as the endpoints emit them,
    // and the RED payloads alone. afec_red_endpoint: a sender's messages
    // (chunks starting with 0) with a receiver's RTCP feedback, and a
    // stranger's RED stream to receive.
    let (red_data, red_control) = red_packets();
    assert!(
        !red_data.is_empty() && !red_control.is_empty(),
        "the RED pair exchanged data and feedback"
    );
    let dir = corpus.join("rtp_red");
    std::fs::create_dir_all(&dir)?;
    for (i, p) in red_data
        .iter()
        .step_by(10)
        .chain(red_control.iter().take(3))
        .enumerate()
    {
        std::fs::write(dir.join(format!("seed-{i:02}")), p)?;
    }
    std::fs::write(dir.join("seed-payload"), &red_data[20][12..])?;
    let dir = corpus.join("afec_red_endpoint");
    std::fs::create_dir_all(&dir)?;
    let mut sending = Vec::new();
    for i in 0..30u8 {
        sending.push([&[0u8, i, i, i][..]].concat().into());
        if i % 10 == 9 {
            sending.extend(red_control.iter().take(2).cloned());
        }
    }
    std::fs::write(dir.join("seed-sending"), joined(&sending))?;
    std::fs::write(dir.join("seed-receiving"), joined(&red_data[..40]))?;

    let dir = corpus.join("scenario");
    std::fs::create_dir_all(&dir)?;
    for b in builtins() {
        std::fs::write(dir.join(format!("seed-{}", b.name)), (b.make)().to_toml())?;
    }
    let sets = "set:\nduration=3s\nseed=7\nloss=gilbert:p=0.01,r=0.2\nflows=[1,2]\nrtt=100ms\n";
    std::fs::write(dir.join("seed-sets"), sets)?;

    let dir = corpus.join("monitor_report");
    std::fs::create_dir_all(&dir)?;
    for (name, input) in monitor_seeds() {
        std::fs::write(dir.join(format!("seed-{name}")), input)?;
    }
    Ok(())
}
