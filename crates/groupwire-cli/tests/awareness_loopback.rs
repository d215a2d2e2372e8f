//! AFEC on real sockets: sender → link emulator → receiver on loopback, in
//! one tokio runtime, through the library APIs the CLI uses.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use groupwire_link::{LinkConfig, LossModel};
use groupwire_proto::afec::{AfecConfig, AfecEndpoint, AfecEvent, Framing, Mode, Step, TypeQos};
use groupwire_proto::wire::afec::MsgType;
use groupwire_proto::{Bitrate, Instant};
use groupwire_sim::traffic::{Telepointer, TelepointerParams, schedule};
use groupwire_tokio::{Clock, Driver, Emulator, EmulatorConfig, EmulatorStats};
use tokio::net::UdpSocket;

const TP: MsgType = MsgType::new(*b"TP");
/// Streaming time per flow; both flows run at once.
const STREAM: Duration = Duration::from_secs(18);

/// What one flow measured.
#[derive(Debug)]
struct Outcome {
    /// The receiver's MER over its window at the end.
    windowed_mer: f64,
    /// The sender's code set size at the end.
    code_set: f64,
    sent: u64,
    delivered: u64,
    naks: u64,
    emulator: EmulatorStats,
}

/// Streams a telepointer trace from a sender in `mode`/`step`, framed as
/// `framing`, through a 256 kbit/s emulated link with ~20% bursty loss to
/// a receiver (which reads either framing).
async fn flow(mode: Mode, step: Step, link_seed: u64, framing: Framing) -> Outcome {
    let loopback: SocketAddr = "127.0.0.1:0".parse().expect("address");
    // Receiver: the paper's 5-6% band, with a window and activity gate
    // scaled down so the controller acts within seconds, not minutes.
    // No message lifetime: on a host stalled by other work for longer than
    // the default 400 ms, copies would expire and count as lost, and this
    // test is about the controller, not the host (the lifetime has its own
    // tests in groupwire-proto).
    let forever = TypeQos {
        lifetime: None,
        ..TypeQos::telepointer()
    };
    let mut rx_cfg = AfecConfig::new(2)
        .mode(mode)
        .step(step)
        .default_qos(forever)
        .mer_window(200)
        .gate_messages(20);
    rx_cfg.min_window = 20;
    let rx_socket = UdpSocket::bind(loopback).await.expect("bind receiver");
    let rx_addr = rx_socket.local_addr().expect("bound");
    let clock = Clock::start();
    let (rx_driver, rx, mut rx_events) = Driver::new(
        AfecEndpoint::new(rx_cfg).expect("valid config"),
        rx_socket,
        clock,
    )
    .expect("receiver driver");
    let rx_task = rx_driver.spawn();
    let events_task = tokio::spawn(async move {
        let (mut delivered, mut naks) = (0u64, 0u64);
        while let Some(e) = rx_events.recv().await {
            match e {
                AfecEvent::Delivered(_) => delivered += 1,
                AfecEvent::Requested { nak: true, .. } => naks += 1,
                _ => {}
            }
        }
        (delivered, naks)
    });

    // Emulator: Dyck & Gutwin's 256 kbit/s line with their burst pattern
    // at start=0.08 (about 20% loss), lossless back.
    let loss: LossModel = "burst:start=0.08,len=1..5".parse().expect("loss model");
    let link = LinkConfig::new()
        .rate(Bitrate::kbps(256))
        .latency(Duration::from_millis(10));
    let emu =
        Emulator::bind(EmulatorConfig::new(loopback, rx_addr).lossy_forward(link, link_seed, loss))
            .await
            .expect("emulator binds")
            .spawn()
            .expect("bound");
    let emu_addr = emu.local_addr();

    // Sender: a clustered telepointer at up to 100 updates/s.
    let mut tx_ep = AfecEndpoint::new(
        AfecConfig::new(1)
            .mode(mode)
            .step(step)
            .default_qos(forever)
            .framing(framing),
    )
    .expect("valid");
    tx_ep.add_peer(emu_addr);
    let tx_socket = UdpSocket::bind(loopback).await.expect("bind sender");
    let (tx_driver, tx, _tx_events) = Driver::new(tx_ep, tx_socket, clock).expect("sender driver");
    let tx_task = tx_driver.spawn();
    let params = TelepointerParams {
        max_rate: 100.0,
        ..TelepointerParams::default()
    };
    let msgs = schedule(
        &mut Telepointer::new(params, Instant::ZERO),
        Instant::ZERO + STREAM,
        &mut groupwire_sim::rng::stream(1, "telepointer", 0),
    );
    let start = clock.now();
    for m in &msgs {
        tokio::time::sleep_until(clock.to_tokio(start + m.at.since_epoch())).await;
        let payload = Bytes::from(vec![0u8; m.size as usize]);
        let sampled = start + m.at.since_epoch();
        tx.command(move |ep, now| {
            ep.send_sampled(now, sampled, TP, payload)
                .expect("a 40-byte message fits");
        })
        .await
        .expect("sender running");
    }
    tokio::time::sleep(Duration::from_millis(300)).await;

    let windowed_mer = rx
        .call(|ep, _| ep.mer(1, TP))
        .await
        .expect("receiver running")
        .expect("messages arrived");
    let (code_set, sent) = tx
        .call(move |ep, _| (ep.code_set_size(emu_addr, TP), ep.stats().messages_sent))
        .await
        .expect("sender running");
    drop((tx, rx));
    tx_task.await.expect("task").expect("sender driver");
    rx_task.await.expect("task").expect("receiver driver");
    let (delivered, naks) = events_task.await.expect("events");
    let emulator = emu.stop().await.expect("emulator");
    Outcome {
        windowed_mer,
        code_set,
        sent,
        delivered,
        naks,
        emulator,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fractional_afec_holds_its_mer_where_udp_does_not() {
    let (udp, afec, pred, red) = tokio::join!(
        flow(Mode::Plain, Step::Integer, 7, Framing::Native),
        flow(Mode::Adaptive, Step::Fractional(0.1), 7, Framing::Native),
        flow(Mode::Adaptive, Step::Predictive, 7, Framing::Native),
        flow(Mode::Adaptive, Step::Fractional(0.1), 7, Framing::Red),
    );
    eprintln!("udp:  {udp:?}\nafec: {afec:?}\npred: {pred:?}\nred:  {red:?}");
    for o in [&udp, &afec, &pred, &red] {
        assert!(o.delivered <= o.sent, "{o:?}");
        let f = &o.emulator.forward;
        let link_loss = f.lost as f64 / f.received as f64;
        assert!(
            (0.12..0.30).contains(&link_loss),
            "the emulated link loses about 20%: {f:?}"
        );
    }
    // Plain UDP loses what the link loses.
    assert!(udp.windowed_mer > 0.12, "udp MER {}", udp.windowed_mer);
    assert!((udp.code_set - 1.0).abs() < 1e-9);
    // AFEC raised redundancy and brought the MER down, toward its 5-6% band.
    assert!(afec.naks > 0, "the receiver asked for more redundancy");
    assert!(afec.code_set > 1.0, "code set size {}", afec.code_set);
    assert!(afec.windowed_mer < 0.12, "afec MER {}", afec.windowed_mer);
    assert!(
        afec.windowed_mer < udp.windowed_mer - 0.05,
        "afec {} vs udp {}",
        afec.windowed_mer,
        udp.windowed_mer
    );
    // The same controller over RTP/RED, its NAK/INC in RTCP APP packets
    // and one MER for the stream, does the same.
    assert!(red.naks > 0, "the RED receiver asked for more redundancy");
    assert!(red.code_set > 1.0, "RED code set size {}", red.code_set);
    assert!(
        red.windowed_mer < udp.windowed_mer - 0.05,
        "red {} vs udp {}",
        red.windowed_mer,
        udp.windowed_mer
    );
    // The predictive controller jumps to the size the loss runs call for.
    assert!(pred.code_set > 2.0, "code set size {}", pred.code_set);
    assert!(
        pred.windowed_mer < 0.12,
        "afec-pred MER {}",
        pred.windowed_mer
    );
}
