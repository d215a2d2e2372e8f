use std::time::Duration;

use groupwire_link::{LinkConfig, LossModel, QueueLimit};
use groupwire_proto::Bitrate;
use tokio::net::UdpSocket;

use super::*;

async fn loopback() -> UdpSocket {
    UdpSocket::bind("127.0.0.1:0").await.expect("bind loopback")
}

/// A started emulator toward `target`: its address, live stats, and a stop switch.
struct Running {
    stats: watch::Receiver<EmulatorStats>,
    emu: RunningEmulator,
}

async fn start(cfg: EmulatorConfig) -> Running {
    let emu = Emulator::bind(cfg)
        .await
        .expect("emulator binds")
        .spawn()
        .expect("bound");
    Running {
        stats: emu.stats(),
        emu,
    }
}

impl Running {
    fn addr(&self) -> SocketAddr {
        self.emu.local_addr()
    }
    async fn wait_for(&mut self, f: impl FnMut(&EmulatorStats) -> bool) -> EmulatorStats {
        tokio::time::timeout(Duration::from_secs(60), self.stats.wait_for(f))
            .await
            .expect("emulator reaches the expected state in time")
            .expect("emulator running")
            .clone()
    }
    async fn stop(self) -> EmulatorStats {
        self.emu.stop().await.expect("clean stop")
    }
}

fn cfg(target: &UdpSocket) -> EmulatorConfig {
    EmulatorConfig::new(
        "127.0.0.1:0".parse().expect("address"),
        target.local_addr().expect("bound"),
    )
}

async fn recv(s: &UdpSocket) -> Option<(Vec<u8>, SocketAddr)> {
    let mut buf = vec![0u8; 2048];
    match tokio::time::timeout(Duration::from_secs(5), s.recv_from(&mut buf)).await {
        Ok(Ok((n, src))) => Some((buf[..n].to_vec(), src)),
        Ok(Err(e)) => panic!("recv failed: {e}"),
        Err(_) => None,
    }
}

#[tokio::test(start_paused = true)]
async fn delays_each_direction_by_its_latency() {
    let target = loopback().await;
    let client = loopback().await;
    let emu = start(
        cfg(&target)
            .forward_link(LinkConfig::new().latency(Duration::from_millis(200)))
            .reverse_link(LinkConfig::new().latency(Duration::from_millis(50))),
    )
    .await;
    let t0 = Clock::start();
    client.send_to(b"hello", emu.addr()).await.expect("send");
    let (data, upstream) = recv(&target).await.expect("forwarded");
    assert_eq!(data, b"hello");
    assert_eq!(t0.now().since_epoch(), Duration::from_millis(200));
    assert_ne!(upstream, client.local_addr().expect("bound"));
    target.send_to(b"back", upstream).await.expect("reply");
    let (data, src) = recv(&client).await.expect("returned");
    assert_eq!((data.as_slice(), src), (&b"back"[..], emu.addr()));
    assert_eq!(t0.now().since_epoch(), Duration::from_millis(250));
    let s = emu.stop().await;
    assert_eq!((s.forward.delivered, s.reverse.delivered), (1, 1));
    assert_eq!(s.forward.delivered_bytes, 5);
}

#[tokio::test(start_paused = true)]
async fn drops_what_the_seeded_loss_model_loses() {
    let target = loopback().await;
    let client = loopback().await;
    let loss: LossModel = "bernoulli:0.5".parse().expect("model");
    let mut emu = start(
        cfg(&target).forward_link(
            LinkConfig::new()
                .latency(Duration::from_millis(10))
                .loss(loss)
                .seed(3),
        ),
    )
    .await;
    for i in 0..200u8 {
        client.send_to(&[i], emu.addr()).await.expect("send");
    }
    let s = emu
        .wait_for(|s| s.forward.received == 200 && s.forward.held == 0)
        .await;
    assert_eq!(s.forward.lost + s.forward.delivered, 200);
    assert!((60..140).contains(&s.forward.lost), "{s:?}");
    let mut got = 0;
    while recv(&target).await.is_some() {
        got += 1;
    }
    assert_eq!(got, s.forward.delivered);
    emu.stop().await;
}

#[tokio::test(start_paused = true)]
async fn drops_at_the_tail_of_a_full_queue() {
    let target = loopback().await;
    let client = loopback().await;
    let mut emu = start(
        cfg(&target).forward_link(
            LinkConfig::new()
                .rate(Bitrate::kbps(8))
                .queue(QueueLimit::Packets(4)),
        ),
    )
    .await;
    for _ in 0..20 {
        client.send_to(&[0u8; 72], emu.addr()).await.expect("send");
    }
    let s = emu.wait_for(|s| s.forward.received == 20).await;
    assert_eq!(s.forward.queue_drops, 16, "{s:?}");
    let t0 = Clock::start();
    let mut got = 0;
    while recv(&target).await.is_some() {
        got += 1;
    }
    assert_eq!(got, 4);
    // 100 bytes on the wire at 8 kbit/s: 100 ms each, so the last of four
    // arrives 400 ms after they were offered (5 s of silence follow).
    assert!(t0.now().since_epoch() >= Duration::from_millis(400));
    emu.stop().await;
}

#[tokio::test(start_paused = true)]
async fn holds_at_most_max_held_datagrams() {
    let target = loopback().await;
    let client = loopback().await;
    let mut emu = start(
        cfg(&target)
            .forward_link(LinkConfig::new().latency(Duration::from_secs(1)))
            .max_held(10),
    )
    .await;
    for _ in 0..30 {
        client.send_to(b"x", emu.addr()).await.expect("send");
    }
    let s = emu.wait_for(|s| s.forward.received == 30).await;
    assert_eq!((s.forward.overflow, s.forward.held), (20, 10), "{s:?}");
    let s = emu.wait_for(|s| s.forward.delivered == 10).await;
    assert_eq!(s.forward.max_held, 10);
    emu.stop().await;
}

#[tokio::test(start_paused = true)]
async fn corrupted_datagrams_are_dropped_or_forwarded_flipped() {
    let every_bit: LossModel = "ber:1".parse().expect("model");
    for policy in [CorruptPolicy::Drop, CorruptPolicy::Forward] {
        let target = loopback().await;
        let client = loopback().await;
        let mut emu = start(
            cfg(&target)
                .forward_link(LinkConfig::new().loss(every_bit.clone()))
                .corrupt(policy),
        )
        .await;
        client
            .send_to(&[0x0f, 0x00], emu.addr())
            .await
            .expect("send");
        let s = emu.wait_for(|s| s.forward.received == 1).await;
        assert_eq!(s.forward.corrupted, 1);
        let got = recv(&target).await.map(|(d, _)| d);
        match policy {
            CorruptPolicy::Drop => assert_eq!(got, None),
            _ => assert_eq!(got, Some(vec![0xf0, 0xff])),
        }
        emu.stop().await;
    }
}

#[tokio::test(start_paused = true)]
async fn forgets_the_least_recently_seen_client() {
    let target = loopback().await;
    let mut emu = start(cfg(&target).max_clients(2)).await;
    let clients = [loopback().await, loopback().await, loopback().await];
    for c in &clients {
        c.send_to(b"hi", emu.addr()).await.expect("send");
        let _ = recv(&target).await.expect("forwarded");
    }
    let s = emu.wait_for(|s| s.forward.delivered == 3).await;
    assert_eq!((s.clients, s.clients_evicted), (2, 1));
    emu.stop().await;
}

#[tokio::test]
async fn rejects_an_invalid_link_model() {
    let target = loopback().await;
    // Built directly, not parsed: the parser would refuse it first.
    let loss = LossModel::dyck_burst(0.1, 0);
    let err = Emulator::bind(cfg(&target).forward_link(LinkConfig::new().loss(loss)))
        .await
        .expect_err("a burst of at most 0 packets");
    assert!(matches!(err, EmulatorError::Link(_)), "{err}");
}

#[tokio::test]
async fn rejects_a_classful_queue_it_cannot_drive() {
    let target = loopback().await;
    let qdisc = groupwire_link::Qdisc::priority(vec![groupwire_link::ClassConfig::new("all")]);
    let link = LinkConfig::new().rate(Bitrate::mbps(1)).qdisc(qdisc);
    let err = Emulator::bind(cfg(&target).reverse_link(link))
        .await
        .expect_err("the emulator is FIFO only");
    assert!(matches!(err, EmulatorError::Classful), "{err}");
    assert!(err.to_string().contains("simulator"), "{err}");
}

/// A burst that overflows the listen socket's kernel buffer before the
/// emulator reads a byte: every datagram is either read (and then
/// delivered: the link is perfect) or counted as a socket drop, and none
/// of the drops is counted as link loss. Linux: the drop counts come from
/// `/proc/net/udp`.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn kernel_buffer_overflow_is_counted_as_socket_drops_not_link_loss() {
    let target = loopback().await;
    // A tiny buffer, so the burst overflows it whatever the host.
    let emu = Emulator::bind(cfg(&target).socket_buffer(4096))
        .await
        .expect("emulator binds");
    let addr = emu.local_addr().expect("bound");
    assert!(emu.buffers().recv > 0);
    let client = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    let sent = 2_000u64;
    for i in 0..sent {
        client.send_to(&[i as u8; 1000], addr).expect("send");
    }
    let emu = emu.spawn().expect("bound");
    let mut stats = emu.stats();
    // Wait until every datagram is accounted for (read or dropped): drops
    // are read from the kernel every DROPS_EVERY.
    tokio::time::timeout(
        Duration::from_secs(60),
        stats.wait_for(|s| {
            s.forward.received + s.forward.socket_drops == sent
                && s.forward.delivered == s.forward.received
        }),
    )
    .await
    .expect("all datagrams accounted for in time")
    .expect("running");
    let s = emu.stop().await.expect("clean stop");
    assert!(s.forward.socket_drops > 0, "{s:?}");
    assert_eq!(s.forward.lost, 0, "socket drops are not link loss: {s:?}");
    assert_eq!(s.forward.received + s.forward.socket_drops, sent, "{s:?}");
}

#[tokio::test(start_paused = true)]
async fn schedules_change_the_link_as_the_emulators_clock_runs() {
    let target = loopback().await;
    let client = loopback().await;
    let mut emu = start(
        cfg(&target).forward_link(
            LinkConfig::new()
                .delay_schedule("schedule:1s 10ms; 1s 300ms".parse().expect("schedule"))
                .loss(
                    "schedule:2s none; 1s bernoulli:100%"
                        .parse()
                        .expect("schedule"),
                ),
        ),
    )
    .await;
    let t0 = Clock::start();
    client.send_to(b"early", emu.addr()).await.expect("send");
    recv(&target).await.expect("the first second delivers");
    assert_eq!(t0.now().since_epoch(), Duration::from_millis(10));
    tokio::time::sleep(Duration::from_millis(1490)).await;
    client.send_to(b"later", emu.addr()).await.expect("send");
    recv(&target).await.expect("the second second delivers");
    assert_eq!(t0.now().since_epoch(), Duration::from_millis(1800));
    tokio::time::sleep(Duration::from_secs(1)).await;
    for i in 0..20u8 {
        client.send_to(&[i], emu.addr()).await.expect("send");
    }
    let s = emu.wait_for(|s| s.forward.received == 22).await;
    assert_eq!(
        s.forward.lost, 20,
        "after 2 s every datagram is lost: {s:?}"
    );
    assert!(recv(&target).await.is_none());
    emu.stop().await;
}

// The TCP relay. These run on real time: the assertions are about bytes,
// order and counts, which a loaded machine does not change, and a lower
// bound on time (a rate the relay must enforce).

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// `n` bytes no shift of which matches itself.
fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
}

/// A TCP relay toward `target`.
async fn start_tcp(target: &TcpListener, forward: LinkConfig, reverse: LinkConfig) -> Running {
    let to = target.local_addr().expect("bound");
    let cfg = EmulatorConfig::new("127.0.0.1:0".parse().expect("address"), to)
        .tcp(true)
        .forward_link(forward)
        .reverse_link(reverse);
    start(cfg).await
}

/// Reads everything until the peer closes, within a generous limit.
async fn read_all(s: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), s.read_to_end(&mut got))
        .await
        .expect("the bytes and the close arrive in time")
        .expect("read");
    got
}

#[tokio::test]
async fn tcp_crosses_a_lossy_link_whole_in_order_and_each_loss_is_sent_again() {
    let target = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let lossy = |seed| {
        LinkConfig::new()
            .latency(Duration::from_millis(2))
            .loss("bernoulli:5%".parse().expect("model"))
            .seed(seed)
    };
    let mut emu = start_tcp(&target, lossy(3), lossy(4)).await;
    let to = emu.addr();
    let data = pattern(600_000);
    let reply = pattern(100_000);
    let (sent, answer) = (data.clone(), reply.clone());
    let client = tokio::spawn(async move {
        let mut c = TcpStream::connect(to).await.expect("the relay accepts");
        c.write_all(&sent).await.expect("write");
        c.shutdown().await.expect("close the write side");
        read_all(&mut c).await
    });
    let (mut s, _) = target.accept().await.expect("the relay connects");
    assert_eq!(read_all(&mut s).await, data, "every byte, in order");
    s.write_all(&answer).await.expect("write back");
    drop(s);
    assert_eq!(client.await.expect("client"), reply, "the reply, whole");
    let st = emu.wait_for(|s| s.tcp.open == 0).await;
    assert_eq!((st.tcp.accepted, st.tcp.failed), (1, 0));
    for (d, resent) in [
        (&st.forward, st.tcp.forward_resent),
        (&st.reverse, st.tcp.reverse_resent),
    ] {
        assert!(d.lost > 0, "5% of hundreds of segments: {d:?}");
        assert_eq!(d.lost + d.queue_drops + d.corrupted, resent, "{d:?}");
        // Every segment offered, first or again, was lost or delivered.
        assert_eq!(d.received, d.delivered + resent, "{d:?}");
        assert_eq!(d.held, 0);
    }
    assert_eq!(st.forward.delivered_bytes, data.len() as u64);
    assert_eq!(st.reverse.delivered_bytes, reply.len() as u64);
    // The losses cut the congestion windows, at most once per loss.
    let t = &st.tcp;
    assert!(
        (1..=t.forward_resent).contains(&t.forward_window_cuts),
        "{t:?}"
    );
    assert!(
        (1..=t.reverse_resent).contains(&t.reverse_window_cuts),
        "{t:?}"
    );
    emu.stop().await;
}

#[tokio::test]
async fn tcp_shares_the_links_rate_and_the_window_holds_the_sender_back() {
    let target = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let slow = LinkConfig::new()
        .rate(Bitrate::bps(2_000_000))
        .latency(Duration::from_millis(1));
    let cfg = EmulatorConfig::new(
        "127.0.0.1:0".parse().expect("address"),
        target.local_addr().expect("bound"),
    )
    .tcp(true)
    .tcp_window(32 << 10)
    .forward_link(slow);
    let emu = Emulator::bind(cfg).await.expect("binds");
    assert_eq!(emu.tcp_window(), 32 << 10);
    let to = emu.tcp_addr().expect("a TCP relay");
    assert_eq!(
        to.port(),
        emu.local_addr().expect("bound").port(),
        "one port for both"
    );
    let emu = emu.spawn().expect("bound");
    let mut stats = emu.stats();
    let data = pattern(250_000);
    let sent = data.clone();
    let started = Clock::start();
    let client = tokio::spawn(async move {
        let mut c = TcpStream::connect(to).await.expect("the relay accepts");
        c.write_all(&sent).await.expect("write");
        c.shutdown().await.expect("close");
        // Hold the connection until the target closes.
        read_all(&mut c).await
    });
    let (mut s, _) = target.accept().await.expect("the relay connects");
    // Part way through, the relay holds at most its window in the link.
    let mut first = vec![0u8; 100_000];
    s.read_exact(&mut first).await.expect("read");
    let held = stats.borrow_and_update().forward.held as usize;
    assert!(held * MSS <= 2 * (32 << 10), "{held} segments held");
    let mut got = first;
    got.extend(read_all(&mut s).await);
    let took = started.now().since_epoch();
    assert_eq!(got, data);
    drop(s);
    client.await.expect("client");
    // 250 kB and their headers at 2 Mbit/s: at least a second, however
    // fast or slow the machine.
    let wire = data.len().div_ceil(MSS) * (MSS + TCP_OVERHEAD);
    let least = Duration::from_secs_f64(wire as f64 * 8.0 / 2e6);
    assert!(took >= least.mul_f64(0.95), "{took:?} < {least:?}");
    emu.stop().await.expect("clean stop");
}

#[tokio::test]
async fn tcp_past_max_clients_is_refused_and_a_refusing_target_closes_the_client() {
    // A target that takes connections: the second client is one too many.
    let target = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let cfg = EmulatorConfig::new(
        "127.0.0.1:0".parse().expect("address"),
        target.local_addr().expect("bound"),
    )
    .tcp(true)
    .max_clients(1);
    let mut emu = start(cfg).await;
    let _first = TcpStream::connect(emu.addr()).await.expect("accepted");
    let (_upstream, _) = target.accept().await.expect("relayed");
    let mut second = TcpStream::connect(emu.addr())
        .await
        .expect("the kernel accepts");
    assert!(read_all(&mut second).await.is_empty(), "closed at once");
    let st = emu.wait_for(|s| s.tcp.refused == 1).await;
    assert_eq!((st.tcp.accepted, st.tcp.open), (1, 1));
    emu.stop().await;

    // A target nobody listens on: the client is closed, counted as failed.
    let gone = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let to = gone.local_addr().expect("bound");
    drop(gone);
    let cfg = EmulatorConfig::new("127.0.0.1:0".parse().expect("address"), to).tcp(true);
    let mut emu = start(cfg).await;
    let mut c = TcpStream::connect(emu.addr())
        .await
        .expect("the kernel accepts");
    assert!(read_all(&mut c).await.is_empty(), "closed");
    let st = emu.wait_for(|s| s.tcp.failed == 1).await;
    assert_eq!(st.tcp.open, 0);
    emu.stop().await;
}

#[test]
fn the_automatic_window_is_twice_the_paths_bandwidth_delay_product_within_bounds() {
    let ms = Duration::from_millis;
    assert_eq!(tcp::auto_window(Some(20_000_000), ms(40)), 200_000);
    assert_eq!(tcp::auto_window(Some(1_000_000), ms(10)), 64 << 10);
    assert_eq!(tcp::auto_window(Some(10_000_000_000), ms(200)), 16 << 20);
    assert_eq!(tcp::auto_window(None, ms(40)), 16 << 20);
}

#[test]
fn a_lost_segment_goes_again_when_racks_acks_or_the_tail_probe_would_tell() {
    let ms = Duration::from_millis;
    let lost = Instant::ZERO + ms(100);
    assert_eq!(tcp::resend_at(lost, ms(40), true), lost + ms(50));
    assert_eq!(tcp::resend_at(lost, ms(40), false), lost + ms(80));
    // Loopback's round trip of nothing still waits a millisecond.
    assert_eq!(tcp::resend_at(lost, ms(0), false), lost + ms(2));
}

#[test]
fn the_congestion_window_starts_at_ten_segments_grows_as_renos_and_halves_once_a_round_trip() {
    use tcp::Window;
    let ms = Duration::from_millis;
    let w = Window::new(100 * MSS, TcpCongestion::Reno);
    assert_eq!(w.cwnd(), 10 * MSS);
    // Slow start: every byte delivered adds one.
    w.delivered(10 * MSS);
    assert_eq!(w.cwnd(), 20 * MSS);
    // A loss halves it, and a second one within the round trip does not.
    let t = Instant::ZERO + ms(100);
    assert!(w.lost(t, ms(40)));
    assert_eq!(w.cwnd(), 10 * MSS);
    assert!(!w.lost(t + ms(39), ms(40)));
    assert_eq!(w.cwnd(), 10 * MSS);
    // Past ssthresh, about one segment per window delivered.
    w.delivered(10 * MSS);
    assert_eq!(w.cwnd(), 11 * MSS);
    // Cut after cut, never under two segments.
    for i in 1..10u64 {
        w.lost(t + ms(100 * i), ms(40));
    }
    assert_eq!(w.cwnd(), 2 * MSS);
    // Never past the receive window.
    let small = Window::new(4 * MSS, TcpCongestion::Reno);
    assert_eq!(small.cwnd(), 4 * MSS);
    small.delivered(100 * MSS);
    assert_eq!(small.cwnd(), 4 * MSS);
    // Fixed: the receive window from the start, never cut.
    let fixed = Window::new(64 * MSS, TcpCongestion::Fixed);
    assert_eq!(fixed.cwnd(), 64 * MSS);
    assert!(!fixed.lost(t, ms(40)));
    assert_eq!(fixed.cwnd(), 64 * MSS);
}
